/* Validation of the compiled-file container: header, key block, section table and checksums
 * (layout in cache/format.h). Nothing here trusts a byte before checking it. */
#include "cache/format.h"

#include "cache/format_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool kn_cache_is_compiled(const void *data, size_t size) {
    return data && size >= KN_CACHE_MAGIC_LEN && !memcmp(data, KN_CACHE_MAGIC, KN_CACHE_MAGIC_LEN);
}

static uint64_t checksum(const void *p, size_t n, uint64_t seed) {
    kn_hash128 h = kn_hash(p, n, seed);
    return h.lo ^ h.hi;
}

static kiln_status bad(const kn_cfile *f, const char *part, const char *fmt, ...) KN_PRINTF(3, 4);
static kiln_status bad(const kn_cfile *f, const char *part, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kn_error(KILN_ERR_CACHE, "%s: %s: %s", f->path, part, msg);
}

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
}

static kiln_status parse_key_block(kn_cfile *f, const uint8_t *p, size_t n) {
    size_t i = 0;
    int line = 0;
    while (i < n && p[i]) {
        line++;
        const uint8_t *nl = memchr(p + i, '\n', n - i);
        if (!nl) return bad(f, "key block", "line %d does not end with a newline", line);
        size_t len = (size_t)(nl - (p + i));
        const uint8_t *eq = memchr(p + i, '=', len);
        if (!eq || eq == p + i) return bad(f, "key block", "line %d is not name=value", line);
        size_t nl_len = (size_t)(eq - (p + i));
        if (nl_len >= KN_KEY_NAME_MAX) return bad(f, "key block", "line %d: the field name is too long", line);
        char name[KN_KEY_NAME_MAX];
        memcpy(name, p + i, nl_len);
        name[nl_len] = 0;
        for (size_t k = 0; k < nl_len; k++)
            if (!name_char(name[k])) return bad(f, "key block", "line %d: the field name has a byte 0x%02x", line, (unsigned char)name[k]);
        size_t vl = len - nl_len - 1;
        char *value = malloc(vl + 1);
        if (!value) return KN_OOM();
        memcpy(value, eq + 1, vl);
        value[vl] = 0;
        for (size_t k = 0; k < vl; k++)
            if ((unsigned char)value[k] < 0x20 || value[k] == 0x7f) {
                free(value);
                return bad(f, "key block", "field '%s': the value has a control byte 0x%02x", name, (unsigned char)eq[1 + k]);
            }
        if (kn_cache_key_get(&f->fields, name)) {
            free(value);
            return bad(f, "key block", "field '%s' appears twice", name);
        }
        if (f->fields.n >= KN_KEY_MAX_FIELDS) {
            free(value);
            return bad(f, "key block", "more than %d fields", KN_KEY_MAX_FIELDS);
        }
        /* stored as read: already in escaped form */
        snprintf(f->fields.f[f->fields.n].name, KN_KEY_NAME_MAX, "%s", name);
        f->fields.f[f->fields.n].value = value;
        f->fields.n++;
        i += len + 1;
    }
    for (; i < n; i++)
        if (p[i]) return bad(f, "key block", "byte %zu after the last field is not padding", i);
    return KILN_OK;
}

kiln_status kn_cfile_parse(kn_cfile *f, size_t file_size, bool header_only) {
    const uint8_t *d = f->data;
    size_t n = f->size;
    if (file_size < KN_CACHE_HEADER_SIZE || n < KN_CACHE_HEADER_SIZE)
        return bad(f, "header", "the file is %zu bytes, shorter than the %d-byte header (truncated)", file_size,
                   KN_CACHE_HEADER_SIZE);
    if (memcmp(d, KN_CACHE_MAGIC, KN_CACHE_MAGIC_LEN))
        return bad(f, "header", "field 'magic': not a kiln compiled file (it does not start with \"" KN_CACHE_MAGIC "\")");
    f->version = kn_rd32(d + 8);
    if (f->version != KN_CACHE_FORMAT_VERSION)
        return bad(f, "header", "field 'format version': cache format version %d != %u in file (this kiln reads "
                   "version %d only)", KN_CACHE_FORMAT_VERSION, f->version, KN_CACHE_FORMAT_VERSION);
    if (checksum(d, 56, KN_SEED_HEADER) != kn_rd64(d + 56))
        return bad(f, "header", "field 'header checksum': checksum mismatch in the header (the file is corrupt)");
    if (kn_rd32(d + 12) != KN_CACHE_HEADER_SIZE)
        return bad(f, "header", "field 'header size': %u, expected %d", kn_rd32(d + 12), KN_CACHE_HEADER_SIZE);
    uint64_t fsize = kn_rd64(d + 16);
    if (fsize != file_size)
        return bad(f, "header", "field 'file size': the header says %llu bytes but the file has %zu (%s)",
                   (unsigned long long)fsize, file_size, fsize > file_size ? "truncated" : "trailing bytes");
    uint32_t key_size = kn_rd32(d + 24), nsec = kn_rd32(d + 28);
    uint64_t table_off = kn_rd64(d + 32), body_sum = kn_rd64(d + 40);
    if (key_size > KN_CACHE_MAX_KEY_BLOCK || key_size % 8)
        return bad(f, "header", "field 'key block size': %u is not a multiple of 8 up to %d", key_size, KN_CACHE_MAX_KEY_BLOCK);
    if (nsec < 2 || nsec > KN_CACHE_MAX_SECTIONS)
        return bad(f, "header", "field 'section count': %u is outside 2..%d", nsec, KN_CACHE_MAX_SECTIONS);
    if (table_off != (uint64_t)KN_CACHE_HEADER_SIZE + key_size)
        return bad(f, "header", "field 'section table offset': %llu, expected %llu", (unsigned long long)table_off,
                   (unsigned long long)KN_CACHE_HEADER_SIZE + key_size);
    uint64_t table_end = table_off + (uint64_t)nsec * KN_CACHE_ENTRY_SIZE;
    if (table_end > file_size || table_end > n)
        return bad(f, "section table", "it ends at byte %llu, beyond the end of the file (%zu bytes: truncated)",
                   (unsigned long long)table_end, file_size);
    if (kn_rd64(d + 48) != 0) return bad(f, "header", "field 'reserved' is not 0");
    if (checksum(d + KN_CACHE_HEADER_SIZE, (size_t)(table_end - KN_CACHE_HEADER_SIZE), KN_SEED_BODY) != body_sum)
        return bad(f, "key block and section table", "checksum mismatch (the file is corrupt)");
    KN_TRY(parse_key_block(f, d + KN_CACHE_HEADER_SIZE, key_size));

    /* section table */
    int n_graph = 0, n_weights = 0;
    f->n_sections = (int)nsec;
    for (uint32_t i = 0; i < nsec; i++) {
        const uint8_t *e = d + table_off + (uint64_t)i * KN_CACHE_ENTRY_SIZE;
        kn_section *s = &f->sections[i];
        s->kind = kn_rd32(e);
        s->offset = kn_rd64(e + 8);
        s->size = kn_rd64(e + 16);
        s->checksum = kn_rd64(e + 24);
        memcpy(s->name, e + 32, KN_CACHE_SECTION_NAME);
        s->name[KN_CACHE_SECTION_NAME] = 0;
        char part[64];
        snprintf(part, sizeof part, "section table entry %u", i);
        size_t nl = strlen(s->name);
        if (nl == 0) return bad(f, part, "field 'name' is empty");
        for (size_t k = 0; k < nl; k++)
            if (!name_char(s->name[k])) return bad(f, part, "field 'name' has a byte 0x%02x", (unsigned char)s->name[k]);
        for (size_t k = nl; k < KN_CACHE_SECTION_NAME; k++)
            if (e[32 + k]) return bad(f, part, "field 'name' is not NUL-padded");
        snprintf(part, sizeof part, "section '%s'", s->name);
        if (s->kind < KN_SECT_GRAPH || s->kind > KN_SECT_BACKEND)
            return bad(f, part, "field 'kind': %u is not a section kind this kiln knows", s->kind);
        if (kn_rd32(e + 4)) return bad(f, part, "field 'flags': %u is not 0", kn_rd32(e + 4));
        if (s->offset % KN_CACHE_ALIGN || s->offset < table_end)
            return bad(f, part, "field 'offset': %llu is not %d-byte aligned after the section table", (unsigned long long)s->offset,
                       KN_CACHE_ALIGN);
        if (s->offset > file_size || s->size > file_size - s->offset)
            return bad(f, part, "bytes %llu..%llu lie beyond the end of the file (%zu bytes: truncated)",
                       (unsigned long long)s->offset, (unsigned long long)(s->offset + s->size), file_size);
        for (uint32_t j = 0; j < i; j++) {
            const kn_section *o = &f->sections[j];
            if (!strcmp(o->name, s->name)) return bad(f, part, "appears twice in the section table");
            if (s->offset < o->offset + o->size && o->offset < s->offset + s->size && s->size && o->size)
                return bad(f, part, "overlaps section '%s'", o->name);
        }
        n_graph += s->kind == KN_SECT_GRAPH;
        n_weights += s->kind == KN_SECT_WEIGHTS;
        s->data = header_only ? NULL : d + s->offset;
    }
    if (n_graph != 1 || n_weights != 1)
        return bad(f, "section table", "%d graph and %d weights sections, expected one of each", n_graph, n_weights);
    if (header_only) return KILN_OK;
    /* The padding between the table and the sections and between sections must be zeros, so that
     * every byte of the file is checked (a flipped padding byte is a sign of corruption too). */
    uint64_t at = table_end;
    int done[KN_CACHE_MAX_SECTIONS] = {0};
    for (int k = 0; k < f->n_sections; k++) {
        int next = -1;
        for (int i = 0; i < f->n_sections; i++)
            if (!done[i] && (next < 0 || f->sections[i].offset < f->sections[next].offset)) next = i;
        done[next] = 1;
        const kn_section *s = &f->sections[next];
        for (uint64_t b = at; b < s->offset; b++)
            if (d[b]) return bad(f, "padding", "byte %llu before section '%s' is not zero (the file is corrupt)",
                                 (unsigned long long)b, s->name);
        if (s->offset + s->size > at) at = s->offset + s->size;
    }
    if (at != file_size)
        return bad(f, "section table", "the sections end at byte %llu but the file has %zu bytes", (unsigned long long)at,
                   file_size);
    for (int i = 0; i < f->n_sections; i++) {
        kn_section *s = &f->sections[i];
        if (checksum(s->data, (size_t)s->size, KN_SEED_SECTION) != s->checksum) {
            char part[64];
            snprintf(part, sizeof part, "section '%s'", s->name);
            return bad(f, part, "checksum mismatch in section '%s' (the file is corrupt)", s->name);
        }
    }
    return KILN_OK;
}

const kn_section *kn_cfile_section(const kn_cfile *f, uint32_t kind, const char *name) {
    for (int i = 0; i < f->n_sections; i++)
        if (f->sections[i].kind == kind && (!name || !strcmp(f->sections[i].name, name))) return &f->sections[i];
    return NULL;
}

/* ---- key comparison ---- */

static int field_rank(const char *name) {
    if (!strcmp(name, "format")) return 0;
    if (!strcmp(name, "kiln")) return 1;
    if (!strcmp(name, "registry")) return 2;
    if (!strcmp(name, "build")) return 2;
    if (!strncmp(name, "device.", 7)) return 3;
    if (!strcmp(name, "model")) return 4;
    if (!strcmp(name, "options")) return 5;
    if (!strcmp(name, "shapes")) return 6;
    return 7;
}

static void show(char *buf, size_t cap, const char *v) {
    bool plain = *v && !strpbrk(v, " '");
    if (plain) snprintf(buf, cap, "%s", v);
    else snprintf(buf, cap, "'%s'", v);
}

int kn_cfile_compare_key(const kn_cfile *f, const kn_cache_key *want, bool env_only, char *why, size_t cap) {
    int diffs = 0, best = 99;
    if (cap) why[0] = 0;
    char label[96], a[512], b[512];
    for (int i = 0; i < want->n; i++) {
        const char *name = want->f[i].name;
        if (!strncmp(name, "info.", 5) || (env_only && !kn_cache_field_is_env(name))) continue;
        const char *have = kn_cache_key_get(&f->fields, name);
        if (have && !strcmp(have, want->f[i].value)) continue;
        diffs++;
        int rank = field_rank(name);
        if (rank >= best) continue;
        best = rank;
        kn_cache_field_label(name, label, sizeof label);
        show(a, sizeof a, want->f[i].value);
        if (have) {
            show(b, sizeof b, have);
            snprintf(why, cap, "%s %s != %s in file", label, a, b);
        } else {
            snprintf(why, cap, "%s %s is missing in file", label, a);
        }
    }
    /* a device field the session does not have: the file was compiled for a provider this
     * session does not use (other fields absent from `want` were left out on purpose) */
    for (int i = 0; i < f->fields.n; i++) {
        const char *name = f->fields.f[i].name;
        if (strncmp(name, "device.", 7)) continue;
        if (kn_cache_key_get(want, name)) continue;
        diffs++;
        int rank = field_rank(name);
        if (rank >= best) continue;
        best = rank;
        kn_cache_field_label(name, label, sizeof label);
        show(b, sizeof b, f->fields.f[i].value);
        snprintf(why, cap, "%s %s in file is not part of this session's key", label, b);
    }
    return diffs;
}

/* ---- checksum repair for the fuzzer and tests ---- */

void kn_cache_fix_checksums(uint8_t *d, size_t n) {
    if (n < KN_CACHE_HEADER_SIZE) return;
    uint32_t key_size = kn_rd32(d + 24), nsec = kn_rd32(d + 28);
    uint64_t table_off = kn_rd64(d + 32);
    if (nsec <= KN_CACHE_MAX_SECTIONS && table_off >= KN_CACHE_HEADER_SIZE && table_off <= n &&
        (uint64_t)nsec * KN_CACHE_ENTRY_SIZE <= n - table_off) {
        for (uint32_t i = 0; i < nsec; i++) {
            uint8_t *e = d + table_off + (uint64_t)i * KN_CACHE_ENTRY_SIZE;
            uint64_t off = kn_rd64(e + 8), size = kn_rd64(e + 16);
            if (off <= n && size <= n - off) kn_wr64(e + 24, checksum(d + off, (size_t)size, KN_SEED_SECTION));
        }
        (void)key_size;
        uint64_t end = table_off + (uint64_t)nsec * KN_CACHE_ENTRY_SIZE;
        kn_wr64(d + 40, checksum(d + KN_CACHE_HEADER_SIZE, (size_t)(end - KN_CACHE_HEADER_SIZE), KN_SEED_BODY));
    }
    kn_wr64(d + 56, checksum(d, 56, KN_SEED_HEADER));
}

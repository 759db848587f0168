/* Writes compiled files: the optimised graph, the weights (64-byte aligned, written straight from
 * the tensors, no copy) and the backend sections, with the key in clear (see cache/format.h). */
#include "cache/backend.h"
#include "cache/buf.h"
#include "cache/format.h"
#include "cache/graph_codec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct out_section {
    uint32_t kind;
    char name[KN_CACHE_SECTION_NAME + 1];
    kn_buf buf;                 /* the bytes, except for the weights */
    uint64_t offset, size, checksum;
} out_section;

/* Where bytes go: a file descriptor or a memory buffer. */
typedef struct sink {
    int fd;
    kn_buf *mem;
    const char *path;
    kiln_status st;
} sink;

static void sink_put(sink *s, const void *p, size_t n) {
    if (s->st != KILN_OK || n == 0) return;
    if (s->mem) {
        kn_buf_put(s->mem, p, n);
        if (s->mem->oom) s->st = KN_OOM();
        return;
    }
    static const uint8_t zeros[4096];
    const uint8_t *b = p;
    while (n) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        if (!p && chunk > sizeof zeros) chunk = sizeof zeros;
        ssize_t w = write(s->fd, p ? (const void *)b : (const void *)zeros, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            s->st = kn_error(KILN_ERR_IO, "cannot write compiled file '%s': %s", s->path,
                             w < 0 ? strerror(errno) : "write returned 0");
            return;
        }
        if (p) b += w;
        n -= (size_t)w;
    }
}

static uint64_t align_up(uint64_t v) { return (v + KN_CACHE_ALIGN - 1) & ~(uint64_t)(KN_CACHE_ALIGN - 1); }

static void hash_zeros(kn_hasher *h, size_t n) {
    static const uint8_t zeros[256];
    while (n) {
        size_t c = n > sizeof zeros ? sizeof zeros : n;
        kn_hasher_update(h, zeros, c);
        n -= c;
    }
}

static kiln_status write_all(const kiln_session *sess, const kn_cache_key *key, sink *out) {
    const kn_model *m = sess->model;
    kn_graph_blobs blobs = {0};
    out_section secs[KN_CACHE_MAX_SECTIONS];
    int ns = 0;
    memset(secs, 0, sizeof secs);
    kn_buf keyb = {0}, table = {0};
    kiln_status st = KILN_OK;

    /* graph (with the weight layout it refers to) */
    secs[ns].kind = KN_SECT_GRAPH;
    snprintf(secs[ns].name, sizeof secs[ns].name, "graph");
    st = kn_graph_encode(m, &secs[ns].buf, &blobs);
    ns++;
    /* backend sections */
    for (const kn_cache_backend *b = kn_cache_backends; st == KILN_OK && b->section; b++) {
        out_section *s = &secs[ns];
        s->kind = KN_SECT_BACKEND;
        snprintf(s->name, sizeof s->name, "%s", b->section);
        st = b->save(sess, &s->buf);
        if (st == KILN_OK && s->buf.oom) st = KN_OOM();
        if (st == KILN_OK && s->buf.n) ns++;
        else kn_buf_free(&s->buf);
    }
    if (st != KILN_OK) goto done;
    /* weights: last, so their alignment holds whatever the other sections' sizes are */
    out_section *wsec = &secs[ns++];
    wsec->kind = KN_SECT_WEIGHTS;
    snprintf(wsec->name, sizeof wsec->name, "weights");
    wsec->size = blobs.total;

    /* the key block: every field in clear */
    for (int i = 0; i < key->n; i++) {
        kn_buf_put(&keyb, key->f[i].name, strlen(key->f[i].name));
        kn_buf_u8(&keyb, '=');
        kn_buf_put(&keyb, key->f[i].value, strlen(key->f[i].value));
        kn_buf_u8(&keyb, '\n');
    }
    kn_buf_zeros(&keyb, (8 - keyb.n % 8) % 8);
    if (keyb.oom) {
        st = KN_OOM();
        goto done;
    }
    if (keyb.n > KN_CACHE_MAX_KEY_BLOCK) {
        st = kn_error(KILN_ERR_CACHE, "the key block is %zu bytes, more than the format allows (%d)", keyb.n,
                      KN_CACHE_MAX_KEY_BLOCK);
        goto done;
    }

    /* layout and checksums */
    uint64_t table_off = KN_CACHE_HEADER_SIZE + keyb.n;
    uint64_t pos = align_up(table_off + (uint64_t)ns * KN_CACHE_ENTRY_SIZE);
    for (int i = 0; i < ns; i++) {
        out_section *s = &secs[i];
        s->offset = pos;
        if (s->kind != KN_SECT_WEIGHTS) {
            s->size = s->buf.n;
            kn_hash128 h = kn_hash(s->buf.d ? s->buf.d : (const uint8_t *)"", s->buf.n, KN_SEED_SECTION);
            s->checksum = h.lo ^ h.hi;
        } else {
            kn_hasher h;
            kn_hasher_init(&h, KN_SEED_SECTION);
            uint64_t at = 0;
            for (int b = 0; b < blobs.n; b++) {
                hash_zeros(&h, (size_t)(blobs.items[b].offset - at));
                kn_hasher_update(&h, blobs.items[b].data, blobs.items[b].size);
                at = blobs.items[b].offset + blobs.items[b].size;
            }
            hash_zeros(&h, (size_t)(blobs.total - at));
            kn_hash128 r = kn_hasher_final(&h);
            s->checksum = r.lo ^ r.hi;
        }
        pos = align_up(pos + s->size);
    }
    uint64_t file_size = secs[ns - 1].offset + secs[ns - 1].size;
    for (int i = 0; i < ns; i++) {
        uint8_t e[KN_CACHE_ENTRY_SIZE] = {0};
        kn_wr32(e, secs[i].kind);
        kn_wr64(e + 8, secs[i].offset);
        kn_wr64(e + 16, secs[i].size);
        kn_wr64(e + 24, secs[i].checksum);
        memcpy(e + 32, secs[i].name, strlen(secs[i].name));
        kn_buf_put(&table, e, sizeof e);
    }
    if (table.oom) {
        st = KN_OOM();
        goto done;
    }
    kn_hasher bh;
    kn_hasher_init(&bh, KN_SEED_BODY);
    kn_hasher_update(&bh, keyb.d, keyb.n);
    kn_hasher_update(&bh, table.d, table.n);
    kn_hash128 body = kn_hasher_final(&bh);
    uint8_t hdr[KN_CACHE_HEADER_SIZE] = {0};
    memcpy(hdr, KN_CACHE_MAGIC, KN_CACHE_MAGIC_LEN);
    kn_wr32(hdr + 8, KN_CACHE_FORMAT_VERSION);
    kn_wr32(hdr + 12, KN_CACHE_HEADER_SIZE);
    kn_wr64(hdr + 16, file_size);
    kn_wr32(hdr + 24, (uint32_t)keyb.n);
    kn_wr32(hdr + 28, (uint32_t)ns);
    kn_wr64(hdr + 32, table_off);
    kn_wr64(hdr + 40, body.lo ^ body.hi);
    kn_hash128 hh = kn_hash(hdr, 56, KN_SEED_HEADER);
    kn_wr64(hdr + 56, hh.lo ^ hh.hi);

    /* bytes, in file order */
    uint64_t at = 0;
    sink_put(out, hdr, sizeof hdr);
    sink_put(out, keyb.d, keyb.n);
    sink_put(out, table.d, table.n);
    at = table_off + table.n;
    for (int i = 0; i < ns; i++) {
        out_section *s = &secs[i];
        sink_put(out, NULL, (size_t)(s->offset - at));
        at = s->offset;
        if (s->kind != KN_SECT_WEIGHTS) {
            sink_put(out, s->buf.d, s->buf.n);
            at += s->buf.n;
        } else {
            uint64_t w = 0;
            for (int b = 0; b < blobs.n; b++) {
                sink_put(out, NULL, (size_t)(blobs.items[b].offset - w));
                sink_put(out, blobs.items[b].data, blobs.items[b].size);
                w = blobs.items[b].offset + blobs.items[b].size;
            }
            sink_put(out, NULL, (size_t)(blobs.total - w));
            at += blobs.total;
        }
    }
    st = out->st;
done:
    for (int i = 0; i < KN_CACHE_MAX_SECTIONS; i++) kn_buf_free(&secs[i].buf);
    kn_buf_free(&keyb);
    kn_buf_free(&table);
    free(blobs.items);
    return st;
}

kiln_status kn_cache_write_memory(const kiln_session *sess, const kn_cache_key *key, uint8_t **data_out,
                                  size_t *size_out) {
    *data_out = NULL;
    *size_out = 0;
    kn_buf mem = {0};
    sink s = {-1, &mem, "<memory>", KILN_OK};
    kiln_status st = write_all(sess, key, &s);
    if (st != KILN_OK) {
        kn_buf_free(&mem);
        return st;
    }
    *data_out = mem.d;
    *size_out = mem.n;
    return KILN_OK;
}

static atomic_uint kn_tmp_counter;

static kiln_status write_file(const char *path, const kiln_session *sess, const kn_cache_key *key, bool entry) {
    /* a temporary file in the same folder, so the rename is atomic */
    size_t pl = strlen(path) + 64;
    char *tmp = malloc(pl);
    if (!tmp) return KN_OOM();
    snprintf(tmp, pl, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&kn_tmp_counter, 1));
    /* O_EXCL and O_NOFOLLOW: never through a name someone else put there first */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, entry ? 0600 : 0644);
    if (fd < 0) {
        kiln_status st = kn_error(KILN_ERR_IO, "cannot create compiled file '%s' (temporary '%s'): %s", path, tmp,
                                  strerror(errno));
        free(tmp);
        return st;
    }
    sink s = {fd, NULL, path, KILN_OK};
    kiln_status st = write_all(sess, key, &s);
    if (st == KILN_OK && fsync(fd) != 0)
        st = kn_error(KILN_ERR_IO, "cannot write compiled file '%s': fsync: %s", path, strerror(errno));
    if (close(fd) != 0 && st == KILN_OK)
        st = kn_error(KILN_ERR_IO, "cannot write compiled file '%s': close: %s", path, strerror(errno));
    if (st == KILN_OK && rename(tmp, path) != 0)
        st = kn_error(KILN_ERR_IO, "cannot write compiled file '%s': rename from '%s': %s", path, tmp, strerror(errno));
    if (st != KILN_OK) {
        unlink(tmp);
        free(tmp);
        return st;
    }
    free(tmp);
    /* make the rename itself durable */
    char *dir = strdup(path);
    if (dir) {
        char *slash = strrchr(dir, '/');
        const char *d = ".";
        if (slash) {
            if (slash == dir) slash[1] = 0;
            else *slash = 0;
            d = dir;
        }
        int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(dir);
    }
    return KILN_OK;
}

kiln_status kn_cache_write(const char *path, const kiln_session *sess, const kn_cache_key *key) {
    return write_file(path, sess, key, false);
}

kiln_status kn_cache_write_entry(const char *path, const kiln_session *sess, const kn_cache_key *key) {
    return write_file(path, sess, key, true);
}

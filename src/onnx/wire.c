#include "onnx/wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const wire_names[8] = {"varint",    "64-bit",    "length-delimited", "group start",
                                          "group end", "32-bit",    "invalid (6)",      "invalid (7)"};

void kn_pb_init(kn_pb *r, const uint8_t *data, size_t size, const kn_pb_desc *desc) {
    r->base = data;
    r->size = size;
    r->pos = 0;
    r->end = size;
    r->desc = desc;
    r->depth = 0;
}

const char *kn_pb_field_label(const kn_pb *r, uint32_t num, char *buf, size_t cap) {
    const char *msg = r->desc && r->desc->name ? r->desc->name : "message";
    const char *field = r->desc && num < (uint32_t)r->desc->n_fields ? r->desc->fields[num] : NULL;
    if (field)
        snprintf(buf, cap, "%s.%s", msg, field);
    else
        snprintf(buf, cap, "%s field %u", msg, num);
    return buf;
}

kiln_status kn_pb_error(const kn_pb *r, const kn_pb_field *f, kiln_status st, const char *fmt, ...) {
    char label[160], detail[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return kn_error(st, "%s at byte offset %zu: %s", kn_pb_field_label(r, f->num, label, sizeof label),
                    f->tag_off, detail);
}

/* Decodes a varint at *pos (< end). Returns 0 on success, -1 when truncated, -2 when longer than
 * 10 bytes. */
static int read_varint(const uint8_t *base, size_t *pos, size_t end, uint64_t *out) {
    uint64_t v = 0;
    size_t p = *pos;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end) return -1;
        uint8_t b = base[p++];
        if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *pos = p;
            *out = v;
            return 0;
        }
    }
    return -2;
}

static uint64_t load_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

int kn_pb_next(kn_pb *r, kn_pb_field *f) {
    memset(f, 0, sizeof *f);
    if (r->pos >= r->end) return 0;
    f->tag_off = r->pos;
    const char *msg = r->desc && r->desc->name ? r->desc->name : "message";
    uint64_t tag;
    int rc = read_varint(r->base, &r->pos, r->end, &tag);
    if (rc) {
        kn_error(KILN_ERR_INVALID_MODEL, "%s at byte offset %zu: %s field tag (the data is truncated or corrupt)",
                 msg, f->tag_off, rc == -1 ? "truncated" : "over-long");
        return -1;
    }
    if ((tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) {
        kn_error(KILN_ERR_INVALID_MODEL, "%s at byte offset %zu: invalid field number %llu (the data is corrupt)",
                 msg, f->tag_off, (unsigned long long)(tag >> 3));
        return -1;
    }
    f->num = (uint32_t)(tag >> 3);
    f->wire = (kn_pb_wire)(tag & 7);
    char label[160];
    switch ((int)(tag & 7)) {
    case KN_PB_VARINT:
        rc = read_varint(r->base, &r->pos, r->end, &f->u);
        if (rc) {
            kn_error(KILN_ERR_INVALID_MODEL, "%s at byte offset %zu: %s varint",
                     kn_pb_field_label(r, f->num, label, sizeof label), f->tag_off,
                     rc == -1 ? "truncated" : "over-long");
            return -1;
        }
        return 1;
    case KN_PB_I64:
    case KN_PB_I32: {
        size_t n = (tag & 7) == KN_PB_I64 ? 8 : 4;
        if (r->end - r->pos < n) {
            kn_error(KILN_ERR_INVALID_MODEL,
                     "%s at byte offset %zu: %zu-byte value runs past the end of the enclosing %s (byte %zu; buffer size %zu)",
                     kn_pb_field_label(r, f->num, label, sizeof label), f->tag_off, n, msg, r->end, r->size);
            return -1;
        }
        f->u = load_le(r->base + r->pos, (int)n);
        r->pos += n;
        return 1;
    }
    case KN_PB_LEN: {
        uint64_t len;
        size_t len_off = r->pos;
        rc = read_varint(r->base, &r->pos, r->end, &len);
        if (rc) {
            kn_error(KILN_ERR_INVALID_MODEL, "%s at byte offset %zu: %s length varint",
                     kn_pb_field_label(r, f->num, label, sizeof label), len_off,
                     rc == -1 ? "truncated" : "over-long");
            return -1;
        }
        if (len > (uint64_t)(r->end - r->pos)) {
            if (r->end == r->size)
                kn_error(KILN_ERR_INVALID_MODEL,
                         "%s: length %llu at byte offset %zu runs past the end of the buffer (size %zu)",
                         kn_pb_field_label(r, f->num, label, sizeof label), (unsigned long long)len, len_off, r->size);
            else
                kn_error(KILN_ERR_INVALID_MODEL,
                         "%s: length %llu at byte offset %zu runs past the end of the enclosing %s (which ends at byte %zu; buffer size %zu)",
                         kn_pb_field_label(r, f->num, label, sizeof label), (unsigned long long)len, len_off, msg,
                         r->end, r->size);
            return -1;
        }
        f->off = r->pos;
        f->len = (size_t)len;
        r->pos += (size_t)len;
        return 1;
    }
    default:
        kn_error(KILN_ERR_INVALID_MODEL, "%s at byte offset %zu: wire type %d (%s) is not supported%s",
                 kn_pb_field_label(r, f->num, label, sizeof label), f->tag_off, (int)(tag & 7),
                 wire_names[tag & 7], ((tag & 7) == 3 || (tag & 7) == 4) ? " (protobuf groups are not used by ONNX)" : "");
        return -1;
    }
}

kiln_status kn_pb_want(const kn_pb *r, const kn_pb_field *f, kn_pb_wire wire) {
    if (f->wire == wire) return KILN_OK;
    return kn_pb_error(r, f, KILN_ERR_INVALID_MODEL, "wire type %d (%s), expected %d (%s)", (int)f->wire,
                       wire_names[f->wire & 7], (int)wire, wire_names[wire & 7]);
}

kiln_status kn_pb_int64(const kn_pb *r, const kn_pb_field *f, int64_t *out) {
    KN_TRY(kn_pb_want(r, f, KN_PB_VARINT));
    *out = (int64_t)f->u;
    return KILN_OK;
}

kiln_status kn_pb_int32(const kn_pb *r, const kn_pb_field *f, int32_t *out) {
    KN_TRY(kn_pb_want(r, f, KN_PB_VARINT));
    *out = (int32_t)(uint32_t)f->u;
    return KILN_OK;
}

kiln_status kn_pb_float(const kn_pb *r, const kn_pb_field *f, float *out) {
    KN_TRY(kn_pb_want(r, f, KN_PB_I32));
    uint32_t bits = (uint32_t)f->u;
    memcpy(out, &bits, sizeof bits);
    return KILN_OK;
}

kiln_status kn_pb_bytes(const kn_pb *r, const kn_pb_field *f, const uint8_t **data, size_t *len) {
    KN_TRY(kn_pb_want(r, f, KN_PB_LEN));
    *data = r->base + f->off;
    *len = f->len;
    return KILN_OK;
}

kiln_status kn_pb_sub(const kn_pb *r, const kn_pb_field *f, const kn_pb_desc *desc, kn_pb *out) {
    KN_TRY(kn_pb_want(r, f, KN_PB_LEN));
    if (r->depth + 1 > KN_PB_MAX_DEPTH)
        return kn_pb_error(r, f, KILN_ERR_INVALID_MODEL, "messages nest more than %d deep", KN_PB_MAX_DEPTH);
    out->base = r->base;
    out->size = r->size;
    out->pos = f->off;
    out->end = f->off + f->len;
    out->desc = desc;
    out->depth = r->depth + 1;
    return KILN_OK;
}

kiln_status kn_pb_count(const kn_pb *r, const kn_pb_field *f, kn_pb_wire elem, size_t *count) {
    if (f->wire == elem) {
        (*count)++;
        return KILN_OK;
    }
    if (f->wire != KN_PB_LEN)
        return kn_pb_error(r, f, KILN_ERR_INVALID_MODEL, "wire type %d (%s), expected %d (%s) or packed",
                           (int)f->wire, wire_names[f->wire & 7], (int)elem, wire_names[elem & 7]);
    const uint8_t *p = r->base + f->off;
    if (elem == KN_PB_VARINT) {
        /* every varint ends with the one byte whose high bit is clear */
        size_t n = 0, run = 0;
        for (size_t i = 0; i < f->len; i++) {
            if (p[i] & 0x80) {
                if (++run >= 10)
                    return kn_pb_error(r, f, KILN_ERR_INVALID_MODEL, "over-long varint in packed data at byte offset %zu",
                                       f->off + i);
            } else {
                run = 0;
                n++;
            }
        }
        if (run)
            return kn_pb_error(r, f, KILN_ERR_INVALID_MODEL, "packed varints (%zu bytes at byte offset %zu) end inside a varint",
                               f->len, f->off);
        *count += n;
        return KILN_OK;
    }
    size_t w = elem == KN_PB_I32 ? 4 : 8;
    if (f->len % w)
        return kn_pb_error(r, f, KILN_ERR_INVALID_MODEL, "packed %zu-byte values: length %zu is not a multiple of %zu",
                           w, f->len, w);
    *count += f->len / w;
    return KILN_OK;
}

static kiln_status too_many(const kn_pb *r, const kn_pb_field *f) {
    return kn_pb_error(r, f, KILN_ERR_INTERNAL, "more repeated elements than counted");
}

kiln_status kn_pb_read_varints(const kn_pb *r, const kn_pb_field *f, uint64_t *out, size_t cap, size_t *n) {
    if (f->wire == KN_PB_VARINT) {
        if (*n >= cap) return too_many(r, f);
        out[(*n)++] = f->u;
        return KILN_OK;
    }
    KN_TRY(kn_pb_want(r, f, KN_PB_LEN));
    size_t pos = f->off, end = f->off + f->len;
    while (pos < end) {
        uint64_t v;
        if (read_varint(r->base, &pos, end, &v))
            return kn_pb_error(r, f, KILN_ERR_INVALID_MODEL, "malformed packed varint");
        if (*n >= cap) return too_many(r, f);
        out[(*n)++] = v;
    }
    return KILN_OK;
}

kiln_status kn_pb_read_fixed32(const kn_pb *r, const kn_pb_field *f, uint32_t *out, size_t cap, size_t *n) {
    if (f->wire == KN_PB_I32) {
        if (*n >= cap) return too_many(r, f);
        out[(*n)++] = (uint32_t)f->u;
        return KILN_OK;
    }
    KN_TRY(kn_pb_want(r, f, KN_PB_LEN));
    if (f->len % 4) return kn_pb_error(r, f, KILN_ERR_INVALID_MODEL, "packed 32-bit values: length %zu is not a multiple of 4", f->len);
    size_t k = f->len / 4;
    if (k > cap - *n) return too_many(r, f);
    const uint8_t *p = r->base + f->off;
    for (size_t i = 0; i < k; i++) out[*n + i] = (uint32_t)load_le(p + 4 * i, 4);
    *n += k;
    return KILN_OK;
}

kiln_status kn_pb_read_fixed64(const kn_pb *r, const kn_pb_field *f, uint64_t *out, size_t cap, size_t *n) {
    if (f->wire == KN_PB_I64) {
        if (*n >= cap) return too_many(r, f);
        out[(*n)++] = f->u;
        return KILN_OK;
    }
    KN_TRY(kn_pb_want(r, f, KN_PB_LEN));
    if (f->len % 8) return kn_pb_error(r, f, KILN_ERR_INVALID_MODEL, "packed 64-bit values: length %zu is not a multiple of 8", f->len);
    size_t k = f->len / 8;
    if (k > cap - *n) return too_many(r, f);
    const uint8_t *p = r->base + f->off;
    for (size_t i = 0; i < k; i++) out[*n + i] = load_le(p + 8 * i, 8);
    *n += k;
    return KILN_OK;
}

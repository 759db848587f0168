#include "cache/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kn_buf_free(kn_buf *b) {
    free(b->d);
    memset(b, 0, sizeof *b);
}

void kn_buf_put(kn_buf *b, const void *p, size_t n) {
    if (b->oom || n == 0) return;
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->n + n) nc *= 2;
        uint8_t *d = realloc(b->d, nc);
        if (!d) {
            b->oom = true;
            return;
        }
        b->d = d;
        b->cap = nc;
    }
    if (p) memcpy(b->d + b->n, p, n);
    else memset(b->d + b->n, 0, n);
    b->n += n;
}

void kn_buf_u8(kn_buf *b, uint8_t v) { kn_buf_put(b, &v, 1); }
void kn_buf_u32(kn_buf *b, uint32_t v) {
    uint8_t x[4];
    for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
    kn_buf_put(b, x, 4);
}
void kn_buf_u64(kn_buf *b, uint64_t v) {
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    kn_buf_put(b, x, 8);
}
void kn_buf_i32(kn_buf *b, int32_t v) { kn_buf_u32(b, (uint32_t)v); }
void kn_buf_i64(kn_buf *b, int64_t v) { kn_buf_u64(b, (uint64_t)v); }
void kn_buf_f32(kn_buf *b, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    kn_buf_u32(b, u);
}
void kn_buf_zeros(kn_buf *b, size_t n) { kn_buf_put(b, NULL, n); }

void kn_rd_init(kn_rd *r, const uint8_t *p, size_t size, const char *file, const char *section) {
    r->p = p;
    r->size = size;
    r->pos = 0;
    r->file = file ? file : "<memory>";
    r->section = section;
    r->st = KILN_OK;
}

kiln_status kn_rd_fail(kn_rd *r, const char *field, const char *fmt, ...) {
    if (r->st != KILN_OK) return r->st;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->st = kn_error(KILN_ERR_CACHE, "%s: section '%s', byte %zu, field '%s': %s", r->file, r->section, r->pos,
                     field, msg);
    return r->st;
}

static const uint8_t *take(kn_rd *r, size_t n, const char *field) {
    if (r->st != KILN_OK) return NULL;
    if (n > r->size - r->pos) {
        kn_rd_fail(r, field, "needs %zu bytes but the section has %zu left (truncated or corrupt)", n,
                   r->size - r->pos);
        return NULL;
    }
    const uint8_t *p = r->p + r->pos;
    r->pos += n;
    return p;
}

uint8_t kn_rd_u8(kn_rd *r, const char *field) {
    const uint8_t *p = take(r, 1, field);
    return p ? p[0] : 0;
}
uint32_t kn_rd_u32(kn_rd *r, const char *field) {
    const uint8_t *p = take(r, 4, field);
    return p ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24 : 0;
}
uint64_t kn_rd_u64(kn_rd *r, const char *field) {
    const uint8_t *p = take(r, 8, field);
    if (!p) return 0;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
int32_t kn_rd_i32(kn_rd *r, const char *field) { return (int32_t)kn_rd_u32(r, field); }
int64_t kn_rd_i64(kn_rd *r, const char *field) { return (int64_t)kn_rd_u64(r, field); }
float kn_rd_f32(kn_rd *r, const char *field) {
    uint32_t u = kn_rd_u32(r, field);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
const uint8_t *kn_rd_bytes(kn_rd *r, size_t n, const char *field) { return take(r, n, field); }

uint32_t kn_rd_count(kn_rd *r, size_t min_elem, uint32_t max, const char *field) {
    size_t pos = r->pos;
    uint32_t n = kn_rd_u32(r, field);
    if (r->st != KILN_OK) return 0;
    if (n > max) {
        r->pos = pos;
        kn_rd_fail(r, field, "count %u exceeds the limit %u", n, max);
        return 0;
    }
    if (min_elem && (uint64_t)n * min_elem > r->size - r->pos) {
        r->pos = pos;
        kn_rd_fail(r, field, "count %u needs at least %llu bytes but the section has %zu left", n,
                   (unsigned long long)n * min_elem, r->size - r->pos - 4);
        return 0;
    }
    return n;
}

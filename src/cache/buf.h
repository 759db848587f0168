/* Byte buffers for writing compiled-file sections, and a bounds-checked cursor for reading them.
 *
 * The cursor never reads outside its range: every read checks the bytes left first, and the first
 * failure sets an error naming the file, the section, the byte offset in the section and the field
 * being read; later reads then return zeros, so parsers check the status once per record. */
#ifndef KN_CACHE_BUF_H
#define KN_CACHE_BUF_H

#include "util/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kn_buf {
    uint8_t *d;
    size_t n, cap;
    bool oom;
} kn_buf;

void kn_buf_free(kn_buf *b);
void kn_buf_put(kn_buf *b, const void *p, size_t n);
void kn_buf_u8(kn_buf *b, uint8_t v);
void kn_buf_u32(kn_buf *b, uint32_t v);
void kn_buf_u64(kn_buf *b, uint64_t v);
void kn_buf_i32(kn_buf *b, int32_t v);
void kn_buf_i64(kn_buf *b, int64_t v);
void kn_buf_f32(kn_buf *b, float v);
void kn_buf_zeros(kn_buf *b, size_t n);

typedef struct kn_rd {
    const uint8_t *p;
    size_t size, pos;
    const char *file;    /* for messages */
    const char *section; /* for messages */
    kiln_status st;
} kn_rd;

void kn_rd_init(kn_rd *r, const uint8_t *p, size_t size, const char *file, const char *section);
/* Fails the cursor with a message naming the file, section, offset and field. */
kiln_status kn_rd_fail(kn_rd *r, const char *field, const char *fmt, ...) KN_PRINTF(3, 4);
uint8_t kn_rd_u8(kn_rd *r, const char *field);
uint32_t kn_rd_u32(kn_rd *r, const char *field);
uint64_t kn_rd_u64(kn_rd *r, const char *field);
int32_t kn_rd_i32(kn_rd *r, const char *field);
int64_t kn_rd_i64(kn_rd *r, const char *field);
float kn_rd_f32(kn_rd *r, const char *field);
/* n bytes in place (NULL on failure). */
const uint8_t *kn_rd_bytes(kn_rd *r, size_t n, const char *field);
/* A count of elements each at least min_elem bytes long, checked against the bytes left (so a
 * hostile count cannot make the parser allocate more than the file could describe), and against
 * max. */
uint32_t kn_rd_count(kn_rd *r, size_t min_elem, uint32_t max, const char *field);
static inline bool kn_rd_ok(const kn_rd *r) { return r->st == KILN_OK; }
static inline size_t kn_rd_left(const kn_rd *r) { return r->size - r->pos; }

#endif

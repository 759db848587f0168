/* A small protobuf writer for tests that write ONNX files byte by byte (fields by number from
 * onnx.proto): a growing buffer (pbw), varints, tagged ints, floats, bytes, strings, packed ints,
 * nested messages, and ONNX's ValueInfoProto. Static functions, so a test file uses only what it
 * needs. */
#ifndef KN_TEST_PB_WRITER_H
#define KN_TEST_PB_WRITER_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct pbw {
    uint8_t *d;
    size_t n, cap;
} pbw;

static inline void w_raw(pbw *w, const void *p, size_t n) {
    if (w->n + n > w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 64;
        while (nc < w->n + n) nc *= 2;
        w->d = realloc(w->d, nc);
        if (!w->d) abort(); /* test harness only */
        w->cap = nc;
    }
    if (n) memcpy(w->d + w->n, p, n);
    w->n += n;
}
static inline void w_varint(pbw *w, uint64_t v) {
    while (v >= 0x80) {
        uint8_t b = (uint8_t)(v | 0x80);
        w_raw(w, &b, 1);
        v >>= 7;
    }
    uint8_t b = (uint8_t)v;
    w_raw(w, &b, 1);
}
static inline void w_tag(pbw *w, int f, int wt) { w_varint(w, ((uint64_t)f << 3) | (uint64_t)wt); }
static inline void w_int(pbw *w, int f, int64_t v) {
    w_tag(w, f, 0);
    w_varint(w, (uint64_t)v);
}
static inline void w_bytes(pbw *w, int f, const void *p, size_t n) {
    w_tag(w, f, 2);
    w_varint(w, n);
    w_raw(w, p, n);
}
static inline void w_str(pbw *w, int f, const char *s) { w_bytes(w, f, s, strlen(s)); }
static inline void w_float(pbw *w, int f, float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    uint8_t le[4] = {(uint8_t)b, (uint8_t)(b >> 8), (uint8_t)(b >> 16), (uint8_t)(b >> 24)};
    w_tag(w, f, 5);
    w_raw(w, le, 4);
}
/* Appends sub as a length-delimited field and frees it. */
static inline void w_msg(pbw *w, int f, pbw *sub) {
    w_bytes(w, f, sub->d, sub->n);
    free(sub->d);
    memset(sub, 0, sizeof *sub);
}
static inline void w_packed_ints(pbw *w, int f, const int64_t *v, int n) {
    pbw p = {0};
    for (int i = 0; i < n; i++) w_varint(&p, (uint64_t)v[i]);
    w_msg(w, f, &p);
}

/* An ONNX ValueInfoProto: name, a tensor of element type elem and `rank` dims (rank < 0: no
 * shape; dims[i] < 0: dim_param "N"). */
static inline pbw value_info(const char *name, int elem, int rank, const int64_t *dims) {
    pbw shape = {0}, tt = {0}, tp = {0}, vi = {0};
    for (int i = 0; i < rank; i++) {
        pbw d = {0};
        if (dims[i] >= 0) w_int(&d, 1, dims[i]);
        else w_str(&d, 2, "N");
        w_msg(&shape, 1, &d);
    }
    w_int(&tt, 1, elem);
    if (rank >= 0) w_msg(&tt, 2, &shape);
    free(shape.d);
    w_msg(&tp, 1, &tt);
    w_str(&vi, 1, name);
    w_msg(&vi, 2, &tp);
    return vi;
}

#endif

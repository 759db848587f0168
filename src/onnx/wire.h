/* A protobuf wire-format reader over a byte buffer. Every tag, varint, length and fixed-size value
 * is bounds-checked against the enclosing message; errors are KILN_ERR_INVALID_MODEL with the byte
 * offset (from the start of the whole buffer) and the message and field being read. Messages nest
 * at most KN_PB_MAX_DEPTH deep, so a hostile file cannot exhaust the stack through recursion. */
#ifndef KN_WIRE_H
#define KN_WIRE_H

#include "util/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KN_PB_MAX_DEPTH 100

typedef enum kn_pb_wire {
    KN_PB_VARINT = 0,
    KN_PB_I64 = 1,
    KN_PB_LEN = 2,
    KN_PB_I32 = 5,
} kn_pb_wire;

/* A message type: its name and the names of its fields by number (for messages). */
typedef struct kn_pb_desc {
    const char *name;
    const char *const *fields; /* indexed by field number; NULL entries for unnamed numbers */
    int n_fields;
} kn_pb_desc;

/* A reader positioned inside one message. */
typedef struct kn_pb {
    const uint8_t *base; /* the whole buffer; offsets in messages are relative to it */
    size_t size;         /* of the whole buffer */
    size_t pos, end;     /* the unread part of this message */
    const kn_pb_desc *desc;
    int depth;
} kn_pb;

/* One field as read: scalars in u (varint, fixed64, fixed32 as raw bits), payloads as a range. */
typedef struct kn_pb_field {
    uint32_t num;
    kn_pb_wire wire;
    uint64_t u;
    size_t off, len; /* LEN: payload offset in the buffer and its length */
    size_t tag_off;  /* where the field's tag starts */
} kn_pb_field;

/* A reader over a whole buffer as a top-level message. */
void kn_pb_init(kn_pb *r, const uint8_t *data, size_t size, const kn_pb_desc *desc);
/* The next field: 1 when one was read, 0 at the end of the message, -1 on a malformed field
 * (the error is set). */
int kn_pb_next(kn_pb *r, kn_pb_field *f);
/* "NodeProto.attribute" for messages (into buf). */
const char *kn_pb_field_label(const kn_pb *r, uint32_t num, char *buf, size_t cap);

/* Typed access to the field just read; each checks the wire type and sets a message naming the
 * field and its offset on mismatch. */
kiln_status kn_pb_want(const kn_pb *r, const kn_pb_field *f, kn_pb_wire wire);
kiln_status kn_pb_int64(const kn_pb *r, const kn_pb_field *f, int64_t *out);
kiln_status kn_pb_int32(const kn_pb *r, const kn_pb_field *f, int32_t *out); /* truncated as protobuf does */
kiln_status kn_pb_float(const kn_pb *r, const kn_pb_field *f, float *out);
/* A string/bytes payload, borrowed from the buffer (not NUL-terminated). */
kiln_status kn_pb_bytes(const kn_pb *r, const kn_pb_field *f, const uint8_t **data, size_t *len);
/* A reader over an embedded message (depth-limited). */
kiln_status kn_pb_sub(const kn_pb *r, const kn_pb_field *f, const kn_pb_desc *desc, kn_pb *out);

/* Repeated scalar fields arrive packed (one LEN field) or one element per field. `elem` is the
 * wire type of one element (VARINT, I32 or I64). kn_pb_count adds the number of elements the
 * field holds to *count (checking that a packed payload is well formed); kn_pb_read_* decode
 * them into out[*n ..] (at most cap - *n of them) and advance *n. */
kiln_status kn_pb_count(const kn_pb *r, const kn_pb_field *f, kn_pb_wire elem, size_t *count);
kiln_status kn_pb_read_varints(const kn_pb *r, const kn_pb_field *f, uint64_t *out, size_t cap, size_t *n);
kiln_status kn_pb_read_fixed32(const kn_pb *r, const kn_pb_field *f, uint32_t *out, size_t cap, size_t *n);
kiln_status kn_pb_read_fixed64(const kn_pb *r, const kn_pb_field *f, uint64_t *out, size_t cap, size_t *n);

/* An error about field f of the message r, prefixed "<Message>.<field> at byte offset N: ". */
kiln_status kn_pb_error(const kn_pb *r, const kn_pb_field *f, kiln_status st, const char *fmt, ...)
    KN_PRINTF(4, 5);

#endif

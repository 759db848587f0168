/* Shared between the ONNX loader's files: the load context, the message descriptors and the
 * TensorProto / TypeProto readers. */
#ifndef KN_LOADER_INTERNAL_H
#define KN_LOADER_INTERNAL_H

#include "ir/graph.h"
#include "onnx/wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/file.h"

typedef struct kn_load {
    kn_model *m;          /* NULL when parsing a standalone value */
    bool view_ok;         /* the buffer outlives the model (a mapping it owns): tensors may point into it */
    const char *base_dir; /* folder for external data, or NULL */
    char *base_real;      /* realpath(base_dir), computed on first use (malloc'ed) */
    bool hardlink_ok;     /* the external data file (dev, ino) below has several names, all in the folder */
    uint64_t hardlink_dev, hardlink_ino;
    struct kn_nmap *symbols; /* interned dim_param names (model arena) */
    int n_views;          /* tensors made views into the buffer */
    /* Raw tensors to copy once parsing succeeds, into one block (see kn_load_apply_copies);
     * until then they point (unaligned) into the buffer. NULL list: copy each at once. */
    bool defer_copies;
    struct kn_copy *copies;
    int n_copies, cap_copies;
} kn_load;

typedef struct kn_copy {
    kn_tensor *t;
    const uint8_t *src;
    size_t nbytes, elem; /* elem: the byte-swap unit on big-endian hosts */
} kn_copy;

/* Copies every deferred tensor into one model-owned block (a UINT8 tensor registered with
 * kn_model_own_tensor) and points the tensors at it; frees the list. */
kiln_status kn_load_apply_copies(kn_load *L);

extern const kn_pb_desc kn_desc_tensor, kn_desc_type, kn_desc_value_info, kn_desc_sequence,
    kn_desc_optional;

/* Parses the TensorProto `r` is positioned on into a new owning (or, when L->view_ok, possibly
 * view) tensor. *name / *name_len receive the name (borrowed from the buffer). The caller owns
 * the tensor. Errors start with "tensor 'name': " when the name is known. */
kiln_status kn_load_tensor(kn_load *L, kn_pb *r, kn_tensor **out, const uint8_t **name, size_t *name_len);

/* Parses a TypeProto into t. `what` names the value for messages. */
kiln_status kn_load_type(kn_load *L, kn_pb *r, kn_type *t, const char *what);

/* Adds context ("node 'x' (Conv): ") in front of the current error message, unless the message
 * is already long (deeply nested graphs): then the cause at its end is kept instead. */
kiln_status kn_load_prefix(kiln_status st, const char *fmt, ...) KN_PRINTF(2, 3);

/* Validates an ONNX data type number read from the file. */
kiln_status kn_load_check_dtype(const kn_pb *r, const kn_pb_field *f, int64_t v, bool allow_undefined,
                                const char *what);

/* A name -> int map keyed by (pointer, length) strings that must outlive the map. */
typedef struct kn_nmap_entry {
    const char *key;
    uint32_t len, hash;
    int val;
} kn_nmap_entry;
typedef struct kn_nmap {
    kn_nmap_entry *e;
    size_t cap, n;
} kn_nmap;

void kn_nmap_free(kn_nmap *m);
/* The entry for key, or NULL. */
kn_nmap_entry *kn_nmap_get(const kn_nmap *m, const char *key, size_t len);
/* Inserts or overwrites; -1 on out of memory. */
int kn_nmap_put(kn_nmap *m, const char *key, size_t len, int val);

#endif

/* Helpers of the signal family shared by its shape inference (src/ops/signal.c) and its CPU
 * kernels (src/backend/cpu/signal.c). */
#ifndef KN_OPS_SIGNAL_H
#define KN_OPS_SIGNAL_H

#include "ops/op.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct kn_dft_params {
    int axis;        /* the signal axis, in [0, rank - 2] */
    bool inverse, onesided;
    int64_t n;       /* the transform length; -1 when not known yet */
    int64_t out_len; /* output length along axis; -1 when not known yet */
    int out_last;    /* 2 (complex) or 1 (real: inverse and onesided) */
} kn_dft_params;

/* Reads DFT's attributes and inputs for an input of `rank` whose signal axis has length `len`
 * (-1 = unknown). dft_length/axis are the inputs' values, NULL when absent; *_pending when the
 * input is there but its value is not known yet (load time). Errors name the reason in why. */
kiln_status kn_dft_params_get(const kn_node *node, int rank, const int64_t *dims, const kn_tensor *dft_length,
                              bool length_pending, const kn_tensor *axis, bool axis_pending, kn_dft_params *p,
                              char *why, size_t cap);
/* DFT's attributes, read once (kn_dft_attrs_read): inverse, onesided, and axis (before opset 20) */
typedef struct kn_dft_attrs {
    bool inverse, onesided;
    int64_t axis;
} kn_dft_attrs;
void kn_dft_attrs_read(const kn_node *node, kn_dft_attrs *a);
/* kn_dft_params_get with the attributes already read */
kiln_status kn_dft_params_get_with(const kn_node *node, const kn_dft_attrs *a, int rank, const int64_t *dims,
                                   const kn_tensor *dft_length, bool length_pending, const kn_tensor *axis,
                                   bool axis_pending, kn_dft_params *p, char *why, size_t cap);

#endif

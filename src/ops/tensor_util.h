/* Parameter resolution shared by the tensor family's shape inference (src/ops/tensor.c) and its
 * kernels (src/backend/cpu/tensor*.c), so both read Slice/Pad/Split parameters the same way.
 *
 * Each function takes the node and the values of its inputs (`vals[i]`, NULL when unknown or
 * omitted): in infer that is c->in_value, in a kernel c->in. Errors are written to `why` (no node
 * prefix; the caller adds it) and returned as a status. `*known` is false when a value the result
 * depends on is not known yet (shape inference at load time). */
#ifndef KN_OPS_TENSOR_UTIL_H
#define KN_OPS_TENSOR_UTIL_H

#include "ir/graph.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Elements of an integer tensor of rank <= 1 into vals (at most cap); -1 when it is not one. */
int kn_tensor_ints(const kn_tensor *t, int64_t *vals, int cap);

/* Slice: per axis of the data, the first index, the step and the output length. Axes Slice does
 * not name keep start 0, step 1, len = dim. When dims[k] < 0 (unknown size) len[k] is -1, and
 * whole[k] says whether the slice provably keeps the whole axis (0 to the end with step 1). */
typedef struct kn_slice_plan {
    int64_t start[KILN_MAX_RANK], step[KILN_MAX_RANK], len[KILN_MAX_RANK];
    bool sliced[KILN_MAX_RANK];
    bool whole[KILN_MAX_RANK];
} kn_slice_plan;

kiln_status kn_slice_plan_make(const kn_node *n, const kn_tensor *const *vals, int n_vals,
                               const int64_t *dims, int rank, kn_slice_plan *p, bool *known,
                               char *why, size_t cap);
/* Slice's attributes (opset < 10: starts, ends, axes; later they are inputs), read once: the
 * prepare hook (kn_params_fn) of the Slice kernels, which pass the block to kn_slice_plan_from. The
 * pointers are the node's attribute arrays (they live as long as the node); NULL when absent. */
typedef struct kn_slice_prm {
    const int64_t *starts, *ends, *axes;
    int n_starts, n_ends, n_axes;
} kn_slice_prm;
kiln_status kn_slice_prepare(const kn_node *n, void *params);
/* kn_slice_plan_make with the attributes a kn_slice_prepare read. */
kiln_status kn_slice_plan_from(const kn_node *n, const kn_slice_prm *a, const kn_tensor *const *vals, int n_vals,
                               const int64_t *dims, int rank, kn_slice_plan *p, bool *known, char *why,
                               size_t cap);
/* The ONNX clamping of one axis: start/end adjusted for negatives and clamped by step's sign. */
void kn_slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *start_out,
                   int64_t *len_out);

typedef enum kn_pad_mode { KN_PAD_CONSTANT, KN_PAD_REFLECT, KN_PAD_EDGE, KN_PAD_WRAP } kn_pad_mode;

/* Pad: begin/end padding per axis (negative = crop), from attributes (opset < 11) or inputs
 * pads/axes (opset >= 11, axes from 18). */
kiln_status kn_pad_plan(const kn_node *n, const kn_tensor *const *vals, int n_vals, int rank,
                        int64_t *begin, int64_t *end, kn_pad_mode *mode, bool *known, char *why,
                        size_t cap);
/* Pad's attributes, read once: the prepare hook (kn_params_fn) of the CPU and CUDA kernels, which
 * pass the block to kn_pad_plan_from. */
typedef struct kn_pad_prm {
    int mode;              /* a kn_pad_mode, -1 when the attribute names none (mode_name says what) */
    const char *mode_name;
    const int64_t *pads;   /* before opset 11: the pads (or paddings) attribute, NULL when absent */
    int n_pads;
    float value;           /* before opset 11: the constant (0) */
} kn_pad_prm;
kiln_status kn_pad_prepare(const kn_node *n, void *params);
kiln_status kn_pad_plan_from(const kn_node *n, const kn_pad_prm *a, const kn_tensor *const *vals, int n_vals,
                             int rank, int64_t *begin, int64_t *end, kn_pad_mode *mode, bool *known, char *why,
                             size_t cap);

/* Split: the size of each of n_out parts along an axis of size dim (dim < 0: unknown). */
kiln_status kn_split_sizes(const kn_node *n, const kn_tensor *const *vals, int n_vals, int64_t dim,
                           int n_out, int64_t *sizes, bool *known, char *why, size_t cap);

/* Squeeze/Unsqueeze axes from the attribute (opset < 13) or input 1. *count -1 when unknown;
 * *present false when there are none (Squeeze: all unit dims). */
kiln_status kn_axes_param(const kn_node *n, const kn_tensor *const *vals, int n_vals, int64_t *axes,
                          int *count, bool *present, char *why, size_t cap);

#endif

/* Internal to the CPU kernels of the tensor family (src/backend/cpu/tensor*.c): element-generic
 * data movement helpers and the kernels the table in tensor.c lists.
 *
 * These ops move bytes, so they work over the element size; STRING elements are char* that are
 * duplicated (strdup) on copy and freed when overwritten. */
#ifndef KN_CPU_TENSOR_KERNELS_H
#define KN_CPU_TENSOR_KERNELS_H

#include "backend/cpu/cpu.h"
#include "ops/tensor_util.h"

#include <stdbool.h>
#include <stdint.h>

#define KN_STRIDED_MAX (2 * KILN_MAX_RANK)

/* A copy of the elements of a `dims` box: element at index (i0..) goes from
 * src[src_off + sum i*src_stride] to dst[dst_off + sum i*dst_stride] (strides in elements; a
 * source stride may be 0 (broadcast) or negative (reversed)). */
typedef struct kn_strided {
    int rank;
    int64_t dims[KN_STRIDED_MAX];
    int64_t dst_stride[KN_STRIDED_MAX];
    int64_t src_stride[KN_STRIDED_MAX];
    int64_t dst_off, src_off;
} kn_strided;

/* Runs the copy (threads over the outer dims; whole-row memcpy when the inner dim is contiguous on
 * both sides, a blocked 2-D transpose when it is contiguous on one side only). dst and src have
 * the same element type. */
kiln_status kn_cpu_strided_copy(kn_kernel_ctx *c, kn_tensor *dst, const kn_tensor *src, const kn_strided *s);
/* Row-major strides (in elements) of dims. */
void kn_cpu_strides(const int64_t *dims, int rank, int64_t *strides);
/* Copies n consecutive elements (strings duplicated). False on out of memory. */
bool kn_cpu_copy_elems(kn_tensor *dst, int64_t di, const kn_tensor *src, int64_t si, int64_t n);
/* Sets n consecutive elements of dst to *elem (one element of dst's type; for STRING a char**). */
bool kn_cpu_fill_elems(kn_tensor *dst, int64_t di, int64_t n, const void *elem);
/* dst = src element for element (same count): one memcpy, or string duplication. */
kiln_status kn_cpu_copy_all(kn_kernel_ctx *c, kn_tensor *dst, const kn_tensor *src);
/* The preallocated output i, or an internal error when the executor did not allocate it. */
kiln_status kn_cpu_out(kn_kernel_ctx *c, int i, kn_tensor **t);
/* Element i of an integer (int32/int64/other int) index tensor. */
static inline int64_t kn_cpu_index(const kn_tensor *t, int64_t i) {
    if (t->dtype == KILN_DTYPE_INT64) return ((const int64_t *)t->data)[i];
    if (t->dtype == KILN_DTYPE_INT32) return ((const int32_t *)t->data)[i];
    return kn_tensor_get_i64(t, i);
}

/* layout (tensor_layout.c) */
kiln_status kn_cpu_transpose(kn_kernel_ctx *c);
/* Prepare hooks (kn_params_fn): Transpose's perm; the "axis" of Concat (1 before opset 4), Split,
 * Gather and GatherElements (default 0). */
typedef struct kn_cpu_perm_prm {
    int n; /* entries in perm (at most KILN_MAX_RANK kept; more fails the rank check); -1: none */
    int64_t perm[KILN_MAX_RANK];
} kn_cpu_perm_prm;
kiln_status kn_cpu_perm_prepare(const kn_node *n, void *params);
typedef struct kn_cpu_axis_prm {
    int64_t axis;
} kn_cpu_axis_prm;
kiln_status kn_cpu_axis_prepare(const kn_node *n, void *params);
/* The other tensor kernels' attributes (one hook for them, tensor_index.c): GatherND, the Scatter
 * family, TensorScatter, OneHot, Compress, ReverseSequence, CumSum/CumProd, Trilu, EyeLike,
 * ConstantOfShape, Unique, DepthToSpace/SpaceToDepth, Range, Constant, Dropout. Pointers are the
 * node's attributes (they live as long as the node). */
typedef struct kn_cpu_tensor_prm {
    const kn_attr *axis;      /* NULL: absent (each kernel has its default) */
    int64_t batch_dims;       /* GatherND (0) */
    int reduction;            /* the Scatter family's, parsed (tensor_index.c's RED_*) */
    bool circular;            /* TensorScatter mode (linear) */
    bool crd;                 /* DepthToSpace/SpaceToDepth mode (DCR) */
    int64_t blocksize;        /* (1) */
    int64_t batch_axis, time_axis; /* ReverseSequence (1, 0) */
    bool exclusive, reverse;  /* CumSum/CumProd */
    bool upper;               /* Trilu (1) */
    int64_t k;                /* EyeLike (0) */
    bool sorted;              /* Unique (1) */
    bool stash_double;        /* Range from opset 27: stash_type double */
    const kn_attr *value;     /* ConstantOfShape's value; Constant's one value attribute ... */
    int value_kind;           /* ... which: 0 value, 1 value_float, 2 value_floats, 3 value_int, 4 value_ints,
                               * 5 value_string, 6 value_strings */
    int64_t seed;             /* Dropout (0) */
} kn_cpu_tensor_prm;
kiln_status kn_cpu_tensor_prepare(const kn_node *n, void *params);
/* "axis" as kn_attr_int reads it */
static inline int64_t kn_cpu_axis_or(const kn_cpu_tensor_prm *p, int64_t dflt) {
    return p->axis && p->axis->type == KN_ATTR_INT ? p->axis->i : dflt;
}
kiln_status kn_cpu_slice(kn_kernel_ctx *c);
kiln_status kn_cpu_concat(kn_kernel_ctx *c);
kiln_status kn_cpu_split(kn_kernel_ctx *c);
kiln_status kn_cpu_expand(kn_kernel_ctx *c);
kiln_status kn_cpu_tile(kn_kernel_ctx *c);
kiln_status kn_cpu_pad(kn_kernel_ctx *c);
kiln_status kn_cpu_depth_to_space(kn_kernel_ctx *c);
kiln_status kn_cpu_space_to_depth(kn_kernel_ctx *c);
kiln_status kn_cpu_center_crop_pad(kn_kernel_ctx *c);

/* indexing (tensor_index.c) */
kiln_status kn_cpu_gather(kn_kernel_ctx *c);
kiln_status kn_cpu_gather_elements(kn_kernel_ctx *c);
kiln_status kn_cpu_gather_nd(kn_kernel_ctx *c);
kiln_status kn_cpu_scatter_elements(kn_kernel_ctx *c);
kiln_status kn_cpu_scatter_nd(kn_kernel_ctx *c);
kiln_status kn_cpu_tensor_scatter(kn_kernel_ctx *c);
kiln_status kn_cpu_onehot(kn_kernel_ctx *c);
kiln_status kn_cpu_compress(kn_kernel_ctx *c);
kiln_status kn_cpu_nonzero(kn_kernel_ctx *c);
kiln_status kn_cpu_reverse_sequence(kn_kernel_ctx *c);

/* miscellaneous (tensor_misc.c) */
kiln_status kn_cpu_range(kn_kernel_ctx *c);
kiln_status kn_cpu_cumulative(kn_kernel_ctx *c);
kiln_status kn_cpu_trilu(kn_kernel_ctx *c);
kiln_status kn_cpu_eyelike(kn_kernel_ctx *c);
kiln_status kn_cpu_constant_of_shape(kn_kernel_ctx *c);
kiln_status kn_cpu_unique(kn_kernel_ctx *c);

#endif

/* Window geometry shared by the linalg family's shape inference (src/ops/linalg.c) and its CPU
 * kernels (src/backend/cpu/conv.c, pool.c), so both resolve pads, auto_pad, strides, dilations,
 * ceil_mode and ConvTranspose's output_shape the same way.
 *
 * Errors are written to `why` (no node prefix: the caller adds it) and returned as a status. */
#ifndef KN_OPS_LINALG_UTIL_H
#define KN_OPS_LINALG_UTIL_H

#include "ir/graph.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KN_MAX_SPATIAL (KILN_MAX_RANK - 2)

typedef enum kn_window_kind {
    KN_WINDOW_CONV,           /* Conv, ConvInteger, QLinearConv */
    KN_WINDOW_POOL,           /* MaxPool, AveragePool, LpPool (ceil_mode) */
    KN_WINDOW_CONV_TRANSPOSE, /* ConvTranspose (output_padding, output_shape) */
} kn_window_kind;

/* One sliding window over nsp spatial dims. For Conv/pools `in` is the input size and `out` the
 * output size; for ConvTranspose `in` is the (small) input and `out` the (large) output, and the
 * pads apply to the output. Unknown sizes are -1. */
typedef struct kn_window {
    int nsp;
    int64_t in[KN_MAX_SPATIAL];
    int64_t kernel[KN_MAX_SPATIAL];
    int64_t stride[KN_MAX_SPATIAL];
    int64_t dilation[KN_MAX_SPATIAL];
    int64_t pad_begin[KN_MAX_SPATIAL];
    int64_t pad_end[KN_MAX_SPATIAL];
    int64_t out_pad[KN_MAX_SPATIAL]; /* ConvTranspose output_padding */
    int64_t out[KN_MAX_SPATIAL];
    bool ceil_mode;
    bool known; /* every size above is known */
} kn_window;

/* Resolves the window of node n. in: nsp input sizes (-1 unknown). kernel: nsp kernel sizes
 * from the weight (-1 unknown), or NULL for pools (then the kernel_shape attribute is required).
 * For Conv the kernel_shape attribute, when present, must agree with the weight. */
kiln_status kn_window_plan(const kn_node *n, kn_window_kind kind, int nsp, const int64_t *in,
                           const int64_t *kernel, kn_window *w, char *why, size_t cap);

struct kn_kernel_ctx;
/* kn_window_plan for a kernel's call on node c->node, kept for the node's later calls with the same
 * sizes (kn_ctx_prep: a node whose shapes the run's memo knows); planned at each call otherwise. */
kiln_status kn_window_plan_kept(struct kn_kernel_ctx *c, kn_window_kind kind, int nsp, const int64_t *in,
                                const int64_t *kernel, kn_window *w, char *why, size_t cap);

/* Gemm's attributes, read once: the prepare hook (exec/kernel.h's kn_params_fn) of the CPU's and
 * CUDA's Gemm kernels, and of the inner Gemm of their FusedGemm. */
typedef struct kn_gemm_attrs {
    bool ta, tb;
    float alpha, beta;
} kn_gemm_attrs;
kiln_status kn_gemm_attrs_prepare(const kn_node *n, void *params);

/* Einsum: the equation resolved against the input ranks. Labels are ids 0..63: letters a-z are
 * 0-25, A-Z 26-51, and the dims an ellipsis stands for are 52.. (right-aligned across inputs, so
 * they broadcast like numpy). size[l] is the label's size (-1 unknown, -2 unused). */
#define KN_EINSUM_MAX_IN 16
#define KN_EINSUM_LABELS 64
typedef struct kn_einsum_plan {
    int n_in;
    int in_rank[KN_EINSUM_MAX_IN];
    int8_t in_label[KN_EINSUM_MAX_IN][KILN_MAX_RANK];
    int out_rank;
    int8_t out_label[KILN_MAX_RANK];
    int64_t size[KN_EINSUM_LABELS];
} kn_einsum_plan;

/* Einsum's equation, read once: the prepare hook (exec/kernel.h: kn_params_fn) of the CPU and
 * CUDA kernels. The string is the node's attribute (it lives as long as the node); "" when absent. */
typedef struct kn_einsum_prm {
    const char *equation;
} kn_einsum_prm;
kiln_status kn_einsum_prepare(const kn_node *n, void *params);

/* dims[i] holds ranks[i] sizes of input i (-1 unknown). */
kiln_status kn_einsum_plan_make(const char *equation, int n_in, const int *ranks, const int64_t *const *dims,
                                kn_einsum_plan *p, char *why, size_t cap);

/* "[1,64,100]" for a list of int64 (for messages). */
const char *kn_ints_str(const int64_t *v, int n, char *buf, size_t cap);

#endif

/* Internal interface of the CPU linalg family: the kernels defined in conv.c, pool.c and
 * einsum.c (listed in linalg.c's table) and helpers they share. */
#ifndef KN_CPU_LINALG_IMPL_H
#define KN_CPU_LINALG_IMPL_H

#include "backend/cpu/cpu.h"
#include "ops/linalg_util.h" /* kn_einsum_prepare, kn_gemm_attrs_prepare (hooks shared with CUDA) */
#include "backend/cpu/sgemm.h"  /* KN_GEMM_ACT_* */

#include <stdbool.h>
#include <stdint.h>

/* conv.c */
kiln_status kn_cpu_conv(kn_kernel_ctx *c);
/* Called on every block of a float convolution's output once it is final (bias included): `rows`
 * rows of `cols` elements, the first at y + offset and each `ld` floats after the previous; from
 * the pool's threads, while the block is still in cache: fused kernels apply their residual and
 * activation here instead of in a second pass over memory. */
typedef void (*kn_conv_epilogue_fn)(const void *ctx, float *y, int64_t offset, int64_t rows, int64_t cols, int64_t ld);
/* kn_cpu_conv with an epilogue (float output only: for other outputs it runs after the whole
 * convolution). */
kiln_status kn_cpu_conv_with_epilogue(kn_kernel_ctx *c, kn_conv_epilogue_fn fn, const void *ctx);
/* The same epilogue described as data, for the kernels that apply it as they store the output
 * (the GEMM's micro-kernel): y = min(hi, max(lo, y + residual)), residual (the output's shape)
 * optional. `fn` must do the same: the kernels that cannot take the tail call it instead. */
typedef struct kn_conv_tail {
    const float *residual;
    float lo, hi;
    const uint16_t *residual16; /* the residual in bf16 instead (a FusedConv's bf16 Z), or NULL */
    /* an activation between the residual and the clamp (kn_sgemm_batch's act: LeakyRelu,
     * HardSigmoid, HardSwish; KN_GEMM_ACT_NONE: none), with its parameters: taken by the GEMM's
     * micro-kernel only (the other kernels call fn instead) */
    int act;
    float p0, p1;
} kn_conv_tail;
kiln_status kn_cpu_conv_with_tail(kn_kernel_ctx *c, kn_conv_epilogue_fn fn, const void *ctx, const kn_conv_tail *tail);
/* X, the residual (tail->residual16) or Y channel-blocked bf16 (conv_amx_blocked.h): the blocked AMX
 * kernel, where it takes them (*done); the tail's clamp and residual only (no act). */
kiln_status kn_cpu_conv_blocked(kn_kernel_ctx *c, const kn_conv_tail *tail, bool xb, bool zb, bool yb, bool *done);
kiln_status kn_cpu_conv_transpose(kn_kernel_ctx *c);
kiln_status kn_cpu_conv_integer(kn_kernel_ctx *c);
kiln_status kn_cpu_qlinear_conv(kn_kernel_ctx *c);
kiln_status kn_cpu_col2im(kn_kernel_ctx *c);
kiln_status kn_cpu_deform_conv(kn_kernel_ctx *c);
/* DeformConv's attribute read at compile time (the rest of its geometry is Conv's, per shapes) */
typedef struct kn_cpu_deform_prm {
    int64_t offset_group;
} kn_cpu_deform_prm;
kiln_status kn_cpu_deform_conv_prepare(const kn_node *n, void *params);

/* pool.c */
kiln_status kn_cpu_max_pool(kn_kernel_ctx *c);
kiln_status kn_cpu_average_pool(kn_kernel_ctx *c);
kiln_status kn_cpu_lp_pool(kn_kernel_ctx *c);
kiln_status kn_cpu_global_average_pool(kn_kernel_ctx *c);
kiln_status kn_cpu_global_max_pool(kn_kernel_ctx *c);
kiln_status kn_cpu_global_lp_pool(kn_kernel_ctx *c);
/* The global pools' p (GlobalLpPool's; 2 when absent), read at compile time (their prepare hook) */
typedef struct kn_cpu_gpool_prm {
    double p;
} kn_cpu_gpool_prm;
kiln_status kn_cpu_gpool_prepare(const kn_node *n, void *params);
kiln_status kn_cpu_max_unpool(kn_kernel_ctx *c);
/* pool_layout.c: kiln.MaxPool / kiln.AveragePool (layout NCHW or NHWC) */
kiln_status kn_cpu_max_pool_layout(kn_kernel_ctx *c);
kiln_status kn_cpu_average_pool_layout(kn_kernel_ctx *c);

/* einsum.c */
kiln_status kn_cpu_einsum(kn_kernel_ctx *c);

/* linalg.c: float working copies of float16/bfloat16/double tensors.
 * kn_linalg_f32_in returns the tensor's own data for FLOAT (*owned false) or a converted copy
 * (*owned true; free it); NULL when out of memory. */
const float *kn_linalg_f32_in(const kn_tensor *t, bool *owned);
/* Writes n floats into t (any float element type), converting. */
void kn_linalg_f32_out(const float *src, kn_tensor *t, int64_t n);
/* A quantisation parameter (scale or zero point) as float: element i of a per-axis tensor, or
 * its single element when it has one; 0 when t is NULL. */
double kn_linalg_qparam(const kn_tensor *t, int64_t i);
/* The session's kn_qgemm8 form (qgemm.h) of constant input `input`, a K x N 8-bit B, or NULL
 * when B is no constant or its pairs do not allow the form. The verdict is kept with the session
 * first, so weights the form cannot hold cost no copy. MatMulInteger's and MatMulIntegerToFloat's
 * (one cache key: the same form of the same tensor). */
const void *kn_linalg_qgemm8_b(const kn_kernel_ctx *c, int input, const kn_tensor *B, int64_t K, int64_t N);
/* B (K x N 8-bit values, or N x K when tb) packed for the AMX-INT8 tiles (qgemm_amx.h), kept per
 * session for a constant input; NULL otherwise (then packed per call) */
const uint8_t *kn_linalg_qgemm_amx_b(const kn_kernel_ctx *c, int input, const kn_tensor *B, int64_t K, int64_t N,
                                     bool tb);

/* col2im, shared by ConvTranspose and Col2Im: for each of `channels` planes, adds
 * col[(ch*kk + k) * grid + g] into the image at position g*stride - pad_begin + k*dilation
 * (per spatial dim; positions outside the image are dropped). Runs on the pool. */
void kn_linalg_col2im(kn_threadpool *pool, const float *col, int64_t channels, int nsp, const int64_t *image,
                      const int64_t *grid, const int64_t *kernel, const int64_t *stride, const int64_t *dilation,
                      const int64_t *pad_begin, float *out);

#endif

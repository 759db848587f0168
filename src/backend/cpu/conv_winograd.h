/* Winograd F(4x4, 3x3) for float 3x3 convolutions with stride 1 and no dilation (conv_winograd.c),
 * called by conv.c's float path for the shapes where it beats the implicit GEMM. */
#ifndef KN_CPU_CONV_WINOGRAD_H
#define KN_CPU_CONV_WINOGRAD_H

#include "backend/cpu/linalg_impl.h"

#include <stdbool.h>
#include <stdint.h>

/* One group-free 2-D convolution: x [N, C, H, W] -> y [N, M, OH, OW], kernel 3x3, stride 1,
 * dilation dh x dw (0 means 1), pads ph (top) and pw (left); bottom/right pads are implied by OH
 * and OW. A dilated convolution runs as the undilated one over the dh * dw phase images (the
 * input's rows and columns of one residue mod dh, dw: a stride-1 3x3 convolution each). */
typedef struct kn_wino_shape {
    int64_t N, C, M, H, W, OH, OW, ph, pw, dh, dw;
} kn_wino_shape;

/* Whether the Winograd path is built (AVX-512 or AVX2) and faster than the implicit GEMM for this shape
 * with `threads` threads (a choice measured on Zen 5; see bench/results/cpu-conv3x3-2026-12-03.md). */
bool kn_wino_suits(const kn_wino_shape *s, int threads);

/* y = conv(x, w) + bias, then epi on every finished block. w is [M, C, 3, 3]; w_const: w is a
 * constant input 1 of the running node, whose transformed form is kept for the session. */
kiln_status kn_wino_conv(kn_kernel_ctx *c, const kn_wino_shape *s, const float *x, const float *w, const float *bias,
                         float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_const);

/* A buffer of at least `floats` floats (64-byte aligned, contents undefined) owned by the calling
 * thread, kept between calls so that the multi-megabyte scratch of a convolution is not mapped and
 * page-faulted again on every run (a 4 MB buffer per call cost as much as the convolution); freed
 * when the thread exits. NULL when out of memory or above 64 MB: the caller allocates its own. The
 * caller's pool threads may use it until the call returns; one user at a time per thread. */
float *kn_conv_thread_buffer(size_t floats);

/* The core's L2 cache in bytes (1 MB where the system does not say), asked once per process. */
int64_t kn_conv_l2_bytes(void);

#endif

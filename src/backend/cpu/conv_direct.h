/* Direct float convolution with output pixels in the vector lanes (conv_direct.c), for the shapes
 * the implicit GEMM and the depthwise loops ran slowly: depthwise layers on wide planes and dense or
 * grouped convolutions with few output channels per group (large kernels, large planes). conv.c's
 * float path calls it where kn_dconv_suits says so. */
#ifndef KN_CPU_CONV_DIRECT_H
#define KN_CPU_CONV_DIRECT_H

#include "backend/cpu/linalg_impl.h"

#include <stdbool.h>
#include <stdint.h>

/* A 2-D convolution (1-D as H = 1, KH = 1): x [N, C, H, W] -> y [N, M, OH, OW] in G groups,
 * kernel KH x KW, strides sh x sw, dilations dh x dw, pads ph (top) and pw (left); the bottom and
 * right pads are implied by OH and OW. */
typedef struct kn_dconv_shape {
    int64_t N, C, M, G, H, W, OH, OW, KH, KW, sh, sw, dh, dw, ph, pw;
} kn_dconv_shape;

/* Whether this build has the kernel (AVX2 or AVX-512) and it is the one to take for the shape. */
bool kn_dconv_suits(const kn_dconv_shape *s);

/* y = conv(x, w) + bias (bias may be NULL), then epi on every finished block of output rows while
 * it is in cache. w is [M, C/G, KH, KW]; w_const: w is the running node's constant input 1, whose
 * rearranged form is kept for the session. */
kiln_status kn_dconv_run(kn_kernel_ctx *c, const kn_dconv_shape *s, const float *x, const float *w, const float *bias,
                         float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_const);

/* Depthwise convolutions (G = C = M: one input channel per output channel), any window, strides up
 * to 4: rows copied once into a zero-bordered scratch, tiles of output rows x vectors (conv_direct.c).
 * w is [M, 1, KH, KW] as it is (no rearranged copy); epi (may be NULL) on finished rows. */
bool kn_dwconv_suits(const kn_dconv_shape *s);
kiln_status kn_dwconv_run(kn_kernel_ctx *c, const kn_dconv_shape *s, const float *x, const float *w, const float *bias,
                          float *y, kn_conv_epilogue_fn epi, const void *epi_ctx);

#endif

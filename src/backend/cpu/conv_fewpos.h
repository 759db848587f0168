/* Float convolutions with few output positions and many weights (conv_fewpos.c): 3x3 512 -> 512 on
 * a 4x4 plane and the like, where the implicit GEMM packed an im2col of which a third is the
 * padding's zeros, multiplied those zeros, and at many threads shared the packing through a
 * parallel loop of its own. Here the output channels are in the vector lanes and the weights
 * stream once, each output position is a broadcast read straight from the input, and the taps a
 * position's window has in the padding are left out. conv.c's float path calls it where
 * kn_fpconv_suits says so. */
#ifndef KN_CPU_CONV_FEWPOS_H
#define KN_CPU_CONV_FEWPOS_H

#include "backend/cpu/conv_direct.h"

#include <stdbool.h>
#include <stdint.h>

/* Whether this build has the kernel (AVX2 or AVX-512) and it is the one to take for the shape. */
bool kn_fpconv_suits(const kn_dconv_shape *s);

/* y = conv(x, w) + bias (bias may be NULL), then epi on each finished block of output channels.
 * w is [M, C, KH, KW] (one group); w_const: w is the running node's constant input 1, whose
 * rearranged form is kept for the session. */
kiln_status kn_fpconv_run(kn_kernel_ctx *c, const kn_dconv_shape *s, const float *x, const float *w, const float *bias,
                          float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_const);

#endif

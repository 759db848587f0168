/* bf16 convolution on AMX tiles without im2col, for the CPU provider's precision=bf16 (conv_amx.c):
 * conv.c calls it for the 2-D convolutions (stride 1 to 4) when the products run on AMX. */
#ifndef KN_CPU_CONV_AMX_H
#define KN_CPU_CONV_AMX_H

#include "backend/cpu/linalg_impl.h"

#include <stdbool.h>
#include <stdint.h>

/* One group-free 2-D convolution: x [N, C, H, W] -> y [N, M, OH, OW], kernel KH x KW, dilation
 * dh x dw, stride sh x sw, pads pt (top) and pl (left); the bottom and right pads are implied by
 * OH, OW. */
typedef struct kn_amx_conv_shape {
    int64_t N, C, M, H, W, OH, OW, KH, KW, pt, pl, dh, dw, sh, sw;
} kn_amx_conv_shape;

/* Whether this process runs bf16 products on AMX and the shape is one this kernel takes (strides 1
 * to 4, a kernel larger than 1x1 at stride 1 (a 1x1 kernel at stride 1 is the GEMM on the input as
 * it is), 16 or more input and output channels, a packed input of at most 64 MB). */
bool kn_amx_conv_suits(const kn_amx_conv_shape *s);

/* y = conv(bf16(x), bf16(w)) + bias with fp32 sums, then epi on every finished block. w is
 * [M, C, KH, KW]; w_const: w is the running node's constant input 1, whose packed form is kept for
 * the session. */
kiln_status kn_amx_conv(kn_kernel_ctx *c, const kn_amx_conv_shape *s, const float *x, const float *w,
                        const float *bias, float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_const);

/* bf16 activations (precision=bf16, where the graph keeps a value between two convolutions in
 * bfloat16): x16, when set, is the input in bf16 (x unused; not for the folded few-channel
 * convolutions); y16, when set, receives the output in bf16 instead of y, plus the bias, clamped
 * to [lo, hi] (a Relu or Clip: it commutes with the rounding), rounded to nearest even (no epi then).
 * Without y16, a [lo, hi] other than [-inf, inf] clamps y as it is stored, before epi (a Relu or Clip
 * without a residual: no pass of its own over y).
 * add / add16 (at most one; no epi with either): a residual of y's shape [N, M, OH, OW], fp32 or
 * bf16, added to each value after the bias and before the clamp, as the tiles' block is stored
 * (y = clamp(conv + bias + add), then rounded where y16). */
typedef struct kn_amx_io {
    const uint16_t *x16;
    uint16_t *y16;
    float lo, hi;
    const float *add;
    const uint16_t *add16;
} kn_amx_io;
/* Whether kn_amx_conv_io takes a bf16 input for this shape (kn_amx_conv_suits, and not folded). */
bool kn_amx_conv_takes_x16(const kn_amx_conv_shape *s);
/* kn_amx_conv with io (NULL: kn_amx_conv). */
kiln_status kn_amx_conv_io(kn_kernel_ctx *c, const kn_amx_conv_shape *s, const float *x, const float *w,
                           const float *bias, float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_const,
                           const kn_amx_io *io);

#endif

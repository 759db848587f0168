/* bf16 convolution on AMX tiles over channel-blocked activations (conv_amx_blocked.c), for the CPU
 * provider's precision=bf16: where the graph keeps a value between two convolutions in bf16, it may
 * keep it blocked too (opt pass cpu_bf16_values, node attributes x_blocked, z_blocked, y_blocked).
 *
 * The blocked layout of a [N, C, H, W] tensor, C a multiple of 32: element (n, c, h, w) at
 * ((n * C / 32 + c / 32) * H * W + h * W + w) * 32 + c % 32. A position's 32 channels are one
 * 64-byte row, which is one row of an AMX A tile (16 channel pairs): the activations are the A
 * operand, the weights B. So a 1x1 convolution reads its input as it is (no packing), and a 3x3
 * convolution's shifted taps are whole 64-byte rows of a padded copy. The tensor has the same
 * number of elements as in NCHW (only the order differs). */
#ifndef KN_CPU_CONV_AMX_BLOCKED_H
#define KN_CPU_CONV_AMX_BLOCKED_H

#include "backend/cpu/conv_amx.h"

#include <stdbool.h>
#include <stdint.h>

#define KN_BLOCKED_CHANNELS 32

/* One convolution over bf16 products with fp32 sums:
 * y = clamp(conv(bf16(x), bf16(w)) + bias + residual, lo, hi), rounded where y is bf16.
 * X: exactly one of x (fp32 NCHW), x16 (bf16 NCHW), xb (bf16 blocked). Y: exactly one of y (fp32
 * NCHW), y16 (bf16 NCHW), yb (bf16 blocked). The residual (of Y's shape): at most one of add (fp32
 * NCHW), add16 (bf16 NCHW), addb (bf16 blocked) (an NCHW one into a blocked Y a value at a time). w [M, C, KH, KW]
 * fp32; w_const: w is the node's constant input 1 (its packed form kept for the session). */
typedef struct kn_blocked_conv {
    kn_amx_conv_shape s;
    const float *x;
    const uint16_t *x16, *xb;
    const float *w, *bias;
    bool w_const;
    float *y;
    uint16_t *y16, *yb;
    const float *add;
    const uint16_t *add16, *addb;
    float lo, hi;
} kn_blocked_conv;

/* Whether this process runs bf16 products on AMX and the kernel takes the shape: 2-D, C and M
 * multiples of 32, strides 1 to 4, non-negative pads, a padded copy of at most 64 MB. */
bool kn_amx_blocked_suits(const kn_amx_conv_shape *s);

/* Tests: kn_amx_blocked_suits false for every shape while on (the callers' conversions run instead).
 * Only while no convolution runs. */
void kn_amx_blocked_decline(bool on);

/* Runs a (kn_amx_blocked_suits(&a->s) must hold, else an error status). */
kiln_status kn_amx_blocked_conv(kn_kernel_ctx *c, const kn_blocked_conv *a);

/* Layout conversions of bf16 [N, C, plane] tensors (C a multiple of 32), any CPU: the routes that do
 * not take a blocked value (the kernel declines the shape) convert it. */
void kn_bf16_to_blocked(const uint16_t *src, uint16_t *dst, int64_t N, int64_t C, int64_t plane);
void kn_bf16_from_blocked(const uint16_t *src, uint16_t *dst, int64_t N, int64_t C, int64_t plane);

#endif

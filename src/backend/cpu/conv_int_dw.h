/* A direct kernel for 8-bit integer depthwise convolutions (ConvInteger and QLinearConv with one
 * input channel per group, any channel multiplier), exact in int32 (conv_int_dw.c), called from
 * conv.c's int_conv in place of qgemm's one-row products per group.
 *
 * Each input plane, less its zero point, goes to int16 rows with zero borders (the padding), and
 * from them to words holding two horizontally adjacent taps' values for every output column
 * (x[ow*sw + kw*dw], x[ow*sw + (kw+1)*dw]) as one int32 (low, high): AVX2's vpmaddwd multiplies
 * eight output columns' pairs by the broadcast pair of weights (w[kh][kw], w[kh][kw+1]) less
 * their zero point and sums each pair into int32, output columns in the lanes. An odd kernel
 * width's last tap pairs with a zero weight.
 *
 * Planes under 16 outputs wide with one output channel per input channel and 8 channels or more
 * take a second form with eight channels in the lanes instead (conv_int_dw.c, "small planes"): a
 * 1-15-wide row would fill 1-15 of the lanes above.
 *
 * Where the build targets AVX-512 (F, BW) both forms take 16 lanes (zmm; vpdpwssd with VNNI): 16
 * output columns a vector, 16 channels a small-plane block, whose QLinearConv outputs are
 * requantised with the channels in the lanes and moved into planes by byte transposes. */
#ifndef KN_CPU_CONV_INT_DW_H
#define KN_CPU_CONV_INT_DW_H

#include "kiln.h"
#include "util/threadpool.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct kn_qdw {
    int64_t N, C, mult; /* output channel m reads input channel m / mult; M = C * mult */
    /* 2-D geometry (1-D: H = OH = KH = 1, sh = dh = 1, ph = 0) */
    int64_t H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw;
    const void *x; /* [N, C, H, W] */
    bool x_s8;
    int32_t zx;
    const void *w; /* [M, 1, KH, KW] */
    bool w_s8;
    const int32_t *zw; /* M zero points of w, or NULL: zw0 for all */
    int32_t zw0;
    int32_t *y;           /* [N, M, OH, OW] */
    const int32_t *bias; /* M values added, or NULL */
    /* QLinearConv: with rq set (M scales), each plane requantised (kn_q_requant's bytes) into y8
     * (int8 when y_s8, else uint8) instead of written to y; AVX2 builds requantise the sums from
     * their registers (the row form's out_block, the small planes' blocks of 8 channels) */
    const float *rq;
    double zy;
    bool y_s8;
    void *y8;
    const int32_t *wk; /* the weights as kn_qdw_pack_weights makes them (kept per session), or NULL */
} kn_qdw;

/* out[i] = a[i] * r + zy rounded to the nearest (ties to even) and clamped to int8 (s8) or uint8,
 * in double as the ONNX reference (NaN gives the type's minimum, as ONNX Runtime on x86): the
 * vector forms reach those bytes in float32, redoing in double the vectors with a lane near a tie
 * (qrequant.h) */
void kn_q_requant(const int32_t *a, int64_t n, float r, double zy, bool s8, void *out);
/* the same with a scale per value: out[i] from a[i] * r[i] (one-position planes: a channel each) */
void kn_q_requant_cols(const int32_t *a, int64_t n, const float *r, double zy, bool s8, void *out);

/* The weights less their zero points as int16 pairs along each kernel row, [M][KH][ceil(KW / 2)]
 * words (an odd KW's last pair with a zero high half): kn_qdw_weights_words of them, from p's w,
 * w_s8, zw / zw0 and geometry */
int64_t kn_qdw_weights_words(const kn_qdw *p);
void kn_qdw_pack_weights(const kn_qdw *p, int32_t *dst);

/* KILN_ERR_OUT_OF_MEMORY when a buffer cannot be had (y then partly written) */
kiln_status kn_qdw_conv(kn_threadpool *pool, const kn_qdw *p);

#endif

/* int8 convolutions of one output position or a few, through conv.c's transposed form
 * (iconv_rows8, kn_qgemm8) against the plain integer definition in int64:
 *  - x's C bytes read in place as the one im2col^T row (a 1x1 plane, a pointwise kernel, no
 *    leading pad), 2-D and 1-D, batches of 1-3 images;
 *  - the one position made from x (a 1x1 plane at stride 2 whose one tap is the leading pad, a 3x3
 *    kernel over a 3x3 plane, a 3x3 kernel padded over a 1x1 plane, a 1x1 kernel at stride 2 over a
 *    2x2 plane);
 *  - either way the product written straight into the int32 sums and the bias added after;
 *  - planes of several positions (2x2, 3x3, 5x5, 7x7, 1-D at stride 2: 4 to 49, not all multiples
 *    of 8), QLinearConv's requantisation done from the product's rows (a position's channels, their
 *    scales in the lanes) and its bytes transposed into the planes, uint8 and int8 y;
 * QLinearConv with and without its bias, ConvInteger (no bias, int32 out); int8 and uint8 weights
 * of full range (kn_qgemm8's sign form) or of 7 bits (its residual form), one zero point or equal
 * ones per channel, per-channel scales; odd channel counts (1 input channel, 1 output channel);
 * threads 1, 2, 3. Scales are powers of two so the definition's double rounds exactly, y's chosen so
 * that few outputs clamp. Outputs must be equal byte for byte. */
#include "test_model_builder.h"

#include "kiln.h"

#include <math.h>
#include <stdlib.h>

static uint32_t op_next(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static kn_tensor *op_tensor(kiln_dtype dt, int rank, const int64_t *dims) {
    kn_tensor *t = NULL;
    kn_tensor_new(dt, rank, dims, &t);
    return t;
}

/* {N, C, M, rank (1-D: 1, 2-D: 2), input size (each axis), k, stride, pad begin, pad end, w_s8,
 *  weights (1: full range without the type's extreme, 2: 7 bits), per-channel zero points and
 *  scales, bias (QLinearConv), ConvInteger, int8 y} */
static const int op_cases[][15] = {
    {1, 513, 129, 2, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0}, /* in place: 513 -> 129, sign form, per channel */
    {2, 77, 35, 2, 1, 1, 1, 0, 0, 0, 2, 0, 0, 0},   /* in place, two images, uint8 7-bit, no bias */
    {1, 201, 51, 1, 1, 1, 1, 0, 0, 1, 2, 0, 1, 0},  /* in place, 1-D */
    {3, 99, 17, 2, 1, 1, 1, 0, 0, 1, 1, 0, 0, 1},   /* in place, ConvInteger, three images */
    {1, 3, 1, 2, 1, 1, 1, 0, 0, 0, 2, 1, 1, 0},     /* in place, one output channel */
    {2, 1, 9, 2, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0},     /* in place, one input channel */
    {2, 131, 300, 2, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1}, /* in place, ConvInteger, uint8 sign form */
    {2, 37, 23, 2, 1, 1, 2, 1, 0, 1, 1, 0, 1, 0},   /* one tap, the leading pad: not in place */
    {2, 45, 21, 2, 3, 3, 1, 0, 0, 0, 2, 1, 1, 0},   /* 3x3 over 3x3 */
    {1, 19, 40, 2, 1, 3, 1, 1, 1, 1, 2, 0, 0, 0},   /* 3x3 padded over 1x1 */
    {2, 33, 17, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 0},   /* 1x1 at stride 2 over 2x2 */
    {1, 65, 19, 1, 3, 3, 1, 0, 0, 0, 1, 0, 0, 1},   /* 1-D, k3 over 3, ConvInteger */
    {1, 201, 51, 2, 1, 1, 1, 0, 0, 1, 2, 0, 1, 0, 1},   /* in place, int8 y */
    /* several positions */
    {2, 37, 17, 2, 7, 1, 1, 0, 0, 1, 2, 1, 1, 0, 1},  /* 7x7 k1 (49), int8 y, two images */
    {1, 64, 33, 2, 5, 3, 1, 1, 1, 0, 1, 0, 1, 0, 0},  /* 5x5 k3 pad 1 (25), uint8 sign form */
    {2, 19, 16, 2, 3, 3, 1, 1, 1, 1, 2, 0, 0, 0, 1},  /* 3x3 k3 pad 1 (9), no bias, int8 y */
    {1, 40, 24, 2, 2, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0},  /* 2x2 (4: no whole 8 x 8 block) */
    {1, 45, 20, 1, 30, 3, 2, 1, 1, 1, 2, 0, 1, 0, 1}, /* 1-D 30 k3 s2 (15), int8 y */
    {2, 33, 16, 2, 4, 3, 1, 1, 1, 0, 1, 0, 0, 1, 0},  /* 4x4 k3 pad 1 (16), ConvInteger */
};

KN_TEST(cpu_qconv_one_position_exact) {
    static const int threads[3] = {1, 2, 3};
    for (size_t ci = 0; ci < sizeof op_cases / sizeof op_cases[0]; ci++) {
        const int *t = op_cases[ci];
        const int64_t N = t[0], C = t[1], M = t[2], rank = t[3], L = t[4], k = t[5], st = t[6], pb = t[7], pe = t[8];
        const bool ws8 = t[9], perch = t[11], has_bias = t[12] && !t[13], cint = t[13], ys8 = t[14];
        const int64_t H = rank == 2 ? L : 1, W = L, KH = rank == 2 ? k : 1, PBH = rank == 2 ? pb : 0;
        const int64_t O = (L + pb + pe - k) / st + 1, OH = rank == 2 ? O : 1, OW = O, P = OH * OW, NY = N * M * P;
        uint32_t seed = 7700 + (uint32_t)ci;
        int64_t xd[4] = {N, C, H, W}, wd[4] = {M, C, KH, k};
        if (rank == 1) xd[2] = W, wd[2] = k;
        const int r = (int)rank + 2;
        const kiln_dtype wt = ws8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8;
        kn_tensor *x = op_tensor(KILN_DTYPE_UINT8, r, xd), *w = op_tensor(wt, r, wd);
        for (int64_t i = 0; i < kn_tensor_count(x); i++) ((uint8_t *)x->data)[i] = (uint8_t)op_next(&seed);
        /* equal zero points (the transposed form takes one value) */
        const int zw = ws8 ? 0 : 131, zx = 17;
        for (int64_t i = 0; i < kn_tensor_count(w); i++) {
            const int v = t[10] == 2 ? (int)(op_next(&seed) % 127) - 63 : (int)(op_next(&seed) % 255) - 127;
            ((uint8_t *)w->data)[i] = (uint8_t)(v + (ws8 ? 0 : 128 + (t[10] == 2 ? 3 : 0)));
        }
        float ws[512];
        int32_t bias[512];
        for (int64_t m = 0; m < M; m++)
            ws[m] = perch && m % 2 ? 0.0625f : 0.125f, bias[m] = has_bias ? (int32_t)(op_next(&seed) % 40001) - 20000 : 0;
        int64_t *want = malloc(sizeof(int64_t) * (size_t)NY), *sums = malloc(sizeof(int64_t) * (size_t)NY), top = 1;
        for (int64_t n = 0; n < N; n++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t o = 0; o < P; o++) {
                    int64_t acc = 0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t kh = 0; kh < KH; kh++)
                            for (int64_t kw = 0; kw < k; kw++) {
                                const int64_t ih = o / OW * (rank == 2 ? st : 0) + kh - PBH, iw = o % OW * st + kw - pb;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                const int64_t xv = ((const uint8_t *)x->data)[((n * C + c) * H + ih) * W + iw];
                                const int64_t wi = ((m * C + c) * KH + kh) * k + kw;
                                const int64_t wv = ws8 ? ((const int8_t *)w->data)[wi] : ((const uint8_t *)w->data)[wi];
                                acc += (xv - zx) * (wv - zw);
                            }
                    sums[(n * M + m) * P + o] = acc + bias[m];
                    top = top > llabs(acc + bias[m]) ? top : llabs(acc + bias[m]);
                }
        /* y_scale a power of two that puts the largest sum near 128 steps (few outputs clamped) */
        double ys = 1.0;
        while (top * 0.5 * 0.125 / ys > 128.0) ys *= 2.0;
        const int zy = ys8 ? -3 : 128;
        for (int64_t i = 0; i < NY; i++) {
            const double q = 0.5 * (double)ws[i / P % M] / ys, d = (double)sums[i] * q + zy;
            want[i] = cint ? sums[i] : (int64_t)fmin(ys8 ? 127.0 : 255.0, fmax(ys8 ? -128.0 : 0.0, nearbyint(d)));
        }
        free(sums);
        tmb mb;
        tmb_init(&mb, 13);
        kn_tensor *zxt = op_tensor(KILN_DTYPE_UINT8, 0, NULL), *zwt = op_tensor(wt, perch ? 1 : 0, (int64_t[]){M});
        ((uint8_t *)zxt->data)[0] = (uint8_t)zx;
        for (int64_t m = 0; m < (perch ? M : 1); m++) ((uint8_t *)zwt->data)[m] = (uint8_t)zw;
        int xv = tmb_input(&mb, "x", KILN_DTYPE_UINT8, r, xd, NULL);
        int wv = tmb_const_tensor(&mb, "w", w), zxv = tmb_const_tensor(&mb, "zx", zxt), zwv = tmb_const_tensor(&mb, "zw", zwt);
        int y = tmb_value(&mb, "y"), node;
        if (cint) {
            node = tmb_node(&mb, "ConvInteger", (int[]){xv, wv, zxv, zwv}, 4, y);
        } else {
            kn_tensor *wst = op_tensor(KILN_DTYPE_FLOAT, perch ? 1 : 0, (int64_t[]){M});
            memcpy(wst->data, ws, sizeof(float) * (size_t)(perch ? M : 1));
            kn_tensor *yz = op_tensor(ys8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8, 0, NULL);
            ((uint8_t *)yz->data)[0] = (uint8_t)zy;
            int xsv = tmb_scalar(&mb, "xs", KILN_DTYPE_FLOAT, 0.5), ysv = tmb_scalar(&mb, "ys", KILN_DTYPE_FLOAT, ys);
            int wsv = tmb_const_tensor(&mb, "ws", wst), yzv = tmb_const_tensor(&mb, "yz", yz);
            int ins[9] = {xv, xsv, zxv, wv, wsv, zwv, ysv, yzv, 0};
            if (has_bias) {
                kn_tensor *bt = op_tensor(KILN_DTYPE_INT32, 1, (int64_t[]){M});
                memcpy(bt->data, bias, sizeof(int32_t) * (size_t)M);
                ins[8] = tmb_const_tensor(&mb, "bias", bt);
            }
            node = tmb_node(&mb, "QLinearConv", ins, has_bias ? 9 : 8, y);
        }
        if (rank == 2) {
            tmb_ints(&mb, node, "kernel_shape", (int64_t[]){k, k}, 2);
            tmb_ints(&mb, node, "strides", (int64_t[]){st, st}, 2);
            tmb_ints(&mb, node, "pads", (int64_t[]){pb, pb, pe, pe}, 4);
        } else {
            tmb_ints(&mb, node, "kernel_shape", (int64_t[]){k}, 1);
            tmb_ints(&mb, node, "strides", (int64_t[]){st}, 1);
            tmb_ints(&mb, node, "pads", (int64_t[]){pb, pe}, 2);
        }
        tmb_output(&mb, y);
        size_t size;
        unsigned char *model = tmb_finish(&mb, &size);
        kiln_tensor *xin = NULL;
        kiln_tensor_create(KILN_DTYPE_UINT8, xd, r, &xin);
        if (xin) memcpy(kiln_tensor_data(xin), x->data, (size_t)kn_tensor_count(x));
        const char *names[1] = {"x"};
        for (int ti = 0; ti < 3; ti++) {
            kiln_session *s = tmb_session(model, size, threads[ti], 3);
            CHECK_MSG(s != NULL, "case %zu: no session", ci);
            if (!s) continue;
            for (int run = 0; run < 2; run++) {
                kiln_tensor *yt = NULL;
                CHECK_STATUS(kiln_session_run(s, names, &xin, 1, NULL, 1, &yt), KILN_OK);
                if (!yt) continue;
                CHECK_EQ_INT(kiln_tensor_element_count(yt), NY);
                int64_t bad = 0, first = -1, got0 = 0;
                const void *yd = kiln_tensor_data(yt);
                for (int64_t i = 0; i < NY && kiln_tensor_element_count(yt) == NY; i++) {
                    const int64_t g = cint ? ((const int32_t *)yd)[i] : ys8 ? ((const int8_t *)yd)[i] : ((const uint8_t *)yd)[i];
                    if (g != want[i] && bad++ == 0) first = i, got0 = g;
                }
                CHECK_MSG(bad == 0,
                          "%s %lldx%lldx%lld (rank %lld) -> %lld k%lld s%lld pads %lld/%lld, %s w kind %d, per channel %d, bias %d, %d threads, run %d: %lld of %lld differ, first at %lld: %lld, want %lld",
                          cint ? "ConvInteger" : "QLinearConv", (long long)N, (long long)C, (long long)L, (long long)rank,
                          (long long)M, (long long)k, (long long)st, (long long)pb, (long long)pe, ws8 ? "s8" : "u8", t[10],
                          (int)perch, (int)has_bias, threads[ti], run, (long long)bad, (long long)NY, (long long)first,
                          (long long)got0, first >= 0 ? (long long)want[first] : 0LL);
                kiln_tensor_destroy(yt);
            }
            kiln_session_destroy(s);
        }
        free(model);
        free(want);
        kiln_tensor_destroy(xin);
        kn_tensor_free(x);
    }
}

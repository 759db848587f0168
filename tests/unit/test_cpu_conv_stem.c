/* The CPU convolution with output channels in the lanes (conv.c, cl_conv: few input channels,
 * deep windows, strided, such as the 7x7 s2 3->64 RGB stem) against the definition in double: strides 2-4,
 * dilation, asymmetric and no padding, non-square kernels, rows longer than one 60-pixel segment,
 * 32 / 64 / 96 channels (2 or 4 vectors a tile), bias or none, batch 2, weights a constant (packed
 * once per session, two runs) or a graph input (packed per call), a Relu fused at level 3 (the
 * epilogue), 1 and 2 threads. */
#include "test_model_builder.h"

#include "kiln.h"

#include <stdlib.h>

typedef struct stem_case {
    int64_t N, C, H, W, M, KH, KW, sh, sw, dh, dw;
    int64_t pads[4]; /* top, left, bottom, right */
    bool bias, w_input;
    int relu; /* 0 none, 1 Relu (true), 2 Clip(-0.25, 0.5) */
} stem_case;

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
    return (in + p0 + p1 - d * (k - 1) - 1) / s + 1;
}

/* The model; w_out[0]: a copy of the constant weights (w_input false), w_out[1]: of the bias. */
static unsigned char *stem_model(const stem_case *t, kiln_tensor **w_out, size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){t->N, t->C, t->H, t->W}, NULL);
    int64_t wd[4] = {t->M, t->C, t->KH, t->KW};
    int w;
    if (t->w_input) {
        w = tmb_input(&b, "w", KILN_DTYPE_FLOAT, 4, wd, NULL);
    } else {
        w = tmb_const(&b, "w", 4, wd, 0.2f);
        kn_tensor_clone(b.g->values[w].constant, w_out);
    }
    int bias = t->bias ? tmb_const(&b, "b", 1, (int64_t[]){t->M}, 0.5f) : -1;
    int y = tmb_value(&b, "y"), r = tmb_value(&b, "r");
    int in[3] = {x, w, bias};
    int node = tmb_node(&b, "Conv", in, t->bias ? 3 : 2, y);
    tmb_ints(&b, node, "kernel_shape", (int64_t[]){t->KH, t->KW}, 2);
    tmb_ints(&b, node, "strides", (int64_t[]){t->sh, t->sw}, 2);
    tmb_ints(&b, node, "dilations", (int64_t[]){t->dh, t->dw}, 2);
    tmb_ints(&b, node, "pads", (int64_t[]){t->pads[0], t->pads[1], t->pads[2], t->pads[3]}, 4);
    if (t->relu == 2) {
        kn_tensor *lo, *hi;
        kn_tensor_new(KILN_DTYPE_FLOAT, 0, NULL, &lo);
        kn_tensor_new(KILN_DTYPE_FLOAT, 0, NULL, &hi);
        *(float *)lo->data = -0.25f;
        *(float *)hi->data = 0.5f;
        const int l = tmb_const_tensor(&b, "lo", lo), h = tmb_const_tensor(&b, "hi", hi);
        tmb_node(&b, "Clip", (int[]){y, l, h}, 3, r);
        tmb_output(&b, r);
    } else if (t->relu) {
        tmb_node(&b, "Relu", (int[]){y}, 1, r);
        tmb_output(&b, r);
    } else {
        tmb_output(&b, y);
    }
    /* the bias values, for the reference (w_out[1]) */
    if (t->bias) kn_tensor_clone(b.g->values[bias].constant, &w_out[1]);
    return tmb_finish(&b, size);
}

static void reference(const stem_case *t, const float *x, const float *w, const float *bias, int64_t OH, int64_t OW,
                      double *y) {
    for (int64_t n = 0; n < t->N; n++)
        for (int64_t m = 0; m < t->M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double acc = bias ? bias[m] : 0.0;
                    for (int64_t c = 0; c < t->C; c++)
                        for (int64_t kh = 0; kh < t->KH; kh++)
                            for (int64_t kw = 0; kw < t->KW; kw++) {
                                int64_t ih = oh * t->sh - t->pads[0] + kh * t->dh, iw = ow * t->sw - t->pads[1] + kw * t->dw;
                                if (ih < 0 || ih >= t->H || iw < 0 || iw >= t->W) continue;
                                acc += (double)x[((n * t->C + c) * t->H + ih) * t->W + iw] *
                                       w[((m * t->C + c) * t->KH + kh) * t->KW + kw];
                            }
                    if (t->relu == 1 && acc < 0) acc = 0;
                    if (t->relu == 2) acc = acc < -0.25 ? -0.25 : acc > 0.5 ? 0.5 : acc;
                    y[((n * t->M + m) * OH + oh) * OW + ow] = acc;
                }
}

KN_TEST(cpu_conv_channels_in_lanes_matches_definition) {
    const stem_case cases[] = {
        {1, 3, 45, 53, 64, 7, 7, 2, 2, 1, 1, {3, 3, 3, 3}, true, false, false},    /* the stem, small */
        {2, 3, 70, 150, 64, 7, 7, 2, 2, 1, 1, {3, 3, 3, 3}, true, false, true},    /* 2 segments, Relu */
        {1, 3, 31, 197, 32, 5, 5, 2, 2, 1, 1, {1, 2, 3, 0}, false, false, false}, /* 2 vectors, 12 px */
        {1, 2, 40, 41, 96, 5, 5, 2, 2, 2, 2, {4, 4, 4, 4}, true, true, false},    /* dilated, W input */
        {1, 3, 30, 40, 64, 5, 5, 1, 1, 1, 1, {2, 2, 2, 2}, true, false, false},   /* stride 1: the GEMM */
        {2, 4, 33, 66, 64, 6, 4, 3, 3, 1, 1, {0, 0, 0, 0}, true, false, false},   /* stride 3, no pad */
        {1, 1, 64, 64, 32, 11, 11, 4, 4, 1, 1, {5, 5, 5, 5}, false, true, true}, /* one channel, s4 */
        {1, 3, 45, 53, 64, 7, 7, 2, 2, 1, 1, {3, 3, 3, 3}, true, false, 2},       /* the stem, Clip as it stores */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const stem_case *t = &cases[ci];
        kiln_tensor *consts[2] = {0};
        size_t size;
        unsigned char *m = stem_model(t, consts, &size);
        if (!m) continue;
        const int64_t OH = out_dim(t->H, t->KH, t->sh, t->dh, t->pads[0], t->pads[2]);
        const int64_t OW = out_dim(t->W, t->KW, t->sw, t->dw, t->pads[1], t->pads[3]);
        uint32_t seed = 99 + (uint32_t)ci;
        kiln_tensor *x = tmb_random_tensor((int64_t[]){t->N, t->C, t->H, t->W}, 4, &seed, 1, 1), *w = consts[0];
        float *xp = kiln_tensor_data(x);
        if (t->w_input) w = tmb_random_tensor((int64_t[]){t->M, t->C, t->KH, t->KW}, 4, &seed, 0.2f, 1);
        const size_t ny = (size_t)(t->N * t->M * OH * OW);
        double *want = malloc(sizeof(double) * ny);
        reference(t, xp, kiln_tensor_data(w), consts[1] ? kiln_tensor_data(consts[1]) : NULL, OH, OW, want);
        /* KILN_CL: the level's choice, then cl_conv wherever it applies (the AVX2 build sends
         * stride 2 on rows of 16+ outputs to the GEMM), then the GEMM everywhere */
        for (int force = 0; force <= 2; force++)
        for (int threads = 1; threads <= 2; threads++)
            for (int level = 0; level <= 3; level += 3) {
                if (force) setenv("KILN_CL", force == 1 ? "1" : "0", 1);
                kiln_session *s = tmb_session(m, size, threads, level);
                if (!s) {
                    unsetenv("KILN_CL");
                    continue;
                }
                const char *names[2] = {"x", "w"};
                kiln_tensor *ins[2] = {x, w};
                char ctx[160];
                snprintf(ctx, sizeof ctx, "case %zu (%lldx%lld s%lld d%lld, %lld->%lld), KILN_CL forced %d, %d threads, level %d",
                         ci, (long long)t->KH, (long long)t->KW, (long long)t->sh, (long long)t->dh, (long long)t->C,
                         (long long)t->M, force, threads, level);
                tmb_check_runs(s, names, ins, t->w_input ? 2 : 1, want, NULL, ny, 1e-4, 1e-4, ctx);
                kiln_session_destroy(s);
                unsetenv("KILN_CL");
            }
        free(want);
        kiln_tensor_destroy(x);
        kiln_tensor_destroy(w);
        kiln_tensor_destroy(consts[1]);
        free(m);
    }
}

/* ------------------------------------------------------------------ ConvTranspose, stride 2 */

/* ConvTranspose with stride 2 along the row (col2im's vector paths: taps kw, kw + 1 interleaved into
 * whole vectors, 16 columns at a time over the even positions, the rest scalar) against the definition in double: 2x2 s2 (taps that never
 * meet), 3x3 and 4x4 s2 with pads and output_padding (taps that add up), rows of 7-37 input
 * columns (tails), bias, 1 and 2 threads. */
typedef struct ct_case {
    int64_t C, M, H, W, KH, KW, pad, out_pad;
    bool bias;
} ct_case;

KN_TEST(cpu_conv_transpose_stride2_matches_definition) {
    const ct_case cases[] = {
        {5, 7, 9, 37, 2, 2, 0, 0, true}, {3, 4, 6, 16, 3, 3, 1, 1, false},
        {4, 6, 5, 33, 4, 4, 1, 0, true}, {2, 3, 3, 7, 2, 2, 0, 1, false},
        /* taps kw, kw + 1 added as pairs (col2im_pair_s2): pads 0-2, kernel widths 4-6 (an odd
         * last tap alone), rows of 1-40 columns */
        {6, 5, 4, 40, 4, 4, 2, 1, true}, {3, 2, 5, 29, 6, 6, 1, 0, false},
        {2, 3, 4, 1, 4, 4, 1, 0, true}, {4, 4, 7, 18, 5, 5, 2, 1, true},
        /* kernel = stride, no pads: the column buffer written straight into the output (ct_tiles_range),
         * the packed weights several panels deep */
        {40, 24, 10, 20, 2, 2, 0, 0, false}, {33, 17, 3, 53, 2, 2, 0, 0, true},
        /* a 3.3 MB column buffer: the GEMM and col2im in chunks of input rows (L2-sized) */
        {8, 32, 40, 41, 4, 4, 1, 1, true},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const ct_case *t = &cases[ci];
        tmb b;
        tmb_init(&b, 17);
        int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){1, t->C, t->H, t->W}, NULL);
        int w = tmb_const(&b, "w", 4, (int64_t[]){t->C, t->M, t->KH, t->KW}, 0.3f);
        int bias = t->bias ? tmb_const(&b, "b", 1, (int64_t[]){t->M}, 0.5f) : -1, y = tmb_value(&b, "y");
        kiln_tensor *wt = NULL, *bt = NULL;
        kn_tensor_clone(b.g->values[w].constant, &wt);
        if (t->bias) kn_tensor_clone(b.g->values[bias].constant, &bt);
        int node = tmb_node(&b, "ConvTranspose", (int[]){x, w, bias}, t->bias ? 3 : 2, y);
        tmb_ints(&b, node, "strides", (int64_t[]){2, 2}, 2);
        tmb_ints(&b, node, "pads", (int64_t[]){t->pad, t->pad, t->pad, t->pad}, 4);
        tmb_ints(&b, node, "output_padding", (int64_t[]){t->out_pad, t->out_pad}, 2);
        tmb_output(&b, y);
        size_t size;
        unsigned char *m = tmb_finish(&b, &size);
        if (!m) continue;
        const int64_t OH = (t->H - 1) * 2 + t->KH - 2 * t->pad + t->out_pad, OW = (t->W - 1) * 2 + t->KW - 2 * t->pad + t->out_pad;
        kiln_tensor *xt = NULL;
        kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){1, t->C, t->H, t->W}, 4, &xt);
        float *xp = kiln_tensor_data(xt);
        const float *wp = kiln_tensor_data(wt), *bp = bt ? kiln_tensor_data(bt) : NULL;
        uint32_t seed = 7 + (uint32_t)ci;
        for (int64_t i = 0; i < kiln_tensor_element_count(xt); i++) xp[i] = tmb_rand(&seed);
        double *want = calloc((size_t)(t->M * OH * OW), sizeof(double));
        for (int64_t mo = 0; mo < t->M; mo++)
            for (int64_t i = 0; i < OH * OW; i++) want[mo * OH * OW + i] = bp ? bp[mo] : 0.0;
        for (int64_t c = 0; c < t->C; c++)
            for (int64_t ih = 0; ih < t->H; ih++)
                for (int64_t iw = 0; iw < t->W; iw++)
                    for (int64_t mo = 0; mo < t->M; mo++)
                        for (int64_t kh = 0; kh < t->KH; kh++)
                            for (int64_t kw = 0; kw < t->KW; kw++) {
                                int64_t oh = ih * 2 - t->pad + kh, ow = iw * 2 - t->pad + kw;
                                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                                want[(mo * OH + oh) * OW + ow] += (double)xp[(c * t->H + ih) * t->W + iw] *
                                                                  wp[((c * t->M + mo) * t->KH + kh) * t->KW + kw];
                            }
        for (int threads = 1; threads <= 2; threads++) {
            kiln_session *s = tmb_session(m, size, threads, 3);
            const char *names[1] = {"x"};
            kiln_tensor *ins[1] = {xt}, *yt = NULL;
            if (s) CHECK_STATUS(kiln_session_run(s, names, ins, 1, NULL, 1, &yt), KILN_OK);
            if (yt) {
                CHECK_EQ_INT(kiln_tensor_element_count(yt), t->M * OH * OW);
                const float *got = kiln_tensor_data(yt);
                int64_t bad = 0;
                for (int64_t i = 0; i < t->M * OH * OW && kiln_tensor_element_count(yt) == t->M * OH * OW; i++)
                    bad += !(fabs(got[i] - want[i]) <= 1e-4 + 1e-4 * fabs(want[i]));
                CHECK_MSG(bad == 0, "ConvTranspose case %zu, %d threads: %lld of %lld outputs differ", ci, threads,
                          (long long)bad, (long long)(t->M * OH * OW));
            }
            kiln_tensor_destroy(yt);
            kiln_session_destroy(s);
        }
        free(want);
        kiln_tensor_destroy(xt);
        kiln_tensor_destroy(wt);
        kiln_tensor_destroy(bt);
        free(m);
    }
}

/* Convolutions with few output positions and many weights (conv_fewpos.c: output channels in the
 * lanes, each position a broadcast from the input, the padding's taps left out): whole sessions of
 * one Conv (and Conv + Relu, fused into the kernel's epilogue) at 1, 2, 3 and 16 threads against
 * the definition in double, and every thread count's output the same bits as 1 thread's. Shapes:
 * 3x3 512 -> 512 on 4x4 (the kernel's case by default), odd channel counts (a last block of
 * channels part empty, fewer channels than a vector), input channels not a multiple of the
 * kernel's pass of 128, two images, asymmetric pads with a dilation, a 1x1 plane (only the centre
 * tap inside), a 1-D convolution, weights fed as an input (packed per call), no bias, 7x7 and 8x8
 * planes (49 and 64 positions). All but
 * the first also with KILN_FPCONV=1 (the kernel wherever it can run) and KILN_FPCONV=0 (the
 * implicit GEMM), so both paths meet the same reference. */
#include "test_model_builder.h"
#include "unit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fpt_case {
    int64_t N, C, M, H, W, KH, KW, dh, dw;
    int64_t pads[4]; /* top, left, bottom, right */
    int rank;        /* 4: 2-D; 3: 1-D (H = 1, KH = 1, pads along W only) */
    int relu, w_fed, bias;
    int64_t sw; /* stride along W (0: 1) */
} fpt_case;

static const int fpt_threads[4] = {1, 2, 3, 16};

static void fpt_run_case(const fpt_case *k, const char *env) {
    const int64_t OH = k->H + k->pads[0] + k->pads[2] - k->dh * (k->KH - 1);
    const int64_t sw = k->sw > 0 ? k->sw : 1;
    const int64_t OW = (k->W + k->pads[1] + k->pads[3] - k->dw * (k->KW - 1) - 1) / sw + 1;
    const int r = k->rank;
    int64_t xd[4] = {k->N, k->C, k->H, k->W}, wd[4] = {k->M, k->C, k->KH, k->KW}, bd[1] = {k->M};
    if (r == 3) xd[2] = k->W, wd[2] = k->KW;
    tmb b;
    tmb_init(&b, 13);
    const int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, r, xd, NULL);
    uint32_t seed = (uint32_t)(k->C * 131 + k->M * 7 + k->H);
    kiln_tensor *xt = tmb_random_tensor(xd, r, &seed, 1.0f, 1.0f);
    kiln_tensor *wt = tmb_random_tensor(wd, r, &seed, 1.0f, 8.0f);
    float *bv = malloc(sizeof(float) * (size_t)k->M);
    for (int64_t m = 0; m < k->M; m++) bv[m] = k->bias ? tmb_rand(&seed) : 0.0f;
    int w;
    if (k->w_fed) w = tmb_input(&b, "w", KILN_DTYPE_FLOAT, r, wd, NULL);
    else {
        w = tmb_const(&b, "w", r, wd, 1.0f);
        memcpy(b.g->values[w].constant->data, kiln_tensor_data(wt), sizeof(float) * (size_t)(k->M * k->C * k->KH * k->KW));
    }
    int ins[3] = {x, w, 0};
    if (k->bias) {
        ins[2] = tmb_const(&b, "bias", 1, bd, 1.0f);
        memcpy(b.g->values[ins[2]].constant->data, bv, sizeof(float) * (size_t)k->M);
    }
    const int cy = tmb_value(&b, "cy");
    const int node = tmb_node(&b, "Conv", ins, k->bias ? 3 : 2, cy);
    if (r == 4) {
        tmb_ints(&b, node, "kernel_shape", (int64_t[]){k->KH, k->KW}, 2);
        tmb_ints(&b, node, "pads", k->pads, 4);
        tmb_ints(&b, node, "dilations", (int64_t[]){k->dh, k->dw}, 2);
        tmb_ints(&b, node, "strides", (int64_t[]){1, sw}, 2);
    } else {
        tmb_ints(&b, node, "kernel_shape", (int64_t[]){k->KW}, 1);
        tmb_ints(&b, node, "pads", (int64_t[]){k->pads[1], k->pads[3]}, 2);
        tmb_ints(&b, node, "dilations", (int64_t[]){k->dw}, 1);
        tmb_ints(&b, node, "strides", (int64_t[]){sw}, 1);
    }
    int y = cy;
    if (k->relu) {
        y = tmb_value(&b, "y");
        tmb_node(&b, "Relu", (int[]){cy}, 1, y);
    }
    tmb_output(&b, y);
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);

    const size_t ny = (size_t)(k->N * k->M * OH * OW);
    double *want = malloc(sizeof(double) * ny), *scale = malloc(sizeof(double) * ny);
    const float *xp = xt ? kiln_tensor_data(xt) : NULL, *wp = wt ? kiln_tensor_data(wt) : NULL;
    for (int64_t n = 0; xp && wp && n < k->N; n++)
        for (int64_t m = 0; m < k->M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double acc = bv[m], sc = fabs(bv[m]);
                    for (int64_t c = 0; c < k->C; c++)
                        for (int64_t kh = 0; kh < k->KH; kh++)
                            for (int64_t kw = 0; kw < k->KW; kw++) {
                                const int64_t ih = oh - k->pads[0] + kh * k->dh, iw = ow * sw - k->pads[1] + kw * k->dw;
                                if (ih < 0 || ih >= k->H || iw < 0 || iw >= k->W) continue;
                                const double t = (double)xp[((n * k->C + c) * k->H + ih) * k->W + iw] *
                                                 (double)wp[((m * k->C + c) * k->KH + kh) * k->KW + kw];
                                acc += t, sc += fabs(t);
                            }
                    const size_t i = (size_t)(((n * k->M + m) * OH + oh) * OW + ow);
                    want[i] = k->relu ? fmax(acc, 0.0) : acc, scale[i] = sc;
                }
    const char *names[2];
    kiln_tensor *feeds[2];
    const size_t n_in = tmb_conv_feeds(xt, wt, k->w_fed, NULL, names, feeds);
    if (env) setenv("KILN_FPCONV", env, 1);
    else unsetenv("KILN_FPCONV");
    kiln_tensor *first = NULL;
    for (int t = 0; data && xp && wp && t < 4; t++) {
        kiln_session *s = tmb_session(data, size, fpt_threads[t], 3);
        if (!s) continue;
        char ctx[200];
        snprintf(ctx, sizeof ctx, "Conv %lldx%lld %lld -> %lld on %lldx%lld (N %lld, relu %d, w fed %d, bias %d), "
                 "KILN_FPCONV=%s, %d threads", (long long)k->KH, (long long)k->KW, (long long)k->C, (long long)k->M,
                 (long long)k->H, (long long)k->W, (long long)k->N, k->relu, k->w_fed, k->bias, env ? env : "(unset)",
                 fpt_threads[t]);
        tmb_check_runs(s, names, feeds, n_in, want, scale, ny, 1e-6, 5e-6, ctx);
        kiln_tensor *out = NULL;
        CHECK_STATUS(kiln_session_run(s, names, feeds, n_in, NULL, 1, &out), KILN_OK);
        if (!first) first = out;
        else {
            CHECK_MSG(tmb_same_tensor(first, out), "%s: output differs from 1 thread's", ctx);
            kiln_tensor_destroy(out);
        }
        kiln_session_destroy(s);
    }
    unsetenv("KILN_FPCONV");
    kiln_tensor_destroy(first);
    kiln_tensor_destroy(xt);
    kiln_tensor_destroy(wt);
    free(data), free(want), free(scale), free(bv);
}

KN_TEST(cpu_conv_few_positions_against_definition) {
    static const fpt_case main_case = {1, 512, 512, 4, 4, 3, 3, 1, 1, {1, 1, 1, 1}, 4, 0, 0, 1};
    fpt_run_case(&main_case, NULL);
    static const fpt_case cases[] = {
        {1, 37, 45, 4, 4, 3, 3, 1, 1, {1, 1, 1, 1}, 4, 0, 0, 1},   /* odd channels: a last block part empty */
        {2, 200, 70, 2, 2, 3, 3, 1, 1, {1, 1, 1, 1}, 4, 1, 0, 1},  /* 128 + 72 input channels, two images, Relu */
        {1, 33, 40, 3, 4, 3, 5, 2, 1, {1, 2, 2, 1}, 4, 0, 0, 1},   /* asymmetric pads, dilation 2 along H: 2x3 */
        {1, 64, 48, 1, 1, 3, 3, 1, 1, {1, 1, 1, 1}, 4, 1, 1, 1},   /* 1x1 plane: the centre tap alone; w fed */
        {1, 24, 40, 1, 7, 1, 5, 1, 1, {0, 2, 0, 2}, 3, 0, 0, 1},   /* 1-D, 7 positions */
        {1, 20, 17, 4, 4, 3, 3, 1, 1, {1, 1, 1, 1}, 4, 0, 0, 0},   /* 17 channels (a vector and one), no bias */
        {1, 5, 3, 4, 4, 2, 2, 1, 1, {0, 0, 0, 0}, 4, 0, 1, 1},     /* fewer channels than a vector, no pads: 3x3 */
        {1, 96, 64, 5, 3, 3, 3, 1, 1, {0, 1, 0, 1}, 4, 0, 0, 1},   /* 3x3 positions, pads along W only */
        {1, 40, 36, 7, 7, 3, 3, 1, 1, {1, 1, 1, 1}, 4, 1, 0, 1},   /* 7x7: 49 positions, groups of 9-12 */
        {1, 19, 33, 8, 8, 3, 3, 1, 1, {1, 1, 1, 1}, 4, 0, 0, 1},   /* 8x8: 64 positions, the buffer's most */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fpt_run_case(&cases[i], "1");
        fpt_run_case(&cases[i], "0");
    }
}

/* Few rows times constant weights (a classifier's Gemm: 32 x 2048 @ 1000 x 2048^T): the GEMM packs
 * the rows once for all its tiles (sgemm.c, pack_a_job), the depth of each slice in parts where
 * its tasks are fewer than twice the threads. At 1, 2, 3 and 16 threads against the definition in
 * double and bit for bit across threads (every element's sum independent of the tile grid since
 * 84294be; 29 x 1000 @ 37 x 1000^T had other bits at 16 threads than at 1 before it); rows not a
 * multiple of the panels, depths not a multiple of the parts or of 16. */
KN_TEST(cpu_gemm_few_rows_shared_rows_parts) {
    static const int64_t shapes[][3] = {{32, 1000, 2048}, {29, 37, 1000}, {13, 300, 777}, {50, 64, 130}}; /* M, N, K */
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        const int64_t M = shapes[sh][0], N = shapes[sh][1], K = shapes[sh][2];
        tmb b;
        tmb_init(&b, 13);
        const int64_t ad[2] = {M, K}, bd[2] = {N, K}, cd[1] = {N};
        const int a = tmb_input(&b, "a", KILN_DTYPE_FLOAT, 2, ad, NULL);
        const int w = tmb_const(&b, "w", 2, bd, 0.05f), bias = tmb_const(&b, "c", 1, cd, 1.0f);
        const float *wv = b.g->values[w].constant->data, *bv = b.g->values[bias].constant->data;
        double *want = malloc(sizeof(double) * (size_t)(M * N)), *scale = malloc(sizeof(double) * (size_t)(M * N));
        uint32_t seed = 17u + (uint32_t)sh;
        kiln_tensor *at = tmb_random_tensor(ad, 2, &seed, 1.0f, 1.0f);
        const float *ap = at ? kiln_tensor_data(at) : NULL;
        for (int64_t i = 0; ap && i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = bv[j], sc = fabs(bv[j]);
                for (int64_t k = 0; k < K; k++) {
                    const double t = (double)ap[i * K + k] * (double)wv[j * K + k];
                    acc += t, sc += fabs(t);
                }
                want[i * N + j] = acc, scale[i * N + j] = sc;
            }
        const int y = tmb_value(&b, "y");
        tmb_int(&b, tmb_node(&b, "Gemm", (int[]){a, w, bias}, 3, y), "transB", 1);
        tmb_output(&b, y);
        size_t size;
        unsigned char *data = tmb_finish(&b, &size);
        const char *names[1] = {"a"};
        kiln_tensor *first = NULL;
        for (int t = 0; data && ap && t < 4; t++) {
            kiln_session *s = tmb_session(data, size, fpt_threads[t], 3);
            if (!s) continue;
            char ctx[120];
            snprintf(ctx, sizeof ctx, "Gemm %lldx%lld @ %lldx%lld^T, %d threads", (long long)M, (long long)K, (long long)N,
                     (long long)K, fpt_threads[t]);
            tmb_check_runs(s, names, &at, 1, want, scale, (size_t)(M * N), 1e-6, 5e-6, ctx);
            kiln_tensor *out = NULL;
            CHECK_STATUS(kiln_session_run(s, names, &at, 1, NULL, 1, &out), KILN_OK);
            if (!first) first = out;
            else {
                CHECK_MSG(tmb_same_tensor(first, out), "%s: output differs from 1 thread's", ctx);
                kiln_tensor_destroy(out);
            }
            kiln_session_destroy(s);
        }
        kiln_tensor_destroy(first);
        kiln_tensor_destroy(at);
        free(data), free(want), free(scale);
    }
}

/* Strided 1-D convolutions of one input channel through the transposed GEMM (forced with
 * KILN_GEMM_SWAP=1 where AVX2's rule keeps them in the usual orientation): rows split over the
 * threads, the im2col packed once for all tiles by tasks of one panel and a part of a slice's depth
 * where tasks of whole panels would be fewer than twice the threads (sgemm.c, pack_b_plan): 1 -> 512
 * k400 s160 over 16000 samples (98 positions), 1 -> 96 k300 s50 (12 positions, two slices of 256 +
 * 44, parts from 2 threads). At 1, 2, 3, 16 threads against double, bit for bit across threads. */
KN_TEST(cpu_conv_strided_1d_shared_im2col_parts) {
    static const fpt_case cases[] = {
        {1, 1, 512, 1, 16000, 1, 400, 1, 1, {0, 0, 0, 0}, 3, 0, 0, 1, 160},
        {1, 1, 96, 1, 850, 1, 300, 1, 1, {0, 0, 0, 0}, 3, 1, 0, 1, 50},
    };
    for (int swap = 0; swap < 2; swap++) {
        if (swap) setenv("KILN_GEMM_SWAP", "1", 1);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) fpt_run_case(&cases[i], NULL);
        unsetenv("KILN_GEMM_SWAP");
    }
}

/* 3x3 stride-2 convolutions (ResNet-50 v1.5's stage transitions, detectors' downsamplers) against
 * the definition in double: Conv (+ bias) (+ Add of a residual) (+ Relu or Clip), fused into the
 * kernel's epilogue at level 3, separate at level 0. These run on conv.c's channels-in-lanes
 * kernel (cl3_suits: 32 or more output channels in multiples of 32) by bands of output rows, reading
 * the input in place with the tiles at the image's edges padded into the thread's buffer
 * (cl_pad_chan), or by blocks of channels over a padded copy (KILN_CL3_MFIRST=1, the default for
 * large weights on short rows); the others (48 output channels, 16 input channels) on the GEMM
 * or the few-channel kernel. Edges: odd sizes (57x57, 29x31), rows of 7 and 13 outputs, pad 0,
 * asymmetric pads, batch 4, no bias, weights a graph input; 1 and 2 threads. */
#include "test_model_builder.h"

#include "kiln.h"

#include <math.h>
#include <stdlib.h>

typedef struct s2_case {
    int64_t N, C, H, W, M;
    int64_t pads[4]; /* top, left, bottom, right */
    bool bias, w_input, res;
    int act; /* 0 none, 1 Relu, 2 Clip(-0.25, 0.5) */
} s2_case;

KN_TEST(cpu_conv_3x3_s2_match_definition) {
    const s2_case cases[] = {
        {1, 128, 28, 28, 128, {1, 1, 1, 1}, true, false, false, 0}, /* op_sweep's row: 14 outputs a row */
        {1, 64, 56, 60, 64, {1, 1, 1, 1}, true, false, true, 1},    /* 28 x 30 outputs, residual + Relu */
        {1, 32, 57, 57, 64, {1, 1, 1, 1}, false, true, false, 2},   /* odd input, weights fed, Clip */
        {4, 32, 28, 28, 32, {1, 1, 1, 1}, true, false, false, 0},   /* batch 4 */
        {1, 64, 28, 28, 64, {0, 0, 0, 0}, true, false, false, 1},   /* pad 0: 13 outputs a row */
        {1, 256, 14, 14, 256, {1, 1, 1, 1}, true, false, false, 0}, /* 7 outputs a row, 2.4 MB of weights */
        {1, 32, 13, 15, 32, {1, 0, 0, 1}, true, false, true, 0},    /* asymmetric pads */
        {2, 40, 29, 31, 32, {1, 1, 1, 1}, true, false, false, 0},   /* odd sizes, 40 input channels */
        {1, 24, 30, 34, 32, {2, 2, 2, 2}, true, false, false, 0},   /* pads of 2 */
        {1, 48, 30, 30, 48, {1, 1, 1, 1}, true, false, false, 0},   /* 48 outputs: not cl3 */
        {1, 16, 64, 64, 32, {1, 1, 1, 1}, true, false, false, 1},   /* 16 inputs: the few-channel kernel */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const s2_case *t = &cases[ci];
        const tmb_conv_geom g = {t->N, t->C, t->H, t->W, t->M, 1, 3, 3, 2, 2, 1, 1,
                                 {t->pads[0], t->pads[1], t->pads[2], t->pads[3]}};
        const int64_t OH = (t->H + t->pads[0] + t->pads[2] - 3) / 2 + 1;
        const int64_t OW = (t->W + t->pads[1] + t->pads[3] - 3) / 2 + 1;
        kiln_tensor *consts[2] = {0};
        size_t size;
        unsigned char *m = tmb_conv_model(&g, false, t->bias, t->w_input, t->res, t->act, OH, OW, consts, &size);
        CHECK(m != NULL);
        if (!m) continue;
        uint32_t seed = 20202 + (uint32_t)ci;
        const size_t ny = (size_t)(t->N * t->M * OH * OW);
        kiln_tensor *x = tmb_random_tensor((int64_t[]){t->N, t->C, t->H, t->W}, 4, &seed, 1, 1);
        kiln_tensor *w = consts[0], *z = NULL;
        if (t->w_input) w = tmb_random_tensor((int64_t[]){t->M, t->C, 3, 3}, 4, &seed, 1, 8.0f);
        if (t->res) z = tmb_random_tensor((int64_t[]){t->N, t->M, OH, OW}, 4, &seed, 1, 1);
        double *want = malloc(sizeof(double) * ny), *scale = malloc(sizeof(double) * ny);
        tmb_conv_reference(&g, t->act, kiln_tensor_data(x), kiln_tensor_data(w),
                           consts[1] ? kiln_tensor_data(consts[1]) : NULL, z ? kiln_tensor_data(z) : NULL, OH, OW,
                           want, scale);
        /* v 0: as chosen; 1: by blocks of channels; 2: by bands of rows (cl3 only) */
        for (int v = 0; v < 3; v++) {
            if (v) setenv("KILN_CL3_MFIRST", v == 1 ? "1" : "0", 1);
            for (int threads = 1; threads <= 2; threads++)
                for (int level = 0; level <= 3; level += 3) {
                    kiln_session *s = tmb_session(m, size, threads, level);
                    CHECK(s != NULL);
                    if (!s) continue;
                    const char *names[3];
                    kiln_tensor *ins[3];
                    const size_t nin = tmb_conv_feeds(x, w, t->w_input, z, names, ins);
                    char ctx[192];
                    snprintf(ctx, sizeof ctx, "case %zu (%lldx%lldx%lldx%lld -> %lld, pads %lld,%lld,%lld,%lld), %s, %d threads, level %d",
                             ci, (long long)t->N, (long long)t->C, (long long)t->H, (long long)t->W, (long long)t->M,
                             (long long)t->pads[0], (long long)t->pads[1], (long long)t->pads[2], (long long)t->pads[3],
                             v == 0 ? "as chosen" : v == 1 ? "channel blocks" : "row bands", threads, level);
                    tmb_check_runs(s, names, ins, nin, want, scale, ny, 1e-6, 1e-5, ctx);
                    kiln_session_destroy(s);
                }
            unsetenv("KILN_CL3_MFIRST");
        }
        free(want);
        free(scale);
        kiln_tensor_destroy(x);
        kiln_tensor_destroy(w);
        kiln_tensor_destroy(z);
        kiln_tensor_destroy(consts[1]);
        free(m);
    }
}

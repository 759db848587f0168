/* Strided long-kernel 1-D convolutions (audio and STFT front ends: 1 -> 512 channels, kernel 400,
 * stride 160; 1 -> 258, kernel 256, stride 128) against the definition in double: Conv (+ bias)
 * (+ Add of a residual) (+ Relu or Clip), fused at level 3, separate at level 0. conv.c runs them
 * (stride 3+, 8+ taps) as the transposed product with the frames as its rows (fr_run: the input
 * read in place, or the frames copied, gathered when dilated) where the GEMM would run the product
 * transposed, else with the im2col panels transposed from the input (pack_conv_tr; dilated: the
 * phase rows, pack_conv_pt); KILN_GEMM_SWAP=0 and =1 force one or the other wherever the shape
 * allows. Shapes: strides 1 to 200, kernels 3 to 512 (longer and shorter than the stride; below
 * 8 taps the im2col gathers), pads (one frame, centred frames, pads wider than the kernel),
 * dilation 2 and 3, 1-3 input channels, batch 1 and 3, channel and frame counts that end inside a
 * vector and a panel, a single frame, no bias, weights a graph input, and 2-D convolutions of
 * height 1 (and 2); 1, 2 and 3 threads. */
#include "test_model_builder.h"

#include "kiln.h"

#include <math.h>
#include <stdlib.h>

typedef struct c1_case {
    int64_t N, C, H, W, M, KH, KW, sw, dw;
    int64_t pl, pr; /* pads along the row */
    bool bias, w_input, res;
    int act; /* 0 none, 1 Relu, 2 Clip(-0.25, 0.5) */
    bool twod;
} c1_case;

static int64_t c1_out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
    return (in + p0 + p1 - d * (k - 1) - 1) / s + 1;
}

KN_TEST(cpu_conv1d_strided_matches_definition) {
    const c1_case cases[] = {
        {1, 1, 1, 16000, 512, 1, 400, 160, 1, 0, 0, true, false, false, 0, false},   /* whisper-like: 98 frames */
        {3, 1, 1, 16000, 258, 1, 256, 128, 1, 0, 0, true, false, false, 0, false},   /* STFT, batch 3 */
        {1, 1, 1, 4000, 80, 1, 400, 160, 1, 200, 200, true, false, true, 1, false},  /* centred, residual */
        {1, 2, 1, 6000, 96, 1, 512, 200, 1, 0, 37, true, false, false, 0, false},    /* 2 channels */
        {1, 3, 1, 1000, 64, 1, 33, 3, 2, 5, 5, true, false, false, 2, false},        /* 3 channels, dilation 2 */
        {1, 1, 1, 300, 70, 1, 16, 1, 1, 3, 4, true, false, false, 0, false},         /* stride 1 */
        {3, 1, 1, 2000, 130, 1, 100, 7, 1, 9, 0, false, true, false, 0, false},      /* weights an input */
        {1, 2, 1, 5000, 65, 1, 9, 200, 1, 2, 3, true, false, false, 0, false},       /* kernel < stride */
        {1, 1, 1, 512, 100, 1, 512, 64, 1, 0, 0, true, false, false, 1, false},      /* one frame */
        {1, 3, 1, 50, 8, 1, 3, 3, 1, 1, 1, true, false, false, 0, false},            /* tiny */
        {1, 1, 1, 3000, 96, 1, 400, 160, 3, 600, 600, true, false, true, 2, false},  /* dilation 3, wide pads */
        {1, 1, 1, 16000, 64, 1, 10, 5, 1, 0, 0, true, false, false, 0, false},       /* wav2vec's first layer */
        {3, 2, 1, 3001, 66, 1, 64, 33, 1, 70, 1, true, false, true, 0, false},       /* pads wider than the kernel */
        {1, 1, 1, 10000, 200, 1, 300, 97, 1, 0, 0, true, true, false, 1, false},     /* odd stride, input weights */
        {1, 2, 1, 8000, 128, 1, 64, 40, 2, 10, 10, true, false, true, 2, false},    /* dilation 2, 2 channels */
        {1, 2, 1, 900, 48, 1, 64, 16, 1, 3, 5, true, false, false, 0, true},         /* 2-D, height 1 */
        {1, 1, 2, 900, 40, 1, 64, 16, 1, 3, 5, true, false, false, 0, true},         /* 2-D, height 2 */
    };
    const char *swap[] = {NULL, "0", "1"};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const c1_case *t = &cases[ci];
        const tmb_conv_geom g = {t->N, t->C, t->H, t->W, t->M, 1, t->KH, t->KW, 1, t->sw, 1, t->dw,
                                 {0, t->pl, 0, t->pr}};
        const int64_t OH = t->H - t->KH + 1, OW = c1_out(t->W, t->KW, t->sw, t->dw, t->pl, t->pr);
        kiln_tensor *consts[2] = {0};
        size_t size;
        unsigned char *m = tmb_conv_model(&g, !t->twod, t->bias, t->w_input, t->res, t->act, OH, OW, consts, &size);
        CHECK(m != NULL);
        if (!m) continue;
        uint32_t seed = 1107 + (uint32_t)ci;
        const size_t ny = (size_t)(t->N * t->M * OH * OW);
        const int64_t xd[4] = {t->N, t->C, t->H, t->W}, wd[4] = {t->M, t->C, t->KH, t->KW};
        const int64_t xd1[3] = {t->N, t->C, t->W}, wd1[3] = {t->M, t->C, t->KW};
        const int64_t zd[4] = {t->N, t->M, OH, OW}, zd1[3] = {t->N, t->M, OW};
        const int r = t->twod ? 4 : 3;
        kiln_tensor *x = tmb_random_tensor(t->twod ? xd : xd1, r, &seed, 1, 1);
        kiln_tensor *w = consts[0], *z = NULL;
        if (t->w_input) w = tmb_random_tensor(t->twod ? wd : wd1, r, &seed, 1, 16.0f);
        if (t->res) z = tmb_random_tensor(t->twod ? zd : zd1, r, &seed, 1, 1);
        double *want = malloc(sizeof(double) * ny), *scale = malloc(sizeof(double) * ny);
        CHECK(want && scale);
        if (!want || !scale) {
            free(want), free(scale), free(m);
            continue;
        }
        tmb_conv_reference(&g, t->act, kiln_tensor_data(x), kiln_tensor_data(w),
                           consts[1] ? kiln_tensor_data(consts[1]) : NULL, z ? kiln_tensor_data(z) : NULL, OH, OW,
                           want, scale);
        for (int v = 0; v < 3; v++) {
            if (swap[v]) setenv("KILN_GEMM_SWAP", swap[v], 1);
            for (int threads = 1; threads <= 3; threads++)
                for (int level = 0; level <= 3; level += 3) {
                    kiln_session *s = tmb_session(m, size, threads, level);
                    CHECK(s != NULL);
                    if (!s) continue;
                    const char *names[3];
                    kiln_tensor *ins[3];
                    const size_t nin = tmb_conv_feeds(x, w, t->w_input, z, names, ins);
                    char ctx[200];
                    snprintf(ctx, sizeof ctx, "case %zu (N%lld C%lld W%lld M%lld k%lld s%lld d%lld pads %lld,%lld), swap %s, %d threads, level %d",
                             ci, (long long)t->N, (long long)t->C, (long long)t->W, (long long)t->M,
                             (long long)t->KW, (long long)t->sw, (long long)t->dw, (long long)t->pl,
                             (long long)t->pr, swap[v] ? swap[v] : "chosen", threads, level);
                    /* up to 3 x 512 terms a sum in float: 1e-5 of their magnitudes' sum */
                    tmb_check_runs(s, names, ins, nin, want, scale, ny, 1e-6, 1e-5, ctx);
                    kiln_session_destroy(s);
                }
            unsetenv("KILN_GEMM_SWAP");
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

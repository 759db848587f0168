/* The direct convolution's row kernel (conv_direct.c) with its rows as aligned copies (one per
 * phase and shift its taps need, dc_copies_of) or as phases (KILN_DC_COPIES=1 / 0 / the choice),
 * its whole-window tiles (one loop over the taps) beside the border rows' loops, and one-row
 * (1-D, rank 3) convolutions cut into column chunks (strides up to 8 there), against the
 * definition in double: Conv (+ bias) (+ Add of a residual) (+ Relu or Clip), fused into the
 * kernel's epilogue at level 3, separate at level 0. Edges: odd lengths, a last chunk ending inside
 * a vector, chunks starting in the left pad or ending in the right one, pads beyond the window,
 * dilation, strides 1-8 along the row, anisotropic strides, groups, batch 2, no bias, weights a
 * graph input; 1 and 2 threads. */
#include "test_model_builder.h"

#include "kiln.h"

#include <math.h>
#include <stdlib.h>

typedef struct cc_case {
    bool oned; /* rank 3: H = KH = sh = dh = 1, pads top and bottom 0 */
    int64_t N, C, H, W, M, G, KH, KW, sh, sw, dh, dw;
    int64_t pads[4]; /* top, left, bottom, right */
    bool bias, w_input, res;
    int act; /* 0 none, 1 Relu, 2 Clip(-0.25, 0.5) */
} cc_case;

static int64_t cc_out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
    return (in + p0 + p1 - d * (k - 1) - 1) / s + 1;
}

static tmb_conv_geom cc_conv_geom(const cc_case *t) {
    return (tmb_conv_geom){t->N, t->C, t->H, t->W, t->M, t->G, t->KH, t->KW, t->sh, t->sw, t->dh, t->dw,
                           {t->pads[0], t->pads[1], t->pads[2], t->pads[3]}};
}

static unsigned char *cc_model(const cc_case *t, int64_t OH, int64_t OW, kiln_tensor **consts, size_t *size) {
    const tmb_conv_geom g = cc_conv_geom(t);
    return tmb_conv_model(&g, t->oned, t->bias, t->w_input, t->res, t->act, OH, OW, consts, size);
}

static void cc_reference(const cc_case *t, const float *x, const float *w, const float *bias, const float *z,
                         int64_t OH, int64_t OW, double *want, double *scale) {
    const tmb_conv_geom g = cc_conv_geom(t);
    tmb_conv_reference(&g, t->act, x, w, bias, z, OH, OW, want, scale);
}

KN_TEST(cpu_conv_direct_copies_match_definition) {
    const cc_case cases[] = {
        /* 2-D: the row kernel on copies (5 for 5x5 s(1,3), 3 for 3x3 s2 and 3x3 s1), border rows */
        {false, 1, 8, 9, 130, 32, 1, 5, 5, 1, 3, 1, 1, {2, 1, 2, 1}, true, false, true, 1}, /* basic_pitch, cut */
        {false, 1, 5, 11, 41, 48, 1, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}, true, false, false, 0}, /* 3x3 s2, odd W */
        {false, 2, 3, 7, 37, 16, 1, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, false, true, false, 2}, /* s1, no bias */
        {false, 1, 4, 8, 90, 24, 2, 3, 5, 1, 2, 2, 3, {2, 6, 2, 6}, true, false, true, 0},  /* dilations, groups */
        {false, 1, 2, 5, 61, 32, 1, 3, 9, 1, 4, 1, 2, {1, 9, 1, 4}, true, false, false, 1}, /* s4 d2: shifts */
        {false, 1, 3, 4, 29, 16, 1, 3, 3, 1, 1, 1, 1, {5, 5, 5, 5}, true, false, false, 0},  /* pads beyond */
        {false, 1, 4, 6, 200, 8, 1, 3, 19, 1, 1, 1, 1, {1, 9, 1, 9}, true, false, false, 0}, /* 8 copies */
        /* stride 1 on narrow rows: the flat bands (KILN_DC_COPIES does not change them) */
        {false, 2, 32, 17, 17, 32, 1, 7, 1, 1, 1, 1, 1, {3, 0, 3, 0}, true, false, true, 1},  /* 7x1, Inception */
        {false, 1, 16, 17, 17, 16, 1, 1, 7, 1, 1, 1, 1, {0, 3, 0, 3}, false, true, false, 0}, /* 1x7 */
        {false, 1, 8, 12, 19, 24, 1, 3, 3, 1, 1, 2, 2, {2, 2, 2, 2}, true, false, false, 2},  /* dilation 2 */
        {false, 1, 6, 9, 13, 20, 2, 3, 5, 1, 1, 1, 1, {1, 2, 1, 2}, true, false, true, 0},    /* groups */
        /* 1-D: one row in column chunks (a 16000-long wav2vec front end, cut down), strides 1-8 */
        {true, 1, 1, 1, 4003, 64, 1, 1, 10, 1, 5, 1, 1, {0, 0, 0, 0}, true, false, false, 0},
        {true, 2, 1, 1, 2999, 24, 1, 1, 10, 1, 5, 1, 1, {0, 3, 0, 7}, true, false, true, 1}, /* pads, batch 2 */
        {true, 1, 2, 1, 3001, 16, 1, 1, 16, 1, 8, 1, 1, {0, 4, 0, 4}, false, true, false, 2}, /* s8, W input */
        {true, 1, 3, 1, 1777, 40, 1, 1, 7, 1, 6, 1, 2, {0, 11, 0, 2}, true, false, false, 0}, /* s6 d2 */
        {true, 1, 2, 1, 2501, 32, 1, 1, 5, 1, 7, 1, 1, {0, 1, 0, 1}, true, false, true, 0},   /* s7 > KW */
        {true, 1, 4, 1, 1500, 8, 2, 1, 9, 1, 2, 1, 1, {0, 4, 0, 4}, true, false, false, 1},   /* groups, s2 */
        {true, 1, 16, 1, 1001, 4, 1, 1, 9, 1, 2, 1, 1, {0, 4, 0, 4}, true, false, false, 0},  /* Mg 4: phases */
        {true, 1, 1, 1, 913, 64, 1, 1, 3, 1, 1, 1, 1, {0, 1, 0, 1}, true, false, false, 0},   /* s1 */
        {true, 1, 1, 1, 45, 64, 1, 1, 10, 1, 5, 1, 1, {0, 0, 0, 0}, true, false, false, 0},   /* one chunk, OW 8 */
    };
    const char *copies[] = {NULL, "0", "1"};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const cc_case *t = &cases[ci];
        const int64_t OH = cc_out(t->H, t->KH, t->sh, t->dh, t->pads[0], t->pads[2]);
        const int64_t OW = cc_out(t->W, t->KW, t->sw, t->dw, t->pads[1], t->pads[3]);
        kiln_tensor *consts[2] = {0};
        size_t size;
        unsigned char *m = cc_model(t, OH, OW, consts, &size);
        CHECK(m != NULL);
        if (!m) continue;
        uint32_t seed = 9494 + (uint32_t)ci;
        const int64_t Cg = t->C / t->G;
        const size_t ny = (size_t)(t->N * t->M * OH * OW);
        const int r = t->oned ? 3 : 4;
        const int64_t xd[4] = {t->N, t->C, t->H, t->W}, xd1[3] = {t->N, t->C, t->W};
        const int64_t wd[4] = {t->M, Cg, t->KH, t->KW}, wd1[3] = {t->M, Cg, t->KW};
        const int64_t zd[4] = {t->N, t->M, OH, OW}, zd1[3] = {t->N, t->M, OW};
        kiln_tensor *x = tmb_random_tensor(t->oned ? xd1 : xd, r, &seed, 1, 1);
        kiln_tensor *w = consts[0], *z = NULL;
        if (t->w_input) w = tmb_random_tensor(t->oned ? wd1 : wd, r, &seed, 1, 4.0f);
        if (t->res) z = tmb_random_tensor(t->oned ? zd1 : zd, r, &seed, 1, 1);
        double *want = malloc(sizeof(double) * ny), *scale = malloc(sizeof(double) * ny);
        cc_reference(t, kiln_tensor_data(x), kiln_tensor_data(w), consts[1] ? kiln_tensor_data(consts[1]) : NULL,
                     z ? kiln_tensor_data(z) : NULL, OH, OW, want, scale);
        /* the layout as chosen, phases, copies; the kernel as chosen, and forced (KILN_DCONV=1) */
        for (int v = 0; v < 6; v++) {
            if (copies[v % 3]) setenv("KILN_DC_COPIES", copies[v % 3], 1);
            if (v >= 3) setenv("KILN_DCONV", "1", 1);
            for (int threads = 1; threads <= 2; threads++)
                for (int level = 0; level <= 3; level += 3) {
                    kiln_session *s = tmb_session(m, size, threads, level);
                    CHECK(s != NULL);
                    if (!s) continue;
                    const char *names[3];
                    kiln_tensor *ins[3];
                    const size_t nin = tmb_conv_feeds(x, w, t->w_input, z, names, ins);
                    char ctx[160];
                    snprintf(ctx, sizeof ctx, "case %zu (%s, W %lld -> %lld, k%lldx%lld s%lldx%lld), copies %s%s, %d threads, level %d",
                             ci, t->oned ? "1-D" : "2-D", (long long)t->W, (long long)t->M, (long long)t->KH,
                             (long long)t->KW, (long long)t->sh, (long long)t->sw,
                             copies[v % 3] ? copies[v % 3] : "chosen", v >= 3 ? ", forced" : "", threads, level);
                    tmb_check_runs(s, names, ins, nin, want, scale, ny, 1e-6, 2e-6, ctx);
                    kiln_session_destroy(s);
                }
            unsetenv("KILN_DC_COPIES");
            unsetenv("KILN_DCONV");
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

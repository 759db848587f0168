/* The direct convolution's flat bands (conv_direct.c, stride 1 on narrow rows) where the band's
 * rows are x's rows as they lie (no pads along the row: kh x 1 kernels, 1 x kw and kh x kw ones
 * with pads along H only), copied one run a channel (dc_flat_runs) or row by row (KILN_DC_RUNS=0,
 * and every band with pads along the row: its W columns between pads left zero), against the definition in double: Conv (+ bias) (+ Add of a residual) (+ Relu or Clip), fused
 * into the kernel's epilogue at level 3, separate at level 0. Edges: rows of 1, 3 and 5 columns
 * (under a vector), rows of the band above and below the image (pads at the top only, at both
 * ends, pads beyond the window so that a band can lie wholly in the pads), H < KH, dilation along
 * H, groups, batch 2, no bias, weights a graph input; the kernel as chosen and forced onto the flat
 * bands (KILN_DCONV=1, KILN_DC_FLAT=1); 1 and 2 threads. */
#include "test_model_builder.h"

#include "kiln.h"

#include <math.h>
#include <stdlib.h>

typedef struct fr_case {
    int64_t N, C, H, W, M, G, KH, KW, dh;
    int64_t pads[4]; /* top, left, bottom, right */
    bool bias, w_input, res;
    int act; /* 0 none, 1 Relu, 2 Clip(-0.25, 0.5) */
} fr_case;

static tmb_conv_geom fr_conv_geom(const fr_case *t) {
    return (tmb_conv_geom){t->N, t->C, t->H, t->W, t->M, t->G, t->KH, t->KW, 1, 1, t->dh, 1,
                           {t->pads[0], t->pads[1], t->pads[2], t->pads[3]}};
}

KN_TEST(cpu_conv_direct_flat_runs_match_definition) {
    const fr_case cases[] = {
        {2, 32, 17, 17, 32, 1, 7, 1, 1, {3, 0, 3, 0}, true, false, true, 1},   /* Inception's 7x1 */
        {1, 48, 36, 16, 48, 1, 3, 1, 1, {0, 0, 0, 0}, true, false, false, 0},  /* no pads at all (oww) */
        {1, 8, 23, 5, 12, 1, 5, 1, 2, {4, 0, 4, 0}, false, true, false, 2},    /* dilation 2, rows of 5 */
        {1, 4, 300, 3, 4, 1, 7, 1, 1, {3, 0, 3, 0}, false, false, false, 0},   /* rows of 3, many bands */
        {1, 6, 3, 11, 8, 1, 7, 1, 1, {3, 0, 3, 0}, true, false, true, 0},      /* H < KH */
        {1, 8, 10, 9, 8, 2, 3, 1, 1, {2, 0, 0, 0}, true, false, false, 1},     /* pads at the top only, groups */
        {1, 16, 10, 21, 16, 1, 1, 5, 1, {0, 0, 0, 0}, true, true, false, 0},   /* 1x5, no pads */
        {1, 12, 14, 19, 20, 1, 3, 3, 1, {1, 0, 1, 0}, true, false, true, 2},   /* 3x3, pads along H only */
        {1, 4, 20, 1, 4, 1, 3, 1, 1, {1, 0, 1, 0}, true, false, false, 0},     /* rows of 1 */
        {2, 8, 13, 13, 8, 4, 5, 1, 1, {2, 0, 2, 0}, true, false, true, 1},     /* 4 groups, batch 2 */
        {1, 5, 4, 12, 6, 1, 3, 1, 1, {5, 0, 5, 0}, false, false, false, 0},    /* pads beyond the window */
        /* pads along the row: row by row, the W columns between pads that stay zero */
        {1, 16, 17, 17, 16, 1, 1, 7, 1, {0, 3, 0, 3}, true, false, true, 1},   /* Inception's 1x7 */
        {1, 72, 30, 8, 72, 1, 1, 3, 1, {0, 1, 0, 1}, true, false, false, 0},   /* rows of one vector (oww) */
        {1, 8, 9, 5, 8, 1, 3, 3, 1, {1, 1, 1, 1}, false, true, false, 2},      /* rows of 5 */
        {2, 6, 7, 23, 10, 2, 3, 5, 2, {2, 2, 2, 1}, true, false, true, 0},     /* asymmetric pads, dh 2 */
        {1, 4, 6, 1, 4, 1, 3, 3, 1, {4, 1, 4, 1}, true, false, false, 1},      /* rows of 1, pads beyond */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const fr_case *t = &cases[ci];
        const tmb_conv_geom g = fr_conv_geom(t);
        const int64_t OH = t->H + t->pads[0] + t->pads[2] - t->dh * (t->KH - 1);
        const int64_t OW = t->W + t->pads[1] + t->pads[3] - (t->KW - 1);
        kiln_tensor *consts[2] = {0};
        size_t size;
        unsigned char *m = tmb_conv_model(&g, false, t->bias, t->w_input, t->res, t->act, OH, OW, consts, &size);
        CHECK(m != NULL);
        if (!m) continue;
        uint32_t seed = 10101 + (uint32_t)ci;
        const int64_t Cg = t->C / t->G;
        const size_t ny = (size_t)(t->N * t->M * OH * OW);
        kiln_tensor *x = tmb_random_tensor((int64_t[]){t->N, t->C, t->H, t->W}, 4, &seed, 1, 1);
        kiln_tensor *w = consts[0], *z = NULL;
        if (t->w_input) w = tmb_random_tensor((int64_t[]){t->M, Cg, t->KH, t->KW}, 4, &seed, 1, 4.0f);
        if (t->res) z = tmb_random_tensor((int64_t[]){t->N, t->M, OH, OW}, 4, &seed, 1, 1);
        double *want = malloc(sizeof(double) * ny), *scale = malloc(sizeof(double) * ny);
        tmb_conv_reference(&g, t->act, kiln_tensor_data(x), kiln_tensor_data(w),
                           consts[1] ? kiln_tensor_data(consts[1]) : NULL, z ? kiln_tensor_data(z) : NULL, OH, OW,
                           want, scale);
        /* v & 1: row by row (KILN_DC_RUNS=0); v & 2: forced onto the flat bands */
        for (int v = 0; v < 4; v++) {
            if (v & 1) setenv("KILN_DC_RUNS", "0", 1);
            if (v & 2) setenv("KILN_DCONV", "1", 1), setenv("KILN_DC_FLAT", "1", 1);
            for (int threads = 1; threads <= 2; threads++)
                for (int level = 0; level <= 3; level += 3) {
                    kiln_session *s = tmb_session(m, size, threads, level);
                    CHECK(s != NULL);
                    if (!s) continue;
                    const char *names[3];
                    kiln_tensor *ins[3];
                    const size_t nin = tmb_conv_feeds(x, w, t->w_input, z, names, ins);
                    char ctx[192];
                    snprintf(ctx, sizeof ctx, "case %zu (%lldx%lldx%lldx%lld -> %lld g%lld, %lldx%lld d%lld), %s%s, %d threads, level %d",
                             ci, (long long)t->N, (long long)t->C, (long long)t->H, (long long)t->W, (long long)t->M,
                             (long long)t->G, (long long)t->KH, (long long)t->KW, (long long)t->dh,
                             v & 1 ? "row by row" : "runs", v & 2 ? ", flat forced" : "", threads, level);
                    tmb_check_runs(s, names, ins, nin, want, scale, ny, 1e-6, 2e-6, ctx);
                    kiln_session_destroy(s);
                }
            unsetenv("KILN_DC_RUNS");
            unsetenv("KILN_DCONV");
            unsetenv("KILN_DC_FLAT");
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

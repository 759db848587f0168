/* The direct convolution's row kernel (conv_direct.c) at column stride 3, where its rows are
 * the 3 phases alone (dc_copies_pay: no shifted copies on 2-D rows at stride 3), beside the other
 * strides it runs, against the definition in double: Conv (+ bias) (+ Add of a residual) (+ Relu or
 * Clip), fused into the kernel's epilogue at level 3, separate at level 0. Shapes: basic_pitch's
 * 5x5 s(1,3) 8->32 and 7x7 s(1,3) 1->32 cut down, with odd widths (a row's last tile ending inside
 * a vector), the left and right pads reaching into the phases, pads wider than the window, strides
 * (3,1), (1,3), (3,3), 2 and (2,3), dilation, groups, batch 2, no bias, weights a graph input; the
 * layout as chosen and forced (KILN_DC_COPIES=0 / 1) and the kernel as chosen and forced
 * (KILN_DCONV=1); 1 and 2 threads. */
#include "test_model_builder.h"

#include "kiln.h"

#include <math.h>
#include <stdlib.h>

typedef struct s3_case {
    int64_t N, C, H, W, M, G, KH, KW, sh, sw, dh, dw;
    int64_t pads[4]; /* top, left, bottom, right */
    bool bias, w_input, res;
    int act; /* 0 none, 1 Relu, 2 Clip(-0.25, 0.5) */
} s3_case;

static int64_t s3_out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
    return (in + p0 + p1 - d * (k - 1) - 1) / s + 1;
}

KN_TEST(cpu_conv_direct_stride3_matches_definition) {
    const s3_case cases[] = {
        {1, 8, 11, 264, 32, 1, 5, 5, 1, 3, 1, 1, {2, 1, 2, 1}, true, false, false, 0},  /* basic_pitch, cut */
        {1, 8, 7, 131, 32, 1, 5, 5, 1, 3, 1, 1, {2, 1, 2, 1}, true, false, true, 1},    /* odd W: a tail */
        {2, 4, 6, 77, 16, 1, 5, 5, 1, 3, 1, 1, {2, 2, 2, 0}, false, true, false, 2},    /* batch 2, no bias */
        {1, 1, 9, 264, 32, 1, 7, 7, 1, 3, 1, 1, {3, 2, 3, 2}, true, false, false, 0},   /* 7x7 1->32 */
        {1, 3, 13, 50, 24, 1, 5, 3, 3, 1, 1, 1, {2, 1, 2, 1}, true, false, true, 0},    /* (3, 1) */
        {1, 5, 10, 61, 16, 1, 3, 5, 3, 3, 1, 1, {1, 2, 1, 2}, true, false, false, 1},   /* (3, 3) */
        {1, 6, 9, 70, 12, 1, 3, 5, 1, 3, 2, 2, {2, 4, 2, 4}, true, false, false, 0},    /* dilation 2 */
        {1, 8, 8, 97, 16, 2, 5, 5, 1, 3, 1, 1, {2, 1, 2, 1}, true, false, true, 2},     /* groups */
        {1, 4, 6, 40, 8, 1, 3, 3, 1, 3, 1, 1, {5, 6, 5, 6}, true, false, false, 0},     /* pads beyond */
        {1, 6, 12, 83, 24, 1, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}, true, false, false, 1},   /* s2 (copies) */
        {1, 4, 10, 59, 16, 1, 5, 5, 2, 3, 1, 1, {2, 2, 2, 2}, true, true, false, 0},    /* (2, 3) */
        {1, 2, 5, 1, 8, 1, 3, 3, 1, 3, 1, 1, {1, 1, 1, 1}, true, false, false, 0},      /* W 1: one column */
    };
    const char *copies[] = {NULL, "0", "1"};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const s3_case *t = &cases[ci];
        const tmb_conv_geom g = {t->N, t->C, t->H, t->W, t->M, t->G, t->KH, t->KW, t->sh, t->sw, t->dh, t->dw,
                                 {t->pads[0], t->pads[1], t->pads[2], t->pads[3]}};
        const int64_t OH = s3_out(t->H, t->KH, t->sh, t->dh, t->pads[0], t->pads[2]);
        const int64_t OW = s3_out(t->W, t->KW, t->sw, t->dw, t->pads[1], t->pads[3]);
        kiln_tensor *consts[2] = {0};
        size_t size;
        unsigned char *m = tmb_conv_model(&g, false, t->bias, t->w_input, t->res, t->act, OH, OW, consts, &size);
        CHECK(m != NULL);
        if (!m) continue;
        uint32_t seed = 3107 + (uint32_t)ci;
        const size_t ny = (size_t)(t->N * t->M * OH * OW);
        const int64_t xd[4] = {t->N, t->C, t->H, t->W}, wd[4] = {t->M, t->C / t->G, t->KH, t->KW};
        const int64_t zd[4] = {t->N, t->M, OH, OW};
        kiln_tensor *x = tmb_random_tensor(xd, 4, &seed, 1, 1);
        kiln_tensor *w = consts[0], *z = NULL;
        if (t->w_input) w = tmb_random_tensor(wd, 4, &seed, 1, 4.0f);
        if (t->res) z = tmb_random_tensor(zd, 4, &seed, 1, 1);
        double *want = malloc(sizeof(double) * ny), *scale = malloc(sizeof(double) * ny);
        CHECK(want && scale);
        if (!want || !scale) {
            free(want), free(scale), free(m);
            continue;
        }
        tmb_conv_reference(&g, t->act, kiln_tensor_data(x), kiln_tensor_data(w),
                           consts[1] ? kiln_tensor_data(consts[1]) : NULL, z ? kiln_tensor_data(z) : NULL, OH, OW,
                           want, scale);
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
                    snprintf(ctx, sizeof ctx, "case %zu (%lldx%lld, k%lldx%lld s%lldx%lld), copies %s%s, %d threads, level %d",
                             ci, (long long)t->H, (long long)t->W, (long long)t->KH, (long long)t->KW,
                             (long long)t->sh, (long long)t->sw, copies[v % 3] ? copies[v % 3] : "chosen",
                             v >= 3 ? ", forced" : "", threads, level);
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

/* The CPU's depthwise convolution at stride 2 along the row (conv.c's phase-row kernel, dws2:
 * rows split into even and odd columns) against the definition in double: Conv (+ bias) (+ Add of
 * a residual) (+ Relu or Clip), fused at level 3 into the kernel's epilogue, separate nodes at
 * level 0. Edges: odd widths (the split's last vector overlapping the one before, the odd last
 * column), rows that end inside a vector, asymmetric pads, pads wider than the window (all-zero
 * rows and columns), a stride of 1 down the columns, dilation down the columns, even and wide
 * windows (2x2, 3x4, 7x7), one row, one channel, batch 2, no bias, weights a graph input, planes
 * split into row slices (few channels, 2 threads); the kernel as chosen, forced (KILN_DWS2=1)
 * and kept out (KILN_DWS2=0: the other depthwise paths), 1 and 2 threads. */
#include "test_model_builder.h"

#include "kiln.h"

#include <math.h>
#include <stdlib.h>

typedef struct dws2_case {
    int64_t N, C, H, W, KH, KW, sh, sw, dh, dw;
    int64_t pads[4]; /* top, left, bottom, right */
    bool bias, w_input, res;
    int act; /* 0 none, 1 Relu, 2 Clip(-0.25, 0.5) */
} dws2_case;

static int64_t dws2_out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
    return (in + p0 + p1 - d * (k - 1) - 1) / s + 1;
}

/* depthwise: one channel per group, output channel c reads input channel c only */
static tmb_conv_geom dws2_conv_geom(const dws2_case *t) {
    return (tmb_conv_geom){t->N, t->C, t->H, t->W, t->C, t->C, t->KH, t->KW, t->sh, t->sw, t->dh, t->dw,
                           {t->pads[0], t->pads[1], t->pads[2], t->pads[3]}};
}

static unsigned char *dws2_model(const dws2_case *t, int64_t OH, int64_t OW, kiln_tensor **consts, size_t *size) {
    const tmb_conv_geom g = dws2_conv_geom(t);
    return tmb_conv_model(&g, false, t->bias, t->w_input, t->res, t->act, OH, OW, consts, size);
}

static void dws2_reference(const dws2_case *t, const float *x, const float *w, const float *bias, const float *z,
                           int64_t OH, int64_t OW, double *want, double *scale) {
    const tmb_conv_geom g = dws2_conv_geom(t);
    tmb_conv_reference(&g, t->act, x, w, bias, z, OH, OW, want, scale);
}

KN_TEST(cpu_dw_s2_matches_definition) {
    const dws2_case cases[] = {
        {1, 8, 37, 301, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}, true, false, true, 1},     /* the sweep's odd plane */
        {1, 3, 20, 33, 3, 3, 2, 2, 1, 1, {0, 0, 0, 0}, true, false, false, 0},     /* no pads, W odd */
        {1, 5, 17, 40, 5, 5, 2, 2, 1, 1, {0, 2, 1, 1}, true, false, false, 2},     /* asymmetric pads */
        {1, 4, 9, 31, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}, true, false, true, 0},       /* W 31: one split + odd column */
        {1, 2, 1, 200, 1, 7, 1, 2, 1, 1, {0, 3, 0, 3}, true, false, false, 1},     /* one row, stride (1, 2) */
        {1, 6, 30, 64, 3, 3, 1, 2, 2, 1, {2, 1, 2, 1}, true, false, false, 0},     /* dilation 2 down the columns */
        {1, 1, 5, 100, 3, 3, 2, 2, 1, 1, {4, 4, 4, 4}, true, false, true, 2},      /* pads beyond the window */
        {2, 16, 28, 28, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}, false, true, false, 0},    /* batch 2, no bias, W input */
        {1, 3, 12, 57, 7, 7, 2, 2, 1, 1, {3, 3, 3, 3}, true, false, false, 1},     /* 7x7 */
        {1, 2, 6, 47, 2, 2, 2, 2, 1, 1, {0, 0, 0, 0}, true, false, true, 0},       /* 2x2, even window */
        {1, 4, 8, 300, 3, 4, 2, 2, 1, 1, {1, 2, 1, 1}, true, true, false, 2},      /* 3x4, W input */
        {1, 72, 14, 56, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}, true, false, true, 1},     /* MobileNetV3's, cut down */
        {1, 3, 9, 70, 3, 3, 2, 2, 1, 2, {2, 2, 2, 2}, true, false, false, 0},      /* dilation along the row: others */
        {1, 2, 40, 130, 5, 5, 2, 2, 1, 1, {2, 2, 2, 2}, true, false, true, 1},     /* few planes: row slices */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const dws2_case *t = &cases[ci];
        const int64_t OH = dws2_out(t->H, t->KH, t->sh, t->dh, t->pads[0], t->pads[2]);
        const int64_t OW = dws2_out(t->W, t->KW, t->sw, t->dw, t->pads[1], t->pads[3]);
        kiln_tensor *consts[2] = {0};
        size_t size;
        unsigned char *m = dws2_model(t, OH, OW, consts, &size);
        if (!m) continue;
        uint32_t seed = 9595 + (uint32_t)ci;
        const size_t ny = (size_t)(t->N * t->C * OH * OW);
        kiln_tensor *x = tmb_random_tensor((int64_t[]){t->N, t->C, t->H, t->W}, 4, &seed, 1, 1);
        kiln_tensor *w = consts[0], *z = NULL;
        if (t->w_input) w = tmb_random_tensor((int64_t[]){t->C, 1, t->KH, t->KW}, 4, &seed, 1, 4.0f);
        if (t->res) z = tmb_random_tensor((int64_t[]){t->N, t->C, OH, OW}, 4, &seed, 1, 1);
        double *want = malloc(sizeof(double) * ny), *scale = malloc(sizeof(double) * ny);
        dws2_reference(t, kiln_tensor_data(x), kiln_tensor_data(w), consts[1] ? kiln_tensor_data(consts[1]) : NULL,
                       z ? kiln_tensor_data(z) : NULL, OH, OW, want, scale);
        /* 0: as chosen; 1: the phase-row kernel wherever it can run; 2: never */
        for (int force = 0; force <= 2; force++) {
            if (force) setenv("KILN_DWS2", force == 1 ? "1" : "0", 1);
            for (int threads = 1; threads <= 2; threads++)
                for (int level = 0; level <= 3; level += 3) {
                    kiln_session *s = tmb_session(m, size, threads, level);
                    if (!s) continue;
                    const char *names[3];
                    kiln_tensor *ins[3];
                    const size_t nin = tmb_conv_feeds(x, w, t->w_input, z, names, ins);
                    char ctx[192];
                    snprintf(ctx, sizeof ctx,
                             "case %zu (%lldx%lldx%lldx%lld, %lldx%lld s%lldx%lld d%lldx%lld), KILN_DWS2 mode %d, "
                             "%d threads, level %d",
                             ci, (long long)t->N, (long long)t->C, (long long)t->H, (long long)t->W, (long long)t->KH,
                             (long long)t->KW, (long long)t->sh, (long long)t->sw, (long long)t->dh, (long long)t->dw,
                             force, threads, level);
                    tmb_check_runs(s, names, ins, nin, want, scale, ny, 1e-6, 2e-6, ctx);
                    kiln_session_destroy(s);
                }
            unsetenv("KILN_DWS2");
        }
        free(want);
        free(scale);
        kiln_tensor_destroy(x);
        if (t->w_input) kiln_tensor_destroy(w);
        kiln_tensor_destroy(consts[0]);
        kiln_tensor_destroy(z);
        kiln_tensor_destroy(consts[1]);
        free(m);
    }
}

/* The CPU's direct convolution with output pixels in the lanes (conv_direct.c: depthwise layers on
 * wide rows, few output channels a group, shallow windows) against the definition in double:
 * Conv (+ bias) (+ Add of a residual input) (+ Relu or Clip), which level 3 fuses into one
 * kiln.FusedConv (the kernel's epilogue), at level 0 separate nodes. Edges: rows not a multiple of
 * the vector (and shorter than one), planes lower than the kernel, asymmetric pads and pads wider
 * than the kernel's reach, strides 2, 3 and 4 along the row with odd widths, anisotropic strides,
 * dilation, groups of several channels, depthwise multipliers, batch 2, no bias, weights a
 * constant (rearranged once per session, two runs) or a graph input; the kernel as chosen, forced
 * (KILN_DCONV=1), forced in passes of 8 output channels (KILN_DC_MBLK=8) and kept out
 * (KILN_DCONV=0: the other paths), 1 and 2 threads. Under the
 * sanitizer build this is also the out-of-bounds test for the kernel's row copies and tails. */
#include "test_model_builder.h"

#include "kiln.h"

#include <math.h>
#include <stdlib.h>

typedef struct dc_case {
    int64_t N, C, H, W, M, G, KH, KW, sh, sw, dh, dw;
    int64_t pads[4]; /* top, left, bottom, right */
    bool bias, w_input, res;
    int act; /* 0 none, 1 Relu, 2 Clip(-0.25, 0.5) */
} dc_case;

static int64_t dc_out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
    return (in + p0 + p1 - d * (k - 1) - 1) / s + 1;
}

static tmb_conv_geom dc_conv_geom(const dc_case *t) {
    return (tmb_conv_geom){t->N, t->C, t->H, t->W, t->M, t->G, t->KH, t->KW, t->sh, t->sw, t->dh, t->dw,
                           {t->pads[0], t->pads[1], t->pads[2], t->pads[3]}};
}

static unsigned char *dc_model(const dc_case *t, int64_t OH, int64_t OW, kiln_tensor **consts, size_t *size) {
    const tmb_conv_geom g = dc_conv_geom(t);
    return tmb_conv_model(&g, false, t->bias, t->w_input, t->res, t->act, OH, OW, consts, size);
}

static void dc_reference(const dc_case *t, const float *x, const float *w, const float *bias, const float *z,
                         int64_t OH, int64_t OW, double *want, double *scale) {
    const tmb_conv_geom g = dc_conv_geom(t);
    tmb_conv_reference(&g, t->act, x, w, bias, z, OH, OW, want, scale);
}

KN_TEST(cpu_conv_direct_matches_definition) {
    const dc_case cases[] = {
        /* depthwise on wide rows (a detector's 400x304 planes, cut down), stride 1 and 2: the
         * channels-in-lanes kernel (conv.c's dw16) at 8+ channels, this one with fewer */
        {1, 16, 21, 304, 16, 16, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, true, false, false, 0},
        {1, 6, 24, 301, 6, 6, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}, true, false, true, 1},   /* odd width, residual */
        {2, 6, 17, 259, 6, 6, 5, 5, 2, 2, 1, 1, {0, 2, 1, 1}, false, true, false, 2}, /* asymmetric pads, W input */
        {1, 4, 9, 300, 8, 4, 3, 3, 1, 1, 2, 2, {2, 2, 2, 2}, true, false, false, 0},  /* multiplier 2, dilation 2 */
        {1, 5, 2, 270, 5, 5, 5, 5, 1, 1, 1, 1, {2, 2, 2, 2}, true, false, false, 1},  /* H < KH */
        {1, 3, 11, 200, 3, 3, 3, 7, 1, 3, 1, 1, {1, 3, 1, 3}, true, false, false, 0}, /* stride 3 along the row */
        {1, 4, 6, 140, 4, 4, 3, 3, 1, 1, 1, 1, {6, 6, 6, 6}, true, false, true, 2},   /* pads beyond the window */
        /* few output channels (an audio model's 172x264 spectrogram, cut down) */
        {1, 8, 13, 264, 8, 1, 3, 39, 1, 1, 1, 1, {1, 19, 1, 19}, true, false, true, 1},
        {1, 8, 12, 61, 16, 1, 5, 5, 1, 3, 1, 1, {2, 1, 2, 1}, true, false, false, 1}, /* stride (1, 3) */
        {1, 8, 15, 45, 1, 1, 5, 5, 1, 1, 1, 1, {2, 2, 2, 2}, true, false, false, 0},  /* one output channel */
        {2, 33, 9, 21, 1, 1, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, false, true, true, 0},  /* no bias, W input */
        {1, 6, 41, 33, 6, 3, 5, 5, 2, 2, 1, 1, {2, 2, 2, 2}, true, false, false, 2},  /* groups, odd width */
        {1, 4, 5, 6, 2, 1, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, true, false, true, 1},     /* OW < 8 */
        {1, 3, 3, 7, 3, 1, 5, 5, 2, 2, 1, 1, {1, 1, 1, 1}, true, false, false, 0},    /* 2x2 output, H < KH */
        {1, 4, 1, 40, 3, 1, 1, 9, 1, 2, 1, 1, {0, 4, 0, 4}, true, false, false, 0},   /* one row (1-D as 2-D) */
        {1, 2, 1, 700, 2, 2, 1, 100, 1, 2, 1, 1, {0, 10, 0, 10}, true, false, true, 1}, /* 100 taps, s2, one row */
        {1, 3, 30, 52, 32, 1, 7, 7, 2, 2, 1, 1, {3, 3, 3, 3}, true, false, true, 1},  /* a stem: 3 -> 32 */
        /* deep windows on a multiple of 8 output channels: blocks of 8 channels by 3 vectors at
         * AVX-512 (ResNet's 7x7 s2 3->64 stem on rows of 112: tiles of 3, 2 and 2 vectors), 5
         * blocks of 8, a row ending inside a vector */
        {1, 3, 13, 224, 64, 1, 7, 7, 2, 2, 1, 1, {3, 3, 3, 3}, true, false, false, 1}, /* the stem, 6 rows */
        {2, 3, 11, 77, 40, 1, 7, 7, 2, 2, 1, 1, {3, 2, 3, 3}, false, false, true, 2},  /* 3 -> 40, OW 38 */
        {1, 4, 20, 37, 12, 2, 3, 3, 1, 1, 2, 1, {2, 1, 2, 1}, true, false, false, 0}, /* Mg 6 (blocks of 2), dh 2 */
        /* shallow windows on many output channels over large planes: passes of 8 channels
         * (dc_shallow_wide; where the output exceeds twice the L2, and in the forced pass below) */
        {1, 1, 70, 101, 40, 1, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, true, false, true, 1}, /* 1 -> 40, residual */
        {2, 2, 60, 75, 20, 1, 3, 3, 1, 1, 1, 1, {1, 0, 1, 2}, false, true, false, 2}, /* passes 8, 8, 4; W input */
        {1, 2, 40, 70, 24, 2, 3, 3, 2, 1, 1, 1, {1, 1, 1, 1}, true, false, false, 0},  /* 2 groups of 12, stride (2, 1) */
        /* strides 3 and 4 along the row (the rows split into phases by permutes), rows whose last
         * tile ends inside a vector (stored under a mask at AVX-512) */
        {1, 8, 6, 264, 32, 1, 5, 5, 1, 3, 1, 1, {2, 2, 2, 2}, true, false, true, 1},   /* OW 88, residual */
        {1, 3, 7, 131, 6, 1, 3, 6, 1, 4, 1, 1, {1, 5, 1, 2}, true, false, false, 2},   /* stride 4, pads 5 and 2 */
        {1, 2, 5, 23, 4, 2, 3, 3, 1, 4, 1, 2, {1, 1, 1, 0}, false, true, false, 0},    /* stride 4, dilation 2, groups */
        {1, 5, 9, 97, 5, 5, 3, 3, 1, 3, 1, 1, {1, 1, 1, 1}, true, false, true, 1},     /* depthwise, stride 3 */
        {1, 4, 4, 700, 8, 1, 3, 4, 1, 4, 1, 1, {1, 0, 1, 0}, true, false, false, 0},   /* stride 4, OW 175 */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const dc_case *t = &cases[ci];
        const int64_t OH = dc_out(t->H, t->KH, t->sh, t->dh, t->pads[0], t->pads[2]);
        const int64_t OW = dc_out(t->W, t->KW, t->sw, t->dw, t->pads[1], t->pads[3]);
        kiln_tensor *consts[2] = {0};
        size_t size;
        unsigned char *m = dc_model(t, OH, OW, consts, &size);
        if (!m) continue;
        uint32_t seed = 4242 + (uint32_t)ci;
        const int64_t Cg = t->C / t->G;
        const size_t ny = (size_t)(t->N * t->M * OH * OW);
        kiln_tensor *x = tmb_random_tensor((int64_t[]){t->N, t->C, t->H, t->W}, 4, &seed, 1, 1);
        kiln_tensor *w = consts[0], *z = NULL;
        float *xp = kiln_tensor_data(x);
        if (t->w_input) w = tmb_random_tensor((int64_t[]){t->M, Cg, t->KH, t->KW}, 4, &seed, 1, 4.0f);
        if (t->res) z = tmb_random_tensor((int64_t[]){t->N, t->M, OH, OW}, 4, &seed, 1, 1);
        double *want = malloc(sizeof(double) * ny), *scale = malloc(sizeof(double) * ny);
        dc_reference(t, xp, kiln_tensor_data(w), consts[1] ? kiln_tensor_data(consts[1]) : NULL,
                     z ? kiln_tensor_data(z) : NULL, OH, OW, want, scale);
        /* 0: as chosen; 1: the direct kernel wherever it can; 2: never; 3: as 1, in passes of 8
         * output channels (KILN_DC_MBLK) */
        for (int force = 0; force <= 3; force++) {
            if (force) setenv("KILN_DCONV", force == 2 ? "0" : "1", 1);
            if (force == 3) setenv("KILN_DC_MBLK", "8", 1);
            for (int threads = 1; threads <= 2; threads++)
                for (int level = 0; level <= 3; level += 3) {
                    kiln_session *s = tmb_session(m, size, threads, level);
                    if (!s) continue;
                    const char *names[3];
                    kiln_tensor *ins[3];
                    const size_t nin = tmb_conv_feeds(x, w, t->w_input, z, names, ins);
                    char ctx[192];
                    snprintf(ctx, sizeof ctx,
                             "case %zu (%lldx%lldx%lldx%lld -> %lld g%lld, %lldx%lld s%lldx%lld d%lldx%lld), "
                             "KILN_DCONV forced %d, %d threads, level %d",
                             ci, (long long)t->N, (long long)t->C, (long long)t->H, (long long)t->W, (long long)t->M,
                             (long long)t->G, (long long)t->KH, (long long)t->KW, (long long)t->sh, (long long)t->sw,
                             (long long)t->dh, (long long)t->dw, force, threads, level);
                    tmb_check_runs(s, names, ins, nin, want, scale, ny, 1e-6, 2e-6, ctx);
                    kiln_session_destroy(s);
                }
            unsetenv("KILN_DCONV");
            unsetenv("KILN_DC_MBLK");
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

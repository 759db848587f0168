/* The CPU's 1x1 (pointwise) convolutions with their fused epilogues against the definition in
 * double: Conv (+ bias) (+ Add of a residual input) (+ Relu or Clip), which level 3 fuses into one
 * kiln.FusedConv whose residual and clamp the GEMM's micro-kernel applies as it stores the output
 * (sgemm.c: c_add, clamp), at level 0 as separate nodes. Every GEMM order the shapes reach is
 * forced in turn: the usual one, rows first (A prepacked: constant weights), transposed
 * (KILN_GEMM_SWAP=1, on planes up to 512 pixels) and never transposed; stride 1 (the input planes
 * read as B) and 2 (B gathered by the packing callback), a padded 1x1 (not pointwise: the implicit
 * GEMM), odd channel counts and planes, batch > 1, weights a constant or a graph input, the
 * 7x7-plane kernel with channels in the lanes (pw_conv), 1 and 2 threads; Swish (Sigmoid and Mul)
 * and HardSwish as the convolution's epilogue function. */
#include "test_model_builder.h"

#include "kiln.h"

#include <math.h>
#include <stdlib.h>

typedef struct pw_case {
    int64_t N, C, H, W, M, s, pad;
    bool res, w_input;
    int act; /* 0 none, 1 Relu, 2 Clip(-0.25, 0.5), 3 Swish (x * Sigmoid(x)), 4 HardSwish */
} pw_case;

static int64_t pw_out(const pw_case *t, int64_t in) { return (in + 2 * t->pad - 1) / t->s + 1; }

static unsigned char *pw_model(const pw_case *t, kiln_tensor **consts, size_t *size) {
    tmb b;
    tmb_init(&b, 14); /* HardSwish from opset 14 */
    const int64_t OH = pw_out(t, t->H), OW = pw_out(t, t->W);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){t->N, t->C, t->H, t->W}, NULL);
    int64_t wd[4] = {t->M, t->C, 1, 1};
    int w;
    if (t->w_input) {
        w = tmb_input(&b, "w", KILN_DTYPE_FLOAT, 4, wd, NULL);
    } else {
        w = tmb_const(&b, "w", 4, wd, 1.0f / sqrtf((float)t->C));
        kn_tensor_clone(b.g->values[w].constant, &consts[0]);
    }
    int z = t->res ? tmb_input(&b, "z", KILN_DTYPE_FLOAT, 4, (int64_t[]){t->N, t->M, OH, OW}, NULL) : -1;
    int bias = tmb_const(&b, "b", 1, (int64_t[]){t->M}, 0.5f);
    kn_tensor_clone(b.g->values[bias].constant, &consts[1]);
    int y = tmb_value(&b, "y");
    int node = tmb_node(&b, "Conv", (int[]){x, w, bias}, 3, y);
    tmb_ints(&b, node, "kernel_shape", (int64_t[]){1, 1}, 2);
    tmb_ints(&b, node, "strides", (int64_t[]){t->s, t->s}, 2);
    tmb_ints(&b, node, "pads", (int64_t[]){t->pad, t->pad, t->pad, t->pad}, 4);
    tmb_output(&b, tmb_conv_epilogue(&b, y, z, t->act));
    return tmb_finish(&b, size);
}

/* want: the definition in double; scale: sum |x w| + |bias| + |z| for the error bound. */
static void pw_reference(const pw_case *t, const float *x, const float *w, const float *bias, const float *z,
                         int64_t OH, int64_t OW, double *want, double *scale) {
    const tmb_conv_geom g = {t->N, t->C, t->H, t->W, t->M, 1, 1, 1, t->s, t->s, 1, 1, {t->pad, t->pad, t->pad, t->pad}};
    tmb_conv_reference(&g, t->act, x, w, bias, z, OH, OW, want, scale);
}

/* Runs case t (inputs from seed) against the definition in double: as chosen, transposed wherever
 * the GEMM can (KILN_GEMM_SWAP=1), never transposed with rows first off; 1 and 2 threads; levels 0
 * and 3. */
static void pw_check(const pw_case *t, uint32_t seed, size_t ci) {
    kiln_tensor *consts[2] = {0};
    size_t size;
    unsigned char *m = pw_model(t, consts, &size);
    if (!m) return;
    const int64_t OH = pw_out(t, t->H), OW = pw_out(t, t->W);
    const size_t ny = (size_t)(t->N * t->M * OH * OW);
    kiln_tensor *x = tmb_random_tensor((int64_t[]){t->N, t->C, t->H, t->W}, 4, &seed, 1, 1);
    kiln_tensor *w = consts[0], *z = NULL;
    float *xp = kiln_tensor_data(x);
    if (t->w_input) w = tmb_random_tensor((int64_t[]){t->M, t->C, 1, 1}, 4, &seed, 1, sqrtf((float)t->C));
    if (t->res) z = tmb_random_tensor((int64_t[]){t->N, t->M, OH, OW}, 4, &seed, 1, 1);
    double *want = malloc(sizeof(double) * ny), *scale = malloc(sizeof(double) * ny);
    pw_reference(t, xp, kiln_tensor_data(w), kiln_tensor_data(consts[1]), z ? kiln_tensor_data(z) : NULL, OH, OW, want,
                 scale);
    /* 0: as chosen; 1: transposed wherever it can; 2: never transposed, rows first off */
    for (int force = 0; force <= 2; force++) {
        if (force) setenv("KILN_GEMM_SWAP", force == 1 ? "1" : "0", 1);
        if (force == 2) setenv("KILN_GEMM_ROWS_FIRST", "0", 1);
        for (int threads = 1; threads <= 2; threads++)
            for (int level = 0; level <= 3; level += 3) {
                kiln_session *s = tmb_session(m, size, threads, level);
                if (!s) continue;
                const char *names[3];
                kiln_tensor *ins[3];
                const size_t nin = tmb_conv_feeds(x, w, t->w_input, z, names, ins);
                char ctx[192];
                snprintf(ctx, sizeof ctx,
                         "case %zu (%lldx%lldx%lldx%lld -> %lld, s%lld pad %lld, res %d, act %d), forced %d, %d threads, level %d",
                         ci, (long long)t->N, (long long)t->C, (long long)t->H, (long long)t->W, (long long)t->M,
                         (long long)t->s, (long long)t->pad, t->res, t->act, force, threads, level);
                tmb_check_runs(s, names, ins, nin, want, scale, ny, 1e-6, 2e-6, ctx);
                kiln_session_destroy(s);
            }
        unsetenv("KILN_GEMM_SWAP"), unsetenv("KILN_GEMM_ROWS_FIRST");
    }
    free(want);
    free(scale);
    kiln_tensor_destroy(x);
    kiln_tensor_destroy(w);
    kiln_tensor_destroy(z);
    kiln_tensor_destroy(consts[1]);
    free(m);
}

KN_TEST(cpu_conv1x1_matches_definition) {
    const pw_case cases[] = {
        {1, 64, 56, 56, 256, 1, 0, true, false, 1},   /* ResNet-50 expansion: rows first, residual */
        {1, 256, 28, 28, 64, 1, 0, false, false, 1},  /* reduction */
        {1, 256, 14, 14, 1024, 1, 0, true, false, 1}, /* 196 pixels: usual orientation at K 256 */
        {1, 1024, 14, 14, 96, 1, 0, true, false, 2},  /* deep K: several slices, transposed by the rule */
        {2, 512, 7, 7, 160, 1, 0, true, false, 1},    /* 7x7: transposed, batch 2 */
        {1, 200, 7, 7, 96, 1, 0, true, false, 1},     /* 7x7, few K: channels in the lanes (pw_conv) */
        {1, 64, 7, 7, 48, 1, 0, true, false, 2},      /* one panel: its pixels split into groups */
        {2, 17, 13, 29, 40, 1, 0, true, false, 2},    /* odd everything, Clip */
        {1, 72, 29, 31, 200, 2, 0, false, false, 1},  /* stride 2: B gathered */
        {3, 33, 15, 15, 70, 2, 0, true, false, 1},    /* stride 2, residual, batch 3 */
        {1, 300, 28, 28, 130, 2, 0, true, false, 0},  /* stride 2, K past a slice */
        {2, 40, 20, 23, 48, 3, 0, true, false, 1},    /* stride 3: the subsample's scalar columns */
        {1, 24, 9, 70, 32, 2, 0, false, true, 2},     /* stride 2, rows of 35 (a masked tail), W an input */
        {1, 3, 20, 20, 5, 1, 0, true, false, 0},      /* tiny: residual, no activation */
        {1, 16, 10, 12, 24, 1, 1, true, false, 1},    /* padded 1x1: the implicit GEMM */
        {1, 48, 30, 30, 64, 1, 0, true, true, 1},     /* W a graph input: A packed per call */
        {1, 600, 9, 40, 37, 1, 0, true, false, 1},    /* 3 slices of K, rows first */
        {1, 16, 112, 112, 24, 1, 0, false, false, 2}, /* wide plane, few channels */
        /* EfficientNet / MobileNet-V3 expansions on 7x7 with their activations as the GEMM's
         * epilogue: transposed on AVX2 from K 37 (kn_sgemm_swaps), else channels in the lanes */
        {1, 192, 7, 7, 1152, 1, 0, false, false, 3},
        {1, 96, 7, 7, 576, 1, 0, false, false, 4},
        {2, 40, 7, 7, 120, 1, 0, true, false, 3},
        {1, 112, 14, 14, 672, 1, 0, false, false, 3},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) pw_check(&cases[ci], 777 + (uint32_t)ci, ci);
}

/* Planes whose pixels end in a part panel of 1 to 8 columns (N mod 16: 14x14 = 196 ends in 4)
 * with output channels in 2 to 11 row panels of 6, whole and part: the AVX2 GEMM computes such a
 * last panel for two whole row panels in one call (sgemm.c: ukr_narrow2), in the usual order (K
 * past a slice, or rows first off) and rows first (K within a slice, A prepacked), odd panel
 * counts leaving one row panel alone, a part row panel last, weights a graph input (A packed per
 * call), residual and Relu or Clip, batch 2. Against the definition in double, every GEMM order
 * forced as above. */
KN_TEST(cpu_conv1x1_narrow_tail_matches_definition) {
    const pw_case cases[] = {
        {1, 40, 14, 14, 42, 1, 0, true, false, 1},  /* 196 = 12 x 16 + 4, 7 row panels: rows first */
        {1, 300, 9, 9, 29, 1, 0, true, false, 2},   /* 81 = 5 x 16 + 1, 2 slices of K: usual order */
        {2, 64, 6, 20, 36, 1, 0, true, false, 1},   /* 120 = 7 x 16 + 8, 6 row panels, batch 2 */
        {1, 520, 3, 33, 18, 1, 0, false, false, 0}, /* 99 = 6 x 16 + 3, 3 slices, no activation */
        {1, 24, 10, 10, 30, 1, 0, true, true, 1},   /* 100 = 6 x 16 + 4, W an input: A packed per call */
        {1, 256, 14, 14, 66, 1, 0, true, false, 2}, /* K one whole slice, 11 row panels */
        {1, 48, 9, 9, 22, 1, 0, true, false, 1},    /* 3 whole row panels, then a part one second of a pair */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) pw_check(&cases[ci], 4242 + (uint32_t)ci, ci);
}

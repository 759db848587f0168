/* The CPU's 3x3 convolutions (conv_winograd.c's F(4x4, 3x3) at stride 1, dilated or not, and its
 * F(2x2, 3x3) on planes up to 14 columns (forced, and where the weights are large: 256 -> 256), conv.c's
 * direct kernel with output channels in the lanes at stride 2 and on 7x7 planes, output pixels in
 * the lanes at stride 1 and 2 with at most 16 input channels, the implicit GEMM
 * for the rest: groups, few channels) against the definition in double over many shapes: odd plane sizes (partial 4x4
 * tiles, rows of more than 16 tiles, partial pixel tiles), every padding combination including
 * none and asymmetric, batch > 1, channel counts that are not multiples of the vector width, bias
 * or none, weights a constant (transformed once per session, two runs) or a graph input
 * (transformed per call), a fused Relu (level 3: the epilogue), 1 and 2 threads, and both fast
 * paths forced on (KILN_WINO=1, KILN_CL3=1) for the shapes their choice leaves to the GEMM, and the
 * direct kernel forced with Winograd off (dilated and stride-1 shapes). Dilated stride-1 shapes run
 * Winograd over their phase images (rows and columns of one residue mod the dilation). The
 * error bound scales with sum |x| |w| over each output's window: F(4x4, 3x3) rounds more than a
 * direct sum (about 10x), within float accuracy. */
#include "test_model_builder.h"

#include "kiln.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct c3_case {
    int64_t N, C, H, W, M, s, d, g;
    int64_t pads[4]; /* top, left, bottom, right */
    bool bias, w_input, relu;
    int64_t dw; /* the columns' dilation when it differs from d (0: d) */
} c3_case;

static int64_t c3_dw(const c3_case *t) { return t->dw ? t->dw : t->d; }

static int64_t c3_out(int64_t in, int64_t s, int64_t d, int64_t p0, int64_t p1) {
    return (in + p0 + p1 - d * 2 - 1) / s + 1;
}

static unsigned char *c3_model(const c3_case *t, kiln_tensor **consts, size_t *size) {
    tmb b;
    tmb_init(&b, 23);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){t->N, t->C, t->H, t->W}, NULL);
    int64_t wd[4] = {t->M, t->C / t->g, 3, 3};
    int w;
    if (t->w_input) {
        w = tmb_input(&b, "w", KILN_DTYPE_FLOAT, 4, wd, NULL);
    } else {
        w = tmb_const(&b, "w", 4, wd, 0.3f);
        kn_tensor_clone(b.g->values[w].constant, &consts[0]);
    }
    int bias = t->bias ? tmb_const(&b, "b", 1, (int64_t[]){t->M}, 0.5f) : -1;
    if (t->bias) kn_tensor_clone(b.g->values[bias].constant, &consts[1]);
    int y = tmb_value(&b, "y"), r = tmb_value(&b, "r");
    int node = tmb_node(&b, "Conv", (int[]){x, w, bias}, t->bias ? 3 : 2, y);
    tmb_ints(&b, node, "kernel_shape", (int64_t[]){3, 3}, 2);
    tmb_ints(&b, node, "strides", (int64_t[]){t->s, t->s}, 2);
    tmb_ints(&b, node, "dilations", (int64_t[]){t->d, c3_dw(t)}, 2);
    tmb_ints(&b, node, "pads", (int64_t[]){t->pads[0], t->pads[1], t->pads[2], t->pads[3]}, 4);
    if (t->g > 1) tmb_int(&b, node, "group", t->g);
    if (t->relu) {
        tmb_node(&b, "Relu", (int[]){y}, 1, r);
        tmb_output(&b, r);
    } else {
        tmb_output(&b, y);
    }
    return tmb_finish(&b, size);
}

/* want: the convolution in double; scale: sum |x w| over each output's window (+ |bias|). */
static void c3_reference(const c3_case *t, const float *x, const float *w, const float *bias, int64_t OH, int64_t OW,
                         double *want, double *scale) {
    const int64_t Cg = t->C / t->g, Mg = t->M / t->g;
    for (int64_t n = 0; n < t->N; n++)
        for (int64_t m = 0; m < t->M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double acc = bias ? bias[m] : 0.0, sc = bias ? fabs(bias[m]) : 0.0;
                    const int64_t g = m / Mg;
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t kh = 0; kh < 3; kh++)
                            for (int64_t kw = 0; kw < 3; kw++) {
                                int64_t ih = oh * t->s - t->pads[0] + kh * t->d, iw = ow * t->s - t->pads[1] + kw * c3_dw(t);
                                if (ih < 0 || ih >= t->H || iw < 0 || iw >= t->W) continue;
                                double p = (double)x[((n * t->C + g * Cg + c) * t->H + ih) * t->W + iw] *
                                           w[((m * Cg + c) * 3 + kh) * 3 + kw];
                                acc += p;
                                sc += fabs(p);
                            }
                    if (t->relu && acc < 0) acc = 0;
                    const size_t i = (size_t)(((n * t->M + m) * OH + oh) * OW + ow);
                    want[i] = acc;
                    scale[i] = sc;
                }
}

/* A case's random input x (and w, when a graph input; else the model's constant consts[0]) from
 * seed, and the reference outputs want with their scales (ny of each, malloc'ed). */
static void c3_inputs(const c3_case *t, kiln_tensor *const consts[2], uint32_t seed, kiln_tensor **x, kiln_tensor **w,
                      double **want, double **scale, size_t *ny) {
    const int64_t OH = c3_out(t->H, t->s, t->d, t->pads[0], t->pads[2]);
    const int64_t OW = c3_out(t->W, t->s, c3_dw(t), t->pads[1], t->pads[3]);
    *x = tmb_random_tensor((int64_t[]){t->N, t->C, t->H, t->W}, 4, &seed, 1, 1), *w = consts[0];
    float *xp = kiln_tensor_data(*x);
    if (t->w_input) *w = tmb_random_tensor((int64_t[]){t->M, t->C / t->g, 3, 3}, 4, &seed, 0.3f, 1);
    *ny = (size_t)(t->N * t->M * OH * OW);
    *want = malloc(sizeof(double) * *ny), *scale = malloc(sizeof(double) * *ny);
    c3_reference(t, xp, kiln_tensor_data(*w), consts[1] ? kiln_tensor_data(consts[1]) : NULL, OH, OW, *want, *scale);
}

/* What c3_model and c3_inputs made (w: the graph input, or the model's constant weights). */
static void c3_release(unsigned char *m, kiln_tensor *const consts[2], kiln_tensor *x, kiln_tensor *w, double *want,
                       double *scale) {
    free(want);
    free(scale);
    kiln_tensor_destroy(x);
    kiln_tensor_destroy(w);
    kiln_tensor_destroy(consts[1]);
    free(m);
}

/* Runs session s twice on x (and w, when a graph input) and checks every output against want
 * within tmb_count_off's bound of scale; ctx names the case and settings in a failure's message. */
static void c3_check_session(kiln_session *s, const c3_case *t, kiln_tensor *x, kiln_tensor *w, const double *want,
                             const double *scale, size_t ny, const char *ctx) {
    const char *names[2] = {"x", "w"};
    kiln_tensor *ins[2] = {x, w};
    tmb_check_runs(s, names, ins, t->w_input ? 2 : 1, want, scale, ny, 1e-6, 5e-6, ctx);
}

KN_TEST(cpu_conv3x3_matches_definition) {
    const c3_case cases[] = {
        {1, 64, 56, 56, 64, 1, 1, 1, {1, 1, 1, 1}, true, false, false},   /* ResNet layer 1 */
        {2, 32, 14, 14, 32, 1, 1, 1, {1, 1, 1, 1}, false, false, true},   /* batch, Relu fused */
        {1, 19, 23, 37, 21, 1, 1, 1, {1, 1, 1, 1}, true, false, false},   /* odd sizes and channels */
        {1, 17, 30, 70, 40, 1, 1, 1, {0, 0, 0, 0}, true, false, false},   /* no pads, 17 tiles a row */
        {1, 24, 33, 29, 33, 1, 1, 1, {2, 0, 1, 2}, false, false, true},   /* asymmetric pads */
        {3, 16, 9, 9, 16, 1, 1, 1, {1, 1, 1, 1}, true, true, false},      /* W a graph input, batch 3 */
        {1, 3, 20, 21, 5, 1, 1, 1, {1, 1, 1, 1}, true, false, false},     /* 3 -> 5 channels */
        {1, 16, 8, 150, 18, 1, 1, 1, {1, 1, 1, 1}, true, false, false},   /* 38 tiles a row: 3 vectors */
        {2, 20, 3, 4, 24, 1, 1, 1, {0, 1, 0, 1}, false, false, true},     /* one tile row, partial */
        {1, 40, 10, 10, 48, 1, 1, 1, {1, 1, 1, 1}, true, false, false},
        {1, 33, 28, 28, 31, 2, 1, 1, {1, 1, 1, 1}, true, false, false},   /* stride 2: GEMM */
        {1, 16, 20, 20, 16, 1, 2, 1, {2, 2, 2, 2}, true, false, false},   /* d2: Winograd on 4 phases of 10x10 */
        {2, 24, 21, 23, 32, 1, 2, 1, {2, 1, 2, 3}, true, false, true},    /* d2, asymmetric pads */
        {1, 16, 12, 40, 64, 1, 3, 1, {3, 3, 3, 3}, true, false, false},   /* d3: 9 phases of 4x14 */
        {1, 32, 12, 12, 32, 1, 1, 2, {1, 1, 1, 1}, true, false, false},   /* groups of 16: rk_conv, span 16 */
        /* grouped, output pixels in the lanes (rk_conv): a block of output channels spanning groups */
        {1, 64, 18, 21, 64, 1, 1, 16, {1, 1, 1, 1}, true, false, true},   /* 4 a group: ResNeXt's g32 shape */
        {2, 32, 17, 33, 32, 2, 1, 8, {1, 0, 1, 1}, false, false, false},  /* stride 2, batch 2 */
        {1, 16, 20, 19, 32, 1, 1, 8, {1, 1, 1, 1}, true, true, false},    /* 2 in, 4 out a group, W input */
        {1, 48, 16, 24, 48, 1, 1, 4, {1, 1, 1, 1}, true, false, false},   /* 12 a group: GEMM */
        {1, 24, 16, 20, 48, 1, 1, 3, {0, 0, 0, 0}, true, false, false},   /* 8 in, 16 out a group */
        {2, 128, 14, 14, 96, 1, 1, 1, {1, 1, 1, 1}, true, false, true},   /* deeper channels */
        {1, 64, 14, 14, 64, 1, 1, 1, {1, 1, 1, 1}, true, false, true},    /* 16 tiles: transposed GEMM */
        {1, 256, 14, 14, 256, 1, 1, 1, {1, 1, 1, 1}, true, false, true},  /* ResNet-50's: F(2x2, 3x3) */
        {2, 160, 13, 11, 144, 1, 1, 1, {0, 2, 1, 2}, false, true, false}, /* F(2x2): odd, asymmetric pads, W input */
        {3, 256, 14, 13, 256, 1, 1, 1, {1, 1, 1, 1}, true, false, false}, /* F(2x2): chunks of 2 images and 1 */
        {32, 16, 14, 14, 16, 1, 1, 1, {1, 1, 1, 1}, true, false, true},  /* 128 tile rows gathered: L2-sized chunks */
        {1, 16, 96, 93, 24, 1, 1, 1, {1, 1, 1, 1}, true, false, false},   /* 24 tile rows of 24: L2-sized chunks */
        {1, 64, 28, 28, 64, 2, 1, 1, {1, 1, 1, 1}, true, false, true},    /* stride 2: the direct path */
        {2, 12, 33, 47, 32, 2, 1, 1, {1, 0, 0, 1}, false, false, false},  /* odd, 24 columns a row */
        {1, 24, 40, 200, 32, 2, 1, 1, {1, 1, 1, 1}, true, true, false},   /* 100-pixel rows, W input */
        {1, 16, 15, 15, 64, 2, 1, 1, {0, 0, 0, 0}, true, false, false},   /* 7-pixel rows, no pads */
        {3, 40, 14, 14, 32, 1, 1, 1, {1, 1, 1, 1}, true, false, false},   /* stride 1 (forced direct) */
        {1, 64, 7, 7, 64, 1, 1, 1, {1, 1, 1, 1}, true, false, true},      /* 7x7 stride 1: direct */
        {2, 128, 9, 9, 256, 2, 1, 1, {1, 1, 1, 1}, true, false, true},    /* 1.2 MB of weights: by channel blocks */
        {1, 48, 7, 7, 32, 1, 1, 1, {1, 1, 1, 1}, true, false, true},      /* one channel block: split into row bands */
        {1, 40, 15, 16, 64, 2, 1, 1, {1, 0, 1, 1}, true, false, false},   /* all tiles at the edges, bands of rows */
        /* stride 2 with at most 16 input channels: output pixels in the lanes (conv.c's rk_conv) */
        {1, 16, 64, 130, 32, 2, 1, 1, {1, 1, 1, 1}, true, false, false},  /* 65 pixels a row: tiles 3 + 2 */
        {3, 5, 35, 70, 8, 2, 1, 1, {0, 1, 2, 0}, false, false, true},     /* 35 a row, 5 channels, batch 3 */
        {1, 16, 40, 128, 16, 2, 1, 1, {1, 1, 1, 1}, true, true, false},   /* 4 vectors: 2 + 2, W an input */
        {2, 7, 21, 33, 24, 2, 1, 1, {2, 2, 2, 2}, true, false, true},     /* pads of 2: first taps skipped */
        {1, 16, 9, 200, 32, 2, 1, 1, {0, 0, 0, 0}, true, false, false},   /* no pads, 99 a row: 3 + 2 + 2 */
        /* stride 2, more input channels, up to 64 output channels on rows of 32+: the same kernel
         * on AVX2 (rk_wide), the GEMM elsewhere */
        {1, 48, 48, 80, 24, 2, 1, 1, {1, 1, 1, 1}, true, false, true},    /* ppocr det: 40 a row, Relu */
        {2, 36, 17, 75, 20, 2, 1, 1, {0, 1, 1, 0}, false, true, false},   /* 37 a row, W input, batch 2 */
        /* stride 1 with few output channels: Winograd (the kernel above ran 2-3x slower there) */
        {1, 96, 24, 40, 24, 1, 1, 1, {1, 1, 1, 1}, true, false, false},   /* ppocr det, stride 1 */
        {2, 20, 13, 27, 92, 1, 1, 1, {0, 2, 1, 1}, true, false, true},    /* 28 a row, asymmetric pads */
        /* Winograd on 4-15 tiles that cover the plane, 48+ input channels (AVX2, 1 thread) */
        {1, 64, 8, 16, 256, 1, 1, 1, {1, 1, 1, 1}, true, false, true},    /* ddddocr: 8 tiles, 4 a row */
        {2, 48, 8, 8, 32, 1, 1, 1, {1, 1, 1, 1}, false, false, false},    /* batch 2: 2 x 4 tiles */
        {1, 128, 4, 20, 64, 1, 1, 1, {1, 1, 1, 1}, true, true, false},    /* one tile row, W input */
        {1, 96, 14, 22, 24, 1, 1, 1, {0, 0, 0, 0}, true, false, true},    /* 12x20 outputs, no pads */
        /* stride 1 with fewer than 16 input channels: the same kernel (rk_conv) */
        {1, 1, 40, 37, 32, 1, 1, 1, {1, 1, 1, 1}, true, false, false},    /* one channel, 37 a row */
        {2, 6, 19, 50, 16, 1, 1, 1, {0, 2, 1, 0}, false, false, true},    /* asymmetric pads, batch 2 */
        {1, 12, 33, 100, 24, 1, 1, 1, {0, 0, 0, 0}, true, true, false},   /* no pads: 98 a row, W input */
        {1, 3, 17, 64, 8, 1, 1, 1, {1, 1, 1, 1}, true, false, true},      /* 4 vectors: 2 + 2 */
        /* dilation at stride 1: Winograd over the phase images (conv_winograd.c) */
        {1, 64, 28, 28, 64, 1, 2, 1, {2, 2, 2, 2}, true, false, false},   /* d2, 4 phases of 14x14 */
        {2, 20, 17, 19, 24, 1, 2, 1, {1, 0, 3, 2}, true, false, true},    /* odd pads and sizes, Relu */
        {1, 16, 25, 26, 20, 1, 2, 1, {0, 0, 0, 0}, false, false, false},  /* no pads */
        {1, 32, 30, 33, 32, 1, 4, 1, {4, 4, 4, 4}, true, true, false},    /* d4, W an input */
        {3, 17, 40, 21, 18, 1, 2, 1, {2, 1, 2, 1}, true, false, true, 1}, /* d2 rows only, batch 3 */
        {1, 24, 22, 70, 16, 1, 1, 1, {1, 3, 1, 3}, true, false, false, 3},/* d3 columns only, 64+ columns */
        {1, 16, 36, 36, 40, 1, 3, 1, {3, 2, 3, 4}, true, false, true, 2}, /* d3 x d2 */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const c3_case *t = &cases[ci];
        kiln_tensor *consts[2] = {0};
        size_t size;
        unsigned char *m = c3_model(t, consts, &size);
        if (!m) continue;
        kiln_tensor *x, *w;
        double *want, *scale;
        size_t ny;
        c3_inputs(t, consts, 1234 + (uint32_t)ci, &x, &w, &want, &scale, &ny);
        /* force 1: the fast paths wherever they apply (Winograd as F(4x4, 3x3)); 2: Winograd and
         * rk_conv off, the direct kernel on (the dilated, stride-1 and few-channel stride-2 shapes
         * taken otherwise); 3: Winograd as F(2x2, 3x3) wherever it runs (planes up to 14 columns);
         * 4: every fast path off, the implicit GEMM everywhere (its im2col packing: stride-2 rows
         * by two plain loads where the whole group is inside the plane, conv.c even_load) */
        for (int force = 0; force <= 4; force++) {
            if (force == 4) setenv("KILN_WINO", "0", 1), setenv("KILN_CL3", "0", 1), setenv("KILN_RK", "0", 1);
            else if (force) setenv("KILN_WINO", force == 2 ? "0" : "1", 1), setenv("KILN_CL3", "1", 1);
            if (force == 1 || force == 3) setenv("KILN_WINO2", force == 3 ? "1" : "0", 1);
            if (force == 2) setenv("KILN_RK", "0", 1);
            for (int threads = 1; threads <= 2; threads++)
                for (int level = 0; level <= 3; level += 3) {
                    kiln_session *s = tmb_session(m, size, threads, level);
                    if (!s) continue;
                    char ctx[160];
                    snprintf(ctx, sizeof ctx, "case %zu (%lldx%lldx%lldx%lld -> %lld, s%lld d%lld,%lld g%lld), forced %d, %d threads, level %d",
                             ci, (long long)t->N, (long long)t->C, (long long)t->H, (long long)t->W, (long long)t->M,
                             (long long)t->s, (long long)t->d, (long long)c3_dw(t), (long long)t->g, force, threads, level);
                    c3_check_session(s, t, x, w, want, scale, ny, ctx);
                    kiln_session_destroy(s);
                }
            if (force) unsetenv("KILN_WINO"), unsetenv("KILN_CL3"), unsetenv("KILN_RK"), unsetenv("KILN_WINO2");
        }
        c3_release(m, consts, x, w, want, scale);
    }
}

/* conv_winograd.c's whole chunks of tile rows on each thread (F(4x4, 3x3), few channels over many
 * tile rows at several threads: each chunk's input transform, products and output transform on one
 * thread) against the definition: chunks that split images, a partial last chunk, tile rows not a
 * multiple of the vector's group, partial tiles, asymmetric pads, weights a constant (prepacked) or
 * a graph input, a fused Relu (level 3), a dilated layer's phase images, 2 and 3 threads, by the
 * default choice, forced (KILN_WINO_CHUNKS=1), forced in chunks of 100 KB (KILN_WINO_CHUNK_KB: the
 * fewest rows) and the usual order (KILN_WINO_CHUNKS=0) on the same cases. */
KN_TEST(cpu_wino_chunks_per_thread_match_definition) {
    static const c3_case cases[] = {
        {32, 32, 14, 14, 32, 1, 1, 1, {1, 1, 1, 1}, true, false, false}, /* issue 22's b32 case: 128 tile rows */
        {9, 16, 13, 15, 24, 1, 1, 1, {1, 0, 2, 1}, true, false, true},   /* odd sizes, asymmetric pads, Relu: 36 rows */
        {5, 24, 30, 16, 40, 1, 1, 1, {1, 1, 1, 1}, true, true, false},   /* W a graph input, 8 rows an image: 40 */
        {33, 8, 6, 9, 16, 1, 1, 1, {0, 0, 0, 0}, true, false, false},    /* one tile row an image, partial tiles: 33 */
        {3, 64, 60, 12, 64, 1, 1, 1, {1, 1, 1, 1}, true, false, true},   /* chunks that split images: 45 rows */
        {1, 64, 28, 28, 64, 1, 2, 1, {2, 2, 2, 2}, true, false, true},   /* dilation 2: four 14x14 phase images,
                                                                          * 4 units of rows (taken at 2 threads) */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const c3_case *t = &cases[ci];
        kiln_tensor *consts[2] = {0};
        size_t size;
        unsigned char *m = c3_model(t, consts, &size);
        CHECK(m != NULL);
        if (!m) continue;
        kiln_tensor *x, *w;
        double *want, *scale;
        size_t ny;
        c3_inputs(t, consts, 77 + (uint32_t)ci, &x, &w, &want, &scale, &ny);
        setenv("KILN_WINO", "1", 1);
        setenv("KILN_WINO2", "0", 1);
        for (int force = 0; force < 4; force++) { /* the default choice, forced on, forced off, on in 100 KB chunks */
            if (force) setenv("KILN_WINO_CHUNKS", force == 2 ? "0" : "1", 1);
            if (force == 3) setenv("KILN_WINO_CHUNK_KB", "100", 1);
            for (int threads = 2; threads <= 3; threads++) {
                kiln_session *s = tmb_session(m, size, threads, t->relu ? 3 : 0);
                CHECK(s != NULL);
                if (!s) continue;
                char ctx[160];
                snprintf(ctx, sizeof ctx, "case %zu (%lldx%lldx%lldx%lld -> %lld), chunks forced %d, %d threads", ci,
                         (long long)t->N, (long long)t->C, (long long)t->H, (long long)t->W, (long long)t->M, force, threads);
                c3_check_session(s, t, x, w, want, scale, ny, ctx);
                kiln_session_destroy(s);
            }
        }
        unsetenv("KILN_WINO_CHUNKS"), unsetenv("KILN_WINO"), unsetenv("KILN_WINO2"), unsetenv("KILN_WINO_CHUNK_KB");
        c3_release(m, consts, x, w, want, scale);
    }
}

/* conv_winograd.c's AVX2 input transform for rows of 3 or 4 tiles (planes 9-16 columns wide, two
 * tile rows a vector: wino_in_rows2's contiguous loads and in-lane transposes, and wino_out_multi's
 * half-vector stores) against the definition, on (KILN_WINO_ROWS2 unset) and off (=0: the gathers
 * and masked stores), Winograd forced as F(4x4, 3x3): 3 and 4 tiles a row, partial last tiles, an
 * odd count of tile rows (the last vector's upper half empty), left pads of 0, 1 and 2, asymmetric
 * pads, batch, channel counts off the vector width, weights a graph input, a fused Relu, chunks of
 * tile rows (the 32-image case), 1 and 2 threads. On AVX-512 both settings run the gathers. */
KN_TEST(cpu_wino_rows2_match_definition) {
    static const c3_case cases[] = {
        {3, 16, 11, 11, 24, 1, 1, 1, {1, 1, 1, 1}, true, false, false},   /* 3 tiles a row, 9 tile rows */
        {2, 20, 14, 15, 17, 1, 1, 1, {0, 2, 1, 0}, true, false, true},    /* 4 a row, last tile 3 wide */
        {5, 8, 16, 16, 8, 1, 1, 1, {0, 0, 0, 0}, false, false, false},    /* no pads: 14x14 outputs */
        {1, 24, 9, 12, 16, 1, 1, 1, {2, 0, 1, 2}, true, true, false},     /* 3 a row, W input, pads 2 0 1 2 */
        {2, 16, 13, 10, 19, 1, 1, 1, {1, 2, 1, 2}, true, false, true},    /* left pad 2: 3 a row */
        {1, 33, 7, 14, 40, 1, 1, 1, {1, 1, 1, 1}, true, false, false},    /* 2 tile rows: one vector */
        {32, 32, 14, 14, 32, 1, 1, 1, {1, 1, 1, 1}, true, false, true},   /* issue 22's: chunks of 4 rows (AVX2) */
        {1, 16, 26, 26, 16, 1, 2, 1, {2, 2, 2, 2}, true, false, false},   /* d2: phase images of 13x13 */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const c3_case *t = &cases[ci];
        kiln_tensor *consts[2] = {0};
        size_t size;
        unsigned char *m = c3_model(t, consts, &size);
        CHECK(m != NULL);
        if (!m) continue;
        kiln_tensor *x, *w;
        double *want, *scale;
        size_t ny;
        c3_inputs(t, consts, 555 + (uint32_t)ci, &x, &w, &want, &scale, &ny);
        setenv("KILN_WINO", "1", 1);
        setenv("KILN_WINO2", "0", 1);
        for (int off = 0; off <= 1; off++) {
            if (off) setenv("KILN_WINO_ROWS2", "0", 1);
            for (int threads = 1; threads <= 2; threads++) {
                kiln_session *s = tmb_session(m, size, threads, t->relu ? 3 : 0);
                CHECK(s != NULL);
                if (!s) continue;
                char ctx[160];
                snprintf(ctx, sizeof ctx, "case %zu (%lldx%lldx%lldx%lld -> %lld, d%lld), rows2 %s, %d threads", ci,
                         (long long)t->N, (long long)t->C, (long long)t->H, (long long)t->W, (long long)t->M,
                         (long long)t->d, off ? "off" : "on", threads);
                c3_check_session(s, t, x, w, want, scale, ny, ctx);
                kiln_session_destroy(s);
            }
        }
        unsetenv("KILN_WINO_ROWS2"), unsetenv("KILN_WINO"), unsetenv("KILN_WINO2");
        c3_release(m, consts, x, w, want, scale);
    }
}

/* The CPU levels' convolution and pooling kernels against the baseline level's, in one process
 * (isa.h: kn_cpu_isa_entry gives each level's functions): Winograd (rows of more and of fewer
 * tiles than a vector, dilated), the direct 3x3 kernels (few channels, channels in the lanes,
 * stem), few taps, small-plane pointwise, depthwise (channels in the lanes, along the row at
 * strides 1 and 2, dilated, 1-D), the implicit GEMM's packing (groups, strides 2 and 3),
 * ConvTranspose, the separable pools (strides 1, 2 and 3, dilation, count_include_pad) and the
 * global pools, on shapes that are not multiples of either vector width, 2 threads. The vector
 * levels (avx2, avx512: the same source at 8 and 16 lanes, isa_vec.h) must agree with the
 * baseline's scalar code to within the rounding of a different summation order (Winograd's
 * transforms included); a lane or index bug is an error of the size of the outputs. Skipped in a
 * build without run-time dispatch (one level). */
#include "backend/cpu/isa.h"
#include "backend/cpu/isa_calls.h"
#include "unit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct lv_case {
    const char *what, *op;
    int nsp;
    int64_t N, C, M, G; /* M: output channels (Conv, ConvTranspose) */
    int64_t in[2], k[2], s[2], d[2], pb[2], pe[2];
    int64_t include_pad;
    bool bias;
} lv_case;

#define D1 {1, 1}
#define Z0 {0, 0}

static const lv_case lv_cases[] = {
    {"Winograd, rows of 5 tiles", "Conv", 2, 1, 32, 32, 1, {20, 20}, {3, 3}, D1, D1, {1, 1}, {1, 1}, 0, true},
    {"Winograd, 4 tiles a row (whole rows in a vector)", "Conv", 2, 2, 16, 24, 1, {14, 14}, {3, 3}, D1, D1, {1, 1}, {1, 1}, 0, true},
    {"Winograd, partial tiles, asymmetric pads", "Conv", 2, 1, 17, 19, 1, {37, 45}, {3, 3}, D1, D1, {0, 2}, {2, 0}, 0, false},
    {"Winograd, dilation 2 (phase images)", "Conv", 2, 1, 16, 16, 1, {23, 21}, {3, 3}, D1, {2, 2}, {2, 2}, {2, 2}, 0, true},
    {"3x3 few channels, stride 1", "Conv", 2, 1, 3, 16, 1, {40, 37}, {3, 3}, D1, D1, {1, 1}, {1, 1}, 0, true},
    {"3x3 few channels, stride 2", "Conv", 2, 1, 8, 24, 1, {41, 50}, {3, 3}, {2, 2}, D1, {1, 1}, {1, 1}, 0, false},
    {"3x3 channels in lanes, stride 2", "Conv", 2, 1, 16, 32, 1, {29, 30}, {3, 3}, {2, 2}, D1, {1, 1}, {1, 1}, 0, true},
    {"3x3 channels in lanes, dilation 2", "Conv", 2, 1, 8, 32, 1, {20, 20}, {3, 3}, D1, {2, 2}, {2, 2}, {2, 2}, 0, true},
    {"7x7 stride 2 stem, 64 channels", "Conv", 2, 1, 3, 64, 1, {45, 47}, {7, 7}, {2, 2}, D1, {3, 3}, {3, 3}, 0, true},
    {"7x7 stride 2 stem, 32 channels", "Conv", 2, 1, 3, 32, 1, {33, 40}, {7, 7}, {2, 2}, D1, {3, 3}, {3, 3}, 0, false},
    {"5x5 one channel (few taps)", "Conv", 2, 1, 1, 8, 1, {30, 29}, {5, 5}, D1, D1, {2, 2}, {2, 2}, 0, true},
    {"1-D k10 s5 (few taps)", "Conv", 1, 1, 1, 12, 1, {203}, {10}, {5}, {1}, {0}, {0}, 0, true},
    {"1x1 on 7x7 (channels in lanes)", "Conv", 2, 1, 64, 96, 1, {7, 7}, {1, 1}, D1, D1, Z0, Z0, 0, true},
    {"1x1 on 6x9", "Conv", 2, 1, 40, 50, 1, {6, 9}, {1, 1}, D1, D1, Z0, Z0, 0, false},
    {"depthwise 3x3 on 7x7, 24 channels", "Conv", 2, 1, 24, 24, 24, {7, 7}, {3, 3}, D1, D1, {1, 1}, {1, 1}, 0, true},
    {"depthwise 5x5 stride 2, 20 channels", "Conv", 2, 1, 20, 20, 20, {15, 15}, {5, 5}, {2, 2}, D1, {2, 2}, {2, 2}, 0, false},
    {"depthwise 3x3 along 140-wide rows", "Conv", 2, 1, 16, 16, 16, {20, 140}, {3, 3}, D1, D1, {1, 1}, {1, 1}, 0, true},
    {"depthwise 3x3 stride 2 along 300-wide rows", "Conv", 2, 1, 8, 8, 8, {17, 300}, {3, 3}, {2, 2}, D1, {1, 1}, {1, 1}, 0, true},
    {"depthwise 3x3 dilation 2 along 150-wide rows", "Conv", 2, 1, 8, 8, 8, {30, 150}, {3, 3}, D1, {2, 2}, {2, 2}, {2, 2}, 0, false},
    {"depthwise 1-D k31", "Conv", 1, 1, 16, 16, 16, {500}, {31}, {1}, {1}, {15}, {15}, 0, true},
    {"grouped 3x3, 4 a group (rk_conv's blocks across groups)", "Conv", 2, 1, 16, 16, 4, {19, 23}, {3, 3}, D1, D1, {1, 1}, {1, 1}, 0, true},
    {"grouped 3x3 stride 2, 4 a group (rk_conv)", "Conv", 2, 1, 8, 8, 2, {30, 31}, {3, 3}, {2, 2}, D1, {1, 1}, {1, 1}, 0, false},
    {"grouped 3x3, 6 a group (implicit GEMM)", "Conv", 2, 1, 12, 12, 2, {19, 23}, {3, 3}, D1, D1, {1, 1}, {1, 1}, 0, true},
    {"grouped 3x3 stride 2, 6 a group (runs across rows)", "Conv", 2, 1, 12, 12, 2, {30, 31}, {3, 3}, {2, 2}, D1, {1, 1}, {1, 1}, 0, false},
    {"3x3 stride 3 (gathers)", "Conv", 2, 1, 4, 8, 2, {25, 25}, {3, 3}, {3, 3}, D1, {1, 1}, {1, 1}, 0, true},
    {"1-D k3 (implicit GEMM)", "Conv", 1, 1, 6, 16, 1, {300}, {3}, {1}, {1}, {1}, {1}, 0, true},
    {"3x3 on 4x4, many channels", "Conv", 2, 1, 40, 40, 1, {4, 4}, {3, 3}, D1, D1, {1, 1}, {1, 1}, 0, true},
    {"ConvTranspose 4x4 stride 2", "ConvTranspose", 2, 1, 8, 6, 1, {9, 11}, {4, 4}, {2, 2}, D1, {1, 1}, {1, 1}, 0, true},
    {"ConvTranspose 2x2 stride 2", "ConvTranspose", 2, 1, 16, 8, 1, {10, 21}, {2, 2}, {2, 2}, D1, Z0, Z0, 0, false},
    {"ConvTranspose 3x3 stride 2", "ConvTranspose", 2, 1, 5, 7, 1, {13, 40}, {3, 3}, {2, 2}, D1, {1, 1}, {1, 1}, 0, true},
    {"MaxPool 5x5 stride 1 (SPP)", "MaxPool", 2, 2, 10, 0, 0, {13, 13}, {5, 5}, D1, D1, {2, 2}, {2, 2}, 0, false},
    {"MaxPool 13x13 stride 1", "MaxPool", 2, 1, 4, 0, 0, {20, 20}, {13, 13}, D1, D1, {6, 6}, {6, 6}, 0, false},
    {"MaxPool 3x3 stride 2", "MaxPool", 2, 1, 6, 0, 0, {29, 31}, {3, 3}, {2, 2}, D1, {1, 1}, {1, 1}, 0, false},
    {"MaxPool 3x3 stride 3 (gathers)", "MaxPool", 2, 1, 3, 0, 0, {25, 26}, {3, 3}, {3, 3}, D1, Z0, Z0, 0, false},
    {"MaxPool 3x3 dilation 2", "MaxPool", 2, 1, 5, 0, 0, {28, 27}, {3, 3}, D1, {2, 2}, {2, 2}, {2, 2}, 0, false},
    {"MaxPool 1-D k3 stride 2", "MaxPool", 1, 1, 5, 0, 0, {100}, {3}, {2}, {1}, {1}, {1}, 0, false},
    {"AveragePool 3x3 stride 1", "AveragePool", 2, 1, 5, 0, 0, {19, 21}, {3, 3}, D1, D1, {1, 1}, {1, 1}, 0, false},
    {"AveragePool 3x3 stride 1, pads counted", "AveragePool", 2, 1, 5, 0, 0, {19, 21}, {3, 3}, D1, D1, {1, 1}, {1, 1}, 1, false},
    {"AveragePool 2x2 stride 2", "AveragePool", 2, 1, 6, 0, 0, {28, 30}, {2, 2}, {2, 2}, D1, Z0, Z0, 0, false},
    {"AveragePool 13x13 stride 1", "AveragePool", 2, 1, 3, 0, 0, {13, 13}, {13, 13}, D1, D1, {6, 6}, {6, 6}, 0, false},
    {"GlobalAveragePool 9x11", "GlobalAveragePool", 2, 1, 7, 0, 0, {9, 11}, D1, D1, D1, Z0, Z0, 0, false},
    {"GlobalAveragePool 1x1000", "GlobalAveragePool", 2, 2, 3, 0, 0, {1, 1000}, D1, D1, D1, Z0, Z0, 0, false},
    {"GlobalMaxPool 13x14", "GlobalMaxPool", 2, 1, 7, 0, 0, {13, 14}, D1, D1, D1, Z0, Z0, 0, false},
};

static uint32_t lv_rng = 2026;
static float lv_rand(void) {
    lv_rng = lv_rng * 1664525u + 1013904223u;
    return (float)((lv_rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static kn_attr lv_ints(const char *name, int64_t *v, int n) {
    kn_attr a;
    memset(&a, 0, sizeof a);
    a.name = name, a.type = KN_ATTR_INTS, a.n = n, a.ints = v;
    return a;
}

static kn_attr lv_int(const char *name, int64_t v) {
    kn_attr a;
    memset(&a, 0, sizeof a);
    a.name = name, a.type = KN_ATTR_INT, a.i = v;
    return a;
}

typedef kiln_status (*lv_fn)(kn_kernel_ctx *);

static lv_fn lv_kernel(const kn_cpu_level_entry *e, const char *op) {
    if (!strcmp(op, "Conv")) return e->f_kn_cpu_conv;
    if (!strcmp(op, "ConvTranspose")) return e->f_kn_cpu_conv_transpose;
    if (!strcmp(op, "MaxPool")) return e->f_kn_cpu_max_pool;
    if (!strcmp(op, "AveragePool")) return e->f_kn_cpu_average_pool;
    if (!strcmp(op, "GlobalAveragePool")) return e->f_kn_cpu_global_average_pool;
    return e->f_kn_cpu_global_max_pool;
}

/* Runs case t at the baseline and at each vector level; each level's largest error against the
 * baseline must be within the tolerance, relative to 1 + the baseline's largest output. */
static void lv_run(kn_threadpool *pool, const lv_case *t, const kn_cpu_level_entry *base,
                   const kn_cpu_level_entry *const *vec, int nvec) {
    const bool conv = !strcmp(t->op, "Conv"), convt = !strcmp(t->op, "ConvTranspose");
    const bool global = !strncmp(t->op, "Global", 6);
    const int nsp = t->nsp, rank = nsp + 2;
    int64_t xd[4] = {t->N, t->C}, wd[4] = {0}, yd[4] = {t->N, conv || convt ? t->M : t->C};
    if (conv) wd[0] = t->M, wd[1] = t->C / t->G;
    if (convt) wd[0] = t->C, wd[1] = t->M / t->G;
    for (int i = 0; i < nsp; i++) {
        xd[2 + i] = t->in[i];
        wd[2 + i] = t->k[i];
        const int64_t ext = t->d[i] * (t->k[i] - 1) + 1;
        yd[2 + i] = global ? 1
                    : convt ? (t->in[i] - 1) * t->s[i] + ext - t->pb[i] - t->pe[i]
                            : (t->in[i] + t->pb[i] + t->pe[i] - ext) / t->s[i] + 1;
    }
    kn_tensor *X = NULL, *W = NULL, *B = NULL, *Y = NULL;
    CHECK_STATUS(kn_tensor_new(KILN_DTYPE_FLOAT, rank, xd, &X), KILN_OK);
    CHECK_STATUS(kn_tensor_new(KILN_DTYPE_FLOAT, rank, yd, &Y), KILN_OK);
    for (int64_t i = 0; i < kn_tensor_count(X); i++) ((float *)X->data)[i] = lv_rand();
    if (conv || convt) {
        CHECK_STATUS(kn_tensor_new(KILN_DTYPE_FLOAT, rank, wd, &W), KILN_OK);
        for (int64_t i = 0; i < kn_tensor_count(W); i++) ((float *)W->data)[i] = 0.3f * lv_rand();
        if (t->bias) {
            const int64_t bd[1] = {t->M};
            CHECK_STATUS(kn_tensor_new(KILN_DTYPE_FLOAT, 1, bd, &B), KILN_OK);
            for (int64_t i = 0; i < t->M; i++) ((float *)B->data)[i] = lv_rand();
        }
    }
    int64_t pads[4], strides[2], dil[2], ks[2];
    for (int i = 0; i < nsp; i++) {
        pads[i] = t->pb[i], pads[nsp + i] = t->pe[i];
        strides[i] = t->s[i], dil[i] = t->d[i], ks[i] = t->k[i];
    }
    kn_attr attrs[6];
    int na = 0;
    if (!global) {
        attrs[na++] = lv_ints("kernel_shape", ks, nsp);
        attrs[na++] = lv_ints("strides", strides, nsp);
        attrs[na++] = lv_ints("pads", pads, 2 * nsp);
        if (strcmp(t->op, "AveragePool")) attrs[na++] = lv_ints("dilations", dil, nsp);
        if (conv || convt) attrs[na++] = lv_int("group", t->G);
        if (!strcmp(t->op, "AveragePool")) attrs[na++] = lv_int("count_include_pad", t->include_pad);
    }
    kn_node node;
    memset(&node, 0, sizeof node);
    node.name = "n";
    node.op_type = t->op;
    node.domain = "";
    node.opset = conv || convt ? 11 : 12;
    node.attrs = attrs;
    node.n_attrs = na;
    kn_tensor *ins[3] = {X, W, B};
    kn_tensor *outs[1] = {Y};
    kn_kernel_ctx ctx = {.node = &node, .n_inputs = B ? 3 : W ? 2 : 1, .in = ins, .n_outputs = 1, .out = outs,
                         .pool = pool};
    const int64_t ny = kn_tensor_count(Y);
    float *R = malloc(sizeof(float) * (size_t)(ny ? ny : 1));
    memset(Y->data, 0, sizeof(float) * (size_t)ny); /* ConvTranspose accumulates into a zeroed output */
    CHECK_STATUS(lv_kernel(base, t->op)(&ctx), KILN_OK);
    memcpy(R, Y->data, sizeof(float) * (size_t)ny);
    double big = 0;
    for (int64_t i = 0; i < ny; i++) big = fmax(big, fabs(R[i]));
    for (int l = 0; l < nvec; l++) {
        /* Conv writes every output (the executor does not zero it): poisoned, so a lane that
         * stores nothing shows; the others get the zeroed output the executor gives them */
        for (int64_t i = 0; i < ny; i++) ((float *)Y->data)[i] = conv ? NAN : 0.0f;
        CHECK_STATUS(lv_kernel(vec[l], t->op)(&ctx), KILN_OK);
        double err = 0;
        int64_t at = 0;
        for (int64_t i = 0; i < ny; i++) {
            const double e = fabs((double)((float *)Y->data)[i] - R[i]);
            if (!(e <= err)) err = isnan(e) ? INFINITY : e, at = i;
        }
        /* max and the pools' sums of a few values agree to the bit or nearly; convolutions to the
         * rounding of their sums (Winograd about 10x a direct sum's) */
        const double tol = (conv || convt ? 1e-4 : 1e-6) * (1.0 + big);
        CHECK_MSG(err <= tol, "%s (%s) at level %s: error %g at output %lld (%g, baseline %g), allowed %g", t->what,
                  t->op, kn_cpu_isa_name((kn_cpu_isa)vec[l]->level), err, (long long)at,
                  (double)((float *)Y->data)[at], (double)R[at], tol);
    }
    free(R);
    kn_tensor_free(X);
    kn_tensor_free(W);
    kn_tensor_free(B);
    kn_tensor_free(Y);
}

KN_TEST(cpu_isa_levels_conv_and_pool_match_baseline) {
    const kn_cpu_level_entry *base = kn_cpu_isa_entry(KN_ISA_BASELINE), *vec[KN_ISA_COUNT];
    int nvec = 0;
    for (int l = KN_ISA_BASELINE + 1; l < KN_ISA_COUNT; l++)
        if ((vec[nvec] = kn_cpu_isa_entry((kn_cpu_isa)l)) != NULL) nvec++;
    if (!base || !nvec) KN_SKIP("no run-time dispatch in this build, or no vector level this CPU runs");
    kn_threadpool *pool = NULL;
    CHECK_STATUS(kn_threadpool_create(2, &pool), KILN_OK);
    for (size_t i = 0; i < sizeof lv_cases / sizeof lv_cases[0]; i++) lv_run(pool, &lv_cases[i], base, vec, nvec);
    kn_threadpool_destroy(pool);
}

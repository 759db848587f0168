/* Unit tests of the linalg family: the float GEMM against a naive double-precision loop, Conv
 * and ConvTranspose against naive direct loops written here, and shape inference messages. */
#include "backend/cpu/linalg_impl.h"
#include "backend/cpu/sgemm.h"
#include "ops/op.h"
#include "test_pack_b.h"
#include "unit.h"

#include <stdint.h>
#include <stdlib.h>

/* deterministic pseudo-random values in [-1, 1) */
static uint32_t rng_state = 12345;
static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static void fill(float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = frand();
}

/* ------------------------------------------------------------------ GEMM */

static void ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)(ta ? A[k * lda + i] : A[i * lda + k]) * (double)(tb ? B[j * ldb + k] : B[k * ldb + j]);
            C[i * ldc + j] = (float)(alpha * s + (beta == 0.0f ? 0.0 : (double)beta * C[i * ldc + j]));
        }
}

/* Runs one case with padded leading dimensions; returns the max relative error. */
static double gemm_case(kn_threadpool *pool, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                        float beta) {
    int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 7;
    int64_t arows = ta ? K : M, brows = tb ? N : K;
    float *A = malloc(sizeof(float) * (size_t)(arows * lda + 1));
    float *B = malloc(sizeof(float) * (size_t)(brows * ldb + 1));
    float *C = malloc(sizeof(float) * (size_t)(M * ldc + 1));
    float *R = malloc(sizeof(float) * (size_t)(M * ldc + 1));
    fill(A, arows * lda);
    fill(B, brows * ldb);
    fill(C, M * ldc);
    if (beta == 0.0f) /* beta == 0 must not read C: poison it */
        for (int64_t i = 0; i < M * ldc; i++) C[i] = NAN;
    memcpy(R, C, sizeof(float) * (size_t)(M * ldc));
    kiln_status s = kn_sgemm(pool, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    ref_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
    double err = s == KILN_OK ? 0 : 1e9;
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            double d = fabs((double)C[i * ldc + j] - R[i * ldc + j]) / (1.0 + fabs(R[i * ldc + j]));
            if (!(d <= err)) err = isnan(d) ? 1e9 : d;
        }
        /* the padding between rows is untouched */
        for (int64_t j = N; j < ldc && i + 1 < M; j++)
            if (!(C[i * ldc + j] == R[i * ldc + j] || (isnan(C[i * ldc + j]) && isnan(R[i * ldc + j])))) err = 1e9;
    }
    free(A), free(B), free(C), free(R);
    return err;
}

/* float32 accumulation error grows with K; a wrong element is off by O(1) */
static double gemm_tol(int64_t K) { return 1e-5 + 2e-7 * (double)K; }

static void gemm_shapes(kn_threadpool *pool) {
    static const int64_t sizes[] = {1, 2, 3, 7, 12, 13, 16, 17, 31, 32, 33, 47, 50, 64, 100};
    const int ns = (int)(sizeof sizes / sizeof sizes[0]);
    int checked = 0;
    for (int t = 0; t < 4; t++)
        for (int a = 0; a < ns; a += 2)
            for (int b = 1; b < ns; b += 3)
                for (int c = 0; c < ns; c += 4) {
                    int64_t M = sizes[a], N = sizes[b], K = sizes[c];
                    float alpha = (t & 1) ? 0.5f : 1.0f, beta = (t == 1) ? 0.0f : (t == 2 ? 1.0f : -0.75f);
                    if (t == 0) beta = 0.0f;
                    double err = gemm_case(pool, t & 1, (t >> 1) & 1, M, N, K, alpha, beta);
                    CHECK_MSG(err < gemm_tol(K), "GEMM %lldx%lldx%lld transA=%d transB=%d alpha=%g beta=%g: error %g",
                              (long long)M, (long long)N, (long long)K, t & 1, (t >> 1) & 1, alpha, beta, err);
                    checked++;
                }
    /* shapes that cross the cache blocks (KC=256, MC, NC=1024) and the special paths */
    static const int64_t big[][3] = {{300, 70, 600}, {1, 1500, 300}, {1, 77, 1030}, {1030, 1, 300},
                                     {5, 1100, 40},  {40, 33, 1},   {97, 1031, 9},  {257, 129, 513},
                                     /* strips a column or two past a vector (7x7 planes: 49 = 32 + 17) */
                                     {40, 49, 300},  {30, 50, 600}, {13, 1074, 70}};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        for (int t = 0; t < 4; t++) {
            double err = gemm_case(pool, t & 1, (t >> 1) & 1, big[i][0], big[i][1], big[i][2], 1.25f, t == 3 ? 0.5f : 0.0f);
            CHECK_MSG(err < gemm_tol(big[i][2]), "GEMM %lldx%lldx%lld transA=%d transB=%d: error %g", (long long)big[i][0],
                      (long long)big[i][1], (long long)big[i][2], t & 1, (t >> 1) & 1, err);
        }
    CHECK(checked > 100);
}

KN_TEST(linalg_sgemm_single_thread) { gemm_shapes(NULL); }

KN_TEST(linalg_sgemm_threads) {
    kn_threadpool *pool;
    CHECK_STATUS(kn_threadpool_create(3, &pool), KILN_OK);
    gemm_shapes(pool);
    kn_threadpool_destroy(pool);
}

KN_TEST(linalg_sgemm_k_zero) {
    float C[6] = {1, 2, 3, 4, 5, 6}, A[1] = {0}, B[1] = {0};
    CHECK_STATUS(kn_sgemm(NULL, false, false, 2, 3, 0, 1.0f, A, 1, B, 3, 2.0f, C, 3), KILN_OK);
    CHECK_NEAR(C[5], 12.0, 0);
    CHECK_STATUS(kn_sgemm(NULL, false, false, 2, 3, 0, 1.0f, A, 1, B, 3, 0.0f, C, 3), KILN_OK);
    CHECK_NEAR(C[0], 0.0, 0);
}

/* ------------------------------------------------------------------ Conv through the kernel */

typedef struct conv_case {
    int nsp;
    int64_t N, C, M, G;
    int64_t in[3], k[3], s[3], d[3], pb[3], pe[3];
    bool bias;
} conv_case;

static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe) {
    return (in + pb + pe - ((k - 1) * d + 1)) / s + 1;
}

/* independent reference: the textbook seven nested loops (with an odometer for the spatial dims);
 * scale[i]: sum of |x w| over output i's window (+ |b|), the size of the rounding a fast algorithm may
 * add */
static void ref_conv(const conv_case *cc, const float *x, const float *w, const float *b, float *y, double *scale,
                     const int64_t *out) {
    int nsp = cc->nsp;
    int64_t Cg = cc->C / cc->G, Mg = cc->M / cc->G, in_plane = 1, out_plane = 1, kk = 1;
    for (int i = 0; i < nsp; i++) in_plane *= cc->in[i], out_plane *= out[i], kk *= cc->k[i];
    for (int64_t n = 0; n < cc->N; n++)
        for (int64_t m = 0; m < cc->M; m++)
            for (int64_t o = 0; o < out_plane; o++) {
                int64_t oc[3] = {0}, t = o;
                for (int i = nsp - 1; i >= 0; i--) oc[i] = t % out[i], t /= out[i];
                double acc = b ? b[m] : 0, sc = b ? fabs(b[m]) : 0;
                int64_t g = m / Mg;
                for (int64_t ci = 0; ci < Cg; ci++)
                    for (int64_t r = 0; r < kk; r++) {
                        int64_t kc[3] = {0}, u = r, idx = 0;
                        for (int i = nsp - 1; i >= 0; i--) kc[i] = u % cc->k[i], u /= cc->k[i];
                        bool ok = true;
                        for (int i = 0; i < nsp; i++) {
                            int64_t p = oc[i] * cc->s[i] - cc->pb[i] + kc[i] * cc->d[i];
                            ok &= p >= 0 && p < cc->in[i];
                            idx = idx * cc->in[i] + p;
                        }
                        if (ok) {
                            const double p = (double)x[(n * cc->C + g * Cg + ci) * in_plane + idx] * w[(m * Cg + ci) * kk + r];
                            acc += p;
                            sc += fabs(p);
                        }
                    }
                y[(n * cc->M + m) * out_plane + o] = (float)acc;
                scale[(n * cc->M + m) * out_plane + o] = sc;
            }
}

static kn_attr ints_attr(const char *name, int64_t *v, int n) {
    kn_attr a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.type = KN_ATTR_INTS;
    a.n = n;
    a.ints = v;
    return a;
}

static kn_attr int_attr(const char *name, int64_t v) {
    kn_attr a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.type = KN_ATTR_INT;
    a.i = v;
    return a;
}

static void run_conv_case(kn_threadpool *pool, const conv_case *cc) {
    int nsp = cc->nsp;
    int64_t xd[5] = {cc->N, cc->C}, wd[5] = {cc->M, cc->C / cc->G}, yd[5] = {cc->N, cc->M}, out[3], bd[1] = {cc->M};
    for (int i = 0; i < nsp; i++) {
        xd[2 + i] = cc->in[i];
        wd[2 + i] = cc->k[i];
        out[i] = out_size(cc->in[i], cc->k[i], cc->s[i], cc->d[i], cc->pb[i], cc->pe[i]);
        yd[2 + i] = out[i];
    }
    kn_tensor *X, *W, *B = NULL, *Y;
    CHECK_STATUS(kn_tensor_new(KILN_DTYPE_FLOAT, nsp + 2, xd, &X), KILN_OK);
    CHECK_STATUS(kn_tensor_new(KILN_DTYPE_FLOAT, nsp + 2, wd, &W), KILN_OK);
    CHECK_STATUS(kn_tensor_new(KILN_DTYPE_FLOAT, nsp + 2, yd, &Y), KILN_OK);
    fill(X->data, kn_tensor_count(X));
    fill(W->data, kn_tensor_count(W));
    if (cc->bias) {
        CHECK_STATUS(kn_tensor_new(KILN_DTYPE_FLOAT, 1, bd, &B), KILN_OK);
        fill(B->data, cc->M);
    }
    int64_t pads[6], strides[3], dil[3], ks[3];
    for (int i = 0; i < nsp; i++) {
        pads[i] = cc->pb[i];
        pads[nsp + i] = cc->pe[i];
        strides[i] = cc->s[i];
        dil[i] = cc->d[i];
        ks[i] = cc->k[i];
    }
    kn_attr attrs[5] = {ints_attr("pads", pads, 2 * nsp), ints_attr("strides", strides, nsp),
                        ints_attr("dilations", dil, nsp), int_attr("group", cc->G), ints_attr("kernel_shape", ks, nsp)};
    kn_node node;
    memset(&node, 0, sizeof node);
    node.name = "conv";
    node.op_type = "Conv";
    node.domain = "";
    node.opset = 11;
    node.attrs = attrs;
    node.n_attrs = 5;
    kn_tensor *ins[3] = {X, W, B};
    kn_tensor *outs[1] = {Y};
    kn_kernel_ctx ctx = {.node = &node, .n_inputs = cc->bias ? 3 : 2, .in = ins, .n_outputs = 1, .out = outs, .pool = pool};
    int64_t ny = kn_tensor_count(Y);
    /* Conv is marked as writing every output element (the executor does not zero it): poison */
    for (int64_t i = 0; i < ny; i++) ((float *)Y->data)[i] = NAN;
    CHECK_STATUS(kn_cpu_conv(&ctx), KILN_OK);
    float *R = malloc(sizeof(float) * (size_t)ny);
    double *S = malloc(sizeof(double) * (size_t)ny);
    ref_conv(cc, X->data, W->data, B ? B->data : NULL, R, S, out);
    /* within 1e-5 of 1 + |y|, or (Winograd F(4x4, 3x3), which rounds about 10x more than a direct
     * sum) within 5e-6 of the window's sum |x w| */
    double err = 0;
    for (int64_t i = 0; i < ny; i++) {
        const double a = fabs((double)((float *)Y->data)[i] - R[i]);
        double d = a / (1.0 + fabs(R[i]));
        if (d >= 1e-5 && a <= 1e-6 + 5e-6 * S[i]) d = 0;
        if (!(d <= err)) err = isnan(d) ? 1e9 : d;
    }
    CHECK_MSG(err < 1e-5, "Conv %d-D N=%lld C=%lld M=%lld group=%lld in=%lld,%lld k=%lld,%lld s=%lld,%lld d=%lld,%lld "
              "pads=%lld,%lld/%lld,%lld: error %g",
              nsp, (long long)cc->N, (long long)cc->C, (long long)cc->M, (long long)cc->G, (long long)cc->in[0],
              (long long)cc->in[1], (long long)cc->k[0], (long long)cc->k[1], (long long)cc->s[0], (long long)cc->s[1],
              (long long)cc->d[0], (long long)cc->d[1], (long long)cc->pb[0], (long long)cc->pb[1],
              (long long)cc->pe[0], (long long)cc->pe[1], err);
    free(R);
    free(S);
    kn_tensor_free(X);
    kn_tensor_free(W);
    kn_tensor_free(B);
    kn_tensor_free(Y);
}

static void conv_cases(kn_threadpool *pool) {
    static const conv_case cases[] = {
        /* 1-D: plain, strided + asymmetric pads, dilated, grouped, depthwise */
        {1, 2, 3, 4, 1, {17}, {3}, {1}, {1}, {1}, {1}, true},
        {1, 1, 4, 6, 1, {40}, {5}, {2}, {1}, {0}, {3}, false},
        {1, 1, 4, 4, 2, {33}, {3}, {1}, {3}, {2}, {1}, true},
        {1, 2, 6, 12, 6, {50}, {4}, {3}, {2}, {3}, {0}, true},
        /* 2-D */
        {2, 1, 3, 8, 1, {9, 11}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, true},
        {2, 2, 5, 7, 1, {14, 13}, {3, 2}, {2, 1}, {1, 1}, {0, 1}, {2, 0}, false},
        {2, 1, 4, 6, 2, {12, 12}, {3, 3}, {1, 2}, {2, 1}, {2, 0}, {1, 3}, true},
        {2, 1, 8, 8, 8, {15, 10}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, true},   /* depthwise */
        {2, 2, 6, 12, 6, {11, 9}, {5, 3}, {2, 2}, {1, 2}, {2, 1}, {1, 2}, false}, /* depthwise x2 */
        {2, 1, 4, 4, 4, {5, 70}, {3, 3}, {1, 3}, {1, 1}, {1, 1}, {1, 1}, true},    /* depthwise stride 3 */
        {2, 1, 4, 8, 4, {6, 75}, {3, 5}, {2, 2}, {1, 2}, {1, 3}, {0, 2}, true},    /* wide depthwise stride 2 */
        {1, 2, 5, 5, 5, {100}, {7}, {1}, {3}, {9}, {9}, false},                     /* 1-D depthwise dilated */
        {1, 1, 6, 6, 6, {500}, {31}, {1}, {1}, {15}, {15}, true},                   /* 1-D depthwise, 31 taps */
        {1, 2, 3, 3, 3, {150}, {8}, {1}, {1}, {3}, {4}, false},                     /* ... an even count */
        {1, 2, 4, 4, 4, {77}, {31}, {1}, {1}, {20}, {5}, true},                     /* 31 taps, asymmetric pads */
        {1, 1, 3, 3, 3, {300}, {15}, {1}, {2}, {0}, {0}, false},                    /* dilated, no pads: 272 */
        {1, 1, 2, 2, 2, {7000}, {9}, {1}, {1}, {4}, {4}, true},                     /* longer than the padded copy */
        /* depthwise on small planes: 16 channels per vector, full and partial channel groups */
        {2, 2, 20, 20, 20, {7, 7}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, true},
        {2, 1, 33, 33, 33, {14, 14}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, true},
        {2, 1, 17, 17, 17, {9, 12}, {3, 5}, {1, 2}, {2, 1}, {2, 0}, {1, 3}, false},
        {1, 1, 18, 18, 18, {30}, {5}, {2}, {1}, {2}, {2}, true},
        /* ... stride 1 along the rows with 3, 5 or 7 columns of taps (each row of taps sliding
         * over its pixels loaded once): ConvNeXt's 7x7, asymmetric pads and row tails of 1-7 */
        {2, 1, 19, 19, 19, {28, 28}, {7, 7}, {1, 1}, {1, 1}, {3, 3}, {3, 3}, true},
        {2, 2, 16, 16, 16, {13, 11}, {7, 7}, {1, 1}, {1, 1}, {3, 2}, {3, 4}, false},
        {2, 1, 16, 16, 16, {9, 21}, {3, 7}, {2, 1}, {1, 1}, {1, 3}, {1, 3}, true},
        {2, 1, 21, 21, 21, {10, 15}, {5, 5}, {1, 1}, {2, 1}, {4, 2}, {4, 2}, true},
        /* ... and on planes large enough to go in bands of output rows */
        {2, 1, 18, 18, 18, {70, 120}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, true},
        {2, 1, 17, 17, 17, {61, 100}, {5, 3}, {2, 2}, {1, 1}, {2, 0}, {1, 2}, false},
        {2, 1, 16, 40, 1, {7, 9}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, true},  /* pointwise */
        {2, 2, 24, 40, 1, {7, 7}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, true},  /* pointwise, 49 = 32 + 16 + 1 columns */
        /* pointwise on small planes: vectors along the output channels (tiles of 48 x 7) */
        {2, 2, 20, 100, 1, {7, 7}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, true},
        {2, 1, 33, 48, 1, {4, 5}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, false},
        {2, 1, 17, 61, 1, {6, 6}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, true},
        {2, 2, 8, 12, 4, {6, 5}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, false},  /* grouped pointwise */
        {2, 1, 6, 5, 1, {8, 8}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, true},    /* strided 1x1 */
        {2, 1, 32, 70, 1, {20, 37}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, true}, /* several GEMM blocks */
        {2, 1, 3, 2, 1, {4, 3}, {4, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, false},  /* kernel = input */
        /* strided on small planes: a group of 16 outputs spans two output rows (two runs of
         * loads), three (gathers); the GEMM transposed (many channels, 49 or 196 columns) */
        {2, 1, 8, 64, 1, {28, 28}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, true},
        {2, 2, 6, 33, 1, {30, 26}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {0, 1}, true},
        {2, 1, 5, 70, 1, {14, 14}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, false},
        {2, 1, 16, 96, 1, {7, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, true},
        /* 3-D */
        {3, 1, 2, 3, 1, {5, 6, 4}, {3, 2, 2}, {1, 2, 1}, {1, 1, 2}, {1, 0, 1}, {1, 1, 0}, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_conv_case(pool, &cases[i]);
}

KN_TEST(linalg_conv_vs_direct) { conv_cases(NULL); }

KN_TEST(linalg_conv_vs_direct_threads) {
    kn_threadpool *pool;
    CHECK_STATUS(kn_threadpool_create(2, &pool), KILN_OK);
    conv_cases(pool);
    kn_threadpool_destroy(pool);
}

/* ------------------------------------------------------------------ shape inference messages */

static kiln_status infer(const char *op, int opset, kn_attr *attrs, int n_attrs, kn_type *in, int n_in, kn_type *out) {
    const kn_op_schema *s = kn_op_find("", op, opset, NULL);
    if (!s) return KILN_ERR_UNSUPPORTED;
    kn_node node;
    memset(&node, 0, sizeof node);
    node.name = "n0";
    node.op_type = op;
    node.domain = "";
    node.opset = opset;
    node.attrs = attrs;
    node.n_attrs = n_attrs;
    const kn_type *inp[4];
    const kn_tensor *vals[4] = {0};
    for (int i = 0; i < n_in; i++) inp[i] = &in[i];
    kn_type_init(out);
    kn_infer_ctx c = {.node = &node, .n_inputs = n_in, .in = inp, .in_value = vals, .n_outputs = 1, .out = out};
    return s->infer(&c);
}

static kn_type ttype(int rank, const int64_t *dims) {
    kn_type t;
    kn_type_set_tensor(&t, KILN_DTYPE_FLOAT, rank, dims);
    return t;
}

KN_TEST(linalg_infer_gemm) {
    /* the field shape: A [N,128], B [1152,128], transB=1, C [1152] */
    int64_t a[2] = {7, 128}, b[2] = {1152, 128}, cdim[1] = {1152};
    kn_type in[3] = {ttype(2, a), ttype(2, b), ttype(1, cdim)};
    in[0].dims[0].value = -1;
    in[0].dims[0].symbol = "N";
    kn_attr attrs[1] = {int_attr("transB", 1)};
    kn_type out;
    CHECK_STATUS(infer("Gemm", 13, attrs, 1, in, 3, &out), KILN_OK);
    CHECK_EQ_INT(out.rank, 2);
    CHECK(out.dims[0].symbol && !strcmp(out.dims[0].symbol, "N"));
    CHECK_EQ_INT(out.dims[1].value, 1152);
    /* without transB the inner dims differ: the message names both shapes and both flags */
    CHECK_STATUS(infer("Gemm", 13, NULL, 0, in, 3, &out), KILN_ERR_SHAPE);
    CHECK_ERROR_HAS("[1152,128]");
    CHECK_ERROR_HAS("transA=0");
    CHECK_ERROR_HAS("transB=0");
    CHECK_ERROR_HAS("K=128");
    CHECK_ERROR_HAS("K=1152");
}

KN_TEST(linalg_infer_conv_messages) {
    int64_t x[3] = {1, 64, 100}, w[4] = {32, 64, 3, 3};
    kn_type in[2] = {ttype(3, x), ttype(4, w)};
    kn_type out;
    CHECK_STATUS(infer("Conv", 11, NULL, 0, in, 2, &out), KILN_ERR_SHAPE);
    CHECK_ERROR_HAS("[1,64,100] (1 spatial dim)");
    CHECK_ERROR_HAS("[32,64,3,3] (2 spatial dims)");
    int64_t x2[3] = {1, 64, 100}, w2[3] = {32, 16, 3};
    kn_type in2[2] = {ttype(3, x2), ttype(3, w2)};
    kn_attr g[1] = {int_attr("group", 2)};
    CHECK_STATUS(infer("Conv", 11, g, 1, in2, 2, &out), KILN_ERR_SHAPE);
    CHECK_ERROR_HAS("group=2");
    /* a valid 1-D conv with SAME_UPPER keeps the length */
    int64_t w3[3] = {32, 64, 3};
    kn_type in3[2] = {ttype(3, x), ttype(3, w3)};
    kn_attr ap;
    memset(&ap, 0, sizeof ap);
    ap.name = "auto_pad";
    ap.type = KN_ATTR_STRING;
    ap.s = "SAME_UPPER";
    ap.s_len = 10;
    CHECK_STATUS(infer("Conv", 11, &ap, 1, in3, 2, &out), KILN_OK);
    CHECK_EQ_INT(out.rank, 3);
    CHECK_EQ_INT(out.dims[1].value, 32);
    CHECK_EQ_INT(out.dims[2].value, 100);
}

KN_TEST(linalg_infer_matmul) {
    int64_t a[4] = {2, 1, 5, 7}, b[3] = {3, 7, 4};
    kn_type in[2] = {ttype(4, a), ttype(3, b)};
    kn_type out;
    CHECK_STATUS(infer("MatMul", 13, NULL, 0, in, 2, &out), KILN_OK);
    CHECK_EQ_INT(out.rank, 4);
    CHECK_EQ_INT(out.dims[0].value, 2);
    CHECK_EQ_INT(out.dims[1].value, 3);
    CHECK_EQ_INT(out.dims[2].value, 5);
    CHECK_EQ_INT(out.dims[3].value, 4);
    int64_t b2[2] = {6, 4};
    kn_type in2[2] = {ttype(4, a), ttype(2, b2)};
    CHECK_STATUS(infer("MatMul", 13, NULL, 0, in2, 2, &out), KILN_ERR_SHAPE);
    CHECK_ERROR_HAS("[2,1,5,7]");
    CHECK_ERROR_HAS("[6,4]");
}

/* ------------------------------------------------------------------ GEMM epilogue */

typedef struct epi_ctx {
    int64_t N;
    int *hits; /* per element of C */
} epi_ctx;

static void count_epilogue(const void *ctx, int64_t op, int64_t i0, int64_t j0, int64_t m, int64_t n, float *c,
                           int64_t ldc) {
    const epi_ctx *e = ctx;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            __atomic_fetch_add(&e->hits[(op * 1000 + i0 + i) * e->N + j0 + j], 1, __ATOMIC_RELAXED);
            c[i * ldc + j] += 1.0f; /* the epilogue sees final values: add one to each */
        }
}

KN_TEST(linalg_sgemm_epilogue_once_per_element) {
    kn_threadpool *pool;
    CHECK_STATUS(kn_threadpool_create(3, &pool), KILN_OK);
    static const int64_t shapes[][3] = {{1, 300, 40}, {300, 1, 40}, {7, 300, 40}, {300, 257, 600}, {50, 70, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            float *A = malloc(sizeof(float) * (size_t)(M * K + 1)), *B = malloc(sizeof(float) * (size_t)(K * N + 1));
            float *C = malloc(sizeof(float) * (size_t)(2 * M * N)), *R = malloc(sizeof(float) * (size_t)(M * N));
            int *hits = calloc((size_t)(1000 + M) * (size_t)N * 2, sizeof(int));
            fill(A, M * K);
            fill(B, K * N);
            ref_gemm(false, tb, M, N, K, 1.0f, A, K, B, tb ? K : N, 0.0f, R, N);
            const float *ap[2] = {A, A}, *bp[2] = {B, B};
            float *cp[2] = {C, C + M * N};
            epi_ctx e = {N, hits};
            /* product 1 also gets a row bias, which the epilogue must already see */
            float *bias = malloc(sizeof(float) * (size_t)M);
            fill(bias, M);
            const float *bias_rows[2] = {NULL, bias};
            kn_sgemm_batch g = {.count = 2, .M = M, .N = N, .K = K, .trans_b = tb, .alpha = 1.0f, .beta = 0.0f,
                                .a = ap, .lda = K, .b = bp, .ldb = tb ? K : N, .c = cp, .ldc = N,
                                .epilogue = count_epilogue, .epilogue_ctx = &e};
            /* a NULL row bias per product is not part of the interface: give product 0 zeros */
            float *zeros = calloc((size_t)M, sizeof(float));
            bias_rows[0] = zeros;
            g.row_bias = bias_rows;
            CHECK_STATUS(kn_sgemm_run(pool, &g), KILN_OK);
            int bad = 0;
            double err = 0;
            for (int64_t op = 0; op < 2; op++)
                for (int64_t i = 0; i < M * N; i++) {
                    bad += hits[(op * 1000) * N + i] != 1;
                    float want = R[i] + 1.0f + (op ? bias[i / N] : 0.0f);
                    err = fmax(err, fabs(cp[op][i] - want) / (1 + fabs(want)));
                }
            free(bias), free(zeros);
            CHECK_MSG(bad == 0 && err < gemm_tol(K), "epilogue on %lldx%lldx%lld transB=%d: %d elements not hit once, error %g",
                      (long long)M, (long long)N, (long long)K, tb, bad, err);
            free(A), free(B), free(C), free(R), free(hits);
        }
    kn_threadpool_destroy(pool);
}

/* The transposed path (kn_sgemm_swaps: few columns, many rows): every transposition, edge sizes of
 * each dimension (not multiples of the panels, K of 1 and past a KC slice), alpha, beta, a row bias,
 * op(A)^T prepacked (at_packed), op(B) from a packing callback, one and three threads. */
KN_TEST(linalg_sgemm_transposed_path) {
    kn_threadpool *pool;
    CHECK_STATUS(kn_threadpool_create(3, &pool), KILN_OK);
    /* the rule (saved lanes against K) would leave the small-K shapes to the usual path */
    setenv("KILN_GEMM_SWAP", "1", 1);
    static const int64_t shapes[][3] = {{64, 2, 1},    {64, 49, 7},   {65, 17, 33},  {96, 49, 256},
                                       {200, 3, 257},  {513, 49, 40}, {128, 196, 600}, {2048, 49, 64},
                                       {96, 100, 1},   {256, 450, 19}, {1000, 37, 300},
                                       /* op(A)^T prepacked past one slice of KCB (768) */
                                       {96, 49, 1000}, {130, 20, 1800}};
    int swapped = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int v = 0; v < 8; v++) {
            const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            const bool ta = v & 1, tb = (v >> 1) & 1, cb = v == 4, pre = v >= 4;
            swapped += kn_sgemm_swaps(M, N, K);
            const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 7;
            float *A = malloc(sizeof(float) * (size_t)((ta ? K : M) * lda));
            float *B = malloc(sizeof(float) * (size_t)((tb ? N : K) * ldb));
            float *C = malloc(sizeof(float) * (size_t)(M * ldc)), *R = malloc(sizeof(float) * (size_t)(M * ldc));
            float *bias = malloc(sizeof(float) * (size_t)M);
            float *AT = malloc(sizeof(float) * kn_sgemm_packed_b_floats(M, K));
            fill(A, (ta ? K : M) * lda);
            fill(B, (tb ? N : K) * ldb);
            fill(C, M * ldc);
            fill(bias, M);
            const float alpha = v & 2 ? 0.5f : 1.0f, beta = v == 3 || v == 6 ? -0.75f : 0.0f;
            if (beta == 0.0f)
                for (int64_t i = 0; i < M * ldc; i++) C[i] = NAN;
            memcpy(R, C, sizeof(float) * (size_t)(M * ldc));
            ref_gemm(ta, tb && !cb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) R[i * ldc + j] += v >= 5 ? bias[i] : 0.0f;
            kn_sgemm_pack_b_full(A, lda, !ta, M, K, AT);
            const float *ap[1] = {A}, *bp[1] = {B}, *atp[1] = {AT}, *rb[1] = {bias};
            float *cp[1] = {C};
            tpb_plain ppc = {B, ldb};
            kn_sgemm_batch g = {.count = 1, .M = M, .N = N, .K = K, .trans_a = ta, .trans_b = tb && !cb,
                                .alpha = alpha, .beta = beta, .a = ap, .lda = lda, .b = bp, .ldb = ldb, .c = cp,
                                .ldc = ldc, .at_packed = pre ? atp : NULL, .row_bias = v >= 5 ? rb : NULL};
            if (cb) {
                g.b = NULL;
                g.pack_b = tpb_pack_plain;
                g.pack_ctx = &ppc;
            }
            CHECK_STATUS(kn_sgemm_run(v & 4 ? pool : NULL, &g), KILN_OK);
            double err = 0;
            for (int64_t i = 0; i < M; i++) {
                for (int64_t j = 0; j < N; j++) {
                    double d = fabs((double)C[i * ldc + j] - R[i * ldc + j]) / (1.0 + fabs(R[i * ldc + j]));
                    if (!(d <= err)) err = isnan(d) ? 1e9 : d;
                }
                for (int64_t j = N; j < ldc && i + 1 < M; j++) /* the padding between rows is untouched */
                    if (!(C[i * ldc + j] == R[i * ldc + j] || (isnan(C[i * ldc + j]) && isnan(R[i * ldc + j])))) err = 1e9;
            }
            CHECK_MSG(err < gemm_tol(K), "transposed GEMM %lldx%lldx%lld variant %d: error %g", (long long)M,
                      (long long)N, (long long)K, v, err);
            free(A), free(B), free(C), free(R), free(bias), free(AT);
        }
    const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    CHECK_MSG(swapped == 8 * n_shapes, "%d of the cases ran transposed", swapped / 8);
    unsetenv("KILN_GEMM_SWAP");
    /* the rule, with the AVX-512 micro-kernel (vectors of 16): 7x7 planes (49 columns in 64 lanes)
     * with deep K run transposed, 14x14 (196 in 208) only when K is large, full vectors never */
    if (kn_sgemm_nr() == 32) {
        CHECK(kn_sgemm_swaps(512, 49, 2048) && kn_sgemm_swaps(2048, 49, 512) && kn_sgemm_swaps(160, 49, 960));
        CHECK(kn_sgemm_swaps(256, 196, 1024) && !kn_sgemm_swaps(1024, 196, 256) && !kn_sgemm_swaps(64, 49, 16));
        CHECK(!kn_sgemm_swaps(256, 64, 4096) && !kn_sgemm_swaps(200, 784, 512));
    }
    kn_threadpool_destroy(pool);
}

/* c_add and clamp (a fused node's residual and Relu/Clip, applied as C is stored): every path of
 * kn_sgemm_run (the usual order, rows first with A prepacked, transposed, B from a callback, one
 * row, one column, dot products, K = 0) against the definition, with alpha, beta, a row bias and
 * an epilogue after them; the addend with a row stride of its own; C's padding untouched; NaN
 * through the clamp stays NaN. 1 and 3 threads. */
static int tail_epi_calls;
static void tail_epilogue_twice(const void *ctx, int64_t op, int64_t i0, int64_t j0, int64_t m, int64_t n, float *c,
                                int64_t ldc) {
    (void)ctx, (void)op, (void)i0, (void)j0;
    __atomic_fetch_add(&tail_epi_calls, 1, __ATOMIC_RELAXED);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) c[i * ldc + j] *= 2.0f; /* after the clamp */
}

KN_TEST(linalg_sgemm_residual_and_clamp) {
    kn_threadpool *pool;
    CHECK_STATUS(kn_threadpool_create(3, &pool), KILN_OK);
    /* M, N, K, flags: 1 A prepacked, 2 B from a callback, 4 trans_b, 8 forced transposed, 16 rows
     * first off */
    static const int64_t cases[][4] = {
        {256, 3136, 64, 1},  {64, 3136, 256, 1},  {37, 300, 600, 1},   {200, 899, 72, 1},  {13, 1500, 3, 1},
        {100, 257, 600, 1 | 16}, {256, 196, 256, 1}, {512, 49, 300, 1 | 8}, {96, 49, 40, 8},
        {200, 225, 72, 1 | 2}, {40, 77, 300, 2},  {300, 70, 600, 0},   {1, 300, 40, 0},    {300, 1, 40, 0},
        {20, 300, 40, 4},    {50, 70, 0, 0},      {12, 2000, 2048, 1}, {97, 1031, 9, 4}};
    for (int threads = 0; threads < 2; threads++)
        for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++)
            for (int v = 0; v < 4; v++) {
                const int64_t M = cases[s][0], N = cases[s][1], K = cases[s][2], f = cases[s][3];
                const bool tb = f & 4, pre = f & 1, cb = f & 2;
                const bool add = v != 1, clamp = v != 2, epi = v == 3, with_bias = v & 1;
                const float alpha = v == 2 ? 0.5f : 1.0f, beta = v == 3 ? 0.25f : 0.0f;
                const float lo = v == 3 ? -0.5f : 0.0f, hi = v == 3 ? 0.75f : INFINITY;
                const int64_t ldb = tb ? K + 5 : N == 1 ? 1 : N + 5, ldc = N + 3, ldz = N + 11;
                float *A = malloc(sizeof(float) * (size_t)(M * K + 1)), *B = malloc(sizeof(float) * (size_t)((tb ? N : K) * ldb + 1));
                float *C = malloc(sizeof(float) * (size_t)(M * ldc)), *R = malloc(sizeof(float) * (size_t)(M * ldc));
                float *Z = malloc(sizeof(float) * (size_t)(M * ldz)), *bias = malloc(sizeof(float) * (size_t)M);
                float *P = malloc(sizeof(float) * (kn_sgemm_packed_a_floats(M, K) + 1));
                float *AT = malloc(sizeof(float) * (kn_sgemm_packed_b_floats(M, K) + 1));
                fill(A, M * K), fill(B, (tb ? N : K) * ldb), fill(C, M * ldc), fill(Z, M * ldz), fill(bias, M);
                if (M * N > 7) Z[7 % N + (7 / N) * ldz] = NAN; /* NaN through the clamp */
                if (pre) kn_sgemm_pack_a(A, K, false, M, K, P);
                kn_sgemm_pack_b_full(A, K, true, M, K, AT);
                memcpy(R, C, sizeof(float) * (size_t)(M * ldc));
                ref_gemm(false, tb, M, N, K, alpha, A, K, B, ldb, beta, R, ldc);
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        float r = R[i * ldc + j] + (with_bias ? bias[i] : 0.0f) + (add ? Z[i * ldz + j] : 0.0f);
                        if (clamp) r = isnan(r) ? r : r < lo ? lo : r > hi ? hi : r;
                        R[i * ldc + j] = epi ? 2.0f * r : r;
                    }
                const float *ap[1] = {A}, *bp[1] = {B}, *pp[1] = {P}, *atp[1] = {AT}, *zp[1] = {Z}, *rb[1] = {bias};
                float *cp[1] = {C};
                tpb_plain ppc = {B, ldb};
                kn_sgemm_batch g = {.count = 1, .M = M, .N = N, .K = K, .trans_b = tb, .alpha = alpha, .beta = beta,
                                    .a = ap, .lda = K, .b = cb ? NULL : bp, .ldb = ldb, .c = cp, .ldc = ldc,
                                    .a_packed = pre ? pp : NULL, .at_packed = f & 8 ? atp : NULL,
                                    .row_bias = with_bias ? rb : NULL, .c_add = add ? zp : NULL, .ldc_add = ldz,
                                    .clamp = clamp, .clamp_lo = lo, .clamp_hi = hi,
                                    .pack_b = cb ? tpb_pack_plain : NULL, .pack_ctx = &ppc,
                                    .epilogue = epi ? tail_epilogue_twice : NULL};
                if (f & 8) setenv("KILN_GEMM_SWAP", "1", 1);
                if (f & 16) setenv("KILN_GEMM_ROWS_FIRST", "0", 1);
                CHECK(!(f & 8) || kn_sgemm_swaps(M, N, K));
                tail_epi_calls = 0;
                CHECK_STATUS(kn_sgemm_run(threads ? pool : NULL, &g), KILN_OK);
                unsetenv("KILN_GEMM_SWAP"), unsetenv("KILN_GEMM_ROWS_FIRST");
                double err = 0;
                int64_t bad_nan = 0;
                for (int64_t i = 0; i < M; i++) {
                    for (int64_t j = 0; j < N; j++) {
                        const float got = C[i * ldc + j], want = R[i * ldc + j];
                        if (isnan(want) || isnan(got)) {
                            bad_nan += isnan(want) != isnan(got);
                            continue;
                        }
                        err = fmax(err, fabs(got - want) / (1 + fabs(want)));
                    }
                    for (int64_t j = N; j < ldc && i + 1 < M; j++) /* the padding between rows is untouched */
                        if (C[i * ldc + j] != R[i * ldc + j]) err = 1e9;
                }
                CHECK_MSG(err < gemm_tol(K) && bad_nan == 0 && (!epi || tail_epi_calls > 0),
                          "GEMM tail %lldx%lldx%lld flags %lld variant %d, %d threads: error %g, %lld NaN wrong",
                          (long long)M, (long long)N, (long long)K, (long long)f, v, threads ? 3 : 1, err,
                          (long long)bad_nan);
                free(A), free(B), free(C), free(R), free(Z), free(bias), free(P), free(AT);
            }
    kn_threadpool_destroy(pool);
}

/* A packed once (kn_sgemm_pack_a) gives the product of A packed per call: K over several packed
 * slices, M not a multiple of the micro-kernel's rows, A transposed or not, on 1 and 3 threads. */
KN_TEST(linalg_sgemm_prepacked_a) {
    kn_threadpool *pool;
    CHECK_STATUS(kn_threadpool_create(3, &pool), KILN_OK);
    static const int64_t shapes[][3] = {{13, 300, 40}, {100, 257, 600}, {37, 1500, 300}, {2, 50, 70}, {64, 7, 1100}};
    for (int threads = 0; threads < 2; threads++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int ta = 0; ta < 2; ta++) {
                int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], lda = ta ? M : K;
                float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N));
                float *C = malloc(sizeof(float) * (size_t)(M * N)), *R = malloc(sizeof(float) * (size_t)(M * N));
                float *P = malloc(sizeof(float) * kn_sgemm_packed_a_floats(M, K));
                fill(A, M * K);
                fill(B, K * N);
                kn_sgemm_pack_a(A, lda, ta, M, K, P);
                ref_gemm(ta, false, M, N, K, 1.0f, A, lda, B, N, 0.0f, R, N);
                const float *ap[1] = {A}, *bp[1] = {B}, *pp[1] = {P};
                float *cp[1] = {C};
                kn_sgemm_batch g = {.count = 1, .M = M, .N = N, .K = K, .trans_a = ta, .alpha = 1.0f, .beta = 0.0f,
                                    .a = ap, .lda = lda, .b = bp, .ldb = N, .c = cp, .ldc = N, .a_packed = pp};
                CHECK_STATUS(kn_sgemm_run(threads ? pool : NULL, &g), KILN_OK);
                double err = 0;
                for (int64_t i = 0; i < M * N; i++) err = fmax(err, fabs(C[i] - R[i]) / (1 + fabs(R[i])));
                CHECK_MSG(err < gemm_tol(K), "prepacked A %lldx%lldx%lld transA=%d: error %g", (long long)M,
                          (long long)N, (long long)K, ta, err);
                free(A), free(B), free(C), free(R), free(P);
            }
    kn_threadpool_destroy(pool);
}

/* B packed whole once (kn_sgemm_pack_b_full) gives the product of B packed per tile: N not a
 * multiple of the panel width, K over several slices, columns over several NC blocks, B
 * transposed or not, padded leading dimensions, beta 0 and not, on 1 and 3 threads. */
KN_TEST(linalg_sgemm_prepacked_b) {
    kn_threadpool *pool;
    CHECK_STATUS(kn_threadpool_create(3, &pool), KILN_OK);
    static const int64_t shapes[][3] = {{16, 300, 40}, {100, 257, 600}, {37, 1500, 300}, {64, 7, 1100}, {200, 33, 17},
                                        /* one row: the packed GEMV */
                                        {1, 300, 40},   {1, 77, 600},    {1, 1000, 2048}, {1, 5, 3}};
    for (int threads = 0; threads < 2; threads++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int tb = 0; tb < 2; tb++) {
                int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ldb = (tb ? K : N) + 3;
                float beta = tb ? 0.5f : 0.0f;
                float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)((tb ? N : K) * ldb));
                float *C = malloc(sizeof(float) * (size_t)(M * N)), *R = malloc(sizeof(float) * (size_t)(M * N));
                float *P = malloc(sizeof(float) * kn_sgemm_packed_b_floats(N, K));
                fill(A, M * K);
                fill(B, (tb ? N : K) * ldb);
                fill(C, M * N);
                memcpy(R, C, sizeof(float) * (size_t)(M * N));
                kn_sgemm_pack_b_full(B, ldb, tb, N, K, P);
                ref_gemm(false, tb, M, N, K, 1.5f, A, K, B, ldb, beta, R, N);
                const float *ap[1] = {A}, *bp[1] = {B}, *pp[1] = {P};
                float *cp[1] = {C};
                kn_sgemm_batch g = {.count = 1, .M = M, .N = N, .K = K, .trans_b = tb, .alpha = 1.5f, .beta = beta,
                                    .a = ap, .lda = K, .b = bp, .ldb = ldb, .c = cp, .ldc = N, .b_packed = pp};
                CHECK_STATUS(kn_sgemm_run(threads ? pool : NULL, &g), KILN_OK);
                double err = 0;
                for (int64_t i = 0; i < M * N; i++) err = fmax(err, fabs(C[i] - R[i]) / (1 + fabs(R[i])));
                CHECK_MSG(err < gemm_tol(K), "prepacked B %lldx%lldx%lld transB=%d: error %g", (long long)M,
                          (long long)N, (long long)K, tb, err);
                free(A), free(B), free(C), free(R), free(P);
            }
    kn_threadpool_destroy(pool);
}

/* GlobalAveragePool on planes of every length around the vector widths (and a 112x112 one)
 * against a double sum. */
KN_TEST(linalg_global_average_pool_plane_lengths) {
    static const int64_t lens[] = {1, 7, 15, 16, 17, 31, 32, 33, 49, 100, 196, 12544};
    for (size_t t = 0; t < sizeof lens / sizeof lens[0]; t++) {
        const int64_t C = 3, n = lens[t], xd[4] = {1, C, n, 1}, yd[4] = {1, C, 1, 1};
        kn_tensor *X, *Y;
        CHECK_STATUS(kn_tensor_new(KILN_DTYPE_FLOAT, 4, xd, &X), KILN_OK);
        CHECK_STATUS(kn_tensor_new(KILN_DTYPE_FLOAT, 4, yd, &Y), KILN_OK);
        fill(X->data, C * n);
        kn_node node;
        memset(&node, 0, sizeof node);
        node.name = "gap";
        node.op_type = "GlobalAveragePool";
        node.domain = "";
        node.opset = 1;
        kn_tensor *ins[1] = {X}, *outs[1] = {Y};
        kn_kernel_ctx ctx = {.node = &node, .n_inputs = 1, .in = ins, .n_outputs = 1, .out = outs};
        CHECK_STATUS(kn_cpu_global_average_pool(&ctx), KILN_OK);
        for (int64_t c = 0; c < C; c++) {
            double s = 0;
            for (int64_t i = 0; i < n; i++) s += ((const float *)X->data)[c * n + i];
            const float got = ((const float *)Y->data)[c], want = (float)(s / (double)n);
            CHECK_MSG(fabsf(got - want) <= 1e-6f * (1.0f + fabsf(want)), "plane of %lld: channel %lld got %g, want %g",
                      (long long)n, (long long)c, got, want);
        }
        kn_tensor_free(X);
        kn_tensor_free(Y);
    }
}

/* B packed whole with A packed per call (run_packed_tile: its slices of K in groups that keep C in
 * L1 across them, rows never blocked; at several tiles A packed once for all of them): C over 1 MB
 * (groups of 3 slices and a last shorter one), under it (one slice a group), more rows than a
 * block of the usual order, rows past what fits the workspace (the usual order), few rows and many
 * columns; A transposed or not, B transposed or not, alpha, beta, a row bias, the residual and
 * clamp, an epilogue that must see each element once, two products; 1 and 3 threads, and the
 * usual order (KILN_GEMM_PACKED_B=0) on the same cases. */
typedef struct hit_ctx {
    int64_t M, N;
    int *hits; /* per element of each product's C */
} hit_ctx;

static void hit_epilogue(const void *ctx, int64_t op, int64_t i0, int64_t j0, int64_t m, int64_t n, float *c,
                         int64_t ldc) {
    const hit_ctx *e = ctx;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            __atomic_fetch_add(&e->hits[(op * e->M + i0 + i) * e->N + j0 + j], 1, __ATOMIC_RELAXED);
            c[i * ldc + j] += 1.0f; /* the epilogue sees final values: add one to each */
        }
}

KN_TEST(linalg_sgemm_prepacked_b_orders) {
    kn_threadpool *pool;
    CHECK_STATUS(kn_threadpool_create(3, &pool), KILN_OK);
    static const int64_t shapes[][3] = {{197, 1400, 900}, {197, 300, 1100}, {13, 2100, 520}, {400, 700, 800},
                                        {30, 9000, 300},  {1030, 40, 50},   {1300, 250, 70}, {24, 64, 1},
                                        /* few rows: two panels a micro-kernel call (ukr_pair), a lone
                                         * last panel, a second panel of 1..32 columns, K over slices */
                                        {2, 70, 900},     {3, 1000, 300},   {4, 97, 40},     {2, 33, 17},
                                        {4, 64, 800},     {3, 95, 5},
                                        /* one and two rows (AVX2's ukr_pair, one row's K split in
                                         * even and odd steps: odd K), second panels of 1, 15, 16 */
                                        {1, 50, 300},     {2, 47, 513},     {1, 33, 7},      {2, 32, 255},
                                        {1, 1000, 64},    {2, 257, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int v = 0; v < 4; v++) {
            const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            const bool ta = v & 1, tb = v & 2, extras = v >= 2;
            const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 3, ldz = N + 7;
            const float alpha = v == 1 ? 0.5f : 1.0f, beta = v == 3 ? 0.25f : 0.0f;
            const float lo = -0.5f, hi = 0.75f;
            float *A = malloc(sizeof(float) * (size_t)((ta ? K : M) * lda + 1)); /* product 1 reads A + 1 */
            float *B = malloc(sizeof(float) * (size_t)((tb ? N : K) * ldb));
            float *C0 = malloc(sizeof(float) * (size_t)(M * ldc)), *C = malloc(sizeof(float) * (size_t)(2 * M * ldc));
            float *R = malloc(sizeof(float) * (size_t)(2 * M * ldc));
            float *Z = malloc(sizeof(float) * (size_t)(M * ldz)), *bias = malloc(sizeof(float) * (size_t)M);
            float *P = malloc(sizeof(float) * kn_sgemm_packed_b_floats(N, K));
            int *hits = malloc(sizeof(int) * (size_t)(2 * M * N));
            fill(A, (ta ? K : M) * lda + 1), fill(B, (tb ? N : K) * ldb), fill(C0, M * ldc), fill(Z, M * ldz);
            fill(bias, M);
            if (beta == 0.0f) /* beta == 0 must not read C: poison it */
                for (int64_t i = 0; i < M * ldc; i++) C0[i] = NAN;
            for (int op = 0; op < 2; op++) {
                float *Ro = R + op * M * ldc;
                memcpy(Ro, C0, sizeof(float) * (size_t)(M * ldc));
                ref_gemm(ta, tb, M, N, K, alpha, A + op, lda, B, ldb, beta, Ro, ldc);
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        float r = Ro[i * ldc + j];
                        if (extras) {
                            r = r + bias[i] + Z[i * ldz + j];
                            r = r < lo ? lo : r > hi ? hi : r;
                        }
                        Ro[i * ldc + j] = r + 1.0f; /* hit_epilogue adds one */
                    }
            }
            kn_sgemm_pack_b_full(B, ldb, tb, N, K, P);
            for (int mode = 0; mode < 3; mode++) { /* 1 thread, 3 threads, the usual order on 3 threads */
                memcpy(C, C0, sizeof(float) * (size_t)(M * ldc));
                memcpy(C + M * ldc, C0, sizeof(float) * (size_t)(M * ldc));
                memset(hits, 0, sizeof(int) * (size_t)(2 * M * N));
                const float *ap[2] = {A, A + 1}, *bp[2] = {B, B}, *pp[2] = {P, P}, *zp[2] = {Z, Z}, *rb[2] = {bias, bias};
                float *cp[2] = {C, C + M * ldc};
                hit_ctx e = {M, N, hits};
                kn_sgemm_batch g = {.count = 2, .M = M, .N = N, .K = K, .trans_a = ta, .trans_b = tb, .alpha = alpha,
                                    .beta = beta, .a = ap, .lda = lda, .b = bp, .ldb = ldb, .c = cp, .ldc = ldc,
                                    .b_packed = pp, .row_bias = extras ? rb : NULL, .c_add = extras ? zp : NULL,
                                    .ldc_add = ldz, .clamp = extras, .clamp_lo = lo, .clamp_hi = hi,
                                    .epilogue = hit_epilogue, .epilogue_ctx = &e};
                if (mode == 2) setenv("KILN_GEMM_PACKED_B", "0", 1);
                CHECK_STATUS(kn_sgemm_run(mode ? pool : NULL, &g), KILN_OK);
                unsetenv("KILN_GEMM_PACKED_B");
                double err = 0;
                int64_t bad_hits = 0;
                for (int64_t op = 0; op < 2; op++)
                    for (int64_t i = 0; i < M; i++) {
                        for (int64_t j = 0; j < N; j++) {
                            const float got = cp[op][i * ldc + j], want = R[(op * M + i) * ldc + j];
                            const double d = fabs((double)got - want) / (1.0 + fabs(want));
                            if (!(d <= err)) err = isnan(d) ? 1e9 : d;
                            bad_hits += hits[(op * M + i) * N + j] != 1;
                        }
                        for (int64_t j = N; j < ldc && i + 1 < M; j++) { /* the padding between rows is untouched */
                            const float got = cp[op][i * ldc + j], want = C0[i * ldc + j];
                            if (!(got == want || (isnan(got) && isnan(want)))) err = 1e9;
                        }
                    }
                CHECK_MSG(err < gemm_tol(K) && bad_hits == 0,
                          "prepacked B %lldx%lldx%lld variant %d mode %d: error %g, %lld elements not seen once by the "
                          "epilogue",
                          (long long)M, (long long)N, (long long)K, v, mode, err, (long long)bad_hits);
            }
            free(A), free(B), free(C0), free(C), free(R), free(Z), free(bias), free(P), free(hits);
        }
    kn_threadpool_destroy(pool);
}

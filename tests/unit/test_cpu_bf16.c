/* The CPU provider's precision=bf16: the bf16 GEMM against a double-precision reference on
 * bf16-rounded operands (odd shapes, transposes, alpha/beta, row bias, epilogue, a packing
 * callback, threads), the decision on CPUs without AVX512_BF16 (forced), sessions in bf16 against
 * fp32 within a bf16 bound, and the option in the compiled-cache key. */
#include "backend/backend.h"
#include "backend/cpu/const_cache.h"
#include "backend/cpu/sgemm.h"
#include "backend/cpu/sgemm_bf16.h"
#include "cache/key.h"
#include "exec/session.h"
#include "test_model_builder.h"
#include "test_pack_b.h"
#include "unit.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 777;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}
static void fill(float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = frand();
}

#define NEED_BF16()                                                                                \
    do {                                                                                           \
        if (!kn_bf16_cpu_supported()) KN_SKIP("this CPU has no AVX512_BF16");                      \
    } while (0)

/* ------------------------------------------------------------------ rounding */

KN_TEST(bf16_round_nearest_even) {
    CHECK(kn_bf16_round(1.0f) == 1.0f);
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1) */
    CHECK(kn_bf16_round(1.0f + 0x1p-8f) == 1.0f);
    CHECK(kn_bf16_round(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
    CHECK(kn_bf16_round(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f); /* tie, odd below: up */
    CHECK(isnan(kn_bf16_round(NAN)));
    CHECK(isinf(kn_bf16_round(INFINITY)));
}

/* ------------------------------------------------------------------ the GEMM */

/* C = alpha * bf16(op(A)) bf16(op(B)) + beta * C + bias, in double */
static void ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float beta, const float *bias, float *C, int64_t ldc) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)kn_bf16_round(ta ? A[k * lda + i] : A[i * lda + k]) *
                     (double)kn_bf16_round(tb ? B[j * ldb + k] : B[k * ldb + j]);
            C[i * ldc + j] = (float)(alpha * s + (beta == 0.0f ? 0.0 : (double)beta * C[i * ldc + j]) +
                                     (bias ? bias[i] : 0.0));
        }
}

/* fp32 accumulation of exact bf16 products: the error grows with K */
static double tol(int64_t K) { return 1e-5 + 2e-7 * (double)K; }

typedef struct epi_ctx {
    int64_t N;
    int *hits;
} epi_ctx;

static void count_epilogue(const void *ctx, int64_t op, int64_t i0, int64_t j0, int64_t m, int64_t n, float *c,
                           int64_t ldc) {
    const epi_ctx *e = ctx;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            __atomic_fetch_add(&e->hits[(op * 4096 + i0 + i) * e->N + j0 + j], 1, __ATOMIC_RELAXED);
            c[i * ldc + j] += 1.0f;
        }
}

/* One case through kn_bgemm_run: two products, padded leading dimensions; mode 1 adds a row bias
 * and an epilogue, mode 2 takes B from a packing callback (B untransposed), mode 3 passes both
 * operands prepacked in bf16. Returns the max error
 * relative to 1 + |reference|, or 1e9 for a status error, a bad epilogue count or touched padding. */
static double bgemm_case(kn_threadpool *pool, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                         float beta, int mode) {
    if (mode == 2) tb = false;
    const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 7;
    const int64_t arows = ta ? K : M, brows = tb ? N : K;
    float *A = malloc(sizeof(float) * (size_t)(2 * arows * lda + 1));
    float *B = malloc(sizeof(float) * (size_t)(2 * brows * ldb + 1));
    float *C = malloc(sizeof(float) * (size_t)(2 * M * ldc + 1));
    float *R = malloc(sizeof(float) * (size_t)(2 * M * ldc + 1));
    float *bias = malloc(sizeof(float) * (size_t)M);
    int *hits = calloc((size_t)(4096 * 2) * (size_t)N, sizeof(int));
    fill(A, 2 * arows * lda);
    fill(B, 2 * brows * ldb);
    fill(C, 2 * M * ldc);
    fill(bias, M);
    if (beta == 0.0f)
        for (int64_t i = 0; i < 2 * M * ldc; i++) C[i] = NAN;
    memcpy(R, C, sizeof(float) * (size_t)(2 * M * ldc));
    const float *ap[2] = {A, A + arows * lda}, *bp[2] = {B, mode == 2 ? B : B + brows * ldb};
    float *cp[2] = {C, C + M * ldc};
    const float *rb[2] = {bias, bias};
    epi_ctx e = {N, hits};
    tpb_plain cc = {B, ldb};
    kn_sgemm_batch g = {.count = 2, .M = M, .N = N, .K = K, .trans_a = ta, .trans_b = tb, .alpha = alpha,
                        .beta = beta, .a = ap, .lda = lda, .b = bp, .ldb = ldb, .c = cp, .ldc = ldc};
    if (mode == 1) {
        g.row_bias = rb;
        g.epilogue = count_epilogue;
        g.epilogue_ctx = &e;
    }
    if (mode == 2) {
        g.pack_b = tpb_pack_plain;
        g.pack_ctx = &cc;
    }
    double err;
    if (mode == 3) { /* both operands prepacked in bf16 (as kept weights are) */
        uint16_t *pa[2], *pb[2];
        for (int op = 0; op < 2; op++) {
            pa[op] = malloc(2 * kn_bgemm_packed_a_elems(M, N, K) + 64);
            pb[op] = malloc(2 * kn_bgemm_packed_b_elems(N, K) + 64);
            kn_bgemm_pack_a(ap[op], lda, ta, M, N, K, pa[op]);
            kn_bgemm_pack_b(bp[op], ldb, tb, N, K, pb[op]);
        }
        const uint16_t *cpa[2] = {pa[0], pa[1]}, *cpb[2] = {pb[0], pb[1]};
        err = kn_bgemm_run_prepacked(pool, &g, cpa, cpb) == KILN_OK ? 0 : 1e9;
        for (int op = 0; op < 2; op++) free(pa[op]), free(pb[op]);
    } else {
        err = kn_bgemm_run(pool, &g) == KILN_OK ? 0 : 1e9;
    }
    for (int op = 0; op < 2; op++) {
        float *r = R + op * M * ldc;
        ref_gemm(ta, tb, M, N, K, alpha, ap[op], lda, bp[op], ldb, beta, mode == 1 ? bias : NULL, r, ldc);
        if (mode == 1)
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) r[i * ldc + j] += 1.0f;
        for (int64_t i = 0; i < M; i++) {
            for (int64_t j = 0; j < N; j++) {
                const double d = fabs((double)cp[op][i * ldc + j] - r[i * ldc + j]) / (1.0 + fabs(r[i * ldc + j]));
                if (!(d <= err)) err = isnan(d) ? 1e9 : d;
                if (mode == 1 && hits[(op * 4096 + i) * N + j] != 1) err = 1e9;
            }
            for (int64_t j = N; j < ldc && i + 1 < M; j++) /* the padding between rows is untouched */
                if (!(cp[op][i * ldc + j] == r[i * ldc + j] || (isnan(cp[op][i * ldc + j]) && isnan(r[i * ldc + j]))))
                    err = 1e9;
        }
    }
    free(A), free(B), free(C), free(R), free(bias), free(hits);
    return err;
}

static void bgemm_shapes(kn_threadpool *pool) {
    int mr, nr, kc;
    kn_bgemm_tile(&mr, &nr, &kc);
    /* around the tile (12 x 32 with vdpbf16ps, 32 x 32 of 16 x 16 tiles with AMX), the slice depth
     * (256, odd K, AMX's depth of 32), the blocks of rows / callback columns, and AMX's two orders */
    const int64_t shapes[][3] = {{1, 1, 1},       {4, 8, 8},       {5, 9, 3},         {11, 31, 7},
                                 {12, 32, 16},    {13, 33, 17},    {23, 47, 255},     {25, 65, 257},
                                 {37, 100, 513},  {mr * 16 + 5, 70, 33}, {200, 1100, 40}, {64, 49, 300},
                                 {96, 196, 577},  {200, 100, 40},  {17, 1, 20},       {1, 40, 30},
                                 {16, 16, 32},    {31, 17, 31},    {33, 48, 64},      {48, 15, 290},
                                 /* AMX: B over 1 MB, so the rows in blocks over each panel */
                                 {20, 600, 900},
                                 /* 1-3 rows: rows times B's panels (vdpbf16ps on every CPU), several
                                  * slices, odd depth and columns, a classifier's 1 x 1000 x 2048 */
                                 {1, 45, 300}, {2, 70, 600}, {3, 33, 257}, {2, 16, 8}, {1, 1000, 2048}};
    int checked = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int mode = 0; mode < 4; mode++) {
                const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                const float alpha = t & 1 ? 0.5f : 1.0f, beta = t == 0 ? 0.0f : t == 1 ? 1.0f : -0.75f;
                const double err = bgemm_case(pool, t & 1, (t >> 1) & 1, M, N, K, alpha, beta, mode);
                CHECK_MSG(err < tol(K), "bf16 GEMM %lldx%lldx%lld transA=%d transB=%d alpha=%g beta=%g mode %d: error %g",
                          (long long)M, (long long)N, (long long)K, t & 1, (t >> 1) & 1, alpha, beta, mode, err);
                checked++;
            }
    CHECK(checked >= 100);
    /* with vdpbf16ps, the transposed products (small N, M filling the columns) are among them */
    if (!kn_bgemm_amx()) CHECK(kn_bgemm_swaps(64, 49, 300) && kn_bgemm_swaps(96, 196, 577) && kn_bgemm_swaps(200, 100, 40));
    CHECK(!kn_bgemm_swaps(128, 768, 768) && !kn_bgemm_swaps(64, 3136, 576));
}

/* every kernel this CPU runs: AMX's tiles where it has them, vdpbf16ps always */
static void bgemm_kernels(kn_threadpool *pool) {
    const bool amx = kn_bgemm_amx();
    for (int k = amx ? 0 : 1; k < 2; k++) {
        CHECK(kn_bgemm_force_amx(k == 0));
        bgemm_shapes(pool);
    }
    CHECK(kn_bgemm_force_amx(amx));
}

KN_TEST(bf16_gemm_single_thread) {
    NEED_BF16();
    bgemm_kernels(NULL);
}

KN_TEST(bf16_gemm_threads) {
    NEED_BF16();
    kn_threadpool *pool;
    CHECK_STATUS(kn_threadpool_create(3, &pool), KILN_OK);
    bgemm_kernels(pool);
    kn_threadpool_destroy(pool);
}

/* kn_bgemm_run_io, a 1x1 convolution's product on AMX (B the input planes in fp32 or bf16, C in fp32
 * or bf16 with the bias, a residual and a clamp), against its definition in double on bf16-rounded
 * operands: planes of 512 columns and more (each task packing its own block of B: 16-column and
 * 1-column remainders, several slices of K with a remainder, rows past a multiple of 32), at 1, 2
 * and 3 threads, two images */
static uint16_t bits16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}
static float from16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

KN_TEST(bf16_gemm_io_matches_definition) {
    NEED_BF16();
    if (!kn_bgemm_amx()) KN_SKIP("this CPU has no AMX (or the OS refused its tile state)");
    typedef struct {
        int64_t M, K, N;
        bool b16, c16, bias, res;
        float lo, hi;
    } io_case;
    static const io_case cases[] = {
        {64, 256, 3136, true, true, true, false, 0.0f, INFINITY},  {40, 64, 2209, false, true, true, false, 0.0f, 6.0f},
        {128, 512, 784, true, false, true, false, -INFINITY, INFINITY}, {17, 1030, 529, false, false, false, false, 0.0f, INFINITY},
        {256, 64, 3136, true, false, true, false, -INFINITY, INFINITY}, {40, 96, 600, false, false, true, false, -INFINITY, INFINITY},
        {256, 64, 1000, true, true, false, false, -0.5f, 0.5f},     {48, 200, 513, true, false, true, true, 0.0f, INFINITY},
        {64, 40, 700, false, true, true, true, -INFINITY, INFINITY},
    };
    for (int th = 1; th <= 3; th++) {
        kn_threadpool *pool = NULL;
        if (th > 1) CHECK_STATUS(kn_threadpool_create(th, &pool), KILN_OK);
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            const io_case *k = &cases[ci];
            const int64_t M = k->M, K = k->K, N = k->N, cnt = 2;
            float *A = malloc(sizeof(float) * M * K), *bias = malloc(sizeof(float) * M);
            float *B = malloc(sizeof(float) * cnt * K * N), *R = malloc(sizeof(float) * cnt * M * N);
            float *C = malloc(sizeof(float) * cnt * M * N);
            uint16_t *B16 = malloc(2 * cnt * K * N), *C16 = malloc(2 * cnt * M * N);
            fill(A, M * K);
            fill(bias, M);
            fill(B, cnt * K * N);
            fill(R, cnt * M * N);
            for (int64_t i = 0; i < cnt * K * N; i++) {
                B16[i] = bits16(kn_bf16_round(B[i]));
                if (k->b16) B[i] = from16(B16[i]);
            }
            const float *ap[2] = {A, A}, *bp[2] = {B, B + K * N}, *rb[2] = {bias, bias}, *add[2] = {R, R + M * N};
            float *cp[2] = {C, C + M * N};
            const uint16_t *b16[2] = {B16, B16 + K * N};
            uint16_t *c16[2] = {C16, C16 + M * N};
            kn_sgemm_batch g = {.count = cnt, .M = M, .N = N, .K = K, .alpha = 1.0f, .a = ap, .lda = K, .b = bp,
                                .ldb = N, .c = cp, .ldc = N, .row_bias = k->bias ? rb : NULL};
            /* (fp32 C without a residual or clamp: no tail, the tiles store C directly) */
            const bool tail = k->res || (!k->c16 && (k->lo > -INFINITY || k->hi < INFINITY));
            kn_bgemm_io io = {k->b16 ? b16 : NULL, k->c16 ? c16 : NULL, k->lo, k->hi, tail, k->res ? add : NULL,
                              k->res ? N : 0, NULL};
            CHECK_MSG(kn_bgemm_io_takes(&g, &io), "case %zu not taken", ci);
            CHECK_STATUS(kn_bgemm_run_io(pool, &g, &io), KILN_OK);
            int bad = 0;
            double worst = 0;
            for (int64_t op = 0; op < cnt; op++)
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double sum = k->bias ? bias[i] : 0.0, mag = fabs(sum);
                        for (int64_t q = 0; q < K; q++) {
                            const double t = (double)kn_bf16_round(A[i * K + q]) *
                                             (double)kn_bf16_round(B[op * K * N + q * N + j]);
                            sum += t;
                            mag += fabs(t);
                        }
                        if (k->res) sum += R[op * M * N + i * N + j], mag += fabs(R[op * M * N + i * N + j]);
                        sum = sum < k->lo ? k->lo : sum > k->hi ? k->hi : sum;
                        const double got = k->c16 ? (double)from16(C16[op * M * N + i * N + j]) : C[op * M * N + i * N + j];
                        const double bound = 1e-6 * (double)K * mag + 1e-6 + (k->c16 ? 0x1p-8 * fabs(sum) : 0.0);
                        const double e = fabs(got - sum) / bound;
                        if (!(e <= 1.0)) bad++;
                        if (e > worst || e != e) worst = e;
                    }
            CHECK_MSG(bad == 0, "%d threads, case %zu (M %lld K %lld N %lld): %d elements off, worst %.3g of the bound",
                      th, ci, (long long)M, (long long)K, (long long)N, bad, worst);
            free(A), free(bias), free(B), free(R), free(C), free(B16), free(C16);
        }
        kn_threadpool_destroy(pool);
    }
}

/* the bf16 products differ from fp32 by bf16's rounding, not more: a sanity bound on random data */
KN_TEST(bf16_gemm_error_against_fp32) {
    NEED_BF16();
    const int64_t M = 64, N = 96, K = 768;
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
    float *C = malloc(sizeof(float) * M * N), *F = malloc(sizeof(float) * M * N);
    fill(A, M * K);
    fill(B, K * N);
    const float *ap[1] = {A}, *bp[1] = {B};
    float *cp[1] = {C};
    kn_sgemm_batch g = {.count = 1, .M = M, .N = N, .K = K, .alpha = 1.0f, .a = ap, .lda = K, .b = bp, .ldb = N,
                        .c = cp, .ldc = N};
    CHECK_STATUS(kn_bgemm_run(NULL, &g), KILN_OK);
    CHECK_STATUS(kn_sgemm(NULL, false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, F, N), KILN_OK);
    double num = 0, den = 0;
    for (int64_t i = 0; i < M * N; i++) {
        num += (double)(C[i] - F[i]) * (C[i] - F[i]);
        den += (double)F[i] * F[i];
    }
    const double rel = sqrt(num / den);
    /* two roundings of 2^-9 relative each, averaged over K random terms: about 2^-9 */
    CHECK_MSG(rel > 1e-4 && rel < 8e-3, "relative L2 error of bf16 against fp32: %g", rel);
    free(A), free(B), free(C), free(F);
}

/* ------------------------------------------------------------------ the decision */

KN_TEST(bf16_precision_decision) {
    CHECK_STATUS(kn_cpu_precision_check(KN_PRECISION_FP32, false), KILN_OK);
    CHECK_STATUS(kn_cpu_precision_check(KN_PRECISION_FP32, true), KILN_OK);
    CHECK_STATUS(kn_cpu_precision_check(KN_PRECISION_BF16, true), KILN_OK);
    /* forced: a CPU without AVX512_BF16 refuses, saying why */
    CHECK_STATUS(kn_cpu_precision_check(KN_PRECISION_BF16, false), KILN_ERR_UNSUPPORTED);
    CHECK_ERROR_HAS("AVX512_BF16");
    CHECK_ERROR_HAS("precision=fp32");
    CHECK_STATUS(kn_cpu_precision_check(KN_PRECISION_FP16, true), KILN_ERR_UNSUPPORTED);
    CHECK_ERROR_HAS("fp16");
    CHECK_STATUS(kn_cpu_precision_check(KN_PRECISION_TF32, true), KILN_ERR_UNSUPPORTED);
    CHECK_ERROR_HAS("tf32");
}

KN_TEST(bf16_node_list) {
    static const char *const yes[][2] = {{"", "MatMul"},        {"", "Gemm"},         {"", "Conv"},
                                         {"kiln", "FusedMatMul"}, {"kiln", "FusedConv"}, {"kiln", "FusedGemm"},
                                         {"com.microsoft", "FusedMatMul"}, {"kiln", "Attention"}};
    static const char *const no[][2] = {{"", "Relu"}, {"", "MatMulInteger"}, {"com.microsoft", "Attention"},
                                        {"", "Attention"}, {"x", "MatMul"}};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        kn_node n = {.domain = yes[i][0], .op_type = yes[i][1]};
        CHECK_MSG(kn_bgemm_node(&n), "%s:%s", yes[i][0], yes[i][1]);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        kn_node n = {.domain = no[i][0], .op_type = no[i][1]};
        CHECK_MSG(!kn_bgemm_node(&n), "%s:%s", no[i][0], no[i][1]);
    }
}

/* Kept bf16 forms are made only from memory the CPU state already holds (a constant's packed
 * weights): an address outside it (a per-call buffer) gets NULL, so it is never taken for a
 * constant whose converted form was kept */
static void fill_ones(const void *ctx, void *dst) {
    (void)ctx;
    memset(dst, 1, 64);
}

KN_TEST(bf16_kept_forms_only_of_state_memory) {
    kn_cpu_state *st = NULL;
    CHECK_STATUS(kn_cpu_state_create(&st), KILN_OK);
    float local[16] = {0};
    kn_const_layout lay = {1, {16, 16, 0, 0}};
    CHECK(kn_cpu_const_rederived(st, local, &lay, 64, fill_ones, NULL) == NULL);
    CHECK(kn_cpu_const_rederived(NULL, local, &lay, 64, fill_ones, NULL) == NULL);
    CHECK(!kn_cpu_state_bf16(st));
    kn_cpu_state_set_bf16(st, true);
    CHECK(kn_cpu_state_bf16(st));
    kn_cpu_state_destroy(st);
}

/* ------------------------------------------------------------------ sessions */

/* x [R, 96] -> MatMul W1 [96, 80] -> Relu -> Gemm (transB) W2 [72, 80] + b -> y [R, 72];
 * c [1, 8, 20, 20] -> Conv 5x5 pad 2, 32 channels + bias -> z (the GEMM with implicit im2col; a
 * 3x3 on 8 channels runs conv.c's direct kernel rk_conv, which stays fp32) */
static unsigned char *mixed_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    const int64_t R = 40;
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){R, 96}, NULL);
    int c = tmb_input(&b, "c", KILN_DTYPE_FLOAT, 4, (int64_t[]){1, 8, 20, 20}, NULL);
    int w1 = tmb_const(&b, "w1", 2, (int64_t[]){96, 80}, 0.2f);
    int w2 = tmb_const(&b, "w2", 2, (int64_t[]){72, 80}, 0.2f);
    int b2 = tmb_const(&b, "b2", 1, (int64_t[]){72}, 1.0f);
    int wc = tmb_const(&b, "wc", 4, (int64_t[]){32, 8, 5, 5}, 0.3f);
    int bc = tmb_const(&b, "bc", 1, (int64_t[]){32}, 1.0f);
    int h = tmb_value(&b, "h"), r = tmb_value(&b, "r"), y = tmb_value(&b, "y"), z = tmb_value(&b, "z");
    tmb_node(&b, "MatMul", (int[]){x, w1}, 2, h);
    tmb_node(&b, "Relu", (int[]){h}, 1, r);
    int gn = tmb_node(&b, "Gemm", (int[]){r, w2, b2}, 3, y);
    tmb_int(&b, gn, "transB", 1);
    int cn = tmb_node(&b, "Conv", (int[]){c, wc, bc}, 3, z);
    tmb_ints(&b, cn, "pads", (int64_t[]){2, 2, 2, 2}, 4);
    tmb_output(&b, y);
    tmb_output(&b, z);
    return tmb_finish(&b, size);
}

static kiln_session_options *opts_for(const char *precision) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_intra_op_threads(o, 2);
    const char *k[1] = {"precision"}, *v[1] = {precision};
    kiln_session_options_append_provider(o, "cpu", k, v, precision ? 1 : 0);
    return o;
}

/* Runs the mixed model; outs[0..1] are y and z (caller destroys). */
static kiln_status run_mixed(kiln_session *s, kiln_tensor *outs[2]) {
    float xd[40 * 96], cd[8 * 400]; /* per call: threads call it at once */
    uint32_t seed = 99;
    for (size_t i = 0; i < sizeof xd / sizeof xd[0]; i++) xd[i] = tmb_rand(&seed);
    for (size_t i = 0; i < sizeof cd / sizeof cd[0]; i++) cd[i] = tmb_rand(&seed);
    kiln_tensor *in[2] = {NULL, NULL};
    kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){40, 96}, 2, &in[0]);
    kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){1, 8, 20, 20}, 4, &in[1]);
    memcpy(kiln_tensor_data(in[0]), xd, sizeof xd);
    memcpy(kiln_tensor_data(in[1]), cd, sizeof cd);
    const char *names[2] = {"x", "c"};
    kiln_status st = kiln_session_run(s, names, in, 2, NULL, 2, outs);
    kiln_tensor_destroy(in[0]);
    kiln_tensor_destroy(in[1]);
    return st;
}

KN_TEST(bf16_session_against_fp32) {
    NEED_BF16();
    size_t size;
    unsigned char *m = mixed_model(&size);
    if (!m) return;
    kiln_session *f = NULL, *h = NULL;
    kiln_session_options *of = opts_for(NULL), *oh = opts_for("bf16");
    CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, of, &f), KILN_OK);
    CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, oh, &h), KILN_OK);
    kiln_tensor *fo[2] = {0}, *ho[2] = {0}, *ho2[2] = {0};
    if (f && h) {
        CHECK_STATUS(run_mixed(f, fo), KILN_OK);
        CHECK_STATUS(run_mixed(h, ho), KILN_OK);
        CHECK_STATUS(run_mixed(h, ho2), KILN_OK); /* weights converted once: the same results again */
        for (int o = 0; o < 2 && fo[o] && ho[o]; o++) {
            const float *a = kiln_tensor_data(fo[o]), *b = kiln_tensor_data(ho[o]);
            const size_t n = kiln_tensor_bytes(fo[o]) / 4;
            double num = 0, den = 0, maxe = 0, maxv = 0;
            for (size_t i = 0; i < n; i++) {
                num += (double)(a[i] - b[i]) * (a[i] - b[i]);
                den += (double)a[i] * a[i];
                maxe = fmax(maxe, fabs(a[i] - b[i]));
                maxv = fmax(maxv, fabs(a[i]));
            }
            const double rel = sqrt(num / den);
            /* bf16 operands (8 significant bits): about 2^-9 relative, never 1e-2; not exactly fp32 */
            CHECK_MSG(rel < 1e-2 && maxe < 3e-2 * maxv, "output %d: relative L2 %g, max error %g of %g", o, rel, maxe, maxv);
            /* the convolution (z) takes the bf16 GEMM on AMX only: with vdpbf16ps alone conv.c keeps
             * its faster fp32 kernels, so there z is fp32's */
            if (o == 0 || kn_bgemm_amx())
                CHECK_MSG(rel > 1e-5, "output %d: relative L2 %g: the products did not run in bf16", o, rel);
            CHECK_MSG(tmb_same_tensor(ho[o], ho2[o]), "output %d: a second bf16 run differs", o);
        }
    }
    for (int o = 0; o < 2; o++) kiln_tensor_destroy(fo[o]), kiln_tensor_destroy(ho[o]), kiln_tensor_destroy(ho2[o]);
    kiln_session_destroy(f);
    kiln_session_destroy(h);
    kiln_session_options_destroy(of);
    kiln_session_options_destroy(oh);
    free(m);
}

/* Calls from several threads on one fresh bf16 session (the first ones make the kept weights at
 * once): every result equals the serial one bit for bit */
typedef struct par_ctx {
    kiln_session *s;
    kiln_tensor *want[2];
    int bad, failed;
} par_ctx;

static void *par_main(void *arg) {
    par_ctx *p = arg;
    for (int i = 0; i < 6; i++) {
        kiln_tensor *o[2] = {0};
        if (run_mixed(p->s, o) != KILN_OK) __atomic_add_fetch(&p->failed, 1, __ATOMIC_RELAXED);
        else if (p->want[0] && (!tmb_same_tensor(o[0], p->want[0]) || !tmb_same_tensor(o[1], p->want[1])))
            __atomic_add_fetch(&p->bad, 1, __ATOMIC_RELAXED);
        kiln_tensor_destroy(o[0]);
        kiln_tensor_destroy(o[1]);
    }
    return NULL;
}

/* AMX's convolution without im2col (conv_amx.c): Conv + residual Add + Relu (one FusedConv, its
 * epilogue) in a bf16 session against a double reference on the bf16-rounded input and weights,
 * over odd channel counts, output channels past a tile, batch 2, asymmetric pads, a non-square
 * kernel, dilation, planes wider than one task's columns, strides 2-4 (phase images; 1x1 kernels
 * too, odd sizes whose last columns no output reads) and without the bias or the residual. */
typedef struct amx_conv_case {
    int64_t N, C, M, H, W, KH, KW, pads[4], dh, dw;
    int64_t sh, sw;     /* 0: 1 */
    bool nobias, nores; /* a Conv without its bias input; no residual Add (Conv + Relu) */
} amx_conv_case;

static double amx_conv_case_error(const amx_conv_case *k) {
    const int64_t sh = k->sh ? k->sh : 1, sw = k->sw ? k->sw : 1;
    const int64_t OH = (k->H + k->pads[0] + k->pads[2] - k->dh * (k->KH - 1) - 1) / sh + 1;
    const int64_t OW = (k->W + k->pads[1] + k->pads[3] - k->dw * (k->KW - 1) - 1) / sw + 1;
    tmb b;
    tmb_init(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){k->N, k->C, k->H, k->W}, NULL);
    int z = k->nores ? -1 : tmb_input(&b, "z", KILN_DTYPE_FLOAT, 4, (int64_t[]){k->N, k->M, OH, OW}, NULL);
    int wv = tmb_const(&b, "w", 4, (int64_t[]){k->M, k->C, k->KH, k->KW}, 0.3f);
    int bv = tmb_const(&b, "b", 1, (int64_t[]){k->M}, 1.0f);
    const size_t nw = (size_t)(k->M * k->C * k->KH * k->KW);
    float *W = malloc(sizeof(float) * nw), *B = malloc(sizeof(float) * (size_t)k->M);
    memcpy(W, b.g->values[wv].constant->data, sizeof(float) * nw);
    memcpy(B, b.g->values[bv].constant->data, sizeof(float) * (size_t)k->M);
    int cv = tmb_value(&b, "c"), av = tmb_value(&b, "a"), y = tmb_value(&b, "y");
    int cn = tmb_node(&b, "Conv", (int[]){x, wv, bv}, k->nobias ? 2 : 3, cv);
    tmb_ints(&b, cn, "pads", k->pads, 4);
    tmb_ints(&b, cn, "dilations", (int64_t[]){k->dh, k->dw}, 2);
    tmb_ints(&b, cn, "strides", (int64_t[]){sh, sw}, 2);
    if (k->nores) {
        tmb_node(&b, "Relu", (int[]){cv}, 1, y);
    } else {
        tmb_node(&b, "Add", (int[]){cv, z}, 2, av);
        tmb_node(&b, "Relu", (int[]){av}, 1, y);
    }
    tmb_output(&b, y);
    size_t size;
    unsigned char *m = tmb_finish(&b, &size);
    double err = 1e9;
    const int64_t nx = k->N * k->C * k->H * k->W, ny = k->N * k->M * OH * OW;
    kiln_tensor *in[2] = {NULL, NULL}, *out[1] = {NULL};
    kiln_session *sess = NULL;
    kiln_session_options *o = opts_for("bf16");
    if (m && kiln_session_create_from_memory(m, size, NULL, o, &sess) == KILN_OK &&
        kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){k->N, k->C, k->H, k->W}, 4, &in[0]) == KILN_OK &&
        kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){k->N, k->M, OH, OW}, 4, &in[1]) == KILN_OK) {
        float *X = kiln_tensor_data(in[0]), *Z = kiln_tensor_data(in[1]);
        uint32_t seed = 5;
        for (int64_t i = 0; i < nx; i++) X[i] = tmb_rand(&seed);
        for (int64_t i = 0; i < ny; i++) Z[i] = tmb_rand(&seed);
        const char *names[2] = {"x", "z"};
        if (kiln_session_run(sess, names, in, k->nores ? 1 : 2, NULL, 1, out) == KILN_OK) {
            const float *Y = kiln_tensor_data(out[0]);
            err = 0;
            for (int64_t n = 0; n < k->N; n++)
                for (int64_t mo = 0; mo < k->M; mo++)
                    for (int64_t oh = 0; oh < OH; oh++)
                        for (int64_t ow = 0; ow < OW; ow++) {
                            double acc = k->nobias ? 0.0 : B[mo];
                            for (int64_t ci = 0; ci < k->C; ci++)
                                for (int64_t kh = 0; kh < k->KH; kh++)
                                    for (int64_t kw = 0; kw < k->KW; kw++) {
                                        const int64_t ih = oh * sh + kh * k->dh - k->pads[0];
                                        const int64_t iw = ow * sw + kw * k->dw - k->pads[1];
                                        if (ih < 0 || ih >= k->H || iw < 0 || iw >= k->W) continue;
                                        acc += (double)kn_bf16_round(X[((n * k->C + ci) * k->H + ih) * k->W + iw]) *
                                               (double)kn_bf16_round(W[((mo * k->C + ci) * k->KH + kh) * k->KW + kw]);
                                    }
                            const int64_t at = ((n * k->M + mo) * OH + oh) * OW + ow;
                            if (!k->nores) acc += Z[at];
                            const double ref = acc > 0 ? acc : 0;
                            const double d = fabs((double)Y[at] - ref) / (1.0 + fabs(ref));
                            if (!(d <= err)) err = isnan(d) ? 1e9 : d;
                        }
        }
    }
    kiln_tensor_destroy(in[0]);
    kiln_tensor_destroy(in[1]);
    kiln_tensor_destroy(out[0]);
    kiln_session_destroy(sess);
    kiln_session_options_destroy(o);
    free(m);
    free(W);
    free(B);
    return err;
}

KN_TEST(bf16_amx_convolution_against_reference) {
    NEED_BF16();
    if (!kn_bgemm_amx()) KN_SKIP("this CPU has no AMX (or the OS refused its tile state)");
    static const amx_conv_case cases[] = {
        {1, 64, 64, 14, 14, 3, 3, {1, 1, 1, 1}, 1, 1}, {2, 19, 40, 9, 13, 3, 3, {1, 1, 1, 1}, 1, 1},
        {1, 32, 17, 7, 30, 5, 3, {2, 0, 1, 2}, 1, 1},  {1, 48, 33, 12, 11, 3, 3, {2, 2, 2, 2}, 2, 2},
        {1, 16, 16, 40, 40, 3, 3, {0, 0, 0, 0}, 1, 1}, {1, 64, 96, 4, 4, 3, 3, {1, 1, 1, 1}, 1, 1},
        /* strides: ResNet's 3x3 and 1x1 stride-2 layers at small size, odd sizes and pads, stride 3
         * and 4 (the plain packing loop), a 2x2 stride-2 patch merge, stride with dilation */
        {1, 64, 48, 14, 14, 3, 3, {1, 1, 1, 1}, 1, 1, 2, 2},
        {2, 19, 40, 13, 11, 3, 3, {1, 0, 0, 1}, 1, 1, 2, 2, true, false},
        {1, 96, 70, 15, 15, 1, 1, {0, 0, 0, 0}, 1, 1, 2, 2},
        {1, 32, 33, 9, 10, 1, 1, {0, 0, 0, 0}, 1, 1, 2, 2, false, true},
        {1, 40, 20, 64, 40, 3, 3, {1, 1, 1, 1}, 1, 1, 2, 2, true, true},
        {1, 16, 64, 17, 19, 5, 3, {2, 1, 2, 1}, 1, 1, 3, 2},
        {1, 24, 17, 19, 23, 4, 4, {0, 1, 2, 3}, 1, 1, 4, 4},
        {1, 48, 32, 16, 16, 2, 2, {0, 0, 0, 0}, 1, 1, 2, 2},
        {1, 32, 32, 21, 21, 3, 3, {2, 2, 2, 2}, 2, 2, 2, 2},
        {1, 17, 18, 12, 9, 3, 2, {1, 1, 1, 1}, 3, 1, 2, 3},
        /* few channels, the kernel's columns folded into them: a ResNet stem (3 channels, 7x7, stride
         * 2, pads 3) at small size, odd sizes, a 4x4 stride-4 patch stem, stride 1, dilation, batch 2 */
        {1, 3, 64, 30, 30, 7, 7, {3, 3, 3, 3}, 1, 1, 2, 2},
        {2, 3, 20, 17, 23, 7, 7, {3, 2, 1, 3}, 1, 1, 2, 2, true, false},
        {1, 3, 96, 32, 28, 4, 4, {0, 0, 0, 0}, 1, 1, 4, 4, false, true},
        {1, 5, 17, 9, 41, 3, 3, {1, 1, 1, 1}, 1, 1, 1, 1},
        {1, 2, 33, 20, 20, 3, 7, {2, 3, 2, 3}, 2, 2, 1, 2},
        /* the folded pairs in the compact layout (fewer than 16: 11, 6, 8, 7 above; A tiles as many
         * pairs wide, B tiles as many rows) or, from 16 pairs on, in whole steps of 16: 5 x 7 = 35
         * channels, 18 pairs */
        {1, 5, 24, 15, 19, 7, 7, {3, 3, 3, 3}, 1, 1, 2, 2},
        /* 1x1 at stride 1: the GEMM on AMX with the residual and the Relu applied as its tiles store
         * C (rows first over all columns, and column panels first where B is over 1 MB), odd rows
         * and columns, batch 2, without the bias or the residual */
        {1, 64, 256, 14, 14, 1, 1, {0, 0, 0, 0}, 1, 1},
        {2, 40, 33, 9, 7, 1, 1, {0, 0, 0, 0}, 1, 1, 1, 1, true, false},
        {1, 48, 70, 11, 13, 1, 1, {0, 0, 0, 0}, 1, 1, 1, 1, false, true},
        {1, 512, 40, 48, 48, 1, 1, {0, 0, 0, 0}, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const amx_conv_case *k = &cases[i];
        const double err = amx_conv_case_error(k);
        CHECK_MSG(err < tol(k->C * k->KH * k->KW), "case %zu (C %lld M %lld %lldx%lld, kernel %lldx%lld): error %g", i,
                  (long long)k->C, (long long)k->M, (long long)k->H, (long long)k->W, (long long)k->KH,
                  (long long)k->KW, err);
    }
}

/* bf16 activations between convolutions (opt pass cpu_bf16_values; conv_amx.c's bf16 input and
 * output, the GEMM's bf16 B and C): chains of convolutions whose inner values the graph keeps in
 * bfloat16, run with the pass and without it (KILN_CPU_BF16_VALUES=0). Without activations=half (and
 * with KILN_CPU_BF16_BLOCKED=0) the outputs are the same bit for bit (every reader rounds its input to bf16 anyway, and Relu/Clip commute with the rounding),
 * the values were kept in bf16 (the session's graph), and the outputs are within a bf16 bound of a
 * double reference that rounds each convolution's input and weights to bf16. */
typedef struct chain_conv {
    int64_t M, K, stride, pad; /* output channels, kernel K x K */
    int act;                   /* 0 none, 1 Relu, 2 Clip(0, 6) */
    int input;                 /* -1: the model's input, else the output of conv `input` */
    int residual;              /* + 0: nothing, 1: the model's input, 2 + k: conv k's output */
    bool pool;                 /* then a MaxPool 3x3, stride 2, pads 1 (its output is the conv's value) */
} chain_conv;

/* y = MaxPool 3x3 stride 2 pads 1 of x (N x M planes of H x W) in double */
static void ref_pool(const double *x, int64_t planes, int64_t H, int64_t W, double *y, int64_t OH, int64_t OW) {
    for (int64_t p = 0; p < planes; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                double m = -INFINITY;
                for (int64_t kh = 0; kh < 3; kh++)
                    for (int64_t kw = 0; kw < 3; kw++) {
                        const int64_t ih = 2 * oh + kh - 1, iw = 2 * ow + kw - 1;
                        if (ih >= 0 && ih < H && iw >= 0 && iw < W && x[(p * H + ih) * W + iw] > m) m = x[(p * H + ih) * W + iw];
                    }
                y[(p * OH + oh) * OW + ow] = m;
            }
}

#define CHAIN_MAX 6
typedef struct chain_case {
    int64_t N, C, H, W;
    int n;
    chain_conv conv[CHAIN_MAX];
    int bf16_values; /* values the pass keeps in bf16 */
    bool half;       /* activations=half: the residual stream too (not exact: no bit-for-bit check) */
} chain_case;

/* y = act(conv(bf16(x), bf16(w)) + b (+ r)) in double, bf16 applied to x as read */
static void ref_conv(const double *x, int64_t N, int64_t C, int64_t H, int64_t W, const float *w, const float *bias,
                     const chain_conv *k, const float *res, double *y, int64_t OH, int64_t OW) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < k->M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double acc = bias[m];
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t kh = 0; kh < k->K; kh++)
                            for (int64_t kw = 0; kw < k->K; kw++) {
                                const int64_t ih = oh * k->stride + kh - k->pad, iw = ow * k->stride + kw - k->pad;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                acc += (double)kn_bf16_round((float)x[((n * C + c) * H + ih) * W + iw]) *
                                       (double)kn_bf16_round(w[((m * C + c) * k->K + kh) * k->K + kw]);
                            }
                    const int64_t at = ((n * k->M + m) * OH + oh) * OW + ow;
                    if (res) acc += res[at];
                    if (k->act) acc = acc > 0 ? acc : 0;
                    if (k->act == 2) acc = acc < 6 ? acc : 6;
                    y[at] = acc;
                }
}

static kiln_session_options *chain_opts(bool half) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_intra_op_threads(o, 2);
    const char *keys[2] = {"precision", "activations"}, *vals[2] = {"bf16", half ? "half" : "fp32"};
    kiln_session_options_append_provider(o, "cpu", keys, vals, 2);
    return o;
}

static void chain_check(const chain_case *k) {
    tmb b;
    tmb_init(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){k->N, k->C, k->H, k->W}, NULL);
    kn_tensor *t0 = NULL, *t6 = NULL;
    kn_tensor_new(KILN_DTYPE_FLOAT, 0, NULL, &t0);
    kn_tensor_new(KILN_DTYPE_FLOAT, 0, NULL, &t6);
    *(float *)t6->data = 6.0f;
    int lo = tmb_const_tensor(&b, "lo", t0), hi = tmb_const_tensor(&b, "hi", t6);
    int64_t C[CHAIN_MAX], H[CHAIN_MAX], W[CHAIN_MAX], CH[CHAIN_MAX], CW[CHAIN_MAX]; /* C*: the conv's own, before a pool */
    int out[CHAIN_MAX], wv[CHAIN_MAX], bv[CHAIN_MAX];
    for (int i = 0; i < k->n; i++) {
        const chain_conv *cv = &k->conv[i];
        const int in = cv->input < 0 ? x : out[cv->input];
        C[i] = cv->input < 0 ? k->C : k->conv[cv->input].M;
        const int64_t h = cv->input < 0 ? k->H : H[cv->input], w = cv->input < 0 ? k->W : W[cv->input];
        H[i] = (h + 2 * cv->pad - cv->K) / cv->stride + 1;
        W[i] = (w + 2 * cv->pad - cv->K) / cv->stride + 1;
        CH[i] = H[i];
        CW[i] = W[i];
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        wv[i] = tmb_const(&b, name, 4, (int64_t[]){cv->M, C[i], cv->K, cv->K}, 1.5f / sqrtf((float)(C[i] * cv->K * cv->K)));
        snprintf(name, sizeof name, "b%d", i);
        bv[i] = tmb_const(&b, name, 1, (int64_t[]){cv->M}, 0.2f);
        snprintf(name, sizeof name, "c%d", i);
        int c = tmb_value(&b, name);
        int cn = tmb_node(&b, "Conv", (int[]){in, wv[i], bv[i]}, 3, c);
        tmb_ints(&b, cn, "pads", (int64_t[]){cv->pad, cv->pad, cv->pad, cv->pad}, 4);
        tmb_ints(&b, cn, "strides", (int64_t[]){cv->stride, cv->stride}, 2);
        if (cv->residual) {
            snprintf(name, sizeof name, "a%d", i);
            int a = tmb_value(&b, name);
            tmb_node(&b, "Add", (int[]){c, cv->residual == 1 ? x : out[cv->residual - 2]}, 2, a);
            c = a;
        }
        out[i] = c;
        if (cv->act) {
            snprintf(name, sizeof name, "r%d", i);
            out[i] = tmb_value(&b, name);
            if (cv->act == 1) tmb_node(&b, "Relu", (int[]){c}, 1, out[i]);
            else tmb_node(&b, "Clip", (int[]){c, lo, hi}, 3, out[i]);
        }
        if (cv->pool) {
            snprintf(name, sizeof name, "p%d", i);
            const int pv = tmb_value(&b, name);
            const int pn = tmb_node(&b, "MaxPool", (int[]){out[i]}, 1, pv);
            tmb_ints(&b, pn, "kernel_shape", (int64_t[]){3, 3}, 2);
            tmb_ints(&b, pn, "strides", (int64_t[]){2, 2}, 2);
            tmb_ints(&b, pn, "pads", (int64_t[]){1, 1, 1, 1}, 4);
            out[i] = pv;
            H[i] = (H[i] - 1) / 2 + 1;
            W[i] = (W[i] - 1) / 2 + 1;
        }
    }
    /* the outputs: the values no convolution reads */
    bool read[CHAIN_MAX] = {false};
    for (int i = 0; i < k->n; i++) {
        if (k->conv[i].input >= 0) read[k->conv[i].input] = true;
        if (k->conv[i].residual >= 2) read[k->conv[i].residual - 2] = true;
    }
    int n_out = 0, outs[CHAIN_MAX];
    for (int i = 0; i < k->n; i++)
        if (!read[i]) {
            tmb_output(&b, out[i]);
            outs[n_out++] = i;
        }
    float *wts[CHAIN_MAX], *bs[CHAIN_MAX];
    for (int i = 0; i < k->n; i++) {
        wts[i] = b.g->values[wv[i]].constant->data;
        bs[i] = b.g->values[bv[i]].constant->data;
    }
    /* the reference before the model's constants go with the builder */
    const int64_t nx = k->N * k->C * k->H * k->W;
    float *X = malloc(sizeof(float) * (size_t)nx);
    double *xd = malloc(sizeof(double) * (size_t)nx), *ref[CHAIN_MAX] = {NULL};
    float *rf[CHAIN_MAX] = {NULL}; /* conv k's reference output as float, for a residual */
    uint32_t seed = 11;
    for (int64_t i = 0; i < nx; i++) xd[i] = X[i] = tmb_rand(&seed);
    for (int i = 0; i < k->n; i++) {
        const chain_conv *cv = &k->conv[i];
        ref[i] = malloc(sizeof(double) * (size_t)(k->N * cv->M * CH[i] * CW[i]));
        const double *in = cv->input < 0 ? xd : ref[cv->input];
        ref_conv(in, k->N, C[i], cv->input < 0 ? k->H : H[cv->input], cv->input < 0 ? k->W : W[cv->input], wts[i],
                 bs[i], cv, cv->residual == 1 ? X : cv->residual >= 2 ? rf[cv->residual - 2] : NULL, ref[i], CH[i], CW[i]);
        if (cv->pool) {
            double *pooled = malloc(sizeof(double) * (size_t)(k->N * cv->M * H[i] * W[i]));
            ref_pool(ref[i], k->N * cv->M, CH[i], CW[i], pooled, H[i], W[i]);
            free(ref[i]);
            ref[i] = pooled;
        }
        const int64_t ny = k->N * cv->M * H[i] * W[i];
        rf[i] = malloc(sizeof(float) * (size_t)ny);
        for (int64_t e = 0; e < ny; e++) rf[i][e] = (float)ref[i][e];
    }
    size_t size;
    unsigned char *m = tmb_finish(&b, &size);
    kiln_tensor *got[2][CHAIN_MAX] = {{NULL}};
    int kept = -1;
    for (int pass = 0; pass < 2 && m; pass++) {
        setenv("KILN_CPU_BF16_VALUES", pass ? "1" : "0", 1);
        /* plain bf16 with activations=fp32 spelled out is exact, blocked values on (without it,
         * it keeps the block outputs in bf16 there, as activations=half: test_cpu_bf16_blocked.c) */
        kiln_session_options *o = chain_opts(k->half);
        kiln_session *s = NULL;
        CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, o, &s), KILN_OK);
        kiln_session_options_destroy(o);
        if (!s) break;
        int n16 = 0;
        for (int v = 0; v < s->model->graph->n_values; v++) n16 += s->model->graph->values[v].type.dtype == KILN_DTYPE_BFLOAT16;
        if (pass) kept = n16;
        else CHECK_MSG(n16 == 0, "values in bf16 with the pass off: %d", n16);
        kiln_tensor *in = NULL;
        kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){k->N, k->C, k->H, k->W}, 4, &in);
        memcpy(kiln_tensor_data(in), X, sizeof(float) * (size_t)nx);
        const char *names[1] = {"x"};
        CHECK_STATUS(kiln_session_run(s, names, &in, 1, NULL, n_out, got[pass]), KILN_OK);
        kiln_tensor_destroy(in);
        kiln_session_destroy(s);
    }
    unsetenv("KILN_CPU_BF16_VALUES");
    CHECK_MSG(kept == k->bf16_values, "values kept in bf16: %d, expected %d", kept, k->bf16_values);
    for (int o = 0; o < n_out; o++) {
        if (!k->half) CHECK_MSG(tmb_same_tensor(got[0][o], got[1][o]), "output %d differs with the values in bf16", o);
        if (!got[1][o]) continue;
        const float *y = kiln_tensor_data(got[1][o]);
        const double *r = ref[outs[o]];
        double num = 0, den = 0;
        for (int64_t i = 0; i < (int64_t)(kiln_tensor_bytes(got[1][o]) / sizeof(float)); i++) {
            num += ((double)y[i] - r[i]) * ((double)y[i] - r[i]);
            den += r[i] * r[i];
        }
        const double rel = sqrt(num / (den > 0 ? den : 1));
        CHECK_MSG(rel < 4e-3, "output %d: relative L2 error %g against the double reference", o, rel);
    }
    for (int p = 0; p < 2; p++)
        for (int o = 0; o < CHAIN_MAX; o++) kiln_tensor_destroy(got[p][o]);
    for (int i = 0; i < k->n; i++) {
        free(ref[i]);
        free(rf[i]);
    }
    free(X);
    free(xd);
    free(m);
}

KN_TEST(bf16_values_between_convolutions) {
    NEED_BF16();
    if (!kn_bgemm_amx()) KN_SKIP("this CPU has no AMX (or the OS refused its tile state)");
    static const chain_case cases[] = {
        /* a ResNet bottleneck at small size, batch 2: 1x1 (the GEMM's bf16 C, rows first) -> 3x3 (bf16 in
         * and out) -> 1x1 (bf16 B) + the block's input + Relu */
        {2, 64, 20, 20, 3, {{32, 1, 1, 0, 1, -1, false}, {32, 3, 1, 1, 1, 0, false}, {64, 1, 1, 0, 1, 1, true}}, 2},
        /* Clip, odd sizes, a value read by two convolutions (3x3 stride 2 and stride 3) */
        {1, 48, 23, 21, 4,
         {{40, 1, 1, 0, 2, -1, false}, {36, 3, 2, 1, 1, 0, false}, {50, 1, 1, 0, 2, 1, false}, {20, 3, 3, 1, 1, 0, false}},
         2},
        /* 1x1 kernels with pads (neither the AMX convolution's shape nor the GEMM's): conv.c converts
         * the bf16 values in and out on its other routes */
        {1, 24, 10, 10, 3, {{32, 1, 1, 1, 1, -1, false}, {32, 1, 1, 1, 1, 0, false}, {16, 3, 1, 1, 1, 1, false}}, 2},
        /* read by a plain Conv (nothing fused into it): the pass makes it a FusedConv without
         * activation, which reads the value in bf16 */
        {1, 32, 12, 12, 3, {{32, 1, 1, 0, 1, -1, false}, {32, 3, 1, 1, 0, 0, false}, {32, 3, 1, 1, 1, 0, false}}, 1},
        /* a ResNet stage's end: the last block's output (written with a residual and Relu) read as X
         * only, by the next block's 1x1 and by a plain 1x1 stride-2 Conv (the downsample, made a
         * FusedConv), whose output is the residual of the block's last 1x1: kept in bf16 exactly
         * (every reader rounds it anyway); the downsample's output (read as a residual) stays fp32 */
        {1, 64, 14, 14, 6,
         {{32, 1, 1, 0, 1, -1, 0}, {64, 1, 1, 0, 1, 0, 1}, {32, 1, 1, 0, 1, 1, 0}, {128, 1, 2, 0, 0, 1, 0},
          {32, 3, 2, 1, 1, 2, 0}, {128, 1, 1, 0, 1, 4, 5}},
         4, false},
        /* the same with activations=half: the downsample's output too */
        {1, 64, 14, 14, 6,
         {{32, 1, 1, 0, 1, -1, 0}, {64, 1, 1, 0, 1, 0, 1}, {32, 1, 1, 0, 1, 1, 0}, {128, 1, 2, 0, 0, 1, 0},
          {32, 3, 2, 1, 1, 2, 0}, {128, 1, 1, 0, 1, 4, 5}},
         5, true},
        /* B over 1 MB (the GEMM's column panels outer, C stored 256 columns at a time): 512 -> 40 on
         * 47x47, then 3x3 and 1x1 */
        {1, 512, 47, 47, 3, {{40, 1, 1, 0, 1, -1, false}, {40, 3, 1, 1, 1, 0, false}, {64, 1, 1, 0, 1, 1, false}}, 2},
        /* activations=half, the residual stream in bf16: two bottlenecks (the first block's output,
         * written with an fp32 residual, read as the second's X and Z; the second's written with a
         * bf16 residual and read by a 1x1), batch 2 */
        {2, 64, 14, 14, 6,
         {{32, 1, 1, 0, 1, -1, 0}, {32, 3, 1, 1, 1, 0, 0}, {64, 1, 1, 0, 1, 1, 1}, {32, 1, 1, 0, 1, 2, 0},
          {64, 1, 1, 0, 1, 3, 4}, {16, 1, 1, 0, 1, 4, 0}},
         5, true},
        /* the same without activations=half: the block outputs read as a residual stay fp32; the
         * second block's, read only as X by the last 1x1, is kept in bf16 (rounded after its
         * residual and Relu, as its reader would round it) */
        {2, 64, 14, 14, 6,
         {{32, 1, 1, 0, 1, -1, 0}, {32, 3, 1, 1, 1, 0, 0}, {64, 1, 1, 0, 1, 1, 1}, {32, 1, 1, 0, 1, 2, 0},
          {64, 1, 1, 0, 1, 3, 4}, {16, 1, 1, 0, 1, 4, 0}},
         4, false},
        /* a bf16 residual read by 3x3 convolutions: one whose output is kept in bf16, one whose
         * output is fp32; the AMX convolution adds the residual (and the Relu, and rounds) as it
         * stores each block of its tiles */
        {1, 32, 12, 12, 5,
         {{32, 1, 1, 0, 1, -1, 0}, {32, 1, 1, 0, 1, 0, 0}, {32, 3, 1, 1, 1, 1, 2}, {24, 1, 1, 0, 1, 2, 0},
          {32, 3, 1, 1, 1, 1, 4}},
         3, true},
        /* the same with fp32 residuals (without activations=half the values read as a residual stay
         * fp32): a 3x3 whose output is kept in bf16 (read only as X) and one whose output is fp32,
         * both adding the first 1x1's fp32 output as they store; the outputs bit for bit as with
         * the values in fp32 (where the fp32 output's residual is the epilogue's), planes wide enough
         * for whole 32-column rows of a block */
        {1, 32, 37, 45, 5,
         {{32, 1, 1, 0, 1, -1, 0}, {32, 1, 1, 0, 1, 0, 0}, {32, 3, 1, 1, 1, 1, 2}, {24, 1, 1, 0, 1, 2, 0},
          {32, 3, 1, 1, 1, 1, 2}},
         2, false},
        /* a ResNet stem: a few-channel 7x7 stride-2 convolution (its kernel's columns folded into the
         * channels) + Relu, its MaxPool 3x3 stride 2 (odd planes), read by a 1x1 and by a plain 1x1
         * Conv (made a FusedConv): the stem's output and the pool's are kept in bf16 (the pool runs
         * on bf16 planes, by bands of 16 output rows: 19 here), and the 1x1's; batch 2 */
        {2, 3, 75, 39, 4,
         {{64, 7, 2, 3, 1, -1, 0, true}, {32, 1, 1, 0, 1, 0, 0}, {64, 1, 1, 0, 0, 0, 0}, {64, 3, 1, 1, 1, 1, 0}}, 3},
        /* a 4x4 stride-4 patch stem (3 channels, folded) into bf16 read by a 3x3: the folded
         * convolution into bf16 runs in bands of output rows (conv_amx.c's band_range; 17 rows: 9 and
         * 8 at the test's 2 threads), each band packing the rows its taps read */
        {1, 3, 71, 50, 2, {{32, 4, 4, 0, 1, -1, 0}, {32, 3, 1, 1, 1, 0, 0}}, 1},
        /* B over 1 MB with a bf16 residual, C in bf16 (the GEMM's panels outer) */
        {1, 512, 47, 47, 4,
         {{256, 1, 1, 0, 1, -1, 0}, {256, 1, 1, 0, 1, 0, 0}, {256, 1, 1, 0, 1, 1, 2}, {16, 1, 1, 0, 1, 2, 0}}, 3, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) chain_check(&cases[i]);
}

KN_TEST(bf16_session_concurrent_calls) {
    NEED_BF16();
    size_t size;
    unsigned char *m = mixed_model(&size);
    if (!m) return;
    kiln_session_options *o = opts_for("bf16");
    kiln_session_options_set_max_concurrent_runs(o, 4);
    kiln_session *ref = NULL, *s = NULL;
    CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, o, &ref), KILN_OK);
    CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, o, &s), KILN_OK);
    par_ctx p = {s, {NULL, NULL}, 0, 0};
    if (ref && s && run_mixed(ref, p.want) == KILN_OK) {
        pthread_t t[4];
        for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, par_main, &p) == 0);
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
        CHECK_MSG(p.failed == 0 && p.bad == 0, "%d calls failed, %d differ from the serial result", p.failed, p.bad);
    }
    kiln_tensor_destroy(p.want[0]);
    kiln_tensor_destroy(p.want[1]);
    kiln_session_destroy(ref);
    kiln_session_destroy(s);
    kiln_session_options_destroy(o);
    free(m);
}

/* precision=fp32 spelled out runs exactly as the default */
KN_TEST(bf16_session_fp32_option_is_default) {
    size_t size;
    unsigned char *m = mixed_model(&size);
    if (!m) return;
    kiln_session *f = NULL, *g = NULL;
    kiln_session_options *of = opts_for(NULL), *og = opts_for("fp32");
    CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, of, &f), KILN_OK);
    CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, og, &g), KILN_OK);
    kiln_tensor *fo[2] = {0}, *go[2] = {0};
    if (f && g) {
        CHECK_STATUS(run_mixed(f, fo), KILN_OK);
        CHECK_STATUS(run_mixed(g, go), KILN_OK);
        for (int o = 0; o < 2; o++) CHECK(tmb_same_tensor(fo[o], go[o]));
    }
    for (int o = 0; o < 2; o++) kiln_tensor_destroy(fo[o]), kiln_tensor_destroy(go[o]);
    kiln_session_destroy(f);
    kiln_session_destroy(g);
    kiln_session_options_destroy(of);
    kiln_session_options_destroy(og);
    free(m);
}

/* A CPU without AVX512_BF16 (forced by KILN_CPU_NO_BF16): the session is refused with the reason;
 * fp16 / tf32 are not CPU precisions */
KN_TEST(bf16_session_refused_without_the_instructions) {
    size_t size;
    unsigned char *m = mixed_model(&size);
    if (!m) return;
    setenv("KILN_CPU_NO_BF16", "1", 1);
    kiln_session *s = NULL;
    kiln_session_options *o = opts_for("bf16");
    kiln_status st = kiln_session_create_from_memory(m, size, NULL, o, &s);
    CHECK(st != KILN_OK && s == NULL);
    CHECK_ERROR_HAS("AVX512_BF16");
    kiln_session_options_destroy(o);
    unsetenv("KILN_CPU_NO_BF16");
    o = opts_for("fp16");
    st = kiln_session_create_from_memory(m, size, NULL, o, &s);
    CHECK(st != KILN_OK && s == NULL);
    CHECK_ERROR_HAS("not a CPU precision");
    kiln_session_options_destroy(o);
    kiln_session_destroy(s);
    free(m);
}

/* The option is part of the compiled-cache key: a bf16 compile never loads as fp32 or back */
KN_TEST(bf16_option_in_cache_key) {
    size_t size;
    unsigned char *m = mixed_model(&size);
    if (!m) return;
    kiln_session_options *of = opts_for(NULL), *oh = opts_for("bf16"), *o32 = opts_for("fp32");
    kn_cache_key kf, kh, k32;
    CHECK_STATUS(kn_cache_key_for_memory(m, size, NULL, of, &kf), KILN_OK);
    CHECK_STATUS(kn_cache_key_for_memory(m, size, NULL, oh, &kh), KILN_OK);
    CHECK_STATUS(kn_cache_key_for_memory(m, size, NULL, o32, &k32), KILN_OK);
    CHECK(strcmp(kf.name, kh.name) != 0);
    CHECK(strcmp(k32.name, kh.name) != 0);
    const char *t = kn_cache_key_get(&kh, "options");
    CHECK_MSG(t && strstr(t, "cpu{precision=bf16}"), "options field: %s", t ? t : "(none)");
    kn_cache_key_free(&kf);
    kn_cache_key_free(&kh);
    kn_cache_key_free(&k32);
    kiln_session_options_destroy(of);
    kiln_session_options_destroy(oh);
    kiln_session_options_destroy(o32);
    free(m);
}

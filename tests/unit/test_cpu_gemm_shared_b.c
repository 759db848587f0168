/* The float GEMM's tiles of rows reading one shared packing of B (sgemm.c, gemm_b_shared): where a
 * product in the usual orientation splits only its rows among the threads, run_job packs op(B)
 * once (pack_b_shared_range) and every tile reads it, where each tile packed all of B again (a 3x3
 * 512 -> 512 convolution on 4x4 packed its im2col 8 times at 2 threads). Through kn_sgemm_run on
 * pools of 1, 2 and 3 threads: B from a packing callback (a convolution's im2col) with the weights
 * prepacked, plain B with A plain or prepacked (the rows-first order where K is one slice), B
 * transposed (not shared); odd rows, columns past the panels, K with a short last slice, two
 * products. Each C against the definition in double, the padding between rows untouched, and the
 * same bits at every thread count. The plan is checked first: rows only, several tiles. */
#include "backend/cpu/sgemm.h"
#include "test_model_builder.h"
#include "unit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int sb_threads[3] = {1, 2, 3};

/* ctx: an array of per-product (B, ldb); B's rows [k0, +kc) and columns [n0, +nc) of product op
 * into dst as NR-column panels (kc rows of NR values each), zero past column nc */
typedef struct sb_plain {
    const float *B;
    int64_t ldb;
} sb_plain;

static void sb_pack(const void *ctx, int64_t op, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
    const sb_plain *pc = (const sb_plain *)ctx + op;
    const int nr = kn_sgemm_nr();
    for (int64_t j0 = 0; j0 < nc; j0 += nr)
        for (int64_t k = 0; k < kc; k++)
            for (int j = 0; j < nr; j++)
                dst[j0 * kc + k * nr + j] = j0 + j < nc ? pc->B[(k0 + k) * pc->ldb + n0 + j0 + j] : 0.0f;
}

enum { SB_CONV, SB_PLAIN, SB_PLAIN_APK, SB_TRANS_B };

KN_TEST(cpu_sgemm_rows_share_packed_b) {
    /* count, M, N, K, mode, whether the rows split with B shared at 2 and 3 threads */
    static const int64_t cases[][6] = {
        {1, 512, 16, 4608, SB_CONV, 1},    /* 3x3 512 -> 512 on 4x4 */
        {1, 97, 9, 1000, SB_CONV, 1},      /* rows past the panels, 9 of 16 columns, short last slice */
        {2, 2400, 13, 520, SB_CONV, 1},   /* two products, K = 2 slices + 8 */
        /* plain B (and transposed, below): 70 columns are 4 panels and 6 on AVX2, 2 and 6 on AVX-512;
         * K small enough that neither ISA transposes the product (kn_sgemm_swaps) */
        {1, 600, 70, 200, SB_PLAIN, 1},
        {1, 300, 40, 200, SB_PLAIN_APK, 1}, /* A prepacked, K one slice: rows first */
        {1, 301, 21, 777, SB_PLAIN_APK, 1}, /* A prepacked, K deeper: the blocked order */
        {1, 600, 70, 200, SB_TRANS_B, 0},  /* B transposed: each tile packs its own */
    };
    kn_threadpool *pools[3] = {NULL, NULL, NULL};
    for (int t = 1; t < 3; t++) CHECK_STATUS(kn_threadpool_create(sb_threads[t], &pools[t]), KILN_OK);
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++) {
        const int64_t cnt = cases[s][0], M = cases[s][1], N = cases[s][2], K = cases[s][3];
        const int mode = (int)cases[s][4];
        const bool tb = mode == SB_TRANS_B;
        const int64_t lda = K + 3, ldb = (tb ? K : N) + 5, ldc = N + 7, brows = tb ? N : K;
        uint32_t seed = 501u + (uint32_t)s;
        float *A = malloc(sizeof(float) * (size_t)(cnt * M * lda)), *B = malloc(sizeof(float) * (size_t)(cnt * brows * ldb));
        float *C0 = malloc(sizeof(float) * (size_t)(cnt * M * ldc)), *C = malloc(sizeof(float) * (size_t)(cnt * M * ldc));
        float *first = malloc(sizeof(float) * (size_t)(cnt * M * ldc)), *bias = malloc(sizeof(float) * (size_t)M);
        float *AP = malloc(sizeof(float) * kn_sgemm_packed_a_floats(M, K) * (size_t)cnt);
        double *R = malloc(sizeof(double) * (size_t)(cnt * M * N));
        for (int64_t i = 0; i < cnt * M * lda; i++) A[i] = tmb_rand(&seed);
        for (int64_t i = 0; i < cnt * brows * ldb; i++) B[i] = tmb_rand(&seed);
        for (int64_t i = 0; i < M; i++) bias[i] = tmb_rand(&seed);
        for (int64_t i = 0; i < cnt * M * ldc; i++) C0[i] = tmb_rand(&seed);
        const float beta = mode == SB_PLAIN ? 0.5f : 0.0f;
        const bool relu = mode == SB_CONV;
        for (int64_t q = 0; q < cnt; q++)
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double acc = 0;
                    for (int64_t k = 0; k < K; k++)
                        acc += (double)A[(q * M + i) * lda + k] *
                               (double)(tb ? B[(q * brows + j) * ldb + k] : B[(q * brows + k) * ldb + j]);
                    acc += (double)bias[i] + (double)beta * (double)C0[(q * M + i) * ldc + j];
                    R[(q * M + i) * N + j] = relu ? fmax(acc, 0.0) : acc;
                }
        const float *ap[2], *bp[2], *apk[2], *rb[2] = {bias, bias};
        float *cp[2];
        sb_plain ctx[2];
        for (int64_t q = 0; q < cnt; q++) {
            ap[q] = A + q * M * lda, bp[q] = B + q * brows * ldb, cp[q] = C + q * M * ldc;
            apk[q] = AP + (size_t)q * kn_sgemm_packed_a_floats(M, K);
            kn_sgemm_pack_a(ap[q], lda, false, M, K, (float *)apk[q]);
            ctx[q] = (sb_plain){bp[q], ldb};
        }
        for (int t = 0; t < 3; t++) {
            memcpy(C, C0, sizeof(float) * (size_t)(cnt * M * ldc));
            kn_sgemm_batch g = {.count = cnt, .M = M, .N = N, .K = K, .trans_b = tb, .alpha = 1.0f, .beta = beta,
                                .a = ap, .lda = lda, .b = bp, .ldb = ldb, .c = cp, .ldc = ldc, .row_bias = rb};
            if (mode == SB_CONV) {
                /* the convolution's way: weights prepacked, the im2col by a callback, a Relu */
                g.a_packed = apk;
                g.b = NULL;
                g.pack_b = sb_pack;
                g.pack_ctx = ctx;
                g.clamp = true;
                g.clamp_lo = 0.0f;
                g.clamp_hi = INFINITY;
            } else if (mode == SB_PLAIN_APK) {
                g.a_packed = apk;
            }
            CHECK_MSG(!kn_sgemm_swaps(M, N, K) || g.a_packed, "case %zu runs transposed: not this test's path", s);
            int64_t tm, tn, kp;
            kn_sgemm_tasks(&g, sb_threads[t], &tm, &tn, &kp);
            if (sb_threads[t] > 1 && cases[s][5])
                CHECK_MSG(tn == 1 && tm > 1, "case %zu (%lldx%lldx%lld) at %d threads: %lld x %lld tiles, not rows only",
                          s, (long long)M, (long long)N, (long long)K, sb_threads[t], (long long)tm, (long long)tn);
            CHECK_STATUS(kn_sgemm_run(pools[t], &g), KILN_OK);
            double err = 0;
            for (int64_t q = 0; q < cnt; q++)
                for (int64_t i = 0; i < M; i++) {
                    for (int64_t j = 0; j < N; j++) {
                        const double r = R[(q * M + i) * N + j];
                        const double d = fabs((double)C[(q * M + i) * ldc + j] - r) / (1.0 + fabs(r));
                        if (!(d <= err)) err = isnan(d) ? 1e9 : d;
                    }
                    for (int64_t j = N; j < ldc; j++) /* the padding between rows is untouched */
                        if (C[(q * M + i) * ldc + j] != C0[(q * M + i) * ldc + j]) err = 1e9;
                }
            CHECK_MSG(err < 1e-5 + 2e-7 * (double)K, "case %zu (%lld x %lldx%lldx%lld, mode %d), %d threads: error %g", s,
                      (long long)cnt, (long long)M, (long long)N, (long long)K, mode, sb_threads[t], err);
            if (t == 0) memcpy(first, C, sizeof(float) * (size_t)(cnt * M * ldc));
            else
                CHECK_MSG(!memcmp(first, C, sizeof(float) * (size_t)(cnt * M * ldc)),
                          "case %zu: %d threads' C differs from 1 thread's", s, sb_threads[t]);
        }
        free(A), free(B), free(C0), free(C), free(first), free(bias), free(AP), free(R);
    }
    for (int t = 1; t < 3; t++) kn_threadpool_destroy(pools[t]);
}

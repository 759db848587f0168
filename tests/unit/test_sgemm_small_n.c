/* The float GEMM's transposed path on few columns (kn_sgemm_swaps: a convolution's 7x7, 14x14 or
 * smaller output plane, N = 1..70), which on AVX-512 runs two panels of output channels a call
 * (sgemm.c ukr_sw, calls of at most 6 positions) and reads a plain op(B) in place: every column
 * count 1..70 (tails of the position calls, of the 32-position panels, the pair path's threshold),
 * output channels past the pairs and the panels (M 64, 96, 200: a last pair of 40 channels, a last
 * single panel), depths past a slice of KC and the micro-kernel's parts (K 1, 7, 130, 300; 2100
 * split along K), op(B) plain with a row stride past N, or from a packing callback (the im2col), op(A)^T
 * prepacked or packed per chunk, alpha, beta, a row bias and a clamp, on 1, 2 and 3 threads (tiles
 * of rows, of columns: in-place reads from a column offset), each element against the definition in
 * double. */
#include "backend/cpu/sgemm.h"
#include "test_model_builder.h"
#include "test_pack_b.h"
#include "unit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One product C = alpha op(A) op(B) + beta C + bias (clamped to [0, 3] when clamp), op(A) = A
 * (M x K, row stride K + 1), op(B) = B (K x N, row stride N + 3): the largest relative error over C,
 * 1e9 where the padding between C's rows changed. */
static double sn_run(kn_threadpool *pool, int64_t M, int64_t N, int64_t K, bool at_packed, bool callback, float alpha,
                     float beta, bool clamp, uint32_t seed) {
    const int64_t lda = K + 1, ldb = N + 3, ldc = N + 2;
    float *A = malloc(sizeof(float) * (size_t)(M * lda)), *B = malloc(sizeof(float) * (size_t)(K * ldb));
    float *C0 = malloc(sizeof(float) * (size_t)(M * ldc)), *C = malloc(sizeof(float) * (size_t)(M * ldc));
    float *bias = malloc(sizeof(float) * (size_t)M), *AT = malloc(sizeof(float) * kn_sgemm_packed_b_floats(M, K));
    for (int64_t i = 0; i < M * lda; i++) A[i] = tmb_rand(&seed);
    for (int64_t i = 0; i < K * ldb; i++) B[i] = tmb_rand(&seed);
    for (int64_t i = 0; i < M; i++) bias[i] = tmb_rand(&seed);
    for (int64_t i = 0; i < M * ldc; i++) C0[i] = tmb_rand(&seed);
    memcpy(C, C0, sizeof(float) * (size_t)(M * ldc));
    kn_sgemm_pack_b_full(A, lda, true, M, K, AT);
    const float *ap[1] = {A}, *bp[1] = {B}, *atp[1] = {AT}, *rb[1] = {bias};
    float *cp[1] = {C};
    tpb_plain ppc = {B, ldb};
    kn_sgemm_batch g = {.count = 1, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta, .a = ap, .lda = lda,
                        .b = bp, .ldb = ldb, .c = cp, .ldc = ldc, .row_bias = rb};
    if (at_packed) g.at_packed = atp;
    if (callback) {
        g.b = NULL;
        g.pack_b = tpb_pack_plain;
        g.pack_ctx = &ppc;
    }
    if (clamp) {
        g.clamp = true;
        g.clamp_lo = 0.0f;
        g.clamp_hi = 3.0f;
    }
    double err = kn_sgemm_run(pool, &g) == KILN_OK ? 0 : 1e9;
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) acc += (double)A[i * lda + k] * (double)B[k * ldb + j];
            double r = (double)alpha * acc + (double)beta * (double)C0[i * ldc + j] + (double)bias[i];
            if (clamp) r = fmin(3.0, fmax(0.0, r));
            const double d = fabs((double)C[i * ldc + j] - r) / (1.0 + fabs(r));
            if (!(d <= err)) err = isnan(d) ? 1e9 : d;
        }
        for (int64_t j = N; j < ldc; j++)
            if (C[i * ldc + j] != C0[i * ldc + j]) err = 1e9;
    }
    free(A), free(B), free(C0), free(C), free(bias), free(AT);
    return err;
}

static double sn_tol(int64_t K) { return 2e-6 + 4e-7 * (double)K; }

KN_TEST(cpu_sgemm_small_n_transposed_matches_definition) {
    setenv("KILN_GEMM_SWAP", "1", 1); /* every shape transposed, whatever the ISA's rule */
    kn_threadpool *pools[3] = {NULL, NULL, NULL};
    for (int t = 1; t < 3; t++) CHECK_STATUS(kn_threadpool_create(t + 1, &pools[t]), KILN_OK);
    int cases = 0;
    /* every column count, the two main orientations of the operands, 1 and 2 threads */
    for (int64_t N = 1; N <= 70; N++)
        for (int v = 0; v < 2; v++) {
            const int64_t M = v ? 200 : 96, K = v ? 130 : 300;
            const int t = (int)(N % 2);
            const double e = sn_run(pools[t], M, N, K, v == 0, false, 1.0f, v ? 0.5f : 0.0f, v == 1, 11u + (uint32_t)N);
            CHECK_MSG(e < sn_tol(K), "M %lld N %lld K %lld variant %d, %d threads: error %g", (long long)M, (long long)N,
                      (long long)K, v, t + 1, e);
            cases++;
        }
    /* the other operand sources, depths, alpha, threads */
    static const int64_t shapes[][3] = {
        {64, 49, 300}, {160, 49, 960}, {200, 49, 7}, {96, 25, 1}, {64, 22, 130}, {96, 21, 300},
        {256, 36, 512}, {200, 70, 300}, {96, 24, 2100}, {512, 7, 64}, {64, 64, 257},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int v = 0; v < 4; v++)
            for (int t = 0; t < 3; t++) {
                const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                const bool at = v & 1, cb = v & 2;
                const double e = sn_run(pools[t], M, N, K, at, cb, v == 3 ? -0.75f : 1.0f, v == 2 ? 1.0f : 0.0f, v == 1,
                                        101u + (uint32_t)(s * 16 + (size_t)v * 4 + (size_t)t));
                CHECK_MSG(e < sn_tol(K), "M %lld N %lld K %lld at_packed %d callback %d, %d threads: error %g",
                          (long long)M, (long long)N, (long long)K, (int)at, (int)cb, t + 1, e);
                cases++;
            }
    CHECK(cases > 200);
    unsetenv("KILN_GEMM_SWAP");
    for (int t = 1; t < 3; t++) kn_threadpool_destroy(pools[t]);
}

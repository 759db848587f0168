/* Products of a few rows by a prepacked B (a decoder's or classifier's MatMul/Gemm: 4 x 768 by
 * 768 x 768) split into column tiles over several threads, against a double-precision loop:
 * where A is one panel of rows each tile packs those rows itself (kn_sgemm_run's run_job), where it
 * is more than one panel they are packed once for all the tiles. Rows around the panel heights of
 * every target (4, 6, 12), columns over many panels and a partial last one, K over several slices,
 * B transposed or not, 1, 2 and 3 threads (one tile, two, three or more; 2 x 768 x 256, a GRU step
 * at batch 2, split at 2 threads though under 1 MFLOP). */
#include "backend/cpu/sgemm.h"
#include "unit.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static uint32_t few_rows_rng = 4242;
static float few_rows_rand(void) {
    few_rows_rng = few_rows_rng * 1664525u + 1013904223u;
    return (float)((few_rows_rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

KN_TEST(sgemm_few_rows_prepacked_b_column_tiles) {
    static const int64_t shapes[][3] = {{1, 700, 800},  {3, 770, 800},  {4, 768, 768}, {5, 1000, 300},
                                        {6, 500, 1100}, {7, 333, 900},  {12, 700, 800}, {13, 600, 700},
                                        {4, 40, 2000},  {12, 3072, 96}, {2, 768, 256}, {3, 131, 500}};
    for (int threads = 1; threads <= 3; threads++) {
        kn_threadpool *pool = NULL;
        if (threads > 1) CHECK_STATUS(kn_threadpool_create(threads, &pool), KILN_OK);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int tb = 0; tb < 2; tb++) {
                const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], lda = K + 1;
                const int64_t ldb = (tb ? K : N) + 3, ldc = N + 2;
                float *A = malloc(sizeof(float) * (size_t)(M * lda));
                float *B = malloc(sizeof(float) * (size_t)((tb ? N : K) * ldb));
                float *C = malloc(sizeof(float) * (size_t)(M * ldc));
                float *P = malloc(sizeof(float) * kn_sgemm_packed_b_floats(N, K));
                for (int64_t i = 0; i < M * lda; i++) A[i] = few_rows_rand();
                for (int64_t i = 0; i < (tb ? N : K) * ldb; i++) B[i] = few_rows_rand();
                for (int64_t i = 0; i < M * ldc; i++) C[i] = NAN; /* beta 0: C must not be read */
                kn_sgemm_pack_b_full(B, ldb, tb, N, K, P);
                const float *ap[1] = {A}, *bp[1] = {B}, *pp[1] = {P};
                float *cp[1] = {C};
                kn_sgemm_batch g = {.count = 1, .M = M, .N = N, .K = K, .trans_b = tb, .alpha = 1.0f, .beta = 0.0f,
                                    .a = ap, .lda = lda, .b = bp, .ldb = ldb, .c = cp, .ldc = ldc, .b_packed = pp};
                /* a GRU step at batch 2 (0.79 MFLOP, bound by reading B): two column tiles at 2 threads */
                if (M == 2 && N == 768 && K == 256 && threads == 2) {
                    int64_t tm, tn;
                    kn_sgemm_tasks(&g, 2, &tm, &tn, NULL);
                    CHECK_MSG(tm * tn == 2, "2x768x256 at 2 threads: %lld x %lld tiles", (long long)tm, (long long)tn);
                }
                CHECK_STATUS(kn_sgemm_run(pool, &g), KILN_OK);
                int bad = 0;
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double want = 0;
                        for (int64_t k = 0; k < K; k++)
                            want += (double)A[i * lda + k] * (double)(tb ? B[j * ldb + k] : B[k * ldb + j]);
                        const double got = C[i * ldc + j];
                        if (!(fabs(got - want) <= (1e-5 + 2e-7 * (double)K) * (1 + fabs(want)))) {
                            if (bad < 3)
                                printf("    %d threads %lldx%lldx%lld transB=%d: C[%lld][%lld] = %.7g, want %.7g\n", threads,
                                       (long long)M, (long long)N, (long long)K, tb, (long long)i, (long long)j, got, want);
                            bad++;
                        }
                    }
                CHECK_MSG(bad == 0, "%d threads %lldx%lldx%lld transB=%d: %d values off", threads, (long long)M,
                          (long long)N, (long long)K, tb, bad);
                free(A), free(B), free(C), free(P);
            }
        if (pool) kn_threadpool_destroy(pool);
    }
}

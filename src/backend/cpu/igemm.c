/* Exact integer products through the float GEMM (igemm.h says why this is exact). */
#include "backend/cpu/igemm.h"

#include "backend/cpu/sgemm.h"
#include "util/status.h"

typedef struct igemm_store {
    int32_t *acc;
    int64_t ldacc;
    bool add; /* false for the first slice of a product that starts acc */
} igemm_store;

/* The GEMM's finished block of one slice, into the int32 result (the values are exact integers) */
static void store_slice(const void *ctx, int64_t op, int64_t i0, int64_t j0, int64_t m, int64_t n, float *c,
                        int64_t ldc) {
    (void)op;
    const igemm_store *s = ctx;
    for (int64_t i = 0; i < m; i++) {
        int32_t *a = s->acc + (i0 + i) * s->ldacc + j0;
        const float *r = c + i * ldc;
        if (s->add)
            for (int64_t j = 0; j < n; j++) a[j] += (int32_t)r[j];
        else
            for (int64_t j = 0; j < n; j++) a[j] = (int32_t)r[j];
    }
}

kiln_status kn_igemm(kn_threadpool *pool, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                     int64_t ldb, bool trans_b, int32_t *acc, int64_t ldacc, bool accumulate, float *tmp) {
    if (M <= 0 || N <= 0) return KILN_OK;
    if (K <= 0) {
        if (!accumulate)
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) acc[i * ldacc + j] = 0;
        return KILN_OK;
    }
    for (int64_t k0 = 0; k0 < K; k0 += KN_IGEMM_DEPTH) {
        const int64_t kc = K - k0 < KN_IGEMM_DEPTH ? K - k0 : KN_IGEMM_DEPTH;
        const float *a = A + k0, *b = trans_b ? B + k0 : B + k0 * ldb;
        float *c = tmp;
        igemm_store st = {acc, ldacc, accumulate || k0 > 0};
        kn_sgemm_batch g = {.count = 1, .M = M, .N = N, .K = kc, .trans_b = trans_b, .alpha = 1.0f, .beta = 0.0f,
                            .a = &a, .lda = lda, .b = &b, .ldb = ldb, .c = &c, .ldc = N,
                            .epilogue = store_slice, .epilogue_ctx = &st};
        KN_TRY(kn_sgemm_run(pool, &g));
    }
    return KILN_OK;
}

/* op(B) handed to the GEMM by a packing callback (kn_sgemm_batch.pack_b), as a convolution's
 * implicit im2col hands it, here packed from a plain K x N matrix: for tests of that path. */
#ifndef KN_TEST_PACK_B_H
#define KN_TEST_PACK_B_H

#include "backend/cpu/sgemm.h"

typedef struct tpb_plain {
    const float *B; /* K x N, row stride ldb */
    int64_t ldb;
} tpb_plain;

/* ctx: a tpb_plain. B's rows [k0, +kc) and columns [n0, +nc) into dst in panels of
 * kn_sgemm_nr() columns (each kc rows of that many values), zero past column nc. */
static inline void tpb_pack_plain(const void *ctx, int64_t op, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                                  float *dst) {
    (void)op;
    const tpb_plain *pc = ctx;
    const int nr = kn_sgemm_nr();
    for (int64_t j0 = 0; j0 < nc; j0 += nr)
        for (int64_t k = 0; k < kc; k++)
            for (int j = 0; j < nr; j++)
                dst[j0 * kc + k * nr + j] = j0 + j < nc ? pc->B[(k0 + k) * pc->ldb + n0 + j0 + j] : 0.0f;
}

#endif

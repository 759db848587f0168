/* Exact 8-bit integer matrix products for the CPU backend: C (int32) = A x B where A and B are
 * 8-bit values less their zero points, for MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv
 * and the com.microsoft quantised operators.
 *
 * A value less its zero point lies in [-255, 255]: it fits int16, and the operands are packed as
 * int16 pairs along K, which AVX2's vpmaddwd multiplies and sums pairwise into int32 exactly
 * (|a0 b0 + a1 b1| <= 130050): 16 products an instruction, twice the float FMA's 8, from operands
 * half the size of floats. The 8-bit forms (vpmaddubsw, u8 x s8) do twice as many again but
 * saturate their pair sums at 32767 unless the weights are 7-bit, which a model's need not be; on
 * AVX-512 VNNI (vpdpbusd) they would be exact, a later step.
 *
 * Packed layouts (KP = ceil(K / 2) pairs; an odd K's last pair has a 0 high half):
 *  - A in panels of KN_QGEMM_MR rows: panel p, pair kp holds MR int32 words, row r's pair
 *    (a[r][2kp], a[r][2kp+1]) as two int16 (low, high); rows past M are 0;
 *  - B in panels of KN_QGEMM_NR columns: panel p, pair kp holds NR words, column j's pair
 *    (b[2kp][j], b[2kp+1][j]); columns past N are 0. */
#ifndef KN_CPU_QGEMM_H
#define KN_CPU_QGEMM_H

#include "kiln.h"
#include "util/threadpool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KN_QGEMM_MR 6
#define KN_QGEMM_NR 16

/* int32 words of packed A (M x K) and of packed B (K x N) */
size_t kn_qgemm_a_words(int64_t M, int64_t K);
size_t kn_qgemm_b_words(int64_t N, int64_t K);

/* Packs A, M x K 8-bit values (int8 when is_s8, else uint8), element (i, k) at a[i * rs + k * cs]
 * (rs = lda, cs = 1 for a row-major A; rs = 1, cs = lda for its transpose), less its zero point:
 * zp_rows[i] for row i when zp_rows is set, else zp. */
void kn_qgemm_pack_a8(const void *a, bool is_s8, int64_t rs, int64_t cs, int64_t M, int64_t K, const int32_t *zp_rows,
                      int32_t zp, int32_t *dst);
/* Packs columns [n0, n0 + nc) of B, K x N 8-bit values with element (k, j) at b[k * rs + j * cs],
 * less its zero point: zp_cols[j] for column j when zp_cols is set, else zp; ceil(nc / NR) panels
 * into dst. */
void kn_qgemm_pack_b8(const void *b, bool is_s8, int64_t rs, int64_t cs, int64_t K, const int32_t *zp_cols, int32_t zp,
                      int64_t n0, int64_t nc, int32_t *dst);

/* A producer of packed B (a convolution's im2col): columns [n0, n0 + nc) as ceil(nc / NR)
 * panels of all K into dst; n0 is a multiple of NR. Called from the pool's threads. */
typedef void (*kn_qgemm_pack_b_fn)(const void *ctx, int64_t n0, int64_t nc, int32_t *dst);

typedef struct kn_qgemm {
    int64_t M, N, K;
    const int32_t *a; /* packed A */
    const int32_t *b; /* packed B (all of it), or NULL: pack_b makes each block of columns */
    kn_qgemm_pack_b_fn pack_b;
    const void *pack_ctx;
    int32_t *c; /* M x N, row stride ldc */
    int64_t ldc;
    bool accumulate; /* C += A x B instead of C = A x B */
} kn_qgemm;

/* Runs the product on the pool (NULL: the caller's thread). KILN_ERR_OUT_OF_MEMORY when a
 * thread's packing buffer cannot be had (C then partly written). */
kiln_status kn_qgemm_run(kn_threadpool *pool, const kn_qgemm *g);

#endif

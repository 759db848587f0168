/* Single-precision GEMM for the CPU backend: C = alpha * op(A) * op(B) + beta * C, row-major.
 *
 * kiln carries its own GEMM instead of linking a CPU BLAS: the GPU build machine has no
 * OpenBLAS/MKL/oneDNN, and the build must not depend on one. The implementation packs panels of
 * A and B, runs a register-blocked micro-kernel (AVX-512 or AVX2+FMA chosen at compile time, a
 * portable C fallback otherwise) over cache blocks, and splits C into tiles run on the intra-op
 * thread pool. */
#ifndef KN_SGEMM_H
#define KN_SGEMM_H

#include "util/threadpool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A producer of packed B blocks, for operands that are not a plain matrix (a convolution's
 * implicit im2col). It writes the block B[k0:k0+kc, n0:n0+nc] of problem `op` into dst as
 * ceil(nc/NR) panels of kc*NR floats, panel-major; within a panel element (k, j) is at
 * [k*NR + j]; columns past nc are zero. NR is kn_sgemm_nr(). */
typedef void (*kn_sgemm_pack_b_fn)(const void *ctx, int64_t op, int64_t k0, int64_t kc, int64_t n0,
                                   int64_t nc, float *dst);

/* An epilogue applied to C while it is still in cache (bias, activation, residual of a fused
 * node): called exactly once for every element of C, on blocks [i0, i0+m) x [j0, j0+n) of
 * product `op`, with c pointing at C[i0][j0]. Called from the pool's threads concurrently for
 * disjoint blocks. */
typedef void (*kn_sgemm_epilogue_fn)(const void *ctx, int64_t op, int64_t i0, int64_t j0, int64_t m, int64_t n,
                                     float *c, int64_t ldc);

/* `count` independent products with the same shape and flags. a[i], b[i], c[i] are the operands
 * of product i (each array holds count pointers; b may be NULL when pack_b is set).
 * op(A) is M x K: A is M x K with row stride lda, or K x M when trans_a. op(B) is K x N: B is
 * K x N with row stride ldb, or N x K when trans_b. C is M x N with row stride ldc.
 * beta == 0 means C is not read (it may hold anything). */
typedef struct kn_sgemm_batch {
    int64_t count;
    int64_t M, N, K;
    bool trans_a, trans_b;
    float alpha, beta;
    const float *const *a;
    int64_t lda;
    const float *const *b;
    int64_t ldb;
    float *const *c;
    int64_t ldc;
    kn_sgemm_pack_b_fn pack_b; /* when set, B comes from it and b/ldb/trans_b are unused */
    const void *pack_ctx;
    kn_sgemm_epilogue_fn epilogue; /* optional: called once on every block of C when it is final */
    const void *epilogue_ctx;
    /* Optional: a_packed[i] is op(A) of product i already in the packed layout (kn_sgemm_pack_a),
     * e.g. constant weights packed once per session. a/lda/trans_a must still describe A: the
     * paths that read A in place (M == 1, N == 1, small M) use them. */
    const float *const *a_packed;
    /* Optional: row_bias[i][r] is added to row r of C of product i (a convolution's bias), before
     * the epilogue sees it: C = alpha * op(A) * op(B) + beta * C + bias. */
    const float *const *row_bias;
    /* Optional: b_packed[i] is op(B) of product i already packed whole (kn_sgemm_pack_b_full),
     * e.g. a MatMul's constant weights packed once per session; the blocked path then reads it in
     * place instead of packing B per tile. b/ldb/trans_b must still describe B (the paths for
     * small M read B directly). */
    const float *const *b_packed;
    /* Optional: at_packed[i] is op(A)^T of product i packed whole as B is (kn_sgemm_pack_b_full of
     * A with trans = !trans_a), for the products kn_sgemm_swaps() runs transposed; a/lda/trans_a
     * must still describe A. Ignored by the other products. */
    const float *const *at_packed;
    /* Optional: c_add[i] (a matrix of C's shape, row stride ldc_add) is added to C of product i
     * as C is finished, after the bias and before the clamp and the epilogue (a fused node's
     * residual): the kernels add it as they store C, with no pass of its own. */
    const float *const *c_add;
    int64_t ldc_add;
    /* Optional: as C is finished (after c_add, before the epilogue) it is clamped to
     * [clamp_lo, clamp_hi], as max(lo, x) then min(hi, x): Relu is 0, +inf, Clip its bounds; a NaN
     * stays NaN. */
    bool clamp;
    float clamp_lo, clamp_hi;
    /* Optional, with clamp: an activation between c_add and the clamp (a FusedConv's, with its
     * activation_bounds as the clamp; the fused epilogue's operations in its order):
     * KN_GEMM_ACT_LEAKY x < 0 ? p0 x : x; KN_GEMM_ACT_HARD_SIGMOID min(1, max(0, p0 x + p1));
     * KN_GEMM_ACT_HARD_SWISH x min(1, max(0, x / 6 + 0.5)) (x times the float 1/6) */
    int act;
    float act_p0, act_p1;
} kn_sgemm_batch;
enum { KN_GEMM_ACT_NONE, KN_GEMM_ACT_LEAKY, KN_GEMM_ACT_HARD_SIGMOID, KN_GEMM_ACT_HARD_SWISH };

/* Floats of op(A) (M x K) in the packed layout, and the packing itself: A as for kn_sgemm_batch
 * (M x K with row stride lda, or K x M when trans_a). */
size_t kn_sgemm_packed_a_floats(int64_t M, int64_t K);
void kn_sgemm_pack_a(const float *A, int64_t lda, bool trans_a, int64_t M, int64_t K, float *dst);
/* Floats of op(B) (K x N) packed whole, and the packing: slices of the GEMM's depth, each holding
 * the NR-column panels of every column as the blocked path packs them per tile. */
size_t kn_sgemm_packed_b_floats(int64_t N, int64_t K);
void kn_sgemm_pack_b_full(const float *B, int64_t ldb, bool trans_b, int64_t N, int64_t K, float *dst);

/* Whether kn_sgemm_run computes an M x N x K product (without a_packed) as its transpose, C^T =
 * op(B)^T op(A)^T: when N would leave the micro-kernel's column vectors partly empty (N = 49 or
 * 196 spatial positions of a convolution) and M fills them (output channels, a multiple of the
 * panel width). Such a product reads op(A)^T packed as B is: callers packing constant weights
 * once pack them with kn_sgemm_pack_b_full for it (kn_sgemm_batch.at_packed). */
bool kn_sgemm_swaps(int64_t M, int64_t N, int64_t K);

/* Runs the batch on the pool (NULL = the caller's thread only). Must not be called from inside
 * a kn_parallel_for on the same pool. Returns KILN_ERR_OUT_OF_MEMORY when a thread's packing
 * buffer cannot be allocated (and leaves C partly written). */
kiln_status kn_sgemm_run(kn_threadpool *pool, const kn_sgemm_batch *p);

/* How kn_sgemm_run splits the batch on a pool of `threads` (float path, precision=bf16 aside):
 * returns the tasks of its main parallel loop, count * tm * tn * kp, with the tile grid of each
 * product (tm x tn) and the parts along K of each tile (kp: transposed products with few row
 * panels, the same at every thread count). For tests and for counting. */
int64_t kn_sgemm_tasks(const kn_sgemm_batch *p, int threads, int64_t *tm, int64_t *tn, int64_t *kp);

/* One product. */
kiln_status kn_sgemm(kn_threadpool *pool, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                     float *C, int64_t ldc);

/* The micro-kernel's column count (the panel width of packed B). */
int kn_sgemm_nr(void);
/* Which micro-kernel this build uses: "avx512", "avx2" or "generic". */
const char *kn_sgemm_isa(void);

#endif

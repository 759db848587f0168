/* Single-precision GEMM (see sgemm.h for why kiln has its own).
 *
 * Structure (the classic Goto/BLIS scheme):
 *   tile of C (one per task) -> NC columns of B -> KC deep slice of K -> MC rows of A
 *     -> NR-column micro-panel of packed B (stays in L1) -> MR-row micro-panel of packed A.
 * Packed A: panels of MR rows, k-major (MR floats per k). Packed B: panels of NR columns,
 * k-major (NR floats per k), zero-padded. The micro-kernel keeps an MR x NR block of C in
 * registers and reads one NR-wide row of B and MR broadcasts of A per k.
 *
 * Threads: C is cut into tiles (whole products when a batch has enough of them), each task packs
 * its own operands into a per-thread buffer, so one kn_parallel_for runs the whole batch with no
 * barrier. The tile grid is chosen to minimise the re-packing it causes.
 *
 * With A prepacked (constant weights: convolutions) and B packed here, the tile runs rows first
 * instead (run_rows_first): C by panels of MR whole rows, all of K per block of C, so C and a
 * fused residual go by sequential rows and are finished once. A fused node's residual and
 * Relu/Clip (c_add, clamp) are applied by the micro-kernel as it stores C.
 *
 * Special shapes: M == 1 (a row times a matrix) and N == 1 (a matrix times a column) run as
 * streaming GEMV / dot products without packing; small M with untransposed B reads B in place
 * (packing B would cost as much as the product). */
#include "backend/cpu/sgemm.h"
#include "backend/cpu/sgemm_bf16.h"
#include "backend/cpu/vec_math.h"
#include "util/thread_buffer.h"
#include "util/aligned.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#define KN_GEMM_AVX512 1
#define MR 12
#define NR 32
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define KN_GEMM_AVX2 1
/* the AVX2 micro-kernel prefetches B's row this many steps of K ahead (0: none). Packed panels
 * of KCB x NR (48 KB) do not stay in Zen 3's 32 KB L1 from one row panel to the next: 16, 24 or
 * 32 steps ahead made BERT/ViT's products 1-4% faster (bench/gemm_packed_bench.c A/B, 1 thread) */
#ifndef UKR2_PF
#define UKR2_PF 16
#endif
#ifndef UKR2_PART_STORES
#define UKR2_PART_STORES 1
#endif
#define MR 6
#define NR 16
#else
#define MR 4
#define NR 8
#endif

#ifndef KC
#define KC 256       /* depth of a packed slice: B micro-panel KC*NR floats sits in L1 */
#endif
#ifndef MC
#define MC (MR * 16) /* rows of A packed at once (L2) */
#endif
#ifndef NC
#define NC 1024      /* columns of B packed at once (L2/L3); a multiple of NR */
#endif
#ifndef NC_FEW_ROWS
#define NC_FEW_ROWS 256 /* the same when all the rows are one block of MC */
#endif
/* Small M with B untransposed: read B in place instead of packing it. */
#define DIRECT_B_MAX_M (2 * MR)
/* ... or, A not prepacked, where B's tile is at most this (32 KB, in L1 for every row panel): the
 * batched products of attention (12 x 128x64 @ 64x128: perf showed 4% in pack_b; read in place
 * 0.183 -> 0.174 ms, kiln bench, 1 thread, Xeon SPR). AVX-512 only: measured there. */
#if defined(KN_GEMM_AVX512)
#define DIRECT_B_L1_FLOATS 8192
#else
#define DIRECT_B_L1_FLOATS 0
#endif
/* Small M with B transposed: dot products instead of packing B. */
#define DOT_MAX_M 32
/* Tiles per thread, when each tile keeps at least MIN_TILE_FLOPS of work. */
#ifndef GEMM_OVERSUB
#define GEMM_OVERSUB 4
#endif
#define MIN_TILE_FLOPS 8e6
/* Below this many flops per thread, fewer threads are faster than waking them all. The pool's
 * workers spin between an operator's loops, so handing one a share costs about a microsecond:
 * 5e5 flops (a few microseconds) is worth it. Measured on mobilenet_v3_small, 2 threads, 2-core
 * EPYC (min of 5 rounds of 100 runs): 8e6 1.01 ms, 2e6 0.84, 1e6 0.69-0.72, 5e5 0.66, 1e5 0.67. */
#define MIN_FLOPS_PER_THREAD 5e5

#define WS_FLOATS ((size_t)MC * KC + (size_t)KC * NC)

/* B packed whole (constant weights, packed once per session): run_packed_tile. When C is larger
 * than PK_C_FLOATS, K goes KCB at a time (A's slice of the tile's rows, 627 KB at 197 rows, stays
 * in L2); else KC at a time. Tuned on the 2-core Sapphire Rapids-class Xeon with
 * bench/gemm_packed_bench.c: groups of up to 5 slices made BERT-base's 128 x 768 x 3072 7% slower
 * (B's part of the group from L2 for every panel of rows), deep groups where C fits in L2 3-5%
 * slower (128 x 768 x 768). */
#ifndef PK_C_FLOATS
#define PK_C_FLOATS (256 * 1024) /* C up to 1 MB stays in L2 from slice to slice: slices of KC */
#endif
/* Operands packed whole (kn_sgemm_pack_b_full, and A shared by the tiles) come in slices of KCB
 * of K, a multiple of KC: a panel's slice of KC at k0 is the part (k0 - slice start) * NR floats
 * into the panel's slice of KCB (bpk_panel), so the blocked paths read them KC at a time as
 * before, and run_packed_tile reads a panel's whole slice of KCB in one micro-kernel call */
#define KCB (3 * KC)
/* the packed copy of A that kn_sgemm_run shares among its tiles: at most this many floats (64 MB) */
#ifndef PK_A_MAX_FLOATS
#define PK_A_MAX_FLOATS ((size_t)16 << 20)
#endif

/* Transposed products (kn_sgemm_swaps): at most SWAP_MAX_N columns of C. The packed slice of
 * op(B) (KC x SWAP_MAX_N) and a chunk of SWAP_MC rows of op(A) packed as B (KC x SWAP_MC) share the
 * workspace; C^T of the tile has a buffer of its own. The micro-kernel runs SWAP_KS steps of K at
 * a time so that its two panels (SWAP_KS x NR floats each: op(B)'s is read MR of NR lanes at a
 * time) stay in L1 together. Measured on Zen 5 (GEMM alone, weights prepacked and cold): packing
 * op(B) into MR-row panels instead, running whole slices of KC, or keeping C^T to 256 KB by
 * taking the rows in parts were each 3-10% slower. */
#define SWAP_MAX_N 512
#ifndef SWAP_MIN_SAVED
#define SWAP_MIN_SAVED 64.0 /* lanes saved per output element, times K (kn_sgemm_swaps) */
#endif
#ifndef SWAP_MIN_SAVED_FEW_N
#define SWAP_MIN_SAVED_FEW_N 16.0 /* the same for AVX2 and at most 4 * NR columns */
#endif
#ifndef PK_PF_SPREAD
#define PK_PF_SPREAD 1
#endif
#if !defined(SWAP_EVEN_ROWS) && defined(KN_GEMM_AVX2)
#define SWAP_EVEN_ROWS 1
#endif
#ifndef SWAP_EVEN_ROWS
#define SWAP_EVEN_ROWS 0
#endif
#ifndef SWAP_PF_SPREAD
#define SWAP_PF_SPREAD 1
#endif
#ifndef SWAP_PF_HINT
#define SWAP_PF_HINT _MM_HINT_T0
#endif
#define SWAP_MC (6 * NR)
#define SWAP_KS 128
#ifndef SWAP_PF_AHEAD
#define SWAP_PF_AHEAD 2
#endif
_Static_assert((size_t)KC * SWAP_MAX_N + (size_t)KC * SWAP_MC <= WS_FLOATS,
               "the transposed path's buffers fit the workspace");

int kn_sgemm_nr(void) { return NR; }

const char *kn_sgemm_isa(void) {
#if defined(KN_GEMM_AVX512)
    return "avx512";
#elif defined(KN_GEMM_AVX2)
    return "avx2";
#else
    return "generic";
#endif
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---------------------------------------------------------------- per-thread workspace */

static pthread_key_t ws_key;
static pthread_once_t ws_once = PTHREAD_ONCE_INIT;
static int ws_key_ok;

static void ws_free(void *p) { free(p); }
static void ws_init(void) { ws_key_ok = pthread_key_create(&ws_key, ws_free) == 0; }

/* The calling thread's packing buffer (allocated on first use, freed when the thread exits). */
static float *workspace(void) {
    pthread_once(&ws_once, ws_init);
    if (!ws_key_ok) return NULL;
    float *w = pthread_getspecific(ws_key);
    if (!w) {
        w = kn_aligned_alloc(64, WS_FLOATS * sizeof(float));
        if (w && pthread_setspecific(ws_key, w) != 0) {
            free(w);
            w = NULL;
        }
    }
    return w;
}

/* The calling thread's buffer for C^T of a transposed tile, at least `floats` long. */
static kn_thread_buffer tile_buffers = KN_THREAD_BUFFER_INIT;
static float *tile_buffer(size_t floats) { return kn_thread_buffer_get(&tile_buffers, floats * sizeof(float)); }

/* ---------------------------------------------------------------- micro-kernels */

/* What a micro-kernel does to C as it stores it for the last time (kn_sgemm_batch's c_add and
 * clamp): add[r * ld + j] is added to C[r][j] (add may be NULL), then C is clamped to [lo, hi]. */
typedef struct ukr_tail {
    const float *add;
    int64_t ld;
    float lo, hi;
    int act; /* before the clamp (kn_sgemm_batch's act), with p0, p1 */
    float p0, p1;
} ukr_tail;

/* ukr_tail's act on one value, scalar (fused.c's epilogue's scalar forms) */
static inline float tail_act1(const ukr_tail *t, float v) {
    switch (t->act) {
    case KN_GEMM_ACT_LEAKY: return v < 0.0f ? t->p0 * v : v;
    case KN_GEMM_ACT_HARD_SIGMOID: {
        float h = t->p0 * v + t->p1;
        h = h < 0.0f ? 0.0f : h;
        return h > 1.0f ? 1.0f : h;
    }
    case KN_GEMM_ACT_HARD_SWISH: {
        float h = v * (1.0f / 6.0f) + 0.5f;
        h = h < 0.0f ? 0.0f : h;
        return v * (h > 1.0f ? 1.0f : h);
    }
    default: return v;
    }
}

#if defined(KN_GEMM_AVX512)

static inline __mmask16 mask16(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* The tail's activation on finished values (ukr_tail's act, p0 and p1 as vectors; fused.c's
 * epilogue's AVX-512 forms), then min(hi, max(lo, v)) (Relu, Clip and bounds; NaN kept) */
static inline __attribute__((always_inline)) __m512 tail_act16(__m512 v, int act, __m512 p0, __m512 p1, __m512 lo,
                                                               __m512 hi) {
    const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    if (act == KN_GEMM_ACT_LEAKY) v = _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, p0);
    else if (act == KN_GEMM_ACT_HARD_SIGMOID) v = _mm512_min_ps(one, _mm512_max_ps(zero, _mm512_add_ps(_mm512_mul_ps(p0, v), p1)));
    else if (act == KN_GEMM_ACT_HARD_SWISH)
        v = _mm512_mul_ps(v, _mm512_min_ps(one, _mm512_max_ps(zero, _mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.0f / 6.0f)),
                                                                                    _mm512_set1_ps(0.5f)))));
    return _mm512_min_ps(hi, _mm512_max_ps(lo, v));
}

/* C[0:mr, 0:n] = alpha * A_panel * B_panel + beta * C (beta == 0: C not read). NV vectors of 16
 * columns (1 or 2); b advances by bs floats per k (NR when packed, ldb when read in place).
 * lda: 0 for a packed panel of A (row r at a[r], as floats per k), else A read in place, row r at
 * a + r * lda (as is then 1): four row pointers three rows apart, each row addressed as pointer +
 * 0, lda or 2 lda, so twelve rows take five registers. */
static inline __attribute__((always_inline)) void ukr(const int mr, const int nv, const int pack, int64_t kc,
                                                      const float *restrict a, int64_t as, int64_t lda,
                                                      const float *restrict b, int64_t bs,
                                                      float *restrict c, int64_t ldc, int n,
                                                      float alpha, float beta, const float *rb,
                                                      const float *pf, const ukr_tail *t,
                                                      float *restrict bcopy) {
    __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
        acc0[r] = _mm512_setzero_ps();
        acc1[r] = _mm512_setzero_ps();
    }
    const __mmask16 m0 = mask16(n), m1 = mask16(n - 16);
    const float *ap[4] = {a, a, a, a};
    if (lda) {
#pragma GCC unroll 4
        for (int q = 1; q < 4; q++)
            if (3 * q < mr) ap[q] = a + 3 * q * lda;
    }
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
#pragma GCC unroll 2
    for (int64_t p = 0; p < kc; p++) {
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b);
        __m512 b1 = nv > 1 ? _mm512_maskz_loadu_ps(m1, b + 16) : _mm512_setzero_ps();
        if (pack) {
            /* B read in place (rows bs apart), stored packed for the calls on the other rows, and
             * the same rows of the next panel (pf, rows bs apart too) brought into L2 */
            _mm512_storeu_ps(bcopy + p * NR, b0);
            _mm512_storeu_ps(bcopy + p * NR + 16, b1);
            _mm_prefetch((const char *)(pf + p * bs), _MM_HINT_T1);
            _mm_prefetch((const char *)(pf + p * bs + 16), _MM_HINT_T1);
        } else {
            /* a line of the operand the next call reads first from memory (prepacked weights) */
            _mm_prefetch((const char *)(pf + 16 * p), _MM_HINT_T1);
        }
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            __m512 ar = _mm512_set1_ps(lda ? ap[r / 3][(r % 3) * lda] : a[r]);
            acc0[r] = _mm512_fmadd_ps(ar, b0, acc0[r]);
            if (nv > 1) acc1[r] = _mm512_fmadd_ps(ar, b1, acc1[r]);
        }
        if (lda) {
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) ap[q]++;
        } else {
            a += as;
        }
        b += bs;
    }
    const __m512 va = _mm512_set1_ps(alpha);
    if (t) {
        /* C finished here: + the addend, clamped (the same operations, in the same order, as
         * apply_tail on stored C) */
        const __m512 lo = _mm512_set1_ps(t->lo), hi = _mm512_set1_ps(t->hi), vb = _mm512_set1_ps(beta);
        const __m512 q0 = _mm512_set1_ps(t->p0), q1 = _mm512_set1_ps(t->p1);
        const int ak = t->act;
        const float *ad = t->add;
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            float *cr = c + r * ldc;
            const __m512 br = rb ? _mm512_set1_ps(rb[r]) : _mm512_setzero_ps();
            __m512 v0 = beta == 0.0f ? br : _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, cr), br);
            v0 = _mm512_fmadd_ps(va, acc0[r], v0);
            if (ad) v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, ad + r * t->ld));
            _mm512_mask_storeu_ps(cr, m0, tail_act16(v0, ak, q0, q1, lo, hi));
            if (nv > 1) {
                __m512 v1 = beta == 0.0f ? br : _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, cr + 16), br);
                v1 = _mm512_fmadd_ps(va, acc1[r], v1);
                if (ad) v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, ad + r * t->ld + 16));
                _mm512_mask_storeu_ps(cr + 16, m1, tail_act16(v1, ak, q0, q1, lo, hi));
            }
        }
    } else if (beta == 0.0f) {
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            const __m512 br = rb ? _mm512_set1_ps(rb[r]) : _mm512_setzero_ps();
            _mm512_mask_storeu_ps(c + r * ldc, m0, _mm512_fmadd_ps(va, acc0[r], br));
            if (nv > 1) _mm512_mask_storeu_ps(c + r * ldc + 16, m1, _mm512_fmadd_ps(va, acc1[r], br));
        }
    } else {
        const __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            float *cr = c + r * ldc;
            const __m512 br = rb ? _mm512_set1_ps(rb[r]) : _mm512_setzero_ps();
            __m512 c0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, cr), br);
            _mm512_mask_storeu_ps(cr, m0, _mm512_fmadd_ps(va, acc0[r], c0));
            if (nv > 1) {
                __m512 c1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, cr + 16), br);
                _mm512_mask_storeu_ps(cr + 16, m1, _mm512_fmadd_ps(va, acc1[r], c1));
            }
        }
    }
}

#define UKR_CASE(R)                                                                                \
    case R:                                                                                        \
        if (n > 16) ukr(R, 2, 0, kc, a, as, 0, b, bs, c, ldc, n, alpha, beta, rb, pf, t, NULL);       \
        else ukr(R, 1, 0, kc, a, as, 0, b, bs, c, ldc, n, alpha, beta, rb, pf, t, NULL);               \
        break;

/* Few rows (mr <= FEW_MR): two NR-column panels a call, b and b + bps, so that C[0:mr, 0:n] (n up
 * to 2 * NR) is 4 * mr accumulators. With one panel a call, mr = 2 kept 4 accumulators: each k's
 * multiply-adds waited on the last k's (4 cycles of latency, 2 ports: half the rate; perf of a
 * GRU step's 2 x 256 @ 768 x 256^T: the micro-kernel's loop on its loads and adds). Each element
 * of C is the same sum in the same order as ukr's, and the same stores after it. No prefetch of
 * the next pair: a line a k into L2 made the GRU step 4% slower (its B stays in L2 from run to
 * run, as a recurrent cell's weights do from step to step). */
#define FEW_MR 4
static inline __attribute__((always_inline)) void ukr_pair(const int mr, const int nv, int64_t kc,
                                                           const float *restrict a, int64_t as,
                                                           const float *restrict b, int64_t bs, int64_t bps,
                                                           float *restrict c, int64_t ldc, int n, float alpha,
                                                           float beta, const float *rb, const ukr_tail *t) {
    __m512 acc[4][FEW_MR];
    __mmask16 m[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) {
        m[v] = mask16(n - 16 * v);
#pragma GCC unroll 4
        for (int r = 0; r < FEW_MR; r++) acc[v][r] = _mm512_setzero_ps();
    }
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++) _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
#pragma GCC unroll 2
    for (int64_t p = 0; p < kc; p++) {
        __m512 bv[4];
        bv[0] = _mm512_loadu_ps(b);
        bv[1] = _mm512_loadu_ps(b + 16);
        bv[2] = _mm512_maskz_loadu_ps(m[2], b + bps);
        bv[3] = nv > 3 ? _mm512_maskz_loadu_ps(m[3], b + bps + 16) : _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) {
            const __m512 ar = _mm512_set1_ps(a[r]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) acc[v][r] = _mm512_fmadd_ps(ar, bv[v], acc[v][r]);
        }
        a += as;
        b += bs;
    }
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++) {
        float *cr = c + r * ldc;
        const __m512 br = rb ? _mm512_set1_ps(rb[r]) : _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            /* ukr's operations in ukr's order for each of its three cases */
            if (t) {
                const __m512 lo = _mm512_set1_ps(t->lo), hi = _mm512_set1_ps(t->hi);
                const __m512 q0 = _mm512_set1_ps(t->p0), q1 = _mm512_set1_ps(t->p1);
                __m512 x = beta == 0.0f ? br : _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m[v], cr + 16 * v), br);
                x = _mm512_fmadd_ps(va, acc[v][r], x);
                if (t->add) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m[v], t->add + r * t->ld + 16 * v));
                _mm512_mask_storeu_ps(cr + 16 * v, m[v], tail_act16(x, t->act, q0, q1, lo, hi));
            } else if (beta == 0.0f) {
                _mm512_mask_storeu_ps(cr + 16 * v, m[v], _mm512_fmadd_ps(va, acc[v][r], br));
            } else {
                const __m512 c0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m[v], cr + 16 * v), br);
                _mm512_mask_storeu_ps(cr + 16 * v, m[v], _mm512_fmadd_ps(va, acc[v][r], c0));
            }
        }
    }
}

/* n > NR: the first panel is whole */
#define UKR_PAIR_CASE(R)                                                                           \
    case R:                                                                                        \
        if (n > 3 * 16) ukr_pair(R, 4, kc, a, as, b, bs, bps, c, ldc, n, alpha, beta, rb, t);       \
        else ukr_pair(R, 3, kc, a, as, b, bs, bps, c, ldc, n, alpha, beta, rb, t);                  \
        break;
#define KN_UKR_PAIR 1
static void ukr_pair_any(int mr, int64_t kc, const float *a, int64_t as, const float *b, int64_t bs, int64_t bps,
                         float *c, int64_t ldc, int n, float alpha, float beta, const float *rb,
                         const ukr_tail *t) {
    switch (mr) {
        UKR_PAIR_CASE(4) UKR_PAIR_CASE(3) UKR_PAIR_CASE(2) UKR_PAIR_CASE(1)
        default: break;
    }
}

/* pf: kc lines from there are prefetched into L2 (AVX-512 only; any address: prefetches do not fault) */
static void ukr_any(int mr, int64_t kc, const float *a, int64_t as, const float *b, int64_t bs, float *c,
                    int64_t ldc, int n, float alpha, float beta, const float *rb, const float *pf,
                    const ukr_tail *t) {
    switch (mr) {
        UKR_CASE(12) UKR_CASE(11) UKR_CASE(10) UKR_CASE(9) UKR_CASE(8) UKR_CASE(7)
        UKR_CASE(6) UKR_CASE(5) UKR_CASE(4) UKR_CASE(3) UKR_CASE(2) UKR_CASE(1)
        default: break;
    }
}

/* ukr_any with A read in place: row r of the panel at a + r * lda, the next k at the next float.
 * pack_a's transposing copy was 8.5% of MatMul 32x128x256 @ 256x256 (perf, 1 thread), whose 256
 * columns read each packed row panel back only 8 times; the same sums in the same order. */
#define KN_UKR_A_IN_PLACE 1
#ifndef A_IN_PLACE_MAX_N
#define A_IN_PLACE_MAX_N 256
#endif
#define UKR_AIN_CASE(R)                                                                            \
    case R:                                                                                        \
        if (n > 16) ukr(R, 2, 0, kc, a, 1, lda, b, bs, c, ldc, n, alpha, beta, rb, pf, t, NULL);      \
        else ukr(R, 1, 0, kc, a, 1, lda, b, bs, c, ldc, n, alpha, beta, rb, pf, t, NULL);              \
        break;
static void ukr_ain_any(int mr, int64_t kc, const float *a, int64_t lda, const float *b, int64_t bs, float *c,
                        int64_t ldc, int n, float alpha, float beta, const float *rb, const float *pf,
                        const ukr_tail *t) {
    switch (mr) {
        UKR_AIN_CASE(12) UKR_AIN_CASE(11) UKR_AIN_CASE(10) UKR_AIN_CASE(9) UKR_AIN_CASE(8) UKR_AIN_CASE(7)
        UKR_AIN_CASE(6) UKR_AIN_CASE(5) UKR_AIN_CASE(4) UKR_AIN_CASE(3) UKR_AIN_CASE(2) UKR_AIN_CASE(1)
        default: break;
    }
}

#define KN_UKR_PACKS 1
#define UKR_PACK_CASE(R)                                                                           \
    case R:                                                                                        \
        if (n > 16) ukr(R, 2, 1, kc, a, as, 0, b, bs, c, ldc, n, alpha, beta, rb, pf, t, bcopy);      \
        else ukr(R, 1, 1, kc, a, as, 0, b, bs, c, ldc, n, alpha, beta, rb, pf, t, bcopy);              \
        break;

/* ukr_any on B read in place (rows bs apart) that also stores the panel packed into bcopy (kc *
 * NR floats, columns past n zero, as pack_b_panel writes it) and brings the rows of the next
 * panel, at pf with the same stride, into L2: the first rows of a rows-first block pack B as they
 * use it, its reads overlapped with their multiply-adds. */
static void ukr_pack_any(int mr, int64_t kc, const float *a, int64_t as, const float *b, int64_t bs, float *c,
                         int64_t ldc, int n, float alpha, float beta, const float *rb, const float *pf,
                         const ukr_tail *t, float *bcopy) {
    switch (mr) {
        UKR_PACK_CASE(12) UKR_PACK_CASE(11) UKR_PACK_CASE(10) UKR_PACK_CASE(9) UKR_PACK_CASE(8) UKR_PACK_CASE(7)
        UKR_PACK_CASE(6) UKR_PACK_CASE(5) UKR_PACK_CASE(4) UKR_PACK_CASE(3) UKR_PACK_CASE(2) UKR_PACK_CASE(1)
        default: break;
    }
}

/* The transposed path's kernel (run_swapped_tile): mr <= SW_MR rows of C^T (output positions,
 * broadcast from op(B), packed or in place, as floats apart per k) by two NR-column panels of
 * op(A)^T (b and b + bps: 64 output channels, 4 vectors), 4 * mr accumulators. For N = 49
 * positions ukr_any's 12 x 32 ran 12 + 12 + 8 | 12 + 5 rows a panel of channels, 14 loads per 24
 * multiply-adds, and perf put its 5-row call at 1.5x its share of the time; here 6 x 4 + 5 x 5 rows
 * by 64 channels, 10 loads per 24. Not 7 rows: 28 accumulators, 4 vectors of B and the broadcast
 * are 33 registers, and GCC reloads B (7 rows 3-13% slower than 6, 2-core AVX-512 Xeon, 1 thread).
 * t[r * ldt + j] = alpha * sum + beta * t (beta 0: not read), j < n (n in (NR, 2 NR]), in
 * ukr_any's operations and order; pf: kc lines from there are brought into L1 (the weights' next
 * part). */
#define SW_MR 6
/* ... from this many positions (4 calls or more: the first four bring in the weights' next part):
 * 3x3 512 -> 512 on 4x4 (N = 16, 3 calls, 9.4 MB of weights from memory) ran 6% slower on it than
 * on 12 + 4 rows of one panel (2-core AVX-512 Xeon, 1 thread) */
#define SW_MIN_N 22
/* ... SW_KS steps of K a call: the pair's part of the weights (SW_KS x 2 NR floats, 16 KB) and the
 * positions' (49 x SW_KS, 12.5 KB in place) stay in L1 together, where SWAP_KS (32 + 25 KB) did
 * not: 64 against 128 0.96-1.0 of the time on the 7x7 products, 32 and 96 slower than 64
 * (/tmp/h112/snb.c, 1 thread, 2-core AVX-512 Xeon) */
#define SW_KS 64
static inline __attribute__((always_inline)) void ukr_sw(const int mr, int64_t kc, const float *restrict a, int64_t as,
                                                         const float *restrict b, int64_t bps, float *restrict t,
                                                         int64_t ldt, int n, float alpha, float beta, const float *pf) {
    __m512 acc[SW_MR][4];
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) acc[r][v] = _mm512_setzero_ps();
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) _mm_prefetch((const char *)(t + r * ldt), _MM_HINT_T0);
    const float *b1 = b + bps;
#pragma GCC unroll 2
    for (int64_t p = 0; p < kc; p++) {
        const __m512 w0 = _mm512_loadu_ps(b), w1 = _mm512_loadu_ps(b + 16);
        const __m512 w2 = _mm512_loadu_ps(b1), w3 = _mm512_loadu_ps(b1 + 16);
        _mm_prefetch((const char *)(pf + 16 * p), _MM_HINT_T0);
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
            const __m512 ar = _mm512_set1_ps(a[r]);
            acc[r][0] = _mm512_fmadd_ps(ar, w0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(ar, w1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(ar, w2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(ar, w3, acc[r][3]);
        }
        a += as;
        b += NR;
        b1 += NR;
    }
    /* ukr's stores without a bias, operation for operation (a zero addend: the same signed zeros), so
     * that a panel gets the same bits here as in ukr_any (the tiles decide which panels pair) */
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta), z = _mm512_setzero_ps();
    const __mmask16 m2 = mask16(n - 32), m3 = mask16(n - 48);
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        float *tr = t + r * ldt;
        if (beta == 0.0f) {
            _mm512_storeu_ps(tr, _mm512_fmadd_ps(va, acc[r][0], z));
            _mm512_storeu_ps(tr + 16, _mm512_fmadd_ps(va, acc[r][1], z));
            _mm512_mask_storeu_ps(tr + 32, m2, _mm512_fmadd_ps(va, acc[r][2], z));
            _mm512_mask_storeu_ps(tr + 48, m3, _mm512_fmadd_ps(va, acc[r][3], z));
        } else {
            _mm512_storeu_ps(tr, _mm512_fmadd_ps(va, acc[r][0], _mm512_fmadd_ps(vb, _mm512_loadu_ps(tr), z)));
            _mm512_storeu_ps(tr + 16, _mm512_fmadd_ps(va, acc[r][1], _mm512_fmadd_ps(vb, _mm512_loadu_ps(tr + 16), z)));
            _mm512_mask_storeu_ps(tr + 32, m2, _mm512_fmadd_ps(va, acc[r][2], _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m2, tr + 32), z)));
            _mm512_mask_storeu_ps(tr + 48, m3, _mm512_fmadd_ps(va, acc[r][3], _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m3, tr + 48), z)));
        }
    }
}
#define UKR_SW_CASE(R)                                                                             \
    case R: ukr_sw(R, kc, a, as, b, bps, t, ldt, n, alpha, beta, pf); break;
#define KN_UKR_SW 1
static void ukr_sw_any(int mr, int64_t kc, const float *a, int64_t as, const float *b, int64_t bps, float *t,
                       int64_t ldt, int n, float alpha, float beta, const float *pf) {
    switch (mr) {
        UKR_SW_CASE(6) UKR_SW_CASE(5) UKR_SW_CASE(4) UKR_SW_CASE(3) UKR_SW_CASE(2) UKR_SW_CASE(1)
        default: break;
    }
}

#elif defined(KN_GEMM_AVX2)

static inline __m256i mask8(int64_t n) {
    int k = n < 0 ? 0 : n > 8 ? 8 : (int)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The tail's activation on finished values (tail_act16's, 8 lanes; fused.c's epilogue's forms) */
static inline __attribute__((always_inline)) __m256 tail_act8(__m256 v, int act, __m256 p0, __m256 p1, __m256 lo,
                                                              __m256 hi) {
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    if (act == KN_GEMM_ACT_LEAKY) v = _mm256_blendv_ps(v, _mm256_mul_ps(v, p0), _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
    else if (act == KN_GEMM_ACT_HARD_SIGMOID) v = _mm256_min_ps(one, _mm256_max_ps(zero, _mm256_add_ps(_mm256_mul_ps(p0, v), p1)));
    else if (act == KN_GEMM_ACT_HARD_SWISH)
        v = _mm256_mul_ps(v, _mm256_min_ps(one, _mm256_max_ps(zero, _mm256_add_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.0f / 6.0f)),
                                                                                    _mm256_set1_ps(0.5f)))));
    return _mm256_min_ps(hi, _mm256_max_ps(lo, v));
}

/* The first n (< 8) lanes of v to d, as _mm256_maskstore_ps with mask8(n) stores them, by 4-, 2-
 * and 1-lane stores: a masked store is slow on Zen 3 (store_transposed's last block of a 7x7
 * plane, one pixel per row of C, was 10% of a 1x1 192->1152 convolution). The micro-kernel's
 * edge stores stay masked: the same change there made the transposed path's calls 1.3x slower
 * (its code, not its stores: those calls store whole panels) */
static inline void store_part8(float *d, __m256 v, int64_t n) {
    if (n <= 0) return;
    __m128 x = _mm256_castps256_ps128(v);
    if (n >= 4) {
        _mm_storeu_ps(d, x);
        x = _mm256_extractf128_ps(v, 1);
        d += 4;
        n -= 4;
    }
    if (n >= 2) {
        _mm_storel_pi((__m64 *)d, x);
        x = _mm_movehl_ps(x, x);
        d += 2;
        n -= 2;
    }
    if (n) _mm_store_ss(d, x);
}

/* full: n == NR, no masks. vmaskmovps on every step of K cost a load port and kept a mask
 * register that, with 12 accumulators and 2 rows of B, was spilled and reloaded each step: the
 * 6 x 16 kernel ran BERT-base's products at 65-73 GFLOP/s of the core's 102 on a 2-core AVX2 EPYC.
 * Packed panels are zero-padded to NR, so only B read in place (bs != NR) or a narrow C takes the
 * masked variant. */
static inline __attribute__((always_inline)) void ukr(const int mr, const int nv, const int full, int64_t kc,
                                                      const float *restrict a, int64_t as,
                                                      const float *restrict b, int64_t bs,
                                                      float *restrict c, int64_t ldc, int n,
                                                      float alpha, float beta, const float *rb,
                                                      const ukr_tail *t) {
    __m256 acc0[MR], acc1[MR];
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        acc0[r] = _mm256_setzero_ps();
        acc1[r] = _mm256_setzero_ps();
    }
    const __m256i m0 = mask8(n), m1 = mask8(n - 8);
    /* Every call sums K in order, one multiply-add a step, whatever its rows: C's last bits must not
     * depend on the rows a call gets (a tile's last rows, a transposed tile's last positions: which
     * rows those are depends on the tile grid, hence on the threads). One or two rows summing even
     * and odd steps apart (4271d45: 4 chains of FMAs where 2 wait on the FMA's latency) gave such
     * rows other bits than the same rows in a call of 3 or more: a 2-thread 98 x 512 x 400 product
     * (the strided 1-D convolution's frames, a4ed032) differed from 1 thread's. */
    int64_t p = 0;
#pragma GCC unroll 2
    for (; p < kc; p++) {
        __m256 b0, b1;
#if UKR2_PF
        if (full) _mm_prefetch((const char *)(b + UKR2_PF * bs), _MM_HINT_T0);
#endif
        if (full) {
            b0 = _mm256_loadu_ps(b);
            b1 = _mm256_loadu_ps(b + 8);
        } else {
            b0 = _mm256_maskload_ps(b, m0);
            b1 = nv > 1 ? _mm256_maskload_ps(b + 8, m1) : _mm256_setzero_ps();
        }
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
            __m256 ar = _mm256_broadcast_ss(a + r);
            acc0[r] = _mm256_fmadd_ps(ar, b0, acc0[r]);
            if (nv > 1) acc1[r] = _mm256_fmadd_ps(ar, b1, acc1[r]);
        }
        a += as;
        b += bs;
    }
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    const __m256 lo = _mm256_set1_ps(t ? t->lo : 0.0f), hi = _mm256_set1_ps(t ? t->hi : 0.0f);
    const __m256 q0 = _mm256_set1_ps(t ? t->p0 : 0.0f), q1 = _mm256_set1_ps(t ? t->p1 : 0.0f);
    const int ak = t ? t->act : KN_GEMM_ACT_NONE;
    const float *ad = t ? t->add : NULL;
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        float *cr = c + r * ldc;
        const __m256 br = rb ? _mm256_set1_ps(rb[r]) : _mm256_setzero_ps();
        __m256 v0 = _mm256_fmadd_ps(va, acc0[r], br);
        if (full) {
            __m256 v1 = _mm256_fmadd_ps(va, acc1[r], br);
            if (beta != 0.0f) {
                v0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr), v0);
                v1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr + 8), v1);
            }
            if (ad) {
                v0 = _mm256_add_ps(v0, _mm256_loadu_ps(ad + r * t->ld));
                v1 = _mm256_add_ps(v1, _mm256_loadu_ps(ad + r * t->ld + 8));
            }
            if (t) {
                v0 = tail_act8(v0, ak, q0, q1, lo, hi);
                v1 = tail_act8(v1, ak, q0, q1, lo, hi);
            }
            _mm256_storeu_ps(cr, v0);
            _mm256_storeu_ps(cr + 8, v1);
            continue;
        }
        if (beta != 0.0f) v0 = _mm256_fmadd_ps(vb, _mm256_maskload_ps(cr, m0), v0);
        if (ad) v0 = _mm256_add_ps(v0, _mm256_maskload_ps(ad + r * t->ld, m0));
        if (t) v0 = tail_act8(v0, ak, q0, q1, lo, hi);
        _mm256_maskstore_ps(cr, m0, v0);
        if (nv > 1) {
            __m256 v1 = _mm256_fmadd_ps(va, acc1[r], br);
            if (beta != 0.0f) v1 = _mm256_fmadd_ps(vb, _mm256_maskload_ps(cr + 8, m1), v1);
            if (ad) v1 = _mm256_add_ps(v1, _mm256_maskload_ps(ad + r * t->ld + 8, m1));
            if (t) v1 = tail_act8(v1, ak, q0, q1, lo, hi);
            _mm256_maskstore_ps(cr + 8, m1, v1);
        }
    }
}

#define UKR_CASE(R)                                                                                \
    case R:                                                                                        \
        if (n == NR) ukr(R, 2, 1, kc, a, as, b, bs, c, ldc, n, alpha, beta, rb, t);                     \
        else if (n > 8) ukr(R, 2, 0, kc, a, as, b, bs, c, ldc, n, alpha, beta, rb, t);                  \
        else ukr(R, 1, 0, kc, a, as, b, bs, c, ldc, n, alpha, beta, rb, t);                             \
        break;

static void ukr_any(int mr, int64_t kc, const float *a, int64_t as, const float *b, int64_t bs, float *c,
                    int64_t ldc, int n, float alpha, float beta, const float *rb, const float *pf,
                    const ukr_tail *t) {
    (void)pf;
    switch (mr) {
        UKR_CASE(6) UKR_CASE(5) UKR_CASE(4) UKR_CASE(3) UKR_CASE(2) UKR_CASE(1)
        default: break;
    }
}

/* Few rows (mr <= FEW_MR), B packed: two NR-column panels a call, b and b + bps, as the AVX-512
 * ukr_pair: C[0:mr, 0:n] (NR < n <= 2 NR; the first panel whole) in 4 * mr accumulators, each
 * broadcast of A used by four multiply-adds: with two rows 8 independent chains and 6 loads a k
 * (ukr on two rows of one panel: 4 chains). Each element of C is the same sum in the same order as
 * ukr's (K in order), and the same stores after it: a tile of 2 rows here gives the bits those rows
 * get in a larger tile's last call of ukr.
 * A tile of one row is rare (M == 1 runs as a row times a matrix). Packed panels are zero-padded to NR, so B is loaded
 * whole; the stores past n are masked. The tail's operations are ukr's, in ukr's order. On 16
 * registers: 8 sums, 4 rows of B and the broadcasts. */
#define FEW_MR 2
static inline __attribute__((always_inline)) void ukr_pair(const int mr, int64_t kc, const float *restrict a,
                                                           int64_t as, const float *restrict b, int64_t bs,
                                                           int64_t bps, float *restrict c, int64_t ldc, int n,
                                                           float alpha, float beta, const float *rb,
                                                           const ukr_tail *t) {
    __m256 acc[FEW_MR][4];
#pragma GCC unroll 2
    for (int r = 0; r < FEW_MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) acc[r][v] = _mm256_setzero_ps();
    int64_t p = 0;
#pragma GCC unroll 2
    for (; p < kc; p++) {
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        const __m256 b2 = _mm256_loadu_ps(b + bps), b3 = _mm256_loadu_ps(b + bps + 8);
#pragma GCC unroll 2
        for (int r = 0; r < mr; r++) {
            const __m256 ar = _mm256_broadcast_ss(a + r);
            acc[r][0] = _mm256_fmadd_ps(ar, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(ar, b1, acc[r][1]);
            acc[r][2] = _mm256_fmadd_ps(ar, b2, acc[r][2]);
            acc[r][3] = _mm256_fmadd_ps(ar, b3, acc[r][3]);
        }
        a += as;
        b += bs;
    }
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    const __m256 lo = _mm256_set1_ps(t ? t->lo : 0.0f), hi = _mm256_set1_ps(t ? t->hi : 0.0f);
    const __m256 q0 = _mm256_set1_ps(t ? t->p0 : 0.0f), q1 = _mm256_set1_ps(t ? t->p1 : 0.0f);
    const int ak = t ? t->act : KN_GEMM_ACT_NONE;
    const float *ad = t ? t->add : NULL;
    const __m256i m2 = mask8(n - 16), m3 = mask8(n - 24);
#pragma GCC unroll 2
    for (int r = 0; r < mr; r++) {
        float *cr = c + r * ldc;
        const __m256 br = rb ? _mm256_set1_ps(rb[r]) : _mm256_setzero_ps();
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            /* the first panel whole (plain loads and stores), the second to n */
            const __m256i mv = v == 2 ? m2 : m3;
            __m256 x = _mm256_fmadd_ps(va, acc[r][v], br);
            if (v < 2) {
                if (beta != 0.0f) x = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr + 8 * v), x);
                if (ad) x = _mm256_add_ps(x, _mm256_loadu_ps(ad + r * t->ld + 8 * v));
                if (t) x = tail_act8(x, ak, q0, q1, lo, hi);
                _mm256_storeu_ps(cr + 8 * v, x);
            } else {
                if (beta != 0.0f) x = _mm256_fmadd_ps(vb, _mm256_maskload_ps(cr + 8 * v, mv), x);
                if (ad) x = _mm256_add_ps(x, _mm256_maskload_ps(ad + r * t->ld + 8 * v, mv));
                if (t) x = tail_act8(x, ak, q0, q1, lo, hi);
                _mm256_maskstore_ps(cr + 8 * v, mv, x);
            }
        }
    }
}

#define KN_UKR_PAIR 1
static void ukr_pair_any(int mr, int64_t kc, const float *a, int64_t as, const float *b, int64_t bs, int64_t bps,
                         float *c, int64_t ldc, int n, float alpha, float beta, const float *rb,
                         const ukr_tail *t) {
    if (mr == 2) ukr_pair(2, kc, a, as, b, bs, bps, c, ldc, n, alpha, beta, rb, t);
    else if (mr == 1) ukr_pair(1, kc, a, as, b, bs, bps, c, ldc, n, alpha, beta, rb, t);
}

/* The last n <= 8 columns of a packed B panel (NR floats a step of K), for two
 * MR-row panels of packed A at once (a0, a1: MR rows each, MR apart a step). ukr's one-vector
 * case (6 rows) keeps 6 chains of FMAs that wait on the FMA's latency (4 cycles, 2 a cycle: 3/4 of
 * the rate) and loads B masked; here 12 chains, one plain load of B a step. Each sum runs over
 * K in ukr's order and gets ukr's bias, beta, addend and clamp in ukr's order: C is bit for bit
 * what two ukr calls store. B is read whole (a packed panel has NR floats a step; its lanes past
 * n, zero or not, are never stored). On 14x14 planes (N = 196 = 12 NR + 4) this is the last panel of every
 * row panel (1 thread, Zen 3, one-node 1x1 convolutions, CPU time: 2-3% faster). */
#define KN_UKR_NARROW2 1
static void ukr_narrow2(int64_t kc, const float *restrict a0, const float *restrict a1, const float *restrict b,
                        float *restrict c, int64_t ldc, int n, float alpha, float beta, const float *rb,
                        const ukr_tail *t) {
    __m256 acc[2 * MR];
#pragma GCC unroll 12
    for (int r = 0; r < 2 * MR; r++) acc[r] = _mm256_setzero_ps();
#pragma GCC unroll 2
    for (int64_t p = 0; p < kc; p++) {
        const __m256 b0 = _mm256_loadu_ps(b);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(a0 + r), b0, acc[r]);
            acc[MR + r] = _mm256_fmadd_ps(_mm256_broadcast_ss(a1 + r), b0, acc[MR + r]);
        }
        a0 += MR;
        a1 += MR;
        b += NR;
    }
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    const __m256 lo = _mm256_set1_ps(t ? t->lo : 0.0f), hi = _mm256_set1_ps(t ? t->hi : 0.0f);
    const __m256 q0 = _mm256_set1_ps(t ? t->p0 : 0.0f), q1 = _mm256_set1_ps(t ? t->p1 : 0.0f);
    const int ak = t ? t->act : KN_GEMM_ACT_NONE;
    const float *ad = t ? t->add : NULL;
    const __m256i m0 = mask8(n);
#pragma GCC unroll 12
    for (int r = 0; r < 2 * MR; r++) {
        float *cr = c + r * ldc;
        const __m256 br = rb ? _mm256_set1_ps(rb[r]) : _mm256_setzero_ps();
        __m256 v0 = _mm256_fmadd_ps(va, acc[r], br);
        if (beta != 0.0f) v0 = _mm256_fmadd_ps(vb, _mm256_maskload_ps(cr, m0), v0);
        if (ad) v0 = _mm256_add_ps(v0, _mm256_maskload_ps(ad + r * t->ld, m0));
        if (t) v0 = tail_act8(v0, ak, q0, q1, lo, hi);
        _mm256_maskstore_ps(cr, m0, v0);
    }
}

#else /* portable C */

static void ukr_any(int mr, int64_t kc, const float *a, int64_t as, const float *b, int64_t bs, float *c,
                    int64_t ldc, int n, float alpha, float beta, const float *rb, const float *pf,
                    const ukr_tail *t) {
    (void)pf;
    float acc[MR][NR];
    memset(acc, 0, sizeof acc);
    if (n == NR) {
        for (int64_t p = 0; p < kc; p++) {
            for (int r = 0; r < MR; r++)
                for (int j = 0; j < NR; j++) acc[r][j] += a[r] * b[j];
            a += as;
            b += bs;
        }
    } else {
        for (int64_t p = 0; p < kc; p++) {
            for (int r = 0; r < MR; r++)
                for (int j = 0; j < n; j++) acc[r][j] += a[r] * b[j];
            a += as;
            b += bs;
        }
    }
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < n; j++) {
            float v = alpha * acc[r][j] + (beta == 0.0f ? 0.0f : beta * c[r * ldc + j]) + (rb ? rb[r] : 0.0f);
            if (t && t->add) v += t->add[r * t->ld + j];
            if (t) {
                v = tail_act1(t, v);
                v = v < t->lo ? t->lo : v;
                v = v > t->hi ? t->hi : v;
            }
            c[r * ldc + j] = v;
        }
}

#endif

/* ---------------------------------------------------------------- packing */

#if defined(KN_GEMM_AVX512)
/* the 16 x 16 transpose lives in vec_math.h (the depthwise convolution uses it too) */
static inline __attribute__((always_inline)) void tr16(const float *src, int64_t ld, int rows, int cols,
                                                       __m512 o[16]) {
    kn_v16_transpose(src, ld, rows, cols, o);
}
#endif

#if defined(KN_GEMM_AVX2)
/* 8 x 8 transpose of rows x cols floats at src (rows ld apart; rows past `rows` and columns past
 * `cols` read as zero): o[q] lane r = src[r*ld + q]. */
static inline __attribute__((always_inline)) void tr8(const float *src, int64_t ld, int rows, int cols,
                                                      __m256 o[8]) {
    const __m256i m = mask8(cols);
    __m256 r[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        r[i] = i >= rows ? _mm256_setzero_ps() : cols >= 8 ? _mm256_loadu_ps(src + i * ld) : _mm256_maskload_ps(src + i * ld, m);
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    o[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    o[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    o[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    o[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    o[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    o[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    o[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    o[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* the first MR (6) lanes of v to d */
static inline void store6(float *d, __m256 v) {
    _mm_storeu_ps(d, _mm256_castps256_ps128(v));
    _mm_storel_pi((__m64 *)(d + 4), _mm256_extractf128_ps(v, 1));
}
#endif

/* One MR-row panel of op(A): rows i0..i0+mr, depth p0..p0+kc, k-major, rows past mr zero. */
static void pack_a_panel(const float *A, int64_t lda, bool trans, int64_t i0, int mr, int64_t p0, int64_t kc,
                         float *dst) {
#if defined(KN_GEMM_AVX512)
    const __mmask16 keep = (__mmask16)((1u << MR) - 1);
    if (!trans) {
        const float *src = A + i0 * lda + p0;
        for (int64_t p = 0; p < kc; p += 16) {
            int kk = (int)min64(16, kc - p);
            __m512 o[16];
            tr16(src + p, lda, mr, kk, o);
            for (int q = 0; q < kk; q++) _mm512_mask_storeu_ps(dst + (p + q) * MR, keep, o[q]);
        }
    } else {
        const __mmask16 lm = mask16(mr);
        for (int64_t p = 0; p < kc; p++)
            _mm512_mask_storeu_ps(dst + p * MR, keep, _mm512_maskz_loadu_ps(lm, A + (p0 + p) * lda + i0));
    }
#elif defined(KN_GEMM_AVX2)
    /* 8 x 8 transposes: element by element, packing the activations' rows cost 13% of a batched
     * attention-scores product (12 x 128x64 @ 64x128) on the AVX2 EPYC */
    if (!trans) {
        const float *src = A + i0 * lda + p0;
        for (int64_t p = 0; p < kc; p += 8) {
            int kk = (int)min64(8, kc - p);
            __m256 o[8];
            tr8(src + p, lda, mr, kk, o);
            for (int q = 0; q < kk; q++) store6(dst + (p + q) * MR, o[q]);
        }
    } else {
        const __m256i lm = mask8(mr);
        for (int64_t p = 0; p < kc; p++) store6(dst + p * MR, _mm256_maskload_ps(A + (p0 + p) * lda + i0, lm));
    }
#else
    for (int64_t p = 0; p < kc; p++) {
        float *d = dst + p * MR;
        int r = 0;
        if (!trans)
            for (; r < mr; r++) d[r] = A[(i0 + r) * lda + p0 + p];
        else
            for (; r < mr; r++) d[r] = A[(p0 + p) * lda + i0 + r];
        for (; r < MR; r++) d[r] = 0.0f;
    }
#endif
}

static void pack_a(const float *A, int64_t lda, bool trans, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                   float *dst) {
    for (int64_t ir = 0; ir < mc; ir += MR) pack_a_panel(A, lda, trans, i0 + ir, (int)min64(MR, mc - ir), p0, kc, dst + ir * kc);
}

/* The whole of op(A), packed as run_gemm_tile would pack it, slice after slice of KC: slice pc
 * starts at pc * Mp (Mp = M rounded up to MR) and holds the MR-row panels of rows 0..M, so the
 * block at rows ic of slice pc is at pc * Mp + ic * kc. */
static int64_t padded_m(int64_t M) { return (M + MR - 1) / MR * MR; }

size_t kn_sgemm_packed_a_floats(int64_t M, int64_t K) { return (size_t)(padded_m(M) * K); }

void kn_sgemm_pack_a(const float *A, int64_t lda, bool trans_a, int64_t M, int64_t K, float *dst) {
    const int64_t Mp = padded_m(M);
    for (int64_t pc = 0; pc < K; pc += KC) pack_a(A, lda, trans_a, 0, M, pc, min64(KC, K - pc), dst + pc * Mp);
}

/* One NR-column panel of op(B): columns j0..j0+nr, depth p0..p0+kc, k-major, zero-padded. */
static void pack_b_panel(const float *B, int64_t ldb, bool trans, int64_t j0, int nr, int64_t p0, int64_t kc,
                         float *dst) {
#if defined(KN_GEMM_AVX512)
    if (!trans) {
        const __mmask16 m0 = mask16(nr), m1 = mask16(nr - 16);
        const float *src = B + p0 * ldb + j0;
        for (int64_t p = 0; p < kc; p++, src += ldb) {
            _mm512_storeu_ps(dst + p * NR, _mm512_maskz_loadu_ps(m0, src));
            _mm512_storeu_ps(dst + p * NR + 16, _mm512_maskz_loadu_ps(m1, src + 16));
        }
    } else {
        for (int h = 0; h < NR / 16; h++) {
            int rows = nr - h * 16;
            if (rows > 16) rows = 16;
            const float *src = B + (j0 + h * 16) * ldb + p0;
            for (int64_t p = 0; p < kc; p += 16) {
                int kk = (int)min64(16, kc - p);
                __m512 o[16];
                tr16(src + p, ldb, rows > 0 ? rows : 0, kk, o);
                for (int q = 0; q < kk; q++) _mm512_storeu_ps(dst + (p + q) * NR + h * 16, o[q]);
            }
        }
    }
#elif defined(KN_GEMM_AVX2)
    if (!trans) {
        const __m256i m0 = mask8(nr), m1 = mask8(nr - 8);
        const float *src = B + p0 * ldb + j0;
        for (int64_t p = 0; p < kc; p++, src += ldb) {
            _mm256_storeu_ps(dst + p * NR, _mm256_maskload_ps(src, m0));
            _mm256_storeu_ps(dst + p * NR + 8, _mm256_maskload_ps(src + 8, m1));
        }
    } else {
        for (int h = 0; h < NR / 8; h++) {
            int rows = nr - h * 8;
            if (rows > 8) rows = 8;
            const float *src = B + (j0 + h * 8) * ldb + p0;
            for (int64_t p = 0; p < kc; p += 8) {
                int kk = (int)min64(8, kc - p);
                __m256 o[8];
                tr8(src + p, ldb, rows > 0 ? rows : 0, kk, o);
                for (int q = 0; q < kk; q++) _mm256_storeu_ps(dst + (p + q) * NR + h * 8, o[q]);
            }
        }
    }
#else
    for (int64_t p = 0; p < kc; p++) {
        float *d = dst + p * NR;
        int j = 0;
        if (!trans)
            for (; j < nr; j++) d[j] = B[(p0 + p) * ldb + j0 + j];
        else
            for (; j < nr; j++) d[j] = B[(j0 + j) * ldb + p0 + p];
        for (; j < NR; j++) d[j] = 0.0f;
    }
#endif
}


#define PACK_B_ROWS 8
#if defined(KN_GEMM_AVX512) || defined(KN_GEMM_AVX2)
/* Rows [q0, q1) of the kc-deep slice at row p0 of plain (untransposed) B, columns [j0, j0 + nc),
 * into its panels (panel jr at dst + jr * kc, row q at q * NR): PACK_B_ROWS rows at a time across
 * every panel, so B is read by a few sequential streams (its rows may be long: a 1x1 conv's
 * planes) and each panel gets PACK_B_ROWS * NR contiguous floats: row by row, the stores went to
 * panels kc * NR floats apart, the same L1 set (1x1 256->64 on 56x56: 4-5% faster by 8 rows,
 * op_ab). AVX2: whole panels with plain loads; panel by panel (pack_b_panel) read one line of
 * each of kc rows a plane apart before moving on: 19% of a 1x1 256->64 convolution on 56x56
 * (perf, Zen 3). A part of the rows is what run_job's shared packing gives each task. */
static void pack_b_plain_rows(const float *B, int64_t ldb, int64_t j0, int64_t nc, int64_t p0, int64_t kc, int64_t q0,
                              int64_t q1, float *dst) {
    for (int64_t q = q0; q < q1; q += PACK_B_ROWS) {
        const int64_t qe = min64(q1, q + PACK_B_ROWS);
#if defined(KN_GEMM_AVX512)
        for (int64_t jr = 0; jr < nc; jr += NR) {
            const int64_t nr = min64(NR, nc - jr);
            const __mmask16 k0 = mask16(nr), k1 = mask16(nr - 16);
            for (int64_t p = q; p < qe; p++) {
                const float *src = B + (p0 + p) * ldb + j0;
                float *d = dst + jr * kc + p * NR;
                _mm512_storeu_ps(d, _mm512_maskz_loadu_ps(k0, src + jr));
                _mm512_storeu_ps(d + 16, _mm512_maskz_loadu_ps(k1, src + jr + 16));
            }
        }
#else
        int64_t jr = 0;
        for (; jr + NR <= nc; jr += NR)
            for (int64_t p = q; p < qe; p++) {
                const float *src = B + (p0 + p) * ldb + j0 + jr;
                float *d = dst + jr * kc + p * NR;
                _mm256_storeu_ps(d, _mm256_loadu_ps(src));
                _mm256_storeu_ps(d + 8, _mm256_loadu_ps(src + 8));
            }
        if (jr < nc) {
            const __m256i k0 = mask8(nc - jr), k1 = mask8(nc - jr - 8);
            for (int64_t p = q; p < qe; p++) {
                const float *src = B + (p0 + p) * ldb + j0 + jr;
                float *d = dst + jr * kc + p * NR;
                _mm256_storeu_ps(d, _mm256_maskload_ps(src, k0));
                _mm256_storeu_ps(d + 8, _mm256_maskload_ps(src + 8, k1));
            }
        }
#endif
    }
}
#else
static void pack_b_plain_rows(const float *B, int64_t ldb, int64_t j0, int64_t nc, int64_t p0, int64_t kc, int64_t q0,
                              int64_t q1, float *dst) {
    for (int64_t q = q0; q < q1; q++)
        for (int64_t jr = 0; jr < nc; jr += NR) {
            const int64_t nr = min64(NR, nc - jr);
            const float *src = B + (p0 + q) * ldb + j0 + jr;
            float *d = dst + jr * kc + q * NR;
            int64_t l = 0;
            for (; l < nr; l++) d[l] = src[l];
            for (; l < NR; l++) d[l] = 0.0f;
        }
}
#endif

static void pack_b(const float *B, int64_t ldb, bool trans, int64_t j0, int64_t nc, int64_t p0, int64_t kc,
                   float *dst) {
#if defined(KN_GEMM_AVX512) || defined(KN_GEMM_AVX2)
    if (!trans) {
        pack_b_plain_rows(B, ldb, j0, nc, p0, kc, 0, kc, dst);
        return;
    }
#endif
    for (int64_t jr = 0; jr < nc; jr += NR) pack_b_panel(B, ldb, trans, j0 + jr, (int)min64(NR, nc - jr), p0, kc, dst + jr * kc);
}

/* ---------------------------------------------------------------- GEMV and dot products */

static inline float finish(float acc, float alpha, float beta, const float *c) {
    return beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
}

#if defined(KN_GEMM_AVX512)
/* Sums each of 16 vectors: lane i of the result is the sum of the lanes of v[i]. */
static inline __m512 reduce16(const __m512 v[16]) {
    __m512 t[8], u[4];
    for (int i = 0; i < 8; i++)
        t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(t[2 * i]), b = _mm512_castps_pd(t[2 * i + 1]);
        u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    /* u[q] lane L holds the partial sums of v[4q..4q+3] over 128-bit lane L */
    __m512 v0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x44), _mm512_shuffle_f32x4(u[0], u[1], 0xEE));
    __m512 v1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x44), _mm512_shuffle_f32x4(u[2], u[3], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x88), _mm512_shuffle_f32x4(v0, v1, 0xDD));
}
#endif

/* out[j*os] = alpha * dot(rows + j*ld, v, K) + beta * out[j*os] for j < n (contiguous rows). */
static void dot_rows(const float *rows, int64_t ld, int64_t n, const float *v, int64_t K, float *out,
                     int64_t os, float alpha, float beta) {
    int64_t j = 0;
#if defined(KN_GEMM_AVX512)
    /* 16 rows at a time, summed by one 16-way reduction: with a short K (a squeeze-excite
     * layer's 48-wide input) a reduction per row cost more than the row's FMAs */
    for (; j + 16 <= n; j += 16) {
        const float *r0 = rows + j * ld;
        __m512 acc[16];
        for (int q = 0; q < 16; q++) acc[q] = _mm512_setzero_ps();
        for (int64_t k = 0; k < K; k += 16) {
            const __mmask16 m = mask16(K - k);
            const __m512 x = _mm512_maskz_loadu_ps(m, v + k);
#pragma GCC unroll 16
            for (int q = 0; q < 16; q++) acc[q] = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m, r0 + q * ld + k), acc[q]);
        }
        float s[16];
        _mm512_storeu_ps(s, reduce16(acc));
        for (int q = 0; q < 16; q++) out[(j + q) * os] = finish(s[q], alpha, beta, out + (j + q) * os);
    }
    for (; j + 4 <= n; j += 4) {
        const float *r0 = rows + j * ld, *r1 = r0 + ld, *r2 = r1 + ld, *r3 = r2 + ld;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t k = 0; k < K; k += 16) {
            __mmask16 m = mask16(K - k);
            __m512 x = _mm512_maskz_loadu_ps(m, v + k);
            a0 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m, r0 + k), a0);
            a1 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m, r1 + k), a1);
            a2 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m, r2 + k), a2);
            a3 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m, r3 + k), a3);
        }
        float s[4] = {_mm512_reduce_add_ps(a0), _mm512_reduce_add_ps(a1), _mm512_reduce_add_ps(a2),
                      _mm512_reduce_add_ps(a3)};
        for (int q = 0; q < 4; q++) out[(j + q) * os] = finish(s[q], alpha, beta, out + (j + q) * os);
    }
    for (; j < n; j++) {
        const float *r0 = rows + j * ld;
        __m512 a0 = _mm512_setzero_ps();
        for (int64_t k = 0; k < K; k += 16) {
            __mmask16 m = mask16(K - k);
            a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, v + k), _mm512_maskz_loadu_ps(m, r0 + k), a0);
        }
        out[j * os] = finish(_mm512_reduce_add_ps(a0), alpha, beta, out + j * os);
    }
#elif defined(KN_GEMM_AVX2)
    /* 8 rows at a time, summed by one 8-way reduction (hadd tree), then row by row: the portable
     * loop below is what a Gemm with an unpacked transposed B of one row (weights over 64 MB or
     * not constant) and a matrix times a column ran on AVX2 builds */
    for (; j + 8 <= n; j += 8) {
        const float *r0 = rows + j * ld;
        __m256 acc[8];
        for (int q = 0; q < 8; q++) acc[q] = _mm256_setzero_ps();
        int64_t k = 0;
        for (; k + 8 <= K; k += 8) {
            const __m256 x = _mm256_loadu_ps(v + k);
#pragma GCC unroll 8
            for (int q = 0; q < 8; q++) acc[q] = _mm256_fmadd_ps(x, _mm256_loadu_ps(r0 + q * ld + k), acc[q]);
        }
        if (k < K) {
            const __m256i m = mask8(K - k);
            const __m256 x = _mm256_maskload_ps(v + k, m);
#pragma GCC unroll 8
            for (int q = 0; q < 8; q++) acc[q] = _mm256_fmadd_ps(x, _mm256_maskload_ps(r0 + q * ld + k, m), acc[q]);
        }
        const __m256 t0 = _mm256_hadd_ps(acc[0], acc[1]), t1 = _mm256_hadd_ps(acc[2], acc[3]);
        const __m256 t2 = _mm256_hadd_ps(acc[4], acc[5]), t3 = _mm256_hadd_ps(acc[6], acc[7]);
        const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
        float sum[8];
        _mm256_storeu_ps(sum, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
        for (int q = 0; q < 8; q++) out[(j + q) * os] = finish(sum[q], alpha, beta, out + (j + q) * os);
    }
    for (; j < n; j++) {
        const float *r0 = rows + j * ld;
        __m256 a0 = _mm256_setzero_ps();
        for (int64_t k = 0; k < K; k += 8) {
            const __m256i m = mask8(K - k);
            a0 = _mm256_fmadd_ps(_mm256_maskload_ps(v + k, m), _mm256_maskload_ps(r0 + k, m), a0);
        }
        __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
        s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
        out[j * os] = finish(_mm_cvtss_f32(s4), alpha, beta, out + j * os);
    }
#else
    for (; j < n; j++) {
        const float *r0 = rows + j * ld;
        float s[8] = {0};
        int64_t k = 0;
        for (; k + 8 <= K; k += 8)
            for (int q = 0; q < 8; q++) s[q] += r0[k + q] * v[k + q];
        float acc = 0;
        for (; k < K; k++) acc += r0[k] * v[k];
        for (int q = 0; q < 8; q++) acc += s[q];
        out[j * os] = finish(acc, alpha, beta, out + j * os);
    }
#endif
}

#if defined(KN_GEMM_AVX512)

/* C[i][j] = alpha * dot(A row i, B row j) + beta * C[i][j] for i in [m0,m1), j in [n0,n1): both
 * operands contiguous along K (A untransposed, B transposed). 4 x 4 blocks; edge blocks repeat
 * their last row and drop the extra results. */
static void dot_block(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C, int64_t ldc,
                      int64_t m0, int64_t m1, int64_t n0, int64_t n1, float alpha, float beta) {
    /* j outer: four rows of B stay in L1 while every row of A (small: M <= DOT_MAX_M) passes */
    for (int64_t j = n0; j < n1; j += 4)
        for (int64_t i = m0; i < m1; i += 4) {
            const float *a[4], *b[4];
            for (int q = 0; q < 4; q++) {
                a[q] = A + min64(i + q, m1 - 1) * lda;
                b[q] = B + min64(j + q, n1 - 1) * ldb;
            }
            __m512 acc[16];
            for (int q = 0; q < 16; q++) acc[q] = _mm512_setzero_ps();
            for (int64_t k = 0; k < K; k += 16) {
                const __mmask16 m = mask16(K - k);
                __m512 va[4], vb[4];
                for (int q = 0; q < 4; q++) {
                    va[q] = _mm512_maskz_loadu_ps(m, a[q] + k);
                    vb[q] = _mm512_maskz_loadu_ps(m, b[q] + k);
                }
#pragma GCC unroll 4
                for (int x = 0; x < 4; x++)
#pragma GCC unroll 4
                    for (int y = 0; y < 4; y++) acc[x * 4 + y] = _mm512_fmadd_ps(va[x], vb[y], acc[x * 4 + y]);
            }
            float out[16];
            _mm512_storeu_ps(out, reduce16(acc));
            for (int x = 0; x < 4 && i + x < m1; x++)
                for (int y = 0; y < 4 && j + y < n1; y++) {
                    float *cp = C + (i + x) * ldc + j + y;
                    *cp = finish(out[x * 4 + y], alpha, beta, cp);
                }
        }
}
#endif

/* c[j] = alpha * sum_k a[k] * B[k*ldb + j] + beta * c[j] for j in [n0, n1). */
static void gemv_rows(const float *a, int64_t K, const float *B, int64_t ldb, float *c, int64_t n0, int64_t n1,
                      float alpha, float beta) {
#if defined(KN_GEMM_AVX512)
    int64_t j = n0;
    for (; j + 128 <= n1; j += 128) {
        __m512 acc[8];
        for (int v = 0; v < 8; v++) acc[v] = _mm512_setzero_ps();
        const float *row = B + j;
        for (int64_t k = 0; k < K; k++, row += ldb) {
            __m512 av = _mm512_set1_ps(a[k]);
#pragma GCC unroll 8
            for (int v = 0; v < 8; v++) acc[v] = _mm512_fmadd_ps(av, _mm512_loadu_ps(row + 16 * v), acc[v]);
        }
        for (int v = 0; v < 8; v++) {
            float *cv = c + j + 16 * v;
            __m512 r = _mm512_mul_ps(_mm512_set1_ps(alpha), acc[v]);
            if (beta != 0.0f) r = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(cv), r);
            _mm512_storeu_ps(cv, r);
        }
    }
    for (; j < n1; j += 32) {
        __mmask16 m0 = mask16(n1 - j), m1 = mask16(n1 - j - 16);
        __m512 a0 = _mm512_setzero_ps(), a1 = a0;
        const float *row = B + j;
        for (int64_t k = 0; k < K; k++, row += ldb) {
            __m512 av = _mm512_set1_ps(a[k]);
            a0 = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m0, row), a0);
            a1 = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m1, row + 16), a1);
        }
        __m512 r0 = _mm512_mul_ps(_mm512_set1_ps(alpha), a0), r1 = _mm512_mul_ps(_mm512_set1_ps(alpha), a1);
        if (beta != 0.0f) {
            r0 = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(m0, c + j), r0);
            r1 = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(m1, c + j + 16), r1);
        }
        _mm512_mask_storeu_ps(c + j, m0, r0);
        _mm512_mask_storeu_ps(c + j + 16, m1, r1);
    }
#elif defined(KN_GEMM_AVX2)
    /* the AVX-512 body at 8 lanes: 64 columns (8 sums) a block, then 16 at a time masked (the
     * portable loop made MatMul 1x768 @ 768x768 1.35x ONNX Runtime's time on the AVX2 EPYC) */
    int64_t j = n0;
    for (; j + 64 <= n1; j += 64) {
        __m256 acc[8];
        for (int v = 0; v < 8; v++) acc[v] = _mm256_setzero_ps();
        const float *row = B + j;
        for (int64_t k = 0; k < K; k++, row += ldb) {
            const __m256 av = _mm256_broadcast_ss(a + k);
#pragma GCC unroll 8
            for (int v = 0; v < 8; v++) acc[v] = _mm256_fmadd_ps(av, _mm256_loadu_ps(row + 8 * v), acc[v]);
        }
        for (int v = 0; v < 8; v++) {
            float *cv = c + j + 8 * v;
            __m256 r = _mm256_mul_ps(_mm256_set1_ps(alpha), acc[v]);
            if (beta != 0.0f) r = _mm256_fmadd_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(cv), r);
            _mm256_storeu_ps(cv, r);
        }
    }
    for (; j < n1; j += 16) {
        const __m256i m0 = mask8(n1 - j), m1 = mask8(n1 - j - 8);
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        const float *row = B + j;
        for (int64_t k = 0; k < K; k++, row += ldb) {
            const __m256 av = _mm256_broadcast_ss(a + k);
            a0 = _mm256_fmadd_ps(av, _mm256_maskload_ps(row, m0), a0);
            a1 = _mm256_fmadd_ps(av, _mm256_maskload_ps(row + 8, m1), a1);
        }
        __m256 r0 = _mm256_mul_ps(_mm256_set1_ps(alpha), a0), r1 = _mm256_mul_ps(_mm256_set1_ps(alpha), a1);
        if (beta != 0.0f) {
            r0 = _mm256_fmadd_ps(_mm256_set1_ps(beta), _mm256_maskload_ps(c + j, m0), r0);
            r1 = _mm256_fmadd_ps(_mm256_set1_ps(beta), _mm256_maskload_ps(c + j + 8, m1), r1);
        }
        _mm256_maskstore_ps(c + j, m0, r0);
        _mm256_maskstore_ps(c + j + 8, m1, r1);
    }
#else
    for (int64_t j0 = n0; j0 < n1; j0 += 64) {
        int64_t w = min64(64, n1 - j0);
        float acc[64] = {0};
        for (int64_t k = 0; k < K; k++) {
            const float *row = B + k * ldb + j0;
            float av = a[k];
            for (int64_t j = 0; j < w; j++) acc[j] += av * row[j];
        }
        for (int64_t j = 0; j < w; j++) c[j0 + j] = finish(acc[j], alpha, beta, c + j0 + j);
    }
#endif
}

/* ---------------------------------------------------------------- tiles and threads */

typedef enum { PATH_GEMM, PATH_ROW, PATH_COL, PATH_DOT, PATH_SWAP } gemm_path;

typedef struct job {
    const kn_sgemm_batch *p;
    gemm_path path;
    int64_t tm, tn;           /* tile grid per product */
    int64_t units_m, units_n; /* rows/columns in units of um/un */
    int64_t um, un;
    const float *a_deep; /* op(A) of every product packed for run_packed_tile (kn_sgemm_run), or NULL */
    const float *b_shared; /* transposed path: op(B) of every product packed once for all tiles, or NULL */
    /* transposed path: each tile's K in kp parts (swap_kparts; 1: whole), part q of tile u computed
     * into parts + (u * kp + q) * part_floats; the last part of a tile to finish (part_done[u])
     * sums them in the order of the parts and stores C */
    int64_t kp, part_floats;
    float *parts;
    int *part_done;
    bool pk_deep; /* B packed whole: K a slice of KCB at a time in every tile (pk_deep_product, run_job) */
    int failed;
} job;

/* The whole of op(B): slice ps (KCB deep) starts at ps * Np (Np = N rounded up to NR) and holds
 * the NR-column panels of every column, each KCB x NR, one after another (panels a power-of-two
 * stride apart would share cache sets); bpk_panel finds a panel's part of KC. */
static int64_t padded_n(int64_t N) { return (N + NR - 1) / NR * NR; }

size_t kn_sgemm_packed_b_floats(int64_t N, int64_t K) { return (size_t)(padded_n(N) * K); }

void kn_sgemm_pack_b_full(const float *B, int64_t ldb, bool trans_b, int64_t N, int64_t K, float *dst) {
    const int64_t Np = padded_n(N);
    for (int64_t ps = 0; ps < K; ps += KCB) pack_b(B, ldb, trans_b, 0, N, ps, min64(KCB, K - ps), dst + ps * Np);
}

/* The kc x NR part at depth pc (a multiple of KC) of the panel at column j (a multiple of NR) of
 * an operand packed whole (Np columns padded, K deep), rows NR floats apart. */
static inline const float *bpk_panel(const float *P, int64_t Np, int64_t K, int64_t pc, int64_t j) {
    const int64_t ps = pc / KCB * KCB;
    return P + ps * Np + j * min64(KCB, K - ps) + (pc - ps) * NR;
}

/* The GEMM's switches for tests and measurements, KILN_GEMM_<NAME>=0 turning a path off. getenv
 * scans the whole environment, and called for every tile it was 1.5-1.9% of a batch-32 Winograd
 * convolution's samples (perf, Zen 3): the switches that tests set and unset between products in
 * one process are read once per kn_sgemm_run / kn_sgemm_tasks (switches_refresh) and the tiles
 * read that copy; the measurement-only ones are read once per process (switch_once). */
static bool env_not_zero(const char *name) {
    const char *e = getenv(name);
    return !e || *e != '0';
}
static bool switch_once(int *cache, const char *name) { /* *cache: -1 not read yet, else 0 or 1 */
    int v = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (v < 0) {
        v = env_not_zero(name);
        __atomic_store_n(cache, v, __ATOMIC_RELAXED);
    }
    return v;
}
static int packed_b_switch = 1, rows_first_switch = 1;
static void switches_refresh(void) {
    __atomic_store_n(&packed_b_switch, env_not_zero("KILN_GEMM_PACKED_B"), __ATOMIC_RELAXED);
    __atomic_store_n(&rows_first_switch, env_not_zero("KILN_GEMM_ROWS_FIRST"), __ATOMIC_RELAXED);
}

/* KILN_GEMM_PACKED_B=0: products with B prepacked run the blocked order as others do */
static bool pk_on(void) { return __atomic_load_n(&packed_b_switch, __ATOMIC_RELAXED); }

#if defined(KN_UKR_NARROW2)
/* KILN_GEMM_NARROW2=0: a panel's last n <= 8 columns one row panel a call (ukr) */
static bool narrow2_on(void) {
    static int on = -1;
    return switch_once(&on, "KILN_GEMM_NARROW2");
}
#endif

/* KILN_GEMM_ROWS_FIRST=0: the usual order everywhere */
static bool rows_first_on(void) { return __atomic_load_n(&rows_first_switch, __ATOMIC_RELAXED); }

/* Whether a product with A prepacked runs rows first (run_rows_first). AVX2: only where K is one
 * slice. Rows first streams the block's packed B from L2 once per panel of MR rows, 64 bytes per
 * step of K, where the usual order keeps B's panel in L1 and streams A's (24 bytes a step);
 * Zen 3's L2 (512 KB) holds little more than one block. 1 thread, Zen 3, GEMM alone, 1x1
 * convolutions of ResNet-50 (GFLOP/s, rows first -> usual order): K = 512 and 1024 on 14x14 and
 * 28x28 81-87 -> 86-93; K = 64 and 256 on 56x56 about even or rows first ahead (64->256 with
 * its residual 79-82 -> 67-80). */
#if defined(KN_GEMM_AVX2) && !defined(RF_MAX_K)
#define RF_MAX_K KC
#endif
static bool rows_first_suits(const kn_sgemm_batch *p) {
#if defined(RF_MAX_K)
    if (p->K > RF_MAX_K) return false;
#endif
    return rows_first_on();
}

/* The tail (c_add, clamp) of product op for C's block at rows i0, columns j0, or NULL (none). */
static const ukr_tail *tail_at(const kn_sgemm_batch *p, int64_t op, int64_t i0, int64_t j0, ukr_tail *t) {
    if (!p->c_add && !p->clamp) return NULL;
    t->add = p->c_add ? p->c_add[op] + i0 * p->ldc_add + j0 : NULL;
    t->ld = p->ldc_add;
    t->lo = p->clamp ? p->clamp_lo : -INFINITY;
    t->hi = p->clamp ? p->clamp_hi : INFINITY;
    t->act = p->clamp ? p->act : KN_GEMM_ACT_NONE;
    t->p0 = p->act_p0;
    t->p1 = p->act_p1;
    return t;
}

/* The tail on C already stored (the paths whose kernels do not take it): rows [i0, i0+m),
 * columns [j0, j0+n) of product op. */
static void apply_tail(const kn_sgemm_batch *p, int64_t op, int64_t i0, int64_t j0, int64_t m, int64_t n, float *c,
                       int64_t ldc) {
    ukr_tail tb;
    const ukr_tail *t = tail_at(p, op, i0, j0, &tb);
    if (!t) return;
    for (int64_t r = 0; r < m; r++) {
        float *cr = c + r * ldc;
        const float *ad = t->add ? t->add + r * t->ld : NULL;
        int64_t j = 0;
#if defined(KN_GEMM_AVX512)
        const __m512 lo = _mm512_set1_ps(t->lo), hi = _mm512_set1_ps(t->hi);
        const __m512 q0 = _mm512_set1_ps(t->p0), q1 = _mm512_set1_ps(t->p1);
        for (; j < n; j += 16) {
            const __mmask16 m16 = mask16(n - j);
            __m512 v = _mm512_maskz_loadu_ps(m16, cr + j);
            if (ad) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m16, ad + j));
            _mm512_mask_storeu_ps(cr + j, m16, tail_act16(v, t->act, q0, q1, lo, hi));
        }
#endif
        for (; j < n; j++) {
            float v = cr[j] + (ad ? ad[j] : 0.0f);
            v = tail_act1(t, v);
            v = v < t->lo ? t->lo : v;
            cr[j] = v > t->hi ? t->hi : v;
        }
    }
}

/* Rows first (B packed here, A prepacked): the tile's columns in blocks of ncb whose packed B,
 * every slice of K, stays in L2; over a block, each MR-row panel of C runs across every column
 * with all the slices of K innermost, so a block of C is finished while in L1 (no partial sums
 * through memory), and C, its addend (a residual) and the epilogue go by whole rows, a few
 * sequential streams, where the usual order writes MC rows at once, a column strip at a time
 * (pointwise convolutions, where C is as large as B: 64->256 on 56x56 writes 3.2 MB). */
#if !defined(RF_B_FLOATS) && defined(KN_GEMM_AVX2)
/* Zen 3's L2 is 512 KB: a block of half of it (K = 256: 256 columns), where 512 KB made B come
 * from L3 for every row panel (1x1 256->64 and 256->128 on 56x56 about 3% faster, 1 thread) */
#define RF_B_FLOATS (64 * 1024)
#endif
#ifndef RF_B_FLOATS
#define RF_B_FLOATS (128 * 1024) /* packed B of a block: 512 KB, a quarter of the L2 */
#endif
#define RF_MIN_NC 64
#define RF_PF_LINES 4
static int64_t rows_first_ncb(const kn_sgemm_batch *p, int64_t n) {
    int64_t ncb = RF_B_FLOATS / p->K / NR * NR;
    if (ncb > NC) ncb = NC;
    if (ncb > n) ncb = (n + NR - 1) / NR * NR;
    if (ncb < RF_MIN_NC && ncb < n) return 0;
    return (size_t)(ncb * p->K) <= WS_FLOATS ? ncb : 0;
}

static void run_rows_first(const kn_sgemm_batch *p, int64_t op, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                           int64_t ncb, float *Bp, const float *b_shared) {
    const float *B = p->b ? p->b[op] : NULL;
    const float *Apk = p->a_packed[op];
    const float *bias = p->row_bias ? p->row_bias[op] : NULL;
    const int64_t Mp = padded_m(p->M), K = p->K;
    float *C = p->c[op];
    const bool plain_b = !p->pack_b && !p->trans_b;
    for (int64_t jc = n0; jc < n1; jc += ncb) {
        const int64_t nc = min64(ncb, n1 - jc), ncp = (nc + NR - 1) / NR * NR;
#if defined(KN_UKR_PACKS)
        /* B untransposed: the first rows' calls read it in place and pack it as they go (perf of
         * 1x1 256->64 on 56x56: packing B apart was 17% of the node, waiting on memory; op_ab
         * over the 1x1 sweep: 2-11% faster) */
        const bool fused_pack = plain_b && !b_shared;
#else
        const bool fused_pack = false;
#endif
        /* b_shared: B of all the columns (one block) packed once for all the tiles (run_job) */
        if (b_shared) Bp = (float *)b_shared;
        for (int64_t pc = 0; pc < K && !fused_pack && !b_shared; pc += KC) {
            const int64_t kc = min64(KC, K - pc);
            if (p->pack_b) p->pack_b(p->pack_ctx, op, pc, kc, jc, nc, Bp + pc * ncp);
            else pack_b(B, p->ldb, p->trans_b, jc, nc, pc, kc, Bp + pc * ncp);
        }
        /* Packed apart (the micro-kernel that packs is AVX-512's): the next block's part of B (K
         * rows, from memory: a convolution's input planes) is started towards L2 while this block
         * computes: the first RF_PF_LINES lines of each of its rows, spread over the block's
         * micro-kernel calls, and the hardware's streams take the rows on (op_ab: 2-4 lines a
         * row 3% faster on 56x56 and 28x28 1x1s, whole rows 3% slower) */
        const int64_t jn = jc + ncb, nn = plain_b && !fused_pack && jn < n1 ? min64(ncb, n1 - jn) : 0;
        const int64_t row_lines = nn ? min64(RF_PF_LINES, (nn * (int64_t)sizeof(float) + 63) / 64 + 1) : 0;
        const int64_t calls = ((m1 - m0 + MR - 1) / MR) * ((nc + NR - 1) / NR);
        const int64_t per_call = (K * row_lines + calls - 1) / calls;
        int64_t pf_row = 0, pf_line = 0;
        for (int64_t i = m0; i < m1; i += MR) {
            const int mr = (int)min64(MR, m1 - i);
            float *cr = C + i * p->ldc;
            for (int64_t jr = 0; jr < nc; jr += NR) {
                const int n = (int)min64(NR, nc - jr);
                for (int64_t q = 0; q < per_call && pf_row < K; q++) {
                    __builtin_prefetch((const char *)(B + pf_row * p->ldb + jn) + 64 * pf_line, 0, 2);
                    if (++pf_line == row_lines) pf_line = 0, pf_row++;
                }
                ukr_tail tb;
                const ukr_tail *t = tail_at(p, op, i, jc + jr, &tb);
#if defined(KN_UKR_NARROW2)
                /* the last n <= 8 columns of two whole row panels in one call (ukr_narrow2), made
                 * on the first of the two; the second skips them (each block of C is final after
                 * its call: the epilogue below still sees it whole) */
                if (n <= 8 && !fused_pack && narrow2_on()) {
                    const bool first = (i - m0) / MR % 2 == 0;
                    if (first && i + 2 * MR <= m1) {
                        for (int64_t pc = 0; pc < K; pc += KC) {
                            const int64_t kc = min64(KC, K - pc);
                            const float *a = Apk + pc * Mp + i * kc;
                            ukr_narrow2(kc, a, a + MR * kc, Bp + pc * ncp + jr * kc, cr + jc + jr, p->ldc, n,
                                        p->alpha, pc == 0 ? p->beta : 1.0f, bias && pc == 0 ? bias + i : NULL,
                                        pc + kc == K ? t : NULL);
                        }
                        continue;
                    }
                    if (!first && mr == MR) continue;
                }
#endif
                for (int64_t pc = 0; pc < K; pc += KC) {
                    const int64_t kc = min64(KC, K - pc);
                    const float *a = Apk + pc * Mp + i * kc;
#if defined(KN_UKR_PACKS)
                    if (fused_pack && i == m0) {
                        /* the next panel's rows: this block's next, else the next block's first */
                        const int64_t jnext = jr + NR < nc ? jc + jr + NR : jn < n1 ? jn : jc + jr;
                        ukr_pack_any(mr, kc, a, MR, B + pc * p->ldb + jc + jr, p->ldb, cr + jc + jr, p->ldc, n,
                                     p->alpha, pc == 0 ? p->beta : 1.0f, bias && pc == 0 ? bias + i : NULL,
                                     B + pc * p->ldb + jnext, pc + kc == K ? t : NULL, Bp + pc * ncp + jr * kc);
                        continue;
                    }
#endif
                    /* A (prepacked weights) from memory: the calls on the first panel bring the next rows' in */
                    ukr_any(mr, kc, a, MR, Bp + pc * ncp + jr * kc, NR, cr + jc + jr, p->ldc, n, p->alpha,
                            pc == 0 ? p->beta : 1.0f, bias && pc == 0 ? bias + i : NULL,
                            jr == 0 && i + MR < m1 ? a + MR * kc : a, pc + kc == K ? t : NULL);
                }
            }
            if (p->epilogue) p->epilogue(p->epilogue_ctx, op, i, jc, mr, nc, cr + jc, p->ldc);
        }
    }
}

/* B packed whole (see PK_C_FLOATS), A packed whole by kn_sgemm_run for all the tiles (a_deep: in
 * B's layout of slices of KCB, rows for columns: slice ps at ps * Mp, the panel of rows i at
 * i * kcb in it) or here, one slice at a time into ws: for each slice of K, each NR-column panel of
 * B, each MR-row panel of A. Deep (C over PK_C_FLOATS): slices of KCB, one micro-kernel call each,
 * so the block of C is stored once per KCB (once in all at K = 768) where the blocked order stored
 * C's partial sums once per KC: at 197 x 3072 x 768 (ViT-B/16) C is 2.4 MB, three times through
 * L3; B's panel (KCB x NR, 96 KB) comes from L2 for each panel of rows. Else slices of KC, B's
 * panel (32 KB) from L1. Rows are not blocked: B, from memory, is read once (rows in blocks of 192
 * read it twice at 197 rows, the second time for 5). The first two calls of each panel bring the
 * next panel into L2. m0 is a multiple of MR; without a_deep, the tile's rows fit ws
 * (pk_tile_fits). */
/* Whether product p (B packed whole, A not prepacked) runs K a slice of KCB at a time (deep) rather
 * than KC. Decided for the whole product, never per tile: a slice's partial sums are rounded into
 * C at every step, so tiles stepping KCB and KC store other last bits, and the tiles' sizes depend
 * on the threads (29 x 37 x 1000 gave other bits at 16 threads than at 1, its tiles of fewer than
 * 16 rows stepping KCB). A deep product whose rows do not fit the workspace at KCB reads A packed
 * whole (run_job, a_deep) at every thread count, else steps KC. */
static bool pk_deep_product(const kn_sgemm_batch *p) {
    /* fewer than 16 rows (a decoder's or recurrent cell's step): each panel's slice of KCB in one
     * call per row panel, streamed once, where slices of KC visited each 48 KB panel three times in
     * 16 KB pieces; such products are bound by reading B (Zen 3, 1 thread: 4 x 768 @ 768 x 768
     * 0.10 -> 0.064 ms, 8 x 512 @ 2048 x 512^T 0.30 -> 0.24, 12 x 768 @ 768 x 3072 0.97 -> 0.80) */
    if (p->M < 16) return true;
    return p->M * p->N > PK_C_FLOATS;
}

/* Whether a tile of `rows` rows packs its part of A in the workspace at the product's step */
static bool pk_tile_fits(int64_t rows, bool deep) {
    return (size_t)((rows + MR - 1) / MR * MR) * (deep ? KCB : KC) <= WS_FLOATS;
}

#if defined(KN_UKR_A_IN_PLACE)
/* Whether a block of rows x cols (A not transposed, not prepacked) reads A in place rather than
 * packing it (ukr_ain_any): where B has at most A_IN_PLACE_MAX_N columns, so that the packed copy
 * would be read back by few panels. KILN_GEMM_A_IN_PLACE=0/1 forces it off or on (tests,
 * measurements). */
static int a_in_place_env = -2; /* -2: not read yet; -1: unset; 0 or 1 */
static bool pk_a_in_place(int64_t rows, int64_t cols) {
    int e = __atomic_load_n(&a_in_place_env, __ATOMIC_RELAXED);
    if (e == -2) {
        const char *v = getenv("KILN_GEMM_A_IN_PLACE");
        e = v && *v ? (*v != '0') : -1;
        __atomic_store_n(&a_in_place_env, e, __ATOMIC_RELAXED);
    }
    if (rows <= FEW_MR) return false; /* ukr_pair reads the packed panel */
    if (e >= 0) return e;
    return cols <= A_IN_PLACE_MAX_N;
}
#endif

#if defined(KN_UKR_PAIR)
/* KILN_GEMM_FEW_ROWS_PAIR=0: few rows one panel a call (ukr_any), as before ukr_pair (measurements) */
static int pair_env = -1;
static bool pair_on(void) { return switch_once(&pair_env, "KILN_GEMM_FEW_ROWS_PAIR"); }
#endif

static void run_packed_tile(const kn_sgemm_batch *p, int64_t op, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                            float *ws, const float *a_deep, bool deep) {
    const float *Bpk = p->b_packed[op];
    const float *bias = p->row_bias ? p->row_bias[op] : NULL;
    const int64_t Np = padded_n(p->N), Mp = padded_m(p->M), K = p->K;
    const int64_t step = deep ? KCB : KC;
    float *C = p->c[op];
    for (int64_t k0 = 0; k0 < K; k0 += step) {
        const int64_t kc = min64(step, K - k0), ps = k0 / KCB * KCB, kcb = min64(KCB, K - ps);
#if defined(KN_UKR_A_IN_PLACE)
        const int a_in_place = !a_deep && !p->trans_a && pk_a_in_place(m1 - m0, n1 - n0);
#else
        const int a_in_place = 0;
#endif
        if (!a_deep && !a_in_place) pack_a(p->a[op], p->lda, p->trans_a, m0, m1 - m0, k0, kc, ws);
        for (int64_t j = n0; j < n1; j += NR) {
            const int n = (int)min64(NR, n1 - j);
            const float *b = bpk_panel(Bpk, Np, K, k0, j);
            const float *bn = j + NR < n1 ? bpk_panel(Bpk, Np, K, k0, j + NR) : NULL;
#if defined(KN_GEMM_AVX2) && PK_PF_SPREAD
            /* AVX2's micro-kernel takes no far prefetch: the next panel of B (kc lines, from
             * memory) comes in a share before each call on this one, where the first call on each
             * panel waited on memory with only the kernel's 16 lines ahead in flight (BERT-base's
             * 128 x 768 x 768 and x 3072 products 3.5% faster, Zen 3). Not for slices of KCB: the
             * next 48 KB panel pushed the current one, read from L2, out (128 x 3072 x 768 1-3%
             * slower) */
            const int64_t calls = (m1 - m0 + MR - 1) / MR,
                          per_call = bn && step == KC ? (kc + calls - 1) / calls : 0;
            int64_t pf_line = 0;
#endif
#if defined(KN_UKR_PAIR)
            /* few rows: this panel and the next in one call (ukr_pair) */
            if (m1 - m0 <= FEW_MR && bn && pair_on()) {
                const float *a = a_deep ? a_deep + ps * Mp + m0 * kcb + (k0 - ps) * MR : ws;
                ukr_tail tb;
                const ukr_tail *t = k0 + kc == K ? tail_at(p, op, m0, j, &tb) : NULL;
                const int n2 = (int)min64(2 * NR, n1 - j);
                ukr_pair_any((int)(m1 - m0), kc, a, MR, b, NR, bn - b, C + m0 * p->ldc + j, p->ldc, n2, p->alpha,
                             k0 == 0 ? p->beta : 1.0f, bias && k0 == 0 ? bias + m0 : NULL, t);
                if (p->epilogue && k0 + kc == K)
                    p->epilogue(p->epilogue_ctx, op, m0, j, m1 - m0, n2, C + m0 * p->ldc + j, p->ldc);
                j += NR;
                continue;
            }
#endif
            for (int64_t i = m0; i < m1; i += MR) {
                const int mr = (int)min64(MR, m1 - i);
                const int64_t call = (i - m0) / MR;
#if defined(KN_GEMM_AVX2) && PK_PF_SPREAD
                for (int64_t e = min64(kc, pf_line + per_call); pf_line < e; pf_line++)
                    _mm_prefetch((const char *)(bn + pf_line * NR), _MM_HINT_T0);
#endif
                const float *a = a_deep ? a_deep + ps * Mp + i * kcb + (k0 - ps) * MR : ws + (i - m0) * kc;
                ukr_tail tb;
                const ukr_tail *t = k0 + kc == K ? tail_at(p, op, i, j, &tb) : NULL;
#if defined(KN_UKR_A_IN_PLACE)
                if (a_in_place) {
                    ukr_ain_any(mr, kc, p->a[op] + i * p->lda + k0, p->lda, b, NR, C + i * p->ldc + j, p->ldc, n,
                                p->alpha, k0 == 0 ? p->beta : 1.0f, bias && k0 == 0 ? bias + i : NULL,
                                bn && call < 2 ? bn + call * kc * (NR / 2) : b, t);
                    continue;
                }
#endif
#if defined(KN_GEMM_AVX2)
                /* the tile's last 1 or 2 rows (M = 98, 128, 512): this panel's and the next's in one call
                 * (ukr_pair: 4 or 8 chains of FMAs, where ukr's 2 or 4 waited on the FMA's latency),
                 * made on the first of the two; the same sums and stores as ukr's */
                if (mr <= FEW_MR && i > m0) {
                    if ((j - n0) / NR % 2 == 1) continue; /* made with the panel before */
                    if (bn) {
                        ukr_pair_any(mr, kc, a, MR, b, NR, bn - b, C + i * p->ldc + j, p->ldc, (int)min64(2 * NR, n1 - j),
                                     p->alpha, k0 == 0 ? p->beta : 1.0f, bias && k0 == 0 ? bias + i : NULL, t);
                        continue;
                    }
                }
#endif
                ukr_any(mr, kc, a, MR, b, NR, C + i * p->ldc + j, p->ldc, n, p->alpha, k0 == 0 ? p->beta : 1.0f,
                        bias && k0 == 0 ? bias + i : NULL, bn && call < 2 ? bn + call * kc * (NR / 2) : a, t);
            }
            if (p->epilogue && k0 + kc == K)
                p->epilogue(p->epilogue_ctx, op, m0, j, m1 - m0, n, C + m0 * p->ldc + j, p->ldc);
        }
    }
}

/* Whether the blocked path's tile of rows x cols reads B in place, unpacked (plain B, few rows). */
static bool b_in_place(const kn_sgemm_batch *p, int64_t rows, int64_t cols) {
    return !p->pack_b && !p->trans_b && (rows <= DIRECT_B_MAX_M || (!p->a_packed && p->K * cols <= DIRECT_B_L1_FLOATS));
}

/* b_shared: op(B) of product op packed whole by run_job for all the tiles (pack_b_shared_range's
 * layout: slice pc at pc * padded_n(N), the panel of column j at j * kc in it), or NULL */
/* deep: the product's step of K on B packed whole (job.pk_deep) */
static void run_gemm_tile(const kn_sgemm_batch *p, int64_t op, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                          float *ws, const float *a_deep, const float *b_shared, bool deep) {
    /* a tile that does not fit steps KC in the blocked order below: the same sums as
     * run_packed_tile's at KC (a deep product's tiles always fit or read a_deep: run_job) */
    if (p->b_packed && !p->pack_b && !p->a_packed && (a_deep || pk_tile_fits(m1 - m0, deep)) && pk_on()) {
        run_packed_tile(p, op, m0, m1, n0, n1, ws, a_deep, deep);
        return;
    }
    const float *A = p->a[op];
    const float *B = p->b ? p->b[op] : NULL;
    const float *A_packed = p->a_packed ? p->a_packed[op] : NULL;
    const float *B_packed = p->b_packed && !p->pack_b ? p->b_packed[op] : NULL;
    const float *bias = p->row_bias ? p->row_bias[op] : NULL;
    const int64_t Mp = padded_m(p->M);
    float *C = p->c[op];
    float *Aws = ws, *Bp = ws + (size_t)MC * KC;
    const float *Ap = Aws;
    const bool direct = !B_packed && b_in_place(p, m1 - m0, n1 - n0);
    if (A_packed && !direct && !B_packed && rows_first_suits(p)) {
        const int64_t ncb = rows_first_ncb(p, n1 - n0);
        if (ncb) {
            run_rows_first(p, op, m0, m1, n0, n1, ncb, ws, b_shared);
            return;
        }
    }
    /* Columns of B per block. Few rows (one block of A) with B packed here: the packed block is
     * read back by only a few micro-kernel calls per panel, so it should come back from L2, not
     * L3: NC_FEW_ROWS columns. B prepacked or read in place: no block to keep in cache, and every
     * block packs A again (a transposing copy: 256 columns made BERT's 128 x 3072 x 768 8% slower),
     * so the whole tile at once. */
    const int64_t ncb = B_packed || direct ? n1 - n0 : m1 - m0 <= MC ? NC_FEW_ROWS : NC;
    for (int64_t jc = n0; jc < n1; jc += ncb) {
        int64_t nc = min64(ncb, n1 - jc);
        for (int64_t pc = 0; pc < p->K; pc += KC) {
            int64_t kc = min64(KC, p->K - pc);
            float beta = pc == 0 ? p->beta : 1.0f;
            if (b_shared) Bp = (float *)b_shared + pc * padded_n(p->N) + jc * kc;
            else if (p->pack_b) p->pack_b(p->pack_ctx, op, pc, kc, jc, nc, Bp);
            else if (!direct && !B_packed) pack_b(B, p->ldb, p->trans_b, jc, nc, pc, kc, Bp);
            for (int64_t ic = m0; ic < m1; ic += MC) {
                int64_t mc = min64(MC, m1 - ic);
#if defined(KN_UKR_A_IN_PLACE)
                const int a_in_place = !A_packed && !p->trans_a && pk_a_in_place(mc, nc);
#else
                const int a_in_place = 0;
#endif
                if (A_packed) {
                    Ap = A_packed + pc * Mp + ic * kc; /* ic is a multiple of MR */
                } else if (!a_in_place) {
                    pack_a(A, p->lda, p->trans_a, ic, mc, pc, kc, Aws);
                    Ap = Aws;
                }
                for (int64_t jr = 0; jr < nc; jr += NR) {
                    int n = (int)min64(NR, nc - jr);
                    /* jc and jr are multiples of NR: the panel at columns jc + jr of slice pc */
                    const float *bp = B_packed ? bpk_panel(B_packed, padded_n(p->N), p->K, pc, jc + jr)
                                      : direct ? B + pc * p->ldb + jc + jr
                                               : Bp + jr * kc;
                    int64_t bs = direct ? p->ldb : NR;
                    float *cp = C + ic * p->ldc + jc + jr;
                    /* Operands prepacked once per session come from memory. Prepacked B: the first
                     * two calls prefetch half each of the next panel (NR * kc floats, 2 * kc lines;
                     * BERT-base's 128 x 768 x 3072 products read theirs 20% slower without). Else
                     * prepacked A, on the first panel of B: each call prefetches the next row panel
                     * (MR * kc floats, fewer than the kc lines it fetches). */
                    const float *nextb =
                        B_packed && jr + NR < nc ? bpk_panel(B_packed, padded_n(p->N), p->K, pc, jc + jr + NR) : NULL;
                    for (int64_t ir = 0; ir < mc; ir += MR) {
                        ukr_tail tb;
                        const ukr_tail *t = pc + kc == p->K ? tail_at(p, op, ic + ir, jc + jr, &tb) : NULL;
#if defined(KN_UKR_NARROW2)
                        /* two whole row panels' last n <= 8 columns of a packed panel in one call */
                        if (n <= 8 && bs == NR && !a_in_place && ir + 2 * MR <= mc && narrow2_on()) {
                            ukr_narrow2(kc, Ap + ir * kc, Ap + (ir + MR) * kc, bp, cp + ir * p->ldc, p->ldc, n,
                                        p->alpha, beta, bias && pc == 0 ? bias + ic + ir : NULL, t);
                            ir += MR;
                            continue;
                        }
#endif
#if defined(KN_UKR_A_IN_PLACE)
                        if (a_in_place) {
                            ukr_ain_any((int)min64(MR, mc - ir), kc, A + (ic + ir) * p->lda + pc, p->lda, bp, bs,
                                        cp + ir * p->ldc, p->ldc, n, p->alpha, beta,
                                        bias && pc == 0 ? bias + ic + ir : NULL,
                                        nextb && ir < 2 * MR ? nextb + ir / MR * kc * (NR / 2) : bp, t);
                            continue;
                        }
#endif
                        ukr_any((int)min64(MR, mc - ir), kc, Ap + ir * kc, MR, bp, bs, cp + ir * p->ldc, p->ldc, n,
                                p->alpha, beta, bias && pc == 0 ? bias + ic + ir : NULL,
                                nextb && ir < 2 * MR ? nextb + ir / MR * kc * (NR / 2)
                                : A_packed && jr == 0 ? Ap + (ir + MR) * kc
                                                      : Ap + ir * kc,
                                t);
                    }
                    /* the strip is final after the last slice of K: post-process it while cached */
                    if (p->epilogue && pc + kc == p->K) p->epilogue(p->epilogue_ctx, op, ic, jc + jr, mc, n, cp, p->ldc);
                }
            }
        }
    }
}

/* C[i][j] = T[j][i] (+ bias[i]) (+ beta * C[i][j]) for i < m, j < n: a chunk of C^T (row stride
 * ldt) written back into C. */
static void store_transposed(const float *T, int64_t ldt, int64_t m, int64_t n, float *C, int64_t ldc,
                             const float *bias, float beta, const ukr_tail *t) {
#if defined(KN_GEMM_AVX512)
    const __m512 lo = _mm512_set1_ps(t ? t->lo : 0.0f), hi = _mm512_set1_ps(t ? t->hi : 0.0f);
    const __m512 q0 = _mm512_set1_ps(t ? t->p0 : 0.0f), q1 = _mm512_set1_ps(t ? t->p1 : 0.0f);
    const int ak = t ? t->act : KN_GEMM_ACT_NONE;
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        const int rows = (int)min64(16, n - j0);
        const __mmask16 keep = mask16(rows);
        for (int64_t i0 = 0; i0 < m; i0 += 16) {
            const int cols = (int)min64(16, m - i0);
            __m512 o[16];
            tr16(T + j0 * ldt + i0, ldt, rows, cols, o);
            for (int q = 0; q < cols; q++) {
                float *cp = C + (i0 + q) * ldc + j0;
                __m512 v = o[q];
                if (bias) v = _mm512_add_ps(v, _mm512_set1_ps(bias[i0 + q]));
                if (beta != 0.0f) v = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(keep, cp), v);
                if (t && t->add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(keep, t->add + (i0 + q) * t->ld + j0));
                if (t) v = tail_act16(v, ak, q0, q1, lo, hi);
                _mm512_mask_storeu_ps(cp, keep, v);
            }
        }
    }
#elif defined(KN_GEMM_AVX2)
    /* 8 x 8 blocks, the operations of the AVX-512 body: element by element this was 20% of a
     * 1x1 512->2048 convolution on 7x7 (swapped, with its residual) on the AVX2 EPYC */
    /* rows of C (channels) outer: C and its addend go by whole rows, where a sweep over all the
     * rows per 8 columns wrote each line of C in parts, once per sweep */
    const __m256 lo = _mm256_set1_ps(t ? t->lo : 0.0f), hi = _mm256_set1_ps(t ? t->hi : 0.0f);
    const __m256 q0 = _mm256_set1_ps(t ? t->p0 : 0.0f), q1 = _mm256_set1_ps(t ? t->p1 : 0.0f);
    const int ak = t ? t->act : KN_GEMM_ACT_NONE;
    for (int64_t i0 = 0; i0 < m; i0 += 8) {
        const int cols = (int)min64(8, m - i0);
        for (int64_t j0 = 0; j0 < n; j0 += 8) {
            const int rows = (int)min64(8, n - j0);
            const __m256i keep = mask8(rows);
            __m256 o[8];
            tr8(T + j0 * ldt + i0, ldt, rows, cols, o);
            for (int q = 0; q < cols; q++) {
                float *cp = C + (i0 + q) * ldc + j0;
                __m256 v = o[q];
                if (bias) v = _mm256_add_ps(v, _mm256_set1_ps(bias[i0 + q]));
                if (rows == 8) {
                    if (beta != 0.0f) v = _mm256_fmadd_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(cp), v);
                    if (t && t->add) v = _mm256_add_ps(v, _mm256_loadu_ps(t->add + (i0 + q) * t->ld + j0));
                    if (t) v = tail_act8(v, ak, q0, q1, lo, hi);
                    _mm256_storeu_ps(cp, v);
                } else {
                    if (beta != 0.0f) v = _mm256_fmadd_ps(_mm256_set1_ps(beta), _mm256_maskload_ps(cp, keep), v);
                    if (t && t->add) v = _mm256_add_ps(v, _mm256_maskload_ps(t->add + (i0 + q) * t->ld + j0, keep));
                    if (t) v = tail_act8(v, ak, q0, q1, lo, hi);
#if UKR2_PART_STORES
                    store_part8(cp, v, rows);
#else
                    _mm256_maskstore_ps(cp, keep, v);
#endif
                }
            }
        }
    }
#else
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float v = T[j * ldt + i] + (bias ? bias[i] : 0.0f);
            v = beta == 0.0f ? v : v + beta * C[i * ldc + j];
            if (t && t->add) v += t->add[i * t->ld + j];
            if (t) {
                v = tail_act1(t, v);
                v = v < t->lo ? t->lo : v;
                v = v > t->hi ? t->hi : v;
            }
            C[i * ldc + j] = v;
        }
#endif
}

static int64_t padded_n(int64_t N);

/* The micro-kernel's cost of n columns of a row of C, in lanes: whole panels of NR, a last part
 * past half a panel as a whole one, a last half panel alone as 3/4 of one (one vector of B per MR
 * broadcasts of A: bound by loads, not multiply-adds). */
static double row_cost(int64_t n) {
    const int64_t rem = n % NR;
    return (double)(n - rem) + (rem == 0 ? 0.0 : rem > NR / 2 ? (double)NR : 0.75 * NR);
}

bool kn_sgemm_swaps(int64_t M, int64_t N, int64_t K) {
#if defined(KN_SGEMM_NO_SWAP) /* for measuring the path against the usual one */
    return false;
#endif
    if (N > SWAP_MAX_N || N < 2 || M < 2 * NR || K < 1) return false;
    /* KILN_GEMM_SWAP=1: wherever it can (tests), 0: never (measurements) */
    const char *e = getenv("KILN_GEMM_SWAP");
    if (e && *e) return *e == '1';
    /* The cost of a row of C per column used: swapped_cost(N) / N as it is, (M) / M transposed.
     * The transposed product pays for C^T's round trip through a buffer, M * N against the
     * M * N * K multiply-adds, so it must save that much: measured (1 thread, AVX-512 Xeon, 1x1
     * convolutions on 14x14, N = 196, M = 256 or 1024): K = 256 13% slower transposed, K = 512
     * (stride 2 from 28x28) 13% slower, K = 1024 4% faster; on 7x7 (N = 49) K = 512..2048 5-16%
     * faster; 3x3 512->512 on 4x4 (N = 16, K = 4608) 10% faster. */
    double min_saved = SWAP_MIN_SAVED;
#if defined(KN_GEMM_AVX2)
    /* AVX2 (MR 6 x NR 16): at most 4 panels of columns, the transposed product wins from a much
     * smaller K. 1 thread, Zen 3, 1x1 convolutions on 7x7 (N = 49) with their activation:
     * 192->1152 0.58 -> 0.41 ms, 96->576 0.19 -> 0.14 ms (they ran conv.c's channels-in-lanes
     * kernel, as fast as the untransposed GEMM there); on 14x14 (N = 196) K = 512 stayed 15%
     * slower transposed, so the larger planes keep SWAP_MIN_SAVED. */
    if (N <= 4 * NR) min_saved = SWAP_MIN_SAVED_FEW_N;
#endif
    return (row_cost(N) / (double)N - row_cost(M) / (double)M) * (double)K > min_saved;
}

/* Rows [m0, m1) and columns [n0, n1) of C computed as C^T = op(B)^T op(A)^T: op(B)'s columns
 * packed as usual (NR-column panels, once per slice of K for every row of the tile) are the
 * transposed product's A, read MR rows at a time with a stride of NR per step of K; op(A)^T
 * packed as B (or prepacked: at_packed) its B. C^T is accumulated in a buffer of the thread and
 * transposed into C with the bias, beta and the epilogue. n1 - n0 <= SWAP_MAX_N; m0 is a
 * multiple of NR. Returns false when the buffer cannot be allocated. */
/* The row stride of a transposed tile's C^T buffer for mt rows of C. */
static int64_t swap_ldt(int64_t mt) {
    int64_t ldt = (mt + 15) / 16 * 16;
#if defined(KN_GEMM_AVX2)
    /* rows of C^T a multiple of 2 KB apart share L1 sets: the micro-kernel's MR rows and
     * store_transposed's 8 (a 2048-channel 1x1 on 7x7: 8 KB apart) */
    if (ldt % 512 == 0) ldt += 16;
#endif
    return ldt;
}

/* KILN_GEMM_SWAP_PAIR=0: the transposed path runs ukr_any's 12 x 32 on every panel and packs plain
 * op(B) as before (measurements) */
static bool swap_pair_on(void) {
#if defined(KN_UKR_SW)
    static int on = -1;
    return switch_once(&on, "KILN_GEMM_SWAP_PAIR");
#else
    return false;
#endif
}

/* Whether a transposed product reads op(B) in place (run_swapped_tile's op(A)^T side's rows, the
 * broadcast operand, are then rows of plain B, ldb apart): B untransposed and no packing callback.
 * The packed copy (NR-column panels, 49 positions in 64) cost 6.6% of a 1x1 960 -> 160 on 7x7
 * (perf, 1 thread, AVX-512) and spread the positions over 2 panels of 32 floats a row. */
static bool swap_b_in_place(const kn_sgemm_batch *p) { return !p->pack_b && !p->trans_b && swap_pair_on(); }

/* The transposed path's steps of K a micro-kernel call (C^T's partial sums are rounded into the
 * buffer after each): SW_KS in every call of a product whose tiles may pair panels (ukr_sw), ukr_any's
 * too (a chunk's last single panel, a tile of fewer than SW_MIN_N columns), else SWAP_KS. For the
 * product, never the tile: which panels pair depends on the tile's rows and columns, hence on the
 * threads, and ukr_any at SWAP_KS gave other last bits than ukr_sw at SW_KS. */
static int64_t swap_ks(const kn_sgemm_batch *p) {
#if defined(KN_UKR_SW)
    if (p->N >= SW_MIN_N && swap_pair_on()) return SW_KS;
#else
    (void)p;
#endif
    return SWAP_KS;
}

/* k0..k1 (multiples of KC, k1 == K last): the part of K summed here. Tout: C^T of the tile over
 * that part goes there (nn rows of swap_ldt(m1 - m0)), and C is not touched; NULL: into C. */
static bool run_swapped_tile(const kn_sgemm_batch *p, int64_t op, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                             float *ws, const float *b_shared, int64_t k0, int64_t k1, float *Tout) {
    const float *A = p->a[op];
    const float *B = p->b ? p->b[op] : NULL;
    const float *AT = p->at_packed ? p->at_packed[op] : NULL;
    const float *bias = p->row_bias ? p->row_bias[op] : NULL;
    float *C = p->c[op];
    const int64_t nn = n1 - n0, mt = m1 - m0, Mp = padded_n(p->M);
    const int64_t ldt = swap_ldt(mt), sks = swap_ks(p);
    float *Ap = ws, *Bp = ws + (size_t)KC * SWAP_MAX_N;
    /* op(B) plain (a pointwise convolution's input): read in place, rows ldb apart */
    const bool b_in = !b_shared && swap_b_in_place(p);
    const int64_t as = b_in ? p->ldb : NR;
    float *T = Tout ? Tout : tile_buffer((size_t)(nn * ldt));
    if (!T) return false;
    for (int64_t pc = k0; pc < k1; pc += KC) {
        const int64_t kc = min64(KC, p->K - pc);
        /* b_shared: op(B) of every column packed once for all the tiles (run_job), slice pc at
         * pc * padded_n(N) */
        if (b_shared) Ap = (float *)b_shared + pc * padded_n(p->N);
        else if (b_in) Ap = (float *)B + pc * p->ldb + n0;
        else if (p->pack_b) p->pack_b(p->pack_ctx, op, pc, kc, n0, nn, Ap);
        else pack_b(B, p->ldb, p->trans_b, n0, nn, pc, kc, Ap);
        /* position j of the tile at depth pc + ks: packed, in its panel of NR; in place, row ks */
#define SW_AROW(j, ks) (b_in ? Ap + (ks) * as + (j) : Ap + (j) / NR * NR * kc + (ks) * NR + (j) % NR)
        for (int64_t jc = m0; jc < m1; jc += SWAP_MC) {
            const int64_t mc = min64(SWAP_MC, m1 - jc);
            /* op(A)^T prepacked (bpk_panel's layout) or packed here per slice (panels kc x NR) */
            const float *bt = Bp;
            if (!AT) pack_b(A, p->lda, !p->trans_a, jc, mc, pc, kc, Bp);
            for (int64_t jr = 0; jr < mc; jr += NR) {
#if defined(KN_UKR_SW)
                if (mc - jr > NR && nn >= SW_MIN_N && swap_pair_on()) {
                    /* two panels of channels a call (ukr_sw): the positions of each panel of op(B)
                     * (in place: all of them) in calls of at most SW_MR rows, near-equal (49 =
                     * 6 + 6 + 6 + 6 + 5 + 5 + 5 + 5 + 5) */
                    const int n = (int)min64(2 * NR, mc - jr);
                    float *t = T + (jc - m0) + jr;
                    const int64_t ps = pc / KCB * KCB;
                    const int64_t bps = AT ? NR * min64(KCB, p->K - ps) : NR * kc;
                    for (int64_t ks = 0; ks < kc; ks += sks) {
                        const int64_t kk = min64(sks, kc - ks);
                        const float beta = pc == k0 && ks == 0 ? 0.0f : 1.0f;
                        const float *b0 = AT ? bpk_panel(AT, Mp, p->K, pc, jc + jr) : bt + jr * kc, *b = b0 + ks * NR;
                        /* the part SWAP_PF_AHEAD ahead of both panels (2 kk lines each), a half
                         * panel a call for the first four calls: of these panels, else of the next
                         * pair (prepacked), else anywhere (prefetches do not fault) */
                        const int64_t ahead = ks + SWAP_PF_AHEAD * kk;
                        const float *pf0, *pf1;
                        if (ahead < kc) {
                            pf0 = b0 + ahead * NR;
                            pf1 = pf0 + bps;
                        } else if (AT && jr + 2 * NR < mc) {
                            pf0 = bpk_panel(AT, Mp, p->K, pc, jc + jr + 2 * NR) + (ahead - kc) * NR;
                            pf1 = jr + 3 * NR < mc ? bpk_panel(AT, Mp, p->K, pc, jc + jr + 3 * NR) + (ahead - kc) * NR : pf0;
                        } else {
                            pf0 = pf1 = b;
                        }
                        /* in place, the positions need not go by panels: 49 = 7 x 7 */
                        const int64_t grp = b_in ? nn : NR;
                        int64_t call = 0;
                        for (int64_t pp = 0; pp < nn; pp += grp) {
                            const int64_t prow = min64(grp, nn - pp), pcalls = (prow + SW_MR - 1) / SW_MR;
                            const int64_t pbase = prow / pcalls, pextra = prow % pcalls;
                            for (int64_t q = 0, qi = 0; q < prow; qi++, call++) {
                                const int mr_q = (int)(pbase + (qi < pextra));
                                const float *pf = call < 4 ? (call < 2 ? pf0 : pf1) + (call & 1) * kk * (NR / 2) : b;
                                ukr_sw_any(mr_q, kk, SW_AROW(pp + q, ks), as, b, bps, t + (pp + q) * ldt, ldt, n,
                                           p->alpha, beta, pf);
                                q += mr_q;
                            }
                        }
                    }
                    jr += NR;
                    continue;
                }
#endif
                const int n = (int)min64(NR, mc - jr);
                float *t = T + (jc - m0) + jr;
#if defined(KN_GEMM_AVX2)
                /* calls of at most FEW_MR positions (a tile's last panel of 1 or 2: 49 = 3 x 16 + 1)
                 * on this panel of channels and the next in one (ukr_pair: 4 or 8 chains of FMAs, where
                 * ukr's 2 or 4 waited on the FMA's latency), made on the first of the two; the same
                 * sums in the same order as ukr's */
                const int pair_first = (jr / NR) % 2 == 0 && mc - jr > NR, pair_second = (jr / NR) % 2 == 1;
                const int64_t pair_bps = AT ? NR * min64(KCB, p->K - pc / KCB * KCB) : NR * kc;
#endif
                for (int64_t ks = 0; ks < kc; ks += sks) {
                    const int64_t kk = min64(sks, kc - ks);
                    const float beta = pc == k0 && ks == 0 ? 0.0f : 1.0f;
                    const float *b0 = AT ? bpk_panel(AT, Mp, p->K, pc, jc + jr) : bt + jr * kc, *b = b0 + ks * NR;
                    /* prepacked op(A)^T comes from memory, read in order: the first two calls
                     * prefetch half each of the SWAP_PF_AHEAD-th next part (kk * NR floats): of
                     * this panel, else of the next one */
                    const int64_t ahead = ks + SWAP_PF_AHEAD * kk;
                    const float *pf = ahead < kc ? b0 + ahead * NR
                                      : AT && jr + NR < mc ? bpk_panel(AT, Mp, p->K, pc, jc + jr + NR) + (ahead - kc) * NR
                                                           : b0 + kc * NR + (ahead - kc) * NR;
                    int64_t call = 0;
#if defined(KN_GEMM_AVX2) && SWAP_PF_SPREAD
                    /* AVX2's micro-kernel takes no far prefetch: the calls here bring the part
                     * SWAP_PF_AHEAD ahead (kk lines of the weights, from memory) in, a share each
                     * before it runs. Without, the first call on each part waited on memory with
                     * only the kernel's 16 lines ahead in flight: 1x1 convolutions on 7x7 at 60-65
                     * GFLOP/s against 80-90 for the others (Zen 3, 1 thread) */
                    const int64_t calls = nn / NR * ((NR + MR - 1) / MR) + (nn % NR + MR - 1) / MR;
                    const int64_t per_call = (kk + calls - 1) / calls;
                    int64_t pf_line = 0;
#endif
                    for (int64_t pp = 0; pp < nn; pp += NR) {
#if SWAP_EVEN_ROWS
                        /* a panel's rows in calls of near-equal size (16 = 6 + 5 + 5, not 6 + 6 + 4):
                         * four rows make 8 chains of FMAs, just the FMA's latency times its rate,
                         * and ran slower than their share */
                        const int64_t prow = min64(NR, nn - pp), pcalls = (prow + MR - 1) / MR;
                        const int64_t pbase = prow / pcalls, pextra = prow % pcalls;
#endif
                        for (int64_t q = 0, qi = 0; q < NR && pp + q < nn; qi++, call++) {
#if SWAP_EVEN_ROWS
                            const int mr_q = (int)(pbase + (qi < pextra));
#else
                            const int mr_q = (int)min64(MR, min64(NR - q, nn - pp - q));
#endif
#if defined(KN_GEMM_AVX2) && SWAP_PF_SPREAD
                            for (int64_t e = min64(kk, pf_line + per_call); pf_line < e; pf_line++)
                                _mm_prefetch((const char *)(pf + pf_line * NR), SWAP_PF_HINT);
#endif
#if defined(KN_GEMM_AVX2)
                            if (mr_q <= FEW_MR && (pair_first || pair_second)) {
                                if (pair_first)
                                    ukr_pair_any(mr_q, kk, SW_AROW(pp + q, ks), as, b, NR, pair_bps, t + (pp + q) * ldt, ldt,
                                                 (int)min64(2 * NR, mc - jr), p->alpha, beta, NULL, NULL);
                                q += mr_q;
                                continue;
                            }
#endif
                            ukr_any(mr_q, kk, SW_AROW(pp + q, ks), as, b,
                                    NR, t + (pp + q) * ldt, ldt, n, p->alpha, beta, NULL,
                                    call < 2 ? pf + call * kk * (NR / 2) : b, NULL);
                            q += mr_q;
                        }
                    }
                }
            }
        }
    }
#undef SW_AROW
    if (Tout) return true;
    float *cp = C + m0 * p->ldc + n0;
    ukr_tail tb;
    store_transposed(T, ldt, mt, nn, cp, p->ldc, bias ? bias + m0 : NULL, p->beta, tail_at(p, op, m0, n0, &tb));
    if (p->epilogue) p->epilogue(p->epilogue_ctx, op, m0, n0, mt, nn, cp, p->ldc);
    return true;
}

/* The last part of a tile split along K: the parts' C^T summed in the order of the parts (part 0
 * plus part 1, plus part 2, ...: the same sum whichever thread got here last), then stored as a
 * whole tile is. */
static void finish_swapped_parts(const kn_sgemm_batch *p, int64_t op, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                                 float *T, int64_t kp, int64_t part_floats) {
    const int64_t nn = n1 - n0, mt = m1 - m0, ldt = swap_ldt(mt);
    for (int64_t q = 1; q < kp; q++) {
        const float *P = T + q * part_floats;
        for (int64_t r = 0; r < nn; r++)
            for (int64_t i = 0; i < mt; i++) T[r * ldt + i] += P[r * ldt + i];
    }
    float *cp = p->c[op] + m0 * p->ldc + n0;
    const float *bias = p->row_bias ? p->row_bias[op] : NULL;
    ukr_tail tb;
    store_transposed(T, ldt, mt, nn, cp, p->ldc, bias ? bias + m0 : NULL, p->beta, tail_at(p, op, m0, n0, &tb));
    if (p->epilogue) p->epilogue(p->epilogue_ctx, op, m0, n0, mt, nn, cp, p->ldc);
}

/* c[j] = alpha * sum_k a[k] * op(B)[k][j] + beta * c[j] for j in [n0, n1) (n0 a multiple of NR),
 * op(B) prepacked whole (kn_sgemm_pack_b_full, Np columns padded): each NR-column panel of a slice
 * is one contiguous stream, where the unpacked row-times-matrix paths read many rows at once. */
static void gemv_packed(const float *a, int64_t K, const float *Bp, int64_t Np, float *c, int64_t n0, int64_t n1,
                        float alpha, float beta) {
    for (int64_t j = n0; j < n1; j += NR) {
        const int n = (int)min64(NR, n1 - j);
#if defined(KN_GEMM_AVX512)
        __m512 s0[4], s1[4];
        for (int u = 0; u < 4; u++) s0[u] = s1[u] = _mm512_setzero_ps();
        for (int64_t pc = 0; pc < K; pc += KC) {
            const int64_t kc = min64(KC, K - pc);
            const float *b = bpk_panel(Bp, Np, K, pc, j), *ak = a + pc;
            int64_t k = 0;
            for (; k + 4 <= kc; k += 4)
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) {
                    const __m512 av = _mm512_set1_ps(ak[k + u]);
                    s0[u] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + (k + u) * NR), s0[u]);
                    s1[u] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + (k + u) * NR + 16), s1[u]);
                }
            for (; k < kc; k++) {
                const __m512 av = _mm512_set1_ps(ak[k]);
                s0[0] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + k * NR), s0[0]);
                s1[0] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + k * NR + 16), s1[0]);
            }
        }
        const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
        const __mmask16 m0 = mask16(n), m1 = mask16(n - 16);
        __m512 r0 = _mm512_mul_ps(va, _mm512_add_ps(_mm512_add_ps(s0[0], s0[1]), _mm512_add_ps(s0[2], s0[3])));
        __m512 r1 = _mm512_mul_ps(va, _mm512_add_ps(_mm512_add_ps(s1[0], s1[1]), _mm512_add_ps(s1[2], s1[3])));
        if (beta != 0.0f) {
            r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, c + j), r0);
            r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, c + j + 16), r1);
        }
        _mm512_mask_storeu_ps(c + j, m0, r0);
        _mm512_mask_storeu_ps(c + j + 16, m1, r1);
#elif defined(KN_GEMM_AVX2)
        /* 4 steps of K at a time into separate sums: one chain of FMAs per vector waited on each
         * FMA's latency (the portable loop below made ResNet-50's classifier, 1 x 2048 by
         * 1000 x 2048^T, 7x ONNX Runtime's time on a 2-core AVX2 EPYC) */
        __m256 s0[4], s1[4];
        for (int u = 0; u < 4; u++) s0[u] = s1[u] = _mm256_setzero_ps();
        for (int64_t pc = 0; pc < K; pc += KC) {
            const int64_t kc = min64(KC, K - pc);
            const float *b = bpk_panel(Bp, Np, K, pc, j), *ak = a + pc;
            int64_t k = 0;
            for (; k + 4 <= kc; k += 4)
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) {
                    const __m256 av = _mm256_broadcast_ss(ak + k + u);
                    s0[u] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b + (k + u) * NR), s0[u]);
                    s1[u] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b + (k + u) * NR + 8), s1[u]);
                }
            for (; k < kc; k++) {
                const __m256 av = _mm256_broadcast_ss(ak + k);
                s0[0] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b + k * NR), s0[0]);
                s1[0] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b + k * NR + 8), s1[0]);
            }
        }
        const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
        const __m256i m0 = mask8(n), m1 = mask8(n - 8);
        __m256 r0 = _mm256_mul_ps(va, _mm256_add_ps(_mm256_add_ps(s0[0], s0[1]), _mm256_add_ps(s0[2], s0[3])));
        __m256 r1 = _mm256_mul_ps(va, _mm256_add_ps(_mm256_add_ps(s1[0], s1[1]), _mm256_add_ps(s1[2], s1[3])));
        if (beta != 0.0f) {
            r0 = _mm256_fmadd_ps(vb, _mm256_maskload_ps(c + j, m0), r0);
            r1 = _mm256_fmadd_ps(vb, _mm256_maskload_ps(c + j + 8, m1), r1);
        }
        _mm256_maskstore_ps(c + j, m0, r0);
        _mm256_maskstore_ps(c + j + 8, m1, r1);
#else
        float acc[NR] = {0};
        for (int64_t pc = 0; pc < K; pc += KC) {
            const int64_t kc = min64(KC, K - pc);
            const float *b = bpk_panel(Bp, Np, K, pc, j);
            for (int64_t k = 0; k < kc; k++)
                for (int l = 0; l < NR; l++) acc[l] += a[pc + k] * b[k * NR + l];
        }
        for (int l = 0; l < n; l++) c[j + l] = finish(acc[l], alpha, beta, c + j + l);
#endif
    }
}

static void run_row_tile(const kn_sgemm_batch *p, int64_t op, int64_t n0, int64_t n1, float *ws) {
    /* M == 1: a is row 0 of op(A); copy it when strided */
    const float *A = p->a[op], *B = p->b[op];
    float *C = p->c[op];
    const float *a = A;
    if (p->trans_a && p->lda != 1) {
        for (int64_t k = 0; k < p->K; k++) ws[k] = A[k * p->lda];
        a = ws;
    }
    if (p->b_packed) gemv_packed(a, p->K, p->b_packed[op], padded_n(p->N), C, n0, n1, p->alpha, p->beta);
    else if (p->trans_b) dot_rows(B + n0 * p->ldb, p->ldb, n1 - n0, a, p->K, C + n0, 1, p->alpha, p->beta);
    else gemv_rows(a, p->K, B, p->ldb, C, n0, n1, p->alpha, p->beta);
}

static void run_col_tile(const kn_sgemm_batch *p, int64_t op, int64_t m0, int64_t m1) {
    /* N == 1, A untransposed, column of B contiguous */
    dot_rows(p->a[op] + m0 * p->lda, p->lda, m1 - m0, p->b[op], p->K, p->c[op] + m0 * p->ldc, p->ldc, p->alpha,
             p->beta);
}

/* C[r][0:n] += bias[r] for r < m (the paths whose kernels do not take a row bias). */
static void add_row_bias(float *c, int64_t ldc, const float *bias, int64_t m, int64_t n) {
    for (int64_t r = 0; r < m; r++)
        for (int64_t i = 0; i < n; i++) c[r * ldc + i] += bias[r];
}

static void job_range(void *arg, int64_t begin, int64_t end) {
    job *j = arg;
    const kn_sgemm_batch *p = j->p;
    float *ws = workspace();
    if (!ws) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    const int64_t per = j->tm * j->tn, kp = j->kp > 1 ? j->kp : 1;
    for (int64_t t0 = begin; t0 < end; t0++) {
        const int64_t t = t0 / kp, part = t0 % kp; /* tile t, part of its K */
        int64_t op = t / per, r = t % per, im = r / j->tn, in = r % j->tn;
        int64_t m0 = (im * j->units_m / j->tm) * j->um, m1 = min64(p->M, ((im + 1) * j->units_m / j->tm) * j->um);
        int64_t n0 = (in * j->units_n / j->tn) * j->un, n1 = min64(p->N, ((in + 1) * j->units_n / j->tn) * j->un);
        if (m0 >= m1 || n0 >= n1) continue;
        switch (j->path) {
        case PATH_ROW: run_row_tile(p, op, n0, n1, ws); break;
        case PATH_COL: run_col_tile(p, op, m0, m1); break;
#if defined(KN_GEMM_AVX512)
        case PATH_DOT:
            dot_block(p->a[op], p->lda, p->b[op], p->ldb, p->K, p->c[op], p->ldc, m0, m1, n0, n1, p->alpha, p->beta);
            break;
#endif
        case PATH_SWAP: {
            const float *bs = j->b_shared ? j->b_shared + (size_t)op * (size_t)(padded_n(p->N) * p->K) : NULL;
            if (kp == 1) {
                if (!run_swapped_tile(p, op, m0, m1, n0, n1, ws, bs, 0, p->K, NULL))
                    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
                break;
            }
            /* part `part` of kp of the tile's K, in slices of KC: the same parts at any thread count */
            const int64_t slices = (p->K + KC - 1) / KC;
            const int64_t k0 = part * slices / kp * KC, k1 = min64(p->K, (part + 1) * slices / kp * KC);
            float *T = j->parts + (size_t)(t * kp) * (size_t)j->part_floats;
            if (!run_swapped_tile(p, op, m0, m1, n0, n1, ws, bs, k0, k1, T + (size_t)part * (size_t)j->part_floats))
                __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
            if (__atomic_add_fetch(&j->part_done[t], 1, __ATOMIC_ACQ_REL) == kp)
                finish_swapped_parts(p, op, m0, m1, n0, n1, T, kp, j->part_floats);
            break;
        }
        default:
            run_gemm_tile(p, op, m0, m1, n0, n1, ws,
                          j->a_deep ? j->a_deep + (size_t)op * (size_t)(padded_m(p->M) * p->K) : NULL,
                          j->b_shared ? j->b_shared + (size_t)op * (size_t)(padded_n(p->N) * p->K) : NULL, j->pk_deep);
            break;
        }
        if (j->path != PATH_GEMM && j->path != PATH_SWAP) {
            if (p->row_bias) add_row_bias(p->c[op] + m0 * p->ldc + n0, p->ldc, p->row_bias[op] + m0, m1 - m0, n1 - n0);
            apply_tail(p, op, m0, n0, m1 - m0, n1 - n0, p->c[op] + m0 * p->ldc + n0, p->ldc);
            if (p->epilogue)
                p->epilogue(p->epilogue_ctx, op, m0, n0, m1 - m0, n1 - n0, p->c[op] + m0 * p->ldc + n0, p->ldc);
        }
    }
}

/* The tail, then the caller's epilogue (ctx: the caller's batch). */
static void tail_epilogue(const void *ctx, int64_t op, int64_t i0, int64_t j0, int64_t m, int64_t n, float *c,
                          int64_t ldc) {
    const kn_sgemm_batch *p = ctx;
    apply_tail(p, op, i0, j0, m, n, c, ldc);
    if (p->epilogue) p->epilogue(p->epilogue_ctx, op, i0, j0, m, n, c, ldc);
}

/* C = beta * C for K == 0. */
static void scale_c(const kn_sgemm_batch *p) {
    for (int64_t op = 0; op < p->count; op++) {
        for (int64_t i = 0; i < p->M; i++) {
            float *c = p->c[op] + i * p->ldc;
            for (int64_t j = 0; j < p->N; j++) c[j] = p->beta == 0.0f ? 0.0f : p->beta * c[j];
        }
        if (p->row_bias) add_row_bias(p->c[op], p->ldc, p->row_bias[op], p->M, p->N);
        apply_tail(p, op, 0, 0, p->M, p->N, p->c[op], p->ldc);
        if (p->epilogue) p->epilogue(p->epilogue_ctx, op, 0, 0, p->M, p->N, p->c[op], p->ldc);
    }
}

/* op(A) of a batch packed whole (run_packed_tile's a_deep), for every tile to read: tasks of one
 * slice of KCB by PK_PACK_ROWS rows of one product (blocks of MC left 197 rows as 192 + 5: at 2
 * threads one thread packed two of the three large blocks), each slice's depth in `parts` parts
 * where those tasks are fewer than twice the threads: a classifier's 32 x 2048 made 3 tasks (3
 * slices of one block), at 2 threads two on one thread, at 16 threads 13 threads waited on 3. The
 * packed layout is the same whatever the parts. */
#define PK_PACK_ROWS (4 * MR)
#define PK_PACK_MIN_DEPTH 64 /* a part's depth at least, a multiple of 16 (the transposes' blocks) */
typedef struct pack_a_job {
    const kn_sgemm_batch *p;
    float *dst;
    int64_t Mp, slices, blocks, parts;
} pack_a_job;

static void pack_a_range(void *arg, int64_t begin, int64_t end) {
    const pack_a_job *j = arg;
    const kn_sgemm_batch *p = j->p;
    const int64_t per_op = j->slices * j->blocks * j->parts;
    for (int64_t t = begin; t < end; t++) {
        const int64_t op = t / per_op, r = t % per_op, q = r % j->parts, sb = r / j->parts;
        const int64_t ps = sb / j->blocks * KCB, ic = sb % j->blocks * PK_PACK_ROWS;
        const int64_t kcb = min64(KCB, p->K - ps), mc = min64(PK_PACK_ROWS, p->M - ic);
        /* part q of the slice's depth: [k0, k1), k0 a multiple of 16 */
        const int64_t kd = ((kcb + j->parts - 1) / j->parts + 15) / 16 * 16;
        const int64_t k0 = q * kd, k1 = min64(kcb, k0 + kd);
        if (k0 >= k1) continue;
        float *d = j->dst + (size_t)op * (size_t)(j->Mp * p->K) + ps * j->Mp + ic * kcb;
        for (int64_t ir = 0; ir < mc; ir += MR)
            pack_a_panel(p->a[op], p->lda, p->trans_a, ic + ir, (int)min64(MR, mc - ir), ps + k0, k1 - k0,
                         d + ir * kcb + k0 * MR);
    }
}

/* The parts a shared packing's `units` tasks (each a slice `depth` deep) split into so that there
 * are twice as many tasks as threads, each part at least `min_depth` deep; 1 where the units
 * already make that many. pack_a_job's and pack_b_job's. */
static int64_t depth_parts(int64_t units, int64_t threads, int64_t depth, int64_t min_depth) {
    if (threads <= 1 || units >= 2 * threads) return 1;
    const int64_t parts = min64(depth / min_depth, (2 * threads + units - 1) / units);
    return parts > 1 ? parts : 1;
}

static kn_thread_buffer shared_a_buffers = KN_THREAD_BUFFER_INIT;

/* op(B) (untransposed) of a transposed batch packed once for all its tiles (job.b_shared): the
 * layout run_swapped_tile packs per slice (pack_b of all N columns: slice pc at pc * Np, panel jr
 * at jr * kc in it), tasks of SB_PACK_ROWS rows of one slice of one product. With the caller's
 * packing (an im2col) tasks of SB_PACK_PANELS panels of a slice, or, where those are fewer than
 * twice the threads, of one panel and a part of the slice's depth (`parts`; the panel's rows
 * [k0, k1) are its floats [k0 NR, k1 NR)): the 1-D convolution 1 -> 512 k400 s160 (98 columns)
 * made 4 tasks, at 16 threads 12 threads waited on 4. */
#define SB_PACK_ROWS 32
#define SB_PACK_PANELS 2
#define SB_PACK_MIN_DEPTH 64 /* a part's depth at least */
#define SWAP_ROWS_MIN 4 /* rows split where M >= SWAP_ROWS_MIN * N */
typedef struct pack_b_job {
    const kn_sgemm_batch *p;
    float *dst;
    int64_t Np, slices, blocks, panels, parts; /* panels a block (callback), parts of a slice's depth */
} pack_b_job;

static void pack_b_shared_range(void *arg, int64_t begin, int64_t end) {
    const pack_b_job *j = arg;
    const kn_sgemm_batch *p = j->p;
    const int64_t N = p->N, per_op = j->slices * j->blocks * j->parts;
    for (int64_t t = begin; t < end; t++) {
        const int64_t op = t / per_op, r = t % per_op, q = r % j->parts, sb = r / j->parts;
        const int64_t pc = sb / j->blocks * KC, kc = min64(KC, p->K - pc);
        float *dst = j->dst + (size_t)op * (size_t)(j->Np * p->K) + pc * j->Np;
        if (p->pack_b) {
            /* the caller's packing (a convolution's im2col): blocks of `panels` panels, each panel at
             * jr * kc as in a slice packed whole; with parts (one panel a block) rows [k0, k1) */
            const int64_t jr = sb % j->blocks * j->panels * NR;
            const int64_t kd = (kc + j->parts - 1) / j->parts, k0 = q * kd, k1 = min64(kc, k0 + kd);
            if (jr < N && k0 < k1)
                p->pack_b(p->pack_ctx, op, pc + k0, k1 - k0, jr, min64(j->panels * NR, N - jr), dst + jr * kc + k0 * NR);
            continue;
        }
        const int64_t q0 = sb % j->blocks * SB_PACK_ROWS, q1 = min64(kc, q0 + SB_PACK_ROWS);
        if (q0 < q1) pack_b_plain_rows(p->b[op], p->ldb, 0, N, pc, kc, q0, q1, dst);
    }
}

/* pack_b_shared_range's tasks for `threads`: j's blocks, panels and parts. */
static void pack_b_plan(pack_b_job *j, int64_t threads) {
    const kn_sgemm_batch *p = j->p;
    j->panels = SB_PACK_PANELS;
    j->parts = 1;
    if (!p->pack_b) {
        j->blocks = (min64(KC, p->K) + SB_PACK_ROWS - 1) / SB_PACK_ROWS;
        return;
    }
    j->blocks = (j->Np / NR + SB_PACK_PANELS - 1) / SB_PACK_PANELS;
    const int64_t units = p->count * j->slices;
    if (units * j->blocks >= 2 * threads) return;
    j->panels = 1;
    j->blocks = j->Np / NR;
    j->parts = depth_parts(units * j->blocks, threads, min64(KC, p->K), SB_PACK_MIN_DEPTH);
}

/* KILN_GEMM_RF_SHARED=0: each rows-first tile packs B itself (measurements) */
static bool rf_shared_on(void) {
    static int on = -1;
    return switch_once(&on, "KILN_GEMM_RF_SHARED");
}

/* KILN_GEMM_SWAP_ROWS=0: the transposed path's tiles split the columns as before (measurements) */
static bool swap_rows_on(void) {
    static int on = -1;
    return switch_once(&on, "KILN_GEMM_SWAP_ROWS");
}

static kn_thread_buffer shared_b_buffers = KN_THREAD_BUFFER_INIT;
static kn_thread_buffer swap_part_buffers = KN_THREAD_BUFFER_INIT;

/* KILN_GEMM_SHARED_B=0: the blocked path's tiles of rows pack B each (measurements) */
static bool blocked_shared_on(void) {
    static int on = -1;
    return switch_once(&on, "KILN_GEMM_SHARED_B");
}

/* Whether the tiles of a product in the usual orientation, split by rows only, read op(B) packed
 * once for all of them (run_job, pack_b_shared_range's layout) where each tile packed all of it
 * again. Every tile of rows packs the whole of B, so at 2 threads a 3x3 512->512 convolution on
 * 4x4 (8 tiles of 64 rows, B the 16-column im2col of 4608 rows) packed it 8 times: 23% of the
 * node's time against 5% at 1 thread (perf, Zen 3). Rows first (A prepacked, K within a slice)
 * only where all the columns are one block of it (its shared B has no other layout). Not where a
 * tile reads plain B in place, nor above SHARED_B_MAX_FLOATS. */
#define SHARED_B_MAX_FLOATS ((size_t)4 << 20)
static bool gemm_b_shared(const kn_sgemm_batch *p, const job *j, int64_t threads) {
    if (j->path != PATH_GEMM || p->b_packed || (!p->pack_b && p->trans_b) || j->tn != 1 || j->tm < 2 || threads < 2)
        return false;
    if (b_in_place(p, j->units_m / j->tm * j->um, p->N)) return false; /* the smallest tile's rows */
    if ((size_t)(padded_n(p->N) * p->K) * (size_t)p->count > SHARED_B_MAX_FLOATS) return false;
    if (p->a_packed && rows_first_suits(p) && rows_first_ncb(p, p->N))
        return rows_first_ncb(p, p->N) >= p->N && rf_shared_on();
    return blocked_shared_on();
}

/* KILN_GEMM_SWAP_KSPLIT=0: transposed tiles never split along K (measurements; C's last bits
 * then differ from the default's where it splits) */
static bool swap_ksplit_on(void) {
    static int on = -1;
    return switch_once(&on, "KILN_GEMM_SWAP_KSPLIT");
}

/* KILN_GEMM_BATCH_SPREAD=0: batched products of plain operands from 3 threads on take the tile
 * grid of before (measurements) */
static bool batch_spread_on(void) {
    static int on = -1;
    return switch_once(&on, "KILN_GEMM_BATCH_SPREAD");
}

/* Parts along K of each tile of a transposed product (kn_sgemm_swaps) whose rows split among the
 * threads (M >= SWAP_ROWS_MIN * N): where its panels of NR rows are fewer than SWAP_KSPLIT_TILES,
 * as many parts as make that many tasks, each at least SWAP_KSPLIT_MIN_SLICES slices of KC deep.
 * A function of the shape alone, never of the threads, so that C is the same at every thread
 * count: with its rows alone 3x3 512 -> 512 on 4x4 (16 panels of 32 channels, 590 KB of weights
 * each) made 16 tasks, one a thread at 16 threads and nothing for a thread that finishes early to
 * take over; with two parts of K each task reads half its panel's weights and the im2col's rows,
 * and the sum of the parts costs M x N additions against the product's M x N x K. */
#define SWAP_KSPLIT_TILES 32
#define SWAP_KSPLIT_MIN_SLICES 4
static int64_t swap_kparts(const kn_sgemm_batch *p) {
    if (p->M < SWAP_ROWS_MIN * p->N || !swap_ksplit_on()) return 1;
    const int64_t panels = p->count * ((p->M + NR - 1) / NR), slices = (p->K + KC - 1) / KC;
    if (panels >= SWAP_KSPLIT_TILES) return 1;
    int64_t kp = (SWAP_KSPLIT_TILES + panels - 1) / panels;
    if (kp > slices / SWAP_KSPLIT_MIN_SLICES) kp = slices / SWAP_KSPLIT_MIN_SLICES;
    return kp > 1 ? kp : 1;
}

static kiln_status run_job(kn_threadpool *pool, const kn_sgemm_batch *p, job *j, int64_t threads);

/* The work of the busiest thread (in elements of C) when the products of p split into grids of
 * tm x tn tiles (of j's units) are dealt out evenly over the threads: the largest tile times the
 * tiles of the busiest thread. */
static double grid_busiest(const kn_sgemm_batch *p, const job *j, int64_t tm, int64_t tn, int64_t threads) {
    const int64_t tasks = p->count * tm * tn;
    const double rows = (double)min64(p->M, (j->units_m + tm - 1) / tm * j->um),
                 cols = (double)min64(p->N, (j->units_n + tn - 1) / tn * j->un);
    return (double)((tasks + threads - 1) / threads) * rows * cols;
}

/* The path and the tile grid of a float product (K > 0) on `threads` threads; returns the threads
 * worth waking for it. */
static int64_t plan_job(const kn_sgemm_batch *p, int64_t threads, job *jo) {
    job j = {.p = p, .path = PATH_GEMM, .um = MR, .un = NR, .kp = 1};
    if (!p->pack_b && p->M == 1 && (p->trans_a ? p->lda == 1 || p->K <= (int64_t)WS_FLOATS : 1))
        j.path = PATH_ROW;
    else if (!p->pack_b && p->N == 1 && !p->trans_a && (p->trans_b || p->ldb == 1))
        j.path = PATH_COL;
#if defined(KN_GEMM_AVX512)
    /* small M with B transposed: packing B would cost more than the product; dot products read
     * both operands in place */
    else if (!p->pack_b && !p->b_packed && p->trans_b && !p->trans_a && p->M <= DOT_MAX_M)
        j.path = PATH_DOT;
#endif
    /* prepacked A is for the usual orientation: a caller that packs for the transposed one
     * passes at_packed instead */
    if (j.path == PATH_GEMM && !p->a_packed && kn_sgemm_swaps(p->M, p->N, p->K)) j.path = PATH_SWAP;
    if (j.path == PATH_SWAP) j.um = NR, j.un = MR;
    if (j.path == PATH_ROW) j.um = 1, j.un = 64;
    if (j.path == PATH_DOT) j.um = 4, j.un = 16;
    if (j.path == PATH_COL) j.um = 16, j.un = 1;
    j.units_m = (p->M + j.um - 1) / j.um;
    j.units_n = (p->N + j.un - 1) / j.un;

    if (j.path == PATH_SWAP) j.kp = swap_kparts(p);
    /* threads worth waking for this much work */
    double flops = 2.0 * (double)p->M * (double)p->N * (double)p->K * (double)p->count;
    /* a row times a matrix (or a matrix times a column) does 2 flops a weight read: memory-bound,
     * a thread's share of 5e5 flops is 1 MB of weights. Beyond 2 threads (whose setting is the
     * measured one above) an eighth of it, 128 KB of weights: at 16 threads the classifier's Gemm
     * (1 x 2048 by 1000 x 2048^T, 8 MB) ran on 8 threads and MatMul 1 x 768 by 768 x 768 on 2,
     * 1.7-2x ONNX Runtime's time on the 16-core host; now on 16 and 12 (one 64-column unit each) */
    const bool gemv = j.path == PATH_ROW || j.path == PATH_COL;
    /* Few rows with B prepacked (a recurrent cell's step, a decoder's few tokens) are bound by
     * streaming B as a row is (2 M flops a weight read): half the share. Split in two, each half of
     * B may stay in its core's L2 where the whole did not: 2 threads, Zen 3, Gemm 2 x 256 by
     * 768 x 256^T (0.79 MFLOP, 786 KB of weights) ran on one thread at 0.023 ms, ONNX Runtime on
     * two at 0.018 */
    const bool few_rows = j.path == PATH_GEMM && p->b_packed && !p->pack_b && p->M < 16;
    const double per_thread = gemv && threads > 2 ? MIN_FLOPS_PER_THREAD / 8
                              : few_rows          ? MIN_FLOPS_PER_THREAD / 2
                                                  : MIN_FLOPS_PER_THREAD;
    int64_t by_work = (int64_t)(flops / per_thread);
    if (threads > by_work) threads = by_work > 0 ? by_work : 1;

    /* tiles per product: enough that all threads have a tile; among grids with that many tiles,
     * the one that re-packs least (A is packed once per column tile, B once per row tile) */
    j.tm = j.tn = 1;
    /* a few tiles per thread let fast threads take over a slow one's share (threads are not
     * equal on a busy machine), as long as tiles stay big enough to amortise their packing */
    int64_t tiles_wanted = threads;
    if (threads > 1) {
        double tile_flops = flops / (double)(threads * GEMM_OVERSUB);
        tiles_wanted = tile_flops >= MIN_TILE_FLOPS ? threads * GEMM_OVERSUB : threads;
    }
    if (j.path == PATH_SWAP && p->count < threads && (p->pack_b || !p->trans_b) && p->M >= SWAP_ROWS_MIN * p->N &&
        swap_rows_on()) {
        /* op(A)^T (the weights, from memory) much larger than op(B) (the input, or its im2col):
         * the rows split, the weights between the threads, and op(B) packed once for all the
         * tiles (run_job). Split by columns, every thread read all the weights (2048 -> 512 on
         * 7x7: 4 MB against B's 0.4). 2 threads, ResNet-50, per node: 7x7 512 -> 2048 0.83 of the
         * time, 2048 -> 512 0.92, 1024 -> 2048 (stride 2) 0.87; on 14x14 (M = 256, N = 196) 1.10,
         * hence the margin */
        j.tm = min64((threads + p->count - 1) / p->count, j.units_m);
        j.tn = 1;
    } else if (j.path == PATH_SWAP && p->count < threads) {
        /* transposed: every tile packs op(B) for its columns (a convolution's im2col, the costly
         * packing here) and reads the prepacked weights in place. Columns first, in units of MR
         * (49 = 24 + 25 at 2 threads), one tile per thread: tiles of rows would each pack all the
         * columns again (at 2 threads, 8 tiles of rows made a 3x3 512->512 convolution on 7x7 1.3x
         * slower than the usual orientation) */
        const int64_t target = (threads + p->count - 1) / p->count;
        /* among grids of at least `target` tiles (or as many as there are), the one whose tiles
         * spread most evenly over the threads (16 threads, 49 columns in 5 units: 4 x 4 tiles,
         * not 5 x 4 = 20, where 4 threads would run two), then the fewest rows of tiles */
        double best = 0;
        for (int64_t tn = 1; tn <= min64(target, j.units_n); tn++) {
            const int64_t tm = min64((target + tn - 1) / tn, j.units_m), tiles = tm * tn * p->count;
            const double share = (double)((tiles + threads - 1) / threads) / (double)tiles; /* of the work, on the busiest thread */
            if (best == 0 || share < best - 1e-12 || (share < best + 1e-12 && tm < j.tm)) {
                best = share;
                j.tm = tm;
                j.tn = tn;
            }
        }
    } else if (p->count < tiles_wanted) {
        int64_t target = (tiles_wanted + p->count - 1) / p->count;
        int64_t best_tiles = 0;
        double best_cost = 0;
        for (int64_t tm = 1; tm <= target && tm <= j.units_m; tm++) {
            int64_t tn = target / tm;
            if (tn > j.units_n) tn = j.units_n;
            if (tn < 1) tn = 1;
            int64_t tiles = tm * tn;
            double cost = (double)tn * (double)p->M + (double)tm * (double)p->N;
            if (tiles > best_tiles || (tiles == best_tiles && cost < best_cost)) {
                best_tiles = tiles;
                best_cost = cost;
                j.tm = tm;
                j.tn = tn;
            }
        }
    }
    if (j.path == PATH_GEMM && p->count > 1 && threads > 2 && !p->a_packed && !p->b_packed && !p->pack_b &&
        batch_spread_on()) {
        /* several products of plain operands (Einsum's, MatMul's of two activations: not the
         * convolutions' prepacked weights, whose grids were measured as they are) on 3 threads or
         * more: a grid whose busiest thread gets less than the
         * one above gives it (tiles dealt out evenly: the largest tile times the tiles of the
         * busiest thread), the fewest tiles among those. Attention's 12 heads of 128 x 64 x 128 at
         * 16 threads made 24 tiles above, 8 threads running two and 8 one (0.75 of the threads'
         * time used); 4 tiles a product make 3 a thread. Tiles keep a quarter of
         * MIN_FLOPS_PER_THREAD (about a microsecond to hand one out), at most 8 a thread. */
        const double prod_flops = flops / (double)p->count, before = grid_busiest(p, &j, j.tm, j.tn, threads);
        double best = before;
        int64_t best_tasks = 0, btm = j.tm, btn = j.tn;
        for (int64_t tm = 1; tm <= min64(j.units_m, 64); tm++)
            for (int64_t tn = 1; tn <= min64(j.units_n, 64); tn++) {
                const int64_t tasks = p->count * tm * tn;
                if (prod_flops / (double)(tm * tn) < MIN_FLOPS_PER_THREAD / 4 || tasks > 8 * threads) continue;
                const double busiest = grid_busiest(p, &j, tm, tn, threads);
                if (!(busiest < before * (1 - 1e-9))) continue; /* only where strictly better */
                if (best_tasks == 0 || busiest < best * (1 - 1e-9) || (busiest <= best * (1 + 1e-9) && tasks < best_tasks)) {
                    best = busiest;
                    best_tasks = tasks;
                    btm = tm;
                    btn = tn;
                }
            }
        j.tm = btm;
        j.tn = btn;
    }
    *jo = j;
    return threads;
}

int64_t kn_sgemm_tasks(const kn_sgemm_batch *p, int threads, int64_t *tm, int64_t *tn, int64_t *kp) {
    job j = {.tm = 1, .tn = 1, .kp = 1};
    switches_refresh();
    if (p->count > 0 && p->M > 0 && p->N > 0 && p->K > 0) plan_job(p, threads > 1 ? threads : 1, &j);
    if (tm) *tm = j.tm;
    if (tn) *tn = j.tn;
    if (kp) *kp = j.kp;
    return p->count * j.tm * j.tn * j.kp;
}

kiln_status kn_sgemm_run(kn_threadpool *pool, const kn_sgemm_batch *p) {
    if (p->count <= 0 || p->M <= 0 || p->N <= 0) return KILN_OK;
    switches_refresh();
    /* precision=bf16: the products of a node that runs in bf16 (sgemm_bf16.h) */
    if (kn_bgemm_active() && kn_bgemm_takes(p)) {
        if (!p->c_add && !p->clamp) return kn_bgemm_run(pool, p);
        /* the bf16 kernels apply the tail as part of the epilogue */
        kn_sgemm_batch q = *p;
        q.c_add = NULL;
        q.clamp = false;
        q.epilogue = tail_epilogue;
        q.epilogue_ctx = p;
        return kn_bgemm_run(pool, &q);
    }
    if (p->K <= 0) {
        scale_c(p);
        return KILN_OK;
    }
    job j;
    const int64_t threads = plan_job(p, kn_threadpool_size(pool), &j);
    if (j.kp > 1) {
        /* each tile's parts of K, then a counter a tile (swap_kparts) */
        const int64_t tiles = p->count * j.tm * j.tn;
        const int64_t mt = min64(p->M, (j.units_m + j.tm - 1) / j.tm * j.um),
                      nt = min64(p->N, (j.units_n + j.tn - 1) / j.tn * j.un);
        j.part_floats = (nt * swap_ldt(mt) + 15) / 16 * 16;
        const size_t pbytes = sizeof(float) * (size_t)(tiles * j.kp) * (size_t)j.part_floats;
        char *buf = kn_thread_buffer_get(&swap_part_buffers, pbytes + sizeof(int) * (size_t)tiles);
        if (!buf) return KN_OOM();
        j.parts = (float *)buf;
        j.part_done = (int *)(buf + pbytes);
        memset(j.part_done, 0, sizeof(int) * (size_t)tiles);
    }
    return run_job(pool, p, &j, threads);
}

static kiln_status run_job(kn_threadpool *pool, const kn_sgemm_batch *p, job *j, int64_t threads) {
    /* B packed whole and A not, several tiles: A packed once here for all of them (each tile
     * packed the rows it needed itself, so at 2 threads every column tile packed all of A again),
     * then the tiles run on both packed operands (run_packed_tile) */
    const int64_t Mp = padded_m(p->M);
    const size_t a_floats = (size_t)(Mp * p->K) * (size_t)p->count;
    const bool packed_b = j->path == PATH_GEMM && p->b_packed && !p->a_packed && !p->pack_b && pk_on();
    /* the step of K of every tile (pk_deep_product); where all the rows do not fit the workspace
     * at KCB, only with A packed whole here, at any thread count */
    j->pk_deep = packed_b && pk_deep_product(p);
    const bool deep_needs_a = j->pk_deep && !pk_tile_fits(p->M, true);
    /* not where A is one panel of rows (a decoder's or a classifier's few rows): each tile packs
     * those few KB itself, in its own chunk, where the shared copy took a parallel loop of its own
     * before the tiles' (2 threads, MatMul 4 x 768 @ 768 x 768, p50 over 2000 runs: 0.043-0.048 ->
     * 0.028-0.030 ms, ONNX Runtime 0.031) */
    if (packed_b && Mp > MR && (j->tm * j->tn > 1 || deep_needs_a) && a_floats <= PK_A_MAX_FLOATS) {
        float *ap = kn_thread_buffer_get(&shared_a_buffers, a_floats * sizeof(float));
        if (ap) {
            pack_a_job pj = {p, ap, Mp, (p->K + KCB - 1) / KCB, (p->M + PK_PACK_ROWS - 1) / PK_PACK_ROWS, 1};
            pj.parts = depth_parts(p->count * pj.slices * pj.blocks, threads, min64(KCB, p->K), PK_PACK_MIN_DEPTH);
            const int64_t n = p->count * pj.slices * pj.blocks * pj.parts;
            if (threads <= 1) pack_a_range(&pj, 0, n);
            else kn_parallel_for(pool, n, 1, pack_a_range, &pj);
            job jq = *j;
            jq.a_deep = ap;
            const int64_t tasks = p->count * jq.tm * jq.tn;
            if (threads <= 1) job_range(&jq, 0, tasks);
            else kn_parallel_for(pool, tasks, 1, job_range, &jq);
            return jq.failed ? KN_OOM() : KILN_OK;
        }
    }
    if (deep_needs_a) j->pk_deep = false; /* no shared A: every tile steps KC */
    if ((j->path == PATH_SWAP && (p->pack_b || !p->trans_b) && !swap_b_in_place(p) && j->tn == 1 && j->tm > 1 && threads > 1) ||
        gemm_b_shared(p, j, threads)) {
        const int64_t Np = padded_n(p->N);
        const size_t b_floats = (size_t)(Np * p->K) * (size_t)p->count;
        float *bs = kn_thread_buffer_get(&shared_b_buffers, b_floats * sizeof(float));
        if (bs) {
            pack_b_job pj = {p, bs, Np, (p->K + KC - 1) / KC, 1, 1, 1};
            pack_b_plan(&pj, threads);
            kn_parallel_for(pool, p->count * pj.slices * pj.blocks * pj.parts, 1, pack_b_shared_range, &pj);
            job jq = *j;
            jq.b_shared = bs;
            kn_parallel_for(pool, p->count * jq.tm * jq.tn * jq.kp, 1, job_range, &jq);
            return jq.failed ? KN_OOM() : KILN_OK;
        }
    }
    int64_t tasks = p->count * j->tm * j->tn * j->kp;
    if (threads <= 1) job_range(j, 0, tasks);
    else kn_parallel_for(pool, tasks, 1, job_range, j);
    if (j->failed) return KN_OOM();
    return KILN_OK;
}

kiln_status kn_sgemm(kn_threadpool *pool, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                     float *C, int64_t ldc) {
    const float *a[1] = {A}, *b[1] = {B};
    float *c[1] = {C};
    kn_sgemm_batch p = {.count = 1, .M = M, .N = N, .K = K, .trans_a = trans_a, .trans_b = trans_b,
                        .alpha = alpha, .beta = beta, .a = a, .lda = lda, .b = b, .ldb = ldb, .c = c, .ldc = ldc};
    return kn_sgemm_run(pool, &p);
}

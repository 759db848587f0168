/* Exact 8-bit integer products on AMX-INT8 (qgemm_amx.h says the layouts and why). */
#include "backend/cpu/qgemm_amx.h"

#include "backend/cpu/isa.h"
#include "util/aligned.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* AMX-INT8's intrinsics: GCC 11, clang 12 (as sgemm_bf16.c's AMX-BF16) */
#if defined(__x86_64__) && defined(__GNUC__) &&                                                                     \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#define KN_QAMX_X86 1
#include <immintrin.h>
#endif

#define TK 64 /* bytes of K in a tile row */
#define TR 16 /* rows of a tile */
#define BM 32 /* rows of C per kernel call (two A tiles) */
#define BN 32 /* columns of C per kernel call (two B tiles) */
/* a column block's B within this many bytes (L2), at least BN columns */
#define B_BLOCK_BYTES (256 * 1024)

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
/* bytes of K a tile step: 64, or 16 / 32 for a shallow K (a 1x1 convolution of 16 or 32 channels:
 * 64 would be mostly zeros); K padded to it */
static inline int k_step(int64_t K) { return K <= 16 ? 16 : K <= 32 ? 32 : TK; }
static inline int64_t k_pad(int64_t K) { return (K + k_step(K) - 1) / k_step(K) * k_step(K); }
static inline int64_t panels_of(int64_t N) { return (N + TR - 1) / TR; }

size_t kn_qgemm_amx_b_bytes(int64_t N, int64_t K) {
    return (size_t)(panels_of(N) * TR * k_pad(K) + panels_of(N) * TR * (int64_t)sizeof(int32_t));
}

void kn_qgemm_amx_pack_b(const void *b, bool b_signed, int64_t rs, int64_t cs, int64_t K, int64_t N, uint8_t *dst) {
    const uint8_t *src = b;
    const int64_t K64 = k_pad(K), P = panels_of(N);
    int32_t *sums = (int32_t *)(dst + P * TR * K64);
    memset(dst, 0, (size_t)(P * TR * K64)); /* zeros past K and past N */
    /* B's rows in order (a row-major B is read straight through): element (k, col) to panel
     * col / 16, group k / 4, byte 4 (col % 16) + k % 4; the sums wrap as int32 does */
    uint32_t *su = (uint32_t *)sums;
    for (int64_t col = 0; col < P * TR; col++) su[col] = 0;
    for (int64_t k = 0; k < K; k++) {
        const uint8_t *row = src + k * rs;
        uint8_t *d = dst + (k / 4) * 64 + k % 4;
        for (int64_t col = 0; col < N; col++) {
            const uint8_t v = row[col * cs];
            d[(col / TR) * TR * K64 + (col % TR) * 4] = v;
            su[col] += b_signed ? (uint32_t)(int32_t)(int8_t)v : (uint32_t)v;
        }
    }
}

/* ---------------------------------------------------------------- CPU support */

/* the tiles only where the compiler has their intrinsics and Linux gave the tile state */
static bool amx_permitted(void) {
#if defined(KN_QAMX_X86)
    return kn_cpu_amx_permitted();
#else
    return false;
#endif
}

static bool amx_has, amx_off;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static void amx_init_once(void) {
    const unsigned need = KN_CPUF_AMXINT8 | KN_CPUF_AVX512F | KN_CPUF_AVX512BW | KN_CPUF_AVX512VL | KN_CPUF_AVX512VNNI;
    amx_has = (kn_cpu_features() & need) == need && kn_cpu_isa_active() >= KN_ISA_AVX512 && amx_permitted();
}

bool kn_qgemm_amx(void) {
    pthread_once(&amx_once, amx_init_once);
    return amx_has && !amx_off;
}

bool kn_qgemm_amx_force(bool on) {
    pthread_once(&amx_once, amx_init_once);
    amx_off = !on;
    return !on || amx_has;
}

bool kn_qgemm_amx_pays(int64_t M, int64_t N, int64_t K) {
    /* a tile's 16 rows cost the same whatever of them are used, yet even one row of A beats the
     * vector forms (1x768 @ 768x768 u8 x s8: 0.0082 ms against 0.0131, or 0.0093 with weights
     * that take kn_qgemm8's form); a K of 16-32 takes shallow steps (k_step) and about ties them
     * (128x16 @ 16x768: 0.0275 ms against 0.0274); products under 2^18 stay on them */
    return M >= 1 && N >= 16 && K >= 16 && (double)M * (double)N * (double)K >= 1 << 18 && kn_qgemm_amx();
}

#if defined(KN_QAMX_X86)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8")
#endif

/* GCC's tile intrinsics are asm statements that do not tell the compiler which memory they read
 * or write: a compiler barrier orders them with the plain loads and stores around them */
#define KN_RQ_AVX512 1
#include "backend/cpu/qrequant.h"

#define AMX_FENCE() __asm__ volatile("" ::: "memory")

typedef struct __attribute__((aligned(64))) amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* C's tiles (0-3) int32 16 x 16, A's (4, 5) and B's (6, 7) one step of K; the thread's own
 * configuration, set before its run of tiles and released after */
static void tiles_begin(int kt) {
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    /* a depth of kt bytes of K a step (64, or 16 / 32 for a shallow K): A's tiles kt bytes wide,
     * B's kt / 4 rows */
    for (int t = 4; t < 6; t++) cfg.colsb[t] = (uint16_t)kt;
    for (int t = 6; t < 8; t++) cfg.rows[t] = (uint8_t)(kt / 4);
    AMX_FENCE();
    _tile_loadconfig(&cfg);
}

/* The sums of a 32 x 32 block (or 16 rows / 16 columns of it) over K64 into S (32 x 32, 128-byte
 * rows). A's two tiles at a0 and a1 (row strides s0, s1), B's panels at b0 (and b0 + pstride),
 * each K group of 4 one 64-byte row. kind: A signed * 2 + B signed. */
static inline __attribute__((always_inline)) void block(const int kind, const bool two_m, const bool two_n,
                                                        const uint8_t *a0, int64_t s0, const uint8_t *a1, int64_t s1,
                                                        const uint8_t *b0, int64_t pstride, int64_t K64, int kt,
                                                        int32_t *S) {
    AMX_FENCE();
    _tile_zero(0);
    if (two_n) _tile_zero(1);
    if (two_m) _tile_zero(2);
    if (two_m && two_n) _tile_zero(3);
#define DP(c, a, b)                                                                                                   \
    do {                                                                                                              \
        if (kind == 0) _tile_dpbuud(c, a, b);                                                                         \
        else if (kind == 1) _tile_dpbusd(c, a, b);                                                                    \
        else if (kind == 2) _tile_dpbsud(c, a, b);                                                                    \
        else _tile_dpbssd(c, a, b);                                                                                   \
    } while (0)
    for (int64_t k = 0; k < K64; k += kt) {
        _tile_loadd(4, a0 + k, s0);
        _tile_loadd(6, b0 + k * TR, 64);
        if (two_n) _tile_loadd(7, b0 + pstride + k * TR, 64);
        DP(0, 4, 6);
        if (two_n) DP(1, 4, 7);
        if (two_m) {
            _tile_loadd(5, a1 + k, s1);
            DP(2, 5, 6);
            if (two_n) DP(3, 5, 7);
        }
    }
#undef DP
    _tile_stored(0, S, 4 * BN);
    if (two_n) _tile_stored(1, S + TR, 4 * BN);
    if (two_m) _tile_stored(2, S + TR * BN, 4 * BN);
    if (two_m && two_n) _tile_stored(3, S + TR * BN + TR, 4 * BN);
    AMX_FENCE();
}

#define DEF_KIND(NAME, KIND)                                                                                          \
    static void NAME(bool two_m, bool two_n, const uint8_t *a0, int64_t s0, const uint8_t *a1, int64_t s1,          \
                     const uint8_t *b0, int64_t pstride, int64_t K64, int kt, int32_t *S) {                          \
        if (two_m && two_n) block(KIND, true, true, a0, s0, a1, s1, b0, pstride, K64, kt, S);                             \
        else if (two_m) block(KIND, true, false, a0, s0, a1, s1, b0, pstride, K64, kt, S);                                \
        else if (two_n) block(KIND, false, true, a0, s0, a1, s1, b0, pstride, K64, kt, S);                                \
        else block(KIND, false, false, a0, s0, a1, s1, b0, pstride, K64, kt, S);                                          \
    }
DEF_KIND(block_uu, 0)
DEF_KIND(block_us, 1)
DEF_KIND(block_su, 2)
DEF_KIND(block_ss, 3)
typedef void (*block_fn)(bool, bool, const uint8_t *, int64_t, const uint8_t *, int64_t, const uint8_t *, int64_t,
                         int64_t, int, int32_t *);

/* kn_qgemm's pair panels (KP pairs x 16 columns' pairs each) to the tiles' panels (K64 / 4 groups
 * x 16 columns' 4 bytes): group g is pairs 2g and 2g + 1 word by word; with sums, each column's
 * sum over K (zero past K) */
static inline __m512i pair_row(const uint8_t *s, int64_t kp, int64_t K) {
    const int64_t KP = (K + 1) / 2;
    if (kp >= KP) return _mm512_setzero_si512();
    __m256i v = _mm256_loadu_si256((const __m256i *)(s + kp * 2 * TR));
    /* an odd K's last pair: its high half past K, whatever the packer left there, is 0 (the column
     * sums count it) */
    if (kp == KP - 1 && K % 2) v = _mm256_and_si256(v, _mm256_set1_epi16(0x00ff));
    return _mm512_cvtepu16_epi32(v);
}

static void pairs_to_tiles(const uint8_t *src, int64_t K, int64_t K64, int64_t panels, bool b_signed, int32_t *sums,
                           uint8_t *dst) {
    const __m512i ones = _mm512_set1_epi8(1);
    const int64_t KP = (K + 1) / 2;
    for (int64_t p = 0; p < panels; p++) {
        const uint8_t *s = src + p * KP * 2 * TR;
        uint8_t *d = dst + p * TR * K64;
        __m512i acc = _mm512_setzero_si512();
        for (int64_t g = 0; g < K64 / 4; g++) {
            const __m512i lo = pair_row(s, 2 * g, K), hi = pair_row(s, 2 * g + 1, K);
            const __m512i v = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
            _mm512_store_si512((__m512i *)(d + g * 64), v);
            if (sums) acc = b_signed ? _mm512_dpbusd_epi32(acc, ones, v) : _mm512_dpbusd_epi32(acc, v, ones);
        }
        if (sums) _mm512_storeu_si512((__m512i *)(sums + p * TR), acc);
    }
}

/* one row of K's 16 columns: the panel's runs of bytes from x, each a masked load (lanes off the
 * mask touch no memory); at stride 2 along W, 32 bytes a run (the mask on the even ones) and
 * their even bytes kept (vpmovwb) */
static inline __attribute__((always_inline)) __m128i run_bytes(const int sw, const uint8_t *x, int nr,
                                                               const int64_t *rbase, const __mmask32 *rmask) {
    if (sw == 1) {
        __m128i v = _mm_maskz_loadu_epi8((__mmask16)rmask[0], (const void *)((intptr_t)x + (intptr_t)rbase[0]));
        for (int r = 1; r < nr; r++)
            v = _mm_or_si128(v, _mm_maskz_loadu_epi8((__mmask16)rmask[r], (const void *)((intptr_t)x + (intptr_t)rbase[r])));
        return v;
    }
    __m256i v = _mm256_maskz_loadu_epi8(rmask[0], (const void *)((intptr_t)x + (intptr_t)rbase[0]));
    for (int r = 1; r < nr; r++)
        v = _mm256_or_si256(v, _mm256_maskz_loadu_epi8(rmask[r], (const void *)((intptr_t)x + (intptr_t)rbase[r])));
    return _mm256_cvtepi16_epi8(v);
}

/* columns [n0, n0 + nc) of a convolution's im2col (qgemm_amx.h, kn_qgemm_amx_planes) as the
 * tiles' panels, koff[k] the offset of row k's tap; with sums, each column's sum over K */
static inline __attribute__((always_inline)) void planes_to_tiles_sw(const int sw, const kn_qgemm_amx_planes *pl,
                                                                     const int64_t *koff, int64_t K, int64_t K64,
                                                                     int64_t n0, int64_t nc, bool b_signed,
                                                                     int32_t *sums, uint8_t *dst) {
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t p = 0; p * TR < nc; p++) {
        /* the panel's runs: columns [j0, j0 + len) in one output row, column j's byte at
         * base + sw (j - j0); rbase = base - sw j0, so that lane j reads rbase + sw j */
        int nr = 0;
        int64_t rbase[TR];
        __mmask32 rmask[TR];
        const int cols = (int)min64(TR, nc - p * TR);
        for (int jj = 0; jj < cols;) {
            const int64_t n = n0 + p * TR + jj, oh = n / pl->OW, ow = n % pl->OW;
            const int len = (int)min64(cols - jj, pl->OW - ow);
            rbase[nr] = oh * pl->sh * pl->WP + (ow - jj) * sw;
            uint32_t m = 0;
            for (int q = jj; q < jj + len; q++) m |= 1u << (q * sw);
            rmask[nr] = m;
            nr++;
            jj += len;
        }
        uint8_t *d = dst + p * TR * K64;
        __m512i acc = _mm512_setzero_si512();
        const int64_t full = K / 4;
        for (int64_t g = 0; g < K64 / 4; g++) {
            __m128i v0, v1, v2, v3;
            if (g < full) {
                v0 = run_bytes(sw, pl->x + koff[4 * g], nr, rbase, rmask);
                v1 = run_bytes(sw, pl->x + koff[4 * g + 1], nr, rbase, rmask);
                v2 = run_bytes(sw, pl->x + koff[4 * g + 2], nr, rbase, rmask);
                v3 = run_bytes(sw, pl->x + koff[4 * g + 3], nr, rbase, rmask);
            } else { /* K's last partial group, then zeros up to K64 */
                const int64_t k = 4 * g;
                v0 = k < K ? run_bytes(sw, pl->x + koff[k], nr, rbase, rmask) : _mm_setzero_si128();
                v1 = k + 1 < K ? run_bytes(sw, pl->x + koff[k + 1], nr, rbase, rmask) : _mm_setzero_si128();
                v2 = k + 2 < K ? run_bytes(sw, pl->x + koff[k + 2], nr, rbase, rmask) : _mm_setzero_si128();
                v3 = _mm_setzero_si128();
            }
            const __m128i lo01 = _mm_unpacklo_epi8(v0, v1), hi01 = _mm_unpackhi_epi8(v0, v1);
            const __m128i lo23 = _mm_unpacklo_epi8(v2, v3), hi23 = _mm_unpackhi_epi8(v2, v3);
            __m512i w = _mm512_castsi128_si512(_mm_unpacklo_epi16(lo01, lo23));
            w = _mm512_inserti32x4(w, _mm_unpackhi_epi16(lo01, lo23), 1);
            w = _mm512_inserti32x4(w, _mm_unpacklo_epi16(hi01, hi23), 2);
            w = _mm512_inserti32x4(w, _mm_unpackhi_epi16(hi01, hi23), 3);
            _mm512_store_si512((__m512i *)(d + g * 64), w);
            if (sums) acc = b_signed ? _mm512_dpbusd_epi32(acc, ones, w) : _mm512_dpbusd_epi32(acc, w, ones);
        }
        if (sums) _mm512_storeu_si512((__m512i *)(sums + p * TR), acc);
    }
}

static void planes_to_tiles(const kn_qgemm_amx_planes *pl, const int64_t *koff, int64_t K, int64_t K64, int64_t n0,
                            int64_t nc, bool b_signed, int32_t *sums, uint8_t *dst) {
    if (pl->sw == 2) planes_to_tiles_sw(2, pl, koff, K, K64, n0, nc, b_signed, sums, dst);
    else planes_to_tiles_sw(1, pl, koff, K, K64, n0, nc, b_signed, sums, dst);
}

/* 16 sums (those in m) plus bias to 8-bit outputs: kn_q_requant's vector form (qrequant.h: float32,
 * the vector redone in double where a lane is near a tie; the bytes of the double definition) */
static inline void requant16(const kn_rq16_k *k, __m512i v, int32_t bias, float r, uint8_t *y, __mmask16 m) {
    _mm_mask_storeu_epi8(y, m, kn_rq16(k, _mm512_add_epi32(v, _mm512_set1_epi32(bias)), _mm512_set1_ps(r)));
}

/* sum over a row of K 8-bit values */
static int32_t row_sum(const uint8_t *a, int64_t K, bool a_signed) {
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i acc = _mm512_setzero_si512();
    for (int64_t k = 0; k < K; k += 64) {
        const __mmask64 m = K - k >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (K - k)) - 1);
        const __m512i v = _mm512_maskz_loadu_epi8(m, a + k);
        acc = a_signed ? _mm512_dpbusd_epi32(acc, ones, v) : _mm512_dpbusd_epi32(acc, v, ones);
    }
    return _mm512_reduce_add_epi32(acc);
}

void kn_qgemm_amx_row_sums(const void *a, int64_t lda, bool a_signed, int64_t M, int64_t K, int32_t *out) {
    for (int64_t i = 0; i < M; i++) out[i] = row_sum((const uint8_t *)a + i * lda, K, a_signed);
}

typedef struct amx_job {
    const kn_qgemm_amx_args *g;
    int64_t K64, KP, width, row_units, row_blocks, col_blocks; /* K64: K padded to kt */
    int kt; /* k_step(K) */
    const uint8_t *a_tail; /* rows [a_direct, M) (or all) padded to K64, 32-row blocks */
    int64_t a_direct;      /* rows read from A as it is (a multiple of 16) */
    const int32_t *ra;     /* A's row sums, or NULL (no zb) */
    const int64_t *koff;   /* B from planes: row k's tap offset */
    bool need_cb;          /* some A zero point: B's column sums wanted */
    block_fn fn;
    atomic_int failed;
} amx_job;

static inline const uint8_t *a_rows(const amx_job *j, int64_t i, int64_t *stride) {
    if (i < j->a_direct) {
        *stride = j->g->lda;
        return (const uint8_t *)j->g->a + i * j->g->lda;
    }
    *stride = j->K64;
    return j->a_tail + (i - j->a_direct) * j->K64;
}

/* QLinearConv's epilogue (rq_y): the kernel's block S (mr rows of C from m0, columns c0..c0+n of
 * the column block n0) corrected for the zero points, plus the bias, requantised into rq_y. A
 * row's scalar parts (its bias, and zb times its row sum where B has one zero point) are one
 * offset; only a zero point per column of B or of rows of A (za: B's column sums wanted) takes
 * a product per vector. The int32 wrap makes the order of the sums free. */
typedef struct rq_rows {
    int32_t off[BM], ra[BM], za[BM];
    float r[BM];
} rq_rows;

static void requant_rows(const amx_job *j, int64_t m0, int64_t mr, rq_rows *w) {
    const kn_qgemm_amx_args *g = j->g;
    const bool zb_row = j->ra != NULL;
    for (int64_t r = 0; r < mr; r++) {
        const int64_t i = m0 + r;
        const uint32_t ra = zb_row ? (uint32_t)j->ra[i] : 0;
        uint32_t off = g->rq_bias ? (uint32_t)g->rq_bias[i] : 0;
        if (zb_row && !g->zb_cols) off -= (uint32_t)g->zb * ra;
        w->off[r] = (int32_t)off, w->ra[r] = (int32_t)ra, w->za[r] = g->za_rows ? g->za_rows[i] : g->za;
        w->r[r] = g->rq_r[i];
    }
}

static void requant_block(const amx_job *j, const kn_rq16_k *k, const rq_rows *w, const int32_t *S, int64_t m0,
                          int64_t mr, int64_t n0, int64_t c0, int64_t n, const int32_t *zbw, const int32_t *qw) {
    const kn_qgemm_amx_args *g = j->g;
    /* (locals: the byte stores may alias anything, g's fields included) */
    const kn_rq16_k kk = *k;
    const bool zb_cols = j->ra != NULL && g->zb_cols, need_cb = j->need_cb, accumulate = g->accumulate;
    const int32_t *c = g->c + m0 * g->ldc + n0 + c0;
    const int64_t ldc = g->ldc, ldy = g->rq_ldy;
    uint8_t *y = g->rq_y + m0 * ldy + n0 + c0;
    if (!zb_cols && !need_cb && !accumulate && n == BN) { /* the common block: two whole vectors a row */
        for (int64_t r = 0; r < mr; r++) {
            const __m512i ov = _mm512_set1_epi32(w->off[r]);
            const __m512 rv = _mm512_set1_ps(w->r[r]);
            const __m512i v0 = _mm512_add_epi32(_mm512_load_si512((const __m512i *)(S + r * BN)), ov);
            const __m512i v1 = _mm512_add_epi32(_mm512_load_si512((const __m512i *)(S + r * BN + TR)), ov);
            _mm_storeu_si128((__m128i *)(y + r * ldy), kn_rq16(&kk, v0, rv));
            _mm_storeu_si128((__m128i *)(y + r * ldy + TR), kn_rq16(&kk, v1, rv));
        }
        return;
    }
    for (int64_t r = 0; r < mr; r++) {
        const __m512i ov = _mm512_set1_epi32(w->off[r]), rav = _mm512_set1_epi32(w->ra[r]);
        const __m512i za = _mm512_set1_epi32(w->za[r]);
        const __m512 rv = _mm512_set1_ps(w->r[r]);
        for (int64_t h = 0; h < n; h += TR) {
            const __mmask16 m = n - h >= TR ? (__mmask16)0xffff : (__mmask16)((1u << (n - h)) - 1);
            __m512i v = _mm512_add_epi32(_mm512_load_si512((const __m512i *)(S + r * BN + h)), ov);
            if (zb_cols) v = _mm512_sub_epi32(v, _mm512_mullo_epi32(_mm512_maskz_loadu_epi32(m, zbw + c0 + h), rav));
            if (need_cb) v = _mm512_add_epi32(v, _mm512_mullo_epi32(_mm512_maskz_loadu_epi32(m, qw + c0 + h), za));
            if (accumulate) v = _mm512_add_epi32(v, _mm512_maskz_loadu_epi32(m, c + r * ldc + h));
            _mm_mask_storeu_epi8(y + r * ldy + h, m, kn_rq16(&kk, v, rv));
        }
    }
}

/* units are (column block, row block), column-major, as kn_qgemm_run's */
static void amx_range(void *arg, int64_t u0, int64_t u1) {
    amx_job *j = arg;
    const kn_qgemm_amx_args *g = j->g;
    const int64_t K64 = j->K64, W = j->width, WP = W / TR;
    const bool zb_any = j->ra != NULL;
    const bool convert = !g->b;
    const kn_rq16_k rqk = kn_rq16_setup(g->rq_zy, g->rq_s8);
    uint8_t *tb = convert ? kn_aligned_alloc(64, (size_t)(WP * TR * K64)) : NULL;
    uint8_t *pairs = convert && !g->b_pairs && !g->planes ? kn_aligned_alloc(64, (size_t)(WP * j->KP * 2 * TR)) : NULL;
    int32_t *cols = malloc(sizeof(int32_t) * (size_t)(3 * W)); /* column sums, zb, K zb - colsum */
    int32_t *S = kn_aligned_alloc(64, sizeof(int32_t) * BM * BN);
    if ((convert && !tb) || (convert && !g->b_pairs && !g->planes && !pairs) || !cols || !S) {
        atomic_store(&j->failed, 1);
        free(tb);
        free(pairs);
        free(cols);
        free(S);
        return;
    }
    int32_t *cb = cols, *zbw = cols + W, *qw = cols + 2 * W;
    tiles_begin(j->kt);
    int64_t have = -1;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t cbk = u / j->row_blocks, rb = u % j->row_blocks;
        const int64_t n0 = cbk * W, nc = min64(W, g->N - n0), np = panels_of(nc);
        const uint8_t *B;
        if (!convert) {
            B = g->b + n0 * K64;
            if (have != cbk && j->need_cb) {
                const int32_t *all = (const int32_t *)(g->b + panels_of(g->N) * TR * K64);
                for (int64_t q = 0; q < nc; q++) cb[q] = all[n0 + q];
            }
        } else {
            if (have != cbk && g->planes) {
                planes_to_tiles(g->planes, j->koff, g->K, K64, n0, nc, g->b_signed, j->need_cb ? cb : NULL, tb);
            } else if (have != cbk) {
                const uint8_t *src = g->b_pairs ? g->b_pairs + n0 * 2 * j->KP : pairs;
                if (!g->b_pairs) g->pack_b(g->pack_ctx, n0, nc, pairs);
                pairs_to_tiles(src, g->K, K64, np, g->b_signed, j->need_cb ? cb : NULL, tb);
            }
            B = tb;
        }
        if (have != cbk)
            for (int64_t q = 0; q < nc; q++) {
                const uint32_t zbq = (uint32_t)(g->zb_cols ? g->zb_cols[n0 + q] : g->zb);
                zbw[q] = (int32_t)zbq;
                qw[q] = j->need_cb ? (int32_t)((uint32_t)g->K * zbq - (uint32_t)cb[q]) : 0;
            }
        have = cbk;
        const int64_t m_begin = rb * j->row_units * BM, m_end = min64(g->M, m_begin + j->row_units * BM);
        for (int64_t m0 = m_begin; m0 < m_end; m0 += BM) {
            const int64_t mr = min64(BM, m_end - m0);
            int64_t s0, s1 = 0;
            const uint8_t *a0 = a_rows(j, m0, &s0), *a1 = mr > TR ? a_rows(j, m0 + TR, &s1) : NULL;
            rq_rows rows;
            if (g->rq_y) requant_rows(j, m0, mr, &rows);
            for (int64_t c0 = 0; c0 < nc; c0 += BN) {
                const int64_t n = min64(BN, nc - c0);
                j->fn(mr > TR, n > TR, a0, s0, a1, s1, B + c0 * K64, TR * K64, K64, j->kt, S);
                /* C = S - zb_j rowsum_i + za_i (K zb_j - colsum_j) (wrapping as int32) */
                if (g->rq_y) requant_block(j, &rqk, &rows, S, m0, mr, n0, c0, n, zbw, qw);
                else
                    for (int64_t r = 0; r < mr; r++) {
                        const int64_t i = m0 + r;
                        const __m512i ra = _mm512_set1_epi32(zb_any ? j->ra[i] : 0);
                        const __m512i za = _mm512_set1_epi32(g->za_rows ? g->za_rows[i] : g->za);
                        int32_t *crow = g->c + i * g->ldc + n0 + c0;
                        for (int64_t h = 0; h < n; h += TR) {
                            const __mmask16 m = n - h >= TR ? (__mmask16)0xffff : (__mmask16)((1u << (n - h)) - 1);
                            __m512i v = _mm512_load_si512((const __m512i *)(S + r * BN + h));
                            if (zb_any)
                                v = _mm512_sub_epi32(v, _mm512_mullo_epi32(_mm512_maskz_loadu_epi32(m, zbw + c0 + h), ra));
                            if (j->need_cb)
                                v = _mm512_add_epi32(v, _mm512_mullo_epi32(_mm512_maskz_loadu_epi32(m, qw + c0 + h), za));
                            if (g->accumulate) v = _mm512_add_epi32(v, _mm512_maskz_loadu_epi32(m, crow + h));
                            _mm512_mask_storeu_epi32(crow + h, m, v);
                        }
                    }
            }
            if (g->rows_done && !g->rq_y) g->rows_done(g->done_ctx, m0, m0 + mr, n0, nc);
        }
    }
    _tile_release();
    free(tb);
    free(pairs);
    free(cols);
    free(S);
}

kiln_status kn_qgemm_amx_run(kn_threadpool *pool, const kn_qgemm_amx_args *g) {
    if (!kn_qgemm_amx()) return KILN_ERR_UNSUPPORTED;
    if (g->M <= 0 || g->N <= 0) return KILN_OK;
    if (g->K <= 0) {
        const kn_rq16_k rqk = kn_rq16_setup(g->rq_zy, g->rq_s8);
        if (!g->accumulate)
            for (int64_t i = 0; i < g->M; i++) memset(g->c + i * g->ldc, 0, sizeof(int32_t) * (size_t)g->N);
        for (int64_t i = 0; g->rq_y && i < g->M; i++)
            for (int64_t q = 0; q < g->N; q += TR)
                requant16(&rqk, _mm512_setzero_si512(), g->rq_bias ? g->rq_bias[i] : 0, g->rq_r[i],
                          g->rq_y + i * g->rq_ldy + q, g->N - q >= TR ? (__mmask16)0xffff : (__mmask16)((1u << (g->N - q)) - 1));
        if (g->rows_done && !g->rq_y) g->rows_done(g->done_ctx, 0, g->M, 0, g->N);
        return KILN_OK;
    }
    static const block_fn fns[4] = {block_uu, block_us, block_su, block_ss};
    const int kt = k_step(g->K);
    amx_job j = {.g = g, .K64 = k_pad(g->K), .KP = (g->K + 1) / 2, .kt = kt,
                 .fn = fns[g->a_signed * 2 + g->b_signed]};
    bool zb_any = g->zb != 0, za_any = g->za != 0;
    for (int64_t q = 0; g->zb_cols && !zb_any && q < g->N; q++) zb_any = g->zb_cols[q] != 0;
    for (int64_t i = 0; g->za_rows && !za_any && i < g->M; i++) za_any = g->za_rows[i] != 0;
    j.need_cb = za_any;
    /* A: full 16-row tiles straight from its rows where K fills whole tiles; the rest padded */
    j.a_direct = g->K % kt == 0 ? g->M / TR * TR : 0;
    const int64_t tail_rows = g->M - j.a_direct;
    uint8_t *tail = tail_rows ? kn_aligned_alloc(64, (size_t)((tail_rows + TR - 1) / TR * TR * j.K64)) : NULL;
    int32_t *ra = zb_any && !g->a_sums ? malloc(sizeof(int32_t) * (size_t)g->M) : NULL;
    if ((tail_rows && !tail) || (zb_any && !g->a_sums && !ra)) {
        free(tail);
        free(ra);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    if (tail) {
        memset(tail, 0, (size_t)((tail_rows + TR - 1) / TR * TR * j.K64));
        for (int64_t i = 0; i < tail_rows; i++)
            memcpy(tail + i * j.K64, (const uint8_t *)g->a + (j.a_direct + i) * g->lda, (size_t)g->K);
    }
    if (ra) kn_qgemm_amx_row_sums(g->a, g->lda, g->a_signed, g->M, g->K, ra);
    j.a_tail = tail;
    j.ra = zb_any ? (g->a_sums ? g->a_sums : ra) : NULL;
    int64_t *koff = NULL;
    if (g->planes) {
        const kn_qgemm_amx_planes *pl = g->planes;
        if (!(koff = malloc(sizeof(int64_t) * (size_t)g->K))) {
            free(tail);
            free(ra);
            return KILN_ERR_OUT_OF_MEMORY;
        }
        /* k = (c, kh, kw) counted up (a division per k was a quarter of a 7x7 layer's time) */
        int64_t k = 0;
        for (int64_t c = 0; k < g->K; c++)
            for (int64_t kh = 0; kh < pl->KH && k < g->K; kh++)
                for (int64_t kw = 0; kw < pl->KW && k < g->K; kw++)
                    koff[k++] = c * pl->plane + kh * pl->dh * pl->WP + kw * pl->dw;
    }
    j.koff = koff;
    /* column blocks of B within L2, split further for the threads, then rows, as kn_qgemm_run */
    const int64_t threads = kn_threadpool_size(pool) > 0 ? kn_threadpool_size(pool) : 1;
    const double work = (double)g->M * (double)g->N * (double)g->K;
    const int64_t useful = work < 2e6 ? 1 : min64(threads, (int64_t)(work / 1e6));
    const int64_t pairs32 = (g->N + BN - 1) / BN, row_units = (g->M + BM - 1) / BM;
    int64_t bp = B_BLOCK_BYTES / (BN * j.K64);
    bp = bp < 1 ? 1 : bp;
    if (useful > 1) { /* a multiple of the threads' count of column blocks, as even as they come */
        const int64_t blocks = ((pairs32 + bp - 1) / bp + useful - 1) / useful * useful;
        bp = (pairs32 + blocks - 1) / blocks;
    }
    j.width = bp * BN;
    j.col_blocks = (pairs32 + bp - 1) / bp;
    j.row_blocks = j.col_blocks >= useful ? 1 : min64(row_units, (useful + j.col_blocks - 1) / j.col_blocks);
    j.row_units = (row_units + j.row_blocks - 1) / j.row_blocks;
    j.row_blocks = (row_units + j.row_units - 1) / j.row_units;
    const int64_t units = j.col_blocks * j.row_blocks;
    if (useful <= 1) amx_range(&j, 0, units);
    else kn_parallel_for(pool, units, 1, amx_range, &j);
    free(tail);
    free(ra);
    free(koff);
    return atomic_load(&j.failed) ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else /* no AMX-INT8 intrinsics: never used (kn_qgemm_amx() is false) */

kiln_status kn_qgemm_amx_run(kn_threadpool *pool, const kn_qgemm_amx_args *g) {
    (void)pool;
    (void)g;
    return KILN_ERR_UNSUPPORTED;
}

void kn_qgemm_amx_row_sums(const void *a, int64_t lda, bool a_signed, int64_t M, int64_t K, int32_t *out) {
    for (int64_t i = 0; i < M; i++) {
        uint32_t sum = 0;
        for (int64_t k = 0; k < K; k++) {
            const uint8_t v = ((const uint8_t *)a)[i * lda + k];
            sum += a_signed ? (uint32_t)(int32_t)(int8_t)v : v;
        }
        out[i] = (int32_t)sum;
    }
}

#endif

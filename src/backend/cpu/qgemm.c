/* Exact 8-bit integer products as int16 pairs (qgemm.h says why and the packed layouts). */
#include "backend/cpu/qgemm.h"

#include "backend/cpu/conv_int_dw.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/qrequant.h"
#include "util/aligned.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* the AVX-512 VNNI forms (kn_cpu_has_vnni decides at run time) where the compiler has AVX-512 */
#if defined(__AVX512F__) && (defined(__GNUC__) || defined(__clang__))
#define KN_QGEMM_VNNI 1
#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#endif

#define MR KN_QGEMM_MR
#define NR KN_QGEMM_NR
/* pairs of K per pass over C: an A panel's slice (6 KB) and a B panel's (8 KB) stay in L1 */
#define KP_BLOCK KN_QGEMM_KP_BLOCK
/* a column block's packed B kept within this many bytes (L2), at least one panel */
#define B_BLOCK_BYTES (192 * 1024)

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t pairs_of(int64_t K) { return (K + 1) / 2; }

static inline int64_t quads_of(int64_t K) { return (K + 3) / 4; }

/* The byte form of packed A (qgemm.h) after the row sums: BYTES_HEAD words (a check word, the
 * form), MR words a quad of K per panel, then MR words of c per panel */
#define BYTES_HEAD 4
enum { QB_NONE = 0, QB_SIGNED = 1, QB_UNSIGNED = 2, QB_VNNI = 3 };

/* two int16 values in one word, lo in the low half (vpmaddwd's order); pair_lo / pair_hi read
 * them back */
static inline int32_t pair(int32_t lo, int32_t hi) {
    return (int32_t)((uint32_t)(uint16_t)(int16_t)lo | (uint32_t)(uint16_t)(int16_t)hi << 16);
}
static inline int32_t pair_lo(int32_t w) { return (int16_t)(uint16_t)((uint32_t)w & 0xffffu); }
static inline int32_t pair_hi(int32_t w) { return (int16_t)(uint16_t)((uint32_t)w >> 16); }

#if defined(__AVX2__)
/* A panel's pairs run kp-major, MR (6) rows a pair, so 24 words (four pairs of K) are three
 * vectors whose lanes hold the rows 0-5, 0, 1 | 2-5, 0-3 | 4, 5, 0-5: their int32 lanes added to
 * s[row] (mod 2^32) */
static inline void add_lanes_to_rows(__m256i c0, __m256i c1, __m256i c2, uint32_t s[MR]) {
    uint32_t t[24];
    _mm256_storeu_si256((__m256i *)t, c0);
    _mm256_storeu_si256((__m256i *)(t + 8), c1);
    _mm256_storeu_si256((__m256i *)(t + 16), c2);
    for (int w = 0; w < 24; w++) s[w % MR] += t[w];
}
#endif

size_t kn_qgemm_a_words(int64_t M, int64_t K) {
    const int64_t rows = (M + MR - 1) / MR * MR;
    return (size_t)(rows * (pairs_of(K) + 1) + BYTES_HEAD + rows * (quads_of(K) + 1) + rows);
}

/* packed A's last words: per row sum_k |a'_ik| (qgemm.h), the fused requantisation's bound */
static int32_t *abs_sums_of(const int32_t *a, int64_t M, int64_t K) {
    const int64_t rows = (M + MR - 1) / MR * MR;
    return (int32_t *)a + rows * (pairs_of(K) + 1) + BYTES_HEAD + rows * (quads_of(K) + 1);
}

/* Writes them from the packed pairs, four pairs a step (add_lanes_to_rows): |lo| + |hi| per word
 * by vpabsw and vpmaddwd against ones. Once per
 * packing (kept with constant weights) instead of a pass over A's pairs per call: on 4x4 and 7x7
 * planes that pass was 36% and 15% of a uint8-weight QLinearConv (K 504, 432; perf, 1 thread). */
static void abs_sums_make(int32_t *a, int64_t M, int64_t K) {
    const int64_t KP = pairs_of(K), panels = (M + MR - 1) / MR;
    int32_t *out = abs_sums_of(a, M, K);
    for (int64_t p = 0; p < panels; p++) {
        const int32_t *A = a + p * KP * MR;
        uint32_t s[MR] = {0};
        int64_t kp = 0;
#if defined(__AVX2__)
        const __m256i ones = _mm256_set1_epi16(1);
        __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0;
        for (; kp + 4 <= KP; kp += 4, A += 4 * MR) {
            c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(_mm256_abs_epi16(_mm256_loadu_si256((const __m256i *)A)), ones));
            c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(_mm256_abs_epi16(_mm256_loadu_si256((const __m256i *)(A + 8))), ones));
            c2 = _mm256_add_epi32(c2, _mm256_madd_epi16(_mm256_abs_epi16(_mm256_loadu_si256((const __m256i *)(A + 16))), ones));
        }
        add_lanes_to_rows(c0, c1, c2, s);
#endif
        for (; kp < KP; kp++, A += MR)
            for (int r = 0; r < MR; r++) s[r] += (uint32_t)(abs(pair_lo(A[r])) + abs(pair_hi(A[r])));
        for (int r = 0; r < MR; r++) out[p * MR + r] = (int32_t)s[r];
    }
}

/* the header's check word: a packed A of other dimensions (a buffer reused for a smaller product)
 * does not pass for this one's */
static int32_t bytes_check(int64_t M, int64_t K) {
    return (int32_t)(0x4b384151u ^ ((uint32_t)M * 2654435761u) ^ ((uint32_t)K * 40503u));
}
size_t kn_qgemm_b_bytes(int64_t N, int64_t K) { return (size_t)((N + NR - 1) / NR * NR * 2 * pairs_of(K)); }

/* element (i, k) of A at a[i * rs + k * cs]; a unit cs (the usual layout) takes the plain loop */
#define DEF_PACK_A(NAME, T)                                                                                   \
    static void NAME(const T *a, int64_t rs, int64_t cs, int64_t M, int64_t K, const int32_t *zr, int32_t zp,  \
                     int32_t *dst) {                                                                          \
        const int64_t KP = pairs_of(K), panels = (M + MR - 1) / MR;                                           \
        int32_t *sums = dst + panels * MR * KP;                                                               \
        for (int64_t p = 0; p < panels; p++)                                                                  \
            for (int r = 0; r < MR; r++) {                                                                    \
                const int64_t i = p * MR + r;                                                                 \
                int32_t *d = dst + p * KP * MR + r, sum = 0;                                                  \
                if (i >= M) {                                                                                 \
                    for (int64_t kp = 0; kp < KP; kp++) d[kp * MR] = 0;                                       \
                    sums[i] = 0;                                                                              \
                    continue;                                                                                 \
                }                                                                                             \
                const T *row = a + i * rs;                                                                    \
                const int32_t z = zr ? zr[i] : zp;                                                            \
                for (int64_t kp = 0; kp < K / 2; kp++) {                                                      \
                    const int32_t v0 = (int32_t)row[2 * kp * cs] - z, v1 = (int32_t)row[(2 * kp + 1) * cs] - z; \
                    d[kp * MR] = pair(v0, v1);                                                                \
                    sum += v0 + v1;                                                                           \
                }                                                                                             \
                if (K % 2) {                                                                                  \
                    const int32_t v0 = (int32_t)row[(K - 1) * cs] - z;                                        \
                    d[(KP - 1) * MR] = pair(v0, 0);                                                           \
                    sum += v0;                                                                                \
                }                                                                                             \
                sums[i] = sum;                                                                                \
            }                                                                                                 \
    }
DEF_PACK_A(pack_a_s8, int8_t)
DEF_PACK_A(pack_a_u8, uint8_t)

#if defined(__AVX2__)
/* A row-major (cs 1): per panel, 16 values of K (8 pairs) of its six rows at a time, each row less
 * its zero point as 8 pair words, the 6 x 8 words transposed (rows 6 and 7 zero) and stored six
 * words a pair; the row sums from the same vectors; the rest of K by the loop above's rule */
static void pack_a_rows_avx2(const uint8_t *a, bool s8, int64_t lda, int64_t M, int64_t K, const int32_t *zr,
                             int32_t zp, int32_t *dst) {
    const int64_t KP = pairs_of(K), panels = (M + MR - 1) / MR, K16 = K / 16 * 16;
    int32_t *sums = dst + panels * MR * KP;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t p = 0; p < panels; p++) {
        int32_t *d = dst + p * KP * MR;
        __m256i acc[MR];
        int32_t z[MR];
        const int rows = (int)min64(MR, M - p * MR);
        for (int r = 0; r < MR; r++) {
            acc[r] = _mm256_setzero_si256();
            z[r] = r < rows ? (zr ? zr[p * MR + r] : zp) : 0;
        }
        for (int64_t k0 = 0; k0 < K16; k0 += 16) {
            __m256i w[8];
            for (int r = 0; r < MR; r++) {
                if (r >= rows) {
                    w[r] = _mm256_setzero_si256();
                    continue;
                }
                const __m128i raw = _mm_loadu_si128((const __m128i *)(a + (p * MR + r) * lda + k0));
                const __m256i v = _mm256_sub_epi16(s8 ? _mm256_cvtepi8_epi16(raw) : _mm256_cvtepu8_epi16(raw),
                                                   _mm256_set1_epi16((int16_t)z[r]));
                acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(v, ones));
                w[r] = v; /* words j = pairs k0/2 + j (lanes 0-3 then 4-7) */
            }
            w[6] = w[7] = _mm256_setzero_si256();
            /* 8 x 8 words transposed: t[j] = (w[0][j], ..., w[7][j]) */
            __m256i t[8];
            kn_q_transpose8x32(w, t);
            for (int j = 0; j < 8; j++) {
                int32_t *o = d + (k0 / 2 + j) * MR;
                _mm_storeu_si128((__m128i *)o, _mm256_castsi256_si128(t[j]));
                _mm_storel_epi64((__m128i *)(o + 4), _mm256_extracti128_si256(t[j], 1));
            }
        }
        for (int r = 0; r < MR; r++) {
            int32_t h[8], sum = 0;
            _mm256_storeu_si256((__m256i *)h, acc[r]);
            for (int e = 0; e < 8; e++) sum += h[e];
            if (r < rows) {
                const uint8_t *row = a + (p * MR + r) * lda;
                for (int64_t k = K16; k < K; k += 2) {
                    const int32_t v0 = (s8 ? (int32_t)(int8_t)row[k] : (int32_t)row[k]) - z[r];
                    const int32_t v1 = k + 1 < K ? (s8 ? (int32_t)(int8_t)row[k + 1] : (int32_t)row[k + 1]) - z[r] : 0;
                    d[(k / 2) * MR + r] = pair(v0, v1);
                    sum += v0 + v1;
                }
            } else {
                for (int64_t kp = K16 / 2; kp < KP; kp++) d[kp * MR + r] = 0;
            }
            sums[p * MR + r] = sum;
        }
    }
}
#endif

/* Whether every pair of A's packed int16 words (a'0, a'1) has |a'0| + |a'1| <= 128 and both within
 * int8: then against any uint8 u, |a'0 u0 + a'1 u1| <= 128 * 255 = 32640, and vpmaddubsw's
 * saturating int16 pair sums are the exact ones (kn_qgemm's signed byte form) */
static bool pairs_bounded(const int32_t *w, int64_t n) {
    int64_t i = 0;
#if defined(__AVX2__)
    const __m256i ones = _mm256_set1_epi16(1), lim = _mm256_set1_epi32(128), top = _mm256_set1_epi16(128);
    __m256i bad = _mm256_setzero_si256();
    for (; i + 8 <= n; i += 8) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(w + i));
        bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_madd_epi16(_mm256_abs_epi16(v), ones), lim));
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi16(v, top));
    }
    if (!_mm256_testz_si256(bad, bad)) return false;
#endif
    for (; i < n; i++) {
        const int32_t lo = pair_lo(w[i]), hi = pair_hi(w[i]);
        if (abs(lo) + abs(hi) > 128 || lo == 128 || hi == 128) return false;
    }
    return true;
}

/* A's byte form (the int16 pairs already in dst): QB_SIGNED, the bytes a' (A's values less their
 * zero points) where pairs_bounded holds, for B's bytes as vpmaddubsw's unsigned operand; else
 * QB_UNSIGNED, the bytes u = a (uint8) or a + 128 (int8) as its unsigned operand, for a B whose
 * bytes less their zero points are bounded so (checked per block of columns when run), with
 * c = a' - u per row (-z or -z - 128). Bytes past K are 0. */
static void pack_a_bytes(const uint8_t *a, bool s8, int64_t rs, int64_t cs, int64_t M, int64_t K, const int32_t *zr,
                         int32_t zp, int32_t *dst) {
    const int64_t KP = pairs_of(K), KQ = quads_of(K), panels = (M + MR - 1) / MR;
    int32_t *head = dst + panels * MR * (KP + 1), *cv = head + BYTES_HEAD + panels * MR * KQ;
    uint8_t *q8 = (uint8_t *)(head + BYTES_HEAD);
    head[0] = bytes_check(M, K), head[1] = QB_NONE, head[2] = head[3] = 0;
#if !defined(__AVX2__)
    return; /* (the byte forms are AVX2's) */
#endif
    bool vform = false;
#if defined(KN_QGEMM_VNNI)
    /* QB_VNNI: A's bytes as vpdpbusd's signed operand whatever its type and zero point: s = a
     * (int8) or a - 128 (uint8, its top bit flipped), with d = a' - s per row (-z, or 128 - z) in
     * c's place; head[2] says whether any d is nonzero (kn_qgemm_run then adds d_i times B's
     * column sums). Any M: the VNNI byte tile takes one and two rows too. */
    vform = kn_cpu_has_vnni();
#endif
    if (M < 3 && !vform) return; /* (kn_qgemm_run's one-row tiles then) */
    const bool sform = !vform && pairs_bounded(dst, panels * MR * KP);
    const uint8_t flip = vform ? (s8 ? 0 : 0x80) : s8 ? 0x80 : 0;
    head[1] = vform ? QB_VNNI : sform ? QB_SIGNED : QB_UNSIGNED;
    for (int64_t p = 0; p < panels; p++) {
        const int rows = (int)min64(MR, M - p * MR);
        uint8_t zb8[MR];
        for (int r = 0; r < MR; r++) {
            const int32_t z = r < rows ? (zr ? zr[p * MR + r] : zp) : 0;
            zb8[r] = sform ? (uint8_t)z : flip;
            cv[p * MR + r] = r >= rows ? 0 : vform ? (s8 ? -z : 128 - z) : !sform ? -z - (s8 ? 128 : 0) : 0;
            head[2] |= vform && cv[p * MR + r] != 0;
        }
        uint8_t *d = q8 + p * KQ * MR * 4;
        int64_t k0 = 0;
#if defined(__AVX2__)
        if (cs == 1)
            for (; k0 + 32 <= K; k0 += 32) {
                __m256i w[8], t[8];
                w[6] = w[7] = _mm256_setzero_si256();
                for (int r = 0; r < MR; r++) {
                    if (r >= rows) {
                        w[r] = _mm256_setzero_si256();
                        continue;
                    }
                    const __m256i x = _mm256_loadu_si256((const __m256i *)(a + (p * MR + r) * rs + k0));
                    const __m256i z = _mm256_set1_epi8((char)zb8[r]);
                    w[r] = sform ? _mm256_sub_epi8(x, z) : _mm256_xor_si256(x, z);
                }
                kn_q_transpose8x32(w, t); /* t[j]: quad k0 / 4 + j of the rows */
                for (int j = 0; j < 8; j++) {
                    uint8_t *o = d + (k0 / 4 + j) * MR * 4;
                    _mm_storeu_si128((__m128i *)o, _mm256_castsi256_si128(t[j]));
                    _mm_storel_epi64((__m128i *)(o + 16), _mm256_extracti128_si256(t[j], 1));
                }
            }
#endif
        for (int64_t q = k0 / 4; q < KQ; q++)
            for (int r = 0; r < MR; r++)
                for (int e = 0; e < 4; e++) {
                    const int64_t k = 4 * q + e;
                    uint8_t v = 0;
                    if (r < rows && k < K) {
                        const uint8_t x = a[(p * MR + r) * rs + k * cs];
                        v = sform ? (uint8_t)(x - zb8[r]) : (uint8_t)(x ^ zb8[r]);
                    }
                    d[(q * MR + r) * 4 + e] = v;
                }
    }
}

void kn_qgemm_pack_a8(const void *a, bool is_s8, int64_t rs, int64_t cs, int64_t M, int64_t K, const int32_t *zp_rows,
                      int32_t zp, int32_t *dst) {
#if defined(__AVX2__)
    if (cs == 1 && K >= 16) pack_a_rows_avx2(a, is_s8, rs, M, K, zp_rows, zp, dst);
    else
#endif
    if (is_s8) pack_a_s8(a, rs, cs, M, K, zp_rows, zp, dst);
    else pack_a_u8(a, rs, cs, M, K, zp_rows, zp, dst);
    pack_a_bytes(a, is_s8, rs, cs, M, K, zp_rows, zp, dst);
    abs_sums_make(dst, M, K);
}

void kn_qgemm_pack_b8(const void *b, int64_t rs, int64_t cs, int64_t K, int64_t n0, int64_t nc, uint8_t *dst) {
    const uint8_t *src = b;
    const int64_t KP = pairs_of(K);
    for (int64_t p = 0; p * NR < nc; p++) {
        const int64_t j0 = n0 + p * NR, w = min64(NR, nc - p * NR);
        uint8_t *d = dst + p * KP * 2 * NR;
        for (int64_t kp = 0; kp < KP; kp++, d += 2 * NR) {
            const uint8_t *r0 = src + 2 * kp * rs + j0 * cs, *r1 = 2 * kp + 1 < K ? r0 + rs : NULL;
            int64_t j = 0;
            if (r1 && cs == 1)
                for (; j < w; j++) d[2 * j] = r0[j], d[2 * j + 1] = r1[j];
            else
                for (; j < w; j++) d[2 * j] = r0[j * cs], d[2 * j + 1] = r1 ? r1[j * cs] : 0;
            for (; j < NR; j++) d[2 * j] = d[2 * j + 1] = 0;
        }
    }
}

/* ------------------------------------------------------------------ micro-kernels */

/* A tile's requantisation straight from its sums (kn_qgemm's rq_y): its rows' outputs from y
 * (row 0, column 0; rows ldy apart), scales r and biases (or NULL), B's zero point zb (one value) */
typedef struct tile_rq {
    const struct kn_rq8_k *k;
    uint8_t *y;
    int64_t ldy;
    const float *r;
    /* per row, what its sums take before the requantisation: bias[i] - zb asum[i] (wrapping as
     * int32, as store_sums' C plus rows_done's bias did), made once for the tile's row panel */
    const int32_t *add;
    const uint8_t *ok; /* the rows whose sums allow the one-rounding form (rq_rows_ok) */
    bool all_ok;       /* ok for every row of the tile */
    float zm;          /* y's zero point plus 1.5 * 2^23 (exact: an integer below 2^24) */
} tile_rq;

/* C[rows][cols] (+)= acc, acc holding NR sums per row */
static inline void store_acc(const int32_t acc[MR][NR], int rows, int cols, int32_t *C, int64_t ldc, bool add) {
    for (int r = 0; r < rows; r++) {
        int32_t *c = C + r * ldc;
        if (add)
            for (int j = 0; j < cols; j++) c[j] += acc[r][j];
        else
            for (int j = 0; j < cols; j++) c[j] = acc[r][j];
    }
}

/* One tile: the A panel's rows times the B panel over kpn pairs, less zb[j] * asum[r] where asum
 * is set (the first block of K), into C. */
#if defined(__AVX2__)
/* The finished sums of a tile (c0[r] columns 0-7, c1[r] columns 8-15), less zb[j] * asum[r] where
 * asum is set, into C */
static inline __attribute__((always_inline)) void store_sums(const int rows, __m256i *c0, __m256i *c1, int32_t *C,
                                                             int64_t ldc, int cols, bool add, const int32_t *asum,
                                                             const int32_t *zb) {
    if (asum) {
        const __m256i z0 = _mm256_loadu_si256((const __m256i *)zb), z1 = _mm256_loadu_si256((const __m256i *)(zb + 8));
        for (int r = 0; r < rows; r++) {
            const __m256i sv = _mm256_set1_epi32(asum[r]);
            c0[r] = _mm256_sub_epi32(c0[r], _mm256_mullo_epi32(sv, z0));
            c1[r] = _mm256_sub_epi32(c1[r], _mm256_mullo_epi32(sv, z1));
        }
    }
    if (cols == NR) {
        for (int r = 0; r < rows; r++) {
            __m256i *p0 = (__m256i *)(C + r * ldc), *p1 = (__m256i *)(C + r * ldc + 8);
            if (add) {
                c0[r] = _mm256_add_epi32(c0[r], _mm256_loadu_si256(p0));
                c1[r] = _mm256_add_epi32(c1[r], _mm256_loadu_si256(p1));
            }
            _mm256_storeu_si256(p0, c0[r]);
            _mm256_storeu_si256(p1, c1[r]);
        }
        return;
    }
    int32_t acc[MR][NR];
    for (int r = 0; r < rows; r++) {
        _mm256_storeu_si256((__m256i *)acc[r], c0[r]);
        _mm256_storeu_si256((__m256i *)(acc[r] + 8), c1[r]);
    }
    store_acc(acc, rows, cols, C, ldc, add);
}

/* 16 sums (a0: columns 0-7, a1: 8-15) with one scale to 16 bytes: kn_rq8's float form on both
 * vectors at once (its bytes), one test of the two for lanes near a tie, the rounded value from
 * vcvtps2dq (nearest even, as kn_rq8's) and tc less it back in float for the test (tc within [lo,
 * hi], so that is tc less roundps(tc) exactly; NaN gives NaN, unordered: near), both narrowed by one
 * pair of packs; a vector with a lane near a tie (or the double form's zero points) goes to kn_rq8
 * itself, half by half (one test and one pair of packs for the 16 values). */
static inline __m128i rq16_avx2(const kn_rq8_k *k, __m256i a0, __m256i a1, __m256 r) {
    if (k->fast) {
        const __m256 c0 = _mm256_min_ps(k->hi, _mm256_max_ps(k->lo, _mm256_fmadd_ps(_mm256_cvtepi32_ps(a0), r, k->z)));
        const __m256 c1 = _mm256_min_ps(k->hi, _mm256_max_ps(k->lo, _mm256_fmadd_ps(_mm256_cvtepi32_ps(a1), r, k->z)));
        const __m256i q0 = _mm256_cvtps_epi32(c0), q1 = _mm256_cvtps_epi32(c1);
        const __m256 f0 = _mm256_andnot_ps(k->sign, _mm256_sub_ps(c0, _mm256_cvtepi32_ps(q0)));
        const __m256 f1 = _mm256_andnot_ps(k->sign, _mm256_sub_ps(c1, _mm256_cvtepi32_ps(q1)));
        const __m256 near = _mm256_or_ps(_mm256_cmp_ps(f0, k->near, _CMP_NLT_UQ), _mm256_cmp_ps(f1, k->near, _CMP_NLT_UQ));
        if (__builtin_expect(_mm256_movemask_ps(near) == 0, 1)) {
            /* words q0[0-3] q1[0-3] | q0[4-7] q1[4-7], then bytes: dwords 0, 4 (q0), 1, 5 (q1) */
            const __m256i w = _mm256_packs_epi32(q0, q1);
            const __m256i b = k->s8 ? _mm256_packs_epi16(w, w) : _mm256_packus_epi16(w, w);
            return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        }
    }
    return _mm_unpacklo_epi64(kn_rq8(k, a0, r), kn_rq8(k, a1, r));
}

/* The finished sums of a tile to bytes (kn_qgemm's rq_y): row r's sums plus add[r], requantised
 * as kn_q_requant's vector form does (rq16_avx2: the same bytes). q's fields are read into locals
 * first (the byte stores into y may alias anything as far as C knows: GCC read every field again
 * for each row), the rows' adds come made (per row panel, not per tile), and a whole tile of rows
 * that all take the one-rounding form is narrowed two rows at a time (one pack and one permute
 * for both): with the 8 pairs of a 16-channel 1x1 convolution's tile, its requantisation took as
 * many instructions as its product. */
static inline __m256i rq_one_rounding(__m256i a, __m256 r, __m256 zm) {
    return _mm256_sub_epi32(_mm256_castps_si256(_mm256_fmadd_ps(_mm256_cvtepi32_ps(a), r, zm)), _mm256_set1_epi32(0x4B400000));
}

/* rows r and r + 1 (one rounding both) to two rows of 16 bytes */
static inline __attribute__((always_inline)) void rq_two_rows(const __m256i *c0, const __m256i *c1, int r, const int32_t *add,
                                                              const float *rr, __m256 zm, bool s8, uint8_t *y0, uint8_t *y1) {
    const __m256i a0 = _mm256_set1_epi32(add[r]), a1 = _mm256_set1_epi32(add[r + 1]);
    const __m256 r0 = _mm256_set1_ps(rr[r]), r1 = _mm256_set1_ps(rr[r + 1]);
    const __m256i w0 = _mm256_packs_epi32(rq_one_rounding(_mm256_add_epi32(c0[r], a0), r0, zm),
                                          rq_one_rounding(_mm256_add_epi32(c1[r], a0), r0, zm));
    const __m256i w1 = _mm256_packs_epi32(rq_one_rounding(_mm256_add_epi32(c0[r + 1], a1), r1, zm),
                                          rq_one_rounding(_mm256_add_epi32(c1[r + 1], a1), r1, zm));
    /* bytes: row r's 0-3 8-11, row r + 1's 0-3 8-11 | the 4-7 12-15 of both; dwords in order */
    const __m256i v = _mm256_permutevar8x32_epi32(s8 ? _mm256_packs_epi16(w0, w1) : _mm256_packus_epi16(w0, w1),
                                                  _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm_storeu_si128((__m128i *)y0, _mm256_castsi256_si128(v));
    _mm_storeu_si128((__m128i *)y1, _mm256_extracti128_si256(v, 1));
}

static inline __attribute__((always_inline)) void store_rq(const int rows, const __m256i *c0, const __m256i *c1,
                                                           int cols, const tile_rq *q) {
    const kn_rq8_k *k = q->k;
    const bool s8 = k->s8;
    uint8_t *const y = q->y;
    const int64_t ldy = q->ldy;
    const float *const rr = q->r;
    const int32_t *const add = q->add;
    const __m256 zm = _mm256_set1_ps(q->zm);
    /* one rounding (rq_rows_ok says why it is the definition's): fma(a, r, zy + 1.5 * 2^23) lies in
     * [2^23, 2^24), where a float's unit is 1, so it is round-half-even(a r + zy) plus 1.5 * 2^23,
     * and its bits less those of 1.5 * 2^23 are that integer; the packs saturate it */
    if (rows == MR && cols == NR && q->all_ok) {
        for (int r = 0; r < MR; r += 2) rq_two_rows(c0, c1, r, add, rr, zm, s8, y + r * ldy, y + (r + 1) * ldy);
        return;
    }
    const uint8_t *const ok = q->ok;
    for (int r = 0; r < rows; r++) {
        const __m256i av = _mm256_set1_epi32(add[r]);
        const __m256 rv = _mm256_set1_ps(rr[r]);
        const __m256i a0 = _mm256_add_epi32(c0[r], av), a1 = _mm256_add_epi32(c1[r], av);
        __m128i b;
        if (ok[r]) {
            const __m256i w = _mm256_packs_epi32(rq_one_rounding(a0, rv, zm), rq_one_rounding(a1, rv, zm));
            const __m256i v = s8 ? _mm256_packs_epi16(w, w) : _mm256_packus_epi16(w, w);
            b = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        } else b = rq16_avx2(k, a0, a1, rv);
        uint8_t *yr = y + r * ldy;
        if (cols == NR) _mm_storeu_si128((__m128i *)yr, b);
        else {
            uint8_t t[NR];
            _mm_storeu_si128((__m128i *)t, b);
            memcpy(yr, t, (size_t)cols);
        }
    }
}

/* Six rows, the main case, in assembly: the twelve sums in ymm0-11, B's two vectors widened
 * straight from memory into ymm12-13, A's broadcast in ymm14 and each product in ymm15, all 16
 * registers. AVX2 has no integer multiply-add, so a product needs a register before its add, and
 * from intrinsics GCC kept the sums on the stack (a load and a store per product) whatever the
 * form (arrays, named variables, B's halves one after the other). */
_Static_assert(KN_QGEMM_MR == 6, "the assembly tiles step A by 24 bytes a pair of K");
#define QGEMM_ROW(OFF, R0, R1)                                                                                \
    "vpbroadcastd " #OFF "(%[a]), %%ymm14\n\t"                                                                \
    "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n\t"                                                                  \
    "vpaddd %%ymm15, %%" #R0 ", %%" #R0 "\n\t"                                                                \
    "vpmaddwd %%ymm13, %%ymm14, %%ymm15\n\t"                                                                  \
    "vpaddd %%ymm15, %%" #R1 ", %%" #R1 "\n\t"
#define QGEMM_TILE6(WIDEN)                                                                                    \
    __asm__ volatile("vpxor %%ymm0, %%ymm0, %%ymm0\n\t"                                                       \
                     "vpxor %%ymm1, %%ymm1, %%ymm1\n\t"                                                       \
                     "vpxor %%ymm2, %%ymm2, %%ymm2\n\t"                                                       \
                     "vpxor %%ymm3, %%ymm3, %%ymm3\n\t"                                                       \
                     "vpxor %%ymm4, %%ymm4, %%ymm4\n\t"                                                       \
                     "vpxor %%ymm5, %%ymm5, %%ymm5\n\t"                                                       \
                     "vpxor %%ymm6, %%ymm6, %%ymm6\n\t"                                                       \
                     "vpxor %%ymm7, %%ymm7, %%ymm7\n\t"                                                       \
                     "vpxor %%ymm8, %%ymm8, %%ymm8\n\t"                                                       \
                     "vpxor %%ymm9, %%ymm9, %%ymm9\n\t"                                                       \
                     "vpxor %%ymm10, %%ymm10, %%ymm10\n\t"                                                    \
                     "vpxor %%ymm11, %%ymm11, %%ymm11\n\t"                                                    \
                     "test %[n], %[n]\n\t"                                                                    \
                     "jz 2f\n"                                                                                \
                     "1:\n\t" WIDEN " (%[b]), %%ymm12\n\t" WIDEN " 16(%[b]), %%ymm13\n\t"                     \
                     QGEMM_ROW(0, ymm0, ymm1) QGEMM_ROW(4, ymm2, ymm3) QGEMM_ROW(8, ymm4, ymm5)               \
                     QGEMM_ROW(12, ymm6, ymm7) QGEMM_ROW(16, ymm8, ymm9) QGEMM_ROW(20, ymm10, ymm11)           \
                     "add $24, %[a]\n\t"                                                                      \
                     "add $32, %[b]\n\t"                                                                      \
                     "dec %[n]\n\t"                                                                           \
                     "jnz 1b\n"                                                                               \
                     "2:\n\t"                                                                                 \
                     "vmovdqu %%ymm0, (%[o])\n\t"                                                             \
                     "vmovdqu %%ymm2, 32(%[o])\n\t"                                                           \
                     "vmovdqu %%ymm4, 64(%[o])\n\t"                                                           \
                     "vmovdqu %%ymm6, 96(%[o])\n\t"                                                           \
                     "vmovdqu %%ymm8, 128(%[o])\n\t"                                                          \
                     "vmovdqu %%ymm10, 160(%[o])\n\t"                                                         \
                     "vmovdqu %%ymm1, 192(%[o])\n\t"                                                          \
                     "vmovdqu %%ymm3, 224(%[o])\n\t"                                                          \
                     "vmovdqu %%ymm5, 256(%[o])\n\t"                                                          \
                     "vmovdqu %%ymm7, 288(%[o])\n\t"                                                          \
                     "vmovdqu %%ymm9, 320(%[o])\n\t"                                                          \
                     "vmovdqu %%ymm11, 352(%[o])\n\t"                                                         \
                     : [a] "+r"(A), [b] "+r"(B), [n] "+r"(n)                                                  \
                     : [o] "r"(sums)                                                                          \
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",         \
                       "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc")

/* (3-5 rows: all six computed, A's rows past M being zeros, and `rows` of them stored) */
static void tile6_avx2(int rows, bool s8, int64_t kpn, const int32_t *A, const uint8_t *B, int32_t *C, int64_t ldc,
                       int cols, bool add, const int32_t *asum, const int32_t *zb, const tile_rq *q) {
    __m256i sums[2 * MR]; /* c0[0..5] then c1[0..5] */
    int64_t n = kpn;
    if (s8) QGEMM_TILE6("vpmovsxbw");
    else QGEMM_TILE6("vpmovzxbw");
    if (q) store_rq(rows, sums, sums + MR, cols, q);
    else store_sums(rows, sums, sums + MR, C, ldc, cols, add, asum, zb);
}
#undef QGEMM_TILE6
#undef QGEMM_ROW

/* One row (an RNN step, a decoder's token), in assembly: latency-bound on one sum per B vector, so
 * even and odd pairs of K go to separate sums (ymm0-1, ymm2-3), four B vectors widened from
 * memory a step */
#define QGEMM_TILE1(WIDEN, ASTEP, ASTEP2)                                                                     \
    __asm__ volatile("vpxor %%ymm0, %%ymm0, %%ymm0\n\t"                                                       \
                     "vpxor %%ymm1, %%ymm1, %%ymm1\n\t"                                                       \
                     "vpxor %%ymm2, %%ymm2, %%ymm2\n\t"                                                       \
                     "vpxor %%ymm3, %%ymm3, %%ymm3\n\t"                                                       \
                     "cmp $2, %[n]\n\t"                                                                       \
                     "jb 2f\n"                                                                                \
                     "1:\n\t" WIDEN " (%[b]), %%ymm4\n\t" WIDEN " 16(%[b]), %%ymm5\n\t"                       \
                     WIDEN " 32(%[b]), %%ymm6\n\t" WIDEN " 48(%[b]), %%ymm7\n\t"                              \
                     "vpbroadcastd (%[a]), %%ymm8\n\t"                                                        \
                     "vpbroadcastd " ASTEP "(%[a]), %%ymm9\n\t"                                                \
                     "vpmaddwd %%ymm4, %%ymm8, %%ymm10\n\t"                                                   \
                     "vpaddd %%ymm10, %%ymm0, %%ymm0\n\t"                                                     \
                     "vpmaddwd %%ymm5, %%ymm8, %%ymm11\n\t"                                                   \
                     "vpaddd %%ymm11, %%ymm1, %%ymm1\n\t"                                                     \
                     "vpmaddwd %%ymm6, %%ymm9, %%ymm12\n\t"                                                   \
                     "vpaddd %%ymm12, %%ymm2, %%ymm2\n\t"                                                     \
                     "vpmaddwd %%ymm7, %%ymm9, %%ymm13\n\t"                                                   \
                     "vpaddd %%ymm13, %%ymm3, %%ymm3\n\t"                                                     \
                     "add $" ASTEP2 ", %[a]\n\t"                                                              \
                     "add $64, %[b]\n\t"                                                                      \
                     "sub $2, %[n]\n\t"                                                                       \
                     "cmp $2, %[n]\n\t"                                                                       \
                     "jae 1b\n"                                                                               \
                     "2:\n\t"                                                                                 \
                     "test %[n], %[n]\n\t"                                                                    \
                     "jz 3f\n\t" WIDEN " (%[b]), %%ymm4\n\t" WIDEN " 16(%[b]), %%ymm5\n\t"                    \
                     "vpbroadcastd (%[a]), %%ymm8\n\t"                                                        \
                     "vpmaddwd %%ymm4, %%ymm8, %%ymm10\n\t"                                                   \
                     "vpaddd %%ymm10, %%ymm0, %%ymm0\n\t"                                                     \
                     "vpmaddwd %%ymm5, %%ymm8, %%ymm11\n\t"                                                   \
                     "vpaddd %%ymm11, %%ymm1, %%ymm1\n"                                                       \
                     "3:\n\t"                                                                                 \
                     "vpaddd %%ymm2, %%ymm0, %%ymm0\n\t"                                                      \
                     "vpaddd %%ymm3, %%ymm1, %%ymm1\n\t"                                                      \
                     "vmovdqu %%ymm0, (%[o])\n\t"                                                             \
                     "vmovdqu %%ymm1, 32(%[o])\n\t"                                                           \
                     : [a] "+r"(A), [b] "+r"(B), [n] "+r"(n)                                                  \
                     : [o] "r"(sums)                                                                          \
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",         \
                       "xmm10", "xmm11", "xmm12", "xmm13", "memory", "cc")

static void tile1_avx2(bool s8, int64_t kpn, const int32_t *A, const uint8_t *B, int32_t *C, int64_t ldc, int cols,
                       bool add, const int32_t *asum, const int32_t *zb, const tile_rq *q) {
    __m256i sums[2];
    uint64_t n = (uint64_t)kpn;
    if (s8) QGEMM_TILE1("vpmovsxbw", "24", "48");
    else QGEMM_TILE1("vpmovzxbw", "24", "48");
    if (q) store_rq(1, sums, sums + 1, cols, q);
    else store_sums(1, sums, sums + 1, C, ldc, cols, add, asum, zb);
}

/* the same over a row of KP contiguous pair words (kn_qgemv) */
static void gemv_panel_avx2(bool s8, int64_t kpn, const int32_t *A, const uint8_t *B, int32_t *C, int cols,
                            const int32_t *asum, const int32_t *zb) {
    __m256i sums[2];
    uint64_t n = (uint64_t)kpn;
    if (s8) QGEMM_TILE1("vpmovsxbw", "4", "8");
    else QGEMM_TILE1("vpmovzxbw", "4", "8");
    store_sums(1, sums, sums + 1, C, 0, cols, false, asum, zb);
}
#undef QGEMM_TILE1

/* The byte forms (qgemm.h): a quad of K a step, B's panel as two vectors of 8 columns' quads,
 * each of A's six rows a broadcast quad; vpmaddubsw's int16 pair sums (exact: the operands are
 * bounded so), widened and added in pairs by vpmaddwd against ones (from memory: the 16 registers
 * are taken) into the twelve int32 sums. US: the operand order, unsigned first (B's bytes then
 * A's, or A's then B's). Twice the products a step of vpmaddwd's int16 pairs in 3 instructions a
 * vector where those take 2 for half as many; Zen 3: ~0.8x the time of the int16 tile. */
static const int16_t bytes_ones[16] __attribute__((aligned(32))) = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
#define QGEMM8_ROW(US0, US1, OFF, R0, R1)                                                                    \
    "vpbroadcastd " #OFF "(%[a]), %%ymm14\n\t"                                                                \
    "vpmaddubsw " US0 ", %%ymm15\n\t"                                                                         \
    "vpmaddwd (%[one]), %%ymm15, %%ymm15\n\t"                                                                 \
    "vpaddd %%ymm15, %%" #R0 ", %%" #R0 "\n\t"                                                                \
    "vpmaddubsw " US1 ", %%ymm15\n\t"                                                                         \
    "vpmaddwd (%[one]), %%ymm15, %%ymm15\n\t"                                                                 \
    "vpaddd %%ymm15, %%" #R1 ", %%" #R1 "\n\t"
#define QGEMM8_TILE6(US0, US1)                                                                                \
    __asm__ volatile("vpxor %%ymm0, %%ymm0, %%ymm0\n\t"                                                       \
                     "vpxor %%ymm1, %%ymm1, %%ymm1\n\t"                                                       \
                     "vpxor %%ymm2, %%ymm2, %%ymm2\n\t"                                                       \
                     "vpxor %%ymm3, %%ymm3, %%ymm3\n\t"                                                       \
                     "vpxor %%ymm4, %%ymm4, %%ymm4\n\t"                                                       \
                     "vpxor %%ymm5, %%ymm5, %%ymm5\n\t"                                                       \
                     "vpxor %%ymm6, %%ymm6, %%ymm6\n\t"                                                       \
                     "vpxor %%ymm7, %%ymm7, %%ymm7\n\t"                                                       \
                     "vpxor %%ymm8, %%ymm8, %%ymm8\n\t"                                                       \
                     "vpxor %%ymm9, %%ymm9, %%ymm9\n\t"                                                       \
                     "vpxor %%ymm10, %%ymm10, %%ymm10\n\t"                                                    \
                     "vpxor %%ymm11, %%ymm11, %%ymm11\n\t"                                                    \
                     "test %[n], %[n]\n\t"                                                                    \
                     "jz 2f\n"                                                                                \
                     "1:\n\t"                                                                                 \
                     "vmovdqu (%[b]), %%ymm12\n\t"                                                            \
                     "vmovdqu 32(%[b]), %%ymm13\n\t"                                                          \
                     QGEMM8_ROW(US0, US1, 0, ymm0, ymm1) QGEMM8_ROW(US0, US1, 4, ymm2, ymm3)                  \
                     QGEMM8_ROW(US0, US1, 8, ymm4, ymm5) QGEMM8_ROW(US0, US1, 12, ymm6, ymm7)                 \
                     QGEMM8_ROW(US0, US1, 16, ymm8, ymm9) QGEMM8_ROW(US0, US1, 20, ymm10, ymm11)              \
                     "add $24, %[a]\n\t"                                                                      \
                     "add $64, %[b]\n\t"                                                                      \
                     "dec %[n]\n\t"                                                                           \
                     "jnz 1b\n"                                                                               \
                     "2:\n\t"                                                                                 \
                     "vmovdqu %%ymm0, (%[o])\n\t"                                                             \
                     "vmovdqu %%ymm2, 32(%[o])\n\t"                                                           \
                     "vmovdqu %%ymm4, 64(%[o])\n\t"                                                           \
                     "vmovdqu %%ymm6, 96(%[o])\n\t"                                                           \
                     "vmovdqu %%ymm8, 128(%[o])\n\t"                                                          \
                     "vmovdqu %%ymm10, 160(%[o])\n\t"                                                         \
                     "vmovdqu %%ymm1, 192(%[o])\n\t"                                                          \
                     "vmovdqu %%ymm3, 224(%[o])\n\t"                                                          \
                     "vmovdqu %%ymm5, 256(%[o])\n\t"                                                          \
                     "vmovdqu %%ymm7, 288(%[o])\n\t"                                                          \
                     "vmovdqu %%ymm9, 320(%[o])\n\t"                                                          \
                     "vmovdqu %%ymm11, 352(%[o])\n\t"                                                         \
                     : [a] "+r"(A), [b] "+r"(B), [n] "+r"(n)                                                  \
                     : [o] "r"(sums), [one] "r"(bytes_ones)                                                   \
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",         \
                       "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc")

/* b_bytes_signed: B's bytes are the signed operand (QB_UNSIGNED A), else A's (QB_SIGNED). All six
 * rows computed (A's rows past M are zero bytes), `rows` stored. */
static void tile8_avx2(bool b_bytes_signed, int rows, int64_t kqn, const int32_t *A, const uint8_t *B, int32_t *C,
                       int64_t ldc, int cols, bool add, const int32_t *asum, const int32_t *zb, const tile_rq *q) {
    __m256i sums[2 * MR];
    int64_t n = kqn;
    if (b_bytes_signed) QGEMM8_TILE6("%%ymm12, %%ymm14", "%%ymm13, %%ymm14");
    else QGEMM8_TILE6("%%ymm14, %%ymm12", "%%ymm14, %%ymm13");
    if (q) store_rq(rows, sums, sums + MR, cols, q);
    else store_sums(rows, sums, sums + MR, C, ldc, cols, add, asum, zb);
}
#undef QGEMM8_TILE6
#undef QGEMM8_ROW

/* two pair vectors (pairs 2q and 2q + 1 of 16 columns, column j's at bytes 2j, 2j + 1) to the quad
 * layout: d[0] columns 0-7, d[1] columns 8-15, column j's quad at bytes 4j .. 4j + 3 */
static inline void pairs_to_quads(__m256i p0, __m256i p1, uint8_t *d) {
    const __m256i lo = _mm256_unpacklo_epi16(p0, p1), hi = _mm256_unpackhi_epi16(p0, p1); /* 0-3 8-11 | 4-7 12-15 */
    _mm256_storeu_si256((__m256i *)d, _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256((__m256i *)(d + 32), _mm256_permute2x128_si256(lo, hi, 0x31));
}

/* B's np panels of pairs (kn_qgemm_pack_b8's layout) to quads as vpmaddubsw's unsigned operand
 * (QB_SIGNED A): the bytes, int8 ones plus 128 (flip 0x80). A's bytes past K are 0, so B's there
 * need not be. */
static void b_quads_unsigned(const uint8_t *B, int64_t KP, int64_t np, uint8_t flip, uint8_t *dst) {
    const int64_t KQ = (KP + 1) / 2;
    const __m256i f = _mm256_set1_epi8((char)flip);
    for (int64_t p = 0; p < np; p++) {
        const uint8_t *s = B + p * KP * 2 * NR;
        uint8_t *d = dst + p * KQ * 4 * NR;
        for (int64_t q = 0; q < KQ; q++) {
            const __m256i p0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(s + 2 * q * 2 * NR)), f);
            const __m256i p1 = 2 * q + 1 < KP ? _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(s + (2 * q + 1) * 2 * NR)), f)
                                              : _mm256_setzero_si256();
            pairs_to_quads(p0, p1, d + q * 4 * NR);
        }
    }
}

/* B's np panels of pairs to quads as vpmaddubsw's signed operand (QB_UNSIGNED A): s = b - zb[j],
 * 0 past K, with negcs[j] = -sum_k s (the product then is sum (a' - c) s + c sum s). False, and
 * dst not to be used, where a pair has |s0| + |s1| > 128 or a value past int8. */
static bool b_quads_signed(const uint8_t *B, bool b_s8, int64_t K, int64_t np, const int32_t *zb, uint8_t *dst,
                           int32_t *negcs) {
    const int64_t KP = pairs_of(K), KQ = (KP + 1) / 2;
    const __m256i ones = _mm256_set1_epi16(1), lim = _mm256_set1_epi32(128), top = _mm256_set1_epi16(127);
    /* the last pair of an odd K keeps its low halves */
    const __m256i odd = _mm256_set1_epi32(0xffff);
    __m256i bad = _mm256_setzero_si256();
    for (int64_t p = 0; p < np; p++) {
        const uint8_t *s = B + p * KP * 2 * NR;
        uint8_t *d = dst + p * KQ * 4 * NR;
        /* zb per column as a pair of int16 (zb[j], zb[j]) in word j: zz0 columns 0-7, zz1 8-15 */
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(zb + p * NR)), w1 = _mm256_loadu_si256((const __m256i *)(zb + p * NR + 8));
        const __m256i zz0 = _mm256_or_si256(_mm256_and_si256(w0, odd), _mm256_slli_epi32(w0, 16));
        const __m256i zz1 = _mm256_or_si256(_mm256_and_si256(w1, odd), _mm256_slli_epi32(w1, 16));
        __m256i cs0 = _mm256_setzero_si256(), cs1 = _mm256_setzero_si256(), prev = _mm256_setzero_si256();
        for (int64_t kp = 0; kp < KP; kp++) {
            const __m128i *src = (const __m128i *)(s + kp * 2 * NR);
            const __m128i r0 = _mm_loadu_si128(src), r1 = _mm_loadu_si128(src + 1);
            __m256i s0 = _mm256_sub_epi16(b_s8 ? _mm256_cvtepi8_epi16(r0) : _mm256_cvtepu8_epi16(r0), zz0);
            __m256i s1 = _mm256_sub_epi16(b_s8 ? _mm256_cvtepi8_epi16(r1) : _mm256_cvtepu8_epi16(r1), zz1);
            if (kp == KP - 1 && (K & 1)) s0 = _mm256_and_si256(s0, odd), s1 = _mm256_and_si256(s1, odd);
            const __m256i m0 = _mm256_madd_epi16(_mm256_abs_epi16(s0), ones), m1 = _mm256_madd_epi16(_mm256_abs_epi16(s1), ones);
            bad = _mm256_or_si256(bad, _mm256_or_si256(_mm256_cmpgt_epi32(m0, lim), _mm256_cmpgt_epi32(m1, lim)));
            bad = _mm256_or_si256(bad, _mm256_or_si256(_mm256_cmpgt_epi16(s0, top), _mm256_cmpgt_epi16(s1, top)));
            cs0 = _mm256_add_epi32(cs0, _mm256_madd_epi16(s0, ones));
            cs1 = _mm256_add_epi32(cs1, _mm256_madd_epi16(s1, ones));
            /* bytes: packs gives columns 0-3 8-11 | 4-7 12-15, permuted to 0-15 */
            const __m256i v = _mm256_permute4x64_epi64(_mm256_packs_epi16(s0, s1), 0xd8);
            if (kp & 1) pairs_to_quads(prev, v, d + kp / 2 * 4 * NR);
            else prev = v;
        }
        if (KP & 1) pairs_to_quads(prev, _mm256_setzero_si256(), d + KP / 2 * 4 * NR);
        _mm256_storeu_si256((__m256i *)(negcs + p * NR), _mm256_sub_epi32(_mm256_setzero_si256(), cs0));
        _mm256_storeu_si256((__m256i *)(negcs + p * NR + 8), _mm256_sub_epi32(_mm256_setzero_si256(), cs1));
        if (!_mm256_testz_si256(bad, bad)) return false;
    }
    return true;
}

#if defined(KN_QGEMM_VNNI)
/* AVX-512 VNNI (kn_cpu_has_vnni): vpdpwssd multiplies int16 pairs and adds both products into the
 * int32 sums in one instruction on 16 lanes, and a pair of K across a B panel's 16 columns is one
 * zmm widened from 32 bytes, so a row's step of K is one instruction where AVX2 takes four (two
 * vpmaddwd, two vpaddd). The same packed layouts, the same exact sums. (The int16 pairs' form:
 * kn_qgemm_run takes the byte form QB_VNNI below where A was packed for it.) */

/* the sums of rows [0, rows), less zb[j] * asum[r] where asum is set, into C (cols of them) */
VNNI_TARGET static inline void store_sums_vnni(int rows, __m512i *c, int32_t *C, int64_t ldc, int cols, bool add,
                                               const int32_t *asum, const int32_t *zb) {
    const __mmask16 m = cols >= NR ? (__mmask16)0xffff : (__mmask16)((1u << cols) - 1);
    const __m512i z = asum ? _mm512_loadu_si512(zb) : _mm512_setzero_si512();
    for (int r = 0; r < rows; r++) {
        __m512i v = c[r];
        if (asum) v = _mm512_sub_epi32(v, _mm512_mullo_epi32(_mm512_set1_epi32(asum[r]), z));
        if (add) v = _mm512_add_epi32(v, _mm512_maskz_loadu_epi32(m, C + r * ldc));
        _mm512_mask_storeu_epi32(C + r * ldc, m, v);
    }
}

static inline __m512i widen_pairs(const uint8_t *b, bool s8) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)b);
    return s8 ? _mm512_cvtepi8_epi16(v) : _mm512_cvtepu8_epi16(v);
}

/* up to six rows (A's rows past M are zeros; `rows` of them stored) */
VNNI_TARGET static void tile6_vnni(int rows, bool s8, int64_t kpn, const int32_t *A, const uint8_t *B, int32_t *C,
                                   int64_t ldc, int cols, bool add, const int32_t *asum, const int32_t *zb) {
    __m512i c[MR];
    for (int r = 0; r < MR; r++) c[r] = _mm512_setzero_si512();
    for (int64_t k = 0; k < kpn; k++, A += MR, B += 2 * NR) {
        const __m512i b = widen_pairs(B, s8);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) c[r] = _mm512_dpwssd_epi32(c[r], b, _mm512_set1_epi32(A[r]));
    }
    store_sums_vnni(rows, c, C, ldc, cols, add, asum, zb);
}

/* one row of A whose pairs are astride words apart (a tile's row: MR; kn_qgemv's: 1): a sum's
 * chain is latency-bound, so four pairs of K a step go to four sums */
VNNI_TARGET static void row_vnni(bool s8, int64_t kpn, const int32_t *A, int64_t astride, const uint8_t *B,
                                 int32_t *C, int cols, bool add, const int32_t *asum, const int32_t *zb) {
    __m512i c[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    int64_t k = 0;
    for (; k + 4 <= kpn; k += 4, A += 4 * astride, B += 8 * NR)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
            c[q] = _mm512_dpwssd_epi32(c[q], widen_pairs(B + q * 2 * NR, s8), _mm512_set1_epi32(A[q * astride]));
    for (; k < kpn; k++, A += astride, B += 2 * NR)
        c[0] = _mm512_dpwssd_epi32(c[0], widen_pairs(B, s8), _mm512_set1_epi32(A[0]));
    c[0] = _mm512_add_epi32(_mm512_add_epi32(c[0], c[1]), _mm512_add_epi32(c[2], c[3]));
    store_sums_vnni(1, c, C, 0, cols, add, asum, zb);
}

/* The byte form QB_VNNI: a quad of K a step, B's panel quad (16 columns' unsigned bytes, one zmm,
 * b_quads_unsigned's layout) against each of A's rows' signed quad, broadcast: one vpdpbusd per
 * row for 64 products (vpdpwssd: 32, plus the widening of B). Sums exact (no int16 pair sums).
 * Where d is set (the first block of K), row r's sums take d[r] times the columns' sums U. Out
 * as sums[r] columns 0-7, sums[MR + r] 8-15 (the AVX2 tiles' order, for store_sums and
 * store_rq). R rows: 3-6 (rows past M zero in A) with a sum each; 1 and 2 with two sums a row
 * (even and odd quads), each sum's chain then half as long. */
/* (asm, as the AVX2 tiles: from intrinsics GCC copied every sum to another register and back on
 * each step, 12 moves to the 6 vpdpbusd. A's quad from memory by vpdpbusd's embedded broadcast.) */
static void tilev(int rows, int64_t kqn, const int32_t *A, const uint8_t *B, const int32_t *d, const int32_t *U,
                  __m256i *sums) {
    int32_t o[MR * NR] __attribute__((aligned(64)));
    int64_t n = kqn;
    if (rows > 2) {
        __asm__ volatile("vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
                         "vpxord %%zmm1, %%zmm1, %%zmm1\n\t"
                         "vpxord %%zmm2, %%zmm2, %%zmm2\n\t"
                         "vpxord %%zmm3, %%zmm3, %%zmm3\n\t"
                         "vpxord %%zmm4, %%zmm4, %%zmm4\n\t"
                         "vpxord %%zmm5, %%zmm5, %%zmm5\n\t"
                         "test %[n], %[n]\n\t"
                         "jz 2f\n"
                         "1:\n\t"
                         "vmovdqu64 (%[b]), %%zmm6\n\t"
                         "vpdpbusd (%[a])%{1to16%}, %%zmm6, %%zmm0\n\t"
                         "vpdpbusd 4(%[a])%{1to16%}, %%zmm6, %%zmm1\n\t"
                         "vpdpbusd 8(%[a])%{1to16%}, %%zmm6, %%zmm2\n\t"
                         "vpdpbusd 12(%[a])%{1to16%}, %%zmm6, %%zmm3\n\t"
                         "vpdpbusd 16(%[a])%{1to16%}, %%zmm6, %%zmm4\n\t"
                         "vpdpbusd 20(%[a])%{1to16%}, %%zmm6, %%zmm5\n\t"
                         "add $24, %[a]\n\t"
                         "add $64, %[b]\n\t"
                         "dec %[n]\n\t"
                         "jnz 1b\n"
                         "2:\n\t"
                         "vmovdqu64 %%zmm0, (%[o])\n\t"
                         "vmovdqu64 %%zmm1, 64(%[o])\n\t"
                         "vmovdqu64 %%zmm2, 128(%[o])\n\t"
                         "vmovdqu64 %%zmm3, 192(%[o])\n\t"
                         "vmovdqu64 %%zmm4, 256(%[o])\n\t"
                         "vmovdqu64 %%zmm5, 320(%[o])\n\t"
                         : [a] "+r"(A), [b] "+r"(B), [n] "+r"(n)
                         : [o] "r"(o)
                         : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "memory", "cc");
    } else {
        /* rows 0 and 1 (zero past M), even quads into zmm0-1, odd ones into zmm2-3 */
        __asm__ volatile("vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
                         "vpxord %%zmm1, %%zmm1, %%zmm1\n\t"
                         "vpxord %%zmm2, %%zmm2, %%zmm2\n\t"
                         "vpxord %%zmm3, %%zmm3, %%zmm3\n\t"
                         "cmp $2, %[n]\n\t"
                         "jb 2f\n"
                         "1:\n\t"
                         "vmovdqu64 (%[b]), %%zmm6\n\t"
                         "vmovdqu64 64(%[b]), %%zmm7\n\t"
                         "vpdpbusd (%[a])%{1to16%}, %%zmm6, %%zmm0\n\t"
                         "vpdpbusd 4(%[a])%{1to16%}, %%zmm6, %%zmm1\n\t"
                         "vpdpbusd 24(%[a])%{1to16%}, %%zmm7, %%zmm2\n\t"
                         "vpdpbusd 28(%[a])%{1to16%}, %%zmm7, %%zmm3\n\t"
                         "add $48, %[a]\n\t"
                         "add $128, %[b]\n\t"
                         "sub $2, %[n]\n\t"
                         "cmp $2, %[n]\n\t"
                         "jae 1b\n"
                         "2:\n\t"
                         "test %[n], %[n]\n\t"
                         "jz 3f\n\t"
                         "vmovdqu64 (%[b]), %%zmm6\n\t"
                         "vpdpbusd (%[a])%{1to16%}, %%zmm6, %%zmm0\n\t"
                         "vpdpbusd 4(%[a])%{1to16%}, %%zmm6, %%zmm1\n"
                         "3:\n\t"
                         "vpaddd %%zmm2, %%zmm0, %%zmm0\n\t"
                         "vpaddd %%zmm3, %%zmm1, %%zmm1\n\t"
                         "vmovdqu64 %%zmm0, (%[o])\n\t"
                         "vmovdqu64 %%zmm1, 64(%[o])\n\t"
                         : [a] "+r"(A), [b] "+r"(B), [n] "+r"(n)
                         : [o] "r"(o)
                         : "xmm0", "xmm1", "xmm2", "xmm3", "xmm6", "xmm7", "memory", "cc");
    }
    const int R = rows > 2 ? MR : rows;
    __m256i u0 = _mm256_setzero_si256(), u1 = u0;
    if (d) u0 = _mm256_loadu_si256((const __m256i *)U), u1 = _mm256_loadu_si256((const __m256i *)(U + 8));
    for (int r = 0; r < R; r++) {
        sums[r] = _mm256_load_si256((const __m256i *)(o + r * NR));
        sums[MR + r] = _mm256_load_si256((const __m256i *)(o + r * NR + 8));
        if (d) {
            const __m256i dv = _mm256_set1_epi32(d[r]);
            sums[r] = _mm256_add_epi32(sums[r], _mm256_mullo_epi32(dv, u0));
            sums[MR + r] = _mm256_add_epi32(sums[MR + r], _mm256_mullo_epi32(dv, u1));
        }
    }
}

/* U[j] = sum_{k < K} u_kj for np panels of B's quads (KQ a panel): vpdpbusd against ones, the last
 * quad's ones only where k < K (B's bytes past K need not be zero, and int8 B's padding is 128) */
VNNI_TARGET static void b_quads_colsums(const uint8_t *bq, int64_t K, int64_t KQ, int64_t np, int32_t *U) {
    const int tail = (int)(K - 4 * (KQ - 1)); /* 1-4 bytes of the last quad */
    const __m512i ones = _mm512_set1_epi8(1), last = _mm512_set1_epi32((int32_t)(0x01010101u >> (8 * (4 - tail))));
    for (int64_t p = 0; p < np; p++) {
        const uint8_t *b = bq + p * KQ * 4 * NR;
        __m512i acc = _mm512_setzero_si512(), acc2 = _mm512_setzero_si512();
        int64_t q = 0;
        for (; q + 2 < KQ; q += 2) {
            acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(b + q * 4 * NR), ones);
            acc2 = _mm512_dpbusd_epi32(acc2, _mm512_loadu_si512(b + (q + 1) * 4 * NR), ones);
        }
        for (; q + 1 < KQ; q++) acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(b + q * 4 * NR), ones);
        acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(b + (KQ - 1) * 4 * NR), last);
        _mm512_storeu_si512(U + p * NR, _mm512_add_epi32(acc, acc2));
    }
}
#endif

/* two rows: the one-row tile twice (the B panel is in L1 the second time); q: the requantised
 * form (tile_rq; AVX2 tiles only) */
static void tile(bool vnni, int rows, bool s8, int64_t kpn, const int32_t *A, const uint8_t *B, int32_t *C, int64_t ldc,
                 int cols, bool add, const int32_t *asum, const int32_t *zb, const tile_rq *q) {
#if defined(KN_QGEMM_VNNI)
    if (vnni) {
        if (rows >= 3) tile6_vnni(rows, s8, kpn, A, B, C, ldc, cols, add, asum, zb);
        else
            for (int r = 0; r < rows; r++)
                row_vnni(s8, kpn, A + r, MR, B, C + r * ldc, cols, add, asum ? asum + r : NULL, zb);
        return;
    }
#endif
    if (rows >= 3) {
        tile6_avx2(rows, s8, kpn, A, B, C, ldc, cols, add, asum, zb, q);
        return;
    }
    tile1_avx2(s8, kpn, A, B, C, ldc, cols, add, asum, zb, q);
    if (rows == 2) {
        tile_rq q1;
        if (q) q1 = (tile_rq){q->k, q->y + q->ldy, q->ldy, q->r + 1, q->add + 1, q->ok + 1, q->ok[1], q->zm};
        tile1_avx2(s8, kpn, A + 1, B, C + ldc, ldc, cols, add, asum ? asum + 1 : NULL, zb, q ? &q1 : NULL);
    }
}
#else
static void tile(bool vnni, int rows, bool s8, int64_t kpn, const int32_t *A, const uint8_t *B, int32_t *C, int64_t ldc,
                 int cols, bool add, const int32_t *asum, const int32_t *zb, const tile_rq *q) {
    (void)vnni, (void)q;
    int32_t acc[MR][NR] = {{0}};
    for (int64_t k = 0; k < kpn; k++, A += MR, B += 2 * NR)
        for (int r = 0; r < rows; r++) {
            const int32_t a0 = pair_lo(A[r]), a1 = pair_hi(A[r]);
            for (int j = 0; j < NR; j++) {
                const int32_t b0 = s8 ? (int8_t)B[2 * j] : B[2 * j], b1 = s8 ? (int8_t)B[2 * j + 1] : B[2 * j + 1];
                acc[r][j] += a0 * b0 + a1 * b1;
            }
        }
    if (asum)
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < NR; j++) acc[r][j] -= asum[r] * zb[j];
    store_acc(acc, rows, cols, C, ldc, add);
}
#endif

/* ------------------------------------------------------------------ blocking and threads */

typedef struct qjob {
    const kn_qgemm *g;
    int64_t KP, block_panels, row_panels, col_blocks, row_blocks;
    bool has_zb, vnni;
    bool fuse; /* the tiles requantise into rq_y (kn_qgemm's conditions) */
    /* the byte form (QB_SIGNED, QB_UNSIGNED or QB_NONE: the int16 pairs): A's quads and c, and
     * what B's unsigned bytes add to its zero point (QB_SIGNED: 128 for int8 B) */
    int bytes;
    const int32_t *aq, *ac;
    int32_t boff;
    bool vd; /* QB_VNNI with a nonzero d (A's bytes less a' per row): B's column sums wanted */
#if defined(__AVX2__)
    kn_rq8_k rqk;
#endif
    uint8_t *rq_ok; /* M flags (rq_rows_ok) */
    atomic_int failed;
} qjob;

#if defined(__AVX2__)
/* Which rows of the product (rq_y) allow the one-rounding form of store_rq: where every sum a of
 * row i (its tile's raw sum plus bias less zb times A's row sum) has |a| < 2^24, bounded by
 * sum_k |a'_ik| max|b| + |bias_i| + |zb asum_i| (so no int32 wrap either), (float)a is a, and
 * (double)a * r is exact (24 + 24 bits); where also a r + zy, a multiple of min(1, r's last bit)
 * below X = |r| bound + |zy| in size, fits double's 53 bits (X < 2^53 min(1, r's last bit)), the
 * definition's double d is the real a r + zy itself. The FMA rounds the same real (plus 1.5 * 2^23)
 * once, to nearest even: rne(d), where X < 2^22 (the sum stays in [2^23, 2^24)) and y's zero point
 * is an integer of at most 256 (zy + 1.5 * 2^23 exact). A finite scale. Other rows: rq16_avx2
 * (float with a double fallback). */
static void rq_rows_ok(const kn_qgemm *g, int64_t KP, uint8_t *ok) {
    const int32_t *sums = g->a + (g->M + MR - 1) / MR * MR * KP, *absum = abs_sums_of(g->a, g->M, g->K);
    const double bmax = g->b_signed ? 128.0 : 255.0, zy = g->rq_zy;
    const bool zy_ok = zy == floor(zy) && fabs(zy) <= 256.0;
    for (int64_t i = 0; i < g->M; i++) {
        const int64_t s = (uint32_t)absum[i]; /* (at most 255 K: KP <= KP_BLOCK here) */
        const double bound = (double)s * bmax + fabs((double)(g->rq_bias ? g->rq_bias[i] : 0)) +
                             fabs((double)sums[i]) * fabs((double)g->zb);
        const double r = g->rq_r[i], X = fabs(r) * bound + fabs(zy);
        int e = 0;
        (void)frexp(r, &e); /* r = f 2^e, f in [0.5, 1): its last bit at 2^(e - 24) or above */
        ok[i] = zy_ok && isfinite(r) && bound < 16777216.0 && X < 4194304.0 - 2.0 && X < ldexp(1.0, 53 + (e < 24 ? e - 24 : 0));
    }
}
#endif

/* units are (column block, row block), column-major: a thread's consecutive units mostly share
 * one column block, whose packed B it makes once */
static void qjob_range(void *arg, int64_t u0, int64_t u1) {
    qjob *j = arg;
    const kn_qgemm *g = j->g;
    const int64_t KP = j->KP, width = j->block_panels * NR;
    const int32_t *sums = g->a + (g->M + MR - 1) / MR * MR * KP;
    uint8_t *buf = NULL, *bq = NULL;
    int32_t *zb = j->has_zb ? malloc(sizeof(int32_t) * (size_t)width) : NULL, *negcs = NULL;
    const int64_t KQ = (KP + 1) / 2;
    if (!g->b) buf = kn_aligned_alloc(64, (size_t)(width * 2 * KP));
    if (j->bytes) bq = kn_aligned_alloc(64, (size_t)(width * 4 * KQ));
    /* (QB_VNNI: B's column sums U there) */
    const bool want_cs = j->bytes == QB_UNSIGNED || (j->bytes == QB_VNNI && j->vd);
    if (want_cs) negcs = kn_aligned_alloc(64, sizeof(int32_t) * (size_t)width);
    if ((!g->b && !buf) || (j->has_zb && !zb) || (j->bytes && !bq) || (want_cs && !negcs)) {
        atomic_store(&j->failed, 1);
        free(buf);
        free(zb);
        free(bq);
        free(negcs);
        return;
    }
    int64_t have = -1, have_zb = -1, have_q = -1;
    bool block_bytes = false; /* this column block's B in quads (bq) */
    (void)have_q, (void)block_bytes;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t cb = u / j->row_blocks, rb = u % j->row_blocks;
        const int64_t n0 = cb * width, nc = min64(width, g->N - n0);
        const uint8_t *B;
        if (g->b) {
            B = g->b + n0 * 2 * KP;
        } else {
            if (have != cb) g->pack_b(g->pack_ctx, n0, nc, buf);
            have = cb;
            B = buf;
        }
        /* (the fused requantisation reads g->zb alone: no column's copy to fill, 48 KB a call for a
         * block of 12288 columns) */
        if (zb && have_zb != cb && !j->fuse) {
            for (int64_t q = 0; q < width; q++)
                zb[q] = q >= nc ? 0 : (g->zb_cols ? g->zb_cols[n0 + q] : g->zb) + (j->bytes == QB_SIGNED || j->bytes == QB_VNNI ? j->boff : 0);
            have_zb = cb;
        }
#if defined(__AVX2__)
        if (j->bytes && have_q != cb) {
            const int64_t np = (nc + NR - 1) / NR;
            if (j->bytes == QB_SIGNED || j->bytes == QB_VNNI) {
                b_quads_unsigned(B, KP, np, g->b_signed ? 0x80 : 0, bq);
#if defined(KN_QGEMM_VNNI)
                if (j->bytes == QB_VNNI && j->vd) b_quads_colsums(bq, g->K, KQ, np, negcs);
#endif
                block_bytes = true;
            } else {
                block_bytes = b_quads_signed(B, g->b_signed, g->K, np, zb, bq, negcs);
            }
            have_q = cb;
        }
#endif
        const int64_t p0 = rb * j->row_panels, p1 = min64(p0 + j->row_panels, (g->M + MR - 1) / MR);
        for (int64_t k0 = 0; k0 < KP; k0 += KP_BLOCK) {
            const int64_t kpn = min64(KP_BLOCK, KP - k0);
            const bool add = g->accumulate || k0 > 0;
            for (int64_t ip = p0; ip < p1; ip++) {
                const int rows = (int)min64(MR, g->M - ip * MR);
                const int32_t *A = g->a + ip * KP * MR + k0 * MR, *asum = zb && k0 == 0 ? sums + ip * MR : NULL;
                int32_t *C = g->c + ip * MR * g->ldc + n0;
                tile_rq q = {0};
#if defined(__AVX2__)
                int32_t rq_add[MR];
                if (j->fuse) {
                    /* B's zero point (plus what its unsigned bytes add: QB_SIGNED's boff) times A's
                     * row sums, less the bias: one value per row for all the panel's tiles */
                    const uint32_t zq = (uint32_t)g->zb + (uint32_t)(block_bytes ? j->boff : 0);
                    bool all_ok = true;
                    for (int r = 0; r < rows; r++) {
                        const int64_t i = ip * MR + r;
                        rq_add[r] = (int32_t)((g->rq_bias ? (uint32_t)g->rq_bias[i] : 0u) - (asum ? (uint32_t)asum[r] * zq : 0u));
                        all_ok &= j->rq_ok[i] != 0;
                    }
                    q = (tile_rq){&j->rqk, g->rq_y + ip * MR * g->rq_ldy + n0, g->rq_ldy, g->rq_r + ip * MR, rq_add,
                                  j->rq_ok + ip * MR, all_ok, (float)g->rq_zy + 12582912.0f};
                }
#endif
#if defined(KN_QGEMM_VNNI)
                if (j->bytes == QB_VNNI) {
                    /* B's unsigned bytes add boff to zb (zb and q's adds hold it); d_i U_j in the tile */
                    const int32_t *Aq = j->aq + (ip * KQ + k0 / 2) * MR, *d = k0 == 0 && j->vd ? j->ac + ip * MR : NULL;
                    for (int64_t jp = 0; jp * NR < nc; jp++) {
                        __m256i sv[2 * MR];
                        const int cols = (int)min64(NR, nc - jp * NR);
                        tilev(rows, (kpn + 1) / 2, Aq, bq + (jp * KQ + k0 / 2) * 4 * NR, d, d ? negcs + jp * NR : NULL, sv);
                        if (j->fuse) {
                            store_rq(rows, sv, sv + MR, cols, &q);
                            q.y += NR;
                        } else
                            store_sums(rows, sv, sv + MR, C + jp * NR, g->ldc, cols, add, asum, zb ? zb + jp * NR : NULL);
                    }
                } else
#endif
#if defined(__AVX2__)
                if (block_bytes) {
                    /* QB_SIGNED: B's unsigned bytes add boff to zb (zb holds it, as does q's);
                     * QB_UNSIGNED: c[i] (-negcs[j]) for A's rows, B's zero points inside its bytes */
                    const bool bs = j->bytes == QB_UNSIGNED;
                    const int32_t *Aq = j->aq + (ip * KQ + k0 / 2) * MR;
                    const int32_t *as8 = k0 > 0 ? NULL : bs ? j->ac + ip * MR : asum;
                    for (int64_t jp = 0; jp * NR < nc; jp++) {
                        tile8_avx2(bs, rows, (kpn + 1) / 2, Aq, bq + (jp * KQ + k0 / 2) * 4 * NR, C + jp * NR, g->ldc,
                                   (int)min64(NR, nc - jp * NR), add, as8, bs ? negcs + jp * NR : zb ? zb + jp * NR : NULL,
                                   j->fuse ? &q : NULL);
                        if (j->fuse) q.y += NR;
                    }
                } else
#endif
                for (int64_t jp = 0; jp * NR < nc; jp++) {
                    tile(j->vnni, rows, g->b_signed, kpn, A, B + (jp * KP + k0) * 2 * NR, C + jp * NR, g->ldc,
                         (int)min64(NR, nc - jp * NR), add, asum, zb ? zb + jp * NR : NULL, j->fuse ? &q : NULL);
                    if (j->fuse) q.y += NR;
                }
                if (g->rows_done && !j->fuse && k0 + KP_BLOCK >= KP)
                    g->rows_done(g->done_ctx, ip * MR, ip * MR + rows, n0, nc);
            }
        }
    }
    free(buf);
    free(zb);
    free(bq);
    free(negcs);
}

/* Threads for a product of `work` multiply-adds. Pools of 1-2 threads: none past one below
 * `lo2`, then one per `grain2` (measured there: 4e5 and 2e5 for the tiles). Larger pools, whose
 * pass costs ~1-2 us at 16 threads: from `lo` on, one per `grain` (smaller: a chunk of 0.3-0.5 us
 * pays once a pass wakes the threads anyway). A one-position layer of 512 x 128 ran ~9 us on one
 * thread of the 16-core Xeon at every thread count where ONNX Runtime, splitting it, went from
 * 8.7 to 5.4 us (kn_parallel_grain_light's steps for the same reason). */
static int64_t threads_for(const kn_threadpool *pool, double work, double lo2, double grain2, double lo, double grain) {
    const int64_t threads = kn_threadpool_size(pool) > 0 ? kn_threadpool_size(pool) : 1;
    if (threads <= 2) lo = lo2, grain = grain2;
    if (threads <= 1 || work < lo) return 1;
    const double t = work / grain;
    return t >= (double)threads ? threads : t < 2.0 ? 2 : (int64_t)t;
}

/* ------------------------------------------------------------------ few columns */

/* Products of a few columns (a convolution's plane of one position, or a few: N < NR) from A's
 * int16 pairs as packed, against each column's pairs gathered into words: the tiles spend a B
 * panel's 16 columns on them (16x the work at one column). Four pairs of A's panel a step, as
 * three vectors (add_lanes_to_rows), each against its pairs of the column (bw, four words a step,
 * spread by vpermd); lanes are summed to rows at the end. Exact in int32 (mod 2^32) as the tiles. */
typedef struct qnarrow {
    const kn_qgemm *g;
    int64_t KP, KP4;
    const int32_t *bw; /* N columns of KP4 words: (b[2kp][j], b[2kp + 1][j]) as int16, 0 past KP */
    bool has_zb;
} qnarrow;

static void narrow_panel(const int32_t *A, const int32_t *bw, int64_t KP, uint32_t *s) {
    int64_t kp = 0;
    for (int r = 0; r < MR; r++) s[r] = 0;
#if defined(__AVX2__)
    const __m256i i0 = _mm256_setr_epi32(0, 0, 0, 0, 0, 0, 1, 1), i1 = _mm256_setr_epi32(1, 1, 1, 1, 2, 2, 2, 2);
    const __m256i i2 = _mm256_setr_epi32(2, 2, 3, 3, 3, 3, 3, 3);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0;
    for (; kp + 4 <= KP; kp += 4, A += 4 * MR) {
        const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(bw + kp)));
        c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)A), _mm256_permutevar8x32_epi32(b, i0)));
        c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(A + 8)), _mm256_permutevar8x32_epi32(b, i1)));
        c2 = _mm256_add_epi32(c2, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(A + 16)), _mm256_permutevar8x32_epi32(b, i2)));
    }
    add_lanes_to_rows(c0, c1, c2, s);
#endif
    for (; kp < KP; kp++, A += MR) {
        const int32_t b0 = pair_lo(bw[kp]), b1 = pair_hi(bw[kp]);
        for (int r = 0; r < MR; r++) s[r] += (uint32_t)(pair_lo(A[r]) * b0 + pair_hi(A[r]) * b1);
    }
}

/* row panels [p0, p1), all columns, then rows_done for their rows at once */
static void narrow_range(void *arg, int64_t p0, int64_t p1) {
    const qnarrow *n = arg;
    const kn_qgemm *g = n->g;
    const int32_t *sums = g->a + (g->M + MR - 1) / MR * MR * n->KP;
    for (int64_t ip = p0; ip < p1; ip++) {
        const int rows = (int)min64(MR, g->M - ip * MR);
        for (int64_t j = 0; j < g->N; j++) {
            uint32_t s[MR];
            narrow_panel(g->a + ip * n->KP * MR, n->bw + j * n->KP4, n->KP, s);
            const int32_t zb = n->has_zb ? (g->zb_cols ? g->zb_cols[j] : g->zb) : 0;
            for (int r = 0; r < rows; r++) {
                int32_t *c = g->c + (ip * MR + r) * g->ldc + j;
                uint32_t v = (uint32_t)s[r] - (uint32_t)zb * (uint32_t)sums[ip * MR + r];
                if (g->accumulate) v += (uint32_t)*c;
                *c = (int32_t)v;
            }
        }
    }
    if (g->rows_done) g->rows_done(g->done_ctx, p0 * MR, min64(g->M, p1 * MR), 0, g->N);
}

/* The few-column form where kn_qgemm_run takes it: C and rows_done (not the fused requantisation);
 * KILN_ERR_OUT_OF_MEMORY when its column words cannot be had */
static kiln_status narrow_run(kn_threadpool *pool, const kn_qgemm *g, int64_t KP, int64_t useful) {
    const int64_t KP4 = (KP + 3) / 4 * 4;
    int32_t *bw = malloc(sizeof(int32_t) * (size_t)(g->N * KP4));
    uint8_t *own = g->b ? NULL : kn_aligned_alloc(64, kn_qgemm_b_bytes(g->N, g->K));
    if (!bw || (!g->b && !own)) {
        free(bw);
        free(own);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    if (own) g->pack_b(g->pack_ctx, 0, g->N, own);
    const uint8_t *B = g->b ? g->b : own;
    for (int64_t j = 0; j < g->N; j++) {
        const uint8_t *p = B + j / NR * KP * 2 * NR + 2 * (j % NR);
        int32_t *w = bw + j * KP4;
        for (int64_t kp = 0; kp < KP; kp++, p += 2 * NR) {
            const int32_t b0 = g->b_signed ? (int8_t)p[0] : p[0], b1 = g->b_signed ? (int8_t)p[1] : p[1];
            w[kp] = pair(b0, b1);
        }
        for (int64_t kp = KP; kp < KP4; kp++) w[kp] = 0;
    }
    free(own);
    qnarrow n = {g, KP, KP4, bw, g->zb_cols || g->zb};
    const int64_t row_panels = (g->M + MR - 1) / MR;
    if (useful <= 1 || row_panels < 2) narrow_range(&n, 0, row_panels);
    else kn_parallel_for(pool, row_panels, (row_panels + useful - 1) / useful, narrow_range, &n);
    free(bw);
    return KILN_OK;
}

kiln_status kn_qgemm_run(kn_threadpool *pool, const kn_qgemm *g) {
    if (g->M <= 0 || g->N <= 0) return KILN_OK;
    if (g->K <= 0) {
        if (!g->accumulate)
            for (int64_t i = 0; i < g->M; i++) memset(g->c + i * g->ldc, 0, sizeof(int32_t) * (size_t)g->N);
        if (g->rows_done) g->rows_done(g->done_ctx, 0, g->M, 0, g->N);
        return KILN_OK;
    }
    qjob j = {.g = g, .KP = pairs_of(g->K), .has_zb = g->zb_cols || g->zb, .vnni = kn_cpu_has_vnni()};
    const int64_t panels = (g->N + NR - 1) / NR, row_panels = (g->M + MR - 1) / MR;
    const int32_t *head = g->a + row_panels * MR * (j.KP + 1);
    /* VNNI: the byte form QB_VNNI where A was packed for it (kn_qgemm_pack_a8 on a VNNI CPU), with
     * the fused requantisation, where B comes from pack_b (a convolution's, made per call and in
     * cache when turned into quads) or A has two row panels or more; else the int16 pairs
     * (tile6_vnni, row_vnni; C and rows_done): a constant B turned into quads on every call would
     * be read and written twice more for a product of a few rows (a one-row RNN step is bound by
     * B's bytes) */
    const bool vform = j.vnni && head[0] == bytes_check(g->M, g->K) && head[1] == QB_VNNI && (!g->b || g->M >= 2 * MR);
    (void)vform; /* (the byte forms are AVX2's) */
#if defined(__AVX2__)
    j.fuse = g->rq_y && (!j.vnni || vform) && j.KP <= KP_BLOCK && !g->zb_cols && !g->accumulate;
    if (j.fuse) {
        j.rqk = kn_rq8_setup(g->rq_zy, g->rq_s8);
        if ((j.rq_ok = malloc((size_t)g->M))) rq_rows_ok(g, j.KP, j.rq_ok);
        else j.fuse = false; /* (C and rows_done then) */
    }
#endif
#if defined(__AVX2__)
    /* the byte form where A's packing made one (kn_qgemm_pack_a8) and the six-row tile runs:
     * QB_UNSIGNED takes a correction per column, so not with the fused requantisation's one zb */
    if (vform) {
        j.bytes = QB_VNNI;
        j.aq = head + BYTES_HEAD;
        j.ac = j.aq + row_panels * MR * quads_of(g->K);
        j.boff = g->b_signed ? 128 : 0;
        j.has_zb = true;
        j.vd = head[2] != 0;
    } else if (!j.vnni && g->M >= 3) {
        const int64_t KQ = quads_of(g->K);
        if (head[0] == bytes_check(g->M, g->K) && (head[1] == QB_SIGNED || (head[1] == QB_UNSIGNED && !j.fuse))) {
            j.bytes = head[1];
            j.aq = head + BYTES_HEAD;
            j.ac = j.aq + row_panels * MR * KQ;
            j.boff = j.bytes == QB_SIGNED && g->b_signed ? 128 : 0;
            j.has_zb = true;
        }
    }
#endif
    /* a product too small to share: one thread (a pass of the pool costs microseconds) */
    const double work = (double)g->M * (double)g->N * (double)g->K;
    const int64_t useful = threads_for(pool, work, 4e5, 2e5, 2e5, 3e4);
    /* a few columns: their own form (the tiles' panels of 16 would be mostly padding) */
    if (g->N <= (j.vnni ? 2 : 4) && !j.fuse) {
        free(j.rq_ok);
        return narrow_run(pool, g, j.KP, useful);
    }
    int64_t bp = (int64_t)(B_BLOCK_BYTES / ((size_t)NR * 2 * (size_t)j.KP));
    /* no wider than B: a column block's buffers (made per call) of 192 KB for one position went
     * through mmap, page faults and all, on every call (a 200 -> 50 layer: 2.5x its time) */
    bp = bp < 1 ? 1 : bp > panels ? panels : bp;
    if (useful > 1 && (panels + useful - 1) / useful < bp) bp = (panels + useful - 1) / useful;
    j.block_panels = bp;
    j.col_blocks = (panels + bp - 1) / bp;
    /* too few column blocks for the threads: the rows split too */
    j.row_blocks = j.col_blocks >= useful ? 1 : min64(row_panels, (useful + j.col_blocks - 1) / j.col_blocks);
    j.row_panels = (row_panels + j.row_blocks - 1) / j.row_blocks;
    j.row_blocks = (row_panels + j.row_panels - 1) / j.row_panels;
    const int64_t units = j.col_blocks * j.row_blocks;
    if (useful <= 1) qjob_range(&j, 0, units);
    else kn_parallel_for(pool, units, 1, qjob_range, &j);
    free(j.rq_ok);
    return atomic_load(&j.failed) ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

/* ------------------------------------------------------------------ one row */

void kn_qgemv_run(const int32_t *a, int32_t asum, const uint8_t *b, bool b_signed, int32_t zb, int64_t N, int64_t K,
                  int32_t *c) {
    const int64_t KP = pairs_of(K);
    const int32_t *as = zb ? &asum : NULL;
#if defined(__AVX2__)
    const bool vnni = kn_cpu_has_vnni();
    (void)vnni;
    int32_t zbv[NR];
    for (int j = 0; j < NR; j++) zbv[j] = zb;
#endif
    for (int64_t jp = 0; jp * NR < N; jp++) {
        const int cols = (int)min64(NR, N - jp * NR);
#if defined(__AVX2__)
#if defined(KN_QGEMM_VNNI)
        if (vnni) {
            row_vnni(b_signed, KP, a, 1, b + jp * KP * 2 * NR, c + jp * NR, cols, false, as, zbv);
            continue;
        }
#endif
        gemv_panel_avx2(b_signed, KP, a, b + jp * KP * 2 * NR, c + jp * NR, cols, as, zbv);
#else
        int32_t acc[NR] = {0};
        const uint8_t *B = b + jp * KP * 2 * NR;
        for (int64_t kp = 0; kp < KP; kp++, B += 2 * NR) {
            const int32_t a0 = pair_lo(a[kp]), a1 = pair_hi(a[kp]);
            for (int j = 0; j < NR; j++) {
                const int32_t b0 = b_signed ? (int8_t)B[2 * j] : B[2 * j], b1 = b_signed ? (int8_t)B[2 * j + 1] : B[2 * j + 1];
                acc[j] += a0 * b0 + a1 * b1;
            }
        }
        for (int j = 0; j < cols; j++) c[jp * NR + j] = acc[j] - (as ? asum * zb : 0);
#endif
    }
}

/* ------------------------------------------------------------------ dynamic quantisation */

void kn_q8_range(const float *x, int64_t n, float *mn_out, float *mx_out) {
    float mn = 0.0f, mx = 0.0f;
    int64_t i = 0;
#if defined(__AVX2__)
    /* max_ps(x, m) is x > m ? x : m, min_ps(x, m) x < m ? x : m: a NaN x leaves m, as below. Lanes
     * start at +0 and only take values beyond it, so the order of the reduction does not matter */
    __m256 vmn = _mm256_setzero_ps(), vmx = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        vmn = _mm256_min_ps(v, vmn);
        vmx = _mm256_max_ps(v, vmx);
    }
    float l[8], h[8];
    _mm256_storeu_ps(l, vmn);
    _mm256_storeu_ps(h, vmx);
    for (int k = 0; k < 8; k++) {
        mn = l[k] < mn ? l[k] : mn;
        mx = h[k] > mx ? h[k] : mx;
    }
#endif
    for (; i < n; i++) {
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    *mn_out = mn;
    *mx_out = mx;
}

void kn_q8_quantize_u8(const float *x, int64_t n, float scale, float z, uint8_t *out) {
    int64_t i = 0;
#if defined(__AVX2__)
    /* nearbyintf in the default rounding mode, then !(v > 0) ? 0 : v > 255 ? 255 : v (max_ps(v, 0)
     * is v > 0 ? v : 0, NaN to 0) on whole numbers, converted exactly */
    const __m256 sv = _mm256_set1_ps(scale), zv = _mm256_set1_ps(z), lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(255.0f);
    for (; i + 16 <= n; i += 16) {
        __m256i q[2];
        for (int h = 0; h < 2; h++) {
            __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + i + 8 * h), sv);
            v = _mm256_add_ps(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zv);
            q[h] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
        }
        const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xd8); /* 16 int16 in order */
        const __m128i b8 = _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        _mm_storeu_si128((__m128i *)(out + i), b8);
    }
#endif
    for (; i < n; i++) {
        const float v = nearbyintf(x[i] / scale) + z;
        out[i] = (uint8_t)(!(v > 0.0f) ? 0.0f : v > 255.0f ? 255.0f : v);
    }
}

/* ------------------------------------------------------------------ u8 x s8 one-row products */

/* kn_qgemv8's packed form (qgemm.h): a header, the column sums, the residual entries, the column
 * sums of |b| as packed (all K, residual values included: kn_qgemm8_run's one-rounding bound), then
 * the panels of 32 columns, in each for every quad of K (4 values) 128 bytes: 4 groups of 8 columns,
 * column j of a group at bytes 4j .. 4j + 3 (k = 4q .. 4q + 3), as vpmaddubsw pairs them */
#define G8_NC 32
typedef struct g8_head {
    int64_t K, N, KQ, NP, cap, nres, usable, b_off;
} g8_head;
_Static_assert(sizeof(g8_head) == 64, "the header fills one cache line");

static int64_t g8_cap(int64_t K, int64_t N) { return 64 + K * N / 256; }

size_t kn_qgemv8_bytes(int64_t K, int64_t N) {
    const int64_t KQ = (K + 3) / 4, NP = (N + G8_NC - 1) / G8_NC;
    const size_t head = sizeof(g8_head) + 2 * sizeof(int32_t) * (size_t)(NP * G8_NC) + 3 * sizeof(int32_t) * (size_t)g8_cap(K, N);
    return (head + 63) / 64 * 64 + (size_t)(NP * KQ * 4 * G8_NC);
}

/* 1: the residual form (over-bound pairs within the list), 2: the sign form (more such pairs, but
 * no weight -128 as packed), 0: neither */
static int g8_mode(const void *b, bool is_s8, int64_t K, int64_t N) {
    const int64_t cap = g8_cap(K, N);
    int64_t over = 0;
#define BV(k, j) ((k) >= K ? 0 : is_s8 ? (int32_t)((const int8_t *)b)[(k) * N + (j)] : (int32_t)((const uint8_t *)b)[(k) * N + (j)] - 128)
    for (int64_t k = 0; k < K && over <= cap; k += 2)
        for (int64_t j = 0; j < N; j++) over += abs(BV(k, j)) + abs(BV(k + 1, j)) > 128;
#undef BV
    if (over <= cap) return 1;
    const int8_t *s8 = b;
    const uint8_t *u8 = b;
    for (int64_t i = 0; i < K * N; i++)
        if (is_s8 ? s8[i] == -128 : u8[i] == 0) return 0;
    return 2;
}

bool kn_qgemv8_fits(const void *b, bool is_s8, int64_t K, int64_t N) { return g8_mode(b, is_s8, K, N) == 1; }
int kn_qgemv8_fits_form(const void *b, bool is_s8, int64_t K, int64_t N) { return g8_mode(b, is_s8, K, N); }

void kn_qgemv8_pack(const void *b, bool is_s8, int64_t K, int64_t N, void *dst) {
    g8_head *h = dst;
    const int64_t KQ = (K + 3) / 4, NP = (N + G8_NC - 1) / G8_NC, cap = g8_cap(K, N);
    const size_t head = sizeof(g8_head) + 2 * sizeof(int32_t) * (size_t)(NP * G8_NC) + 3 * sizeof(int32_t) * (size_t)cap;
    *h = (g8_head){K, N, KQ, NP, cap, 0, 1, (int64_t)((head + 63) / 64 * 64)};
    int32_t *colsum = (int32_t *)(h + 1), *res = colsum + NP * G8_NC, *absum = res + 3 * cap;
    int8_t *B = (int8_t *)dst + h->b_off;
    memset(colsum, 0, sizeof(int32_t) * (size_t)(NP * G8_NC));
    memset(absum, 0, sizeof(int32_t) * (size_t)(NP * G8_NC));
    /* weights with more such pairs than the list holds (full-range ones: about half their pairs)
     * are found before any packing: packed whole for the sign form when none is -128 as packed
     * (symmetric quantisation), else left to kn_qgemm */
    const int mode = g8_mode(b, is_s8, K, N);
    if (!mode) {
        h->nres = cap + 1, h->usable = 0;
        return;
    }
    const bool sign = mode == 2;
    h->usable = mode;
#define BV(k, j) ((k) >= K || (j) >= N ? 0 : is_s8 ? (int32_t)((const int8_t *)b)[(k) * N + (j)] : (int32_t)((const uint8_t *)b)[(k) * N + (j)] - 128)
    for (int64_t p = 0; p < NP; p++)
        for (int64_t q = 0; q < KQ; q++)
            for (int64_t j = 0; j < G8_NC; j++) {
                const int64_t col = p * G8_NC + j;
                int8_t *d = B + ((p * KQ + q) * G8_NC + j) * 4;
                for (int e = 0; e < 4; e += 2) {
                    /* (the residual form) a pair whose |b0| + |b1| passes 128 could saturate
                     * vpmaddubsw's int16 sum with a = 255: its second value goes to the residual list */
                    const int64_t k = 4 * q + e;
                    const int32_t b0 = BV(k, col), b1 = BV(k + 1, col);
                    colsum[col] += b0 + b1;
                    absum[col] += abs(b0) + abs(b1);
                    d[e] = (int8_t)b0;
                    d[e + 1] = (int8_t)b1;
                    if (!sign && abs(b0) + abs(b1) > 128) {
                        d[e + 1] = 0;
                        if (h->nres < cap) {
                            res[3 * h->nres] = (int32_t)(k + 1), res[3 * h->nres + 1] = (int32_t)col;
                            res[3 * h->nres + 2] = b1;
                        }
                        if (++h->nres > cap) h->usable = 0;
                    }
                }
            }
#undef BV
}

bool kn_qgemv8_usable(const void *packed) { return ((const g8_head *)packed)->usable == 1; }
int kn_qgemv8_form(const void *packed) { return (int)((const g8_head *)packed)->usable; }
int64_t kn_qgemv8_residuals(const void *packed) {
    const g8_head *h = packed;
    return h->usable == 1 ? h->nres : 0;
}

#if defined(__AVX2__)
/* sums[0..32) = A's quads (4 bytes each, n of them) times a panel's 128-byte quads: per 32 bytes
 * vpmaddubsw (u8 x s8 pairs into int16, exact here), vpmaddwd by ones (the two pairs of a column
 * into int32) and an add; two quads a step */
static void g8_panel(const uint8_t *A, const int8_t *B, int64_t n, int32_t *sums) {
    __asm__ volatile("vpcmpeqw %%ymm15, %%ymm15, %%ymm15\n\t"
                     "vpsrlw $15, %%ymm15, %%ymm15\n\t"
                     "vpxor %%ymm0, %%ymm0, %%ymm0\n\t"
                     "vpxor %%ymm1, %%ymm1, %%ymm1\n\t"
                     "vpxor %%ymm2, %%ymm2, %%ymm2\n\t"
                     "vpxor %%ymm3, %%ymm3, %%ymm3\n\t"
                     "cmp $2, %[n]\n\t"
                     "jb 2f\n"
                     "1:\n\t"
                     "vpbroadcastd (%[a]), %%ymm4\n\t"
                     "vpbroadcastd 4(%[a]), %%ymm5\n\t"
                     "vpmaddubsw (%[b]), %%ymm4, %%ymm6\n\t"
                     "vpmaddubsw 32(%[b]), %%ymm4, %%ymm7\n\t"
                     "vpmaddubsw 64(%[b]), %%ymm4, %%ymm8\n\t"
                     "vpmaddubsw 96(%[b]), %%ymm4, %%ymm9\n\t"
                     "vpmaddwd %%ymm15, %%ymm6, %%ymm6\n\t"
                     "vpmaddwd %%ymm15, %%ymm7, %%ymm7\n\t"
                     "vpmaddwd %%ymm15, %%ymm8, %%ymm8\n\t"
                     "vpmaddwd %%ymm15, %%ymm9, %%ymm9\n\t"
                     "vpaddd %%ymm6, %%ymm0, %%ymm0\n\t"
                     "vpaddd %%ymm7, %%ymm1, %%ymm1\n\t"
                     "vpaddd %%ymm8, %%ymm2, %%ymm2\n\t"
                     "vpaddd %%ymm9, %%ymm3, %%ymm3\n\t"
                     "vpmaddubsw 128(%[b]), %%ymm5, %%ymm10\n\t"
                     "vpmaddubsw 160(%[b]), %%ymm5, %%ymm11\n\t"
                     "vpmaddubsw 192(%[b]), %%ymm5, %%ymm12\n\t"
                     "vpmaddubsw 224(%[b]), %%ymm5, %%ymm13\n\t"
                     "vpmaddwd %%ymm15, %%ymm10, %%ymm10\n\t"
                     "vpmaddwd %%ymm15, %%ymm11, %%ymm11\n\t"
                     "vpmaddwd %%ymm15, %%ymm12, %%ymm12\n\t"
                     "vpmaddwd %%ymm15, %%ymm13, %%ymm13\n\t"
                     "vpaddd %%ymm10, %%ymm0, %%ymm0\n\t"
                     "vpaddd %%ymm11, %%ymm1, %%ymm1\n\t"
                     "vpaddd %%ymm12, %%ymm2, %%ymm2\n\t"
                     "vpaddd %%ymm13, %%ymm3, %%ymm3\n\t"
                     "add $8, %[a]\n\t"
                     "add $256, %[b]\n\t"
                     "sub $2, %[n]\n\t"
                     "cmp $2, %[n]\n\t"
                     "jae 1b\n"
                     "2:\n\t"
                     "test %[n], %[n]\n\t"
                     "jz 3f\n\t"
                     "vpbroadcastd (%[a]), %%ymm4\n\t"
                     "vpmaddubsw (%[b]), %%ymm4, %%ymm6\n\t"
                     "vpmaddubsw 32(%[b]), %%ymm4, %%ymm7\n\t"
                     "vpmaddubsw 64(%[b]), %%ymm4, %%ymm8\n\t"
                     "vpmaddubsw 96(%[b]), %%ymm4, %%ymm9\n\t"
                     "vpmaddwd %%ymm15, %%ymm6, %%ymm6\n\t"
                     "vpmaddwd %%ymm15, %%ymm7, %%ymm7\n\t"
                     "vpmaddwd %%ymm15, %%ymm8, %%ymm8\n\t"
                     "vpmaddwd %%ymm15, %%ymm9, %%ymm9\n\t"
                     "vpaddd %%ymm6, %%ymm0, %%ymm0\n\t"
                     "vpaddd %%ymm7, %%ymm1, %%ymm1\n\t"
                     "vpaddd %%ymm8, %%ymm2, %%ymm2\n\t"
                     "vpaddd %%ymm9, %%ymm3, %%ymm3\n"
                     "3:\n\t"
                     "vmovdqu %%ymm0, (%[o])\n\t"
                     "vmovdqu %%ymm1, 32(%[o])\n\t"
                     "vmovdqu %%ymm2, 64(%[o])\n\t"
                     "vmovdqu %%ymm3, 96(%[o])\n\t"
                     : [a] "+r"(A), [b] "+r"(B), [n] "+r"(n)
                     : [o] "r"(sums)
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                       "xmm11", "xmm12", "xmm13", "xmm15", "memory", "cc");
}

/* two rows (A0, A1) against one panel: eight sums in ymm0-7, B's vectors read from memory by
 * both rows' vpmaddubsw (the panel of a few KB stays in L1 over the rows) */
static void g8_panel2(const uint8_t *A0, const uint8_t *A1, const int8_t *B, int64_t n, int32_t *sums) {
    __asm__ volatile("vpcmpeqw %%ymm15, %%ymm15, %%ymm15\n\t"
                     "vpsrlw $15, %%ymm15, %%ymm15\n\t"
                     "vpxor %%ymm0, %%ymm0, %%ymm0\n\t"
                     "vpxor %%ymm1, %%ymm1, %%ymm1\n\t"
                     "vpxor %%ymm2, %%ymm2, %%ymm2\n\t"
                     "vpxor %%ymm3, %%ymm3, %%ymm3\n\t"
                     "vpxor %%ymm4, %%ymm4, %%ymm4\n\t"
                     "vpxor %%ymm5, %%ymm5, %%ymm5\n\t"
                     "vpxor %%ymm6, %%ymm6, %%ymm6\n\t"
                     "vpxor %%ymm7, %%ymm7, %%ymm7\n\t"
                     "test %[n], %[n]\n\t"
                     "jz 2f\n"
                     "1:\n\t"
                     "vpbroadcastd (%[a0]), %%ymm8\n\t"
                     "vpbroadcastd (%[a1]), %%ymm9\n\t"
                     "vpmaddubsw (%[b]), %%ymm8, %%ymm10\n\t"
                     "vpmaddubsw (%[b]), %%ymm9, %%ymm11\n\t"
                     "vpmaddubsw 32(%[b]), %%ymm8, %%ymm12\n\t"
                     "vpmaddubsw 32(%[b]), %%ymm9, %%ymm13\n\t"
                     "vpmaddwd %%ymm15, %%ymm10, %%ymm10\n\t"
                     "vpmaddwd %%ymm15, %%ymm11, %%ymm11\n\t"
                     "vpmaddwd %%ymm15, %%ymm12, %%ymm12\n\t"
                     "vpmaddwd %%ymm15, %%ymm13, %%ymm13\n\t"
                     "vpaddd %%ymm10, %%ymm0, %%ymm0\n\t"
                     "vpaddd %%ymm11, %%ymm4, %%ymm4\n\t"
                     "vpaddd %%ymm12, %%ymm1, %%ymm1\n\t"
                     "vpaddd %%ymm13, %%ymm5, %%ymm5\n\t"
                     "vpmaddubsw 64(%[b]), %%ymm8, %%ymm10\n\t"
                     "vpmaddubsw 64(%[b]), %%ymm9, %%ymm11\n\t"
                     "vpmaddubsw 96(%[b]), %%ymm8, %%ymm12\n\t"
                     "vpmaddubsw 96(%[b]), %%ymm9, %%ymm13\n\t"
                     "vpmaddwd %%ymm15, %%ymm10, %%ymm10\n\t"
                     "vpmaddwd %%ymm15, %%ymm11, %%ymm11\n\t"
                     "vpmaddwd %%ymm15, %%ymm12, %%ymm12\n\t"
                     "vpmaddwd %%ymm15, %%ymm13, %%ymm13\n\t"
                     "vpaddd %%ymm10, %%ymm2, %%ymm2\n\t"
                     "vpaddd %%ymm11, %%ymm6, %%ymm6\n\t"
                     "vpaddd %%ymm12, %%ymm3, %%ymm3\n\t"
                     "vpaddd %%ymm13, %%ymm7, %%ymm7\n\t"
                     "add $4, %[a0]\n\t"
                     "add $4, %[a1]\n\t"
                     "add $128, %[b]\n\t"
                     "dec %[n]\n\t"
                     "jnz 1b\n"
                     "2:\n\t"
                     "vmovdqu %%ymm0, (%[o])\n\t"
                     "vmovdqu %%ymm1, 32(%[o])\n\t"
                     "vmovdqu %%ymm2, 64(%[o])\n\t"
                     "vmovdqu %%ymm3, 96(%[o])\n\t"
                     "vmovdqu %%ymm4, 128(%[o])\n\t"
                     "vmovdqu %%ymm5, 160(%[o])\n\t"
                     "vmovdqu %%ymm6, 192(%[o])\n\t"
                     "vmovdqu %%ymm7, 224(%[o])\n\t"
                     : [a0] "+r"(A0), [a1] "+r"(A1), [b] "+r"(B), [n] "+r"(n)
                     : [o] "r"(sums)
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                       "xmm11", "xmm12", "xmm13", "xmm15", "memory", "cc");
}
#else
static void g8_panel(const uint8_t *A, const int8_t *B, int64_t n, int32_t *sums) {
    for (int j = 0; j < G8_NC; j++) sums[j] = 0;
    for (int64_t q = 0; q < n; q++, A += 4, B += 4 * G8_NC)
        for (int j = 0; j < G8_NC; j++)
            for (int e = 0; e < 4; e++) sums[j] += (int32_t)A[e] * (int32_t)B[4 * j + e];
}
static void g8_panel2(const uint8_t *A0, const uint8_t *A1, const int8_t *B, int64_t n, int32_t *sums) {
    g8_panel(A0, B, n, sums);
    g8_panel(A1, B, n, sums + G8_NC);
}
#endif

/* The sign form (weights whose pairs do not fit the residual list, none of them -128 as packed:
 * symmetric full-range int8): every pair packed, A's bytes taken as a' = a - 128 (s8), and each
 * product as |a'| (u8, at most 128) times sign(a') b (vpsignb: exact, |b| <= 127), so a pair's
 * int16 sum is at most 2 * 128 * 127 = 32512 in magnitude and vpmaddubsw never saturates; the
 * sums are of (a - 128) b (g8_range stores them with za - 128 for za). Per 32 products vpsignb,
 * vpmaddubsw, vpmaddwd and an add (plus |a'| and a' per quad of each row): on Zen 3 two rows
 * ~1.25x kn_qgemm's time for two rows, one row as fast as kn_qgemv_run, and from three rows on
 * no faster than kn_qgemm's 6-row int16 tile (~4 vector operations per 32 products both). */
#if defined(__AVX2__)
static const uint8_t g8_k80[32] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                   0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                   0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80};
#define G8S_VEC(OFF, A, S, C)                                                                                 \
    "vmovdqu " OFF "(%[b]), %%ymm12\n\t"                                                                      \
    "vpsignb %%ymm" S ", %%ymm12, %%ymm12\n\t"                                                                \
    "vpmaddubsw %%ymm12, %%ymm" A ", %%ymm12\n\t"                                                             \
    "vpmaddwd %%ymm14, %%ymm12, %%ymm12\n\t"                                                                  \
    "vpaddd %%ymm12, %%ymm" C ", %%ymm" C "\n\t"
/* one row: n (>= 1) quads into sums[0..32) */
static void g8s_panel(const uint8_t *A, const int8_t *B, int64_t n, int32_t *sums) {
    __asm__ volatile("vpcmpeqw %%ymm14, %%ymm14, %%ymm14\n\t"
                     "vpsrlw $15, %%ymm14, %%ymm14\n\t"
                     "vmovdqu (%[k]), %%ymm15\n\t"
                     "vpxor %%ymm0, %%ymm0, %%ymm0\n\t"
                     "vpxor %%ymm1, %%ymm1, %%ymm1\n\t"
                     "vpxor %%ymm2, %%ymm2, %%ymm2\n\t"
                     "vpxor %%ymm3, %%ymm3, %%ymm3\n"
                     "1:\n\t"
                     "vpbroadcastd (%[a]), %%ymm9\n\t"
                     "vpxor %%ymm15, %%ymm9, %%ymm9\n\t"
                     "vpabsb %%ymm9, %%ymm8\n\t"
                     G8S_VEC("0", "8", "9", "0") G8S_VEC("32", "8", "9", "1")
                     G8S_VEC("64", "8", "9", "2") G8S_VEC("96", "8", "9", "3")
                     "add $4, %[a]\n\t"
                     "add $128, %[b]\n\t"
                     "dec %[n]\n\t"
                     "jnz 1b\n\t"
                     "vmovdqu %%ymm0, (%[o])\n\t"
                     "vmovdqu %%ymm1, 32(%[o])\n\t"
                     "vmovdqu %%ymm2, 64(%[o])\n\t"
                     "vmovdqu %%ymm3, 96(%[o])\n\t"
                     : [a] "+r"(A), [b] "+r"(B), [n] "+r"(n)
                     : [o] "r"(sums), [k] "r"(g8_k80)
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm8", "xmm9", "xmm12", "xmm14", "xmm15", "memory", "cc");
}
#undef G8S_VEC
/* two rows: sums[0..32) row A0, sums[32..64) row A1; each B vector loaded once */
#define G8S_VEC2(OFF, C0, C1)                                                                                 \
    "vmovdqu " OFF "(%[b]), %%ymm12\n\t"                                                                      \
    "vpsignb %%ymm9, %%ymm12, %%ymm13\n\t"                                                                    \
    "vpsignb %%ymm11, %%ymm12, %%ymm12\n\t"                                                                   \
    "vpmaddubsw %%ymm13, %%ymm8, %%ymm13\n\t"                                                                 \
    "vpmaddubsw %%ymm12, %%ymm10, %%ymm12\n\t"                                                                \
    "vpmaddwd %%ymm14, %%ymm13, %%ymm13\n\t"                                                                  \
    "vpmaddwd %%ymm14, %%ymm12, %%ymm12\n\t"                                                                  \
    "vpaddd %%ymm13, %%ymm" C0 ", %%ymm" C0 "\n\t"                                                            \
    "vpaddd %%ymm12, %%ymm" C1 ", %%ymm" C1 "\n\t"
static void g8s_panel2(const uint8_t *A0, const uint8_t *A1, const int8_t *B, int64_t n, int32_t *sums) {
    __asm__ volatile("vpcmpeqw %%ymm14, %%ymm14, %%ymm14\n\t"
                     "vpsrlw $15, %%ymm14, %%ymm14\n\t"
                     "vmovdqu (%[k]), %%ymm15\n\t"
                     "vpxor %%ymm0, %%ymm0, %%ymm0\n\t"
                     "vpxor %%ymm1, %%ymm1, %%ymm1\n\t"
                     "vpxor %%ymm2, %%ymm2, %%ymm2\n\t"
                     "vpxor %%ymm3, %%ymm3, %%ymm3\n\t"
                     "vpxor %%ymm4, %%ymm4, %%ymm4\n\t"
                     "vpxor %%ymm5, %%ymm5, %%ymm5\n\t"
                     "vpxor %%ymm6, %%ymm6, %%ymm6\n\t"
                     "vpxor %%ymm7, %%ymm7, %%ymm7\n"
                     "1:\n\t"
                     "vpbroadcastd (%[a0]), %%ymm9\n\t"
                     "vpxor %%ymm15, %%ymm9, %%ymm9\n\t"
                     "vpabsb %%ymm9, %%ymm8\n\t"
                     "vpbroadcastd (%[a1]), %%ymm11\n\t"
                     "vpxor %%ymm15, %%ymm11, %%ymm11\n\t"
                     "vpabsb %%ymm11, %%ymm10\n\t"
                     G8S_VEC2("0", "0", "4") G8S_VEC2("32", "1", "5") G8S_VEC2("64", "2", "6") G8S_VEC2("96", "3", "7")
                     "add $4, %[a0]\n\t"
                     "add $4, %[a1]\n\t"
                     "add $128, %[b]\n\t"
                     "dec %[n]\n\t"
                     "jnz 1b\n\t"
                     "vmovdqu %%ymm0, (%[o])\n\t"
                     "vmovdqu %%ymm1, 32(%[o])\n\t"
                     "vmovdqu %%ymm2, 64(%[o])\n\t"
                     "vmovdqu %%ymm3, 96(%[o])\n\t"
                     "vmovdqu %%ymm4, 128(%[o])\n\t"
                     "vmovdqu %%ymm5, 160(%[o])\n\t"
                     "vmovdqu %%ymm6, 192(%[o])\n\t"
                     "vmovdqu %%ymm7, 224(%[o])\n\t"
                     : [a0] "+r"(A0), [a1] "+r"(A1), [b] "+r"(B), [n] "+r"(n)
                     : [o] "r"(sums), [k] "r"(g8_k80)
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                       "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
}
#undef G8S_VEC2
#else
static void g8s_panel(const uint8_t *A, const int8_t *B, int64_t n, int32_t *sums) {
    for (int j = 0; j < G8_NC; j++) sums[j] = 0;
    for (int64_t q = 0; q < n; q++, A += 4, B += 4 * G8_NC)
        for (int j = 0; j < G8_NC; j++)
            for (int e = 0; e < 4; e++) sums[j] += ((int32_t)A[e] - 128) * (int32_t)B[4 * j + e];
}
static void g8s_panel2(const uint8_t *A0, const uint8_t *A1, const int8_t *B, int64_t n, int32_t *sums) {
    g8s_panel(A0, B, n, sums);
    g8s_panel(A1, B, n, sums + G8_NC);
}
#endif

#if defined(KN_QGEMM_VNNI)
/* AVX-512 VNNI (kn_cpu_has_vnni): vpdpbusd multiplies a lane's four u8 x s8 byte pairs and adds
 * the four products to its int32 sum in one instruction, without the int16 pair sums that make
 * the forms above saturate: the same packed panels then give sum_k a_k b_k exactly in either form
 * (the sign form's b whole, the residual form's as packed plus its list), 32 products an
 * instruction against vpmaddubsw, vpmaddwd and vpaddd (and vpsignb in the sign form). One row:
 * two quads a step into separate sums, so that each sum's chain (vpdpbusd's latency) waits less. */
/* (asm as g8_panel's: written with intrinsics, gcc moved every sum between registers each step,
 * two moves per vpdpbusd; EVEX encodings, which the AVX-512 VNNI CPUs kn_cpu_has_vnni admits
 * have) */
/* On where the CPU has VNNI; KILN_QGEMM8_VNNI=0 in the environment keeps the AVX2 panels there
 * (for comparisons). Written on an AVX2 machine; first run on an AVX-512 VNNI Xeon (Ice Lake
 * class) by helper-109, where the unit tests (test_cpu_qconv_few_positions.c, test_cpu_qgemm_vnni.c:
 * VNNI on and off) pass byte for byte. */
static bool g8v_on(void) {
    static int on = -1;
    int v = __atomic_load_n(&on, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *e = getenv("KILN_QGEMM8_VNNI");
        v = !(e && e[0] == '0');
        __atomic_store_n(&on, v, __ATOMIC_RELAXED);
    }
    return v;
}

static void g8v_panel(const uint8_t *A, const int8_t *B, int64_t n, int32_t *sums) {
    __asm__ volatile("vpxor %%ymm0, %%ymm0, %%ymm0\n\t"
                     "vpxor %%ymm1, %%ymm1, %%ymm1\n\t"
                     "vpxor %%ymm2, %%ymm2, %%ymm2\n\t"
                     "vpxor %%ymm3, %%ymm3, %%ymm3\n\t"
                     "vpxor %%ymm4, %%ymm4, %%ymm4\n\t"
                     "vpxor %%ymm5, %%ymm5, %%ymm5\n\t"
                     "vpxor %%ymm6, %%ymm6, %%ymm6\n\t"
                     "vpxor %%ymm7, %%ymm7, %%ymm7\n\t"
                     "cmp $2, %[n]\n\t"
                     "jb 2f\n"
                     "1:\n\t"
                     "vpbroadcastd (%[a]), %%ymm8\n\t"
                     "vpbroadcastd 4(%[a]), %%ymm9\n\t"
                     "vpdpbusd (%[b]), %%ymm8, %%ymm0\n\t"
                     "vpdpbusd 32(%[b]), %%ymm8, %%ymm1\n\t"
                     "vpdpbusd 64(%[b]), %%ymm8, %%ymm2\n\t"
                     "vpdpbusd 96(%[b]), %%ymm8, %%ymm3\n\t"
                     "vpdpbusd 128(%[b]), %%ymm9, %%ymm4\n\t"
                     "vpdpbusd 160(%[b]), %%ymm9, %%ymm5\n\t"
                     "vpdpbusd 192(%[b]), %%ymm9, %%ymm6\n\t"
                     "vpdpbusd 224(%[b]), %%ymm9, %%ymm7\n\t"
                     "add $8, %[a]\n\t"
                     "add $256, %[b]\n\t"
                     "sub $2, %[n]\n\t"
                     "cmp $2, %[n]\n\t"
                     "jae 1b\n"
                     "2:\n\t"
                     "test %[n], %[n]\n\t"
                     "jz 3f\n\t"
                     "vpbroadcastd (%[a]), %%ymm8\n\t"
                     "vpdpbusd (%[b]), %%ymm8, %%ymm0\n\t"
                     "vpdpbusd 32(%[b]), %%ymm8, %%ymm1\n\t"
                     "vpdpbusd 64(%[b]), %%ymm8, %%ymm2\n\t"
                     "vpdpbusd 96(%[b]), %%ymm8, %%ymm3\n"
                     "3:\n\t"
                     "vpaddd %%ymm4, %%ymm0, %%ymm0\n\t"
                     "vpaddd %%ymm5, %%ymm1, %%ymm1\n\t"
                     "vpaddd %%ymm6, %%ymm2, %%ymm2\n\t"
                     "vpaddd %%ymm7, %%ymm3, %%ymm3\n\t"
                     "vmovdqu %%ymm0, (%[o])\n\t"
                     "vmovdqu %%ymm1, 32(%[o])\n\t"
                     "vmovdqu %%ymm2, 64(%[o])\n\t"
                     "vmovdqu %%ymm3, 96(%[o])\n\t"
                     : [a] "+r"(A), [b] "+r"(B), [n] "+r"(n)
                     : [o] "r"(sums)
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "memory", "cc");
}

/* two rows: sums[0..32) row A0, sums[32..64) row A1; a quad a step, eight sums */
static void g8v_panel2(const uint8_t *A0, const uint8_t *A1, const int8_t *B, int64_t n, int32_t *sums) {
    __asm__ volatile("vpxor %%ymm0, %%ymm0, %%ymm0\n\t"
                     "vpxor %%ymm1, %%ymm1, %%ymm1\n\t"
                     "vpxor %%ymm2, %%ymm2, %%ymm2\n\t"
                     "vpxor %%ymm3, %%ymm3, %%ymm3\n\t"
                     "vpxor %%ymm4, %%ymm4, %%ymm4\n\t"
                     "vpxor %%ymm5, %%ymm5, %%ymm5\n\t"
                     "vpxor %%ymm6, %%ymm6, %%ymm6\n\t"
                     "vpxor %%ymm7, %%ymm7, %%ymm7\n\t"
                     "test %[n], %[n]\n\t"
                     "jz 2f\n"
                     "1:\n\t"
                     "vpbroadcastd (%[a0]), %%ymm8\n\t"
                     "vpbroadcastd (%[a1]), %%ymm9\n\t"
                     "vmovdqu (%[b]), %%ymm10\n\t"
                     "vmovdqu 32(%[b]), %%ymm11\n\t"
                     "vmovdqu 64(%[b]), %%ymm12\n\t"
                     "vmovdqu 96(%[b]), %%ymm13\n\t"
                     "vpdpbusd %%ymm10, %%ymm8, %%ymm0\n\t"
                     "vpdpbusd %%ymm10, %%ymm9, %%ymm4\n\t"
                     "vpdpbusd %%ymm11, %%ymm8, %%ymm1\n\t"
                     "vpdpbusd %%ymm11, %%ymm9, %%ymm5\n\t"
                     "vpdpbusd %%ymm12, %%ymm8, %%ymm2\n\t"
                     "vpdpbusd %%ymm12, %%ymm9, %%ymm6\n\t"
                     "vpdpbusd %%ymm13, %%ymm8, %%ymm3\n\t"
                     "vpdpbusd %%ymm13, %%ymm9, %%ymm7\n\t"
                     "add $4, %[a0]\n\t"
                     "add $4, %[a1]\n\t"
                     "add $128, %[b]\n\t"
                     "dec %[n]\n\t"
                     "jnz 1b\n"
                     "2:\n\t"
                     "vmovdqu %%ymm0, (%[o])\n\t"
                     "vmovdqu %%ymm1, 32(%[o])\n\t"
                     "vmovdqu %%ymm2, 64(%[o])\n\t"
                     "vmovdqu %%ymm3, 96(%[o])\n\t"
                     "vmovdqu %%ymm4, 128(%[o])\n\t"
                     "vmovdqu %%ymm5, 160(%[o])\n\t"
                     "vmovdqu %%ymm6, 192(%[o])\n\t"
                     "vmovdqu %%ymm7, 224(%[o])\n\t"
                     : [a0] "+r"(A0), [a1] "+r"(A1), [b] "+r"(B), [n] "+r"(n)
                     : [o] "r"(sums)
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                       "xmm11", "xmm12", "xmm13", "memory", "cc");
}

/* The one-rounding requantisation of a tile's sums in its registers (g8_rqf_ok says where it is the
 * definition's): v = sum + ct[j] + base[r] (int32, wrapping as g8_store's adds), then
 * fma(v, r_j, zy + 1.5 * 2^23), whose bits less those of 1.5 * 2^23 are round-half-even(v r_j + zy)
 * (rq_rows_ok says why), saturated to the bytes. */
typedef struct g8_rqf {
    const int32_t *ct;   /* the panel's 32 columns: bias less za colsum */
    const float *r;      /* the panel's scales (masked past nc) */
    const int32_t *base; /* the rows' */
    uint8_t *y;          /* row 0's first byte of the panel */
    int64_t ldy;
    float zm; /* zy + 1.5 * 2^23 */
    int nc;
    bool s8;
} g8_rqf;

/* Up to G8V_ROWS rows of A against a panel's 32 columns: each row's quad broadcast once to a zmm and
 * multiplied with both zmm of the panel's quad (columns 0-15, 16-31), 2 * rows sums (16 at 8 rows:
 * enough chains for vpdpbusd's latency at two a cycle), where the two-row panel above keeps 8 ymm
 * sums and loads B twice as often a product. Row r's K bytes are nseg runs of segq quads, run s at
 * rp[r] + soff[s] (one run at rp[r] for a plain A; a convolution's kernel rows read in place for
 * kn_qgemm8_taps). Then sums[r * 32 + j], or with f the bytes requantised from the registers. */
#define G8V_ROWS 8
#ifndef G8V_ASM
#define G8V_ASM 1
#endif
VNNI_TARGET static inline __attribute__((always_inline)) void g8v_rows_n(const int R, const uint8_t *const *rp,
                                                                        const int64_t *soff, int64_t nseg, int64_t segq,
                                                                        const int8_t *B, int32_t *sums, const g8_rqf *f) {
    __m512i c[G8V_ROWS][2];
    if (R == 8 && G8V_ASM && nseg > 0 && segq > 0) {
        /* (asm: one index register for the 8 rows' broadcasts, the runs' loop inside, the sums in
         * registers throughout; its parameters through memory, the GPRs all taken) */
        const struct {
            const uint8_t *const *rp;
            const int64_t *soff;
            int64_t nseg, n4;
            const int8_t *B;
        } prm = {rp, soff, nseg, 4 * segq, B};
#define G8V_ROW2(pa, pb, ca0, ca1, cb0, cb1)                                                                          \
    "vpbroadcastd (%%" pa ",%%rcx), %%zmm30\n\t"                                                                       \
    "vpbroadcastd (%%" pb ",%%rcx), %%zmm31\n\t"                                                                       \
    "vpdpbusd %%zmm28, %%zmm30, %[" ca0 "]\n\t"                                                                       \
    "vpdpbusd %%zmm29, %%zmm30, %[" ca1 "]\n\t"                                                                       \
    "vpdpbusd %%zmm28, %%zmm31, %[" cb0 "]\n\t"                                                                       \
    "vpdpbusd %%zmm29, %%zmm31, %[" cb1 "]\n\t"
#define G8V_PTR(reg, at) "mov " at "(%%rax), %%" reg "\n\tadd %%rcx, %%" reg "\n\t"
        __asm__ volatile("vpxord %[c00], %[c00], %[c00]\n\tvpxord %[c01], %[c01], %[c01]\n\t"
                         "vpxord %[c10], %[c10], %[c10]\n\tvpxord %[c11], %[c11], %[c11]\n\t"
                         "vpxord %[c20], %[c20], %[c20]\n\tvpxord %[c21], %[c21], %[c21]\n\t"
                         "vpxord %[c30], %[c30], %[c30]\n\tvpxord %[c31], %[c31], %[c31]\n\t"
                         "vpxord %[c40], %[c40], %[c40]\n\tvpxord %[c41], %[c41], %[c41]\n\t"
                         "vpxord %[c50], %[c50], %[c50]\n\tvpxord %[c51], %[c51], %[c51]\n\t"
                         "vpxord %[c60], %[c60], %[c60]\n\tvpxord %[c61], %[c61], %[c61]\n\t"
                         "vpxord %[c70], %[c70], %[c70]\n\tvpxord %[c71], %[c71], %[c71]\n\t"
                         "mov 8(%[prm]), %%rsi\n\t"
                         "mov 16(%[prm]), %%rdx\n\t"
                         "mov 32(%[prm]), %%rdi\n"
                         "2:\n\t"
                         "mov (%%rsi), %%rcx\n\t"
                         "add 24(%[prm]), %%rcx\n\t"
                         "mov (%[prm]), %%rax\n\t"
                         G8V_PTR("r8", "0") G8V_PTR("r9", "8") G8V_PTR("r10", "16") G8V_PTR("r11", "24")
                         G8V_PTR("r12", "32") G8V_PTR("r13", "40") G8V_PTR("r14", "48") G8V_PTR("r15", "56")
                         "mov 24(%[prm]), %%rcx\n\t"
                         "neg %%rcx\n"
                         "1:\n\t"
                         "vmovdqu64 (%%rdi), %%zmm28\n\t"
                         "vmovdqu64 64(%%rdi), %%zmm29\n\t"
                         G8V_ROW2("r8", "r9", "c00", "c01", "c10", "c11")
                         G8V_ROW2("r10", "r11", "c20", "c21", "c30", "c31")
                         G8V_ROW2("r12", "r13", "c40", "c41", "c50", "c51")
                         G8V_ROW2("r14", "r15", "c60", "c61", "c70", "c71")
                         "add $128, %%rdi\n\t"
                         "add $4, %%rcx\n\t"
                         "jnz 1b\n\t"
                         "add $8, %%rsi\n\t"
                         "dec %%rdx\n\t"
                         "jnz 2b\n\t"
                         : [c00] "=&v"(c[0][0]), [c01] "=&v"(c[0][1]), [c10] "=&v"(c[1][0]), [c11] "=&v"(c[1][1]),
                           [c20] "=&v"(c[2][0]), [c21] "=&v"(c[2][1]), [c30] "=&v"(c[3][0]), [c31] "=&v"(c[3][1]),
                           [c40] "=&v"(c[4][0]), [c41] "=&v"(c[4][1]), [c50] "=&v"(c[5][0]), [c51] "=&v"(c[5][1]),
                           [c60] "=&v"(c[6][0]), [c61] "=&v"(c[6][1]), [c70] "=&v"(c[7][0]), [c71] "=&v"(c[7][1])
                         : [prm] "r"(&prm)
                         : "rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
                           "xmm28", "xmm29", "xmm30", "xmm31", "cc", "memory");
#undef G8V_ROW2
#undef G8V_PTR
    } else {
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) c[r][0] = c[r][1] = _mm512_setzero_si512();
        for (int64_t sg = 0; sg < nseg; sg++) {
            const uint8_t *p[G8V_ROWS];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) p[r] = rp[r] + soff[sg];
            for (int64_t q = 0; q < segq; q++, B += 4 * G8_NC) {
                const __m512i b0 = _mm512_loadu_si512(B), b1 = _mm512_loadu_si512(B + 64);
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    int32_t w;
                    memcpy(&w, p[r] + 4 * q, sizeof w);
                    const __m512i a = _mm512_set1_epi32(w);
                    c[r][0] = _mm512_dpbusd_epi32(c[r][0], a, b0);
                    c[r][1] = _mm512_dpbusd_epi32(c[r][1], a, b1);
                }
            }
        }
    }
    if (!f) {
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            _mm512_storeu_si512(sums + r * G8_NC, c[r][0]);
            _mm512_storeu_si512(sums + r * G8_NC + 16, c[r][1]);
        }
        return;
    }
    const __mmask16 m0 = (__mmask16)(f->nc >= 16 ? 0xffff : (1u << f->nc) - 1);
    const __mmask16 m1 = (__mmask16)(f->nc >= 32 ? 0xffff : f->nc <= 16 ? 0 : (1u << (f->nc - 16)) - 1);
    const __m512i ct0 = _mm512_loadu_si512(f->ct), ct1 = _mm512_loadu_si512(f->ct + 16);
    const __m512 r0 = _mm512_maskz_loadu_ps(m0, f->r), r1 = _mm512_maskz_loadu_ps(m1, f->r + 16);
    const __m512 zm = _mm512_set1_ps(f->zm);
    const __m512i magic = _mm512_set1_epi32(0x4B400000), zero = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        const __m512i bv = _mm512_set1_epi32(f->base[r]);
        const __m512i a0 = _mm512_add_epi32(_mm512_add_epi32(c[r][0], ct0), bv);
        const __m512i a1 = _mm512_add_epi32(_mm512_add_epi32(c[r][1], ct1), bv);
        __m512i q0 = _mm512_sub_epi32(_mm512_castps_si512(_mm512_fmadd_ps(_mm512_cvtepi32_ps(a0), r0, zm)), magic);
        __m512i q1 = _mm512_sub_epi32(_mm512_castps_si512(_mm512_fmadd_ps(_mm512_cvtepi32_ps(a1), r1, zm)), magic);
        uint8_t *y = f->y + r * f->ldy;
        if (f->s8) {
            _mm_mask_storeu_epi8(y, m0, _mm512_cvtsepi32_epi8(q0));
            _mm_mask_storeu_epi8(y + 16, m1, _mm512_cvtsepi32_epi8(q1));
        } else {
            q0 = _mm512_max_epi32(q0, zero), q1 = _mm512_max_epi32(q1, zero);
            _mm_mask_storeu_epi8(y, m0, _mm512_cvtusepi32_epi8(q0));
            _mm_mask_storeu_epi8(y + 16, m1, _mm512_cvtusepi32_epi8(q1));
        }
    }
}
VNNI_TARGET static void g8v_rows(int rows, const uint8_t *const *rp, const int64_t *soff, int64_t nseg, int64_t segq,
                                 const int8_t *B, int32_t *sums, const g8_rqf *f) {
    switch (rows) {
    case 8: g8v_rows_n(8, rp, soff, nseg, segq, B, sums, f); break;
    case 7: g8v_rows_n(7, rp, soff, nseg, segq, B, sums, f); break;
    case 6: g8v_rows_n(6, rp, soff, nseg, segq, B, sums, f); break;
    case 5: g8v_rows_n(5, rp, soff, nseg, segq, B, sums, f); break;
    case 4: g8v_rows_n(4, rp, soff, nseg, segq, B, sums, f); break;
    case 3: g8v_rows_n(3, rp, soff, nseg, segq, B, sums, f); break;
    case 2: g8v_rows_n(2, rp, soff, nseg, segq, B, sums, f); break;
    default: g8v_rows_n(1, rp, soff, nseg, segq, B, sums, f); break;
    }
}
#endif

typedef struct g8_job {
    const g8_head *h;
    const uint8_t *a;
    int64_t lda, M, ldc;
    int32_t za, zbs;
    const int32_t *base; /* per row: K za zb' - zb' sum_k a */
    int32_t *c;
    const kn_qgemm8_out *fo;
    bool vnni; /* the g8v panels (either form) */
    int64_t i0, i1;  /* g8_range's rows */
    int64_t rb, rbr; /* g8_units: row blocks a panel, rows a block (even) */
    /* A's rows through kn_qgemm8_taps (row i's runs at rowp[i] + soff[s], nseg runs of segq
     * quads), or rowp NULL: a + i lda */
    const uint8_t *const *rowp;
    const int64_t *soff;
    int64_t nseg, segq;
    /* fo's rq_y with VNNI: bias less za colsum per column (NP * 32), and per panel whether the
     * one-rounding requantisation in the tile's registers is the definition's (g8_rqf) */
    const int32_t *rq_ct;
    const uint8_t *rq_fast;
    float rq_zm;
#if defined(__AVX2__)
    kn_rq8_k rqk; /* fo's rq_y: its constants */
#endif
} g8_job;

/* the first residual entry of panel p or after (entries are in panel order) */
static int64_t g8_res_from(const g8_head *h, const int32_t *res, int64_t p) {
    int64_t lo = 0, hi = h->nres < h->cap ? h->nres : h->cap;
    while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (res[3 * mid + 1] / G8_NC < p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

#if defined(__AVX2__)
/* 8 of a row's finished sums: s + base - za colsum (wrapping) */
static inline __m256i g8_sums8(const int32_t *s, __m256i bv, __m256i zv, const int32_t *colsum) {
    return _mm256_sub_epi32(_mm256_add_epi32(_mm256_loadu_si256((const __m256i *)s), bv),
                            _mm256_mullo_epi32(zv, _mm256_loadu_si256((const __m256i *)colsum)));
}
#endif

/* a row's finished panel: v = s + base - za colsum (+ its residuals, already in s), into C or
 * out += (float)v * (fs * sc[j]) as the float form asks */
static void g8_store(const g8_job *j, int64_t i, int64_t n0, int64_t nc, int32_t *s) {
    const int32_t *colsum = (const int32_t *)(j->h + 1) + n0;
    const int32_t b = j->base[i], za = j->za;
    int64_t q = 0;
    if (j->fo && j->fo->rq_y) { /* requantised: 8 values a step with their columns' scales */
        const kn_qgemm8_out *fo = j->fo;
        uint8_t *yo = fo->rq_y + i * fo->rq_ldy + n0;
        const float *rr = fo->rq_r + n0;
        const int32_t *bias = fo->rq_bias ? fo->rq_bias + n0 : NULL;
        int32_t v[G8_NC];
#if defined(__AVX2__)
        const __m256i bv = _mm256_set1_epi32(b), zv = _mm256_set1_epi32(za);
        for (; q + 8 <= nc; q += 8) {
            __m256i t = g8_sums8(s + q, bv, zv, colsum + q);
            if (bias) t = _mm256_add_epi32(t, _mm256_loadu_si256((const __m256i *)(bias + q)));
            _mm_storel_epi64((__m128i *)(yo + q), kn_rq8(&j->rqk, t, _mm256_loadu_ps(rr + q)));
        }
#endif
        for (int64_t e = q; e < nc; e++) /* (wrapping, as the vector adds) */
            v[e] = (int32_t)((uint32_t)s[e] + (uint32_t)b - (uint32_t)za * (uint32_t)colsum[e] + (bias ? (uint32_t)bias[e] : 0u));
        if (q < nc) kn_q_requant_cols(v + q, nc - q, rr + q, fo->rq_zy, fo->rq_s8, yo + q);
        return;
    }
    if (!j->fo || !j->fo->out) {
        int32_t *c = j->c + i * j->ldc + n0;
#if defined(__AVX2__)
        const __m256i bv = _mm256_set1_epi32(b), zv = _mm256_set1_epi32(za);
        for (; q + 8 <= nc; q += 8)
            _mm256_storeu_si256((__m256i *)(c + q), g8_sums8(s + q, bv, zv, colsum + q));
#endif
        for (; q < nc; q++) c[q] = s[q] + b - za * colsum[q];
        return;
    }
    const kn_qgemm8_out *fo = j->fo;
    float *o = fo->out + i * fo->ldo + n0;
    const float fs = fo->s, *sc = fo->sc_per_col ? fo->sc + n0 : NULL, sc0 = fo->sc[0];
#if defined(__AVX2__)
    /* (float)v * (fs * sc) then the add: the scalar form's two roundings, no fused multiply-add */
    const __m256i bv = _mm256_set1_epi32(b), zv = _mm256_set1_epi32(za);
    const __m256 fv = _mm256_set1_ps(fs), s0 = _mm256_set1_ps(sc0);
    for (; q + 8 <= nc; q += 8) {
        const __m256i v = g8_sums8(s + q, bv, zv, colsum + q);
        const __m256 m = _mm256_mul_ps(fv, sc ? _mm256_loadu_ps(sc + q) : s0);
        _mm256_storeu_ps(o + q, _mm256_add_ps(_mm256_loadu_ps(o + q), _mm256_mul_ps(_mm256_cvtepi32_ps(v), m)));
    }
#endif
    for (; q < nc; q++) {
        const int32_t v = s[q] + b - za * colsum[q];
        o[q] += (float)v * (fs * (sc ? sc[q] : sc0));
    }
}

#if defined(KN_QGEMM_VNNI)
/* g8_store's requantised form for rows [i, i + rows) of a panel (j's za: the VNNI sums of a b in
 * either form), 16 values a step in zmm: the columns' part of each sum (bias less za colsum) made
 * once for the rows, then per row kn_rq8's float form on 16 lanes (its operations, so its bytes)
 * with the same test for lanes near a tie, where kn_rq8 itself takes the vector, half by half. */
VNNI_TARGET static void g8v_store_rq(const g8_job *j, int rows, int64_t i, int64_t n0, int64_t nc, const int32_t *s) {
    const kn_qgemm8_out *fo = j->fo;
    const int32_t *ct = j->rq_ct + n0;
    const kn_rq8_k *k = &j->rqk;
    const __m512 lo = _mm512_set1_ps(k->s8 ? -128.0f : 0.0f), hi = _mm512_set1_ps(k->s8 ? 127.0f : 255.0f);
    const __m512 z = _mm512_set1_ps(k->fast ? (float)k->zy : 0.0f), nearv = _mm512_set1_ps(KN_RQ_NEAR_TIE);
    for (int h = 0; h < 2 && h * 16 < nc; h++) {
        const int w = (int)(nc - h * 16 < 16 ? nc - h * 16 : 16);
        const __mmask16 m = (__mmask16)(w == 16 ? 0xffff : (1u << w) - 1);
        const __m512 r = _mm512_maskz_loadu_ps(m, fo->rq_r + n0 + h * 16);
        const __m512i cv = _mm512_loadu_si512(ct + h * 16);
        for (int e = 0; e < rows; e++) {
            const __m512i a = _mm512_add_epi32(_mm512_add_epi32(_mm512_loadu_si512(s + e * G8_NC + h * 16), cv),
                                               _mm512_set1_epi32(j->base[i + e]));
            uint8_t *yo = fo->rq_y + (i + e) * fo->rq_ldy + n0 + h * 16;
            __m128i b;
            bool done = false;
            if (k->fast) {
                const __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), r, z);
                const __m512 tc = _mm512_min_ps(hi, _mm512_max_ps(lo, t));
                const __m512 f = _mm512_sub_ps(tc, _mm512_roundscale_ps(tc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                if (__builtin_expect(_mm512_cmp_ps_mask(_mm512_abs_ps(f), nearv, _CMP_NLT_UQ) == 0, 1)) {
                    const __m512i qv = _mm512_cvtps_epi32(tc); /* in [lo, hi]: the narrowing is exact */
                    b = k->s8 ? _mm512_cvtsepi32_epi8(qv) : _mm512_cvtusepi32_epi8(qv);
                    done = true;
                }
            }
            if (!done)
                b = _mm_unpacklo_epi64(kn_rq8(k, _mm512_castsi512_si256(a), _mm512_castps512_ps256(r)),
                                       kn_rq8(k, _mm512_extracti64x4_epi64(a, 1),
                                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r), 1))));
            _mm_mask_storeu_epi8(yo, m, b);
        }
    }
}
#endif

/* panels [p0, p1) for all rows, two at a time (the panel stays in L1 over them) */
typedef void (*g8_one_fn)(const uint8_t *A, const int8_t *B, int64_t n, int32_t *sums);
typedef void (*g8_two_fn)(const uint8_t *A0, const uint8_t *A1, const int8_t *B, int64_t n, int32_t *sums);

/* The raw sums of rows [i, i + rows) against panel Bp into s (32 a row), or with f (VNNI, no
 * quad past K) requantised from the tile's registers: rows <= 2 of a plain A through one or two,
 * more (up to G8V_ROWS), or any through taps, by the VNNI tile; the last quad of a K off the quads
 * from copies padded with pad (B's padding is zero, so any pad gives the same sums) */
static void g8_sums(const g8_job *j, g8_one_fn one, g8_two_fn two, const int8_t *Bp, int64_t i, int rows, uint8_t pad,
                    int32_t *s, const void *f) {
    const int64_t K = j->h->K, full = K / 4, KQ = j->h->KQ;
#if defined(KN_QGEMM_VNNI)
    if (j->rowp) { /* (runs of whole quads: no tail) */
        g8v_rows(rows, j->rowp + i, j->soff, j->nseg, j->segq, Bp, s, f);
        return;
    }
#endif
    const uint8_t *a0 = j->a + i * j->lda;
#if defined(KN_QGEMM_VNNI)
    if (rows > 2) {
        const uint8_t *rp[G8V_ROWS];
        const int64_t zero = 0;
        for (int r = 0; r < rows; r++) rp[r] = a0 + r * j->lda;
        if (full > 0) g8v_rows(rows, rp, &zero, 1, full, Bp, s, full < KQ ? NULL : f);
        else memset(s, 0, sizeof(int32_t) * (size_t)(rows * G8_NC));
        if (full < KQ) {
            uint8_t tl[G8V_ROWS][4];
            int32_t t[G8V_ROWS * G8_NC];
            memset(tl, pad, sizeof tl);
            for (int r = 0; r < rows; r++) {
                for (int64_t k = full * 4; k < K; k++) tl[r][k - full * 4] = a0[r * j->lda + k];
                rp[r] = tl[r];
            }
            g8v_rows(rows, rp, &zero, 1, 1, Bp + full * 4 * G8_NC, t, NULL);
            for (int e = 0; e < rows * G8_NC; e++) s[e] += t[e];
        }
        return;
    }
#endif
    (void)f;
    const uint8_t *a1 = rows == 2 ? a0 + j->lda : a0;
    if (full > 0) {
        if (rows == 2) two(a0, a1, Bp, full, s);
        else one(a0, Bp, full, s);
    } else {
        for (int e = 0; e < rows * G8_NC; e++) s[e] = 0;
    }
    if (full < KQ) {
        uint8_t tl[2][4];
        int32_t t[2 * G8_NC];
        memset(tl, pad, sizeof tl);
        for (int64_t k = full * 4; k < K; k++) tl[0][k - full * 4] = a0[k], tl[1][k - full * 4] = a1[k];
        if (rows == 2) two(tl[0], tl[1], Bp + full * 4 * G8_NC, 1, t);
        else one(tl[0], Bp + full * 4 * G8_NC, 1, t);
        for (int e = 0; e < rows * G8_NC; e++) s[e] += t[e];
    }
}

#if !defined(KN_QGEMM_VNNI)
#define G8V_ROWS 2
#endif

/* panel p's one-rounding requantisation in the tile (g8_rqf), or NULL */
static const void *g8_rqf_for(const g8_job *j, int64_t p, int64_t n0, int64_t nc, void *buf) {
#if defined(KN_QGEMM_VNNI)
    if (!j->vnni || !j->fo || !j->fo->rq_y || !j->rq_fast || !j->rq_fast[p] || j->h->K % 4) return NULL;
    g8_rqf *f = buf;
    *f = (g8_rqf){.ct = j->rq_ct + n0, .r = j->fo->rq_r + n0, .ldy = j->fo->rq_ldy, .zm = j->rq_zm, .nc = (int)nc,
                  .s8 = j->fo->rq_s8};
    return f;
#else
    (void)j, (void)p, (void)n0, (void)nc, (void)buf;
    return NULL;
#endif
}

/* f's rows from i on */
static inline const void *g8_rqf_at(const g8_job *j, const void *f, int64_t i, int64_t n0, int rows) {
#if defined(KN_QGEMM_VNNI)
    if (!f || (rows <= 2 && !j->rowp)) return NULL;
    g8_rqf *g = (g8_rqf *)f;
    g->base = j->base + i, g->y = j->fo->rq_y + i * j->fo->rq_ldy + n0;
    return g;
#else
    (void)j, (void)i, (void)n0, (void)rows;
    return f;
#endif
}

static void g8_range(void *arg, int64_t p0, int64_t p1) {
    const g8_job *j = arg;
    const g8_head *h = j->h;
    const int64_t N = h->N, KQ = h->KQ;
    const int32_t *res = (const int32_t *)(h + 1) + h->NP * G8_NC;
    const int8_t *B = (const int8_t *)h + h->b_off;
    const int64_t nres = h->nres < h->cap ? h->nres : h->cap;
    /* rows a step: the VNNI tile's (B's panel read once for them), else two */
    const int step = j->vnni ? G8V_ROWS : 2;
    g8_one_fn one = g8_panel;
    g8_two_fn two = g8_panel2;
#if defined(KN_QGEMM_VNNI)
    if (j->vnni) one = g8v_panel, two = g8v_panel2;
#endif
    int32_t s[G8V_ROWS * G8_NC];
    int64_t fbuf[16]; /* (a g8_rqf) */
    if (h->usable == 2) {
        /* the sign form: sums of (a - 128) b, stored as v = s + base - (za - 128) colsum (with
         * VNNI sums of a b as the residual form's, stored with za) */
        g8_job js = *j;
        js.za = j->za - 128;
        if (!j->vnni) one = g8s_panel, two = g8s_panel2;
        else js.za = j->za;
        for (int64_t p = p0; p < p1; p++) {
            const int8_t *Bp = B + p * KQ * 4 * G8_NC;
            const int64_t n0 = p * G8_NC, nc = N - n0 < G8_NC ? N - n0 : G8_NC;
            const void *f = g8_rqf_for(j, p, n0, nc, fbuf);
            for (int64_t i = j->i0; i < j->i1; i += step) {
                const int rows = (int)(j->i1 - i >= step ? step : j->i1 - i);
                const void *fi = g8_rqf_at(j, f, i, n0, rows);
                g8_sums(j, one, two, Bp, i, rows, j->vnni ? 0 : 128, s, fi);
                if (fi) continue;
#if defined(KN_QGEMM_VNNI)
                if (j->vnni && j->fo && j->fo->rq_y) {
                    g8v_store_rq(&js, rows, i, n0, nc, s);
                    continue;
                }
#endif
                for (int r = 0; r < rows; r++) g8_store(&js, i + r, n0, nc, s + r * G8_NC);
            }
            if (j->fo && j->fo->done) j->fo->done(j->fo->done_ctx, j->i0, j->i1, n0, nc);
        }
        return;
    }
    int64_t r0 = g8_res_from(h, res, p0);
    for (int64_t p = p0; p < p1; p++) {
        const int8_t *Bp = B + p * KQ * 4 * G8_NC;
        const int64_t n0 = p * G8_NC, nc = N - n0 < G8_NC ? N - n0 : G8_NC;
        int64_t r1 = r0;
        while (r1 < nres && res[3 * r1 + 1] < n0 + G8_NC) r1++;
        /* (the residuals go into the sums before the requantisation) */
        const void *f = r1 == r0 ? g8_rqf_for(j, p, n0, nc, fbuf) : NULL;
        for (int64_t i = j->i0; i < j->i1; i += step) {
            const int rows = (int)(j->i1 - i >= step ? step : j->i1 - i);
            const uint8_t *a0 = j->rowp ? NULL : j->a + i * j->lda;
            const void *fi = g8_rqf_at(j, f, i, n0, rows);
            g8_sums(j, one, two, Bp, i, rows, 0, s, fi);
            if (fi) continue;
            /* the panel's residuals, the rows in one pass over the list (an entry read once; none
             * with taps: kn_qgemm8_run gathers such rows first) */
            if (rows == 2) {
                const uint8_t *a1 = a0 + j->lda;
                for (const int32_t *re = res + 3 * r0, *end = res + 3 * r1; re < end; re += 3) {
                    const int64_t k = re[0], col = re[1] - n0;
                    s[col] += (int32_t)a0[k] * re[2];
                    s[G8_NC + col] += (int32_t)a1[k] * re[2];
                }
            } else {
                for (const int32_t *re = res + 3 * r0, *end = res + 3 * r1; re < end; re += 3)
                    for (int r = 0; r < rows; r++) s[r * G8_NC + re[1] - n0] += (int32_t)a0[r * j->lda + re[0]] * re[2];
            }
#if defined(KN_QGEMM_VNNI)
            if (j->vnni && j->fo && j->fo->rq_y) {
                g8v_store_rq(j, rows, i, n0, nc, s);
                continue;
            }
#endif
            for (int r = 0; r < rows; r++) g8_store(j, i + r, n0, nc, s + r * G8_NC);
        }
        if (j->fo && j->fo->done) j->fo->done(j->fo->done_ctx, j->i0, j->i1, n0, nc);
        r0 = r1;
    }
}

/* units [u0, u1): unit u is panel u / rb's rows [rbr (u % rb), rbr (u % rb + 1)) */
static void g8_units(void *arg, int64_t u0, int64_t u1) {
    const g8_job *j = arg;
    for (int64_t u = u0; u < u1; u++) {
        g8_job b = *j;
        b.i0 = u % j->rb * j->rbr;
        b.i1 = b.i0 + j->rbr < j->M ? b.i0 + j->rbr : j->M;
        if (b.i0 < b.i1) g8_range(&b, u / j->rb, u / j->rb + 1);
    }
}

static bool g8_vnni(void) {
#if defined(KN_QGEMM_VNNI)
    return kn_cpu_has_vnni() && g8v_on();
#else
    return false; /* (a build without the g8v panels: the AVX2 forms on any CPU) */
#endif
}

bool kn_qgemm8_taps_direct(const void *packed, const kn_qgemm8_taps *t) {
    const g8_head *h = packed;
    return g8_vnni() && (h->usable == 2 || h->nres == 0) && t->seg_len % 4 == 0 && t->nseg * t->seg_len == h->K &&
           t->seg_len > 0;
}

/* row i's byte k through taps */
static inline const uint8_t *g8_tap_row(const kn_qgemm8_taps *t, int64_t i) {
    const int64_t p = t->p0 + i;
    return t->x + p / t->ow * t->row_step + p % t->ow * t->col_step;
}

/* Whether v r + zy (v = the sum of a column j's K products (a - za)(b - zb) plus its bias) rounds
 * as the definition's double does through one float rounding (rq_rows_ok's argument, per column:
 * |v| <= amax (sum_k |b_s| + K |zbs|) + |bias|) for all of panel p's columns */
static bool g8_rq_fast_panel(const g8_head *h, int64_t p, int32_t za, int32_t zbs, const kn_qgemm8_out *fo) {
    const int32_t *absum = (const int32_t *)(h + 1) + h->NP * G8_NC + 3 * h->cap;
    const double zy = fo->rq_zy, amax = za > 255 - za ? za : 255 - za;
    if (!(zy == floor(zy) && fabs(zy) <= 256.0) || za < 0 || za > 255) return false;
    for (int64_t j = p * G8_NC; j < h->N && j < (p + 1) * G8_NC; j++) {
        const double bound = amax * ((double)(uint32_t)absum[j] + (double)h->K * fabs((double)zbs)) +
                             fabs((double)(fo->rq_bias ? fo->rq_bias[j] : 0));
        const double r = fo->rq_r[j], X = fabs(r) * bound + fabs(zy);
        /* r = f 2^e, f in [0.5, 1) (frexp's e: the float's biased exponent less 126), its last bit
         * at 2^(e - 24) or above: X < 2^(53 + min(0, e - 24)), that power made from its bits */
        uint32_t rb;
        memcpy(&rb, &fo->rq_r[j], sizeof rb);
        const int ex = (int)((rb >> 23) & 0xffu), k = 53 + (ex - 150 < 0 ? ex - 150 : 0);
        const uint64_t lb = (uint64_t)(1023 + k) << 52;
        double lim;
        memcpy(&lim, &lb, sizeof lim);
        if (!(ex > 0 && ex < 255 && bound < 16777216.0 && X < 4194304.0 - 2.0 && X < lim)) return false;
    }
    return true;
}

kiln_status kn_qgemm8_run(kn_threadpool *pool, const void *packed, const uint8_t *a, int64_t lda, int64_t M, int32_t za,
                          int32_t zb, bool b_s8, int32_t *c, int64_t ldc, const kn_qgemm8_out *fo) {
    const g8_head *h = packed;
    const int64_t K = h->K;
    const bool vnni = g8_vnni();
    const kn_qgemm8_taps *t = fo ? fo->taps : NULL;
    uint8_t *gather = NULL;
    const uint8_t **rowp = NULL;
    if (t && M > 0 && !kn_qgemm8_taps_direct(packed, t)) {
        /* rows the tile cannot read in place: gathered, then as any A */
        gather = malloc((size_t)(M * K));
        if (!gather) return KILN_ERR_OUT_OF_MEMORY;
        for (int64_t i = 0; i < M; i++) {
            const uint8_t *src = g8_tap_row(t, i);
            for (int64_t sg = 0; sg < t->nseg; sg++) memcpy(gather + i * K + sg * t->seg_len, src + t->seg_off[sg], (size_t)t->seg_len);
        }
        a = gather, lda = K, t = NULL;
    } else if (t && M > 0) {
        if (!(rowp = malloc(sizeof(*rowp) * (size_t)M))) return KILN_ERR_OUT_OF_MEMORY;
        int64_t p = t->p0, oh = p / t->ow, ow = p % t->ow;
        for (int64_t i = 0; i < M; i++) {
            rowp[i] = t->x + oh * t->row_step + ow * t->col_step;
            if (++ow == t->ow) ow = 0, oh++;
        }
    }
    /* b - zb = b_s - zb' with b_s the packed value (b - 128 for uint8 weights) */
    const int32_t zbs = b_s8 ? zb : zb - 128;
    int32_t one, *base = M > 1 ? malloc(sizeof(int32_t) * (size_t)M) : &one;
    /* fo's rq_y with VNNI: the columns' bias less za colsum, and the panels' one-rounding flags */
    const bool rqv = vnni && fo && fo->rq_y;
    int32_t *rq_ct = rqv ? kn_aligned_alloc(64, sizeof(int32_t) * (size_t)(h->NP * G8_NC)) : NULL;
    uint8_t *rq_fast = rqv ? malloc((size_t)h->NP) : NULL;
    if (!base || (rqv && (!rq_ct || !rq_fast))) {
        if (base != &one) free(base);
        free(gather), free(rowp), free(rq_ct), free(rq_fast);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    /* base is 0 for every row where the packed weights' zero point is (int8 weights, zero point
     * 0: the quantisers' symmetric form): no pass over A's rows then (1.6% of a 3x3 QLinearConv's
     * time by perf, 1x128x28x28) */
    for (int64_t i = 0; i < M && !zbs; i++) base[i] = 0;
    for (int64_t i = 0; i < M && zbs; i++) {
        int32_t sa = 0;
        for (int64_t sg = 0; sg < (rowp ? t->nseg : 1); sg++) {
            const uint8_t *ai = rowp ? rowp[i] + t->seg_off[sg] : a + i * lda;
            const int64_t n = rowp ? t->seg_len : K;
            int64_t k = 0;
#if defined(__AVX2__)
            /* vpsadbw against zero: the bytes' sums per 8 in 64-bit lanes */
            __m256i sv = _mm256_setzero_si256();
            for (; k + 32 <= n; k += 32)
                sv = _mm256_add_epi64(sv, _mm256_sad_epu8(_mm256_loadu_si256((const __m256i *)(ai + k)), _mm256_setzero_si256()));
            const __m128i hs = _mm_add_epi64(_mm256_castsi256_si128(sv), _mm256_extracti128_si256(sv, 1));
            sa += (int32_t)(_mm_cvtsi128_si64(hs) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(hs, hs)));
#endif
            for (; k < n; k++) sa += ai[k];
        }
        base[i] = (int32_t)K * za * zbs - zbs * sa;
    }
    g8_job j = {h, a, lda, M, ldc, za, zbs, base, c, fo, vnni, 0, M, 1, M};
    if (rowp) {
        j.rowp = rowp, j.soff = t->seg_off, j.nseg = t->nseg, j.segq = t->seg_len / 4;
        j.a = NULL, j.lda = 0;
    }
    if (rqv) {
        const int32_t *colsum = (const int32_t *)(h + 1);
        for (int64_t q = 0; q < h->NP * G8_NC; q++) /* (wrapping, as g8_store's adds) */
            rq_ct[q] = q < h->N ? (int32_t)((fo->rq_bias ? (uint32_t)fo->rq_bias[q] : 0u) - (uint32_t)za * (uint32_t)colsum[q]) : 0;
        for (int64_t p = 0; p < h->NP; p++) rq_fast[p] = g8_rq_fast_panel(h, p, za, zbs, fo);
        j.rq_ct = rq_ct, j.rq_fast = rq_fast, j.rq_zm = (float)(fo->rq_zy + 12582912.0);
    }
#if defined(__AVX2__)
    if (fo && fo->rq_y) j.rqk = kn_rq8_setup(fo->rq_zy, fo->rq_s8);
#endif
    const double work = (double)M * (double)h->N * (double)K;
    /* large pools: without VNNI smaller chunks than the tiles' (~4-5 instructions per 32 products,
     * 512 x 128 one row ~1.5-3 us: four chunks of a panel); with it the tiles' rule (g8v_panel:
     * ~1.25 per 32, the same row ~0.5 us, less than a 16-thread pass costs) */
    const int64_t useful = h->NP > 1 ? threads_for(pool, work, 4e5, 2e5, vnni ? 2e5 : 6e4, vnni ? 3e4 : 1.6e4) : 1;
    if (useful > 1) {
        /* a few panels: each panel's rows in blocks too (up to 4, of 16 rows or more; the panel is
         * read from L2 again for every two rows anyway), so that a thread late to the pass (a
         * busy 2-core VM) leaves the other a smaller last unit to wait for than a whole panel (a
         * quarter of 1x128x14x14 k3's product at 2 threads) */
        j.rb = h->NP >= 4 * useful ? 1 : M / 16 < 1 ? 1 : M / 16 > 4 ? 4 : M / 16;
        j.rbr = ((M + j.rb - 1) / j.rb + 7) / 8 * 8; /* (even for g8_range; 8 for done's i0) */
        const int64_t units = h->NP * j.rb;
        kn_parallel_for(pool, units, useful >= kn_threadpool_size(pool) ? 1 : (units + useful - 1) / useful, g8_units, &j);
    } else g8_range(&j, 0, h->NP);
    if (base != &one) free(base);
    free(gather), free(rowp), free(rq_ct), free(rq_fast);
    return KILN_OK;
}

void kn_qgemv8_run(const void *packed, const uint8_t *a, int32_t za, int32_t zb, bool b_s8, int32_t *c) {
    kn_qgemm8_run(NULL, packed, a, 0, 1, za, zb, b_s8, c, 0, NULL);
}

void kn_q_int32_values(const kn_tensor *t, int64_t n, int32_t *out) {
    switch (t->dtype) {
    case KILN_DTYPE_INT8:
        for (int64_t i = 0; i < n; i++) out[i] = ((const int8_t *)t->data)[i];
        break;
    case KILN_DTYPE_UINT8:
        for (int64_t i = 0; i < n; i++) out[i] = ((const uint8_t *)t->data)[i];
        break;
    case KILN_DTYPE_INT32:
        memcpy(out, t->data, sizeof(int32_t) * (size_t)n);
        break;
    default:
        for (int64_t i = 0; i < n; i++) out[i] = (int32_t)kn_tensor_get_i64(t, i);
    }
}

/* Exact 8-bit integer matrix products for the CPU backend: C (int32) = (A - za) x (B - zb), for
 * MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv and the com.microsoft quantised operators.
 *
 * A value less its zero point lies in [-255, 255] and fits int16: A is packed as int16 pairs along
 * K (its zero point subtracted), and B keeps its raw 8-bit values, widened to int16 in registers,
 * so AVX2's vpmaddwd multiplies and sums pairs into int32 exactly (|a0 b0 + a1 b1| <= 130050),
 * 16 products an instruction against the float FMA's 8. B's zero point comes out afterwards:
 * sum_k a'_k (b_k - zb) = sum_k a'_k b_k - zb * sum_k a'_k, with A's row sums kept beside its
 * panels. B (the weights, mostly) thus streams at one byte an element, as the model stores it:
 * a one-row product (an RNN step, a decoder's token) is bound by those bytes. The 8-bit forms
 * (vpmaddubsw, u8 x s8) do twice as many products an instruction but saturate their int16 pair
 * sums at 32767: exact only where each pair of the signed operand has |s0| + |s1| <= 128 (then
 * |u0 s0 + u1 s1| <= 255 * 128 = 32640 for any bytes u), which a model's weights need not meet.
 * So the byte forms below are taken only where that is checked:
 *  - QB_SIGNED: A's pairs less their zero points meet it (weights as A: a convolution's). A's
 *    bytes a' are the signed operand, B's bytes (int8 ones plus 128, the 128 taken out through
 *    A's row sums as a zero point is) the unsigned one;
 *  - QB_UNSIGNED: A's do not (activations as A: MatMulInteger's); A's bytes u = a (or a + 128) are
 *    the unsigned operand, B's b - zb[j] the signed one where a block of B's columns meets it
 *    (checked as the block is packed; the int16 pairs for the block where not), with
 *    sum_k a'_k (b_k - zb_j) = sum_k u_k (b_k - zb_j) + c_i sum_k (b_k - zb_j), c_i = a' - u.
 * Both: vpmaddubsw, vpmaddwd against ones, vpaddd; on Zen 3 ~0.8x the int16 tile's time (both
 * then at two integer multiplies a cycle). Not for products of one or two rows (the one-row tile's
 * form). With AVX-512 VNNI (packed on a CPU that has it) the byte form is QB_VNNI instead, for any
 * A and any M: vpdpbusd's u8 x s8 quads sum into int32 without int16 pair sums, so no bound is
 * needed. A's bytes are the signed operand, s = a (int8) or a - 128 (uint8), with d = a' - s per
 * row (-z or 128 - z) in c's place; B's bytes the unsigned one (int8 ones plus 128, the 128 taken
 * out through A's row sums as a zero point is); C = S + d_i U_j - (zb_j + 128?) asum'_i with U_j
 * B's column sums, made per block of columns only where some d is nonzero (a symmetric int8 or a
 * zero-point-128 uint8 A has none).
 *
 * Packed layouts (KP = ceil(K / 2) pairs; an odd K's last pair has a 0 high half):
 *  - A in panels of KN_QGEMM_MR rows: panel p, pair kp holds MR int32 words, row r's pair
 *    (a'[r][2kp], a'[r][2kp+1]) as two int16 (low, high), a' = a - za; rows past M are 0. After
 *    all panels, MR int32 row sums of a' per panel;
 *  - B in panels of KN_QGEMM_NR columns of raw bytes: panel p, pair kp holds 2 NR bytes, column
 *    j's pair (b[2kp][j], b[2kp+1][j]) at bytes 2j and 2j + 1; columns past N are 0;
 *  - after A's row sums, its byte form: 4 words (a check of M and K, the form: QB_SIGNED or
 *    QB_UNSIGNED), then per panel KQ = ceil(K / 4) quads of MR words, row r's bytes for k = 4q ..
 *    4q + 3 in word r (0 past K and past M), then per panel MR words of c (QB_UNSIGNED). B's
 *    panels are turned into quads (column j's four bytes at 4j, columns 0-7 then 8-15, 64 bytes
 *    a quad) a block of columns at a time as kn_qgemm_run goes;
 *  - last, per row (MR a panel, 0 past M) sum_k |a'_ik| as int32: the bound the fused
 *    requantisation (rq_y) checks per call, made once with the packing. */
#ifndef KN_CPU_QGEMM_H
#define KN_CPU_QGEMM_H

#include "kiln.h"
#include "ir/tensor.h"
#include "util/threadpool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KN_QGEMM_MR 6
#define KN_QGEMM_NR 16

/* int32 words of packed A (M x K, row sums included) and bytes of packed B (K x N) */
size_t kn_qgemm_a_words(int64_t M, int64_t K);
size_t kn_qgemm_b_bytes(int64_t N, int64_t K);

/* Packs A, M x K 8-bit values (int8 when is_s8, else uint8), element (i, k) at a[i * rs + k * cs]
 * (rs = lda, cs = 1 for a row-major A; rs = 1, cs = lda for its transpose), less its zero point:
 * zp_rows[i] for row i when zp_rows is set, else zp. */
void kn_qgemm_pack_a8(const void *a, bool is_s8, int64_t rs, int64_t cs, int64_t M, int64_t K, const int32_t *zp_rows,
                      int32_t zp, int32_t *dst);
/* Packs columns [n0, n0 + nc) of B, K x N 8-bit values with element (k, j) at b[k * rs + j * cs],
 * as they are: ceil(nc / NR) panels into dst. */
void kn_qgemm_pack_b8(const void *b, int64_t rs, int64_t cs, int64_t K, int64_t n0, int64_t nc, uint8_t *dst);

/* A producer of packed B (a convolution's im2col): columns [n0, n0 + nc) as ceil(nc / NR)
 * panels of all K into dst; n0 is a multiple of NR. Called from the pool's threads. */
typedef void (*kn_qgemm_pack_b_fn)(const void *ctx, int64_t n0, int64_t nc, uint8_t *dst);

typedef struct kn_qgemm {
    int64_t M, N, K;
    const int32_t *a; /* packed A */
    const uint8_t *b; /* packed B (all of it), or NULL: pack_b makes each block of columns */
    kn_qgemm_pack_b_fn pack_b;
    const void *pack_ctx;
    bool b_signed;           /* B's bytes are int8 (else uint8) */
    const int32_t *zb_cols;  /* B's zero point per column (N of them), or NULL: zb for all */
    int32_t zb;
    int32_t *c; /* M x N, row stride ldc */
    int64_t ldc;
    bool accumulate; /* C += the product instead of C = it */
    /* or NULL: called (from the pool's threads, on disjoint blocks) as soon as rows [m0, m1) of
     * columns [n0, n0 + nc) of C are final, while they are in cache (QLinearConv requantises them
     * there instead of in a pass over all of C after) */
    void (*rows_done)(const void *ctx, int64_t m0, int64_t m1, int64_t n0, int64_t nc);
    const void *done_ctx;
    /* or, where rq_y is set and the AVX2 tiles or the VNNI byte form run (not VNNI's int16 pairs:
     * an A packed without VNNI run on a VNNI CPU), K within one pass of KN_QGEMM_KP_BLOCK
     * pairs, zb_cols NULL, accumulate false: C is not written and rows_done not called; each sum
     * plus rq_bias[i] (or none) goes from the tile's registers straight to y[i * rq_ldy + j] =
     * saturate(round((double)v * rq_r[i] + rq_zy)) in int8 when rq_s8 else uint8, through
     * a single rounding where a row's sums are bounded (qgemm.c's rq_rows_ok), else qrequant.h's
     * float form with its double fallback: the bytes of kn_q_requant. Elsewhere C and rows_done
     * as above, so a caller sets both. (QLinearConv 1x16x112x112 -> 32 1x1, 1 thread on Zen 3:
     * kn_q_requant and the bias pass were 36% of its time by perf; fused, 0.81x the time.) */
    uint8_t *rq_y;
    int64_t rq_ldy;
    const float *rq_r;
    const int32_t *rq_bias;
    double rq_zy;
    bool rq_s8;
} kn_qgemm;

/* pairs of K per pass over C */
#define KN_QGEMM_KP_BLOCK 256

/* Runs the product on the pool (NULL: the caller's thread). KILN_ERR_OUT_OF_MEMORY when a
 * thread's packing buffer cannot be had (C then partly written). Products of up to 4 columns (2
 * with VNNI; a convolution's plane of one position or a few) take a form of their own from A's
 * pairs (no panels of 16 columns), writing C and calling rows_done once per block of rows; the
 * fused requantisation (rq_y) keeps the tiles. */
kiln_status kn_qgemm_run(kn_threadpool *pool, const kn_qgemm *g);

/* One row, on the caller's thread: c[j] = sum_k a'_k (b[k][j] - zb) for j < N, with a' given as
 * ceil(K / 2) int16 pair words (a'[2kp] low, a'[2kp + 1] high; an odd K's last high half 0) and
 * asum = sum_k a'_k; b all N columns packed by kn_qgemm_pack_b8. */
void kn_qgemv_run(const int32_t *a, int32_t asum, const uint8_t *b, bool b_signed, int32_t zb, int64_t N, int64_t K,
                  int32_t *c);

/* One row of uint8 A (a quantised activation) times 8-bit weights B (K x N, row-major, int8
 * when b_s8 else uint8), exact, through vpmaddubsw's u8 x s8 pairs at twice vpmaddwd's products
 * an instruction: a pair of weights whose |b0| + |b1| passes 128 could saturate its int16 sum
 * (255 * 128 = 32640 does not), so such a pair keeps b0 and its b1 goes to a residual list
 * applied after (weights of real models: 0-0.1% of pairs). The column sums take out A's zero
 * point; uint8 weights are packed less 128. kn_qgemv8_bytes: the packed size (the list holds up
 * to 64 + K*N/256 entries); kn_qgemv8_usable: false when the weights have more (use
 * kn_qgemm then). kn_qgemv8_run: c[j] = sum_k (a[k] - za) (b[k][j] - zb), a K bytes. */
size_t kn_qgemv8_bytes(int64_t K, int64_t N);
/* Whether B allows either form below (what kn_qgemv8_usable says after packing), from B alone */
bool kn_qgemv8_fits(const void *b, bool b_s8, int64_t K, int64_t N);

/* Weights with more over-bound pairs than the list holds (full-range ones) but no value -128 as
 * packed (symmetric int8 quantisation: [-127, 127]) are packed in the sign form instead: every
 * pair kept, each product formed as |a - 128| times sign(a - 128) b (vpsignb; a pair's int16 sum
 * at most 2 * 128 * 127, no saturation), 128 colsum added back. The same exact sums; on Zen 3
 * two rows take ~0.8x kn_qgemm's time, one row about kn_qgemv_run's, and from three rows on it is
 * no faster than kn_qgemm's 6-row tile (both ~4 vector operations per 32 products), so it is
 * meant for products of one or two rows. kn_qgemv8_fits and kn_qgemv8_usable stay about the
 * residual form alone; kn_qgemv8_form: 1 the residual form, 2 the sign form, 0 neither (use
 * kn_qgemm); kn_qgemm8_run runs either. With AVX-512 VNNI (KILN_QGEMM8_VNNI=0 turns it off)
 * kn_qgemm8_run takes either form's panels as they are through vpdpbusd (u8 x s8 quads into int32,
 * no saturation), 8 rows a step against a panel's 32 columns (16 zmm sums), one and two rows by
 * their own ymm panels. */
void kn_qgemv8_pack(const void *b, bool b_s8, int64_t K, int64_t N, void *dst);
bool kn_qgemv8_usable(const void *packed);
int kn_qgemv8_form(const void *packed);
/* The residual form's entries (0 for the sign form): each costs a scalar multiply-add per row */
int64_t kn_qgemv8_residuals(const void *packed);
/* The form kn_qgemv8_pack will choose for B (kn_qgemv8_form's values), from B alone */
int kn_qgemv8_fits_form(const void *b, bool b_s8, int64_t K, int64_t N);
void kn_qgemv8_run(const void *packed, const uint8_t *a, int32_t za, int32_t zb, bool b_s8, int32_t *c);
/* M rows of A (row i at a + i * lda) into C (row stride ldc), or with fo's out set into fo's
 * float rows: out[i][j] += (float)c_ij * (s * sc[j]) (sc[0] for all j unless sc_per_col), the same
 * float operations as that loop over C; or with fo's rq_y set, C not written: c_ij + rq_bias[j]
 * (or none) requantised with rq_r[j] into rq_y[i * rq_ldy + j], int8 when rq_s8 else uint8 (the
 * bytes of kn_q_requant_cols). With fo's done set, done(done_ctx, i0, i1, n0, nc) is called (from
 * the pool's threads, on disjoint blocks) as soon as rows [i0, i1) of columns [n0, n0 + nc) are
 * final, i0 a multiple of 8 (QLinearConv transposes them into its planes there, while they are in
 * cache). On the pool; KILN_ERR_OUT_OF_MEMORY when its row sums cannot be had. */
typedef struct kn_qgemm8_out {
    float *out;
    int64_t ldo;
    float s;
    const float *sc;
    bool sc_per_col;
    uint8_t *rq_y;
    int64_t rq_ldy;
    const float *rq_r;
    const int32_t *rq_bias;
    double rq_zy;
    bool rq_s8;
    void (*done)(const void *ctx, int64_t i0, int64_t i1, int64_t n0, int64_t nc);
    const void *done_ctx;
    /* or NULL: A's rows read in place through taps (a and lda unused), an implicit im2col */
    const struct kn_qgemm8_taps *taps;
} kn_qgemm8_out;
/* A's rows as a convolution's taps (kn_qgemm8_out's taps): row i is output position p = p0 + i of
 * a plane ow positions wide, its K bytes nseg runs of seg_len bytes (nseg * seg_len = K), run s at
 * x + (p / ow) * row_step + (p % ow) * col_step + seg_off[s] (a padded channels-last image: a run
 * is a kernel row's KW * C bytes, or one tap's C with dilation along W). With VNNI, runs of a
 * multiple of 4 bytes and B without residual entries the tile reads them where they are (no copy
 * of K bytes a row); else the rows are gathered into a buffer first (kn_qgemm8_taps_direct says
 * which). */
typedef struct kn_qgemm8_taps {
    const uint8_t *x;
    int64_t p0, ow, row_step, col_step;
    int64_t nseg, seg_len;
    const int64_t *seg_off;
} kn_qgemm8_taps;
bool kn_qgemm8_taps_direct(const void *packed, const kn_qgemm8_taps *t);
kiln_status kn_qgemm8_run(kn_threadpool *pool, const void *packed, const uint8_t *a, int64_t lda, int64_t M, int32_t za,
                          int32_t zb, bool b_s8, int32_t *c, int64_t ldc, const kn_qgemm8_out *fo);

/* Dynamic quantisation to uint8 (DynamicQuantizeLinear, the com.microsoft dynamic products):
 * the range of x[0, n) widened to include 0 (NaNs skipped), and out[i] = nearbyintf(x[i] / scale)
 * + z clamped to [0, 255] (NaN to 0), as the scalar reference loops compute them */
void kn_q8_range(const float *x, int64_t n, float *mn, float *mx);
void kn_q8_quantize_u8(const float *x, int64_t n, float scale, float z, uint8_t *out);

/* The first n values of an integer tensor as int32 (zero points, int32 biases), in a loop of its
 * type: the 8-bit operators read them on every call (a depthwise layer's 960 per-channel zero
 * points and biases through kn_tensor_get_i64 were a third of its time on 3x3 planes). */
void kn_q_int32_values(const kn_tensor *t, int64_t n, int32_t *out);

#if defined(__AVX2__)
#include <immintrin.h>
/* t[j] = (w[0][j], ..., w[7][j]): eight vectors of eight int32 transposed (the 8-bit kernels'
 * pair words, from rows to columns) */
static inline void kn_q_transpose8x32(const __m256i *w, __m256i *t) {
    __m256i u[8];
    for (int i = 0; i < 4; i++) {
        u[2 * i] = _mm256_unpacklo_epi32(w[2 * i], w[2 * i + 1]);
        u[2 * i + 1] = _mm256_unpackhi_epi32(w[2 * i], w[2 * i + 1]);
    }
    const __m256i v0 = _mm256_unpacklo_epi64(u[0], u[2]), v1 = _mm256_unpackhi_epi64(u[0], u[2]);
    const __m256i v2 = _mm256_unpacklo_epi64(u[1], u[3]), v3 = _mm256_unpackhi_epi64(u[1], u[3]);
    const __m256i v4 = _mm256_unpacklo_epi64(u[4], u[6]), v5 = _mm256_unpackhi_epi64(u[4], u[6]);
    const __m256i v6 = _mm256_unpacklo_epi64(u[5], u[7]), v7 = _mm256_unpackhi_epi64(u[5], u[7]);
    t[0] = _mm256_permute2x128_si256(v0, v4, 0x20), t[4] = _mm256_permute2x128_si256(v0, v4, 0x31);
    t[1] = _mm256_permute2x128_si256(v1, v5, 0x20), t[5] = _mm256_permute2x128_si256(v1, v5, 0x31);
    t[2] = _mm256_permute2x128_si256(v2, v6, 0x20), t[6] = _mm256_permute2x128_si256(v2, v6, 0x31);
    t[3] = _mm256_permute2x128_si256(v3, v7, 0x20), t[7] = _mm256_permute2x128_si256(v3, v7, 0x31);
}
#endif

#endif

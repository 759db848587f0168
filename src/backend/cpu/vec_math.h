/* AVX-512 versions of the activations that CNNs and transformers apply to every element of large
 * tensors (sigmoid, SiLU, exp, tanh, erf, GELU): exp from a short polynomial and scalef; reciprocals
 * by rcp14 and a Newton step, or (sigmoid) a division where it made the result more accurate at no
 * cost.
 * Accuracy: a few ulp against double (measured on every float: sigmoid 2.4 ulp, SiLU 2.9 ulp); NaN
 * stays NaN.
 * With __AVX512F__ (kn_v16_*) or AVX2 + FMA (kn_v8_*, the same functions at 8 lanes, below);
 * callers keep their scalar loop for other targets and for tails they prefer not to mask. */
#ifndef KN_CPU_VEC_MATH_H
#define KN_CPU_VEC_MATH_H

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* The 16 x 16 transpose of 32-bit lanes in registers: o[q] lane i = in[i] lane q. Its own target
 * attribute, outside the __AVX512F__ section: the bf16 kernels (bf16_pairs.h's tr16) are compiled
 * in target regions of files that portable builds compile without -mavx512f (include this header
 * before such a region). */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
kn_v16_transpose_regs(const __m512 in[16], __m512 o[16]) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(in[i], in[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(in[i], in[i + 1]);
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

/* 8 bytes from each of 8 rows `stride` apart, transposed in registers (SSE2, every x86-64): t[q]'s
 * low 8 bytes are byte 2q of each row, its high 8 bytes byte 2q + 1 (the int8 convolution's
 * layout changes, the byte Transposes) */
static inline void kn_u8_transpose8x8(const uint8_t *sp, int64_t stride, __m128i t[4]) {
    __m128i v[8];
    for (int e = 0; e < 8; e++) v[e] = _mm_loadl_epi64((const __m128i *)(const void *)(sp + e * stride));
    const __m128i a0 = _mm_unpacklo_epi8(v[0], v[1]), a1 = _mm_unpacklo_epi8(v[2], v[3]);
    const __m128i a2 = _mm_unpacklo_epi8(v[4], v[5]), a3 = _mm_unpacklo_epi8(v[6], v[7]);
    const __m128i b0 = _mm_unpacklo_epi16(a0, a1), b1 = _mm_unpackhi_epi16(a0, a1); /* rows 0-3 */
    const __m128i b2 = _mm_unpacklo_epi16(a2, a3), b3 = _mm_unpackhi_epi16(a2, a3); /* rows 4-7 */
    t[0] = _mm_unpacklo_epi32(b0, b2), t[1] = _mm_unpackhi_epi32(b0, b2);
    t[2] = _mm_unpacklo_epi32(b1, b3), t[3] = _mm_unpackhi_epi32(b1, b3);
}
#endif

/* exp(r) for |r| <= ln2/2: 1 + r + r^2 P(r), P of degree 3 fitted for kiln (weighted least squares
 * on that interval: 1.1e-7 relative), in Horner form; P's coefficients, highest degree first, the
 * one place of them for every vector width (kn_v16_exp_poly, kn_v8_exp_poly). */
#define KN_EXP_P3 8.312495425e-03f
#define KN_EXP_P2 4.189033434e-02f
#define KN_EXP_P1 1.666711569e-01f
#define KN_EXP_P0 4.999923110e-01f

#if defined(__AVX512F__)
#include <immintrin.h>

/* exp(-x) for every lane, with x clamped to [-88.7, 87.3] (exp(-x) between about 1e-38 and
 * 3e38: the callers add it to 1 and take the reciprocal, which must stay finite; the upper clamp
 * keeps the reduction exact, without it x = 1e20 gives NaN). NaN stays NaN: each clamp takes x as
 * its second operand, which vmaxps/vminps return when it is NaN. n = round(-x / ln2),
 * exp(-x) = 2^n exp(-(x + n ln2)), the latter by a degree-6 Taylor polynomial in r = x + n ln2,
 * |r| <= ln2/2 (truncation up to 1.2e-7 at |r| = ln2/2; measured: 2.7 ulp against double). Softmax
 * uses it; the sigmoid has its own, fitted polynomial (kn_v16_expm1_reduced). */
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

/* exp(-d) for d >= 0 with the results below FLT_MIN flushed to exactly 0 (d > 126 ln2 =
 * 87.3365...), as the scalar kn_nn_expf: Softmax's exponentials of d = max - x, where a masked
 * entry (x = -inf, d = inf) must give exactly 0 and kn_v16_exp_neg clamps to about 1e-38.
 * Elsewhere kn_v16_exp_neg's value (on (87.3, 87.3365] its clamp's, exp(-87.3)); NaN stays NaN. */
static inline __m512 kn_v16_exp_neg_ftz(__m512 d) {
    const __mmask16 under = _mm512_cmp_ps_mask(d, _mm512_set1_ps(87.3365447505531f), _CMP_GT_OQ);
    return _mm512_maskz_mov_ps((__mmask16)~under, kn_v16_exp_neg(d));
}

/* exp(r) for |r| <= ln2/2 at 16 lanes (kn_v16_exp, the Softmax's exponential): see KN_EXP_P3 */
static inline __m512 kn_v16_exp_poly(__m512 r) {
    __m512 p = _mm512_set1_ps(KN_EXP_P3);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KN_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KN_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KN_EXP_P0));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return p;
}

/* exp(x) for every lane: overflow gives inf, underflow the correctly scaled subnormal or 0, NaN
 * stays NaN. x is clamped to [-104, 89] (beyond both ends the result is already 0 or inf; the
 * clamp keeps the reduction exact), n = round(x / ln2), exp(x) = 2^n exp(r), r = x - n ln2 in
 * two parts, exp(r) = 1 + r + r^2 P(r) with P of degree 3 fitted for kiln (weighted least squares
 * on |r| <= ln2/2: 1.1e-7 relative), 2^n by scalef (one rounding, subnormals included).
 * Measured: 1.8e-7 relative against double (about 2 ulp); a degree-7 Taylor series was 7.6e-8
 * and 25% slower, which for Exp alone is the difference to ONNX Runtime. */
static inline __m512 kn_v16_exp(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    return _mm512_scalef_ps(kn_v16_exp_poly(r), n);
}

/* tanh(x) as the rational function Eigen uses (ptanh_float: odd degree 13 over even degree 6): no
 * exp, 11 FMAs and one division. x is clamped to +-8.12742043, where the rational function
 * (evaluated in float, these operations in this order) is exactly 1 and below which it never
 * exceeds 1 (it reaches 1 + 2^-23 from 8.12743 on): so the results are within [-1, 1], exactly +-1
 * from |x| = 8.1274 on (float's tanh rounds to 1 from 9.0109; between, 1 is within 1.8e-7 of
 * tanh), with no clamp of the result. Checked on every normal float against double: relative
 * error at most 2.92e-7 for |x| > 1e-30 (at x = 5.126; below 1e-35 the product p x goes
 * subnormal and the relative error grows, 1.6e-6 at 1e-37), never above 1 in magnitude, exactly
 * +-1 wherever float's tanh is (a saturated value short of 1 times a large x, GELU's tanh form
 * at a masked score of -1e4, was a visible error), odd (tanh(-0) = -0), NaN stays NaN (each
 * max/min takes the x-derived value as its second operand). The clamp replaces an earlier one at
 * 7.9053 plus a compare, sign and blend for |x| > 7.9053 (5 vector operations of 19 fewer), with
 * the same accuracy. */
static inline __m512 kn_v16_tanh(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-8.12742043f), x);
    x = _mm512_min_ps(_mm512_set1_ps(8.12742043f), x);
    const __m512 x2 = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(-2.76076847742355e-16f);
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.00018790482477e-13f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-8.60467152213735e-11f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(5.12229709037114e-08f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(1.48572235717979e-05f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(6.37261928875436e-04f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(4.89352455891786e-03f));
    p = _mm512_mul_ps(p, x);
    __m512 q = _mm512_set1_ps(1.19825839466702e-06f);
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(1.18534705686654e-04f));
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(2.26843463243900e-03f));
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(4.89352518554385e-03f));
    return _mm512_div_ps(p, q);
}

/* erfc(z) for z in [1, 10] given z^2 = zz + zz_err: the scalar kn_ew_erfc_big_zz's fit. */
static inline __m512 kn_v16_erfc_big_zz(__m512 z, __m512 zz, __m512 zz_err) {
    /* t = 1 / d by rcp14 and one Newton step (relative error about 2^-28): no division */
    const __m512 d = _mm512_fmadd_ps(_mm512_set1_ps(0.5f), z, _mm512_set1_ps(1.0f));
    const __m512 t0 = _mm512_rcp14_ps(d);
    const __m512 t = _mm512_mul_ps(t0, _mm512_fnmadd_ps(d, t0, _mm512_set1_ps(2.0f)));
    __m512 p = _mm512_set1_ps(-0.06221897719239693f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.3068335952751246f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.5409791232182688f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.3438449109991216f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.07327800652558988f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.22288953791938423f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.23772982255294986f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.283223532480251f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.2820143514707887f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(2.5065902964891325e-06f));
    const __m512 e = kn_v16_exp(_mm512_sub_ps(_mm512_setzero_ps(), zz));
    return _mm512_mul_ps(_mm512_mul_ps(e, _mm512_sub_ps(_mm512_set1_ps(1.0f), zz_err)), p);
}

/* erf's pieces (kn_v16_erf): P(z^2) with erf(z) = z P(z^2) for |z| < 0.921875, and Q(z) with
 * erfc(z) = exp(Q(z)) for z in [0.921875, 3.925]. */
static inline __m512 kn_v16_erf_p(__m512 s) {
    __m512 p = _mm512_set1_ps(-5.991075304e-04f);
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(4.993232433e-03f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-2.676666155e-02f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(1.128181815e-01f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-3.761249483e-01f));
    return _mm512_fmadd_ps(p, s, _mm512_set1_ps(1.128379107e+00f));
}
static inline __m512 kn_v16_erfc_q(__m512 z) {
    __m512 q = _mm512_set1_ps(-1.429727035e-05f);
    q = _mm512_fmadd_ps(q, z, _mm512_set1_ps(3.345998994e-04f));
    q = _mm512_fmadd_ps(q, z, _mm512_set1_ps(-3.559322096e-03f));
    q = _mm512_fmadd_ps(q, z, _mm512_set1_ps(2.309718356e-02f));
    q = _mm512_fmadd_ps(q, z, _mm512_set1_ps(-1.043912321e-01f));
    q = _mm512_fmadd_ps(q, z, _mm512_set1_ps(-6.376895308e-01f));
    q = _mm512_fmadd_ps(q, z, _mm512_set1_ps(-1.126911402e+00f));
    return _mm512_fmadd_ps(q, z, _mm512_set1_ps(-4.712523951e-04f));
}

/* erf(x) in two pieces fitted for kiln (weighted least squares against double erf, evaluated
 * in float: max relative error 1.8e-7 and 1.3e-7): below |x| = 0.921875, x P(x^2) with P of
 * degree 5; above, 1 - exp(Q(|x|)) with Q of degree 7 fitted to log(erfc) on [0.921875, 3.925]
 * (|x| clamped there: erf(3.925) rounds to 1), the sign of x copied. Each piece is computed only
 * when some lane needs it. NaN stays NaN (the clamp passes it through). */
static inline __m512 kn_v16_erf(__m512 x) {
    const __m512 a = _mm512_abs_ps(x);
    const __mmask16 small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.921875f), _CMP_LT_OQ);
    __m512 r = _mm512_setzero_ps();
    if (small) r = _mm512_mul_ps(x, kn_v16_erf_p(_mm512_mul_ps(x, x)));
    if (small != 0xFFFF) {
        const __m512 q = kn_v16_erfc_q(_mm512_min_ps(_mm512_set1_ps(3.925f), a));
        __m512 big = _mm512_sub_ps(_mm512_set1_ps(1.0f), kn_v16_exp(q));
        big = _mm512_castsi512_ps(_mm512_or_si512(
            _mm512_castps_si512(big), _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))));
        r = _mm512_mask_blend_ps(small, big, r);
    }
    return r;
}

/* 0.5 x (1 + erf(z)), z = x/sqrt2, with 1 + erf(z) from erf's pieces: 1 + z P(z^2) for |z| <
 * 0.921875; 2 - exp(Q(z)) above; exp(Q(-z)) = erfc(-z) in [-2.5, -0.921875], which keeps
 * relative accuracy where 1 + erf cancels. Below z = -2.5 (x < -3.54; only when some lane is there)
 * the scalar kernel's erfc form, whose relative error stays below 1e-6 where Q's float rounding
 * (|Q| up to 18) would not; 0 below x = -13.6 (the result is below 3e-41). Each piece only
 * when some lane needs it. */
static inline __m512 kn_v16_gelu_erf(__m512 x) {
    const __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f));
    const __m512 a = _mm512_abs_ps(z);
    const __mmask16 small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.921875f), _CMP_LT_OQ);
    __m512 ope = _mm512_setzero_ps(); /* 1 + erf(z) */
    if (small) ope = _mm512_fmadd_ps(z, kn_v16_erf_p(_mm512_mul_ps(z, z)), _mm512_set1_ps(1.0f));
    if (small != 0xFFFF) {
        const __m512 e = kn_v16_exp(kn_v16_erfc_q(_mm512_min_ps(_mm512_set1_ps(3.925f), a)));
        const __mmask16 pos = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GT_OQ);
        __m512 big = _mm512_mask_blend_ps(pos, e, _mm512_sub_ps(_mm512_set1_ps(2.0f), e));
        const __mmask16 deep = _mm512_cmp_ps_mask(z, _mm512_set1_ps(-2.5f), _CMP_LT_OQ);
        if (deep) {
            const __m512 ax = _mm512_abs_ps(x);
            /* below x = -13.6 the result (under 3e-41) is returned as 0, and those lanes run on
             * xc = 4 instead (as kn_v8_gelu_erf): at 14.14 exp(-x^2/2) and the products were
             * subnormal, a microcode assist each where subnormal operands are slow */
            const __mmask16 tail = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(13.6f), _CMP_GT_OQ);
            const __m512 xc = _mm512_mask_blend_ps(tail, ax, _mm512_set1_ps(4.0f));
            const __m512 xx = _mm512_mul_ps(xc, xc);
            const __m512 half = _mm512_set1_ps(0.5f);
            __m512 ec = kn_v16_erfc_big_zz(_mm512_mul_ps(xc, _mm512_set1_ps(0.70710678118654752f)),
                                           _mm512_mul_ps(half, xx), _mm512_mul_ps(half, _mm512_fmsub_ps(xc, xc, xx)));
            ec = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-13.6f), _CMP_LT_OQ), ec,
                                      _mm512_setzero_ps());
            big = _mm512_mask_blend_ps(deep, big, ec);
        }
        ope = _mm512_mask_blend_ps(small, big, ope);
    }
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), ope);
}

/* exp(z) = 2^n (1 + t) for z in [-88.7, 88.7] (callers clamp): n = round(z / ln2), r = z - n ln2 in
 * two parts, t = expm1(r) = r + r^2 P(r), P of degree 4 fitted for kiln (Lawson-weighted least
 * squares for the relative error of 1 + t on |r| <= ln2/2: 0.06 ulp with its coefficients rounded
 * to float). t is returned unrounded into 1 + t (|t| < 0.42, its own error about half an ulp of t)
 * so that callers can add it where it loses least. */
static inline __m512 kn_v16_expm1_reduced(__m512 z, __m512 *n_out) {
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(z, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), z);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.3814534759e-03f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3687454462e-03f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1668392718e-02f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666521132e-01f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.9999994040e-01f));
    *n_out = n;
    return _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
}

/* 1 / (1 + exp(-x)) = 0.5 / d, d = 1/2 + h (1 + t), exp(-x) = 2^n (1 + t), h = 2^(n-1) (halved so
 * that n = 128 at x = -88.7 stays finite; h t is exact, so d has one rounding, by an FMA), and one
 * division. Measured on every float against double: at most 2.4 ulp (x near -16.6, where h + 1/2
 * rounds), 1.5 ulp elsewhere, mean 0.3-0.5 ulp; more than 1 ulp for 3-7% of arguments (the
 * previous rcp14 + Newton form: 4.0 ulp, 12-25%; ONNX Runtime's MLAS logistic, a rational
 * function: 3.0 ulp for x >= 0, for x < 0 only absolute accuracy, up to 1.4e-7). On this
 * project's AVX-512 CPU (AMD, family 26) it is slightly faster than the rcp14 form; where a 16-lane
 * division is slow, rcp14, one Newton step and an FMA correction give the same accuracy (measured)
 * at 1.4x the cost here. A version within 1 ulp (exp and 1 + exp as float pairs, the division
 * corrected for the low halves: at most 0.99 ulp) cost 1.9x on the Sigmoid sweep (slower than ONNX
 * Runtime) and 3.5-5% of YOLO-style SiLU networks (the ddddocr detector at level 0: its 80 Sigmoids
 * 2.6-3.8 ms a run, within 1 ulp 7.8-9.0 ms), and still would not reproduce ONNX Runtime's int8
 * results bit for bit (issue 18, tests/corpus/README.md): not taken.
 * x is clamped to [-88.7, 87.3] (sigmoid(-88.7) = 3e-39 for every x below, 1 above); NaN stays NaN
 * (each clamp takes x as its second operand). */
static inline __m512 kn_v16_sigmoid(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-88.7f), x);
    x = _mm512_min_ps(_mm512_set1_ps(87.3f), x);
    __m512 n;
    const __m512 t = kn_v16_expm1_reduced(_mm512_sub_ps(_mm512_setzero_ps(), x), &n);
    const __m512 h = _mm512_scalef_ps(_mm512_set1_ps(0.5f), n);
    const __m512 d = _mm512_fmadd_ps(h, t, _mm512_add_ps(h, _mm512_set1_ps(0.5f)));
    return _mm512_div_ps(_mm512_set1_ps(0.5f), d);
}

/* 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3) (GELU, tanh form). */
static inline __m512 kn_v16_gelu_tanh(__m512 x) {
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    const __m512 u2 = _mm512_mul_ps(_mm512_set1_ps(2.0f * 0.79788456080286536f),
                                    _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x));
    const __m512 y = _mm512_mul_ps(x, kn_v16_sigmoid(u2));
    /* below x = -10 the result is below 2e-37 (and x^3 may overflow): 0 with x's sign */
    return _mm512_mask_mul_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-10.0f), _CMP_LT_OQ), x,
                              _mm512_setzero_ps());
}

/* x * sigmoid(x) (SiLU, Swish): exactly the product of x and kn_v16_sigmoid(x) rounded once, as
 * an unfused Mul(x, Sigmoid(x)) computes it, so fusing the pair changes no bit. */
static inline __m512 kn_v16_silu(__m512 x) { return _mm512_mul_ps(x, kn_v16_sigmoid(x)); }

static inline __mmask16 kn_v16_tail(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* Loads rows x cols (<= 16 x 16) floats at src (row stride ld), zero elsewhere, and returns the
 * transpose: o[q] lane r = src[r*ld + q] (kn_v16_transpose_regs, below). */
static inline __attribute__((always_inline)) void kn_v16_transpose(const float *src, int64_t ld, int rows,
                                                                   int cols, __m512 o[16]) {
    const __mmask16 cm = kn_v16_tail(cols);
    __m512 r[16];
    for (int i = 0; i < 16; i++) r[i] = i < rows ? _mm512_maskz_loadu_ps(cm, src + i * ld) : _mm512_setzero_ps();
    kn_v16_transpose_regs(r, o);
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
#elif defined(__AVX2__) && defined(__FMA__)
/* The same functions at 8 lanes for AVX2 + FMA targets (no AVX-512): the same polynomials, the
 * same operations in the same order, so the same results as the 16-lane forms, except where
 * AVX-512 has an instruction AVX2 lacks:
 *   - vscalefps (p 2^n, one rounding) is two multiplications by normal powers of two,
 *     2^(n - floor(n/2)) and 2^floor(n/2): the first is exact (p is near 1 and |n| <= 150), so
 *     the product is rounded once, subnormal results included: the same result;
 *   - vrcp14ps + a Newton step (erfc's 1 / (1 + z/2)) is a division (as the scalar kernel):
 *     correctly rounded rather than within 2^-28;
 *   - lane masks are vectors of all-ones lanes (vcmpps), blends vblendvps;
 *   - and kn_v8_erf, which reduces erfc's exponential in base 2 (fewer operations, the same
 *     accuracy, not the same bits; see there). kn_v8_sigmoid computes the same values as
 *     kn_v16_sigmoid by other operations.
 * Without these the AVX2 build ran the scalar loops (the compiler keeps their clamps as branches):
 * Tanh, Erf, Gelu and Softmax took 10-13x ONNX Runtime's time on an AVX2-only CPU. */
#include <immintrin.h>
#include <string.h>

static inline __m256 kn_v8_abs(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
static inline __m256 kn_v8_round(__m256 x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* p 2^n for integral n (a float) in [-150, 129] and p in [0.5, 2] (or NaN): one rounding */
static inline __m256 kn_v8_scale(__m256 p, __m256 n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, f2), f1);
}
static inline int kn_v8_bits(__m256 m) { return _mm256_movemask_ps(m); }

/* kn_v16_exp_neg's reduction and polynomial at 8 lanes: exp(-x) = p 2^n, n (an integral float)
 * through n_out */
static inline __m256 kn_v8_exp_neg_reduced(__m256 x, __m256 *n_out) {
    const __m256 n = kn_v8_round(_mm256_mul_ps(x, _mm256_set1_ps(-1.44269504088896341f)));
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(-1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(-1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(-1.0f));
    *n_out = n;
    return _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
}

/* kn_v16_exp_neg at 8 lanes */
static inline __m256 kn_v8_exp_neg(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(-88.7f), x);
    x = _mm256_min_ps(_mm256_set1_ps(87.3f), x);
    __m256 n;
    const __m256 p = kn_v8_exp_neg_reduced(x, &n);
    return kn_v8_scale(p, n);
}

/* kn_v16_exp_neg_ftz at 8 lanes for d >= 0 (or NaN), without kn_v8_exp_neg's clamps and with 2^n
 * built from the exponent field: the lanes kept have d <= 87.3365, so n is in [-126, 0] and 2^n
 * normal (p 2^n rounds once, as vscalefps). The same results as kn_v16_exp_neg_ftz but on
 * (87.3, 87.3365], where this is exp(-d) rather than the clamp's exp(-87.3).
 * n = round(-d / ln2) by adding 1.5 2^23 + 127 to the rounded product: the sum rounds to an
 * integer, ties to even as vroundps, so the same n, and its low mantissa bits hold n + 127, the
 * exponent field of 2^n (one shift; n itself one subtraction): one vector operation fewer than
 * round, convert, add and shift (lanes past the limit or at d = inf get garbage there, which
 * the mask clears; NaN stays NaN through p). */
static inline __m256 kn_v8_exp_neg_normal(__m256 d);
static inline __m256 kn_v8_exp_neg_ftz(__m256 d) {
    const __m256 under = _mm256_cmp_ps(d, _mm256_set1_ps(87.3365447505531f), _CMP_GT_OQ);
    return _mm256_andnot_ps(under, kn_v8_exp_neg_normal(d));
}
/* kn_v8_exp_neg_ftz without the mask, for callers that know 0 <= d <= 87.3365 (or NaN) in every
 * lane: the same results there */
static inline __m256 kn_v8_exp_neg_normal(__m256 d) {
    const __m256 magic = _mm256_set1_ps(12582912.0f + 127.0f); /* 1.5 2^23 + 127 */
    const __m256 k = _mm256_add_ps(_mm256_mul_ps(d, _mm256_set1_ps(-1.44269504088896341f)), magic);
    const __m256 n = _mm256_sub_ps(k, magic);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(0.693359375f), d);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(-1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(-1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(-1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256 e = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(k), 23));
    return _mm256_mul_ps(p, e);
}

/* kn_v16_exp_poly at 8 lanes */
static inline __m256 kn_v8_exp_poly(__m256 r) {
    __m256 p = _mm256_set1_ps(KN_EXP_P3);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KN_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KN_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KN_EXP_P0));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    return p;
}

/* kn_v16_exp at 8 lanes */
static inline __m256 kn_v8_exp(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);
    x = _mm256_min_ps(_mm256_set1_ps(89.0f), x);
    const __m256 n = kn_v8_round(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    return kn_v8_scale(kn_v8_exp_poly(r), n);
}

/* kn_v8_exp for x in [-87.3, 88.3] (normal results; callers guarantee the range): no clamps and
 * one power of two, exact where the result is normal, so the same results as kn_v8_exp there */
static inline __m256 kn_v8_exp_mid(__m256 x) {
    const __m256 n = kn_v8_round(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    const __m256 p = kn_v8_exp_poly(r);
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* kn_v16_tanh at 8 lanes (the same operations, the same results) */
static inline __m256 kn_v8_tanh(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(-8.12742043f), x);
    x = _mm256_min_ps(_mm256_set1_ps(8.12742043f), x);
    const __m256 x2 = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-2.76076847742355e-16f);
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.00018790482477e-13f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-8.60467152213735e-11f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(5.12229709037114e-08f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(1.48572235717979e-05f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(6.37261928875436e-04f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(4.89352455891786e-03f));
    p = _mm256_mul_ps(p, x);
    __m256 q = _mm256_set1_ps(1.19825839466702e-06f);
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(1.18534705686654e-04f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(2.26843463243900e-03f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(4.89352518554385e-03f));
    return _mm256_div_ps(p, q);
}

/* kn_v16_erfc_big_zz at 8 lanes (1 / (1 + z/2) by a division) */
static inline __m256 kn_v8_erfc_big_zz(__m256 z, __m256 zz, __m256 zz_err) {
    const __m256 d = _mm256_fmadd_ps(_mm256_set1_ps(0.5f), z, _mm256_set1_ps(1.0f));
    const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), d);
    __m256 p = _mm256_set1_ps(-0.06221897719239693f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.3068335952751246f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.5409791232182688f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.3438449109991216f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.07327800652558988f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.22288953791938423f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.23772982255294986f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.283223532480251f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.2820143514707887f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(2.5065902964891325e-06f));
    const __m256 e = kn_v8_exp(_mm256_sub_ps(_mm256_setzero_ps(), zz));
    return _mm256_mul_ps(_mm256_mul_ps(e, _mm256_sub_ps(_mm256_set1_ps(1.0f), zz_err)), p);
}

static inline __m256 kn_v8_erf_p(__m256 s) {
    __m256 p = _mm256_set1_ps(-5.991075304e-04f);
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(4.993232433e-03f));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-2.676666155e-02f));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(1.128181815e-01f));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-3.761249483e-01f));
    return _mm256_fmadd_ps(p, s, _mm256_set1_ps(1.128379107e+00f));
}
static inline __m256 kn_v8_erfc_q(__m256 z) {
    __m256 q = _mm256_set1_ps(-1.429727035e-05f);
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(3.345998994e-04f));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(-3.559322096e-03f));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(2.309718356e-02f));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(-1.043912321e-01f));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(-6.376895308e-01f));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(-1.126911402e+00f));
    return _mm256_fmadd_ps(q, z, _mm256_set1_ps(-4.712523951e-04f));
}

/* erfc(z) = exp(Q(z)) for z in [0.921875, 3.925] (callers clamp) as 2^(Q log2e), log2e folded
 * into Q's coefficients (each Q coefficient times log2e, rounded to float): n = round(Q') by adding
 * 1.5 2^23 + 127 (whose low mantissa bits then hold n + 127, so 2^n is one shift), f = Q' - n
 * exact, 2^f by kn_v16_exp's polynomial with r = f ln2 (coefficients times ln2^k). Returns 2^f;
 * *s_out = 2^n (Q' in [-25.9, -1.3]: n in [-26, -1], normal; NaN passes through f and 2^f). */
static inline __m256 kn_v8_erfc_exp2(__m256 z, __m256 *s_out) {
    __m256 q = _mm256_set1_ps(-2.062660133e-05f); /* kn_v8_erfc_q's coefficients times log2e */
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(4.827256198e-04f));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(-5.135016516e-03f));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(3.332219273e-02f));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(-1.506047100e-01f));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(-9.199915528e-01f));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(-1.625789523e+00f));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(-6.798735121e-04f));
    const __m256 magic = _mm256_set1_ps(12582912.0f + 127.0f); /* 1.5 2^23 + 127 */
    const __m256 k = _mm256_add_ps(q, magic);
    const __m256 f = _mm256_sub_ps(q, _mm256_sub_ps(k, magic));
    __m256 e = _mm256_set1_ps(1.330021652e-03f);
    e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(9.669759311e-03f));
    e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(5.550560355e-02f));
    e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(2.402228117e-01f));
    e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(6.931471825e-01f));
    e = _mm256_fmadd_ps(e, f, _mm256_set1_ps(1.0f));
    *s_out = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(k), 23)); /* 2^n */
    return e;
}

/* kn_v16_erf at 8 lanes, with erfc = exp(Q) by kn_v8_erfc_exp2 and 1 - 2^f 2^n in one FMA:
 * 10 vector operations where kn_v8_exp_mid and the subtraction took 14, 30 in all instead of 34
 * (12-17% on Erf 1x128x3072, Zen 3). Not bit for bit kn_v16_erf (the reduction differs) but the same accuracy, measured on every
 * 7th float in FLT_MIN <= |x| <= 5 against double: at most 2.45 ulp (x = 0.476, the small piece,
 * unchanged), relative error 1.77e-7, more than 1 ulp for 15.9% of arguments (16% before). */
static inline __m256 kn_v8_erf(__m256 x) {
    /* both pieces for every vector, no branches: on random data nearly every vector needs both,
     * and without the branches the compiler interleaves two vectors' chains (KN_V8_MAP) */
    const __m256 a = kn_v8_abs(x);
    const __m256 small = _mm256_cmp_ps(a, _mm256_set1_ps(0.921875f), _CMP_LT_OQ);
    const __m256 r = _mm256_mul_ps(x, kn_v8_erf_p(_mm256_mul_ps(x, x)));
    __m256 s;
    const __m256 e = kn_v8_erfc_exp2(_mm256_min_ps(_mm256_set1_ps(3.925f), a), &s);
    __m256 big = _mm256_fnmadd_ps(e, s, _mm256_set1_ps(1.0f));
    big = _mm256_or_ps(big, _mm256_and_ps(x, _mm256_set1_ps(-0.0f)));
    return _mm256_blendv_ps(big, r, small);
}

/* kn_v16_gelu_erf at 8 lanes, with erfc(|z|) = exp(Q) by kn_v8_erfc_exp2 (kn_v8_erf's base-2
 * form: 10% fewer cycles on Gelu 1x128x3072, Zen 3, than exp(Q) by kn_v8_exp_mid), 2 - erfc for
 * z > 0 in one FMA, and the scalar kernel's erfc form (the deep tail) from z = -2.2 (x = -3.11)
 * rather than -2.5: Q' = Q log2e is 1.44x Q, so its float rounding costs 1.44x more relative
 * error in 2^Q'; between z = -2.5 and -2.2 that was up to 1.91e-6 against double (every float),
 * with the deep form from -2.2 at most 1.55e-6 over [-3.6, -1.2] (the kn_v8_exp_mid form: 1.53e-6) */
static inline __m256 kn_v8_gelu_erf(__m256 x) {
    const __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f));
    const __m256 a = kn_v8_abs(z);
    const __m256 small = _mm256_cmp_ps(a, _mm256_set1_ps(0.921875f), _CMP_LT_OQ);
    /* both pieces for every vector, as kn_v8_erf; only the rare deep tail is a branch */
    __m256 ope = _mm256_fmadd_ps(z, kn_v8_erf_p(_mm256_mul_ps(z, z)), _mm256_set1_ps(1.0f)); /* 1 + erf(z) */
    {
        __m256 s;
        const __m256 e = kn_v8_erfc_exp2(_mm256_min_ps(_mm256_set1_ps(3.925f), a), &s); /* erfc(|z|) = e s */
        const __m256 pos = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_GT_OQ);
        __m256 big = _mm256_blendv_ps(_mm256_mul_ps(e, s), _mm256_fnmadd_ps(e, s, _mm256_set1_ps(2.0f)), pos);
        const __m256 deep = _mm256_cmp_ps(z, _mm256_set1_ps(-2.2f), _CMP_LT_OQ);
        if (kn_v8_bits(deep)) {
            const __m256 ax = kn_v8_abs(x);
            /* below x = -13.6 the result (under 3e-41) is returned as 0, and those lanes run on
             * xc = 4 instead: at 14.14 exp(-x^2/2) and the products were subnormal, a microcode
             * assist each on Zen 3 (bias + GELU of a layer with a third of its values under -13
             * took 2.3x the time of one without) */
            const __m256 tail = _mm256_cmp_ps(ax, _mm256_set1_ps(13.6f), _CMP_GT_OQ);
            const __m256 xc = _mm256_blendv_ps(ax, _mm256_set1_ps(4.0f), tail);
            const __m256 xx = _mm256_mul_ps(xc, xc);
            const __m256 half = _mm256_set1_ps(0.5f);
            __m256 ec = kn_v8_erfc_big_zz(_mm256_mul_ps(xc, _mm256_set1_ps(0.70710678118654752f)),
                                          _mm256_mul_ps(half, xx), _mm256_mul_ps(half, _mm256_fmsub_ps(xc, xc, xx)));
            ec = _mm256_blendv_ps(ec, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(-13.6f), _CMP_LT_OQ));
            big = _mm256_blendv_ps(big, ec, deep);
        }
        ope = _mm256_blendv_ps(big, ope, small);
    }
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), ope);
}

/* kn_v16_sigmoid at 8 lanes, the same results but for 7 arguments, in fewer operations (16 instead
 * of 19: 8-15% on Sigmoid 1x64x56x56, Zen 3, and 4% more by the fused rounding below):
 *   - x clamped above at 86 rather than 87.3 (the sigmoid rounds to 1 from x = 17 on, so nothing
 *     changes) keeps h = 2^(n-1) normal;
 *   - n = round(-x / ln2) by subtracting the exact product x log2e from 1.5 2^23 + 126 in one FMA
 *     (the result rounds to an integer, ties to even as vroundps): n + 126 lands in its low
 *     mantissa bits, so h is one shift of its bits and n one subtraction, instead of round,
 *     convert, add and shift. Rounding the product first (as kn_v16_sigmoid) gives another n only
 *     where that rounding crosses a half-integer: 7 of the 331 million floats with
 *     1e-4 <= |x| <= 88.7 come out differently, within the same bounds (measured on all of them);
 *   - the reduction and expm1's polynomial run on -r = x + n ln2 (odd coefficients negated: FMAs
 *     negated, each rounding the same) and need no -x.
 * kn_v16_expm1_reduced's polynomial; measured on every 7th float in 1e-4 <= |x| <= 88 against
 * double: at most 2.44 ulp (x = -16.64), more than 1 ulp for 4.4% of arguments, the same as
 * before. */
static inline __m256 kn_v8_sigmoid(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(-88.7f), x);
    x = _mm256_min_ps(_mm256_set1_ps(86.0f), x);
    const __m256 magic = _mm256_set1_ps(12582912.0f + 126.0f); /* 1.5 2^23 + 126 */
    /* n in [-124, 128] */
    const __m256 k = _mm256_fnmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), magic);
    const __m256 n = _mm256_sub_ps(k, magic);
    __m256 rr = _mm256_fmadd_ps(n, _mm256_set1_ps(0.693359375f), x); /* -r */
    rr = _mm256_fmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), rr);
    /* expm1(r) = r + r^2 P(r), P(r) by Horner at r = -rr */
    __m256 p = _mm256_set1_ps(1.3814534759e-03f);
    p = _mm256_fnmadd_ps(p, rr, _mm256_set1_ps(8.3687454462e-03f));
    p = _mm256_fnmadd_ps(p, rr, _mm256_set1_ps(4.1668392718e-02f));
    p = _mm256_fnmadd_ps(p, rr, _mm256_set1_ps(1.6666521132e-01f));
    p = _mm256_fnmadd_ps(p, rr, _mm256_set1_ps(4.9999994040e-01f));
    const __m256 t = _mm256_fmsub_ps(p, _mm256_mul_ps(rr, rr), rr);
    const __m256 h = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(k), 23)); /* 2^(n-1) */
    const __m256 d = _mm256_fmadd_ps(h, t, _mm256_add_ps(h, _mm256_set1_ps(0.5f)));
    return _mm256_div_ps(_mm256_set1_ps(0.5f), d);
}

/* kn_v16_gelu_tanh at 8 lanes */
static inline __m256 kn_v8_gelu_tanh(__m256 x) {
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 u2 = _mm256_mul_ps(_mm256_set1_ps(2.0f * 0.79788456080286536f),
                                    _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
    const __m256 y = _mm256_mul_ps(x, kn_v8_sigmoid(u2));
    return _mm256_blendv_ps(y, _mm256_mul_ps(x, _mm256_setzero_ps()),
                            _mm256_cmp_ps(x, _mm256_set1_ps(-10.0f), _CMP_LT_OQ));
}

static inline __m256 kn_v8_silu(__m256 x) { return _mm256_mul_ps(x, kn_v8_sigmoid(x)); }

/* sin(x) (cos_form 0) or cos(x) (cos_form 1) for |x| <= 8192, by Cephes' sinf / cosf: j = the
 * even integer nearest |x| / (pi/4) from below-or-at, z = |x| - j pi/4 in three parts (fused
 * products: exact for j < 2^16), |z| <= pi/4, then the sine or cosine polynomial of z and the sign
 * by the octant. Lanes with |x| > 8192, infinities and NaN come out wrong: the caller takes those
 * from the scalar sinf / cosf (kn_v8_sincos_big says which). Measured against double on |x| <= 8192
 * (2.2 million arguments): at most 9.3e-8 absolute, 1.3e-7 relative where |result| > 0.1. */
static inline __m256 kn_v8_sincos(__m256 x, int cos_form) {
    const __m256 ax = kn_v8_abs(x);
    __m256i j = _mm256_cvttps_epi32(_mm256_mul_ps(ax, _mm256_set1_ps(1.27323954473516268615f)));
    j = _mm256_and_si256(_mm256_add_epi32(j, _mm256_set1_epi32(1)), _mm256_set1_epi32(~1));
    const __m256 y = _mm256_cvtepi32_ps(j);
    __m256 z = _mm256_fnmadd_ps(y, _mm256_set1_ps(0.78515625f), ax);
    z = _mm256_fnmadd_ps(y, _mm256_set1_ps(2.4187564849853515625e-4f), z);
    z = _mm256_fnmadd_ps(y, _mm256_set1_ps(3.77489497744594108e-8f), z);
    const __m256 zz = _mm256_mul_ps(z, z);
    __m256 ps = _mm256_fmadd_ps(_mm256_set1_ps(-1.9515295891e-4f), zz, _mm256_set1_ps(8.3321608736e-3f));
    ps = _mm256_fmadd_ps(ps, zz, _mm256_set1_ps(-1.6666654611e-1f));
    ps = _mm256_fmadd_ps(_mm256_mul_ps(ps, zz), z, z);
    __m256 pc = _mm256_fmadd_ps(_mm256_set1_ps(2.443315711809948e-5f), zz, _mm256_set1_ps(-1.388731625493765e-3f));
    pc = _mm256_fmadd_ps(pc, zz, _mm256_set1_ps(4.166664568298827e-2f));
    pc = _mm256_fmadd_ps(_mm256_mul_ps(pc, zz), zz, _mm256_fnmadd_ps(_mm256_set1_ps(0.5f), zz, _mm256_set1_ps(1.0f)));
    /* octant bit 2 (j & 2): the other polynomial; bit 4 (j & 4): the sign flips */
    const __m256i b2 = _mm256_slli_epi32(_mm256_and_si256(j, _mm256_set1_epi32(2)), 30); /* to the sign bit */
    const __m256i b4 = _mm256_slli_epi32(_mm256_and_si256(j, _mm256_set1_epi32(4)), 29);
    const __m256 other = _mm256_castsi256_ps(b2);
    __m256 r, sign;
    if (cos_form) {
        r = _mm256_blendv_ps(pc, ps, other);
        sign = _mm256_castsi256_ps(_mm256_xor_si256(b4, b2));
    } else {
        r = _mm256_blendv_ps(ps, pc, other);
        sign = _mm256_xor_ps(_mm256_castsi256_ps(b4), _mm256_and_ps(x, _mm256_set1_ps(-0.0f)));
    }
    return _mm256_xor_ps(r, sign);
}
/* lanes kn_v8_sincos leaves to the scalar functions: |x| > 8192, infinities, NaN */
static inline int kn_v8_sincos_big(__m256 x) {
    return _mm256_movemask_ps(_mm256_cmp_ps(kn_v8_abs(x), _mm256_set1_ps(8192.0f), _CMP_NLE_UQ));
}

/* the first n (< 8) floats at p, zero above / stored to p */
static inline __m256 kn_v8_load_part(const float *p, int64_t n) {
    float b[8] = {0};
    memcpy(b, p, (size_t)n * sizeof(float));
    return _mm256_loadu_ps(b);
}
static inline void kn_v8_store_part(float *p, int64_t n, __m256 v) {
    float b[8];
    _mm256_storeu_ps(b, v);
    memcpy(p, b, (size_t)n * sizeof(float));
}

/* o[i] = VFN(x[i]) for i < n (o may be x): whole vectors, then the tail through a buffer */
#define KN_V8_MAP(o, x, n, VFN)                                                                    \
    do {                                                                                           \
        float *kn_map_o = (o);                                                                     \
        const float *kn_map_x = (x);                                                               \
        const int64_t kn_map_n = (n);                                                              \
        int64_t kn_map_i = 0;                                                                      \
        for (; kn_map_i + 16 <= kn_map_n; kn_map_i += 16) {                                        \
            const __m256 kn_map_a = VFN(_mm256_loadu_ps(kn_map_x + kn_map_i));                     \
            const __m256 kn_map_b = VFN(_mm256_loadu_ps(kn_map_x + kn_map_i + 8));                 \
            _mm256_storeu_ps(kn_map_o + kn_map_i, kn_map_a);                                       \
            _mm256_storeu_ps(kn_map_o + kn_map_i + 8, kn_map_b);                                   \
        }                                                                                          \
        for (; kn_map_i + 8 <= kn_map_n; kn_map_i += 8)                                            \
            _mm256_storeu_ps(kn_map_o + kn_map_i, VFN(_mm256_loadu_ps(kn_map_x + kn_map_i)));      \
        if (kn_map_i < kn_map_n)                                                                   \
            kn_v8_store_part(kn_map_o + kn_map_i, kn_map_n - kn_map_i,                             \
                             VFN(kn_v8_load_part(kn_map_x + kn_map_i, kn_map_n - kn_map_i)));      \
    } while (0)

static inline void kn_v8_sigmoid_inplace(float *p, int64_t n) { KN_V8_MAP(p, p, n, kn_v8_sigmoid); }
static inline void kn_v8_silu_inplace(float *p, int64_t n) { KN_V8_MAP(p, p, n, kn_v8_silu); }
#endif

#endif

/* The CPU backend's vector sigmoid and SiLU (vec_math.h) against double precision, including the
 * extremes a fast exp gets wrong (overflowing exp, huge arguments, infinities, NaN). The same tests
 * run the 16-lane functions (AVX-512 builds) or the 8-lane ones (AVX2 + FMA builds). */
#include "backend/cpu/vec_math.h"
#include "unit.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
#define VF(name) kn_v16_##name
static void eval16(__m512 (*fn)(__m512), const float *x, float *y) { _mm512_storeu_ps(y, fn(_mm512_loadu_ps(x))); }
#elif defined(__AVX2__) && defined(__FMA__)
#define VF(name) kn_v8_##name
/* 16 floats as two vectors */
static void eval16(__m256 (*fn)(__m256), const float *x, float *y) {
    _mm256_storeu_ps(y, fn(_mm256_loadu_ps(x)));
    _mm256_storeu_ps(y + 8, fn(_mm256_loadu_ps(x + 8)));
}
#endif

#if defined(VF)

KN_TEST(vec_math_sigmoid_silu_accuracy) {
    double worst_s = 0, worst_silu = 0;
    for (double x0 = -87.0; x0 < 100.0; x0 += 0.0137) {
        float x[16], s[16], u[16];
        for (int l = 0; l < 16; l++) x[l] = (float)(x0 + l * 0.0007);
        eval16(VF(sigmoid), x, s);
        eval16(VF(silu), x, u);
        for (int l = 0; l < 16; l++) {
            double want = 1.0 / (1.0 + exp(-(double)x[l]));
            worst_s = fmax(worst_s, fabs(s[l] - want) / want);
            double wu = (double)x[l] * want;
            if (fabs(wu) > 1e-30) worst_silu = fmax(worst_silu, fabs(u[l] - wu) / fabs(wu));
        }
    }
    CHECK_MSG(worst_s < 1e-6, "sigmoid: max relative error %g", worst_s);
    CHECK_MSG(worst_silu < 1e-6, "silu: max relative error %g", worst_silu);
}

/* In ulps of the float nearest the exact value, over every 61st float with 1e-4 <= |x| <= 88 (4.6
 * million arguments, both signs): the sigmoid within 2.5 ulp and more than 1 ulp off for under 10%
 * of arguments (measured on every float: 2.44 ulp at x = -16.64, 1.5 ulp elsewhere, 0-9% per
 * range), SiLU within 3 ulp; the previous rcp14 form reached 4.0 ulp with 12-25% over 1 ulp. And
 * SiLU is the product of x and the sigmoid rounded once, bit for bit, as the unfused Mul(x,
 * Sigmoid(x)) computes it. */
static double ulps(float got, double want) {
    const float wf = (float)want;
    const double ulp = (double)nextafterf(fabsf(wf), INFINITY) - fabsf(wf);
    return fabs((double)got - want) / ulp;
}
KN_TEST(vec_math_sigmoid_silu_ulps) {
    double worst_s = 0, worst_u = 0;
    float at_s = 0, at_u = 0;
    long n = 0, over1 = 0, not_product = 0;
    const uint32_t lo = 0x38d1b717u /* 1e-4f */, hi = 0x42b00000u /* 88.0f */;
    for (int sign = 0; sign < 2; sign++) {
        float x[16], s[16], u[16];
        int k = 0;
        for (uint32_t bits = lo; bits < hi; bits += 61) {
            uint32_t b = bits | (sign ? 0x80000000u : 0u);
            memcpy(&x[k++], &b, sizeof b);
            if (k < 16) continue;
            k = 0;
            eval16(VF(sigmoid), x, s);
            eval16(VF(silu), x, u);
            for (int l = 0; l < 16; l++) {
                const double want = 1.0 / (1.0 + exp(-(double)x[l]));
                if (want < 1.2e-38) continue; /* subnormal results: an ulp means nothing there */
                const double es = ulps(s[l], want), eu = ulps(u[l], (double)x[l] * want);
                if (es > worst_s) worst_s = es, at_s = x[l];
                if (eu > worst_u) worst_u = eu, at_u = x[l];
                over1 += es > 1.0;
                not_product += u[l] != x[l] * s[l];
                n++;
            }
        }
    }
    CHECK_MSG(worst_s <= 2.5, "sigmoid: %.3f ulp at x = %.9g", worst_s, at_s);
    CHECK_MSG(worst_u <= 3.0, "silu: %.3f ulp at x = %.9g", worst_u, at_u);
    CHECK_MSG(over1 < n / 10, "sigmoid: %ld of %ld arguments more than 1 ulp off", over1, n);
    CHECK_MSG(not_product == 0, "silu differs from x * sigmoid(x) for %ld arguments", not_product);
}

KN_TEST(vec_math_sigmoid_extremes) {
    const float x[16] = {1e20f, 1e30f, 3e38f, INFINITY, 89.0f, 200.0f, -89.0f, -200.0f,
                         -1e30f, -INFINITY, NAN, 0.0f, -0.0f, 1e-30f, -1e-30f, 0.5f};
    float s[16], u[16];
    eval16(VF(sigmoid), x, s);
    eval16(VF(silu), x, u);
    for (int l = 0; l < 6; l++) CHECK_MSG(s[l] == 1.0f && u[l] == x[l], "sigmoid(%g) = %g, silu = %g", x[l], s[l], u[l]);
    for (int l = 6; l < 10; l++) CHECK_MSG(s[l] >= 0.0f && s[l] < 1e-37f, "sigmoid(%g) = %g", x[l], s[l]);
    CHECK_MSG(isnan(s[10]) && isnan(u[10]), "NaN in gives %g, %g", s[10], u[10]);
    CHECK_MSG(s[11] == 0.5f && s[12] == 0.5f && u[11] == 0.0f, "sigmoid(0) = %g, silu(0) = %g", s[11], u[11]);
    CHECK_MSG(fabs(s[15] - 0.6224593312f) < 1e-7, "sigmoid(0.5) = %.9g", s[15]);
}
/* tanh: within 3e-7 of double everywhere, and exactly +-1 where float's tanh is (|x| > 9.01): a
 * saturated value short of 1 times a large x (GELU's tanh form at a masked score of -1e4) was a
 * visible error */
KN_TEST(vec_math_tanh_accuracy_and_saturation) {
    double worst = 0;
    int not_one = 0;
    for (double x0 = -30.0; x0 < 30.0; x0 += 0.0113) {
        float x[16], y[16];
        for (int l = 0; l < 16; l++) x[l] = (float)(x0 + l * 0.0007);
        eval16(VF(tanh), x, y);
        for (int l = 0; l < 16; l++) {
            const double want = tanh((double)x[l]);
            if (fabs(want) > 1e-30) worst = fmax(worst, fabs(y[l] - want) / fabs(want));
            if ((float)want == 1.0f || (float)want == -1.0f) not_one += y[l] != (float)want;
        }
    }
    CHECK_MSG(worst < 3e-7, "tanh: max relative error %g", worst);
    CHECK_MSG(not_one == 0, "tanh: %d arguments where float's tanh is +-1 give something else", not_one);
    const float x[16] = {1e4f, -1e4f, 3e38f, -3e38f, INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e-30f, 9.5f, -9.5f, 8.0f, 0.5f, -0.5f, 20.0f};
    float y[16];
    eval16(VF(tanh), x, y);
    for (int l = 0; l < 6; l++) CHECK_MSG(y[l] == (x[l] > 0 ? 1.0f : -1.0f), "tanh(%g) = %.9g", x[l], y[l]);
    CHECK_MSG(isnan(y[6]), "tanh(NaN) = %g", y[6]);
    CHECK_MSG(y[7] == 0.0f && !signbit(y[7]) && y[8] == 0.0f && signbit(y[8]), "tanh(+-0) = %g, %g", y[7], y[8]);
    CHECK_MSG(fabs(y[9] - 1e-30) < 3e-37, "tanh(1e-30) = %.9g", y[9]);
    CHECK_MSG(y[10] == 1.0f && y[11] == -1.0f && y[15] == 1.0f, "tanh(+-9.5) = %.9g, %.9g", y[10], y[11]);
    CHECK_MSG(fabs(y[13] - 0.46211715726f) < 2e-7 && y[14] == -y[13], "tanh(0.5) = %.9g", y[13]);
}

/* tanh near saturation, every float with 7.5 <= |x| <= 9.6 (both signs): within 3e-7 of double,
 * never above 1 in magnitude (the rational function reaches 1 + 2^-23 from 8.12743 on: x is clamped
 * to 8.12742043, where it is exactly 1), exactly +-1 wherever float's tanh is (|x| >= 9.0109) */
KN_TEST(vec_math_tanh_every_float_near_saturation) {
    double worst = 0;
    float at = 0;
    long over = 0, not_one = 0;
    const uint32_t lo = 0x40f00000u /* 7.5f */, hi = 0x4119999au /* 9.6f */;
    for (int sign = 0; sign < 2; sign++) {
        float x[16], y[16];
        int k = 0;
        for (uint32_t bits = lo; bits < hi; bits++) {
            uint32_t b = bits | (sign ? 0x80000000u : 0u);
            memcpy(&x[k++], &b, sizeof b);
            if (k < 16) continue;
            k = 0;
            eval16(VF(tanh), x, y);
            for (int l = 0; l < 16; l++) {
                const double want = tanh((double)x[l]);
                const double e = fabs(y[l] - want) / fabs(want);
                if (e > worst) worst = e, at = x[l];
                over += fabsf(y[l]) > 1.0f;
                if ((float)want == 1.0f || (float)want == -1.0f) not_one += y[l] != (float)want;
            }
        }
    }
    CHECK_MSG(worst < 3e-7, "tanh: max relative error %g at x = %.9g", worst, at);
    CHECK_MSG(over == 0, "tanh: %ld results above 1 in magnitude", over);
    CHECK_MSG(not_one == 0, "tanh: %ld arguments where float's tanh is +-1 give something else", not_one);
}

/* erf in ulps over every 127th float with FLT_MIN <= |x| <= 5 (both signs): at most 2.5 ulp
 * (measured on every 7th float: 2.45 ulp at x = 0.476, the small piece; the erfc piece, reduced in
 * base 2 at 8 lanes, within 2 ulp) */
KN_TEST(vec_math_erf_ulps) {
    double worst = 0;
    float at = 0;
    for (int sign = 0; sign < 2; sign++) {
        float x[16], y[16];
        int k = 0;
        for (uint32_t bits = 0x00800000u; bits < 0x40a00000u /* 5.0f */; bits += 127) {
            uint32_t b = bits | (sign ? 0x80000000u : 0u);
            memcpy(&x[k++], &b, sizeof b);
            if (k < 16) continue;
            k = 0;
            eval16(VF(erf), x, y);
            for (int l = 0; l < 16; l++) {
                const double e = ulps(y[l], erf((double)x[l]));
                if (e > worst) worst = e, at = x[l];
            }
        }
    }
    CHECK_MSG(worst <= 2.5, "erf: %.3f ulp at x = %.9g", worst, at);
}

/* exp over its whole range against double: relative error for normal results, within 1.5 units of
 * the last place for subnormal ones (the scaling rounds once), inf above 88.72, 0 far below */
static double rel_err(double got, double want) { return fabs(got - want) / fabs(want); }
KN_TEST(vec_math_exp_accuracy_and_extremes) {
    double worst = 0, worst_sub = 0, worst_neg = 0;
    float at = 0;
    for (double x0 = -104.0; x0 < 88.7; x0 += 0.0131) {
        float x[16], y[16], yn[16], nx[16];
        for (int l = 0; l < 16; l++) x[l] = (float)(x0 + l * 0.0007), nx[l] = -x[l];
        eval16(VF(exp), x, y);
        eval16(VF(exp_neg), nx, yn);
        for (int l = 0; l < 16; l++) {
            const double want = exp((double)x[l]);
            if (want >= 1.1754943508222875e-38) {
                const double e = rel_err(y[l], want);
                if (e > worst) worst = e, at = x[l];
                if (x[l] >= -87.3f && x[l] <= 88.7f) worst_neg = fmax(worst_neg, rel_err(yn[l], want));
            } else if (want < 3e38) {
                worst_sub = fmax(worst_sub, fabs(y[l] - want) / 1.401298464324817e-45);
            }
        }
    }
    CHECK_MSG(worst < 3e-7, "exp: max relative error %g at x = %.9g", worst, at);
    CHECK_MSG(worst_sub <= 1.5, "exp: subnormal results off by %g units", worst_sub);
    CHECK_MSG(worst_neg < 4e-7, "exp(-x): max relative error %g", worst_neg);
    const float x[16] = {89.0f, 1e30f, INFINITY, -INFINITY, -200.0f, -104.0f, NAN, 0.0f,
                         -0.0f, 1.0f, -1.0f, 88.7f, -87.0f, -50.0f, 10.0f, -10.0f};
    float y[16];
    eval16(VF(exp), x, y);
    CHECK_MSG(isinf(y[0]) && isinf(y[1]) && isinf(y[2]), "exp of large = %g %g %g", y[0], y[1], y[2]);
    CHECK_MSG(y[3] == 0.0f && y[4] == 0.0f && y[5] == 0.0f, "exp of very negative = %g %g %g", y[3], y[4], y[5]);
    CHECK_MSG(isnan(y[6]), "exp(NaN) = %g", y[6]);
    CHECK_MSG(y[7] == 1.0f && y[8] == 1.0f, "exp(+-0) = %g %g", y[7], y[8]);
    for (int l = 9; l < 16; l++) CHECK_MSG(rel_err(y[l], exp((double)x[l])) < 3e-7, "exp(%g) = %.9g", x[l], y[l]);
}

/* exp_neg_ftz (Softmax's exp(-d), d = max - x >= 0): exp_neg's value bit for bit on [0, 87.3]; a
 * normal result up to the underflow limit 126 ln2; exactly +0 past it and at d = inf (a masked
 * entry); NaN kept */
KN_TEST(vec_math_exp_neg_ftz) {
    long differ = 0;
    for (double d0 = 0.0; d0 < 87.3; d0 += 0.0131) {
        float d[16], a[16], b[16];
        for (int l = 0; l < 16; l++) d[l] = fminf((float)(d0 + l * 0.0007), 87.3f);
        eval16(VF(exp_neg), d, a);
        eval16(VF(exp_neg_ftz), d, b);
        differ += memcmp(a, b, sizeof a) != 0;
    }
    CHECK_MSG(differ == 0, "exp_neg_ftz differs from exp_neg on [0, 87.3] in %ld vectors", differ);
    const float d[16] = {87.3366f, 88.0f, 100.0f, 104.0f, 1e30f, INFINITY, NAN, 0.0f,
                         -0.0f, 87.33654f, 87.3f, 50.0f, 1.0f, 0.5f, 20.0f, 87.0f};
    float y[16];
    eval16(VF(exp_neg_ftz), d, y);
    for (int l = 0; l < 6; l++) CHECK_MSG(y[l] == 0.0f && !signbit(y[l]), "exp(-%g) = %g, not +0", d[l], y[l]);
    CHECK_MSG(isnan(y[6]), "exp(-NaN) = %g", y[6]);
    CHECK_MSG(y[7] == 1.0f && y[8] == 1.0f, "exp(-+-0) = %g %g", y[7], y[8]);
    CHECK_MSG(y[9] >= 1.17549435e-38f && y[9] < 1.25e-38f, "exp(-87.33654) = %g: not normal", y[9]);
    for (int l = 10; l < 16; l++) CHECK_MSG(rel_err(y[l], exp(-(double)d[l])) < 4e-7, "exp(-%g) = %.9g", d[l], y[l]);
}

/* erf and the two GELU forms against double precision, and at the extremes */
static double ref_gelu_erf(double x) { return 0.5 * x * erfc(-x * 0.70710678118654752); }
/* 0.5 x (1 + tanh(u)) as x / (1 + exp(-2u)): 1 + tanh(u) cancels in double too */
static double ref_gelu_tanh(double x) {
    return x / (1.0 + exp(-2.0 * 0.79788456080286536 * (x + 0.044715 * x * x * x)));
}
KN_TEST(vec_math_erf_gelu_accuracy) {
    double we = 0, wg = 0, wt = 0;
    float ae = 0, ag = 0, at = 0;
    for (double x0 = -14.0; x0 < 10.0; x0 += 0.0097) {
        float x[16], e[16], g[16], t[16];
        for (int l = 0; l < 16; l++) x[l] = (float)(x0 + l * 0.0005);
        eval16(VF(erf), x, e);
        eval16(VF(gelu_erf), x, g);
        eval16(VF(gelu_tanh), x, t);
        for (int l = 0; l < 16; l++) {
            const double xe = erf((double)x[l]), xg = ref_gelu_erf(x[l]), xt = ref_gelu_tanh(x[l]);
            if (fabs(xe) > 1e-30 && rel_err(e[l], xe) > we) we = rel_err(e[l], xe), ae = x[l];
            if (fabs(xg) > 1e-30 && rel_err(g[l], xg) > wg) wg = rel_err(g[l], xg), ag = x[l];
            /* the float argument 2u carries a relative error of a few ulp, which the sigmoid's
             * far tail turns into |2u| times that */
            const double xd = x[l], u2 = 1.5957691216057308 * (xd + 0.044715 * xd * xd * xd);
            const double et = rel_err(t[l], xt) / (1.0 + 0.2 * fabs(u2));
            if (x[l] > -9.9f && fabs(xt) > 1e-30 && et > wt) wt = et, at = x[l];
        }
    }
    CHECK_MSG(we < 3e-7, "erf: max relative error %g at x = %.9g", we, ae);
    CHECK_MSG(wg < 2e-6, "gelu (erf): max relative error %g at x = %.9g", wg, ag);
    CHECK_MSG(wt < 1e-6, "gelu (tanh): max relative error / (1 + |2u| / 5) %g at x = %.9g", wt, at);
    const float x[16] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e30f, -1e30f, 5.0f,
                         -5.0f, 1e-30f, 100.0f, -20.0f, -100.0f, 0.5f, -0.5f, 3.9f};
    float e[16], g[16], t[16];
    eval16(VF(erf), x, e);
    eval16(VF(gelu_erf), x, g);
    eval16(VF(gelu_tanh), x, t);
    CHECK_MSG(e[0] == 1.0f && e[1] == -1.0f && e[5] == 1.0f && e[6] == -1.0f && e[7] == 1.0f && e[8] == -1.0f,
              "erf at the ends: %g %g %g %g %g %g", e[0], e[1], e[5], e[6], e[7], e[8]);
    CHECK_MSG(isnan(e[2]) && isnan(g[2]) && isnan(t[2]), "NaN in gives %g %g %g", e[2], g[2], t[2]);
    CHECK_MSG(e[3] == 0.0f && !signbit(e[3]) && e[4] == 0.0f && signbit(e[4]), "erf(+-0) = %g %g", e[3], e[4]);
    CHECK_MSG(g[3] == 0.0f && t[3] == 0.0f, "gelu(0) = %g %g", g[3], t[3]);
    CHECK_MSG(g[10] == 100.0f && t[10] == 100.0f, "gelu(100) = %.9g %.9g", g[10], t[10]);
    CHECK_MSG(g[11] == 0.0f && t[11] == 0.0f && g[12] == 0.0f && t[12] == 0.0f, "gelu(-20), gelu(-100) = %g %g %g %g",
              g[11], t[11], g[12], t[12]);
    CHECK_MSG(isinf(g[0]) && isinf(t[0]), "gelu(inf) = %g %g", g[0], t[0]);
}
#else
KN_TEST(vec_math_sigmoid_silu_accuracy) { KN_SKIP("no AVX-512 or AVX2 + FMA in this build"); }
#endif

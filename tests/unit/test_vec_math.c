/* The CPU backend's vector sigmoid and SiLU (vec_math.h) against double precision, including the
 * extremes a fast exp gets wrong (overflowing exp, huge arguments, infinities, NaN). */
#include "backend/cpu/vec_math.h"
#include "unit.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
static void eval16(__m512 (*fn)(__m512), const float *x, float *y) { _mm512_storeu_ps(y, fn(_mm512_loadu_ps(x))); }

KN_TEST(vec_math_sigmoid_silu_accuracy) {
    double worst_s = 0, worst_silu = 0;
    for (double x0 = -87.0; x0 < 100.0; x0 += 0.0137) {
        float x[16], s[16], u[16];
        for (int l = 0; l < 16; l++) x[l] = (float)(x0 + l * 0.0007);
        eval16(kn_v16_sigmoid, x, s);
        eval16(kn_v16_silu, x, u);
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
            eval16(kn_v16_sigmoid, x, s);
            eval16(kn_v16_silu, x, u);
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
    eval16(kn_v16_sigmoid, x, s);
    eval16(kn_v16_silu, x, u);
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
        eval16(kn_v16_tanh, x, y);
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
    eval16(kn_v16_tanh, x, y);
    for (int l = 0; l < 6; l++) CHECK_MSG(y[l] == (x[l] > 0 ? 1.0f : -1.0f), "tanh(%g) = %.9g", x[l], y[l]);
    CHECK_MSG(isnan(y[6]), "tanh(NaN) = %g", y[6]);
    CHECK_MSG(y[7] == 0.0f && !signbit(y[7]) && y[8] == 0.0f && signbit(y[8]), "tanh(+-0) = %g, %g", y[7], y[8]);
    CHECK_MSG(fabs(y[9] - 1e-30) < 3e-37, "tanh(1e-30) = %.9g", y[9]);
    CHECK_MSG(y[10] == 1.0f && y[11] == -1.0f && y[15] == 1.0f, "tanh(+-9.5) = %.9g, %.9g", y[10], y[11]);
    CHECK_MSG(fabs(y[13] - 0.46211715726f) < 2e-7 && y[14] == -y[13], "tanh(0.5) = %.9g", y[13]);
}
#else
KN_TEST(vec_math_sigmoid_silu_accuracy) { KN_SKIP("no AVX-512 in this build"); }
#endif

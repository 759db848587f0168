/* Unary elementwise kernels: math functions, activations, logical/bitwise not, IsNaN/IsInf, Clip.
 *
 * Each operator has a table of row functions indexed by element type. float16/bfloat16 run
 * through the float32 function in chunks; integer types an operator allows but has no exact
 * kernel for go through the double function. */
#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/elementwise_f16.h"
#include "backend/cpu/vec_math.h"

#include <float.h>
#include <stdio.h>

typedef kn_ew_un_prm un_prm;

typedef void (*un_fn)(int64_t n, void *restrict o, const void *restrict x, const un_prm *p);

typedef struct un_op {
    un_fn fn[KILN_DTYPE_COUNT_];
    kiln_dtype out;  /* UNDEFINED: the input's type */
    bool via_double; /* integer inputs without a kernel of their own use fn[DOUBLE] */
    bool light;      /* a few operations an element: split over threads only for large tensors */
} un_op;

/* ------------------------------------------------------------------ row function generators */

#define UN_F32(name, EXPR)                                                                         \
    static void name##_f32(int64_t n, void *restrict o_, const void *restrict x_, const un_prm *p) { \
        float *restrict o = o_;                                                                    \
        const float *restrict xs = x_;                                                             \
        const float alpha = p->alpha, beta = p->beta, gamma = p->gamma;                            \
        (void)alpha, (void)beta, (void)gamma;                                                      \
        for (int64_t i = 0; i < n; i++) {                                                          \
            const float x = xs[i];                                                                 \
            o[i] = (EXPR);                                                                         \
        }                                                                                          \
    }
#define UN_F64(name, EXPR)                                                                         \
    static void name##_f64(int64_t n, void *restrict o_, const void *restrict x_, const un_prm *p) { \
        double *restrict o = o_;                                                                   \
        const double *restrict xs = x_;                                                            \
        const double alpha = p->alpha, beta = p->beta, gamma = p->gamma;                           \
        (void)alpha, (void)beta, (void)gamma;                                                      \
        for (int64_t i = 0; i < n; i++) {                                                          \
            const double x = xs[i];                                                                \
            o[i] = (EXPR);                                                                         \
        }                                                                                          \
    }
/* float -> bool (IsNaN, IsInf) */
#define UN_FB(name, sfx, T, EXPR)                                                                  \
    static void name##_##sfx(int64_t n, void *restrict o_, const void *restrict x_, const un_prm *p) { \
        uint8_t *restrict o = o_;                                                                  \
        const T *restrict xs = x_;                                                                 \
        const T alpha = (T)p->alpha, beta = (T)p->beta;                                           \
        (void)alpha, (void)beta;                                                                   \
        for (int64_t i = 0; i < n; i++) {                                                          \
            const T x = xs[i];                                                                     \
            o[i] = (uint8_t)(EXPR);                                                                \
        }                                                                                          \
    }
/* integers: T the type, U an unsigned type at least as wide (for wrapping arithmetic) */
/* EXPR may name T and U: local typedefs, since a macro argument's tokens are not substituted */
#define UN_INT(name, sfx, TY, UY, EXPR)                                                            \
    static void name##_##sfx(int64_t n, void *restrict o_, const void *restrict x_, const un_prm *p) { \
        typedef TY T;                                                                              \
        typedef UY U;                                                                              \
        (void)sizeof(U);                                                                           \
        T *restrict o = o_;                                                                        \
        const T *restrict xs = x_;                                                                 \
        (void)p;                                                                                   \
        for (int64_t i = 0; i < n; i++) {                                                          \
            const T x = xs[i];                                                                     \
            o[i] = (T)(EXPR);                                                                      \
        }                                                                                          \
    }
#define UN_SINTS(name, EXPR)                                                                       \
    UN_INT(name, i8, int8_t, uint32_t, EXPR)                                                       \
    UN_INT(name, i16, int16_t, uint32_t, EXPR)                                                     \
    UN_INT(name, i32, int32_t, uint32_t, EXPR)                                                     \
    UN_INT(name, i64, int64_t, uint64_t, EXPR)
#define UN_UINTS(name, EXPR)                                                                       \
    UN_INT(name, u8, uint8_t, uint32_t, EXPR)                                                      \
    UN_INT(name, u16, uint16_t, uint32_t, EXPR)                                                    \
    UN_INT(name, u32, uint32_t, uint32_t, EXPR)                                                    \
    UN_INT(name, u64, uint64_t, uint64_t, EXPR)

#define T_FLOATS(name) [KILN_DTYPE_FLOAT] = name##_f32, [KILN_DTYPE_DOUBLE] = name##_f64
#define T_SINTS(name)                                                                              \
    [KILN_DTYPE_INT8] = name##_i8, [KILN_DTYPE_INT16] = name##_i16, [KILN_DTYPE_INT32] = name##_i32, \
    [KILN_DTYPE_INT64] = name##_i64
#define T_UINTS(name)                                                                              \
    [KILN_DTYPE_UINT8] = name##_u8, [KILN_DTYPE_UINT16] = name##_u16,                              \
    [KILN_DTYPE_UINT32] = name##_u32, [KILN_DTYPE_UINT64] = name##_u64

/* float-only operators: one line each */
#define UN_FLOAT_OP(name, EXPR_F, EXPR_D)                                                          \
    UN_F32(name, EXPR_F)                                                                           \
    UN_F64(name, EXPR_D)                                                                           \
    static const un_op op_##name = {{T_FLOATS(name)}, KILN_DTYPE_UNDEFINED, false};
#define UN_FLOAT_OP_LIGHT(name, EXPR_F, EXPR_D)                                                    \
    UN_F32(name, EXPR_F)                                                                           \
    UN_F64(name, EXPR_D)                                                                           \
    static const un_op op_##name = {{T_FLOATS(name)}, KILN_DTYPE_UNDEFINED, false, true};
/* float operators that integer types may use through double */
#define UN_NUM_OP(name, EXPR_F, EXPR_D)                                                            \
    UN_F32(name, EXPR_F)                                                                           \
    UN_F64(name, EXPR_D)                                                                           \
    static const un_op op_##name = {{T_FLOATS(name)}, KILN_DTYPE_UNDEFINED, true};

#if defined(__AVX512F__)
/* The elements before o's next 64-byte boundary (at most n), for one masked vector ahead of the
 * loop, so that its stores are whole lines: numpy's and other callers' buffers are often 16 or 32
 * bytes past one, and a store across two lines every vector cost Sigmoid of 1x64x56x56 22% and
 * Exp 28% (standalone loop, Ice Lake Xeon, 1 thread, input 16 and output 32 bytes past a line).
 * Each element's value is the same either way. */
static inline int64_t un_v16_head(const float *o, int64_t n) {
    const uintptr_t a = (uintptr_t)o & 63;
    if (a == 0 || (a & 3) || n < 32) return 0;
    return (int64_t)(64 - a) / 4;
}
/* float rows through an AVX-512 function of vec_math.h: a masked head to o's line boundary
 * (un_v16_head), whole vectors, then one masked */
#define UN_V16(name, VFN)                                                                          \
    static void name##_f32(int64_t n, void *restrict o_, const void *restrict x_, const un_prm *p) { \
        float *restrict o = o_;                                                                    \
        const float *restrict xs = x_;                                                             \
        (void)p;                                                                                   \
        int64_t i = un_v16_head(o, n);                                                             \
        if (i) {                                                                                   \
            const __mmask16 m = kn_v16_tail(i);                                                    \
            _mm512_mask_storeu_ps(o, m, VFN(_mm512_maskz_loadu_ps(m, xs)));                        \
        }                                                                                          \
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(o + i, VFN(_mm512_loadu_ps(xs + i)));        \
        if (i < n) {                                                                               \
            const __mmask16 m = kn_v16_tail(n - i);                                                \
            _mm512_mask_storeu_ps(o + i, m, VFN(_mm512_maskz_loadu_ps(m, xs + i)));                \
        }                                                                                          \
    }
/* float operators with an AVX-512 float kernel (flags as UN_FLOAT_OP / UN_NUM_OP) */
#define UN_V16_OP(name, VFN, EXPR_F, EXPR_D, via_double)                                           \
    UN_V16(name, VFN)                                                                              \
    UN_F64(name, EXPR_D)                                                                           \
    static const un_op op_##name = {{T_FLOATS(name)}, KILN_DTYPE_UNDEFINED, via_double};
#elif defined(__AVX2__) && defined(__FMA__)
/* the same at 8 lanes (vec_math.h's kn_v8_*: the scalar loops stay scalar, the compiler keeps
 * their clamps as branches); VFN names the 16-lane function, kn_v16_ -> kn_v8_ */
#define UN_V8(name, VFN8)                                                                          \
    static void name##_f32(int64_t n, void *restrict o_, const void *restrict x_, const un_prm *p) { \
        (void)p;                                                                                   \
        KN_V8_MAP((float *)o_, (const float *)x_, n, VFN8);                                        \
    }
#define UN_V16_OP(name, VFN, EXPR_F, EXPR_D, via_double)                                           \
    UN_V8(name, KN_V8_OF_##VFN)                                                                    \
    UN_F64(name, EXPR_D)                                                                           \
    static const un_op op_##name = {{T_FLOATS(name)}, KILN_DTYPE_UNDEFINED, via_double};
#define KN_V8_OF_kn_v16_exp kn_v8_exp
#define KN_V8_OF_kn_v16_erf kn_v8_erf
#define KN_V8_OF_kn_v16_tanh kn_v8_tanh
#else
#define UN_V16_OP(name, VFN, EXPR_F, EXPR_D, via_double)                                           \
    UN_F32(name, EXPR_F)                                                                           \
    UN_F64(name, EXPR_D)                                                                           \
    static const un_op op_##name = {{T_FLOATS(name)}, KILN_DTYPE_UNDEFINED, via_double};
#endif

/* floor/ceil through rint (which the compiler vectorises without -fno-trapping-math) */
static inline float kn_floorf_v(float x) {
    float r = rintf(x);
    return r > x ? r - 1.0f : r;
}
static inline float kn_ceilf_v(float x) {
    float r = rintf(x);
    /* the sign of x: on (-1, -0.5] r + 1 is +0, ceil -0 */
    return copysignf(r < x ? r + 1.0f : r, x);
}

/* ------------------------------------------------------------------ math */

UN_F32(Abs, fabsf(x))
UN_F64(Abs, fabs(x))
UN_SINTS(Abs, x < 0 ? (U)0 - (U)x : (U)x)
UN_UINTS(Abs, x)
static const un_op op_Abs = {{T_FLOATS(Abs), T_SINTS(Abs), T_UINTS(Abs)}, 0, false, true};

UN_F32(Neg, -x)
UN_F64(Neg, -x)
UN_SINTS(Neg, (U)0 - (U)x)
UN_UINTS(Neg, (U)0 - (U)x)
static const un_op op_Neg = {{T_FLOATS(Neg), T_SINTS(Neg), T_UINTS(Neg)}, 0, false, true};

UN_F32(Sign, x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x))
UN_F64(Sign, x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x))
UN_SINTS(Sign, x > 0 ? 1 : (x < 0 ? -1 : 0))
UN_UINTS(Sign, x > 0 ? 1 : 0)
static const un_op op_Sign = {{T_FLOATS(Sign), T_SINTS(Sign), T_UINTS(Sign)}, 0, false, true};

UN_FLOAT_OP_LIGHT(Reciprocal, 1.0f / x, 1.0 / x)
static void Sqrt_f32(int64_t n, void *restrict o, const void *restrict x, const un_prm *p) {
    kn_ew_sqrt_f32(n, o, x);
}
UN_F64(Sqrt, sqrt(x))
static const un_op op_Sqrt = {{T_FLOATS(Sqrt)}, 0, false, true};
UN_V16_OP(Exp, kn_v16_exp, kn_ew_expf(x), exp(x), false)
UN_FLOAT_OP(Log, kn_ew_logf(x), log(x))
UN_FLOAT_OP_LIGHT(Ceil, kn_ceilf_v(x), ceil(x))
UN_FLOAT_OP_LIGHT(Floor, kn_floorf_v(x), floor(x))
UN_FLOAT_OP_LIGHT(Round, rintf(x), nearbyint(x)) /* the default rounding mode: half to even */
#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
/* vec_math.h's kn_v8_sincos, the lanes it leaves (|x| > 8192, inf, NaN) and the tail from libm
 * (glibc's scalar sinf / cosf alone: 3x ONNX Runtime's time, which runs Eigen's vector forms) */
static void sincos_f32(int64_t n, float *o, const float *x, int cos_form) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const int big = kn_v8_sincos_big(v);
        float keep[8];
        if (big) _mm256_storeu_ps(keep, v); /* o may be x */
        _mm256_storeu_ps(o + i, kn_v8_sincos(v, cos_form));
        if (big)
            for (int l = 0; l < 8; l++)
                if (big >> l & 1) o[i + l] = cos_form ? cosf(keep[l]) : sinf(keep[l]);
    }
    for (; i < n; i++) o[i] = cos_form ? cosf(x[i]) : sinf(x[i]);
}
static void Sin_f32(int64_t n, void *restrict o, const void *restrict x, const un_prm *p) {
    (void)p;
    sincos_f32(n, o, x, 0);
}
static void Cos_f32(int64_t n, void *restrict o, const void *restrict x, const un_prm *p) {
    (void)p;
    sincos_f32(n, o, x, 1);
}
UN_F64(Sin, sin(x))
UN_F64(Cos, cos(x))
static const un_op op_Sin = {{T_FLOATS(Sin)}, KILN_DTYPE_UNDEFINED, false};
static const un_op op_Cos = {{T_FLOATS(Cos)}, KILN_DTYPE_UNDEFINED, false};
#else
UN_FLOAT_OP(Sin, sinf(x), sin(x))
UN_FLOAT_OP(Cos, cosf(x), cos(x))
#endif
UN_FLOAT_OP(Tan, tanf(x), tan(x))
UN_FLOAT_OP(Asin, asinf(x), asin(x))
UN_FLOAT_OP(Acos, acosf(x), acos(x))
UN_FLOAT_OP(Atan, atanf(x), atan(x))
UN_FLOAT_OP(Sinh, sinhf(x), sinh(x))
UN_FLOAT_OP(Cosh, coshf(x), cosh(x))
UN_FLOAT_OP(Asinh, asinhf(x), asinh(x))
UN_FLOAT_OP(Acosh, acoshf(x), acosh(x))
UN_FLOAT_OP(Atanh, atanhf(x), atanh(x))
UN_V16_OP(Erf, kn_v16_erf, kn_ew_erff(x), erf(x), true)

UN_FB(IsNaN, f32, float, x != x)
UN_FB(IsNaN, f64, double, x != x)
static const un_op op_IsNaN = {{T_FLOATS(IsNaN)}, KILN_DTYPE_BOOL, false, true};
/* alpha: detect_positive, beta: detect_negative */
UN_FB(IsInf, f32, float, (x == INFINITY && alpha != 0) || (x == -INFINITY && beta != 0))
UN_FB(IsInf, f64, double, (x == INFINITY && alpha != 0) || (x == -INFINITY && beta != 0))
static const un_op op_IsInf = {{T_FLOATS(IsInf)}, KILN_DTYPE_BOOL, false, true};

UN_INT(Not, b, uint8_t, uint32_t, x == 0)
static const un_op op_Not = {{[KILN_DTYPE_BOOL] = Not_b}, 0, false, true};

UN_SINTS(BitwiseNot, ~(U)x)
UN_UINTS(BitwiseNot, ~(U)x)
static const un_op op_BitwiseNot = {{T_SINTS(BitwiseNot), T_UINTS(BitwiseNot)}, 0, false, true};

/* ------------------------------------------------------------------ activations */

UN_F32(Relu, x < 0.0f ? 0.0f : x)
UN_F64(Relu, x < 0.0 ? 0.0 : x)
UN_SINTS(Relu, x < 0 ? 0 : x)
UN_UINTS(Relu, x)
static const un_op op_Relu = {{T_FLOATS(Relu), T_SINTS(Relu), T_UINTS(Relu)}, 0, false, true};

UN_FLOAT_OP_LIGHT(LeakyRelu, x < 0.0f ? alpha * x : x, x < 0.0 ? alpha * x : x)
#if defined(__AVX512F__)
/* float through vec_math.h's kn_v16_sigmoid; a masked head to o's line boundary (un_v16_head) */
static void Sigmoid_f32(int64_t n, void *restrict o_, const void *restrict x_, const un_prm *p) {
    float *restrict o = o_;
    const float *restrict xs = x_;
    (void)p;
    int64_t i = un_v16_head(o, n);
    if (i) {
        const __mmask16 m = kn_v16_tail(i);
        _mm512_mask_storeu_ps(o, m, kn_v16_sigmoid(_mm512_maskz_loadu_ps(m, xs)));
    }
    for (; i < n; i += 16) {
        const __mmask16 m = kn_v16_tail(n - i);
        _mm512_mask_storeu_ps(o + i, m, kn_v16_sigmoid(_mm512_maskz_loadu_ps(m, xs + i)));
    }
}
UN_F64(Sigmoid, 1.0 / (1.0 + exp(-x)))
static const un_op op_Sigmoid = {{T_FLOATS(Sigmoid)}, KILN_DTYPE_UNDEFINED, false};
#elif defined(__AVX2__) && defined(__FMA__)
UN_V8(Sigmoid, kn_v8_sigmoid)
UN_F64(Sigmoid, 1.0 / (1.0 + exp(-x)))
static const un_op op_Sigmoid = {{T_FLOATS(Sigmoid)}, KILN_DTYPE_UNDEFINED, false};
#else
UN_FLOAT_OP(Sigmoid, kn_ew_sigmoidf(x), 1.0 / (1.0 + exp(-x)))
#endif
UN_V16_OP(Tanh, kn_v16_tanh, kn_ew_tanhf(x), tanh(x), false)

static inline double kn_clamp01(double v) {
    v = v < 0.0 ? 0.0 : v;
    return v > 1.0 ? 1.0 : v;
}
#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
/* the clamps by vmaxps/vminps (the compiler keeps the scalar form's two selects as branches: 2.9x
 * ONNX Runtime's time on an AVX2 CPU); the same operations, so the same results, NaN included
 * (each max/min takes the x-derived value as its second operand, which they return for NaN) */
static inline __m256 hard_sigmoid8(__m256 x, __m256 a, __m256 b) {
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(a, x), b);
    return _mm256_min_ps(_mm256_set1_ps(1.0f), _mm256_max_ps(_mm256_setzero_ps(), v));
}
static void HardSigmoid_f32(int64_t n, void *restrict o, const void *restrict x, const un_prm *p) {
    const __m256 a = _mm256_set1_ps(p->alpha), b = _mm256_set1_ps(p->beta);
#define HSIG8(v) hard_sigmoid8((v), a, b)
    KN_V8_MAP((float *)o, (const float *)x, n, HSIG8);
#undef HSIG8
}
UN_F64(HardSigmoid, kn_clamp01(alpha * x + beta))
static const un_op op_HardSigmoid = {{T_FLOATS(HardSigmoid)}, KILN_DTYPE_UNDEFINED, false, true};
static inline __m256 hard_swish8(__m256 x) {
    return _mm256_mul_ps(x, hard_sigmoid8(x, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f)));
}
UN_V8(HardSwish, hard_swish8)
UN_F64(HardSwish, x * kn_clamp01(x / 6.0 + 0.5))
static const un_op op_HardSwish = {{T_FLOATS(HardSwish)}, KILN_DTYPE_UNDEFINED, false, true};
#else
static inline float kn_clamp01f(float v) {
    v = v < 0.0f ? 0.0f : v;
    return v > 1.0f ? 1.0f : v;
}
UN_FLOAT_OP_LIGHT(HardSigmoid, kn_clamp01f(alpha * x + beta), kn_clamp01(alpha * x + beta))
UN_FLOAT_OP_LIGHT(HardSwish, x * kn_clamp01f(x * (1.0f / 6.0f) + 0.5f), x * kn_clamp01(x / 6.0 + 0.5))
#endif
UN_FLOAT_OP(Elu, x < 0.0f ? alpha * kn_ew_expm1f(x) : x, x < 0.0 ? alpha * expm1(x) : x)
UN_FLOAT_OP(Selu, gamma * (x > 0.0f ? x : alpha * kn_ew_expm1f(x)),
            gamma * (x > 0.0 ? x : alpha * expm1(x)))
static inline float kn_celuf(float x, float a) {
    float neg = a * kn_ew_expm1f(x / a);
    return (x > 0.0f ? x : 0.0f) + (neg < 0.0f ? neg : 0.0f);
}
static inline double kn_celu(double x, double a) {
    double neg = a * expm1(x / a);
    return (x > 0.0 ? x : 0.0) + (neg < 0.0 ? neg : 0.0);
}
UN_FLOAT_OP(Celu, kn_celuf(x, alpha), kn_celu(x, alpha))
/* log(1+e^x) without overflow: max(x,0) + log1p(e^-|x|) */
UN_FLOAT_OP(Softplus, (x > 0.0f ? x : 0.0f) + kn_ew_log1p_pos(kn_ew_expf_normal(-fabsf(x))),
            (x > 0.0 ? x : 0.0) + log1p(exp(-fabs(x))))
UN_FLOAT_OP(Softsign, x / (1.0f + fabsf(x)), x / (1.0 + fabs(x)))
UN_FLOAT_OP_LIGHT(ThresholdedRelu, x > alpha ? x : 0.0f, x > alpha ? x : 0.0)
/* alpha: lambd, beta: bias */
UN_NUM_OP(Shrink, x < -alpha ? x + beta : (x > alpha ? x - beta : 0.0f),
          x < -alpha ? x + beta : (x > alpha ? x - beta : 0.0))

UN_FLOAT_OP(Mish, kn_ew_mishf(x), x * tanh(log1p(exp(x))))

#if defined(__AVX512F__)
UN_V16(GeluErf, kn_v16_gelu_erf)
#elif defined(__AVX2__) && defined(__FMA__)
UN_V8(GeluErf, kn_v8_gelu_erf)
#else
UN_F32(GeluErf, kn_ew_gelu_erff(x))
#endif
UN_F64(GeluErf, x < -1.4142135623730951 ? 0.5 * x * erfc(-x * 0.70710678118654752)
                                          : 0.5 * x * (1.0 + erf(x * 0.70710678118654752)))
#if defined(__AVX512F__)
UN_V16(GeluTanh, kn_v16_gelu_tanh)
#elif defined(__AVX2__) && defined(__FMA__)
UN_V8(GeluTanh, kn_v8_gelu_tanh)
#else
UN_F32(GeluTanh, kn_ew_gelu_tanhf(x))
#endif
UN_F64(GeluTanh, 0.5 * x * (1.0 + tanh(0.79788456080286536 * (x + 0.044715 * x * x * x))))
static const un_op op_GeluErf = {{T_FLOATS(GeluErf)}, 0, false};
static const un_op op_GeluTanh = {{T_FLOATS(GeluTanh)}, 0, false};

UN_FLOAT_OP(Swish, x / (1.0f + kn_ew_expf_normal(-alpha * x)), x / (1.0 + exp(-alpha * x)))

/* Clip: bounds come per type in the parameters */
static void Clip_f32(int64_t n, void *restrict o_, const void *restrict x_, const un_prm *p) {
    float *restrict o = o_;
    const float *restrict xs = x_;
    const float lo = (float)p->lo_d, hi = (float)p->hi_d;
    for (int64_t i = 0; i < n; i++) {
        float v = xs[i];
        v = v < lo ? lo : v;
        o[i] = v > hi ? hi : v;
    }
}
static void Clip_f64(int64_t n, void *restrict o_, const void *restrict x_, const un_prm *p) {
    double *restrict o = o_;
    const double *restrict xs = x_;
    const double lo = p->lo_d, hi = p->hi_d;
    for (int64_t i = 0; i < n; i++) {
        double v = xs[i];
        v = v < lo ? lo : v;
        o[i] = v > hi ? hi : v;
    }
}
#define CLIP_INT(sfx, T, LO, HI)                                                                   \
    static void Clip_##sfx(int64_t n, void *restrict o_, const void *restrict x_, const un_prm *p) { \
        T *restrict o = o_;                                                                        \
        const T *restrict xs = x_;                                                                 \
        const T lo = (T)p->LO, hi = (T)p->HI;                                                      \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T v = xs[i];                                                                           \
            v = v < lo ? lo : v;                                                                   \
            o[i] = v > hi ? hi : v;                                                                \
        }                                                                                          \
    }
CLIP_INT(i8, int8_t, lo_i, hi_i)
CLIP_INT(i16, int16_t, lo_i, hi_i)
CLIP_INT(i32, int32_t, lo_i, hi_i)
CLIP_INT(i64, int64_t, lo_i, hi_i)
CLIP_INT(u8, uint8_t, lo_u, hi_u)
CLIP_INT(u16, uint16_t, lo_u, hi_u)
CLIP_INT(u32, uint32_t, lo_u, hi_u)
CLIP_INT(u64, uint64_t, lo_u, hi_u)
static const un_op op_Clip = {{T_FLOATS(Clip), T_SINTS(Clip), T_UINTS(Clip)}, 0, false, true};

/* ------------------------------------------------------------------ float16 in vectors */

/* float16 rows in 8-lane float32 vectors (elementwise_f16.h): each VFN computes what the operator's
 * float32 kernel computes (the same operations: vmaxps(0, x) is x < 0 ? 0 : x, NaN and -0
 * included), so each result is the float32 result rounded once to float16. Operators without an
 * entry (and, at the AVX-512 level, those on vec_math.h's 8-lane functions, which that level does
 * not define) take the chunked conversions of un_range. */
#if defined(KN_EW_F16_V8)
#define UN_H8(name, VFN)                                                                           \
    static void name##_f16(int64_t n, void *restrict o_, const void *restrict x_, const un_prm *p) { \
        const __m256 alpha8 = _mm256_set1_ps(p->alpha), beta8 = _mm256_set1_ps(p->beta);          \
        const __m256 lo8 = _mm256_set1_ps((float)p->lo_d), hi8 = _mm256_set1_ps((float)p->hi_d);  \
        (void)alpha8, (void)beta8, (void)lo8, (void)hi8;                                           \
        KN_H8_MAP((uint16_t *)o_, (const uint16_t *)x_, n, VFN);                                   \
    }
#define H8_ZERO _mm256_setzero_ps()
#define H8_ONE _mm256_set1_ps(1.0f)
#define H8_SIGN _mm256_set1_ps(-0.0f)
#define H8_LT0(v) _mm256_cmp_ps((v), H8_ZERO, _CMP_LT_OQ)
/* kn_clamp01f(v): v < 0 ? 0 : v, then v > 1 ? 1 : v */
#define H8_CLAMP01(v) _mm256_min_ps(H8_ONE, _mm256_max_ps(H8_ZERO, (v)))
#define H8_ABS(v) _mm256_andnot_ps(H8_SIGN, (v))
#define H8_NEG(v) _mm256_xor_ps(H8_SIGN, (v))
#define H8_SQRT(v) _mm256_sqrt_ps(v)
#define H8_RECIP(v) _mm256_div_ps(H8_ONE, (v))
#define H8_FLOOR(v) _mm256_round_ps((v), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
#define H8_CEIL(v) _mm256_round_ps((v), _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC)
#define H8_ROUND(v) _mm256_round_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define H8_SIGNUM(v)                                                                               \
    _mm256_blendv_ps(_mm256_blendv_ps((v), H8_ONE, _mm256_cmp_ps((v), H8_ZERO, _CMP_GT_OQ)),        \
                     _mm256_set1_ps(-1.0f), H8_LT0(v))
#define H8_RELU(v) _mm256_max_ps(H8_ZERO, (v))
#define H8_LEAKY(v) _mm256_blendv_ps((v), _mm256_mul_ps(alpha8, (v)), H8_LT0(v))
#define H8_THRELU(v) _mm256_and_ps(_mm256_cmp_ps((v), alpha8, _CMP_GT_OQ), (v))
#define H8_HSIG(v) H8_CLAMP01(_mm256_add_ps(_mm256_mul_ps(alpha8, (v)), beta8))
#define H8_HSWISH(v)                                                                               \
    _mm256_mul_ps((v), H8_CLAMP01(_mm256_add_ps(_mm256_mul_ps((v), _mm256_set1_ps(1.0f / 6.0f)),   \
                                                _mm256_set1_ps(0.5f))))
#define H8_SOFTSIGN(v) _mm256_div_ps((v), _mm256_add_ps(H8_ONE, H8_ABS(v)))
#define H8_CLIP(v) _mm256_min_ps(hi8, _mm256_max_ps(lo8, (v)))
UN_H8(Abs, H8_ABS)
UN_H8(Neg, H8_NEG)
UN_H8(Sqrt, H8_SQRT)
UN_H8(Reciprocal, H8_RECIP)
UN_H8(Floor, H8_FLOOR)
UN_H8(Ceil, H8_CEIL)
UN_H8(Round, H8_ROUND)
UN_H8(Sign, H8_SIGNUM)
UN_H8(Relu, H8_RELU)
UN_H8(LeakyRelu, H8_LEAKY)
UN_H8(ThresholdedRelu, H8_THRELU)
UN_H8(HardSigmoid, H8_HSIG)
UN_H8(HardSwish, H8_HSWISH)
UN_H8(Softsign, H8_SOFTSIGN)
UN_H8(Clip, H8_CLIP)
#if !defined(__AVX512F__)
UN_H8(Exp, kn_v8_exp)
UN_H8(Tanh, kn_v8_tanh)
UN_H8(Erf, kn_v8_erf)
UN_H8(Sigmoid, kn_v8_sigmoid)
UN_H8(GeluErf, kn_v8_gelu_erf)
UN_H8(GeluTanh, kn_v8_gelu_tanh)
#elif defined(KN_EW_F16_V16)
/* the AVX-512 level's float32 kernels of these are 16-lane (vec_math.h): the same at 16 lanes
 * (Gelu 1x128x3072 f16 spent half its time in the chunked path's conversions and copies) */
#define UN_H16(name, VFN)                                                                          \
    static void name##_f16(int64_t n, void *restrict o_, const void *restrict x_, const un_prm *p) { \
        (void)p;                                                                                   \
        KN_H16_MAP((uint16_t *)o_, (const uint16_t *)x_, n, VFN);                                  \
    }
UN_H16(Exp, kn_v16_exp)
UN_H16(Tanh, kn_v16_tanh)
UN_H16(Erf, kn_v16_erf)
UN_H16(Sigmoid, kn_v16_sigmoid)
UN_H16(GeluErf, kn_v16_gelu_erf)
UN_H16(GeluTanh, kn_v16_gelu_tanh)
#endif

/* The operator's float16 row function, or NULL. */
static un_fn un_f16_fn(const un_op *op) {
    static const struct {
        const un_op *op;
        un_fn fn;
    } tab[] = {
        {&op_Abs, Abs_f16},
        {&op_Neg, Neg_f16},
        {&op_Sqrt, Sqrt_f16},
        {&op_Reciprocal, Reciprocal_f16},
        {&op_Floor, Floor_f16},
        {&op_Ceil, Ceil_f16},
        {&op_Round, Round_f16},
        {&op_Sign, Sign_f16},
        {&op_Relu, Relu_f16},
        {&op_LeakyRelu, LeakyRelu_f16},
        {&op_ThresholdedRelu, ThresholdedRelu_f16},
        {&op_HardSigmoid, HardSigmoid_f16},
        {&op_HardSwish, HardSwish_f16},
        {&op_Softsign, Softsign_f16},
        {&op_Clip, Clip_f16},
#if !defined(__AVX512F__) || defined(KN_EW_F16_V16)
        {&op_Exp, Exp_f16},
        {&op_Tanh, Tanh_f16},
        {&op_Erf, Erf_f16},
        {&op_Sigmoid, Sigmoid_f16},
        {&op_GeluErf, GeluErf_f16},
        {&op_GeluTanh, GeluTanh_f16},
#endif
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (tab[i].op == op) return tab[i].fn;
    return NULL;
}
#else
static un_fn un_f16_fn(const un_op *op) {
    (void)op;
    return NULL;
}
#endif

/* ------------------------------------------------------------------ driver */

typedef struct un_job {
    un_fn fn;
    kiln_dtype in_t, out_t, via;
    const char *x;
    char *o;
    size_t isz, osz;
    const un_prm *p;
} un_job;

static void un_range(void *arg, int64_t b, int64_t e) {
    const un_job *j = arg;
    if (j->via == j->in_t) {
        j->fn(e - b, j->o + b * (int64_t)j->osz, j->x + b * (int64_t)j->isz, j->p);
        return;
    }
    /* convert a chunk to the kernel's type, run, convert back (or write bools directly) */
    double bin[KN_EW_CHUNK], bout[KN_EW_CHUNK];
    for (int64_t s = b; s < e; s += KN_EW_CHUNK) {
        int64_t n = e - s < KN_EW_CHUNK ? e - s : KN_EW_CHUNK;
        kn_ew_cast_n(j->in_t, j->x + s * (int64_t)j->isz, j->via, bin, n, 1);
        if (j->out_t == j->in_t) {
            j->fn(n, bout, bin, j->p);
            kn_ew_cast_n(j->via, bout, j->out_t, j->o + s * (int64_t)j->osz, n, 1);
        } else {
            j->fn(n, j->o + s * (int64_t)j->osz, bin, j->p);
        }
    }
}

static kiln_status un_run(kn_kernel_ctx *c, const un_op *op, const un_prm *p) {
    const kn_tensor *x = c->n_inputs > 0 ? c->in[0] : NULL;
    if (!x || x->kind != KN_VALUE_TENSOR)
        return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "input 0 must be a tensor");
    kiln_dtype it = x->dtype, ot = op->out ? op->out : it, via = it;
    un_fn fn = (int)it < KILN_DTYPE_COUNT_ ? op->fn[it] : NULL;
    if (!fn && it == KILN_DTYPE_FLOAT16) fn = un_f16_fn(op);
    if (!fn && kn_ew_is_half(it) && op->fn[KILN_DTYPE_FLOAT]) {
        fn = op->fn[KILN_DTYPE_FLOAT];
        via = KILN_DTYPE_FLOAT;
    } else if (!fn && op->via_double && kn_dtype_is_int(it)) {
        fn = op->fn[KILN_DTYPE_DOUBLE];
        via = KILN_DTYPE_DOUBLE;
    }
    if (!fn)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s is not supported",
                               kiln_dtype_name(it));
    kn_tensor *o;
    KN_TRY(kn_ctx_output(c, 0, ot, x->rank, x->dims, &o));
    un_job j = {fn, it, ot, via, x->data, o->data, kiln_dtype_size(it), kiln_dtype_size(ot), p};
    /* half and integer-through-double paths convert every element: not light */
    bool light = op->light && via == it;
    const int64_t grain = light ? kn_parallel_grain_light(c->pool, KN_EW_GRAIN_LIGHT) : KN_EW_GRAIN;
    kn_parallel_for(c->pool, kn_tensor_count(x), grain, un_range, &j);
    return KILN_OK;
}

/* Operators without attributes. */
#define UN_PLAIN(op)                                                                               \
    kiln_status kn_cpu_ew_##op(kn_kernel_ctx *c) {                                                 \
        un_prm p;                                                                                  \
        memset(&p, 0, sizeof p);                                                                   \
        return un_run(c, &op_##op, &p);                                                            \
    }
UN_PLAIN(Abs)
UN_PLAIN(Neg)
UN_PLAIN(Reciprocal)
UN_PLAIN(Sqrt)
UN_PLAIN(Exp)
UN_PLAIN(Log)
UN_PLAIN(Ceil)
UN_PLAIN(Floor)
UN_PLAIN(Round)
UN_PLAIN(Sign)
UN_PLAIN(Sin)
UN_PLAIN(Cos)
UN_PLAIN(Tan)
UN_PLAIN(Asin)
UN_PLAIN(Acos)
UN_PLAIN(Atan)
UN_PLAIN(Sinh)
UN_PLAIN(Cosh)
UN_PLAIN(Asinh)
UN_PLAIN(Acosh)
UN_PLAIN(Atanh)
UN_PLAIN(Erf)
UN_PLAIN(IsNaN)
UN_PLAIN(Not)
UN_PLAIN(BitwiseNot)
UN_PLAIN(Relu)
UN_PLAIN(Sigmoid)
UN_PLAIN(Tanh)
UN_PLAIN(HardSwish)
UN_PLAIN(Softplus)
UN_PLAIN(Softsign)
UN_PLAIN(Mish)

/* The attributes of the operators of KN_EW_ATTR_KERNELS, read once (at compile time when the run
 * has a plan: kn_ctx_params). */
kiln_status kn_ew_un_prepare(const kn_node *n, void *params) {
    static const struct {
        const char *op;
        float alpha, beta, gamma;
    } dflt[] = {
        {"LeakyRelu", 0.01f, 0.0f, 0.0f},
        {"HardSigmoid", 0.2f, 0.5f, 0.0f},
        {"Elu", 1.0f, 0.0f, 0.0f},
        {"Selu", 1.67326319217681884765625f, 0.0f, 1.05070102214813232421875f},
        {"Celu", 1.0f, 0.0f, 0.0f},
        {"ThresholdedRelu", 1.0f, 0.0f, 0.0f},
        {"Swish", 1.0f, 0.0f, 0.0f},
    };
    un_prm *p = params;
    memset(p, 0, sizeof *p);
    const char *op = n->op_type;
    if (!strcmp(op, "IsInf")) {
        p->alpha = kn_attr_int(n, "detect_positive", 1) ? 1.0f : 0.0f;
        p->beta = kn_attr_int(n, "detect_negative", 1) ? 1.0f : 0.0f;
    } else if (!strcmp(op, "Shrink")) {
        p->alpha = kn_attr_float(n, "lambd", 0.5f);
        p->beta = kn_attr_float(n, "bias", 0.0f);
    } else if (!strcmp(op, "Gelu")) {
        const char *mode = kn_attr_string(n, "approximate", "none");
        p->mode = !strcmp(mode, "tanh") ? 1 : !strcmp(mode, "none") ? 0 : -1;
    } else if (!strcmp(op, "Clip")) {
        if (n->opset < 11) {
            p->lo_d = kn_attr_float(n, "min", -FLT_MAX);
            p->hi_d = kn_attr_float(n, "max", FLT_MAX);
        }
    } else if (!strcmp(op, "Mod")) {
        p->mode = kn_attr_int(n, "fmod", 0) != 0;
    } else if (!strcmp(op, "BitShift")) {
        const char *dir = kn_attr_string(n, "direction", "");
        p->mode = !strcmp(dir, "LEFT") ? 0 : !strcmp(dir, "RIGHT") ? 1 : -1;
    } else {
        for (size_t i = 0; i < sizeof dflt / sizeof dflt[0]; i++)
            if (!strcmp(op, dflt[i].op)) {
                p->alpha = kn_attr_float(n, "alpha", dflt[i].alpha);
                p->beta = kn_attr_float(n, "beta", dflt[i].beta);
                p->gamma = kn_attr_float(n, "gamma", dflt[i].gamma);
            }
    }
    return KILN_OK;
}

/* Operators with attributes: their parameters from the plan, or read now. */
#define UN_ATTRS(op)                                                                               \
    kiln_status kn_cpu_ew_##op(kn_kernel_ctx *c) {                                                 \
        un_prm local;                                                                              \
        const void *p;                                                                             \
        KN_TRY(kn_ctx_params(c, kn_ew_un_prepare, &local, &p));                                    \
        return un_run(c, &op_##op, p);                                                             \
    }
UN_ATTRS(LeakyRelu)
UN_ATTRS(HardSigmoid)
UN_ATTRS(Elu)
UN_ATTRS(Selu)
UN_ATTRS(Celu)
UN_ATTRS(ThresholdedRelu)
UN_ATTRS(Swish)
UN_ATTRS(IsInf)
UN_ATTRS(Shrink)

kiln_status kn_cpu_ew_Gelu(kn_kernel_ctx *c) {
    un_prm local;
    const void *pp;
    KN_TRY(kn_ctx_params(c, kn_ew_un_prepare, &local, &pp));
    const un_prm *p = pp;
    if (p->mode == 1) return un_run(c, &op_GeluTanh, p);
    if (p->mode == 0) return un_run(c, &op_GeluErf, p);
    return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "approximate='%s' is not 'none' or 'tanh'",
                           kn_attr_string(c->node, "approximate", "none"));
}

/* Clip: bounds from attributes (opset < 11) or optional scalar inputs of the input's type. */
kiln_status kn_cpu_ew_Clip(kn_kernel_ctx *c) {
    const kn_tensor *x = c->n_inputs > 0 ? c->in[0] : NULL;
    if (!x) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "input 0 is missing");
    kiln_dtype t = x->dtype;
    un_prm p;
    memset(&p, 0, sizeof p);
    p.lo_d = -INFINITY;
    p.hi_d = INFINITY;
    switch (t) {
    case KILN_DTYPE_INT8: p.lo_i = INT8_MIN, p.hi_i = INT8_MAX; break;
    case KILN_DTYPE_INT16: p.lo_i = INT16_MIN, p.hi_i = INT16_MAX; break;
    case KILN_DTYPE_INT32: p.lo_i = INT32_MIN, p.hi_i = INT32_MAX; break;
    case KILN_DTYPE_INT64: p.lo_i = INT64_MIN, p.hi_i = INT64_MAX; break;
    case KILN_DTYPE_UINT8: p.hi_u = UINT8_MAX; break;
    case KILN_DTYPE_UINT16: p.hi_u = UINT16_MAX; break;
    case KILN_DTYPE_UINT32: p.hi_u = UINT32_MAX; break;
    case KILN_DTYPE_UINT64: p.hi_u = UINT64_MAX; break;
    default: break;
    }
    if (c->node->opset < 11) {
        KN_CTX_PRM(c, kn_ew_un_prepare, un_prm, prm);
        p.lo_d = prm->lo_d;
        p.hi_d = prm->hi_d;
    } else {
        for (int k = 1; k <= 2 && k < c->n_inputs; k++) {
            const kn_tensor *b = c->in[k];
            if (!b) continue;
            if (b->dtype != t)
                return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "%s is %s but the input is %s",
                                       k == 1 ? "min" : "max", kiln_dtype_name(b->dtype), kiln_dtype_name(t));
            if (kn_tensor_count(b) != 1)
                return kn_kernel_error(c, KILN_ERR_SHAPE, "%s must hold one element", k == 1 ? "min" : "max");
            double d = kn_tensor_get_f64(b, 0);
            int64_t i = kn_tensor_get_i64(b, 0);
            if (k == 1) p.lo_d = d, p.lo_i = i, p.lo_u = (uint64_t)i;
            else p.hi_d = d, p.hi_i = i, p.hi_u = (uint64_t)i;
        }
    }
    return un_run(c, &op_Clip, &p);
}

/* Internal header of the CPU elementwise family: the broadcast iterator shared by the binary,
 * ternary and variadic kernels, bulk half-precision conversion, vectorisable float math, and the
 * kernel entry points that src/backend/cpu/elementwise.c lists in its table. */
#ifndef KN_CPU_ELEMENTWISE_IMPL_H
#define KN_CPU_ELEMENTWISE_IMPL_H

#include "backend/cpu/cpu.h"
#include "ir/tensor.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Elements per task when a kernel splits work over the intra-op threads: transcendental
 * functions (tens of flops an element) split early; memory-bound arithmetic only when a task
 * is worth more than waking a thread (a few microseconds). */
#define KN_EW_GRAIN 16384
#define KN_EW_GRAIN_LIGHT 65536
/* Elements converted at a time when half-precision data goes through float32 loops. */
#define KN_EW_CHUNK 512

/* ------------------------------------------------------------------ broadcasting */

#define KN_EW_MAX_OPS 4 /* the output and up to three inputs */

/* An iteration plan over an output shape and inputs that broadcast to it. Dimensions that are
 * contiguous in every operand are merged, so a same-shape operation is one flat loop and a bias
 * add is [outer, inner] with a stride-0 operand. Operand 0 is the output (dense row-major). */
typedef struct kn_ew_plan {
    int rank; /* >= 1 */
    int n_ops;
    int64_t count;
    int64_t dims[KILN_MAX_RANK];
    int64_t strides[KN_EW_MAX_OPS][KILN_MAX_RANK]; /* in elements; 0 where broadcast */
} kn_ew_plan;

/* The numpy broadcast of n shapes into dims_out/rank_out. On failure returns KILN_ERR_SHAPE with
 * a message naming the shapes (without a node prefix). */
kiln_status kn_ew_broadcast_shape(int n, const int *ranks, const int64_t *const *dims, int *rank_out,
                                  int64_t *dims_out);
/* Plans the iteration of n_in inputs (ranks/dims) broadcast to the output shape. Fails with
 * KILN_ERR_SHAPE when an input does not broadcast to it. */
kiln_status kn_ew_plan_init(kn_ew_plan *p, int out_rank, const int64_t *out_dims, int n_in,
                            const int *in_ranks, const int64_t *const *in_dims);

/* One run of n elements along the innermost dimension: ptr[k] points at operand k's first
 * element, step[k] is 1 or 0 (a broadcast operand repeats one element). */
typedef void (*kn_ew_row_fn)(void *ctx, int64_t n, char *const *ptr, const int64_t *step);
/* `rows` such runs at once: run r of operand k starts at ptr[k] + r * row_bstride[k] bytes. Whole
 * rows go through one call, so short rows (a per-channel scale over 7x7 maps) cost no per-row
 * dispatch. ptr and row_bstride have KN_EW_MAX_OPS entries (unused ones NULL and 0). */
typedef void (*kn_ew_rows_fn)(void *ctx, int64_t rows, int64_t n, char *const *ptr,
                              const int64_t *row_bstride, const int64_t *step);

/* Defines `name`, a kn_ew_rows_fn looping a (static, inlinable) kn_ew_row_fn over the rows. */
#define KN_EW_ROWS_OF(name, one)                                                                   \
    static void name(void *ctx, int64_t rows, int64_t n, char *const *ptr, const int64_t *rs,      \
                     const int64_t *step) {                                                        \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            char *p_[KN_EW_MAX_OPS];                                                               \
            for (int k = 0; k < KN_EW_MAX_OPS; k++) p_[k] = ptr[k] ? ptr[k] + r * rs[k] : NULL;    \
            one(ctx, n, p_, step);                                                                 \
        }                                                                                          \
    }

/* Runs fn over the whole plan, split over the pool in tasks of at least grain elements. base[k]:
 * operand k's data; esize[k]: its element size in bytes. */
void kn_ew_plan_run(const kn_ew_plan *p, kn_threadpool *pool, int64_t grain, char *const *base,
                    const size_t *esize, kn_ew_rows_fn fn, void *ctx);

/* ------------------------------------------------------------------ half precision */

void kn_ew_f16_to_f32(const uint16_t *src, float *dst, int64_t n);
void kn_ew_f32_to_f16(const float *src, uint16_t *dst, int64_t n);
void kn_ew_bf16_to_f32(const uint16_t *src, float *dst, int64_t n);
void kn_ew_f32_to_bf16(const float *src, uint16_t *dst, int64_t n);
/* Converts n halves (FLOAT16 or BFLOAT16 per dtype) to float / back. */
void kn_ew_half_to_f32(kiln_dtype dtype, const void *src, float *dst, int64_t n);
void kn_ew_f32_to_half(kiln_dtype dtype, const float *src, void *dst, int64_t n);

static inline int kn_ew_is_half(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16;
}

/* ------------------------------------------------------------------ vectorisable float math */

/* Plain C the compiler vectorises (no calls, no branches). Accuracy against glibc (measured over
 * dense sweeps): exp/expm1 ~2 ulp, tanh/sigmoid ~3 ulp, erf < 4e-7 relative. */

#if defined(__FMA__) || defined(__AVX2__)
#define KN_FMAF(a, b, c) fmaf((a), (b), (c))
#else
#define KN_FMAF(a, b, c) ((a) * (b) + (c))
#endif

static inline float kn_ew_u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t kn_ew_f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* exp(r) - 1 for |r| <= ln2/2: Taylor through r^8 (truncation < 3e-10 relative). */
static inline float kn_ew_expm1_small(float r) {
    float p = 1.0f / 40320.0f;
    p = KN_FMAF(p, r, 1.0f / 5040.0f);
    p = KN_FMAF(p, r, 1.0f / 720.0f);
    p = KN_FMAF(p, r, 1.0f / 120.0f);
    p = KN_FMAF(p, r, 1.0f / 24.0f);
    p = KN_FMAF(p, r, 1.0f / 6.0f);
    p = KN_FMAF(p, r, 0.5f);
    return KN_FMAF(p, r * r, r);
}

/* x = k*ln2 + r with round-to-nearest k (the 1.5*2^23 trick) and a two-part ln2. */
static inline float kn_ew_reduce(float x, int32_t *k_out) {
    const float shift = 12582912.0f; /* 1.5 * 2^23 */
    float t = KN_FMAF(x, 1.44269504088896341f, shift);
    *k_out = (int32_t)(kn_ew_f2u(t) - kn_ew_f2u(shift));
    float k = t - shift;
    float r = KN_FMAF(k, -0.693359375f, x);
    return KN_FMAF(k, 2.12194440e-4f, r);
}

/* exp(x); overflow gives inf, deep underflow 0 (subnormal results are kept). */
static inline float kn_ew_expf(float x) {
    x = x < -104.0f ? -104.0f : x;
    x = x > 89.0f ? 89.0f : x;
    int32_t k;
    float r = kn_ew_reduce(x, &k);
    float p = kn_ew_expm1_small(r) + 1.0f;
    int32_t k1 = k >> 1, k2 = k - k1; /* two factors keep 2^k representable for subnormals */
    return p * kn_ew_u2f((uint32_t)(k1 + 127) << 23) * kn_ew_u2f((uint32_t)(k2 + 127) << 23);
}

/* exp(x) where results below FLT_MIN may flush to 0 (one scale factor, a shorter polynomial:
 * ~20% cheaper); for sigmoid-like uses, where such results vanish in 1 + exp(x) anyway. */
static inline float kn_ew_expf_normal(float x) {
    x = x < -87.3f ? -87.3f : x; /* exp(-87.3) is just above FLT_MIN */
    x = x > 88.8f ? 88.8f : x;   /* k = 128 gives inf, as exp overflows */
    int32_t k;
    float r = kn_ew_reduce(x, &k);
    float p = 1.0f / 5040.0f; /* Taylor through r^7: truncation < 6e-9 */
    p = KN_FMAF(p, r, 1.0f / 720.0f);
    p = KN_FMAF(p, r, 1.0f / 120.0f);
    p = KN_FMAF(p, r, 1.0f / 24.0f);
    p = KN_FMAF(p, r, 1.0f / 6.0f);
    p = KN_FMAF(p, r, 0.5f);
    p = KN_FMAF(p, r, 1.0f);
    p = KN_FMAF(p, r, 1.0f);
    return p * kn_ew_u2f((uint32_t)(k + 127) << 23);
}

/* exp(x) - 1, accurate near 0; valid for x <= 88 (inputs above are clamped). */
static inline float kn_ew_expm1f(float x) {
    x = x < -88.0f ? -88.0f : x;
    x = x > 88.0f ? 88.0f : x;
    int32_t k;
    float r = kn_ew_reduce(x, &k);
    float q = kn_ew_expm1_small(r);
    float s = kn_ew_u2f((uint32_t)(k + 127) << 23); /* 2^k, normal for |k| <= 127 */
    return KN_FMAF(s, q, s - 1.0f);
}

static inline float kn_ew_sigmoidf(float x) { return 1.0f / (1.0f + kn_ew_expf_normal(-x)); }

static inline float kn_ew_tanhf(float x) {
    float y = x < -9.0f ? -9.0f : x; /* tanh(9) rounds to 1 in float */
    y = y > 9.0f ? 9.0f : y;
    float e = kn_ew_expm1f(2.0f * y);
    return e / (e + 2.0f);
}

/* erfc(z) for z >= 1: exp(-z^2) * P(1/(1+z/2)), P a degree-9 least-squares fit (made for kiln
 * against double erfc, max relative error 4e-9 in exact arithmetic, 3e-7 in float). zz + zz_err
 * is z^2 to about twice float precision (exp(-z^2) magnifies an error in z^2 by z^2). */
static inline float kn_ew_erfc_big_zz(float z, float zz, float zz_err) {
    float t = 1.0f / KN_FMAF(0.5f, z, 1.0f);
    float p = -0.06221897719239693f;
    p = KN_FMAF(p, t, 0.3068335952751246f);
    p = KN_FMAF(p, t, -0.5409791232182688f);
    p = KN_FMAF(p, t, 0.3438449109991216f);
    p = KN_FMAF(p, t, -0.07327800652558988f);
    p = KN_FMAF(p, t, 0.22288953791938423f);
    p = KN_FMAF(p, t, 0.23772982255294986f);
    p = KN_FMAF(p, t, 0.283223532480251f);
    p = KN_FMAF(p, t, 0.2820143514707887f);
    p = KN_FMAF(p, t, 2.5065902964891325e-06f);
    return kn_ew_expf(-zz) * (1.0f - zz_err) * p;
}

/* The rounding error of ab = a*b, exactly: a fused multiply-add, or Dekker's splitting where the
 * target has none. */
static inline float kn_ew_mul_err(float a, float b, float ab) {
#if defined(__FMA__) || defined(__AVX2__)
    return fmaf(a, b, -ab);
#else
    float ca = 4097.0f * a, cb = 4097.0f * b; /* 2^12 + 1 splits a float's 24 bits in halves */
    float ahi = ca - (ca - a), alo = a - ahi;
    float bhi = cb - (cb - b), blo = b - bhi;
    return ((ahi * bhi - ab) + ahi * blo + alo * bhi) + alo * blo;
#endif
}

static inline float kn_ew_erfc_big(float z) {
    float zz = z * z;
    return kn_ew_erfc_big_zz(z, zz, kn_ew_mul_err(z, z, zz));
}

/* erf(z) for |z| < 1: its Maclaurin series through z^21 (truncation < 2e-9). */
static inline float kn_ew_erf_small(float z) {
    float s = z * z;
    float p = -1.0f / (3628800.0f * 21.0f);
    p = KN_FMAF(p, s, 1.0f / (362880.0f * 19.0f));
    p = KN_FMAF(p, s, -1.0f / (40320.0f * 17.0f));
    p = KN_FMAF(p, s, 1.0f / (5040.0f * 15.0f));
    p = KN_FMAF(p, s, -1.0f / (720.0f * 13.0f));
    p = KN_FMAF(p, s, 1.0f / (120.0f * 11.0f));
    p = KN_FMAF(p, s, -1.0f / (24.0f * 9.0f));
    p = KN_FMAF(p, s, 1.0f / (6.0f * 7.0f));
    p = KN_FMAF(p, s, -1.0f / (2.0f * 5.0f));
    p = KN_FMAF(p, s, 1.0f / 3.0f);
    p = KN_FMAF(p, -s, 1.0f); /* the signs alternate: 1 - s/3 + s^2/10 - ... */
    return 1.12837916709551257f * z * p;
}

static inline float kn_ew_erff(float x) {
    float a = fabsf(x);
    float big = 1.0f - kn_ew_erfc_big(a < 1.0f ? 1.0f : (a > 10.0f ? 10.0f : a));
    big = copysignf(big, x);
    float small = kn_ew_erf_small(a < 1.0f ? x : 0.0f);
    return a < 1.0f ? small : big; /* NaN fails a < 1 and is NaN in big */
}

/* log(x): x = 2^e * m with m in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(s), s = (m-1)/(m+1), by
 * its odd series through s^13 (|s| < 0.172: truncation < 1e-11). Subnormals are rescaled;
 * log(0) = -inf, log(<0) = NaN, log(inf) = inf. */
static inline float kn_ew_logf(float x) {
    int sub = x < 1.17549435e-38f; /* subnormal, zero or negative */
    float xs = sub ? x * 8388608.0f : x;
    uint32_t u = kn_ew_f2u(xs);
    int32_t e = (int32_t)(u >> 23) - 127 - (sub ? 23 : 0);
    float m = kn_ew_u2f((u & 0x007fffffu) | 0x3f800000u);
    int big = m > 1.41421356f;
    m = big ? 0.5f * m : m;
    e += big;
    float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
    float p = 1.0f / 13.0f;
    p = KN_FMAF(p, s2, 1.0f / 11.0f);
    p = KN_FMAF(p, s2, 1.0f / 9.0f);
    p = KN_FMAF(p, s2, 1.0f / 7.0f);
    p = KN_FMAF(p, s2, 1.0f / 5.0f);
    p = KN_FMAF(p, s2, 1.0f / 3.0f);
    float lm = KN_FMAF(2.0f * s * s2, p, 2.0f * s);
    float fe = (float)e;
    float r = KN_FMAF(fe, 0.693359375f, KN_FMAF(fe, -2.12194440e-4f, lm));
    /* specials by bit masks: a select on x would let the compiler sink the division into a
     * branch, which -ftrapping-math then keeps from vectorising */
    uint32_t bits = kn_ew_f2u(r);
    uint32_t m_zero = 0u - (uint32_t)(x == 0.0f), m_inf = 0u - (uint32_t)(x == INFINITY);
    uint32_t m_nan = 0u - (uint32_t)!(x >= 0.0f);
    bits = (bits & ~m_zero) | (0xff800000u & m_zero);
    bits = (bits & ~m_inf) | (0x7f800000u & m_inf);
    bits = (bits & ~m_nan) | (0x7fc00000u & m_nan);
    return kn_ew_u2f(bits);
}

/* log(1 + y) for y >= 0 (Softplus): log of the rounded sum, corrected by its rounding error. */
static inline float kn_ew_log1p_pos(float y) {
    float u = 1.0f + y;
    float c = (u - 1.0f) - y;
    return kn_ew_logf(u) - c / u;
}

/* 0.5 x (1 + erf(x/sqrt2)); below x/sqrt2 = -1 as 0.5 x erfc(-x/sqrt2), keeping relative
 * accuracy where 1 + erf cancels */
static inline float kn_ew_gelu_erff(float x) {
    /* below x = -10 sqrt2 the result is below 1e-43: 0 with x's sign (as kn_v16_gelu_erf), not
     * erfc(10) (a subnormal, where the clamp below puts it) times a huge x */
    if (x < -14.1421356f) return 0.0f * x;
    float z = x * 0.70710678118654752f;
    float a = fabsf(z);
    /* erfc(|z|) for |z| >= 1, with z^2 = x^2/2 from x (z itself carries x/sqrt2's rounding) */
    float xc = fabsf(x) < 1.41421356f ? 1.41421356f : (fabsf(x) > 14.1421356f ? 14.1421356f : fabsf(x));
    float xx = xc * xc;
    float ec = kn_ew_erfc_big_zz(xc * 0.70710678118654752f, 0.5f * xx, 0.5f * kn_ew_mul_err(xc, xc, xx));
    float es = kn_ew_erf_small(a < 1.0f ? z : 0.0f);                       /* erf(z), |z| < 1 */
    float one_plus_erf = a < 1.0f ? 1.0f + es : (z > 0.0f ? 2.0f - ec : ec);
    return 0.5f * x * one_plus_erf;
}
/* 0.5 x (1 + tanh(u)) = x * sigmoid(2u) */
static inline float kn_ew_gelu_tanhf(float x) {
    float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    /* below x = -10 the result is below 2e-37 (and x^3 may overflow): 0 with x's sign */
    return x < -10.0f ? 0.0f * x : x / (1.0f + kn_ew_expf_normal(-2.0f * u));
}

/* x * tanh(softplus(x)) = x * m / (m + 2) with m = e^x (e^x + 2): no log, no cancellation */
static inline float kn_ew_mishf(float x) {
    float e = kn_ew_expf_normal(x < 20.0f ? x : 20.0f);
    float m = e * (e + 2.0f);
    return x < 20.0f ? x * m / (m + 2.0f) : x;
}

/* ------------------------------------------------------------------ kernels (elementwise_*.c) */

/* sqrt over n floats with vector instructions where the target has them (the compiler keeps
 * sqrtf scalar for errno's sake). */
void kn_ew_sqrt_f32(int64_t n, float *o, const float *x);


/* The operators with attributes (unary, and Clip before opset 11, Mod, BitShift): read once at
 * compile time (kn_ew_un_prepare). */
#define KN_EW_ATTR_KERNELS(X)                                                                      \
    X(IsInf) X(LeakyRelu) X(HardSigmoid) X(Elu) X(Selu) X(Celu) X(ThresholdedRelu) X(Shrink)       \
    X(Gelu) X(Swish) X(Clip) X(Mod) X(BitShift)

/* Cast and CastLike: attributes read once (kn_ew_cast_prepare). */
#define KN_EW_CAST_KERNELS(X) X(Cast) X(CastLike)

#define KN_EW_KERNELS(X)                                                                           \
    X(Abs) X(Neg) X(Reciprocal) X(Sqrt) X(Exp) X(Log) X(Ceil) X(Floor) X(Round) X(Sign) X(Sin)     \
    X(Cos) X(Tan) X(Asin) X(Acos) X(Atan) X(Sinh) X(Cosh) X(Asinh) X(Acosh) X(Atanh) X(Erf)        \
    X(IsNaN) X(Not) X(BitwiseNot) X(Relu) X(Sigmoid)                                               \
    X(HardSwish) X(Tanh) X(Softplus) X(Softsign)                                                   \
    X(Mish)                                                                                        \
    X(Add) X(Sub) X(Mul) X(Div) X(Pow) X(BitwiseAnd) X(BitwiseOr)                                  \
    X(BitwiseXor) X(And) X(Or) X(Xor) X(Equal) X(Less) X(LessOrEqual) X(Greater)                   \
    X(GreaterOrEqual) X(PRelu) X(Sum) X(Mean) X(Max) X(Min) X(Where)

#define KN_EW_DECLARE(op) kiln_status kn_cpu_ew_##op(kn_kernel_ctx *c);
KN_EW_KERNELS(KN_EW_DECLARE)
KN_EW_ATTR_KERNELS(KN_EW_DECLARE)
KN_EW_CAST_KERNELS(KN_EW_DECLARE)
#undef KN_EW_DECLARE

/* Cast and CastLike's attributes (their prepare hook, kn_ew_cast_prepare) */
typedef struct kn_ew_cast_prm {
    int saturate;
    int round_mode;  /* float8e8m0 targets: up, down, nearest (0-2); -1 not one of them */
    kiln_dtype to;   /* Cast; UNDEFINED: missing or not an element type (the call says why) */
} kn_ew_cast_prm;
kiln_status kn_ew_cast_prepare(const kn_node *n, void *params);

/* A unary kernel's parameters: its attributes (alpha/beta/gamma with the operator's defaults,
 * IsInf's detect_* as 1/0, Shrink's lambd/bias; Gelu's, Mod's and BitShift's mode in `mode`), and
 * Clip's bounds, which come from its inputs at each call (from opset 11) or its min/max attributes
 * (the hook's lo_d/hi_d). */
typedef struct kn_ew_un_prm {
    float alpha, beta, gamma;
    int mode;              /* Gelu: 0 erf, 1 tanh, -1 neither (an error at run time); Mod: fmod;
                            * BitShift: 0 LEFT, 1 RIGHT, -1 neither (an error at run time) */
    double lo_d, hi_d;     /* Clip bounds for float types */
    int64_t lo_i, hi_i;    /* ... signed integers */
    uint64_t lo_u, hi_u;   /* ... unsigned integers */
} kn_ew_un_prm;
/* The prepare hook (kn_params_fn) of KN_EW_ATTR_KERNELS. */
kiln_status kn_ew_un_prepare(const kn_node *n, void *params);

/* Cast of n elements between two element types (numeric, bool, half, float8, string). saturate
 * applies to float8 targets. Used by Cast, CastLike and the mixed-type paths of Pow. */
kiln_status kn_ew_cast_n(kiln_dtype from, const void *src, kiln_dtype to, void *dst, int64_t n,
                         int saturate);
/* Whether kn_ew_cast_n handles a pair. */
int kn_ew_cast_supported(kiln_dtype from, kiln_dtype to);

#endif

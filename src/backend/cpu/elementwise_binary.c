/* Binary, variadic and ternary elementwise kernels with numpy broadcasting: arithmetic,
 * comparison, logic, bitwise ops, Pow, Mod, PRelu, Sum/Mean/Max/Min and Where.
 *
 * Every operator has a table of inner-loop functions indexed by element type. An inner loop
 * gets a run of n output elements and two inputs that each either advance (step 1) or repeat one
 * element (step 0); the four cases are separate loops so each vectorises. float16/bfloat16 go
 * through the float32 loop in chunks. */
#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/elementwise_f16.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* rows runs of n elements; run r of operand k starts r * r<k> bytes after its pointer; within a
 * run the inputs advance by sa/sb (1) or repeat one element (0). */
typedef void (*bin_fn)(int64_t rows, int64_t n, void *o, const void *a, const void *b, int64_t ro,
                       int64_t ra, int64_t rb, int64_t sa, int64_t sb);

typedef struct bin_op {
    bin_fn fn[KILN_DTYPE_COUNT_];
    bool bool_out; /* comparisons and logic: the output is bool */
} bin_op;

/* EXPR may name the types T and U: they are local typedefs, since a macro argument's tokens are
 * not themselves substituted. */
#define BIN_FN(name, sfx, TY, TOY, UY, EXPR)                                                       \
    static void name##_##sfx(int64_t rows, int64_t n, void *o0, const void *a0, const void *b0,    \
                             int64_t ro, int64_t ra, int64_t rb, int64_t sa, int64_t sb) {        \
        typedef TY T;                                                                              \
        typedef UY U;                                                                              \
        typedef TOY TO;                                                                            \
        (void)sizeof(U);                                                                           \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            TO *restrict o = (TO *)((char *)o0 + r * ro);                                          \
            const T *restrict a = (const T *)((const char *)a0 + r * ra);                          \
            const T *restrict b = (const T *)((const char *)b0 + r * rb);                          \
            if (sa && sb) {                                                                        \
                for (int64_t i = 0; i < n; i++) {                                                  \
                    const T x = a[i], y = b[i];                                                    \
                    (void)y;                                                                       \
                    o[i] = (TO)(EXPR);                                                             \
                }                                                                                  \
            } else if (sa) {                                                                       \
                const T y = b[0];                                                                  \
                (void)y;                                                                           \
                for (int64_t i = 0; i < n; i++) {                                                  \
                    const T x = a[i];                                                              \
                    o[i] = (TO)(EXPR);                                                             \
                }                                                                                  \
            } else if (sb) {                                                                       \
                const T x = a[0];                                                                  \
                for (int64_t i = 0; i < n; i++) {                                                  \
                    const T y = b[i];                                                              \
                    (void)y;                                                                       \
                    o[i] = (TO)(EXPR);                                                             \
                }                                                                                  \
            } else {                                                                               \
                const T x = a[0], y = b[0];                                                        \
                (void)y;                                                                           \
                const TO v = (TO)(EXPR);                                                           \
                for (int64_t i = 0; i < n; i++) o[i] = v;                                          \
            }                                                                                      \
        }                                                                                          \
    }

/* U: a type to compute in (unsigned for integers, so overflow wraps instead of being undefined;
 * 8/16-bit types use uint32_t so integer promotion cannot overflow an int). */
#define BIN_F(name, TO, EXPR)                                                                      \
    BIN_FN(name, f32, float, TO, float, EXPR)                                                      \
    BIN_FN(name, f64, double, TO, double, EXPR)
#define BIN_S(name, TO, EXPR)                                                                      \
    BIN_FN(name, i8, int8_t, TO, uint32_t, EXPR)                                                   \
    BIN_FN(name, i16, int16_t, TO, uint32_t, EXPR)                                                 \
    BIN_FN(name, i32, int32_t, TO, uint32_t, EXPR)                                                 \
    BIN_FN(name, i64, int64_t, TO, uint64_t, EXPR)
#define BIN_U(name, TO, EXPR)                                                                      \
    BIN_FN(name, u8, uint8_t, TO, uint32_t, EXPR)                                                  \
    BIN_FN(name, u16, uint16_t, TO, uint32_t, EXPR)                                                \
    BIN_FN(name, u32, uint32_t, TO, uint32_t, EXPR)                                                \
    BIN_FN(name, u64, uint64_t, TO, uint64_t, EXPR)
/* same expression for every numeric type, output of the input's type */
#define BIN_NUM(name, EXPR)                                                                        \
    BIN_FN(name, f32, float, float, float, EXPR)                                                   \
    BIN_FN(name, f64, double, double, double, EXPR)                                                \
    BIN_FN(name, i8, int8_t, int8_t, uint32_t, EXPR)                                               \
    BIN_FN(name, i16, int16_t, int16_t, uint32_t, EXPR)                                            \
    BIN_FN(name, i32, int32_t, int32_t, uint32_t, EXPR)                                            \
    BIN_FN(name, i64, int64_t, int64_t, uint64_t, EXPR)                                            \
    BIN_FN(name, u8, uint8_t, uint8_t, uint32_t, EXPR)                                             \
    BIN_FN(name, u16, uint16_t, uint16_t, uint32_t, EXPR)                                          \
    BIN_FN(name, u32, uint32_t, uint32_t, uint32_t, EXPR)                                          \
    BIN_FN(name, u64, uint64_t, uint64_t, uint64_t, EXPR)

#if defined(KN_EW_F16_V8)
/* float16 rows in 8-lane float32 vectors (elementwise_f16.h): VEXPR, an __m256 expression of the
 * lanes x and y, computes what EXPR computes for float, so each result is the float result
 * rounded once to float16 */
#define BIN_H8X(name, VEXPR, OT, ST, STP)                                                          \
    static inline __m256 name##_h8op(__m256 x, __m256 y) { return (VEXPR); }                       \
    static void name##_f16(int64_t rows, int64_t n, void *o0, const void *a0, const void *b0,      \
                           int64_t ro, int64_t ra, int64_t rb, int64_t sa, int64_t sb) {          \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            OT *o = (OT *)((char *)o0 + r * ro);                                                   \
            const uint16_t *a = (const uint16_t *)((const char *)a0 + r * ra);                     \
            const uint16_t *b = (const uint16_t *)((const char *)b0 + r * rb);                     \
            int64_t i = 0;                                                                         \
            if (sa && sb) {                                                                        \
                for (; i + 16 <= n; i += 16) {                                                     \
                    const __m256 v0 = name##_h8op(kn_h8_load(a + i), kn_h8_load(b + i));           \
                    const __m256 v1 = name##_h8op(kn_h8_load(a + i + 8), kn_h8_load(b + i + 8));   \
                    ST(o + i, v0);                                                        \
                    ST(o + i + 8, v1);                                                    \
                }                                                                                  \
                for (; i + 8 <= n; i += 8) ST(o + i, name##_h8op(kn_h8_load(a + i), kn_h8_load(b + i))); \
                if (i < n)                                                                         \
                    STP(o + i, n - i,                                                 \
                                     name##_h8op(kn_h8_load_part(a + i, n - i), kn_h8_load_part(b + i, n - i))); \
            } else if (sa) {                                                                       \
                const __m256 y = kn_h8_splat(b);                                                   \
                for (; i + 16 <= n; i += 16) {                                                     \
                    const __m256 v0 = name##_h8op(kn_h8_load(a + i), y);                           \
                    const __m256 v1 = name##_h8op(kn_h8_load(a + i + 8), y);                       \
                    ST(o + i, v0);                                                        \
                    ST(o + i + 8, v1);                                                    \
                }                                                                                  \
                for (; i + 8 <= n; i += 8) ST(o + i, name##_h8op(kn_h8_load(a + i), y));  \
                if (i < n) STP(o + i, n - i, name##_h8op(kn_h8_load_part(a + i, n - i), y)); \
            } else if (sb) {                                                                       \
                const __m256 x = kn_h8_splat(a);                                                   \
                for (; i + 16 <= n; i += 16) {                                                     \
                    const __m256 v0 = name##_h8op(x, kn_h8_load(b + i));                           \
                    const __m256 v1 = name##_h8op(x, kn_h8_load(b + i + 8));                       \
                    ST(o + i, v0);                                                        \
                    ST(o + i + 8, v1);                                                    \
                }                                                                                  \
                for (; i + 8 <= n; i += 8) ST(o + i, name##_h8op(x, kn_h8_load(b + i)));  \
                if (i < n) STP(o + i, n - i, name##_h8op(x, kn_h8_load_part(b + i, n - i))); \
            } else {                                                                               \
                OT v[8];                                                                           \
                ST(v, name##_h8op(kn_h8_splat(a), kn_h8_splat(b)));                       \
                for (; i < n; i++) o[i] = v[0];                                                    \
            }                                                                                      \
        }                                                                                          \
    }
#define BIN_H8(name, VEXPR) BIN_H8X(name, VEXPR, uint16_t, kn_h8_store, kn_h8_store_part)
/* comparisons: 8 bools (0/1) from the lanes' compare masks */
#define BIN_H8_CMP(name, PRED) BIN_H8X(name, _mm256_cmp_ps(x, y, PRED), uint8_t, kn_h8_store_bool, kn_h8_store_bool_part)
#define T_H(name) , [KILN_DTYPE_FLOAT16] = name##_f16
#else
#define BIN_H8(name, VEXPR)
#define BIN_H8_CMP(name, PRED)
#define T_H(name)
#endif

#define T_F(name) [KILN_DTYPE_FLOAT] = name##_f32, [KILN_DTYPE_DOUBLE] = name##_f64
#define T_S(name)                                                                                  \
    [KILN_DTYPE_INT8] = name##_i8, [KILN_DTYPE_INT16] = name##_i16, [KILN_DTYPE_INT32] = name##_i32, \
    [KILN_DTYPE_INT64] = name##_i64
#define T_U(name)                                                                                  \
    [KILN_DTYPE_UINT8] = name##_u8, [KILN_DTYPE_UINT16] = name##_u16,                              \
    [KILN_DTYPE_UINT32] = name##_u32, [KILN_DTYPE_UINT64] = name##_u64
#define T_NUM(name) T_F(name), T_S(name), T_U(name)

/* ------------------------------------------------------------------ arithmetic */

BIN_NUM(Add, (U)x + (U)y)
BIN_NUM(Sub, (U)x - (U)y)
BIN_NUM(Mul, (U)x * (U)y)
BIN_H8(Add, _mm256_add_ps(x, y))
BIN_H8(Sub, _mm256_sub_ps(x, y))
BIN_H8(Mul, _mm256_mul_ps(x, y))
static const bin_op op_Add = {{T_NUM(Add) T_H(Add)}, false};
static const bin_op op_Sub = {{T_NUM(Sub) T_H(Sub)}, false};
static const bin_op op_Mul = {{T_NUM(Mul) T_H(Mul)}, false};

/* integer division truncates toward zero; x/0 gives 0 and MIN/-1 wraps (instead of trapping) */
BIN_F(Div, T, x / y)
BIN_S(Div, T, y == 0 ? (T)0 : (y == -1 ? (T)((U)0 - (U)x) : (T)(x / y)))
BIN_U(Div, T, y == 0 ? (T)0 : (T)(x / y))
BIN_H8(Div, _mm256_div_ps(x, y))
static const bin_op op_Div = {{T_F(Div), T_S(Div), T_U(Div) T_H(Div)}, false};

/* Mod with fmod=1: the remainder has the dividend's sign (C's fmod and %). */
BIN_FN(ModC, f32, float, float, float, fmodf(x, y))
BIN_FN(ModC, f64, double, double, double, fmod(x, y))
BIN_S(ModC, T, (y == 0 || y == -1) ? (T)0 : (T)(x % y))
BIN_U(ModC, T, y == 0 ? (T)0 : (T)(x % y))
static const bin_op op_ModC = {{T_F(ModC), T_S(ModC), T_U(ModC)}, false};

/* Mod with fmod=0: the remainder has the divisor's sign (Python's %); x % 0 is NaN for floats,
 * 0 for integers. */
static inline float kn_pymodf(float x, float y) {
    float r = fmodf(x, y);
    if (r != 0.0f) {
        if ((r < 0.0f) != (y < 0.0f)) r += y;
    } else {
        r = copysignf(0.0f, y);
    }
    return r;
}
static inline double kn_pymod(double x, double y) {
    double r = fmod(x, y);
    if (r != 0.0) {
        if ((r < 0.0) != (y < 0.0)) r += y;
    } else {
        r = copysign(0.0, y);
    }
    return r;
}
#define KN_PYMOD_INT(T, x, y)                                                                      \
    ((y) == 0 || (y) == -1 ? (T)0 : (T)((x) % (y) != 0 && (((x) % (y) < 0) != ((y) < 0)) ? (x) % (y) + (y) : (x) % (y)))
BIN_FN(ModPy, f32, float, float, float, kn_pymodf(x, y))
BIN_FN(ModPy, f64, double, double, double, kn_pymod(x, y))
BIN_S(ModPy, T, KN_PYMOD_INT(T, x, y))
BIN_U(ModPy, T, y == 0 ? (T)0 : (T)(x % y))
static const bin_op op_ModPy = {{T_F(ModPy), T_S(ModPy), T_U(ModPy)}, false};

/* Max/Min propagate NaN like numpy's maximum/minimum */
BIN_F(Max, T, x != x ? x : (x > y ? x : y))
BIN_S(Max, T, x > y ? x : y)
BIN_U(Max, T, x > y ? x : y)
BIN_F(Min, T, x != x ? x : (x < y ? x : y))
BIN_S(Min, T, x < y ? x : y)
BIN_U(Min, T, x < y ? x : y)
/* x != x ? x : (x > y ? x : y): x where x > y or x is NaN, else y (NaN y included) */
BIN_H8(Max, _mm256_blendv_ps(y, x, _mm256_or_ps(_mm256_cmp_ps(x, y, _CMP_GT_OQ), _mm256_cmp_ps(x, x, _CMP_UNORD_Q))))
BIN_H8(Min, _mm256_blendv_ps(y, x, _mm256_or_ps(_mm256_cmp_ps(x, y, _CMP_LT_OQ), _mm256_cmp_ps(x, x, _CMP_UNORD_Q))))
static const bin_op op_Max = {{T_NUM(Max) T_H(Max)}, false};
static const bin_op op_Min = {{T_NUM(Min) T_H(Min)}, false};

/* PRelu: b is the slope */
BIN_F(PRelu, T, x < 0 ? y * x : x)
BIN_S(PRelu, T, x < 0 ? (U)y * (U)x : (U)x)
BIN_U(PRelu, T, x)
BIN_H8(PRelu, _mm256_blendv_ps(x, _mm256_mul_ps(y, x), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ)))
static const bin_op op_PRelu = {{T_NUM(PRelu) T_H(PRelu)}, false};

/* ------------------------------------------------------------------ comparison and logic */

/* PRED: the float16 rows' vcmpps predicate for EXPR (ordered, quiet: false where either is NaN, as
 * C's comparisons; Equal's EQ_OQ too) */
#define BIN_CMP(name, EXPR, PRED)                                                                  \
    BIN_F(name, uint8_t, EXPR)                                                                     \
    BIN_S(name, uint8_t, EXPR)                                                                     \
    BIN_U(name, uint8_t, EXPR)                                                                     \
    BIN_FN(name, b, uint8_t, uint8_t, uint32_t, EXPR)                                              \
    BIN_H8_CMP(name, PRED)                                                                         \
    static const bin_op op_##name = {{T_NUM(name), [KILN_DTYPE_BOOL] = name##_b T_H(name)}, true};
BIN_CMP(Equal, x == y, _CMP_EQ_OQ)
BIN_CMP(Less, x < y, _CMP_LT_OQ)
BIN_CMP(LessOrEqual, x <= y, _CMP_LE_OQ)
BIN_CMP(Greater, x > y, _CMP_GT_OQ)
BIN_CMP(GreaterOrEqual, x >= y, _CMP_GE_OQ)

BIN_FN(And, b, uint8_t, uint8_t, uint32_t, (x != 0) & (y != 0))
BIN_FN(Or, b, uint8_t, uint8_t, uint32_t, (x != 0) | (y != 0))
BIN_FN(Xor, b, uint8_t, uint8_t, uint32_t, (x != 0) ^ (y != 0))
static const bin_op op_And = {{[KILN_DTYPE_BOOL] = And_b}, true};
static const bin_op op_Or = {{[KILN_DTYPE_BOOL] = Or_b}, true};
static const bin_op op_Xor = {{[KILN_DTYPE_BOOL] = Xor_b}, true};

BIN_S(BitwiseAnd, T, (U)x & (U)y)
BIN_U(BitwiseAnd, T, (U)x & (U)y)
BIN_S(BitwiseOr, T, (U)x | (U)y)
BIN_U(BitwiseOr, T, (U)x | (U)y)
BIN_S(BitwiseXor, T, (U)x ^ (U)y)
BIN_U(BitwiseXor, T, (U)x ^ (U)y)
static const bin_op op_BitwiseAnd = {{T_S(BitwiseAnd), T_U(BitwiseAnd)}, false};
static const bin_op op_BitwiseOr = {{T_S(BitwiseOr), T_U(BitwiseOr)}, false};
static const bin_op op_BitwiseXor = {{T_S(BitwiseXor), T_U(BitwiseXor)}, false};

/* BitShift: a shift outside [0, bits) gives 0 (left, or right of a non-negative value) or -1
 * (right shift of a negative value), as the ONNX reference defines it */
#define KN_BITS(T) ((int)(sizeof(T) * 8))
BIN_S(ShiftL, T, (y < 0 || y >= KN_BITS(T)) ? (U)0 : (U)x << y)
BIN_U(ShiftL, T, y >= (T)KN_BITS(T) ? (U)0 : (U)x << y)
BIN_S(ShiftR, T, (y < 0 || y >= KN_BITS(T)) ? (T)(x < 0 ? -1 : 0) : (T)(x >> y))
BIN_U(ShiftR, T, y >= (T)KN_BITS(T) ? (T)0 : (T)(x >> y))
static const bin_op op_ShiftL = {{T_S(ShiftL), T_U(ShiftL)}, false};
static const bin_op op_ShiftR = {{T_S(ShiftR), T_U(ShiftR)}, false};

/* ------------------------------------------------------------------ driver */

typedef struct bin_ctx {
    bin_fn fn;
    kiln_dtype dtype; /* input element type */
    bool half;        /* half inputs through the float32 loop */
    bool bool_out;
} bin_ctx;

/* One row of half-precision inputs through the float32 loop, in chunks. */
static void bin_row_half(const bin_ctx *b, int64_t n, char *const *ptr, const int64_t *step) {
    float fa[KN_EW_CHUNK], fb[KN_EW_CHUNK], fo[KN_EW_CHUNK];
    if (!step[1]) kn_ew_half_to_f32(b->dtype, ptr[1], fa, 1);
    if (!step[2]) kn_ew_half_to_f32(b->dtype, ptr[2], fb, 1);
    for (int64_t s = 0; s < n; s += KN_EW_CHUNK) {
        int64_t m = n - s < KN_EW_CHUNK ? n - s : KN_EW_CHUNK;
        if (step[1]) kn_ew_half_to_f32(b->dtype, (const uint16_t *)ptr[1] + s, fa, m);
        if (step[2]) kn_ew_half_to_f32(b->dtype, (const uint16_t *)ptr[2] + s, fb, m);
        if (b->bool_out) {
            b->fn(1, m, (uint8_t *)ptr[0] + s, fa, fb, 0, 0, 0, step[1], step[2]);
        } else {
            b->fn(1, m, fo, fa, fb, 0, 0, 0, step[1], step[2]);
            kn_ew_f32_to_half(b->dtype, fo, (uint16_t *)ptr[0] + s, m);
        }
    }
}

static void bin_row(void *arg, int64_t rows, int64_t n, char *const *ptr, const int64_t *rs,
                    const int64_t *step) {
    const bin_ctx *b = arg;
    if (!b->half) {
        b->fn(rows, n, ptr[0], ptr[1], ptr[2], rs[0], rs[1], rs[2], step[1], step[2]);
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        char *p[3] = {ptr[0] + r * rs[0], ptr[1] + r * rs[1], ptr[2] + r * rs[2]};
        bin_row_half(b, n, p, step);
    }
}

/* The row function for dtype, or NULL. */
static bin_fn bin_pick(const bin_op *op, kiln_dtype dt, bool *half) {
    *half = false;
    if ((int)dt <= 0 || (int)dt >= KILN_DTYPE_COUNT_) return NULL;
    if (op->fn[dt]) return op->fn[dt];
    if (kn_ew_is_half(dt) && op->fn[KILN_DTYPE_FLOAT]) {
        *half = true;
        return op->fn[KILN_DTYPE_FLOAT];
    }
    return NULL;
}

/* Opset < 7 binary ops broadcast only with broadcast=1, placing B's dims at `axis` of A's
 * (default: trailing). Rewrites B's dims into A's rank. */
static kiln_status legacy_dims(kn_kernel_ctx *c, const kn_tensor *a, const kn_tensor *b, int *rank_b,
                               int64_t *dims_b) {
    char sa[256], sb[256];
    *rank_b = b->rank;
    memcpy(dims_b, b->dims, sizeof(int64_t) * (size_t)b->rank);
    if (!kn_attr_int(c->node, "broadcast", 0)) {
        if (a->rank != b->rank || memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank))
            return kn_kernel_error(c, KILN_ERR_SHAPE, "shapes %s and %s differ and broadcast=0",
                                   kn_dims_str(a->dims, a->rank, sa, sizeof sa),
                                   kn_dims_str(b->dims, b->rank, sb, sizeof sb));
        return KILN_OK;
    }
    int64_t axis = kn_attr_int(c->node, "axis", a->rank - b->rank);
    if (axis < 0) axis += a->rank;
    if (b->rank > a->rank || axis < 0 || axis + b->rank > a->rank)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "B %s does not fit into A %s at axis %lld",
                               kn_dims_str(b->dims, b->rank, sb, sizeof sb),
                               kn_dims_str(a->dims, a->rank, sa, sizeof sa), (long long)axis);
    for (int d = 0; d < a->rank; d++) dims_b[d] = 1;
    for (int d = 0; d < b->rank; d++) dims_b[axis + d] = b->dims[d];
    *rank_b = a->rank;
    return KILN_OK;
}

/* What bin_prepare makes from the inputs' shapes, kept for the node's later calls with them
 * (kn_ctx_prep_get: a kept node of a run with input shapes seen before). */
typedef struct bin_key {
    int32_t ranks[2], out_dtype, legacy;
    int64_t dims[2 * KILN_MAX_RANK]; /* a's dims, then b's: only ranks[0] + ranks[1] are compared */
} bin_key;
typedef struct bin_prepared {
    int rank;
    int64_t dims[KILN_MAX_RANK];
    kn_ew_plan plan;
} bin_prepared;
static const char bin_tag = 0;

/* Broadcasts a and b into the output and plans the loop. */
static kiln_status bin_prepare(kn_kernel_ctx *c, const kn_tensor *a, const kn_tensor *b,
                               kiln_dtype out_dtype, bool legacy, kn_tensor **out, kn_ew_plan *plan) {
    bin_key key;
    size_t key_bytes = 0;
    const bin_prepared *kept = NULL;
    if (c->prep) {
        key.ranks[0] = a->rank;
        key.ranks[1] = b->rank;
        key.out_dtype = (int32_t)out_dtype;
        key.legacy = legacy;
        memcpy(key.dims, a->dims, sizeof(int64_t) * (size_t)a->rank);
        memcpy(key.dims + a->rank, b->dims, sizeof(int64_t) * (size_t)b->rank);
        key_bytes = offsetof(bin_key, dims) + sizeof(int64_t) * (size_t)(a->rank + b->rank);
        kept = kn_ctx_prep_get(c, &bin_tag, &key, key_bytes);
    }
    if (kept) {
        KN_TRY(kn_ctx_output(c, 0, out_dtype, kept->rank, kept->dims, out));
        *plan = kept->plan;
        return KILN_OK;
    }
    int rb = b->rank, rank;
    int64_t db[KILN_MAX_RANK], dims[KILN_MAX_RANK];
    memcpy(db, b->dims, sizeof(int64_t) * (size_t)b->rank);
    if (legacy && c->node->opset < 7) KN_TRY(legacy_dims(c, a, b, &rb, db));
    /* PRelu before opset 7: a 1-D slope of C values is per channel (axis 1), as exporters of
     * that time wrote it */
    if (c->node->opset < 7 && !strcmp(c->node->op_type, "PRelu") && b->rank == 1 && a->rank >= 2 &&
        b->dims[0] == a->dims[1] && b->dims[0] != 1) {
        for (int d = 0; d < a->rank; d++) db[d] = d == 1 ? b->dims[0] : 1;
        rb = a->rank;
    }
    int ranks[2] = {a->rank, rb};
    const int64_t *dd[2] = {a->dims, db};
    kiln_status s = kn_ew_broadcast_shape(2, ranks, dd, &rank, dims);
    if (s != KILN_OK) return kn_kernel_error(c, s, "%s", kn_last_error());
    KN_TRY(kn_ctx_output(c, 0, out_dtype, rank, dims, out));
    s = kn_ew_plan_init(plan, rank, dims, 2, ranks, dd);
    if (s != KILN_OK) return kn_kernel_error(c, s, "%s", kn_last_error());
    if (c->prep) {
        bin_prepared p;
        memset(&p, 0, sizeof p);
        p.rank = rank;
        memcpy(p.dims, dims, sizeof(int64_t) * (size_t)rank);
        p.plan = *plan;
        kn_ctx_prep_put(c, &bin_tag, &key, key_bytes, &p, sizeof p);
    }
    return KILN_OK;
}

static kiln_status check_inputs(kn_kernel_ctx *c, int n) {
    if (c->n_inputs < n) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "needs %d inputs", n);
    for (int i = 0; i < n; i++)
        if (!c->in[i] || c->in[i]->kind != KN_VALUE_TENSOR)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "input %d must be a tensor", i);
    return KILN_OK;
}

static kiln_status bin_run(kn_kernel_ctx *c, const bin_op *op, bool legacy) {
    KN_TRY(check_inputs(c, 2));
    const kn_tensor *a = c->in[0], *b = c->in[1];
    if (a->dtype != b->dtype)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "inputs have different element types (%s and %s)",
                               kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
    bin_ctx bc = {NULL, a->dtype, false, op->bool_out};
    bc.fn = bin_pick(op, a->dtype, &bc.half);
    if (!bc.fn)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s is not supported",
                               kiln_dtype_name(a->dtype));
    kiln_dtype ot = op->bool_out ? KILN_DTYPE_BOOL : a->dtype;
    kn_tensor *o;
    kn_ew_plan plan;
    KN_TRY(bin_prepare(c, a, b, ot, legacy, &o, &plan));
    char *base[3] = {o->data, a->data, b->data};
    size_t es[3] = {kiln_dtype_size(ot), kiln_dtype_size(a->dtype), kiln_dtype_size(b->dtype)};
    kn_ew_plan_run(&plan, c->pool, kn_parallel_grain_light(c->pool, KN_EW_GRAIN_LIGHT), base, es, bin_row, &bc);
    return KILN_OK;
}

/* ------------------------------------------------------------------ string Equal */

static void str_eq_row1(void *arg, int64_t n, char *const *ptr, const int64_t *step) {
    (void)arg;
    uint8_t *o = (uint8_t *)ptr[0];
    char *const *a = (char *const *)ptr[1], *const *b = (char *const *)ptr[2];
    for (int64_t i = 0; i < n; i++) {
        const char *x = a[i * step[1]], *y = b[i * step[2]];
        o[i] = !strcmp(x ? x : "", y ? y : "");
    }
}
KN_EW_ROWS_OF(str_eq_row, str_eq_row1)

static kiln_status string_equal(kn_kernel_ctx *c) {
    const kn_tensor *a = c->in[0], *b = c->in[1];
    kn_tensor *o;
    kn_ew_plan plan;
    KN_TRY(bin_prepare(c, a, b, KILN_DTYPE_BOOL, false, &o, &plan));
    char *base[3] = {o->data, a->data, b->data};
    size_t es[3] = {1, sizeof(char *), sizeof(char *)};
    kn_ew_plan_run(&plan, c->pool, kn_parallel_grain_light(c->pool, KN_EW_GRAIN_LIGHT), base, es, str_eq_row, NULL);
    return KILN_OK;
}

/* ------------------------------------------------------------------ entry points */

#define BIN_KERNEL(name, table, legacy)                                                            \
    kiln_status kn_cpu_ew_##name(kn_kernel_ctx *c) { return bin_run(c, &table, legacy); }
BIN_KERNEL(Add, op_Add, true)
BIN_KERNEL(Sub, op_Sub, true)
BIN_KERNEL(Mul, op_Mul, true)
BIN_KERNEL(Div, op_Div, true)
BIN_KERNEL(Less, op_Less, true)
BIN_KERNEL(Greater, op_Greater, true)
BIN_KERNEL(LessOrEqual, op_LessOrEqual, false)
BIN_KERNEL(GreaterOrEqual, op_GreaterOrEqual, false)
BIN_KERNEL(And, op_And, true)
BIN_KERNEL(Or, op_Or, true)
BIN_KERNEL(Xor, op_Xor, true)
BIN_KERNEL(BitwiseAnd, op_BitwiseAnd, false)
BIN_KERNEL(BitwiseOr, op_BitwiseOr, false)
BIN_KERNEL(BitwiseXor, op_BitwiseXor, false)
BIN_KERNEL(PRelu, op_PRelu, false)

kiln_status kn_cpu_ew_Equal(kn_kernel_ctx *c) {
    KN_TRY(check_inputs(c, 2));
    if (c->in[0]->dtype == KILN_DTYPE_STRING && c->in[1]->dtype == KILN_DTYPE_STRING) return string_equal(c);
    return bin_run(c, &op_Equal, true);
}

kiln_status kn_cpu_ew_Mod(kn_kernel_ctx *c) {
    KN_CTX_PRM(c, kn_ew_un_prepare, kn_ew_un_prm, prm);
    return bin_run(c, prm->mode ? &op_ModC : &op_ModPy, false);
}

kiln_status kn_cpu_ew_BitShift(kn_kernel_ctx *c) {
    KN_CTX_PRM(c, kn_ew_un_prepare, kn_ew_un_prm, prm);
    if (prm->mode == 0) return bin_run(c, &op_ShiftL, false);
    if (prm->mode == 1) return bin_run(c, &op_ShiftR, false);
    return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "direction='%s' is not LEFT or RIGHT",
                           kn_attr_string(c->node, "direction", ""));
}

/* ------------------------------------------------------------------ Pow */

/* Integer power by squaring, wrapping like numpy's integer power; negative exponents truncate
 * the real result (1, -1 or 0). */
static int64_t kn_ipow(int64_t x, int64_t e) {
    if (e < 0) return x == 1 ? 1 : (x == -1 ? ((e & 1) ? -1 : 1) : 0);
    uint64_t r = 1, b = (uint64_t)x;
    while (e) {
        if (e & 1) r *= b;
        b *= b;
        e >>= 1;
    }
    return (int64_t)r;
}

typedef struct pow_ctx {
    kiln_dtype ta, tb, to;
    bool ints; /* integer base and integer exponent: exact integer power */
} pow_ctx;

/* General Pow: both operands converted (in chunks) to double, or int64 for integer powers. */
static void pow_row1(void *arg, int64_t n, char *const *ptr, const int64_t *step) {
    const pow_ctx *p = arg;
    size_t sa = kiln_dtype_size(p->ta), sb = kiln_dtype_size(p->tb), so = kiln_dtype_size(p->to);
    kiln_dtype ct = p->ints ? KILN_DTYPE_INT64 : KILN_DTYPE_DOUBLE;
    union {
        double d[KN_EW_CHUNK];
        int64_t i[KN_EW_CHUNK];
    } ba, bb, bo;
    for (int64_t s = 0; s < n; s += KN_EW_CHUNK) {
        int64_t m = n - s < KN_EW_CHUNK ? n - s : KN_EW_CHUNK;
        kn_ew_cast_n(p->ta, ptr[1] + (step[1] ? s : 0) * (int64_t)sa, ct, &ba, step[1] ? m : 1, 1);
        kn_ew_cast_n(p->tb, ptr[2] + (step[2] ? s : 0) * (int64_t)sb, ct, &bb, step[2] ? m : 1, 1);
        for (int64_t i = 0; i < m; i++) {
            int64_t ia = step[1] ? i : 0, ib = step[2] ? i : 0;
            if (p->ints) bo.i[i] = kn_ipow(ba.i[ia], bb.i[ib]);
            else bo.d[i] = pow(ba.d[ia], bb.d[ib]);
        }
        kn_ew_cast_n(ct, &bo, p->to, ptr[0] + s * (int64_t)so, m, 1);
    }
}
KN_EW_ROWS_OF(pow_row, pow_row1)

/* float base and float exponent tensors: powf per element, as ONNX Runtime (std::pow of two
 * floats); glibc's powf is within 1 ulp (the double round trip above took 1.7-1.8x ONNX Runtime's
 * time on an AVX2 EPYC for the conversions around pow) */
static void pow_row1_f32(void *arg, int64_t n, char *const *ptr, const int64_t *step) {
    (void)arg;
    float *o = (float *)(void *)ptr[0];
    const float *a = (const float *)(const void *)ptr[1], *b = (const float *)(const void *)ptr[2];
    if (step[1] && step[2])
        for (int64_t i = 0; i < n; i++) o[i] = powf(a[i], b[i]);
    else
        for (int64_t i = 0; i < n; i++) o[i] = powf(a[step[1] ? i : 0], b[step[2] ? i : 0]);
}
KN_EW_ROWS_OF(pow_row_f32, pow_row1_f32)

/* float32 base with one exponent value: the common x^2 of decomposed LayerNorm and friends. */
typedef struct pow_scalar_job {
    const float *x;
    float *o;
    float e;
} pow_scalar_job;

/* pow(x, 0.5) is sqrt(x) but at -0 (pow: +0, sqrt: -0) and -inf (pow: +inf, sqrt: NaN), as C's pow
 * and ONNX Runtime give: the sqrt kernel, then those two fixed (adding +0 turns -0 into +0 and
 * leaves every other value, NaN included, as it is) */
static void pow_half_f32(int64_t n, float *restrict o, const float *restrict x) {
    kn_ew_sqrt_f32(n, o, x);
    for (int64_t i = 0; i < n; i++) o[i] = x[i] == -INFINITY ? INFINITY : o[i] + 0.0f;
}

static void pow_scalar_range(void *arg, int64_t b, int64_t e) {
    const pow_scalar_job *j = arg;
    const float *restrict x = j->x;
    float *restrict o = j->o;
    const float ex = j->e;
    if (ex == 2.0f) {
        for (int64_t i = b; i < e; i++) o[i] = x[i] * x[i];
    } else if (ex == 3.0f) {
        for (int64_t i = b; i < e; i++) o[i] = x[i] * x[i] * x[i];
    } else if (ex == 1.0f) {
        for (int64_t i = b; i < e; i++) o[i] = x[i];
    } else if (ex == 0.5f) {
        pow_half_f32(e - b, o + b, x + b);
    } else if (ex == -1.0f) {
        for (int64_t i = b; i < e; i++) o[i] = 1.0f / x[i];
    } else {
        for (int64_t i = b; i < e; i++) o[i] = powf(x[i], ex);
    }
}

#if defined(KN_EW_F16_V8)
/* float16 base with one exponent value: pow_scalar_range's float operations on 8-lane vectors of
 * widened halves, each result rounded once (the general path converted every element to double
 * and called pow); other exponents: powf on each element of the widened vector */
typedef struct pow_scalar_h_job {
    const uint16_t *x;
    uint16_t *o;
    float e;
} pow_scalar_h_job;

static inline __m256 pow_h8_any(__m256 v, float e) {
    float t[8];
    _mm256_storeu_ps(t, v);
    for (int l = 0; l < 8; l++) t[l] = powf(t[l], e);
    return _mm256_loadu_ps(t);
}

/* pow_half_f32 on a vector */
static inline __m256 pow_half_h8(__m256 v) {
    const __m256 r = _mm256_add_ps(_mm256_sqrt_ps(v), _mm256_setzero_ps());
    return _mm256_blendv_ps(r, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(v, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ));
}

static void pow_scalar_h_range(void *arg, int64_t b, int64_t e) {
    const pow_scalar_h_job *j = arg;
    const uint16_t *x = j->x + b;
    uint16_t *o = j->o + b;
    const int64_t n = e - b;
    const float ex = j->e;
#define H8_SQ(v) _mm256_mul_ps((v), (v))
#define H8_CUBE(v) _mm256_mul_ps(_mm256_mul_ps((v), (v)), (v))
#define H8_ID(v) (v)
#define H8_POW_HALF(v) pow_half_h8(v)
#define H8_INV(v) _mm256_div_ps(_mm256_set1_ps(1.0f), (v))
#define H8_ANY(v) pow_h8_any((v), ex)
    if (ex == 2.0f) KN_H8_MAP(o, x, n, H8_SQ);
    else if (ex == 3.0f) KN_H8_MAP(o, x, n, H8_CUBE);
    else if (ex == 1.0f) KN_H8_MAP(o, x, n, H8_ID);
    else if (ex == 0.5f) KN_H8_MAP(o, x, n, H8_POW_HALF);
    else if (ex == -1.0f) KN_H8_MAP(o, x, n, H8_INV);
    else KN_H8_MAP(o, x, n, H8_ANY);
#undef H8_SQ
#undef H8_CUBE
#undef H8_ID
#undef H8_POW_HALF
#undef H8_INV
#undef H8_ANY
}
#endif

kiln_status kn_cpu_ew_Pow(kn_kernel_ctx *c) {
    KN_TRY(check_inputs(c, 2));
    const kn_tensor *a = c->in[0], *b = c->in[1];
    kiln_dtype ta = a->dtype, tb = b->dtype;
    bool a_int = kn_dtype_is_int(ta), b_int = kn_dtype_is_int(tb);
    if (!(a_int || kn_dtype_is_float(ta)) || !(b_int || kn_dtype_is_float(tb)))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "Pow of %s by %s is not supported",
                               kiln_dtype_name(ta), kiln_dtype_name(tb));
    kn_tensor *o;
    kn_ew_plan plan;
    KN_TRY(bin_prepare(c, a, b, ta, true, &o, &plan));
    if (ta == KILN_DTYPE_FLOAT && kn_tensor_count(b) == 1 && kn_tensor_count(a) == plan.count) {
        double e = kn_tensor_get_f64(b, 0);
        /* an integer-typed or double exponent rounds through double in the reference; only
         * exponents exact in float take the float path */
        if ((double)(float)e == e) {
            pow_scalar_job j = {a->data, o->data, (float)e};
            const bool light = j.e == 2.0f || j.e == 1.0f || j.e == 3.0f;
            kn_parallel_for(c->pool, plan.count, light ? kn_parallel_grain_light(c->pool, KN_EW_GRAIN_LIGHT) : KN_EW_GRAIN,
                            pow_scalar_range, &j);
            return KILN_OK;
        }
    }
#if defined(KN_EW_F16_V8)
    if (ta == KILN_DTYPE_FLOAT16 && (tb == KILN_DTYPE_FLOAT16 || tb == KILN_DTYPE_FLOAT) && kn_tensor_count(b) == 1 &&
        kn_tensor_count(a) == plan.count) {
        /* a float16 or float exponent is exact in float */
        pow_scalar_h_job j = {a->data, o->data, (float)kn_tensor_get_f64(b, 0)};
        const bool light = j.e == 2.0f || j.e == 1.0f || j.e == 3.0f;
        kn_parallel_for(c->pool, plan.count, light ? kn_parallel_grain_light(c->pool, KN_EW_GRAIN_LIGHT) : KN_EW_GRAIN,
                        pow_scalar_h_range, &j);
        return KILN_OK;
    }
#endif
    pow_ctx pc = {ta, tb, ta, a_int && b_int};
    char *base[3] = {o->data, a->data, b->data};
    size_t es[3] = {kiln_dtype_size(ta), kiln_dtype_size(ta), kiln_dtype_size(tb)};
    const bool f32 = ta == KILN_DTYPE_FLOAT && tb == KILN_DTYPE_FLOAT;
    kn_ew_plan_run(&plan, c->pool, KN_EW_GRAIN, base, es, f32 ? pow_row_f32 : pow_row, &pc);
    return KILN_OK;
}

/* ------------------------------------------------------------------ Sum, Mean, Max, Min */

typedef struct scale_job {
    kiln_dtype dt;
    void *data;
    int64_t n_inputs;
} scale_job;

/* Divides in place by the input count (Mean). */
static void mean_range(void *arg, int64_t b, int64_t e) {
    const scale_job *j = arg;
    switch (j->dt) {
    case KILN_DTYPE_FLOAT: {
        float *x = j->data;
        const float d = (float)j->n_inputs;
        for (int64_t i = b; i < e; i++) x[i] /= d;
        break;
    }
    case KILN_DTYPE_DOUBLE: {
        double *x = j->data;
        for (int64_t i = b; i < e; i++) x[i] /= (double)j->n_inputs;
        break;
    }
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: {
        float buf[KN_EW_CHUNK];
        uint16_t *x = j->data;
        for (int64_t s = b; s < e; s += KN_EW_CHUNK) {
            int64_t m = e - s < KN_EW_CHUNK ? e - s : KN_EW_CHUNK;
            kn_ew_half_to_f32(j->dt, x + s, buf, m);
            for (int64_t i = 0; i < m; i++) buf[i] /= (float)j->n_inputs;
            kn_ew_f32_to_half(j->dt, buf, x + s, m);
        }
        break;
    }
    default: {
        /* integers: truncating division through int64 (uint64 values above 2^63 are rare) */
        kn_tensor t;
        memset(&t, 0, sizeof t);
        t.dtype = j->dt;
        t.data = j->data;
        for (int64_t i = b; i < e; i++) kn_tensor_set_i64(&t, i, kn_tensor_get_i64(&t, i) / j->n_inputs);
        break;
    }
    }
}

/* Sum and Mean of half-precision inputs: a float32 accumulator over the output, each input widened
 * and added in order (acc = in0, acc += in_k), the mean divided once, the result rounded once to the
 * output's type: the float32 sum of the widened values rounded once, as ONNX Runtime computes it
 * (it casts around the node); the pairwise float16 kernel rounded after every input (a Sum of three
 * float16 inputs differed from ONNX Runtime in 22% of its elements, a Mean in 34%). */
typedef struct half_acc_ctx {
    kiln_dtype dt;
    bool first;
} half_acc_ctx;

static void half_acc_row1(void *arg, int64_t n, char *const *ptr, const int64_t *step) {
    const half_acc_ctx *h = arg;
    float *acc = (float *)(void *)ptr[0];
    float buf[KN_EW_CHUNK];
    if (!step[1]) {
        float v;
        kn_ew_half_to_f32(h->dt, ptr[1], &v, 1);
        if (h->first)
            for (int64_t i = 0; i < n; i++) acc[i] = v;
        else
            for (int64_t i = 0; i < n; i++) acc[i] += v;
        return;
    }
    for (int64_t s = 0; s < n; s += KN_EW_CHUNK) {
        const int64_t m = n - s < KN_EW_CHUNK ? n - s : KN_EW_CHUNK;
        if (h->first) {
            kn_ew_half_to_f32(h->dt, (const uint16_t *)(const void *)ptr[1] + s, acc + s, m);
        } else {
            kn_ew_half_to_f32(h->dt, (const uint16_t *)(const void *)ptr[1] + s, buf, m);
            for (int64_t i = 0; i < m; i++) acc[s + i] += buf[i];
        }
    }
}
KN_EW_ROWS_OF(half_acc_row, half_acc_row1)

typedef struct half_out_job {
    kiln_dtype dt;
    const float *acc;
    void *out;
    float div; /* 1 for Sum */
} half_out_job;

static void half_out_range(void *arg, int64_t b, int64_t e) {
    const half_out_job *j = arg;
    float buf[KN_EW_CHUNK];
    for (int64_t s = b; s < e; s += KN_EW_CHUNK) {
        const int64_t m = e - s < KN_EW_CHUNK ? e - s : KN_EW_CHUNK;
        for (int64_t i = 0; i < m; i++) buf[i] = j->div == 1.0f ? j->acc[s + i] : j->acc[s + i] / j->div;
        kn_ew_f32_to_half(j->dt, buf, (uint16_t *)j->out + s, m);
    }
}

static kiln_status half_sum_run(kn_kernel_ctx *c, kn_tensor *o, int n, bool mean) {
    const int64_t count = kn_tensor_count(o);
    if (count == 0) return KILN_OK;
    float *acc = NULL;
    const size_t bytes = sizeof(float) * (size_t)count;
    KN_TRY(kn_ctx_scratch(c, bytes, "the float32 sum", (void **)&acc));
    kiln_status s = KILN_OK;
    for (int k = 0; k < n && s == KILN_OK; k++) {
        const kn_tensor *x = c->in[k];
        int rk = x->rank;
        const int64_t *dk = x->dims;
        kn_ew_plan plan;
        s = kn_ew_plan_init(&plan, o->rank, o->dims, 1, &rk, &dk);
        if (s != KILN_OK) {
            s = kn_kernel_error(c, s, "%s", kn_last_error());
            break;
        }
        half_acc_ctx h = {o->dtype, k == 0};
        char *base[2] = {(char *)acc, x->data};
        size_t es[2] = {sizeof(float), kiln_dtype_size(x->dtype)};
        kn_ew_plan_run(&plan, c->pool, kn_parallel_grain_light(c->pool, KN_EW_GRAIN_LIGHT), base, es, half_acc_row, &h);
    }
    if (s == KILN_OK) {
        half_out_job j = {o->dtype, acc, o->data, mean ? (float)n : 1.0f};
        kn_parallel_for(c->pool, count, kn_parallel_grain_light(c->pool, KN_EW_GRAIN_LIGHT), half_out_range, &j);
    }
    kn_ctx_scratch_free(c, acc, bytes);
    return s;
}

static kiln_status variadic_run(kn_kernel_ctx *c, const bin_op *op, bool mean) {
    int n = c->n_inputs;
    if (n < 1) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "needs at least one input");
    KN_TRY(check_inputs(c, n));
    kiln_dtype dt = c->in[0]->dtype;
    int ranks[64];
    const int64_t *dd[64];
    if (n > 64) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "%d inputs; at most 64 supported", n);
    for (int i = 0; i < n; i++) {
        if (c->in[i]->dtype != dt)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "input %d is %s but input 0 is %s", i,
                                   kiln_dtype_name(c->in[i]->dtype), kiln_dtype_name(dt));
        ranks[i] = c->in[i]->rank;
        dd[i] = c->in[i]->dims;
    }
    bin_ctx bc = {NULL, dt, false, false};
    bc.fn = bin_pick(op, dt, &bc.half);
    if (!bc.fn)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s is not supported", kiln_dtype_name(dt));
    int rank;
    int64_t dims[KILN_MAX_RANK];
    kiln_status s = kn_ew_broadcast_shape(n, ranks, dd, &rank, dims);
    if (s != KILN_OK) return kn_kernel_error(c, s, "%s", kn_last_error());
    kn_tensor *o;
    KN_TRY(kn_ctx_output(c, 0, dt, rank, dims, &o));
    size_t es = kiln_dtype_size(dt);
    if (n == 1) {
        if (o->nbytes) memcpy(o->data, c->in[0]->data, o->nbytes);
        return KILN_OK;
    }
    /* half Sum of three or more, half Mean: in float32, rounded once (two-input Sum: the pairwise
     * kernel already rounds once) */
    if (kn_ew_is_half(dt) && op == &op_Add && (n > 2 || mean)) return half_sum_run(c, o, n, mean);
    for (int k = 1; k < n; k++) {
        /* out = op(in0, in1), then out = op(out, in_k): same-index loops, safe in place */
        const kn_tensor *a = k == 1 ? c->in[0] : o;
        const kn_tensor *b = c->in[k];
        int pr[2] = {a->rank, b->rank};
        const int64_t *pd[2] = {a->dims, b->dims};
        kn_ew_plan plan;
        s = kn_ew_plan_init(&plan, rank, dims, 2, pr, pd);
        if (s != KILN_OK) return kn_kernel_error(c, s, "%s", kn_last_error());
        char *base[3] = {o->data, a->data, b->data};
        size_t ess[3] = {es, es, es};
        kn_ew_plan_run(&plan, c->pool, kn_parallel_grain_light(c->pool, KN_EW_GRAIN_LIGHT), base, ess, bin_row, &bc);
    }
    if (mean) {
        scale_job j = {dt, o->data, n};
        kn_parallel_for(c->pool, kn_tensor_count(o), kn_parallel_grain_light(c->pool, KN_EW_GRAIN_LIGHT), mean_range, &j);
    }
    return KILN_OK;
}

kiln_status kn_cpu_ew_Sum(kn_kernel_ctx *c) { return variadic_run(c, &op_Add, false); }
kiln_status kn_cpu_ew_Mean(kn_kernel_ctx *c) { return variadic_run(c, &op_Add, true); }
kiln_status kn_cpu_ew_Max(kn_kernel_ctx *c) { return variadic_run(c, &op_Max, false); }
kiln_status kn_cpu_ew_Min(kn_kernel_ctx *c) { return variadic_run(c, &op_Min, false); }

/* ------------------------------------------------------------------ Where */

typedef struct where_ctx {
    size_t es;
    bool failed; /* string copy ran out of memory */
} where_ctx;

/* The step patterns that occur (masks against scores, a scalar fill value) get loops of their
 * own so they vectorise; the rest index with strides. */
#define WHERE_LOOP(T)                                                                              \
    do {                                                                                           \
        T *restrict o = (T *)ptr[0];                                                               \
        const uint8_t *restrict cd = (const uint8_t *)ptr[1];                                      \
        const T *restrict x = (const T *)ptr[2];                                                   \
        const T *restrict y = (const T *)ptr[3];                                                   \
        const int64_t s1 = step[1], s2 = step[2], s3 = step[3];                                    \
        if (s1 && s2 && s3) {                                                                      \
            for (int64_t i = 0; i < n; i++) o[i] = cd[i] ? x[i] : y[i];                            \
        } else if (s1 && s2) {                                                                     \
            const T yv = y[0];                                                                     \
            for (int64_t i = 0; i < n; i++) o[i] = cd[i] ? x[i] : yv;                              \
        } else if (s1 && s3) {                                                                     \
            const T xv = x[0];                                                                     \
            for (int64_t i = 0; i < n; i++) o[i] = cd[i] ? xv : y[i];                              \
        } else if (s2 && s3) {                                                                     \
            if (cd[0]) memcpy(o, x, (size_t)n * sizeof(T));                                        \
            else memcpy(o, y, (size_t)n * sizeof(T));                                              \
        } else if (s1) {                                                                           \
            const T xv = x[0], yv = y[0];                                                          \
            for (int64_t i = 0; i < n; i++) o[i] = cd[i] ? xv : yv;                                \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) o[i] = cd[i * s1] ? x[i * s2] : y[i * s3];             \
        }                                                                                          \
    } while (0)

static void where_row1(void *arg, int64_t n, char *const *ptr, const int64_t *step) {
    where_ctx *w = arg;
    switch (w->es) {
    case 1: WHERE_LOOP(uint8_t); break;
    case 2: WHERE_LOOP(uint16_t); break;
    case 4: WHERE_LOOP(uint32_t); break;
    case 8: WHERE_LOOP(uint64_t); break;
    default:
        for (int64_t i = 0; i < n; i++) {
            const char *src = ptr[1][i * step[1]] ? ptr[2] + i * step[2] * (int64_t)w->es
                                                  : ptr[3] + i * step[3] * (int64_t)w->es;
            memcpy(ptr[0] + i * (int64_t)w->es, src, w->es);
        }
        break;
    }
}
KN_EW_ROWS_OF(where_row, where_row1)

static void where_row_string1(void *arg, int64_t n, char *const *ptr, const int64_t *step) {
    where_ctx *w = arg;
    char **o = (char **)ptr[0];
    const uint8_t *cd = (const uint8_t *)ptr[1];
    char *const *x = (char *const *)ptr[2], *const *y = (char *const *)ptr[3];
    for (int64_t i = 0; i < n; i++) {
        const char *s = cd[i * step[1]] ? x[i * step[2]] : y[i * step[3]];
        free(o[i]);
        o[i] = strdup(s ? s : "");
        if (!o[i]) w->failed = true;
    }
}
KN_EW_ROWS_OF(where_row_string, where_row_string1)

kiln_status kn_cpu_ew_Where(kn_kernel_ctx *c) {
    KN_TRY(check_inputs(c, 3));
    const kn_tensor *cd = c->in[0], *x = c->in[1], *y = c->in[2];
    if (cd->dtype != KILN_DTYPE_BOOL)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "condition is %s, not bool", kiln_dtype_name(cd->dtype));
    if (x->dtype != y->dtype)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "X is %s but Y is %s", kiln_dtype_name(x->dtype),
                               kiln_dtype_name(y->dtype));
    size_t es = kiln_dtype_size(x->dtype);
    if (es == 0)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s is not supported", kiln_dtype_name(x->dtype));
    int ranks[3] = {cd->rank, x->rank, y->rank}, rank;
    const int64_t *dd[3] = {cd->dims, x->dims, y->dims};
    int64_t dims[KILN_MAX_RANK];
    kiln_status s = kn_ew_broadcast_shape(3, ranks, dd, &rank, dims);
    if (s != KILN_OK) return kn_kernel_error(c, s, "%s", kn_last_error());
    kn_tensor *o;
    KN_TRY(kn_ctx_output(c, 0, x->dtype, rank, dims, &o));
    kn_ew_plan plan;
    s = kn_ew_plan_init(&plan, rank, dims, 3, ranks, dd);
    if (s != KILN_OK) return kn_kernel_error(c, s, "%s", kn_last_error());
    char *base[4] = {o->data, cd->data, x->data, y->data};
    size_t ess[4] = {es, 1, es, es};
    where_ctx w = {es, false};
    if (x->dtype == KILN_DTYPE_STRING) {
        /* strdup per element: single-threaded keeps the failure flag simple */
        kn_ew_plan_run(&plan, NULL, KN_EW_GRAIN_LIGHT, base, ess, where_row_string, &w);
        if (w.failed) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory copying strings");
        return KILN_OK;
    }
    kn_ew_plan_run(&plan, c->pool, kn_parallel_grain_light(c->pool, KN_EW_GRAIN_LIGHT), base, ess, where_row, &w);
    return KILN_OK;
}

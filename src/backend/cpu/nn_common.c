/* Element conversion helpers of the CPU nn family (see nn_internal.h). */
#include "backend/cpu/nn_internal.h"
#include "backend/cpu/elementwise_impl.h"

#include <stdlib.h>

#define CONVERT_LOOP(DST, SRC_T, EXPR)                                                             \
    do {                                                                                           \
        const SRC_T *s_ = (const SRC_T *)t->data;                                                  \
        for (int64_t i = 0; i < n; i++) DST[i] = EXPR(s_[i]);                                      \
    } while (0)
#define ID(v) (v)
#define BOOLV(v) ((v) ? 1 : 0)

#define TO_IMPL(NAME, D)                                                                           \
    void NAME(const kn_tensor *t, D *dst) {                                                        \
        int64_t n = kn_tensor_count(t);                                                            \
        switch (t->dtype) {                                                                        \
        case KILN_DTYPE_FLOAT: CONVERT_LOOP(dst, float, (D)); break;                              \
        case KILN_DTYPE_DOUBLE: CONVERT_LOOP(dst, double, (D)); break;                            \
        case KILN_DTYPE_FLOAT16: CONVERT_LOOP(dst, uint16_t, (D)kn_f16_to_f32); break;            \
        case KILN_DTYPE_BFLOAT16: CONVERT_LOOP(dst, uint16_t, (D)kn_bf16_to_f32); break;          \
        case KILN_DTYPE_INT8: CONVERT_LOOP(dst, int8_t, (D)); break;                              \
        case KILN_DTYPE_INT16: CONVERT_LOOP(dst, int16_t, (D)); break;                            \
        case KILN_DTYPE_INT32: CONVERT_LOOP(dst, int32_t, (D)); break;                            \
        case KILN_DTYPE_INT64: CONVERT_LOOP(dst, int64_t, (D)); break;                            \
        case KILN_DTYPE_UINT8: CONVERT_LOOP(dst, uint8_t, (D)); break;                            \
        case KILN_DTYPE_UINT16: CONVERT_LOOP(dst, uint16_t, (D)); break;                          \
        case KILN_DTYPE_UINT32: CONVERT_LOOP(dst, uint32_t, (D)); break;                          \
        case KILN_DTYPE_UINT64: CONVERT_LOOP(dst, uint64_t, (D)); break;                          \
        case KILN_DTYPE_BOOL: CONVERT_LOOP(dst, uint8_t, (D)BOOLV); break;                        \
        default:                                                                                   \
            for (int64_t i = 0; i < n; i++) dst[i] = (D)kn_tensor_get_f64(t, i);                  \
        }                                                                                          \
    }

static TO_IMPL(nn_to_f32_any, float)
TO_IMPL(kn_nn_to_f64, double)
TO_IMPL(kn_nn_to_i64, int64_t)

/* Float to integer conversions saturate and map NaN to 0 so that no input is undefined
 * behaviour; truncation toward zero matches numpy's astype. */
static int64_t f2i(double v) {
    if (!(v == v)) return 0;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}

#define STORE_LOOP(DST_T, EXPR)                                                                    \
    do {                                                                                           \
        DST_T *d_ = (DST_T *)t->data;                                                              \
        for (int64_t i = 0; i < n; i++) d_[i] = EXPR;                                              \
    } while (0)

#define FROM_FLOAT_IMPL(NAME, S)                                                                   \
    void NAME(kn_tensor *t, const S *src) {                                                        \
        int64_t n = kn_tensor_count(t);                                                            \
        switch (t->dtype) {                                                                        \
        case KILN_DTYPE_FLOAT: STORE_LOOP(float, (float)src[i]); break;                           \
        case KILN_DTYPE_DOUBLE: STORE_LOOP(double, (double)src[i]); break;                        \
        case KILN_DTYPE_FLOAT16: STORE_LOOP(uint16_t, kn_f32_to_f16((float)src[i])); break;       \
        case KILN_DTYPE_BFLOAT16: STORE_LOOP(uint16_t, kn_f32_to_bf16((float)src[i])); break;     \
        case KILN_DTYPE_BOOL: STORE_LOOP(uint8_t, src[i] != 0); break;                            \
        case KILN_DTYPE_UINT64: STORE_LOOP(uint64_t, src[i] >= 9.2233720368547758e18 ? (uint64_t)(src[i] - 9.2233720368547758e18) + (UINT64_C(1) << 63) : (uint64_t)f2i(src[i])); break; \
        default:                                                                                   \
            for (int64_t i = 0; i < n; i++) kn_tensor_set_i64(t, i, f2i(src[i]));                 \
        }                                                                                          \
    }

static FROM_FLOAT_IMPL(nn_from_f32_any, float)

/* float16 through the vector conversions (vcvtph2ps / vcvtps2ph, round to nearest even: the same
 * values as kn_f16_to_f32 / kn_f32_to_f16, whose call per element took 2.4 ns: a float16
 * ReduceMean of 1x128x768 spent most of its 0.24 ms converting) */
void kn_nn_to_f32(const kn_tensor *t, float *dst) {
    if (t->dtype == KILN_DTYPE_FLOAT16) kn_ew_f16_to_f32(t->data, dst, kn_tensor_count(t));
    else nn_to_f32_any(t, dst);
}
void kn_nn_from_f32(kn_tensor *t, const float *src) {
    if (t->dtype == KILN_DTYPE_FLOAT16) kn_ew_f32_to_f16(src, t->data, kn_tensor_count(t));
    else nn_from_f32_any(t, src);
}
FROM_FLOAT_IMPL(kn_nn_from_f64, double)

void kn_nn_from_i64(kn_tensor *t, const int64_t *src) {
    int64_t n = kn_tensor_count(t);
    switch (t->dtype) {
    case KILN_DTYPE_INT64: memcpy(t->data, src, (size_t)n * 8); break;
    case KILN_DTYPE_INT32: STORE_LOOP(int32_t, (int32_t)src[i]); break;
    case KILN_DTYPE_FLOAT: STORE_LOOP(float, (float)src[i]); break;
    case KILN_DTYPE_DOUBLE: STORE_LOOP(double, (double)src[i]); break;
    default:
        for (int64_t i = 0; i < n; i++) kn_tensor_set_i64(t, i, src[i]);
    }
}

kiln_dtype kn_nn_compute_type(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT:
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: return KILN_DTYPE_FLOAT;
    case KILN_DTYPE_DOUBLE: return KILN_DTYPE_DOUBLE;
    default: return (kn_dtype_is_int(t) || t == KILN_DTYPE_BOOL) ? KILN_DTYPE_INT64 : KILN_DTYPE_UNDEFINED;
    }
}

float *kn_nn_f32_view(const kn_tensor *t) {
    if (t->dtype == KILN_DTYPE_FLOAT) return (float *)t->data;
    int64_t n = kn_tensor_count(t);
    float *b = malloc(((size_t)n + 1) * sizeof *b);
    if (b) kn_nn_to_f32(t, b);
    return b;
}

void kn_nn_release(const kn_tensor *t, const void *view) {
    if (view && view != t->data) free((void *)view);
}

float *kn_nn_f32_out(kn_tensor *t) {
    if (t->dtype == KILN_DTYPE_FLOAT) return (float *)t->data;
    int64_t n = kn_tensor_count(t);
    return calloc((size_t)n + 1, sizeof(float));
}

void kn_nn_f32_commit(kn_tensor *t, float *buf) {
    if (!buf || buf == t->data) return;
    kn_nn_from_f32(t, buf);
    free(buf);
}

/* ---- row max/min ----
 * With AVX, vmaxps/vminps in four accumulators (below); without, GCC and Clang vector extensions:
 * the scalar-lane form with ?: does not vectorise as a reduction. Macros, not functions, so no
 * vector crosses a call (no -Wpsabi notes). RP_W lanes: a vector wider than the target's registers
 * is lowered to scalar code (ReduceMax over 64 x 4096 took 12x ONNX Runtime's time that way). */
#define RP_W 8
typedef float kn_v16f __attribute__((vector_size(RP_W * 4)));
typedef int32_t kn_v16i __attribute__((vector_size(RP_W * 4)));

#define V16_LOAD(dst, ptr) memcpy(&(dst), (ptr), sizeof(dst))
/* acc = v OP acc ? v : acc, lane-wise (NaN is tracked apart, so this is a plain max/min) */
#define V16_PICK(acc, v, OP)                                                                       \
    do {                                                                                           \
        kn_v16i m_ = (v)OP(acc);                                                                   \
        (acc) = (kn_v16f)((m_ & (kn_v16i)(v)) | (~m_ & (kn_v16i)(acc)));                           \
    } while (0)

#if defined(__AVX__)
/* With AVX, the avx512 level included (a 16-lane form of compares and blends there took 1.3-1.4x
 * ONNX Runtime's time on ReduceMax over rows of 256 on a Xeon): vmaxps(v, acc) = v > acc ? v : acc
 * and vminps(v, acc) = v < acc ? v : acc (ties and NaN give acc), exactly the pick; NaN by one unordered compare per two vectors (the
 * per-vector compare and GCC's blend of the flag were a third of ReduceMax over rows of 256, perf);
 * the last n mod 8 by one vector ending at the row's end (a max/min may see an element twice);
 * the horizontal step in vectors. */
#include <immintrin.h>
#define ROW_PICK(NAME, OP, VF, VF4)                                                                \
    float NAME(const float *p, int64_t n) {                                                        \
        if (n < 8) {                                                                               \
            float m = p[0];                                                                        \
            int nan = 0;                                                                           \
            for (int64_t i = 0; i < n; i++) {                                                      \
                m = p[i] OP m ? p[i] : m;                                                          \
                nan |= p[i] != p[i];                                                               \
            }                                                                                      \
            return nan ? NAN : m;                                                                  \
        }                                                                                          \
        __m256 a0 = _mm256_loadu_ps(p), a1 = a0, a2 = a0, a3 = a0, bad;                            \
        int64_t i = 8;                                                                             \
        if (n >= 32) {                                                                             \
            a1 = _mm256_loadu_ps(p + 8);                                                           \
            a2 = _mm256_loadu_ps(p + 16);                                                          \
            a3 = _mm256_loadu_ps(p + 24);                                                          \
            bad = _mm256_or_ps(_mm256_cmp_ps(a0, a1, _CMP_UNORD_Q), _mm256_cmp_ps(a2, a3, _CMP_UNORD_Q)); \
            for (i = 32; i + 32 <= n; i += 32) {                                                   \
                const __m256 v0 = _mm256_loadu_ps(p + i), v1 = _mm256_loadu_ps(p + i + 8);         \
                const __m256 v2 = _mm256_loadu_ps(p + i + 16), v3 = _mm256_loadu_ps(p + i + 24);   \
                a0 = VF(v0, a0);                                                                   \
                a1 = VF(v1, a1);                                                                   \
                a2 = VF(v2, a2);                                                                   \
                a3 = VF(v3, a3);                                                                   \
                bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(v0, v1, _CMP_UNORD_Q),        \
                                                     _mm256_cmp_ps(v2, v3, _CMP_UNORD_Q)));       \
            }                                                                                      \
        } else {                                                                                   \
            bad = _mm256_cmp_ps(a0, a0, _CMP_UNORD_Q);                                             \
        }                                                                                          \
        for (; i + 8 <= n; i += 8) {                                                               \
            const __m256 v = _mm256_loadu_ps(p + i);                                               \
            a0 = VF(v, a0);                                                                        \
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));                            \
        }                                                                                          \
        if (i < n) {                                                                               \
            const __m256 v = _mm256_loadu_ps(p + n - 8);                                           \
            a1 = VF(v, a1);                                                                        \
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));                            \
        }                                                                                          \
        if (_mm256_movemask_ps(bad)) return NAN;                                                   \
        a0 = VF(a1, a0);                                                                           \
        a2 = VF(a3, a2);                                                                           \
        a0 = VF(a2, a0);                                                                           \
        __m128 h = VF4(_mm256_extractf128_ps(a0, 1), _mm256_castps256_ps128(a0));                  \
        h = VF4(_mm_movehl_ps(h, h), h);                                                           \
        h = VF4(_mm_movehdup_ps(h), h);                                                            \
        return _mm_cvtss_f32(h);                                                                   \
    }
#else
/* The baseline (8 lanes as SSE pairs): four independent accumulators hide
 * the compare/blend latency; NaN lanes are or-ed apart */
#define RP_PICK(acc, v, OP, VF) V16_PICK(acc, v, OP)
#define ROW_PICK(NAME, OP, VF, VF4)                                                                \
    float NAME(const float *p, int64_t n) {                                                        \
        int64_t i = 0;                                                                             \
        float m = p[0];                                                                            \
        int nan = 0;                                                                               \
        if (n >= 4 * RP_W) {                                                                       \
            kn_v16f a0, a1, a2, a3, v;                                                             \
            V16_LOAD(a0, p);                                                                       \
            V16_LOAD(a1, p + RP_W);                                                                \
            V16_LOAD(a2, p + 2 * RP_W);                                                            \
            V16_LOAD(a3, p + 3 * RP_W);                                                            \
            kn_v16i bad = (a0 != a0) | (a1 != a1) | (a2 != a2) | (a3 != a3);                       \
            for (i = 4 * RP_W; i + 4 * RP_W <= n; i += 4 * RP_W) {                                 \
                V16_LOAD(v, p + i);                                                                \
                RP_PICK(a0, v, OP, VF);                                                            \
                bad |= v != v;                                                                     \
                V16_LOAD(v, p + i + RP_W);                                                         \
                RP_PICK(a1, v, OP, VF);                                                            \
                bad |= v != v;                                                                     \
                V16_LOAD(v, p + i + 2 * RP_W);                                                     \
                RP_PICK(a2, v, OP, VF);                                                            \
                bad |= v != v;                                                                     \
                V16_LOAD(v, p + i + 3 * RP_W);                                                     \
                RP_PICK(a3, v, OP, VF);                                                            \
                bad |= v != v;                                                                     \
            }                                                                                      \
            for (; i + RP_W <= n; i += RP_W) {                                                     \
                V16_LOAD(v, p + i);                                                                \
                RP_PICK(a0, v, OP, VF);                                                            \
                bad |= v != v;                                                                     \
            }                                                                                      \
            RP_PICK(a0, a1, OP, VF);                                                               \
            RP_PICK(a2, a3, OP, VF);                                                               \
            RP_PICK(a0, a2, OP, VF);                                                               \
            m = a0[0];                                                                             \
            for (int l = 0; l < RP_W; l++) {                                                       \
                m = a0[l] OP m ? a0[l] : m;                                                        \
                nan |= bad[l];                                                                     \
            }                                                                                      \
        }                                                                                          \
        for (; i < n; i++) {                                                                       \
            m = p[i] OP m ? p[i] : m;                                                              \
            nan |= p[i] != p[i];                                                                   \
        }                                                                                          \
        return nan ? NAN : m;                                                                      \
    }

#endif

ROW_PICK(kn_nn_row_maxf, >, _mm256_max_ps, _mm_max_ps)
ROW_PICK(kn_nn_row_minf, <, _mm256_min_ps, _mm_min_ps)

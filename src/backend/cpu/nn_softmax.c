/* CPU kernels: Softmax, LogSoftmax, Hardmax, NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss.
 *
 * Softmax views its input as [outer, n, inner] (before opset 13 the input is coerced to 2-D at
 * the axis, so n is the product of the trailing dims and inner is 1). Float rows subtract the row
 * maximum and use the vectorisable exp; float16/bfloat16 compute in float, double in double. */
#include "backend/cpu/nn_internal.h"
#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/isa_vec.h"
#include "backend/cpu/vec_math.h"

#include <stdlib.h>

/* The row kernels start on a 64-byte boundary, so where their loops fall in the op cache's
 * 64-byte windows follows from this file alone, not from where the linker puts it: a shift of 16
 * bytes from changes elsewhere in the library (nn_softmax.o itself unchanged) cost Softmax 64x4096
 * and 16x32000 7-9% on Zen 3. */
#define SM_ALIGNED __attribute__((aligned(64)))

/* outer/n/inner of the softmax-like ops for this node and input */
kiln_status kn_softmax_prepare(const kn_node *n, void *params) {
    kn_softmax_prm *p = params;
    p->old = n->opset < 13;
    p->axis = kn_attr_int(n, "axis", p->old ? 1 : -1);
    p->log = !strcmp(n->op_type, "LogSoftmax");
    return KILN_OK;
}

static kiln_status softmax_geometry(kn_kernel_ctx *c, const kn_softmax_prm *p, const kn_tensor *x, int64_t *outer,
                                    int64_t *n, int64_t *inner) {
    int rank = x->rank;
    int old = p->old;
    int64_t axis = p->axis;
    if (rank == 0) {
        *outer = 1, *n = 1, *inner = 1;
        return KILN_OK;
    }
    if (old && axis == rank) axis = rank - 1;
    if (axis < -rank || axis >= rank) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis %lld out of range", (long long)axis);
    if (axis < 0) axis += rank;
    *outer = 1, *n = 1, *inner = 1;
    for (int k = 0; k < axis; k++) *outer *= x->dims[k];
    if (old) {
        for (int k = (int)axis; k < rank; k++) *n *= x->dims[k];
    } else {
        *n = x->dims[axis];
        for (int k = (int)axis + 1; k < rank; k++) *inner *= x->dims[k];
    }
    return KILN_OK;
}

/* ---- float rows ---- */

#if !defined(__AVX512F__) && !(defined(__AVX2__) && defined(__FMA__))
/* y = exp(x - m); returns the sum (16 lanes, so exp and sum run in one vectorised pass) */
static float row_exp_f32(const float *x, float *y, int64_t n, float m) {
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) {
            float e = kn_nn_expf(x[i + l] - m);
            y[i + l] = e;
            acc[l] += e;
        }
    float s = 0;
    for (int l = 0; l < 16; l++) s += acc[l];
    for (; i < n; i++) s += (y[i] = kn_nn_expf(x[i] - m));
    return s;
}
#endif

typedef struct softmax_job {
    const float *x;
    float *y;
    const double *xd;
    double *yd;
    const uint16_t *xh; /* float16 rows (AVX-512 path) */
    uint16_t *yh;
    int64_t n, inner, chunks, chunk;
    int log;
    int failed;
} softmax_job;

#if defined(__AVX512F__)
/* exp(-d) for d = max - x >= 0 (or NaN), exactly 0 past the underflow limit d > 126 ln2 =
 * 87.3365 (a masked entry, x = -inf, d = inf, gives 0), NaN kept: 11 vector operations where
 * kn_v16_exp_neg_ftz (which clamps d to [-88.7, 87.3] first and rounds with vrndscaleps, two
 * uops) takes 15; perf of LogSoftmax 64x4096 had the exponential pass at 43% of the time.
 * n = round(-d / ln2) by adding 1.5 2^23 (the fused product rounds once to an integer, ties to
 * even; n in [-126, 0] on the lanes kept, so 2^n p rounds once through vscalefps, subnormals
 * included), r = -d - n ln2 in two parts (ln2's high part has 9 bits: n ln2hi and the
 * subtraction are exact), exp(r) by kn_v16_exp_poly (vec_math.h: degree 5, fitted on
 * |r| <= ln2/2, 1.1e-7 relative). Lanes past the limit or at d = inf compute garbage the zeroing
 * mask clears; NaN stays NaN through r (the mask keeps unordered lanes). */
static inline __m512 sm16_exp_neg(__m512 d) {
    const __mmask16 keep = _mm512_cmp_ps_mask(d, _mm512_set1_ps(87.3365447505531f), _CMP_NGT_UQ);
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    const __m512 n = _mm512_sub_ps(_mm512_fnmadd_ps(d, _mm512_set1_ps(1.44269504088896341f), magic), magic);
    __m512 r = _mm512_fnmsub_ps(n, _mm512_set1_ps(0.693359375f), d); /* -(n ln2hi) - d */
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    return _mm512_maskz_scalef_ps(keep, kn_v16_exp_poly(r), n);
}

/* The exponential pass of a row with AVX-512: y = exp(x - m) (sm16_exp_neg of m - x) stored
 * (unless log) and summed in the same pass, 16 lanes and masked tails; returns the sum. Where xn
 * is not NULL (rows_chain16), the maximum of the next row xn (n floats) is taken in the same pass
 * into *mn. Always inlined: each caller's copy keeps only its own loads (xn NULL folds away). */
static inline __attribute__((always_inline)) float sm16_exp_pass(const float *x, float *y, int64_t n, float m,
                                                                 int log, const float *xn, float *mn) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY), mm = _mm512_set1_ps(m);
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, n0 = ninf, n1 = ninf;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 e0 = sm16_exp_neg(_mm512_sub_ps(mm, _mm512_loadu_ps(x + i)));
        const __m512 e1 = sm16_exp_neg(_mm512_sub_ps(mm, _mm512_loadu_ps(x + i + 16)));
        if (xn) {
            n0 = _mm512_max_ps(_mm512_loadu_ps(xn + i), n0);
            n1 = _mm512_max_ps(_mm512_loadu_ps(xn + i + 16), n1);
        }
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
        if (!log) {
            _mm512_storeu_ps(y + i, e0);
            _mm512_storeu_ps(y + i + 16, e1);
        }
    }
    for (; i < n; i += 16) {
        const __mmask16 k = kn_v16_tail(n - i);
        const __m512 e = _mm512_maskz_mov_ps(k, sm16_exp_neg(_mm512_sub_ps(mm, _mm512_maskz_loadu_ps(k, x + i))));
        if (xn) n0 = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, k, xn + i), n0);
        s0 = _mm512_add_ps(s0, e);
        if (!log) _mm512_mask_storeu_ps(y + i, k, e);
    }
    if (xn) *mn = _mm512_reduce_max_ps(_mm512_max_ps(n0, n1));
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* One row with AVX-512: the maximum, then exp(x - max) (sm16_exp_neg of max - x, a few ulp;
 * exactly 0 past the underflow limit: a masked entry, x = -inf, gives 0) stored and summed in the
 * same pass, then the scale (or, for LogSoftmax, (x - max) - log sum).
 * 16 lanes and masked tails: rows of 4096 ran 2x slower than ONNX Runtime through the
 * compiler-vectorised loops (256-bit, a scalar tail, exp through a call-free but wider sequence).
 * NaN anywhere in the row makes the sum, and so every output, NaN, as in the scalar form. */

static void row_softmax16(const float *x, float *y, int64_t n, int log) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    /* four running maxima: one chain of dependent vmaxps ran the pass at its latency */
    __m512 mv = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        mv = _mm512_max_ps(_mm512_loadu_ps(x + i), mv);
        m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
        m2 = _mm512_max_ps(_mm512_loadu_ps(x + i + 32), m2);
        m3 = _mm512_max_ps(_mm512_loadu_ps(x + i + 48), m3);
    }
    for (; i + 16 <= n; i += 16) mv = _mm512_max_ps(_mm512_loadu_ps(x + i), mv);
    if (i < n) mv = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, kn_v16_tail(n - i), x + i), mv);
    const float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(mv, m1), _mm512_max_ps(m2, m3)));
    const __m512 mm = _mm512_set1_ps(m);
    const float s = sm16_exp_pass(x, y, n, m, log, NULL, NULL);
    if (log) {
        const __m512 mmv = mm, ls = _mm512_set1_ps(logf(s));
        for (i = 0; i < n; i += 16) {
            const __mmask16 k = kn_v16_tail(n - i);
            /* (x - m) first: exact near the maximum even for large x */
            _mm512_mask_storeu_ps(y + i, k, _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mmv), ls));
        }
    } else {
        const __m512 inv = _mm512_set1_ps(1.0f / s);
        for (i = 0; i < n; i += 16) {
            const __mmask16 k = kn_v16_tail(n - i);
            _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), inv));
        }
    }
}

#endif

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#define SM_V8 1
/* row_softmax16 at 8 lanes (vec_math.h's kn_v8_exp_neg_ftz) for AVX2 targets: the
 * compiler-vectorised loops below stay scalar there (kn_nn_expf's clamps are kept as branches:
 * 10-13x ONNX Runtime's time on an AVX2 CPU). Tails through a buffer: the maximum's padded with
 * -inf, the exponentials' lanes past the row zeroed. */
static inline __m256 sm8_part(const float *p, int64_t n, float fill) {
    float b[8];
    for (int l = 0; l < 8; l++) b[l] = l < n ? p[l] : fill;
    return _mm256_loadu_ps(b);
}

/* the exponential pass of row_softmax8: y = exp(x - m) (unless log), returns the sum; EXP is
 * kn_v8_exp_neg_ftz, or kn_v8_exp_neg_normal where no lane can be past the underflow limit */
#define SM8_EXP_PASS(EXP)                                                                          \
    do {                                                                                           \
        for (; i + 16 <= n; i += 16) {                                                             \
            const __m256 e0 = EXP(_mm256_sub_ps(mm, _mm256_loadu_ps(x + i)));                      \
            const __m256 e1 = EXP(_mm256_sub_ps(mm, _mm256_loadu_ps(x + i + 8)));                  \
            s0 = _mm256_add_ps(s0, e0);                                                            \
            s1 = _mm256_add_ps(s1, e1);                                                            \
            if (!log) {                                                                            \
                _mm256_storeu_ps(y + i, e0);                                                       \
                _mm256_storeu_ps(y + i + 8, e1);                                                   \
            }                                                                                      \
        }                                                                                          \
        for (; i + 8 <= n; i += 8) {                                                               \
            const __m256 e = EXP(_mm256_sub_ps(mm, _mm256_loadu_ps(x + i)));                       \
            s0 = _mm256_add_ps(s0, e);                                                             \
            if (!log) _mm256_storeu_ps(y + i, e);                                                  \
        }                                                                                          \
    } while (0)

static SM_ALIGNED void row_softmax8(const float *x, float *y, int64_t n, int log) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY), pinf = _mm256_set1_ps(INFINITY);
    /* four running maxima: one chain of dependent vmaxps would run at its latency; and two
     * running minima (NaN skipped by both, as by the maximum) */
    __m256 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf, l0 = pinf, l1 = pinf;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        const __m256 c = _mm256_loadu_ps(x + i + 16), d = _mm256_loadu_ps(x + i + 24);
        m0 = _mm256_max_ps(a, m0);
        m1 = _mm256_max_ps(b, m1);
        m2 = _mm256_max_ps(c, m2);
        m3 = _mm256_max_ps(d, m3);
        l0 = _mm256_min_ps(_mm256_min_ps(a, b), l0);
        l1 = _mm256_min_ps(_mm256_min_ps(c, d), l1);
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 a = _mm256_loadu_ps(x + i);
        m0 = _mm256_max_ps(a, m0);
        l0 = _mm256_min_ps(a, l0);
    }
    if (i < n) {
        m0 = _mm256_max_ps(sm8_part(x + i, n - i, -INFINITY), m0);
        l0 = _mm256_min_ps(sm8_part(x + i, n - i, INFINITY), l0);
    }
    const float m = kn_vf_reduce_max(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    const float lo = -kn_vf_reduce_max(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_min_ps(l0, l1)));
    const __m256 mm = _mm256_set1_ps(m);
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    i = 0;
    /* every d = m - x in [0, 87.3365] (computed in double: exact for floats): no lane needs
     * kn_v8_exp_neg_ftz's mask (2 of its 15 vector operations), the same results */
    if ((double)m - (double)lo <= 87.3365447505531) SM8_EXP_PASS(kn_v8_exp_neg_normal);
    else SM8_EXP_PASS(kn_v8_exp_neg_ftz);
    if (i < n) {
        const __m256 live = _mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
        const __m256 e = _mm256_and_ps(live, kn_v8_exp_neg_ftz(_mm256_sub_ps(mm, sm8_part(x + i, n - i, 0.0f))));
        s0 = _mm256_add_ps(s0, e);
        if (!log) kn_v8_store_part(y + i, n - i, e);
    }
    const float s = kn_vf_reduce_add(_mm256_add_ps(s0, s1));
    i = 0;
    if (log) {
        const __m256 ls = _mm256_set1_ps(logf(s));
        /* (x - m) first: exact near the maximum even for large x */
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mm), ls));
        if (i < n) kn_v8_store_part(y + i, n - i, _mm256_sub_ps(_mm256_sub_ps(kn_v8_load_part(x + i, n - i), mm), ls));
    } else {
        const __m256 inv = _mm256_set1_ps(1.0f / s);
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
        if (i < n) kn_v8_store_part(y + i, n - i, _mm256_mul_ps(kn_v8_load_part(y + i, n - i), inv));
    }
}

/* row_softmax8's phases as functions, for rows_softmax8 (row_softmax8 keeps its own body: built from
 * these, rows of 4096-32000 ran 4-13% slower, for reasons of code generation not found).
 * The first: the row maximum; *normal when every m - x is within 87.3365 */
static inline float sm8_max(const float *x, int64_t n, int *normal) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY), pinf = _mm256_set1_ps(INFINITY);
    /* four running maxima: one chain of dependent vmaxps would run at its latency; and two
     * running minima (NaN skipped by both, as by the maximum) */
    __m256 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf, l0 = pinf, l1 = pinf;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        const __m256 c = _mm256_loadu_ps(x + i + 16), d = _mm256_loadu_ps(x + i + 24);
        m0 = _mm256_max_ps(a, m0);
        m1 = _mm256_max_ps(b, m1);
        m2 = _mm256_max_ps(c, m2);
        m3 = _mm256_max_ps(d, m3);
        l0 = _mm256_min_ps(_mm256_min_ps(a, b), l0);
        l1 = _mm256_min_ps(_mm256_min_ps(c, d), l1);
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 a = _mm256_loadu_ps(x + i);
        m0 = _mm256_max_ps(a, m0);
        l0 = _mm256_min_ps(a, l0);
    }
    if (i < n) {
        m0 = _mm256_max_ps(sm8_part(x + i, n - i, -INFINITY), m0);
        l0 = _mm256_min_ps(sm8_part(x + i, n - i, INFINITY), l0);
    }
    const float m = kn_vf_reduce_max(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    const float lo = -kn_vf_reduce_max(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_min_ps(l0, l1)));
    /* every d = m - x in [0, 87.3365] (computed in double: exact for floats): no lane needs
     * kn_v8_exp_neg_ftz's mask (2 of its 15 vector operations), the same results */
    *normal = (double)m - (double)lo <= 87.3365447505531;
    return m;
}

/* the second: y = exp(x - m) (unless log), returns the sum */
static inline float sm8_exp(const float *x, float *y, int64_t n, float m, int normal, int log) {
    const __m256 mm = _mm256_set1_ps(m);
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t i = 0;
    if (normal) SM8_EXP_PASS(kn_v8_exp_neg_normal);
    else SM8_EXP_PASS(kn_v8_exp_neg_ftz);
    if (i < n) {
        const __m256 live = _mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
        const __m256 e = _mm256_and_ps(live, kn_v8_exp_neg_ftz(_mm256_sub_ps(mm, sm8_part(x + i, n - i, 0.0f))));
        s0 = _mm256_add_ps(s0, e);
        if (!log) kn_v8_store_part(y + i, n - i, e);
    }
    return kn_vf_reduce_add(_mm256_add_ps(s0, s1));
}

/* the third (Softmax): y *= 1 / s */
static inline void sm8_scale(float *y, int64_t n, float s) {
    const __m256 inv = _mm256_set1_ps(1.0f / s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
    if (i < n) kn_v8_store_part(y + i, n - i, _mm256_mul_ps(kn_v8_load_part(y + i, n - i), inv));
}

/* Softmax (not log) of rows x + r*ldx -> y + r*ldy, r < rows, row_softmax8's phases software-
 * pipelined: the next row's maximum runs between a row's sum and its scale, so the latency of
 * the sum's horizontal reduction and the division is spent on independent work (a row of 128
 * keys, 16 vectors, is about 250 cycles, and the exponential pass alone fills the out-of-order
 * window). The same operations per row: the same results. For rows up to SM8_PIPELINE_MAX floats:
 * 1 thread, Zen 3, Softmax 1x12x128x128 0.93 of the row-at-a-time time; rows of 1000 and 4096 were
 * 1.06x and 1.14x slower pipelined (the next row's maximum pass pushes the row's exponentials out
 * of L1 before the scale reads them back, and at 1000 not found). */
#define SM8_PIPELINE_MAX 256
static SM_ALIGNED void rows_softmax8(const float *x, int64_t ldx, float *y, int64_t ldy, int64_t rows, int64_t n) {
    if (rows <= 0) return;
    int normal;
    float m = sm8_max(x, n, &normal);
    float s = sm8_exp(x, y, n, m, normal, 0);
    for (int64_t r = 1; r < rows; r++) {
        m = sm8_max(x + r * ldx, n, &normal);
        sm8_scale(y + (r - 1) * ldy, n, s);
        s = sm8_exp(x + r * ldx, y + r * ldy, n, m, normal, 0);
    }
    sm8_scale(y + (rows - 1) * ldy, n, s);
}

#endif

#if defined(__AVX512F__) || defined(SM_V8)
/* float16 rows: each row converted to float (kn_ew_f16_to_f32: vcvtph2ps) into a scratch row,
 * the float row computed, converted back rounding to nearest even (kn_ew_f32_to_f16); no whole-tensor copies in
 * float (which took 30x ONNX Runtime's time on 64 x 4096 through the scalar conversions). */
static void softmax_rows_f16(void *arg, int64_t b, int64_t e) {
    softmax_job *j = arg;
    const int64_t n = j->n;
    float *buf = malloc(sizeof(float) * (size_t)(2 * n + 32));
    if (!buf) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *xf = buf, *yf = buf + n + 16;
    for (int64_t r = b; r < e; r++) {
        const uint16_t *xh = j->xh + r * n;
        uint16_t *yh = j->yh + r * n;
        kn_ew_f16_to_f32(xh, xf, n);
        kn_softmax_row_f32(xf, yf, n, j->log);
        kn_ew_f32_to_f16(yf, yh, n);
    }
    free(buf);
}
#endif

#if defined(__AVX512F__)
/* Four rows of row_softmax16, x[r] -> y[r] (in place where they are equal), each phase
 * interleaved over the rows: the same operations in the same order per row, so the same results,
 * with four independent chains (a row of 128-200 keys was mostly the latency of its two
 * horizontal reductions). For rows up to SM16_ROWS4_MAX floats (four rows' inputs and outputs
 * in L1). */
#define SM16_ROWS4_MAX 1024
/* y[0:n] * inv rounded to bf16 (nearest even) into o: the bf16 instructions' own rounding, 32 a
 * step (AVX-512F's integer rounding, a dozen operations a vector, made the pass cost what packing
 * the rows separately had). Only called where the CPU has AVX512_BF16 (kn_softmax_rows_f32_to_bf16's
 * callers: the bf16 products on AMX); compilers without the intrinsics get no caller of it. */
#if (defined(__clang__) || __GNUC__ >= 10) && defined(__x86_64__)
#define SM16_BF16 1
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void sm16_scale_bf16(const float *y, int64_t n,
                                                                                          float inv, uint16_t *o) {
    const __m512 vi = _mm512_set1_ps(inv);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        _mm512_storeu_si512(o + i, (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(_mm512_loadu_ps(y + i + 16), vi),
                                                               _mm512_mul_ps(_mm512_loadu_ps(y + i), vi)));
    for (; i < n; i += 16) {
        const __mmask16 k = kn_v16_tail(n - i);
        _mm256_mask_storeu_epi16(o + i, k, (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), vi)));
    }
}
#endif

/* y16 (not NULL, not log): the last pass stores the rows in bf16 there instead of in y (y then
 * holds the exponentials) */
static void rows4_softmax16(const float *const x[4], float *const y[4], int64_t n, int log, uint16_t *const *y16) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mv[4], m1[4], m2[4], m3[4], mm[4], s0[4], s1[4];
    for (int r = 0; r < 4; r++) mv[r] = m1[r] = m2[r] = m3[r] = ninf;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int r = 0; r < 4; r++) {
            mv[r] = _mm512_max_ps(_mm512_loadu_ps(x[r] + i), mv[r]);
            m1[r] = _mm512_max_ps(_mm512_loadu_ps(x[r] + i + 16), m1[r]);
            m2[r] = _mm512_max_ps(_mm512_loadu_ps(x[r] + i + 32), m2[r]);
            m3[r] = _mm512_max_ps(_mm512_loadu_ps(x[r] + i + 48), m3[r]);
        }
    for (; i + 16 <= n; i += 16)
        for (int r = 0; r < 4; r++) mv[r] = _mm512_max_ps(_mm512_loadu_ps(x[r] + i), mv[r]);
    if (i < n)
        for (int r = 0; r < 4; r++) mv[r] = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, kn_v16_tail(n - i), x[r] + i), mv[r]);
    for (int r = 0; r < 4; r++) {
        mm[r] = _mm512_set1_ps(
            _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(mv[r], m1[r]), _mm512_max_ps(m2[r], m3[r]))));
        s0[r] = s1[r] = _mm512_setzero_ps();
    }
    i = 0;
    for (; i + 32 <= n; i += 32)
        for (int r = 0; r < 4; r++) {
            const __m512 e0 = sm16_exp_neg(_mm512_sub_ps(mm[r], _mm512_loadu_ps(x[r] + i)));
            const __m512 e1 = sm16_exp_neg(_mm512_sub_ps(mm[r], _mm512_loadu_ps(x[r] + i + 16)));
            s0[r] = _mm512_add_ps(s0[r], e0);
            s1[r] = _mm512_add_ps(s1[r], e1);
            if (!log) {
                _mm512_storeu_ps(y[r] + i, e0);
                _mm512_storeu_ps(y[r] + i + 16, e1);
            }
        }
    for (; i < n; i += 16) {
        const __mmask16 k = kn_v16_tail(n - i);
        for (int r = 0; r < 4; r++) {
            const __m512 e =
                _mm512_maskz_mov_ps(k, sm16_exp_neg(_mm512_sub_ps(mm[r], _mm512_maskz_loadu_ps(k, x[r] + i))));
            s0[r] = _mm512_add_ps(s0[r], e);
            if (!log) _mm512_mask_storeu_ps(y[r] + i, k, e);
        }
    }
    if (log) {
        __m512 ls[4];
        for (int r = 0; r < 4; r++) ls[r] = _mm512_set1_ps(logf(_mm512_reduce_add_ps(_mm512_add_ps(s0[r], s1[r]))));
        for (i = 0; i < n; i += 16) {
            const __mmask16 k = kn_v16_tail(n - i);
            /* (x - m) first: exact near the maximum even for large x */
            for (int r = 0; r < 4; r++)
                _mm512_mask_storeu_ps(y[r] + i, k,
                                      _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x[r] + i), mm[r]), ls[r]));
        }
        return;
    }
    __m512 inv[4];
    for (int r = 0; r < 4; r++) inv[r] = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_add_ps(s0[r], s1[r])));
#if defined(SM16_BF16)
    if (y16) {
        for (int r = 0; r < 4; r++) sm16_scale_bf16(y[r], n, _mm512_cvtss_f32(inv[r]), y16[r]);
        return;
    }
#else
    (void)y16;
#endif
    for (i = 0; i < n; i += 16) {
        const __mmask16 k = kn_v16_tail(n - i);
        for (int r = 0; r < 4; r++)
            _mm512_mask_storeu_ps(y[r] + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y[r] + i), inv[r]));
    }
}
#endif

#if defined(__AVX512F__)
/* Rows longer than SM16_ROWS4_MAX, one after another (x and y contiguous rows of n): row_softmax16
 * with each row's maximum taken in the previous row's exponential pass. perf of Softmax 64x4096
 * (1 thread): the maximum's pass, a row's first read (from L2 or beyond), 34% of the time at a
 * sixth of the exponential pass's operations; beside the exponentials, which are bound by the
 * vector ports, its loads cost little. The maximum is exact whatever the order (NaN skipped, as
 * by row_softmax16's vmaxps), so each row's operations and results are row_softmax16's. */
static void rows_chain16(const float *x, float *y, int64_t rows, int64_t n, int log) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 a0 = ninf, a1 = ninf, a2 = ninf, a3 = ninf;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_max_ps(_mm512_loadu_ps(x + i), a0);
        a1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_max_ps(_mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_max_ps(_mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i < n; i += 16) a0 = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, kn_v16_tail(n - i), x + i), a0);
    float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(a0, a1), _mm512_max_ps(a2, a3)));
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        /* the last row reads itself again as its "next" (from L1; the value unused) */
        const float *xn = r + 1 < rows ? xr + n : xr;
        const __m512 mm = _mm512_set1_ps(m);
        float next_m = -INFINITY; /* set by the pass (xn is never NULL here) */
        const float s = sm16_exp_pass(xr, yr, n, m, log, xn, &next_m);
        /* the last pass (elementwise) starts with one masked vector up to yr's next 64-byte
         * boundary, so its stores are whole lines: a row 32 bytes past one (numpy's buffers) ran
         * Softmax 64x4096 at 1.25x the aligned row's time (call_ab, Ice Lake Xeon, 1 thread) */
        const uintptr_t mis = (uintptr_t)yr & 63;
        const int64_t head = mis && !(mis & 3) && n >= 32 ? (int64_t)(64 - mis) / 4 : 0;
        if (log) {
            const __m512 ls = _mm512_set1_ps(logf(s));
            if (head) {
                const __mmask16 k = kn_v16_tail(head);
                _mm512_mask_storeu_ps(yr, k, _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr), mm), ls));
            }
            for (i = head; i + 16 <= n; i += 16)
                _mm512_storeu_ps(yr + i, _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(xr + i), mm), ls));
            if (i < n) {
                const __mmask16 k = kn_v16_tail(n - i);
                _mm512_mask_storeu_ps(yr + i, k, _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + i), mm), ls));
            }
        } else {
            const __m512 inv = _mm512_set1_ps(1.0f / s);
            if (head) {
                const __mmask16 k = kn_v16_tail(head);
                _mm512_mask_storeu_ps(yr, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, yr), inv));
            }
            for (i = head; i + 16 <= n; i += 16) _mm512_storeu_ps(yr + i, _mm512_mul_ps(_mm512_loadu_ps(yr + i), inv));
            if (i < n) {
                const __mmask16 k = kn_v16_tail(n - i);
                _mm512_mask_storeu_ps(yr + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, yr + i), inv));
            }
        }
        m = next_m;
    }
}
#endif

void kn_softmax_rows_f32(float *x, int64_t rows, int64_t n, int64_t ld) {
    int64_t r = 0;
#if defined(__AVX512F__)
    for (; r + 4 <= rows; r += 4) {
        float *const q[4] = {x + r * ld, x + (r + 1) * ld, x + (r + 2) * ld, x + (r + 3) * ld};
        rows4_softmax16((const float *const *)q, q, n, 0, NULL);
    }
#elif defined(SM_V8)
    if (n <= SM8_PIPELINE_MAX) {
        rows_softmax8(x, ld, x, ld, rows, n);
        r = rows;
    }
#endif
    for (; r < rows; r++) kn_softmax_row_f32(x + r * ld, x + r * ld, n, false);
}

void kn_softmax_rows_f32_to_bf16(float *x, int64_t rows, int64_t n, int64_t ld, uint16_t *y16, int64_t ldy) {
    int64_t r = 0;
#if defined(__AVX512F__) && defined(SM16_BF16)
    for (; r + 4 <= rows; r += 4) {
        float *const q[4] = {x + r * ld, x + (r + 1) * ld, x + (r + 2) * ld, x + (r + 3) * ld};
        uint16_t *const o[4] = {y16 + r * ldy, y16 + (r + 1) * ldy, y16 + (r + 2) * ldy, y16 + (r + 3) * ldy};
        rows4_softmax16((const float *const *)q, q, n, 0, o);
    }
#endif
    for (; r < rows; r++) {
        kn_softmax_row_f32(x + r * ld, x + r * ld, n, false);
        for (int64_t i = 0; i < n; i++) y16[r * ldy + i] = kn_f32_to_bf16(x[r * ld + i]);
    }
}

void kn_softmax_row_f32(const float *x, float *y, int64_t n, bool take_log) {
#if defined(__AVX512F__)
    row_softmax16(x, y, n, take_log);
#elif defined(SM_V8)
    row_softmax8(x, y, n, take_log);
#else
    float m = kn_nn_row_maxf(x, n);
    float s = row_exp_f32(x, y, n, m);
    if (take_log) {
        /* (x - m) first: exact near the maximum even for large x */
        float ls = logf(s);
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) - ls;
    } else {
        float inv = 1.0f / s;
        for (int64_t i = 0; i < n; i++) y[i] *= inv;
    }
#endif
}

static void softmax_rows_f32(void *arg, int64_t b, int64_t e) {
    const softmax_job *j = arg;
    int64_t n = j->n;
#if defined(SM_V8)
    if (!j->log && n <= SM8_PIPELINE_MAX) {
        rows_softmax8(j->x + b * n, n, j->y + b * n, n, e - b, n);
        return;
    }
#endif
    int64_t r = b;
#if defined(__AVX512F__)
    if (n <= SM16_ROWS4_MAX)
        for (; r + 4 <= e; r += 4) {
            const float *const q[4] = {j->x + r * n, j->x + (r + 1) * n, j->x + (r + 2) * n, j->x + (r + 3) * n};
            float *const o[4] = {j->y + r * n, j->y + (r + 1) * n, j->y + (r + 2) * n, j->y + (r + 3) * n};
            rows4_softmax16(q, o, n, j->log, NULL);
        }
    else {
        rows_chain16(j->x + b * n, j->y + b * n, e - b, n, j->log);
        return;
    }
#endif
    for (; r < e; r++) kn_softmax_row_f32(j->x + r * n, j->y + r * n, n, j->log);
}

/* unit u: outer index u / chunks, inner elements of chunk u % chunks */
static SM_ALIGNED void softmax_strided_f32(void *arg, int64_t b, int64_t e) {
    const softmax_job *j = arg;
    int64_t n = j->n, inner = j->inner;
    float m[256], s[256];
    for (int64_t u = b; u < e; u++) {
        int64_t o = u / j->chunks, i0 = (u % j->chunks) * j->chunk;
        int64_t len = inner - i0 < j->chunk ? inner - i0 : j->chunk;
        const float *x = j->x + o * n * inner + i0;
        float *y = j->y + o * n * inner + i0;
        for (int64_t i = 0; i < len; i++) m[i] = -INFINITY, s[i] = 0;
        for (int64_t r = 0; r < n; r++)
            for (int64_t i = 0; i < len; i++) m[i] = x[r * inner + i] > m[i] ? x[r * inner + i] : m[i];
#if defined(SM_V8)
        /* 8 columns at a time (the scalar loop below stays scalar on this target) */
        for (int64_t r = 0; r < n; r++)
            for (int64_t i = 0; i < len; i += 8) {
                const int64_t k = len - i < 8 ? len - i : 8;
                const float *xr = x + r * inner + i;
                float *yr = y + r * inner + i;
                if (k == 8) {
                    const __m256 e = kn_v8_exp_neg_ftz(_mm256_sub_ps(_mm256_loadu_ps(m + i), _mm256_loadu_ps(xr)));
                    _mm256_storeu_ps(yr, e);
                    _mm256_storeu_ps(s + i, _mm256_add_ps(_mm256_loadu_ps(s + i), e));
                } else {
                    const __m256 e =
                        kn_v8_exp_neg_ftz(_mm256_sub_ps(kn_v8_load_part(m + i, k), kn_v8_load_part(xr, k)));
                    kn_v8_store_part(yr, k, e);
                    kn_v8_store_part(s + i, k, _mm256_add_ps(kn_v8_load_part(s + i, k), e));
                }
            }
#else
        for (int64_t r = 0; r < n; r++)
            for (int64_t i = 0; i < len; i++) {
                float v = kn_nn_expf(x[r * inner + i] - m[i]);
                y[r * inner + i] = v;
                s[i] += v;
            }
#endif
        if (j->log) {
            for (int64_t i = 0; i < len; i++) s[i] = logf(s[i]);
            for (int64_t r = 0; r < n; r++)
                for (int64_t i = 0; i < len; i++) y[r * inner + i] = (x[r * inner + i] - m[i]) - s[i];
        } else {
            for (int64_t i = 0; i < len; i++) s[i] = 1.0f / s[i];
            for (int64_t r = 0; r < n; r++)
                for (int64_t i = 0; i < len; i++) y[r * inner + i] *= s[i];
        }
    }
}

/* double: plain loops (rare type), one (outer, inner) slice per index */
static void softmax_f64(void *arg, int64_t b, int64_t e) {
    const softmax_job *j = arg;
    int64_t n = j->n, inner = j->inner;
    for (int64_t u = b; u < e; u++) {
        int64_t o = u / inner, i = u % inner;
        const double *x = j->xd + o * n * inner + i;
        double *y = j->yd + o * n * inner + i;
        double m = -INFINITY, s = 0;
        for (int64_t r = 0; r < n; r++) m = x[r * inner] > m ? x[r * inner] : m;
        for (int64_t r = 0; r < n; r++) s += (y[r * inner] = exp(x[r * inner] - m));
        if (j->log) {
            double ls = log(s);
            for (int64_t r = 0; r < n; r++) y[r * inner] = (x[r * inner] - m) - ls;
        } else {
            for (int64_t r = 0; r < n; r++) y[r * inner] /= s;
        }
    }
}

kiln_status kn_cpu_softmax(kn_kernel_ctx *c) {
    KN_CTX_PRM(c, kn_softmax_prepare, kn_softmax_prm, prm);
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return KILN_OK;
    int64_t outer = 1, n = 1, inner = 1;
    KN_TRY(softmax_geometry(c, prm, x, &outer, &n, &inner));
    if (outer * n * inner == 0) return KILN_OK;
    softmax_job j = {0};
    j.n = n;
    j.inner = inner;
    j.log = prm->log;
    if (x->dtype == KILN_DTYPE_DOUBLE) {
        j.xd = x->data;
        j.yd = y->data;
        int64_t grain = n >= 4096 ? 1 : 4096 / n;
        kn_parallel_for(c->pool, outer * inner, grain, softmax_f64, &j);
        return KILN_OK;
    }
#if defined(__AVX512F__) || defined(SM_V8)
    if (x->dtype == KILN_DTYPE_FLOAT16 && y->dtype == KILN_DTYPE_FLOAT16 && inner == 1) {
        j.xh = x->data;
        j.yh = y->data;
        int64_t grain = n >= 8192 ? 1 : 8192 / n;
        kn_parallel_for(c->pool, outer, grain, softmax_rows_f16, &j);
        return j.failed ? KN_OOM() : KILN_OK;
    }
#endif
    j.x = kn_nn_f32_view(x);
    j.y = kn_nn_f32_out(y);
    if (!j.x || !j.y) {
        kn_nn_release(x, j.x);
        if (j.y != y->data) free(j.y);
        return KN_OOM();
    }
    if (inner == 1) {
        int64_t grain = n >= 8192 ? 1 : 8192 / n;
        kn_parallel_for(c->pool, outer, grain, softmax_rows_f32, &j);
    } else {
        j.chunk = inner < 256 ? inner : 256;
        j.chunks = (inner + j.chunk - 1) / j.chunk;
        int64_t work = n * j.chunk;
        int64_t grain = work >= 8192 ? 1 : 8192 / work;
        kn_parallel_for(c->pool, outer * j.chunks, grain, softmax_strided_f32, &j);
    }
    kn_nn_release(x, j.x);
    kn_nn_f32_commit(y, j.y);
    return KILN_OK;
}

/* Hardmax's pick on a float row: the first index of the largest element under the double loop's
 * rule below (a later element must be greater; a NaN is never greater, and a NaN first keeps
 * index 0), found as the maximum over the non-NaN elements and then its first occurrence (-0 and
 * 0 compare equal, as there). Converting the whole tensor to double took 2.2x ONNX Runtime's time
 * on 64x1000. */
static int64_t hardmax_row(const float *p, int64_t n) {
    if (p[0] != p[0]) return 0;
    float m = p[0];
    int64_t i = 0;
#if defined(__AVX__)
    if (n >= 16) {
        /* every lane starts at p[0], a number; vmaxps(v, a) keeps a where v is NaN */
        __m256 a = _mm256_set1_ps(m);
        for (; i + 8 <= n; i += 8) a = _mm256_max_ps(_mm256_loadu_ps(p + i), a);
        __m128 h = _mm_max_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
        h = _mm_max_ps(_mm_movehl_ps(h, h), h);
        h = _mm_max_ps(_mm_movehdup_ps(h), h);
        m = _mm_cvtss_f32(h);
    }
#endif
    for (; i < n; i++) m = p[i] > m ? p[i] : m;
    i = 0;
#if defined(__AVX__)
    const __m256 mv = _mm256_set1_ps(m);
    for (; i + 8 <= n; i += 8) {
        const int k = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(p + i), mv, _CMP_EQ_OQ));
        if (k) return i + __builtin_ctz((unsigned)k);
    }
#endif
    for (; i < n; i++)
        if (p[i] == m) return i;
    return 0; /* not reached: m is one of the elements */
}

kiln_status kn_cpu_hardmax(kn_kernel_ctx *c) {
    KN_CTX_PRM(c, kn_softmax_prepare, kn_softmax_prm, prm);
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return KILN_OK;
    int64_t outer = 1, n = 1, inner = 1;
    KN_TRY(softmax_geometry(c, prm, x, &outer, &n, &inner));
    memset(y->data, 0, y->nbytes);
    if (outer * n * inner == 0) return KILN_OK;
    if (x->dtype == KILN_DTYPE_FLOAT && y->dtype == KILN_DTYPE_FLOAT && inner == 1) {
        const float *xp = x->data;
        float *yp = y->data;
        for (int64_t o = 0; o < outer; o++) yp[o * n + hardmax_row(xp + o * n, n)] = 1.0f;
        return KILN_OK;
    }
    double *v = malloc((size_t)(outer * n * inner) * sizeof *v);
    if (!v) return KN_OOM();
    kn_nn_to_f64(x, v);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const double *p = v + o * n * inner + i;
            int64_t bi = 0;
            for (int64_t r = 1; r < n; r++)
                if (p[r * inner] > p[bi * inner]) bi = r;
            kn_tensor_set_f64(y, o * n * inner + bi * inner + i, 1.0);
        }
    free(v);
    return KILN_OK;
}

/* ------------------------------------------------------------------ losses */

/* loss[n, d] = -logp[n, t, d] * w[t] with t = target[n, d]; entries equal to ignore_index
 * contribute 0 with weight 0. Reduction mean divides by the sum of the weights used. */
kiln_status kn_loss_prepare(const kn_node *n, void *params) {
    kn_loss_prm *p = params;
    const char *red = kn_attr_string(n, "reduction", "mean");
    p->reduction = !strcmp(red, "none") ? 2 : !strcmp(red, "sum") ? 1 : 0;
    p->has_ignore = kn_node_attr(n, "ignore_index") != NULL;
    p->ignore = kn_attr_int(n, "ignore_index", 0);
    return KILN_OK;
}

static kiln_status nll(kn_kernel_ctx *c, const double *logp, int64_t N, int64_t C, int64_t D, kn_tensor *out) {
    const kn_tensor *target = c->in[1];
    const kn_tensor *weight = c->n_inputs > 2 ? c->in[2] : NULL;
    KN_CTX_PRM(c, kn_loss_prepare, kn_loss_prm, prm);
    int has_ignore = prm->has_ignore;
    int64_t ignore = prm->ignore;
    if (kn_tensor_count(target) != N * D)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "target has %lld elements, expected N*d1*... = %lld",
                               (long long)kn_tensor_count(target), (long long)(N * D));
    if (weight && kn_tensor_count(weight) != C)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "weight has %lld elements, expected C = %lld",
                               (long long)kn_tensor_count(weight), (long long)C);
    int none = prm->reduction == 2;
    double *loss = none ? malloc((size_t)(N * D + 1) * sizeof *loss) : NULL;
    if (none && !loss) return KN_OOM();
    double sum = 0, wsum = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) {
            int64_t t = kn_tensor_get_i64(target, n * D + d);
            double l = 0, w = 0;
            if (!(has_ignore && t == ignore)) {
                if (t < 0 || t >= C) {
                    free(loss);
                    return kn_kernel_error(c, KILN_ERR_RUNTIME, "target value %lld at position %lld is not a class in [0, %lld)",
                                           (long long)t, (long long)(n * D + d), (long long)C);
                }
                w = weight ? kn_tensor_get_f64(weight, t) : 1.0;
                l = -logp[(n * C + t) * D + d] * w;
            }
            if (none) loss[n * D + d] = l;
            sum += l;
            wsum += w;
        }
    if (none) {
        kn_nn_from_f64(out, loss);
        free(loss);
    } else {
        double r = prm->reduction == 1 ? sum : sum / wsum;
        kn_tensor_set_f64(out, 0, r);
    }
    return KILN_OK;
}

static kiln_status loss_geometry(kn_kernel_ctx *c, int64_t *N, int64_t *C, int64_t *D) {
    const kn_tensor *x = c->in[0];
    if (x->rank < 2) return kn_kernel_error(c, KILN_ERR_SHAPE, "input needs rank >= 2");
    *N = x->dims[0];
    *C = x->dims[1];
    *D = 1;
    for (int k = 2; k < x->rank; k++) *D *= x->dims[k];
    return KILN_OK;
}

kiln_status kn_cpu_nll_loss(kn_kernel_ctx *c) {
    int64_t N = 0, C = 0, D = 1;
    KN_TRY(loss_geometry(c, &N, &C, &D));
    if (!c->out[0]) return KILN_OK;
    double *x = malloc((size_t)(N * C * D + 1) * sizeof *x);
    if (!x) return KN_OOM();
    kn_nn_to_f64(c->in[0], x);
    kiln_status s = nll(c, x, N, C, D, c->out[0]);
    free(x);
    return s;
}

kiln_status kn_cpu_sce_loss(kn_kernel_ctx *c) {
    int64_t N = 0, C = 0, D = 1;
    KN_TRY(loss_geometry(c, &N, &C, &D));
    double *x = malloc((size_t)(N * C * D + 1) * sizeof *x);
    if (!x) return KN_OOM();
    kn_nn_to_f64(c->in[0], x);
    /* log-softmax over the class axis, in place */
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) {
            double *p = x + n * C * D + d;
            double m = -INFINITY, s = 0;
            for (int64_t k = 0; k < C; k++) m = p[k * D] > m ? p[k * D] : m;
            for (int64_t k = 0; k < C; k++) s += exp(p[k * D] - m);
            double ls = log(s);
            for (int64_t k = 0; k < C; k++) p[k * D] = (p[k * D] - m) - ls;
        }
    kiln_status s = KILN_OK;
    if (c->out[0]) s = nll(c, x, N, C, D, c->out[0]);
    if (s == KILN_OK && c->n_outputs > 1 && c->out[1]) kn_nn_from_f64(c->out[1], x);
    free(x);
    return s;
}

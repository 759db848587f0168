/* CPU kernels of the com.microsoft QLinear operators: QLinearAdd, QLinearMul, QLinearSigmoid,
 * QLinearLeakyRelu, QLinearConcat, QLinearSoftmax, QLinearAveragePool and
 * QLinearGlobalAveragePool, computed as ONNX Runtime's CPU kernels compute them, so that the
 * quantised outputs agree bit for bit:
 *  - Add: c = a * (sa/sc) + (b * (sb/sc) + (zc - (sa/sc * za + sb/sc * zb))) in float32 with fused
 *    multiply-adds as MLAS's AVX2 kernel compiles (when A is one value along the innermost
 *    dimension, a scalar-A span, ONNX Runtime swaps the operands); Mul: float((a-za)(b-zb)) *
 *    (sa*sb/sc) + zc.
 *  - Sigmoid, LeakyRelu and Concat (inputs whose scale/zero point differ from the output's): a
 *    256-entry table, x dequantised as sx * (x - zx), transformed (the logistic by MLAS's rational
 *    approximation) and quantised as x / sy, rounded half to even, plus zy, saturated.
 *  - Softmax: MLAS's exponent table (uint32-free float form) and its integer rounding.
 *  - AveragePool: dequantised values summed in float in window order, divided by the count,
 *    quantised as round(y / sy + zy); GlobalAveragePool: the integer sum requantised with scale
 *    sx / (sy * count). */
#include "backend/cpu/cpu.h"
#include "backend/cpu/qcontrib_impl.h"
#include "ops/linalg_util.h"
#include "ops/qcontrib.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MS "com.microsoft"

static bool is_q8(const kn_tensor *t) { return t->dtype == KILN_DTYPE_UINT8 || t->dtype == KILN_DTYPE_INT8; }

/* Scale input si and zero point input zi (optional) of the quantised tensor input xi: per tensor. */
static kiln_status qparams(kn_kernel_ctx *c, int xi, int si, int zi, float *s, int32_t *z) {
    const kn_tensor *x = c->in[xi], *st = kn_qc_opt(c, si), *zt = zi >= 0 ? kn_qc_opt(c, zi) : NULL;
    if (!st) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "input %d (a scale) is required", si);
    if (kn_tensor_count(st) != 1)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "input %d (a scale) has %lld elements; it must be a scalar or a 1-element tensor",
                               si, (long long)kn_tensor_count(st));
    if (zt && kn_tensor_count(zt) != 1)
        return kn_kernel_error(c, KILN_ERR_SHAPE,
                               "input %d (a zero point) has %lld elements; it must be a scalar or a 1-element tensor", zi,
                               (long long)kn_tensor_count(zt));
    if (zt && x && zt->dtype != x->dtype)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "input %d is %s but its zero point %s", xi,
                               kiln_dtype_name(x->dtype), kiln_dtype_name(zt->dtype));
    *s = kn_qc_scale(st, 0);
    *z = zt ? kn_qc_q(zt, 0) : 0;
    return KILN_OK;
}

static void put(kn_tensor *y, int64_t i, int32_t q) {
    if (y->dtype == KILN_DTYPE_INT8) ((int8_t *)y->data)[i] = (int8_t)q;
    else ((uint8_t *)y->data)[i] = (uint8_t)q;
}

/* MlasQuantizeLinear of one value. */
static int32_t quantize(float v, float s, int32_t z, bool sg) {
    int32_t q;
    kn_qc_requant(v / s, z, sg, &q);
    return q;
}

/* ------------------------------------------------------------------ Add, Mul */

static kiln_status run_binary(kn_kernel_ctx *c, bool mul) {
    const kn_tensor *A = c->in[0], *B = c->in[3];
    kn_tensor *Y = c->out[0];
    if (!is_q8(A) || A->dtype != B->dtype)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "A and B must both be uint8 or both int8 (got %s and %s)",
                               kiln_dtype_name(A->dtype), kiln_dtype_name(B->dtype));
    float sa, sb, sc;
    int32_t za, zb, zc;
    KN_TRY(qparams(c, 0, 1, 2, &sa, &za));
    KN_TRY(qparams(c, 3, 4, 5, &sb, &zb));
    KN_TRY(qparams(c, 0, 6, 7, &sc, &zc));
    int r = Y->rank;
    int64_t sta[KILN_MAX_RANK], stb[KILN_MAX_RANK], idx[KILN_MAX_RANK];
    for (int d = r - 1, pa = 1, pb = 1; d >= 0; d--) {
        int ia = d - (r - A->rank), ib = d - (r - B->rank);
        int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
        if ((da != 1 && da != Y->dims[d]) || (db != 1 && db != Y->dims[d]))
            return kn_kernel_error(c, KILN_ERR_SHAPE, "A and B do not broadcast to the output");
        sta[d] = da == 1 ? 0 : pa;
        stb[d] = db == 1 ? 0 : pb;
        pa *= (int)da;
        pb *= (int)db;
        idx[d] = 0;
    }
    int64_t n = kn_tensor_count(Y), na = kn_tensor_count(A), nb = kn_tensor_count(B);
    /* which input is one value along the innermost dimension of more than one element (MLAS's
     * span is then a scalar one) */
    int inner = r - 1;
    while (inner >= 0 && Y->dims[inner] == 1) inner--;
    bool a_sc = na == 1 || (nb != 1 && inner >= 0 && sta[inner] == 0);
    bool sg = Y->dtype == KILN_DTYPE_INT8;
    const float rac = sa / sc, rbc = sb / sc, rm = sa * sb / sc;
    /* MLAS's fixed part zc - (rAC * zA + rBC * zB), the first product fused; ONNX Runtime calls
     * it with A and B swapped when A is the scalar */
    const float fixed = a_sc ? (float)zc - fmaf(rbc, (float)zb, rac * (float)za)
                             : (float)zc - fmaf(rac, (float)za, rbc * (float)zb);
    int64_t oa = 0, ob = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t a = kn_qc_q(A, oa), b = kn_qc_q(B, ob), q;
        if (mul) {
            float v = (float)((a - za) * (b - zb)) * rm + (float)zc;
            q = (int32_t)nearbyintf(v);
            int32_t lo = sg ? -128 : 0, hi = sg ? 127 : 255;
            q = !(v == v) ? lo : q < lo ? lo : q > hi ? hi : q;
        } else {
            float v;
            if (a_sc) v = fmaf((float)b, rbc, fmaf((float)a, rac, fixed));
            else v = fmaf((float)a, rac, fmaf((float)b, rbc, fixed)); /* B a scalar or not: the same */
            int32_t lo = sg ? -128 : 0, hi = sg ? 127 : 255;
            q = (int32_t)nearbyintf(v);
            q = !(v == v) || !(fabsf(v) < 2147483520.0f) ? lo : q < lo ? lo : q > hi ? hi : q;
        }
        put(Y, i, q);
        for (int d = r - 1; d >= 0; d--) {
            oa += sta[d];
            ob += stb[d];
            if (++idx[d] < Y->dims[d]) break;
            oa -= sta[d] * Y->dims[d];
            ob -= stb[d] * Y->dims[d];
            idx[d] = 0;
        }
    }
    return KILN_OK;
}

kiln_status kn_cpu_qlinear_add(kn_kernel_ctx *c) { return run_binary(c, false); }
kiln_status kn_cpu_qlinear_mul(kn_kernel_ctx *c) { return run_binary(c, true); }

/* ------------------------------------------------------------------ table-driven unary operators */

/* MlasComputeLogistic (its FMA3 kernel): a rational approximation over [-18, 18]. */
float kn_qc_mlas_logistic(float x) {
    float v = x < -18.0f ? -18.0f : x;
    v = v > 18.0f ? 18.0f : v;
    float v2 = v * v;
    float p = fmaf(v2, 4.37031012579801e-11f, 1.15627324459942e-07f);
    p = fmaf(p, v2, 6.08574864600143e-05f);
    p = fmaf(p, v2, 8.51377133304701e-03f);
    p = fmaf(p, v2, 2.48287947061529e-01f);
    p = p * v;
    float q = fmaf(v2, 6.10247389755681e-13f, 5.76102136993427e-09f);
    q = fmaf(q, v2, 6.29106785017040e-06f);
    q = fmaf(q, v2, 1.70198817374094e-03f);
    q = fmaf(q, v2, 1.16817656904453e-01f);
    q = fmaf(q, v2, 9.93151921023180e-01f);
    float r = p / q + 0.5f;
    return r < 0.0f ? 0.0f : r > 1.0f ? 1.0f : r;
}

/* MlasComputeTanh (its FMA3 kernel): a rational approximation over [-9, 9]. */
float kn_qc_mlas_tanh(float x) {
    float v = x < -9.0f ? -9.0f : x;
    v = v > 9.0f ? 9.0f : v;
    float v2 = v * v;
    float p = fmaf(v2, -2.76076847742355e-16f, 2.00018790482477e-13f);
    p = fmaf(p, v2, -8.60467152213735e-11f);
    p = fmaf(p, v2, 5.12229709037114e-08f);
    p = fmaf(p, v2, 1.48572235717979e-05f);
    p = fmaf(p, v2, 6.37261928875436e-04f);
    p = fmaf(p, v2, 4.89352455891786e-03f);
    p = p * v;
    float q = fmaf(v2, 1.19825839466702e-06f, 1.18534705686654e-04f);
    q = fmaf(q, v2, 2.26843463243900e-03f);
    q = fmaf(q, v2, 4.89352518554385e-03f);
    return p / q;
}

/* The two over an array in place: eight lanes at a time on AVX2 + FMA builds, each lane the
 * scalar form's operations in its order (the same fused multiply-adds, the division, and clamps
 * that keep a NaN as the comparisons above do), so the results are identical; the tail scalar. */
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define FMA8(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define C8(x) _mm256_set1_ps(x)
#endif

void kn_qc_mlas_logistic_n(float *v, int64_t n) {
    int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
    for (; i + 8 <= n; i += 8) {
        /* max(c, x) is c > x ? c : x, min(c, x) c < x ? c : x: a NaN x passes both */
        __m256 x = _mm256_min_ps(C8(18.0f), _mm256_max_ps(C8(-18.0f), _mm256_loadu_ps(v + i)));
        __m256 x2 = _mm256_mul_ps(x, x);
        __m256 p = FMA8(x2, C8(4.37031012579801e-11f), C8(1.15627324459942e-07f));
        p = FMA8(p, x2, C8(6.08574864600143e-05f));
        p = FMA8(p, x2, C8(8.51377133304701e-03f));
        p = FMA8(p, x2, C8(2.48287947061529e-01f));
        p = _mm256_mul_ps(p, x);
        __m256 q = FMA8(x2, C8(6.10247389755681e-13f), C8(5.76102136993427e-09f));
        q = FMA8(q, x2, C8(6.29106785017040e-06f));
        q = FMA8(q, x2, C8(1.70198817374094e-03f));
        q = FMA8(q, x2, C8(1.16817656904453e-01f));
        q = FMA8(q, x2, C8(9.93151921023180e-01f));
        __m256 r = _mm256_add_ps(_mm256_div_ps(p, q), C8(0.5f));
        _mm256_storeu_ps(v + i, _mm256_max_ps(C8(0.0f), _mm256_min_ps(C8(1.0f), r)));
    }
#endif
    for (; i < n; i++) v[i] = kn_qc_mlas_logistic(v[i]);
}

void kn_qc_mlas_tanh_n(float *v, int64_t n) {
    int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_min_ps(C8(9.0f), _mm256_max_ps(C8(-9.0f), _mm256_loadu_ps(v + i)));
        __m256 x2 = _mm256_mul_ps(x, x);
        __m256 p = FMA8(x2, C8(-2.76076847742355e-16f), C8(2.00018790482477e-13f));
        p = FMA8(p, x2, C8(-8.60467152213735e-11f));
        p = FMA8(p, x2, C8(5.12229709037114e-08f));
        p = FMA8(p, x2, C8(1.48572235717979e-05f));
        p = FMA8(p, x2, C8(6.37261928875436e-04f));
        p = FMA8(p, x2, C8(4.89352455891786e-03f));
        p = _mm256_mul_ps(p, x);
        __m256 q = FMA8(x2, C8(1.19825839466702e-06f), C8(1.18534705686654e-04f));
        q = FMA8(q, x2, C8(2.26843463243900e-03f));
        q = FMA8(q, x2, C8(4.89352518554385e-03f));
        _mm256_storeu_ps(v + i, _mm256_div_ps(p, q));
    }
#endif
    for (; i < n; i++) v[i] = kn_qc_mlas_tanh(v[i]);
}

typedef enum { T_IDENTITY, T_SIGMOID, T_LEAKY } table_fn;

/* table[byte] for x of type dt (the byte read as dt). */
static void build_table(uint8_t *table, kiln_dtype dt, float sx, int32_t zx, float sy, int32_t zy, table_fn fn,
                        float alpha) {
    bool sg = dt == KILN_DTYPE_INT8;
    for (int i = 0; i < 256; i++) {
        int32_t x = sg ? (int32_t)(int8_t)(uint8_t)i : i;
        float v = sx * (float)(x - zx);
        if (fn == T_SIGMOID) v = kn_qc_mlas_logistic(v);
        else if (fn == T_LEAKY) v = v >= 0.0f ? v : alpha * v;
        table[i] = (uint8_t)quantize(v, sy, zy, sg);
    }
}

static kiln_status run_table_op(kn_kernel_ctx *c, table_fn fn) {
    const kn_tensor *X = c->in[0];
    kn_tensor *Y = c->out[0];
    if (!is_q8(X)) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "X is %s; it must be uint8 or int8", kiln_dtype_name(X->dtype));
    float sx, sy;
    int32_t zx, zy;
    KN_TRY(qparams(c, 0, 1, 2, &sx, &zx));
    KN_TRY(qparams(c, 0, 3, 4, &sy, &zy));
    kn_cpu_qc_prm local;
    const kn_cpu_qc_prm *prm;
    KN_QC_PRM(c, &local, &prm);
    uint8_t table[256];
    build_table(table, X->dtype, sx, zx, sy, zy, fn, prm->alpha);
    const uint8_t *x = X->data;
    uint8_t *y = Y->data;
    int64_t n = kn_tensor_count(X);
    for (int64_t i = 0; i < n; i++) y[i] = table[x[i]];
    return KILN_OK;
}

kiln_status kn_cpu_qlinear_sigmoid(kn_kernel_ctx *c) { return run_table_op(c, T_SIGMOID); }
kiln_status kn_cpu_qlinear_leaky_relu(kn_kernel_ctx *c) { return run_table_op(c, T_LEAKY); }

/* ------------------------------------------------------------------ Concat */

/* inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input */
kiln_status kn_cpu_qlinear_concat(kn_kernel_ctx *c) {
    kn_tensor *Y = c->out[0];
    float sy;
    int32_t zy;
    KN_TRY(qparams(c, 1, 0, 1, &sy, &zy));
    if ((c->n_inputs - 2) % 3 || c->n_inputs < 5)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "inputs after Y_scale and Y_zero_point must come in (X, scale, zero point) triples");
    int r = Y->rank;
    kn_cpu_qc_prm local;
    const kn_cpu_qc_prm *prm;
    KN_QC_PRM(c, &local, &prm);
    int axis = (int)prm->axis;
    if (axis < 0) axis += r;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= Y->dims[d];
    for (int d = axis + 1; d < r; d++) inner *= Y->dims[d];
    int64_t yrow = Y->dims[axis] * inner, off = 0;
    uint8_t *y = Y->data;
    for (int t = 2; t < c->n_inputs; t += 3) {
        const kn_tensor *X = c->in[t];
        if (!X || X->dtype != Y->dtype || X->rank != r)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "input %d must be a %s tensor of rank %d", t,
                                   kiln_dtype_name(Y->dtype), r);
        for (int d = 0; d < r; d++)
            if (d != axis && X->dims[d] != Y->dims[d])
                return kn_kernel_error(c, KILN_ERR_SHAPE, "input %d differs from the output in dimension %d", t, d);
        if (off + X->dims[axis] * inner > yrow)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "the inputs are longer along axis %d than the output", axis);
        float sx;
        int32_t zx;
        KN_TRY(qparams(c, t, t + 1, t + 2, &sx, &zx));
        int64_t xrow = X->dims[axis] * inner;
        const uint8_t *x = X->data;
        uint8_t table[256];
        bool same = sx == sy && zx == zy;
        if (!same) build_table(table, X->dtype, sx, zx, sy, zy, T_IDENTITY, 0.0f);
        for (int64_t o = 0; o < outer; o++) {
            const uint8_t *src = x + o * xrow;
            uint8_t *dst = y + o * yrow + off;
            if (same) memcpy(dst, src, (size_t)xrow);
            else
                for (int64_t i = 0; i < xrow; i++) dst[i] = table[src[i]];
        }
        off += xrow;
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ Softmax */

kiln_status kn_cpu_qlinear_softmax(kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0];
    kn_tensor *Y = c->out[0];
    if (!is_q8(X)) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "X is %s; it must be uint8 or int8", kiln_dtype_name(X->dtype));
    float sx, sy;
    int32_t zx, zy;
    KN_TRY(qparams(c, 0, 1, 2, &sx, &zx));
    KN_TRY(qparams(c, 0, 3, 4, &sy, &zy));
    int64_t D, inner, n = kn_tensor_count(X);
    kn_cpu_qc_prm local;
    const kn_cpu_qc_prm *prm;
    KN_QC_PRM(c, &local, &prm);
    KN_TRY(kn_qlinear_softmax_rows_with(c, X, prm->opset, prm->axis, &D, &inner));
    if (n == 0 || D == 0) return KILN_OK;
    bool sg = X->dtype == KILN_DTYPE_INT8;
    float table[256];
    double shift = log(FLT_MAX / (float)D);
    shift = (shift - 5.0 > 0.0 ? shift - 5.0 : 0.0) / sx;
    for (int i = 0; i < 256; i++) {
        double e = exp(((double)i - 255 + shift) * (double)sx);
        table[(uint8_t)(sg ? i - 128 : i)] = (float)e;
    }
    const float ys = floorf(1.0f / sy);
    const uint8_t *x = X->data;
    uint8_t *y = Y->data;
    int64_t rows = n / D, *pos = malloc(sizeof(int64_t) * (size_t)D);
    if (!pos) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int64_t row = 0; row < rows; row++) {
        int64_t o = row / inner, in = row % inner;
        for (int64_t k = 0; k < D; k++) pos[k] = (o * D + k) * inner + in;
        int32_t mx = sg ? -128 : 0;
        for (int64_t k = 0; k < D; k++) {
            int32_t v = sg ? (int8_t)x[pos[k]] : x[pos[k]];
            mx = v > mx ? v : mx;
        }
        float sum = 0.0f;
        for (int64_t k = 0; k < D; k++) {
            int32_t v = sg ? (int8_t)x[pos[k]] : x[pos[k]];
            sum += sg ? table[(uint8_t)(127 - mx + v)] : table[255 - mx + v];
        }
        if (sum == 0.0f) continue;
        for (int64_t k = 0; k < D; k++) {
            int32_t v = sg ? (int8_t)x[pos[k]] : x[pos[k]];
            float t = sg ? table[(uint8_t)(127 - mx + v)] : table[255 - mx + v];
            int32_t q = (int32_t)nearbyintf((t * ys) / sum) + zy;
            if (sg) y[pos[k]] = (uint8_t)(int8_t)(q > 127 ? 127 : q < -128 ? -128 : q);
            else y[pos[k]] = (uint32_t)q > 255u ? (uint8_t)255 : (uint8_t)q;
        }
    }
    free(pos);
    return KILN_OK;
}

/* ------------------------------------------------------------------ pools */

kiln_status kn_cpu_qlinear_global_average_pool(kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0];
    kn_tensor *Y = c->out[0];
    if (!is_q8(X)) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "X is %s; it must be uint8 or int8", kiln_dtype_name(X->dtype));
    if (X->rank < 3) return kn_kernel_error(c, KILN_ERR_SHAPE, "X must have rank >= 3");
    float sx, sy;
    int32_t zx, zy;
    KN_TRY(qparams(c, 0, 1, 2, &sx, &zx));
    KN_TRY(qparams(c, 0, 3, 4, &sy, &zy));
    kn_cpu_qc_prm local;
    const kn_cpu_qc_prm *prm;
    KN_QC_PRM(c, &local, &prm);
    bool cl = prm->channels_last;
    int64_t N = X->dims[0], C = cl ? X->dims[X->rank - 1] : X->dims[1], img = 1;
    for (int d = cl ? 1 : 2; d < (cl ? X->rank - 1 : X->rank); d++) img *= X->dims[d];
    if (img == 0) return KILN_OK;
    const float scale = sx / (sy * (float)img);
    bool sg = X->dtype == KILN_DTYPE_INT8;
    for (int64_t nb = 0; nb < N; nb++)
        for (int64_t ch = 0; ch < C; ch++) {
            int32_t sum = -zx * (int32_t)img;
            for (int64_t p = 0; p < img; p++)
                sum += kn_qc_q(X, cl ? (nb * img + p) * C + ch : (nb * C + ch) * img + p);
            int32_t q;
            kn_qc_requant((float)sum * scale, zy, sg, &q);
            put(Y, nb * C + ch, q);
        }
    return KILN_OK;
}

kiln_status kn_cpu_qlinear_average_pool(kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0];
    kn_tensor *Y = c->out[0];
    if (!is_q8(X)) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "X is %s; it must be uint8 or int8", kiln_dtype_name(X->dtype));
    if (X->rank < 3) return kn_kernel_error(c, KILN_ERR_SHAPE, "X must have rank >= 3");
    float sx, sy;
    int32_t zx, zy;
    KN_TRY(qparams(c, 0, 1, 2, &sx, &zx));
    KN_TRY(qparams(c, 0, 3, 4, &sy, &zy));
    kn_cpu_qc_prm local;
    const kn_cpu_qc_prm *prm;
    KN_QC_PRM(c, &local, &prm);
    bool cl = prm->channels_last, incl = prm->count_include_pad;
    int nsp = X->rank - 2, s0 = cl ? 1 : 2;
    int64_t in[KN_MAX_SPATIAL];
    for (int i = 0; i < nsp; i++) in[i] = X->dims[s0 + i];
    kn_window w;
    char why[512];
    kiln_status st = kn_window_plan_kept(c, KN_WINDOW_POOL, nsp, in, NULL, &w, why, sizeof why);
    if (st) return kn_kernel_error(c, st, "%s", why);
    for (int i = 0; i < nsp; i++)
        if (w.dilation[i] != 1) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "dilations other than 1 are not supported");
    int64_t N = X->dims[0], C = cl ? X->dims[X->rank - 1] : X->dims[1], ximg = 1, yimg = 1, ksize = 1;
    for (int i = 0; i < nsp; i++) {
        ximg *= w.in[i];
        yimg *= w.out[i];
        ksize *= w.kernel[i];
    }
    bool sg = X->dtype == KILN_DTYPE_INT8;
    float deq[256];
    for (int i = 0; i < 256; i++) deq[i] = sx * (float)((sg ? (int32_t)(int8_t)(uint8_t)i : i) - zx);
    const uint8_t *x = X->data;
    for (int64_t nb = 0; nb < N; nb++)
        for (int64_t ch = 0; ch < C; ch++)
            for (int64_t o = 0; o < yimg; o++) {
                int64_t op[KN_MAX_SPATIAL], lo[KN_MAX_SPATIAL], hi[KN_MAX_SPATIAL], cur[KN_MAX_SPATIAL], cnt = 1;
                bool empty = false;
                for (int i = nsp - 1, r = o; i >= 0; i--) {
                    op[i] = r % w.out[i];
                    r /= w.out[i];
                }
                for (int i = 0; i < nsp; i++) {
                    int64_t s = op[i] * w.stride[i] - w.pad_begin[i], e = s + w.kernel[i];
                    e = e < w.in[i] ? e : w.in[i];
                    s = s > 0 ? s : 0;
                    lo[i] = cur[i] = s;
                    hi[i] = e;
                    if (e <= s) empty = true;
                    cnt *= e - s;
                }
                float sum = 0.0f;
                while (!empty) {
                    int64_t p = 0;
                    for (int i = 0; i < nsp; i++) p = p * w.in[i] + cur[i];
                    sum += deq[x[cl ? (nb * ximg + p) * C + ch : (nb * C + ch) * ximg + p]];
                    int i = nsp - 1;
                    for (; i >= 0; i--) {
                        if (++cur[i] < hi[i]) break;
                        cur[i] = lo[i];
                    }
                    if (i < 0) break;
                }
                float avg = sum / (float)(incl ? ksize : cnt);
                float v = nearbyintf(avg / sy + (float)zy);
                int32_t lo8 = sg ? -128 : 0, hi8 = sg ? 127 : 255;
                int32_t q = !(v == v) ? lo8 : v < (float)lo8 ? lo8 : v > (float)hi8 ? hi8 : (int32_t)v;
                put(Y, cl ? (nb * yimg + o) * C + ch : (nb * C + ch) * yimg + o, q);
            }
    return KILN_OK;
}

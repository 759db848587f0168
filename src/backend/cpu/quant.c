/* CPU kernels of the quant family: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
 * BitCast.
 *
 * Arithmetic follows the ONNX reference: QuantizeLinear computes x / scale in the inputs' type
 * (float32 for float32, float16 for float16 pairs, double when either is double or x is int32,
 * or the `precision` attribute's type), rounds half to even, adds the zero point and clamps to
 * the integer type's range; float8 outputs are a (saturating) cast of x / scale, float4 ones of
 * x / scale + zero point. DequantizeLinear computes (float32(x) - zero point) * scale in float32
 * (double for a double scale) and casts to the scale's type or output_dtype. Element types go
 * through the elementwise family's cast (kn_ew_cast_n), which knows float8, float4 and the packed
 * sub-byte types. The common int8/uint8 <-> float32 cases have direct, threaded loops. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/qgemm.h"
#include "ops/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define GRAIN 32768

/* QuantizeLinear's and DequantizeLinear's attributes, read once (their prepare hook) */
typedef struct quant_prm {
    int64_t axis, block, precision;
    int saturate;
} quant_prm;

static kiln_status quant_prepare(const kn_node *n, void *params) {
    quant_prm *p = params;
    p->axis = kn_attr_int(n, "axis", 1);
    p->block = kn_attr_int(n, "block_size", 0);
    p->precision = kn_attr_int(n, "precision", 0);
    p->saturate = (int)kn_attr_int(n, "saturate", 1);
    return KILN_OK;
}

static kiln_status layout_of(kn_kernel_ctx *c, const quant_prm *prm, const kn_tensor *x, const kn_tensor *s,
                             kn_quant_layout *l) {
    char why[512];
    kiln_status st = kn_quant_layout_get_with(prm->axis, prm->block, x->rank, x->dims, s->rank, s->dims, l, why, sizeof why);
    if (st != KILN_OK) return kn_kernel_error(c, st, "%s", why);
    return KILN_OK;
}

static kiln_status check_zp(kn_kernel_ctx *c, const kn_tensor *s, const kn_tensor *zp) {
    if (!zp) return KILN_OK;
    if (kn_tensor_count(zp) != kn_tensor_count(s))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "the zero point has %lld elements but the scale %lld",
                               (long long)kn_tensor_count(zp), (long long)kn_tensor_count(s));
    return KILN_OK;
}

/* n elements of src (type t) as a new array of `to` (DOUBLE, FLOAT or INT32). */
static kiln_status convert(kn_kernel_ctx *c, kiln_dtype t, const void *src, int64_t n, kiln_dtype to, void **out) {
    *out = malloc((size_t)(n > 0 ? n : 1) * kiln_dtype_size(to));
    if (!*out) return KN_OOM();
    kiln_status st = kn_ew_cast_n(t, src, to, *out, n, 1);
    if (st != KILN_OK) {
        free(*out);
        *out = NULL;
        return kn_kernel_error(c, st, "%s", kn_last_error());
    }
    return KILN_OK;
}

/* NaN goes to the bottom of the range, as the reference's int32 conversion (INT32_MIN) then clip */
static inline uint8_t sat_u8(float v) { return !(v > 0.0f) ? 0 : v >= 255.0f ? 255 : (uint8_t)v; }
static inline int8_t sat_i8(float v) { return !(v > -128.0f) ? -128 : v >= 127.0f ? 127 : (int8_t)v; }

/* ------------------------------------------------------------------ QuantizeLinear */

typedef struct q8_job {
    const float *x, *s;
    const void *zp; /* int8 or uint8, may be NULL */
    void *y;
    bool is_signed;
    kn_quant_layout l;
} q8_job;

/* The end of the run of elements from i (before e) that share element i's scale and zero point */
static inline int64_t same_param_end(const kn_quant_layout *l, int64_t i, int64_t e) {
    int64_t end = e;
    if (l->mode == KN_QUANT_AXIS) {
        end = (i / l->inner + 1) * l->inner;
    } else if (l->mode == KN_QUANT_BLOCKED) {
        const int64_t ch = (i / l->inner) % l->D;
        end = l->inner == 1 ? i + (l->block - ch % l->block < l->D - ch ? l->block - ch % l->block : l->D - ch) : i + 1;
    }
    return end < e ? end : e;
}

/* n elements with one scale and zero point: round-half-even(x / s) + z, saturated (NaN to the
 * minimum). The vector form does the same operations, so it gives the same bytes. */
static void q8_run(const float *x, int64_t n, float s, float z, bool is_signed, void *y) {
    int64_t i = 0;
#if defined(__AVX2__)
    const __m256 vs = _mm256_set1_ps(s), vz = _mm256_set1_ps(z);
    const __m256 lo = _mm256_set1_ps(is_signed ? -128.0f : 0.0f), hi = _mm256_set1_ps(is_signed ? 127.0f : 255.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(v, vz), lo), hi); /* max_ps(NaN, lo) is lo */
        const __m256i iv = _mm256_cvtps_epi32(v);
        const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(iv), _mm256_extracti128_si256(iv, 1));
        _mm_storel_epi64((__m128i *)((uint8_t *)y + i), is_signed ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w));
    }
#endif
    for (; i < n; i++) {
        const float v = nearbyintf(x[i] / s) + z;
        if (is_signed) ((int8_t *)y)[i] = sat_i8(v);
        else ((uint8_t *)y)[i] = sat_u8(v);
    }
}

static void q8_range(void *arg, int64_t b, int64_t e) {
    const q8_job *j = arg;
    for (int64_t i = b, end; i < e; i = end) {
        const int64_t k = kn_quant_index(&j->l, i);
        end = same_param_end(&j->l, i, e);
        const float z = !j->zp ? 0.0f : j->is_signed ? (float)((const int8_t *)j->zp)[k] : (float)((const uint8_t *)j->zp)[k];
        q8_run(j->x + i, end - i, j->s[k], z, j->is_signed, (uint8_t *)j->y + i);
    }
}

/* x / scale rounded to the type numpy would compute it in */
static kiln_dtype quotient_type(const quant_prm *prm, kiln_dtype xt, kiln_dtype st) {
    int64_t p = prm->precision;
    if (p) return (kiln_dtype)p;
    if (xt == KILN_DTYPE_DOUBLE || st == KILN_DTYPE_DOUBLE || xt == KILN_DTYPE_INT32) return KILN_DTYPE_DOUBLE;
    if (xt == st && (xt == KILN_DTYPE_FLOAT16 || xt == KILN_DTYPE_BFLOAT16)) return xt;
    return KILN_DTYPE_FLOAT;
}

static double round_to(kiln_dtype t, double v) {
    switch (t) {
    case KILN_DTYPE_FLOAT: return (float)v;
    case KILN_DTYPE_FLOAT16: return kn_f16_to_f32(kn_f32_to_f16((float)v));
    case KILN_DTYPE_BFLOAT16: return kn_bf16_to_f32(kn_f32_to_bf16((float)v));
    default: return v;
    }
}

static kiln_status run_quantize(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *s = c->in[1];
    const kn_tensor *zp = c->n_inputs > 2 ? c->in[2] : NULL;
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    KN_CTX_PRM(c, quant_prepare, quant_prm, prm);
    kn_quant_layout l;
    KN_TRY(layout_of(c, prm, x, s, &l));
    KN_TRY(check_zp(c, s, zp));
    int64_t n = kn_tensor_count(x), ns = kn_tensor_count(s);
    kiln_dtype ot = y->dtype;
    if (zp && zp->dtype != ot)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "output is %s but the zero point %s", kiln_dtype_name(ot),
                               kiln_dtype_name(zp->dtype));
    kiln_dtype qt = quotient_type(prm, x->dtype, s->dtype);
    if (x->dtype == KILN_DTYPE_FLOAT && s->dtype == KILN_DTYPE_FLOAT && qt == KILN_DTYPE_FLOAT &&
        (ot == KILN_DTYPE_UINT8 || ot == KILN_DTYPE_INT8)) {
        q8_job j = {x->data, s->data, zp ? zp->data : NULL, y->data, ot == KILN_DTYPE_INT8, l};
        kn_parallel_for(c->pool, n, GRAIN, q8_range, &j);
        return KILN_OK;
    }
    /* general path: through double buffers */
    double *xd = NULL, *sd = NULL, *zd = NULL;
    void *r = NULL;
    kiln_status st = convert(c, x->dtype, x->data, n, KILN_DTYPE_DOUBLE, (void **)&xd);
    if (st == KILN_OK) st = convert(c, s->dtype, s->data, ns, KILN_DTYPE_DOUBLE, (void **)&sd);
    if (st == KILN_OK && zp) st = convert(c, zp->dtype, zp->data, ns, KILN_DTYPE_DOUBLE, (void **)&zd);
    if (st != KILN_OK) goto done;
    int64_t lo, hi;
    bool int_out = kn_quant_int_range(ot, &lo, &hi);
    r = malloc((size_t)(n > 0 ? n : 1) * (int_out ? sizeof(int32_t) : sizeof(double)));
    if (!r) {
        st = KN_OOM();
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t k = kn_quant_index(&l, i);
        double q = round_to(qt, xd[i] / sd[k]);
        if (int_out) {
            double v = nearbyint(q);
            if (!(v == v)) v = -2147483648.0; /* NaN: INT32_MIN as numpy's conversion gives, then clip */
            v = v < -2147483648.0 ? -2147483648.0 : v > 2147483647.0 ? 2147483647.0 : v;
            int64_t iv = (int64_t)v + (zd ? (int64_t)zd[k] : 0);
            ((int32_t *)r)[i] = (int32_t)(iv < lo ? lo : iv > hi ? hi : iv);
        } else if (ot == KILN_DTYPE_FLOAT4E2M1) {
            ((double *)r)[i] = (float)(q + (zd ? zd[k] : 0.0)); /* float4 adds its zero point */
        } else {
            ((double *)r)[i] = q; /* float8: the zero point is 0 by definition */
        }
    }
    st = kn_ew_cast_n(int_out ? KILN_DTYPE_INT32 : KILN_DTYPE_DOUBLE, r, ot, y->data, n,
                      prm->saturate);
    if (st != KILN_OK) st = kn_kernel_error(c, st, "%s", kn_last_error());
done:
    free(xd);
    free(sd);
    free(zd);
    free(r);
    return st;
}

/* ------------------------------------------------------------------ DequantizeLinear */

typedef struct dq8_job {
    const void *x, *zp;
    const float *s;
    float *y;
    bool is_signed;
    kn_quant_layout l;
} dq8_job;

/* n elements with one scale and zero point: (x - z) * s in float (exact difference, one rounding) */
static void dq8_run(const void *x, int64_t n, float s, float z, bool is_signed, float *y) {
    int64_t i = 0;
#if defined(__AVX2__)
    const __m256 vs = _mm256_set1_ps(s), vz = _mm256_set1_ps(z);
    for (; i + 8 <= n; i += 8) {
        const __m128i b = _mm_loadl_epi64((const __m128i *)((const uint8_t *)x + i));
        const __m256i iv = is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(iv), vz), vs));
    }
#endif
    for (; i < n; i++) {
        const float v = is_signed ? (float)((const int8_t *)x)[i] : (float)((const uint8_t *)x)[i];
        y[i] = (v - z) * s;
    }
}

static void dq8_range(void *arg, int64_t b, int64_t e) {
    const dq8_job *j = arg;
    for (int64_t i = b, end; i < e; i = end) {
        const int64_t k = kn_quant_index(&j->l, i);
        end = same_param_end(&j->l, i, e);
        const float z = !j->zp ? 0.0f : j->is_signed ? (float)((const int8_t *)j->zp)[k] : (float)((const uint8_t *)j->zp)[k];
        dq8_run((const uint8_t *)j->x + i, end - i, j->s[k], z, j->is_signed, j->y + i);
    }
}

static kiln_status run_dequantize(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *s = c->in[1];
    const kn_tensor *zp = c->n_inputs > 2 ? c->in[2] : NULL;
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    KN_CTX_PRM(c, quant_prepare, quant_prm, prm);
    kn_quant_layout l;
    KN_TRY(layout_of(c, prm, x, s, &l));
    KN_TRY(check_zp(c, s, zp));
    int64_t n = kn_tensor_count(x), ns = kn_tensor_count(s);
    /* float8 and float4 zero points are 0 by definition: not read */
    bool float_x = (x->dtype >= KILN_DTYPE_FLOAT8E4M3FN && x->dtype <= KILN_DTYPE_FLOAT8E5M2FNUZ) ||
                   x->dtype == KILN_DTYPE_FLOAT4E2M1;
    if (float_x) zp = NULL;
    if ((x->dtype == KILN_DTYPE_INT8 || x->dtype == KILN_DTYPE_UINT8) && s->dtype == KILN_DTYPE_FLOAT &&
        y->dtype == KILN_DTYPE_FLOAT && (!zp || zp->dtype == x->dtype)) {
        dq8_job j = {x->data, zp ? zp->data : NULL, s->data, y->data, x->dtype == KILN_DTYPE_INT8, l};
        kn_parallel_for(c->pool, n, GRAIN, dq8_range, &j);
        return KILN_OK;
    }
    float *xf = NULL, *zf = NULL;
    double *sd = NULL, *r = NULL;
    kiln_status st = convert(c, x->dtype, x->data, n, KILN_DTYPE_FLOAT, (void **)&xf);
    if (st == KILN_OK) st = convert(c, s->dtype, s->data, ns, KILN_DTYPE_DOUBLE, (void **)&sd);
    if (st == KILN_OK && zp) st = convert(c, zp->dtype, zp->data, ns, KILN_DTYPE_FLOAT, (void **)&zf);
    if (st != KILN_OK) goto done;
    r = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!r) {
        st = KN_OOM();
        goto done;
    }
    /* numpy promotes float32 - int32 (an int32 x's zero point) and anything * double to double */
    bool wide_zp = zp && zp->dtype == KILN_DTYPE_INT32;
    bool in_double = s->dtype == KILN_DTYPE_DOUBLE || wide_zp;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = kn_quant_index(&l, i);
        if (wide_zp) {
            r[i] = ((double)xf[i] - (double)((const int32_t *)zp->data)[k]) * sd[k];
            continue;
        }
        float dx = zf ? xf[i] - zf[k] : xf[i];
        r[i] = in_double ? (double)dx * sd[k] : (double)(dx * (float)sd[k]);
    }
    st = kn_ew_cast_n(KILN_DTYPE_DOUBLE, r, y->dtype, y->data, n, 1);
    if (st != KILN_OK) st = kn_kernel_error(c, st, "%s", kn_last_error());
done:
    free(xf);
    free(zf);
    free(sd);
    free(r);
    return st;
}

/* ------------------------------------------------------------------ DynamicQuantizeLinear */

/* uint8 with a scale and zero point chosen from the range of x (widened to include 0), in
 * float32 as the reference computes them. */
static kiln_status run_dynamic_quantize(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y, *ys, *yz;
    int64_t n = kn_tensor_count(x);
    KN_TRY(kn_ctx_output(c, 0, KILN_DTYPE_UINT8, x->rank, x->dims, &y));
    KN_TRY(kn_ctx_output(c, 1, KILN_DTYPE_FLOAT, 0, NULL, &ys));
    KN_TRY(kn_ctx_output(c, 2, KILN_DTYPE_UINT8, 0, NULL, &yz));
    const float *xv = x->data;
    float mx, mn; /* (the range's and the rounding's loops, vectorised, in qgemm.c) */
    kn_q8_range(xv, n, &mn, &mx);
    float scale = (mx == mn ? 1.0f : (mx - mn)) / 255.0f;
    float zp0 = 0.0f - mn / scale;
    zp0 = zp0 < 0.0f ? 0.0f : zp0 > 255.0f ? 255.0f : zp0;
    float zpi = nearbyintf(zp0);
    kn_q8_quantize_u8(xv, n, scale, zpi, y->data);
    *(float *)ys->data = scale;
    *(uint8_t *)yz->data = (uint8_t)zpi;
    return KILN_OK;
}

/* ------------------------------------------------------------------ BitCast */

static kiln_status run_bitcast(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    if (y->nbytes != x->nbytes)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "output has %zu bytes but x %zu", y->nbytes, x->nbytes);
    if (x->nbytes) memcpy(y->data, x->data, x->nbytes);
    return KILN_OK;
}

const kn_cpu_kernel kn_cpu_quant[] = {
    {"", "QuantizeLinear", run_quantize, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(quant_prepare, quant_prm)},
    {"", "DequantizeLinear", run_dequantize, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(quant_prepare, quant_prm)},
    {"", "DynamicQuantizeLinear", run_dynamic_quantize, NULL, KN_KERNEL_OVERWRITES},
    {"", "BitCast", run_bitcast, NULL, KN_KERNEL_OVERWRITES},
    {0},
};

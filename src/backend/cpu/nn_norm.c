/* CPU kernels: LayerNormalization, RMSNormalization, BatchNormalization, InstanceNormalization,
 * GroupNormalization, LpNormalization, MeanVarianceNormalization, LRN.
 *
 * LayerNormalization and RMSNormalization are hot in transformers: their float rows accumulate in
 * 16 float lanes and run threaded over rows; double inputs compute in double. Instance and group
 * normalisation of float-like data compute in float (AVX-512 lanes, block sums in double); the
 * others compute statistics in double (float data is converted on the fly). */
#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/nn_internal.h"
#include "backend/cpu/vec_math.h"

#include <stdlib.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

/* Expands a parameter that broadcasts (numpy-style, right-aligned) to the normalised shape
 * dims[0..r) into n = prod(dims) doubles. Fails when it does not broadcast. */
static bool expand_param(const kn_tensor *p, const int64_t *dims, int r, double *out) {
    int64_t n = kn_shape_count(dims, r);
    if (kn_tensor_count(p) == n) {
        kn_nn_to_f64(p, out);
        return true;
    }
    if (p->rank > r) {
        /* leading unit dims are allowed */
        for (int k = 0; k < p->rank - r; k++)
            if (p->dims[k] != 1) return false;
    }
    int off = r - p->rank;
    int64_t pstride[KILN_MAX_RANK];
    int64_t s = 1;
    for (int k = r - 1; k >= 0; k--) {
        int pk = k - off;
        int64_t pd = pk >= 0 ? p->dims[pk] : 1;
        if (pd != 1 && pd != dims[k]) return false;
        pstride[k] = pd == 1 ? 0 : s;
        s *= pd;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, src = 0;
        for (int k = r - 1; k >= 0; k--) {
            int64_t idx = rem % dims[k];
            rem /= dims[k];
            src += idx * pstride[k];
        }
        out[i] = kn_tensor_get_f64(p, src);
    }
    return true;
}

/* ------------------------------------------------------------------ LayerNorm / RMSNorm */

typedef struct ln_job {
    const void *x;
    void *y;
    const void *scale, *bias; /* n elements of the compute type; bias may be NULL */
    void *mean, *inv;          /* per-row outputs (may be NULL) */
    int64_t n;
    double eps;
    int rms;
} ln_job;

#define LN_ROWS(T, SUF)                                                                            \
    static void ln_rows_##SUF(void *arg, int64_t b, int64_t e) {                                   \
        const ln_job *j = arg;                                                                     \
        int64_t n = j->n;                                                                          \
        const T *sc = j->scale, *bi = j->bias;                                                     \
        for (int64_t r = b; r < e; r++) {                                                          \
            const T *x = (const T *)j->x + r * n;                                                  \
            T *y = (T *)j->y + r * n;                                                              \
            T mean = 0;                                                                            \
            if (!j->rms) {                                                                         \
                T acc[16] = {0};                                                                   \
                int64_t i = 0;                                                                     \
                for (; i + 16 <= n; i += 16)                                                       \
                    for (int l = 0; l < 16; l++) acc[l] += x[i + l];                               \
                double s = 0;                                                                      \
                for (int l = 0; l < 16; l++) s += acc[l];                                          \
                for (; i < n; i++) s += x[i];                                                      \
                mean = (T)(s / (double)n);                                                         \
            }                                                                                      \
            T acc[16] = {0};                                                                       \
            int64_t i = 0;                                                                         \
            for (; i + 16 <= n; i += 16)                                                           \
                for (int l = 0; l < 16; l++) {                                                     \
                    T d = x[i + l] - mean;                                                         \
                    acc[l] += d * d;                                                               \
                }                                                                                  \
            double s = 0;                                                                          \
            for (int l = 0; l < 16; l++) s += acc[l];                                              \
            for (; i < n; i++) s += (double)(x[i] - mean) * (double)(x[i] - mean);                 \
            T inv = (T)(1.0 / sqrt(s / (double)n + j->eps));                                       \
            if (bi)                                                                                \
                for (int64_t k = 0; k < n; k++) y[k] = (x[k] - mean) * inv * sc[k] + bi[k];       \
            else                                                                                   \
                for (int64_t k = 0; k < n; k++) y[k] = (x[k] - mean) * inv * sc[k];                \
            if (j->mean) ((T *)j->mean)[r] = mean;                                                 \
            if (j->inv) ((T *)j->inv)[r] = inv;                                                    \
        }                                                                                          \
    }

LN_ROWS(float, f32)
LN_ROWS(double, f64)

/* Shared by LayerNormalization (rms = 0) and RMSNormalization (rms = 1). */
kiln_status kn_norm_rows_prepare(const kn_node *n, void *params) {
    kn_norm_rows_prm *p = params;
    p->axis = kn_attr_int(n, "axis", -1);
    p->eps = kn_attr_float(n, "epsilon", 1e-5f);
    return KILN_OK;
}

static kiln_status norm_rows(kn_kernel_ctx *c, int rms) {
    kn_norm_rows_prm local;
    const kn_norm_rows_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_norm_rows_prepare, &local, (const void **)&prm));
    const kn_tensor *x = c->in[0], *scale = c->in[1];
    const kn_tensor *bias = !rms && c->n_inputs > 2 ? c->in[2] : NULL;
    kn_tensor *y = c->out[0];
    kn_tensor *mean_t = !rms && c->n_outputs > 1 ? c->out[1] : NULL;
    kn_tensor *inv_t = !rms && c->n_outputs > 2 ? c->out[2] : NULL;
    int64_t axis = prm->axis;
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis out of range");
    int64_t rows = kn_shape_count(x->dims, (int)axis);
    int64_t n = kn_shape_count(x->dims + axis, x->rank - (int)axis);
    if (rows * n == 0) return KILN_OK;
    int dbl = x->dtype == KILN_DTYPE_DOUBLE;
    size_t es = dbl ? 8 : 4;
    kiln_status st = KILN_OK;
    double *pd = malloc((size_t)n * 2 * sizeof(double));
    void *params = malloc((size_t)n * 2 * es);
    float *xv = NULL, *yv = NULL, *mv = NULL, *iv = NULL;
    double *dm = NULL, *di = NULL;
    void *yscratch = NULL;
    ln_job j = {0};
    if (!pd || !params) {
        st = KN_OOM();
        goto done;
    }
    const kn_tensor *params_in[2] = {scale, bias};
    for (int k = 0; k < 2; k++) {
        if (!params_in[k] || expand_param(params_in[k], x->dims + axis, x->rank - (int)axis, pd + k * n)) continue;
        char a[128], b[128];
        st = kn_kernel_error(c, KILN_ERR_SHAPE, "%s %s does not broadcast to the normalised shape %s (axis %lld)",
                             k ? "bias" : "scale", kn_tensor_describe(params_in[k], a, sizeof a),
                             kn_dims_str(x->dims + axis, x->rank - (int)axis, b, sizeof b), (long long)axis);
        goto done;
    }
    j.n = n;
    j.rms = rms;
    j.eps = prm->eps;
    if (dbl) {
        memcpy(params, pd, (size_t)n * 2 * sizeof(double));
        j.x = x->data;
        j.y = y ? y->data : NULL;
        /* Mean/InvStdDev of another declared type: computed in double, converted after */
        if (mean_t) j.mean = mean_t->dtype == KILN_DTYPE_DOUBLE ? mean_t->data : (dm = malloc((size_t)rows * 8));
        if (inv_t) j.inv = inv_t->dtype == KILN_DTYPE_DOUBLE ? inv_t->data : (di = malloc((size_t)rows * 8));
        if ((mean_t && !j.mean) || (inv_t && !j.inv)) {
            st = KN_OOM();
            goto done;
        }
    } else {
        float *pf = params;
        for (int64_t i = 0; i < 2 * n; i++) pf[i] = (float)pd[i];
        xv = kn_nn_f32_view(x);
        yv = y ? kn_nn_f32_out(y) : malloc((size_t)(rows * n) * sizeof(float));
        if (mean_t) mv = kn_nn_f32_out(mean_t);
        if (inv_t) iv = kn_nn_f32_out(inv_t);
        if (!xv || !yv || (mean_t && !mv) || (inv_t && !iv)) {
            st = KN_OOM();
            goto done;
        }
        j.x = xv;
        j.y = yv;
        j.mean = mv;
        j.inv = iv;
    }
    j.scale = params;
    j.bias = bias ? (const char *)params + (size_t)n * es : NULL;
    if (!j.y) {
        /* only the statistics are wanted */
        yscratch = malloc((size_t)(rows * n) * es);
        if (!yscratch) {
            st = KN_OOM();
            goto done;
        }
        j.y = yscratch;
    }
    int64_t grain = n >= 16384 ? 1 : 16384 / n;
    kn_parallel_for(c->pool, rows, grain, dbl ? ln_rows_f64 : ln_rows_f32, &j);
    if (dm) kn_nn_from_f64(mean_t, dm);
    if (di) kn_nn_from_f64(inv_t, di);
done:
    if (!dbl) {
        kn_nn_release(x, xv);
        if (y) kn_nn_f32_commit(y, yv);
        else free(yv);
        if (mean_t) kn_nn_f32_commit(mean_t, mv);
        if (inv_t) kn_nn_f32_commit(inv_t, iv);
    }
    free(dm);
    free(di);
    free(yscratch);
    free(pd);
    free(params);
    return st;
}

kiln_status kn_cpu_layernorm(kn_kernel_ctx *c) { return norm_rows(c, 0); }
kiln_status kn_cpu_rmsnorm(kn_kernel_ctx *c) { return norm_rows(c, 1); }

/* ------------------------------------------------------------------ BatchNormalization */

kiln_status kn_nn_norm_prepare(const kn_node *n, void *params) {
    kn_nn_norm_prm *p = params;
    memset(p, 0, sizeof *p);
    p->training = -1;
    if (!strcmp(n->op_type, "BatchNormalization")) {
        if (n->opset >= 14) p->training = kn_attr_int(n, "training_mode", 0) != 0;
        else if (n->opset < 7) p->training = kn_attr_int(n, "is_test", 0) == 0;
    }
    p->eps = kn_attr_float(n, "epsilon", 1e-5f);
    p->momentum = kn_attr_float(n, "momentum", 0.9f);
    p->num_groups = kn_attr_int(n, "num_groups", 0);
    p->p = kn_attr_int(n, "p", 2);
    p->axis = kn_attr_int(n, "axis", -1);
    p->axes = kn_attr_ints(n, "axes", &p->n_axes);
    p->alpha = kn_attr_float(n, "alpha", 1e-4f);
    p->beta = kn_attr_float(n, "beta", 0.75f);
    p->bias = kn_attr_float(n, "bias", 1.0f);
    p->size = kn_attr_int(n, "size", 1);
    return KILN_OK;
}

kiln_status kn_cpu_batchnorm(kn_kernel_ctx *c) {
    KN_CTX_PRM(c, kn_nn_norm_prepare, kn_nn_norm_prm, prm);
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (x->rank < 2) return kn_kernel_error(c, KILN_ERR_SHAPE, "input 'X' needs rank >= 2");
    int64_t N = x->dims[0], C = x->dims[1], inner = kn_shape_count(x->dims + 2, x->rank - 2);
    int training;
    if (prm->training >= 0) training = prm->training;
    else {
        training = 0;
        for (int o = 1; o < c->n_outputs; o++)
            if (c->out[o]) training = 1;
    }
    double eps = prm->eps;
    double momentum = prm->momentum;
    /* per-channel parameters; spatial=0 (before opset 9) gives per-element [C, D...] */
    int64_t pcount = kn_tensor_count(c->in[1]);
    int64_t per = pcount == C ? 1 : (pcount == C * inner ? inner : 0);
    if (per == 0) return kn_kernel_error(c, KILN_ERR_SHAPE, "scale has %lld elements; it needs C = %lld",
                                         (long long)pcount, (long long)C);
    for (int i = 2; i < 5; i++)
        if (kn_tensor_count(c->in[i]) != pcount)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "input %d has %lld elements, scale has %lld", i,
                                   (long long)kn_tensor_count(c->in[i]), (long long)pcount);
    double *p = malloc((size_t)pcount * 6 * sizeof *p);
    if (!p) return KN_OOM();
    double *sc = p, *bi = p + pcount, *mu = p + 2 * pcount, *var = p + 3 * pcount;
    double *bm = p + 4 * pcount, *bv = p + 5 * pcount; /* batch statistics */
    kn_nn_to_f64(c->in[1], sc);
    kn_nn_to_f64(c->in[2], bi);
    kn_nn_to_f64(c->in[3], mu);
    kn_nn_to_f64(c->in[4], var);
    /* float-likes compute in float; double stays double */
    int dbl = x->dtype == KILN_DTYPE_DOUBLE;
    const double *xd = dbl ? x->data : NULL;
    double *yd = dbl && y ? y->data : NULL;
    float *xv = dbl ? NULL : kn_nn_f32_view(x), *yv = (dbl || !y) ? NULL : kn_nn_f32_out(y);
    if ((!dbl && !xv) || (!dbl && y && !yv)) {
        kn_nn_release(x, xv);
        if (y && yv != y->data) free(yv);
        free(p);
        return KN_OOM();
    }
    if (training) {
        int64_t cnt = N * (inner / per);
        for (int64_t q = 0; q < pcount; q++) {
            int64_t ch = q / per, off = q % per;
            double s = 0, s2 = 0;
            for (int64_t nn = 0; nn < N; nn++)
                for (int64_t i = off; i < inner; i += per) {
                    double v = dbl ? xd[(nn * C + ch) * inner + i] : xv[(nn * C + ch) * inner + i];
                    s += v;
                }
            double m = s / (double)cnt;
            for (int64_t nn = 0; nn < N; nn++)
                for (int64_t i = off; i < inner; i += per) {
                    double v = (dbl ? xd[(nn * C + ch) * inner + i] : xv[(nn * C + ch) * inner + i]) - m;
                    s2 += v * v;
                }
            bm[q] = m;
            bv[q] = s2 / (double)cnt;
        }
    }
    const double *um = training ? bm : mu, *uv = training ? bv : var;
    if (y) {
        for (int64_t nn = 0; nn < N; nn++)
            for (int64_t ch = 0; ch < C; ch++) {
                int64_t base = (nn * C + ch) * inner;
                if (per == 1) {
                    double a = sc[ch] / sqrt(uv[ch] + eps), b = bi[ch] - um[ch] * a;
                    if (dbl)
                        for (int64_t i = 0; i < inner; i++) yd[base + i] = xd[base + i] * a + b;
                    else {
                        float af = (float)a, bf = (float)b;
                        for (int64_t i = 0; i < inner; i++) yv[base + i] = xv[base + i] * af + bf;
                    }
                } else {
                    for (int64_t i = 0; i < inner; i++) {
                        int64_t q = ch * inner + i;
                        double v = dbl ? xd[base + i] : xv[base + i];
                        double r = sc[q] * (v - um[q]) / sqrt(uv[q] + eps) + bi[q];
                        if (dbl) yd[base + i] = r;
                        else yv[base + i] = (float)r;
                    }
                }
            }
    }
    /* the kernel writes every element of every output (the executor does not zero them first):
     * statistics outputs it has no values for are zeros */
    for (int o = 1; o < c->n_outputs; o++) {
        kn_tensor *t = c->out[o];
        if (t && t->data && (!training || o >= 5 || kn_tensor_count(t) != pcount))
            memset(t->data, 0, kn_dtype_nbytes(t->dtype, kn_tensor_count(t)));
    }
    if (training) {
        double *tmp = malloc((size_t)pcount * sizeof *tmp);
        if (!tmp) {
            kn_nn_release(x, xv);
            if (y) kn_nn_f32_commit(y, yv);
            free(p);
            return KN_OOM();
        }
        for (int o = 1; o < c->n_outputs && o < 5; o++) {
            kn_tensor *t = c->out[o];
            if (!t || kn_tensor_count(t) != pcount) continue;
            for (int64_t q = 0; q < pcount; q++) {
                switch (o) {
                case 1: tmp[q] = mu[q] * momentum + bm[q] * (1 - momentum); break;
                case 2: tmp[q] = var[q] * momentum + bv[q] * (1 - momentum); break;
                case 3: tmp[q] = bm[q]; break;
                default: tmp[q] = bv[q]; break;
                }
            }
            kn_nn_from_f64(t, tmp);
        }
        free(tmp);
    }
    kn_nn_release(x, xv);
    if (y) kn_nn_f32_commit(y, yv);
    free(p);
    return KILN_OK;
}

/* ------------------------------------------------------------------ Instance / Group norm */

/* Mean and (biased) variance of n floats, in two passes (the second over x - mean, so a large
 * mean does not cancel the variance): 16 float lanes summed over blocks of 4096 elements, each
 * block's lanes added into a double. */
static void f32_moments(const float *x, int64_t n, double *mean_out, double *var_out) {
    double s = 0;
    for (int64_t b = 0; b < n; b += 4096) {
        const int64_t e = b + 4096 < n ? b + 4096 : n;
        int64_t i = b;
#if defined(__AVX512F__)
        __m512 acc = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps();
        for (; i + 32 <= e; i += 32) {
            acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + i));
            acc2 = _mm512_add_ps(acc2, _mm512_loadu_ps(x + i + 16));
        }
        if (i < e) {
            const __mmask16 m0 = kn_v16_tail(e - i), m1 = kn_v16_tail(e - i - 16);
            acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m0, x + i));
            acc2 = _mm512_add_ps(acc2, _mm512_maskz_loadu_ps(m1, x + i + 16));
            i = e;
        }
        s += (double)_mm512_reduce_add_ps(_mm512_add_ps(acc, acc2));
#else
        float acc[16] = {0};
        for (; i + 16 <= e; i += 16)
            for (int l = 0; l < 16; l++) acc[l] += x[i + l];
        for (int l = 0; l < 16; l++) s += acc[l];
        for (; i < e; i++) s += x[i];
#endif
    }
    const double m = s / (double)n;
    const float mf = (float)m;
    double s2 = 0;
    for (int64_t b = 0; b < n; b += 4096) {
        const int64_t e = b + 4096 < n ? b + 4096 : n;
        int64_t i = b;
#if defined(__AVX512F__)
        const __m512 vm = _mm512_set1_ps(mf);
        __m512 acc = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps();
        for (; i + 32 <= e; i += 32) {
            const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), vm);
            const __m512 d2 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vm);
            acc = _mm512_fmadd_ps(d, d, acc);
            acc2 = _mm512_fmadd_ps(d2, d2, acc2);
        }
        if (i < e) {
            const __mmask16 m0 = kn_v16_tail(e - i), m1 = kn_v16_tail(e - i - 16);
            const __m512 d = _mm512_maskz_sub_ps(m0, _mm512_maskz_loadu_ps(m0, x + i), vm);
            const __m512 d2 = _mm512_maskz_sub_ps(m1, _mm512_maskz_loadu_ps(m1, x + i + 16), vm);
            acc = _mm512_fmadd_ps(d, d, acc);
            acc2 = _mm512_fmadd_ps(d2, d2, acc2);
            i = e;
        }
        s2 += (double)_mm512_reduce_add_ps(_mm512_add_ps(acc, acc2));
#else
        float acc[16] = {0};
        for (; i + 16 <= e; i += 16)
            for (int l = 0; l < 16; l++) {
                const float d = x[i + l] - mf;
                acc[l] += d * d;
            }
        for (int l = 0; l < 16; l++) s2 += acc[l];
        for (; i < e; i++) s2 += (double)(x[i] - mf) * (double)(x[i] - mf);
#endif
    }
    /* the deviations were taken from mf, not m: correct for the difference */
    const double dm = m - (double)mf;
    *mean_out = m;
    *var_out = s2 / (double)n - dm * dm;
}

/* y[i] = (x[i] - c) * a + b for i < n (y may be x): subtracting the mean first keeps a large mean
 * from cancelling against b when a is large (a plane of near-constant values). */
static void f32_affine(const float *x, float *y, int64_t n, float c, float a, float b) {
    int64_t i = 0;
#if defined(__AVX512F__)
    const __m512 vc = _mm512_set1_ps(c), va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    for (; i + 32 <= n; i += 32) {
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vc), va, vb));
        _mm512_storeu_ps(y + i + 16, _mm512_fmadd_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vc), va, vb));
    }
    for (; i < n; i += 16) {
        const __mmask16 m = kn_v16_tail(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vc), va, vb));
    }
#else
    for (; i < n; i++) y[i] = KN_FMAF(x[i] - c, a, b);
#endif
}

/* y = (x - mean) / sqrt(var + eps) * s + b over `groups` groups of `len` elements of x; the
 * scale/bias index of element i in group g is given by pidx. Double data computes in double
 * (xd/yd); everything else in float (xf/yf: float16 and bfloat16 converted in and out). */
typedef struct gn_job {
    const double *x;
    double *y;
    const float *xf;
    float *yf;
    const double *scale, *bias;
    int64_t len, C, inner, G; /* channels per group = C / G */
    int per_group;            /* scale/bias per group (GroupNormalization before opset 21) */
    double eps;
} gn_job;

static void gn_range(void *arg, int64_t b, int64_t e) {
    const gn_job *j = arg;
    int64_t cpg = j->C / j->G;
    for (int64_t u = b; u < e; u++) { /* u = n * G + g */
        double m, inv;
        if (j->xf) {
            double var;
            f32_moments(j->xf + u * j->len, j->len, &m, &var);
            inv = 1.0 / sqrt(var + j->eps);
        } else {
            const double *x = j->x + u * j->len;
            double s = 0, s2 = 0;
            for (int64_t i = 0; i < j->len; i++) s += x[i];
            m = s / (double)j->len;
            for (int64_t i = 0; i < j->len; i++) s2 += (x[i] - m) * (x[i] - m);
            inv = 1.0 / sqrt(s2 / (double)j->len + j->eps);
        }
        int64_t g = u % j->G;
        for (int64_t cc = 0; cc < cpg; cc++) {
            int64_t ch = g * cpg + cc, pi = j->per_group ? g : ch;
            double a = j->scale[pi] * inv, bb = j->bias[pi];
            const int64_t off = u * j->len + cc * j->inner;
            if (j->xf) {
                /* (x - m) a + b as (x - mf) a + (b - (m - mf) a), mf the float nearest m */
                const float mf = (float)m;
                f32_affine(j->xf + off, j->yf + off, j->inner, mf, (float)a, (float)(bb - (m - (double)mf) * a));
            } else {
                const double *xc = j->x + off;
                double *yc = j->y + off;
                for (int64_t i = 0; i < j->inner; i++) yc[i] = (xc[i] - m) * a + bb;
            }
        }
    }
}

static kiln_status group_norm(kn_kernel_ctx *c, int64_t G, int per_group, float eps) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return KILN_OK;
    if (x->rank < 2) return kn_kernel_error(c, KILN_ERR_SHAPE, "input needs rank >= 2");
    int64_t N = x->dims[0], C = x->dims[1], inner = kn_shape_count(x->dims + 2, x->rank - 2);
    if (G <= 0 || C % G) return kn_kernel_error(c, KILN_ERR_SHAPE, "C = %lld does not split into %lld groups",
                                                (long long)C, (long long)G);
    int64_t want = per_group ? G : C;
    if (kn_tensor_count(c->in[1]) != want || kn_tensor_count(c->in[2]) != want)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "scale and bias need %lld elements", (long long)want);
    int64_t total = N * C * inner;
    if (total == 0) return KILN_OK;
    const int dbl = x->dtype == KILN_DTYPE_DOUBLE;
    const int64_t nbuf = dbl ? 2 * total + 2 * want : 2 * want;
    double *buf = malloc((size_t)nbuf * sizeof *buf);
    float *xf = NULL, *yf = NULL;
    if (buf && !dbl) {
        xf = kn_nn_f32_view(x);
        yf = kn_nn_f32_out(y);
    }
    if (!buf || (!dbl && (!xf || !yf))) {
        if (!dbl) {
            kn_nn_release(x, xf);
            if (yf != y->data) free(yf);
        }
        free(buf);
        return KN_OOM();
    }
    double *sc = buf + (dbl ? 2 * total : 0), *bi = sc + want;
    kn_nn_to_f64(c->in[1], sc);
    kn_nn_to_f64(c->in[2], bi);
    gn_job j = {0};
    j.scale = sc;
    j.bias = bi;
    j.len = (C / G) * inner;
    j.C = C;
    j.inner = inner;
    j.G = G;
    j.per_group = per_group;
    j.eps = eps;
    if (dbl) {
        kn_nn_to_f64(x, buf);
        j.x = buf;
        j.y = buf + total;
    } else {
        j.xf = xf;
        j.yf = yf;
    }
    int64_t grain = j.len >= 16384 ? 1 : 16384 / j.len;
    kn_parallel_for(c->pool, N * G, grain, gn_range, &j);
    if (dbl) kn_nn_from_f64(y, buf + total);
    else {
        kn_nn_release(x, xf);
        kn_nn_f32_commit(y, yf);
    }
    free(buf);
    return KILN_OK;
}

kiln_status kn_cpu_instancenorm(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    if (x->rank < 2) return kn_kernel_error(c, KILN_ERR_SHAPE, "input needs rank >= 2");
    KN_CTX_PRM(c, kn_nn_norm_prepare, kn_nn_norm_prm, prm);
    return group_norm(c, x->dims[1], 0, prm->eps);
}

kiln_status kn_cpu_groupnorm(kn_kernel_ctx *c) {
    KN_CTX_PRM(c, kn_nn_norm_prepare, kn_nn_norm_prm, prm);
    int64_t G = prm->num_groups;
    const kn_tensor *x = c->in[0];
    int64_t C = x->rank >= 2 ? x->dims[1] : 0;
    /* opset 18 has one scale/bias per group; opset 21 one per channel */
    int per_group = c->node->opset < 21 && kn_tensor_count(c->in[1]) == G && G != C;
    return group_norm(c, G, per_group, prm->eps);
}

/* ------------------------------------------------------------------ LpNormalization */

/* float rows along the last axis: the norm accumulated in double (four partial sums), each
 * element scaled by 1 / norm in double and rounded once to float; rows split over the threads
 * (the general loop below converts the whole tensor to double and back: 2.5x ONNX Runtime's time
 * on 1x128x768). float16 and bfloat16 rows are widened into a float row, computed as float rows
 * are and rounded once to the type (ONNX Runtime casts around a float16 LpNormalization; the
 * general loop went through double per element: 6x its time on 64x512). */
typedef struct lp_job {
    const void *x;
    void *y;
    kiln_dtype dt; /* x's and y's */
    int64_t n;
    int p;
    int fail;
} lp_job;

/* o = q / norm(q) for one row of n floats (o may be q) */
static void lp_row(const float *q, float *o, int64_t n, int p) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    if (p == 1) {
        for (; i + 4 <= n; i += 4) {
            s0 += fabs((double)q[i]), s1 += fabs((double)q[i + 1]);
            s2 += fabs((double)q[i + 2]), s3 += fabs((double)q[i + 3]);
        }
        for (; i < n; i++) s0 += fabs((double)q[i]);
    } else {
        /* sixteen partial sums (lane l: elements l mod 16; four vectors with AVX, the same sums
         * without), so the additions do not wait on each other; the tail goes to s0 */
        double acc[16] = {0};
#if defined(__AVX__)
        __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
        for (; i + 16 <= n; i += 16) {
            const __m256d v0 = _mm256_cvtps_pd(_mm_loadu_ps(q + i)), v1 = _mm256_cvtps_pd(_mm_loadu_ps(q + i + 4));
            const __m256d v2 = _mm256_cvtps_pd(_mm_loadu_ps(q + i + 8)), v3 = _mm256_cvtps_pd(_mm_loadu_ps(q + i + 12));
            a0 = _mm256_add_pd(a0, _mm256_mul_pd(v0, v0)), a1 = _mm256_add_pd(a1, _mm256_mul_pd(v1, v1));
            a2 = _mm256_add_pd(a2, _mm256_mul_pd(v2, v2)), a3 = _mm256_add_pd(a3, _mm256_mul_pd(v3, v3));
        }
        _mm256_storeu_pd(acc, a0), _mm256_storeu_pd(acc + 4, a1), _mm256_storeu_pd(acc + 8, a2), _mm256_storeu_pd(acc + 12, a3);
#endif
        for (; i + 16 <= n; i += 16)
            for (int l = 0; l < 16; l++) acc[l] += (double)q[i + l] * (double)q[i + l];
        for (; i < n; i++) s0 += (double)q[i] * (double)q[i];
        for (int w = 8; w >= 1; w /= 2) /* pairwise: lanes l and l + w */
            for (int l = 0; l < w; l++) acc[l] += acc[l + w];
        s0 += acc[0];
    }
    const double s = (s0 + s1) + (s2 + s3), norm = p == 1 ? s : sqrt(s);
    /* a zero norm gives zeros (not NaN), as the ONNX reference does */
    const double inv = norm == 0 ? 0.0 : 1.0 / norm;
    for (i = 0; i < n; i++) o[i] = (float)((double)q[i] * inv);
}

static void lp_rows(void *arg, int64_t b, int64_t e) {
    lp_job *j = arg;
    const int64_t n = j->n;
    if (j->dt == KILN_DTYPE_FLOAT) {
        for (int64_t r = b; r < e; r++) lp_row((const float *)j->x + r * n, (float *)j->y + r * n, n, j->p);
        return;
    }
    float *f = malloc((size_t)n * sizeof *f);
    if (!f) {
        __atomic_store_n(&j->fail, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t r = b; r < e; r++) {
        kn_ew_half_to_f32(j->dt, (const uint16_t *)j->x + r * n, f, n);
        lp_row(f, f, n, j->p);
        kn_ew_f32_to_half(j->dt, f, (uint16_t *)j->y + r * n, n);
    }
    free(f);
}

kiln_status kn_cpu_lpnorm(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return KILN_OK;
    KN_CTX_PRM(c, kn_nn_norm_prepare, kn_nn_norm_prm, prm);
    int64_t p = prm->p;
    int64_t axis = prm->axis;
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis out of range");
    int64_t outer = kn_shape_count(x->dims, (int)axis), n = x->dims[axis];
    int64_t inner = kn_shape_count(x->dims + axis + 1, x->rank - (int)axis - 1);
    int64_t total = outer * n * inner;
    if (total == 0) return KILN_OK;
    if ((x->dtype == KILN_DTYPE_FLOAT || kn_ew_is_half(x->dtype)) && y->dtype == x->dtype && inner == 1 &&
        (p == 1 || p == 2)) {
        lp_job j = {x->data, y->data, x->dtype, n, (int)p, 0};
        kn_parallel_for(c->pool, outer, n >= 16384 ? 1 : 16384 / n, lp_rows, &j);
        return j.fail ? KN_OOM() : KILN_OK;
    }
    double *v = malloc((size_t)total * sizeof *v);
    if (!v) return KN_OOM();
    kn_nn_to_f64(x, v);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double *q = v + o * n * inner + i, s = 0;
            for (int64_t r = 0; r < n; r++) s += p == 1 ? fabs(q[r * inner]) : q[r * inner] * q[r * inner];
            double norm = p == 1 ? s : sqrt(s);
            /* a zero norm gives zeros (not NaN), as the ONNX reference does */
            for (int64_t r = 0; r < n; r++) q[r * inner] = norm == 0 ? 0 : q[r * inner] / norm;
        }
    kn_nn_from_f64(y, v);
    free(v);
    return KILN_OK;
}

/* ------------------------------------------------------------------ MeanVarianceNormalization */

/* Float, float16 and bfloat16: the elements in memory order are runs of L (the reduced axes after
 * the last kept one) sharing one kept index, so each run's sum and sum of squares are taken in
 * double (eight partial sums) and added to its index's, and each output is (x - mean) times
 * 1 / (std + 1e-9) in double, rounded once to float: the reference's formula, as below (the
 * product is within two double ulps of the quotient, so the float rounds the same but for a tie that
 * close). float16 and bfloat16 are widened into a float copy that takes the results in place. The
 * element loop below, in double with an index per element, took 7.5x OpenVINO's time on
 * 1x64x56x56. */
static kiln_status mvn_float(kn_kernel_ctx *c, const kn_tensor *x, kn_tensor *y, const bool *mask, int64_t kept,
                             int64_t total) {
    const int rank = x->rank;
    int lk = -1; /* the last kept axis */
    for (int k = 0; k < rank; k++)
        if (!mask[k]) lk = k;
    const int64_t L = kn_shape_count(x->dims + lk + 1, rank - lk - 1), runs = total / L;
    const bool half = x->dtype != KILN_DTYPE_FLOAT;
    const size_t bytes = (size_t)(3 * kept) * sizeof(double) + (half ? (size_t)total * sizeof(float) : 0);
    double *s1;
    KN_TRY(kn_ctx_scratch(c, bytes, "the statistics", (void **)&s1));
    double *s2 = s1 + kept, *cnt = s2 + kept;
    float *f = half ? (float *)(void *)(cnt + kept) : NULL;
    const float *xf = half ? f : x->data;
    float *yf = half ? f : y->data;
    if (half) kn_ew_half_to_f32(x->dtype, x->data, f, total);
    memset(s1, 0, (size_t)(3 * kept) * sizeof *s1);
    int64_t idx[KILN_MAX_RANK] = {0}; /* the run's index over axes 0..lk */
    for (int pass = 0; pass < 2; pass++) {
        memset(idx, 0, sizeof idx);
        for (int64_t r = 0; r < runs; r++) {
            int64_t m = 0;
            for (int k = 0; k <= lk; k++)
                if (!mask[k]) m = m * x->dims[k] + idx[k];
            const float *q = xf + r * L;
            if (pass == 0) {
                double a[8] = {0}, q2[8] = {0}; /* eight partial sums (lane l: elements l mod 8) */
                int64_t i = 0;
#if defined(__AVX__)
                __m256d va0 = _mm256_setzero_pd(), va1 = va0, vq0 = va0, vq1 = va0;
                for (; i + 8 <= L; i += 8) {
                    const __m256d v0 = _mm256_cvtps_pd(_mm_loadu_ps(q + i)), v1 = _mm256_cvtps_pd(_mm_loadu_ps(q + i + 4));
                    va0 = _mm256_add_pd(va0, v0), va1 = _mm256_add_pd(va1, v1);
                    vq0 = _mm256_add_pd(vq0, _mm256_mul_pd(v0, v0)), vq1 = _mm256_add_pd(vq1, _mm256_mul_pd(v1, v1));
                }
                _mm256_storeu_pd(a, va0), _mm256_storeu_pd(a + 4, va1);
                _mm256_storeu_pd(q2, vq0), _mm256_storeu_pd(q2 + 4, vq1);
#endif
                for (; i + 8 <= L; i += 8)
                    for (int l = 0; l < 8; l++) {
                        const double v = q[i + l];
                        a[l] += v;
                        q2[l] += v * v;
                    }
                for (; i < L; i++) a[0] += q[i], q2[0] += (double)q[i] * q[i];
                s1[m] += ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
                s2[m] += ((q2[0] + q2[1]) + (q2[2] + q2[3])) + ((q2[4] + q2[5]) + (q2[6] + q2[7]));
                cnt[m] += (double)L;
            } else {
                const double mean = s1[m], inv = s2[m];
                float *o = yf + r * L;
                for (int64_t i = 0; i < L; i++) o[i] = (float)(((double)q[i] - mean) * inv);
            }
            for (int k = lk; k >= 0; k--) {
                if (++idx[k] < x->dims[k]) break;
                idx[k] = 0;
            }
        }
        if (pass == 0)
            for (int64_t k = 0; k < kept; k++) {
                double m = s1[k] / cnt[k], var = s2[k] / cnt[k] - m * m;
                s1[k] = m;
                s2[k] = 1.0 / (sqrt(var > 0 ? var : 0) + 1e-9);
            }
    }
    if (half) kn_ew_f32_to_half(y->dtype, f, y->data, total);
    kn_ctx_scratch_free(c, s1, bytes);
    return KILN_OK;
}

kiln_status kn_cpu_mvn(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return KILN_OK;
    int rank = x->rank;
    bool mask[KILN_MAX_RANK] = {0};
    KN_CTX_PRM(c, kn_nn_norm_prepare, kn_nn_norm_prm, prm);
    int na = prm->n_axes;
    const int64_t *axes = prm->axes;
    static const int64_t dflt[] = {0, 2, 3};
    if (!axes) axes = dflt, na = 3;
    for (int i = 0; i < na; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (a < 0 || a >= rank) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis %lld out of range", (long long)axes[i]);
        mask[a] = true;
    }
    int64_t total = kn_tensor_count(x);
    if (total == 0) return KILN_OK;
    int64_t kept = 1;
    for (int k = 0; k < rank; k++)
        if (!mask[k]) kept *= x->dims[k];
    if (x->dtype == KILN_DTYPE_FLOAT || kn_ew_is_half(x->dtype)) return mvn_float(c, x, y, mask, kept, total);
    double *v = malloc((size_t)(total + 3 * kept) * sizeof *v);
    int64_t *map = malloc((size_t)total * sizeof *map);
    if (!v || !map) {
        free(v);
        free(map);
        return KN_OOM();
    }
    double *s1 = v + total, *s2 = s1 + kept, *cnt = s2 + kept;
    memset(s1, 0, (size_t)(3 * kept) * sizeof *s1);
    kn_nn_to_f64(x, v);
    /* map each element to its kept-axes index */
    int64_t idx[KILN_MAX_RANK] = {0};
    for (int64_t e = 0; e < total; e++) {
        int64_t m = 0;
        for (int k = 0; k < rank; k++)
            if (!mask[k]) m = m * x->dims[k] + idx[k];
        map[e] = m;
        for (int k = rank - 1; k >= 0; k--) {
            if (++idx[k] < x->dims[k]) break;
            idx[k] = 0;
        }
    }
    for (int64_t e = 0; e < total; e++) {
        s1[map[e]] += v[e];
        s2[map[e]] += v[e] * v[e];
        cnt[map[e]] += 1;
    }
    for (int64_t k = 0; k < kept; k++) {
        double m = s1[k] / cnt[k], var = s2[k] / cnt[k] - m * m;
        s1[k] = m;
        s2[k] = sqrt(var > 0 ? var : 0) + 1e-9;
    }
    for (int64_t e = 0; e < total; e++) v[e] = (v[e] - s1[map[e]]) / s2[map[e]];
    kn_nn_from_f64(y, v);
    free(v);
    free(map);
    return KILN_OK;
}

/* ------------------------------------------------------------------ LRN */

/* Float planes [C, inner] per image, in tasks of LRN_BLOCK positions: for each channel the
 * window's squares summed in float (ascending channels) and x * exp(-beta * log(base)) by the
 * vectorisable kn_ew_logf / kn_ew_expf (a few ulp; ONNX Runtime computes in float too). The
 * double loop with pow per element took 8.7x OpenVINO's time on 1x64x56x56. float16 and
 * bfloat16 run on a widened copy, rounded once at the end; each task widens and rounds its own
 * block of positions (all channels), so the copies run on every thread while the block is in
 * cache (widened whole on the calling thread, they were serial work at any thread count). */
#define LRN_BLOCK 512
typedef struct lrn_job {
    const float *x;
    float *y;
    int64_t C, inner, nblk, lo, hi;
    float bias, alpha_n, neg_beta;
    kiln_dtype half;   /* float16 or bfloat16 when x and y are the widened copies, else FLOAT */
    const void *hx;    /* the half input x widens, and the half output y rounds to */
    void *hy;
} lrn_job;

/* the block [i0, i0 + len) of every channel of image img, between the half tensor and its copy */
static void lrn_widen_block(const lrn_job *j, int64_t img, int64_t i0, int64_t len) {
    for (int64_t ch = 0; ch < j->C; ch++) {
        const int64_t at = (img * j->C + ch) * j->inner + i0;
        kn_ew_half_to_f32(j->half, (const uint16_t *)j->hx + at, (float *)j->x + at, len);
    }
}

static void lrn_round_block(const lrn_job *j, int64_t img, int64_t i0, int64_t len) {
    for (int64_t ch = 0; ch < j->C; ch++) {
        const int64_t at = (img * j->C + ch) * j->inner + i0;
        kn_ew_f32_to_half(j->half, j->y + at, (uint16_t *)j->hy + at, len);
    }
}

/* y = x base^-beta, base = bias + alpha_n s: a loop of its own, so that it vectorises */
static void lrn_pow_row(const float *restrict x, const float *restrict s, float *restrict y, int64_t n, float bias,
                        float alpha_n, float neg_beta) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * kn_ew_expf(neg_beta * kn_ew_logf(bias + alpha_n * s[i]));
}

static void lrn_range(void *arg, int64_t b, int64_t e) {
    const lrn_job *j = arg;
    float s[LRN_BLOCK];
    const bool p34 = j->neg_beta == -0.75f;
    for (int64_t t = b; t < e; t++) {
        const int64_t img = t / j->nblk, i0 = t % j->nblk * LRN_BLOCK;
        const int64_t len = j->inner - i0 < LRN_BLOCK ? j->inner - i0 : LRN_BLOCK;
        const float *xp = j->x + img * j->C * j->inner + i0;
        float *yp = j->y + img * j->C * j->inner + i0;
        if (j->half != KILN_DTYPE_FLOAT) lrn_widen_block(j, img, i0, len);
        for (int64_t ch = 0; ch < j->C; ch++) {
            const int64_t c0 = ch - j->lo < 0 ? 0 : ch - j->lo, c1 = ch + j->hi >= j->C ? j->C - 1 : ch + j->hi;
            const float *xc = xp + ch * j->inner;
            float *yc = yp + ch * j->inner;
            int64_t i = 0;
            /* the window's sum of squares in a register, 0 + x_c0^2 + ... + x_c1^2 in that order
             * (a pass over s per channel of the window, loaded and stored each time, took a third
             * of the time); base^-3/4 = t sqrt(t) with t = sqrt(1 / base): AlexNet's and
             * GoogLeNet's beta, half the time of the logarithm and exponential (correctly rounded
             * steps: ~2 ulp); other betas through lrn_pow_row on the sums */
#if defined(__AVX__)
            const __m256 bias = _mm256_set1_ps(j->bias), an = _mm256_set1_ps(j->alpha_n), one = _mm256_set1_ps(1.0f);
            for (; i + 8 <= len; i += 8) {
                __m256 a = _mm256_setzero_ps();
                for (int64_t k = c0; k <= c1; k++) {
                    const __m256 v = _mm256_loadu_ps(xp + k * j->inner + i);
                    a = _mm256_add_ps(a, _mm256_mul_ps(v, v));
                }
                if (!p34) {
                    _mm256_storeu_ps(s + i, a);
                    continue;
                }
                const __m256 base = _mm256_add_ps(bias, _mm256_mul_ps(an, a));
                const __m256 tt = _mm256_sqrt_ps(_mm256_div_ps(one, base));
                _mm256_storeu_ps(yc + i, _mm256_mul_ps(_mm256_loadu_ps(xc + i), _mm256_mul_ps(tt, _mm256_sqrt_ps(tt))));
            }
#endif
            for (; i < len; i++) {
                float a = 0;
                for (int64_t k = c0; k <= c1; k++) {
                    const float v = xp[k * j->inner + i];
                    a += v * v;
                }
                if (!p34) {
                    s[i] = a;
                    continue;
                }
                const float tt = sqrtf(1.0f / (j->bias + j->alpha_n * a));
                yc[i] = xc[i] * (tt * sqrtf(tt));
            }
            if (!p34) lrn_pow_row(xc, s, yc, len, j->bias, j->alpha_n, j->neg_beta);
        }
        if (j->half != KILN_DTYPE_FLOAT) lrn_round_block(j, img, i0, len);
    }
}

kiln_status kn_cpu_lrn(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return KILN_OK;
    if (x->rank < 2) return kn_kernel_error(c, KILN_ERR_SHAPE, "input needs rank >= 2");
    KN_CTX_PRM(c, kn_nn_norm_prepare, kn_nn_norm_prm, prm);
    double alpha = prm->alpha, beta = prm->beta;
    double bias = prm->bias;
    int64_t size = prm->size;
    int64_t N = x->dims[0], C = x->dims[1], inner = kn_shape_count(x->dims + 2, x->rank - 2);
    int64_t total = N * C * inner;
    if (total == 0) return KILN_OK;
    int64_t lo = (size - 1) / 2, hi = size - 1 - lo; /* floor and ceil of (size-1)/2 */
    if ((x->dtype == KILN_DTYPE_FLOAT || kn_ew_is_half(x->dtype)) && y->dtype == x->dtype && size >= 1) {
        const bool half = x->dtype != KILN_DTYPE_FLOAT;
        const size_t bytes = half ? (size_t)total * 2 * sizeof(float) : 0;
        float *buf = NULL;
        if (half) KN_TRY(kn_ctx_scratch(c, bytes, "the float copies", (void **)&buf));
        lrn_job j = {half ? buf : x->data,
                     half ? buf + total : y->data,
                     C,
                     inner,
                     (inner + LRN_BLOCK - 1) / LRN_BLOCK,
                     lo,
                     hi,
                     (float)bias,
                     (float)(alpha / (double)size),
                     (float)-beta,
                     half ? x->dtype : KILN_DTYPE_FLOAT,
                     x->data,
                     y->data};
        const int64_t work = C * (inner < LRN_BLOCK ? inner : LRN_BLOCK) * (size + 8 + (half ? 4 : 0));
        kn_parallel_for(c->pool, N * j.nblk, work >= 65536 ? 1 : 65536 / work + 1, lrn_range, &j);
        if (half) kn_ctx_scratch_free(c, buf, bytes);
        return KILN_OK;
    }
    double *v = malloc((size_t)total * 2 * sizeof *v);
    if (!v) return KN_OOM();
    double *o = v + total;
    kn_nn_to_f64(x, v);
    for (int64_t nn = 0; nn < N; nn++)
        for (int64_t ch = 0; ch < C; ch++) {
            int64_t c0 = ch - lo < 0 ? 0 : ch - lo, c1 = ch + hi >= C ? C - 1 : ch + hi;
            for (int64_t i = 0; i < inner; i++) {
                double s = 0;
                for (int64_t k = c0; k <= c1; k++) {
                    double a = v[(nn * C + k) * inner + i];
                    s += a * a;
                }
                int64_t at = (nn * C + ch) * inner + i;
                o[at] = v[at] / pow(bias + alpha / (double)size * s, beta);
            }
        }
    kn_nn_from_f64(y, o);
    free(v);
    return KILN_OK;
}

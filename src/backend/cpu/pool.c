/* Pooling on the CPU: MaxPool (with Indices), AveragePool, LpPool, their Global forms and
 * MaxUnpool. Any number of spatial dims; planes (n, c) run in parallel.
 *
 * Window semantics follow the ONNX reference: a window covers start + k*dilation for k < kernel
 * with start = o*stride - pad_begin; only positions inside the input count for MaxPool and for
 * AveragePool without count_include_pad; with count_include_pad (and for LpPool) the positions
 * inside the explicit pads count too, but not the extra positions ceil_mode adds past the end
 * pad. float16/bfloat16 go through float; int8/uint8 only in MaxPool. */
#include "backend/cpu/linalg_impl.h"
#include "ops/linalg_util.h"

#include <math.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

enum { POOL_MAX, POOL_AVG, POOL_LP };

typedef struct pool_job {
    const kn_window *w;
    int kind;
    bool include_pad;
    double p;          /* LpPool */
    int storage_order; /* MaxPool indices: 0 row-major, 1 column-major spatial */
    int64_t in_plane, out_plane, kernel_total;
    const void *x;
    void *y;
    int64_t *ind; /* MaxPool indices or NULL */
} pool_job;

/* Per spatial dim of output position o: window start, the valid kernel index range [lo, hi)
 * (inside the input) and the end of the range inside input + pads (hp). */
static void window_ranges(const kn_window *w, int64_t o, int64_t *st, int64_t *lo, int64_t *hi, int64_t *hp) {
    for (int i = w->nsp - 1; i >= 0; i--) {
        int64_t oi = o % w->out[i];
        o /= w->out[i];
        int64_t s = oi * w->stride[i] - w->pad_begin[i], d = w->dilation[i], k = w->kernel[i], in = w->in[i];
        st[i] = s;
        lo[i] = s >= 0 ? 0 : (-s + d - 1) / d;
        hi[i] = in - 1 - s < 0 ? 0 : min64(k, (in - 1 - s) / d + 1);
        int64_t lim = in + w->pad_end[i] - s; /* positions s + k*d < in + pad_end */
        hp[i] = lim <= 0 ? 0 : min64(k, (lim + d - 1) / d);
    }
}

#define DEF_POOL(NAME, T)                                                                          \
    static void NAME(void *arg, int64_t begin, int64_t end) {                                      \
        const pool_job *j = arg;                                                                   \
        const kn_window *w = j->w;                                                                 \
        const int nsp = w->nsp;                                                                    \
        for (int64_t pl = begin; pl < end; pl++) {                                                 \
            const T *x = (const T *)j->x + pl * j->in_plane;                                       \
            T *y = (T *)j->y + pl * j->out_plane;                                                  \
            for (int64_t o = 0; o < j->out_plane; o++) {                                           \
                int64_t st[KN_MAX_SPATIAL], lo[KN_MAX_SPATIAL], hi[KN_MAX_SPATIAL], hp[KN_MAX_SPATIAL]; \
                window_ranges(w, o, st, lo, hi, hp);                                               \
                int64_t valid = 1, padded = 1;                                                     \
                for (int i = 0; i < nsp; i++) {                                                    \
                    valid *= hi[i] > lo[i] ? hi[i] - lo[i] : 0;                                    \
                    padded *= hp[i];                                                               \
                }                                                                                  \
                double acc = 0;                                                                    \
                T best = 0;                                                                        \
                int64_t best_idx = -1;                                                             \
                if (valid > 0) {                                                                   \
                    int64_t k[KN_MAX_SPATIAL];                                                     \
                    for (int i = 0; i < nsp; i++) k[i] = lo[i];                                    \
                    for (;;) {                                                                     \
                        int64_t idx = 0;                                                           \
                        for (int i = 0; i < nsp; i++) idx = idx * w->in[i] + st[i] + k[i] * w->dilation[i]; \
                        T v = x[idx];                                                              \
                        if (j->kind == POOL_MAX) {                                                 \
                            if (best_idx < 0 || v > best) {                                        \
                                best = v;                                                          \
                                best_idx = idx;                                                    \
                            }                                                                      \
                        } else if (j->kind == POOL_AVG) {                                          \
                            acc += (double)v;                                                      \
                        } else {                                                                   \
                            acc += pow(fabs((double)v), j->p);                                     \
                        }                                                                          \
                        int i = nsp - 1;                                                           \
                        while (i >= 0 && ++k[i] >= hi[i]) {                                        \
                            k[i] = lo[i];                                                          \
                            i--;                                                                   \
                        }                                                                          \
                        if (i < 0) break;                                                          \
                    }                                                                              \
                }                                                                                  \
                if (j->kind == POOL_MAX) {                                                         \
                    y[o] = best;                                                                   \
                    if (j->ind) {                                                                  \
                        int64_t r = 0;                                                             \
                        if (best_idx >= 0 && j->storage_order) {                                   \
                            /* column-major over the spatial dims: the first is fastest */         \
                            int64_t t = best_idx, mul = 1;                                         \
                            int64_t pos[KN_MAX_SPATIAL];                                           \
                            for (int i = nsp - 1; i >= 0; i--) {                                   \
                                pos[i] = t % w->in[i];                                             \
                                t /= w->in[i];                                                     \
                            }                                                                      \
                            for (int i = 0; i < nsp; i++) {                                        \
                                r += pos[i] * mul;                                                 \
                                mul *= w->in[i];                                                   \
                            }                                                                      \
                        } else if (best_idx >= 0) {                                                \
                            r = best_idx;                                                          \
                        }                                                                          \
                        j->ind[pl * j->out_plane + o] = pl * j->in_plane + r;                      \
                    }                                                                              \
                } else if (j->kind == POOL_AVG) {                                                  \
                    int64_t cnt = j->include_pad ? padded : valid;                                 \
                    y[o] = (T)(cnt > 0 ? acc / (double)cnt : 0.0);                                 \
                } else {                                                                           \
                    double scaled = padded > 0 ? acc * (double)j->kernel_total / (double)padded : 0.0; \
                    y[o] = (T)pow(scaled, 1.0 / j->p);                                             \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

DEF_POOL(pool_f32, float)
DEF_POOL(pool_f64, double)
DEF_POOL(pool_i8, int8_t)
DEF_POOL(pool_u8, uint8_t)

static double lp_p(const kn_node *n) {
    const kn_attr *a = kn_node_attr(n, "p");
    if (!a) return 2.0;
    return a->type == KN_ATTR_FLOAT ? a->f : (double)a->i;
}

static kiln_status run_pool(kn_kernel_ctx *c, int kind) {
    const kn_tensor *X = c->in[0];
    kn_tensor *Y = c->out[0];
    kn_tensor *I = kind == POOL_MAX && c->n_outputs > 1 ? c->out[1] : NULL;
    if (X->rank < 3) return kn_kernel_error(c, KILN_ERR_SHAPE, "X must have rank >= 3");
    kn_window w;
    char why[512];
    kiln_status st = kn_window_plan(c->node, KN_WINDOW_POOL, X->rank - 2, X->dims + 2, NULL, &w, why, sizeof why);
    if (st) return kn_kernel_error(c, st, "%s", why);
    pool_job j = {.w = &w, .kind = kind, .p = lp_p(c->node), .in_plane = 1, .out_plane = 1, .kernel_total = 1};
    j.include_pad = kind == POOL_LP || (kind == POOL_AVG && kn_attr_int(c->node, "count_include_pad", 0) != 0);
    j.storage_order = (int)kn_attr_int(c->node, "storage_order", 0);
    for (int i = 0; i < w.nsp; i++) {
        j.in_plane *= w.in[i];
        j.out_plane *= w.out[i];
        j.kernel_total *= w.kernel[i];
    }
    int64_t planes = X->dims[0] * X->dims[1];
    if (kn_tensor_count(Y) != planes * j.out_plane)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "output size does not match the computed geometry");
    j.ind = I ? I->data : NULL;
    kn_range_fn fn = NULL;
    bool ox = false;
    float *tmp = NULL;
    switch (X->dtype) {
    case KILN_DTYPE_FLOAT: fn = pool_f32; break;
    case KILN_DTYPE_DOUBLE: fn = pool_f64; break;
    case KILN_DTYPE_INT8: fn = kind == POOL_MAX ? pool_i8 : NULL; break;
    case KILN_DTYPE_UINT8: fn = kind == POOL_MAX ? pool_u8 : NULL; break;
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: fn = pool_f32; break;
    default: break;
    }
    if (!fn) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s", kiln_dtype_name(X->dtype));
    j.x = X->data;
    j.y = Y->data;
    if (X->dtype == KILN_DTYPE_FLOAT16 || X->dtype == KILN_DTYPE_BFLOAT16) {
        j.x = kn_linalg_f32_in(X, &ox);
        tmp = malloc(sizeof(float) * (size_t)(planes * j.out_plane + 1));
        j.y = tmp;
        if (!j.x || !tmp) {
            if (ox) free((void *)j.x);
            free(tmp);
            return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    int64_t work = j.out_plane * j.kernel_total;
    kn_parallel_for(c->pool, planes, work > 8192 ? 1 : 8192 / (work + 1) + 1, fn, &j);
    if (tmp) kn_linalg_f32_out(tmp, Y, planes * j.out_plane);
    if (ox) free((void *)j.x);
    free(tmp);
    return KILN_OK;
}

kiln_status kn_cpu_max_pool(kn_kernel_ctx *c) { return run_pool(c, POOL_MAX); }
kiln_status kn_cpu_average_pool(kn_kernel_ctx *c) { return run_pool(c, POOL_AVG); }
kiln_status kn_cpu_lp_pool(kn_kernel_ctx *c) { return run_pool(c, POOL_LP); }

/* ------------------------------------------------------------------ global pools */

typedef struct gpool_job {
    int kind;
    double p;
    int64_t plane;
    const float *xf;
    float *yf;
    const double *xd;
    double *yd;
} gpool_job;

/* Sum of a float plane in double, in 8 independent lanes so the compiler vectorises it (a single
 * running sum waits on the previous add for every element). With AVX-512 explicitly: 32 floats a
 * step into four 8-double accumulators and a masked tail (the compiler's loop used 8 floats a
 * step, half-width vectors, and a scalar tail: most of a 7x7 plane). */
#if defined(__AVX512F__)
static double plane_sum_f32(const float *x, int64_t n) {
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(v0)));
        a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v0), 1))));
        a2 = _mm512_add_pd(a2, _mm512_cvtps_pd(_mm512_castps512_ps256(v1)));
        a3 = _mm512_add_pd(a3, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v1), 1))));
    }
    for (; i < n; i += 16) {
        const int64_t left = n - i;
        const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
        a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
}
#else
static double plane_sum_f32(const float *x, int64_t n) {
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += (double)x[i + k];
    double s = 0;
    for (int k = 0; k < 8; k++) s += acc[k];
    for (; i < n; i++) s += (double)x[i];
    return s;
}
#endif

static void gpool_range(void *arg, int64_t begin, int64_t end) {
    const gpool_job *j = arg;
    if (j->xf && j->kind == POOL_AVG) {
        for (int64_t pl = begin; pl < end; pl++) {
            double r = j->plane ? plane_sum_f32(j->xf + pl * j->plane, j->plane) / (double)j->plane : 0.0;
            if (j->yf) j->yf[pl] = (float)r;
            else j->yd[pl] = r;
        }
        return;
    }
    for (int64_t pl = begin; pl < end; pl++) {
        double acc = j->kind == POOL_MAX ? -INFINITY : 0.0;
        for (int64_t i = 0; i < j->plane; i++) {
            double v = j->xf ? (double)j->xf[pl * j->plane + i] : j->xd[pl * j->plane + i];
            if (j->kind == POOL_MAX) acc = v > acc || i == 0 ? v : acc;
            else if (j->kind == POOL_AVG) acc += v;
            else acc += pow(fabs(v), j->p);
        }
        double r = j->kind == POOL_MAX ? acc
                   : j->kind == POOL_AVG ? (j->plane ? acc / (double)j->plane : 0.0)
                                         : pow(acc, 1.0 / j->p);
        if (j->yf) j->yf[pl] = (float)r;
        else j->yd[pl] = r;
    }
}

static kiln_status run_global(kn_kernel_ctx *c, int kind) {
    const kn_tensor *X = c->in[0];
    kn_tensor *Y = c->out[0];
    if (X->rank < 2) return kn_kernel_error(c, KILN_ERR_SHAPE, "X must have rank >= 2");
    int64_t planes = X->dims[0] * X->dims[1];
    gpool_job j = {.kind = kind, .p = lp_p(c->node), .plane = planes ? kn_tensor_count(X) / planes : 0};
    bool ox = false;
    float *tmp = NULL;
    if (X->dtype == KILN_DTYPE_DOUBLE) {
        j.xd = X->data;
        j.yd = Y->data;
    } else {
        j.xf = kn_linalg_f32_in(X, &ox);
        j.yf = X->dtype == KILN_DTYPE_FLOAT ? Y->data : (tmp = malloc(sizeof(float) * (size_t)(planes + 1)));
        if (!j.xf || !j.yf) {
            if (ox) free((void *)j.xf);
            free(tmp);
            return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    kn_parallel_for(c->pool, planes, j.plane > 4096 ? 1 : 4096 / (j.plane + 1) + 1, gpool_range, &j);
    if (tmp) kn_linalg_f32_out(tmp, Y, planes);
    if (ox) free((void *)j.xf);
    free(tmp);
    return KILN_OK;
}

kiln_status kn_cpu_global_average_pool(kn_kernel_ctx *c) { return run_global(c, POOL_AVG); }
kiln_status kn_cpu_global_max_pool(kn_kernel_ctx *c) { return run_global(c, POOL_MAX); }
kiln_status kn_cpu_global_lp_pool(kn_kernel_ctx *c) { return run_global(c, POOL_LP); }

/* ------------------------------------------------------------------ MaxUnpool */

kiln_status kn_cpu_max_unpool(kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0], *I = c->in[1];
    kn_tensor *Y = c->out[0];
    if (I->dtype != KILN_DTYPE_INT64 || kn_tensor_count(I) != kn_tensor_count(X) || X->rank < 3 ||
        Y->rank != X->rank)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "indices must be int64 with the shape of X");
    kn_window w;
    char why[512];
    kiln_status st = kn_window_plan(c->node, KN_WINDOW_POOL, X->rank - 2, X->dims + 2, NULL, &w, why, sizeof why);
    if (st) return kn_kernel_error(c, st, "%s", why);
    /* the indices address the tensor MaxPool read: [N, C, (x-1)*stride - pads + kernel]; when
     * output_shape differs, that tensor sits at the origin of the output */
    int64_t inf[KILN_MAX_RANK];
    inf[0] = X->dims[0];
    inf[1] = X->dims[1];
    for (int i = 0; i < w.nsp; i++)
        inf[2 + i] = (X->dims[2 + i] - 1) * w.stride[i] - w.pad_begin[i] - w.pad_end[i] + w.kernel[i];
    int64_t n_inf = kn_shape_count(inf, X->rank);
    size_t es = kiln_dtype_size(X->dtype);
    int64_t ny = kn_tensor_count(Y), nx = kn_tensor_count(X);
    memset(Y->data, 0, (size_t)ny * es);
    const int64_t *idx = I->data;
    for (int64_t e = 0; e < nx; e++) {
        if (idx[e] < 0 || idx[e] >= n_inf)
            return kn_kernel_error(c, KILN_ERR_RUNTIME, "index %lld at position %lld is outside the unpooled tensor (%lld elements)",
                                   (long long)idx[e], (long long)e, (long long)n_inf);
        int64_t t = idx[e], off = 0, mul = 1;
        bool inside = true;
        for (int d = X->rank - 1; d >= 0; d--) {
            int64_t p = t % inf[d];
            t /= inf[d];
            inside &= p < Y->dims[d];
            off += p * mul;
            mul *= Y->dims[d];
        }
        if (inside) memcpy((char *)Y->data + (size_t)off * es, (const char *)X->data + (size_t)e * es, es);
    }
    return KILN_OK;
}

/* CPU kernels of the tensor family that compute values: Range, CumSum/CumProd, Trilu, EyeLike,
 * ConstantOfShape, Unique. */
#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/tensor_kernels.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ Range */

kiln_status kn_cpu_range(kn_kernel_ctx *c) {
    const kn_tensor *s = c->in[0], *d = c->in[2];
    kn_tensor *y;
    KN_TRY(kn_cpu_out(c, 0, &y));
    int64_t n = kn_tensor_count(y);
    if (kn_tensor_count(s) != 1 || kn_tensor_count(d) != 1)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "start and delta must be scalars");
    switch (y->dtype) {
    case KILN_DTYPE_FLOAT: {
        /* numpy's arange works in double and the result is cast, as the reference does */
        double a = kn_tensor_get_f64(s, 0), st = kn_tensor_get_f64(d, 0);
        float *o = y->data;
        for (int64_t i = 0; i < n; i++) o[i] = (float)(a + (double)i * st);
        break;
    }
    case KILN_DTYPE_DOUBLE: {
        double a = kn_tensor_get_f64(s, 0), st = kn_tensor_get_f64(d, 0), *o = y->data;
        for (int64_t i = 0; i < n; i++) o[i] = a + (double)i * st;
        break;
    }
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: {
        /* stash_type (opset 27, default float) is the precision of the computation */
        kn_cpu_tensor_prm local_prm;
        const kn_cpu_tensor_prm *prm;
        KN_TRY(kn_ctx_params(c, kn_cpu_tensor_prepare, &local_prm, (const void **)&prm));
        bool dbl = prm->stash_double;
        double a = kn_tensor_get_f64(s, 0), st = kn_tensor_get_f64(d, 0);
        float af = (float)a, sf = (float)st;
        for (int64_t i = 0; i < n; i++) kn_tensor_set_f64(y, i, dbl ? a + (double)i * st : (double)(af + (float)i * sf));
        break;
    }
    default: {
        if (!kn_dtype_is_int(y->dtype))
            return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s", kiln_dtype_name(y->dtype));
        int64_t a = kn_tensor_get_i64(s, 0), st = kn_tensor_get_i64(d, 0);
        if (y->dtype == KILN_DTYPE_INT64) {
            int64_t *o = y->data;
            for (int64_t i = 0; i < n; i++) o[i] = a + i * st;
        } else if (y->dtype == KILN_DTYPE_INT32) {
            int32_t *o = y->data;
            for (int64_t i = 0; i < n; i++) o[i] = (int32_t)(a + i * st);
        } else {
            for (int64_t i = 0; i < n; i++) kn_tensor_set_i64(y, i, a + i * st);
        }
    }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ CumSum, CumProd */

/* Rows of `post` elements along the axis; each output row is the previous output row combined
 * with an input row (exclusive: the previous input row), so the inner loop is contiguous. */
#define CUM_LOOP(T, ONE, OP)                                                                       \
    do {                                                                                           \
        const T *xp = x->data;                                                                     \
        T *yp = y->data;                                                                           \
        for (int64_t p = 0; p < pre; p++)                                                          \
            for (int64_t t = 0; t < D; t++) {                                                      \
                int64_t i = rev ? D - 1 - t : t, prev = rev ? i + 1 : i - 1;                       \
                T *yr = yp + (p * D + i) * post;                                                   \
                const T *xr = xp + (p * D + (excl ? prev : i)) * post;                             \
                const T *yprev = yp + (p * D + prev) * post;                                       \
                if (t == 0) {                                                                      \
                    for (int64_t q = 0; q < post; q++) yr[q] = excl ? (T)(ONE) : xr[q];            \
                } else {                                                                           \
                    for (int64_t q = 0; q < post; q++) yr[q] = (T)(yprev[q] OP xr[q]);             \
                }                                                                                  \
            }                                                                                      \
    } while (0)

/* Along the last axis (post == 1): the running value in a register, four rows at a time. Each
 * output is the same operation on the same operands as CUM_LOOP's (the first inclusive output is
 * the input itself, the first exclusive one the identity), but CUM_LOOP read each previous output
 * back from memory: a store-to-load forwarding in every step of the chain, 16% of CumSum
 * 1x4096's time on the add and 46% on the store in perf. */
#define CUM_ROWS(T, ONE, OP)                                                                       \
    do {                                                                                           \
        const T *xp = x->data;                                                                     \
        T *yp = y->data;                                                                           \
        const int64_t i0 = rev ? D - 1 : 0, step = rev ? -1 : 1;                                   \
        int64_t p = 0;                                                                             \
        for (; p + 4 <= pre; p += 4) {                                                             \
            const T *x0 = xp + p * D, *x1 = x0 + D, *x2 = x1 + D, *x3 = x2 + D;                    \
            T *y0 = yp + p * D, *y1 = y0 + D, *y2 = y1 + D, *y3 = y2 + D;                          \
            T a0, a1, a2, a3;                                                                      \
            if (excl) {                                                                            \
                a0 = a1 = a2 = a3 = (T)(ONE);                                                      \
                for (int64_t t = 0, i = i0; t < D; t++, i += step) {                               \
                    y0[i] = a0, y1[i] = a1, y2[i] = a2, y3[i] = a3;                                \
                    a0 = (T)(a0 OP x0[i]), a1 = (T)(a1 OP x1[i]);                                  \
                    a2 = (T)(a2 OP x2[i]), a3 = (T)(a3 OP x3[i]);                                  \
                }                                                                                  \
            } else {                                                                               \
                y0[i0] = a0 = x0[i0], y1[i0] = a1 = x1[i0], y2[i0] = a2 = x2[i0], y3[i0] = a3 = x3[i0]; \
                for (int64_t t = 1, i = i0 + step; t < D; t++, i += step) {                        \
                    y0[i] = a0 = (T)(a0 OP x0[i]), y1[i] = a1 = (T)(a1 OP x1[i]);                  \
                    y2[i] = a2 = (T)(a2 OP x2[i]), y3[i] = a3 = (T)(a3 OP x3[i]);                  \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (; p < pre; p++) {                                                                     \
            const T *xr = xp + p * D;                                                              \
            T *yr = yp + p * D, a;                                                                 \
            if (excl) {                                                                            \
                a = (T)(ONE);                                                                      \
                for (int64_t t = 0, i = i0; t < D; t++, i += step) yr[i] = a, a = (T)(a OP xr[i]); \
            } else {                                                                               \
                yr[i0] = a = xr[i0];                                                               \
                for (int64_t t = 1, i = i0 + step; t < D; t++, i += step) yr[i] = a = (T)(a OP xr[i]); \
            }                                                                                      \
        }                                                                                          \
    } while (0)
#define CUM(T, ONE, OP)                                                                            \
    do {                                                                                           \
        if (post == 1) CUM_ROWS(T, ONE, OP);                                                       \
        else CUM_LOOP(T, ONE, OP);                                                                 \
    } while (0)

/* float16 / bfloat16: a float accumulator, each output the float result rounded once (ONNX
 * Runtime casts around a float16 CumSum; rounding the running sum at every step drifted: a row of
 * 4096 ones summed to 2048). Rows are widened and narrowed by the vector conversions: along the
 * last axis the whole row at once, otherwise one row of `post` elements a step. */
static kiln_status cum_half(kn_kernel_ctx *c, const kn_tensor *x, kn_tensor *y, int64_t pre, int64_t D, int64_t post,
                            bool excl, bool rev, bool prod) {
    const kiln_dtype dt = x->dtype;
    const size_t bytes = sizeof(float) * (size_t)(post == 1 ? D : 2 * post);
    float *buf;
    KN_TRY(kn_ctx_scratch(c, bytes, "the float rows", (void **)&buf));
    const uint16_t *xp = x->data;
    uint16_t *yp = y->data;
    const float one = prod ? 1.0f : 0.0f;
    for (int64_t p = 0; p < pre; p++) {
        if (post == 1) {
            kn_ew_half_to_f32(dt, xp + p * D, buf, D);
            float acc = one;
            for (int64_t t = 0; t < D; t++) {
                const int64_t i = rev ? D - 1 - t : t;
                const float v = buf[i];
                if (excl) buf[i] = acc;
                /* the first inclusive output is the input itself (a -0 stays -0, as in float) */
                acc = t == 0 && !excl ? v : prod ? acc * v : acc + v;
                if (!excl) buf[i] = acc;
            }
            kn_ew_f32_to_half(dt, buf, yp + p * D, D);
            continue;
        }
        float *acc = buf, *xr = buf + post;
        for (int64_t t = 0; t < D; t++) {
            const int64_t i = rev ? D - 1 - t : t;
            const size_t at = (size_t)((p * D + i) * post);
            kn_ew_half_to_f32(dt, xp + at, xr, post);
            if (excl) {
                if (t == 0)
                    for (int64_t q = 0; q < post; q++) acc[q] = one;
                kn_ew_f32_to_half(dt, acc, yp + at, post);
            }
            if (t == 0 && !excl) memcpy(acc, xr, (size_t)post * sizeof *acc);
            else if (prod)
                for (int64_t q = 0; q < post; q++) acc[q] *= xr[q];
            else
                for (int64_t q = 0; q < post; q++) acc[q] += xr[q];
            if (!excl) kn_ew_f32_to_half(dt, acc, yp + at, post);
        }
    }
    kn_ctx_scratch_free(c, buf, bytes);
    return KILN_OK;
}

kiln_status kn_cpu_cumulative(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *ax = c->in[1];
    kn_tensor *y;
    KN_TRY(kn_cpu_out(c, 0, &y));
    bool prod = c->node->op_type[3] == 'P'; /* CumProd, CumSum */
    kn_cpu_tensor_prm local_prm;
    const kn_cpu_tensor_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_cpu_tensor_prepare, &local_prm, (const void **)&prm));
    bool excl = prm->exclusive, rev = prm->reverse;
    int r = x->rank;
    if (kn_tensor_count(ax) != 1) return kn_kernel_error(c, KILN_ERR_SHAPE, "axis must be a scalar");
    int64_t a = kn_cpu_index(ax, 0);
    int rr = r == 0 ? 1 : r;
    if (a < -rr || a >= rr) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "axis %lld is out of range", (long long)a);
    if (a < 0) a += rr;
    int64_t pre = 1, D = r == 0 ? 1 : x->dims[a], post = 1;
    for (int k = 0; k < a; k++) pre *= x->dims[k];
    for (int k = (int)a + 1; k < r; k++) post *= x->dims[k];
    if (kn_tensor_count(x) == 0) return KILN_OK;
    switch (x->dtype) {
    case KILN_DTYPE_FLOAT: if (prod) CUM(float, 1, *); else CUM(float, 0, +); break;
    case KILN_DTYPE_DOUBLE: if (prod) CUM(double, 1, *); else CUM(double, 0, +); break;
    case KILN_DTYPE_INT8: if (prod) CUM(int8_t, 1, *); else CUM(int8_t, 0, +); break;
    case KILN_DTYPE_INT16: if (prod) CUM(int16_t, 1, *); else CUM(int16_t, 0, +); break;
    case KILN_DTYPE_INT32: if (prod) CUM(int32_t, 1, *); else CUM(int32_t, 0, +); break;
    case KILN_DTYPE_INT64: if (prod) CUM(int64_t, 1, *); else CUM(int64_t, 0, +); break;
    case KILN_DTYPE_UINT8: if (prod) CUM(uint8_t, 1, *); else CUM(uint8_t, 0, +); break;
    case KILN_DTYPE_UINT16: if (prod) CUM(uint16_t, 1, *); else CUM(uint16_t, 0, +); break;
    case KILN_DTYPE_UINT32: if (prod) CUM(uint32_t, 1, *); else CUM(uint32_t, 0, +); break;
    case KILN_DTYPE_UINT64: if (prod) CUM(uint64_t, 1, *); else CUM(uint64_t, 0, +); break;
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: return cum_half(c, x, y, pre, D, post, excl, rev, prod);
    default: return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s", kiln_dtype_name(x->dtype));
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ Trilu, EyeLike, ConstantOfShape */

static const char *const kn_empty_string = "";

static const void *zero_elem(kiln_dtype dt) {
    static const uint64_t zero[2];
    return dt == KILN_DTYPE_STRING ? (const void *)&kn_empty_string : (const void *)zero;
}

/* Trilu's one pass over rows [b, e) of all the matrices: each row's kept part copied, the rest
 * cleared. Rows are independent: split across the pool (a memory-bound loop). */
typedef struct trilu_job {
    const char *x;
    char *y;
    size_t es;
    int64_t N, M, k;
    bool upper;
} trilu_job;

static void trilu_rows(void *arg, int64_t b, int64_t e) {
    const trilu_job *j = arg;
    const int64_t M = j->M;
    const size_t es = j->es;
    for (int64_t r = b; r < e; r++) {
        const int64_t i = r % j->N;
        int64_t lo = j->upper ? i + j->k : 0, hi = j->upper ? M : i + j->k + 1; /* the kept columns */
        lo = lo < 0 ? 0 : lo > M ? M : lo;
        hi = hi < lo ? lo : hi > M ? M : hi;
        char *d = j->y + (size_t)(r * M) * es;
        const char *sr = j->x + (size_t)(r * M) * es;
        memset(d, 0, (size_t)lo * es);
        memcpy(d + (size_t)lo * es, sr + (size_t)lo * es, (size_t)(hi - lo) * es);
        memset(d + (size_t)hi * es, 0, (size_t)(M - hi) * es);
    }
}

kiln_status kn_cpu_trilu(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *kt = c->n_inputs > 1 ? c->in[1] : NULL;
    kn_tensor *y;
    KN_TRY(kn_cpu_out(c, 0, &y));
    if (x->rank < 2) return kn_kernel_error(c, KILN_ERR_SHAPE, "input must have rank >= 2");
    int64_t k = kt && kn_tensor_count(kt) >= 1 ? kn_cpu_index(kt, 0) : 0;
    kn_cpu_tensor_prm local_prm;
    const kn_cpu_tensor_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_cpu_tensor_prepare, &local_prm, (const void **)&prm));
    bool upper = prm->upper;
    int64_t N = x->dims[x->rank - 2], M = x->dims[x->rank - 1];
    int64_t mats = (N * M) != 0 ? kn_tensor_count(x) / (N * M) : 0;
    if (y->dtype != KILN_DTYPE_STRING && !kn_dtype_is_packed(y->dtype) && y->data != x->data &&
        y->dtype == x->dtype && kn_tensor_count(y) == kn_tensor_count(x)) {
        /* one pass: each row's kept part copied, the rest cleared (was: the whole copy, then the
         * clears over it: 1.5x ONNX Runtime's time on a 1x12x128x128 mask) */
        trilu_job j = {x->data, y->data, kiln_dtype_size(y->dtype), N, M, k, upper};
        const int64_t grain = kn_parallel_grain_light(c->pool, KN_EW_GRAIN_LIGHT) / (M > 0 ? M : 1);
        kn_parallel_for(c->pool, mats * N, grain > 0 ? grain : 1, trilu_rows, &j);
        return KILN_OK;
    }
    KN_TRY(kn_cpu_copy_all(c, y, x));
    const void *z = zero_elem(y->dtype);
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < N; i++) {
            int64_t row = (m * N + i) * M, lo, hi;
            /* keep j - i >= k (upper) or j - i <= k (lower); clear the rest of the row */
            if (upper) lo = 0, hi = i + k;
            else lo = i + k + 1, hi = M;
            if (lo < 0) lo = 0;
            if (hi > M) hi = M;
            if (hi > lo && !kn_cpu_fill_elems(y, row + lo, hi - lo, z)) return KN_OOM();
        }
    return KILN_OK;
}

kiln_status kn_cpu_eyelike(kn_kernel_ctx *c) {
    kn_tensor *y;
    KN_TRY(kn_cpu_out(c, 0, &y));
    if (y->rank != 2) return kn_kernel_error(c, KILN_ERR_SHAPE, "input must be 2-D");
    kn_cpu_tensor_prm local_prm;
    const kn_cpu_tensor_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_cpu_tensor_prepare, &local_prm, (const void **)&prm));
    int64_t k = prm->k, N = y->dims[0], M = y->dims[1];
    if (!kn_cpu_fill_elems(y, 0, N * M, zero_elem(y->dtype))) return KN_OOM();
    if (y->dtype == KILN_DTYPE_STRING) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "string output");
    for (int64_t i = 0; i < N; i++) {
        int64_t j = i + k;
        if (j >= 0 && j < M) kn_tensor_set_f64(y, i * M + j, 1.0);
    }
    return KILN_OK;
}

kiln_status kn_cpu_constant_of_shape(kn_kernel_ctx *c) {
    kn_tensor *y;
    KN_TRY(kn_cpu_out(c, 0, &y));
    kn_cpu_tensor_prm local_prm;
    const kn_cpu_tensor_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_cpu_tensor_prepare, &local_prm, (const void **)&prm));
    const kn_attr *va = prm->value;
    if (!va || !va->t) return kn_cpu_fill_elems(y, 0, kn_tensor_count(y), zero_elem(y->dtype)) ? KILN_OK : KN_OOM();
    if (va->t->dtype != y->dtype || kn_tensor_count(va->t) != 1)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "value does not match the output");
    return kn_cpu_fill_elems(y, 0, kn_tensor_count(y), va->t->data) ? KILN_OK : KN_OOM();
}

/* ------------------------------------------------------------------ Unique */

typedef struct uq_ctx {
    const kn_tensor *x;
    int64_t D, pre, post; /* items are x[p, j, q] for all p, q: the slice j along the axis */
} uq_ctx;

static int cmp_elem(const kn_tensor *x, int64_t a, int64_t b) {
    switch (x->dtype) {
#define CMP(T)                                                                                     \
    {                                                                                              \
        T va = ((const T *)x->data)[a], vb = ((const T *)x->data)[b];                              \
        return va < vb ? -1 : va > vb ? 1 : 0;                                                     \
    }
    case KILN_DTYPE_INT8: CMP(int8_t)
    case KILN_DTYPE_INT16: CMP(int16_t)
    case KILN_DTYPE_INT32: CMP(int32_t)
    case KILN_DTYPE_INT64: CMP(int64_t)
    case KILN_DTYPE_UINT8: CMP(uint8_t)
    case KILN_DTYPE_BOOL: CMP(uint8_t)
    case KILN_DTYPE_UINT16: CMP(uint16_t)
    case KILN_DTYPE_UINT32: CMP(uint32_t)
    case KILN_DTYPE_UINT64: CMP(uint64_t)
#undef CMP
    case KILN_DTYPE_STRING: {
        const char *sa = ((char *const *)x->data)[a], *sb = ((char *const *)x->data)[b];
        int r = strcmp(sa ? sa : "", sb ? sb : "");
        return r < 0 ? -1 : r > 0;
    }
    default: {
        double va = kn_tensor_get_f64(x, a), vb = kn_tensor_get_f64(x, b);
        if (va != va || vb != vb) return (va != va) - (vb != vb); /* NaN last, all NaN equal */
        return va < vb ? -1 : va > vb ? 1 : 0;
    }
    }
}

static int cmp_items(const uq_ctx *u, int64_t a, int64_t b) {
    for (int64_t p = 0; p < u->pre; p++)
        for (int64_t q = 0; q < u->post; q++) {
            int r = cmp_elem(u->x, (p * u->D + a) * u->post + q, (p * u->D + b) * u->post + q);
            if (r) return r;
        }
    return 0;
}

/* Stable merge sort of item ids (ties keep first occurrence first). */
static void msort(const uq_ctx *u, int64_t *v, int64_t *tmp, int64_t n) {
    if (n < 2) return;
    int64_t h = n / 2;
    msort(u, v, tmp, h);
    msort(u, v + h, tmp, n - h);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = cmp_items(u, v[j], v[i]) < 0 ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, sizeof(int64_t) * (size_t)n);
}

static void msort_plain(int64_t *v, int64_t *tmp, int64_t n, const int64_t *key) {
    if (n < 2) return;
    int64_t h = n / 2;
    msort_plain(v, tmp, h, key);
    msort_plain(v + h, tmp, n - h, key);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = key[v[j]] < key[v[i]] ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, sizeof(int64_t) * (size_t)n);
}

kiln_status kn_cpu_unique(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_cpu_tensor_prm local_prm;
    const kn_cpu_tensor_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_cpu_tensor_prepare, &local_prm, (const void **)&prm));
    const kn_attr *aa = prm->axis;
    bool sorted = prm->sorted;
    uq_ctx u = {.x = x, .pre = 1, .post = 1};
    int a = -1;
    if (aa) {
        a = (int)(aa->i < 0 ? aa->i + x->rank : aa->i);
        if (a < 0 || a >= x->rank) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis out of range");
        for (int k = 0; k < a; k++) u.pre *= x->dims[k];
        for (int k = a + 1; k < x->rank; k++) u.post *= x->dims[k];
        u.D = x->dims[a];
    } else {
        u.D = kn_tensor_count(x);
    }
    int64_t D = u.D;
    int64_t *order = malloc(sizeof(int64_t) * (size_t)(4 * D + 1));
    if (!order) return KN_OOM();
    int64_t *tmp = order + D, *group = tmp + D, *first = group + D; /* first: per group, its item */
    for (int64_t i = 0; i < D; i++) order[i] = i;
    msort(&u, order, tmp, D);
    int64_t U = 0;
    for (int64_t i = 0; i < D; i++) {
        if (i == 0 || cmp_items(&u, order[i - 1], order[i])) first[U++] = order[i];
        group[order[i]] = U - 1;
    }
    /* rank[g]: output position of sorted group g */
    int64_t *pos = tmp;
    if (sorted) {
        for (int64_t g = 0; g < U; g++) pos[g] = g;
    } else {
        int64_t *byfirst = order; /* order is no longer needed */
        for (int64_t g = 0; g < U; g++) byfirst[g] = g;
        int64_t *t2 = malloc(sizeof(int64_t) * (size_t)(U + 1));
        if (!t2) {
            free(order);
            return KN_OOM();
        }
        msort_plain(byfirst, t2, U, first);
        free(t2);
        /* byfirst[k] = group at output k; pos = inverse */
        for (int64_t k = 0; k < U; k++) pos[byfirst[k]] = k;
    }
    kiln_status st = KILN_OK;
    int64_t dims[KILN_MAX_RANK];
    int rank = 1;
    if (aa) {
        rank = x->rank;
        memcpy(dims, x->dims, sizeof(int64_t) * (size_t)rank);
        dims[a] = U;
    } else {
        dims[0] = U;
    }
    kn_tensor *y, *yi = NULL, *yinv = NULL, *ycnt = NULL;
    int64_t nd = D;
    st = kn_ctx_output(c, 0, x->dtype, rank, dims, &y);
    if (!st && c->n_outputs > 1 && c->node->outputs[1] >= 0) st = kn_ctx_output(c, 1, KILN_DTYPE_INT64, 1, &U, &yi);
    if (!st && c->n_outputs > 2 && c->node->outputs[2] >= 0) st = kn_ctx_output(c, 2, KILN_DTYPE_INT64, 1, &nd, &yinv);
    if (!st && c->n_outputs > 3 && c->node->outputs[3] >= 0) st = kn_ctx_output(c, 3, KILN_DTYPE_INT64, 1, &U, &ycnt);
    if (st) {
        free(order);
        return st;
    }
    if (ycnt) memset(ycnt->data, 0, sizeof(int64_t) * (size_t)U);
    for (int64_t g = 0; g < U; g++) {
        int64_t k = pos[g], j = first[g];
        for (int64_t p = 0; p < u.pre; p++)
            if (!kn_cpu_copy_elems(y, (p * U + k) * u.post, x, (p * D + j) * u.post, u.post)) {
                free(order);
                return KN_OOM();
            }
        if (yi) ((int64_t *)yi->data)[k] = j;
    }
    for (int64_t i = 0; i < D; i++) {
        int64_t k = pos[group[i]];
        if (yinv) ((int64_t *)yinv->data)[i] = k;
        if (ycnt) ((int64_t *)ycnt->data)[k]++;
    }
    free(order);
    return KILN_OK;
}

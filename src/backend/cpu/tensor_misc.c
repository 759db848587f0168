/* CPU kernels of the tensor family that compute values: Range, CumSum/CumProd, Trilu, EyeLike,
 * ConstantOfShape, Unique. */
#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/tensor_kernels.h"
#include "util/thread_buffer.h"

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

/* The input as [pre, D, post] (D along the axis). Work is split across the pool: rows of the last
 * axis (post == 1) in groups of CUM_GROUP, else column blocks (blk elements, at least CUM_BLK) of
 * each of the pre slices. Every chain of running values stays on one thread in its order, so each output is
 * the same operation on the same operands at any thread count. (It all ran on the calling thread:
 * CumSum 64x1024 f16 at 16 threads took 1.6x OpenVINO's time on the 16-core host.) */
#define CUM_GROUP 4
/* a block of columns at least this wide: the float16 rows are converted a block at a time, and 64
 * columns (64x1024 over axis 0, 1 thread) took 1.6x the time of whole rows */
#define CUM_BLK 256

typedef struct cum_job {
    const void *x;
    void *y;
    kiln_dtype dt;
    int64_t pre, D, post, blk, nblk;
    bool excl, rev, prod;
    int failed; /* atomic: a thread's float rows could not be allocated */
} cum_job;

/* Columns [q0, q1) of slices [p0, p1): each output row is the previous output row combined with an
 * input row (exclusive: the previous input row), so the inner loop is contiguous. */
#define CUM_LOOP(T, ONE, OP)                                                                       \
    do {                                                                                           \
        const T *xp = j->x;                                                                        \
        T *yp = j->y;                                                                              \
        for (int64_t p = p0; p < p1; p++)                                                          \
            for (int64_t t = 0; t < D; t++) {                                                      \
                int64_t i = rev ? D - 1 - t : t, prev = rev ? i + 1 : i - 1;                       \
                T *yr = yp + (p * D + i) * post;                                                   \
                const T *xr = xp + (p * D + (excl ? prev : i)) * post;                             \
                const T *yprev = yp + (p * D + prev) * post;                                       \
                if (t == 0) {                                                                      \
                    for (int64_t q = q0; q < q1; q++) yr[q] = excl ? (T)(ONE) : xr[q];             \
                } else {                                                                           \
                    for (int64_t q = q0; q < q1; q++) yr[q] = (T)(yprev[q] OP xr[q]);              \
                }                                                                                  \
            }                                                                                      \
    } while (0)

/* Along the last axis (post == 1), rows [p0, p1): the running value in a register, four rows at a
 * time. Each output is the same operation on the same operands as CUM_LOOP's (the first inclusive
 * output is the input itself, the first exclusive one the identity), but CUM_LOOP read each
 * previous output back from memory: a store-to-load forwarding in every step of the chain, 16% of
 * CumSum 1x4096's time on the add and 46% on the store in perf. */
#define CUM_ROWS(T, ONE, OP)                                                                       \
    do {                                                                                           \
        const T *xp = j->x;                                                                        \
        T *yp = j->y;                                                                              \
        const int64_t i0 = rev ? D - 1 : 0, step = rev ? -1 : 1;                                   \
        int64_t p = p0;                                                                            \
        for (; p + 4 <= p1; p += 4) {                                                              \
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
        for (; p < p1; p++) {                                                                      \
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
 * 4096 ones summed to 2048). Widened and narrowed by the vector conversions inside the parallel
 * loop, into the thread's buffer: along the last axis CUM_GROUP whole rows at once, their running
 * sums interleaved (one row at a time waited on the add's latency at every element), otherwise one
 * row of the block's columns a step. */
static kn_thread_buffer cum_half_buffer = KN_THREAD_BUFFER_INIT;

/* G rows of D floats at rows, D apart, in place (G a constant at each call: the running values stay
 * in registers) */
static inline __attribute__((always_inline)) void cum_float_rows(float *rows, int64_t D, const int G, bool excl,
                                                                 bool rev, bool prod) {
    const float one = prod ? 1.0f : 0.0f;
    float acc[CUM_GROUP];
    for (int r = 0; r < G; r++) acc[r] = one;
    for (int64_t t = 0; t < D; t++) {
        const int64_t i = rev ? D - 1 - t : t;
        for (int r = 0; r < G; r++) {
            const float v = rows[r * D + i];
            if (excl) rows[r * D + i] = acc[r];
            /* the first inclusive output is the input itself (a -0 stays -0, as in float) */
            acc[r] = t == 0 && !excl ? v : prod ? acc[r] * v : acc[r] + v;
            if (!excl) rows[r * D + i] = acc[r];
        }
    }
}

static void cum_half_range(cum_job *j, int64_t p0, int64_t p1, int64_t q0, int64_t q1) {
    const kiln_dtype dt = j->dt;
    const int64_t D = j->D, post = j->post;
    const bool excl = j->excl, rev = j->rev, prod = j->prod;
    const float one = prod ? 1.0f : 0.0f;
    const uint16_t *xp = j->x;
    uint16_t *yp = j->y;
    float *buf = kn_thread_buffer_get(&cum_half_buffer, sizeof(float) * (size_t)(post == 1 ? CUM_GROUP * D : 2 * (q1 - q0)));
    if (!buf) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    if (post == 1) {
        for (int64_t p = p0; p < p1; p += CUM_GROUP) {
            const int64_t g = p1 - p < CUM_GROUP ? p1 - p : CUM_GROUP;
            kn_ew_half_to_f32(dt, xp + p * D, buf, g * D);
            /* the flags as constants in each copy: no test per element */
#define CUM_FLOAT_ROWS(rows, G)                                                                    \
    do {                                                                                           \
        if (excl) {                                                                                \
            if (prod) cum_float_rows(rows, D, G, true, rev, true);                                 \
            else cum_float_rows(rows, D, G, true, rev, false);                                     \
        } else {                                                                                   \
            if (prod) cum_float_rows(rows, D, G, false, rev, true);                                \
            else cum_float_rows(rows, D, G, false, rev, false);                                    \
        }                                                                                          \
    } while (0)
            if (g == CUM_GROUP) CUM_FLOAT_ROWS(buf, CUM_GROUP);
            else
                for (int64_t r = 0; r < g; r++) CUM_FLOAT_ROWS(buf + r * D, 1);
#undef CUM_FLOAT_ROWS
            kn_ew_f32_to_half(dt, buf, yp + p * D, g * D);
        }
        return;
    }
    const int64_t w = q1 - q0;
    float *acc = buf, *xr = buf + w;
    for (int64_t p = p0; p < p1; p++)
        for (int64_t t = 0; t < D; t++) {
            const int64_t i = rev ? D - 1 - t : t;
            const size_t at = (size_t)((p * D + i) * post + q0);
            kn_ew_half_to_f32(dt, xp + at, xr, w);
            if (excl) {
                if (t == 0)
                    for (int64_t q = 0; q < w; q++) acc[q] = one;
                kn_ew_f32_to_half(dt, acc, yp + at, w);
            }
            if (t == 0 && !excl) memcpy(acc, xr, (size_t)w * sizeof *acc);
            else if (prod)
                for (int64_t q = 0; q < w; q++) acc[q] *= xr[q];
            else
                for (int64_t q = 0; q < w; q++) acc[q] += xr[q];
            if (!excl) kn_ew_f32_to_half(dt, acc, yp + at, w);
        }
}

/* Units [b, e): along the last axis groups of CUM_GROUP rows, else (slice, column block) pairs. */
static void cum_range(void *arg, int64_t b, int64_t e) {
    cum_job *j = arg;
    const int64_t D = j->D, post = j->post;
    const bool excl = j->excl, rev = j->rev, prod = j->prod;
    for (int64_t u = b; u < e; u++) {
        int64_t p0, p1, q0 = 0, q1 = 1;
        if (post == 1) {
            p0 = u * CUM_GROUP;
            p1 = p0 + CUM_GROUP < j->pre ? p0 + CUM_GROUP : j->pre;
            /* consecutive groups: one call over all of them (the rows' loop takes them four at a time) */
            while (u + 1 < e && p1 < j->pre) {
                u++;
                p1 = p1 + CUM_GROUP < j->pre ? p1 + CUM_GROUP : j->pre;
            }
        } else {
            p0 = u / j->nblk;
            p1 = p0 + 1;
            q0 = u % j->nblk * j->blk;
            q1 = q0 + j->blk < post ? q0 + j->blk : post;
        }
        switch (j->dt) {
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
        case KILN_DTYPE_BFLOAT16: cum_half_range(j, p0, p1, q0, q1); break;
        default: break;
        }
    }
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
    case KILN_DTYPE_FLOAT: case KILN_DTYPE_DOUBLE: case KILN_DTYPE_INT8: case KILN_DTYPE_INT16:
    case KILN_DTYPE_INT32: case KILN_DTYPE_INT64: case KILN_DTYPE_UINT8: case KILN_DTYPE_UINT16:
    case KILN_DTYPE_UINT32: case KILN_DTYPE_UINT64: case KILN_DTYPE_FLOAT16: case KILN_DTYPE_BFLOAT16: break;
    default: return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s", kiln_dtype_name(x->dtype));
    }
    /* column blocks: whole rows where the slices give every thread that takes part two units, else
     * split, down to CUM_BLK (threads that take part: a light grain of elements each) */
    const int64_t threads = kn_threadpool_size(c->pool), light = kn_parallel_grain_light(c->pool, KN_EW_GRAIN_LIGHT);
    const int64_t elems = pre * D * post, parts = elems / light < threads ? elems / light : threads;
    const int64_t split = post == 1 || parts <= 1 || pre >= 2 * parts ? 1 : (2 * parts + pre - 1) / pre;
    int64_t blk = (post + split - 1) / split;
    blk = blk < CUM_BLK ? CUM_BLK : (blk + 15) / 16 * 16;
    if (blk > post) blk = post;
    cum_job j = {x->data, y->data, x->dtype, pre, D, post, blk, (post + blk - 1) / blk, excl, rev, prod, 0};
    /* along the last axis a chain of running values waits on its operation's latency at each element,
     * not on memory: a unit is worth a thread from about 4096 elements (a microsecond or two), where
     * the light grain of the memory-bound loops (16384 at 16 threads) left 64x1024 on 4 of 16
     * threads; the column blocks run their rows side by side, a memory-bound loop (light grain) */
    const int64_t unit = post == 1 ? CUM_GROUP * D : D * blk;
    const int64_t units = post == 1 ? (pre + CUM_GROUP - 1) / CUM_GROUP : pre * j.nblk;
    const int64_t min_elems = post == 1 ? 4096 : light;
    const int64_t grain = unit >= min_elems ? 1 : min_elems / unit;
    kn_parallel_for(c->pool, units, grain, cum_range, &j);
    return j.failed ? KN_OOM() : KILN_OK;
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

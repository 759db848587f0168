/* Resize and Upsample on the CPU.
 *
 * Resize is separable: the N-D result is a 1-D resize along each resized axis in turn, so each
 * axis gets a table of taps (first source index, weights) computed once, and one pass per axis
 * applies it to rows. The taps follow the ONNX reference exactly: the source coordinate x of
 * output index y comes from the coordinate transformation in double precision; the n taps are
 * the n source indices nearest to x (ties to the smaller), clamped to the input (edge padding);
 * linear/cubic weights depend on the fraction of x, widened by 1/scale when antialiasing a
 * downscale. Nearest mode needs no arithmetic: it gathers one source element per output
 * element, for any element type. Linear and cubic modes run in float for float, float16 and
 * bfloat16 inputs and in double for double and integers (rounded half to even and saturated at
 * the end, as the reference). */
#include "backend/cpu/image_impl.h"

#include "backend/cpu/elementwise_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__SSE2__)
#include <immintrin.h>
#endif

/* ------------------------------------------------------------------ storing */

void kn_cpu_image_store(kn_tensor *t, int64_t i, double v) {
#define SAT(type, lo, hi)                                                                          \
    do {                                                                                           \
        double r = nearbyint(v);                                                                   \
        if (isnan(r)) r = 0;                                                                       \
        ((type *)t->data)[i] = r <= (double)(lo) ? (lo) : r >= (double)(hi) ? (hi) : (type)r;      \
    } while (0)
    switch (t->dtype) {
    case KILN_DTYPE_INT8: SAT(int8_t, INT8_MIN, INT8_MAX); break;
    case KILN_DTYPE_INT16: SAT(int16_t, INT16_MIN, INT16_MAX); break;
    case KILN_DTYPE_INT32: SAT(int32_t, INT32_MIN, INT32_MAX); break;
    case KILN_DTYPE_INT64: SAT(int64_t, INT64_MIN, INT64_MAX); break;
    case KILN_DTYPE_UINT8: SAT(uint8_t, 0, UINT8_MAX); break;
    case KILN_DTYPE_UINT16: SAT(uint16_t, 0, UINT16_MAX); break;
    case KILN_DTYPE_UINT32: SAT(uint32_t, 0, UINT32_MAX); break;
    case KILN_DTYPE_UINT64: SAT(uint64_t, 0, UINT64_MAX); break;
    default: kn_tensor_set_f64(t, i, v); break;
    }
#undef SAT
}

/* ------------------------------------------------------------------ taps */

typedef struct axis_taps {
    int axis;
    int64_t in, out;
    int n;            /* taps per output index */
    int64_t *start;   /* [out] first source index (before clamping) */
    double *w;        /* [out * n] */
    uint8_t *extrap;  /* [out]: the output takes extrapolation_value (tf_crop_and_resize) */
    int64_t *nearest; /* [out] nearest mode: the source index */
} axis_taps;

/* The source coordinate of output index y along axis a (the reference's formulas, in double). */
static double source_coord(const kn_resize_plan *p, int a, int64_t y, int *extrap) {
    double in = (double)p->in_dims[a], s = p->scale[a], ow = s * in, yd = (double)y;
    *extrap = 0;
    switch (p->coord) {
    case KN_COORD_ALIGN_CORNERS: return ow == 1 ? 0.0 : yd * (in - 1) / (ow - 1);
    case KN_COORD_ASYMMETRIC: return yd / s;
    case KN_COORD_TF_HALF_PIXEL_FOR_NN: return (yd + 0.5) / s;
    case KN_COORD_PYTORCH_HALF_PIXEL: return ow == 1 ? -0.5 : (yd + 0.5) / s - 0.5;
    case KN_COORD_HALF_PIXEL_SYMMETRIC: {
        double adjustment = (double)p->out_dims[a] / ow, center = in / 2;
        return center * (1 - adjustment) + (yd + 0.5) / s - 0.5;
    }
    case KN_COORD_TF_CROP_AND_RESIZE: {
        double r0 = p->roi_start[a], r1 = p->roi_end[a], x;
        if (ow == 1) x = (r1 - r0) * (in - 1) / 2;
        else x = yd * (r1 - r0) * (in - 1) / (ow - 1);
        x += r0 * (in - 1);
        *extrap = x < 0 || x > in - 1;
        return x;
    }
    case KN_COORD_HALF_PIXEL:
    default: return (yd + 0.5) / s - 0.5;
    }
}

static double cubic_kernel(double x, double A) {
    x = fabs(x);
    if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0;
}

/* Taps per output and the first tap's offset in the antialiased kernels. */
static int tap_count(const kn_resize_plan *p, double s, int *first) {
    *first = 0;
    if (p->mode == KN_RESIZE_NEAREST) return 2;
    bool aa = p->antialias;
    double ss = s < 1 ? s : 1;
    if (p->mode == KN_RESIZE_LINEAR) {
        if (!aa) return 2;
        *first = (int)floor(-1 / ss) + 1;
    } else {
        if (!aa) return 4;
        *first = (int)floor(-2 / ss) + 1;
    }
    return 2 - 2 * *first;
}

static void tap_weights(const kn_resize_plan *p, double s, double r, int n, int first, double *w) {
    if (p->mode == KN_RESIZE_LINEAR && !p->antialias) {
        w[0] = 1 - r;
        w[1] = r;
        return;
    }
    if (p->mode == KN_RESIZE_CUBIC && !p->antialias) {
        double A = p->cubic_a;
        w[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
        w[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
        w[2] = ((A + 2) * (1 - r) - (A + 3)) * (1 - r) * (1 - r) + 1;
        w[3] = ((A * ((1 - r) + 1) - 5 * A) * ((1 - r) + 1) + 8 * A) * ((1 - r) + 1) - 4 * A;
        return;
    }
    double ss = s < 1 ? s : 1, sum = 0;
    for (int k = 0; k < n; k++) {
        double d = ((double)(first + k) - r) * ss;
        double v = p->mode == KN_RESIZE_LINEAR ? fmin(fmax(1 - fabs(d), 0), 1) : cubic_kernel(d, p->cubic_a);
        w[k] = v;
        sum += v;
    }
    for (int k = 0; k < n; k++) w[k] /= sum;
}

static void taps_free(axis_taps *t) {
    free(t->start);
    free(t->w);
    free(t->extrap);
    free(t->nearest);
    memset(t, 0, sizeof *t);
}

static kiln_status taps_make(const kn_resize_plan *p, int a, axis_taps *t) {
    memset(t, 0, sizeof *t);
    t->axis = a;
    t->in = p->in_dims[a];
    t->out = p->out_dims[a];
    double s = p->scale[a];
    int first;
    t->n = tap_count(p, s, &first);
    size_t m = (size_t)(t->out > 0 ? t->out : 1);
    t->extrap = calloc(m, 1);
    if (p->mode == KN_RESIZE_NEAREST) t->nearest = malloc(m * sizeof *t->nearest);
    else {
        t->start = malloc(m * sizeof *t->start);
        t->w = malloc(m * (size_t)t->n * sizeof *t->w);
    }
    if (!t->extrap || (p->mode == KN_RESIZE_NEAREST ? !t->nearest : (!t->start || !t->w))) {
        taps_free(t);
        return KN_OOM();
    }
    int64_t last = t->in - 1;
    for (int64_t y = 0; y < t->out; y++) {
        int ex;
        double x = source_coord(p, a, y, &ex);
        t->extrap[y] = (uint8_t)ex;
        double fl = floor(x), frac = x - fl;
        int64_t ifl = (int64_t)fl;
        if (p->mode == KN_RESIZE_NEAREST) {
            int64_t idx;
            if (frac == 0) idx = ifl;
            else switch (p->nearest) {
                case KN_NEAREST_ROUND_PREFER_FLOOR: idx = frac <= 0.5 ? ifl : ifl + 1; break;
                case KN_NEAREST_ROUND_PREFER_CEIL: idx = frac < 0.5 ? ifl : ifl + 1; break;
                case KN_NEAREST_FLOOR: idx = ifl; break;
                case KN_NEAREST_CEIL: idx = ifl + 1; break;
                case KN_NEAREST_SIMPLE:
                default: idx = s < 1 ? ifl + 1 : (int64_t)trunc(x); break;
                }
            t->nearest[y] = idx < 0 ? 0 : idx > last ? last : idx;
            continue;
        }
        /* the n nearest indices, ties to the smaller: an integer x takes the window ending at x */
        double r = frac == 0 ? 1.0 : frac;
        int64_t start = frac == 0 ? ifl - t->n / 2 : ifl - t->n / 2 + 1;
        t->start[y] = start;
        double *w = t->w + (size_t)y * (size_t)t->n;
        tap_weights(p, s, r, t->n, first, w);
        if (p->exclude_outside) {
            double sum = 0;
            for (int k = 0; k < t->n; k++) {
                int64_t j = start + k;
                if (j < 0 || j > last) w[k] = 0;
                sum += w[k];
            }
            if (sum != 0)
                for (int k = 0; k < t->n; k++) w[k] /= sum;
        }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ linear / cubic passes */

typedef struct pass_args {
    const void *src;
    void *dst;
    int64_t in, out, inner; /* src is [outer, in, inner], dst [outer, out, inner] */
    const axis_taps *t;
    const void *wt; /* weights in the working type */
    double extrap;
} pass_args;

/* Rows of the output along a non-last axis: each output row is a weighted sum of whole input
 * rows (contiguous, so the inner loops vectorise). */
#define DEFINE_PASS_ROWS(T, NAME)                                                                  \
    static void NAME(void *arg, int64_t begin, int64_t end) {                                     \
        const pass_args *a = arg;                                                                  \
        const T *src = a->src;                                                                     \
        T *dst = a->dst;                                                                           \
        const T *wt = a->wt;                                                                       \
        const axis_taps *t = a->t;                                                                 \
        int n = t->n;                                                                              \
        int64_t inner = a->inner, last = a->in - 1;                                                \
        for (int64_t row = begin; row < end; row++) {                                              \
            int64_t o = row / a->out, y = row % a->out;                                            \
            T *restrict d = dst + row * inner;                                                     \
            if (t->extrap[y]) {                                                                    \
                for (int64_t i = 0; i < inner; i++) d[i] = (T)a->extrap;                           \
                continue;                                                                          \
            }                                                                                      \
            const T *base = src + o * a->in * inner;                                               \
            const T *w = wt + (size_t)y * (size_t)n;                                               \
            int64_t s0 = t->start[y];                                                              \
            if (n == 2) {                                                                          \
                int64_t j0 = s0 < 0 ? 0 : s0 > last ? last : s0, j1 = s0 + 1 > last ? last : s0 + 1; \
                if (j1 < 0) j1 = 0;                                                                \
                const T *restrict p0 = base + j0 * inner, *restrict p1 = base + j1 * inner;        \
                T w0 = w[0], w1 = w[1];                                                            \
                for (int64_t i = 0; i < inner; i++) d[i] = w0 * p0[i] + w1 * p1[i];                \
                continue;                                                                          \
            }                                                                                      \
            for (int64_t i = 0; i < inner; i++) d[i] = 0;                                          \
            for (int k = 0; k < n; k++) {                                                          \
                if (w[k] == 0) continue;                                                           \
                int64_t j = s0 + k;                                                                \
                j = j < 0 ? 0 : j > last ? last : j;                                               \
                const T *restrict sp = base + j * inner;                                           \
                T wk = w[k];                                                                       \
                for (int64_t i = 0; i < inner; i++) d[i] += wk * sp[i];                            \
            }                                                                                      \
        }                                                                                          \
    }

/* Whole lines along the last axis: each output element is a short dot product. */
#define DEFINE_PASS_LINES(T, NAME)                                                                 \
    static void NAME(void *arg, int64_t begin, int64_t end) {                                     \
        const pass_args *a = arg;                                                                  \
        const T *wt = a->wt;                                                                       \
        const axis_taps *t = a->t;                                                                 \
        int n = t->n;                                                                              \
        int64_t last = a->in - 1;                                                                  \
        for (int64_t o = begin; o < end; o++) {                                                    \
            const T *base = (const T *)a->src + o * a->in;                                         \
            T *d = (T *)a->dst + o * a->out;                                                       \
            for (int64_t y = 0; y < a->out; y++) {                                                 \
                const T *w = wt + (size_t)y * (size_t)n;                                           \
                int64_t s0 = t->start[y];                                                          \
                T acc = 0;                                                                         \
                if (s0 >= 0 && s0 + n - 1 <= last) {                                               \
                    for (int k = 0; k < n; k++) acc += w[k] * base[s0 + k];                        \
                } else {                                                                           \
                    for (int k = 0; k < n; k++) {                                                  \
                        int64_t j = s0 + k;                                                        \
                        j = j < 0 ? 0 : j > last ? last : j;                                       \
                        acc += w[k] * base[j];                                                     \
                    }                                                                              \
                }                                                                                  \
                d[y] = t->extrap[y] ? (T)a->extrap : acc;                                          \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_PASS_ROWS(float, rows_f32)
DEFINE_PASS_ROWS(double, rows_f64)
DEFINE_PASS_LINES(float, lines_f32)
DEFINE_PASS_LINES(double, lines_f64)

/* An axis the resize leaves as it is. */
static bool axis_is_identity(const kn_resize_plan *p, int a) {
    if (p->out_dims[a] != p->in_dims[a] || fabs(p->scale[a] - 1.0) > 1e-9) return false;
    if (p->coord == KN_COORD_TF_CROP_AND_RESIZE)
        return fabs(p->roi_start[a]) <= 1e-9 && fabs(p->roi_end[a] - 1.0) <= 1e-9;
    return true;
}

static kiln_status resize_interp(kn_kernel_ctx *c, const kn_resize_plan *p, const kn_tensor *x, kn_tensor *y) {
    bool use_f32 = x->dtype == KILN_DTYPE_FLOAT || x->dtype == KILN_DTYPE_FLOAT16 || x->dtype == KILN_DTYPE_BFLOAT16;
    size_t es = use_f32 ? sizeof(float) : sizeof(double);
    kiln_dtype wdt = use_f32 ? KILN_DTYPE_FLOAT : KILN_DTYPE_DOUBLE;
    int rank = p->rank;
    /* the axes to process, in the order that touches the fewest elements (tried exhaustively
     * for up to 4 axes): a pass costs its output size times its taps, and a pass along the last
     * axis (a dot product per element, no vectorisation over rows) counts three times */
    int order[KILN_MAX_RANK], n_ax = 0;
    for (int a = 0; a < rank; a++)
        if (!axis_is_identity(p, a)) order[n_ax++] = a;
    if (n_ax >= 2 && n_ax <= 4) {
        int perm[4], best[4];
        double best_cost = -1;
        for (int i = 0; i < n_ax; i++) perm[i] = i;
        for (;;) {
            double dims_d[KILN_MAX_RANK], cost = 0;
            for (int a = 0; a < rank; a++) dims_d[a] = (double)p->in_dims[a];
            for (int i = 0; i < n_ax; i++) {
                int a = order[perm[i]], first;
                dims_d[a] = (double)p->out_dims[a];
                double cnt = 1;
                for (int k = 0; k < rank; k++) cnt *= dims_d[k];
                cost += cnt * (double)tap_count(p, p->scale[a], &first) * (a == rank - 1 ? 3.0 : 1.0);
            }
            if (best_cost < 0 || cost < best_cost) {
                best_cost = cost;
                memcpy(best, perm, sizeof perm);
            }
            /* next permutation */
            int i = n_ax - 2;
            while (i >= 0 && perm[i] > perm[i + 1]) i--;
            if (i < 0) break;
            int j = n_ax - 1;
            while (perm[j] < perm[i]) j--;
            int tmpv = perm[i];
            perm[i] = perm[j], perm[j] = tmpv;
            for (int l = i + 1, r = n_ax - 1; l < r; l++, r--) tmpv = perm[l], perm[l] = perm[r], perm[r] = tmpv;
        }
        int sorted[4];
        for (int i = 0; i < n_ax; i++) sorted[i] = order[best[i]];
        memcpy(order, sorted, sizeof(int) * (size_t)n_ax);
    }
    int64_t n_in = kn_tensor_count(x), n_out = kn_tensor_count(y);
    void *cur = NULL, *tmp = NULL;
    kiln_status st = KILN_OK;
    /* the input in the working type (the input itself when it already is) */
    if (x->dtype == wdt) cur = x->data;
    else {
        tmp = malloc((size_t)(n_in ? n_in : 1) * es);
        if (!tmp) return KN_OOM();
        if (kn_ew_is_half(x->dtype)) kn_ew_half_to_f32(x->dtype, x->data, tmp, n_in);
        else
            for (int64_t i = 0; i < n_in; i++) {
                double v = kn_tensor_get_f64(x, i);
                if (use_f32) ((float *)tmp)[i] = (float)v;
                else ((double *)tmp)[i] = v;
            }
        cur = tmp;
    }
    int64_t dims[KILN_MAX_RANK];
    for (int a = 0; a < rank; a++) dims[a] = p->in_dims[a];
    void *owned_cur = tmp; /* which buffer `cur` is, when it is ours */
    for (int i = 0; i < n_ax; i++) {
        int a = order[i];
        axis_taps t;
        if ((st = taps_make(p, a, &t)) != KILN_OK) break;
        int64_t outer = 1, inner = 1;
        for (int k = 0; k < a; k++) outer *= dims[k];
        for (int k = a + 1; k < rank; k++) inner *= dims[k];
        int64_t cnt = outer * t.out * inner;
        void *dst;
        if (i == n_ax - 1 && y->dtype == wdt) dst = y->data;
        else {
            dst = malloc((size_t)(cnt ? cnt : 1) * es);
            if (!dst) {
                taps_free(&t);
                st = KN_OOM();
                break;
            }
        }
        void *wt = malloc((size_t)(t.out ? t.out : 1) * (size_t)t.n * es);
        if (!wt) {
            if (dst != y->data) free(dst);
            taps_free(&t);
            st = KN_OOM();
            break;
        }
        for (int64_t k = 0; k < t.out * t.n; k++) {
            if (use_f32) ((float *)wt)[k] = (float)t.w[k];
            else ((double *)wt)[k] = t.w[k];
        }
        pass_args pa = {cur, dst, t.in, t.out, inner, &t, wt, p->extrapolation};
        if (inner == 1) {
            int64_t work = t.out * t.n;
            kn_parallel_for(c->pool, outer, work >= 4096 ? 1 : 4096 / (work ? work : 1) + 1,
                            use_f32 ? lines_f32 : lines_f64, &pa);
        } else {
            int64_t work = inner * t.n;
            kn_parallel_for(c->pool, outer * t.out, work >= 4096 ? 1 : 4096 / work + 1,
                            use_f32 ? rows_f32 : rows_f64, &pa);
        }
        free(wt);
        taps_free(&t);
        if (owned_cur) free(owned_cur);
        cur = dst;
        owned_cur = dst == y->data ? NULL : dst;
        dims[a] = p->out_dims[a];
    }
    if (st == KILN_OK && cur != y->data) {
        /* convert (or copy, when no axis changed) into the output */
        if (y->dtype == wdt) memcpy(y->data, cur, (size_t)n_out * es);
        else if (use_f32 && kn_ew_is_half(y->dtype)) kn_ew_f32_to_half(y->dtype, cur, y->data, n_out);
        else
            for (int64_t i = 0; i < n_out; i++)
                kn_cpu_image_store(y, i, use_f32 ? (double)((float *)cur)[i] : ((double *)cur)[i]);
    }
    if (owned_cur) free(owned_cur);
    return st;
}

/* ------------------------------------------------------------------ bilinear over the last two axes
 *
 * Float linear resizes of the last two axes only (NCHW upsampling and downsampling, without
 * antialiasing): each output row blends two horizontally interpolated source rows, which are
 * computed once per source row and kept (two slots: an x2 upsample reuses each for two or three
 * output rows), so there is no intermediate tensor and no second pass over memory. The taps are
 * the separable passes' (taps_make: the reference's coordinates in double), the weights rounded
 * to float as there. float16 and bfloat16 take the same float computation: each source row is
 * widened into a float row when read (kn_ew_half_to_f32), each output row computed in float and
 * rounded once (the float result rounded to the type, as ONNX Runtime's, which casts around a
 * float16 Resize; the separable passes converted element by element through double: 6x its time). */

typedef struct bil_job {
    const void *x;
    void *y;
    kiln_dtype dt; /* FLOAT, FLOAT16 or BFLOAT16 (x's and y's) */
    int64_t H, W, OH, OW, bands;
    bool vfirst; /* fewer output rows than input rows: blend the two source rows first, then
                    interpolate that one row (half the gathers of two horizontal rows) */
    const int32_t *hi0, *hi1, *wi0, *wi1; /* source rows per output row, columns per output column */
    const float *hw0, *hw1, *ww0, *ww1;
    int failed;
} bil_job;

static void bil_hrow(const bil_job *j, const float *src, float *dst) {
    int64_t o = 0;
#if defined(__AVX512F__)
    for (; o + 16 <= j->OW; o += 16) {
        const __m512 a = _mm512_i32gather_ps(_mm512_loadu_si512(j->wi0 + o), src, 4);
        const __m512 b = _mm512_i32gather_ps(_mm512_loadu_si512(j->wi1 + o), src, 4);
        _mm512_storeu_ps(dst + o, _mm512_fmadd_ps(_mm512_loadu_ps(j->ww0 + o), a,
                                                  _mm512_mul_ps(_mm512_loadu_ps(j->ww1 + o), b)));
    }
#endif
    for (; o < j->OW; o++) dst[o] = j->ww0[o] * src[j->wi0[o]] + j->ww1[o] * src[j->wi1[o]];
}

/* Source row r of the plane at xp as floats: the row itself, or widened into cvt. */
static const float *bil_src(const bil_job *j, const void *xp, int64_t r, float *cvt) {
    if (j->dt == KILN_DTYPE_FLOAT) return (const float *)xp + r * j->W;
    kn_ew_half_to_f32(j->dt, (const uint16_t *)xp + r * j->W, cvt, j->W);
    return cvt;
}

static void bil_range(void *arg, int64_t begin, int64_t end) {
    bil_job *j = arg;
    const int64_t OW = j->OW;
    const int64_t row = OW > j->W ? OW : j->W;
    const bool half = j->dt != KILN_DTYPE_FLOAT;
    /* two slots; for a half type also two widened source rows and the output row in float */
    float *buf = malloc(sizeof(float) * (size_t)((half ? 5 : 2) * (row + 16)));
    if (!buf) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *slot[2] = {buf, buf + row + 16}, *cvt[2] = {buf + 2 * (row + 16), buf + 3 * (row + 16)};
    float *yf = buf + 4 * (row + 16);
    const size_t es = half ? 2 : 4;
    for (int64_t t = begin; t < end; t++) {
        const int64_t plane = t / j->bands, band = t % j->bands;
        const void *xp = (const char *)j->x + (size_t)(plane * j->H * j->W) * es;
        char *yp = (char *)j->y + (size_t)(plane * j->OH * OW) * es;
        int64_t id[2] = {-1, -1}; /* the source row each slot holds */
        for (int64_t oh = band * j->OH / j->bands; oh < (band + 1) * j->OH / j->bands; oh++) {
            const int64_t r0 = j->hi0[oh], r1 = j->hi1[oh];
            float *yr = half ? yf : (float *)yp + oh * OW;
            if (j->vfirst) {
                const float *a = bil_src(j, xp, r0, cvt[0]), *b = bil_src(j, xp, r1, cvt[1]);
                const float w0 = j->hw0[oh], w1 = j->hw1[oh];
                float *v = slot[0];
                for (int64_t i = 0; i < j->W; i++) v[i] = w0 * a[i] + w1 * b[i];
                bil_hrow(j, v, yr);
            } else {
                int s0 = id[0] == r0 ? 0 : id[1] == r0 ? 1 : -1;
                int s1 = id[0] == r1 ? 0 : id[1] == r1 ? 1 : -1;
                if (s0 < 0) {
                    s0 = s1 == 0 ? 1 : 0;
                    bil_hrow(j, bil_src(j, xp, r0, cvt[0]), slot[s0]);
                    id[s0] = r0;
                    if (r1 == r0) s1 = s0;
                }
                if (s1 < 0) {
                    s1 = s0 == 0 ? 1 : 0;
                    bil_hrow(j, bil_src(j, xp, r1, cvt[0]), slot[s1]);
                    id[s1] = r1;
                }
                const float *p0 = slot[s0], *p1 = slot[s1], w0 = j->hw0[oh], w1 = j->hw1[oh];
                for (int64_t o = 0; o < OW; o++) yr[o] = w0 * p0[o] + w1 * p1[o];
            }
            if (half) kn_ew_f32_to_half(j->dt, yf, (uint16_t *)(void *)yp + oh * OW, OW);
        }
    }
    free(buf);
}

/* Runs the bilinear path when it applies; *done says whether it did. */
static kiln_status try_bilinear2d(kn_kernel_ctx *c, const kn_resize_plan *p, const kn_tensor *x, kn_tensor *y,
                                  bool *done) {
    *done = false;
    const int r = p->rank;
    const bool fdt = x->dtype == KILN_DTYPE_FLOAT || x->dtype == KILN_DTYPE_FLOAT16 || x->dtype == KILN_DTYPE_BFLOAT16;
    if (p->mode != KN_RESIZE_LINEAR || p->antialias || r < 2 || !fdt || y->dtype != x->dtype ||
        p->coord == KN_COORD_TF_CROP_AND_RESIZE)
        return KILN_OK;
    for (int a = 0; a < r - 2; a++)
        if (!axis_is_identity(p, a)) return KILN_OK;
    const int64_t H = p->in_dims[r - 2], W = p->in_dims[r - 1], OH = p->out_dims[r - 2], OW = p->out_dims[r - 1];
    if (H <= 0 || W <= 0 || OH <= 0 || OW <= 0 || W > INT32_MAX / 2 || H > INT32_MAX / 2) return KILN_OK;
    axis_taps th, tw;
    kiln_status st = taps_make(p, r - 2, &th);
    if (st) return st;
    if ((st = taps_make(p, r - 1, &tw)) != KILN_OK) {
        taps_free(&th);
        return st;
    }
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)(2 * (OH + OW)));
    float *wts = malloc(sizeof(float) * (size_t)(2 * (OH + OW)));
    bool ok = idx && wts && th.n == 2 && tw.n == 2;
    if (ok) {
        const axis_taps *ts[2] = {&th, &tw};
        const int64_t outs[2] = {OH, OW}, ins[2] = {H, W}, offs[2] = {0, 2 * OH};
        for (int d = 0; d < 2 && ok; d++)
            for (int64_t o = 0; o < outs[d] && ok; o++) {
                ok = !ts[d]->extrap[o];
                const int64_t s0 = ts[d]->start[o], last = ins[d] - 1;
                int64_t j0 = s0 < 0 ? 0 : s0 > last ? last : s0, j1 = s0 + 1 > last ? last : s0 + 1;
                if (j1 < 0) j1 = 0;
                idx[offs[d] + o] = (int32_t)j0;
                idx[offs[d] + outs[d] + o] = (int32_t)j1;
                wts[offs[d] + o] = (float)ts[d]->w[2 * o];
                wts[offs[d] + outs[d] + o] = (float)ts[d]->w[2 * o + 1];
            }
    }
    if (ok) {
        bil_job j = {x->data, y->data, x->dtype, H, W, OH, OW, 1, OH < H, idx, idx + OH, idx + 2 * OH, idx + 2 * OH + OW,
                     wts, wts + OH, wts + 2 * OH, wts + 2 * OH + OW, 0};
        int64_t planes = 1;
        for (int a = 0; a < r - 2; a++) planes *= p->in_dims[a];
        /* few planes (an RGB image): bands of output rows, about 4 tasks per thread */
        const int64_t threads = kn_threadpool_size(c->pool);
        if (planes < 4 * threads) j.bands = (4 * threads + planes - 1) / planes < OH ? (4 * threads + planes - 1) / planes : OH;
        const int64_t work = OH * OW / j.bands + 1;
        kn_parallel_for(c->pool, planes * j.bands, work >= 16384 ? 1 : 16384 / work + 1, bil_range, &j);
        if (j.failed) st = KN_OOM();
        *done = true;
    } else if (!idx || !wts) {
        st = KN_OOM();
    }
    free(idx);
    free(wts);
    taps_free(&th);
    taps_free(&tw);
    return st;
}

/* ------------------------------------------------------------------ nearest: a gather */

typedef struct gather_args {
    const kn_resize_plan *p;
    const axis_taps *t; /* per axis */
    const kn_tensor *x;
    kn_tensor *y;
    size_t es;
    int64_t in_stride[KILN_MAX_RANK];
    const unsigned char *ev; /* the extrapolation value as one element */
    bool doubles;            /* the last axis maps j to j / 2 (an integer x2 upsample): repeat2_row */
    int fail;
} gather_args;

/* out[2i] = out[2i + 1] = in[i], i < n, elements of es bytes (1, 2, 4 or 8): a row of an x2
 * upsample, 16 bytes of input a step (the element-by-element gather was 93% of the time of
 * 1x256x20x20 uint8 x2, 1 thread) */
static void repeat2_row(const unsigned char *in, unsigned char *out, int64_t n, size_t es) {
    int64_t i = 0;
#if defined(__SSE2__)
    const int64_t per = 16 / (int64_t)es;
    for (; i + per <= n; i += per) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(in + i * (int64_t)es));
        __m128i lo, hi;
        switch (es) {
        case 1: lo = _mm_unpacklo_epi8(v, v), hi = _mm_unpackhi_epi8(v, v); break;
        case 2: lo = _mm_unpacklo_epi16(v, v), hi = _mm_unpackhi_epi16(v, v); break;
        case 4: lo = _mm_unpacklo_epi32(v, v), hi = _mm_unpackhi_epi32(v, v); break;
        default: lo = _mm_unpacklo_epi64(v, v), hi = _mm_unpackhi_epi64(v, v); break;
        }
        _mm_storeu_si128((__m128i *)(out + 2 * i * (int64_t)es), lo);
        _mm_storeu_si128((__m128i *)(out + 2 * i * (int64_t)es + 16), hi);
    }
#endif
#define REPEAT2_TAIL(T)                                                                            \
    for (; i < n; i++) ((T *)out)[2 * i] = ((T *)out)[2 * i + 1] = ((const T *)in)[i];
    switch (es) {
    case 1: REPEAT2_TAIL(uint8_t) break;
    case 2: REPEAT2_TAIL(uint16_t) break;
    case 4: REPEAT2_TAIL(uint32_t) break;
    default: REPEAT2_TAIL(uint64_t) break;
    }
#undef REPEAT2_TAIL
}

#define GATHER_ROW(T)                                                                              \
    do {                                                                                           \
        const T *sr = (const T *)src + base;                                                       \
        T *dr = (T *)dst + row * wout;                                                             \
        for (int64_t j = 0; j < wout; j++) dr[j] = sr[idx[j]];                                     \
    } while (0)

static void gather_rows(void *arg, int64_t begin, int64_t end) {
    gather_args *g = arg;
    const kn_resize_plan *p = g->p;
    int rank = p->rank, la = rank - 1;
    int64_t wout = p->out_dims[la];
    const axis_taps *tl = &g->t[la];
    const int64_t *idx = tl->nearest;
    bool str = g->x->dtype == KILN_DTYPE_STRING, may_ex = p->coord == KN_COORD_TF_CROP_AND_RESIZE;
    size_t es = g->es;
    const unsigned char *src = g->x->data;
    unsigned char *dst = g->y->data;
    int64_t prev_base = -1;
    /* the row's output index over the outer axes, counted up from begin's (a division per axis
     * and row was most of the time of a 40-column upsample: 1x256x20x20 x2, uint8, 1 thread) */
    int64_t o_idx[KILN_MAX_RANK] = {0};
    for (int64_t r = begin, a = la - 1; a >= 0; a--) {
        o_idx[a] = r % p->out_dims[a];
        r /= p->out_dims[a];
    }
    for (int64_t row = begin; row < end; row++) {
        if (row > begin)
            for (int a = la - 1; a >= 0; a--) {
                if (++o_idx[a] < p->out_dims[a]) break;
                o_idx[a] = 0;
            }
        int64_t base = 0;
        bool ex = false;
        for (int a = la - 1; a >= 0; a--) {
            const int64_t o = o_idx[a];
            ex |= g->t[a].extrap[o] != 0;
            base += g->t[a].nearest[o] * g->in_stride[a];
        }
        if (!str && !ex && base == prev_base) { /* upsampled rows repeat the row before */
            memcpy(dst + (size_t)(row * wout) * es, dst + (size_t)((row - 1) * wout) * es, (size_t)wout * es);
            continue;
        }
        prev_base = ex ? -1 : base;
        if (!str && !ex && !may_ex) {
            if (g->doubles) {
                repeat2_row(src + (size_t)base * es, dst + (size_t)(row * wout) * es, wout / 2, es);
                continue;
            }
            switch (es) {
            case 1: GATHER_ROW(uint8_t); continue;
            case 2: GATHER_ROW(uint16_t); continue;
            case 4: GATHER_ROW(uint32_t); continue;
            case 8: GATHER_ROW(uint64_t); continue;
            default: break;
            }
        }
        for (int64_t j = 0; j < wout; j++) {
            int64_t di = row * wout + j;
            bool e = ex || tl->extrap[j];
            if (str) {
                const char *sv = e ? "" : ((char *const *)src)[base + idx[j]];
                char *cp = strdup(sv ? sv : "");
                if (!cp) g->fail = 1;
                free(((char **)dst)[di]);
                ((char **)dst)[di] = cp;
            } else if (e) memcpy(dst + (size_t)di * es, g->ev, es);
            else memcpy(dst + (size_t)di * es, src + (size_t)(base + idx[j]) * es, es);
        }
    }
}
#undef GATHER_ROW

static size_t elem_size(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_BOOL: case KILN_DTYPE_INT8: case KILN_DTYPE_UINT8: return 1;
    case KILN_DTYPE_INT16: case KILN_DTYPE_UINT16: case KILN_DTYPE_FLOAT16: case KILN_DTYPE_BFLOAT16: return 2;
    case KILN_DTYPE_INT32: case KILN_DTYPE_UINT32: case KILN_DTYPE_FLOAT: return 4;
    case KILN_DTYPE_INT64: case KILN_DTYPE_UINT64: case KILN_DTYPE_DOUBLE: case KILN_DTYPE_COMPLEX64: return 8;
    case KILN_DTYPE_STRING: return sizeof(char *);
    case KILN_DTYPE_COMPLEX128: return 16;
    default: return 0;
    }
}

static kiln_status resize_nearest(kn_kernel_ctx *c, const kn_resize_plan *p, const kn_tensor *x, kn_tensor *y) {
    size_t es = elem_size(x->dtype);
    if (!es) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s", kiln_dtype_name(x->dtype));
    int rank = p->rank;
    if (rank == 0) return kn_kernel_error(c, KILN_ERR_SHAPE, "input is a scalar; Resize needs rank >= 1");
    axis_taps t[KILN_MAX_RANK];
    memset(t, 0, sizeof t);
    kiln_status st = KILN_OK;
    for (int a = 0; a < rank && st == KILN_OK; a++) st = taps_make(p, a, &t[a]);
    if (st == KILN_OK) {
        unsigned char ev[16] = {0};
        if (x->dtype != KILN_DTYPE_STRING && x->dtype != KILN_DTYPE_COMPLEX64 && x->dtype != KILN_DTYPE_COMPLEX128) {
            kn_tensor one = {0};
            one.dtype = x->dtype;
            one.data = ev;
            kn_cpu_image_store(&one, 0, p->extrapolation);
        }
        gather_args g = {.p = p, .t = t, .x = x, .y = y, .es = es, .ev = ev};
        const int la = rank - 1;
        g.doubles = es <= 8 && x->dtype != KILN_DTYPE_STRING && p->out_dims[la] == 2 * p->in_dims[la];
        for (int64_t j = 0; g.doubles && j < p->out_dims[la]; j++)
            g.doubles = t[la].nearest[j] == j / 2 && !t[la].extrap[j];
        int64_t s = 1;
        for (int a = rank - 1; a >= 0; a--) {
            g.in_stride[a] = s;
            s *= p->in_dims[a];
        }
        int64_t wout = p->out_dims[rank - 1];
        int64_t rows = wout ? kn_tensor_count(y) / wout : 0;
        int64_t grain = wout >= 1024 ? 1 : 1024 / (wout ? wout : 1) + 1;
        kn_parallel_for(c->pool, rows, grain, gather_rows, &g);
        if (g.fail) st = KN_OOM();
    }
    for (int a = 0; a < rank; a++) taps_free(&t[a]);
    return st;
}

kiln_status kn_cpu_resize(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_resize_attrs local;
    const kn_resize_attrs *at;
    KN_TRY(kn_ctx_params(c, kn_resize_prepare, &local, (const void **)&at));
    const kn_tensor *roi, *scales, *sizes;
    kn_resize_inputs_of(at->legacy, c->n_inputs, (const kn_tensor *const *)c->in, &roi, &scales, &sizes);
    kn_resize_plan p;
    char why[512];
    kiln_status st = kn_resize_plan_from(at, x->rank, x->dims, roi, scales, sizes, false, &p, why, sizeof why);
    if (st != KILN_OK) return kn_kernel_error(c, st, "%s", why);
    if (p.coord == KN_COORD_TF_CROP_AND_RESIZE && !roi)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "coordinate_transformation_mode tf_crop_and_resize needs 'roi'");
    kn_tensor *y;
    KN_TRY(kn_ctx_output(c, 0, x->dtype, x->rank, p.out_dims, &y));
    if (kn_tensor_count(y) == 0) return KILN_OK;
    if (p.mode == KN_RESIZE_NEAREST) return resize_nearest(c, &p, x, y);
    if (!kn_dtype_is_float(x->dtype) && !kn_dtype_is_int(x->dtype))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "%s interpolation of element type %s",
                               p.mode == KN_RESIZE_LINEAR ? "linear" : "cubic", kiln_dtype_name(x->dtype));
    bool done = false;
    KN_TRY(try_bilinear2d(c, &p, x, y, &done));
    if (done) return KILN_OK;
    return resize_interp(c, &p, x, y);
}

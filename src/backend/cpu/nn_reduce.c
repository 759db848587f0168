/* CPU kernels: Reduce*, ArgMax/ArgMin, TopK.
 *
 * Reductions first drop unit dimensions and merge neighbouring dimensions that are both reduced
 * or both kept. Two layouts then run directly: [outer, n] (reduce contiguous rows) and
 * [outer, n, inner] (accumulate rows of `inner` elements, which vectorises); any other pattern
 * is transposed once into [kept..., reduced...] first. Float, float16 and bfloat16 compute in
 * float, double in double, integers and bool in int64. */
#include "backend/cpu/nn_internal.h"
#include "backend/cpu/vec_math.h"
#include "backend/cpu/elementwise_impl.h"
#include "util/thread_buffer.h"

#include <stdlib.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

enum { RK_SUM, RK_MEAN, RK_MAX, RK_MIN, RK_PROD, RK_L1, RK_L2, RK_LOGSUM, RK_LOGSUMEXP, RK_SUMSQ };

#define T float
#define SUF f32
#define LANES 16
#define EXPF kn_nn_expf
#define IS_INT 0
#define IS_F32 1
#include "backend/cpu/nn_reduce_impl.h"
#undef T
#undef SUF
#undef LANES
#undef EXPF
#undef IS_INT
#undef IS_F32

#define T double
#define SUF f64
#define LANES 8
#define EXPF exp
#define IS_INT 0
#define IS_F32 0
#include "backend/cpu/nn_reduce_impl.h"
#undef T
#undef SUF
#undef LANES
#undef EXPF
#undef IS_INT
#undef IS_F32

#define T int64_t
#define SUF i64
#define LANES 8
#define EXPF exp
#define IS_INT 1
#define IS_F32 0
#include "backend/cpu/nn_reduce_impl.h"
#undef T
#undef SUF
#undef LANES
#undef EXPF
#undef IS_INT
#undef IS_F32

static int reduce_kind(const char *op) {
    static const struct {
        const char *name;
        int kind;
    } kinds[] = {
        {"ReduceSum", RK_SUM},       {"ReduceMean", RK_MEAN},     {"ReduceMax", RK_MAX},
        {"ReduceMin", RK_MIN},       {"ReduceProd", RK_PROD},     {"ReduceL1", RK_L1},
        {"ReduceL2", RK_L2},         {"ReduceLogSum", RK_LOGSUM}, {"ReduceLogSumExp", RK_LOGSUMEXP},
        {"ReduceSumSquare", RK_SUMSQ},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(op, kinds[i].name)) return kinds[i].kind;
    return -1;
}

/* Smallest and largest value of an integer (or bool) dtype. */
static void int_range(kiln_dtype t, int64_t *lo, int64_t *hi) {
    switch (t) {
    case KILN_DTYPE_INT8: *lo = INT8_MIN, *hi = INT8_MAX; break;
    case KILN_DTYPE_INT16: *lo = INT16_MIN, *hi = INT16_MAX; break;
    case KILN_DTYPE_INT32: *lo = INT32_MIN, *hi = INT32_MAX; break;
    case KILN_DTYPE_UINT8: *lo = 0, *hi = UINT8_MAX; break;
    case KILN_DTYPE_UINT16: *lo = 0, *hi = UINT16_MAX; break;
    case KILN_DTYPE_UINT32: *lo = 0, *hi = UINT32_MAX; break;
    case KILN_DTYPE_UINT64: *lo = 0, *hi = -1; break; /* all ones when stored */
    case KILN_DTYPE_BOOL: *lo = 0, *hi = 1; break;
    default: *lo = INT64_MIN, *hi = INT64_MAX; break;
    }
}

/* The result of reducing an empty set, per the ONNX specification (opset 18). */
static void fill_empty(kn_tensor *y, int kind) {
    int64_t n = kn_tensor_count(y);
    bool is_float = kn_dtype_is_float(y->dtype);
    int64_t lo, hi;
    int_range(y->dtype, &lo, &hi);
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
        case RK_PROD: kn_tensor_set_i64(y, i, 1); break;
        case RK_MEAN:
            if (is_float) kn_tensor_set_f64(y, i, NAN);
            else kn_tensor_set_i64(y, i, 0);
            break;
        case RK_MAX:
        case RK_LOGSUM:
        case RK_LOGSUMEXP:
            if (is_float) kn_tensor_set_f64(y, i, -INFINITY);
            else kn_tensor_set_i64(y, i, lo);
            break;
        case RK_MIN:
            if (is_float) kn_tensor_set_f64(y, i, INFINITY);
            else kn_tensor_set_i64(y, i, hi);
            break;
        default: kn_tensor_set_i64(y, i, 0); break;
        }
    }
}

/* dst = src permuted: dst dims are dims[perm[k]]. es is 4 or 8 bytes. */
static void permute_copy(const void *src, void *dst, int nd, const int64_t *dims, const int *perm,
                         size_t es) {
    int64_t stride[KILN_MAX_RANK], od[KILN_MAX_RANK], os[KILN_MAX_RANK], idx[KILN_MAX_RANK] = {0};
    int64_t s = 1;
    for (int k = nd - 1; k >= 0; k--) stride[k] = s, s *= dims[k];
    for (int k = 0; k < nd; k++) od[k] = dims[perm[k]], os[k] = stride[perm[k]];
    int64_t total = s, inner = od[nd - 1], istr = os[nd - 1];
    int64_t off = 0;
    for (int64_t o = 0; o < total; o += inner) {
        if (es == 8) {
            const uint64_t *a = (const uint64_t *)src + off;
            uint64_t *b = (uint64_t *)dst + o;
            for (int64_t i = 0; i < inner; i++) b[i] = a[i * istr];
        } else {
            const uint32_t *a = (const uint32_t *)src + off;
            uint32_t *b = (uint32_t *)dst + o;
            for (int64_t i = 0; i < inner; i++) b[i] = a[i * istr];
        }
        for (int k = nd - 2; k >= 0; k--) {
            idx[k]++;
            off += os[k];
            if (idx[k] < od[k]) break;
            off -= os[k] * od[k];
            idx[k] = 0;
        }
    }
}

kiln_status kn_reduce_prepare(const kn_node *n, void *params) {
    kn_reduce_prm *p = params;
    p->kind = reduce_kind(n->op_type);
    p->axes_from_input = kn_nn_reduce_axes_from_input(n);
    kn_nn_reduce_attrs(n, &p->attr);
    return KILN_OK;
}

/* float16 and bfloat16 rows (the reduced dims last: [kept, red]) reduced where they are, each row
 * widened into the thread's scratch inside the parallel loop: converting the whole tensor first, on
 * the calling thread, was 61% of a float16 ReduceMean over 1x128x768 (perf) and wrote and read back
 * 4 bytes an element; it did not scale with threads (0.036 ms at 2 threads, ONNX Runtime 0.029). */
static kn_thread_buffer half_row_buffer = KN_THREAD_BUFFER_INIT;

typedef struct half_rows_job {
    kiln_dtype dtype;
    const uint16_t *x;
    float *y;
    int64_t n;
    int kind;
    int failed; /* atomic */
} half_rows_job;

static void half_rows_range(void *arg, int64_t b, int64_t e) {
    half_rows_job *j = arg;
    float *row = kn_thread_buffer_get(&half_row_buffer, (size_t)j->n * sizeof(float));
    if (!row) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t r = b; r < e; r++) {
        kn_ew_half_to_f32(j->dtype, j->x + r * j->n, row, j->n);
        j->y[r] = row_f32(row, j->n, j->kind);
    }
}

static kiln_status reduce_half_rows(kn_kernel_ctx *c, const kn_tensor *x, kn_tensor *y, int64_t rows, int64_t n,
                                    int kind) {
    float *yf = malloc((size_t)rows * sizeof *yf);
    if (!yf) return KN_OOM();
    half_rows_job j = {x->dtype, x->data, yf, n, kind, 0};
    kn_parallel_for(c->pool, rows, n >= 16384 ? 1 : 16384 / n, half_rows_range, &j);
    if (!j.failed) kn_ew_f32_to_half(y->dtype, yf, y->data, rows);
    free(yf);
    return j.failed ? KN_OOM() : KILN_OK;
}

/* float16 and bfloat16 in the strided form ([outer, n, inner] over n): each unit's block of columns
 * widened row by row into the thread's scratch inside the parallel loop, reduced there as the float
 * form does (same blocks, same order), its results narrowed once. The whole tensor was widened on
 * the calling thread first, as the float16 pools were before b156354. */
typedef struct half_strided_job {
    kiln_dtype dtype;
    const uint16_t *x;
    uint16_t *y;
    int64_t n, inner, nblk, vecs;
    int kind;
    int failed; /* atomic */
} half_strided_job;

static void half_strided_range(void *arg, int64_t b, int64_t e) {
    half_strided_job *j = arg;
    const int64_t n = j->n, inner = j->inner;
    for (int64_t u = b; u < e; u++) {
        const int64_t o = u / j->nblk, bi = u % j->nblk;
        const int64_t i0 = bi * j->vecs / j->nblk * 16;
        int64_t i1 = (bi + 1) * j->vecs / j->nblk * 16;
        if (i1 > inner) i1 = inner;
        const int64_t w = i1 - i0;
        if (w <= 0) continue;
        float *buf = kn_thread_buffer_get(&half_row_buffer, (size_t)((n + 1) * w) * sizeof(float));
        if (!buf) {
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
            return;
        }
        for (int64_t r = 0; r < n; r++) kn_ew_half_to_f32(j->dtype, j->x + (o * n + r) * inner + i0, buf + r * w, w);
        job_f32 fj = {buf, buf + n * w, n, w, 1, (w + 15) / 16, j->kind, true};
        strided_unit_f32(&fj, 0, 0, w);
        kn_ew_f32_to_half(j->dtype, buf + n * w, j->y + o * inner + i0, w);
    }
}

/* Returns false (nothing done) where a unit's rows would not fit a thread's scratch (16 columns of
 * more than 256K rows): the caller then widens the whole tensor. */
static bool reduce_half_strided(kn_kernel_ctx *c, const kn_tensor *x, kn_tensor *y, int64_t outer, int64_t n,
                                int64_t inner, int kind, kiln_status *st) {
    if (n > ((int64_t)1 << 18)) return false;
    const int64_t threads = kn_threadpool_size(c->pool), vecs = (inner + 15) / 16;
    /* columns a block: at most 256, and the block's rows at most 1 MB of floats */
    int64_t w = ((int64_t)1 << 18) / n / 16 * 16;
    w = w > 256 ? 256 : w < 16 ? 16 : w;
    int64_t nblk = (inner + w - 1) / w;
    if (nblk > vecs) nblk = vecs;
    if (threads > 1 && outer * nblk < 8 * threads)
        while ((outer * nblk) % threads && nblk < vecs) nblk++;
    half_strided_job j = {x->dtype, x->data, y->data, n, inner, nblk, vecs, kind, 0};
    const int64_t work = n * ((inner + nblk - 1) / nblk);
    kn_parallel_for(c->pool, outer * nblk, work >= 16384 ? 1 : 16384 / work, half_strided_range, &j);
    *st = j.failed ? KN_OOM() : KILN_OK;
    return true;
}

kiln_status kn_cpu_reduce(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return KILN_OK;
    kn_reduce_prm local;
    const kn_reduce_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_reduce_prepare, &local, (const void **)&prm));
    int kind = prm->kind;
    if (kind < 0) return kn_kernel_error(c, KILN_ERR_INTERNAL, "not a reduction");
    const kn_tensor *axes = prm->axes_from_input && c->n_inputs > 1 ? c->in[1] : NULL;
    bool mask[KILN_MAX_RANK], noop;
    KN_TRY(kn_nn_reduce_mask(c->node, &prm->attr, x->rank, axes, mask, &noop));
    if (noop) {
        if (y->dtype != x->dtype || kn_tensor_count(y) != kn_tensor_count(x))
            return kn_kernel_error(c, KILN_ERR_INTERNAL, "output does not match the input");
        memcpy(y->data, x->data, x->nbytes < y->nbytes ? x->nbytes : y->nbytes);
        return KILN_OK;
    }
    int64_t kept = 1, red = 1;
    for (int k = 0; k < x->rank; k++) {
        if (mask[k]) red *= x->dims[k];
        else kept *= x->dims[k];
    }
    if (kn_tensor_count(y) != kept)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "output has %lld elements, expected %lld",
                               (long long)kn_tensor_count(y), (long long)kept);
    if (kept == 0) return KILN_OK;
    if (red == 0) {
        fill_empty(y, kind);
        return KILN_OK;
    }
    /* collapse: drop unit dims, merge neighbours of the same kind */
    int64_t seg[KILN_MAX_RANK];
    bool segr[KILN_MAX_RANK];
    int ns = 0;
    for (int k = 0; k < x->rank; k++) {
        if (x->dims[k] == 1) continue;
        if (ns > 0 && segr[ns - 1] == mask[k]) seg[ns - 1] *= x->dims[k];
        else seg[ns] = x->dims[k], segr[ns] = mask[k], ns++;
    }

    kiln_dtype ct = kn_nn_compute_type(x->dtype);
    if (ct == KILN_DTYPE_UNDEFINED)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s is not supported", kiln_dtype_name(x->dtype));
    if (ct == KILN_DTYPE_INT64 && (kind == RK_L2 || kind == RK_LOGSUM || kind == RK_LOGSUMEXP))
        ct = KILN_DTYPE_DOUBLE;
    /* uint64 max/min compare correctly as int64 after flipping the top bit */
    bool flip = x->dtype == KILN_DTYPE_UINT64 && (kind == RK_MAX || kind == RK_MIN);
    size_t es = ct == KILN_DTYPE_FLOAT ? 4 : 8;
    int64_t nx = kn_tensor_count(x);

    /* the layout: [outer, n, inner] where the reduced dims are one run, else transposed below */
    int64_t outer = 1, n = 1, inner = 1;
    int first_r = -1, last_r = -1;
    for (int s = 0; s < ns; s++)
        if (segr[s]) {
            if (first_r < 0) first_r = s;
            last_r = s;
        }
    bool simple = true;
    for (int s = first_r; s >= 0 && s <= last_r; s++)
        if (!segr[s]) simple = false;
    if (kn_ew_is_half(x->dtype) && simple && first_r >= 0 && last_r == ns - 1)
        return reduce_half_rows(c, x, y, kept, seg[first_r], kind);
    if (kn_ew_is_half(x->dtype) && y->dtype == x->dtype && simple && first_r >= 0) {
        int64_t o3 = 1, i3 = 1;
        for (int s = 0; s < first_r; s++) o3 *= seg[s];
        for (int s = last_r + 1; s < ns; s++) i3 *= seg[s];
        kiln_status st;
        if (reduce_half_strided(c, x, y, o3, seg[first_r], i3, kind, &st)) return st;
    }

    /* input and output in the compute type */
    void *xb = NULL, *yb = NULL, *tb = NULL;
    const void *xv;
    void *yv;
    if (x->dtype == ct) xv = x->data;
    else {
        xb = malloc((size_t)nx * es);
        if (!xb) return KN_OOM();
        if (ct == KILN_DTYPE_FLOAT) kn_nn_to_f32(x, xb);
        else if (ct == KILN_DTYPE_DOUBLE) kn_nn_to_f64(x, xb);
        else kn_nn_to_i64(x, xb);
        xv = xb;
    }
    if (flip) {
        if (!xb) {
            xb = malloc((size_t)nx * 8);
            if (!xb) return KN_OOM();
            memcpy(xb, x->data, (size_t)nx * 8);
            xv = xb;
        }
        for (int64_t i = 0; i < nx; i++) ((uint64_t *)xb)[i] ^= UINT64_C(1) << 63;
    }
    if (y->dtype == ct && !flip) yv = y->data;
    else {
        yb = malloc((size_t)kept * es);
        if (!yb) {
            free(xb);
            return KN_OOM();
        }
        yv = yb;
    }

    if (first_r < 0) {
        outer = kept; /* every reduced dim has size 1 */
    } else if (simple) {
        for (int s = 0; s < first_r; s++) outer *= seg[s];
        n = seg[first_r];
        for (int s = last_r + 1; s < ns; s++) inner *= seg[s];
    } else {
        int perm[KILN_MAX_RANK], np = 0;
        for (int s = 0; s < ns; s++)
            if (!segr[s]) perm[np++] = s;
        for (int s = 0; s < ns; s++)
            if (segr[s]) perm[np++] = s;
        tb = malloc((size_t)nx * es);
        if (!tb) {
            free(xb);
            free(yb);
            return KN_OOM();
        }
        permute_copy(xv, tb, ns, seg, perm, es);
        xv = tb;
        outer = kept;
        n = red;
    }
    if (ct == KILN_DTYPE_FLOAT) reduce3_f32(c->pool, xv, yv, outer, n, inner, kind);
    else if (ct == KILN_DTYPE_DOUBLE) reduce3_f64(c->pool, xv, yv, outer, n, inner, kind);
    else reduce3_i64(c->pool, xv, yv, outer, n, inner, kind);

    if (yv != y->data) {
        if (flip)
            for (int64_t i = 0; i < kept; i++) ((uint64_t *)yv)[i] ^= UINT64_C(1) << 63;
        if (ct == KILN_DTYPE_FLOAT) kn_nn_from_f32(y, yv);
        else if (ct == KILN_DTYPE_DOUBLE) kn_nn_from_f64(y, yv);
        else kn_nn_from_i64(y, yv);
    }
    free(xb);
    free(yb);
    free(tb);
    return KILN_OK;
}

/* ------------------------------------------------------------------ ArgMax, ArgMin */

/* Values as a totally ordered type: float (float-likes), double, int64 (uint64 with the top bit
 * flipped so signed comparison orders it). Returns the buffer (the tensor's own or malloc'ed). */
static void *ordered_view(const kn_tensor *x, kiln_dtype *ct_out) {
    kiln_dtype ct = kn_nn_compute_type(x->dtype);
    *ct_out = ct;
    if (ct == KILN_DTYPE_UNDEFINED) return NULL;
    if (x->dtype == ct) return x->data;
    int64_t n = kn_tensor_count(x);
    void *b = malloc(((size_t)n + 1) * (ct == KILN_DTYPE_FLOAT ? 4 : 8));
    if (!b) return NULL;
    if (ct == KILN_DTYPE_FLOAT) kn_nn_to_f32(x, b);
    else if (ct == KILN_DTYPE_DOUBLE) kn_nn_to_f64(x, b);
    else {
        kn_nn_to_i64(x, b);
        if (x->dtype == KILN_DTYPE_UINT64)
            for (int64_t i = 0; i < n; i++) ((uint64_t *)b)[i] ^= UINT64_C(1) << 63;
    }
    return b;
}

/* NaN counts as the largest for max and the smallest for min (numpy returns the first NaN) */
#define ARG_LOOP(TY, BETTER)                                                                       \
    do {                                                                                           \
        const TY *v = (const TY *)xv;                                                              \
        for (int64_t o = 0; o < outer; o++)                                                        \
            for (int64_t i = 0; i < inner; i++) {                                                  \
                const TY *p = v + o * n * inner + i;                                               \
                TY best = p[0];                                                                    \
                int64_t bi = 0;                                                                    \
                for (int64_t r = 1; r < n; r++) {                                                  \
                    TY a = p[r * inner];                                                           \
                    if (BETTER) best = a, bi = r;                                                  \
                }                                                                                  \
                out[o * inner + i] = bi;                                                           \
            }                                                                                      \
    } while (0)

/* Float rows along the last axis (inner = 1): the row's max (min) by the vectorised row pick,
 * then the first (last) index holding it; when the row has a NaN (the pick returns NaN) the first
 * NaN, as the scalar loop gives. Rows run threaded. */
typedef struct argrow_job {
    const float *x;
    int64_t *out;
    int64_t n;
    int is_max, last;
} argrow_job;

static int64_t argrow_find(const float *p, int64_t n, float want, int last) {
    const int nan = want != want;
#if defined(__AVX512F__)
    const __m512 w = _mm512_set1_ps(want);
    if (!last || nan) {
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 m = kn_v16_tail(n - i);
            const __m512 v = _mm512_maskz_loadu_ps(m, p + i);
            const __mmask16 hit = nan ? _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q)
                                      : _mm512_mask_cmp_ps_mask(m, v, w, _CMP_EQ_OQ);
            if (hit) return i + __builtin_ctz((unsigned)hit);
        }
    } else {
        int64_t i = n - n % 16;
        if (i < n) {
            const __mmask16 m = kn_v16_tail(n - i);
            const __mmask16 hit = _mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, p + i), w, _CMP_EQ_OQ);
            if (hit) return i + 31 - __builtin_clz((unsigned)hit);
        }
        for (i -= 16; i >= 0; i -= 16) {
            const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_loadu_ps(p + i), w, _CMP_EQ_OQ);
            if (hit) return i + 31 - __builtin_clz((unsigned)hit);
        }
    }
#elif defined(__AVX2__) && defined(__FMA__)
    /* 8 lanes a compare and a movemask; the remainder element by element */
    const __m256 w = _mm256_set1_ps(want);
    if (!last || nan) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const __m256 v = _mm256_loadu_ps(p + i);
            const int hit = _mm256_movemask_ps(nan ? _mm256_cmp_ps(v, v, _CMP_UNORD_Q) : _mm256_cmp_ps(v, w, _CMP_EQ_OQ));
            if (hit) return i + __builtin_ctz((unsigned)hit);
        }
        for (; i < n; i++)
            if (nan ? p[i] != p[i] : p[i] == want) return i;
    } else {
        const int64_t t = n - n % 8;
        for (int64_t i = n - 1; i >= t; i--)
            if (p[i] == want) return i;
        for (int64_t i = t - 8; i >= 0; i -= 8) {
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(p + i), w, _CMP_EQ_OQ));
            if (hit) return i + 31 - __builtin_clz((unsigned)hit);
        }
    }
#else
    if (!last || nan) {
        for (int64_t i = 0; i < n; i++)
            if (nan ? p[i] != p[i] : p[i] == want) return i;
    } else {
        for (int64_t i = n - 1; i >= 0; i--)
            if (p[i] == want) return i;
    }
#endif
    return 0; /* not reached: want is one of the row's values */
}

static void argrow_range(void *arg, int64_t b, int64_t e) {
    const argrow_job *j = arg;
    for (int64_t r = b; r < e; r++) {
        const float *p = j->x + r * j->n;
        const float m = j->is_max ? kn_nn_row_maxf(p, j->n) : kn_nn_row_minf(p, j->n);
        j->out[r] = argrow_find(p, j->n, m, j->last);
    }
}

/* Float columns (inner > 1: a detector's class scores [1, 80, 8400] along axis 1): items of
 * ARGCOL_BLOCK columns, each row of the block compared with the block's running best at once
 * (contiguous, vectorised selects; the index as int32), the same rule as ARG_LOOP. Scanning each
 * column down with a stride of `inner` took 14x OpenVINO's time on that shape. A row's 4 KB run
 * of 1024 columns (8 KB of running best and index, in L1) kept the prefetcher ahead: 256 columns
 * were 10% slower on it (AVX2 EPYC, 1 thread). */
#define ARGCOL_BLOCK 1024
typedef struct argcol_job {
    const float *x;
    int64_t *out;
    int64_t n, inner, nblk;
    int is_max, last;
} argcol_job;

#define ARGCOL_FN(NAME, BETTER)                                                                    \
    static void NAME(const float *p, int64_t n, int64_t inner, int64_t len, float *best, int32_t *bi) { \
        for (int64_t i = 0; i < len; i++) best[i] = p[i], bi[i] = 0;                               \
        for (int64_t r = 1; r < n; r++) {                                                          \
            const float *row = p + r * inner;                                                      \
            for (int64_t i = 0; i < len; i++) {                                                    \
                const float a = row[i], b = best[i];                                               \
                const int take = BETTER;                                                           \
                best[i] = take ? a : b;                                                            \
                bi[i] = take ? (int32_t)r : bi[i];                                                 \
            }                                                                                      \
        }                                                                                          \
    }
ARGCOL_FN(argcol_max_first, (a > b) | ((a != a) & (b == b)))
ARGCOL_FN(argcol_max_last, (a >= b) | ((a != a) & (b == b)))
ARGCOL_FN(argcol_min_first, (a < b) | ((a != a) & (b == b)))
ARGCOL_FN(argcol_min_last, (a <= b) | ((a != a) & (b == b)))
#undef ARGCOL_FN

static void argcol_range(void *arg, int64_t b, int64_t e) {
    const argcol_job *j = arg;
    float best[ARGCOL_BLOCK];
    int32_t bi[ARGCOL_BLOCK];
    for (int64_t t = b; t < e; t++) {
        const int64_t o = t / j->nblk, i0 = t % j->nblk * ARGCOL_BLOCK;
        const int64_t len = j->inner - i0 < ARGCOL_BLOCK ? j->inner - i0 : ARGCOL_BLOCK;
        const float *p = j->x + o * j->n * j->inner + i0;
        if (j->is_max) (j->last ? argcol_max_last : argcol_max_first)(p, j->n, j->inner, len, best, bi);
        else (j->last ? argcol_min_last : argcol_min_first)(p, j->n, j->inner, len, best, bi);
        int64_t *out = j->out + o * j->inner + i0;
        for (int64_t i = 0; i < len; i++) out[i] = bi[i];
    }
}

kiln_status kn_argminmax_prepare(const kn_node *n, void *params) {
    kn_argminmax_prm *p = params;
    p->is_max = !strcmp(n->op_type, "ArgMax");
    p->last = kn_attr_int(n, "select_last_index", 0) != 0;
    p->axis = kn_attr_int(n, "axis", 0);
    return KILN_OK;
}

kiln_status kn_cpu_argminmax(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return KILN_OK;
    kn_argminmax_prm local;
    const kn_argminmax_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_argminmax_prepare, &local, (const void **)&prm));
    int is_max = prm->is_max;
    int last = prm->last;
    int64_t axis = prm->axis;
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis out of range");
    int64_t outer = 1, n = x->dims[axis], inner = 1;
    for (int k = 0; k < axis; k++) outer *= x->dims[k];
    for (int k = (int)axis + 1; k < x->rank; k++) inner *= x->dims[k];
    if (outer * inner == 0) return KILN_OK;
    if (n == 0) return kn_kernel_error(c, KILN_ERR_SHAPE, "cannot take the %s of an empty axis", c->node->op_type);
    kiln_dtype ct;
    void *xv = ordered_view(x, &ct);
    if (!xv) {
        if (ct == KILN_DTYPE_UNDEFINED)
            return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s is not supported", kiln_dtype_name(x->dtype));
        return KN_OOM();
    }
    int64_t *out = y->data;
    if (ct == KILN_DTYPE_FLOAT && inner == 1) {
        argrow_job j = {xv, out, n, is_max, last};
        kn_parallel_for(c->pool, outer, n >= 16384 ? 1 : 16384 / n, argrow_range, &j);
    } else if (ct == KILN_DTYPE_FLOAT && n <= INT32_MAX) {
        argcol_job j = {xv, out, n, inner, (inner + ARGCOL_BLOCK - 1) / ARGCOL_BLOCK, is_max, last};
        const int64_t work = n * (inner < ARGCOL_BLOCK ? inner : ARGCOL_BLOCK);
        kn_parallel_for(c->pool, outer * j.nblk, work >= 16384 ? 1 : 16384 / work + 1, argcol_range, &j);
    } else if (ct == KILN_DTYPE_FLOAT) {
        if (is_max && !last) ARG_LOOP(float, (a > best || (a != a && best == best)));
        else if (is_max) ARG_LOOP(float, (a >= best || (a != a && best == best)));
        else if (!last) ARG_LOOP(float, (a < best || (a != a && best == best)));
        else ARG_LOOP(float, (a <= best || (a != a && best == best)));
    } else if (ct == KILN_DTYPE_DOUBLE) {
        if (is_max && !last) ARG_LOOP(double, (a > best || (a != a && best == best)));
        else if (is_max) ARG_LOOP(double, (a >= best || (a != a && best == best)));
        else if (!last) ARG_LOOP(double, (a < best || (a != a && best == best)));
        else ARG_LOOP(double, (a <= best || (a != a && best == best)));
    } else {
        if (is_max && !last) ARG_LOOP(int64_t, (a > best));
        else if (is_max) ARG_LOOP(int64_t, (a >= best));
        else if (!last) ARG_LOOP(int64_t, (a < best));
        else ARG_LOOP(int64_t, (a <= best));
    }
    if (xv != x->data) free(xv);
    return KILN_OK;
}

/* ------------------------------------------------------------------ TopK */

typedef struct topk_item {
    double v; /* float and double values compare exactly as double */
    int64_t iv; /* integer values (exact for all of int64) */
    int64_t idx;
} topk_item;

/* Orders best first: larger (or smaller) value, then the lower index (the ONNX rule for ties).
 * NaN is the largest value, and two NaNs tie (a strict total order, as select_k and the sorted
 * insertion need: NaN before NaN either way round put them in an order of no rule). */
static int cmp_largest_f(const void *a, const void *b) {
    const topk_item *p = a, *q = b;
    const bool pn = p->v != p->v, qn = q->v != q->v;
    if (pn != qn) return pn ? -1 : 1; /* NaN first, like the largest */
    if (!pn && p->v != q->v) return p->v > q->v ? -1 : 1;
    return p->idx < q->idx ? -1 : p->idx > q->idx;
}
static int cmp_smallest_f(const void *a, const void *b) {
    const topk_item *p = a, *q = b;
    const bool pn = p->v != p->v, qn = q->v != q->v;
    if (pn != qn) return pn ? 1 : -1;
    if (!pn && p->v != q->v) return p->v < q->v ? -1 : 1;
    return p->idx < q->idx ? -1 : p->idx > q->idx;
}
static int cmp_largest_i(const void *a, const void *b) {
    const topk_item *p = a, *q = b;
    if (p->iv != q->iv) return p->iv > q->iv ? -1 : 1;
    return p->idx < q->idx ? -1 : p->idx > q->idx;
}
static int cmp_smallest_i(const void *a, const void *b) {
    const topk_item *p = a, *q = b;
    if (p->iv != q->iv) return p->iv < q->iv ? -1 : 1;
    return p->idx < q->idx ? -1 : p->idx > q->idx;
}
static int cmp_index(const void *a, const void *b) {
    const topk_item *p = a, *q = b;
    return p->idx < q->idx ? -1 : p->idx > q->idx;
}

static void swap_items(topk_item *a, topk_item *b) {
    topk_item t = *a;
    *a = *b;
    *b = t;
}

/* Moves the k best items (by cmp, a strict total order) to a[0..k), in any order: quickselect
 * with a median-of-three pivot, O(n) on average. */
static void select_k(topk_item *a, int64_t n, int64_t k, int (*cmp)(const void *, const void *)) {
    int64_t lo = 0, hi = n - 1;
    while (hi > lo) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cmp(&a[mid], &a[lo]) < 0) swap_items(&a[mid], &a[lo]);
        if (cmp(&a[hi], &a[lo]) < 0) swap_items(&a[hi], &a[lo]);
        if (cmp(&a[mid], &a[hi]) < 0) swap_items(&a[mid], &a[hi]);
        /* a[hi] is now the median of the three: the pivot */
        int64_t store = lo;
        for (int64_t i = lo; i < hi; i++)
            if (cmp(&a[i], &a[hi]) < 0) swap_items(&a[i], &a[store++]);
        swap_items(&a[store], &a[hi]);
        if (store == k || store == k - 1) return;
        if (store < k) lo = store + 1;
        else hi = store - 1;
    }
}

/* Offers `it` to the sorted list items[0..*cnt) of at most k best: dropped when the list is full
 * and it is not better than the k-th. */
static inline void topk_offer(topk_item *items, int64_t *cnt, int64_t k, const topk_item *it, int is_int, int largest,
                              int (*cmp)(const void *, const void *)) {
    if (*cnt == k) {
        const topk_item *w = &items[k - 1];
        if (is_int) {
            if (largest ? it->iv <= w->iv : it->iv >= w->iv) return;
        } else if (it->v == it->v && w->v == w->v) {
            if (largest ? it->v <= w->v : it->v >= w->v) return;
        } else if (cmp(it, w) > 0) {
            return;
        }
    }
    int64_t pos = *cnt < k ? (*cnt)++ : k - 1;
    while (pos > 0 && cmp(it, &items[pos - 1]) < 0) {
        items[pos] = items[pos - 1];
        pos--;
    }
    items[pos] = *it;
}

/* Contiguous float rows: each element as one 64-bit key, larger = better, so the ONNX order (value,
 * then the lower index; NaN the largest, all NaNs and both zeros equal) is one integer compare: the
 * value's bits made monotonic (NaN and -0 canonical first) above, the index inverted below. The k
 * best keys stay in a min-heap whose root is the k-th best; an element is keyed only when it does
 * not fail the float compare with the root's value, eight a step by vcmpps (unordered compares
 * keep NaNs on either side for the key's exact rule). Then a heap sort orders them best first.
 * The sorted insertion of topk_item through the comparison function took 2.5x ONNX Runtime's time
 * on 64x4096 k 8 and the whole-row selection 3.7x on 1x8400 k 300. */
static inline uint64_t topk_key(float v, int64_t r, int largest) {
    uint32_t u;
    if (v != v) u = 0x7fc00000u;
    else if (v == 0) u = 0;
    else memcpy(&u, &v, sizeof u);
    u = u & 0x80000000u ? ~u : u | 0x80000000u; /* unsigned order = float order */
    if (!largest) u = ~u;
    return (uint64_t)u << 32 | (uint32_t)~(uint32_t)r;
}

static inline void heap_down(uint64_t *h, int64_t n, int64_t at) {
    const uint64_t v = h[at];
    for (;;) {
        int64_t c = 2 * at + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[at] = h[c];
        at = c;
    }
    h[at] = v;
}

/* The k best of x[0, n) (n < 2^32), best first, their indices into items[0, k). */
static void topk_float_row(topk_item *items, uint64_t *h, int64_t k, const float *x, int64_t n, int largest) {
    int64_t r = 0;
    for (; r < k; r++) { /* the first k, pushed up the heap */
        const uint64_t v = topk_key(x[r], r, largest);
        int64_t at = r;
        while (at > 0 && h[(at - 1) / 2] > v) {
            h[at] = h[(at - 1) / 2];
            at = (at - 1) / 2;
        }
        h[at] = v;
    }
#define TOPK_OFFER(rr)                                                                              \
    do {                                                                                           \
        const uint64_t kv = topk_key(x[rr], rr, largest);                                          \
        if (kv > h[0]) {                                                                           \
            h[0] = kv;                                                                             \
            heap_down(h, k, 0);                                                                    \
            thr = x[~(uint32_t)h[0]];                                                              \
        }                                                                                          \
    } while (0)
    float thr = x[~(uint32_t)h[0]];
#if defined(__AVX512F__)
    /* sixteen a step: the scan is most of the time where k is small (64x4096, k 1) */
    for (; r + 16 <= n; r += 16) {
        const __m512 v = _mm512_loadu_ps(x + r), t = _mm512_set1_ps(thr);
        unsigned m = largest ? _mm512_cmp_ps_mask(v, t, _CMP_NLE_UQ) : _mm512_cmp_ps_mask(v, t, _CMP_NGE_UQ);
        while (m) {
            const int64_t rr = r + __builtin_ctz(m);
            m &= m - 1;
            TOPK_OFFER(rr);
        }
    }
#endif
#if defined(__AVX2__)
    for (; r + 8 <= n; r += 8) {
        const __m256 v = _mm256_loadu_ps(x + r), t = _mm256_set1_ps(thr);
        unsigned m = (unsigned)_mm256_movemask_ps(largest ? _mm256_cmp_ps(v, t, _CMP_NLE_UQ)
                                                         : _mm256_cmp_ps(v, t, _CMP_NGE_UQ));
        while (m) {
            const int64_t rr = r + __builtin_ctz(m);
            m &= m - 1;
            TOPK_OFFER(rr);
        }
    }
#endif
    for (; r < n; r++)
        if (!(largest ? x[r] <= thr : x[r] >= thr)) TOPK_OFFER(r);
#undef TOPK_OFFER
    for (int64_t e = k - 1; e > 0; e--) { /* heap sort: the worst moves last */
        const uint64_t t = h[0];
        h[0] = h[e];
        h[e] = t;
        heap_down(h, e, 0);
    }
    for (int64_t q = 0; q < k; q++) items[q].idx = (int64_t)(uint32_t)~(uint32_t)h[q];
}

typedef struct topk_job {
    const void *xv;
    kiln_dtype ct;
    const kn_tensor *x;
    kn_tensor *vals, *idxs;
    int64_t n, inner, k;
    int largest, sorted;
    int fail;
} topk_job;

static void topk_range(void *arg, int64_t b, int64_t e) {
    topk_job *j = arg;
    int64_t n = j->n, inner = j->inner, k = j->k;
    /* float rows: the key heap after the items, and for columns (inner > 1: a detector's [1, 80,
     * 8400] over axis 1) TOPK_COLS columns gathered into rows at once, a row of the input at a
     * time (the strided scan through the generic comparisons took 6.5x OpenVINO's time there) */
    enum { TOPK_COLS = 16 };
    const bool keyed = j->ct == KILN_DTYPE_FLOAT && n <= (int64_t)UINT32_MAX && k * 4 <= n;
    topk_item *items = malloc((size_t)n * sizeof *items +
                              (keyed ? (size_t)k * sizeof(uint64_t) + (inner > 1 ? TOPK_COLS * (size_t)n * sizeof(float) : 0)
                                     : 0));
    int64_t blk_s0 = -1, blk_len = 0; /* the columns s the gathered block holds */
    if (!items) {
        __atomic_store_n(&j->fail, 1, __ATOMIC_RELAXED);
        return;
    }
    int is_int = j->ct == KILN_DTYPE_INT64;
    int (*cmp)(const void *, const void *) =
        is_int ? (j->largest ? cmp_largest_i : cmp_smallest_i) : (j->largest ? cmp_largest_f : cmp_smallest_f);
    size_t es = kiln_dtype_size(j->x->dtype);
    for (int64_t s = b; s < e; s++) {
        int64_t o = s / inner, i = s % inner;
        int64_t base = o * n * inner + i;
        if (keyed) {
            uint64_t *heap = (uint64_t *)(void *)(items + n);
            const float *row = (const float *)j->xv + base;
            if (inner > 1) {
                float *cols = (float *)(void *)(heap + k);
                if (s < blk_s0 || s >= blk_s0 + blk_len) { /* gather columns i.. of this outer index */
                    blk_s0 = s;
                    blk_len = inner - i < TOPK_COLS ? inner - i : TOPK_COLS;
                    if (blk_len > e - s) blk_len = e - s;
                    for (int64_t r = 0; r < n; r++)
                        for (int64_t q = 0; q < blk_len; q++) cols[q * n + r] = row[r * inner + q];
                }
                row = cols + (s - blk_s0) * n;
            }
            topk_float_row(items, heap, k, row, n, j->largest);
            if (!j->sorted) qsort(items, (size_t)k, sizeof *items, cmp_index);
        } else if (k * 16 <= n && k <= 256) {
            /* small k: keep the k best sorted; most elements fail one comparison with the
             * current k-th best and cost nothing more */
            int64_t cnt = 0;
            for (int64_t r = 0; r < n; r++) {
                topk_item it;
                int64_t at = base + r * inner;
                it.idx = r;
                if (j->ct == KILN_DTYPE_FLOAT) it.v = ((const float *)j->xv)[at];
                else if (j->ct == KILN_DTYPE_DOUBLE) it.v = ((const double *)j->xv)[at];
                else it.iv = ((const int64_t *)j->xv)[at];
                topk_offer(items, &cnt, k, &it, is_int, j->largest, cmp);
            }
            if (!j->sorted) qsort(items, (size_t)k, sizeof *items, cmp_index);
        } else {
            for (int64_t r = 0; r < n; r++) {
                int64_t at = base + r * inner;
                items[r].idx = r;
                if (j->ct == KILN_DTYPE_FLOAT) items[r].v = ((const float *)j->xv)[at];
                else if (j->ct == KILN_DTYPE_DOUBLE) items[r].v = ((const double *)j->xv)[at];
                else items[r].iv = ((const int64_t *)j->xv)[at];
            }
            if (k < n) select_k(items, n, k, cmp);
            qsort(items, (size_t)k, sizeof *items, j->sorted ? cmp : cmp_index);
        }
        int64_t obase = o * k * inner + i;
        int64_t *oi = j->idxs ? (int64_t *)j->idxs->data : NULL;
        for (int64_t r = 0; r < k; r++) {
            int64_t dst = obase + r * inner, src = base + items[r].idx * inner;
            if (oi) oi[dst] = items[r].idx;
            if (j->vals) /* copy the original element bytes: exact for every type */
                memcpy((char *)j->vals->data + (size_t)dst * es, (const char *)j->x->data + (size_t)src * es, es);
        }
    }
    free(items);
}

#if defined(__AVX2__)
/* Float columns (inner >= 8), k <= 8, sorted: eight columns a vector, each lane keeping its k best
 * sorted in registers (values and int32 indices). Each row's value goes down the list to the
 * first slot it beats (or an empty one), and from there the slots move down one place; ties keep
 * the lower index first (rows arrive in index order) and NaN ranks as the largest, as topk_key's
 * rule. A detector's [1, 80, 8400] over axis 1 with k 5 took
 * 3x OpenVINO's time column by column. */
#define TOPK_VK 8
typedef struct topk_vcol_job {
    const float *x;
    float *vals;    /* or NULL */
    int64_t *idxs;  /* or NULL */
    int64_t n, inner, k, nblk;
    int largest;
} topk_vcol_job;

/* The rows of one block of eight columns into L, I (K best each, sorted by key, best first); K a
 * constant at each call, so the lists stay in registers. Keys are topk_key's upper half as signed
 * int32 (NaN and -0 canonical, bits made monotonic; complemented for the smallest): larger =
 * better, and the empty slots hold INT32_MIN, below every key. */
static inline __attribute__((always_inline)) void topk_vcol_block(const float *p, int64_t n, int64_t inner, int64_t lanes,
                                                                  __m256i lm, const int K, int largest, __m256i *L,
                                                                  __m256i *I) {
    const __m256i qnan = _mm256_set1_epi32(0x7fc00000), low31 = _mm256_set1_epi32(0x7fffffff);
    const __m256i flip = _mm256_set1_epi32(largest ? 0 : -1);
    for (int q = 0; q < K; q++) L[q] = _mm256_set1_epi32(INT32_MIN), I[q] = _mm256_set1_epi32(-1);
    for (int64_t r = 0; r < n; r++) {
        /* the next 64 bytes of the row, which the next block but one reads: a row a page apart
         * (a detector's 8400 columns) is a stream the hardware prefetchers do not follow */
        _mm_prefetch((const char *)(p + r * inner + 16), _MM_HINT_T0);
        const __m256 x = lanes == 8 ? _mm256_loadu_ps(p + r * inner) : _mm256_maskload_ps(p + r * inner, lm);
        __m256i u = _mm256_castps_si256(_mm256_and_ps(x, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NEQ_UQ)));
        u = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(u), _mm256_castsi256_ps(qnan),
                                                 _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
        u = _mm256_xor_si256(u, _mm256_and_si256(_mm256_srai_epi32(u, 31), low31)); /* signed order = float order */
        __m256i v = _mm256_xor_si256(u, flip);
        /* masked-off lanes (past the last column) get a key below all and stay out */
        if (lanes < 8) v = _mm256_blendv_epi8(_mm256_set1_epi32(INT32_MIN), v, lm);
        __m256i vi = _mm256_set1_epi32((int)r), shift = _mm256_setzero_si256();
        for (int q = 0; q < K; q++) {
            /* placed above: the rest moves down one place (ties keep the earlier row) */
            const __m256i better = _mm256_or_si256(_mm256_cmpgt_epi32(v, L[q]), shift);
            shift = better;
            /* the keys by max / min (the same swap: where `better` holds only through the shift,
             * v is the displaced key and >= L[q], an equal key swapped for an equal key), the
             * indices under the mask */
            const __m256i nl = _mm256_max_epi32(L[q], v), ni = _mm256_blendv_epi8(I[q], vi, better);
            v = _mm256_min_epi32(v, L[q]);
            vi = _mm256_blendv_epi8(vi, I[q], better);
            L[q] = nl, I[q] = ni;
        }
    }
}

#if defined(__AVX512F__)
/* topk_vcol_block with sixteen columns a vector (the same keys, insertion and tie rule; the masks
 * in mask registers): half the steps per column. A detector's [1, 80, 8400] over axis 1, k 5,
 * took 1.5x OpenVINO's time at 1 thread on the 16-core host with eight. */
#define TOPK_VCOL_LANES 16
static inline __attribute__((always_inline)) void topk_vcol_block16(const float *p, int64_t n, int64_t inner,
                                                                    __mmask16 lm, const int K, int largest,
                                                                    __m512i *L, __m512i *I) {
    const __m512i qnan = _mm512_set1_epi32(0x7fc00000), low31 = _mm512_set1_epi32(0x7fffffff);
    const __m512i flip = _mm512_set1_epi32(largest ? 0 : -1), lowest = _mm512_set1_epi32(INT32_MIN);
    for (int q = 0; q < K; q++) L[q] = lowest, I[q] = _mm512_set1_epi32(-1);
    for (int64_t r = 0; r < n; r++) {
        _mm_prefetch((const char *)(p + r * inner + 32), _MM_HINT_T0);
        const __m512 x = _mm512_maskz_loadu_ps(lm, p + r * inner);
        /* -0 as 0, NaN as the canonical quiet NaN, then the bits made monotonic (signed order) */
        __m512i u = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NEQ_UQ), _mm512_castps_si512(x));
        u = _mm512_mask_mov_epi32(u, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), qnan);
        u = _mm512_xor_si512(u, _mm512_and_si512(_mm512_srai_epi32(u, 31), low31));
        /* masked-off lanes (past the last column) get a key below all and stay out */
        __m512i v = _mm512_mask_mov_epi32(lowest, lm, _mm512_xor_si512(u, flip));
        __m512i vi = _mm512_set1_epi32((int)r);
        __mmask16 shift = 0;
        for (int q = 0; q < K; q++) {
            const __mmask16 better = (__mmask16)(_mm512_cmpgt_epi32_mask(v, L[q]) | shift);
            shift = better;
            const __m512i nl = _mm512_max_epi32(L[q], v), ni = _mm512_mask_blend_epi32(better, I[q], vi);
            v = _mm512_min_epi32(v, L[q]);
            vi = _mm512_mask_blend_epi32(better, vi, I[q]);
            L[q] = nl, I[q] = ni;
        }
    }
}
#else
#define TOPK_VCOL_LANES 8
#endif

static void topk_vcol_range(void *arg, int64_t b, int64_t e) {
    const topk_vcol_job *j = arg;
    const int64_t n = j->n, inner = j->inner, k = j->k;
    for (int64_t t = b; t < e; t++) {
#if defined(__AVX512F__)
        {
            const int64_t o = t / j->nblk, i0 = t % j->nblk * 16, lanes = inner - i0 < 16 ? inner - i0 : 16;
            const __mmask16 lm = (__mmask16)(lanes >= 16 ? 0xffffu : (1u << lanes) - 1u);
            const float *p = j->x + o * n * inner + i0;
            __m512i L[TOPK_VK], I[TOPK_VK];
            switch (k) {
            case 1: topk_vcol_block16(p, n, inner, lm, 1, j->largest, L, I); break;
            case 2: topk_vcol_block16(p, n, inner, lm, 2, j->largest, L, I); break;
            case 3: topk_vcol_block16(p, n, inner, lm, 3, j->largest, L, I); break;
            case 4: topk_vcol_block16(p, n, inner, lm, 4, j->largest, L, I); break;
            case 5: topk_vcol_block16(p, n, inner, lm, 5, j->largest, L, I); break;
            case 6: topk_vcol_block16(p, n, inner, lm, 6, j->largest, L, I); break;
            case 7: topk_vcol_block16(p, n, inner, lm, 7, j->largest, L, I); break;
            default: topk_vcol_block16(p, n, inner, lm, 8, j->largest, L, I); break;
            }
            for (int64_t q = 0; q < k; q++) {
                int32_t iv[16];
                _mm512_storeu_si512((void *)iv, I[q]);
                const int64_t at = (o * k + q) * inner + i0;
                for (int64_t l = 0; l < lanes; l++) {
                    if (j->vals) j->vals[at + l] = p[iv[l] * inner + l]; /* the element itself: -0 stays -0 */
                    if (j->idxs) j->idxs[at + l] = iv[l];
                }
            }
            continue;
        }
#endif
        const int64_t o = t / j->nblk, i0 = t % j->nblk * 8, lanes = inner - i0 < 8 ? inner - i0 : 8;
        const __m256i lm = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const float *p = j->x + o * n * inner + i0;
        __m256i L[TOPK_VK], I[TOPK_VK];
        switch (k) {
        case 1: topk_vcol_block(p, n, inner, lanes, lm, 1, j->largest, L, I); break;
        case 2: topk_vcol_block(p, n, inner, lanes, lm, 2, j->largest, L, I); break;
        case 3: topk_vcol_block(p, n, inner, lanes, lm, 3, j->largest, L, I); break;
        case 4: topk_vcol_block(p, n, inner, lanes, lm, 4, j->largest, L, I); break;
        case 5: topk_vcol_block(p, n, inner, lanes, lm, 5, j->largest, L, I); break;
        case 6: topk_vcol_block(p, n, inner, lanes, lm, 6, j->largest, L, I); break;
        case 7: topk_vcol_block(p, n, inner, lanes, lm, 7, j->largest, L, I); break;
        default: topk_vcol_block(p, n, inner, lanes, lm, 8, j->largest, L, I); break;
        }
        for (int64_t q = 0; q < k; q++) {
            int32_t iv[8];
            _mm256_storeu_si256((__m256i *)(void *)iv, I[q]);
            const int64_t at = (o * k + q) * inner + i0;
            for (int64_t l = 0; l < lanes; l++) {
                if (j->vals) j->vals[at + l] = p[iv[l] * inner + l]; /* the element itself: -0 stays -0 */
                if (j->idxs) j->idxs[at + l] = iv[l];
            }
        }
    }
}
#endif

kiln_status kn_topk_prepare(const kn_node *n, void *params) {
    kn_topk_prm *p = params;
    p->k = n->opset < 10 ? kn_attr_int(n, "k", 0) : -1;
    p->axis = kn_attr_int(n, "axis", -1);
    p->largest = n->opset < 11 || kn_attr_int(n, "largest", 1) != 0;
    p->sorted = n->opset < 11 || kn_attr_int(n, "sorted", 1) != 0;
    return KILN_OK;
}

kiln_status kn_cpu_topk(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_topk_prm local;
    const kn_topk_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_topk_prepare, &local, (const void **)&prm));
    int64_t k;
    if (c->node->opset < 10) k = prm->k;
    else {
        if (!c->in[1] || kn_tensor_count(c->in[1]) != 1)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "input 'K' must hold one integer");
        k = kn_tensor_get_i64(c->in[1], 0);
    }
    int64_t axis = prm->axis;
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis out of range");
    int64_t n = x->dims[axis];
    if (k < 0 || k > n)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "k = %lld must be in [0, %lld] (dimension %lld of the input)",
                               (long long)k, (long long)n, (long long)axis);
    int64_t outer = 1, inner = 1;
    for (int k2 = 0; k2 < axis; k2++) outer *= x->dims[k2];
    for (int k2 = (int)axis + 1; k2 < x->rank; k2++) inner *= x->dims[k2];
    if (outer * inner == 0 || k == 0) return KILN_OK;
    topk_job j = {0};
    j.x = x;
    j.vals = c->n_outputs > 0 ? c->out[0] : NULL;
    j.idxs = c->n_outputs > 1 ? c->out[1] : NULL;
    j.xv = ordered_view(x, &j.ct);
    if (!j.xv) {
        if (j.ct == KILN_DTYPE_UNDEFINED)
            return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s is not supported", kiln_dtype_name(x->dtype));
        return KN_OOM();
    }
    j.n = n;
    j.inner = inner;
    j.k = k;
    j.largest = prm->largest;
    j.sorted = prm->sorted;
#if defined(__AVX2__)
    if (j.ct == KILN_DTYPE_FLOAT && x->dtype == KILN_DTYPE_FLOAT && inner >= 8 && k <= TOPK_VK && j.sorted &&
        n <= INT32_MAX && (!j.vals || j.vals->dtype == KILN_DTYPE_FLOAT)) {
        topk_vcol_job v = {j.xv, j.vals ? j.vals->data : NULL, j.idxs ? j.idxs->data : NULL, n, inner, k,
                           (inner + TOPK_VCOL_LANES - 1) / TOPK_VCOL_LANES, j.largest};
        const int64_t work = n * k * TOPK_VCOL_LANES;
        kn_parallel_for(c->pool, outer * v.nblk, work >= 16384 ? 1 : 16384 / work + 1, topk_vcol_range, &v);
        return KILN_OK;
    }
#endif
    int64_t grain = n >= 4096 ? 1 : 4096 / n;
    kn_parallel_for(c->pool, outer * inner, grain, topk_range, &j);
    if (j.xv != x->data) free((void *)j.xv);
    return j.fail ? KN_OOM() : KILN_OK;
}

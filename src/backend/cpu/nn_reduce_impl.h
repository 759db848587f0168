/* Reduction loops for one compute type; included by nn_reduce.c once per type with
 *   T      the element type (float, double, int64_t)
 *   SUF    a name suffix
 *   LANES  independent accumulators per row (what the vector unit holds)
 *   EXPF   exp for T
 *   IS_INT 1 for integers (no NaN handling, no exp/log kinds)
 *   IS_F32 1 for float (row max/min through the vector helpers)
 * NaN checks use RNAN(v), which is 0 for integers.
 * Row form: y[r] = reduce(x[r*n .. r*n+n)). Strided form: y[o*inner+i] = reduce_r x[(o*n+r)*inner+i]. */

#define RCAT_(a, b) a##_##b
#define RCAT(a, b) RCAT_(a, b)
#define RFN(name) RCAT(name, SUF)
#if IS_INT
#define RNAN(v) 0
#else
#define RNAN(v) ((v) != (v))
#endif

static T RFN(row_sum)(const T *p, int64_t n) {
#if IS_INT
    T acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += p[i + l];
    T s = 0;
    for (int l = 0; l < LANES; l++) s += acc[l];
    for (; i < n; i++) s += p[i];
    return s;
#else
    /* lanes over blocks, blocks summed in double: accurate for long rows at vector speed */
    double total = 0;
    int64_t i = 0;
    while (i < n) {
        int64_t end = n - i > 4096 ? i + 4096 : n;
        T acc[LANES] = {0};
        for (; i + LANES <= end; i += LANES)
            for (int l = 0; l < LANES; l++) acc[l] += p[i + l];
        T s = 0;
        for (int l = 0; l < LANES; l++) s += acc[l];
        for (; i < end; i++) s += p[i];
        total += (double)s;
    }
    return (T)total;
#endif
}

static T RFN(row_sumabs)(const T *p, int64_t n) {
    T acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += p[i + l] < 0 ? -p[i + l] : p[i + l];
    T s = 0;
    for (int l = 0; l < LANES; l++) s += acc[l];
    for (; i < n; i++) s += p[i] < 0 ? -p[i] : p[i];
    return s;
}

static T RFN(row_sumsq)(const T *p, int64_t n) {
    T acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += p[i + l] * p[i + l];
    T s = 0;
    for (int l = 0; l < LANES; l++) s += acc[l];
    for (; i < n; i++) s += p[i] * p[i];
    return s;
}

static T RFN(row_prod)(const T *p, int64_t n) {
    T s = 1;
    for (int64_t i = 0; i < n; i++) s *= p[i];
    return s;
}

/* max/min keep NaN like numpy (a NaN element makes the result NaN) */
static T RFN(row_max)(const T *p, int64_t n) {
#if IS_F32
    return kn_nn_row_maxf(p, n);
#else
    T acc[LANES];
    int64_t i = 0;
    for (int l = 0; l < LANES; l++) acc[l] = p[0];
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            T v = p[i + l];
            acc[l] = (v > acc[l] || RNAN(v)) ? v : acc[l];
        }
    T m = acc[0];
    for (int l = 1; l < LANES; l++) m = (acc[l] > m || RNAN(acc[l])) ? acc[l] : m;
    for (; i < n; i++) m = (p[i] > m || RNAN(p[i])) ? p[i] : m;
    return m;
#endif
}

static T RFN(row_min)(const T *p, int64_t n) {
#if IS_F32
    return kn_nn_row_minf(p, n);
#else
    T acc[LANES];
    int64_t i = 0;
    for (int l = 0; l < LANES; l++) acc[l] = p[0];
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            T v = p[i + l];
            acc[l] = (v < acc[l] || RNAN(v)) ? v : acc[l];
        }
    T m = acc[0];
    for (int l = 1; l < LANES; l++) m = (acc[l] < m || RNAN(acc[l])) ? acc[l] : m;
    for (; i < n; i++) m = (p[i] < m || RNAN(p[i])) ? p[i] : m;
    return m;
#endif
}

static T RFN(row_sumexp)(const T *p, int64_t n, T m) {
    T acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += (T)EXPF(p[i + l] - m);
    T s = 0;
    for (int l = 0; l < LANES; l++) s += acc[l];
    for (; i < n; i++) s += (T)EXPF(p[i] - m);
    return s;
}

/* final step from the accumulated value; n is the number of reduced elements (> 0) */
static T RFN(post)(T v, int64_t n, int kind) {
    switch (kind) {
    case RK_MEAN: return (T)(v / (T)n);
    case RK_L2: return (T)sqrt((double)v);
    case RK_LOGSUM: return (T)log((double)v);
    default: return v;
    }
}

static T RFN(row)(const T *p, int64_t n, int kind) {
    switch (kind) {
    case RK_SUM:
    case RK_MEAN:
    case RK_LOGSUM: return RFN(post)(RFN(row_sum)(p, n), n, kind);
    case RK_L1: return RFN(row_sumabs)(p, n);
    case RK_L2:
    case RK_SUMSQ: return RFN(post)(RFN(row_sumsq)(p, n), n, kind);
    case RK_MAX: return RFN(row_max)(p, n);
    case RK_MIN: return RFN(row_min)(p, n);
    case RK_PROD: return RFN(row_prod)(p, n);
    case RK_LOGSUMEXP: {
        T m = RFN(row_max)(p, n);
        if (IS_INT || RNAN(m)) return m;
        if (isinf((double)m)) return m; /* all -inf, or +inf present */
        return (T)(log((double)RFN(row_sumexp)(p, n, m)) + (double)m);
    }
    }
    return 0;
}

typedef struct RFN(job) {
    const T *x;
    T *y;
    int64_t n, inner, chunks_per_outer, chunk;
    int kind;
} RFN(job);

static void RFN(rows_range)(void *arg, int64_t b, int64_t e) {
    const RFN(job) *j = arg;
    for (int64_t r = b; r < e; r++) j->y[r] = RFN(row)(j->x + r * j->n, j->n, j->kind);
}

/* One unit of the strided form: outer index o, inner elements [i0, i1). */
static void RFN(strided_unit)(const RFN(job) *j, int64_t o, int64_t i0, int64_t i1) {
    int64_t len = i1 - i0, n = j->n, inner = j->inner;
    T *acc = j->y + o * inner + i0;
    const T *base = j->x + o * n * inner + i0;
    int kind = j->kind;
    T init = 0;
    if (kind == RK_PROD) init = 1;
    if (kind == RK_MAX || kind == RK_MIN || kind == RK_LOGSUMEXP) {
        for (int64_t i = 0; i < len; i++) acc[i] = base[i];
    } else {
        for (int64_t i = 0; i < len; i++) acc[i] = init;
    }
    for (int64_t r = 0; r < n; r++) {
        const T *p = base + r * inner;
        switch (kind) {
        case RK_SUM:
        case RK_MEAN:
        case RK_LOGSUM:
            for (int64_t i = 0; i < len; i++) acc[i] += p[i];
            break;
        case RK_L1:
            for (int64_t i = 0; i < len; i++) acc[i] += p[i] < 0 ? -p[i] : p[i];
            break;
        case RK_L2:
        case RK_SUMSQ:
            for (int64_t i = 0; i < len; i++) acc[i] += p[i] * p[i];
            break;
        case RK_PROD:
            for (int64_t i = 0; i < len; i++) acc[i] *= p[i];
            break;
        case RK_MAX:
        case RK_LOGSUMEXP:
            for (int64_t i = 0; i < len; i++) acc[i] = (p[i] > acc[i] || RNAN(p[i])) ? p[i] : acc[i];
            break;
        case RK_MIN:
            for (int64_t i = 0; i < len; i++) acc[i] = (p[i] < acc[i] || RNAN(p[i])) ? p[i] : acc[i];
            break;
        }
    }
    if (kind == RK_LOGSUMEXP && !IS_INT) {
        T s[256];
        for (int64_t i = 0; i < len; i++) s[i] = 0;
        for (int64_t r = 0; r < n; r++) {
            const T *p = base + r * inner;
            for (int64_t i = 0; i < len; i++) s[i] += (T)EXPF(p[i] - acc[i]);
        }
        for (int64_t i = 0; i < len; i++) {
            T m = acc[i];
            if (!RNAN(m) && !isinf((double)m)) acc[i] = (T)(log((double)s[i]) + (double)m);
        }
        return;
    }
    if (kind == RK_MEAN || kind == RK_L2 || kind == RK_LOGSUM)
        for (int64_t i = 0; i < len; i++) acc[i] = RFN(post)(acc[i], n, kind);
}

static void RFN(strided_range)(void *arg, int64_t b, int64_t e) {
    const RFN(job) *j = arg;
    for (int64_t u = b; u < e; u++) {
        int64_t o = u / j->chunks_per_outer, ci = u % j->chunks_per_outer;
        int64_t i0 = ci * j->chunk, i1 = i0 + j->chunk;
        if (i1 > j->inner) i1 = j->inner;
        RFN(strided_unit)(j, o, i0, i1);
    }
}

/* Reduces x viewed as [outer, n, inner] over n into y [outer, inner]; n > 0. */
static void RFN(reduce3)(kn_threadpool *pool, const T *x, T *y, int64_t outer, int64_t n, int64_t inner,
                         int kind) {
    RFN(job) j = {x, y, n, inner, 1, inner, kind};
    if (inner == 1) {
        int64_t grain = n >= 16384 ? 1 : 16384 / n;
        kn_parallel_for(pool, outer, grain, RFN(rows_range), &j);
        return;
    }
    j.chunk = inner < 256 ? inner : 256;
    j.chunks_per_outer = (inner + j.chunk - 1) / j.chunk;
    int64_t work = n * j.chunk;
    int64_t grain = work >= 16384 ? 1 : 16384 / work;
    kn_parallel_for(pool, outer * j.chunks_per_outer, grain, RFN(strided_range), &j);
}

#undef RFN
#undef RNAN
#undef RCAT
#undef RCAT_

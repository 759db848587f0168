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
    int64_t n, inner, nblk, vecs;
    int kind;
    bool regs; /* the strided form accumulates in registers (strided_unit) */
} RFN(job);

static void RFN(rows_range)(void *arg, int64_t b, int64_t e) {
    const RFN(job) *j = arg;
    for (int64_t r = b; r < e; r++) j->y[r] = RFN(row)(j->x + r * j->n, j->n, j->kind);
}

/* Columns of the strided form taken RBLK at a time, their accumulators in registers across all n
 * rows (each column the same operations in the same order as one at a time: rows in order), then
 * stored once: accumulating in y read and wrote every accumulator back at each row. Only where a
 * thread's part of the input (up to 2 MB, the L2 of the Xeons measured) stays in its L2 from run to
 * run (regs): from L3 or memory, the rows' long runs of 256 columns streamed better than RBLK at a
 * time (1x256x56x56 over axis 1, 3.2 MB, 2-core Xeon: 1 thread 0.143 -> 0.168 ms in registers, 2
 * threads, 1.6 MB each, 0.055 -> 0.033). */
#define RBLK (64 / (int)sizeof(T) * 4)
#define RACC(INIT, STEP)                                                                           \
    do {                                                                                           \
        T a[RBLK];                                                                                 \
        if (W == RBLK) RACC_W(RBLK, INIT, STEP);                                                   \
        else RACC_W(RBLK / 4, INIT, STEP);                                                         \
    } while (0)
#define RACC_W(WC, INIT, STEP)                                                                     \
    do {                                                                                           \
        for (int q = 0; q < WC; q++) a[q] = (T)(INIT);                                             \
        for (int64_t r = 0; r < n; r++) {                                                          \
            const T *p = base + r * inner;                                                         \
            for (int q = 0; q < WC; q++) {                                                         \
                const T v = p[q];                                                                  \
                STEP;                                                                              \
            }                                                                                      \
        }                                                                                          \
        for (int q = 0; q < WC; q++) acc[q] = a[q];                                                \
    } while (0)

/* One unit of the strided form: outer index o, inner elements [i0, i1). */
static void RFN(strided_unit)(const RFN(job) *j, int64_t o, int64_t i0, int64_t i1) {
    int64_t len = i1 - i0, n = j->n, inner = j->inner;
    int kind = j->kind;
    int64_t i = 0;
    /* whole blocks in registers (not LOGSUMEXP: its second pass needs the maxima), then a line at
     * a time */
    for (int W = RBLK; W >= RBLK / 4 && kind != RK_LOGSUMEXP && j->regs; W /= 4)
        for (; i + W <= len; i += W) {
            T *acc = j->y + o * inner + i0 + i;
            const T *base = j->x + o * n * inner + i0 + i;
            switch (kind) {
            case RK_SUM:
            case RK_MEAN:
            case RK_LOGSUM: RACC(0, a[q] += v); break;
            case RK_L1: RACC(0, a[q] += v < 0 ? -v : v); break;
            case RK_L2:
            case RK_SUMSQ: RACC(0, a[q] += v * v); break;
            case RK_PROD: RACC(1, a[q] *= v); break;
            /* the first row is the start, as below; v > a or a NaN v replaces it */
            case RK_MAX: RACC(base[q], a[q] = (v > a[q] || RNAN(v)) ? v : a[q]); break;
            case RK_MIN: RACC(base[q], a[q] = (v < a[q] || RNAN(v)) ? v : a[q]); break;
            }
            if (kind == RK_MEAN || kind == RK_L2 || kind == RK_LOGSUM)
                for (int q = 0; q < W; q++) acc[q] = RFN(post)(acc[q], n, kind);
        }
    for (; i < len; i += 256) {
        const int64_t w = len - i < 256 ? len - i : 256;
        T *acc = j->y + o * inner + i0 + i;
        const T *base = j->x + o * n * inner + i0 + i;
        T init = 0;
        if (kind == RK_PROD) init = 1;
        if (kind == RK_MAX || kind == RK_MIN || kind == RK_LOGSUMEXP) {
            for (int64_t q = 0; q < w; q++) acc[q] = base[q];
        } else {
            for (int64_t q = 0; q < w; q++) acc[q] = init;
        }
        for (int64_t r = 0; r < n; r++) {
            const T *p = base + r * inner;
            switch (kind) {
            case RK_SUM:
            case RK_MEAN:
            case RK_LOGSUM:
                for (int64_t q = 0; q < w; q++) acc[q] += p[q];
                break;
            case RK_L1:
                for (int64_t q = 0; q < w; q++) acc[q] += p[q] < 0 ? -p[q] : p[q];
                break;
            case RK_L2:
            case RK_SUMSQ:
                for (int64_t q = 0; q < w; q++) acc[q] += p[q] * p[q];
                break;
            case RK_PROD:
                for (int64_t q = 0; q < w; q++) acc[q] *= p[q];
                break;
            case RK_MAX:
            case RK_LOGSUMEXP:
                for (int64_t q = 0; q < w; q++) acc[q] = (p[q] > acc[q] || RNAN(p[q])) ? p[q] : acc[q];
                break;
            case RK_MIN:
                for (int64_t q = 0; q < w; q++) acc[q] = (p[q] < acc[q] || RNAN(p[q])) ? p[q] : acc[q];
                break;
            }
        }
        if (kind == RK_LOGSUMEXP && !IS_INT) {
            T s[256];
            for (int64_t q = 0; q < w; q++) s[q] = 0;
            for (int64_t r = 0; r < n; r++) {
                const T *p = base + r * inner;
                for (int64_t q = 0; q < w; q++) s[q] += (T)EXPF(p[q] - acc[q]);
            }
            for (int64_t q = 0; q < w; q++) {
                T m = acc[q];
                if (!RNAN(m) && !isinf((double)m)) acc[q] = (T)(log((double)s[q]) + (double)m);
            }
            continue;
        }
        if (kind == RK_MEAN || kind == RK_L2 || kind == RK_LOGSUM)
            for (int64_t q = 0; q < w; q++) acc[q] = RFN(post)(acc[q], n, kind);
    }
}
#undef RACC
#undef RACC_W
#undef RBLK

/* Units [b, e): unit u is block u % nblk of outer index u / nblk; a block's columns start and end
 * on 64-byte lines (vecs of them in a row of inner), the lines dealt out evenly */
static void RFN(strided_range)(void *arg, int64_t b, int64_t e) {
    const RFN(job) *j = arg;
    const int64_t per = 64 / (int64_t)sizeof(T);
    for (int64_t u = b; u < e; u++) {
        int64_t o = u / j->nblk, bi = u % j->nblk;
        int64_t i0 = bi * j->vecs / j->nblk * per, i1 = (bi + 1) * j->vecs / j->nblk * per;
        if (i1 > j->inner) i1 = j->inner;
        if (i0 < i1) RFN(strided_unit)(j, o, i0, i1);
    }
}

/* Reduces x viewed as [outer, n, inner] over n into y [outer, inner]; n > 0. */
static void RFN(reduce3)(kn_threadpool *pool, const T *x, T *y, int64_t outer, int64_t n, int64_t inner,
                         int kind) {
    RFN(job) j = {x, y, n, inner, 1, 1, kind, false};
    if (inner == 1) {
        int64_t grain = n >= 16384 ? 1 : 16384 / n;
        kn_parallel_for(pool, outer, grain, RFN(rows_range), &j);
        return;
    }
    /* blocks of at most 256 columns, and where there are few (a reduction over the channels of one
     * image: 1x256x56x56 over axis 1 made 13 blocks, 13 of 16 threads, one thread the 64-column
     * remainder) as many blocks as make the count a multiple of the threads, up to one line each */
    const int64_t per = 64 / (int64_t)sizeof(T), threads = kn_threadpool_size(pool);
    j.vecs = (inner + per - 1) / per;
    j.nblk = (inner + 255) / 256;
    if (threads > 1 && outer * j.nblk < 8 * threads)
        while ((outer * j.nblk) % threads && j.nblk < j.vecs) j.nblk++;
    j.regs = (double)outer * (double)n * (double)inner * sizeof(T) / (double)threads <= (double)(2 << 20);
    int64_t work = n * ((inner + j.nblk - 1) / j.nblk);
    int64_t grain = work >= 16384 ? 1 : 16384 / work;
    kn_parallel_for(pool, outer * j.nblk, grain, RFN(strided_range), &j);
}

#undef RFN
#undef RNAN
#undef RCAT
#undef RCAT_

/* float16 elementwise kernels (elementwise_f16.h: converted inside the vector loop): every result
 * must be the float32 result rounded once to float16, bit for bit. Unary operators run on every
 * float16 value (65536 bit patterns and a tail of 11 more); the reference is the operator's
 * float32 kernel on the same values, rounded by the scalar kn_f32_to_f16 (round to nearest even,
 * written independently of vcvtps2ph). Binary operators run on pairs of float16 values covering
 * NaN, infinities, zeros of both signs and subnormals, in every broadcast pattern of the row
 * loops (both inputs advancing, either one repeated, both repeated, tails shorter than a vector),
 * against the float formula written here. */
#include "backend/cpu/cpu.h"
#include "exec/exec.h"
#include "ops/op.h"
#include "test_op_call.h"
#include "unit.h"
#include "util/threadpool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Shape inference then the CPU kernel (test_op_call.h); *out owned by the caller. */
static kiln_status f16_run(const char *op, int opset, const kn_attr *attrs, int n_attrs, kn_threadpool *pool,
                           kn_tensor **in, int n_in, kn_tensor **out) {
    kn_node node;
    memset(&node, 0, sizeof node);
    node.name = "f16_node";
    node.op_type = op;
    node.domain = "";
    node.opset = opset;
    node.attrs = (kn_attr *)attrs;
    node.n_attrs = n_attrs;
    return toc_run(&node, pool, in, n_in, out);
}

static kn_tensor *new_tensor(kiln_dtype dt, int rank, const int64_t *dims) {
    kn_tensor *t = NULL;
    kn_tensor_new(dt, rank, dims, &t);
    return t;
}

/* A float32 copy of a float16 tensor (exact). */
static kn_tensor *widen(const kn_tensor *h) {
    kn_tensor *f = new_tensor(KILN_DTYPE_FLOAT, h->rank, h->dims);
    if (!f) return NULL;
    const int64_t n = kn_tensor_count(h);
    for (int64_t i = 0; i < n; i++) ((float *)f->data)[i] = kn_f16_to_f32(((const uint16_t *)h->data)[i]);
    return f;
}

static uint16_t bits_of(float f) { return kn_f32_to_f16(f); }
static bool half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

/* got[i] == want rounded once, NaN for NaN; returns the number of mismatches (the first few
 * reported). */
static int compare_rounded(const char *what, const kn_tensor *got, const float *want, const uint16_t *x,
                           const uint16_t *y) {
    int bad = 0;
    const int64_t n = kn_tensor_count(got);
    for (int64_t i = 0; i < n; i++) {
        const uint16_t g = ((const uint16_t *)got->data)[i], w = bits_of(want[i]);
        const bool ok = half_is_nan(w) ? half_is_nan(g) : g == w;
        if (!ok && bad++ < 4)
            CHECK_MSG(0, "%s: element %lld (x 0x%04x%s0x%04x): got 0x%04x, want 0x%04x (%.9g)", what, (long long)i,
                      x ? x[i] : 0, y ? ", y " : "", y ? y[i] : 0, g, w, (double)want[i]);
    }
    return bad;
}

/* ------------------------------------------------------------------ unary: every float16 value */

typedef struct un_case {
    const char *op;
    int opset;
    const char *attr;
    float value;        /* the float attribute attr, if any */
    const char *mode;   /* Gelu's approximate */
    float lo, hi;       /* Clip: bounds as inputs (float16 / float32 by the input's type) */
    bool clip;
} un_case;

static void check_unary_all_halves(const un_case *c, kn_threadpool *pool) {
    const int64_t n = 65536 + 11; /* every value, then a tail shorter than a vector */
    int64_t d[1] = {n}, d0[1] = {1};
    kn_tensor *xh = new_tensor(KILN_DTYPE_FLOAT16, 1, d);
    for (int64_t i = 0; i < n; i++) ((uint16_t *)xh->data)[i] = (uint16_t)(i * 40503u); /* a permutation */
    kn_tensor *xf = widen(xh);
    kn_attr at[1];
    memset(at, 0, sizeof at);
    int n_at = 0;
    if (c->attr) {
        at[0].name = c->attr;
        if (c->mode) at[0].type = KN_ATTR_STRING, at[0].s = c->mode, at[0].s_len = strlen(c->mode);
        else at[0].type = KN_ATTR_FLOAT, at[0].f = c->value;
        n_at = 1;
    }
    kn_tensor *loh = NULL, *hih = NULL, *lof = NULL, *hif = NULL;
    int n_in = 1;
    if (c->clip) {
        loh = new_tensor(KILN_DTYPE_FLOAT16, 0, d0), hih = new_tensor(KILN_DTYPE_FLOAT16, 0, d0);
        ((uint16_t *)loh->data)[0] = bits_of(c->lo), ((uint16_t *)hih->data)[0] = bits_of(c->hi);
        lof = widen(loh), hif = widen(hih);
        n_in = 3;
    }
    kn_tensor *inh[3] = {xh, loh, hih}, *inf[3] = {xf, lof, hif}, *oh = NULL, *of = NULL;
    CHECK_STATUS(f16_run(c->op, c->opset, at, n_at, pool, inh, n_in, &oh), KILN_OK);
    CHECK_STATUS(f16_run(c->op, c->opset, at, n_at, pool, inf, n_in, &of), KILN_OK);
    CHECK(oh && oh->dtype == KILN_DTYPE_FLOAT16 && of && of->dtype == KILN_DTYPE_FLOAT);
    if (oh && of) {
        char what[64];
        snprintf(what, sizeof what, "%s%s%s", c->op, c->mode ? " " : "", c->mode ? c->mode : "");
        compare_rounded(what, oh, of->data, xh->data, NULL);
    }
    kn_tensor_free(oh);
    kn_tensor_free(of);
    kn_tensor_free(xh);
    kn_tensor_free(xf);
    kn_tensor_free(loh);
    kn_tensor_free(hih);
    kn_tensor_free(lof);
    kn_tensor_free(hif);
}

static const un_case k_unary[] = {
    {"Relu", 14, NULL, 0, NULL, 0, 0, false},
    {"Abs", 13, NULL, 0, NULL, 0, 0, false},
    {"Neg", 13, NULL, 0, NULL, 0, 0, false},
    {"Sqrt", 13, NULL, 0, NULL, 0, 0, false},
    {"Reciprocal", 13, NULL, 0, NULL, 0, 0, false},
    {"Floor", 13, NULL, 0, NULL, 0, 0, false},
    {"Ceil", 13, NULL, 0, NULL, 0, 0, false},
    {"Round", 11, NULL, 0, NULL, 0, 0, false},
    {"Sign", 13, NULL, 0, NULL, 0, 0, false},
    {"LeakyRelu", 16, "alpha", 0.1f, NULL, 0, 0, false},
    {"ThresholdedRelu", 10, "alpha", 0.75f, NULL, 0, 0, false},
    {"HardSigmoid", 6, "alpha", 0.3f, NULL, 0, 0, false},
    {"HardSwish", 14, NULL, 0, NULL, 0, 0, false},
    {"Softsign", 1, NULL, 0, NULL, 0, 0, false},
    {"Clip", 13, NULL, 0, NULL, 0.0f, 6.0f, true},
    {"Clip", 13, NULL, 0, NULL, -0.375f, 1.5f, true},
    {"Exp", 13, NULL, 0, NULL, 0, 0, false},
    {"Tanh", 13, NULL, 0, NULL, 0, 0, false},
    {"Erf", 13, NULL, 0, NULL, 0, 0, false},
    {"Sigmoid", 13, NULL, 0, NULL, 0, 0, false},
    {"Gelu", 20, "approximate", 0, "none", 0, 0, false},
    {"Gelu", 20, "approximate", 0, "tanh", 0, 0, false},
    /* no vector form: the chunked path, the same contract */
    {"Elu", 6, "alpha", 1.0f, NULL, 0, 0, false},
    {"Softplus", 1, NULL, 0, NULL, 0, 0, false},
};

KN_TEST(ew_f16_unary_every_value) {
    for (size_t i = 0; i < sizeof k_unary / sizeof k_unary[0]; i++) check_unary_all_halves(&k_unary[i], NULL);
}

/* split over two threads: each task's range starts and ends anywhere, tails included */
KN_TEST(ew_f16_unary_threads) {
    kn_threadpool *pool = NULL;
    kn_threadpool_create(2, &pool);
    check_unary_all_halves(&(un_case){"Sigmoid", 13, NULL, 0, NULL, 0, 0, false}, pool);
    check_unary_all_halves(&(un_case){"LeakyRelu", 16, "alpha", 0.01f, NULL, 0, 0, false}, pool);
    check_unary_all_halves(&(un_case){"Gelu", 20, "approximate", 0, "none", 0, 0, false}, pool);
    kn_threadpool_destroy(pool);
}

/* ------------------------------------------------------------------ binary: broadcast patterns */

static float ref_binary(const char *op, float x, float y) {
    if (!strcmp(op, "Add") || !strcmp(op, "Sum")) return x + y;
    if (!strcmp(op, "Sub")) return x - y;
    if (!strcmp(op, "Mul")) return x * y;
    if (!strcmp(op, "Div")) return x / y;
    if (!strcmp(op, "Max")) return x != x ? x : (x > y ? x : y);
    if (!strcmp(op, "Min")) return x != x ? x : (x < y ? x : y);
    if (!strcmp(op, "PRelu")) return x < 0 ? y * x : x;
    if (!strcmp(op, "Equal")) return x == y;
    if (!strcmp(op, "Less")) return x < y;
    if (!strcmp(op, "LessOrEqual")) return x <= y;
    if (!strcmp(op, "Greater")) return x > y;
    if (!strcmp(op, "GreaterOrEqual")) return x >= y;
    return NAN;
}
static bool is_comparison(const char *op) {
    return !strcmp(op, "Equal") || !strcmp(op, "Less") || !strcmp(op, "LessOrEqual") || !strcmp(op, "Greater") ||
           !strcmp(op, "GreaterOrEqual");
}

/* Values for the binary cases: a pseudo-random walk over every bit pattern, with the special values
 * planted at fixed places (both operands meet NaN, infinities, zeros and subnormals). */
static void fill_halves(uint16_t *p, int64_t n, uint32_t seed) {
    static const uint16_t special[] = {0x7e00, 0xfe00, 0x7c00, 0xfc00, 0x0000, 0x8000, 0x0001, 0x83ff,
                                       0x3c00, 0xbc00, 0x7bff, 0xfbff, 0x0400, 0x3555};
    uint32_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (uint16_t)(s >> 16);
        /* mostly moderate magnitudes (products and sums stay finite), some anywhere */
        if ((s >> 8) & 3) p[i] = (uint16_t)((p[i] & 0x83ff) | ((0x3000 + ((s >> 4) & 0x0c00)) & 0x7c00));
    }
    for (int64_t i = 0; i < n; i += 7) p[i] = special[(i / 7 + seed) % (sizeof special / sizeof special[0])];
}

/* op(a, b) in float16 against ref_binary of the widened values at the broadcast indices. */
static void check_binary(const char *op, int rank_a, const int64_t *da, int rank_b, const int64_t *db,
                         kn_threadpool *pool) {
    kn_tensor *a = new_tensor(KILN_DTYPE_FLOAT16, rank_a, da), *b = new_tensor(KILN_DTYPE_FLOAT16, rank_b, db);
    fill_halves(a->data, kn_tensor_count(a), 1);
    fill_halves(b->data, kn_tensor_count(b), 2);
    kn_tensor *in[2] = {a, b}, *o = NULL;
    CHECK_STATUS(f16_run(op, !strcmp(op, "PRelu") ? 16 : 14, NULL, 0, pool, in, 2, &o), KILN_OK);
    if (o) {
        /* broadcast by hand: both inputs are right-aligned to the output's rank */
        const int r = o->rank;
        const int64_t n = kn_tensor_count(o);
        float *want = malloc(sizeof(float) * (size_t)n);
        uint16_t *xa = malloc(sizeof(uint16_t) * (size_t)n), *xb = malloc(sizeof(uint16_t) * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            int64_t rest = i, ia = 0, ib = 0, sa = 1, sb = 1;
            for (int dd = r - 1; dd >= 0; dd--) {
                const int64_t idx = rest % o->dims[dd];
                rest /= o->dims[dd];
                const int ka = dd - (r - rank_a), kb = dd - (r - rank_b);
                if (ka >= 0) {
                    if (da[ka] > 1) ia += idx * sa;
                    sa *= da[ka];
                }
                if (kb >= 0) {
                    if (db[kb] > 1) ib += idx * sb;
                    sb *= db[kb];
                }
            }
            xa[i] = ((uint16_t *)a->data)[ia], xb[i] = ((uint16_t *)b->data)[ib];
            want[i] = ref_binary(op, kn_f16_to_f32(xa[i]), kn_f16_to_f32(xb[i]));
        }
        if (is_comparison(op)) {
            CHECK(o->dtype == KILN_DTYPE_BOOL);
            int bad = 0;
            for (int64_t i = 0; i < n && o->dtype == KILN_DTYPE_BOOL; i++) {
                const uint8_t g = ((const uint8_t *)o->data)[i];
                if (g != (uint8_t)want[i] && bad++ < 4)
                    CHECK_MSG(0, "%s: element %lld (x 0x%04x, y 0x%04x): got %d, want %d", op, (long long)i, xa[i],
                              xb[i], g, (int)want[i]);
            }
        } else {
            compare_rounded(op, o, want, xa, xb);
        }
        free(want);
        free(xa);
        free(xb);
    }
    kn_tensor_free(o);
    kn_tensor_free(a);
    kn_tensor_free(b);
}

KN_TEST(ew_f16_binary_patterns) {
    static const char *ops[] = {"Add",   "Sub",  "Mul",         "Div",     "Max",           "Min",
                                "PRelu", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal"};
    const int64_t same[1] = {4099}, rows[2] = {37, 29}, row[1] = {29}, col[2] = {37, 1}, one[1] = {1};
    const int64_t tiny[1] = {5};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        const char *op = ops[k];
        check_binary(op, 1, same, 1, same, NULL); /* both advance, 16/8/tail */
        check_binary(op, 1, tiny, 1, tiny, NULL); /* only a tail */
        check_binary(op, 2, rows, 1, row, NULL);  /* rows: b repeats per row, advances within */
        check_binary(op, 2, rows, 2, col, NULL);  /* b one value per row (step 0) */
        check_binary(op, 1, same, 1, one, NULL);  /* b a scalar */
        if (!strcmp(op, "PRelu")) continue;       /* the slope broadcasts to X, not X to it */
        check_binary(op, 2, col, 2, rows, NULL);  /* a one value per row */
        check_binary(op, 1, one, 1, same, NULL);  /* a a scalar */
    }
    kn_threadpool *pool = NULL;
    kn_threadpool_create(2, &pool);
    const int64_t big[1] = {200003};
    check_binary("Add", 1, big, 1, big, pool);
    check_binary("Max", 1, big, 1, one, pool);
    kn_threadpool_destroy(pool);
}

/* Sum and Mean of three float16 inputs (the first two repeat along the rows, the third along the
 * columns): the float32 sum (a + b) + c of the widened values (divided by 3 for Mean) rounded once,
 * as ONNX Runtime computes it; the values moderate and of mixed signs so that sums round */
KN_TEST(ew_f16_sum_mean_rounded_once) {
    const int64_t dc[2] = {6, 1}, dr[2] = {1, 21};
    for (int mean = 0; mean < 2; mean++) {
        kn_tensor *a = new_tensor(KILN_DTYPE_FLOAT16, 2, dc), *b = new_tensor(KILN_DTYPE_FLOAT16, 2, dc);
        kn_tensor *c = new_tensor(KILN_DTYPE_FLOAT16, 2, dr), *o = NULL;
        fill_halves(a->data, 6, 3);
        fill_halves(b->data, 6, 4);
        fill_halves(c->data, 21, 5);
        kn_tensor *in[3] = {a, b, c};
        CHECK_STATUS(f16_run(mean ? "Mean" : "Sum", 13, NULL, 0, NULL, in, 3, &o), KILN_OK);
        if (o) {
            float want[126];
            for (int r = 0; r < 6; r++)
                for (int j = 0; j < 21; j++) {
                    const float s3 = (kn_f16_to_f32(((uint16_t *)a->data)[r]) + kn_f16_to_f32(((uint16_t *)b->data)[r])) +
                                     kn_f16_to_f32(((uint16_t *)c->data)[j]);
                    want[r * 21 + j] = mean ? s3 / 3.0f : s3;
                }
            compare_rounded(mean ? "Mean" : "Sum", o, want, NULL, NULL);
        }
        kn_tensor_free(o);
        kn_tensor_free(a);
        kn_tensor_free(b);
        kn_tensor_free(c);
    }
    /* more elements than a chunk, two threads, a scalar among the inputs */
    const int64_t dl[1] = {5000}, d1[1] = {1};
    kn_threadpool *pool = NULL;
    kn_threadpool_create(2, &pool);
    kn_tensor *a = new_tensor(KILN_DTYPE_FLOAT16, 1, dl), *b = new_tensor(KILN_DTYPE_FLOAT16, 1, d1);
    kn_tensor *c = new_tensor(KILN_DTYPE_FLOAT16, 1, dl), *o = NULL;
    fill_halves(a->data, 5000, 6);
    fill_halves(b->data, 1, 7);
    fill_halves(c->data, 5000, 8);
    kn_tensor *in[3] = {a, b, c};
    CHECK_STATUS(f16_run("Sum", 13, NULL, 0, pool, in, 3, &o), KILN_OK);
    if (o) {
        float *want = malloc(sizeof(float) * 5000);
        for (int i = 0; i < 5000; i++)
            want[i] = (kn_f16_to_f32(((uint16_t *)a->data)[i]) + kn_f16_to_f32(((uint16_t *)b->data)[0])) +
                      kn_f16_to_f32(((uint16_t *)c->data)[i]);
        compare_rounded("Sum of 5000", o, want, NULL, NULL);
        free(want);
    }
    kn_tensor_free(o);
    kn_tensor_free(a);
    kn_tensor_free(b);
    kn_tensor_free(c);
    kn_threadpool_destroy(pool);
}

/* Floor and Ceil in float32 against libm bit for bit, signed zeros included (the float16 forms
 * are checked against these): ceil(-0.7) is -0, which r + 1 with r = rint(-0.7) = -1 is not */
KN_TEST(ew_floor_ceil_signed_zero) {
    const float v[12] = {-0.7f, -0.5f, -0.3f, -0.0f, 0.0f, 0.3f, 0.5f, 0.7f, -1.5f, 2.5f, -1e-30f, 8388607.5f};
    int64_t d[1] = {12};
    for (int c = 0; c < 2; c++) {
        kn_tensor *x = new_tensor(KILN_DTYPE_FLOAT, 1, d), *o = NULL;
        memcpy(x->data, v, sizeof v);
        kn_tensor *in[1] = {x};
        CHECK_STATUS(f16_run(c ? "Ceil" : "Floor", 13, NULL, 0, NULL, in, 1, &o), KILN_OK);
        if (o)
            for (int i = 0; i < 12; i++) {
                const float want = c ? ceilf(v[i]) : floorf(v[i]), got = ((float *)o->data)[i];
                CHECK_MSG(got == want && signbit(got) == signbit(want), "%s(%g) = %g, want %g", c ? "Ceil" : "Floor",
                          (double)v[i], (double)got, (double)want);
            }
        kn_tensor_free(o);
        kn_tensor_free(x);
    }
}

/* Pow of float16 by one exponent (float16 or float): every float16 value, against the float32
 * kernel's result (x * x, x * x * x, sqrt, 1 / x, powf) rounded once; and the float32 kernel
 * against C's pow in double rounded once, for the exponents whose shortcut is exact (x * x, x,
 * sqrt but at -0 and -inf, 1 / x: one rounding in double then one to float gives the float
 * operation's result), so that both paths keeping sqrt(-0) = -0 or sqrt(-inf) = NaN fails it */
KN_TEST(ew_f16_pow_scalar) {
    static const float exps[] = {2.0f, 3.0f, 1.0f, 0.5f, -1.0f, 1.5f, -0.25f};
    const int64_t n = 65536 + 11;
    int64_t d[1] = {n};
    kn_tensor *xh = new_tensor(KILN_DTYPE_FLOAT16, 1, d);
    for (int64_t i = 0; i < n; i++) ((uint16_t *)xh->data)[i] = (uint16_t)(i * 40503u);
    kn_tensor *xf = widen(xh);
    for (size_t k = 0; k < sizeof exps / sizeof exps[0]; k++)
        for (int et = 0; et < 2; et++) { /* exponent float16, then float */
            kn_tensor *eh = new_tensor(et ? KILN_DTYPE_FLOAT : KILN_DTYPE_FLOAT16, 0, NULL);
            kn_tensor *ef = new_tensor(KILN_DTYPE_FLOAT, 0, NULL);
            if (et) ((float *)eh->data)[0] = exps[k];
            else ((uint16_t *)eh->data)[0] = bits_of(exps[k]);
            ((float *)ef->data)[0] = exps[k];
            kn_tensor *inh[2] = {xh, eh}, *inf[2] = {xf, ef}, *oh = NULL, *of = NULL;
            CHECK_STATUS(f16_run("Pow", 15, NULL, 0, NULL, inh, 2, &oh), KILN_OK);
            CHECK_STATUS(f16_run("Pow", 15, NULL, 0, NULL, inf, 2, &of), KILN_OK);
            if (oh && of) {
                char what[64];
                snprintf(what, sizeof what, "Pow by %g (%s)", (double)exps[k], et ? "float" : "float16");
                compare_rounded(what, oh, of->data, xh->data, NULL);
                const float ek = exps[k];
                if (et && (ek == 2.0f || ek == 1.0f || ek == 0.5f || ek == -1.0f)) {
                    int bad = 0;
                    for (int64_t i = 0; i < n; i++) {
                        const float x = ((const float *)xf->data)[i], got = ((const float *)of->data)[i];
                        const float want = (float)pow((double)x, (double)ek);
                        const bool ok = isnan(want) ? isnan(got) : memcmp(&got, &want, sizeof got) == 0;
                        if (!ok && bad++ < 4)
                            CHECK_MSG(0, "Pow(%g, %g) in float = %g, want pow's %g", (double)x, (double)ek, (double)got,
                                      (double)want);
                    }
                }
            }
            kn_tensor_free(oh);
            kn_tensor_free(of);
            kn_tensor_free(eh);
            kn_tensor_free(ef);
        }
    kn_tensor_free(xh);
    kn_tensor_free(xf);
}

/* float16 reductions (nn_reduce.c through kn_nn_to_f32 / kn_nn_from_f32, vector conversions): the
 * float32 reduction of the widened values rounded once, along either axis of [3, 21849] (NaN and
 * infinities among the values: Max/Min propagate them, Sum/Mean give NaN; tails of every length) */
KN_TEST(ew_f16_reduce) {
    static const char *ops[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ArgMax"};
    const int64_t d[2] = {3, 21849}, one[1] = {1};
    kn_tensor *xh = new_tensor(KILN_DTYPE_FLOAT16, 2, d);
    for (int64_t i = 0; i < d[0] * d[1]; i++) {
        uint16_t v = (uint16_t)(i * 40503u);
        /* finite halves of moderate size in row 0 (sums stay finite); every value in rows 1-2 */
        if (i < d[1]) v = (uint16_t)((v & 0x83ff) | 0x3800);
        ((uint16_t *)xh->data)[i] = v;
    }
    kn_tensor *xf = widen(xh);
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        for (int64_t axis = 0; axis < 2; axis++) {
            const bool arg = !strcmp(ops[k], "ArgMax");
            kn_tensor *ax = new_tensor(KILN_DTYPE_INT64, 1, one);
            ((int64_t *)ax->data)[0] = axis;
            kn_attr at[1];
            memset(at, 0, sizeof at);
            at[0].name = "axis", at[0].type = KN_ATTR_INT, at[0].i = axis;
            kn_tensor *inh[2] = {xh, ax}, *inf[2] = {xf, ax}, *oh = NULL, *of = NULL;
            CHECK_STATUS(f16_run(ops[k], arg ? 13 : 18, arg ? at : NULL, arg ? 1 : 0, NULL, inh, arg ? 1 : 2, &oh), KILN_OK);
            CHECK_STATUS(f16_run(ops[k], arg ? 13 : 18, arg ? at : NULL, arg ? 1 : 0, NULL, inf, arg ? 1 : 2, &of), KILN_OK);
            if (oh && of) {
                char what[64];
                snprintf(what, sizeof what, "%s axis %lld", ops[k], (long long)axis);
                if (arg) {
                    CHECK_MSG(oh->nbytes == of->nbytes && !memcmp(oh->data, of->data, oh->nbytes), "%s: indices differ", what);
                } else {
                    compare_rounded(what, oh, of->data, NULL, NULL);
                }
            }
            kn_tensor_free(oh);
            kn_tensor_free(of);
            kn_tensor_free(ax);
        }
    kn_tensor_free(xh);
    kn_tensor_free(xf);
}

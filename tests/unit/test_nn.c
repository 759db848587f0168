/* Unit tests of the nn family's CPU kernels: edge cases the ONNX node tests do not reach, and
 * RNN cells against small references computed here, independently, in double precision. */
#include "backend/cpu/nn_internal.h"
#include "ops/op.h"
#include "test_nodes.h"
#include "unit.h"

#include <stdlib.h>

/* ------------------------------------------------------------------ helpers */

/* tnode, tn_init, tn_int, ...: tests/unit/test_nodes.h */

static kn_tensor *tf(int rank, const int64_t *dims, const float *vals) {
    kn_tensor *t = NULL;
    if (kn_tensor_new(KILN_DTYPE_FLOAT, rank, dims, &t) != KILN_OK) return NULL;
    if (vals) memcpy(t->data, vals, t->nbytes);
    return t;
}
static kn_tensor *trand(int rank, const int64_t *dims, unsigned *seed, float scale) {
    kn_tensor *t = tf(rank, dims, NULL);
    float *p = t->data;
    for (int64_t i = 0; i < kn_tensor_count(t); i++) {
        *seed = *seed * 1103515245u + 12345u;
        p[i] = ((float)((*seed >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f) * scale;
    }
    return t;
}

static kiln_status run_kernel(kn_kernel_fn fn, tnode *t, kn_tensor **in, int n_in, kn_tensor **out, int n_out) {
    kn_kernel_ctx c = {0};
    c.node = &t->node;
    c.in = in;
    c.n_inputs = n_in;
    c.out = out;
    c.n_outputs = n_out;
    return fn(&c);
}

/* ------------------------------------------------------------------ math helpers */

KN_TEST(nn_expf_accuracy) {
    double worst = 0;
    for (double x = -87.0; x <= 88.0; x += 0.01237) {
        double want = exp((float)x), got = kn_nn_expf((float)x);
        double rel = fabs(got - want) / want;
        if (rel > worst) worst = rel;
    }
    CHECK_MSG(worst < 4e-7, "worst relative error %g", worst);
    CHECK(kn_nn_expf(-INFINITY) == 0.0f);
    CHECK(kn_nn_expf(-200.0f) == 0.0f);
    CHECK(kn_nn_expf(0.0f) == 1.0f);
    CHECK(isnan(kn_nn_expf(NAN)));
    CHECK(isfinite(kn_nn_expf(1000.0f)) && kn_nn_expf(1000.0f) > 1e38f);
}

KN_TEST(nn_tanh_sigmoid_accuracy) {
    double worst_t = 0, worst_s = 0;
    for (double x = -12.0; x <= 12.0; x += 0.000731) {
        float xf = (float)x;
        double t = fabs(kn_nn_tanhf(xf) - tanh(xf));
        double s = fabs(kn_nn_sigmoidf(xf) - 1.0 / (1.0 + exp(-(double)xf)));
        /* relative near 0 for tanh (the polynomial branch), absolute elsewhere */
        if (fabs(xf) < 0.625 && xf != 0) t /= fabs(tanh(xf));
        if (t > worst_t) worst_t = t;
        if (s > worst_s) worst_s = s;
    }
    CHECK_MSG(worst_t < 5e-7, "tanh worst error %g", worst_t);
    CHECK_MSG(worst_s < 3e-7, "sigmoid worst error %g", worst_s);
    CHECK(kn_nn_tanhf(1e-8f) == 1e-8f);
    CHECK(kn_nn_tanhf(50.0f) == 1.0f && kn_nn_tanhf(-50.0f) == -1.0f);
    CHECK(kn_nn_sigmoidf(-200.0f) >= 0.0f && kn_nn_sigmoidf(-200.0f) < 1e-30f);
}

KN_TEST(nn_row_max_min_nan) {
    float v[200];
    for (int i = 0; i < 200; i++) v[i] = (float)((i * 37) % 101) - 50.0f;
    for (int n = 1; n <= 200; n++) {
        float mx = v[0], mn = v[0];
        for (int i = 1; i < n; i++) mx = v[i] > mx ? v[i] : mx, mn = v[i] < mn ? v[i] : mn;
        CHECK_NEAR(kn_nn_row_maxf(v, n), mx, 0);
        CHECK_NEAR(kn_nn_row_minf(v, n), mn, 0);
        /* the extreme at every position (the 4-vector blocks, single vectors, the last n mod 8) */
        for (int at = 0; at < n; at++) {
            const float keep = v[at];
            v[at] = 1000.0f;
            CHECK_MSG(kn_nn_row_maxf(v, n) == 1000.0f, "n %d, max at %d", n, at);
            v[at] = -1000.0f;
            CHECK_MSG(kn_nn_row_minf(v, n) == -1000.0f, "n %d, min at %d", n, at);
            v[at] = keep;
        }
    }
    v[133] = NAN;
    CHECK(isnan(kn_nn_row_maxf(v, 200)));
    CHECK(isnan(kn_nn_row_minf(v, 200)));
    v[133] = 0.0f;
    /* a NaN anywhere (the vector blocks, the remainder) at every length */
    for (int n = 1; n <= 200; n++)
        for (int at = 0; at < n; at++) {
            const float keep = v[at];
            v[at] = NAN;
            CHECK_MSG(isnan(kn_nn_row_maxf(v, n)) && isnan(kn_nn_row_minf(v, n)), "n %d, NaN at %d", n, at);
            v[at] = keep;
        }
}

/* ------------------------------------------------------------------ softmax */

/* The double-precision reference of the Softmax tests: a row's (or column's: `stride` apart)
 * maximum and sum of exp(x - max), and the value Softmax (lg 0) or LogSoftmax (lg 1) gives x at. */
typedef struct softmax_ref {
    double m, s;
} softmax_ref;

static softmax_ref softmax_ref_of(const float *x, int n, int stride) {
    softmax_ref r = {-INFINITY, 0};
    for (int i = 0; i < n; i++) r.m = fmax(r.m, x[i * stride]);
    for (int i = 0; i < n; i++) r.s += exp((double)x[i * stride] - r.m);
    return r;
}

static double softmax_ref_at(softmax_ref r, double xi, int lg) {
    return lg ? (xi - r.m) - log(r.s) : exp(xi - r.m) / r.s;
}

KN_TEST(nn_softmax_large_values_do_not_overflow) {
    int64_t d[] = {2, 3};
    float x[] = {1000.f, 1001.f, 1002.f, -INFINITY, 5.f, -INFINITY};
    kn_tensor *in = tf(2, d, x), *out = tf(2, d, NULL);
    tnode t;
    tn_init(&t, "Softmax", 13);
    CHECK_STATUS(run_kernel(kn_cpu_softmax, &t, &in, 1, &out, 1), KILN_OK);
    const float *y = out->data;
    double e1 = exp(-1.0), e2 = exp(-2.0), s = 1 + e1 + e2;
    CHECK_NEAR(y[0], e2 / s, 1e-6);
    CHECK_NEAR(y[1], e1 / s, 1e-6);
    CHECK_NEAR(y[2], 1 / s, 1e-6);
    CHECK(y[3] == 0.0f && y[5] == 0.0f); /* masked entries are exactly zero */
    CHECK_NEAR(y[4], 1.0, 1e-7);
    tn_init(&t, "LogSoftmax", 13);
    CHECK_STATUS(run_kernel(kn_cpu_softmax, &t, &in, 1, &out, 1), KILN_OK);
    CHECK_NEAR(y[2], -log(s), 1e-6);
    CHECK_NEAR(y[0], -2 - log(s), 1e-6);
    CHECK(isinf(y[3]) && y[3] < 0);
    kn_tensor_free(in);
    kn_tensor_free(out);
}

/* rows of every length from 1 to 80 (the vector kernels' blocks and remainders), with masked
 * (-inf) entries and a wide range of values, Softmax and LogSoftmax against double precision */
KN_TEST(nn_softmax_row_lengths_against_double) {
    for (int n = 1; n <= 80; n++) {
        int64_t d[] = {3, n};
        float x[240];
        for (int i = 0; i < 3 * n; i++) x[i] = (float)(((i * 7919) % 613) - 300) * 0.05f;
        if (n > 1) x[n + n / 2] = -INFINITY; /* row 1 */
        kn_tensor *in = tf(2, d, x), *out = tf(2, d, NULL);
        for (int lg = 0; lg < 2; lg++) {
            tnode t;
            tn_init(&t, lg ? "LogSoftmax" : "Softmax", 13);
            CHECK_STATUS(run_kernel(kn_cpu_softmax, &t, &in, 1, &out, 1), KILN_OK);
            const float *y = out->data;
            for (int r = 0; r < 3; r++) {
                const softmax_ref ref = softmax_ref_of(x + r * n, n, 1);
                const double m = ref.m;
                for (int i = 0; i < n; i++) {
                    const double xi = x[r * n + i];
                    if (isinf(xi)) {
                        CHECK_MSG(lg ? isinf(y[r * n + i]) : y[r * n + i] == 0.0f, "n %d: masked entry gives %g", n, y[r * n + i]);
                        continue;
                    }
                    const double want = softmax_ref_at(ref, xi, lg);
                    /* x - max rounds to float: exp magnifies that by |x - max| */
                    const double tol = lg ? 2e-6 * (1 + fabs(want)) : want * (1e-6 + 1.2e-7 * (m - xi)) + 1e-30;
                    CHECK_MSG(fabs(y[r * n + i] - want) <= tol, "n %d row %d [%d]: %s %.9g, want %.9g", n, r, i,
                              lg ? "log" : "", y[r * n + i], want);
                }
            }
        }
        kn_tensor_free(in);
        kn_tensor_free(out);
    }
}

/* Softmax and LogSoftmax over rows in groups (1-9 rows: the four-row kernel and its remainder
 * for rows up to 1024, the chained rows beyond, which take each row's maximum in the previous
 * row's exponential pass) against double precision: lengths around the 16/32/64-lane steps and
 * both sides of 1024, entries just inside and past the exponential's underflow limit (max - x
 * near 126 ln2 = 87.3365: subnormal or exactly 0), masked (-inf) entries, a NaN entry and a fully
 * masked row (both give a NaN row), the largest value last (the next row's maximum read in the
 * tail). */
KN_TEST(nn_softmax_row_groups_against_double) {
    static const int lens[] = {1, 15, 16, 17, 33, 64, 100, 128, 1000, 1024, 1025, 1100, 4099};
    static const float deep[] = {87.30f, 87.33f, 87.336f, 87.337f, 87.4f, 100.0f};
    uint32_t seed = 2024;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int rows = 1; rows <= 9; rows += (rows < 6 ? 1 : 3)) {
            const int n = lens[li];
            int64_t d[] = {rows, n};
            float *x = malloc(sizeof(float) * (size_t)(rows * n));
            for (int r = 0; r < rows; r++) {
                float *xr = x + (size_t)r * n;
                for (int i = 0; i < n; i++) {
                    seed = seed * 1664525u + 1013904223u;
                    xr[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 40.0f;
                    if ((seed & 31) == 5) xr[i] = -INFINITY;
                }
                xr[n - 1] = 25.0f + (float)r; /* the row's maximum, in the last (tail) vector */
                for (int q = 0; q < 6 && q + 1 < n; q++) xr[q * 7 % (n - 1)] = xr[n - 1] - deep[q];
            }
            if (rows >= 3) x[(size_t)n + n / 3] = NAN;                /* row 1: NaN */
            if (rows >= 4)
                for (int i = 0; i < n; i++) x[(size_t)3 * n + i] = -INFINITY; /* row 3: NaN */
            kn_tensor *in = tf(2, d, x), *out = tf(2, d, NULL);
            for (int lg = 0; lg < 2; lg++) {
                tnode t;
                tn_init(&t, lg ? "LogSoftmax" : "Softmax", 13);
                CHECK_STATUS(run_kernel(kn_cpu_softmax, &t, &in, 1, &out, 1), KILN_OK);
                const float *y = out->data;
                int bad = 0;
                for (int r = 0; r < rows; r++) {
                    const float *xr = x + (size_t)r * n, *yr = y + (size_t)r * n;
                    const int nan_row = (rows >= 3 && r == 1) || (rows >= 4 && r == 3);
                    const softmax_ref ref = softmax_ref_of(xr, n, 1);
                    const double m = ref.m;
                    for (int i = 0; i < n; i++) {
                        const double xi = xr[i];
                        int ok;
                        if (nan_row) ok = isnan(yr[i]);
                        else if (isinf(xi)) ok = lg ? isinf(yr[i]) && yr[i] < 0 : yr[i] == 0.0f;
                        else if (!lg && m - xi > 87.3366) ok = yr[i] == 0.0f; /* past the limit: exactly 0 */
                        else {
                            const double want = softmax_ref_at(ref, xi, lg);
                            /* x - max rounds to float: exp magnifies that by |x - max|; two
                             * roundings of a subnormal */
                            const double tol = lg ? 2e-6 * (1 + fabs(want)) : want * (2e-6 + 1.2e-7 * (m - xi)) + 3e-45;
                            ok = fabs(yr[i] - want) <= tol;
                            if (!ok && bad < 3)
                                printf("    rows %d n %d row %d [%d] %s: %.9g, want %.9g\n", rows, n, r, i, lg ? "log" : "",
                                       yr[i], want);
                        }
                        bad += !ok;
                    }
                }
                CHECK_MSG(bad == 0, "%s %d x %d: %d values off", lg ? "LogSoftmax" : "Softmax", rows, n, bad);
            }
            kn_tensor_free(in);
            kn_tensor_free(out);
            free(x);
        }
}

/* Softmax over a middle axis ([2, n, inner], axis 1): inner widths around the vector width and
 * above the kernel's 256-column chunks, a masked entry, against double precision */
KN_TEST(nn_softmax_middle_axis_against_double) {
    static const int inners[] = {1, 3, 8, 13, 300};
    static float x[2 * 5 * 300];
    for (int q = 0; q < 5; q++) {
        const int n = 5, inner = inners[q], cnt = 2 * n * inner;
        int64_t d[] = {2, n, inner};
        for (int i = 0; i < cnt; i++) x[i] = (float)(((i * 7919) % 613) - 300) * 0.05f;
        x[inner + inner / 2] = -INFINITY;
        kn_tensor *in = tf(3, d, x), *out = tf(3, d, NULL);
        for (int lg = 0; lg < 2; lg++) {
            tnode t;
            tn_init(&t, lg ? "LogSoftmax" : "Softmax", 13);
            tn_int(&t, "axis", 1);
            CHECK_STATUS(run_kernel(kn_cpu_softmax, &t, &in, 1, &out, 1), KILN_OK);
            const float *y = out->data;
            for (int o = 0; o < 2; o++)
                for (int i = 0; i < inner; i++) {
                    const softmax_ref ref = softmax_ref_of(x + o * n * inner + i, n, inner);
                    const double m = ref.m;
                    for (int r = 0; r < n; r++) {
                        const int at = (o * n + r) * inner + i;
                        const double xi = x[at];
                        if (isinf(xi)) {
                            CHECK_MSG(lg ? isinf(y[at]) : y[at] == 0.0f, "inner %d: masked entry gives %g", inner, y[at]);
                            continue;
                        }
                        const double want = softmax_ref_at(ref, xi, lg);
                        const double tol = lg ? 2e-6 * (1 + fabs(want)) : want * (1e-6 + 1.2e-7 * (m - xi)) + 1e-30;
                        CHECK_MSG(fabs(y[at] - want) <= tol, "inner %d [%d]: %.9g, want %.9g", inner, at, y[at], want);
                    }
                }
        }
        kn_tensor_free(in);
        kn_tensor_free(out);
    }
}

/* LpNormalization p = 1 and 2 along the last axis (the float row path) and a middle axis (the
 * general one), rows of 1-37 elements and an all-zero row, against double precision */
KN_TEST(nn_lpnorm_against_double) {
    static float x[3 * 37 * 2];
    for (int n = 1; n <= 37; n++)
        for (int p = 1; p <= 2; p++)
            for (int mid = 0; mid < 2; mid++) {
                const int inner = mid ? 2 : 1, cnt = 3 * n * inner;
                for (int i = 0; i < cnt; i++) x[i] = (float)(((i * 7919) % 613) - 300) * 0.013f;
                for (int i = 0; i < n * inner; i++) x[n * inner + i] = 0.0f; /* row 1: zeros */
                int64_t d3[] = {3, n, inner};
                kn_tensor *in = tf(3, d3, x), *out = tf(3, d3, NULL);
                tnode t;
                tn_init(&t, "LpNormalization", 1);
                tn_int(&t, "p", p);
                tn_int(&t, "axis", 1);
                CHECK_STATUS(run_kernel(kn_cpu_lpnorm, &t, &in, 1, &out, 1), KILN_OK);
                const float *y = out->data;
                for (int o = 0; o < 3; o++)
                    for (int i = 0; i < inner; i++) {
                        double s = 0;
                        for (int r = 0; r < n; r++) {
                            const double v = x[(o * n + r) * inner + i];
                            s += p == 1 ? fabs(v) : v * v;
                        }
                        const double norm = p == 1 ? s : sqrt(s);
                        for (int r = 0; r < n; r++) {
                            const int at = (o * n + r) * inner + i;
                            const double want = norm == 0 ? 0 : x[at] / norm;
                            CHECK_MSG(fabs(y[at] - want) <= 1e-7 * fabs(want) + 1e-12, "n %d p %d inner %d [%d]: %.9g, want %.9g",
                                      n, p, inner, at, y[at], want);
                        }
                    }
                kn_tensor_free(in);
                kn_tensor_free(out);
            }
}

KN_TEST(nn_softmax_opset11_coerces_to_2d) {
    /* opset < 13: axis 1 of [2, 2, 3] normalises over the last 6 elements together */
    int64_t d[] = {2, 2, 3};
    float x[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i * 0.25f;
    kn_tensor *in = tf(3, d, x), *out = tf(3, d, NULL);
    tnode t;
    tn_init(&t, "Softmax", 11);
    CHECK_STATUS(run_kernel(kn_cpu_softmax, &t, &in, 1, &out, 1), KILN_OK);
    for (int r = 0; r < 2; r++) {
        double s = 0;
        for (int i = 0; i < 6; i++) s += exp(x[r * 6 + i]);
        for (int i = 0; i < 6; i++) CHECK_NEAR(((float *)out->data)[r * 6 + i], exp(x[r * 6 + i]) / s, 1e-6);
    }
    kn_tensor_free(in);
    kn_tensor_free(out);
}

/* ------------------------------------------------------------------ reductions */

KN_TEST(nn_reduce_noncontiguous_axes) {
    /* axes {0, 2} of [3, 4, 5, 2]: the transposing path, against a plain loop */
    int64_t d[] = {3, 4, 5, 2}, od[] = {4, 2};
    unsigned seed = 7;
    kn_tensor *in = trand(4, d, &seed, 2.0f);
    static const char *ops[] = {"ReduceSum", "ReduceMax", "ReduceL2", "ReduceLogSumExp"};
    for (int o = 0; o < 4; o++) {
        kn_tensor *out = tf(2, od, NULL);
        tnode t;
        tn_init(&t, ops[o], 11);
        int64_t axes[] = {0, -2};
        tn_ints(&t, "axes", axes, 2);
        tn_int(&t, "keepdims", 0);
        CHECK_STATUS(run_kernel(kn_cpu_reduce, &t, &in, 1, &out, 1), KILN_OK);
        const float *x = in->data;
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 2; l++) {
                double acc = o == 1 || o == 3 ? -INFINITY : 0;
                for (int i = 0; i < 3; i++)
                    for (int k = 0; k < 5; k++) {
                        double v = x[((i * 4 + j) * 5 + k) * 2 + l];
                        if (o == 0) acc += v;
                        else if (o == 1 || o == 3) acc = v > acc ? v : acc;
                        else acc += v * v;
                    }
                if (o == 2) acc = sqrt(acc);
                if (o == 3) {
                    double m = acc, s = 0;
                    for (int i = 0; i < 3; i++)
                        for (int k = 0; k < 5; k++) s += exp(x[((i * 4 + j) * 5 + k) * 2 + l] - m);
                    acc = m + log(s);
                }
                CHECK_NEAR(((float *)out->data)[j * 2 + l], acc, 1e-5 * (1 + fabs(acc)));
            }
        kn_tensor_free(out);
    }
    kn_tensor_free(in);
}

KN_TEST(nn_reduce_empty_set) {
    int64_t d[] = {2, 0, 3}, od[] = {2, 1, 3};
    kn_tensor *in = tf(3, d, NULL), *out = tf(3, od, NULL);
    int64_t axes[] = {1};
    struct { const char *op; float want; } cases[] = {
        {"ReduceSum", 0}, {"ReduceProd", 1}, {"ReduceMax", -INFINITY}, {"ReduceMin", INFINITY},
        {"ReduceLogSumExp", -INFINITY}, {"ReduceL2", 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tnode t;
        tn_init(&t, cases[c].op, 11);
        tn_ints(&t, "axes", axes, 1);
        CHECK_STATUS(run_kernel(kn_cpu_reduce, &t, &in, 1, &out, 1), KILN_OK);
        for (int i = 0; i < 6; i++) CHECK_MSG(((float *)out->data)[i] == cases[c].want, "%s", cases[c].op);
    }
    /* integer max of an empty set is the type's minimum */
    kn_tensor *ii, *io;
    kn_tensor_new(KILN_DTYPE_INT32, 3, d, &ii);
    kn_tensor_new(KILN_DTYPE_INT32, 3, od, &io);
    tnode t;
    tn_init(&t, "ReduceMax", 11);
    tn_ints(&t, "axes", axes, 1);
    CHECK_STATUS(run_kernel(kn_cpu_reduce, &t, &ii, 1, &io, 1), KILN_OK);
    CHECK(((int32_t *)io->data)[0] == INT32_MIN);
    kn_tensor_free(ii);
    kn_tensor_free(io);
    kn_tensor_free(in);
    kn_tensor_free(out);
}

KN_TEST(nn_reduce_uint64_max_and_int_sum) {
    int64_t d[] = {3}, od[] = {1};
    kn_tensor *x, *y;
    kn_tensor_new(KILN_DTYPE_UINT64, 1, d, &x);
    kn_tensor_new(KILN_DTYPE_UINT64, 1, od, &y);
    uint64_t *p = x->data;
    p[0] = 5, p[1] = UINT64_MAX - 3, p[2] = 7;
    tnode t;
    tn_init(&t, "ReduceMax", 11);
    CHECK_STATUS(run_kernel(kn_cpu_reduce, &t, &x, 1, &y, 1), KILN_OK);
    CHECK(((uint64_t *)y->data)[0] == UINT64_MAX - 3);
    kn_tensor_free(x);
    kn_tensor_free(y);
    /* int64 sums are exact beyond 2^53 */
    kn_tensor_new(KILN_DTYPE_INT64, 1, d, &x);
    kn_tensor_new(KILN_DTYPE_INT64, 1, od, &y);
    int64_t *q = x->data;
    q[0] = (INT64_C(1) << 60) + 1, q[1] = 1, q[2] = -(INT64_C(1) << 60);
    tn_init(&t, "ReduceSum", 11);
    CHECK_STATUS(run_kernel(kn_cpu_reduce, &t, &x, 1, &y, 1), KILN_OK);
    CHECK_EQ_INT(((int64_t *)y->data)[0], 2);
    kn_tensor_free(x);
    kn_tensor_free(y);
}

/* float16 and bfloat16 reductions over the last dims (each row widened in the parallel loop,
 * nn_reduce.c's reduce_half_rows) against double over the same half values, rounded to the type:
 * rows of 1 to 20000 elements, two reduced dims merged, NaN and -inf rows, 1 and 3 threads. */
KN_TEST(nn_reduce_half_rows_against_double) {
    static const char *ops[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1",
                                "ReduceL2", "ReduceSumSquare", "ReduceProd", "ReduceLogSumExp"};
    struct { int rank; int64_t dims[3]; int n_axes; int64_t axes[2]; } shapes[] = {
        {2, {5, 37}, 1, {-1}}, {3, {2, 3, 1000}, 1, {2}}, {3, {4, 2, 3}, 2, {1, 2}}, {2, {3, 20000}, 1, {1}},
        {2, {7, 1}, 1, {1}},
    };
    kn_threadpool *pool = NULL;
    CHECK_STATUS(kn_threadpool_create(3, &pool), KILN_OK);
    unsigned seed = 11;
    for (int half = 0; half < 2; half++) {
        const kiln_dtype dt = half ? KILN_DTYPE_BFLOAT16 : KILN_DTYPE_FLOAT16;
        const double ulp = half ? 1.0 / 128 : 1.0 / 1024; /* the type's relative step */
        for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
            int64_t odims[3], rows = 1, n = 1;
            for (int k = 0; k < shapes[sh].rank; k++) {
                bool reduced = false;
                for (int a = 0; a < shapes[sh].n_axes; a++)
                    reduced |= (shapes[sh].axes[a] + shapes[sh].rank) % shapes[sh].rank == k;
                odims[k] = reduced ? 1 : shapes[sh].dims[k];
                if (reduced) n *= shapes[sh].dims[k];
                else rows *= shapes[sh].dims[k];
            }
            kn_tensor *x = NULL;
            CHECK_STATUS(kn_tensor_new(dt, shapes[sh].rank, shapes[sh].dims, &x), KILN_OK);
            uint16_t *xp = x->data;
            for (int64_t i = 0; i < rows * n; i++) {
                seed = seed * 1103515245u + 12345u;
                /* near 1 so that products of 20000 stay finite: 1 + [-1/16, 1/16) or [-2, 2) */
                const float u = (float)((seed >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f;
                const float v = n > 100 ? 1.0f + u / 16 : 2.0f * u;
                xp[i] = half ? kn_f32_to_bf16(v) : kn_f32_to_f16(v);
            }
            if (rows > 2 && n > 1) {
                xp[1 * n + n / 2] = half ? 0x7fc0 : 0x7e00; /* row 1: a NaN */
                for (int64_t i = 0; i < n; i++) xp[2 * n + i] = half ? 0xff80 : 0xfc00; /* row 2: -inf */
            }
            for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
                for (int threads = 1; threads <= 3; threads += 2) {
                    kn_tensor *y = NULL;
                    CHECK_STATUS(kn_tensor_new(dt, shapes[sh].rank, odims, &y), KILN_OK);
                    tnode t;
                    tn_init(&t, ops[o], 11);
                    tn_ints(&t, "axes", shapes[sh].axes, shapes[sh].n_axes);
                    kn_kernel_ctx c = {.node = &t.node, .in = &x, .n_inputs = 1, .out = &y, .n_outputs = 1,
                                       .pool = threads > 1 ? pool : NULL};
                    CHECK_STATUS(kn_cpu_reduce(&c), KILN_OK);
                    int bad = 0;
                    for (int64_t r = 0; r < rows && bad < 3; r++) {
                        double acc = o == 7 ? 1 : o == 2 || o == 8 ? -INFINITY : o == 3 ? INFINITY : 0, mag = 0;
                        bool nan = false;
                        for (int64_t i = 0; i < n; i++) {
                            const double v = half ? kn_bf16_to_f32(xp[r * n + i]) : kn_f16_to_f32(xp[r * n + i]);
                            nan |= v != v;
                            mag += fabs(v) * (o == 5 || o == 6 ? fabs(v) : 1);
                            if (o == 0 || o == 1) acc += v;
                            else if (o == 2 || o == 8) acc = v > acc ? v : acc;
                            else if (o == 3) acc = v < acc ? v : acc;
                            else if (o == 4) acc += fabs(v);
                            else if (o == 5 || o == 6) acc += v * v;
                            else if (o == 7) acc *= v;
                        }
                        if (o == 1) acc /= (double)n;
                        if (o == 5) acc = sqrt(acc);
                        if (o == 8 && !nan && !isinf(acc)) {
                            double s = 0;
                            for (int64_t i = 0; i < n; i++)
                                s += exp((half ? kn_bf16_to_f32(xp[r * n + i]) : kn_f16_to_f32(xp[r * n + i])) - acc);
                            acc += log(s);
                        }
                        const uint16_t gh = ((const uint16_t *)y->data)[r];
                        const double got = half ? kn_bf16_to_f32(gh) : kn_f16_to_f32(gh);
                        bool ok;
                        if (nan) ok = got != got;
                        else if (isinf(acc) || o == 7) ok = got == (half ? kn_bf16_to_f32(kn_f32_to_bf16((float)acc))
                                                                           : kn_f16_to_f32(kn_f32_to_f16((float)acc))) ||
                                                            fabs(got - acc) <= 2 * ulp * fabs(acc);
                        else ok = fabs(got - acc) <= ulp * fabs(acc) + 1e-5 * (o == 1 ? mag / (double)n : mag);
                        if (!ok) {
                            bad++;
                            kn_unit_fail(__FILE__, __LINE__, "%s %s shape %zu row %lld, %d threads: got %.8g, want %.8g",
                                         ops[o], half ? "bf16" : "f16", sh, (long long)r, threads, got, acc);
                        }
                    }
                    kn_tensor_free(y);
                }
            kn_tensor_free(x);
        }
    }
    kn_threadpool_destroy(pool);
}

KN_TEST(nn_reduce_bad_axis_message) {
    tnode t;
    tn_init(&t, "ReduceSum", 11);
    int64_t axes[] = {5};
    tn_ints(&t, "axes", axes, 1);
    const kn_op_schema *s = kn_op_find("", "ReduceSum", 11, NULL);
    CHECK(s != NULL);
    if (!s) return;
    kn_type xt;
    int64_t d[] = {2, 3};
    kn_type_set_tensor(&xt, KILN_DTYPE_FLOAT, 2, d);
    const kn_type *ins[] = {&xt};
    const kn_tensor *vals[] = {NULL};
    kn_type outs[1];
    kn_type_init(&outs[0]);
    kn_infer_ctx c = {&t.node, 1, ins, vals, 1, outs, NULL};
    CHECK_STATUS(s->infer(&c), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("axis 5 is out of range");
    CHECK_ERROR_HAS("ReduceSum");
}

/* ------------------------------------------------------------------ TopK */

KN_TEST(nn_topk_ties_prefer_lower_index) {
    int64_t d[] = {1, 6}, od[] = {1, 3}, kd[] = {1};
    float x[] = {3, 1, 3, 2, 1, 3};
    kn_tensor *in = tf(2, d, x), *vals = tf(2, od, NULL), *idx, *k;
    kn_tensor_new(KILN_DTYPE_INT64, 2, od, &idx);
    kn_tensor_new(KILN_DTYPE_INT64, 1, kd, &k);
    ((int64_t *)k->data)[0] = 3;
    kn_tensor *ins[] = {in, k}, *outs[] = {vals, idx};
    tnode t;
    tn_init(&t, "TopK", 11);
    CHECK_STATUS(run_kernel(kn_cpu_topk, &t, ins, 2, outs, 2), KILN_OK);
    const int64_t *ix = idx->data;
    CHECK(ix[0] == 0 && ix[1] == 2 && ix[2] == 5);
    tn_int(&t, "largest", 0);
    CHECK_STATUS(run_kernel(kn_cpu_topk, &t, ins, 2, outs, 2), KILN_OK);
    CHECK(ix[0] == 1 && ix[1] == 4 && ix[2] == 3);
    CHECK(((float *)vals->data)[2] == 2.0f);
    ((int64_t *)k->data)[0] = 7;
    CHECK_STATUS(run_kernel(kn_cpu_topk, &t, ins, 2, outs, 2), KILN_ERR_SHAPE);
    CHECK_ERROR_HAS("k = 7");
    kn_tensor_free(in);
    kn_tensor_free(vals);
    kn_tensor_free(idx);
    kn_tensor_free(k);
}

/* ------------------------------------------------------------------ RNN family */

static double sigm(double x) { return 1 / (1 + exp(-x)); }

/* Independent LSTM reference (layout 0), double precision, straight from the ONNX equations.
 * Gates of W/R/B in the order i, o, f, c; peepholes P in the order i, o, f. */
static void lstm_ref(int T, int B, int I, int H, int nd, const float *X, const float *W, const float *R,
                     const float *Bi, const float *P, const int32_t *lens, double *Y, double *Yh, double *Yc) {
    for (int d = 0; d < nd; d++) {
        double *h = calloc((size_t)(B * H), sizeof *h), *c = calloc((size_t)(B * H), sizeof *c);
        double *g = calloc((size_t)(4 * H), sizeof *g);
        const float *w = W + d * 4 * H * I, *r = R + d * 4 * H * H, *bb = Bi + d * 8 * H, *p = P + d * 3 * H;
        for (int b = 0; b < B; b++) {
            int len = lens ? lens[b] : T;
            for (int s = 0; s < len; s++) {
                int t = d == 1 ? len - 1 - s : s;
                for (int k = 0; k < 4 * H; k++) {
                    double a = bb[k] + bb[4 * H + k];
                    for (int j = 0; j < I; j++) a += (double)X[(t * B + b) * I + j] * w[k * I + j];
                    for (int j = 0; j < H; j++) a += h[b * H + j] * r[k * H + j];
                    g[k] = a;
                }
                for (int k = 0; k < H; k++) {
                    double cp = c[b * H + k];
                    double ig = sigm(g[k] + p[k] * cp);
                    double fg = sigm(g[2 * H + k] + p[2 * H + k] * cp);
                    double cc = tanh(g[3 * H + k]);
                    double cn = fg * cp + ig * cc;
                    double og = sigm(g[H + k] + p[H + k] * cn);
                    c[b * H + k] = cn;
                    g[3 * H + k] = og * tanh(cn); /* new h, stored after the loop */
                }
                for (int k = 0; k < H; k++) {
                    h[b * H + k] = g[3 * H + k];
                    Y[((t * nd + d) * B + b) * H + k] = h[b * H + k];
                }
            }
        }
        memcpy(Yh + d * B * H, h, sizeof(double) * (size_t)(B * H));
        memcpy(Yc + d * B * H, c, sizeof(double) * (size_t)(B * H));
        free(h);
        free(c);
        free(g);
    }
}

KN_TEST(nn_lstm_matches_reference) {
    enum { T = 4, Bn = 3, I = 5, H = 6, ND = 2 };
    unsigned seed = 11;
    int64_t dx[] = {T, Bn, I}, dw[] = {ND, 4 * H, I}, dr[] = {ND, 4 * H, H}, db[] = {ND, 8 * H};
    int64_t dp[] = {ND, 3 * H}, dl[] = {Bn}, dy[] = {T, ND, Bn, H}, dh[] = {ND, Bn, H};
    kn_tensor *X = trand(3, dx, &seed, 1.0f), *W = trand(3, dw, &seed, 0.6f), *R = trand(3, dr, &seed, 0.6f);
    kn_tensor *Bt = trand(2, db, &seed, 0.3f), *P = trand(2, dp, &seed, 0.5f), *L;
    kn_tensor_new(KILN_DTYPE_INT32, 1, dl, &L);
    int32_t lens[] = {4, 2, 3};
    memcpy(L->data, lens, sizeof lens);
    kn_tensor *Y = tf(4, dy, NULL), *Yh = tf(3, dh, NULL), *Yc = tf(3, dh, NULL);
    kn_tensor *ins[] = {X, W, R, Bt, L, NULL, NULL, P}, *outs[] = {Y, Yh, Yc};
    tnode t;
    tn_init(&t, "LSTM", 14);
    tn_int(&t, "hidden_size", H);
    tn_string(&t, "direction", "bidirectional");
    CHECK_STATUS(run_kernel(kn_cpu_rnn, &t, ins, 8, outs, 3), KILN_OK);
    double ry[T * ND * Bn * H] = {0}, rh[ND * Bn * H], rc[ND * Bn * H];
    lstm_ref(T, Bn, I, H, ND, X->data, W->data, R->data, Bt->data, P->data, lens, ry, rh, rc);
    double worst = 0;
    for (int i = 0; i < T * ND * Bn * H; i++) worst = fmax(worst, fabs(((float *)Y->data)[i] - ry[i]));
    for (int i = 0; i < ND * Bn * H; i++) {
        worst = fmax(worst, fabs(((float *)Yh->data)[i] - rh[i]));
        worst = fmax(worst, fabs(((float *)Yc->data)[i] - rc[i]));
    }
    CHECK_MSG(worst < 2e-6, "worst abs error %g", worst);
    /* layout 1 gives the same numbers transposed */
    int64_t dx1[] = {Bn, T, I}, dy1[] = {Bn, T, ND, H}, dh1[] = {Bn, ND, H};
    kn_tensor *X1 = tf(3, dx1, NULL), *Y1 = tf(4, dy1, NULL), *Yh1 = tf(3, dh1, NULL), *Yc1 = tf(3, dh1, NULL);
    for (int tt = 0; tt < T; tt++)
        for (int b = 0; b < Bn; b++)
            memcpy((float *)X1->data + (b * T + tt) * I, (float *)X->data + (tt * Bn + b) * I, sizeof(float) * I);
    kn_tensor *ins1[] = {X1, W, R, Bt, L, NULL, NULL, P}, *outs1[] = {Y1, Yh1, Yc1};
    tn_int(&t, "layout", 1);
    CHECK_STATUS(run_kernel(kn_cpu_rnn, &t, ins1, 8, outs1, 3), KILN_OK);
    worst = 0;
    for (int tt = 0; tt < T; tt++)
        for (int d = 0; d < ND; d++)
            for (int b = 0; b < Bn; b++)
                for (int k = 0; k < H; k++)
                    worst = fmax(worst, fabs(((float *)Y1->data)[((b * T + tt) * ND + d) * H + k] -
                                             ry[((tt * ND + d) * Bn + b) * H + k]));
    for (int d = 0; d < ND; d++)
        for (int b = 0; b < Bn; b++)
            for (int k = 0; k < H; k++)
                worst = fmax(worst, fabs(((float *)Yc1->data)[(b * ND + d) * H + k] - rc[(d * Bn + b) * H + k]));
    CHECK_MSG(worst < 2e-6, "layout 1: worst abs error %g", worst);
    kn_tensor *all[] = {X, W, R, Bt, P, L, Y, Yh, Yc, X1, Y1, Yh1, Yc1};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kn_tensor_free(all[i]);
}

/* GRU reference (forward, layout 0), both linear_before_reset forms. Gates z, r, h. */
static void gru_ref(int T, int B, int I, int H, int lbr, const float *X, const float *W, const float *R,
                    const float *Bi, double *Y) {
    double *h = calloc((size_t)(B * H), sizeof *h), *hn = calloc((size_t)H, sizeof *hn);
    for (int t = 0; t < T; t++)
        for (int b = 0; b < B; b++) {
            const float *x = X + (t * B + b) * I;
            double *hb = h + b * H;
            for (int k = 0; k < H; k++) {
                double xz = Bi[k], xr = Bi[H + k], xh = Bi[2 * H + k];
                double hz = Bi[3 * H + k], hr = Bi[4 * H + k], hh = Bi[5 * H + k];
                for (int j = 0; j < I; j++) {
                    xz += (double)x[j] * W[k * I + j];
                    xr += (double)x[j] * W[(H + k) * I + j];
                    xh += (double)x[j] * W[(2 * H + k) * I + j];
                }
                for (int j = 0; j < H; j++) {
                    hz += hb[j] * R[k * H + j];
                    hr += hb[j] * R[(H + k) * H + j];
                }
                double z = sigm(xz + hz), r = sigm(xr + hr), pre;
                if (lbr) {
                    double a = hh;
                    for (int j = 0; j < H; j++) a += hb[j] * R[(2 * H + k) * H + j];
                    pre = xh + r * a;
                } else {
                    double a = hh;
                    double rr[64];
                    for (int j = 0; j < H; j++) {
                        /* (r * h) needs every r_j: recompute r_j */
                        double xrj = Bi[H + j], hrj = Bi[4 * H + j];
                        for (int q = 0; q < I; q++) xrj += (double)x[q] * W[(H + j) * I + q];
                        for (int q = 0; q < H; q++) hrj += hb[q] * R[(H + j) * H + q];
                        rr[j] = sigm(xrj + hrj) * hb[j];
                    }
                    for (int j = 0; j < H; j++) a += rr[j] * R[(2 * H + k) * H + j];
                    pre = xh + a;
                }
                hn[k] = (1 - z) * tanh(pre) + z * hb[k];
            }
            memcpy(hb, hn, sizeof(double) * (size_t)H);
            memcpy(Y + (t * B + b) * H, hb, sizeof(double) * (size_t)H);
        }
    free(h);
    free(hn);
}

KN_TEST(nn_gru_matches_reference) {
    enum { T = 5, Bn = 2, I = 3, H = 4 };
    for (int lbr = 0; lbr <= 1; lbr++) {
        unsigned seed = 3 + lbr;
        int64_t dx[] = {T, Bn, I}, dw[] = {1, 3 * H, I}, dr[] = {1, 3 * H, H}, db[] = {1, 6 * H};
        int64_t dy[] = {T, 1, Bn, H};
        kn_tensor *X = trand(3, dx, &seed, 1.0f), *W = trand(3, dw, &seed, 0.7f), *R = trand(3, dr, &seed, 0.7f);
        kn_tensor *Bt = trand(2, db, &seed, 0.4f), *Y = tf(4, dy, NULL);
        kn_tensor *ins[] = {X, W, R, Bt}, *outs[] = {Y};
        tnode t;
        tn_init(&t, "GRU", 14);
        tn_int(&t, "hidden_size", H);
        tn_int(&t, "linear_before_reset", lbr);
        CHECK_STATUS(run_kernel(kn_cpu_rnn, &t, ins, 4, outs, 1), KILN_OK);
        double ry[T * Bn * H];
        gru_ref(T, Bn, I, H, lbr, X->data, W->data, R->data, Bt->data, ry);
        double worst = 0;
        for (int i = 0; i < T * Bn * H; i++) worst = fmax(worst, fabs(((float *)Y->data)[i] - ry[i]));
        CHECK_MSG(worst < 2e-6, "linear_before_reset=%d: worst abs error %g", lbr, worst);
        kn_tensor *all[] = {X, W, R, Bt, Y};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kn_tensor_free(all[i]);
    }
}

KN_TEST(nn_rnn_bad_activation_message) {
    int64_t dx[] = {1, 1, 2}, dw[] = {1, 3, 2}, dr[] = {1, 3, 3};
    kn_tensor *X = tf(3, dx, NULL), *W = tf(3, dw, NULL), *R = tf(3, dr, NULL);
    int64_t dy[] = {1, 1, 1, 3};
    kn_tensor *Y = tf(4, dy, NULL);
    kn_tensor *ins[] = {X, W, R}, *outs[] = {Y};
    tnode t;
    tn_init(&t, "RNN", 14);
    const char *names[] = {"Swish"};
    kn_attr *a = &t.attrs[t.node.n_attrs++];
    a->name = "activations", a->type = KN_ATTR_STRINGS, a->strings = names, a->n = 1;
    CHECK_STATUS(run_kernel(kn_cpu_rnn, &t, ins, 3, outs, 1), KILN_ERR_UNSUPPORTED);
    CHECK_ERROR_HAS("activation 'Swish'");
    kn_tensor *all[] = {X, W, R, Y};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kn_tensor_free(all[i]);
}

/* ------------------------------------------------------------------ normalisation */

KN_TEST(nn_layernorm_stats_and_constant_rows) {
    int64_t d[] = {2, 4}, sd[] = {4}, md[] = {2, 1};
    float x[] = {1, 2, 3, 4, 5, 5, 5, 5};
    float s[] = {1, 1, 1, 1}, b[] = {0, 0, 0, 0.5f};
    kn_tensor *X = tf(2, d, x), *S = tf(1, sd, s), *Bt = tf(1, sd, b);
    kn_tensor *Y = tf(2, d, NULL), *M = tf(2, md, NULL), *IS = tf(2, md, NULL);
    kn_tensor *ins[] = {X, S, Bt}, *outs[] = {Y, M, IS};
    tnode t;
    tn_init(&t, "LayerNormalization", 17);
    tn_float(&t, "epsilon", 1e-5f);
    CHECK_STATUS(run_kernel(kn_cpu_layernorm, &t, ins, 3, outs, 3), KILN_OK);
    const float *y = Y->data, *m = M->data, *is = IS->data;
    CHECK_NEAR(m[0], 2.5, 1e-6);
    CHECK_NEAR(is[0], 1 / sqrt(1.25 + 1e-5), 1e-5);
    CHECK_NEAR(y[0], -1.5 / sqrt(1.25 + 1e-5), 1e-5);
    /* a constant row normalises to the bias, not NaN */
    CHECK_NEAR(y[4], 0, 1e-6);
    CHECK_NEAR(y[7], 0.5, 1e-6);
    kn_tensor *all[] = {X, S, Bt, Y, M, IS};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kn_tensor_free(all[i]);
}

/* Several NaNs: NaN ranks as the largest value and NaNs tie among themselves (lower index first),
 * on both paths (k = 3 of 100: the running buffer; k = 30: selection and sort), largest and
 * smallest. The CUDA kernels order them the same way (test_cuda_datadep.c compares them). */
KN_TEST(nn_topk_several_nans_in_index_order) {
    int64_t d[] = {100}, kd[] = {1};
    const int64_t ks[] = {3, 30};
    for (int p = 0; p < 2; p++) {
        int64_t od[] = {ks[p]};
        kn_tensor *in = tf(1, d, NULL), *vals = tf(1, od, NULL), *idx, *k;
        float *x = in->data;
        for (int i = 0; i < 100; i++) x[i] = (float)(i % 9);
        const int nan_at[] = {7, 20, 41, 63, 90};
        for (int i = 0; i < 5; i++) x[nan_at[i]] = NAN;
        kn_tensor_new(KILN_DTYPE_INT64, 1, od, &idx);
        kn_tensor_new(KILN_DTYPE_INT64, 1, kd, &k);
        ((int64_t *)k->data)[0] = ks[p];
        kn_tensor *ins[] = {in, k}, *outs[] = {vals, idx};
        tnode t;
        tn_init(&t, "TopK", 11);
        const int64_t *ix = idx->data;
        CHECK_STATUS(run_kernel(kn_cpu_topk, &t, ins, 2, outs, 2), KILN_OK);
        for (int i = 0; i < 3; i++) CHECK_MSG(ix[i] == nan_at[i], "k %lld largest: index %d is %lld, expected %d",
                                              (long long)ks[p], i, (long long)ix[i], nan_at[i]);
        if (ks[p] == 30) {
            CHECK(ix[4] == 90);
            CHECK(ix[5] == 8 && ((float *)vals->data)[5] == 8.0f); /* then the 8s, in index order */
        }
        tn_int(&t, "largest", 0);
        CHECK_STATUS(run_kernel(kn_cpu_topk, &t, ins, 2, outs, 2), KILN_OK);
        CHECK(ix[0] == 0 && ix[1] == 9);
        kn_tensor_free(in);
        kn_tensor_free(vals);
        kn_tensor_free(idx);
        kn_tensor_free(k);
    }
}

KN_TEST(nn_topk_small_k_path_ties_and_nan) {
    /* k * 16 <= n takes the running-buffer path; same rules as the sort path */
    int64_t d[] = {100}, od[] = {3}, kd[] = {1};
    kn_tensor *in = tf(1, d, NULL), *vals = tf(1, od, NULL), *idx, *k;
    for (int i = 0; i < 100; i++) ((float *)in->data)[i] = (float)((i * 7) % 5);
    kn_tensor_new(KILN_DTYPE_INT64, 1, od, &idx);
    kn_tensor_new(KILN_DTYPE_INT64, 1, kd, &k);
    ((int64_t *)k->data)[0] = 3;
    kn_tensor *ins[] = {in, k}, *outs[] = {vals, idx};
    tnode t;
    tn_init(&t, "TopK", 11);
    const int64_t *ix = idx->data;
    CHECK_STATUS(run_kernel(kn_cpu_topk, &t, ins, 2, outs, 2), KILN_OK);
    CHECK(ix[0] == 2 && ix[1] == 7 && ix[2] == 12);
    ((float *)in->data)[50] = NAN; /* NaN ranks as the largest */
    CHECK_STATUS(run_kernel(kn_cpu_topk, &t, ins, 2, outs, 2), KILN_OK);
    CHECK(ix[0] == 50 && ix[1] == 2 && ix[2] == 7);
    tn_int(&t, "largest", 0);
    CHECK_STATUS(run_kernel(kn_cpu_topk, &t, ins, 2, outs, 2), KILN_OK);
    CHECK(ix[0] == 0 && ix[1] == 5 && ix[2] == 10);
    tn_int(&t, "sorted", 0); /* unsorted output comes in index order */
    ((float *)in->data)[10] = -1;
    CHECK_STATUS(run_kernel(kn_cpu_topk, &t, ins, 2, outs, 2), KILN_OK);
    CHECK(ix[0] == 0 && ix[1] == 5 && ix[2] == 10);
    CHECK(((float *)vals->data)[2] == -1.0f);
    kn_tensor_free(in);
    kn_tensor_free(vals);
    kn_tensor_free(idx);
    kn_tensor_free(k);
}

/* kn_softmax_rows_f32 (kiln.Attention's score rows, four at a time) gives kn_softmax_row_f32's
 * results bit for bit: row counts around 4, lengths around the 16/32/64-lane steps and the
 * attention models' 128, 197 and 650 keys, rows with -inf (masked keys), a fully masked row
 * (NaN) and a NaN score. */
KN_TEST(softmax_rows_match_row_kernel) {
    const int64_t lens[] = {1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 128, 197, 650};
    uint32_t seed = 12345;
    int checked = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int64_t rows = 1; rows <= 9; rows++) {
            const int64_t n = lens[li], ld = n + 3;
            float *x = malloc(sizeof(float) * (size_t)(rows * ld)), *want = malloc(sizeof(float) * (size_t)(rows * ld));
            for (int64_t i = 0; i < rows * ld; i++) {
                seed = seed * 1664525u + 1013904223u;
                x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 20.0f;
                if ((seed & 63) == 7) x[i] = -INFINITY;
            }
            if (rows >= 3) {
                for (int64_t k = 0; k < n; k++) x[2 * ld + k] = -INFINITY; /* every key masked: NaN */
                x[ld + n / 2] = NAN;
            }
            for (int64_t r = 0; r < rows; r++) kn_softmax_row_f32(x + r * ld, want + r * ld, n, false);
            kn_softmax_rows_f32(x, rows, n, ld);
            int bad = 0;
            for (int64_t r = 0; r < rows; r++)
                for (int64_t k = 0; k < n; k++) {
                    const float g = x[r * ld + k], w = want[r * ld + k];
                    if (!(g == w || (g != g && w != w))) bad++;
                }
            CHECK_MSG(bad == 0, "softmax rows %lld x %lld: %d values differ from the row kernel's", (long long)rows,
                      (long long)n, bad);
            free(x);
            free(want);
            checked++;
        }
    CHECK(checked == 14 * 9);
}

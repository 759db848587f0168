/* float16 forms of Resize (linear), LpNormalization and CumSum against the float32 kernel on the
 * widened input, rounded once to float16 (bit for bit: each is the float computation rounded
 * once, as ONNX Runtime's casts around these nodes give); float16 Transpose (the 8x8 register
 * transposes with tails), Tile's repeated rows and TopK's float rows (the key heap) against references
 * written here. One-node models through whole sessions, 1 and 2 threads. */
#include "ir/tensor.h"
#include "test_model_builder.h"
#include "unit.h"

#include <math.h>
#include <stdlib.h>

/* Runs op on x (a graph input of dtype dt) and the constant inputs `consts` (may hold -1 for an
 * absent optional input, named ""); n_out outputs into y (caller destroys). */
static bool oc_run(const char *op, int opset, kiln_dtype dt, int rank, const int64_t *dims, const void *xv,
                   kn_tensor **consts, int n_consts, const tmb_attr_spec *attrs, int n_attrs, int n_out, int threads,
                   kiln_tensor **y) {
    tmb b;
    tmb_init(&b, opset);
    int in[6];
    in[0] = tmb_input(&b, "x", dt, rank, dims, NULL);
    for (int i = 0; i < n_consts; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "c%d", i);
        kn_tensor *copy = NULL;
        kn_tensor_new(consts[i]->dtype, consts[i]->rank, consts[i]->dims, &copy);
        memcpy(copy->data, consts[i]->data, consts[i]->nbytes);
        in[1 + i] = tmb_const_tensor(&b, nm, copy);
    }
    tmb_attrs(&b, tmb_node_outputs(&b, op, in, 1 + n_consts, n_out), attrs, n_attrs);
    return tmb_run_x(&b, op, dt, rank, dims, xv, n_out, threads, y);
}

/* Runs the node in float16 and in float32 on the widened values: every float16 output must be the
 * float32 output rounded once (kn_f32_to_f16), bit for bit. */
static void oc_check_rounded_once(const char *what, const char *op, int opset, int rank, const int64_t *dims,
                                  kn_tensor **consts, int n_consts, const tmb_attr_spec *attrs, int n_attrs, uint32_t seed,
                                  float lo, float hi) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= dims[d];
    uint16_t *xh = malloc(sizeof(uint16_t) * (size_t)n);
    float *xf = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        xh[i] = kn_f32_to_f16(lo + (hi - lo) * (tmb_rand(&seed) + 1) / 2);
        xf[i] = kn_f16_to_f32(xh[i]);
    }
    for (int threads = 1; threads <= 2; threads++) {
        kiln_tensor *yh = NULL, *yf = NULL;
        if (oc_run(op, opset, KILN_DTYPE_FLOAT16, rank, dims, xh, consts, n_consts, attrs, n_attrs, 1, threads, &yh) &&
            oc_run(op, opset, KILN_DTYPE_FLOAT, rank, dims, xf, consts, n_consts, attrs, n_attrs, 1, threads, &yf)) {
            const int64_t m = kiln_tensor_element_count(yf);
            CHECK_MSG(kiln_tensor_element_count(yh) == m, "%s: %lld outputs in float16, %lld in float", what,
                      (long long)kiln_tensor_element_count(yh), (long long)m);
            const uint16_t *gh = kiln_tensor_data(yh);
            const float *gf = kiln_tensor_data(yf);
            int64_t bad = 0, first = -1;
            for (int64_t i = 0; i < m && kiln_tensor_element_count(yh) == m; i++)
                if (gh[i] != kn_f32_to_f16(gf[i])) {
                    bad++;
                    if (first < 0) first = i;
                }
            CHECK_MSG(bad == 0, "%s, %d threads: %lld of %lld float16 outputs are not the float output rounded once "
                      "(first at %lld: %a, float %a)", what, threads, (long long)bad, (long long)m, (long long)first,
                      first >= 0 ? (double)kn_f16_to_f32(gh[first]) : 0.0, first >= 0 ? (double)gf[first] : 0.0);
        }
        kiln_tensor_destroy(yh);
        kiln_tensor_destroy(yf);
    }
    free(xh);
    free(xf);
}

static kn_tensor *oc_i64(int rank, int64_t v) {
    kn_tensor *t = NULL;
    const int64_t d[1] = {1};
    kn_tensor_new(KILN_DTYPE_INT64, rank, d, &t);
    ((int64_t *)t->data)[0] = v;
    return t;
}

static kn_tensor *oc_f32(int n, const float *v) {
    kn_tensor *t = NULL;
    const int64_t d[1] = {n};
    kn_tensor_new(KILN_DTYPE_FLOAT, 1, d, &t);
    memcpy(t->data, v, sizeof(float) * (size_t)n);
    return t;
}

/* A float16 CumSum keeps a float sum: a row of 4096 ones ends at 4096 (rounded at every step it
 * stops at 2048, where 2048 + 1 rounds back to 2048). Then every combination of exclusive and
 * reverse along the last axis and a middle one against the float kernel. */
KN_TEST(cpu_cumsum_float16_rounded_once) {
    const int64_t d1[2] = {1, 4096};
    uint16_t *ones = malloc(sizeof(uint16_t) * 4096);
    for (int i = 0; i < 4096; i++) ones[i] = kn_f32_to_f16(1.0f);
    kn_tensor *ax1 = oc_i64(0, 1), *ax0 = oc_i64(0, 0);
    kiln_tensor *y = NULL;
    if (oc_run("CumSum", 14, KILN_DTYPE_FLOAT16, 2, d1, ones, &ax1, 1, NULL, 0, 1, 1, &y)) {
        const uint16_t *g = kiln_tensor_data(y);
        CHECK_MSG(kn_f16_to_f32(g[4095]) == 4096.0f, "sum of 4096 ones is %g", (double)kn_f16_to_f32(g[4095]));
        CHECK(kn_f16_to_f32(g[2050]) == 2052.0f); /* 2051 rounded once (to even) */
    }
    kiln_tensor_destroy(y);
    free(ones);
    const int64_t d2[3] = {3, 37, 21};
    for (int flags = 0; flags < 4; flags++) {
        tmb_attr_spec at[2] = {{.name = "exclusive", .i = flags & 1}, {.name = "reverse", .i = flags >> 1}};
        char what[96];
        snprintf(what, sizeof what, "CumSum last axis exclusive %d reverse %d", flags & 1, flags >> 1);
        kn_tensor *ax2 = oc_i64(0, 2), *axm = oc_i64(0, 1);
        oc_check_rounded_once(what, "CumSum", 14, 3, d2, &ax2, 1, at, 2, 11u + (uint32_t)flags, -4.0f, 8.0f);
        snprintf(what, sizeof what, "CumSum middle axis exclusive %d reverse %d", flags & 1, flags >> 1);
        oc_check_rounded_once(what, "CumSum", 14, 3, d2, &axm, 1, at, 2, 21u + (uint32_t)flags, -4.0f, 8.0f);
        kn_tensor_free(ax2);
        kn_tensor_free(axm);
    }
    const int64_t d3[2] = {700, 9};
    oc_check_rounded_once("CumSum axis 0 of 700x9", "CumSum", 14, 2, d3, &ax0, 1, NULL, 0, 5u, -1.0f, 3.0f);
    kn_tensor_free(ax1);
    kn_tensor_free(ax0);
}

/* CumSum / CumProd along the last axis (the running value kept in a register, rows four at a
 * time, then one by one) against the definition written here: y[0] the first input (exclusive:
 * the identity), each next output the previous output combined with the next input, in the
 * element type (int8 wraps), in both directions. Row counts cover the four-row groups and the
 * remainder, rows of 1 and 2 elements included; a float row starts at -0 (inclusive: -0 stays). */
static double cum_ref_step(kiln_dtype dt, bool prod, double a, double v) {
    switch (dt) {
    case KILN_DTYPE_FLOAT: return prod ? (double)((float)a * (float)v) : (double)((float)a + (float)v);
    case KILN_DTYPE_INT8: return (double)(int8_t)(uint8_t)((unsigned)(prod ? (int)a * (int)v : (int)a + (int)v) & 0xffu);
    default: return prod ? a * v : a + v; /* double, small int32 */
    }
}

KN_TEST(cpu_cumulative_last_axis_rows) {
    static const kiln_dtype dts[3] = {KILN_DTYPE_FLOAT, KILN_DTYPE_DOUBLE, KILN_DTYPE_INT8};
    static const int64_t rows[5] = {1, 3, 4, 5, 9}, lens[4] = {1, 2, 17, 1000};
    uint32_t seed = 7;
    kn_tensor *ax = oc_i64(0, -1);
    int cases = 0, wrong = 0;
    for (int di = 0; di < 3; di++)
        for (int prod = 0; prod < 2; prod++)
            for (int flags = 0; flags < 4; flags++)
                for (int ri = 0; ri < 5; ri++)
                    for (int li = 0; li < 4; li++) {
                        const kiln_dtype dt = dts[di];
                        const bool excl = flags & 1, rev = flags >> 1;
                        const int64_t R = rows[ri], D = lens[li], n = R * D, dims[2] = {R, D};
                        const size_t es = dt == KILN_DTYPE_FLOAT ? 4 : dt == KILN_DTYPE_DOUBLE ? 8 : 1;
                        double *xv = malloc(sizeof(double) * (size_t)n);
                        unsigned char *xb = malloc(es * (size_t)n);
                        for (int64_t i = 0; i < n; i++) {
                            const float r = tmb_rand(&seed);
                            double v = dt == KILN_DTYPE_INT8 ? (double)(int)(r * 100.0f)
                                       : prod              ? 1.0 + r / 64.0
                                                           : 3.0 * r;
                            if (dt == KILN_DTYPE_FLOAT) v = (float)v;
                            if (dt != KILN_DTYPE_INT8 && !prod && i % D == (rev ? D - 1 : 0)) v = -0.0;
                            xv[i] = v;
                            if (dt == KILN_DTYPE_FLOAT) ((float *)xb)[i] = (float)v;
                            else if (dt == KILN_DTYPE_DOUBLE) ((double *)xb)[i] = v;
                            else ((int8_t *)xb)[i] = (int8_t)v;
                        }
                        tmb_attr_spec at[2] = {{.name = "exclusive", .i = excl}, {.name = "reverse", .i = rev}};
                        kiln_tensor *y = NULL;
                        if (oc_run(prod ? "CumProd" : "CumSum", prod ? 26 : 14, dt, 2, dims, xb, &ax, 1, at, 2, 1, 1,
                                   &y)) {
                            const unsigned char *g = kiln_tensor_data(y);
                            int64_t bad = 0, first = -1;
                            for (int64_t r = 0; r < R; r++) {
                                double acc = prod ? 1.0 : 0.0;
                                for (int64_t t = 0; t < D; t++) {
                                    const int64_t i = r * D + (rev ? D - 1 - t : t);
                                    double want;
                                    if (excl) want = acc, acc = cum_ref_step(dt, prod, acc, xv[i]);
                                    else want = acc = t == 0 ? xv[i] : cum_ref_step(dt, prod, acc, xv[i]);
                                    double got = dt == KILN_DTYPE_FLOAT    ? (double)((const float *)g)[i]
                                                 : dt == KILN_DTYPE_DOUBLE ? ((const double *)g)[i]
                                                                           : (double)((const int8_t *)g)[i];
                                    if (got != want || signbit(got) != signbit(want)) {
                                        if (first < 0) first = i;
                                        bad++;
                                    }
                                }
                            }
                            cases++;
                            if (bad) wrong++;
                            CHECK_MSG(bad == 0, "%s %s %lldx%lld exclusive %d reverse %d: %lld of %lld wrong (first %lld)",
                                      prod ? "CumProd" : "CumSum", kiln_dtype_name(dt), (long long)R, (long long)D,
                                      excl, rev, (long long)bad, (long long)n, (long long)first);
                        }
                        kiln_tensor_destroy(y);
                        free(xv);
                        free(xb);
                    }
    CHECK_MSG(cases == 3 * 2 * 4 * 5 * 4 && wrong == 0, "%d cases ran, %d wrong", cases, wrong);
    kn_tensor_free(ax);
}

KN_TEST(cpu_lpnorm_float16_rounded_once) {
    const int64_t da[2] = {5, 77}, db[3] = {2, 3, 40}, dc[2] = {3, 4099};
    for (int p = 1; p <= 2; p++) {
        tmb_attr_spec at[2] = {{.name = "axis", .i = -1}, {.name = "p", .i = p}};
        oc_check_rounded_once(p == 1 ? "LpNormalization p1 5x77" : "LpNormalization p2 5x77", "LpNormalization", 1, 2,
                              da, NULL, 0, at, 2, 3u + (uint32_t)p, -2.0f, 2.0f);
        oc_check_rounded_once("LpNormalization 2x3x40", "LpNormalization", 1, 3, db, NULL, 0, at, 2, 7u, -1.0f, 1.0f);
        oc_check_rounded_once("LpNormalization 3x4099", "LpNormalization", 1, 2, dc, NULL, 0, at, 2, 9u, -1.0f, 1.0f);
    }
    /* a zero row stays zeros */
    const int64_t dz[2] = {2, 16};
    uint16_t z[32] = {0};
    tmb_attr_spec at[1] = {{.name = "axis", .i = -1}};
    kiln_tensor *y = NULL;
    if (oc_run("LpNormalization", 1, KILN_DTYPE_FLOAT16, 2, dz, z, NULL, 0, at, 1, 1, 1, &y)) {
        const uint16_t *g = kiln_tensor_data(y);
        int nz = 0;
        for (int i = 0; i < 32; i++) nz += g[i] != 0;
        CHECK_MSG(nz == 0, "%d of 32 outputs of zero rows are not +0", nz);
    }
    kiln_tensor_destroy(y);
}

KN_TEST(cpu_resize_linear_float16_rounded_once) {
    struct {
        int64_t dims[4];
        float sh, sw;
        const char *coord;
    } cases[] = {
        {{1, 3, 13, 17}, 2.0f, 2.0f, "half_pixel"},    {{1, 3, 13, 17}, 2.0f, 2.0f, "align_corners"},
        {{2, 2, 20, 40}, 0.5f, 0.5f, "half_pixel"},    {{1, 2, 7, 33}, 1.7f, 0.6f, "pytorch_half_pixel"},
        {{1, 2, 31, 9}, 0.6f, 1.7f, "asymmetric"},     {{1, 64, 8, 8}, 2.0f, 2.0f, "half_pixel"},
    };
    const float roi_none[1] = {0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const float sc[4] = {1, 1, cases[c].sh, cases[c].sw};
        kn_tensor *k[2] = {oc_f32(0, roi_none), oc_f32(4, sc)};
        tmb_attr_spec at[2] = {{.name = "mode", .s = "linear"}, {.name = "coordinate_transformation_mode", .s = cases[c].coord}};
        char what[96];
        snprintf(what, sizeof what, "Resize linear %s case %zu", cases[c].coord, c);
        oc_check_rounded_once(what, "Resize", 19, 4, cases[c].dims, k, 2, at, 2, 31u + (uint32_t)c, -3.0f, 3.0f);
        kn_tensor_free(k[0]);
        kn_tensor_free(k[1]);
    }
    /* three resized axes (not the bilinear path): the separable passes, converted by rows */
    const int64_t d3[3] = {5, 6, 7};
    const float sc3[3] = {2.0f, 1.5f, 0.5f};
    kn_tensor *k3[2] = {oc_f32(0, roi_none), oc_f32(3, sc3)};
    tmb_attr_spec at3[1] = {{.name = "mode", .s = "linear"}};
    oc_check_rounded_once("Resize linear over three axes", "Resize", 19, 3, d3, k3, 2, at3, 1, 41u, -3.0f, 3.0f);
    kn_tensor_free(k3[0]);
    kn_tensor_free(k3[1]);
}

/* how many elements (es bytes each) of y, x of dims transposed by perm, are not x's element at
 * the index mapping's place (compared as bytes) */
static int64_t transpose_misplaced(const void *x, const void *y, size_t es, int r, const int64_t *dims, const int64_t *perm) {
    int64_t n = 1, xs[4], yd[4], idx[4] = {0}, bad = 0;
    for (int d = r - 1; d >= 0; d--) xs[d] = n, n *= dims[d];
    for (int d = 0; d < r; d++) yd[d] = dims[perm[d]];
    for (int64_t o = 0; o < n; o++) {
        int64_t src = 0;
        for (int d = 0; d < r; d++) src += idx[d] * xs[perm[d]];
        bad += memcmp((const char *)y + o * (int64_t)es, (const char *)x + src * (int64_t)es, es) != 0;
        for (int d = r - 1; d >= 0; d--) {
            if (++idx[d] < yd[d]) break;
            idx[d] = 0;
        }
    }
    return bad;
}

/* Transposes x (type dt, es bytes an element, dims of rank r) by perm with threads t0 to t1 in
 * turn: every output element must be x's at the index mapping's place. what names the case. */
static void oc_check_transpose(const char *what, size_t c, kiln_dtype dt, size_t es, int r, const int64_t *dims,
                               const int64_t *perm, const void *x, int t0, int t1) {
    int64_t n = 1;
    for (int d = 0; d < r; d++) n *= dims[d];
    const tmb_attr_spec at[1] = {{.name = "perm", .ints = perm, .n_ints = r}};
    for (int threads = t0; threads <= t1; threads++) {
        kiln_tensor *y = NULL;
        if (oc_run("Transpose", 13, dt, r, dims, x, NULL, 0, at, 1, 1, threads, &y)) {
            const int64_t bad = transpose_misplaced(x, kiln_tensor_data(y), es, r, dims, perm);
            CHECK_MSG(bad == 0, "%s case %zu, %d threads: %lld of %lld elements misplaced", what, c, threads,
                      (long long)bad, (long long)n);
        }
        kiln_tensor_destroy(y);
    }
}

/* float16 Transpose to channels-last and of the last two axes, sizes around the 8x8 blocks, against
 * the index formula */
KN_TEST(cpu_transpose_float16_blocks) {
    struct {
        int rank;
        int64_t dims[4];
        int64_t perm[4];
    } cases[] = {
        {4, {1, 64, 56, 56}, {0, 2, 3, 1}}, {4, {2, 19, 13, 11}, {0, 2, 3, 1}}, {3, {3, 24, 40}, {0, 2, 1}},
        {3, {2, 9, 17}, {0, 2, 1}},         {2, {8, 8}, {1, 0}},                {2, {7, 300}, {1, 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int r = cases[c].rank;
        int64_t n = 1;
        for (int d = 0; d < r; d++) n *= cases[c].dims[d];
        uint16_t *x = malloc(sizeof(uint16_t) * (size_t)n);
        for (int64_t i = 0; i < n; i++) x[i] = (uint16_t)(i * 2654435761u >> 7);
        oc_check_transpose("Transpose", c, KILN_DTYPE_FLOAT16, sizeof *x, r, cases[c].dims, cases[c].perm, x, 1, 2);
        free(x);
    }
}

/* float32 Transpose (16x16 register blocks at AVX-512, 8x8 at AVX2, the edges by the smaller blocks
 * and scalar) against the index mapping: sides of 16 exactly, past it by 1-15 (both block sizes'
 * edges), under 16, chunks of the source's contiguous axis (64) with a remainder; the values are
 * bit patterns (NaN payloads included), compared as bits. */
KN_TEST(cpu_transpose_float32_blocks) {
    struct {
        int rank;
        int64_t dims[4];
        int64_t perm[4];
    } cases[] = {
        {4, {1, 64, 56, 56}, {0, 2, 3, 1}}, {4, {2, 37, 13, 11}, {0, 2, 3, 1}}, {3, {3, 16, 16}, {0, 2, 1}},
        {3, {2, 33, 70}, {0, 2, 1}},        {2, {17, 300}, {1, 0}},             {2, {300, 31}, {1, 0}},
        {3, {2, 9, 40}, {0, 2, 1}},         {4, {1, 24, 8, 9}, {0, 2, 3, 1}},   {3, {4, 130, 47}, {0, 2, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int r = cases[c].rank;
        int64_t n = 1;
        for (int d = 0; d < r; d++) n *= cases[c].dims[d];
        uint32_t *x = malloc(sizeof(uint32_t) * (size_t)n);
        for (int64_t i = 0; i < n; i++) x[i] = (uint32_t)(i * 2654435761u);
        oc_check_transpose("float32 Transpose", c, KILN_DTYPE_FLOAT, sizeof *x, r, cases[c].dims, cases[c].perm, x, 1,
                           2);
        free(x);
    }
}

/* TopK on float rows (the running list with the eight-wide prefilter) against a stable sort: rows of
 * few distinct values (ties: the lower index first) with NaNs (the largest), row lengths around the
 * vector steps, k from 1 to past the list's bound, largest and smallest, sorted and index order. */
static const float *oc_topk_x;
static int oc_topk_largest;
static int oc_topk_cmp(const void *a, const void *b) {
    const int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    const float u = oc_topk_x[i], v = oc_topk_x[j];
    const bool un = isnan(u), vn = isnan(v);
    if (un != vn) return (un ? -1 : 1) * (oc_topk_largest ? 1 : -1);
    if (!un && u != v) return (u > v ? -1 : 1) * (oc_topk_largest ? 1 : -1);
    return i < j ? -1 : 1;
}
static int oc_idx_cmp(const void *a, const void *b) {
    const int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    return i < j ? -1 : i > j;
}

KN_TEST(cpu_topk_float_rows_against_stable_sort) {
    const int64_t rows = 3, lens[] = {17, 100, 1000, 4099}, ks[] = {1, 5, 8, 60, 300};
    uint32_t seed = 99;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            const int64_t n = lens[li], k = ks[ki];
            if (k > n) continue;
            const int64_t dims[2] = {rows, n};
            float *x = malloc(sizeof(float) * (size_t)(rows * n));
            for (int64_t i = 0; i < rows * n; i++) {
                x[i] = floorf(tmb_rand(&seed) * 24.0f);
                if (i % 97 == 13 && i % 3 != 0) x[i] = NAN;
            }
            int64_t *ref = malloc(sizeof(int64_t) * (size_t)n);
            for (int cfg = 0; cfg < 4; cfg++) {
                const int largest = cfg & 1, sorted = cfg >> 1 ^ 1;
                tmb_attr_spec at[3] = {{.name = "axis", .i = -1}, {.name = "largest", .i = largest}, {.name = "sorted", .i = sorted}};
                const int64_t kv[1] = {k};
                kn_tensor *kt = NULL;
                const int64_t kd[1] = {1};
                kn_tensor_new(KILN_DTYPE_INT64, 1, kd, &kt);
                memcpy(kt->data, kv, sizeof kv);
                kiln_tensor *y[2] = {NULL, NULL};
                if (oc_run("TopK", 11, KILN_DTYPE_FLOAT, 2, dims, x, &kt, 1, at, 3, 2, 1, y)) {
                    const float *gv = kiln_tensor_data(y[0]);
                    const int64_t *gi = kiln_tensor_data(y[1]);
                    int64_t bad = 0;
                    for (int64_t r = 0; r < rows; r++) {
                        for (int64_t i = 0; i < n; i++) ref[i] = i;
                        oc_topk_x = x + r * n;
                        oc_topk_largest = largest;
                        qsort(ref, (size_t)n, sizeof *ref, oc_topk_cmp);
                        if (!sorted) qsort(ref, (size_t)k, sizeof *ref, oc_idx_cmp);
                        for (int64_t i = 0; i < k; i++) {
                            const float want = x[r * n + ref[i]], got = gv[r * k + i];
                            bad += gi[r * k + i] != ref[i] || !(got == want || (isnan(got) && isnan(want)));
                        }
                    }
                    CHECK_MSG(bad == 0, "TopK n %lld k %lld largest %d sorted %d: %lld of %lld outputs differ from a "
                              "stable sort", (long long)n, (long long)k, largest, sorted, (long long)bad,
                              (long long)(rows * k));
                }
                kiln_tensor_destroy(y[0]);
                kiln_tensor_destroy(y[1]);
                kn_tensor_free(kt);
            }
            free(ref);
            free(x);
        }
}

/* Tile with repeats of whole rows (the doubling copies of a row) and of other axes, 1- and 4-byte
 * elements, 1 and 2 threads, against y[i] = x[i mod dims] per axis */
KN_TEST(cpu_tile_repeated_rows) {
    struct {
        int rank;
        int64_t dims[4], reps[4];
        kiln_dtype dt;
    } cases[] = {
        {4, {1, 64, 1, 56}, {1, 1, 56, 1}, KILN_DTYPE_FLOAT}, {4, {2, 3, 1, 5}, {1, 2, 7, 1}, KILN_DTYPE_FLOAT},
        {3, {3, 1, 9}, {2, 5, 1}, KILN_DTYPE_UINT8},          {3, {2, 2, 3}, {1, 3, 2}, KILN_DTYPE_FLOAT},
        {2, {1, 1000}, {33, 1}, KILN_DTYPE_UINT8},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int r = cases[c].rank;
        const size_t es = cases[c].dt == KILN_DTYPE_FLOAT ? 4 : 1;
        int64_t n = 1, m = 1, xs[4], yd[4];
        for (int d = r - 1; d >= 0; d--) xs[d] = n, n *= cases[c].dims[d];
        for (int d = 0; d < r; d++) yd[d] = cases[c].dims[d] * cases[c].reps[d], m *= yd[d];
        unsigned char *x = malloc(es * (size_t)n);
        for (int64_t i = 0; i < (int64_t)es * n; i++) x[i] = (unsigned char)(i * 37 + 11);
        kn_tensor *reps = NULL;
        const int64_t rd[1] = {r};
        kn_tensor_new(KILN_DTYPE_INT64, 1, rd, &reps);
        memcpy(reps->data, cases[c].reps, sizeof(int64_t) * (size_t)r);
        for (int threads = 1; threads <= 2; threads++) {
            kiln_tensor *y = NULL;
            if (oc_run("Tile", 13, cases[c].dt, r, cases[c].dims, x, &reps, 1, NULL, 0, 1, threads, &y)) {
                const unsigned char *g = kiln_tensor_data(y);
                int64_t bad = 0, idx[4] = {0};
                for (int64_t o = 0; o < m; o++) {
                    int64_t src = 0;
                    for (int d = 0; d < r; d++) src += idx[d] % cases[c].dims[d] * xs[d];
                    bad += memcmp(g + (size_t)o * es, x + (size_t)src * es, es) != 0;
                    for (int d = r - 1; d >= 0; d--) {
                        if (++idx[d] < yd[d]) break;
                        idx[d] = 0;
                    }
                }
                CHECK_MSG(bad == 0, "Tile case %zu, %d threads: %lld of %lld elements differ", c, threads,
                          (long long)bad, (long long)m);
            }
            kiln_tensor_destroy(y);
        }
        kn_tensor_free(reps);
        free(x);
    }
}

/* LRN (float rows: the window's squares in float, the power by sqrt steps for beta 3/4 or by
 * log/exp) and MeanVarianceNormalization (runs of the reduced trailing axes) against the
 * definitions in double; float16 against the float kernel rounded once */
static void oc_check_norm_double(const char *what, const char *op, int rank, const int64_t *dims, const tmb_attr_spec *at,
                                 int n_at, double alpha, double beta, double bias, int64_t size, const bool *mask,
                                 double tol) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= dims[d];
    float *x = malloc(sizeof(float) * (size_t)n);
    double *want = malloc(sizeof(double) * (size_t)n);
    uint32_t seed = (uint32_t)n;
    for (int64_t i = 0; i < n; i++) x[i] = 3.0f * tmb_rand(&seed) + (mask ? 0.5f : 0.0f);
    if (!mask) { /* LRN over axis 1 */
        const int64_t C = dims[1], inner = n / dims[0] / C, lo = (size - 1) / 2, hi = size - 1 - lo;
        for (int64_t i = 0; i < n; i++) {
            const int64_t img = i / (C * inner), ch = i / inner % C, p = i % inner;
            double s = 0;
            for (int64_t k = ch - lo; k <= ch + hi; k++)
                if (k >= 0 && k < C) s += (double)x[(img * C + k) * inner + p] * x[(img * C + k) * inner + p];
            want[i] = x[i] / pow(bias + alpha / (double)size * s, beta);
        }
    } else { /* MVN: mean and variance over the masked axes, E[x^2] - E[x]^2 as the reference */
        int64_t kept = 1;
        for (int d = 0; d < rank; d++)
            if (!mask[d]) kept *= dims[d];
        double *s1 = calloc((size_t)(3 * kept), sizeof(double)), *s2 = s1 + kept, *cnt = s2 + kept;
        int64_t *key = malloc(sizeof(int64_t) * (size_t)n), idx[4] = {0};
        for (int64_t i = 0; i < n; i++) {
            int64_t m = 0;
            for (int d = 0; d < rank; d++)
                if (!mask[d]) m = m * dims[d] + idx[d];
            key[i] = m;
            s1[m] += x[i], s2[m] += (double)x[i] * x[i], cnt[m] += 1;
            for (int d = rank - 1; d >= 0; d--) {
                if (++idx[d] < dims[d]) break;
                idx[d] = 0;
            }
        }
        for (int64_t i = 0; i < n; i++) {
            const double m = s1[key[i]] / cnt[key[i]], v = s2[key[i]] / cnt[key[i]] - m * m;
            want[i] = (x[i] - m) / (sqrt(v > 0 ? v : 0) + 1e-9);
        }
        free(s1);
        free(key);
    }
    for (int threads = 1; threads <= 2; threads++) {
        kiln_tensor *y = NULL;
        if (oc_run(op, 18, KILN_DTYPE_FLOAT, rank, dims, x, NULL, 0, at, n_at, 1, threads, &y)) {
            const float *g = kiln_tensor_data(y);
            int64_t bad = 0, first = -1;
            for (int64_t i = 0; i < n; i++)
                if (!(fabs(g[i] - want[i]) <= tol * fabs(want[i]) + 1e-6)) {
                    bad++;
                    if (first < 0) first = i;
                }
            CHECK_MSG(bad == 0, "%s, %d threads: %lld of %lld outputs off (first %lld: %.8g, want %.8g)", what, threads,
                      (long long)bad, (long long)n, (long long)first, first >= 0 ? (double)g[first] : 0.0,
                      first >= 0 ? want[first] : 0.0);
        }
        kiln_tensor_destroy(y);
    }
    free(x);
    free(want);
}

KN_TEST(cpu_lrn_against_double) {
    struct {
        int64_t dims[4];
        int64_t size;
        double alpha, beta, bias;
    } cases[] = {
        {{1, 64, 9, 11}, 5, 1e-4, 0.75, 1.0}, {{2, 7, 5, 5}, 3, 0.3, 0.75, 2.0}, {{1, 10, 3, 200}, 4, 0.5, 0.5, 1.5},
        {{1, 3, 1, 37}, 5, 2.0, 1.3, 1.0},    {{1, 96, 27, 27}, 5, 1e-4, 0.75, 2.0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char what[64];
        snprintf(what, sizeof what, "LRN case %zu (beta %g)", c, cases[c].beta);
        const tmb_attr_spec at[4] = {{.name = "size", .i = cases[c].size},
                               {.name = "alpha", .is_float = true, .f = (float)cases[c].alpha},
                               {.name = "beta", .is_float = true, .f = (float)cases[c].beta},
                               {.name = "bias", .is_float = true, .f = (float)cases[c].bias}};
        /* the reference takes the attributes as the kernel gets them: floats */
        oc_check_norm_double(what, "LRN", 4, cases[c].dims, at, 4, (float)cases[c].alpha, (float)cases[c].beta,
                             (float)cases[c].bias, cases[c].size, NULL, 4e-6);
        oc_check_rounded_once(what, "LRN", 13, 4, cases[c].dims, NULL, 0, at, 4, 51u + (uint32_t)c, -3.0f, 3.0f);
    }
}

KN_TEST(cpu_mvn_against_double) {
    struct {
        int rank;
        int64_t dims[4];
        int n_axes;
        int64_t axes[3];
    } cases[] = {
        {4, {2, 16, 9, 11}, 3, {0, 2, 3}}, {4, {1, 64, 56, 56}, 3, {0, 2, 3}}, {4, {2, 3, 5, 7}, 2, {2, 3}},
        {3, {4, 6, 33}, 1, {-1}},          {3, {4, 6, 33}, 1, {1}},            {4, {2, 3, 4, 5}, 2, {1, 3}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char what[64];
        snprintf(what, sizeof what, "MeanVarianceNormalization case %zu", c);
        const tmb_attr_spec at[1] = {{.name = "axes", .ints = cases[c].axes, .n_ints = cases[c].n_axes}};
        bool mask[4] = {false};
        for (int a = 0; a < cases[c].n_axes; a++) mask[(cases[c].axes[a] + cases[c].rank) % cases[c].rank] = true;
        oc_check_norm_double(what, "MeanVarianceNormalization", cases[c].rank, cases[c].dims, at, 1, 0, 0, 0, 0, mask,
                             2e-6);
        oc_check_rounded_once(what, "MeanVarianceNormalization", 13, cases[c].rank, cases[c].dims, NULL, 0, at, 1,
                              61u + (uint32_t)c, -2.0f, 3.0f);
    }
}

/* DepthToSpace and SpaceToDepth (the row kernel: the b = 2 four-byte interleave and the typed
 * loops), both modes, 1- to 8-byte elements, widths around the 4-column step, against the ONNX
 * index formulas */
KN_TEST(cpu_depth_space_rows) {
    struct {
        int64_t dims[4]; /* the space side: N, C, H b, W b */
        int64_t b;
        kiln_dtype dt;
    } cases[] = {
        {{1, 16, 56, 56}, 2, KILN_DTYPE_FLOAT}, {{2, 3, 6, 14}, 2, KILN_DTYPE_FLOAT}, {{1, 2, 9, 15}, 3, KILN_DTYPE_FLOAT},
        {{1, 4, 8, 10}, 2, KILN_DTYPE_UINT8},   {{1, 3, 4, 12}, 2, KILN_DTYPE_FLOAT16}, {{2, 2, 6, 6}, 3, KILN_DTYPE_INT64},
        {{1, 1, 2, 2}, 1, KILN_DTYPE_FLOAT},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int crd = 0; crd < 2; crd++)
            for (int dir = 0; dir < 2; dir++) { /* 0: SpaceToDepth of the space side, 1: DepthToSpace back */
                const int64_t b = cases[ci].b, N = cases[ci].dims[0], C = cases[ci].dims[1];
                const int64_t H = cases[ci].dims[2] / b, W = cases[ci].dims[3] / b, n = N * C * H * b * W * b;
                const int64_t depth[4] = {N, C * b * b, H, W};
                const size_t es = kiln_dtype_size(cases[ci].dt);
                unsigned char *x = malloc(es * (size_t)n);
                for (int64_t i = 0; i < (int64_t)es * n; i++) x[i] = (unsigned char)(i * 131 + 7);
                const tmb_attr_spec at[2] = {{.name = "blocksize", .i = b}, {.name = "mode", .s = crd ? "CRD" : "DCR"}};
                kiln_tensor *y = NULL;
                if (oc_run(dir ? "DepthToSpace" : "SpaceToDepth", 13, cases[ci].dt, 4, dir ? depth : cases[ci].dims, x,
                           NULL, 0, at, dir ? 2 : 1, 1, 1 + dir, &y)) {
                    const unsigned char *g = kiln_tensor_data(y);
                    int64_t bad = 0;
                    for (int64_t nn = 0; nn < N; nn++)
                        for (int64_t c = 0; c < C; c++)
                            for (int64_t i = 0; i < b; i++)
                                for (int64_t jj = 0; jj < b; jj++)
                                    for (int64_t h = 0; h < H; h++)
                                        for (int64_t w = 0; w < W; w++) {
                                            /* SpaceToDepth has no mode: DCR (run twice) */
                                            const int64_t ch = dir && crd ? (c * b + i) * b + jj : (i * b + jj) * C + c;
                                            const int64_t sp = ((nn * C + c) * H * b + h * b + i) * W * b + w * b + jj;
                                            const int64_t dp = ((nn * C * b * b + ch) * H + h) * W + w;
                                            const int64_t got = dir ? sp : dp, src = dir ? dp : sp;
                                            bad += memcmp(g + (size_t)got * es, x + (size_t)src * es, es) != 0;
                                        }
                    CHECK_MSG(bad == 0, "%s case %zu mode %s: %lld of %lld elements misplaced",
                              dir ? "DepthToSpace" : "SpaceToDepth", ci, crd ? "CRD" : "DCR", (long long)bad, (long long)n);
                }
                kiln_tensor_destroy(y);
                free(x);
            }
}

/* ArgMax / ArgMin along a middle or outer axis (the column blocks): few distinct values (ties, the
 * first or with select_last_index the last) and NaNs (the first NaN wins, as numpy), block edges,
 * against a reference written here */
KN_TEST(cpu_argminmax_columns) {
    const int64_t dims[3] = {3, 37, 1100}; /* axis 1: a block of ARGCOL_BLOCK (1024) columns and a tail */
    const int64_t n = dims[0] * dims[1] * dims[2];
    float *x = malloc(sizeof(float) * (size_t)n);
    uint32_t seed = 77;
    for (int64_t i = 0; i < n; i++) {
        x[i] = floorf(tmb_rand(&seed) * 3.0f);
        if (i % 613 == 5) x[i] = NAN;
    }
    for (int axis = 0; axis < 2; axis++)
        for (int is_max = 0; is_max < 2; is_max++)
            for (int last = 0; last < 2; last++) {
                const int64_t outer = axis ? dims[0] : 1, len = dims[axis], inner = axis ? dims[2] : dims[1] * dims[2];
                const tmb_attr_spec at[2] = {{.name = "axis", .i = axis}, {.name = "select_last_index", .i = last}};
                kiln_tensor *y = NULL;
                if (oc_run(is_max ? "ArgMax" : "ArgMin", 13, KILN_DTYPE_FLOAT, 3, dims, x, NULL, 0, at, 2, 1, 2, &y)) {
                    const int64_t *g = kiln_tensor_data(y);
                    int64_t bad = 0;
                    for (int64_t o = 0; o < outer; o++)
                        for (int64_t i = 0; i < inner; i++) {
                            const float *p = x + o * len * inner + i;
                            int64_t want = -1;
                            for (int64_t r = 0; r < len && want < 0; r++)
                                if (isnan(p[r * inner])) want = r;
                            if (want < 0) {
                                float v = p[0];
                                for (int64_t r = 1; r < len; r++)
                                    v = is_max ? fmaxf(v, p[r * inner]) : fminf(v, p[r * inner]);
                                for (int64_t r = 0; r < len; r++)
                                    if (p[r * inner] == v && (want < 0 || last)) want = r;
                            }
                            bad += g[o * inner + i] != want;
                        }
                    CHECK_MSG(bad == 0, "%s axis %d select_last_index %d: %lld of %lld indices differ",
                              is_max ? "ArgMax" : "ArgMin", axis, last, (long long)bad, (long long)(outer * inner));
                }
                kiln_tensor_destroy(y);
            }
    free(x);
}

/* Transposes with a short innermost axis on one side (2-3 elements: MODE_WEAVE), 1- to 8-byte
 * elements, 1 and 2 threads, against the index formula */
KN_TEST(cpu_transpose_short_axis) {
    struct {
        int rank;
        int64_t dims[4], perm[4];
        kiln_dtype dt;
    } cases[] = {
        {4, {1, 3, 224, 224}, {0, 2, 3, 1}, KILN_DTYPE_FLOAT}, {4, {1, 224, 224, 3}, {0, 3, 1, 2}, KILN_DTYPE_FLOAT},
        {4, {2, 3, 17, 19}, {0, 2, 3, 1}, KILN_DTYPE_UINT8},   {4, {2, 17, 19, 3}, {0, 3, 1, 2}, KILN_DTYPE_FLOAT16},
        {3, {2, 2, 4099}, {0, 2, 1}, KILN_DTYPE_FLOAT},        {3, {2, 4099, 2}, {0, 2, 1}, KILN_DTYPE_INT64},
        {2, {3, 5}, {1, 0}, KILN_DTYPE_FLOAT},                  {4, {3, 2, 5, 7}, {1, 2, 3, 0}, KILN_DTYPE_UINT8},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int r = cases[c].rank;
        const size_t es = kiln_dtype_size(cases[c].dt);
        int64_t n = 1;
        for (int d = 0; d < r; d++) n *= cases[c].dims[d];
        unsigned char *x = malloc(es * (size_t)n);
        for (int64_t i = 0; i < (int64_t)es * n; i++) x[i] = (unsigned char)(i * 2654435761u >> 9);
        oc_check_transpose("Transpose", c, cases[c].dt, es, r, cases[c].dims, cases[c].perm, x, 1, 2);
        free(x);
    }
}

/* 1-byte transposes (8x8 register blocks with tails) against the index formula */
KN_TEST(cpu_transpose_bytes) {
    struct {
        int rank;
        int64_t dims[4], perm[4];
    } cases[] = {
        {4, {1, 12, 128, 64}, {0, 2, 3, 1}}, {4, {2, 13, 9, 21}, {0, 2, 3, 1}}, {3, {3, 40, 24}, {0, 2, 1}},
        {2, {8, 8}, {1, 0}},                 {2, {300, 7}, {1, 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int r = cases[c].rank;
        int64_t n = 1;
        for (int d = 0; d < r; d++) n *= cases[c].dims[d];
        uint8_t *x = malloc((size_t)n);
        for (int64_t i = 0; i < n; i++) x[i] = (uint8_t)(i * 2654435761u >> 11);
        oc_check_transpose("uint8 Transpose", c, KILN_DTYPE_UINT8, sizeof *x, r, cases[c].dims, cases[c].perm, x, 2, 2);
        free(x);
    }
}

/* TopK along a middle axis ([2, n, 11]: a block of eight columns and a tail of three): the vector
 * columns (k <= 8, sorted) and the gathered columns (k > 8, or index order) against a stable sort */
KN_TEST(cpu_topk_columns_against_stable_sort) {
    const int64_t lens[] = {17, 100}, ks[] = {1, 5, 8, 12}, outer = 2, inner = 11;
    uint32_t seed = 5;
    for (size_t li = 0; li < 2; li++)
        for (size_t ki = 0; ki < 4; ki++) {
            const int64_t n = lens[li], k = ks[ki], dims[3] = {outer, n, inner}, total = outer * n * inner;
            if (k > n) continue;
            float *x = malloc(sizeof(float) * (size_t)total), *col = malloc(sizeof(float) * (size_t)n);
            int64_t *ref = malloc(sizeof(int64_t) * (size_t)n);
            for (int64_t i = 0; i < total; i++) {
                x[i] = floorf(tmb_rand(&seed) * 6.0f);
                if (i % 53 == 7) x[i] = NAN;
                if (i % 41 == 3) x[i] = -0.0f;
            }
            for (int cfg = 0; cfg < 4; cfg++) {
                const int largest = cfg & 1, sorted = cfg >> 1 ^ 1;
                const tmb_attr_spec at[3] = {{.name = "axis", .i = 1}, {.name = "largest", .i = largest}, {.name = "sorted", .i = sorted}};
                kn_tensor *kt = oc_i64(1, k);
                kiln_tensor *y[2] = {NULL, NULL};
                if (oc_run("TopK", 11, KILN_DTYPE_FLOAT, 3, dims, x, &kt, 1, at, 3, 2, 1 + (int)(ki & 1), y)) {
                    const float *gv = kiln_tensor_data(y[0]);
                    const int64_t *gi = kiln_tensor_data(y[1]);
                    int64_t bad = 0;
                    for (int64_t o = 0; o < outer; o++)
                        for (int64_t c = 0; c < inner; c++) {
                            for (int64_t r = 0; r < n; r++) col[r] = x[(o * n + r) * inner + c], ref[r] = r;
                            oc_topk_x = col;
                            oc_topk_largest = largest;
                            qsort(ref, (size_t)n, sizeof *ref, oc_topk_cmp);
                            if (!sorted) qsort(ref, (size_t)k, sizeof *ref, oc_idx_cmp);
                            for (int64_t q = 0; q < k; q++) {
                                const int64_t at_ = (o * k + q) * inner + c;
                                const float want = col[ref[q]], got = gv[at_];
                                bad += gi[at_] != ref[q] || memcmp(&got, &want, sizeof got) != 0;
                            }
                        }
                    CHECK_MSG(bad == 0, "TopK axis 1 n %lld k %lld largest %d sorted %d: %lld of %lld outputs differ",
                              (long long)n, (long long)k, largest, sorted, (long long)bad, (long long)(outer * k * inner));
                }
                kiln_tensor_destroy(y[0]);
                kiln_tensor_destroy(y[1]);
                kn_tensor_free(kt);
            }
            free(x);
            free(col);
            free(ref);
        }
}

/* Trilu in one pass (rows copied in part, cleared in part): upper and lower, k from below -N to
 * past M, 1- to 8-byte elements, against the definition; the 2x300x500 shape at 2 threads is
 * split across the pool in row ranges that start inside a matrix */
KN_TEST(cpu_trilu_rows) {
    const int64_t shapes[2][3] = {{3, 7, 11}, {2, 300, 500}};
    const kiln_dtype dts[3] = {KILN_DTYPE_FLOAT, KILN_DTYPE_UINT8, KILN_DTYPE_INT64};
    const int64_t ks[6] = {-9, -2, 0, 1, 5, 12};
    for (int sh = 0; sh < 2; sh++)
    for (int t = 0; t < 3; t++) {
        const int64_t *dims = shapes[sh], N = dims[1], M = dims[2], count = dims[0] * N * M;
        const int threads = sh ? 2 : 1;
        const size_t es = kiln_dtype_size(dts[t]);
        unsigned char *x = malloc(es * (size_t)count);
        for (size_t i = 0; i < es * (size_t)count; i++) x[i] = (unsigned char)(i * 29 + 3) | 1; /* no zero element */
        for (int ki = 0; ki < 6; ki++)
            for (int upper = 0; upper < 2; upper++) {
                kn_tensor *kt = oc_i64(0, ks[ki]);
                const tmb_attr_spec at[1] = {{.name = "upper", .i = upper}};
                kiln_tensor *y = NULL;
                if (oc_run("Trilu", 14, dts[t], 3, dims, x, &kt, 1, at, 1, 1, threads, &y)) {
                    const unsigned char *g = kiln_tensor_data(y);
                    int64_t bad = 0;
                    for (int64_t e = 0; e < count; e++) {
                        const int64_t i = e / M % N, j = e % M;
                        const bool keep = upper ? j - i >= ks[ki] : j - i <= ks[ki];
                        for (size_t b = 0; b < es; b++) bad += g[e * (int64_t)es + (int64_t)b] != (keep ? x[e * (int64_t)es + (int64_t)b] : 0);
                    }
                    CHECK_MSG(bad == 0, "Trilu %s k %lld type %d: %lld bytes differ", upper ? "upper" : "lower",
                              (long long)ks[ki], t, (long long)bad);
                }
                kiln_tensor_destroy(y);
                kn_tensor_free(kt);
            }
        free(x);
    }
}

/* How CumSum/CumProd and the strided reductions split their work across the pool (row groups and
 * column blocks; column blocks on 64-byte lines, made a multiple of the threads where few, summed
 * in registers where a thread's part fits its L2) and TopK's float columns (eight or sixteen a
 * vector): one-node models through whole sessions at 1, 2, 3, 5 and 16 threads, each output
 * against the definition computed here in the same order of operations, bit for bit. */
#include "ir/tensor.h"
#include "test_model_builder.h"
#include "unit.h"

#include <math.h>
#include <stdlib.h>

static const int split_threads[5] = {1, 2, 3, 5, 16};

/* Runs op on x (graph input "x" of dtype dt) with an int64 constant second input (rank0: a
 * scalar) and int attributes (names[i] = vals[i]); n_out outputs into y. */
static bool split_run(const char *op, int opset, kiln_dtype dt, int rank, const int64_t *dims, const void *xv,
                      const int64_t *c1, int n_c1, bool rank0, const char *const *names, const int64_t *vals,
                      int n_attrs, int n_out, int threads, kiln_tensor **y) {
    tmb b;
    tmb_init(&b, opset);
    int in[2];
    in[0] = tmb_input(&b, "x", dt, rank, dims, NULL);
    in[1] = tmb_const_i64(&b, "c", c1, n_c1, rank0);
    int node = tmb_node_outputs(&b, op, in, 2, n_out);
    for (int a = 0; a < n_attrs; a++) tmb_int(&b, node, names[a], vals[a]);
    return tmb_run_x(&b, op, dt, rank, dims, xv, n_out, threads, y);
}

/* CumSum / CumProd over axis `axis` of [pre, D, post] (rank 3), in float, float16 (a float running
 * value, each output rounded once) and int32 (wrapping), against the chain computed here. Shapes:
 * last-axis rows that leave a group of 1-3 rows at the end, and column blocks (at least 256 wide,
 * a part block last) where the slices are fewer than twice the threads that take part. */
static void cum_case(const char *op, kiln_dtype dt, int64_t pre, int64_t D, int64_t post, bool excl, bool rev,
                     uint32_t seed) {
    const bool prod = op[3] == 'P';
    const int64_t n = pre * D * post, dims[3] = {pre, D, post};
    const size_t es = dt == KILN_DTYPE_FLOAT16 ? 2 : 4;
    float *xf = malloc(sizeof(float) * (size_t)n);
    int32_t *xi = malloc(sizeof(int32_t) * (size_t)n);
    unsigned char *xb = malloc(es * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        const float r = tmb_rand(&seed);
        xi[i] = (int32_t)(r * 1000.0f);
        xf[i] = prod ? 1.0f + r / 64.0f : 3.0f * r;
        if (dt == KILN_DTYPE_FLOAT16) {
            ((uint16_t *)xb)[i] = kn_f32_to_f16(xf[i]);
            xf[i] = kn_f16_to_f32(((uint16_t *)xb)[i]);
        } else if (dt == KILN_DTYPE_FLOAT) {
            ((float *)xb)[i] = xf[i];
        } else {
            ((int32_t *)xb)[i] = xi[i];
        }
    }
    /* the reference: each chain (p, q) in its order, one operation per element */
    float *wf = malloc(sizeof(float) * (size_t)n);
    int32_t *wi = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t p = 0; p < pre; p++)
        for (int64_t q = 0; q < post; q++) {
            float af = prod ? 1.0f : 0.0f;
            uint32_t ai = prod ? 1u : 0u;
            for (int64_t t = 0; t < D; t++) {
                const int64_t i = rev ? D - 1 - t : t, at = (p * D + i) * post + q;
                if (excl) wf[at] = af, wi[at] = (int32_t)ai;
                af = t == 0 && !excl ? xf[at] : prod ? af * xf[at] : af + xf[at];
                ai = t == 0 && !excl ? (uint32_t)xi[at] : prod ? ai * (uint32_t)xi[at] : ai + (uint32_t)xi[at];
                if (!excl) wf[at] = af, wi[at] = (int32_t)ai;
            }
        }
    const char *names[2] = {"exclusive", "reverse"};
    const int64_t vals[2] = {excl, rev}, axis = 1;
    for (int ti = 0; ti < 5; ti++) {
        kiln_tensor *y = NULL;
        if (!split_run(op, prod ? 26 : 14, dt, 3, dims, xb, &axis, 1, true, names, vals, 2, 1, split_threads[ti], &y))
            continue;
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n && kiln_tensor_element_count(y) == n; i++) {
            bool ok;
            if (dt == KILN_DTYPE_FLOAT16) ok = ((const uint16_t *)kiln_tensor_data(y))[i] == kn_f32_to_f16(wf[i]);
            else if (dt == KILN_DTYPE_FLOAT) ok = !memcmp((const float *)kiln_tensor_data(y) + i, wf + i, 4);
            else ok = ((const int32_t *)kiln_tensor_data(y))[i] == wi[i];
            if (!ok && !bad++) first = i;
        }
        CHECK_MSG(kiln_tensor_element_count(y) == n && bad == 0,
                  "%s %s [%lld, %lld, %lld] excl %d rev %d, %d threads: %lld of %lld outputs wrong (first %lld)", op,
                  kiln_dtype_name(dt), (long long)pre, (long long)D, (long long)post, excl, rev, split_threads[ti],
                  (long long)bad, (long long)n, (long long)first);
        kiln_tensor_destroy(y);
    }
    free(xf);
    free(xi);
    free(xb);
    free(wf);
    free(wi);
}

KN_TEST(cpu_cumulative_split_threads) {
    static const kiln_dtype dts[3] = {KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT16, KILN_DTYPE_INT32};
    for (int di = 0; di < 3; di++)
        for (int flags = 0; flags < 4; flags++) {
            const bool excl = flags & 1, rev = flags >> 1;
            cum_case("CumSum", dts[di], 1, 37, 1, excl, rev, 3u + (uint32_t)flags);   /* one row */
            cum_case("CumSum", dts[di], 39, 300, 1, excl, rev, 5u + (uint32_t)flags); /* 9 groups + 3 rows */
            cum_case("CumSum", dts[di], 3, 29, 700, excl, rev, 7u + (uint32_t)flags); /* 352 + 348 at 16 threads */
            cum_case("CumSum", dts[di], 1, 40, 2000, excl, rev, 9u + (uint32_t)flags); /* 6 blocks at 5, 8 at 16 */
        }
    cum_case("CumProd", KILN_DTYPE_FLOAT, 21, 100, 1, false, false, 11u);
    cum_case("CumProd", KILN_DTYPE_FLOAT16, 21, 100, 1, true, true, 12u);
    cum_case("CumProd", KILN_DTYPE_FLOAT16, 1, 40, 2000, false, true, 13u);
}

/* ReduceSum / ReduceMax / ReduceMean / ReduceSumSquare over the middle axis of [outer, n, inner]
 * (the strided form) against the rows summed in order here: inner values that are and are not a
 * multiple of 16, of 64 and of the threads' blocks; 1x256x3136 at 1 thread (3.2 MB: the rows'
 * loop) and at 16 (the register blocks). */
static void reduce_case(const char *op, int64_t outer, int64_t n, int64_t inner, uint32_t seed) {
    const int64_t cnt = outer * n * inner, dims[3] = {outer, n, inner}, kept = outer * inner;
    float *x = malloc(sizeof(float) * (size_t)cnt), *w = malloc(sizeof(float) * (size_t)kept);
    for (int64_t i = 0; i < cnt; i++) x[i] = tmb_rand(&seed) * 4.0f;
    if (cnt > 5) x[cnt / 3] = NAN; /* a NaN in one column: max, sums and means make it NaN */
    const bool max = !strcmp(op, "ReduceMax"), mean = !strcmp(op, "ReduceMean"), sq = !strcmp(op, "ReduceSumSquare");
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *p = x + o * n * inner + i;
            float a = max ? p[0] : 0.0f;
            for (int64_t r = 0; r < n; r++) {
                const float v = p[r * inner];
                if (max) a = (v > a || v != v) ? v : a;
                else a += sq ? v * v : v;
            }
            w[o * inner + i] = mean ? a / (float)n : a;
        }
    const int64_t axis = 1;
    const char *names[1] = {"keepdims"};
    const int64_t vals[1] = {0};
    const int opset = 18; /* axes as the second input */
    for (int ti = 0; ti < 5; ti++) {
        if (cnt > 500000 && split_threads[ti] != 1 && split_threads[ti] != 16) continue;
        kiln_tensor *y = NULL;
        if (!split_run(op, opset, KILN_DTYPE_FLOAT, 3, dims, x, &axis, 1, false, names, vals, 1, 1, split_threads[ti], &y))
            continue;
        int64_t bad = 0, first = -1;
        const float *g = kiln_tensor_data(y);
        for (int64_t i = 0; i < kept && kiln_tensor_element_count(y) == kept; i++)
            if (memcmp(g + i, w + i, 4) && !(g[i] != g[i] && w[i] != w[i]) && !bad++) first = i;
        CHECK_MSG(kiln_tensor_element_count(y) == kept && bad == 0,
                  "%s [%lld, %lld, %lld] axis 1, %d threads: %lld of %lld outputs wrong (first %lld: %a, want %a)", op,
                  (long long)outer, (long long)n, (long long)inner, split_threads[ti], (long long)bad, (long long)kept,
                  (long long)first, first >= 0 ? (double)g[first] : 0.0, first >= 0 ? (double)w[first] : 0.0);
        kiln_tensor_destroy(y);
    }
    free(x);
    free(w);
}

KN_TEST(cpu_reduce_strided_split_threads) {
    static const char *const ops[4] = {"ReduceSum", "ReduceMax", "ReduceMean", "ReduceSumSquare"};
    for (int k = 0; k < 4; k++) {
        reduce_case(ops[k], 1, 40, 3136, 1u + (uint32_t)k); /* 196 lines */
        reduce_case(ops[k], 3, 17, 100, 2u + (uint32_t)k);  /* 7 lines, the last part */
        reduce_case(ops[k], 2, 9, 1000, 3u + (uint32_t)k);  /* 4 blocks of 256 columns */
        reduce_case(ops[k], 5, 3, 7, 4u + (uint32_t)k);     /* under a line */
    }
    reduce_case("ReduceSum", 1, 256, 3136, 9u);
}

/* TopK over a middle axis of float columns, k <= 8, sorted (the vector path: eight or sixteen
 * columns a vector, the last block masked) against a stable sort of each column: NaN the largest,
 * -0 equal to 0, ties the lower index first; the values the elements themselves (a -0 stays -0). */
static const float *split_col;
static int64_t split_stride;
static int split_largest;
static int split_topk_cmp(const void *a, const void *b) {
    const int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    const float u = split_col[i * split_stride], v = split_col[j * split_stride];
    const bool un = isnan(u), vn = isnan(v);
    if (un != vn) return (un ? -1 : 1) * (split_largest ? 1 : -1);
    if (!un && u != v) return (u > v ? -1 : 1) * (split_largest ? 1 : -1);
    return i < j ? -1 : 1;
}

KN_TEST(cpu_topk_float_columns_split_threads) {
    static const int64_t inners[5] = {8, 13, 16, 45, 100}, ns[3] = {1, 7, 80}, ks[4] = {1, 3, 5, 8};
    uint32_t seed = 41;
    for (int ii = 0; ii < 5; ii++)
        for (int ni = 0; ni < 3; ni++)
            for (int ki = 0; ki < 4; ki++) {
                const int64_t inner = inners[ii], n = ns[ni], k = ks[ki], outer = 2;
                if (k > n) continue;
                const int64_t cnt = outer * n * inner, dims[3] = {outer, n, inner};
                float *x = malloc(sizeof(float) * (size_t)cnt);
                for (int64_t i = 0; i < cnt; i++) {
                    x[i] = floorf(tmb_rand(&seed) * 6.0f);
                    if (x[i] == 0.0f && i % 2) x[i] = -0.0f;
                    if (i % 53 == 7) x[i] = NAN;
                }
                int64_t *ref = malloc(sizeof(int64_t) * (size_t)n);
                for (int largest = 0; largest < 2; largest++)
                    for (int ti = 0; ti < 5; ti += 1 + (ni == 0)) {
                        const char *names[3] = {"axis", "largest", "sorted"};
                        const int64_t vals[3] = {1, largest, 1};
                        kiln_tensor *y[2] = {NULL, NULL};
                        if (!split_run("TopK", 11, KILN_DTYPE_FLOAT, 3, dims, x, &k, 1, false, names, vals, 3, 2,
                                       split_threads[ti], y))
                            continue;
                        const float *gv = kiln_tensor_data(y[0]);
                        const int64_t *gi = kiln_tensor_data(y[1]);
                        int64_t bad = 0;
                        for (int64_t o = 0; o < outer; o++)
                            for (int64_t c = 0; c < inner; c++) {
                                for (int64_t r = 0; r < n; r++) ref[r] = r;
                                split_col = x + o * n * inner + c;
                                split_stride = inner;
                                split_largest = largest;
                                qsort(ref, (size_t)n, sizeof *ref, split_topk_cmp);
                                for (int64_t q = 0; q < k; q++) {
                                    const int64_t at = (o * k + q) * inner + c;
                                    const float want = split_col[ref[q] * inner];
                                    bad += gi[at] != ref[q] || memcmp(gv + at, &want, 4) != 0;
                                }
                            }
                        CHECK_MSG(bad == 0, "TopK [2, %lld, %lld] axis 1 k %lld largest %d, %d threads: %lld of %lld "
                                  "outputs differ from a stable sort", (long long)n, (long long)inner, (long long)k,
                                  largest, split_threads[ti], (long long)bad, (long long)(outer * k * inner));
                        kiln_tensor_destroy(y[0]);
                        kiln_tensor_destroy(y[1]);
                    }
                free(ref);
                free(x);
            }
}

/* float16 reductions over a middle axis (each block widened in its thread, reduced in float in the
 * rows' order, rounded once): against the float sums computed here in that order, rounded once */
static void reduce_half_case(const char *op, int64_t outer, int64_t n, int64_t inner, uint32_t seed) {
    const int64_t cnt = outer * n * inner, dims[3] = {outer, n, inner}, kept = outer * inner;
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)cnt), *w = malloc(sizeof(uint16_t) * (size_t)kept);
    for (int64_t i = 0; i < cnt; i++) x[i] = kn_f32_to_f16(tmb_rand(&seed) * 4.0f);
    const bool max = !strcmp(op, "ReduceMax"), mean = !strcmp(op, "ReduceMean");
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const uint16_t *p = x + o * n * inner + i;
            float a = max ? kn_f16_to_f32(p[0]) : 0.0f;
            for (int64_t r = 0; r < n; r++) {
                const float v = kn_f16_to_f32(p[r * inner]);
                if (max) a = v > a ? v : a;
                else a += v;
            }
            w[o * inner + i] = kn_f32_to_f16(mean ? a / (float)n : a);
        }
    const int64_t axis = 1;
    const char *names[1] = {"keepdims"};
    const int64_t vals[1] = {0};
    for (int ti = 0; ti < 5; ti++) {
        kiln_tensor *y = NULL;
        if (!split_run(op, 18, KILN_DTYPE_FLOAT16, 3, dims, x, &axis, 1, false, names, vals, 1, 1, split_threads[ti], &y))
            continue;
        int64_t bad = 0, first = -1;
        const uint16_t *g = kiln_tensor_data(y);
        for (int64_t i = 0; i < kept && kiln_tensor_element_count(y) == kept; i++)
            if (g[i] != w[i] && !bad++) first = i;
        CHECK_MSG(kiln_tensor_element_count(y) == kept && bad == 0,
                  "%s float16 [%lld, %lld, %lld] axis 1, %d threads: %lld of %lld outputs wrong (first %lld)", op,
                  (long long)outer, (long long)n, (long long)inner, split_threads[ti], (long long)bad, (long long)kept,
                  (long long)first);
        kiln_tensor_destroy(y);
    }
    free(x);
    free(w);
}

KN_TEST(cpu_reduce_strided_float16_split_threads) {
    static const char *const ops[3] = {"ReduceSum", "ReduceMax", "ReduceMean"};
    for (int k = 0; k < 3; k++) {
        reduce_half_case(ops[k], 1, 64, 3136, 21u + (uint32_t)k);
        reduce_half_case(ops[k], 3, 17, 100, 22u + (uint32_t)k);
        reduce_half_case(ops[k], 2, 5000, 40, 23u + (uint32_t)k); /* 5000 rows: blocks of at most 48 columns */
        reduce_half_case(ops[k], 5, 3, 7, 24u + (uint32_t)k);
    }
}

/* The data movement kernels of tensor_index.c and tensor_layout.c against their plain definitions,
 * written here from the operators' specifications: Gather, GatherElements and GatherND (negative
 * indices, int32 and int64 indices, batch_dims, rows of one element and of many, enough rows for
 * two threads), Pad's edge, reflect and wrap modes (the runs of forward, reversed and repeated
 * elements, rows longer than a work item), and the large float Transpose that writes around the
 * caches (into a caller's buffer at several alignments). Elements of 1, 2, 4 and 8 bytes hold bit
 * patterns compared as bits; 1 and 2 threads. Indices out of range must fail the run with a
 * message naming the index. */
#include "test_model_builder.h"
#include "unit.h"

#include <stdint.h>
#include <stdlib.h>

/* A graph input of the node: type, shape and values */
typedef struct dm_in {
    kiln_dtype dt;
    int rank;
    int64_t dims[6];
    const void *v;
} dm_in;

/* Runs op (opset) on the graph inputs in[0, n_in) (named i0, i1, ...), then the constants consts
 * (the model takes them), with attributes at, on `threads` threads; the one output into *y (made by
 * the run), or, where into is given, into that caller tensor (kiln_session_run_into). Returns the
 * run's status (a refused session's where it was refused). */
static kiln_status dm_run(const char *op, int opset, const dm_in *in, int n_in, kn_tensor **consts, int n_consts,
                          const tmb_attr_spec *at, int n_at, int threads, kiln_tensor **y, kiln_tensor *into) {
    tmb b;
    tmb_init_onnx(&b, opset);
    int ids[8];
    for (int i = 0; i < n_in; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "i%d", i);
        ids[i] = tmb_input(&b, nm, in[i].dt, in[i].rank, in[i].dims, NULL);
    }
    for (int i = 0; i < n_consts; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "c%d", i);
        ids[n_in + i] = tmb_const_tensor(&b, nm, consts[i]);
    }
    tmb_attrs(&b, tmb_node_outputs(&b, op, ids, n_in + n_consts, 1), at, n_at);
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);
    *y = NULL;
    if (!data) return KILN_ERR_INTERNAL;
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_intra_op_threads(o, threads);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(data, size, NULL, o, &s);
    kiln_session_options_destroy(o);
    free(data);
    if (st != KILN_OK) return st;
    kiln_tensor *ts[8];
    const char *names[8] = {"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7"};
    for (int i = 0; i < n_in; i++) ts[i] = tmb_tensor_of(in[i].dt, in[i].dims, in[i].rank, in[i].v);
    if (into) st = kiln_session_run_into(s, names, ts, (size_t)n_in, NULL, 1, &into);
    else st = kiln_session_run(s, names, ts, (size_t)n_in, NULL, 1, y);
    for (int i = 0; i < n_in; i++) kiln_tensor_destroy(ts[i]);
    kiln_session_destroy(s);
    return st;
}

/* n elements of es bytes, each a different bit pattern of its index and seed */
static void *dm_pattern(int64_t n, size_t es, uint32_t seed) {
    unsigned char *p = malloc((size_t)(n > 0 ? n : 1) * es);
    for (int64_t i = 0; i < n; i++) {
        uint64_t v = ((uint64_t)i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 32);
        memcpy(p + (size_t)i * es, &v, es < 8 ? es : 8);
        p[(size_t)i * es] = (unsigned char)(i * 131 + seed); /* the low byte differs between neighbours */
    }
    return p;
}

static int64_t dm_count(const int64_t *d, int r) {
    int64_t n = 1;
    for (int k = 0; k < r; k++) n *= d[k];
    return n;
}

/* The index tensor's values: v[i] as int32 or int64 */
static void *dm_indices(const int64_t *v, int64_t n, bool i32) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * 8);
    for (int64_t i = 0; i < n; i++) {
        if (i32) ((int32_t *)p)[i] = (int32_t)v[i];
        else ((int64_t *)p)[i] = v[i];
    }
    return p;
}

/* Compares the output with want (n elements of es bytes), bit for bit, and its shape. */
static void dm_check(const char *what, const kiln_tensor *y, const int64_t *ydims, int yr, const void *want, size_t es) {
    if (!y) return;
    const int64_t n = dm_count(ydims, yr);
    CHECK_MSG(kiln_tensor_rank(y) == yr && !memcmp(kiln_tensor_dims(y), ydims, sizeof(int64_t) * (size_t)yr),
              "%s: output shape differs", what);
    if (kiln_tensor_element_count(y) != n) return;
    const unsigned char *g = kiln_tensor_data((kiln_tensor *)y), *w = want;
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(g + (size_t)i * es, w + (size_t)i * es, es)) {
            if (first < 0) first = i;
            bad++;
        }
    CHECK_MSG(bad == 0, "%s: %lld of %lld elements wrong, first at %lld", what, (long long)bad, (long long)n,
              (long long)first);
}

static const kiln_dtype dm_types[4] = {KILN_DTYPE_UINT8, KILN_DTYPE_FLOAT16, KILN_DTYPE_FLOAT, KILN_DTYPE_DOUBLE};

/* ------------------------------------------------------------------ Gather */

/* y[p, q, t] = x[p, idx[q] (+ D where negative), t] over the axis's outer (p) and inner (t) extents;
 * 1, 2 and 3 threads */
KN_TEST(cpu_gather_against_definition) {
    struct {
        int rank;
        int64_t dims[4];
        int axis;
        int irank;
        int64_t idims[3];
    } cases[] = {
        {1, {37}, 0, 1, {11}},          {3, {5, 7, 3}, 0, 2, {2, 3}},  {3, {5, 7, 3}, 1, 1, {9}},
        {3, {5, 7, 3}, -1, 0, {0}},     {2, {300, 37}, 0, 1, {200}},   {2, {40, 769}, 0, 2, {3, 41}},
        {4, {2, 3, 5, 1}, 2, 1, {13}},  {2, {3, 2000}, 1, 1, {1500}},
        {3, {3, 50, 300}, 1, 1, {45}}, /* 135 rows of 300: the second thread starts inside the second block */
        {2, {41, 900}, 1, 1, {1001}},  /* single elements: a thread's part starts inside a row of 1001 */
        {3, {7, 3, 33}, 2, 2, {5, 1}}, /* single elements, 2-D indices */
    };
    uint32_t seed = 7;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int r = cases[c].rank, a = cases[c].axis < 0 ? cases[c].axis + r : cases[c].axis, qr = cases[c].irank;
        const int64_t D = cases[c].dims[a], nx = dm_count(cases[c].dims, r), nq = dm_count(cases[c].idims, qr);
        int64_t pre = dm_count(cases[c].dims, a), post = dm_count(cases[c].dims + a + 1, r - a - 1);
        int64_t *iv = malloc(sizeof(int64_t) * (size_t)nq);
        for (int64_t i = 0; i < nq; i++) {
            seed = seed * 1664525u + 1013904223u;
            iv[i] = (int64_t)(seed >> 8) % (2 * D) - D; /* [-D, D) */
        }
        int64_t yd[8];
        int yr = 0;
        for (int k = 0; k < a; k++) yd[yr++] = cases[c].dims[k];
        for (int k = 0; k < qr; k++) yd[yr++] = cases[c].idims[k];
        for (int k = a + 1; k < r; k++) yd[yr++] = cases[c].dims[k];
        for (int ti = 0; ti < 4; ti++) {
            const size_t es = kiln_dtype_size(dm_types[ti]);
            unsigned char *x = dm_pattern(nx, es, (uint32_t)c), *want = malloc((size_t)(pre * nq * post) * es + 1);
            for (int64_t p = 0; p < pre; p++)
                for (int64_t q = 0; q < nq; q++) {
                    const int64_t v = iv[q] < 0 ? iv[q] + D : iv[q];
                    memcpy(want + (size_t)((p * nq + q) * post) * es, x + (size_t)((p * D + v) * post) * es,
                           (size_t)post * es);
                }
            for (int i32 = 0; i32 < 2; i32++)
                for (int threads = 1; threads <= 3; threads++) {
                    void *idx = dm_indices(iv, nq, i32);
                    dm_in in[2] = {{dm_types[ti], r, {0}, x}, {i32 ? KILN_DTYPE_INT32 : KILN_DTYPE_INT64, qr, {0}, idx}};
                    memcpy(in[0].dims, cases[c].dims, sizeof(int64_t) * (size_t)r);
                    memcpy(in[1].dims, cases[c].idims, sizeof(int64_t) * (size_t)qr);
                    const tmb_attr_spec at[1] = {{.name = "axis", .i = cases[c].axis}};
                    /* into a caller's buffer of a fill pattern: an element not written shows (an
                     * output of kiln's own may reuse the last run's memory, which holds the answer) */
                    const size_t yb = (size_t)(pre * nq * post) * es;
                    unsigned char *buf = malloc(yb + 1);
                    memset(buf, 0xA5, yb + 1);
                    kiln_tensor *y = NULL, *into = NULL;
                    CHECK_STATUS(kiln_tensor_wrap(dm_types[ti], yd, yr, buf, yb, &into), KILN_OK);
                    CHECK_STATUS(dm_run("Gather", 13, in, 2, NULL, 0, at, 1, threads, &y, into), KILN_OK);
                    char what[128];
                    snprintf(what, sizeof what, "Gather case %zu, %s, int%d indices, %d threads", c,
                             kiln_dtype_name(dm_types[ti]), i32 ? 32 : 64, threads);
                    dm_check(what, into, yd, yr, want, es);
                    kiln_tensor_destroy(y);
                    kiln_tensor_destroy(into);
                    free(buf);
                    free(idx);
                }
            free(x);
            free(want);
        }
        free(iv);
    }
}

/* ------------------------------------------------------------------ GatherElements */

/* y[i] = x[i with coordinate a replaced by idx[i] (+ D where negative)], the indices' other dims at
 * most the data's: rows of the last axis shorter and longer than the 4-index vector steps */
KN_TEST(cpu_gather_elements_against_definition) {
    struct {
        int rank;
        int64_t dims[3], idims[3];
        int axis;
    } cases[] = {
        {2, {6, 9}, {6, 9}, 1},        {2, {6, 9}, {4, 7}, 0},         {3, {8, 10, 7}, {8, 5, 7}, 1},
        {3, {3, 4, 33}, {2, 3, 21}, -1}, {3, {3, 4, 33}, {3, 9, 30}, 1}, {1, {17}, {5}, 0},
        {3, {2, 5, 1}, {2, 7, 1}, 1},  {2, {64, 300}, {64, 300}, 1},  {2, {1, 3}, {1, 1}, 1},
    };
    uint32_t seed = 99;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int r = cases[c].rank, a = cases[c].axis < 0 ? cases[c].axis + r : cases[c].axis;
        const int64_t D = cases[c].dims[a], nx = dm_count(cases[c].dims, r), n = dm_count(cases[c].idims, r);
        int64_t *iv = malloc(sizeof(int64_t) * (size_t)n), xs[3];
        for (int64_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            iv[i] = (int64_t)(seed >> 8) % (2 * D) - D;
        }
        xs[r - 1] = 1;
        for (int k = r - 2; k >= 0; k--) xs[k] = xs[k + 1] * cases[c].dims[k + 1];
        for (int ti = 0; ti < 4; ti++) {
            const size_t es = kiln_dtype_size(dm_types[ti]);
            unsigned char *x = dm_pattern(nx, es, (uint32_t)c + 40), *want = malloc((size_t)n * es);
            for (int64_t i = 0; i < n; i++) {
                int64_t rem = i, src = 0;
                for (int k = r - 1; k >= 0; k--) {
                    const int64_t pk = rem % cases[c].idims[k];
                    rem /= cases[c].idims[k];
                    src += (k == a ? (iv[i] < 0 ? iv[i] + D : iv[i]) : pk) * xs[k];
                }
                memcpy(want + (size_t)i * es, x + (size_t)src * es, es);
            }
            for (int i32 = 0; i32 < 2; i32++)
                for (int threads = 1; threads <= 2; threads++) {
                    void *idx = dm_indices(iv, n, i32);
                    dm_in in[2] = {{dm_types[ti], r, {0}, x}, {i32 ? KILN_DTYPE_INT32 : KILN_DTYPE_INT64, r, {0}, idx}};
                    memcpy(in[0].dims, cases[c].dims, sizeof(int64_t) * (size_t)r);
                    memcpy(in[1].dims, cases[c].idims, sizeof(int64_t) * (size_t)r);
                    const tmb_attr_spec at[1] = {{.name = "axis", .i = cases[c].axis}};
                    kiln_tensor *y = NULL;
                    CHECK_STATUS(dm_run("GatherElements", 13, in, 2, NULL, 0, at, 1, threads, &y, NULL), KILN_OK);
                    char what[128];
                    snprintf(what, sizeof what, "GatherElements case %zu, %s, int%d indices, %d threads", c,
                             kiln_dtype_name(dm_types[ti]), i32 ? 32 : 64, threads);
                    dm_check(what, y, cases[c].idims, r, want, es);
                    kiln_tensor_destroy(y);
                    free(idx);
                }
            free(x);
            free(want);
        }
        free(iv);
    }
}

/* ------------------------------------------------------------------ GatherND */

/* With batch_dims b: for every batch coordinate and index tuple (the indices' last axis, `last`
 * long), the slice x[batch, t0, ..., t(last-1), :] (negative t + the dim) */
KN_TEST(cpu_gather_nd_against_definition) {
    struct {
        int rank;
        int64_t dims[4];
        int irank;
        int64_t idims[4];
        int b;
    } cases[] = {
        {2, {5, 7}, 2, {4, 2}, 0},             {2, {5, 7}, 2, {6, 1}, 0},         {3, {2, 5, 7}, 3, {2, 3, 1}, 1},
        {3, {1, 512, 19}, 3, {1, 128, 1}, 1},  {3, {2, 9, 768}, 3, {2, 40, 1}, 1}, {4, {2, 3, 4, 5}, 4, {2, 3, 6, 1}, 2},
        {4, {2, 3, 4, 5}, 3, {2, 7, 2}, 1},    {3, {4, 6, 3}, 2, {300, 3}, 0},     {1, {33}, 2, {9, 1}, 0},
        /* a thread's part starting inside a batch: slices of 17 (a memcpy each), points */
        {3, {3, 40, 17}, 3, {3, 900, 1}, 1},   {3, {3, 64, 64}, 3, {3, 7500, 2}, 1},
        {3, {6, 5, 16}, 2, {41, 2}, 0}, /* slices of 16 (the typed loop) */
    };
    uint32_t seed = 5;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int r = cases[c].rank, q = cases[c].irank, bd = cases[c].b;
        const int64_t last = cases[c].idims[q - 1], nx = dm_count(cases[c].dims, r), ni = dm_count(cases[c].idims, q);
        const int64_t B = dm_count(cases[c].dims, bd), M = dm_count(cases[c].idims + bd, q - 1 - bd);
        const int64_t S = dm_count(cases[c].dims + bd + last, r - bd - (int)last);
        int64_t *iv = malloc(sizeof(int64_t) * (size_t)ni), xs[4];
        for (int64_t i = 0; i < ni; i++) {
            const int64_t d = cases[c].dims[bd + i % last];
            seed = seed * 1664525u + 1013904223u;
            iv[i] = (int64_t)(seed >> 8) % (2 * d) - d;
        }
        xs[r - 1] = 1;
        for (int k = r - 2; k >= 0; k--) xs[k] = xs[k + 1] * cases[c].dims[k + 1];
        int64_t yd[8];
        int yr = 0;
        for (int k = 0; k < q - 1; k++) yd[yr++] = cases[c].idims[k];
        for (int k = bd + (int)last; k < r; k++) yd[yr++] = cases[c].dims[k];
        for (int ti = 0; ti < 4; ti++) {
            const size_t es = kiln_dtype_size(dm_types[ti]);
            unsigned char *x = dm_pattern(nx, es, (uint32_t)c + 80), *want = malloc((size_t)(B * M * S) * es);
            for (int64_t bi = 0; bi < B; bi++)
                for (int64_t m = 0; m < M; m++) {
                    int64_t src = bd > 0 ? bi * xs[bd - 1] : 0;
                    for (int64_t t = 0; t < last; t++) {
                        const int64_t d = cases[c].dims[bd + t], v = iv[(bi * M + m) * last + t];
                        src += (v < 0 ? v + d : v) * xs[bd + t];
                    }
                    memcpy(want + (size_t)((bi * M + m) * S) * es, x + (size_t)src * es, (size_t)S * es);
                }
            for (int i32 = 0; i32 < 2; i32++)
                for (int threads = 1; threads <= 3; threads++) {
                    void *idx = dm_indices(iv, ni, i32);
                    dm_in in[2] = {{dm_types[ti], r, {0}, x}, {i32 ? KILN_DTYPE_INT32 : KILN_DTYPE_INT64, q, {0}, idx}};
                    memcpy(in[0].dims, cases[c].dims, sizeof(int64_t) * (size_t)r);
                    memcpy(in[1].dims, cases[c].idims, sizeof(int64_t) * (size_t)q);
                    const tmb_attr_spec at[1] = {{.name = "batch_dims", .i = bd}};
                    /* into a caller's buffer of a fill pattern (see the Gather test) */
                    const size_t yb = (size_t)(B * M * S) * es;
                    unsigned char *buf = malloc(yb + 1);
                    memset(buf, 0xA5, yb + 1);
                    kiln_tensor *y = NULL, *into = NULL;
                    CHECK_STATUS(kiln_tensor_wrap(dm_types[ti], yd, yr, buf, yb, &into), KILN_OK);
                    /* the specification's indices are int64; int32 ones, where taken, must read the same */
                    const kiln_status st = dm_run("GatherND", 13, in, 2, NULL, 0, at, 1, threads, &y, into);
                    char what[128];
                    snprintf(what, sizeof what, "GatherND case %zu, %s, int%d indices, %d threads", c,
                             kiln_dtype_name(dm_types[ti]), i32 ? 32 : 64, threads);
                    if (!i32) CHECK_MSG(st == KILN_OK, "%s: %s", what, kiln_last_error());
                    if (st == KILN_OK) dm_check(what, into, yd, yr, want, es);
                    kiln_tensor_destroy(y);
                    kiln_tensor_destroy(into);
                    free(buf);
                    free(idx);
                }
            free(x);
            free(want);
        }
        free(iv);
    }
}

/* An index out of range fails the run with a message naming it, at 1 and 2 threads, in any
 * position (the first, a middle one, the last) */
KN_TEST(cpu_gather_family_index_out_of_range) {
    const int64_t xd[2] = {50, 8};
    float x[400];
    for (int i = 0; i < 400; i++) x[i] = (float)i;
    for (int where = 0; where < 3; where++)
        for (int threads = 1; threads <= 2; threads++)
            for (int bad = 0; bad < 2; bad++) {
                const int64_t badv = bad ? 50 : -51;
                int64_t iv[400];
                for (int i = 0; i < 400; i++) iv[i] = i % 50 - 25;
                const int64_t pos = where == 0 ? 0 : where == 1 ? 133 : 399;
                iv[pos] = badv;
                char sub[32];
                snprintf(sub, sizeof sub, "index %lld", (long long)badv);
                kiln_tensor *y = NULL;
                /* Gather: 400 indices into axis 0 */
                dm_in g[2] = {{KILN_DTYPE_FLOAT, 2, {50, 8}, x}, {KILN_DTYPE_INT64, 1, {400}, iv}};
                const tmb_attr_spec a0[1] = {{.name = "axis", .i = 0}};
                CHECK_MSG(dm_run("Gather", 13, g, 2, NULL, 0, a0, 1, threads, &y, NULL) != KILN_OK, "Gather took %s", sub);
                CHECK_ERROR_HAS(sub);
                CHECK_ERROR_HAS("out of range");
                kiln_tensor_destroy(y);
                /* GatherElements: 50x8 indices along axis 0 */
                dm_in e[2] = {{KILN_DTYPE_FLOAT, 2, {50, 8}, x}, {KILN_DTYPE_INT64, 2, {50, 8}, iv}};
                CHECK_MSG(dm_run("GatherElements", 13, e, 2, NULL, 0, a0, 1, threads, &y, NULL) != KILN_OK,
                          "GatherElements took %s", sub);
                CHECK_ERROR_HAS(sub);
                CHECK_ERROR_HAS("out of range");
                kiln_tensor_destroy(y);
                /* GatherND: 400 rows of one index into axis 0 */
                dm_in nd[2] = {{KILN_DTYPE_FLOAT, 2, {50, 8}, x}, {KILN_DTYPE_INT64, 2, {400, 1}, iv}};
                CHECK_MSG(dm_run("GatherND", 13, nd, 2, NULL, 0, NULL, 0, threads, &y, NULL) != KILN_OK, "GatherND took %s",
                          sub);
                CHECK_ERROR_HAS(sub);
                CHECK_ERROR_HAS("out of range");
                kiln_tensor_destroy(y);
            }
    (void)xd;
}

/* The range check of Gather's and GatherND's indices (one unsigned compare modulo 2^64) at the
 * extremes: the ends of int64 and int32, -D-1 and D fail the run naming the index, in any position
 * of a GatherND tuple; -D and D-1 pass */
KN_TEST(cpu_gather_index_range_extremes) {
    float x[40];
    for (int i = 0; i < 40; i++) x[i] = (float)i;
    const int64_t bads[5] = {INT64_MAX, INT64_MIN, 5, -6, INT64_MIN + 3};
    for (int k = 0; k < 5; k++)
        for (int pos = 0; pos < 2; pos++) {
            const bool i32 = bads[k] >= INT32_MIN && bads[k] <= INT32_MAX;
            char sub[48];
            snprintf(sub, sizeof sub, "index %lld", (long long)bads[k]);
            /* Gather along axis 0 of 5x8 */
            int64_t gv[4] = {-5, 4, 0, -1};
            gv[pos * 3] = bads[k];
            void *gi = dm_indices(gv, 4, i32);
            dm_in g[2] = {{KILN_DTYPE_FLOAT, 2, {5, 8}, x}, {i32 ? KILN_DTYPE_INT32 : KILN_DTYPE_INT64, 1, {4}, gi}};
            const tmb_attr_spec a0[1] = {{.name = "axis", .i = 0}};
            kiln_tensor *y = NULL;
            CHECK_MSG(dm_run("Gather", 13, g, 2, NULL, 0, a0, 1, 1, &y, NULL) != KILN_OK, "Gather took %s", sub);
            CHECK_ERROR_HAS(sub);
            kiln_tensor_destroy(y);
            free(gi);
            /* GatherND of 5x8 by tuples of 2: the bad value at position pos of the second tuple */
            int64_t nv[6] = {-5, -8, 4, 7, 0, 0};
            nv[2 + pos] = pos == 1 && (bads[k] == 5 || bads[k] == -6) ? bads[k] + (bads[k] > 0 ? 3 : -3) : bads[k];
            snprintf(sub, sizeof sub, "index %lld", (long long)nv[2 + pos]);
            void *ni = dm_indices(nv, 6, i32);
            dm_in nd[2] = {{KILN_DTYPE_FLOAT, 2, {5, 8}, x}, {i32 ? KILN_DTYPE_INT32 : KILN_DTYPE_INT64, 2, {3, 2}, ni}};
            CHECK_MSG(dm_run("GatherND", 13, nd, 2, NULL, 0, NULL, 0, 1, &y, NULL) != KILN_OK, "GatherND took %s", sub);
            CHECK_ERROR_HAS(sub);
            kiln_tensor_destroy(y);
            free(ni);
        }
    /* the ends of the range pass */
    int64_t nv[6] = {-5, -8, 4, 7, 0, 0};
    for (int i32 = 0; i32 < 2; i32++) {
        void *ni = dm_indices(nv, 6, i32);
        dm_in nd[2] = {{KILN_DTYPE_FLOAT, 2, {5, 8}, x}, {i32 ? KILN_DTYPE_INT32 : KILN_DTYPE_INT64, 2, {3, 2}, ni}};
        kiln_tensor *y = NULL;
        CHECK_STATUS(dm_run("GatherND", 13, nd, 2, NULL, 0, NULL, 0, 1, &y, NULL), KILN_OK);
        if (y) {
            const float *yv = kiln_tensor_data(y);
            CHECK_MSG(yv[0] == 0.0f && yv[1] == 39.0f && yv[2] == 0.0f, "GatherND at the ends: %g %g %g", yv[0], yv[1], yv[2]);
        }
        kiln_tensor_destroy(y);
        free(ni);
    }
}

/* ------------------------------------------------------------------ Pad */

/* The plain definition of the non-constant modes along one axis: output o reads input i = o - bl,
 * brought back into [0, d): edge clamps, wrap takes i mod d, reflect mirrors about the ends (without
 * repeating them) */
static int64_t dm_pad_src(int64_t i, int64_t d, const char *mode) {
    if (i >= 0 && i < d) return i;
    if (!strcmp(mode, "edge")) return i < 0 ? 0 : d - 1;
    if (!strcmp(mode, "wrap")) return (i % d + d) % d;
    if (d == 1) return 0;
    while (i < 0 || i >= d) i = i < 0 ? -i : 2 * (d - 1) - i;
    return i;
}

KN_TEST(cpu_pad_modes_against_definition) {
    static const char *const modes[3] = {"edge", "reflect", "wrap"};
    struct {
        int rank;
        int64_t dims[4];
        int64_t pads[8]; /* begins, then ends */
    } cases[] = {
        {3, {1, 1, 44}, {0, 0, 12, 0, 0, 12}},   {2, {3, 1}, {0, 0, 0, 3}},          {2, {2, 5}, {0, 4, 1, 2}},
        {2, {3, 9}, {1, 8, 1, 0}},               {2, {2, 37}, {0, 33, 0, 35}},        {2, {2, 40}, {0, 0, 0, 39}},
        {3, {1, 1, 9000}, {0, 0, 128, 0, 0, 200}}, {3, {2, 3, 6}, {1, 2, 5, 1, 0, 3}}, {2, {4, 17}, {0, 16, 0, 1}},
        {2, {2, 3}, {0, 7, 0, 8}}, /* edge and wrap past the whole axis */
        /* the short pads of the last axis (pad_rows_short: at most 32 at either end) */
        {4, {2, 3, 7, 9}, {0, 1, 2, 3, 0, 2, 1, 4}}, {4, {1, 5, 56, 56}, {0, 0, 1, 1, 0, 0, 1, 1}},
        {3, {2, 20, 33}, {0, 3, 32, 0, 2, 1}},       {3, {2, 4, 40}, {0, 0, 33, 0, 1, 0}}, /* 33: the runs */
        {3, {3, 70, 1}, {0, 2, 5, 0, 1, 7}},         {3, {5, 301, 20}, {1, 0, 2, 0, 0, 3}}, /* parts start mid-image */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int mi = 0; mi < 3; mi++) {
            const int r = cases[c].rank;
            const int64_t *d = cases[c].dims, *pb = cases[c].pads, *pe = cases[c].pads + r;
            bool fits = true; /* reflect: pads at most d - 1 (a single mirror, as the specification has it) */
            for (int k = 0; k < r; k++)
                if (!strcmp(modes[mi], "reflect") && (pb[k] > d[k] - 1 || pe[k] > d[k] - 1) && d[k] > 1) fits = false;
            if (!fits) continue;
            int64_t yd[4], xs[4];
            for (int k = 0; k < r; k++) yd[k] = d[k] + pb[k] + pe[k];
            xs[r - 1] = 1;
            for (int k = r - 2; k >= 0; k--) xs[k] = xs[k + 1] * d[k + 1];
            const int64_t nx = dm_count(d, r), ny = dm_count(yd, r);
            for (int ti = 0; ti < 4; ti++) {
                const size_t es = kiln_dtype_size(dm_types[ti]);
                unsigned char *x = dm_pattern(nx, es, (uint32_t)(c * 3 + (size_t)mi)), *want = malloc((size_t)ny * es);
                for (int64_t o = 0; o < ny; o++) {
                    int64_t rem = o, src = 0;
                    for (int k = r - 1; k >= 0; k--) {
                        const int64_t ok = rem % yd[k];
                        rem /= yd[k];
                        src += dm_pad_src(ok - pb[k], d[k], modes[mi]) * xs[k];
                    }
                    memcpy(want + (size_t)o * es, x + (size_t)src * es, es);
                }
                for (int threads = 1; threads <= 3; threads++) {
                    kn_tensor *pads = NULL;
                    const int64_t pd[1] = {2 * r};
                    kn_tensor_new(KILN_DTYPE_INT64, 1, pd, &pads);
                    memcpy(pads->data, cases[c].pads, sizeof(int64_t) * (size_t)(2 * r));
                    dm_in in[1] = {{dm_types[ti], r, {0}, x}};
                    memcpy(in[0].dims, d, sizeof(int64_t) * (size_t)r);
                    const tmb_attr_spec at[1] = {{.name = "mode", .s = modes[mi]}};
                    /* into a caller's buffer of a fill pattern (see the Gather test) */
                    unsigned char *buf = malloc((size_t)ny * es + 1);
                    memset(buf, 0xA5, (size_t)ny * es + 1);
                    kiln_tensor *y = NULL, *into = NULL;
                    CHECK_STATUS(kiln_tensor_wrap(dm_types[ti], yd, r, buf, (size_t)ny * es, &into), KILN_OK);
                    CHECK_STATUS(dm_run("Pad", 19, in, 1, &pads, 1, at, 1, threads, &y, into), KILN_OK);
                    char what[128];
                    snprintf(what, sizeof what, "Pad case %zu %s, %s, %d threads", c, modes[mi],
                             kiln_dtype_name(dm_types[ti]), threads);
                    dm_check(what, into, yd, r, want, es);
                    kiln_tensor_destroy(y);
                    kiln_tensor_destroy(into);
                    free(buf);
                }
                free(x);
                free(want);
            }
        }
}

/* An edge Pad that crops the start of the last axis and pads its end: output o reads input o + 2,
 * clamped to the last element */
KN_TEST(cpu_pad_edge_crop_against_definition) {
    const int64_t d[2] = {3, 50}, yd[2] = {3, 51};
    float x[150], want[153];
    for (int i = 0; i < 150; i++) x[i] = (float)i;
    for (int rr = 0; rr < 3; rr++)
        for (int o = 0; o < 51; o++) want[rr * 51 + o] = x[rr * 50 + (o + 2 < 50 ? o + 2 : 49)];
    for (int threads = 1; threads <= 2; threads++) {
        kn_tensor *pads = NULL;
        const int64_t pd[1] = {4};
        kn_tensor_new(KILN_DTYPE_INT64, 1, pd, &pads);
        const int64_t pv[4] = {0, -2, 0, 3};
        memcpy(pads->data, pv, sizeof pv);
        dm_in in[1] = {{KILN_DTYPE_FLOAT, 2, {3, 50}, x}};
        const tmb_attr_spec at[1] = {{.name = "mode", .s = "edge"}};
        kiln_tensor *y = NULL;
        CHECK_STATUS(dm_run("Pad", 18, in, 1, &pads, 1, at, 1, threads, &y, NULL), KILN_OK);
        dm_check("Pad edge crop", y, yd, 2, want, sizeof(float));
        kiln_tensor_destroy(y);
    }
    (void)d;
}

/* ------------------------------------------------------------------ Transpose, large */

/* A float Transpose of 8 MiB and more (written around the caches: tile2d_32_stream) of the last
 * two axes and to channels-last, into kiln's output and into a caller's buffer 4, 16, 36 and 60
 * bytes past a 64-byte boundary (the columns before the first line boundary apart), against the
 * index mapping; source-contiguous extents that leave partial chunks and blocks. */
KN_TEST(cpu_transpose_large_against_definition) {
    struct {
        int rank;
        int64_t dims[4];
        int64_t perm[4];
    } cases[] = {
        {3, {4, 1040, 529}, {0, 2, 1}},
        {4, {1, 48, 211, 211}, {0, 2, 3, 1}},
        {3, {2, 1104, 1003}, {0, 2, 1}},
        {3, {2, 1100, 1003}, {0, 2, 1}}, /* rows of 1100: not whole lines, the cached stores */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int r = cases[c].rank;
        const int64_t n = dm_count(cases[c].dims, r);
        uint32_t *x = dm_pattern(n, 4, (uint32_t)c + 200);
        uint32_t *want = malloc(sizeof(uint32_t) * (size_t)n);
        int64_t xs[4], yd[4], idx[4] = {0};
        xs[r - 1] = 1;
        for (int k = r - 2; k >= 0; k--) xs[k] = xs[k + 1] * cases[c].dims[k + 1];
        for (int k = 0; k < r; k++) yd[k] = cases[c].dims[cases[c].perm[k]];
        for (int64_t o = 0; o < n; o++) {
            int64_t src = 0;
            for (int k = 0; k < r; k++) src += idx[k] * xs[cases[c].perm[k]];
            want[o] = x[src];
            for (int k = r - 1; k >= 0; k--) {
                if (++idx[k] < yd[k]) break;
                idx[k] = 0;
            }
        }
        const tmb_attr_spec at[1] = {{.name = "perm", .ints = cases[c].perm, .n_ints = r}};
        dm_in in[1] = {{KILN_DTYPE_FLOAT, r, {0}, x}};
        memcpy(in[0].dims, cases[c].dims, sizeof(int64_t) * (size_t)r);
        static const int offs[5] = {-1, 4, 16, 36, 60}; /* -1: kiln's own output */
        unsigned char *raw = malloc(sizeof(uint32_t) * (size_t)n + 128);
        for (int oi = 0; oi < 5; oi++)
            for (int threads = 1; threads <= 2; threads++) {
                kiln_tensor *y = NULL, *into = NULL;
                unsigned char *buf = NULL;
                if (offs[oi] >= 0) {
                    buf = (unsigned char *)(((uintptr_t)raw + 63) & ~(uintptr_t)63) + offs[oi];
                    memset(buf, 0xA5, sizeof(uint32_t) * (size_t)n);
                    CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_FLOAT, yd, r, buf, sizeof(uint32_t) * (size_t)n, &into), KILN_OK);
                }
                CHECK_STATUS(dm_run("Transpose", 13, in, 1, NULL, 0, at, 1, threads, &y, into), KILN_OK);
                char what[128];
                snprintf(what, sizeof what, "Transpose case %zu, buffer offset %d, %d threads", c, offs[oi], threads);
                dm_check(what, into ? into : y, yd, r, want, 4);
                kiln_tensor_destroy(y);
                kiln_tensor_destroy(into);
            }
        free(raw);
        free(x);
        free(want);
    }
}

/* ------------------------------------------------------------------ Transpose, blocks and edges */

/* Transposes through the 8x8 block kernels (tile2d_8/16/32) whose extents are not multiples of 8
 * (the edges: one more block overlapping the last full one), whose source-contiguous extent leaves a
 * last chunk of under 8 (merged into the chunk before: 64 * 2 + 3), with fewer than 8 rows or
 * columns (scalar), and with destination rows a multiple of 4 KiB apart (the row-by-row order of
 * tile2d_32; with source rows a multiple of 1 KiB apart: the stripes), NCHW -> NHWC of up to 64
 * channels (tile2d_32's single stripe), for 1-, 2-, 4- and 8-byte
 * elements on 1, 2 and 3 threads, against the index mapping. */
KN_TEST(cpu_transpose_block_edges_against_definition) {
    struct {
        int rank;
        int64_t dims[4];
        int64_t perm[4];
    } cases[] = {
        {3, {12, 197, 197}, {0, 2, 1}},
        {4, {1, 12, 13, 64}, {0, 2, 3, 1}}, /* 12 source rows: one block and an overlapping one */
        {2, {9, 131}, {1, 0}},              /* chunks 64 + 67 */
        {2, {131, 9}, {1, 0}},
        {2, {1024, 67}, {1, 0}},            /* destination rows of 1024 elements */
        {2, {2048, 13}, {1, 0}},
        {2, {1024, 256}, {1, 0}},           /* source rows of 256: the stripes */
        {3, {3, 8, 8}, {0, 2, 1}},
        {3, {2, 5, 7}, {0, 2, 1}},          /* scalar */
        {4, {2, 3, 17, 9}, {0, 3, 1, 2}},
        /* NCHW -> NHWC with at most 64 channels, planes of 512 or more: tile2d_32's one stripe of
         * all channels (not a multiple of 8: the overlapping edge block; chunk tails of 27 and 4) */
        {4, {1, 64, 56, 56}, {0, 2, 3, 1}},
        {4, {1, 44, 23, 29}, {0, 2, 3, 1}},
        {4, {2, 20, 30, 30}, {0, 2, 3, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int ti = 0; ti < 4; ti++) {
            const kiln_dtype dt = dm_types[ti];
            const size_t es = kiln_dtype_size(dt);
            const int r = cases[c].rank;
            const int64_t n = dm_count(cases[c].dims, r);
            unsigned char *x = dm_pattern(n, es, (uint32_t)(c * 4 + (size_t)ti) + 300);
            unsigned char *want = malloc(es * (size_t)n);
            int64_t xs[4], yd[4], idx[4] = {0};
            xs[r - 1] = 1;
            for (int k = r - 2; k >= 0; k--) xs[k] = xs[k + 1] * cases[c].dims[k + 1];
            for (int k = 0; k < r; k++) yd[k] = cases[c].dims[cases[c].perm[k]];
            for (int64_t o = 0; o < n; o++) {
                int64_t src = 0;
                for (int k = 0; k < r; k++) src += idx[k] * xs[cases[c].perm[k]];
                memcpy(want + (size_t)o * es, x + (size_t)src * es, es);
                for (int k = r - 1; k >= 0; k--) {
                    if (++idx[k] < yd[k]) break;
                    idx[k] = 0;
                }
            }
            const tmb_attr_spec at[1] = {{.name = "perm", .ints = cases[c].perm, .n_ints = r}};
            dm_in in[1] = {{dt, r, {0}, x}};
            memcpy(in[0].dims, cases[c].dims, sizeof(int64_t) * (size_t)r);
            for (int threads = 1; threads <= 3; threads++) {
                kiln_tensor *y = NULL;
                CHECK_STATUS(dm_run("Transpose", 13, in, 1, NULL, 0, at, 1, threads, &y, NULL), KILN_OK);
                char what[128];
                snprintf(what, sizeof what, "Transpose case %zu, %zu-byte elements, %d threads", c, es, threads);
                dm_check(what, y, yd, r, want, es);
                kiln_tensor_destroy(y);
            }
            free(x);
            free(want);
        }
}

/* ------------------------------------------------------------------ Concat, Slice: short rows */

/* Concat along the last axis of pieces 1-33 elements wide and Slices of 1-33 columns (rows of 1-264
 * bytes: the short-row copies of up to 128 bytes, two overlapping fixed-size copies each, and the
 * memcpy above), over two outer axes (the odometer's carry), 1/2/4/8-byte elements, 1, 2 and 3
 * threads, into a caller's buffer of a fill pattern, against the index mapping. */
KN_TEST(cpu_concat_slice_short_rows_against_definition) {
    static const int64_t widths[][3] = {{1, 2, 3}, {3, 5, 8}, {16, 17, 1}, {32, 33, 4}, {7, 9, 15}};
    const int64_t A = 3, B = 701; /* 2103 rows: parts start inside the inner outer axis */
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
        for (int ti = 0; ti < 4; ti++) {
            const kiln_dtype dt = dm_types[ti];
            const size_t es = kiln_dtype_size(dt);
            const int64_t W = widths[w][0] + widths[w][1] + widths[w][2];
            unsigned char *xs[3], *want = malloc((size_t)(A * B * W) * es);
            int64_t col = 0;
            for (int i = 0; i < 3; i++) {
                const int64_t wi = widths[w][i];
                xs[i] = dm_pattern(A * B * wi, es, (uint32_t)(w * 16 + (size_t)ti * 4 + (size_t)i) + 500);
                for (int64_t rw = 0; rw < A * B; rw++)
                    memcpy(want + (size_t)(rw * W + col) * es, xs[i] + (size_t)(rw * wi) * es, (size_t)wi * es);
                col += wi;
            }
            const int64_t yd[3] = {A, B, W};
            const size_t yb = (size_t)(A * B * W) * es;
            for (int threads = 1; threads <= 3; threads++) {
                dm_in in[3];
                for (int i = 0; i < 3; i++) in[i] = (dm_in){dt, 3, {A, B, widths[w][i]}, xs[i]};
                const tmb_attr_spec at[1] = {{.name = "axis", .i = -1}};
                unsigned char *buf = malloc(yb + 1);
                memset(buf, 0xA5, yb + 1);
                kiln_tensor *y = NULL, *into = NULL;
                CHECK_STATUS(kiln_tensor_wrap(dt, yd, 3, buf, yb, &into), KILN_OK);
                CHECK_STATUS(dm_run("Concat", 13, in, 3, NULL, 0, at, 1, threads, &y, into), KILN_OK);
                char what[128];
                snprintf(what, sizeof what, "Concat widths %zu, %s, %d threads", w, kiln_dtype_name(dt), threads);
                dm_check(what, into, yd, 3, want, es);
                kiln_tensor_destroy(y);
                kiln_tensor_destroy(into);
                free(buf);
                /* Slice the middle piece back out of the concatenation, rows 1..B-2 of each of the A
                 * blocks (the outer axes do not merge: the odometer carries from B into A) */
                const int64_t s0 = widths[w][0], s1 = widths[w][0] + widths[w][1], wm = widths[w][1];
                kn_tensor *cs[3] = {NULL, NULL, NULL};
                const int64_t two[1] = {2};
                for (int q = 0; q < 3; q++) kn_tensor_new(KILN_DTYPE_INT64, 1, two, &cs[q]);
                const int64_t sv[3][2] = {{1, s0}, {B - 1, s1}, {1, 2}};
                for (int q = 0; q < 3; q++) memcpy(cs[q]->data, sv[q], sizeof sv[q]);
                dm_in sx[1] = {{dt, 3, {A, B, W}, want}};
                const int64_t sd[3] = {A, B - 2, wm};
                const size_t sb = (size_t)(A * (B - 2) * wm) * es;
                unsigned char *sbuf = malloc(sb + 1), *swant = malloc(sb + 1);
                for (int64_t a = 0; a < A; a++)
                    memcpy(swant + (size_t)(a * (B - 2) * wm) * es, xs[1] + (size_t)((a * B + 1) * wm) * es,
                           (size_t)((B - 2) * wm) * es);
                memset(sbuf, 0xA5, sb + 1);
                CHECK_STATUS(kiln_tensor_wrap(dt, sd, 3, sbuf, sb, &into), KILN_OK);
                CHECK_STATUS(dm_run("Slice", 13, sx, 1, cs, 3, NULL, 0, threads, &y, into), KILN_OK);
                snprintf(what, sizeof what, "Slice widths %zu, %s, %d threads", w, kiln_dtype_name(dt), threads);
                dm_check(what, into, sd, 3, swant, es);
                free(swant);
                kiln_tensor_destroy(y);
                kiln_tensor_destroy(into);
                free(sbuf);
            }
            for (int i = 0; i < 3; i++) free(xs[i]);
            free(want);
        }
}

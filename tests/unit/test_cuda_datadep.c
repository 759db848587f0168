/* GPU tests of the kernels whose work depends on the data (cuda_ops_datadep.c): NonZero,
 * DynamicQuantizeLinear and TopK over long lines, each a one-node model run with provider cuda
 * alone (no CPU fallback) against the CPU provider, bit for bit: same type, shape and bytes. Each
 * model runs three times on the same session (the first run, a recorded one, a replay): NonZero
 * reads its count back on the host, so its recording must fail and every run go uncaptured;
 * DynamicQuantizeLinear reads nothing back and is recorded and replayed. Without a usable CUDA
 * device each test is skipped. */
#include "unit.h"

#include "exec/graph_run.h"
#include "exec/session.h"
#include "test_onemodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUNS 3

static bool same_tensor(const kn_tensor *a, const kn_tensor *b) {
    if (!a || !b || a->dtype != b->dtype || a->rank != b->rank) return false;
    if (a->rank && memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank)) return false;
    return a->nbytes == b->nbytes && (!a->nbytes || !memcmp(a->data, b->data, a->nbytes));
}

static void describe(const kn_tensor *t, char *buf, size_t cap) {
    if (!t) {
        snprintf(buf, cap, "(none)");
        return;
    }
    int at = snprintf(buf, cap, "%s[", kiln_dtype_name(t->dtype));
    for (int d = 0; d < t->rank && at < (int)cap; d++) at += snprintf(buf + at, cap - (size_t)at, d ? ",%lld" : "%lld", (long long)t->dims[d]);
    if (at < (int)cap) snprintf(buf + at, cap - (size_t)at, "]");
}

/* The first element where a and b differ (same type and count), or -1. */
static int64_t first_difference(const kn_tensor *a, const kn_tensor *b) {
    size_t es = kiln_dtype_size(a->dtype);
    if (!es || a->nbytes != b->nbytes) return 0;
    for (int64_t i = 0; i < (int64_t)(a->nbytes / es); i++)
        if (memcmp((const char *)a->data + (size_t)i * es, (const char *)b->data + (size_t)i * es, es)) return i;
    return -1;
}

/* Runs o's model RUNS times with provider cuda alone and with cpu; every output bit for bit. With
 * captured >= 0, checks the CUDA session's graphs afterwards: 1 recorded (and RUNS - 1 launches),
 * or 0 recorded and none launched. The model stays (om_free). */
static void check(onemodel *o, int captured, const char *what) {
    unsigned char *data = NULL;
    size_t size = 0;
    kn_graph_recount(o->g);
    kiln_status st = kn_onnx_write_memory(o->m, &data, &size);
    CHECK_MSG(st == KILN_OK, "%s: writing the model: %s", what, kiln_last_error());
    kiln_session *cpu = st == KILN_OK ? om_session(data, size, "cpu") : NULL;
    kiln_session *gpu = cpu ? om_session(data, size, "cuda") : NULL;
    for (int r = 0; gpu && r < RUNS; r++) {
        kn_tensor *want[4] = {0}, *got[4] = {0};
        om_run(cpu, o, want);
        om_run(gpu, o, got);
        for (int k = 0; k < o->n_outputs; k++) {
            if (!want[k] || !got[k]) continue;
            if (!same_tensor(want[k], got[k])) {
                char w[128], g[128];
                describe(want[k], w, sizeof w);
                describe(got[k], g, sizeof g);
                int64_t at = want[k]->dtype == got[k]->dtype ? first_difference(want[k], got[k]) : 0;
                kn_unit_fail(__FILE__, __LINE__, "%s, run %d: output %d is %s on CUDA, %s on the CPU (element %lld: %.9g against %.9g)",
                             what, r, k, g, w, (long long)at,
                             at >= 0 && at < kn_tensor_count(got[k]) ? kn_tensor_get_f64(got[k], at) : 0.0,
                             at >= 0 && at < kn_tensor_count(want[k]) ? kn_tensor_get_f64(want[k], at) : 0.0);
            }
        }
        for (int k = 0; k < o->n_outputs; k++) {
            kiln_tensor_destroy(want[k]);
            kiln_tensor_destroy(got[k]);
        }
    }
    if (gpu && captured >= 0) {
        int graphs = 0;
        uint64_t launches = 0;
        kn_graph_run_stats(gpu, NULL, &graphs, &launches);
        if (captured)
            CHECK_MSG(graphs == 1 && launches == RUNS - 1, "%s: %d graphs, %llu launches (expected 1 and %d)", what,
                      graphs, (unsigned long long)launches, RUNS - 1);
        else
            CHECK_MSG(graphs == 0 && launches == 0, "%s: %d graphs, %llu launches (expected none: the count is read back)",
                      what, graphs, (unsigned long long)launches);
    }
    kiln_session_destroy(gpu);
    kiln_session_destroy(cpu);
    free(data);
}

/* ------------------------------------------------------------------ NonZero */

/* x's elements: every `every`-th one nonzero (every 0: none), with a few sign-only zeros (-0) and
 * NaNs among the float types. */
static void *nonzero_data(kiln_dtype dt, int64_t n, int every) {
    size_t es = kiln_dtype_size(dt);
    unsigned char *p = calloc((size_t)(n ? n : 1), es);
    uint32_t seed = 77;
    for (int64_t i = 0; i < n; i++) {
        unsigned char *e = p + (size_t)i * es;
        bool on = every > 0 && (i % every == 0 || (urand(&seed) > 0.6f && every > 1));
        if (!on) {
            if (i % 5 == 3) { /* -0 in the float types: zero */
                if (dt == KILN_DTYPE_FLOAT) *(uint32_t *)e = 0x80000000u;
                else if (dt == KILN_DTYPE_DOUBLE) *(uint64_t *)e = 0x8000000000000000ull;
                else if (dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16) *(uint16_t *)e = 0x8000u;
            }
            continue;
        }
        switch (dt) {
        case KILN_DTYPE_FLOAT: *(float *)e = i % 7 == 0 ? NAN : i % 11 == 0 ? 1e-42f /* subnormal */ : urand(&seed) + 2; break;
        case KILN_DTYPE_DOUBLE: *(double *)e = i % 7 == 0 ? NAN : -3.5 + (double)i; break;
        case KILN_DTYPE_FLOAT16: *(uint16_t *)e = i % 7 == 0 ? 0x7e00u : 0x0001u + (uint16_t)(i & 0x3ff); break;
        case KILN_DTYPE_BFLOAT16: *(uint16_t *)e = 0x3f80u; break;
        case KILN_DTYPE_BOOL: *e = 1; break;
        default: /* an integer: a byte other than the lowest set sometimes */
            if (es > 1 && i % 3 == 0) e[es - 1] = 0x40;
            else e[0] = (unsigned char)(1 + i % 200);
            break;
        }
    }
    return p;
}

static void nonzero_case(kiln_dtype dt, int rank, const int64_t *dims, int every, bool unknown_dims, int captured) {
    onemodel o;
    om_init(&o, 17);
    int64_t n = kn_shape_count(dims, rank);
    void *vals = nonzero_data(dt, n, every);
    int x = om_input(&o, "X", dt, rank, dims, 1, vals);
    free(vals);
    if (unknown_dims)
        for (int d = 0; d < rank; d++) o.g->values[x].type.dims[d].value = -1;
    int y = om_value(&o, "Y");
    om_node(&o, "NonZero", &x, 1, &y, 1);
    char what[160];
    int at = snprintf(what, sizeof what, "NonZero %s [", kiln_dtype_name(dt));
    for (int d = 0; d < rank; d++) at += snprintf(what + at, sizeof what - (size_t)at, d ? ",%lld" : "%lld", (long long)dims[d]);
    snprintf(what + at, sizeof what - (size_t)at, "] every %d%s", every, unknown_dims ? ", dims unknown" : "");
    check(&o, captured, what);
    om_free(&o);
}

KN_TEST(cuda_datadep_nonzero) {
    NEED_GPU();
    const int64_t d3[3] = {3, 5, 7}, wide[2] = {3, 5000}, big[2] = {1, 70001}, f16d[3] = {2, 3, 40},
                  empty[2] = {0, 4}, zeros[2] = {64, 70}, one[1] = {1}, r5[5] = {2, 3, 2, 5, 3};
    nonzero_case(KILN_DTYPE_FLOAT, 3, d3, 2, false, 0);
    nonzero_case(KILN_DTYPE_FLOAT, 3, d3, 2, true, 0);
    nonzero_case(KILN_DTYPE_FLOAT, 2, big, 3, false, 0);     /* 18 chunks */
    nonzero_case(KILN_DTYPE_FLOAT, 2, big, 1, false, 0);     /* all nonzero */
    nonzero_case(KILN_DTYPE_DOUBLE, 2, wide, 4, false, 0);   /* 4 chunks */
    nonzero_case(KILN_DTYPE_FLOAT16, 3, f16d, 2, false, 0);
    nonzero_case(KILN_DTYPE_BFLOAT16, 3, f16d, 3, false, 0);
    nonzero_case(KILN_DTYPE_INT64, 2, wide, 50, false, 0);
    nonzero_case(KILN_DTYPE_INT32, 5, r5, 3, false, 0);
    nonzero_case(KILN_DTYPE_INT16, 2, wide, 7, false, 0);
    nonzero_case(KILN_DTYPE_UINT8, 2, wide, 2, false, 0);
    nonzero_case(KILN_DTYPE_INT8, 3, d3, 1, false, 0);
    nonzero_case(KILN_DTYPE_BOOL, 2, big, 9, false, 0);
    nonzero_case(KILN_DTYPE_FLOAT, 2, empty, 1, false, 0); /* [2, 0] */
    nonzero_case(KILN_DTYPE_FLOAT, 2, zeros, 0, false, 0); /* all zero (and -0): [2, 0] */
    nonzero_case(KILN_DTYPE_INT64, 2, zeros, 0, true, 0);
    nonzero_case(KILN_DTYPE_FLOAT, 1, one, 1, false, 0);   /* [1, 1] */
    nonzero_case(KILN_DTYPE_FLOAT, 0, one, 1, false, 0);   /* a scalar, nonzero: [1, 1] of 0 */
    nonzero_case(KILN_DTYPE_FLOAT, 0, one, 0, false, 0);   /* a scalar zero: [1, 0] */
}

/* NonZero feeding device work (its indices gathered back through GatherND after a Transpose): the
 * output read by further CUDA kernels, the whole run uncaptured. */
KN_TEST(cuda_datadep_nonzero_feeds_device_work) {
    NEED_GPU();
    onemodel o;
    om_init(&o, 17);
    const int64_t dims[2] = {40, 300};
    float *vals = nonzero_data(KILN_DTYPE_FLOAT, 40 * 300, 3);
    for (int i = 0; i < 40 * 300; i++)
        if (vals[i] != vals[i]) vals[i] = 5; /* plain numbers to gather */
    int x = om_input(&o, "X", KILN_DTYPE_FLOAT, 2, dims, 1, vals);
    free(vals);
    int nzv = om_value(&o, "nz"), t = om_value(&o, "t"), y = om_value(&o, "Y");
    o.node = kn_graph_add_node(o.g, NULL, "NonZero", "", &x, 1, &nzv, 1);
    o.node = kn_graph_add_node(o.g, NULL, "Transpose", "", &nzv, 1, &t, 1);
    int in[2] = {x, t};
    om_node(&o, "GatherND", in, 2, &y, 1);
    check(&o, 0, "NonZero -> Transpose -> GatherND");
    om_free(&o);
}

/* ------------------------------------------------------------------ DynamicQuantizeLinear */

static void dql_case(int rank, const int64_t *dims, const float *vals, float lo, float hi, int captured,
                     const char *what) {
    onemodel o;
    om_init(&o, 17);
    int64_t n = kn_shape_count(dims, rank);
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    uint32_t seed = 5;
    for (int64_t i = 0; i < n; i++) v[i] = vals ? vals[i % 16] : lo + (hi - lo) * (urand(&seed) + 1) / 2;
    int x = om_input(&o, "X", KILN_DTYPE_FLOAT, rank, dims, 1, v);
    free(v);
    int out[3] = {om_value(&o, "Y"), om_value(&o, "Y_scale"), om_value(&o, "Y_zero_point")};
    om_node(&o, "DynamicQuantizeLinear", &x, 1, out, 3);
    check(&o, captured, what);
    om_free(&o);
}

KN_TEST(cuda_datadep_dynamic_quantize) {
    NEED_GPU();
    const int64_t d3[3] = {3, 7, 11}, sq[2] = {16, 16}, empty[2] = {0, 5}, line[1] = {1000}, big[2] = {4, 600000},
                  mid[2] = {5, 100000}, sixteen[1] = {16};
    dql_case(3, d3, NULL, -2, 2, 1, "DynamicQuantizeLinear [3,7,11] in [-2, 2]");
    dql_case(2, mid, NULL, -0.7f, 3.1f, 1, "DynamicQuantizeLinear [5,100000] in [-0.7, 3.1]");
    dql_case(2, big, NULL, -40, 9, 1, "DynamicQuantizeLinear [4,600000] (more blocks than parts)");
    dql_case(1, line, NULL, 0.25f, 8, 1, "DynamicQuantizeLinear, all positive (0 widens the range)");
    dql_case(1, line, NULL, -8, -0.25f, 1, "DynamicQuantizeLinear, all negative");
    dql_case(0, NULL, NULL, 1, 2, 1, "DynamicQuantizeLinear, a scalar");
    const float zeros[16] = {0, -0.0f, 0, 0, 0, 0, 0, 0, 0, -0.0f, 0, 0, 0, 0, 0, 0};
    dql_case(2, sq, zeros, 0, 0, 1, "DynamicQuantizeLinear, all zero (scale 1/255)");
    dql_case(2, empty, NULL, 0, 0, -1, "DynamicQuantizeLinear, empty");
    /* scale exactly 1 and halves everywhere: the zero point (2.5 -> 2) and the quotients round half
     * to even */
    const float halves[16] = {-2.5f, 252.5f, 0.5f, 1.5f, 2.5f, 3.5f, -0.5f, -1.5f, 100.5f, 101.5f, 0, -0.0f, 7, 8, 9, 10};
    dql_case(1, sixteen, halves, 0, 0, 1, "DynamicQuantizeLinear, ties");
    const float nans[16] = {-1, NAN, 2, 0.5f, NAN, -0.75f, 1, 1.25f, 0, 0, 0, 0, 0, 0, 0, 0};
    dql_case(1, sixteen, nans, 0, 0, 1, "DynamicQuantizeLinear, NaN left out of the range");
    const float inf[16] = {INFINITY, -1, 2, 0.5f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    dql_case(1, sixteen, inf, 0, 0, 1, "DynamicQuantizeLinear, +inf (scale inf)");
    const float tiny[16] = {1e-40f, -3e-41f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    dql_case(1, sixteen, tiny, 0, 0, 1, "DynamicQuantizeLinear, subnormal range");
}

/* ------------------------------------------------------------------ TopK */

static void topk_case(kiln_dtype dt, int rank, const int64_t *dims, int axis, int64_t k, int largest, bool ties,
                      bool nans, bool unknown_dims) {
    onemodel o;
    om_init(&o, 17);
    int64_t n = kn_shape_count(dims, rank);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    uint32_t seed = 31;
    for (int64_t i = 0; i < n; i++) {
        double r = 100 * urand(&seed);
        v[i] = ties ? floor(r / 16) : r;
        if (dt == KILN_DTYPE_UINT8) v[i] = fabs(v[i]);
        if (nans && i % 97 == 5) v[i] = NAN;
    }
    kn_tensor *t;
    kn_tensor_new(dt, rank, dims, &t);
    for (int64_t i = 0; i < n; i++) kn_tensor_set_f64(t, i, v[i]);
    free(v);
    int x = om_input(&o, "X", dt, rank, dims, 1, t->data);
    kn_tensor_free(t);
    if (unknown_dims)
        for (int d = 0; d < rank; d++) o.g->values[x].type.dims[d].value = -1;
    const int64_t one = 1;
    int kv = om_input(&o, "K", KILN_DTYPE_INT64, 1, &one, 1, &k);
    int in[2] = {x, kv}, out[2] = {om_value(&o, "Values"), om_value(&o, "Indices")};
    om_node(&o, "TopK", in, 2, out, 2);
    om_int(&o, "axis", axis);
    om_int(&o, "largest", largest);
    char what[200];
    int at = snprintf(what, sizeof what, "TopK %s [", kiln_dtype_name(dt));
    for (int d = 0; d < rank; d++) at += snprintf(what + at, sizeof what - (size_t)at, d ? ",%lld" : "%lld", (long long)dims[d]);
    snprintf(what + at, sizeof what - (size_t)at, "] axis %d k %lld%s%s%s%s", axis, (long long)k,
             largest ? " largest" : " smallest", ties ? ", ties" : "", nans ? ", NaN" : "", unknown_dims ? ", dims unknown" : "");
    check(&o, -1, what);
    om_free(&o);
}

KN_TEST(cuda_datadep_topk_long_lines) {
    NEED_GPU();
    const int64_t a[2] = {2, 5000}, b[3] = {3, 6000, 2}, edge[1] = {4096}, past[1] = {4097}, c[2] = {2, 20000},
                  small[2] = {3, 100};
    topk_case(KILN_DTYPE_FLOAT, 2, a, -1, 7, 1, false, false, false);
    topk_case(KILN_DTYPE_FLOAT, 2, a, -1, 300, 1, true, false, false);   /* ties: the lower index first */
    topk_case(KILN_DTYPE_FLOAT, 2, a, 1, 50, 0, true, true, false);      /* smallest, NaN last */
    topk_case(KILN_DTYPE_FLOAT, 2, a, 1, 50, 1, false, true, false);     /* largest, NaN first */
    topk_case(KILN_DTYPE_FLOAT, 3, b, 1, 100, 0, true, false, false);    /* inner 2 */
    topk_case(KILN_DTYPE_FLOAT, 1, edge, 0, 4096, 1, true, false, false); /* the one-block kernel */
    topk_case(KILN_DTYPE_FLOAT, 1, past, 0, 4097, 1, true, false, false); /* the sort, k = len */
    topk_case(KILN_DTYPE_FLOAT16, 2, c, 1, 1000, 1, false, true, false);
    topk_case(KILN_DTYPE_DOUBLE, 2, c, 1, 10, 0, false, false, false);
    topk_case(KILN_DTYPE_INT64, 2, c, 1, 64, 1, true, false, false);
    topk_case(KILN_DTYPE_INT32, 3, b, 1, 5, 0, true, false, false);
    topk_case(KILN_DTYPE_UINT8, 2, a, 1, 20, 1, true, false, false);
    /* the axis length unknown when the node is placed (once a CPU fallback: "axis length -1"),
     * long and short at run time */
    topk_case(KILN_DTYPE_FLOAT, 2, a, 1, 1000, 1, false, false, true);
    topk_case(KILN_DTYPE_FLOAT, 2, small, 1, 10, 1, true, true, true);
    topk_case(KILN_DTYPE_FLOAT, 2, small, 1, 10, 0, false, true, false); /* the one-block kernel, NaN */
    topk_case(KILN_DTYPE_FLOAT16, 2, small, 1, 10, 1, false, true, false); /* NaN's bytes kept */
    /* short lines of small types: the one-block kernel's index array first (it was misaligned after
     * 1 or 2 one-byte values) */
    const int64_t two[2] = {5, 2}, single[2] = {4, 1}, three[3] = {2, 3, 3};
    topk_case(KILN_DTYPE_UINT8, 2, two, 1, 2, 1, true, false, false);
    topk_case(KILN_DTYPE_INT8, 2, single, 1, 1, 0, false, false, false);
    topk_case(KILN_DTYPE_INT16, 2, single, 1, 1, 1, false, false, false);
    topk_case(KILN_DTYPE_DOUBLE, 3, three, 1, 2, 1, true, false, false);
}

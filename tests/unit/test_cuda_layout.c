/* The CUDA kernels a channels-last region leans on, against the CPU's: reductions over the
 * middle axes of [N, H, W, C] (the global average pool channels last), whose outputs lie side by
 * side in memory while their elements do not, and kiln's channels-last MaxPool and AveragePool. */
#include "test_onemodel.h"

#include <stdio.h>
#include <string.h>

/* Reduce<op>(X, axes) keepdims 1, X [n, h, w, c], opset 18 (axes an input). */
static void reduce_model(onemodel *o, const char *op, kiln_dtype dt, const int64_t *dims, const int64_t *axes,
                         int n_axes) {
    om_init(o, 18);
    int in[2];
    in[0] = om_input(o, "X", dt, 4, dims, 1.0f, NULL);
    const int64_t ad[1] = {n_axes};
    kn_tensor *t; /* the axes as a constant (read when compiled) */
    kn_tensor_new(KILN_DTYPE_INT64, 1, ad, &t);
    memcpy(t->data, axes, sizeof(int64_t) * (size_t)n_axes);
    in[1] = kn_graph_add_value(o->g, "axes");
    o->g->values[in[1]].constant = t;
    kn_model_own_tensor(o->m, t);
    kn_type_set_tensor(&o->g->values[in[1]].type, KILN_DTYPE_INT64, 1, ad);
    int out[1] = {om_value(o, "Y")};
    om_node(o, op, in, 2, out, 1);
}

KN_TEST(cuda_reduce_middle_axes_matches_cpu) {
    NEED_GPU();
    static const char *const ops[] = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceLogSumExp",
                                      "ReduceSumSquare", "ReduceProd"};
    static const kiln_dtype types[] = {KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT16};
    /* channels-last pools (7x7 and 1x1 maps, channels around and not a multiple of 32), a map
     * long enough for many rows per thread, and a reduced axis between two kept ones */
    static const int64_t shapes[][4] = {{2, 7, 7, 2048}, {3, 5, 4, 40}, {1, 1, 1, 64}, {1, 33, 31, 96}, {2, 3, 4, 35}};
    static const int64_t axes_sets[][2] = {{1, 2}, {1, 1}, {2, 2}};
    for (size_t op = 0; op < sizeof ops / sizeof ops[0]; op++)
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
            for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
                for (size_t a = 0; a < sizeof axes_sets / sizeof axes_sets[0]; a++) {
                    const int n_axes = axes_sets[a][0] == axes_sets[a][1] ? 1 : 2;
                    onemodel o;
                    reduce_model(&o, ops[op], types[t], shapes[sh], axes_sets[a], n_axes);
                    char what[160];
                    snprintf(what, sizeof what, "%s %s [%lld, %lld, %lld, %lld] over axes %lld%s", ops[op],
                             kiln_dtype_name(types[t]), (long long)shapes[sh][0], (long long)shapes[sh][1],
                             (long long)shapes[sh][2], (long long)shapes[sh][3], (long long)axes_sets[a][0],
                             n_axes == 2 ? " and 2" : "");
                    /* sums of up to ~1000 values: float16's accumulation order differs between the two */
                    const bool half = types[t] == KILN_DTYPE_FLOAT16;
                    om_compare(&o, half ? 1e-2 : 1e-4, half ? 2e-2 : 1e-4, what);
                }
}

static void ints_attr(onemodel *o, const char *name, const int64_t *v, int n) {
    kn_attr *a = om_attr(o, name, KN_ATTR_INTS);
    a->ints = kn_arena_alloc(&o->m->arena, sizeof(int64_t) * (size_t)n);
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
    a->n = n;
}

/* kiln.MaxPool / kiln.AveragePool with layout NHWC on CUDA (the channels-last kernel) against the
 * CPU's (ai.onnx's pooling between two permutations): kernels, strides, pads, dilations, ceil_mode
 * and count_include_pad as detectors' and classifiers' pools have them. */
KN_TEST(cuda_pool_channels_last_matches_cpu) {
    NEED_GPU();
    static const struct {
        int64_t x[4]; /* N, H, W, C */
        int64_t k, s, pad, dil;
        int ceil, count_pad;
    } cases[] = {
        {{2, 112, 112, 64}, 3, 2, 1, 1, 0, 0}, {{1, 13, 13, 192}, 5, 1, 2, 1, 0, 0}, {{1, 20, 20, 33}, 13, 1, 6, 1, 0, 0},
        {{3, 9, 7, 40}, 2, 2, 0, 1, 1, 1},     {{2, 8, 8, 16}, 3, 1, 1, 2, 0, 1},    {{1, 5, 6, 3}, 3, 2, 1, 1, 1, 0},
    };
    static const kiln_dtype types[] = {KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT16};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int avg = 0; avg < 2; avg++)
            for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
                onemodel o;
                om_init(&o, 19);
                int in[1] = {om_input(&o, "X", types[t], 4, cases[k].x, 1.0f, NULL)};
                int out[1] = {om_value(&o, "Y")};
                om_node(&o, avg ? "AveragePool" : "MaxPool", in, 1, out, 1);
                om_kiln_domain(&o);
                om_str(&o, "layout", "NHWC");
                const int64_t kk[2] = {cases[k].k, cases[k].k}, ss[2] = {cases[k].s, cases[k].s},
                              dd[2] = {cases[k].dil, cases[k].dil},
                              pp[4] = {cases[k].pad, cases[k].pad, cases[k].pad, cases[k].pad};
                ints_attr(&o, "kernel_shape", kk, 2);
                ints_attr(&o, "strides", ss, 2);
                ints_attr(&o, "pads", pp, 4);
                ints_attr(&o, "dilations", dd, 2);
                om_int(&o, "ceil_mode", cases[k].ceil);
                if (avg) om_int(&o, "count_include_pad", cases[k].count_pad);
                char what[160];
                snprintf(what, sizeof what, "kiln.%s NHWC %s [%lld, %lld, %lld, %lld] k%lld s%lld p%lld d%lld%s%s",
                         avg ? "AveragePool" : "MaxPool", kiln_dtype_name(types[t]), (long long)cases[k].x[0],
                         (long long)cases[k].x[1], (long long)cases[k].x[2], (long long)cases[k].x[3],
                         (long long)cases[k].k, (long long)cases[k].s, (long long)cases[k].pad, (long long)cases[k].dil,
                         cases[k].ceil ? " ceil" : "", avg && cases[k].count_pad ? " counting pads" : "");
                const bool half = types[t] == KILN_DTYPE_FLOAT16;
                om_compare(&o, half ? 4e-3 : 1e-5, half ? 2e-3 : 1e-6, what);
            }
}

/* The copies into and out of a channels-last region: Transpose to NHWC of a few-channel input
 * (3 colour planes, and 1, 5 and 7 channels: the narrow copy, a thread per position) and of a wide
 * one (the 32x32 tiles), float32 and float16; and Cast between float32 and the half types over
 * lengths with and without a tail past a multiple of four (the four-element cast). Exact copies, so
 * compared exactly. */
KN_TEST(cuda_transpose_narrow_and_cast_match_cpu) {
    NEED_GPU();
    static const int64_t shapes[][4] = {{2, 3, 37, 41}, {1, 1, 20, 30}, {3, 5, 16, 17}, {2, 7, 9, 40}, {2, 64, 9, 10}};
    static const kiln_dtype types[] = {KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT16};
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            onemodel o;
            om_init(&o, 17);
            int in[1] = {om_input(&o, "X", types[t], 4, shapes[sh], 1.0f, NULL)};
            int out[1] = {om_value(&o, "Y")};
            om_node(&o, "Transpose", in, 1, out, 1);
            const int64_t perm[4] = {0, 2, 3, 1};
            ints_attr(&o, "perm", perm, 4);
            char what[128];
            snprintf(what, sizeof what, "Transpose to NHWC %s [%lld, %lld, %lld, %lld]", kiln_dtype_name(types[t]),
                     (long long)shapes[sh][0], (long long)shapes[sh][1], (long long)shapes[sh][2],
                     (long long)shapes[sh][3]);
            om_compare(&o, 0, 0, what);
        }
    static const int64_t lengths[] = {3, 4, 1001, 4096, 65539};
    static const kiln_dtype pairs[][2] = {{KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT16},
                                          {KILN_DTYPE_FLOAT, KILN_DTYPE_BFLOAT16},
                                          {KILN_DTYPE_FLOAT16, KILN_DTYPE_FLOAT},
                                          {KILN_DTYPE_BFLOAT16, KILN_DTYPE_FLOAT}};
    for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
        for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
            onemodel o;
            om_init(&o, 19);
            int in[1] = {om_input(&o, "X", pairs[p][0], 1, &lengths[l], 3.0f, NULL)};
            int out[1] = {om_value(&o, "Y")};
            om_node(&o, "Cast", in, 1, out, 1);
            om_int(&o, "to", pairs[p][1]);
            char what[96];
            snprintf(what, sizeof what, "Cast %s -> %s of %lld", kiln_dtype_name(pairs[p][0]), kiln_dtype_name(pairs[p][1]),
                     (long long)lengths[l]);
            om_compare(&o, 0, 0, what);
        }
}

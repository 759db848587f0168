/* Unit tests of the optimiser: graphs built by hand, run at level 0 and at the level under test
 * through the session API, compared element by element; and the structure each pass leaves
 * (which nodes are fused, which are left alone). The regression tests reproduce the known
 * failures of other runtimes: Conv+Add fusion with group > 1, Gemm transpose folding with an
 * identity permutation, MatMul+BatchNorm on rank > 2, LayerNorm fusion whose scale does not match
 * the trailing dims, and a fused node no backend supports. */
#include "backend/backend.h"
#include "exec/exec.h"
#include "exec/session.h"
#include "onnx/loader.h"
#include "onnx/writer.h"
#include "opt/opt.h"
#include "opt/pass.h"
#include "ops/fused.h"
#include "test_model_builder.h"
#include "unit.h"
#include "util/log.h"

#include <math.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ running */

typedef kn_model *(*build_fn)(void);

static kiln_session *make_session(kn_model *m, int level, const char *disable) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, level);
    kiln_session_options_set_intra_op_threads(o, 1);
    if (disable) kiln_session_options_disable_pass(o, disable);
    kiln_session *s = NULL;
    /* what the loader does: producers, use counts, topological order */
    CHECK_STATUS(kn_graph_sort(m->graph), KILN_OK);
    kiln_status st = kn_session_from_model(m, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "session at level %d: %s", level, kiln_last_error());
    return s;
}

/* Random inputs for every graph input of the session (same seed each call). */
static int64_t sym_batch = 3; /* the size inputs get for a symbolic dim */

static int make_inputs(kiln_session *s, kn_tensor **in, const char **names) {
    const kn_graph *g = s->model->graph;
    unsigned seed = 777u;
    for (int i = 0; i < g->n_inputs; i++) {
        const kn_type *t = &g->values[g->inputs[i]].type;
        int64_t dims[KILN_MAX_RANK];
        for (int d = 0; d < t->rank; d++) dims[d] = t->dims[d].value >= 0 ? t->dims[d].value : sym_batch;
        kn_tensor_new(t->dtype, t->rank, dims, &in[i]);
        for (int64_t k = 0; k < kn_tensor_count(in[i]); k++) {
            seed = seed * 1103515245u + 12345u;
            kn_tensor_set_f64(in[i], k, ((double)((seed >> 8) & 0xffff) / 65536.0 * 2.0 - 1.0) * 2.0);
        }
        names[i] = g->values[g->inputs[i]].name;
    }
    return g->n_inputs;
}

static int count_op(const kiln_session *s, const char *domain, const char *op) {
    const kn_graph *g = s->model->graph;
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && !strcmp(g->nodes[i].op_type, op) && !strcmp(g->nodes[i].domain, domain)) n++;
    return n;
}

/* inputs given, trailing omitted ones dropped */
static int given_inputs(const kn_node *n) {
    int k = n->n_inputs;
    while (k > 0 && n->inputs[k - 1] < 0) k--;
    return k;
}

static int live_nodes(const kiln_session *s) {
    int n = 0;
    for (int i = 0; i < s->model->graph->n_nodes; i++) n += !s->model->graph->nodes[i].dead;
    return n;
}

/* Runs both sessions on the same inputs; checks every output agrees within tol: elementwise,
 * relative to 1 + |ref| (NaN where the reference has NaN), or normwise: the largest |a - b| against
 * the output's largest |a| (at least 1), for outputs that scale a rounded value up (q = a * 1e5
 * carries a's absolute error, which an elementwise measure reads as noise near zero). */
static void check_outputs(kiln_session *ref, kiln_session *opt, double tol, bool normwise) {
    kn_tensor *in[8] = {0};
    const char *names[8];
    int n = make_inputs(ref, in, names);
    size_t no = kiln_session_output_count(ref);
    kn_tensor *a[8] = {0}, *b[8] = {0};
    CHECK_STATUS(kiln_session_run(ref, names, in, (size_t)n, NULL, no, a), KILN_OK);
    CHECK_STATUS(kiln_session_run(opt, names, in, (size_t)n, NULL, no, b), KILN_OK);
    for (size_t o = 0; o < no; o++) {
        if (!a[o] || !b[o]) continue;
        CHECK_EQ_INT(a[o]->dtype, b[o]->dtype);
        CHECK_EQ_INT(a[o]->rank, b[o]->rank);
        CHECK_EQ_INT(kn_tensor_count(a[o]), kn_tensor_count(b[o]));
        double worst = 0, scale = 1;
        int nan_mismatch = 0;
        for (int64_t i = 0; i < kn_tensor_count(a[o]) && i < kn_tensor_count(b[o]); i++) {
            double x = kn_tensor_get_f64(a[o], i), y = kn_tensor_get_f64(b[o], i);
            if (isnan(x) || isnan(y)) {
                nan_mismatch += isnan(x) != isnan(y);
                continue;
            }
            double e = normwise ? fabs(x - y) : fabs(x - y) / (1.0 + fabs(x));
            if (e > worst) worst = e;
            if (normwise) scale = fmax(scale, fabs(x));
        }
        CHECK_MSG(worst / scale <= tol, "output %zu: worst %s difference %g (tol %g)", o,
                  normwise ? "normwise" : "relative", worst / scale, tol);
        CHECK_EQ_INT(nan_mismatch, 0);
    }
    for (int i = 0; i < n; i++) kn_tensor_free(in[i]);
    for (size_t o = 0; o < no; o++) {
        kn_tensor_free(a[o]);
        kn_tensor_free(b[o]);
    }
}

static void check_same(kiln_session *ref, kiln_session *opt, double tol) { check_outputs(ref, opt, tol, false); }

/* Builds the graph twice: level 0 and `level`; compares; returns the optimised session (the
 * caller checks its structure and destroys it). */
static kiln_session *compare_levels_without(build_fn build, int level, double tol, const char *disable) {
    kiln_session *ref = make_session(build(), 0, NULL);
    kiln_session *opt = make_session(build(), level, disable);
    if (ref && opt) check_same(ref, opt, tol);
    kiln_session_destroy(ref);
    return opt;
}

static kiln_session *compare_levels(build_fn build, int level, double tol) {
    return compare_levels_without(build, level, tol, NULL);
}

/* ------------------------------------------------------------------ FusedConv */

static int conv_group = 1, conv_act = 0, conv_residual = 0;
static kiln_dtype conv_dtype = KILN_DTYPE_FLOAT;
static int ln_case; /* build_ln's variant */
static kn_model *build_ln(void);
static bool anonymous_dims; /* x's spatial dims (ln: its middle dim) unknown and unnamed ('?') */

/* Conv [1,4,6,6] (group conv_group) -> optional Add -> optional activation. The Add is a
 * residual of the output's shape (conv_residual = 1) or a per-channel [1,4,1,1] addend
 * (conv_residual = 2, a broadcast: not a residual). */
static kn_model *build_conv(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int64_t xd[] = {1, 4, 6, 6}, wd[] = {4, 4 / conv_group, 3, 3}, bd[] = {4}, cd[] = {1, 4, 1, 1};
    int x = tmb_input(&b, "x", conv_dtype, 4, xd, NULL);
    if (anonymous_dims) b.g->values[x].type.dims[2] = b.g->values[x].type.dims[3] = (kn_dim){-1, NULL};
    int w = tmb_const_range(&b, "w", conv_dtype, 4, wd, -0.5f, 0.5f);
    int bias = tmb_const_range(&b, "b", conv_dtype, 1, bd, -0.5f, 0.5f);
    int y = tmb_op(&b, "Conv", (int[]){x, w, bias}, 3, "y");
    tmb_op_int(&b, "group", conv_group);
    tmb_op_ints(&b, "pads", (int64_t[]){1, 1, 1, 1}, 4);
    if (conv_residual == 1) {
        int z = tmb_input(&b, "z", conv_dtype, 4, xd, NULL);
        y = tmb_op(&b, "Add", (int[]){y, z}, 2, "sum");
    } else if (conv_residual == 2) {
        int c = tmb_const_range(&b, "c", conv_dtype, 4, cd, -1, 1);
        y = tmb_op(&b, "Add", (int[]){c, y}, 2, "sum");
    }
    switch (conv_act) {
    case 1: y = tmb_op(&b, "Relu", &y, 1, "act"); break;
    case 2: {
        int s = tmb_op(&b, "Sigmoid", &y, 1, "sig");
        y = tmb_op(&b, "Mul", (int[]){y, s}, 2, "act");
        break;
    }
    case 3:
        y = tmb_op(&b, "HardSigmoid", &y, 1, "act");
        tmb_op_float(&b, "alpha", 0.3f);
        break;
    case 4: {
        int lo = tmb_scalar(&b, "lo", conv_dtype, -0.25), hi = tmb_scalar(&b, "hi", conv_dtype, 0.5);
        y = tmb_op(&b, "Clip", (int[]){y, lo, hi}, 3, "act");
        break;
    }
    case 5:
        y = tmb_op(&b, "LeakyRelu", &y, 1, "act");
        tmb_op_float(&b, "alpha", 0.2f);
        break;
    case 6: y = tmb_op(&b, "HardSwish", &y, 1, "act"); break;
    case 7: y = tmb_op(&b, "Tanh", &y, 1, "act"); break;
    case 8:   /* HardSwish as opset-13 exporters write it: x * Clip(x + 3, 0, 6) / 6 */
    case 12: { /* a lookalike: divided by 5 */
        int three = tmb_scalar(&b, "three", conv_dtype, 3), zero = tmb_scalar(&b, "zero", conv_dtype, 0);
        int six = tmb_scalar(&b, "six", conv_dtype, 6), d = tmb_scalar(&b, "d", conv_dtype, conv_act == 8 ? 6 : 5);
        int a = tmb_op(&b, "Add", (int[]){y, three}, 2, "a");
        int cl = tmb_op(&b, "Clip", (int[]){a, zero, six}, 3, "cl");
        int m = tmb_op(&b, "Mul", (int[]){y, cl}, 2, "m");
        y = tmb_op(&b, "Div", (int[]){m, d}, 2, "act");
        break;
    }
    case 9: { /* HardSigmoid(alpha 1/6, beta 0.5) as Clip(x / 6 + 0.5, 0, 1) (a Mul and an Add of
               * constants would fold into the Conv first: fold_batchnorm) */
        int k = tmb_scalar(&b, "k", conv_dtype, 6.0), half = tmb_scalar(&b, "half", conv_dtype, 0.5);
        int zero = tmb_scalar(&b, "zero", conv_dtype, 0), one = tmb_scalar(&b, "one", conv_dtype, 1);
        int m = tmb_op(&b, "Div", (int[]){y, k}, 2, "m");
        int a = tmb_op(&b, "Add", (int[]){m, half}, 2, "a");
        y = tmb_op(&b, "Clip", (int[]){a, zero, one}, 3, "act");
        break;
    }
    case 10: { /* Relu6 as Min(Max(x, 0), 6) */
        int zero = tmb_scalar(&b, "zero", conv_dtype, 0), six = tmb_scalar(&b, "six", conv_dtype, 6);
        int mx = tmb_op(&b, "Max", (int[]){y, zero}, 2, "mx");
        y = tmb_op(&b, "Min", (int[]){mx, six}, 2, "act");
        break;
    }
    case 11: { /* SiLU as x / (1 + exp(-x)) */
        int one = tmb_scalar(&b, "one", conv_dtype, 1);
        int n = tmb_op(&b, "Neg", &y, 1, "n");
        int e = tmb_op(&b, "Exp", &n, 1, "e");
        int d = tmb_op(&b, "Add", (int[]){one, e}, 2, "d");
        y = tmb_op(&b, "Div", (int[]){y, d}, 2, "act");
        break;
    }
    case 13: { /* a clamp at 20 (Max, then Min), which must not be taken for a Relu */
        int zero = tmb_scalar(&b, "zero", conv_dtype, 0), top = tmb_scalar(&b, "top", conv_dtype, 20);
        int mx = tmb_op(&b, "Max", (int[]){zero, y}, 2, "mx");
        y = tmb_op(&b, "Min", (int[]){mx, top}, 2, "act");
        break;
    }
    }
    tmb_output(&b, y);
    return b.m;
}

KN_TEST(opt_fused_conv_matches_unfused) {
    for (int act = 0; act <= 7; act++)
        for (int res = 0; res <= 1; res++)
            for (int grp = 1; grp <= 4; grp += 3) {
                if (!act && !res) continue;
                conv_act = act, conv_residual = res, conv_group = grp, conv_dtype = KILN_DTYPE_FLOAT;
                kiln_session *s = compare_levels(build_conv, 2, 1e-5);
                if (!s) continue;
                CHECK_MSG(count_op(s, "kiln", "FusedConv") == 1 && live_nodes(s) == 1,
                          "act %d residual %d group %d: %d nodes, %d FusedConv", act, res, grp, live_nodes(s),
                          count_op(s, "kiln", "FusedConv"));
                kiln_session_destroy(s);
            }
}

/* Inputs with unknown, unnamed dims ('?' in a model file): inference names the unknown dims of
 * each value after itself, and carries the names through elementwise nodes, so the fusions'
 * same-shape checks hold as with named dims: a Conv + HardSwish / Relu6 / SiLU written out, a
 * LayerNorm written out. Without the names each fusion below is refused. */
KN_TEST(opt_fusions_with_anonymous_dims) {
    anonymous_dims = true;
    conv_group = 1, conv_dtype = KILN_DTYPE_FLOAT;
    const int acts[] = {8, 10, 11};
    for (int k = 0; k < 3; k++) {
        conv_act = acts[k], conv_residual = 0;
        kiln_session *s = compare_levels(build_conv, 2, 1e-5);
        if (!s) continue;
        CHECK_MSG(count_op(s, "kiln", "FusedConv") == 1 && live_nodes(s) == 1, "act %d: %d nodes", conv_act,
                  live_nodes(s));
        kiln_session_destroy(s);
    }
    conv_act = conv_residual = 0;
    ln_case = 0;
    kiln_session *s = compare_levels(build_ln, 2, 1e-5);
    if (s) {
        CHECK_EQ_INT(count_op(s, "kiln", "LayerNormalization"), 1);
        CHECK_EQ_INT(live_nodes(s), 1);
        kiln_session_destroy(s);
    }
    anonymous_dims = false;
}

/* Activations written out in elementwise nodes are recognised by their values (fuse_util.c's
 * regions) and fused like the operators: the fused node carries the activation they compute. */
KN_TEST(opt_fused_conv_activation_forms) {
    static const struct {
        int act;
        const char *name;
        float p0, p1;
    } forms[] = {{8, "HardSwish", 0, 0}, {9, "HardSigmoid", 1.0f / 6.0f, 0.5f}, {10, "Clip", 0, 6},
                 {11, "SiLU", 0, 0}, {13, "Clip", 0, 20}};
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++)
        for (int res = 0; res <= 1; res++) {
            conv_act = forms[f].act, conv_residual = res, conv_group = 1, conv_dtype = KILN_DTYPE_FLOAT;
            kiln_session *s = compare_levels_without(build_conv, 2, 1e-5, "fuse_elementwise");
            if (!s) continue;
            const kn_graph *g = s->model->graph;
            CHECK_MSG(count_op(s, "kiln", "FusedConv") == 1 && live_nodes(s) == 1, "form %d residual %d: %d nodes",
                      forms[f].act, res, live_nodes(s));
            for (int i = 0; i < g->n_nodes; i++) {
                if (g->nodes[i].dead || strcmp(g->nodes[i].op_type, "FusedConv")) continue;
                CHECK_MSG(!strcmp(kn_attr_string(&g->nodes[i], "activation", ""), forms[f].name), "form %d: %s",
                          forms[f].act, kn_attr_string(&g->nodes[i], "activation", ""));
                int np = 0;
                const float *p = kn_attr_floats(&g->nodes[i], "activation_params", &np);
                if (forms[f].p0 || forms[f].p1) {
                    CHECK_MSG(np >= 2 && fabsf(p[0] - forms[f].p0) < 1e-6f && fabsf(p[1] - forms[f].p1) < 1e-6f,
                              "form %d: %d params", forms[f].act, np);
                }
            }
            kiln_session_destroy(s);
        }
    /* x * Clip(x + 3, 0, 6) / 5 is no activation kiln knows: nothing joins the Conv */
    conv_act = 12, conv_residual = 0;
    kiln_session *s = compare_levels_without(build_conv, 2, 1e-6, "fuse_elementwise");
    if (s) {
        CHECK_EQ_INT(count_op(s, "kiln", "FusedConv"), 0);
        CHECK_EQ_INT(count_op(s, "", "Clip"), 1);
        kiln_session_destroy(s);
    }
}

/* A constant clamp after a fused activation (openWakeWord's Conv -> LeakyRelu -> Max(x, -0.4))
 * folds into the fused node: Relu and Clip compose into one Clip, the other activations carry
 * activation_bounds. clamp_case: 0 LeakyRelu, Max(x, -0.1); 1 Tanh, Max(-0.3, x), Min(x, 0.5);
 * 2 HardSwish, Clip(-0.2, 0.3); 3 Relu, Max(x, 0.25); 4 Clip(-0.25, 0.5), Min(x, 0.3);
 * 5 Sigmoid, Min(x, 0.6), through a residual Add. The lookalikes, which must not fold: 6 the
 * bound a graph input; 7 a per-channel [1,4,1,1] bound; 8 Max before the LeakyRelu; 9 a NaN
 * bound; 10 an infinite one; 11 the activation's output read by the Max and by a graph output;
 * 12 a Max of three inputs. */
static int clamp_case;
static kn_model *build_clamp(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int64_t xd[] = {1, 4, 6, 6}, wd[] = {4, 4, 3, 3}, bd[] = {4};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, xd, NULL);
    int w = tmb_const_range(&b, "w", KILN_DTYPE_FLOAT, 4, wd, -0.5f, 0.5f);
    int bias = tmb_const_range(&b, "b", KILN_DTYPE_FLOAT, 1, bd, -0.5f, 0.5f);
    int y = tmb_op(&b, "Conv", (int[]){x, w, bias}, 3, "y");
    tmb_op_ints(&b, "pads", (int64_t[]){1, 1, 1, 1}, 4);
    if (clamp_case == 5) {
        int z = tmb_input(&b, "z", KILN_DTYPE_FLOAT, 4, xd, NULL);
        y = tmb_op(&b, "Add", (int[]){y, z}, 2, "sum");
    }
    int a;
    switch (clamp_case) {
    case 1: a = tmb_op(&b, "Tanh", &y, 1, "act"); break;
    case 2: a = tmb_op(&b, "HardSwish", &y, 1, "act"); break;
    case 3: a = tmb_op(&b, "Relu", &y, 1, "act"); break;
    case 4: {
        int lo = tmb_scalar(&b, "clo", KILN_DTYPE_FLOAT, -0.25), hi = tmb_scalar(&b, "chi", KILN_DTYPE_FLOAT, 0.5);
        a = tmb_op(&b, "Clip", (int[]){y, lo, hi}, 3, "act");
        break;
    }
    case 5: a = tmb_op(&b, "Sigmoid", &y, 1, "act"); break;
    case 8: { /* Max first: LeakyRelu(Max(x, -0.1)) is not Max(LeakyRelu(x), -0.1) */
        int k = tmb_scalar(&b, "k", KILN_DTYPE_FLOAT, -0.1);
        int m = tmb_op(&b, "Max", (int[]){y, k}, 2, "m");
        a = tmb_op(&b, "LeakyRelu", &m, 1, "act");
        tmb_op_float(&b, "alpha", 0.2f);
        break;
    }
    default:
        a = tmb_op(&b, "LeakyRelu", &y, 1, "act");
        tmb_op_float(&b, "alpha", 0.2f);
        break;
    }
    int out = a;
    switch (clamp_case) {
    case 0:
    case 11: out = tmb_op(&b, "Max", (int[]){a, tmb_scalar(&b, "k", KILN_DTYPE_FLOAT, -0.1)}, 2, "out"); break;
    case 1: {
        int m = tmb_op(&b, "Max", (int[]){tmb_scalar(&b, "k0", KILN_DTYPE_FLOAT, -0.3), a}, 2, "m");
        out = tmb_op(&b, "Min", (int[]){m, tmb_scalar(&b, "k1", KILN_DTYPE_FLOAT, 0.5)}, 2, "out");
        break;
    }
    case 2: {
        int lo = tmb_scalar(&b, "k0", KILN_DTYPE_FLOAT, -0.2), hi = tmb_scalar(&b, "k1", KILN_DTYPE_FLOAT, 0.3);
        out = tmb_op(&b, "Clip", (int[]){a, lo, hi}, 3, "out");
        break;
    }
    case 3: out = tmb_op(&b, "Max", (int[]){a, tmb_scalar(&b, "k", KILN_DTYPE_FLOAT, 0.25)}, 2, "out"); break;
    case 4: out = tmb_op(&b, "Min", (int[]){a, tmb_scalar(&b, "k", KILN_DTYPE_FLOAT, 0.3)}, 2, "out"); break;
    case 5: out = tmb_op(&b, "Min", (int[]){a, tmb_scalar(&b, "k", KILN_DTYPE_FLOAT, 0.6)}, 2, "out"); break;
    case 6: {
        int k = tmb_input(&b, "k", KILN_DTYPE_FLOAT, 1, (int64_t[]){1}, NULL);
        out = tmb_op(&b, "Max", (int[]){a, k}, 2, "out");
        break;
    }
    case 7: {
        int k = tmb_const_range(&b, "k", KILN_DTYPE_FLOAT, 4, (int64_t[]){1, 4, 1, 1}, -0.3f, -0.05f);
        out = tmb_op(&b, "Max", (int[]){a, k}, 2, "out");
        break;
    }
    case 8: break;
    case 9: out = tmb_op(&b, "Max", (int[]){a, tmb_scalar(&b, "k", KILN_DTYPE_FLOAT, NAN)}, 2, "out"); break;
    case 10: out = tmb_op(&b, "Min", (int[]){a, tmb_scalar(&b, "k", KILN_DTYPE_FLOAT, INFINITY)}, 2, "out"); break;
    case 12: {
        int k0 = tmb_scalar(&b, "k0", KILN_DTYPE_FLOAT, -0.1), k1 = tmb_scalar(&b, "k1", KILN_DTYPE_FLOAT, -0.2);
        out = tmb_op(&b, "Max", (int[]){a, k0, k1}, 3, "out");
        break;
    }
    }
    tmb_output(&b, out);
    if (clamp_case == 11) tmb_output(&b, a);
    return b.m;
}

/* The fused node of the session (the one FusedConv, FusedGemm or FusedMatMul), or NULL. */
static const kn_node *fused_node(const kiln_session *s, const char *op) {
    const kn_graph *g = s->model->graph;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && !strcmp(g->nodes[i].op_type, op) && !strcmp(g->nodes[i].domain, "kiln"))
            return &g->nodes[i];
    return NULL;
}

KN_TEST(opt_clamp_after_activation_folds) {
    static const struct {
        const char *act;
        int bounded; /* 1: activation_bounds lo, hi; 0: none (a Clip's params p0, p1 when act is Clip) */
        float lo, hi;
    } want[] = {{"LeakyRelu", 1, -0.1f, INFINITY}, {"Tanh", 1, -0.3f, 0.5f}, {"HardSwish", 1, -0.2f, 0.3f},
                {"Clip", 0, 0.25f, INFINITY},      {"Clip", 0, -0.25f, 0.3f}, {"Sigmoid", 1, -INFINITY, 0.6f}};
    for (clamp_case = 0; clamp_case <= 5; clamp_case++) {
        kiln_session *s = compare_levels_without(build_clamp, 2, 1e-6, "fuse_elementwise");
        if (!s) continue;
        CHECK_MSG(live_nodes(s) == 1 && count_op(s, "kiln", "FusedConv") == 1, "case %d: %d nodes", clamp_case,
                  live_nodes(s));
        const kn_node *n = fused_node(s, "FusedConv");
        if (n) {
            CHECK_MSG(!strcmp(kn_attr_string(n, "activation", ""), want[clamp_case].act), "case %d: %s", clamp_case,
                      kn_attr_string(n, "activation", ""));
            int nb = 0, np = 0;
            const float *bd = kn_attr_floats(n, "activation_bounds", &nb);
            const float *p = kn_attr_floats(n, "activation_params", &np);
            if (want[clamp_case].bounded)
                CHECK_MSG(nb == 2 && bd[0] == want[clamp_case].lo && bd[1] == want[clamp_case].hi,
                          "case %d: bounds %d [%g, %g]", clamp_case, nb, nb ? bd[0] : 0, nb ? bd[1] : 0);
            else
                CHECK_MSG(nb == 0 && np == 2 && p[0] == want[clamp_case].lo && p[1] == want[clamp_case].hi,
                          "case %d: %d bounds, params %d [%g, %g]", clamp_case, nb, np, np ? p[0] : 0, np > 1 ? p[1] : 0);
        }
        kiln_session_destroy(s);
    }
    /* the lookalikes: the clamp (or, case 8, the LeakyRelu after it) stays a node of its own, and the
     * fused node carries no bounds */
    for (clamp_case = 6; clamp_case <= 12; clamp_case++) {
        kiln_session *s = compare_levels_without(build_clamp, 2, 1e-6, "fuse_elementwise");
        if (!s) continue;
        const kn_node *n = fused_node(s, "FusedConv");
        CHECK_MSG(n && !kn_node_attr(n, "activation_bounds"), "case %d: %s", clamp_case,
                  n ? "bounds folded" : "no FusedConv");
        if (clamp_case == 8) CHECK_EQ_INT(count_op(s, "", "LeakyRelu"), 1);
        else CHECK_MSG(count_op(s, "", "Max") + count_op(s, "", "Min") == 1, "case %d: the clamp went", clamp_case);
        kiln_session_destroy(s);
    }
}

/* activation_bounds as the CPU kernels read it from a kiln.FusedConv that names it directly
 * (which the optimiser never forms for Relu, Clip or no activation: it makes them one Clip), so
 * the convolution's store-time clamp composes them (kn_clamp_then), and for other activations
 * the epilogue applies them: each against Conv -> activation -> Max -> Min at level 0.
 * direct_case: 0 Relu [-0.1, 0.3]; 1 Clip(-0.25, 0.5) [0.6, 0.9] (a constant 0.6); 2 none
 * [-0.2, 0.2]; 3 LeakyRelu 0.2 [-0.1, inf]; 4 Tanh [-0.3, 0.5]; 5 HardSigmoid(0.3, 0.4)
 * [0.1, 0.7]; 6 HardSwish [-0.2, 0.9]. */
static int direct_case, direct_fused;
/* direct_shape: 0 the 1x1 16->16 on 8x8 above; 1 a 1x1 7->13 on 5x7 (partial tiles both ways: 13
 * rows, 35 columns); 2 a 3x3 5->13 on 9x11 with pads 1; 3 a 3x1 48->48 on 36x16 (openWakeWord's).
 * direct_res: with a residual Z (an Add before the activation at level 0). Each of these is a
 * GEMM's (its store-time tail: the clamps and the LeakyRelu). */
static int direct_shape, direct_res;
static kn_model *build_direct_bounds(void) {
    static const struct {
        const char *act;
        float p0, p1, lo, hi;
    } cases[] = {{"Relu", 0, 0, -0.1f, 0.3f},
                 {"Clip", -0.25f, 0.5f, 0.6f, 0.9f},
                 {"", 0, 0, -0.2f, 0.2f},
                 {"LeakyRelu", 0.2f, 0, -0.1f, INFINITY},
                 {"Tanh", 0, 0, -0.3f, 0.5f},
                 {"HardSigmoid", 0.3f, 0.4f, 0.1f, 0.7f},
                 {"HardSwish", 0, 0, -0.2f, 0.9f}};
    tmb b;
    tmb_init_onnx(&b, 17);
    static const int64_t shp[4][6] = {{16, 16, 8, 8, 1, 1}, {7, 13, 5, 7, 1, 1}, {5, 13, 9, 11, 3, 3},
                                      {48, 48, 36, 16, 3, 1}}; /* C, M, H, W, KH, KW */
    const int64_t *sh = shp[direct_shape];
    const int64_t ph = sh[4] / 2, pw = sh[5] / 2;
    int64_t xd[] = {1, sh[0], sh[2], sh[3]}, wd[] = {sh[1], sh[0], sh[4], sh[5]}, bd[] = {sh[1]};
    int64_t zd[] = {1, sh[1], sh[2] + 2 * ph - sh[4] + 1, sh[3] + 2 * pw - sh[5] + 1};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, xd, NULL);
    int z = direct_res ? tmb_input(&b, "z", KILN_DTYPE_FLOAT, 4, zd, NULL) : -1;
    int w = tmb_const_range(&b, "w", KILN_DTYPE_FLOAT, 4, wd, -0.5f, 0.5f);
    int bias = tmb_const_range(&b, "b", KILN_DTYPE_FLOAT, 1, bd, -0.5f, 0.5f);
    const int k = direct_case;
    int y;
    if (direct_fused) {
        tmb_import_kiln(&b);
        y = kn_graph_add_value(b.g, "out");
        b.last = kn_graph_add_node(b.g, "fc", "FusedConv", "kiln", (int[]){x, w, bias, z}, direct_res ? 4 : 3, &y, 1);
        b.g->nodes[b.last].opset = 1;
        if (ph || pw) tmb_op_ints(&b, "pads", (int64_t[]){ph, pw, ph, pw}, 4);
        kn_attr *a = tmb_op_attr(&b, "activation", KN_ATTR_STRING);
        a->s = (char *)cases[k].act;
        a->s_len = strlen(cases[k].act);
        float *pp = kn_arena_alloc(&b.m->arena, 4 * sizeof(float));
        pp[0] = cases[k].p0, pp[1] = cases[k].p1, pp[2] = cases[k].lo, pp[3] = cases[k].hi;
        a = tmb_op_attr(&b, "activation_params", KN_ATTR_FLOATS);
        a->floats = pp, a->n = 2;
        a = tmb_op_attr(&b, "activation_bounds", KN_ATTR_FLOATS);
        a->floats = pp + 2, a->n = 2;
    } else {
        y = tmb_op(&b, "Conv", (int[]){x, w, bias}, 3, "y");
        if (ph || pw) tmb_op_ints(&b, "pads", (int64_t[]){ph, pw, ph, pw}, 4);
        if (direct_res) y = tmb_op(&b, "Add", (int[]){y, z}, 2, "sum");
        if (k == 1) {
            y = tmb_op(&b, "Clip",
                       (int[]){y, tmb_scalar(&b, "c0", KILN_DTYPE_FLOAT, cases[k].p0),
                               tmb_scalar(&b, "c1", KILN_DTYPE_FLOAT, cases[k].p1)},
                       3, "act");
        } else if (k == 3) {
            y = tmb_op(&b, "LeakyRelu", &y, 1, "act");
            tmb_op_float(&b, "alpha", cases[k].p0);
        } else if (k != 2) {
            y = tmb_op(&b, cases[k].act, &y, 1, "act");
            if (k == 5) tmb_op_float(&b, "alpha", cases[k].p0), tmb_op_float(&b, "beta", cases[k].p1);
        }
        y = tmb_op(&b, "Max", (int[]){y, tmb_scalar(&b, "lo", KILN_DTYPE_FLOAT, cases[k].lo)}, 2, "m");
        y = tmb_op(&b, "Min", (int[]){y, tmb_scalar(&b, "hi", KILN_DTYPE_FLOAT, cases[k].hi)}, 2, "out");
    }
    tmb_output(&b, y);
    return b.m;
}

KN_TEST(opt_activation_bounds_in_the_cpu_kernels) {
    for (direct_shape = 0; direct_shape < 4; direct_shape++)
        for (direct_res = 0; direct_res <= 1; direct_res++)
            for (direct_case = 0; direct_case <= 6; direct_case++) {
                direct_fused = 0;
                kiln_session *ref = make_session(build_direct_bounds(), 0, NULL);
                direct_fused = 1;
                kiln_session *fused = make_session(build_direct_bounds(), 0, NULL);
                if (ref && fused) {
                    CHECK_EQ_INT(count_op(fused, "kiln", "FusedConv"), 1);
                    /* the clamps, LeakyRelu, HardSigmoid and HardSwish as the separate ops compute
                     * them, to the bit */
                    check_same(ref, fused, direct_case == 4 ? 1e-6 : 0.0);
                }
                kiln_session_destroy(ref);
                kiln_session_destroy(fused);
            }
    direct_shape = direct_res = 0;
}

/* The same after Gemm (FusedGemm) and after MatMul + bias (FusedMatMul): LeakyRelu, Max(x, -0.1). */
static int clamp_gemm;
static kn_model *build_clamp_gemm(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int a = tmb_input(&b, "a", KILN_DTYPE_FLOAT, clamp_gemm ? 3 : 2,
                      clamp_gemm ? (int64_t[]){2, 3, 5} : (int64_t[]){3, 5}, NULL);
    int w = tmb_const_range(&b, "w", KILN_DTYPE_FLOAT, 2, (int64_t[]){5, 6}, -1, 1);
    int c = tmb_const_range(&b, "c", KILN_DTYPE_FLOAT, 1, (int64_t[]){6}, -1, 1);
    int y;
    if (!clamp_gemm) {
        y = tmb_op(&b, "Gemm", (int[]){a, w, c}, 3, "g");
    } else {
        y = tmb_op(&b, "MatMul", (int[]){a, w}, 2, "mm");
        y = tmb_op(&b, "Add", (int[]){y, c}, 2, "biased");
    }
    y = tmb_op(&b, "LeakyRelu", &y, 1, "act");
    tmb_op_float(&b, "alpha", 0.2f);
    y = tmb_op(&b, "Max", (int[]){y, tmb_scalar(&b, "k", KILN_DTYPE_FLOAT, -0.1)}, 2, "out");
    tmb_output(&b, y);
    return b.m;
}

KN_TEST(opt_clamp_after_gemm_activation_folds) {
    for (clamp_gemm = 0; clamp_gemm <= 1; clamp_gemm++) {
        const char *op = clamp_gemm ? "FusedMatMul" : "FusedGemm";
        kiln_session *s = compare_levels_without(build_clamp_gemm, 2, 1e-6, "fuse_elementwise");
        if (!s) continue;
        CHECK_MSG(live_nodes(s) == 1 && count_op(s, "kiln", op) == 1, "%s: %d nodes", op, live_nodes(s));
        const kn_node *n = fused_node(s, op);
        int nb = 0;
        const float *bd = n ? kn_attr_floats(n, "activation_bounds", &nb) : NULL;
        CHECK_MSG(nb == 2 && bd[0] == -0.1f && bd[1] == INFINITY, "%s: %d bounds", op, nb);
        kiln_session_destroy(s);
    }
}

/* kn_clamp_then against the two clamps it stands for, over bounds in every order (constant
 * results included); and activation_bounds that are not two ordered, non-NaN floats are refused. */
KN_TEST(opt_clamp_composition) {
    static const float k[] = {-INFINITY, -2.0f, -0.5f, 0.0f, 0.5f, 2.0f, INFINITY};
    const int nk = (int)(sizeof k / sizeof k[0]);
    int bad = 0;
    for (int i = 0; i < nk; i++)
        for (int j = 0; j < nk; j++)
            for (int p = 0; p < nk; p++)
                for (int q = 0; q < nk; q++) {
                    float lo = k[i], hi = k[j];
                    kn_clamp_then(&lo, &hi, k[p], k[q]);
                    for (float x = -3.0f; x <= 3.0f; x += 0.25f) {
                        float two = fminf(fmaxf(fminf(fmaxf(x, k[i]), k[j]), k[p]), k[q]);
                        bad += fminf(fmaxf(x, lo), hi) != two;
                    }
                }
    CHECK_EQ_INT(bad, 0);
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op_type = "FusedConv";
    n.domain = "kiln";
    float vals[][2] = {{NAN, 1.0f}, {1.0f, 0.5f}, {INFINITY, INFINITY}, {-1.0f, 1.0f}};
    kn_attr at[2] = {{.name = "activation", .type = KN_ATTR_STRING, .s = "Tanh", .s_len = 4},
                     {.name = "activation_bounds", .type = KN_ATTR_FLOATS, .n = 2}};
    n.attrs = at;
    n.n_attrs = 2;
    char why[160];
    for (int v = 0; v < 4; v++) {
        at[1].floats = vals[v];
        kn_act_spec a;
        bool ok = kn_act_from_node(&n, &a, why, sizeof why);
        CHECK_MSG(ok == (v == 3), "bounds [%g, %g]: %s", vals[v][0], vals[v][1], ok ? "taken" : why);
        if (ok) CHECK(a.bounded && a.lo == -1.0f && a.hi == 1.0f && a.act == KN_ACT_TANH);
    }
}

/* Per-channel affine steps written out after a Conv (BatchNormalization decomposed: Conv without
 * bias, Mul by a [4, 1, 1] scale, Add of a [1, 4, 1, 1] shift; a Sub of a scalar) fold into the
 * Conv's weights and bias at level 1, so the Relu then fuses too; an Add whose constant varies along
 * the plane (case 1), or a Sub of the Conv from a constant (case 2), is no per-channel step. */
static int affine_case;
static kn_model *build_conv_affine(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int64_t xd[] = {1, 3, 5, 5};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, xd, NULL);
    int w = tmb_const_range(&b, "w", KILN_DTYPE_FLOAT, 4, (int64_t[]){4, 3, 3, 3}, -0.5f, 0.5f);
    int y = tmb_op(&b, "Conv", (int[]){x, w}, 2, "y");
    tmb_op_ints(&b, "pads", (int64_t[]){1, 1, 1, 1}, 4);
    if (affine_case == 0) {
        int sc = tmb_const_range(&b, "sc", KILN_DTYPE_FLOAT, 3, (int64_t[]){4, 1, 1}, 0.5f, 2.0f);
        int sh = tmb_const_range(&b, "sh", KILN_DTYPE_FLOAT, 4, (int64_t[]){1, 4, 1, 1}, -1, 1);
        int one = tmb_scalar(&b, "one", KILN_DTYPE_FLOAT, 0.25);
        y = tmb_op(&b, "Mul", (int[]){sc, y}, 2, "m");
        y = tmb_op(&b, "Add", (int[]){y, sh}, 2, "a");
        y = tmb_op(&b, "Sub", (int[]){y, one}, 2, "s");
    } else if (affine_case == 1) {
        int pl = tmb_const_range(&b, "pl", KILN_DTYPE_FLOAT, 4, (int64_t[]){1, 1, 5, 5}, -1, 1);
        y = tmb_op(&b, "Add", (int[]){y, pl}, 2, "a");
    } else {
        int sh = tmb_const_range(&b, "sh", KILN_DTYPE_FLOAT, 4, (int64_t[]){1, 4, 1, 1}, -1, 1);
        y = tmb_op(&b, "Sub", (int[]){sh, y}, 2, "s");
    }
    tmb_output(&b, tmb_op(&b, "Relu", &y, 1, "r"));
    return b.m;
}

KN_TEST(opt_fold_per_channel_affine_into_conv) {
    for (affine_case = 0; affine_case < 3; affine_case++) {
        kiln_session *s = compare_levels_without(build_conv_affine, 2, 1e-5, "fuse_elementwise");
        if (!s) continue;
        if (affine_case == 0) {
            CHECK_EQ_INT(count_op(s, "kiln", "FusedConv"), 1);
            CHECK_EQ_INT(live_nodes(s), 1);
        } else {
            CHECK_MSG(count_op(s, "", "Conv") == 1 && count_op(s, "kiln", "FusedConv") == 0,
                      "case %d: the Conv took a step that is not per channel", affine_case);
        }
        kiln_session_destroy(s);
    }
}

/* A zero Pad of the spatial axes before a Conv folds into the Conv's pads (case 0: pads add up to
 * [2, 3, 4, 2]; case 4: opset 18's axes input naming the spatial axes); a Pad of ones (1), in
 * reflect mode (2) or of the channels (3) stays. */
static int pad_case;
static kn_model *build_pad_conv(void) {
    tmb b;
    tmb_init_onnx(&b, pad_case == 4 ? 18 : 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){1, 3, 6, 5}, NULL);
    int w = tmb_const_range(&b, "w", KILN_DTYPE_FLOAT, 4, (int64_t[]){4, pad_case == 3 ? 4 : 3, 3, 3}, -0.5f, 0.5f);
    int p;
    if (pad_case == 4) {
        p = tmb_const_range(&b, "p", KILN_DTYPE_INT64, 1, (int64_t[]){4}, 0, 0);
        int64_t pv[4] = {1, 2, 3, 1};
        for (int k = 0; k < 4; k++) kn_tensor_set_f64(b.g->values[p].constant, k, (double)pv[k]);
    } else {
        p = tmb_const_range(&b, "p", KILN_DTYPE_INT64, 1, (int64_t[]){8}, 0, 0);
        int64_t pv[8] = {0, 0, 1, 2, 0, pad_case == 3 ? 1 : 0, 3, 1};
        for (int k = 0; k < 8; k++) kn_tensor_set_f64(b.g->values[p].constant, k, (double)pv[k]);
    }
    int ins[4] = {x, p, -1, -1}, n_in = 2;
    if (pad_case == 1) ins[n_in++] = tmb_scalar(&b, "one", KILN_DTYPE_FLOAT, 1.0);
    if (pad_case == 4) {
        ins[2] = -1;
        ins[3] = tmb_const_range(&b, "axes", KILN_DTYPE_INT64, 1, (int64_t[]){2}, 0, 0);
        kn_tensor_set_f64(b.g->values[ins[3]].constant, 0, 2);
        kn_tensor_set_f64(b.g->values[ins[3]].constant, 1, 3);
        n_in = 4;
    }
    int y = tmb_op(&b, "Pad", ins, n_in, "padded");
    if (pad_case == 2) tmb_op_attr(&b, "mode", KN_ATTR_STRING)->s = "reflect";
    y = tmb_op(&b, "Conv", (int[]){y, w}, 2, "y");
    tmb_op_ints(&b, "pads", (int64_t[]){1, 1, 1, 1}, 4);
    tmb_output(&b, y);
    return b.m;
}

KN_TEST(opt_fold_zero_pad_into_conv) {
    for (pad_case = 0; pad_case <= 4; pad_case++) {
        kiln_session *s = compare_levels(build_pad_conv, 1, 1e-6);
        if (!s) continue;
        const bool folds = pad_case == 0 || pad_case == 4;
        CHECK_MSG(count_op(s, "", "Pad") == (folds ? 0 : 1), "case %d: %d Pad", pad_case, count_op(s, "", "Pad"));
        const kn_graph *g = s->model->graph;
        for (int i = 0; folds && i < g->n_nodes; i++) {
            if (g->nodes[i].dead || strcmp(g->nodes[i].op_type, "Conv")) continue;
            int cnt = 0;
            const int64_t *pads = kn_attr_ints(&g->nodes[i], "pads", &cnt);
            const int64_t want[4] = {2, 3, 4, 2}; /* Conv's 1 on every side plus the Pad's */
            CHECK_MSG(cnt == 4 && pads[0] == want[0] && pads[1] == want[1] && pads[2] == want[2] && pads[3] == want[3],
                      "case %d: pads %lld %lld %lld %lld", pad_case, (long long)(cnt > 0 ? pads[0] : -1),
                      (long long)(cnt > 1 ? pads[1] : -1), (long long)(cnt > 2 ? pads[2] : -1),
                      (long long)(cnt > 3 ? pads[3] : -1));
        }
        kiln_session_destroy(s);
    }
}

/* ------------------------------------------------------------------ subgraph reads (issue 18) */

static int body_last;

static kn_graph *body_new(tmb *b, kn_graph *parent, const char *name) {
    kn_graph *g = NULL;
    kn_graph_new(b->m, parent, name, &g);
    return g;
}

/* The body's reference to value `name` of an enclosing graph. */
static int body_outer(kn_graph *g, const char *name) {
    int v = kn_graph_add_value(g, name);
    g->values[v].is_outer = true;
    return v;
}

static int body_node(tmb *b, kn_graph *g, const char *op, const int *ins, int n, const char *out) {
    int v = kn_graph_add_value(g, out);
    body_last = kn_graph_add_node(g, out, op, "", ins, n, &v, 1);
    g->nodes[body_last].opset = (int)b->m->opsets[0].version;
    return v;
}

static void body_output(kn_graph *g, int v) {
    g->values[v].is_graph_output = true;
    tmb_push(&g->outputs, &g->n_outputs, v);
}

static void graph_attr(tmb *b, kn_graph *g, int node, const char *name, kn_graph *sub) {
    kn_node *n = &g->nodes[node];
    kn_attr *a = kn_arena_alloc(&b->m->arena, sizeof(kn_attr) * (size_t)(n->n_attrs + 1));
    if (n->n_attrs) memcpy(a, n->attrs, sizeof(kn_attr) * (size_t)n->n_attrs);
    memset(&a[n->n_attrs], 0, sizeof(kn_attr));
    a[n->n_attrs].name = name;
    a[n->n_attrs].type = KN_ATTR_GRAPH;
    a[n->n_attrs].g = sub;
    n->attrs = a;
    n->n_attrs++;
}

static int body_reads_conv_out; /* the else branch also reads the Conv's output (pre-activation) */

/* sig = Sigmoid(Conv(x)); r = Relu(x); out = If(cond):
 *   then: If(cond) { then: Neg(sig)  else: Abs(r) }      reads two levels down
 *   else: Relu(Add(sig, 0.5)) (+ the Conv output)         a fusible chain inside a body
 * The If is written first: only its outer reads order it after Conv, Sigmoid and Relu. */
static kn_model *build_subgraph_reads(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int64_t xd[] = {1, 3, 5, 5}, wd[] = {4, 3, 3, 3}, bd[] = {4};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, xd, NULL);
    int cond = tmb_input(&b, "cond", KILN_DTYPE_BOOL, 0, NULL, NULL);
    kn_graph *then_g = body_new(&b, b.g, "then"), *else_g = body_new(&b, b.g, "else");
    kn_graph *inner_then = body_new(&b, then_g, "inner_then"), *inner_else = body_new(&b, then_g, "inner_else");
    int out = tmb_op(&b, "If", &cond, 1, "out");
    graph_attr(&b, b.g, b.last, "then_branch", then_g);
    graph_attr(&b, b.g, b.last, "else_branch", else_g);
    int w = tmb_const_range(&b, "w", KILN_DTYPE_FLOAT, 4, wd, -0.5f, 0.5f);
    int bias = tmb_const_range(&b, "b", KILN_DTYPE_FLOAT, 1, bd, -0.5f, 0.5f);
    int y = tmb_op(&b, "Conv", (int[]){x, w, bias}, 3, "y");
    tmb_op_ints(&b, "pads", (int64_t[]){1, 1, 1, 1}, 4);
    tmb_op(&b, "Sigmoid", &y, 1, "sig");
    tmb_op(&b, "Relu", &x, 1, "r");
    /* then: an If two levels down reading sig and r */
    int c1 = body_outer(then_g, "cond"), s1 = body_outer(then_g, "sig"), r1 = body_outer(then_g, "r");
    (void)s1, (void)r1;
    int t_out = body_node(&b, then_g, "If", &c1, 1, "t_out");
    graph_attr(&b, then_g, body_last, "then_branch", inner_then);
    graph_attr(&b, then_g, body_last, "else_branch", inner_else);
    body_output(then_g, t_out);
    int s2 = body_outer(inner_then, "sig");
    body_output(inner_then, body_node(&b, inner_then, "Neg", &s2, 1, "it_out"));
    int r2 = body_outer(inner_else, "r");
    int rr = body_node(&b, inner_else, "Abs", &r2, 1, "ie_abs");
    /* Abs(r) has r's shape [1,3,5,5]; the branches must agree with [1,4,5,5]: pad a channel */
    int pads = kn_graph_add_value(inner_else, "ie_pads");
    kn_tensor *pt = NULL;
    kn_tensor_new(KILN_DTYPE_INT64, 1, (int64_t[]){8}, &pt);
    int64_t pv[8] = {0, 0, 0, 0, 0, 1, 0, 0};
    for (int i = 0; i < 8; i++) kn_tensor_set_f64(pt, i, (double)pv[i]);
    kn_model_own_tensor(b.m, pt);
    inner_else->values[pads].constant = pt;
    kn_type_set_tensor(&inner_else->values[pads].type, KILN_DTYPE_INT64, 1, (int64_t[]){8});
    body_output(inner_else, body_node(&b, inner_else, "Pad", (int[]){rr, pads}, 2, "ie_out"));
    /* else: a fusible chain over sig (and y) */
    int s3 = body_outer(else_g, "sig");
    int half = kn_graph_add_value(else_g, "half");
    kn_tensor *ht = NULL;
    kn_tensor_new(KILN_DTYPE_FLOAT, 0, NULL, &ht);
    kn_tensor_set_f64(ht, 0, 0.5);
    kn_model_own_tensor(b.m, ht);
    else_g->values[half].constant = ht;
    kn_type_set_tensor(&else_g->values[half].type, KILN_DTYPE_FLOAT, 0, NULL);
    int e = body_node(&b, else_g, "Add", (int[]){s3, half}, 2, "e_add");
    if (body_reads_conv_out) e = body_node(&b, else_g, "Sub", (int[]){e, body_outer(else_g, "y")}, 2, "e_sub");
    body_output(else_g, body_node(&b, else_g, "Relu", &e, 1, "e_out"));
    tmb_output(&b, out);
    return b.m;
}

static int value_in(const kn_graph *g, const char *name) { return kn_graph_find_value(g, name); }

/* out = If(cond): then: MatMul(x, Unsqueeze(w, 0)), else: MatMul(x, Unsqueeze(w2, 0)), where w is
 * the model's initializer and w2 one that is also a graph input (overridable: not a constant). The
 * Unsqueeze of the outer constant w folds inside its body (an LSTM in an If reading the model's
 * weights: silero VAD), the one of w2 does not. */
static int outer_const_node; /* w made by a Constant node, not an initializer */
static kn_model *build_body_outer_const(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, (int64_t[]){1, 2, 4}, NULL);
    int cond = tmb_input(&b, "cond", KILN_DTYPE_BOOL, 0, NULL, NULL);
    if (outer_const_node) {
        int wt = tmb_const_range(&b, "w_t", KILN_DTYPE_FLOAT, 2, (int64_t[]){4, 3}, -1, 1);
        const kn_tensor *t = b.g->values[wt].constant;
        b.g->values[wt].constant = NULL;
        tmb_op(&b, "Constant", NULL, 0, "w");
        kn_attr *a = tmb_op_attr(&b, "value", KN_ATTR_TENSOR);
        a->t = (kn_tensor *)t;
    } else {
        tmb_const_range(&b, "w", KILN_DTYPE_FLOAT, 2, (int64_t[]){4, 3}, -1, 1);
    }
    int w2 = tmb_const_range(&b, "w2", KILN_DTYPE_FLOAT, 2, (int64_t[]){4, 3}, -1, 1);
    b.g->values[w2].is_graph_input = true;
    tmb_push(&b.g->inputs, &b.g->n_inputs, w2);
    int axes = tmb_const_range(&b, "axes", KILN_DTYPE_INT64, 1, (int64_t[]){1}, 0, 0);
    (void)x, (void)axes;
    kn_graph *then_g = body_new(&b, b.g, "then"), *else_g = body_new(&b, b.g, "else");
    int out = tmb_op(&b, "If", &cond, 1, "out");
    graph_attr(&b, b.g, b.last, "then_branch", then_g);
    graph_attr(&b, b.g, b.last, "else_branch", else_g);
    const char *names[2] = {"w", "w2"};
    kn_graph *bodies[2] = {then_g, else_g};
    for (int k = 0; k < 2; k++) {
        kn_graph *g = bodies[k];
        int bx = body_outer(g, "x"), bw = body_outer(g, names[k]), ba = body_outer(g, "axes");
        int u = body_node(&b, g, "Unsqueeze", (int[]){bw, ba}, 2, k ? "u2" : "u1");
        body_output(g, body_node(&b, g, "MatMul", (int[]){bx, u}, 2, k ? "m2" : "m1"));
    }
    tmb_output(&b, out);
    return b.m;
}

KN_TEST(opt_body_folds_outer_constants) {
    for (outer_const_node = 0; outer_const_node <= 1; outer_const_node++) {
        kiln_session *s = compare_levels_without(build_body_outer_const, 1, 1e-6, NULL);
        if (!s) continue;
        const kn_graph *g = s->model->graph;
        int folded = -1, kept = -1;
        for (int i = 0; i < g->n_nodes; i++) {
            const kn_node *n = &g->nodes[i];
            if (n->dead || strcmp(n->op_type, "If")) continue;
            for (int a = 0; a < n->n_attrs; a++) {
                const kn_graph *b = n->attrs[a].g;
                int unsq = 0;
                for (int j = 0; b && j < b->n_nodes; j++)
                    unsq += !b->nodes[j].dead && !strcmp(b->nodes[j].op_type, "Unsqueeze");
                if (!strcmp(n->attrs[a].name, "then_branch")) folded = unsq;
                else kept = unsq;
            }
        }
        CHECK_MSG(folded == 0, "w from %s: %d Unsqueeze left", outer_const_node ? "a Constant node" : "an initializer",
                  folded);
        CHECK_EQ_INT(kept, 1);
        kiln_session_destroy(s);
    }
    outer_const_node = 0;
}

/* Values read inside If branches (one and two levels down) are uses: counted, kept, named, and
 * their producers ordered before the If; at level 2 Conv+Sigmoid still fuses (its output keeps
 * the name the branches read) unless a branch reads the Conv's own output; the bodies' own chains
 * are fused by the same passes. Levels 1-3 give level 0's outputs. (Before, the fused node was
 * scheduled after the If: "input 'sig' has no value at run time".) */
KN_TEST(opt_subgraph_reads_are_uses) {
    for (body_reads_conv_out = 0; body_reads_conv_out <= 1; body_reads_conv_out++) {
        /* the use/def tables themselves, before any pass */
        kn_model *m = build_subgraph_reads();
        CHECK_STATUS(kn_graph_sort(m->graph), KILN_OK);
        kn_graph *g = m->graph;
        int sig = value_in(g, "sig"), r = value_in(g, "r"), y = value_in(g, "y"), cond = value_in(g, "cond");
        CHECK_EQ_INT(g->values[sig].sub_reads, 2); /* then (through its inner If) and else */
        CHECK_EQ_INT(g->values[r].sub_reads, 1);
        CHECK_EQ_INT(g->values[y].sub_reads, body_reads_conv_out);
        CHECK_EQ_INT(g->values[y].uses, 1 + body_reads_conv_out); /* + the Sigmoid */
        CHECK_EQ_INT(g->values[cond].sub_reads, 1);
        CHECK(!strcmp(g->nodes[g->n_nodes - 1].op_type, "If")); /* sorted after what it reads */
        int *start = NULL, *ids = NULL;
        CHECK_STATUS(kn_graph_outer_reads(g, &start, &ids), KILN_OK);
        if (start) CHECK_EQ_INT(start[g->n_nodes] - start[g->n_nodes - 1], 4 + body_reads_conv_out);
        free(start);
        free(ids);
        kn_model_free(m);
        for (int level = 1; level <= 3; level++) {
            kiln_session *s = compare_levels(build_subgraph_reads, level, 1e-5);
            if (!s) continue;
            const kn_graph *og = s->model->graph;
            int v = value_in(og, "sig"), if_node = -1;
            for (int i = 0; i < og->n_nodes; i++)
                if (!og->nodes[i].dead && !strcmp(og->nodes[i].op_type, "If")) if_node = i;
            CHECK(v >= 0 && if_node >= 0);
            if (v >= 0 && if_node >= 0) {
                CHECK_MSG(og->values[v].producer >= 0 && og->values[v].producer < if_node,
                          "level %d: 'sig' is produced by node %d, the If is node %d", level, og->values[v].producer,
                          if_node);
                CHECK_EQ_INT(value_in(og, "r") >= 0 && og->values[value_in(og, "r")].producer >= 0, 1);
            }
            if (level >= 2)
                CHECK_EQ_INT(count_op(s, "kiln", "FusedConv"), body_reads_conv_out ? 0 : 1);
            if (level >= 2 && if_node >= 0) {
                const kn_attr *eb = kn_node_attr(&og->nodes[if_node], "else_branch");
                int fused = 0;
                for (int i = 0; eb && eb->g && i < eb->g->n_nodes; i++)
                    fused += !eb->g->nodes[i].dead && !strcmp(eb->g->nodes[i].op_type, "FusedElementwise");
                CHECK_MSG(fused == 1, "level %d: the else branch holds %d FusedElementwise", level, fused);
            }
            kiln_session_destroy(s);
        }
    }
    body_reads_conv_out = 0;
}

/* Regression: a per-channel Add after a grouped Conv broadcasts; it is not a residual. (With
 * elementwise chains on, the Add and the Relu after it become one chain; the Conv stays.) With
 * fold_batchnorm on, the Add is what it is, a per-channel shift: it goes into the Conv's bias. */
KN_TEST(opt_regression_conv_add_group_gt_1_broadcast_is_not_fused) {
    conv_act = 1, conv_residual = 2, conv_group = 4, conv_dtype = KILN_DTYPE_FLOAT;
    kiln_session *s = compare_levels_without(build_conv, 3, 1e-5, "fold_batchnorm");
    if (!s) return;
    CHECK_EQ_INT(count_op(s, "", "Conv"), 1);
    CHECK_EQ_INT(count_op(s, "kiln", "FusedElementwise"), 1); /* the Relu follows the Add, not the Conv */
    CHECK_EQ_INT(live_nodes(s), 2);
    kiln_session_destroy(s);
    for (int act = 1; act >= 0; act--) {
        conv_act = act;
        s = compare_levels(build_conv, 3, 1e-5);
        if (!s) continue;
        CHECK_EQ_INT(count_op(s, "", "Add"), 0);
        CHECK_EQ_INT(live_nodes(s), 1);
        const kn_graph *g = s->model->graph;
        for (int i = 0; i < g->n_nodes; i++) /* a bias, no residual */
            if (!g->nodes[i].dead) CHECK_MSG(given_inputs(&g->nodes[i]) == 3, "act %d: %d inputs", act,
                                             given_inputs(&g->nodes[i]));
        kiln_session_destroy(s);
    }
}

/* Regression: a fused node no backend supports is not formed (the CPU's fused kernels are
 * float32 only): a float64 and a float16 Conv + Relu stay as they are (float16 with
 * raise_float16 off: it would run them in float32). */
KN_TEST(opt_regression_unsupported_fused_node_not_formed) {
    kiln_dtype types[] = {KILN_DTYPE_DOUBLE, KILN_DTYPE_FLOAT16};
    for (int t = 0; t < 2; t++) {
        conv_act = 1, conv_residual = 1, conv_group = 1, conv_dtype = types[t];
        kiln_session *s = compare_levels_without(build_conv, 3, types[t] == KILN_DTYPE_FLOAT16 ? 1e-2 : 1e-9,
                                                 "raise_float16");
        if (!s) continue;
        CHECK_EQ_INT(count_op(s, "kiln", "FusedConv"), 0);
        CHECK_EQ_INT(count_op(s, "", "Conv"), 1);
        CHECK_EQ_INT(count_op(s, "", "Relu"), 1);
        kiln_session_destroy(s);
    }
    conv_dtype = KILN_DTYPE_FLOAT;
}

KN_TEST(opt_disabled_pass_and_unknown_pass) {
    conv_act = 1, conv_residual = 0, conv_group = 1, conv_dtype = KILN_DTYPE_FLOAT;
    kiln_session *s = make_session(build_conv(), 3, "fuse_conv");
    if (s) {
        CHECK_EQ_INT(count_op(s, "kiln", "FusedConv"), 0);
        CHECK_EQ_INT(count_op(s, "", "Relu"), 1);
        kiln_session_destroy(s);
    }
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_disable_pass(o, "no_such_pass");
    kiln_session *bad = NULL;
    CHECK_STATUS(kn_session_from_model(build_conv(), o, &bad), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("no_such_pass");
    CHECK_ERROR_HAS("fuse_conv"); /* the known passes are listed */
    CHECK(bad == NULL);
    kiln_session_options_destroy(o);
}

/* ------------------------------------------------------------------ Gemm and MatMul */

static int gemm_case;

/* 0: Transpose(perm [0,1]) of an input B feeding Gemm(transB = 1) + Relu;
 * 1: MatMul [3,5]x[5,6] + Add [6] (2-D: becomes Gemm);
 * 2: MatMul [2,3,5]x[5,6] + Add [6] + residual + Tanh (FusedMatMul);
 * 3: MatMul [2,3,5]x[5,6] + Gelu decomposed (erf) */
static kn_model *build_gemm(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int y;
    if (gemm_case == 0) {
        int a = tmb_input(&b, "a", KILN_DTYPE_FLOAT, 2, (int64_t[]){3, 5}, NULL);
        int bb = tmb_input(&b, "bt", KILN_DTYPE_FLOAT, 2, (int64_t[]){6, 5}, NULL);
        int t = tmb_op(&b, "Transpose", &bb, 1, "t");
        tmb_op_ints(&b, "perm", (int64_t[]){0, 1}, 2);
        int c = tmb_const_range(&b, "c", KILN_DTYPE_FLOAT, 1, (int64_t[]){6}, -1, 1);
        y = tmb_op(&b, "Gemm", (int[]){a, t, c}, 3, "g");
        tmb_op_int(&b, "transB", 1);
        tmb_op_float(&b, "alpha", 0.5f);
        y = tmb_op(&b, "Relu", &y, 1, "y");
    } else {
        bool three = gemm_case >= 2;
        int64_t ad3[] = {2, 3, 5}, ad2[] = {3, 5};
        int a = tmb_input(&b, "a", KILN_DTYPE_FLOAT, three ? 3 : 2, three ? ad3 : ad2, NULL);
        int w = tmb_const_range(&b, "w", KILN_DTYPE_FLOAT, 2, (int64_t[]){5, 6}, -1, 1);
        y = tmb_op(&b, "MatMul", (int[]){a, w}, 2, "mm");
        if (gemm_case <= 2) {
            int bias = tmb_const_range(&b, "bias", KILN_DTYPE_FLOAT, 1, (int64_t[]){6}, -1, 1);
            y = tmb_op(&b, "Add", (int[]){bias, y}, 2, "biased");
        }
        if (gemm_case == 2) {
            int z = tmb_input(&b, "z", KILN_DTYPE_FLOAT, 3, (int64_t[]){2, 3, 6}, NULL);
            y = tmb_op(&b, "Add", (int[]){y, z}, 2, "res");
            y = tmb_op(&b, "Tanh", &y, 1, "act");
        }
        if (gemm_case == 3) {
            int s2 = tmb_scalar(&b, "sqrt2", KILN_DTYPE_FLOAT, 1.4142135);
            int one = tmb_scalar(&b, "one", KILN_DTYPE_FLOAT, 1.0),
                half = tmb_scalar(&b, "half", KILN_DTYPE_FLOAT, 0.5);
            int d = tmb_op(&b, "Div", (int[]){y, s2}, 2, "d");
            int e = tmb_op(&b, "Erf", &d, 1, "e");
            int p = tmb_op(&b, "Add", (int[]){e, one}, 2, "p");
            int h = tmb_op(&b, "Mul", (int[]){half, y}, 2, "h");
            y = tmb_op(&b, "Mul", (int[]){h, p}, 2, "gelu");
        }
    }
    tmb_output(&b, y);
    return b.m;
}

/* Regression: an identity Transpose before a Gemm with transB = 1 must leave transB alone. */
KN_TEST(opt_regression_gemm_identity_transpose) {
    gemm_case = 0;
    kiln_session *s = compare_levels(build_gemm, 3, 1e-5);
    if (!s) return;
    CHECK_EQ_INT(count_op(s, "", "Transpose"), 0);
    CHECK_EQ_INT(count_op(s, "kiln", "FusedGemm"), 1);
    const kn_graph *g = s->model->graph;
    for (int i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].op_type, "FusedGemm")) CHECK_EQ_INT(kn_attr_int(&g->nodes[i], "transB", 0), 1);
    kiln_session_destroy(s);
}

KN_TEST(opt_matmul_add_fusions) {
    gemm_case = 1;
    kiln_session *s = compare_levels(build_gemm, 2, 1e-5);
    if (s) {
        CHECK_EQ_INT(count_op(s, "", "Gemm"), 1);
        CHECK_EQ_INT(live_nodes(s), 1);
        kiln_session_destroy(s);
    }
    gemm_case = 2;
    s = compare_levels(build_gemm, 2, 1e-5);
    if (s) {
        CHECK_EQ_INT(count_op(s, "kiln", "FusedMatMul"), 1);
        CHECK_EQ_INT(live_nodes(s), 1);
        kiln_session_destroy(s);
    }
    gemm_case = 3;
    s = compare_levels(build_gemm, 2, 1e-5);
    if (s) {
        CHECK_EQ_INT(count_op(s, "kiln", "FusedMatMul"), 1);
        CHECK_EQ_INT(live_nodes(s), 1);
        const kn_graph *g = s->model->graph;
        for (int i = 0; i < g->n_nodes; i++)
            if (!strcmp(g->nodes[i].op_type, "FusedMatMul"))
                CHECK(!strcmp(kn_attr_string(&g->nodes[i], "activation", ""), "Gelu"));
        kiln_session_destroy(s);
    }
    /* level 1 keeps the decomposed GELU */
    s = compare_levels(build_gemm, 1, 1e-6);
    if (s) {
        CHECK_EQ_INT(count_op(s, "", "Erf"), 1);
        kiln_session_destroy(s);
    }
}

/* ------------------------------------------------------------------ BatchNormalization */

static int bn_case;

/* 0: Conv + BN; 1: MatMul [4,5]x[5,6] + BN (rank 2: folds); 2: MatMul [2,3,5]x[5,6] + BN on the
 * rank-3 result (channel axis 1 is 3, not the weights' 6: must not fold); 3: ConvTranspose group 2
 * + BN; 4: Gemm transB + BN. */
static kn_model *build_bn(void) {
    tmb b;
    tmb_init_onnx(&b, 15);
    int y, ch;
    if (bn_case == 0) {
        int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){1, 3, 5, 5}, NULL);
        int w = tmb_const_range(&b, "w", KILN_DTYPE_FLOAT, 4, (int64_t[]){4, 3, 3, 3}, -1, 1);
        y = tmb_op(&b, "Conv", (int[]){x, w}, 2, "conv");
        ch = 4;
    } else if (bn_case == 3) {
        int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){1, 4, 3, 3}, NULL);
        int w = tmb_const_range(&b, "w", KILN_DTYPE_FLOAT, 4, (int64_t[]){4, 3, 2, 2}, -1, 1);
        int bias = tmb_const_range(&b, "wb", KILN_DTYPE_FLOAT, 1, (int64_t[]){6}, -1, 1);
        y = tmb_op(&b, "ConvTranspose", (int[]){x, w, bias}, 3, "convt");
        tmb_op_int(&b, "group", 2);
        ch = 6;
    } else if (bn_case == 4) {
        int a = tmb_input(&b, "a", KILN_DTYPE_FLOAT, 2, (int64_t[]){4, 5}, NULL);
        int w = tmb_const_range(&b, "w", KILN_DTYPE_FLOAT, 2, (int64_t[]){6, 5}, -1, 1);
        int c = tmb_const_range(&b, "c", KILN_DTYPE_FLOAT, 1, (int64_t[]){6}, -1, 1);
        y = tmb_op(&b, "Gemm", (int[]){a, w, c}, 3, "gemm");
        tmb_op_int(&b, "transB", 1);
        tmb_op_float(&b, "beta", 0.5f);
        ch = 6;
    } else {
        bool three = bn_case == 2;
        int64_t d3[] = {2, 3, 5}, d2[] = {4, 5};
        int a = tmb_input(&b, "a", KILN_DTYPE_FLOAT, three ? 3 : 2, three ? d3 : d2, NULL);
        int w = tmb_const_range(&b, "w", KILN_DTYPE_FLOAT, 2, (int64_t[]){5, 6}, -1, 1);
        y = tmb_op(&b, "MatMul", (int[]){a, w}, 2, "mm");
        ch = three ? 3 : 6;
    }
    int64_t cd[] = {ch};
    int sc = tmb_const_range(&b, "scale", KILN_DTYPE_FLOAT, 1, cd, 0.5f, 1.5f);
    int bi = tmb_const_range(&b, "bnb", KILN_DTYPE_FLOAT, 1, cd, -1, 1);
    int mean = tmb_const_range(&b, "mean", KILN_DTYPE_FLOAT, 1, cd, -1, 1);
    int var = tmb_const_range(&b, "var", KILN_DTYPE_FLOAT, 1, cd, 0.5f, 2.0f);
    y = tmb_op(&b, "BatchNormalization", (int[]){y, sc, bi, mean, var}, 5, "bn");
    tmb_op_float(&b, "epsilon", 1e-3f);
    tmb_output(&b, y);
    return b.m;
}

KN_TEST(opt_fold_batchnorm) {
    int cases[] = {0, 1, 3, 4};
    for (int k = 0; k < 4; k++) {
        bn_case = cases[k];
        kiln_session *s = compare_levels(build_bn, 1, 1e-5);
        if (!s) continue;
        CHECK_MSG(count_op(s, "", "BatchNormalization") == 0, "case %d: BN not folded", bn_case);
        CHECK_EQ_INT(live_nodes(s), 1);
        kiln_session_destroy(s);
    }
}

/* Regression: MatMul + BatchNorm on a rank-3 result: BN's channel (axis 1) is not the weights'
 * output column, so nothing may be folded. */
KN_TEST(opt_regression_matmul_batchnorm_rank3_not_folded) {
    bn_case = 2;
    kiln_session *s = compare_levels(build_bn, 3, 1e-5);
    if (!s) return;
    CHECK_EQ_INT(count_op(s, "", "BatchNormalization"), 1);
    CHECK_EQ_INT(count_op(s, "", "MatMul"), 1);
    kiln_session_destroy(s);
}

/* ------------------------------------------------------------------ LayerNorm, RMSNorm */


/* Decomposed LayerNorm of x [2,3,8] over the last axis with scale and bias of shape:
 * 0: [8] (fits); 1: scale [3,8] (varies over axis -2: must not be taken as the LN scale);
 * 2: RMSNorm with scale [8]; 3: LayerNorm over the last two axes with scale [3,8]. */
static kn_model *build_ln(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, (int64_t[]){2, 3, 8}, NULL);
    if (anonymous_dims) b.g->values[x].type.dims[1] = (kn_dim){-1, NULL};
    int eps = tmb_scalar(&b, "eps", KILN_DTYPE_FLOAT, 1e-5), two = tmb_scalar(&b, "two", KILN_DTYPE_FLOAT, 2.0);
    int64_t axes1[] = {-1}, axes2[] = {-2, -1};
    bool two_axes = ln_case == 3;
    int y;
    if (ln_case == 2) {
        int sq = tmb_op(&b, "Mul", (int[]){x, x}, 2, "sq");
        int ms = tmb_op(&b, "ReduceMean", &sq, 1, "ms");
        tmb_op_ints(&b, "axes", axes1, 1);
        int e = tmb_op(&b, "Add", (int[]){ms, eps}, 2, "e");
        int r = tmb_op(&b, "Sqrt", &e, 1, "r");
        y = tmb_op(&b, "Div", (int[]){x, r}, 2, "n");
        int sc = tmb_const_range(&b, "scale", KILN_DTYPE_FLOAT, 1, (int64_t[]){8}, 0.5f, 1.5f);
        y = tmb_op(&b, "Mul", (int[]){sc, y}, 2, "y");
    } else {
        int m = tmb_op(&b, "ReduceMean", &x, 1, "mean");
        tmb_op_ints(&b, "axes", two_axes ? axes2 : axes1, two_axes ? 2 : 1);
        int d = tmb_op(&b, "Sub", (int[]){x, m}, 2, "d");
        int p = tmb_op(&b, "Pow", (int[]){d, two}, 2, "p");
        int v = tmb_op(&b, "ReduceMean", &p, 1, "var");
        tmb_op_ints(&b, "axes", two_axes ? axes2 : axes1, two_axes ? 2 : 1);
        int e = tmb_op(&b, "Add", (int[]){v, eps}, 2, "e");
        int r = tmb_op(&b, "Sqrt", &e, 1, "r");
        y = tmb_op(&b, "Div", (int[]){d, r}, 2, "n");
        int64_t s1[] = {8}, s2[] = {3, 8};
        bool wide = ln_case == 1 || ln_case == 3;
        int sc = tmb_const_range(&b, "scale", KILN_DTYPE_FLOAT, wide ? 2 : 1, wide ? s2 : s1, 0.5f, 1.5f);
        int bi = ln_case == 3 ? tmb_const_range(&b, "bias", KILN_DTYPE_FLOAT, 2, s2, -1, 1)
                              : tmb_const_range(&b, "bias", KILN_DTYPE_FLOAT, 1, (int64_t[]){8}, -1, 1);
        y = tmb_op(&b, "Mul", (int[]){y, sc}, 2, "scaled");
        y = tmb_op(&b, "Add", (int[]){bi, y}, 2, "y");
    }
    tmb_output(&b, y);
    return b.m;
}

KN_TEST(opt_layernorm_fusions) {
    ln_case = 0;
    kiln_session *s = compare_levels(build_ln, 2, 1e-5);
    if (s) {
        CHECK_EQ_INT(count_op(s, "kiln", "LayerNormalization"), 1);
        CHECK_EQ_INT(live_nodes(s), 1);
        kiln_session_destroy(s);
    }
    ln_case = 2;
    s = compare_levels(build_ln, 2, 1e-5);
    if (s) {
        CHECK_EQ_INT(count_op(s, "kiln", "RMSNormalization"), 1);
        CHECK_EQ_INT(live_nodes(s), 1);
        kiln_session_destroy(s);
    }
    ln_case = 3; /* two normalised axes, scale [3, 8] fits them */
    s = compare_levels(build_ln, 2, 1e-5);
    if (s) {
        CHECK_EQ_INT(count_op(s, "kiln", "LayerNormalization"), 1);
        CHECK_EQ_INT(live_nodes(s), 1);
        kiln_session_destroy(s);
    }
}

/* Regression: a scale [3, 8] over a LayerNorm of the last axis only is not a LayerNorm scale:
 * the normalisation may fuse, the Mul (and the Add after it) must stay (elementwise chains off,
 * which would take them into one node). */
KN_TEST(opt_regression_layernorm_scale_not_trailing) {
    ln_case = 1;
    kiln_session *s = compare_levels_without(build_ln, 3, 1e-5, "fuse_elementwise");
    if (!s) return;
    CHECK_EQ_INT(count_op(s, "", "Mul"), 1);
    CHECK_EQ_INT(count_op(s, "", "Add"), 1);
    const kn_graph *g = s->model->graph;
    for (int i = 0; i < g->n_nodes; i++) {
        if (strcmp(g->nodes[i].op_type, "LayerNormalization")) continue;
        int given = 0;
        for (int k = 0; k < g->nodes[i].n_inputs; k++) given += g->nodes[i].inputs[k] >= 0;
        CHECK_EQ_INT(given, 1); /* no scale, no bias */
    }
    kiln_session_destroy(s);
}

/* ------------------------------------------------------------------ attention */

static int attn_case;
static int64_t attn_heads = 2, attn_len = 5, attn_dim = 4;

/* Q [2,H,S,D], K [2,H,S,D] (H, S, D: attn_heads, attn_len, attn_dim; 2, 5, 4 unless a test sets
 * them) -> Transpose to KT, both scaled by 0.7, MatMul, + mask, Softmax, optional IsNaN guard,
 * MatMul V. 0: float mask [2,1,1,S] with key 3 masked out; 1: no mask, post-scale Div; 2: guard,
 * and every key of batch 1 masked out (rows of NaN, made 0). */
static kn_model *build_attention(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int64_t qd[] = {2, attn_heads, attn_len, attn_dim};
    int q = tmb_input(&b, "q", KILN_DTYPE_FLOAT, 4, qd, NULL);
    int k = tmb_input(&b, "k", KILN_DTYPE_FLOAT, 4, qd, NULL);
    int v = tmb_input(&b, "v", KILN_DTYPE_FLOAT, 4, qd, NULL);
    int kt = tmb_op(&b, "Transpose", &k, 1, "kt");
    tmb_op_ints(&b, "perm", (int64_t[]){0, 1, 3, 2}, 4);
    int c = tmb_scalar(&b, "c", KILN_DTYPE_FLOAT, 0.7);
    int qs = tmb_op(&b, "Mul", (int[]){q, c}, 2, "qs");
    int ks = tmb_op(&b, "Mul", (int[]){c, kt}, 2, "ks");
    int s = tmb_op(&b, "MatMul", (int[]){qs, ks}, 2, "s");
    if (attn_case == 1) {
        int d = tmb_scalar(&b, "d", KILN_DTYPE_FLOAT, 2.0);
        s = tmb_op(&b, "Div", (int[]){s, d}, 2, "sd");
    } else {
        kn_tensor *m = NULL;
        kn_tensor_new(KILN_DTYPE_FLOAT, 4, (int64_t[]){2, 1, 1, attn_len}, &m);
        float *p = m->data;
        for (int64_t i = 0; i < 2 * attn_len; i++)
            p[i] = i == 3 ? -INFINITY : (i >= attn_len && attn_case == 2 ? -INFINITY : 0.0f);
        kn_model_own_tensor(b.m, m);
        int mv = kn_graph_add_value(b.g, "mask");
        b.g->values[mv].constant = m;
        kn_type_set_tensor(&b.g->values[mv].type, KILN_DTYPE_FLOAT, 4, (int64_t[]){2, 1, 1, attn_len});
        s = tmb_op(&b, "Add", (int[]){s, mv}, 2, "sm");
    }
    int p = tmb_op(&b, "Softmax", &s, 1, "p");
    tmb_op_int(&b, "axis", -1);
    if (attn_case == 2) {
        int isn = tmb_op(&b, "IsNaN", &p, 1, "isnan");
        int zero = tmb_scalar(&b, "zero", KILN_DTYPE_FLOAT, 0.0);
        p = tmb_op(&b, "Where", (int[]){isn, zero, p}, 3, "p2");
    }
    int y = tmb_op(&b, "MatMul", (int[]){p, v}, 2, "y");
    tmb_output(&b, y);
    return b.m;
}

KN_TEST(opt_attention_matches_unfused) {
    for (attn_case = 0; attn_case < 3; attn_case++) {
        kiln_session *s = compare_levels(build_attention, 2, 1e-5);
        if (!s) continue;
        CHECK_MSG(count_op(s, "kiln", "Attention") == 1, "case %d: %d Attention nodes", attn_case,
                  count_op(s, "kiln", "Attention"));
        CHECK_EQ_INT(count_op(s, "", "Softmax"), 0);
        kiln_session_destroy(s);
    }
}

/* Long rows: 650 keys take 7 row blocks per (batch, head) in the CPU kernel, whose tasks pack KT
 * and V once for the blocks of an entry they run (a task's range may end one block into an entry,
 * which then goes unpacked) and take the Softmax operator's row kernel; against the unfused graph
 * at level 0, with each mask form. */
KN_TEST(opt_attention_long_rows_matches_unfused) {
    attn_heads = 3, attn_len = 650, attn_dim = 16;
    for (attn_case = 0; attn_case < 3; attn_case++) {
        kiln_session *s = compare_levels(build_attention, 2, 1e-5);
        if (!s) continue;
        CHECK_MSG(count_op(s, "kiln", "Attention") == 1, "case %d: %d Attention nodes", attn_case,
                  count_op(s, "kiln", "Attention"));
        kiln_session_destroy(s);
    }
    attn_heads = 2, attn_len = 5, attn_dim = 4;
}

/* ------------------------------------------------------------------ GELU (tanh form) */

/* 0.5 x (1 + tanh(k2 (x + k1 x^3))): GELU's tanh form when k1 = 0.044715 */
static kn_model *build_tanh_gelu_with(double cubic) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){3, 7}, NULL);
    int half = tmb_scalar(&b, "half", KILN_DTYPE_FLOAT, 0.5), three = tmb_scalar(&b, "three", KILN_DTYPE_FLOAT, 3.0);
    int k1 = tmb_scalar(&b, "k1", KILN_DTYPE_FLOAT, cubic), k2 = tmb_scalar(&b, "k2", KILN_DTYPE_FLOAT, 0.7978845608);
    int one = tmb_scalar(&b, "one", KILN_DTYPE_FLOAT, 1.0);
    int h = tmb_op(&b, "Mul", (int[]){x, half}, 2, "h");
    int c = tmb_op(&b, "Pow", (int[]){x, three}, 2, "cube");
    int c2 = tmb_op(&b, "Mul", (int[]){c, k1}, 2, "c2");
    int inner = tmb_op(&b, "Add", (int[]){x, c2}, 2, "inner");
    int u = tmb_op(&b, "Mul", (int[]){inner, k2}, 2, "u");
    int t = tmb_op(&b, "Tanh", &u, 1, "t");
    int t1 = tmb_op(&b, "Add", (int[]){t, one}, 2, "t1");
    int y = tmb_op(&b, "Mul", (int[]){h, t1}, 2, "y");
    tmb_output(&b, y);
    return b.m;
}

static kn_model *build_gelu_tanh(void) { return build_tanh_gelu_with(0.044715); }

KN_TEST(opt_gelu_tanh_form) {
    kiln_session *s = compare_levels(build_gelu_tanh, 2, 1e-5);
    if (!s) return;
    CHECK_EQ_INT(count_op(s, "kiln", "Gelu"), 1);
    CHECK_EQ_INT(live_nodes(s), 1);
    kiln_session_destroy(s);
}

/* A near-GELU that is not one (the cubic coefficient differs) stays as it is (elementwise chains
 * off: they would take it as an ordinary chain). */
static kn_model *build_not_gelu(void) { return build_tanh_gelu_with(0.1); }

KN_TEST(opt_gelu_lookalike_not_fused) {
    kiln_session *s = compare_levels_without(build_not_gelu, 3, 1e-6, "fuse_elementwise");
    if (!s) return;
    CHECK_EQ_INT(count_op(s, "kiln", "Gelu"), 0);
    CHECK_EQ_INT(count_op(s, "", "Tanh"), 1);
    kiln_session_destroy(s);
}

/* ------------------------------------------------------------------ level 1 clean-ups */

/* Identity as the graph output, a Shape of a static-shaped value feeding a Reshape, an identity
 * Transpose, a Transpose pair, duplicate Relus (CSE), an unused initializer and a dead node. */
static kn_model *build_cleanup(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, (int64_t[]){2, 3, 4}, NULL);
    tmb_const_range(&b, "unused", KILN_DTYPE_FLOAT, 1, (int64_t[]){16}, 0, 1);
    int sh = tmb_op(&b, "Shape", &x, 1, "shape");
    int r = tmb_op(&b, "Reshape", (int[]){x, sh}, 2, "r");
    int t1 = tmb_op(&b, "Transpose", &r, 1, "t1");
    tmb_op_ints(&b, "perm", (int64_t[]){0, 2, 1}, 3);
    int t2 = tmb_op(&b, "Transpose", &t1, 1, "t2");
    tmb_op_ints(&b, "perm", (int64_t[]){0, 2, 1}, 3);
    int a = tmb_op(&b, "Relu", &t2, 1, "a");
    int a2 = tmb_op(&b, "Relu", &t2, 1, "a2");
    int s = tmb_op(&b, "Add", (int[]){a, a2}, 2, "s");
    tmb_op(&b, "Neg", &s, 1, "dead");
    int id = tmb_op(&b, "Identity", &s, 1, "out");
    tmb_output(&b, id);
    int id2 = tmb_op(&b, "Identity", &id, 1, "out2"); /* a second graph output reading the first */
    tmb_output(&b, id2);
    return b.m;
}

KN_TEST(opt_level1_cleanups_keep_output_names) {
    kiln_session *s = compare_levels(build_cleanup, 1, 0);
    if (!s) return;
    CHECK_EQ_INT(count_op(s, "", "Shape"), 0);
    CHECK_EQ_INT(count_op(s, "", "Reshape"), 0);
    CHECK_EQ_INT(count_op(s, "", "Transpose"), 0);
    CHECK_EQ_INT(count_op(s, "", "Relu"), 1);
    CHECK_EQ_INT(count_op(s, "", "Neg"), 0);
    CHECK_EQ_INT(count_op(s, "", "Identity"), 1); /* out2 = Identity(out): both names must stay */
    kiln_value_info info;
    CHECK_STATUS(kiln_session_output_info(s, 0, &info), KILN_OK);
    CHECK(!strcmp(info.name, "out"));
    CHECK_STATUS(kiln_session_output_info(s, 1, &info), KILN_OK);
    CHECK(!strcmp(info.name, "out2"));
    const kn_graph *g = s->model->graph;
    for (int v = 0; v < g->n_values; v++)
        if (!strcmp(g->values[v].name, "unused")) CHECK(g->values[v].constant == NULL);
    kiln_session_destroy(s);
}

/* ------------------------------------------------------------------ the pass manager and the dump */

typedef struct report_log {
    int calls, last_after;
    char passes[512];
} report_log;

static void on_report(void *arg, const char *pass, int level, int before, int after, const char *detail) {
    report_log *l = arg;
    l->calls++;
    l->last_after = after;
    size_t n = strlen(l->passes);
    snprintf(l->passes + n, sizeof l->passes - n, "%s%s", n ? "," : "", pass);
    CHECK(before >= after || !strcmp(pass, "fold_constants") || level >= 1);
    CHECK(detail != NULL);
}

KN_TEST(opt_report_and_dump_round_trip) {
    conv_act = 2, conv_residual = 1, conv_group = 1, conv_dtype = KILN_DTYPE_FLOAT;
    kn_model *m = build_conv();
    CHECK_STATUS(kn_graph_sort(m->graph), KILN_OK);
    CHECK_STATUS(kn_graph_resolve(m->graph), KILN_OK);
    CHECK_STATUS(kn_graph_infer(m->graph), KILN_OK);
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    report_log log = {0, 0, ""};
    CHECK_STATUS(kn_optimize(m, o, on_report, &log), KILN_OK);
    CHECK(strstr(log.passes, "fuse_conv") != NULL);
    CHECK_EQ_INT(log.last_after, 1);
    /* the optimised model written as ONNX and read back runs like the original */
    unsigned char *data = NULL;
    size_t size = 0;
    CHECK_STATUS(kn_onnx_write_memory(m, &data, &size), KILN_OK);
    kn_model *back = NULL;
    CHECK_STATUS(kn_onnx_load_memory(data, size, NULL, &back), KILN_OK);
    free(data);
    kn_model_free(m);
    if (!back) {
        kiln_session_options_destroy(o);
        return;
    }
    CHECK_EQ_INT(kn_model_opset(back, "kiln"), 1);
    kiln_session_options_set_opt_level(o, 0);
    kiln_session *loaded = NULL;
    CHECK_STATUS(kn_session_from_model(back, o, &loaded), KILN_OK);
    kiln_session *ref = make_session(build_conv(), 0, NULL);
    if (loaded && ref) {
        CHECK_EQ_INT(count_op(loaded, "kiln", "FusedConv"), 1);
        check_same(ref, loaded, 1e-5);
    }
    kiln_session_destroy(loaded);
    kiln_session_destroy(ref);
    kiln_session_options_destroy(o);
}

/* ------------------------------------------------------------------ target awareness */

/* The fused nodes form for the provider that would run the pattern, asked of the kernel tables
 * (kn_backend_supports): these run without a GPU, as kiln inspect --provider cuda,cpu does. */

static kiln_session_options *options_with(const char *first, const char *second, int level) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, level);
    CHECK_STATUS(kiln_session_options_append_provider(o, first, NULL, NULL, 0), KILN_OK);
    if (second) CHECK_STATUS(kiln_session_options_append_provider(o, second, NULL, NULL, 0), KILN_OK);
    return o;
}

/* The model built, typed, optimised for `o` judging providers from their tables. */
static kn_model *optimised_from_tables(build_fn build, const kiln_session_options *o) {
    kn_model *m = build();
    CHECK_STATUS(kn_graph_sort(m->graph), KILN_OK);
    CHECK_STATUS(kn_graph_resolve(m->graph), KILN_OK);
    CHECK_STATUS(kn_graph_infer(m->graph), KILN_OK);
    CHECK_STATUS(kn_optimize_from_tables(m, o, NULL, NULL), KILN_OK);
    CHECK_STATUS(kn_graph_sort(m->graph), KILN_OK);
    CHECK_STATUS(kn_graph_infer(m->graph), KILN_OK);
    return m;
}

static int model_count_op(const kn_model *m, const char *domain, const char *op) {
    int n = 0;
    for (int i = 0; i < m->graph->n_nodes; i++) {
        const kn_node *nd = &m->graph->nodes[i];
        if (!nd->dead && !strcmp(nd->domain, domain) && !strcmp(nd->op_type, op)) n++;
    }
    return n;
}

/* The provider placement gives the (single) op node of m with providers cuda,cpu from the tables
 * (what tools/placement.c does), or NULL. */
static const char *placed_on(kn_model *m, const char *domain, const char *op) {
    kn_runtime rt;
    memset(&rt, 0, sizeof rt);
    rt.backends[0].ops = kn_backend_find("cuda");
    rt.backends[0].listed = true;
    rt.backends[1].ops = &kn_backend_cpu;
    rt.backends[1].listed = true;
    rt.cpu = 1;
    rt.n_backends = 2;
    if (kn_graph_place(m->graph, &rt, NULL, NULL) != KILN_OK) return NULL;
    for (int i = 0; i < m->graph->n_nodes; i++) {
        const kn_node *nd = &m->graph->nodes[i];
        if (!nd->dead && !strcmp(nd->domain, domain) && !strcmp(nd->op_type, op) && nd->provider >= 0)
            return rt.backends[nd->provider].ops->name;
    }
    return NULL;
}

KN_TEST(opt_target_cuda_fusions_form_from_tables) {
    if (!kn_backend_find("cuda")) KN_SKIP("no CUDA backend in this build");
    kiln_session_options *o = options_with("cuda", "cpu", 3);
    /* MatMul + Add + residual + Tanh: FusedMatMul, placed on CUDA */
    gemm_case = 2;
    kn_model *m = optimised_from_tables(build_gemm, o);
    CHECK_EQ_INT(model_count_op(m, "kiln", "FusedMatMul"), 1);
    const char *where = placed_on(m, "kiln", "FusedMatMul");
    CHECK_MSG(where && !strcmp(where, "cuda"), "FusedMatMul placed on %s", where ? where : "nothing");
    kn_model_free(m);
    /* Conv + Relu in float16: the CPU has no float16 fused kernels, CUDA has (with cuDNN); the
     * pattern runs on CUDA, so the fusion forms there */
    char why[256] = "";
    conv_act = 1, conv_residual = 0, conv_group = 1, conv_dtype = KILN_DTYPE_FLOAT16;
    kn_model *probe = build_conv();
    CHECK_STATUS(kn_graph_sort(probe->graph), KILN_OK);
    CHECK_STATUS(kn_graph_infer(probe->graph), KILN_OK);
    const kn_node *conv = &probe->graph->nodes[0];
    const kn_type *in[3] = {&probe->graph->values[conv->inputs[0]].type, &probe->graph->values[conv->inputs[1]].type,
                            &probe->graph->values[conv->inputs[2]].type};
    bool cuda_conv = kn_backend_supports("cuda", conv, in, 3, why, sizeof why);
    kn_model_free(probe);
    if (cuda_conv) {
        m = optimised_from_tables(build_conv, o);
        CHECK_EQ_INT(model_count_op(m, "kiln", "FusedConv"), 1);
        CHECK_EQ_INT(model_count_op(m, "", "Relu"), 0);
        where = placed_on(m, "kiln", "FusedConv");
        CHECK_MSG(where && !strcmp(where, "cuda"), "FusedConv placed on %s", where ? where : "nothing");
        kn_model_free(m);
    } else {
        kn_log(KILN_LOG_INFO, "float16 FusedConv part not run: the CUDA Conv is not available (%s)", why);
    }
    kiln_session_options_destroy(o);
    /* in a session the runtime skips a provider with no device: the fusions are the CPU's */
    if (!kiln_provider_available("cuda", NULL)) {
        o = options_with("cuda", "cpu", 3);
        m = build_conv();
        CHECK_STATUS(kn_graph_sort(m->graph), KILN_OK);
        CHECK_STATUS(kn_graph_infer(m->graph), KILN_OK);
        CHECK_STATUS(kn_optimize(m, o, NULL, NULL), KILN_OK);
        CHECK_EQ_INT(model_count_op(m, "kiln", "FusedConv"), 0); /* float16: not on the CPU */
        kn_model_free(m);
        kiln_session_options_destroy(o);
    }
    conv_dtype = KILN_DTYPE_FLOAT;
}

/* A fusion the pattern's provider cannot run is refused with the reason, even when a later
 * provider could run it: it would move the work away from where the user's order puts it. */
KN_TEST(opt_target_refuses_fusion_the_pattern_provider_lacks) {
    if (!kn_backend_find("cuda")) KN_SKIP("no CUDA backend in this build");
    /* cpu first: a float16 Conv + Relu runs on the CPU, which has no float16 FusedConv (with
     * raise_float16 off: it would run the pair in float32, fused) */
    kiln_session_options *o = options_with("cpu", "cuda", 3);
    kiln_session_options_disable_pass(o, "raise_float16");
    conv_act = 1, conv_residual = 0, conv_group = 1, conv_dtype = KILN_DTYPE_FLOAT16;
    kn_model *m = optimised_from_tables(build_conv, o);
    CHECK_EQ_INT(model_count_op(m, "kiln", "FusedConv"), 0);
    CHECK_EQ_INT(model_count_op(m, "", "Conv"), 1);
    CHECK_EQ_INT(model_count_op(m, "", "Relu"), 1);
    kn_model_free(m);
    conv_dtype = KILN_DTYPE_FLOAT;
    kiln_session_options_destroy(o);

    /* cuda first, asked directly: the anchor is a float32 2-D Conv, which the CUDA tables take
     * (with cuDNN), and the fused node is a FusedConv over 4 spatial dims, which CUDA's supports
     * rejects and the CPU's takes: refused, naming CUDA and its reason */
    conv_act = 0, conv_residual = 0, conv_group = 1;
    m = build_conv();
    CHECK_STATUS(kn_graph_sort(m->graph), KILN_OK);
    CHECK_STATUS(kn_graph_infer(m->graph), KILN_OK);
    kn_graph *g = m->graph;
    const kn_node *conv = &g->nodes[0];
    const kn_type *cin[3] = {&g->values[conv->inputs[0]].type, &g->values[conv->inputs[1]].type,
                             &g->values[conv->inputs[2]].type};
    char why[512] = "";
    if (!kn_backend_supports("cuda", conv, cin, 3, why, sizeof why)) {
        kn_model_free(m);
        KN_SKIP("the CUDA Conv is not available in this build (no cuDNN)");
    }
    kn_type x6, w6, b1;
    kn_type_set_tensor(&x6, KILN_DTYPE_FLOAT, 6, (int64_t[]){1, 4, 3, 3, 3, 3});
    kn_type_set_tensor(&w6, KILN_DTYPE_FLOAT, 6, (int64_t[]){4, 4, 1, 1, 1, 1});
    kn_type_set_tensor(&b1, KILN_DTYPE_FLOAT, 1, (int64_t[]){4});
    const kn_type *fin[3] = {&x6, &w6, &b1};
    kn_attr act = {.name = "activation", .type = KN_ATTR_STRING, .s = "Relu", .s_len = 4};
    kn_node fused;
    memset(&fused, 0, sizeof fused);
    fused.name = "fused";
    fused.domain = "kiln";
    fused.op_type = "FusedConv";
    fused.opset = 1;
    fused.inputs = (int[]){-1, -1, -1};
    fused.n_inputs = 3;
    fused.attrs = &act;
    fused.n_attrs = 1;
    fused.provider = -1;
    CHECK(kn_backend_supports("cpu", &fused, fin, 3, why, sizeof why));
    o = options_with("cuda", "cpu", 3);
    kn_opt_ctx c;
    memset(&c, 0, sizeof c);
    c.model = m;
    c.g = g;
    c.options = o;
    c.providers_from_tables = true;
    why[0] = 0;
    CHECK(!kn_opt_target_supports(&c, &fused, fin, 3, 0, why, sizeof why));
    CHECK_MSG(strstr(why, "'cuda' would run the pattern") && strstr(why, "spatial dims"), "reason: %s", why);
    /* without an anchor the first provider is the pattern's: the same answer */
    CHECK(!kn_opt_target_supports(&c, &fused, fin, 3, -1, why, sizeof why));
    /* with cpu first the CPU runs the pattern and has the kernel: formed */
    kiln_session_options_destroy(o);
    o = options_with("cpu", "cuda", 3);
    c.options = o;
    CHECK_MSG(kn_opt_target_supports(&c, &fused, fin, 3, 0, why, sizeof why), "refused: %s", why);
    kiln_session_options_destroy(o);
    kn_model_free(m);
}

/* activation_bounds is applied by the CPU's fused kernels only: with cuda,cpu a float32 Conv +
 * LeakyRelu runs on CUDA (its tables take it), so the FusedConv forms there without the clamp and
 * the Max stays a node; with cpu,cuda the CPU runs it, clamp folded. */
KN_TEST(opt_target_clamp_fold_cpu_only) {
    if (!kn_backend_find("cuda")) KN_SKIP("no CUDA backend in this build");
    clamp_case = 0;
    kiln_session_options *o = options_with("cuda", "cpu", 3);
    kn_model *m = optimised_from_tables(build_clamp, o);
    const char *where = placed_on(m, "kiln", "FusedConv");
    if (where && !strcmp(where, "cuda")) {
        CHECK_EQ_INT(model_count_op(m, "", "Max"), 1);
        for (int i = 0; i < m->graph->n_nodes; i++)
            if (!m->graph->nodes[i].dead) CHECK(!kn_node_attr(&m->graph->nodes[i], "activation_bounds"));
    } else {
        CHECK_MSG(0, "the float32 FusedConv is placed on %s with cuda,cpu", where ? where : "nothing");
    }
    kn_model_free(m);
    kiln_session_options_destroy(o);
    o = options_with("cpu", "cuda", 3);
    m = optimised_from_tables(build_clamp, o);
    CHECK_EQ_INT(model_count_op(m, "", "Max"), 0);
    CHECK_EQ_INT(model_count_op(m, "kiln", "FusedConv"), 1);
    kn_model_free(m);
    kiln_session_options_destroy(o);
}

/* On a machine with a GPU: the fusions formed for cuda,cpu run there and agree with level 0
 * (float32 and float16 Conv + residual + activation, MatMul + bias + residual + Tanh). */
static kiln_session *cuda_session(kn_model *m, int level) {
    kiln_session_options *o = options_with("cuda", "cpu", level);
    kiln_session_options_set_intra_op_threads(o, 1);
    kiln_session *s = NULL;
    CHECK_STATUS(kn_graph_sort(m->graph), KILN_OK);
    kiln_status st = kn_session_from_model(m, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "cuda,cpu session at level %d: %s", level, kiln_last_error());
    return s;
}

KN_TEST(opt_cuda_fusions_match_unfused_on_device) {
    const char *why = NULL;
    if (!kiln_provider_available("cuda", &why)) KN_SKIP(why ? why : "no CUDA device");
    for (int t = 0; t < 2; t++) {
        conv_act = 2, conv_residual = 1, conv_group = 1;
        conv_dtype = t ? KILN_DTYPE_FLOAT16 : KILN_DTYPE_FLOAT;
        kiln_session *ref = cuda_session(build_conv(), 0), *opt = cuda_session(build_conv(), 3);
        if (ref && opt) {
            check_same(ref, opt, t ? 1e-2 : 1e-5);
            CHECK_MSG(count_op(opt, "kiln", "FusedConv") == 1, "%s: %d FusedConv", t ? "float16" : "float32",
                      count_op(opt, "kiln", "FusedConv"));
        }
        kiln_session_destroy(ref);
        kiln_session_destroy(opt);
    }
    conv_dtype = KILN_DTYPE_FLOAT;
    gemm_case = 2;
    kiln_session *ref = cuda_session(build_gemm(), 0), *opt = cuda_session(build_gemm(), 3);
    if (ref && opt) {
        check_same(ref, opt, 1e-5);
        CHECK_EQ_INT(count_op(opt, "kiln", "FusedMatMul"), 1);
    }
    kiln_session_destroy(ref);
    kiln_session_destroy(opt);
}

/* ------------------------------------------------------------------ elementwise chains */

static kiln_dtype chain_dtype = KILN_DTYPE_FLOAT;

/* x [2,3,4,5], z [5] (broadcast), bias [3,1,1] (constant, broadcast):
 *   t0 = x + bias; t3 = t0 * tanh(softplus(t0))      (t0 read twice; t3 also read by Relu)
 *   out = sqrt(|clip(t3 * 0.5, -0.2, 0.7) - z|)      out2 = relu(t3)
 * Two chains form: t0..t3 (ending where t3 has a reader outside) and t4..out; Relu stays. */
static kn_model *build_chain(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    kiln_dtype dt = chain_dtype;
    int x = tmb_input(&b, "x", dt, 4, (int64_t[]){2, 3, 4, 5}, NULL);
    int z = tmb_input(&b, "z", dt, 1, (int64_t[]){5}, NULL);
    int bias = tmb_const_range(&b, "bias", dt, 3, (int64_t[]){3, 1, 1}, -1, 1);
    int half = tmb_scalar(&b, "half", dt, 0.5), lo = tmb_scalar(&b, "lo", dt, -0.2), hi = tmb_scalar(&b, "hi", dt, 0.7);
    int t0 = tmb_op(&b, "Add", (int[]){x, bias}, 2, "t0");
    int t1 = tmb_op(&b, "Softplus", (int[]){t0}, 1, "t1");
    int t2 = tmb_op(&b, "Tanh", (int[]){t1}, 1, "t2");
    int t3 = tmb_op(&b, "Mul", (int[]){t0, t2}, 2, "t3");
    int t4 = tmb_op(&b, "Mul", (int[]){t3, half}, 2, "t4");
    int t5 = tmb_op(&b, "Clip", (int[]){t4, lo, hi}, 3, "t5");
    int t6 = tmb_op(&b, "Sub", (int[]){t5, z}, 2, "t6");
    int t7 = tmb_op(&b, "Abs", (int[]){t6}, 1, "t7");
    tmb_output(&b, tmb_op(&b, "Sqrt", (int[]){t7}, 1, "out"));
    tmb_output(&b, tmb_op(&b, "Relu", (int[]){t3}, 1, "out2"));
    return b.m;
}

KN_TEST(opt_elementwise_chain_matches_unfused) {
    chain_dtype = KILN_DTYPE_FLOAT;
    kiln_session *s = compare_levels(build_chain, 2, 1e-6);
    if (!s) return;
    CHECK_EQ_INT(count_op(s, "kiln", "FusedElementwise"), 2);
    CHECK_EQ_INT(count_op(s, "", "Relu"), 1);
    CHECK_EQ_INT(live_nodes(s), 3);
    /* the scalar constants became registers: the second chain reads t3 and z only */
    const kn_graph *g = s->model->graph;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead || strcmp(n->op_type, "FusedElementwise")) continue;
        int nc = 0;
        kn_attr_floats(n, "constants", &nc);
        if (!strcmp(g->values[n->outputs[0]].name, "out")) {
            CHECK_EQ_INT(n->n_inputs, 2);
            CHECK_EQ_INT(nc, 1); /* 0.5; Clip's bounds are the step's parameters */
        } else {
            CHECK_EQ_INT(n->n_inputs, 2); /* x and the [3,1,1] bias */
            CHECK_EQ_INT(nc, 0);
        }
    }
    kiln_session_destroy(s);
    /* disabled by name: nothing fused */
    kiln_session *plain = make_session(build_chain(), 2, "fuse_elementwise");
    if (plain) CHECK_EQ_INT(count_op(plain, "kiln", "FusedElementwise"), 0);
    kiln_session_destroy(plain);
}

/* A one-element constant of higher rank than the rest widens the output ([4] * [1,1] is
 * [1,4]): it must stay an input of the fused node, not become a register. */
static kn_model *build_chain_rank(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 1, (int64_t[]){4}, NULL);
    int c = tmb_const_range(&b, "c", KILN_DTYPE_FLOAT, 2, (int64_t[]){1, 1}, 2, 3);
    int t = tmb_op(&b, "Mul", (int[]){x, c}, 2, "t");
    tmb_output(&b, tmb_op(&b, "Sigmoid", (int[]){t}, 1, "y"));
    return b.m;
}

KN_TEST(opt_elementwise_chain_keeps_broadcast_rank) {
    kiln_session *s = compare_levels(build_chain_rank, 2, 1e-6);
    if (!s) return;
    CHECK_EQ_INT(count_op(s, "kiln", "FusedElementwise"), 1);
    const kn_graph *g = s->model->graph;
    const kn_type *y = &g->values[g->outputs[0]].type;
    CHECK_EQ_INT(y->rank, 2);
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead) CHECK_EQ_INT(g->nodes[i].n_inputs, 2);
    kiln_session_destroy(s);
}

/* Inputs broadcast along different dims ([3,1,5], [1,4,1], [5] against [2,3,4,5]): the CPU kernel
 * walks each across blocks that end mid-row, with a run of one element for [1,4,1]. */
static kn_model *build_chain_broadcasts(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){2, 3, 4, 5}, NULL);
    int p = tmb_input(&b, "p", KILN_DTYPE_FLOAT, 3, (int64_t[]){3, 1, 5}, NULL);
    int q = tmb_input(&b, "q", KILN_DTYPE_FLOAT, 3, (int64_t[]){1, 4, 1}, NULL);
    int r = tmb_const_range(&b, "r", KILN_DTYPE_FLOAT, 1, (int64_t[]){5}, -1, 1);
    int t0 = tmb_op(&b, "Mul", (int[]){x, p}, 2, "t0");
    int t1 = tmb_op(&b, "Sub", (int[]){t0, q}, 2, "t1");
    int t2 = tmb_op(&b, "Add", (int[]){t1, r}, 2, "t2");
    tmb_output(&b, tmb_op(&b, "Tanh", (int[]){t2}, 1, "y"));
    return b.m;
}

/* Per-channel operands over maps longer than the kernel's block ([3,1] against [2,3,L]): a block
 * within one channel is filled once per channel; with L = 512 a channel starts exactly at a block,
 * with L = 600 blocks straddle channel ends. */
static int64_t per_channel_len;
static kn_model *build_chain_per_channel(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, (int64_t[]){2, 3, per_channel_len}, NULL);
    int sc = tmb_const_range(&b, "scale", KILN_DTYPE_FLOAT, 2, (int64_t[]){3, 1}, 0.5f, 2);
    int sh = tmb_input(&b, "shift", KILN_DTYPE_FLOAT, 2, (int64_t[]){3, 1}, NULL);
    int t0 = tmb_op(&b, "Mul", (int[]){x, sc}, 2, "t0");
    int t1 = tmb_op(&b, "Add", (int[]){t0, sh}, 2, "t1");
    tmb_output(&b, tmb_op(&b, "Relu", (int[]){t1}, 1, "y"));
    return b.m;
}

KN_TEST(opt_elementwise_chain_mixed_broadcasts) {
    build_fn builds[] = {build_chain_broadcasts, build_chain_per_channel, build_chain_per_channel};
    for (int i = 0; i < 3; i++) {
        per_channel_len = i == 1 ? 512 : 600;
        kiln_session *s = compare_levels(builds[i], 2, 1e-6);
        if (!s) continue;
        CHECK_EQ_INT(count_op(s, "kiln", "FusedElementwise"), 1);
        CHECK_EQ_INT(live_nodes(s), 1);
        kiln_session_destroy(s);
    }
}

/* x * tanh(softplus(x)) (Mish as written before opset 18) becomes one Mish step; with another
 * value in place of x it stays three steps. */
static int mish_other;
static kn_model *build_mish_decomposed(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){8, 300}, NULL);
    int w = tmb_input(&b, "w", KILN_DTYPE_FLOAT, 2, (int64_t[]){8, 300}, NULL);
    int sp = tmb_op(&b, "Softplus", (int[]){x}, 1, "sp");
    int t = tmb_op(&b, "Tanh", (int[]){sp}, 1, "t");
    tmb_output(&b, tmb_op(&b, "Mul", (int[]){t, mish_other ? w : x}, 2, "y"));
    return b.m;
}

KN_TEST(opt_elementwise_chain_folds_mish) {
    for (mish_other = 0; mish_other < 2; mish_other++) {
        kiln_session *s = compare_levels(build_mish_decomposed, 2, 2e-6);
        if (!s) continue;
        const kn_graph *g = s->model->graph;
        for (int i = 0; i < g->n_nodes; i++) {
            const kn_node *n = &g->nodes[i];
            if (n->dead || strcmp(n->op_type, "FusedElementwise")) continue;
            int np = 0;
            const int64_t *prog = kn_attr_ints(n, "program", &np);
            CHECK_EQ_INT(np, mish_other ? 9 : 3);
            if (!mish_other && np == 3) CHECK_EQ_INT(prog[0], KN_CHAIN_MISH);
        }
        CHECK_EQ_INT(count_op(s, "kiln", "FusedElementwise"), 1);
        kiln_session_destroy(s);
    }
    mish_other = 0;
}

/* Every operator a chain takes, each between two others: out = (op(x * 1.5 [+ domain shift]) + z),
 * or for binary ones out = op(x * 1.5, |z| + 0.5) + 0. */
static const struct chain_case {
    const char *op;
    int binary;
    int positive; /* the operand must be positive (log, sqrt, pow's base) */
    const char *attr;
    float a0, a1;
} chain_cases[] = {
    {"Add", 1}, {"Sub", 1}, {"Mul", 1}, {"Div", 1}, {"Pow", 1, 1}, {"Max", 1}, {"Min", 1}, {"PRelu", 1},
    {"Abs"}, {"Neg"}, {"Exp"}, {"Log", 0, 1}, {"Sqrt", 0, 1}, {"Reciprocal", 0, 1}, {"Floor"}, {"Ceil"},
    {"Erf"}, {"Tanh"}, {"Sigmoid"}, {"Relu"}, {"LeakyRelu", 0, 0, "alpha", 0.2f}, {"Elu", 0, 0, "alpha", 0.7f},
    {"Selu"}, {"HardSigmoid", 0, 0, "alpha", 0.3f}, {"HardSwish"}, {"Softplus"}, {"Softsign"}, {"Sin"}, {"Cos"},
    {"Gelu"}, {"Gelu", 0, 0, "tanh"}, {"Clip"}, {"Mish"},
};
static int chain_case_at;

static kn_model *build_chain_case(void) {
    const struct chain_case *k = &chain_cases[chain_case_at];
    tmb b;
    tmb_init_onnx(&b, 20); /* Gelu is ai.onnx from opset 20 */
    kiln_dtype dt = chain_dtype;
    int x = tmb_input(&b, "x", dt, 3, (int64_t[]){3, 4, 33}, NULL);
    int z = tmb_input(&b, "z", dt, 2, (int64_t[]){1, 33}, NULL);
    int scale = tmb_scalar(&b, "scale", dt, 1.5), shift = tmb_scalar(&b, "shift", dt, 0.5);
    int t = tmb_op(&b, "Mul", (int[]){x, scale}, 2, "t");
    if (k->positive) {
        t = tmb_op(&b, "Abs", (int[]){t}, 1, "ta");
        t = tmb_op(&b, "Add", (int[]){t, shift}, 2, "tb");
    }
    int u;
    if (k->binary) {
        int za = tmb_op(&b, "Abs", (int[]){z}, 1, "za");
        int zb = tmb_op(&b, "Add", (int[]){za, shift}, 2, "zb");
        u = tmb_op(&b, k->op, (int[]){t, zb}, 2, "u");
        tmb_output(&b, tmb_op(&b, "Mul", (int[]){u, scale}, 2, "y"));
    } else if (!strcmp(k->op, "Clip")) {
        int lo = tmb_scalar(&b, "lo", dt, -0.8), hi = tmb_scalar(&b, "hi", dt, 1.1);
        u = tmb_op(&b, "Clip", (int[]){t, lo, hi}, 3, "u");
        tmb_output(&b, tmb_op(&b, "Add", (int[]){u, z}, 2, "y"));
    } else {
        u = tmb_op(&b, k->op, (int[]){t}, 1, "u");
        if (k->attr && !strcmp(k->attr, "tanh")) {
            kn_attr *a = tmb_op_attr(&b, "approximate", KN_ATTR_STRING);
            a->s = "tanh";
            a->s_len = 4;
        } else if (k->attr) {
            tmb_op_float(&b, k->attr, k->a0);
        }
        tmb_output(&b, tmb_op(&b, "Add", (int[]){u, z}, 2, "y"));
    }
    return b.m;
}

static void every_chain_operator(kiln_session *(*session)(kn_model *m, int level), double tol) {
    for (chain_case_at = 0; chain_case_at < (int)(sizeof chain_cases / sizeof chain_cases[0]); chain_case_at++) {
        const char *op = chain_cases[chain_case_at].op;
        kiln_session *ref = session(build_chain_case(), 0), *opt = session(build_chain_case(), 3);
        if (ref && opt) {
            int failed_before = kn_unit_failures();
            check_same(ref, opt, tol);
            CHECK_MSG(count_op(opt, "kiln", "FusedElementwise") == 1 && live_nodes(opt) == 1,
                      "%s: %d FusedElementwise of %d nodes", op, count_op(opt, "kiln", "FusedElementwise"),
                      live_nodes(opt));
            CHECK_MSG(kn_unit_failures() == failed_before, "(the case above is %s, %s)", op,
                      kiln_dtype_name(chain_dtype));
        }
        kiln_session_destroy(ref);
        kiln_session_destroy(opt);
    }
}

static kiln_session *cpu_session(kn_model *m, int level) { return make_session(m, level, NULL); }

KN_TEST(opt_elementwise_chain_every_operator_cpu) {
    chain_dtype = KILN_DTYPE_FLOAT;
    every_chain_operator(cpu_session, 2e-6);
}

/* A hostile FusedElementwise: a register read before it is written, an unknown operator, too
 * many steps: rejected with the step named, never run. */
KN_TEST(opt_elementwise_chain_malformed_program_rejected) {
    kn_node n;
    memset(&n, 0, sizeof n);
    n.name = "chain";
    n.domain = "kiln";
    n.op_type = "FusedElementwise";
    kn_attr prog = {.name = "program", .type = KN_ATTR_INTS};
    n.attrs = &prog;
    n.n_attrs = 1;
    kn_chain_program p;
    char why[256];
    int64_t good[] = {KN_CHAIN_MUL, 0, 1, KN_CHAIN_SIGMOID, 2, -1};
    prog.ints = good, prog.n = 6;
    CHECK_MSG(kn_chain_from_node(&n, 2, &p, why, sizeof why), "refused: %s", why);
    CHECK_EQ_INT(p.n_steps, 2);
    int64_t ahead[] = {KN_CHAIN_MUL, 0, 2};
    prog.ints = ahead, prog.n = 3;
    CHECK(!kn_chain_from_node(&n, 2, &p, why, sizeof why) && strstr(why, "step 0"));
    int64_t unknown[] = {KN_CHAIN_ADD, 0, 1, 99, 2, -1};
    prog.ints = unknown, prog.n = 6;
    CHECK(!kn_chain_from_node(&n, 2, &p, why, sizeof why) && strstr(why, "step 1") && strstr(why, "unknown"));
    int64_t unary_b[] = {KN_CHAIN_EXP, 0, 1};
    prog.ints = unary_b, prog.n = 3;
    CHECK(!kn_chain_from_node(&n, 2, &p, why, sizeof why));
    int64_t ragged[] = {KN_CHAIN_EXP, 0};
    prog.ints = ragged, prog.n = 2;
    CHECK(!kn_chain_from_node(&n, 1, &p, why, sizeof why));
    int64_t many[3 * (KN_CHAIN_MAX_STEPS + 1)];
    for (int k = 0; k <= KN_CHAIN_MAX_STEPS; k++) many[3 * k] = KN_CHAIN_NEG, many[3 * k + 1] = k, many[3 * k + 2] = -1;
    prog.ints = many, prog.n = 3 * (KN_CHAIN_MAX_STEPS + 1);
    CHECK(!kn_chain_from_node(&n, 1, &p, why, sizeof why) && strstr(why, "exceed"));
    CHECK(!kn_chain_from_node(&n, KN_CHAIN_MAX_INPUTS + 1, &p, why, sizeof why));
}

/* On a machine with a GPU: every chain operator in float32 and float16 on CUDA against level 0
 * there, and the two-chain graph. */
KN_TEST(opt_elementwise_chain_cuda_matches_unfused) {
    const char *why = NULL;
    if (!kiln_provider_available("cuda", &why)) KN_SKIP(why ? why : "no CUDA device");
    chain_dtype = KILN_DTYPE_FLOAT;
    every_chain_operator(cuda_session, 1e-5);
    chain_dtype = KILN_DTYPE_FLOAT16;
    every_chain_operator(cuda_session, 1e-2);
    for (int t = 0; t < 2; t++) {
        chain_dtype = t ? KILN_DTYPE_FLOAT16 : KILN_DTYPE_FLOAT;
        kiln_session *ref = cuda_session(build_chain(), 0), *opt = cuda_session(build_chain(), 3);
        if (ref && opt) {
            check_same(ref, opt, t ? 1e-2 : 1e-5);
            CHECK_EQ_INT(count_op(opt, "kiln", "FusedElementwise"), 2);
        }
        kiln_session_destroy(ref);
        kiln_session_destroy(opt);
    }
    chain_dtype = KILN_DTYPE_FLOAT;
}

/* ------------------------------------------------------------------ precision rewrite (level 3) */

/* x [4,16] -> a = MatMul(x, w1) -> r = Relu(a) -> e = Exp(r) -> y = MatMul(e, w2)
 *   q = Mul(a, 1e5)   (1e5 overflows float16: the Mul stays float32)
 *   s = Add(r, 1e-12) (a one-element epsilon that float16 flushes to zero: stays float32)
 *   outputs y, r, q, s.
 * With cuda:precision=fp16 at level 3 (chains off, so every node stays itself): MatMul, Relu in one
 * region and the second MatMul in another (Exp leaves the type's range: it stays float32); Casts
 * into the regions for x and e, out of them for a (read by the Mul), r (an output, read by Exp and
 * the Add) and y (an output). */
static kn_model *build_precision(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){4, 16}, NULL);
    int w1 = tmb_const_range(&b, "w1", KILN_DTYPE_FLOAT, 2, (int64_t[]){16, 32}, -0.5f, 0.5f);
    int w2 = tmb_const_range(&b, "w2", KILN_DTYPE_FLOAT, 2, (int64_t[]){32, 8}, -0.5f, 0.5f);
    int big = tmb_scalar(&b, "big", KILN_DTYPE_FLOAT, 1e5), tiny = tmb_scalar(&b, "tiny", KILN_DTYPE_FLOAT, 1e-12);
    int a = tmb_op(&b, "MatMul", (int[]){x, w1}, 2, "a");
    int r = tmb_op(&b, "Relu", (int[]){a}, 1, "r");
    int e = tmb_op(&b, "Exp", (int[]){r}, 1, "e");
    tmb_output(&b, tmb_op(&b, "MatMul", (int[]){e, w2}, 2, "y"));
    tmb_output(&b, r);
    tmb_output(&b, tmb_op(&b, "Mul", (int[]){a, big}, 2, "q"));
    tmb_output(&b, tmb_op(&b, "Add", (int[]){r, tiny}, 2, "s"));
    return b.m;
}

/* Options with one provider: `precision` (NULL: none given) and activations=half when asked. */
static kiln_session_options *precision_options(const char *provider, const char *precision, bool half_act,
                                               int level) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, level);
    kiln_session_options_set_intra_op_threads(o, 1);
    kiln_session_options_set_cache(o, 0, NULL);
    const char *k[2] = {"precision", "activations"}, *v[2] = {precision, "half"};
    size_t n = precision ? (half_act ? 2 : 1) : 0;
    CHECK_STATUS(kiln_session_options_append_provider(o, provider, n ? k : NULL, n ? v : NULL, n), KILN_OK);
    CHECK_STATUS(kiln_session_options_disable_pass(o, "fuse_elementwise"), KILN_OK);
    return o;
}

/* The dtype of the value named `name` in m, or UNDEFINED. */
static kiln_dtype value_dtype(const kn_model *m, const char *name) {
    int v = kn_graph_find_value(m->graph, name);
    return v >= 0 ? m->graph->values[v].type.dtype : KILN_DTYPE_UNDEFINED;
}

/* The dtype of input i of the (single live) node of op_type whose output is named out. */
static kiln_dtype input_dtype_of(const kn_model *m, const char *out, int i) {
    const kn_graph *g = m->graph;
    for (int n = 0; n < g->n_nodes; n++) {
        const kn_node *nd = &g->nodes[n];
        if (nd->dead || nd->n_outputs < 1 || nd->outputs[0] < 0 || i >= nd->n_inputs) continue;
        const char *name = g->values[nd->outputs[0]].name;
        if (!strncmp(name, out, strlen(out)) && (!name[strlen(out)] || !strncmp(name + strlen(out), "_kn", 3)))
            return g->values[nd->inputs[i]].type.dtype;
    }
    return KILN_DTYPE_UNDEFINED;
}

KN_TEST(opt_lower_precision_regions_from_tables) {
    if (!kn_backend_find("cuda")) KN_SKIP("no CUDA backend in this build");
    /* the CUDA MatMul's kernel table must take float16 here (it needs no device) */
    kn_model *probe = build_precision();
    CHECK_STATUS(kn_graph_sort(probe->graph), KILN_OK);
    CHECK_STATUS(kn_graph_infer(probe->graph), KILN_OK);
    kn_type h[2];
    const kn_node *mm = &probe->graph->nodes[0];
    h[0] = probe->graph->values[mm->inputs[0]].type, h[1] = probe->graph->values[mm->inputs[1]].type;
    h[0].dtype = h[1].dtype = KILN_DTYPE_FLOAT16;
    const kn_type *hin[2] = {&h[0], &h[1]};
    char why[256] = "";
    bool cuda_mm = kn_backend_supports("cuda", mm, hin, 2, why, sizeof why);
    kn_model_free(probe);
    if (!cuda_mm) KN_SKIP(why);

    static const char *const precs[2] = {"fp16", "bf16"};
    for (int p = 0; p < 2; p++) {
        kiln_dtype half = p ? KILN_DTYPE_BFLOAT16 : KILN_DTYPE_FLOAT16;
        kiln_session_options *o = precision_options("cuda", precs[p], true, 3);
        kn_model *m = optimised_from_tables(build_precision, o);
        kiln_session_options_destroy(o);
        /* in: x, e; out: r, y, and float16's a (for the Mul) or bfloat16's q and s */
        CHECK_EQ_INT(model_count_op(m, "", "Cast"), p ? 6 : 5);
        CHECK_EQ_INT(model_count_op(m, "", "MatMul"), 2);
        /* graph inputs and outputs keep their types */
        const char *outs[] = {"x", "y", "r", "q", "s"};
        for (int k = 0; k < 5; k++) CHECK_MSG(value_dtype(m, outs[k]) == KILN_DTYPE_FLOAT, "%s changed type", outs[k]);
        /* inside the regions: the half type, weights converted */
        CHECK_EQ_INT(input_dtype_of(m, "a", 0), half);
        CHECK_EQ_INT(input_dtype_of(m, "a", 1), half);
        CHECK_EQ_INT(input_dtype_of(m, "r", 0), half);
        CHECK_EQ_INT(input_dtype_of(m, "y", 0), half);
        CHECK_EQ_INT(input_dtype_of(m, "y", 1), half);
        int w1 = -1;
        for (int n = 0; n < m->graph->n_nodes; n++)
            if (!m->graph->nodes[n].dead && !strcmp(m->graph->nodes[n].op_type, "MatMul") && w1 < 0)
                w1 = m->graph->nodes[n].inputs[1];
        CHECK(w1 >= 0 && m->graph->values[w1].constant && m->graph->values[w1].constant->dtype == half);
        /* outside them: Exp; in float16 also the Mul by 1e5 (overflows) and the Add of 1e-12 (flushes
         * to zero), which bfloat16, with float32's range, takes */
        CHECK_EQ_INT(input_dtype_of(m, "e", 0), KILN_DTYPE_FLOAT);
        CHECK_EQ_INT(input_dtype_of(m, "q", 0), p ? half : KILN_DTYPE_FLOAT);
        CHECK_EQ_INT(input_dtype_of(m, "s", 0), p ? half : KILN_DTYPE_FLOAT);
        kn_model_free(m);
    }
    /* fp32 precision with activations=half, a CPU session, the pass disabled, fp16 without
     * activations=half (the default), or level 2: nothing changes */
    const char *providers[5] = {"cuda", "cpu", "cuda", "cuda", "cuda"};
    const char *precisions[5] = {"fp32", NULL, "fp16", "fp16", "fp16"};
    const bool half_act[5] = {true, false, true, false, true};
    for (int k = 0; k < 5; k++) {
        kiln_session_options *o = precision_options(providers[k], precisions[k], half_act[k], k == 4 ? 2 : 3);
        if (k == 2) kiln_session_options_disable_pass(o, "lower_precision");
        kn_model *m = optimised_from_tables(build_precision, o);
        kiln_session_options_destroy(o);
        CHECK_MSG(model_count_op(m, "", "Cast") == 0, "case %d: %d Casts", k, model_count_op(m, "", "Cast"));
        CHECK_EQ_INT(input_dtype_of(m, "a", 0), KILN_DTYPE_FLOAT);
        kn_model_free(m);
    }
}

/* A float16 graph for raise_float16:
 *   x  float16 [1, 4, 6, 6] input, e float32 [1, 4, 6, 6] input
 *   c = Conv(Add(x, Cast(e, to float16)), w float16) ; y = Relu(c)          output y (float16)
 *   z = Sigmoid(Add(x, k float16))                                          output z (float16)
 * On the CPU at level 1: the Conv's region (Cast, Add, Conv, Relu) runs in float32: a Cast in for
 * x, one out for y, the weights converted, the Cast of e gone (e read as it is); the Add/Sigmoid
 * branch has no product to pay for its Casts and stays float16. */
static kn_model *build_float16(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int64_t xd[] = {1, 4, 6, 6};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT16, 4, xd, NULL);
    int e = tmb_input(&b, "e", KILN_DTYPE_FLOAT, 4, xd, NULL);
    int w = tmb_const_range(&b, "w", KILN_DTYPE_FLOAT16, 4, (int64_t[]){4, 4, 3, 3}, -0.5f, 0.5f);
    int k = tmb_const_range(&b, "k", KILN_DTYPE_FLOAT16, 4, (int64_t[]){1, 4, 1, 1}, -1, 1);
    int eh = tmb_op(&b, "Cast", &e, 1, "eh");
    tmb_op_int(&b, "to", KILN_DTYPE_FLOAT16);
    int a = tmb_op(&b, "Add", (int[]){x, eh}, 2, "a");
    int c = tmb_op(&b, "Conv", (int[]){a, w}, 2, "c");
    tmb_op_ints(&b, "pads", (int64_t[]){1, 1, 1, 1}, 4);
    tmb_output(&b, tmb_op(&b, "Relu", &c, 1, "y"));
    int t = tmb_op(&b, "Add", (int[]){x, k}, 2, "t");
    tmb_output(&b, tmb_op(&b, "Sigmoid", &t, 1, "z"));
    return b.m;
}

KN_TEST(opt_raise_float16_on_the_cpu) {
    kiln_session_options *o = precision_options("cpu", NULL, false, 1);
    kn_model *m = optimised_from_tables(build_float16, o);
    kiln_session_options_destroy(o);
    CHECK_EQ_INT(value_dtype(m, "x"), KILN_DTYPE_FLOAT16);
    CHECK_EQ_INT(value_dtype(m, "y"), KILN_DTYPE_FLOAT16);
    CHECK_EQ_INT(value_dtype(m, "z"), KILN_DTYPE_FLOAT16);
    CHECK_EQ_INT(input_dtype_of(m, "c", 0), KILN_DTYPE_FLOAT);
    CHECK_EQ_INT(input_dtype_of(m, "c", 1), KILN_DTYPE_FLOAT);
    CHECK_EQ_INT(input_dtype_of(m, "a", 1), KILN_DTYPE_FLOAT); /* e itself */
    CHECK_EQ_INT(input_dtype_of(m, "t", 0), KILN_DTYPE_FLOAT16);
    CHECK_EQ_INT(input_dtype_of(m, "z", 0), KILN_DTYPE_FLOAT16);
    CHECK_EQ_INT(model_count_op(m, "", "Cast"), 2); /* x in, y out */
    kn_model_free(m);
    /* disabled, or a device provider first: nothing changes */
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !kn_backend_find("cuda")) break;
        o = precision_options(k ? "cuda" : "cpu", NULL, false, 1);
        if (!k) kiln_session_options_disable_pass(o, "raise_float16");
        m = optimised_from_tables(build_float16, o);
        kiln_session_options_destroy(o);
        CHECK_EQ_INT(input_dtype_of(m, "c", 0), KILN_DTYPE_FLOAT16);
        CHECK_EQ_INT(model_count_op(m, "", "Cast"), 1);
        kn_model_free(m);
    }
    /* and it runs: level 3 (fused, float32) against level 0 (float16 after every operator) */
    kiln_session *s = compare_levels(build_float16, 3, 1e-2);
    if (s) {
        CHECK_EQ_INT(count_op(s, "kiln", "FusedConv"), 1);
        kiln_session_destroy(s);
    }
}

/* A session of build() with options o (destroyed here); NULL on failure (recorded). */
static kiln_session *session_with(build_fn build, kiln_session_options *o) {
    kiln_session *s = NULL;
    kn_model *m = build();
    CHECK_STATUS(kn_graph_sort(m->graph), KILN_OK);
    CHECK_STATUS(kn_session_from_model(m, o, &s), KILN_OK);
    kiln_session_options_destroy(o);
    return s;
}

/* An attention-style mask inside a product region: x [4,16] -> MatMul -> Add of Where(m > 0, 0,
 * -inf) -> Relu -> MatMul -> y. The Where only selects, and -inf converts as it is: it joins the
 * region, so the Casts are x's and y's alone (a Where left in float32 paid a Cast a run). */
static kn_model *build_masked_precision(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){4, 16}, NULL);
    int m = tmb_input(&b, "m", KILN_DTYPE_FLOAT, 2, (int64_t[]){4, 32}, NULL);
    int w1 = tmb_const_range(&b, "w1", KILN_DTYPE_FLOAT, 2, (int64_t[]){16, 32}, -0.5f, 0.5f);
    int w2 = tmb_const_range(&b, "w2", KILN_DTYPE_FLOAT, 2, (int64_t[]){32, 8}, -0.5f, 0.5f);
    int keep = tmb_op(&b, "Greater", (int[]){m, tmb_scalar(&b, "zero", KILN_DTYPE_FLOAT, 0)}, 2, "keep");
    int mask = tmb_op(
        &b, "Where",
        (int[]){keep, tmb_scalar(&b, "open", KILN_DTYPE_FLOAT, 0), tmb_scalar(&b, "shut", KILN_DTYPE_FLOAT, -INFINITY)},
        3, "mask");
    int a = tmb_op(&b, "MatMul", (int[]){x, w1}, 2, "a");
    int s = tmb_op(&b, "Add", (int[]){a, mask}, 2, "s");
    int r = tmb_op(&b, "Relu", &s, 1, "r");
    tmb_output(&b, tmb_op(&b, "MatMul", (int[]){r, w2}, 2, "y"));
    return b.m;
}

KN_TEST(opt_lower_precision_takes_where_masks) {
    if (!kn_backend_find("cuda")) KN_SKIP("no CUDA backend in this build");
    static const char *const precs[2] = {"fp16", "bf16"};
    for (int p = 0; p < 2; p++) {
        kiln_dtype half = p ? KILN_DTYPE_BFLOAT16 : KILN_DTYPE_FLOAT16;
        kiln_session_options *o = precision_options("cuda", precs[p], true, 3);
        kn_model *m = optimised_from_tables(build_masked_precision, o);
        kiln_session_options_destroy(o);
        CHECK_MSG(model_count_op(m, "", "Cast") == 2, "%s: %d Casts", precs[p], model_count_op(m, "", "Cast"));
        /* the Where's constants converted (its output is renamed _kn when retyped) */
        CHECK_EQ_INT(input_dtype_of(m, "mask", 1), half);
        CHECK_EQ_INT(input_dtype_of(m, "mask", 2), half);
        CHECK_EQ_INT(input_dtype_of(m, "mask", 0), KILN_DTYPE_BOOL);
        kn_model_free(m);
    }
}

/* On a machine with a GPU: the rewritten graph runs and agrees with float32 at level 0, in
 * float16 and bfloat16, and its graph holds the Casts the rewrite made. */
KN_TEST(opt_lower_precision_cuda_matches_fp32) {
    const char *why = NULL;
    if (!kiln_provider_available("cuda", &why)) KN_SKIP(why ? why : "no CUDA device");
    static const char *const precs[2] = {"fp16", "bf16"};
    /* inputs, weights and each result rounded to 11 or 8 significant bits (2^-12, 2^-9 each) */
    static const double tols[2] = {4e-3, 2e-2};
    for (int p = 0; p < 2; p++) {
        kiln_session *ref = session_with(build_precision, precision_options("cuda", "fp32", false, 0));
        kiln_session *low = session_with(build_precision, precision_options("cuda", precs[p], true, 3));
        if (ref && low) {
            check_outputs(ref, low, tols[p], true);
            CHECK_EQ_INT(count_op(low, "", "Cast"), p ? 6 : 5);
        }
        kiln_session_destroy(ref);
        kiln_session_destroy(low);
        /* the mask's Where in the half type */
        ref = session_with(build_masked_precision, precision_options("cuda", "fp32", false, 0));
        low = session_with(build_masked_precision, precision_options("cuda", precs[p], true, 3));
        if (ref && low) {
            check_outputs(ref, low, tols[p], true);
            CHECK_EQ_INT(count_op(low, "", "Cast"), 2);
        }
        kiln_session_destroy(ref);
        kiln_session_destroy(low);
    }
}

/* ------------------------------------------------------------------ channels-last regions */

/* A CNN block, as the zoo's mobile networks have them: x [2,3,10,10] -> Conv 3x3 + Relu -> Conv 3x3
 * with a residual Add -> squeeze-excite (GlobalAveragePool, 1x1 Conv + Relu, 1x1 Conv + HardSigmoid,
 * Mul) -> Add of a [8,10,10] constant -> PRelu with a [8,1,1] slope -> two outputs: the map itself
 * and GlobalAveragePool -> Flatten. */
static int64_t cnn_batch = 2; /* the block's batch (layout_nhwc's auto rule reads it) */
static bool cnn_depthwise = false; /* the second convolution depthwise (8 groups): so is the auto rule's */

static kn_model *build_cnn_block(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int64_t xd[] = {cnn_batch, 3, 10, 10}, w1d[] = {8, 3, 3, 3}, w2d[] = {8, 8, 3, 3}, s1d[] = {4, 8, 1, 1}, s2d[] = {8, 4, 1, 1};
    int64_t bd[] = {8}, b4[] = {4}, cd[] = {8, 1, 1}, fd[] = {8, 10, 10};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, xd, NULL);
    int64_t pads[] = {1, 1, 1, 1};
    int c1 = tmb_op(&b, "Conv",
                    (int[]){x, tmb_const_range(&b, "w1", KILN_DTYPE_FLOAT, 4, w1d, -0.5f, 0.5f),
                            tmb_const_range(&b, "b1", KILN_DTYPE_FLOAT, 1, bd, -0.2f, 0.2f)},
                    3, "c1");
    tmb_op_ints(&b, "pads", pads, 4);
    int r1 = tmb_op(&b, "Relu", &c1, 1, "r1");
    if (cnn_depthwise) w2d[1] = 1;
    int c2 = tmb_op(&b, "Conv", (int[]){r1, tmb_const_range(&b, "w2", KILN_DTYPE_FLOAT, 4, w2d, -0.3f, 0.3f)}, 2, "c2");
    tmb_op_ints(&b, "pads", pads, 4);
    if (cnn_depthwise) tmb_op_int(&b, "group", 8);
    int sum = tmb_op(&b, "Add", (int[]){c2, r1}, 2, "sum");
    int gap = tmb_op(&b, "GlobalAveragePool", &sum, 1, "gap");
    int s1 = tmb_op(&b, "Conv",
                    (int[]){gap, tmb_const_range(&b, "s1", KILN_DTYPE_FLOAT, 4, s1d, -0.5f, 0.5f),
                            tmb_const_range(&b, "sb1", KILN_DTYPE_FLOAT, 1, b4, -0.1f, 0.1f)},
                    3, "s1");
    int sr = tmb_op(&b, "Relu", &s1, 1, "sr");
    int s2 = tmb_op(&b, "Conv", (int[]){sr, tmb_const_range(&b, "s2", KILN_DTYPE_FLOAT, 4, s2d, -0.5f, 0.5f)}, 2, "s2");
    int sg = tmb_op(&b, "HardSigmoid", &s2, 1, "sg");
    int se = tmb_op(&b, "Mul", (int[]){sum, sg}, 2, "se");
    int shifted = tmb_op(&b, "Add", (int[]){se, tmb_const_range(&b, "shift", KILN_DTYPE_FLOAT, 3, fd, -1.0f, 1.0f)}, 2,
                         "shifted");
    int map = tmb_op(&b, "PRelu", (int[]){shifted, tmb_const_range(&b, "slope", KILN_DTYPE_FLOAT, 3, cd, 0.1f, 0.3f)},
                     2, "map");
    int pooled = tmb_op(&b, "GlobalAveragePool", &map, 1, "pooled");
    int flat = tmb_op(&b, "Flatten", &pooled, 1, "flat");
    tmb_output(&b, map);
    tmb_output(&b, flat);
    return b.m;
}

static int count_nhwc_convs(const kiln_session *s) {
    const kn_graph *g = s->model->graph;
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        bool nhwc = false;
        if (!g->nodes[i].dead && !strcmp(g->nodes[i].op_type, "FusedConv") && kn_fused_conv_layout(&g->nodes[i], &nhwc) &&
            nhwc)
            n++;
    }
    return n;
}

/* layout_nhwc with KILN_LAYOUT=nhwc on the CPU (its NHWC FusedConv is a reference that permutes
 * around its convolution): the whole block becomes one region (4 convolutions channels last, the
 * two poolings ReduceMeans, the constants permuted) with one Transpose in and one per value leaving
 * (the map, a graph output, and the pooled value Flatten reads), and its outputs equal level 0's.
 * auto (no NHWC kernel is faster yet) and nchw change nothing; neither does the pass disabled. */
KN_TEST(opt_layout_nhwc_regions_match_nchw) {
    setenv("KILN_LAYOUT", "nhwc", 1);
    kiln_session *s = compare_levels(build_cnn_block, 3, 1e-5);
    if (s) {
        CHECK_EQ_INT(count_nhwc_convs(s), 4);
        CHECK_EQ_INT(count_op(s, "", "Transpose"), 3);
        CHECK_EQ_INT(count_op(s, "", "ReduceMean"), 2);
        CHECK_EQ_INT(count_op(s, "", "GlobalAveragePool"), 0);
    }
    kiln_session_destroy(s);
    s = compare_levels_without(build_cnn_block, 3, 1e-5, "layout_nhwc");
    if (s) CHECK_EQ_INT(count_nhwc_convs(s) + count_op(s, "", "Transpose"), 0);
    kiln_session_destroy(s);
    static const char *const modes[2] = {"nchw", NULL};
    for (int m = 0; m < 2; m++) {
        if (modes[m]) setenv("KILN_LAYOUT", modes[m], 1);
        else unsetenv("KILN_LAYOUT");
        s = compare_levels(build_cnn_block, 3, 1e-5);
        if (s) CHECK_MSG(count_nhwc_convs(s) + count_op(s, "", "Transpose") == 0, "KILN_LAYOUT=%s: %d NHWC convolutions",
                         modes[m] ? modes[m] : "(auto)", count_nhwc_convs(s));
        kiln_session_destroy(s);
    }
    unsetenv("KILN_LAYOUT");
}

/* x [cnn_batch, 3, 13, 11] -> Conv 3x3 -> Relu -> MaxPool 3x3 stride 2 pads 1 (a ResNet stem) ->
 * Conv 3x3 -> Add (the pool) -> AveragePool 2x2 stride 2 ceil_mode, counting pads (odd map sizes:
 * the last windows hang over) -> out; a second MaxPool, 5x5 stride 1 pads 2 (a detector's SPP),
 * reads the first pool's output and is an output too. */
static kn_model *build_pool_block(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int64_t xd[] = {cnn_batch, 3, 13, 11}, w1d[] = {8, 3, 3, 3}, w2d[] = {8, 8, 3, 3}, bd[] = {8};
    int64_t pads[] = {1, 1, 1, 1}, k3[] = {3, 3}, s2[] = {2, 2}, k2[] = {2, 2}, k5[] = {5, 5}, pads2[] = {2, 2, 2, 2};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, xd, NULL);
    int c1 = tmb_op(&b, "Conv",
                    (int[]){x, tmb_const_range(&b, "w1", KILN_DTYPE_FLOAT, 4, w1d, -0.5f, 0.5f),
                            tmb_const_range(&b, "b1", KILN_DTYPE_FLOAT, 1, bd, -0.2f, 0.2f)},
                    3, "c1");
    tmb_op_ints(&b, "pads", pads, 4);
    int r1 = tmb_op(&b, "Relu", &c1, 1, "r1");
    int mp = tmb_op(&b, "MaxPool", &r1, 1, "mp");
    tmb_op_ints(&b, "kernel_shape", k3, 2);
    tmb_op_ints(&b, "strides", s2, 2);
    tmb_op_ints(&b, "pads", pads, 4);
    int c2 = tmb_op(&b, "Conv", (int[]){mp, tmb_const_range(&b, "w2", KILN_DTYPE_FLOAT, 4, w2d, -0.3f, 0.3f)}, 2, "c2");
    tmb_op_ints(&b, "pads", pads, 4);
    int sum = tmb_op(&b, "Add", (int[]){c2, mp}, 2, "sum");
    int ap = tmb_op(&b, "AveragePool", &sum, 1, "ap");
    tmb_op_ints(&b, "kernel_shape", k2, 2);
    tmb_op_ints(&b, "strides", s2, 2);
    tmb_op_int(&b, "ceil_mode", 1);
    tmb_op_int(&b, "count_include_pad", 1);
    int spp = tmb_op(&b, "MaxPool", &mp, 1, "spp");
    tmb_op_ints(&b, "kernel_shape", k5, 2);
    tmb_op_ints(&b, "pads", pads2, 4);
    tmb_output(&b, ap);
    tmb_output(&b, spp);
    return b.m;
}

/* The pooling block with KILN_LAYOUT=nhwc on the CPU: one region, its pools kiln's channels-last
 * forms, one Transpose in and one out per output; levels agree. */
KN_TEST(opt_layout_nhwc_pools_in_the_region) {
    setenv("KILN_LAYOUT", "nhwc", 1);
    kiln_session *s = compare_levels(build_pool_block, 3, 1e-5);
    if (s) {
        CHECK_EQ_INT(count_nhwc_convs(s), 2);
        CHECK_EQ_INT(count_op(s, "kiln", "MaxPool"), 2);
        CHECK_EQ_INT(count_op(s, "kiln", "AveragePool"), 1);
        CHECK_EQ_INT(count_op(s, "", "MaxPool") + count_op(s, "", "AveragePool"), 0);
        CHECK_EQ_INT(count_op(s, "", "Transpose"), 3);
    }
    kiln_session_destroy(s);
    unsetenv("KILN_LAYOUT");
}

/* An integer constant (int64 or int32) of n values. */
static int ints_const(tmb *b, const char *name, kiln_dtype dt, int n, const int64_t *v) {
    kn_tensor *t = NULL;
    int64_t d = n;
    kn_tensor_new(dt, 1, &d, &t);
    for (int i = 0; i < n; i++) kn_tensor_set_f64(t, i, (double)v[i]);
    return tmb_const_tensor(b, name, t);
}

/* A detector's blocks (YOLOv8's C2f and its neck): x [cnn_batch, 3, 12, 10] -> Conv 3x3 (8) ->
 * Split on channels (4 + 4); a 3x3 Conv + Relu on the second half; Slice of channels 2..5 (axes
 * [-3], int32); Concat of the first half, the convolved half and the slice on axis 1 -> 1x1 Conv
 * (8) -> Resize nearest by scales [1,1,2,2] -> Conv 3x3 stride 2 -> Concat with the first
 * convolution on axis -3 -> Conv 1x1 (out); also outputs: a linear Resize by sizes of the 1x1
 * convolution, and a Slice without axes (batch 0.., channels 1..6) of the first convolution. */
static kn_model *build_detector_blocks(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    const int64_t N = cnn_batch;
    int64_t xd[] = {N, 3, 12, 10}, w1d[] = {8, 3, 3, 3}, wmd[] = {4, 4, 3, 3}, w2d[] = {8, 12, 1, 1}, w3d[] = {8, 8, 3, 3};
    int64_t w4d[] = {5, 16, 1, 1}, bd[] = {8}, pads[] = {1, 1, 1, 1}, s2[] = {2, 2};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, xd, NULL);
    int c1 = tmb_op(&b, "Conv",
                    (int[]){x, tmb_const_range(&b, "w1", KILN_DTYPE_FLOAT, 4, w1d, -0.5f, 0.5f),
                            tmb_const_range(&b, "b1", KILN_DTYPE_FLOAT, 1, bd, -0.2f, 0.2f)},
                    3, "c1");
    tmb_op_ints(&b, "pads", pads, 4);
    /* Split: two outputs */
    int halves[2] = {kn_graph_add_value(b.g, "half0"), kn_graph_add_value(b.g, "half1")};
    int split_in[2] = {c1, ints_const(&b, "split", KILN_DTYPE_INT64, 2, (int64_t[]){4, 4})};
    b.last = kn_graph_add_node(b.g, "split", "Split", "", split_in, 2, halves, 2);
    b.g->nodes[b.last].opset = 17;
    tmb_op_int(&b, "axis", 1);
    int m = tmb_op(&b, "Conv", (int[]){halves[1], tmb_const_range(&b, "wm", KILN_DTYPE_FLOAT, 4, wmd, -0.4f, 0.4f)}, 2,
                   "m");
    tmb_op_ints(&b, "pads", pads, 4);
    int mr = tmb_op(&b, "Relu", &m, 1, "mr");
    int sl = tmb_op(&b, "Slice",
                    (int[]){c1, ints_const(&b, "st", KILN_DTYPE_INT32, 1, (int64_t[]){2}),
                            ints_const(&b, "en", KILN_DTYPE_INT32, 1, (int64_t[]){6}),
                            ints_const(&b, "ax", KILN_DTYPE_INT32, 1, (int64_t[]){-3})},
                    4, "sl");
    int cat = tmb_op(&b, "Concat", (int[]){halves[0], mr, sl}, 3, "cat");
    tmb_op_int(&b, "axis", 1);
    int c2 =
        tmb_op(&b, "Conv", (int[]){cat, tmb_const_range(&b, "w2", KILN_DTYPE_FLOAT, 4, w2d, -0.3f, 0.3f)}, 2, "c2");
    int up = tmb_op(&b, "Resize",
                    (int[]){c2, -1, tmb_const_range(&b, "scales", KILN_DTYPE_FLOAT, 1, (int64_t[]){4}, 1, 1)}, 3, "up");
    kn_tensor_set_f64((kn_tensor *)b.g->values[b.g->nodes[b.last].inputs[2]].constant, 2, 2.0);
    kn_tensor_set_f64((kn_tensor *)b.g->values[b.g->nodes[b.last].inputs[2]].constant, 3, 2.0);
    tmb_op_attr(&b, "mode", KN_ATTR_STRING)->s = "nearest";
    b.g->nodes[b.last].attrs[b.g->nodes[b.last].n_attrs - 1].s_len = 7;
    int c3 = tmb_op(&b, "Conv", (int[]){up, tmb_const_range(&b, "w3", KILN_DTYPE_FLOAT, 4, w3d, -0.3f, 0.3f)}, 2, "c3");
    tmb_op_ints(&b, "pads", pads, 4);
    tmb_op_ints(&b, "strides", s2, 2);
    int cat2 = tmb_op(&b, "Concat", (int[]){c3, c1}, 2, "cat2");
    tmb_op_int(&b, "axis", -3);
    int out =
        tmb_op(&b, "Conv", (int[]){cat2, tmb_const_range(&b, "w4", KILN_DTYPE_FLOAT, 4, w4d, -0.3f, 0.3f)}, 2, "out");
    int lin = tmb_op(&b, "Resize",
                     (int[]){c2, -1, -1, ints_const(&b, "sizes", KILN_DTYPE_INT64, 4, (int64_t[]){N, 8, 18, 15})}, 4,
                     "lin");
    tmb_op_attr(&b, "mode", KN_ATTR_STRING)->s = "linear";
    b.g->nodes[b.last].attrs[b.g->nodes[b.last].n_attrs - 1].s_len = 6;
    int sl2 = tmb_op(&b, "Slice",
                     (int[]){c1, ints_const(&b, "st2", KILN_DTYPE_INT64, 2, (int64_t[]){0, 1}),
                             ints_const(&b, "en2", KILN_DTYPE_INT64, 2, (int64_t[]){1000, 7})},
                     3, "sl2");
    tmb_output(&b, out);
    tmb_output(&b, lin);
    tmb_output(&b, sl2);
    return b.m;
}

/* The detector's blocks with KILN_LAYOUT=nhwc on the CPU: Split, Slice (with and without axes,
 * negative and int32 ones), Concat and Resize (scales and sizes) join the region with their axes
 * renumbered: one Transpose in, one per output out, none between; levels agree. */
KN_TEST(opt_layout_nhwc_axes_operators_in_the_region) {
    setenv("KILN_LAYOUT", "nhwc", 1);
    for (int64_t batch = 1; batch <= 2; batch++) {
        cnn_batch = batch;
        kiln_session *s = compare_levels(build_detector_blocks, 3, 1e-5);
        if (s) {
            CHECK_EQ_INT(count_nhwc_convs(s), 5);
            CHECK_EQ_INT(count_op(s, "", "Transpose"), 4);
            CHECK_EQ_INT(count_op(s, "", "Split") + count_op(s, "", "Concat"), 3);
            CHECK_EQ_INT(count_op(s, "", "Slice") + count_op(s, "", "Resize"), 4);
        }
        kiln_session_destroy(s);
    }
    cnn_batch = 2;
    unsetenv("KILN_LAYOUT");
}

#ifdef KILN_HAVE_CUDA /* only the CUDA build's test counts them */
static int count_nhwc_in(const kn_model *m) {
    int n = 0;
    for (int i = 0; m && i < m->graph->n_nodes; i++) {
        bool l = false;
        if (!m->graph->nodes[i].dead && !strcmp(m->graph->nodes[i].op_type, "FusedConv") &&
            kn_fused_conv_layout(&m->graph->nodes[i], &l) && l)
            n++;
    }
    return n;
}
#endif

/* layout_nhwc's auto rule, judged from CUDA's kernel tables (no GPU needed): channels last for a
 * device provider's float16/bfloat16 convolutions (activations=half) at a known batch of 4 or more,
 * or of any batch when no convolution of the graph is grouped; its float32 ones (fp32, tf32, or half
 * precision with float32 activations) at 8 or more; not below, not for the CPU. KILN_LAYOUT=nhwc
 * forms the regions at any batch, =nchw at none. */
KN_TEST(opt_layout_nhwc_auto_for_device_batches) {
#ifndef KILN_HAVE_CUDA
    KN_SKIP("no CUDA backend in this build");
#else
    char why[512] = "";
    int n_fns = 0, dnn = 0;
    if (!kn_cuda_libs_report(why, sizeof why, &n_fns, &dnn) || !dnn) KN_SKIP("cuDNN not loadable here");
    static const struct {
        const char *layout, *provider, *precision;
        bool half;
        int64_t batch;
        int nhwc;
        bool depthwise;
    } cases[] = {
        {NULL, "cuda", "fp16", true, 8, 4, false},   {NULL, "cuda", "bf16", true, 4, 4, false},
        {NULL, "cuda", "fp16", true, 2, 4, false},   {NULL, "cuda", "fp16", true, 1, 4, false},
        {NULL, "cuda", "fp16", true, 2, 0, true},    {NULL, "cuda", "fp16", true, 4, 4, true},
        {NULL, "cuda", "fp32", false, 8, 4, false},  {NULL, "cuda", "tf32", false, 4, 0, false},
        {NULL, "cuda", "fp16", false, 8, 4, false},  {NULL, "cuda", "fp16", false, 4, 0, false},
        {NULL, "cpu", NULL, false, 8, 0, false},     {"nhwc", "cuda", "fp16", true, 2, 4, false},
        {"nchw", "cuda", "fp16", true, 8, 0, false},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        if (cases[k].layout) setenv("KILN_LAYOUT", cases[k].layout, 1);
        else unsetenv("KILN_LAYOUT");
        cnn_batch = cases[k].batch;
        cnn_depthwise = cases[k].depthwise;
        kiln_session_options *o = precision_options(cases[k].provider, cases[k].precision, cases[k].half, 3);
        /* the block's squeeze-excite would take its two pointwise convolutions out of the count */
        kiln_session_options_disable_pass(o, "fuse_squeeze_excite");
        kn_model *m = optimised_from_tables(build_cnn_block, o);
        kiln_session_options_destroy(o);
        int nhwc = count_nhwc_in(m);
        CHECK_MSG(nhwc == cases[k].nhwc, "case %zu (KILN_LAYOUT=%s, %s %s%s, batch %lld): %d channels-last convolutions, "
                  "want %d", k, cases[k].layout ? cases[k].layout : "auto", cases[k].provider,
                  cases[k].precision ? cases[k].precision : "", cases[k].half ? " half" : "", (long long)cases[k].batch,
                  nhwc, cases[k].nhwc);
        /* one Transpose in, one out before the Cast back to float32 that PRelu (no half kernel
         * in lower_precision's list) reads: the PRelu and the last pooling hold no convolution */
        if (cases[k].nhwc && cases[k].half) CHECK_EQ_INT(m ? model_count_op(m, "", "Transpose") : -1, 2);
        kn_model_free(m);
    }
    cnn_batch = 2;
    cnn_depthwise = false;
    unsetenv("KILN_LAYOUT");
#endif
}

/* On a machine with a GPU: at batch 8 the block's convolutions run channels last through cuDNN's
 * NHWC formats by default, in float32, in float16 and bfloat16 with half activations, and in
 * float16 converting float32 activations; the outputs agree with float32 at level 0 within each
 * type's rounding. */
KN_TEST(opt_layout_nhwc_cuda_matches_fp32) {
    const char *why = NULL;
    if (!kiln_provider_available("cuda", &why)) KN_SKIP(why ? why : "no CUDA device");
    unsetenv("KILN_LAYOUT");
    static const struct {
        const char *precision;
        bool half;
        double tol;
    } cases[] = {{"fp32", false, 1e-4}, {"fp16", true, 4e-3}, {"bf16", true, 2e-2}, {"fp16", false, 4e-3}};
    cnn_batch = 8;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        kiln_session *ref = session_with(build_cnn_block, precision_options("cuda", "fp32", false, 0));
        kiln_session *low = session_with(build_cnn_block, precision_options("cuda", cases[k].precision, cases[k].half, 3));
        /* the block's squeeze-excite, fused, takes its two pointwise convolutions out of the count */
        kiln_session_options *o = precision_options("cuda", cases[k].precision, cases[k].half, 3);
        kiln_session_options_disable_pass(o, "fuse_squeeze_excite");
        kiln_session *unfused = session_with(build_cnn_block, o);
        if (ref && low && unfused) {
            check_outputs(ref, low, cases[k].tol, true);
            check_outputs(ref, unfused, cases[k].tol, true);
            CHECK_MSG(count_nhwc_convs(unfused) == 4, "%s%s: %d channels-last convolutions", cases[k].precision,
                      cases[k].half ? " half" : "", count_nhwc_convs(unfused));
        }
        kiln_session_destroy(ref);
        kiln_session_destroy(low);
        kiln_session_destroy(unfused);
        /* the pooling block: its MaxPools and AveragePool channels last on the device too */
        ref = session_with(build_pool_block, precision_options("cuda", "fp32", false, 0));
        low = session_with(build_pool_block, precision_options("cuda", cases[k].precision, cases[k].half, 3));
        if (ref && low) {
            check_outputs(ref, low, cases[k].tol, true);
            CHECK_MSG(count_op(low, "kiln", "MaxPool") == 2 && count_op(low, "kiln", "AveragePool") == 1,
                      "%s%s: %d + %d channels-last pools", cases[k].precision, cases[k].half ? " half" : "",
                      count_op(low, "kiln", "MaxPool"), count_op(low, "kiln", "AveragePool"));
        }
        kiln_session_destroy(ref);
        kiln_session_destroy(low);
    }
    cnn_batch = 2;
}

/* ------------------------------------------------------------------ mean before a pointwise Conv */

static int mbp_opset = 17, mbp_case = 0;

/* x [2,8,12] (1-D) or [2,8,6,5] (2-D, mbp_case 1) -> Conv (1x1 with bias, unless the case says
 * otherwise) -> ReduceMean over the spatial axes. Cases: 0 1-D keepdims 0; 1 2-D keepdims 1 over
 * both spatial axes; 2 axes [1, 2] (the channels too: not moved); 3 stride 2; 4 kernel 3; 5 the
 * Conv's output also a graph output. */
static kn_model *build_mean_pointwise(void) {
    tmb b;
    tmb_init_onnx(&b, mbp_opset);
    bool two_d = mbp_case == 1;
    int64_t xd1[] = {2, 8, 12}, xd2[] = {2, 8, 6, 5}, wd1[] = {16, 8, mbp_case == 4 ? 3 : 1}, wd2[] = {16, 8, 1, 1}, bd[] = {16};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, two_d ? 4 : 3, two_d ? xd2 : xd1, NULL);
    int w = tmb_const_range(&b, "w", KILN_DTYPE_FLOAT, two_d ? 4 : 3, two_d ? wd2 : wd1, -0.5f, 0.5f);
    int bias = tmb_const_range(&b, "b", KILN_DTYPE_FLOAT, 1, bd, -0.5f, 0.5f);
    int y = tmb_op(&b, "Conv", (int[]){x, w, bias}, 3, "y");
    if (mbp_case == 3) tmb_op_ints(&b, "strides", (int64_t[]){2}, 1);
    int64_t axes[2] = {2, 3};
    int n_axes = two_d ? 2 : 1;
    if (mbp_case == 2) axes[0] = 1, axes[1] = 2, n_axes = 2;
    int r;
    if (mbp_opset >= 18) {
        kn_tensor *t = NULL;
        int64_t len = n_axes;
        kn_tensor_new(KILN_DTYPE_INT64, 1, &len, &t);
        memcpy(t->data, axes, sizeof(int64_t) * (size_t)n_axes);
        kn_model_own_tensor(b.m, t);
        int a = kn_graph_add_value(b.g, "axes");
        b.g->values[a].constant = t;
        kn_type_set_tensor(&b.g->values[a].type, KILN_DTYPE_INT64, 1, &len);
        r = tmb_op(&b, "ReduceMean", (int[]){y, a}, 2, "r");
    } else {
        r = tmb_op(&b, "ReduceMean", &y, 1, "r");
        tmb_op_ints(&b, "axes", axes, n_axes);
    }
    tmb_op_int(&b, "keepdims", mbp_case == 1 ? 1 : 0);
    tmb_output(&b, r);
    if (mbp_case == 5) tmb_output(&b, y);
    return b.m;
}

/* The mean moves before the Conv where the Conv is pointwise and the axes are spatial, at the
 * opsets where ReduceMean's axes are an attribute (17) and an input (18); outputs equal level 0's.
 * Over the channels, with a stride or a wider kernel, or with the Conv's output read elsewhere,
 * nothing moves. */
KN_TEST(opt_mean_before_pointwise_conv) {
    for (int opset = 17; opset <= 18; opset++)
        for (int k = 0; k < 6; k++) {
            mbp_opset = opset;
            mbp_case = k;
            kiln_session *s = compare_levels(build_mean_pointwise, 1, 1e-5);
            if (!s) continue;
            const kn_graph *g = s->model->graph;
            int mean_reads_x = 0;
            for (int i = 0; i < g->n_nodes; i++)
                if (!g->nodes[i].dead && !strcmp(g->nodes[i].op_type, "ReduceMean") &&
                    !strcmp(g->values[g->nodes[i].inputs[0]].name, "x"))
                    mean_reads_x++;
            bool moves = k <= 1;
            CHECK_MSG(mean_reads_x == moves, "opset %d case %d: the mean %s", opset, k, mean_reads_x ? "moved" : "stayed");
            CHECK_EQ_INT(count_op(s, "", "Squeeze"), moves && k == 0 ? 1 : 0);
            CHECK_EQ_INT(count_op(s, "", "Conv"), 1);
            kiln_session_destroy(s);
        }
    mbp_opset = 17;
    mbp_case = 0;
}

/* ------------------------------------------------------------------ gather_as_reshape */

static int gar_case;

/* x [6, 4] (cases 4, 5: [4, 6], gathered on axis 1; case 7: [6, 0]) -> Gather by constant indices
 * -> Relu (out).
 * The indices (int64; int32 in case 1), laid out as [2, 3] (case 6: [6]):
 *   0: 0..5 (the whole axis in order)   1: the same in int32   2: -6..-1 (the same, counted from
 *   the end)   3: 0..5 with 2 and 3 swapped   4: 0..5 on axis 1   5: 0..4 on axis 1 (part of the
 *   axis, as [5])   6: 0..5 as [6] (the output's shape is x's). */
static kn_model *build_gather_whole_axis(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    const bool axis1 = gar_case == 4 || gar_case == 5;
    int64_t xd[2] = {6, gar_case == 7 ? 0 : 4}, xd1[2] = {4, 6};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, axis1 ? xd1 : xd, NULL);
    int64_t v[6];
    const int n = gar_case == 5 ? 5 : 6;
    for (int i = 0; i < n; i++) v[i] = gar_case == 2 ? i - 6 : i;
    if (gar_case == 3) v[2] = 3, v[3] = 2;
    int idx = ints_const(&b, "idx", gar_case == 1 ? KILN_DTYPE_INT32 : KILN_DTYPE_INT64, n, v);
    if (n == 6 && gar_case != 6) { /* lay the indices out as [2, 3] */
        kn_tensor *t = b.g->values[idx].constant;
        t->rank = 2, t->dims[0] = 2, t->dims[1] = 3;
        kn_type_set_tensor(&b.g->values[idx].type, t->dtype, 2, t->dims);
    }
    int y = tmb_op(&b, "Gather", (int[]){x, idx}, 2, "g");
    tmb_op_int(&b, "axis", axis1 ? 1 : 0);
    int r = tmb_op(&b, "Relu", &y, 1, "out");
    tmb_output(&b, r);
    return b.m;
}

/* A Gather of a whole axis in order (in int64 or int32, counted from either end, on axis 0 or 1)
 * becomes a Reshape; a permutation, part of an axis or an empty output (a 0 in Reshape's target
 * would copy a dim) stays a Gather. Outputs equal level 0's
 * (the Gather's own kernel) exactly. */
KN_TEST(opt_gather_of_whole_axis_as_reshape) {
    for (int k = 0; k <= 7; k++) {
        gar_case = k;
        kiln_session *s = compare_levels(build_gather_whole_axis, 1, 0);
        if (!s) continue;
        const bool becomes = k != 3 && k != 5 && k != 7;
        CHECK_MSG(count_op(s, "", "Gather") == !becomes, "case %d: %d Gathers", k, count_op(s, "", "Gather"));
        /* a Reshape to x's own shape changes nothing and goes (remove_noops) */
        CHECK_EQ_INT(count_op(s, "", "Reshape"), becomes && k != 6 ? 1 : 0);
        kiln_session_destroy(s);
    }
    gar_case = 0;
}

/* ------------------------------------------------------------------ drop_zero_rnn_states */

/* What the zero states of the recurrent nodes are made of (rnn_zero_case):
 *   0: PyTorch's run-time zeros: Slice(ConstantOfShape(Concat([2], Unsqueeze(Gather(Shape(x), 1)),
 *      [H]), value rnn_fill)) for the LSTM's initial_h and initial_c, ConstantOfShape(..) with no
 *      value attribute (default 0) for the GRU's initial_h, Expand(zero initializer, ..) for the
 *      RNN's;
 *   1: the LSTM's initial_h is a graph input (fed by the caller), the rest as in 0;
 *   2: the LSTM's initial_h is an initializer of zeros that is also a graph input (overridable).
 * x is float[5, batch, 4] with batch symbolic; hidden size 3. */
static int rnn_zero_case;
static float rnn_fill;

#define RNN_T 5
#define RNN_I 4
#define RNN_H 3
#define RNN_BATCH 2 /* the batch the tests run at */

static unsigned char *build_zero_state_rnns(size_t *size) {
    tmb b;
    tmb_init(&b, 14);
    const int64_t xd[3] = {RNN_T, -1, RNN_I};
    const char *const xs[3] = {NULL, "batch", NULL};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, xd, xs);
    /* the batch dim at run time */
    const int64_t one = 1, zero = 0, two = 2, hid = RNN_H;
    int shape = tmb_value(&b, "shape"), batch = tmb_value(&b, "batch"), batch1 = tmb_value(&b, "batch1");
    tmb_node(&b, "Shape", (int[]){x}, 1, shape);
    int gn = tmb_node(&b, "Gather", (int[]){shape, tmb_const_i64(&b, "one", &one, 1, true)}, 2, batch);
    tmb_int(&b, gn, "axis", 0);
    tmb_node(&b, "Unsqueeze", (int[]){batch, tmb_const_i64(&b, "axes0", &zero, 1, false)}, 2, batch1);
    int c_two = tmb_const_i64(&b, "two", &two, 1, false), c_one = tmb_const_i64(&b, "one1", &one, 1, false);
    int c_hid = tmb_const_i64(&b, "hid", &hid, 1, false);
    int dims2 = tmb_value(&b, "dims2"), dims1 = tmb_value(&b, "dims1");
    tmb_int(&b, tmb_node(&b, "Concat", (int[]){c_two, batch1, c_hid}, 3, dims2), "axis", 0);
    tmb_int(&b, tmb_node(&b, "Concat", (int[]){c_one, batch1, c_hid}, 3, dims1), "axis", 0);

    /* LSTM: h and c sliced from one ConstantOfShape [2, batch, H] of rnn_fill */
    int zeros = tmb_value(&b, "zeros");
    int cs = tmb_node(&b, "ConstantOfShape", (int[]){dims2}, 1, zeros);
    kn_tensor *fill = NULL;
    kn_tensor_new(KILN_DTYPE_FLOAT, 1, (int64_t[]){1}, &fill);
    ((float *)fill->data)[0] = rnn_fill;
    kn_model_own_tensor(b.m, fill);
    tmb_attr(&b, cs, "value", KN_ATTR_TENSOR)->t = fill;
    int s0 = tmb_const_i64(&b, "s0", &zero, 1, false), s1 = tmb_const_i64(&b, "s1", &one, 1, false);
    int s2 = tmb_const_i64(&b, "s2", &two, 1, false);
    int h0 = tmb_value(&b, "h0"), c0 = tmb_value(&b, "c0");
    tmb_node(&b, "Slice", (int[]){zeros, s0, s1, s0}, 4, h0);
    tmb_node(&b, "Slice", (int[]){zeros, s1, s2, s0}, 4, c0);
    if (rnn_zero_case == 1) {
        const char *const hs[3] = {NULL, "batch", NULL};
        h0 = tmb_input(&b, "h_in", KILN_DTYPE_FLOAT, 3, (int64_t[]){1, -1, RNN_H}, hs);
    } else if (rnn_zero_case == 2) {
        kn_tensor *z = NULL;
        kn_tensor_new(KILN_DTYPE_FLOAT, 3, (int64_t[]){1, RNN_BATCH, RNN_H}, &z);
        h0 = tmb_const_tensor(&b, "h_init", z);
        b.g->values[h0].is_graph_input = true;
    }
    int lw = tmb_const(&b, "lw", 3, (int64_t[]){1, 4 * RNN_H, RNN_I}, 0.5f);
    int lr = tmb_const(&b, "lr", 3, (int64_t[]){1, 4 * RNN_H, RNN_H}, 0.5f);
    int lb = tmb_const(&b, "lb", 2, (int64_t[]){1, 8 * RNN_H}, 0.5f);
    int ly = tmb_value(&b, "lstm_y");
    tmb_int(&b, tmb_node(&b, "LSTM", (int[]){x, lw, lr, lb, -1, h0, c0}, 7, ly), "hidden_size", RNN_H);
    tmb_output(&b, ly);

    /* GRU: initial_h a ConstantOfShape [1, batch, H] with no value attribute */
    int gz = tmb_value(&b, "gru_h0");
    tmb_node(&b, "ConstantOfShape", (int[]){dims1}, 1, gz);
    int gw = tmb_const(&b, "gw", 3, (int64_t[]){1, 3 * RNN_H, RNN_I}, 0.5f);
    int gr = tmb_const(&b, "gr", 3, (int64_t[]){1, 3 * RNN_H, RNN_H}, 0.5f);
    int gb = tmb_const(&b, "gb", 2, (int64_t[]){1, 6 * RNN_H}, 0.5f);
    int gy = tmb_value(&b, "gru_y");
    tmb_int(&b, tmb_node(&b, "GRU", (int[]){x, gw, gr, gb, -1, gz}, 6, gy), "hidden_size", RNN_H);
    tmb_output(&b, gy);

    /* RNN: initial_h an Expand of a [1, 1, H] initializer of zeros */
    kn_tensor *z = NULL;
    kn_tensor_new(KILN_DTYPE_FLOAT, 3, (int64_t[]){1, 1, RNN_H}, &z);
    int rz = tmb_const_tensor(&b, "rnn_zero", z), rh0 = tmb_value(&b, "rnn_h0");
    tmb_node(&b, "Expand", (int[]){rz, dims1}, 2, rh0);
    int rw = tmb_const(&b, "rw", 3, (int64_t[]){1, RNN_H, RNN_I}, 0.5f);
    int rr = tmb_const(&b, "rr", 3, (int64_t[]){1, RNN_H, RNN_H}, 0.5f);
    int ry = tmb_value(&b, "rnn_y");
    tmb_int(&b, tmb_node(&b, "RNN", (int[]){x, rw, rr, -1, -1, rh0}, 6, ry), "hidden_size", RNN_H);
    tmb_output(&b, ry);
    return tmb_finish(&b, size);
}

static kiln_session *zero_state_session(int level) {
    size_t size = 0;
    unsigned char *m = build_zero_state_rnns(&size);
    if (!m) return NULL;
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, level);
    kiln_session_options_set_intra_op_threads(o, 1);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_append_provider(o, "cpu", NULL, NULL, 0);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(m, size, NULL, o, &s);
    CHECK_MSG(st == KILN_OK, "session at level %d: %s", level, kiln_last_error());
    kiln_session_options_destroy(o);
    free(m);
    return s;
}

/* Input `i` of the live `op` node of the session's graph (-2 when there is no such node). */
static int rnn_input(const kiln_session *s, const char *op, int i) {
    const kn_graph *g = s->model->graph;
    for (int k = 0; k < g->n_nodes; k++)
        if (!g->nodes[k].dead && !strcmp(g->nodes[k].op_type, op))
            return i < g->nodes[k].n_inputs ? g->nodes[k].inputs[i] : -1;
    return -2;
}

/* Runs both sessions at batch RNN_BATCH on the same random x (and a nonzero h_in when the graph
 * takes it); every output agrees within tol. */
static void check_rnn_outputs(kiln_session *ref, kiln_session *opt, double tol) {
    kn_tensor *in[2] = {0};
    const char *names[2] = {"x", NULL};
    kn_tensor_new(KILN_DTYPE_FLOAT, 3, (int64_t[]){RNN_T, RNN_BATCH, RNN_I}, &in[0]);
    unsigned seed = 99u;
    for (int64_t k = 0; k < kn_tensor_count(in[0]); k++) {
        seed = seed * 1103515245u + 12345u;
        kn_tensor_set_f64(in[0], k, (double)((seed >> 8) & 0xffff) / 65536.0 * 2.0 - 1.0);
    }
    int n = 1;
    if (rnn_zero_case == 1) {
        names[1] = "h_in";
        kn_tensor_new(KILN_DTYPE_FLOAT, 3, (int64_t[]){1, RNN_BATCH, RNN_H}, &in[1]);
        for (int64_t k = 0; k < kn_tensor_count(in[1]); k++) kn_tensor_set_f64(in[1], k, 0.25 * (double)(k + 1));
        n = 2;
    }
    size_t no = kiln_session_output_count(ref);
    CHECK_EQ_INT((int)no, 3);
    kn_tensor *a[3] = {0}, *b[3] = {0};
    CHECK_STATUS(kiln_session_run(ref, names, in, (size_t)n, NULL, no, a), KILN_OK);
    CHECK_STATUS(kiln_session_run(opt, names, in, (size_t)n, NULL, no, b), KILN_OK);
    for (size_t o = 0; o < no && o < 3; o++) {
        if (!a[o] || !b[o]) continue;
        CHECK_EQ_INT((int)kn_tensor_count(a[o]), (int)kn_tensor_count(b[o]));
        CHECK_EQ_INT((int)kn_tensor_count(a[o]), RNN_T * RNN_BATCH * RNN_H);
        double worst = 0;
        for (int64_t i = 0; i < kn_tensor_count(a[o]) && i < kn_tensor_count(b[o]); i++)
            worst = fmax(worst, fabs(kn_tensor_get_f64(a[o], i) - kn_tensor_get_f64(b[o], i)));
        CHECK_MSG(worst <= tol, "case %d output %zu: worst difference %g (tol %g)", rnn_zero_case, o, worst, tol);
        kn_tensor_free(a[o]);
        kn_tensor_free(b[o]);
    }
    for (int i = 0; i < n; i++) kn_tensor_free(in[i]);
}

/* PyTorch's zero states for LSTM, GRU and RNN (built at run time from the symbolic batch) are
 * omitted at level 1, the ConstantOfShape/Shape chains that built them are gone, and the outputs
 * equal level 0's (the fill 0 and -0). */
KN_TEST(opt_drop_zero_rnn_states) {
    const float fills[2] = {0.0f, -0.0f};
    for (int f = 0; f < 2; f++) {
        rnn_zero_case = 0;
        rnn_fill = fills[f];
        kiln_session *ref = zero_state_session(0), *opt = zero_state_session(1);
        if (ref && opt) {
            CHECK(rnn_input(ref, "LSTM", 5) >= 0);
            CHECK(rnn_input(ref, "LSTM", 6) >= 0);
            CHECK_EQ_INT(rnn_input(opt, "LSTM", 5), -1);
            CHECK_EQ_INT(rnn_input(opt, "LSTM", 6), -1);
            CHECK_EQ_INT(rnn_input(opt, "GRU", 5), -1);
            CHECK_EQ_INT(rnn_input(opt, "RNN", 5), -1);
            CHECK_EQ_INT(count_op(opt, "", "ConstantOfShape"), 0);
            CHECK_EQ_INT(count_op(opt, "", "Shape"), 0);
            CHECK_EQ_INT(count_op(opt, "", "Slice"), 0);
            CHECK_EQ_INT(count_op(opt, "", "Expand"), 0);
            CHECK_EQ_INT(live_nodes(opt), 3);
            check_rnn_outputs(ref, opt, 1e-5);
        }
        kiln_session_destroy(ref);
        kiln_session_destroy(opt);
    }
    rnn_fill = 0;
}

/* Not dropped: an initial state of ConstantOfShape(value 1.0), one the caller feeds (a graph
 * input), and an initializer of zeros that is also a graph input (the caller may override it). The
 * other recurrent nodes' zero states still go; the outputs equal level 0's. */
KN_TEST(opt_regression_nonzero_or_fed_rnn_state_kept) {
    for (int k = 0; k < 3; k++) {
        rnn_zero_case = k;
        rnn_fill = k == 0 ? 1.0f : 0.0f;
        kiln_session *ref = zero_state_session(0), *opt = zero_state_session(1);
        if (ref && opt) {
            int h = rnn_input(opt, "LSTM", 5);
            CHECK_MSG(h >= 0, "case %d: the LSTM's initial_h was dropped", k);
            if (k == 0) {
                CHECK_MSG(rnn_input(opt, "LSTM", 6) >= 0, "the LSTM's initial_c (ones) was dropped");
                CHECK_EQ_INT(count_op(opt, "", "ConstantOfShape"), 1);
            } else {
                CHECK_EQ_INT(rnn_input(opt, "LSTM", 6), -1);
                if (h >= 0) CHECK(!strcmp(opt->model->graph->values[h].name, k == 1 ? "h_in" : "h_init"));
            }
            CHECK_EQ_INT(rnn_input(opt, "GRU", 5), -1);
            CHECK_EQ_INT(rnn_input(opt, "RNN", 5), -1);
            check_rnn_outputs(ref, opt, 1e-5);
        }
        kiln_session_destroy(ref);
        kiln_session_destroy(opt);
    }
    rnn_zero_case = 0;
    rnn_fill = 0;
}

/* ------------------------------------------------------------------ StackedLSTM */

/* X [7, 3, 10] -> LSTM(16) -> Squeeze(1) -> LSTM(12) [-> Squeeze(1) -> LSTM(8)], the top layer's
 * Y, Y_h, Y_c the outputs. stacked_case: 0 two layers; 1 three; 2 the lower layer's Y_h is also an
 * output; 3 the lower layer is bidirectional (its Y reshaped to [7, 3, 2H] for the top); 4 the top
 * layer clips; 5 the lower layer's Y is also an output. */
static int stacked_case;

static kn_model *build_stacked(void) {
    tmb b;
    tmb_init_onnx(&b, 14);
    int64_t xd[3] = {7, 3, 10};
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 3, xd, NULL);
    int layers = stacked_case == 1 ? 3 : 2;
    static const int64_t hidden[3] = {16, 12, 8};
    int64_t in = 10;
    for (int l = 0; l < layers; l++) {
        int dirs = stacked_case == 3 && l == 0 ? 2 : 1;
        int64_t H = hidden[l], wd[3] = {dirs, 4 * H, in}, rd[3] = {dirs, 4 * H, H}, bd[2] = {dirs, 8 * H},
                hd[3] = {dirs, 3, H};
        char n[32];
        int ins[7];
        ins[0] = x;
        snprintf(n, sizeof n, "W%d", l);
        ins[1] = tmb_const_range(&b, n, KILN_DTYPE_FLOAT, 3, wd, -0.4f, 0.4f);
        snprintf(n, sizeof n, "R%d", l);
        ins[2] = tmb_const_range(&b, n, KILN_DTYPE_FLOAT, 3, rd, -0.4f, 0.4f);
        snprintf(n, sizeof n, "B%d", l);
        ins[3] = tmb_const_range(&b, n, KILN_DTYPE_FLOAT, 2, bd, -0.5f, 0.5f);
        ins[4] = -1;
        snprintf(n, sizeof n, "h%d", l);
        ins[5] = tmb_const_range(&b, n, KILN_DTYPE_FLOAT, 3, hd, -0.8f, 0.8f);
        snprintf(n, sizeof n, "c%d", l);
        ins[6] = tmb_const_range(&b, n, KILN_DTYPE_FLOAT, 3, hd, -0.8f, 0.8f);
        int outs[3];
        for (int o = 0; o < 3; o++) {
            snprintf(n, sizeof n, "%s%d", o == 0 ? "Y" : o == 1 ? "Y_h" : "Y_c", l);
            outs[o] = kn_graph_add_value(b.g, n);
        }
        snprintf(n, sizeof n, "lstm%d", l);
        b.last = kn_graph_add_node(b.g, n, "LSTM", "", ins, 7, outs, 3);
        b.g->nodes[b.last].opset = 14;
        tmb_op_int(&b, "hidden_size", H);
        if (dirs == 2) tmb_op_attr(&b, "direction", KN_ATTR_STRING)->s = "bidirectional";
        if (stacked_case == 4 && l == layers - 1) tmb_op_float(&b, "clip", 0.5f);
        if (l == layers - 1) {
            for (int o = 0; o < 3; o++) tmb_output(&b, outs[o]);
            break;
        }
        if (stacked_case == 2) tmb_output(&b, outs[1]);
        if (stacked_case == 5) tmb_output(&b, outs[0]);
        snprintf(n, sizeof n, "S%d", l);
        if (dirs == 2) {
            int64_t shape[3] = {7, 3, 2 * H};
            snprintf(n, sizeof n, "shape%d", l);
            int r[2] = {outs[0], kn_graph_add_value(b.g, n)};
            kn_tensor *t;
            int64_t sd[1] = {3};
            kn_tensor_new(KILN_DTYPE_INT64, 1, sd, &t);
            memcpy(t->data, shape, sizeof shape);
            kn_model_own_tensor(b.m, t);
            b.g->values[r[1]].constant = t;
            kn_type_set_tensor(&b.g->values[r[1]].type, KILN_DTYPE_INT64, 1, sd);
            snprintf(n, sizeof n, "S%d", l);
            x = tmb_op(&b, "Reshape", r, 2, n);
            in = 2 * H;
        } else {
            int64_t one = 1, sd[1] = {1};
            kn_tensor *t;
            kn_tensor_new(KILN_DTYPE_INT64, 1, sd, &t);
            memcpy(t->data, &one, sizeof one);
            kn_model_own_tensor(b.m, t);
            snprintf(n, sizeof n, "axes%d", l);
            int sq[2] = {outs[0], kn_graph_add_value(b.g, n)};
            b.g->values[sq[1]].constant = t;
            kn_type_set_tensor(&b.g->values[sq[1]].type, KILN_DTYPE_INT64, 1, sd);
            snprintf(n, sizeof n, "S%d", l);
            x = tmb_op(&b, "Squeeze", sq, 2, n);
            in = H;
        }
    }
    return b.m;
}

static int stacked_layers(const kiln_session *s) {
    const kn_graph *g = s->model->graph;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && !strcmp(g->nodes[i].op_type, "StackedLSTM"))
            return kn_stacked_lstm_layers(g->nodes[i].n_inputs);
    return 0;
}

/* LSTM -> Squeeze -> LSTM (-> Squeeze -> LSTM) becomes one kiln.StackedLSTM of two (three) layers,
 * whose CPU kernel gives what the layers give (level 0, every output). */
KN_TEST(opt_stacked_lstm_matches_unfused) {
    for (stacked_case = 0; stacked_case < 2; stacked_case++) {
        kiln_session *opt = compare_levels(build_stacked, 2, 1e-5);
        if (opt) {
            CHECK_EQ_INT(count_op(opt, "kiln", "StackedLSTM"), 1);
            CHECK_EQ_INT(stacked_layers(opt), stacked_case == 1 ? 3 : 2);
            CHECK_EQ_INT(count_op(opt, "", "LSTM"), 0);
            CHECK_EQ_INT(count_op(opt, "", "Squeeze"), 0);
        }
        kiln_session_destroy(opt);
    }
    stacked_case = 0;
}

/* Not fused: a lower layer whose Y_h or Y is read outside the stack (the fused node gives only the
 * top layer's), a bidirectional lower layer, a top layer that clips. Outputs equal level 0's. */
KN_TEST(opt_regression_stacked_lstm_not_formed) {
    static const int cases[4] = {2, 3, 4, 5};
    for (int k = 0; k < 4; k++) {
        stacked_case = cases[k];
        kiln_session *opt = compare_levels(build_stacked, 3, 1e-5);
        if (opt) {
            CHECK_MSG(count_op(opt, "kiln", "StackedLSTM") == 0, "case %d: StackedLSTM formed", stacked_case);
            CHECK_EQ_INT(count_op(opt, "", "LSTM"), 2);
        }
        kiln_session_destroy(opt);
    }
    stacked_case = 0;
}

/* ------------------------------------------------------------------ products over rows */

/* x [2, 5, 8] -> Reshape [-1, 8] -> Gemm (W [8, 8], transB, bias) -> Reshape to x's shape -> + x,
 * as torch's dynamo exports write a Linear with a residual (aten addmm). rows_symbolic: x's batch
 * is symbolic and the shape back is Shape(x), known only at run time. */
static int rows_symbolic;

static kn_model *build_rows_gemm_residual(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, (int64_t[]){2, 5, 8}, NULL);
    if (rows_symbolic) b.g->values[x].type.dims[0] = (kn_dim){-1, "batch"};
    int flat_shape = ints_const(&b, "flat_shape", KILN_DTYPE_INT64, 2, (int64_t[]){-1, 8});
    int flat = tmb_op(&b, "Reshape", (int[]){x, flat_shape}, 2, "flat");
    int w = tmb_const_range(&b, "w", KILN_DTYPE_FLOAT, 2, (int64_t[]){8, 8}, -0.5f, 0.5f);
    int bias = tmb_const_range(&b, "bias", KILN_DTYPE_FLOAT, 1, (int64_t[]){8}, -0.5f, 0.5f);
    int y = tmb_op(&b, "Gemm", (int[]){flat, w, bias}, 3, "addmm");
    tmb_op_int(&b, "transB", 1);
    int back = rows_symbolic ? tmb_op(&b, "Shape", &x, 1, "back")
                             : ints_const(&b, "back", KILN_DTYPE_INT64, 3, (int64_t[]){2, 5, 8});
    int r = tmb_op(&b, "Reshape", (int[]){y, back}, 2, "view");
    int out = tmb_op(&b, "Add", (int[]){r, x}, 2, "out");
    tmb_output(&b, out);
    return b.m;
}

/* fuse_matmul_add takes the Gemm, its bias and the residual into one FusedMatMul, with the shapes
 * static (over the rows reshaped) and symbolic (over the rows, the Reshape after it; the residual
 * read as rows): the same outputs as the unfused graph at every batch. */
KN_TEST(opt_gemm_rows_bias_residual) {
    for (rows_symbolic = 0; rows_symbolic < 2; rows_symbolic++) {
        kiln_session *ref = make_session(build_rows_gemm_residual(), 0, NULL);
        kiln_session *s = make_session(build_rows_gemm_residual(), 2, NULL);
        if (ref && s) {
            const int64_t batches[2] = {3, 1};
            for (int i = 0; i < (rows_symbolic ? 2 : 1); i++) {
                sym_batch = batches[i];
                check_same(ref, s, 1e-5);
            }
            sym_batch = 3;
            CHECK_MSG(count_op(s, "kiln", "FusedMatMul") == 1, "symbolic %d: %d FusedMatMul", rows_symbolic,
                      count_op(s, "kiln", "FusedMatMul"));
            CHECK_MSG(count_op(s, "", "Gemm") == 0 && count_op(s, "", "Add") == 0, "symbolic %d: Gemm %d, Add %d left",
                      rows_symbolic, count_op(s, "", "Gemm"), count_op(s, "", "Add"));
        }
        kiln_session_destroy(ref);
        kiln_session_destroy(s);
    }
    rows_symbolic = 0;
}

/* ------------------------------------------------------------------ packed QKV into views */

/* One packed projection x [2, 5, 8] @ W [8, 24] taken apart into Q, K, V of 2 heads of 4 and
 * attention over them, as exporters write it: packed_mode 0 as timm's ViT (Reshape [2, 5, 3, 2, 4],
 * Transpose to [3, 2, 2, 5, 4], Split on axis 0, Squeeze); 1 as GPT-2's exports (Slices of the
 * columns, each Reshaped and Transposed into heads); 2 as 1 with the axis given as -1, steps
 * given and the last range ending past the dim. The output goes back through Transpose and
 * Reshape. With packed_symbolic the batch dim of x is symbolic: the shapes' batch comes from
 * Shape, Gather and Concat as torch's exporter writes it (mode 0) or as Reshape's 0 (1 and 2). */
static int packed_mode, packed_symbolic;

/* A Reshape target [batch, rest...]: constant, or with a symbolic batch read from x's shape */
static int packed_shape(tmb *b, int x, const char *name, int n, const int64_t *dims) {
    int64_t d[KILN_MAX_RANK];
    memcpy(d, dims, sizeof(int64_t) * (size_t)n);
    if (!packed_symbolic || packed_mode != 0) {
        if (packed_symbolic) d[0] = 0;
        return ints_const(b, name, KILN_DTYPE_INT64, n, d);
    }
    char nm[64];
    snprintf(nm, sizeof nm, "%s_shape", name);
    int shape = tmb_op(b, "Shape", &x, 1, nm);
    snprintf(nm, sizeof nm, "%s_i0", name);
    int i0 = ints_const(b, nm, KILN_DTYPE_INT64, 1, (int64_t[]){0});
    snprintf(nm, sizeof nm, "%s_batch", name);
    int batch = tmb_op(b, "Gather", (int[]){shape, i0}, 2, nm);
    snprintf(nm, sizeof nm, "%s_rest", name);
    int rest = ints_const(b, nm, KILN_DTYPE_INT64, n - 1, d + 1);
    int out = tmb_op(b, "Concat", (int[]){batch, rest}, 2, name);
    tmb_op_int(b, "axis", 0);
    return out;
}

static kn_model *build_packed_attention(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, (int64_t[]){2, 5, 8}, NULL);
    if (packed_symbolic) b.g->values[x].type.dims[0] = (kn_dim){-1, "batch"};
    int w = tmb_const_range(&b, "w", KILN_DTYPE_FLOAT, 2, (int64_t[]){8, 24}, -0.5f, 0.5f);
    int qkv = tmb_op(&b, "MatMul", (int[]){x, w}, 2, "qkv");
    int q, k, v;
    if (packed_mode == 0) {
        int shp = packed_shape(&b, x, "shp5", 5, (int64_t[]){2, 5, 3, 2, 4});
        int r = tmb_op(&b, "Reshape", (int[]){qkv, shp}, 2, "qkv5");
        int t = tmb_op(&b, "Transpose", &r, 1, "qkv_heads");
        tmb_op_ints(&b, "perm", (int64_t[]){2, 0, 3, 1, 4}, 5);
        int sizes = ints_const(&b, "sizes", KILN_DTYPE_INT64, 3, (int64_t[]){1, 1, 1});
        int parts[3] = {kn_graph_add_value(b.g, "p0"), kn_graph_add_value(b.g, "p1"), kn_graph_add_value(b.g, "p2")};
        b.last = kn_graph_add_node(b.g, "split", "Split", "", (int[]){t, sizes}, 2, parts, 3);
        b.g->nodes[b.last].opset = 17;
        tmb_op_int(&b, "axis", 0);
        int ax = ints_const(&b, "ax0", KILN_DTYPE_INT64, 1, (int64_t[]){0});
        const char *names[3] = {"q", "k", "v"};
        int *dst[3] = {&q, &k, &v};
        for (int i = 0; i < 3; i++) *dst[i] = tmb_op(&b, "Squeeze", (int[]){parts[i], ax}, 2, names[i]);
    } else {
        int shp = packed_shape(&b, x, "shp4", 4, (int64_t[]){2, 5, 2, 4});
        int axes = ints_const(&b, "axes", KILN_DTYPE_INT64, 1, (int64_t[]){packed_mode == 2 ? -1 : 2});
        int step = ints_const(&b, "step", KILN_DTYPE_INT64, 1, (int64_t[]){1});
        const char *names[3] = {"q", "k", "v"};
        int *dst[3] = {&q, &k, &v};
        for (int i = 0; i < 3; i++) {
            char sn[16], en[16], cn[16], rn[16];
            snprintf(sn, sizeof sn, "start%d", i), snprintf(en, sizeof en, "end%d", i);
            snprintf(cn, sizeof cn, "cols%d", i), snprintf(rn, sizeof rn, "rows%d", i);
            int st = ints_const(&b, sn, KILN_DTYPE_INT64, 1, (int64_t[]){8 * i});
            /* mode 2: the last range ends past the dim (clamped to it) */
            int en_v = ints_const(&b, en, KILN_DTYPE_INT64, 1, (int64_t[]){packed_mode == 2 && i == 2 ? 1000 : 8 * (i + 1)});
            int cols = packed_mode == 2 ? tmb_op(&b, "Slice", (int[]){qkv, st, en_v, axes, step}, 5, cn)
                                        : tmb_op(&b, "Slice", (int[]){qkv, st, en_v, axes}, 4, cn);
            int rs = tmb_op(&b, "Reshape", (int[]){cols, shp}, 2, rn);
            *dst[i] = tmb_op(&b, "Transpose", &rs, 1, names[i]);
            tmb_op_ints(&b, "perm", (int64_t[]){0, 2, 1, 3}, 4);
        }
    }
    int kt = tmb_op(&b, "Transpose", &k, 1, "kt");
    tmb_op_ints(&b, "perm", (int64_t[]){0, 1, 3, 2}, 4);
    int s = tmb_op(&b, "MatMul", (int[]){q, kt}, 2, "s");
    int sc = tmb_scalar(&b, "sc", KILN_DTYPE_FLOAT, 0.5);
    s = tmb_op(&b, "Mul", (int[]){s, sc}, 2, "ss");
    int p = tmb_op(&b, "Softmax", &s, 1, "p");
    tmb_op_int(&b, "axis", -1);
    int y = tmb_op(&b, "MatMul", (int[]){p, v}, 2, "yh");
    int yt = tmb_op(&b, "Transpose", &y, 1, "yt");
    tmb_op_ints(&b, "perm", (int64_t[]){0, 2, 1, 3}, 4);
    int back = packed_shape(&b, x, "back", 3, (int64_t[]){2, 5, 8});
    int out = tmb_op(&b, "Reshape", (int[]){yt, back}, 2, "y");
    tmb_output(&b, out);
    return b.m;
}

/* fold_attention_views reads Q, K and V straight from the packed projection through Split or
 * Slice (the Splits, Slices, Reshapes and Transposes go), with the unfused graph's outputs. */
KN_TEST(opt_packed_qkv_read_in_place) {
    for (packed_mode = 0; packed_mode < 3; packed_mode++) {
        kiln_session *s = compare_levels(build_packed_attention, 2, 1e-5);
        if (!s) continue;
        CHECK_MSG(count_op(s, "kiln", "Attention") == 1, "mode %d: %d Attention nodes", packed_mode,
                  count_op(s, "kiln", "Attention"));
        const char *gone[4] = {"Split", "Slice", "Transpose", "Reshape"};
        for (int i = 0; i < 4; i++)
            CHECK_MSG(count_op(s, "", gone[i]) == 0, "mode %d: %d %s nodes left", packed_mode, count_op(s, "", gone[i]), gone[i]);
        kiln_session_destroy(s);
    }
}

/* The same with x's batch symbolic: the views' batch dim is read from the tensor at run time
 * (KN_ATTN_VIEW_SYMBOLIC), so one session runs every batch, each like the unfused graph. */
KN_TEST(opt_packed_qkv_symbolic_batch) {
    packed_symbolic = 1;
    for (packed_mode = 0; packed_mode < 3; packed_mode++) {
        kiln_session *ref = make_session(build_packed_attention(), 0, NULL);
        kiln_session *s = make_session(build_packed_attention(), 2, NULL);
        if (!ref || !s) {
            kiln_session_destroy(ref);
            kiln_session_destroy(s);
            continue;
        }
        const int64_t batches[3] = {3, 1, 4};
        for (int i = 0; i < 3; i++) {
            sym_batch = batches[i];
            check_same(ref, s, 1e-5);
        }
        sym_batch = 3;
        CHECK_MSG(count_op(s, "kiln", "Attention") == 1, "mode %d: %d Attention nodes", packed_mode,
                  count_op(s, "kiln", "Attention"));
        const char *gone[4] = {"Split", "Slice", "Transpose", "Reshape"};
        for (int i = 0; i < 4; i++)
            CHECK_MSG(count_op(s, "", gone[i]) == 0, "mode %d: %d %s nodes left", packed_mode, count_op(s, "", gone[i]), gone[i]);
        const kn_graph *g = s->model->graph;
        for (int n = 0; n < g->n_nodes; n++) {
            if (g->nodes[n].dead || strcmp(g->nodes[n].op_type, "Attention")) continue;
            for (int o = 0; o < 4; o++) {
                kn_attn_view v;
                char why[160];
                CHECK_MSG(kn_attn_view_get(&g->nodes[n], o, &v, why, sizeof why) == 1, "mode %d: no %s", packed_mode,
                          kn_attn_view_name(o));
                CHECK_MSG(v.dims[0] == KN_ATTN_VIEW_SYMBOLIC(0), "mode %d: %s's batch dim is %lld", packed_mode,
                          kn_attn_view_name(o), (long long)v.dims[0]);
            }
        }
        kiln_session_destroy(ref);
        kiln_session_destroy(s);
    }
    packed_symbolic = 0;
}

/* ------------------------------------------------------------------ sink_expand */

/* expand_case 0: transformers' attention mask: Greater(m, 0) [2,1,1,5] -> Expand to [2,1,4,5] ->
 * Where(., 0, -1e4) -> Add to the [2,3,4,5] scores -> Softmax: the Expand moves after the Where
 * and then goes into the Add's broadcast. 1: Add(Expand(x [1,5] -> [4,5]), y [1,5]): the Add's
 * broadcast alone would give [1,5], so the Expand stays, after the Add. 2: an Expand read by two
 * nodes stays where it is. */
static int expand_case;
static kn_model *build_expand(void) {
    tmb b;
    tmb_init_onnx(&b, 17);
    if (expand_case == 0) {
        int m = tmb_input(&b, "m", KILN_DTYPE_FLOAT, 4, (int64_t[]){2, 1, 1, 5}, NULL);
        int s = tmb_input(&b, "s", KILN_DTYPE_FLOAT, 4, (int64_t[]){2, 3, 4, 5}, NULL);
        int zero = tmb_scalar(&b, "zero", KILN_DTYPE_FLOAT, 0), low = tmb_scalar(&b, "low", KILN_DTYPE_FLOAT, -1e4);
        int gt = tmb_op(&b, "Greater", (int[]){m, zero}, 2, "gt");
        int shape = ints_const(&b, "shape", KILN_DTYPE_INT64, 4, (int64_t[]){2, 1, 4, 5});
        int e = tmb_op(&b, "Expand", (int[]){gt, shape}, 2, "e");
        int w = tmb_op(&b, "Where", (int[]){e, zero, low}, 3, "w");
        int a = tmb_op(&b, "Add", (int[]){s, w}, 2, "a");
        int y = tmb_op(&b, "Softmax", &a, 1, "y");
        tmb_output(&b, y);
    } else if (expand_case == 1) {
        int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){1, 5}, NULL);
        int z = tmb_input(&b, "z", KILN_DTYPE_FLOAT, 2, (int64_t[]){1, 5}, NULL);
        int shape = ints_const(&b, "shape", KILN_DTYPE_INT64, 2, (int64_t[]){4, 5});
        int e = tmb_op(&b, "Expand", (int[]){x, shape}, 2, "e");
        int a = tmb_op(&b, "Add", (int[]){e, z}, 2, "a");
        int y = tmb_op(&b, "Exp", &a, 1, "y");
        tmb_output(&b, y);
    } else {
        int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){1, 5}, NULL);
        int shape = ints_const(&b, "shape", KILN_DTYPE_INT64, 2, (int64_t[]){4, 5});
        int e = tmb_op(&b, "Expand", (int[]){x, shape}, 2, "e");
        tmb_output(&b, tmb_op(&b, "Neg", &e, 1, "n"));
        tmb_output(&b, tmb_op(&b, "Abs", &e, 1, "ab"));
    }
    return b.m;
}

KN_TEST(opt_sink_expand) {
    for (expand_case = 0; expand_case <= 2; expand_case++) {
        kiln_session *s = compare_levels(build_expand, 1, 0);
        if (!s) continue;
        const kn_graph *g = s->model->graph;
        CHECK_EQ_INT(count_op(s, "", "Expand"), expand_case == 0 ? 0 : 1);
        for (int i = 0; i < g->n_nodes; i++) {
            const kn_node *n = &g->nodes[i];
            if (n->dead) continue;
            const kn_type *t = &g->values[n->outputs[0]].type;
            /* the Where and the Add now compute on the small tensor */
            if (expand_case == 0 && !strcmp(n->op_type, "Where"))
                CHECK_MSG(t->rank == 4 && t->dims[2].value == 1, "Where's output [%lld,%lld,%lld,%lld]",
                          (long long)t->dims[0].value, (long long)t->dims[1].value, (long long)t->dims[2].value,
                          (long long)t->dims[3].value);
            if (expand_case == 1 && !strcmp(n->op_type, "Add"))
                CHECK_MSG(t->rank == 2 && t->dims[0].value == 1, "Add's output rows %lld", (long long)t->dims[0].value);
        }
        kiln_session_destroy(s);
    }
    expand_case = 0;
}

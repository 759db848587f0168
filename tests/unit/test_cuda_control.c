/* GPU tests of If, Loop and Scan on the CUDA backend (cuda_ops_control.c over the executor's
 * driver, exec/control_flow.c): each model runs with provider cuda alone (so a node that would need
 * the CPU fails the session) and with provider cpu, at levels 0 and 3, several times with changing
 * inputs, every output compared (type, shape, values). The CPU kernels they are compared with run
 * the same driver over host memory and are checked against ONNX Runtime by the ONNX node tests
 * (test_if, test_loop11, test_scan_sum, test_scan9_*, and the expanded functions with If, Loop and
 * Scan bodies).
 *
 * Also whether a session records its runs into CUDA graphs: not when an If's condition or a Loop's
 * trip count or condition is computed at run time (the host reads it back; the runs must stay right
 * run after run, branches changing), yes when they come from constants and shapes, and for a Scan
 * (nothing read back): then run 0 warms up, run 1 is recorded and every later run replays it.
 * Skipped without a device. */
#include "unit.h"

#include "backend/backend.h"
#include "exec/graph_run.h"
#include "exec/session.h"
#include "ir/tensor.h"
#include "test_model_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ building */

static int last_node;

/* value `out` = op(in...) in the builder's current graph */
static int op(tmb *b, const char *type, const int *in, int nin, const char *out) {
    int v = tmb_value(b, out);
    last_node = tmb_node(b, type, in, nin, v);
    return v;
}

static kn_attr *attr(tmb *b, const char *name, kn_attr_type type) {
    kn_node *n = &b->g->nodes[last_node];
    kn_attr *a = kn_arena_alloc(&b->m->arena, sizeof(kn_attr) * (size_t)(n->n_attrs + 1));
    if (n->n_attrs) memcpy(a, n->attrs, sizeof(kn_attr) * (size_t)n->n_attrs);
    memset(&a[n->n_attrs], 0, sizeof(kn_attr));
    a[n->n_attrs].name = kn_arena_strdup(&b->m->arena, name);
    a[n->n_attrs].type = type;
    n->attrs = a;
    return &a[n->n_attrs++];
}
static void attr_int(tmb *b, const char *name, int64_t v) { attr(b, name, KN_ATTR_INT)->i = v; }
static void attr_ints(tmb *b, const char *name, const int64_t *v, int n) {
    kn_attr *a = attr(b, name, KN_ATTR_INTS);
    a->ints = kn_arena_alloc(&b->m->arena, sizeof(int64_t) * (size_t)n);
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
    a->n = n;
}
static void attr_graph(tmb *b, const char *name, kn_graph *g) { attr(b, name, KN_ATTR_GRAPH)->g = g; }

/* A body of the current graph (the builder then builds in it until `leave`). */
static kn_graph *enter(tmb *b, const char *name) {
    kn_graph *g = NULL;
    kn_graph_new(b->m, b->g, name, &g);
    b->g = g;
    return g;
}
static void leave(tmb *b, kn_graph *parent) {
    kn_graph_recount(b->g);
    b->g = parent;
}

/* The current body's reference to a value of an enclosing graph. */
static int outer(tmb *b, const char *name) {
    int v = kn_graph_add_value(b->g, name);
    b->g->values[v].is_outer = true;
    return v;
}

static int const_f(tmb *b, const char *name, float v) {
    kn_tensor *t;
    kn_tensor_new(KILN_DTYPE_FLOAT, 0, NULL, &t);
    ((float *)t->data)[0] = v;
    return tmb_const_tensor(b, name, t);
}
static int const_bool(tmb *b, const char *name, bool v) {
    kn_tensor *t;
    kn_tensor_new(KILN_DTYPE_BOOL, 0, NULL, &t);
    ((unsigned char *)t->data)[0] = v;
    return tmb_const_tensor(b, name, t);
}

/* ------------------------------------------------------------------ running and comparing */

static kiln_session *session(const unsigned char *m, size_t size, const char *provider, int level) {
    kiln_session_options *o;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, level);
    kiln_session_options_set_cache(o, 0, NULL);
    const char *k[1] = {"tuning"}, *v[1] = {"heuristic"};
    bool cuda = !strcmp(provider, "cuda");
    kiln_session_options_append_provider(o, provider, cuda ? k : NULL, cuda ? v : NULL, cuda ? 1 : 0);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(m, size, NULL, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "session (provider %s, level %d): %s", provider, level, kiln_last_error());
    return s;
}

static kiln_tensor *tensor_f(int rank, const int64_t *dims, uint32_t seed, float scale, float shift) {
    kiln_tensor *t = NULL;
    kiln_tensor_create(KILN_DTYPE_FLOAT, dims, rank, &t);
    float *p = kiln_tensor_data(t);
    for (int64_t i = 0; i < kiln_tensor_element_count(t); i++) p[i] = scale * tmb_rand(&seed) + shift;
    return t;
}

static kiln_tensor *scalar_i64(int64_t v) {
    kiln_tensor *t = NULL;
    kiln_tensor_create(KILN_DTYPE_INT64, NULL, 0, &t);
    *(int64_t *)kiln_tensor_data(t) = v;
    return t;
}

static kiln_tensor *scalar_f(float v) {
    kiln_tensor *t = NULL;
    kiln_tensor_create(KILN_DTYPE_FLOAT, NULL, 0, &t);
    *(float *)kiln_tensor_data(t) = v;
    return t;
}

/* got (the provider tested) against want (the CPU at level 0): type, shape, values. */
static void same(const kiln_tensor *got, const kiln_tensor *want, const char *what) {
    if (!got || !want) {
        kn_unit_fail(__FILE__, __LINE__, "%s: no output", what);
        return;
    }
    char g[256], w[256];
    kn_tensor_describe(got, g, sizeof g);
    kn_tensor_describe(want, w, sizeof w);
    if (strcmp(g, w)) {
        kn_unit_fail(__FILE__, __LINE__, "%s: %s, %s on the CPU at level 0", what, g, w);
        return;
    }
    for (int64_t i = 0; i < kn_tensor_count(want); i++) {
        double a = kn_tensor_get_f64(got, i), b = kn_tensor_get_f64(want, i);
        if (!(fabs(a - b) <= 1e-5 + 1e-5 * fabs(b))) {
            kn_unit_fail(__FILE__, __LINE__, "%s: element %lld is %.8g, %.8g on the CPU at level 0", what, (long long)i,
                         a, b);
            return;
        }
    }
}

#define MAX_IO 4

/* One model's inputs for run r (the caller's names; tensors the test frees). */
typedef void (*make_inputs_fn)(int r, kiln_tensor **in);

typedef struct cf_model {
    const char *what;
    const char *inputs[MAX_IO];
    int n_in, n_out, runs;
    make_inputs_fn make;
    int captured; /* 1: runs recorded into a graph (with fixed input shapes); 0: not */
} cf_model;

/* Runs the model with `provider` alone at levels 0 and 3 and with cpu at level 0, `runs` times each
 * with the inputs of each run, compares every output and, for cuda, checks graph capture. */
static void check_model(const cf_model *c, const unsigned char *m, size_t size, const char *provider) {
    bool cuda = !strcmp(provider, "cuda");
    for (int level = 0; level <= 3; level += 3) {
        kiln_session *cpu = session(m, size, "cpu", 0);
        kiln_session *gpu = cpu ? session(m, size, provider, level) : NULL;
        if (!gpu) {
            kiln_session_destroy(cpu);
            continue;
        }
        bool enabled = false;
        kn_graph_run_stats(gpu, &enabled, NULL, NULL);
        if (cuda)
            CHECK_MSG(enabled == (c->captured == 1), "%s, level %d: runs %s captured, expected %s (see the info log)",
                      c->what, level, enabled ? "are" : "are not", c->captured ? "captured" : "uncaptured");
        for (int r = 0; r < c->runs; r++) {
            kiln_tensor *in[MAX_IO] = {0}, *want[MAX_IO] = {0}, *got[MAX_IO] = {0};
            c->make(r, in);
            kiln_status sc = kiln_session_run(cpu, c->inputs, in, (size_t)c->n_in, NULL, (size_t)c->n_out, want);
            CHECK_MSG(sc == KILN_OK, "%s, level %d, run %d, cpu: %s", c->what, level, r, kiln_last_error());
            kiln_status sg = kiln_session_run(gpu, c->inputs, in, (size_t)c->n_in, NULL, (size_t)c->n_out, got);
            CHECK_MSG(sg == KILN_OK, "%s, level %d, run %d, %s: %s", c->what, level, r, provider, kiln_last_error());
            if (sc == KILN_OK && sg == KILN_OK)
                for (int o = 0; o < c->n_out; o++) {
                    char what[160];
                    snprintf(what, sizeof what, "%s, %s level %d, run %d, output %d", c->what, provider, level, r, o);
                    same(got[o], want[o], what);
                }
            for (int i = 0; i < MAX_IO; i++) {
                kiln_tensor_destroy(in[i]);
                kiln_tensor_destroy(want[i]);
                kiln_tensor_destroy(got[i]);
            }
        }
        int graphs = 0;
        uint64_t launches = 0;
        kn_graph_run_stats(gpu, NULL, &graphs, &launches);
        if (!cuda)
            ;
        else if (c->captured == 1)
            CHECK_MSG(graphs == 1 && launches == (uint64_t)(c->runs - 1),
                      "%s, level %d: %d graphs, %llu launches (expected 1 and %d)", c->what, level, graphs,
                      (unsigned long long)launches, c->runs - 1);
        else
            CHECK_MSG(graphs == 0 && launches == 0, "%s, level %d: %d graphs, %llu launches (expected none)", c->what,
                      level, graphs, (unsigned long long)launches);
        kiln_session_destroy(gpu);
        kiln_session_destroy(cpu);
    }
}

/* ------------------------------------------------------------------ If */

/* X, Y [2,3]; cond = ReduceSum(X) > 0 (on the device); If(cond) gives A, B, C:
 *   then: A = X * Y + X, B = Relu(Y), C = a constant of the branch
 *   else: A = X - Y,     B = Y (the outer value itself), C = Abs(X)
 * Z = A * 2 after it. Outputs Z, B, C. Both branches read X and Y from the main graph. */
static unsigned char *if_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    kn_graph *main_g = b.g;
    int64_t d[2] = {2, 3};
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 2, d, NULL);
    tmb_input(&b, "Y", KILN_DTYPE_FLOAT, 2, d, NULL);
    int s = op(&b, "ReduceSum", &x, 1, "S");
    attr_int(&b, "keepdims", 0);
    int cond = op(&b, "Greater", (int[]){s, const_f(&b, "zero", 0.0f)}, 2, "cond");
    int outs[3] = {tmb_value(&b, "A"), tmb_value(&b, "B"), tmb_value(&b, "C")};
    int node = kn_graph_add_node(b.g, "if", "If", "", &cond, 1, outs, 3);

    kn_graph *then_g = enter(&b, "then");
    int tx = outer(&b, "X"), ty = outer(&b, "Y");
    int tm = op(&b, "Mul", (int[]){tx, ty}, 2, "t_mul");
    tmb_output(&b, op(&b, "Add", (int[]){tm, tx}, 2, "t_a"));
    tmb_output(&b, op(&b, "Relu", &ty, 1, "t_b"));
    tmb_output(&b, tmb_const(&b, "t_c", 2, d, 1.0f));
    leave(&b, main_g);

    kn_graph *else_g = enter(&b, "else");
    int ex = outer(&b, "X"), ey = outer(&b, "Y");
    tmb_output(&b, op(&b, "Sub", (int[]){ex, ey}, 2, "e_a"));
    tmb_output(&b, ey);
    tmb_output(&b, op(&b, "Abs", &ex, 1, "e_c"));
    leave(&b, main_g);

    last_node = node;
    attr_graph(&b, "then_branch", then_g);
    attr_graph(&b, "else_branch", else_g);
    int z = op(&b, "Mul", (int[]){outs[0], const_f(&b, "two", 2.0f)}, 2, "Z");
    tmb_output(&b, z);
    tmb_output(&b, outs[1]);
    tmb_output(&b, outs[2]);
    return tmb_finish(&b, size);
}

/* X shifted up on even runs (then), down on odd ones (else) */
static void if_inputs(int r, kiln_tensor **in) {
    int64_t d[2] = {2, 3};
    in[0] = tensor_f(2, d, 10u + (uint32_t)r, 1.0f, r % 2 ? -3.0f : 3.0f);
    in[1] = tensor_f(2, d, 50u + (uint32_t)r, 2.0f, 0.0f);
}

KN_TEST(cuda_control_if_branches_outer_reads) {
    NEED_GPU();
    setenv("KILN_CUDA_CONTROL_FLOW", "1", 1); /* on, whatever the environment says */
    size_t size = 0;
    unsigned char *m = if_model(&size);
    if (!m) return;
    cf_model c = {"If on a device condition", {"X", "Y"}, 2, 3, 6, if_inputs, 0};
    check_model(&c, m, size, "cuda");
    free(m);
}

/* X [4]; If(ReduceSum(X) > 0):
 *   then: If(ReduceMax(X) > 2): then X * 3, else X + W (W a main-graph constant, read two levels
 *         down)
 *   else: Abs(X) */
static unsigned char *nested_if_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    kn_graph *main_g = b.g;
    int64_t d[1] = {4};
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 1, d, NULL);
    tmb_const(&b, "W", 1, d, 1.0f);
    int s = op(&b, "ReduceSum", &x, 1, "S");
    attr_int(&b, "keepdims", 0);
    int cond = op(&b, "Greater", (int[]){s, const_f(&b, "zero", 0.0f)}, 2, "cond");
    int out = tmb_value(&b, "out");
    int node = kn_graph_add_node(b.g, "outer_if", "If", "", &cond, 1, &out, 1);

    kn_graph *then_g = enter(&b, "then");
    int tx = outer(&b, "X");
    int mx = op(&b, "ReduceMax", &tx, 1, "t_max");
    attr_int(&b, "keepdims", 0);
    int c2 = op(&b, "Greater", (int[]){mx, const_f(&b, "t_two", 2.0f)}, 2, "t_cond");
    int t_out = tmb_value(&b, "t_out");
    int inner = kn_graph_add_node(b.g, "inner_if", "If", "", &c2, 1, &t_out, 1);
    kn_graph *inner_then = enter(&b, "inner_then");
    tmb_output(&b, op(&b, "Mul", (int[]){outer(&b, "X"), const_f(&b, "it_three", 3.0f)}, 2, "it_out"));
    leave(&b, then_g);
    kn_graph *inner_else = enter(&b, "inner_else");
    tmb_output(&b, op(&b, "Add", (int[]){outer(&b, "X"), outer(&b, "W")}, 2, "ie_out"));
    leave(&b, then_g);
    last_node = inner;
    attr_graph(&b, "then_branch", inner_then);
    attr_graph(&b, "else_branch", inner_else);
    tmb_output(&b, t_out);
    leave(&b, main_g);

    kn_graph *else_g = enter(&b, "else");
    tmb_output(&b, op(&b, "Abs", (int[]){outer(&b, "X")}, 1, "e_out"));
    leave(&b, main_g);

    last_node = node;
    attr_graph(&b, "then_branch", then_g);
    attr_graph(&b, "else_branch", else_g);
    tmb_output(&b, out);
    return tmb_finish(&b, size);
}

/* run 0: sum > 0, max < 2 (then, else); run 1: a large element (then, then); run 2: negative (else) */
static void nested_if_inputs(int r, kiln_tensor **in) {
    int64_t d[1] = {4};
    in[0] = tensor_f(1, d, 7u + (uint32_t)r, 0.3f, r % 3 == 2 ? -1.0f : 1.0f);
    if (r % 3 == 1) ((float *)kiln_tensor_data(in[0]))[2] = 5.0f;
}

KN_TEST(cuda_control_nested_if) {
    NEED_GPU();
    setenv("KILN_CUDA_CONTROL_FLOW", "1", 1); /* on, whatever the environment says */
    size_t size = 0;
    unsigned char *m = nested_if_model(&size);
    if (!m) return;
    cf_model c = {"nested If", {"X"}, 1, 1, 6, nested_if_inputs, 0};
    check_model(&c, m, size, "cuda");
    free(m);
}

/* X [2,3]; cond = Shape(X)[0] > 1, a host value from the shape alone; If(cond): then X * W + K (W a
 * main-graph constant, K the branch's own), else X - W. The condition is the same on every run with
 * these shapes, so the runs are recorded, the branch taken unrolled into the graph. */
static unsigned char *shape_if_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    kn_graph *main_g = b.g;
    int64_t d[2] = {2, 3}, kd[1] = {3}, zero = 0, one = 1;
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 2, d, NULL);
    tmb_const(&b, "W", 2, d, 1.0f);
    int sh = op(&b, "Shape", &x, 1, "sh");
    int d0 = op(&b, "Gather", (int[]){sh, tmb_const_i64(&b, "i0", &zero, 1, true)}, 2, "d0");
    attr_int(&b, "axis", 0);
    int cond = op(&b, "Greater", (int[]){d0, tmb_const_i64(&b, "one", &one, 1, true)}, 2, "cond");
    int out = tmb_value(&b, "Y");
    int node = kn_graph_add_node(b.g, "if", "If", "", &cond, 1, &out, 1);
    kn_graph *then_g = enter(&b, "then");
    int tm = op(&b, "Mul", (int[]){outer(&b, "X"), outer(&b, "W")}, 2, "t_mul");
    tmb_output(&b, op(&b, "Add", (int[]){tm, tmb_const(&b, "K", 1, kd, 1.0f)}, 2, "t_out"));
    leave(&b, main_g);
    kn_graph *else_g = enter(&b, "else");
    tmb_output(&b, op(&b, "Sub", (int[]){outer(&b, "X"), outer(&b, "W")}, 2, "e_out"));
    leave(&b, main_g);
    last_node = node;
    attr_graph(&b, "then_branch", then_g);
    attr_graph(&b, "else_branch", else_g);
    tmb_output(&b, out);
    return tmb_finish(&b, size);
}

static void shape_if_inputs(int r, kiln_tensor **in) {
    int64_t d[2] = {2, 3};
    in[0] = tensor_f(2, d, 90u + (uint32_t)r, 1.0f, 0.0f);
}

KN_TEST(cuda_control_if_on_shapes_is_captured) {
    NEED_GPU();
    setenv("KILN_CUDA_CONTROL_FLOW", "1", 1); /* on, whatever the environment says */
    size_t size = 0;
    unsigned char *m = shape_if_model(&size);
    if (!m) return;
    cf_model c = {"If on a shape condition", {"X"}, 1, 1, 5, shape_if_inputs, 1};
    check_model(&c, m, size, "cuda");
    free(m);
}

/* X [2,3]; sh = Shape(X); If(sh[0] > 1): then sh[[1, 0]], else sh (branches over shape values
 * only); Y = Relu(Reshape(X, that)). The If is a shape computation: on the CPU with its branches,
 * its output a host value the Reshape reads without waiting for the device, and the runs are
 * recorded. */
static unsigned char *shape_only_if_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    kn_graph *main_g = b.g;
    int64_t d[2] = {2, 3}, zero = 0, one = 1, swap[2] = {1, 0};
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 2, d, NULL);
    int sh = op(&b, "Shape", &x, 1, "sh");
    int d0 = op(&b, "Gather", (int[]){sh, tmb_const_i64(&b, "i0", &zero, 1, true)}, 2, "d0");
    attr_int(&b, "axis", 0);
    int cond = op(&b, "Greater", (int[]){d0, tmb_const_i64(&b, "one", &one, 1, true)}, 2, "cond");
    int shape = tmb_value(&b, "shape");
    int node = kn_graph_add_node(b.g, "if", "If", "", &cond, 1, &shape, 1);
    kn_graph *then_g = enter(&b, "then");
    tmb_output(&b, op(&b, "Gather", (int[]){outer(&b, "sh"), tmb_const_i64(&b, "swap", swap, 2, false)}, 2, "t_out"));
    attr_int(&b, "axis", 0);
    leave(&b, main_g);
    kn_graph *else_g = enter(&b, "else");
    tmb_output(&b, op(&b, "Identity", (int[]){outer(&b, "sh")}, 1, "e_out"));
    leave(&b, main_g);
    last_node = node;
    attr_graph(&b, "then_branch", then_g);
    attr_graph(&b, "else_branch", else_g);
    int r = op(&b, "Reshape", (int[]){x, shape}, 2, "R");
    tmb_output(&b, op(&b, "Relu", &r, 1, "Y"));
    return tmb_finish(&b, size);
}

KN_TEST(cuda_control_if_over_shapes_is_a_shape_computation) {
    NEED_GPU();
    setenv("KILN_CUDA_CONTROL_FLOW", "1", 1); /* on, whatever the environment says */
    size_t size = 0;
    unsigned char *m = shape_only_if_model(&size);
    if (!m) return;
    cf_model c = {"If over shape values", {"X"}, 1, 1, 5, shape_if_inputs, 1};
    check_model(&c, m, size, "cuda");
    free(m);
}

/* ------------------------------------------------------------------ Loop */

/* Loop(M, true, X) with X [3]; body (i, c, v): v' = v + float(i), s = v' * 2 (scan output),
 * c' = ReduceSum(v') < limit (computed on the device, read back after each iteration; limit a
 * main-graph input read from the body). Outputs V (final v) and S (the stacked s). M and limit
 * change from run to run: ended by the trip count, by the condition, after one iteration, after
 * none. */
static unsigned char *loop_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    kn_graph *main_g = b.g;
    int64_t d[1] = {3};
    int m = tmb_input(&b, "M", KILN_DTYPE_INT64, 0, NULL, NULL);
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 1, d, NULL);
    tmb_input(&b, "limit", KILN_DTYPE_FLOAT, 0, NULL, NULL);
    int cond = const_bool(&b, "cond0", true);
    int outs[2] = {tmb_value(&b, "V"), tmb_value(&b, "S")};
    int node = kn_graph_add_node(b.g, "loop", "Loop", "", (int[]){m, cond, x}, 3, outs, 2);

    kn_graph *body = enter(&b, "body");
    int i = tmb_input(&b, "i", KILN_DTYPE_INT64, 0, NULL, NULL);
    tmb_input(&b, "c_in", KILN_DTYPE_BOOL, 0, NULL, NULL);
    int v = tmb_input(&b, "v_in", KILN_DTYPE_FLOAT, 1, d, NULL);
    int fi = op(&b, "Cast", &i, 1, "fi");
    attr_int(&b, "to", KILN_DTYPE_FLOAT);
    int v2 = op(&b, "Add", (int[]){v, fi}, 2, "v_out");
    int sum = op(&b, "ReduceSum", &v2, 1, "sum");
    attr_int(&b, "keepdims", 0);
    int c2 = op(&b, "Less", (int[]){sum, outer(&b, "limit")}, 2, "c_out");
    int s = op(&b, "Mul", (int[]){v2, const_f(&b, "b_two", 2.0f)}, 2, "s_out");
    tmb_output(&b, c2);
    tmb_output(&b, v2);
    tmb_output(&b, s);
    leave(&b, main_g);

    last_node = node;
    attr_graph(&b, "body", body);
    tmb_output(&b, outs[0]);
    tmb_output(&b, outs[1]);
    return tmb_finish(&b, size);
}

static void loop_inputs(int r, kiln_tensor **in) {
    /* (M, limit): 5 by the trip count; 10 stopped by the condition after 4 (sums about 0, 3, 9,
     * 18 past 12); none; one (the condition false at once); 7 by the trip count again */
    static const int64_t trips[5] = {5, 10, 0, 3, 7};
    static const float limits[5] = {1000.0f, 12.0f, 100.0f, -100.0f, 1000.0f};
    int64_t d[1] = {3};
    in[0] = scalar_i64(trips[r % 5]);
    in[1] = tensor_f(1, d, 30u + (uint32_t)r, 0.5f, 0.0f);
    in[2] = scalar_f(limits[r % 5]);
}

KN_TEST(cuda_control_loop_trip_count_condition_scan_outputs) {
    NEED_GPU();
    setenv("KILN_CUDA_CONTROL_FLOW", "1", 1); /* on, whatever the environment says */
    size_t size = 0;
    unsigned char *m = loop_model(&size);
    if (!m) return;
    cf_model c = {"Loop with a run-time trip count and condition", {"M", "X", "limit"}, 3, 2, 5, loop_inputs, 0};
    check_model(&c, m, size, "cuda");
    free(m);
}

/* Loop(4, true, X) with X [2,3], as exporters write a for loop: a constant trip count, the
 * condition passed through (Identity); body (i, c, v): v' = v * W + float(i) (W a main-graph
 * constant), s = Relu(v') stacked. Nothing is computed at run time that the host reads: recorded,
 * the four iterations unrolled. */
static unsigned char *const_loop_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    kn_graph *main_g = b.g;
    int64_t d[2] = {2, 3}, four = 4;
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 2, d, NULL);
    tmb_const(&b, "W", 2, d, 1.0f);
    int m = tmb_const_i64(&b, "M", &four, 1, true);
    int cond = const_bool(&b, "cond0", true);
    int outs[2] = {tmb_value(&b, "V"), tmb_value(&b, "S")};
    int node = kn_graph_add_node(b.g, "loop", "Loop", "", (int[]){m, cond, x}, 3, outs, 2);

    kn_graph *body = enter(&b, "body");
    int i = tmb_input(&b, "i", KILN_DTYPE_INT64, 0, NULL, NULL);
    int c = tmb_input(&b, "c_in", KILN_DTYPE_BOOL, 0, NULL, NULL);
    int v = tmb_input(&b, "v_in", KILN_DTYPE_FLOAT, 2, d, NULL);
    int c2 = op(&b, "Identity", &c, 1, "c_out");
    int fi = op(&b, "Cast", &i, 1, "fi");
    attr_int(&b, "to", KILN_DTYPE_FLOAT);
    int vw = op(&b, "Mul", (int[]){v, outer(&b, "W")}, 2, "vw");
    int v2 = op(&b, "Add", (int[]){vw, fi}, 2, "v_out");
    int s = op(&b, "Relu", &v2, 1, "s_out");
    tmb_output(&b, c2);
    tmb_output(&b, v2);
    tmb_output(&b, s);
    leave(&b, main_g);

    last_node = node;
    attr_graph(&b, "body", body);
    tmb_output(&b, outs[0]);
    tmb_output(&b, outs[1]);
    return tmb_finish(&b, size);
}

static void const_loop_inputs(int r, kiln_tensor **in) {
    int64_t d[2] = {2, 3};
    in[0] = tensor_f(2, d, 60u + (uint32_t)r, 1.0f, 0.0f);
}

KN_TEST(cuda_control_loop_constant_trip_count_is_captured) {
    NEED_GPU();
    setenv("KILN_CUDA_CONTROL_FLOW", "1", 1); /* on, whatever the environment says */
    size_t size = 0;
    unsigned char *m = const_loop_model(&size);
    if (!m) return;
    cf_model c = {"Loop with a constant trip count", {"X"}, 1, 2, 5, const_loop_inputs, 1};
    check_model(&c, m, size, "cuda");
    free(m);
}

/* ------------------------------------------------------------------ Scan */

/* Scan (opset 16) over X1 [3,4] along axis 0 forward and X2 [4,3] along axis -1 in reverse, with a
 * state [4]: body (s, x1, x2): s' = s + x1 * x2, y1 = s' * 1.5 (stacked on axis 0, forward),
 * y2 = x1 - x2 (stacked on axis -1, in reverse). Outputs the final state, Y1 [3,4], Y2 [4,3]. */
static unsigned char *scan_model(size_t *size) {
    tmb b;
    tmb_init(&b, 16);
    kn_graph *main_g = b.g;
    int64_t sd[1] = {4}, d1[2] = {3, 4}, d2[2] = {4, 3};
    int s0 = tmb_input(&b, "S0", KILN_DTYPE_FLOAT, 1, sd, NULL);
    int x1 = tmb_input(&b, "X1", KILN_DTYPE_FLOAT, 2, d1, NULL);
    int x2 = tmb_input(&b, "X2", KILN_DTYPE_FLOAT, 2, d2, NULL);
    int outs[3] = {tmb_value(&b, "SF"), tmb_value(&b, "Y1"), tmb_value(&b, "Y2")};
    int node = kn_graph_add_node(b.g, "scan", "Scan", "", (int[]){s0, x1, x2}, 3, outs, 3);

    kn_graph *body = enter(&b, "body");
    int s = tmb_input(&b, "s_in", KILN_DTYPE_FLOAT, 1, sd, NULL);
    int a = tmb_input(&b, "x1", KILN_DTYPE_FLOAT, 1, sd, NULL);
    int c = tmb_input(&b, "x2", KILN_DTYPE_FLOAT, 1, sd, NULL);
    int p = op(&b, "Mul", (int[]){a, c}, 2, "p");
    int s2 = op(&b, "Add", (int[]){s, p}, 2, "s_out");
    int y1 = op(&b, "Mul", (int[]){s2, const_f(&b, "k", 1.5f)}, 2, "y1");
    int y2 = op(&b, "Sub", (int[]){a, c}, 2, "y2");
    tmb_output(&b, s2);
    tmb_output(&b, y1);
    tmb_output(&b, y2);
    leave(&b, main_g);

    last_node = node;
    attr_graph(&b, "body", body);
    attr_int(&b, "num_scan_inputs", 2);
    attr_ints(&b, "scan_input_axes", (int64_t[]){0, -1}, 2);
    attr_ints(&b, "scan_input_directions", (int64_t[]){0, 1}, 2);
    attr_ints(&b, "scan_output_axes", (int64_t[]){0, -1}, 2);
    attr_ints(&b, "scan_output_directions", (int64_t[]){0, 1}, 2);
    for (int o = 0; o < 3; o++) tmb_output(&b, outs[o]);
    return tmb_finish(&b, size);
}

static void scan_inputs(int r, kiln_tensor **in) {
    int64_t sd[1] = {4}, d1[2] = {3, 4}, d2[2] = {4, 3};
    in[0] = tensor_f(1, sd, 11u + (uint32_t)r, 1.0f, 0.0f);
    in[1] = tensor_f(2, d1, 21u + (uint32_t)r, 1.0f, 0.0f);
    in[2] = tensor_f(2, d2, 31u + (uint32_t)r, 1.0f, 0.0f);
}

KN_TEST(cuda_control_scan_axes_directions_is_captured) {
    NEED_GPU();
    setenv("KILN_CUDA_CONTROL_FLOW", "1", 1); /* on, whatever the environment says */
    size_t size = 0;
    unsigned char *m = scan_model(&size);
    if (!m) return;
    cf_model c = {"Scan", {"S0", "X1", "X2"}, 3, 3, 5, scan_inputs, 1};
    check_model(&c, m, size, "cuda");
    free(m);
}

/* The same Scan without graphs (graphs=0 is covered by the uncaptured runs of the other tests);
 * and a forward-only Scan over int64 data (8-byte elements, a 2-D state) along axis 1. */
static unsigned char *scan_int_model(size_t *size) {
    tmb b;
    tmb_init(&b, 16);
    kn_graph *main_g = b.g;
    int64_t sd[2] = {2, 2}, xd[3] = {2, 5, 2};
    int s0 = tmb_input(&b, "S0", KILN_DTYPE_INT64, 2, sd, NULL);
    int x = tmb_input(&b, "X", KILN_DTYPE_INT64, 3, xd, NULL);
    int outs[2] = {tmb_value(&b, "SF"), tmb_value(&b, "Y")};
    int node = kn_graph_add_node(b.g, "scan", "Scan", "", (int[]){s0, x}, 2, outs, 2);
    kn_graph *body = enter(&b, "body");
    int s = tmb_input(&b, "s_in", KILN_DTYPE_INT64, 2, sd, NULL);
    int a = tmb_input(&b, "x", KILN_DTYPE_INT64, 2, sd, NULL);
    int s2 = op(&b, "Add", (int[]){s, a}, 2, "s_out");
    int y = op(&b, "Mul", (int[]){s2, a}, 2, "y");
    tmb_output(&b, s2);
    tmb_output(&b, y);
    leave(&b, main_g);
    last_node = node;
    attr_graph(&b, "body", body);
    attr_int(&b, "num_scan_inputs", 1);
    attr_ints(&b, "scan_input_axes", (int64_t[]){1}, 1);
    attr_ints(&b, "scan_output_axes", (int64_t[]){2}, 1);
    tmb_output(&b, outs[0]);
    tmb_output(&b, outs[1]);
    return tmb_finish(&b, size);
}

static kiln_tensor *tensor_i64(int rank, const int64_t *dims, int64_t base) {
    kiln_tensor *t = NULL;
    kiln_tensor_create(KILN_DTYPE_INT64, dims, rank, &t);
    int64_t *p = kiln_tensor_data(t);
    for (int64_t i = 0; i < kiln_tensor_element_count(t); i++) p[i] = base + (i * 7) % 11 - 5;
    return t;
}

static void scan_int_inputs(int r, kiln_tensor **in) {
    int64_t sd[2] = {2, 2}, xd[3] = {2, 5, 2};
    in[0] = tensor_i64(2, sd, r);
    in[1] = tensor_i64(3, xd, 3 * r);
}

KN_TEST(cuda_control_scan_int64_inner_axis) {
    NEED_GPU();
    setenv("KILN_CUDA_CONTROL_FLOW", "1", 1); /* on, whatever the environment says */
    size_t size = 0;
    unsigned char *m = scan_int_model(&size);
    if (!m) return;
    cf_model c = {"Scan over int64 along axis 1", {"S0", "X"}, 2, 2, 4, scan_int_inputs, 1};
    check_model(&c, m, size, "cuda");
    free(m);
}

/* ------------------------------------------------------------------ without a GPU */

/* The models above, on the CPU at level 3 against level 0 (the optimiser in their bodies) and as
 * the references the GPU tests use: this part runs everywhere. */
KN_TEST(control_flow_models_cpu_levels) {
    typedef unsigned char *(*build_fn)(size_t *);
    static const build_fn builds[7] = {if_model,   nested_if_model,  shape_if_model, shape_only_if_model,
                                       loop_model, const_loop_model, scan_model};
    const cf_model cases[7] = {
        {"If on a device condition", {"X", "Y"}, 2, 3, 4, if_inputs, 0},
        {"nested If", {"X"}, 1, 1, 3, nested_if_inputs, 0},
        {"If on a shape condition", {"X"}, 1, 1, 2, shape_if_inputs, 0},
        {"If over shape values", {"X"}, 1, 1, 2, shape_if_inputs, 0},
        {"Loop with a run-time trip count and condition", {"M", "X", "limit"}, 3, 2, 5, loop_inputs, 0},
        {"Loop with a constant trip count", {"X"}, 1, 2, 2, const_loop_inputs, 0},
        {"Scan", {"S0", "X1", "X2"}, 3, 3, 2, scan_inputs, 0},
    };
    for (int k = 0; k < 7; k++) {
        size_t size = 0;
        unsigned char *m = builds[k](&size);
        if (!m) continue;
        check_model(&cases[k], m, size, "cpu");
        free(m);
    }
    size_t size = 0;
    unsigned char *m = scan_int_model(&size);
    if (m) {
        cf_model c = {"Scan over int64 along axis 1", {"S0", "X"}, 2, 2, 2, scan_int_inputs, 0};
        check_model(&c, m, size, "cpu");
        free(m);
    }
}

/* Static types the CUDA kernels' selection needs: a Loop body whose inputs the model leaves untyped
 * (as ONNX functions expanded into bodies are) gets the iteration's int64 and the condition's bool
 * scalars and the carried value's element type; an If whose condition folds from shapes keeps the
 * taken branch's element type (a CastLike to it then has a type to cast to). Runs everywhere. */
static int untyped_input(tmb *b, const char *name) {
    int v = kn_graph_add_value(b->g, name);
    b->g->values[v].is_graph_input = true;
    b->g->inputs = realloc(b->g->inputs, sizeof(int) * (size_t)(b->g->n_inputs + 1));
    b->g->inputs[b->g->n_inputs++] = v;
    return v;
}

static unsigned char *untyped_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    kn_graph *main_g = b.g;
    int64_t d[1] = {3}, two = 2, zero = 0;
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 1, d, NULL);
    int m = tmb_const_i64(&b, "M", &two, 1, true);
    int cond = const_bool(&b, "cond0", true);
    int v = tmb_value(&b, "V");
    int node = kn_graph_add_node(b.g, "loop", "Loop", "", (int[]){m, cond, x}, 3, &v, 1);
    kn_graph *body = enter(&b, "body");
    untyped_input(&b, "i");
    int c = untyped_input(&b, "c_in");
    int vi = untyped_input(&b, "v_in");
    tmb_output(&b, op(&b, "Identity", &c, 1, "c_out"));
    tmb_output(&b, op(&b, "Add", (int[]){vi, vi}, 2, "v_out"));
    leave(&b, main_g);
    last_node = node;
    attr_graph(&b, "body", body);
    /* If(Shape(X)[0] > 0): then the float V, else a float constant; Y = CastLike(Shape(X), that) */
    int sh = op(&b, "Shape", &x, 1, "sh");
    int d0 = op(&b, "Gather", (int[]){sh, tmb_const_i64(&b, "i0", &zero, 1, true)}, 2, "d0");
    attr_int(&b, "axis", 0);
    int pos = op(&b, "Greater", (int[]){d0, tmb_const_i64(&b, "zero", &zero, 1, true)}, 2, "pos");
    int f = tmb_value(&b, "F");
    int ifn = kn_graph_add_node(b.g, "if", "If", "", &pos, 1, &f, 1);
    kn_graph *then_g = enter(&b, "then");
    tmb_output(&b, op(&b, "Identity", (int[]){outer(&b, "V")}, 1, "t_out"));
    leave(&b, main_g);
    kn_graph *else_g = enter(&b, "else");
    tmb_output(&b, op(&b, "Identity", (int[]){const_f(&b, "e_c", 1.0f)}, 1, "e_out"));
    leave(&b, main_g);
    last_node = ifn;
    attr_graph(&b, "then_branch", then_g);
    attr_graph(&b, "else_branch", else_g);
    tmb_output(&b, op(&b, "CastLike", (int[]){sh, f}, 2, "Y"));
    tmb_output(&b, v);
    return tmb_finish(&b, size);
}

KN_TEST(control_flow_body_types_for_device_kernels) {
    size_t size = 0;
    unsigned char *m = untyped_model(&size);
    if (!m) return;
    kiln_session *s = session(m, size, "cpu", 0);
    if (s) {
        const kn_graph *g = s->model->graph;
        const kn_graph *body = NULL;
        int f = kn_graph_find_value(g, "F");
        for (int i = 0; i < g->n_nodes; i++)
            if (!strcmp(g->nodes[i].op_type, "Loop")) body = kn_node_attr(&g->nodes[i], "body")->g;
        CHECK(body && body->n_inputs == 3);
        if (body && body->n_inputs == 3) {
            const kn_type *t0 = &body->values[body->inputs[0]].type, *t1 = &body->values[body->inputs[1]].type,
                          *t2 = &body->values[body->inputs[2]].type;
            CHECK_MSG(t0->kind == KN_TYPE_TENSOR && t0->dtype == KILN_DTYPE_INT64 && t0->rank == 0,
                      "the iteration number is not an int64 scalar");
            CHECK_MSG(t1->kind == KN_TYPE_TENSOR && t1->dtype == KILN_DTYPE_BOOL && t1->rank == 0,
                      "the condition is not a bool scalar");
            CHECK_MSG(t2->kind == KN_TYPE_TENSOR && t2->dtype == KILN_DTYPE_FLOAT, "the carried value is not float");
        }
        CHECK_MSG(f >= 0 && g->values[f].type.dtype == KILN_DTYPE_FLOAT, "the If's output lost its element type");
        int y = kn_graph_find_value(g, "Y");
        CHECK_MSG(y >= 0 && g->values[y].type.dtype == KILN_DTYPE_FLOAT, "CastLike to the If's output is not float");
        /* and it runs: V = 4 X, Y = float(Shape(X)) */
        const char *names[1] = {"X"};
        int64_t d[1] = {3};
        kiln_tensor *in[1] = {tensor_f(1, d, 5u, 1.0f, 0.0f)}, *out[2] = {0};
        kiln_status st = kiln_session_run(s, names, in, 1, NULL, 2, out);
        CHECK_MSG(st == KILN_OK, "run: %s", kiln_last_error());
        if (st == KILN_OK) {
            const float *xv = kiln_tensor_data(in[0]), *yv = kiln_tensor_data(out[0]), *vv = kiln_tensor_data(out[1]);
            CHECK(kiln_tensor_dtype(out[0]) == KILN_DTYPE_FLOAT && kiln_tensor_element_count(out[0]) == 1 && yv[0] == 3.0f);
            for (int i = 0; i < 3; i++) CHECK_NEAR(vv[i], 4.0f * xv[i], 1e-6);
        }
        kiln_tensor_destroy(in[0]);
        kiln_tensor_destroy(out[0]);
        kiln_tensor_destroy(out[1]);
    }
    kiln_session_destroy(s);
    free(m);
}

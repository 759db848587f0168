/* kiln.SqueezeExcite (src/ops/fused.h) and the pass that forms it (opt pass fuse_squeeze_excite):
 * squeeze-excite blocks built by hand in the forms exporters write (EfficientNet's 1x1 Conv with
 * SiLU and Sigmoid, MobileNetV3's Relu and HardSigmoid, ReduceMean for the pool, the products as
 * Gemm or MatMul on [N, C], the gate on either side of the Mul, channels last), each run at every
 * level and compared with level 0 (the unfused operators' kernels); the lookalikes the pass must
 * leave alone; and the CPU kernel against a double-precision evaluation of the definition. */
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/fused_impl.h"
#include "exec/exec.h"
#include "exec/session.h"
#include "ir/graph.h"
#include "ir/tensor.h"
#include "opt/opt.h"
#include "test_model_builder.h"
#include "test_nodes.h"
#include "unit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ graph builder */

/* test_model_builder.h's optimiser-test builder with this file's seed: its constants' values. */
static void se_builder(tmb *b, int opset) {
    tmb_init_onnx(b, opset);
    b->seed = 4242u;
}

/* A float constant of random values in [-scale, scale). */
static int se_const(tmb *b, const char *name, int rank, const int64_t *dims, float scale) {
    kn_tensor *t = NULL;
    kn_tensor_new(KILN_DTYPE_FLOAT, rank, dims, &t);
    for (int64_t i = 0; i < kn_tensor_count(t); i++) ((float *)t->data)[i] = scale * tmb_rand_ansi(&b->seed);
    return tmb_const_tensor(b, name, t);
}

/* ------------------------------------------------------------------ the blocks */

enum {
    SE_EFFICIENTNET,   /* GAP, Conv + SiLU (Sigmoid, Mul), Conv + Sigmoid, Mul(X, gate) */
    SE_MOBILENET,      /* GAP, Conv + Relu, Conv + HardSigmoid, Mul(gate, X) */
    SE_REDUCE_MEAN,    /* ReduceMean over axes 2, 3 (opset 13: an attribute), Relu / Sigmoid */
    SE_REDUCE_MEAN_18, /* ReduceMean with its axes an input (opset 18), negative axes */
    SE_GEMM,           /* GAP, Flatten, Gemm (transB 1) + Relu, Gemm + Sigmoid, Reshape, Mul */
    SE_MATMUL,         /* ReduceMean (keepdims 0), MatMul + Add + Relu, MatMul + Add + HardSigmoid, Unsqueeze */
    SE_RANK3,          /* a 1-D network: X [N, C, L] */
    SE_NO_BIAS,        /* convolutions without a bias, no inner activation */
    /* lookalikes the pass leaves alone */
    SE_HIDDEN_READ,    /* the inner activation's output is also a graph output */
    SE_POOL_READ,      /* the pooled value is also read by another node */
    SE_GATE_READ,      /* the gate is also a graph output */
    SE_STRIDED,        /* the squeeze convolution has stride 2 (on a 1x1 input: same values, not the form) */
    SE_OTHER_MUL,      /* the gate multiplies another tensor of X's shape, not X */
    SE_CASES
};

static int se_case;
static bool se_symbolic; /* X's batch a symbolic dim */
static const int64_t SE_N = 2, SE_C = 40, SE_M = 10, SE_H = 7, SE_W = 5;

static int conv1x1(tmb *b, int x, int cin, int cout, bool bias, const char *name) {
    char nm[64];
    int64_t wd[4] = {cout, cin, 1, 1}, bd[1] = {cout};
    snprintf(nm, sizeof nm, "%s.w", name);
    int w = se_const(b, nm, 4, wd, 0.5f);
    snprintf(nm, sizeof nm, "%s.b", name);
    int ins[3] = {x, w, bias ? se_const(b, nm, 1, bd, 0.5f) : -1};
    return tmb_op(b, "Conv", ins, bias ? 3 : 2, name);
}

static kn_model *build_se(void) {
    tmb b;
    const int opset = se_case == SE_REDUCE_MEAN_18 ? 18 : 13;
    se_builder(&b, opset);
    const bool rank3 = se_case == SE_RANK3;
    int64_t xd[4] = {SE_N, SE_C, SE_H, SE_W};
    if (rank3) xd[2] = SE_H * SE_W;
    const int rank = rank3 ? 3 : 4;
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, rank, xd, NULL);
    if (se_symbolic) b.g->values[x].type.dims[0] = (kn_dim){-1, "N"};
    int other = se_case == SE_OTHER_MUL ? tmb_input(&b, "z", KILN_DTYPE_FLOAT, rank, xd, NULL) : -1;
    if (other >= 0 && se_symbolic) b.g->values[other].type.dims[0] = (kn_dim){-1, "N"};
    int pooled, gate;
    if (se_case == SE_GEMM || se_case == SE_MATMUL) {
        int flat;
        if (se_case == SE_GEMM) {
            pooled = tmb_op(&b, "GlobalAveragePool", &x, 1, "pool");
            flat = tmb_op(&b, "Flatten", &pooled, 1, "flat");
        } else {
            flat = pooled = tmb_op(&b, "ReduceMean", &x, 1, "pool");
            tmb_op_ints(&b, "axes", (int64_t[]){2, 3}, 2);
            tmb_op_int(&b, "keepdims", 0);
        }
        int h, g;
        if (se_case == SE_GEMM) {
            int64_t w1d[2] = {SE_M, SE_C}, b1d[1] = {SE_M}, w2d[2] = {SE_C, SE_M}, b2d[2] = {1, SE_C};
            int w1 = se_const(&b, "fc1.w", 2, w1d, 0.5f), b1 = se_const(&b, "fc1.b", 1, b1d, 0.5f);
            h = tmb_op(&b, "Gemm", (int[]){flat, w1, b1}, 3, "fc1");
            tmb_op_int(&b, "transB", 1);
            h = tmb_op(&b, "Relu", &h, 1, "relu");
            int w2 = se_const(&b, "fc2.w", 2, w2d, 0.5f), b2 = se_const(&b, "fc2.b", 2, b2d, 0.5f);
            g = tmb_op(&b, "Gemm", (int[]){h, w2, b2}, 3, "fc2");
            tmb_op_int(&b, "transB", 1);
            g = tmb_op(&b, "Sigmoid", &g, 1, "sig");
            int shape = tmb_const_i64(&b, "shape", (int64_t[]){-1, SE_C, 1, 1}, 4, false);
            gate = tmb_op(&b, "Reshape", (int[]){g, shape}, 2, "gate");
        } else {
            int64_t w1d[2] = {SE_C, SE_M}, b1d[1] = {SE_M}, w2d[2] = {SE_M, SE_C}, b2d[1] = {SE_C};
            int w1 = se_const(&b, "fc1.w", 2, w1d, 0.5f), b1 = se_const(&b, "fc1.b", 1, b1d, 0.5f);
            h = tmb_op(&b, "MatMul", (int[]){flat, w1}, 2, "fc1");
            h = tmb_op(&b, "Add", (int[]){b1, h}, 2, "fc1.add");
            h = tmb_op(&b, "Relu", &h, 1, "relu");
            int w2 = se_const(&b, "fc2.w", 2, w2d, 0.5f), b2 = se_const(&b, "fc2.b", 1, b2d, 0.5f);
            g = tmb_op(&b, "MatMul", (int[]){h, w2}, 2, "fc2");
            g = tmb_op(&b, "Add", (int[]){g, b2}, 2, "fc2.add");
            g = tmb_op(&b, "HardSigmoid", &g, 1, "hsig");
            tmb_op_float(&b, "alpha", 1.0f / 6.0f);
            int axes = tmb_const_i64(&b, "axes", (int64_t[]){2, 3}, 2, false);
            gate = tmb_op(&b, "Unsqueeze", (int[]){g, axes}, 2, "gate");
        }
    } else {
        if (se_case == SE_REDUCE_MEAN) {
            pooled = tmb_op(&b, "ReduceMean", &x, 1, "pool");
            tmb_op_ints(&b, "axes", (int64_t[]){2, 3}, 2);
        } else if (se_case == SE_REDUCE_MEAN_18) {
            int axes = tmb_const_i64(&b, "axes", (int64_t[]){-1, -2}, 2, false);
            pooled = tmb_op(&b, "ReduceMean", (int[]){x, axes}, 2, "pool");
        } else {
            pooled = tmb_op(&b, "GlobalAveragePool", &x, 1, "pool");
        }
        const bool bias = se_case != SE_NO_BIAS;
        int h = conv1x1(&b, pooled, SE_C, SE_M, bias, "fc1");
        if (rank3) b.g->values[b.g->nodes[b.last].inputs[1]].type.rank = 3, b.g->values[b.g->nodes[b.last].inputs[1]].constant->rank = 3;
        if (se_case == SE_STRIDED) tmb_op_ints(&b, "strides", (int64_t[]){2, 2}, 2);
        if (se_case == SE_EFFICIENTNET || se_case == SE_HIDDEN_READ || se_case == SE_POOL_READ) {
            int s = tmb_op(&b, "Sigmoid", &h, 1, "silu.sig");
            h = tmb_op(&b, "Mul", (int[]){h, s}, 2, "silu");
        } else if (se_case != SE_NO_BIAS) {
            h = tmb_op(&b, "Relu", &h, 1, "relu");
        }
        if (se_case == SE_HIDDEN_READ) tmb_output(&b, h);
        int g = conv1x1(&b, h, SE_M, SE_C, bias, "fc2");
        if (rank3) b.g->values[b.g->nodes[b.last].inputs[1]].type.rank = 3, b.g->values[b.g->nodes[b.last].inputs[1]].constant->rank = 3;
        if (se_case == SE_MOBILENET) {
            gate = tmb_op(&b, "HardSigmoid", &g, 1, "gate");
            tmb_op_float(&b, "alpha", 1.0f / 6.0f);
        } else {
            gate = tmb_op(&b, "Sigmoid", &g, 1, "gate");
        }
    }
    if (se_case == SE_POOL_READ) tmb_output(&b, tmb_op(&b, "Neg", &pooled, 1, "pool.neg"));
    if (se_case == SE_GATE_READ) tmb_output(&b, gate);
    const int target = other >= 0 ? other : x;
    const bool gate_first = se_case == SE_MOBILENET || se_case == SE_GEMM || se_case == SE_RANK3;
    int y = tmb_op(&b, "Mul", gate_first ? (int[]){gate, target} : (int[]){target, gate}, 2, "y");
    tmb_output(&b, y);
    return b.m;
}

/* ------------------------------------------------------------------ running */

static kiln_session *se_session(kn_model *m, int level, const char *disable) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, level);
    kiln_session_options_set_intra_op_threads(o, 2);
    kiln_session_options_set_cache(o, 0, NULL);
    if (disable) kiln_session_options_disable_pass(o, disable);
    kiln_session *s = NULL;
    CHECK_STATUS(kn_graph_sort(m->graph), KILN_OK);
    kiln_status st = kn_session_from_model(m, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "case %d, level %d: %s", se_case, level, kiln_last_error());
    return s;
}

static int count_se(const kiln_session *s) {
    const kn_graph *g = s->model->graph;
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        n += !g->nodes[i].dead && !strcmp(g->nodes[i].op_type, "SqueezeExcite") && !strcmp(g->nodes[i].domain, "kiln");
    return n;
}

static int live(const kiln_session *s) {
    int n = 0;
    for (int i = 0; i < s->model->graph->n_nodes; i++) n += !s->model->graph->nodes[i].dead;
    return n;
}

/* Runs both sessions on the same random inputs; every output agrees within tol relative to
 * 1 + |ref|. */
static void se_compare(kiln_session *ref, kiln_session *opt, double tol, const char *what) {
    const kn_graph *g = ref->model->graph;
    kn_tensor *in[4] = {0};
    const char *names[4];
    unsigned seed = 99u;
    for (int i = 0; i < g->n_inputs; i++) {
        const kn_type *t = &g->values[g->inputs[i]].type;
        int64_t dims[KILN_MAX_RANK];
        for (int d = 0; d < t->rank; d++) dims[d] = t->dims[d].value >= 0 ? t->dims[d].value : 3;
        kn_tensor_new(t->dtype, t->rank, dims, &in[i]);
        for (int64_t k = 0; k < kn_tensor_count(in[i]); k++) {
            seed = seed * 1103515245u + 12345u;
            ((float *)in[i]->data)[k] = (float)(((seed >> 8) & 0xffff) / 32768.0 - 1.0) * 2.0f + 0.3f;
        }
        names[i] = g->values[g->inputs[i]].name;
    }
    size_t no = kiln_session_output_count(ref);
    kn_tensor *a[4] = {0}, *b[4] = {0};
    CHECK_STATUS(kiln_session_run(ref, names, in, (size_t)g->n_inputs, NULL, no, a), KILN_OK);
    CHECK_STATUS(kiln_session_run(opt, names, in, (size_t)g->n_inputs, NULL, no, b), KILN_OK);
    for (size_t o = 0; o < no; o++) {
        if (!a[o] || !b[o]) continue;
        CHECK_EQ_INT(kn_tensor_count(a[o]), kn_tensor_count(b[o]));
        double worst = 0;
        for (int64_t i = 0; i < kn_tensor_count(a[o]) && i < kn_tensor_count(b[o]); i++) {
            const double x = ((const float *)a[o]->data)[i], y = ((const float *)b[o]->data)[i];
            const double e = fabs(x - y) / (1.0 + fabs(x));
            if (!(e <= worst)) worst = e; /* NaN stays */
        }
        CHECK_MSG(worst <= tol, "%s: output %zu differs from level 0 by %g (tol %g)", what, o, worst, tol);
    }
    for (int i = 0; i < g->n_inputs; i++) kn_tensor_free(in[i]);
    for (size_t o = 0; o < no; o++) kn_tensor_free(a[o]), kn_tensor_free(b[o]);
}

static const char *const case_names[SE_CASES] = {
    "EfficientNet (Conv, SiLU, Sigmoid)", "MobileNetV3 (Conv, Relu, HardSigmoid, gate first)",
    "ReduceMean axes attribute", "ReduceMean axes input (opset 18)", "Flatten, Gemm, Reshape",
    "ReduceMean keepdims 0, MatMul + Add, Unsqueeze", "rank 3 (1-D)", "no biases, no inner activation",
    "hidden value also an output", "pooled value also read", "gate also an output", "strided squeeze",
    "gate times another tensor",
};

/* Each block at levels 1-3 against level 0; fused into one node at level 3 alone where it fits. */
static void se_levels(bool nhwc) {
    for (int sym = 0; sym < 2; sym++)
        for (se_case = 0; se_case < SE_CASES; se_case++) {
            se_symbolic = sym;
            /* channels last, a ReduceMean is no region member (GlobalAveragePool is): Transposes
             * then stand between the pool and the convolutions, and the block stays unfused */
            const bool fits = se_case < SE_HIDDEN_READ && !(nhwc && (se_case == SE_REDUCE_MEAN || se_case == SE_REDUCE_MEAN_18));
            const bool conv_gap = se_case == SE_EFFICIENTNET || se_case == SE_MOBILENET || se_case == SE_NO_BIAS;
            kiln_session *ref = se_session(build_se(), 0, NULL);
            for (int level = 1; level <= 3 && ref; level++) {
                kiln_session *s = se_session(build_se(), level, NULL);
                if (!s) continue;
                char what[160];
                snprintf(what, sizeof what, "%s%s%s, level %d", case_names[se_case], sym ? ", symbolic batch" : "",
                         nhwc ? ", KILN_LAYOUT=nhwc" : "", level);
                se_compare(ref, s, 2e-6, what);
                const int want = fits && level == 3 ? 1 : 0;
                CHECK_MSG(count_se(s) == want, "%s: %d SqueezeExcite nodes, %d expected", what, count_se(s), want);
                /* all of the block in the one node (with channels last: and the Transposes around it) */
                if (want && !(nhwc && conv_gap)) CHECK_MSG(live(s) == 1, "%s: %d nodes left", what, live(s));
                if (want && nhwc && conv_gap) {
                    const kn_graph *g = s->model->graph;
                    for (int i = 0; i < g->n_nodes; i++)
                        if (!g->nodes[i].dead && !strcmp(g->nodes[i].op_type, "SqueezeExcite"))
                            CHECK_MSG(!strcmp(kn_attr_string(&g->nodes[i], "layout", ""), "NHWC"), "%s: layout %s", what,
                                      kn_attr_string(&g->nodes[i], "layout", ""));
                }
                kiln_session_destroy(s);
            }
            kiln_session_destroy(ref);
        }
    se_symbolic = false;
}

KN_TEST(opt_squeeze_excite_forms_and_lookalikes) { se_levels(false); }

/* KILN_LAYOUT=nhwc makes the CPU's level 3 run the convolutions channels last (layout_nhwc): the
 * block is then ReduceMean over axes 1, 2 and FusedConv NHWC, fused with layout NHWC. */
KN_TEST(opt_squeeze_excite_channels_last) {
    const char *was = getenv("KILN_LAYOUT");
    char *saved = was ? strdup(was) : NULL;
    setenv("KILN_LAYOUT", "nhwc", 1);
    se_levels(true);
    if (saved) setenv("KILN_LAYOUT", saved, 1);
    else unsetenv("KILN_LAYOUT");
    free(saved);
}

/* The pass by name: disabled, the block stays as the other passes leave it. */
KN_TEST(opt_squeeze_excite_disabled) {
    se_case = SE_EFFICIENTNET;
    kiln_session *s = se_session(build_se(), 3, "fuse_squeeze_excite");
    if (s) {
        CHECK_EQ_INT(count_se(s), 0);
        kiln_session_destroy(s);
    }
}

/* ------------------------------------------------------------------ the kernel alone */

/* kiln.SqueezeExcite as a graph's one node against the definition evaluated in double: shapes
 * whose sizes leave vector tails (C 19, 16 x 9 positions, 70 channels past the 64-channel jobs of
 * the channels-last means, 300 past the 256-channel excite chunks), each inner activation and
 * gate, with and without biases, W2 a constant or fed, both layouts, several threads. */
static double act_d(const char *name, const float *p, double v) {
    if (!strcmp(name, "Relu")) return v > 0 ? v : 0;
    if (!strcmp(name, "Sigmoid")) return 1 / (1 + exp(-v));
    if (!strcmp(name, "SiLU")) return v / (1 + exp(-v));
    if (!strcmp(name, "HardSigmoid")) return fmin(fmax(p[0] * v + p[1], 0), 1);
    if (!strcmp(name, "HardSwish")) return v * fmin(fmax(v / 6 + 0.5, 0), 1);
    if (!strcmp(name, "Tanh")) return tanh(v);
    return v;
}

static void kernel_case(int64_t N, int64_t C, int64_t M, int64_t S1, int64_t S2, bool nhwc, bool biases, const char *act,
                        const char *gate, int threads, bool w2_fed) {
    tmb b;
    se_builder(&b, 17);
    int64_t xd[4] = {N, C, S1, S2}, w1d[4] = {M, C, 1, 1}, w2d[4] = {C, M, 1, 1}, b1d[1] = {M}, b2d[1] = {C};
    if (nhwc) {
        int64_t xl[4] = {N, S1, S2, C}, w1l[4] = {M, 1, 1, C}, w2l[4] = {C, 1, 1, M};
        memcpy(xd, xl, sizeof xd), memcpy(w1d, w1l, sizeof w1d), memcpy(w2d, w2l, sizeof w2d);
    }
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, xd, NULL);
    /* W2 a constant (the kernel keeps its transposed form with the session) or a graph input fed
     * at each run (transposed per call) */
    int w1 = se_const(&b, "w1", 4, w1d, 0.6f),
        w2 = w2_fed ? tmb_input(&b, "w2", KILN_DTYPE_FLOAT, 4, w2d, NULL) : se_const(&b, "w2", 4, w2d, 0.6f);
    kn_tensor *w2_values = NULL;
    if (w2_fed) {
        kn_tensor_new(KILN_DTYPE_FLOAT, 4, w2d, &w2_values);
        for (int64_t i = 0; i < kn_tensor_count(w2_values); i++)
            ((float *)w2_values->data)[i] = 0.6f * tmb_rand_ansi(&b.seed);
    }
    int b1 = biases ? se_const(&b, "b1", 1, b1d, 0.5f) : -1, b2 = biases ? se_const(&b, "b2", 1, b2d, 0.5f) : -1;
    int y = tmb_op(&b, "SqueezeExcite", (int[]){x, w1, b1, w2, b2}, biases ? 5 : 4, "y");
    kn_node *n = &b.g->nodes[b.last];
    n->domain = "kiln";
    n->opset = 1;
    tmb_import_kiln(&b);
    static const float hsig[2] = {0.2f, 0.45f};
    kn_attr *a = tmb_op_attr(&b, "activation", KN_ATTR_STRING);
    a->s = act, a->s_len = strlen(act);
    a = tmb_op_attr(&b, "gate", KN_ATTR_STRING);
    a->s = gate, a->s_len = strlen(gate);
    a = tmb_op_attr(&b, "gate_params", KN_ATTR_FLOATS);
    a->floats = (float *)hsig, a->n = 2;
    if (!strcmp(act, "HardSigmoid")) {
        a = tmb_op_attr(&b, "activation_params", KN_ATTR_FLOATS);
        a->floats = (float *)hsig, a->n = 2;
    }
    a = tmb_op_attr(&b, "layout", KN_ATTR_STRING);
    a->s = nhwc ? "NHWC" : "NCHW", a->s_len = 4;
    tmb_output(&b, y);
    /* the values of the constants, before the session takes the model */
    const kn_tensor *W1 = b.g->values[w1].constant, *W2 = w2_fed ? w2_values : b.g->values[w2].constant;
    const kn_tensor *B1 = biases ? b.g->values[b1].constant : NULL, *B2 = biases ? b.g->values[b2].constant : NULL;
    const int64_t S = S1 * S2;
    /* float sums and the vector forms of the activations (tanh's: a few ulps of 1e-6) */
    const double tol = strcmp(gate, "Tanh") ? 3e-6 : 2e-5;
    double *want = malloc(sizeof(double) * (size_t)(N * S * C)), *h = malloc(sizeof(double) * (size_t)M),
           *g = malloc(sizeof(double) * (size_t)(N * C));
    float *xv = malloc(sizeof(float) * (size_t)(N * S * C));
    unsigned seed = 5u;
    for (int64_t i = 0; i < N * S * C; i++) {
        seed = seed * 1103515245u + 12345u;
        xv[i] = (float)(((seed >> 8) & 0xffff) / 32768.0 - 1.0) * 3.0f + 0.2f;
    }
#define XAT(n_, c_, s_) xv[nhwc ? ((n_) * S + (s_)) * C + (c_) : ((n_) * C + (c_)) * S + (s_)]
    for (int64_t nb = 0; nb < N; nb++) {
        for (int64_t m = 0; m < M; m++) {
            double acc = B1 ? ((const float *)B1->data)[m] : 0;
            for (int64_t c = 0; c < C; c++) {
                double mean = 0;
                for (int64_t s = 0; s < S; s++) mean += XAT(nb, c, s);
                acc += ((const float *)W1->data)[m * C + c] * (mean / (double)S);
            }
            h[m] = act_d(act, hsig, acc);
        }
        for (int64_t c = 0; c < C; c++) {
            double acc = B2 ? ((const float *)B2->data)[c] : 0;
            for (int64_t m = 0; m < M; m++) acc += ((const float *)W2->data)[c * M + m] * h[m];
            g[nb * C + c] = act_d(gate, hsig, acc);
        }
        for (int64_t c = 0; c < C; c++)
            for (int64_t s = 0; s < S; s++) {
                const int64_t at = nhwc ? (nb * S + s) * C + c : (nb * C + c) * S + s;
                want[at] = (double)xv[at] * g[nb * C + c];
            }
    }
#undef XAT
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, 0);
    kiln_session_options_set_intra_op_threads(o, threads);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session *s = NULL;
    CHECK_STATUS(kn_graph_sort(b.g), KILN_OK);
    kiln_status st = kn_session_from_model(b.m, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "session: %s", kiln_last_error());
    if (s) {
        kn_tensor *in = NULL, *out = NULL;
        kn_tensor_new(KILN_DTYPE_FLOAT, 4, xd, &in);
        memcpy(in->data, xv, in->nbytes);
        const char *names[2] = {"x", "w2"};
        kn_tensor *ins[2] = {in, w2_values};
        CHECK_STATUS(kiln_session_run(s, names, ins, w2_fed ? 2 : 1, NULL, 1, &out), KILN_OK);
        if (out && kn_tensor_count(out) == N * S * C) {
            for (int64_t i = 0; i < N * S * C; i++) {
                const double got = ((const float *)out->data)[i];
                if (!(fabs(got - want[i]) <= tol * (1 + fabs(want[i])))) {
                    kn_unit_fail(__FILE__, __LINE__,
                                 "SqueezeExcite N=%lld C=%lld M=%lld S=%lldx%lld %s biases %d %s/%s, %d threads: "
                                 "element %lld is %.8g, %.8g expected",
                                 (long long)N, (long long)C, (long long)M, (long long)S1, (long long)S2,
                                 nhwc ? "NHWC" : "NCHW", biases, act, gate, threads, (long long)i, got, want[i]);
                    break;
                }
            }
        } else {
            kn_unit_fail(__FILE__, __LINE__, "SqueezeExcite: no output of %lld elements", (long long)(N * S * C));
        }
        kn_tensor_free(in);
        kn_tensor_free(out);
        kiln_session_destroy(s);
    }
    kn_tensor_free(w2_values);
    free(want), free(h), free(g), free(xv);
}

KN_TEST(cpu_squeeze_excite_against_definition) {
    static const int64_t shapes[][5] = {{1, 19, 5, 3, 3}, {3, 70, 8, 16, 9}, {2, 16, 4, 1, 1}, {1, 96, 24, 7, 7},
                                          {2, 300, 20, 4, 5}};
    static const char *const pairs[][2] = {{"SiLU", "Sigmoid"}, {"Relu", "HardSigmoid"}, {"", "Sigmoid"},
                                           {"HardSwish", "Tanh"}};
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (int nhwc = 0; nhwc < 2; nhwc++)
            for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
                kernel_case(shapes[sh][0], shapes[sh][1], shapes[sh][2], shapes[sh][3], shapes[sh][4], nhwc, p != 2,
                            pairs[p][0], pairs[p][1], 1 + (int)(sh % 3), p == 1);
}

/* Attributes that do not parse: the loader's inference refuses them first, but the kernel called
 * on such a node refuses it too, saying why as its prepare hook found it: with the block the hook
 * made (a compiled plan) and without one (the hook run at the call). */
KN_TEST(cpu_squeeze_excite_refuses_bad_attributes) {
    static const struct {
        const char *attr, *value, *says;
    } cases[] = {{"layout", "NCWH", "layout must be \"NCHW\" or \"NHWC\", not \"NCWH\""},
                 {"gate", "Swish", "gate: unknown activation 'Swish'"},
                 {"activation", "Gelu2", "unknown activation 'Gelu2'"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tnode t;
        tn_init(&t, "SqueezeExcite", 1);
        t.node.domain = "kiln";
        tn_string(&t, cases[k].attr, cases[k].value);
        /* the kernel through the table (a portable build forwards only isa_calls.h's list to its
         * level), found for a node whose attributes parse: the table's check refuses the others */
        tnode plain;
        tn_init(&plain, "SqueezeExcite", 1);
        plain.node.domain = "kiln";
        const int64_t xd[4] = {1, 8, 2, 2};
        kn_type xt;
        kn_type_set_tensor(&xt, KILN_DTYPE_FLOAT, 4, xd);
        const kn_type *types[1] = {&xt};
        char why[256];
        const kn_cpu_kernel *kern = kn_cpu_find(&plain.node, types, 1, why, sizeof why);
        CHECK_MSG(kern && kern->prepare && kern->params_bytes == sizeof(kn_cpu_se_prm), "no SqueezeExcite kernel: %s", why);
        if (!kern || !kern->prepare) continue;
        kn_cpu_se_prm prm;
        CHECK_STATUS(kern->prepare(&t.node, &prm), KILN_OK);
        CHECK(!prm.ok);
        for (int planned = 0; planned < 2; planned++) {
            kn_params_handed blk;
            kn_kernel_ctx c = {.node = &t.node};
            if (planned) c.params = kn_params_hand(&blk, kern->prepare, &t.node, &prm, sizeof prm);
            CHECK_EQ_INT(kern->run(&c), KILN_ERR_INVALID_MODEL);
            CHECK_MSG(strstr(kiln_last_error(), cases[k].says) != NULL, "%s=%s, %s: the error says '%s'", cases[k].attr,
                      cases[k].value, planned ? "prepared" : "at the call", kiln_last_error());
        }
    }
}

/* ------------------------------------------------------------------ for CUDA, from its tables */

/* What the optimiser forms for CUDA (judged from its kernel tables, as kiln inspect --provider
 * does: no GPU needed): the EfficientNet block in float32 channels first, and with precision fp16 /
 * bf16 and activations=half in that type, channels last (a dense network at batch 2: layout_nhwc). */
KN_TEST(opt_squeeze_excite_for_cuda_from_tables) {
#ifndef KILN_HAVE_CUDA
    KN_SKIP("no CUDA backend in this build");
#else
    char why[512] = "";
    int n_fns = 0, dnn = 0;
    if (!kn_cuda_libs_report(why, sizeof why, &n_fns, &dnn) || !dnn) KN_SKIP("cuDNN not loadable here");
    static const struct {
        const char *precision;
        kiln_dtype dt;
        const char *layout;
    } cases[] = {{NULL, KILN_DTYPE_FLOAT, "NCHW"},
                 {"fp16", KILN_DTYPE_FLOAT16, "NHWC"},
                 {"bf16", KILN_DTYPE_BFLOAT16, "NHWC"}};
    se_symbolic = false;
    for (se_case = SE_EFFICIENTNET; se_case <= SE_MOBILENET; se_case++)
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            kiln_session_options *o = NULL;
            kiln_session_options_create(&o);
            kiln_session_options_set_opt_level(o, 3);
            kiln_session_options_set_cache(o, 0, NULL);
            const char *keys[2] = {"precision", "activations"}, *vals[2] = {cases[k].precision, "half"};
            CHECK_STATUS(kiln_session_options_append_provider(o, "cuda", cases[k].precision ? keys : NULL,
                                                              cases[k].precision ? vals : NULL, cases[k].precision ? 2 : 0),
                         KILN_OK);
            kn_model *m = build_se();
            CHECK_STATUS(kn_graph_sort(m->graph), KILN_OK);
            CHECK_STATUS(kn_graph_resolve(m->graph), KILN_OK);
            CHECK_STATUS(kn_graph_infer(m->graph), KILN_OK);
            CHECK_STATUS(kn_optimize_from_tables(m, o, NULL, NULL), KILN_OK);
            kiln_session_options_destroy(o);
            int found = 0;
            for (int i = 0; i < m->graph->n_nodes; i++) {
                const kn_node *n = &m->graph->nodes[i];
                if (n->dead || strcmp(n->op_type, "SqueezeExcite")) continue;
                found++;
                const kiln_dtype xt = m->graph->values[n->inputs[0]].type.dtype;
                CHECK_MSG(!strcmp(kn_attr_string(n, "layout", ""), cases[k].layout) && xt == cases[k].dt,
                          "%s, cuda %s: layout %s, X %s", case_names[se_case],
                          cases[k].precision ? cases[k].precision : "fp32", kn_attr_string(n, "layout", ""),
                          kiln_dtype_name(xt));
            }
            CHECK_MSG(found == 1, "%s, cuda %s: %d SqueezeExcite nodes", case_names[se_case],
                      cases[k].precision ? cases[k].precision : "fp32", found);
            kn_model_free(m);
        }
#endif
}

/* kiln.SqueezeExcite on CUDA (cu_squeeze_excite.cu): the node alone against the definition evaluated
 * in double over its inputs as given (float, float16, bfloat16; both layouts; shapes that take each
 * path: the gate kernel pooling X itself or the split pool, one or several gate blocks per batch
 * item, batch tiles with a remainder, word-wise and element-wise scaling; and each shape with the
 * pool kernel forced, with the gate kernel pooling forced, and with other batch items a gate block
 * and lanes a weight row: KILN_CUDA_SE_POOL_LIMIT, _ITEMS, _TEAM), each session
 * run three times (a warm-up, the captured run, a replay of the CUDA graph); and a squeeze-excite block the
 * optimiser fuses for CUDA (float32 channels first; float16 channels last with activations=half)
 * against the CPU's unfused run. Skipped without a GPU. */
#include "test_onemodel.h"

#include "exec/graph_run.h"
#include "exec/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static double se_act_d(const char *name, double v) {
    if (!strcmp(name, "Relu")) return v > 0 ? v : 0;
    if (!strcmp(name, "Sigmoid")) return 1 / (1 + exp(-v));
    if (!strcmp(name, "SiLU")) return v / (1 + exp(-v));
    if (!strcmp(name, "HardSigmoid")) return fmin(fmax(0.2 * v + 0.45, 0), 1); /* the params set below */
    if (!strcmp(name, "HardSwish")) return v * fmin(fmax(v / 6 + 0.5, 0), 1);
    if (!strcmp(name, "Tanh")) return tanh(v);
    return v;
}

static kiln_session *cuda_session(const unsigned char *data, size_t size, int level, const char *precision) {
    kiln_session_options *o;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, level);
    kiln_session_options_set_cache(o, 0, NULL);
    const char *k[3] = {"tuning", "precision", "activations"}, *v[3] = {"heuristic", precision, "half"};
    kiln_session_options_append_provider(o, "cuda", k, v, precision ? 3 : 1);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(data, size, NULL, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "session (cuda, level %d, precision %s): %s", level, precision ? precision : "fp32",
              kiln_last_error());
    return s;
}

/* One SqueezeExcite node of type dt over X [N, C, H, W] (or [N, H, W, C]) with W1 [M, C, 1, 1]
 * ([M, 1, 1, C]) and W2 [C, M, 1, 1] ([C, 1, 1, M]) as graph inputs. */
static void node_case(kiln_dtype dt, bool nhwc, const int64_t *sh, bool biases, const char *act, const char *gate) {
    const int64_t N = sh[0], C = sh[1], M = sh[2], S = sh[3] * sh[4];
    onemodel o;
    om_init(&o, 17);
    int64_t xd[4] = {N, C, sh[3], sh[4]}, w1d[4] = {M, C, 1, 1}, w2d[4] = {C, M, 1, 1}, b1d[1] = {M}, b2d[1] = {C};
    if (nhwc) {
        int64_t xl[4] = {N, sh[3], sh[4], C}, w1l[4] = {M, 1, 1, C}, w2l[4] = {C, 1, 1, M};
        memcpy(xd, xl, sizeof xd), memcpy(w1d, w1l, sizeof w1d), memcpy(w2d, w2l, sizeof w2d);
    }
    int in[5] = {om_input(&o, "X", dt, 4, xd, 2.0f, NULL), om_input(&o, "W1", dt, 4, w1d, 0.3f, NULL), -1, -1, -1};
    if (biases) in[2] = om_input(&o, "B1", dt, 1, b1d, 0.5f, NULL);
    in[3] = om_input(&o, "W2", dt, 4, w2d, 0.5f, NULL);
    if (biases) in[4] = om_input(&o, "B2", dt, 1, b2d, 0.5f, NULL);
    int out[1] = {om_value(&o, "Y")};
    om_node(&o, "SqueezeExcite", in, biases ? 5 : 4, out, 1);
    om_kiln_domain(&o);
    om_str(&o, "activation", act);
    om_str(&o, "gate", gate);
    om_str(&o, "layout", nhwc ? "NHWC" : "NCHW");
    static float hsig[2] = {0.2f, 0.45f};
    kn_attr *a = om_attr(&o, "gate_params", KN_ATTR_FLOATS);
    a->floats = hsig, a->n = 2;
    if (!strcmp(act, "HardSigmoid")) {
        a = om_attr(&o, "activation_params", KN_ATTR_FLOATS);
        a->floats = hsig, a->n = 2;
    }
    /* the reference, from the inputs' values in their type */
    const kn_tensor *X = o.inputs[0], *W1 = o.inputs[1], *B1 = biases ? o.inputs[2] : NULL;
    const kn_tensor *W2 = o.inputs[biases ? 3 : 2], *B2 = biases ? o.inputs[4] : NULL;
    double *want = malloc(sizeof(double) * (size_t)(N * C * S)), *mean = malloc(sizeof(double) * (size_t)C),
           *h = malloc(sizeof(double) * (size_t)M), *g = malloc(sizeof(double) * (size_t)C);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t c = 0; c < C; c++) {
            double s = 0;
            for (int64_t p = 0; p < S; p++) s += kn_tensor_get_f64(X, nhwc ? (n * S + p) * C + c : (n * C + c) * S + p);
            mean[c] = s / (double)S;
        }
        for (int64_t m = 0; m < M; m++) {
            double s = B1 ? kn_tensor_get_f64(B1, m) : 0;
            for (int64_t c = 0; c < C; c++) s += kn_tensor_get_f64(W1, m * C + c) * mean[c];
            h[m] = se_act_d(act, s);
        }
        for (int64_t c = 0; c < C; c++) {
            double s = B2 ? kn_tensor_get_f64(B2, c) : 0;
            for (int64_t m = 0; m < M; m++) s += kn_tensor_get_f64(W2, c * M + m) * h[m];
            g[c] = se_act_d(gate, s);
        }
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < S; p++) {
                const int64_t i = nhwc ? (n * S + p) * C + c : (n * C + c) * S + p;
                want[i] = kn_tensor_get_f64(X, i) * g[c];
            }
    }
    /* the output's rounding in its type, float sums of up to 100 K terms in float */
    const double tol = dt == KILN_DTYPE_FLOAT ? 1e-5 : dt == KILN_DTYPE_FLOAT16 ? 1.5e-3 : 1e-2;
    char what[200];
    snprintf(what, sizeof what, "SqueezeExcite %s %s N=%lld C=%lld M=%lld %lldx%lld%s %s/%s", kiln_dtype_name(dt),
             nhwc ? "NHWC" : "NCHW", (long long)N, (long long)C, (long long)M, (long long)sh[3], (long long)sh[4],
             biases ? " biases" : "", act[0] ? act : "none", gate);
    unsigned char *data = NULL;
    size_t size = 0;
    kn_graph_recount(o.g);
    CHECK_MSG(kn_onnx_write_memory(o.m, &data, &size) == KILN_OK, "%s: writing the model: %s", what, kiln_last_error());
    /* the work splits (kn_cu_se_tuning): the defaults; the pool kernel always (limit 0); the gate
     * kernel always pooling (a limit above every shape); the earlier default of 4 items a gate block
     * and a warp a weight row; 2 and 3 items with a lane and with 16 lanes a row */
    static const char *const vars[3] = {"KILN_CUDA_SE_POOL_LIMIT", "KILN_CUDA_SE_ITEMS", "KILN_CUDA_SE_TEAM"};
    static const char *const splits[6][3] = {{NULL, NULL, NULL}, {"0", NULL, NULL}, {"1000000000", NULL, NULL},
                                             {NULL, "4", "32"},  {"0", "2", "1"},   {"1000000000", "3", "16"}};
    char *saved[3];
    for (int v = 0; v < 3; v++) saved[v] = getenv(vars[v]) ? strdup(getenv(vars[v])) : NULL;
    for (int l = 0; l < 6 && data; l++) {
        char split[64];
        snprintf(split, sizeof split, "limit %s items %s team %s", splits[l][0] ? splits[l][0] : "default",
                 splits[l][1] ? splits[l][1] : "default", splits[l][2] ? splits[l][2] : "default");
        for (int v = 0; v < 3; v++)
            if (splits[l][v]) setenv(vars[v], splits[l][v], 1);
            else unsetenv(vars[v]);
        kiln_session *s = cuda_session(data, size, 0, NULL);
        for (int run = 0; s && run < 3; run++) { /* warm-up, captured, replayed */
            kn_tensor *y = NULL;
            om_run(s, &o, &y);
            if (!y || kn_tensor_count(y) != N * C * S) {
                kn_unit_fail(__FILE__, __LINE__, "%s, %s: no output of %lld elements", what, split, (long long)(N * C * S));
            } else {
                for (int64_t i = 0; i < N * C * S; i++) {
                    const double got = kn_tensor_get_f64(y, i);
                    if (!(fabs(got - want[i]) <= tol * (1 + fabs(want[i])))) {
                        kn_unit_fail(__FILE__, __LINE__, "%s, %s, run %d: element %lld is %.7g, %.7g expected", what,
                                     split, run, (long long)i, got, want[i]);
                        break;
                    }
                }
            }
            kiln_tensor_destroy(y);
        }
        kiln_session_destroy(s);
    }
    for (int v = 0; v < 3; v++) {
        if (saved[v]) setenv(vars[v], saved[v], 1);
        else unsetenv(vars[v]);
        free(saved[v]);
    }
    free(data);
    free(want), free(mean), free(h), free(g);
    om_free(&o);
}

KN_TEST(cuda_squeeze_excite_against_definition) {
    NEED_GPU();
    static const int64_t shapes[][5] = {
        /* N, C, M, H, W */
        {1, 32, 8, 112, 112}, /* split pool: long rows (EfficientNet's first block) */
        {1, 1152, 48, 7, 7},  /* 9 gate blocks; W2's rows of 48 in words (6 lanes a row in half) */
        {2, 16, 4, 32, 32},   /* the gate kernel pools by default (two words of channels in half); rows of 4 */
        {6, 96, 4, 56, 56},   /* split pool; batch tiles 4 + 2; W2's rows element by element in half */
        {20, 40, 10, 5, 5},   /* one gate block per 4 items; rows of 25 and 40: element-wise scaling in half */
        {2, 2048, 128, 7, 7}, /* SE-ResNet's last block: split pool, large weights, W1's rows a warp each */
        {1, 240, 64, 7, 7},   /* MobileNetV3's: the gate pools 30 words of channels (half) itself */
        {2, 36, 9, 9, 9},     /* 36 channels: words in float, element by element in half */
        {3, 19, 5, 1, 1},     /* one position */
        {6, 2100, 20, 3, 3},  /* the channels-last pool in the gate over 525 words (float): two passes */
        {3, 4000, 100, 2, 2}, /* shared memory for 2 items a gate block (a tile of 2, then 1) */
        {5, 3, 1, 2, 3},      /* one hidden value, 3 channels, a tile of 4 then 1 */
    };
    static const kiln_dtype types[3] = {KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT16, KILN_DTYPE_BFLOAT16};
    static const char *const pairs[4][2] = {{"SiLU", "Sigmoid"}, {"Relu", "HardSigmoid"}, {"", "Sigmoid"},
                                            {"HardSwish", "Tanh"}};
    int k = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 3; t++)
            for (int nhwc = 0; nhwc < 2; nhwc++, k++)
                node_case(types[t], nhwc, shapes[s], k % 4 != 2, pairs[k % 4][0], pairs[k % 4][1]);
}

/* ------------------------------------------------------------------ a block the optimiser fuses */

static int const_input(onemodel *o, const char *name, int rank, const int64_t *dims, float scale) {
    kn_tensor *t = NULL;
    kn_tensor_new(KILN_DTYPE_FLOAT, rank, dims, &t);
    for (int64_t i = 0; i < kn_tensor_count(t); i++) ((float *)t->data)[i] = scale * urand(&o->seed);
    kn_model_own_tensor(o->m, t);
    int v = kn_graph_add_value(o->g, name);
    o->g->values[v].constant = t;
    kn_type_set_tensor(&o->g->values[v].type, KILN_DTYPE_FLOAT, rank, dims);
    return v;
}

static int add_node(onemodel *o, const char *op, const int *in, int nin, const char *out) {
    int v = om_value(o, out);
    o->node = kn_graph_add_node(o->g, NULL, op, "", in, nin, &v, 1);
    return v;
}

/* x -> Conv 3x3 (16 -> C) + Relu -> X; X -> GlobalAveragePool -> Conv1x1 (C -> M) + SiLU -> Conv1x1
 * (M -> C) + Sigmoid -> Mul(X, gate) -> Conv 1x1 (C -> 16): the block between two convolutions, as
 * in EfficientNet, so that channels last has a region around it. */
static void block_model(onemodel *o, int64_t N, int64_t C, int64_t M, int64_t H) {
    om_init(o, 17);
    int64_t xd[4] = {N, 16, H, H}, wd[4] = {C, 16, 3, 3}, w1d[4] = {M, C, 1, 1}, w2d[4] = {C, M, 1, 1}, w3d[4] = {16, C, 1, 1};
    int64_t bc[1] = {C}, bm[1] = {M};
    int x = om_input(o, "x", KILN_DTYPE_FLOAT, 4, xd, 1.0f, NULL);
    int w = const_input(o, "w", 4, wd, 0.2f), b = const_input(o, "b", 1, bc, 0.2f);
    int X = add_node(o, "Conv", (int[]){x, w, b}, 3, "conv");
    kn_attr *a = om_attr(o, "pads", KN_ATTR_INTS);
    a->ints = kn_arena_alloc(&o->m->arena, 4 * sizeof(int64_t));
    for (int i = 0; i < 4; i++) a->ints[i] = 1;
    a->n = 4;
    X = add_node(o, "Relu", &X, 1, "relu");
    int p = add_node(o, "GlobalAveragePool", &X, 1, "pool");
    int h = add_node(o, "Conv", (int[]){p, const_input(o, "w1", 4, w1d, 0.3f), const_input(o, "b1", 1, bm, 0.3f)}, 3, "fc1");
    int sg = add_node(o, "Sigmoid", &h, 1, "fc1.sig");
    h = add_node(o, "Mul", (int[]){h, sg}, 2, "silu");
    int g = add_node(o, "Conv", (int[]){h, const_input(o, "w2", 4, w2d, 0.3f), const_input(o, "b2", 1, bc, 0.3f)}, 3, "fc2");
    g = add_node(o, "Sigmoid", &g, 1, "gate");
    int y = add_node(o, "Mul", (int[]){X, g}, 2, "scaled");
    int64_t b16[1] = {16};
    int out = om_value(o, "y");
    o->node = kn_graph_add_node(o->g, NULL, "Conv", "", (int[]){y, const_input(o, "w3", 4, w3d, 0.2f),
                                                                 const_input(o, "b3", 1, b16, 0.2f)}, 3, &out, 1);
    o->g->outputs = realloc(o->g->outputs, sizeof(int));
    o->g->outputs[0] = out;
    o->g->n_outputs = 1;
    o->g->values[out].is_graph_output = true;
    o->n_outputs = 1;
}

static int se_nodes(const kiln_session *s, const char **layout) {
    const kn_graph *g = s->model->graph;
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && !strcmp(g->nodes[i].op_type, "SqueezeExcite")) {
            n++;
            *layout = kn_attr_string(&g->nodes[i], "layout", "NCHW");
        }
    return n;
}

KN_TEST(cuda_squeeze_excite_fused_block_matches_cpu) {
    NEED_GPU();
    static const struct {
        int64_t N, C, M, H;
        const char *precision; /* NULL: float32 */
        const char *layout;    /* what the optimiser should give it */
        double tol;
    } cases[] = {
        {1, 48, 12, 14, NULL, "NCHW", 1e-4},
        {2, 96, 24, 28, NULL, "NCHW", 1e-4},
        {8, 96, 24, 28, "fp16", "NHWC", 3e-2}, /* batch 8 in half: channels last (layout_nhwc) */
        {1, 64, 16, 14, "fp16", "NHWC", 3e-2}, /* dense network in half at batch 1: channels last */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        onemodel o;
        block_model(&o, cases[k].N, cases[k].C, cases[k].M, cases[k].H);
        unsigned char *data = NULL;
        size_t size = 0;
        kn_graph_recount(o.g);
        CHECK_MSG(kn_onnx_write_memory(o.m, &data, &size) == KILN_OK, "writing the model: %s", kiln_last_error());
        kiln_session *cpu = data ? om_session(data, size, "cpu") : NULL;
        kiln_session *gpu = cpu ? cuda_session(data, size, 3, cases[k].precision) : NULL;
        if (gpu) {
            char what[160];
            snprintf(what, sizeof what, "block N=%lld C=%lld M=%lld %lldx%lld on CUDA %s", (long long)cases[k].N,
                     (long long)cases[k].C, (long long)cases[k].M, (long long)cases[k].H, (long long)cases[k].H,
                     cases[k].precision ? cases[k].precision : "fp32");
            const char *layout = "";
            CHECK_MSG(se_nodes(gpu, &layout) == 1, "%s: %d SqueezeExcite nodes formed", what, se_nodes(gpu, &layout));
            CHECK_MSG(!strcmp(layout, cases[k].layout), "%s: layout %s, %s expected", what, layout, cases[k].layout);
            kn_tensor *want = NULL;
            om_run(cpu, &o, &want);
            for (int run = 0; run < 3 && want; run++) {
                kn_tensor *got = NULL;
                om_run(gpu, &o, &got);
                /* normwise: the largest difference against the output's largest value */
                double worst = 0, scale = 1e-30;
                const int64_t n = got && kn_tensor_count(got) == kn_tensor_count(want) ? kn_tensor_count(want) : 0;
                for (int64_t i = 0; i < n; i++) {
                    const double w = kn_tensor_get_f64(want, i), g = kn_tensor_get_f64(got, i);
                    worst = fmax(worst, fabs(w - g));
                    if (g != g) worst = INFINITY;
                    scale = fmax(scale, fabs(w));
                }
                CHECK_MSG(n > 0 && worst <= cases[k].tol * scale, "%s, run %d: largest difference %g of %g (tol %g)", what,
                          run, worst, scale, cases[k].tol);
                kiln_tensor_destroy(got);
            }
            bool enabled = false;
            int graphs = 0;
            kn_graph_run_stats(gpu, &enabled, &graphs, NULL);
            CHECK_MSG(enabled && graphs == 1, "%s: runs not captured (enabled %d, %d graphs)", what, enabled, graphs);
            kiln_tensor_destroy(want);
        }
        kiln_session_destroy(gpu);
        kiln_session_destroy(cpu);
        free(data);
        om_free(&o);
    }
}

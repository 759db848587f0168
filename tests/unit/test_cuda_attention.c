/* GPU tests of the attention family's CUDA kernels (cuda_ops_attention.c, cu_attention.cu): ai.onnx
 * Attention in grouped-query, causal-with-past (3-D, present outputs), boolean-mask (with a fully
 * masked row) and softcap + additive-mask + scores-output configurations, in float32 and float16,
 * and RotaryEmbedding, CausalConvWithState and LinearAttention; each run with provider cuda alone
 * (so a CPU fallback fails the test) and compared with the CPU backend. Skipped without a device. */
#include "unit.h"

#include "kiln.h"
#include "ir/graph.h"
#include "ir/tensor.h"
#include "onnx/writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ one-node models */

typedef struct onemodel {
    kn_model *m;
    kn_graph *g;
    int node;
    kn_tensor *inputs[8];
    const char *names[8];
    int n_inputs, n_outputs;
    uint32_t seed;
} onemodel;

static float urand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void om_init(onemodel *o, int opset) {
    memset(o, 0, sizeof *o);
    o->seed = 2024;
    kn_model_new(&o->m);
    o->m->ir_version = 10;
    o->m->n_opsets = 1;
    o->m->opsets = kn_arena_alloc(&o->m->arena, sizeof(kn_opset_import));
    o->m->opsets[0].domain = "";
    o->m->opsets[0].version = opset;
    o->m->producer_name = "kiln-test";
    kn_graph_new(o->m, NULL, "test", &o->g);
    o->m->graph = o->g;
    o->node = -1;
}

/* A graph input with random values (bool: a pattern given by keep; int64: the values given). */
static int om_input(onemodel *o, const char *name, kiln_dtype dt, int rank, const int64_t *dims, float scale,
                    const void *values) {
    int v = kn_graph_add_value(o->g, name);
    kn_type_set_tensor(&o->g->values[v].type, dt, rank, dims);
    o->g->values[v].is_graph_input = true;
    o->g->inputs = realloc(o->g->inputs, sizeof(int) * (size_t)(o->g->n_inputs + 1));
    o->g->inputs[o->g->n_inputs++] = v;
    kn_tensor *t;
    kn_tensor_new(dt, rank, dims, &t);
    int64_t n = kn_tensor_count(t);
    if (values) memcpy(t->data, values, t->nbytes);
    else
        for (int64_t i = 0; i < n; i++) kn_tensor_set_f64(t, i, scale * urand(&o->seed));
    o->inputs[o->n_inputs] = t;
    o->names[o->n_inputs++] = o->g->values[v].name;
    return v;
}

static int om_value(onemodel *o, const char *name) { return kn_graph_add_value(o->g, name); }

static void om_node(onemodel *o, const char *op, const int *in, int nin, const int *out, int nout) {
    o->node = kn_graph_add_node(o->g, NULL, op, "", in, nin, out, nout);
    o->n_outputs = 0;
    for (int i = 0; i < nout; i++) {
        if (out[i] < 0) continue; /* an omitted optional output */
        o->n_outputs++;
        o->g->outputs = realloc(o->g->outputs, sizeof(int) * (size_t)(o->g->n_outputs + 1));
        o->g->outputs[o->g->n_outputs++] = out[i];
        o->g->values[out[i]].is_graph_output = true;
    }
}

static kn_attr *om_attr(onemodel *o, const char *name, kn_attr_type type) {
    kn_node *n = &o->g->nodes[o->node];
    kn_attr *a = kn_arena_alloc(&o->m->arena, sizeof(kn_attr) * (size_t)(n->n_attrs + 1));
    if (n->n_attrs) memcpy(a, n->attrs, sizeof(kn_attr) * (size_t)n->n_attrs);
    n->attrs = a;
    kn_attr *r = &a[n->n_attrs++];
    memset(r, 0, sizeof *r);
    r->name = kn_arena_strdup(&o->m->arena, name);
    r->type = type;
    return r;
}
static void om_int(onemodel *o, const char *name, int64_t v) { om_attr(o, name, KN_ATTR_INT)->i = v; }
static void om_float(onemodel *o, const char *name, float v) { om_attr(o, name, KN_ATTR_FLOAT)->f = v; }
static void om_str(onemodel *o, const char *name, const char *v) {
    kn_attr *a = om_attr(o, name, KN_ATTR_STRING);
    a->s = kn_arena_strdup(&o->m->arena, v);
    a->s_len = strlen(v);
}

static kiln_session *om_session(const unsigned char *data, size_t size, const char *provider) {
    kiln_session_options *opt;
    kiln_session_options_create(&opt);
    kiln_session_options_set_opt_level(opt, 0);
    kiln_session_options_set_cache(opt, 0, NULL);
    kiln_session_options_append_provider(opt, provider, NULL, NULL, 0);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(data, size, NULL, opt, &s);
    kiln_session_options_destroy(opt);
    CHECK_MSG(st == KILN_OK, "session (%s): %s", provider, kiln_last_error());
    return s;
}

static void om_run(kiln_session *s, onemodel *o, kn_tensor **out) {
    for (int i = 0; i < o->n_outputs; i++) out[i] = NULL;
    kiln_status st = kiln_session_run(s, o->names, o->inputs, (size_t)o->n_inputs, NULL, (size_t)o->n_outputs, out);
    CHECK_MSG(st == KILN_OK, "run: %s", kiln_last_error());
}

/* Runs the model with provider cuda (alone) and cpu and compares every output. */
static void om_compare(onemodel *o, double rtol, double atol, const char *what) {
    unsigned char *data = NULL;
    size_t size = 0;
    kn_graph_recount(o->g);
    kiln_status st = kn_onnx_write_memory(o->m, &data, &size);
    CHECK_MSG(st == KILN_OK, "%s: writing the model: %s", what, kiln_last_error());
    kiln_session *cpu = st == KILN_OK ? om_session(data, size, "cpu") : NULL;
    kiln_session *gpu = cpu ? om_session(data, size, "cuda") : NULL;
    if (gpu) {
        kn_tensor *want[4], *got[4];
        om_run(cpu, o, want);
        om_run(gpu, o, got);
        for (int k = 0; k < o->n_outputs; k++) {
            if (!want[k] || !got[k]) continue;
            if (kn_tensor_count(want[k]) != kn_tensor_count(got[k]) || want[k]->dtype != got[k]->dtype) {
                kn_unit_fail(__FILE__, __LINE__, "%s: output %d differs in shape or type", what, k);
                continue;
            }
            for (int64_t i = 0; i < kn_tensor_count(want[k]); i++) {
                double w = kn_tensor_get_f64(want[k], i), g = kn_tensor_get_f64(got[k], i);
                if (!(fabs(w - g) <= atol + rtol * fabs(w)) && !(w != w && g != g)) {
                    kn_unit_fail(__FILE__, __LINE__, "%s: output %d element %lld is %.7g on CUDA, %.7g on the CPU", what,
                                 k, (long long)i, g, w);
                    break;
                }
            }
        }
        for (int k = 0; k < o->n_outputs; k++) {
            kiln_tensor_destroy(want[k]);
            kiln_tensor_destroy(got[k]);
        }
    }
    kiln_session_destroy(gpu);
    kiln_session_destroy(cpu);
    free(data);
    for (int i = 0; i < o->n_inputs; i++) kn_tensor_free(o->inputs[i]);
    kn_model_free(o->m);
}

static double rtol_for(kiln_dtype dt) { return dt == KILN_DTYPE_FLOAT ? 1e-4 : 4e-3; }
static double atol_for(kiln_dtype dt) { return dt == KILN_DTYPE_FLOAT ? 1e-5 : 2e-3; }

/* ------------------------------------------------------------------ Attention */

static const kiln_dtype float_types[2] = {KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT16};

KN_TEST(cuda_attention_gqa_4d) {
    NEED_GPU();
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = float_types[t];
        onemodel o;
        om_init(&o, 24);
        int64_t qd[4] = {2, 8, 5, 16}, kd[4] = {2, 2, 7, 16}, vd[4] = {2, 2, 7, 12};
        int in[3] = {om_input(&o, "Q", dt, 4, qd, 1.0f, NULL), om_input(&o, "K", dt, 4, kd, 1.0f, NULL),
                     om_input(&o, "V", dt, 4, vd, 1.0f, NULL)};
        int out[1] = {om_value(&o, "Y")};
        om_node(&o, "Attention", in, 3, out, 1);
        char what[64];
        snprintf(what, sizeof what, "Attention GQA 8/2 heads (%s)", kiln_dtype_name(dt));
        om_compare(&o, rtol_for(dt), atol_for(dt), what);
    }
}

KN_TEST(cuda_attention_causal_past_3d) {
    NEED_GPU();
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = float_types[t];
        onemodel o;
        om_init(&o, 24);
        /* 6 query heads over 2 kv heads, head size 8, 3 new tokens after 5 past ones */
        int64_t qd[3] = {2, 3, 48}, kd[3] = {2, 3, 16}, pd[4] = {2, 2, 5, 8};
        int in[6] = {om_input(&o, "Q", dt, 3, qd, 1.0f, NULL), om_input(&o, "K", dt, 3, kd, 1.0f, NULL),
                     om_input(&o, "V", dt, 3, kd, 1.0f, NULL), -1,
                     om_input(&o, "past_key", dt, 4, pd, 1.0f, NULL), om_input(&o, "past_value", dt, 4, pd, 1.0f, NULL)};
        int out[3] = {om_value(&o, "Y"), om_value(&o, "present_key"), om_value(&o, "present_value")};
        om_node(&o, "Attention", in, 6, out, 3);
        om_int(&o, "q_num_heads", 6);
        om_int(&o, "kv_num_heads", 2);
        om_int(&o, "is_causal", 1);
        char what[80];
        snprintf(what, sizeof what, "Attention causal with past, 3-D (%s)", kiln_dtype_name(dt));
        om_compare(&o, rtol_for(dt), atol_for(dt), what);
    }
}

KN_TEST(cuda_attention_bool_mask) {
    NEED_GPU();
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = float_types[t];
        onemodel o;
        om_init(&o, 24);
        int64_t qd[4] = {2, 3, 4, 8}, kd[4] = {2, 3, 6, 8}, md[4] = {2, 1, 4, 6};
        unsigned char keep[48];
        for (int i = 0; i < 48; i++) keep[i] = (unsigned char)((i * 7 + i / 6) % 3 != 0);
        for (int j = 0; j < 6; j++) keep[6 + j] = 0; /* batch 0, query 1: every key masked */
        int in[4] = {om_input(&o, "Q", dt, 4, qd, 1.0f, NULL), om_input(&o, "K", dt, 4, kd, 1.0f, NULL),
                     om_input(&o, "V", dt, 4, kd, 1.0f, NULL), om_input(&o, "mask", KILN_DTYPE_BOOL, 4, md, 0, keep)};
        /* outputs 1 and 2 (present key/value) omitted: Y and the probabilities */
        int out[4] = {om_value(&o, "Y"), -1, -1, om_value(&o, "probs")};
        om_node(&o, "Attention", in, 4, out, 4);
        om_int(&o, "qk_matmul_output_mode", 3);
        char what[80];
        snprintf(what, sizeof what, "Attention with a boolean mask (%s)", kiln_dtype_name(dt));
        om_compare(&o, rtol_for(dt), atol_for(dt), what);
    }
}

KN_TEST(cuda_attention_softcap_additive_mask) {
    NEED_GPU();
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = float_types[t];
        for (int mode = 0; mode < 3; mode++) {
            onemodel o;
            om_init(&o, 24);
            int64_t qd[4] = {1, 4, 5, 16}, kd[4] = {1, 4, 9, 16}, md[2] = {5, 9};
            int in[4] = {om_input(&o, "Q", dt, 4, qd, 2.0f, NULL), om_input(&o, "K", dt, 4, kd, 2.0f, NULL),
                         om_input(&o, "V", dt, 4, kd, 1.0f, NULL), om_input(&o, "mask", dt, 2, md, 1.0f, NULL)};
            int out[4] = {om_value(&o, "Y"), om_value(&o, "pk"), om_value(&o, "pv"), om_value(&o, "qk")};
            om_node(&o, "Attention", in, 4, out, 4);
            om_float(&o, "softcap", 2.5f);
            om_float(&o, "scale", 0.3f);
            om_int(&o, "qk_matmul_output_mode", mode);
            char what[96];
            snprintf(what, sizeof what, "Attention softcap + additive mask, scores mode %d (%s)", mode,
                     kiln_dtype_name(dt));
            om_compare(&o, rtol_for(dt), atol_for(dt), what);
        }
    }
}

/* a key range long enough for several score-row iterations per thread, with nonpad lengths */
KN_TEST(cuda_attention_long_nonpad) {
    NEED_GPU();
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = float_types[t];
        onemodel o;
        om_init(&o, 24);
        int64_t qd[4] = {2, 4, 33, 64}, kd[4] = {2, 2, 700, 64}, nd[1] = {2};
        int64_t lens[2] = {700, 450};
        int in[7] = {om_input(&o, "Q", dt, 4, qd, 1.0f, NULL), om_input(&o, "K", dt, 4, kd, 1.0f, NULL),
                     om_input(&o, "V", dt, 4, kd, 1.0f, NULL), -1, -1, -1,
                     om_input(&o, "nonpad", KILN_DTYPE_INT64, 1, nd, 0, lens)};
        int out[1] = {om_value(&o, "Y")};
        om_node(&o, "Attention", in, 7, out, 1);
        om_int(&o, "is_causal", 1);
        char what[80];
        snprintf(what, sizeof what, "Attention 700 keys, nonpad lengths (%s)", kiln_dtype_name(dt));
        om_compare(&o, rtol_for(dt), atol_for(dt), what);
    }
}

/* ------------------------------------------------------------------ the smaller operators */

KN_TEST(cuda_rotary_embedding) {
    NEED_GPU();
    for (int t = 0; t < 2; t++)
        for (int inter = 0; inter < 2; inter++) {
            kiln_dtype dt = float_types[t];
            onemodel o;
            om_init(&o, 23);
            int64_t xd[3] = {2, 5, 48}, cd[2] = {20, 4}, pd[2] = {2, 5};
            int64_t pos[10] = {0, 1, 2, 3, 4, 7, 19, 3, 11, 0};
            int in[4] = {om_input(&o, "X", dt, 3, xd, 1.0f, NULL), om_input(&o, "cos", dt, 2, cd, 1.0f, NULL),
                         om_input(&o, "sin", dt, 2, cd, 1.0f, NULL),
                         om_input(&o, "pos", KILN_DTYPE_INT64, 2, pd, 0, pos)};
            int out[1] = {om_value(&o, "Y")};
            om_node(&o, "RotaryEmbedding", in, 4, out, 1);
            om_int(&o, "num_heads", 4);
            om_int(&o, "rotary_embedding_dim", 8);
            om_int(&o, "interleaved", inter);
            char what[80];
            snprintf(what, sizeof what, "RotaryEmbedding interleaved=%d (%s)", inter, kiln_dtype_name(dt));
            om_compare(&o, rtol_for(dt), atol_for(dt), what);
        }
}

KN_TEST(cuda_causal_conv_with_state) {
    NEED_GPU();
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = float_types[t];
        onemodel o;
        om_init(&o, 27);
        int64_t xd[3] = {2, 6, 9}, wd[3] = {6, 1, 4}, bd[1] = {6}, sd[3] = {2, 6, 3};
        int in[4] = {om_input(&o, "X", dt, 3, xd, 1.0f, NULL), om_input(&o, "W", dt, 3, wd, 1.0f, NULL),
                     om_input(&o, "B", dt, 1, bd, 1.0f, NULL), om_input(&o, "S", dt, 3, sd, 1.0f, NULL)};
        int out[2] = {om_value(&o, "Y"), om_value(&o, "state")};
        om_node(&o, "CausalConvWithState", in, 4, out, 2);
        om_str(&o, "activation", "silu");
        char what[80];
        snprintf(what, sizeof what, "CausalConvWithState silu (%s)", kiln_dtype_name(dt));
        om_compare(&o, rtol_for(dt), atol_for(dt), what);
    }
}

KN_TEST(cuda_linear_attention) {
    NEED_GPU();
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = float_types[t];
        onemodel o;
        om_init(&o, 27);
        /* gated delta rule, 8 query heads over 4 kv heads, dk 40 (two registers per lane), dv 8 */
        int64_t qd[3] = {2, 6, 320}, kd[3] = {2, 6, 160}, vd[3] = {2, 6, 32}, sd[4] = {2, 4, 40, 8},
                dd[3] = {2, 6, 4}, bd[3] = {2, 6, 4};
        int in[6] = {om_input(&o, "Q", dt, 3, qd, 0.5f, NULL), om_input(&o, "K", dt, 3, kd, 0.2f, NULL),
                     om_input(&o, "V", dt, 3, vd, 1.0f, NULL), om_input(&o, "S", KILN_DTYPE_FLOAT, 4, sd, 0.5f, NULL),
                     om_input(&o, "decay", dt, 3, dd, 0.3f, NULL), om_input(&o, "beta", dt, 3, bd, 0.5f, NULL)};
        int out[2] = {om_value(&o, "Y"), om_value(&o, "state")};
        om_node(&o, "LinearAttention", in, 6, out, 2);
        om_int(&o, "q_num_heads", 8);
        om_int(&o, "kv_num_heads", 4);
        char what[80];
        snprintf(what, sizeof what, "LinearAttention gated delta (%s)", kiln_dtype_name(dt));
        om_compare(&o, rtol_for(dt), atol_for(dt), what);
    }
}

/* Indices out of range found on the device (cuda_errors.c): for each CUDA kernel whose inputs can
 * be out of range by data (Gather, GatherElements, GatherND, ScatterElements, ScatterND,
 * ReverseSequence, NegativeLogLikelihoodLoss, RotaryEmbedding, LSTM's sequence_lens), a one-node model whose indices are an input runs with valid indices
 * (three times: warm-up, recorded, replayed where graphs are on), then with one index out of range:
 * KILN_ERR_INVALID_ARGUMENT naming the node and the value, as the CPU kernel does (the CPU session
 * of the same model fails too); then valid again: the session is still usable and its output is
 * what it was. With graphs on and off. The GPU runs skip without a GPU; the CPU half runs
 * everywhere. */
#include "unit.h"

#include "test_model_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int named(tmb *b, const char *name, const char *op, const int *in, int nin, int out) {
    return kn_graph_add_node(b->g, name, op, "", in, nin, &out, 1);
}

/* The int64 input `idx` of the models below. */
typedef struct err_case {
    const char *node, *op;
    int rank;
    int64_t dims[4];
    int64_t good[16], bad[16];
    const char *expect; /* in the message, beside the node's name */
    bool i32;           /* the input is int32 (sequence_lens of the recurrent operators) */
} err_case;

static unsigned char *model_for(const err_case *k, size_t *size) {
    tmb b;
    bool rotary = !strcmp(k->op, "RotaryEmbedding");
    tmb_init(&b, rotary ? 23 : 17);
    int idx = tmb_input(&b, "idx", k->i32 ? KILN_DTYPE_INT32 : KILN_DTYPE_INT64, k->rank, k->dims, NULL);
    int y = tmb_value(&b, "y");
    if (!strcmp(k->op, "Gather")) {
        int data = tmb_const(&b, "data", 2, (int64_t[]){5, 3}, 1.0f);
        tmb_int(&b, named(&b, k->node, "Gather", (int[]){data, idx}, 2, y), "axis", 0);
    } else if (!strcmp(k->op, "GatherElements")) {
        int data = tmb_const(&b, "data", 2, (int64_t[]){3, 4}, 1.0f);
        tmb_int(&b, named(&b, k->node, "GatherElements", (int[]){data, idx}, 2, y), "axis", 1);
    } else if (!strcmp(k->op, "GatherND")) {
        int data = tmb_const(&b, "data", 2, (int64_t[]){4, 3}, 1.0f);
        named(&b, k->node, "GatherND", (int[]){data, idx}, 2, y);
    } else if (!strcmp(k->op, "ScatterElements")) {
        int data = tmb_const(&b, "data", 2, (int64_t[]){3, 4}, 1.0f);
        int upd = tmb_const(&b, "upd", 2, (int64_t[]){1, 4}, 1.0f);
        tmb_int(&b, named(&b, k->node, "ScatterElements", (int[]){data, idx, upd}, 3, y), "axis", 0);
    } else if (!strcmp(k->op, "ScatterND")) {
        int data = tmb_const(&b, "data", 2, (int64_t[]){4, 3}, 1.0f);
        int upd = tmb_const(&b, "upd", 2, (int64_t[]){2, 3}, 1.0f);
        named(&b, k->node, "ScatterND", (int[]){data, idx, upd}, 3, y);
    } else if (!strcmp(k->op, "ReverseSequence")) {
        int x = tmb_const(&b, "x", 3, (int64_t[]){4, 2, 3}, 1.0f);
        int n = named(&b, k->node, "ReverseSequence", (int[]){x, idx}, 2, y);
        tmb_int(&b, n, "time_axis", 0);
        tmb_int(&b, n, "batch_axis", 1);
    } else if (!strcmp(k->op, "NegativeLogLikelihoodLoss")) {
        int x = tmb_const(&b, "logp", 2, (int64_t[]){2, 3}, 1.0f);
        tmb_str(&b, named(&b, k->node, "NegativeLogLikelihoodLoss", (int[]){x, idx}, 2, y), "reduction", "none");
    } else if (!strcmp(k->op, "LSTM")) {
        /* X [T 3, batch 2, 2], hidden 2, reverse (a length past T would read before the sequence) */
        int x = tmb_const(&b, "x", 3, (int64_t[]){3, 2, 2}, 1.0f);
        int w = tmb_const(&b, "w", 3, (int64_t[]){1, 8, 2}, 0.5f), r = tmb_const(&b, "r", 3, (int64_t[]){1, 8, 2}, 0.5f);
        int bias = tmb_const(&b, "bias", 2, (int64_t[]){1, 16}, 0.1f);
        int n = named(&b, k->node, "LSTM", (int[]){x, w, r, bias, idx}, 5, y);
        tmb_int(&b, n, "hidden_size", 2);
        tmb_str(&b, n, "direction", "reverse");
    } else if (rotary) {
        int x = tmb_const(&b, "x", 4, (int64_t[]){1, 1, 2, 4}, 1.0f);
        int cs = tmb_const(&b, "cos_cache", 2, (int64_t[]){3, 2}, 1.0f);
        int sn = tmb_const(&b, "sin_cache", 2, (int64_t[]){3, 2}, 1.0f);
        named(&b, k->node, "RotaryEmbedding", (int[]){x, cs, sn, idx}, 4, y);
    }
    tmb_output(&b, y);
    return tmb_finish(&b, size);
}

static const err_case cases[] = {
    {"gather_node", "Gather", 1, {4}, {0, 4, -1, 2}, {0, 5, 1, 2}, "index 5 is out of range [-5, 5)"},
    {"gather_elements_node", "GatherElements", 2, {3, 4}, {0, 1, 2, 3, 3, 2, 1, 0, -1, 0, 1, 2}, {0, 1, 2, 3, 3, 2, 4, 0, 0, 0, 1, 2},
     "index 4 is out of range [-4, 4)"},
    {"gather_nd_node", "GatherND", 2, {2, 1}, {1, 3}, {1, -5}, "index -5 is out of range [-4, 4)"},
    {"scatter_elements_node", "ScatterElements", 2, {1, 4}, {0, 1, 2, -1}, {0, 3, 2, 1}, "index 3 is out of range [-3, 3)"},
    {"scatter_nd_node", "ScatterND", 2, {2, 1}, {0, 2}, {0, 7}, "index 7 is out of range [-4, 4)"},
    {"reverse_sequence_node", "ReverseSequence", 1, {2}, {4, 2}, {5, 1}, "sequence_lens[0] = 5 is outside [0, 4]"},
    {"nll_node", "NegativeLogLikelihoodLoss", 1, {2}, {0, 2}, {0, 3}, "target value 3 at position 1 is not a class in [0, 3)"},
    {"rotary_node", "RotaryEmbedding", 2, {1, 2}, {0, 2}, {0, 3}, "position id 3 is outside the cache's 3 rows"},
    {"lstm_node", "LSTM", 1, {2}, {3, 1}, {3, 4}, "sequence_lens[1] = 4 is outside [0, 3]", true},
};

static kiln_session *session_for(const unsigned char *m, size_t size, const char *provider, const char *graphs) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_opt_level(o, 0); /* the node as written, under its name */
    const char *k[1] = {"graphs"}, *v[1] = {graphs};
    kiln_session_options_append_provider(o, provider, graphs ? k : NULL, graphs ? v : NULL, graphs ? 1 : 0);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(m, size, NULL, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "%s session: %s", provider, kiln_last_error());
    return s;
}

static kiln_tensor *indices(const err_case *k, const int64_t *values) {
    kiln_tensor *t = NULL;
    kiln_tensor_create(k->i32 ? KILN_DTYPE_INT32 : KILN_DTYPE_INT64, k->dims, (size_t)k->rank, &t);
    if (!t) return NULL;
    for (int64_t i = 0; i < kiln_tensor_element_count(t); i++) {
        if (k->i32) ((int32_t *)kiln_tensor_data(t))[i] = (int32_t)values[i];
        else ((int64_t *)kiln_tensor_data(t))[i] = values[i];
    }
    return t;
}

static kiln_status run_one(kiln_session *s, kiln_tensor *idx, kiln_tensor **out) {
    const char *names[1] = {"idx"};
    *out = NULL;
    return kiln_session_run(s, names, &idx, 1, NULL, 1, out);
}

static bool same(const kiln_tensor *a, const kiln_tensor *b) {
    return a && b && kiln_tensor_bytes(a) == kiln_tensor_bytes(b) &&
           !memcmp(kiln_tensor_data((kiln_tensor *)a), kiln_tensor_data((kiln_tensor *)b), kiln_tensor_bytes(a));
}

/* good x3, bad, good: the error names the node and says what; the session recovers. */
static void check_case(const err_case *k, const char *provider, const char *graphs) {
    size_t size;
    unsigned char *m = model_for(k, &size);
    if (!m) return;
    kiln_session *s = session_for(m, size, provider, graphs);
    free(m);
    if (!s) return;
    kiln_tensor *good = indices(k, k->good), *bad = indices(k, k->bad), *first = NULL, *out = NULL;
    for (int i = 0; i < 3; i++) {
        kiln_status st = run_one(s, good, &out);
        CHECK_MSG(st == KILN_OK, "%s on %s (graphs=%s), valid indices, run %d: %s", k->op, provider,
                  graphs ? graphs : "-", i, kiln_last_error());
        if (i == 0) first = out;
        else {
            CHECK_MSG(same(out, first), "%s on %s: run %d differs from the first", k->op, provider, i);
            kiln_tensor_destroy(out);
        }
        out = NULL;
    }
    kiln_status st = run_one(s, bad, &out);
    const char *msg = kiln_last_error();
    printf("  %s on %s (graphs=%s): %s\n", k->op, provider, graphs ? graphs : "-", st == KILN_OK ? "no error" : msg);
    CHECK_MSG(st != KILN_OK && out == NULL, "%s on %s: an index out of range gave no error", k->op, provider);
    if (!strcmp(provider, "cuda")) {
        CHECK_MSG(st == KILN_ERR_INVALID_ARGUMENT, "%s on cuda: status %d, not KILN_ERR_INVALID_ARGUMENT", k->op, (int)st);
        CHECK_MSG(strstr(msg, k->node) != NULL, "%s on cuda: the message does not name node '%s': %s", k->op, k->node, msg);
        CHECK_MSG(strstr(msg, k->op) != NULL, "%s on cuda: the message does not name the operator: %s", k->op, msg);
        CHECK_MSG(strstr(msg, k->expect) != NULL, "%s on cuda: the message does not say '%s': %s", k->op, k->expect, msg);
    }
    kiln_tensor_destroy(out);
    out = NULL;
    st = run_one(s, good, &out);
    CHECK_MSG(st == KILN_OK, "%s on %s: the run after the error: %s", k->op, provider, kiln_last_error());
    CHECK_MSG(same(out, first), "%s on %s: the run after the error differs from the first", k->op, provider);
    kiln_tensor_destroy(out);
    kiln_tensor_destroy(first);
    kiln_tensor_destroy(good);
    kiln_tensor_destroy(bad);
    kiln_session_destroy(s);
}

static const err_case *case_of(const char *op) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!strcmp(cases[i].op, op)) return &cases[i];
    return NULL;
}

static void on_cuda(const char *op) {
    const err_case *k = case_of(op);
    check_case(k, "cuda", "1");
    check_case(k, "cuda", "0");
}

/* The same models on the CPU: the reference behaviour (and a check of the models themselves). */
KN_TEST(cuda_data_errors_cpu_reference) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i], "cpu", NULL);
}

KN_TEST(cuda_data_error_gather) {
    NEED_GPU();
    on_cuda("Gather");
}
KN_TEST(cuda_data_error_gather_elements) {
    NEED_GPU();
    on_cuda("GatherElements");
}
KN_TEST(cuda_data_error_gather_nd) {
    NEED_GPU();
    on_cuda("GatherND");
}
KN_TEST(cuda_data_error_scatter_elements) {
    NEED_GPU();
    on_cuda("ScatterElements");
}
KN_TEST(cuda_data_error_scatter_nd) {
    NEED_GPU();
    on_cuda("ScatterND");
}
KN_TEST(cuda_data_error_reverse_sequence) {
    NEED_GPU();
    on_cuda("ReverseSequence");
}
KN_TEST(cuda_data_error_nll_target) {
    NEED_GPU();
    on_cuda("NegativeLogLikelihoodLoss");
}
KN_TEST(cuda_data_error_rotary_position) {
    NEED_GPU();
    on_cuda("RotaryEmbedding");
}
KN_TEST(cuda_data_error_lstm_sequence_lens) {
    NEED_GPU();
    on_cuda("LSTM");
}

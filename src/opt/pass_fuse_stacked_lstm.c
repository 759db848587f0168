/* Pass fuse_stacked_lstm (level 2): stacked LSTM layers, LSTM -> Squeeze(axis 1) -> LSTM as
 * exporters write a multi-layer LSTM (PyTorch's nn.LSTM(num_layers=N)), become one
 * kiln.StackedLSTM. A device runs its layers as a pipeline, layer l + 1's step t beside layer l's
 * step t + 1, where the unfused graph runs every step of one layer before the next layer starts.
 *
 * Only what kiln.StackedLSTM means is fused: forward layers with ONNX's default activations, no
 * clip, peepholes, sequence_lens or input_forget, layout 0; the lower layer's Y read by the Squeeze
 * alone and its Y_h and Y_c read by nobody (the fused node gives only the top layer's). A
 * StackedLSTM below an LSTM grows by one layer. */
#include "opt/pass.h"

#include <string.h>
#include <strings.h>

/* A forward, default-attribute LSTM that kiln.StackedLSTM can take as a layer. */
static bool plain_lstm(const kn_opt_ctx *c, int node) {
    if (!kn_opt_is(c, node, "LSTM")) return false;
    const kn_node *n = &c->g->nodes[node];
    if (strcmp(kn_attr_string(n, "direction", "forward"), "forward") || kn_attr_int(n, "layout", 0) != 0 ||
        kn_attr_int(n, "input_forget", 0) != 0 || kn_node_attr(n, "clip") || kn_node_attr(n, "activation_alpha") ||
        kn_node_attr(n, "activation_beta"))
        return false;
    const kn_attr *acts = kn_node_attr(n, "activations");
    static const char *const want[3] = {"Sigmoid", "Tanh", "Tanh"};
    if (acts) {
        if (acts->n != 3) return false;
        for (int i = 0; i < 3; i++)
            if (strcasecmp(acts->strings[i], want[i])) return false;
    }
    /* sequence_lens and P absent; W and R present */
    return kn_opt_input(c, node, 4) < 0 && kn_opt_input(c, node, 7) < 0 && kn_opt_input(c, node, 1) >= 0 &&
           kn_opt_input(c, node, 2) >= 0;
}

/* Squeeze of axis 1 only (attribute before opset 13, constant input from it). */
static bool squeezes_axis_1(const kn_opt_ctx *c, int node) {
    if (!kn_opt_is(c, node, "Squeeze")) return false;
    const kn_node *n = &c->g->nodes[node];
    const kn_attr *a = kn_node_attr(n, "axes");
    if (a) return a->n == 1 && (a->ints[0] == 1 || a->ints[0] == -3);
    const kn_tensor *axes = kn_opt_input(c, node, 1) >= 0 ? kn_opt_const(c, kn_opt_input(c, node, 1)) : NULL;
    if (!axes || kn_tensor_count(axes) != 1) return false;
    int64_t ax = kn_tensor_get_i64(axes, 0);
    return ax == 1 || ax == -3;
}

/* An LSTM's inputs that make a StackedLSTM layer: W, R, B, initial_h, initial_c. */
static const int layer_inputs[5] = {1, 2, 3, 5, 6};

static bool unread(const kn_opt_ctx *c, const kn_node *n, int o) {
    return o >= n->n_outputs || n->outputs[o] < 0 ||
           (kn_opt_n_consumers(c, n->outputs[o]) == 0 && !kn_opt_pinned(c, n->outputs[o]));
}

kiln_status kn_pass_fuse_stacked_lstm(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    int n_nodes = g->n_nodes;
    for (int top = 0; top < n_nodes; top++) {
        if (!plain_lstm(c, top)) continue;
        int sq = kn_opt_producer(c, kn_opt_input(c, top, 0));
        if (sq < 0 || !squeezes_axis_1(c, sq) || kn_opt_only_consumer(c, g->nodes[top].inputs[0]) != top) continue;
        int y_low = kn_opt_input(c, sq, 0), low = kn_opt_producer(c, y_low);
        if (low < 0 || kn_opt_only_consumer(c, y_low) != sq) continue;
        const kn_node *ln = &g->nodes[low];
        bool low_stack = kn_opt_is_in(c, low, "kiln", "StackedLSTM");
        if (!low_stack && !plain_lstm(c, low)) continue;
        if (ln->outputs[0] != y_low || !unread(c, ln, 1) || !unread(c, ln, 2)) continue;
        int low_layers = low_stack ? kn_stacked_lstm_layers(ln->n_inputs) : 1;
        if (low_layers + 1 > KN_STACKED_LSTM_MAX_LAYERS) continue;

        kn_opt_proto p;
        kn_proto_init(&p, "kiln", "StackedLSTM");
        kn_proto_in(&p, ln->inputs[0]);
        if (low_stack) {
            for (int i = 1; i < 1 + 5 * low_layers; i++) kn_proto_in(&p, kn_opt_input(c, low, i));
        } else {
            for (int i = 0; i < 5; i++) kn_proto_in(&p, kn_opt_input(c, low, layer_inputs[i]));
        }
        for (int i = 0; i < 5; i++) kn_proto_in(&p, kn_opt_input(c, top, layer_inputs[i]));
        const kn_node *tn = &g->nodes[top];
        int n_out = tn->n_outputs;
        while (n_out > 0 && tn->outputs[n_out - 1] < 0) n_out--;
        for (int o = 0; o < n_out; o++) kn_proto_out(&p, tn->outputs[o]);
        int node;
        KN_TRY(kn_opt_emit(c, &p, top, &node));
        if (node < 0) continue;
        kn_opt_kill(c, low);
        kn_opt_kill(c, sq);
        kn_opt_kill(c, top);
        kn_opt_note(c, low_stack ? "StackedLSTM+LSTM" : "LSTM+LSTM as StackedLSTM");
        KN_TRY(kn_opt_refresh(c));
    }
    return KILN_OK;
}

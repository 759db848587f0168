/* Removes nodes that hand their input on unchanged: Identity, inference-mode Dropout, and Cast,
 * Reshape, Transpose, Expand, Slice, Squeeze/Unsqueeze, Pad, Concat, Split, Tile whose result equals
 * their input, plus arithmetic with a neutral constant (x*1, x/1, x+0, x-0) that changes neither
 * the element type nor the shape. Readers of the output read the input instead; when the output is
 * a graph output its name is kept (see kn_opt_forward). */
#include "opt/pass.h"

#include <string.h>

/* Whether input 0 and output 0 have the same element type and the same shape. */
static bool same_type(const kn_opt_ctx *c, int node) {
    const kn_node *n = &c->g->nodes[node];
    if (n->n_inputs < 1 || n->n_outputs < 1 || n->inputs[0] < 0 || n->outputs[0] < 0) return false;
    const kn_type *a = &c->g->values[n->inputs[0]].type, *b = &c->g->values[n->outputs[0]].type;
    return a->dtype != KILN_DTYPE_UNDEFINED && a->dtype == b->dtype && kn_opt_same_shape(a, b);
}

static bool dropout_is_identity(const kn_opt_ctx *c, int node) {
    const kn_node *n = &c->g->nodes[node];
    /* the mask output must be unused */
    if (n->n_outputs > 1 && n->outputs[1] >= 0 &&
        (kn_opt_n_consumers(c, n->outputs[1]) > 0 || kn_opt_pinned(c, n->outputs[1])))
        return false;
    if (n->opset < 12) return true; /* kiln runs opset < 12 Dropout in inference mode */
    int tm = kn_opt_input(c, node, 2);
    if (tm < 0) return true;
    double v;
    if (kn_opt_scalar(c, tm, &v) && v == 0) return true;
    int rt = kn_opt_input(c, node, 1);
    return rt >= 0 && kn_opt_scalar(c, rt, &v) && v == 0;
}

static bool transpose_is_identity(const kn_opt_ctx *c, int node) {
    const kn_node *n = &c->g->nodes[node];
    int cnt = 0;
    const int64_t *perm = kn_attr_ints(n, "perm", &cnt);
    int rank = c->g->values[n->inputs[0]].type.rank;
    if (!perm) return rank >= 0 && rank <= 1; /* reversal */
    if (rank >= 0 && cnt != rank) return false;
    for (int i = 0; i < cnt; i++)
        if (perm[i] != i) return false;
    return true;
}

/* Slice keeps its input when every step is 1 and the shape does not change (a step-1 slice as
 * long as the axis starts at 0). */
static bool slice_is_identity(const kn_opt_ctx *c, int node) {
    const kn_node *n = &c->g->nodes[node];
    if (!same_type(c, node)) return false;
    if (n->opset < 10) return true; /* no steps before opset 10 */
    int steps = kn_opt_input(c, node, 4);
    return steps < 0 || kn_opt_const_all(c, steps, 1);
}

static bool pad_is_identity(const kn_opt_ctx *c, int node) {
    const kn_node *n = &c->g->nodes[node];
    if (!same_type(c, node)) return false;
    if (n->opset < 11) {
        int cnt = 0;
        const int64_t *pads = kn_attr_ints(n, "pads", &cnt);
        for (int i = 0; i < cnt; i++)
            if (pads[i] != 0) return false;
        return true;
    }
    int pads = kn_opt_input(c, node, 1);
    return pads >= 0 && kn_opt_const_all(c, pads, 0);
}

/* The input that the node passes on unchanged, or -1. */
static int passthrough(const kn_opt_ctx *c, int node) {
    const kn_node *n = &c->g->nodes[node];
    const char *op = n->op_type;
    if (*n->domain || n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs < 1 || n->outputs[0] < 0) return -1;
    int x = n->inputs[0];
    if (!strcmp(op, "Identity")) return n->n_outputs == 1 ? x : -1;
    if (!strcmp(op, "Dropout")) return dropout_is_identity(c, node) ? x : -1;
    if (n->n_outputs != 1) {
        /* Split into one piece */
        return -1;
    }
    if (!strcmp(op, "Cast") || !strcmp(op, "CastLike") || !strcmp(op, "Reshape") || !strcmp(op, "Expand") ||
        !strcmp(op, "Squeeze") || !strcmp(op, "Unsqueeze") || !strcmp(op, "Flatten") || !strcmp(op, "Tile"))
        return same_type(c, node) ? x : -1;
    if (!strcmp(op, "Transpose")) return transpose_is_identity(c, node) ? x : -1;
    if (!strcmp(op, "Slice")) return slice_is_identity(c, node) ? x : -1;
    if (!strcmp(op, "Pad")) return pad_is_identity(c, node) ? x : -1;
    if (!strcmp(op, "Concat")) return kn_opt_n_inputs(c, node) == 1 && same_type(c, node) ? x : -1;
    if (!strcmp(op, "Mul") || !strcmp(op, "Div") || !strcmp(op, "Add") || !strcmp(op, "Sub")) {
        if (n->n_inputs != 2 || n->inputs[1] < 0) return -1;
        double neutral = !strcmp(op, "Mul") || !strcmp(op, "Div") ? 1 : 0;
        /* x op neutral, or neutral * x / neutral + x (the commutative ones) */
        if (kn_opt_const_all(c, n->inputs[1], neutral) && same_type(c, node)) return x;
        if ((!strcmp(op, "Mul") || !strcmp(op, "Add")) && kn_opt_const_all(c, x, neutral)) {
            const kn_type *a = &c->g->values[n->inputs[1]].type, *b = &c->g->values[n->outputs[0]].type;
            if (a->dtype == b->dtype && kn_opt_same_shape(a, b)) return n->inputs[1];
        }
        return -1;
    }
    return -1;
}

kiln_status kn_pass_remove_noops(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        int x = passthrough(c, i);
        if (x < 0) continue;
        int y = n->outputs[0];
        if (!kn_opt_forward(c, y, x)) continue;
        kn_opt_note(c, g->nodes[i].op_type);
        kn_opt_kill(c, i);
        KN_TRY(kn_opt_refresh(c));
    }
    return KILN_OK;
}

/* Pattern pieces shared by the fusion passes: recognising the activation that follows a value. */
#include "opt/pass.h"

#include <math.h>
#include <string.h>

bool kn_opt_is_in(const kn_opt_ctx *c, int node, const char *domain, const char *op_type) {
    if (node < 0 || node >= c->g->n_nodes) return false;
    const kn_node *n = &c->g->nodes[node];
    return !n->dead && !strcmp(n->domain, domain) && !strcmp(n->op_type, op_type);
}

int kn_opt_other_input(const kn_opt_ctx *c, int node, int v) {
    const kn_node *n = &c->g->nodes[node];
    if (n->n_inputs != 2) return -1;
    if (n->inputs[0] == v && n->inputs[1] != v) return n->inputs[1];
    if (n->inputs[1] == v && n->inputs[0] != v) return n->inputs[0];
    return -1;
}

/* Clip's bounds: attributes before opset 11, optional constant inputs after. */
bool kn_opt_clip_bounds(const kn_opt_ctx *c, int node, float *lo, float *hi) {
    const kn_node *n = &c->g->nodes[node];
    *lo = -INFINITY;
    *hi = INFINITY;
    if (n->opset < 11) {
        *lo = kn_attr_float(n, "min", -INFINITY);
        *hi = kn_attr_float(n, "max", INFINITY);
        return true;
    }
    double v;
    int mn = kn_opt_input(c, node, 1), mx = kn_opt_input(c, node, 2);
    if (mn >= 0) {
        if (!kn_opt_scalar(c, mn, &v)) return false;
        *lo = (float)v;
    }
    if (mx >= 0) {
        if (!kn_opt_scalar(c, mx, &v)) return false;
        *hi = (float)v;
    }
    return true;
}

bool kn_opt_match_activation(const kn_opt_ctx *c, int v, kn_act_spec *act, int *out_v, int *nodes, int *n_nodes) {
    const kn_graph *g = c->g;
    act->act = KN_ACT_NONE;
    act->p0 = act->p1 = 0;
    if (kn_opt_pinned(c, v)) return false;
    int nc = kn_opt_n_consumers(c, v);
    if (nc == 2) {
        /* x * sigmoid(x) */
        int a = c->cons[c->cons_start[v]], b = c->cons[c->cons_start[v] + 1];
        int sig = kn_opt_is(c, a, "Sigmoid") ? a : kn_opt_is(c, b, "Sigmoid") ? b : -1;
        int mul = sig == a ? b : a;
        if (sig < 0 || !kn_opt_is(c, mul, "Mul")) return false;
        int s = g->nodes[sig].outputs[0];
        if (kn_opt_other_input(c, mul, v) != s || kn_opt_only_consumer(c, s) != mul) return false;
        act->act = KN_ACT_SILU;
        *out_v = g->nodes[mul].outputs[0];
        nodes[(*n_nodes)++] = sig;
        nodes[(*n_nodes)++] = mul;
        return true;
    }
    int n = kn_opt_only_consumer(c, v);
    if (n < 0 || g->nodes[n].n_outputs != 1 || g->nodes[n].inputs[0] != v) return false;
    const kn_node *nd = &g->nodes[n];
    if (kn_opt_is(c, n, "Relu")) act->act = KN_ACT_RELU;
    else if (kn_opt_is(c, n, "Sigmoid")) act->act = KN_ACT_SIGMOID;
    else if (kn_opt_is(c, n, "Tanh")) act->act = KN_ACT_TANH;
    else if (kn_opt_is(c, n, "HardSwish")) act->act = KN_ACT_HARD_SWISH;
    else if (kn_opt_is(c, n, "LeakyRelu")) {
        act->act = KN_ACT_LEAKY_RELU;
        act->p0 = kn_attr_float(nd, "alpha", 0.01f);
    } else if (kn_opt_is(c, n, "HardSigmoid")) {
        act->act = KN_ACT_HARD_SIGMOID;
        act->p0 = kn_attr_float(nd, "alpha", 0.2f);
        act->p1 = kn_attr_float(nd, "beta", 0.5f);
    } else if (kn_opt_is(c, n, "Clip")) {
        if (!kn_opt_clip_bounds(c, n, &act->p0, &act->p1)) return false;
        act->act = KN_ACT_CLIP;
    } else if (kn_opt_is_in(c, n, "kiln", "Gelu")) {
        act->act = strcmp(kn_attr_string(nd, "approximate", "none"), "tanh") ? KN_ACT_GELU : KN_ACT_GELU_TANH;
    } else {
        return false;
    }
    *out_v = nd->outputs[0];
    nodes[(*n_nodes)++] = n;
    return true;
}

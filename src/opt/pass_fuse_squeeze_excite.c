/* Squeeze-excite blocks into kiln.SqueezeExcite: Y = X * gate(W2 act(W1 mean(X) + B1) + B2).
 *
 *     pool:    GlobalAveragePool(X), or ReduceMean(X) over exactly the spatial axes (dims kept, or
 *              dropped when a product on [N, C] follows)
 *     squeeze: a 1x1 Conv / kiln.FusedConv (one group, unit strides, no pads, no residual) on the
 *              pooled [N, C, 1, ...], or Flatten / Reshape / Squeeze to [N, C] then Gemm /
 *              kiln.FusedGemm (alpha 1, beta 1, transA 0) or MatMul / kiln.FusedMatMul (+ Add of
 *              a bias); its activation the fused node's own or the nodes after it (Relu, SiLU as
 *              x * sigmoid(x), HardSwish, ...: kn_opt_match_activation)
 *     excite:  the same kind of product back to C channels, then the gate activation (Sigmoid,
 *              HardSigmoid, any kiln fuses), and in the flat form a Reshape / Unsqueeze to
 *              [N, C, 1, ...]
 *     Mul(gate, X) or Mul(X, gate), Y of X's shape.
 * Every value between X and Y must be read by the next node alone (and be no graph output). With
 * channels last (layout_nhwc ran: ReduceMean over axes 1..r-2 and kiln.FusedConv of layout NHWC,
 * whose 1x1 weights [M, 1, 1, C] hold the same numbers in the same order as [M, C, 1, 1]) the
 * node gets layout NHWC. Product weights given [C, M] (Gemm transB 0, MatMul) must be constants:
 * they are transposed here, once.
 *
 * Why level 3, after layout_nhwc and lower_precision: those rewrite the block's nodes (Casts,
 * channels-last forms, converted weights) and know nothing of this operator; matched after them,
 * the fused node exists in whatever layout and type the graph has by then. Before cpu_bf16_values,
 * which turns convolution outputs read only by convolutions into bfloat16 (the squeeze's output
 * would be one). */
#include "opt/pass.h"

#include <string.h>

#define SE_MAX_NODES 32

typedef struct se_match {
    int nodes[SE_MAX_NODES], n_nodes;
    int x;        /* the block's input */
    int rank;     /* X's rank */
    bool nhwc;    /* channels last */
    int64_t C;    /* X's channels */
} se_match;

/* One product of the block: its weights (rows of the output's features, or transposed) and
 * bias, the activation after it and the value it ends in. */
typedef struct se_linear {
    int w, b;
    bool w_transposed; /* w is [in, out]: a transposed copy is made */
    kn_act_spec act;
    int out;
    int anchor; /* the product's node */
} se_linear;

static bool take(se_match *m, int node) {
    if (node < 0 || m->n_nodes >= SE_MAX_NODES) return false;
    m->nodes[m->n_nodes++] = node;
    return true;
}

/* Whether dims a and b are the same (both known and equal, or the same symbol). */
static bool same_dim(const kn_dim *a, const kn_dim *b) {
    if (a->value >= 0 || b->value >= 0) return a->value == b->value;
    return a->symbol && b->symbol && !strcmp(a->symbol, b->symbol);
}

/* Whether t is X's pooled shape: X's batch, C at the channel axis, 1 elsewhere (rank r), or [N, C]
 * when flat. */
static bool pooled_shape(const kn_opt_ctx *c, const se_match *m, const kn_type *t, bool flat) {
    const kn_type *x = &c->g->values[m->x].type;
    if (t->kind != KN_TYPE_TENSOR || t->dtype != x->dtype || t->rank != (flat ? 2 : m->rank)) return false;
    /* the batch: X's, or unknown (a Reshape to [-1, C, 1, 1]: the N * C values of the pooled
     * vector, so N again) */
    if (!same_dim(&t->dims[0], &x->dims[0]) && t->dims[0].value >= 0) return false;
    const int ch = flat ? 1 : m->nhwc ? m->rank - 1 : 1;
    for (int d = 1; d < t->rank; d++)
        if (t->dims[d].value != (d == ch ? m->C : 1)) return false;
    return true;
}

/* The node's activation attribute when it has no clamp after it; false when it has one. */
static bool own_activation(const kn_node *n, kn_act_spec *a) {
    char why[128];
    if (kn_node_attr(n, "activation_bounds")) return false;
    return kn_act_from_node(n, a, why, sizeof why);
}

/* The activation after value v, when the product's node has none: separate nodes, or none. */
static void activation_after(const kn_opt_ctx *c, se_match *m, se_linear *l) {
    int nodes[KN_OPT_ACT_MAX_NODES], n = 0, after = l->out;
    kn_act_spec a;
    if (l->act.act != KN_ACT_NONE || !kn_opt_match_activation(c, l->out, &a, &after, nodes, &n)) return;
    if (m->n_nodes + n > SE_MAX_NODES) return;
    for (int k = 0; k < n; k++) take(m, nodes[k]);
    l->act = a;
    l->out = after;
}

/* A 1x1 convolution of v (Conv or kiln.FusedConv of the block's layout): one group, unit strides,
 * no pads, weights [out, in, 1, ...] (NCHW) or [out, 1, ..., in] (NHWC), no residual, no y_type. */
static bool match_conv(const kn_opt_ctx *c, se_match *m, int v, se_linear *l) {
    const kn_graph *g = c->g;
    const int node = kn_opt_only_consumer(c, v);
    const bool fused = kn_opt_is_in(c, node, "kiln", "FusedConv");
    if (!fused && !kn_opt_is(c, node, "Conv")) return false;
    const kn_node *n = &g->nodes[node];
    bool nhwc = false;
    if (n->inputs[0] != v || n->n_outputs != 1 || kn_opt_input(c, node, 3) >= 0 || kn_node_attr(n, "y_type") ||
        (fused && !kn_fused_conv_layout(n, &nhwc)) || nhwc != m->nhwc || kn_attr_int(n, "group", 1) != 1)
        return false;
    if (!kn_opt_conv_unpadded_unit_stride(n)) return false;
    const int w = kn_opt_input(c, node, 1);
    const kn_type *wt = w >= 0 ? &g->values[w].type : NULL;
    if (!wt || wt->rank != m->rank) return false;
    for (int d = 1; d < wt->rank; d++) {
        const bool channel = d == (m->nhwc ? wt->rank - 1 : 1);
        if (!channel && wt->dims[d].value != 1) return false;
    }
    l->act = (kn_act_spec){.act = KN_ACT_NONE}; /* every field: kn_proto_act reads the bounds too */
    if (fused && !own_activation(n, &l->act)) return false;
    l->w = w;
    l->b = kn_opt_input(c, node, 2);
    l->w_transposed = false;
    l->out = n->outputs[0];
    l->anchor = node;
    if (!take(m, node)) return false;
    activation_after(c, m, l);
    return true;
}

/* Gemm / kiln.FusedGemm (alpha 1, beta 1, transA 0, C with one value per output column), MatMul /
 * kiln.FusedMatMul (B 2-D, a bias per column, no residual) + Add of such a bias, on [N, K] v. */
static bool match_flat(const kn_opt_ctx *c, se_match *m, int v, se_linear *l) {
    const kn_graph *g = c->g;
    const int node = kn_opt_only_consumer(c, v);
    const kn_node *n = node >= 0 ? &g->nodes[node] : NULL;
    if (!n || n->n_outputs != 1 || n->inputs[0] != v) return false;
    const bool gemm = kn_opt_is(c, node, "Gemm") || kn_opt_is_in(c, node, "kiln", "FusedGemm");
    const bool matmul = kn_opt_is(c, node, "MatMul") || kn_opt_is_in(c, node, "kiln", "FusedMatMul");
    if (!gemm && !matmul) return false;
    const int w = kn_opt_input(c, node, 1);
    const kn_type *wt = w >= 0 ? &g->values[w].type : NULL;
    const kn_type *yt = &g->values[n->outputs[0]].type;
    if (!wt || wt->rank != 2 || yt->rank != 2 || yt->dims[1].value < 1) return false;
    const int64_t out = yt->dims[1].value;
    bool trans_b = false;
    if (gemm) {
        if (kn_attr_float(n, "alpha", 1.0f) != 1.0f || kn_attr_int(n, "transA", 0) != 0 ||
            (kn_opt_input(c, node, 2) >= 0 && kn_attr_float(n, "beta", 1.0f) != 1.0f))
            return false;
        trans_b = kn_attr_int(n, "transB", 0) != 0;
    } else if (kn_opt_input(c, node, 3) >= 0) {
        return false; /* FusedMatMul's residual */
    }
    l->act = (kn_act_spec){.act = KN_ACT_NONE}; /* every field: kn_proto_act reads the bounds too */
    if ((kn_opt_is_in(c, node, "kiln", "FusedGemm") || kn_opt_is_in(c, node, "kiln", "FusedMatMul")) &&
        !own_activation(n, &l->act))
        return false;
    l->w = w;
    l->w_transposed = !trans_b;
    if (l->w_transposed && !kn_opt_const(c, w)) return false;
    l->b = kn_opt_input(c, node, 2);
    l->out = n->outputs[0];
    l->anchor = node;
    if (!take(m, node)) return false;
    if (l->b < 0 && l->act.act == KN_ACT_NONE && !gemm) {
        /* MatMul + Add(bias) */
        const int add = kn_opt_only_consumer(c, l->out);
        const int other = add >= 0 && kn_opt_is(c, add, "Add") ? kn_opt_other_input(c, add, l->out) : -1;
        if (other >= 0 && kn_opt_const(c, other) && kn_opt_static_count(&g->values[other].type) == out &&
            kn_opt_same_shape(&g->values[g->nodes[add].outputs[0]].type, yt)) {
            const kn_type *bt = &g->values[other].type;
            if (bt->rank >= 1 && bt->dims[bt->rank - 1].value == out && take(m, add)) {
                l->b = other;
                l->out = g->nodes[add].outputs[0];
            }
        }
    }
    if (l->b >= 0) {
        const kn_type *bt = &g->values[l->b].type;
        if (kn_opt_static_count(bt) != out || (bt->rank >= 1 && bt->dims[bt->rank - 1].value != out)) return false;
    }
    activation_after(c, m, l);
    return true;
}

/* A node turning [N, C, 1, ...] into [N, C] or back (Flatten, Reshape, Squeeze, Unsqueeze): its
 * output, when v's only reader is one and its output has the shape wanted. */
static int reshaped(const kn_opt_ctx *c, se_match *m, int v, bool to_flat) {
    const int node = kn_opt_only_consumer(c, v);
    if (node < 0 || c->g->nodes[node].n_outputs != 1 || c->g->nodes[node].inputs[0] != v) return -1;
    static const char *const ops[] = {"Flatten", "Reshape", "Squeeze", "Unsqueeze"};
    bool ok = false;
    for (int k = 0; k < 4 && !ok; k++) ok = kn_opt_is(c, node, ops[k]);
    const int out = c->g->nodes[node].outputs[0];
    if (!ok || !pooled_shape(c, m, &c->g->values[out].type, to_flat) || !take(m, node)) return -1;
    return out;
}

/* The pool reading X: GlobalAveragePool, or ReduceMean over the spatial axes. Sets the layout;
 * *flat when the pooled value is [N, C]. */
static bool match_pool(const kn_opt_ctx *c, int node, se_match *m, bool *flat) {
    const kn_graph *g = c->g;
    const kn_node *n = &g->nodes[node];
    const bool gap = kn_opt_is(c, node, "GlobalAveragePool"), mean = kn_opt_is(c, node, "ReduceMean");
    if ((!gap && !mean) || n->n_outputs != 1 || n->inputs[0] < 0) return false;
    m->x = n->inputs[0];
    const kn_type *x = &g->values[m->x].type;
    if (x->kind != KN_TYPE_TENSOR || x->rank < 3 || x->rank > KILN_MAX_RANK || !kn_opt_is_float(c, m->x)) return false;
    m->rank = x->rank;
    m->nhwc = false;
    *flat = false;
    if (mean) {
        int64_t axes[KILN_MAX_RANK];
        int na = 0;
        if (!kn_opt_reduce_axes(c, node, axes, KILN_MAX_RANK, &na) || na != x->rank - 2) return false;
        bool seen[KILN_MAX_RANK] = {false};
        for (int i = 0; i < na; i++) {
            int64_t a = axes[i] < 0 ? axes[i] + x->rank : axes[i];
            if (a < 0 || a >= x->rank || seen[a]) return false;
            seen[a] = true;
        }
        if (seen[0] || (seen[1] && seen[x->rank - 1])) return false;
        m->nhwc = seen[1]; /* the spatial axes 1..r-2: channels last */
        *flat = kn_attr_int(n, "keepdims", 1) == 0;
    }
    m->C = x->dims[m->nhwc ? x->rank - 1 : 1].value;
    if (m->C < 1) return false;
    m->n_nodes = 0;
    return take(m, node) && pooled_shape(c, m, &g->values[n->outputs[0]].type, *flat);
}

/* The weights as [rows, cols] in the fused node's order: w as it is, or a transposed constant. */
static int weights_for(kn_opt_ctx *c, const se_linear *l) {
    if (!l->w_transposed) return l->w;
    const kn_tensor *t = kn_opt_const(c, l->w);
    static const int perm[2] = {1, 0};
    kn_tensor *tt = NULL;
    if (!t || kn_tensor_permuted(t, perm, &tt) != KILN_OK) {
        kn_clear_error();
        return -1;
    }
    return kn_opt_new_const(c, c->g->values[l->w].name, tt);
}

kiln_status kn_pass_fuse_squeeze_excite(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        se_match m;
        bool flat;
        if (!match_pool(c, i, &m, &flat)) continue;
        int v = g->nodes[i].outputs[0];
        if (!flat && (kn_opt_is_in(c, kn_opt_only_consumer(c, v), "", "Flatten") ||
                      kn_opt_is_in(c, kn_opt_only_consumer(c, v), "", "Reshape") ||
                      kn_opt_is_in(c, kn_opt_only_consumer(c, v), "", "Squeeze"))) {
            v = reshaped(c, &m, v, true);
            flat = true;
            if (v < 0) continue;
        }
        se_linear l1, l2;
        if (!(flat ? match_flat(c, &m, v, &l1) : match_conv(c, &m, v, &l1))) continue;
        if (!(flat ? match_flat(c, &m, l1.out, &l2) : match_conv(c, &m, l1.out, &l2))) continue;
        if (l2.act.act == KN_ACT_NONE) continue; /* no gate: not a squeeze-excite block */
        int gate = l2.out;
        if (flat && (gate = reshaped(c, &m, gate, false)) < 0) continue;
        if (!pooled_shape(c, &m, &g->values[gate].type, false)) continue;
        const int mul = kn_opt_only_consumer(c, gate);
        if (!kn_opt_is(c, mul, "Mul") || kn_opt_other_input(c, mul, gate) != m.x || !take(&m, mul)) continue;
        const int y = g->nodes[mul].outputs[0];
        if (!kn_opt_same_shape(&g->values[y].type, &g->values[m.x].type) ||
            g->values[y].type.dtype != g->values[m.x].type.dtype)
            continue;

        const int w1 = weights_for(c, &l1), w2 = w1 >= 0 ? weights_for(c, &l2) : -1;
        if (w1 < 0 || w2 < 0) continue; /* (a transposed copy unused: eliminate_dead drops it) */
        kn_opt_proto p;
        kn_proto_init(&p, "kiln", "SqueezeExcite");
        kn_proto_in(&p, m.x);
        kn_proto_in(&p, w1);
        kn_proto_in(&p, l1.b);
        kn_proto_in(&p, w2);
        kn_proto_in(&p, l2.b);
        kn_proto_out(&p, y);
        kn_proto_act(&p, &l1.act);
        kn_proto_string(&p, "gate", kn_act_name(l2.act.act));
        float gate_params[2] = {l2.act.p0, l2.act.p1};
        const int n_gp = l2.act.act == KN_ACT_LEAKY_RELU ? 1 : l2.act.act == KN_ACT_CLIP || l2.act.act == KN_ACT_HARD_SIGMOID ? 2 : 0;
        if (n_gp) kn_proto_floats(&p, "gate_params", gate_params, n_gp);
        kn_proto_string(&p, "layout", m.nhwc ? "NHWC" : "NCHW");
        int node;
        KN_TRY(kn_opt_emit(c, &p, l1.anchor, &node));
        if (node < 0) continue;
        for (int k = 0; k < m.n_nodes; k++) kn_opt_kill(c, m.nodes[k]);
        kn_opt_note(c, m.nhwc ? "squeeze-excite channels last" : flat ? "squeeze-excite (flat products)" : "squeeze-excite");
        KN_TRY(kn_opt_refresh(c));
    }
    return KILN_OK;
}

/* Expand before elementwise operators: moved after them, or dropped where their broadcasting does
 * the same.
 *
 * Exporters materialise broadcasts: transformers' attention masks are built as a [batch, 1, 1,
 * keys] padding mask, Expanded to [batch, 1, queries, keys], then turned into an additive mask by a
 * Where or a Cast and Mul, and only then added to the [batch, heads, queries, keys] scores, whose
 * Add would have broadcast the small mask anyway. Every step after the Expand works on (and the
 * attention kernel reads) queries times more data than it needs.
 *
 * An elementwise operator with multidirectional broadcasting computes out[p] = f(a[p mod a], ...),
 * so f(Expand(x, s), o) = Expand(f(x, o), s): both are f of x and o broadcast to the same shape
 * (broadcasting is associative). Two rewrites follow:
 *  - sink: an Expand read only by such an operator moves after it when f(x, o) is smaller than
 *    f's output; a chain of them (Where, Cast, Mul, ...) then runs on the small tensor;
 *  - absorb: an operator that broadcasts several inputs reads x itself instead of Expand(x, s)
 *    when broadcasting x with its other inputs gives the same output shape (statically known).
 * Values are unchanged: each element is the same function of the same input elements. */
#include "opt/pass.h"

#include <string.h>

/* ai.onnx operators whose inputs broadcast multidirectionally into an elementwise result */
static const char *const broadcasting_ops[] = {
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift", "And", "Or", "Xor", "Equal", "Less", "LessOrEqual",
    "Greater", "GreaterOrEqual", "Max", "Min", "Sum", "Mean", "Where", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
};
/* ai.onnx operators of one tensor input applied element by element (Clip's bounds are scalars) */
static const char *const unary_ops[] = {
    "Cast", "Not", "Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Floor",
    "Ceil", "Round", "Sign", "IsNaN", "IsInf", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish",
    "Softplus", "Softsign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
    "BitwiseNot", "Clip", "Gelu", "Mish", "ThresholdedRelu",
};

static bool named_in(const char *op, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(op, list[i])) return true;
    return false;
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static bool broadcasting(const kn_node *n) { return !n->domain[0] && named_in(n->op_type, broadcasting_ops, N_OF(broadcasting_ops)); }
static bool elementwise(const kn_node *n) {
    return broadcasting(n) || (!n->domain[0] && named_in(n->op_type, unary_ops, N_OF(unary_ops)));
}

/* The broadcast of the node's inputs with input `slot` read as value `x`; false when a rank is
 * unknown or the shapes do not broadcast. */
static bool broadcast_with(const kn_opt_ctx *c, int node, int slot, int x, kn_type *out) {
    const kn_node *n = &c->g->nodes[node];
    bool first = true;
    char why[256];
    for (int i = 0; i < n->n_inputs; i++) {
        int v = i == slot ? x : n->inputs[i];
        if (v < 0) continue;
        /* Clip's bounds (inputs 1, 2) are scalars and take no part in the shape */
        if (!strcmp(n->op_type, "Clip") && i > 0) continue;
        const kn_type *t = &c->g->values[v].type;
        if (t->rank < 0) return false;
        if (first) {
            *out = *t;
            out->n_shape_value = -1;
            first = false;
        } else if (kn_broadcast_types(out, t, out, why, sizeof why) != KILN_OK) {
            kn_clear_error();
            return false;
        }
    }
    return !first;
}

/* Whether `small` (a broadcast that gives `big` when broadcast with the Expand's shape) has fewer
 * elements: an axis known to be 1 where big's is not. */
static bool smaller(const kn_type *small, const kn_type *big) {
    for (int k = 0; k < big->rank; k++) {
        int i = k - (big->rank - small->rank);
        int64_t s = i >= 0 ? small->dims[i].value : 1;
        if (s == 1 && big->dims[k].value != 1) return true;
    }
    return false;
}

/* The Expand producing input `slot` of the node (ai.onnx, both inputs given), or -1. */
static int expand_at(const kn_opt_ctx *c, int node, int slot) {
    int v = c->g->nodes[node].inputs[slot];
    int p = v >= 0 ? kn_opt_producer(c, v) : -1;
    if (p < 0 || !kn_opt_is(c, p, "Expand") || kn_opt_input(c, p, 0) < 0 || kn_opt_input(c, p, 1) < 0) return -1;
    return p;
}

/* absorb: the node reads Expand's input directly where its broadcast gives the same shape */
static kiln_status absorb(kn_opt_ctx *c, int node, int slot, int e) {
    const kn_node *n = &c->g->nodes[node];
    int x = kn_opt_input(c, e, 0);
    kn_type b;
    if (!broadcasting(n) || !broadcast_with(c, node, slot, x, &b)) return KILN_OK;
    if (!kn_opt_same_shape(&b, &c->g->values[n->outputs[0]].type)) return KILN_OK;
    c->g->nodes[node].inputs[slot] = x;
    kn_opt_note(c, "Expand left to the operator's broadcast");
    c->changes++;
    return kn_opt_refresh(c);
}

/* sink: f(Expand(x, s), o) -> Expand(f(x, o), s), when Expand's output is read only by f */
static kiln_status sink(kn_opt_ctx *c, int node, int slot, int e) {
    const kn_node *n = &c->g->nodes[node];
    int x = kn_opt_input(c, e, 0), shape = kn_opt_input(c, e, 1), y = n->outputs[0];
    if (kn_opt_only_consumer(c, n->inputs[slot]) != node) return KILN_OK;
    if (!strcmp(n->op_type, "Clip") && slot > 0) return KILN_OK;
    kn_type b;
    if (!broadcast_with(c, node, slot, x, &b)) return KILN_OK;
    const kn_type *yt = &c->g->values[y].type;
    if (yt->dtype == KILN_DTYPE_UNDEFINED || yt->rank < 0 || !smaller(&b, yt)) return KILN_OK;
    b.dtype = yt->dtype;
    int small = kn_opt_new_value(c, c->g->values[y].name, &b);
    if (small < 0) return KN_OOM();

    kn_opt_proto p;
    kn_proto_init(&p, "", n->op_type);
    for (int i = 0; i < n->n_inputs; i++) kn_proto_in(&p, i == slot ? x : n->inputs[i]);
    kn_proto_out(&p, small);
    for (int a = 0; a < n->n_attrs && p.n_attrs < KN_PROTO_MAX_ATTRS; a++) p.attrs[p.n_attrs++] = n->attrs[a];
    if (n->n_attrs > KN_PROTO_MAX_ATTRS) return KILN_OK;
    int f = -1, moved = -1;
    KN_TRY(kn_opt_emit(c, &p, node, &f));
    if (f < 0) return KILN_OK;
    kn_proto_init(&p, "", "Expand");
    kn_proto_in(&p, small);
    kn_proto_in(&p, shape);
    kn_proto_out(&p, y);
    KN_TRY(kn_opt_emit(c, &p, e, &moved));
    if (moved < 0) {
        kn_opt_kill(c, f);
        return kn_opt_refresh(c);
    }
    kn_opt_kill(c, node);
    kn_opt_kill(c, e);
    kn_opt_note(c, "Expand moved after an elementwise operator");
    c->changes++;
    return kn_opt_refresh(c);
}

/* A broadcast written as arithmetic: And(x, all true), Or(x, all false), Mul(x, all ones), or an
 * integer Add(x, all zeros), whose constant is larger than x (transformers' masks are And-ed with
 * a [1, 1, queries, keys] constant of true). The result is x broadcast to the constant's shape:
 * Expand(x, shape of the constant), which sink/absorb then move. (Float Add of zeros is left: it
 * turns -0 into +0.) */
static kiln_status neutral_broadcast_to_expand(kn_opt_ctx *c, int node) {
    const kn_node *n = &c->g->nodes[node];
    if (n->domain[0] || n->n_inputs != 2 || n->inputs[0] < 0 || n->inputs[1] < 0) return KILN_OK;
    const kn_type *yt = &c->g->values[n->outputs[0]].type;
    double neutral;
    if (!strcmp(n->op_type, "And") || !strcmp(n->op_type, "Mul")) neutral = 1;
    else if (!strcmp(n->op_type, "Or") || (!strcmp(n->op_type, "Add") && kn_dtype_is_int(yt->dtype))) neutral = 0;
    else return KILN_OK;
    for (int k = 0; k < 2; k++) {
        int cst = n->inputs[k], x = n->inputs[1 - k];
        const kn_tensor *t = kn_opt_const(c, cst);
        const kn_type *xt = &c->g->values[x].type;
        if (!t || xt->dtype != yt->dtype || t->dtype != yt->dtype || kn_opt_same_shape(xt, yt)) continue;
        if (!kn_opt_const_all(c, cst, neutral)) continue;
        kn_tensor *shape = NULL;
        int64_t rank = t->rank;
        KN_TRY(kn_tensor_new(KILN_DTYPE_INT64, 1, &rank, &shape));
        for (int d = 0; d < t->rank; d++) ((int64_t *)shape->data)[d] = t->dims[d];
        int sv = kn_opt_new_const(c, "broadcast_shape", shape);
        if (sv < 0) return KN_OOM();
        kn_opt_proto p;
        kn_proto_init(&p, "", "Expand");
        kn_proto_in(&p, x);
        kn_proto_in(&p, sv);
        kn_proto_out(&p, n->outputs[0]);
        int e = -1;
        KN_TRY(kn_opt_emit(c, &p, node, &e));
        if (e < 0) return kn_opt_refresh(c);
        kn_opt_kill(c, node);
        kn_opt_note(c, "broadcast by a neutral constant as Expand");
        c->changes++;
        return kn_opt_refresh(c);
    }
    return KILN_OK;
}

kiln_status kn_pass_sink_expand(kn_opt_ctx *c) {
    int n_nodes = c->g->n_nodes;
    for (int node = 0; node < n_nodes; node++) {
        if (c->g->nodes[node].dead || c->g->nodes[node].n_outputs != 1 || c->g->nodes[node].outputs[0] < 0) continue;
        KN_TRY(neutral_broadcast_to_expand(c, node));
        const kn_node *n = &c->g->nodes[node];
        if (n->dead || !elementwise(n)) continue;
        for (int slot = 0; slot < n->n_inputs && !c->g->nodes[node].dead; slot++) {
            int e = expand_at(c, node, slot);
            if (e < 0) continue;
            int before = c->changes;
            KN_TRY(absorb(c, node, slot, e));
            if (c->changes == before) KN_TRY(sink(c, node, slot, e));
        }
    }
    return KILN_OK;
}

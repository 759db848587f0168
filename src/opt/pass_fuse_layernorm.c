/* LayerNormalization and RMSNorm from their decompositions.
 *
 *   LayerNorm:  m = ReduceMean(x, axes); d = x - m; v = ReduceMean(d^2, axes)  (d^2: Pow(d, 2) or
 *               d * d); n = d / Sqrt(v + eps)  (or d * Reciprocal(Sqrt(v + eps)));
 *               then optionally n * scale, then optionally + bias.
 *   RMSNorm:    v = ReduceMean(x^2, axes); n = x / Sqrt(v + eps) (or the Reciprocal form);
 *               then optionally n * scale.
 * axes must be the trailing dims of x (keepdims = 1), eps a scalar constant. A scale or bias is
 * taken only when its shape, without leading 1s, is exactly the normalised trailing dims (a scale
 * that also varies over a leading axis is not a LayerNorm scale: the known failure of another
 * runtime); otherwise the normalisation alone is fused and the Mul/Add stay. */
#include "opt/pass.h"

#include <string.h>

/* The first normalised axis when node is a ReduceMean over the trailing axes of its input with
 * keepdims; -1 otherwise. */
static int trailing_reduce(const kn_opt_ctx *c, int node, int x) {
    if (!kn_opt_is(c, node, "ReduceMean") || kn_attr_int(&c->g->nodes[node], "keepdims", 1) != 1) return -1;
    if (kn_opt_input(c, node, 0) != x) return -1;
    int rank = c->g->values[x].type.rank;
    if (rank < 1) return -1;
    int64_t axes[KILN_MAX_RANK];
    int n;
    if (!kn_opt_reduce_axes(c, node, axes, KILN_MAX_RANK, &n) || n < 1 || n > rank) return -1;
    bool seen[KILN_MAX_RANK] = {0};
    for (int i = 0; i < n; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (a < rank - n || a >= rank || seen[a]) return -1;
        seen[a] = true;
    }
    return rank - n;
}

/* Whether node squares v: Pow(v, 2) or Mul(v, v). */
static bool is_square_of(const kn_opt_ctx *c, int node, int v) {
    const kn_node *n = &c->g->nodes[node];
    if (kn_opt_is(c, node, "Mul")) return n->n_inputs == 2 && n->inputs[0] == v && n->inputs[1] == v;
    double e;
    return kn_opt_is(c, node, "Pow") && n->inputs[0] == v && kn_opt_scalar(c, kn_opt_input(c, node, 1), &e) && e == 2.0;
}

/* From the variance value vv (ReduceMean output) to the normalised value: Add eps, Sqrt, then
 * Div(num, s) or Mul(num, Reciprocal(s)). Fills eps, the nodes used and the result. */
static bool match_tail(const kn_opt_ctx *c, int vv, int num, double *eps, int *nodes, int *n_nodes, int *out) {
    int add = kn_opt_only_consumer(c, vv);
    if (!kn_opt_is(c, add, "Add")) return false;
    int e = kn_opt_other_input(c, add, vv);
    if (e < 0 || !kn_opt_scalar(c, e, eps)) return false;
    int av = c->g->nodes[add].outputs[0];
    int sq = kn_opt_only_consumer(c, av);
    if (!kn_opt_is(c, sq, "Sqrt")) return false;
    int s = c->g->nodes[sq].outputs[0];
    int user = kn_opt_only_consumer(c, s);
    nodes[(*n_nodes)++] = add;
    nodes[(*n_nodes)++] = sq;
    if (kn_opt_is(c, user, "Div") && c->g->nodes[user].inputs[0] == num && c->g->nodes[user].inputs[1] == s) {
        nodes[(*n_nodes)++] = user;
        *out = c->g->nodes[user].outputs[0];
        return true;
    }
    if (kn_opt_is(c, user, "Reciprocal")) {
        int r = c->g->nodes[user].outputs[0];
        int mul = kn_opt_only_consumer(c, r);
        if (!kn_opt_is(c, mul, "Mul") || kn_opt_other_input(c, mul, r) != num) return false;
        nodes[(*n_nodes)++] = user;
        nodes[(*n_nodes)++] = mul;
        *out = c->g->nodes[mul].outputs[0];
        return true;
    }
    return false;
}

/* Whether p (a scale or bias) has exactly the normalised dims x[axis:] once leading 1s are
 * dropped, with x's element type. */
static bool fits_trailing(const kn_opt_ctx *c, int p, int x, int axis) {
    const kn_type *tp = &c->g->values[p].type, *tx = &c->g->values[x].type;
    if (tp->kind != KN_TYPE_TENSOR || tp->dtype != tx->dtype || tp->rank < 0 || tp->rank > tx->rank) return false;
    int k = tx->rank - axis; /* normalised dims */
    int lead = tp->rank - k; /* dims of p before the normalised ones: must be 1 */
    for (int d = 0; d < tp->rank; d++) {
        if (d < lead) {
            if (tp->dims[d].value != 1) return false;
            continue;
        }
        const kn_dim *a = &tp->dims[d], *b = &tx->dims[axis + (d - lead)];
        if (a->value < 0 || a->value != b->value) return false;
    }
    /* fewer dims than normalised: p broadcasts over the leading normalised dims, which the
     * fused kernel does not do */
    return lead >= 0;
}

/* The affine part after n: Mul by a fitting scale, then (LayerNorm) Add of a fitting bias. */
static void match_affine(const kn_opt_ctx *c, int n, int x, int axis, bool want_bias, int *scale, int *bias,
                         int *nodes, int *n_nodes, int *out) {
    *scale = *bias = -1;
    *out = n;
    int mul = kn_opt_only_consumer(c, n);
    if (kn_opt_is(c, mul, "Mul")) {
        int s = kn_opt_other_input(c, mul, n);
        int mo = c->g->nodes[mul].outputs[0];
        if (s >= 0 && fits_trailing(c, s, x, axis) && kn_opt_same_shape(&c->g->values[mo].type, &c->g->values[x].type)) {
            *scale = s;
            *out = mo;
            nodes[(*n_nodes)++] = mul;
        }
    }
    if (!want_bias) return;
    int add = kn_opt_only_consumer(c, *out);
    if (kn_opt_is(c, add, "Add")) {
        int b = kn_opt_other_input(c, add, *out);
        int ao = c->g->nodes[add].outputs[0];
        if (b >= 0 && fits_trailing(c, b, x, axis) && kn_opt_same_shape(&c->g->values[ao].type, &c->g->values[x].type)) {
            *bias = b;
            *out = ao;
            nodes[(*n_nodes)++] = add;
        }
    }
}

static kiln_status emit_norm(kn_opt_ctx *c, bool rms, int anchor, int x, int scale, int bias, int out, int axis,
                             double eps, const int *nodes, int n_nodes) {
    kn_opt_proto p;
    kn_proto_init(&p, "kiln", rms ? "RMSNormalization" : "LayerNormalization");
    kn_proto_in(&p, x);
    kn_proto_in(&p, scale);
    if (!rms) kn_proto_in(&p, bias);
    kn_proto_out(&p, out);
    kn_proto_int(&p, "axis", axis);
    kn_proto_float(&p, "epsilon", (float)eps);
    int node;
    KN_TRY(kn_opt_emit(c, &p, anchor, &node));
    if (node < 0) return KILN_OK;
    for (int k = 0; k < n_nodes; k++) kn_opt_kill(c, nodes[k]);
    kn_opt_note(c, rms ? "RMSNorm" : scale >= 0 || bias >= 0 ? "LayerNorm" : "LayerNorm (no scale)");
    return kn_opt_refresh(c);
}

static kiln_status try_layernorm(kn_opt_ctx *c, int r1) {
    kn_graph *g = c->g;
    int x = kn_opt_input(c, r1, 0);
    if (x < 0 || !kn_opt_is_f32(c, x)) return KILN_OK;
    int axis = trailing_reduce(c, r1, x);
    if (axis < 0) return KILN_OK;
    int m = g->nodes[r1].outputs[0];
    int sub = kn_opt_only_consumer(c, m);
    if (!kn_opt_is(c, sub, "Sub") || g->nodes[sub].inputs[0] != x || g->nodes[sub].inputs[1] != m) return KILN_OK;
    int d = g->nodes[sub].outputs[0];
    if (!kn_opt_same_shape(&g->values[d].type, &g->values[x].type) || kn_opt_pinned(c, d)) return KILN_OK;
    /* d is read by the square and by the division (twice when the square is d * d) */
    int sq = -1;
    for (int k = c->cons_start[d]; k < c->cons_start[d + 1]; k++)
        if (is_square_of(c, c->cons[k], d)) sq = c->cons[k];
    if (sq < 0) return KILN_OK;
    int p = g->nodes[sq].outputs[0];
    int r2 = kn_opt_only_consumer(c, p);
    if (r2 < 0 || trailing_reduce(c, r2, p) != axis) return KILN_OK;
    int nodes[12] = {r1, sub, sq, r2}, n_nodes = 4, nv, out, scale, bias;
    double eps;
    if (!match_tail(c, g->nodes[r2].outputs[0], d, &eps, nodes, &n_nodes, &nv)) return KILN_OK;
    if (!kn_opt_used_only_by(c, d, nodes, n_nodes)) return KILN_OK;
    match_affine(c, nv, x, axis, true, &scale, &bias, nodes, &n_nodes, &out);
    return emit_norm(c, false, r1, x, scale, bias, out, axis, eps, nodes, n_nodes);
}

static kiln_status try_rmsnorm(kn_opt_ctx *c, int r) {
    kn_graph *g = c->g;
    int p = kn_opt_input(c, r, 0);
    int sq = kn_opt_producer(c, p);
    if (sq < 0 || kn_opt_only_consumer(c, p) != r) return KILN_OK;
    int x = kn_opt_input(c, sq, 0);
    if (x < 0 || !kn_opt_is_f32(c, x) || !is_square_of(c, sq, x)) return KILN_OK;
    int axis = trailing_reduce(c, r, p);
    if (axis < 0) return KILN_OK;
    int nodes[12] = {sq, r}, n_nodes = 2, nv, out, scale, bias;
    double eps;
    if (!match_tail(c, g->nodes[r].outputs[0], x, &eps, nodes, &n_nodes, &nv)) return KILN_OK;
    if (!kn_opt_same_shape(&g->values[nv].type, &g->values[x].type)) return KILN_OK;
    match_affine(c, nv, x, axis, false, &scale, &bias, nodes, &n_nodes, &out);
    return emit_norm(c, true, r, x, scale, -1, out, axis, eps, nodes, n_nodes);
}

kiln_status kn_pass_fuse_layernorm(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    /* LayerNorm first: its variance branch also looks like an RMSNorm of x - mean */
    for (int i = 0; i < g->n_nodes; i++)
        if (kn_opt_is(c, i, "ReduceMean")) KN_TRY(try_layernorm(c, i));
    for (int i = 0; i < g->n_nodes; i++)
        if (kn_opt_is(c, i, "ReduceMean")) KN_TRY(try_rmsnorm(c, i));
    return KILN_OK;
}

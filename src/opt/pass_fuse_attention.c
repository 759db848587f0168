/* Scaled dot-product attention into kiln.Attention:
 *
 *   s = MatMul(Q', KT')            Q' = Q or Q scaled by a scalar (Mul/Div), KT' likewise
 *   s = s * c or s / c             optional scalar scaling of the scores
 *   s = s + mask                   optional; the mask broadcasts to s's shape
 *   p = Softmax(s, last axis)
 *   p = Where(IsNaN(p), 0, p)      optional (exporters' guard for fully masked rows)
 *   y = MatMul(p, V)
 *
 * becomes Attention(Q, KT, V, mask) with scale = the product of the scalars. Q, KT, V and the
 * scores must have the same rank (their batch dims broadcast as MatMul's do, in the kernel too);
 * every intermediate value must be read only inside the pattern. */
#include "opt/pass.h"

#include <math.h>
#include <string.h>

/* Strips a scalar Mul/Div from v when v is read only by `reader`: returns the unscaled value and
 * multiplies *scale; the node goes to nodes[]. */
static int unscale(const kn_opt_ctx *c, int v, int reader, double *scale, int *nodes, int *n_nodes) {
    int p = kn_opt_producer(c, v);
    if (p < 0 || kn_opt_only_consumer(c, v) != reader || c->g->nodes[p].n_inputs != 2) return v;
    int a = c->g->nodes[p].inputs[0], b = c->g->nodes[p].inputs[1];
    double s;
    if (kn_opt_is(c, p, "Mul")) {
        if (kn_opt_scalar(c, b, &s) && !kn_opt_scalar(c, a, &s)) {
            kn_opt_scalar(c, b, &s);
            *scale *= s;
            nodes[(*n_nodes)++] = p;
            return a;
        }
        if (kn_opt_scalar(c, a, &s) && !kn_opt_scalar(c, b, &s)) {
            kn_opt_scalar(c, a, &s);
            *scale *= s;
            nodes[(*n_nodes)++] = p;
            return b;
        }
    } else if (kn_opt_is(c, p, "Div") && kn_opt_scalar(c, b, &s) && s != 0 && !kn_opt_scalar(c, a, &s)) {
        kn_opt_scalar(c, b, &s);
        *scale /= s;
        nodes[(*n_nodes)++] = p;
        return a;
    }
    return v;
}

static bool same_dim(const kn_dim *a, const kn_dim *b) {
    if (a->value >= 0 || b->value >= 0) return a->value == b->value;
    return a->symbol && b->symbol && !strcmp(a->symbol, b->symbol);
}

/* The mask can be added to the scores without widening them along Sq and Sk: rank <= theirs,
 * its last two dims 1, equal or unknown (the kernel checks unknown ones when it runs). Its batch
 * dims broadcast with Q/KT/V's like MatMul's, which the kernel does too. */
static bool mask_fits(const kn_type *m, const kn_type *s) {
    if (m->kind != KN_TYPE_TENSOR || m->rank < 0 || m->rank > s->rank) return false;
    for (int d = m->rank - 2; d < m->rank; d++) {
        if (d < 0) continue;
        const kn_dim *md = &m->dims[d], *sd = &s->dims[s->rank - m->rank + d];
        if (md->value == 1 || same_dim(md, sd)) continue;
        if (md->value >= 0 && sd->value >= 0) return false;
    }
    return true;
}

/* p's readers are IsNaN(p) and Where(that, 0, p): returns Where's output, else -1. */
static int nan_guard(const kn_opt_ctx *c, int p, int *nodes, int *n_nodes) {
    if (kn_opt_n_consumers(c, p) != 2 || kn_opt_pinned(c, p)) return -1;
    int a = c->cons[c->cons_start[p]], b = c->cons[c->cons_start[p] + 1];
    int isnan = kn_opt_is(c, a, "IsNaN") ? a : kn_opt_is(c, b, "IsNaN") ? b : -1;
    int where = isnan == a ? b : a;
    if (isnan < 0 || !kn_opt_is(c, where, "Where")) return -1;
    const kn_node *w = &c->g->nodes[where];
    int flag = c->g->nodes[isnan].outputs[0];
    double z;
    if (w->n_inputs != 3 || w->inputs[0] != flag || w->inputs[2] != p || kn_opt_only_consumer(c, flag) != where ||
        !kn_opt_scalar(c, w->inputs[1], &z) || z != 0)
        return -1;
    int out = w->outputs[0];
    if (c->g->values[out].type.rank != c->g->values[p].type.rank || c->g->values[out].type.dtype != KILN_DTYPE_FLOAT) return -1;
    nodes[(*n_nodes)++] = isnan;
    nodes[(*n_nodes)++] = where;
    return out;
}

static kiln_status try_attention(kn_opt_ctx *c, int sm) {
    kn_graph *g = c->g;
    const kn_node *S = &g->nodes[sm];
    int s_in = S->inputs[0], p = S->outputs[0];
    const kn_type *ts = &g->values[s_in].type;
    if (!kn_opt_is_f32(c, s_in) || ts->rank < 2) return KILN_OK;
    int64_t axis = kn_attr_int(S, "axis", S->opset < 13 ? 1 : -1);
    if (axis < 0) axis += ts->rank;
    if (axis != ts->rank - 1) return KILN_OK;
    int nodes[16] = {sm}, n_nodes = 1;
    double scale = 1.0;
    int v = s_in, mask = -1, reader = sm;
    if (kn_opt_only_consumer(c, v) != sm) return KILN_OK;
    /* mask */
    int pa = kn_opt_producer(c, v);
    if (kn_opt_is(c, pa, "Add")) {
        const kn_node *A = &g->nodes[pa];
        for (int k = 0; k < 2 && mask < 0 && A->n_inputs == 2; k++) {
            int sc = A->inputs[k], mk = A->inputs[1 - k];
            int sp = kn_opt_producer(c, sc);
            if (sc == mk || kn_opt_only_consumer(c, sc) != pa) continue;
            if (!kn_opt_is(c, sp, "MatMul") && !kn_opt_is(c, sp, "Mul") && !kn_opt_is(c, sp, "Div")) continue;
            if (g->values[mk].type.dtype != KILN_DTYPE_FLOAT || !mask_fits(&g->values[mk].type, ts)) continue;
            if (g->values[sc].type.rank != ts->rank) continue;
            mask = mk;
            nodes[n_nodes++] = pa;
            reader = pa;
            v = sc;
        }
    }
    /* scores scaling, then the product */
    int before = n_nodes;
    int u = unscale(c, v, reader, &scale, nodes, &n_nodes);
    if (n_nodes > before) {
        reader = nodes[n_nodes - 1];
        v = u;
    }
    int mm1 = kn_opt_producer(c, v);
    if (!kn_opt_is(c, mm1, "MatMul") || kn_opt_only_consumer(c, v) != reader) return KILN_OK;
    nodes[n_nodes++] = mm1;
    int q = unscale(c, g->nodes[mm1].inputs[0], mm1, &scale, nodes, &n_nodes);
    int kt = unscale(c, g->nodes[mm1].inputs[1], mm1, &scale, nodes, &n_nodes);
    /* after the softmax */
    int pv = p, guard = nan_guard(c, p, nodes, &n_nodes);
    if (guard >= 0) pv = guard;
    else if (kn_opt_pinned(c, p)) return KILN_OK;
    int mm2 = kn_opt_only_consumer(c, pv);
    if (!kn_opt_is(c, mm2, "MatMul") || g->nodes[mm2].inputs[0] != pv) return KILN_OK;
    nodes[n_nodes++] = mm2;
    int vv = g->nodes[mm2].inputs[1], y = g->nodes[mm2].outputs[0];
    /* shapes: equal ranks and batch dims */
    const kn_type *tq = &g->values[q].type, *tk = &g->values[kt].type, *tv = &g->values[vv].type;
    if (!kn_opt_is_f32(c, q) || !kn_opt_is_f32(c, kt) || !kn_opt_is_f32(c, vv) || !kn_opt_is_f32(c, y)) return KILN_OK;
    int r = tq->rank;
    if (r < 2 || tk->rank != r || tv->rank != r || ts->rank != r) return KILN_OK;
    if (!isfinite(scale)) return KILN_OK;
    kn_opt_proto pr;
    kn_proto_init(&pr, "kiln", "Attention");
    kn_proto_in(&pr, q);
    kn_proto_in(&pr, kt);
    kn_proto_in(&pr, vv);
    kn_proto_in(&pr, mask);
    kn_proto_out(&pr, y);
    kn_proto_float(&pr, "scale", (float)scale);
    kn_proto_int(&pr, "nan_to_zero", guard >= 0);
    int node;
    KN_TRY(kn_opt_emit(c, &pr, mm1, &node));
    if (node < 0) return KILN_OK;
    for (int k = 0; k < n_nodes; k++) kn_opt_kill(c, nodes[k]);
    kn_opt_note(c, mask >= 0 ? "attention (masked)" : "attention");
    return kn_opt_refresh(c);
}

kiln_status kn_pass_fuse_attention(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++)
        if (kn_opt_is(c, i, "Softmax") && g->nodes[i].n_inputs == 1) KN_TRY(try_attention(c, i));
    return KILN_OK;
}

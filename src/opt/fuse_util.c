/* Pattern pieces shared by the fusion passes: recognising the activation that follows a value,
 * and closed single-input regions of elementwise nodes evaluated at sample points. */
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

/* ---- closed single-input regions ---- */

static const char *const region_ops[] = {"Add", "Sub", "Mul", "Div", "Pow", "Erf", "Tanh", "Sqrt", "Clip", "Relu",
                                         "Max", "Min", "Sigmoid", "Neg", "Exp", "Reciprocal", "HardSigmoid"};

bool kn_opt_region_op(const kn_opt_ctx *c, int node) {
    for (size_t k = 0; k < sizeof region_ops / sizeof region_ops[0]; k++)
        if (kn_opt_is(c, node, region_ops[k])) {
            const kn_node *n = &c->g->nodes[node];
            /* Max/Min of one or two operands; the others' operands are fixed by their schemas */
            return n->n_outputs == 1 && n->n_inputs >= 1 && n->n_inputs <= (kn_opt_is(c, node, "Clip") ? 3 : 2);
        }
    return false;
}

bool kn_opt_region_has(const kn_opt_region *r, int node) {
    for (int i = 0; i < r->n; i++)
        if (r->nodes[i] == node) return true;
    return false;
}

bool kn_opt_region_collect(const kn_opt_ctx *c, int x, int y, int max_nodes, kn_opt_region *r) {
    int stack[KN_OPT_REGION_MAX * 3], sp = 0;
    if (max_nodes > KN_OPT_REGION_MAX) max_nodes = KN_OPT_REGION_MAX;
    r->n = 0;
    stack[sp++] = y;
    while (sp) {
        int v = stack[--sp];
        if (v == x) continue;
        double s;
        if (kn_opt_scalar(c, v, &s)) continue;
        int p = kn_opt_producer(c, v);
        if (p < 0 || !kn_opt_region_op(c, p)) return false;
        if (kn_opt_region_has(r, p)) continue;
        if (r->n >= max_nodes) return false;
        r->nodes[r->n++] = p;
        const kn_node *n = &c->g->nodes[p];
        for (int k = 0; k < n->n_inputs; k++) {
            if (n->inputs[k] < 0) {
                if (kn_opt_is(c, p, "Clip")) continue; /* an omitted bound */
                return false;
            }
            if (sp >= KN_OPT_REGION_MAX * 3) return false;
            stack[sp++] = n->inputs[k];
        }
    }
    /* intermediate values stay inside */
    for (int i = 0; i < r->n; i++) {
        int v = c->g->nodes[r->nodes[i]].outputs[0];
        if (v == y) continue;
        if (kn_opt_pinned(c, v)) return false;
        for (int k = c->cons_start[v]; k < c->cons_start[v + 1]; k++)
            if (!kn_opt_region_has(r, c->cons[k])) return false;
    }
    return r->n > 0;
}

static double sigmoid(double a) { return 1.0 / (1.0 + exp(-a)); }

bool kn_opt_region_eval(const kn_opt_ctx *c, const kn_opt_region *r, int x, int y, const double *pts, int n_pts,
                        double *out) {
    if (n_pts > KN_OPT_REGION_POINTS) return false;
    /* the region's nodes in graph (topological) order */
    int order[KN_OPT_REGION_MAX], n = r->n;
    memcpy(order, r->nodes, sizeof(int) * (size_t)n);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && order[j - 1] > order[j]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    double vals[KN_OPT_REGION_MAX][KN_OPT_REGION_POINTS];
    int ids[KN_OPT_REGION_MAX];
    for (int i = 0; i < n; i++) {
        const kn_node *nd = &c->g->nodes[order[i]];
        const bool clip = kn_opt_is(c, order[i], "Clip");
        const double *in[2] = {NULL, NULL};
        double consts[2] = {0, 0};
        for (int k = 0; k < nd->n_inputs && k < (clip ? 1 : 2); k++) {
            int v = nd->inputs[k];
            if (v == x) {
                in[k] = pts;
                continue;
            }
            if (kn_opt_scalar(c, v, &consts[k])) continue;
            for (int j = 0; j < i; j++)
                if (ids[j] == v) in[k] = vals[j];
            if (!in[k]) return false;
        }
        float lo = 0, hi = 0;
        if (clip && !kn_opt_clip_bounds(c, order[i], &lo, &hi)) return false;
        const float alpha = kn_attr_float(nd, "alpha", 0.2f), beta = kn_attr_float(nd, "beta", 0.5f);
        const char *op = nd->op_type;
        const bool two = nd->n_inputs > 1;
        for (int p = 0; p < n_pts; p++) {
            double a = in[0] ? in[0][p] : consts[0];
            double b = two ? (in[1] ? in[1][p] : consts[1]) : 0;
            double v;
            if (!strcmp(op, "Add")) v = a + b;
            else if (!strcmp(op, "Sub")) v = a - b;
            else if (!strcmp(op, "Mul")) v = a * b;
            else if (!strcmp(op, "Div")) v = a / b;
            else if (!strcmp(op, "Pow")) v = pow(a, b);
            else if (!strcmp(op, "Erf")) v = erf(a);
            else if (!strcmp(op, "Tanh")) v = tanh(a);
            else if (!strcmp(op, "Sqrt")) v = sqrt(a);
            else if (clip) v = fmin(fmax(a, lo), hi);
            else if (!strcmp(op, "Relu")) v = fmax(a, 0.0);
            else if (!strcmp(op, "Max")) v = two ? fmax(a, b) : a;
            else if (!strcmp(op, "Min")) v = two ? fmin(a, b) : a;
            else if (!strcmp(op, "Sigmoid")) v = sigmoid(a);
            else if (!strcmp(op, "Neg")) v = -a;
            else if (!strcmp(op, "Exp")) v = exp(a);
            else if (!strcmp(op, "Reciprocal")) v = 1.0 / a;
            else v = fmin(fmax(alpha * a + beta, 0.0), 1.0); /* HardSigmoid */
            vals[i][p] = v;
        }
        ids[i] = nd->outputs[0];
    }
    for (int i = 0; i < n; i++)
        if (ids[i] == y) {
            memcpy(out, vals[i], sizeof(double) * (size_t)n_pts);
            return true;
        }
    return false;
}

/* ---- activations ---- */

/* Sample points for telling activations apart: dense over [-8, 8] (the knees of HardSwish,
 * HardSigmoid and Relu6, GELU's and SiLU's curves), then far out on both sides, so that a clamp at
 * 20 is not mistaken for none. */
#define ACT_POINTS 57
static void act_points(double *pts) {
    static const double far[] = {12.5, 40.25, 1000.5, 1.0e6, 1.0e15};
    int p = 0;
    for (; p < ACT_POINTS - 10; p++) pts[p] = -8.0 + 16.0 * p / (ACT_POINTS - 11) + 0.0137;
    for (int k = 0; k < 5; k++) {
        pts[p++] = far[k];
        pts[p++] = -far[k];
    }
}

static bool close_to(double got, double want) { return fabs(got - want) <= 1e-6 * (1.0 + fabs(want)); }

/* Which activation the values f(pts) are, when one kiln fuses. */
static bool classify_activation(const double *pts, const double *f, kn_act_spec *act) {
    bool hswish = true, silu = true;
    for (int p = 0; p < ACT_POINTS; p++) {
        const double x = pts[p];
        hswish &= close_to(f[p], x * fmin(fmax(x / 6.0 + 0.5, 0.0), 1.0));
        silu &= close_to(f[p], x * sigmoid(x));
    }
    if (hswish) {
        act->act = KN_ACT_HARD_SWISH;
        return true;
    }
    if (silu) {
        act->act = KN_ACT_SILU;
        return true;
    }
    /* clamp(alpha x + beta, 0, 1), alpha > 0: the line through two points strictly inside */
    int i0 = -1, i1 = -1;
    for (int p = 0; p < ACT_POINTS - 10; p++)
        if (f[p] > 1e-3 && f[p] < 1.0 - 1e-3) {
            if (i0 < 0) i0 = p;
            i1 = p;
        }
    if (i0 >= 0 && i1 > i0) {
        const double alpha = (f[i1] - f[i0]) / (pts[i1] - pts[i0]), beta = f[i0] - alpha * pts[i0];
        bool hsig = alpha > 0;
        for (int p = 0; p < ACT_POINTS && hsig; p++) hsig = close_to(f[p], fmin(fmax(alpha * pts[p] + beta, 0.0), 1.0));
        if (hsig) {
            act->act = KN_ACT_HARD_SIGMOID;
            act->p0 = (float)alpha;
            act->p1 = (float)beta;
            return true;
        }
    }
    /* clamp(x, lo, hi) (Relu, Relu6 from Max and Min): lo and hi are the extremes reached, open
     * where they are the extreme sample points themselves */
    double lo = INFINITY, hi = -INFINITY, xlo = INFINITY, xhi = -INFINITY;
    for (int p = 0; p < ACT_POINTS; p++) {
        lo = fmin(lo, f[p]), hi = fmax(hi, f[p]);
        xlo = fmin(xlo, pts[p]), xhi = fmax(xhi, pts[p]);
    }
    if (lo == xlo) lo = -INFINITY;
    if (hi == xhi) hi = INFINITY;
    if (lo == -INFINITY && hi == INFINITY) return false; /* the identity */
    for (int p = 0; p < ACT_POINTS; p++)
        if (!close_to(f[p], fmin(fmax(pts[p], lo), hi))) return false;
    if (lo == 0 && hi == INFINITY) {
        act->act = KN_ACT_RELU;
    } else {
        act->act = KN_ACT_CLIP;
        act->p0 = (float)lo;
        act->p1 = (float)hi;
    }
    return true;
}

/* An activation written out in elementwise nodes (x * Clip(x + 3, 0, 6) / 6, Clip(x / 6 + 0.5,
 * 0, 1), x / (1 + Exp(-x)), Min(Max(x, 0), 6), ...): the largest closed region read from v whose
 * values at the sample points are one that kiln fuses. Exporters for opsets before HardSwish (14)
 * and HardSigmoid's own exporters write them so (PaddlePaddle's detectors: 93 of them in one). */
static bool match_activation_region(const kn_opt_ctx *c, int v, kn_act_spec *act, int *out_v, int *nodes,
                                    int *n_nodes) {
    const kn_graph *g = c->g;
    /* the region nodes reachable from v, in the order found */
    int found[KN_OPT_ACT_MAX_NODES], nf = 0;
    int frontier[KN_OPT_ACT_MAX_NODES + 1], nfr = 0;
    frontier[nfr++] = v;
    for (int q = 0; q < nfr && nf < KN_OPT_ACT_MAX_NODES; q++) {
        const int u = frontier[q];
        for (int k = c->cons_start[u]; k < c->cons_start[u + 1] && nf < KN_OPT_ACT_MAX_NODES; k++) {
            const int n = c->cons[k];
            bool seen = false;
            for (int j = 0; j < nf; j++) seen |= found[j] == n;
            if (seen || !kn_opt_region_op(c, n)) continue;
            found[nf++] = n;
            frontier[nfr++] = g->nodes[n].outputs[0];
        }
    }
    double pts[ACT_POINTS], f[ACT_POINTS];
    act_points(pts);
    for (int i = nf - 1; i >= 0; i--) {
        const int y = g->nodes[found[i]].outputs[0];
        if (g->values[y].type.dtype != g->values[v].type.dtype ||
            !kn_opt_same_shape(&g->values[y].type, &g->values[v].type))
            continue;
        kn_opt_region r;
        if (!kn_opt_region_collect(c, v, y, KN_OPT_ACT_MAX_NODES, &r) || !kn_opt_used_only_by(c, v, r.nodes, r.n) ||
            !kn_opt_region_eval(c, &r, v, y, pts, ACT_POINTS, f))
            continue;
        kn_act_spec a = {KN_ACT_NONE, 0, 0};
        if (!classify_activation(pts, f, &a)) continue;
        *act = a;
        *out_v = y;
        for (int k = 0; k < r.n; k++) nodes[(*n_nodes)++] = r.nodes[k];
        return true;
    }
    return false;
}

bool kn_opt_match_activation(const kn_opt_ctx *c, int v, kn_act_spec *act, int *out_v, int *nodes, int *n_nodes) {
    const kn_graph *g = c->g;
    act->act = KN_ACT_NONE;
    act->p0 = act->p1 = 0;
    act->bounded = false;
    act->lo = act->hi = 0;
    if (kn_opt_pinned(c, v)) return false;
    int nc = kn_opt_n_consumers(c, v);
    if (nc == 2) {
        /* x * sigmoid(x) */
        int a = c->cons[c->cons_start[v]], b = c->cons[c->cons_start[v] + 1];
        int sig = kn_opt_is(c, a, "Sigmoid") ? a : kn_opt_is(c, b, "Sigmoid") ? b : -1;
        int mul = sig == a ? b : a;
        if (sig < 0 || !kn_opt_is(c, mul, "Mul")) return match_activation_region(c, v, act, out_v, nodes, n_nodes);
        int s = g->nodes[sig].outputs[0];
        if (kn_opt_other_input(c, mul, v) != s || kn_opt_only_consumer(c, s) != mul)
            return match_activation_region(c, v, act, out_v, nodes, n_nodes);
        act->act = KN_ACT_SILU;
        *out_v = g->nodes[mul].outputs[0];
        nodes[(*n_nodes)++] = sig;
        nodes[(*n_nodes)++] = mul;
        return true;
    }
    int n = kn_opt_only_consumer(c, v);
    if (n < 0 || g->nodes[n].n_outputs != 1 || g->nodes[n].inputs[0] != v)
        return nc >= 1 && match_activation_region(c, v, act, out_v, nodes, n_nodes);
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
        return match_activation_region(c, v, act, out_v, nodes, n_nodes);
    }
    *out_v = nd->outputs[0];
    nodes[(*n_nodes)++] = n;
    return true;
}

/* ---- constant clamps after an activation ---- */

/* The clamp node n applies to its input v, as Max(., b0) then Min(., b1); false when it is not one
 * kiln folds (a bound not a one-element constant, NaN or infinite in Max/Min, NaN or an inverted
 * infinity in Clip, another shape or type out than in). */
static bool clamp_node(const kn_opt_ctx *c, int n, int v, float *b0, float *b1) {
    const kn_graph *g = c->g;
    const kn_node *nd = &g->nodes[n];
    if (nd->n_outputs != 1 || kn_opt_n_inputs(c, n) < 1) return false;
    const kn_type *tv = &g->values[v].type, *ty = &g->values[nd->outputs[0]].type;
    if (ty->dtype != tv->dtype || !kn_opt_same_shape(ty, tv)) return false;
    *b0 = -INFINITY;
    *b1 = INFINITY;
    if (kn_opt_is(c, n, "Max") || kn_opt_is(c, n, "Min")) {
        int other = nd->n_inputs == 2 ? kn_opt_other_input(c, n, v) : -1;
        double s;
        if (other < 0 || !kn_opt_scalar(c, other, &s) || !isfinite(s) || !isfinite((float)s)) return false;
        if (kn_opt_is(c, n, "Max")) *b0 = (float)s;
        else *b1 = (float)s;
        return true;
    }
    if (kn_opt_is(c, n, "Clip")) {
        if (nd->inputs[0] != v) return false;
        for (int k = 1; k < nd->n_inputs; k++)
            if (nd->inputs[k] == v) return false;
        float lo, hi;
        if (!kn_opt_clip_bounds(c, n, &lo, &hi) || isnan(lo) || isnan(hi) || lo == INFINITY || hi == -INFINITY)
            return false;
        *b0 = lo;
        *b1 = hi;
        return true;
    }
    return false;
}

int kn_opt_match_bounds(const kn_opt_ctx *c, kn_act_spec *act, int *out_v, int *nodes, int *n_nodes) {
    if (act->act == KN_ACT_NONE || act->bounded) return 0;
    const bool as_clip = act->act == KN_ACT_RELU || act->act == KN_ACT_CLIP;
    float lo = -INFINITY, hi = INFINITY;
    if (act->act == KN_ACT_RELU) lo = 0.0f;
    if (act->act == KN_ACT_CLIP) lo = act->p0, hi = act->p1;
    if (isnan(lo) || isnan(hi) || lo > hi) return 0;
    int v = *out_v, taken = 0;
    while (taken < KN_OPT_BOUNDS_MAX_NODES) {
        const int n = kn_opt_only_consumer(c, v);
        float b0, b1;
        if (n < 0 || !clamp_node(c, n, v, &b0, &b1)) break;
        float l = lo, h = hi;
        kn_clamp_then(&l, &h, b0, b1);
        if (l > h) break; /* a constant: left to constant folding's kin, not worth a kernel */
        lo = l, hi = h;
        nodes[(*n_nodes)++] = n;
        taken++;
        v = c->g->nodes[n].outputs[0];
    }
    if (!taken) return 0;
    *out_v = v;
    if (as_clip) {
        if (lo == 0.0f && hi == INFINITY) {
            act->act = KN_ACT_RELU;
            act->p0 = act->p1 = 0;
        } else {
            act->act = KN_ACT_CLIP;
            act->p0 = lo;
            act->p1 = hi;
        }
    } else if (lo != -INFINITY || hi != INFINITY) {
        act->bounded = true;
        act->lo = lo;
        act->hi = hi;
    }
    return taken;
}

kiln_status kn_opt_emit_activated(kn_opt_ctx *c, int name_from, kn_opt_build_fn build, const void *arg, kn_act_spec *act,
                                  int *last, int *nodes, int *n_nodes, int *node_out, bool *clamped) {
    const kn_act_spec plain = *act;
    const int plain_last = *last, plain_n = *n_nodes;
    const bool with_bounds = kn_opt_match_bounds(c, act, last, nodes, n_nodes) > 0;
    *node_out = -1;
    for (int attempt = with_bounds ? 0 : 1; attempt < 2 && *node_out < 0; attempt++) {
        if (attempt == 1 && with_bounds) *act = plain, *last = plain_last, *n_nodes = plain_n;
        kn_opt_proto p;
        build(&p, arg);
        kn_proto_out(&p, *last);
        kn_proto_act(&p, act);
        KN_TRY(kn_opt_emit(c, &p, name_from, node_out));
    }
    if (*node_out < 0) *act = plain, *last = plain_last, *n_nodes = plain_n;
    *clamped = *n_nodes > plain_n;
    return KILN_OK;
}

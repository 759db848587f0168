/* GELU from its decompositions into kiln.Gelu.
 *
 * Exporters write GELU in many equivalent arrangements (0.5*x*(1+erf(x/sqrt2)) with the halving
 * first or last, x*0.7071 instead of x/1.4142, x^3 as Pow or as x*x*x in the tanh form, operands
 * in either order). Rather than listing them, the pass anchors on an Erf or Tanh node, finds the
 * input x it starts from and the candidate outputs y after it, and takes the largest region
 * between x and y that is a closed single-input expression: every node in it an elementwise
 * node on x, scalar constants and values of the region, every intermediate value read only inside
 * it, y of x's shape (kn_opt_region_collect, fuse_util.c). The region is then evaluated (in double)
 * at points across [-8, 8] and compared with both GELU forms; only an agreement everywhere (to
 * 1e-5, or to float16's rounding where every constant is a float16 value) forms the fused node. */
#include "opt/pass.h"

#include <math.h>
#include <string.h>

#define N_POINTS 49

/* Which GELU the region computes: 1 erf, 2 tanh, 0 neither, within tol relative to 1 + |GELU|. */
static int classify(const double *pts, const double *got, double tol) {
    int ok_erf = 1, ok_tanh = 1;
    for (int p = 0; p < N_POINTS; p++) {
        double x = pts[p];
        double ge = 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
        double gt = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        if (!(fabs(got[p] - ge) <= tol * (1.0 + fabs(ge)))) ok_erf = 0;
        if (!(fabs(got[p] - gt) <= tol * (1.0 + fabs(gt)))) ok_tanh = 0;
    }
    return ok_erf ? 1 : ok_tanh ? 2 : 0;
}

/* The agreement a region must reach: 1e-5, or float16's rounding (2^-10) when every constant in
 * it is a float16 value (a float16 model's GELU: its 1/sqrt(2) is 0.70703125, the function
 * differs from GELU by 1e-4, far inside what float16 arithmetic adds). */
static double tolerance(const kn_opt_ctx *c, const kn_opt_region *r) {
    for (int i = 0; i < r->n; i++) {
        const kn_node *n = &c->g->nodes[r->nodes[i]];
        for (int k = 0; k < n->n_inputs; k++) {
            const kn_tensor *t = kn_opt_const(c, n->inputs[k]);
            double v;
            if (!t || !kn_opt_scalar(c, n->inputs[k], &v)) continue;
            if (t->dtype != KILN_DTYPE_FLOAT16 && (double)kn_f16_to_f32(kn_f32_to_f16((float)v)) != v) return 1e-5;
        }
    }
    return 1.0 / 1024;
}

/* x candidates for an anchor: the non-constant inputs feeding it through scalings and (tanh) the
 * Add of x and its cubic term. */
static int x_candidates(const kn_opt_ctx *c, int anchor, int *xs) {
    int n = 0, v = c->g->nodes[anchor].inputs[0];
    double s;
    for (int depth = 0; depth < 3 && n < 4; depth++) {
        int p = kn_opt_producer(c, v);
        if (p < 0 || c->g->nodes[p].n_inputs != 2) break;
        int a = c->g->nodes[p].inputs[0], b = c->g->nodes[p].inputs[1];
        bool ca = kn_opt_scalar(c, a, &s), cb = kn_opt_scalar(c, b, &s);
        if (ca == cb) {
            if (!ca && kn_opt_is(c, p, "Add")) {
                xs[n++] = a;
                xs[n++] = b;
            }
            break;
        }
        int other = ca ? b : a;
        if (kn_opt_is(c, p, "Mul") || kn_opt_is(c, p, "Div")) xs[n++] = other;
        v = other;
    }
    return n;
}

kiln_status kn_pass_fuse_gelu(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    double pts[N_POINTS];
    for (int p = 0; p < N_POINTS; p++) pts[p] = -8.0 + 16.0 * p / (N_POINTS - 1) + 0.013;
    for (int i = 0; i < g->n_nodes; i++) {
        if ((!kn_opt_is(c, i, "Erf") && !kn_opt_is(c, i, "Tanh")) || g->nodes[i].n_inputs != 1) continue;
        if (!kn_opt_is_f32(c, g->nodes[i].outputs[0])) continue;
        int xs[4], nx = x_candidates(c, i, xs);
        /* candidate outputs: down the single-reader chain from the anchor */
        int ys[4], ny = 0, v = g->nodes[i].outputs[0];
        for (int step = 0; step < 4; step++) {
            int nxt = kn_opt_only_consumer(c, v);
            if (nxt < 0 || !kn_opt_region_op(c, nxt)) break;
            v = g->nodes[nxt].outputs[0];
            ys[ny++] = v;
        }
        bool done = false;
        for (int yi = ny - 1; yi >= 0 && !done; yi--)
            for (int xi = 0; xi < nx && !done; xi++) {
                int x = xs[xi], y = ys[yi];
                if (!kn_opt_is_f32(c, x) || !kn_opt_same_shape(&g->values[x].type, &g->values[y].type)) continue;
                kn_opt_region r;
                double got[N_POINTS];
                if (!kn_opt_region_collect(c, x, y, KN_OPT_REGION_MAX, &r) || !kn_opt_region_has(&r, i) ||
                    !kn_opt_region_eval(c, &r, x, y, pts, N_POINTS, got))
                    continue;
                int form = classify(pts, got, tolerance(c, &r));
                if (!form) continue;
                kn_opt_proto p;
                kn_proto_init(&p, "kiln", "Gelu");
                kn_proto_in(&p, x);
                kn_proto_out(&p, y);
                kn_proto_string(&p, "approximate", form == 1 ? "none" : "tanh");
                int node;
                KN_TRY(kn_opt_emit(c, &p, i, &node));
                if (node < 0) continue;
                for (int k = 0; k < r.n; k++) kn_opt_kill(c, r.nodes[k]);
                kn_opt_note(c, form == 1 ? "GELU (erf)" : "GELU (tanh)");
                KN_TRY(kn_opt_refresh(c));
                done = true;
            }
    }
    return KILN_OK;
}

/* One product for the steps of an unrolled recurrence: a loop exported step by step (PyTorch's
 * LSTMCell/GRUCell in a Python loop, tf2onnx's unrolled RNNs) takes each step's input with
 * Gather(X [T, B, K], t, axis 0) and multiplies it by the same constant weights:
 *   Gemm(Gather(X, t), W, b)  or  MatMul(Gather(X, t), W)   for t = 0 .. T-1.
 * Those products do not depend on the recurrence, and as T products of B rows they read all of W
 * T times (captcha_crnn: 20 steps of a 1 x 4096 by 4096 x 400 product per direction, 6.5 MB of
 * weights each, 17 ms of its 36). They become one product over all the steps' rows, from which
 * each step's Gather takes its rows:
 *   Y = Reshape(Gemm(Reshape(X, [-1, K]), W, b), [T, -1, N]);   step t: Gather(Y, t, axis 0).
 * Taken when the steps are at least half of T (the product computes all T), X's T, K and the
 * product's N are known and the weights (and Gemm's bias) are constants; a step's Gather stays
 * where something else reads it (one step's input feeding several gates' products). Each row's value is the same sum; only the GEMM's order of summation
 * may differ with the number of rows (float rounding). */
#include "opt/pass.h"

#include <string.h>

#define MAX_STEPS 4096

/* Node i as a step product: its Gather's data X, index value and the product's key; false when i
 * is not one. */
static bool step_product(const kn_opt_ctx *c, int i, int *x, int *idx) {
    const kn_node *n = &c->g->nodes[i];
    const bool gemm = kn_opt_is(c, i, "Gemm");
    if (!gemm && !kn_opt_is(c, i, "MatMul")) return false;
    if (n->n_outputs != 1 || n->n_inputs < 2 || !kn_opt_const(c, n->inputs[1])) return false;
    if (gemm && kn_attr_int(n, "transA", 0) != 0) return false;
    if (gemm && n->n_inputs > 2 && n->inputs[2] >= 0) {
        /* a bias that broadcasts over the rows (a scalar, [N] or [1, N]): one per row of a step
         * ([B, N]) would not broadcast over all steps' rows */
        const kn_tensor *bias = kn_opt_const(c, n->inputs[2]);
        if (!bias || bias->rank > 2 || (bias->rank == 2 && bias->dims[0] != 1)) return false;
    }
    if (!gemm && c->g->values[n->inputs[1]].type.rank != 2) return false;
    const int a = n->inputs[0], gi = kn_opt_producer(c, a);
    if (!kn_opt_is(c, gi, "Gather")) return false;
    if (kn_attr_int(&c->g->nodes[gi], "axis", 0) != 0) return false;
    const int xv = kn_opt_input(c, gi, 0), iv = kn_opt_input(c, gi, 1);
    const kn_tensor *it = kn_opt_const(c, iv);
    const kn_type *tx = &c->g->values[xv].type;
    if (!it || it->rank != 0 || tx->rank != 3 || tx->dims[0].value < 1 || tx->dims[2].value < 1 || !kn_opt_is_f32(c, xv))
        return false;
    const kn_type *ty = &c->g->values[n->outputs[0]].type;
    if (ty->rank != 2 || ty->dims[1].value < 1) return false;
    *x = xv;
    *idx = iv;
    return true;
}

/* Whether product j is another step of product i's kind: same X, weights, bias and attributes */
static bool same_kind(const kn_opt_ctx *c, int i, int j) {
    const kn_node *a = &c->g->nodes[i], *b = &c->g->nodes[j];
    if (strcmp(a->op_type, b->op_type) || a->n_inputs != b->n_inputs) return false;
    for (int k = 1; k < a->n_inputs; k++)
        if (a->inputs[k] != b->inputs[k]) return false;
    if (kn_opt_is(c, i, "Gemm"))
        return kn_attr_int(a, "transB", 0) == kn_attr_int(b, "transB", 0) &&
               kn_attr_float(a, "alpha", 1.0f) == kn_attr_float(b, "alpha", 1.0f) &&
               kn_attr_float(a, "beta", 1.0f) == kn_attr_float(b, "beta", 1.0f);
    return true;
}

static int shape_const(kn_opt_ctx *c, const char *base, int64_t d0, int64_t d1, int64_t d2, int rank) {
    const int64_t dims[1] = {rank};
    kn_tensor *t;
    if (kn_tensor_new(KILN_DTYPE_INT64, 1, dims, &t) != KILN_OK) return -1;
    int64_t *p = t->data;
    p[0] = d0;
    p[1] = d1;
    if (rank > 2) p[2] = d2;
    return kn_opt_new_const(c, base, t);
}

static kiln_status batch(kn_opt_ctx *c, int first, bool *done) {
    *done = false;
    int x, idx;
    if (!step_product(c, first, &x, &idx)) return KILN_OK;
    int steps[MAX_STEPS], n_steps = 0;
    for (int j = first; j < c->g->n_nodes && n_steps < MAX_STEPS; j++) {
        int xj, ij;
        if (!c->g->nodes[j].dead && step_product(c, j, &xj, &ij) && xj == x && same_kind(c, first, j)) steps[n_steps++] = j;
    }
    const kn_type tx = c->g->values[x].type, ty = c->g->values[c->g->nodes[first].outputs[0]].type;
    const int64_t T = tx.dims[0].value, K = tx.dims[2].value, N = ty.dims[1].value;
    if (n_steps < 2 || 2 * n_steps < T) return KILN_OK;
    const kn_node *n = &c->g->nodes[first];
    const bool gemm = kn_opt_is(c, first, "Gemm");
    const int w = n->inputs[1], bias = gemm && n->n_inputs > 2 ? n->inputs[2] : -1;
    const int s1 = shape_const(c, "step_rows_shape", -1, K, 0, 2), s2 = shape_const(c, "steps_shape", T, -1, N, 3);
    kn_type t2, t3;
    kn_type_init(&t2);
    t2.kind = KN_TYPE_TENSOR;
    t2.dtype = tx.dtype;
    t2.rank = 2;
    t2.dims[0].value = tx.dims[1].value >= 0 ? T * tx.dims[1].value : -1;
    t2.dims[1].value = K;
    const int x2 = kn_opt_new_value(c, "step_rows", &t2);
    t2.dims[1].value = N;
    const int y2 = kn_opt_new_value(c, "step_products", &t2);
    t3 = tx;
    t3.dims[2].value = N;
    t3.dims[2].symbol = NULL;
    const int y3 = kn_opt_new_value(c, "steps", &t3);
    if (s1 < 0 || s2 < 0 || x2 < 0 || y2 < 0 || y3 < 0) return KN_OOM();
    kn_opt_proto p;
    int made;
    kn_proto_init(&p, "", "Reshape");
    kn_proto_in(&p, x);
    kn_proto_in(&p, s1);
    kn_proto_out(&p, x2);
    KN_TRY(kn_opt_emit(c, &p, first, &made));
    if (made < 0) return KILN_OK;
    kn_proto_init(&p, "", n->op_type);
    kn_proto_in(&p, x2);
    kn_proto_in(&p, w);
    kn_proto_in(&p, bias);
    kn_proto_out(&p, y2);
    if (gemm) {
        kn_proto_copy_attr(&p, c, first, "transB");
        kn_proto_copy_attr(&p, c, first, "alpha");
        kn_proto_copy_attr(&p, c, first, "beta");
    }
    KN_TRY(kn_opt_emit(c, &p, first, &made));
    if (made < 0) return KILN_OK; /* the Reshape goes as dead code */
    kn_proto_init(&p, "", "Reshape");
    kn_proto_in(&p, y2);
    kn_proto_in(&p, s2);
    kn_proto_out(&p, y3);
    KN_TRY(kn_opt_emit(c, &p, first, &made));
    if (made < 0) return KILN_OK;
    for (int s = 0; s < n_steps; s++) {
        const int i = steps[s], gi = kn_opt_producer(c, c->g->nodes[i].inputs[0]);
        const int out = c->g->nodes[i].outputs[0], iv = kn_opt_input(c, gi, 1);
        kn_proto_init(&p, "", "Gather");
        kn_proto_in(&p, y3);
        kn_proto_in(&p, iv);
        kn_proto_out(&p, out);
        kn_proto_int(&p, "axis", 0);
        KN_TRY(kn_opt_emit(c, &p, i, &made));
        if (made < 0) continue; /* that step keeps its own product */
        kn_opt_kill(c, i); /* (the step's Gather goes as dead code where nothing else reads it) */
    }
    *done = true;
    return KILN_OK;
}

kiln_status kn_pass_batch_step_products(kn_opt_ctx *c) {
    for (int i = 0; i < c->g->n_nodes; i++) {
        if (c->g->nodes[i].dead) continue;
        bool done = false;
        KN_TRY(batch(c, i, &done));
        if (done) {
            kn_opt_note(c, "Gather+Gemm/MatMul of each step of a recurrence");
            KN_TRY(kn_opt_refresh(c));
        }
    }
    return KILN_OK;
}

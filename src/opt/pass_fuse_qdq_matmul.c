/* MatMul of two dequantised 8-bit operands (the QDQ form quantisation tools write for static
 * quantisation): MatMul(DequantizeLinear(A_q, sa, za), DequantizeLinear(B_q, sb, zb)) becomes
 * com.microsoft MatMulIntegerToFloat(A_q, B_q, sa, sb, za, zb): the exact integer product scaled
 * once per output (float(sum (a - za)(b - zb)) * sa * sb[j]) instead of a float product of the
 * dequantised values, which rounds every term. The result differs from the unfused graph's by that
 * float product's rounding, and is what ONNX Runtime computes for such a graph. The product runs on
 * kiln's exact 8-bit GEMM (qgemm.h) from the weights' own bytes; unfused, the weights are folded
 * into float constants four times their size.
 *
 * Taken: A's scale and zero point one value each; B a constant [K, N] with one scale (and zero
 * point) or one per column (axis 1); float32 output; no block_size or output_dtype. A following
 * Add of a constant bias [N] becomes the operator's bias. It runs before
 * constant folding, which would fold B's DequantizeLinear away. The DequantizeLinear nodes stay for
 * any other reader (else they go as dead code). */
#include "opt/pass.h"

/* The DequantizeLinear producing v: its quantised input, scale and zero point (-1: none). */
static int dq_of(const kn_opt_ctx *c, int v, int *x, int *s, int *z) {
    const int dq = kn_opt_producer(c, v);
    if (!kn_opt_is(c, dq, "DequantizeLinear") || !kn_opt_is_f32(c, v)) return -1;
    const kn_node *n = &c->g->nodes[dq];
    if (kn_attr_int(n, "block_size", 0) != 0 || kn_attr_int(n, "output_dtype", 0) != 0) return -1;
    *x = kn_opt_input(c, dq, 0);
    *s = kn_opt_input(c, dq, 1);
    *z = kn_opt_n_inputs(c, dq) > 2 ? kn_opt_input(c, dq, 2) : -1;
    const kn_type *tx = &c->g->values[*x].type, *ts = &c->g->values[*s].type;
    if (tx->kind != KN_TYPE_TENSOR || (tx->dtype != KILN_DTYPE_INT8 && tx->dtype != KILN_DTYPE_UINT8)) return -1;
    if (ts->kind != KN_TYPE_TENSOR || ts->dtype != KILN_DTYPE_FLOAT || ts->rank < 0) return -1;
    if (*z >= 0) {
        const kn_type *tz = &c->g->values[*z].type;
        if (tz->dtype != tx->dtype || tz->rank != ts->rank) return -1;
        for (int d = 0; d < tz->rank; d++)
            if (tz->dims[d].value < 0 || tz->dims[d].value != ts->dims[d].value) return -1;
    }
    return dq;
}

/* the number of values of a static shape, -1 when not known */
static int64_t count_of(const kn_type *t) {
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) {
        if (t->dims[d].value < 0) return -1;
        n *= t->dims[d].value;
    }
    return n;
}

static kiln_status fuse(kn_opt_ctx *c, int i, bool *done) {
    const kn_node *n = &c->g->nodes[i];
    *done = false;
    if (n->n_inputs != 2 || n->n_outputs != 1 || !kn_opt_is_f32(c, n->outputs[0])) return KILN_OK;
    int xa, sa, za, xb, sb, zb;
    if (dq_of(c, n->inputs[0], &xa, &sa, &za) < 0) return KILN_OK;
    const int db = dq_of(c, n->inputs[1], &xb, &sb, &zb);
    if (db < 0 || count_of(&c->g->values[sa].type) != 1) return KILN_OK;
    const kn_tensor *bq = kn_opt_const(c, xb);
    if (!bq || bq->rank != 2) return KILN_OK;
    const kn_type *tsb = &c->g->values[sb].type;
    const int64_t nsb = count_of(tsb), axis = kn_attr_int(&c->g->nodes[db], "axis", 1);
    if (nsb != 1 && !(tsb->rank == 1 && nsb == bq->dims[1] && (axis == 1 || axis == -1))) return KILN_OK;
    /* a bias Add after it (a constant of one value per column) becomes the operator's bias */
    int y = n->outputs[0], bias = -1;
    const int add = kn_opt_only_consumer(c, y);
    if (kn_opt_is(c, add, "Add") && !kn_opt_pinned(c, y)) {
        const int other = kn_opt_other_input(c, add, y);
        const kn_tensor *bt = other >= 0 ? kn_opt_const(c, other) : NULL;
        if (bt && bt->dtype == KILN_DTYPE_FLOAT && bt->rank == 1 && bt->dims[0] == bq->dims[1] &&
            kn_opt_same_shape(&c->g->values[c->g->nodes[add].outputs[0]].type, &c->g->values[y].type)) {
            bias = other;
            y = c->g->nodes[add].outputs[0];
        }
    }
    kn_opt_proto p;
    int made;
    kn_proto_init(&p, "com.microsoft", "MatMulIntegerToFloat");
    kn_proto_in(&p, xa);
    kn_proto_in(&p, xb);
    kn_proto_in(&p, sa);
    kn_proto_in(&p, sb);
    kn_proto_in(&p, za);
    kn_proto_in(&p, zb);
    kn_proto_in(&p, bias);
    kn_proto_out(&p, y);
    KN_TRY(kn_opt_emit(c, &p, i, &made));
    if (made < 0) return KILN_OK;
    kn_opt_kill(c, i);
    if (bias >= 0) kn_opt_kill(c, add);
    *done = true;
    return KILN_OK;
}

kiln_status kn_pass_fuse_qdq_matmul(kn_opt_ctx *c) {
    for (int i = 0; i < c->g->n_nodes; i++) {
        if (!kn_opt_is(c, i, "MatMul")) continue;
        bool done = false;
        KN_TRY(fuse(c, i, &done));
        if (done) {
            kn_opt_note(c, "DequantizeLinear+DequantizeLinear+MatMul");
            KN_TRY(kn_opt_refresh(c));
        }
    }
    return KILN_OK;
}

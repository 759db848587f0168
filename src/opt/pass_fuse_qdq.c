/* The QDQ form quantisation tools write for static quantisation (8-bit tensors dequantised before
 * each float operator, its result quantised after), folded into the integer operators.
 *
 * fuse_qdq_matmul: MatMul of two dequantised 8-bit operands, MatMul(DequantizeLinear(A_q, sa, za),
 * DequantizeLinear(B_q, sb, zb)), becomes com.microsoft MatMulIntegerToFloat(A_q, B_q, sa, sb, za, zb): the exact integer product scaled
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
 * any other reader (else they go as dead code). Where the product's only reader quantises it again
 * (attention's products of two quantised activations, and weight products without a bias),
 * Q(MatMul(DQ(A_q), DQ(B_q))) becomes QLinearMatMul instead, B constant or not: the exact sum
 * requantised once, as ONNX Runtime's QDQ selectors fold it; every scale and zero point one value.
 *
 * fuse_qdq_conv: a Conv of dequantised 8-bit x and weights (and a bias dequantised from int32 at
 * scale sx * sw[m]) whose only reader quantises it, Q(Conv(DQ(x_q), DQ(w_q), DQ(b_q))), becomes
 * QLinearConv(x_q, sx, zx, w_q, sw, zw, sy, zy, b_q): the exact integer sum plus the bias,
 * requantised once (round(acc * sx * sw[m] / sy) + zy), where the unfused graph rounds each float
 * term and the bias before quantising, so an output may differ by one step where the float sum
 * lands within its rounding of a half step; ONNX Runtime's QDQ selectors make the same fold.
 * Taken: sx, zx, sy, zy one value each; sw (zw) one or one per output channel (axis 0); the bias
 * absent or an int32 [M] with zero point 0 and scale sx * sw[m] (to float rounding: a bias of
 * another scale would need rounding); every zero point given (QLinearConv takes them all, and
 * quantisers write them); only where the integer kernel is the faster (integer_conv_pays).
 * Providers without QLinearConv (CUDA) keep the float Conv. */
#include "opt/pass.h"

#include <math.h>

/* The DequantizeLinear producing v from an 8-bit tensor (int32 with wide): its quantised input,
 * scale and zero point (-1: none); -1 when v is not such a node's output. */
static int dq_of_type(const kn_opt_ctx *c, int v, bool wide, int *x, int *s, int *z) {
    const int dq = kn_opt_producer(c, v);
    if (!kn_opt_is(c, dq, "DequantizeLinear") || !kn_opt_is_f32(c, v)) return -1;
    const kn_node *n = &c->g->nodes[dq];
    if (kn_attr_int(n, "block_size", 0) != 0 || kn_attr_int(n, "output_dtype", 0) != 0) return -1;
    *x = kn_opt_input(c, dq, 0);
    *s = kn_opt_input(c, dq, 1);
    *z = kn_opt_n_inputs(c, dq) > 2 ? kn_opt_input(c, dq, 2) : -1;
    const kn_type *tx = &c->g->values[*x].type, *ts = &c->g->values[*s].type;
    const bool ok_type = wide ? tx->dtype == KILN_DTYPE_INT32 : tx->dtype == KILN_DTYPE_INT8 || tx->dtype == KILN_DTYPE_UINT8;
    if (tx->kind != KN_TYPE_TENSOR || !ok_type) return -1;
    if (ts->kind != KN_TYPE_TENSOR || ts->dtype != KILN_DTYPE_FLOAT || ts->rank < 0) return -1;
    if (*z >= 0) {
        const kn_type *tz = &c->g->values[*z].type;
        if (tz->dtype != tx->dtype || tz->rank != ts->rank) return -1;
        for (int d = 0; d < tz->rank; d++)
            if (tz->dims[d].value < 0 || tz->dims[d].value != ts->dims[d].value) return -1;
    }
    return dq;
}

static int dq_of(const kn_opt_ctx *c, int v, int *x, int *s, int *z) { return dq_of_type(c, v, false, x, s, z); }

static kiln_status fuse(kn_opt_ctx *c, int i, bool *done) {
    const kn_node *n = &c->g->nodes[i];
    *done = false;
    if (n->n_inputs != 2 || n->n_outputs != 1 || !kn_opt_is_f32(c, n->outputs[0])) return KILN_OK;
    int xa, sa, za, xb, sb, zb;
    if (dq_of(c, n->inputs[0], &xa, &sa, &za) < 0) return KILN_OK;
    const int db = dq_of(c, n->inputs[1], &xb, &sb, &zb);
    if (db < 0 || kn_opt_static_count(&c->g->values[sa].type) != 1) return KILN_OK;
    const kn_tensor *bq = kn_opt_const(c, xb);
    if (!bq || bq->rank != 2) return KILN_OK;
    const kn_type *tsb = &c->g->values[sb].type;
    const int64_t nsb = kn_opt_static_count(tsb), axis = kn_attr_int(&c->g->nodes[db], "axis", 1);
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

/* The QuantizeLinear that is the only reader of v, to 8 bits with one scale and zero point (both
 * given): its output, scale and zero point; -1 otherwise. */
static int q_after(const kn_opt_ctx *c, int v, int *y, int *sy, int *zy) {
    const kn_graph *g = c->g;
    if (kn_opt_pinned(c, v)) return -1;
    const int q = kn_opt_only_consumer(c, v);
    if (!kn_opt_is(c, q, "QuantizeLinear") || kn_opt_input(c, q, 0) != v) return -1;
    const kn_node *qn = &g->nodes[q];
    if (kn_attr_int(qn, "block_size", 0) != 0 || kn_attr_int(qn, "output_dtype", 0) != 0) return -1;
    *y = qn->outputs[0], *sy = kn_opt_input(c, q, 1), *zy = kn_opt_n_inputs(c, q) > 2 ? kn_opt_input(c, q, 2) : -1;
    const kiln_dtype ty = g->values[*y].type.dtype;
    if ((ty != KILN_DTYPE_UINT8 && ty != KILN_DTYPE_INT8) || g->values[*sy].type.dtype != KILN_DTYPE_FLOAT ||
        *zy < 0 || kn_opt_static_count(&g->values[*sy].type) != 1 || kn_opt_static_count(&g->values[*zy].type) != 1)
        return -1;
    return q;
}

/* Emits p, the integer operator that replaces float node i and the QuantizeLinear q after it
 * (p's output is q's), and removes both; *done says whether it formed. */
static kiln_status emit_requantised(kn_opt_ctx *c, const kn_opt_proto *p, int i, int q, bool *done) {
    int made;
    KN_TRY(kn_opt_emit(c, p, i, &made));
    if (made < 0) return KILN_OK;
    kn_opt_kill(c, i);
    kn_opt_kill(c, q);
    *done = true;
    return KILN_OK;
}

/* Q(MatMul(DQ(a_q), DQ(b_q))) -> QLinearMatMul(a_q, sa, za, b_q, sb, zb, sy, zy): the exact integer
 * product requantised once, as ONNX Runtime's QDQ selectors fold it (attention's products of two
 * quantised activations, which fuse() does not take). Every scale and zero point one value, all
 * zero points given. */
static kiln_status fuse_qlinear(kn_opt_ctx *c, int i, bool *done) {
    const kn_graph *g = c->g;
    const kn_node *n = &g->nodes[i];
    *done = false;
    if (n->n_inputs != 2 || n->n_outputs != 1 || !kn_opt_is_f32(c, n->outputs[0])) return KILN_OK;
    int y, sy, zy;
    const int q = q_after(c, n->outputs[0], &y, &sy, &zy);
    if (q < 0) return KILN_OK;
    int xa, sa, za, xb, sb, zb;
    if (dq_of(c, n->inputs[0], &xa, &sa, &za) < 0 || dq_of(c, n->inputs[1], &xb, &sb, &zb) < 0 || za < 0 || zb < 0)
        return KILN_OK;
    const int sc[4] = {sa, za, sb, zb};
    for (int k = 0; k < 4; k++)
        if (kn_opt_static_count(&g->values[sc[k]].type) != 1) return KILN_OK;
    kn_opt_proto p;
    kn_proto_init(&p, "", "QLinearMatMul");
    const int ins[8] = {xa, sa, za, xb, sb, zb, sy, zy};
    for (int k = 0; k < 8; k++) kn_proto_in(&p, ins[k]);
    kn_proto_out(&p, y);
    return emit_requantised(c, &p, i, q, done);
}

kiln_status kn_pass_fuse_qdq_matmul(kn_opt_ctx *c) {
    for (int i = 0; i < c->g->n_nodes; i++) {
        if (!kn_opt_is(c, i, "MatMul")) continue;
        bool done = false;
        KN_TRY(fuse_qlinear(c, i, &done));
        if (done) {
            kn_opt_note(c, "DequantizeLinear+DequantizeLinear+MatMul+QuantizeLinear");
            KN_TRY(kn_opt_refresh(c));
            continue;
        }
        KN_TRY(fuse(c, i, &done));
        if (done) {
            kn_opt_note(c, "DequantizeLinear+DequantizeLinear+MatMul");
            KN_TRY(kn_opt_refresh(c));
        }
    }
    return KILN_OK;
}

/* Whether the bias DequantizeLinear (b_q int32 [M], scale bs, zero point bz) is the integer bias of
 * a product scaled by sx * sw[m]: zero points all 0, each scale equal to that product to float
 * rounding. */
static bool bias_on_product_scale(const kn_opt_ctx *c, int bq, int bs, int bz, double sx, int sw, int64_t m) {
    const kn_tensor *tb = kn_opt_const(c, bq), *tbs = kn_opt_const(c, bs), *tsw = kn_opt_const(c, sw);
    if (!tb || tb->rank != 1 || tb->dims[0] != m || !tbs || !tsw || tbs->dtype != KILN_DTYPE_FLOAT ||
        tsw->dtype != KILN_DTYPE_FLOAT)
        return false;
    const int64_t nbs = kn_tensor_count(tbs), nsw = kn_tensor_count(tsw);
    if ((nbs != 1 && nbs != m) || (nsw != 1 && nsw != m)) return false;
    if (bz >= 0) {
        const kn_tensor *tz = kn_opt_const(c, bz);
        if (!tz || tz->dtype != KILN_DTYPE_INT32) return false;
        for (int64_t k = 0; k < kn_tensor_count(tz); k++)
            if (((const int32_t *)tz->data)[k] != 0) return false;
    }
    const float *bsv = tbs->data, *swv = tsw->data;
    for (int64_t k = 0; k < m; k++) {
        const double want = sx * swv[nsw == 1 ? 0 : k], have = bsv[nbs == 1 ? 0 : k];
        if (!(fabs(have - want) <= 1e-6 * fabs(want))) return false;
    }
    return true;
}

/* Where kiln's QLinearConv beats the float Conv with the QuantizeLinear it removes (and x's
 * DequantizeLinear where the Conv was its only reader), per node in the three QDQ models of the
 * corpus, 1 thread (bench/results/cpu-int8-2026-12-05-h59.md; cpu-qdq-conv-2026-12-05.md before):
 *  - one group over more than one output position (or an unknown plane): a sum of at least 16
 *    terms (C x kernel): 0.5-0.9 of the float time from 24 terms, 0.8-1.05 at 16, 1.05-1.2 at 8;
 *  - one output position (a squeeze-excite or classifier product): at least 128 terms (0.3-1.0
 *    from there, up to 2.5x below it: the node's fixed costs);
 *  - depthwise (one input channel a group) with output rows of 64 or more, or of unknown width:
 *    0.75-1.0 (5x5 and 3x3 on rows of 96); on rows of 7-28 the integer kernel took 1.1-1.9x.
 * Other grouped convolutions stay float (not measured). */
#define QDQ_CONV_MIN_TERMS 16
#define QDQ_CONV_MIN_TERMS_ONE_POSITION 128
#define QDQ_CONV_MIN_DEPTHWISE_ROW 64
static bool integer_conv_pays(const kn_node *conv, const kn_type *tw, const kn_type *ty) {
    const int64_t group = kn_attr_int(conv, "group", 1);
    int64_t terms = 1, positions = 1;
    for (int d = 1; d < tw->rank; d++) {
        if (tw->dims[d].value < 0) return false;
        terms *= tw->dims[d].value;
    }
    for (int d = 2; d < ty->rank && positions >= 0; d++) positions = ty->dims[d].value < 0 ? -1 : positions * ty->dims[d].value;
    if (group != 1) {
        const int64_t row = ty->rank > 2 ? ty->dims[ty->rank - 1].value : -1;
        return tw->dims[1].value == 1 && tw->rank <= 4 && (row < 0 || row >= QDQ_CONV_MIN_DEPTHWISE_ROW);
    }
    return positions == 1 ? terms >= QDQ_CONV_MIN_TERMS_ONE_POSITION : terms >= QDQ_CONV_MIN_TERMS;
}

static const char *const conv_attrs[] = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"};

static kiln_status fuse_conv(kn_opt_ctx *c, int i, bool *done) {
    kn_graph *g = c->g;
    const kn_node *n = &g->nodes[i];
    *done = false;
    if (n->n_outputs != 1 || n->n_inputs < 2 || !kn_opt_is_f32(c, n->outputs[0]) || kn_opt_pinned(c, n->outputs[0]))
        return KILN_OK;
    /* the one reader: a QuantizeLinear to 8 bits with one scale and zero point */
    int y, sy, zy;
    const int q = q_after(c, n->outputs[0], &y, &sy, &zy);
    if (q < 0) return KILN_OK;
    int xq, sx, zx, wq, sw, zw;
    if (dq_of(c, n->inputs[0], &xq, &sx, &zx) < 0 || zx < 0 || kn_opt_static_count(&g->values[sx].type) != 1 ||
        kn_opt_static_count(&g->values[zx].type) != 1)
        return KILN_OK;
    const int dw = dq_of(c, n->inputs[1], &wq, &sw, &zw);
    if (dw < 0 || zw < 0) return KILN_OK;
    const kn_type *tw = &g->values[wq].type;
    if (tw->rank < 3 || tw->dims[0].value < 1) return KILN_OK;
    const int64_t m = tw->dims[0].value, nsw = kn_opt_static_count(&g->values[sw].type);
    if (!integer_conv_pays(n, tw, &g->values[n->outputs[0]].type)) return KILN_OK;
    if (nsw != 1 && !(g->values[sw].type.rank == 1 && nsw == m && kn_attr_int(&g->nodes[dw], "axis", 1) == 0))
        return KILN_OK;
    /* the bias: the int32 sum's own bias */
    int bq = -1;
    if (n->n_inputs > 2 && n->inputs[2] >= 0) {
        int bs, bz;
        double sxv; /* x's scale (float, from dq_of): a constant, to check the bias's scale */
        if (dq_of_type(c, n->inputs[2], true, &bq, &bs, &bz) < 0 || !kn_opt_scalar(c, sx, &sxv) ||
            !bias_on_product_scale(c, bq, bs, bz, sxv, sw, m))
            return KILN_OK;
    }
    kn_opt_proto p;
    kn_proto_init(&p, "", "QLinearConv");
    const int ins[9] = {xq, sx, zx, wq, sw, zw, sy, zy, bq};
    for (int k = 0; k < 9; k++) kn_proto_in(&p, ins[k]);
    kn_proto_out(&p, y);
    for (size_t k = 0; k < sizeof conv_attrs / sizeof conv_attrs[0]; k++) kn_proto_copy_attr(&p, c, i, conv_attrs[k]);
    return emit_requantised(c, &p, i, q, done);
}

kiln_status kn_pass_fuse_qdq_conv(kn_opt_ctx *c) {
    for (int i = 0; i < c->g->n_nodes; i++) {
        if (!kn_opt_is(c, i, "Conv")) continue;
        bool done = false;
        KN_TRY(fuse_conv(c, i, &done));
        if (done) {
            kn_opt_note(c, "DequantizeLinear+Conv+QuantizeLinear");
            KN_TRY(kn_opt_refresh(c));
        }
    }
    return KILN_OK;
}

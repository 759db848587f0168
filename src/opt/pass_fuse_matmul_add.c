/* MatMul followed by a bias Add:
 *  - 2-D A and B with nothing else to absorb: a Gemm with the bias as C (Gemm's C broadcasts
 *    unidirectionally to [M, N], so any bias whose Add keeps the MatMul's shape fits);
 *  - otherwise kiln.FusedMatMul(A, B, bias, Z) = act(A B + bias + Z), which also takes a residual
 *    Add of exactly the output's shape after the bias and an activation after that. Its bias is a
 *    scalar or one value per output column; any other addend of the output's shape is a residual.
 * A MatMul with only an activation after it becomes a FusedMatMul too.
 * And a Gemm (or 2-D MatMul) over the rows of a tensor (a Gemm's bias broadcast over them), reshaped
 * back to the rows' dims and added to a residual (torch MultiheadAttention's output projection): a
 * FusedMatMul over the rows in place, with the bias and the residual in it. */
#include "opt/pass.h"

#include <string.h>

/* A bias for FusedMatMul: float, a scalar or [.., N] with leading 1s, rank <= y's. */
static bool is_column_bias(const kn_opt_ctx *c, int b, int y) {
    const kn_type *tb = &c->g->values[b].type, *ty = &c->g->values[y].type;
    if (tb->kind != KN_TYPE_TENSOR || tb->dtype != ty->dtype || tb->rank < 0 || ty->rank < 1 || tb->rank > ty->rank)
        return false;
    int64_t n = ty->dims[ty->rank - 1].value;
    for (int d = 0; d < tb->rank - 1; d++)
        if (tb->dims[d].value != 1) return false;
    if (tb->rank == 0) return true;
    int64_t last = tb->dims[tb->rank - 1].value;
    return last == 1 || (last >= 0 && last == n);
}

/* The Add reading v whose other input has v's exact shape and type (and whose output too). */
static int residual_add(const kn_opt_ctx *c, int v, int *z_out) {
    int add = kn_opt_only_consumer(c, v);
    if (!kn_opt_is(c, add, "Add")) return -1;
    int other = kn_opt_other_input(c, add, v);
    const kn_type *tv = &c->g->values[v].type;
    if (other < 0 || c->g->values[other].type.dtype != tv->dtype || !kn_opt_same_shape(&c->g->values[other].type, tv) ||
        !kn_opt_same_shape(&c->g->values[c->g->nodes[add].outputs[0]].type, tv))
        return -1;
    *z_out = other;
    return add;
}

/* The shape [d..., N] not known (symbolic dims, the Reshape's target computed at run time): the
 * product stays over the rows, FusedMatMul(A, B, C, residual) -> [R, N] (its residual Z may be the
 * rows under other leading dims), and the Reshape moves after it: Reshape(that, the target). */
static kiln_status rows_form(kn_opt_ctx *c, int i, int bm, int rs, int add, int z, bool gemm) {
    const kn_node *n = &c->g->nodes[i];
    const int a = n->inputs[0], cb = n->n_inputs > 2 ? n->inputs[2] : -1, out = c->g->nodes[add].outputs[0];
    const kn_type ty = c->g->values[n->outputs[0]].type;
    const int y2 = kn_opt_new_value(c, "rows_product", &ty);
    if (y2 < 0) return KN_OOM();
    kn_opt_proto pf, pr;
    int made;
    kn_proto_init(&pf, "kiln", "FusedMatMul");
    kn_proto_in(&pf, a);
    kn_proto_in(&pf, bm);
    kn_proto_in(&pf, cb);
    kn_proto_in(&pf, z);
    kn_proto_out(&pf, y2);
    KN_TRY(kn_opt_emit(c, &pf, i, &made));
    if (made < 0) return KILN_OK;
    kn_proto_init(&pr, "", "Reshape");
    kn_proto_in(&pr, y2);
    kn_proto_in(&pr, c->g->nodes[rs].inputs[1]);
    kn_proto_out(&pr, out);
    kn_proto_copy_attr(&pr, c, rs, "allowzero");
    KN_TRY(kn_opt_emit(c, &pr, add, &made));
    if (made < 0) return KILN_OK; /* the FusedMatMul goes as dead */
    kn_opt_kill(c, i);
    kn_opt_kill(c, rs);
    kn_opt_kill(c, add);
    kn_opt_note(c, gemm ? "Gemm over rows+bias+residual" : "MatMul over rows+residual");
    return kn_opt_refresh(c);
}

/* Gemm(A [R, K], B, C) -> Reshape([d..., N]) -> Add(residual of that shape), with alpha 1, beta 1
 * (or no C), A not transposed and C one value per column (or none): FusedMatMul(Reshape(A,
 * [d..., K]), B (B^T as a new constant when transB), C, residual). A MatMul of two matrices is the
 * same without C. */
static kiln_status fuse_gemm_reshape_residual(kn_opt_ctx *c, int i) {
    kn_graph *g = c->g;
    const kn_node *n = &g->nodes[i];
    const bool gemm = kn_opt_is(c, i, "Gemm");
    if (n->n_outputs != 1 || n->n_inputs < 2 || (!gemm && n->n_inputs != 2)) return KILN_OK;
    if (gemm && (kn_attr_int(n, "transA", 0) != 0 || kn_attr_float(n, "alpha", 1.0f) != 1.0f ||
                 (n->n_inputs > 2 && n->inputs[2] >= 0 && kn_attr_float(n, "beta", 1.0f) != 1.0f)))
        return KILN_OK;
    const int a = n->inputs[0], b = n->inputs[1], cb = n->n_inputs > 2 ? n->inputs[2] : -1, y = n->outputs[0];
    const bool tb = gemm && kn_attr_int(n, "transB", 0) != 0;
    if (!gemm && g->values[b].type.rank != 2) return KILN_OK;
    /* copies: adding values below may move the value table */
    const kn_type ta = g->values[a].type, ty = g->values[y].type;
    if (!kn_opt_is_f32(c, y) || ta.rank != 2 || ty.rank != 2 || ta.dims[1].value < 1 || ty.dims[1].value < 1 ||
        kn_opt_pinned(c, y))
        return KILN_OK;
    if (cb >= 0 && !is_column_bias(c, cb, y)) return KILN_OK;
    const int rs = kn_opt_only_consumer(c, y);
    if (!kn_opt_is(c, rs, "Reshape") || g->nodes[rs].inputs[0] != y) return KILN_OK;
    const int r = g->nodes[rs].outputs[0];
    const kn_type tr = g->values[r].type;
    if (kn_opt_pinned(c, r) || tr.rank < 3 || tr.dims[tr.rank - 1].value != ty.dims[1].value) return KILN_OK;
    int64_t rows = 1, shape[KILN_MAX_RANK];
    bool known = true;
    for (int k = 0; k < tr.rank; k++) {
        known &= tr.dims[k].value >= 0;
        shape[k] = tr.dims[k].value;
        if (k + 1 < tr.rank) rows *= shape[k];
    }
    if (known && rows != ty.dims[0].value) return KILN_OK;
    int z = -1;
    const int add = residual_add(c, r, &z);
    if (add < 0) return KILN_OK;
    int bm = b;
    if (tb) { /* B^T, once, as a constant */
        const kn_tensor *bt = kn_opt_const(c, b);
        if (!bt || bt->rank != 2 || bt->dtype != KILN_DTYPE_FLOAT) return KILN_OK;
        kn_tensor *t = NULL;
        int64_t d[2] = {bt->dims[1], bt->dims[0]};
        KN_TRY(kn_tensor_new(KILN_DTYPE_FLOAT, 2, d, &t));
        for (int64_t p = 0; p < d[0]; p++)
            for (int64_t q = 0; q < d[1]; q++) ((float *)t->data)[p * d[1] + q] = ((const float *)bt->data)[q * d[0] + p];
        if ((bm = kn_opt_new_const(c, "weight_t", t)) < 0) return KN_OOM();
    }
    if (!known) return rows_form(c, i, bm, rs, add, z, gemm);
    kn_tensor *st = NULL;
    int64_t sn = tr.rank;
    KN_TRY(kn_tensor_new(KILN_DTYPE_INT64, 1, &sn, &st));
    memcpy(st->data, shape, sizeof(int64_t) * (size_t)tr.rank);
    ((int64_t *)st->data)[tr.rank - 1] = ta.dims[1].value;
    const int sv = kn_opt_new_const(c, "rows_shape", st);
    if (sv < 0) return KN_OOM();
    kn_type t3 = tr;
    t3.dims[tr.rank - 1] = ta.dims[1];
    const int a3 = kn_opt_new_value(c, "rows", &t3);
    if (a3 < 0) return KN_OOM();
    kn_opt_proto pr, pf;
    int made;
    kn_proto_init(&pr, "", "Reshape");
    kn_proto_in(&pr, a);
    kn_proto_in(&pr, sv);
    kn_proto_out(&pr, a3);
    KN_TRY(kn_opt_emit(c, &pr, rs, &made));
    if (made < 0) return KILN_OK;
    kn_proto_init(&pf, "kiln", "FusedMatMul");
    kn_proto_in(&pf, a3);
    kn_proto_in(&pf, bm);
    kn_proto_in(&pf, cb);
    kn_proto_in(&pf, z);
    kn_proto_out(&pf, g->nodes[add].outputs[0]);
    KN_TRY(kn_opt_emit(c, &pf, i, &made));
    if (made < 0) return KILN_OK; /* the Reshape goes as dead */
    kn_opt_kill(c, i);
    kn_opt_kill(c, rs);
    kn_opt_kill(c, add);
    kn_opt_note(c, gemm ? "Gemm over rows+bias+residual" : "MatMul over rows+residual");
    return kn_opt_refresh(c);
}

/* kiln.FusedMatMul's inputs: A, B, bias, residual (-1: absent) */
static void build_fused_matmul(kn_opt_proto *p, const void *arg) {
    const int *operands = arg;
    kn_proto_init(p, "kiln", "FusedMatMul");
    for (int k = 0; k < 4; k++) kn_proto_in(p, operands[k]);
}

kiln_status kn_pass_fuse_matmul_add(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!kn_opt_is(c, i, "MatMul") || g->nodes[i].n_outputs != 1) continue;
        int y = g->nodes[i].outputs[0], a = kn_opt_input(c, i, 0), b = kn_opt_input(c, i, 1);
        /* 16-bit types when the target has the fused kernel (CUDA) */
        if (!kn_opt_is_float(c, y) || a < 0 || b < 0) continue;
        /* MatMul, bias Add, residual Add, activation, the clamps after it */
        int nodes[3 + KN_OPT_ACT_MAX_NODES + KN_OPT_BOUNDS_MAX_NODES] = {i}, n_nodes = 1;
        int last = y, bias = -1, z = -1;
        int add = kn_opt_only_consumer(c, y);
        if (kn_opt_is(c, add, "Add")) {
            int other = kn_opt_other_input(c, add, y);
            int out = g->nodes[add].outputs[0];
            if (other >= 0 && kn_opt_same_shape(&g->values[out].type, &g->values[y].type)) {
                if (is_column_bias(c, other, y)) bias = other;
                else if (g->values[other].type.dtype == g->values[y].type.dtype &&
                         kn_opt_same_shape(&g->values[other].type, &g->values[y].type))
                    z = other;
                if (bias >= 0 || z >= 0) {
                    last = out;
                    nodes[n_nodes++] = add;
                }
            }
        }
        int add2 = -1;
        if (bias >= 0 && (add2 = residual_add(c, last, &z)) >= 0) {
            last = g->nodes[add2].outputs[0];
            nodes[n_nodes++] = add2;
        }
        kn_act_spec act = {KN_ACT_NONE, 0, 0};
        int after = last;
        if (kn_opt_match_activation(c, last, &act, &after, nodes, &n_nodes)) last = after;
        if (bias < 0 && z < 0 && act.act == KN_ACT_NONE) continue;

        const kn_type *ta = &g->values[a].type, *tb = &g->values[b].type;
        bool two_d = ta->rank == 2 && tb->rank == 2 && g->values[y].type.rank == 2;
        int node = -1;
        kn_opt_proto p;
        /* as Gemm in float32 only: the CPU's 16-bit Gemm would round differently from MatMul + Add */
        if (two_d && kn_opt_is_f32(c, y) && bias >= 0 && z < 0 && act.act == KN_ACT_NONE &&
            kn_model_opset(c->model, "") >= 7 &&
            g->values[bias].type.rank <= 2) {
            kn_proto_init(&p, "", "Gemm");
            kn_proto_in(&p, a);
            kn_proto_in(&p, b);
            kn_proto_in(&p, bias);
            kn_proto_out(&p, last);
            KN_TRY(kn_opt_emit(c, &p, i, &node));
            if (node >= 0) {
                for (int k = 0; k < n_nodes; k++) kn_opt_kill(c, nodes[k]);
                kn_opt_note(c, "MatMul+Add as Gemm");
                KN_TRY(kn_opt_refresh(c));
                continue;
            }
        }
        if (bias >= 0 && z < 0 && !is_column_bias(c, bias, y)) continue;
        const int operands[4] = {a, b, bias, z};
        bool clamped;
        KN_TRY(kn_opt_emit_activated(c, i, build_fused_matmul, operands, &act, &last, nodes, &n_nodes, &node, &clamped));
        if (node < 0) continue;
        for (int k = 0; k < n_nodes; k++) kn_opt_kill(c, nodes[k]);
        kn_opt_note(c, bias >= 0 && z >= 0 ? "MatMul+bias+residual" : bias >= 0 ? "MatMul+bias" : z >= 0 ? "MatMul+residual" : "MatMul");
        if (act.act != KN_ACT_NONE || act.bounded) kn_opt_note(c, "+activation");
        if (clamped) kn_opt_note(c, "+clamp");
        KN_TRY(kn_opt_refresh(c));
    }
    for (int i = 0; i < g->n_nodes; i++)
        if (kn_opt_is(c, i, "Gemm") || kn_opt_is(c, i, "MatMul")) KN_TRY(fuse_gemm_reshape_residual(c, i));
    return KILN_OK;
}

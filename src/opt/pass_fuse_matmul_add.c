/* MatMul followed by a bias Add:
 *  - 2-D A and B with nothing else to absorb: a Gemm with the bias as C (Gemm's C broadcasts
 *    unidirectionally to [M, N], so any bias whose Add keeps the MatMul's shape fits);
 *  - otherwise kiln.FusedMatMul(A, B, bias, Z) = act(A B + bias + Z), which also takes a residual
 *    Add of exactly the output's shape after the bias and an activation after that. Its bias is a
 *    scalar or one value per output column; any other addend of the output's shape is a residual.
 * A MatMul with only an activation after it becomes a FusedMatMul too. */
#include "opt/pass.h"

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

kiln_status kn_pass_fuse_matmul_add(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!kn_opt_is(c, i, "MatMul") || g->nodes[i].n_outputs != 1) continue;
        int y = g->nodes[i].outputs[0], a = kn_opt_input(c, i, 0), b = kn_opt_input(c, i, 1);
        /* 16-bit types when the target has the fused kernel (CUDA) */
        if (!kn_opt_is_float(c, y) || a < 0 || b < 0) continue;
        int nodes[6] = {i}, n_nodes = 1;
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
        kn_proto_init(&p, "kiln", "FusedMatMul");
        kn_proto_in(&p, a);
        kn_proto_in(&p, b);
        kn_proto_in(&p, bias);
        kn_proto_in(&p, z);
        kn_proto_out(&p, last);
        kn_proto_act(&p, &act);
        KN_TRY(kn_opt_emit(c, &p, i, &node));
        if (node < 0) continue;
        for (int k = 0; k < n_nodes; k++) kn_opt_kill(c, nodes[k]);
        kn_opt_note(c, bias >= 0 && z >= 0 ? "MatMul+bias+residual" : bias >= 0 ? "MatMul+bias" : z >= 0 ? "MatMul+residual" : "MatMul");
        if (act.act != KN_ACT_NONE) kn_opt_note(c, "+activation");
        KN_TRY(kn_opt_refresh(c));
    }
    return KILN_OK;
}

/* Dynamic quantisation as ONNX Runtime's quantize_dynamic writes each MatMul:
 *
 *   x_q, x_scale, x_zp = DynamicQuantizeLinear(x)
 *   y = MatMulInteger(x_q, W_q, x_zp, W_zp) -> Cast(to float) -> Mul(s)    s = x_scale * W_scale
 *   (-> Add(bias), the model's own bias)
 *
 * fuse_integer_matmul_scale folds MatMulInteger, the Cast, the Mul and such an Add into
 * com.microsoft.MatMulIntegerToFloat(x_q, W_q, 1, s, x_zp, W_zp, bias): the same exact integer
 * product, converted to float, multiplied by s and added to the bias in the product's epilogue
 * (float(sum) * (1 * s[j]) + bias[j]: the float operations of the chain, in its order, so the
 * outputs are the same bits), instead of an int32 tensor through memory and an elementwise chain
 * over it (a quarter of a dynamically quantised transformer's time on the CPU). ONNX Runtime's
 * optimiser makes the same fold.
 *
 * Taken: W_q a 2-D [K, N] value of known N; x_zp one value or none; W_zp one value, one per column
 * or none; s a float32 value of one element or N along the last axis whose product keeps the
 * MatMulInteger's shape; the Add a constant float32 [N]; the int32 product and the converted one
 * read by nothing else. */
#include "opt/pass.h"

/* Whether v holds one value, or N values along the last axis (every other dim 1). */
static bool one_or_per_column(const kn_type *t, int64_t N) {
    if (t->kind != KN_TYPE_TENSOR || t->rank < 0) return false;
    const int64_t n = kn_opt_static_count(t);
    return n == 1 || (n == N && t->rank >= 1 && t->dims[t->rank - 1].value == N);
}

/* *one: the float 1 a_scale the folds share, made at the first fold */
static kiln_status fuse(kn_opt_ctx *c, int i, int *one, bool *done) {
    const kn_graph *g = c->g;
    *done = false;
    const int ni = kn_opt_n_inputs(c, i);
    if (ni < 2 || g->nodes[i].n_outputs != 1) return KILN_OK;
    const int a = kn_opt_input(c, i, 0), b = kn_opt_input(c, i, 1);
    const int za = ni > 2 ? kn_opt_input(c, i, 2) : -1, zb = ni > 3 ? kn_opt_input(c, i, 3) : -1;
    const kn_type *tb = &g->values[b].type;
    if (tb->kind != KN_TYPE_TENSOR || tb->rank != 2 || tb->dims[1].value < 0) return KILN_OK;
    const int64_t N = tb->dims[1].value;
    if (za >= 0 && kn_opt_static_count(&g->values[za].type) != 1) return KILN_OK;
    if (zb >= 0 && !one_or_per_column(&g->values[zb].type, N)) return KILN_OK;
    /* the int32 product, read only by a Cast to float */
    const int prod = g->nodes[i].outputs[0];
    const int cast = kn_opt_pinned(c, prod) ? -1 : kn_opt_only_consumer(c, prod);
    if (!kn_opt_is(c, cast, "Cast") || kn_attr_int(&g->nodes[cast], "to", 0) != KILN_DTYPE_FLOAT) return KILN_OK;
    /* the converted product, read only by a Mul by s that keeps its shape */
    const int conv = g->nodes[cast].outputs[0];
    const int mul = kn_opt_pinned(c, conv) ? -1 : kn_opt_only_consumer(c, conv);
    if (!kn_opt_is(c, mul, "Mul")) return KILN_OK;
    const int s = kn_opt_other_input(c, mul, conv);
    int y = g->nodes[mul].outputs[0];
    if (s < 0 || !kn_opt_is_f32(c, s) || !one_or_per_column(&g->values[s].type, N) ||
        !kn_opt_same_shape(&g->values[y].type, &g->values[conv].type))
        return KILN_OK;
    /* a bias Add after it (a constant of one value per column) becomes the operator's bias */
    int bias = -1, add = -1;
    const int next = kn_opt_pinned(c, y) ? -1 : kn_opt_only_consumer(c, y);
    if (kn_opt_is(c, next, "Add")) {
        const int other = kn_opt_other_input(c, next, y);
        const kn_tensor *bt = other >= 0 ? kn_opt_const(c, other) : NULL;
        if (bt && bt->dtype == KILN_DTYPE_FLOAT && bt->rank == 1 && bt->dims[0] == N &&
            kn_opt_same_shape(&g->values[g->nodes[next].outputs[0]].type, &g->values[y].type)) {
            bias = other;
            add = next;
            y = g->nodes[next].outputs[0];
        }
    }
    if (*one < 0) {
        kn_tensor *t;
        if (kn_tensor_new(KILN_DTYPE_FLOAT, 0, NULL, &t) != KILN_OK) return KILN_ERR_OUT_OF_MEMORY;
        *(float *)t->data = 1.0f;
        if ((*one = kn_opt_new_const(c, "integer_matmul_unit_scale", t)) < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    kn_opt_proto p;
    int made;
    kn_proto_init(&p, "com.microsoft", "MatMulIntegerToFloat");
    const int ins[7] = {a, b, *one, s, za, zb, bias};
    for (int k = 0; k < 7; k++) kn_proto_in(&p, ins[k]);
    kn_proto_out(&p, y);
    KN_TRY(kn_opt_emit(c, &p, i, &made));
    if (made < 0) return KILN_OK; /* (a constant no fold used goes as dead code) */
    kn_opt_kill(c, i);
    kn_opt_kill(c, cast);
    kn_opt_kill(c, mul);
    if (add >= 0) kn_opt_kill(c, add);
    *done = true;
    return KILN_OK;
}

kiln_status kn_pass_fuse_integer_matmul_scale(kn_opt_ctx *c) {
    int one = -1;
    for (int i = 0; i < c->g->n_nodes; i++) {
        if (!kn_opt_is(c, i, "MatMulInteger")) continue;
        bool done = false;
        KN_TRY(fuse(c, i, &one, &done));
        if (done) {
            kn_opt_note(c, "MatMulInteger+Cast+Mul");
            KN_TRY(kn_opt_refresh(c));
        }
    }
    return KILN_OK;
}

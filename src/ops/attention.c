/* The attention family: Attention (opset 23+), RotaryEmbedding (23), SwiGLU (28), LinearAttention
 * and CausalConvWithState (27), and ai.onnx.preview FlexAttention (1). Schemas and shape
 * inference. */
#include "ops/attention.h"
#include "ops/op.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ dim helpers */

static const kn_type *in_type(const kn_infer_ctx *c, int i) {
    return i < c->n_inputs && c->in[i] && c->in[i]->kind == KN_TYPE_TENSOR ? c->in[i] : NULL;
}

static kn_dim dim_of(const kn_type *t, int d) {
    if (!t || t->rank <= d || d < 0) return (kn_dim){-1, NULL};
    return t->dims[d];
}
static kn_dim dim_v(int64_t v) { return (kn_dim){v, NULL}; }
static kn_dim dim_mul(kn_dim a, kn_dim b) {
    return a.value >= 0 && b.value >= 0 ? dim_v(a.value * b.value) : dim_v(-1);
}
static kn_dim dim_add(kn_dim a, kn_dim b) {
    if (a.value == 0) return b;
    if (b.value == 0) return a;
    return a.value >= 0 && b.value >= 0 ? dim_v(a.value + b.value) : dim_v(-1);
}
static kn_dim dim_div(kn_dim a, int64_t n) { return a.value >= 0 && n > 0 ? dim_v(a.value / n) : dim_v(-1); }

static void set_out(kn_infer_ctx *c, int o, kiln_dtype dt, int rank, const kn_dim *dims) {
    if (o >= c->n_outputs) return;
    kn_type_set_tensor(&c->out[o], dt, rank, NULL);
    for (int d = 0; d < rank; d++) c->out[o].dims[d] = dims[d];
}

/* Two dims that must agree when both are known. */
static kiln_status same_dim(kn_infer_ctx *c, kn_dim a, kn_dim b, const char *what) {
    if (a.value >= 0 && b.value >= 0 && a.value != b.value)
        return kn_infer_error(c, KILN_ERR_SHAPE, "%s: %lld vs %lld", what, (long long)a.value, (long long)b.value);
    return KILN_OK;
}

static bool is_float_type(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16 || t == KILN_DTYPE_DOUBLE;
}

/* ------------------------------------------------------------------ Attention */

static kiln_status infer_attention(kn_infer_ctx *c) {
    const kn_type *Q = in_type(c, 0), *K = in_type(c, 1), *V = in_type(c, 2);
    const kn_type *M = in_type(c, 3), *PK = in_type(c, 4), *PV = in_type(c, 5), *NP = in_type(c, 6);
    if (!Q || !K || !V) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "inputs Q, K and V are required");
    kiln_dtype dt = Q->dtype;
    if (dt != KILN_DTYPE_UNDEFINED && !is_float_type(dt))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "Q must be float, float16, bfloat16 or double, got %s",
                              kiln_dtype_name(dt));
    if ((PK == NULL) != (PV == NULL))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "past_key and past_value must be given together");
    if (NP && PK)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "nonpad_kv_seqlen cannot be combined with past_key/past_value");
    int64_t qh = kn_attr_int(c->node, "q_num_heads", 0), kvh = kn_attr_int(c->node, "kv_num_heads", 0);
    int64_t mode = kn_attr_int(c->node, "qk_matmul_output_mode", 0);
    if (mode < 0 || mode > 3)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "qk_matmul_output_mode must be 0..3, got %lld", (long long)mode);
    int64_t sp = kn_attr_int(c->node, "softmax_precision", 0);
    if (sp != 0 && sp != KILN_DTYPE_FLOAT && sp != KILN_DTYPE_FLOAT16 && sp != KILN_DTYPE_DOUBLE &&
        sp != KILN_DTYPE_BFLOAT16)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "softmax_precision %lld is not float, float16, double or bfloat16",
                              (long long)sp);
    if (Q->rank < 0 || K->rank < 0 || V->rank < 0) {
        for (int o = 0; o < c->n_outputs && o < 4; o++) {
            kn_type_set_tensor(&c->out[o], dt, -1, NULL);
        }
        return KILN_OK;
    }
    int rank = Q->rank;
    if ((rank != 3 && rank != 4) || K->rank != rank || V->rank != rank)
        return kn_infer_error(c, KILN_ERR_SHAPE, "Q, K and V must all be 3-D or all 4-D, got ranks %d, %d and %d", Q->rank,
                              K->rank, V->rank);
    kn_dim B = dim_of(Q, 0), Hq, Hkv, Sq, Skv, Dk, Dv;
    if (rank == 3) {
        if (qh <= 0 || kvh <= 0)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "3-D inputs need positive q_num_heads and kv_num_heads "
                                  "attributes (got %lld and %lld)", (long long)qh, (long long)kvh);
        const kn_dim hq = dim_of(Q, 2), hk = dim_of(K, 2), hv = dim_of(V, 2);
        if ((hq.value >= 0 && hq.value % qh) || (hk.value >= 0 && hk.value % kvh) || (hv.value >= 0 && hv.value % kvh))
            return kn_infer_error(c, KILN_ERR_SHAPE, "hidden sizes Q %lld, K %lld, V %lld are not multiples of the "
                                  "head counts %lld (q) and %lld (kv)", (long long)hq.value, (long long)hk.value,
                                  (long long)hv.value, (long long)qh, (long long)kvh);
        Hq = dim_v(qh);
        Hkv = dim_v(kvh);
        Sq = dim_of(Q, 1);
        Skv = dim_of(K, 1);
        Dk = dim_div(hq, qh);
        KN_TRY(same_dim(c, Dk, dim_div(hk, kvh), "the head size of Q and K differ"));
        Dv = dim_div(hv, kvh);
        KN_TRY(same_dim(c, Skv, dim_of(V, 1), "K and V sequence lengths differ"));
    } else {
        Hq = dim_of(Q, 1);
        Hkv = dim_of(K, 1);
        Sq = dim_of(Q, 2);
        Skv = dim_of(K, 2);
        Dk = dim_of(Q, 3);
        Dv = dim_of(V, 3);
        KN_TRY(same_dim(c, Dk, dim_of(K, 3), "the head size of Q and K differ"));
        KN_TRY(same_dim(c, Hkv, dim_of(V, 1), "K and V head counts differ"));
        KN_TRY(same_dim(c, Skv, dim_of(V, 2), "K and V sequence lengths differ"));
        if (qh > 0) KN_TRY(same_dim(c, Hq, dim_v(qh), "q_num_heads and Q's head dimension differ"));
        if (kvh > 0) KN_TRY(same_dim(c, Hkv, dim_v(kvh), "kv_num_heads and K's head dimension differ"));
    }
    KN_TRY(same_dim(c, B, dim_of(K, 0), "Q and K batch sizes differ"));
    KN_TRY(same_dim(c, B, dim_of(V, 0), "Q and V batch sizes differ"));
    if (Hq.value > 0 && Hkv.value > 0 && Hq.value % Hkv.value)
        return kn_infer_error(c, KILN_ERR_SHAPE, "%lld query heads are not a multiple of %lld key/value heads",
                              (long long)Hq.value, (long long)Hkv.value);
    kn_dim Sp = dim_v(0);
    if (PK) {
        if (PK->rank >= 0 && PK->rank != 4)
            return kn_infer_error(c, KILN_ERR_SHAPE, "past_key must be 4-D, got rank %d", PK->rank);
        if (PV->rank >= 0 && PV->rank != 4)
            return kn_infer_error(c, KILN_ERR_SHAPE, "past_value must be 4-D, got rank %d", PV->rank);
        Sp = dim_of(PK, 2);
        KN_TRY(same_dim(c, Sp, dim_of(PV, 2), "past_key and past_value sequence lengths differ"));
        KN_TRY(same_dim(c, dim_of(PK, 0), B, "past_key's batch differs from Q's"));
        KN_TRY(same_dim(c, dim_of(PK, 1), Hkv, "past_key's head count differs from K's"));
        KN_TRY(same_dim(c, dim_of(PK, 3), Dk, "past_key's head size differs from K's"));
        KN_TRY(same_dim(c, dim_of(PV, 3), Dv, "past_value's head size differs from V's"));
    }
    kn_dim T = dim_add(Sp, Skv);
    if (M && M->rank >= 0) {
        if (M->rank < 1 || M->rank > 4)
            return kn_infer_error(c, KILN_ERR_SHAPE, "attn_mask must have rank 1 to 4, got %d", M->rank);
        kn_dim mc = M->dims[M->rank - 1];
        if (mc.value >= 0 && T.value >= 0 && mc.value > T.value)
            return kn_infer_error(c, KILN_ERR_SHAPE, "attn_mask has %lld key columns but there are only %lld keys",
                                  (long long)mc.value, (long long)T.value);
        if (M->dtype != KILN_DTYPE_BOOL && M->dtype != KILN_DTYPE_UNDEFINED && !is_float_type(M->dtype))
            return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "attn_mask must be bool or a float type, got %s",
                                  kiln_dtype_name(M->dtype));
        const kn_dim target[4] = {B, Hq, Sq, mc};
        for (int d = 0; d < M->rank - 1; d++) {
            kn_dim md = M->dims[d], td = target[4 - M->rank + d];
            if (md.value > 1 && td.value >= 0 && md.value != td.value)
                return kn_infer_error(c, KILN_ERR_SHAPE, "attn_mask dimension %d is %lld, which does not broadcast to "
                                      "%lld", d, (long long)md.value, (long long)td.value);
        }
    }
    if (NP && NP->rank >= 0 && NP->rank != 1)
        return kn_infer_error(c, KILN_ERR_SHAPE, "nonpad_kv_seqlen must be 1-D, got rank %d", NP->rank);
    kn_dim y[4];
    if (rank == 3) {
        y[0] = B;
        y[1] = Sq;
        y[2] = dim_mul(Hq, Dv);
    } else {
        y[0] = B;
        y[1] = Hq;
        y[2] = Sq;
        y[3] = Dv;
    }
    set_out(c, 0, dt, rank, y);
    kn_dim pk[4] = {B, Hkv, T, Dk}, pv[4] = {B, Hkv, T, Dv}, qk[4] = {B, Hq, Sq, T};
    set_out(c, 1, dt, 4, pk);
    set_out(c, 2, V->dtype, 4, pv);
    set_out(c, 3, dt, 4, qk);
    return KILN_OK;
}

/* ------------------------------------------------------------------ RotaryEmbedding */

static kiln_status infer_rotary(kn_infer_ctx *c) {
    const kn_type *X = in_type(c, 0), *cs = in_type(c, 1), *sn = in_type(c, 2), *pos = in_type(c, 3);
    if (!X || !cs || !sn) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "inputs X, cos_cache and sin_cache are required");
    if (X->rank >= 0 && X->rank != 3 && X->rank != 4)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input X must be 3-D or 4-D, got rank %d", X->rank);
    if (X->rank == 3 && kn_attr_int(c->node, "num_heads", 0) <= 0)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "a 3-D input needs the num_heads attribute");
    if (pos && cs->rank >= 0 && cs->rank != 2)
        return kn_infer_error(c, KILN_ERR_SHAPE, "with position_ids, cos_cache must be 2-D, got rank %d", cs->rank);
    if (!pos && cs->rank >= 0 && cs->rank != 3)
        return kn_infer_error(c, KILN_ERR_SHAPE, "without position_ids, cos_cache must be 3-D, got rank %d", cs->rank);
    return kn_infer_same(c, 0, 0);
}

/* ------------------------------------------------------------------ SwiGLU */

static kiln_status infer_swiglu(kn_infer_ctx *c) {
    const kn_type *A = in_type(c, 0), *Bt = in_type(c, 1);
    if (!A || !Bt) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "inputs A and B are required");
    if (A->rank >= 0 && Bt->rank >= 0) {
        bool same = A->rank == Bt->rank;
        for (int d = 0; same && d < A->rank; d++)
            if (A->dims[d].value >= 0 && Bt->dims[d].value >= 0 && A->dims[d].value != Bt->dims[d].value) same = false;
        if (!same) {
            char a[256], b[256];
            return kn_infer_error(c, KILN_ERR_SHAPE, "A %s and B %s must have the same shape (no broadcasting)",
                                  kn_type_str(A, a, sizeof a), kn_type_str(Bt, b, sizeof b));
        }
    }
    if (A->dtype != KILN_DTYPE_UNDEFINED && Bt->dtype != KILN_DTYPE_UNDEFINED && A->dtype != Bt->dtype)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "A is %s but B is %s", kiln_dtype_name(A->dtype),
                              kiln_dtype_name(Bt->dtype));
    return kn_infer_same(c, 0, 0);
}

/* ------------------------------------------------------------------ LinearAttention */

static kiln_status infer_linear_attention(kn_infer_ctx *c) {
    const kn_type *Q = in_type(c, 0), *K = in_type(c, 1), *V = in_type(c, 2), *S = in_type(c, 3);
    if (!Q || !K || !V) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "inputs query, key and value are required");
    int64_t qh = kn_attr_int(c->node, "q_num_heads", 0), kvh = kn_attr_int(c->node, "kv_num_heads", 0);
    if (qh <= 0 || kvh <= 0 || qh % kvh)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "q_num_heads (%lld) must be a positive multiple of kv_num_heads "
                              "(%lld)", (long long)qh, (long long)kvh);
    const char *rule = kn_attr_string(c->node, "update_rule", "gated_delta");
    bool gating = !strcmp(rule, "gated") || !strcmp(rule, "gated_delta");
    bool delta = !strcmp(rule, "delta") || !strcmp(rule, "gated_delta");
    if (!gating && !delta && strcmp(rule, "linear"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "update_rule '%s' is not linear, gated, delta or gated_delta", rule);
    bool has_decay = in_type(c, 4) != NULL, has_beta = in_type(c, 5) != NULL;
    if (gating != has_decay)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "update_rule '%s' %s the decay input", rule,
                              gating ? "requires" : "forbids");
    if (delta != has_beta)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "update_rule '%s' %s the beta input", rule,
                              delta ? "requires" : "forbids");
    if ((Q->rank >= 0 && Q->rank != 3) || (K->rank >= 0 && K->rank != 3) || (V->rank >= 0 && V->rank != 3))
        return kn_infer_error(c, KILN_ERR_SHAPE, "query, key and value must be 3-D (B, T, H*D)");
    kn_dim hq = dim_of(Q, 2), hk = dim_of(K, 2), hv = dim_of(V, 2);
    if ((hq.value >= 0 && hq.value % qh) || (hk.value >= 0 && hk.value % kvh) || (hv.value >= 0 && hv.value % kvh))
        return kn_infer_error(c, KILN_ERR_SHAPE, "hidden sizes (query %lld, key %lld, value %lld) are not multiples of the "
                              "head counts", (long long)hq.value, (long long)hk.value, (long long)hv.value);
    kn_dim dk = dim_div(hq, qh), dv = dim_div(hv, kvh);
    KN_TRY(same_dim(c, dk, dim_div(hk, kvh), "query and key head sizes differ"));
    kn_dim y[3] = {dim_of(Q, 0), dim_of(Q, 1), dim_mul(dim_v(qh), dv)};
    set_out(c, 0, Q->dtype, 3, y);
    kn_dim st[4] = {dim_of(Q, 0), dim_v(kvh), dk, dv};
    set_out(c, 1, S ? S->dtype : Q->dtype, 4, st);
    return KILN_OK;
}

/* ------------------------------------------------------------------ CausalConvWithState */

static kiln_status infer_causal_conv(kn_infer_ctx *c) {
    const kn_type *X = in_type(c, 0), *W = in_type(c, 1);
    if (!X || !W) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "inputs input and weight are required");
    if ((X->rank >= 0 && X->rank != 3) || (W->rank >= 0 && W->rank != 3))
        return kn_infer_error(c, KILN_ERR_SHAPE, "input and weight must be 3-D, got ranks %d and %d", X->rank, W->rank);
    const char *act = kn_attr_string(c->node, "activation", "none");
    if (strcmp(act, "none") && strcmp(act, "silu") && strcmp(act, "swish"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "activation '%s' is not none, silu or swish", act);
    KN_TRY(same_dim(c, dim_of(X, 1), dim_of(W, 0), "input channels and weight's first dimension differ"));
    if (W->rank == 3 && W->dims[1].value >= 0 && W->dims[1].value != 1)
        return kn_infer_error(c, KILN_ERR_SHAPE, "weight must be (channels, 1, k), got middle dimension %lld",
                              (long long)W->dims[1].value);
    KN_TRY(kn_infer_same(c, 0, 0));
    kn_dim k = dim_of(W, 2);
    kn_dim st[3] = {dim_of(X, 0), dim_of(X, 1), k.value >= 1 ? dim_v(k.value - 1) : dim_v(-1)};
    if (k.value == 0) return kn_infer_error(c, KILN_ERR_SHAPE, "the kernel size is 0");
    set_out(c, 1, X->dtype, 3, st);
    return KILN_OK;
}

/* ------------------------------------------------------------------ FlexAttention */

static kiln_status infer_flex_attention(kn_infer_ctx *c) {
    const kn_type *Q = in_type(c, 0), *K = in_type(c, 1), *V = in_type(c, 2);
    if (!Q || !K || !V) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "inputs Q, K and V are required");
    if ((Q->rank >= 0 && Q->rank != 4) || (K->rank >= 0 && K->rank != 4) || (V->rank >= 0 && V->rank != 4))
        return kn_infer_error(c, KILN_ERR_SHAPE, "Q, K and V must be 4-D, got ranks %d, %d and %d", Q->rank, K->rank,
                              V->rank);
    KN_TRY(same_dim(c, dim_of(Q, 3), dim_of(K, 3), "Q and K head sizes differ"));
    KN_TRY(same_dim(c, dim_of(K, 1), dim_of(V, 1), "K and V head counts differ"));
    KN_TRY(same_dim(c, dim_of(K, 2), dim_of(V, 2), "K and V sequence lengths differ"));
    kn_dim hq = dim_of(Q, 1), hk = dim_of(K, 1);
    if (hq.value > 0 && hk.value > 0 && hq.value % hk.value)
        return kn_infer_error(c, KILN_ERR_SHAPE, "%lld query heads are not a multiple of %lld key/value heads",
                              (long long)hq.value, (long long)hk.value);
    kn_dim y[4] = {dim_of(Q, 0), hq, dim_of(Q, 2), dim_of(V, 3)};
    set_out(c, 0, Q->dtype, 4, y);
    return KILN_OK;
}

const kn_op_schema kn_ops_attention[] = {
    {"", "Attention", 23, 0, 3, 7, 1, 4, infer_attention, 0},
    {"", "RotaryEmbedding", 23, 0, 3, 4, 1, 1, infer_rotary, 0},
    {"", "SwiGLU", 28, 0, 2, 2, 1, 1, infer_swiglu, 0},
    {"", "LinearAttention", 27, 0, 3, 6, 1, 2, infer_linear_attention, 0},
    {"", "CausalConvWithState", 27, 0, 2, 4, 1, 2, infer_causal_conv, 0},
    {"ai.onnx.preview", "FlexAttention", 1, 0, 3, 3, 1, 1, infer_flex_attention, KN_OP_HAS_SUBGRAPH},
    {0},
};

/* ------------------------------------------------------------------ attributes for the kernels */

static const kn_graph *graph_attr(const kn_node *n, const char *name) {
    const kn_attr *a = kn_node_attr(n, name);
    return a && a->type == KN_ATTR_GRAPH ? a->g : NULL;
}

kiln_status kn_attn_attrs_prepare(const kn_node *n, void *params) {
    kn_attn_attrs *p = params;
    memset(p, 0, sizeof *p);
    p->q_heads = kn_attr_int(n, "q_num_heads", 0);
    p->kv_heads = kn_attr_int(n, "kv_num_heads", 0);
    p->num_heads = kn_attr_int(n, "num_heads", 0);
    const kn_attr *sa = kn_node_attr(n, "scale");
    p->has_scale = sa != NULL;
    p->scale_raw = sa ? sa->f : 0.0f;
    p->scale = kn_attr_float(n, "scale", 0.0f);
    p->softmax_precision = kn_attr_int(n, "softmax_precision", 0);
    p->softcap = kn_attr_float(n, "softcap", 0.0f);
    p->is_causal = kn_attr_int(n, "is_causal", 0) != 0;
    p->left_window = kn_attr_int(n, "left_window_size", -1);
    p->right_window = kn_attr_int(n, "right_window_size", -1);
    p->qk_mode = (int)kn_attr_int(n, "qk_matmul_output_mode", 0);
    p->rotary_dim = kn_attr_int(n, "rotary_embedding_dim", 0);
    p->interleaved = kn_attr_int(n, "interleaved", 0) != 0;
    p->alpha = kn_attr_float(n, "alpha", 1.0f);
    p->activation = kn_attr_string(n, "activation", "none");
    p->update_rule = kn_attr_string(n, "update_rule", "gated_delta");
    p->score_mod = graph_attr(n, "score_mod");
    p->prob_mod = graph_attr(n, "prob_mod");
    p->unidirectional = kn_attr_int(n, "unidirectional", 0) != 0;
    p->mask_filter_value = kn_attr_float(n, "mask_filter_value", -10000.0f);
    p->qkv_hidden_sizes = kn_attr_ints(n, "qkv_hidden_sizes", &p->n_qkv_hidden_sizes);
    p->do_rotary = kn_attr_int(n, "do_rotary", 0) != 0;
    p->rotary_interleaved = kn_attr_int(n, "rotary_interleaved", 0) != 0;
    p->smooth_softmax = kn_attr_int(n, "smooth_softmax", 0) != 0;
    p->local_window_size = kn_attr_int(n, "local_window_size", -1);
    return KILN_OK;
}

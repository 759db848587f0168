/* The com.microsoft operators that exporters and ONNX Runtime's offline optimiser emit, and ONNX
 * Runtime's own opset-1 LayerNormalization and SimplifiedLayerNormalization (registered by ONNX
 * Runtime in the ai.onnx domain: LayerNormalization before ONNX defined it at opset 17, RMS
 * normalisation under the name SimplifiedLayerNormalization). Schemas and shape inference. */
#include "ops/op.h"

#include <stdio.h>
#include <string.h>

static const kn_type *in_type(const kn_infer_ctx *c, int i) {
    return i < c->n_inputs && c->in[i] && c->in[i]->kind == KN_TYPE_TENSOR ? c->in[i] : NULL;
}
static kn_dim dim_of(const kn_type *t, int d) {
    if (!t || d < 0 || t->rank <= d) return (kn_dim){-1, NULL};
    return t->dims[d];
}
static kn_dim dim_v(int64_t v) { return (kn_dim){v, NULL}; }
static kn_dim dim_add(kn_dim a, kn_dim b) {
    if (a.value == 0) return b;
    if (b.value == 0) return a;
    return a.value >= 0 && b.value >= 0 ? dim_v(a.value + b.value) : dim_v(-1);
}
static kn_dim dim_mul(kn_dim a, int64_t n) { return a.value >= 0 ? dim_v(a.value * n) : dim_v(-1); }
static kn_dim dim_div(kn_dim a, int64_t n) { return a.value >= 0 && n > 0 ? dim_v(a.value / n) : dim_v(-1); }

static void set_out(kn_infer_ctx *c, int o, kiln_dtype dt, int rank, const kn_dim *dims) {
    if (o >= c->n_outputs) return;
    kn_type_set_tensor(&c->out[o], dt, rank, NULL);
    for (int d = 0; d < rank && dims; d++) c->out[o].dims[d] = dims[d];
}

static kiln_status need(kn_infer_ctx *c, int i, const char *name) {
    if (!in_type(c, i)) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input '%s' is required", name);
    return KILN_OK;
}

static bool float_type(kiln_dtype t) {
    return t == KILN_DTYPE_UNDEFINED || t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 ||
           t == KILN_DTYPE_BFLOAT16 || t == KILN_DTYPE_DOUBLE;
}

/* ------------------------------------------------------------------ activations */

static kiln_status infer_unary(kn_infer_ctx *c) {
    KN_TRY(need(c, 0, "X"));
    if (!float_type(c->in[0]->dtype))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "input type %s is not a float type", kiln_dtype_name(c->in[0]->dtype));
    return kn_infer_same(c, 0, 0);
}

/* X plus a bias over the last dimension (FastGelu, BiasGelu, BiasAdd). */
static kiln_status infer_bias_act(kn_infer_ctx *c) {
    KN_TRY(infer_unary(c));
    const kn_type *x = c->in[0], *b = in_type(c, 1);
    if (b && b->rank >= 0 && x->rank > 0) {
        kn_dim last = x->dims[x->rank - 1];
        int64_t n = 1;
        bool known = true;
        for (int d = 0; d < b->rank; d++) {
            if (b->dims[d].value < 0 || __builtin_mul_overflow(n, b->dims[d].value, &n)) known = false;
        }
        if (known && last.value >= 0 && n != last.value && b->rank <= 1)
            return kn_infer_error(c, KILN_ERR_SHAPE, "the bias has %lld elements but the last dimension is %lld",
                                  (long long)n, (long long)last.value);
    }
    return KILN_OK;
}

static kiln_status infer_bias_split_gelu(kn_infer_ctx *c) {
    KN_TRY(need(c, 0, "X"));
    KN_TRY(need(c, 1, "bias"));
    const kn_type *x = c->in[0];
    if (x->rank < 0) {
        set_out(c, 0, x->dtype, -1, NULL);
        return KILN_OK;
    }
    if (x->rank != 3) return kn_infer_error(c, KILN_ERR_SHAPE, "X must be 3-D (N, S, D), got rank %d", x->rank);
    kn_dim d = x->dims[2];
    if (d.value >= 0 && d.value % 2) return kn_infer_error(c, KILN_ERR_SHAPE, "the last dimension %lld is odd", (long long)d.value);
    kn_dim y[3] = {x->dims[0], x->dims[1], dim_div(d, 2)};
    set_out(c, 0, x->dtype, 3, y);
    return KILN_OK;
}

/* ------------------------------------------------------------------ normalisations */

/* SkipLayerNormalization / SkipSimplifiedLayerNormalization: output and input_skip_bias_sum like
 * the input; mean and inv_std_var (float) with the last dimension 1. */
static kiln_status infer_skip_norm(kn_infer_ctx *c) {
    KN_TRY(need(c, 0, "input"));
    KN_TRY(need(c, 1, "skip"));
    KN_TRY(need(c, 2, "gamma"));
    const kn_type *x = c->in[0], *s = c->in[1];
    if (!float_type(x->dtype))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "input type %s is not a float type", kiln_dtype_name(x->dtype));
    if (x->rank >= 0 && x->rank != 2 && x->rank != 3)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input must be 2-D or 3-D, got rank %d", x->rank);
    if (x->rank > 0 && s->rank > 0) {
        kn_dim a = x->dims[x->rank - 1], b = s->dims[s->rank - 1];
        if (a.value >= 0 && b.value >= 0 && a.value != b.value)
            return kn_infer_error(c, KILN_ERR_SHAPE, "input hidden size %lld and skip hidden size %lld differ",
                                  (long long)a.value, (long long)b.value);
    }
    KN_TRY(kn_infer_same(c, 0, 0));
    if (x->rank < 0) {
        for (int o = 1; o < 3; o++) set_out(c, o, KILN_DTYPE_FLOAT, -1, NULL);
    } else {
        kn_dim d[KILN_MAX_RANK];
        for (int k = 0; k < x->rank; k++) d[k] = k == x->rank - 1 ? dim_v(1) : x->dims[k];
        for (int o = 1; o < 3; o++) set_out(c, o, KILN_DTYPE_FLOAT, x->rank, d);
    }
    if (c->n_outputs > 3) KN_TRY(kn_infer_same(c, 0, 3));
    return KILN_OK;
}

/* LayerNormalization (opset 1..16, ONNX Runtime's) and SimplifiedLayerNormalization: Y like X;
 * the statistics outputs (stash type, float by default) keep the dims before axis, 1 after. */
static kiln_status infer_norm(kn_infer_ctx *c) {
    KN_TRY(need(c, 0, "X"));
    KN_TRY(need(c, 1, "scale"));
    const kn_type *x = c->in[0];
    if (!float_type(x->dtype))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "X type %s is not a float type", kiln_dtype_name(x->dtype));
    KN_TRY(kn_infer_same(c, 0, 0));
    int64_t stash = kn_attr_int(c->node, "stash_type", 1);
    kiln_dtype u = stash == KILN_DTYPE_DOUBLE ? KILN_DTYPE_DOUBLE : KILN_DTYPE_FLOAT;
    int first = strcmp(c->node->op_type, "SimplifiedLayerNormalization") ? 1 : 0; /* Mean only for LayerNorm */
    if (x->rank < 0) {
        for (int o = 1; o < c->n_outputs && o < 3; o++) set_out(c, o, u, -1, NULL);
        return KILN_OK;
    }
    int axis;
    KN_TRY(kn_infer_axis(c, kn_attr_int(c->node, "axis", -1), x->rank, "axis", &axis));
    kn_dim d[KILN_MAX_RANK];
    for (int k = 0; k < x->rank; k++) d[k] = k < axis ? x->dims[k] : dim_v(1);
    for (int o = 1; o < c->n_outputs && o < 2 + first; o++) set_out(c, o, u, x->rank, d);
    return KILN_OK;
}

/* EmbedLayerNormalization: output and embedding_sum (B, S, H), mask_index (B) int32. */
static kiln_status infer_embed_norm(kn_infer_ctx *c) {
    KN_TRY(need(c, 0, "input_ids"));
    KN_TRY(need(c, 2, "word_embedding"));
    KN_TRY(need(c, 3, "position_embedding"));
    KN_TRY(need(c, 5, "gamma"));
    KN_TRY(need(c, 6, "beta"));
    const kn_type *ids = c->in[0], *we = c->in[2];
    if (ids->rank >= 0 && ids->rank != 2) return kn_infer_error(c, KILN_ERR_SHAPE, "input_ids must be 2-D, got rank %d", ids->rank);
    if (we->rank >= 0 && we->rank != 2)
        return kn_infer_error(c, KILN_ERR_SHAPE, "word_embedding must be 2-D, got rank %d", we->rank);
    kn_dim y[3] = {dim_of(ids, 0), dim_of(ids, 1), dim_of(we, 1)};
    set_out(c, 0, we->dtype, 3, y);
    set_out(c, 1, KILN_DTYPE_INT32, 1, y);
    set_out(c, 2, we->dtype, 3, y);
    return KILN_OK;
}

/* ------------------------------------------------------------------ FusedMatMul */

/* The dims of op(X) for FusedMatMul: transBatch moves dim 0 next to the last one, trans swaps
 * the last two. */
static void fused_dims(const kn_type *t, bool tb, bool tr, kn_dim *d) {
    int r = t->rank;
    for (int k = 0; k < r; k++) d[k] = t->dims[k];
    if (tb && r >= 3) {
        kn_dim first = d[0];
        for (int k = 0; k < r - 2; k++) d[k] = t->dims[k + 1];
        d[r - 2] = first;
    }
    if (tr && r >= 2) {
        kn_dim s = d[r - 1];
        d[r - 1] = d[r - 2];
        d[r - 2] = s;
    }
}

static kiln_status infer_fused_matmul(kn_infer_ctx *c) {
    KN_TRY(need(c, 0, "A"));
    KN_TRY(need(c, 1, "B"));
    const kn_type *A = c->in[0], *B = c->in[1];
    if (A->dtype != KILN_DTYPE_UNDEFINED && B->dtype != KILN_DTYPE_UNDEFINED && A->dtype != B->dtype)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "A is %s but B is %s", kiln_dtype_name(A->dtype),
                              kiln_dtype_name(B->dtype));
    if (A->dtype != KILN_DTYPE_UNDEFINED && A->dtype != KILN_DTYPE_FLOAT && A->dtype != KILN_DTYPE_DOUBLE &&
        A->dtype != KILN_DTYPE_FLOAT16 && A->dtype != KILN_DTYPE_BFLOAT16)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "type %s is not supported (float types)", kiln_dtype_name(A->dtype));
    if (A->rank < 0 || B->rank < 0) {
        set_out(c, 0, A->dtype, -1, NULL);
        return KILN_OK;
    }
    if (A->rank < 1 || B->rank < 1) return kn_infer_error(c, KILN_ERR_SHAPE, "A and B must have rank >= 1");
    kn_dim a[KILN_MAX_RANK + 1], b[KILN_MAX_RANK + 1];
    fused_dims(A, kn_attr_int(c->node, "transBatchA", 0), A->rank >= 2 && kn_attr_int(c->node, "transA", 0), a);
    fused_dims(B, kn_attr_int(c->node, "transBatchB", 0), B->rank >= 2 && kn_attr_int(c->node, "transB", 0), b);
    int ra = A->rank, rb = B->rank;
    /* 1-D operands as in numpy.matmul: a row / a column, removed from the result */
    bool a1 = ra == 1, b1 = rb == 1;
    if (a1) {
        a[1] = a[0];
        a[0] = dim_v(1);
        ra = 2;
    }
    if (b1) {
        b[1] = dim_v(1);
        rb = 2;
    }
    kn_dim K1 = a[ra - 1], K2 = b[rb - 2];
    if (K1.value >= 0 && K2.value >= 0 && K1.value != K2.value)
        return kn_infer_error(c, KILN_ERR_SHAPE, "inner dimensions differ: %lld vs %lld (after the transpose attributes)",
                              (long long)K1.value, (long long)K2.value);
    int nb = ra > rb ? ra - 2 : rb - 2;
    if (nb + 2 > KILN_MAX_RANK) return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "rank too large");
    kn_dim y[KILN_MAX_RANK];
    for (int k = 0; k < nb; k++) {
        int ia = k - (nb - (ra - 2)), ib = k - (nb - (rb - 2));
        kn_dim da = ia >= 0 ? a[ia] : dim_v(1), db = ib >= 0 ? b[ib] : dim_v(1);
        if (da.value >= 0 && db.value >= 0 && da.value != db.value && da.value != 1 && db.value != 1)
            return kn_infer_error(c, KILN_ERR_SHAPE, "batch dimensions %lld and %lld do not broadcast",
                                  (long long)da.value, (long long)db.value);
        y[k] = da.value == 1 ? db : db.value == 1 ? da : (da.value >= 0 ? da : db);
    }
    int r = nb;
    if (!a1) y[r++] = a[ra - 2];
    if (!b1) y[r++] = b[rb - 1];
    set_out(c, 0, A->dtype, r, y);
    return KILN_OK;
}

/* ------------------------------------------------------------------ RotaryEmbedding (contrib) */

static kiln_status infer_rotary(kn_infer_ctx *c) {
    KN_TRY(need(c, 0, "input"));
    KN_TRY(need(c, 1, "position_ids"));
    KN_TRY(need(c, 2, "cos_cache"));
    KN_TRY(need(c, 3, "sin_cache"));
    const kn_type *x = c->in[0];
    if (x->rank >= 0 && x->rank != 3 && x->rank != 4)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input must be 3-D or 4-D, got rank %d", x->rank);
    if (kn_attr_int(c->node, "is_packed_batching", 0))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "is_packed_batching=1 is not supported");
    return kn_infer_same(c, 0, 0);
}

/* ------------------------------------------------------------------ Attention (contrib) */

static kiln_status infer_ms_attention(kn_infer_ctx *c) {
    KN_TRY(need(c, 0, "input"));
    KN_TRY(need(c, 1, "weights"));
    const kn_type *x = c->in[0], *w = c->in[1], *past = in_type(c, 4);
    int64_t N = kn_attr_int(c->node, "num_heads", 0);
    if (N <= 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "num_heads must be positive, got %lld", (long long)N);
    if (kn_attr_int(c->node, "do_rotary", 0))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "do_rotary=1 is not supported");
    if (kn_attr_int(c->node, "past_present_share_buffer", 0))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "past_present_share_buffer=1 is not supported");
    if (!float_type(x->dtype))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "input type %s is not a float type", kiln_dtype_name(x->dtype));
    if (x->rank >= 0 && x->rank != 3) return kn_infer_error(c, KILN_ERR_SHAPE, "input must be 3-D, got rank %d", x->rank);
    if (w->rank >= 0 && w->rank != 2) return kn_infer_error(c, KILN_ERR_SHAPE, "weights must be 2-D, got rank %d", w->rank);
    int cnt = 0;
    const int64_t *hs = kn_attr_ints(c->node, "qkv_hidden_sizes", &cnt);
    kn_dim W = dim_of(w, 1), Dq, Dv;
    if (cnt) {
        if (cnt != 3 || hs[0] != hs[1] || hs[0] <= 0 || hs[2] <= 0 || hs[0] % N || hs[2] % N)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "qkv_hidden_sizes must be 3 positive multiples of num_heads "
                                  "with equal Q and K sizes");
        if (W.value >= 0 && W.value != hs[0] + hs[1] + hs[2])
            return kn_infer_error(c, KILN_ERR_SHAPE, "weights have %lld columns but qkv_hidden_sizes sum to %lld",
                                  (long long)W.value, (long long)(hs[0] + hs[1] + hs[2]));
        Dq = dim_v(hs[0]);
        Dv = dim_v(hs[2]);
    } else {
        if (W.value >= 0 && (W.value % 3 || (W.value / 3) % N))
            return kn_infer_error(c, KILN_ERR_SHAPE, "weights have %lld columns: not 3 x a multiple of num_heads %lld",
                                  (long long)W.value, (long long)N);
        Dq = dim_div(W, 3);
        Dv = Dq;
    }
    if (x->rank == 3 && w->rank == 2 && x->dims[2].value >= 0 && w->dims[0].value >= 0 &&
        x->dims[2].value != w->dims[0].value)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input hidden size %lld but weights have %lld rows",
                              (long long)x->dims[2].value, (long long)w->dims[0].value);
    kn_dim y[3] = {dim_of(x, 0), dim_of(x, 1), Dv};
    set_out(c, 0, x->dtype, 3, y);
    if (c->n_outputs > 1) {
        kn_dim P = past ? dim_of(past, 3) : dim_v(0);
        if (past && past->rank >= 0 && past->rank != 5)
            return kn_infer_error(c, KILN_ERR_SHAPE, "past must be 5-D (2, B, N, P, H), got rank %d", past->rank);
        kn_dim pr[5] = {dim_v(2), dim_of(x, 0), dim_v(N), dim_add(P, dim_of(x, 1)), dim_div(Dq, N)};
        set_out(c, 1, x->dtype, 5, pr);
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ MultiHeadAttention */

static kiln_status infer_mha(kn_infer_ctx *c) {
    KN_TRY(need(c, 0, "query"));
    const kn_type *q = c->in[0], *k = in_type(c, 1), *v = in_type(c, 2), *pk = in_type(c, 6);
    int64_t N = kn_attr_int(c->node, "num_heads", 0);
    if (N <= 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "num_heads must be positive, got %lld", (long long)N);
    if (!float_type(q->dtype))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "query type %s is not a float type", kiln_dtype_name(q->dtype));
    if (in_type(c, 9)) return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "cache_indirection is not supported");
    if (q->rank < 0) {
        for (int o = 0; o < c->n_outputs && o < 4; o++) set_out(c, o, q->dtype, -1, NULL);
        return KILN_OK;
    }
    kn_dim B = dim_of(q, 0), S = dim_of(q, 1), Dq = dim_v(-1), L, Hk, Hv;
    if (q->rank == 5) {
        /* packed QKV (B, S, N, 3, H) */
        if (k || v) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "packed QKV query takes no key or value");
        Hk = dim_of(q, 4);
        Hv = Hk;
        L = S;
    } else if (q->rank == 3) {
        Dq = dim_of(q, 2);
        if (!k) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "key is required unless query is packed QKV");
        if (k->rank == 5) {
            if (v) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "packed KV key takes no value");
            L = dim_of(k, 1);
            Hk = dim_of(k, 4);
            Hv = Hk;
        } else if (k->rank == 3 || k->rank == 4) {
            if (!v) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "value is required with a 3-D or 4-D key");
            if (v->rank >= 0 && v->rank != k->rank)
                return kn_infer_error(c, KILN_ERR_SHAPE, "key and value ranks differ (%d and %d)", k->rank, v->rank);
            if (k->rank == 3) {
                L = dim_of(k, 1);
                Hk = dim_div(dim_of(k, 2), N);
                Hv = dim_div(dim_of(v, 2), N);
            } else {
                L = dim_of(k, 2);
                Hk = dim_of(k, 3);
                Hv = dim_of(v, 3);
            }
        } else if (k->rank >= 0) {
            return kn_infer_error(c, KILN_ERR_SHAPE, "key must be 3-D, 4-D or 5-D (packed KV), got rank %d", k->rank);
        } else {
            L = Hk = Hv = dim_v(-1);
        }
        if (Dq.value >= 0 && Dq.value % N)
            return kn_infer_error(c, KILN_ERR_SHAPE, "query hidden size %lld is not a multiple of num_heads %lld",
                                  (long long)Dq.value, (long long)N);
    } else {
        return kn_infer_error(c, KILN_ERR_SHAPE, "query must be 3-D or packed QKV 5-D, got rank %d", q->rank);
    }
    kn_dim T = L;
    if (pk) {
        if (pk->rank >= 0 && pk->rank != 4)
            return kn_infer_error(c, KILN_ERR_SHAPE, "past_key must be 4-D, got rank %d", pk->rank);
        T = dim_add(dim_of(pk, 2), L);
    }
    kn_dim y[3] = {B, S, dim_mul(Hv, N)};
    set_out(c, 0, q->dtype, 3, y);
    kn_dim pkd[4] = {B, dim_v(N), T, Hk}, pvd[4] = {B, dim_v(N), T, Hv}, qk[4] = {B, dim_v(N), S, T};
    set_out(c, 1, q->dtype, 4, pkd);
    set_out(c, 2, q->dtype, 4, pvd);
    set_out(c, 3, q->dtype, 4, qk);
    return KILN_OK;
}

/* ------------------------------------------------------------------ GroupQueryAttention */

static kiln_status infer_gqa(kn_infer_ctx *c) {
    KN_TRY(need(c, 0, "query"));
    const kn_type *q = c->in[0], *k = in_type(c, 1), *pk = in_type(c, 3);
    int64_t N = kn_attr_int(c->node, "num_heads", 0), KV = kn_attr_int(c->node, "kv_num_heads", 0);
    if (N <= 0 || KV <= 0 || N % KV)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "num_heads (%lld) must be a positive multiple of kv_num_heads "
                              "(%lld)", (long long)N, (long long)KV);
    if (!float_type(q->dtype))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "query type %s is not a float type", kiln_dtype_name(q->dtype));
    if (q->rank >= 0 && q->rank != 3)
        return kn_infer_error(c, KILN_ERR_SHAPE, "query must be 3-D (batch, sequence, hidden), got rank %d", q->rank);
    if (pk && pk->rank >= 0 && pk->rank != 4)
        return kn_infer_error(c, KILN_ERR_SHAPE, "past_key must be 4-D, got rank %d", pk->rank);
    /* head size: hidden / num_heads, or hidden / (num_heads + 2 kv_num_heads) for packed QKV */
    kn_dim H = dim_div(dim_of(q, 2), k ? N : N + 2 * KV);
    kn_dim y[3] = {dim_of(q, 0), dim_of(q, 1), dim_mul(H, N)};
    set_out(c, 0, q->dtype, 3, y);
    /* the present length, max(past buffer, total_sequence_length), is known at run time */
    kn_dim pd[4] = {dim_of(q, 0), dim_v(KV), dim_v(-1), H};
    set_out(c, 1, q->dtype, 4, pd);
    set_out(c, 2, q->dtype, 4, pd);
    if (c->n_outputs > 3) set_out(c, 3, q->dtype, -1, NULL);
    return KILN_OK;
}

#define MS "com.microsoft"

const kn_op_schema kn_ops_contrib[] = {
    {MS, "Gelu", 1, 0, 1, 1, 1, 1, infer_unary, 0},
    {MS, "QuickGelu", 1, 0, 1, 1, 1, 1, infer_unary, 0},
    {MS, "FastGelu", 1, 0, 1, 2, 1, 1, infer_bias_act, 0},
    {MS, "BiasGelu", 1, 0, 2, 2, 1, 1, infer_bias_act, 0},
    {MS, "BiasAdd", 1, 0, 3, 3, 1, 1, infer_bias_act, 0},
    {MS, "BiasSplitGelu", 1, 0, 2, 2, 1, 1, infer_bias_split_gelu, 0},
    {MS, "SkipLayerNormalization", 1, 0, 3, 5, 1, 4, infer_skip_norm, 0},
    {MS, "SkipSimplifiedLayerNormalization", 1, 0, 3, 4, 1, 4, infer_skip_norm, 0},
    {MS, "EmbedLayerNormalization", 1, 0, 7, 9, 1, 3, infer_embed_norm, 0},
    {"", "LayerNormalization", 1, 16, 2, 3, 1, 3, infer_norm, 0},
    {"", "SimplifiedLayerNormalization", 1, 0, 2, 2, 1, 2, infer_norm, 0},
    {MS, "FusedMatMul", 1, 0, 2, 2, 1, 1, infer_fused_matmul, 0},
    {MS, "RotaryEmbedding", 1, 0, 4, 4, 1, 1, infer_rotary, 0},
    {MS, "Attention", 1, 0, 2, 7, 1, 2, infer_ms_attention, 0},
    {MS, "MultiHeadAttention", 1, 0, 1, 10, 1, 4, infer_mha, 0},
    {MS, "GroupQueryAttention", 1, 0, 7, 12, 1, 4, infer_gqa, 0},
    {0},
};

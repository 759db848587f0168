/* CUDA kernels of the attention family: ai.onnx Attention (23-25), RotaryEmbedding, SwiGLU,
 * LinearAttention, CausalConvWithState and ai.onnx.preview FlexAttention (without modifier
 * subgraphs). The semantics are the CPU kernels' (src/backend/cpu/attention*.c).
 *
 * Attention is two batched cuBLASLt products around one score-row kernel (cu_attention.cu):
 *   S = Q K^T per (batch, kv head), the group of query heads sharing that kv head stacked as the
 *   rows (so grouped-query attention needs no copy of K or V); the row kernel applies softcap,
 *   masks and the softmax in place; Y = P V. Q, K, V are read in place when they are 4-D of the
 *   product's type; otherwise (3-D layout, a past to prepend, double, or the reference's
 *   pre-scaling of half-precision Q and K) they are first packed into [B, H, S, D]. Float16 and
 *   bfloat16 products run in that type with float accumulation, the scores stored in it: the
 *   roundings the ONNX reference makes when it computes in that type, which the row kernel
 *   continues step by step. The scores of many heads are processed in chunks of at most
 *   SCORE_CHUNK_BYTES. */
#include "backend/cuda/cuda_backend.h"
#include "ops/attention.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SCORE_CHUNK_BYTES ((size_t)256 << 20)

static bool is_half(kiln_dtype t) { return t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16; }
static bool is_float_type(kiln_dtype t) { return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_DOUBLE || is_half(t); }

static float round_host(kiln_dtype t, float x) {
    if (t == KILN_DTYPE_FLOAT16) return kn_f16_to_f32(kn_f32_to_f16(x));
    if (t == KILN_DTYPE_BFLOAT16) return kn_bf16_to_f32(kn_f32_to_bf16(x));
    return x;
}

static const kn_tensor *opt_in(const kn_kernel_ctx *c, int i) { return i < c->n_inputs ? c->in[i] : NULL; }

/* Output i with this type and shape, or NULL when the node omits it. */
static kiln_status opt_out(kn_cuda *cu, kn_kernel_ctx *c, int i, kiln_dtype dt, int rank, const int64_t *dims,
                           kn_tensor **t) {
    *t = NULL;
    if (i >= c->n_outputs || i >= c->node->n_outputs || c->node->outputs[i] < 0) return KILN_OK;
    return kn_cu_output(cu, c, i, dt, rank, dims, t);
}

/* Scratch blocks of one kernel call, returned together. */
typedef struct scratch_list {
    void *p[8];
    size_t n[8];
    int count;
} scratch_list;

static kiln_status scratch_get(kn_cuda *cu, const kn_kernel_ctx *c, scratch_list *l, size_t bytes, void **out) {
    if (l->count == 8) return kn_kernel_error(c, KILN_ERR_INTERNAL, "too many scratch buffers (at %s:%d)", __FILE__, __LINE__);
    if (bytes == 0) bytes = 1;
    KN_TRY(kn_cu_scratch(cu, bytes, out));
    l->p[l->count] = *out;
    l->n[l->count++] = bytes;
    return KILN_OK;
}

static void scratch_release(kn_cuda *cu, scratch_list *l) {
    for (int i = l->count - 1; i >= 0; i--) kn_cu_scratch_free(cu, l->p[i], l->n[i]);
    l->count = 0;
}

static void *at(const void *p, int64_t elems, kiln_dtype t) {
    return (char *)p + (size_t)elems * kiln_dtype_size(t);
}

/* dst [B, H, Sp + S, D] (type `to`) = concat(past [B, H, Sp, D], cur) along the sequence, cur
 * [B, H, S, D] or (cur3) [B, S, H*D], each value times mult and rounded to round_to. */
static kiln_status pack_4d(kn_cuda *cu, const kn_kernel_ctx *c, kiln_dtype from, kiln_dtype to, const void *past,
                           int64_t Sp, const void *cur, bool cur3, int64_t S, int64_t B, int64_t H, int64_t D,
                           void *dst, float mult, kiln_dtype round_to) {
    const int64_t T = Sp + S;
    if (past && Sp > 0) {
        kn_cu_attn_copy_dims g = {{B, H, Sp, D}, {H * Sp * D, Sp * D, D, 1}, {H * T * D, T * D, D, 1}};
        KN_TRY(kn_cu_check(c, kn_cu_attn_copy(from, to, past, dst, &g, mult, round_to, cu->stream), "attention copy"));
    }
    kn_cu_attn_copy_dims g = {{B, H, S, D}, {0, 0, 0, 1}, {H * T * D, T * D, D, 1}};
    if (cur3) {
        g.src[0] = S * H * D, g.src[1] = D, g.src[2] = H * D;
    } else {
        g.src[0] = H * S * D, g.src[1] = S * D, g.src[2] = D;
    }
    return kn_cu_check(c, kn_cu_attn_copy(from, to, cur, at(dst, Sp * D, to), &g, mult, round_to, cu->stream),
                       "attention copy");
}

/* ------------------------------------------------------------------ the attention engine */

typedef struct attn_engine {
    kiln_dtype dt; /* Q, K, V (and past, present, Y) */
    kiln_dtype ct; /* type of the products and the scores: FLOAT, FLOAT16 or BFLOAT16 */
    int64_t B, Hq, Hkv, Sq, Sp, Skv, Dk, Dv;
    const void *q, *k, *v, *pk, *pv; /* pk/pv: past [B, Hkv, Sp, D] or NULL */
    bool q3, k3, v3;                 /* 3-D layout [B, S, H*D] */
    void *pko, *pvo;                 /* present outputs [B, Hkv, Sp+Skv, D] or NULL */
    bool prescale;                   /* Q and K times qk_mult, rounded to qk_round, before the product */
    float qk_mult;
    kiln_dtype qk_round;
    float alpha; /* multiplies Q K^T */
    void *y;
    bool y3;
    kn_cu_attn_rows rows; /* masks, softcap, rounding, qk copy; the engine sets the sizes */
} attn_engine;

static kiln_status run_engine(kn_cuda *cu, kn_kernel_ctx *c, attn_engine *e) {
    const int64_t B = e->B, Hq = e->Hq, Hkv = e->Hkv, Sq = e->Sq, T = e->Sp + e->Skv, Dk = e->Dk, Dv = e->Dv;
    const int64_t G = Hq / Hkv;
    const kiln_dtype dt = e->dt, ct = e->ct;
    const size_t es = kiln_dtype_size(ct);
    scratch_list sl = {0};
    kiln_status st = KILN_OK;
    const void *kg = NULL, *vg = NULL, *qg = NULL;
    void *y4 = NULL, *tmp = NULL, *S = NULL;

    /* present key/value */
    if (e->pko)
        st = pack_4d(cu, c, dt, dt, e->pk, e->Sp, e->k, e->k3, e->Skv, B, Hkv, Dk, e->pko, 1.0f, KILN_DTYPE_UNDEFINED);
    if (st == KILN_OK && e->pvo)
        st = pack_4d(cu, c, dt, dt, e->pv, e->Sp, e->v, e->v3, e->Skv, B, Hkv, Dv, e->pvo, 1.0f, KILN_DTYPE_UNDEFINED);
    if (st != KILN_OK || B == 0 || Hq == 0 || Sq == 0 || Dv == 0) goto done;

    /* the product operands, [B, H, S, D] of type ct */
    const bool same = ct == dt;
    if (same && !e->prescale && e->pko) kg = e->pko;
    else if (same && !e->prescale && !e->pk && !e->k3) kg = e->k;
    else {
        if ((st = scratch_get(cu, c, &sl, (size_t)(B * Hkv * T * Dk) * es, &tmp)) != KILN_OK) goto done;
        st = pack_4d(cu, c, dt, ct, e->pk, e->Sp, e->k, e->k3, e->Skv, B, Hkv, Dk, tmp, e->prescale ? e->qk_mult : 1.0f,
                     e->prescale ? e->qk_round : KILN_DTYPE_UNDEFINED);
        if (st != KILN_OK) goto done;
        kg = tmp;
    }
    if (same && e->pvo) vg = e->pvo;
    else if (same && !e->pv && !e->v3) vg = e->v;
    else {
        if ((st = scratch_get(cu, c, &sl, (size_t)(B * Hkv * T * Dv) * es, &tmp)) != KILN_OK) goto done;
        st = pack_4d(cu, c, dt, ct, e->pv, e->Sp, e->v, e->v3, e->Skv, B, Hkv, Dv, tmp, 1.0f, KILN_DTYPE_UNDEFINED);
        if (st != KILN_OK) goto done;
        vg = tmp;
    }
    if (same && !e->prescale && !e->q3) qg = e->q;
    else {
        if ((st = scratch_get(cu, c, &sl, (size_t)(B * Hq * Sq * Dk) * es, &tmp)) != KILN_OK) goto done;
        st = pack_4d(cu, c, dt, ct, NULL, 0, e->q, e->q3, Sq, B, Hq, Dk, tmp, e->prescale ? e->qk_mult : 1.0f,
                     e->prescale ? e->qk_round : KILN_DTYPE_UNDEFINED);
        if (st != KILN_OK) goto done;
        qg = tmp;
    }
    if (same && !e->y3) y4 = e->y;
    else if ((st = scratch_get(cu, c, &sl, (size_t)(B * Hq * Sq * Dv) * es, &y4)) != KILN_OK) goto done;

    /* per (batch, kv head): its G query heads' rows against its keys, in chunks */
    const int64_t groups = B * Hkv, grows = G * Sq;
    const size_t gbytes = (size_t)(grows * (T > 0 ? T : 1)) * es;
    int64_t per = (int64_t)(SCORE_CHUNK_BYTES / (gbytes ? gbytes : 1));
    if (per < 1) per = 1;
    if (per > groups) per = groups;
    if ((st = scratch_get(cu, c, &sl, (size_t)per * gbytes, &S)) != KILN_OK) goto done;
    kn_cu_attn_rows rp = e->rows;
    rp.batch = B, rp.q_heads = Hq, rp.sq = Sq, rp.skv = T;
    for (int64_t g0 = 0; g0 < groups && st == KILN_OK; g0 += per) {
        const int64_t n = groups - g0 < per ? groups - g0 : per;
        kn_cu_gemm g1 = {.dt = ct, .M = grows, .N = T, .K = Dk, .batch = n, .ta = false, .tb = true,
                         .A = at(qg, g0 * grows * Dk, ct), .B = at(kg, g0 * T * Dk, ct), .C = S,
                         .lda = Dk, .ldb = Dk, .ldc = T, .sa = grows * Dk, .sb = T * Dk, .sc = grows * T,
                         .alpha = e->alpha, .beta = 0.0f};
        st = kn_cu_gemm_run(cu, c, &g1);
        if (st != KILN_OK) break;
        rp.row0 = g0 * grows;
        rp.rows = n * grows;
        st = kn_cu_check(c, kn_cu_attn_rows_run(ct, S, &rp, cu->stream), "attention softmax");
        if (st != KILN_OK) break;
        kn_cu_gemm g2 = {.dt = ct, .M = grows, .N = Dv, .K = T, .batch = n, .ta = false, .tb = false,
                         .A = S, .B = at(vg, g0 * T * Dv, ct), .C = at(y4, g0 * grows * Dv, ct),
                         .lda = T, .ldb = Dv, .ldc = Dv, .sa = grows * T, .sb = T * Dv, .sc = grows * Dv,
                         .alpha = 1.0f, .beta = 0.0f};
        st = kn_cu_gemm_run(cu, c, &g2);
    }
    if (st == KILN_OK && y4 != e->y) {
        kn_cu_attn_copy_dims g = {{B, Hq, Sq, Dv}, {Hq * Sq * Dv, Sq * Dv, Dv, 1}, {Hq * Sq * Dv, Sq * Dv, Dv, 1}};
        if (e->y3) g.dst[0] = Sq * Hq * Dv, g.dst[1] = Dv, g.dst[2] = Hq * Dv;
        st = kn_cu_check(c, kn_cu_attn_copy(ct, dt, y4, e->y, &g, 1.0f, KILN_DTYPE_UNDEFINED, cu->stream),
                         "attention output");
    }
done:
    scratch_release(cu, &sl);
    return st;
}

/* Broadcast strides of a tensor of rank <= 4 right-aligned against target: false when a
 * dimension is neither 1 nor the target's. */
static bool bcast_strides(const int64_t *dims, int rank, const int64_t target[4], int64_t st[4]) {
    if (rank > 4) return false;
    int64_t acc = 1;
    for (int d = 3; d >= 0; d--) {
        int td = d - (4 - rank);
        int64_t v = td >= 0 ? dims[td] : 1;
        if (v != 1 && v != target[d]) return false;
        st[d] = v == 1 ? 0 : acc;
        acc *= v;
    }
    return true;
}

/* ------------------------------------------------------------------ Attention */

static kiln_status run_attention(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *Q = c->in[0], *K = c->in[1], *V = c->in[2];
    const kn_tensor *M = opt_in(c, 3), *PK = opt_in(c, 4), *PV = opt_in(c, 5), *NP = opt_in(c, 6);
    const int rank = Q->rank;
    if ((rank != 3 && rank != 4) || K->rank != rank || V->rank != rank)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "Q, K and V must all be 3-D or all 4-D");
    if ((PK == NULL) != (PV == NULL))
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "past_key and past_value must be given together");
    if (PK && NP)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "nonpad_kv_seqlen cannot be combined with past_key/past_value");
    kn_attn_attrs local_at;
    const kn_attn_attrs *at;
    KN_TRY(kn_ctx_params(c, kn_attn_attrs_prepare, &local_at, (const void **)&at));
    const int64_t B = Q->dims[0];
    int64_t Hq, Hkv, Sq, Skv, Dk, Dv;
    if (rank == 3) {
        Hq = at->q_heads;
        Hkv = at->kv_heads;
        if (Hq <= 0 || Hkv <= 0)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "3-D inputs need q_num_heads and kv_num_heads");
        Sq = Q->dims[1];
        Skv = K->dims[1];
        Dk = Q->dims[2] / Hq;
        Dv = V->dims[2] / Hkv;
        if (Q->dims[2] != Hq * Dk || K->dims[2] != Hkv * Dk || V->dims[2] != Hkv * Dv || V->dims[1] != Skv)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "K and V do not fit Q and the head counts");
    } else {
        Hq = Q->dims[1], Sq = Q->dims[2], Dk = Q->dims[3];
        Hkv = K->dims[1], Skv = K->dims[2], Dv = V->dims[3];
        if (K->dims[3] != Dk || V->dims[1] != Hkv || V->dims[2] != Skv)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "K and V do not fit Q");
    }
    if (K->dims[0] != B || V->dims[0] != B) return kn_kernel_error(c, KILN_ERR_SHAPE, "Q, K and V batch sizes differ");
    if (Hkv <= 0 || Hq % Hkv)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "%lld query heads are not a multiple of %lld key/value heads",
                               (long long)Hq, (long long)Hkv);
    const int64_t Sp = PK ? PK->dims[2] : 0, T = Sp + Skv;
    if (PK && (PK->rank != 4 || PV->rank != 4 || PK->dims[0] != B || PK->dims[1] != Hkv || PK->dims[3] != Dk ||
               PV->dims[0] != B || PV->dims[1] != Hkv || PV->dims[2] != Sp || PV->dims[3] != Dv))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "past_key/past_value do not fit K and V");
    const kiln_dtype dt = Q->dtype;
    if (!is_float_type(dt) || K->dtype != dt || V->dtype != dt || (PK && (PK->dtype != dt || PV->dtype != dt)))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "Q, K, V and the past tensors must share one float type");

    attn_engine e;
    memset(&e, 0, sizeof e);
    e.dt = dt;
    e.ct = is_half(dt) ? dt : KILN_DTYPE_FLOAT;
    e.B = B, e.Hq = Hq, e.Hkv = Hkv, e.Sq = Sq, e.Sp = Sp, e.Skv = Skv, e.Dk = Dk, e.Dv = Dv;
    e.q = Q->data, e.k = K->data, e.v = V->data;
    e.pk = PK ? PK->data : NULL, e.pv = PV ? PV->data : NULL;
    e.q3 = e.k3 = e.v3 = e.y3 = rank == 3;

    kn_tensor *Y, *PKo, *PVo, *QKo;
    int64_t yd[4] = {B, Hq, Sq, Dv}, pkd[4] = {B, Hkv, T, Dk}, pvd[4] = {B, Hkv, T, Dv}, qkd[4] = {B, Hq, Sq, T};
    if (rank == 3) yd[1] = Sq, yd[2] = Hq * Dv;
    KN_TRY(opt_out(cu, c, 0, dt, rank, yd, &Y));
    if (!Y) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "output Y is required");
    KN_TRY(opt_out(cu, c, 1, dt, 4, pkd, &PKo));
    KN_TRY(opt_out(cu, c, 2, dt, 4, pvd, &PVo));
    KN_TRY(opt_out(cu, c, 3, dt, 4, qkd, &QKo));
    e.y = Y->data;
    e.pko = PKo ? PKo->data : NULL;
    e.pvo = PVo ? PVo->data : NULL;

    /* scale: 1/sqrt(head size) unless given. For half-precision computations the reference scales
     * Q and K by sqrt(scale) in that type before the product. */
    const double scale = at->has_scale ? (double)at->scale_raw : 1.0 / sqrt((double)Dk);
    const int64_t smp = at->softmax_precision;
    const kiln_dtype round_to = is_half(dt) ? dt : KILN_DTYPE_FLOAT;
    e.prescale = is_half(dt) || is_half((kiln_dtype)smp);
    e.qk_mult = round_host(round_to, (float)sqrt(scale));
    e.qk_round = round_to;
    e.alpha = e.prescale ? 1.0f : (float)scale;

    kn_cu_attn_rows *r = &e.rows;
    r->mask_cols = -1;
    r->past = Sp;
    r->kv_end = NP ? NP->data : NULL;
    r->causal = at->is_causal;
    r->left_window = at->left_window;
    r->right_window = at->right_window;
    if (r->left_window < -1 || r->right_window < -1)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "left_window_size and right_window_size must be -1 or >= 0");
    r->softcap = at->softcap;
    r->round_to = round_to;
    r->softmax_to = smp ? (kiln_dtype)smp : KILN_DTYPE_UNDEFINED;
    r->probs_to = round_to;
    r->zero_masked_rows = 1;
    if (NP && (NP->dtype != KILN_DTYPE_INT64 || kn_tensor_count(NP) != B))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "nonpad_kv_seqlen must be int64 with one entry per batch (%lld)",
                               (long long)B);
    if (M) {
        const int64_t mc = M->rank >= 1 ? M->dims[M->rank - 1] : 1;
        const int64_t target[4] = {B, Hq, Sq, mc};
        int64_t s4[4];
        if (M->rank < 1 || mc > T || !bcast_strides(M->dims, M->rank, target, s4)) {
            char d[128];
            return kn_kernel_error(c, KILN_ERR_SHAPE, "attn_mask %s does not broadcast to [%lld, %lld, %lld, %lld]",
                                   kn_dims_str(M->dims, M->rank, d, sizeof d), (long long)B, (long long)Hq,
                                   (long long)Sq, (long long)T);
        }
        if (M->dtype != KILN_DTYPE_BOOL && !is_float_type(M->dtype))
            return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "attn_mask of type %s is not supported (bool or float types)",
                                   kiln_dtype_name(M->dtype));
        r->mask = M->data;
        r->mask_dt = M->dtype;
        r->m_sb = s4[0], r->m_sh = s4[1], r->m_si = s4[2], r->m_sj = s4[3];
        if (mc < T) r->mask_cols = mc;
    }
    if (QKo) {
        r->qk = QKo->data;
        r->qk_dt = dt;
        r->qk_mode = at->qk_mode;
        if (r->qk_mode < 0 || r->qk_mode > 3)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "qk_matmul_output_mode must be 0..3, got %d", r->qk_mode);
    }
    return run_engine(cu, c, &e);
}

static bool attention_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    kiln_dtype dt = in[0]->dtype;
    for (int i = 1; i < n_in && i < 6; i++) {
        if (!in[i] || i == 3) continue;
        if (in[i]->dtype != dt) {
            snprintf(why, cap, "input %d is %s but Q is %s (the CUDA kernel takes one float type)", i,
                     kiln_dtype_name(in[i]->dtype), kiln_dtype_name(dt));
            return false;
        }
    }
    if (n_in > 3 && in[3] && in[3]->dtype != KILN_DTYPE_BOOL && !is_float_type(in[3]->dtype)) {
        snprintf(why, cap, "attn_mask of type %s (bool or a float type)", kiln_dtype_name(in[3]->dtype));
        return false;
    }
    if (n_in > 6 && in[6] && in[6]->dtype != KILN_DTYPE_INT64) {
        snprintf(why, cap, "nonpad_kv_seqlen of type %s (int64)", kiln_dtype_name(in[6]->dtype));
        return false;
    }
    int64_t smp = kn_attr_int(n, "softmax_precision", 0);
    if (smp && !is_float_type((kiln_dtype)smp)) {
        snprintf(why, cap, "softmax_precision %lld is not a float type", (long long)smp);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ FlexAttention */

static bool flex_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    if (kn_node_attr(n, "score_mod") || kn_node_attr(n, "prob_mod")) {
        snprintf(why, cap, "score_mod/prob_mod subgraphs run on the CPU only");
        return false;
    }
    for (int i = 1; i < n_in; i++)
        if (in[i] && in[i]->dtype != in[0]->dtype) {
            snprintf(why, cap, "Q, K and V must share one float type");
            return false;
        }
    int64_t smp = kn_attr_int(n, "softmax_precision", 0);
    if (smp != 0 && smp != KILN_DTYPE_FLOAT && smp != KILN_DTYPE_DOUBLE) {
        snprintf(why, cap, "softmax_precision %lld (the CUDA kernel computes the softmax in float)", (long long)smp);
        return false;
    }
    return true;
}

/* scores = (Q*sqrt(scale)) (K*sqrt(scale))^T rounded to the input type, softmax in float, Y = P V
 * (the CPU computes in double; float here). */
static kiln_status run_flex(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *Q = c->in[0], *K = c->in[1], *V = c->in[2];
    kn_attn_attrs local_at;
    const kn_attn_attrs *at;
    KN_TRY(kn_ctx_params(c, kn_attn_attrs_prepare, &local_at, (const void **)&at));
    const kiln_dtype t = Q->dtype;
    if (at->score_mod || at->prob_mod)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "score_mod/prob_mod subgraphs are not run on CUDA");
    if (!is_float_type(t) || K->dtype != t || V->dtype != t)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "Q, K and V must share a float type");
    if (Q->rank != 4 || K->rank != 4 || V->rank != 4) return kn_kernel_error(c, KILN_ERR_SHAPE, "Q, K and V must be 4-D");
    const int64_t B = Q->dims[0], Hq = Q->dims[1], L = Q->dims[2], E = Q->dims[3];
    const int64_t Hkv = K->dims[1], S = K->dims[2], Ev = V->dims[3];
    if (K->dims[0] != B || V->dims[0] != B || K->dims[3] != E || V->dims[1] != Hkv || V->dims[2] != S || Hkv <= 0 ||
        Hq % Hkv)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "Q, K and V do not fit together");
    kn_tensor *Y;
    const int64_t yd[4] = {B, Hq, L, Ev};
    KN_TRY(opt_out(cu, c, 0, t, 4, yd, &Y));
    if (!Y) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "output Y is required");
    const double scale = at->has_scale ? (double)at->scale_raw : 1.0 / sqrt((double)E);
    attn_engine e;
    memset(&e, 0, sizeof e);
    e.dt = t;
    e.ct = KILN_DTYPE_FLOAT; /* probabilities stay in float, as the specification's softmax precision */
    e.B = B, e.Hq = Hq, e.Hkv = Hkv, e.Sq = L, e.Sp = 0, e.Skv = S, e.Dk = E, e.Dv = Ev;
    e.q = Q->data, e.k = K->data, e.v = V->data;
    e.y = Y->data;
    e.prescale = true;
    e.qk_round = is_half(t) ? t : KILN_DTYPE_FLOAT;
    e.qk_mult = round_host(e.qk_round, (float)sqrt((double)(float)scale));
    e.alpha = 1.0f;
    e.rows.mask_cols = -1;
    e.rows.left_window = e.rows.right_window = -1;
    e.rows.round_to = e.qk_round;
    e.rows.softmax_to = KILN_DTYPE_FLOAT;
    e.rows.probs_to = KILN_DTYPE_FLOAT;
    return run_engine(cu, c, &e);
}

/* ------------------------------------------------------------------ RotaryEmbedding */

static kiln_status run_rotary(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0], *C = c->in[1], *Sn = c->in[2], *P = opt_in(c, 3);
    if (!is_float_type(X->dtype) || C->dtype != X->dtype || Sn->dtype != X->dtype)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "X, cos_cache and sin_cache must share a float type");
    kn_attn_attrs local_at;
    const kn_attn_attrs *at;
    KN_TRY(kn_ctx_params(c, kn_attn_attrs_prepare, &local_at, (const void **)&at));
    kn_cu_rotary p;
    memset(&p, 0, sizeof p);
    p.rank3 = X->rank == 3;
    if (X->rank == 3) {
        p.heads = at->num_heads;
        if (p.heads <= 0 || X->dims[2] % p.heads)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "hidden size %lld is not a multiple of num_heads %lld",
                                   (long long)X->dims[2], (long long)p.heads);
        p.seq = X->dims[1];
        p.head = X->dims[2] / p.heads;
    } else if (X->rank == 4) {
        p.heads = X->dims[1], p.seq = X->dims[2], p.head = X->dims[3];
    } else {
        return kn_kernel_error(c, KILN_ERR_SHAPE, "X must be 3-D or 4-D");
    }
    p.batch = X->dims[0];
    p.rot_dim = at->rotary_dim;
    if (p.rot_dim == 0) p.rot_dim = p.head;
    if (p.rot_dim < 0 || p.rot_dim > p.head || p.rot_dim % 2)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "rotary_embedding_dim %lld must be even and at most the head "
                               "size %lld", (long long)p.rot_dim, (long long)p.head);
    p.interleaved = at->interleaved;
    const int64_t half = p.rot_dim / 2;
    if (P) {
        if (P->dtype != KILN_DTYPE_INT64 || P->rank != 2 || P->dims[0] != p.batch || P->dims[1] != p.seq)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "position_ids must be int64 [%lld, %lld]", (long long)p.batch,
                                   (long long)p.seq);
        if (C->rank != 2 || Sn->rank != 2 || C->dims[1] != half || Sn->dims[1] != half || Sn->dims[0] != C->dims[0])
            return kn_kernel_error(c, KILN_ERR_SHAPE, "cos_cache/sin_cache must be [max_position, %lld]", (long long)half);
        p.max_pos = C->dims[0];
    } else if (C->rank != 3 || Sn->rank != 3 || C->dims[0] != p.batch || C->dims[1] != p.seq || C->dims[2] != half ||
               memcmp(C->dims, Sn->dims, sizeof(int64_t) * 3)) {
        return kn_kernel_error(c, KILN_ERR_SHAPE, "without position_ids, cos_cache/sin_cache must be [%lld, %lld, %lld]",
                               (long long)p.batch, (long long)p.seq, (long long)half);
    }
    kn_tensor *Y;
    KN_TRY(opt_out(cu, c, 0, X->dtype, X->rank, X->dims, &Y));
    if (!Y) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "output Y is required");
    return kn_cu_check(c, kn_cu_rotary_run(X->dtype, X->data, C->data, Sn->data, P ? P->data : NULL, Y->data, &p,
                                           P ? kn_cu_err_at(cu, c) : (kn_cu_errp){NULL, NULL, 0}, cu->stream),
                       "RotaryEmbedding");
}

static bool rotary_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n;
    for (int i = 1; i < 3 && i < n_in; i++)
        if (in[i] && in[i]->dtype != in[0]->dtype) {
            snprintf(why, cap, "cos_cache/sin_cache must have X's type");
            return false;
        }
    if (n_in > 3 && in[3] && in[3]->dtype != KILN_DTYPE_INT64) {
        snprintf(why, cap, "position_ids of type %s (int64)", kiln_dtype_name(in[3]->dtype));
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ SwiGLU */

static kiln_status run_swiglu(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *A = c->in[0], *Bt = c->in[1];
    if (!is_float_type(A->dtype) || Bt->dtype != A->dtype)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "A and B must share a float type");
    const int64_t n = kn_tensor_count(A);
    if (kn_tensor_count(Bt) != n) return kn_kernel_error(c, KILN_ERR_SHAPE, "A and B must have the same shape");
    kn_tensor *Y;
    KN_TRY(opt_out(cu, c, 0, A->dtype, A->rank, A->dims, &Y));
    if (!Y) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "output Y is required");
    kn_attn_attrs local_at;
    const kn_attn_attrs *at;
    KN_TRY(kn_ctx_params(c, kn_attn_attrs_prepare, &local_at, (const void **)&at));
    return kn_cu_check(c, kn_cu_swiglu(A->dtype, A->data, Bt->data, Y->data, n, at->alpha, cu->stream),
                       "SwiGLU");
}

static bool same_types_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    for (int i = 1; i < n_in; i++)
        if (in[i] && in[i]->dtype != in[0]->dtype) {
            snprintf(why, cap, "input %d is %s, input 0 %s (%s takes one float type)", i, kiln_dtype_name(in[i]->dtype),
                     kiln_dtype_name(in[0]->dtype), n->op_type);
            return false;
        }
    return true;
}

/* ------------------------------------------------------------------ CausalConvWithState */

static kiln_status run_causal_conv(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0], *W = c->in[1], *Bi = opt_in(c, 2), *Ps = opt_in(c, 3);
    const kiln_dtype t = X->dtype;
    if (!is_float_type(t) || W->dtype != t || (Bi && Bi->dtype != t) || (Ps && Ps->dtype != t))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "all inputs must share one float type");
    if (X->rank != 3 || W->rank != 3) return kn_kernel_error(c, KILN_ERR_SHAPE, "input and weight must be 3-D");
    const int64_t B = X->dims[0], C = X->dims[1], L = X->dims[2], k = W->dims[2], P = k - 1;
    if (W->dims[0] != C || W->dims[1] != 1 || k < 1)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "weight must be [%lld, 1, k] with k >= 1", (long long)C);
    if (Bi && (Bi->rank != 1 || Bi->dims[0] != C))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "bias must be [%lld]", (long long)C);
    if (Ps && (Ps->rank != 3 || Ps->dims[0] != B || Ps->dims[1] != C || Ps->dims[2] != P))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "past_state must be [%lld, %lld, %lld]", (long long)B, (long long)C,
                               (long long)P);
    kn_attn_attrs local_at;
    const kn_attn_attrs *at;
    KN_TRY(kn_ctx_params(c, kn_attn_attrs_prepare, &local_at, (const void **)&at));
    const char *act = at->activation;
    const bool silu = !strcmp(act, "silu") || !strcmp(act, "swish");
    if (!silu && strcmp(act, "none"))
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "activation '%s' is not none, silu or swish", act);
    kn_tensor *Y, *St;
    const int64_t sd[3] = {B, C, P};
    KN_TRY(opt_out(cu, c, 0, t, 3, X->dims, &Y));
    if (!Y) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "output is required");
    KN_TRY(opt_out(cu, c, 1, t, 3, sd, &St));
    return kn_cu_check(c, kn_cu_causal_conv_state(t, X->data, W->data, Bi ? Bi->data : NULL, Ps ? Ps->data : NULL,
                                                  Y->data, St ? St->data : NULL, B, C, L, k, silu, cu->stream),
                       "CausalConvWithState");
}

/* ------------------------------------------------------------------ LinearAttention */

static kiln_status run_linear_attention(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *Q = c->in[0], *K = c->in[1], *V = c->in[2], *Ps = opt_in(c, 3), *D = opt_in(c, 4),
                    *Bt = opt_in(c, 5);
    kn_attn_attrs local_at;
    const kn_attn_attrs *at;
    KN_TRY(kn_ctx_params(c, kn_attn_attrs_prepare, &local_at, (const void **)&at));
    kn_cu_linear_attn p;
    memset(&p, 0, sizeof p);
    p.q_heads = at->q_heads;
    p.kv_heads = at->kv_heads;
    if (p.q_heads <= 0 || p.kv_heads <= 0 || p.q_heads % p.kv_heads)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "q_num_heads must be a positive multiple of kv_num_heads");
    if (Q->rank != 3 || K->rank != 3 || V->rank != 3)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "query, key and value must be 3-D");
    const kiln_dtype t = Q->dtype;
    if (!is_float_type(t) || K->dtype != t || V->dtype != t || (D && D->dtype != t) || (Bt && Bt->dtype != t) ||
        (Ps && !is_float_type(Ps->dtype)))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "query, key, value, decay and beta must share a float type");
    p.batch = Q->dims[0];
    p.seq = Q->dims[1];
    p.dk = Q->dims[2] / p.q_heads;
    p.dv = V->dims[2] / p.kv_heads;
    if (K->dims[0] != p.batch || V->dims[0] != p.batch || K->dims[1] != p.seq || V->dims[1] != p.seq ||
        K->dims[2] != p.kv_heads * p.dk || Q->dims[2] != p.q_heads * p.dk || V->dims[2] != p.kv_heads * p.dv)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "query, key and value do not fit the head counts");
    if (p.dk > KN_CU_LINEAR_ATTN_MAX_DK)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "key head size %lld is above the CUDA kernel's %d",
                               (long long)p.dk, KN_CU_LINEAR_ATTN_MAX_DK);
    const char *rule = at->update_rule;
    const bool gating = !strcmp(rule, "gated") || !strcmp(rule, "gated_delta");
    const bool delta = !strcmp(rule, "delta") || !strcmp(rule, "gated_delta");
    if (gating != (D != NULL) || delta != (Bt != NULL))
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "update_rule '%s' does not fit the decay/beta inputs given", rule);
    if (D) {
        p.decay_last = D->rank == 3 ? D->dims[2] : -1;
        if (D->rank != 3 || D->dims[0] != p.batch || D->dims[1] != p.seq ||
            (p.decay_last != p.kv_heads && p.decay_last != p.kv_heads * p.dk))
            return kn_kernel_error(c, KILN_ERR_SHAPE, "decay must be [%lld, %lld, %lld or %lld]", (long long)p.batch,
                                   (long long)p.seq, (long long)p.kv_heads, (long long)(p.kv_heads * p.dk));
    }
    if (Bt) {
        p.beta_last = Bt->rank == 3 ? Bt->dims[2] : -1;
        if (Bt->rank != 3 || Bt->dims[0] != p.batch || Bt->dims[1] != p.seq ||
            (p.beta_last != p.kv_heads && p.beta_last != 1))
            return kn_kernel_error(c, KILN_ERR_SHAPE, "beta must be [%lld, %lld, %lld or 1]", (long long)p.batch,
                                   (long long)p.seq, (long long)p.kv_heads);
    }
    if (Ps && (Ps->rank != 4 || Ps->dims[0] != p.batch || Ps->dims[1] != p.kv_heads || Ps->dims[2] != p.dk ||
               Ps->dims[3] != p.dv))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "past_state must be [%lld, %lld, %lld, %lld]", (long long)p.batch,
                               (long long)p.kv_heads, (long long)p.dk, (long long)p.dv);
    const float sc = at->scale;
    p.scale = sc == 0.0f ? (float)(1.0 / sqrt((double)p.dk)) : sc;
    kn_tensor *O, *St;
    const int64_t od[3] = {p.batch, p.seq, p.q_heads * p.dv}, sd[4] = {p.batch, p.kv_heads, p.dk, p.dv};
    KN_TRY(opt_out(cu, c, 0, t, 3, od, &O));
    if (!O) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "output is required");
    KN_TRY(opt_out(cu, c, 1, Ps ? Ps->dtype : t, 4, sd, &St));
    p.past = Ps ? Ps->data : NULL;
    p.past_dt = Ps ? Ps->dtype : t;
    p.state = St ? St->data : NULL;
    p.state_dt = St ? St->dtype : t;
    p.out = O->data;
    p.out_dt = O->dtype;
    return kn_cu_check(c, kn_cu_linear_attn_run(t, Q->data, K->data, V->data, D ? D->data : NULL, Bt ? Bt->data : NULL,
                                                &p, cu->stream),
                       "LinearAttention");
}

static bool linear_attention_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    for (int i = 1; i < n_in; i++)
        if (in[i] && i != 3 && in[i]->dtype != in[0]->dtype) {
            snprintf(why, cap, "query, key, value, decay and beta must share one float type");
            return false;
        }
    if (n_in > 3 && in[3] && !is_float_type(in[3]->dtype)) {
        snprintf(why, cap, "past_state of type %s", kiln_dtype_name(in[3]->dtype));
        return false;
    }
    int64_t qh = kn_attr_int(n, "q_num_heads", 0);
    if (qh > 0 && in[0]->rank == 3 && in[0]->dims[2].value > 0 && in[0]->dims[2].value / qh > KN_CU_LINEAR_ATTN_MAX_DK) {
        snprintf(why, cap, "key head size %lld is above the CUDA kernel's %d", (long long)(in[0]->dims[2].value / qh),
                 KN_CU_LINEAR_ATTN_MAX_DK);
        return false;
    }
    return true;
}

const kn_cuda_kernel kn_cuda_attention[] = {
    {"", "Attention", run_attention, attention_supports, KN_T_FLOATS, 0, 0, KN_CU_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {"", "RotaryEmbedding", run_rotary, rotary_supports, KN_T_FLOATS, 0, 0, KN_CU_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {"", "SwiGLU", run_swiglu, same_types_supports, KN_T_FLOATS, 0, 0, KN_CU_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {"", "LinearAttention", run_linear_attention, linear_attention_supports, KN_T_FLOATS, 0, 0, KN_CU_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {"", "CausalConvWithState", run_causal_conv, same_types_supports, KN_T_FLOATS, 0, 0, KN_CU_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {"ai.onnx.preview", "FlexAttention", run_flex, flex_supports, KN_T_FLOATS, 0, 0, KN_CU_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {NULL, NULL, NULL, NULL, 0, 0, 0},
};

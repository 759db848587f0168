/* CUDA kernels of kiln's fused operators (domain "kiln", src/ops/fused.h): FusedConv, FusedGemm
 * and FusedMatMul run the linear part (cuDNN / cuBLASLt) into the output and then one epilogue
 * pass (bias, residual, activation); Gelu, LayerNormalization and RMSNormalization reuse the
 * ai.onnx kernels; Attention runs as one flash-attention kernel where it applies and was measured
 * faster, else as two batched products around a masked softmax, its operands read through their
 * views (fold_attention_views); FusedElementwise runs its program in one kernel (kn_cu_chain_run);
 * SqueezeExcite as a pool, a gate and a scale kernel (kn_cu_squeeze_excite). */
#include "backend/cuda/cuda_backend.h"

#include "ops/fused.h"
#include "ops/linalg_util.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

_Static_assert(KN_ACT_NONE == 0 && KN_ACT_RELU == 1 && KN_ACT_LEAKY_RELU == 2 && KN_ACT_CLIP == 3 &&
                   KN_ACT_SIGMOID == 4 && KN_ACT_TANH == 5 && KN_ACT_HARD_SIGMOID == 6 && KN_ACT_HARD_SWISH == 7 &&
                   KN_ACT_SILU == 8 && KN_ACT_GELU == 9 && KN_ACT_GELU_TANH == 10,
               "kn_cu_epilogue numbers the activations as kn_act");

/* The fused kernels' attributes but FusedElementwise's, read once (their prepare hook): the
 * activation, FusedConv's layout, Gelu's form, the normalisations' axis, Attention's scale,
 * nan_to_zero and operand views (has[i] -1: malformed), and the blocks of FusedConv's and
 * FusedGemm's inner Conv and Gemm (their hooks on the proxy node). What does not parse is read
 * again by the call, which says why. */
typedef struct cu_fused_prm {
    bool act_ok, layout_ok, nhwc, gelu_tanh, nan_to_zero, conv_ok, gemm_ok;
    kn_act_spec act;
    int64_t axis;
    float scale, eps;
    kn_attn_view v[4];
    int has[4];
    kn_cu_conv_prm conv;
    kn_gemm_attrs gemm;
} cu_fused_prm;
_Static_assert(sizeof(kn_cu_conv_prm) <= KN_PARAMS_HANDED_MAX && sizeof(kn_gemm_attrs) <= KN_PARAMS_HANDED_MAX,
               "the inner kernels' blocks are handed on the stack");

static kn_node proxy_of(const kn_node *n, const char *op) {
    kn_node proxy = *n;
    proxy.op_type = op;
    proxy.domain = "";
    proxy.opset = 13;
    return proxy;
}

static kiln_status cu_fused_prepare(const kn_node *n, void *params) {
    cu_fused_prm *p = params;
    memset(p, 0, sizeof *p);
    char why[160];
    p->act_ok = kn_act_from_node(n, &p->act, why, sizeof why);
    p->layout_ok = kn_fused_conv_layout(n, &p->nhwc);
    p->gelu_tanh = !strcmp(kn_attr_string(n, "approximate", "none"), "tanh");
    p->axis = kn_attr_int(n, "axis", -1);
    p->eps = kn_attr_float(n, "epsilon", 1e-5f);
    p->scale = kn_attr_float(n, "scale", 1.0f);
    p->nan_to_zero = kn_attr_int(n, "nan_to_zero", 0) != 0;
    for (int i = 0; i < 4; i++) p->has[i] = kn_attn_view_get(n, i, &p->v[i], why, sizeof why);
    kn_node proxy;
#ifdef KILN_HAVE_CUDNN
    proxy = proxy_of(n, "Conv");
    p->conv_ok = kn_cu_conv_prepare(&proxy, &p->conv) == KILN_OK;
#endif
    proxy = proxy_of(n, "Gemm");
    p->gemm_ok = kn_gemm_attrs_prepare(&proxy, &p->gemm) == KILN_OK;
    return KILN_OK;
}

#define FUSED_PRM(c) KN_CTX_PRM(c, cu_fused_prepare, cu_fused_prm, prm)

static kiln_status read_act(kn_kernel_ctx *c, const cu_fused_prm *prm, kn_act_spec *a) {
    char why[128];
    if (prm->act_ok) {
        *a = prm->act;
        return KILN_OK;
    }
    if (!kn_act_from_node(c->node, a, why, sizeof why)) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "%s", why);
    return KILN_OK;
}

/* Runs `run` as the ai.onnx operator `op` on the first n inputs of the fused node. */
static kiln_status run_base(kn_cuda *cu, kn_kernel_ctx *c, const char *op, int n,
                            kiln_status (*run)(kn_cuda *, kn_kernel_ctx *), const cu_fused_prm *prm) {
    kn_node proxy = proxy_of(c->node, op);
    kn_kernel_ctx pc = *c;
    pc.node = &proxy;
    pc.n_inputs = n < c->n_inputs ? n : c->n_inputs;
    /* the proxy's kernel gets the block the fused node's hook made for it */
    kn_params_handed blk;
    pc.params = NULL;
#ifdef KILN_HAVE_CUDNN
    if (!strcmp(op, "Conv") && prm->conv_ok)
        pc.params = kn_params_hand(&blk, kn_cu_conv_prepare, &proxy, &prm->conv, sizeof prm->conv);
#endif
    if (!strcmp(op, "Gemm") && prm->gemm_ok)
        pc.params = kn_params_hand(&blk, kn_gemm_attrs_prepare, &proxy, &prm->gemm, sizeof prm->gemm);
    return run(cu, &pc);
}

static kiln_status check_residual(kn_kernel_ctx *c, const kn_tensor *z, const kn_tensor *y) {
    if (!z) return KILN_OK;
    if (z->dtype != y->dtype || z->rank != y->rank || (y->rank && memcmp(z->dims, y->dims, sizeof(int64_t) * (size_t)y->rank)))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "the residual input must have the output's shape and type");
    return KILN_OK;
}

/* FusedMatMul's residual: y's shape, or y's rows under other leading dims (a 2-D y; the same bytes) */
static kiln_status check_rows_residual(kn_kernel_ctx *c, const kn_tensor *z, const kn_tensor *y) {
    if (!z || y->rank != 2 || z->rank == 2) return check_residual(c, z, y);
    if (z->dtype != y->dtype || z->rank < 1 || z->dims[z->rank - 1] != y->dims[1] || kn_tensor_count(z) != kn_tensor_count(y))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "the residual input must hold the output's rows in its type");
    return KILN_OK;
}

/* y = act(y + bias + z) in one pass; the bias indexes columns (inner 1) or channels (inner = the
 * spatial size of an NC... output). */
static kiln_status epilogue(kn_cuda *cu, kn_kernel_ctx *c, kn_tensor *y, const kn_tensor *bias, int64_t cols,
                            int64_t inner, const kn_tensor *z, const kn_act_spec *a) {
    int64_t nb = bias ? kn_tensor_count(bias) : 0;
    return kn_cu_check(c, kn_cu_epilogue(y->dtype, y->data, bias ? bias->data : NULL, nb, cols, inner, z ? z->data : NULL,
                                         (int)a->act, a->p0, a->p1, kn_tensor_count(y), cu->stream),
                       c->node->op_type);
}

#ifdef KILN_HAVE_CUDNN
static bool conv_fused_enabled(void) {
    const char *v = getenv("KILN_CUDA_CONV_FUSED");
    return !(v && !strcmp(v, "0"));
}
#endif

static kiln_status run_fused_conv(kn_cuda *cu, kn_kernel_ctx *c) {
#ifdef KILN_HAVE_CUDNN
    FUSED_PRM(c);
    kn_act_spec a;
    KN_TRY(read_act(c, prm, &a));
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output shape unknown at run time");
    const kn_tensor *bias = c->n_inputs > 2 ? c->in[2] : NULL, *z = c->n_inputs > 3 ? c->in[3] : NULL;
    KN_TRY(check_residual(c, z, y));
    bool nhwc = prm->nhwc;
    int64_t channels = y->rank > 1 ? y->dims[nhwc ? y->rank - 1 : 1] : 1, inner = 1;
    for (int i = 2; !nhwc && i < y->rank; i++) inner *= y->dims[i]; /* channels last: the bias is per column */
    if (bias && kn_tensor_count(bias) != channels)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "bias has %lld values for %lld output channels",
                               (long long)kn_tensor_count(bias), (long long)channels);
    /* bias, residual and activation in the library's call where it takes them (KILN_CUDA_CONV_FUSED=0:
     * never): cuDNN's legacy call for bias + ReLU, cuBLASLt's epilogue for a pointwise convolution,
     * cuDNN's operation graph for SiLU and the other activations it has (channels last, half
     * precision); what is left then runs as a pass over the output */
    if ((bias || z || kn_cu_conv_graph_takes(a.act)) && conv_fused_enabled()) {
        kn_node proxy = proxy_of(c->node, "Conv");
        kn_kernel_ctx pc = *c;
        pc.node = &proxy;
        pc.n_inputs = 2;
        kn_params_handed blk;
        pc.params = prm->conv_ok ? kn_params_hand(&blk, kn_cu_conv_prepare, &proxy, &prm->conv, sizeof prm->conv) : NULL;
        bool done = false, act_done = false;
        KN_TRY(kn_cu_run_conv_fused(cu, &pc, bias, z, a.act, a.p0, a.p1, &done, &act_done));
        if (!done) return epilogue(cu, c, y, bias, channels, inner, z, &a);
        if (act_done) return KILN_OK;
        return epilogue(cu, c, y, NULL, channels, inner, NULL, &a);
    }
    /* the convolution without its bias, then bias, residual and activation in one pass */
    KN_TRY(run_base(cu, c, "Conv", 2, kn_cu_run_conv, prm));
    return epilogue(cu, c, y, bias, channels, inner, z, &a);
#else
    (void)cu;
    return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "built without cuDNN");
#endif
}

static kiln_status run_fused_gemm(kn_cuda *cu, kn_kernel_ctx *c) {
    FUSED_PRM(c);
    kn_act_spec a;
    KN_TRY(read_act(c, prm, &a));
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output shape unknown at run time");
    KN_TRY(run_base(cu, c, "Gemm", 3, kn_cu_run_gemm, prm));
    return epilogue(cu, c, y, NULL, 1, 1, NULL, &a);
}

static kiln_status run_fused_matmul(kn_cuda *cu, kn_kernel_ctx *c) {
    FUSED_PRM(c);
    kn_act_spec a;
    KN_TRY(read_act(c, prm, &a));
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output shape unknown at run time");
    const kn_tensor *bias = c->n_inputs > 2 ? c->in[2] : NULL, *z = c->n_inputs > 3 ? c->in[3] : NULL;
    KN_TRY(check_rows_residual(c, z, y));
    int64_t cols = y->rank >= 1 ? y->dims[y->rank - 1] : 1, nb = bias ? kn_tensor_count(bias) : 0;
    if (bias && (bias->dtype != y->dtype || (nb != 1 && nb != cols)))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "bias has %lld values for %lld output columns", (long long)nb,
                               (long long)cols);
    const kn_tensor *A = c->in[0], *B = c->in[1];
    if (A->rank >= 2 && B->rank == 2 && A->dims[A->rank - 1] == B->dims[0] && (!bias || nb == cols) &&
        kn_tensor_count(y) > 0 && (!z || z->data != y->data)) {
        /* B shared by every row of A: one product over all of them, with the bias, the residual and a
         * ReLU or GELU in cuBLASLt's epilogue (kn_cu_gemm_run); another activation as a pass after it */
        kn_cu_gemm g;
        memset(&g, 0, sizeof g);
        g.dt = y->dtype;
        g.K = B->dims[0];
        g.N = B->dims[1];
        g.M = kn_tensor_count(y) / g.N;
        g.batch = 1;
        g.A = A->data, g.B = B->data, g.C = y->data;
        g.lda = g.K, g.ldb = g.N, g.ldc = g.N;
        g.alpha = 1;
        g.bias = bias ? bias->data : NULL;
        g.residual = z ? z->data : NULL;
        g.relu = a.act == KN_ACT_RELU;
        g.gelu = kn_cu_gelu_epilogue_ok(a.act, y->dtype) ? (int)a.act : 0;
        KN_TRY(kn_cu_gemm_run(cu, c, &g));
        if (a.act == KN_ACT_NONE || a.act == KN_ACT_RELU || g.gelu) return KILN_OK;
        return epilogue(cu, c, y, NULL, cols, 1, NULL, &a);
    }
    KN_TRY(run_base(cu, c, "MatMul", 2, kn_cu_run_matmul, prm));
    return epilogue(cu, c, y, bias, cols, 1, z, &a);
}

static kiln_status run_gelu(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    FUSED_PRM(c);
    int code = prm->gelu_tanh ? KN_CU_GELU_TANH : KN_CU_GELU;
    return kn_cu_check(c, kn_cu_unary(code, x->dtype, x->data, c->out[0]->data, kn_tensor_count(x), 0, 0, cu->stream),
                       "Gelu");
}

static kiln_status run_norm(kn_cuda *cu, kn_kernel_ctx *c) {
    /* the kiln forms take the ai.onnx attributes and have only the Y output */
    const kn_tensor *x = c->in[0];
    FUSED_PRM(c);
    int64_t axis = prm->axis;
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis out of range");
    int64_t d = 1;
    for (int i = (int)axis; i < x->rank; i++) d *= x->dims[i];
    for (int i = 1; i < c->n_inputs; i++)
        if (c->in[i] && kn_tensor_count(c->in[i]) != d)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "scale and bias must hold the %lld normalised elements", (long long)d);
    return kn_cu_run_layernorm_with(cu, c, prm->axis, prm->eps);
}

/* a tensor header over device memory the caller owns (never freed) */
static kn_tensor view_of(kiln_dtype dt, int rank, const int64_t *dims, void *data) {
    kn_tensor t;
    memset(&t, 0, sizeof t);
    t.kind = KN_VALUE_TENSOR;
    t.dtype = dt;
    t.rank = rank;
    for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
    t.data = data;
    t.device = KN_DEVICE_CUDA;
    return t;
}

/* An operand as the kernels see it: its view (the node's, or the whole tensor) and the address of
 * the view's first element. */
typedef struct attn_operand {
    kn_attn_view v;
    char *base;
} attn_operand;

static void operand_of(const kn_tensor *t, const kn_attn_view *v, attn_operand *o) {
    if (v) o->v = *v;
    else kn_attn_view_whole(t, &o->v);
    o->base = (char *)t->data + (size_t)o->v.offset * kiln_dtype_size(t->dtype);
}

/* kiln.Attention in one kernel (kn_cu_flash_attention) where it applies: float32, float16 or
 * bfloat16, head size 32, 64 or 128 for both products, at most two batch dims that Q, KT and V all
 * have in full, a mask (bool or the inputs' type) that broadcasts to the scores, by default where
 * it was measured faster (kn_cu_flash_attention says where). KILN_ERR_UNSUPPORTED (nothing run)
 * sends the node to the general form. KILN_CUDA_FLASH=0 asks for the general form everywhere, =1
 * for the one kernel wherever it applies (to compare the two). */
static kiln_status run_flash_attention(kn_cuda *cu, kn_kernel_ctx *c, float scale, bool nan_to_zero,
                                       const attn_operand *op) {
    const char *flag = getenv("KILN_CUDA_FLASH");
    const bool enabled = !(flag && !strcmp(flag, "0")), force = flag && !strcmp(flag, "1");
    const kn_tensor *Q = c->in[0], *KT = c->in[1], *V = c->in[2], *M = c->n_inputs > 3 ? c->in[3] : NULL;
    const attn_operand *q = &op[0], *k = &op[1], *v = &op[2], *y = &op[3];
    const int r = q->v.rank, nb = r - 2;
    const kiln_dtype dt = Q->dtype;
    if (!enabled || (dt != KILN_DTYPE_FLOAT && dt != KILN_DTYPE_FLOAT16 && dt != KILN_DTYPE_BFLOAT16) || nb < 1 ||
        nb > 2 || KT->dtype != dt || V->dtype != dt)
        return KILN_ERR_UNSUPPORTED;
    const int64_t sq = q->v.dims[r - 2], d = q->v.dims[r - 1], sk = k->v.dims[r - 1];
    if (k->v.dims[r - 2] != d || v->v.dims[r - 2] != sk || v->v.dims[r - 1] != d || (d != 32 && d != 64 && d != 128))
        return KILN_ERR_UNSUPPORTED;
    for (int i = 0; i < nb; i++)
        if (q->v.dims[i] != y->v.dims[i] || k->v.dims[i] != y->v.dims[i] || v->v.dims[i] != y->v.dims[i])
            return KILN_ERR_UNSUPPORTED;
    /* the head dim contiguous in Q, V and Y; K with its keys or its head dim contiguous */
    if (q->v.strides[r - 1] != 1 || v->v.strides[r - 1] != 1 || y->v.strides[r - 1] != 1) return KILN_ERR_UNSUPPORTED;
    if (k->v.strides[r - 1] != 1 && k->v.strides[r - 2] != 1) return KILN_ERR_UNSUPPORTED;
    kn_cu_flash f;
    memset(&f, 0, sizeof f);
    f.q = q->base, f.k = k->base, f.v = v->base, f.y = y->base;
    f.b0 = nb == 2 ? y->v.dims[0] : 1, f.b1 = y->v.dims[nb - 1];
    f.sq = sq, f.sk = sk, f.d = d, f.scale = scale;
    f.nan_to_zero = nan_to_zero;
    f.force = force;
    const char *warps = getenv("KILN_CUDA_FLASH_WARPS");
    f.warps = warps ? atoi(warps) : 0;
    f.q_si = q->v.strides[r - 2], f.q_s1 = q->v.strides[nb - 1], f.q_s0 = nb == 2 ? q->v.strides[0] : 0;
    f.k_sj = k->v.strides[r - 1], f.k_sc = k->v.strides[r - 2], f.k_s1 = k->v.strides[nb - 1], f.k_s0 = nb == 2 ? k->v.strides[0] : 0;
    f.v_sj = v->v.strides[r - 2], f.v_s1 = v->v.strides[nb - 1], f.v_s0 = nb == 2 ? v->v.strides[0] : 0;
    f.y_si = y->v.strides[r - 2], f.y_s1 = y->v.strides[nb - 1], f.y_s0 = nb == 2 ? y->v.strides[0] : 0;
    if (M) {
        if (M->dtype != KILN_DTYPE_BOOL && M->dtype != dt) return KILN_ERR_UNSUPPORTED;
        if (M->rank > r) return KILN_ERR_UNSUPPORTED;
        /* right-aligned onto [b0, b1, sq, sk] (as [b1, sq, sk] when there is one batch dim) */
        const int64_t target[4] = {f.b0, f.b1, sq, sk};
        int64_t st[4] = {0, 0, 0, 0}, acc = 1;
        for (int kk = M->rank - 1; kk >= 0; kk--) {
            const int t = 4 - (M->rank - kk);
            if (t < 4 - r) return KILN_ERR_UNSUPPORTED;
            if (M->dims[kk] != 1 && M->dims[kk] != target[t]) return KILN_ERR_UNSUPPORTED;
            st[t] = M->dims[kk] == 1 ? 0 : acc;
            acc *= M->dims[kk];
        }
        f.mask = M->data;
        f.mask_bool = M->dtype == KILN_DTYPE_BOOL;
        f.m_s0 = st[0], f.m_s1 = st[1], f.m_si = st[2], f.m_sj = st[3];
    }
    bool ran = false;
    KN_TRY(kn_cu_sdpa_run(cu, c, dt, &f, &ran)); /* cuDNN's fused attention where it has an engine */
    if (ran) return KILN_OK;
    cudaError_t e = kn_cu_flash_attention(dt, &f, cu->stream);
    if (e == cudaErrorNotSupported) return KILN_ERR_UNSUPPORTED;
    return kn_cu_check(c, e, "Attention (one kernel)");
}

/* A 4-D strided copy between an operand's view and a dense buffer (leading dims of 1 added). */
static kiln_status view_copy(kn_cuda *cu, kn_kernel_ctx *c, kiln_dtype dt, const attn_operand *o, void *dense,
                             bool to_dense) {
    kn_cu_attn_copy_dims g;
    int64_t acc = 1;
    for (int k = 3; k >= 0; k--) {
        const int src = k - (4 - o->v.rank);
        g.dims[k] = src >= 0 ? o->v.dims[src] : 1;
        const int64_t vs = src >= 0 ? o->v.strides[src] : 0;
        if (to_dense) g.src[k] = vs, g.dst[k] = acc;
        else g.src[k] = acc, g.dst[k] = vs;
        acc *= g.dims[k];
    }
    return kn_cu_check(c, kn_cu_attn_copy(dt, dt, to_dense ? o->base : dense, to_dense ? dense : o->base, &g, 1.0f,
                                          KILN_DTYPE_UNDEFINED, cu->stream),
                       "Attention operand view");
}

static kiln_status run_attention_dense(kn_cuda *cu, kn_kernel_ctx *c, const cu_fused_prm *prm);

/* kiln.Attention, with or without operand views (fold_attention_views): the one-kernel form reads
 * and writes through them; the general form takes dense copies. */
static kiln_status run_attention(kn_cuda *cu, kn_kernel_ctx *c) {
    FUSED_PRM(c);
    const int *has = prm->has;
    kn_tensor *Y = c->out[0];
    if (!Y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output shape unknown at run time");
    kn_tensor *ts[4] = {c->in[0], c->in[1], c->in[2], Y};
    kn_attn_view vw[4]; /* the views with this run's sizes for their symbolic dims */
    int any = 0;
    for (int i = 0; i < 4; i++) {
        if (has[i] < 0) { /* malformed: read again for the reason */
            kn_attn_view bad;
            char why[160];
            kn_attn_view_get(c->node, i, &bad, why, sizeof why);
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "%s", why);
        }
        any |= has[i];
        vw[i] = prm->v[i];
        if (has[i] && !kn_attn_view_bind(&vw[i], ts[i]->dims, ts[i]->rank))
            return kn_kernel_error(c, KILN_ERR_SHAPE, "%s names a dim the rank-%d %s lacks", kn_attn_view_name(i),
                                   ts[i]->rank, i < 3 ? "input" : "output");
    }
    attn_operand op[4];
    for (int i = 0; i < 4; i++) {
        if (has[i] > 0 && !kn_attn_view_fits(&vw[i], kn_tensor_count(ts[i])))
            return kn_kernel_error(c, KILN_ERR_SHAPE, "%s does not fit the %s tensor of %lld elements", kn_attn_view_name(i),
                                   i < 3 ? "input" : "output", (long long)kn_tensor_count(ts[i]));
        operand_of(ts[i], has[i] > 0 ? &vw[i] : NULL, &op[i]);
    }
    const int r = op[0].v.rank;
    if (r >= 2 && op[1].v.rank == r && op[2].v.rank == r && op[3].v.rank == r && op[1].v.dims[r - 1] > 0 &&
        op[0].v.dims[r - 2] > 0) {
        int64_t batch = 1;
        for (int i = 0; i < r - 2; i++) batch *= op[3].v.dims[i];
        if (batch > 0) {
            kiln_status fst = run_flash_attention(cu, c, prm->scale, prm->nan_to_zero, op);
            if (fst != KILN_ERR_UNSUPPORTED) return fst;
        }
    }
    if (!any) return run_attention_dense(cu, c, prm);
    /* the general form over dense copies of the viewed operands */
    kn_tensor hdr[4];
    kn_tensor *ins[4] = {c->in[0], c->in[1], c->in[2], c->n_inputs > 3 ? c->in[3] : NULL}, *outs[1] = {Y};
    void *buf[4] = {NULL, NULL, NULL, NULL};
    size_t bytes[4] = {0, 0, 0, 0};
    kiln_status st = KILN_OK;
    for (int i = 0; i < 4 && st == KILN_OK; i++) {
        if (has[i] <= 0) continue;
        const kiln_dtype dt = ts[i]->dtype;
        int64_t n = 1;
        for (int k = 0; k < op[i].v.rank; k++) n *= op[i].v.dims[k];
        bytes[i] = (size_t)n * kiln_dtype_size(dt);
        st = kn_cu_scratch(cu, bytes[i] ? bytes[i] : 1, &buf[i]);
        if (st != KILN_OK) break;
        hdr[i] = view_of(dt, op[i].v.rank, op[i].v.dims, buf[i]);
        hdr[i].nbytes = bytes[i];
        if (i < 3) {
            st = view_copy(cu, c, dt, &op[i], buf[i], true);
            ins[i] = &hdr[i];
        } else {
            outs[0] = &hdr[i];
        }
    }
    if (st == KILN_OK) {
        kn_kernel_ctx dense = *c;
        dense.in = ins;
        dense.out = outs;
        st = run_attention_dense(cu, &dense, prm);
    }
    if (st == KILN_OK && has[3] > 0) st = view_copy(cu, c, Y->dtype, &op[3], buf[3], false);
    for (int i = 0; i < 4; i++)
        if (buf[i]) kn_cu_scratch_free(cu, buf[i], bytes[i] ? bytes[i] : 1);
    return st;
}

static kiln_status run_attention_dense(kn_cuda *cu, kn_kernel_ctx *c, const cu_fused_prm *prm) {
    const kn_tensor *Q = c->in[0], *KT = c->in[1], *V = c->in[2], *M = c->n_inputs > 3 ? c->in[3] : NULL;
    kn_tensor *Y = c->out[0];
    if (!Y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output shape unknown at run time");
    int r = Q->rank;
    if (r < 2 || KT->rank != r || V->rank != r || Y->rank != r)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "Q, KT, V and Y must have one rank >= 2");
    int64_t sq = Q->dims[r - 2], d = Q->dims[r - 1], sk = KT->dims[r - 1], dv = V->dims[r - 1];
    if (KT->dims[r - 2] != d || V->dims[r - 2] != sk)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "Q, KT and V do not fit");
    int nb = r - 2;
    int64_t batch = 1;
    for (int i = 0; i < nb; i++) batch *= Y->dims[i];
    if (batch == 0 || sq == 0 || dv == 0) return KILN_OK;
    kiln_dtype dt = Q->dtype;
    size_t es = kiln_dtype_size(dt);
    if (sk == 0) return kn_cu_check(c, cudaMemsetAsync(Y->data, 0, Y->nbytes, cu->stream), "Attention");
    float scale = prm->scale;
    size_t sbytes = (size_t)(batch * sq * sk) * es;
    void *S;
    KN_TRY(kn_cu_scratch(cu, sbytes, &S));
    kiln_status st = kn_cu_matmul_bcast(cu, c, dt, Q->data, Q->dims, nb, KT->data, KT->dims, nb, S, Y->dims, nb, sq, sk,
                                        d, scale);
    int64_t sdims[KILN_MAX_RANK];
    for (int i = 0; i < nb; i++) sdims[i] = Y->dims[i];
    sdims[nb] = sq;
    sdims[nb + 1] = sk;
    kn_tensor Sv = view_of(dt, r, sdims, S);
    void *ninf = NULL;
    if (st == KILN_OK && M && M->dtype == KILN_DTYPE_BOOL) {
        /* false masks out: where(mask, scores, -inf) */
        unsigned char bytes[16] = {0};
        kn_tensor tmp = view_of(dt, 0, NULL, bytes);
        tmp.device = KN_DEVICE_HOST;
        tmp.nbytes = es;
        kn_tensor_set_f64(&tmp, 0, -INFINITY);
        st = kn_cu_scratch(cu, es, &ninf);
        if (st == KILN_OK) st = kn_cu_check(c, kn_cu_fill(es, bytes, ninf, 1, cu->stream), "Attention");
        kn_tensor Nv = view_of(dt, 0, NULL, ninf);
        kn_cu_view v;
        const kn_tensor *ops[3] = {M, &Sv, &Nv};
        kn_cu_make_view(&v, sdims, r, ops, 3);
        if (st == KILN_OK) st = kn_cu_check(c, kn_cu_where(dt, M->data, S, ninf, S, &v, cu->stream), "Attention mask");
    } else if (st == KILN_OK && M) {
        kn_cu_view v;
        const kn_tensor *ops[2] = {&Sv, M};
        kn_cu_make_view(&v, sdims, r, ops, 2);
        st = kn_cu_check(c, kn_cu_binary(KN_CU_ADD, dt, S, M->data, S, &v, cu->stream), "Attention mask");
    }
    if (st == KILN_OK) st = kn_cu_check(c, kn_cu_softmax(dt, S, S, batch * sq, sk, 1, 0, cu->stream), "Attention softmax");
    if (st == KILN_OK && prm->nan_to_zero)
        st = kn_cu_check(c, kn_cu_unary(KN_CU_NAN_TO_ZERO, dt, S, S, batch * sq * sk, 0, 0, cu->stream), "Attention");
    if (st == KILN_OK)
        st = kn_cu_matmul_bcast(cu, c, dt, S, sdims, nb, V->data, V->dims, nb, Y->data, Y->dims, nb, sq, dv, sk, 1.0f);
    kn_cu_scratch_free(cu, S, sbytes);
    if (ninf) kn_cu_scratch_free(cu, ninf, es);
    return st;
}

/* ------------------------------------------------------------------ FusedElementwise */

_Static_assert(KN_CU_CHAIN_INPUTS == KN_CHAIN_MAX_INPUTS && KN_CU_CHAIN_CONSTS == KN_CHAIN_MAX_CONSTS &&
                   KN_CU_CHAIN_STEPS == KN_CHAIN_MAX_STEPS,
               "the CUDA chain holds every program");

/* The kn_cu operator of a chain operator: kind 0 unary, 1 binary, 2 clip. */
static bool chain_step_to_cu(int op, uint8_t *kind, uint8_t *cu_op) {
    enum { U = 1, B, C }; /* the table's kinds, one above the kernel's so 0 is "none" */
    static const struct {
        uint8_t kind, op;
    } map[KN_CHAIN_OP_END_] = {
        [KN_CHAIN_ADD] = {B, KN_CU_ADD},       [KN_CHAIN_SUB] = {B, KN_CU_SUB},
        [KN_CHAIN_MUL] = {B, KN_CU_MUL},       [KN_CHAIN_DIV] = {B, KN_CU_DIV},
        [KN_CHAIN_POW] = {B, KN_CU_POW},       [KN_CHAIN_MAX] = {B, KN_CU_MAX},
        [KN_CHAIN_MIN] = {B, KN_CU_MIN},       [KN_CHAIN_PRELU] = {B, KN_CU_PRELU},
        [KN_CHAIN_ABS] = {U, KN_CU_ABS},       [KN_CHAIN_NEG] = {U, KN_CU_NEG},
        [KN_CHAIN_EXP] = {U, KN_CU_EXP},       [KN_CHAIN_LOG] = {U, KN_CU_LOG},
        [KN_CHAIN_SQRT] = {U, KN_CU_SQRT},     [KN_CHAIN_RECIPROCAL] = {U, KN_CU_RECIP},
        [KN_CHAIN_FLOOR] = {U, KN_CU_FLOOR},   [KN_CHAIN_CEIL] = {U, KN_CU_CEIL},
        [KN_CHAIN_ERF] = {U, KN_CU_ERF},       [KN_CHAIN_TANH] = {U, KN_CU_TANH},
        [KN_CHAIN_SIGMOID] = {U, KN_CU_SIGMOID}, [KN_CHAIN_RELU] = {U, KN_CU_RELU},
        [KN_CHAIN_LEAKY_RELU] = {U, KN_CU_LEAKYRELU}, [KN_CHAIN_ELU] = {U, KN_CU_ELU},
        [KN_CHAIN_SELU] = {U, KN_CU_SELU},     [KN_CHAIN_HARD_SIGMOID] = {U, KN_CU_HARDSIGMOID},
        [KN_CHAIN_HARD_SWISH] = {U, KN_CU_HARDSWISH}, [KN_CHAIN_SOFTPLUS] = {U, KN_CU_SOFTPLUS},
        [KN_CHAIN_SOFTSIGN] = {U, KN_CU_SOFTSIGN}, [KN_CHAIN_SIN] = {U, KN_CU_SIN},
        [KN_CHAIN_COS] = {U, KN_CU_COS},       [KN_CHAIN_GELU] = {U, KN_CU_GELU},
        [KN_CHAIN_GELU_TANH] = {U, KN_CU_GELU_TANH}, [KN_CHAIN_CLIP] = {C, 0},
        [KN_CHAIN_MISH] = {U, KN_CU_MISH},
    };
    if (op < 0 || op >= KN_CHAIN_OP_END_ || !map[op].kind) return false;
    *kind = (uint8_t)(map[op].kind - 1);
    *cu_op = map[op].op;
    return true;
}

/* FusedElementwise's program, read and checked once (its prepare hook; ok false: the call reads it
 * again and says why) */
typedef struct cu_chain_prm {
    bool ok;
    kn_chain_program prog;
} cu_chain_prm;

static kiln_status cu_chain_prepare(const kn_node *n, void *params) {
    cu_chain_prm *p = params;
    char why[160];
    p->ok = kn_chain_from_node(n, n->n_inputs, &p->prog, why, sizeof why);
    return KILN_OK;
}

static kiln_status run_chain(kn_cuda *cu, kn_kernel_ctx *c) {
    /* the program as read at compile time, or now (another input count than the node's, an
     * invalid program: read again for the message) */
    const cu_chain_prm *cp = NULL;
    if (c->params && c->params->fn == cu_chain_prepare && c->params->node == c->node && c->n_inputs == c->node->n_inputs)
        cp = (const cu_chain_prm *)c->params->data;
    kn_chain_program own;
    const kn_chain_program *pg = &own;
    if (cp && cp->ok) {
        pg = &cp->prog;
    } else {
        char why[160];
        if (!kn_chain_from_node(c->node, c->n_inputs, &own, why, sizeof why))
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "%s", why);
    }
    kn_cu_chain ch;
    memset(&ch, 0, sizeof ch);
    kiln_dtype dt = c->in[0]->dtype;
    /* the output's shape: every input broadcast */
    int rank = 0;
    int64_t dims[KILN_MAX_RANK];
    for (int i = 0; i < c->n_inputs; i++)
        if (c->in[i]->rank > rank) rank = c->in[i]->rank;
    for (int d = 0; d < rank; d++) {
        dims[d] = 1;
        for (int i = 0; i < c->n_inputs; i++) {
            const kn_tensor *x = c->in[i];
            int xd = d - (rank - x->rank);
            int64_t n = xd >= 0 ? x->dims[xd] : 1;
            if (n == 1 || n == dims[d]) continue;
            if (dims[d] != 1) return kn_kernel_error(c, KILN_ERR_SHAPE, "the inputs do not broadcast (dim %d)", d);
            dims[d] = n;
        }
    }
    kn_tensor *Y;
    KN_TRY(kn_ctx_output(c, 0, dt, rank, dims, &Y));
    int64_t total = kn_tensor_count(Y);
    ch.rank = kn_cu_collapse(dims, rank, (const kn_tensor *const *)c->in, c->n_inputs, ch.dims, ch.strides);
    ch.n_inputs = pg->n_inputs;
    ch.n_consts = pg->n_consts;
    ch.n_steps = pg->n_steps;
    for (int i = 0; i < c->n_inputs; i++) {
        int64_t count = kn_tensor_count(c->in[i]);
        ch.in[i] = c->in[i]->data;
        ch.mode[i] = count == total ? KN_CU_CHAIN_CONTIGUOUS : count == 1 ? KN_CU_CHAIN_SCALAR : KN_CU_CHAIN_STRIDED;
        ch.any_strided |= ch.mode[i] == KN_CU_CHAIN_STRIDED;
    }
    for (int k = 0; k < pg->n_consts; k++) ch.consts[k] = pg->consts[k];
    for (int t = 0; t < pg->n_steps; t++) {
        const kn_chain_step *ps = &pg->steps[t];
        kn_cu_chain_step *cs = &ch.steps[t];
        if (!chain_step_to_cu(ps->op, &cs->kind, &cs->op))
            return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "step %d: operator %s has no CUDA form", t,
                                   kn_chain_op_name(ps->op));
        cs->a = ps->a;
        cs->b = ps->b;
        cs->p0 = ps->p0;
        cs->p1 = ps->p1;
    }
    return kn_cu_check(c, kn_cu_chain_run(dt, &ch, Y->data, total, cu->stream), "FusedElementwise");
}

static bool chain_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    for (int i = 0; i < n_in; i++)
        if (!in[i] || in[i]->dtype != in[0]->dtype) {
            snprintf(why, cap, "input %d is %s, input 0 %s", i, in[i] ? kiln_dtype_name(in[i]->dtype) : "omitted",
                     kiln_dtype_name(in[0]->dtype));
            return false;
        }
    kn_chain_program prog;
    if (!kn_chain_from_node(n, n_in, &prog, why, cap)) return false;
    for (int t = 0; t < prog.n_steps; t++) {
        uint8_t kind, op;
        if (!chain_step_to_cu(prog.steps[t].op, &kind, &op)) {
            snprintf(why, cap, "step %d: operator %d has no CUDA form", t, prog.steps[t].op);
            return false;
        }
    }
    return true;
}

/* kiln.Attention's operand views (fold_attention_views) run here only when asked for: their code
 * paths (the one kernel's untransposed K, the general form's dense copies) have not run on a GPU
 * yet. Without them the optimiser leaves the Transposes and Reshapes for CUDA as before. */
/* On since the GPU suite passed with them (2 December). KILN_CUDA_ATTN_VIEWS=0 turns them off: the
 * pass then leaves the head splits and merges of CUDA-placed attention as they are. */
static bool attention_views_enabled(void) {
    const char *v = getenv("KILN_CUDA_ATTN_VIEWS");
    return !(v && !strcmp(v, "0"));
}

static bool fused_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    for (int i = 1; i < n_in; i++) {
        if (!in[i]) continue;
        /* Attention's mask may be bool */
        if (i == 3 && !strcmp(n->op_type, "Attention") && in[i]->dtype == KILN_DTYPE_BOOL) continue;
        if (in[i]->dtype != in[0]->dtype) {
            snprintf(why, cap, "input %d is %s, input 0 %s", i, kiln_dtype_name(in[i]->dtype), kiln_dtype_name(in[0]->dtype));
            return false;
        }
    }
    /* y_type (the CPU's bf16 values between convolutions, opt pass cpu_bf16_values) gives Y a type
     * other than X's: CUDA's kernels write Y in X's type, into a buffer sized for the other */
    int n_ytype = 0;
    const int64_t *ytype = kn_attr_ints(n, "y_type", &n_ytype);
    if (ytype && n_in > 0 && in[0] && (n_ytype != 1 || ytype[0] != (int64_t)in[0]->dtype)) {
        snprintf(why, cap, "y_type asks for Y in another type than X's %s", kiln_dtype_name(in[0]->dtype));
        return false;
    }
    kn_act_spec a;
    if (kn_node_attr(n, "activation") && !kn_act_from_node(n, &a, why, cap)) return false;
    bool nhwc = false;
    if (!strcmp(n->op_type, "FusedConv") && !kn_fused_conv_layout(n, &nhwc)) {
        snprintf(why, cap, "layout %s", kn_attr_string(n, "layout", ""));
        return false;
    }
    if (nhwc && in[0]->rank >= 0 && in[0]->rank != 4) {
        snprintf(why, cap, "layout NHWC on CUDA: 2-D convolutions only, X has rank %d", in[0]->rank);
        return false;
    }
    if (!strcmp(n->op_type, "FusedConv")) return kn_cu_conv_supports(n, in, n_in < 3 ? n_in : 3, why, cap);
    if (!strcmp(n->op_type, "Attention") && !attention_views_enabled()) {
        for (int i = 0; i < 4; i++)
            if (kn_node_attr(n, kn_attn_view_name(i))) {
                snprintf(why, cap, "operand views on CUDA are turned off (KILN_CUDA_ATTN_VIEWS=0)");
                return false;
            }
    }
    return true;
}

/* ------------------------------------------------------------------ SqueezeExcite */

/* A non-negative integer from the environment, else def. */
static int64_t env_count(const char *name, int64_t def) {
    const char *v = getenv(name);
    char *end = NULL;
    long long n = v && *v ? strtoll(v, &end, 10) : -1;
    return n >= 0 && end && !*end ? (int64_t)n : def;
}

/* kiln.SqueezeExcite's work split (kn_cu_se_tuning), read as a session compiles:
 * KILN_CUDA_SE_POOL_LIMIT (default 16 Ki elements: a block's 16 warps then sum at most 1 Ki
 * elements each, 4 rows at a time, a few memory latencies; EfficientNet's 7x7 blocks, 1152 x 49,
 * would be 3.5 Ki a warp, which the pool kernel spreads over 144 blocks instead; 0 and 16 Ki measured
 * within 1% on the H200, 64 Ki slower), KILN_CUDA_SE_ITEMS (batch items a gate block, 1-4, default 1)
 * and KILN_CUDA_SE_TEAM (lanes a weight row, 1-32, default 8). The gate block is latency-bound on
 * one multiprocessor: one item a block (more blocks, each with a shorter pool and product) and 8
 * lanes a row (four rows in flight a warp) were the fastest of 4/2/1 items x 32/16/8 lanes on every
 * block measured (H100, fp16: MobileNetV3-small 0.373 -> 0.330 ms at batch 1, 0.69 -> 0.58 at
 * batch 8 where unfused is 0.63; EfficientNet-B0 0.62 -> 0.56, 1.9 -> 1.29; gpu-peers-2026-12-06h.md). */
static kn_cu_se_tuning se_tuning(void) {
    kn_cu_se_tuning t;
    t.pool_limit = env_count("KILN_CUDA_SE_POOL_LIMIT", 16384);
    const int64_t items = env_count("KILN_CUDA_SE_ITEMS", 1), team = env_count("KILN_CUDA_SE_TEAM", 8);
    t.max_items = items < 1 ? 1 : items > 4 ? 4 : (int)items;
    t.max_team = team < 1 ? 1 : team > 32 ? 32 : (int)team;
    return t;
}

/* kiln.SqueezeExcite's attributes and work split, read once (its prepare hook); ok false: why says
 * what did not parse, for the run to report. */
typedef struct cu_se_prm {
    bool ok, nhwc;
    kn_act_spec act, gate;
    kn_cu_se_tuning tune;
    char why[160];
} cu_se_prm;

static kiln_status cu_se_prepare(const kn_node *n, void *params) {
    cu_se_prm *p = params;
    memset(p, 0, sizeof *p);
    p->ok = kn_squeeze_excite_from_node(n, &p->act, &p->gate, &p->nhwc, p->why, sizeof p->why);
    p->tune = se_tuning();
    return KILN_OK;
}

static kiln_status run_squeeze_excite(kn_cuda *cu, kn_kernel_ctx *c) {
    KN_CTX_PRM(c, cu_se_prepare, cu_se_prm, prm);
    if (!prm->ok) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "%s", prm->why);
    const kn_tensor *X = c->in[0], *W1 = c->in[1], *B1 = c->n_inputs > 2 ? c->in[2] : NULL, *W2 = c->in[3],
                    *B2 = c->n_inputs > 4 ? c->in[4] : NULL;
    kn_tensor *Y = c->out[0];
    int64_t N, C, M, S;
    KN_TRY(kn_squeeze_excite_dims(c, prm->nhwc, &N, &C, &M, &S));
    if (C + M > kn_cu_squeeze_excite_max_width())
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "%lld channels and %lld hidden values exceed the kernel's %lld",
                               (long long)C, (long long)M, (long long)kn_cu_squeeze_excite_max_width());
    if (kn_tensor_count(Y) == 0) return KILN_OK;
    const size_t bytes = kn_cu_squeeze_excite_scratch(N, C, M, S, prm->nhwc, &prm->tune);
    void *scratch = NULL;
    KN_TRY(kn_cu_scratch(cu, bytes, &scratch));
    cudaError_t e = kn_cu_squeeze_excite(X->dtype, X->data, W1->data, B1 ? B1->data : NULL, W2->data, B2 ? B2->data : NULL,
                                         Y->data, scratch, N, C, M, S, prm->nhwc, &prm->tune, (int)prm->act.act, prm->act.p0,
                                         prm->act.p1, (int)prm->gate.act, prm->gate.p0, prm->gate.p1, cu->stream);
    kn_cu_scratch_free(cu, scratch, bytes);
    return kn_cu_check(c, e, "SqueezeExcite");
}

/* Float types alike, attributes that parse, C + M within the kernel's shared memory, and, where
 * the shapes are known, batches whose re-reads of the weights stay small: each gate block reads
 * W1 and W2 whole for its (at most 4) batch items, where the unfused products read them once for
 * the batch (cuBLASLt): beyond 2^22 weight elements read, the block is left to them. */
static bool squeeze_excite_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    kn_act_spec act, gate;
    bool nhwc;
    if (!kn_squeeze_excite_from_node(n, &act, &gate, &nhwc, why, cap)) return false;
    const kn_type *x = in[0];
    for (int i = 1; i < n_in; i++)
        if (in[i] && in[i]->dtype != x->dtype) {
            snprintf(why, cap, "input %d is %s, X %s", i, kiln_dtype_name(in[i]->dtype), kiln_dtype_name(x->dtype));
            return false;
        }
    if (x->rank >= 0 && x->rank < 3) {
        snprintf(why, cap, "X has rank %d", x->rank);
        return false;
    }
    const kn_type *w1 = n_in > 1 ? in[1] : NULL;
    const int64_t C = x->rank >= 3 ? x->dims[nhwc ? x->rank - 1 : 1].value : -1;
    const int64_t M = w1 && w1->rank >= 1 ? w1->dims[0].value : -1, N = x->rank >= 1 ? x->dims[0].value : -1;
    if (C > 0 && M > 0 && C + M > kn_cu_squeeze_excite_max_width()) {
        snprintf(why, cap, "%lld channels and %lld hidden values exceed the kernel's %lld", (long long)C, (long long)M,
                 (long long)kn_cu_squeeze_excite_max_width());
        return false;
    }
    if (C > 0 && M > 0 && N > 0) {
        const kn_cu_se_tuning tune = se_tuning();
        const int64_t nb = kn_cu_squeeze_excite_items(C, M, &tune);
        if ((N + nb - 1) / nb * M * C > ((int64_t)1 << 22)) {
            snprintf(why, cap, "batch %lld of %lld x %lld weights: the unfused products reuse them across the batch",
                     (long long)N, (long long)M, (long long)C);
            return false;
        }
    }
    return true;
}

#define FUSED_PARAMS KN_CU_PARAMS(cu_fused_prepare, cu_fused_prm)

const kn_cuda_kernel kn_cuda_fused[] = {
#ifdef KILN_HAVE_CUDNN
    {"kiln", "FusedConv", run_fused_conv, fused_supports, KN_T_FLOATS, 0, 0, FUSED_PARAMS},
#endif
    {"kiln", "FusedGemm", run_fused_gemm, fused_supports, KN_T_FLOATS, 0, 0, FUSED_PARAMS},
    {"kiln", "FusedMatMul", run_fused_matmul, fused_supports, KN_T_FLOATS, 0, 0, FUSED_PARAMS},
    {"kiln", "Gelu", run_gelu, NULL, KN_T_FLOATS, 0, 0, FUSED_PARAMS},
    {"kiln", "LayerNormalization", run_norm, fused_supports, KN_T_FLOATS, 0, 0, FUSED_PARAMS},
    {"kiln", "RMSNormalization", run_norm, fused_supports, KN_T_FLOATS, 0, 0, FUSED_PARAMS},
    {"kiln", "Attention", run_attention, fused_supports, KN_T_FLOATS, 0, 0, FUSED_PARAMS},
    {"kiln", "FusedElementwise", run_chain, chain_supports,
     KN_T(KILN_DTYPE_FLOAT) | KN_T(KILN_DTYPE_FLOAT16) | KN_T(KILN_DTYPE_BFLOAT16), 0, 0,
     KN_CU_PARAMS(cu_chain_prepare, cu_chain_prm)},
    {"kiln", "SqueezeExcite", run_squeeze_excite, squeeze_excite_supports,
     KN_T(KILN_DTYPE_FLOAT) | KN_T(KILN_DTYPE_FLOAT16) | KN_T(KILN_DTYPE_BFLOAT16), 0, 0,
     KN_CU_PARAMS(cu_se_prepare, cu_se_prm)},
    {NULL, NULL, NULL, NULL, 0, 0, 0},
};

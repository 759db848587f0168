/* com.microsoft operators on the CPU: the family's kernel table, the GELU family (Gelu,
 * FastGelu, BiasGelu, QuickGelu, BiasSplitGelu), BiasAdd and FusedMatMul. The normalisations are
 * in contrib_norm.c, the attention operators in contrib_attention.c.
 *
 * Elementwise kernels compute in float32 over rows of the last dimension (where a bias
 * broadcasts); float16/bfloat16/double data is converted a block at a time. */
#include "backend/cpu/contrib_impl.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/sgemm.h"
#include "ops/attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kn_tensor *opt_in(const kn_kernel_ctx *c, int i) { return i < c->n_inputs ? c->in[i] : NULL; }

static bool float_like(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16 || t == KILN_DTYPE_DOUBLE;
}

/* ------------------------------------------------------------------ GELU family */

typedef enum act_kind { ACT_GELU, ACT_FAST_GELU, ACT_QUICK_GELU, ACT_NONE, ACT_SPLIT_GELU } act_kind;

static inline float gelu(float x) { return 0.5f * x * (1.0f + kn_ew_erff(x * 0.70710678118654752f)); }

/* y[0..n) = act(x + bias + skip); bias and skip may be NULL. */
static void act_row(act_kind k, float alpha, const float *x, const float *bias, const float *skip, float *y, int64_t n) {
    float t[256];
    for (int64_t s = 0; s < n; s += 256) {
        int64_t m = n - s < 256 ? n - s : 256;
        for (int64_t i = 0; i < m; i++) t[i] = x[s + i] + (bias ? bias[s + i] : 0.0f) + (skip ? skip[s + i] : 0.0f);
        float *o = y + s;
        switch (k) {
        case ACT_GELU:
            for (int64_t i = 0; i < m; i++) o[i] = gelu(t[i]);
            break;
        case ACT_FAST_GELU:
            for (int64_t i = 0; i < m; i++) {
                float v = t[i];
                o[i] = 0.5f * v * (1.0f + kn_ew_tanhf(0.7978845608028654f * v + 0.0356774081363001f * v * v * v));
            }
            break;
        case ACT_QUICK_GELU:
            for (int64_t i = 0; i < m; i++) o[i] = t[i] * kn_ew_sigmoidf(alpha * t[i]);
            break;
        default:
            for (int64_t i = 0; i < m; i++) o[i] = t[i];
            break;
        }
    }
}

typedef struct act_job {
    act_kind kind;
    float alpha;
    const kn_tensor *x, *bias, *skip;
    kn_tensor *y;
    int64_t cols; /* row length of x (the bias length) */
    int failed;
} act_job;

/* Row r of tensor t (row length n) as floats: a pointer into t or a conversion into buf. */
static const float *row_f32(const kn_tensor *t, int64_t r, int64_t n, float *buf) {
    if (t->dtype == KILN_DTYPE_FLOAT) return (const float *)t->data + r * n;
    kn_ew_cast_n(t->dtype, (const char *)t->data + (size_t)(r * n) * kiln_dtype_size(t->dtype), KILN_DTYPE_FLOAT, buf, n,
                 0);
    return buf;
}

static void act_range(void *arg, int64_t r0, int64_t r1) {
    act_job *j = arg;
    const int64_t n = j->cols, on = j->kind == ACT_SPLIT_GELU ? n / 2 : n;
    const bool f32 = j->x->dtype == KILN_DTYPE_FLOAT;
    float *buf = f32 ? NULL : malloc(sizeof(float) * (size_t)(3 * n + 1));
    float *tmp = j->kind == ACT_SPLIT_GELU ? malloc(sizeof(float) * (size_t)(n + 1)) : NULL;
    if ((!f32 && !buf) || (j->kind == ACT_SPLIT_GELU && !tmp)) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        goto done;
    }
    const float *bias = j->bias ? row_f32(j->bias, 0, n, buf ? buf + n : NULL) : NULL;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = row_f32(j->x, r, n, buf);
        const float *skip = j->skip ? row_f32(j->skip, r, n, buf ? buf + 2 * n : NULL) : NULL;
        float *y = f32 ? (float *)j->y->data + r * on : buf;
        if (j->kind == ACT_SPLIT_GELU) {
            /* (x + b)[:D/2] * gelu((x + b)[D/2:]) */
            act_row(ACT_NONE, 0.0f, x, bias, NULL, tmp, n);
            for (int64_t i = 0; i < on; i++) y[i] = tmp[i] * gelu(tmp[on + i]);
        } else {
            act_row(j->kind, j->alpha, x, bias, skip, y, n);
        }
        if (!f32)
            kn_ew_cast_n(KILN_DTYPE_FLOAT, y, j->y->dtype, (char *)j->y->data + (size_t)(r * on) * kiln_dtype_size(j->y->dtype),
                         on, 0);
    }
done:
    free(buf);
    free(tmp);
}

static kiln_status run_act(kn_kernel_ctx *c, act_kind kind, const kn_tensor *bias, const kn_tensor *skip) {
    const kn_tensor *X = c->in[0];
    kn_tensor *Y = c->out[0];
    if (!float_like(X->dtype) || (bias && bias->dtype != X->dtype) || (skip && skip->dtype != X->dtype))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "inputs must share one float type");
    int64_t n = kn_tensor_count(X);
    int64_t cols = X->rank > 0 ? X->dims[X->rank - 1] : 1;
    if (bias) {
        int64_t nb = kn_tensor_count(bias);
        if (nb != cols)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "the bias has %lld elements but the last dimension is %lld",
                                   (long long)nb, (long long)cols);
    }
    if (skip && kn_tensor_count(skip) != n) return kn_kernel_error(c, KILN_ERR_SHAPE, "skip must have the input's shape");
    if (kind == ACT_SPLIT_GELU && cols % 2) return kn_kernel_error(c, KILN_ERR_SHAPE, "the last dimension must be even");
    if (n == 0 || cols == 0) return KILN_OK;
    KN_CTX_PRM(c, kn_cpu_ms_prepare, kn_cpu_ms_prm, prm);
    act_job j = {kind, prm->alpha, X, bias, skip, Y, cols, 0};
    int64_t grain = (16384 + cols - 1) / cols;
    kn_parallel_for(c->pool, n / cols, grain, act_range, &j);
    if (j.failed) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return KILN_OK;
}

static kiln_status run_gelu(kn_kernel_ctx *c) { return run_act(c, ACT_GELU, NULL, NULL); }
static kiln_status run_quick_gelu(kn_kernel_ctx *c) { return run_act(c, ACT_QUICK_GELU, NULL, NULL); }
static kiln_status run_fast_gelu(kn_kernel_ctx *c) { return run_act(c, ACT_FAST_GELU, opt_in(c, 1), NULL); }
static kiln_status run_bias_gelu(kn_kernel_ctx *c) { return run_act(c, ACT_GELU, c->in[1], NULL); }
static kiln_status run_bias_add(kn_kernel_ctx *c) { return run_act(c, ACT_NONE, c->in[1], c->in[2]); }
static kiln_status run_bias_split_gelu(kn_kernel_ctx *c) { return run_act(c, ACT_SPLIT_GELU, c->in[1], NULL); }

/* ------------------------------------------------------------------ FusedMatMul */

/* One operand as a batch of matrices: the stored matrix is rows x cols with row stride ld,
 * its batch dims bd[0..nb) with element strides bs. transBatch takes the rows from dim 0. */
typedef struct mat_view {
    int nb;
    int64_t bd[KILN_MAX_RANK], bs[KILN_MAX_RANK];
    int64_t rows, cols, ld;
} mat_view;

static void make_view(const kn_tensor *t, bool tb, bool is_b, mat_view *v) {
    const int r = t->rank;
    int64_t st[KILN_MAX_RANK], acc = 1;
    for (int k = r - 1; k >= 0; k--) {
        st[k] = acc;
        acc *= t->dims[k];
    }
    v->nb = 0;
    if (r == 1) {
        /* a vector: a row of A, a column of B */
        v->rows = is_b ? t->dims[0] : 1;
        v->cols = is_b ? 1 : t->dims[0];
        v->ld = v->cols;
        return;
    }
    if (tb && r >= 3) {
        v->rows = t->dims[0];
        v->cols = t->dims[r - 1];
        v->ld = st[0];
        for (int k = 1; k < r - 1; k++) {
            v->bd[v->nb] = t->dims[k];
            v->bs[v->nb++] = st[k];
        }
    } else {
        v->rows = t->dims[r - 2];
        v->cols = t->dims[r - 1];
        v->ld = v->cols;
        for (int k = 0; k < r - 2; k++) {
            v->bd[v->nb] = t->dims[k];
            v->bs[v->nb++] = st[k];
        }
    }
}

static kiln_status run_fused_matmul(kn_kernel_ctx *c) {
    const kn_tensor *A = c->in[0], *B = c->in[1];
    kn_tensor *Y = c->out[0];
    if (!float_like(A->dtype) || B->dtype != A->dtype)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "A and B must share one float type");
    if (A->rank < 1 || B->rank < 1) return kn_kernel_error(c, KILN_ERR_SHAPE, "A and B must have rank >= 1");
    KN_CTX_PRM(c, kn_cpu_ms_prepare, kn_cpu_ms_prm, prm);
    const bool ta = A->rank >= 2 && prm->trans_a, tb = B->rank >= 2 && prm->trans_b;
    const float alpha = prm->alpha;
    mat_view va, vb;
    make_view(A, prm->trans_batch_a, false, &va);
    make_view(B, prm->trans_batch_b, true, &vb);
    const int64_t M = ta ? va.cols : va.rows, K = ta ? va.rows : va.cols;
    const int64_t K2 = tb ? vb.cols : vb.rows, N = tb ? vb.rows : vb.cols;
    if (K != K2) return kn_kernel_error(c, KILN_ERR_SHAPE, "inner dimensions differ: %lld vs %lld", (long long)K, (long long)K2);
    /* broadcast batch */
    int nb = va.nb > vb.nb ? va.nb : vb.nb;
    int64_t bd[KILN_MAX_RANK], sa[KILN_MAX_RANK], sb[KILN_MAX_RANK], count = 1;
    for (int k = 0; k < nb; k++) {
        int ia = k - (nb - va.nb), ib = k - (nb - vb.nb);
        int64_t da = ia >= 0 ? va.bd[ia] : 1, db = ib >= 0 ? vb.bd[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "batch dimensions %lld and %lld do not broadcast", (long long)da,
                                   (long long)db);
        bd[k] = da > db ? da : db;
        sa[k] = da == 1 ? 0 : va.bs[ia];
        sb[k] = db == 1 ? 0 : vb.bs[ib];
        count *= bd[k];
    }
    if (kn_tensor_count(Y) != count * M * N) return kn_kernel_error(c, KILN_ERR_SHAPE, "the output shape does not fit");
    if (count == 0 || M == 0 || N == 0) return KILN_OK;
    int64_t *offa = malloc(sizeof(int64_t) * (size_t)count * 2);
    if (!offa) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    int64_t *offb = offa + count;
    for (int64_t i = 0; i < count; i++) {
        int64_t rem = i, oa = 0, ob = 0;
        for (int k = nb - 1; k >= 0; k--) {
            int64_t idx = rem % bd[k];
            rem /= bd[k];
            oa += idx * sa[k];
            ob += idx * sb[k];
        }
        offa[i] = oa;
        offb[i] = ob;
    }
    kiln_status st = KILN_OK;
    if (A->dtype == KILN_DTYPE_DOUBLE) {
        const double *a = A->data, *b = B->data;
        double *y = Y->data;
        for (int64_t i = 0; i < count; i++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                    double acc = 0.0;
                    for (int64_t k = 0; k < K; k++) {
                        double x = ta ? a[offa[i] + k * va.ld + m] : a[offa[i] + m * va.ld + k];
                        double w = tb ? b[offb[i] + n * vb.ld + k] : b[offb[i] + k * vb.ld + n];
                        acc += x * w;
                    }
                    y[(i * M + m) * N + n] = alpha * acc;
                }
        free(offa);
        return KILN_OK;
    }
    float *fa = NULL, *fb = NULL, *fy = NULL;
    const float *pa = A->data, *pb = B->data;
    float *py = Y->data;
    if (A->dtype != KILN_DTYPE_FLOAT) {
        int64_t na = kn_tensor_count(A), nbb = kn_tensor_count(B), ny = kn_tensor_count(Y);
        fa = malloc(sizeof(float) * (size_t)(na + 1));
        fb = malloc(sizeof(float) * (size_t)(nbb + 1));
        fy = malloc(sizeof(float) * (size_t)(ny + 1));
        if (!fa || !fb || !fy) {
            st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
            goto done;
        }
        kn_ew_cast_n(A->dtype, A->data, KILN_DTYPE_FLOAT, fa, na, 0);
        kn_ew_cast_n(B->dtype, B->data, KILN_DTYPE_FLOAT, fb, nbb, 0);
        pa = fa;
        pb = fb;
        py = fy;
    }
    const float **ap = malloc(sizeof(float *) * (size_t)count * 3);
    if (!ap) {
        st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    const float **bp = ap + count;
    float **cp = (float **)(ap + 2 * count);
    for (int64_t i = 0; i < count; i++) {
        ap[i] = pa + offa[i];
        bp[i] = pb + offb[i];
        cp[i] = py + i * M * N;
    }
    kn_sgemm_batch p = {.count = count, .M = M, .N = N, .K = K, .trans_a = ta, .trans_b = tb, .alpha = alpha,
                        .beta = 0.0f, .a = ap, .lda = va.ld, .b = bp, .ldb = vb.ld, .c = cp, .ldc = N};
    st = kn_sgemm_run(c->pool, &p);
    free(ap);
    if (st != KILN_OK) {
        st = kn_kernel_error(c, st, "%s", kn_last_error());
        goto done;
    }
    if (fy) kn_ew_cast_n(KILN_DTYPE_FLOAT, fy, Y->dtype, Y->data, kn_tensor_count(Y), 0);
done:
    free(offa);
    free(fa);
    free(fb);
    free(fy);
    return st;
}

kiln_status kn_cpu_ms_prepare(const kn_node *n, void *params) {
    kn_cpu_ms_prm *p = params;
    memset(p, 0, sizeof *p);
    const bool matmul = !strcmp(n->op_type, "FusedMatMul");
    p->alpha = kn_attr_float(n, "alpha", matmul ? 1.0f : 1.702f);
    p->trans_a = kn_attr_int(n, "transA", 0) != 0;
    p->trans_b = kn_attr_int(n, "transB", 0) != 0;
    p->trans_batch_a = kn_attr_int(n, "transBatchA", 0) != 0;
    p->trans_batch_b = kn_attr_int(n, "transBatchB", 0) != 0;
    p->eps = kn_attr_float(n, "epsilon", !strcmp(n->op_type, "SimplifiedLayerNormalization") ? 1e-5f : 1e-12f);
    p->axis = kn_attr_int(n, "axis", -1);
    return KILN_OK;
}

#define MS "com.microsoft"
#define MS_PRM KN_PARAMS(kn_cpu_ms_prepare, kn_cpu_ms_prm)

const kn_cpu_kernel kn_cpu_contrib[] = {
    {MS, "Gelu", run_gelu, NULL, KN_KERNEL_OVERWRITES, MS_PRM},
    {MS, "QuickGelu", run_quick_gelu, NULL, KN_KERNEL_OVERWRITES, MS_PRM},
    {MS, "FastGelu", run_fast_gelu, NULL, KN_KERNEL_OVERWRITES, MS_PRM},
    {MS, "BiasGelu", run_bias_gelu, NULL, KN_KERNEL_OVERWRITES, MS_PRM},
    {MS, "BiasAdd", run_bias_add, NULL, KN_KERNEL_OVERWRITES, MS_PRM},
    {MS, "BiasSplitGelu", run_bias_split_gelu, NULL, KN_KERNEL_OVERWRITES, MS_PRM},
    {MS, "SkipLayerNormalization", kn_cpu_ms_skip_layernorm, NULL, KN_KERNEL_OVERWRITES, MS_PRM},
    {MS, "SkipSimplifiedLayerNormalization", kn_cpu_ms_skip_simplified_layernorm, NULL, KN_KERNEL_OVERWRITES, MS_PRM},
    {MS, "EmbedLayerNormalization", kn_cpu_ms_embed_layernorm, NULL, KN_KERNEL_OVERWRITES, MS_PRM},
    /* ai.onnx LayerNormalization before opset 17 (ONNX Runtime's) runs on the nn family's kernel */
    {"", "SimplifiedLayerNormalization", kn_cpu_ms_simplified_layernorm, NULL, KN_KERNEL_OVERWRITES, MS_PRM},
    {MS, "FusedMatMul", run_fused_matmul, NULL, KN_KERNEL_OVERWRITES, MS_PRM},
    /* the attention family's attributes: one hook for CPU and CUDA (ops/attention.h) */
    {MS, "RotaryEmbedding", kn_cpu_ms_rotary_embedding, NULL, KN_KERNEL_OVERWRITES,
     KN_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {MS, "Attention", kn_cpu_ms_attention, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {MS, "MultiHeadAttention", kn_cpu_ms_multihead_attention, NULL, KN_KERNEL_OVERWRITES,
     KN_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {MS, "GroupQueryAttention", kn_cpu_ms_group_query_attention, NULL, KN_KERNEL_OVERWRITES,
     KN_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {0},
};

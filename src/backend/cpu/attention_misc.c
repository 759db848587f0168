/* The smaller operators of the attention family on the CPU: RotaryEmbedding (opset 23), SwiGLU
 * (28), CausalConvWithState and LinearAttention (27). All compute in float32; float16/bfloat16
 * values are converted on the way in and rounded once on the way out, except where noted. */
#include "backend/cpu/attention_impl.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/elementwise_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kn_tensor *opt_in(const kn_kernel_ctx *c, int i) { return i < c->n_inputs ? c->in[i] : NULL; }
static kn_tensor *opt_out(const kn_kernel_ctx *c, int i) { return i < c->n_outputs ? c->out[i] : NULL; }

static bool float_like(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16 || t == KILN_DTYPE_DOUBLE;
}

/* A float32 view of a tensor: its data when it is float32, else a converted copy (*owned). */
static const float *as_float(const kn_tensor *t, float **owned) {
    *owned = NULL;
    if (t->dtype == KILN_DTYPE_FLOAT) return t->data;
    *owned = kn_attn_to_float(t);
    return *owned;
}

/* Where a kernel writes float32 results for output t: t's data or a scratch copy (*owned). */
static float *out_float(kn_tensor *t, float **owned) {
    *owned = NULL;
    if (t->dtype == KILN_DTYPE_FLOAT) return t->data;
    int64_t n = kn_tensor_count(t);
    *owned = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    return *owned;
}

/* ------------------------------------------------------------------ RotaryEmbedding */

void kn_rotary_rotate(const float *x, float *y, const float *cs, const float *sn, int64_t half, bool interleaved) {
    if (interleaved) {
        for (int64_t i = 0; i < half; i++) {
            float x1 = x[2 * i], x2 = x[2 * i + 1];
            y[2 * i] = cs[i] * x1 - sn[i] * x2;
            y[2 * i + 1] = sn[i] * x1 + cs[i] * x2;
        }
    } else {
        for (int64_t i = 0; i < half; i++) {
            float x1 = x[i], x2 = x[i + half];
            y[i] = cs[i] * x1 - sn[i] * x2;
            y[i + half] = sn[i] * x1 + cs[i] * x2;
        }
    }
}

typedef struct rope_job {
    const float *x, *cs, *sn;
    const int64_t *pos;
    float *y;
    int64_t B, H, S, D, rd, max_pos;
    bool rank3, interleaved;
} rope_job;

static void rope_range(void *arg, int64_t t0, int64_t t1) {
    const rope_job *j = arg;
    const int64_t half = j->rd / 2;
    for (int64_t t = t0; t < t1; t++) {
        /* t enumerates (b, s, h) */
        int64_t h = t % j->H, bs = t / j->H, s = bs % j->S, b = bs / j->S;
        int64_t off = j->rank3 ? (b * j->S + s) * j->H * j->D + h * j->D : ((b * j->H + h) * j->S + s) * j->D;
        const float *x = j->x + off;
        float *y = j->y + off;
        int64_t crow = j->pos ? j->pos[b * j->S + s] : b * j->S + s;
        const float *cs = j->cs + crow * half, *sn = j->sn + crow * half;
        kn_rotary_rotate(x, y, cs, sn, half, j->interleaved);
        for (int64_t i = j->rd; i < j->D; i++) y[i] = x[i];
    }
}

kiln_status kn_cpu_rotary_embedding(kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0], *C = c->in[1], *Sn = c->in[2], *P = opt_in(c, 3);
    kn_tensor *Y = c->out[0];
    if (!float_like(X->dtype) || C->dtype != X->dtype || Sn->dtype != X->dtype)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "X, cos_cache and sin_cache must share a float type");
    kn_attn_attrs local;
    const kn_attn_attrs *at;
    KN_TRY(kn_attn_attrs_of(c, &local, &at));
    rope_job j = {0};
    j.rank3 = X->rank == 3;
    j.B = X->dims[0];
    if (j.rank3) {
        j.H = at->num_heads;
        if (j.H <= 0 || X->dims[2] % j.H)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "hidden size %lld is not a multiple of num_heads %lld",
                                   (long long)X->dims[2], (long long)j.H);
        j.S = X->dims[1];
        j.D = X->dims[2] / j.H;
    } else if (X->rank == 4) {
        j.H = X->dims[1];
        j.S = X->dims[2];
        j.D = X->dims[3];
    } else {
        return kn_kernel_error(c, KILN_ERR_SHAPE, "X must be 3-D or 4-D");
    }
    j.rd = at->rotary_dim;
    if (j.rd == 0) j.rd = j.D;
    if (j.rd < 0 || j.rd > j.D || j.rd % 2)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "rotary_embedding_dim %lld must be even and at most the head "
                               "size %lld", (long long)j.rd, (long long)j.D);
    j.interleaved = at->interleaved;
    const int64_t half = j.rd / 2;
    if (P) {
        if (P->dtype != KILN_DTYPE_INT64 || P->rank != 2 || P->dims[0] != j.B || P->dims[1] != j.S)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "position_ids must be int64 [%lld, %lld]", (long long)j.B,
                                   (long long)j.S);
        if (C->rank != 2 || Sn->rank != 2 || C->dims[1] != half || Sn->dims[1] != half || Sn->dims[0] != C->dims[0])
            return kn_kernel_error(c, KILN_ERR_SHAPE, "cos_cache/sin_cache must be [max_position, %lld]", (long long)half);
        j.pos = P->data;
        j.max_pos = C->dims[0];
        for (int64_t i = 0; i < j.B * j.S; i++)
            if (j.pos[i] < 0 || j.pos[i] >= j.max_pos)
                return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "position id %lld is outside the cache's %lld rows",
                                       (long long)j.pos[i], (long long)j.max_pos);
    } else if (C->rank != 3 || Sn->rank != 3 || C->dims[0] != j.B || C->dims[1] != j.S || C->dims[2] != half ||
               memcmp(C->dims, Sn->dims, sizeof(int64_t) * 3)) {
        return kn_kernel_error(c, KILN_ERR_SHAPE, "without position_ids, cos_cache/sin_cache must be [%lld, %lld, %lld]",
                               (long long)j.B, (long long)j.S, (long long)half);
    }
    float *ox = NULL, *oc = NULL, *os = NULL, *oy = NULL;
    kiln_status st = KILN_OK;
    j.x = as_float(X, &ox);
    j.cs = as_float(C, &oc);
    j.sn = as_float(Sn, &os);
    j.y = out_float(Y, &oy);
    if (!j.x || !j.cs || !j.sn || !j.y) {
        st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    } else {
        kn_parallel_for(c->pool, j.B * j.S * j.H, 64, rope_range, &j);
        if (oy) kn_attn_from_float(oy, Y, kn_tensor_count(Y));
    }
    free(ox);
    free(oc);
    free(os);
    free(oy);
    return st;
}

/* ------------------------------------------------------------------ SwiGLU */

typedef struct swiglu_job {
    const kn_tensor *a, *b;
    kn_tensor *y;
    float alpha;
} swiglu_job;

static void swiglu_range(void *arg, int64_t i0, int64_t i1) {
    const swiglu_job *j = arg;
    const kiln_dtype t = j->a->dtype;
    if (t == KILN_DTYPE_FLOAT) {
        const float *a = j->a->data, *b = j->b->data;
        float *y = j->y->data;
        for (int64_t i = i0; i < i1; i++) y[i] = a[i] * kn_ew_sigmoidf(j->alpha * a[i]) * b[i];
        return;
    }
    if (t == KILN_DTYPE_DOUBLE) {
        const double *a = j->a->data, *b = j->b->data;
        double *y = j->y->data;
        for (int64_t i = i0; i < i1; i++) y[i] = a[i] / (1.0 + exp(-(double)j->alpha * a[i])) * b[i];
        return;
    }
    /* half types: each step rounded, as the reference computes in that type */
    float av[256], bv[256];
    for (int64_t s = i0; s < i1; s += 256) {
        int64_t n = i1 - s < 256 ? i1 - s : 256;
        kn_ew_half_to_f32(t, (const uint16_t *)j->a->data + s, av, n);
        kn_ew_half_to_f32(t, (const uint16_t *)j->b->data + s, bv, n);
        float na = kn_attn_round(t, -j->alpha);
        for (int64_t i = 0; i < n; i++) {
            float e = kn_attn_round(t, expf(kn_attn_round(t, na * av[i])));
            float sg = kn_attn_round(t, 1.0f / kn_attn_round(t, 1.0f + e));
            av[i] = kn_attn_round(t, kn_attn_round(t, av[i] * sg) * bv[i]);
        }
        kn_ew_f32_to_half(t, av, (uint16_t *)j->y->data + s, n);
    }
}

kiln_status kn_cpu_swiglu(kn_kernel_ctx *c) {
    const kn_tensor *A = c->in[0], *Bt = c->in[1];
    if (!float_like(A->dtype) || Bt->dtype != A->dtype)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "A and B must share a float type");
    int64_t n = kn_tensor_count(A);
    if (kn_tensor_count(Bt) != n) return kn_kernel_error(c, KILN_ERR_SHAPE, "A and B must have the same shape");
    kn_attn_attrs local;
    const kn_attn_attrs *at;
    KN_TRY(kn_attn_attrs_of(c, &local, &at));
    swiglu_job j = {A, Bt, c->out[0], at->alpha};
    kn_parallel_for(c->pool, n, 4096, swiglu_range, &j);
    return KILN_OK;
}

/* ------------------------------------------------------------------ CausalConvWithState */

kiln_status kn_cpu_causal_conv_with_state(kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0], *W = c->in[1], *Bi = opt_in(c, 2), *Ps = opt_in(c, 3);
    kn_tensor *Y = c->out[0], *St = opt_out(c, 1);
    const kiln_dtype t = X->dtype;
    if (!float_like(t) || W->dtype != t || (Bi && Bi->dtype != t) || (Ps && Ps->dtype != t))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "all inputs must share one float type");
    if (X->rank != 3 || W->rank != 3)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "input and weight must be 3-D");
    const int64_t B = X->dims[0], C = X->dims[1], L = X->dims[2], k = W->dims[2], P = k - 1;
    if (W->dims[0] != C || W->dims[1] != 1 || k < 1)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "weight must be [%lld, 1, k] with k >= 1", (long long)C);
    if (Bi && (Bi->rank != 1 || Bi->dims[0] != C))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "bias must be [%lld]", (long long)C);
    if (Ps && (Ps->rank != 3 || Ps->dims[0] != B || Ps->dims[1] != C || Ps->dims[2] != P))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "past_state must be [%lld, %lld, %lld]", (long long)B, (long long)C,
                               (long long)P);
    kn_attn_attrs local;
    const kn_attn_attrs *at;
    KN_TRY(kn_attn_attrs_of(c, &local, &at));
    const char *act = at->activation;
    const bool silu = !strcmp(act, "silu") || !strcmp(act, "swish");
    float *fx = NULL, *fw = NULL, *fb = NULL, *fp = NULL, *pad = NULL, *fy = NULL;
    kiln_status st = KILN_OK;
    const float *x = as_float(X, &fx), *w = as_float(W, &fw);
    const float *bias = Bi ? as_float(Bi, &fb) : NULL, *past = Ps ? as_float(Ps, &fp) : NULL;
    pad = malloc(sizeof(float) * (size_t)(P + L + 1));
    fy = malloc(sizeof(float) * (size_t)(B * C * L + 1));
    float *fs = St ? malloc(sizeof(float) * (size_t)(B * C * P + 1)) : NULL;
    if (!x || !w || (Bi && !bias) || (Ps && !past) || !pad || !fy || (St && !fs)) {
        st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t ch = 0; ch < C; ch++) {
            /* the padded sequence: past state (or zeros), then the input */
            for (int64_t i = 0; i < P; i++) pad[i] = past ? past[(b * C + ch) * P + i] : 0.0f;
            memcpy(pad + P, x + (b * C + ch) * L, sizeof(float) * (size_t)L);
            const float *wc = w + ch * k;
            float *yo = fy + (b * C + ch) * L;
            for (int64_t i = 0; i < L; i++) {
                float acc = bias ? bias[ch] : 0.0f;
                for (int64_t m = 0; m < k; m++) acc += wc[m] * pad[i + m];
                /* the reference rounds the convolution to the input type before the activation */
                acc = kn_attn_round(t, acc);
                if (silu) acc = acc / (1.0f + expf(-acc));
                yo[i] = acc;
            }
            if (fs) memcpy(fs + (b * C + ch) * P, pad + L, sizeof(float) * (size_t)P);
        }
    kn_attn_from_float(fy, Y, B * C * L);
    if (St) kn_attn_from_float(fs, St, B * C * P);
done:
    free(fx);
    free(fw);
    free(fb);
    free(fp);
    free(pad);
    free(fy);
    free(fs);
    return st;
}

/* ------------------------------------------------------------------ LinearAttention */

typedef struct lin_job {
    const float *q, *k, *v, *decay, *beta, *past;
    float *out, *state;
    int64_t B, T, Hq, Hkv, dk, dv, decay_last, beta_last;
    bool gating, delta;
    float scale;
    int failed;
} lin_job;

static void lin_range(void *arg, int64_t t0, int64_t t1) {
    lin_job *j = arg;
    const int64_t dk = j->dk, dv = j->dv, group = j->Hq / j->Hkv;
    float *tmp = malloc(sizeof(float) * (size_t)(dv + dk + 1));
    if (!tmp) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *vt = tmp, *g = tmp + dv;
    for (int64_t task = t0; task < t1; task++) {
        int64_t b = task / j->Hkv, h = task % j->Hkv;
        float *S = j->state + (b * j->Hkv + h) * dk * dv;
        if (j->past) memcpy(S, j->past + (b * j->Hkv + h) * dk * dv, sizeof(float) * (size_t)(dk * dv));
        else memset(S, 0, sizeof(float) * (size_t)(dk * dv));
        for (int64_t t = 0; t < j->T; t++) {
            const float *kt = j->k + (b * j->T + t) * j->Hkv * dk + h * dk;
            const float *vv = j->v + (b * j->T + t) * j->Hkv * dv + h * dv;
            if (j->gating) {
                const float *dcy = j->decay + (b * j->T + t) * j->decay_last;
                if (j->decay_last == j->Hkv)
                    for (int64_t d = 0; d < dk; d++) g[d] = expf(dcy[h]);
                else
                    for (int64_t d = 0; d < dk; d++) g[d] = expf(dcy[h * dk + d]);
                for (int64_t d = 0; d < dk; d++)
                    for (int64_t m = 0; m < dv; m++) S[d * dv + m] *= g[d];
            }
            if (j->delta) {
                /* v_t <- beta * (v_t - S^T k_t) */
                float bt = j->beta[(b * j->T + t) * j->beta_last + (j->beta_last == 1 ? 0 : h)];
                for (int64_t m = 0; m < dv; m++) vt[m] = 0.0f;
                for (int64_t d = 0; d < dk; d++)
                    for (int64_t m = 0; m < dv; m++) vt[m] += S[d * dv + m] * kt[d];
                for (int64_t m = 0; m < dv; m++) vt[m] = bt * (vv[m] - vt[m]);
            } else {
                memcpy(vt, vv, sizeof(float) * (size_t)dv);
            }
            for (int64_t d = 0; d < dk; d++)
                for (int64_t m = 0; m < dv; m++) S[d * dv + m] += kt[d] * vt[m];
            for (int64_t gq = 0; gq < group; gq++) {
                int64_t hq = h * group + gq;
                const float *qt = j->q + (b * j->T + t) * j->Hq * dk + hq * dk;
                float *o = j->out + (b * j->T + t) * j->Hq * dv + hq * dv;
                for (int64_t m = 0; m < dv; m++) o[m] = 0.0f;
                for (int64_t d = 0; d < dk; d++)
                    for (int64_t m = 0; m < dv; m++) o[m] += qt[d] * S[d * dv + m];
                for (int64_t m = 0; m < dv; m++) o[m] *= j->scale;
            }
        }
    }
    free(tmp);
}

kiln_status kn_cpu_linear_attention(kn_kernel_ctx *c) {
    const kn_tensor *Q = c->in[0], *K = c->in[1], *V = c->in[2], *Ps = opt_in(c, 3), *D = opt_in(c, 4),
                    *Bt = opt_in(c, 5);
    kn_tensor *O = c->out[0], *St = opt_out(c, 1);
    kn_attn_attrs local;
    const kn_attn_attrs *at;
    KN_TRY(kn_attn_attrs_of(c, &local, &at));
    lin_job j = {0};
    j.Hq = at->q_heads;
    j.Hkv = at->kv_heads;
    if (j.Hq <= 0 || j.Hkv <= 0 || j.Hq % j.Hkv)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "q_num_heads must be a positive multiple of kv_num_heads");
    if (Q->rank != 3 || K->rank != 3 || V->rank != 3)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "query, key and value must be 3-D");
    const kiln_dtype t = Q->dtype;
    if (!float_like(t) || K->dtype != t || V->dtype != t || (D && D->dtype != t) || (Bt && Bt->dtype != t) ||
        (Ps && !float_like(Ps->dtype)))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "query, key, value, decay and beta must share a float type");
    j.B = Q->dims[0];
    j.T = Q->dims[1];
    j.dk = Q->dims[2] / j.Hq;
    j.dv = V->dims[2] / j.Hkv;
    if (K->dims[0] != j.B || V->dims[0] != j.B || K->dims[1] != j.T || V->dims[1] != j.T ||
        K->dims[2] != j.Hkv * j.dk || Q->dims[2] != j.Hq * j.dk || V->dims[2] != j.Hkv * j.dv)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "query, key and value do not fit the head counts");
    const char *rule = at->update_rule;
    j.gating = !strcmp(rule, "gated") || !strcmp(rule, "gated_delta");
    j.delta = !strcmp(rule, "delta") || !strcmp(rule, "gated_delta");
    if (j.gating != (D != NULL) || j.delta != (Bt != NULL))
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "update_rule '%s' does not fit the decay/beta inputs given", rule);
    if (D) {
        j.decay_last = D->rank == 3 ? D->dims[2] : -1;
        if (D->rank != 3 || D->dims[0] != j.B || D->dims[1] != j.T ||
            (j.decay_last != j.Hkv && j.decay_last != j.Hkv * j.dk))
            return kn_kernel_error(c, KILN_ERR_SHAPE, "decay must be [%lld, %lld, %lld or %lld]", (long long)j.B,
                                   (long long)j.T, (long long)j.Hkv, (long long)(j.Hkv * j.dk));
    }
    if (Bt) {
        j.beta_last = Bt->rank == 3 ? Bt->dims[2] : -1;
        if (Bt->rank != 3 || Bt->dims[0] != j.B || Bt->dims[1] != j.T || (j.beta_last != j.Hkv && j.beta_last != 1))
            return kn_kernel_error(c, KILN_ERR_SHAPE, "beta must be [%lld, %lld, %lld or 1]", (long long)j.B,
                                   (long long)j.T, (long long)j.Hkv);
    }
    if (Ps && (Ps->rank != 4 || Ps->dims[0] != j.B || Ps->dims[1] != j.Hkv || Ps->dims[2] != j.dk || Ps->dims[3] != j.dv))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "past_state must be [%lld, %lld, %lld, %lld]", (long long)j.B,
                               (long long)j.Hkv, (long long)j.dk, (long long)j.dv);
    float sc = at->scale;
    j.scale = sc == 0.0f ? (float)(1.0 / sqrt((double)j.dk)) : sc;
    float *fq = NULL, *fk = NULL, *fv = NULL, *fd = NULL, *fb = NULL, *fp = NULL, *fo = NULL, *fs = NULL;
    kiln_status st = KILN_OK;
    j.q = as_float(Q, &fq);
    j.k = as_float(K, &fk);
    j.v = as_float(V, &fv);
    j.decay = D ? as_float(D, &fd) : NULL;
    j.beta = Bt ? as_float(Bt, &fb) : NULL;
    j.past = Ps ? as_float(Ps, &fp) : NULL;
    j.out = out_float(O, &fo);
    j.state = (St && St->dtype == KILN_DTYPE_FLOAT) ? St->data : (fs = malloc(sizeof(float) * (size_t)(j.B * j.Hkv * j.dk * j.dv + 1)));
    if (!j.q || !j.k || !j.v || (D && !j.decay) || (Bt && !j.beta) || (Ps && !j.past) || !j.out || !j.state) {
        st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    kn_parallel_for(c->pool, j.B * j.Hkv, 1, lin_range, &j);
    if (j.failed) {
        st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    if (fo) kn_attn_from_float(fo, O, kn_tensor_count(O));
    if (St && fs) kn_attn_from_float(fs, St, kn_tensor_count(St));
done:
    free(fq);
    free(fk);
    free(fv);
    free(fd);
    free(fb);
    free(fp);
    free(fo);
    free(fs);
    return st;
}

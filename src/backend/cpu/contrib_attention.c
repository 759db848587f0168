/* com.microsoft Attention, MultiHeadAttention and RotaryEmbedding on the CPU.
 *
 * Both attention operators run on the shared engine (attention_core.c) with ONNX Runtime's mask
 * semantics: a masked key gets mask_filter_value (-10000 by default) added to its score rather
 * than -inf, so a row with every key masked averages all of them. Q, K and V are read through
 * strides wherever the layout allows (the packed QKV projection of Attention, MultiHeadAttention's
 * packed QKV / KV and BNSH key/value), and copied only to add a bias or to build present
 * key/value. Other float types than float32 are converted to float32. */
#include "backend/cpu/attention_impl.h"
#include "backend/cpu/contrib_impl.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/sgemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kn_tensor *opt_in(const kn_kernel_ctx *c, int i) { return i < c->n_inputs ? c->in[i] : NULL; }
static kn_tensor *opt_out(const kn_kernel_ctx *c, int i) { return i < c->n_outputs ? c->out[i] : NULL; }

static bool float_like(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16 || t == KILN_DTYPE_DOUBLE;
}

/* Scratch allocations of one kernel call, freed together. */
typedef struct pool16 {
    void *p[16];
    int n;
} pool16;

static void *palloc(pool16 *p, size_t bytes) {
    if (p->n >= 16) return NULL;
    void *m = malloc(bytes ? bytes : 1);
    if (m) p->p[p->n++] = m;
    return m;
}
static void pfree(pool16 *p) {
    for (int i = 0; i < p->n; i++) free(p->p[i]);
    p->n = 0;
}

/* t as float32: its data, or a converted copy (NULL on OOM). */
static const float *f32_of(pool16 *p, const kn_tensor *t) {
    if (!t) return NULL;
    if (t->dtype == KILN_DTYPE_FLOAT) return t->data;
    int64_t n = kn_tensor_count(t);
    float *f = palloc(p, sizeof(float) * (size_t)n);
    if (f && n) kn_ew_cast_n(t->dtype, t->data, KILN_DTYPE_FLOAT, f, n, 0);
    return f;
}

/* Where float32 results for t go: its data or scratch (converted by out_done). */
static float *f32_out(pool16 *p, kn_tensor *t) {
    if (!t) return NULL;
    if (t->dtype == KILN_DTYPE_FLOAT) return t->data;
    return palloc(p, sizeof(float) * (size_t)kn_tensor_count(t));
}
static void out_done(kn_tensor *t, const float *f) {
    if (t && f && t->dtype != KILN_DTYPE_FLOAT) kn_ew_cast_n(KILN_DTYPE_FLOAT, f, t->dtype, t->data, kn_tensor_count(t), 0);
}

/* dst [B, N, P+L, H] = concat(past [B, N, P, H], cur (B, N, L, H) read through its view). */
static void build_present(float *dst, const float *past, int64_t P, kn_attn_mat cur, int64_t B, int64_t N, int64_t L,
                          int64_t H) {
    const int64_t T = P + L;
    for (int64_t b = 0; b < B; b++)
        for (int64_t n = 0; n < N; n++) {
            float *o = dst + (b * N + n) * T * H;
            if (P) memcpy(o, past + (b * N + n) * P * H, sizeof(float) * (size_t)(P * H));
            for (int64_t s = 0; s < L; s++)
                memcpy(o + (P + s) * H, cur.p + b * cur.sb + n * cur.sh + s * cur.ss, sizeof(float) * (size_t)H);
        }
}

/* The key-padding / mask_index forms shared by both operators (int32 or int64, any integer). */
typedef struct mask_setup {
    int64_t *kv_end, *kv_begin;
    unsigned char *keep;
} mask_setup;

static kiln_status setup_mask(kn_kernel_ctx *c, pool16 *p, kn_attn *a, const kn_tensor *m, int64_t past_len,
                              const char *name) {
    if (!m) return KILN_OK;
    if (!kn_dtype_is_int(m->dtype) && m->dtype != KILN_DTYPE_BOOL)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "%s must be an integer tensor, got %s", name,
                               kiln_dtype_name(m->dtype));
    const int64_t B = a->batch, S = a->sq, T = a->skv, n = kn_tensor_count(m);
    char d[128];
    if (m->rank == 1 && (n == B || n == 2 * B)) {
        /* right padding: key lengths; left padding too: exclusive ends then inclusive starts */
        int64_t *e = palloc(p, sizeof(int64_t) * (size_t)(2 * B));
        if (!e) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        for (int64_t b = 0; b < B; b++) e[b] = kn_tensor_get_i64(m, b);
        a->kv_end = e;
        if (n == 2 * B) {
            for (int64_t b = 0; b < B; b++) e[B + b] = kn_tensor_get_i64(m, B + b);
            a->kv_begin = e + B;
        }
        return KILN_OK;
    }
    unsigned char *keep = palloc(p, (size_t)n);
    if (!keep) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int64_t i = 0; i < n; i++) keep[i] = kn_tensor_get_i64(m, i) != 0;
    if (m->rank == 2 && m->dims[0] == B && m->dims[1] == T) {
        a->keep = (kn_attn_bcast){keep, T, 0, 0, 1};
    } else if (m->rank == 3 && m->dims[0] == B && m->dims[1] == S && m->dims[2] == T) {
        a->keep = (kn_attn_bcast){keep, S * T, 0, T, 1};
    } else if (m->rank == 4 && m->dims[0] == B && m->dims[1] == 1 && m->dims[2] == m->dims[3] &&
               m->dims[2] >= past_len + S && m->dims[3] >= T) {
        /* (B, 1, max, max): rows of the current queries start at the past length */
        int64_t M = m->dims[2];
        a->keep = (kn_attn_bcast){keep + past_len * M, M * M, 0, M, 1};
    } else {
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "%s of shape %s is not supported (expected (%lld), (%lld), "
                               "(%lld, %lld), (%lld, %lld, %lld) or (%lld, 1, M, M))", name,
                               kn_dims_str(m->dims, m->rank, d, sizeof d), (long long)B, (long long)(2 * B),
                               (long long)B, (long long)T, (long long)B, (long long)S, (long long)T, (long long)B);
    }
    return KILN_OK;
}

static kiln_status setup_bias(kn_kernel_ctx *c, pool16 *p, kn_attn *a, const kn_tensor *t, int64_t N) {
    if (!t) return KILN_OK;
    kn_attn_bcast v;
    if (t->rank != 4 || !kn_attn_bcast_strides(t->dims, 4, a->batch, N, a->sq, a->skv, &v)) {
        char d[128];
        return kn_kernel_error(c, KILN_ERR_SHAPE, "attention_bias %s does not broadcast to (%lld, %lld, %lld, %lld)",
                               kn_dims_str(t->dims, t->rank, d, sizeof d), (long long)a->batch, (long long)N,
                               (long long)a->sq, (long long)a->skv);
    }
    v.p = f32_of(p, t);
    if (!v.p) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    a->bias = v;
    return KILN_OK;
}

/* ------------------------------------------------------------------ Attention */

kiln_status kn_cpu_ms_attention(kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0], *W = c->in[1], *Bi = opt_in(c, 2), *M = opt_in(c, 3), *Past = opt_in(c, 4),
                    *AB = opt_in(c, 5);
    kn_tensor *Y = c->out[0], *Pres = opt_out(c, 1);
    if (!float_like(X->dtype) || W->dtype != X->dtype || (Bi && Bi->dtype != X->dtype) || (Past && Past->dtype != X->dtype) ||
        (AB && AB->dtype != X->dtype))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "input, weights, bias, past and attention_bias must share a float type");
    if (X->rank != 3 || W->rank != 2 || X->dims[2] != W->dims[0])
        return kn_kernel_error(c, KILN_ERR_SHAPE, "input must be (B, S, D) and weights (D, 3*hidden)");
    kn_attn_attrs local;
    const kn_attn_attrs *at;
    KN_TRY(kn_attn_attrs_of(c, &local, &at));
    const int64_t B = X->dims[0], S = X->dims[1], Din = X->dims[2], Wc = W->dims[1];
    const int64_t N = at->num_heads;
    const int cnt = at->n_qkv_hidden_sizes;
    const int64_t *hs = at->qkv_hidden_sizes;
    const int64_t Dq = cnt == 3 ? hs[0] : Wc / 3, Dv = cnt == 3 ? hs[2] : Wc / 3;
    if (N <= 0 || Dq % N || Dv % N || Dq + Dq + Dv != Wc)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "weights' %lld columns do not split into Q, K, V for %lld heads",
                               (long long)Wc, (long long)N);
    if (Bi && kn_tensor_count(Bi) != Wc) return kn_kernel_error(c, KILN_ERR_SHAPE, "bias must have %lld elements", (long long)Wc);
    const int64_t H = Dq / N, Hv = Dv / N;
    int64_t P = 0;
    if (Past) {
        if (Past->rank != 5 || Past->dims[0] != 2 || Past->dims[1] != B || Past->dims[2] != N || Past->dims[4] != H ||
            H != Hv)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "past must be (2, %lld, %lld, P, %lld) with equal K and V head sizes",
                                   (long long)B, (long long)N, (long long)H);
        P = Past->dims[3];
    }
    const int64_t T = P + S;
    if (Pres && Hv != H) return kn_kernel_error(c, KILN_ERR_SHAPE, "present needs equal K and V head sizes");
    pool16 p = {0};
    kiln_status st = KILN_OK;
    const float *x = f32_of(&p, X), *w = f32_of(&p, W), *bias = f32_of(&p, Bi);
    float *qkv = palloc(&p, sizeof(float) * (size_t)(B * S * Wc));
    float *y = f32_out(&p, Y);
    if (!x || !w || (Bi && !bias) || !qkv || !y) goto oom;
    /* the projection: [B*S, Din] x [Din, Wc] (+ bias) */
    if (bias)
        for (int64_t r = 0; r < B * S; r++) memcpy(qkv + r * Wc, bias, sizeof(float) * (size_t)Wc);
    st = kn_sgemm(c->pool, false, false, B * S, Wc, Din, 1.0f, x, Din, w, Wc, bias ? 1.0f : 0.0f, qkv, Wc);
    if (st != KILN_OK) goto fail;

    kn_attn a;
    kn_attn_init(&a);
    a.batch = B;
    a.q_heads = a.kv_heads = N;
    a.sq = S;
    a.skv = T;
    a.dk = H;
    a.dv = Hv;
    a.q = (kn_attn_mat){qkv, S * Wc, H, Wc};
    a.k = (kn_attn_mat){qkv + Dq, S * Wc, H, Wc};
    a.v = (kn_attn_mat){qkv + 2 * Dq, S * Wc, Hv, Wc};
    if (Past || Pres) {
        /* present (2, B, N, T, H): K then V */
        float *pres = Pres ? f32_out(&p, Pres) : palloc(&p, sizeof(float) * (size_t)(2 * B * N * T * H));
        const float *past = f32_of(&p, Past);
        if (!pres || (Past && !past)) goto oom;
        build_present(pres, past, P, a.k, B, N, S, H);
        build_present(pres + B * N * T * H, past ? past + B * N * P * H : NULL, P, a.v, B, N, S, H);
        a.k = (kn_attn_mat){pres, N * T * H, T * H, H};
        a.v = (kn_attn_mat){pres + B * N * T * H, N * T * H, T * H, H};
        if (Pres) out_done(Pres, pres);
    }
    a.y = y;
    a.y_sb = S * Dv;
    a.y_sh = Hv;
    a.y_ss = Dv;
    a.scale = at->has_scale && at->scale_raw != 0.0f ? at->scale_raw : (float)(1.0 / sqrt((double)H));
    a.causal = at->unidirectional;
    if (a.causal || P) {
        int64_t *off = palloc(&p, sizeof(int64_t) * (size_t)B);
        if (!off) goto oom;
        for (int64_t b = 0; b < B; b++) off[b] = P;
        a.offset = off;
    }
    a.masked = at->mask_filter_value;
    a.zero_masked_rows = false;
    if ((st = setup_mask(c, &p, &a, M, P, "mask_index")) != KILN_OK) goto done;
    if ((st = setup_bias(c, &p, &a, AB, N)) != KILN_OK) goto done;
    st = kn_attn_run(c->pool, &a);
    if (st != KILN_OK) goto fail;
    out_done(Y, y);
    goto done;
oom:
    st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
fail:
    st = kn_kernel_error(c, st, "%s", kn_last_error());
done:
    pfree(&p);
    return st;
}

/* ------------------------------------------------------------------ MultiHeadAttention */

/* dst [B, S, N*H] = src (viewed) + bias[N*H] */
static void add_bias(float *dst, kn_attn_mat src, const float *bias, int64_t B, int64_t S, int64_t N, int64_t H) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < S; s++)
            for (int64_t n = 0; n < N; n++) {
                const float *in = src.p + b * src.sb + n * src.sh + s * src.ss;
                float *o = dst + ((b * S + s) * N + n) * H;
                const float *bb = bias + n * H;
                for (int64_t x = 0; x < H; x++) o[x] = in[x] + bb[x];
            }
}

kiln_status kn_cpu_ms_multihead_attention(kn_kernel_ctx *c) {
    const kn_tensor *Q = c->in[0], *K = opt_in(c, 1), *V = opt_in(c, 2), *Bi = opt_in(c, 3), *KP = opt_in(c, 4),
                    *AB = opt_in(c, 5), *PK = opt_in(c, 6), *PV = opt_in(c, 7);
    kn_tensor *Y = c->out[0], *PKo = opt_out(c, 1), *PVo = opt_out(c, 2), *QKo = opt_out(c, 3);
    const kiln_dtype dt = Q->dtype;
    const kn_tensor *all[] = {K, V, Bi, AB, PK, PV};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!float_like(dt) || (all[i] && all[i]->dtype != dt))
            return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "query, key, value, bias, attention_bias and past must "
                                   "share a float type");
    if (opt_in(c, 9)) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "cache_indirection is not supported");
    kn_attn_attrs local;
    const kn_attn_attrs *at;
    KN_TRY(kn_attn_attrs_of(c, &local, &at));
    const int64_t N = at->num_heads;
    if (N <= 0) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "num_heads must be positive");
    pool16 p = {0};
    kiln_status st = KILN_OK;
    const float *q = f32_of(&p, Q), *k = f32_of(&p, K), *v = f32_of(&p, V), *bias = f32_of(&p, Bi);
    if (!q || (K && !k) || (V && !v) || (Bi && !bias)) goto oom;
    const int64_t B = Q->dims[0], S = Q->rank >= 2 ? Q->dims[1] : 0;
    int64_t L, H, Hv;
    kn_attn a;
    kn_attn_init(&a);
    bool kv_bnsh = false;
    if (Q->rank == 5) {
        /* packed QKV (B, S, N, 3, H) */
        if (K || V || Q->dims[2] != N || Q->dims[3] != 3) {
            st = kn_kernel_error(c, KILN_ERR_SHAPE, "packed QKV must be (B, S, %lld, 3, H) with no key or value", (long long)N);
            goto done;
        }
        H = Hv = Q->dims[4];
        L = S;
        int64_t ss = N * 3 * H;
        a.q = (kn_attn_mat){q, S * ss, 3 * H, ss};
        a.k = (kn_attn_mat){q + H, S * ss, 3 * H, ss};
        a.v = (kn_attn_mat){q + 2 * H, S * ss, 3 * H, ss};
    } else if (Q->rank == 3 && K) {
        if (Q->dims[2] % N) {
            st = kn_kernel_error(c, KILN_ERR_SHAPE, "query hidden size %lld is not a multiple of %lld heads",
                                 (long long)Q->dims[2], (long long)N);
            goto done;
        }
        H = Q->dims[2] / N;
        a.q = (kn_attn_mat){q, S * N * H, H, N * H};
        if (K->rank == 5) {
            /* packed KV (B, L, N, 2, H) */
            if (V || K->dims[0] != B || K->dims[2] != N || K->dims[3] != 2 || K->dims[4] != H) {
                st = kn_kernel_error(c, KILN_ERR_SHAPE, "packed KV must be (%lld, L, %lld, 2, %lld) with no value",
                                     (long long)B, (long long)N, (long long)H);
                goto done;
            }
            L = K->dims[1];
            Hv = H;
            int64_t ss = N * 2 * H;
            a.k = (kn_attn_mat){k, L * ss, 2 * H, ss};
            a.v = (kn_attn_mat){k + H, L * ss, 2 * H, ss};
        } else if (K->rank == 3 && V && V->rank == 3) {
            L = K->dims[1];
            if (K->dims[0] != B || K->dims[2] != N * H || V->dims[0] != B || V->dims[1] != L || V->dims[2] % N) {
                st = kn_kernel_error(c, KILN_ERR_SHAPE, "key must be (%lld, L, %lld) and value (%lld, L, N*Hv)",
                                     (long long)B, (long long)(N * H), (long long)B);
                goto done;
            }
            Hv = V->dims[2] / N;
            a.k = (kn_attn_mat){k, L * N * H, H, N * H};
            a.v = (kn_attn_mat){v, L * N * Hv, Hv, N * Hv};
        } else if (K->rank == 4 && V && V->rank == 4) {
            /* key/value already (B, N, L, H): cross attention with cached projections */
            L = K->dims[2];
            if (K->dims[0] != B || K->dims[1] != N || K->dims[3] != H || V->dims[0] != B || V->dims[1] != N ||
                V->dims[2] != L) {
                st = kn_kernel_error(c, KILN_ERR_SHAPE, "key and value must be (%lld, %lld, L, %lld)", (long long)B,
                                     (long long)N, (long long)H);
                goto done;
            }
            Hv = V->dims[3];
            a.k = (kn_attn_mat){k, N * L * H, L * H, H};
            a.v = (kn_attn_mat){v, N * L * Hv, L * Hv, Hv};
            kv_bnsh = true;
        } else {
            st = kn_kernel_error(c, KILN_ERR_SHAPE, "unsupported key/value layout (ranks %d and %d)", K->rank,
                                 V ? V->rank : -1);
            goto done;
        }
    } else {
        st = kn_kernel_error(c, KILN_ERR_SHAPE, "query must be (B, S, D) with a key, or packed QKV (B, S, N, 3, H)");
        goto done;
    }
    if (Bi) {
        /* the input projection's bias: copies of Q, K and V with it added */
        const int64_t Dq = N * H, Dvv = N * Hv;
        if (kv_bnsh) {
            st = kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "bias with key/value in (B, N, L, H) layout is not supported");
            goto done;
        }
        if (kn_tensor_count(Bi) != Dq + Dq + Dvv) {
            st = kn_kernel_error(c, KILN_ERR_SHAPE, "bias must have %lld elements", (long long)(Dq + Dq + Dvv));
            goto done;
        }
        float *qb = palloc(&p, sizeof(float) * (size_t)(B * S * Dq)), *kb = palloc(&p, sizeof(float) * (size_t)(B * L * Dq)),
              *vb = palloc(&p, sizeof(float) * (size_t)(B * L * Dvv));
        if (!qb || !kb || !vb) goto oom;
        add_bias(qb, a.q, bias, B, S, N, H);
        add_bias(kb, a.k, bias + Dq, B, L, N, H);
        add_bias(vb, a.v, bias + 2 * Dq, B, L, N, Hv);
        a.q = (kn_attn_mat){qb, S * Dq, H, Dq};
        a.k = (kn_attn_mat){kb, L * Dq, H, Dq};
        a.v = (kn_attn_mat){vb, L * Dvv, Hv, Dvv};
    }
    int64_t P = 0;
    if ((PK == NULL) != (PV == NULL)) {
        st = kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "past_key and past_value must be given together");
        goto done;
    }
    if (PK) {
        if (kv_bnsh || PK->rank != 4 || PV->rank != 4 || PK->dims[0] != B || PK->dims[1] != N || PK->dims[3] != H ||
            PV->dims[0] != B || PV->dims[1] != N || PV->dims[2] != PK->dims[2] || PV->dims[3] != Hv) {
            st = kn_kernel_error(c, KILN_ERR_SHAPE, "past_key/past_value must be (%lld, %lld, P, H) and go with a 3-D "
                                 "key and value", (long long)B, (long long)N);
            goto done;
        }
        P = PK->dims[2];
    }
    const int64_t T = P + L;
    if (PK || PKo || PVo) {
        const float *pk = f32_of(&p, PK), *pv = f32_of(&p, PV);
        float *ko = PKo ? f32_out(&p, PKo) : palloc(&p, sizeof(float) * (size_t)(B * N * T * H));
        float *vo = PVo ? f32_out(&p, PVo) : palloc(&p, sizeof(float) * (size_t)(B * N * T * Hv));
        if (!ko || !vo || (PK && (!pk || !pv))) goto oom;
        build_present(ko, pk, P, a.k, B, N, L, H);
        build_present(vo, pv, P, a.v, B, N, L, Hv);
        a.k = (kn_attn_mat){ko, N * T * H, T * H, H};
        a.v = (kn_attn_mat){vo, N * T * Hv, T * Hv, Hv};
        if (PKo) out_done(PKo, ko);
        if (PVo) out_done(PVo, vo);
    }
    float *y = f32_out(&p, Y);
    float *qk = f32_out(&p, QKo);
    if (!y || (QKo && !qk)) goto oom;
    a.batch = B;
    a.q_heads = a.kv_heads = N;
    a.sq = S;
    a.skv = T;
    a.dk = H;
    a.dv = Hv;
    a.y = y;
    a.y_sb = S * N * Hv;
    a.y_sh = Hv;
    a.y_ss = N * Hv;
    a.scale = at->has_scale && at->scale_raw != 0.0f ? at->scale_raw : (float)(1.0 / sqrt((double)H));
    a.causal = at->unidirectional;
    if (a.causal || P) {
        int64_t *off = palloc(&p, sizeof(int64_t) * (size_t)(B > 0 ? B : 1));
        if (!off) goto oom;
        for (int64_t b = 0; b < B; b++) off[b] = P;
        a.offset = off;
    }
    a.masked = at->mask_filter_value;
    a.zero_masked_rows = false;
    a.qk = qk;
    a.qk_mode = 0;
    if ((st = setup_mask(c, &p, &a, KP, P, "key_padding_mask")) != KILN_OK) goto done;
    if ((st = setup_bias(c, &p, &a, AB, N)) != KILN_OK) goto done;
    st = kn_attn_run(c->pool, &a);
    if (st != KILN_OK) goto fail;
    out_done(Y, y);
    out_done(QKo, qk);
    goto done;
oom:
    st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
fail:
    st = kn_kernel_error(c, st, "%s", kn_last_error());
done:
    pfree(&p);
    return st;
}

/* ------------------------------------------------------------------ RotaryEmbedding (contrib) */

kiln_status kn_cpu_ms_rotary_embedding(kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0], *Pos = c->in[1], *Cs = c->in[2], *Sn = c->in[3];
    kn_tensor *Y = c->out[0];
    if (!float_like(X->dtype) || Cs->dtype != X->dtype || Sn->dtype != X->dtype)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "input, cos_cache and sin_cache must share a float type");
    if (!kn_dtype_is_int(Pos->dtype)) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "position_ids must be integers");
    if (Cs->rank != 2 || Sn->rank != 2 || Cs->dims[0] != Sn->dims[0] || Cs->dims[1] != Sn->dims[1])
        return kn_kernel_error(c, KILN_ERR_SHAPE, "cos_cache and sin_cache must both be (max_position, rotary_dim/2)");
    const int64_t half = Cs->dims[1], max_pos = Cs->dims[0];
    int64_t Bn, S, N, H;
    bool rank3 = X->rank == 3;
    kn_attn_attrs local;
    const kn_attn_attrs *at;
    KN_TRY(kn_attn_attrs_of(c, &local, &at));
    int64_t nh = at->num_heads, rd = at->rotary_dim;
    if (rank3) {
        Bn = X->dims[0];
        S = X->dims[1];
        /* without num_heads the head size is the cache's full rotary width */
        H = nh > 0 ? X->dims[2] / nh : 2 * half;
        N = H > 0 ? X->dims[2] / H : 0;
        if (H <= 0 || N * H != X->dims[2])
            return kn_kernel_error(c, KILN_ERR_SHAPE, "hidden size %lld does not split into heads of %lld",
                                   (long long)X->dims[2], (long long)H);
    } else if (X->rank == 4) {
        Bn = X->dims[0];
        N = X->dims[1];
        S = X->dims[2];
        H = X->dims[3];
    } else {
        return kn_kernel_error(c, KILN_ERR_SHAPE, "input must be 3-D or 4-D");
    }
    if (rd == 0) rd = H;
    if (rd > H || rd != 2 * half)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "rotary dimension %lld does not fit the head size %lld and the cache "
                               "width %lld", (long long)rd, (long long)H, (long long)half);
    const int64_t npos = kn_tensor_count(Pos);
    if (npos != 1 && npos != Bn * S)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "position_ids must have 1 or %lld elements", (long long)(Bn * S));
    const bool inter = at->interleaved;
    pool16 p = {0};
    kiln_status st = KILN_OK;
    const float *x = f32_of(&p, X), *cs = f32_of(&p, Cs), *sn = f32_of(&p, Sn);
    float *y = f32_out(&p, Y);
    if (!x || !cs || !sn || !y) {
        pfree(&p);
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int64_t b = 0; b < Bn && st == KILN_OK; b++)
        for (int64_t s = 0; s < S && st == KILN_OK; s++) {
            int64_t pos = npos == 1 ? kn_tensor_get_i64(Pos, 0) + s : kn_tensor_get_i64(Pos, b * S + s);
            if (pos < 0 || pos >= max_pos) {
                st = kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "position %lld is outside the cache's %lld rows",
                                     (long long)pos, (long long)max_pos);
                break;
            }
            const float *cr = cs + pos * half, *sr = sn + pos * half;
            for (int64_t n = 0; n < N; n++) {
                int64_t off = rank3 ? (b * S + s) * N * H + n * H : ((b * N + n) * S + s) * H;
                const float *xi = x + off;
                float *yo = y + off;
                kn_rotary_rotate(xi, yo, cr, sr, half, inter);
                for (int64_t i = rd; i < H; i++) yo[i] = xi[i];
            }
        }
    if (st == KILN_OK) out_done(Y, y);
    pfree(&p);
    return st;
}

/* ------------------------------------------------------------------ GroupQueryAttention */

/* GroupQueryAttention's do_rotary=1: rotates the first rotary_dim values of each of `heads` heads
 * of every token of x ([B, S, stride], heads at h * H) in place, at position position_ids[b, s] or
 * past_b + s; cos/sin caches are [max_position, rotary_dim / 2]. For 16-bit inputs the rotated
 * values are rounded to that type, as ONNX Runtime computes them in it. */
static kiln_status gqa_rotary(kn_kernel_ctx *c, const kn_tensor *Cs, const kn_tensor *Sn, const kn_tensor *Pos,
                              float *x, int64_t B, int64_t S, int64_t stride, int64_t heads, int64_t H,
                              const int64_t *past, bool inter, kiln_dtype dt, pool16 *p) {
    if (Cs->rank != 2 || Sn->rank != 2 || Cs->dims[0] != Sn->dims[0] || Cs->dims[1] != Sn->dims[1] || Cs->dtype != dt ||
        Sn->dtype != dt)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "cos_cache and sin_cache must both be (max_position, rotary_dim / 2) "
                               "of the query's type");
    const int64_t half = Cs->dims[1], max_pos = Cs->dims[0], rd = 2 * half;
    if (rd > H || rd == 0)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "rotary dimension %lld does not fit the head size %lld", (long long)rd,
                               (long long)H);
    if (Pos && kn_tensor_count(Pos) != B * S)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "position_ids must have %lld elements", (long long)(B * S));
    const float *cs = f32_of(p, Cs), *sn = f32_of(p, Sn);
    if (!cs || !sn) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    const bool round16 = dt != KILN_DTYPE_FLOAT;
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < S; s++) {
            int64_t pos = Pos ? kn_tensor_get_i64(Pos, b * S + s) : past[b] + s;
            if (pos < 0 || pos >= max_pos)
                return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "position %lld is outside the cache's %lld rows",
                                       (long long)pos, (long long)max_pos);
            const float *cr = cs + pos * half, *sr = sn + pos * half;
            for (int64_t h = 0; h < heads; h++) {
                float *v = x + (b * S + s) * stride + h * H;
                kn_rotary_rotate(v, v, cr, sr, half, inter);
                if (round16) {
                    uint16_t tmp[256];
                    for (int64_t i = 0; i < rd; i += 256) {
                        int64_t m = rd - i < 256 ? rd - i : 256;
                        kn_ew_cast_n(KILN_DTYPE_FLOAT, v + i, dt, tmp, m, 0);
                        kn_ew_cast_n(dt, tmp, KILN_DTYPE_FLOAT, v + i, m, 0);
                    }
                }
            }
        }
    return KILN_OK;
}

/* com.microsoft GroupQueryAttention, ONNX Runtime's semantics: num_heads query heads share
 * kv_num_heads key/value heads; batch entry b holds seqlens_k[b] + 1 keys in all. On the first
 * prompt (sequence length == total_sequence_length) the new keys start at 0, otherwise at
 * seqlens_k[b] + 1 - S, after that many keys of the past buffer. present_key/value are
 * [B, kv_heads, max(past buffer, total_sequence_length), H]: past keys, the new ones, zeros after.
 * Causal (query i sits at position past_b + i), keys beyond seqlens_k[b] masked, an optional local
 * window of local_window_size keys ending at the query's own, softcap; computed in float32 (as
 * ONNX Runtime does for float16 inputs). do_rotary rotates the queries and the new keys (cos/sin
 * caches, inputs 7 and 8; positions from position_ids, input 9, else past_b + i). smooth_softmax
 * and head_sink (input 11) add an attention sink per head (a logit of 0, or head_sink's) to every
 * softmax's denominator; attention_bias (input 10) is added to the scores. */
kiln_status kn_cpu_ms_group_query_attention(kn_kernel_ctx *c) {
    const kn_tensor *Q = c->in[0], *K = opt_in(c, 1), *V = opt_in(c, 2), *PK = opt_in(c, 3), *PV = opt_in(c, 4),
                    *SL = opt_in(c, 5), *TL = opt_in(c, 6);
    const kiln_dtype dt = Q->dtype;
    if (!float_like(dt) || dt == KILN_DTYPE_DOUBLE || (K && K->dtype != dt) || (V && V->dtype != dt) ||
        (PK && PK->dtype != dt) || (PV && PV->dtype != dt))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "query, key, value and past must share one type of float, "
                               "float16 or bfloat16");
    kn_attn_attrs local;
    const kn_attn_attrs *at;
    KN_TRY(kn_attn_attrs_of(c, &local, &at));
    const bool rotary = at->do_rotary;
    const kn_tensor *Cs = opt_in(c, 7), *Sn = opt_in(c, 8), *Pos = opt_in(c, 9);
    if (rotary && (!Cs || !Sn))
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "do_rotary=1 needs cos_cache and sin_cache (inputs 7 and 8)");
    if (Pos && !kn_dtype_is_int(Pos->dtype))
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "position_ids must be integers");
    const bool smooth = at->smooth_softmax;
    const kn_tensor *Sink = opt_in(c, 11), *AB = opt_in(c, 10);
    if (c->n_outputs > 3 && c->out[3])
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "the output_qk output is not supported");
    if (!SL || !TL || SL->dtype != KILN_DTYPE_INT32 || TL->dtype != KILN_DTYPE_INT32 || kn_tensor_count(TL) != 1)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "seqlens_k and total_sequence_length must be int32 "
                               "(a vector and a scalar)");
    const int64_t N = at->num_heads, KV = at->kv_heads;
    if (N <= 0 || KV <= 0 || N % KV)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "num_heads (%lld) must be a positive multiple of kv_num_heads "
                               "(%lld)", (long long)N, (long long)KV);
    if (Q->rank != 3) return kn_kernel_error(c, KILN_ERR_SHAPE, "query must be 3-D (batch, sequence, hidden)");
    if ((K == NULL) != (V == NULL) || (PK == NULL) != (PV == NULL))
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "key and value (and past_key and past_value) go together");
    const int64_t B = Q->dims[0], S = Q->dims[1];
    const bool packed = K == NULL;
    const int64_t D = Q->dims[2], H = packed ? D / (N + 2 * KV) : D / N;
    if (H <= 0 || (packed ? H * (N + 2 * KV) != D : H * N != D))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "query hidden size %lld does not fit %lld query heads%s",
                               (long long)D, (long long)N, packed ? " and packed key/value heads" : "");
    if (!packed && (K->rank != 3 || V->rank != 3 || K->dims[0] != B || K->dims[1] != S || K->dims[2] != KV * H ||
                    V->dims[0] != B || V->dims[1] != S || V->dims[2] != KV * H))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "key and value must be (%lld, %lld, %lld)", (long long)B,
                               (long long)S, (long long)(KV * H));
    const int64_t P = PK ? PK->dims[2] : 0;
    if (PK && (PK->rank != 4 || PV->rank != 4 || PK->dims[0] != B || PK->dims[1] != KV || PK->dims[3] != H ||
               memcmp(PK->dims, PV->dims, sizeof(int64_t) * 4)))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "past_key and past_value must be (%lld, %lld, P, %lld)", (long long)B,
                               (long long)KV, (long long)H);
    if (SL->rank != 1 || SL->dims[0] != B)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "seqlens_k must have one entry per batch (%lld)", (long long)B);
    const int64_t total = ((const int32_t *)TL->data)[0];
    const int32_t *sl = SL->data;
    const bool first = S == total;
    if (total < S || (PK && !first && total != P + S && total > P))
        return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "total_sequence_length %lld does not fit sequence length "
                               "%lld and a past of %lld", (long long)total, (long long)S, (long long)P);
    const int64_t T = total > P ? total : P; /* the present buffer's length */
    pool16 p = {0};
    kiln_status st = KILN_OK;
    int64_t *offset = palloc(&p, sizeof(int64_t) * (size_t)(B > 0 ? B : 1));
    int64_t *kv_end = palloc(&p, sizeof(int64_t) * (size_t)(B > 0 ? B : 1));
    if (!offset || !kv_end) goto oom;
    for (int64_t b = 0; b < B; b++) {
        const int64_t tot = (int64_t)sl[b] + 1, past = first ? 0 : tot - S;
        if (tot < 1 || tot > T || past < 0 || past + S > T || (!first && past > P)) {
            st = kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "seqlens_k[%lld] = %d does not fit %lld new tokens, a "
                                 "past buffer of %lld and total_sequence_length %lld", (long long)b, sl[b], (long long)S,
                                 (long long)P, (long long)total);
            goto done;
        }
        offset[b] = past;
        kv_end[b] = tot;
    }
    kn_tensor *Y, *PKo = NULL, *PVo = NULL;
    const int64_t yd[3] = {B, S, N * H}, pd[4] = {B, KV, T, H};
    if ((st = kn_ctx_output(c, 0, dt, 3, yd, &Y)) != KILN_OK) goto done;
    if (c->n_outputs > 1 && c->node->outputs[1] >= 0 && (st = kn_ctx_output(c, 1, dt, 4, pd, &PKo)) != KILN_OK) goto done;
    if (c->n_outputs > 2 && c->node->outputs[2] >= 0 && (st = kn_ctx_output(c, 2, dt, 4, pd, &PVo)) != KILN_OK) goto done;
    const float *q = f32_of(&p, Q), *k = K ? f32_of(&p, K) : NULL, *v = V ? f32_of(&p, V) : NULL;
    const float *pk = f32_of(&p, PK), *pv = f32_of(&p, PV);
    float *y = f32_out(&p, Y);
    const size_t nkv = (size_t)(B * KV * T * H);
    float *kc = palloc(&p, sizeof(float) * nkv), *vc = palloc(&p, sizeof(float) * nkv);
    if (!q || (K && !k) || (V && !v) || (PK && (!pk || !pv)) || !y || !kc || !vc) goto oom;
    if (rotary) {
        /* rotated copies of the queries and new keys (the inputs stay as they are) */
        const bool inter = at->rotary_interleaved;
        size_t nq = (size_t)(B * S * D);
        float *qr = palloc(&p, sizeof(float) * nq);
        if (!qr) goto oom;
        memcpy(qr, q, sizeof(float) * nq);
        st = gqa_rotary(c, Cs, Sn, Pos, qr, B, S, D, packed ? N + KV : N, H, offset, inter, dt, &p);
        if (st == KILN_OK && !packed) {
            size_t nk = (size_t)(B * S * KV * H);
            float *kr = palloc(&p, sizeof(float) * nk);
            if (!kr) goto oom;
            memcpy(kr, k, sizeof(float) * nk);
            st = gqa_rotary(c, Cs, Sn, Pos, kr, B, S, KV * H, KV, H, offset, inter, dt, &p);
            k = kr;
        }
        if (st != KILN_OK) goto done;
        q = qr;
    }
    /* present key/value: the past keys each batch entry keeps, the new ones after them, zeros */
    memset(kc, 0, sizeof(float) * nkv);
    memset(vc, 0, sizeof(float) * nkv);
    const int64_t qs = packed ? D : N * H, kvs = packed ? D : KV * H;
    const float *knew = packed ? q + N * H : k, *vnew = packed ? q + (N + KV) * H : v;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < KV; h++) {
            float *ko = kc + (b * KV + h) * T * H, *vo = vc + (b * KV + h) * T * H;
            if (offset[b] > 0) {
                memcpy(ko, pk + (b * KV + h) * P * H, sizeof(float) * (size_t)(offset[b] * H));
                memcpy(vo, pv + (b * KV + h) * P * H, sizeof(float) * (size_t)(offset[b] * H));
            }
            for (int64_t s = 0; s < S; s++) {
                memcpy(ko + (offset[b] + s) * H, knew + (b * S + s) * kvs + h * H, sizeof(float) * (size_t)H);
                memcpy(vo + (offset[b] + s) * H, vnew + (b * S + s) * kvs + h * H, sizeof(float) * (size_t)H);
            }
        }
    kn_attn a;
    kn_attn_init(&a);
    if (Sink || smooth) {
        /* an attention sink per head: head_sink's logits, or 0 for smooth_softmax */
        if (Sink && (Sink->dtype != dt || kn_tensor_count(Sink) != N)) {
            st = kn_kernel_error(c, KILN_ERR_SHAPE, "head_sink must hold num_heads (%lld) values of the query's type",
                                 (long long)N);
            goto done;
        }
        float *sink = palloc(&p, sizeof(float) * (size_t)N);
        if (!sink) goto oom;
        for (int64_t h = 0; h < N; h++) sink[h] = Sink ? (float)kn_tensor_get_f64(Sink, h) : 0.0f;
        a.sink = sink;
    }
    a.batch = B, a.q_heads = N, a.kv_heads = KV, a.sq = S, a.skv = T, a.dk = a.dv = H;
    if (AB) {
        /* (B or 1, N or 1, S, total_sequence_length), added to the scores; a static cache's keys
         * past the total are masked anyway (mask_cols) */
        kn_attn_bcast v;
        if (AB->dtype != dt || AB->rank != 4 || !kn_attn_bcast_strides(AB->dims, 4, B, N, S, total, &v)) {
            char d[128];
            st = kn_kernel_error(c, KILN_ERR_SHAPE, "attention_bias %s %s does not broadcast to (%lld, %lld, %lld, %lld) "
                                 "of the query's type", kiln_dtype_name(AB->dtype), kn_dims_str(AB->dims, AB->rank, d, sizeof d),
                                 (long long)B, (long long)N, (long long)S, (long long)total);
            goto done;
        }
        v.p = f32_of(&p, AB);
        if (!v.p) goto oom;
        a.bias = v;
        if (total < T) a.mask_cols = total;
    }
    a.q = (kn_attn_mat){q, S * qs, H, qs};
    a.k = (kn_attn_mat){kc, KV * T * H, T * H, H};
    a.v = (kn_attn_mat){vc, KV * T * H, T * H, H};
    a.y = y, a.y_sb = S * N * H, a.y_sh = H, a.y_ss = N * H;
    const float scale = at->scale;
    a.scale = scale != 0.0f ? scale : 1.0f / sqrtf((float)H);
    a.softcap = at->softcap;
    a.causal = true;
    a.offset = offset;
    a.kv_end = kv_end;
    const int64_t window = at->local_window_size;
    a.left_window = window > 0 ? window - 1 : -1; /* the window holds the query's own key and window - 1 before */
    a.zero_masked_rows = true;
    if ((st = kn_attn_run(c->pool, &a)) != KILN_OK) {
        st = kn_kernel_error(c, st, "%s", kn_last_error());
        goto done;
    }
    out_done(Y, y);
    if (PKo) kn_ew_cast_n(KILN_DTYPE_FLOAT, kc, dt, PKo->data, (int64_t)nkv, 0);
    if (PVo) kn_ew_cast_n(KILN_DTYPE_FLOAT, vc, dt, PVo->data, (int64_t)nkv, 0);
    goto done;
oom:
    st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory for the attention buffers");
done:
    pfree(&p);
    return st;
}

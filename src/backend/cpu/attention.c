/* ai.onnx Attention (opset 23, 24, 25) on the CPU, and the attention family's kernel table.
 *
 * float32 inputs run in place: the engine reads Q, K, V through strides, so the 3-D layout
 * (heads packed in the last dimension) needs no transpose. With past_key/past_value the present
 * tensors are built first and the engine reads K and V from them. Other types are converted to
 * float32; for float16/bfloat16 the engine rounds every intermediate the way the reference does. */
#include "backend/cpu/attention_impl.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/elementwise_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kn_tensor *opt_in(const kn_kernel_ctx *c, int i) { return i < c->n_inputs ? c->in[i] : NULL; }
static kn_tensor *opt_out(const kn_kernel_ctx *c, int i) { return i < c->n_outputs ? c->out[i] : NULL; }

/* dst [B, H, Sp+S, D] = concat(past [B, H, Sp, D], cur) along the sequence; cur is [B, H, S, D]
 * (rank 4) or [B, S, H*D] (rank 3). Elements of esz bytes. */
static void concat_kv(const kn_tensor *past, const kn_tensor *cur, int64_t B, int64_t H, int64_t Sp, int64_t S,
                      int64_t D, size_t esz, char *dst) {
    const int64_t T = Sp + S;
    const size_t row = (size_t)D * esz;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            char *o = dst + (size_t)((b * H + h) * T * D) * esz;
            if (Sp > 0) memcpy(o, (const char *)past->data + (size_t)((b * H + h) * Sp * D) * esz, row * (size_t)Sp);
            o += row * (size_t)Sp;
            for (int64_t s = 0; s < S; s++) {
                int64_t off = cur->rank == 4 ? ((b * H + h) * S + s) * D : (b * S + s) * H * D + h * D;
                memcpy(o + row * (size_t)s, (const char *)cur->data + (size_t)off * esz, row);
            }
        }
}

typedef struct attn_bufs {
    void *pk, *pv;          /* concatenated K/V when there is a past but no present output */
    float *q, *k, *v, *y, *qk, *mask;
    int64_t *offset;
} attn_bufs;

static void bufs_free(attn_bufs *b) {
    free(b->pk);
    free(b->pv);
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->y);
    free(b->qk);
    free(b->mask);
    free(b->offset);
}

/* n elements of type t to float; for the emulated path Q and K are multiplied by sc and
 * rounded to t, as the reference's Q * sqrt(scale) in that type. */
static float *to_float_scaled(kiln_dtype t, const void *src, int64_t n, bool emulate, float sc) {
    float *f = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!f) return NULL;
    if (n > 0) kn_ew_cast_n(t, src, KILN_DTYPE_FLOAT, f, n, 0);
    if (emulate)
        for (int64_t i = 0; i < n; i++) f[i] = kn_attn_round(t, f[i] * sc);
    return f;
}

static kiln_status run_attention(kn_kernel_ctx *c) {
    const kn_tensor *Q = c->in[0], *K = c->in[1], *V = c->in[2];
    const kn_tensor *M = opt_in(c, 3), *PK = opt_in(c, 4), *PV = opt_in(c, 5), *NP = opt_in(c, 6);
    kn_tensor *Y = c->out[0], *PKo = opt_out(c, 1), *PVo = opt_out(c, 2), *QKo = opt_out(c, 3);
    const int rank = Q->rank;
    if ((rank != 3 && rank != 4) || K->rank != rank || V->rank != rank)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "Q, K and V must all be 3-D or all 4-D");
    if ((PK == NULL) != (PV == NULL))
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "past_key and past_value must be given together");
    kn_attn_attrs local;
    const kn_attn_attrs *at;
    KN_TRY(kn_attn_attrs_of(c, &local, &at));
    const int64_t B = Q->dims[0];
    int64_t Hq, Hkv, Sq, Skv, Dk, Dv;
    if (rank == 3) {
        Hq = at->q_heads;
        Hkv = at->kv_heads;
        if (Hq <= 0 || Hkv <= 0) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "3-D inputs need q_num_heads and kv_num_heads");
        Sq = Q->dims[1];
        Skv = K->dims[1];
        Dk = Q->dims[2] / Hq;
        Dv = V->dims[2] / Hkv;
        if (K->dims[2] != Hkv * Dk || V->dims[1] != Skv)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "K and V do not fit Q and the head counts");
    } else {
        Hq = Q->dims[1];
        Sq = Q->dims[2];
        Dk = Q->dims[3];
        Hkv = K->dims[1];
        Skv = K->dims[2];
        Dv = V->dims[3];
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
    if (K->dtype != dt || (PK && PK->dtype != dt) || (PV && PV->dtype != V->dtype))
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "Q, K (and past_key) must have one type, V and past_value one");

    kn_attn a;
    kn_attn_init(&a);
    attn_bufs bf;
    memset(&bf, 0, sizeof bf);
    kiln_status st = KILN_OK;

    /* present key/value: the outputs when asked for, else (with a past) temporary buffers */
    const kn_tensor *ksrc = K, *vsrc = V;
    kn_tensor kt, vt;
    if (PK || PKo) {
        size_t esz = kiln_dtype_size(dt);
        void *dst = PKo ? PKo->data : (bf.pk = malloc(esz * (size_t)(B * Hkv * T * Dk) + 1));
        if (!dst) goto oom;
        concat_kv(PK, K, B, Hkv, Sp, Skv, Dk, esz, dst);
        int64_t d[4] = {B, Hkv, T, Dk};
        kt = (kn_tensor){.dtype = dt, .rank = 4, .data = dst};
        memcpy(kt.dims, d, sizeof d);
        ksrc = &kt;
    }
    if (PV || PVo) {
        size_t esz = kiln_dtype_size(V->dtype);
        void *dst = PVo ? PVo->data : (bf.pv = malloc(esz * (size_t)(B * Hkv * T * Dv) + 1));
        if (!dst) goto oom;
        concat_kv(PV, V, B, Hkv, Sp, Skv, Dv, esz, dst);
        int64_t d[4] = {B, Hkv, T, Dv};
        vt = (kn_tensor){.dtype = V->dtype, .rank = 4, .data = dst};
        memcpy(vt.dims, d, sizeof d);
        vsrc = &vt;
    }

    /* scale: 1/sqrt(head size) unless given; the reference scales Q and K by sqrt(scale) */
    double scale = at->has_scale ? (double)at->scale_raw : 1.0 / sqrt((double)Dk);
    int64_t smp = at->softmax_precision;
    a.round_to = dt == KILN_DTYPE_DOUBLE ? KILN_DTYPE_FLOAT : dt;
    a.softmax_to = smp ? (kiln_dtype)smp : KILN_DTYPE_UNDEFINED;
    const bool emulate = dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16 || smp == KILN_DTYPE_FLOAT16 ||
                         smp == KILN_DTYPE_BFLOAT16;
    const bool direct = dt == KILN_DTYPE_FLOAT && V->dtype == KILN_DTYPE_FLOAT;
    float sc = kn_attn_round(a.round_to, (float)sqrt(scale));
    a.scale = emulate ? 1.0f : (float)scale;

    const int64_t nq = kn_tensor_count(Q), nk = B * (ksrc == K ? Skv : T) * Hkv * Dk,
                  nv = B * (vsrc == V ? Skv : T) * Hkv * Dv, ny = kn_tensor_count(Y);
    const float *qf, *kf, *vf;
    float *yf;
    if (direct && !emulate) {
        qf = Q->data;
        kf = ksrc->data;
        vf = vsrc->data;
        yf = Y->data;
    } else {
        if (!(bf.q = to_float_scaled(dt, Q->data, nq, emulate, sc)) ||
            !(bf.k = to_float_scaled(dt, ksrc->data, nk, emulate, sc)) ||
            !(bf.v = to_float_scaled(vsrc->dtype, vsrc->data, nv, false, 1.0f)))
            goto oom;
        qf = bf.q;
        kf = bf.k;
        vf = bf.v;
        if (direct) {
            yf = Y->data;
        } else {
            if (!(bf.y = malloc(sizeof(float) * (size_t)(ny > 0 ? ny : 1)))) goto oom;
            yf = bf.y;
        }
    }

    a.batch = B;
    a.q_heads = Hq;
    a.kv_heads = Hkv;
    a.sq = Sq;
    a.skv = T;
    a.dk = Dk;
    a.dv = Dv;
    if (rank == 4) {
        a.q = (kn_attn_mat){qf, Hq * Sq * Dk, Sq * Dk, Dk};
        a.y = yf, a.y_sb = Hq * Sq * Dv, a.y_sh = Sq * Dv, a.y_ss = Dv;
    } else {
        a.q = (kn_attn_mat){qf, Sq * Hq * Dk, Dk, Hq * Dk};
        a.y = yf, a.y_sb = Sq * Hq * Dv, a.y_sh = Dv, a.y_ss = Hq * Dv;
    }
    if (ksrc != K || rank == 4) a.k = (kn_attn_mat){kf, Hkv * T * Dk, T * Dk, Dk};
    else a.k = (kn_attn_mat){kf, Skv * Hkv * Dk, Dk, Hkv * Dk};
    if (vsrc != V || rank == 4) a.v = (kn_attn_mat){vf, Hkv * T * Dv, T * Dv, Dv};
    else a.v = (kn_attn_mat){vf, Skv * Hkv * Dv, Dv, Hkv * Dv};

    a.softcap = at->softcap;
    a.causal = at->is_causal;
    a.left_window = at->left_window;
    a.right_window = at->right_window;
    if (a.left_window < -1 || a.right_window < -1) {
        st = kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "left_window_size and right_window_size must be -1 or >= 0");
        goto done;
    }
    a.masked = -INFINITY;
    a.zero_masked_rows = true;

    if (M) {
        int64_t mc = M->rank >= 1 ? M->dims[M->rank - 1] : 1;
        kn_attn_bcast v;
        if (M->rank < 1 || mc > T || !kn_attn_bcast_strides(M->dims, M->rank, B, Hq, Sq, mc, &v)) {
            char d[128];
            st = kn_kernel_error(c, KILN_ERR_SHAPE, "attn_mask %s does not broadcast to [%lld, %lld, %lld, %lld]",
                                 kn_dims_str(M->dims, M->rank, d, sizeof d), (long long)B, (long long)Hq, (long long)Sq,
                                 (long long)T);
            goto done;
        }
        if (mc < T) a.mask_cols = mc;
        if (M->dtype == KILN_DTYPE_BOOL) {
            v.p = M->data;
            a.keep = v;
        } else if (M->dtype == KILN_DTYPE_FLOAT) {
            v.p = M->data;
            a.bias = v;
        } else if (M->dtype == KILN_DTYPE_FLOAT16 || M->dtype == KILN_DTYPE_BFLOAT16 || M->dtype == KILN_DTYPE_DOUBLE) {
            if (!(bf.mask = kn_attn_to_float(M))) goto oom;
            v.p = bf.mask;
            a.bias = v;
        } else {
            st = kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "attn_mask of type %s is not supported (bool or float types)",
                                 kiln_dtype_name(M->dtype));
            goto done;
        }
    }
    if (PK || NP) {
        if (!(bf.offset = malloc(sizeof(int64_t) * (size_t)(B > 0 ? B : 1)))) goto oom;
        if (NP) {
            if (NP->dtype != KILN_DTYPE_INT64 || kn_tensor_count(NP) != B) {
                st = kn_kernel_error(c, KILN_ERR_SHAPE, "nonpad_kv_seqlen must be int64 with one entry per batch (%lld)",
                                     (long long)B);
                goto done;
            }
            const int64_t *np = NP->data;
            for (int64_t b = 0; b < B; b++) bf.offset[b] = np[b] - Sq;
            a.kv_end = np;
        } else {
            for (int64_t b = 0; b < B; b++) bf.offset[b] = Sp;
        }
        a.offset = bf.offset;
    }
    if (QKo) {
        a.qk_mode = at->qk_mode;
        if (QKo->dtype == KILN_DTYPE_FLOAT) {
            a.qk = QKo->data;
        } else {
            int64_t n = kn_tensor_count(QKo);
            if (!(bf.qk = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1)))) goto oom;
            a.qk = bf.qk;
        }
    }
    st = kn_attn_run(c->pool, &a);
    if (st != KILN_OK) {
        st = kn_kernel_error(c, st, "%s", kn_last_error());
        goto done;
    }
    if (bf.y) kn_attn_from_float(bf.y, Y, ny);
    if (bf.qk) kn_attn_from_float(bf.qk, QKo, kn_tensor_count(QKo));
    goto done;
oom:
    st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory for the attention buffers");
done:
    bufs_free(&bf);
    return st;
}

const kn_cpu_kernel kn_cpu_attention[] = {
    {"", "Attention", run_attention, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {"", "RotaryEmbedding", kn_cpu_rotary_embedding, NULL, KN_KERNEL_OVERWRITES,
     KN_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {"", "SwiGLU", kn_cpu_swiglu, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {"", "LinearAttention", kn_cpu_linear_attention, NULL, KN_KERNEL_OVERWRITES,
     KN_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {"", "CausalConvWithState", kn_cpu_causal_conv_with_state, NULL, KN_KERNEL_OVERWRITES,
     KN_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {"ai.onnx.preview", "FlexAttention", kn_cpu_flex_attention, NULL, KN_KERNEL_OVERWRITES,
     KN_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {0},
};

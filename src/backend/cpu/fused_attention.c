/* kiln.Attention on the CPU: softmax(scale * Q KT + mask) V per batch entry, computed a block of
 * query rows at a time. Each task takes (batch entry, row block) pairs: the block's scores go to a
 * scratch buffer small enough for L2, get the mask, the softmax and the NaN handling in place and
 * are multiplied by V straight into the output. The unfused graph writes the whole
 * [batch, Sq, Sk] score tensor once per MatMul, Add, Softmax, IsNaN and Where. */
#include "backend/cpu/fused_impl.h"

#include "backend/cpu/nn_internal.h"
#include "backend/cpu/sgemm.h"
#include "backend/cpu/sgemm_bf16.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Query rows per task: as many as keep the score block near 256 KB, at least 36. */
#define SCORE_BLOCK_FLOATS 65536

typedef struct attn_job {
    const float *q, *kt, *v;
    float *y;
    int64_t batch, sq, sk, d, dv;
    float scale;
    bool nan_to_zero;
    const void *mask;
    bool mask_bool;
    int nb;                        /* batch rank */
    int64_t bdims[KILN_MAX_RANK];  /* output batch dims */
    /* per batch dim, the element stride of Q, KT, V and the mask (0 where it broadcasts) */
    int64_t bstride[4][KILN_MAX_RANK];
    int64_t ms_i, ms_j;            /* the mask's strides along Sq and Sk */
    /* row strides of Q, KT (along its d rows, or along its keys when kt_by_key: K stored
     * [key][d], an operand view of an untransposed K), V and Y; the output's batch strides */
    int64_t q_rs, kt_ld, v_rs, y_rs;
    bool kt_by_key;
    int64_t y_bstride[KILN_MAX_RANK];
    int64_t rows_per_block;
    int64_t blocks;                /* row blocks per batch entry */
    void *bf16_state;              /* precision=bf16: the mark for the pool's threads (sgemm_bf16.h) */
    kiln_status status;
} attn_job;

/* Element offsets of batch entry b in Q, KT, V and the mask. */
/* Element offsets of batch entry b in Q, KT, V, the mask and Y. */
static void batch_offsets(const attn_job *j, int64_t b, int64_t off[5]) {
    off[0] = off[1] = off[2] = off[3] = off[4] = 0;
    for (int d = j->nb - 1; d >= 0; d--) {
        int64_t i = b % j->bdims[d];
        b /= j->bdims[d];
        for (int t = 0; t < 4; t++) off[t] += i * j->bstride[t][d];
        off[4] += i * j->y_bstride[d];
    }
}

/* The mask on every row of a block of scores, then the rows' softmax four at a time
 * (kn_softmax_rows_f32, the Softmax operator's row kernel: a NaN score makes the whole row NaN,
 * a row with every key masked out is 0/0: NaN), then nan_to_zero. Row by row, each row's two
 * horizontal reductions were most of the softmax's time (BERT-base's 128 keys: attention 0.83-0.91
 * of its time, ViT-B/16's 197: 0.87, results bit for bit the same). */
static void softmax_rows(const attn_job *j, float *s, int64_t rows, int64_t i0, int64_t moff, uint16_t *p16,
                         int64_t ld16) {
    const int64_t sk = j->sk;
    if (j->mask)
        for (int64_t r = 0; r < rows; r++) {
            float *row = s + r * sk;
            const int64_t base = moff + (i0 + r) * j->ms_i;
            if (j->mask_bool) {
                const unsigned char *m = (const unsigned char *)j->mask + base;
                for (int64_t k = 0; k < sk; k++)
                    if (!m[k * j->ms_j]) row[k] = -INFINITY;
            } else {
                const float *m = (const float *)j->mask + base;
                if (j->ms_j == 1)
                    for (int64_t k = 0; k < sk; k++) row[k] += m[k];
                else
                    for (int64_t k = 0; k < sk; k++) row[k] += m[k * j->ms_j];
            }
        }
    if (p16) { /* the probabilities in bf16 rows (fused_attention's rows16) */
        kn_softmax_rows_f32_to_bf16(s, rows, sk, sk, p16, ld16);
        if (j->nan_to_zero)
            for (int64_t r = 0; r < rows; r++)
                for (int64_t k = 0; k < sk; k++)
                    if ((p16[r * ld16 + k] & 0x7fff) > 0x7f80) p16[r * ld16 + k] = 0;
        return;
    }
    kn_softmax_rows_f32(s, rows, sk, sk);
    if (j->nan_to_zero)
        for (int64_t i = 0; i < rows * sk; i++) s[i] = s[i] != s[i] ? 0.0f : s[i];
}

/* One product of a block under precision=bf16 with op(B) already rounded and packed (b16: KT or
 * V of the entry, kn_bgemm_pack_b); where the bf16 GEMM does not take the shape (a few rows), fp32
 * as kn_sgemm_run would run it. */
static kiln_status bf16_product(const kn_sgemm_batch *p, const uint16_t *b16) {
    if (!b16 || !kn_bgemm_takes(p)) return kn_sgemm_run(NULL, p);
    return kn_bgemm_run_prepacked(NULL, p, NULL, &b16);
}

/* Each task packs KT and V of a batch entry once (kn_sgemm_pack_b_full) when it runs two or more
 * of that entry's row blocks: unpacked, every block's two products packed them again (whisper's
 * encoder, 1500 keys in blocks of 43 rows: the packing was a fifth of the attention's time). */
static void attn_range(void *arg, int64_t t0, int64_t t1) {
    attn_job *j = arg;
    float *s = malloc(sizeof(float) * (size_t)(j->rows_per_block * j->sk + 1));
    float *kt_packed = NULL, *v_packed = NULL; /* entry packed_entry's KT and V, allocated when first needed */
    /* precision=bf16: the entry's KT and V rounded and packed once for all its row blocks in this
     * range (each block's two products packed them again: whisper's encoder, 1500 keys in 32 blocks
     * a head, spent a third of its time there) */
    uint16_t *kt16 = NULL, *v16 = NULL;
    /* and on AMX the softmax's probabilities in bf16 rows (rows rounded up to 32 of ld16: the keys
     * rounded up to 32, zero past them), which the tiles of the product by V read as they are: the
     * softmax's last pass rounds them (packing the fp32 rows was a pass of its own) */
    const bool rows16 = j->bf16_state && kn_bgemm_amx() && j->d > 0 && j->dv > 0;
    const int64_t ld16 = (j->sk + 31) / 32 * 32;
    uint16_t *p16 = rows16 ? calloc((size_t)((j->rows_per_block + 31) / 32 * 32 * ld16), sizeof(uint16_t)) : NULL;
    int64_t packed_entry = -1;
    if (!s) {
        free(p16);
        j->status = KILN_ERR_OUT_OF_MEMORY;
        return;
    }
    kn_bgemm_scope scope;
    if (j->bf16_state) kn_bgemm_enter(j->bf16_state, &scope);
    for (int64_t t = t0; t < t1; t++) {
        int64_t b = t / j->blocks, blk = t % j->blocks;
        int64_t i0 = blk * j->rows_per_block, rows = j->sq - i0 < j->rows_per_block ? j->sq - i0 : j->rows_per_block;
        int64_t off[5];
        batch_offsets(j, b, off);
        const float *q = j->q + off[0] + i0 * j->q_rs;
        const float *kt = j->kt + off[1];
        const float *v = j->v + off[2];
        float *y = j->y + off[4] + i0 * j->y_rs;
        /* this entry's blocks left in the range; the bf16 products read their operands themselves */
        const int64_t entry_end = (b + 1) * j->blocks < t1 ? (b + 1) * j->blocks : t1;
        if (b != packed_entry && j->bf16_state && j->d > 0 && rows >= 4) { /* (fewer rows: fp32, kn_bgemm_takes) */
            if (!kt16) {
                kt16 = malloc(sizeof(uint16_t) * kn_bgemm_packed_b_elems(j->sk, j->d));
                v16 = malloc(sizeof(uint16_t) * kn_bgemm_packed_b_elems(j->dv, j->sk));
            }
            if (kt16 && v16) {
                kn_bgemm_pack_b(kt, j->kt_ld, j->kt_by_key, j->sk, j->d, kt16);
                kn_bgemm_pack_b(v, j->v_rs, false, j->dv, j->sk, v16);
                packed_entry = b;
            }
        }
        if (b != packed_entry && !j->bf16_state && entry_end - t >= 2 && j->d > 0) {
            if (!kt_packed) {
                kt_packed = malloc(sizeof(float) * kn_sgemm_packed_b_floats(j->sk, j->d));
                v_packed = malloc(sizeof(float) * kn_sgemm_packed_b_floats(j->dv, j->sk));
            }
            if (kt_packed && v_packed) {
                kn_sgemm_pack_b_full(kt, j->kt_ld, j->kt_by_key, j->sk, j->d, kt_packed);
                kn_sgemm_pack_b_full(v, j->v_rs, false, j->dv, j->sk, v_packed);
                packed_entry = b;
            }
        }
        const bool packed = b == packed_entry;
        if (j->d > 0) {
            const kn_sgemm_batch p = {.count = 1, .M = rows, .N = j->sk, .K = j->d, .trans_b = j->kt_by_key,
                                      .alpha = j->scale, .a = &q, .lda = j->q_rs, .b = &kt, .ldb = j->kt_ld,
                                      .c = &s, .ldc = j->sk,
                                      .b_packed = packed && !j->bf16_state ? (const float *const *)&kt_packed : NULL};
            if (j->bf16_state ? bf16_product(&p, packed ? kt16 : NULL) : kn_sgemm_run(NULL, &p)) {
                j->status = KILN_ERR_OUT_OF_MEMORY;
                break;
            }
        } else {
            memset(s, 0, sizeof(float) * (size_t)(rows * j->sk));
        }
        if (p16 && packed && rows >= 4) {
            const kn_sgemm_batch p = {.count = 1, .M = rows, .N = j->dv, .K = j->sk, .alpha = 1.0f, .a = (const float **)&s,
                                      .lda = j->sk, .b = &v, .ldb = j->v_rs, .c = &y, .ldc = j->y_rs};
            if (kn_bgemm_takes(&p)) {
                softmax_rows(j, s, rows, i0, off[3], p16, ld16);
                if (kn_bgemm_run_rows16(&p, p16, ld16, v16)) {
                    j->status = KILN_ERR_OUT_OF_MEMORY;
                    break;
                }
                continue;
            }
        }
        softmax_rows(j, s, rows, i0, off[3], NULL, 0);
        if (j->dv > 0) {
            const float *sv = s;
            const kn_sgemm_batch p = {.count = 1, .M = rows, .N = j->dv, .K = j->sk, .alpha = 1.0f, .a = &sv,
                                      .lda = j->sk, .b = &v, .ldb = j->v_rs, .c = &y, .ldc = j->y_rs,
                                      .b_packed = packed && !j->bf16_state ? (const float *const *)&v_packed : NULL};
            if (j->bf16_state ? bf16_product(&p, packed ? v16 : NULL) : kn_sgemm_run(NULL, &p)) {
                j->status = KILN_ERR_OUT_OF_MEMORY;
                break;
            }
        }
    }
    if (j->bf16_state) kn_bgemm_leave(&scope);
    free(kt_packed);
    free(v_packed);
    free(kt16);
    free(v16);
    free(p16);
    free(s);
}

bool kn_cpu_fused_attention_supports(const kn_node *node, const kn_type *const *in, int n_in, char *why, size_t cap) {
    for (int i = 0; i < 3 && i < n_in; i++)
        if (!in[i] || in[i]->dtype != KILN_DTYPE_FLOAT) {
            snprintf(why, cap, "kiln.Attention on the CPU takes float32 Q, KT and V");
            return false;
        }
    if (n_in > 3 && in[3] && in[3]->dtype != KILN_DTYPE_FLOAT && in[3]->dtype != KILN_DTYPE_BOOL) {
        snprintf(why, cap, "the mask must be float32 or bool");
        return false;
    }
    return true;
}

/* Batch strides of a tensor of rank <= r (right-aligned) against the output batch dims. */
static bool batch_strides(const kn_tensor *t, int r, const int64_t *bdims, int64_t *stride) {
    int64_t st = 1;
    int64_t full[KILN_MAX_RANK];
    for (int d = r - 1; d >= 0; d--) {
        int td = d - (r - t->rank);
        full[d] = td >= 0 ? t->dims[td] : 1;
    }
    for (int d = r - 1; d >= 0; d--) {
        if (d < r - 2) {
            if (full[d] != 1 && full[d] != bdims[d]) return false;
            stride[d] = full[d] == 1 ? 0 : st;
        }
        st *= full[d];
    }
    return true;
}

static kiln_status fused_attention_dense(kn_kernel_ctx *c, const kn_attn_view *const *vw, const kn_cpu_attn_prm *prm);
static bool views_direct(const kn_attn_view *const *vw);

/* With operand views (fold_attention_views) the kernel cannot read in place (a row whose last dim
 * is not contiguous): each viewed operand gathered into a dense copy, Y computed into one and
 * scattered through its view. */
static kiln_status fused_attention_views(kn_kernel_ctx *c, const kn_attn_view *v, const int *has,
                                         const kn_cpu_attn_prm *prm) {
    kn_tensor *tmp[4] = {NULL, NULL, NULL, NULL};
    kn_tensor *ins[4] = {c->in[0], c->in[1], c->in[2], c->n_inputs > 3 ? c->in[3] : NULL}, *outs[1] = {c->out[0]};
    kiln_status st = KILN_OK;
    for (int i = 0; i < 4 && st == KILN_OK; i++) {
        if (!has[i]) continue;
        kn_tensor *t = i < 3 ? c->in[i] : c->out[0];
        if (!t) {
            st = kn_kernel_error(c, KILN_ERR_INTERNAL, "output shape unknown at run time");
            break;
        }
        if (!kn_attn_view_fits(&v[i], kn_tensor_count(t))) {
            st = kn_kernel_error(c, KILN_ERR_SHAPE, "%s does not fit the %s tensor of %lld elements", kn_attn_view_name(i),
                                 i < 3 ? "input" : "output", (long long)kn_tensor_count(t));
            break;
        }
        st = kn_tensor_new(t->dtype, v[i].rank, v[i].dims, &tmp[i]);
        if (st != KILN_OK) break;
        if (i < 3) {
            kn_attn_view_copy(kiln_dtype_size(t->dtype), t->data, &v[i], tmp[i]->data, true);
            ins[i] = tmp[i];
        } else {
            outs[0] = tmp[i];
        }
    }
    if (st == KILN_OK) {
        kn_kernel_ctx dense = *c;
        dense.in = ins;
        dense.out = outs;
        const kn_attn_view *none[4] = {NULL, NULL, NULL, NULL};
        st = fused_attention_dense(&dense, none, prm);
    }
    if (st == KILN_OK && has[3]) kn_attn_view_copy(kiln_dtype_size(c->out[0]->dtype), c->out[0]->data, &v[3], tmp[3]->data, false);
    for (int i = 0; i < 4; i++) kn_tensor_free(tmp[i]);
    return st;
}

kiln_status kn_cpu_fused_attention_prepare(const kn_node *n, void *params) {
    kn_cpu_attn_prm *p = params;
    memset(p, 0, sizeof *p);
    char why[160];
    for (int i = 0; i < 4; i++) p->has[i] = kn_attn_view_get(n, i, &p->v[i], why, sizeof why);
    p->scale = kn_attr_float(n, "scale", 1.0f);
    p->nan_to_zero = kn_attr_int(n, "nan_to_zero", 0) != 0;
    return KILN_OK;
}

kiln_status kn_cpu_fused_attention(kn_kernel_ctx *c) {
    KN_CTX_PRM(c, kn_cpu_fused_attention_prepare, kn_cpu_attn_prm, prm);
    const int *has = prm->has;
    kn_attn_view v[4]; /* the views with this run's sizes for their symbolic dims */
    int any = 0;
    for (int i = 0; i < 4; i++) {
        if (has[i] < 0) { /* malformed: read again for the reason */
            kn_attn_view bad;
            char why[160];
            kn_attn_view_get(c->node, i, &bad, why, sizeof why);
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "%s", why);
        }
        any |= has[i];
        const kn_tensor *t = i < 3 ? c->in[i] : c->out[0];
        v[i] = prm->v[i];
        if (has[i] && t && !kn_attn_view_bind(&v[i], t->dims, t->rank))
            return kn_kernel_error(c, KILN_ERR_SHAPE, "%s names a dim the rank-%d %s lacks", kn_attn_view_name(i), t->rank,
                                   i < 3 ? "input" : "output");
    }
    const kn_attn_view *vw[4];
    for (int i = 0; i < 4; i++) vw[i] = has[i] ? &v[i] : NULL;
    if (any && !views_direct(vw)) return fused_attention_views(c, v, has, prm);
    for (int i = 0; i < 4; i++) /* read and written in place: the views must lie inside the tensors */
        if (vw[i] && !kn_attn_view_fits(vw[i], kn_tensor_count(i < 3 ? c->in[i] : c->out[0])))
            return kn_kernel_error(c, KILN_ERR_SHAPE, "%s does not fit the %s tensor of %lld elements", kn_attn_view_name(i),
                                   i < 3 ? "input" : "output", (long long)kn_tensor_count(i < 3 ? c->in[i] : c->out[0]));
    return fused_attention_dense(c, vw, prm);
}

/* Whether the kernel reads (writes) these views in place: rows with their last dim contiguous
 * (for KT, either of its two dims). */
static bool views_direct(const kn_attn_view *const *vw) {
    for (int i = 0; i < 4; i++) {
        if (!vw[i]) continue;
        const int r = vw[i]->rank;
        if (r < 2) return false;
        if (vw[i]->strides[r - 1] != 1 && !(i == 1 && vw[i]->strides[r - 2] == 1)) return false;
    }
    return true;
}

/* vw[i]: operand i's view (Q, KT, V, Y), or NULL for the tensor itself; views_direct holds. */
static kiln_status fused_attention_dense(kn_kernel_ctx *c, const kn_attn_view *const *vw, const kn_cpu_attn_prm *prm) {
    const kn_tensor *M = c->n_inputs > 3 ? c->in[3] : NULL;
    kn_tensor *Y = c->out[0];
    if (!Y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output shape unknown at run time");
    /* each operand as a view: the node's, or the whole tensor */
    kn_attn_view q, kt, v, y;
    kn_tensor *const ts[4] = {c->in[0], c->in[1], c->in[2], Y};
    kn_attn_view *const ops4[4] = {&q, &kt, &v, &y};
    for (int i = 0; i < 4; i++) {
        if (vw[i]) *ops4[i] = *vw[i];
        else kn_attn_view_whole(ts[i], ops4[i]);
    }
    int r = q.rank;
    if (r < 2 || kt.rank != r || v.rank != r || y.rank != r || (M && M->rank > r))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "Q, KT, V and the output must have the same rank >= 2");
    attn_job j;
    memset(&j, 0, sizeof j);
    j.sq = q.dims[r - 2];
    j.d = q.dims[r - 1];
    j.sk = kt.dims[r - 1];
    j.dv = v.dims[r - 1];
    if (kt.dims[r - 2] != j.d || v.dims[r - 2] != j.sk || y.dims[r - 2] != j.sq || y.dims[r - 1] != j.dv)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "Q [.., %lld, %lld], KT [.., %lld, %lld] and V [.., %lld, %lld] do not fit",
                               (long long)j.sq, (long long)j.d, (long long)kt.dims[r - 2], (long long)j.sk,
                               (long long)v.dims[r - 2], (long long)j.dv);
    j.batch = 1;
    j.nb = r - 2;
    for (int d = 0; d < r - 2; d++) {
        j.bdims[d] = y.dims[d];
        j.y_bstride[d] = y.strides[d];
        j.batch *= y.dims[d];
    }
    const kn_attn_view *ops[3] = {&q, &kt, &v};
    for (int t = 0; t < 3; t++)
        for (int d = 0; d < r - 2; d++) {
            if (ops[t]->dims[d] != 1 && ops[t]->dims[d] != j.bdims[d])
                return kn_kernel_error(c, KILN_ERR_SHAPE, "the batch dims of input %d do not broadcast to the output's", t);
            j.bstride[t][d] = ops[t]->dims[d] == 1 ? 0 : ops[t]->strides[d];
        }
    if (M && !batch_strides(M, r, j.bdims, j.bstride[3]))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "the batch dims of input 3 do not broadcast to the output's");
    j.q_rs = q.strides[r - 2];
    j.kt_by_key = kt.strides[r - 1] != 1;
    j.kt_ld = j.kt_by_key ? kt.strides[r - 1] : kt.strides[r - 2];
    j.v_rs = v.strides[r - 2];
    j.y_rs = y.strides[r - 2];
    if (M) {
        int64_t mi = M->rank >= 2 ? M->dims[M->rank - 2] : 1, mj = M->rank >= 1 ? M->dims[M->rank - 1] : 1;
        if ((mi != 1 && mi != j.sq) || (mj != 1 && mj != j.sk))
            return kn_kernel_error(c, KILN_ERR_SHAPE, "the mask does not broadcast to the [%lld, %lld] scores",
                                   (long long)j.sq, (long long)j.sk);
        j.ms_j = mj == 1 ? 0 : 1;
        j.ms_i = mi == 1 ? 0 : mj;
        j.mask = M->data;
        j.mask_bool = M->dtype == KILN_DTYPE_BOOL;
    }
    j.q = (const float *)c->in[0]->data + q.offset;
    j.kt = (const float *)c->in[1]->data + kt.offset;
    j.v = (const float *)c->in[2]->data + v.offset;
    j.y = (float *)Y->data + y.offset;
    j.scale = prm->scale;
    j.nan_to_zero = prm->nan_to_zero;
    if (j.batch == 0 || j.sq == 0 || j.dv == 0) return KILN_OK;
    if (j.sk == 0) {
        /* softmax over nothing: NaN rows (0 with nan_to_zero) times an empty V is 0 */
        memset(Y->data, 0, Y->nbytes);
        return KILN_OK;
    }
    /* in whole row tiles of the GEMM's micro-kernels (12 rows on AVX-512, 6 on AVX2, 4 else: 12 is
     * a multiple of each): 43 rows at whisper's 1500 keys left the last tile 7 of 12 full (48 rows:
     * its encoder 3% faster, 1 thread) */
    j.rows_per_block = (SCORE_BLOCK_FLOATS / j.sk + 6) / 12 * 12;
    if (j.rows_per_block < 36) j.rows_per_block = 36;
    /* bf16 on AMX: whole 32-row tiles of C (48 rows ran a 32-row and a 16-row pass), at least 64
     * (whisper's 1500 keys, KILN_PROFILE, attention of 2 layers at 1 thread: 48 rows 16.3 ms, 64
     * rows 15.0, 96 rows 15.9) */
    if (kn_bgemm_state() && kn_bgemm_amx()) {
        j.rows_per_block = (SCORE_BLOCK_FLOATS / j.sk + 16) / 32 * 32;
        if (j.rows_per_block < 64) j.rows_per_block = 64;
    }
    if (j.rows_per_block > j.sq) j.rows_per_block = j.sq;
    /* enough tasks for the threads */
    int threads = kn_threadpool_size(c->pool);
    while (j.rows_per_block > 32 && j.batch * ((j.sq + j.rows_per_block - 1) / j.rows_per_block) < 2 * threads)
        j.rows_per_block = (j.rows_per_block + 1) / 2;
    j.blocks = (j.sq + j.rows_per_block - 1) / j.rows_per_block;
    j.status = KILN_OK;
    j.bf16_state = kn_bgemm_state();
    kn_parallel_for(c->pool, j.batch * j.blocks, 1, attn_range, &j);
    if (j.status != KILN_OK) return kn_kernel_error(c, j.status, "out of memory for the attention scores");
    return KILN_OK;
}

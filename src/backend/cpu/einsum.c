/* Einsum on the CPU.
 *
 * Two-operand float32 contractions without diagonals or broadcasting (the shape of attention
 * and of batched projections) are rewritten as a batched GEMM: both operands are permuted into
 * [batch, M, K] and [batch, K, N], multiplied, and the result permuted into the output order.
 * Everything else (any number of inputs, repeated subscripts, broadcasting ellipses, other types)
 * runs a direct sum over all subscripts in double precision. */
#include "backend/cpu/linalg_impl.h"
#include "backend/cpu/sgemm.h"
#include "backend/cpu/tensor_kernels.h"
#include "ops/linalg_util.h"

#include <stdlib.h>
#include <string.h>

/* Copies src (rank r, dims, dense) into dst permuted so that dst axis i is src axis perm[i], by
 * Transpose's strided copy (tiles, threads; an element loop here took the GEMM's time again) */
static kiln_status permute_f32(kn_kernel_ctx *c, const float *src, int r, const int64_t *dims, const int *perm,
                               float *dst) {
    kn_strided s;
    int64_t sstr[KILN_MAX_RANK], ddims[KILN_MAX_RANK], total = 1;
    kn_cpu_strides(dims, r, sstr);
    for (int i = 0; i < r; i++) {
        ddims[i] = dims[perm[i]];
        total *= ddims[i];
        s.dims[i] = ddims[i];
        s.src_stride[i] = sstr[perm[i]];
    }
    kn_cpu_strides(ddims, r, s.dst_stride);
    s.rank = r;
    s.dst_off = s.src_off = 0;
    kn_tensor *sv = NULL, *dv = NULL;
    kiln_status st = kn_tensor_new_view(KILN_DTYPE_FLOAT, r, dims, (void *)src, sizeof(float) * (size_t)total, &sv);
    if (st == KILN_OK) st = kn_tensor_new_view(KILN_DTYPE_FLOAT, r, ddims, dst, sizeof(float) * (size_t)total, &dv);
    if (st == KILN_OK) st = kn_cpu_strided_copy(c, dv, sv, &s);
    kn_tensor_free(sv);
    kn_tensor_free(dv);
    return st;
}

static bool identity_perm(const int *perm, int r) {
    for (int i = 0; i < r; i++)
        if (perm[i] != i) return false;
    return true;
}

/* dst = the axes (axis_of[label]) of the labels of groups g1, g2, g3 in that order */
static void axes_of_groups(int *dst, const int *axis_of, const int *g1, int n1, const int *g2, int n2, const int *g3,
                           int n3) {
    int r = 0;
    for (int i = 0; i < n1; i++) dst[r++] = axis_of[g1[i]];
    for (int i = 0; i < n2; i++) dst[r++] = axis_of[g2[i]];
    for (int i = 0; i < n3; i++) dst[r++] = axis_of[g3[i]];
}

/* The GEMM path; returns false (and does nothing) when the equation does not fit it. */
static bool einsum_gemm(kn_kernel_ctx *c, const kn_einsum_plan *p, kiln_status *st) {
    if (p->n_in != 2 || c->in[0]->dtype != KILN_DTYPE_FLOAT || c->in[1]->dtype != KILN_DTYPE_FLOAT) return false;
    const kn_tensor *A = c->in[0], *B = c->in[1];
    int where[KN_EINSUM_LABELS] = {0}; /* bit 0: in A, bit 1: in B, bit 2: in output */
    int axis_a[KN_EINSUM_LABELS], axis_b[KN_EINSUM_LABELS], axis_o[KN_EINSUM_LABELS];
    for (int i = 0; i < p->in_rank[0]; i++) {
        int l = p->in_label[0][i];
        if (where[l] & 1) return false; /* diagonal */
        where[l] |= 1;
        axis_a[l] = i;
        if (A->dims[i] != p->size[l]) return false; /* broadcast */
    }
    for (int i = 0; i < p->in_rank[1]; i++) {
        int l = p->in_label[1][i];
        if (where[l] & 2) return false;
        where[l] |= 2;
        axis_b[l] = i;
        if (B->dims[i] != p->size[l]) return false;
    }
    for (int i = 0; i < p->out_rank; i++) {
        where[p->out_label[i]] |= 4;
        axis_o[p->out_label[i]] = i;
    }
    int batch[KN_EINSUM_LABELS], mm[KN_EINSUM_LABELS], nn[KN_EINSUM_LABELS], kk[KN_EINSUM_LABELS];
    int nbt = 0, nm = 0, nn_ = 0, nk = 0;
    int64_t Bsz = 1, M = 1, N = 1, K = 1;
    for (int l = 0; l < KN_EINSUM_LABELS; l++) {
        switch (where[l]) {
        case 0: break;
        case 7: batch[nbt++] = l, Bsz *= p->size[l]; break;
        case 5: mm[nm++] = l, M *= p->size[l]; break;
        case 6: nn[nn_++] = l, N *= p->size[l]; break;
        case 3: kk[nk++] = l, K *= p->size[l]; break;
        default: return false; /* summed over in one operand only */
        }
    }
    /* operand orders for the GEMM ([batch, M, K] and [batch, K, N]), the GEMM's output order, and
     * the operands' orders with their two blocks swapped ([batch, K, M], [batch, N, K]) */
    int pa[KILN_MAX_RANK], pb[KILN_MAX_RANK], po[KILN_MAX_RANK], pa_t[KILN_MAX_RANK], pb_t[KILN_MAX_RANK];
    int tmp_axis[KILN_MAX_RANK]; /* the GEMM writes [batch, M, N]; its axis i holds output axis tmp_axis[i] */
    axes_of_groups(pa, axis_a, batch, nbt, mm, nm, kk, nk);
    axes_of_groups(pb, axis_b, batch, nbt, kk, nk, nn, nn_);
    axes_of_groups(tmp_axis, axis_o, batch, nbt, mm, nm, nn, nn_);
    axes_of_groups(pa_t, axis_a, batch, nbt, kk, nk, mm, nm);
    axes_of_groups(pb_t, axis_b, batch, nbt, nn, nn_, kk, nk);
    int64_t tdims[KILN_MAX_RANK];
    for (int i = 0; i < p->out_rank; i++) tdims[i] = p->size[p->out_label[tmp_axis[i]]];
    for (int i = 0; i < p->out_rank; i++) /* output axis j comes from tmp axis po[j] */
        for (int q = 0; q < p->out_rank; q++)
            if (tmp_axis[q] == i) po[i] = q;
    /* an operand already in the GEMM's order is read in place, and so is one stored with its two
     * blocks swapped (attention's bhqd,bhkd->bhqk), as the GEMM's transposed operand; an output in
     * the GEMM's order is written in place */
    const bool ta_in_place = !identity_perm(pa, A->rank) && identity_perm(pa_t, A->rank),
               tb_in_place = !identity_perm(pb, B->rank) && identity_perm(pb_t, B->rank);
    const bool ida = ta_in_place || identity_perm(pa, A->rank), idb = tb_in_place || identity_perm(pb, B->rank),
               ido = identity_perm(po, p->out_rank);
    int64_t na = ida ? 0 : kn_tensor_count(A), nb = idb ? 0 : kn_tensor_count(B), no = ido ? 0 : Bsz * M * N;
    float *buf = malloc(sizeof(float) * (size_t)(na + nb + no + 1));
    const float **ap = malloc(sizeof(float *) * (size_t)(Bsz * 2 + 1));
    float **cp = malloc(sizeof(float *) * (size_t)(Bsz + 1));
    if (!buf || !ap || !cp) {
        free(buf);
        free(ap);
        free(cp);
        *st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        return true;
    }
    float *ta = ida ? A->data : buf, *tb = idb ? B->data : buf + na, *to = ido ? c->out[0]->data : buf + na + nb;
    *st = KILN_OK;
    if (!ida) *st = permute_f32(c, A->data, A->rank, A->dims, pa, ta);
    if (!idb && *st == KILN_OK) *st = permute_f32(c, B->data, B->rank, B->dims, pb, tb);
    const float **bp = ap + Bsz;
    for (int64_t i = 0; i < Bsz; i++) {
        ap[i] = ta + i * M * K;
        bp[i] = tb + i * K * N;
        cp[i] = to + i * M * N;
    }
    if (*st == KILN_OK) {
        kn_sgemm_batch g = {.count = Bsz, .M = M, .N = N, .K = K, .trans_a = ta_in_place, .trans_b = tb_in_place,
                            .alpha = 1.0f, .beta = 0.0f, .a = ap, .lda = ta_in_place ? M : K, .b = bp,
                            .ldb = tb_in_place ? K : N, .c = cp, .ldc = N};
        *st = kn_sgemm_run(c->pool, &g);
        if (*st) *st = kn_kernel_error(c, *st, "out of memory in the GEMM");
        else if (!ido) *st = permute_f32(c, to, p->out_rank, tdims, po, c->out[0]->data); /* (else written in place) */
    }
    free(buf);
    free(ap);
    free(cp);
    return true;
}

/* The resolved equation, kept for the node's later calls with these input shapes (kn_ctx_prep) */
static const char einsum_tag = 0;

kiln_status kn_cpu_einsum(kn_kernel_ctx *c) {
    int n = c->n_inputs;
    if (n > KN_EINSUM_MAX_IN) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "too many inputs");
    int ranks[KN_EINSUM_MAX_IN];
    const int64_t *dims[KN_EINSUM_MAX_IN];
    /* the key: per input its rank and dims */
    int64_t key[KN_EINSUM_MAX_IN * (KILN_MAX_RANK + 1)];
    size_t nk = 0;
    for (int i = 0; i < n; i++) {
        ranks[i] = c->in[i]->rank;
        dims[i] = c->in[i]->dims;
        key[nk++] = ranks[i];
        for (int a = 0; a < ranks[i]; a++) key[nk++] = dims[i][a];
    }
    kn_einsum_plan p;
    kiln_status st = KILN_OK;
    const kn_einsum_plan *kept = kn_ctx_prep_get(c, &einsum_tag, key, nk * sizeof *key);
    if (kept) {
        p = *kept;
    } else {
        kn_einsum_prm local;
        const kn_einsum_prm *prm;
        KN_TRY(kn_ctx_params(c, kn_einsum_prepare, &local, (const void **)&prm));
        char why[512];
        st = kn_einsum_plan_make(prm->equation, n, ranks, dims, &p, why, sizeof why);
        if (st) return kn_kernel_error(c, st, "equation '%s': %s", prm->equation, why);
        kn_ctx_prep_put(c, &einsum_tag, key, nk * sizeof *key, &p, sizeof p);
    }
    kn_tensor *Y = c->out[0];
    if (einsum_gemm(c, &p, &st)) return st;

    /* direct: loop over output positions and, inside, over the summed subscripts */
    bool in_out[KN_EINSUM_LABELS] = {0};
    for (int i = 0; i < p.out_rank; i++) in_out[p.out_label[i]] = true;
    int sum_l[KN_EINSUM_LABELS], ns = 0;
    for (int l = 0; l < KN_EINSUM_LABELS; l++)
        if (p.size[l] >= 0 && !in_out[l]) sum_l[ns++] = l;
    /* stride of each label in each input (0 where the input broadcasts it) */
    int64_t stride[KN_EINSUM_MAX_IN][KN_EINSUM_LABELS];
    double *vals[KN_EINSUM_MAX_IN] = {0};
    for (int t = 0; t < n; t++) {
        memset(stride[t], 0, sizeof stride[t]);
        int64_t s = 1;
        for (int a = ranks[t] - 1; a >= 0; a--) {
            if (dims[t][a] != 1 || p.size[p.in_label[t][a]] == 1) stride[t][p.in_label[t][a]] += s;
            s *= dims[t][a];
        }
        int64_t cnt = kn_tensor_count(c->in[t]);
        vals[t] = malloc(sizeof(double) * (size_t)(cnt > 0 ? cnt : 1));
        if (!vals[t]) {
            for (int q = 0; q <= t; q++) free(vals[q]);
            return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
        for (int64_t e = 0; e < cnt; e++) vals[t][e] = kn_tensor_get_f64(c->in[t], e);
    }
    int64_t nout = kn_tensor_count(Y), nsum = 1;
    for (int i = 0; i < ns; i++) nsum *= p.size[sum_l[i]];
    for (int64_t o = 0; o < nout; o++) {
        int64_t base[KN_EINSUM_MAX_IN] = {0}, t = o;
        for (int i = p.out_rank - 1; i >= 0; i--) {
            int l = p.out_label[i];
            int64_t idx = t % p.size[l];
            t /= p.size[l];
            for (int q = 0; q < n; q++) base[q] += idx * stride[q][l];
        }
        double acc = 0;
        for (int64_t sidx = 0; sidx < nsum; sidx++) {
            int64_t off[KN_EINSUM_MAX_IN], u = sidx;
            for (int q = 0; q < n; q++) off[q] = base[q];
            for (int i = ns - 1; i >= 0; i--) {
                int l = sum_l[i];
                int64_t idx = u % p.size[l];
                u /= p.size[l];
                for (int q = 0; q < n; q++) off[q] += idx * stride[q][l];
            }
            double prod = 1;
            for (int q = 0; q < n; q++) prod *= vals[q][off[q]];
            acc += prod;
        }
        kn_tensor_set_f64(Y, o, acc);
    }
    for (int t = 0; t < n; t++) free(vals[t]);
    return KILN_OK;
}

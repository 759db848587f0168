/* CUDA Einsum.
 *
 * Two operands of float, float16 or bfloat16 without repeated subscripts (diagonals), broadcast
 * dims or labels summed inside one operand are a batched matrix product, as on the CPU: each
 * operand is transposed into [batch, M, K] / [batch, K, N] (a strided device copy), multiplied
 * through cuBLASLt (kn_cu_gemm_run), and the [batch, M, N] result transposed into the output's
 * order. Every other equation of up to four inputs runs a direct sum in double: one thread per
 * output element, summing the product of the inputs over the summed labels' positions. */
#include "backend/cuda/cuda_backend.h"

#include "ops/linalg_util.h"

#include <stdio.h>
#include <string.h>

static void contiguous_strides(const int64_t *dims, int rank, int64_t *st) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        st[d] = s;
        s *= dims[d];
    }
}

/* dst (dense) = src permuted so that dst axis i is src axis perm[i]. */
static kiln_status permute_copy(kn_cuda *cu, kn_kernel_ctx *c, size_t es, const void *src, int rank,
                                const int64_t *dims, const int *perm, void *dst) {
    int64_t ss[KILN_MAX_RANK], dd[KILN_MAX_RANK], st[KILN_MAX_RANK];
    contiguous_strides(dims, rank, ss);
    for (int i = 0; i < rank; i++) {
        dd[i] = dims[perm[i]];
        st[i] = ss[perm[i]];
    }
    kn_cu_view v;
    kn_cu_view_strided(&v, rank, dd, st);
    return kn_cu_check(c, kn_cu_copy_view(es, src, 0, dst, &v, cu->stream), "Einsum transpose");
}

/* The GEMM path; returns false (doing nothing) when the equation does not fit it. */
static bool einsum_gemm(kn_cuda *cu, kn_kernel_ctx *c, const kn_einsum_plan *p, kiln_status *st) {
    if (p->n_in != 2) return false;
    const kn_tensor *A = c->in[0], *B = c->in[1];
    kiln_dtype dt = A->dtype;
    if (B->dtype != dt || (dt != KILN_DTYPE_FLOAT && dt != KILN_DTYPE_FLOAT16 && dt != KILN_DTYPE_BFLOAT16))
        return false;
    int where[KN_EINSUM_LABELS] = {0}; /* bit 0: in A, bit 1: in B, bit 2: in the output */
    int axis_a[KN_EINSUM_LABELS], axis_b[KN_EINSUM_LABELS], axis_o[KN_EINSUM_LABELS];
    for (int i = 0; i < p->in_rank[0]; i++) {
        int l = p->in_label[0][i];
        if ((where[l] & 1) || A->dims[i] != p->size[l]) return false; /* diagonal or broadcast */
        where[l] |= 1;
        axis_a[l] = i;
    }
    for (int i = 0; i < p->in_rank[1]; i++) {
        int l = p->in_label[1][i];
        if ((where[l] & 2) || B->dims[i] != p->size[l]) return false;
        where[l] |= 2;
        axis_b[l] = i;
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
        default: return false; /* summed inside one operand */
        }
    }
    int pa[KILN_MAX_RANK], pb[KILN_MAX_RANK], po[KILN_MAX_RANK], tmp_axis[KILN_MAX_RANK], r = 0;
    for (int i = 0; i < nbt; i++) pa[r++] = axis_a[batch[i]];
    for (int i = 0; i < nm; i++) pa[r++] = axis_a[mm[i]];
    for (int i = 0; i < nk; i++) pa[r++] = axis_a[kk[i]];
    r = 0;
    for (int i = 0; i < nbt; i++) pb[r++] = axis_b[batch[i]];
    for (int i = 0; i < nk; i++) pb[r++] = axis_b[kk[i]];
    for (int i = 0; i < nn_; i++) pb[r++] = axis_b[nn[i]];
    r = 0;
    for (int i = 0; i < nbt; i++) tmp_axis[r++] = axis_o[batch[i]];
    for (int i = 0; i < nm; i++) tmp_axis[r++] = axis_o[mm[i]];
    for (int i = 0; i < nn_; i++) tmp_axis[r++] = axis_o[nn[i]];
    int64_t tdims[KILN_MAX_RANK];
    for (int i = 0; i < p->out_rank; i++) tdims[i] = p->size[p->out_label[tmp_axis[i]]];
    for (int i = 0; i < p->out_rank; i++) /* output axis i comes from tmp axis po[i] */
        for (int q = 0; q < p->out_rank; q++)
            if (tmp_axis[q] == i) po[i] = q;
    size_t es = kiln_dtype_size(dt);
    int64_t na = kn_tensor_count(A), nb = kn_tensor_count(B), no = Bsz * M * N;
    size_t bytes = (size_t)(na + nb + no + 1) * es;
    void *buf;
    *st = kn_cu_scratch(cu, bytes, &buf);
    if (*st != KILN_OK) return true;
    char *ta = buf, *tb = ta + (size_t)na * es, *to = tb + (size_t)nb * es;
    kn_tensor *Y = c->out[0];
    /* the product lands straight in the output when its order is already the output's */
    bool identity = true;
    for (int i = 0; i < p->out_rank; i++)
        if (po[i] != i) identity = false;
    void *cdst = identity ? Y->data : (void *)to;
    *st = permute_copy(cu, c, es, A->data, A->rank, A->dims, pa, ta);
    if (*st == KILN_OK) *st = permute_copy(cu, c, es, B->data, B->rank, B->dims, pb, tb);
    if (*st == KILN_OK && no > 0) {
        if (K == 0) {
            *st = kn_cu_check(c, cudaMemsetAsync(cdst, 0, (size_t)no * es, cu->stream), "Einsum zero fill");
        } else {
            kn_cu_gemm g = {.dt = dt, .M = M, .N = N, .K = K, .batch = Bsz, .ta = false, .tb = false,
                            .A = ta, .B = tb, .C = cdst, .lda = K, .ldb = N, .ldc = N,
                            .sa = M * K, .sb = K * N, .sc = M * N, .alpha = 1.0f, .beta = 0.0f};
            *st = kn_cu_gemm_run(cu, c, &g);
        }
    }
    if (*st == KILN_OK && !identity) *st = permute_copy(cu, c, es, to, p->out_rank, tdims, po, Y->data);
    kn_cu_scratch_free(cu, buf, bytes);
    return true;
}

static kiln_status run_einsum(kn_cuda *cu, kn_kernel_ctx *c) {
    kn_einsum_prm local;
    const kn_einsum_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_einsum_prepare, &local, (const void **)&prm));
    const char *eq = prm->equation;
    int n = c->n_inputs;
    if (n < 1 || n > KN_CU_EINSUM_MAX_IN)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "%d inputs (the CUDA kernel takes 1 to %d)", n,
                               KN_CU_EINSUM_MAX_IN);
    int ranks[KN_EINSUM_MAX_IN];
    const int64_t *dims[KN_EINSUM_MAX_IN];
    for (int i = 0; i < n; i++) {
        if (!c->in[i]) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "input %d is missing", i);
        ranks[i] = c->in[i]->rank;
        dims[i] = c->in[i]->dims;
    }
    kn_einsum_plan p;
    char why[512];
    kiln_status st = kn_einsum_plan_make(eq, n, ranks, dims, &p, why, sizeof why);
    if (st) return kn_kernel_error(c, st, "equation '%s': %s", eq, why);
    kn_tensor *Y = c->out[0];
    if (!Y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    if (einsum_gemm(cu, c, &p, &st)) return st;

    kn_cu_einsum d;
    memset(&d, 0, sizeof d);
    d.n_in = n;
    d.out_rank = p.out_rank;
    bool in_out[KN_EINSUM_LABELS] = {0};
    for (int i = 0; i < p.out_rank; i++) {
        in_out[p.out_label[i]] = true;
        d.out_dims[i] = p.size[p.out_label[i]];
    }
    int sum_l[KN_EINSUM_LABELS], ns = 0;
    for (int l = 0; l < KN_EINSUM_LABELS; l++)
        if (p.size[l] >= 0 && !in_out[l]) sum_l[ns++] = l;
    if (ns > KN_CU_MAX_RANK)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "%d summed labels (the CUDA kernel takes %d)", ns,
                               KN_CU_MAX_RANK);
    d.n_sum = ns;
    for (int i = 0; i < ns; i++) d.sum_dims[i] = p.size[sum_l[i]];
    for (int t = 0; t < n; t++) {
        /* stride of each label in input t (0 where it broadcasts or lacks the label) */
        int64_t stride[KN_EINSUM_LABELS] = {0}, s = 1;
        for (int a = ranks[t] - 1; a >= 0; a--) {
            if (dims[t][a] != 1 || p.size[p.in_label[t][a]] == 1) stride[p.in_label[t][a]] += s;
            s *= dims[t][a];
        }
        for (int i = 0; i < p.out_rank; i++) d.out_stride[t][i] = stride[p.out_label[i]];
        for (int i = 0; i < ns; i++) d.sum_stride[t][i] = stride[sum_l[i]];
        d.in_dt[t] = c->in[t]->dtype;
        d.in[t] = c->in[t]->data;
    }
    return kn_cu_check(c, kn_cu_einsum_direct(&d, Y->dtype, Y->data, kn_tensor_count(Y), cu->stream), "Einsum");
}

static bool einsum_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n;
    if (n_in < 1 || n_in > KN_CU_EINSUM_MAX_IN) {
        snprintf(why, cap, "%d inputs (the CUDA kernel takes 1 to %d)", n_in, KN_CU_EINSUM_MAX_IN);
        return false;
    }
    for (int i = 0; i < n_in; i++)
        if (!in[i] || !(KN_T_NUM & KN_T(in[i]->dtype))) {
            snprintf(why, cap, "input %d of element type %s", i, in[i] ? kiln_dtype_name(in[i]->dtype) : "?");
            return false;
        }
    return true;
}

const kn_cuda_kernel kn_cuda_einsum[] = {
    {"", "Einsum", run_einsum, einsum_supports, KN_T_NUM, 0, 0, KN_CU_PARAMS(kn_einsum_prepare, kn_einsum_prm)},
    {NULL, NULL, NULL, NULL, 0, 0, 0},
};

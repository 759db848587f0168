/* The quantised com.microsoft operators that ONNX Runtime's quantisation tools emit: MatMulNBits
 * (block-wise 2/4/8-bit weights), DynamicQuantizeMatMul, MatMulIntegerToFloat, QGemm and the
 * QLinear elementwise, pooling, concat and softmax operators. Schemas and shape inference; the
 * CPU kernels are in src/backend/cpu/qcontrib*.c. Semantics are ONNX Runtime's (its contrib
 * operator documentation and its CPU kernels' outputs). */
#include "ops/op.h"

#include <stdio.h>
#include <string.h>

#define MS "com.microsoft"

static const kn_type *in_type(const kn_infer_ctx *c, int i) {
    return i < c->n_inputs && c->in[i] && c->in[i]->kind == KN_TYPE_TENSOR ? c->in[i] : NULL;
}

static kiln_status need(kn_infer_ctx *c, int i, const char *name) {
    if (!in_type(c, i)) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input '%s' is required", name);
    return KILN_OK;
}

static bool q8(kiln_dtype t) { return t == KILN_DTYPE_UNDEFINED || t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT8; }

static kiln_status need_q8(kn_infer_ctx *c, int i, const char *name) {
    KN_TRY(need(c, i, name));
    if (!q8(c->in[i]->dtype))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "%s has element type %s; it must be uint8 or int8", name,
                              kiln_dtype_name(c->in[i]->dtype));
    return KILN_OK;
}

static bool float_type(kiln_dtype t) {
    return t == KILN_DTYPE_UNDEFINED || t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16;
}

/* Y = A[..., M, K] x (K x N): A's dims with the last one replaced by N (-1 when unknown). */
static kiln_status matmul_out(kn_infer_ctx *c, const kn_type *A, int64_t K, int64_t N, kiln_dtype dt) {
    if (A->rank < 0) {
        kn_infer_set(c, 0, dt, -1, NULL);
        return KILN_OK;
    }
    if (A->rank < 1) return kn_infer_error(c, KILN_ERR_SHAPE, "A must have rank >= 1, got a scalar");
    int64_t ak = A->dims[A->rank - 1].value;
    if (ak >= 0 && K >= 0 && ak != K)
        return kn_infer_error(c, KILN_ERR_SHAPE, "A's last dimension is %lld but B has K = %lld rows", (long long)ak,
                              (long long)K);
    kn_type_set_tensor(&c->out[0], dt, A->rank, NULL);
    for (int d = 0; d < A->rank - 1; d++) c->out[0].dims[d] = A->dims[d];
    c->out[0].dims[A->rank - 1] = (kn_dim){N, NULL};
    return KILN_OK;
}

/* B of an integer matmul: 2-D (K x N); its dims or -1. */
static kiln_status int_b(kn_infer_ctx *c, int i, int64_t *K, int64_t *N) {
    const kn_type *B = c->in[i];
    *K = *N = -1;
    if (B->rank < 0) return KILN_OK;
    if (B->rank != 2)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "B must be a 2-D (K, N) matrix, got rank %d", B->rank);
    *K = B->dims[0].value;
    *N = B->dims[1].value;
    return KILN_OK;
}

/* ------------------------------------------------------------------ MatMulNBits */

static kiln_status infer_matmul_nbits(kn_infer_ctx *c) {
    KN_TRY(need(c, 0, "A"));
    KN_TRY(need(c, 1, "B"));
    KN_TRY(need(c, 2, "scales"));
    const kn_type *A = c->in[0], *B = c->in[1];
    if (!float_type(A->dtype) || A->dtype == KILN_DTYPE_BFLOAT16)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "A has element type %s; it must be float or float16",
                              kiln_dtype_name(A->dtype));
    if (B->dtype != KILN_DTYPE_UNDEFINED && B->dtype != KILN_DTYPE_UINT8)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "B has element type %s; it must be uint8",
                              kiln_dtype_name(B->dtype));
    const kn_attr *ka = kn_node_attr(c->node, "K"), *na = kn_node_attr(c->node, "N");
    if (!ka || !na || ka->type != KN_ATTR_INT || na->type != KN_ATTR_INT)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attributes K and N are required");
    int64_t K = ka->i, N = na->i, bits = kn_attr_int(c->node, "bits", 4), bs = kn_attr_int(c->node, "block_size", 0);
    if (K <= 0 || N <= 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "K=%lld and N=%lld must be positive", (long long)K, (long long)N);
    if (bits != 2 && bits != 4 && bits != 8)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "bits=%lld is not supported (2, 4 or 8)", (long long)bits);
    if (bs < 16 || (bs & (bs - 1)))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "block_size=%lld must be a power of 2 and at least 16", (long long)bs);
    int64_t kb = (K + bs - 1) / bs, blob = bs * bits / 8;
    if (B->rank >= 0) {
        int64_t want[3] = {N, kb, blob};
        bool ok = B->rank == 3 || B->rank == 2;
        if (B->rank == 3)
            for (int d = 0; d < 3; d++) ok = ok && (B->dims[d].value < 0 || B->dims[d].value == want[d]);
        if (B->rank == 2)
            ok = (B->dims[0].value < 0 || B->dims[0].value == N) && (B->dims[1].value < 0 || B->dims[1].value == kb * blob);
        if (!ok) {
            char s[256];
            return kn_infer_error(c, KILN_ERR_SHAPE, "B is %s but K=%lld, N=%lld, bits=%lld, block_size=%lld need [%lld, %lld, %lld]",
                                  kn_type_str(B, s, sizeof s), (long long)K, (long long)N, (long long)bits, (long long)bs,
                                  (long long)N, (long long)kb, (long long)blob);
        }
    }
    const kn_type *g = in_type(c, 4);
    if (g && g->dtype != KILN_DTYPE_UNDEFINED && g->dtype != KILN_DTYPE_INT32)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "g_idx has element type %s; it must be int32", kiln_dtype_name(g->dtype));
    return matmul_out(c, A, K, N, A->dtype);
}

/* ------------------------------------------------------------------ DynamicQuantizeMatMul, MatMulIntegerToFloat */

static kiln_status infer_dq_matmul(kn_infer_ctx *c) {
    KN_TRY(need(c, 0, "A"));
    KN_TRY(need_q8(c, 1, "B"));
    KN_TRY(need(c, 2, "b_scale"));
    if (c->in[0]->dtype != KILN_DTYPE_UNDEFINED && c->in[0]->dtype != KILN_DTYPE_FLOAT)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "A has element type %s; it must be float",
                              kiln_dtype_name(c->in[0]->dtype));
    int64_t K, N;
    KN_TRY(int_b(c, 1, &K, &N));
    return matmul_out(c, c->in[0], K, N, KILN_DTYPE_FLOAT);
}

static kiln_status infer_matmul_int_to_float(kn_infer_ctx *c) {
    KN_TRY(need_q8(c, 0, "A"));
    KN_TRY(need_q8(c, 1, "B"));
    KN_TRY(need(c, 2, "a_scale"));
    KN_TRY(need(c, 3, "b_scale"));
    kiln_dtype st = c->in[2]->dtype;
    if (st != KILN_DTYPE_UNDEFINED && st != KILN_DTYPE_FLOAT && st != KILN_DTYPE_FLOAT16)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "a_scale has element type %s; it must be float or float16",
                              kiln_dtype_name(st));
    int64_t K, N;
    KN_TRY(int_b(c, 1, &K, &N));
    return matmul_out(c, c->in[0], K, N, st);
}

/* ------------------------------------------------------------------ QGemm */

static kiln_status infer_qgemm(kn_infer_ctx *c) {
    KN_TRY(need_q8(c, 0, "A"));
    KN_TRY(need(c, 1, "a_scale"));
    KN_TRY(need(c, 2, "a_zero_point"));
    KN_TRY(need_q8(c, 3, "B"));
    KN_TRY(need(c, 4, "b_scale"));
    KN_TRY(need(c, 5, "b_zero_point"));
    const kn_type *A = c->in[0], *B = c->in[3], *C = in_type(c, 6), *yz = in_type(c, 8);
    if (C && C->dtype != KILN_DTYPE_UNDEFINED && C->dtype != KILN_DTYPE_INT32)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "C has element type %s; it must be int32", kiln_dtype_name(C->dtype));
    if (yz && !q8(yz->dtype))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "y_zero_point has element type %s; it must be uint8 or int8",
                              kiln_dtype_name(yz->dtype));
    kiln_dtype yt = yz ? yz->dtype : KILN_DTYPE_FLOAT;
    if (A->rank >= 0 && A->rank != 2) return kn_infer_error(c, KILN_ERR_SHAPE, "A must be 2-D, got rank %d", A->rank);
    if (B->rank >= 0 && B->rank != 2) return kn_infer_error(c, KILN_ERR_SHAPE, "B must be 2-D, got rank %d", B->rank);
    bool ta = kn_attr_int(c->node, "transA", 0), tb = kn_attr_int(c->node, "transB", 0);
    int64_t M = A->rank == 2 ? A->dims[ta ? 1 : 0].value : -1, Ka = A->rank == 2 ? A->dims[ta ? 0 : 1].value : -1;
    int64_t N = B->rank == 2 ? B->dims[tb ? 0 : 1].value : -1, Kb = B->rank == 2 ? B->dims[tb ? 1 : 0].value : -1;
    if (Ka >= 0 && Kb >= 0 && Ka != Kb)
        return kn_infer_error(c, KILN_ERR_SHAPE, "inner dimensions differ: A gives K=%lld, B K=%lld (after transA/transB)",
                              (long long)Ka, (long long)Kb);
    int64_t d[2] = {M, N};
    kn_infer_set(c, 0, yt, 2, d);
    if (A->rank == 2) c->out[0].dims[0] = A->dims[ta ? 1 : 0];
    if (B->rank == 2) c->out[0].dims[1] = B->dims[tb ? 0 : 1];
    return KILN_OK;
}

/* ------------------------------------------------------------------ table */

const kn_op_schema kn_ops_qcontrib[] = {
    {MS, "MatMulNBits", 1, 0, 3, 6, 1, 1, infer_matmul_nbits, 0},
    {MS, "DynamicQuantizeMatMul", 1, 0, 3, 5, 1, 1, infer_dq_matmul, 0},
    {MS, "MatMulIntegerToFloat", 1, 0, 4, 7, 1, 1, infer_matmul_int_to_float, 0},
    {MS, "QGemm", 1, 0, 6, 9, 1, 1, infer_qgemm, 0},
    {0},
};

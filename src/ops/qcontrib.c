/* The quantised com.microsoft operators that ONNX Runtime's quantisation tools emit: MatMulNBits
 * (block-wise 2/4/8-bit weights), DynamicQuantizeMatMul, MatMulIntegerToFloat, QGemm and the
 * QLinear elementwise, pooling, concat and softmax operators. Schemas and shape inference; the
 * CPU kernels are in src/backend/cpu/qcontrib*.c. Semantics are ONNX Runtime's (its contrib
 * operator documentation and its CPU kernels' outputs). */
#include "ops/linalg_util.h"
#include "ops/op.h"
#include "ops/qcontrib.h"

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

/* ------------------------------------------------------------------ QLinearSoftmax */

kiln_status kn_qlinear_softmax_rows_with(kn_kernel_ctx *c, const kn_tensor *X, int64_t opset, int64_t axis, int64_t *D,
                                         int64_t *inner) {
    const int r = X->rank;
    if (axis < -r || axis >= r || r == 0)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis %lld is out of range for rank %d", (long long)axis, r);
    if (axis < 0) axis += r;
    *D = 1, *inner = 1;
    if (opset < 13) {
        for (int d = (int)axis; d < r; d++) *D *= X->dims[d];
    } else {
        *D = X->dims[axis];
        for (int d = (int)axis + 1; d < r; d++) *inner *= X->dims[d];
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ MatMulNBits */

kiln_status kn_matmul_nbits_check_with(kn_kernel_ctx *c, int64_t K, int64_t N, int64_t bits, int64_t bs,
                                       kn_nbits_params *p) {
    const kn_tensor *A = c->in[0], *B = c->in[1], *S = c->in[2];
    const kn_tensor *zp = c->n_inputs > 3 ? c->in[3] : NULL, *gidx = c->n_inputs > 4 ? c->in[4] : NULL,
                    *bias = c->n_inputs > 5 ? c->in[5] : NULL;
    const kn_tensor *Y = c->out[0];
    if (!Y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    if (K <= 0 || N <= 0 || bs < 16 || (bs & (bs - 1)) || (bits != 2 && bits != 4 && bits != 8))
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "K=%lld, N=%lld, bits=%lld, block_size=%lld are not supported",
                               (long long)K, (long long)N, (long long)bits, (long long)bs);
    const int64_t kb = (K + bs - 1) / bs, blob = bs * bits / 8;
    if (A->rank < 1 || A->dims[A->rank - 1] != K || Y->rank != A->rank || Y->dims[Y->rank - 1] != N)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "A's last dimension must be K=%lld (and Y's N=%lld)", (long long)K,
                               (long long)N);
    if (Y->dtype != A->dtype)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "Y is %s but A %s", kiln_dtype_name(Y->dtype),
                               kiln_dtype_name(A->dtype));
    if (B->dtype != KILN_DTYPE_UINT8 || kn_tensor_count(B) != N * kb * blob)
        return kn_kernel_error(c, KILN_ERR_SHAPE,
                               "B has %lld %s elements; K=%lld, N=%lld, bits=%lld, block_size=%lld need %lld uint8",
                               (long long)kn_tensor_count(B), kiln_dtype_name(B->dtype), (long long)K, (long long)N,
                               (long long)bits, (long long)bs, (long long)(N * kb * blob));
    if (S->dtype != A->dtype && S->dtype != KILN_DTYPE_FLOAT)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "scales are %s but A is %s", kiln_dtype_name(S->dtype),
                               kiln_dtype_name(A->dtype));
    if (kn_tensor_count(S) != N * kb)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "scales have %lld elements; N x ceil(K / block_size) = %lld",
                               (long long)kn_tensor_count(S), (long long)(N * kb));
    if (zp) {
        const int64_t want = zp->dtype == KILN_DTYPE_UINT8 ? N * ((kb * bits + 7) / 8) : N * kb;
        if (zp->dtype != KILN_DTYPE_UINT8 && zp->dtype != S->dtype)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL,
                                   "zero_points are %s; they must be uint8 (packed) or the scales' type %s",
                                   kiln_dtype_name(zp->dtype), kiln_dtype_name(S->dtype));
        if (kn_tensor_count(zp) != want)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "zero_points have %lld elements; expected %lld",
                                   (long long)kn_tensor_count(zp), (long long)want);
    }
    if (gidx && (gidx->dtype != KILN_DTYPE_INT32 || kn_tensor_count(gidx) != K))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "g_idx has %lld %s elements; expected K=%lld int32",
                               (long long)kn_tensor_count(gidx), kiln_dtype_name(gidx->dtype), (long long)K);
    if (bias && (kn_tensor_count(bias) != N || bias->dtype != A->dtype))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "bias has %lld %s elements; expected N=%lld of A's type %s",
                               (long long)kn_tensor_count(bias), kiln_dtype_name(bias->dtype), (long long)N,
                               kiln_dtype_name(A->dtype));
    *p = (kn_nbits_params){K, N, bits, bs, kb, blob, kn_tensor_count(A) / K};
    return KILN_OK;
}

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

/* ------------------------------------------------------------------ QLinear operators */

/* X (input xi) quantised: uint8 or int8; zero point input zi (optional) of the same type. */
static kiln_status need_qx(kn_infer_ctx *c, int xi, int zi, const char *name) {
    KN_TRY(need_q8(c, xi, name));
    const kn_type *z = zi >= 0 ? in_type(c, zi) : NULL;
    if (z && z->dtype != KILN_DTYPE_UNDEFINED && c->in[xi]->dtype != KILN_DTYPE_UNDEFINED && z->dtype != c->in[xi]->dtype)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "%s is %s but its zero point is %s", name,
                              kiln_dtype_name(c->in[xi]->dtype), kiln_dtype_name(z->dtype));
    return KILN_OK;
}

static kiln_status infer_qlinear_binary(kn_infer_ctx *c) {
    KN_TRY(need_qx(c, 0, 2, "A"));
    KN_TRY(need_qx(c, 3, 5, "B"));
    KN_TRY(need(c, 1, "A_scale"));
    KN_TRY(need(c, 4, "B_scale"));
    KN_TRY(need(c, 6, "C_scale"));
    const kn_type *A = c->in[0], *B = c->in[3];
    if (A->dtype != KILN_DTYPE_UNDEFINED && B->dtype != KILN_DTYPE_UNDEFINED && A->dtype != B->dtype)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "A is %s but B is %s", kiln_dtype_name(A->dtype),
                              kiln_dtype_name(B->dtype));
    char why[512];
    kiln_status st = kn_broadcast_types(A, B, &c->out[0], why, sizeof why);
    if (st != KILN_OK) return kn_infer_error(c, st, "%s", why);
    c->out[0].dtype = A->dtype;
    return KILN_OK;
}

/* X, X_scale, X_zero_point, Y_scale, Y_zero_point -> Y like X */
static kiln_status infer_qlinear_unary(kn_infer_ctx *c) {
    KN_TRY(need_qx(c, 0, 2, "X"));
    KN_TRY(need(c, 1, "X_scale"));
    KN_TRY(need(c, 3, "Y_scale"));
    const kn_type *yz = in_type(c, 4);
    if (yz && yz->dtype != KILN_DTYPE_UNDEFINED && c->in[0]->dtype != KILN_DTYPE_UNDEFINED && yz->dtype != c->in[0]->dtype)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "X is %s but Y_zero_point is %s", kiln_dtype_name(c->in[0]->dtype),
                              kiln_dtype_name(yz->dtype));
    return kn_infer_same(c, 0, 0);
}

static kiln_status infer_qlinear_softmax(kn_infer_ctx *c) {
    KN_TRY(infer_qlinear_unary(c));
    const kn_attr *op = kn_node_attr(c->node, "opset");
    if (!op || op->type != KN_ATTR_INT)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attribute 'opset' (the Softmax opset the node follows) is required");
    const kn_type *x = c->in[0];
    if (x->rank >= 0) {
        int axis;
        KN_TRY(kn_infer_axis(c, kn_attr_int(c->node, "axis", op->i < 13 ? 1 : -1), x->rank, "axis", &axis));
    }
    return KILN_OK;
}

/* Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input */
static kiln_status infer_qlinear_concat(kn_infer_ctx *c) {
    KN_TRY(need(c, 0, "Y_scale"));
    KN_TRY(need_q8(c, 1, "Y_zero_point"));
    if (c->n_inputs < 5 || (c->n_inputs - 2) % 3)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "%d inputs: expected Y_scale, Y_zero_point and (X, X_scale, "
                              "X_zero_point) triples", c->n_inputs);
    kiln_dtype yt = c->in[1]->dtype;
    const kn_type *first = NULL;
    int rank = -1;
    for (int t = 2; t < c->n_inputs; t += 3) {
        KN_TRY(need_qx(c, t, t + 2, "X"));
        KN_TRY(need(c, t + 1, "X_scale"));
        const kn_type *x = c->in[t];
        if (x->dtype != KILN_DTYPE_UNDEFINED && yt != KILN_DTYPE_UNDEFINED && x->dtype != yt)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d is %s but Y_zero_point is %s", t,
                                  kiln_dtype_name(x->dtype), kiln_dtype_name(yt));
        if (x->rank < 0) continue;
        if (rank >= 0 && x->rank != rank)
            return kn_infer_error(c, KILN_ERR_SHAPE, "inputs have ranks %d and %d", rank, x->rank);
        rank = x->rank;
        if (!first) first = x;
    }
    if (rank < 0) {
        kn_infer_set(c, 0, yt, -1, NULL);
        return KILN_OK;
    }
    int axis;
    KN_TRY(kn_infer_axis(c, kn_attr_int(c->node, "axis", 0), rank, "axis", &axis));
    kn_type_set_tensor(&c->out[0], yt, rank, NULL);
    int64_t sum = 0;
    for (int d = 0; d < rank; d++) c->out[0].dims[d] = first->dims[d];
    for (int t = 2; t < c->n_inputs; t += 3) {
        const kn_type *x = c->in[t];
        if (x->rank < 0 || x->dims[axis].value < 0 || sum < 0) {
            sum = -1;
            continue;
        }
        for (int d = 0; d < rank; d++) {
            if (d == axis) continue;
            int64_t a = first->dims[d].value, b = x->dims[d].value;
            if (a >= 0 && b >= 0 && a != b)
                return kn_infer_error(c, KILN_ERR_SHAPE, "inputs differ in dimension %d (%lld vs %lld) off the axis %d", d,
                                      (long long)a, (long long)b, axis);
        }
        sum += x->dims[axis].value;
    }
    c->out[0].dims[axis] = (kn_dim){sum, NULL};
    return KILN_OK;
}

static kiln_status pool_common(kn_infer_ctx *c, bool global) {
    KN_TRY(infer_qlinear_unary(c));
    const kn_type *x = c->in[0];
    if (x->rank < 0) return KILN_OK;
    if (x->rank < 3) return kn_infer_error(c, KILN_ERR_SHAPE, "X must have rank >= 3 (N, C, spatial...), got %d", x->rank);
    bool cl = kn_attr_int(c->node, "channels_last", 0);
    int nsp = x->rank - 2, s0 = cl ? 1 : 2;
    if (global) {
        for (int i = 0; i < nsp; i++) c->out[0].dims[s0 + i] = (kn_dim){1, NULL};
        return KILN_OK;
    }
    int64_t in[KN_MAX_SPATIAL];
    for (int i = 0; i < nsp; i++) in[i] = x->dims[s0 + i].value;
    kn_window w;
    char why[512];
    kiln_status st = kn_window_plan(c->node, KN_WINDOW_POOL, nsp, in, NULL, &w, why, sizeof why);
    if (st) return kn_infer_error(c, st, "%s", why);
    for (int i = 0; i < nsp; i++) {
        if (w.dilation[i] != 1) return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "dilations other than 1 are not supported");
        c->out[0].dims[s0 + i] = (kn_dim){w.out[i], NULL};
    }
    return KILN_OK;
}

static kiln_status infer_qlinear_average_pool(kn_infer_ctx *c) { return pool_common(c, false); }
static kiln_status infer_qlinear_global_average_pool(kn_infer_ctx *c) { return pool_common(c, true); }

/* ------------------------------------------------------------------ QAttention */

/* input (B, S, D) uint8/int8, weight (D, 3 * hidden), bias (3 * hidden) float, input_scale,
 * weight_scale, mask_index, input_zero_point, weight_zero_point, past (2, B, N, P, H) ->
 * output (B, S, hidden) float, present (2, B, N, P + S, H) */
static kiln_status infer_qattention(kn_infer_ctx *c) {
    KN_TRY(need_qx(c, 0, 6, "input"));
    KN_TRY(need_qx(c, 1, 7, "weight"));
    KN_TRY(need(c, 2, "bias"));
    KN_TRY(need(c, 3, "input_scale"));
    KN_TRY(need(c, 4, "weight_scale"));
    const kn_type *x = c->in[0], *w = c->in[1], *past = in_type(c, 8);
    int64_t N = kn_attr_int(c->node, "num_heads", 0);
    if (N <= 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "num_heads must be positive, got %lld", (long long)N);
    if (kn_attr_int(c->node, "do_rotary", 0)) return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "do_rotary=1 is not supported");
    if (kn_attr_int(c->node, "past_present_share_buffer", 0))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "past_present_share_buffer=1 is not supported");
    if (x->rank >= 0 && x->rank != 3) return kn_infer_error(c, KILN_ERR_SHAPE, "input must be 3-D, got rank %d", x->rank);
    if (w->rank >= 0 && w->rank != 2) return kn_infer_error(c, KILN_ERR_SHAPE, "weight must be 2-D, got rank %d", w->rank);
    int64_t W = w->rank == 2 ? w->dims[1].value : -1, D = W >= 0 ? W / 3 : -1;
    if (W >= 0 && (W % 3 || D % N))
        return kn_infer_error(c, KILN_ERR_SHAPE, "weight has %lld columns: not 3 x a multiple of num_heads %lld", (long long)W,
                              (long long)N);
    if (x->rank == 3 && w->rank == 2 && x->dims[2].value >= 0 && w->dims[0].value >= 0 && x->dims[2].value != w->dims[0].value)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input hidden size %lld but weight has %lld rows",
                              (long long)x->dims[2].value, (long long)w->dims[0].value);
    kn_type_set_tensor(&c->out[0], KILN_DTYPE_FLOAT, 3, NULL);
    c->out[0].dims[0] = x->rank == 3 ? x->dims[0] : (kn_dim){-1, NULL};
    c->out[0].dims[1] = x->rank == 3 ? x->dims[1] : (kn_dim){-1, NULL};
    c->out[0].dims[2] = (kn_dim){D, NULL};
    if (c->n_outputs > 1) {
        if (past && past->rank >= 0 && past->rank != 5)
            return kn_infer_error(c, KILN_ERR_SHAPE, "past must be 5-D (2, B, N, P, H), got rank %d", past->rank);
        int64_t P = past ? (past->rank == 5 ? past->dims[3].value : -1) : 0, S = x->rank == 3 ? x->dims[1].value : -1;
        kn_type_set_tensor(&c->out[1], KILN_DTYPE_FLOAT, 5, NULL);
        c->out[1].dims[0] = (kn_dim){2, NULL};
        c->out[1].dims[1] = c->out[0].dims[0];
        c->out[1].dims[2] = (kn_dim){N, NULL};
        c->out[1].dims[3] = (kn_dim){P >= 0 && S >= 0 ? P + S : -1, NULL};
        c->out[1].dims[4] = (kn_dim){D >= 0 ? D / N : -1, NULL};
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ DynamicQuantizeLSTM */

/* X [T, B, I] float, W [nd, I, 4H], R [nd, H, 4H] (uint8/int8), B, sequence_lens, initial_h,
 * initial_c, P, W_scale, W_zero_point, R_scale, R_zero_point -> Y [T, nd, B, H], Y_h, Y_c [nd, B, H] */
static kiln_status infer_dq_lstm(kn_infer_ctx *c) {
    KN_TRY(need(c, 0, "X"));
    KN_TRY(need_qx(c, 1, 9, "W"));
    KN_TRY(need_qx(c, 2, 11, "R"));
    KN_TRY(need(c, 8, "W_scale"));
    KN_TRY(need(c, 10, "R_scale"));
    const kn_type *x = c->in[0], *w = c->in[1], *r = c->in[2];
    if (x->dtype != KILN_DTYPE_UNDEFINED && x->dtype != KILN_DTYPE_FLOAT)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "X has element type %s; it must be float", kiln_dtype_name(x->dtype));
    if (kn_attr_int(c->node, "layout", 0)) return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "layout=1 is not supported");
    const char *dir = kn_attr_string(c->node, "direction", "forward");
    int nd = !strcmp(dir, "bidirectional") ? 2 : 1;
    if (nd == 1 && strcmp(dir, "forward") && strcmp(dir, "reverse"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "direction '%s' is not forward, reverse or bidirectional", dir);
    if (x->rank >= 0 && x->rank != 3) return kn_infer_error(c, KILN_ERR_SHAPE, "X must be 3-D, got rank %d", x->rank);
    if (w->rank >= 0 && w->rank != 3) return kn_infer_error(c, KILN_ERR_SHAPE, "W must be 3-D, got rank %d", w->rank);
    if (r->rank >= 0 && r->rank != 3) return kn_infer_error(c, KILN_ERR_SHAPE, "R must be 3-D, got rank %d", r->rank);
    int64_t H = kn_attr_int(c->node, "hidden_size", -1);
    if (H < 0 && r->rank == 3) H = r->dims[1].value;
    if (r->rank == 3 && H >= 0 && ((r->dims[1].value >= 0 && r->dims[1].value != H) ||
                                   (r->dims[2].value >= 0 && r->dims[2].value != 4 * H)))
        return kn_infer_error(c, KILN_ERR_SHAPE, "R must be [%d, %lld, %lld]", nd, (long long)H, (long long)(4 * H));
    kn_dim T = x->rank == 3 ? x->dims[0] : (kn_dim){-1, NULL}, B = x->rank == 3 ? x->dims[1] : (kn_dim){-1, NULL};
    kn_dim y[4] = {T, {nd, NULL}, B, {H, NULL}};
    if (c->n_outputs > 0) {
        kn_type_set_tensor(&c->out[0], KILN_DTYPE_FLOAT, 4, NULL);
        for (int d = 0; d < 4; d++) c->out[0].dims[d] = y[d];
    }
    for (int o = 1; o < c->n_outputs && o < 3; o++) {
        kn_type_set_tensor(&c->out[o], KILN_DTYPE_FLOAT, 3, NULL);
        for (int d = 0; d < 3; d++) c->out[o].dims[d] = y[d + 1];
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ table */

const kn_op_schema kn_ops_qcontrib[] = {
    {MS, "MatMulNBits", 1, 0, 3, 6, 1, 1, infer_matmul_nbits, 0},
    {MS, "DynamicQuantizeMatMul", 1, 0, 3, 5, 1, 1, infer_dq_matmul, 0},
    {MS, "MatMulIntegerToFloat", 1, 0, 4, 7, 1, 1, infer_matmul_int_to_float, 0},
    {MS, "QGemm", 1, 0, 6, 9, 1, 1, infer_qgemm, 0},
    {MS, "QAttention", 1, 0, 5, 9, 1, 2, infer_qattention, 0},
    {MS, "DynamicQuantizeLSTM", 1, 0, 12, 12, 0, 3, infer_dq_lstm, 0},
    {MS, "QLinearAdd", 1, 0, 7, 8, 1, 1, infer_qlinear_binary, 0},
    {MS, "QLinearMul", 1, 0, 7, 8, 1, 1, infer_qlinear_binary, 0},
    {MS, "QLinearSigmoid", 1, 0, 4, 5, 1, 1, infer_qlinear_unary, 0},
    {MS, "QLinearLeakyRelu", 1, 0, 4, 5, 1, 1, infer_qlinear_unary, 0},
    {MS, "QLinearConcat", 1, 0, 5, -1, 1, 1, infer_qlinear_concat, 0},
    {MS, "QLinearSoftmax", 1, 0, 4, 5, 1, 1, infer_qlinear_softmax, 0},
    {MS, "QLinearAveragePool", 1, 0, 4, 5, 1, 1, infer_qlinear_average_pool, 0},
    {MS, "QLinearGlobalAveragePool", 1, 0, 4, 5, 1, 1, infer_qlinear_global_average_pool, 0},
    {0},
};

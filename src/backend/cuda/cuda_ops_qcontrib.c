/* CUDA kernels of the quantised com.microsoft operators: MatMulNBits and the QLinear operators
 * (Add, Mul, Sigmoid, LeakyRelu, Concat, Softmax, AveragePool, GlobalAveragePool), listed in
 * cuda_ops_quant.c's table (KN_CUDA_QCONTRIB_KERNELS). The checks and messages are the CPU
 * kernels' (src/backend/cpu/qcontrib.c, qcontrib_linear.c); the arithmetic is theirs too
 * (cu_qcontrib.cu says how it is kept identical).
 *
 * MatMulNBits takes three roads:
 *  - accuracy_level 4 where ONNX Runtime's CPU kernel uses its int8 compute type (constant weights
 *    without g_idx, integer zero points, block_size <= 256): A quantised per row and block to
 *    int8, integer block products (as the CPU kernel, so the results agree with ONNX Runtime's);
 *  - up to KN_CU_NBITS_GEMV_ROWS rows of A (a decoder's tokens): one kernel reads the packed
 *    weights directly, float32 arithmetic, never dequantising them into memory;
 *  - more rows: the weights dequantised into scratch (A's type: float32, or float16 as ONNX
 *    Runtime's CUDA kernel does) and multiplied through kiln's cuBLASLt entry (kn_cu_gemm_run),
 *    then the bias added. */
#include "backend/cuda/cuda_qcontrib.h"

#include "ops/linalg_util.h"
#include "ops/qcontrib.h"

#include <stdio.h>
#include <string.h>

#define KN_CU_NBITS_GEMV_ROWS 32

static const kn_tensor *opt_in(const kn_kernel_ctx *c, int i) { return i < c->n_inputs ? c->in[i] : NULL; }

static bool is_q8(kiln_dtype t) { return t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT8; }

static bool scale_type(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_DOUBLE;
}

/* The host copy of input i when it is a constant of the graph, else NULL. */
static const kn_tensor *host_constant(const kn_kernel_ctx *c, int i) {
    if (!c->graph || !c->node || i >= c->node->n_inputs) return NULL;
    int v = c->node->inputs[i];
    if (v < 0 || v >= c->graph->n_values) return NULL;
    return c->graph->values[v].constant;
}

/* ------------------------------------------------------------------ MatMulNBits */

bool kn_cu_matmul_nbits_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    kiln_dtype at = in[0] ? in[0]->dtype : KILN_DTYPE_UNDEFINED;
    if (at != KILN_DTYPE_FLOAT && at != KILN_DTYPE_FLOAT16) {
        snprintf(why, cap, "A of element type %s (float and float16 run on CUDA)", kiln_dtype_name(at));
        return false;
    }
    if (n_in > 1 && in[1] && in[1]->dtype != KILN_DTYPE_UINT8) {
        snprintf(why, cap, "B of element type %s", kiln_dtype_name(in[1]->dtype));
        return false;
    }
    if (n_in > 2 && in[2] && in[2]->dtype != KILN_DTYPE_FLOAT && in[2]->dtype != KILN_DTYPE_FLOAT16) {
        snprintf(why, cap, "scales of element type %s", kiln_dtype_name(in[2]->dtype));
        return false;
    }
    if (n_in > 3 && in[3] && in[3]->dtype != KILN_DTYPE_UINT8 && in[3]->dtype != KILN_DTYPE_FLOAT &&
        in[3]->dtype != KILN_DTYPE_FLOAT16) {
        snprintf(why, cap, "zero_points of element type %s", kiln_dtype_name(in[3]->dtype));
        return false;
    }
    if (n_in > 4 && in[4] && in[4]->dtype != KILN_DTYPE_INT32) {
        snprintf(why, cap, "g_idx of element type %s", kiln_dtype_name(in[4]->dtype));
        return false;
    }
    if (n_in > 5 && in[5] && in[5]->dtype != at) {
        snprintf(why, cap, "bias of element type %s for A of %s", kiln_dtype_name(in[5]->dtype), kiln_dtype_name(at));
        return false;
    }
    int64_t bits = kn_attr_int(n, "bits", 4), bs = kn_attr_int(n, "block_size", 0);
    if ((bits != 2 && bits != 4 && bits != 8) || bs < 16 || (bs & (bs - 1))) {
        snprintf(why, cap, "bits=%lld, block_size=%lld", (long long)bits, (long long)bs);
        return false;
    }
    return true;
}

kiln_status kn_cu_q_prepare(const kn_node *n, void *params) {
    kn_cu_q_prm *p = params;
    p->alpha = kn_attr_float(n, "alpha", 0.01f);
    p->axis = kn_attr_int(n, "axis", 0);
    p->channels_last = kn_attr_int(n, "channels_last", 0) != 0;
    p->count_include_pad = kn_attr_int(n, "count_include_pad", 0) != 0;
    p->accuracy_level = kn_attr_int(n, "accuracy_level", 0);
    p->precision = kn_attr_int(n, "precision", 0);
    p->saturate = kn_attr_int(n, "saturate", 1) != 0;
    p->K = kn_attr_int(n, "K", 0);
    p->N = kn_attr_int(n, "N", 0);
    p->bits = kn_attr_int(n, "bits", 4);
    p->block_size = kn_attr_int(n, "block_size", 0);
    p->quant_axis = kn_attr_int(n, "axis", 1);
    p->opset = kn_attr_int(n, "opset", -1);
    p->softmax_axis = kn_attr_int(n, "axis", p->opset < 13 ? 1 : -1);
    return KILN_OK;
}

kiln_status kn_cu_run_matmul_nbits(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *A = c->in[0], *B = c->in[1], *S = c->in[2];
    const kn_tensor *zp = opt_in(c, 3), *gidx = opt_in(c, 4), *bias = opt_in(c, 5);
    kn_tensor *Y = c->out[0];
    KN_CTX_PRM(c, kn_cu_q_prepare, kn_cu_q_prm, prm);
    kn_nbits_params np;
    KN_TRY(kn_matmul_nbits_check_with(c, prm->K, prm->N, prm->bits, prm->block_size, &np));
    const int64_t K = np.K, N = np.N, bits = np.bits, bs = np.bs, kb = np.kb, M = np.M;
    if (gidx) {
        /* a constant g_idx is checked on its host copy; another on the device (the call's error
         * once its work is done, cuda_errors.c), and clamped by the kernels meanwhile */
        const kn_tensor *h = host_constant(c, 4);
        if (h && h->dtype == KILN_DTYPE_INT32 && kn_tensor_count(h) == K && h->data) {
            const int32_t *g = h->data;
            for (int64_t k = 0; k < K; k++)
                if (g[k] < 0 || g[k] >= kb)
                    return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "g_idx[%lld] = %d is outside [0, %lld)",
                                           (long long)k, g[k], (long long)kb);
        } else if (!h) {
            KN_TRY(kn_cu_check(c, kn_cu_check_range(gidx->data, false, kn_tensor_count(gidx), 0, kb, KN_CU_ERR_GIDX,
                                                    kn_cu_err_at(cu, c), cu->stream),
                               "MatMulNBits (g_idx)"));
        }
    }
    if (M * N == 0) return KILN_OK;
    kn_cu_nbits p = {.M = M, .N = N, .K = K, .bs = bs, .kb = kb, .bits = (int)bits, .B = B->data,
                     .scales = S->data, .s_dt = S->dtype, .zp = zp ? zp->data : NULL,
                     .zp_dt = zp ? zp->dtype : KILN_DTYPE_UINT8, .g_idx = gidx ? gidx->data : NULL,
                     .bias = bias ? bias->data : NULL, .b_dt = A->dtype};
    /* accuracy_level 4: ONNX Runtime's CPU kernel computes in int8 where it prepacks the weights */
    bool int8 = prm->accuracy_level == 4 && bs <= 256 && !gidx &&
                (!zp || zp->dtype == KILN_DTYPE_UINT8) && kn_cu_is_persistent(cu, B->data) &&
                kn_cu_is_persistent(cu, S->data) && (!zp || kn_cu_is_persistent(cu, zp->data));
    if (int8) {
        size_t qbytes = ((size_t)(M * K) + 15) / 16 * 16, bytes = qbytes + sizeof(float) * (size_t)(M * kb);
        void *scratch;
        KN_TRY(kn_cu_scratch(cu, bytes, &scratch));
        int8_t *aq = scratch;
        float *sa = (float *)((char *)scratch + qbytes);
        kiln_status st = kn_cu_check(c, kn_cu_nbits_quant_a(A->dtype, A->data, M, K, bs, kb, aq, sa, cu->stream),
                                     "MatMulNBits (A to int8)");
        if (st == KILN_OK)
            st = kn_cu_check(c, kn_cu_nbits_gemv_int8(&p, aq, sa, Y->dtype, Y->data, cu->stream), "MatMulNBits (int8)");
        kn_cu_scratch_free(cu, scratch, bytes);
        return st;
    }
    if (M <= KN_CU_NBITS_GEMV_ROWS)
        return kn_cu_check(c, kn_cu_nbits_gemv(&p, A->dtype, A->data, Y->dtype, Y->data, cu->stream), "MatMulNBits");
    /* many rows: dequantise, then cuBLASLt */
    size_t wbytes = (size_t)(N * K) * kiln_dtype_size(A->dtype);
    void *W;
    KN_TRY(kn_cu_scratch(cu, wbytes, &W));
    kiln_status st = kn_cu_check(c, kn_cu_nbits_dequant(&p, A->dtype, W, cu->stream), "MatMulNBits (dequantise)");
    if (st == KILN_OK) {
        kn_cu_gemm g = {.dt = A->dtype, .M = M, .N = N, .K = K, .batch = 1, .ta = false, .tb = true, .A = A->data,
                        .B = W, .C = Y->data, .lda = K, .ldb = K, .ldc = N, .alpha = 1.0f, .beta = 0.0f};
        st = kn_cu_gemm_run(cu, c, &g);
    }
    if (st == KILN_OK && bias)
        st = kn_cu_check(c, kn_cu_bias_act(A->dtype, Y->data, bias->data, M, N, 1, 0, 0.0f, 0.0f, cu->stream),
                         "MatMulNBits (bias)");
    kn_cu_scratch_free(cu, W, wbytes);
    return st;
}

/* ------------------------------------------------------------------ QLinear operators */

/* Whether input i of the node is a scale (else quantised data or a zero point). */
static bool is_scale_input(const char *op, int i) {
    if (!strcmp(op, "QLinearAdd") || !strcmp(op, "QLinearMul")) return i == 1 || i == 4 || i == 6;
    if (!strcmp(op, "QLinearConcat")) return i == 0 || (i >= 2 && (i - 2) % 3 == 1);
    return i == 1 || i == 3;
}

bool kn_cu_qlinear_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    for (int i = 0; i < n_in; i++) {
        if (!in[i] || in[i]->dtype == KILN_DTYPE_UNDEFINED) continue;
        bool sc = is_scale_input(n->op_type, i);
        if (sc ? !scale_type(in[i]->dtype) : !is_q8(in[i]->dtype)) {
            snprintf(why, cap, "input %d of element type %s (%s)", i, kiln_dtype_name(in[i]->dtype),
                     sc ? "scales: float, float16, double" : "int8 and uint8 run on CUDA");
            return false;
        }
    }
    if (!strcmp(n->op_type, "QLinearAveragePool")) {
        if (in[0] && in[0]->rank > 5) {
            snprintf(why, cap, "X of rank %d (1 to 3 spatial dims run on CUDA)", in[0]->rank);
            return false;
        }
        const kn_attr *d = kn_node_attr(n, "dilations");
        for (int i = 0; d && i < d->n; i++)
            if (d->ints[i] != 1) {
                snprintf(why, cap, "dilations other than 1");
                return false;
            }
    }
    return true;
}

/* Scale input si and zero point input zi (-1: none) of quantised input xi: per tensor. */
static kiln_status qparam(kn_kernel_ctx *c, int xi, int si, int zi, kn_cu_qparam *q) {
    const kn_tensor *x = opt_in(c, xi), *st = opt_in(c, si), *zt = zi >= 0 ? opt_in(c, zi) : NULL;
    if (!st) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "input %d (a scale) is required", si);
    if (kn_tensor_count(st) != 1)
        return kn_kernel_error(c, KILN_ERR_SHAPE,
                               "input %d (a scale) has %lld elements; it must be a scalar or a 1-element tensor", si,
                               (long long)kn_tensor_count(st));
    if (!scale_type(st->dtype))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "input %d (a scale) is %s", si, kiln_dtype_name(st->dtype));
    if (zt && kn_tensor_count(zt) != 1)
        return kn_kernel_error(c, KILN_ERR_SHAPE,
                               "input %d (a zero point) has %lld elements; it must be a scalar or a 1-element tensor", zi,
                               (long long)kn_tensor_count(zt));
    if (zt && x && zt->dtype != x->dtype)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "input %d is %s but its zero point %s", xi,
                               kiln_dtype_name(x->dtype), kiln_dtype_name(zt->dtype));
    if (zt && !is_q8(zt->dtype))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "input %d (a zero point) is %s", zi, kiln_dtype_name(zt->dtype));
    q->scale = st->data;
    q->s_dt = st->dtype;
    q->zp = zt ? zt->data : NULL;
    return KILN_OK;
}

static kiln_status need_q8(kn_kernel_ctx *c, const kn_tensor *X, const char *name) {
    if (!X || !is_q8(X->dtype))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "%s is %s; it must be uint8 or int8", name,
                               X ? kiln_dtype_name(X->dtype) : "missing");
    return KILN_OK;
}

static kiln_status out0(kn_kernel_ctx *c, kiln_dtype want, kn_tensor **Y) {
    *Y = c->out[0];
    if (!*Y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    if ((*Y)->dtype != want)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "output is %s but the input %s", kiln_dtype_name((*Y)->dtype),
                               kiln_dtype_name(want));
    return KILN_OK;
}

static kiln_status run_binary(kn_cuda *cu, kn_kernel_ctx *c, bool mul) {
    const kn_tensor *A = c->in[0], *B = c->in[3];
    kn_tensor *Y;
    if (!is_q8(A->dtype) || !B || A->dtype != B->dtype)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "A and B must both be uint8 or both int8 (got %s and %s)",
                               kiln_dtype_name(A->dtype), B ? kiln_dtype_name(B->dtype) : "nothing");
    KN_TRY(out0(c, A->dtype, &Y));
    kn_cu_qparam qa, qb, qc;
    KN_TRY(qparam(c, 0, 1, 2, &qa));
    KN_TRY(qparam(c, 3, 4, 5, &qb));
    KN_TRY(qparam(c, 0, 6, 7, &qc));
    int r = Y->rank;
    if (A->rank > r || B->rank > r)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "A and B do not broadcast to the output");
    for (int d = 0; d < r; d++) {
        int ia = d - (r - A->rank), ib = d - (r - B->rank);
        int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
        if ((da != 1 && da != Y->dims[d]) || (db != 1 && db != Y->dims[d]))
            return kn_kernel_error(c, KILN_ERR_SHAPE, "A and B do not broadcast to the output");
    }
    /* the CPU's operand order: A is a scalar span when it has one element, or is one value along
     * the innermost output dimension of more than one element (and B is not a single value) */
    int64_t na = kn_tensor_count(A), nb = kn_tensor_count(B);
    int inner = r - 1;
    while (inner >= 0 && Y->dims[inner] == 1) inner--;
    int ia = inner - (r - A->rank);
    bool a_dim1 = inner >= 0 && (ia < 0 || A->dims[ia] == 1);
    bool a_sc = na == 1 || (nb != 1 && a_dim1);
    kn_cu_view v;
    const kn_tensor *ops[2] = {A, B};
    kn_cu_make_view(&v, Y->dims, r, ops, 2);
    return kn_cu_check(c, kn_cu_qlinear_binary(mul, Y->dtype == KILN_DTYPE_INT8, A->data, qa, B->data, qb, Y->data, qc,
                                               &v, a_sc, cu->stream),
                       mul ? "QLinearMul" : "QLinearAdd");
}

kiln_status kn_cu_run_qlinear_add(kn_cuda *cu, kn_kernel_ctx *c) { return run_binary(cu, c, false); }
kiln_status kn_cu_run_qlinear_mul(kn_cuda *cu, kn_kernel_ctx *c) { return run_binary(cu, c, true); }

static kiln_status run_table(kn_cuda *cu, kn_kernel_ctx *c, int fn) {
    const kn_tensor *X = c->in[0];
    kn_tensor *Y;
    KN_TRY(need_q8(c, X, "X"));
    KN_TRY(out0(c, X->dtype, &Y));
    kn_cu_qparam qx, qy;
    KN_TRY(qparam(c, 0, 1, 2, &qx));
    KN_TRY(qparam(c, 0, 3, 4, &qy));
    if (kn_tensor_count(Y) != kn_tensor_count(X))
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "output has %lld elements but X %lld", (long long)kn_tensor_count(Y),
                               (long long)kn_tensor_count(X));
    kn_cu_q_prm local_prm;
    const kn_cu_q_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_cu_q_prepare, &local_prm, (const void **)&prm));
    return kn_cu_check(c, kn_cu_qlinear_table(fn, prm->alpha, X->dtype == KILN_DTYPE_INT8,
                                              X->data, qx, Y->data, qy, kn_tensor_count(X), cu->stream),
                       fn == 1 ? "QLinearSigmoid" : "QLinearLeakyRelu");
}

kiln_status kn_cu_run_qlinear_sigmoid(kn_cuda *cu, kn_kernel_ctx *c) { return run_table(cu, c, 1); }
kiln_status kn_cu_run_qlinear_leaky_relu(kn_cuda *cu, kn_kernel_ctx *c) { return run_table(cu, c, 2); }

/* inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input */
kiln_status kn_cu_run_qlinear_concat(kn_cuda *cu, kn_kernel_ctx *c) {
    kn_tensor *Y = c->out[0];
    if (!Y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    if ((c->n_inputs - 2) % 3 || c->n_inputs < 5)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL,
                               "inputs after Y_scale and Y_zero_point must come in (X, scale, zero point) triples");
    KN_TRY(need_q8(c, Y, "Y"));
    kn_cu_qparam qy;
    KN_TRY(qparam(c, 1, 0, 1, &qy));
    kn_cu_q_prm local_prm;
    const kn_cu_q_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_cu_q_prepare, &local_prm, (const void **)&prm));
    int r = Y->rank;
    int64_t axis = prm->axis;
    if (axis < -r || axis >= r)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis %lld is out of range for rank %d", (long long)axis, r);
    if (axis < 0) axis += r;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= Y->dims[d];
    for (int d = (int)axis + 1; d < r; d++) inner *= Y->dims[d];
    int64_t yrow = Y->dims[axis] * inner, off = 0;
    for (int t = 2; t < c->n_inputs; t += 3) {
        const kn_tensor *X = c->in[t];
        if (!X || X->dtype != Y->dtype || X->rank != r)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "input %d must be a %s tensor of rank %d", t,
                                   kiln_dtype_name(Y->dtype), r);
        for (int d = 0; d < r; d++)
            if (d != axis && X->dims[d] != Y->dims[d])
                return kn_kernel_error(c, KILN_ERR_SHAPE, "input %d differs from the output in dimension %d", t, d);
        if (off + X->dims[axis] * inner > yrow)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "the inputs are longer along axis %lld than the output",
                                   (long long)axis);
        kn_cu_qparam qx;
        KN_TRY(qparam(c, t, t + 1, t + 2, &qx));
        int64_t xrow = X->dims[axis] * inner;
        KN_TRY(kn_cu_check(c, kn_cu_qlinear_concat_part(Y->dtype == KILN_DTYPE_INT8, X->data, qx, Y->data, qy, outer,
                                                        xrow, yrow, off, cu->stream),
                           "QLinearConcat"));
        off += xrow;
    }
    if (off != yrow)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "the inputs are shorter along axis %lld than the output",
                               (long long)axis);
    return KILN_OK;
}

kiln_status kn_cu_run_qlinear_softmax(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0];
    kn_tensor *Y;
    KN_TRY(need_q8(c, X, "X"));
    KN_TRY(out0(c, X->dtype, &Y));
    kn_cu_qparam qx, qy;
    KN_TRY(qparam(c, 0, 1, 2, &qx));
    KN_TRY(qparam(c, 0, 3, 4, &qy));
    KN_CTX_PRM(c, kn_cu_q_prepare, kn_cu_q_prm, prm);
    int64_t D, inner, n = kn_tensor_count(X);
    KN_TRY(kn_qlinear_softmax_rows_with(c, X, prm->opset, prm->softmax_axis, &D, &inner));
    if (n == 0 || D == 0) return KILN_OK;
    return kn_cu_check(c, kn_cu_qlinear_softmax(X->dtype == KILN_DTYPE_INT8, X->data, qx, Y->data, qy, n / D / inner, D,
                                                inner, cu->stream),
                       "QLinearSoftmax");
}

kiln_status kn_cu_run_qlinear_global_average_pool(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0];
    kn_tensor *Y;
    KN_TRY(need_q8(c, X, "X"));
    KN_TRY(out0(c, X->dtype, &Y));
    if (X->rank < 3) return kn_kernel_error(c, KILN_ERR_SHAPE, "X must have rank >= 3");
    kn_cu_qparam qx, qy;
    KN_TRY(qparam(c, 0, 1, 2, &qx));
    KN_TRY(qparam(c, 0, 3, 4, &qy));
    kn_cu_q_prm local_prm;
    const kn_cu_q_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_cu_q_prepare, &local_prm, (const void **)&prm));
    bool cl = prm->channels_last;
    int64_t N = X->dims[0], C = cl ? X->dims[X->rank - 1] : X->dims[1], img = 1;
    for (int d = cl ? 1 : 2; d < (cl ? X->rank - 1 : X->rank); d++) img *= X->dims[d];
    if (kn_tensor_count(Y) != N * C)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "output has %lld elements; expected N x C = %lld",
                               (long long)kn_tensor_count(Y), (long long)(N * C));
    if (img == 0) return kn_cu_check(c, cudaMemsetAsync(Y->data, 0, Y->nbytes, cu->stream), "QLinearGlobalAveragePool");
    return kn_cu_check(c, kn_cu_qlinear_gap(X->dtype == KILN_DTYPE_INT8, X->data, qx, Y->data, qy, N, C, img, cl,
                                            cu->stream),
                       "QLinearGlobalAveragePool");
}

kiln_status kn_cu_run_qlinear_average_pool(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0];
    kn_tensor *Y;
    KN_TRY(need_q8(c, X, "X"));
    KN_TRY(out0(c, X->dtype, &Y));
    if (X->rank < 3 || X->rank > 5)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "X has rank %d; 3 to 5 run on CUDA", X->rank);
    kn_cu_qparam qx, qy;
    KN_TRY(qparam(c, 0, 1, 2, &qx));
    KN_TRY(qparam(c, 0, 3, 4, &qy));
    kn_cu_q_prm local_prm;
    const kn_cu_q_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_cu_q_prepare, &local_prm, (const void **)&prm));
    bool cl = prm->channels_last;
    int nsp = X->rank - 2, s0 = cl ? 1 : 2;
    int64_t in[KN_MAX_SPATIAL];
    for (int i = 0; i < nsp; i++) in[i] = X->dims[s0 + i];
    kn_window w;
    char why[512];
    kiln_status st = kn_window_plan_kept(c, KN_WINDOW_POOL, nsp, in, NULL, &w, why, sizeof why);
    if (st) return kn_kernel_error(c, st, "%s", why);
    kn_cu_qpool p;
    memset(&p, 0, sizeof p);
    p.nsp = nsp;
    p.n = X->dims[0];
    p.c = cl ? X->dims[X->rank - 1] : X->dims[1];
    p.channels_last = cl;
    p.count_include_pad = prm->count_include_pad;
    int64_t yimg = 1;
    for (int i = 0; i < nsp; i++) {
        if (w.dilation[i] != 1)
            return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "dilations other than 1 are not supported");
        p.in[i] = w.in[i];
        p.out[i] = w.out[i];
        p.k[i] = w.kernel[i];
        p.stride[i] = w.stride[i];
        p.pad_b[i] = w.pad_begin[i];
        yimg *= w.out[i];
        if (Y->dims[cl ? 1 + i : 2 + i] != w.out[i])
            return kn_kernel_error(c, KILN_ERR_INTERNAL, "output dimension %d is %lld; the window gives %lld",
                                   cl ? 1 + i : 2 + i, (long long)Y->dims[cl ? 1 + i : 2 + i], (long long)w.out[i]);
    }
    if (kn_tensor_count(Y) != p.n * p.c * yimg)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "output has %lld elements; the window gives %lld",
                               (long long)kn_tensor_count(Y), (long long)(p.n * p.c * yimg));
    return kn_cu_check(c, kn_cu_qlinear_avgpool(X->dtype == KILN_DTYPE_INT8, X->data, qx, Y->data, qy, &p, cu->stream),
                       "QLinearAveragePool");
}

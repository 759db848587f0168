/* CUDA kernels of the quant family: QuantizeLinear and DequantizeLinear (per tensor, per axis and
 * blocked; 8-, 16- and 32-bit integers, the packed int4/uint4/int2/uint2 and the float8 types),
 * BitCast, and the integer matrix products MatMulInteger and QLinearMatMul.
 *
 * The arithmetic is the CPU kernels' (src/backend/cpu/quant.c, linalg.c): the quotient x / scale
 * rounded to the type numpy computes it in, rounding half to even, saturation to the output
 * range; float8 outputs and inputs go through the elementwise float8 cast (kn_cu_cast_f8).
 * float4e2m1 and float8e8m0 have no CUDA cast: `supports` sends those nodes to the CPU. */
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_qcontrib.h" /* the quantised com.microsoft operators (cuda_ops_qcontrib.c) */

#include "ops/quant.h"

#include <stdio.h>
#include <string.h>

static bool is_f8(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT8E4M3FN || t == KILN_DTYPE_FLOAT8E4M3FNUZ || t == KILN_DTYPE_FLOAT8E5M2 ||
           t == KILN_DTYPE_FLOAT8E5M2FNUZ;
}

static bool is_quant_int(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_INT8: case KILN_DTYPE_UINT8: case KILN_DTYPE_INT16: case KILN_DTYPE_UINT16:
    case KILN_DTYPE_INT32: case KILN_DTYPE_INT4: case KILN_DTYPE_UINT4: case KILN_DTYPE_INT2: case KILN_DTYPE_UINT2:
        return true;
    default: return false;
    }
}

static kiln_status layout_of(kn_kernel_ctx *c, const kn_tensor *x, const kn_tensor *s, kn_cu_qlayout *d) {
    char why[512];
    KN_CTX_PRM(c, kn_cu_q_prepare, kn_cu_q_prm, prm);
    kn_quant_layout l;
    kiln_status st = kn_quant_layout_get_with(prm->quant_axis, prm->block_size, x->rank, x->dims, s->rank, s->dims, &l,
                                              why, sizeof why);
    if (st != KILN_OK) return kn_kernel_error(c, st, "%s", why);
    d->mode = l.mode == KN_QUANT_AXIS ? 1 : l.mode == KN_QUANT_BLOCKED ? 2 : 0;
    d->D = l.D;
    d->inner = l.inner;
    d->Ds = l.Ds;
    d->block = l.block;
    return KILN_OK;
}

static const kn_tensor *zero_point(kn_kernel_ctx *c, const kn_tensor *s, kiln_status *st) {
    const kn_tensor *zp = c->n_inputs > 2 ? c->in[2] : NULL;
    *st = KILN_OK;
    if (!zp) return NULL;
    if (kn_tensor_count(zp) != kn_tensor_count(s))
        *st = kn_kernel_error(c, KILN_ERR_SHAPE, "the zero point has %lld elements but the scale %lld",
                              (long long)kn_tensor_count(zp), (long long)kn_tensor_count(s));
    return zp;
}

/* ------------------------------------------------------------------ QuantizeLinear */

static kiln_dtype quotient_type(int64_t precision, kiln_dtype xt, kiln_dtype st) {
    if (precision) return (kiln_dtype)precision;
    if (xt == KILN_DTYPE_DOUBLE || st == KILN_DTYPE_DOUBLE || xt == KILN_DTYPE_INT32) return KILN_DTYPE_DOUBLE;
    if (xt == st && (xt == KILN_DTYPE_FLOAT16 || xt == KILN_DTYPE_BFLOAT16)) return xt;
    return KILN_DTYPE_FLOAT;
}

static kiln_status run_quantize(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *s = c->in[1];
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    kn_cu_qlayout l;
    KN_TRY(layout_of(c, x, s, &l));
    kiln_status st;
    const kn_tensor *zp = zero_point(c, s, &st);
    KN_TRY(st);
    kn_cu_q_prm local_prm;
    const kn_cu_q_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_cu_q_prepare, &local_prm, (const void **)&prm));
    kiln_dtype ot = y->dtype, qt = quotient_type(prm->precision, x->dtype, s->dtype);
    int64_t n = kn_tensor_count(x);
    if (zp && zp->dtype != ot)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "output is %s but the zero point %s", kiln_dtype_name(ot),
                               kiln_dtype_name(zp->dtype));
    if (!is_f8(ot))
        return kn_cu_check(c, kn_cu_quantize(x->dtype, x->data, s->dtype, s->data, zp ? zp->dtype : ot,
                                             zp ? zp->data : NULL, qt, ot, y->data, n, &l, cu->stream),
                           "QuantizeLinear");
    /* float8: the quotient in float (its zero point is 0 by definition), then the cast */
    void *q;
    size_t bytes = (size_t)(n ? n : 1) * sizeof(float);
    KN_TRY(kn_cu_scratch(cu, bytes, &q));
    st = kn_cu_check(c, kn_cu_quantize(x->dtype, x->data, s->dtype, s->data, ot, NULL, qt, KILN_DTYPE_FLOAT, q, n,
                                       &l, cu->stream),
                     "QuantizeLinear");
    if (st == KILN_OK)
        st = kn_cu_check(c, kn_cu_cast_f8(KILN_DTYPE_FLOAT, ot, q, y->data, n, prm->saturate, cu->stream),
                         "QuantizeLinear (float8 cast)");
    kn_cu_scratch_free(cu, q, bytes);
    return st;
}

static bool quantize_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    kiln_dtype xt = in[0] ? in[0]->dtype : KILN_DTYPE_UNDEFINED, stt = n_in > 1 && in[1] ? in[1]->dtype : 0;
    if (!kn_dtype_is_float(xt) && xt != KILN_DTYPE_INT32) {
        snprintf(why, cap, "x of element type %s", kiln_dtype_name(xt));
        return false;
    }
    if (!kn_dtype_is_float(stt)) {
        snprintf(why, cap, "scale of element type %s", kiln_dtype_name(stt));
        return false;
    }
    kiln_dtype zt = n_in > 2 && in[2] ? in[2]->dtype : KILN_DTYPE_UNDEFINED, ot;
    if (kn_quant_out_dtype(n, zt, &ot, why, cap) != KILN_OK) return false;
    if (!is_quant_int(ot) && !is_f8(ot)) {
        snprintf(why, cap, "output of element type %s", kiln_dtype_name(ot));
        return false;
    }
    int64_t p = kn_attr_int(n, "precision", 0);
    if (p && !kn_dtype_is_float((kiln_dtype)p)) {
        snprintf(why, cap, "precision %lld", (long long)p);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ DequantizeLinear */

static kiln_status run_dequantize(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *s = c->in[1];
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    kn_cu_qlayout l;
    KN_TRY(layout_of(c, x, s, &l));
    kiln_status st;
    const kn_tensor *zp = zero_point(c, s, &st);
    KN_TRY(st);
    int64_t n = kn_tensor_count(x);
    if (!is_f8(x->dtype)) {
        bool in_double = s->dtype == KILN_DTYPE_DOUBLE || (zp && zp->dtype == KILN_DTYPE_INT32);
        return kn_cu_check(c, kn_cu_dequantize(x->dtype, x->data, s->dtype, s->data, zp ? zp->dtype : x->dtype,
                                               zp ? zp->data : NULL, in_double, y->dtype, y->data, n, &l, cu->stream),
                           "DequantizeLinear");
    }
    /* float8: decoded to float first; its zero point is 0 by definition (not read) */
    void *xf;
    size_t bytes = (size_t)(n ? n : 1) * sizeof(float);
    KN_TRY(kn_cu_scratch(cu, bytes, &xf));
    st = kn_cu_check(c, kn_cu_cast_f8(x->dtype, KILN_DTYPE_FLOAT, x->data, xf, n, true, cu->stream),
                     "DequantizeLinear (float8 cast)");
    if (st == KILN_OK)
        st = kn_cu_check(c, kn_cu_dequantize(KILN_DTYPE_FLOAT, xf, s->dtype, s->data, KILN_DTYPE_FLOAT, NULL,
                                             s->dtype == KILN_DTYPE_DOUBLE, y->dtype, y->data, n, &l, cu->stream),
                         "DequantizeLinear");
    kn_cu_scratch_free(cu, xf, bytes);
    return st;
}

static bool dequantize_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    kiln_dtype xt = in[0] ? in[0]->dtype : KILN_DTYPE_UNDEFINED, stt = n_in > 1 && in[1] ? in[1]->dtype : 0;
    if (!is_quant_int(xt) && !is_f8(xt)) {
        snprintf(why, cap, "x of element type %s", kiln_dtype_name(xt));
        return false;
    }
    if (!kn_dtype_is_float(stt)) {
        snprintf(why, cap, "scale of element type %s", kiln_dtype_name(stt));
        return false;
    }
    if (n_in > 2 && in[2] && in[2]->dtype != xt) {
        snprintf(why, cap, "zero point of type %s for x of type %s", kiln_dtype_name(in[2]->dtype), kiln_dtype_name(xt));
        return false;
    }
    int64_t od = kn_attr_int(n, "output_dtype", 0);
    if (od && !kn_dtype_is_float((kiln_dtype)od)) {
        snprintf(why, cap, "output_dtype %lld", (long long)od);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ BitCast */

static kiln_status run_bitcast(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    if (y->nbytes != x->nbytes)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "output has %zu bytes but x %zu", y->nbytes, x->nbytes);
    if (!x->nbytes) return KILN_OK;
    return kn_cu_check(c, cudaMemcpyAsync(y->data, x->data, x->nbytes, cudaMemcpyDeviceToDevice, cu->stream),
                       "BitCast");
}

static bool bitcast_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)in;
    (void)n_in;
    int64_t to = kn_attr_int(n, "to", 0);
    if (!kn_dtype_is_valid((int)to) || !(KN_T_DENSE & KN_T((kiln_dtype)to))) {
        snprintf(why, cap, "to=%s", kn_dtype_is_valid((int)to) ? kiln_dtype_name((kiln_dtype)to) : "?");
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ MatMulInteger, QLinearMatMul */

/* Shapes as the CPU's mm_plan: 1-D A is [1, K], 1-D B is [K, 1]; batch dims broadcast (numpy rules,
 * aligned from the right). The kernel takes a batch with one stride per operand (0 = the same
 * matrix), which every trailing run of batch dims where each operand is either whole or broadcast
 * has; a batch that needs more (A [2, 3, ...] with B [3, ...], or [2, 1] with [1, 3]) runs as one
 * launch of that run per index of the dims before it. */
typedef struct {
    kn_cu_imatmul p;              /* one launch: p.batch matrices */
    int outer_dims;               /* the batch dims iterated on the host, before the run */
    int64_t od[KILN_MAX_RANK];    /* their sizes */
    int64_t oa[KILN_MAX_RANK];    /* A's and B's offsets along them, in matrices */
    int64_t ob[KILN_MAX_RANK];
    int64_t launches;
} int_plan_t;

static kiln_status int_plan(kn_kernel_ctx *c, const kn_tensor *A, const kn_tensor *B, const kn_tensor *Y,
                            int_plan_t *q) {
    kn_cu_imatmul *p = &q->p;
    if (A->rank < 1 || B->rank < 1) return kn_kernel_error(c, KILN_ERR_SHAPE, "operands must have rank >= 1");
    int64_t M = A->rank == 1 ? 1 : A->dims[A->rank - 2], K = A->dims[A->rank - 1];
    int64_t Kb = B->rank == 1 ? B->dims[0] : B->dims[B->rank - 2], N = B->rank == 1 ? 1 : B->dims[B->rank - 1];
    if (K != Kb) return kn_kernel_error(c, KILN_ERR_SHAPE, "inner dimensions %lld and %lld differ", (long long)K, (long long)Kb);
    const int ra = A->rank > 2 ? A->rank - 2 : 0, rb = B->rank > 2 ? B->rank - 2 : 0, nb = ra > rb ? ra : rb;
    int64_t yd[KILN_MAX_RANK], as[KILN_MAX_RANK], bs[KILN_MAX_RANK], yb = 1;
    int64_t a_run = 1, b_run = 1; /* matrices after dim d in A and in B */
    for (int d = nb - 1; d >= 0; d--) {
        int64_t ad = d - (nb - ra) >= 0 ? A->dims[d - (nb - ra)] : 1, bd = d - (nb - rb) >= 0 ? B->dims[d - (nb - rb)] : 1;
        if (ad != bd && ad != 1 && bd != 1)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "batch dimensions %lld and %lld do not broadcast", (long long)ad,
                                   (long long)bd);
        yd[d] = ad > bd ? ad : bd;
        as[d] = ad == 1 ? 0 : a_run, bs[d] = bd == 1 ? 0 : b_run;
        a_run *= ad, b_run *= bd, yb *= yd[d];
    }
    if (yb * M * N != kn_tensor_count(Y))
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "output of %lld elements for %lld matrices of %lldx%lld",
                               (long long)kn_tensor_count(Y), (long long)yb, (long long)M, (long long)N);
    /* the longest trailing run where A and B each stay whole or broadcast */
    int first = nb, a_whole = -1, b_whole = -1;
    int64_t run = 1;
    for (int d = nb - 1; d >= 0; d--) {
        if (yd[d] != 1) {
            int aw = as[d] != 0, bw = bs[d] != 0;
            if (a_whole < 0) a_whole = aw, b_whole = bw;
            if (aw != a_whole || bw != b_whole || (aw && as[d] != run) || (bw && bs[d] != run)) break;
            run *= yd[d];
        }
        first = d;
    }
    q->outer_dims = first;
    for (int d = 0; d < first; d++) q->od[d] = yd[d], q->oa[d] = as[d], q->ob[d] = bs[d];
    q->launches = run ? yb / run : 0;
    p->batch = run;
    p->M = M, p->N = N, p->K = K;
    p->sa = a_whole == 1 ? M * K : 0;
    p->sb = b_whole == 1 ? K * N : 0;
    p->sy = M * N;
    p->a_dt = A->dtype, p->b_dt = B->dtype;
    return KILN_OK;
}

/* The plan's launches: launch i's operands at the outer index that i spells */
static cudaError_t int_plan_run(const int_plan_t *q, const kn_tensor *A, const kn_tensor *B, kn_tensor *Y,
                                cudaStream_t s) {
    const size_t ysz = kiln_dtype_size(Y->dtype);
    for (int64_t i = 0; i < q->launches; i++) {
        int64_t rest = i, a_off = 0, b_off = 0;
        for (int d = q->outer_dims - 1; d >= 0; d--) {
            int64_t k = rest % q->od[d];
            rest /= q->od[d];
            a_off += k * q->oa[d], b_off += k * q->ob[d];
        }
        const char *a = (const char *)A->data + a_off * q->p.M * q->p.K;
        const char *b = (const char *)B->data + b_off * q->p.K * q->p.N;
        char *y = (char *)Y->data + (size_t)(i * q->p.batch * q->p.M * q->p.N) * ysz;
        cudaError_t e = kn_cu_imatmul_run(&q->p, a, b, y, s);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

static kiln_status check_zp_count(kn_kernel_ctx *c, const kn_tensor *z, int64_t want, const char *what) {
    int64_t n = z ? kn_tensor_count(z) : 0;
    if (n > 1 && n != want)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "%s has %lld values; expected 1 or %lld", what, (long long)n,
                               (long long)want);
    return KILN_OK;
}

static kiln_status run_matmul_integer(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *A = c->in[0], *B = c->in[1];
    const kn_tensor *za = c->n_inputs > 2 ? c->in[2] : NULL, *zb = c->n_inputs > 3 ? c->in[3] : NULL;
    kn_tensor *Y = c->out[0];
    if (!Y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    int_plan_t q;
    memset(&q, 0, sizeof q);
    KN_TRY(int_plan(c, A, B, Y, &q));
    KN_TRY(check_zp_count(c, za, q.p.M, "a_zero_point"));
    KN_TRY(check_zp_count(c, zb, q.p.N, "b_zero_point"));
    if (za && kn_tensor_count(za)) q.p.a_zp = za->data, q.p.a_zp_n = kn_tensor_count(za);
    if (zb && kn_tensor_count(zb)) q.p.b_zp = zb->data, q.p.b_zp_n = kn_tensor_count(zb);
    q.p.y_dt = KILN_DTYPE_INT32;
    return kn_cu_check(c, int_plan_run(&q, A, B, Y, cu->stream), "MatMulInteger");
}

static kiln_status run_qlinear_matmul(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *a = c->in[0], *sa = c->in[1], *za = c->in[2], *b = c->in[3], *sb = c->in[4], *zb = c->in[5];
    const kn_tensor *sy = c->in[6], *zy = c->n_inputs > 7 ? c->in[7] : NULL;
    kn_tensor *Y = c->out[0];
    if (!Y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    if (Y->dtype != KILN_DTYPE_INT8 && Y->dtype != KILN_DTYPE_UINT8)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "output type %s", kiln_dtype_name(Y->dtype));
    int_plan_t q;
    memset(&q, 0, sizeof q);
    KN_TRY(int_plan(c, a, b, Y, &q));
    KN_TRY(check_zp_count(c, za, q.p.M, "a_zero_point"));
    KN_TRY(check_zp_count(c, zb, q.p.N, "b_zero_point"));
    KN_TRY(check_zp_count(c, sa, q.p.M, "a_scale"));
    KN_TRY(check_zp_count(c, sb, q.p.N, "b_scale"));
    if (sa->dtype != sb->dtype || sa->dtype != sy->dtype)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "scales of types %s, %s and %s", kiln_dtype_name(sa->dtype),
                               kiln_dtype_name(sb->dtype), kiln_dtype_name(sy->dtype));
    if (za && kn_tensor_count(za)) q.p.a_zp = za->data, q.p.a_zp_n = kn_tensor_count(za);
    if (zb && kn_tensor_count(zb)) q.p.b_zp = zb->data, q.p.b_zp_n = kn_tensor_count(zb);
    if (zy && kn_tensor_count(zy)) q.p.y_zp = zy->data;
    q.p.y_dt = Y->dtype;
    q.p.s_dt = sa->dtype;
    q.p.a_scale = sa->data, q.p.a_s_n = kn_tensor_count(sa);
    q.p.b_scale = sb->data, q.p.b_s_n = kn_tensor_count(sb);
    q.p.y_scale = sy->data;
    return kn_cu_check(c, int_plan_run(&q, a, b, Y, cu->stream), "QLinearMatMul");
}

static bool int8_operands(kiln_dtype t) { return t == KILN_DTYPE_INT8 || t == KILN_DTYPE_UINT8; }

static bool imatmul_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    bool q = !strcmp(n->op_type, "QLinearMatMul");
    int b = q ? 3 : 1;
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) continue;
        bool operand = i == 0 || i == b || (!q && i >= 2) || (q && (i == 2 || i == 5 || i == 7));
        if (operand && !int8_operands(in[i]->dtype)) {
            snprintf(why, cap, "input %d of element type %s (int8 and uint8 run on CUDA)", i,
                     kiln_dtype_name(in[i]->dtype));
            return false;
        }
        if (!operand && !kn_dtype_is_float(in[i]->dtype)) {
            snprintf(why, cap, "scale input %d of element type %s", i, kiln_dtype_name(in[i]->dtype));
            return false;
        }
    }
    return true;
}

const kn_cuda_kernel kn_cuda_quant[] = {
    {"", "QuantizeLinear", run_quantize, quantize_supports, 0, 0, KN_CUK_ANY_TYPES,
     KN_CU_PARAMS(kn_cu_q_prepare, kn_cu_q_prm)},
    {"", "DequantizeLinear", run_dequantize, dequantize_supports, 0, 0, KN_CUK_ANY_TYPES,
     KN_CU_PARAMS(kn_cu_q_prepare, kn_cu_q_prm)},
    {"", "BitCast", run_bitcast, bitcast_supports, KN_T_DENSE, 0, 0},
    {"", "MatMulInteger", run_matmul_integer, imatmul_supports, 0, 0, 0},
    {"", "QLinearMatMul", run_qlinear_matmul, imatmul_supports, 0, 0, 0},
    KN_CUDA_QCONTRIB_KERNELS
    {NULL, NULL, NULL, NULL, 0, 0, 0},
};

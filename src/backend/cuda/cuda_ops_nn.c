/* CUDA kernels of the nn family: Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax, the
 * normalisations (Layer, RMS, Batch (inference), Instance, Group, Lp), pooling (Max, Average, Lp,
 * Global*) and TopK. Statistics accumulate in fp32 whatever the element type. */
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_datadep.h" /* TopK over long lines */
#include "ops/fused.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NEED_OUT(c, i)                                                                             \
    do {                                                                                           \
        if (!(c)->out[i]) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output %d shape unknown at run time", i); \
    } while (0)

static int norm_axis(int64_t a, int r) { return (int)(a < 0 ? a + r : a); }

static void outer_inner(const int64_t *dims, int rank, int axis, int64_t *outer, int64_t *inner) {
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < axis; d++) *outer *= dims[d];
    for (int d = axis + 1; d < rank; d++) *inner *= dims[d];
}

/* ------------------------------------------------------------------ reductions */

static const struct {
    const char *op;
    int code;
} kn_reduce_ops[] = {
    {"ReduceSum", KN_CU_RSUM},           {"ReduceMean", KN_CU_RMEAN},     {"ReduceMax", KN_CU_RMAX},
    {"ReduceMin", KN_CU_RMIN},           {"ReduceProd", KN_CU_RPROD},     {"ReduceL1", KN_CU_RL1},
    {"ReduceL2", KN_CU_RL2},             {"ReduceLogSum", KN_CU_RLOGSUM}, {"ReduceLogSumExp", KN_CU_RLOGSUMEXP},
    {"ReduceSumSquare", KN_CU_RSUMSQUARE}, {NULL, 0},
};

static bool axes_from_input(const kn_node *n) {
    return !strcmp(n->op_type, "ReduceSum") ? n->opset >= 13 : n->opset >= 18;
}

/* The attributes this file's kernels read (and what their op type selects), read once when the
 * session is compiled: one prepare hook for the table (nn_prepare). `has_axis` false lets each
 * kernel apply its own default. */
typedef struct nn_prm {
    int reduce;           /* the KN_CU_R* code of a Reduce* op, -1 for others */
    bool axes_from_input; /* Reduce*: axes are input 1 */
    const int64_t *axes;  /* ... else the attribute (n_axes of them) */
    int n_axes;
    bool noop_empty;      /* noop_with_empty_axes */
    bool has_axis;
    int64_t axis;
    int softmax_kind;     /* Softmax 0, LogSoftmax 1, Hardmax 2 */
    bool arg_max, select_last;
    float eps;            /* epsilon (1e-5) */
    int64_t num_groups;   /* GroupNormalization (1) */
    int64_t p;            /* LpNormalization, LpPool, GlobalLpPool (2) */
    /* pools */
    const int64_t *kernel_shape, *strides, *pads, *dilations;
    int n_kernel, n_strides, n_pads, n_dilations;
    int auto_pad;         /* 0 NOTSET, 1 SAME_UPPER, 2 SAME_LOWER, 3 VALID */
    int pool_kind;        /* MaxPool 0, AveragePool 1 (count_include_pad) or 2, LpPool 3 */
    int storage_order;
    bool layout_bad, nhwc; /* kiln.MaxPool/AveragePool's layout (bad: neither NCHW nor NHWC) */
    int global_code;      /* Global*Pool's reduction code; -1: GlobalLpPool's p is not 1 or 2 */
    /* TopK */
    int64_t k;            /* before opset 10 (1) */
    bool largest;
    /* losses */
    bool reduction_none, reduction_mean;
    bool has_ignore;
    int64_t ignore_index;
    /* LRN */
    int64_t size;
    float alpha, beta, bias;
} nn_prm;

static kiln_status nn_prepare(const kn_node *n, void *params) {
    nn_prm *p = params;
    memset(p, 0, sizeof *p);
    const char *op = n->op_type;
    p->reduce = -1;
    for (int i = 0; kn_reduce_ops[i].op; i++)
        if (!strcmp(kn_reduce_ops[i].op, op)) p->reduce = kn_reduce_ops[i].code;
    p->axes_from_input = axes_from_input(n);
    p->axes = kn_attr_ints(n, "axes", &p->n_axes);
    p->noop_empty = kn_attr_int(n, "noop_with_empty_axes", 0) != 0;
    const kn_attr *ax = kn_node_attr(n, "axis");
    p->has_axis = ax && ax->type == KN_ATTR_INT;
    p->axis = p->has_axis ? ax->i : 0;
    p->softmax_kind = !strcmp(op, "LogSoftmax") ? 1 : !strcmp(op, "Hardmax") ? 2 : 0;
    p->arg_max = !strcmp(op, "ArgMax");
    p->select_last = kn_attr_int(n, "select_last_index", 0) != 0;
    p->eps = kn_attr_float(n, "epsilon", 1e-5f);
    p->num_groups = kn_attr_int(n, "num_groups", 1);
    p->p = kn_attr_int(n, "p", 2);
    p->kernel_shape = kn_attr_ints(n, "kernel_shape", &p->n_kernel);
    p->strides = kn_attr_ints(n, "strides", &p->n_strides);
    p->pads = kn_attr_ints(n, "pads", &p->n_pads);
    p->dilations = kn_attr_ints(n, "dilations", &p->n_dilations);
    const char *ap = kn_attr_string(n, "auto_pad", "NOTSET");
    p->auto_pad = !strcmp(ap, "SAME_UPPER") ? 1 : !strcmp(ap, "SAME_LOWER") ? 2 : !strcmp(ap, "VALID") ? 3 : 0;
    p->pool_kind = !strcmp(op, "MaxPool") ? 0 : !strcmp(op, "LpPool") ? 3
                   : kn_attr_int(n, "count_include_pad", 0) ? 1 : 2;
    p->storage_order = (int)kn_attr_int(n, "storage_order", 0);
    p->layout_bad = !strcmp(n->domain, "kiln") && !kn_fused_conv_layout(n, &p->nhwc);
    p->global_code = !strcmp(op, "GlobalMaxPool") ? KN_CU_RMAX : !strcmp(op, "GlobalLpPool") ? KN_CU_RL2 : KN_CU_RMEAN;
    if (p->global_code == KN_CU_RL2 && p->p == 1) p->global_code = KN_CU_RL1;
    else if (p->global_code == KN_CU_RL2 && p->p != 2) p->global_code = -1;
    p->k = kn_attr_int(n, "k", 1);
    p->largest = kn_attr_int(n, "largest", 1) != 0;
    const char *red = kn_attr_string(n, "reduction", "mean");
    p->reduction_none = !strcmp(red, "none");
    p->reduction_mean = !strcmp(red, "mean");
    const kn_attr *ig = kn_node_attr(n, "ignore_index");
    p->has_ignore = ig != NULL;
    p->ignore_index = ig ? ig->i : 0;
    p->size = kn_attr_int(n, "size", 1);
    p->alpha = kn_attr_float(n, "alpha", 1e-4f);
    p->beta = kn_attr_float(n, "beta", 0.75f);
    p->bias = kn_attr_float(n, "bias", 1.0f);
    return KILN_OK;
}

static kiln_status nn_params(kn_kernel_ctx *c, nn_prm *local, const nn_prm **out) {
    return kn_ctx_params(c, nn_prepare, local, (const void **)out);
}

static int64_t axis_or(const nn_prm *p, int64_t dflt) { return p->has_axis ? p->axis : dflt; }

static kiln_status run_reduce(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    nn_prm local_prm;
    const nn_prm *prm;
    KN_TRY(nn_params(c, &local_prm, &prm));
    const int code = prm->reduce;
    if (code < 0) return kn_kernel_error(c, KILN_ERR_INTERNAL, "unknown reduction");
    kiln_dtype dt = x->dtype == KILN_DTYPE_BOOL ? KILN_DTYPE_UINT8 : x->dtype; /* bool max/min as bytes */
    int r = x->rank;
    bool flags[KILN_MAX_RANK] = {false};
    int64_t axes[KILN_MAX_RANK];
    int na = 0;
    if (prm->axes_from_input) {
        const kn_tensor *a = c->n_inputs > 1 ? c->in[1] : NULL;
        if (a) {
            na = (int)kn_tensor_count(a);
            if (na > KILN_MAX_RANK) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "too many axes");
            for (int i = 0; i < na; i++) axes[i] = kn_tensor_get_i64(a, i);
        }
    } else {
        const int64_t *a = prm->axes;
        na = prm->n_axes;
        if (na > KILN_MAX_RANK) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "too many axes");
        for (int i = 0; i < na; i++) axes[i] = a[i];
    }
    if (na == 0) {
        if (prm->noop_empty) {
            if (x->nbytes == y->nbytes && x->nbytes)
                return kn_cu_check(c, cudaMemcpyAsync(y->data, x->data, x->nbytes, cudaMemcpyDeviceToDevice, cu->stream),
                                   "reduce copy");
            return KILN_OK;
        }
        for (int d = 0; d < r; d++) flags[d] = true;
    }
    for (int i = 0; i < na; i++) {
        int a = norm_axis(axes[i], r);
        if (a < 0 || a >= r) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis %lld out of range", (long long)axes[i]);
        flags[a] = true;
    }
    if (kn_tensor_count(y) == 0) return KILN_OK;
    if (kn_tensor_count(x) == 0) {
        /* reduction over an empty set: the operation's identity */
        double v = code == KN_CU_RPROD ? 1.0 : (code == KN_CU_RMAX || code == KN_CU_RLOGSUM || code == KN_CU_RLOGSUMEXP) ? -INFINITY
                                      : code == KN_CU_RMIN ? INFINITY : 0.0;
        unsigned char bytes[16] = {0};
        kn_tensor tmp = {0};
        tmp.kind = KN_VALUE_TENSOR;
        tmp.dtype = y->dtype;
        tmp.data = bytes;
        tmp.nbytes = kiln_dtype_size(y->dtype);
        if (y->dtype == KILN_DTYPE_BOOL && isinf(v)) kn_tensor_set_i64(&tmp, 0, v > 0); /* max: false, min: true */
        else if (kn_dtype_is_int(y->dtype) && isinf(v)) kn_tensor_set_i64(&tmp, 0, v > 0 ? INT64_MAX : INT64_MIN);
        else kn_tensor_set_f64(&tmp, 0, v);
        return kn_cu_check(c, kn_cu_fill(kiln_dtype_size(y->dtype), bytes, y->data, kn_tensor_count(y), cu->stream),
                           c->node->op_type);
    }
    return kn_cu_check(c, kn_cu_reduce(code, dt, x->data, y->data, r, x->dims, flags, cu->stream), c->node->op_type);
}

static bool reduce_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n_in;
    kiln_dtype t = in[0]->dtype;
    bool int_ok = !strcmp(n->op_type, "ReduceSum") || !strcmp(n->op_type, "ReduceMax") ||
                  !strcmp(n->op_type, "ReduceMin") || !strcmp(n->op_type, "ReduceProd") ||
                  !strcmp(n->op_type, "ReduceMean") || !strcmp(n->op_type, "ReduceSumSquare") ||
                  !strcmp(n->op_type, "ReduceL1");
    if (kn_dtype_is_int(t) && !int_ok) {
        snprintf(why, cap, "%s on %s", n->op_type, kiln_dtype_name(t));
        return false;
    }
    return true;
}

static kiln_status run_argminmax(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    nn_prm local_prm;
    const nn_prm *prm;
    KN_TRY(nn_params(c, &local_prm, &prm));
    int axis = norm_axis(axis_or(prm, 0), x->rank);
    int64_t outer, inner;
    outer_inner(x->dims, x->rank, axis, &outer, &inner);
    return kn_cu_check(c, kn_cu_argminmax(x->dtype, x->data, c->out[0]->data, outer, x->dims[axis], inner, prm->arg_max,
                                          prm->select_last, cu->stream),
                       c->node->op_type);
}

static kiln_status run_softmax(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    const char *op = c->node->op_type;
    nn_prm local_prm;
    const nn_prm *prm;
    KN_TRY(nn_params(c, &local_prm, &prm));
    int kind = prm->softmax_kind;
    int r = x->rank;
    int64_t outer, len, inner;
    if (c->node->opset < 13) {
        int axis = norm_axis(axis_or(prm, 1), r);
        outer = 1;
        len = 1;
        for (int d = 0; d < axis; d++) outer *= x->dims[d];
        for (int d = axis; d < r; d++) len *= x->dims[d];
        inner = 1;
    } else {
        int axis = norm_axis(axis_or(prm, -1), r);
        if (r == 0) {
            outer = len = inner = 1;
        } else {
            outer_inner(x->dims, r, axis, &outer, &inner);
            len = x->dims[axis];
        }
    }
    return kn_cu_check(c, kn_cu_softmax(x->dtype, x->data, c->out[0]->data, outer, len, inner, kind, cu->stream), op);
}

/* ------------------------------------------------------------------ normalisations */

/* A parameter of `len` elements broadcast to the normalised shape, as a device pointer (scratch
 * when it had to be expanded). */
static kiln_status param_as_len(kn_cuda *cu, kn_kernel_ctx *c, const kn_tensor *p, const int64_t *norm_dims, int nr,
                                int64_t len, const void **out, void **scratch, size_t *scratch_bytes) {
    *out = p ? p->data : NULL;
    *scratch = NULL;
    *scratch_bytes = 0;
    if (!p || kn_tensor_count(p) == len) return KILN_OK;
    size_t bytes = (size_t)len * kiln_dtype_size(p->dtype);
    KN_TRY(kn_cu_scratch(cu, bytes, scratch));
    *scratch_bytes = bytes;
    kn_cu_view v;
    const kn_tensor *ops[1] = {p};
    kn_cu_make_view(&v, norm_dims, nr, ops, 1);
    KN_TRY(kn_cu_check(c, kn_cu_copy_view(kiln_dtype_size(p->dtype), p->data, 0, *scratch, &v, cu->stream),
                       "parameter broadcast"));
    *out = *scratch;
    return KILN_OK;
}

kiln_status kn_cu_run_layernorm(kn_cuda *cu, kn_kernel_ctx *c) {
    nn_prm local_prm;
    const nn_prm *prm;
    KN_TRY(nn_params(c, &local_prm, &prm));
    return kn_cu_run_layernorm_with(cu, c, axis_or(prm, -1), prm->eps);
}

kiln_status kn_cu_run_layernorm_with(kn_cuda *cu, kn_kernel_ctx *c, int64_t axis_attr, float eps) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    bool rms = !strcmp(c->node->op_type, "RMSNormalization");
    int r = x->rank;
    int axis = norm_axis(axis_attr, r);
    int64_t rows = 1, len = 1;
    for (int d = 0; d < axis; d++) rows *= x->dims[d];
    for (int d = axis; d < r; d++) len *= x->dims[d];
    const kn_tensor *scale = c->n_inputs > 1 ? c->in[1] : NULL, *bias = !rms && c->n_inputs > 2 ? c->in[2] : NULL;
    const void *ps, *pb;
    void *ss = NULL, *sb = NULL;
    size_t ssb = 0, sbb = 0;
    kiln_status st = param_as_len(cu, c, scale, x->dims + axis, r - axis, len, &ps, &ss, &ssb);
    if (st == KILN_OK) st = param_as_len(cu, c, bias, x->dims + axis, r - axis, len, &pb, &sb, &sbb);
    void *mean = NULL, *inv = NULL, *mtmp = NULL, *itmp = NULL;
    kn_tensor *mo = !rms && c->n_outputs > 1 ? c->out[1] : NULL, *io = !rms && c->n_outputs > 2 ? c->out[2] : NULL;
    if (st == KILN_OK && mo) {
        if (mo->dtype == KILN_DTYPE_FLOAT) mean = mo->data;
        else if ((st = kn_cu_scratch(cu, (size_t)rows * 4, &mtmp)) == KILN_OK) mean = mtmp;
    }
    if (st == KILN_OK && io) {
        if (io->dtype == KILN_DTYPE_FLOAT) inv = io->data;
        else if ((st = kn_cu_scratch(cu, (size_t)rows * 4, &itmp)) == KILN_OK) inv = itmp;
    }
    if (st == KILN_OK)
        st = kn_cu_check(c, kn_cu_layernorm(x->dtype, x->data, ps, pb, c->out[0]->data, mean, inv, rows, len, eps, rms,
                                            cu->stream),
                         c->node->op_type);
    if (st == KILN_OK && mtmp) st = kn_cu_check(c, kn_cu_cast(KILN_DTYPE_FLOAT, mo->dtype, mtmp, mo->data, rows, cu->stream), "mean");
    if (st == KILN_OK && itmp) st = kn_cu_check(c, kn_cu_cast(KILN_DTYPE_FLOAT, io->dtype, itmp, io->data, rows, cu->stream), "inv_std");
    kn_cu_scratch_free(cu, ss, ssb);
    kn_cu_scratch_free(cu, sb, sbb);
    kn_cu_scratch_free(cu, mtmp, (size_t)rows * 4);
    kn_cu_scratch_free(cu, itmp, (size_t)rows * 4);
    return st;
}

static bool same_float_params(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n;
    for (int i = 1; i < n_in; i++)
        if (in[i] && in[i]->dtype != in[0]->dtype) {
            snprintf(why, cap, "input %d is %s, input 0 %s", i, kiln_dtype_name(in[i]->dtype),
                     kiln_dtype_name(in[0]->dtype));
            return false;
        }
    return true;
}

static kiln_status run_batchnorm(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    int64_t ch = x->rank > 1 ? x->dims[1] : 1, n = x->rank ? x->dims[0] : 1, inner = 1;
    for (int d = 2; d < x->rank; d++) inner *= x->dims[d];
    float *ab;
    nn_prm local_prm;
    const nn_prm *prm;
    KN_TRY(nn_params(c, &local_prm, &prm));
    KN_TRY(kn_cu_scratch(cu, (size_t)ch * 8, (void **)&ab));
    kiln_status st = kn_cu_check(c, kn_cu_bn_coeffs(x->dtype, c->in[1]->data, c->in[2]->data, c->in[3]->data,
                                                    c->in[4]->data, prm->eps, ab, ab + ch,
                                                    ch, cu->stream),
                                 "BatchNormalization");
    if (st == KILN_OK)
        st = kn_cu_check(c, kn_cu_channel_affine(x->dtype, x->data, c->out[0]->data, ab, ab + ch, n, ch, inner, cu->stream),
                         "BatchNormalization");
    kn_cu_scratch_free(cu, ab, (size_t)ch * 8);
    return st;
}

static bool batchnorm_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    if (kn_attr_int(n, "training_mode", 0)) {
        snprintf(why, cap, "training mode");
        return false;
    }
    for (int o = 1; o < n->n_outputs; o++)
        if (n->outputs[o] >= 0) {
            snprintf(why, cap, "training outputs (running mean/var)");
            return false;
        }
    return same_float_params(n, in, n_in, why, cap);
}

static kiln_status run_instancenorm(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    int64_t n = x->dims[0], ch = x->dims[1], inner = 1;
    for (int d = 2; d < x->rank; d++) inner *= x->dims[d];
    nn_prm local_prm;
    const nn_prm *prm;
    KN_TRY(nn_params(c, &local_prm, &prm));
    return kn_cu_check(c, kn_cu_groupnorm(x->dtype, x->data, c->in[1]->data, c->in[2]->data, c->out[0]->data, n, ch, ch,
                                          inner, prm->eps, false, cu->stream),
                       "InstanceNormalization");
}

static kiln_status run_groupnorm(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    int64_t n = x->dims[0], ch = x->dims[1], inner = 1;
    for (int d = 2; d < x->rank; d++) inner *= x->dims[d];
    nn_prm local_prm;
    const nn_prm *prm;
    KN_TRY(nn_params(c, &local_prm, &prm));
    int64_t g = prm->num_groups;
    if (g <= 0 || ch % g) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "num_groups %lld does not divide %lld channels",
                                                 (long long)g, (long long)ch);
    bool per_group = kn_tensor_count(c->in[1]) == g && g != ch;
    return kn_cu_check(c, kn_cu_groupnorm(x->dtype, x->data, c->in[1]->data, c->in[2]->data, c->out[0]->data, n, ch, g,
                                          inner, prm->eps, per_group, cu->stream),
                       "GroupNormalization");
}

static bool rank3plus(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    if (in[0]->rank >= 0 && in[0]->rank < 3) {
        snprintf(why, cap, "input of rank %d", in[0]->rank);
        return false;
    }
    return same_float_params(n, in, n_in, why, cap);
}

static kiln_status run_lpnorm(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    nn_prm local_prm;
    const nn_prm *prm;
    KN_TRY(nn_params(c, &local_prm, &prm));
    int axis = norm_axis(axis_or(prm, -1), x->rank);
    int p = (int)prm->p;
    if (p != 1 && p != 2) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "p = %d (1 or 2)", p);
    int64_t outer, inner;
    outer_inner(x->dims, x->rank, axis, &outer, &inner);
    return kn_cu_check(c, kn_cu_lpnorm(x->dtype, x->data, c->out[0]->data, outer, x->dims[axis], inner, p, cu->stream),
                       "LpNormalization");
}

/* ------------------------------------------------------------------ pooling */

static kiln_status run_pool(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    const char *op = c->node->op_type;
    kn_cu_pool p;
    memset(&p, 0, sizeof p);
    p.nsp = x->rank - 2;
    if (p.nsp < 1 || p.nsp > 3) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "%d spatial dims", p.nsp);
    nn_prm local_prm;
    const nn_prm *prm;
    KN_TRY(nn_params(c, &local_prm, &prm));
    /* kiln.MaxPool / kiln.AveragePool: layout NHWC keeps the channels last */
    if (prm->layout_bad) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "layout must be NCHW or NHWC");
    p.nhwc = prm->nhwc;
    const int sp = p.nhwc ? 1 : 2; /* the first spatial dim */
    p.n = x->dims[0];
    p.c = x->dims[p.nhwc ? x->rank - 1 : 1];
    const int nk = prm->n_kernel, ns = prm->n_strides, np = prm->n_pads, nd = prm->n_dilations;
    const int64_t *k = prm->kernel_shape, *s = prm->strides, *pads = prm->pads, *dil = prm->dilations;
    if (!k || nk != p.nsp) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "kernel_shape has %d entries", nk);
    const int ap = prm->auto_pad;
    for (int d = 0; d < p.nsp; d++) {
        p.in[d] = x->dims[sp + d];
        p.out[d] = y->dims[sp + d];
        p.k[d] = k[d];
        p.stride[d] = s && ns == p.nsp ? s[d] : 1;
        p.dil[d] = dil && nd == p.nsp ? dil[d] : 1;
        p.pad_b[d] = pads && np == 2 * p.nsp ? pads[d] : 0;
        p.pad_e[d] = pads && np == 2 * p.nsp ? pads[p.nsp + d] : 0;
        if (ap == 1 || ap == 2) { /* SAME_UPPER, SAME_LOWER */
            int64_t total = (p.out[d] - 1) * p.stride[d] + (p.k[d] - 1) * p.dil[d] + 1 - p.in[d];
            if (total < 0) total = 0;
            p.pad_b[d] = ap == 1 ? total / 2 : total - total / 2;
            p.pad_e[d] = total - p.pad_b[d];
        } else if (ap == 3) { /* VALID */
            p.pad_b[d] = p.pad_e[d] = 0;
        }
    }
    p.kind = prm->pool_kind;
    if (p.kind == 3) p.p = (int)prm->p;
    p.storage_order = prm->storage_order;
    int64_t *ind = c->n_outputs > 1 && c->out[1] ? c->out[1]->data : NULL;
    return kn_cu_check(c, kn_cu_pool_run(x->dtype, x->data, y->data, ind, &p, cu->stream), op);
}

static bool pool_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n_in;
    bool nhwc = false;
    if (!strcmp(n->domain, "kiln") && kn_fused_conv_layout(n, &nhwc) && nhwc && in[0]->rank != 4) {
        snprintf(why, cap, "channels-last pooling is 2-D only");
        return false;
    }
    if (in[0]->rank >= 0 && (in[0]->rank < 3 || in[0]->rank > 5)) {
        snprintf(why, cap, "%d spatial dims (1 to 3 supported)", in[0]->rank - 2);
        return false;
    }
    if (n->n_outputs > 1 && n->outputs[1] >= 0 && in[0]->rank != 4 && kn_attr_int(n, "storage_order", 0)) {
        snprintf(why, cap, "indices with storage_order=1 outside 2-D");
        return false;
    }
    return true;
}

static kiln_status run_global_pool(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    const char *op = c->node->op_type;
    bool flags[KILN_MAX_RANK] = {false};
    for (int d = 2; d < x->rank; d++) flags[d] = true;
    nn_prm local_prm;
    const nn_prm *prm;
    KN_TRY(nn_params(c, &local_prm, &prm));
    const int code = prm->global_code;
    if (code < 0) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "GlobalLpPool p=%lld", (long long)prm->p);
    return kn_cu_check(c, kn_cu_reduce(code, x->dtype, x->data, c->out[0]->data, x->rank, x->dims, flags, cu->stream), op);
}

static kiln_status run_topk(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    NEED_OUT(c, 1);
    nn_prm local_prm;
    const nn_prm *prm;
    KN_TRY(nn_params(c, &local_prm, &prm));
    int axis = norm_axis(axis_or(prm, -1), x->rank);
    int64_t k = c->node->opset >= 10 ? kn_tensor_get_i64(c->in[1], 0) : prm->k;
    int64_t outer, inner;
    outer_inner(x->dims, x->rank, axis, &outer, &inner);
    /* a line longer than one block's shared memory sorts (a length known only now may be) */
    if (x->dims[axis] > KN_CU_TOPK_BLOCK_MAX)
        return kn_cu_run_topk_sorted(cu, c, x, c->out[0], c->out[1], outer, x->dims[axis], inner, k, prm->largest);
    return kn_cu_check(c, kn_cu_topk(x->dtype, x->data, c->out[0]->data, c->out[1]->data, outer, x->dims[axis], inner, k,
                                     prm->largest, true, cu->stream),
                       "TopK");
}

/* ------------------------------------------------------------------ losses */

static kiln_status nll_core(kn_cuda *cu, kn_kernel_ctx *c, const void *logp, kiln_dtype dt, int64_t N, int64_t C,
                            int64_t D, const kn_tensor *target, const kn_tensor *weight, kn_tensor *y) {
    nn_prm local_prm;
    const nn_prm *prm;
    KN_TRY(nn_params(c, &local_prm, &prm));
    size_t es = kiln_dtype_size(dt), bytes = (size_t)(N * D) * es;
    bool none = prm->reduction_none;
    void *loss = NULL, *w = NULL, *wsum = NULL;
    kiln_status st = KILN_OK;
    if (!none) st = kn_cu_scratch(cu, bytes ? bytes : 1, &loss);
    if (st == KILN_OK) st = kn_cu_scratch(cu, bytes ? bytes : 1, &w);
    if (st == KILN_OK)
        st = kn_cu_check(c, kn_cu_nll(dt, logp, target->data, target->dtype == KILN_DTYPE_INT64, weight ? weight->data : NULL,
                                      none ? y->data : loss, w, N, C, D, prm->ignore_index, prm->has_ignore,
                                      kn_cu_err_at(cu, c), cu->stream),
                         c->node->op_type);
    if (st == KILN_OK && !none) {
        int64_t n = N * D;
        bool all = true;
        st = kn_cu_check(c, kn_cu_reduce(KN_CU_RSUM, dt, loss, y->data, 1, &n, &all, cu->stream), c->node->op_type);
        if (st == KILN_OK && prm->reduction_mean) {
            st = kn_cu_scratch(cu, es, &wsum);
            if (st == KILN_OK)
                st = kn_cu_check(c, kn_cu_reduce(KN_CU_RSUM, dt, w, wsum, 1, &n, &all, cu->stream), c->node->op_type);
            kn_cu_view v;
            memset(&v, 0, sizeof v);
            v.rank = 1;
            v.dims[0] = 1;
            if (st == KILN_OK)
                st = kn_cu_check(c, kn_cu_binary(KN_CU_DIV, dt, y->data, wsum, y->data, &v, cu->stream), c->node->op_type);
        }
    }
    if (loss) kn_cu_scratch_free(cu, loss, bytes ? bytes : 1);
    if (w) kn_cu_scratch_free(cu, w, bytes ? bytes : 1);
    if (wsum) kn_cu_scratch_free(cu, wsum, es);
    return st;
}

static void loss_dims(const kn_tensor *x, int64_t *N, int64_t *C, int64_t *D) {
    *N = x->rank > 0 ? x->dims[0] : 1;
    *C = x->rank > 1 ? x->dims[1] : 1;
    *D = 1;
    for (int i = 2; i < x->rank; i++) *D *= x->dims[i];
}

static kiln_status run_nll(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    int64_t N, C, D;
    loss_dims(x, &N, &C, &D);
    return nll_core(cu, c, x->data, x->dtype, N, C, D, c->in[1], c->n_inputs > 2 ? c->in[2] : NULL, c->out[0]);
}

static kiln_status run_sce(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    int64_t N, C, D;
    loss_dims(x, &N, &C, &D);
    kn_tensor *lp = c->n_outputs > 1 ? c->out[1] : NULL;
    void *logp = lp ? lp->data : NULL;
    size_t bytes = x->nbytes;
    kiln_status st = KILN_OK;
    if (!logp) st = kn_cu_scratch(cu, bytes ? bytes : 1, &logp);
    if (st == KILN_OK) st = kn_cu_check(c, kn_cu_softmax(x->dtype, x->data, logp, N, C, D, 1, cu->stream), "log-softmax");
    if (st == KILN_OK) st = nll_core(cu, c, logp, x->dtype, N, C, D, c->in[1], c->n_inputs > 2 ? c->in[2] : NULL, c->out[0]);
    if (!lp && logp) kn_cu_scratch_free(cu, logp, bytes ? bytes : 1);
    return st;
}

static bool loss_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n;
    if (n_in > 1 && in[1] && in[1]->dtype != KILN_DTYPE_INT64 && in[1]->dtype != KILN_DTYPE_INT32) {
        snprintf(why, cap, "targets of type %s", kiln_dtype_name(in[1]->dtype));
        return false;
    }
    if (n_in > 2 && in[2] && in[2]->dtype != in[0]->dtype) {
        snprintf(why, cap, "weights of another type");
        return false;
    }
    return true;
}

static kiln_status run_lrn(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    if (x->rank < 2) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "LRN needs [N, C, ...]");
    int64_t inner = 1;
    for (int d = 2; d < x->rank; d++) inner *= x->dims[d];
    nn_prm local_prm;
    const nn_prm *prm;
    KN_TRY(nn_params(c, &local_prm, &prm));
    return kn_cu_check(c, kn_cu_lrn(x->dtype, x->data, c->out[0]->data, x->dims[0], x->dims[1], inner, prm->size,
                                    prm->alpha, prm->beta, prm->bias, cu->stream),
                       "LRN");
}

#define F KN_T_FLOATS

const kn_cuda_kernel kn_cuda_nn[] = {
    {"", "ReduceSum", run_reduce, reduce_supports, KN_T_NUM, 0x2, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "ReduceMean", run_reduce, reduce_supports, KN_T_NUM, 0x2, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "ReduceMax", run_reduce, reduce_supports, KN_T_NUM | KN_T_BOOL, 0x2, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "ReduceMin", run_reduce, reduce_supports, KN_T_NUM | KN_T_BOOL, 0x2, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "ReduceProd", run_reduce, reduce_supports, KN_T_NUM, 0x2, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "ReduceL1", run_reduce, reduce_supports, KN_T_NUM, 0x2, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "ReduceL2", run_reduce, reduce_supports, KN_T_NUM, 0x2, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "ReduceLogSum", run_reduce, reduce_supports, KN_T_NUM, 0x2, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "ReduceLogSumExp", run_reduce, reduce_supports, KN_T_NUM, 0x2, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "ReduceSumSquare", run_reduce, reduce_supports, KN_T_NUM, 0x2, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "ArgMax", run_argminmax, NULL, KN_T_NUM, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "ArgMin", run_argminmax, NULL, KN_T_NUM, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "Softmax", run_softmax, NULL, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "LogSoftmax", run_softmax, NULL, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "Hardmax", run_softmax, NULL, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "LayerNormalization", kn_cu_run_layernorm, same_float_params, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "RMSNormalization", kn_cu_run_layernorm, same_float_params, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "BatchNormalization", run_batchnorm, batchnorm_supports, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "InstanceNormalization", run_instancenorm, rank3plus, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "GroupNormalization", run_groupnorm, rank3plus, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "LpNormalization", run_lpnorm, NULL, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "MaxPool", run_pool, pool_supports, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "AveragePool", run_pool, pool_supports, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"kiln", "MaxPool", run_pool, pool_supports, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"kiln", "AveragePool", run_pool, pool_supports, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "LpPool", run_pool, pool_supports, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "GlobalAveragePool", run_global_pool, NULL, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "GlobalMaxPool", run_global_pool, NULL, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "GlobalLpPool", run_global_pool, NULL, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "TopK", run_topk, NULL, KN_T_NUM, 0x2, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "NegativeLogLikelihoodLoss", run_nll, loss_supports, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "LRN", run_lrn, NULL, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {"", "SoftmaxCrossEntropyLoss", run_sce, loss_supports, F, 0, 0, KN_CU_PARAMS(nn_prepare, nn_prm)},
    {NULL, NULL, NULL, NULL, 0, 0, 0},
};

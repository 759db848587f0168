/* The quant family: QuantizeLinear and DequantizeLinear (opset 10 to 28: per-tensor, per-axis
 * and blocked scales; integer, float8 and float4 quantised types), DynamicQuantizeLinear and
 * BitCast. Schemas and shape inference. */
#include "ops/quant.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static kiln_status why_error(char *why, size_t cap, kiln_status st, const char *fmt, ...) KN_PRINTF(4, 5);
static kiln_status why_error(char *why, size_t cap, kiln_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return st;
}

bool kn_quant_int_range(kiln_dtype t, int64_t *lo, int64_t *hi) {
    switch (t) {
    case KILN_DTYPE_UINT8: *lo = 0, *hi = 255; return true;
    case KILN_DTYPE_INT8: *lo = -128, *hi = 127; return true;
    case KILN_DTYPE_UINT16: *lo = 0, *hi = 65535; return true;
    case KILN_DTYPE_INT16: *lo = -32768, *hi = 32767; return true;
    case KILN_DTYPE_UINT4: *lo = 0, *hi = 15; return true;
    case KILN_DTYPE_INT4: *lo = -8, *hi = 7; return true;
    case KILN_DTYPE_UINT2: *lo = 0, *hi = 3; return true;
    case KILN_DTYPE_INT2: *lo = -2, *hi = 1; return true;
    default: return false;
    }
}

static bool is_quant_float(kiln_dtype t) {
    return (t >= KILN_DTYPE_FLOAT8E4M3FN && t <= KILN_DTYPE_FLOAT8E5M2FNUZ) || t == KILN_DTYPE_FLOAT4E2M1;
}

static bool is_quant_type(kiln_dtype t) {
    int64_t lo, hi;
    return kn_quant_int_range(t, &lo, &hi) || is_quant_float(t);
}

/* scale and zero-point element types */
static bool is_scale_type(kiln_dtype t) {
    return kn_dtype_is_float(t) || t == KILN_DTYPE_FLOAT8E8M0;
}

kiln_status kn_quant_out_dtype(const kn_node *node, kiln_dtype zp_dtype, kiln_dtype *out, char *why, size_t cap) {
    int64_t od = kn_attr_int(node, "output_dtype", 0);
    if (od != 0 && !kn_dtype_is_valid((int)od))
        return why_error(why, cap, KILN_ERR_INVALID_MODEL, "output_dtype=%lld is not an element type", (long long)od);
    kiln_dtype t = zp_dtype != KILN_DTYPE_UNDEFINED ? zp_dtype : od ? (kiln_dtype)od : KILN_DTYPE_UINT8;
    if (zp_dtype != KILN_DTYPE_UNDEFINED && od && od != zp_dtype)
        return why_error(why, cap, KILN_ERR_INVALID_MODEL, "output_dtype is %s but the zero point is %s",
                         kiln_dtype_name((kiln_dtype)od), kiln_dtype_name(zp_dtype));
    if (!is_quant_type(t))
        return why_error(why, cap, KILN_ERR_UNSUPPORTED,
                         "the quantised type %s is not one of uint8, int8, uint16, int16, uint4, int4, uint2, int2, "
                         "float8 or float4e2m1",
                         kiln_dtype_name(t));
    *out = t;
    return KILN_OK;
}

kiln_status kn_quant_layout_get(const kn_node *node, int x_rank, const int64_t *x_dims, int s_rank,
                                const int64_t *s_dims, kn_quant_layout *l, char *why, size_t cap) {
    return kn_quant_layout_get_with(kn_attr_int(node, "axis", 1), kn_attr_int(node, "block_size", 0), x_rank, x_dims,
                                    s_rank, s_dims, l, why, cap);
}

kiln_status kn_quant_layout_get_with(int64_t axis, int64_t block, int x_rank, const int64_t *x_dims, int s_rank,
                                     const int64_t *s_dims, kn_quant_layout *l, char *why, size_t cap) {
    char xs[256], ss[256];
    memset(l, 0, sizeof *l);
    l->outer = l->D = l->inner = l->Ds = 1;
    int64_t s_count = 1;
    for (int i = 0; i < s_rank; i++) s_count = s_dims[i] < 0 || s_count < 0 ? -1 : s_count * s_dims[i];
    if (block < 0) return why_error(why, cap, KILN_ERR_INVALID_MODEL, "block_size %lld is negative", (long long)block);
    /* a scalar, or any one-element scale, is per-tensor (as the reference reads it) */
    if (s_rank == 0 || s_count == 1) {
        l->mode = KN_QUANT_TENSOR;
        return KILN_OK;
    }
    if (axis < -x_rank || axis >= x_rank)
        return why_error(why, cap, KILN_ERR_INVALID_MODEL, "axis %lld is out of range for x %s (rank %d)",
                         (long long)axis, kn_dims_str(x_dims, x_rank, xs, sizeof xs), x_rank);
    if (axis < 0) axis += x_rank;
    l->axis = (int)axis;
    for (int i = 0; i < x_rank; i++) {
        int64_t d = x_dims[i];
        int64_t *acc = i < axis ? &l->outer : i > axis ? &l->inner : &l->D;
        *acc = d < 0 || *acc < 0 ? -1 : *acc * d;
    }
    if (block == 0) {
        if (s_rank != 1)
            return why_error(why, cap, KILN_ERR_SHAPE,
                             "the scale %s must be a scalar or 1-D (per-axis) when block_size is 0",
                             kn_dims_str(s_dims, s_rank, ss, sizeof ss));
        if (s_dims[0] >= 0 && x_dims[axis] >= 0 && s_dims[0] != x_dims[axis])
            return why_error(why, cap, KILN_ERR_SHAPE, "the per-axis scale has %lld elements but x %s has %lld along axis %d",
                             (long long)s_dims[0], kn_dims_str(x_dims, x_rank, xs, sizeof xs),
                             (long long)x_dims[axis], (int)axis);
        l->mode = KN_QUANT_AXIS;
        l->Ds = l->D;
        return KILN_OK;
    }
    if (s_rank != x_rank)
        return why_error(why, cap, KILN_ERR_SHAPE, "blocked quantisation (block_size %lld) needs a scale of x's rank %d, not %s",
                         (long long)block, x_rank, kn_dims_str(s_dims, s_rank, ss, sizeof ss));
    for (int i = 0; i < x_rank; i++) {
        if (s_dims[i] < 0 || x_dims[i] < 0) continue;
        int64_t want = i == axis ? (x_dims[i] + block - 1) / block : x_dims[i];
        if (s_dims[i] != want)
            return why_error(why, cap, KILN_ERR_SHAPE,
                             "the scale %s does not fit x %s with block_size %lld on axis %d (dimension %d must be %lld)",
                             kn_dims_str(s_dims, s_rank, ss, sizeof ss), kn_dims_str(x_dims, x_rank, xs, sizeof xs),
                             (long long)block, (int)axis, i, (long long)want);
    }
    l->mode = KN_QUANT_BLOCKED;
    l->block = block;
    l->Ds = s_dims[axis];
    return KILN_OK;
}

static void dims_of(const kn_type *t, int64_t *d) {
    for (int i = 0; i < t->rank; i++) d[i] = t->dims[i].value;
}

/* A scalar or a one-element tensor (unknown dims count as not known to be one). */
static bool one_element(const kn_type *t) {
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i].value != 1) return false;
    return true;
}

/* Checks the scale (input 1) and zero point (input 2) against x (input 0). */
static kiln_status check_scale(kn_infer_ctx *c) {
    const kn_type *x = c->in[0], *s = c->in[1];
    const kn_type *zp = c->n_inputs > 2 ? c->in[2] : NULL;
    char why[512];
    if (s->dtype != KILN_DTYPE_UNDEFINED && !is_scale_type(s->dtype))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "the scale has element type %s; it must be a float type",
                              kiln_dtype_name(s->dtype));
    if (x->rank < 0 || s->rank < 0) return KILN_OK;
    int64_t xd[KILN_MAX_RANK], sd[KILN_MAX_RANK];
    dims_of(x, xd);
    dims_of(s, sd);
    kn_quant_layout l;
    kiln_status st = kn_quant_layout_get(c->node, x->rank, xd, s->rank, sd, &l, why, sizeof why);
    if (st != KILN_OK) return kn_infer_error(c, st, "%s", why);
    if (zp && zp->rank >= 0 && !(l.mode == KN_QUANT_TENSOR && one_element(zp))) {
        bool same = zp->rank == s->rank;
        for (int i = 0; same && i < s->rank; i++)
            if (zp->dims[i].value >= 0 && s->dims[i].value >= 0 && zp->dims[i].value != s->dims[i].value) same = false;
        if (!same) {
            char a[256], b[256];
            return kn_infer_error(c, KILN_ERR_SHAPE, "the zero point %s and the scale %s must have the same shape",
                                  kn_type_str(zp, a, sizeof a), kn_type_str(s, b, sizeof b));
        }
    }
    return KILN_OK;
}

static kiln_status need_inputs(kn_infer_ctx *c, int n) {
    for (int i = 0; i < n; i++)
        if (i >= c->n_inputs || !c->in[i]) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d is missing", i);
    return KILN_OK;
}

static kiln_status infer_quantize(kn_infer_ctx *c) {
    KN_TRY(need_inputs(c, 2));
    const kn_type *x = c->in[0];
    const kn_type *zp = c->n_inputs > 2 ? c->in[2] : NULL;
    kiln_dtype xt = x->dtype;
    if (xt != KILN_DTYPE_UNDEFINED && !kn_dtype_is_float(xt) && xt != KILN_DTYPE_INT32)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "x has element type %s; it must be a float type or int32",
                              kiln_dtype_name(xt));
    int64_t prec = kn_attr_int(c->node, "precision", 0);
    if (prec && (!kn_dtype_is_valid((int)prec) || !kn_dtype_is_float((kiln_dtype)prec)))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "precision=%lld is not float, double, float16 or bfloat16",
                              (long long)prec);
    kiln_dtype zt = zp ? zp->dtype : KILN_DTYPE_UNDEFINED, out;
    if (zp && zt == KILN_DTYPE_UNDEFINED) { /* known later */
        KN_TRY(kn_infer_same(c, 0, 0));
        c->out[0].dtype = KILN_DTYPE_UNDEFINED;
        return KILN_OK;
    }
    char why[512];
    kiln_status st = kn_quant_out_dtype(c->node, zt, &out, why, sizeof why);
    if (st != KILN_OK) return kn_infer_error(c, st, "%s", why);
    KN_TRY(check_scale(c));
    KN_TRY(kn_infer_same(c, 0, 0));
    c->out[0].kind = KN_TYPE_TENSOR;
    c->out[0].dtype = out;
    return KILN_OK;
}

static kiln_status infer_dequantize(kn_infer_ctx *c) {
    KN_TRY(need_inputs(c, 2));
    const kn_type *x = c->in[0], *s = c->in[1];
    const kn_type *zp = c->n_inputs > 2 ? c->in[2] : NULL;
    kiln_dtype xt = x->dtype;
    if (xt != KILN_DTYPE_UNDEFINED && !is_quant_type(xt) && xt != KILN_DTYPE_INT32)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED,
                              "x has element type %s; it must be a quantised integer, float8 or float4 type",
                              kiln_dtype_name(xt));
    /* an integer x needs a zero point of its own type (float8/float4 zero points must be 0 and are
     * not read) */
    if (zp && xt != KILN_DTYPE_UNDEFINED && zp->dtype != KILN_DTYPE_UNDEFINED && !is_quant_float(xt) && zp->dtype != xt)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "x is %s but the zero point is %s; they must be the same type",
                              kiln_dtype_name(xt), kiln_dtype_name(zp->dtype));
    int64_t od = kn_attr_int(c->node, "output_dtype", 0);
    kiln_dtype out = od ? (kiln_dtype)od : s->dtype;
    if (od && (!kn_dtype_is_valid((int)od) || !kn_dtype_is_float((kiln_dtype)od)))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "output_dtype=%lld is not float, double, float16 or bfloat16",
                              (long long)od);
    if (out == KILN_DTYPE_FLOAT8E8M0) out = KILN_DTYPE_FLOAT; /* an e8m0 scale gives float unless told */
    KN_TRY(check_scale(c));
    KN_TRY(kn_infer_same(c, 0, 0));
    c->out[0].kind = KN_TYPE_TENSOR;
    c->out[0].dtype = out;
    return KILN_OK;
}

static kiln_status infer_dynamic_quantize(kn_infer_ctx *c) {
    KN_TRY(need_inputs(c, 1));
    const kn_type *x = c->in[0];
    if (x->dtype != KILN_DTYPE_UNDEFINED && x->dtype != KILN_DTYPE_FLOAT)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "x has element type %s; DynamicQuantizeLinear takes float",
                              kiln_dtype_name(x->dtype));
    KN_TRY(kn_infer_same(c, 0, 0));
    c->out[0].kind = KN_TYPE_TENSOR;
    c->out[0].dtype = KILN_DTYPE_UINT8;
    if (c->n_outputs > 1) kn_infer_set(c, 1, KILN_DTYPE_FLOAT, 0, NULL);
    if (c->n_outputs > 2) kn_infer_set(c, 2, KILN_DTYPE_UINT8, 0, NULL);
    return KILN_OK;
}

static kiln_status infer_bitcast(kn_infer_ctx *c) {
    KN_TRY(need_inputs(c, 1));
    const kn_attr *a = kn_node_attr(c->node, "to");
    if (!a || a->type != KN_ATTR_INT) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attribute 'to' is missing");
    if (!kn_dtype_is_valid((int)a->i))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "to=%lld is not an element type kiln knows", (long long)a->i);
    kiln_dtype to = (kiln_dtype)a->i, from = c->in[0]->dtype;
    if (to == KILN_DTYPE_STRING || from == KILN_DTYPE_STRING)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "BitCast does not take or give strings");
    if (from != KILN_DTYPE_UNDEFINED && kn_dtype_bits(from) != kn_dtype_bits(to))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL,
                              "BitCast needs types of the same width, but %s has %d bits and %s %d",
                              kiln_dtype_name(from), kn_dtype_bits(from), kiln_dtype_name(to), kn_dtype_bits(to));
    KN_TRY(kn_infer_same(c, 0, 0));
    c->out[0].kind = KN_TYPE_TENSOR;
    c->out[0].dtype = to;
    return KILN_OK;
}

const kn_op_schema kn_ops_quant[] = {
    {"", "QuantizeLinear", 10, 0, 2, 3, 1, 1, infer_quantize, 0},
    {"", "DequantizeLinear", 10, 0, 2, 3, 1, 1, infer_dequantize, 0},
    {"", "DynamicQuantizeLinear", 11, 0, 1, 1, 3, 3, infer_dynamic_quantize, 0},
    {"", "BitCast", 26, 0, 1, 1, 1, 1, infer_bitcast, 0},
    {0},
};

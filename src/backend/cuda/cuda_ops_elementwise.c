/* CUDA kernels of the elementwise family: unary math and activations, binary arithmetic,
 * comparisons and logic with broadcasting, variadic Max/Min/Sum/Mean, Where, Cast/CastLike, Clip. */
#include "backend/cuda/cuda_backend.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ unary */

typedef struct unary_def {
    const char *op;
    int code;
    const char *a_name;
    float a_def;
    const char *b_name;
    float b_def;
} unary_def;

static const unary_def kn_unary_defs[] = {
    {"Abs", KN_CU_ABS, NULL, 0, NULL, 0},
    {"Neg", KN_CU_NEG, NULL, 0, NULL, 0},
    {"Exp", KN_CU_EXP, NULL, 0, NULL, 0},
    {"Log", KN_CU_LOG, NULL, 0, NULL, 0},
    {"Sqrt", KN_CU_SQRT, NULL, 0, NULL, 0},
    {"Reciprocal", KN_CU_RECIP, NULL, 0, NULL, 0},
    {"Floor", KN_CU_FLOOR, NULL, 0, NULL, 0},
    {"Ceil", KN_CU_CEIL, NULL, 0, NULL, 0},
    {"Round", KN_CU_ROUND, NULL, 0, NULL, 0},
    {"Sign", KN_CU_SIGN, NULL, 0, NULL, 0},
    {"Erf", KN_CU_ERF, NULL, 0, NULL, 0},
    {"Tanh", KN_CU_TANH, NULL, 0, NULL, 0},
    {"Sigmoid", KN_CU_SIGMOID, NULL, 0, NULL, 0},
    {"Relu", KN_CU_RELU, NULL, 0, NULL, 0},
    {"LeakyRelu", KN_CU_LEAKYRELU, "alpha", 0.01f, NULL, 0},
    {"Elu", KN_CU_ELU, "alpha", 1.0f, NULL, 0},
    {"Selu", KN_CU_SELU, "alpha", 1.67326319217681884765625f, "gamma", 1.05070102214813232421875f},
    {"HardSigmoid", KN_CU_HARDSIGMOID, "alpha", 0.2f, "beta", 0.5f},
    {"HardSwish", KN_CU_HARDSWISH, NULL, 0, NULL, 0},
    {"Softplus", KN_CU_SOFTPLUS, NULL, 0, NULL, 0},
    {"Softsign", KN_CU_SOFTSIGN, NULL, 0, NULL, 0},
    {"Sin", KN_CU_SIN, NULL, 0, NULL, 0},
    {"Cos", KN_CU_COS, NULL, 0, NULL, 0},
    {"Tan", KN_CU_TAN, NULL, 0, NULL, 0},
    {"Asin", KN_CU_ASIN, NULL, 0, NULL, 0},
    {"Acos", KN_CU_ACOS, NULL, 0, NULL, 0},
    {"Atan", KN_CU_ATAN, NULL, 0, NULL, 0},
    {"Sinh", KN_CU_SINH, NULL, 0, NULL, 0},
    {"Cosh", KN_CU_COSH, NULL, 0, NULL, 0},
    {"Asinh", KN_CU_ASINH, NULL, 0, NULL, 0},
    {"Acosh", KN_CU_ACOSH, NULL, 0, NULL, 0},
    {"Atanh", KN_CU_ATANH, NULL, 0, NULL, 0},
    {"Gelu", KN_CU_GELU, NULL, 0, NULL, 0},
    {"Mish", KN_CU_MISH, NULL, 0, NULL, 0},
    {"ThresholdedRelu", KN_CU_THRESHOLDEDRELU, "alpha", 1.0f, NULL, 0},
    {"Celu", KN_CU_CELU, "alpha", 1.0f, NULL, 0},
    {"Shrink", KN_CU_SHRINK, "lambd", 0.5f, "bias", 0.0f},
    {"Swish", KN_CU_SWISH, "alpha", 1.0f, NULL, 0},
    {"Not", KN_CU_NOT, NULL, 0, NULL, 0},
    {"BitwiseNot", KN_CU_BITNOT, NULL, 0, NULL, 0},
    {"IsNaN", KN_CU_ISNAN, NULL, 0, NULL, 0},
    {"IsInf", KN_CU_ISINF, NULL, 0, NULL, 0},
    {NULL, 0, NULL, 0, NULL, 0},
};

static const unary_def *unary_find(const char *op) {
    for (const unary_def *d = kn_unary_defs; d->op; d++)
        if (!strcmp(d->op, op)) return d;
    return NULL;
}

/* A unary node's operator and parameters (its prepare hook): code -1 when the op has no definition */
typedef struct unary_prm {
    int code;
    float a, b;
} unary_prm;

static kiln_status unary_prepare(const kn_node *n, void *params) {
    unary_prm *p = params;
    const unary_def *d = unary_find(n->op_type);
    p->code = d ? d->code : -1;
    p->a = d && d->a_name ? kn_attr_float(n, d->a_name, d->a_def) : 0;
    p->b = d && d->b_name ? kn_attr_float(n, d->b_name, d->b_def) : 0;
    if (p->code == KN_CU_GELU && !strcmp(kn_attr_string(n, "approximate", "none"), "tanh")) p->code = KN_CU_GELU_TANH;
    if (p->code == KN_CU_ISINF) {
        p->a = (float)kn_attr_int(n, "detect_positive", 1);
        p->b = (float)kn_attr_int(n, "detect_negative", 1);
    }
    return KILN_OK;
}

static kiln_status run_unary(kn_cuda *cu, kn_kernel_ctx *c) {
    unary_prm local;
    const unary_prm *p;
    KN_TRY(kn_ctx_params(c, unary_prepare, &local, (const void **)&p));
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (p->code < 0 || !y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "unary kernel without a definition or an output");
    return kn_cu_check(c, kn_cu_unary(p->code, x->dtype, x->data, y->data, kn_tensor_count(x), p->a, p->b, cu->stream),
                       c->node->op_type);
}

static kiln_status run_copy(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output shape unknown at run time");
    if (x->nbytes != y->nbytes) return kn_kernel_error(c, KILN_ERR_INTERNAL, "copy of %zu bytes into %zu", x->nbytes, y->nbytes);
    if (!x->nbytes || x->data == y->data) return KILN_OK;
    return kn_cu_check(c, cudaMemcpyAsync(y->data, x->data, x->nbytes, cudaMemcpyDeviceToDevice, cu->stream),
                       "device copy");
}

/* ------------------------------------------------------------------ binary */

typedef struct binary_def {
    const char *op;
    int code;
} binary_def;

static const binary_def kn_binary_defs[] = {
    {"Add", KN_CU_ADD},           {"Sub", KN_CU_SUB},         {"Mul", KN_CU_MUL},         {"Div", KN_CU_DIV},
    {"Pow", KN_CU_POW},           {"Mod", KN_CU_MOD},         {"PRelu", KN_CU_PRELU},     {"BitwiseAnd", KN_CU_BITAND},
    {"BitwiseOr", KN_CU_BITOR},   {"BitwiseXor", KN_CU_BITXOR}, {"Equal", KN_CU_EQ},      {"Less", KN_CU_LT},
    {"LessOrEqual", KN_CU_LE},    {"Greater", KN_CU_GT},      {"GreaterOrEqual", KN_CU_GE}, {"And", KN_CU_AND},
    {"Or", KN_CU_OR},             {"Xor", KN_CU_XOR},         {"BitShift", KN_CU_SHL},    {NULL, 0},
};

static kiln_status binary_into(kn_cuda *cu, kn_kernel_ctx *c, int code, const kn_tensor *a, const kn_tensor *b,
                               kn_tensor *y) {
    kn_cu_view v;
    const kn_tensor *ops[2] = {a, b};
    kn_cu_make_view(&v, y->dims, y->rank, ops, 2);
    return kn_cu_check(c, kn_cu_binary(code, a->dtype, a->data, b->data, y->data, &v, cu->stream), c->node->op_type);
}

/* A binary node's operator (its prepare hook, with Mod's fmod and BitShift's direction): -1 when the
 * op has no definition */
typedef struct binary_prm {
    int code;
} binary_prm;

static kiln_status binary_prepare(const kn_node *n, void *params) {
    const binary_def *d = kn_binary_defs;
    while (d->op && strcmp(d->op, n->op_type)) d++;
    int code = d->op ? d->code : -1;
    if (code == KN_CU_MOD && kn_attr_int(n, "fmod", 0)) code = KN_CU_FMOD;
    if (code == KN_CU_SHL && !strcmp(kn_attr_string(n, "direction", "LEFT"), "RIGHT")) code = KN_CU_SHR;
    ((binary_prm *)params)->code = code;
    return KILN_OK;
}

static kiln_status run_binary(kn_cuda *cu, kn_kernel_ctx *c) {
    binary_prm local;
    const binary_prm *p;
    KN_TRY(kn_ctx_params(c, binary_prepare, &local, (const void **)&p));
    kn_tensor *y = c->out[0];
    if (p->code < 0 || !y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "binary kernel without a definition or an output");
    int code = p->code;
    const kn_tensor *a = c->in[0], *b = c->in[1];
    if (code == KN_CU_POW && kn_dtype_is_int(a->dtype) && kn_dtype_is_float(b->dtype)) {
        /* an integer base with a float exponent: in the exponent's type, then back */
        void *ta, *ty = NULL;
        size_t ta_b, ty_b = (size_t)kn_tensor_count(y) * kiln_dtype_size(b->dtype);
        KN_TRY(kn_cu_converted(cu, c, a->data, a->dtype, kn_tensor_count(a), b->dtype, &ta, &ta_b));
        kiln_status st = kn_cu_scratch(cu, ty_b ? ty_b : 1, &ty);
        kn_tensor aa = *a, yy = *y;
        aa.dtype = b->dtype;
        aa.data = ta;
        yy.dtype = b->dtype;
        yy.data = ty;
        if (st == KILN_OK) st = binary_into(cu, c, code, &aa, b, &yy);
        if (st == KILN_OK) st = kn_cu_check(c, kn_cu_cast(b->dtype, y->dtype, ty, y->data, kn_tensor_count(y), cu->stream), "Pow");
        if (ty) kn_cu_scratch_free(cu, ty, ty_b ? ty_b : 1);
        if (ta_b) kn_cu_scratch_free(cu, ta, ta_b);
        return st;
    }
    if (code == KN_CU_POW && b->dtype != a->dtype) {
        /* Pow's exponent may have another type: bring it to the base's type first */
        void *tmp;
        size_t bytes;
        KN_TRY(kn_cu_converted(cu, c, b->data, b->dtype, kn_tensor_count(b), a->dtype, &tmp, &bytes));
        kn_tensor bb = *b;
        bb.dtype = a->dtype;
        bb.data = tmp;
        kiln_status st = binary_into(cu, c, code, a, &bb, y);
        if (bytes) kn_cu_scratch_free(cu, tmp, bytes);
        return st;
    }
    return binary_into(cu, c, code, a, b, y);
}

static bool pow_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n;
    if (n_in < 2 || !in[1]) return true;
    kiln_dtype a = in[0]->dtype, b = in[1]->dtype;
    if (a == b) return true;
    /* a float base with any numeric exponent converts the exponent; integer bases need equal types */
    if ((KN_T(a) & KN_T_FLOATS) && (KN_T(b) & KN_T_NUM)) return true;
    if ((KN_T(a) & KN_T_INTS) && (KN_T(b) & KN_T_FLOATS)) return true;
    snprintf(why, cap, "Pow of %s by %s", kiln_dtype_name(a), kiln_dtype_name(b));
    return false;
}

static bool same_type_inputs(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n;
    for (int i = 1; i < n_in; i++)
        if (in[i] && in[0] && in[i]->dtype != in[0]->dtype) {
            snprintf(why, cap, "inputs of different element types (%s, %s)", kiln_dtype_name(in[0]->dtype),
                     kiln_dtype_name(in[i]->dtype));
            return false;
        }
    return true;
}

/* Max, Min, Sum, Mean over any number of inputs, pairwise into the output. */
static kiln_status run_variadic(kn_cuda *cu, kn_kernel_ctx *c) {
    const char *op = c->node->op_type;
    int code = !strcmp(op, "Max") ? KN_CU_MAX : !strcmp(op, "Min") ? KN_CU_MIN : KN_CU_ADD;
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output shape unknown at run time");
    int n = 0;
    const kn_tensor *ins[64];
    for (int i = 0; i < c->n_inputs && n < 64; i++)
        if (c->in[i]) ins[n++] = c->in[i];
    if (n == 1) {
        /* broadcast-copy the single input */
        kn_cu_view v;
        kn_cu_make_view(&v, y->dims, y->rank, ins, 1);
        KN_TRY(kn_cu_check(c, kn_cu_copy_view(kiln_dtype_size(y->dtype), ins[0]->data, 0, y->data, &v, cu->stream),
                           op));
    } else {
        KN_TRY(binary_into(cu, c, code, ins[0], ins[1], y));
        for (int i = 2; i < n; i++) KN_TRY(binary_into(cu, c, code, y, ins[i], y));
    }
    if (!strcmp(op, "Mean"))
        KN_TRY(kn_cu_check(c, kn_cu_scale(y->dtype, y->data, y->data, kn_tensor_count(y), 1.0f / (float)n, cu->stream),
                           op));
    return KILN_OK;
}

static kiln_status run_where(kn_cuda *cu, kn_kernel_ctx *c) {
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output shape unknown at run time");
    kn_cu_view v;
    const kn_tensor *ops[3] = {c->in[0], c->in[1], c->in[2]};
    kn_cu_make_view(&v, y->dims, y->rank, ops, 3);
    return kn_cu_check(c, kn_cu_where(y->dtype, c->in[0]->data, c->in[1]->data, c->in[2]->data, y->data, &v, cu->stream),
                       "Where");
}

static bool where_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n;
    if (n_in == 3 && in[1] && in[2] && in[1]->dtype != in[2]->dtype) {
        snprintf(why, cap, "X and Y of different types");
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ cast, clip */

/* Cast and CastLike's attributes (their prepare hook) */
typedef struct cast_prm {
    bool saturate;
    int round_mode;         /* up, down, nearest: 0-2; -1 none of them */
    const char *round_name; /* for the message */
} cast_prm;

static kiln_status cast_prepare(const kn_node *n, void *params) {
    cast_prm *p = params;
    p->saturate = n->opset < 19 || kn_attr_int(n, "saturate", 1) != 0;
    const char *rm = kn_attr_string(n, "round_mode", "up");
    p->round_name = rm;
    p->round_mode = !strcmp(rm, "up") ? 0 : !strcmp(rm, "down") ? 1 : !strcmp(rm, "nearest") ? 2 : -1;
    return KILN_OK;
}

static kiln_status run_cast(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output shape unknown at run time");
    if (x->dtype == y->dtype) return run_copy(cu, c);
    cast_prm local;
    const cast_prm *p;
    KN_TRY(kn_ctx_params(c, cast_prepare, &local, (const void **)&p));
    const bool saturate = p->saturate;
    if (kn_cu_cast_packed_supported(x->dtype, y->dtype)) {
        if (p->round_mode < 0)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "round_mode='%s' is not up, down or nearest", p->round_name);
        return kn_cu_check(c, kn_cu_cast_packed(x->dtype, y->dtype, x->data, y->data, kn_tensor_count(x), saturate,
                                                p->round_mode, cu->stream),
                           "Cast");
    }
    return kn_cu_check(c, kn_cu_cast_f8(x->dtype, y->dtype, x->data, y->data, kn_tensor_count(x), saturate, cu->stream),
                       "Cast");
}

static bool cast_type(kiln_dtype t) {
    return (KN_T_DENSE & KN_T(t)) || t == KILN_DTYPE_FLOAT8E4M3FN || t == KILN_DTYPE_FLOAT8E4M3FNUZ ||
           t == KILN_DTYPE_FLOAT8E5M2 || t == KILN_DTYPE_FLOAT8E5M2FNUZ;
}

static bool cast_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    kiln_dtype to = !strcmp(n->op_type, "CastLike") ? (n_in > 1 && in[1] ? in[1]->dtype : KILN_DTYPE_UNDEFINED)
                                                    : (kiln_dtype)kn_attr_int(n, "to", 0);
    kiln_dtype from = n_in > 0 && in[0] ? in[0]->dtype : KILN_DTYPE_UNDEFINED;
    /* packed sub-byte types and float8e8m0 (every round_mode): cu_cast_packed.cu */
    if (kn_cu_cast_packed_supported(from, to)) return true;
    if (!cast_type(to) || !cast_type(from)) {
        snprintf(why, cap, "cast from %s to %s", kiln_dtype_name(from), kiln_dtype_name(to));
        return false;
    }
    if (kn_node_attr(n, "round_mode") && strcmp(kn_attr_string(n, "round_mode", "up"), "up")) {
        snprintf(why, cap, "round_mode %s", kn_attr_string(n, "round_mode", ""));
        return false;
    }
    return true;
}

static double scalar_of(const kn_tensor *t, double dflt) {
    if (!t || kn_tensor_count(t) < 1) return dflt;
    return kn_tensor_get_f64(t, 0);
}

/* Clip's bounds before opset 11 (attributes; later they are inputs): its prepare hook */
typedef struct clip_prm {
    float lo, hi;
} clip_prm;

static kiln_status clip_prepare(const kn_node *n, void *params) {
    clip_prm *p = params;
    p->lo = kn_attr_float(n, "min", -INFINITY);
    p->hi = kn_attr_float(n, "max", INFINITY);
    return KILN_OK;
}

static kiln_status run_clip(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    double lo = NAN, hi = NAN;
    if (c->node->opset < 11) {
        clip_prm local;
        const clip_prm *p;
        KN_TRY(kn_ctx_params(c, clip_prepare, &local, (const void **)&p));
        lo = p->lo;
        hi = p->hi;
    } else {
        lo = scalar_of(c->n_inputs > 1 ? c->in[1] : NULL, NAN);
        hi = scalar_of(c->n_inputs > 2 ? c->in[2] : NULL, NAN);
    }
    return kn_cu_check(c, kn_cu_clip(x->dtype, x->data, y->data, kn_tensor_count(x), lo, hi, cu->stream), "Clip");
}

static kiln_status run_dropout(kn_cuda *cu, kn_kernel_ctx *c) {
    if (c->node->opset >= 12 && c->n_inputs > 2 && c->in[2] && kn_tensor_count(c->in[2]) > 0 &&
        kn_tensor_get_i64(c->in[2], 0) != 0)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "training-mode Dropout on CUDA");
    KN_TRY(run_copy(cu, c));
    if (c->n_outputs > 1 && c->out[1]) {
        kn_tensor *m = c->out[1];
        if (m->dtype == KILN_DTYPE_BOOL) {
            KN_TRY(kn_cu_check(c, cudaMemsetAsync(m->data, 1, m->nbytes, cu->stream), "Dropout mask"));
        } else {
            double one = 1.0;
            float onef = 1.0f;
            KN_TRY(kn_cu_check(c, kn_cu_fill(kiln_dtype_size(m->dtype), m->dtype == KILN_DTYPE_DOUBLE ? (void *)&one : (void *)&onef,
                                             m->data, kn_tensor_count(m), cu->stream),
                               "Dropout mask"));
        }
    }
    return KILN_OK;
}

static bool dropout_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)in;
    if (n->opset >= 12 && n_in > 2 && in[2]) {
        /* training_mode is only known at run time: the CPU kernel (with its generator) takes it */
        snprintf(why, cap, "a training_mode input");
        return false;
    }
    if (n->n_outputs > 1 && n->outputs[1] >= 0 && n->opset < 10) {
        snprintf(why, cap, "Dropout mask of opset < 10");
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ table */

#define UNARY_F(op) {"", op, run_unary, NULL, KN_T_FLOATS, 0, 0, KN_CU_PARAMS(unary_prepare, unary_prm)}
#define UNARY_N(op) {"", op, run_unary, NULL, KN_T_FLOATS | KN_T_SINTS, 0, 0, KN_CU_PARAMS(unary_prepare, unary_prm)}
#define BINARY(op, types) {"", op, run_binary, same_type_inputs, types, 0, 0, KN_CU_PARAMS(binary_prepare, binary_prm)}

const kn_cuda_kernel kn_cuda_elementwise[] = {
    UNARY_N("Abs"), UNARY_N("Neg"), UNARY_F("Exp"), UNARY_F("Log"), UNARY_F("Sqrt"), UNARY_F("Reciprocal"),
    UNARY_F("Floor"), UNARY_F("Ceil"), UNARY_F("Round"), UNARY_N("Sign"), UNARY_F("Erf"), UNARY_F("Tanh"),
    UNARY_F("Sigmoid"), UNARY_N("Relu"), UNARY_F("LeakyRelu"), UNARY_F("Elu"), UNARY_F("Selu"), UNARY_F("HardSigmoid"),
    UNARY_F("HardSwish"), UNARY_F("Softplus"), UNARY_F("Softsign"), UNARY_F("Sin"), UNARY_F("Cos"), UNARY_F("Tan"),
    UNARY_F("Asin"), UNARY_F("Acos"), UNARY_F("Atan"), UNARY_F("Sinh"), UNARY_F("Cosh"), UNARY_F("Asinh"),
    UNARY_F("Acosh"), UNARY_F("Atanh"), UNARY_F("Gelu"), UNARY_F("Mish"), UNARY_F("ThresholdedRelu"), UNARY_F("Celu"),
    UNARY_F("Shrink"), UNARY_F("Swish"), UNARY_F("IsNaN"), UNARY_F("IsInf"),
    {"", "Not", run_unary, NULL, KN_T_BOOL, 0, 0, KN_CU_PARAMS(unary_prepare, unary_prm)},
    {"", "BitwiseNot", run_unary, NULL, KN_T_INTS, 0, 0, KN_CU_PARAMS(unary_prepare, unary_prm)},
    {"", "Identity", run_copy, NULL, KN_T_DENSE, 0, 0},
    {"", "Dropout", run_dropout, dropout_supports, KN_T_FLOATS, 0x6, 0},
    BINARY("Add", KN_T_NUM), BINARY("Sub", KN_T_NUM), BINARY("Mul", KN_T_NUM), BINARY("Div", KN_T_NUM),
    {"", "Pow", run_binary, pow_supports, KN_T_FLOATS | KN_T(KILN_DTYPE_INT32) | KN_T(KILN_DTYPE_INT64), 0, 0,
     KN_CU_PARAMS(binary_prepare, binary_prm)},
    BINARY("Mod", KN_T_NUM), BINARY("PRelu", KN_T_FLOATS | KN_T_SINTS),
    BINARY("BitwiseAnd", KN_T_INTS), BINARY("BitwiseOr", KN_T_INTS), BINARY("BitwiseXor", KN_T_INTS),
    BINARY("BitShift", KN_T_INTS),
    BINARY("Equal", KN_T_NUM | KN_T_BOOL), BINARY("Less", KN_T_NUM), BINARY("LessOrEqual", KN_T_NUM),
    BINARY("Greater", KN_T_NUM), BINARY("GreaterOrEqual", KN_T_NUM),
    BINARY("And", KN_T_BOOL), BINARY("Or", KN_T_BOOL), BINARY("Xor", KN_T_BOOL),
    {"", "Max", run_variadic, same_type_inputs, KN_T_NUM, 0, 0},
    {"", "Min", run_variadic, same_type_inputs, KN_T_NUM, 0, 0},
    {"", "Sum", run_variadic, same_type_inputs, KN_T_NUM, 0, 0},
    {"", "Mean", run_variadic, same_type_inputs, KN_T_FLOATS, 0, 0},
    {"", "Where", run_where, where_supports, KN_T_BOOL, 0, 0},
    {"", "Cast", run_cast, cast_supports, 0, 0, KN_CUK_ANY_TYPES, KN_CU_PARAMS(cast_prepare, cast_prm)},
    {"", "CastLike", run_cast, cast_supports, 0, 0, KN_CUK_ANY_TYPES, KN_CU_PARAMS(cast_prepare, cast_prm)},
    {"", "Clip", run_clip, NULL, KN_T_NUM, 0x6, 0, KN_CU_PARAMS(clip_prepare, clip_prm)},
    {NULL, NULL, NULL, NULL, 0, 0, 0},
};

/* Schemas of kiln's fused operators (domain "kiln", version 1); see src/ops/fused.h for what each
 * computes. The optimiser forms them; a model may also name them directly. Shape inference reuses
 * the ai.onnx Conv/Gemm/MatMul functions through a stand-in node. */
#include "ops/fused.h"

#include "ops/op.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ activations */

static const char *const act_names[KN_ACT_COUNT] = {
    [KN_ACT_NONE] = "",           [KN_ACT_RELU] = "Relu",         [KN_ACT_LEAKY_RELU] = "LeakyRelu",
    [KN_ACT_CLIP] = "Clip",       [KN_ACT_SIGMOID] = "Sigmoid",   [KN_ACT_TANH] = "Tanh",
    [KN_ACT_HARD_SIGMOID] = "HardSigmoid", [KN_ACT_HARD_SWISH] = "HardSwish", [KN_ACT_SILU] = "SiLU",
    [KN_ACT_GELU] = "Gelu",       [KN_ACT_GELU_TANH] = "GeluTanh",
};
_Static_assert(sizeof act_names / sizeof act_names[0] == KN_ACT_COUNT, "one name per activation");

const char *kn_act_name(kn_act a) { return (unsigned)a < KN_ACT_COUNT ? act_names[a] : "?"; }

bool kn_act_parse(const char *name, kn_act *out) {
    for (int i = 0; i < KN_ACT_COUNT; i++)
        if (!strcmp(act_names[i], name ? name : "")) {
            *out = (kn_act)i;
            return true;
        }
    return false;
}

/* The activation named by attribute `name_attr` (default `dflt`) with its parameters in
 * `params_attr`; activation_bounds when `bounds`. */
static bool act_from_attrs(const kn_node *n, const char *name_attr, const char *dflt, const char *params_attr,
                           bool bounds, kn_act_spec *out, char *why, size_t cap) {
    const char *name = kn_attr_string(n, name_attr, dflt);
    out->act = KN_ACT_NONE;
    out->p0 = out->p1 = 0;
    out->bounded = false;
    out->lo = -INFINITY;
    out->hi = INFINITY;
    if (!kn_act_parse(name, &out->act)) {
        snprintf(why, cap, "unknown activation '%s'", name);
        return false;
    }
    if (bounds && kn_node_attr(n, "activation_bounds")) {
        int nb = 0;
        const float *b = kn_attr_floats(n, "activation_bounds", &nb);
        if (!b || nb != 2 || isnan(b[0]) || isnan(b[1]) || b[0] > b[1] || b[0] == INFINITY || b[1] == -INFINITY) {
            snprintf(why, cap, "activation_bounds must be two floats lo <= hi, neither NaN (lo -inf or hi inf for none)");
            return false;
        }
        out->bounded = true;
        out->lo = b[0];
        out->hi = b[1];
    }
    int np = 0;
    const float *p = kn_attr_floats(n, params_attr, &np);
    switch (out->act) {
    case KN_ACT_LEAKY_RELU: out->p0 = np > 0 ? p[0] : 0.01f; break;
    case KN_ACT_CLIP:
        out->p0 = np > 0 ? p[0] : -INFINITY;
        out->p1 = np > 1 ? p[1] : INFINITY;
        break;
    case KN_ACT_HARD_SIGMOID:
        out->p0 = np > 0 ? p[0] : 0.2f;
        out->p1 = np > 1 ? p[1] : 0.5f;
        break;
    default: break;
    }
    return true;
}

bool kn_act_from_node(const kn_node *n, kn_act_spec *out, char *why, size_t cap) {
    return act_from_attrs(n, "activation", "", "activation_params", true, out, why, cap);
}

bool kn_squeeze_excite_from_node(const kn_node *n, kn_act_spec *act, kn_act_spec *gate, bool *nhwc, char *why,
                                 size_t cap) {
    if (!act_from_attrs(n, "activation", "", "activation_params", false, act, why, cap)) return false;
    if (!act_from_attrs(n, "gate", "Sigmoid", "gate_params", false, gate, why, cap)) {
        size_t len = strlen(why);
        if (len + 10 < cap) memmove(why + 6, why, len + 1), memcpy(why, "gate: ", 6);
        return false;
    }
    if (kn_node_attr(n, "activation_bounds")) {
        snprintf(why, cap, "activation_bounds is not taken by SqueezeExcite");
        return false;
    }
    if (!kn_fused_conv_layout(n, nhwc)) {
        snprintf(why, cap, "layout must be \"NCHW\" or \"NHWC\", not \"%s\"", kn_attr_string(n, "layout", ""));
        return false;
    }
    return true;
}

kiln_status kn_squeeze_excite_dims(const kn_kernel_ctx *c, bool nhwc, int64_t *N, int64_t *C, int64_t *M, int64_t *S) {
    const kn_tensor *X = c->in[0], *W1 = c->in[1], *B1 = c->n_inputs > 2 ? c->in[2] : NULL, *W2 = c->in[3],
                    *B2 = c->n_inputs > 4 ? c->in[4] : NULL;
    if (!c->out[0]) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output shape unknown at run time");
    if (X->rank < 3 || W1->rank < 1 || W2->rank < 1)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "X must have rank 3 or more, W1 and W2 rank 1 or more");
    *N = X->dims[0];
    *C = X->dims[nhwc ? X->rank - 1 : 1];
    *M = W1->dims[0];
    *S = *N && *C ? kn_tensor_count(X) / *N / *C : 0;
    if (W1->dims[0] * *C != kn_tensor_count(W1) || W2->dims[0] != *C || W2->dims[0] * *M != kn_tensor_count(W2) ||
        (B1 && kn_tensor_count(B1) != *M) || (B2 && kn_tensor_count(B2) != *C))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "W1, B1, W2, B2 do not make %lld -> %lld -> %lld channels", (long long)*C,
                               (long long)*M, (long long)*C);
    return KILN_OK;
}

/* ------------------------------------------------------------------ FusedElementwise programs */

static const char *const chain_names[KN_CHAIN_OP_END_] = {
    [KN_CHAIN_ADD] = "Add", [KN_CHAIN_SUB] = "Sub", [KN_CHAIN_MUL] = "Mul", [KN_CHAIN_DIV] = "Div",
    [KN_CHAIN_POW] = "Pow", [KN_CHAIN_MAX] = "Max", [KN_CHAIN_MIN] = "Min", [KN_CHAIN_PRELU] = "PRelu",
    [KN_CHAIN_ABS] = "Abs", [KN_CHAIN_NEG] = "Neg", [KN_CHAIN_EXP] = "Exp", [KN_CHAIN_LOG] = "Log",
    [KN_CHAIN_SQRT] = "Sqrt", [KN_CHAIN_RECIPROCAL] = "Reciprocal", [KN_CHAIN_FLOOR] = "Floor",
    [KN_CHAIN_CEIL] = "Ceil", [KN_CHAIN_ERF] = "Erf", [KN_CHAIN_TANH] = "Tanh", [KN_CHAIN_SIGMOID] = "Sigmoid",
    [KN_CHAIN_RELU] = "Relu", [KN_CHAIN_LEAKY_RELU] = "LeakyRelu", [KN_CHAIN_ELU] = "Elu", [KN_CHAIN_SELU] = "Selu",
    [KN_CHAIN_HARD_SIGMOID] = "HardSigmoid", [KN_CHAIN_HARD_SWISH] = "HardSwish", [KN_CHAIN_SOFTPLUS] = "Softplus",
    [KN_CHAIN_SOFTSIGN] = "Softsign", [KN_CHAIN_SIN] = "Sin", [KN_CHAIN_COS] = "Cos", [KN_CHAIN_GELU] = "Gelu",
    [KN_CHAIN_GELU_TANH] = "GeluTanh", [KN_CHAIN_CLIP] = "Clip", [KN_CHAIN_MISH] = "Mish",
};

bool kn_chain_op_binary(int op) { return op >= 0 && op < KN_CHAIN_BINARY_END_; }

const char *kn_chain_op_name(int op) { return op >= 0 && op < KN_CHAIN_OP_END_ ? chain_names[op] : NULL; }

bool kn_chain_from_node(const kn_node *n, int n_inputs, kn_chain_program *out, char *why, size_t cap) {
    memset(out, 0, sizeof *out);
    int np = 0, nf = 0, nc = 0;
    const int64_t *prog = kn_attr_ints(n, "program", &np);
    const float *params = kn_attr_floats(n, "params", &nf);
    const float *consts = kn_attr_floats(n, "constants", &nc);
    if (!prog || np == 0 || np % 3) {
        snprintf(why, cap, "program must hold 3 ints per step (has %d)", np);
        return false;
    }
    int steps = np / 3;
    if (n_inputs < 1 || n_inputs > KN_CHAIN_MAX_INPUTS || nc > KN_CHAIN_MAX_CONSTS || steps > KN_CHAIN_MAX_STEPS) {
        snprintf(why, cap, "%d inputs, %d constants and %d steps exceed the limits (%d, %d, %d)", n_inputs, nc, steps,
                 KN_CHAIN_MAX_INPUTS, KN_CHAIN_MAX_CONSTS, KN_CHAIN_MAX_STEPS);
        return false;
    }
    if (params && nf != 2 * steps) {
        snprintf(why, cap, "params must hold 2 floats per step (%d for %d steps)", nf, steps);
        return false;
    }
    out->n_inputs = n_inputs;
    out->n_consts = nc;
    out->n_steps = steps;
    for (int i = 0; i < nc; i++) out->consts[i] = consts[i];
    for (int k = 0; k < steps; k++) {
        int64_t op = prog[3 * k], a = prog[3 * k + 1], b = prog[3 * k + 2];
        int avail = n_inputs + nc + k; /* registers written before step k */
        const char *name = op >= 0 && op < KN_CHAIN_OP_END_ ? chain_names[op] : NULL;
        if (!name) {
            snprintf(why, cap, "step %d: unknown operator %lld", k, (long long)op);
            return false;
        }
        bool binary = kn_chain_op_binary((int)op);
        if (a < 0 || a >= avail || (binary && (b < 0 || b >= avail)) || (!binary && b != -1)) {
            snprintf(why, cap, "step %d (%s): registers %lld, %lld are not %s of the %d written before it", k, name,
                     (long long)a, (long long)b, binary ? "both" : "one (and -1)", avail);
            return false;
        }
        kn_chain_step *s = &out->steps[k];
        s->op = (uint8_t)op;
        s->a = (uint8_t)a;
        s->b = binary ? (uint8_t)b : 0;
        s->p0 = params ? params[2 * k] : 0;
        s->p1 = params ? params[2 * k + 1] : 0;
    }
    return true;
}

/* ------------------------------------------------------------------ FusedConv's layout */

bool kn_fused_conv_layout(const kn_node *n, bool *nhwc) {
    const char *l = kn_attr_string(n, "layout", "NCHW");
    *nhwc = !strcmp(l, "NHWC");
    return *nhwc || !strcmp(l, "NCHW");
}

void kn_nhwc_perms(int rank, int *to_first, int *to_last) {
    to_first[0] = to_last[0] = 0;
    to_first[1] = rank - 1; /* [N, S..., C] -> [N, C, S...] */
    for (int d = 2; d < rank; d++) to_first[d] = d - 1;
    for (int d = 1; d < rank - 1; d++) to_last[d] = d + 1; /* [N, C, S...] -> [N, S..., C] */
    to_last[rank - 1] = 1;
}

/* ------------------------------------------------------------------ shared checks */

static kiln_status check_act(kn_infer_ctx *c) {
    kn_act_spec a;
    char why[128];
    if (!kn_act_from_node(c->node, &a, why, sizeof why)) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "%s", why);
    return KILN_OK;
}

/* Runs the ai.onnx operator's infer function on the first n inputs, through a stand-in node. */
static kiln_status infer_as(kn_infer_ctx *c, const char *op_type, int n) {
    const kn_op_schema *s = kn_op_find("", op_type, 13, NULL);
    if (!s || !s->infer) return KN_INTERNAL("ai.onnx schema missing");
    kn_node proxy = *c->node;
    proxy.op_type = op_type;
    proxy.domain = "";
    proxy.opset = 13;
    kn_infer_ctx pc = *c;
    pc.node = &proxy;
    pc.n_inputs = n < c->n_inputs ? n : c->n_inputs;
    kiln_status st = s->infer(&pc);
    if (st != KILN_OK) {
        /* name the fused node, not the stand-in */
        char lbl[256];
        kn_node_label(c->node, lbl, sizeof lbl);
        return kn_error_prefix(st, "%s (as %s): ", lbl, op_type);
    }
    return KILN_OK;
}

/* Input i (the residual Z), when given, must have exactly the output's shape. */
static kiln_status check_residual(kn_infer_ctx *c, int i) {
    if (i >= c->n_inputs || !c->in[i]) return KILN_OK;
    const kn_type *z = c->in[i], *y = &c->out[0];
    if (z->dtype && y->dtype && z->dtype != y->dtype)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "residual input is %s, the output %s", kiln_dtype_name(z->dtype),
                              kiln_dtype_name(y->dtype));
    if (z->rank < 0 || y->rank < 0) return KILN_OK;
    char a[128], b[128];
    if (z->rank != y->rank)
        return kn_infer_error(c, KILN_ERR_SHAPE, "residual input %s does not have the output's shape %s",
                              kn_type_str(z, a, sizeof a), kn_type_str(y, b, sizeof b));
    for (int d = 0; d < z->rank; d++)
        if (z->dims[d].value >= 0 && y->dims[d].value >= 0 && z->dims[d].value != y->dims[d].value)
            return kn_infer_error(c, KILN_ERR_SHAPE, "residual input %s does not have the output's shape %s",
                                  kn_type_str(z, a, sizeof a), kn_type_str(y, b, sizeof b));
    return KILN_OK;
}

/* FusedMatMul's residual: as check_residual says, or Y's rows [d..., N] under other leading dims
 * when Y is [R, N] (its element count R * N where every dim is known). */
static kiln_status check_rows_residual(kn_infer_ctx *c, int i) {
    if (i >= c->n_inputs || !c->in[i]) return KILN_OK;
    const kn_type *z = c->in[i], *y = &c->out[0];
    if (z->rank < 0 || y->rank != 2 || z->rank == 2) return check_residual(c, i);
    char a[128], b[128];
    if (z->dtype && y->dtype && z->dtype != y->dtype)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "residual input is %s, the output %s", kiln_dtype_name(z->dtype),
                              kiln_dtype_name(y->dtype));
    int64_t zn = 1;
    bool known = y->dims[0].value >= 0 && y->dims[1].value >= 0;
    for (int d = 0; d < z->rank; d++) {
        known &= z->dims[d].value >= 0;
        if (z->dims[d].value >= 0) zn *= z->dims[d].value;
    }
    const int64_t zl = z->rank ? z->dims[z->rank - 1].value : 1, yl = y->dims[1].value;
    if (z->rank < 1 || (zl >= 0 && yl >= 0 && zl != yl) || (known && zn != y->dims[0].value * yl))
        return kn_infer_error(c, KILN_ERR_SHAPE, "residual input %s is neither the output's shape %s nor its rows",
                              kn_type_str(z, a, sizeof a), kn_type_str(y, b, sizeof b));
    return KILN_OK;
}

/* FusedConv (NCHW): the residual Z as check_residual says, except that Z and Y may each be float or
 * bfloat16 (the CPU's precision=bf16 with activations=half keeps the block outputs it reads in bf16:
 * opt pass cpu_bf16_values) */
static kiln_status check_conv_residual(kn_infer_ctx *c) {
    const kn_type *z = c->n_inputs > 3 ? c->in[3] : NULL;
    const kiln_dtype yt = c->out[0].dtype;
    if (!z || !z->dtype || !yt || z->dtype == yt ||
        (z->dtype != KILN_DTYPE_FLOAT && z->dtype != KILN_DTYPE_BFLOAT16) ||
        (yt != KILN_DTYPE_FLOAT && yt != KILN_DTYPE_BFLOAT16))
        return check_residual(c, 3);
    kn_type zf = *z;
    zf.dtype = yt;
    const kn_type *in[4] = {c->in[0], c->in[1], c->in[2], &zf};
    kn_infer_ctx pc = *c;
    pc.in = in;
    return check_residual(&pc, 3);
}

/* ------------------------------------------------------------------ infer functions */

/* t with its dims in the order perm gives (dims[d] = t.dims[perm[d]]). */
static void permuted_type(const kn_type *t, const int *perm, kn_type *out) {
    *out = *t;
    for (int d = 0; d < t->rank; d++) out->dims[d] = t->dims[perm[d]];
}

static kiln_status infer_fused_conv(kn_infer_ctx *c) {
    KN_TRY(check_act(c));
    bool nhwc;
    if (!kn_fused_conv_layout(c->node, &nhwc))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "layout must be \"NCHW\" or \"NHWC\", not \"%s\"",
                              kn_attr_string(c->node, "layout", ""));
    const kn_type *x = c->n_inputs > 0 ? c->in[0] : NULL;
    /* y_type [16]: Y in bfloat16 (the CPU's precision=bf16 keeps a value between two convolutions
     * in bf16: opt pass cpu_bf16_values); X may then be bfloat16 with float W (a reader of such a
     * value), inferred as for float X */
    int n_ytype = 0;
    const int64_t *ytype = kn_attr_ints(c->node, "y_type", &n_ytype);
    if (ytype && (n_ytype != 1 || (ytype[0] != KILN_DTYPE_BFLOAT16 && ytype[0] != KILN_DTYPE_FLOAT)))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "y_type must be one element, bfloat16 (16) or float (1)");
    if (!nhwc && x && x->dtype == KILN_DTYPE_BFLOAT16 && c->n_inputs > 1 && c->in[1] &&
        c->in[1]->dtype == KILN_DTYPE_FLOAT) {
        kn_type x_f32 = *x;
        x_f32.dtype = KILN_DTYPE_FLOAT;
        const kn_type *in[4] = {&x_f32, c->in[1], c->n_inputs > 2 ? c->in[2] : NULL, c->n_inputs > 3 ? c->in[3] : NULL};
        kn_infer_ctx pc = *c;
        pc.in = in;
        KN_TRY(infer_as(&pc, "Conv", 3));
        if (ytype) c->out[0].dtype = (kiln_dtype)ytype[0];
        return check_conv_residual(c);
    }
    if (!nhwc || !x || x->rank < 0) {
        KN_TRY(infer_as(c, "Conv", 3));
        if (ytype && !nhwc) c->out[0].dtype = (kiln_dtype)ytype[0];
        return nhwc ? check_residual(c, 3) : check_conv_residual(c);
    }
    /* channels last: Conv's inference on X with its channels moved to dim 1, the output's back */
    if (x->rank < 3 || x->rank > KILN_MAX_RANK)
        return kn_infer_error(c, KILN_ERR_SHAPE, "layout NHWC needs X of rank 3 or more, not %d", x->rank);
    int to_first[KILN_MAX_RANK], to_last[KILN_MAX_RANK];
    kn_nhwc_perms(x->rank, to_first, to_last);
    kn_type x_first, w_first;
    permuted_type(x, to_first, &x_first);
    const kn_type *w = c->n_inputs > 1 ? c->in[1] : NULL;
    if (w && w->rank >= 0 && w->rank != x->rank)
        return kn_infer_error(c, KILN_ERR_SHAPE, "W has rank %d for X of rank %d", w->rank, x->rank);
    if (w && w->rank >= 0) permuted_type(w, to_first, &w_first); /* [M, k..., C/g] -> [M, C/g, k...] */
    const kn_type *in[4] = {&x_first, w && w->rank >= 0 ? &w_first : w, c->n_inputs > 2 ? c->in[2] : NULL, NULL};
    kn_infer_ctx pc = *c;
    const kn_tensor *none[4] = {NULL, NULL, NULL, NULL};
    pc.in = in;
    pc.in_value = none;
    pc.n_inputs = c->n_inputs < 3 ? c->n_inputs : 3;
    KN_TRY(infer_as(&pc, "Conv", 3));
    if (c->out[0].rank == x->rank) {
        kn_type y_first = c->out[0];
        permuted_type(&y_first, to_last, &c->out[0]);
    }
    return check_residual(c, 3);
}

/* kiln.MaxPool / kiln.AveragePool: the ai.onnx pooling's inference on X with its channels moved to
 * dim 1 (layout NHWC), the output's moved back. */
static kiln_status infer_pool_layout(kn_infer_ctx *c) {
    bool nhwc;
    if (!kn_fused_conv_layout(c->node, &nhwc))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "layout must be \"NCHW\" or \"NHWC\", not \"%s\"",
                              kn_attr_string(c->node, "layout", ""));
    const kn_type *x = c->n_inputs > 0 ? c->in[0] : NULL;
    if (!nhwc || !x || x->rank < 0) return infer_as(c, c->node->op_type, 1);
    if (x->rank < 3 || x->rank > KILN_MAX_RANK)
        return kn_infer_error(c, KILN_ERR_SHAPE, "layout NHWC needs X of rank 3 or more, not %d", x->rank);
    int to_first[KILN_MAX_RANK], to_last[KILN_MAX_RANK];
    kn_nhwc_perms(x->rank, to_first, to_last);
    kn_type x_first;
    permuted_type(x, to_first, &x_first);
    const kn_type *in[1] = {&x_first};
    const kn_tensor *none[1] = {NULL};
    kn_infer_ctx pc = *c;
    pc.in = in;
    pc.in_value = none;
    pc.n_inputs = 1;
    KN_TRY(infer_as(&pc, c->node->op_type, 1));
    if (c->out[0].rank == x->rank) {
        kn_type y_first = c->out[0];
        permuted_type(&y_first, to_last, &c->out[0]);
    }
    return KILN_OK;
}

static kiln_status infer_fused_gemm(kn_infer_ctx *c) {
    KN_TRY(check_act(c));
    return infer_as(c, "Gemm", 3);
}

static kiln_status infer_fused_matmul(kn_infer_ctx *c) {
    KN_TRY(check_act(c));
    KN_TRY(infer_as(c, "MatMul", 2));
    const kn_type *b = c->n_inputs > 2 ? c->in[2] : NULL, *y = &c->out[0];
    if (b && b->rank >= 0 && y->rank >= 1) {
        /* bias: a scalar, or [.., N] with every leading dim 1 */
        int64_t count = 1;
        bool known = true;
        for (int d = 0; d < b->rank; d++) {
            if (b->dims[d].value < 0) known = false;
            else count *= b->dims[d].value;
            if (d < b->rank - 1 && b->dims[d].value != 1 && b->dims[d].value >= 0)
                return kn_infer_error(c, KILN_ERR_SHAPE, "bias must be a scalar or hold one value per output column");
        }
        int64_t n = y->dims[y->rank - 1].value;
        if (known && count != 1 && n >= 0 && count != n)
            return kn_infer_error(c, KILN_ERR_SHAPE, "bias has %lld values for %lld output columns", (long long)count,
                                  (long long)n);
        if (b->rank > y->rank)
            return kn_infer_error(c, KILN_ERR_SHAPE, "bias has rank %d, the output %d", b->rank, y->rank);
    }
    return check_rows_residual(c, 3);
}

static kiln_status infer_gelu(kn_infer_ctx *c) {
    const char *mode = kn_attr_string(c->node, "approximate", "none");
    if (strcmp(mode, "none") && strcmp(mode, "tanh"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "approximate must be 'none' or 'tanh', not '%s'", mode);
    return kn_infer_same(c, 0, 0);
}

static kiln_status infer_fused_elementwise(kn_infer_ctx *c) {
    kn_chain_program prog;
    char why[160];
    if (!kn_chain_from_node(c->node, c->n_inputs, &prog, why, sizeof why))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "%s", why);
    for (int i = 0; i < c->n_inputs; i++) {
        if (!c->in[i]) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d is omitted; every input is read", i);
        if (c->in[i]->dtype && c->in[0]->dtype && c->in[i]->dtype != c->in[0]->dtype)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d is %s, input 0 %s", i,
                                  kiln_dtype_name(c->in[i]->dtype), kiln_dtype_name(c->in[0]->dtype));
    }
    return kn_infer_broadcast(c, 0, KILN_DTYPE_UNDEFINED);
}

static kiln_status infer_norm(kn_infer_ctx *c) {
    const kn_type *x = c->in[0];
    if (x->rank >= 0) {
        int axis;
        KN_TRY(kn_infer_axis(c, kn_attr_int(c->node, "axis", -1), x->rank, "axis", &axis));
    }
    return kn_infer_same(c, 0, 0);
}

/* Combines one batch dim of several operands under numpy broadcasting. */
static bool broadcast_dim(const kn_dim *const *dims, int n, kn_dim *out) {
    kn_dim r = {1, NULL};
    bool have = false;
    for (int i = 0; i < n; i++) {
        const kn_dim *d = dims[i];
        if (!d || d->value == 1) continue;
        if (!have) {
            r = *d;
            have = true;
        } else if (r.value >= 0 && d->value >= 0) {
            if (r.value != d->value) return false;
        } else if (d->value >= 0) {
            r = *d; /* a known size > 1 is the result whenever the shapes broadcast */
        } else if (r.value < 0 && !(r.symbol && d->symbol && !strcmp(r.symbol, d->symbol))) {
            r.symbol = NULL; /* two different unknowns */
        }
    }
    *out = r;
    return true;
}

static kiln_status infer_attention_logical(kn_infer_ctx *c, const kn_type *q, const kn_type *kt, const kn_type *v);

const char *kn_attn_view_name(int operand) {
    static const char *const names[4] = {"q_view", "kt_view", "v_view", "y_view"};
    return operand >= 0 && operand < 4 ? names[operand] : "";
}

int kn_attn_view_get(const kn_node *n, int operand, kn_attn_view *v, char *why, size_t cap) {
    const kn_attr *a = kn_node_attr(n, kn_attn_view_name(operand));
    if (!a) return 0;
    memset(v, 0, sizeof *v);
    if (a->type != KN_ATTR_INTS || a->n < 1 || a->ints[0] < 1 || a->ints[0] > KN_ATTN_VIEW_MAX_RANK ||
        a->n != 2 + 2 * a->ints[0]) {
        snprintf(why, cap, "attribute %s is not [rank, dims..., offset, strides...] of rank 1..%d",
                 kn_attn_view_name(operand), KN_ATTN_VIEW_MAX_RANK);
        return -1;
    }
    v->rank = (int)a->ints[0];
    v->offset = a->ints[1 + v->rank];
    for (int k = 0; k < v->rank; k++) {
        v->dims[k] = a->ints[1 + k];
        v->strides[k] = a->ints[2 + v->rank + k];
        if (v->dims[k] < KN_ATTN_VIEW_SYMBOLIC(KILN_MAX_RANK - 1)) {
            snprintf(why, cap, "attribute %s has a dim below -%d", kn_attn_view_name(operand), KILN_MAX_RANK);
            return -1;
        }
    }
    if (v->offset < 0) {
        snprintf(why, cap, "attribute %s has a negative offset", kn_attn_view_name(operand));
        return -1;
    }
    return 1;
}

bool kn_attn_view_bind(kn_attn_view *v, const int64_t *dims, int rank) {
    for (int k = 0; k < v->rank; k++) {
        if (v->dims[k] < 0) {
            const int64_t p = -1 - v->dims[k];
            if (p >= rank) return false;
            v->dims[k] = dims[p];
        }
        if (v->strides[k] < 0) {
            const int64_t p = (-1 - v->strides[k]) % KILN_MAX_RANK, m = (-1 - v->strides[k]) / KILN_MAX_RANK;
            if (p >= rank) return false;
            int64_t s = m;
            for (int64_t q = p + 1; q < rank; q++) {
                if (dims[q] > 0 && s > INT64_MAX / dims[q]) return false;
                s *= dims[q];
            }
            v->strides[k] = s;
        }
    }
    return true;
}

void kn_attn_view_whole(const kn_tensor *t, kn_attn_view *v) {
    memset(v, 0, sizeof *v);
    v->rank = t->rank;
    int64_t st = 1;
    for (int k = t->rank - 1; k >= 0; k--) {
        v->dims[k] = t->dims[k];
        v->strides[k] = st;
        st *= t->dims[k];
    }
}

bool kn_attn_view_fits(const kn_attn_view *v, int64_t count) {
    int64_t last = v->offset;
    for (int k = 0; k < v->rank; k++) {
        if (v->dims[k] == 0) return true; /* no element */
        if (v->strides[k] > (INT64_MAX - last) / (v->dims[k] > 1 ? v->dims[k] - 1 : 1)) return false;
        last += (v->dims[k] - 1) * v->strides[k];
    }
    return last < count;
}

void kn_attn_view_copy(size_t es, void *base, const kn_attn_view *v, void *dense, bool to_dense) {
    int64_t d[4] = {1, 1, 1, 1}, st[4] = {0, 0, 0, 0};
    for (int k = 0; k < v->rank; k++) d[4 - v->rank + k] = v->dims[k], st[4 - v->rank + k] = v->strides[k];
    char *b = (char *)base, *x = (char *)dense;
    for (int64_t i0 = 0; i0 < d[0]; i0++)
        for (int64_t i1 = 0; i1 < d[1]; i1++)
            for (int64_t i2 = 0; i2 < d[2]; i2++) {
                const int64_t row = v->offset + i0 * st[0] + i1 * st[1] + i2 * st[2];
                for (int64_t i3 = 0; i3 < d[3]; i3++, x += es) {
                    char *e = b + (size_t)(row + i3 * st[3]) * es;
                    if (to_dense) memcpy(x, e, es);
                    else memcpy(e, x, es);
                }
            }
}

int kn_attn_view_encode(const kn_attn_view *v, int64_t *out) {
    out[0] = v->rank;
    for (int k = 0; k < v->rank; k++) out[1 + k] = v->dims[k], out[2 + v->rank + k] = v->strides[k];
    out[1 + v->rank] = v->offset;
    return 2 + 2 * v->rank;
}

/* An operand's type as the kernel sees it: the view's dims where the node has one. */
static const kn_type *attention_operand(kn_infer_ctx *c, int i, kn_type *buf, kiln_status *st) {
    const kn_type *t = c->in[i];
    kn_attn_view v;
    char why[160];
    int has = kn_attn_view_get(c->node, i, &v, why, sizeof why);
    if (has < 0) *st = kn_infer_error(c, KILN_ERR_INVALID_MODEL, "%s", why);
    if (has <= 0) return t;
    kn_type_init(buf);
    buf->kind = KN_TYPE_TENSOR;
    buf->dtype = t->dtype;
    buf->rank = v.rank;
    for (int k = 0; k < v.rank; k++) {
        const int64_t p = -1 - v.dims[k]; /* a symbolic dim: the tensor's dim p, as far as it is known */
        buf->dims[k] = v.dims[k] >= 0 ? (kn_dim){v.dims[k], NULL} : p < t->rank ? t->dims[p] : (kn_dim){-1, NULL};
        if (v.dims[k] < 0 && t->rank >= 0 && p >= t->rank)
            *st = kn_infer_error(c, KILN_ERR_INVALID_MODEL, "%s names dim %lld of a rank-%d input",
                                 kn_attn_view_name(i), (long long)p, t->rank);
    }
    return buf;
}

/* y_shape's entry k: a size, or dim p of input i (KN_ATTN_Y_SHAPE_OF_INPUT) as far as it is known. */
static kiln_status y_shape_dim(kn_infer_ctx *c, int64_t e, kn_dim *out) {
    if (e >= 0) {
        *out = (kn_dim){e, NULL};
        return KILN_OK;
    }
    const int64_t i = (-1 - e) / KILN_MAX_RANK, p = (-1 - e) % KILN_MAX_RANK;
    if (i >= 3 || i >= c->n_inputs || !c->in[i])
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "y_shape names input %lld, which is not Q, KT or V", (long long)i);
    const kn_type *t = c->in[i];
    if (t->rank >= 0 && p >= t->rank)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "y_shape names dim %lld of a rank-%d input", (long long)p, t->rank);
    *out = t->rank >= 0 ? t->dims[p] : (kn_dim){-1, NULL};
    return KILN_OK;
}

static kiln_status infer_attention(kn_infer_ctx *c) {
    kn_type qb, kb, vb;
    kiln_status vst = KILN_OK;
    const kn_type *q = attention_operand(c, 0, &qb, &vst), *kt = attention_operand(c, 1, &kb, &vst),
                  *v = attention_operand(c, 2, &vb, &vst);
    if (vst != KILN_OK) return vst;
    const kn_attr *ys = kn_node_attr(c->node, "y_shape");
    kn_attn_view yv;
    char why[160];
    int has_y = kn_attn_view_get(c->node, KN_ATTN_Y, &yv, why, sizeof why);
    if (has_y < 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "%s", why);
    if ((has_y > 0) != (ys != NULL) || (ys && (ys->type != KN_ATTR_INTS || ys->n > KILN_MAX_RANK)))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "y_view and y_shape (ints) come together");
    kiln_status st = infer_attention_logical(c, q, kt, v);
    if (st != KILN_OK || !ys) return st;
    /* the kernel writes Y through y_view into a tensor of shape y_shape */
    kn_type *y = &c->out[0];
    kn_dim shape[KILN_MAX_RANK];
    int64_t count = 1, values[KILN_MAX_RANK];
    bool known = true;
    for (int k = 0; k < ys->n; k++) {
        KN_TRY(y_shape_dim(c, ys->ints[k], &shape[k]));
        values[k] = shape[k].value;
        known &= values[k] >= 0;
        if (values[k] >= 0) count *= values[k];
    }
    /* the checks need every size: at run time they have them */
    if (known && !kn_attn_view_bind(&yv, values, (int)ys->n))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "y_view names a dim y_shape lacks");
    if (known && y->rank >= 0) {
        if (y->rank != yv.rank) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "y_view's rank is not Y's");
        int64_t n = 1;
        for (int k = 0; k < y->rank; k++) {
            if (y->dims[k].value >= 0 && y->dims[k].value != yv.dims[k])
                return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "y_view's dims are not Y's");
            n *= yv.dims[k];
        }
        if (n != count || !kn_attn_view_fits(&yv, count))
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "y_view does not cover a tensor of y_shape");
    }
    y->rank = (int)ys->n;
    for (int k = 0; k < y->rank; k++) y->dims[k] = shape[k];
    return KILN_OK;
}

static kiln_status infer_attention_logical(kn_infer_ctx *c, const kn_type *q, const kn_type *kt, const kn_type *v) {
    const kn_type *m = c->n_inputs > 3 ? c->in[3] : NULL;
    kn_type *y = &c->out[0];
    kn_type_init(y);
    y->kind = KN_TYPE_TENSOR;
    y->dtype = q->dtype;
    if (q->rank < 0 || kt->rank < 0 || v->rank < 0 || (m && m->rank < 0)) return KILN_OK;
    if (q->rank < 2 || kt->rank != q->rank || v->rank != q->rank)
        return kn_infer_error(c, KILN_ERR_SHAPE, "Q, KT and V must have the same rank >= 2 (%d, %d, %d)", q->rank,
                              kt->rank, v->rank);
    int r = q->rank;
    if (m && m->rank > r) return kn_infer_error(c, KILN_ERR_SHAPE, "the mask has rank %d, above the scores' %d", m->rank, r);
    const kn_dim *dq = &q->dims[r - 1], *dk = &kt->dims[r - 2], *sk = &kt->dims[r - 1], *sv = &v->dims[r - 2];
    if (dq->value >= 0 && dk->value >= 0 && dq->value != dk->value)
        return kn_infer_error(c, KILN_ERR_SHAPE, "Q's last dim %lld differs from KT's dim %d (%lld)", (long long)dq->value,
                              r - 2, (long long)dk->value);
    if (sk->value >= 0 && sv->value >= 0 && sk->value != sv->value)
        return kn_infer_error(c, KILN_ERR_SHAPE, "KT has %lld keys but V %lld", (long long)sk->value, (long long)sv->value);
    /* the mask may not widen the scores' [Sq, Sk] */
    for (int d = r - 2; m && d < r; d++) {
        int md = d - (r - m->rank);
        if (md < 0) continue;
        const kn_dim *want = d == r - 2 ? &q->dims[r - 2] : sk;
        int64_t mv = m->dims[md].value;
        if (mv >= 0 && mv != 1 && want->value >= 0 && mv != want->value)
            return kn_infer_error(c, KILN_ERR_SHAPE, "the mask's dim %d (%lld) does not broadcast to the scores' %lld", md,
                                  (long long)mv, (long long)want->value);
    }
    y->rank = r;
    for (int d = 0; d < r - 2; d++) {
        int md = d - (r - (m ? m->rank : 0));
        const kn_dim *dims[4] = {&q->dims[d], &kt->dims[d], &v->dims[d], m && md >= 0 ? &m->dims[md] : NULL};
        if (!broadcast_dim(dims, 4, &y->dims[d]))
            return kn_infer_error(c, KILN_ERR_SHAPE, "batch dim %d of Q, KT, V and the mask does not broadcast", d);
    }
    y->dims[r - 2] = q->dims[r - 2];
    y->dims[r - 1] = v->dims[r - 1];
    return KILN_OK;
}

void kn_stacked_lstm_layer(const kn_kernel_ctx *fused, int layer, kn_tensor *x, kn_tensor **y, kn_stacked_layer *out) {
    memset(out, 0, sizeof *out);
    const kn_node *f = fused->node;
    snprintf(out->name, sizeof out->name, "%s (layer %d)", f->name, layer);
    out->node.name = out->name;
    out->node.op_type = "LSTM";
    out->node.domain = "";
    out->node.opset = 14;
    static const int from[7] = {-1, 0, 1, 2, -1, 3, 4}; /* LSTM input -> the layer's StackedLSTM input */
    for (int i = 0; i < 7; i++) {
        int k = from[i] < 0 ? -1 : kn_stacked_lstm_input(layer, from[i]);
        out->ids[i] = k >= 0 && k < f->n_inputs ? f->inputs[k] : -1;
        out->in[i] = from[i] < 0 ? NULL : kn_stacked_lstm_in(fused->in, fused->n_inputs, layer, from[i]);
    }
    out->in[0] = x;
    out->node.inputs = out->ids;
    out->node.n_inputs = 7;
    for (int o = 0; o < 3; o++) out->out[o] = o < fused->n_outputs ? fused->out[o] : NULL;
    out->ctx = *fused;
    out->ctx.node = &out->node;
    out->ctx.n_inputs = 7;
    out->ctx.in = out->in;
    out->ctx.n_outputs = y ? 1 : fused->n_outputs;
    out->ctx.out = y ? y : out->out;
}

static const kn_type *stacked_in(const kn_infer_ctx *c, int layer, int i) {
    int k = kn_stacked_lstm_input(layer, i);
    return k < c->n_inputs ? c->in[k] : NULL;
}

static bool dim_fits(const kn_dim *d, int64_t v) { return d->value < 0 || v < 0 || d->value == v; }

/* Each layer as its LSTM: W [1, 4H, I], R [1, 4H, H], B [1, 8H], initial states [1, batch, H]; I is
 * X's last dim for layer 0, the previous layer's H after it. */
static kiln_status infer_stacked_lstm(kn_infer_ctx *c) {
    int layers = kn_stacked_lstm_layers(c->n_inputs);
    if (layers < 2 || c->n_inputs < kn_stacked_lstm_input(layers - 1, 2))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "%d inputs: StackedLSTM takes X and five per layer, two layers or more",
                              c->n_inputs);
    const kn_type *x = c->in[0];
    if (!x || x->rank != 3) return kn_infer_error(c, KILN_ERR_SHAPE, "X must be [seq, batch, input]");
    int64_t in_size = x->dims[2].value, H = -1;
    for (int l = 0; l < layers; l++) {
        const kn_type *w = stacked_in(c, l, 0), *r = stacked_in(c, l, 1);
        if (!w || !r || w->rank != 3 || r->rank != 3)
            return kn_infer_error(c, KILN_ERR_SHAPE, "layer %d: W and R must be given, 3-D", l);
        H = r->dims[2].value;
        bool ok = H > 0 && dim_fits(&w->dims[0], 1) && dim_fits(&r->dims[0], 1) && dim_fits(&w->dims[1], 4 * H) &&
                  dim_fits(&r->dims[1], 4 * H) && dim_fits(&w->dims[2], in_size);
        const kn_type *b = stacked_in(c, l, 2);
        if (b) ok = ok && b->rank == 2 && dim_fits(&b->dims[0], 1) && dim_fits(&b->dims[1], 8 * H);
        for (int i = 3; i < 5; i++) {
            const kn_type *h = stacked_in(c, l, i);
            if (h) ok = ok && h->rank == 3 && dim_fits(&h->dims[0], 1) && dim_fits(&h->dims[2], H);
        }
        if (!ok) {
            char a[128], b2[128];
            return kn_infer_error(c, KILN_ERR_SHAPE, "layer %d: W %s and R %s do not make a forward LSTM of %lld inputs", l,
                                  kn_type_str(w, a, sizeof a), kn_type_str(r, b2, sizeof b2), (long long)in_size);
        }
        for (int i = 0; i < 5; i++) {
            const kn_type *t = stacked_in(c, l, i);
            if (t && t->dtype != x->dtype)
                return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "layer %d input %d is %s, X is %s", l, i,
                                      kiln_dtype_name(t->dtype), kiln_dtype_name(x->dtype));
        }
        in_size = H;
    }
    for (int o = 0; o < c->n_outputs; o++) {
        kn_type *t = &c->out[o];
        kn_type_init(t);
        t->kind = KN_TYPE_TENSOR;
        t->dtype = x->dtype;
        t->rank = o == 0 ? 4 : 3;
        kn_dim one = {0}, hd = {0};
        one.value = 1;
        hd.value = H;
        if (o == 0) {
            t->dims[0] = x->dims[0];
            t->dims[1] = one;
            t->dims[2] = x->dims[1];
            t->dims[3] = hd;
        } else {
            t->dims[0] = one;
            t->dims[1] = x->dims[1];
            t->dims[2] = hd;
        }
    }
    return KILN_OK;
}

/* The product of dims [from, rank) of t; -1 when one is unknown. */
static int64_t dims_product(const kn_type *t, int from) {
    int64_t n = 1;
    for (int d = from; d < t->rank; d++) {
        if (t->dims[d].value < 0) return -1;
        n *= t->dims[d].value;
    }
    return n;
}

/* SqueezeExcite: Y has X's type; W1 is M rows of C, W2 C rows of M, B1 M values, B2 C, all of X's
 * element type. */
static kiln_status infer_squeeze_excite(kn_infer_ctx *c) {
    kn_act_spec act, gate;
    bool nhwc;
    char why[160];
    if (!kn_squeeze_excite_from_node(c->node, &act, &gate, &nhwc, why, sizeof why))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "%s", why);
    const kn_type *x = c->in[0], *w1 = c->in[1], *b1 = c->n_inputs > 2 ? c->in[2] : NULL, *w2 = c->n_inputs > 3 ? c->in[3] : NULL,
                  *b2 = c->n_inputs > 4 ? c->in[4] : NULL;
    if (!x || !w1 || !w2) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "X, W1 and W2 must be given");
    const kn_type *all[5] = {x, w1, b1, w2, b2};
    for (int i = 1; i < 5; i++)
        if (all[i] && all[i]->dtype && x->dtype && all[i]->dtype != x->dtype)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d is %s, X is %s", i, kiln_dtype_name(all[i]->dtype),
                                  kiln_dtype_name(x->dtype));
    if (x->rank >= 0 && (x->rank < 3 || x->rank > KILN_MAX_RANK))
        return kn_infer_error(c, KILN_ERR_SHAPE, "X must have rank 3 or more (batch, channels, spatial dims), not %d", x->rank);
    const int64_t C = x->rank >= 0 ? x->dims[nhwc ? x->rank - 1 : 1].value : -1;
    const int64_t M = w1->rank >= 1 ? w1->dims[0].value : -1;
    if (w1->rank == 0 || w2->rank == 0) return kn_infer_error(c, KILN_ERR_SHAPE, "W1 and W2 must have rank 1 or more");
    const int64_t w1c = w1->rank >= 1 ? dims_product(w1, 1) : -1, w2c = w2->rank >= 1 ? w2->dims[0].value : -1,
                  w2m = w2->rank >= 1 ? dims_product(w2, 1) : -1;
    char a[128], b[128];
    if ((C >= 0 && w1c >= 0 && w1c != C) || (C >= 0 && w2c >= 0 && w2c != C) || (M >= 0 && w2m >= 0 && w2m != M))
        return kn_infer_error(c, KILN_ERR_SHAPE, "W1 %s and W2 %s are not [M, C] and [C, M] for %lld channels",
                              kn_type_str(w1, a, sizeof a), kn_type_str(w2, b, sizeof b), (long long)C);
    const kn_type *bias[2] = {b1, b2};
    const int64_t want[2] = {M, C};
    for (int k = 0; k < 2; k++) {
        if (!bias[k] || bias[k]->rank < 0) continue;
        const int64_t nb = dims_product(bias[k], 0);
        if (nb >= 0 && want[k] >= 0 && nb != want[k])
            return kn_infer_error(c, KILN_ERR_SHAPE, "B%d %s does not hold %lld values", k + 1,
                                  kn_type_str(bias[k], a, sizeof a), (long long)want[k]);
    }
    return kn_infer_same(c, 0, 0);
}

const kn_op_schema kn_ops_fused[] = {
    {"kiln", "FusedConv", 1, 0, 2, 4, 1, 1, infer_fused_conv, 0},
    {"kiln", "FusedGemm", 1, 0, 2, 3, 1, 1, infer_fused_gemm, 0},
    {"kiln", "MaxPool", 1, 0, 1, 1, 1, 1, infer_pool_layout, 0},
    {"kiln", "AveragePool", 1, 0, 1, 1, 1, 1, infer_pool_layout, 0},
    {"kiln", "FusedMatMul", 1, 0, 2, 4, 1, 1, infer_fused_matmul, 0},
    {"kiln", "Gelu", 1, 0, 1, 1, 1, 1, infer_gelu, 0},
    {"kiln", "LayerNormalization", 1, 0, 1, 3, 1, 1, infer_norm, 0},
    {"kiln", "RMSNormalization", 1, 0, 1, 2, 1, 1, infer_norm, 0},
    {"kiln", "Attention", 1, 0, 3, 4, 1, 1, infer_attention, 0},
    {"kiln", "FusedElementwise", 1, 0, 1, KN_CHAIN_MAX_INPUTS, 1, 1, infer_fused_elementwise, 0},
    {"kiln", "StackedLSTM", 1, 0, 8, 1 + 5 * KN_STACKED_LSTM_MAX_LAYERS, 1, 3, infer_stacked_lstm, 0},
    {"kiln", "SqueezeExcite", 1, 0, 4, 5, 1, 1, infer_squeeze_excite, 0},
    {0},
};

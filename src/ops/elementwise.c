/* The elementwise family's schemas and shape inference: unary math and activations, binary
 * arithmetic/comparison/logic with numpy broadcasting (and the opset < 7 `broadcast`/`axis`
 * form), variadic Sum/Mean/Max/Min, Where, Clip, Cast and CastLike.
 *
 * Besides shapes, Add/Sub/Mul/Div and Cast carry small integer "shape values" through (the
 * Shape -> Gather -> Mul -> Concat -> Reshape chains exporters emit), keeping symbols where an
 * operand is an identity (x*1, x+0, x/1). */
#include "ops/op.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* element type classes an operator accepts */
enum {
    M_F = 1u << 0,  /* float, double, float16, bfloat16 */
    M_I = 1u << 1,  /* integers */
    M_B = 1u << 2,  /* bool */
    M_S = 1u << 3,  /* string */
    M_F8 = 1u << 4, /* float8 (e8m0 too) and the packed sub-byte types: Cast only */
};
#define M_NUM (M_F | M_I)
#define M_ALL (M_F | M_I | M_B | M_S | M_F8)

static unsigned dtype_class(kiln_dtype t) {
    if (kn_dtype_is_float(t)) return M_F;
    if (kn_dtype_is_int(t)) return M_I;
    if (t == KILN_DTYPE_BOOL) return M_B;
    if (t == KILN_DTYPE_STRING) return M_S;
    if (t >= KILN_DTYPE_FLOAT8E4M3FN && t <= KILN_DTYPE_INT2) return M_F8;
    return 0;
}

static const char *input_name(int i) {
    static const char *names[] = {"0", "1", "2", "3"};
    return i < 4 ? names[i] : "n";
}

static kiln_status need(kn_infer_ctx *c, int i) {
    if (i >= c->n_inputs || !c->in[i]) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d is missing", i);
    return KILN_OK;
}

/* Input i's element type, when known, must be in mask. */
static kiln_status check_class(kn_infer_ctx *c, int i, unsigned mask) {
    if (i >= c->n_inputs || !c->in[i] || c->in[i]->dtype == KILN_DTYPE_UNDEFINED) return KILN_OK;
    if (dtype_class(c->in[i]->dtype) & mask) return KILN_OK;
    return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "input %s has element type %s, which %s does not accept",
                          input_name(i), kiln_dtype_name(c->in[i]->dtype), c->node->op_type);
}

/* Inputs i and j, when both known, must have the same element type. */
static kiln_status check_same(kn_infer_ctx *c, int i, int j) {
    if (!c->in[i] || !c->in[j]) return KILN_OK;
    kiln_dtype a = c->in[i]->dtype, b = c->in[j]->dtype;
    if (a == KILN_DTYPE_UNDEFINED || b == KILN_DTYPE_UNDEFINED || a == b) return KILN_OK;
    return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d is %s but input %d is %s; they must be the same type",
                          i, kiln_dtype_name(a), j, kiln_dtype_name(b));
}

/* ------------------------------------------------------------------ unary */

static kiln_status unary(kn_infer_ctx *c, unsigned mask, kiln_dtype out) {
    KN_TRY(need(c, 0));
    KN_TRY(check_class(c, 0, mask));
    KN_TRY(kn_infer_same(c, 0, 0));
    c->out[0].kind = KN_TYPE_TENSOR;
    if (out != KILN_DTYPE_UNDEFINED) c->out[0].dtype = out;
    return KILN_OK;
}

static kiln_status infer_unary_f(kn_infer_ctx *c) { return unary(c, M_F, KILN_DTYPE_UNDEFINED); }
static kiln_status infer_unary_num(kn_infer_ctx *c) { return unary(c, M_NUM, KILN_DTYPE_UNDEFINED); }
static kiln_status infer_unary_int(kn_infer_ctx *c) { return unary(c, M_I, KILN_DTYPE_UNDEFINED); }
static kiln_status infer_unary_bool(kn_infer_ctx *c) { return unary(c, M_B, KILN_DTYPE_UNDEFINED); }
static kiln_status infer_is_f(kn_infer_ctx *c) { return unary(c, M_F, KILN_DTYPE_BOOL); }

static kiln_status infer_gelu(kn_infer_ctx *c) {
    const char *m = kn_attr_string(c->node, "approximate", "none");
    if (strcmp(m, "none") && strcmp(m, "tanh"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "approximate='%s' is not 'none' or 'tanh'", m);
    return unary(c, M_F, KILN_DTYPE_UNDEFINED);
}

static kiln_status infer_clip(kn_infer_ctx *c) {
    KN_TRY(unary(c, c->node->opset < 11 ? M_F : M_NUM, KILN_DTYPE_UNDEFINED));
    for (int k = 1; k < c->n_inputs && k <= 2; k++) {
        if (!c->in[k]) continue;
        KN_TRY(check_same(c, 0, k));
        const kn_type *t = c->in[k];
        int64_t n = 1;
        for (int d = 0; d < t->rank; d++) n = (n >= 0 && t->dims[d].value >= 0) ? n * t->dims[d].value : -1;
        if (t->rank > 1 || (t->rank >= 0 && n >= 0 && n != 1)) {
            char s[256];
            return kn_infer_error(c, KILN_ERR_SHAPE, "%s is %s; it must be a scalar", k == 1 ? "min" : "max",
                                  kn_type_str(t, s, sizeof s));
        }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ shape values */

/* Input i's elements as shape values (from its constant or its tracked shape value); the count,
 * or -1 when not known. Negative constants are not representable as dims: -1. */
static int shape_elems(const kn_infer_ctx *c, int i, kn_dim *out) {
    if (i >= c->n_inputs || !c->in[i]) return -1;
    const kn_tensor *v = c->in_value[i];
    if (v && v->kind == KN_VALUE_TENSOR && kn_dtype_is_int(v->dtype) && v->rank <= 1) {
        int64_t n = kn_tensor_count(v);
        if (n < 0 || n > KILN_MAX_RANK) return -1;
        for (int64_t k = 0; k < n; k++) {
            int64_t x = kn_tensor_get_i64(v, k);
            if (x < 0) return -1;
            out[k] = (kn_dim){x, NULL};
        }
        return (int)n;
    }
    const kn_type *t = c->in[i];
    if (t->n_shape_value < 0 || t->n_shape_value > KILN_MAX_RANK || t->rank > 1) return -1;
    for (int k = 0; k < t->n_shape_value; k++) out[k] = t->shape_value[k];
    return t->n_shape_value;
}

static bool known(kn_dim d, int64_t v) { return d.value >= 0 && (v < 0 || d.value == v); }

static kn_dim arith(char op, kn_dim a, kn_dim b) {
    const kn_dim unk = {-1, NULL};
    switch (op) {
    case '+':
        if (known(a, -1) && known(b, -1)) return (kn_dim){a.value + b.value, NULL};
        if (known(a, 0)) return b;
        if (known(b, 0)) return a;
        return unk;
    case '-':
        if (known(a, -1) && known(b, -1)) return a.value >= b.value ? (kn_dim){a.value - b.value, NULL} : unk;
        if (known(b, 0)) return a;
        return unk;
    case '*':
        if (known(a, 0) || known(b, 0)) return (kn_dim){0, NULL};
        if (known(a, -1) && known(b, -1)) {
            if (a.value > INT64_MAX / b.value) return unk;
            return (kn_dim){a.value * b.value, NULL};
        }
        if (known(a, 1)) return b;
        if (known(b, 1)) return a;
        return unk;
    case '/':
        if (known(a, -1) && known(b, -1) && b.value > 0) return (kn_dim){a.value / b.value, NULL};
        if (known(b, 1)) return a;
        return unk;
    default: return unk;
    }
}

/* Input i's elements where it is a short vector: known values (of any sign, bools as 0/1) from a
 * constant, else its tracked shape value (known[k] false for a symbolic or unknown dim, sym[k] the
 * symbol). The count, or -1. */
static int raw_elems(const kn_infer_ctx *c, int i, int64_t *val, const char **sym, bool *known) {
    if (i >= c->n_inputs || !c->in[i]) return -1;
    const kn_tensor *v = c->in_value[i];
    if (v && v->kind == KN_VALUE_TENSOR && (kn_dtype_is_int(v->dtype) || v->dtype == KILN_DTYPE_BOOL) && v->rank <= 1) {
        int64_t n = kn_tensor_count(v);
        if (n < 0 || n > KILN_MAX_RANK) return -1;
        for (int64_t k = 0; k < n; k++) val[k] = kn_tensor_get_i64(v, k), sym[k] = NULL, known[k] = true;
        return (int)n;
    }
    const kn_type *t = c->in[i];
    if (t->n_shape_value < 0 || t->n_shape_value > KILN_MAX_RANK || t->rank > 1) return -1;
    for (int k = 0; k < t->n_shape_value; k++)
        val[k] = t->shape_value[k].value, sym[k] = t->shape_value[k].symbol, known[k] = val[k] >= 0;
    return t->n_shape_value;
}

/* Equal of shape values, tracked as 0/1 where the answer is known: a dim is never negative, so a
 * symbolic one differs from a negative constant. torch's exports replace the -1s of a target shape
 * by Where(Equal(shape, -1), ones, shape); with this, Where keeps the shape's symbols. */
static void propagate_equal(kn_infer_ctx *c) {
    kn_type *o = &c->out[0];
    int64_t a[KILN_MAX_RANK], b[KILN_MAX_RANK];
    const char *sa[KILN_MAX_RANK], *sb[KILN_MAX_RANK];
    bool ka[KILN_MAX_RANK], kb[KILN_MAX_RANK];
    int na = raw_elems(c, 0, a, sa, ka), nb = raw_elems(c, 1, b, sb, kb);
    if (o->rank > 1 || na < 0 || nb < 0 || (na != nb && na != 1 && nb != 1)) return;
    int n = na > nb ? na : nb;
    for (int k = 0; k < n; k++) {
        int i = na == 1 ? 0 : k, j = nb == 1 ? 0 : k;
        kn_dim r = {-1, NULL};
        if (ka[i] && kb[j]) r.value = a[i] == b[j];
        else if ((ka[i] && a[i] < 0 && sb[j]) || (kb[j] && b[j] < 0 && sa[i])) r.value = 0;
        else if (sa[i] && sb[j] && !strcmp(sa[i], sb[j])) r.value = 1;
        o->shape_value[k] = r;
    }
    o->n_shape_value = n;
}

/* Where over shape values: each element chosen by its known condition (or the same either way). */
static void propagate_where(kn_infer_ctx *c) {
    kn_type *o = &c->out[0];
    int64_t cv[KILN_MAX_RANK];
    const char *cs[KILN_MAX_RANK];
    bool ck[KILN_MAX_RANK];
    kn_dim x[KILN_MAX_RANK], y[KILN_MAX_RANK];
    int nc = raw_elems(c, 0, cv, cs, ck), nx = shape_elems(c, 1, x), ny = shape_elems(c, 2, y);
    if (!(o->dtype == KILN_DTYPE_INT64 || o->dtype == KILN_DTYPE_INT32) || o->rank > 1 || nc < 0 || nx < 0 || ny < 0)
        return;
    int n = nc > nx ? nc : nx;
    if (ny > n) n = ny;
    if ((nc != n && nc != 1) || (nx != n && nx != 1) || (ny != n && ny != 1)) return;
    for (int k = 0; k < n; k++) {
        const int i = nc == 1 ? 0 : k;
        const kn_dim a = x[nx == 1 ? 0 : k], b = y[ny == 1 ? 0 : k];
        const bool same = a.value == b.value && (a.value >= 0 || (a.symbol && b.symbol && !strcmp(a.symbol, b.symbol)));
        o->shape_value[k] = ck[i] ? (cv[i] ? a : b) : same ? a : (kn_dim){-1, NULL};
    }
    o->n_shape_value = n;
}

/* Elementwise arithmetic on the operands' shape values, when both are tracked. */
static void propagate_shape_value(kn_infer_ctx *c, char op) {
    kn_type *o = &c->out[0];
    if (!(o->dtype == KILN_DTYPE_INT64 || o->dtype == KILN_DTYPE_INT32) || o->rank > 1) return;
    kn_dim a[KILN_MAX_RANK], b[KILN_MAX_RANK];
    int na = shape_elems(c, 0, a), nb = shape_elems(c, 1, b);
    if (na < 0 || nb < 0) return;
    if (na != nb && na != 1 && nb != 1) return;
    int n = na > nb ? na : nb;
    for (int k = 0; k < n; k++) o->shape_value[k] = arith(op, a[na == 1 ? 0 : k], b[nb == 1 ? 0 : k]);
    o->n_shape_value = n;
}

/* ------------------------------------------------------------------ binary */

/* Opset < 7: B broadcasts into A only with broadcast=1 (at `axis`, default trailing); the output
 * is A's type. */
static kiln_status legacy_binary(kn_infer_ctx *c, kiln_dtype out) {
    const kn_type *a = c->in[0], *b = c->in[1];
    char sa[256], sb[256];
    if (a->rank >= 0 && b->rank >= 0) {
        if (!kn_attr_int(c->node, "broadcast", 0)) {
            bool same = a->rank == b->rank;
            for (int d = 0; same && d < a->rank; d++)
                if (a->dims[d].value >= 0 && b->dims[d].value >= 0 && a->dims[d].value != b->dims[d].value)
                    same = false;
            if (!same)
                return kn_infer_error(c, KILN_ERR_SHAPE, "shapes %s and %s differ and broadcast=0",
                                      kn_type_str(a, sa, sizeof sa), kn_type_str(b, sb, sizeof sb));
        } else {
            int64_t axis = kn_attr_int(c->node, "axis", a->rank - b->rank);
            if (axis < 0) axis += a->rank;
            if (b->rank > a->rank || axis < 0 || axis + b->rank > a->rank)
                return kn_infer_error(c, KILN_ERR_SHAPE, "B %s does not fit into A %s at axis %lld",
                                      kn_type_str(b, sb, sizeof sb), kn_type_str(a, sa, sizeof sa), (long long)axis);
            for (int d = 0; d < b->rank; d++) {
                int64_t x = a->dims[axis + d].value, y = b->dims[d].value;
                if (x >= 0 && y >= 0 && y != 1 && x != y)
                    return kn_infer_error(c, KILN_ERR_SHAPE, "B %s does not match A %s at axis %lld",
                                          kn_type_str(b, sb, sizeof sb), kn_type_str(a, sa, sizeof sa), (long long)axis);
            }
        }
    }
    c->out[0] = *a;
    c->out[0].kind = KN_TYPE_TENSOR;
    c->out[0].n_shape_value = -1;
    if (out != KILN_DTYPE_UNDEFINED) c->out[0].dtype = out;
    return KILN_OK;
}

static kiln_status binary(kn_infer_ctx *c, unsigned mask, bool bool_out, bool same_types, bool legacy) {
    KN_TRY(need(c, 0));
    KN_TRY(need(c, 1));
    KN_TRY(check_class(c, 0, mask));
    KN_TRY(check_class(c, 1, mask));
    if (same_types) KN_TRY(check_same(c, 0, 1));
    kiln_dtype out = bool_out ? KILN_DTYPE_BOOL : KILN_DTYPE_UNDEFINED;
    if (legacy && c->node->opset < 7) return legacy_binary(c, out);
    return kn_infer_broadcast(c, 0, out);
}

#define ARITH_INFER(name, ch)                                                                      \
    static kiln_status infer_##name(kn_infer_ctx *c) {                                             \
        KN_TRY(binary(c, M_NUM, false, true, true));                                               \
        propagate_shape_value(c, ch);                                                              \
        return KILN_OK;                                                                            \
    }
ARITH_INFER(add, '+')
ARITH_INFER(sub, '-')
ARITH_INFER(mul, '*')
ARITH_INFER(div, '/')

static kiln_status infer_pow(kn_infer_ctx *c) { return binary(c, M_NUM, false, false, true); }
static kiln_status infer_mod(kn_infer_ctx *c) { return binary(c, M_NUM, false, true, false); }
static kiln_status infer_bitwise(kn_infer_ctx *c) { return binary(c, M_I, false, true, false); }
static kiln_status infer_bitshift(kn_infer_ctx *c) {
    const char *d = kn_attr_string(c->node, "direction", "");
    if (strcmp(d, "LEFT") && strcmp(d, "RIGHT"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "direction='%s' is not LEFT or RIGHT", d);
    return binary(c, M_I, false, true, false);
}
static kiln_status infer_logic(kn_infer_ctx *c) { return binary(c, M_B, true, true, true); }
static kiln_status infer_equal(kn_infer_ctx *c) {
    KN_TRY(binary(c, M_NUM | M_B | M_S, true, true, true));
    propagate_equal(c);
    return KILN_OK;
}
static kiln_status infer_compare(kn_infer_ctx *c) { return binary(c, M_NUM | M_B, true, true, true); }
static kiln_status infer_compare12(kn_infer_ctx *c) { return binary(c, M_NUM | M_B, true, true, false); }

static kiln_status infer_prelu(kn_infer_ctx *c) {
    /* before opset 7 a 1-D slope of C values is per channel (axis 1) */
    if (c->node->opset < 7 && c->n_inputs > 1 && c->in[0] && c->in[1] && c->in[1]->rank == 1 &&
        c->in[0]->rank >= 2 && c->in[1]->dims[0].value > 1 && c->in[1]->dims[0].value == c->in[0]->dims[1].value) {
        KN_TRY(check_class(c, 0, M_NUM));
        KN_TRY(check_same(c, 0, 1));
        return kn_infer_same(c, 0, 0);
    }
    KN_TRY(binary(c, M_NUM, false, true, false));
    /* the slope broadcasts to X, never the other way */
    const kn_type *x = c->in[0], *o = &c->out[0];
    if (x->rank >= 0 && o->rank >= 0) {
        bool ok = o->rank == x->rank;
        for (int d = 0; ok && d < x->rank; d++)
            if (x->dims[d].value >= 0 && o->dims[d].value >= 0 && x->dims[d].value != o->dims[d].value) ok = false;
        if (!ok) {
            char sx[256], ss[256];
            return kn_infer_error(c, KILN_ERR_SHAPE, "slope %s does not broadcast to X %s",
                                  kn_type_str(c->in[1], ss, sizeof ss), kn_type_str(x, sx, sizeof sx));
        }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ variadic, Where */

static kiln_status infer_variadic(kn_infer_ctx *c) {
    if (c->n_inputs < 1) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "needs at least one input");
    for (int i = 0; i < c->n_inputs; i++) {
        KN_TRY(need(c, i));
        KN_TRY(check_class(c, i, M_NUM));
        KN_TRY(check_same(c, 0, i));
    }
    return kn_infer_broadcast(c, 0, KILN_DTYPE_UNDEFINED);
}

static kiln_status infer_where(kn_infer_ctx *c) {
    for (int i = 0; i < 3; i++) KN_TRY(need(c, i));
    KN_TRY(check_class(c, 0, M_B));
    KN_TRY(check_same(c, 1, 2));
    KN_TRY(kn_infer_broadcast(c, 0, KILN_DTYPE_UNDEFINED));
    c->out[0].dtype = c->in[1]->dtype != KILN_DTYPE_UNDEFINED ? c->in[1]->dtype : c->in[2]->dtype;
    propagate_where(c);
    return KILN_OK;
}

/* ------------------------------------------------------------------ Cast */

static kiln_status cast_to(kn_infer_ctx *c, kiln_dtype *to) {
    const kn_attr *a = kn_node_attr(c->node, "to");
    if (!a) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attribute 'to' is missing");
    if (a->type == KN_ATTR_STRING) { /* opset < 6 names the type: to="FLOAT" */
        for (int t = 1; t < KILN_DTYPE_COUNT_; t++)
            if (a->s && !strcasecmp(a->s, kiln_dtype_name((kiln_dtype)t))) {
                *to = (kiln_dtype)t;
                return KILN_OK;
            }
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "to='%s' is not an element type", a->s ? a->s : "");
    }
    if (a->type != KN_ATTR_INT || !kn_dtype_is_valid((int)a->i))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "to=%lld is not an element type kiln supports", (long long)a->i);
    *to = (kiln_dtype)a->i;
    return KILN_OK;
}

static kiln_status cast_common(kn_infer_ctx *c, kiln_dtype to) {
    KN_TRY(need(c, 0));
    KN_TRY(check_class(c, 0, M_ALL));
    if (!(dtype_class(to) & M_ALL))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "cast to %s is not supported", kiln_dtype_name(to));
    kiln_dtype from = c->in[0]->dtype;
    if ((kn_dtype_is_packed(from) && to == KILN_DTYPE_STRING) || (from == KILN_DTYPE_STRING && kn_dtype_is_packed(to)))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "cast from %s to %s is not supported", kiln_dtype_name(from),
                              kiln_dtype_name(to));
    kn_type in = *c->in[0];
    KN_TRY(kn_infer_same(c, 0, 0));
    c->out[0].kind = KN_TYPE_TENSOR;
    c->out[0].dtype = to;
    /* integer shape values pass through a cast to another integer type */
    if (kn_dtype_is_int(from) && (to == KILN_DTYPE_INT64 || to == KILN_DTYPE_INT32) && in.n_shape_value >= 0 &&
        in.rank <= 1) {
        c->out[0].n_shape_value = in.n_shape_value;
        memcpy(c->out[0].shape_value, in.shape_value, sizeof in.shape_value);
    }
    return KILN_OK;
}

static kiln_status infer_cast(kn_infer_ctx *c) {
    kiln_dtype to = KILN_DTYPE_UNDEFINED;
    KN_TRY(cast_to(c, &to));
    return cast_common(c, to);
}

static kiln_status infer_castlike(kn_infer_ctx *c) {
    KN_TRY(need(c, 1));
    if (c->in[1]->dtype == KILN_DTYPE_UNDEFINED) { /* the shape is known, the type not yet */
        KN_TRY(need(c, 0));
        KN_TRY(kn_infer_same(c, 0, 0));
        c->out[0].dtype = KILN_DTYPE_UNDEFINED;
        return KILN_OK;
    }
    return cast_common(c, c->in[1]->dtype);
}

/* ------------------------------------------------------------------ the table */

#define U1(op, since, fn) {"", #op, since, 0, 1, 1, 1, 1, fn, 0}
#define B2(op, since, fn) {"", #op, since, 0, 2, 2, 1, 1, fn, 0}

const kn_op_schema kn_ops_elementwise[] = {
    /* unary math */
    U1(Abs, 1, infer_unary_num),
    U1(Neg, 1, infer_unary_num),
    U1(Reciprocal, 1, infer_unary_f),
    U1(Sqrt, 1, infer_unary_f),
    U1(Exp, 1, infer_unary_f),
    U1(Log, 1, infer_unary_f),
    U1(Ceil, 1, infer_unary_f),
    U1(Floor, 1, infer_unary_f),
    U1(Round, 11, infer_unary_f),
    U1(Sign, 9, infer_unary_num),
    U1(Sin, 7, infer_unary_f),
    U1(Cos, 7, infer_unary_f),
    U1(Tan, 7, infer_unary_f),
    U1(Asin, 7, infer_unary_f),
    U1(Acos, 7, infer_unary_f),
    U1(Atan, 7, infer_unary_f),
    U1(Sinh, 9, infer_unary_f),
    U1(Cosh, 9, infer_unary_f),
    U1(Asinh, 9, infer_unary_f),
    U1(Acosh, 9, infer_unary_f),
    U1(Atanh, 9, infer_unary_f),
    U1(Erf, 9, infer_unary_num),
    U1(IsNaN, 9, infer_is_f),
    U1(IsInf, 10, infer_is_f),
    U1(Not, 1, infer_unary_bool),
    U1(BitwiseNot, 18, infer_unary_int),
    /* activations */
    U1(Relu, 1, infer_unary_num),
    U1(LeakyRelu, 1, infer_unary_f),
    U1(Sigmoid, 1, infer_unary_f),
    U1(HardSigmoid, 1, infer_unary_f),
    U1(HardSwish, 14, infer_unary_f),
    U1(Tanh, 1, infer_unary_f),
    U1(Elu, 1, infer_unary_f),
    U1(Selu, 1, infer_unary_f),
    U1(Celu, 12, infer_unary_f),
    U1(Softplus, 1, infer_unary_f),
    U1(Softsign, 1, infer_unary_f),
    U1(ThresholdedRelu, 10, infer_unary_f),
    U1(Shrink, 9, infer_unary_num),
    U1(Mish, 18, infer_unary_f),
    U1(Gelu, 20, infer_gelu),
    U1(Swish, 24, infer_unary_f),
    /* Clip: min/max attributes until opset 10, optional inputs from 11 */
    {"", "Clip", 1, 10, 1, 1, 1, 1, infer_clip, 0},
    {"", "Clip", 11, 0, 1, 3, 1, 1, infer_clip, 0},
    /* binary */
    B2(Add, 1, infer_add),
    B2(Sub, 1, infer_sub),
    B2(Mul, 1, infer_mul),
    B2(Div, 1, infer_div),
    B2(Pow, 1, infer_pow),
    B2(Mod, 10, infer_mod),
    B2(BitShift, 11, infer_bitshift),
    B2(BitwiseAnd, 18, infer_bitwise),
    B2(BitwiseOr, 18, infer_bitwise),
    B2(BitwiseXor, 18, infer_bitwise),
    B2(And, 1, infer_logic),
    B2(Or, 1, infer_logic),
    B2(Xor, 1, infer_logic),
    B2(Equal, 1, infer_equal),
    B2(Less, 1, infer_compare),
    B2(Greater, 1, infer_compare),
    B2(LessOrEqual, 12, infer_compare12),
    B2(GreaterOrEqual, 12, infer_compare12),
    B2(PRelu, 1, infer_prelu),
    /* variadic */
    {"", "Sum", 1, 0, 1, -1, 1, 1, infer_variadic, 0},
    {"", "Mean", 1, 0, 1, -1, 1, 1, infer_variadic, 0},
    {"", "Max", 1, 0, 1, -1, 1, 1, infer_variadic, 0},
    {"", "Min", 1, 0, 1, -1, 1, 1, infer_variadic, 0},
    {"", "Where", 9, 0, 3, 3, 1, 1, infer_where, 0},
    U1(Cast, 1, infer_cast),
    B2(CastLike, 15, infer_castlike),
    {0},
};

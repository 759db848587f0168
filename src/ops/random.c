/* The random family: RandomUniform, RandomNormal, their *Like forms, Bernoulli and Multinomial.
 * Schemas and shape inference; all are flagged nondeterministic so that no pass folds them into
 * constants. */
#include "ops/op.h"

#include <string.h>

static kiln_status need_input(kn_infer_ctx *c, int i, const char *name) {
    if (i >= c->n_inputs || !c->in[i])
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d ('%s') is missing", i, name);
    return KILN_OK;
}

/* The output type: the 'dtype' attribute, else `dflt`; float types only unless any_numeric. */
static kiln_status out_dtype(kn_infer_ctx *c, kiln_dtype dflt, bool any_numeric, kiln_dtype *out) {
    int64_t v = kn_attr_int(c->node, "dtype", dflt);
    if (v == KILN_DTYPE_UNDEFINED && !kn_node_attr(c->node, "dtype")) {
        *out = KILN_DTYPE_UNDEFINED; /* the input's type is not known yet */
        return KILN_OK;
    }
    bool ok = kn_dtype_is_valid((int)v) && (kn_dtype_is_float((kiln_dtype)v) ||
                                             (any_numeric && (kn_dtype_is_int((kiln_dtype)v) || v == KILN_DTYPE_BOOL)));
    if (!ok)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "dtype %lld (%s) is not one this operator produces", (long long)v,
                              kn_dtype_is_valid((int)v) ? kiln_dtype_name((kiln_dtype)v) : "unknown");
    *out = (kiln_dtype)v;
    return KILN_OK;
}

static kiln_status infer_random(kn_infer_ctx *c) {
    int n = 0;
    const int64_t *shape = kn_attr_ints(c->node, "shape", &n);
    if (!shape) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attribute 'shape' is missing");
    if (n > KILN_MAX_RANK) return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "shape has %d dimensions (at most %d)", n, KILN_MAX_RANK);
    for (int k = 0; k < n; k++)
        if (shape[k] < 0)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "shape has a negative dimension %lld", (long long)shape[k]);
    kiln_dtype dt = KILN_DTYPE_FLOAT;
    KN_TRY(out_dtype(c, KILN_DTYPE_FLOAT, false, &dt));
    kn_infer_set(c, 0, dt, n, shape);
    return KILN_OK;
}

static kiln_status infer_like(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "input"));
    bool bern = !strcmp(c->node->op_type, "Bernoulli");
    kiln_dtype dt = KILN_DTYPE_FLOAT;
    KN_TRY(out_dtype(c, c->in[0]->dtype, bern, &dt));
    KN_TRY(kn_infer_same(c, 0, 0));
    c->out[0].dtype = dt;
    return KILN_OK;
}

static kiln_status infer_multinomial(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "input"));
    const kn_type *x = c->in[0];
    if (x->rank >= 0 && x->rank != 2)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input has rank %d; it must be [batch_size, class_size]", x->rank);
    int64_t dt = kn_attr_int(c->node, "dtype", KILN_DTYPE_INT32);
    if (dt != KILN_DTYPE_INT32 && dt != KILN_DTYPE_INT64)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "dtype %lld must be int32 (6) or int64 (7)", (long long)dt);
    int64_t s = kn_attr_int(c->node, "sample_size", 1);
    if (s < 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "sample_size %lld is negative", (long long)s);
    kn_type *t = &c->out[0];
    kn_type_set_tensor(t, (kiln_dtype)dt, 2, NULL);
    if (x->rank == 2) t->dims[0] = x->dims[0];
    t->dims[1].value = s;
    return KILN_OK;
}

const kn_op_schema kn_ops_random[] = {
    {"", "RandomUniform", 1, 0, 0, 0, 1, 1, infer_random, KN_OP_NONDETERMINISTIC},
    {"", "RandomNormal", 1, 0, 0, 0, 1, 1, infer_random, KN_OP_NONDETERMINISTIC},
    {"", "RandomUniformLike", 1, 0, 1, 1, 1, 1, infer_like, KN_OP_NONDETERMINISTIC},
    {"", "RandomNormalLike", 1, 0, 1, 1, 1, 1, infer_like, KN_OP_NONDETERMINISTIC},
    {"", "Bernoulli", 15, 0, 1, 1, 1, 1, infer_like, KN_OP_NONDETERMINISTIC},
    {"", "Multinomial", 7, 0, 1, 1, 1, 1, infer_multinomial, KN_OP_NONDETERMINISTIC},
    {0},
};

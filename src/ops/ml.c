/* The ml family (domain ai.onnx.ml): LabelEncoder (opsets 1, 2, 4), TreeEnsemble (opset 5),
 * Binarizer, ArrayFeatureExtractor. Schemas and shape inference. */
#include "ops/op.h"

#include <stdio.h>
#include <string.h>

#define ML "ai.onnx.ml"

static kiln_status need(kn_infer_ctx *c, int n) {
    for (int i = 0; i < n; i++)
        if (i >= c->n_inputs || !c->in[i]) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d is missing", i);
    return KILN_OK;
}

/* LabelEncoder's key and value types from its attributes (opset 2+); UNDEFINED when absent. */
static kiln_dtype attr_list_type(const kn_node *n, const char *kind) {
    char name[32];
    static const struct {
        const char *suffix;
        kiln_dtype t;
    } lists[] = {{"floats", KILN_DTYPE_FLOAT}, {"int64s", KILN_DTYPE_INT64}, {"strings", KILN_DTYPE_STRING}};
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s_%s", kind, lists[i].suffix);
        if (kn_node_attr(n, name)) return lists[i].t;
    }
    snprintf(name, sizeof name, "%s_tensor", kind);
    const kn_attr *a = kn_node_attr(n, name);
    if (a && a->type == KN_ATTR_TENSOR && a->t) return a->t->dtype;
    return KILN_DTYPE_UNDEFINED;
}

static kiln_status infer_label_encoder(kn_infer_ctx *c) {
    KN_TRY(need(c, 1));
    kiln_dtype in = c->in[0]->dtype, key, val;
    if (c->node->opset < 2) { /* classes_strings: int64 <-> string */
        if (in != KILN_DTYPE_UNDEFINED && in != KILN_DTYPE_INT64 && in != KILN_DTYPE_STRING)
            return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "x is %s; LabelEncoder-1 maps int64 <-> string",
                                  kiln_dtype_name(in));
        key = in;
        val = in == KILN_DTYPE_INT64 ? KILN_DTYPE_STRING : in == KILN_DTYPE_STRING ? KILN_DTYPE_INT64 : KILN_DTYPE_UNDEFINED;
    } else {
        key = attr_list_type(c->node, "keys");
        val = attr_list_type(c->node, "values");
        if (key == KILN_DTYPE_UNDEFINED || val == KILN_DTYPE_UNDEFINED)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "LabelEncoder needs one keys_* and one values_* attribute");
        if (in != KILN_DTYPE_UNDEFINED && in != key)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "x is %s but the keys are %s", kiln_dtype_name(in),
                                  kiln_dtype_name(key));
    }
    KN_TRY(kn_infer_same(c, 0, 0));
    c->out[0].kind = KN_TYPE_TENSOR;
    c->out[0].dtype = val;
    return KILN_OK;
}

static kiln_status infer_binarizer(kn_infer_ctx *c) {
    KN_TRY(need(c, 1));
    kiln_dtype t = c->in[0]->dtype;
    if (t != KILN_DTYPE_UNDEFINED && t != KILN_DTYPE_FLOAT && t != KILN_DTYPE_DOUBLE && t != KILN_DTYPE_INT64 &&
        t != KILN_DTYPE_INT32)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "x is %s; Binarizer takes float, double, int64 or int32",
                              kiln_dtype_name(t));
    return kn_infer_same(c, 0, 0);
}

static kiln_status infer_array_feature_extractor(kn_infer_ctx *c) {
    KN_TRY(need(c, 2));
    const kn_type *x = c->in[0], *y = c->in[1];
    if (y->dtype != KILN_DTYPE_UNDEFINED && y->dtype != KILN_DTYPE_INT64)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "the indices are %s; they must be int64", kiln_dtype_name(y->dtype));
    int64_t n = -1;
    if (y->rank >= 0) {
        n = 1;
        for (int i = 0; i < y->rank; i++) n = (n < 0 || y->dims[i].value < 0) ? -1 : n * y->dims[i].value;
    }
    if (x->rank < 0) {
        c->out[0].kind = KN_TYPE_TENSOR;
        c->out[0].dtype = x->dtype;
        return KILN_OK;
    }
    if (x->rank == 0) return kn_infer_error(c, KILN_ERR_SHAPE, "x is a scalar; ArrayFeatureExtractor needs [..., F]");
    KN_TRY(kn_infer_same(c, 0, 0));
    if (x->rank == 1) { /* a vector is one row */
        int64_t d[2] = {1, n};
        kn_infer_set(c, 0, x->dtype, 2, d);
    } else {
        c->out[0].dims[x->rank - 1] = (kn_dim){n, NULL};
    }
    return KILN_OK;
}

static kiln_status infer_tree_ensemble(kn_infer_ctx *c) {
    KN_TRY(need(c, 1));
    const kn_type *x = c->in[0];
    kiln_dtype t = x->dtype;
    if (t != KILN_DTYPE_UNDEFINED && t != KILN_DTYPE_FLOAT && t != KILN_DTYPE_DOUBLE && t != KILN_DTYPE_FLOAT16)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "x is %s; TreeEnsemble takes float, double or float16",
                              kiln_dtype_name(t));
    if (x->rank >= 0 && x->rank != 2) return kn_infer_error(c, KILN_ERR_SHAPE, "x has rank %d; TreeEnsemble takes [N, F]", x->rank);
    int64_t nt = kn_attr_int(c->node, "n_targets", 0);
    if (nt <= 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "n_targets %lld must be positive", (long long)nt);
    int64_t d[2] = {x->rank == 2 ? x->dims[0].value : -1, nt};
    kn_infer_set(c, 0, t, 2, d);
    if (x->rank == 2) c->out[0].dims[0] = x->dims[0];
    return KILN_OK;
}

const kn_op_schema kn_ops_ml[] = {
    {ML, "LabelEncoder", 1, 0, 1, 1, 1, 1, infer_label_encoder, 0},
    {ML, "Binarizer", 1, 0, 1, 1, 1, 1, infer_binarizer, 0},
    {ML, "ArrayFeatureExtractor", 1, 0, 2, 2, 1, 1, infer_array_feature_extractor, 0},
    {ML, "TreeEnsemble", 5, 0, 1, 1, 1, 1, infer_tree_ensemble, 0},
    {0},
};

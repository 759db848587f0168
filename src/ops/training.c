/* The training family (domain ai.onnx.preview.training): the optimiser steps Adagrad, Adam and
 * Momentum. Each takes R (learning rate), T (step count) and n tensors per group (X, G, then the
 * optimiser's state), and gives the updated X and state tensors, each shaped like its input. */
#include "ops/op.h"

#define TRAINING "ai.onnx.preview.training"

/* groups: tensors per parameter among the inputs (X, G, state...); the outputs are X and the
 * state groups (every input group but G). */
static kiln_status infer_optimiser(kn_infer_ctx *c, int groups) {
    int rest = c->n_inputs - 2;
    if (rest <= 0 || rest % groups)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL,
                              "%s takes R, T and %d tensors per parameter; %d inputs do not divide that way",
                              c->node->op_type, groups, c->n_inputs);
    int n = rest / groups;
    if (c->n_outputs != n * (groups - 1))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "%d parameters need %d outputs, not %d", n, n * (groups - 1),
                              c->n_outputs);
    for (int i = 0; i < c->n_inputs; i++)
        if (!c->in[i]) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d is missing", i);
    if (c->in[0]->dtype != KILN_DTYPE_UNDEFINED && c->in[0]->dtype != KILN_DTYPE_FLOAT &&
        c->in[0]->dtype != KILN_DTYPE_DOUBLE)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "R is %s; it must be float or double",
                              kiln_dtype_name(c->in[0]->dtype));
    if (c->in[1]->dtype != KILN_DTYPE_UNDEFINED && c->in[1]->dtype != KILN_DTYPE_INT64)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "T is %s; it must be int64", kiln_dtype_name(c->in[1]->dtype));
    for (int i = 2; i < c->n_inputs; i++) {
        kiln_dtype t = c->in[i]->dtype;
        if (t != KILN_DTYPE_UNDEFINED && t != KILN_DTYPE_FLOAT && t != KILN_DTYPE_DOUBLE)
            return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "input %d is %s; it must be float or double", i,
                                  kiln_dtype_name(t));
    }
    for (int g = 0, o = 0; g < groups; g++) {
        if (g == 1) continue; /* the gradients */
        for (int i = 0; i < n; i++, o++) KN_TRY(kn_infer_same(c, 2 + g * n + i, o));
    }
    return KILN_OK;
}

static kiln_status infer_adagrad(kn_infer_ctx *c) { return infer_optimiser(c, 3); }
static kiln_status infer_adam(kn_infer_ctx *c) { return infer_optimiser(c, 4); }
static kiln_status infer_momentum(kn_infer_ctx *c) { return infer_optimiser(c, 3); }

const kn_op_schema kn_ops_training[] = {
    {TRAINING, "Adagrad", 1, 0, 5, -1, 2, -1, infer_adagrad, 0},
    {TRAINING, "Adam", 1, 0, 6, -1, 3, -1, infer_adam, 0},
    {TRAINING, "Momentum", 1, 0, 5, -1, 2, -1, infer_momentum, 0},
    {0},
};

/* Constant folding: a node whose inputs are all constant is evaluated once, with the CPU kernels,
 * and its outputs become initializers. Shape arithmetic folds too: a small integer value whose
 * elements shape inference knows exactly (Shape of a static-shaped value, Gather of a known dim,
 * Concat of known parts) becomes a constant even when its inputs are not, so exporters' chains of
 * Shape/Gather/Unsqueeze/Concat before a Reshape collapse wherever the dims are known. */
#include "opt/pass.h"

#include "backend/cpu/cpu.h"
#include "exec/exec.h"

#include <stdlib.h>
#include <string.h>

/* A result may be larger than its inputs (ConstantOfShape, Expand, Tile, Cast to a wider type):
 * fold it while it stays below this size or twice the inputs' size. */
#define FOLD_MAX_GROWTH_BYTES ((size_t)64 << 20)

/* The output's value from its inferred type, when every element is known. */
static kn_tensor *from_shape_value(const kn_type *t) {
    if (t->kind != KN_TYPE_TENSOR || (t->dtype != KILN_DTYPE_INT64 && t->dtype != KILN_DTYPE_INT32)) return NULL;
    if (t->rank < 0 || t->rank > 1 || t->n_shape_value < 0) return NULL;
    int64_t count = t->rank == 0 ? 1 : t->dims[0].value;
    if (count != t->n_shape_value) return NULL;
    for (int i = 0; i < t->n_shape_value; i++)
        if (t->shape_value[i].value < 0) return NULL; /* -1: unknown or symbolic */
    int64_t dims[1] = {count};
    kn_tensor *out = NULL;
    if (kn_tensor_new(t->dtype, t->rank, dims, &out) != KILN_OK) {
        kn_clear_error();
        return NULL;
    }
    for (int i = 0; i < t->n_shape_value; i++) kn_tensor_set_i64(out, i, t->shape_value[i].value);
    return out;
}

/* Makes value v the constant t (owned by the model from now on). */
static kiln_status set_constant(kn_opt_ctx *c, int v, kn_tensor *t) {
    kiln_status st = kn_model_own_tensor(c->model, t);
    if (st != KILN_OK) {
        kn_tensor_free(t);
        return st;
    }
    kn_value *val = &c->g->values[v];
    val->constant = t;
    val->producer = -1;
    kn_type ty;
    kn_type_of_tensor(t, &ty);
    /* keep the symbols the declared type had: the value is the same */
    val->type.kind = KN_TYPE_TENSOR;
    val->type.dtype = t->dtype;
    val->type.rank = t->rank;
    for (int d = 0; d < t->rank; d++) val->type.dims[d] = ty.dims[d];
    return KILN_OK;
}

/* Shape arithmetic: every used output's value known from inference. */
static kiln_status fold_known_shapes(kn_opt_ctx *c, int i, bool *done) {
    kn_node *n = &c->g->nodes[i];
    *done = false;
    kn_tensor *vals[8] = {0};
    if (n->n_outputs > 8 || n->n_outputs == 0) return KILN_OK;
    for (int o = 0; o < n->n_outputs; o++) {
        int v = n->outputs[o];
        if (v < 0) continue;
        vals[o] = from_shape_value(&c->g->values[v].type);
        if (!vals[o]) {
            for (int k = 0; k < o; k++) kn_tensor_free(vals[k]);
            return KILN_OK;
        }
    }
    for (int o = 0; o < n->n_outputs; o++) {
        if (n->outputs[o] < 0) continue;
        KN_TRY(set_constant(c, n->outputs[o], vals[o]));
        vals[o] = NULL;
    }
    *done = true;
    return KILN_OK;
}

/* Evaluates a node whose inputs are all constant. Failures leave the node alone: the run
 * reports real errors with their context. */
static kiln_status fold_node(kn_opt_ctx *c, int i, bool *done) {
    kn_graph *g = c->g;
    kn_node *n = &g->nodes[i];
    *done = false;
    int ni = n->n_inputs, no = n->n_outputs;
    if (ni > 64 || no > 64 || no == 0) return KILN_OK;
    kn_tensor *in[64] = {0};
    const kn_tensor *in_val[64] = {0};
    kn_type in_types[64];
    const kn_type *in_tp[64] = {0};
    size_t in_bytes = 0;
    for (int k = 0; k < ni; k++) {
        int v = n->inputs[k];
        if (v < 0) continue;
        const kn_tensor *t = kn_opt_const(c, v);
        if (!t) return KILN_OK;
        in[k] = (kn_tensor *)t;
        in_val[k] = t;
        kn_type_of_tensor(t, &in_types[k]);
        in_tp[k] = &in_types[k];
        in_bytes += t->nbytes;
    }
    kn_type out_types[64];
    for (int o = 0; o < no; o++) kn_type_init(&out_types[o]);
    if (n->schema->infer) {
        kn_infer_ctx ic = {n, ni, in_tp, in_val, no, out_types, &c->model->arena};
        if (n->schema->infer(&ic) != KILN_OK) {
            kn_clear_error();
            return KILN_OK;
        }
    }
    size_t out_bytes = 0;
    for (int o = 0; o < no; o++) {
        if (n->outputs[o] < 0) continue;
        if (out_types[o].kind != KN_TYPE_TENSOR) return KILN_OK; /* sequences and optionals stay */
        if (kn_type_is_static(&out_types[o])) {
            int64_t dims[KILN_MAX_RANK];
            for (int d = 0; d < out_types[o].rank; d++) dims[d] = out_types[o].dims[d].value;
            int64_t cnt = kn_shape_count(dims, out_types[o].rank);
            size_t es = kiln_dtype_size(out_types[o].dtype);
            if (cnt < 0) return KILN_OK;
            out_bytes += (size_t)cnt * (es ? es : 8);
        }
    }
    /* a Constant node's value is already in memory: folding it never grows anything */
    bool is_constant_node = !*n->domain && !strcmp(n->op_type, "Constant");
    if (!is_constant_node && out_bytes > FOLD_MAX_GROWTH_BYTES && out_bytes > 2 * in_bytes) return KILN_OK;
    char why[256];
    const kn_cpu_kernel *k = kn_cpu_find(n, in_tp, ni, why, sizeof why);
    if (!k) return KILN_OK;
    kn_tensor *out[64] = {0};
    kiln_status st = KILN_OK;
    for (int o = 0; o < no && st == KILN_OK; o++) {
        if (!kn_type_is_static(&out_types[o])) continue;
        int64_t dims[KILN_MAX_RANK];
        for (int d = 0; d < out_types[o].rank; d++) dims[d] = out_types[o].dims[d].value;
        st = kn_tensor_new(out_types[o].dtype, out_types[o].rank, dims, &out[o]);
    }
    if (st == KILN_OK) {
        kn_kernel_ctx kc = {n, g, ni, in, no, out, NULL, NULL};
        st = k->run(&kc);
    }
    for (int o = 0; o < no && st == KILN_OK; o++)
        if (n->outputs[o] >= 0 && (!out[o] || out[o]->kind != KN_VALUE_TENSOR)) st = KILN_ERR_UNSUPPORTED;
    if (st != KILN_OK) {
        for (int o = 0; o < no; o++) kn_tensor_free(out[o]);
        kn_clear_error();
        return KILN_OK;
    }
    for (int o = 0; o < no; o++) {
        if (n->outputs[o] < 0) {
            kn_tensor_free(out[o]);
            continue;
        }
        st = set_constant(c, n->outputs[o], out[o]);
        out[o] = NULL;
        if (st != KILN_OK) {
            for (int k2 = o + 1; k2 < no; k2++) kn_tensor_free(out[k2]);
            return st;
        }
    }
    *done = true;
    return KILN_OK;
}

kiln_status kn_pass_fold_constants(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        if (n->dead || !n->schema) continue;
        if (n->schema->flags & (KN_OP_NONDETERMINISTIC | KN_OP_HAS_SUBGRAPH)) continue;
        bool done = false;
        KN_TRY(fold_node(c, i, &done));
        if (done) {
            kn_opt_note(c, g->nodes[i].op_type);
        } else {
            KN_TRY(fold_known_shapes(c, i, &done));
            if (done) kn_opt_note(c, "shape arithmetic");
        }
        if (done) kn_opt_kill(c, i);
    }
    return kn_opt_refresh(c);
}

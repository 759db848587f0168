/* Drops the initial_h / initial_c inputs of LSTM, GRU and RNN when they are zeros by construction.
 *
 * Why: the spec says an omitted initial state is zero, but PyTorch exports feed explicit zeros
 * built at run time, Slice(ConstantOfShape(Concat(.., Unsqueeze(Gather(Shape(x))))), value 0),
 * because the batch dim is symbolic and fold_constants cannot make them a constant. That chain of
 * shape arithmetic costs a kernel launch per node on every run; omitting the input says the same
 * thing, and eliminate_dead then removes the chain.
 *
 * Conservative by design: a value is known zero only when it is a true constant (never an
 * initializer that is also a graph input: a caller may feed it) of all zeros, a ConstantOfShape of
 * 0, or output 0 of a data-moving operator (or a Cast to a float type) over a known-zero input 0;
 * the state must be a float tensor of rank 3 (or unknown rank). */
#include "opt/pass.h"

#include <string.h>

#define MAX_DEPTH 16

/* Whether a tensor's elements are all zero (-0.0 counts; NaN does not). */
static bool tensor_all_zero(const kn_tensor *t) {
    if (!t || (!kn_dtype_is_float(t->dtype) && !kn_dtype_is_int(t->dtype) && t->dtype != KILN_DTYPE_BOOL))
        return false;
    int64_t n = kn_tensor_count(t);
    for (int64_t i = 0; i < n; i++)
        if (kn_tensor_get_f64(t, i) != 0.0) return false;
    return true;
}

static bool known_zero(const kn_opt_ctx *c, int v, int depth) {
    if (v < 0 || depth > MAX_DEPTH) return false;
    const kn_tensor *t = kn_opt_const(c, v);
    if (t) return tensor_all_zero(t);
    int p = kn_opt_producer(c, v);
    if (p < 0) return false; /* a graph input, an outer value, or nothing known */
    const kn_node *n = &c->g->nodes[p];
    if (n->n_outputs < 1 || n->outputs[0] != v) return false;
    if (kn_opt_is(c, p, "ConstantOfShape")) {
        const kn_attr *a = kn_node_attr(n, "value");
        if (!a) return true; /* default: float32 0 */
        return a->type == KN_ATTR_TENSOR && a->t && kn_tensor_count(a->t) == 1 && tensor_all_zero(a->t);
    }
    if (kn_opt_is(c, p, "Cast")) {
        if (!kn_dtype_is_float((kiln_dtype)kn_attr_int(n, "to", 0))) return false;
    } else if (!kn_opt_is(c, p, "Slice") && !kn_opt_is(c, p, "Reshape") && !kn_opt_is(c, p, "Expand") &&
               !kn_opt_is(c, p, "Squeeze") && !kn_opt_is(c, p, "Unsqueeze") && !kn_opt_is(c, p, "Identity") &&
               !kn_opt_is(c, p, "Transpose")) {
        return false;
    }
    return known_zero(c, kn_opt_input(c, p, 0), depth + 1);
}

kiln_status kn_pass_drop_zero_rnn_states(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!kn_opt_is(c, i, "LSTM") && !kn_opt_is(c, i, "GRU") && !kn_opt_is(c, i, "RNN")) continue;
        kn_node *n = &g->nodes[i];
        int last = kn_opt_is(c, i, "LSTM") ? 6 : 5; /* initial_h is input 5; LSTM's initial_c 6 */
        bool dropped = false;
        for (int k = 5; k <= last; k++) {
            int v = kn_opt_input(c, i, k);
            if (v < 0) continue;
            const kn_type *t = &g->values[v].type;
            if (t->kind != KN_TYPE_TENSOR || !kn_dtype_is_float(t->dtype) || (t->rank >= 0 && t->rank != 3)) continue;
            if (!known_zero(c, v, 0)) continue;
            n->inputs[k] = -1;
            dropped = true;
            kn_opt_note(c, "zero initial state");
        }
        if (!dropped) continue;
        while (n->n_inputs > 0 && n->inputs[n->n_inputs - 1] < 0) n->n_inputs--;
        KN_TRY(kn_opt_refresh(c));
    }
    return KILN_OK;
}

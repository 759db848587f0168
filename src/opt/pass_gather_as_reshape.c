/* A Gather whose constant indices pick every element of its axis once, in order (0, 1, ..., n-1
 * laid out in any shape), only relabels the shape of row-major data:
 *
 *     Gather(X, I, axis a)  ->  Reshape(X, X.shape[:a] + I.shape + X.shape[a+1:])
 *
 * and a Reshape is a view, where a Gather copies. Exporters write this where index arithmetic over
 * a known shape folds to an arange: transformers' attention masks are built by index functions
 * (mask[b, kv] read as Flatten(mask)[b * S + kv]), which export as a Gather over the flattened mask
 * with the indices arange(B * S) once the batch and sequence are known. The Reshape then merges
 * with the Flatten before it (merge_reshapes).
 *
 * Only the whole axis in order: a Gather of part of an axis or of one index stays a Gather (other
 * passes read those as the steps of a recurrence or the heads of an attention). */
#include "opt/pass.h"

#include <string.h>

/* Whether the constant indices idx are 0, 1, ..., dim-1 (negative ones counted from dim). */
static bool picks_whole_axis(const kn_tensor *idx, int64_t dim) {
    if (idx->rank < 1 || kn_tensor_count(idx) != dim) return false;
    for (int64_t k = 0; k < dim; k++) {
        int64_t v = kn_tensor_get_i64(idx, k);
        if (v < 0) v += dim;
        if (v != k) return false;
    }
    return true;
}

kiln_status kn_pass_gather_as_reshape(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!kn_opt_is(c, i, "Gather") || kn_opt_n_inputs(c, i) != 2 || g->nodes[i].n_outputs != 1) continue;
        const int x = g->nodes[i].inputs[0], out = g->nodes[i].outputs[0];
        const kn_tensor *idx = kn_opt_const(c, g->nodes[i].inputs[1]);
        if (x < 0 || out < 0 || !idx || !kn_dtype_is_int(idx->dtype)) continue;
        const kn_type *xt = &g->values[x].type, *yt = &g->values[out].type;
        /* every output dim known and non-zero (a 0 in Reshape's target copies the input's dim) */
        if (xt->rank < 1 || yt->rank < 0 || kn_opt_static_count(yt) <= 0) continue;
        int64_t axis = kn_attr_int(&g->nodes[i], "axis", 0);
        if (axis < 0) axis += xt->rank;
        if (axis < 0 || axis >= xt->rank || xt->dims[axis].symbol || xt->dims[axis].value < 1) continue;
        if (!picks_whole_axis(idx, xt->dims[axis].value)) continue;

        /* the target shape is the output's, all of it known */
        kn_tensor *shape = NULL;
        int64_t len = yt->rank;
        if (kn_tensor_new(KILN_DTYPE_INT64, 1, &len, &shape) != KILN_OK) return KN_OOM();
        for (int d = 0; d < yt->rank; d++) ((int64_t *)shape->data)[d] = yt->dims[d].value;
        const int sv = kn_opt_new_const(c, g->values[out].name, shape);
        if (sv < 0) return KN_OOM();
        kn_opt_proto p;
        kn_proto_init(&p, "", "Reshape");
        kn_proto_in(&p, x);
        kn_proto_in(&p, sv);
        kn_proto_out(&p, out);
        int node;
        KN_TRY(kn_opt_emit(c, &p, i, &node));
        if (node < 0) continue; /* not formed: the Gather stays (its unused constant goes with the dead) */
        kn_opt_kill(c, i);
        kn_opt_note(c, "Gather of a whole axis in order as a Reshape");
        KN_TRY(kn_opt_refresh(c));
    }
    return KILN_OK;
}

/* A Reshape of a Reshape (or of a Flatten, Squeeze or Unsqueeze: every one only relabels the
 * shape of row-major data) is one Reshape of the original input, when the outer target shape does
 * not copy dims from its input (no 0 entries, or allowzero = 1). */
#include "opt/pass.h"

#include <string.h>

static bool is_relabel(const kn_opt_ctx *c, int node) {
    return kn_opt_is(c, node, "Reshape") || kn_opt_is(c, node, "Flatten") || kn_opt_is(c, node, "Squeeze") ||
           kn_opt_is(c, node, "Unsqueeze");
}

kiln_status kn_pass_merge_reshapes(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!kn_opt_is(c, i, "Reshape") || kn_opt_n_inputs(c, i) != 2) continue;
        int y = g->nodes[i].inputs[0];
        int r1 = kn_opt_producer(c, y);
        if (!is_relabel(c, r1) || g->nodes[r1].n_inputs < 1 || g->nodes[r1].inputs[0] < 0) continue;
        const kn_tensor *shape = kn_opt_const(c, g->nodes[i].inputs[1]);
        if (!shape || !kn_dtype_is_int(shape->dtype)) continue;
        bool copies = false;
        if (kn_attr_int(&g->nodes[i], "allowzero", 0) == 0)
            for (int64_t k = 0; k < kn_tensor_count(shape); k++) copies |= kn_tensor_get_i64(shape, k) == 0;
        if (copies) continue;
        g->nodes[i].inputs[0] = g->nodes[r1].inputs[0];
        kn_opt_note(c, "Reshape chain");
        KN_TRY(kn_opt_refresh(c));
    }
    return KILN_OK;
}

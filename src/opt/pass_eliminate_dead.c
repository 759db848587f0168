/* Dead-code elimination: nodes none of whose outputs is read (by a node, a subgraph or as a graph
 * output), and initializers nothing reads. Nodes are visited last to first, so a whole dead chain
 * goes in one sweep. */
#include "opt/pass.h"

#include <stdlib.h>

static void drop_tensor(kn_model *m, kn_tensor *t) {
    for (int i = 0; i < m->n_owned_tensors; i++)
        if (m->owned_tensors[i] == t) {
            m->owned_tensors[i] = m->owned_tensors[--m->n_owned_tensors];
            kn_tensor_free(t);
            return;
        }
}

kiln_status kn_pass_eliminate_dead(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    kn_graph_recount(g);
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        bool used = false;
        for (int o = 0; o < n->n_outputs && !used; o++) {
            int v = n->outputs[o];
            used = v >= 0 && (g->values[v].uses > 0 || kn_opt_pinned(c, v));
        }
        if (used) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) g->values[n->inputs[k]].uses--;
        kn_opt_kill(c, i);
        kn_opt_note(c, "dead node");
    }
    kn_graph_recount(g);
    for (int v = 0; v < g->n_values; v++) {
        kn_value *val = &g->values[v];
        if (!val->constant || val->is_graph_input || val->is_outer || val->uses > 0 || kn_opt_pinned(c, v)) continue;
        drop_tensor(c->model, val->constant);
        val->constant = NULL;
        kn_opt_note(c, "unused initializer");
    }
    return kn_opt_refresh(c);
}

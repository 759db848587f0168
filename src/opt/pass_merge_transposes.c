/* Consecutive Transposes compose into one: Transpose(Transpose(x, p1), p2) is Transpose(x, p)
 * with p[i] = p1[p2[i]]; when p is the identity the pair disappears. The first Transpose stays
 * while something else reads it (dead-code elimination removes it otherwise). */
#include "opt/pass.h"

#include <string.h>

/* The permutation of a Transpose node (the reversal when absent); false when unknown. */
static bool get_perm(const kn_opt_ctx *c, int node, int64_t *perm, int *rank) {
    const kn_node *n = &c->g->nodes[node];
    int cnt = 0;
    const int64_t *p = kn_attr_ints(n, "perm", &cnt);
    int r = c->g->values[n->inputs[0]].type.rank;
    if (!p) {
        if (r < 0 || r > KILN_MAX_RANK) return false;
        for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
        *rank = r;
        return true;
    }
    if (cnt > KILN_MAX_RANK || (r >= 0 && r != cnt)) return false;
    bool seen[KILN_MAX_RANK] = {0};
    for (int i = 0; i < cnt; i++) {
        if (p[i] < 0 || p[i] >= cnt || seen[p[i]]) return false;
        seen[p[i]] = true;
        perm[i] = p[i];
    }
    *rank = cnt;
    return true;
}

kiln_status kn_pass_merge_transposes(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!kn_opt_is(c, i, "Transpose") || g->nodes[i].n_inputs < 1) continue;
        int y = g->nodes[i].inputs[0];
        int t1 = kn_opt_producer(c, y);
        if (!kn_opt_is(c, t1, "Transpose")) continue;
        int64_t p1[KILN_MAX_RANK], p2[KILN_MAX_RANK], p[KILN_MAX_RANK];
        int r1, r2;
        if (!get_perm(c, t1, p1, &r1) || !get_perm(c, i, p2, &r2) || r1 != r2) continue;
        bool identity = true;
        for (int k = 0; k < r1; k++) {
            p[k] = p1[p2[k]];
            identity &= p[k] == k;
        }
        int x = g->nodes[t1].inputs[0];
        if (identity) {
            if (!kn_opt_forward(c, g->nodes[i].outputs[0], x)) continue;
            kn_opt_kill(c, i);
            kn_opt_note(c, "Transpose pair cancelled");
        } else {
            KN_TRY(kn_opt_set_ints(c, i, "perm", p, r1));
            g->nodes[i].inputs[0] = x;
            kn_opt_note(c, "Transpose+Transpose");
        }
        KN_TRY(kn_opt_refresh(c));
    }
    return KILN_OK;
}

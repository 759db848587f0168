/* Gemm + activation into kiln.FusedGemm (Gemm's attributes, then the activation on the result),
 * and a kiln.FusedMatMul without activation + activation into one FusedMatMul. */
#include "opt/pass.h"

#include <string.h>

static const char *const gemm_attrs[] = {"alpha", "beta", "transA", "transB"};

kiln_status kn_pass_fuse_gemm_activation(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        bool gemm = kn_opt_is(c, i, "Gemm") && g->nodes[i].opset >= 7;
        bool fmm = kn_opt_is_in(c, i, "kiln", "FusedMatMul") && !*kn_attr_string(&g->nodes[i], "activation", "");
        if ((!gemm && !fmm) || g->nodes[i].n_outputs != 1) continue;
        int y = g->nodes[i].outputs[0];
        if (!kn_opt_is_float(c, y)) continue; /* 16-bit types when the target has the kernel */
        int nodes[1 + KN_OPT_ACT_MAX_NODES + KN_OPT_BOUNDS_MAX_NODES] = {i}, n_nodes = 1, last = y;
        kn_act_spec act;
        if (!kn_opt_match_activation(c, y, &act, &last, nodes, &n_nodes)) continue;
        /* a constant clamp after the activation, folded where the target applies it */
        const kn_act_spec plain = act;
        const int plain_last = last, plain_n = n_nodes;
        const int n_bounds = kn_opt_match_bounds(c, &act, &last, nodes, &n_nodes);
        int node = -1;
        for (int attempt = 0; attempt < 2 && node < 0; attempt++) {
            if (attempt == 1) {
                if (!n_bounds) break;
                act = plain, last = plain_last, n_nodes = plain_n; /* refused with the clamp: without it */
            }
            kn_opt_proto p;
            kn_proto_init(&p, "kiln", gemm ? "FusedGemm" : "FusedMatMul");
            int n_in = gemm ? 3 : 4;
            for (int k = 0; k < n_in; k++) kn_proto_in(&p, kn_opt_input(c, i, k));
            kn_proto_out(&p, last);
            if (gemm)
                for (size_t k = 0; k < sizeof gemm_attrs / sizeof gemm_attrs[0]; k++) kn_proto_copy_attr(&p, c, i, gemm_attrs[k]);
            kn_proto_act(&p, &act);
            KN_TRY(kn_opt_emit(c, &p, i, &node));
        }
        if (node < 0) continue;
        for (int k = 0; k < n_nodes; k++) kn_opt_kill(c, nodes[k]);
        kn_opt_note(c, gemm ? "Gemm+activation" : "FusedMatMul+activation");
        if (n_nodes > plain_n) kn_opt_note(c, "+clamp");
        KN_TRY(kn_opt_refresh(c));
    }
    return KILN_OK;
}

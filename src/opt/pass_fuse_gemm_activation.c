/* Gemm + activation into kiln.FusedGemm (Gemm's attributes, then the activation on the result),
 * and a kiln.FusedMatMul without activation + activation into one FusedMatMul. */
#include "opt/pass.h"

#include <string.h>

static const char *const gemm_attrs[] = {"alpha", "beta", "transA", "transB"};

struct gemm_build {
    const kn_opt_ctx *c;
    int node;
    bool gemm; /* a Gemm (else a FusedMatMul without activation) */
};

static void build_fused_gemm(kn_opt_proto *p, const void *arg) {
    const struct gemm_build *b = arg;
    kn_proto_init(p, "kiln", b->gemm ? "FusedGemm" : "FusedMatMul");
    for (int k = 0; k < (b->gemm ? 3 : 4); k++) kn_proto_in(p, kn_opt_input(b->c, b->node, k));
    if (b->gemm)
        for (size_t k = 0; k < sizeof gemm_attrs / sizeof gemm_attrs[0]; k++) kn_proto_copy_attr(p, b->c, b->node, gemm_attrs[k]);
}

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
        struct gemm_build build = {c, i, gemm};
        int node;
        bool clamped;
        KN_TRY(kn_opt_emit_activated(c, i, build_fused_gemm, &build, &act, &last, nodes, &n_nodes, &node, &clamped));
        if (node < 0) continue;
        for (int k = 0; k < n_nodes; k++) kn_opt_kill(c, nodes[k]);
        kn_opt_note(c, gemm ? "Gemm+activation" : "FusedMatMul+activation");
        if (clamped) kn_opt_note(c, "+clamp");
        KN_TRY(kn_opt_refresh(c));
    }
    return KILN_OK;
}

/* Conv + bias + residual Add + activation into kiln.FusedConv: Y = act(Conv(X, W, B) + Z).
 *
 * The residual is taken only when the Add's other input has exactly the Conv output's shape (no
 * broadcasting: with group > 1 or a per-channel addend a broadcast Add is not a residual, the
 * known failure of another runtime), and the Conv output is read by nothing else. The activation
 * follows the Add (ResNet's act(conv + x)), or the Conv directly. */
#include "opt/pass.h"

static const char *const conv_attrs[] = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"};

struct conv_build {
    const kn_opt_ctx *c;
    int conv, residual;
};

static void build_fused_conv(kn_opt_proto *p, const void *arg) {
    const struct conv_build *b = arg;
    kn_proto_init(p, "kiln", "FusedConv");
    for (int k = 0; k < 3; k++) kn_proto_in(p, kn_opt_input(b->c, b->conv, k));
    kn_proto_in(p, b->residual);
    for (size_t k = 0; k < sizeof conv_attrs / sizeof conv_attrs[0]; k++) kn_proto_copy_attr(p, b->c, b->conv, conv_attrs[k]);
}

kiln_status kn_pass_fuse_conv(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!kn_opt_is(c, i, "Conv") || g->nodes[i].n_outputs != 1) continue;
        int y = g->nodes[i].outputs[0];
        if (!kn_opt_is_float(c, y)) continue; /* 16-bit types when the target has the kernel */
        /* the Conv, the residual Add, the activation, the clamps after it */
        int nodes[2 + KN_OPT_ACT_MAX_NODES + KN_OPT_BOUNDS_MAX_NODES] = {i}, n_nodes = 1;
        int last = y, z = -1;
        /* residual */
        int add = kn_opt_only_consumer(c, y);
        if (kn_opt_is(c, add, "Add")) {
            int other = kn_opt_other_input(c, add, y);
            const kn_type *ty = &g->values[y].type;
            if (other >= 0 && g->values[other].type.dtype == ty->dtype &&
                kn_opt_same_shape(&g->values[other].type, ty) &&
                kn_opt_same_shape(&g->values[g->nodes[add].outputs[0]].type, ty)) {
                z = other;
                last = g->nodes[add].outputs[0];
                nodes[n_nodes++] = add;
            }
        }
        kn_act_spec act = {KN_ACT_NONE, 0, 0};
        int after = last;
        if (kn_opt_match_activation(c, last, &act, &after, nodes, &n_nodes)) last = after;
        if (z < 0 && act.act == KN_ACT_NONE) continue;
        struct conv_build build = {c, i, z};
        int node;
        bool clamped;
        KN_TRY(kn_opt_emit_activated(c, i, build_fused_conv, &build, &act, &last, nodes, &n_nodes, &node, &clamped));
        if (node < 0) continue;
        for (int k = 0; k < n_nodes; k++) kn_opt_kill(c, nodes[k]);
        if (z >= 0 && act.act != KN_ACT_NONE) kn_opt_note(c, "Conv+Add+activation");
        else if (z >= 0) kn_opt_note(c, "Conv+Add");
        else kn_opt_note(c, "Conv+activation");
        if (clamped) kn_opt_note(c, "+clamp");
        KN_TRY(kn_opt_refresh(c));
    }
    return KILN_OK;
}

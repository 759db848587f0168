/* Conv + bias + residual Add + activation into kiln.FusedConv: Y = act(Conv(X, W, B) + Z).
 *
 * The residual is taken only when the Add's other input has exactly the Conv output's shape (no
 * broadcasting: with group > 1 or a per-channel addend a broadcast Add is not a residual, the
 * known failure of another runtime), and the Conv output is read by nothing else. The activation
 * follows the Add (ResNet's act(conv + x)), or the Conv directly. */
#include "opt/pass.h"

static const char *const conv_attrs[] = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"};

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
            kn_proto_init(&p, "kiln", "FusedConv");
            for (int k = 0; k < 3; k++) kn_proto_in(&p, kn_opt_input(c, i, k));
            kn_proto_in(&p, z);
            kn_proto_out(&p, last);
            for (size_t k = 0; k < sizeof conv_attrs / sizeof conv_attrs[0]; k++) kn_proto_copy_attr(&p, c, i, conv_attrs[k]);
            kn_proto_act(&p, &act);
            KN_TRY(kn_opt_emit(c, &p, i, &node));
        }
        if (node < 0) continue;
        for (int k = 0; k < n_nodes; k++) kn_opt_kill(c, nodes[k]);
        if (z >= 0 && act.act != KN_ACT_NONE) kn_opt_note(c, "Conv+Add+activation");
        else if (z >= 0) kn_opt_note(c, "Conv+Add");
        else kn_opt_note(c, "Conv+activation");
        if (n_nodes > plain_n) kn_opt_note(c, "+clamp");
        KN_TRY(kn_opt_refresh(c));
    }
    return KILN_OK;
}

/* Level 1: a zero Pad before a convolution becomes the convolution's own padding.
 *
 * Exporters write explicit padding where the framework's convolution could not hold it (TensorFlow's
 * SAME padding at stride 2, Keras' ZeroPadding2D, PyTorch's F.pad / ZeroPad2d): a Pad of the
 * spatial axes with the value 0, then a Conv. Padding with zeros is what a Conv's pads attribute
 * does, so pads add up: Conv(Pad(x, p), pads q) = Conv(x, pads p + q), exactly, and the padded copy
 * of the activation (a pass over it, and its memory) goes.
 *
 * Taken: Pad in mode "constant" with the value 0 (absent, or a constant 0), constant pads (and
 * axes, opset 18) that are all >= 0 and 0 on the batch and channel axes; its output read only by
 * a Conv as input X, not pinned; the Conv's auto_pad NOTSET. */
#include "opt/pass.h"

#include <string.h>

#define FOLD_PAD_MAX_RANK 8

/* The Pad's pads per axis, begin and end (rank values each); false when not a foldable zero pad. */
static bool zero_pads(const kn_opt_ctx *c, int node, int rank, int64_t *begin, int64_t *end) {
    const kn_node *n = &c->g->nodes[node];
    if (rank < 3 || rank > FOLD_PAD_MAX_RANK || n->n_outputs != 1) return false;
    if (strcmp(kn_attr_string(n, "mode", "constant"), "constant")) return false;
    for (int d = 0; d < rank; d++) begin[d] = end[d] = 0;
    if (n->opset < 11) {
        int cnt = 0;
        const int64_t *p = kn_attr_ints(n, "pads", &cnt);
        if (cnt != 2 * rank || kn_attr_float(n, "value", 0.0f) != 0.0f) return false;
        for (int d = 0; d < rank; d++) begin[d] = p[d], end[d] = p[rank + d];
    } else {
        const kn_tensor *p = kn_opt_const(c, kn_opt_input(c, node, 1));
        int value = kn_opt_input(c, node, 2), axes_v = kn_opt_input(c, node, 3);
        double v = 0;
        if (!p || p->rank != 1 || (value >= 0 && (!kn_opt_scalar(c, value, &v) || v != 0.0))) return false;
        int axes[FOLD_PAD_MAX_RANK], n_axes = rank;
        for (int d = 0; d < rank; d++) axes[d] = d;
        if (axes_v >= 0) {
            const kn_tensor *a = kn_opt_const(c, axes_v);
            if (!a || a->rank != 1 || kn_tensor_count(a) > rank) return false;
            n_axes = (int)kn_tensor_count(a);
            for (int k = 0; k < n_axes; k++) {
                int64_t ax = kn_tensor_get_i64(a, k);
                if (ax < 0) ax += rank;
                if (ax < 0 || ax >= rank) return false;
                axes[k] = (int)ax;
            }
        }
        if (kn_tensor_count(p) != 2 * n_axes) return false;
        for (int k = 0; k < n_axes; k++) {
            begin[axes[k]] += kn_tensor_get_i64(p, k);
            end[axes[k]] += kn_tensor_get_i64(p, n_axes + k);
        }
    }
    for (int d = 0; d < rank; d++)
        if (begin[d] < 0 || end[d] < 0 || (d < 2 && (begin[d] || end[d]))) return false;
    return true;
}

kiln_status kn_pass_fold_pad(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!kn_opt_is(c, i, "Pad")) continue;
        const int x = kn_opt_input(c, i, 0), y = g->nodes[i].outputs[0];
        const int conv = kn_opt_only_consumer(c, y);
        if (x < 0 || conv < 0 || !kn_opt_is(c, conv, "Conv") || kn_opt_input(c, conv, 0) != y || kn_opt_pinned(c, y))
            continue;
        const kn_node *cn = &g->nodes[conv];
        if (strcmp(kn_attr_string(cn, "auto_pad", "NOTSET"), "NOTSET")) continue;
        const int rank = g->values[x].type.rank;
        int64_t begin[FOLD_PAD_MAX_RANK], end[FOLD_PAD_MAX_RANK];
        if (g->values[x].type.kind != KN_TYPE_TENSOR || !kn_dtype_is_float(g->values[x].type.dtype) ||
            !zero_pads(c, i, rank, begin, end))
            continue;
        const int sp = rank - 2;
        int cnt = 0;
        const int64_t *old = kn_attr_ints(cn, "pads", &cnt);
        if (old && cnt != 2 * sp) continue;
        int64_t pads[2 * FOLD_PAD_MAX_RANK];
        for (int d = 0; d < sp; d++) {
            pads[d] = begin[d + 2] + (old ? old[d] : 0);
            pads[sp + d] = end[d + 2] + (old ? old[sp + d] : 0);
        }
        KN_TRY(kn_opt_set_ints(c, conv, "pads", pads, 2 * sp));
        g->nodes[conv].inputs[0] = x;
        kn_opt_kill(c, i);
        kn_opt_note(c, "Pad+Conv");
        KN_TRY(kn_opt_refresh(c));
    }
    return KILN_OK;
}

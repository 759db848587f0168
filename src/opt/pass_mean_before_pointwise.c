/* A mean over spatial axes of a pointwise convolution is the pointwise convolution of the mean:
 * a 1x1 convolution (unit strides, no pads, one group) applies the same affine map W x + b at every
 * position, and the mean of W x_t + b over positions t is W mean(x_t) + b. So
 *
 *     ReduceMean(Conv1x1(X, W, B), spatial axes)  ->  Conv1x1(ReduceMean(X, those axes), W, B)
 *
 * (with a Squeeze of those axes when the ReduceMean dropped them): the convolution then runs on
 * one position instead of all of them. Classifier heads end this way (field_conv1d_gemm's 1x1
 * Conv1d over 128 steps before the mean over time). Exact in real arithmetic; in floating point the
 * sums are taken in another order, as with every folding. */
#include "opt/pass.h"

#include <string.h>

/* Whether node is an ai.onnx Conv that is pointwise: constant weights [M, C, 1, ...], one group,
 * no pads, unit strides. */
static bool pointwise_conv(const kn_opt_ctx *c, int node) {
    if (!kn_opt_is(c, node, "Conv")) return false;
    const kn_node *n = &c->g->nodes[node];
    const kn_tensor *w = kn_opt_const(c, kn_opt_input(c, node, 1));
    int b = kn_opt_input(c, node, 2);
    if (!w || w->rank < 3 || (b >= 0 && !kn_opt_const(c, b)) || kn_attr_int(n, "group", 1) != 1) return false;
    for (int d = 2; d < w->rank; d++)
        if (w->dims[d] != 1) return false;
    return kn_opt_conv_unpadded_unit_stride(n);
}

/* A new value of type t with the given axes set to 1. */
static int value_with_ones(kn_opt_ctx *c, const char *base, const kn_type *t, const int64_t *axes, int n) {
    kn_type u = *t;
    for (int i = 0; i < n; i++) {
        u.dims[axes[i]].value = 1;
        u.dims[axes[i]].symbol = NULL;
    }
    return kn_opt_new_value(c, base, &u);
}

/* An int64 constant of n values (for axes given as inputs). */
static int axes_const(kn_opt_ctx *c, const int64_t *axes, int n) {
    kn_tensor *t = NULL;
    int64_t len = n;
    if (kn_tensor_new(KILN_DTYPE_INT64, 1, &len, &t) != KILN_OK) return -1;
    memcpy(t->data, axes, sizeof(int64_t) * (size_t)n);
    return kn_opt_new_const(c, "axes", t);
}

/* Emits the node, or kills the ones emitted before it (in done[0..*n)) and reports not formed. */
static kiln_status emit_or_undo(kn_opt_ctx *c, const kn_opt_proto *p, int name_from, int *done, int *n, bool *ok) {
    int node;
    KN_TRY(kn_opt_emit(c, p, name_from, &node));
    if (node >= 0) {
        done[(*n)++] = node;
        return KILN_OK;
    }
    for (int i = 0; i < *n; i++) kn_opt_kill(c, done[i]);
    *ok = false;
    return KILN_OK;
}

kiln_status kn_pass_mean_before_pointwise(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    for (int r = 0; r < g->n_nodes; r++) {
        if (!kn_opt_is(c, r, "ReduceMean") || g->nodes[r].n_outputs != 1 || g->nodes[r].outputs[0] < 0) continue;
        int y = g->nodes[r].inputs[0], conv = kn_opt_producer(c, y);
        if (conv < 0 || kn_opt_only_consumer(c, y) != r || !pointwise_conv(c, conv)) continue;
        int x = g->nodes[conv].inputs[0];
        const kn_type *yt = &g->values[y].type, *xt = &g->values[x].type;
        if (yt->rank < 3 || xt->rank != yt->rank) continue;
        int64_t axes[KILN_MAX_RANK];
        int na = 0;
        if (!kn_opt_reduce_axes(c, r, axes, KILN_MAX_RANK, &na) || na == 0) continue;
        bool spatial = true;
        for (int i = 0; i < na; i++) {
            if (axes[i] < 0) axes[i] += yt->rank;
            spatial &= axes[i] >= 2 && axes[i] < yt->rank;
        }
        if (!spatial) continue;
        bool keep = kn_attr_int(&g->nodes[r], "keepdims", 1) != 0;
        int out = g->nodes[r].outputs[0];
        bool axes_input = kn_model_opset(c->model, "") >= 18, squeeze_input = kn_model_opset(c->model, "") >= 13;
        int mean = value_with_ones(c, g->values[x].name, xt, axes, na);
        int conv_out = keep ? out : value_with_ones(c, g->values[y].name, yt, axes, na);
        int ax = axes_input || (!keep && squeeze_input) ? axes_const(c, axes, na) : -1;
        if (mean < 0 || conv_out < 0 || ((axes_input || (!keep && squeeze_input)) && ax < 0)) return KN_OOM();

        int done[3], n_done = 0;
        bool ok = true;
        kn_opt_proto p;
        kn_proto_init(&p, "", "ReduceMean");
        kn_proto_in(&p, x);
        if (axes_input) kn_proto_in(&p, ax);
        else kn_proto_ints(&p, "axes", axes, na);
        kn_proto_int(&p, "keepdims", 1);
        kn_proto_out(&p, mean);
        KN_TRY(emit_or_undo(c, &p, r, done, &n_done, &ok));
        if (ok) {
            kn_proto_init(&p, "", "Conv");
            kn_proto_in(&p, mean);
            for (int k = 1; k < g->nodes[conv].n_inputs; k++) kn_proto_in(&p, g->nodes[conv].inputs[k]);
            kn_proto_out(&p, conv_out);
            static const char *const attrs[] = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"};
            for (size_t a = 0; a < sizeof attrs / sizeof attrs[0]; a++) kn_proto_copy_attr(&p, c, conv, attrs[a]);
            KN_TRY(emit_or_undo(c, &p, conv, done, &n_done, &ok));
        }
        if (ok && !keep) {
            kn_proto_init(&p, "", "Squeeze");
            kn_proto_in(&p, conv_out);
            if (squeeze_input) kn_proto_in(&p, ax);
            else kn_proto_ints(&p, "axes", axes, na);
            kn_proto_out(&p, out);
            KN_TRY(emit_or_undo(c, &p, r, done, &n_done, &ok));
        }
        if (!ok) continue;
        kn_opt_kill(c, r);
        kn_opt_kill(c, conv);
        kn_opt_note(c, "mean moved before a pointwise Conv");
        KN_TRY(kn_opt_refresh(c));
    }
    return KILN_OK;
}

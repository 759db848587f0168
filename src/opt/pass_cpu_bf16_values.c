/* Level 3, the CPU provider with precision=bf16 on AMX: a value between two convolutions is kept
 * in bfloat16.
 *
 * Under precision=bf16 every convolution rounds its input to bf16 (round to nearest even) before
 * its products read it, and a Relu or Clip commutes with that rounding. So a FusedConv output
 * whose only readers are such convolutions (in a ResNet bottleneck: the first convolution's
 * output, read only by the second, and the second's, read only by the third) can be stored in
 * bf16 by its producer, after its bias and activation, with the same results, and half the bytes
 * written and read; the block outputs, which a residual Add reads in fp32, stay fp32. OpenVINO
 * keeps its activations in bf16 throughout.
 *
 * What it marks: a live NCHW FusedConv (with or without a residual: its output is rounded after the
 * residual and activation, as its readers would round it), whose activation is none, Relu or Clip,
 * with constant 4-D float weights of 16 or more output channels, whose float output is not pinned
 * and is read only as input X of NCHW FusedConvs of group 1 with constant 4-D float weights of 16
 * or more input and output channels (the shapes whose products run on AMX's tiles in bf16,
 * src/backend/cpu/conv.c); the producer gets y_type = [16] (its output becomes bfloat16 when
 * types are inferred again). The CPU kernels read and write such values as they are on AMX
 * (conv_amx.c, sgemm_bf16.c) and convert them on any other route, so the mark is never wrong, only
 * slower there. A plain Conv reading such a value (a ResNet stage's downsample, nothing fused into it)
 * is first made a FusedConv without activation when every reader of the value could then read it in
 * bf16 (so the stage's last block output is kept in bf16 too; KILN_CPU_BF16_PLAIN=0: not).
 * KILN_CPU_BF16_VALUES=0 turns the pass off.
 *
 * With the provider option activations=half the block outputs are kept in bf16 too: a FusedConv
 * with a residual may be marked, and a reader may read the value as its residual Z (not also as
 * X). That is not exact (the residual is added as the rounded value, where fp32 added the exact
 * one), as OpenVINO's bf16 does; hence an option, as on CUDA. Where the values are kept channel-blocked
 * (below) plain bf16 keeps the block outputs in bf16 too: see kn_pass_cpu_bf16_values. */
#include "opt/pass.h"

#include "backend/cpu/conv_amx_blocked.h"
#include "backend/cpu/pool_blocked.h"
#include "backend/cpu/sgemm_bf16.h"

#include <stdlib.h>
#include <string.h>

static bool nchw(const kn_node *n) {
    bool nhwc = true;
    return kn_fused_conv_layout(n, &nhwc) && !nhwc;
}

/* input 1 of node i: constant float weights [M, C, kh, kw] with M >= 16 and C * kh * kw >= 16 */
static bool conv_weights(const kn_opt_ctx *c, int i, int64_t *C) {
    const int w = kn_opt_input(c, i, 1);
    const kn_tensor *t = w >= 0 ? kn_opt_const(c, w) : NULL;
    if (!t || t->dtype != KILN_DTYPE_FLOAT || t->rank != 4 || t->dims[0] < 16) return false;
    *C = t->dims[1];
    return t->dims[1] * t->dims[2] * t->dims[3] >= 16;
}

static bool group_one(const kn_node *n) { return kn_attr_int(n, "group", 1) == 1; }

/* node r reads v as its X only, as a convolution whose products run in bf16 on AMX; with
 * residuals (activations=half), or as its residual Z only */
static bool bf16_reader(const kn_opt_ctx *c, int r, int v, bool residuals) {
    const kn_node *n = &c->g->nodes[r];
    int64_t C = 0;
    if (!kn_opt_is_in(c, r, "kiln", "FusedConv") || !nchw(n) || !group_one(n) || !conv_weights(c, r, &C) || C < 16 ||
        n->n_outputs < 1)
        return false;
    const bool as_x = kn_opt_input(c, r, 0) == v, as_z = residuals && kn_opt_input(c, r, 3) == v;
    if (as_x == as_z) return false; /* neither, or both */
    for (int k = 1; k < n->n_inputs; k++)
        if (n->inputs[k] == v && !(k == 3 && as_z)) return false;
    const kn_type *y = &c->g->values[n->outputs[0]].type;
    return y->rank == 4 && y->dims[2].value > 0 && y->dims[3].value > 0 && y->dims[2].value * y->dims[3].value >= 16;
}

static bool bf16_writer(const kn_opt_ctx *c, int i, bool residuals) {
    const kn_node *n = &c->g->nodes[i];
    int64_t C = 0;
    if (!kn_opt_is_in(c, i, "kiln", "FusedConv") || !nchw(n) || !group_one(n) || kn_node_attr(n, "y_type") ||
        n->n_outputs != 1 || kn_opt_n_inputs(c, i) > 4 || !conv_weights(c, i, &C))
        return false;
    (void)residuals;
    kn_act_spec a;
    char why[128];
    if (!kn_act_from_node(n, &a, why, sizeof why) || a.bounded ||
        (a.act != KN_ACT_NONE && a.act != KN_ACT_RELU && a.act != KN_ACT_CLIP))
        return false;
    const int x = kn_opt_input(c, i, 0), v = n->outputs[0];
    if (x < 0 || v < 0) return false;
    const kiln_dtype xt = c->g->values[x].type.dtype;
    const kn_type *y = &c->g->values[v].type;
    return (xt == KILN_DTYPE_FLOAT || xt == KILN_DTYPE_BFLOAT16) && y->kind == KN_TYPE_TENSOR &&
           y->dtype == KILN_DTYPE_FLOAT && y->rank == 4 && !kn_opt_pinned(c, v);
}

/* A plain Conv (no bias Add or activation to fuse: a ResNet's downsample, whose output is a
 * residual) that could read a bf16 X as a FusedConv: 2-D, group 1, constant float weights of 16+
 * input and output channels, an output plane of 16+ */
static bool plain_reader(const kn_opt_ctx *c, int i) {
    const kn_node *n = &c->g->nodes[i];
    int64_t C = 0;
    if (!kn_opt_is(c, i, "Conv") || n->n_outputs != 1 || !group_one(n) || !conv_weights(c, i, &C) || C < 16) return false;
    const int x = kn_opt_input(c, i, 0), y = n->outputs[0];
    if (x < 0 || y < 0 || !kn_opt_is_f32(c, x) || !kn_opt_is_f32(c, y)) return false;
    const kn_type *t = &c->g->values[y].type;
    return t->rank == 4 && t->dims[2].value > 0 && t->dims[3].value > 0 && t->dims[2].value * t->dims[3].value >= 16;
}

/* v (value the node r reads) read by a MaxPool whose output is read only by bf16 readers (or plain
 * Convs made so): the max of bf16-rounded values is the rounded max, so a bf16 input gives the
 * readers what they would round anyway (a ResNet stem's output, read by its MaxPool). The pool's
 * output becomes bf16 with its input when types are inferred again. */
static bool pool_through(const kn_opt_ctx *c, int r, int v, bool residuals) {
    const kn_node *n = &c->g->nodes[r];
    const char *e = getenv("KILN_CPU_BF16_POOL");
    if (e && !strcmp(e, "0")) return false;
    if (!kn_opt_is(c, r, "MaxPool") || n->n_outputs != 1 || kn_opt_n_inputs(c, r) != 1 || kn_opt_input(c, r, 0) != v)
        return false;
    const int o = n->outputs[0];
    if (o < 0 || !kn_opt_is_f32(c, o) || c->g->values[o].type.rank != 4 || kn_opt_pinned(c, o) ||
        c->cons_start[o + 1] == c->cons_start[o])
        return false;
    for (int k = c->cons_start[o]; k < c->cons_start[o + 1]; k++) {
        const int rn = c->cons[k];
        if (!bf16_reader(c, rn, o, residuals) &&
            !(plain_reader(c, rn) && kn_opt_input(c, rn, 1) != o && kn_opt_input(c, rn, 2) != o))
            return false;
    }
    return true;
}

/* Such a Conv reading the output of a FusedConv that may be marked, as a kiln.FusedConv without
 * activation (the same computation, which the CPU's FusedConv kernel runs on a bf16 X): else the
 * value it reads (a ResNet stage's last block output, read by the next block's first convolution
 * and this downsample) would stay fp32 for it */
static kiln_status fuse_plain_readers(kn_opt_ctx *c, bool residuals, bool *changed) {
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!plain_reader(c, i)) continue;
        const int v = kn_opt_input(c, i, 0), p = kn_opt_producer(c, v);
        if (p < 0) continue;
        if (!bf16_writer(c, p, residuals)) {
            /* or the output of a MaxPool over such a FusedConv's output, read only by it */
            const int u = kn_opt_input(c, p, 0), q = u >= 0 ? kn_opt_producer(c, u) : -1;
            if (q < 0 || !bf16_writer(c, q, residuals) || kn_opt_only_consumer(c, u) != p ||
                !pool_through(c, p, u, residuals))
                continue;
        }
        /* (only where every reader of the value would then take it in bf16) */
        bool all = true;
        for (int r = c->cons_start[v]; r < c->cons_start[v + 1] && all; r++) {
            const int rn = c->cons[r];
            all = bf16_reader(c, rn, v, residuals) ||
                  (plain_reader(c, rn) && kn_opt_input(c, rn, 1) != v && kn_opt_input(c, rn, 2) != v);
        }
        if (!all) continue;
        kn_opt_proto pr;
        kn_proto_init(&pr, "kiln", "FusedConv");
        for (int k = 0; k < 3; k++) kn_proto_in(&pr, kn_opt_input(c, i, k));
        kn_proto_out(&pr, g->nodes[i].outputs[0]);
        static const char *const attrs[] = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"};
        for (size_t k = 0; k < sizeof attrs / sizeof attrs[0]; k++) kn_proto_copy_attr(&pr, c, i, attrs[k]);
        const kn_act_spec none = {KN_ACT_NONE, 0, 0};
        kn_proto_act(&pr, &none);
        int node;
        KN_TRY(kn_opt_emit(c, &pr, i, &node));
        if (node < 0) continue;
        kn_opt_kill(c, i);
        kn_opt_note(c, "Conv as FusedConv reading a bf16 value");
        KN_TRY(kn_opt_refresh(c));
        g = c->g;
        *changed = true;
    }
    return KILN_OK;
}

/* node r runs on the blocked AMX kernel (conv_amx_blocked.h) when its operands are blocked: a 2-D
 * NCHW FusedConv of group 1 with constant float weights whose input and output channels are
 * multiples of 32, strides up to 4, activation none, Relu or Clip (the kernel's clamp) */
static bool blocked_conv(const kn_opt_ctx *c, int r) {
    const kn_node *n = &c->g->nodes[r];
    if (!kn_opt_is_in(c, r, "kiln", "FusedConv") || !nchw(n) || !group_one(n) || n->n_outputs != 1 ||
        kn_opt_n_inputs(c, r) > 4)
        return false;
    const int w = kn_opt_input(c, r, 1);
    const kn_tensor *t = w >= 0 ? kn_opt_const(c, w) : NULL;
    if (!t || t->dtype != KILN_DTYPE_FLOAT || t->rank != 4 || t->dims[0] % KN_BLOCKED_CHANNELS ||
        t->dims[1] % KN_BLOCKED_CHANNELS || t->dims[0] < 1 || t->dims[1] < 1)
        return false;
    int ns = 0;
    const int64_t *st = kn_attr_ints(n, "strides", &ns);
    for (int k = 0; st && k < ns; k++)
        if (st[k] < 1 || st[k] > 4) return false;
    kn_act_spec a;
    char why[128];
    if (!kn_act_from_node(n, &a, why, sizeof why) || a.bounded ||
        (a.act != KN_ACT_NONE && a.act != KN_ACT_RELU && a.act != KN_ACT_CLIP))
        return false;
    const int y = n->outputs[0];
    return y >= 0 && c->g->values[y].type.rank == 4;
}

/* whether value v (an input of node r, or -1) is absent or bfloat16 */
static bool bf16_or_none(const kn_opt_ctx *c, int v) {
    return v < 0 || c->g->values[v].type.dtype == KILN_DTYPE_BFLOAT16;
}

/* node r writes bfloat16 (y_type [16]) */
static bool writes_bf16(const kn_node *n) {
    int k = 0;
    const int64_t *t = kn_attr_ints(n, "y_type", &k);
    return t && k == 1 && t[0] == KILN_DTYPE_BFLOAT16;
}

/* whether values are kept channel-blocked here: the blocked kernel runs on this CPU, not turned off */
static bool blocking_on(void) {
    const char *e = getenv("KILN_CPU_BF16_BLOCKED");
    return !(e && !strcmp(e, "0")) &&
           kn_amx_blocked_suits(&(kn_amx_conv_shape){1, 32, 32, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1});
}

/* node i a MaxPool of a bf16 value (a ResNet stem's output) into a bf16 value that only such
 * convolutions read, as X (the first bottleneck's 1x1 and its downsample): it writes it blocked
 * itself (pool_blocked.h), so they read it in place rather than each transposing it. Its input
 * stays NCHW: the stem (3 input channels) is not a blocked convolution. */
static bool blocked_pool(const kn_opt_ctx *c, int i, int64_t min_plane) {
    const kn_node *n = &c->g->nodes[i];
    if (!kn_opt_is(c, i, "MaxPool") || n->n_outputs != 1 || kn_opt_n_inputs(c, i) != 1 || kn_node_attr(n, "y_blocked"))
        return false;
    const int x = kn_opt_input(c, i, 0), v = n->outputs[0];
    if (x < 0 || v < 0 || kn_opt_pinned(c, v) || c->cons_start[v + 1] == c->cons_start[v]) return false;
    const kn_type *xt = &c->g->values[x].type, *vt = &c->g->values[v].type;
    if (xt->dtype != KILN_DTYPE_BFLOAT16 || vt->dtype != KILN_DTYPE_BFLOAT16 || xt->rank != 4 || vt->rank != 4)
        return false;
    for (int d = 0; d < 4; d++)
        if (xt->dims[d].value <= 0) return false;
    if (xt->dims[1].value % KN_BLOCKED_CHANNELS || vt->dims[2].value * vt->dims[3].value < min_plane) return false;
    kn_window w;
    char why[256];
    const int64_t in[2] = {xt->dims[2].value, xt->dims[3].value};
    if (kn_window_plan(n, KN_WINDOW_POOL, 2, in, NULL, &w, why, sizeof why) || !kn_max_pool_blocked_takes(&w) ||
        w.out[0] != vt->dims[2].value || w.out[1] != vt->dims[3].value)
        return false;
    for (int k = c->cons_start[v]; k < c->cons_start[v + 1]; k++) {
        const int r = c->cons[k];
        const kn_node *rn = &c->g->nodes[r];
        if (!blocked_conv(c, r) || !writes_bf16(rn) || !bf16_or_none(c, kn_opt_input(c, r, 3))) return false;
        for (int q = 0; q < rn->n_inputs; q++)
            if (rn->inputs[q] == v && q != 0) return false;
    }
    return true;
}

/* The values kept in bf16 between such convolutions, also kept channel-blocked (conv_amx_blocked.h):
 * the producer writes it blocked (y_blocked), every reader reads it blocked as its X (x_blocked) or its
 * residual (z_blocked). So the 1x1 convolutions read their input with no packing and the 3x3 ones
 * copy whole 64-byte rows. Only where the producer's X and every reader's Y and other residual are
 * bf16: the fp32 NCHW reads and writes around the kernel, transposed 32 x 32 positions at a time,
 * made those layers 1.2-3x slower than the GEMM's whole rows. So with the block outputs in bf16 only
 * (residuals: activations=half, or plain bf16 where blocking is on): with them fp32, the few values
 * left (a stage's first bottleneck) made ResNet-50 bf16 1.00-1.06 of its time unblocked. On planes of any size: with the kernel's tile loads past L1
 * (conv_amx_blocked.c), ResNet-50 bf16h ran 0.951 of its time with the 14x14 and 7x7 stages left
 * unblocked (node_ab, 6 rounds, 2026-12-06; before those loads 1.014).
 * KILN_CPU_BF16_BLOCKED=0: not; =large: planes of 28x28 and more only. */
static kiln_status mark_blocked(kn_opt_ctx *c, bool residuals) {
    const char *e = getenv("KILN_CPU_BF16_BLOCKED");
    if (!residuals || !blocking_on()) return KILN_OK;
    const int64_t min_plane = e && !strcmp(e, "large") ? 784 : 1; /* (large: to measure against) */
    kn_graph *g = c->g;
    bool changed = false;
    for (int i = 0; i < g->n_nodes; i++) {
        int nt = 0;
        const int64_t *yt = kn_attr_ints(&g->nodes[i], "y_type", &nt);
        if (!yt || nt != 1 || yt[0] != KILN_DTYPE_BFLOAT16 || kn_node_attr(&g->nodes[i], "y_blocked") ||
            !blocked_conv(c, i))
            continue;
        const int v = g->nodes[i].outputs[0];
        const kn_type *vt = &g->values[v].type;
        bool ok = !kn_opt_pinned(c, v) && c->cons_start[v + 1] > c->cons_start[v] &&
                  vt->dims[2].value * vt->dims[3].value >= min_plane && bf16_or_none(c, kn_opt_input(c, i, 0)) &&
                  bf16_or_none(c, kn_opt_input(c, i, 3));
        for (int k = c->cons_start[v]; k < c->cons_start[v + 1] && ok; k++) {
            const int r = c->cons[k];
            const kn_node *n = &g->nodes[r];
            ok = blocked_conv(c, r);
            int as_x = 0, as_z = 0;
            for (int q = 0; q < n->n_inputs && ok; q++)
                if (n->inputs[q] == v) {
                    if (q == 0) as_x = 1;
                    else if (q == 3) as_z = 1;
                    else ok = false;
                }
            ok = ok && as_x + as_z == 1 && writes_bf16(n) && bf16_or_none(c, kn_opt_input(c, r, as_x ? 3 : 0));
        }
        if (!ok) continue;
        const int64_t one = 1;
        KN_TRY(kn_opt_set_ints(c, i, "y_blocked", &one, 1));
        for (int k = c->cons_start[v]; k < c->cons_start[v + 1]; k++) {
            const int r = c->cons[k];
            KN_TRY(kn_opt_set_ints(c, r, kn_opt_input(c, r, 0) == v ? "x_blocked" : "z_blocked", &one, 1));
        }
        kn_opt_note(c, "bfloat16 value kept channel-blocked");
        changed = true;
    }
    for (int i = 0; i < g->n_nodes; i++)
        if (blocked_pool(c, i, min_plane)) {
            const int64_t one = 1;
            const int v = g->nodes[i].outputs[0];
            KN_TRY(kn_opt_set_ints(c, i, "y_blocked", &one, 1));
            for (int k = c->cons_start[v]; k < c->cons_start[v + 1]; k++) KN_TRY(kn_opt_set_ints(c, c->cons[k], "x_blocked", &one, 1));
            kn_opt_note(c, "MaxPool output kept channel-blocked");
            changed = true;
        }
    return changed ? kn_opt_refresh(c) : KILN_OK;
}

kiln_status kn_pass_cpu_bf16_values(kn_opt_ctx *c) {
    kn_backend_config cfg;
    const char *provider = kn_opt_first_provider(c, &cfg);
    const char *e = getenv("KILN_CPU_BF16_VALUES");
    if (!provider || strcmp(provider, "cpu") || cfg.precision != KN_PRECISION_BF16 || (e && !strcmp(e, "0")))
        return KILN_OK;
    /* (where the products do not run on AMX's tiles, the readers would convert the values back) */
    if (!kn_bf16_cpu_usable() || !kn_bgemm_amx()) return KILN_OK;
    /* activations=half: the block outputs too (written with a residual, read as one), which is not
     * exact: a residual Add then reads a rounded value. Plain bf16 does the same where the values
     * are kept channel-blocked (AMX, KILN_CPU_BF16_BLOCKED not 0): there the fp32 block outputs
     * are what the blocked kernel cannot take (ResNet-50 plain bf16 1.19 of OpenVINO bf16, 1.03
     * so), and the rounding is of the class the bf16 products already give (ResNet-50 relative L2
     * against ONNX Runtime fp32 4.8e-3 either way, OpenVINO bf16 4.7e-3;
     * bench/results/cpu-bf16-resnet-2026-12-06c-h72.md). activations=fp32 given explicitly (or
     * KILN_CPU_BF16_BLOCKED=0) keeps plain bf16 exact (this pass's results bit for bit those
     * without it). */
    const bool residuals = cfg.half_activations || (blocking_on() && !cfg.fp32_activations);
    bool changed = false;
    const char *pe = getenv("KILN_CPU_BF16_PLAIN");
    if (!(pe && !strcmp(pe, "0"))) KN_TRY(fuse_plain_readers(c, residuals, &changed));
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!bf16_writer(c, i, residuals)) continue;
        const int v = g->nodes[i].outputs[0];
        bool ok = c->cons_start[v + 1] > c->cons_start[v];
        for (int r = c->cons_start[v]; r < c->cons_start[v + 1] && ok; r++)
            ok = bf16_reader(c, c->cons[r], v, residuals) || pool_through(c, c->cons[r], v, residuals);
        if (!ok) continue;
        const int64_t t = KILN_DTYPE_BFLOAT16;
        KN_TRY(kn_opt_set_ints(c, i, "y_type", &t, 1));
        kn_opt_note(c, "convolution output kept in bfloat16");
        changed = true;
    }
    if (changed) KN_TRY(kn_opt_refresh(c));
    return mark_blocked(c, residuals);
}

/* Level 3: channels-last (NHWC) regions of 2-D convolutions, where the provider runs them faster.
 *
 * cuDNN's tensor-core convolutions work channels last; fed channels-first tensors in fp16/bf16
 * they transpose around every convolution. A region of convolutions and the operators between them
 * that do not care about the order of dims (elementwise operators, chains of them, global average
 * pooling) or that have a channels-last form (max and average pooling over windows) can instead keep
 * its activations channels last: the convolutions become kiln.FusedConv with layout NHWC (their
 * weights permuted to [M, kh, kw, C/g] here, once, so the compiled file holds them so), the global
 * pooling a ReduceMean over the spatial axes, MaxPool and AveragePool kiln's forms with layout NHWC
 * (ResNet-50's stem MaxPool sat between two Transposes), the elementwise operators stay
 * as they are with their constant operands permuted once, here, the operators that name their axes
 * (Concat, Split, Slice, Resize: a detector's C2f blocks and its neck, where YOLOv8s had 57
 * Transposes around 63 convolutions) with those axes renumbered, and a Transpose enters the region
 * where a channels-first value flows in and leaves it where one flows out (a graph output, or a
 * reader outside the region). Graph inputs and outputs keep their layout.
 *
 * Where it is faster depends on the device, the precision and the batch. On an H200
 * (bench/results/layout-cuda-2026-12-01.md: efficientnet_b0 and mobilenet_v3_small, kiln's own
 * kernels, steady state, NHWC/NCHW time) channels last was, in float16: 1.08-1.16 at batch 1,
 * 0.85-1.03 at 2, 0.78-0.89 at 4, 0.57-0.59 at 8, 0.38 at 32; in float32 and tf32: 0.60-0.77 at 8,
 * 0.42-0.74 at 32 (batch 4 and below not measured). Since FusedConv's bias and ReLU run in cuDNN's
 * convolution call (cuda_conv.c), networks of dense convolutions gained most at batch 1 in float16
 * (bench/results/gpu-peers-2026-12-02-views.md: ResNet-50 0.94 -> 0.42 ms, a YOLOv8s 1.60 -> 1.20 ms).
 * So auto (the default) forms a region around the convolutions of a device provider with a known
 * batch of at least 4 in float16 or bfloat16 (lower_precision ran first: activations=half), or of
 * any batch there when the graph has no grouped convolution, or of at least 8 in float32; a
 * symbolic batch stays channels first. KILN_LAYOUT=nhwc forms the regions wherever the target runs them (the CPU's NHWC FusedConv
 * is a reference that permutes around its convolution: for tests), =nchw never. */
#include "opt/pass.h"
#include "util/log.h"

#include <stdlib.h>
#include <string.h>

enum { ROLE_NONE, ROLE_CONV, ROLE_POOL, ROLE_WINDOW_POOL, ROLE_ELEMENTWISE, ROLE_AXES };
#define MAX_INPUTS 8  /* a node with more stays channels first */
#define MAX_OUTPUTS 8 /* a Split with more stays channels first */

static const char *const elementwise_ops[] = {
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu", "Selu", "Celu", "Softplus", "Softsign",
    "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Floor", "Ceil", "Round", "Sign", "Mish", "ThresholdedRelu",
    "Clip", "Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu", "Identity",
};

/* KILN_LAYOUT: nhwc (1), nchw (-1), auto (0). */
static int layout_mode(void) {
    const char *m = getenv("KILN_LAYOUT");
    if (m && !strcmp(m, "nhwc")) return 1;
    if (m && !strcmp(m, "nchw")) return -1;
    return 0;
}

/* The smallest batches auto puts channels last (see the top of the file). */
#define AUTO_MIN_BATCH_HALF 4
#define AUTO_MIN_BATCH_FLOAT 8

/* Whether the pass looks for regions at all: KILN_LAYOUT=nhwc, or auto with a device provider first. */
static bool layout_wanted(const kn_opt_ctx *c, int mode) {
    if (mode) return mode > 0;
    kn_backend_config cfg;
    const char *provider = kn_opt_first_provider(c, &cfg);
    const kn_backend_ops *b = provider ? kn_backend_find(provider) : NULL;
    return b && b->device != KN_DEVICE_HOST;
}

/* auto: a convolution whose input x has a known batch where channels last was measured faster;
 * dense: the graph has no grouped (e.g. depthwise) convolution. */
static bool auto_conv_faster(const kn_type *x, bool dense) {
    int64_t batch = x->dims[0].value;
    if (x->dtype == KILN_DTYPE_FLOAT16 || x->dtype == KILN_DTYPE_BFLOAT16)
        return batch >= AUTO_MIN_BATCH_HALF || (batch >= 1 && dense);
    return x->dtype == KILN_DTYPE_FLOAT && batch >= AUTO_MIN_BATCH_FLOAT;
}

/* Whether no convolution of the graph has groups (depthwise networks were slower channels last at
 * batch 1-2 in half precision; dense ones faster). */
static bool graph_dense(const kn_opt_ctx *c) {
    for (int i = 0; i < c->g->n_nodes; i++) {
        const kn_node *n = &c->g->nodes[i];
        if (!n->dead && (kn_opt_is(c, i, "Conv") || kn_opt_is_in(c, i, "kiln", "FusedConv")) &&
            kn_attr_int(n, "group", 1) != 1)
            return false;
    }
    return true;
}

static bool rank4_float(const kn_type *t) {
    return t->kind == KN_TYPE_TENSOR && t->rank == 4 && kn_dtype_is_float(t->dtype);
}

/* A value every layout reads the same: a scalar, or all dims 1. */
static bool layout_free(const kn_type *t) {
    if (t->kind != KN_TYPE_TENSOR || t->rank < 0) return false;
    for (int d = 0; d < t->rank; d++)
        if (t->dims[d].value != 1) return false;
    return true;
}

static const int TO_LAST[4] = {0, 2, 3, 1}, TO_FIRST[4] = {0, 3, 1, 2};

static kn_type channels_last_type(const kn_type *t) {
    kn_type o = *t;
    for (int d = 0; d < 4; d++) o.dims[d] = t->dims[TO_LAST[d]];
    return o;
}

/* Axis a (negative from the end) of a 4-D channels-first value, numbered in its channels-last
 * form; -1 when out of range. */
static int64_t axis_channels_last(int64_t a) {
    if (a < 0) a += 4;
    return a >= 0 && a < 4 ? TO_FIRST[a] : -1;
}

/* The integer constant behind value v (int64 or int32), at most `cap` values into out; its count,
 * or -1 when v is not such a constant. */
static int const_ints(const kn_opt_ctx *c, int v, int64_t *out, int cap) {
    const kn_tensor *t = v >= 0 ? kn_opt_const(c, v) : NULL;
    if (!t || t->rank > 1 || (t->dtype != KILN_DTYPE_INT64 && t->dtype != KILN_DTYPE_INT32)) return -1;
    int64_t n = kn_tensor_count(t);
    if (n > cap) return -1;
    for (int64_t k = 0; k < n; k++)
        out[k] = t->dtype == KILN_DTYPE_INT64 ? ((const int64_t *)t->data)[k] : ((const int32_t *)t->data)[k];
    return (int)n;
}

/* Whether optional input k of node i is absent or an empty constant (a Resize's unused roi). */
static bool input_absent(const kn_opt_ctx *c, int i, int k) {
    const kn_node *n = &c->g->nodes[i];
    int v = k < n->n_inputs ? n->inputs[k] : -1;
    if (v < 0) return true;
    const kn_tensor *t = kn_opt_const(c, v);
    return t && kn_tensor_count(t) == 0;
}

/* Whether an operator that names axes can run channels last, its axes renumbered: Concat and
 * Split (the axis attribute), Slice (constant axes, or as many as starts has when absent) and
 * Resize (constant roi, scales and sizes, over all four axes). */
static bool axes_op_fits(const kn_opt_ctx *c, int i) {
    const kn_graph *g = c->g;
    const kn_node *n = &g->nodes[i];
    int64_t tmp[8];
    if (kn_opt_is(c, i, "Concat")) {
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] < 0 || !rank4_float(&g->values[n->inputs[k]].type)) return false;
        return n->n_inputs > 0 && axis_channels_last(kn_attr_int(n, "axis", 1)) >= 0;
    }
    if (kn_opt_is(c, i, "Split"))
        return axis_channels_last(kn_attr_int(n, "axis", 0)) >= 0;
    if (kn_opt_is(c, i, "Slice")) {
        if (n->opset < 10 || n->n_inputs < 3) return false; /* the axes as inputs since opset 10 */
        if (n->n_inputs > 3 && n->inputs[3] >= 0) {
            int na = const_ints(c, n->inputs[3], tmp, 8);
            if (na < 0) return false;
            for (int k = 0; k < na; k++)
                if (axis_channels_last(tmp[k]) < 0) return false;
            return true;
        }
        const kn_type *st = n->inputs[1] >= 0 ? &g->values[n->inputs[1]].type : NULL;
        return st && st->kind == KN_TYPE_TENSOR && (st->dtype == KILN_DTYPE_INT64 || st->dtype == KILN_DTYPE_INT32) &&
               st->rank == 1 && st->dims[0].value >= 1 && st->dims[0].value <= 4;
    }
    if (kn_opt_is(c, i, "Resize")) {
        if (n->opset < 11 || kn_node_attr(n, "axes")) return false;
        for (int k = 1; k <= 3; k++) {
            if (input_absent(c, i, k)) continue;
            int cnt = const_ints(c, n->inputs[k], tmp, 8);
            const kn_tensor *t = kn_opt_const(c, n->inputs[k]);
            if (k == 1 && (!t || t->rank != 1 || kn_tensor_count(t) != 8)) return false; /* roi: starts, ends */
            if (k == 2 && (!t || t->rank != 1 || kn_tensor_count(t) != 4)) return false; /* scales */
            if (k == 3 && cnt != 4) return false;                                          /* sizes */
        }
        return true;
    }
    return false;
}

/* Whether the target runs node i as kiln's `op_type` with its attributes and layout NHWC, its
 * inputs of the given (channels-last) types. */
static bool nhwc_form_supported(const kn_opt_ctx *c, int i, const char *op_type, const kn_type *const *in, int n_in) {
    const kn_node *n = &c->g->nodes[i];
    kn_attr attrs[KN_PROTO_MAX_ATTRS + 1];
    if (n->n_attrs > KN_PROTO_MAX_ATTRS) return false;
    int na = 0;
    for (int a = 0; a < n->n_attrs; a++)
        if (strcmp(n->attrs[a].name, "layout")) attrs[na++] = n->attrs[a];
    memset(&attrs[na], 0, sizeof attrs[na]);
    attrs[na].name = "layout";
    attrs[na].type = KN_ATTR_STRING;
    attrs[na].s = "NHWC";
    attrs[na].s_len = 4;
    na++;
    kn_node trial = *n;
    trial.domain = "kiln";
    trial.op_type = op_type;
    trial.opset = 1;
    trial.attrs = attrs;
    trial.n_attrs = na;
    trial.schema = kn_op_find("kiln", op_type, 1, NULL);
    if (!trial.schema) return false;
    char why[256];
    if (kn_opt_target_supports(c, &trial, in, n_in, i, why, sizeof why)) return true;
    kn_log(KILN_LOG_DEBUG, "optimiser: node '%s' stays channels first: %s", n->name, why);
    return false;
}

/* Whether the target runs this Conv or FusedConv as a channels-last kiln.FusedConv. */
static bool conv_target_supports(const kn_opt_ctx *c, int i) {
    const kn_node *n = &c->g->nodes[i];
    if (n->n_inputs > 4) return false;
    kn_type types[4];
    const kn_type *in[4] = {NULL, NULL, NULL, NULL};
    for (int k = 0; k < n->n_inputs; k++) {
        int v = n->inputs[k];
        if (v < 0) continue;
        types[k] = c->g->values[v].type;
        if (k != 2) types[k] = channels_last_type(&types[k]); /* X, W, Z */
        in[k] = &types[k];
    }
    return nhwc_form_supported(c, i, "FusedConv", in, n->n_inputs);
}

/* Whether the target runs MaxPool / AveragePool node i as kiln's channels-last form. */
static bool window_pool_target_supports(const kn_opt_ctx *c, int i) {
    kn_type x = channels_last_type(&c->g->values[c->g->nodes[i].inputs[0]].type);
    const kn_type *in[1] = {&x};
    return nhwc_form_supported(c, i, c->g->nodes[i].op_type, in, 1);
}

/* What node i would be in a channels-last region, or ROLE_NONE. */
static int role_of(const kn_opt_ctx *c, int i, int mode, bool dense) {
    const kn_graph *g = c->g;
    const kn_node *n = &g->nodes[i];
    if (n->dead || n->n_outputs < 1 || n->n_outputs > MAX_OUTPUTS || n->n_inputs > MAX_INPUTS) return ROLE_NONE;
    if (n->n_outputs > 1 && !kn_opt_is(c, i, "Split")) return ROLE_NONE;
    for (int o = 0; o < n->n_outputs; o++)
        if (n->outputs[o] < 0 || !rank4_float(&g->values[n->outputs[o]].type)) return ROLE_NONE;
    int x = n->n_inputs > 0 ? n->inputs[0] : -1;
    bool conv = kn_opt_is(c, i, "Conv") || kn_opt_is_in(c, i, "kiln", "FusedConv");
    if (conv) {
        bool nhwc;
        if (x < 0 || !rank4_float(&g->values[x].type) || kn_opt_const(c, x)) return ROLE_NONE;
        if (mode == 0 && !auto_conv_faster(&g->values[x].type, dense)) return ROLE_NONE;
        if (!kn_fused_conv_layout(n, &nhwc) || nhwc) return ROLE_NONE;
        int z = n->n_inputs > 3 ? n->inputs[3] : -1, w = n->n_inputs > 1 ? n->inputs[1] : -1;
        if (z >= 0 && (!rank4_float(&g->values[z].type) || kn_opt_const(c, z))) return ROLE_NONE;
        const kn_tensor *wt = w >= 0 ? kn_opt_const(c, w) : NULL;
        if (!wt || wt->rank != 4) return ROLE_NONE; /* the weights are permuted here, once */
        return conv_target_supports(c, i) ? ROLE_CONV : ROLE_NONE;
    }
    if (kn_opt_is(c, i, "GlobalAveragePool"))
        return x >= 0 && rank4_float(&g->values[x].type) && !kn_opt_const(c, x) ? ROLE_POOL : ROLE_NONE;
    /* (n_outputs 1: MaxPool's Indices, numbered channels first, are not asked for) */
    if (kn_opt_is(c, i, "MaxPool") || kn_opt_is(c, i, "AveragePool"))
        return x >= 0 && n->n_inputs == 1 && rank4_float(&g->values[x].type) && !kn_opt_const(c, x) &&
                       window_pool_target_supports(c, i)
                   ? ROLE_WINDOW_POOL
                   : ROLE_NONE;
    if (kn_opt_is(c, i, "Concat") || kn_opt_is(c, i, "Split") || kn_opt_is(c, i, "Slice") || kn_opt_is(c, i, "Resize"))
        return x >= 0 && rank4_float(&g->values[x].type) && !kn_opt_const(c, x) && axes_op_fits(c, i) ? ROLE_AXES
                                                                                                   : ROLE_NONE;
    bool elementwise = kn_opt_is_in(c, i, "kiln", "FusedElementwise");
    for (size_t k = 0; !elementwise && k < sizeof elementwise_ops / sizeof elementwise_ops[0]; k++)
        elementwise = kn_opt_is(c, i, elementwise_ops[k]);
    if (!elementwise) return ROLE_NONE;
    /* every operand: a 4-D value (channels last in the region), a constant (permuted), or a scalar */
    int rank4 = 0;
    for (int k = 0; k < n->n_inputs; k++) {
        int v = n->inputs[k];
        if (v < 0) continue;
        const kn_type *t = &g->values[v].type;
        if (layout_free(t)) continue;
        if (kn_opt_const(c, v)) {
            if (t->rank > 4) return ROLE_NONE;
            continue;
        }
        if (!rank4_float(t)) return ROLE_NONE;
        rank4++;
    }
    return rank4 ? ROLE_ELEMENTWISE : ROLE_NONE;
}

static int root_of(int *parent, int i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
}

/* The constant v right-aligned to rank 4 and permuted channels last, as a new constant. */
static int permuted_const(kn_opt_ctx *c, int v) {
    kn_tensor as4 = *kn_opt_const(c, v); /* the same data, its dims right-aligned to rank 4 */
    for (int d = 0; d < 4; d++) as4.dims[d] = d < 4 - as4.rank ? 1 : kn_opt_const(c, v)->dims[d - (4 - as4.rank)];
    as4.rank = 4;
    kn_tensor *t = NULL;
    if (kn_tensor_permuted(&as4, TO_LAST, &t) != KILN_OK) {
        kn_clear_error();
        return -1;
    }
    return kn_opt_new_const(c, c->g->values[v].name, t);
}

static kiln_status transpose_node(kn_opt_ctx *c, int from, int to, const int *perm, int name_from) {
    kn_opt_proto p;
    kn_proto_init(&p, "", "Transpose");
    kn_proto_in(&p, from);
    kn_proto_out(&p, to);
    int64_t pm[4] = {perm[0], perm[1], perm[2], perm[3]};
    kn_proto_ints(&p, "perm", pm, 4);
    int node;
    KN_TRY(kn_opt_emit(c, &p, name_from, &node));
    if (node < 0) return kn_error(KILN_ERR_INTERNAL, "could not add a Transpose of '%s'", c->g->values[from].name);
    return KILN_OK;
}

/* A new 1-D integer constant (int64 or int32) of n values. */
static int ints_const(kn_opt_ctx *c, const char *base, kiln_dtype dt, const int64_t *v, int64_t n) {
    kn_tensor *t = NULL;
    if (kn_tensor_new(dt, 1, &n, &t) != KILN_OK) return -1;
    for (int64_t k = 0; k < n; k++) {
        if (dt == KILN_DTYPE_INT32) ((int32_t *)t->data)[k] = (int32_t)v[k];
        else ((int64_t *)t->data)[k] = v[k];
    }
    return kn_opt_new_const(c, base, t);
}

/* Node i replaced by the node p describes (its channels-last form, writing the region's values). */
static kiln_status replace_node(kn_opt_ctx *c, int i, const kn_opt_proto *p) {
    kn_opt_kill(c, i);
    int node;
    KN_TRY(kn_opt_emit(c, p, i, &node));
    if (node < 0)
        return kn_error(KILN_ERR_INTERNAL, "node '%s': its channels-last form (%s) was refused", c->g->nodes[i].name,
                        p->op_type);
    return KILN_OK;
}

/* The channels-last form of a Conv or FusedConv (inputs already channels last). */
static kiln_status conv_node(kn_opt_ctx *c, int i, const int *in, int n_in, int out) {
    static const char *const copied[] = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides",
                                         "activation", "activation_params", "activation_bounds"};
    kn_opt_proto p;
    kn_proto_init(&p, "kiln", "FusedConv");
    for (int k = 0; k < n_in; k++) kn_proto_in(&p, in[k]);
    kn_proto_out(&p, out);
    for (size_t a = 0; a < sizeof copied / sizeof copied[0]; a++) kn_proto_copy_attr(&p, c, i, copied[a]);
    kn_proto_string(&p, "layout", "NHWC");
    return replace_node(c, i, &p);
}

/* GlobalAveragePool channels last: ReduceMean over the spatial axes 1 and 2, dims kept. */
static kiln_status pool_node(kn_opt_ctx *c, int i, int x, int out) {
    static const int64_t axes[2] = {1, 2};
    kn_opt_proto p;
    kn_proto_init(&p, "", "ReduceMean");
    kn_proto_in(&p, x);
    if (kn_model_opset(c->model, "") >= 18) {
        int a = ints_const(c, "axes", KILN_DTYPE_INT64, axes, 2);
        if (a < 0) return KN_OOM();
        kn_proto_in(&p, a);
    } else {
        kn_proto_ints(&p, "axes", axes, 2);
    }
    kn_proto_int(&p, "keepdims", 1);
    kn_proto_out(&p, out);
    return replace_node(c, i, &p);
}

/* MaxPool / AveragePool channels last: kiln's form with layout NHWC, the attributes as they are. */
static kiln_status window_pool_node(kn_opt_ctx *c, int i, int x, int out) {
    static const char *const copied[] = {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape",
                                         "pads", "strides"};
    kn_opt_proto p;
    kn_proto_init(&p, "kiln", c->g->nodes[i].op_type);
    kn_proto_in(&p, x);
    kn_proto_out(&p, out);
    for (size_t a = 0; a < sizeof copied / sizeof copied[0]; a++) kn_proto_copy_attr(&p, c, i, copied[a]);
    kn_proto_string(&p, "layout", "NHWC");
    return replace_node(c, i, &p);
}

/* A 1-D constant of 4 * parts values (a Resize's scales or sizes, parts 1; its roi, parts 2), each
 * group of four permuted channels last, as a new constant of the same type. */
static int permuted_axes_const(kn_opt_ctx *c, int v, int parts) {
    const kn_tensor *t = kn_opt_const(c, v);
    kn_tensor *o = NULL;
    if (kn_tensor_new(t->dtype, t->rank, t->dims, &o) != KILN_OK) return -1;
    const size_t es = kiln_dtype_size(t->dtype);
    for (int part = 0; part < parts; part++)
        for (int d = 0; d < 4; d++)
            memcpy((char *)o->data + (size_t)(part * 4 + d) * es, (const char *)t->data + (size_t)(part * 4 + TO_LAST[d]) * es, es);
    return kn_opt_new_const(c, c->g->values[v].name, o);
}

/* The channels-last form of a Concat, Split, Slice or Resize (the data inputs already channels
 * last in `in`; the outputs already the region's values): its axes renumbered. */
static kiln_status axes_node(kn_opt_ctx *c, int i, int *in, int n_in) {
    const kn_node *n = &c->g->nodes[i];
    if (kn_opt_is(c, i, "Resize")) { /* roi, scales and sizes permuted; the node as it is */
        for (int k = 1; k <= 3 && k < n_in; k++) {
            if (input_absent(c, i, k)) continue;
            in[k] = permuted_axes_const(c, n->inputs[k], k == 1 ? 2 : 1);
            if (in[k] < 0) return KN_OOM();
        }
        for (int k = 0; k < n_in; k++) c->g->nodes[i].inputs[k] = in[k];
        return KILN_OK;
    }
    const bool slice = kn_opt_is(c, i, "Slice");
    kn_opt_proto p;
    kn_proto_init(&p, "", n->op_type);
    for (int a = 0; a < n->n_attrs; a++)
        if (strcmp(n->attrs[a].name, "axis")) kn_proto_copy_attr(&p, c, i, n->attrs[a].name);
    if (slice) {
        int64_t axes[8];
        const bool given = n_in > 3 && n->inputs[3] >= 0; /* else the first len(starts) axes */
        const int na = given ? const_ints(c, n->inputs[3], axes, 8) : (int)c->g->values[n->inputs[1]].type.dims[0].value;
        for (int k = 0; k < na; k++) axes[k] = axis_channels_last(given ? axes[k] : k);
        /* in the type of starts and ends (Slice takes one integer type for all four) */
        int av = ints_const(c, "axes", c->g->values[n->inputs[1]].type.dtype, axes, na);
        if (av < 0) return KN_OOM();
        kn_proto_in(&p, in[0]);
        kn_proto_in(&p, in[1]);
        kn_proto_in(&p, in[2]);
        kn_proto_in(&p, av);
        if (n_in > 4) kn_proto_in(&p, in[4]);
    } else {
        for (int k = 0; k < n_in; k++) kn_proto_in(&p, in[k]);
        kn_proto_int(&p, "axis", axis_channels_last(kn_attr_int(n, "axis", kn_opt_is(c, i, "Concat") ? 1 : 0)));
    }
    for (int o = 0; o < n->n_outputs; o++) kn_proto_out(&p, n->outputs[o]);
    return replace_node(c, i, &p);
}

kiln_status kn_pass_layout_nhwc(kn_opt_ctx *c) {
    const int mode = layout_mode();
    if (!layout_wanted(c, mode)) return KILN_OK;
    kn_graph *g = c->g;
    const int n_nodes = g->n_nodes, n_values = g->n_values;
    int *parent = malloc(sizeof(int) * (size_t)n_nodes), *role = calloc((size_t)n_nodes, sizeof(int));
    int *last_of = malloc(sizeof(int) * (size_t)n_values);
    bool *anchor = calloc((size_t)n_nodes, sizeof(bool)), *leaves = calloc((size_t)n_values, sizeof(bool));
    kiln_status st = KILN_OK;
    if (!parent || !role || !last_of || !anchor || !leaves) {
        st = KN_OOM();
        goto done;
    }
    const bool dense = graph_dense(c);
    for (int i = 0; i < n_nodes; i++) {
        parent[i] = i;
        role[i] = role_of(c, i, mode, dense);
        anchor[i] = role[i] == ROLE_CONV;
    }
    /* regions: producer and reader joined through 4-D values */
    for (int i = 0; i < n_nodes; i++) {
        if (!role[i]) continue;
        for (int k = 0; k < g->nodes[i].n_inputs; k++) {
            int v = g->nodes[i].inputs[k];
            if (v < 0 || !rank4_float(&g->values[v].type)) continue;
            int p = kn_opt_producer(c, v);
            if (p >= 0 && role[p]) parent[root_of(parent, p)] = root_of(parent, i);
        }
    }
    for (int i = 0; i < n_nodes; i++)
        if (anchor[i]) anchor[root_of(parent, i)] = true;
    for (int i = 0; i < n_nodes; i++)
        if (role[i] && !anchor[root_of(parent, i)]) role[i] = ROLE_NONE;

    /* each region output: a channels-last value in its place, and whether it leaves the region */
    for (int v = 0; v < n_values; v++) last_of[v] = -1;
    for (int i = 0; i < n_nodes && st == KILN_OK; i++) {
        if (!role[i]) continue;
        for (int o = 0; o < g->nodes[i].n_outputs && st == KILN_OK; o++) {
            int v = g->nodes[i].outputs[o];
            bool out = kn_opt_pinned(c, v);
            for (int r = c->cons_start[v]; r < c->cons_start[v + 1] && !out; r++) out = !role[c->cons[r]];
            leaves[v] = out;
            kn_type t = channels_last_type(&g->values[v].type);
            last_of[v] = kn_opt_new_value(c, g->values[v].name, &t);
            if (last_of[v] < 0) st = KN_OOM();
            else g->nodes[i].outputs[o] = last_of[v];
        }
    }
    /* inputs: the region's own values, permuted constants, a Transpose in; then the node itself */
    for (int i = 0; i < n_nodes && st == KILN_OK; i++) {
        if (!role[i]) continue;
        /* (g->nodes moves as nodes are added: read through the index) */
        int in[MAX_INPUTS], n_in = g->nodes[i].n_inputs;
        for (int k = 0; k < n_in && st == KILN_OK; k++) {
            int v = g->nodes[i].inputs[k];
            in[k] = v;
            /* channels last: every operand of an elementwise node, a convolution's X, W and Z, X */
            bool channels = role[i] == ROLE_ELEMENTWISE || k == 0 || (role[i] == ROLE_CONV && k != 2) ||
                            (role[i] == ROLE_AXES && kn_opt_is(c, i, "Concat"));
            if (v < 0 || v >= n_values || !channels) continue;
            /* a value every layout reads alike stays as it is, unless the region made it: its
             * producer now writes it under its channels-last name (and no Transpose back remakes
             * it when every reader is in the region) */
            if (layout_free(&g->values[v].type) && last_of[v] < 0) continue;
            if (last_of[v] < 0) {
                if (kn_opt_const(c, v)) {
                    last_of[v] = permuted_const(c, v);
                    if (last_of[v] < 0) st = KN_OOM();
                    else kn_opt_note(c, "constant permuted");
                } else {
                    kn_type t = channels_last_type(&g->values[v].type);
                    last_of[v] = kn_opt_new_value(c, g->values[v].name, &t);
                    if (last_of[v] < 0) st = KN_OOM();
                    else st = transpose_node(c, v, last_of[v], TO_LAST, i);
                    if (st == KILN_OK) kn_opt_note(c, "Transpose into the region");
                }
            }
            in[k] = last_of[v];
        }
        if (st != KILN_OK) break;
        int out = g->nodes[i].outputs[0];
        if (role[i] == ROLE_CONV) {
            st = conv_node(c, i, in, n_in, out);
            kn_opt_note(c, "convolution channels last");
        } else if (role[i] == ROLE_POOL) {
            st = pool_node(c, i, in[0], out);
            kn_opt_note(c, "pooling as ReduceMean");
        } else if (role[i] == ROLE_WINDOW_POOL) {
            st = window_pool_node(c, i, in[0], out);
            kn_opt_note(c, "pooling channels last");
        } else if (role[i] == ROLE_AXES) {
            st = axes_node(c, i, in, n_in);
            kn_opt_note(c, "axes renumbered channels last");
        } else {
            for (int k = 0; k < n_in; k++) g->nodes[i].inputs[k] = in[k];
            kn_opt_note(c, "elementwise node channels last");
        }
    }
    /* outputs that leave: a Transpose back makes the channels-first value under its own name */
    for (int v = 0; v < n_values && st == KILN_OK; v++) {
        if (!leaves[v] || last_of[v] < 0) continue;
        st = transpose_node(c, last_of[v], v, TO_FIRST, -1);
        if (st == KILN_OK) kn_opt_note(c, "Transpose out of the region");
    }
    if (st == KILN_OK) st = kn_opt_refresh(c);
done:
    free(parent);
    free(role);
    free(last_of);
    free(anchor);
    free(leaves);
    return st;
}

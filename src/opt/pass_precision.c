/* Level 3: half-precision activations, for a session whose first provider is a device provider
 * with precision=fp16|bf16 and activations=half.
 *
 * With precision fp16/bf16 alone, each matrix product and convolution converts its float32
 * operands to the half type when it runs (with a power-of-two scale per tensor, so tiny and huge
 * activations survive) and its result back (cuda_conv.c, cuda_linalg.c): every such node pays
 * two or three conversion kernels and the activations between them move as float32. On an H200
 * that made the zoo slower in fp16 than in fp32. With activations=half this pass moves the
 * conversion into the graph, as TensorRT's fp16 mode and ONNX Runtime's float16 conversion do:
 * the regions of operators that the provider runs in the half type, connected through float32
 * values and holding at least one matrix product or convolution, switch to the half type; their
 * constant inputs (weights, biases) are converted once, here, so the compiled file holds them
 * converted; a Cast enters each region where a float32 value flows in and leaves it where a value
 * flows out (a graph output, or a reader outside the region). Graph inputs and outputs keep their
 * types.
 *
 * Which operators join: those whose kernels take the half type with float accumulation inside
 * (matrix products, convolutions, attention, normalisations, reductions that average, pooling,
 * softmax), elementwise operators whose result cannot leave the half type's range on its own
 * (no Exp, Pow, Div, Reciprocal, ReduceSum: a float16 result above 65504 would be infinite), and
 * data movement. A node joins only when every float input and output is float32, its float
 * constants convert (float16: finite values within 65504, and no one-element constant, an
 * epsilon, flushed to zero), and the target supports it with the half types
 * (kn_opt_target_supports: the node stays where placement puts it).
 *
 * Why it is asked for, not implied by the precision: the activations inside a region are rounded
 * to the half type after each operator and have no scale, so a float16 activation above 65504
 * becomes infinite and one below 2^-24 becomes zero. The zoo's random-weight CNNs show the
 * second: their activations shrink block by block to outputs of 1e-9 and 1e-13, which float16
 * cannot hold, while trained networks keep theirs in range (the reason the other runtimes'
 * fp16 modes work as they do). bfloat16 has float32's range but 8 significant bits, rounded after
 * every operator: vit_tiny's output drifts to a relative L2 error of 1.1e-2 (7.5e-3 with float32
 * activations).
 *
 * Level 1, first: float16 models on the CPU run in float32 (pass raise_float16). kiln's CPU
 * kernels compute float16 tensors in float32 and round each result back, so a float16 model paid a
 * conversion in and out of every operator, and no fusion formed (the CPU's fused kernels take
 * float32): a float16 CRNN ran 2x slower than the same network in float32. The same region
 * machinery as above, in the other direction: the regions of ai.onnx operators on float16 values
 * that hold a matrix product, convolution, recurrence or normalisation switch to float32, their
 * float16 constants converted once, a Cast at each edge (graph inputs and outputs keep their
 * float16 types); a Cast to float16 inside a region becomes a Cast to float32 (so it goes). The
 * results are at least as close to the exact ones as float16 arithmetic, and differ from
 * per-operator rounding by float16's rounding: ONNX Runtime's CPU provider (Casts around its
 * float32 kernels, adjacent pairs removed) and OpenVINO (a float16 model's CPU precision is
 * float32) run such models the same way. */
#include "opt/pass.h"
#include "backend/backend.h"
#include "util/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LOWER_MAX_INPUTS 64 /* a Concat of more stays float32 */

typedef struct half_op {
    const char *domain, *op_type;
    bool compute; /* a matrix product or convolution: a region without one is not worth its Casts */
} half_op;

static const half_op half_ops[] = {
    {"", "Conv", true}, {"", "ConvTranspose", true}, {"", "MatMul", true}, {"", "Gemm", true},
    {"kiln", "FusedConv", true}, {"kiln", "FusedGemm", true}, {"kiln", "FusedMatMul", true},
    {"kiln", "Attention", true},
    {"", "Add", false}, {"", "Sub", false}, {"", "Mul", false}, {"", "Neg", false}, {"", "Abs", false},
    {"", "Max", false}, {"", "Min", false}, {"", "Relu", false}, {"", "LeakyRelu", false},
    {"", "Sigmoid", false}, {"", "Tanh", false}, {"", "HardSigmoid", false}, {"", "HardSwish", false},
    {"", "Clip", false}, {"", "Erf", false}, {"", "Gelu", false}, {"kiln", "Gelu", false},
    {"kiln", "FusedElementwise", false},
    {"", "Softmax", false}, {"", "LayerNormalization", false}, {"kiln", "LayerNormalization", false},
    {"kiln", "RMSNormalization", false}, {"", "MaxPool", false}, {"", "AveragePool", false},
    {"", "GlobalAveragePool", false}, {"", "GlobalMaxPool", false}, {"", "ReduceMean", false},
    {"", "ReduceMax", false},
    {"", "Reshape", false}, {"", "Flatten", false}, {"", "Squeeze", false}, {"", "Unsqueeze", false},
    {"", "Transpose", false}, {"", "Concat", false}, {"", "Split", false}, {"", "Slice", false},
    {"", "Gather", false}, {"", "Identity", false}, {"", "Expand", false}, {"", "Pad", false},
    {"", "Where", false}, /* selects (attention masks: Where(keep, 0, -inf)) */
};

static const half_op *find_half_op(const kn_node *n) {
    for (size_t i = 0; i < sizeof half_ops / sizeof half_ops[0]; i++)
        if (!strcmp(n->domain, half_ops[i].domain) && !strcmp(n->op_type, half_ops[i].op_type)) return &half_ops[i];
    return NULL;
}

/* Readers that look at a value's shape only: they read the half value as well as the float one. */
static bool shape_reader(const kn_node *n) {
    return !*n->domain && (!strcmp(n->op_type, "Shape") || !strcmp(n->op_type, "Size"));
}

/* Whether a float32 constant converts without harm: no finite value overflows, and a one-element
 * constant (an epsilon, a scale) does not flush to zero; a weight tensor's tiny elements may. */
static bool representable(const kn_tensor *t, kiln_dtype half) {
    const float *f = (const float *)t->data;
    const double max = half == KILN_DTYPE_FLOAT16 ? 65504.0 : 3.38e38;
    const double flushes = half == KILN_DTYPE_FLOAT16 ? 2.98e-8 : 4.6e-41; /* half the least subnormal */
    const int64_t n = kn_tensor_count(t);
    for (int64_t i = 0; i < n; i++) {
        double a = fabs((double)f[i]);
        if (!isfinite(a)) continue; /* infinities and NaN convert as they are */
        if (a > max || (n == 1 && a > 0 && a <= flushes)) return false;
    }
    return true;
}

/* A chain whose program can leave the half type's range by itself. */
static bool chain_may_overflow(const kn_node *n) {
    kn_chain_program prog;
    char why[128];
    if (!kn_chain_from_node(n, n->n_inputs, &prog, why, sizeof why)) return true;
    for (int s = 0; s < prog.n_steps; s++) {
        int op = prog.steps[s].op;
        if (op == KN_CHAIN_EXP || op == KN_CHAIN_POW || op == KN_CHAIN_DIV || op == KN_CHAIN_RECIPROCAL) return true;
    }
    return false;
}

/* The type checks common to both directions: every float input and output of node i is of type
 * `from` (with mixed, float inputs and outputs of other types are left as they are: a Cast's), its
 * constants of that type convert to `to` (float32 to a half type: representable()), and the
 * target runs the node with those inputs in `to`. */
static bool retypable(const kn_opt_ctx *c, int i, kiln_dtype from, kiln_dtype to, bool mixed) {
    const kn_graph *g = c->g;
    const kn_node *n = &g->nodes[i];
    if (n->n_inputs > LOWER_MAX_INPUTS) return false;
    kn_type types[LOWER_MAX_INPUTS];
    const kn_type *in[LOWER_MAX_INPUTS];
    int floats = 0;
    for (int k = 0; k < n->n_inputs; k++) {
        int v = n->inputs[k];
        in[k] = NULL;
        if (v < 0) continue;
        types[k] = g->values[v].type;
        in[k] = &types[k];
        if (types[k].kind != KN_TYPE_TENSOR) return false;
        if (types[k].dtype != from) {
            if (kn_dtype_is_float(types[k].dtype) && !mixed) return false; /* mixed: leave it as it is */
            continue;
        }
        const kn_tensor *t = kn_opt_const(c, v);
        if (t && from == KILN_DTYPE_FLOAT && !representable(t, to)) return false;
        types[k].dtype = to;
        floats++;
    }
    for (int k = 0; k < n->n_outputs; k++) {
        int v = n->outputs[k];
        if (v < 0) continue;
        const kn_type *t = &g->values[v].type;
        if (t->kind != KN_TYPE_TENSOR) return false;
        if (t->dtype == from) floats++;
        else if (kn_dtype_is_float(t->dtype) && !mixed) return false;
    }
    if (!floats) return false;
    char why[256];
    if (!kn_opt_target_supports(c, n, in, n->n_inputs, i, why, sizeof why)) {
        kn_log(KILN_LOG_DEBUG, "optimiser: node '%s' (%s) stays %s: %s", n->name, n->op_type, kiln_dtype_name(from),
               why);
        return false;
    }
    return true;
}

/* Whether node i may run in the half type; *compute says whether it anchors a region. */
static bool may_lower(const kn_opt_ctx *c, int i, kiln_dtype from, kiln_dtype half, bool *compute) {
    const kn_node *n = &c->g->nodes[i];
    const half_op *h = find_half_op(n);
    if (!h) return false;
    if (!strcmp(n->op_type, "LayerNormalization") && !*n->domain)
        for (int k = 1; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0) return false; /* Mean and InvStdDev stay float32 (stash_type) */
    if (!strcmp(n->domain, "kiln") && !strcmp(n->op_type, "FusedElementwise") && chain_may_overflow(n)) return false;
    if (!retypable(c, i, from, half, false)) return false;
    *compute = h->compute;
    return true;
}

/* ai.onnx operators whose float16 results depend on more than their inputs' types: they make their
 * type from an attribute (the generators, ConstantOfShape, EyeLike, the random ones) or another
 * input's (CastLike), or run subgraphs. */
static const char *const raise_never[] = {"Constant", "ConstantOfShape", "EyeLike", "RandomNormal",
                                          "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                                          "Bernoulli", "CastLike", "If", "Loop", "Scan"};
/* the operators that make a float32 region worth its Casts */
static const char *const raise_anchors[] = {"Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum", "LSTM", "GRU",
                                            "RNN", "Attention", "LayerNormalization", "GroupNormalization",
                                            "InstanceNormalization", "BatchNormalization", "Softmax", "LogSoftmax"};

static bool listed(const char *op, const char *const *list, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (!strcmp(op, list[k])) return true;
    return false;
}

/* Whether node i may run in float32 instead of float16. */
static bool may_raise(const kn_opt_ctx *c, int i, kiln_dtype from, kiln_dtype to, bool *compute) {
    const kn_node *n = &c->g->nodes[i];
    if (*n->domain || listed(n->op_type, raise_never, sizeof raise_never / sizeof raise_never[0])) return false;
    for (int a = 0; a < n->n_attrs; a++)
        if (n->attrs[a].type == KN_ATTR_GRAPH || n->attrs[a].type == KN_ATTR_GRAPHS) return false;
    /* a Cast joins from or to any type: to float16 it becomes a Cast to float32, from float16 it
     * reads float32 */
    const bool cast = !strcmp(n->op_type, "Cast");
    if (!retypable(c, i, from, to, cast)) return false;
    *compute = listed(n->op_type, raise_anchors, sizeof raise_anchors / sizeof raise_anchors[0]);
    return true;
}

/* ---- regions: union-find over the nodes that may change type ---- */

static int root_of(int *parent, int i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
}

static kiln_status cast_node(kn_opt_ctx *c, int from, int to, kiln_dtype dtype, int name_from) {
    kn_opt_proto p;
    kn_proto_init(&p, "", "Cast");
    kn_proto_in(&p, from);
    kn_proto_out(&p, to);
    kn_proto_int(&p, "to", dtype);
    int node;
    KN_TRY(kn_opt_emit(c, &p, name_from, &node));
    if (node < 0)
        return kn_error(KILN_ERR_INTERNAL, "could not add a Cast of '%s' to %s", c->g->values[from].name,
                        kiln_dtype_name(dtype));
    return KILN_OK;
}

/* A new value of v's shape in type `to`, named after v. */
static int retyped_value(kn_opt_ctx *c, int v, kiln_dtype to) {
    kn_type t = c->g->values[v].type;
    t.dtype = to;
    return kn_opt_new_value(c, c->g->values[v].name, &t);
}

/* A constant converted to type `to` (float32 to float16/bfloat16, or float16 to float32). */
static int converted_const(kn_opt_ctx *c, int v, kiln_dtype to) {
    const kn_tensor *src = kn_opt_const(c, v);
    kn_tensor *t = NULL;
    if (kn_tensor_new(to, src->rank, src->dims, &t) != KILN_OK) return -1;
    const int64_t n = kn_tensor_count(src);
    if (src->dtype == KILN_DTYPE_FLOAT16) {
        const uint16_t *h = (const uint16_t *)src->data;
        float *d = (float *)t->data;
        for (int64_t k = 0; k < n; k++) d[k] = kn_f16_to_f32(h[k]);
    } else {
        const float *f = (const float *)src->data;
        uint16_t *d = (uint16_t *)t->data;
        for (int64_t k = 0; k < n; k++) d[k] = to == KILN_DTYPE_FLOAT16 ? kn_f32_to_f16(f[k]) : kn_f32_to_bf16(f[k]);
    }
    return kn_opt_new_const(c, c->g->values[v].name, t);
}

/* Whether a Cast from `from` to `to` is known to the target. */
static bool cast_supported(const kn_opt_ctx *c, kiln_dtype from, kiln_dtype to) {
    kn_type src;
    kn_type_init(&src);
    src.kind = KN_TYPE_TENSOR;
    src.dtype = from;
    src.rank = 1;
    src.dims[0].value = 16;
    kn_attr attr = {.name = "to", .type = KN_ATTR_INT, .i = to};
    kn_node cast;
    memset(&cast, 0, sizeof cast);
    cast.name = "Cast";
    cast.op_type = "Cast";
    cast.domain = "";
    cast.opset = (int)kn_model_opset(c->model, "");
    cast.inputs = (int[]){-1};
    cast.n_inputs = 1;
    cast.attrs = &attr;
    cast.n_attrs = 1;
    cast.provider = -1;
    cast.schema = kn_op_find("", "Cast", cast.opset, NULL);
    if (!cast.schema) return false;
    const kn_type *in[1] = {&src};
    char why[256];
    return kn_opt_target_supports(c, &cast, in, 1, -1, why, sizeof why);
}

typedef bool (*may_join_fn)(const kn_opt_ctx *c, int i, kiln_dtype from, kiln_dtype to, bool *compute);

/* The regions of nodes that may_join admits, connected through values of type `from` and holding
 * an anchor, switch to type `to`: constants converted, a Cast at each way in and out. ok[i] says
 * which nodes switched (n_nodes of the graph as it was: the Casts added come after). */
static kiln_status retype_regions(kn_opt_ctx *c, kiln_dtype from, kiln_dtype to, may_join_fn may_join, bool *ok) {
    kn_graph *g = c->g;
    const int n_nodes = g->n_nodes, n_values = g->n_values;
    int *parent = malloc(sizeof(int) * (size_t)n_nodes);
    bool *anchor = calloc((size_t)n_nodes, sizeof(bool));
    int *to_of = malloc(sizeof(int) * (size_t)n_values);
    bool *leaves = calloc((size_t)n_values, sizeof(bool));
    kiln_status st = KILN_OK;
    if (!parent || !anchor || !to_of || !leaves) {
        st = KN_OOM();
        goto done;
    }
    for (int i = 0; i < n_nodes; i++) {
        parent[i] = i;
        bool compute = false;
        ok[i] = !g->nodes[i].dead && may_join(c, i, from, to, &compute);
        anchor[i] = compute;
    }
    /* join producer and reader through values of type `from` */
    for (int i = 0; i < n_nodes; i++) {
        if (!ok[i]) continue;
        for (int k = 0; k < g->nodes[i].n_inputs; k++) {
            int v = g->nodes[i].inputs[k];
            if (v < 0 || g->values[v].type.dtype != from) continue;
            int p = kn_opt_producer(c, v);
            if (p >= 0 && ok[p]) parent[root_of(parent, p)] = root_of(parent, i);
        }
    }
    for (int i = 0; i < n_nodes; i++)
        if (anchor[i]) anchor[root_of(parent, i)] = true;
    for (int i = 0; i < n_nodes; i++) ok[i] = ok[i] && anchor[root_of(parent, i)];

    /* each output of a region of type `from`: a value of type `to` in its place (made first, so
     * readers in the region find their producers' new values), and whether it leaves the region
     * (read outside it, or pinned; the consumer table is the pass's start's) */
    for (int v = 0; v < n_values; v++) to_of[v] = -1;
    for (int i = 0; i < n_nodes && st == KILN_OK; i++) {
        if (!ok[i]) continue;
        for (int k = 0; k < g->nodes[i].n_outputs; k++) {
            int v = g->nodes[i].outputs[k];
            if (v < 0 || g->values[v].type.dtype != from) continue;
            bool leaves_region = kn_opt_pinned(c, v);
            for (int r = c->cons_start[v]; r < c->cons_start[v + 1] && !leaves_region; r++)
                leaves_region = !ok[c->cons[r]] && !shape_reader(&g->nodes[c->cons[r]]);
            leaves[v] = leaves_region;
            int h = retyped_value(c, v, to);
            if (h < 0) {
                st = KN_OOM();
                break;
            }
            to_of[v] = h;
            g->nodes[i].outputs[k] = h;
        }
    }
    /* inputs: the region's own values, converted constants, or a Cast in */
    for (int i = 0; i < n_nodes && st == KILN_OK; i++) {
        if (!ok[i]) continue;
        for (int k = 0; k < g->nodes[i].n_inputs && st == KILN_OK; k++) {
            int v = g->nodes[i].inputs[k];
            if (v < 0 || v >= n_values || g->values[v].type.dtype != from) continue;
            if (to_of[v] < 0) {
                if (kn_opt_const(c, v)) {
                    to_of[v] = converted_const(c, v, to);
                    if (to_of[v] < 0) st = KN_OOM();
                    else kn_opt_note(c, "constant converted");
                } else {
                    to_of[v] = retyped_value(c, v, to);
                    if (to_of[v] < 0) st = KN_OOM();
                    else st = cast_node(c, v, to_of[v], to, i);
                    if (st == KILN_OK) kn_opt_note(c, "Cast into the region");
                }
            }
            if (st == KILN_OK) g->nodes[i].inputs[k] = to_of[v];
        }
    }
    /* outputs that leave: a Cast back produces the value in its own type under its own name;
     * shape readers read the new value */
    for (int v = 0; v < n_values && st == KILN_OK; v++) {
        int h = to_of[v];
        if (h < 0 || kn_opt_const(c, v) || g->values[v].producer < 0 || !ok[g->values[v].producer]) continue;
        for (int r = c->cons_start[v]; r < c->cons_start[v + 1]; r++) {
            kn_node *reader = &g->nodes[c->cons[r]];
            if (ok[c->cons[r]] || !shape_reader(reader)) continue;
            for (int k = 0; k < reader->n_inputs; k++)
                if (reader->inputs[k] == v) reader->inputs[k] = h;
        }
        if (!leaves[v]) continue;
        st = cast_node(c, h, v, from, g->values[v].producer);
        if (st == KILN_OK) kn_opt_note(c, "Cast out of the region");
    }
done:
    free(parent);
    free(anchor);
    free(to_of);
    free(leaves);
    return st;
}

kiln_status kn_pass_lower_precision(kn_opt_ctx *c) {
    kn_backend_config cfg;
    const char *provider = kn_opt_first_provider(c, &cfg);
    if (!cfg.half_activations || (cfg.precision != KN_PRECISION_FP16 && cfg.precision != KN_PRECISION_BF16)) return KILN_OK;
    const kn_backend_ops *b = provider ? kn_backend_find(provider) : NULL;
    if (!b || b->device == KN_DEVICE_HOST) return KILN_OK; /* the options mean something to device backends */
    kiln_dtype half = cfg.precision == KN_PRECISION_FP16 ? KILN_DTYPE_FLOAT16 : KILN_DTYPE_BFLOAT16;
    if (!cast_supported(c, KILN_DTYPE_FLOAT, half)) return KILN_OK;
    bool *ok = calloc((size_t)c->g->n_nodes, sizeof(bool));
    if (!ok) return KN_OOM();
    const int n_nodes = c->g->n_nodes;
    kiln_status st = retype_regions(c, KILN_DTYPE_FLOAT, half, may_lower, ok);
    for (int i = 0; i < n_nodes; i++)
        if (ok[i]) kn_opt_note(c, half == KILN_DTYPE_FLOAT16 ? "node in float16" : "node in bfloat16");
    free(ok);
    return st == KILN_OK ? kn_opt_refresh(c) : st;
}

kiln_status kn_pass_raise_float16(kn_opt_ctx *c) {
    if (c->g->parent) return KILN_OK; /* a body's values of the outer graph keep their types */
    kn_backend_config cfg;
    const char *provider = kn_opt_first_provider(c, &cfg);
    const kn_backend_ops *b = provider ? kn_backend_find(provider) : NULL;
    if (!b || b->device != KN_DEVICE_HOST) return KILN_OK; /* float16 is a device's own type */
    if (!cast_supported(c, KILN_DTYPE_FLOAT16, KILN_DTYPE_FLOAT)) return KILN_OK;
    kn_graph *g = c->g;
    bool *ok = calloc((size_t)g->n_nodes, sizeof(bool));
    if (!ok) return KN_OOM();
    const int n_nodes = g->n_nodes;
    kiln_status st = retype_regions(c, KILN_DTYPE_FLOAT16, KILN_DTYPE_FLOAT, may_raise, ok);
    if (st == KILN_OK) st = kn_opt_refresh(c);
    /* Casts inside: to float16 now means to float32, and a Cast to its input's own type goes */
    for (int i = 0; i < n_nodes && st == KILN_OK; i++) {
        if (!ok[i]) continue;
        kn_opt_note(c, "node in float32");
        kn_node *n = &g->nodes[i];
        if (strcmp(n->op_type, "Cast")) continue;
        for (int a = 0; a < n->n_attrs; a++)
            if (!strcmp(n->attrs[a].name, "to") && n->attrs[a].i == KILN_DTYPE_FLOAT16) n->attrs[a].i = KILN_DTYPE_FLOAT;
        const int x = n->inputs[0], y = n->outputs[0];
        if (x >= 0 && y >= 0 && g->values[x].type.dtype == g->values[y].type.dtype && kn_opt_forward(c, y, x)) {
            kn_opt_kill(c, i);
            kn_opt_note(c, "Cast to float32 of a float32 value");
            st = kn_opt_refresh(c);
        }
    }
    free(ok);
    return st;
}

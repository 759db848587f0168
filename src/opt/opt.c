/* The pass manager: the registry of passes and the loop that runs them level by level, each
 * level to a fixed point, reporting what every pass changed. */
#include "opt/opt.h"

#include "exec/exec.h"
#include "opt/pass.h"
#include "util/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Order matters within a level: constant folding first (it makes shapes and scalars known), the
 * clean-ups next (drop_zero_rnn_states right after folding, whose constants it reads, and before
 * eliminate_dead, which removes the zero-state chains it unhooks in the same round), dead-code
 * elimination last; GELU before the MatMul/Gemm fusions that take it as
 * their activation; elementwise chains after every fusion that takes elementwise nodes. Level 3
 * holds the rewrites that depend on the backend and the session's precision, after every fusion
 * (it converts the fused nodes too). */
const kn_pass kn_opt_passes[] = {
    /* first: a float16 model's weight decompression (Cast of int8, Mul by a float16 scale) then
     * folds in float32, as the other runtimes compute it; and every fusion sees float32 */
    {"raise_float16", 1, kn_pass_raise_float16,
     "with the CPU provider first: regions of float16 operators holding a matrix product, convolution, recurrence "
     "or normalisation run in float32 (the CPU's kernels compute float16 in float32 anyway, one conversion per "
     "operator, and its fusions take float32), float16 constants converted once, Casts at the regions' edges"},
    /* before folding: that would turn the dequantised weights into float constants */
    {"fuse_qdq_matmul", 1, kn_pass_fuse_qdq_matmul,
     "MatMul of two DequantizeLinear outputs (B a constant) into com.microsoft.MatMulIntegerToFloat: the exact 8-bit "
     "product; read only by a QuantizeLinear (B constant or not), into QLinearMatMul"},
    {"fuse_qdq_conv", 1, kn_pass_fuse_qdq_conv,
     "Conv of DequantizeLinear outputs read only by a QuantizeLinear into QLinearConv: the exact 8-bit sum, "
     "requantised once"},
    {"fuse_integer_matmul_scale", 1, kn_pass_fuse_integer_matmul_scale,
     "dynamic quantisation's MatMulInteger -> Cast to float -> Mul by the scales (-> Add of a bias) into "
     "com.microsoft.MatMulIntegerToFloat: the same float operations in the product's epilogue, the same bits"},
    {"fold_constants", 1, kn_pass_fold_constants,
     "evaluates nodes whose inputs are all constant, and shape arithmetic over known shapes, into initializers"},
    {"drop_zero_rnn_states", 1, kn_pass_drop_zero_rnn_states,
     "omits LSTM/GRU/RNN initial_h/initial_c that are zeros by construction (ConstantOfShape 0 and the Slice/"
     "Reshape/Expand/... over it): omitted means zero, and the shape arithmetic that built them goes"},
    {"remove_noops", 1, kn_pass_remove_noops,
     "removes Identity, inference Dropout, and Cast/Reshape/Transpose/Expand/Slice that change nothing"},
    {"merge_transposes", 1, kn_pass_merge_transposes, "composes consecutive Transposes into one"},
    {"gather_as_reshape", 1, kn_pass_gather_as_reshape,
     "a Gather whose constant indices take a whole axis in order becomes a Reshape, a view (transformers' attention "
     "masks read through index arithmetic)"},
    {"merge_reshapes", 1, kn_pass_merge_reshapes,
     "collapses a Reshape of a Reshape/Flatten/Squeeze/Unsqueeze into one Reshape"},
    {"sink_expand", 1, kn_pass_sink_expand,
     "an Expand before elementwise operators moves after them (they compute on the smaller tensor), or goes where "
     "the operator's own broadcasting gives the same shape (transformers' expanded attention masks)"},
    {"fold_batchnorm", 1, kn_pass_fold_batchnorm,
     "folds an inference BatchNormalization into the weights of the Conv/ConvTranspose/Gemm/MatMul before it"},
    {"fold_pad", 1, kn_pass_fold_pad,
     "a Pad of zeros on the spatial axes before a Conv becomes the Conv's own padding (explicit padding as "
     "TensorFlow's SAME at stride 2 and ZeroPadding2D export it)"},
    {"mean_before_pointwise", 1, kn_pass_mean_before_pointwise,
     "a mean over spatial axes of a 1x1 Conv becomes the 1x1 Conv of the mean (one position instead of all)"},
    {"cse", 1, kn_pass_cse, "merges nodes that compute the same thing from the same inputs, and equal constants"},
    {"eliminate_dead", 1, kn_pass_eliminate_dead, "removes nodes whose outputs nobody reads and unused initializers"},
    {"fuse_gelu", 2, kn_pass_fuse_gelu, "GELU from its erf and tanh decompositions into kiln.Gelu"},
    {"fuse_layernorm", 2, kn_pass_fuse_layernorm,
     "LayerNormalization and RMSNorm from ReduceMean/Sub/Pow/Sqrt/Div into kiln.LayerNormalization/RMSNormalization"},
    {"fuse_attention", 2, kn_pass_fuse_attention,
     "MatMul/scale/mask/Softmax/MatMul into kiln.Attention"},
    {"fold_attention_views", 2, kn_pass_fold_attention_views,
     "head splits and merges (Transpose/Reshape/Squeeze/Gather chains of static shape) around kiln.Attention into "
     "strided operand views: the kernel reads and writes in place"},
    {"fuse_matmul_add", 2, kn_pass_fuse_matmul_add,
     "2-D MatMul + Add into Gemm; other MatMul + bias (+ residual) into kiln.FusedMatMul"},
    {"fuse_conv", 2, kn_pass_fuse_conv, "Conv + bias + residual Add + activation into kiln.FusedConv"},
    {"batch_step_products", 2, kn_pass_batch_step_products,
     "the per-step products of an unrolled recurrence (Gather(X, t) times the same constant weights) as one "
     "product over all steps, each step gathering its rows"},
    {"fuse_gemm_activation", 2, kn_pass_fuse_gemm_activation,
     "Gemm/kiln.FusedMatMul + activation into kiln.FusedGemm/kiln.FusedMatMul"},
    {"fuse_stacked_lstm", 2, kn_pass_fuse_stacked_lstm,
     "stacked forward LSTM layers (LSTM -> Squeeze -> LSTM) into kiln.StackedLSTM, whose layers a device overlaps"},
    {"fuse_elementwise", 2, kn_pass_fuse_elementwise,
     "chains of elementwise operators (arithmetic, activations, Clip) into one kiln.FusedElementwise"},
    {"lower_precision", 3, kn_pass_lower_precision,
     "with a device provider's precision fp16/bf16 and activations=half: regions of matrix products, convolutions and "
     "the operators between them run in that type, weights converted once, Casts at the regions' edges"},
    {"layout_nhwc", 3, kn_pass_layout_nhwc,
     "regions of 2-D convolutions and the elementwise operators and pooling between them run channels last (NHWC), "
     "Transposes at the regions' edges, where the provider runs them faster: on CUDA at a known batch of 4+ in fp16/bf16, "
     "8+ in fp32 (KILN_LAYOUT=nhwc|nchw|auto)"},
    /* after the layout and precision rewrites, whose forms of the block it matches; before
     * cpu_bf16_values, which would store the squeeze's output in bfloat16 */
    {"fuse_squeeze_excite", 3, kn_pass_fuse_squeeze_excite,
     "squeeze-excite blocks (global average pool, two pointwise products with their activations, the gate's "
     "product with the input) into kiln.SqueezeExcite: one pass over the input for the means, one for the product"},
    {"cpu_bf16_values", 3, kn_pass_cpu_bf16_values,
     "with the CPU provider's precision=bf16 on AMX: a convolution's output read only by convolutions (which round it "
     "to bf16 anyway) is stored in bfloat16 after its bias and Relu/Clip (KILN_CPU_BF16_VALUES=0: off), channel-blocked "
     "where every reader takes that (KILN_CPU_BF16_BLOCKED=0: not)"},
};
const int kn_opt_n_passes = (int)(sizeof kn_opt_passes / sizeof kn_opt_passes[0]);

#define KN_OPT_MAX_LEVEL 3
#define KN_OPT_MAX_ROUNDS 8

static int live_nodes(const kn_graph *g) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead;
    return n;
}

/* Drops dead nodes from the array. */
static void compact(kn_graph *g) {
    int w = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead) {
            free(g->nodes[i].inputs);
            free(g->nodes[i].outputs);
            continue;
        }
        if (w != i) g->nodes[w] = g->nodes[i];
        w++;
    }
    g->n_nodes = w;
}

static bool disabled(const kiln_session_options *o, const char *name) {
    for (int i = 0; o && i < o->n_disabled_passes; i++)
        if (o->disabled_passes[i] && !strcmp(o->disabled_passes[i], name)) return true;
    return false;
}

static kiln_status check_disabled_names(const kiln_session_options *o) {
    for (int i = 0; o && i < o->n_disabled_passes; i++) {
        const char *name = o->disabled_passes[i] ? o->disabled_passes[i] : "";
        int k = 0;
        while (k < kn_opt_n_passes && strcmp(kn_opt_passes[k].name, name)) k++;
        if (k < kn_opt_n_passes) continue;
        char known[1024];
        size_t used = 0;
        known[0] = 0;
        for (int j = 0; j < kn_opt_n_passes && used < sizeof known; j++)
            used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", j ? ", " : "", kn_opt_passes[j].name);
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "unknown optimisation pass '%s' in the disabled passes (known: %s)",
                        name, known);
    }
    return KILN_OK;
}

static void format_notes(const kn_opt_ctx *c, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < c->n_notes && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s x%d", i ? ", " : "", c->notes[i].what, c->notes[i].n);
}

/* KILN_OPT_CHECK_FRESH=1 (tests): where a refresh is skipped because no pass changed the graph
 * since the last one, make it anyway and fail when anything differs: a pass that rewrote the graph
 * without kn_opt_note would otherwise leave the next pass stale tables. */
static kiln_status check_fresh(kn_opt_ctx *c, const char *after) {
    static int mode = -1;
    if (mode < 0) {
        const char *e = getenv("KILN_OPT_CHECK_FRESH");
        mode = e && *e && strcmp(e, "0") != 0;
    }
    if (!mode) return KILN_OK;
    kn_graph *g = c->g;
    const int nv = g->n_values, total = c->cons_start ? c->cons_start[nv] : 0;
    int *was = malloc(sizeof(int) * (size_t)(3 * nv + nv + 1 + total + 1));
    if (!was) return KN_OOM();
    for (int v = 0; v < nv; v++) {
        was[3 * v] = g->values[v].uses;
        was[3 * v + 1] = g->values[v].sub_reads;
        was[3 * v + 2] = g->values[v].producer;
    }
    memcpy(was + 3 * nv, c->cons_start, sizeof(int) * (size_t)(nv + 1));
    memcpy(was + 4 * nv + 1, c->cons, sizeof(int) * (size_t)total);
    kiln_status st = kn_opt_refresh(c);
    bool same = st == KILN_OK && c->cons_start[nv] == total &&
                !memcmp(was + 3 * nv, c->cons_start, sizeof(int) * (size_t)(nv + 1)) &&
                !memcmp(was + 4 * nv + 1, c->cons, sizeof(int) * (size_t)total);
    for (int v = 0; same && v < nv; v++)
        same = was[3 * v] == g->values[v].uses && was[3 * v + 1] == g->values[v].sub_reads &&
               was[3 * v + 2] == g->values[v].producer;
    free(was);
    if (st == KILN_OK && !same)
        st = kn_error(KILN_ERR_INTERNAL, "optimisation pass '%s' changed graph '%s' without noting it (its "
                      "producer/consumer tables went stale)", after, g->name);
    return st;
}

/* Runs one pass; afterwards the graph is compact, sorted and its types inferred again. The
 * producer/consumer tables are refreshed first unless no pass changed the graph since they last
 * were (most passes find nothing in most rounds: a refresh is a walk over every value and node,
 * half of a large graph's optimisation time when it was made before every pass). */
static kiln_status run_pass(kn_opt_ctx *c, const kn_pass *p, const char *prev, int level, kn_opt_report_fn report,
                           void *arg, bool *changed) {
    kn_graph *g = c->g;
    int before = live_nodes(g);
    c->n_notes = 0;
    c->changes = 0;
    if (!c->fresh || c->fresh_nodes != g->n_nodes || c->fresh_values != g->n_values) KN_TRY(kn_opt_refresh(c));
    else KN_TRY(check_fresh(c, prev ? prev : "(none)"));
    kiln_status st = p->run(c);
    if (st != KILN_OK) return kn_error_prefix(st, "optimisation pass '%s': ", p->name);
    *changed = c->changes > 0;
    if (!*changed) return KILN_OK;
    c->fresh = false; /* compacted, sorted, inferred again below */
    compact(g);
    st = kn_graph_sort(g);
    if (st == KILN_OK) st = kn_graph_infer(g);
    if (st != KILN_OK) return kn_error_prefix(st, "after optimisation pass '%s': ", p->name);
    if (report) {
        char detail[1024];
        size_t at = 0;
        detail[0] = 0;
        /* a control-flow body's pass: its node counts are the body's, said so */
        if (g->parent) {
            int n = snprintf(detail, sizeof detail, "in subgraph '%s': ", g->name);
            at = n > 0 && (size_t)n < sizeof detail ? (size_t)n : 0;
        }
        format_notes(c, detail + at, sizeof detail - at);
        report(arg, p->name, level, before, live_nodes(g), detail);
    }
    return KILN_OK;
}

/* Runs the passes of every level up to `level` on graph g (the main graph or a subgraph). */
static kiln_status optimize_graph(kn_model *m, kn_graph *g, const kiln_session_options *options, int level,
                                  bool from_tables, kn_opt_report_fn report, void *arg);

/* The bodies of g's nodes first, deepest first: a body that stops reading an outer value frees its
 * producer for the enclosing graph's dead-code elimination. */
static kiln_status optimize_bodies(kn_model *m, kn_graph *g, const kiln_session_options *options, int level,
                                   bool from_tables, kn_opt_report_fn report, void *arg) {
    for (int i = 0; i < g->n_nodes; i++)
        for (int a = 0; a < g->nodes[i].n_attrs; a++) {
            kn_attr *at = &g->nodes[i].attrs[a];
            if (g->nodes[i].dead || (at->type != KN_ATTR_GRAPH && at->type != KN_ATTR_GRAPHS)) continue;
            /* the control-flow bodies; the graphs other operators take (attention modifiers, ...)
             * are kernels' arguments that their operators run in their own way */
            if (!g->nodes[i].schema || !(g->nodes[i].schema->flags & KN_OP_HAS_SUBGRAPH)) continue;
            int ng = at->type == KN_ATTR_GRAPH ? (at->g ? 1 : 0) : at->n;
            for (int k = 0; k < ng; k++) {
                kn_graph *sub = at->type == KN_ATTR_GRAPH ? at->g : at->graphs[k];
                if (sub) KN_TRY(optimize_graph(m, sub, options, level, from_tables, report, arg));
            }
        }
    return KILN_OK;
}

static kiln_status optimize_graph(kn_model *m, kn_graph *g, const kiln_session_options *options, int level,
                                  bool from_tables, kn_opt_report_fn report, void *arg) {
    KN_TRY(optimize_bodies(m, g, options, level, from_tables, report, arg));
    kn_opt_ctx c;
    memset(&c, 0, sizeof c);
    c.model = m;
    c.g = g;
    c.options = options;
    c.providers_from_tables = from_tables;
    kiln_status st = KILN_OK;
    /* bodies run on the CPU with their operator (src/exec/placement.c): their fusions are judged
     * for it, and the level-3 rewrites, which target a device provider, stay in the main graph */
    kiln_session_options body_options;
    if (g->parent) {
        if (options) body_options = *options;
        else memset(&body_options, 0, sizeof body_options);
        body_options.n_providers = 0; /* candidates() then takes "cpu" alone */
        c.options = &body_options;
        if (level > 2) level = 2;
    }
    /* a large model's passes take seconds: the session's creation says where it is (util/progress.h) */
    kn_progress prog;
    kn_progress_begin(&prog, g->parent ? NULL : "session: optimisation pass");
    const char *prev = NULL; /* the pass run last (for check_fresh's message) */
    for (int lv = 1; lv <= level && st == KILN_OK; lv++) {
        for (int round = 0; round < KN_OPT_MAX_ROUNDS && st == KILN_OK; round++) {
            bool any = false;
            for (int i = 0; i < kn_opt_n_passes && st == KILN_OK; i++) {
                const kn_pass *p = &kn_opt_passes[i];
                /* dead-code elimination also cleans up after every later level */
                bool cleanup = lv > 1 && p->run == kn_pass_eliminate_dead;
                if ((p->level != lv && !cleanup) || disabled(options, p->name)) continue;
                if (prog.what) {
                    char detail[96];
                    snprintf(detail, sizeof detail, "level %d: %s, %d nodes", lv, p->name, g->n_nodes);
                    kn_progress_update(&prog, i, kn_opt_n_passes, detail);
                }
                bool changed = false;
                st = run_pass(&c, p, prev, lv, report, arg, &changed);
                prev = p->name;
                any |= changed;
            }
            if (!any) break;
        }
    }
    kn_progress_end(&prog);
    free(c.cons);
    free(c.cons_start);
    return st;
}

static kiln_status optimize(kn_model *m, const kiln_session_options *options, bool from_tables,
                            kn_opt_report_fn report, void *arg) {
    KN_TRY(check_disabled_names(options));
    int level = options ? options->opt_level : KN_OPT_MAX_LEVEL;
    if (level > KN_OPT_MAX_LEVEL) level = KN_OPT_MAX_LEVEL;
    if (level <= 0 || !m || !m->graph) return KILN_OK;
    return optimize_graph(m, m->graph, options, level, from_tables, report, arg);
}

kiln_status kn_optimize(kn_model *m, const kiln_session_options *options, kn_opt_report_fn report, void *arg) {
    return optimize(m, options, false, report, arg);
}

kiln_status kn_optimize_from_tables(kn_model *m, const kiln_session_options *options, kn_opt_report_fn report,
                                    void *arg) {
    return optimize(m, options, true, report, arg);
}

const char *kn_opt_pass_info(int i, int *level_out, const char **description_out) {
    if (i < 0 || i >= kn_opt_n_passes) return NULL;
    if (level_out) *level_out = kn_opt_passes[i].level;
    if (description_out) *description_out = kn_opt_passes[i].description;
    return kn_opt_passes[i].name;
}

void kn_opt_environment(char *buf, size_t cap) {
    /* every switch that changes what is compiled: the passes' (layout, the CPU's bf16 values) and
     * the kernel tables' verdicts the fusions and placement follow (CUDA's attention views and
     * control flow, the CPU's bf16 support); the switches of run-time choices stay out */
    static const char *const names[] = {"KILN_LAYOUT",         "KILN_CPU_BF16_VALUES",  "KILN_CPU_BF16_PLAIN",
                                        "KILN_CPU_BF16_POOL",  "KILN_CPU_NO_BF16",      "KILN_CUDA_ATTN_VIEWS",
                                        "KILN_CUDA_CONTROL_FLOW", "KILN_CPU_BF16_BLOCKED"};
    size_t at = 0;
    if (cap) buf[0] = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && at < cap; i++) {
        const char *v = getenv(names[i]);
        if (!v || !*v) continue;
        int n = snprintf(buf + at, cap - at, "%s%s=%s", at ? " " : "", names[i], v);
        if (n > 0) at += (size_t)n;
    }
}

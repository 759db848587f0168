/* Internal interface of the optimiser: the pass registry entry, the context a pass runs in, and
 * the graph-rewriting helpers every pass shares (src/opt/rewrite.c).
 *
 * A pass walks one graph (the main graph, or a control-flow body: opt.c runs the passes on each,
 * bodies first) and rewrites it in place: it marks replaced nodes dead, adds new
 * nodes and values at the end of the arrays, and calls kn_opt_refresh after each rewrite so the
 * producer/consumer tables it reads stay exact. The manager (opt.c) then drops dead nodes,
 * re-sorts the graph and infers types again before the next pass. */
#ifndef KN_OPT_PASS_H
#define KN_OPT_PASS_H

#include "backend/backend.h"
#include "exec/session.h"
#include "ir/graph.h"
#include "ops/fused.h"
#include "ops/op.h"

#include <stdbool.h>

#define KN_OPT_MAX_NOTES 16

typedef struct kn_opt_ctx {
    kn_model *model;
    kn_graph *g;
    const kiln_session_options *options;
    /* consumers of each value: cons[cons_start[v] .. cons_start[v+1]) are node indices: the nodes
     * naming v as an input and the nodes whose subgraphs read v by name (kn_graph_node_outer_reads),
     * a node reading v twice listed twice. A subgraph's reader's inputs do not show v: it is also
     * pinned (kn_opt_pinned), so a rewrite keeps v's name and producer order. */
    int *cons, *cons_start;
    int cons_values; /* values the table covers */
    /* what the running pass did: pattern name -> count */
    struct {
        const char *what;
        int n;
    } notes[KN_OPT_MAX_NOTES];
    int n_notes;
    int changes; /* rewrites done by the running pass */
    /* the tables above (and the values' uses, sub_reads and producers) are those of the graph as
     * it is: refreshed since the last pass that changed it (opt.c skips a refresh then) */
    bool fresh;
    int fresh_nodes, fresh_values; /* the graph's sizes at that refresh */
    int name_counter;
    /* providers that cannot run on this machine are judged from their kernel tables as if they
     * could (kiln inspect --provider: what a machine with the device would do) */
    bool providers_from_tables;
} kn_opt_ctx;

typedef kiln_status (*kn_pass_fn)(kn_opt_ctx *c);

typedef struct kn_pass {
    const char *name;
    int level;           /* 1 basic, 2 extended (fusions), 3 backend-dependent */
    kn_pass_fn run;
    const char *description;
} kn_pass;

/* Every pass, in the order they run (level by level). */
extern const kn_pass kn_opt_passes[];
extern const int kn_opt_n_passes;

/* ---- the passes (one file each) ---- */
kiln_status kn_pass_fold_constants(kn_opt_ctx *c);
kiln_status kn_pass_eliminate_dead(kn_opt_ctx *c);
kiln_status kn_pass_drop_zero_rnn_states(kn_opt_ctx *c);
kiln_status kn_pass_remove_noops(kn_opt_ctx *c);
kiln_status kn_pass_cse(kn_opt_ctx *c);
kiln_status kn_pass_fold_batchnorm(kn_opt_ctx *c);
kiln_status kn_pass_mean_before_pointwise(kn_opt_ctx *c);
kiln_status kn_pass_merge_transposes(kn_opt_ctx *c);
kiln_status kn_pass_gather_as_reshape(kn_opt_ctx *c);
kiln_status kn_pass_merge_reshapes(kn_opt_ctx *c);
kiln_status kn_pass_sink_expand(kn_opt_ctx *c);
kiln_status kn_pass_fuse_gelu(kn_opt_ctx *c);
kiln_status kn_pass_fuse_layernorm(kn_opt_ctx *c);
kiln_status kn_pass_fuse_qdq_matmul(kn_opt_ctx *c);
kiln_status kn_pass_fuse_qdq_conv(kn_opt_ctx *c);
kiln_status kn_pass_fuse_integer_matmul_scale(kn_opt_ctx *c);
kiln_status kn_pass_fuse_matmul_add(kn_opt_ctx *c);
kiln_status kn_pass_fuse_conv(kn_opt_ctx *c);
kiln_status kn_pass_batch_step_products(kn_opt_ctx *c);
kiln_status kn_pass_fuse_gemm_activation(kn_opt_ctx *c);
kiln_status kn_pass_fuse_attention(kn_opt_ctx *c);
kiln_status kn_pass_fold_attention_views(kn_opt_ctx *c);
kiln_status kn_pass_fuse_stacked_lstm(kn_opt_ctx *c);
kiln_status kn_pass_fuse_elementwise(kn_opt_ctx *c);
kiln_status kn_pass_lower_precision(kn_opt_ctx *c);
kiln_status kn_pass_raise_float16(kn_opt_ctx *c);
kiln_status kn_pass_fold_pad(kn_opt_ctx *c);
kiln_status kn_pass_layout_nhwc(kn_opt_ctx *c);
kiln_status kn_pass_cpu_bf16_values(kn_opt_ctx *c);
kiln_status kn_pass_fuse_squeeze_excite(kn_opt_ctx *c);

/* ---- bookkeeping ---- */

/* Records one match of pattern `what` (a string literal) by the running pass. */
void kn_opt_note(kn_opt_ctx *c, const char *what);
/* Recounts uses and producers and rebuilds the consumer table; call after every rewrite. */
kiln_status kn_opt_refresh(kn_opt_ctx *c);

/* ---- queries ---- */

/* The value's constant when it is a true constant (an initializer that is not also a graph input,
 * or a folded value); else NULL. */
const kn_tensor *kn_opt_const(const kn_opt_ctx *c, int v);
/* The single element of a constant with exactly one element, as double. */
bool kn_opt_scalar(const kn_opt_ctx *c, int v, double *out);
/* Whether v is a constant (numeric or bool, at most 2^20 elements) whose every element is `want`. */
bool kn_opt_const_all(const kn_opt_ctx *c, int v, double want);
/* Whether the value must keep its name: a graph output, or read by a subgraph (value.sub_reads,
 * exact after kn_opt_refresh). */
bool kn_opt_pinned(const kn_opt_ctx *c, int v);
/* The node producing v (live), or -1. */
int kn_opt_producer(const kn_opt_ctx *c, int v);
/* Number of node inputs reading v, plus the nodes whose subgraphs read it (graph outputs not
 * counted). */
int kn_opt_n_consumers(const kn_opt_ctx *c, int v);
/* The node that is the only reader of v, when v is read exactly once and is not pinned; else -1. */
int kn_opt_only_consumer(const kn_opt_ctx *c, int v);
/* Whether v is read only by nodes in `nodes` (n of them) and is not pinned. */
bool kn_opt_used_only_by(const kn_opt_ctx *c, int v, const int *nodes, int n);
/* A Conv-like node without pads (auto_pad NOTSET or VALID, every pad 0) and with unit strides:
 * with a 1x1 kernel, a product over the channels at every position. */
bool kn_opt_conv_unpadded_unit_stride(const kn_node *n);
/* The node is live and is op_type in the ai.onnx domain. */
bool kn_opt_is(const kn_opt_ctx *c, int node, const char *op_type);
/* Input i of the node, or -1 when omitted or out of range. */
int kn_opt_input(const kn_opt_ctx *c, int node, int i);
/* Number of inputs actually given (trailing omitted ones dropped). */
int kn_opt_n_inputs(const kn_opt_ctx *c, int node);
/* Static dims agree (both known and equal, or the same symbol); ranks must be known and equal. */
bool kn_opt_same_shape(const kn_type *a, const kn_type *b);
/* The number of values of a static shape (1 for rank 0), -1 when a dim is not known. */
int64_t kn_opt_static_count(const kn_type *t);
/* The value's type is a float32 tensor of known rank. */
bool kn_opt_is_f32(const kn_opt_ctx *c, int v);
/* The value's type is a float32, float16 or bfloat16 tensor of known rank: for the epilogue
 * fusions (FusedConv, FusedMatMul, FusedGemm), where which types have a fused kernel is the
 * target's question (the CPU's take float32, CUDA's the 16-bit types too). */
bool kn_opt_is_float(const kn_opt_ctx *c, int v);
/* Reads the axes of a Reduce* node (attribute or input by opset); false when not constant.
 * *n_out = 0 with *all_out set means "all axes" (no axes given, noop_with_empty_axes = 0). */
bool kn_opt_reduce_axes(const kn_opt_ctx *c, int node, int64_t *axes, int cap, int *n_out);

/* fuse_util.c: closed single-input regions. The nodes between value x and value y: every node an
 * elementwise Add/Sub/Mul/Div/Pow/Erf/Tanh/Sqrt/Clip/Relu/Max/Min/Sigmoid/Neg/Exp/Reciprocal/
 * HardSigmoid over x, one-element constants and values of the region, every intermediate value read
 * only inside it (so the region computes y = f(x) elementwise, and can be replaced as a whole). */
#define KN_OPT_REGION_MAX 24
#define KN_OPT_REGION_POINTS 64
typedef struct kn_opt_region {
    int nodes[KN_OPT_REGION_MAX];
    int n;
} kn_opt_region;
bool kn_opt_region_op(const kn_opt_ctx *c, int node);
bool kn_opt_region_has(const kn_opt_region *r, int node);
/* The region between x and y (at most max_nodes nodes); false when it is not closed. */
bool kn_opt_region_collect(const kn_opt_ctx *c, int x, int y, int max_nodes, kn_opt_region *r);
/* f(pts) for the region (in double, n_pts <= KN_OPT_REGION_POINTS); false when an operand is not
 * a one-element constant or a region value. */
bool kn_opt_region_eval(const kn_opt_ctx *c, const kn_opt_region *r, int x, int y, const double *pts, int n_pts,
                        double *out);

/* fuse_util.c: when value v is read only by an activation (Relu, LeakyRelu, Clip with constant
 * bounds, Sigmoid, Tanh, HardSigmoid, HardSwish, kiln.Gelu, the Sigmoid and Mul of x*sigmoid(x)),
 * or by elementwise nodes that compute one of them (HardSwish as x * Clip(x + 3, 0, 6) / 6,
 * HardSigmoid, SiLU, Relu and Clip from Max/Min: a region, recognised by its values at sample
 * points), describes it: the activation, the value it produces, the nodes it spans (at most
 * KN_OPT_ACT_MAX_NODES, appended to nodes[*n_nodes]). */
#define KN_OPT_ACT_MAX_NODES 8
bool kn_opt_match_activation(const kn_opt_ctx *c, int v, kn_act_spec *act, int *out_v, int *nodes, int *n_nodes);
/* After an activation (act, producing *out_v), the constant clamps that follow it: Max or Min of
 * *out_v and a one-element finite float constant, or Clip with constant bounds (NaN refused; an
 * omitted bound is none), each the only reader of the value before it, with that value's shape
 * and type; up to KN_OPT_BOUNDS_MAX_NODES of them, appended to nodes[*n_nodes], composed into
 * act: a Relu or Clip (or none) becomes one Clip, any other activation gets bounds
 * (kn_act_spec.bounded, the activation_bounds attribute, which only the CPU applies). Returns
 * how many nodes it took (0: none, act and *out_v unchanged). A clamp that would leave a
 * constant (its lower bound above its upper one) is not taken. */
#define KN_OPT_BOUNDS_MAX_NODES 4
int kn_opt_match_bounds(const kn_opt_ctx *c, kn_act_spec *act, int *out_v, int *nodes, int *n_nodes);
/* Clip's bounds (attributes before opset 11, constant inputs from it; +-inf when absent); false
 * when a bound is given but not a constant scalar. */
bool kn_opt_clip_bounds(const kn_opt_ctx *c, int node, float *lo, float *hi);
/* Whether node is the (ai.onnx or kiln) op_type, live. */
bool kn_opt_is_in(const kn_opt_ctx *c, int node, const char *domain, const char *op_type);
/* The other input of a two-input node, given one of them; -1 when v is not an input or is both. */
int kn_opt_other_input(const kn_opt_ctx *c, int node, int v);

/* ---- rewriting ---- */

/* Makes the readers of value `from` read `to` instead, so from's producer can go. When `from`
 * must keep its name, `to`'s producer is made to produce `from` instead (readers of `to` follow).
 * Returns false, changing nothing, when neither is possible. */
bool kn_opt_forward(kn_opt_ctx *c, int from, int to);
/* Marks a node dead. */
void kn_opt_kill(kn_opt_ctx *c, int node);
/* Sets (adds or replaces) an ints attribute of a node; the array is copied into the arena. */
kiln_status kn_opt_set_ints(kn_opt_ctx *c, int node, const char *name, const int64_t *v, int n);
/* A new value named after `base` (unique in the graph) with the given type (may be NULL). */
int kn_opt_new_value(kn_opt_ctx *c, const char *base, const kn_type *type);
/* A new constant value owning tensor t (freed on failure). */
int kn_opt_new_const(kn_opt_ctx *c, const char *base, kn_tensor *t);

/* A node being built: collected here, checked, then added by kn_opt_emit. */
#define KN_PROTO_MAX_IO 48
#define KN_PROTO_MAX_ATTRS 24
typedef struct kn_opt_proto {
    const char *op_type, *domain;
    int inputs[KN_PROTO_MAX_IO], n_inputs;
    int outputs[KN_PROTO_MAX_IO], n_outputs;
    kn_attr attrs[KN_PROTO_MAX_ATTRS];
    int n_attrs;
    float act_params[2]; /* storage for the activation_params attribute */
    float act_bounds[2]; /* and for activation_bounds */
} kn_opt_proto;

void kn_proto_init(kn_opt_proto *p, const char *domain, const char *op_type);
void kn_proto_in(kn_opt_proto *p, int v);
void kn_proto_out(kn_opt_proto *p, int v);
void kn_proto_int(kn_opt_proto *p, const char *name, int64_t v);
void kn_proto_float(kn_opt_proto *p, const char *name, float v);
void kn_proto_string(kn_opt_proto *p, const char *name, const char *s);
/* Arrays are copied into the model's arena by kn_opt_emit. */
void kn_proto_ints(kn_opt_proto *p, const char *name, const int64_t *v, int n);
void kn_proto_floats(kn_opt_proto *p, const char *name, const float *v, int n);
/* Copies attribute `name` of node `from` (if present). */
void kn_proto_copy_attr(kn_opt_proto *p, const kn_opt_ctx *c, int from, const char *name);

/* Sets the activation and activation_params attributes of a kiln fused node. */
void kn_proto_act(kn_opt_proto *p, const kn_act_spec *a);

/* Adds the node when the schema exists at its opset, its infer function accepts the current input
 * types, and the provider that would run the pattern has a kernel for it (kn_opt_target_supports).
 * *node_out is the new node's index, or -1 when the node is not formed (the pattern is then left
 * alone; `why` says why). Errors only on out of memory. `name_from` (a node, may be -1) gives the
 * new node's name. */
kiln_status kn_opt_emit(kn_opt_ctx *c, const kn_opt_proto *p, int name_from, int *node_out);

/* A kiln fused node that ends in an activation: build(p, arg) sets its op, inputs and attributes;
 * kn_opt_emit_activated adds the output *last and the activation *act and emits it (as
 * kn_opt_emit), first with the constant clamps after the activation folded in
 * (kn_opt_match_bounds) and, when the target refuses those, without them. nodes[0..*n_nodes) are
 * the nodes matched so far; on return they, *act and *last describe the emitted node (unchanged
 * when refused: *node_out -1), and *clamped says whether clamps were folded. */
typedef void (*kn_opt_build_fn)(kn_opt_proto *p, const void *arg);
kiln_status kn_opt_emit_activated(kn_opt_ctx *c, int name_from, kn_opt_build_fn build, const void *arg, kn_act_spec *act,
                                  int *last, int *nodes, int *n_nodes, int *node_out, bool *clamped);

/* target.c: whether the fused `node` (with these input types) may form: the first provider of the
 * session that supports it is the one that would run the pattern's anchor node (the node it
 * replaces that it is named after; -1: none) or one listed before it. The reason in why otherwise. */
bool kn_opt_target_supports(const kn_opt_ctx *c, const kn_node *node, const kn_type *const *in, int n_in,
                            int anchor, char *why, size_t cap);

/* target.c: the provider that placement tries first, the one that runs most nodes (NULL when none
 * can run), with its options parsed into cfg (the defaults where they do not parse: that error is
 * the session's to report when it starts the provider). */
const char *kn_opt_first_provider(const kn_opt_ctx *c, kn_backend_config *cfg);

#endif

/* kiln's fused operators (domain "kiln", version 1): the activations they apply, shared by the
 * schemas (src/ops/fused.c), the CPU kernels (src/backend/cpu/fused*.c) and the optimiser passes
 * that form them (src/opt/pass_fuse_*.c).
 *
 * The operators:
 *   FusedConv(X, W, B?, Z?)          Y = act(Conv(X, W, B) + Z); Conv's attributes; Z has Y's shape;
 *                                    layout = "NCHW" (default) | "NHWC": with NHWC, X, Z and Y hold
 *                                    their channels last ([N, spatial..., C]) and so does W
 *                                    ([M, kernel..., C/group], cuDNN's KRSC); B is as in Conv;
 *                                    y_type = [16] (NCHW): Y in bfloat16, and X and Z may be
 *                                    bfloat16 with float W (the CPU's precision=bf16 keeping values
 *                                    between convolutions in bf16: opt pass cpu_bf16_values)
 *   MaxPool(X), AveragePool(X)       ai.onnx's pooling (its attributes; Y only) with a layout attribute
 *                                    as FusedConv's: with NHWC, X and Y hold their channels last
 *   FusedGemm(A, B, C?)              Y = act(alpha op(A) op(B) + beta C); Gemm's attributes
 *   FusedMatMul(A, B, bias?, Z?)     Y = act(MatMul(A, B) + bias + Z); bias is a scalar or one value
 *                                    per output column; Z has Y's shape or, for a 2-D Y [R, N],
 *                                    is Y's rows under other leading dims ([d..., N], R elements
 *                                    of them: a product over the rows of a tensor of symbolic shape)
 *   Gelu(X)                          approximate = "none" (erf) | "tanh"
 *   LayerNormalization(X, scale?, bias?)   axis, epsilon: normalises the dims from axis on;
 *                                    scale/bias hold one value per normalised element
 *   RMSNormalization(X, scale?)      axis, epsilon: x / sqrt(mean(x^2) + epsilon) * scale
 *   Attention(Q, KT, V, mask?)       softmax(scale * Q KT + mask) V over the last two dims; Q
 *                                    [..., Sq, D], KT [..., D, Sk], V [..., Sk, Dv] with equal
 *                                    batch dims; mask broadcasts to [..., Sq, Sk] (bool: false
 *                                    masks out; float: added); nan_to_zero = 1 turns NaN
 *                                    probabilities (fully masked rows) into 0. Optional
 *                                    q_view, kt_view, v_view, y_view (kn_attn_view below): the
 *                                    operand is a strided view of the tensor given (Y of the one
 *                                    produced, whose shape is then y_shape), so head splits and
 *                                    merges cost no copy
 *   FusedElementwise(X0, ..., X7)    a chain of elementwise operators as one kernel: Y is the
 *                                    broadcast of every input, each element computed from the
 *                                    inputs' elements by a short program (kn_chain_program below)
 *   StackedLSTM(X, W0, R0, B0?, initial_h0?, initial_c0?, W1, R1, B1?, initial_h1?, initial_c1?, ...)
 *                                    layers of forward LSTMs (ONNX's default activations, no clip,
 *                                    peepholes or sequence_lens, layout 0), each layer's Y (squeezed
 *                                    to [T, B, H]) the next one's X; five inputs per layer (omitted
 *                                    ones empty), KN_STACKED_LSTM_MAX_LAYERS at most; outputs Y, Y_h,
 *                                    Y_c of the last layer, as its LSTM would give them
 *   SqueezeExcite(X, W1, B1?, W2, B2?)   a squeeze-excite block: Y = X * gate(W2 act(W1 m + B1) + B2),
 *                                    m the mean of X over its spatial dims per batch item and
 *                                    channel ([N, C]), the gate broadcast over the spatial dims.
 *                                    W1 holds M rows of C ([M, C] or a 1x1 convolution's
 *                                    [M, C, 1, 1] / [M, 1, 1, C]: dim 0 is M, the rest multiply
 *                                    to C), W2 C rows of M; B1 M values, B2 C (each may be
 *                                    omitted). activation / activation_params: the inner
 *                                    activation; gate / gate_params (default "Sigmoid"): the
 *                                    outer one, named and parametrised as activations are;
 *                                    layout NCHW (X [N, C, spatial...]) | NHWC (X [N,
 *                                    spatial..., C]); X of rank 3 or more
 * Every activation-taking operator has the attributes activation (string, "" = none) and
 * activation_params (floats): LeakyRelu [alpha], Clip [min, max], HardSigmoid [alpha, beta], and
 * optionally activation_bounds (floats [lo, hi], lo <= hi, neither NaN, -inf / inf for no bound):
 * a clamp min(max(act(v), lo), hi) applied after the activation (a constant Max/Min/Clip that
 * followed it: openWakeWord's LeakyRelu then Max(x, -0.4)). The CPU applies it; the optimiser
 * forms it only for nodes the CPU runs (src/opt/target.c), as other backends ignore it. */
#ifndef KN_OPS_FUSED_H
#define KN_OPS_FUSED_H

#include "exec/kernel.h"
#include "ir/graph.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kn_act {
    KN_ACT_NONE = 0,
    KN_ACT_RELU,
    KN_ACT_LEAKY_RELU,
    KN_ACT_CLIP,
    KN_ACT_SIGMOID,
    KN_ACT_TANH,
    KN_ACT_HARD_SIGMOID,
    KN_ACT_HARD_SWISH,
    KN_ACT_SILU, /* x * sigmoid(x) */
    KN_ACT_GELU, /* erf form */
    KN_ACT_GELU_TANH,
    KN_ACT_COUNT
} kn_act;

typedef struct kn_act_spec {
    kn_act act;
    float p0, p1; /* LeakyRelu alpha; Clip min, max; HardSigmoid alpha, beta */
    /* activation_bounds: y = min(max(act(v), lo), hi) when bounded (zero-initialised: none) */
    bool bounded;
    float lo, hi;
} kn_act_spec;

/* The clamp [*lo, *hi] (min(max(v, lo), hi), which is the constant hi when lo > hi) followed by
 * Max(., b0) then Min(., b1), as one clamp: exact for every v but NaN. */
static inline void kn_clamp_then(float *lo, float *hi, float b0, float b1) {
    if (b0 <= *hi) {
        if (b0 > *lo) *lo = b0;
    } else {
        *lo = *hi = b0; /* the constant b0 */
    }
    if (b1 < *hi) *hi = b1;
}

#define KN_STACKED_LSTM_MAX_LAYERS 8
/* StackedLSTM's input i of layer l (0 W, 1 R, 2 B, 3 initial_h, 4 initial_c), and its layers
 * given its input count (trailing omitted inputs may be left out). */
static inline int kn_stacked_lstm_input(int layer, int i) { return 1 + 5 * layer + i; }
static inline int kn_stacked_lstm_layers(int n_inputs) { return (n_inputs - 1 + 4) / 5; }
/* That input among a node's n_in input tensors (NULL when omitted or left out). */
static inline kn_tensor *kn_stacked_lstm_in(kn_tensor *const *in, int n_in, int layer, int i) {
    int k = kn_stacked_lstm_input(layer, i);
    return k < n_in ? in[k] : NULL;
}

/* Layer l of a StackedLSTM kernel call as the call of the ONNX LSTM it stands for (forward,
 * default attributes, opset 14), for backends that run the layers in turn: `ctx` is the call (the
 * node named "<node> (layer l)", its inputs the fused node's value ids so a kernel finds constant
 * weights as such; tensors x, W, R, B, none, initial_h, initial_c), writing Y to *y (a lower layer:
 * y given) or the fused node's outputs (the top layer: y NULL). Points into the struct: use it in
 * place. */
typedef struct kn_stacked_layer {
    kn_kernel_ctx ctx;
    kn_node node;
    char name[160];
    int ids[7];
    kn_tensor *in[7], *out[3];
} kn_stacked_layer;
void kn_stacked_lstm_layer(const kn_kernel_ctx *fused, int layer, kn_tensor *x, kn_tensor **y, kn_stacked_layer *out);

/* A kiln.Attention operand read (or Y written) through a strided view of the node's input (or
 * output) tensor: element idx of the operand, dims[rank], is element offset + sum idx[k] *
 * strides[k] of that tensor. Written by the optimiser (fold_attention_views) where the operand was
 * Transposes, Reshapes, Squeezes, Unsqueezes, constant Gathers, Splits and Slices of a tensor whose
 * shape is static but for symbolic dims that no stride depends on (a model's batch). The attribute
 * holds [rank, dims..., offset, strides...]; a dim -(1 + p) is "dim p of the tensor the view reads"
 * (of Y's tensor for y_view) and a stride -(1 + p + KILN_MAX_RANK * m) is "m times the product of
 * that tensor's dims after p" (its stride of dim p), known at run time. y_shape, Y's tensor's
 * shape, likewise takes -(1 + KILN_MAX_RANK * i + p) for "dim p of input i". */
#define KN_ATTN_VIEW_MAX_RANK 4
typedef struct kn_attn_view {
    int rank; /* at most KN_ATTN_VIEW_MAX_RANK from the attribute; any for a whole tensor */
    int64_t dims[KILN_MAX_RANK];
    int64_t offset;
    int64_t strides[KILN_MAX_RANK];
} kn_attn_view;
enum { KN_ATTN_Q, KN_ATTN_KT, KN_ATTN_V, KN_ATTN_Y };
/* The attribute name of an operand's view ("q_view", "kt_view", "v_view", "y_view"). */
const char *kn_attn_view_name(int operand);
/* Reads operand's view: 0 when the node has none, 1 when *v is set, -1 when the attribute is
 * malformed (why says how). Its symbolic dims stay -(1 + p) until kn_attn_view_bind. */
int kn_attn_view_get(const kn_node *n, int operand, kn_attn_view *v, char *why, size_t cap);
/* Resolves a view's symbolic dims from the dims of the tensor it reads (rank of them); false when
 * one names a dim the tensor lacks. */
bool kn_attn_view_bind(kn_attn_view *v, const int64_t *dims, int rank);
/* The markers of symbolic dim p in a view's dims, of m times the stride of dim p in its strides,
 * and of dim p of input i in y_shape. */
#define KN_ATTN_VIEW_SYMBOLIC(p) (-1 - (int64_t)(p))
#define KN_ATTN_VIEW_STRIDE_OF(p, m) (-1 - (int64_t)(p) - (int64_t)KILN_MAX_RANK * (m))
#define KN_ATTN_Y_SHAPE_OF_INPUT(i, p) (-1 - (int64_t)KILN_MAX_RANK * (i) - (int64_t)(p))
/* A whole tensor as a view of itself (contiguous strides, offset 0): the kernels take every
 * operand as a view, the node's or this. */
void kn_attn_view_whole(const kn_tensor *t, kn_attn_view *v);
/* Whether every element of the view lies inside a tensor of `count` elements. */
bool kn_attn_view_fits(const kn_attn_view *v, int64_t count);
/* Host copy between a view of `base` (elements of es bytes) and a dense tensor of the view's
 * dims: gathers into dense (to_dense) or scatters from it. */
void kn_attn_view_copy(size_t es, void *base, const kn_attn_view *v, void *dense, bool to_dense);
/* Encodes a view as the attribute's ints (2 + 2 * rank of them) into out. */
int kn_attn_view_encode(const kn_attn_view *v, int64_t *out);

/* kiln.SqueezeExcite's attributes: the inner activation, the gate and the layout; false (reason
 * in why) when one is invalid. */
bool kn_squeeze_excite_from_node(const kn_node *n, kn_act_spec *act, kn_act_spec *gate, bool *nhwc, char *why,
                                 size_t cap);
/* A kiln.SqueezeExcite call's operands against each other (X of rank 3 or more, W1 M rows of C, W2
 * C rows of M, B1 M values, B2 C): sets the batch *N, channels *C, hidden values *M and positions
 * *S, or returns the kernel error that says what does not fit. */
kiln_status kn_squeeze_excite_dims(const kn_kernel_ctx *c, bool nhwc, int64_t *N, int64_t *C, int64_t *M, int64_t *S);

/* FusedConv's layout attribute: false when it is neither NCHW nor NHWC. */
bool kn_fused_conv_layout(const kn_node *n, bool *nhwc);
/* The permutations between channels last and channels first for a tensor of this rank (3 or
 * more): to_first turns [N, S..., C] into [N, C, S...], to_last the reverse (out[d] = in[perm[d]]). */
void kn_nhwc_perms(int rank, int *to_first, int *to_last);

/* The activation's attribute name ("Relu", ...; "" for none). */
const char *kn_act_name(kn_act a);
/* Parses a name; false when unknown. */
bool kn_act_parse(const char *name, kn_act *out);
/* Reads the node's activation and activation_params; false (reason in why) when invalid. */
bool kn_act_from_node(const kn_node *n, kn_act_spec *out, char *why, size_t cap);

/* ------------------------------------------------------------------ FusedElementwise
 *
 * The program runs once per output element over registers: the inputs' elements first, then the
 * constants, then one register per step, each step an operator on earlier registers; Y is the
 * last step's register. Attributes:
 *   program   ints, 3 per step: operator (kn_chain_op), register a, register b (-1 for unary)
 *   params    floats, 2 per step (may be omitted: zeros): LeakyRelu/Elu alpha; Selu alpha, gamma;
 *             HardSigmoid alpha, beta; Clip min, max; Gelu nothing
 *   constants floats, the constant registers
 * The operator numbers are part of the compiled-file format and of dumped graphs: never renumber. */

#define KN_CHAIN_MAX_INPUTS 8
#define KN_CHAIN_MAX_CONSTS 8
#define KN_CHAIN_MAX_STEPS 16
#define KN_CHAIN_MAX_REGS (KN_CHAIN_MAX_INPUTS + KN_CHAIN_MAX_CONSTS + KN_CHAIN_MAX_STEPS)

typedef enum kn_chain_op {
    /* binary */
    KN_CHAIN_ADD = 0,
    KN_CHAIN_SUB = 1,
    KN_CHAIN_MUL = 2,
    KN_CHAIN_DIV = 3,
    KN_CHAIN_POW = 4,
    KN_CHAIN_MAX = 5,
    KN_CHAIN_MIN = 6,
    KN_CHAIN_PRELU = 7, /* a < 0 ? a * b : a */
    KN_CHAIN_BINARY_END_,
    /* unary */
    KN_CHAIN_ABS = 16,
    KN_CHAIN_NEG = 17,
    KN_CHAIN_EXP = 18,
    KN_CHAIN_LOG = 19,
    KN_CHAIN_SQRT = 20,
    KN_CHAIN_RECIPROCAL = 21,
    KN_CHAIN_FLOOR = 22,
    KN_CHAIN_CEIL = 23,
    KN_CHAIN_ERF = 24,
    KN_CHAIN_TANH = 25,
    KN_CHAIN_SIGMOID = 26,
    KN_CHAIN_RELU = 27,
    KN_CHAIN_LEAKY_RELU = 28,
    KN_CHAIN_ELU = 29,
    KN_CHAIN_SELU = 30,
    KN_CHAIN_HARD_SIGMOID = 31,
    KN_CHAIN_HARD_SWISH = 32,
    KN_CHAIN_SOFTPLUS = 33,
    KN_CHAIN_SOFTSIGN = 34,
    KN_CHAIN_SIN = 35,
    KN_CHAIN_COS = 36,
    KN_CHAIN_GELU = 37,
    KN_CHAIN_GELU_TANH = 38,
    KN_CHAIN_CLIP = 39,
    KN_CHAIN_MISH = 40, /* x * tanh(softplus(x)) */
    KN_CHAIN_OP_END_
} kn_chain_op;

typedef struct kn_chain_step {
    uint8_t op, a, b; /* b = 0 for unary operators */
    float p0, p1;
} kn_chain_step;

typedef struct kn_chain_program {
    int n_inputs, n_consts, n_steps;
    float consts[KN_CHAIN_MAX_CONSTS];
    kn_chain_step steps[KN_CHAIN_MAX_STEPS];
} kn_chain_program;

/* Whether op is a binary (two-register) operator; false for unary and unknown numbers. */
bool kn_chain_op_binary(int op);
/* The operator's name ("Add", ...), NULL for an unknown number. */
const char *kn_chain_op_name(int op);
/* Reads and checks a FusedElementwise node's program for n_inputs inputs: sizes, known operators,
 * every register read before it is written. False (reason in why) when invalid. */
bool kn_chain_from_node(const kn_node *n, int n_inputs, kn_chain_program *out, char *why, size_t cap);

#endif

/* kiln's fused operators (domain "kiln", version 1): the activations they apply, shared by the
 * schemas (src/ops/fused.c), the CPU kernels (src/backend/cpu/fused*.c) and the optimiser passes
 * that form them (src/opt/pass_fuse_*.c).
 *
 * The operators:
 *   FusedConv(X, W, B?, Z?)          Y = act(Conv(X, W, B) + Z); Conv's attributes; Z has Y's shape
 *   FusedGemm(A, B, C?)              Y = act(alpha op(A) op(B) + beta C); Gemm's attributes
 *   FusedMatMul(A, B, bias?, Z?)     Y = act(MatMul(A, B) + bias + Z); bias is a scalar or one value
 *                                    per output column; Z has Y's shape
 *   Gelu(X)                          approximate = "none" (erf) | "tanh"
 *   LayerNormalization(X, scale?, bias?)   axis, epsilon: normalises the dims from axis on;
 *                                    scale/bias hold one value per normalised element
 *   RMSNormalization(X, scale?)      axis, epsilon: x / sqrt(mean(x^2) + epsilon) * scale
 *   Attention(Q, KT, V, mask?)       softmax(scale * Q KT + mask) V over the last two dims; Q
 *                                    [..., Sq, D], KT [..., D, Sk], V [..., Sk, Dv] with equal
 *                                    batch dims; mask broadcasts to [..., Sq, Sk] (bool: false
 *                                    masks out; float: added); nan_to_zero = 1 turns NaN
 *                                    probabilities (fully masked rows) into 0
 * Every activation-taking operator has the attributes activation (string, "" = none) and
 * activation_params (floats): LeakyRelu [alpha], Clip [min, max], HardSigmoid [alpha, beta]. */
#ifndef KN_OPS_FUSED_H
#define KN_OPS_FUSED_H

#include "ir/graph.h"

#include <stdbool.h>
#include <stddef.h>

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
} kn_act_spec;

/* The activation's attribute name ("Relu", ...; "" for none). */
const char *kn_act_name(kn_act a);
/* Parses a name; false when unknown. */
bool kn_act_parse(const char *name, kn_act *out);
/* Reads the node's activation and activation_params; false (reason in why) when invalid. */
bool kn_act_from_node(const kn_node *n, kn_act_spec *out, char *why, size_t cap);

#endif

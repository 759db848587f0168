/* The attention family's attributes (ai.onnx Attention, RotaryEmbedding, SwiGLU, LinearAttention,
 * CausalConvWithState; ai.onnx.preview FlexAttention; com.microsoft Attention, MultiHeadAttention,
 * GroupQueryAttention, RotaryEmbedding), read once at compile time by one prepare hook that the
 * CPU and CUDA kernels share (exec/kernel.h: kn_params_fn, kn_ctx_params), so no kernel of the
 * family looks an attribute up by name when it runs. Each field holds its attribute as the
 * specification gives it (with its default); what it means for a shape is the kernel's work. */
#ifndef KN_OPS_ATTENTION_H
#define KN_OPS_ATTENTION_H

#include "ir/graph.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct kn_attn_attrs {
    int64_t q_heads, kv_heads; /* q_num_heads, kv_num_heads (0: absent) */
    int64_t num_heads;         /* num_heads (RotaryEmbedding, com.microsoft; 0: absent) */
    bool has_scale;            /* a "scale" attribute is present ... */
    float scale_raw;           /* ... with this float field (ai.onnx Attention, FlexAttention) */
    float scale;               /* "scale" read as a number, 0 when absent (LinearAttention, com.microsoft) */
    int64_t softmax_precision; /* 0: absent */
    float softcap;             /* 0: none */
    bool is_causal;
    int64_t left_window, right_window; /* left_window_size, right_window_size (-1) */
    int qk_mode;                       /* qk_matmul_output_mode */
    int64_t rotary_dim;                /* rotary_embedding_dim (0) */
    bool interleaved;
    float alpha;             /* SwiGLU (1) */
    const char *activation;  /* CausalConvWithState ("none") */
    const char *update_rule; /* LinearAttention ("gated_delta") */
    const kn_graph *score_mod, *prob_mod; /* FlexAttention's modifier subgraphs (NULL: none) */
    /* com.microsoft */
    bool unidirectional;
    float mask_filter_value; /* -10000 */
    const int64_t *qkv_hidden_sizes;
    int n_qkv_hidden_sizes;
    bool do_rotary, rotary_interleaved, smooth_softmax;
    int64_t local_window_size; /* -1 */
} kn_attn_attrs;

/* The hook: fills a kn_attn_attrs from any node of the family (never fails). */
kiln_status kn_attn_attrs_prepare(const kn_node *n, void *params);

#endif

/* Kernels of the com.microsoft family (the table is in contrib.c). */
#ifndef KN_CONTRIB_IMPL_H
#define KN_CONTRIB_IMPL_H

#include "exec/kernel.h"

#include <stdbool.h>
#include <stdint.h>

/* The family's attributes, read once at compile time (kn_cpu_ms_prepare, contrib.c) by the kernels
 * of kn_cpu_contrib but the attention family's (which take kn_attn_attrs): alpha (the Gelu family's
 * 1.702, FusedMatMul's 1), FusedMatMul's transposes, the normalisations' epsilon (1e-12; 1e-5 for
 * SimplifiedLayerNormalization) and axis (-1). */
typedef struct kn_cpu_ms_prm {
    float alpha, eps;
    int64_t axis;
    bool trans_a, trans_b, trans_batch_a, trans_batch_b;
} kn_cpu_ms_prm;
kiln_status kn_cpu_ms_prepare(const kn_node *n, void *params);

/* contrib_norm.c */
kiln_status kn_cpu_ms_skip_layernorm(kn_kernel_ctx *c);            /* SkipLayerNormalization */
kiln_status kn_cpu_ms_skip_simplified_layernorm(kn_kernel_ctx *c); /* SkipSimplifiedLayerNormalization */
kiln_status kn_cpu_ms_simplified_layernorm(kn_kernel_ctx *c);      /* SimplifiedLayerNormalization */
kiln_status kn_cpu_ms_embed_layernorm(kn_kernel_ctx *c);           /* EmbedLayerNormalization */

/* contrib_attention.c */
kiln_status kn_cpu_ms_attention(kn_kernel_ctx *c);
kiln_status kn_cpu_ms_multihead_attention(kn_kernel_ctx *c);
kiln_status kn_cpu_ms_group_query_attention(kn_kernel_ctx *c);
kiln_status kn_cpu_ms_rotary_embedding(kn_kernel_ctx *c);

#endif

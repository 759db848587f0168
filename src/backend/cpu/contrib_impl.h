/* Kernels of the com.microsoft family (the table is in contrib.c). */
#ifndef KN_CONTRIB_IMPL_H
#define KN_CONTRIB_IMPL_H

#include "exec/kernel.h"

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

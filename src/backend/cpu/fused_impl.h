/* Internal interface of the CPU kernels of kiln's fused operators (src/backend/cpu/fused*.c). */
#ifndef KN_CPU_FUSED_IMPL_H
#define KN_CPU_FUSED_IMPL_H

#include "backend/cpu/cpu.h"
#include "ops/fused.h"

/* Applies the activation to n floats in place. */
void kn_fused_act(float *p, int64_t n, const kn_act_spec *a);
/* The same on `rows` rows of `cols` elements, each `ld` after the previous. */
void kn_fused_act_rows(float *p, int64_t rows, int64_t cols, int64_t ld, const kn_act_spec *a);

/* Accepts nodes whose tensor inputs are all float32 (the fused kernels' only type). */
bool kn_fused_supports_f32(const kn_node *node, const kn_type *const *in, int n_in, char *why, size_t cap);

/* fused_norm.c */
kiln_status kn_cpu_fused_layernorm(kn_kernel_ctx *c);
kiln_status kn_cpu_fused_rmsnorm(kn_kernel_ctx *c);

/* fused_attention.c */
kiln_status kn_cpu_fused_attention(kn_kernel_ctx *c);
/* kiln.Attention's attributes, read once (its prepare hook): the operand views (has[i]: 1 set, 0
 * none, -1 malformed: the call reads it again and says why), scale and nan_to_zero */
typedef struct kn_cpu_attn_prm {
    kn_attn_view v[4];
    int has[4];
    float scale;
    bool nan_to_zero;
} kn_cpu_attn_prm;
kiln_status kn_cpu_fused_attention_prepare(const kn_node *n, void *params);
bool kn_cpu_fused_attention_supports(const kn_node *node, const kn_type *const *in, int n_in, char *why, size_t cap);

/* fused_elementwise.c */
kiln_status kn_cpu_fused_elementwise(kn_kernel_ctx *c);
/* FusedElementwise's program, read and checked once (its prepare hook) */
typedef struct kn_chain_prm {
    bool ok; /* false: the call reads it again and says why not */
    kn_chain_program prog;
} kn_chain_prm;
kiln_status kn_chain_prepare(const kn_node *n, void *params);
bool kn_cpu_fused_elementwise_supports(const kn_node *node, const kn_type *const *in, int n_in, char *why, size_t cap);

/* fused_se.c: kiln.SqueezeExcite, its attributes read once (the prepare hook) */
typedef struct kn_cpu_se_prm {
    bool ok; /* false: they did not parse; why says what, for the call to report */
    kn_act_spec act, gate;
    bool nhwc;
    char why[160];
} kn_cpu_se_prm;
kiln_status kn_cpu_squeeze_excite_prepare(const kn_node *n, void *params);
kiln_status kn_cpu_fused_squeeze_excite(kn_kernel_ctx *c);

#endif

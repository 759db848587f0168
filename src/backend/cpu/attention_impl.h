/* The CPU attention engine shared by ai.onnx Attention and the com.microsoft attention operators:
 * softmax(scale * Q K^T (+ softcap, masks, biases)) V over float32 operands given as strided
 * views, so 3-D packed inputs (heads in the last dimension), 4-D inputs and packed QKV tensors
 * all run without a transpose. */
#ifndef KN_ATTENTION_IMPL_H
#define KN_ATTENTION_IMPL_H

#include "exec/kernel.h"
#include "ops/attention.h"
#include "util/threadpool.h"

#include <stdbool.h>
#include <stdint.h>

/* The node's attributes: the block kn_attn_attrs_prepare made at compile time, or *local read now. */
static inline kiln_status kn_attn_attrs_of(kn_kernel_ctx *c, kn_attn_attrs *local, const kn_attn_attrs **out) {
    return kn_ctx_params(c, kn_attn_attrs_prepare, local, (const void **)out);
}

/* A [batch, heads, seq, d] operand: element (b, h, s, x) is at p[b*sb + h*sh + s*ss + x]. */
typedef struct kn_attn_mat {
    const float *p;
    int64_t sb, sh, ss;
} kn_attn_mat;

/* A mask or bias broadcast over the scores [batch, q_heads, sq, skv]: element (b, h, i, j) is at
 * p[b*sb + h*sh + i*si + j*sj] (stride 0 where it broadcasts). p NULL: absent. */
typedef struct kn_attn_bcast {
    const void *p;
    int64_t sb, sh, si, sj;
} kn_attn_bcast;

typedef struct kn_attn {
    int64_t batch, q_heads, kv_heads; /* q head h reads kv head h / (q_heads / kv_heads) */
    int64_t sq, skv, dk, dv;
    kn_attn_mat q, k, v;
    float *y; /* output (b, h, i, x) at y[b*y_sb + h*y_sh + i*y_ss + x] */
    int64_t y_sb, y_sh, y_ss;
    float scale;   /* multiplies Q K^T */
    float softcap; /* > 0: s = softcap * tanh(s / softcap), before masks and biases */
    kn_attn_bcast bias, bias2; /* float additive biases */
    kn_attn_bcast keep;        /* uint8 mask: 0 = masked */
    /* Structural masks (intervals per query row; whole key blocks outside them are skipped when
     * `masked` is -inf): */
    int64_t mask_cols;       /* keys j >= mask_cols are masked (a mask shorter than the keys); -1 none */
    bool causal;             /* key j is masked when j > offset + i */
    int64_t left_window;     /* >= 0: key j masked when j < offset + i - left_window */
    int64_t right_window;    /* >= 0: key j masked when j > offset + i + right_window */
    const int64_t *offset;   /* per batch: position of query 0 among the keys; NULL = 0 */
    const int64_t *kv_end;   /* per batch: keys j >= kv_end[b] are masked; NULL = none */
    const int64_t *kv_begin; /* per batch: keys j < kv_begin[b] are masked; NULL = none */
    float masked;            /* added to a masked score: -INFINITY, or a finite filter value */
    bool zero_masked_rows;   /* a query row with every key masked gives 0 (ai.onnx semantics) */
    /* Reference rounding: FLOAT16/BFLOAT16 round scores and probabilities at each step the way
     * a computation in that type does (the ONNX reference's results for half inputs); FLOAT (or
     * DOUBLE) computes in float. Q and K must then already hold Q*sqrt(scale) etc. rounded. */
    kiln_dtype round_to;
    kiln_dtype softmax_to; /* the type of the softmax stage (UNDEFINED = round_to) */
    /* Optional copy of the scores, [batch, q_heads, sq, skv] contiguous, at stage qk_mode:
     * 0 = scale*QK^T, 1 = after softcap, 2 = after masks and biases, 3 = probabilities. */
    float *qk;
    int qk_mode;
    /* Optional attention sink, per query head: a logit that joins every softmax's denominator
     * with a zero value vector (com.microsoft GroupQueryAttention's smooth_softmax and head_sink).
     * Float computation only (round_to FLOAT). */
    const float *sink;
} kn_attn;

/* Fills *a with the defaults: no masks, windows unbounded, masked = -inf, float rounding. */
void kn_attn_init(kn_attn *a);
/* Runs the attention on the pool (threads over batch x heads x query blocks). */
kiln_status kn_attn_run(kn_threadpool *pool, const kn_attn *a);

/* Broadcast strides of a tensor of rank <= 4, right-aligned against [batch, heads, sq, cols]:
 * false when a dimension is neither 1 nor the target's. */
bool kn_attn_bcast_strides(const int64_t *dims, int rank, int64_t batch, int64_t heads, int64_t sq,
                           int64_t cols, kn_attn_bcast *out);

/* A float32 copy of a float/float16/bfloat16/double tensor (NULL on OOM). */
float *kn_attn_to_float(const kn_tensor *t);
/* Writes n floats into a tensor of type dtype (float/half/double) at element offset 0. */
void kn_attn_from_float(const float *src, kn_tensor *dst, int64_t n);
/* Rounds x to the precision of t (FLOAT16/BFLOAT16; other types unchanged). */
float kn_attn_round(kiln_dtype t, float x);

/* Rotary embedding of one head's first 2 * half values: pairs (x[i], x[i + half]), or (x[2i],
 * x[2i + 1]) when interleaved, rotated by the angle whose cosine and sine are cs[i], sn[i]. y may
 * be x. (ai.onnx and com.microsoft RotaryEmbedding, GroupQueryAttention's do_rotary.) */
void kn_rotary_rotate(const float *x, float *y, const float *cs, const float *sn, int64_t half, bool interleaved);

/* Kernels of the attention family outside attention.c (src/backend/cpu/attention_misc.c,
 * attention_flex.c). */
kiln_status kn_cpu_rotary_embedding(kn_kernel_ctx *c);
kiln_status kn_cpu_swiglu(kn_kernel_ctx *c);
kiln_status kn_cpu_linear_attention(kn_kernel_ctx *c);
kiln_status kn_cpu_causal_conv_with_state(kn_kernel_ctx *c);
kiln_status kn_cpu_flex_attention(kn_kernel_ctx *c);

#endif

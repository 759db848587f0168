/* Internals of the CPU nn family: kernel entry points (one file each group) and the small math
 * and element-conversion helpers they share. */
#ifndef KN_CPU_NN_INTERNAL_H
#define KN_CPU_NN_INTERNAL_H

#include "backend/cpu/cpu.h"
#include "ops/nn.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- kernels ---- */
kiln_status kn_cpu_reduce(kn_kernel_ctx *c);      /* every Reduce* op */
/* The Reduce* kernel's operator kind and axes form (its prepare hook) */
typedef struct kn_reduce_prm {
    int kind;             /* RK_* (nn_reduce.c), -1: not a reduction */
    bool axes_from_input; /* axes are input 1 (ReduceSum from opset 13, the rest from 18) */
    kn_nn_reduce_attr attr; /* axes (the attribute form), noop_with_empty_axes */
} kn_reduce_prm;
kiln_status kn_reduce_prepare(const kn_node *n, void *params);
/* ArgMax and ArgMin's attributes (their prepare hook) */
typedef struct kn_argminmax_prm {
    int is_max, last;
    int64_t axis;
} kn_argminmax_prm;
kiln_status kn_argminmax_prepare(const kn_node *n, void *params);
/* TopK's attributes (its prepare hook) */
typedef struct kn_topk_prm {
    int64_t k; /* opset < 10: the attribute; later an input */
    int64_t axis;
    bool largest, sorted;
} kn_topk_prm;
kiln_status kn_topk_prepare(const kn_node *n, void *params);
kiln_status kn_cpu_argminmax(kn_kernel_ctx *c);   /* ArgMax, ArgMin */
kiln_status kn_cpu_topk(kn_kernel_ctx *c);
kiln_status kn_cpu_softmax(kn_kernel_ctx *c);     /* Softmax, LogSoftmax */
kiln_status kn_cpu_hardmax(kn_kernel_ctx *c);
/* Softmax, LogSoftmax and Hardmax's attributes (their prepare hook, kn_params_fn) */
typedef struct kn_softmax_prm {
    int64_t axis;
    bool old; /* opset < 13: the input coerced to 2-D at the axis */
    bool log; /* LogSoftmax */
} kn_softmax_prm;
kiln_status kn_softmax_prepare(const kn_node *n, void *params);
/* One float row's softmax (or log-softmax), y = x allowed: the Softmax operator's row kernel
 * (AVX-512 where built for it), also kiln.Attention's. A NaN in the row makes every output NaN. */
void kn_softmax_row_f32(const float *x, float *y, int64_t n, bool take_log);
/* Softmax (not log) of `rows` rows of n floats in place, row stride ld: kn_softmax_row_f32's
 * results, four rows at a time where AVX-512 runs (the rows' dependency chains interleaved). */
void kn_softmax_rows_f32(float *x, int64_t rows, int64_t n, int64_t ld);
/* The same rows' softmax rounded to bf16 (nearest even) into y16 (row stride ldy) in its last pass
 * (x is left holding scratch): kn_softmax_rows_f32's results rounded as the bf16 GEMM's packing
 * rounds them (vcvtne2ps2bf16), bit for bit (the rows past a multiple of four through
 * kn_f32_to_bf16, which keeps the subnormals that instruction flushes). kiln.Attention's probabilities under precision=bf16,
 * read by the AMX tiles as they are; only where the CPU has AVX512_BF16. */
void kn_softmax_rows_f32_to_bf16(float *x, int64_t rows, int64_t n, int64_t ld, uint16_t *y16, int64_t ldy);
/* NegativeLogLikelihoodLoss's and SoftmaxCrossEntropyLoss's attributes (their prepare hook) */
typedef struct kn_loss_prm {
    int reduction; /* 0 mean, 1 sum, 2 none */
    bool has_ignore;
    int64_t ignore;
} kn_loss_prm;
kiln_status kn_loss_prepare(const kn_node *n, void *params);
kiln_status kn_cpu_nll_loss(kn_kernel_ctx *c);
kiln_status kn_cpu_sce_loss(kn_kernel_ctx *c);
kiln_status kn_cpu_layernorm(kn_kernel_ctx *c);
/* LayerNormalization and RMSNormalization's attributes (their prepare hook) */
typedef struct kn_norm_rows_prm {
    int64_t axis;
    float eps;
} kn_norm_rows_prm;
kiln_status kn_norm_rows_prepare(const kn_node *n, void *params);
/* The other normalisations' attributes (one hook, nn_norm.c): BatchNormalization's training form
 * (training: 1, 0, or -1 when the outputs decide, opsets 7-13), epsilon and momentum; the epsilon
 * of InstanceNormalization and GroupNormalization; GroupNormalization's num_groups;
 * LpNormalization's p and axis; MeanVarianceNormalization's axes; LRN's alpha, beta, bias, size. */
typedef struct kn_nn_norm_prm {
    int training;
    float eps, momentum;
    int64_t num_groups, p, axis, size;
    const int64_t *axes; /* the node's; NULL: absent */
    int n_axes;
    float alpha, beta, bias;
} kn_nn_norm_prm;
kiln_status kn_nn_norm_prepare(const kn_node *n, void *params);
kiln_status kn_cpu_rmsnorm(kn_kernel_ctx *c);
kiln_status kn_cpu_batchnorm(kn_kernel_ctx *c);
kiln_status kn_cpu_instancenorm(kn_kernel_ctx *c);
kiln_status kn_cpu_groupnorm(kn_kernel_ctx *c);
kiln_status kn_cpu_lpnorm(kn_kernel_ctx *c);
kiln_status kn_cpu_mvn(kn_kernel_ctx *c);
kiln_status kn_cpu_lrn(kn_kernel_ctx *c);
kiln_status kn_cpu_rnn(kn_kernel_ctx *c);         /* RNN, GRU, LSTM */
/* The RNN family's attributes, read once at compile time by kn_cpu_rnn_prepare (RNN, GRU, LSTM,
 * com.microsoft DynamicQuantizeLSTM): direction, layout, hidden_size, clip and the gate options
 * (a bad one fails the hook, so the kernel reports it at run time as before), and the activations
 * per direction with their alpha/beta resolved (acts_ok false: the list is wrong, and the kernel
 * reads it again for the message). */
typedef struct kn_rnn_act {
    int kind;
    float alpha, beta;
} kn_rnn_act;
typedef struct kn_cpu_rnn_prm {
    kn_nn_rnn_attrs at;
    int gates;
    bool acts_ok;
    kn_rnn_act acts[6];
} kn_cpu_rnn_prm;
kiln_status kn_cpu_rnn_prepare(const kn_node *n, void *params);
/* An LSTM whose W ([nd, I, 4H]) and R ([nd, H, 4H]) are quantised (com.microsoft
 * DynamicQuantizeLSTM): its two products go through gemm, which quantises A (M x K floats)
 * dynamically and adds A x weights of direction d (which 0: W, 1: R) into out (M x 4H, row
 * stride ldo). The rest is kn_cpu_rnn's LSTM. */
typedef struct kn_rnn_qgemm {
    kiln_status (*gemm)(const struct kn_rnn_qgemm *q, kn_threadpool *pool, int which, int d, const float *A, int64_t M,
                        int64_t K, float *out, int64_t ldo);
    const void *ctx;
    /* ONNX Runtime's LSTM arithmetic, which the quantisation steps amplify: the sigmoid and tanh
     * activations (when the node uses them), and the biases added after the products */
    void (*sigmoid)(float *v, int64_t n); /* in place over v[0..n) */
    void (*tanh)(float *v, int64_t n);
} kn_rnn_qgemm;
kiln_status kn_cpu_rnn_quantised(kn_kernel_ctx *c, const kn_rnn_qgemm *q);
kiln_status kn_cpu_stacked_lstm(kn_kernel_ctx *c); /* kiln.StackedLSTM */
/* kiln.StackedLSTM's hook: the block of its layers' LSTM (no attributes), handed to each layer */
kiln_status kn_cpu_stacked_lstm_prepare(const kn_node *n, void *params);

/* ---- element conversion (any numeric or bool dtype) ---- */
void kn_nn_to_f32(const kn_tensor *t, float *dst);
void kn_nn_from_f32(kn_tensor *t, const float *src);
void kn_nn_to_f64(const kn_tensor *t, double *dst);
void kn_nn_from_f64(kn_tensor *t, const double *src);
void kn_nn_to_i64(const kn_tensor *t, int64_t *dst);
void kn_nn_from_i64(kn_tensor *t, const int64_t *src);

/* A float view of a tensor: the tensor's own memory when it is float, else a converted copy
 * (free with kn_nn_release). NULL on out-of-memory. */
float *kn_nn_f32_view(const kn_tensor *t);
void kn_nn_release(const kn_tensor *t, const void *view);
/* Float scratch for an output: its own memory when float, else malloc'ed (commit then release). */
float *kn_nn_f32_out(kn_tensor *t);
void kn_nn_f32_commit(kn_tensor *t, float *buf); /* converts back and frees when not the tensor's */

/* The compute type of a dtype: FLOAT (float, float16, bfloat16), DOUBLE, or INT64 (integers
 * and bool); UNDEFINED for anything else. */
kiln_dtype kn_nn_compute_type(kiln_dtype t);

/* Maximum / minimum of n >= 1 floats; a NaN element makes the result NaN (like numpy). */
float kn_nn_row_maxf(const float *p, int64_t n);
float kn_nn_row_minf(const float *p, int64_t n);

/* a*b+c as one fused operation where the target has FMA (ISO C mode does not contract) */
#if defined(__FMA__)
#define KN_FMAF(a, b, c) fmaf((a), (b), (c))
#else
#define KN_FMAF(a, b, c) ((a) * (b) + (c))
#endif

/* ---- vectorisable math ----
 * Branch-free so that loops calling them vectorise (-O3). expf: Cephes-style range reduction
 * (x = n ln2 + r) and a degree-6 polynomial, about 2 ulp; exact 0 below the underflow limit,
 * NaN kept. Above x = 88.376 it returns exp(88.376) = 2.4e38 rather than inf: the callers
 * (softmax with x - max <= 0, sigmoid, tanh, ELU, log-sum-exp) never need the overflow, and
 * dropping that select keeps the loop to plain min/max clamps. */
static inline float kn_nn_expf(float x) {
    const float hi = 88.3762626647949f, lo = -87.3365447505531f;
    /* written so they become minps/maxps (a NaN x clamps to a number; restored at the end) */
    float xc = x < hi ? x : hi;
    xc = xc > lo ? xc : lo;
    /* n = round(x / ln2) by the 1.5*2^23 trick (no float->int conversion, so NaN is no UB) */
    const float magic = 12582912.0f;
    float t = KN_FMAF(xc, 1.44269504088896341f, magic);
    float fn = t - magic;
    uint32_t tb, mb;
    memcpy(&tb, &t, 4);
    memcpy(&mb, &magic, 4);
    int32_t n = (int32_t)(tb - mb);
    float r = KN_FMAF(fn, -0.693359375f, xc);
    r = KN_FMAF(fn, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = KN_FMAF(p, r, 1.3981999507e-3f);
    p = KN_FMAF(p, r, 8.3334519073e-3f);
    p = KN_FMAF(p, r, 4.1665795894e-2f);
    p = KN_FMAF(p, r, 1.6666665459e-1f);
    p = KN_FMAF(p, r, 5.0000001201e-1f);
    float e = KN_FMAF(p * r, r, r) + 1.0f;
    uint32_t eb;
    memcpy(&eb, &e, 4);
    eb += (uint32_t)n << 23;
    memcpy(&e, &eb, 4);
    e = x < lo ? 0.0f : e;
    return x != x ? x : e;
}

static inline float kn_nn_sigmoidf(float x) { return 1.0f / (1.0f + kn_nn_expf(-x)); }

/* tanh: an odd polynomial near 0 (where 1 - 2/(e^2x + 1) would cancel), the exp form elsewhere. */
static inline float kn_nn_tanhf(float x) {
    float ax = x < 0 ? -x : x;
    float z = x * x;
    float ps = -5.70498872745e-3f;
    ps = KN_FMAF(ps, z, 2.06390887954e-2f);
    ps = KN_FMAF(ps, z, -5.37397155531e-2f);
    ps = KN_FMAF(ps, z, 1.33314422036e-1f);
    ps = KN_FMAF(ps, z, -3.33332819422e-1f);
    float small = KN_FMAF(x * z, ps, x);
    float axc = ax > 10.0f ? 10.0f : ax; /* tanh(10) rounds to 1 */
    float big = 1.0f - 2.0f / (kn_nn_expf(2.0f * axc) + 1.0f);
    big = x < 0 ? -big : big;
    float r = ax < 0.625f ? small : big;
    return x != x ? x : r;
}

#endif

/* Internal to the CPU kernels of the quantised com.microsoft operators (qcontrib.c,
 * qcontrib_linear.c): helpers they share. */
#ifndef KN_CPU_QCONTRIB_IMPL_H
#define KN_CPU_QCONTRIB_IMPL_H

#include "backend/cpu/cpu.h"

#include <stdbool.h>
#include <stdint.h>

/* The family's attributes, read once at compile time by kn_cpu_qc_prepare (every kernel of
 * kn_cpu_qcontrib but QAttention, which takes the attention family's block): MatMulNBits' K, N,
 * bits, block_size and accuracy_level; QGemm's transA, transB and alpha; QLinearLeakyRelu's alpha;
 * QLinearConcat's axis; QLinearSoftmax's opset and axis; the pools' channels_last and
 * count_include_pad. */
typedef struct kn_cpu_qc_prm {
    int64_t K, N, bits, block_size, accuracy_level;
    int64_t opset, axis;
    float alpha;
    bool trans_a, trans_b, channels_last, count_include_pad;
} kn_cpu_qc_prm;
kiln_status kn_cpu_qc_prepare(const kn_node *n, void *params);
/* c's block (the plan's, or `local` filled now) */
#define KN_QC_PRM(c, local, out) KN_TRY(kn_ctx_params((c), kn_cpu_qc_prepare, (local), (const void **)(out)))

/* Input i, or NULL when omitted. */
const kn_tensor *kn_qc_opt(const kn_kernel_ctx *c, int i);
/* Element i of an int8 or uint8 tensor. */
int32_t kn_qc_q(const kn_tensor *t, int64_t i);
/* Element i of a float, float16 or double scale, as float. */
float kn_qc_scale(const kn_tensor *t, int64_t i);
/* ONNX Runtime's requantisation of a float value v (already divided by the output scale):
 * clamped to the type's range less the zero point (NaN to the minimum), rounded half to even,
 * plus the zero point, into *out. */
float kn_qc_requant(float v, int32_t zp, bool is_signed, int32_t *out);

/* qcontrib_linear.c */
/* MLAS's logistic and tanh (their FMA3 kernels' rational approximations), as ONNX Runtime's
 * QLinearSigmoid tables and quantised LSTM compute them */
float kn_qc_mlas_logistic(float x);
float kn_qc_mlas_tanh(float x);
/* the two over v[0..n) in place, bit for bit the scalar forms */
void kn_qc_mlas_logistic_n(float *v, int64_t n);
void kn_qc_mlas_tanh_n(float *v, int64_t n);
kiln_status kn_cpu_qlinear_add(kn_kernel_ctx *c);
kiln_status kn_cpu_qlinear_mul(kn_kernel_ctx *c);
kiln_status kn_cpu_qlinear_sigmoid(kn_kernel_ctx *c);
kiln_status kn_cpu_qlinear_leaky_relu(kn_kernel_ctx *c);
kiln_status kn_cpu_qlinear_concat(kn_kernel_ctx *c);
kiln_status kn_cpu_qlinear_softmax(kn_kernel_ctx *c);
kiln_status kn_cpu_qlinear_average_pool(kn_kernel_ctx *c);
kiln_status kn_cpu_qlinear_global_average_pool(kn_kernel_ctx *c);

#endif

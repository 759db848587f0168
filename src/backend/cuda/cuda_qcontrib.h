/* The quantised com.microsoft operators on CUDA: MatMulNBits and the QLinear operators (Add, Mul,
 * Sigmoid, LeakyRelu, Concat, Softmax, AveragePool, GlobalAveragePool). The launchers of
 * cu_qcontrib.cu (plain types only) and the C side's entry points (cuda_ops_qcontrib.c), which
 * cuda_ops_quant.c lists in its kernel table.
 *
 * The arithmetic is the CPU kernels' (src/backend/cpu/qcontrib.c, qcontrib_linear.c), which
 * reproduce ONNX Runtime's CPU outputs: the same float32 operations in the same order, written
 * with the _rn intrinsics so that nvcc contracts nothing into a fused multiply-add the CPU does not
 * do, rounding half to even and the same saturation. Scales and zero points stay on the device (read
 * by the kernels), so nothing is read back to the host and every launch can be captured in a graph. */
#ifndef KN_CUDA_QCONTRIB_H
#define KN_CUDA_QCONTRIB_H

#include "backend/cuda/cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- MatMulNBits ---- */

/* B [N, kb, bs * bits / 8] (codes of k at bit (k % bs) * bits of block k / bs, low bits first);
 * scales [N * kb] of s_dt (float, float16); zero points: packed uint8 [N, ceil(kb * bits / 8)]
 * (zp_dt UINT8), or [N * kb] of a float type, or NULL (2^(bits - 1)); g_idx [K] int32 or NULL
 * (then the packed zero points are not read, as ONNX Runtime's CPU kernel does). Out-of-range
 * g_idx entries are clamped into [0, kb) (the C side reports them for constant g_idx). */
typedef struct kn_cu_nbits {
    int64_t M, N, K, bs, kb;
    int bits;
    const uint8_t *B;
    const void *scales;
    kiln_dtype s_dt;
    const void *zp;
    kiln_dtype zp_dt;
    const int32_t *g_idx;
    const void *bias; /* [N] of a_dt, or NULL */
    kiln_dtype b_dt;
} kn_cu_nbits;

/* Y [M, N] (y_dt: float or float16) = A [M, K] (a_dt: float or float16) x W^T + bias, in float32,
 * straight from the packed weights (the decode path: weights read ceil(M / 8) times). */
cudaError_t kn_cu_nbits_gemv(const kn_cu_nbits *p, kiln_dtype a_dt, const void *A, kiln_dtype y_dt, void *Y,
                             cudaStream_t s);
/* W [N, K] of w_dt (float or float16) = (code - zero point) * scale (for the cuBLASLt path). */
cudaError_t kn_cu_nbits_dequant(const kn_cu_nbits *p, kiln_dtype w_dt, void *W, cudaStream_t s);
/* accuracy_level 4 as ONNX Runtime's CPU int8 compute type: A quantised per row and block to
 * int8 (aq [M, K], scales sa [M, kb] = max|a| / 127, codes round(a * 127 / max|a|) half to even),
 * then integer block products scaled by both blocks' scales (zero points integers). */
cudaError_t kn_cu_nbits_quant_a(kiln_dtype a_dt, const void *A, int64_t M, int64_t K, int64_t bs, int64_t kb,
                                int8_t *aq, float *sa, cudaStream_t s);
cudaError_t kn_cu_nbits_gemv_int8(const kn_cu_nbits *p, const int8_t *aq, const float *sa, kiln_dtype y_dt, void *Y,
                                  cudaStream_t s);

/* ---- the QLinear operators: uint8 or int8 data (is_signed), per-tensor scales of a float type
 * (FLOAT, FLOAT16, DOUBLE; read as float) and zero points of the data's type (NULL: 0) ---- */

typedef struct kn_cu_qparam {
    const void *scale;
    kiln_dtype s_dt;
    const void *zp; /* one int8/uint8 value, or NULL */
} kn_cu_qparam;

/* QLinearAdd / QLinearMul over a broadcast view (strides[0] A, strides[1] B); a_scalar: the CPU's
 * operand order for a scalar A span (see qcontrib_linear.c). */
cudaError_t kn_cu_qlinear_binary(bool mul, bool is_signed, const void *A, kn_cu_qparam a, const void *B,
                                 kn_cu_qparam b, void *C, kn_cu_qparam c, const kn_cu_view *v, bool a_scalar,
                                 cudaStream_t s);
/* Table operators: fn 0 identity (requantisation), 1 MLAS's logistic, 2 leaky relu (alpha) */
cudaError_t kn_cu_qlinear_table(int fn, float alpha, bool is_signed, const void *X, kn_cu_qparam x, void *Y,
                                kn_cu_qparam y, int64_t n, cudaStream_t s);
/* One input of QLinearConcat: X [outer, xrow] into Y [outer, yrow] at column off, copied when its
 * scale and zero point equal the output's, else requantised. */
cudaError_t kn_cu_qlinear_concat_part(bool is_signed, const void *X, kn_cu_qparam x, void *Y, kn_cu_qparam y,
                                      int64_t outer, int64_t xrow, int64_t yrow, int64_t off, cudaStream_t s);
/* QLinearSoftmax over rows of D elements at stride `inner` ([outer, D, inner]) */
cudaError_t kn_cu_qlinear_softmax(bool is_signed, const void *X, kn_cu_qparam x, void *Y, kn_cu_qparam y,
                                  int64_t outer, int64_t D, int64_t inner, cudaStream_t s);
/* QLinearGlobalAveragePool: X [N, C, img] or channels last [N, img, C] */
cudaError_t kn_cu_qlinear_gap(bool is_signed, const void *X, kn_cu_qparam x, void *Y, kn_cu_qparam y, int64_t N,
                              int64_t C, int64_t img, bool channels_last, cudaStream_t s);
/* QLinearAveragePool over 1-3 spatial dims (no dilation) */
typedef struct kn_cu_qpool {
    int nsp;
    int64_t n, c;
    int64_t in[3], out[3], k[3], stride[3], pad_b[3];
    bool channels_last, count_include_pad;
} kn_cu_qpool;
cudaError_t kn_cu_qlinear_avgpool(bool is_signed, const void *X, kn_cu_qparam x, void *Y, kn_cu_qparam y,
                                  const kn_cu_qpool *p, cudaStream_t s);

#ifdef __cplusplus
}

#else /* the C side */

#include "backend/cuda/cuda_backend.h"

/* The attributes the quantised kernels (this file's and cuda_ops_quant.c's) read, read once when the
 * session is compiled: one prepare hook for their table entries (kn_cu_q_prepare). */
typedef struct kn_cu_q_prm {
    float alpha;            /* QLinearLeakyRelu (0.01) */
    int64_t axis;           /* QLinearConcat (0) */
    bool channels_last;     /* QLinear(Global)AveragePool (0) */
    bool count_include_pad; /* QLinearAveragePool (0) */
    int64_t accuracy_level; /* MatMulNBits (0) */
    int64_t precision;      /* QuantizeLinear (0: absent) */
    bool saturate;          /* QuantizeLinear to float8 (1) */
    int64_t K, N, bits;     /* MatMulNBits (0, 0, 4) */
    int64_t block_size;     /* MatMulNBits, QuantizeLinear, DequantizeLinear (0) */
    int64_t quant_axis;     /* QuantizeLinear, DequantizeLinear (1) */
    int64_t opset, softmax_axis; /* QLinearSoftmax: its opset attribute (-1), axis (1 before 13, else -1) */
} kn_cu_q_prm;
kiln_status kn_cu_q_prepare(const kn_node *n, void *params);

kiln_status kn_cu_run_matmul_nbits(kn_cuda *cu, kn_kernel_ctx *c);
bool kn_cu_matmul_nbits_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap);
kiln_status kn_cu_run_qlinear_add(kn_cuda *cu, kn_kernel_ctx *c);
kiln_status kn_cu_run_qlinear_mul(kn_cuda *cu, kn_kernel_ctx *c);
kiln_status kn_cu_run_qlinear_sigmoid(kn_cuda *cu, kn_kernel_ctx *c);
kiln_status kn_cu_run_qlinear_leaky_relu(kn_cuda *cu, kn_kernel_ctx *c);
kiln_status kn_cu_run_qlinear_concat(kn_cuda *cu, kn_kernel_ctx *c);
kiln_status kn_cu_run_qlinear_softmax(kn_cuda *cu, kn_kernel_ctx *c);
kiln_status kn_cu_run_qlinear_average_pool(kn_cuda *cu, kn_kernel_ctx *c);
kiln_status kn_cu_run_qlinear_global_average_pool(kn_cuda *cu, kn_kernel_ctx *c);
/* every QLinear operator: int8/uint8 data, float scales */
bool kn_cu_qlinear_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap);

#define KN_CU_Q_ENTRY(op, run, supports) {"com.microsoft", op, run, supports, 0, 0, 0, KN_CU_PARAMS(kn_cu_q_prepare, kn_cu_q_prm)}
#define KN_CUDA_QCONTRIB_KERNELS                                                                              \
    KN_CU_Q_ENTRY("MatMulNBits", kn_cu_run_matmul_nbits, kn_cu_matmul_nbits_supports),                        \
    KN_CU_Q_ENTRY("QLinearAdd", kn_cu_run_qlinear_add, kn_cu_qlinear_supports),                               \
    KN_CU_Q_ENTRY("QLinearMul", kn_cu_run_qlinear_mul, kn_cu_qlinear_supports),                               \
    KN_CU_Q_ENTRY("QLinearSigmoid", kn_cu_run_qlinear_sigmoid, kn_cu_qlinear_supports),                       \
    KN_CU_Q_ENTRY("QLinearLeakyRelu", kn_cu_run_qlinear_leaky_relu, kn_cu_qlinear_supports),                  \
    KN_CU_Q_ENTRY("QLinearConcat", kn_cu_run_qlinear_concat, kn_cu_qlinear_supports),                         \
    KN_CU_Q_ENTRY("QLinearSoftmax", kn_cu_run_qlinear_softmax, kn_cu_qlinear_supports),                       \
    KN_CU_Q_ENTRY("QLinearAveragePool", kn_cu_run_qlinear_average_pool, kn_cu_qlinear_supports),              \
    KN_CU_Q_ENTRY("QLinearGlobalAveragePool", kn_cu_run_qlinear_global_average_pool, kn_cu_qlinear_supports),

#endif

#endif

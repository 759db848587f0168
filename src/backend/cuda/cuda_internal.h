/* The CUDA backend's internal interface: its state, its kernel table entry, and the launchers the
 * .cu files export to the C side. The .cu side sees only plain types (pointers, dims, dtype
 * numbers, the stream); the C side does the ONNX semantics (attributes, shapes, opsets). */
#ifndef KN_CUDA_INTERNAL_H
#define KN_CUDA_INTERNAL_H

#include "kiln.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KN_CU_MAX_RANK KILN_MAX_RANK

/* Broadcast/strided view: output dims and, per operand, its element strides (0 on broadcast
 * dims). Collapsed so adjacent dims that move together are merged. */
typedef struct kn_cu_view {
    int rank;
    int64_t dims[KN_CU_MAX_RANK];
    int64_t strides[3][KN_CU_MAX_RANK];
} kn_cu_view;

/* Unary operators (elementwise, same type in and out unless noted). */
enum {
    KN_CU_ABS, KN_CU_NEG, KN_CU_EXP, KN_CU_LOG, KN_CU_SQRT, KN_CU_RECIP, KN_CU_FLOOR, KN_CU_CEIL,
    KN_CU_ROUND, KN_CU_SIGN, KN_CU_ERF, KN_CU_TANH, KN_CU_SIGMOID, KN_CU_RELU, KN_CU_LEAKYRELU,
    KN_CU_ELU, KN_CU_SELU, KN_CU_HARDSIGMOID, KN_CU_HARDSWISH, KN_CU_SOFTPLUS, KN_CU_SOFTSIGN,
    KN_CU_SIN, KN_CU_COS, KN_CU_TAN, KN_CU_ASIN, KN_CU_ACOS, KN_CU_ATAN, KN_CU_SINH, KN_CU_COSH,
    KN_CU_ASINH, KN_CU_ACOSH, KN_CU_ATANH, KN_CU_GELU, KN_CU_GELU_TANH, KN_CU_MISH,
    KN_CU_THRESHOLDEDRELU, KN_CU_CELU, KN_CU_SHRINK, KN_CU_CLIP, KN_CU_IDENTITY, KN_CU_BITNOT,
    KN_CU_NOT, KN_CU_SWISH, KN_CU_NAN_TO_ZERO,
    KN_CU_ISNAN, /* -> bool */
    KN_CU_ISINF, /* -> bool; a = detect_positive, b = detect_negative */
    KN_CU_UNARY_COUNT_
};

/* Binary operators with broadcasting. */
enum {
    KN_CU_ADD, KN_CU_SUB, KN_CU_MUL, KN_CU_DIV, KN_CU_POW, KN_CU_MOD, KN_CU_FMOD, KN_CU_MAX, KN_CU_MIN,
    KN_CU_PRELU, KN_CU_SHL, KN_CU_SHR, KN_CU_BITAND, KN_CU_BITOR, KN_CU_BITXOR,
    /* -> bool */
    KN_CU_EQ, KN_CU_LT, KN_CU_LE, KN_CU_GT, KN_CU_GE, KN_CU_AND, KN_CU_OR, KN_CU_XOR,
    KN_CU_BINARY_COUNT_
};

/* Reductions. */
enum {
    KN_CU_RSUM, KN_CU_RMEAN, KN_CU_RMAX, KN_CU_RMIN, KN_CU_RPROD, KN_CU_RL1, KN_CU_RL2, KN_CU_RLOGSUM,
    KN_CU_RLOGSUMEXP, KN_CU_RSUMSQUARE,
};

#ifdef __cplusplus
extern "C" {
#endif

/* Every launcher returns the launch's cudaError_t (cudaSuccess when nothing went wrong). */

/* elementwise (cu_eltwise.cu) */
cudaError_t kn_cu_unary(int op, kiln_dtype dt, const void *x, void *y, int64_t n, float a, float b, cudaStream_t s);
/* out = a op b over view v (strides[0] = a, strides[1] = b); y's type: bool for comparisons */
cudaError_t kn_cu_binary(int op, kiln_dtype dt, const void *a, const void *b, void *y, const kn_cu_view *v,
                         cudaStream_t s);
cudaError_t kn_cu_where(kiln_dtype dt, const void *cond, const void *x, const void *y, void *out,
                        const kn_cu_view *v, cudaStream_t s);
cudaError_t kn_cu_cast(kiln_dtype from, kiln_dtype to, const void *x, void *y, int64_t n, cudaStream_t s);
/* casts where either side is a float8 type (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ); others as kn_cu_cast */
cudaError_t kn_cu_cast_f8(kiln_dtype from, kiln_dtype to, const void *x, void *y, int64_t n, bool saturate,
                          cudaStream_t s);
/* clip with per-tensor bounds given as doubles (NaN = no bound) */
cudaError_t kn_cu_clip(kiln_dtype dt, const void *x, void *y, int64_t n, double lo, double hi, cudaStream_t s);
/* y = x strided (view strides[0]); any element size 1, 2, 4, 8 or 16 */
cudaError_t kn_cu_copy_view(size_t esize, const void *x, int64_t x_offset, void *y, const kn_cu_view *v,
                            cudaStream_t s);
/* fill n elements of size esize with the bytes at value */
cudaError_t kn_cu_fill(size_t esize, const void *value, void *y, int64_t n, cudaStream_t s);
/* y = scale * x + shift over float-type elements, for Gemm's beta*C and similar */
cudaError_t kn_cu_scale(kiln_dtype dt, const void *x, void *y, int64_t n, float scale, cudaStream_t s);
/* bias + activation over rows: y[i, j] = act(y[i, j] + bias[j]) (bias may be NULL); act: 0 none,
 * 1 relu */
cudaError_t kn_cu_bias_act(kiln_dtype dt, void *y, const void *bias, int64_t rows, int64_t cols, int64_t inner,
                           int act, float alpha, float beta, cudaStream_t s);

/* Epilogue of the fused linear operators: y = act(y + bias + z). bias has n_bias values: 0 (none),
 * 1 (a scalar) or one per column (index i % cols, or (i / inner) % cols when inner > 1); z (may be
 * NULL) has y's shape. act: the kn_act numbering of src/ops/fused.h (0 none, 1 relu, 2 leaky relu
 * (p0), 3 clip (p0, p1), 4 sigmoid, 5 tanh, 6 hard sigmoid (p0, p1), 7 hard swish, 8 silu,
 * 9 gelu, 10 gelu tanh). */
cudaError_t kn_cu_epilogue(kiln_dtype dt, void *y, const void *bias, int64_t n_bias, int64_t cols, int64_t inner,
                           const void *z, int act, float p0, float p1, int64_t n, cudaStream_t s);

/* data movement (cu_data.cu) */
cudaError_t kn_cu_gather(size_t esize, const void *data, const void *idx, bool idx64, void *y, int64_t outer,
                         int64_t axis_len, int64_t n_idx, int64_t inner, cudaStream_t s);
cudaError_t kn_cu_gather_elements(size_t esize, const void *data, const void *idx, bool idx64, void *y,
                                  int rank, const int64_t *data_dims, const int64_t *idx_dims, int axis,
                                  cudaStream_t s);
/* scatter_elements: y already holds data; reduction 0 none, 1 add, 2 mul, 3 max, 4 min */
cudaError_t kn_cu_scatter_elements(kiln_dtype dt, void *y, const void *idx, bool idx64, const void *upd, int rank,
                                   const int64_t *y_dims, const int64_t *idx_dims, int axis, int reduction,
                                   cudaStream_t s);
cudaError_t kn_cu_gather_nd(size_t esize, const void *data, const void *idx, void *y, int64_t batch,
                            int64_t n_per_batch, int k, const int64_t *data_dims, int data_rank, int batch_dims,
                            int64_t slice, cudaStream_t s);
cudaError_t kn_cu_scatter_nd(kiln_dtype dt, void *y, const void *idx, const void *upd, int64_t n_upd, int k,
                             const int64_t *y_dims, int y_rank, int64_t slice, int reduction, cudaStream_t s);
/* pad modes: 0 constant, 1 reflect, 2 edge, 3 wrap */
cudaError_t kn_cu_pad(size_t esize, const void *x, void *y, int rank, const int64_t *x_dims, const int64_t *y_dims,
                      const int64_t *pads_begin, int mode, const void *value, cudaStream_t s);
cudaError_t kn_cu_tile(size_t esize, const void *x, void *y, int rank, const int64_t *x_dims, const int64_t *y_dims,
                       cudaStream_t s);
cudaError_t kn_cu_range(kiln_dtype dt, double start, double delta, int64_t istart, int64_t idelta, void *y, int64_t n,
                        cudaStream_t s);
/* cumulative sum (prod when product) along the middle dim of [outer, len, inner] */
cudaError_t kn_cu_cumulative(kiln_dtype dt, const void *x, void *y, int64_t outer, int64_t len, int64_t inner,
                             bool exclusive, bool reverse, bool product, cudaStream_t s);
cudaError_t kn_cu_trilu(size_t esize, const void *x, void *y, int64_t batch, int64_t rows, int64_t cols, int64_t k,
                        bool upper, cudaStream_t s);
/* one-hot: off/on are the raw bits of the two values (esize bytes each) */
cudaError_t kn_cu_onehot(kiln_dtype idx_dt, size_t esize, const void *idx, uint64_t off_bits, uint64_t on_bits,
                         void *y, int64_t outer, int64_t depth, int64_t inner, cudaStream_t s);
/* identity-like: y[i][i + k] = the value with raw bits one_bits, 0 elsewhere */
cudaError_t kn_cu_eyelike(size_t esize, uint64_t one_bits, void *y, int64_t rows, int64_t cols, int64_t k,
                          cudaStream_t s);
/* ReverseSequence over data viewed as [d0, d1, inner] (batch_first: d0 is the batch axis) */
cudaError_t kn_cu_reverse_sequence(size_t esize, const void *x, void *y, const int64_t *lens, int64_t d0, int64_t d1,
                                   int64_t inner, bool batch_first, cudaStream_t s);
/* local response normalisation across channels of [N, C, inner] */
cudaError_t kn_cu_lrn(kiln_dtype dt, const void *x, void *y, int64_t N, int64_t C, int64_t inner, int64_t size,
                      float alpha, float beta, float bias, cudaStream_t s);

/* reductions and normalisations (cu_reduce.cu) */
/* reduce over the axes flagged in `reduce` of x (dims), into y (the kept dims in order) */
cudaError_t kn_cu_reduce(int op, kiln_dtype dt, const void *x, void *y, int rank, const int64_t *dims,
                         const bool *reduce, cudaStream_t s);
cudaError_t kn_cu_argminmax(kiln_dtype dt, const void *x, int64_t *y, int64_t outer, int64_t len, int64_t inner,
                            bool is_max, bool select_last, cudaStream_t s);
/* softmax over the middle dim of [outer, len, inner]; kind 0 softmax, 1 log-softmax, 2 hardmax */
cudaError_t kn_cu_softmax(kiln_dtype dt, const void *x, void *y, int64_t outer, int64_t len, int64_t inner, int kind,
                          cudaStream_t s);
/* layer norm over rows of length len; scale/bias (len elements, bias may be NULL); mean/inv_std
 * per row may be NULL; rms: no mean subtraction (RMSNormalization) */
cudaError_t kn_cu_layernorm(kiln_dtype dt, const void *x, const void *scale, const void *bias, void *y, void *mean,
                            void *inv_std, int64_t rows, int64_t len, float eps, bool rms, cudaStream_t s);
/* per-channel affine y = x * a[c] + b[c] over [n, c, inner] with a, b float arrays on device */
cudaError_t kn_cu_channel_affine(kiln_dtype dt, const void *x, void *y, const float *a, const float *b, int64_t n,
                                 int64_t c, int64_t inner, cudaStream_t s);
/* batch norm (inference): computes a, b from scale, bias, mean, var (type dt2) into a_out/b_out */
cudaError_t kn_cu_bn_coeffs(kiln_dtype dt, const void *scale, const void *bias, const void *mean, const void *var,
                            float eps, float *a_out, float *b_out, int64_t c, cudaStream_t s);
/* instance/group norm: statistics over [groups of channels x inner] per sample, then scale/bias per
 * channel (scale/bias of type dt, length c, or per group when per_group) */
cudaError_t kn_cu_groupnorm(kiln_dtype dt, const void *x, const void *scale, const void *bias, void *y, int64_t n,
                            int64_t c, int64_t groups, int64_t inner, float eps, bool per_group, cudaStream_t s);
/* Lp normalization along the middle dim of [outer, len, inner] */
cudaError_t kn_cu_lpnorm(kiln_dtype dt, const void *x, void *y, int64_t outer, int64_t len, int64_t inner, int p,
                         cudaStream_t s);
/* pooling over N-D windows: kind 0 max, 1 average (count_include_pad), 2 average excluding pads, 3 Lp */
typedef struct kn_cu_pool {
    int nsp;
    int64_t n, c;
    int64_t in[3], out[3], k[3], stride[3], pad_b[3], pad_e[3], dil[3];
    int kind, p;
    int storage_order; /* for the indices output */
} kn_cu_pool;
cudaError_t kn_cu_pool_run(kiln_dtype dt, const void *x, void *y, int64_t *indices, const kn_cu_pool *p,
                           cudaStream_t s);
/* top-k along the middle dim of [outer, len, inner] */
cudaError_t kn_cu_topk(kiln_dtype dt, const void *x, void *values, int64_t *indices, int64_t outer, int64_t len,
                       int64_t inner, int64_t k, bool largest, bool sorted, cudaStream_t s);

/* negative log-likelihood (cu_loss.cu): per element of target ([N, D]), loss = -x[n, t, d] * w[t]
 * and the weight w[t] (both 0 for ignore_index) */
cudaError_t kn_cu_nll(kiln_dtype dt, const void *x, const void *target, bool t64, const void *weight, void *loss,
                      void *wout, int64_t N, int64_t C, int64_t D, int64_t ignore, bool has_ignore, cudaStream_t s);

/* recurrent cells (cu_rnn.cu). gx: [T, batch, G*H] input projections with biases for all times;
 * gh: [batch, G*H] the previous state's projection; y (may be NULL): element (t, b, j) at
 * y[t * y_step + b * H + j]. With seq_lens (int32, may be NULL) item b runs len_b steps; at step s
 * its time index is s (forward) or len_b - 1 - s (reverse); past its length its state holds. */
cudaError_t kn_cu_lstm_cell(kiln_dtype dt, const void *gx, const void *gh, void *h, void *c, void *y, int64_t y_step,
                            const void *peep, const int32_t *seq_lens, int64_t step, int64_t T, bool reverse,
                            int64_t batch, int64_t hidden, float clip, bool input_forget, cudaStream_t s);
/* GRU (gates z, r, h). ghh: the h-gate's state term, row stride ghh_stride; multiplied by r when
 * linear_before_reset (then it is H*Rh^T and rb_h is added first), else already (r*H)*Rh^T. */
cudaError_t kn_cu_gru_cell(kiln_dtype dt, const void *gx, const void *gh, const void *ghh, int64_t ghh_stride,
                           const void *rb_h, void *h, void *y, int64_t y_step, const int32_t *seq_lens, int64_t step,
                           int64_t T, bool reverse, int64_t batch, int64_t hidden, float clip,
                           bool linear_before_reset, cudaStream_t s);
/* rh = r * h for the GRU without linear_before_reset */
cudaError_t kn_cu_gru_reset(kiln_dtype dt, const void *gx, const void *gh, const void *h, void *rh,
                            const int32_t *seq_lens, int64_t step, int64_t T, bool reverse, int64_t batch,
                            int64_t hidden, float clip, cudaStream_t s);
/* simple RNN: act 0 tanh, 1 relu, 2 sigmoid */
cudaError_t kn_cu_rnn_cell(kiln_dtype dt, const void *gx, const void *gh, void *h, void *y, int64_t y_step,
                           const int32_t *seq_lens, int64_t step, int64_t T, bool reverse, int64_t batch,
                           int64_t hidden, float clip, int act, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif

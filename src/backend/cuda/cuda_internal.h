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

/* A data error a device kernel found (an index out of range), in the lane's record: pinned host
 * memory mapped into the device (cuda_errors.c). The first kernel to find one since the record was
 * last read writes it (`set` from 0 by atomicCAS, then the rest); the lane reads it once its work
 * is done and turns it into the node's error, as the CPU kernel's. node: the kn_node's address
 * (nodes live as long as the session, and a recorded graph replays the same one). */
typedef struct kn_cu_err {
    int set;  /* 0, or 1 once a kernel wrote the record */
    int code; /* KN_CU_ERR_*: what the value indexes */
    unsigned long long node;
    long long value; /* the offending index */
    long long lo, hi; /* the valid range [lo, hi) */
    long long where;  /* the flat position of the value in its tensor */
} kn_cu_err;

/* What a kernel that can find one takes: the record's device address (NULL: check nothing), the
 * lane's claim word in device memory (the first finder sets it with atomicCAS there, not on host
 * memory, where device atomics are not to be relied on) and the node to name. */
typedef struct kn_cu_errp {
    kn_cu_err *rec;
    int *claim;
    unsigned long long node;
} kn_cu_errp;

enum {
    KN_CU_ERR_GATHER = 1,   /* Gather: the gathered axis */
    KN_CU_ERR_AXIS,         /* GatherElements, ScatterElements: along the axis */
    KN_CU_ERR_GATHERND,     /* GatherND: its indices */
    KN_CU_ERR_SCATTERND,    /* ScatterND: its indices */
    KN_CU_ERR_POSITION,     /* RotaryEmbedding: a position id outside the cos/sin cache's rows */
    KN_CU_ERR_CLASS,        /* NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss: a target that is no class */
    KN_CU_ERR_SEQLEN,       /* ReverseSequence, RNN/GRU/LSTM: sequence_lens outside [0, T] (hi is T + 1) */
    KN_CU_ERR_GIDX,         /* MatMulNBits: a g_idx (computed at run time) outside [0, k_blocks) */
    KN_CU_ERR_COUNT_
};

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

/* How kiln.SqueezeExcite's kernels split their work (read from the environment as a session compiles,
 * cuda_ops_fused.c): pool_limit, the largest C * S the gate kernel pools itself (beyond, a pool kernel
 * runs first); max_items, batch items a gate block at most (1-4: each weight row read serves them
 * all, but the block's pool and products take that much longer); max_team, lanes a weight row at
 * most (a power of two, 1-32: fewer lanes a row, more rows in flight a warp). */
typedef struct kn_cu_se_tuning {
    int64_t pool_limit;
    int max_items, max_team;
} kn_cu_se_tuning;

/* kiln.SqueezeExcite (cu_squeeze_excite.cu): y = x * gate(W2 act(W1 mean(x) + b1) + b2) over N batch
 * items of C channels and S positions (channels last when nhwc), W1 M rows of C, W2 C rows of M, b1
 * and b2 may be NULL, every operand of type dt (float, float16, bfloat16), float accumulation.
 * act and gate number activations as kn_cu_epilogue does, with their two parameters each. Where
 * C * S is at most t->pool_limit the gate kernel pools X[n] itself (two launches), else a pool kernel
 * runs first (three). scratch holds kn_cu_squeeze_excite_scratch(N, C, M, S, nhwc, t)
 * bytes; C + M may be at most kn_cu_squeeze_excite_max_width() (else cudaErrorNotSupported). */
size_t kn_cu_squeeze_excite_scratch(int64_t N, int64_t C, int64_t M, int64_t S, bool nhwc, const kn_cu_se_tuning *t);
int64_t kn_cu_squeeze_excite_max_width(void);
/* batch items one gate block takes (each reads W1 and W2 whole once for them) */
int64_t kn_cu_squeeze_excite_items(int64_t C, int64_t M, const kn_cu_se_tuning *t);
cudaError_t kn_cu_squeeze_excite(kiln_dtype dt, const void *x, const void *w1, const void *b1, const void *w2,
                                 const void *b2, void *y, void *scratch, int64_t N, int64_t C, int64_t M, int64_t S,
                                 bool nhwc, const kn_cu_se_tuning *t, int act, float a0, float a1, int gate, float g0,
                                 float g1, cudaStream_t s);

/* A chain of elementwise operators in one pass (kiln.FusedElementwise): per output element the
 * inputs are read (contiguous, one scalar, or strided over the collapsed output dims), the steps
 * run over float registers (inputs, then constants, then one per step), and the last register is
 * stored. A step is a kn_cu unary operator (kind 0, params a/b as kn_cu_unary), a kn_cu binary
 * operator (kind 1) or a clip (kind 2, bounds p0, p1). */
#define KN_CU_CHAIN_INPUTS 8
#define KN_CU_CHAIN_CONSTS 8
#define KN_CU_CHAIN_STEPS 16
enum { KN_CU_CHAIN_CONTIGUOUS, KN_CU_CHAIN_SCALAR, KN_CU_CHAIN_STRIDED };
typedef struct kn_cu_chain_step {
    uint8_t kind, op, a, b;
    float p0, p1;
} kn_cu_chain_step;
typedef struct kn_cu_chain {
    int n_inputs, n_consts, n_steps, rank;
    bool any_strided;
    int64_t dims[KN_CU_MAX_RANK];
    int64_t strides[KN_CU_CHAIN_INPUTS][KN_CU_MAX_RANK];
    const void *in[KN_CU_CHAIN_INPUTS];
    uint8_t mode[KN_CU_CHAIN_INPUTS];
    float consts[KN_CU_CHAIN_CONSTS];
    kn_cu_chain_step steps[KN_CU_CHAIN_STEPS];
} kn_cu_chain;
/* y has n elements of type dt (float32, float16 or bfloat16, the inputs' type too); the
 * arithmetic is float32. The description travels as the kernel's parameter (about 1 KB), so a
 * launch needs no device copy and is captured into CUDA graphs as is. */
cudaError_t kn_cu_chain_run(kiln_dtype dt, const kn_cu_chain *c, void *y, int64_t n, cudaStream_t s);

/* data movement (cu_data.cu) */
/* Concat (split false) or Split (true) in one launch: the joined tensor is `outer` rows of `row`
 * elements of esize bytes; piece i holds width[i] elements of every row, from element off[i] on
 * (offsets ascending, no width 0). cudaErrorNotSupported for more than KN_CU_MAX_PIECES pieces. */
#define KN_CU_MAX_PIECES 16
typedef struct kn_cu_pieces {
    int n;
    void *ptr[KN_CU_MAX_PIECES];
    int64_t width[KN_CU_MAX_PIECES], off[KN_CU_MAX_PIECES];
} kn_cu_pieces;
cudaError_t kn_cu_pieces_copy(size_t esize, void *joined, int64_t outer, int64_t row, const kn_cu_pieces *p, bool split,
                              cudaStream_t s);
/* err: where an index out of range is reported (kn_cu_errp; its rec NULL: nowhere); the element
 * then reads as zero, or the write is skipped */
cudaError_t kn_cu_gather(size_t esize, const void *data, const void *idx, bool idx64, void *y, int64_t outer,
                         int64_t axis_len, int64_t n_idx, int64_t inner, kn_cu_errp err, cudaStream_t s);
cudaError_t kn_cu_gather_elements(size_t esize, const void *data, const void *idx, bool idx64, void *y,
                                  int rank, const int64_t *data_dims, const int64_t *idx_dims, int axis,
                                  kn_cu_errp err, cudaStream_t s);
/* scatter_elements: y already holds data; reduction 0 none, 1 add, 2 mul, 3 max, 4 min */
cudaError_t kn_cu_scatter_elements(kiln_dtype dt, void *y, const void *idx, bool idx64, const void *upd, int rank,
                                   const int64_t *y_dims, const int64_t *idx_dims, int axis, int reduction,
                                   kn_cu_errp err, cudaStream_t s);
cudaError_t kn_cu_gather_nd(size_t esize, const void *data, const void *idx, void *y, int64_t batch,
                            int64_t n_per_batch, int k, const int64_t *data_dims, int data_rank, int batch_dims,
                            int64_t slice, kn_cu_errp err, cudaStream_t s);
cudaError_t kn_cu_scatter_nd(kiln_dtype dt, void *y, const void *idx, const void *upd, int64_t n_upd, int k,
                             const int64_t *y_dims, int y_rank, int64_t slice, int reduction, kn_cu_errp err,
                             cudaStream_t s);
/* pad modes: 0 constant, 1 reflect, 2 edge, 3 wrap */
cudaError_t kn_cu_pad(size_t esize, const void *x, void *y, int rank, const int64_t *x_dims, const int64_t *y_dims,
                      const int64_t *pads_begin, int mode, const void *value, cudaStream_t s);
/* a 1-D convolution's input columns, p [N, C, k, OL] (zero where the pads are): its product's B */
cudaError_t kn_cu_im2col_1d(size_t esize, const void *x, void *p, int64_t N, int64_t C, int64_t L, int64_t k,
                            int64_t OL, int64_t stride, int64_t dil, int64_t pad, cudaStream_t s);
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
/* The first of n indices (int64, else int32) outside [lo, hi) reported to err with `code` (its
 * position as `where`): a check before kernels that read such values without one of their own. */
cudaError_t kn_cu_check_range(const void *v, bool v64, int64_t n, int64_t lo, int64_t hi, int code, kn_cu_errp err,
                              cudaStream_t s);
/* a length outside [0, T] is reported to err, and its sequence copied as it is */
cudaError_t kn_cu_reverse_sequence(size_t esize, const void *x, void *y, const int64_t *lens, int64_t d0, int64_t d1,
                                   int64_t inner, bool batch_first, kn_cu_errp err, cudaStream_t s);
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
/* kiln.Attention in one kernel (cu_flash_attention.cu): Y[b0, b1, i, :] = softmax(scale * Q K^T
 * + mask)[i, :] V over a batch of b0 x b1 (batch, heads), head size d of 32, 64 or 128. Element
 * strides: rows of Q, Y and V, their head dim contiguous; K's key and head strides both given, one
 * of them 1 (KT has k_sj 1). The mask (bool:
 * false masks out; else the inputs' type, added) is read through strides, 0 where it broadcasts.
 * cudaErrorNotSupported (nothing launched) for a type or head size the kernel does not take, and
 * (unless force) where the general form is faster. */
typedef struct kn_cu_flash {
    const void *q, *k, *v, *mask;
    void *y;
    int mask_bool, nan_to_zero;
    int force; /* also where the general form was measured faster (see launch_any) */
    int warps; /* warps per block (1, 2 or 4; KILN_CUDA_FLASH_WARPS, to measure); 0: 4 */
    int64_t b0, b1, sq, sk, d;
    int64_t q_s0, q_s1, q_si, k_s0, k_s1, k_sj, k_sc, v_s0, v_s1, v_sj, y_s0, y_s1, y_si;
    int64_t m_s0, m_s1, m_si, m_sj;
    float scale;
} kn_cu_flash;
cudaError_t kn_cu_flash_attention(kiln_dtype dt, const kn_cu_flash *p, cudaStream_t s);
/* float32 on the CUDA cores (cu_flash_attention_f32.cu); kn_cu_flash_attention dispatches to it */
cudaError_t kn_cu_flash_attention_f32(const kn_cu_flash *p, cudaStream_t s);

typedef struct kn_cu_pool {
    int nsp;
    int64_t n, c;
    int64_t in[3], out[3], k[3], stride[3], pad_b[3], pad_e[3], dil[3];
    int kind, p;
    int storage_order; /* for the indices output */
    bool nhwc;         /* channels last: x [n, in..., c], y [n, out..., c] (2-D, no indices) */
} kn_cu_pool;
cudaError_t kn_cu_pool_run(kiln_dtype dt, const void *x, void *y, int64_t *indices, const kn_cu_pool *p,
                           cudaStream_t s);
/* top-k along the middle dim of [outer, len, inner] */
cudaError_t kn_cu_topk(kiln_dtype dt, const void *x, void *values, int64_t *indices, int64_t outer, int64_t len,
                       int64_t inner, int64_t k, bool largest, bool sorted, cudaStream_t s);

/* negative log-likelihood (cu_loss.cu): per element of target ([N, D]), loss = -x[n, t, d] * w[t]
 * and the weight w[t] (both 0 for ignore_index) */
/* a target neither ignored nor in [0, C) is reported to err (and counts as ignored) */
cudaError_t kn_cu_nll(kiln_dtype dt, const void *x, const void *target, bool t64, const void *weight, void *loss,
                      void *wout, int64_t N, int64_t C, int64_t D, int64_t ignore, bool has_ignore, kn_cu_errp err,
                      cudaStream_t s);

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

/* The whole recurrence in one launch (cu_rnn.cu): block (d, slice) runs every step of direction d
 * for `rows` batch items, R in shared memory; kn_cu_rnn_seq_smem gives the shared memory it needs
 * (0 for what it does not take: types other than float, float16, bfloat16; rows other than 1, 2,
 * 4, 8). Biases, peepholes, initial states and seq_lens as the ONNX operators define them; y's
 * steps past an item's length are zero. */
typedef struct kn_cu_rnn_seq {
    int gates;       /* 4 LSTM (i, o, f, c), 3 GRU (z, r, h), 1 RNN */
    int dirs;        /* 1 or 2: direction 1 runs in reverse */
    bool reverse;    /* the single direction runs in reverse */
    int64_t T, batch, hidden;
    const void *gx;  /* [T, batch, dirs, gates * hidden]: X W^T of every step, no bias */
    const void *R;   /* [dirs, gates * hidden, hidden] */
    const void *bias; /* [dirs, 2 * gates * hidden] (Wb, Rb) or NULL */
    const void *h0, *c0, *peep; /* [dirs, batch, hidden], [dirs, 3 * hidden] (i, o, f); NULL: zeros / none */
    const int32_t *seq_lens;    /* [batch] or NULL */
    void *y;                    /* [T, dirs, batch, hidden] or NULL */
    void *yh, *yc;              /* [dirs, batch, hidden] or NULL */
    float clip;                 /* 0: none */
    bool input_forget, linear_before_reset;
    int act;  /* RNN: 0 tanh, 1 relu, 2 sigmoid */
    int rows; /* batch items per block: 1, 2, 4 or 8 */
} kn_cu_rnn_seq;
size_t kn_cu_rnn_seq_smem(kiln_dtype dt, int gates, int64_t hidden, int rows);
cudaError_t kn_cu_rnn_seq_run(kiln_dtype dt, const kn_cu_rnn_seq *p, size_t smem, cudaStream_t s);
/* The same with R in registers (k_rnn_reg): whether it takes a recurrence (hidden <= 96, rows 1, 2
 * or 4, a GRU only with linear_before_reset, compiled without spills), and its launch. */
bool kn_cu_rnn_reg_fits(kiln_dtype dt, int gates, bool linear_before_reset, int64_t hidden, int rows);
cudaError_t kn_cu_rnn_reg_run(kiln_dtype dt, const kn_cu_rnn_seq *p, cudaStream_t s);

/* Stacked forward LSTM layers (kiln.StackedLSTM) in one cooperative launch, as a pipeline: per
 * slice of `rows` batch items, one block runs each layer's recurrence and one each layer's input
 * projection (l >= 1), a step behind the block before it, handing steps on through counters.
 * Every block must be resident at once: kn_cu_lstm_stack_resident says whether they are. */
#define KN_CU_LSTM_STACK_MAX 8
typedef struct kn_cu_lstm_stack {
    int layers, rows;
    int64_t T, batch;
    int64_t hidden[KN_CU_LSTM_STACK_MAX];
    const void *gx0;                       /* [T, batch, 4 * hidden[0]]: X W0^T, no bias */
    const void *W[KN_CU_LSTM_STACK_MAX];   /* l >= 1: [4 * hidden[l], hidden[l - 1]] */
    const void *R[KN_CU_LSTM_STACK_MAX];   /* [4 * hidden[l], hidden[l]] */
    const void *bias[KN_CU_LSTM_STACK_MAX], *h0[KN_CU_LSTM_STACK_MAX], *c0[KN_CU_LSTM_STACK_MAX]; /* or NULL */
    float *seq[KN_CU_LSTM_STACK_MAX];      /* l < layers - 1: [T, batch, hidden[l]], layer l's outputs */
    float *gx[KN_CU_LSTM_STACK_MAX];       /* l >= 1: [T, batch, 4 * hidden[l]], its input projections */
    int *counters;                         /* (2 * layers - 1) * slices, zero before the launch */
    void *y, *yh, *yc;                     /* the last layer's Y [T, 1, batch, H], Y_h, Y_c (or NULL) */
} kn_cu_lstm_stack;
size_t kn_cu_lstm_stack_smem(kiln_dtype dt, int layers, const int64_t *hidden, int rows);
bool kn_cu_lstm_stack_resident(kiln_dtype dt, int layers, const int64_t *hidden, int rows, int64_t batch,
                               size_t smem, int sm_count);
cudaError_t kn_cu_lstm_stack_run(kiln_dtype dt, const kn_cu_lstm_stack *p, size_t smem, cudaStream_t s);

/* kiln's own product and convolution (cu_standin.cu), for the runs before cuBLASLt and cuDNN are
 * ready (cuda_warmup.c). The product is kn_cu_gemm's: C = alpha op(A) op(B) + beta C per batch
 * entry, row-major, strides in elements; cudaErrorInvalidValue (nothing launched) for more than
 * 65535 * 64 rows. The convolution: spatial dims right-aligned into three (leading ones of size 1),
 * pad = the pads before each dim (the output size says where the pads after end), no bias;
 * channels first, or last (nhwc). */
cudaError_t kn_cu_gemm_standin(kiln_dtype dt, int64_t M, int64_t N, int64_t K, int64_t batch, bool ta, bool tb,
                               const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb, void *C,
                               int64_t ldc, int64_t sc, float alpha, float beta, cudaStream_t s);
typedef struct kn_cu_conv_standin {
    int64_t n, cin, cout, group;
    int64_t in[3], out[3], k[3], stride[3], dil[3], pad[3];
    bool nhwc; /* x, y [N, spatial..., C] and w [M, kernel..., C/group] */
} kn_cu_conv_standin;
cudaError_t kn_cu_conv_standin_run(kiln_dtype dt, const void *x, const void *w, void *y, const kn_cu_conv_standin *g,
                                   cudaStream_t s);

/* A kernel of each of the kernel files most models use (attention, data movement, elementwise,
 * reductions, the stand-ins): loading one loads its file's module, 5-10 ms each at first use under
 * CUDA's lazy loading, which cuda_warmup.c does beside the session's start instead. */
const void *kn_cu_module_attention(void);
const void *kn_cu_module_data(void);
const void *kn_cu_module_eltwise(void);
const void *kn_cu_module_reduce(void);
const void *kn_cu_module_standin(void);

/* fp16 precision with a per-tensor power-of-two scale (cu_scaled.cu). slot: 8 bytes of device
 * memory; after the conversion ((float *)slot)[1] holds the scale s applied (y = fp16(x * s)). */
cudaError_t kn_cu_to_f16_scaled(const float *x, void *y, int64_t n, void *slot, cudaStream_t s);
/* out = y / (s1 * s2); either scale pointer may be NULL (1) */
cudaError_t kn_cu_from_f16_unscaled(const void *y, float *out, int64_t n, const float *s1, const float *s2,
                                    cudaStream_t s);
/* out[0] = alpha / (sa * sb), out[1] = beta: device-side scalars of a product of scaled operands */
cudaError_t kn_cu_gemm_scalars(float *out, float alpha, float beta, const float *sa, const float *sb, cudaStream_t s);


/* ---- the attention family (cu_attention.cu; the C side is cuda_ops_attention.c) ---- */

/* A 4-D strided copy: element (c0, c1, c2, c3) < dims goes from src[sum c_k * src[k]] to
 * dst[sum c_k * dst[k]] (strides in elements). */
typedef struct kn_cu_attn_copy_dims {
    int64_t dims[4], src[4], dst[4];
} kn_cu_attn_copy_dims;
/* y = x * mult (when mult != 1), rounded to round_to (FLOAT16/BFLOAT16; others: none), converted
 * from type `from` to `to` (float types). */
cudaError_t kn_cu_attn_copy(kiln_dtype from, kiln_dtype to, const void *src, void *dst, const kn_cu_attn_copy_dims *g,
                            float mult, kiln_dtype round_to, cudaStream_t s);

/* The stage between the two products of an attention: rows [row0, row0 + rows) of the scores
 * [batch, q_heads, sq, skv] (the scores argument points at row row0) become probabilities in place.
 * Per row: round to round_to; softcap; keys outside the structural interval (causal, windows,
 * kv_end, mask_cols) and those a boolean mask clears get -inf, an additive mask (of mask_dt) is added
 * for keys below mask_cols; round; softmax in float, or emulated step by step when round_to or
 * softmax_to is FLOAT16/BFLOAT16; a row with no key left gives zeros when zero_masked_rows;
 * probabilities rounded to probs_to. qk (may be NULL): the scores at stage qk_mode (0 after the
 * product, 1 after softcap, 2 after masks, 3 probabilities), [batch, q_heads, sq, skv] of qk_dt. */
typedef struct kn_cu_attn_rows {
    int64_t batch, q_heads, sq, skv;
    int64_t row0, rows;
    const void *mask; /* bool (keep) or a float type (additive); NULL none */
    kiln_dtype mask_dt;
    int64_t m_sb, m_sh, m_si, m_sj; /* mask strides over (batch, q head, query, key); 0 broadcasts */
    int64_t mask_cols;              /* keys j >= mask_cols are masked; -1 none */
    const int64_t *kv_end;          /* device, per batch: keys j >= kv_end[b] are masked, and query i sits
                                       at position kv_end[b] - sq + i; NULL: none, position past + i */
    int64_t past;
    int causal;
    int64_t left_window, right_window; /* -1: unbounded */
    float softcap;                     /* > 0: s = softcap * tanh(s / softcap) */
    kiln_dtype round_to, softmax_to, probs_to;
    int zero_masked_rows;
    void *qk;
    kiln_dtype qk_dt;
    int qk_mode;
} kn_cu_attn_rows;
/* scores of type st: FLOAT, FLOAT16 or BFLOAT16 */
cudaError_t kn_cu_attn_rows_run(kiln_dtype st, void *scores, const kn_cu_attn_rows *p, cudaStream_t s);

/* RotaryEmbedding: x [batch, heads, seq, head] (rank3: [batch, seq, heads * head]); caches
 * [max_pos, rot_dim / 2] rows indexed by position_ids [batch, seq], or [batch, seq, rot_dim / 2]
 * when position_ids is NULL. A position outside the cache gives NaN. */
typedef struct kn_cu_rotary {
    int64_t batch, heads, seq, head, rot_dim, max_pos;
    int rank3, interleaved;
} kn_cu_rotary;
cudaError_t kn_cu_rotary_run(kiln_dtype dt, const void *x, const void *cos_cache, const void *sin_cache,
                             const int64_t *position_ids, void *y, const kn_cu_rotary *p, kn_cu_errp err,
                             cudaStream_t s);
/* SwiGLU: y = a * sigmoid(alpha * a) * b (float16/bfloat16 rounded at each step as the reference) */
cudaError_t kn_cu_swiglu(kiln_dtype dt, const void *a, const void *b, void *y, int64_t n, float alpha, cudaStream_t s);
/* CausalConvWithState: x [B, C, L], w [C, 1, k], bias [C] (may be NULL), past [B, C, k-1] (may be
 * NULL: zeros); y [B, C, L] (silu after the convolution when silu), state [B, C, k-1]. */
cudaError_t kn_cu_causal_conv_state(kiln_dtype dt, const void *x, const void *w, const void *bias, const void *past,
                                    void *y, void *state, int64_t B, int64_t C, int64_t L, int64_t k, bool silu,
                                    cudaStream_t s);
/* LinearAttention: q [batch, seq, q_heads * dk], k [.., kv_heads * dk], v [.., kv_heads * dv],
 * decay [batch, seq, decay_last] (kv_heads or kv_heads * dk; NULL: no gating), beta [batch, seq,
 * beta_last] (kv_heads or 1; NULL: no delta rule), all of one type; past/state [batch, kv_heads, dk,
 * dv] of their own types (past NULL: zeros; state NULL: not written); out of out_dt. */
#define KN_CU_LINEAR_ATTN_MAX_DK 256
typedef struct kn_cu_linear_attn {
    int64_t batch, seq, q_heads, kv_heads, dk, dv, decay_last, beta_last;
    float scale;
    const void *past;
    kiln_dtype past_dt;
    void *state;
    kiln_dtype state_dt;
    void *out;
    kiln_dtype out_dt;
} kn_cu_linear_attn;
cudaError_t kn_cu_linear_attn_run(kiln_dtype dt, const void *q, const void *k, const void *v, const void *decay,
                                  const void *beta, const kn_cu_linear_attn *p, cudaStream_t s);

#ifdef __cplusplus
}
#endif

/* ---- image, quant and einsum families (cu_image.cu, cu_quant.cu) ---- */

/* Everything a Resize/Upsample node does (src/ops/image.h's kn_resize_plan in plain types): mode
 * 0 nearest, 1 linear, 2 cubic; coord and nearest use kn_resize_coord / kn_resize_nearest's
 * numbering. */
typedef struct kn_cu_resize {
    int mode, coord, nearest;
    double cubic_a, extrapolation;
    bool exclude_outside, antialias;
    int rank;
    int64_t in_dims[KN_CU_MAX_RANK], out_dims[KN_CU_MAX_RANK];
    double scale[KN_CU_MAX_RANK], roi_start[KN_CU_MAX_RANK], roi_end[KN_CU_MAX_RANK];
} kn_cu_resize;

#ifdef __cplusplus
extern "C" {
#endif

/* nearest mode over every axis at once: a gather of esize-byte elements; `extrap` is the
 * extrapolation value as one element (tf_crop_and_resize) */
cudaError_t kn_cu_resize_nearest(size_t esize, const kn_cu_resize *p, const void *x, void *y, const void *extrap,
                                 cudaStream_t s);
/* one linear/cubic pass along axis `axis` of src [outer, in, inner] into dst [outer, out, inner].
 * The work type is float (wide = false: float, float16, bfloat16 data) or double (wide: double and
 * integers); src_dt and dst_dt are each the data type or the work type; integer results are rounded
 * half to even and saturated. */
cudaError_t kn_cu_resize_pass(kiln_dtype src_dt, kiln_dtype dst_dt, bool wide, const kn_cu_resize *p, int axis,
                              const void *src, void *dst, int64_t outer, int64_t inner, cudaStream_t s);

/* GridSample over X [N, C, D1..Dr] (r = 1..3) with grid [N, H1..Hr, r]: mode 0 nearest, 1 linear,
 * 2 cubic; pad 0 zeros, 1 border, 2 reflection */
typedef struct kn_cu_gridsample {
    int r, mode, pad, align;
    int64_t n, c, in_sp[3], in_count, out_count;
} kn_cu_gridsample;
cudaError_t kn_cu_gridsample_run(kiln_dtype x_dt, kiln_dtype g_dt, const kn_cu_gridsample *p, const void *x,
                                 const void *grid, void *y, cudaStream_t s);

/* QuantizeLinear / DequantizeLinear: element i uses scale index k by `mode` (0 per tensor, 1 per
 * axis, 2 blocked; src/ops/quant.h's kn_quant_index). */
typedef struct kn_cu_qlayout {
    int mode;
    int64_t D, inner, Ds, block;
} kn_cu_qlayout;
/* y (type y_dt: 8/16-bit integers, int32, the packed int4/uint4/int2/uint2, or float when the
 * caller casts to float8 after) = saturate(round(x / s rounded to q_dt) + zp). zp may be NULL. */
cudaError_t kn_cu_quantize(kiln_dtype x_dt, const void *x, kiln_dtype s_dt, const void *scale, kiln_dtype zp_dt,
                           const void *zp, kiln_dtype q_dt, kiln_dtype y_dt, void *y, int64_t n,
                           const kn_cu_qlayout *l, cudaStream_t s);
/* y = (float(x) - zp) * s, in float (double when in_double), cast to y_dt (a float type) */
cudaError_t kn_cu_dequantize(kiln_dtype x_dt, const void *x, kiln_dtype s_dt, const void *scale, kiln_dtype zp_dt,
                             const void *zp, bool in_double, kiln_dtype y_dt, void *y, int64_t n,
                             const kn_cu_qlayout *l, cudaStream_t s);
/* Integer matrix products (MatMulInteger, QLinearMatMul): for each batch b, acc[m, n] = sum_k
 * (A[m, k] - a_zp) * (B[k, n] - b_zp) in int32, zero points per tensor or per row of A / column of
 * B (a_zp_n / b_zp_n values). With y_scale == NULL acc is stored as int32 to y; else y =
 * saturate(round(acc * a_s * b_s / y_s) + y_zp) of type y_dt (a_s.. per tensor or per row/column,
 * read as float from their type s_dt). */
typedef struct kn_cu_imatmul {
    int64_t batch, M, N, K;
    int64_t sa, sb, sy; /* batch strides in elements (0 = broadcast) */
    kiln_dtype a_dt, b_dt, y_dt, s_dt;
    const void *a_zp, *b_zp, *y_zp;
    int64_t a_zp_n, b_zp_n;
    const void *a_scale, *b_scale, *y_scale;
    int64_t a_s_n, b_s_n;
} kn_cu_imatmul;
cudaError_t kn_cu_imatmul_run(const kn_cu_imatmul *p, const void *A, const void *B, void *y, cudaStream_t s);

/* Einsum as a direct sum: for every output element, the sum over the summed labels' positions of
 * the product of the inputs' elements (in double). Per input q: strides of the output axes and of
 * the summed labels (0 where the input does not have them). */
#define KN_CU_EINSUM_MAX_IN 4
typedef struct kn_cu_einsum {
    int n_in, out_rank, n_sum;
    int64_t out_dims[KN_CU_MAX_RANK], sum_dims[KN_CU_MAX_RANK];
    int64_t out_stride[KN_CU_EINSUM_MAX_IN][KN_CU_MAX_RANK], sum_stride[KN_CU_EINSUM_MAX_IN][KN_CU_MAX_RANK];
    kiln_dtype in_dt[KN_CU_EINSUM_MAX_IN];
    const void *in[KN_CU_EINSUM_MAX_IN];
} kn_cu_einsum;
cudaError_t kn_cu_einsum_direct(const kn_cu_einsum *p, kiln_dtype y_dt, void *y, int64_t n, cudaStream_t s);

/* casts where either side is packed (int4, uint4, int2, uint2, float4e2m1) or float8e8m0, the
 * other a plain numeric/bool type or one of those (cu_cast_packed.cu); e8_mode: the e8m0
 * round_mode, 0 up, 1 down, 2 nearest */
bool kn_cu_cast_packed_supported(kiln_dtype from, kiln_dtype to);
cudaError_t kn_cu_cast_packed(kiln_dtype from, kiln_dtype to, const void *x, void *y, int64_t n, bool saturate,
                              int e8_mode, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif

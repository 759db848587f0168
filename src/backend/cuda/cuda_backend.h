/* The CUDA backend's C side: the per-session state shared by its lanes (device, caching allocator,
 * constants, algorithm tables), the per-call lane (stream, library handle, workspace) kernels
 * receive, and the kernel table entry. Each op file (cuda_ops_*.c) exports one table. */
#ifndef KN_CUDA_BACKEND_H
#define KN_CUDA_BACKEND_H

#include "backend/backend.h"
#include "backend/cuda/cuda_internal.h"
#include "exec/kernel.h"
#include "util/clock.h"

#include "backend/cuda/cuda_libs.h" /* cuBLASLt and cuDNN, loaded at first use */

#include <pthread.h>

typedef struct kn_cu_block {
    void *ptr;
    size_t size;
} kn_cu_block;

/* A cached conversion of a constant (fp16/bf16 copies of fp32 weights). */
typedef struct kn_cu_conv_entry {
    const void *src;
    kiln_dtype to;
    int64_t n; /* elements converted */
    bool scaled; /* fp16 with a power-of-two scale stored after the elements */
    void *dst;
    size_t cap;
} kn_cu_conv_entry;

/* A cuBLASLt product as kiln configures it: everything its descriptors say, in kiln's row-major
 * terms (cuda_linalg.c swaps the operands for cuBLASLt). It keys the session's table of algorithms
 * and the tuning records, and a warm start rebuilds the product from it (cuda_warmup.c). */
typedef struct kn_cu_lt_key {
    int64_t m, n, k, batch, lda, ldb, ldc, sa, sb, sc;
    int32_t ta, tb, ab_type, c_type, compute, scale_type, align_a, align_b, align_c, device_scalars;
    int32_t epilogue; /* 0, or the cublasLtEpilogue_t in the product: bias, ReLU or both (kn_cu_gemm) */
    int32_t zero;     /* always 0: keeps the key free of padding */
} kn_cu_lt_key;
_Static_assert(sizeof(kn_cu_lt_key) == 10 * 8 + 12 * 4, "kn_cu_lt_key is compared and stored whole: no padding");

/* A cached cuBLASLt algorithm for one problem shape. */
typedef struct kn_cu_lt_entry {
    kn_cu_lt_key key;
    cublasLtMatmulAlgo_t algo;
    bool unproven; /* imported from a compiled file; no product has run with it yet */
} kn_cu_lt_entry;

/* One tuning result: which algorithm a library call with this key uses (cuda_tuning.c). Keys
 * start with a kind byte (KN_CU_TUNE_*); the rest is the call's problem description. A value up
 * to KN_CU_TUNE_VAL_MAX bytes is held in the record; a larger one (a cuDNN execution plan,
 * KN_CU_TUNE_CONV_GRAPH: its serialized form, 50-70 KB) in `big`, owned by the record. */
#define KN_CU_TUNE_KEY_MAX 160
#define KN_CU_TUNE_VAL_MAX 64
#define KN_CU_TUNE_BIG_MAX (8u << 20)
enum {
    KN_CU_TUNE_MATMUL = 'L',
    KN_CU_TUNE_CONV_FWD = 'F',
    KN_CU_TUNE_CONV_BWD_DATA = 'B',
    KN_CU_TUNE_CONV_GRAPH = 'G',
    KN_CU_TUNE_SDPA = 'A' /* a cuDNN fused-attention plan's serialized form (cuda_sdpa.c) */
};
typedef struct kn_cu_tuned {
    uint8_t key[KN_CU_TUNE_KEY_MAX], val[KN_CU_TUNE_VAL_MAX];
    uint8_t *big; /* the value when longer than val (malloc'ed), else NULL */
    uint32_t val_len;
    uint16_t key_len;
    bool imported; /* read from a compiled file (checked against the library before first use) */
} kn_cu_tuned;
/* The value's bytes of a tuning record. */
static inline const uint8_t *kn_cu_tuned_value(const kn_cu_tuned *t) { return t->big ? t->big : t->val; }
/* The autotuners' clock: records stop on s, waits for it and gives the ms since start (recorded on
 * s before the timed launches); false when any of it fails (the error left for the caller). */
static inline bool kn_cu_elapsed_ms(cudaEvent_t start, cudaEvent_t stop, cudaStream_t s, float *ms) {
    return cudaEventRecord(stop, s) == cudaSuccess && cudaEventSynchronize(stop) == cudaSuccess &&
           cudaEventElapsedTime(ms, start, stop) == cudaSuccess;
}


/* What every lane of a session shares (cuda_backend.c): the device, the caching allocator, the
 * constants' device copies and converted forms, the algorithm tables and tuning results, cuBLASLt's
 * handle (thread-safe: stream and workspace are passed per call) and the start-up threads. Lazily
 * filled tables are locked (cache_mu, recursive: a lookup may add a tuning record); the
 * allocator has its own lock (mu). */
typedef struct kn_cu_shared {
    struct kn_cuda *primary; /* the lane made with the session (the backend's state pointer) */
    pthread_mutex_t mu;      /* the allocator and the lanes' free lists */
    kn_cu_block *free_blocks; /* idle blocks (freed outside any call): any stream may reuse them */
    int n_free, cap_free;
    size_t cached_bytes, live_bytes, peak_bytes;
    uint64_t n_mallocs; /* cudaMalloc calls: constant once shapes repeat */
    pthread_mutex_t cache_mu; /* recursive: the tables below */
    /* persistent (constant) device buffers, for caching derived forms */
    const void **persistent;
    int n_persistent, cap_persistent;
    kn_cu_conv_entry *conv;
    int n_conv, cap_conv;
    kn_cu_lt_entry *lt_cache;
    int n_lt, cap_lt;
    void *conv_plans; /* cuDNN plans per node and input shape (cuda_conv.c) */
    int n_conv_plans, cap_conv_plans;
    void *conv_graphs; /* cuDNN operation graphs per FusedConv node and input shape (cuda_conv_graph.c) */
    int n_conv_graphs, cap_conv_graphs;
    void *conv_graph_builder; /* the threads building them in the background (cuda_conv_graph.c) */
    /* their kernel caches, one per topology (bias, residual, activation) */
#define KN_CU_CONV_GRAPH_TOPOLOGIES (4 * 16)
    void *conv_graph_caches[KN_CU_CONV_GRAPH_TOPOLOGIES];
    bool conv_graph_cache_failed[KN_CU_CONV_GRAPH_TOPOLOGIES];
    void *sdpa_plans; /* cuDNN fused-attention plans per problem (cuda_sdpa.c) */
    int n_sdpa_plans, cap_sdpa_plans;
    kn_cu_tuned *tuned; /* tuning results: made here or imported from a compiled file */
    int n_tuned, cap_tuned, n_tuned_here;
    cublasLtHandle_t lt; /* made beside the start: kn_cu_handles_wait before use */
    int lt_status;       /* cublasLtCreate's status when lt is NULL */
    pthread_mutex_t warm_mu;       /* the start-up threads' joins */
    struct kn_cu_warmup *warmup;   /* library start-up work beside the runs (cuda_warmup.c) */
    _Atomic bool warmup_checked;   /* the first run looked for imported choices to replay (read unlocked per node) */
    _Atomic int64_t standin_products, standin_convs; /* run on kiln's own kernels (cuda_warmup.c) */
    _Atomic int64_t standins_before_ready;           /* their sum when a run was last let go uncaptured */
    bool overlap;   /* lanes' calls may run at once (KILN_CUDA_LANES) */
    int n_lanes;    /* lanes open (the primary one included) */
    int lanes_busy, peak_lanes; /* lanes inside a call now, and the most at once (under mu) */
    bool orphaned; /* destroyed while the caller held device tensors: the last one frees the state */
} kn_cu_shared;

/* A lane: what one call mutates on the device. Kernels receive the call's lane as `kn_cuda *cu`
 * and read cu->stream, cu->dnn, cu->workspace as before; what all lanes share is cu->sh. A session's
 * run context holds one lane for its calls (session.c, lane_open), so the graphs it records, their
 * memory and its host arena stay together. The first lane (the primary one) is the backend's state:
 * it serves single-threaded sessions (no extra stream, workspace or handle) and anything issued
 * outside a call. device..rnn_steps are copies of the shared settings (read-only). */
typedef struct kn_cuda {
    kn_cu_shared *sh;
    int device;
    kn_backend_config cfg;
    int sm_count;         /* the device's multiprocessors */
    int smem_optin;       /* shared memory one block may have (bytes, opted in) */
    int8_t standin_mode;  /* KILN_CUDA_STAND_INS at init: 0 auto, 1 never, 2 always */
    bool rnn_steps;       /* KILN_CUDA_RNN=steps at init: recurrences step by step, never in one launch */
    bool rnn_shared;      /* KILN_CUDA_RNN=shared: in one launch with R in shared memory, never in registers */
    cudaStream_t stream;
#ifdef KILN_HAVE_CUDNN
    cudnnHandle_t dnn; /* bound to this lane's stream (the primary lane's made beside the start) */
#endif
    void *workspace;
    size_t workspace_size;
    /* the most a convolution algorithm may use: beyond the lane's workspace it takes scratch for the
     * call (cuDNN's precomputed-index GEMM wants ~0.6 GiB for ResNet-50's stem at batch 256, and
     * was 5x faster there than the algorithm that fits 64 MiB); the workspace_mb option bounds it */
    size_t conv_workspace_max;
    /* blocks freed by this lane's calls: reused first by its later calls, in its stream's order
     * (another stream may still be using them until this lane's work is done) */
    kn_cu_block *free_blocks;
    int n_free, cap_free;
    size_t cached_bytes;
    kn_cu_block *scratch; /* scratch blocks handed out (their true capacities) */
    int n_scratch, cap_scratch;
    struct kn_cu_capture *capture; /* while a call on this lane is recorded into a graph (cuda_graph.c) */
    kn_cu_err *err;                /* the data-error record (host view), made at first use; NULL until then */
    kn_cu_err *err_dev;            /* its device address */
    int *err_claim;                /* the record's claim word, device memory */
    struct kn_cuda *outer;         /* the lane bound to the thread before this one (lane_enter) */
    int outer_mode;                /* the thread's stream-capture mode before lane_enter (-1: unknown) */
    bool held;                     /* held by a run context (the primary lane is handed out first) */
} kn_cuda;

/* Data errors found on the device (cuda_errors.c). kn_cu_err_at: the argument a kernel that can
 * find one takes (the lane's record, made at first use, and the node); NULL record on failure to
 * make it (the kernel then checks nothing, as before). kn_cu_err_check: after the lane's work is
 * done, the recorded error as the node's KILN_ERR_INVALID_ARGUMENT (and the record cleared), else
 * KILN_OK. */
kn_cu_errp kn_cu_err_at(kn_cuda *cu, const kn_kernel_ctx *c);
kiln_status kn_cu_err_check(kn_cuda *cu);
void kn_cu_err_free(kn_cuda *cu);

/* The lane of the call running on this thread for the session whose primary lane (backend state)
 * is `state`; outside a call, the primary lane. */
kn_cuda *kn_cu_lane(void *state);

typedef struct kn_cuda_kernel {
    const char *domain;  /* "" for ai.onnx */
    const char *op_type; /* NULL ends a table */
    kiln_status (*run)(kn_cuda *cu, kn_kernel_ctx *c);
    /* Optional extra check (types, attributes) beyond `types`. */
    bool (*supports)(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap);
    uint32_t types;       /* element types of input 0 it takes: bit (1 << dtype); 0 = any */
    uint32_t host_inputs; /* bit i: input i is read on the host (by infer or the kernel) */
    unsigned flags;       /* KN_CUK_* */
    /* Optional: reads the node's attributes into a block of params_bytes bytes once, when the
     * session is compiled (exec/kernel.h: kn_params_fn); the kernel reads it with kn_ctx_params,
     * passing the same function. KN_CU_PARAMS(fn, type) fills both fields. */
    kn_params_fn prepare;
    size_t params_bytes;
} kn_cuda_kernel;

#define KN_CU_PARAMS(fn, type) fn, sizeof(type)

enum {
    KN_CUK_HOST_OUTPUTS = 1u << 0, /* outputs on the host (reads only input metadata: Shape, Size) */
    KN_CUK_METADATA = 1u << 1,     /* input 0 is read for its shape only: it is not moved */
    KN_CUK_ANY_TYPES = 1u << 2,    /* the supports function checks every input type (Cast: float8) */
};

#define KN_T(dt) (1u << (dt))
#define KN_T_FLOATS (KN_T(KILN_DTYPE_FLOAT) | KN_T(KILN_DTYPE_DOUBLE) | KN_T(KILN_DTYPE_FLOAT16) | KN_T(KILN_DTYPE_BFLOAT16))
#define KN_T_SINTS (KN_T(KILN_DTYPE_INT8) | KN_T(KILN_DTYPE_INT16) | KN_T(KILN_DTYPE_INT32) | KN_T(KILN_DTYPE_INT64))
#define KN_T_UINTS (KN_T(KILN_DTYPE_UINT8) | KN_T(KILN_DTYPE_UINT16) | KN_T(KILN_DTYPE_UINT32) | KN_T(KILN_DTYPE_UINT64))
#define KN_T_INTS (KN_T_SINTS | KN_T_UINTS)
#define KN_T_NUM (KN_T_FLOATS | KN_T_INTS)
#define KN_T_BOOL KN_T(KILN_DTYPE_BOOL)
#define KN_T_DENSE (KN_T_NUM | KN_T_BOOL) /* every type with 1..8-byte elements kiln runs on CUDA */

/* Recurrent nodes (LSTM, GRU, RNN) run so far with the whole recurrence in one launch, in this
 * process (for tests: which of the two ways ran). */
long long kn_cuda_rnn_one_launch_runs(void);
/* Of those, the runs with R in registers (k_rnn_reg, small hidden sizes). */
long long kn_cuda_rnn_register_runs(void);
/* kiln.StackedLSTM nodes run so far as one pipelined launch, in this process (for tests). */
long long kn_cuda_lstm_stack_runs(void);

extern const kn_cuda_kernel kn_cuda_elementwise[];
extern const kn_cuda_kernel kn_cuda_tensor[];
extern const kn_cuda_kernel kn_cuda_nn[];
extern const kn_cuda_kernel kn_cuda_linalg[];

/* ---- helpers for the op files ---- */

/* A CUDA error as a kiln status naming the node and the call. */
kiln_status kn_cu_check(const kn_kernel_ctx *c, cudaError_t e, const char *what);
/* Scratch device memory for the duration of a kernel (returned with kn_cu_scratch_free after the
 * launches that use it: stream order makes the reuse safe). */
kiln_status kn_cu_scratch(kn_cuda *cu, size_t bytes, void **out);
void kn_cu_scratch_free(kn_cuda *cu, void *p, size_t bytes);
/* A new device tensor from the caching allocator. */
kiln_status kn_cu_new_tensor(kn_cuda *cu, kiln_dtype dtype, int rank, const int64_t *dims, kn_tensor **out);
/* Output i when the executor could not preallocate it (shape known only now). */
kiln_status kn_cu_output(kn_cuda *cu, kn_kernel_ctx *c, int i, kiln_dtype dtype, int rank, const int64_t *dims,
                         kn_tensor **out);
/* Whether a device pointer is a session constant (so a converted copy may be cached). */
bool kn_cu_is_persistent(kn_cuda *cu, const void *p);
/* x (n elements of `from`) as `to`: a cached conversion for constants, else into scratch that the
 * caller frees with kn_cu_scratch_free(cu, *out, *bytes) when *bytes != 0. */
kiln_status kn_cu_converted(kn_cuda *cu, const kn_kernel_ctx *c, const void *x, kiln_dtype from, int64_t n,
                            kiln_dtype to, void **out, size_t *bytes);
/* As kn_cu_converted, for the operands of fp16 tensor-core products: fp32 -> fp16 with a
 * per-tensor power-of-two scale (cu_scaled.cu), so magnitudes outside fp16's range survive;
 * *scale is the device address of the scale applied (NULL when no scaling was done: any other
 * pair of types). The product's result is divided by the operands' scales. */
kiln_status kn_cu_converted_scaled(kn_cuda *cu, const kn_kernel_ctx *c, const void *x, kiln_dtype from, int64_t n,
                                   kiln_dtype to, void **out, size_t *bytes, const float **scale);

/* One operand read with explicit element strides over `dims` (collapsed where contiguous). */
void kn_cu_view_strided(kn_cu_view *v, int rank, const int64_t *dims, const int64_t *strides);
/* The element strides of n_ops (at most KN_CU_CHAIN_INPUTS) operands broadcast onto out_dims,
 * collapsed by kn_shape_collapse: dims[0..rank) and strides[k][0..rank); returns the rank (1 for a
 * single element). */
int kn_cu_collapse(const int64_t *out_dims, int out_rank, const kn_tensor *const *ops, int n_ops, int64_t *dims,
                   int64_t (*strides)[KN_CU_MAX_RANK]);
/* Broadcast view of up to three operands onto the output shape (dims collapsed). */
void kn_cu_make_view(kn_cu_view *v, const int64_t *out_dims, int out_rank, const kn_tensor *const *ops, int n_ops);

/* Batched matrix product through cuBLASLt, row-major: for b in batch, C_b = alpha * op(A_b) op(B_b)
 * + beta * C_b, with op = transpose when ta/tb; A_b is [M,K] (or [K,M] when ta), B_b [K,N] (or [N,K]).
 * Strides in elements (0 = broadcast). `dt` is the tensors' type; the precision option may run fp32
 * tensors on tf32/fp16/bf16 tensor cores. */
typedef struct kn_cu_gemm {
    kiln_dtype dt;
    int64_t M, N, K, batch;
    bool ta, tb;
    const void *A, *B;
    void *C;
    int64_t lda, ldb, ldc; /* row-major leading dimensions */
    int64_t sa, sb, sc;    /* batch strides */
    float alpha, beta;
    /* Optional epilogue, for one product (batch 1) into rows of C that follow each other (ldc = N):
     * C = act(alpha op(A) op(B) + bias + residual), bias N values of C's type (one per column),
     * residual M x N like C (beta must be 0 with it), act ReLU (relu) or gelu (KN_ACT_GELU or
     * KN_ACT_GELU_TANH; 0 none). cuBLASLt applies it in the product where it can (bias, ReLU and
     * GELU as its epilogue, the residual as its C input with beta 1); elsewhere (kiln's stand-in
     * kernels, double, an algorithm without that epilogue) a pass after the product does.
     * cuBLASLt's GELU is the tanh form: gelu KN_ACT_GELU (erf) is taken only for float16 and
     * bfloat16 outputs (kn_cu_gelu_epilogue_ok says why that is within their precision). */
    const void *bias, *residual;
    bool relu;
    int gelu;
} kn_cu_gemm;
kiln_status kn_cu_gemm_run(kn_cuda *cu, const kn_kernel_ctx *c, const kn_cu_gemm *g);
bool kn_cu_gelu_epilogue_ok(int act, kiln_dtype dt); /* cuBLASLt's GELU may stand for act on a dt output */
/* The cuBLASLt descriptors of a product (all NULL on failure; undescribe frees them), and the
 * elements its operands A, B and C span (false where that overflows: a key from a file). */
cublasStatus_t kn_cu_lt_describe(const kn_cu_lt_key *k, cublasLtMatmulDesc_t *op, cublasLtMatrixLayout_t *la,
                                 cublasLtMatrixLayout_t *lb, cublasLtMatrixLayout_t *lc);
/* Points an epilogue with a bias (key->epilogue) at it: a per-call attribute, not in the key. */
cublasStatus_t kn_cu_lt_set_bias(cublasLtMatmulDesc_t op, const void *bias);
void kn_cu_lt_undescribe(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                         cublasLtMatrixLayout_t lc);
bool kn_cu_lt_extents(const kn_cu_lt_key *k, int64_t *a, int64_t *b, int64_t *c);
/* C [o_bd..., M, N] = alpha * A [a_bd..., M, K] x B [b_bd..., K, N], batch dims right-aligned and
 * broadcast onto o_bd (strided batches when possible, else one product per batch entry). */
kiln_status kn_cu_matmul_bcast(kn_cuda *cu, const kn_kernel_ctx *c, kiln_dtype dt, const void *A, const int64_t *a_bd,
                               int na, const void *B, const int64_t *b_bd, int nb, void *C, const int64_t *o_bd, int no,
                               int64_t M, int64_t N, int64_t K, float alpha);
extern const kn_cuda_kernel kn_cuda_fused[];
/* image, quant and einsum families (cuda_ops_image.c, cuda_ops_quant.c, cuda_ops_einsum.c) */
extern const kn_cuda_kernel kn_cuda_image[];
extern const kn_cuda_kernel kn_cuda_quant[];
extern const kn_cuda_kernel kn_cuda_einsum[];
extern const kn_cuda_kernel kn_cuda_attention[]; /* the attention family (cuda_ops_attention.c) */
/* LayerNormalization / RMSNormalization (ai.onnx and kiln), by op_type (cuda_ops_nn.c) */
kiln_status kn_cu_run_layernorm(kn_cuda *cu, kn_kernel_ctx *c);
/* The same with the axis (-1 when absent) and epsilon read already (the kiln forms' prepared block) */
kiln_status kn_cu_run_layernorm_with(kn_cuda *cu, kn_kernel_ctx *c, int64_t axis, float eps);
/* MatMul and Gemm (cuda_linalg.c), for the fused operators */
kiln_status kn_cu_run_matmul(kn_cuda *cu, kn_kernel_ctx *c);
kiln_status kn_cu_run_gemm(kn_cuda *cu, kn_kernel_ctx *c);

/* Tuning results (cuda_tuning.c): the record with this key, or NULL (with cu->sh->cache_mu held:
 * the record lives in a table other lanes may grow); a result this session made
 * (replacing one with the same key); the backend-table functions that export and import them. */
kn_cu_tuned *kn_cu_tuning_find(kn_cuda *cu, const void *key, size_t key_len);
kiln_status kn_cu_tuning_add(kn_cuda *cu, const void *key, size_t key_len, const void *val, size_t val_len);
void kn_cu_tuning_forget(kn_cuda *cu, const void *key, size_t key_len);
void kn_cu_tuning_release(kn_cuda *cu);
int kn_cu_tuning_count(void *state, int *made_here);
bool kn_cu_tuning_record(void *state, int i, const void **key, size_t *key_len, const void **val, size_t *val_len);
kiln_status kn_cu_tuning_import(void *state, const void *key, size_t key_len, const void *val, size_t val_len);

/* cuDNN convolutions (cuda_conv.c) */
/* Conv's and ConvTranspose's attributes, read once (their prepare hook; FusedConv's proxy takes it
 * too); the arrays are the node's */
typedef struct kn_cu_conv_prm {
    int64_t group;
    const int64_t *strides, *dilations, *pads, *kernel_shape, *output_padding;
    int n_strides, n_dilations, n_pads, n_kernel_shape, n_output_padding;
    const char *auto_pad;
    bool layout_ok, nhwc; /* kn_fused_conv_layout's answer */
} kn_cu_conv_prm;
kiln_status kn_cu_conv_prepare(const kn_node *n, void *params);
kiln_status kn_cu_run_conv(kn_cuda *cu, kn_kernel_ctx *c);
kiln_status kn_cu_run_conv_transpose(kn_cuda *cu, kn_kernel_ctx *c);
/* Conv (c's first two inputs) with y = act(conv + bias + z) in the same call where the library
 * takes it: *done when bias and z were (cuDNN's fused call for bias and ReLU, cuBLASLt's epilogue
 * for a pointwise one channels last, cuDNN's operation graph for the activations it takes), and
 * *act_done when the activation was too; otherwise the plain convolution, and the caller runs what
 * is left after it. */
kiln_status kn_cu_run_conv_fused(kn_cuda *cu, kn_kernel_ctx *c, const kn_tensor *bias, const kn_tensor *z, int act,
                                 float p0, float p1, bool *done, bool *act_done);
bool kn_cu_conv_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap);
void kn_cu_conv_release(kn_cuda *cu);

/* FusedConv channels last as one cuDNN operation graph (cuda_conv_graph.c): x [N, H, W, C], w [K, R,
 * S, C], y [N, P, Q, K]; bias and z optional; act one that kn_cu_conv_graph_takes. *ran false
 * (and KILN_OK) where no engine runs it: the caller then runs the convolution and a pass. */
typedef struct kn_cu_conv_graph_args {
    const kn_tensor *x, *w, *bias, *z;
    kn_tensor *y;
    int64_t stride[2], dil[2], pad_b[2], pad_e[2];
    int act;
} kn_cu_conv_graph_args;
kiln_status kn_cu_conv_graph_run(kn_cuda *cu, kn_kernel_ctx *c, const kn_cu_conv_graph_args *a, bool *ran);
bool kn_cu_conv_graph_takes(int act); /* an activation the graph runs and the other fused paths do not */
bool kn_cu_conv_graph_enabled(const kn_cuda *cu); /* conv_graph=1, or KILN_CUDA_CONV_GRAPH=1 (=0 overrides) */
unsigned long long kn_cu_conv_graph_runs(void); /* graphs run in this process (tests) */
unsigned long long kn_cu_conv_graph_plans_loaded(void); /* plans made from compiled files' records (tests) */
bool kn_cu_conv_graph_available(void);          /* built with cuDNN, and it loads */
/* Whether a graph is still being built in the background (runs are then not recorded). */
bool kn_cu_conv_graph_building(kn_cuda *cu);
/* Builder threads alive in this process (they end after two idle seconds; tests). */
int kn_cu_conv_graph_builders(void);
/* The problem of a cuDNN graph plan's tuning record (KN_CU_TUNE_CONV_GRAPH key after the kind
 * byte); kn_cu_conv_graph_key_valid checks an imported one. */
typedef struct kn_cu_graph_key {
    int32_t dtype, act, bias, z;
    int64_t x[4], w[4], stride[2], dil[2], pad_b[2], pad_e[2];
} kn_cu_graph_key;
bool kn_cu_conv_graph_key_valid(const kn_cu_graph_key *k);
void kn_cu_conv_graph_release(kn_cuda *cu);

/* kiln.Attention as cuDNN's fused attention (cuda_sdpa.c), for the operands kiln's own flash
 * kernel reads (p, type dt); *ran false: not taken here (nothing run), the caller runs its own. */
kiln_status kn_cu_sdpa_run(kn_cuda *cu, kn_kernel_ctx *c, kiln_dtype dt, const kn_cu_flash *p, bool *ran);
unsigned long long kn_cu_sdpa_runs(void);         /* fused attentions run in this process (tests) */
unsigned long long kn_cu_sdpa_plans_loaded(void); /* their plans made from compiled files' records (tests) */
/* One fused-attention problem (also a KN_CU_TUNE_SDPA record's key after the kind byte): shapes and
 * strides in elements as the graph describes them (Q [b, h, sq, d], KT [b, h, d, sk], V [b, h, sk,
 * d], O like Q; the mask's strides over [b, h, sq, sk], 0 where it broadcasts). */
typedef struct kn_cu_sdpa_key {
    int32_t dtype, mask; /* mask: 0 none, 1 an additive one */
    int32_t b, h, sq, sk, d;
    int32_t q[4], kt[4], v[4], o[4], m[4];
} kn_cu_sdpa_key;
bool kn_cu_sdpa_key_valid(const kn_cu_sdpa_key *k); /* an imported record's key describes a problem */
void kn_cu_sdpa_release(kn_cuda *cu);

#ifdef KILN_HAVE_CUDNN
/* A convolution's descriptors from its tuning key (the int32 words after the kind byte: rank,
 * data type, math type, groups, then x/y/w dims and pad/stride/dilation interleaved); counts gets
 * the elements of x, y and w. Not CUDNN_STATUS_SUCCESS for a key that does not describe one. */
#define KN_CU_CONV_NHWC 16 /* in a description's first word (the rank): tensors and filter channels last */
cudnnStatus_t kn_cu_conv_describe(const int32_t *desc, int nd, cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t yd,
                                  cudnnFilterDescriptor_t wd, cudnnConvolutionDescriptor_t cd, int64_t counts[3]);
#endif

/* Start-up (cuda_warmup.c): at init a thread starts cuBLASLt (its first query costs 70-100 ms of
 * CPU); with tuning results imported from a compiled file, the first run starts threads that initialise cuBLASLt and cuDNN and load the kernels of those results by
 * running each once on scratch memory, beside the run itself; join waits for them (before a run
 * is recorded into a graph, and at the end). */
/* At init: cuBLASLt's own start-up, the library handles and the kernel modules, on threads beside
 * whatever comes next; false when the threads are off (KILN_CUDA_NO_WARMUP): init then makes the
 * handles itself. */
bool kn_cu_warmup_boot(kn_cuda *cu);
/* cuBLASLt's and cuDNN's handles (cu->lt NULL and lt_status on failure; cu->dnn NULL, with a
 * warning, when cuDNN is unusable); kn_cu_handles_wait before the first use of either. */
void kn_cu_make_handles(kn_cuda *cu);
/* A lane's cuDNN handle on its stream (cu->dnn NULL, with a warning, when cuDNN is unusable). */
void kn_cu_make_dnn(kn_cuda *cu);
void kn_cu_handles_wait(kn_cuda *cu);
void kn_cu_warmup_start(kn_cuda *cu);
void kn_cu_warmup_join(kn_cuda *cu);
void kn_cu_warmup_free(kn_cuda *cu); /* joins, then frees the threads' state */
/* Whether a product (KN_CU_TUNE_MATMUL) or a convolution (KN_CU_TUNE_CONV_FWD) runs on kiln's own
 * kernel now instead of the library: while a warm start's threads are still starting it. */
bool kn_cu_standin(kn_cuda *cu, uint8_t kind);
/* capture_ready of the backend: no stand-in would run, nor ran in the run before (graph_run.c
 * records only then). */
bool kn_cu_capture_ready(void *state);

#endif

/* CUDA kernels of the linalg family through cuBLASLt: MatMul (batched, with broadcasting), Gemm
 * (every transA/transB/alpha/beta and broadcast C), and the recurrent operators LSTM, GRU, RNN and
 * kiln.StackedLSTM (one product for the input projections of all steps, then the steps in one
 * launch of cu_rnn.cu's kernels, or a product and a cell kernel per step where they do not fit).
 *
 * cuBLASLt is column-major; a row-major C = op(A) op(B) is computed as the column-major
 * C^T = op(B)^T op(A)^T, i.e. with the operands swapped and no data movement. */
#include "backend/cuda/cuda_backend.h"
#include "ops/fused.h"
#include "ops/linalg_util.h"
#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NEED_OUT(c, i)                                                                             \
    do {                                                                                           \
        if (!(c)->out[i]) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output %d shape unknown at run time", i); \
    } while (0)

/* ------------------------------------------------------------------ cuBLASLt */

static kiln_status lt_fail(const kn_kernel_ctx *c, cublasStatus_t s, const char *what) {
    return kn_kernel_error(c, KILN_ERR_RUNTIME, "cuBLASLt %s failed (status %d)", what, (int)s);
}

static uint64_t align_of(const void *p, int64_t ld, int64_t stride, size_t es) {
    uint64_t a = (uint64_t)(uintptr_t)p | 256;
    a |= (uint64_t)(ld * (int64_t)es) | 256;
    if (stride) a |= (uint64_t)(stride * (int64_t)es);
    return a & (~a + 1); /* lowest set bit */
}

#define LT_TKEY_LEN (1 + sizeof(kn_cu_lt_key))

static void tuning_key(const kn_cu_lt_key *key, uint8_t tkey[LT_TKEY_LEN]) {
    tkey[0] = KN_CU_TUNE_MATMUL;
    memcpy(tkey + 1, key, sizeof *key);
}

/* The per-session lookup table of algorithms by problem key (searched on every product);
 * unproven: an imported choice that no product has run with yet. */
static void remember(kn_cuda *cu, const kn_cu_lt_key *key, const cublasLtMatmulAlgo_t *algo, bool unproven) {
    if (cu->sh->n_lt == cu->sh->cap_lt) {
        int nc = cu->sh->cap_lt ? cu->sh->cap_lt * 2 : 32;
        kn_cu_lt_entry *b = realloc(cu->sh->lt_cache, sizeof *b * (size_t)nc);
        if (!b) return; /* looked up again next time */
        cu->sh->lt_cache = b;
        cu->sh->cap_lt = nc;
    }
    cu->sh->lt_cache[cu->sh->n_lt].key = *key;
    cu->sh->lt_cache[cu->sh->n_lt].algo = *algo;
    cu->sh->lt_cache[cu->sh->n_lt].unproven = unproven;
    cu->sh->n_lt++;
}

/* After a product ran with an imported choice: proven (ok) or dropped, table and record, so the
 * next lookup asks the heuristic. */
static void settle(kn_cuda *cu, const kn_cu_lt_key *key, bool ok) {
    pthread_mutex_lock(&cu->sh->cache_mu);
    for (int i = 0; i < cu->sh->n_lt; i++)
        if (!memcmp(&cu->sh->lt_cache[i].key, key, sizeof *key)) {
            if (ok) cu->sh->lt_cache[i].unproven = false;
            else cu->sh->lt_cache[i] = cu->sh->lt_cache[--cu->sh->n_lt];
            break;
        }
    if (!ok) {
        uint8_t tkey[LT_TKEY_LEN];
        tuning_key(key, tkey);
        kn_cu_tuning_forget(cu, tkey, sizeof tkey);
    }
    pthread_mutex_unlock(&cu->sh->cache_mu);
}

/* One product as cuBLASLt sees it: descriptors, the alignments promised, and the operands (for
 * measuring candidates: D goes to scratch of d_bytes, C is only read). */
typedef struct lt_problem {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    uint32_t al_a, al_b, al_c;
    const void *alpha, *beta, *A, *B; /* cuBLASLt's A and B (our B and A) */
    const void *C;
    size_t d_bytes;
} lt_problem;

#define LT_CANDIDATES_MAX 32
#define LT_TIMED_RUNS 3
#define LT_TIMING_ROUNDS 2

/* How many of the heuristic's ranked algorithms tuning=exhaustive times: 8, or
 * KILN_CUDA_LT_CANDIDATES=N (1..32) to compare. 16 and 32 gained nothing on BERT-base b1/b32 and
 * cost ViT-B/16 b64 fp16 1.5% on an H100 (a candidate fastest alone, with the operands hot in L2,
 * was slower inside the model; bench/results/gpu-h100-2026-12-06c.md). */
static int lt_candidates(void) {
    const char *v = getenv("KILN_CUDA_LT_CANDIDATES");
    int n = v ? atoi(v) : 8;
    return n < 1 ? 1 : n > LT_CANDIDATES_MAX ? LT_CANDIDATES_MAX : n;
}

/* One candidate's time: LT_TIMED_RUNS products into scratch d, back to back; false when one fails. */
static bool time_candidate(kn_cuda *cu, const lt_problem *p, const cublasLtMatmulAlgo_t *algo, void *d, cudaEvent_t e0,
                           cudaEvent_t e1, float *ms) {
    bool ok = cudaEventRecord(e0, cu->stream) == cudaSuccess;
    for (int r = 0; ok && r < LT_TIMED_RUNS; r++)
        ok = cublasLtMatmul(cu->sh->lt, p->op, p->alpha, p->A, p->la, p->B, p->lb, p->beta, p->C, p->lc, d, p->lc, algo,
                            cu->workspace, cu->workspace_size, cu->stream) == CUBLAS_STATUS_SUCCESS;
    return ok && kn_cu_elapsed_ms(e0, e1, cu->stream, ms);
}

/* tuning=exhaustive: the heuristic's best candidates, each run once to load it, then timed in
 * LT_TIMING_ROUNDS rounds over all of them (a candidate's best round counts: the clocks and the
 * other work on the GPU move between rounds, not within one launch train); the fastest wins. A few
 * milliseconds per distinct product, once: the choice goes into the compiled file. */
static int fastest(kn_cuda *cu, const lt_problem *p, const cublasLtMatmulHeuristicResult_t *res, int n) {
    void *d = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float best_ms[LT_CANDIDATES_MAX];
    int best = 0;
    if (kn_cu_scratch(cu, p->d_bytes ? p->d_bytes : 1, &d) != KILN_OK) {
        kn_clear_error();
        return 0;
    }
    if (cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
        bool usable[LT_CANDIDATES_MAX];
        for (int i = 0; i < n; i++) {
            usable[i] = res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= cu->workspace_size &&
                        cublasLtMatmul(cu->sh->lt, p->op, p->alpha, p->A, p->la, p->B, p->lb, p->beta, p->C, p->lc, d, p->lc,
                                       &res[i].algo, cu->workspace, cu->workspace_size, cu->stream) == CUBLAS_STATUS_SUCCESS;
            if (!usable[i]) cudaGetLastError();
            best_ms[i] = -1;
        }
        for (int round = 0; round < LT_TIMING_ROUNDS; round++)
            for (int i = 0; i < n; i++) {
                float ms;
                if (!usable[i]) continue;
                if (!time_candidate(cu, p, &res[i].algo, d, e0, e1, &ms)) {
                    cudaGetLastError();
                    usable[i] = false;
                    continue;
                }
                if (best_ms[i] < 0 || ms < best_ms[i]) best_ms[i] = ms;
            }
        best = -1;
        for (int i = 0; i < n; i++)
            if (usable[i] && (best < 0 || best_ms[i] < best_ms[best])) best = i;
        if (best < 0) best = 0;
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    kn_cu_scratch_free(cu, d, p->d_bytes ? p->d_bytes : 1);
    return best;
}

/* The algorithm for a problem: the session's table, a tuning result, else cuBLASLt's heuristic
 * (recorded as a tuning result). *from_file (may be NULL): the algorithm is an imported choice no
 * product has run with yet. */
static kiln_status find_algo_locked(kn_cuda *cu, const kn_kernel_ctx *c, const kn_cu_lt_key *key, const lt_problem *p,
                                    cublasLtMatmulAlgo_t *algo, bool *from_file);

/* Under the shared tables' lock: lanes look the table up at once, and one of them fills a miss
 * (the others wait for its choice rather than make their own). */
static kiln_status find_algo(kn_cuda *cu, const kn_kernel_ctx *c, const kn_cu_lt_key *key, const lt_problem *p,
                             cublasLtMatmulAlgo_t *algo, bool *from_file) {
    pthread_mutex_lock(&cu->sh->cache_mu);
    kiln_status st = find_algo_locked(cu, c, key, p, algo, from_file);
    pthread_mutex_unlock(&cu->sh->cache_mu);
    return st;
}

static kiln_status find_algo_locked(kn_cuda *cu, const kn_kernel_ctx *c, const kn_cu_lt_key *key, const lt_problem *p,
                                    cublasLtMatmulAlgo_t *algo, bool *from_file) {
    if (from_file) *from_file = false;
    for (int i = 0; i < cu->sh->n_lt; i++)
        if (!memcmp(&cu->sh->lt_cache[i].key, key, sizeof *key)) {
            *algo = cu->sh->lt_cache[i].algo;
            if (from_file) *from_file = cu->sh->lt_cache[i].unproven;
            return KILN_OK;
        }
    /* a tuning result (from the compiled file, or an earlier shape of this session) first. An
     * imported one is not put to cublasLtMatmulAlgoCheck: cublasLtMatmul checks the algorithm
     * against the problem itself and refuses one that does not fit; the caller then drops the
     * choice and asks the heuristic (kn_cu_gemm_run). (cuBLASLt's one-time start-up, 50-100 ms
     * of CPU, falls to whichever call comes first; cuda_warmup.c makes it beside the session.) */
    uint8_t tkey[LT_TKEY_LEN];
    tuning_key(key, tkey);
    const kn_cu_tuned *t = kn_cu_tuning_find(cu, tkey, sizeof tkey);
    if (t) {
        memcpy(algo, t->val, sizeof *algo);
        remember(cu, key, algo, t->imported);
        if (from_file) *from_file = t->imported;
        return KILN_OK;
    }
    cublasLtMatmulPreference_t pref;
    cublasStatus_t s = cublasLtMatmulPreferenceCreate(&pref);
    if (s != CUBLAS_STATUS_SUCCESS) return lt_fail(c, s, "preference");
    uint64_t ws = cu->workspace_size;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p->al_a, sizeof p->al_a);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &p->al_b, sizeof p->al_b);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p->al_c, sizeof p->al_c);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &p->al_c, sizeof p->al_c);
    /* measuring waits for the device: not while a run is being recorded into a graph */
    bool measure = cu->cfg.exhaustive && !cu->capture;
    cublasLtMatmulHeuristicResult_t res[LT_CANDIDATES_MAX];
    int n = 0;
    double t0 = kn_now_ms();
    s = cublasLtMatmulAlgoGetHeuristic(cu->sh->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, measure ? lt_candidates() : 1, res, &n);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || n == 0)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "cuBLASLt has no algorithm for this product (status %d)", (int)s);
    int pick = measure && n > 1 ? fastest(cu, p, res, n) : 0;
    kn_log(KILN_LOG_DEBUG, "cuda: cuBLASLt %s for '%s' (%lld x %lld x %lld): candidate %d of %d in %.2f ms",
           measure ? "measurement" : "heuristic", c->node && c->node->name ? c->node->name : "",
           (long long)key->m, (long long)key->n, (long long)key->k, pick, n,
           kn_now_ms() - t0);
    *algo = res[pick].algo;
    remember(cu, key, algo, false);
    return kn_cu_tuning_add(cu, tkey, sizeof tkey, algo, sizeof *algo);
}

static int64_t extent(int64_t rows, int64_t ld, int64_t batch, int64_t stride) {
    return rows * ld + (batch > 1 && stride > 0 ? (batch - 1) * stride : 0);
}

/* extent() for a key read from a file: false where it would overflow. */
static bool extent_checked(int64_t rows, int64_t ld, int64_t batch, int64_t stride, int64_t *out) {
    int64_t a, b = 0;
    if (__builtin_mul_overflow(rows, ld, &a)) return false;
    if (batch > 1 && stride > 0 && __builtin_mul_overflow(batch - 1, stride, &b)) return false;
    return !__builtin_add_overflow(a, b, out);
}

bool kn_cu_lt_extents(const kn_cu_lt_key *k, int64_t *a, int64_t *b, int64_t *c) {
    return extent_checked(k->ta ? k->k : k->m, k->lda, k->batch, k->sa, a) &&
           extent_checked(k->tb ? k->n : k->k, k->ldb, k->batch, k->sb, b) && extent_checked(k->m, k->ldc, k->batch, k->sc, c);
}

cublasStatus_t kn_cu_lt_describe(const kn_cu_lt_key *k, cublasLtMatmulDesc_t *op, cublasLtMatrixLayout_t *la,
                                 cublasLtMatrixLayout_t *lb, cublasLtMatrixLayout_t *lc) {
    *op = NULL;
    *la = *lb = *lc = NULL;
    cudaDataType_t ab_t = (cudaDataType_t)k->ab_type, c_t = (cudaDataType_t)k->c_type;
    cublasStatus_t s = cublasLtMatmulDescCreate(op, (cublasComputeType_t)k->compute, (cudaDataType_t)k->scale_type);
    cublasOperation_t opa = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    if (s == CUBLAS_STATUS_SUCCESS && k->device_scalars) {
        cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
        s = cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm);
    }
    if (s == CUBLAS_STATUS_SUCCESS && k->epilogue) {
        cublasLtEpilogue_t ep = (cublasLtEpilogue_t)k->epilogue;
        s = cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
    }
    /* Lt's A is our B, Lt's B is our A (see the top of the file) */
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(la, ab_t, k->tb ? (uint64_t)k->k : (uint64_t)k->n, k->tb ? (uint64_t)k->n : (uint64_t)k->k,
                                       k->ldb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(lb, ab_t, k->ta ? (uint64_t)k->m : (uint64_t)k->k, k->ta ? (uint64_t)k->k : (uint64_t)k->m,
                                       k->lda);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(lc, c_t, (uint64_t)k->n, (uint64_t)k->m, k->ldc);
    if (s == CUBLAS_STATUS_SUCCESS && k->batch > 1) {
        int32_t bc = (int32_t)k->batch;
        const int64_t strides[3] = {k->sb, k->sa, k->sc};
        cublasLtMatrixLayout_t lays[3] = {*la, *lb, *lc};
        for (int i = 0; i < 3 && s == CUBLAS_STATUS_SUCCESS; i++) {
            s = cublasLtMatrixLayoutSetAttribute(lays[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc);
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatrixLayoutSetAttribute(lays[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                                     sizeof strides[i]);
        }
    }
    if (s != CUBLAS_STATUS_SUCCESS) kn_cu_lt_undescribe(*op, *la, *lb, *lc);
    return s;
}

cublasStatus_t kn_cu_lt_set_bias(cublasLtMatmulDesc_t op, const void *bias) {
    return cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
}

void kn_cu_lt_undescribe(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                         cublasLtMatrixLayout_t lc) {
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
}

static bool has_epilogue(const kn_cu_gemm *g) { return g->bias || g->residual || g->relu || g->gelu; }

/* Whether cuBLASLt's GELU epilogue may stand for activation act (KN_ACT_GELU or KN_ACT_GELU_TANH)
 * on a product with output type dt. It computes the tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x +
 * 0.044715 x^3))): exact for GeluTanh; for Gelu (erf) it differs by at most 4.7e-4 (at x = 2.70),
 * which in float16 and bfloat16 is below the output's own rounding wherever |y| >= 0.5 and a
 * fraction of an ulp of the activations' scale below that (relative L2 error of the tanh form over
 * a BERT layer's activations ~1e-4, fp16's unit roundoff 4.9e-4). In float32 it would not be, so
 * there the erf form runs as a pass. KILN_CUDA_GELU_EPILOGUE=0 turns the epilogue off. */
bool kn_cu_gelu_epilogue_ok(int act, kiln_dtype dt) {
    const char *v = getenv("KILN_CUDA_GELU_EPILOGUE");
    if (v && !strcmp(v, "0")) return false;
    if (act == KN_ACT_GELU_TANH) return true;
    return act == KN_ACT_GELU && (dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16);
}

/* Multiply-adds up to which a float32 product runs in TF32 under the fp16 and bf16 precisions: a
 * few microseconds of TF32 tensor work at most on an H100-class GPU, less than the conversions'
 * three launches and passes over the operands would add to the float16 product */
#define KN_CU_SMALL_PRODUCT_MACS (double)(1 << 28)

/* The product; with `fused`, also its epilogue (kn_cu_gemm) in cuBLASLt's call, or
 * KILN_ERR_UNSUPPORTED with nothing run where that cannot be (the caller then runs it after). */
static kiln_status gemm_run(kn_cuda *cu, const kn_kernel_ctx *c, const kn_cu_gemm *g, bool fused) {
    if (g->M == 0 || g->N == 0 || g->batch == 0) return KILN_OK;
    if (fused && (g->K == 0 || g->dt == KILN_DTYPE_DOUBLE || kn_cu_standin(cu, KN_CU_TUNE_MATMUL)))
        return KILN_ERR_UNSUPPORTED;
    if (g->K == 0) {
        /* an empty sum: C = beta * C */
        int64_t n = g->M * g->N * g->batch;
        if (g->beta == 0) return kn_cu_check(c, cudaMemsetAsync(g->C, 0, (size_t)n * kiln_dtype_size(g->dt), cu->stream), "Gemm");
        return kn_cu_check(c, kn_cu_scale(g->dt, g->C, g->C, n, g->beta, cu->stream), "Gemm");
    }
    if (g->batch > 1 && (g->sa == 0 || g->sb == 0)) {
        /* a broadcast operand: one product per batch entry */
        size_t es = kiln_dtype_size(g->dt);
        for (int64_t b = 0; b < g->batch; b++) {
            kn_cu_gemm one = *g;
            one.batch = 1;
            one.A = (const char *)g->A + (size_t)(b * g->sa) * es;
            one.B = (const char *)g->B + (size_t)(b * g->sb) * es;
            one.C = (char *)g->C + (size_t)(b * g->sc) * es;
            KN_TRY(gemm_run(cu, c, &one, false));
        }
        return KILN_OK;
    }
    if (kn_cu_standin(cu, KN_CU_TUNE_MATMUL)) {
        /* cuBLASLt still starting (a warm start's first runs): kiln's own product, in the tensors'
         * type (fp32 tensors stay fp32 whatever the precision option) */
        cudaError_t e = kn_cu_gemm_standin(g->dt, g->M, g->N, g->K, g->batch, g->ta, g->tb, g->A, g->lda, g->sa, g->B,
                                           g->ldb, g->sb, g->C, g->ldc, g->sc, g->alpha, g->beta, cu->stream);
        if (e != cudaErrorInvalidValue && e != cudaErrorNotSupported) { /* else not launched: the library's */
            cu->sh->standin_products++;
            return kn_cu_check(c, e, "matrix product (kiln's own kernel)");
        }
    }
    kn_cu_handles_wait(cu);
    if (!cu->sh->lt)
        return kn_kernel_error(c, KILN_ERR_RUNTIME, "cuBLASLt is not usable: cublasLtCreate failed (status %d)",
                               cu->sh->lt_status);
    cudaDataType_t ab_t, c_t, scale_t = CUDA_R_32F;
    cublasComputeType_t comp = CUBLAS_COMPUTE_32F;
    const void *A = g->A, *B = g->B;
    void *convA = NULL, *convB = NULL;
    /* fp16 precision: operands scaled by powers of two (kn_cu_converted_scaled), alpha and beta then
     * computed on the device (pointer mode device) as alpha / (scale_a * scale_b) and beta */
    const float *scale_a = NULL, *scale_b = NULL;
    float *dev_scalars = NULL;
    size_t convA_bytes = 0, convB_bytes = 0;
    kiln_status st = KILN_OK;
    switch (g->dt) {
    case KILN_DTYPE_FLOAT:
        c_t = CUDA_R_32F;
        ab_t = CUDA_R_32F;
        /* TF32 for the tf32 precision, and for small products under fp16/bf16: converting the
         * operands there takes three launches (amax, convert, scales) longer than the product, and
         * TF32 keeps as many significant bits as float16 with float32's range (no scaling) */
        if (cu->cfg.precision == KN_PRECISION_TF32 || ((cu->cfg.precision == KN_PRECISION_FP16 ||
                                                        cu->cfg.precision == KN_PRECISION_BF16) &&
                                                       (double)g->M * (double)g->N * (double)g->K * (double)g->batch <=
                                                           KN_CU_SMALL_PRODUCT_MACS))
            comp = CUBLAS_COMPUTE_32F_FAST_TF32;
        else if (cu->cfg.precision == KN_PRECISION_FP16 || cu->cfg.precision == KN_PRECISION_BF16) {
            kiln_dtype to = cu->cfg.precision == KN_PRECISION_FP16 ? KILN_DTYPE_FLOAT16 : KILN_DTYPE_BFLOAT16;
            ab_t = to == KILN_DTYPE_FLOAT16 ? CUDA_R_16F : CUDA_R_16BF;
            int64_t ea = extent(g->ta ? g->K : g->M, g->lda, g->batch, g->sa);
            int64_t eb = extent(g->tb ? g->N : g->K, g->ldb, g->batch, g->sb);
            st = kn_cu_converted_scaled(cu, c, g->A, KILN_DTYPE_FLOAT, ea, to, &convA, &convA_bytes, &scale_a);
            if (st == KILN_OK)
                st = kn_cu_converted_scaled(cu, c, g->B, KILN_DTYPE_FLOAT, eb, to, &convB, &convB_bytes, &scale_b);
            if (st == KILN_OK && (scale_a || scale_b)) {
                void *p = NULL;
                st = kn_cu_scratch(cu, 2 * sizeof(float), &p);
                dev_scalars = p;
                if (st == KILN_OK)
                    st = kn_cu_check(c, kn_cu_gemm_scalars(dev_scalars, g->alpha, fused && g->residual ? 1.0f : g->beta,
                                                           scale_a, scale_b, cu->stream),
                                     "fp16 scales");
            }
            A = convA;
            B = convB;
        }
        break;
    case KILN_DTYPE_FLOAT16: ab_t = c_t = CUDA_R_16F; break;
    case KILN_DTYPE_BFLOAT16: ab_t = c_t = CUDA_R_16BF; break;
    case KILN_DTYPE_DOUBLE:
        ab_t = c_t = scale_t = CUDA_R_64F;
        comp = CUBLAS_COMPUTE_64F;
        break;
    default: return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "matrix product of %s on CUDA", kiln_dtype_name(g->dt));
    }
    size_t abs_ = ab_t == CUDA_R_32F ? 4 : ab_t == CUDA_R_64F ? 8 : 2;
    size_t cs = kiln_dtype_size(g->dt);
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    kn_cu_lt_key key;
    memset(&key, 0, sizeof key); /* no padding in it, but compared and stored whole */
    /* the beta term's input: the residual with beta 1 when the epilogue is fused, else C itself */
    const void *c_in = fused && g->residual ? g->residual : g->C;
    const float beta_f = fused && g->residual ? 1.0f : g->beta;
    if (st == KILN_OK) {
        uint64_t al_c = align_of(g->C, g->ldc, g->sc, cs), al_in = align_of(c_in, g->ldc, g->sc, cs);
        int32_t ep = 0;
        if (fused)
            ep = g->bias ? (g->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : g->gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                         : (g->relu ? CUBLASLT_EPILOGUE_RELU : g->gelu ? CUBLASLT_EPILOGUE_GELU : 0);
        key = (kn_cu_lt_key){g->M, g->N, g->K, g->batch, g->lda, g->ldb, g->ldc, g->sa, g->sb, g->sc, g->ta, g->tb,
                             (int32_t)ab_t, (int32_t)c_t, (int32_t)comp, (int32_t)scale_t,
                             (int32_t)align_of(B, g->ldb, g->sb, abs_), (int32_t)align_of(A, g->lda, g->sa, abs_),
                             (int32_t)(al_in < al_c ? al_in : al_c), dev_scalars != NULL, ep, 0};
        s = kn_cu_lt_describe(&key, &op, &la, &lb, &lc);
        if (s == CUBLAS_STATUS_SUCCESS && fused && g->bias) s = kn_cu_lt_set_bias(op, g->bias);
        if (s != CUBLAS_STATUS_SUCCESS) st = lt_fail(c, s, "descriptor");
    }
    if (st == KILN_OK) {
        uint32_t al_a = (uint32_t)key.align_a, al_b = (uint32_t)key.align_b, al_c = (uint32_t)key.align_c;
        cublasLtMatmulAlgo_t algo;
        bool from_file = false;
        double ad = g->alpha, bd = beta_f;
        float af = g->alpha, bf = beta_f;
        const void *alpha = dev_scalars ? (const void *)dev_scalars
                            : scale_t == CUDA_R_64F ? (const void *)&ad : (const void *)&af;
        const void *beta = dev_scalars ? (const void *)(dev_scalars + 1)
                           : scale_t == CUDA_R_64F ? (const void *)&bd : (const void *)&bf;
        lt_problem prob = {op, la, lb, lc, al_a, al_b, al_c, alpha, beta, B, A, c_in,
                           (size_t)extent(g->M, g->ldc, g->batch, g->sc) * cs};
        /* at most twice: an imported choice cuBLASLt refuses is dropped for the heuristic's */
        for (int attempt = 0; attempt < 2; attempt++) {
            st = find_algo(cu, c, &key, &prob, &algo, &from_file);
            if (st != KILN_OK) break;
            s = cublasLtMatmul(cu->sh->lt, op, alpha, B, la, A, lb, beta, c_in, lc, g->C, lc, &algo, cu->workspace,
                               cu->workspace_size, cu->stream);
            if (from_file) settle(cu, &key, s == CUBLAS_STATUS_SUCCESS);
            if (s == CUBLAS_STATUS_SUCCESS) break;
            st = lt_fail(c, s, "matmul");
            if (!from_file) break;
            kn_log(KILN_LOG_DEBUG, "cuda: the compiled file's cuBLASLt choice for '%s' was refused (status %d): "
                   "heuristic instead", c->node && c->node->name ? c->node->name : "", (int)s);
            cudaGetLastError();
        }
        /* an epilogue this algorithm or layout does not take: the caller runs it as a pass */
        if (fused && st != KILN_OK && s == CUBLAS_STATUS_NOT_SUPPORTED) st = KILN_ERR_UNSUPPORTED;
    }
    kn_cu_lt_undescribe(op, la, lb, lc);
    if (dev_scalars) kn_cu_scratch_free(cu, dev_scalars, 2 * sizeof(float));
    if (convA_bytes) kn_cu_scratch_free(cu, convA, convA_bytes);
    if (convB_bytes) kn_cu_scratch_free(cu, convB, convB_bytes);
    return st;
}

kiln_status kn_cu_gemm_run(kn_cuda *cu, const kn_kernel_ctx *c, const kn_cu_gemm *g) {
    if (!has_epilogue(g)) return gemm_run(cu, c, g, false);
    if (g->batch != 1 || g->ldc != g->N || g->beta != 0 || (g->residual && g->residual == g->C))
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "a product's epilogue needs one product into whole rows, beta 0, "
                               "a residual apart from the output");
    kiln_status st = gemm_run(cu, c, g, true);
    if (st != KILN_ERR_UNSUPPORTED) return st;
    /* cuBLASLt cannot take it here (kiln's stand-ins, double, no algorithm with the epilogue): the
     * product, then the epilogue as a pass of its own */
    kn_clear_error();
    kn_cu_gemm plain = *g;
    plain.bias = plain.residual = NULL;
    plain.relu = false;
    plain.gelu = 0;
    KN_TRY(gemm_run(cu, c, &plain, false));
    return kn_cu_check(c, kn_cu_epilogue(g->dt, g->C, g->bias, g->bias ? g->N : 0, g->N, 1, g->residual,
                                         g->relu ? KN_ACT_RELU : g->gelu ? g->gelu : KN_ACT_NONE, 0, 0, g->M * g->N,
                                         cu->stream),
                       "the product's epilogue");
}

/* ------------------------------------------------------------------ MatMul */

kiln_status kn_cu_matmul_bcast(kn_cuda *cu, const kn_kernel_ctx *c, kiln_dtype dt, const void *A, const int64_t *a_bd,
                               int na, const void *B, const int64_t *b_bd, int nb, void *C, const int64_t *o_bd, int no,
                               int64_t M, int64_t N, int64_t K, float alpha) {
    /* batch dims right-aligned onto the output's */
    int64_t ad[KILN_MAX_RANK], bd[KILN_MAX_RANK], od[KILN_MAX_RANK];
    int64_t batch = 1, batch_a = 1, batch_b = 1;
    for (int i = 0; i < no; i++) {
        ad[i] = i - (no - na) >= 0 ? a_bd[i - (no - na)] : 1;
        bd[i] = i - (no - nb) >= 0 ? b_bd[i - (no - nb)] : 1;
        od[i] = o_bd[i];
        batch *= od[i];
        batch_a *= ad[i];
        batch_b *= bd[i];
    }
    kn_cu_gemm g = {0};
    g.dt = dt;
    g.M = M;
    g.N = N;
    g.K = K;
    g.A = A;
    g.B = B;
    g.C = C;
    g.lda = K;
    g.ldb = N;
    g.ldc = N;
    g.alpha = alpha;
    g.beta = 0;
    g.batch = 1;
    if (batch == 0) return KILN_OK;
    if (batch_b == 1 && batch_a == batch) {
        /* B shared by every batch entry: one product with the batch folded into M */
        g.M = M * batch;
        return kn_cu_gemm_run(cu, c, &g);
    }
    if (batch_a == batch && batch_b == batch) {
        g.batch = batch;
        g.sa = M * K;
        g.sb = K * N;
        g.sc = M * N;
        return kn_cu_gemm_run(cu, c, &g);
    }
    /* general broadcasting: one product per output batch entry */
    size_t es = kiln_dtype_size(dt);
    for (int64_t o = 0; o < batch; o++) {
        int64_t rest = o, ia = 0, ib = 0, sa = 1, sb = 1;
        for (int i = no - 1; i >= 0; i--) {
            int64_t ci = rest % od[i];
            rest /= od[i];
            ia += (ad[i] == 1 ? 0 : ci) * sa;
            ib += (bd[i] == 1 ? 0 : ci) * sb;
            sa *= ad[i];
            sb *= bd[i];
        }
        kn_cu_gemm one = g;
        one.A = (const char *)A + (size_t)(ia * M * K) * es;
        one.B = (const char *)B + (size_t)(ib * K * N) * es;
        one.C = (char *)C + (size_t)(o * M * N) * es;
        KN_TRY(kn_cu_gemm_run(cu, c, &one));
    }
    return KILN_OK;
}

kiln_status kn_cu_run_matmul(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *a = c->in[0], *b = c->in[1];
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    int ra = a->rank, rb = b->rank;
    if (ra < 1 || rb < 1) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "MatMul of a scalar");
    int64_t M = ra == 1 ? 1 : a->dims[ra - 2], K = a->dims[ra - 1];
    int64_t N = rb == 1 ? 1 : b->dims[rb - 1], Kb = rb == 1 ? b->dims[0] : b->dims[rb - 2];
    if (K != Kb) return kn_kernel_error(c, KILN_ERR_SHAPE, "inner dimensions %lld and %lld differ", (long long)K, (long long)Kb);
    int na = ra > 2 ? ra - 2 : 0, nb = rb > 2 ? rb - 2 : 0, no = na > nb ? na : nb;
    int64_t od[KILN_MAX_RANK];
    for (int i = 0; i < no; i++) {
        int64_t x = i - (no - na) >= 0 ? a->dims[i - (no - na)] : 1, z = i - (no - nb) >= 0 ? b->dims[i - (no - nb)] : 1;
        od[i] = x > z ? x : z;
    }
    return kn_cu_matmul_bcast(cu, c, a->dtype, a->data, a->dims, na, b->data, b->dims, nb, y->data, od, no, M, N, K, 1.0f);
}

static bool same_types(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n;
    for (int i = 1; i < n_in; i++)
        if (in[i] && in[i]->dtype != in[0]->dtype) {
            snprintf(why, cap, "inputs of types %s and %s", kiln_dtype_name(in[0]->dtype), kiln_dtype_name(in[i]->dtype));
            return false;
        }
    return true;
}

/* ------------------------------------------------------------------ Gemm */

kiln_status kn_cu_run_gemm(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *a = c->in[0], *b = c->in[1], *cc = c->n_inputs > 2 ? c->in[2] : NULL;
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    if (a->rank != 2 || b->rank != 2) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "Gemm takes 2-D A and B");
    KN_CTX_PRM(c, kn_gemm_attrs_prepare, kn_gemm_attrs, prm);
    bool ta = prm->ta, tb = prm->tb;
    float alpha = prm->alpha, beta = prm->beta;
    kn_cu_gemm g = {0};
    g.dt = a->dtype;
    g.ta = ta;
    g.tb = tb;
    g.M = ta ? a->dims[1] : a->dims[0];
    g.K = ta ? a->dims[0] : a->dims[1];
    g.N = tb ? b->dims[0] : b->dims[1];
    int64_t kb = tb ? b->dims[1] : b->dims[0];
    if (kb != g.K)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "op(A) is [%lld,%lld] but op(B) is [%lld,%lld] (transA=%d, transB=%d)",
                               (long long)g.M, (long long)g.K, (long long)kb, (long long)g.N, ta, tb);
    g.A = a->data;
    g.B = b->data;
    g.C = y->data;
    g.lda = a->dims[1];
    g.ldb = b->dims[1];
    g.ldc = g.N;
    g.batch = 1;
    g.alpha = alpha;
    g.beta = 0;
    if (cc && beta != 0 && kn_tensor_count(cc) > 0) {
        /* Y = broadcast C, then Y = alpha op(A) op(B) + beta Y in one product */
        kn_cu_view v;
        const kn_tensor *ops[1] = {cc};
        kn_cu_make_view(&v, y->dims, y->rank, ops, 1);
        KN_TRY(kn_cu_check(c, kn_cu_copy_view(kiln_dtype_size(cc->dtype), cc->data, 0, y->data, &v, cu->stream),
                           "Gemm bias"));
        g.beta = beta;
    }
    return kn_cu_gemm_run(cu, c, &g);
}

/* ------------------------------------------------------------------ LSTM, GRU, RNN */

static bool default_activations(const kn_node *n, const char *const *want, int nwant, int dirs) {
    int na = 0;
    const kn_attr *a = kn_node_attr(n, "activations");
    if (!a) return true;
    na = a->n;
    if (na != nwant * dirs) return false;
    for (int i = 0; i < na; i++)
        if (strcasecmp(a->strings[i], want[i % nwant])) return false;
    return true;
}

static int dirs_of(const kn_node *n) {
    return !strcmp(kn_attr_string(n, "direction", "forward"), "bidirectional") ? 2 : 1;
}

static bool rnn_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    int dirs = dirs_of(n);
    static const char *const lstm[] = {"Sigmoid", "Tanh", "Tanh"}, *const gru[] = {"Sigmoid", "Tanh"};
    if (!strcmp(n->op_type, "LSTM") && !default_activations(n, lstm, 3, dirs)) {
        snprintf(why, cap, "non-default activations");
        return false;
    }
    if (!strcmp(n->op_type, "GRU") && !default_activations(n, gru, 2, dirs)) {
        snprintf(why, cap, "non-default activations");
        return false;
    }
    if (!strcmp(n->op_type, "RNN")) {
        const kn_attr *a = kn_node_attr(n, "activations");
        for (int i = 0; a && i < a->n; i++)
            if (strcasecmp(a->strings[i], "Tanh") && strcasecmp(a->strings[i], "Relu") && strcasecmp(a->strings[i], "Sigmoid")) {
                snprintf(why, cap, "activation %s", a->strings[i]);
                return false;
            }
    }
    if (kn_node_attr(n, "activation_alpha") || kn_node_attr(n, "activation_beta")) {
        snprintf(why, cap, "activation_alpha/beta");
        return false;
    }
    if (n_in > 4 && in[4] && in[4]->dtype != KILN_DTYPE_INT32) {
        snprintf(why, cap, "sequence_lens of type %s", kiln_dtype_name(in[4]->dtype));
        return false;
    }
    for (int i = 1; i < n_in; i++)
        if (i != 4 && in[i] && in[i]->dtype != in[0]->dtype) {
            snprintf(why, cap, "input %d of type %s", i, kiln_dtype_name(in[i]->dtype));
            return false;
        }
    return true;
}

/* The batch items each block of the one-launch recurrence takes, and its shared memory; false when
 * the steps should run one by one instead: R too large for one block's shared memory, more than 8
 * items per block with a block per multiprocessor (then a device-wide product per step is faster),
 * or double. */
static bool rnn_in_one_launch(const kn_cuda *cu, kiln_dtype dt, int G, int dirs, int64_t B, int64_t H, int *rows,
                              size_t *smem) {
    if (cu->rnn_steps || B < 1 || cu->sm_count < 1) return false;
    int64_t r = (B * dirs + cu->sm_count - 1) / cu->sm_count; /* fewest items per block: most blocks */
    if (r > 8) return false;
    *rows = r <= 1 ? 1 : r <= 2 ? 2 : r <= 4 ? 4 : 8;
    *smem = kn_cu_rnn_seq_smem(dt, G, H, *rows);
    return *smem > 0 && *smem <= (size_t)cu->smem_optin;
}

/* The batch items each block of the register-resident recurrence (k_rnn_reg) takes; false when
 * it does not take this one: a hidden size over 96, a GRU without linear_before_reset, more than 4
 * items per block with a block per multiprocessor, or KILN_CUDA_RNN=steps|shared. */
static bool rnn_in_registers(const kn_cuda *cu, kiln_dtype dt, int G, bool lbr, int dirs, int64_t B, int64_t H,
                             int *rows) {
    if (cu->rnn_steps || cu->rnn_shared || B < 1 || cu->sm_count < 1) return false;
    int64_t r = (B * dirs + cu->sm_count - 1) / cu->sm_count;
    if (r > 4) return false;
    *rows = r <= 1 ? 1 : r <= 2 ? 2 : 4;
    return kn_cu_rnn_reg_fits(dt, G, lbr, H, *rows);
}

/* A row-major C = A B^T (A [M, K], B [N, K], C [M, N]): the recurrences' products. */
static kn_cu_gemm gemm_abt(kiln_dtype dt, int64_t M, int64_t N, int64_t K, const void *A, const void *B, void *C) {
    kn_cu_gemm g = {0};
    g.dt = dt;
    g.M = M;
    g.N = N;
    g.K = K;
    g.tb = true;
    g.A = A;
    g.B = B;
    g.C = C;
    g.lda = K;
    g.ldb = K;
    g.ldc = N;
    g.batch = 1;
    g.alpha = 1;
    return g;
}

/* how often each way ran, for tests (kn_cuda_rnn_one_launch_runs, kn_cuda_rnn_register_runs,
 * kn_cuda_lstm_stack_runs) */
static _Atomic long long one_launch_runs, register_runs, stack_runs;
long long kn_cuda_rnn_one_launch_runs(void) { return one_launch_runs; }
long long kn_cuda_rnn_register_runs(void) { return register_runs; }
long long kn_cuda_lstm_stack_runs(void) { return stack_runs; }

/* X W^T of every step and direction in one product, then the recurrence in one launch: R in
 * registers (smem 0) or in shared memory. */
static kiln_status run_rnn_one_launch(kn_cuda *cu, kn_kernel_ctx *c, kn_cu_rnn_seq *p, const kn_tensor *X,
                                      const kn_tensor *W, size_t smem) {
    kiln_dtype dt = X->dtype;
    int64_t N = p->dirs * p->gates * p->hidden, I = X->dims[2];
    size_t gx_b = (size_t)(p->T * p->batch * N) * kiln_dtype_size(dt);
    void *gx = NULL;
    kiln_status st = kn_cu_scratch(cu, gx_b ? gx_b : 1, &gx);
    if (st != KILN_OK) return st;
    kn_cu_gemm g = gemm_abt(dt, p->T * p->batch, N, I, X->data, W->data, gx);
    if (g.M > 0) st = kn_cu_gemm_run(cu, c, &g);
    p->gx = gx;
    if (st == KILN_OK)
        st = kn_cu_check(c, smem ? kn_cu_rnn_seq_run(dt, p, smem, cu->stream) : kn_cu_rnn_reg_run(dt, p, cu->stream),
                         c->node->op_type);
    if (st == KILN_OK) {
        one_launch_runs++;
        if (!smem) register_runs++;
    }
    kn_cu_scratch_free(cu, gx, gx_b ? gx_b : 1);
    return st;
}

/* LSTM's, GRU's and RNN's attributes, read once (their prepare hook) */
typedef struct cu_rnn_prm {
    int dirs;
    bool has_hidden; /* hidden_size given (an int): else R's */
    int64_t hidden;
    float clip;
    bool reverse_only, lbr, input_forget;
    bool batch_first; /* layout=1: X [batch, seq, input], Y [batch, seq, dirs, hidden], states [batch, dirs, hidden] */
    int act; /* RNN's first activation: 0 Tanh, 1 Relu, 2 Sigmoid */
} cu_rnn_prm;

static kiln_status cu_rnn_prepare(const kn_node *n, void *params) {
    cu_rnn_prm *p = params;
    memset(p, 0, sizeof *p);
    p->dirs = dirs_of(n);
    const kn_attr *hs = kn_node_attr(n, "hidden_size");
    p->has_hidden = hs && hs->type == KN_ATTR_INT;
    p->hidden = p->has_hidden ? hs->i : 0;
    p->clip = kn_attr_float(n, "clip", 0.0f);
    p->reverse_only = !strcmp(kn_attr_string(n, "direction", "forward"), "reverse");
    p->lbr = kn_attr_int(n, "linear_before_reset", 0) != 0;
    p->input_forget = kn_attr_int(n, "input_forget", 0) != 0;
    p->batch_first = kn_attr_int(n, "layout", 0) != 0;
    const kn_attr *a = kn_node_attr(n, "activations");
    if (a && a->n > 0) p->act = !strcasecmp(a->strings[0], "Relu") ? 1 : !strcasecmp(a->strings[0], "Sigmoid") ? 2 : 0;
    return KILN_OK;
}

/* The recurrence in the time-major layout (layout=0). */
static kiln_status rnn_time_major(kn_cuda *cu, kn_kernel_ctx *c) {
    const char *op = c->node->op_type;
    int G = !strcmp(op, "LSTM") ? 4 : !strcmp(op, "GRU") ? 3 : 1;
    const kn_tensor *X = c->in[0], *W = c->in[1], *R = c->in[2];
    const kn_tensor *Bi = c->n_inputs > 3 ? c->in[3] : NULL, *lens = c->n_inputs > 4 ? c->in[4] : NULL;
    const kn_tensor *h0 = c->n_inputs > 5 ? c->in[5] : NULL, *c0 = G == 4 && c->n_inputs > 6 ? c->in[6] : NULL;
    const kn_tensor *P = G == 4 && c->n_inputs > 7 ? c->in[7] : NULL;
    kn_tensor *Y = c->n_outputs > 0 ? c->out[0] : NULL, *Yh = c->n_outputs > 1 ? c->out[1] : NULL,
              *Yc = G == 4 && c->n_outputs > 2 ? c->out[2] : NULL;
    if (X->rank != 3) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "X must be [seq, batch, input]");
    int64_t T = X->dims[0], B = X->dims[1], I = X->dims[2];
    KN_CTX_PRM(c, cu_rnn_prepare, cu_rnn_prm, prm);
    int dirs = prm->dirs;
    int64_t H = prm->has_hidden ? prm->hidden : R->dims[2];
    float clip = prm->clip;
    bool reverse_only = prm->reverse_only;
    bool lbr = prm->lbr;
    bool input_forget = prm->input_forget;
    int act = G == 1 ? prm->act : 0;
    kiln_dtype dt = X->dtype;
    if (T == 0) { /* no step: every output is zero (the CPU's and ONNX Runtime's answer) */
        kn_tensor *outs[3] = {Y, Yh, Yc};
        kiln_status st = KILN_OK;
        for (int k = 0; k < 3 && st == KILN_OK; k++)
            if (outs[k] && outs[k]->nbytes)
                st = kn_cu_check(c, cudaMemsetAsync(outs[k]->data, 0, outs[k]->nbytes, cu->stream), op);
        return st;
    }
    /* sequence_lens outside [0, T]: the node's error, as on the CPU (the kernels clamp them to T) */
    if (lens && kn_tensor_count(lens) > 0)
        KN_TRY(kn_cu_check(c, kn_cu_check_range(lens->data, false, kn_tensor_count(lens), 0, T + 1, KN_CU_ERR_SEQLEN,
                                                kn_cu_err_at(cu, c), cu->stream),
                           op));
    int rows = 0;
    size_t smem = 0;
    if (rnn_in_registers(cu, dt, G, lbr, dirs, B, H, &rows) || rnn_in_one_launch(cu, dt, G, dirs, B, H, &rows, &smem)) {
        kn_cu_rnn_seq p = {0};
        p.gates = G;
        p.dirs = dirs;
        p.reverse = reverse_only;
        p.T = T;
        p.batch = B;
        p.hidden = H;
        p.R = R->data;
        p.bias = Bi ? Bi->data : NULL;
        p.h0 = h0 ? h0->data : NULL;
        p.c0 = c0 ? c0->data : NULL;
        p.peep = P ? P->data : NULL;
        p.seq_lens = lens ? (const int32_t *)lens->data : NULL;
        p.y = Y && Y->nbytes ? Y->data : NULL;
        p.yh = Yh && Yh->nbytes ? Yh->data : NULL;
        p.yc = Yc && Yc->nbytes ? Yc->data : NULL;
        p.clip = clip;
        p.input_forget = input_forget;
        p.linear_before_reset = lbr;
        p.act = act;
        p.rows = rows;
        return run_rnn_one_launch(cu, c, &p, X, W, smem);
    }
    size_t es = kiln_dtype_size(dt);
    int64_t GH = G * H;
    void *gx = NULL, *gh = NULL, *h = NULL, *cs = NULL, *bias = NULL, *rh = NULL, *ghh = NULL;
    size_t gx_b = (size_t)(T * B * GH) * es, gh_b = (size_t)(B * GH) * es, h_b = (size_t)(B * H) * es,
           bias_b = (size_t)GH * es;
    kiln_status st = kn_cu_scratch(cu, gx_b ? gx_b : 1, &gx);
    if (st == KILN_OK) st = kn_cu_scratch(cu, gh_b ? gh_b : 1, &gh);
    if (st == KILN_OK) st = kn_cu_scratch(cu, h_b ? h_b : 1, &h);
    if (st == KILN_OK && G == 4) st = kn_cu_scratch(cu, h_b ? h_b : 1, &cs);
    if (st == KILN_OK) st = kn_cu_scratch(cu, bias_b, &bias);
    if (st == KILN_OK && G == 3 && !lbr) {
        st = kn_cu_scratch(cu, h_b ? h_b : 1, &rh);
        if (st == KILN_OK) st = kn_cu_scratch(cu, h_b ? h_b : 1, &ghh);
    }
    int32_t *lens_dev = lens ? (int32_t *)lens->data : NULL;
    if (st == KILN_OK && Y && Y->nbytes) st = kn_cu_check(c, cudaMemsetAsync(Y->data, 0, Y->nbytes, cu->stream), op);
    for (int d = 0; d < dirs && st == KILN_OK; d++) {
        bool rev = reverse_only || d == 1;
        const char *Wd = (const char *)W->data + (size_t)(d * GH * I) * es;
        const char *Rd = (const char *)R->data + (size_t)(d * GH * H) * es;
        /* input projections of every step: gx = X W^T + (Wb + Rb) */
        kn_cu_gemm g = gemm_abt(dt, T * B, GH, I, X->data, Wd, gx);
        st = kn_cu_gemm_run(cu, c, &g);
        if (st != KILN_OK) break;
        if (Bi) {
            const char *Bd = (const char *)Bi->data + (size_t)(d * 2 * GH) * es;
            kn_tensor wb = {0}, rb = {0}, bb = {0};
            wb.kind = rb.kind = bb.kind = KN_VALUE_TENSOR;
            wb.dtype = rb.dtype = bb.dtype = dt;
            wb.rank = rb.rank = bb.rank = 1;
            int64_t n_add = G == 3 ? 2 * H : GH; /* the GRU's Rbh is applied inside the cell */
            wb.dims[0] = rb.dims[0] = bb.dims[0] = n_add;
            wb.data = (void *)Bd;
            rb.data = (void *)(Bd + (size_t)GH * es);
            bb.data = bias;
            kn_cu_view v;
            const kn_tensor *ops[2] = {&wb, &rb};
            kn_cu_make_view(&v, bb.dims, 1, ops, 2);
            st = kn_cu_check(c, kn_cu_binary(KN_CU_ADD, dt, wb.data, rb.data, bias, &v, cu->stream), op);
            if (st == KILN_OK && G == 3)
                st = kn_cu_check(c, cudaMemcpyAsync((char *)bias + (size_t)(2 * H) * es, Bd + (size_t)(2 * H) * es, (size_t)H * es,
                                                    cudaMemcpyDeviceToDevice, cu->stream),
                                 op);
            if (st == KILN_OK)
                st = kn_cu_check(c, kn_cu_bias_act(dt, gx, bias, T * B, GH, 1, 0, 0, 0, cu->stream), op);
            if (st != KILN_OK) break;
        }
        const void *rbh = Bi && G == 3 ? (const char *)Bi->data + (size_t)(d * 2 * GH + GH + 2 * H) * es : NULL;
        /* initial state */
        if (h0) st = kn_cu_check(c, cudaMemcpyAsync(h, (const char *)h0->data + (size_t)(d * B * H) * es, h_b,
                                                    cudaMemcpyDeviceToDevice, cu->stream), op);
        else st = kn_cu_check(c, cudaMemsetAsync(h, 0, h_b, cu->stream), op);
        if (st == KILN_OK && G == 4) {
            if (c0) st = kn_cu_check(c, cudaMemcpyAsync(cs, (const char *)c0->data + (size_t)(d * B * H) * es, h_b,
                                                        cudaMemcpyDeviceToDevice, cu->stream), op);
            else st = kn_cu_check(c, cudaMemsetAsync(cs, 0, h_b, cu->stream), op);
        }
        void *y = Y ? (char *)Y->data + (size_t)(d * B * H) * es : NULL;
        int64_t y_step = dirs * B * H;
        const void *peep = P ? (const char *)P->data + (size_t)(d * 3 * H) * es : NULL;
        for (int64_t s = 0; s < T && st == KILN_OK; s++) {
            kn_cu_gemm gs = gemm_abt(dt, B, GH, H, h, Rd, gh);
            st = kn_cu_gemm_run(cu, c, &gs);
            if (st != KILN_OK) break;
            if (G == 4) {
                st = kn_cu_check(c, kn_cu_lstm_cell(dt, gx, gh, h, cs, y, y_step, peep, lens_dev, s, T, rev, B, H, clip,
                                                    input_forget, cu->stream), op);
            } else if (G == 3) {
                if (lbr) {
                    st = kn_cu_check(c, kn_cu_gru_cell(dt, gx, gh, (const char *)gh + (size_t)(2 * H) * es, GH, rbh, h, y,
                                                       y_step, lens_dev, s, T, rev, B, H, clip, true, cu->stream), op);
                } else {
                    st = kn_cu_check(c, kn_cu_gru_reset(dt, gx, gh, h, rh, lens_dev, s, T, rev, B, H, clip, cu->stream), op);
                    if (st == KILN_OK) {
                        kn_cu_gemm gr = gs;
                        gr.N = H;
                        gr.A = rh;
                        gr.B = Rd + (size_t)(2 * H * H) * es;
                        gr.C = ghh;
                        gr.ldc = H;
                        st = kn_cu_gemm_run(cu, c, &gr);
                    }
                    if (st == KILN_OK)
                        st = kn_cu_check(c, kn_cu_gru_cell(dt, gx, gh, ghh, H, rbh, h, y, y_step, lens_dev, s, T, rev, B,
                                                           H, clip, false, cu->stream), op);
                }
            } else {
                st = kn_cu_check(c, kn_cu_rnn_cell(dt, gx, gh, h, y, y_step, lens_dev, s, T, rev, B, H, clip, act,
                                                   cu->stream), op);
            }
        }
        if (st == KILN_OK && Yh)
            st = kn_cu_check(c, cudaMemcpyAsync((char *)Yh->data + (size_t)(d * B * H) * es, h, h_b,
                                                cudaMemcpyDeviceToDevice, cu->stream), op);
        if (st == KILN_OK && Yc)
            st = kn_cu_check(c, cudaMemcpyAsync((char *)Yc->data + (size_t)(d * B * H) * es, cs, h_b,
                                                cudaMemcpyDeviceToDevice, cu->stream), op);
    }
    kn_cu_scratch_free(cu, gx, gx_b ? gx_b : 1);
    kn_cu_scratch_free(cu, gh, gh_b ? gh_b : 1);
    kn_cu_scratch_free(cu, h, h_b ? h_b : 1);
    if (cs) kn_cu_scratch_free(cu, cs, h_b ? h_b : 1);
    kn_cu_scratch_free(cu, bias, bias_b);
    if (rh) kn_cu_scratch_free(cu, rh, h_b ? h_b : 1);
    if (ghh) kn_cu_scratch_free(cu, ghh, h_b ? h_b : 1);
    return st;
}

/* y (rank r, dims ydims) = x read at element strides xs: a permuted copy */
static kiln_status permuted(kn_cuda *cu, kn_kernel_ctx *c, size_t es, const void *x, void *y, int r, const int64_t *ydims,
                            const int64_t *xs) {
    int64_t n = 1;
    for (int d = 0; d < r; d++) n *= ydims[d];
    if (n == 0) return KILN_OK;
    kn_cu_view v;
    kn_cu_view_strided(&v, r, ydims, xs);
    return kn_cu_check(c, kn_cu_copy_view(es, x, 0, y, &v, cu->stream), c->node->op_type);
}

/* A tensor like t over scratch memory with new dims (the run's inner layout). */
static kn_tensor scratch_like(const kn_tensor *t, int r, const int64_t *dims, void *data) {
    kn_tensor v = *t;
    v.rank = r;
    for (int d = 0; d < r; d++) v.dims[d] = dims[d];
    v.data = data;
    v.owns_data = false;
    v.pool = NULL;
    return v;
}

/* layout=1: X [B, T, I] and the initial states [B, dirs, H] to the time-major layout, the recurrence,
 * then Y [T, dirs, B, H] to [B, T, dirs, H] and Y_h, Y_c to [B, dirs, H]. */
static kiln_status rnn_batch_first(kn_cuda *cu, kn_kernel_ctx *c, int dirs, int64_t H) {
    const int G = !strcmp(c->node->op_type, "LSTM") ? 4 : !strcmp(c->node->op_type, "GRU") ? 3 : 1;
    const kn_tensor *X = c->in[0];
    if (X->rank != 3) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "X must be [batch, seq, input] (layout=1)");
    const int64_t B = X->dims[0], T = X->dims[1], I = X->dims[2], D = dirs;
    const size_t es = kiln_dtype_size(X->dtype);
    kn_tensor *ins[8] = {NULL}, *outs[3] = {NULL};
    for (int i = 0; i < c->n_inputs && i < 8; i++) ins[i] = c->in[i];
    for (int i = 0; i < c->n_outputs && i < 3; i++) outs[i] = c->out[i];
    /* scratch: x, h0, c0 in, y, y_h, y_c out */
    const int64_t xd[3] = {T, B, I}, sd[3] = {D, B, H}, yd[4] = {T, D, B, H};
    const size_t bytes[6] = {(size_t)(T * B * I) * es, (size_t)(D * B * H) * es, (size_t)(D * B * H) * es,
                             (size_t)(T * D * B * H) * es, (size_t)(D * B * H) * es, (size_t)(D * B * H) * es};
    void *mem[6] = {NULL};
    kn_tensor tx, th, tc, ty, tyh, tyc;
    kiln_status st = KILN_OK;
    for (int k = 0; k < 6 && st == KILN_OK; k++) st = kn_cu_scratch(cu, bytes[k] ? bytes[k] : 1, &mem[k]);
    if (st == KILN_OK) { /* x[t, b, i] = X[b, t, i] */
        const int64_t xs[3] = {I, T * I, 1};
        st = permuted(cu, c, es, X->data, mem[0], 3, xd, xs);
        tx = scratch_like(X, 3, xd, mem[0]);
        ins[0] = &tx;
    }
    const int64_t ss[3] = {H, D * H, 1}; /* state[d, b, h] = given[b, d, h] */
    if (st == KILN_OK && c->n_inputs > 5 && c->in[5]) {
        st = permuted(cu, c, es, c->in[5]->data, mem[1], 3, sd, ss);
        th = scratch_like(c->in[5], 3, sd, mem[1]);
        ins[5] = &th;
    }
    if (st == KILN_OK && G == 4 && c->n_inputs > 6 && c->in[6]) {
        st = permuted(cu, c, es, c->in[6]->data, mem[2], 3, sd, ss);
        tc = scratch_like(c->in[6], 3, sd, mem[2]);
        ins[6] = &tc;
    }
    if (outs[0]) ty = scratch_like(outs[0], 4, yd, mem[3]), outs[0] = &ty;
    if (c->n_outputs > 1 && outs[1]) tyh = scratch_like(outs[1], 3, sd, mem[4]), outs[1] = &tyh;
    if (c->n_outputs > 2 && outs[2]) tyc = scratch_like(outs[2], 3, sd, mem[5]), outs[2] = &tyc;
    if (st == KILN_OK) {
        kn_kernel_ctx inner = *c;
        inner.in = ins;
        inner.out = outs;
        st = rnn_time_major(cu, &inner);
    }
    if (st == KILN_OK && c->out[0] && c->out[0]->nbytes) { /* Y[b, t, d, h] = y[t, d, b, h] */
        const int64_t od[4] = {B, T, D, H}, os[4] = {H, D * B * H, B * H, 1};
        st = permuted(cu, c, es, mem[3], c->out[0]->data, 4, od, os);
    }
    const int64_t od[3] = {B, D, H}, os[3] = {H, B * H, 1}; /* Y_h[b, d, h] = y_h[d, b, h] */
    for (int k = 1; k < 3 && st == KILN_OK; k++)
        if (c->n_outputs > k && c->out[k] && c->out[k]->nbytes) st = permuted(cu, c, es, mem[3 + k], c->out[k]->data, 3, od, os);
    for (int k = 0; k < 6; k++)
        if (mem[k]) kn_cu_scratch_free(cu, mem[k], bytes[k] ? bytes[k] : 1);
    return st;
}

static kiln_status run_rnn(kn_cuda *cu, kn_kernel_ctx *c) {
    KN_CTX_PRM(c, cu_rnn_prepare, cu_rnn_prm, prm);
    if (!prm->batch_first) return rnn_time_major(cu, c);
    const kn_tensor *R = c->in[2];
    if (R->rank != 3) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "R must be [dirs, gates * hidden, hidden]");
    return rnn_batch_first(cu, c, prm->dirs, prm->has_hidden ? prm->hidden : R->dims[2]);
}

/* ------------------------------------------------------------------ kiln.StackedLSTM */

_Static_assert(sizeof(cu_rnn_prm) <= KN_PARAMS_HANDED_MAX, "a layer's block is handed on the stack");

/* StackedLSTM's hook: the block of its layers' LSTM (no attributes), handed to each layer's call */
static kiln_status cu_stacked_prepare(const kn_node *n, void *params) {
    (void)n;
    kn_node layer;
    memset(&layer, 0, sizeof layer);
    layer.op_type = "LSTM";
    layer.domain = "";
    layer.opset = 14;
    return cu_rnn_prepare(&layer, params);
}

/* The layers one after another as LSTM nodes (what the pipeline falls back to). */
static kiln_status run_layers(kn_cuda *cu, kn_kernel_ctx *c) {
    int layers = kn_stacked_lstm_layers(c->n_inputs);
    KN_CTX_PRM(c, cu_stacked_prepare, cu_rnn_prm, prm);
    kn_params_handed blk; /* each layer's call gets the block as its own */
    const kn_tensor *X = c->in[0];
    size_t es = kiln_dtype_size(X->dtype);
    kn_tensor prev, *prev_p = NULL;
    void *prev_mem = NULL;
    size_t prev_bytes = 0;
    kiln_status st = KILN_OK;
    for (int l = 0; l < layers && st == KILN_OK; l++) {
        bool last = l == layers - 1;
        kn_tensor y, *y_p = &y;
        kn_stacked_layer layer;
        kn_stacked_lstm_layer(c, l, prev_p ? prev_p : (kn_tensor *)X, last ? NULL : &y_p, &layer);
        layer.ctx.params = kn_params_hand(&blk, cu_rnn_prepare, &layer.node, prm, sizeof *prm);
        void *y_mem = NULL;
        size_t y_bytes = 0;
        if (!last) { /* Y [T, 1, B, H], the next layer's X as [T, B, H] */
            int64_t H = layer.in[2]->dims[2];
            y = *X;
            y.rank = 4;
            y.dims[1] = 1;
            y.dims[2] = X->dims[1];
            y.dims[3] = H;
            y_bytes = (size_t)(X->dims[0] * X->dims[1] * H) * es;
            st = kn_cu_scratch(cu, y_bytes ? y_bytes : 1, &y_mem);
            if (st != KILN_OK) break;
            y.data = y_mem;
            y.nbytes = y.capacity = y_bytes;
            y.owns_data = false;
            y.pool = NULL;
        }
        st = run_rnn(cu, &layer.ctx);
        if (prev_mem) kn_cu_scratch_free(cu, prev_mem, prev_bytes ? prev_bytes : 1);
        prev_mem = y_mem;
        prev_bytes = y_bytes;
        if (!last) {
            prev = y;
            prev.rank = 3;
            prev.dims[1] = y.dims[2];
            prev.dims[2] = y.dims[3];
            prev_p = &prev;
        }
    }
    if (prev_mem) kn_cu_scratch_free(cu, prev_mem, prev_bytes ? prev_bytes : 1);
    return st;
}

/* The layers as one pipelined launch (kn_cu_lstm_stack_run) where its blocks all fit on the device
 * at once; else one after another. */
static kiln_status run_stacked_lstm(kn_cuda *cu, kn_kernel_ctx *c) {
    int layers = kn_stacked_lstm_layers(c->n_inputs);
    const kn_tensor *X = c->in[0];
    kiln_dtype dt = X->dtype;
    if (X->rank != 3) return kn_kernel_error(c, KILN_ERR_SHAPE, "X must be [seq, batch, input]");
    int64_t T = X->dims[0], B = X->dims[1], I = X->dims[2];
    kn_cu_lstm_stack p;
    memset(&p, 0, sizeof p);
    p.layers = layers;
    p.T = T;
    p.batch = B;
    for (int l = 0; l < layers && l < KN_CU_LSTM_STACK_MAX; l++) p.hidden[l] = kn_stacked_lstm_in(c->in, c->n_inputs, l, 1)->dims[2];
    int64_t stages = 2 * layers - 1, r = cu->sm_count > 0 ? (B * stages + cu->sm_count - 1) / cu->sm_count : 0;
    p.rows = r <= 1 ? 1 : r <= 2 ? 2 : r <= 4 ? 4 : 8;
    /* every layer in registers: one after another (lstm_gru's two layers on an H200: 2.6 us a
     * step for the model against 3.9 through the shared-memory pipeline) */
    bool registers = layers <= KN_CU_LSTM_STACK_MAX;
    for (int l = 0; l < layers && registers; l++) {
        int rrows;
        registers = rnn_in_registers(cu, dt, 4, false, 1, B, p.hidden[l], &rrows);
    }
    if (registers) return run_layers(cu, c);
    size_t smem = layers <= KN_CU_LSTM_STACK_MAX ? kn_cu_lstm_stack_smem(dt, layers, p.hidden, p.rows) : 0;
    if (cu->rnn_steps || T == 0 || B == 0 || r > 8 || !smem || smem > (size_t)cu->smem_optin ||
        !kn_cu_lstm_stack_resident(dt, layers, p.hidden, p.rows, B, smem, cu->sm_count))
        return run_layers(cu, c);
    size_t es = kiln_dtype_size(dt), slices = (size_t)((B + p.rows - 1) / p.rows);
    /* scratch: X W0^T, each layer's outputs and input projections (float), the counters */
    size_t bytes[2 * KN_CU_LSTM_STACK_MAX + 1], total_items = 0;
    void *mem[2 * KN_CU_LSTM_STACK_MAX + 1] = {0};
    bytes[total_items++] = (size_t)(T * B * 4 * p.hidden[0]) * es;
    for (int l = 0; l + 1 < layers; l++) bytes[total_items++] = (size_t)(T * B * p.hidden[l]) * sizeof(float);
    for (int l = 1; l < layers; l++) bytes[total_items++] = (size_t)(T * B * 4 * p.hidden[l]) * sizeof(float);
    bytes[total_items++] = (size_t)stages * slices * sizeof(int);
    kiln_status st = KILN_OK;
    for (size_t i = 0; i < total_items && st == KILN_OK; i++) st = kn_cu_scratch(cu, bytes[i], &mem[i]);
    if (st == KILN_OK) {
        size_t k = 0;
        p.gx0 = mem[k++];
        for (int l = 0; l + 1 < layers; l++) p.seq[l] = mem[k++];
        for (int l = 1; l < layers; l++) p.gx[l] = mem[k++];
        p.counters = mem[k++];
        for (int l = 0; l < layers; l++) {
            p.W[l] = kn_stacked_lstm_in(c->in, c->n_inputs, l, 0)->data;
            p.R[l] = kn_stacked_lstm_in(c->in, c->n_inputs, l, 1)->data;
            const kn_tensor *b = kn_stacked_lstm_in(c->in, c->n_inputs, l, 2), *h = kn_stacked_lstm_in(c->in, c->n_inputs, l, 3),
                            *cc = kn_stacked_lstm_in(c->in, c->n_inputs, l, 4);
            p.bias[l] = b ? b->data : NULL;
            p.h0[l] = h ? h->data : NULL;
            p.c0[l] = cc ? cc->data : NULL;
        }
        p.y = c->n_outputs > 0 && c->out[0] && c->out[0]->nbytes ? c->out[0]->data : NULL;
        p.yh = c->n_outputs > 1 && c->out[1] && c->out[1]->nbytes ? c->out[1]->data : NULL;
        p.yc = c->n_outputs > 2 && c->out[2] && c->out[2]->nbytes ? c->out[2]->data : NULL;
        kn_cu_gemm g = gemm_abt(dt, T * B, 4 * p.hidden[0], I, X->data, p.W[0], mem[0]);
        st = kn_cu_gemm_run(cu, c, &g);
        if (st == KILN_OK)
            st = kn_cu_check(c, cudaMemsetAsync(p.counters, 0, bytes[total_items - 1], cu->stream), "StackedLSTM");
        if (st == KILN_OK) st = kn_cu_check(c, kn_cu_lstm_stack_run(dt, &p, smem, cu->stream), "StackedLSTM");
        if (st == KILN_OK) stack_runs++;
    }
    for (size_t i = 0; i < total_items; i++)
        if (mem[i]) kn_cu_scratch_free(cu, mem[i], bytes[i]);
    return st;
}

static bool stacked_lstm_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n;
    if (kn_stacked_lstm_layers(n_in) > KN_CU_LSTM_STACK_MAX) {
        snprintf(why, cap, "more than %d layers", KN_CU_LSTM_STACK_MAX);
        return false;
    }
    for (int i = 1; i < n_in; i++)
        if (in[i] && in[i]->dtype != in[0]->dtype) {
            snprintf(why, cap, "input %d of type %s", i, kiln_dtype_name(in[i]->dtype));
            return false;
        }
    return true;
}

#define MM_TYPES (KN_T_FLOATS)

const kn_cuda_kernel kn_cuda_linalg[] = {
    {"", "MatMul", kn_cu_run_matmul, same_types, MM_TYPES, 0, 0},
    {"", "Gemm", kn_cu_run_gemm, same_types, MM_TYPES, 0, 0, KN_CU_PARAMS(kn_gemm_attrs_prepare, kn_gemm_attrs)},
    {"", "LSTM", run_rnn, rnn_supports, KN_T_FLOATS, 0, 0, KN_CU_PARAMS(cu_rnn_prepare, cu_rnn_prm)},
    {"", "GRU", run_rnn, rnn_supports, KN_T_FLOATS, 0, 0, KN_CU_PARAMS(cu_rnn_prepare, cu_rnn_prm)},
    {"", "RNN", run_rnn, rnn_supports, KN_T_FLOATS, 0, 0, KN_CU_PARAMS(cu_rnn_prepare, cu_rnn_prm)},
    {"kiln", "StackedLSTM", run_stacked_lstm, stacked_lstm_supports, KN_T_FLOATS, 0, 0,
     KN_CU_PARAMS(cu_stacked_prepare, cu_rnn_prm)},
#ifdef KILN_HAVE_CUDNN
    {"", "Conv", kn_cu_run_conv, kn_cu_conv_supports, KN_T_FLOATS, 0, 0, KN_CU_PARAMS(kn_cu_conv_prepare, kn_cu_conv_prm)},
    {"", "ConvTranspose", kn_cu_run_conv_transpose, kn_cu_conv_supports, KN_T_FLOATS, 0, 0,
     KN_CU_PARAMS(kn_cu_conv_prepare, kn_cu_conv_prm)},
#endif
    {NULL, NULL, NULL, NULL, 0, 0, 0},
};

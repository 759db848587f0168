/* Conv and ConvTranspose through cuDNN (its convolution API, which cuDNN 9 still ships).
 *
 *  - 1-D convolutions run as 2-D with a unit height; 2-D and 3-D as themselves.
 *  - cuDNN pads symmetrically only: asymmetric pads (explicit or from auto_pad) are applied by an
 *    explicit zero-pad of the input first (Conv), or by computing the full output and cropping it
 *    (ConvTranspose).
 *  - fp32 runs with TF32 off (CUDNN_FMA_MATH) unless the precision option asks for tf32; fp16/bf16
 *    precision converts input and weights (weights once, cached) and accumulates in fp32.
 *  - descriptors and the algorithm are chosen once per node and input shape, then reused.
 *  - kiln.FusedConv with layout NHWC (2-D; pass layout_nhwc forms it) runs channels last: cuDNN's
 *    NHWC tensor and filter formats (weights [M, kh, kw, C/g]), a pointwise one as a single product
 *    over every image's positions. */
#include "backend/cuda/cuda_backend.h"
#include "ops/fused.h"
#include "util/log.h"

#ifdef KILN_HAVE_CUDNN

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NEED_OUT(c, i)                                                                             \
    do {                                                                                           \
        if (!(c)->out[i]) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output %d shape unknown at run time", i); \
    } while (0)

typedef struct conv_geom {
    int nsp;                      /* spatial dims as given (1..3) */
    bool nhwc;                    /* channels last: x, y [N, spatial..., C], w [M, kernel..., C/g] */
    int64_t n, cin, cout, group;  /* batch, input channels, output channels, groups */
    int64_t in[3], out[3], k[3];  /* spatial sizes */
    int64_t stride[3], dil[3], pb[3], pe[3];
    int64_t opad[3];              /* ConvTranspose output_padding */
} conv_geom;

typedef struct conv_plan {
    const char *node; /* the node's name (stable in the model's arena, shared by stand-in nodes) */
    int64_t xdims[KILN_MAX_RANK], wdims[KILN_MAX_RANK];
    int xrank;
    bool transpose;
    kn_precision prec;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    int algo;
    size_t ws;
    bool explicit_pad; /* Conv: input padded first; ConvTranspose: full output then cropped */
    int64_t full[3];   /* ConvTranspose: the uncropped output's spatial sizes */
    cudnnDataType_t dt;
    uint8_t tkey[KN_CU_TUNE_KEY_MAX]; /* the tuning key (kind byte + make_plan's description) */
    size_t klen;
    /* FusedConv's bias and ReLU in cuDNN's call (run_any's conv_epilogue): made on first use, under
     * cu->sh->cache_mu, then only read */
    cudnnTensorDescriptor_t bd;
    cudnnActivationDescriptor_t ad;
    bool fused_ready;
    _Atomic bool no_fused; /* cuDNN refused the fused call once: the epilogue runs as a pass */
} conv_plan;

/* What FusedConv asks of the convolution beyond it: y = relu?(conv(x) + bias + z), in cuDNN's one
 * call (cudnnConvolutionBiasActivationForward: bias and ReLU) or, for a pointwise convolution, in
 * cuBLASLt's epilogue (bias, residual, ReLU each optional); done says whether it was. */
typedef struct conv_epilogue {
    const kn_tensor *bias, *z;
    bool relu;
    int act; /* the node's activation (kn_act), for cuDNN's operation graph */
    bool done, act_done;
} conv_epilogue;

static kiln_status dnn_fail(const kn_kernel_ctx *c, cudnnStatus_t s, const char *what) {
    /* the CUDA error behind a failed launch, when cuDNN left one */
    cudaError_t e = cudaGetLastError();
    return kn_kernel_error(c, KILN_ERR_RUNTIME, "cuDNN %s: %s%s%s%s", what, cudnnGetErrorString(s),
                           e != cudaSuccess ? " (CUDA: " : "", e != cudaSuccess ? cudaGetErrorString(e) : "",
                           e != cudaSuccess ? ")" : "");
}

kiln_status kn_cu_conv_prepare(const kn_node *n, void *params) {
    kn_cu_conv_prm *p = params;
    memset(p, 0, sizeof *p);
    p->layout_ok = kn_fused_conv_layout(n, &p->nhwc);
    p->group = kn_attr_int(n, "group", 1);
    p->strides = kn_attr_ints(n, "strides", &p->n_strides);
    p->dilations = kn_attr_ints(n, "dilations", &p->n_dilations);
    p->pads = kn_attr_ints(n, "pads", &p->n_pads);
    p->kernel_shape = kn_attr_ints(n, "kernel_shape", &p->n_kernel_shape);
    p->output_padding = kn_attr_ints(n, "output_padding", &p->n_output_padding);
    p->auto_pad = kn_attr_string(n, "auto_pad", "NOTSET");
    return KILN_OK;
}

static kiln_status geometry(const kn_kernel_ctx *c, bool transpose, conv_geom *g) {
    const kn_tensor *x = c->in[0], *w = c->in[1];
    const kn_tensor *y = c->out[0];
    memset(g, 0, sizeof *g);
    g->nsp = x->rank - 2;
    if (g->nsp < 1 || g->nsp > 3)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "%d spatial dims (1 to 3 supported on CUDA)", g->nsp);
    if (w->rank != x->rank) return kn_kernel_error(c, KILN_ERR_SHAPE, "weight rank %d for input rank %d", w->rank, x->rank);
    KN_CTX_PRM(c, kn_cu_conv_prepare, kn_cu_conv_prm, prm);
    g->nhwc = prm->nhwc;
    if (!prm->layout_ok) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "layout must be NCHW or NHWC");
    if (g->nhwc && transpose) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "ConvTranspose channels last");
    /* where the channels and the spatial dims are */
    const int ch = g->nhwc ? x->rank - 1 : 1, sp = g->nhwc ? 1 : 2;
    g->n = x->dims[0];
    g->cin = x->dims[ch];
    g->cout = y->dims[ch];
    g->group = prm->group;
    int ns = prm->n_strides, nd = prm->n_dilations, np = prm->n_pads, nk = prm->n_kernel_shape, no = prm->n_output_padding;
    const int64_t *s = prm->strides;
    const int64_t *d = prm->dilations;
    const int64_t *p = prm->pads;
    const int64_t *ks = prm->kernel_shape;
    const int64_t *op = prm->output_padding;
    const char *ap = prm->auto_pad;
    bool same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"), upper = !strcmp(ap, "SAME_UPPER");
    for (int i = 0; i < g->nsp; i++) {
        g->in[i] = x->dims[sp + i];
        g->out[i] = y->dims[sp + i];
        g->k[i] = ks && nk == g->nsp ? ks[i] : w->dims[sp + i];
        g->stride[i] = s && ns == g->nsp ? s[i] : 1;
        g->dil[i] = d && nd == g->nsp ? d[i] : 1;
        g->opad[i] = transpose && op && no == g->nsp ? op[i] : 0;
        g->pb[i] = p && np == 2 * g->nsp ? p[i] : 0;
        g->pe[i] = p && np == 2 * g->nsp ? p[g->nsp + i] : 0;
        int64_t dk = (g->k[i] - 1) * g->dil[i] + 1;
        if (!transpose && same) {
            int64_t total = (g->out[i] - 1) * g->stride[i] + dk - g->in[i];
            if (total < 0) total = 0;
            g->pb[i] = upper ? total / 2 : total - total / 2;
            g->pe[i] = total - g->pb[i];
        } else if (!strcmp(ap, "VALID")) {
            g->pb[i] = g->pe[i] = 0;
        } else if (transpose && same && !p) {
            /* pads from the output shape (given, or input * stride), the odd one at the end for
             * SAME_UPPER; floor division as the ONNX reference does */
            int64_t total = g->stride[i] * (g->in[i] - 1) + g->opad[i] + dk - g->out[i];
            int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
            g->pb[i] = upper ? half : total - half;
            g->pe[i] = upper ? total - half : half;
        } else if (transpose) {
            /* explicit pads (0 by default); an output_shape then only sets where the output ends */
            g->pe[i] = g->stride[i] * (g->in[i] - 1) + g->opad[i] + dk - g->pb[i] - g->out[i];
        }
    }
    return KILN_OK;
}

static cudnnDataType_t dnn_type(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_DOUBLE: return CUDNN_DATA_DOUBLE;
    case KILN_DTYPE_FLOAT16: return CUDNN_DATA_HALF;
    case KILN_DTYPE_BFLOAT16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
    }
}

static void packed(int nb, const int *dims, int *strides) {
    int s = 1;
    for (int i = nb - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
}

/* The run-time element type of the convolution itself (fp16/bf16 precision on fp32 tensors). */
static kiln_dtype compute_dtype(const kn_cuda *cu, kiln_dtype t) {
    if (t == KILN_DTYPE_FLOAT && cu->cfg.precision == KN_PRECISION_FP16) return KILN_DTYPE_FLOAT16;
    if (t == KILN_DTYPE_FLOAT && cu->cfg.precision == KN_PRECISION_BF16) return KILN_DTYPE_BFLOAT16;
    return t;
}

static void plan_free(conv_plan *p) {
    if (p->xd) cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd) cudnnDestroyTensorDescriptor(p->yd);
    if (p->wd) cudnnDestroyFilterDescriptor(p->wd);
    if (p->cd) cudnnDestroyConvolutionDescriptor(p->cd);
    if (p->bd) cudnnDestroyTensorDescriptor(p->bd);
    if (p->ad) cudnnDestroyActivationDescriptor(p->ad);
    memset(p, 0, sizeof *p);
}

/* Plans are allocated one by one (the table holds pointers), so a plan a lane found stays where it
 * is while another lane adds one. With cu->sh->cache_mu held. */
static conv_plan *plan_lookup(kn_cuda *cu, const kn_node *n, const kn_tensor *x, const kn_tensor *w, bool transpose) {
    conv_plan **plans = cu->sh->conv_plans;
    for (int i = 0; i < cu->sh->n_conv_plans; i++) {
        conv_plan *p = plans[i];
        if (p->node == n->name && p->xrank == x->rank && p->prec == cu->cfg.precision && p->transpose == transpose &&
            w->rank == x->rank && !memcmp(p->xdims, x->dims, sizeof(int64_t) * (size_t)x->rank) &&
            !memcmp(p->wdims, w->dims, sizeof(int64_t) * (size_t)w->rank))
            return p;
    }
    return NULL;
}

static conv_plan *plan_add(kn_cuda *cu) {
    if (cu->sh->n_conv_plans == cu->sh->cap_conv_plans) {
        int nc = cu->sh->cap_conv_plans ? cu->sh->cap_conv_plans * 2 : 16;
        conv_plan **b = realloc(cu->sh->conv_plans, sizeof *b * (size_t)nc);
        if (!b) return NULL;
        cu->sh->conv_plans = b;
        cu->sh->cap_conv_plans = nc;
    }
    conv_plan *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    ((conv_plan **)cu->sh->conv_plans)[cu->sh->n_conv_plans++] = p;
    return p;
}

void kn_cu_conv_release(kn_cuda *cu) {
    conv_plan **plans = cu->sh->conv_plans;
    for (int i = 0; i < cu->sh->n_conv_plans; i++) {
        plan_free(plans[i]);
        free(plans[i]);
    }
    free(plans);
    cu->sh->conv_plans = NULL;
    cu->sh->n_conv_plans = cu->sh->cap_conv_plans = 0;
}

/* Whether algorithm a runs this plan's convolution within the workspace (its size in *ws). */
static bool workspace_of(kn_cuda *cu, const conv_plan *p, bool transpose, int32_t a, size_t *ws) {
    size_t need = 0;
    cudnnStatus_t s = !transpose ? cudnnGetConvolutionForwardWorkspaceSize(cu->dnn, p->xd, p->wd, p->cd, p->yd,
                                                                            (cudnnConvolutionFwdAlgo_t)a, &need)
                                 : cudnnGetConvolutionBackwardDataWorkspaceSize(cu->dnn, p->wd, p->xd, p->cd, p->yd,
                                                                                (cudnnConvolutionBwdDataAlgo_t)a, &need);
    if (s != CUDNN_STATUS_SUCCESS || need > cu->conv_workspace_max) return false;
    *ws = need;
    return true;
}

/* The first of a ranking (algos[i] -1: unusable) that fits the workspace (p->algo -1: none). */
static void pick_first_fitting(kn_cuda *cu, conv_plan *p, bool transpose, const int *algos, const size_t *mem, int n) {
    p->algo = -1;
    for (int i = 0; i < n && p->algo < 0; i++)
        if (algos[i] >= 0 && mem[i] <= cu->conv_workspace_max && workspace_of(cu, p, transpose, algos[i], &p->ws))
            p->algo = algos[i];
}

/* cuDNN's heuristic ranking: the first algorithm that fits the workspace (p->algo -1: none). */
static kiln_status heuristic_algo(kn_cuda *cu, kn_kernel_ctx *c, bool transpose, conv_plan *p) {
    int algos[16], n = 0;
    size_t mem[16];
    cudnnStatus_t s;
    if (!transpose) {
        cudnnConvolutionFwdAlgoPerf_t perf[16];
        s = cudnnGetConvolutionForwardAlgorithm_v7(cu->dnn, p->xd, p->wd, p->cd, p->yd, 16, &n, perf);
        for (int i = 0; i < n; i++) {
            algos[i] = perf[i].status == CUDNN_STATUS_SUCCESS ? (int)perf[i].algo : -1;
            mem[i] = perf[i].memory;
        }
    } else {
        cudnnConvolutionBwdDataAlgoPerf_t perf[16];
        s = cudnnGetConvolutionBackwardDataAlgorithm_v7(cu->dnn, p->wd, p->xd, p->cd, p->yd, 16, &n, perf);
        for (int i = 0; i < n; i++) {
            algos[i] = perf[i].status == CUDNN_STATUS_SUCCESS ? (int)perf[i].algo : -1;
            mem[i] = perf[i].memory;
        }
    }
    if (s != CUDNN_STATUS_SUCCESS) return dnn_fail(c, s, "algorithm choice");
    pick_first_fitting(cu, p, transpose, algos, mem, n);
    return KILN_OK;
}

/* A measured algorithm may be used: it ran, and it keeps to FMA math when TF32 is off. */
static bool allowed(cudnnStatus_t st, cudnnMathType_t got, cudnnMathType_t want) {
    return st == CUDNN_STATUS_SUCCESS &&
           (want != CUDNN_FMA_MATH || (got != CUDNN_TENSOR_OP_MATH && got != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION));
}

/* How many times cuDNN's algorithm search runs (measure_algo): 2, KILN_CUDA_CONV_SEARCH_PASSES=1
 * for the single search of before (to compare). */
static int search_passes(void) {
    const char *v = getenv("KILN_CUDA_CONV_SEARCH_PASSES");
    return v && !strcmp(v, "1") ? 1 : 2;
}

#define RETIME_CANDIDATES 3
#define RETIME_RUNS 5

/* cuDNN's search times one launch of each candidate, and its times carry tens of microseconds of
 * its own (0.079 ms reported for a 3x3 convolution that runs in 6 us in a model): candidates a few
 * times apart in a run ranked within noise of each other. Its best RETIME_CANDIDATES that fit are
 * timed again here, RETIME_RUNS launches back to back after one to load them (as cuBLASLt's are,
 * cuda_linalg.c), and the fastest goes to the front of the ranking. On a failure the ranking
 * stays as cuDNN gave it. */
static void retime_ranking(kn_cuda *cu, conv_plan *p, bool transpose, int *algos, size_t *mem, int n,
                           void *const buf[3], void *ws_buf, size_t ws_size, const char *node) {
    int cand[RETIME_CANDIDATES], nc = 0;
    size_t need;
    for (int i = 0; i < n && nc < RETIME_CANDIDATES; i++)
        if (algos[i] >= 0 && mem[i] <= cu->conv_workspace_max && mem[i] <= ws_size &&
            workspace_of(cu, p, transpose, algos[i], &need) && need <= ws_size)
            cand[nc++] = i;
    if (nc < 2) return;
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        cudaGetLastError();
        if (e0) cudaEventDestroy(e0);
        return;
    }
    double one_d = 1, zero_d = 0;
    float one_f = 1, zero_f = 0;
    const void *one = p->dt == CUDNN_DATA_DOUBLE ? (const void *)&one_d : (const void *)&one_f;
    const void *zero = p->dt == CUDNN_DATA_DOUBLE ? (const void *)&zero_d : (const void *)&zero_f;
    int best = -1;
    float best_ms = 0, ms_of[RETIME_CANDIDATES];
    for (int k = 0; k < nc; k++) {
        const int a = algos[cand[k]];
        bool ok = true;
        ms_of[k] = -1.f;
        for (int r = 0; ok && r <= RETIME_RUNS; r++) {
            if (r == 1) ok = cudaEventRecord(e0, cu->stream) == cudaSuccess;
            cudnnStatus_t s = !transpose
                                  ? cudnnConvolutionForward(cu->dnn, one, p->xd, buf[0], p->wd, buf[2], p->cd,
                                                            (cudnnConvolutionFwdAlgo_t)a, ws_buf, ws_size, zero, p->yd, buf[1])
                                  : cudnnConvolutionBackwardData(cu->dnn, one, p->wd, buf[2], p->xd, buf[0], p->cd,
                                                                 (cudnnConvolutionBwdDataAlgo_t)a, ws_buf, ws_size, zero,
                                                                 p->yd, buf[1]);
            ok = ok && s == CUDNN_STATUS_SUCCESS;
        }
        float ms = 0;
        ok = ok && kn_cu_elapsed_ms(e0, e1, cu->stream, &ms);
        if (!ok) {
            cudaGetLastError();
            continue;
        }
        ms_of[k] = ms / RETIME_RUNS;
        if (best < 0 || ms_of[k] < best_ms) best = k, best_ms = ms_of[k];
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (best < 0) return;
    kn_log(KILN_LOG_DEBUG, "cuda: '%s': cuDNN's first %d algorithms %d %d %d timed again: %.4f %.4f %.4f ms, %d first",
           node, nc, algos[cand[0]], algos[cand[1]], nc > 2 ? algos[cand[2]] : -1, (double)ms_of[0], (double)ms_of[1],
           nc > 2 ? (double)ms_of[2] : -1.0, algos[cand[best]]);
    /* the winner to the front, the rest in cuDNN's order */
    const int wi = cand[best], wa = algos[wi];
    const size_t wm = mem[wi];
    for (int i = wi; i > 0; i--) algos[i] = algos[i - 1], mem[i] = mem[i - 1];
    algos[0] = wa;
    mem[0] = wm;
}

/* tuning=exhaustive: cuDNN runs every algorithm on scratch operands of the plan's shapes and
 * ranks them by time; the fastest that fits the workspace (and keeps FMA math when TF32 is off)
 * wins. Costs tens of milliseconds per distinct convolution, once: the choice goes into the
 * compiled file. */
static kiln_status measure_algo(kn_cuda *cu, kn_kernel_ctx *c, bool transpose, conv_plan *p, cudnnMathType_t m,
                                const size_t bytes[3]) {
    /* cuDNN's algorithm search records some candidates into a graph of its own; the warm-up
     * threads' start-up work (module loads, allocations) invalidated that capture in about one
     * cold run in 50 on the H200 (CUDNN_STATUS_EXECUTION_FAILED, CUDA error 901, the stream left
     * unusable), even in relaxed capture mode; none in 283 runs without them. So they finish
     * first: a search happens in a cold session, where waiting for cuBLASLt's start-up costs
     * little beside the search itself. */
    kn_cu_warmup_join(cu);
    void *buf[3] = {NULL, NULL, NULL};
    kiln_status st = KILN_OK;
    for (int t = 0; t < 3 && st == KILN_OK; t++) st = kn_cu_scratch(cu, bytes[t], &buf[t]);
    /* defined values: timings on uninitialised memory are fine, but keep tools like memcheck quiet */
    for (int t = 0; t < 3 && st == KILN_OK; t++) st = kn_cu_check(c, cudaMemsetAsync(buf[t], 0, bytes[t], cu->stream), "Conv tuning");
    int n = 0, algos[16];
    size_t mem[16];
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    /* the search's workspace: what the hungriest algorithm within the limit needs, when that is
     * more than the lane's (its own allocation, given back after: a search happens once) */
    void *ws_buf = cu->workspace, *big = NULL;
    size_t ws_size = cu->workspace_size, most = 0, need;
    for (int a = 0; a < (transpose ? CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT : CUDNN_CONVOLUTION_FWD_ALGO_COUNT); a++)
        if (workspace_of(cu, p, transpose, a, &need) && need > most) most = need;
    if (st == KILN_OK && most > ws_size) {
        if (cudaMalloc(&big, most) == cudaSuccess) {
            ws_buf = big;
            ws_size = most;
        } else {
            cudaGetLastError();
            big = NULL;
        }
    }
    /* xd/yd are cuDNN's x/y for Conv and dy/dx for ConvTranspose (its backward data pass). The
     * search runs twice and the second ranking counts: CUDA loads a kernel's module at its first
     * launch (lazy loading), and cuDNN's search times each candidate's first launches, so an
     * algorithm whose kernels no earlier work had loaded lost by the load's milliseconds. On the
     * H200 a session now and then chose ResNet-50's 3x3 64 -> 64 convolutions' IMPLICIT_GEMM
     * (a non-tensor-core kernel, 72 us a run) over IMPLICIT_PRECOMP_GEMM (6 us), depending on what
     * had run before the search, and the compiled file kept the choice: b1 0.58 ms against 0.34. */
    const int passes = search_passes();
    float best_ms[2] = {-1.f, -1.f};
    int best_algo[2] = {-1, -1};
    for (int pass = 0; pass < passes && st == KILN_OK && s == CUDNN_STATUS_SUCCESS; pass++) {
        if (!transpose) {
            cudnnConvolutionFwdAlgoPerf_t perf[16];
            s = cudnnFindConvolutionForwardAlgorithmEx(cu->dnn, p->xd, buf[0], p->wd, buf[2], p->cd, p->yd, buf[1], 16, &n,
                                                       perf, ws_buf, ws_size);
            for (int i = 0; i < n; i++) {
                algos[i] = allowed(perf[i].status, perf[i].mathType, m) ? (int)perf[i].algo : -1;
                mem[i] = perf[i].memory;
            }
            if (s == CUDNN_STATUS_SUCCESS && n > 0) best_ms[pass & 1] = perf[0].time, best_algo[pass & 1] = (int)perf[0].algo;
        } else {
            cudnnConvolutionBwdDataAlgoPerf_t perf[16];
            s = cudnnFindConvolutionBackwardDataAlgorithmEx(cu->dnn, p->wd, buf[2], p->xd, buf[0], p->cd, p->yd, buf[1], 16,
                                                            &n, perf, ws_buf, ws_size);
            for (int i = 0; i < n; i++) {
                algos[i] = allowed(perf[i].status, perf[i].mathType, m) ? (int)perf[i].algo : -1;
                mem[i] = perf[i].memory;
            }
            if (s == CUDNN_STATUS_SUCCESS && n > 0) best_ms[pass & 1] = perf[0].time, best_algo[pass & 1] = (int)perf[0].algo;
        }
    }
    if (passes > 1)
        kn_log(KILN_LOG_DEBUG, "cuda: cuDNN's search for '%s': fastest algorithm %d (%.3f ms) in the first pass, %d (%.3f ms) in the second",
               c->node && c->node->name ? c->node->name : "", best_algo[0], (double)best_ms[0], best_algo[1],
               (double)best_ms[1]);
    if (st == KILN_OK && s == CUDNN_STATUS_SUCCESS)
        retime_ranking(cu, p, transpose, algos, mem, n, buf, ws_buf, ws_size, c->node && c->node->name ? c->node->name : "");
    for (int t = 0; t < 3; t++)
        if (buf[t]) kn_cu_scratch_free(cu, buf[t], bytes[t]);
    if (big) cudaFree(big);
    KN_TRY(st);
    if (s != CUDNN_STATUS_SUCCESS) return dnn_fail(c, s, "algorithm measurement");
    pick_first_fitting(cu, p, transpose, algos, mem, n);
    return p->algo >= 0 ? KILN_OK : heuristic_algo(cu, c, transpose, p);
}

cudnnStatus_t kn_cu_conv_describe(const int32_t *desc, int nd, cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t yd,
                                  cudnnFilterDescriptor_t wd, cudnnConvolutionDescriptor_t cd, int64_t counts[3]) {
    int nb = nd >= 4 ? desc[0] & 15 : 0, format = nd >= 4 ? desc[0] >> 4 : -1;
    if (nb < 4 || nb > 5 || format < 0 || format > 1 || nd != 4 + 3 * nb + 3 * (nb - 2) || desc[3] < 1)
        return CUDNN_STATUS_BAD_PARAM;
    const bool nhwc = format == 1;
    cudnnDataType_t dt = (cudnnDataType_t)desc[1];
    int xdims[5], ydims[5], wdims[5], st[5], pad[3], str[3], dil[3];
    counts[0] = counts[1] = counts[2] = 1;
    for (int i = 0; i < nb; i++) {
        xdims[i] = desc[4 + 3 * i];
        ydims[i] = desc[5 + 3 * i];
        wdims[i] = desc[6 + 3 * i];
        /* a key read from a file may hold anything: no overflow */
        if (__builtin_mul_overflow(counts[0], (int64_t)xdims[i], &counts[0]) ||
            __builtin_mul_overflow(counts[1], (int64_t)ydims[i], &counts[1]) ||
            __builtin_mul_overflow(counts[2], (int64_t)wdims[i], &counts[2]))
            return CUDNN_STATUS_BAD_PARAM;
    }
    for (int i = 0; i < nb - 2; i++) {
        pad[i] = desc[4 + 3 * nb + 3 * i];
        str[i] = desc[5 + 3 * nb + 3 * i];
        dil[i] = desc[6 + 3 * nb + 3 * i];
    }
    cudnnStatus_t s;
    if (nhwc) {
        /* dims in N, C, spatial order; the format says the memory holds them channels last */
        s = cudnnSetTensorNdDescriptorEx(xd, CUDNN_TENSOR_NHWC, dt, nb, xdims);
        if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetTensorNdDescriptorEx(yd, CUDNN_TENSOR_NHWC, dt, nb, ydims);
    } else {
        packed(nb, xdims, st);
        s = cudnnSetTensorNdDescriptor(xd, dt, nb, xdims, st);
        if (s == CUDNN_STATUS_SUCCESS) {
            packed(nb, ydims, st);
            s = cudnnSetTensorNdDescriptor(yd, dt, nb, ydims, st);
        }
    }
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetFilterNdDescriptor(wd, dt, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, nb, wdims);
    cudnnDataType_t comp = dt == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetConvolutionNdDescriptor(cd, nb - 2, pad, str, dil, CUDNN_CROSS_CORRELATION, comp);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetConvolutionGroupCount(cd, desc[3]);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetConvolutionMathType(cd, (cudnnMathType_t)desc[2]);
    return s;
}

/* Builds the descriptors. For Conv: xd = (padded) input, yd = output. For ConvTranspose: xd = the
 * op's input (cuDNN's dy), yd = the (full) output (cuDNN's dx). */
static kiln_status make_plan(kn_cuda *cu, kn_kernel_ctx *c, bool transpose, const conv_geom *g, conv_plan *p) {
    const kn_tensor *x = c->in[0], *w = c->in[1];
    kiln_dtype cdt = compute_dtype(cu, x->dtype);
    p->dt = dnn_type(cdt);
    int nb = g->nsp == 1 ? 4 : g->nsp + 2; /* 1-D runs as 2-D */
    int off = g->nsp == 1 ? 1 : 0;
    int xdims[5], ydims[5], wdims[5], pad[3], str[3], dil[3];
    bool symmetric = true;
    for (int i = 0; i < g->nsp; i++)
        if (g->pb[i] != g->pe[i] || g->pb[i] < 0) symmetric = false;
    p->explicit_pad = !symmetric;
    xdims[0] = (int)g->n;
    xdims[1] = (int)g->cin;
    ydims[0] = (int)g->n;
    ydims[1] = (int)g->cout;
    for (int i = 0; i < off; i++) {
        xdims[2 + i] = ydims[2 + i] = wdims[2 + i] = 1;
        pad[i] = 0;
        str[i] = dil[i] = 1;
    }
    for (int i = 0; i < g->nsp; i++) {
        int j = 2 + off + i;
        if (!transpose) {
            xdims[j] = (int)(p->explicit_pad ? g->in[i] + g->pb[i] + g->pe[i] : g->in[i]);
            ydims[j] = (int)g->out[i];
        } else {
            xdims[j] = (int)g->in[i];
            int64_t dk = (g->k[i] - 1) * g->dil[i] + 1;
            p->full[i] = g->stride[i] * (g->in[i] - 1) + g->opad[i] + dk;
            ydims[j] = (int)(p->explicit_pad ? p->full[i] : g->out[i]);
        }
        wdims[j] = (int)g->k[i];
        pad[off + i] = p->explicit_pad ? 0 : (int)g->pb[i];
        str[off + i] = (int)g->stride[i];
        dil[off + i] = (int)g->dil[i];
    }
    wdims[0] = (int)w->dims[0];
    wdims[1] = (int)w->dims[g->nhwc ? w->rank - 1 : 1];
    /* fp32: plain FMA math (no TF32) unless tf32 is asked for */
    cudnnMathType_t m = cdt == KILN_DTYPE_FLOAT && cu->cfg.precision != KN_PRECISION_TF32 ? CUDNN_FMA_MATH
                        : cdt == KILN_DTYPE_DOUBLE ? CUDNN_DEFAULT_MATH
                                                   : CUDNN_TENSOR_OP_MATH;
    /* the problem as cuDNN sees it: the descriptors are made from it, and it is the tuning key
     * (cuDNN's choice depends on nothing else) */
    int32_t desc[48], nd = 0;
    desc[nd++] = nb | (g->nhwc ? KN_CU_CONV_NHWC : 0);
    desc[nd++] = (int32_t)p->dt;
    desc[nd++] = (int32_t)m;
    desc[nd++] = (int32_t)g->group;
    for (int i = 0; i < nb; i++) desc[nd++] = xdims[i], desc[nd++] = ydims[i], desc[nd++] = wdims[i];
    for (int i = 0; i < nb - 2; i++) desc[nd++] = pad[i], desc[nd++] = str[i], desc[nd++] = dil[i];
    cudnnStatus_t s = cudnnCreateTensorDescriptor(&p->xd);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&p->yd);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateFilterDescriptor(&p->wd);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateConvolutionDescriptor(&p->cd);
    int64_t counts[3];
    if (s == CUDNN_STATUS_SUCCESS) s = kn_cu_conv_describe(desc, nd, p->xd, p->yd, p->wd, p->cd, counts);
    if (s != CUDNN_STATUS_SUCCESS) return dnn_fail(c, s, "descriptor");
    uint8_t *tkey = p->tkey;
    tkey[0] = transpose ? KN_CU_TUNE_CONV_BWD_DATA : KN_CU_TUNE_CONV_FWD;
    memcpy(tkey + 1, desc, sizeof(int32_t) * (size_t)nd);
    size_t klen = p->klen = 1 + sizeof(int32_t) * (size_t)nd;
    const kn_cu_tuned *t = kn_cu_tuning_find(cu, tkey, klen);
    if (t) {
        int32_t a;
        memcpy(&a, t->val, sizeof a);
        double t0 = kn_now_ms();
        bool fits = workspace_of(cu, p, transpose, a, &p->ws);
        kn_log(KILN_LOG_DEBUG, "cuda: the compiled file's cuDNN choice %d for '%s' checked in %.2f ms", (int)a,
               c->node->name ? c->node->name : "", kn_now_ms() - t0);
        if (fits) {
            p->algo = a;
            return KILN_OK;
        }
        kn_log(KILN_LOG_DEBUG, "cuda: the compiled file's cuDNN choice %d for '%s' does not fit: choosing again", (int)a,
               c->node->name ? c->node->name : "");
    }
    /* exhaustive tuning measures every algorithm on scratch operands (not while a run is being
     * recorded into a graph, where nothing may wait for the device) */
    size_t es = kiln_dtype_size(cdt), bytes[3]; /* xd, yd, wd */
    for (int i = 0; i < 3; i++) bytes[i] = es * (size_t)counts[i];
    KN_TRY(cu->cfg.exhaustive && !cu->capture ? measure_algo(cu, c, transpose, p, m, bytes)
                                              : heuristic_algo(cu, c, transpose, p));
    if (p->algo < 0)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "cuDNN has no algorithm for this convolution within a %zu MiB workspace",
                               cu->workspace_size >> 20);
    int32_t a = p->algo;
    return kn_cu_tuning_add(cu, tkey, klen, &a, sizeof a);
}

static kiln_status get_plan_locked(kn_cuda *cu, kn_kernel_ctx *c, bool transpose, const conv_geom *g, conv_plan **out);

/* The node's plan for these shapes, made by the first lane to need it (the others wait for it).
 * *algo and *ws: its algorithm and workspace now (a failing algorithm is replaced under the lock). */
static kiln_status get_plan(kn_cuda *cu, kn_kernel_ctx *c, bool transpose, const conv_geom *g, conv_plan **out,
                            int *algo, size_t *ws) {
    pthread_mutex_lock(&cu->sh->cache_mu);
    kiln_status st = get_plan_locked(cu, c, transpose, g, out);
    if (st == KILN_OK) {
        *algo = (*out)->algo;
        *ws = (*out)->ws;
    }
    pthread_mutex_unlock(&cu->sh->cache_mu);
    return st;
}

static kiln_status get_plan_locked(kn_cuda *cu, kn_kernel_ctx *c, bool transpose, const conv_geom *g, conv_plan **out) {
    conv_plan *p = plan_lookup(cu, c->node, c->in[0], c->in[1], transpose);
    if (p) {
        *out = p;
        return KILN_OK;
    }
    conv_plan tmp;
    memset(&tmp, 0, sizeof tmp);
    double t0 = kn_now_ms();
    kiln_status st = make_plan(cu, c, transpose, g, &tmp);
    if (st == KILN_OK)
        kn_log(KILN_LOG_DEBUG, "cuda: %s plan of '%s' (algorithm %d) chosen in %.2f ms", transpose ? "ConvTranspose" : "Conv",
               c->node->name ? c->node->name : "", tmp.algo, kn_now_ms() - t0);
    if (st != KILN_OK) {
        plan_free(&tmp);
        return st;
    }
    tmp.node = c->node->name;
    tmp.transpose = transpose;
    memcpy(tmp.wdims, c->in[1]->dims, sizeof(int64_t) * (size_t)c->in[1]->rank);
    tmp.xrank = c->in[0]->rank;
    memcpy(tmp.xdims, c->in[0]->dims, sizeof(int64_t) * (size_t)tmp.xrank);
    tmp.prec = cu->cfg.precision;
    p = plan_add(cu);
    if (!p) {
        plan_free(&tmp);
        return KN_OOM();
    }
    *p = tmp;
    *out = p;
    return KILN_OK;
}

/* The compute-type output back into y, dividing out the operands' scales (fp16). */
static kiln_status convert_back(const kn_kernel_ctx *c, kn_cuda *cu, const void *yc, kiln_dtype cdt, kn_tensor *y,
                                const float *xscale, const float *wscale) {
    cudaError_t e = (xscale || wscale) && cdt == KILN_DTYPE_FLOAT16 && y->dtype == KILN_DTYPE_FLOAT
                        ? kn_cu_from_f16_unscaled(yc, y->data, kn_tensor_count(y), xscale, wscale, cu->stream)
                        : kn_cu_cast(cdt, y->dtype, yc, y->data, kn_tensor_count(y), cu->stream);
    return kn_cu_check(c, e, "conversion");
}

/* A convolution with 1x1 kernels (attribute and weights), no padding and one group; strided ones
 * read every stride-th input position (subsample). */
static bool pointwise(const conv_geom *g, const kn_tensor *w) {
    kiln_dtype dt = w->dtype;
    if (g->group != 1 || (dt != KILN_DTYPE_FLOAT && dt != KILN_DTYPE_FLOAT16 && dt != KILN_DTYPE_BFLOAT16 &&
                          dt != KILN_DTYPE_DOUBLE))
        return false;
    const int wc = g->nhwc ? w->rank - 1 : 1, wsp = g->nhwc ? 1 : 2;
    if (w->rank != g->nsp + 2 || w->dims[0] != g->cout || w->dims[wc] != g->cin) return false;
    for (int i = 0; i < g->nsp; i++)
        if (g->k[i] != 1 || w->dims[wsp + i] != 1 || g->stride[i] < 1 || g->pb[i] || g->pe[i] ||
            (g->in[i] - 1) / g->stride[i] + 1 != g->out[i])
            return false;
    return true;
}

/* A strided pointwise convolution's input positions (every stride-th of each spatial dim),
 * gathered into scratch: x_sub [N, OH, OW, C] channels last ([N, C, OH, OW] first). ResNet's
 * stride-2 1x1 downsampling convolutions ran through cuDNN with their bias as a pass after (its
 * fused call takes a bias only with a ReLU); this copy reads a quarter of the input and the product
 * takes the bias in its epilogue. */
static kiln_status subsample(kn_cuda *cu, kn_kernel_ctx *c, const conv_geom *g, void **out, size_t *bytes) {
    const kn_tensor *x = c->in[0];
    const size_t es = kiln_dtype_size(x->dtype);
    kn_cu_view v;
    memset(&v, 0, sizeof v);
    v.rank = g->nsp + 2;
    int64_t sp_stride[3], acc = g->nhwc ? g->cin : 1;
    for (int i = g->nsp - 1; i >= 0; i--) {
        sp_stride[i] = acc * g->stride[i];
        acc *= g->in[i];
    }
    const int64_t image = acc * (g->nhwc ? 1 : g->cin);
    const int ch = g->nhwc ? v.rank - 1 : 1, sp = g->nhwc ? 1 : 2;
    v.dims[0] = g->n, v.strides[0][0] = image;
    v.dims[ch] = g->cin, v.strides[0][ch] = g->nhwc ? 1 : acc;
    for (int i = 0; i < g->nsp; i++) v.dims[sp + i] = g->out[i], v.strides[0][sp + i] = sp_stride[i];
    int64_t count = 1;
    for (int d = 0; d < v.rank; d++) count *= v.dims[d];
    *bytes = (size_t)count * es;
    KN_TRY(kn_cu_scratch(cu, *bytes ? *bytes : 1, out));
    kiln_status st = kn_cu_check(c, kn_cu_copy_view(es, x->data, 0, *out, &v, cu->stream), "Conv input positions");
    if (st != KILN_OK) kn_cu_scratch_free(cu, *out, *bytes ? *bytes : 1);
    return st;
}

/* A pointwise convolution is a matrix product per image: Y_n [Cout, S] = W [Cout, Cin] X_n [Cin, S]
 * over the S spatial positions. cuBLASLt runs it, tuned like every product (and with the
 * precision option's operand conversion), where cuDNN's fp32 FMA algorithms took 28 us for each of
 * efficientnet_b0's pointwise convolutions on the H200 (implicit_convolve_sgemm, the fastest the
 * legacy API measured): a fraction of that. */
static kiln_status pointwise_product(kn_cuda *cu, kn_kernel_ctx *c, const conv_geom *g, conv_epilogue *ep,
                                     const void *xdata, int64_t S);

static kiln_status run_pointwise(kn_cuda *cu, kn_kernel_ctx *c, const conv_geom *g, conv_epilogue *ep) {
    int64_t S = 1;
    bool strided = false;
    for (int i = 0; i < g->nsp; i++) {
        S *= g->out[i];
        strided |= g->stride[i] > 1;
    }
    const void *xdata = c->in[0]->data;
    void *xsub = NULL;
    size_t xsub_bytes = 0;
    if (strided) {
        KN_TRY(subsample(cu, c, g, &xsub, &xsub_bytes));
        xdata = xsub;
    }
    kiln_status st = pointwise_product(cu, c, g, ep, xdata, S);
    if (xsub) kn_cu_scratch_free(cu, xsub, xsub_bytes ? xsub_bytes : 1);
    return st;
}

/* run_pointwise's product over the input positions at xdata (S of them per image). */
static kiln_status pointwise_product(kn_cuda *cu, kn_kernel_ctx *c, const conv_geom *g, conv_epilogue *ep,
                                     const void *xdata, int64_t S) {
    kn_cu_gemm m;
    memset(&m, 0, sizeof m);
    m.dt = c->in[0]->dtype;
    if (g->nhwc) {
        /* channels last: Y [N*S, Cout] = X [N*S, Cin] W^T, every image's positions in one product */
        m.M = g->n * S;
        m.N = g->cout;
        m.K = g->cin;
        m.A = xdata;
        m.lda = g->cin;
        m.B = c->in[1]->data;
        m.tb = true;
        m.ldb = g->cin;
        m.C = c->out[0]->data;
        m.ldc = g->cout;
        m.batch = 1;
        m.alpha = 1;
        /* FusedConv's bias (one per column), residual and ReLU in the product's epilogue: the
         * separate pass read and wrote the whole output again (ResNet-50's 1x1 convolutions at
         * batch 256: gigabytes per run) */
        const kn_tensor *b = ep ? ep->bias : NULL, *z = ep ? ep->z : NULL;
        const kn_tensor *y = c->out[0];
        const bool fuse = ep && (!b || (b->dtype == y->dtype && kn_tensor_count(b) == g->cout)) &&
                          (!z || (z->dtype == y->dtype && kn_tensor_count(z) == kn_tensor_count(y) && z->data != y->data));
        if (fuse) {
            m.bias = b ? b->data : NULL;
            m.residual = z ? z->data : NULL;
            m.relu = ep->relu;
        }
        KN_TRY(kn_cu_gemm_run(cu, c, &m));
        if (fuse) ep->done = true;
        return KILN_OK;
    }
    m.M = g->cout;
    m.N = S;
    m.K = g->cin;
    m.A = c->in[1]->data;
    m.lda = g->cin;
    m.B = xdata;
    m.ldb = S;
    m.C = c->out[0]->data;
    m.ldc = S;
    m.batch = g->n;
    m.sa = 0; /* the weights, shared by every image */
    m.sb = g->cin * S;
    m.sc = g->cout * S;
    m.alpha = 1;
    return kn_cu_gemm_run(cu, c, &m);
}

/* KILN_CUDA_CONV1D_COLUMNS=0 leaves 1-D convolutions to cuDNN (to compare). */
static bool columns_enabled(void) {
    const char *v = getenv("KILN_CUDA_CONV1D_COLUMNS");
    return !(v && !strcmp(v, "0"));
}

/* A 1-D convolution of one group over float types, whose columns fit in scratch (512 MB). */
static bool columns_1d(const conv_geom *g, const kn_tensor *w) {
    kiln_dtype dt = w->dtype;
    if (g->nsp != 1 || g->nhwc || g->group != 1 || w->rank != 3 || w->dims[0] != g->cout || w->dims[1] != g->cin ||
        w->dims[2] != g->k[0] || g->stride[0] < 1 || g->dil[0] < 1 ||
        (dt != KILN_DTYPE_FLOAT && dt != KILN_DTYPE_FLOAT16 && dt != KILN_DTYPE_BFLOAT16 && dt != KILN_DTYPE_DOUBLE))
        return false;
    const double bytes = (double)g->n * (double)g->cin * (double)g->k[0] * (double)g->out[0] * kiln_dtype_size(dt);
    return bytes <= 512.0 * 1024 * 1024;
}

/* A 1-D convolution as a matrix product per image: the input's columns gathered once,
 * P_n [Cin*k, OL] (pads as zeros), then Y_n [Cout, OL] = W [Cout, Cin*k] P_n. cuDNN runs 1-D
 * convolutions as 2-D ones of unit height, for which its legacy API offers no tensor-core
 * algorithm in half precision: the whisper encoder's two front-end convolutions (80 -> 384 and
 * 384 -> 384, kernel 3, 3000 positions) took 337 us on the H200 (implicit_convolve_sgemm), for
 * 1.9 GFLOP that cuBLASLt's tensor cores do in a few microseconds. */
static kiln_status run_columns_1d(kn_cuda *cu, kn_kernel_ctx *c, const conv_geom *g) {
    const kn_tensor *x = c->in[0], *w = c->in[1];
    const size_t es = kiln_dtype_size(x->dtype);
    const int64_t K = g->cin * g->k[0], OL = g->out[0];
    const size_t p_bytes = (size_t)(g->n * K * OL) * es;
    void *cols = NULL;
    KN_TRY(kn_cu_scratch(cu, p_bytes ? p_bytes : 1, &cols));
    kiln_status st = kn_cu_check(c, kn_cu_im2col_1d(es, x->data, cols, g->n, g->cin, g->in[0], g->k[0], OL,
                                                    g->stride[0], g->dil[0], g->pb[0], cu->stream),
                                 "Conv columns");
    if (st == KILN_OK) {
        kn_cu_gemm m;
        memset(&m, 0, sizeof m);
        m.dt = x->dtype;
        m.M = g->cout, m.N = OL, m.K = K;
        m.A = w->data, m.lda = K;
        m.B = cols, m.ldb = OL;
        m.C = c->out[0]->data, m.ldc = OL;
        m.batch = g->n;
        m.sa = 0; /* the weights, shared by every image */
        m.sb = K * OL;
        m.sc = g->cout * OL;
        m.alpha = 1;
        st = kn_cu_gemm_run(cu, c, &m);
    }
    kn_cu_scratch_free(cu, cols, p_bytes ? p_bytes : 1);
    return st;
}

/* Whether the weights have the shape the geometry promises (the stand-in reads by it; cuDNN checks
 * for itself and reports a mismatch). */
static bool standin_fits(const conv_geom *g, const kn_tensor *w) {
    const int wc = g->nhwc ? w->rank - 1 : 1, wsp = g->nhwc ? 1 : 2;
    if (g->group < 1 || g->cin % g->group || g->cout % g->group || w->dims[0] != g->cout ||
        w->dims[wc] * g->group != g->cin)
        return false;
    for (int i = 0; i < g->nsp; i++)
        if (w->dims[wsp + i] != g->k[i] || g->stride[i] < 1 || g->dil[i] < 1) return false;
    return true;
}

/* kiln's own direct convolution (cu_standin.cu), while cuDNN starts (cuda_warmup.c): in the
 * tensors' type whatever the precision option, the pads applied where read. */
static kiln_status run_standin(kn_cuda *cu, kn_kernel_ctx *c, const conv_geom *g) {
    kn_cu_conv_standin s;
    memset(&s, 0, sizeof s);
    s.n = g->n;
    s.cin = g->cin;
    s.cout = g->cout;
    s.group = g->group;
    s.nhwc = g->nhwc;
    int off = 3 - g->nsp;
    for (int i = 0; i < 3; i++) {
        s.in[i] = s.out[i] = s.k[i] = s.stride[i] = s.dil[i] = 1;
        s.pad[i] = 0;
    }
    for (int i = 0; i < g->nsp; i++) {
        s.in[off + i] = g->in[i];
        s.out[off + i] = g->out[i];
        s.k[off + i] = g->k[i];
        s.stride[off + i] = g->stride[i];
        s.dil[off + i] = g->dil[i];
        s.pad[off + i] = g->pb[i];
    }
    cu->sh->standin_convs++;
    return kn_cu_check(c, kn_cu_conv_standin_run(c->in[0]->dtype, c->in[0]->data, c->in[1]->data, c->out[0]->data, &s,
                                                 cu->stream),
                       "Conv (kiln's own kernel)");
}

static kiln_status add_bias(kn_cuda *cu, kn_kernel_ctx *c, const kn_tensor *b, bool nhwc) {
    kn_tensor *y = c->out[0];
    if (!b || kn_tensor_count(b) == 0) return KILN_OK;
    int64_t rows = y->dims[0], cols = y->dims[1], inner = 1;
    if (nhwc) { /* channels last: a row per position */
        cols = y->dims[y->rank - 1];
        rows = cols ? kn_tensor_count(y) / cols : 0;
    } else {
        for (int i = 2; i < y->rank; i++) inner *= y->dims[i];
    }
    return kn_cu_check(c, kn_cu_bias_act(y->dtype, y->data, b->data, rows, cols, inner, 0, 0, 0, cu->stream), "bias");
}

/* A 2-D convolution whose kernel tiles its input: kernel = stride, no padding or dilation, one
 * group, over float types (a vision transformer's patch embedding). */
static bool patchify(const conv_geom *g, const kn_tensor *w) {
    kiln_dtype dt = w->dtype;
    if (g->nsp != 2 || g->group != 1 || w->rank != 4 ||
        (dt != KILN_DTYPE_FLOAT && dt != KILN_DTYPE_FLOAT16 && dt != KILN_DTYPE_BFLOAT16))
        return false;
    for (int i = 0; i < 2; i++)
        if (g->k[i] < 2 || g->stride[i] != g->k[i] || g->dil[i] != 1 || g->pb[i] || g->pe[i] ||
            g->out[i] * g->k[i] > g->in[i])
            return false;
    return true;
}

/* A patchifying convolution is one matrix product over every patch of every image: the patches
 * gathered into rows, P [N*OH*OW, C*kh*kw] (in the weights' order: [C][kh][kw] channels first,
 * [kh][kw][C] channels last), then Y [N*OH*OW, M] = P W^T, transposed to [N, M, OH*OW] when
 * channels first. cuDNN ran ViT-B/16's 16x16 stride-16 embedding over 3 channels (no tensor-core
 * algorithm for 3 channels) in 0.81 ms at batch 64 on the H200; this is two copies and a product
 * of 15 GFLOP. */
static kiln_status run_patchify(kn_cuda *cu, kn_kernel_ctx *c, const conv_geom *g) {
    const kn_tensor *x = c->in[0], *w = c->in[1];
    kn_tensor *y = c->out[0];
    const size_t es = kiln_dtype_size(x->dtype);
    const int64_t N = g->n, C = g->cin, H = g->in[0], W = g->in[1], OH = g->out[0], OW = g->out[1];
    const int64_t kh = g->k[0], kw = g->k[1], K = C * kh * kw, rows = N * OH * OW, M = g->cout;
    kn_cu_view v;
    memset(&v, 0, sizeof v);
    v.rank = 6;
    const int64_t dims_first[6] = {N, OH, OW, C, kh, kw}, str_first[6] = {C * H * W, kh * W, kw, H * W, W, 1};
    const int64_t dims_last[6] = {N, OH, OW, kh, kw, C}, str_last[6] = {H * W * C, kh * W * C, kw * C, W * C, C, 1};
    memcpy(v.dims, g->nhwc ? dims_last : dims_first, sizeof v.dims[0] * 6);
    memcpy(v.strides[0], g->nhwc ? str_last : str_first, sizeof v.strides[0][0] * 6);
    void *patches = NULL, *ynhwc = NULL;
    const size_t p_bytes = (size_t)(rows * K) * es, y_bytes = g->nhwc ? 0 : (size_t)(rows * M) * es;
    kiln_status st = kn_cu_scratch(cu, p_bytes ? p_bytes : 1, &patches);
    if (st == KILN_OK && y_bytes) st = kn_cu_scratch(cu, y_bytes, &ynhwc);
    if (st == KILN_OK) st = kn_cu_check(c, kn_cu_copy_view(es, x->data, 0, patches, &v, cu->stream), "Conv patches");
    if (st == KILN_OK) {
        kn_cu_gemm m;
        memset(&m, 0, sizeof m);
        m.dt = x->dtype;
        m.M = rows, m.N = M, m.K = K, m.batch = 1;
        m.A = patches, m.lda = K;
        m.B = w->data, m.tb = true, m.ldb = K;
        m.C = g->nhwc ? y->data : ynhwc, m.ldc = M;
        m.alpha = 1;
        st = kn_cu_gemm_run(cu, c, &m);
    }
    if (st == KILN_OK && !g->nhwc) {
        /* [N, OH*OW, M] -> [N, M, OH*OW] */
        kn_cu_view t;
        memset(&t, 0, sizeof t);
        t.rank = 3;
        t.dims[0] = N, t.dims[1] = M, t.dims[2] = OH * OW;
        t.strides[0][0] = OH * OW * M, t.strides[0][1] = 1, t.strides[0][2] = M;
        st = kn_cu_check(c, kn_cu_copy_view(es, ynhwc, 0, y->data, &t, cu->stream), "Conv output layout");
    }
    if (ynhwc) kn_cu_scratch_free(cu, ynhwc, y_bytes);
    if (patches) kn_cu_scratch_free(cu, patches, p_bytes ? p_bytes : 1);
    return st;
}

/* The descriptors of the fused call's bias ([1, C, 1, 1] in the plan's layout and type) and ReLU,
 * made by the first lane to ask (plans are shared); false where they cannot be. */
static bool fused_descriptors(kn_cuda *cu, conv_plan *p, int64_t channels, bool nhwc) {
    pthread_mutex_lock(&cu->sh->cache_mu);
    if (!p->fused_ready && !p->no_fused) {
        const int dims[4] = {1, (int)channels, 1, 1};
        p->fused_ready =
            (p->bd || cudnnCreateTensorDescriptor(&p->bd) == CUDNN_STATUS_SUCCESS) &&
            (p->ad || cudnnCreateActivationDescriptor(&p->ad) == CUDNN_STATUS_SUCCESS) &&
            cudnnSetTensorNdDescriptorEx(p->bd, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, p->dt, 4, dims) ==
                CUDNN_STATUS_SUCCESS &&
            cudnnSetActivationDescriptor(p->ad, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0) == CUDNN_STATUS_SUCCESS;
        if (!p->fused_ready) p->no_fused = true;
    }
    const bool ready = p->fused_ready && !p->no_fused;
    pthread_mutex_unlock(&cu->sh->cache_mu);
    return ready;
}

/* Shared by Conv and ConvTranspose: operands converted to the compute type when the precision
 * option asks for it, the cuDNN call, the conversion back, bias. ep (may be NULL): FusedConv's
 * bias, residual and ReLU, in the same call where cuDNN takes them (ep->done). */
static kiln_status run_any(kn_cuda *cu, kn_kernel_ctx *c, bool transpose, conv_epilogue *ep) {
    const kn_tensor *x = c->in[0], *w = c->in[1], *b = c->n_inputs > 2 ? c->in[2] : NULL;
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    conv_geom g;
    KN_TRY(geometry(c, transpose, &g));
    /* an activation the other fused paths leave to a pass (SiLU, ...): the whole FusedConv as one
     * cuDNN operation graph where an engine runs it (cuda_conv_graph.c) */
    if (ep && kn_cu_conv_graph_takes(ep->act) && !transpose && g.nhwc && g.nsp == 2 && g.group == 1 &&
        x->dtype == w->dtype && compute_dtype(cu, x->dtype) == x->dtype && kn_tensor_count(y) > 0 &&
        kn_cu_conv_graph_enabled(cu)) {
        kn_cu_handles_wait(cu);
        kn_cu_conv_graph_args ga = {x, w, ep->bias, ep->z, y, {g.stride[0], g.stride[1]}, {g.dil[0], g.dil[1]},
                                    {g.pb[0], g.pb[1]}, {g.pe[0], g.pe[1]}, ep->act};
        bool ran = false;
        KN_TRY(kn_cu_conv_graph_run(cu, c, &ga, &ran));
        if (ran) {
            ep->done = ep->act_done = true;
            return KILN_OK;
        }
    }
    if (!transpose && x->dtype == w->dtype && pointwise(&g, w) && kn_tensor_count(y) > 0) {
        KN_TRY(run_pointwise(cu, c, &g, ep));
        return add_bias(cu, c, b, g.nhwc);
    }
    if (!transpose && x->dtype == w->dtype && columns_1d(&g, w) && kn_tensor_count(y) > 0 &&
        columns_enabled()) {
        KN_TRY(run_columns_1d(cu, c, &g));
        return add_bias(cu, c, b, g.nhwc);
    }
    if (!transpose && x->dtype == w->dtype && patchify(&g, w) && kn_tensor_count(y) > 0) {
        KN_TRY(run_patchify(cu, c, &g));
        return add_bias(cu, c, b, g.nhwc);
    }
    if (!transpose && x->dtype == w->dtype && standin_fits(&g, w) && kn_cu_standin(cu, KN_CU_TUNE_CONV_FWD)) {
        KN_TRY(run_standin(cu, c, &g));
        return add_bias(cu, c, b, g.nhwc);
    }
    kn_cu_handles_wait(cu);
    if (!cu->dnn) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "cuDNN is not usable");
    conv_plan *p = NULL;
    int algo = -1;
    size_t ws = 0;
    KN_TRY(get_plan(cu, c, transpose, &g, &p, &algo, &ws));
    kiln_dtype dt = x->dtype, cdt = compute_dtype(cu, dt);
    size_t ces = kiln_dtype_size(cdt);
    kiln_status st = KILN_OK;
    /* input: padded and/or converted */
    const void *xin = x->data;
    void *xpad = NULL, *xconv = NULL, *wconv = NULL, *yfull = NULL, *ycomp = NULL;
    size_t xpad_b = 0, xconv_b = 0, wconv_b = 0, yfull_b = 0, ycomp_b = 0;
    /* fp16 operands carry power-of-two scales (kn_cu_converted_scaled); the output divides them out */
    const float *xscale = NULL, *wscale = NULL;
    if (cdt != dt) {
        st = kn_cu_converted_scaled(cu, c, x->data, dt, kn_tensor_count(x), cdt, &xconv, &xconv_b, &xscale);
        xin = xconv;
    }
    int64_t pdims[KILN_MAX_RANK];
    if (st == KILN_OK && !transpose && p->explicit_pad) {
        int64_t pb[KILN_MAX_RANK] = {0};
        const int ch = g.nhwc ? x->rank - 1 : 1, sp = g.nhwc ? 1 : 2;
        pdims[0] = x->dims[0];
        pdims[ch] = x->dims[ch];
        int64_t cnt = pdims[0] * pdims[ch];
        for (int i = 0; i < g.nsp; i++) {
            pdims[sp + i] = g.in[i] + g.pb[i] + g.pe[i];
            pb[sp + i] = g.pb[i];
            cnt *= pdims[sp + i];
        }
        xpad_b = (size_t)cnt * ces;
        st = kn_cu_scratch(cu, xpad_b ? xpad_b : 1, &xpad);
        unsigned char zero[16] = {0};
        if (st == KILN_OK)
            st = kn_cu_check(c, kn_cu_pad(ces, xin, xpad, x->rank, x->dims, pdims, pb, 0, zero, cu->stream), "Conv padding");
        xin = xpad;
    }
    const void *win = w->data;
    if (st == KILN_OK && cdt != dt) {
        st = kn_cu_converted_scaled(cu, c, w->data, dt, kn_tensor_count(w), cdt, &wconv, &wconv_b, &wscale);
        win = wconv;
    }
    /* output: full (ConvTranspose with asymmetric pads) and/or in the compute type */
    int64_t fdims[KILN_MAX_RANK], fcnt = y->dims[0] * y->dims[1];
    fdims[0] = y->dims[0];
    fdims[1] = y->dims[1];
    for (int i = 0; i < g.nsp; i++) {
        fdims[2 + i] = transpose && p->explicit_pad ? p->full[i] : y->dims[2 + i];
        fcnt *= fdims[2 + i];
    }
    void *yout = y->data;
    if (st == KILN_OK && (cdt != dt || (transpose && p->explicit_pad))) {
        ycomp_b = (size_t)fcnt * ces;
        st = kn_cu_scratch(cu, ycomp_b ? ycomp_b : 1, &ycomp);
        yout = ycomp;
    }
    /* an algorithm wanting more than the lane's workspace takes scratch for the call */
    void *ws_ptr = cu->workspace, *ws_big = NULL;
    if (st == KILN_OK && ws > cu->workspace_size && fcnt > 0 && kn_tensor_count(x) > 0) {
        st = kn_cu_scratch(cu, ws, &ws_big);
        ws_ptr = ws_big;
    }
    const size_t ws_have = ws_big ? ws : cu->workspace_size;
    if (st == KILN_OK && fcnt > 0 && kn_tensor_count(x) > 0) {
        double one_d = 1, zero_d = 0;
        float one_f = 1, zero_f = 0;
        const void *one = cdt == KILN_DTYPE_DOUBLE ? (const void *)&one_d : (const void *)&one_f;
        const void *zero = cdt == KILN_DTYPE_DOUBLE ? (const void *)&zero_d : (const void *)&zero_f;
        cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
        /* FusedConv's bias, residual and ReLU in the call: 2-D, in the tensors' own type, straight into y */
        const kn_tensor *zt = ep ? ep->z : NULL;
        const bool fuse = ep && ep->bias && ep->relu && !transpose && !p->no_fused && g.nsp == 2 && cdt == dt && !p->explicit_pad &&
                          yout == y->data && ep->bias->dtype == dt && kn_tensor_count(ep->bias) == g.cout &&
                          (!zt || (zt->dtype == dt && kn_tensor_count(zt) == kn_tensor_count(y) && zt->data != y->data)) &&
                          (dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16 || dt == KILN_DTYPE_FLOAT) &&
                          fused_descriptors(cu, p, g.cout, g.nhwc);
        if (fuse) {
            s = cudnnConvolutionBiasActivationForward(cu->dnn, one, p->xd, xin, p->wd, win, p->cd,
                                                      (cudnnConvolutionFwdAlgo_t)algo, ws_ptr, ws,
                                                      zt ? one : zero, p->yd, zt ? zt->data : yout, p->bd,
                                                      ep->bias->data, p->ad, p->yd, yout);
            if (s == CUDNN_STATUS_SUCCESS) ep->done = true;
            else {
                /* not for this algorithm or layout: the plain call below, and the epilogue as a pass */
                kn_log(KILN_LOG_DEBUG, "cuda: node '%s': cuDNN's fused convolution refused (%s): a pass after it",
                       c->node->name, cudnnGetErrorString(s));
                cudaGetLastError();
                p->no_fused = true;
            }
        }
        /* at most twice: an algorithm that fails to run is replaced by algorithm 0 (implicit GEMM,
         * no workspace), in the plan and in the tuning results */
        for (int attempt = 0; !(ep && ep->done) && attempt < 2; attempt++) {
            if (!transpose)
                s = cudnnConvolutionForward(cu->dnn, one, p->xd, xin, p->wd, win, p->cd, (cudnnConvolutionFwdAlgo_t)algo,
                                            ws_ptr, ws, zero, p->yd, yout);
            else
                s = cudnnConvolutionBackwardData(cu->dnn, one, p->wd, win, p->xd, xin, p->cd,
                                                 (cudnnConvolutionBwdDataAlgo_t)algo, ws_ptr, ws, zero, p->yd,
                                                 yout);
            if (s == CUDNN_STATUS_SUCCESS || algo == 0 || !workspace_of(cu, p, transpose, 0, &ws) || ws > ws_have) break;
            cudaError_t e = cudaGetLastError();
            kn_log(KILN_LOG_WARNING, "cuda: cuDNN algorithm %d failed for '%s' (%s, CUDA: %s): algorithm 0 instead",
                   algo, c->node->name ? c->node->name : "", cudnnGetErrorString(s), cudaGetErrorString(e));
            algo = 0;
            pthread_mutex_lock(&cu->sh->cache_mu);
            p->algo = 0;
            p->ws = ws;
            pthread_mutex_unlock(&cu->sh->cache_mu);
            int32_t a = 0;
            st = kn_cu_tuning_add(cu, p->tkey, p->klen, &a, sizeof a);
            if (st != KILN_OK) break;
        }
        if (st == KILN_OK && s != CUDNN_STATUS_SUCCESS) {
            char what[96];
            snprintf(what, sizeof what, "%s (algorithm %d, workspace %zu bytes)", transpose ? "ConvTranspose" : "Conv",
                     algo, ws);
            st = dnn_fail(c, s, what);
        }
    } else if (st == KILN_OK && fcnt > 0) {
        st = kn_cu_check(c, cudaMemsetAsync(yout, 0, (size_t)fcnt * ces, cu->stream), "Conv");
    }
    if (st == KILN_OK && transpose && p->explicit_pad) {
        /* crop (or zero-extend, for negative pads) the full output to y's shape */
        int64_t begin[KILN_MAX_RANK] = {0};
        for (int i = 0; i < g.nsp; i++) begin[2 + i] = -g.pb[i];
        unsigned char zero[16] = {0};
        void *dst = y->data;
        if (cdt != dt) {
            yfull_b = (size_t)kn_tensor_count(y) * ces;
            st = kn_cu_scratch(cu, yfull_b ? yfull_b : 1, &yfull);
            dst = yfull;
        }
        if (st == KILN_OK)
            st = kn_cu_check(c, kn_cu_pad(ces, ycomp, dst, y->rank, fdims, y->dims, begin, 0, zero, cu->stream),
                             "ConvTranspose crop");
        if (st == KILN_OK && cdt != dt) st = convert_back(c, cu, yfull, cdt, y, xscale, wscale);
    } else if (st == KILN_OK && cdt != dt) {
        st = convert_back(c, cu, ycomp, cdt, y, xscale, wscale);
    }
    if (st == KILN_OK) st = add_bias(cu, c, b, g.nhwc);
    if (xconv_b) kn_cu_scratch_free(cu, xconv, xconv_b);
    if (xpad) kn_cu_scratch_free(cu, xpad, xpad_b ? xpad_b : 1);
    if (wconv_b) kn_cu_scratch_free(cu, wconv, wconv_b);
    if (ycomp) kn_cu_scratch_free(cu, ycomp, ycomp_b ? ycomp_b : 1);
    if (ws_big) kn_cu_scratch_free(cu, ws_big, ws);
    if (yfull) kn_cu_scratch_free(cu, yfull, yfull_b ? yfull_b : 1);
    return st;
}

kiln_status kn_cu_run_conv(kn_cuda *cu, kn_kernel_ctx *c) { return run_any(cu, c, false, NULL); }
kiln_status kn_cu_run_conv_transpose(kn_cuda *cu, kn_kernel_ctx *c) { return run_any(cu, c, true, NULL); }

kiln_status kn_cu_run_conv_fused(kn_cuda *cu, kn_kernel_ctx *c, const kn_tensor *bias, const kn_tensor *z, int act,
                                 float p0, float p1, bool *done, bool *act_done) {
    (void)p0, (void)p1; /* (the graph's activations take no parameters yet) */
    conv_epilogue ep = {bias, z, act == KN_ACT_RELU, act, false, false};
    kiln_status st = run_any(cu, c, false, &ep);
    *done = ep.done;
    /* cuDNN's fused call and cuBLASLt's epilogue apply the ReLU they were given */
    *act_done = ep.act_done || (ep.done && (act == KN_ACT_NONE || act == KN_ACT_RELU));
    return st;
}

bool kn_cu_conv_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    if (!kn_cu_libs_load(NULL, 0) || !kn_cu_lib.dnn_loaded) {
        snprintf(why, cap, "cuDNN could not be loaded");
        return false;
    }
    if (in[0]->rank >= 0 && (in[0]->rank < 3 || in[0]->rank > 5)) {
        snprintf(why, cap, "%d spatial dims (1 to 3 supported on CUDA)", in[0]->rank - 2);
        return false;
    }
    for (int i = 1; i < n_in; i++)
        if (in[i] && in[i]->dtype != in[0]->dtype) {
            snprintf(why, cap, "input %d is %s, X is %s", i, kiln_dtype_name(in[i]->dtype), kiln_dtype_name(in[0]->dtype));
            return false;
        }
    (void)n;
    return true;
}

#else

void kn_cu_conv_release(kn_cuda *cu) { (void)cu; }

#endif

/* FusedConv as one cuDNN operation graph (the graph API's runtime fusion): the convolution, its
 * bias, a residual and an activation that neither cuDNN's legacy fused call (bias and ReLU only)
 * nor cuBLASLt's epilogue takes (SiLU above all: a YOLOv8 runs one after each of its 57
 * convolutions, each a pass over the output that the graph's engine does in registers).
 *
 * Channels last (x [N, H, W, C], w [K, R, S, C], y [N, P, Q, K]), 2-D, one group, float16 or
 * bfloat16 with float accumulation. The graph per node and shapes is built once and shared by the
 * session's lanes (cu->sh->cache_mu); where cuDNN has no engine for it, or building fails, the node
 * is marked and runs as before (the convolution, then a pass). Among the engines cuDNN's heuristics
 * rank first, up to GRAPH_CANDIDATES are built and timed on the first run outside a capture, the
 * fastest kept. With KILN_CUDA_CONV_GRAPH_CACHE=1 the graphs are built with dynamic shapes and
 * one kernel cache per topology (bias, residual, activation), so a convolution of another shape
 * binds the kernels an earlier one compiled instead of compiling its own (see kernel_cache_wanted
 * for why that is not the default).
 *
 * On by default (provider option conv_graph=0 or KILN_CUDA_CONV_GRAPH=0 turns it off; =1 over the
 * option): YOLOv8s b1 fp16 runs in 0.75 ms instead of 1.01 on an H200. The engines for these graphs
 * compile their kernels at run time (NVRTC), about 150-220 ms per convolution with the candidates
 * timed, which made that model's first run 10-30 s when they were built in the run: now threads
 * beside the runs build them (below, "building in the background") and the first run is as before.
 * The plan chosen is kept as a tuning record (KN_CU_TUNE_CONV_GRAPH: cuDNN's serialized plan, which
 * holds the compiled kernels, 50-70 KB), so the compiled file (cache entry or saved file) carries it
 * and a later session makes the plan from it in about 1.5 ms instead of compiling: that cost is paid
 * once per machine, model and shape. */
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_dnn_graph.h"

#include "ops/fused.h"
#include "util/clock.h"
#include "util/log.h"

#include <math.h>
#include <pthread.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef KILN_HAVE_CUDNN

#define GRAPH_CANDIDATES 4
_Static_assert(4 * KN_ACT_COUNT <= KN_CU_CONV_GRAPH_TOPOLOGIES, "a kernel cache per topology");
#define GRAPH_TIMED_RUNS 3

/* unique ids of the graph's tensors in the variant pack */
enum { UID_X = 1, UID_W, UID_B, UID_Z, UID_Y, UID_CONV = 10, UID_BIASED, UID_SUMMED };

typedef struct conv_graph {
    const char *node; /* the node's name (stable in the model's arena) */
    int64_t xdims[4], wdims[4];
    kiln_dtype dt;
    cudnnBackendDescriptor_t plan; /* NULL: cuDNN could not run this graph (or not yet: job) */
    int64_t ws;
    bool bias, z;
    struct build_job *job; /* being built in the background: runs take the old way meanwhile */
} conv_graph;

static _Atomic unsigned long long graph_runs, plans_loaded;

unsigned long long kn_cu_conv_graph_runs(void) { return graph_runs; }
unsigned long long kn_cu_conv_graph_plans_loaded(void) { return plans_loaded; }

bool kn_cu_conv_graph_available(void) { return kn_cu_libs_load(NULL, 0) && kn_cu_lib.dnn_loaded; }

bool kn_cu_conv_graph_enabled(const kn_cuda *cu) {
    const char *v = getenv("KILN_CUDA_CONV_GRAPH");
    if (v && (!strcmp(v, "0") || !strcmp(v, "1"))) return v[0] == '1';
    return cu->cfg.conv_graph;
}

/* The cuDNN pointwise mode of an activation the graph takes (false for the others). */
static bool act_mode(int act, cudnnPointwiseMode_t *m) {
    switch (act) {
    case KN_ACT_RELU: *m = CUDNN_POINTWISE_RELU_FWD; return true;
    case KN_ACT_SIGMOID: *m = CUDNN_POINTWISE_SIGMOID_FWD; return true;
    case KN_ACT_TANH: *m = CUDNN_POINTWISE_TANH_FWD; return true;
    case KN_ACT_SILU: *m = CUDNN_POINTWISE_SWISH_FWD; return true;
    case KN_ACT_GELU: *m = CUDNN_POINTWISE_GELU_FWD; return true;
    case KN_ACT_GELU_TANH: *m = CUDNN_POINTWISE_GELU_APPROX_TANH_FWD; return true;
    default: return false;
    }
}

bool kn_cu_conv_graph_takes(int act) {
    cudnnPointwiseMode_t m;
    return act != KN_ACT_NONE && act != KN_ACT_RELU && act_mode(act, &m);
}

/* ---------------------------------------------------------------- building */

/* A 4-D tensor in cuDNN's dim order (N, C, H, W) with channels-last strides. */
static cudnnBackendDescriptor_t tensor(kn_dnn_builder *b, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c, int64_t h,
                                       int64_t w, bool is_virtual, const char *what) {
    const int64_t dims[4] = {n, c, h, w}, strides[4] = {h * w * c, 1, w * c, c};
    return kn_dnn_tensor(b, uid, dt, 4, dims, strides, is_virtual, false, what);
}

/* Off unless KILN_CUDA_CONV_GRAPH_CACHE=1: on the H200 the dynamic-shape engines the cache needs ran
 * YOLOv8s b1 in 1.22 ms (first run 0.71 s) against 0.70 ms (first run 18.4 s) with static graphs,
 * and 1.01 ms without the graph path at all. */
static bool kernel_cache_wanted(void) {
    const char *v = getenv("KILN_CUDA_CONV_GRAPH_CACHE");
    return v && !strcmp(v, "1");
}

/* The session's kernel cache for graphs of this topology (made from the first such graph), or
 * NULL where cuDNN makes none. With cu->sh->cache_mu held. */
static cudnnBackendDescriptor_t kernel_cache(kn_cu_shared *sh, int topology, cudnnBackendDescriptor_t graph) {
    cudnnBackendDescriptor_t *kc = &((cudnnBackendDescriptor_t *)sh->conv_graph_caches)[topology];
    if (*kc || sh->conv_graph_cache_failed[topology]) return *kc;
    kn_dnn_builder b = KN_DNN_BUILDER_INIT;
    cudnnBackendDescriptor_t d = kn_dnn_make(&b, CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR, "kernel cache");
    kn_dnn_set(&b, d, CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "kernel cache");
    kn_dnn_finish(&b, d, "kernel cache");
    if (b.s != CUDNN_STATUS_SUCCESS) {
        kn_log(KILN_LOG_DEBUG, "cuda: no cuDNN kernel cache for convolution graphs (%s): each compiles its own",
               cudnnGetErrorString(b.s));
        kn_dnn_drop(&d);
        sh->conv_graph_cache_failed[topology] = true;
    }
    return *kc = d;
}

typedef struct graph_io {
    const void *x, *w, *b, *z;
    void *y, *ws;
} graph_io;

static cudnnStatus_t execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, const conv_graph *g, const graph_io *io) {
    int64_t uids[5];
    void *ptrs[5];
    int n = 0;
    uids[n] = UID_X, ptrs[n++] = (void *)io->x;
    uids[n] = UID_W, ptrs[n++] = (void *)io->w;
    if (g->bias) uids[n] = UID_B, ptrs[n++] = (void *)io->b;
    if (g->z) uids[n] = UID_Z, ptrs[n++] = (void *)io->z;
    uids[n] = UID_Y, ptrs[n++] = io->y;
    return kn_dnn_execute(h, plan, n, uids, ptrs, io->ws);
}

/* Mean time in ms of GRAPH_TIMED_RUNS executions of plan (a negative value: it failed). */
static float time_plan(cudnnHandle_t h, cudaStream_t stream, cudnnBackendDescriptor_t plan, const conv_graph *g,
                       const graph_io *io) {
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms = -1;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) goto done;
    if (execute(h, plan, g, io) != CUDNN_STATUS_SUCCESS) goto done; /* warm */
    cudaEventRecord(e0, stream);
    for (int r = 0; r < GRAPH_TIMED_RUNS; r++)
        if (execute(h, plan, g, io) != CUDNN_STATUS_SUCCESS) goto done;
    if (kn_cu_elapsed_ms(e0, e1, stream, &ms)) ms /= GRAPH_TIMED_RUNS;
    else ms = -1;
done:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaGetLastError();
    return ms;
}

/* Where a plan is built: a cuDNN handle, its stream, a workspace, and the session's kernel caches
 * (sh; NULL: none). */
typedef struct build_site {
    cudnnHandle_t dnn;
    cudaStream_t stream;
    void *ws;
    size_t ws_size;
    kn_cu_shared *sh;
} build_site;

/* Builds g's plan for the problem k (y [N, P, Q, K]): the operation graph, cuDNN's ranked engine
 * configs, the first that build (up to GRAPH_CANDIDATES) timed on io when `timing` and the stream
 * is not capturing (*timed), else the first that builds. why says what failed. */
static void build(const build_site *at, const kn_cu_graph_key *k, int64_t P, int64_t Q, conv_graph *g,
                  const graph_io *io, bool timing, char *why, size_t cap, bool *timed) {
    const cudnnDataType_t io_t = k->dtype == KILN_DTYPE_FLOAT16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16,
                          f32 = CUDNN_DATA_FLOAT;
    const int64_t N = k->x[0], H = k->x[1], W = k->x[2], C = k->x[3];
    const int64_t K = k->w[0], R = k->w[1], S = k->w[2];
    kn_dnn_builder b = KN_DNN_BUILDER_INIT;
    cudnnBackendDescriptor_t ds[16] = {0}, ops[4] = {0}, pws[3] = {0}, cfgs[GRAPH_CANDIDATES * 2] = {0};
    int nd = 0, nops = 0;
    cudnnBackendDescriptor_t xd = ds[nd++] = tensor(&b, UID_X, io_t, N, C, H, W, false, "X");
    cudnnBackendDescriptor_t wd = ds[nd++] = tensor(&b, UID_W, io_t, K, C, R, S, false, "W");
    cudnnBackendDescriptor_t cd = ds[nd++] = tensor(&b, UID_CONV, f32, N, K, P, Q, true, "convolution output");
    cudnnBackendDescriptor_t yd = ds[nd++] = tensor(&b, UID_Y, io_t, N, K, P, Q, false, "Y");
    cudnnBackendDescriptor_t conv = ds[nd++] = kn_dnn_make(&b, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "convolution");
    const int64_t two = 2;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    kn_dnn_set(&b, conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "convolution");
    kn_dnn_set(&b, conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "convolution");
    kn_dnn_set(&b, conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &two, "convolution");
    kn_dnn_set(&b, conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, k->dil, "convolution");
    kn_dnn_set(&b, conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, k->stride, "convolution");
    kn_dnn_set(&b, conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, k->pad_b, "convolution");
    kn_dnn_set(&b, conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, k->pad_e, "convolution");
    kn_dnn_finish(&b, conv, "convolution");
    cudnnBackendDescriptor_t fwd = ops[nops++] = kn_dnn_make(&b, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, "forward");
    const float one = 1, zero = 0;
    kn_dnn_set(&b, fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd, "forward");
    kn_dnn_set(&b, fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd, "forward");
    kn_dnn_set(&b, fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd, "forward");
    kn_dnn_set(&b, fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv, "forward");
    kn_dnn_set(&b, fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &one, "forward");
    kn_dnn_set(&b, fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &zero, "forward");
    kn_dnn_finish(&b, fwd, "forward");
    cudnnBackendDescriptor_t cur = cd;
    if (g->bias) { /* + bias [1, K, 1, 1] */
        cudnnBackendDescriptor_t bd = ds[nd++] = tensor(&b, UID_B, io_t, 1, K, 1, 1, false, "bias");
        cudnnBackendDescriptor_t t = ds[nd++] = tensor(&b, UID_BIASED, f32, N, K, P, Q, true, "biased");
        ops[nops++] = kn_dnn_pointwise(&b, CUDNN_POINTWISE_ADD, cur, bd, t, &pws[0], "bias add");
        cur = t;
    }
    if (g->z) { /* + residual */
        cudnnBackendDescriptor_t zd = ds[nd++] = tensor(&b, UID_Z, io_t, N, K, P, Q, false, "residual");
        cudnnBackendDescriptor_t t = ds[nd++] = tensor(&b, UID_SUMMED, f32, N, K, P, Q, true, "summed");
        ops[nops++] = kn_dnn_pointwise(&b, CUDNN_POINTWISE_ADD, cur, zd, t, &pws[1], "residual add");
        cur = t;
    }
    cudnnPointwiseMode_t am = CUDNN_POINTWISE_IDENTITY;
    act_mode(k->act, &am);
    ops[nops++] = kn_dnn_pointwise(&b, am, cur, NULL, yd, &pws[2], "activation");

    const bool dynamic = kernel_cache_wanted(); /* (the kernel cache takes dynamic-shape graphs only) */
    cudnnBackendDescriptor_t graph = kn_dnn_op_graph(&b, at->dnn, ops, nops, dynamic);
    const int topology = (g->bias ? 1 : 0) + (g->z ? 2 : 0) + 4 * k->act;
    cudnnBackendDescriptor_t kc =
        dynamic && at->sh && b.s == CUDNN_STATUS_SUCCESS ? kernel_cache(at->sh, topology, graph) : NULL;
    const int64_t want = GRAPH_CANDIDATES * 2;
    const int64_t n_cfg = kn_dnn_engine_configs(&b, graph, cfgs, want, CUDNN_HEUR_MODE_A);
    /* the first configs that build; timed unless a capture is under way (then the first) */
    enum cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(at->stream, &capturing);
    if (!timing) capturing = cudaStreamCaptureStatusActive; /* (taken as the first that builds) */
    int built = 0;
    float best = -1;
    for (int64_t i = 0; i < n_cfg && i < want && built < GRAPH_CANDIDATES && b.s == CUDNN_STATUS_SUCCESS; i++) {
        int64_t ws = 0;
        cudnnBackendDescriptor_t plan = kn_dnn_plan(at->dnn, cfgs[i], kc, &ws);
        if (!plan && kc) plan = kn_dnn_plan(at->dnn, cfgs[i], NULL, &ws); /* (the cache refused it) */
        if (!plan) continue;
        if (ws > (int64_t)at->ws_size) { /* kept to the lane's workspace: no scratch per call */
            kn_dnn_drop(&plan);
            continue;
        }
        built++;
        graph_io tio = *io;
        tio.ws = at->ws;
        const float ms = capturing == cudaStreamCaptureStatusNone ? time_plan(at->dnn, at->stream, plan, g, &tio) : 0;
        if (ms >= 0 && (best < 0 || ms < best)) {
            if (g->plan) cudnnBackendDestroyDescriptor(g->plan);
            g->plan = plan, g->ws = ws, best = ms;
        } else {
            kn_dnn_drop(&plan);
        }
        if (capturing != cudaStreamCaptureStatusNone && g->plan) break;
    }
    *timed = capturing == cudaStreamCaptureStatusNone;
    if (b.s != CUDNN_STATUS_SUCCESS)
        snprintf(why, cap, "%s: %s", b.what ? b.what : "building", cudnnGetErrorString(b.s));
    else if (!g->plan)
        snprintf(why, cap, "no engine of %lld built and ran within the lane's workspace", (long long)n_cfg);
    for (int i = 0; i < want; i++) kn_dnn_drop(&cfgs[i]);
    kn_dnn_drop(&graph);
    for (int i = 0; i < nops; i++) kn_dnn_drop(&ops[i]);
    for (int i = 0; i < 3; i++) kn_dnn_drop(&pws[i]);
    for (int i = 0; i < nd; i++) kn_dnn_drop(&ds[i]);
}

/* ---------------------------------------------------------------- plans kept in the compiled file */

static kn_cu_graph_key graph_key(const kn_cu_conv_graph_args *a) {
    kn_cu_graph_key k;
    memset(&k, 0, sizeof k); /* (no padding bytes of another call's key) */
    k.dtype = (int32_t)a->x->dtype;
    k.act = a->act;
    k.bias = a->bias != NULL;
    k.z = a->z != NULL;
    memcpy(k.x, a->x->dims, sizeof k.x);
    memcpy(k.w, a->w->dims, sizeof k.w);
    memcpy(k.stride, a->stride, sizeof k.stride);
    memcpy(k.dil, a->dil, sizeof k.dil);
    memcpy(k.pad_b, a->pad_b, sizeof k.pad_b);
    memcpy(k.pad_e, a->pad_e, sizeof k.pad_e);
    return k;
}

static void record_key(const kn_cu_graph_key *k, uint8_t out[1 + sizeof(kn_cu_graph_key)]) {
    out[0] = KN_CU_TUNE_CONV_GRAPH;
    memcpy(out + 1, k, sizeof *k);
}

bool kn_cu_conv_graph_key_valid(const kn_cu_graph_key *k) {
    if ((k->dtype != KILN_DTYPE_FLOAT16 && k->dtype != KILN_DTYPE_BFLOAT16) || !kn_cu_conv_graph_takes(k->act) ||
        (k->bias != 0 && k->bias != 1) || (k->z != 0 && k->z != 1))
        return false;
    for (int i = 0; i < 4; i++)
        if (k->x[i] < 1 || k->w[i] < 1 || k->x[i] > INT32_MAX || k->w[i] > INT32_MAX) return false;
    for (int i = 0; i < 2; i++)
        if (k->stride[i] < 1 || k->dil[i] < 1 || k->pad_b[i] < 0 || k->pad_e[i] < 0 || k->stride[i] > INT32_MAX ||
            k->dil[i] > INT32_MAX || k->pad_b[i] > INT32_MAX || k->pad_e[i] > INT32_MAX)
            return false;
    return true;
}

/* ---------------------------------------------------------------- building in the background */

/* Compiling a graph's candidates takes 150-220 ms a convolution (NVRTC), so building them in the run
 * made a YOLOv8s's first run take 10-30 s. Instead a shape's first run hands each new graph to
 * builder threads (a cuDNN handle, a stream, a workspace and scratch operands each: the candidates
 * are timed there) and runs the node the old way (the convolution, then a pass). A builder adds the
 * chosen plan's serialized form to the tuning records, as a compiled file would carry it; a later
 * run makes the plan from it (about 1.5 ms) and uses it. While any is pending, runs are not
 * recorded into CUDA graphs (kn_cu_conv_graph_building), so what gets recorded has the final
 * kernels. KILN_CUDA_CONV_GRAPH_BUILD=sync builds in the run instead (as before; tests counting
 * one run's graphs). */

#define BUILDERS_MAX 8
#define BUILD_SCRATCH_MAX ((size_t)1 << 30) /* a problem needing more operand memory is not timed */
#define BUILDER_IDLE_MS 2000 /* a builder with nothing queued this long gives back its handle and stream, and ends */

enum { JOB_QUEUED, JOB_DONE, JOB_FAILED };

typedef struct build_job {
    kn_cu_graph_key key;
    int64_t P, Q;
    const char *node; /* (the model's arena: lives as long as the session) */
    _Atomic int state;
    struct build_job *next_queued, *next_all;
} build_job;

/* The builders: threads started as jobs come (up to `want`), each ending after BUILDER_IDLE_MS
 * without work, so an idle session holds no builder, handle or stream. Detached: stopping waits
 * for `running` to reach zero. */
typedef struct conv_builder {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* a job queued, or stop */
    pthread_cond_t gone_cv; /* a builder ended */
    build_job *queue, *queue_tail, *all;
    int want;    /* threads at most */
    int live;    /* threads that take jobs (one leaves this count when it decides to end) */
    int running; /* threads not yet ended (the ones ending still release their handle and stream) */
    int idle;    /* threads waiting for a job */
    bool stop;
    kn_cuda *cu; /* the primary lane: its tuning records take the plans */
} conv_builder;

static _Atomic int builders_live; /* in this process, for tests (kn_cu_conv_graph_builders) */
int kn_cu_conv_graph_builders(void) { return atomic_load(&builders_live); }

static bool build_async_wanted(void) {
    const char *v = getenv("KILN_CUDA_CONV_GRAPH_BUILD");
    return !(v && !strcmp(v, "sync"));
}

/* Operand memory for timing a plan of k: x, w, bias, residual, y and the workspace, each 256-byte
 * aligned; NULL pointers in *io (and false: not timed) when it needs more than BUILD_SCRATCH_MAX or
 * a small share of the device's free memory. */
static bool scratch_io(const kn_cu_graph_key *k, int64_t P, int64_t Q, size_t ws_size, void **mem, size_t *cap,
                       graph_io *io) {
    const size_t es = 2; /* float16 or bfloat16 */
    const size_t nx = (size_t)k->x[0] * k->x[1] * k->x[2] * k->x[3], nw = (size_t)k->w[0] * k->w[1] * k->w[2] * k->w[3],
                 ny = (size_t)k->x[0] * P * Q * k->w[0];
    size_t off[6], at = 0;
    const size_t sizes[6] = {nx * es, nw * es, (size_t)k->w[0] * es, k->z ? ny * es : 0, ny * es, ws_size};
    for (int i = 0; i < 6; i++) {
        off[i] = at;
        at += (sizes[i] + 255) / 256 * 256;
    }
    memset(io, 0, sizeof *io);
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    cudaGetLastError();
    /* never more than a small share of what the device has free: the session's own runs come first */
    if (at > BUILD_SCRATCH_MAX || at > free_b / (4 * BUILDERS_MAX)) return false;
    if (at > *cap) {
        if (*mem) cudaFree(*mem);
        *mem = NULL;
        *cap = 0;
        if (cudaMalloc(mem, at) != cudaSuccess) {
            cudaGetLastError();
            *mem = NULL;
            return false;
        }
        *cap = at;
    }
    char *b = *mem;
    io->x = b + off[0], io->w = b + off[1], io->b = k->bias ? b + off[2] : NULL, io->z = k->z ? b + off[3] : NULL;
    io->y = b + off[4];
    io->ws = ws_size ? b + off[5] : NULL;
    return true;
}

static void run_job(conv_builder *bl, build_site at, void **scratch, size_t *scratch_cap, build_job *j) {
    const double t0 = kn_now_ms();
    conv_graph g;
    memset(&g, 0, sizeof g);
    g.bias = j->key.bias, g.z = j->key.z;
    graph_io io;
    const bool timing = scratch_io(&j->key, j->P, j->Q, at.ws_size, scratch, scratch_cap, &io);
    at.ws = io.ws; /* (NULL untimed: the plans are only built, and kept to ws_size) */
    char why[256] = "";
    bool timed = false;
    build(&at, &j->key, j->P, j->Q, &g, &io, timing, why, sizeof why, &timed);
    char *text = NULL;
    size_t len = 0;
    if (g.plan) text = kn_dnn_plan_text(g.plan, &len);
    uint8_t rkey[1 + sizeof(kn_cu_graph_key)];
    record_key(&j->key, rkey);
    bool ok = text && kn_cu_tuning_add(bl->cu, rkey, sizeof rkey, text, len) == KILN_OK;
    if (!ok) kn_clear_error();
    if (g.plan) cudnnBackendDestroyDescriptor(g.plan);
    free(text);
    if (ok)
        kn_log(KILN_LOG_DEBUG, "cuda: node '%s': cuDNN graph plan built in the background (%.1f ms%s)", j->node,
               kn_now_ms() - t0, timed ? ", candidates timed" : "");
    else
        kn_log(KILN_LOG_DEBUG, "cuda: node '%s': no cuDNN graph for the convolution with its epilogue (%s): a pass after it",
               j->node, *why ? why : "its plan could not be serialized");
    atomic_store(&j->state, ok ? JOB_DONE : JOB_FAILED);
}

static void *builder_main(void *arg) {
    conv_builder *bl = arg;
    /* relaxed: a run recording on another thread does not make this thread's allocations illegal */
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaSetDevice(bl->cu->device);
    build_site at = {NULL, NULL, NULL, bl->cu->workspace_size, NULL};
    bool ready = cudaStreamCreateWithFlags(&at.stream, cudaStreamNonBlocking) == cudaSuccess &&
                 cudnnCreate(&at.dnn) == CUDNN_STATUS_SUCCESS && cudnnSetStream(at.dnn, at.stream) == CUDNN_STATUS_SUCCESS;
    cudaGetLastError();
    /* the workspace is part of the scratch block (freed with it when idle) */
    void *scratch = NULL;
    size_t scratch_cap = 0;
    for (;;) {
        pthread_mutex_lock(&bl->mu);
        if (!bl->stop && !bl->queue && scratch) { /* idle: its device memory back while it waits */
            pthread_mutex_unlock(&bl->mu);
            cudaFree(scratch);
            cudaGetLastError();
            scratch = NULL, scratch_cap = 0;
            continue;
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += BUILDER_IDLE_MS / 1000;
        until.tv_nsec += (long)(BUILDER_IDLE_MS % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        bl->idle++;
        int w = 0;
        while (!bl->stop && !bl->queue && w != ETIMEDOUT) w = pthread_cond_timedwait(&bl->cv, &bl->mu, &until);
        bl->idle--;
        build_job *j = bl->stop ? NULL : bl->queue;
        if (j && !(bl->queue = j->next_queued)) bl->queue_tail = NULL;
        if (!j) bl->live--; /* stopped, or idle long enough: a job queued from now on starts another */
        pthread_mutex_unlock(&bl->mu);
        if (!j) break;
        if (ready) run_job(bl, at, &scratch, &scratch_cap, j);
        else atomic_store(&j->state, JOB_FAILED);
    }
    if (scratch) cudaFree(scratch);
    if (at.dnn) cudnnDestroy(at.dnn);
    if (at.stream) cudaStreamDestroy(at.stream);
    cudaGetLastError();
    /* the last touch of bl: builders_stop may free it as soon as live is zero */
    pthread_mutex_lock(&bl->mu);
    bl->running--;
    atomic_fetch_sub(&builders_live, 1);
    pthread_cond_broadcast(&bl->gone_cv);
    pthread_mutex_unlock(&bl->mu);
    return NULL;
}

/* One more builder when every running one is busy and fewer than `want` run. With bl->mu held. */
static void builder_add(conv_builder *bl) {
    if (bl->stop || bl->idle > 0 || bl->live >= bl->want) return;
    pthread_attr_t attr;
    pthread_t t;
    if (pthread_attr_init(&attr)) return;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, builder_main, bl) == 0) {
        bl->live++;
        bl->running++;
        atomic_fetch_add(&builders_live, 1);
    }
    pthread_attr_destroy(&attr);
}

/* Queues the graph of k for the builders (started on first use); NULL where none can run (then
 * the caller builds in the run). With cu->sh->cache_mu held. */
static build_job *build_later(kn_cuda *cu, const kn_cu_graph_key *k, int64_t P, int64_t Q, const char *node) {
    conv_builder *bl = cu->sh->conv_graph_builder;
    if (!bl) {
        if (!(bl = calloc(1, sizeof *bl))) return NULL;
        pthread_mutex_init(&bl->mu, NULL);
        pthread_cond_init(&bl->cv, NULL);
        pthread_cond_init(&bl->gone_cv, NULL);
        bl->cu = cu->sh->primary;
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        bl->want = cores > 2 ? (int)(cores - 1) : 1;
        if (bl->want > BUILDERS_MAX) bl->want = BUILDERS_MAX;
        cu->sh->conv_graph_builder = bl;
    }
    build_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->key = *k, j->P = P, j->Q = Q, j->node = node;
    atomic_init(&j->state, JOB_QUEUED);
    pthread_mutex_lock(&bl->mu);
    builder_add(bl);
    if (!bl->live) { /* no thread could start: the caller builds it in the run */
        pthread_mutex_unlock(&bl->mu);
        free(j);
        return NULL;
    }
    j->next_all = bl->all;
    bl->all = j;
    if (bl->queue_tail) bl->queue_tail->next_queued = j;
    else bl->queue = j;
    bl->queue_tail = j;
    pthread_cond_signal(&bl->cv);
    pthread_mutex_unlock(&bl->mu);
    return j;
}

/* Stops the builders (each finishes the job it has) and frees the jobs. */
static void builders_stop(kn_cu_shared *sh) {
    conv_builder *bl = sh->conv_graph_builder;
    if (!bl) return;
    pthread_mutex_lock(&bl->mu);
    bl->stop = true;
    pthread_cond_broadcast(&bl->cv);
    while (bl->running > 0) pthread_cond_wait(&bl->gone_cv, &bl->mu);
    pthread_mutex_unlock(&bl->mu);
    for (build_job *j = bl->all, *next; j; j = next) {
        next = j->next_all;
        free(j);
    }
    pthread_mutex_destroy(&bl->mu);
    pthread_cond_destroy(&bl->cv);
    pthread_cond_destroy(&bl->gone_cv);
    free(bl);
    sh->conv_graph_builder = NULL;
}

bool kn_cu_conv_graph_building(kn_cuda *cu) {
    bool pending = false;
    pthread_mutex_lock(&cu->sh->cache_mu);
    const conv_graph *gs = cu->sh->conv_graphs;
    for (int i = 0; i < cu->sh->n_conv_graphs && !pending; i++) pending = gs[i].job != NULL;
    pthread_mutex_unlock(&cu->sh->cache_mu);
    return pending;
}

/* ---------------------------------------------------------------- the table and the run */

static conv_graph *lookup(kn_cuda *cu, const kn_kernel_ctx *c, const kn_cu_conv_graph_args *a) {
    conv_graph *gs = cu->sh->conv_graphs;
    for (int i = 0; i < cu->sh->n_conv_graphs; i++) {
        conv_graph *g = &gs[i];
        if (g->node == c->node->name && g->dt == a->x->dtype && !memcmp(g->xdims, a->x->dims, sizeof g->xdims) &&
            !memcmp(g->wdims, a->w->dims, sizeof g->wdims) && g->bias == (a->bias != NULL) && g->z == (a->z != NULL))
            return g;
    }
    return NULL;
}

kiln_status kn_cu_conv_graph_run(kn_cuda *cu, kn_kernel_ctx *c, const kn_cu_conv_graph_args *a, bool *ran) {
    *ran = false;
    const kn_tensor *x = a->x, *w = a->w, *bias = a->bias, *z = a->z;
    kn_tensor *y = a->y;
    if (!kn_cu_conv_graph_enabled(cu) || !cu->dnn || !kn_cu_conv_graph_takes(a->act)) return KILN_OK;
    if ((x->dtype != KILN_DTYPE_FLOAT16 && x->dtype != KILN_DTYPE_BFLOAT16) || x->rank != 4 || w->rank != 4 ||
        y->rank != 4 || w->dtype != x->dtype || y->dtype != x->dtype || w->dims[3] != x->dims[3] ||
        y->dims[3] != w->dims[0] || (bias && (bias->dtype != x->dtype || kn_tensor_count(bias) != w->dims[0])) ||
        (z && (z->dtype != x->dtype || kn_tensor_count(z) != kn_tensor_count(y) || z->data == y->data)))
        return KILN_OK;
    /* 16-byte operands (the tensors' byte alignment the graph was described with) */
    const void *ptrs[5] = {x->data, w->data, y->data, bias ? bias->data : NULL, z ? z->data : NULL};
    for (int i = 0; i < 5; i++)
        if ((uintptr_t)ptrs[i] % 16) return KILN_OK;
    if (x->dims[3] % 8 || w->dims[0] % 8) return KILN_OK; /* tensor-core engines want whole 16-byte channel rows */
    graph_io io = {x->data, w->data, bias ? bias->data : NULL, z ? z->data : NULL, y->data, NULL};
    const kn_cu_graph_key gk = graph_key(a);
    uint8_t rkey[1 + sizeof(kn_cu_graph_key)];
    record_key(&gk, rkey);
    char *keep = NULL; /* the serialized form of a plan built here, for the compiled file */
    size_t keep_len = 0;
    bool timed = false;
    pthread_mutex_lock(&cu->sh->cache_mu);
    conv_graph *g = lookup(cu, c, a);
    if (!g) {
        if (cu->sh->n_conv_graphs == cu->sh->cap_conv_graphs) {
            const int nc = cu->sh->cap_conv_graphs ? cu->sh->cap_conv_graphs * 2 : 16;
            conv_graph *grown = realloc(cu->sh->conv_graphs, sizeof *grown * (size_t)nc);
            if (!grown) {
                pthread_mutex_unlock(&cu->sh->cache_mu);
                return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory for cuDNN's graph plans");
            }
            cu->sh->conv_graphs = grown;
            cu->sh->cap_conv_graphs = nc;
        }
        g = &((conv_graph *)cu->sh->conv_graphs)[cu->sh->n_conv_graphs++];
        memset(g, 0, sizeof *g);
        g->node = c->node->name;
        g->dt = x->dtype;
        memcpy(g->xdims, x->dims, sizeof g->xdims);
        memcpy(g->wdims, w->dims, sizeof g->wdims);
        g->bias = bias != NULL;
        g->z = z != NULL;
        char why[256] = "";
        const double t0 = kn_now_ms();
        const kn_cu_tuned *kept = kn_cu_tuning_find(cu, rkey, sizeof rkey);
        if (kept) { /* a plan a compiled file carried */
            g->plan = kn_dnn_plan_from_text(cu->dnn, kn_cu_tuned_value(kept), kept->val_len, cu->workspace_size, &g->ws, why,
                                            sizeof why);
            if (g->plan) {
                plans_loaded++;
                kn_log(KILN_LOG_DEBUG, "cuda: node '%s': cuDNN graph plan made from the compiled file's (%.1f ms)",
                       c->node->name, kn_now_ms() - t0);
            }
            else
                kn_log(KILN_LOG_INFO, "cuda: node '%s': the compiled file's cuDNN graph plan was not usable (%s): building it",
                       c->node->name, why);
        }
        enum cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
        cudaStreamIsCapturing(cu->stream, &capturing);
        if (!g->plan && capturing == cudaStreamCaptureStatusNone && build_async_wanted() && !kernel_cache_wanted() &&
            (g->job = build_later(cu, &gk, y->dims[1], y->dims[2], c->node->name)))
            kn_log(KILN_LOG_DEBUG, "cuda: node '%s': cuDNN graph queued for the builders; the old way meanwhile",
                   c->node->name);
        if (!g->plan && !g->job) {
            const build_site here = {cu->dnn, cu->stream, cu->workspace, cu->workspace_size, cu->sh};
            build(&here, &gk, y->dims[1], y->dims[2], g, &io, true, why, sizeof why, &timed);
            if (!g->plan)
                kn_log(KILN_LOG_DEBUG, "cuda: node '%s': no cuDNN graph for the convolution with its epilogue (%s): a pass after it",
                       c->node->name, why);
            else
                kn_log(KILN_LOG_DEBUG, "cuda: node '%s': convolution, bias%s and %s as one cuDNN graph (%.1f ms to build)",
                       c->node->name, z ? ", residual" : "", kn_act_name((kn_act)a->act), kn_now_ms() - t0);
            /* kept when chosen by timing (a plan picked during a capture is the heuristics' first) */
            if (g->plan && timed) keep = kn_dnn_plan_text(g->plan, &keep_len);
        }
    } else if (g->job && atomic_load(&g->job->state) != JOB_QUEUED) {
        /* its builder is done: the plan from its record (made here, on this lane's handle) */
        const kn_cu_tuned *built = atomic_load(&g->job->state) == JOB_DONE ? kn_cu_tuning_find(cu, rkey, sizeof rkey) : NULL;
        char why[256] = "";
        if (built)
            g->plan = kn_dnn_plan_from_text(cu->dnn, kn_cu_tuned_value(built), built->val_len, cu->workspace_size, &g->ws,
                                            why, sizeof why);
        if (built && !g->plan)
            kn_log(KILN_LOG_INFO, "cuda: node '%s': the builder's cuDNN graph plan was not usable (%s): a pass after the "
                   "convolution", c->node->name, why);
        g->job = NULL;
    }
    cudnnBackendDescriptor_t plan = g->plan;
    const conv_graph gc = *g; /* (the table may move once the lock is released) */
    pthread_mutex_unlock(&cu->sh->cache_mu);
    if (keep) {
        if (kn_cu_tuning_add(cu, rkey, sizeof rkey, keep, keep_len) != KILN_OK) kn_clear_error(); /* (then built again next time) */
        free(keep);
    }
    if (!plan) return KILN_OK;
    io.ws = cu->workspace;
    const cudnnStatus_t s = execute(cu->dnn, plan, &gc, &io);
    if (s != CUDNN_STATUS_SUCCESS) {
        cudaGetLastError();
        kn_log(KILN_LOG_DEBUG, "cuda: node '%s': cuDNN's graph did not run (%s): a pass after the convolution",
               c->node->name, cudnnGetErrorString(s));
        return KILN_OK;
    }
    graph_runs++;
    *ran = true;
    return KILN_OK;
}

void kn_cu_conv_graph_release(kn_cuda *cu) {
    builders_stop(cu->sh);
    conv_graph *gs = cu->sh->conv_graphs;
    for (int i = 0; i < cu->sh->n_conv_graphs; i++)
        if (gs[i].plan) cudnnBackendDestroyDescriptor(gs[i].plan);
    free(gs);
    cudnnBackendDescriptor_t *kc = (cudnnBackendDescriptor_t *)cu->sh->conv_graph_caches;
    for (int i = 0; i < KN_CU_CONV_GRAPH_TOPOLOGIES; i++) kn_dnn_drop(&kc[i]);
    cu->sh->conv_graphs = NULL;
    cu->sh->n_conv_graphs = cu->sh->cap_conv_graphs = 0;
}

#else

void kn_cu_conv_graph_release(kn_cuda *cu) { (void)cu; }
bool kn_cu_conv_graph_building(kn_cuda *cu) {
    (void)cu;
    return false;
}
unsigned long long kn_cu_conv_graph_runs(void) { return 0; }
unsigned long long kn_cu_conv_graph_plans_loaded(void) { return 0; }
bool kn_cu_conv_graph_key_valid(const kn_cu_graph_key *k) {
    (void)k;
    return false; /* (no cuDNN: a record of this kind is of no use) */
}
bool kn_cu_conv_graph_available(void) { return false; }

#endif

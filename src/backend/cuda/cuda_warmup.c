/* Start-up work that no compiled file can hold, moved off the first run's path.
 *
 * With its tuning results imported, a warm session makes no library choices, but the libraries
 * still start up in the process: cuBLASLt's first call (a query or a product) costs 50-100 ms of
 * CPU, its one-time start-up, which cannot begin before the context exists; cuDNN's first
 * convolution 20-40 ms (its engine libraries); each library kernel 5-15 ms at its first launch
 * (lazy module loading). Run in order by the first run, those add up. All of it is CPU work that
 * runs as well on other cores, so:
 *  - as soon as the context exists (kn_cu_warmup_boot), threads load the modules of kiln's most
 *    used kernel files (one each), and after them one makes the session's cuBLASLt and cuDNN
 *    handles and one makes cuBLASLt's start-up query;
 *  - the first run starts two threads (one per library) that replay every imported choice once,
 *    on their own handles, stream and scratch memory (kn_cu_warmup_start).
 * Without stand-ins (below) the run finds the libraries started and the kernels loaded, or waits
 * inside the library for the thread doing it instead of doing it itself.
 *
 * The replays compute nothing anyone reads (uninitialised operands, outputs to scratch), and a
 * failure in them is ignored: the run makes the same calls itself and reports its own errors.
 *
 * Until a library's thread is done, the run does not wait for it either: its products and
 * convolutions run on kiln's own kernels (cu_standin.cu), which need no library start-up, and the
 * run is not recorded into a graph (kn_cu_capture_ready); the first run after the threads finish
 * uses the libraries with the imported choices, and that one is recorded. So a warm start's first
 * output waits for neither library. KILN_CUDA_STAND_INS=never keeps the runs on the libraries
 * (they then wait inside them as before), =always runs the stand-ins everywhere (tests).
 *
 * The threads run in CUDA's relaxed stream-capture mode (relax_capture). */
#include "backend/cuda/cuda_backend.h"
#include "util/clock.h"
#include "util/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static void relax_capture(void);

/* A problem whose operands would need more scratch than this is left to the run. */
#define WARM_MAX_BYTES ((size_t)1 << 30)

typedef struct warm_job {
    kn_cuda *cu; /* the session */
    int device;
    size_t workspace_size;
    kn_cu_tuned *recs; /* copies: the session's table changes while the thread reads */
    int n, replayed;
    double ms;
    void *scratch[2]; /* the thread's device memory, freed by the join */
    pthread_t thread;
    bool running;       /* started and not joined (the session's thread alone reads and writes it) */
    atomic_bool done;   /* the thread's work is over (set by the thread, read by the runs) */
} warm_job;

struct kn_cu_warmup {
    warm_job boot, modules, handles, lt, dnn;
    bool imported; /* a warm start: imported choices are being replayed (the stand-ins' time) */
    /* the handles and cuBLASLt's start-up wait until the modules are loaded: the first run needs
     * the modules at once and the libraries only later, and loading beside them took twice as long
     * (bert_mini on the H200: modules 24.8 ms beside, 12.8 ms first and in parallel; its first
     * run's kernels 20.3 ms, 13.3 ms) */
    pthread_mutex_t gate_mu;
    pthread_cond_t gate_cv;
    bool gate_open, gate_ready; /* ready: mutex and condition made (kn_cu_warmup_boot) */
};

static void gate_wait(struct kn_cu_warmup *w) {
    pthread_mutex_lock(&w->gate_mu);
    while (!w->gate_open) pthread_cond_wait(&w->gate_cv, &w->gate_mu);
    pthread_mutex_unlock(&w->gate_mu);
}

static void gate_release(struct kn_cu_warmup *w) {
    pthread_mutex_lock(&w->gate_mu);
    w->gate_open = true;
    pthread_cond_broadcast(&w->gate_cv);
    pthread_mutex_unlock(&w->gate_mu);
}

/* Tests: every session's libraries count as starting while this is set (kn_cuda_warmup_hold). */
static atomic_bool hold_libraries;

/* Device memory for a replay, or NULL (the replay is then skipped). */
static void *device_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static size_t round_up(size_t n) { return (n + 255) & ~(size_t)255; }

static size_t lt_type_size(int32_t t) {
    switch ((cudaDataType_t)t) {
    case CUDA_R_64F: return 8;
    case CUDA_R_32F: return 4;
    default: return 2;
    }
}

/* The end of a replay thread: its scratch handed to the join (cudaFree here would wait for the
 * run's work on the device), its stream gone, its time noted. */
static void *finish(warm_job *j, double t0, cudaStream_t stream, void *base, void *work) {
    j->scratch[0] = base;
    j->scratch[1] = work;
    if (stream) cudaStreamDestroy(stream);
    cudaGetLastError();
    j->ms = kn_now_ms() - t0;
    atomic_store(&j->done, true);
    return NULL;
}

static bool lt_has_bias(const kn_cu_lt_key *k) {
    return k->epilogue == CUBLASLT_EPILOGUE_BIAS || k->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS ||
           k->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
}

/* Where a product's operands lie in its scratch (A at 0, then B, C, the device scalars and an
 * epilogue's bias), and the bytes in all; false for one too large to replay. */
static bool lt_layout(const kn_cu_lt_key *k, size_t *at_b, size_t *at_c, size_t *at_s, size_t *bytes) {
    int64_t ea, eb, ec;
    if (!kn_cu_lt_extents(k, &ea, &eb, &ec)) return false;
    size_t es = lt_type_size(k->ab_type), cs = lt_type_size(k->c_type);
    if (ea <= 0 || eb <= 0 || ec <= 0 || (size_t)ea > WARM_MAX_BYTES / es || (size_t)eb > WARM_MAX_BYTES / es ||
        (size_t)ec > WARM_MAX_BYTES / cs)
        return false;
    *at_b = round_up((size_t)ea * es);
    *at_c = *at_b + round_up((size_t)eb * es);
    *at_s = *at_c + round_up((size_t)ec * cs);
    *bytes = *at_s + 256 + (lt_has_bias(k) ? round_up((size_t)k->n * cs) : 0); /* the bias after the scalars */
    return *bytes <= WARM_MAX_BYTES;
}

static void *replay_products(void *arg) {
    warm_job *j = arg;
    double t0 = kn_now_ms();
    relax_capture();
    cudaStream_t stream = NULL;
    cublasLtHandle_t h = NULL;
    char *base = NULL;
    void *work = NULL;
    if (cudaSetDevice(j->device) != cudaSuccess || cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
        cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS)
        goto done;
    /* scratch allocated once, at its largest: cudaFree waits for the whole device, the run's work too */
    size_t most = 0, at_b, at_c, at_s, bytes;
    for (int i = 0; i < j->n; i++) {
        kn_cu_lt_key k;
        memcpy(&k, j->recs[i].key + 1, sizeof k);
        if (lt_layout(&k, &at_b, &at_c, &at_s, &bytes) && bytes > most) most = bytes;
    }
    base = most ? device_alloc(most) : NULL;
    work = j->workspace_size ? device_alloc(j->workspace_size) : NULL;
    for (int i = 0; base && i < j->n; i++) {
        kn_cu_lt_key k;
        memcpy(&k, j->recs[i].key + 1, sizeof k);
        cublasLtMatmulAlgo_t algo;
        memcpy(&algo, j->recs[i].val, sizeof algo);
        cublasLtMatmulDesc_t op;
        cublasLtMatrixLayout_t la, lb, lc;
        if (!lt_layout(&k, &at_b, &at_c, &at_s, &bytes) || kn_cu_lt_describe(&k, &op, &la, &lb, &lc) != CUBLAS_STATUS_SUCCESS)
            continue;
        if (lt_has_bias(&k) && kn_cu_lt_set_bias(op, base + at_s + 256) != CUBLAS_STATUS_SUCCESS) {
            kn_cu_lt_undescribe(op, la, lb, lc);
            continue;
        }
        double one_d = 1, zero_d = 0;
        float one_f = 1, zero_f = 0;
        const void *alpha = (cudaDataType_t)k.scale_type == CUDA_R_64F ? (const void *)&one_d : (const void *)&one_f;
        const void *beta = (cudaDataType_t)k.scale_type == CUDA_R_64F ? (const void *)&zero_d : (const void *)&zero_f;
        if (k.device_scalars) {
            float *dev = (float *)(base + at_s);
            cudaMemsetAsync(dev, 0, 2 * sizeof(float), stream);
            alpha = dev;
            beta = dev + 1;
        }
        /* our A is cuBLASLt's B (cuda_linalg.c) */
        if (cublasLtMatmul(h, op, alpha, base + at_b, la, base, lb, beta, base + at_c, lc, base + at_c, lc, &algo, work,
                           work ? j->workspace_size : 0, stream) == CUBLAS_STATUS_SUCCESS)
            j->replayed++;
        kn_cu_lt_undescribe(op, la, lb, lc);
    }
    cudaStreamSynchronize(stream);
done:
    cudaGetLastError();
    if (h) cublasLtDestroy(h);
    return finish(j, t0, stream, base, work);
}

#ifdef KILN_HAVE_CUDNN
static size_t dnn_type_size(int32_t t) {
    switch ((cudnnDataType_t)t) {
    case CUDNN_DATA_DOUBLE: return 8;
    case CUDNN_DATA_FLOAT: return 4;
    default: return 2;
    }
}

/* One imported convolution made ready to run: descriptors set, algorithm, workspace and where its
 * operands lie in scratch (x at 0, then y and w); false for one that cannot be replayed. */
typedef struct conv_replay {
    int32_t algo;
    bool transpose, dbl;
    size_t at_y, at_w, bytes, need;
} conv_replay;

static bool conv_prepare(cudnnHandle_t h, const kn_cu_tuned *r, size_t max_ws, cudnnTensorDescriptor_t xd,
                         cudnnTensorDescriptor_t yd, cudnnFilterDescriptor_t wd, cudnnConvolutionDescriptor_t cd,
                         conv_replay *c) {
    int32_t desc[48];
    int nd = (int)((r->key_len - 1) / sizeof(int32_t));
    if (nd > 48) return false;
    memcpy(desc, r->key + 1, sizeof(int32_t) * (size_t)nd);
    memcpy(&c->algo, r->val, sizeof c->algo);
    int64_t n[3];
    if (kn_cu_conv_describe(desc, nd, xd, yd, wd, cd, n) != CUDNN_STATUS_SUCCESS) return false;
    size_t es = dnn_type_size(desc[1]);
    for (int i = 0; i < 3; i++)
        if (n[i] <= 0 || (size_t)n[i] > WARM_MAX_BYTES / es) return false;
    c->at_y = round_up((size_t)n[0] * es);
    c->at_w = c->at_y + round_up((size_t)n[1] * es);
    c->bytes = c->at_w + (size_t)n[2] * es;
    c->transpose = r->key[0] == KN_CU_TUNE_CONV_BWD_DATA;
    c->dbl = desc[1] == CUDNN_DATA_DOUBLE;
    c->need = 0;
    cudnnStatus_t s = !c->transpose
                          ? cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, (cudnnConvolutionFwdAlgo_t)c->algo, &c->need)
                          : cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd, xd, cd, yd,
                                                                         (cudnnConvolutionBwdDataAlgo_t)c->algo, &c->need);
    return s == CUDNN_STATUS_SUCCESS && c->need <= max_ws && c->bytes <= WARM_MAX_BYTES;
}

static void *replay_convolutions(void *arg) {
    warm_job *j = arg;
    double t0 = kn_now_ms();
    relax_capture();
    cudaStream_t stream = NULL;
    cudnnHandle_t h = NULL;
    cudnnTensorDescriptor_t xd = NULL, yd = NULL;
    cudnnFilterDescriptor_t wd = NULL;
    cudnnConvolutionDescriptor_t cd = NULL;
    char *base = NULL;
    void *work = NULL;
    if (cudaSetDevice(j->device) != cudaSuccess || cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudnnCreate(&h) != CUDNN_STATUS_SUCCESS || cudnnSetStream(h, stream) != CUDNN_STATUS_SUCCESS ||
        cudnnCreateTensorDescriptor(&xd) != CUDNN_STATUS_SUCCESS || cudnnCreateTensorDescriptor(&yd) != CUDNN_STATUS_SUCCESS ||
        cudnnCreateFilterDescriptor(&wd) != CUDNN_STATUS_SUCCESS || cudnnCreateConvolutionDescriptor(&cd) != CUDNN_STATUS_SUCCESS)
        goto done;
    /* scratch and workspace allocated once, at their largest: cudaFree waits for the whole device */
    size_t most = 0, most_ws = 0;
    conv_replay c;
    for (int i = 0; i < j->n; i++)
        if (conv_prepare(h, &j->recs[i], j->workspace_size, xd, yd, wd, cd, &c)) {
            if (c.bytes > most) most = c.bytes;
            if (c.need > most_ws) most_ws = c.need;
        }
    base = most ? device_alloc(most) : NULL;
    work = most_ws ? device_alloc(most_ws) : NULL;
    for (int i = 0; base && (work || !most_ws) && i < j->n; i++) {
        if (!conv_prepare(h, &j->recs[i], j->workspace_size, xd, yd, wd, cd, &c)) continue;
        double one_d = 1, zero_d = 0;
        float one_f = 1, zero_f = 0;
        const void *one = c.dbl ? (const void *)&one_d : (const void *)&one_f;
        const void *zero = c.dbl ? (const void *)&zero_d : (const void *)&zero_f;
        cudnnStatus_t s =
            !c.transpose ? cudnnConvolutionForward(h, one, xd, base, wd, base + c.at_w, cd, (cudnnConvolutionFwdAlgo_t)c.algo,
                                                   work, c.need, zero, yd, base + c.at_y)
                         : cudnnConvolutionBackwardData(h, one, wd, base + c.at_w, xd, base, cd,
                                                        (cudnnConvolutionBwdDataAlgo_t)c.algo, work, c.need, zero, yd,
                                                        base + c.at_y);
        if (s == CUDNN_STATUS_SUCCESS) j->replayed++;
    }
    cudaStreamSynchronize(stream);
done:
    cudaGetLastError();
    if (xd) cudnnDestroyTensorDescriptor(xd);
    if (yd) cudnnDestroyTensorDescriptor(yd);
    if (wd) cudnnDestroyFilterDescriptor(wd);
    if (cd) cudnnDestroyConvolutionDescriptor(cd);
    if (h) cudnnDestroy(h);
    return finish(j, t0, stream, base, work);
}
#endif

/* Allocations and library start-up are "potentially unsafe" calls during a stream capture: in the
 * default (global) mode, one made while another thread captures invalidates that capture, which
 * may be the application's own graph on a thread of its own. A warm-up thread touches no stream
 * but its own, so relaxed mode, for the whole thread. (It did not keep cuDNN's algorithm search,
 * which captures on the run's thread, from failing beside the start-up thread: the search joins
 * the threads first, cuda_conv.c.) */
static void relax_capture(void) {
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
}

static void start(warm_job *j, void *(*fn)(void *)) {
    atomic_store(&j->done, false);
    if (pthread_create(&j->thread, NULL, fn, j) == 0) j->running = true;
}

/* cuBLASLt's one-time start-up, right after the context exists: the first heuristic query does it
 * (a product of 8 x 8 x 8; the answer is not used). */
static void *boot_products(void *arg) {
    warm_job *j = arg;
    gate_wait(j->cu->sh->warmup);
    double t0 = kn_now_ms();
    relax_capture();
    cublasLtHandle_t h = NULL;
    if (cudaSetDevice(j->device) == cudaSuccess && cublasLtCreate(&h) == CUBLAS_STATUS_SUCCESS) {
        kn_cu_lt_key k = {8, 8, 8, 1, 8, 8, 8, 0, 0, 0, 0, 0, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, 256, 256, 256, 0};
        cublasLtMatmulDesc_t op;
        cublasLtMatrixLayout_t la, lb, lc;
        cublasLtMatmulPreference_t pref;
        if (kn_cu_lt_describe(&k, &op, &la, &lb, &lc) == CUBLAS_STATUS_SUCCESS) {
            if (cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS) {
                cublasLtMatmulHeuristicResult_t r;
                int n = 0;
                if (cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &r, &n) == CUBLAS_STATUS_SUCCESS && n > 0)
                    j->replayed = 1;
                cublasLtMatmulPreferenceDestroy(pref);
            }
            kn_cu_lt_undescribe(op, la, lb, lc);
        }
    }
    if (h) cublasLtDestroy(h);
    cudaGetLastError();
    j->ms = kn_now_ms() - t0;
    atomic_store(&j->done, true);
    return NULL;
}

/* The modules of kiln's most used kernel files, loaded right after the context exists, one thread
 * each (each load costs 3-10 ms, paid otherwise by the first run at its first kernel from that
 * file). Loading a kernel's attributes loads it. Then the gate opens for the library threads. */
typedef struct module_load {
    int device;
    const void *(*kernel)(void);
    bool ok;
} module_load;

static void *load_one(void *arg) {
    module_load *m = arg;
    relax_capture();
    struct cudaFuncAttributes a;
    m->ok = cudaSetDevice(m->device) == cudaSuccess && cudaFuncGetAttributes(&a, m->kernel()) == cudaSuccess;
    cudaGetLastError();
    return NULL;
}

static void *load_modules(void *arg) {
    warm_job *j = arg;
    double t0 = kn_now_ms();
    relax_capture();
    const void *(*const modules[])(void) = {kn_cu_module_eltwise, kn_cu_module_data, kn_cu_module_reduce,
                                            kn_cu_module_standin, kn_cu_module_attention};
    enum { N = sizeof modules / sizeof modules[0] };
    j->n = N;
    module_load m[N];
    pthread_t t[N];
    bool started[N] = {false};
    for (int i = 0; i < N; i++) {
        m[i] = (module_load){j->device, modules[i], false};
        if (i > 0) started[i] = pthread_create(&t[i], NULL, load_one, &m[i]) == 0; /* in parallel: 2x faster */
    }
    for (int i = 0; i < N; i++)
        if (!started[i]) load_one(&m[i]);
    for (int i = 0; i < N; i++) {
        if (started[i]) pthread_join(t[i], NULL);
        j->replayed += m[i].ok;
    }
    j->ms = kn_now_ms() - t0;
    gate_release(j->cu->sh->warmup);
    atomic_store(&j->done, true);
    return NULL;
}

/* The session's cuBLASLt and cuDNN handles (3-8 ms, beside cuBLASLt's start-up query) while the
 * session's start goes on; the first library call waits for them (kn_cu_handles_wait). */
static void *make_handles(void *arg) {
    warm_job *j = arg;
    gate_wait(j->cu->sh->warmup);
    double t0 = kn_now_ms();
    relax_capture();
    if (cudaSetDevice(j->device) == cudaSuccess) {
        kn_cu_make_handles(j->cu);
        j->replayed = j->cu->sh->lt != NULL;
    }
    cudaGetLastError();
    j->n = 1;
    j->ms = kn_now_ms() - t0;
    atomic_store(&j->done, true);
    return NULL;
}

/* The imported records of the given kinds, copied into the job; false when there are none. */
static bool collect(kn_cuda *cu, warm_job *j, uint8_t kind1, uint8_t kind2) {
    for (int i = 0; i < cu->sh->n_tuned; i++) {
        const kn_cu_tuned *t = &cu->sh->tuned[i];
        if (!t->imported || (t->key[0] != kind1 && t->key[0] != kind2)) continue;
        if (j->n % 16 == 0) {
            kn_cu_tuned *b = realloc(j->recs, sizeof *b * (size_t)(j->n + 16));
            if (!b) break;
            j->recs = b;
        }
        j->recs[j->n++] = *t;
    }
    j->device = cu->device;
    j->workspace_size = cu->workspace_size;
    return j->n > 0;
}


/* KILN_CUDA_NO_WARMUP=1: the runs do it all themselves (for measuring what this saves). */
static bool warmup_off(void) {
    const char *off = getenv("KILN_CUDA_NO_WARMUP");
    return off && *off && strcmp(off, "0") != 0;
}

/* KILN_CUDA_STAND_INS: auto (default), never or always. */
static int standin_mode(void) {
    const char *m = getenv("KILN_CUDA_STAND_INS");
    if (!m || !*m || !strcmp(m, "auto")) return 0;
    if (!strcmp(m, "always") || !strcmp(m, "1")) return 2;
    return !strcmp(m, "never") || !strcmp(m, "0") ? 1 : 0;
}

bool kn_cu_warmup_boot(kn_cuda *cu) {
    cu->standin_mode = (int8_t)standin_mode(); /* read once, with the session's options */
    if (cu->sh->warmup || warmup_off() || !(cu->sh->warmup = calloc(1, sizeof *cu->sh->warmup))) return false;
    struct kn_cu_warmup *w = cu->sh->warmup;
    w->handles.device = w->modules.device = w->boot.device = cu->device;
    w->handles.cu = w->modules.cu = w->boot.cu = cu;
    pthread_mutex_init(&w->gate_mu, NULL);
    pthread_cond_init(&w->gate_cv, NULL);
    w->gate_ready = true;
    const char *pre = getenv("KILN_CUDA_PRELOAD"); /* 0: not (for measuring what it saves) */
    if (!pre || strcmp(pre, "0") != 0) start(&w->modules, load_modules);
    if (!w->modules.running) gate_release(w);
    start(&w->handles, make_handles);
    if (!w->handles.running) {
        kn_cu_warmup_free(cu);
        return false;
    }
    start(&w->boot, boot_products);
    return true;
}

void kn_cu_warmup_start(kn_cuda *cu) {
    /* under warm_mu: the first calls of a session may come from several threads at once; and
     * cache_mu first (collect reads the tuning results), the order every lane takes them in */
    pthread_mutex_lock(&cu->sh->cache_mu);
    pthread_mutex_lock(&cu->sh->warm_mu);
    if (cu->sh->warmup_checked) {
        pthread_mutex_unlock(&cu->sh->warm_mu);
        pthread_mutex_unlock(&cu->sh->cache_mu);
        return;
    }
    cu->sh->warmup_checked = true; /* started, or nothing to do: either way once per session */
    if (warmup_off() || (!cu->sh->warmup && !(cu->sh->warmup = calloc(1, sizeof *cu->sh->warmup)))) {
        pthread_mutex_unlock(&cu->sh->warm_mu); /* the run does the work itself */
        pthread_mutex_unlock(&cu->sh->cache_mu);
        return;
    }
    struct kn_cu_warmup *w = cu->sh->warmup;
    if (collect(cu, &w->lt, KN_CU_TUNE_MATMUL, KN_CU_TUNE_MATMUL)) start(&w->lt, replay_products);
#ifdef KILN_HAVE_CUDNN
    if (kn_cu_lib.dnn_loaded && collect(cu, &w->dnn, KN_CU_TUNE_CONV_FWD, KN_CU_TUNE_CONV_BWD_DATA))
        start(&w->dnn, replay_convolutions);
#endif
    w->imported = w->lt.running || w->dnn.running;
    pthread_mutex_unlock(&cu->sh->warm_mu);
    pthread_mutex_unlock(&cu->sh->cache_mu);
}

static bool pending(const warm_job *j) {
    return j->running && (!atomic_load(&j->done) || atomic_load(&hold_libraries));
}

bool kn_cu_standin(kn_cuda *cu, uint8_t kind) {
    if (cu->standin_mode == 2) return true;
    if (cu->standin_mode == 1 || !cu->sh->warmup) return false;
    /* under warm_mu: another lane may be joining the threads (uncontended once they are joined) */
    pthread_mutex_lock(&cu->sh->warm_mu);
    const struct kn_cu_warmup *w = cu->sh->warmup;
    /* the products' library is ready once its start-up query and the replays are over */
    bool r = w && w->imported &&
             (kind == KN_CU_TUNE_MATMUL ? pending(&w->boot) || pending(&w->lt) : pending(&w->dnn));
    pthread_mutex_unlock(&cu->sh->warm_mu);
    return r;
}

/* Asked before a run that would be recorded. Not while the stand-ins run; and after they ran, one
 * more run goes uncaptured, so the libraries' first calls of this session (their own set-up, which
 * may allocate or wait) happen outside any recording. */
bool kn_cu_capture_ready(void *state) {
    kn_cuda *cu = kn_cu_lane(state);
    bool waiting = kn_cu_standin(cu, KN_CU_TUNE_MATMUL) || kn_cu_standin(cu, KN_CU_TUNE_CONV_FWD);
    if (cu->standin_mode == 2) return true; /* always: the stand-ins are what gets recorded */
    if (waiting) return false;
    if (kn_cu_conv_graph_building(cu)) return false; /* (its plans come into use uncaptured) */
    int64_t used = cu->sh->standin_products + cu->sh->standin_convs;
    if (used == cu->sh->standins_before_ready) return true;
    cu->sh->standins_before_ready = used;
    return false;
}

int kn_cuda_standin_count(void *cuda_state) {
    const kn_cuda *cu = cuda_state;
    return (int)(cu->sh->standin_products + cu->sh->standin_convs);
}

void kn_cuda_warmup_hold(bool hold) { atomic_store(&hold_libraries, hold); }

static void join(warm_job *j, const char *what) {
    if (j->running) {
        pthread_join(j->thread, NULL);
        j->running = false;
        for (int i = 0; i < 2; i++)
            if (j->scratch[i]) cudaFree(j->scratch[i]);
        kn_log(KILN_LOG_DEBUG, "cuda: warm start: %d of %d %s done beside the run in %.1f ms", j->replayed,
               j->n ? j->n : 1, what, j->ms);
    }
    free(j->recs);
    j->recs = NULL;
}

void kn_cu_handles_wait(kn_cuda *cu) {
    if (!cu->sh->warmup) return;
    pthread_mutex_lock(&cu->sh->warm_mu);
    if (cu->sh->warmup && cu->sh->warmup->handles.running) join(&cu->sh->warmup->handles, "library handles");
    pthread_mutex_unlock(&cu->sh->warm_mu);
}

static void warmup_join_locked(kn_cuda *cu);

void kn_cu_warmup_join(kn_cuda *cu) {
    pthread_mutex_lock(&cu->sh->warm_mu);
    warmup_join_locked(cu);
    pthread_mutex_unlock(&cu->sh->warm_mu);
}

static void warmup_join_locked(kn_cuda *cu) {
    struct kn_cu_warmup *w = cu->sh->warmup;
    if (!w || (!w->boot.running && !w->modules.running && !w->handles.running && !w->lt.running && !w->dnn.running &&
               !w->lt.recs && !w->dnn.recs))
        return;
    join(&w->handles, "library handles");
    join(&w->boot, "cuBLASLt start-up query");
    join(&w->modules, "kernel module loads");
    join(&w->lt, "cuBLASLt products");
    join(&w->dnn, "cuDNN convolutions");
    if (cu->sh->standin_products || cu->sh->standin_convs)
        kn_log(KILN_LOG_DEBUG, "cuda: warm start: %lld products and %lld convolutions ran on kiln's own kernels while "
               "the libraries started", (long long)cu->sh->standin_products, (long long)cu->sh->standin_convs);
}

int kn_cuda_warmup_replayed(void *cuda_state) {
    kn_cuda *cu = cuda_state;
    kn_cu_warmup_join(cu);
    return cu->sh->warmup ? cu->sh->warmup->lt.replayed + cu->sh->warmup->dnn.replayed : 0; /* the boot query is no replay */
}

void kn_cu_warmup_free(kn_cuda *cu) {
    struct kn_cu_warmup *w = cu->sh->warmup;
    if (!w) return;
    kn_cu_warmup_join(cu);
    if (w->gate_ready) {
        pthread_mutex_destroy(&w->gate_mu);
        pthread_cond_destroy(&w->gate_cv);
    }
    free(w);
    cu->sh->warmup = NULL;
}

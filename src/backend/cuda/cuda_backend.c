/* The CUDA backend behind the backend interface: device discovery, the per-session state (what
 * the lanes share: allocator, constants, tables) and the lanes of concurrent calls (a stream,
 * cuDNN handle and workspace each), a caching allocator (freed blocks are reused by size in their
 * lane's stream order, so steady-state runs with repeating shapes make no cudaMalloc/cudaFree),
 * host<->device copies, and kernel selection from the op tables. */
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_graph.h"

#include "util/log.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ devices */

static pthread_once_t kn_cu_once = PTHREAD_ONCE_INIT;
static int kn_cu_count;
static char kn_cu_reason[640];
static char kn_cu_desc[16][384];
static char kn_cu_print[16][384]; /* cache-key fingerprints, "name=value;..." */

static double kn_cu_probe_ms;  /* the whole probe: libraries, driver and device query */
static double kn_cu_driver_ms; /* the driver's initialisation (the first runtime call) */

static void probe_devices(void);
static void probe(void) {
    double t0 = kn_now_ms();
    probe_devices();
    kn_cu_probe_ms = kn_now_ms() - t0;
}

static void *load_libs(void *arg) {
    (void)arg;
    kn_cu_libs_load(NULL, 0);
    return NULL;
}

/* Why the runtime found no device, in the user's terms (kiln info, "no CUDA device: ..."): no
 * NVIDIA driver at all (the static runtime then says "driver version is insufficient"), a driver
 * older than the runtime kiln was built with, or a driver that sees no GPU. */
static void explain_no_device(cudaError_t e, char *out, size_t cap) {
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(out, cap, "no NVIDIA driver (libcuda.so.1 cannot be loaded: %s)", why ? why : "not found");
        return;
    }
    int drv = 0;
    int (*get_version)(int *) = (int (*)(int *))dlsym(h, "cuDriverGetVersion");
    if (get_version) get_version(&drv);
    dlclose(h);
    if (e == cudaErrorInsufficientDriver)
        snprintf(out, cap,
                 "the NVIDIA driver is too old (it supports CUDA %d.%d; this kiln was built with CUDA %d.%d): update "
                 "the driver",
                 drv / 1000, (drv % 1000) / 10, CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
    else if (e == cudaSuccess || e == cudaErrorNoDevice)
        snprintf(out, cap, "the NVIDIA driver (CUDA %d.%d) is installed but sees no GPU", drv / 1000, (drv % 1000) / 10);
    else snprintf(out, cap, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
}

static void probe_devices(void) {
    int n = 0;
    char why[512];
    /* cuBLASLt and cuDNN are loaded (dlopen, 70 ms and more) while the driver initialises
     * (100-190 ms): neither waits for the other, and a start-up pays only the longer */
    pthread_t loader;
    bool threaded = pthread_create(&loader, NULL, load_libs, NULL) == 0;
    double t0 = kn_now_ms();
    cudaError_t e = cudaGetDeviceCount(&n);
    kn_cu_driver_ms = kn_now_ms() - t0;
    if (threaded) pthread_join(loader, NULL);
    /* the driver and device first (no driver, a driver too old, no GPU), then the libraries */
    if (e != cudaSuccess || n == 0) {
        explain_no_device(e, kn_cu_reason, sizeof kn_cu_reason);
        kn_cu_count = 0;
        if (e != cudaSuccess) cudaGetLastError(); /* clear the sticky error */
        return;
    }
    if (!kn_cu_libs_load(why, sizeof why)) {
        snprintf(kn_cu_reason, sizeof kn_cu_reason, "CUDA libraries missing: %s", why);
        kn_cu_count = 0;
        return;
    }
    kn_cu_count = n > 16 ? 16 : n;
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    size_t lt = cublasLtGetVersion();
    for (int i = 0; i < kn_cu_count; i++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
            snprintf(kn_cu_desc[i], sizeof kn_cu_desc[i], "cuda:%d: (properties unavailable)", i);
            snprintf(kn_cu_print[i], sizeof kn_cu_print[i], "properties=unavailable");
            continue;
        }
        char dnn[32] = "no cuDNN", dnn_key[32] = "cudnn=none";
#ifdef KILN_HAVE_CUDNN
        if (kn_cu_lib.dnn_loaded) {
            snprintf(dnn, sizeof dnn, "cuDNN %zu", cudnnGetVersion());
            snprintf(dnn_key, sizeof dnn_key, "cudnn=%zu", cudnnGetVersion());
        }
#endif
        snprintf(kn_cu_print[i], sizeof kn_cu_print[i],
                 "name=%s;compute_capability=%d.%d;sms=%d;memory_mib=%zu;driver=%d;runtime=%d;cublaslt=%zu;%s", p.name,
                 p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem >> 20, drv, rt, lt, dnn_key);
        snprintf(kn_cu_desc[i], sizeof kn_cu_desc[i],
                 "cuda:%d: %s, compute capability %d.%d, %d SMs, %.1f GiB; driver %d.%d, runtime %d.%d, cuBLASLt %zu, %s",
                 i, p.name, p.major, p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1 << 30), drv / 1000,
                 (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10, lt, dnn);
    }
}

static int cu_available(const char **reason) {
    pthread_once(&kn_cu_once, probe);
    if (reason) *reason = kn_cu_count ? NULL : kn_cu_reason;
    return kn_cu_count > 0;
}

static size_t cu_device_count(void) {
    pthread_once(&kn_cu_once, probe);
    return (size_t)kn_cu_count;
}

static const char *cu_device_description(size_t i) {
    pthread_once(&kn_cu_once, probe);
    return i < (size_t)kn_cu_count ? kn_cu_desc[i] : NULL;
}

static int cu_fingerprint(size_t i, char *buf, size_t cap) {
    pthread_once(&kn_cu_once, probe);
    if (i >= (size_t)kn_cu_count) return 0;
    snprintf(buf, cap, "%s", kn_cu_print[i]);
    return 1;
}

/* ------------------------------------------------------------------ early start */

/* A session's creation asks for its device first thing (prepare); a thread then initialises the
 * driver (the probe) and creates the device's primary context, 200-300 ms together, while the
 * session hashes the model, reads its compiled file or compiles it. init waits for that thread and
 * reports the context's creation time as the thread measured it. The threads are joined at exit
 * (an exit while one is inside the driver could crash the runtime's own teardown). */
typedef struct cu_prep {
    bool started, done, ok, reported; /* reported: a session's init has logged this creation */
    double t0, t1; /* the context's creation, on the thread */
    pthread_t thread;
} cu_prep;
static cu_prep kn_cu_prep[16];
static pthread_mutex_t kn_cu_prep_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t kn_cu_prep_cv = PTHREAD_COND_INITIALIZER;

static void *prepare_device(void *arg) {
    cu_prep *p = arg;
    int dev = (int)(p - kn_cu_prep);
    bool ok = false;
    double t0 = 0, t1 = 0;
    pthread_once(&kn_cu_once, probe);
    if (dev < kn_cu_count) {
        /* cudaSetDevice creates the device's primary context: first, and timed (any other runtime
         * call before it would create device 0's). Then relaxed capture mode, since the application
         * may be recording a graph of its own on another thread, and cudaFree(NULL) to be sure. */
        t0 = kn_now_ms();
        ok = cudaSetDevice(dev) == cudaSuccess;
        enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        cudaThreadExchangeStreamCaptureMode(&mode);
        ok = ok && cudaFree(NULL) == cudaSuccess;
        t1 = kn_now_ms();
        cudaGetLastError();
    }
    pthread_mutex_lock(&kn_cu_prep_mu);
    p->ok = ok;
    p->t0 = t0;
    p->t1 = t1;
    p->done = true;
    pthread_cond_broadcast(&kn_cu_prep_cv);
    pthread_mutex_unlock(&kn_cu_prep_mu);
    return NULL;
}

static void join_prepared(void) {
    for (int i = 0; i < 16; i++) {
        pthread_mutex_lock(&kn_cu_prep_mu);
        bool joinable = kn_cu_prep[i].started && kn_cu_prep[i].thread;
        pthread_mutex_unlock(&kn_cu_prep_mu);
        if (joinable) pthread_join(kn_cu_prep[i].thread, NULL);
    }
}

/* A forked child has none of its parent's threads: it forgets them (and never joins them). */
static void forget_prepared(void) {
    memset(kn_cu_prep, 0, sizeof kn_cu_prep);
    pthread_mutex_init(&kn_cu_prep_mu, NULL);
    pthread_cond_init(&kn_cu_prep_cv, NULL);
}

static void register_join_at_exit(void) {
    atexit(join_prepared);
    pthread_atfork(NULL, NULL, forget_prepared);
}

static void cu_prepare(int device_id) {
    static pthread_once_t at_exit = PTHREAD_ONCE_INIT;
    if (device_id < 0 || device_id >= 16) return;
    cu_prep *p = &kn_cu_prep[device_id];
    pthread_mutex_lock(&kn_cu_prep_mu);
    bool go = !p->started;
    p->started = true;
    pthread_mutex_unlock(&kn_cu_prep_mu);
    if (!go) return;
    pthread_t t;
    if (pthread_create(&t, NULL, prepare_device, p) != 0) {
        pthread_mutex_lock(&kn_cu_prep_mu);
        p->done = true; /* init does it all itself */
        pthread_mutex_unlock(&kn_cu_prep_mu);
        return;
    }
    pthread_mutex_lock(&kn_cu_prep_mu);
    p->thread = t;
    pthread_mutex_unlock(&kn_cu_prep_mu);
    pthread_once(&at_exit, register_join_at_exit);
}

/* Waits for the early start of this device, if one was begun: the context's creation time it
 * measured, for the first session to ask; else -1 (none begun, it failed, or a session before this
 * one reported it: init then times its own call, which finds the context made). */
static double prepared_context_ms(int dev) {
    if (dev < 0 || dev >= 16) return -1;
    cu_prep *p = &kn_cu_prep[dev];
    pthread_mutex_lock(&kn_cu_prep_mu);
    while (p->started && !p->done) pthread_cond_wait(&kn_cu_prep_cv, &kn_cu_prep_mu);
    double ms = p->started && p->ok && !p->reported ? p->t1 - p->t0 : -1;
    p->reported = true;
    pthread_mutex_unlock(&kn_cu_prep_mu);
    return ms;
}

/* ------------------------------------------------------------------ lanes */

/* Why a thread-local binding rather than a lane argument: every entry of the backend table (run,
 * copy, upload, download, sync, new_tensor, capture, graph launch) and the allocator's free hook
 * receive the session's state, from the executor, the session and graph_run.c in some twenty
 * places, and the kernels in every cuda_*.c read cu->stream. The session binds the call's lane to
 * its thread for the call (lane_enter / lane_leave), so each of those entries finds the call's lane
 * (kn_cu_lane) with no change to its callers, and the kernels keep taking `kn_cuda *`, now the
 * lane. Device work is only ever issued on the calling thread (the executor runs nodes in order
 * there; the intra-op pool runs CPU kernels only), so the binding holds wherever it is needed. */
static _Thread_local kn_cuda *bound_lane;

kn_cuda *kn_cu_lane(void *state) {
    kn_cuda *prim = state;
    kn_cuda *l = bound_lane;
    return l && prim && l->sh == prim->sh ? l : prim;
}

/* The lane bound to this thread for this session's blocks, or NULL (outside any call). */
static kn_cuda *bound_of(const kn_cu_shared *sh) {
    kn_cuda *l = bound_lane;
    return l && l->sh == sh ? l : NULL;
}

/* ------------------------------------------------------------------ allocator */

static size_t round_size(size_t n) {
    if (n == 0) n = 1;
    return (n + 511) & ~(size_t)511;
}

/* cudaFree waits for the device: the blocks are free whatever stream used them. sh->mu held. */
static void release_list(kn_cu_block *list, int *n, size_t *cached) {
    for (int i = 0; i < *n; i++) cudaFree(list[i].ptr);
    *n = 0;
    *cached = 0;
}

static void release_cached(kn_cuda *cu) {
    release_list(cu->sh->free_blocks, &cu->sh->n_free, &cu->sh->cached_bytes);
    release_list(cu->free_blocks, &cu->n_free, &cu->cached_bytes);
}

/* The best fitting block of a free list (at least `need`, at most twice that), taken off it. */
static void *take_fit(kn_cu_block *list, int *n, size_t *cached, size_t need, size_t *cap) {
    int best = -1;
    for (int i = 0; i < *n; i++) {
        size_t c = list[i].size;
        if (c >= need && c / 2 <= need && (best < 0 || c < list[best].size)) best = i;
    }
    if (best < 0) return NULL;
    void *p = list[best].ptr;
    *cap = list[best].size;
    list[best] = list[--*n];
    *cached -= *cap;
    return p;
}

static bool push_block(kn_cu_block **list, int *n, int *capacity, size_t *cached, void *p, size_t size) {
    if (*n == *capacity) {
        int nc = *capacity ? *capacity * 2 : 64;
        kn_cu_block *b = realloc(*list, sizeof *b * (size_t)nc);
        if (!b) return false;
        *list = b;
        *capacity = nc;
    }
    (*list)[(*n)++] = (kn_cu_block){p, size};
    *cached += size;
    return true;
}

/* A block for lane `cu`: one its recording reserved, one its own calls freed (in its stream's
 * order), an idle one, else cudaMalloc. Blocks freed by another lane's calls are never taken: that
 * lane's stream may still be using them. */
static kiln_status cu_alloc(kn_cuda *cu, size_t bytes, void **out, size_t *cap_out) {
    kn_cu_shared *sh = cu->sh;
    size_t need = round_size(bytes);
    void *p = NULL;
    size_t cap = need;
    pthread_mutex_lock(&sh->mu);
    /* while a graph is recorded, the blocks it already reserved come first */
    if (cu->capture) p = kn_cu_capture_take(cu->capture, need, &cap);
    if (!p) p = take_fit(cu->free_blocks, &cu->n_free, &cu->cached_bytes, need, &cap);
    if (!p) p = take_fit(sh->free_blocks, &sh->n_free, &sh->cached_bytes, need, &cap);
    pthread_mutex_unlock(&sh->mu);
    if (!p) {
        cap = need;
        cudaError_t e = cudaMalloc(&p, cap);
        if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError();
            pthread_mutex_lock(&sh->mu);
            release_cached(cu);
            pthread_mutex_unlock(&sh->mu);
            e = cudaMalloc(&p, cap);
        }
        if (e != cudaSuccess) {
            cudaGetLastError();
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "cudaMalloc of %zu bytes on cuda:%d: %s (%zu bytes in use)", cap,
                            cu->device, cudaGetErrorString(e), sh->live_bytes);
        }
        pthread_mutex_lock(&sh->mu);
        sh->n_mallocs++;
        pthread_mutex_unlock(&sh->mu);
    }
    pthread_mutex_lock(&sh->mu);
    sh->live_bytes += cap;
    if (sh->live_bytes > sh->peak_bytes) sh->peak_bytes = sh->live_bytes;
    pthread_mutex_unlock(&sh->mu);
    *out = p;
    *cap_out = cap;
    return KILN_OK;
}

static void shared_free(kn_cu_shared *sh);

/* The tensors' free hook; owner is the session's primary lane. A block freed during a call goes
 * to that call's lane (or its recording); one freed outside any call (a caller's output, at
 * session end) is idle, since every call waits for its lane's work before it returns. */
static void cu_free_hook(void *owner, void *data, size_t capacity) {
    kn_cuda *prim = owner;
    if (!prim || !data) return;
    kn_cu_shared *sh = prim->sh;
    pthread_mutex_lock(&sh->mu);
    sh->live_bytes -= capacity;
    if (sh->orphaned) {
        /* the session is gone and this was one of the last tensors the caller held */
        bool last = sh->live_bytes == 0;
        pthread_mutex_unlock(&sh->mu);
        int prev = -1;
        cudaGetDevice(&prev);
        cudaSetDevice(prim->device);
        cudaFree(data);
        if (prev >= 0) cudaSetDevice(prev);
        if (last) {
            shared_free(sh);
            free(prim);
        }
        return;
    }
    kn_cuda *lane = bound_of(sh);
    if (lane && lane->capture) {
        /* reserved for the graph being recorded: a replay writes here again */
        kn_cu_capture_keep(lane->capture, data, capacity);
        pthread_mutex_unlock(&sh->mu);
        return;
    }
    bool kept = lane ? push_block(&lane->free_blocks, &lane->n_free, &lane->cap_free, &lane->cached_bytes, data, capacity)
                     : push_block(&sh->free_blocks, &sh->n_free, &sh->cap_free, &sh->cached_bytes, data, capacity);
    pthread_mutex_unlock(&sh->mu);
    if (!kept) cudaFree(data);
}

void kn_cu_unreserve_block(kn_cuda *cu, void *p, size_t size) {
    pthread_mutex_lock(&cu->sh->mu);
    cu->sh->live_bytes += size; /* not live while reserved; the hook counts it out again */
    pthread_mutex_unlock(&cu->sh->mu);
    cu_free_hook(cu->sh->primary, p, size);
}

kiln_status kn_cu_scratch(kn_cuda *cu, size_t bytes, void **out) {
    size_t cap;
    *out = NULL;
    KN_TRY(cu_alloc(cu, bytes, out, &cap));
    pthread_mutex_lock(&cu->sh->mu);
    if (cu->n_scratch == cu->cap_scratch) {
        int nc = cu->cap_scratch ? cu->cap_scratch * 2 : 16;
        kn_cu_block *b = realloc(cu->scratch, sizeof *b * (size_t)nc);
        if (b) {
            cu->scratch = b;
            cu->cap_scratch = nc;
        }
    }
    bool ok = cu->n_scratch < cu->cap_scratch;
    if (ok) cu->scratch[cu->n_scratch++] = (kn_cu_block){*out, cap};
    pthread_mutex_unlock(&cu->sh->mu);
    if (!ok) {
        cu_free_hook(cu->sh->primary, *out, cap);
        *out = NULL;
        return KN_OOM();
    }
    return KILN_OK;
}

void kn_cu_scratch_free(kn_cuda *cu, void *p, size_t bytes) {
    (void)bytes; /* the block's true capacity was recorded when it was handed out */
    if (!p) return;
    size_t cap = 0;
    pthread_mutex_lock(&cu->sh->mu);
    for (int i = cu->n_scratch - 1; i >= 0; i--)
        if (cu->scratch[i].ptr == p) {
            cap = cu->scratch[i].size;
            cu->scratch[i] = cu->scratch[--cu->n_scratch];
            break;
        }
    pthread_mutex_unlock(&cu->sh->mu);
    if (cap) cu_free_hook(cu->sh->primary, p, cap);
}

kiln_status kn_cu_new_tensor(kn_cuda *cu, kiln_dtype dtype, int rank, const int64_t *dims, kn_tensor **out) {
    *out = NULL;
    int64_t n = kn_shape_count(dims, rank);
    size_t es = kiln_dtype_size(dtype);
    if (kn_dtype_is_packed(dtype)) es = 1; /* int4/uint4/int2/uint2: sized by kn_dtype_nbytes below */
    if (n < 0 || es == 0 || dtype == KILN_DTYPE_STRING) {
        char d[256];
        return kn_error(KILN_ERR_UNSUPPORTED, "a %s%s tensor cannot live in CUDA memory", kiln_dtype_name(dtype),
                        kn_dims_str(dims, rank, d, sizeof d));
    }
    void *p;
    size_t cap;
    KN_TRY(cu_alloc(cu, kn_dtype_nbytes(dtype, n), &p, &cap));
    /* owned by the primary lane, which lives as long as the session (and past it, orphaned) */
    kiln_status st = kn_tensor_new_device(KN_DEVICE_CUDA, cu->sh->primary, p, cap, dtype, rank, dims, out);
    if (st != KILN_OK) cu_free_hook(cu->sh->primary, p, cap);
    else (*out)->device_id = cu->device;
    return st;
}

kiln_status kn_cu_output(kn_cuda *cu, kn_kernel_ctx *c, int i, kiln_dtype dtype, int rank, const int64_t *dims,
                         kn_tensor **out) {
    kn_tensor *t = c->out[i];
    if (t && t->device == KN_DEVICE_CUDA && t->dtype == dtype && t->rank == rank &&
        (rank == 0 || !memcmp(t->dims, dims, sizeof(int64_t) * (size_t)rank))) {
        *out = t;
        return KILN_OK;
    }
    kn_tensor *n;
    KN_TRY(kn_cu_new_tensor(cu, dtype, rank, dims, &n));
    kn_tensor_free(t);
    c->out[i] = n;
    *out = n;
    return KILN_OK;
}

kiln_status kn_cu_check(const kn_kernel_ctx *c, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return KILN_OK;
    if (e == cudaErrorNotSupported) {
        cudaGetLastError();
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "%s: this element type is not supported by the CUDA kernel",
                               what);
    }
    return kn_kernel_error(c, KILN_ERR_RUNTIME, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* ------------------------------------------------------------------ constants and conversions */

static void add_persistent(kn_cuda *cu, const void *p) {
    kn_cu_shared *sh = cu->sh;
    pthread_mutex_lock(&sh->cache_mu);
    if (sh->n_persistent == sh->cap_persistent) {
        int nc = sh->cap_persistent ? sh->cap_persistent * 2 : 64;
        const void **b = realloc(sh->persistent, sizeof *b * (size_t)nc);
        if (!b) {
            pthread_mutex_unlock(&sh->cache_mu);
            return;
        }
        sh->persistent = b;
        sh->cap_persistent = nc;
    }
    sh->persistent[sh->n_persistent++] = p;
    pthread_mutex_unlock(&sh->cache_mu);
}

bool kn_cu_is_persistent(kn_cuda *cu, const void *p) {
    kn_cu_shared *sh = cu->sh;
    bool found = false;
    pthread_mutex_lock(&sh->cache_mu);
    for (int i = 0; i < sh->n_persistent && !found; i++) found = sh->persistent[i] == p;
    pthread_mutex_unlock(&sh->cache_mu);
    return found;
}

/* The conversion itself: plain, or fp32 -> fp16 scaled with the scale slot after the elements. */
static cudaError_t convert(const void *x, kiln_dtype from, void *p, kiln_dtype to, int64_t n, bool scaled, size_t slot_at,
                           cudaStream_t s) {
    if (scaled) return kn_cu_to_f16_scaled((const float *)x, p, n, (char *)p + slot_at, s);
    return kn_cu_cast(from, to, x, p, n, s);
}

/* A constant's converted copy, or NULL. sh->cache_mu held. */
static const kn_cu_conv_entry *find_converted(const kn_cu_shared *sh, const void *x, kiln_dtype to, int64_t n,
                                              bool scaled) {
    for (int i = 0; i < sh->n_conv; i++)
        if (sh->conv[i].src == x && sh->conv[i].to == to && sh->conv[i].n == n && sh->conv[i].scaled == scaled)
            return &sh->conv[i];
    return NULL;
}

static kiln_status converted(kn_cuda *cu, const kn_kernel_ctx *c, const void *x, kiln_dtype from, int64_t n,
                             kiln_dtype to, void **out, size_t *bytes, const float **scale) {
    kn_cu_shared *sh = cu->sh;
    *out = NULL;
    *bytes = 0;
    bool scaled = scale && from == KILN_DTYPE_FLOAT && to == KILN_DTYPE_FLOAT16;
    if (scale) *scale = NULL;
    size_t elems = (size_t)n * kiln_dtype_size(to);
    size_t slot_at = (elems + 15) & ~(size_t)15; /* the 8-byte scale slot, 16-byte aligned */
    size_t need = scaled ? slot_at + 16 : elems;
    bool persist = kn_cu_is_persistent(cu, x);
    if (persist) {
        /* the cache lock is held over a first conversion too: one lane converts, the others wait
         * for its copy (a few launches, once per weight) */
        pthread_mutex_lock(&sh->cache_mu);
        const kn_cu_conv_entry *e = find_converted(sh, x, to, n, scaled);
        if (e) {
            *out = e->dst;
            if (scaled) *scale = (const float *)((char *)e->dst + slot_at) + 1;
            pthread_mutex_unlock(&sh->cache_mu);
            return KILN_OK;
        }
        if (cu->capture) {
            /* recorded, it would never run, and another lane could read the copy: the recording
             * fails, and the run goes uncaptured (the run before it normally converts them all) */
            pthread_mutex_unlock(&sh->cache_mu);
            return kn_kernel_error(c, KILN_ERR_UNSUPPORTED,
                                   "a weight is converted for the first time while the run is recorded");
        }
        void *p;
        size_t cap;
        kiln_status st = cu_alloc(cu, need, &p, &cap);
        if (st == KILN_OK) {
            st = kn_cu_check(c, convert(x, from, p, to, n, scaled, slot_at, cu->stream), "conversion to reduced precision");
            /* other lanes read the copy on their own streams: it must be complete before it is
             * published (once per weight) */
            if (st == KILN_OK) st = kn_cu_check(c, cudaStreamSynchronize(cu->stream), "conversion to reduced precision");
            if (st == KILN_OK && sh->n_conv == sh->cap_conv) {
                int nc = sh->cap_conv ? sh->cap_conv * 2 : 32;
                kn_cu_conv_entry *b = realloc(sh->conv, sizeof *b * (size_t)nc);
                if (!b) st = KN_OOM();
                else {
                    sh->conv = b;
                    sh->cap_conv = nc;
                }
            }
            if (st != KILN_OK) cu_free_hook(sh->primary, p, cap);
        }
        if (st != KILN_OK) {
            pthread_mutex_unlock(&sh->cache_mu);
            return st;
        }
        sh->conv[sh->n_conv++] = (kn_cu_conv_entry){x, to, n, scaled, p, cap};
        pthread_mutex_lock(&sh->mu);
        sh->live_bytes -= cap; /* owned by the cache, not a live tensor */
        pthread_mutex_unlock(&sh->mu);
        pthread_mutex_unlock(&sh->cache_mu);
        *out = p;
        if (scaled) *scale = (const float *)((char *)p + slot_at) + 1;
        return KILN_OK;
    }
    void *p;
    KN_TRY(kn_cu_scratch(cu, need, &p));
    kiln_status st =
        kn_cu_check(c, convert(x, from, p, to, n, scaled, slot_at, cu->stream), "conversion to reduced precision");
    if (st != KILN_OK) {
        kn_cu_scratch_free(cu, p, need);
        return st;
    }
    *out = p;
    *bytes = need ? need : 1;
    if (scaled) *scale = (const float *)((char *)p + slot_at) + 1;
    return KILN_OK;
}

kiln_status kn_cu_converted(kn_cuda *cu, const kn_kernel_ctx *c, const void *x, kiln_dtype from, int64_t n,
                            kiln_dtype to, void **out, size_t *bytes) {
    return converted(cu, c, x, from, n, to, out, bytes, NULL);
}

kiln_status kn_cu_converted_scaled(kn_cuda *cu, const kn_kernel_ctx *c, const void *x, kiln_dtype from, int64_t n,
                                   kiln_dtype to, void **out, size_t *bytes, const float **scale) {
    return converted(cu, c, x, from, n, to, out, bytes, scale);
}

/* ------------------------------------------------------------------ views */

int kn_cu_collapse(const int64_t *out_dims, int out_rank, const kn_tensor *const *ops, int n_ops, int64_t *dims,
                   int64_t (*strides)[KN_CU_MAX_RANK]) {
    int64_t full[KN_CU_CHAIN_INPUTS][KN_CU_MAX_RANK]; /* the most operands a caller has: a chain's inputs */
    if (n_ops > KN_CU_CHAIN_INPUTS) n_ops = KN_CU_CHAIN_INPUTS;
    for (int k = 0; k < n_ops; k++) kn_broadcast_strides(ops[k]->dims, ops[k]->rank, out_rank, full[k]);
    return kn_shape_collapse(n_ops, out_rank, out_dims, full, dims, strides);
}

void kn_cu_make_view(kn_cu_view *v, const int64_t *out_dims, int out_rank, const kn_tensor *const *ops, int n_ops) {
    memset(v, 0, sizeof *v);
    v->rank = kn_cu_collapse(out_dims, out_rank, ops, n_ops < 3 ? n_ops : 3, v->dims, v->strides);
}

void kn_cu_view_strided(kn_cu_view *v, int rank, const int64_t *dims, const int64_t *strides) {
    memset(v, 0, sizeof *v);
    int r = 0;
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1) continue;
        if (r > 0 && v->strides[0][r - 1] == strides[d] * dims[d]) {
            v->dims[r - 1] *= dims[d];
            v->strides[0][r - 1] = strides[d];
            continue;
        }
        v->dims[r] = dims[d];
        v->strides[0][r] = strides[d];
        r++;
    }
    if (r == 0) {
        v->dims[0] = 1;
        r = 1;
    }
    v->rank = r;
}

/* ------------------------------------------------------------------ the backend interface */

extern const kn_cuda_kernel kn_cuda_control[]; /* If, Loop, Scan (cuda_ops_control.c) */
extern const kn_cuda_kernel kn_cuda_datadep[]; /* NonZero, DynamicQuantizeLinear (cuda_ops_datadep.c) */

static const kn_cuda_kernel *const kn_cuda_tables[] = {kn_cuda_elementwise, kn_cuda_tensor, kn_cuda_nn, kn_cuda_linalg,
                                                       kn_cuda_fused, kn_cuda_attention,
                                                       kn_cuda_image, kn_cuda_quant, kn_cuda_einsum,
                                                       kn_cuda_control, kn_cuda_datadep};

static const kn_cuda_kernel *find_kernel(const kn_node *n) {
    for (size_t t = 0; t < sizeof kn_cuda_tables / sizeof kn_cuda_tables[0]; t++)
        for (const kn_cuda_kernel *k = kn_cuda_tables[t]; k->op_type; k++)
            if (!strcmp(k->op_type, n->op_type) && !strcmp(k->domain, n->domain)) return k;
    return NULL;
}

static const void *cu_select(void *state, const kn_node *n, const kn_type *const *in, int n_in, char *why,
                             size_t cap) {
    (void)state;
    const kn_cuda_kernel *k = find_kernel(n);
    if (!k) {
        snprintf(why, cap, "no CUDA kernel for %s%s%s", n->domain, *n->domain ? ":" : "", n->op_type);
        return NULL;
    }
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) continue;
        bool host = (i < 32 && ((k->host_inputs >> i) & 1)) || (i == 0 && (k->flags & KN_CUK_METADATA));
        if (in[i]->kind != KN_TYPE_TENSOR && in[i]->kind != KN_TYPE_UNKNOWN) {
            snprintf(why, cap, "input %d is a sequence or optional (the CUDA backend takes tensors)", i);
            return NULL;
        }
        kiln_dtype dt = in[i]->dtype;
        if (!host && !(k->flags & KN_CUK_ANY_TYPES) && dt != KILN_DTYPE_UNDEFINED && !(KN_T_DENSE & KN_T(dt))) {
            snprintf(why, cap, "input %d is %s (the CUDA backend takes numeric and bool tensors)", i,
                     kiln_dtype_name(dt));
            return NULL;
        }
    }
    if (k->types && !(k->flags & KN_CUK_ANY_TYPES) && n_in > 0 && in[0]) {
        kiln_dtype dt = in[0]->dtype;
        if (dt == KILN_DTYPE_UNDEFINED || !(k->types & KN_T(dt))) {
            snprintf(why, cap, "element type %s not supported by the CUDA kernel for %s", kiln_dtype_name(dt),
                     n->op_type);
            return NULL;
        }
    }
    if (k->supports && !k->supports(n, in, n_in, why, cap)) return NULL;
    return k;
}

static bool cu_input_on_host(const void *kernel, const kn_node *n, int i) {
    (void)n;
    const kn_cuda_kernel *k = kernel;
    return i < 32 && ((k->host_inputs >> i) & 1);
}

static bool cu_output_on_host(const void *kernel, const kn_node *n, int o) {
    (void)n;
    (void)o;
    return (((const kn_cuda_kernel *)kernel)->flags & KN_CUK_HOST_OUTPUTS) != 0;
}

static bool cu_input_metadata_only(const void *kernel, const kn_node *n, int i) {
    (void)n;
    return i == 0 && (((const kn_cuda_kernel *)kernel)->flags & KN_CUK_METADATA) != 0;
}

static bool cu_overwrites(const void *kernel) {
    (void)kernel;
    return true;
}

static kn_params_fn cu_kernel_params(const void *kernel, size_t *bytes) {
    const kn_cuda_kernel *k = kernel;
    *bytes = k->params_bytes;
    return k->prepare;
}

static kiln_status cu_run(void *state, const void *kernel, kn_kernel_ctx *c) {
    kn_cuda *cu = kn_cu_lane(state);
    const kn_cuda_kernel *k = kernel;
    if (cu->device) cudaSetDevice(cu->device); /* the thread's current device */
    if (!cu->sh->warmup_checked) kn_cu_warmup_start(cu); /* once, at the first node: a no-op without imported choices */
    return k->run(cu, c);
}

static kiln_status cu_new_tensor_op(void *state, kiln_dtype dtype, int rank, const int64_t *dims, kn_tensor **out) {
    return kn_cu_new_tensor(kn_cu_lane(state), dtype, rank, dims, out);
}

static kiln_status cu_upload(void *state, const kn_tensor *host, bool persistent, kn_tensor **out) {
    kn_cuda *cu = kn_cu_lane(state);
    *out = NULL;
    if (host->kind != KN_VALUE_TENSOR || host->dtype == KILN_DTYPE_STRING)
        return kn_error(KILN_ERR_UNSUPPORTED, "only numeric tensors can be copied to a CUDA device");
    /* while a graph is recorded: a constant's first copy would never run (the warm-up run makes
     * them), and other host values are copied from a pinned copy the graph keeps */
    if (cu->capture && persistent)
        return kn_error(KILN_ERR_UNSUPPORTED, "a constant is first copied to cuda:%d while the run is recorded",
                        cu->device);
    const void *src = host->data;
    if (cu->capture && host->nbytes) KN_TRY(kn_cu_capture_stage(cu, host->data, host->nbytes, &src));
    kn_tensor *t;
    KN_TRY(kn_cu_new_tensor(cu, host->dtype, host->rank, host->dims, &t));
    if (host->nbytes) {
        cudaError_t e = cudaMemcpyAsync(t->data, src, host->nbytes, cudaMemcpyHostToDevice, cu->stream);
        /* a constant is read by every lane, each on its own stream: its copy is complete before
         * any of them has it (once per constant) */
        if (e == cudaSuccess && persistent) e = cudaStreamSynchronize(cu->stream);
        if (e != cudaSuccess) {
            kn_tensor_free(t);
            return kn_error(KILN_ERR_RUNTIME, "copy of %zu bytes to cuda:%d: %s", host->nbytes, cu->device,
                            cudaGetErrorString(e));
        }
    }
    if (persistent) add_persistent(cu, t->data);
    *out = t;
    return KILN_OK;
}

/* Host tensors the caller gets (outputs, downloads) in pinned memory: a copy from the device into
 * pageable memory goes through the driver's staging buffers at about a third of the speed (whisper's
 * 2.3 MB output: 0.14 ms against ~0.05 on the H200's PCIe). One pool for the process; idle blocks
 * are kept up to PINNED_CACHED bytes, and a tensor larger than PINNED_MAX_BYTES (pinning costs
 * about as much as the copy saves) or one cudaHostAlloc refuses gets plain memory. */
#define PINNED_CACHED ((size_t)256 << 20)
#define PINNED_MAX_BYTES ((size_t)64 << 20)

static void *pinned_alloc(size_t bytes) {
    void *p = NULL;
    /* (portable: the pool serves every device's sessions) */
    if (bytes > PINNED_MAX_BYTES || cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void pinned_release(void *p) {
    cudaFreeHost(p);
    cudaGetLastError();
}

static kn_buffer_pool *pinned_pool;
static pthread_once_t pinned_once = PTHREAD_ONCE_INIT;

static void pinned_pool_make(void) {
    const kn_host_allocator a = {pinned_alloc, pinned_release, PINNED_CACHED};
    if (kn_buffer_pool_create_with(&a, &pinned_pool) != KILN_OK) pinned_pool = NULL; /* plain memory then */
}

static kiln_status cu_new_host_tensor(void *state, kiln_dtype dtype, int rank, const int64_t *dims, kn_tensor **out) {
    (void)state;
    pthread_once(&pinned_once, pinned_pool_make);
    return kn_tensor_new_pooled(dtype == KILN_DTYPE_STRING ? NULL : pinned_pool, false, dtype, rank, dims, out);
}

static bool cu_background_busy(void *state) { return kn_cu_conv_graph_building(kn_cu_lane(state)); }

static kiln_status cu_download(void *state, const kn_tensor *dev, kn_tensor **out) {
    kn_cuda *cu = kn_cu_lane(state);
    *out = NULL;
    if (cu->capture)
        return kn_error(KILN_ERR_UNSUPPORTED, "a %s value of cuda:%d is needed on the host while the run is recorded",
                        kiln_dtype_name(dev->dtype), cu->device);
    kn_tensor *t;
    KN_TRY(cu_new_host_tensor(state, dev->dtype, dev->rank, dev->dims, &t));
    cudaError_t e = cudaSuccess;
    if (dev->nbytes) e = cudaMemcpyAsync(t->data, dev->data, dev->nbytes, cudaMemcpyDeviceToHost, cu->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream);
    if (e != cudaSuccess) {
        kn_tensor_free(t);
        return kn_error(KILN_ERR_RUNTIME, "copy of %zu bytes from cuda:%d (after the device work that makes it): %s",
                        dev->nbytes, cu->device, cudaGetErrorString(e));
    }
    /* a value read on the host (a shape, a Loop's condition) made from an index out of range
     * would steer the rest of the run: the error is reported now */
    KN_TRY(kn_cu_err_check(cu));
    *out = t;
    return KILN_OK;
}

static kiln_status cu_sync(void *state) {
    kn_cuda *cu = kn_cu_lane(state);
    if (cu->capture)
        return kn_error(KILN_ERR_UNSUPPORTED, "cuda:%d: the host waits for the device while the run is recorded",
                        cu->device);
    cudaError_t e = cudaStreamSynchronize(cu->stream);
    if (e != cudaSuccess) return kn_error(KILN_ERR_RUNTIME, "cuda:%d: %s", cu->device, cudaGetErrorString(e));
    return KILN_OK;
}

static void cu_stats(void *state, uint64_t *allocs, size_t *live, size_t *peak) {
    kn_cu_shared *sh = ((kn_cuda *)state)->sh;
    pthread_mutex_lock(&sh->mu);
    if (allocs) *allocs = sh->n_mallocs;
    if (live) *live = sh->live_bytes;
    if (peak) *peak = sh->peak_bytes;
    pthread_mutex_unlock(&sh->mu);
}

/* A lane's own device state: stream, cuDNN handle, workspace, error record, cached blocks. */
static void lane_release(kn_cuda *cu) {
    if (cu->stream) cudaStreamSynchronize(cu->stream);
    pthread_mutex_lock(&cu->sh->mu);
    release_list(cu->free_blocks, &cu->n_free, &cu->cached_bytes);
    pthread_mutex_unlock(&cu->sh->mu);
    free(cu->free_blocks);
    cu->free_blocks = NULL;
    cu->cap_free = 0;
    free(cu->scratch);
    cu->scratch = NULL;
    kn_cu_err_free(cu);
    if (cu->workspace) cudaFree(cu->workspace);
    cu->workspace = NULL;
#ifdef KILN_HAVE_CUDNN
    if (cu->dnn) cudnnDestroy(cu->dnn);
    cu->dnn = NULL;
#endif
    if (cu->stream) cudaStreamDestroy(cu->stream);
    cu->stream = NULL;
}

static void shared_free(kn_cu_shared *sh) {
    pthread_mutex_destroy(&sh->mu);
    pthread_mutex_destroy(&sh->cache_mu);
    pthread_mutex_destroy(&sh->warm_mu);
    free(sh);
}

static void cu_destroy(void *state) {
    kn_cuda *cu = state;
    if (!cu) return;
    kn_cu_shared *sh = cu->sh;
    cudaSetDevice(cu->device);
    kn_cu_warmup_free(cu);
    if (cu->stream) cudaStreamSynchronize(cu->stream);
    if (sh->live_bytes)
        kn_log(KILN_LOG_DEBUG, "cuda:%d: %zu bytes of device tensors still live at session end", cu->device,
               sh->live_bytes);
    if (sh->n_lanes > 1)
        kn_log(KILN_LOG_DEBUG, "cuda:%d: %d lanes still open at session end", cu->device, sh->n_lanes - 1);
    kn_cu_conv_release(cu);
    kn_cu_conv_graph_release(cu);
    kn_cu_sdpa_release(cu);
    kn_cu_tuning_release(cu);
    pthread_mutex_lock(&sh->mu);
    release_list(sh->free_blocks, &sh->n_free, &sh->cached_bytes);
    pthread_mutex_unlock(&sh->mu);
    for (int i = 0; i < sh->n_conv; i++) cudaFree(sh->conv[i].dst);
    free(sh->conv);
    free(sh->free_blocks);
    free(sh->persistent);
    free(sh->lt_cache);
    lane_release(cu);
    if (sh->lt) cublasLtDestroy(sh->lt);
    pthread_mutex_lock(&sh->mu);
    if (sh->live_bytes) {
        /* device tensors the caller still holds (outputs left on the device) free their memory
         * through this state later; the last one frees it */
        sh->orphaned = true;
        pthread_mutex_unlock(&sh->mu);
        return;
    }
    pthread_mutex_unlock(&sh->mu);
    shared_free(sh);
    free(cu);
}

void kn_cu_make_handles(kn_cuda *cu) {
    cublasStatus_t bs = cublasLtCreate(&cu->sh->lt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cu->sh->lt = NULL;
        cu->sh->lt_status = (int)bs;
    }
    kn_cu_make_dnn(cu);
}

void kn_cu_make_dnn(kn_cuda *cu) {
#ifdef KILN_HAVE_CUDNN
    cudnnStatus_t ds = kn_cu_lib.dnn_loaded ? cudnnCreate(&cu->dnn) : CUDNN_STATUS_NOT_INITIALIZED;
    if (ds == CUDNN_STATUS_SUCCESS) ds = cudnnSetStream(cu->dnn, cu->stream);
    if (ds != CUDNN_STATUS_SUCCESS && kn_cu_lib.dnn_loaded) {
        kn_log(KILN_LOG_WARNING, "cuda:%d: cuDNN unusable (%s): Conv cannot run on this device", cu->device,
               cudnnGetErrorString(ds));
        if (cu->dnn) cudnnDestroy(cu->dnn);
        cu->dnn = NULL;
    }
#else
    (void)cu;
#endif
}

/* KILN_CUDA_LANES: 1 (default) lets a session's calls overlap, each on a lane of its own; 0 makes
 * them take turns on the one lane, as before lanes. */
static bool lanes_wanted(void) {
    const char *e = getenv("KILN_CUDA_LANES");
    return !(e && !strcmp(e, "0"));
}

static kiln_status cu_init(const kn_backend_config *cfg, void **state_out) {
    *state_out = NULL;
    const char *why;
    if (!cu_available(&why)) return kn_error(KILN_ERR_NO_DEVICE, "no CUDA device: %s", why);
    if (cfg->device_id >= kn_cu_count)
        return kn_error(KILN_ERR_NO_DEVICE, "no CUDA device: device_id %d asked for, %d device%s present",
                        cfg->device_id, kn_cu_count, kn_cu_count == 1 ? "" : "s");
    kn_cuda *cu = calloc(1, sizeof *cu);
    kn_cu_shared *sh = calloc(1, sizeof *sh);
    if (!cu || !sh) {
        free(cu);
        free(sh);
        return KN_OOM();
    }
    pthread_mutexattr_t rec;
    pthread_mutexattr_init(&rec);
    pthread_mutexattr_settype(&rec, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&sh->mu, NULL);
    pthread_mutex_init(&sh->cache_mu, &rec);
    pthread_mutex_init(&sh->warm_mu, &rec);
    pthread_mutexattr_destroy(&rec);
    sh->primary = cu;
    sh->n_lanes = 1;
    sh->overlap = lanes_wanted();
    cu->sh = sh;
    cu->device = cfg->device_id;
    cu->cfg = *cfg;
    kiln_status st = KILN_OK;
    /* start-up costs, reported at info level: the context is the part no cache can save */
    double t0 = kn_now_ms();
    double early_ms = prepared_context_ms(cu->device);
    cudaError_t e = cudaSetDevice(cu->device);
    if (e == cudaSuccess) e = cudaFree(NULL); /* creates the primary context now (when not made early), timed alone */
    double t_ctx = kn_now_ms();
    double ctx_ms = early_ms >= 0 ? early_ms : t_ctx - t0;
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&cu->sm_count, cudaDevAttrMultiProcessorCount, cu->device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&cu->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, cu->device);
    const char *rnn = getenv("KILN_CUDA_RNN");
    cu->rnn_steps = rnn && !strcmp(rnn, "steps");
    cu->rnn_shared = rnn && !strcmp(rnn, "shared");
    if (e != cudaSuccess) {
        st = kn_error(KILN_ERR_NO_DEVICE, "no CUDA device: cuda:%d: %s", cu->device, cudaGetErrorString(e));
        goto fail;
    }
    double t_lt = kn_now_ms();
    /* as soon as there is a context: the start-up threads, the library handles among them */
    if (!kn_cu_warmup_boot(cu)) {
        kn_cu_make_handles(cu);
        if (!sh->lt) {
            st = kn_error(KILN_ERR_NO_DEVICE, "no CUDA device: cublasLtCreate failed (status %d)", sh->lt_status);
            goto fail;
        }
    }
    double t_dnn = kn_now_ms();
    cu->workspace_size = (size_t)(cfg->workspace_mb ? cfg->workspace_mb : 64) << 20;
    cu->conv_workspace_max = cu->workspace_size;
    if (!cfg->workspace_mb) {
        /* unbounded by the caller: a sixteenth of the device's memory, at most 4 GiB */
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
            size_t cap = total_b / 16 < ((size_t)4 << 30) ? total_b / 16 : (size_t)4 << 30;
            if (cap > cu->conv_workspace_max) cu->conv_workspace_max = cap;
        } else
            cudaGetLastError();
    }
    e = cudaMalloc(&cu->workspace, cu->workspace_size);
    if (e != cudaSuccess) {
        st = kn_error(KILN_ERR_OUT_OF_MEMORY, "cuda:%d: workspace of %zu MiB: %s", cu->device, cu->workspace_size >> 20,
                      cudaGetErrorString(e));
        cu->workspace = NULL;
        goto fail;
    }
    kn_tensor_set_device_free(KN_DEVICE_CUDA, cu_free_hook);
    double t_end = kn_now_ms();
    kn_log(KILN_LOG_INFO,
           "cuda:%d: cuBLASLt and cuDNN loaded in %.1f ms beside the driver (probe %.1f ms in all); driver initialised "
           "and devices queried in %.1f ms, context created in %.1f ms%s; start-up threads or library handles %.1f ms, "
           "workspace %.1f ms",
           cu->device, kn_cu_lib.load_ms, kn_cu_probe_ms, kn_cu_driver_ms, ctx_ms,
           early_ms >= 0 ? " (begun with the session, beside its other start-up work)" : "", t_dnn - t_lt, t_end - t_dnn);
    *state_out = cu;
    return KILN_OK;
fail:
    cudaGetLastError();
    cu_destroy(cu);
    return st;
}

/* ------------------------------------------------------------------ lanes of a session's calls */

static bool cu_lanes_overlap(void *state) { return ((kn_cuda *)state)->sh->overlap; }

/* The primary lane if no run context holds it, else a new one: its own stream, cuDNN handle on
 * that stream and workspace (the shared settings copied). A single-threaded session so uses the
 * primary lane alone, as before lanes. */
static kiln_status cu_lane_open(void *state, void **lane_out) {
    kn_cuda *prim = state;
    kn_cu_shared *sh = prim->sh;
    *lane_out = NULL;
    pthread_mutex_lock(&sh->mu);
    bool take_primary = !prim->held;
    if (take_primary) prim->held = true;
    pthread_mutex_unlock(&sh->mu);
    if (take_primary) {
        *lane_out = prim;
        return KILN_OK;
    }
    kn_cuda *cu = calloc(1, sizeof *cu);
    if (!cu) return KN_OOM();
    cu->sh = sh;
    cu->device = prim->device;
    cu->cfg = prim->cfg;
    cu->sm_count = prim->sm_count;
    cu->smem_optin = prim->smem_optin;
    cu->standin_mode = prim->standin_mode;
    cu->rnn_steps = prim->rnn_steps;
    cu->rnn_shared = prim->rnn_shared;
    cu->workspace_size = prim->workspace_size;
    cu->conv_workspace_max = prim->conv_workspace_max;
    cu->held = true;
    cudaSetDevice(cu->device);
    cudaError_t e = cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc(&cu->workspace, cu->workspace_size);
    if (e != cudaSuccess) {
        cudaGetLastError();
        kiln_status st = kn_error(e == cudaErrorMemoryAllocation ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_RUNTIME,
                                  "cuda:%d: a lane for a concurrent call (stream and %zu MiB workspace): %s", cu->device,
                                  cu->workspace_size >> 20, cudaGetErrorString(e));
        lane_release(cu);
        free(cu);
        return st;
    }
    /* cuDNN handles are not to be shared between threads: one per lane. Its library is loaded by
     * now (the probe); the primary lane's is made beside the start (cuda_warmup.c). */
    kn_cu_make_dnn(cu);
    pthread_mutex_lock(&sh->mu);
    sh->n_lanes++;
    pthread_mutex_unlock(&sh->mu);
    *lane_out = cu;
    return KILN_OK;
}

static void cu_lane_close(void *state, void *lane) {
    kn_cuda *prim = state, *cu = lane;
    if (!cu) return;
    if (cu == prim) {
        pthread_mutex_lock(&prim->sh->mu);
        prim->held = false;
        pthread_mutex_unlock(&prim->sh->mu);
        return;
    }
    cudaSetDevice(cu->device);
    lane_release(cu);
    pthread_mutex_lock(&prim->sh->mu);
    prim->sh->n_lanes--;
    pthread_mutex_unlock(&prim->sh->mu);
    free(cu);
}

static void cu_lane_enter(void *state, void *lane) {
    kn_cuda *cu = lane ? lane : state;
    kn_cu_shared *sh = cu->sh;
    cu->outer = bound_lane;
    bound_lane = cu;
    /* relaxed for the call: another lane's thread may be recording (ours are relaxed captures),
     * or cuDNN measuring algorithms (its own capture), while this one allocates */
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess) cu->outer_mode = (int)mode;
    else cu->outer_mode = -1;
    pthread_mutex_lock(&sh->mu);
    sh->lanes_busy++;
    if (sh->lanes_busy > sh->peak_lanes) sh->peak_lanes = sh->lanes_busy;
    pthread_mutex_unlock(&sh->mu);
}

/* The end of a call on the lane: its work is waited for (every call's outputs are complete when it
 * returns, and the blocks it freed may then go to other streams), and a data error a kernel
 * recorded becomes the call's error. Waiting on a stream the call already drained (host outputs
 * were downloaded) costs no more than a query. */
static kiln_status cu_lane_leave(void *state, void *lane) {
    kn_cuda *cu = lane ? lane : state;
    kn_cu_shared *sh = cu->sh;
    kiln_status st = KILN_OK;
    if (cu->capture) st = KN_INTERNAL("a call ended while its lane was recording");
    cudaError_t e = cu->capture ? cudaSuccess : cudaStreamSynchronize(cu->stream);
    if (e != cudaSuccess && st == KILN_OK)
        st = kn_error(KILN_ERR_RUNTIME, "cuda:%d: the call's device work: %s (%s)", cu->device, cudaGetErrorString(e),
                      cudaGetErrorName(e));
    kiln_status est = kn_cu_err_check(cu);
    if (st == KILN_OK) st = est;
    bound_lane = cu->outer;
    cu->outer = NULL;
    if (cu->outer_mode >= 0) {
        enum cudaStreamCaptureMode mode = (enum cudaStreamCaptureMode)cu->outer_mode;
        cudaThreadExchangeStreamCaptureMode(&mode);
    }
    pthread_mutex_lock(&sh->mu);
    sh->lanes_busy--;
    pthread_mutex_unlock(&sh->mu);
    return st;
}

void kn_cuda_lane_stats(void *cuda_state, int *lanes, int *peak_overlap) {
    kn_cu_shared *sh = ((kn_cuda *)cuda_state)->sh;
    pthread_mutex_lock(&sh->mu);
    if (lanes) *lanes = sh->n_lanes;
    if (peak_overlap) *peak_overlap = sh->peak_lanes;
    pthread_mutex_unlock(&sh->mu);
}

const kn_backend_ops kn_backend_cuda = {
    .name = "cuda",
    .device = KN_DEVICE_CUDA,
    .available = cu_available,
    .device_count = cu_device_count,
    .device_description = cu_device_description,
    .fingerprint = cu_fingerprint,
    .init = cu_init,
    .destroy = cu_destroy,
    .select = cu_select,
    .input_on_host = cu_input_on_host,
    .output_on_host = cu_output_on_host,
    .input_metadata_only = cu_input_metadata_only,
    .overwrites = cu_overwrites,
    .run = cu_run,
    .kernel_params = cu_kernel_params,
    .new_tensor = cu_new_tensor_op,
    .upload = cu_upload,
    .download = cu_download,
    .new_host_tensor = cu_new_host_tensor,
    .sync = cu_sync,
    .stats = cu_stats,
    .check_pointer = kn_cu_check_pointer,
    .copy = kn_cu_copy,
    .capture_begin = kn_cu_capture_begin,
    .capture_end = kn_cu_capture_end,
    .capture_ready = kn_cu_capture_ready,
    .background_busy = cu_background_busy,
    .graph_launch = kn_cu_graph_launch,
    .graph_destroy = kn_cu_graph_destroy,
    .tuning_count = kn_cu_tuning_count,
    .tuning_record = kn_cu_tuning_record,
    .tuning_import = kn_cu_tuning_import,
    .prepare = cu_prepare,
    .lanes_overlap = cu_lanes_overlap,
    .lane_open = cu_lane_open,
    .lane_close = cu_lane_close,
    .lane_enter = cu_lane_enter,
    .lane_leave = cu_lane_leave,
};

/* The CUDA backend behind the backend interface: device discovery, the per-session state (one
 * stream, cuBLASLt and cuDNN handles, a workspace), a caching allocator (freed blocks are reused by
 * size in stream order, so steady-state runs with repeating shapes make no cudaMalloc/cudaFree),
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

/* ------------------------------------------------------------------ allocator */

static size_t round_size(size_t n) {
    if (n == 0) n = 1;
    return (n + 511) & ~(size_t)511;
}

static void release_cached(kn_cuda *cu) {
    /* cudaFree waits for the device; the blocks are free in stream order */
    for (int i = 0; i < cu->n_free; i++) cudaFree(cu->free_blocks[i].ptr);
    cu->n_free = 0;
    cu->cached_bytes = 0;
}

static kiln_status cu_alloc(kn_cuda *cu, size_t bytes, void **out, size_t *cap_out) {
    size_t need = round_size(bytes);
    void *p = NULL;
    size_t cap = need;
    pthread_mutex_lock(&cu->mu);
    /* while a graph is recorded, the blocks it already reserved come first */
    if (cu->capture) p = kn_cu_capture_take(cu->capture, need, &cap);
    int best = -1;
    for (int i = 0; !p && i < cu->n_free; i++) {
        size_t c = cu->free_blocks[i].size;
        if (c >= need && c / 2 <= need && (best < 0 || c < cu->free_blocks[best].size)) best = i;
    }
    if (best >= 0) {
        p = cu->free_blocks[best].ptr;
        cap = cu->free_blocks[best].size;
        cu->free_blocks[best] = cu->free_blocks[--cu->n_free];
        cu->cached_bytes -= cap;
    }
    pthread_mutex_unlock(&cu->mu);
    if (!p) {
        cudaError_t e = cudaMalloc(&p, cap);
        if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError();
            pthread_mutex_lock(&cu->mu);
            release_cached(cu);
            pthread_mutex_unlock(&cu->mu);
            e = cudaMalloc(&p, cap);
        }
        if (e != cudaSuccess) {
            cudaGetLastError();
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "cudaMalloc of %zu bytes on cuda:%d: %s (%zu bytes in use)", cap,
                            cu->device, cudaGetErrorString(e), cu->live_bytes);
        }
        cu->n_mallocs++;
    }
    pthread_mutex_lock(&cu->mu);
    cu->live_bytes += cap;
    if (cu->live_bytes > cu->peak_bytes) cu->peak_bytes = cu->live_bytes;
    pthread_mutex_unlock(&cu->mu);
    *out = p;
    *cap_out = cap;
    return KILN_OK;
}

static void cu_free_hook(void *owner, void *data, size_t capacity) {
    kn_cuda *cu = owner;
    if (!cu || !data) return;
    pthread_mutex_lock(&cu->mu);
    cu->live_bytes -= capacity;
    if (cu->orphaned) {
        /* the session is gone and this was one of the last tensors the caller held */
        bool last = cu->live_bytes == 0;
        pthread_mutex_unlock(&cu->mu);
        int prev = -1;
        cudaGetDevice(&prev);
        cudaSetDevice(cu->device);
        cudaFree(data);
        if (prev >= 0) cudaSetDevice(prev);
        if (last) {
            pthread_mutex_destroy(&cu->mu);
            free(cu);
        }
        return;
    }
    if (cu->capture) {
        /* reserved for the graph being recorded: a replay writes here again */
        kn_cu_capture_keep(cu->capture, data, capacity);
        pthread_mutex_unlock(&cu->mu);
        return;
    }
    if (cu->n_free == cu->cap_free) {
        int nc = cu->cap_free ? cu->cap_free * 2 : 64;
        kn_cu_block *b = realloc(cu->free_blocks, sizeof *b * (size_t)nc);
        if (b) {
            cu->free_blocks = b;
            cu->cap_free = nc;
        }
    }
    if (cu->n_free < cu->cap_free) {
        cu->free_blocks[cu->n_free++] = (kn_cu_block){data, capacity};
        cu->cached_bytes += capacity;
        data = NULL;
    }
    pthread_mutex_unlock(&cu->mu);
    if (data) cudaFree(data);
}

void kn_cu_unreserve_block(kn_cuda *cu, void *p, size_t size) {
    pthread_mutex_lock(&cu->mu);
    cu->live_bytes += size; /* not live while reserved; the hook counts it out again */
    pthread_mutex_unlock(&cu->mu);
    cu_free_hook(cu, p, size);
}

kiln_status kn_cu_scratch(kn_cuda *cu, size_t bytes, void **out) {
    size_t cap;
    *out = NULL;
    KN_TRY(cu_alloc(cu, bytes, out, &cap));
    pthread_mutex_lock(&cu->mu);
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
    pthread_mutex_unlock(&cu->mu);
    if (!ok) {
        cu_free_hook(cu, *out, cap);
        *out = NULL;
        return KN_OOM();
    }
    return KILN_OK;
}

void kn_cu_scratch_free(kn_cuda *cu, void *p, size_t bytes) {
    (void)bytes; /* the block's true capacity was recorded when it was handed out */
    if (!p) return;
    size_t cap = 0;
    pthread_mutex_lock(&cu->mu);
    for (int i = cu->n_scratch - 1; i >= 0; i--)
        if (cu->scratch[i].ptr == p) {
            cap = cu->scratch[i].size;
            cu->scratch[i] = cu->scratch[--cu->n_scratch];
            break;
        }
    pthread_mutex_unlock(&cu->mu);
    if (cap) cu_free_hook(cu, p, cap);
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
    kiln_status st = kn_tensor_new_device(KN_DEVICE_CUDA, cu, p, cap, dtype, rank, dims, out);
    if (st != KILN_OK) cu_free_hook(cu, p, cap);
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
    if (cu->n_persistent == cu->cap_persistent) {
        int nc = cu->cap_persistent ? cu->cap_persistent * 2 : 64;
        const void **b = realloc(cu->persistent, sizeof *b * (size_t)nc);
        if (!b) return;
        cu->persistent = b;
        cu->cap_persistent = nc;
    }
    cu->persistent[cu->n_persistent++] = p;
}

bool kn_cu_is_persistent(kn_cuda *cu, const void *p) {
    for (int i = 0; i < cu->n_persistent; i++)
        if (cu->persistent[i] == p) return true;
    return false;
}

/* The conversion itself: plain, or fp32 -> fp16 scaled with the scale slot after the elements. */
static cudaError_t convert(const void *x, kiln_dtype from, void *p, kiln_dtype to, int64_t n, bool scaled, size_t slot_at,
                           cudaStream_t s) {
    if (scaled) return kn_cu_to_f16_scaled((const float *)x, p, n, (char *)p + slot_at, s);
    return kn_cu_cast(from, to, x, p, n, s);
}

static kiln_status converted(kn_cuda *cu, const kn_kernel_ctx *c, const void *x, kiln_dtype from, int64_t n,
                             kiln_dtype to, void **out, size_t *bytes, const float **scale) {
    *out = NULL;
    *bytes = 0;
    bool scaled = scale && from == KILN_DTYPE_FLOAT && to == KILN_DTYPE_FLOAT16;
    if (scale) *scale = NULL;
    size_t elems = (size_t)n * kiln_dtype_size(to);
    size_t slot_at = (elems + 15) & ~(size_t)15; /* the 8-byte scale slot, 16-byte aligned */
    size_t need = scaled ? slot_at + 16 : elems;
    bool persist = kn_cu_is_persistent(cu, x);
    if (persist)
        for (int i = 0; i < cu->n_conv; i++)
            if (cu->conv[i].src == x && cu->conv[i].to == to && cu->conv[i].n == n && cu->conv[i].scaled == scaled) {
                *out = cu->conv[i].dst;
                if (scaled) *scale = (const float *)((char *)cu->conv[i].dst + slot_at) + 1;
                return KILN_OK;
            }
    void *p;
    size_t cap;
    if (!persist) {
        KN_TRY(kn_cu_scratch(cu, need, &p));
        kiln_status st = kn_cu_check(c, convert(x, from, p, to, n, scaled, slot_at, cu->stream),
                                     "conversion to reduced precision");
        if (st != KILN_OK) {
            kn_cu_scratch_free(cu, p, need);
            return st;
        }
        *out = p;
        *bytes = need ? need : 1;
        if (scaled) *scale = (const float *)((char *)p + slot_at) + 1;
        return KILN_OK;
    }
    KN_TRY(cu_alloc(cu, need, &p, &cap));
    kiln_status st = kn_cu_check(c, convert(x, from, p, to, n, scaled, slot_at, cu->stream),
                                 "conversion to reduced precision");
    if (st != KILN_OK) {
        cu_free_hook(cu, p, cap);
        return st;
    }
    if (cu->n_conv == cu->cap_conv) {
        int nc = cu->cap_conv ? cu->cap_conv * 2 : 32;
        kn_cu_conv_entry *b = realloc(cu->conv, sizeof *b * (size_t)nc);
        if (!b) {
            cu_free_hook(cu, p, cap);
            return KN_OOM();
        }
        cu->conv = b;
        cu->cap_conv = nc;
    }
    cu->conv[cu->n_conv++] = (kn_cu_conv_entry){x, to, n, scaled, p, cap};
    pthread_mutex_lock(&cu->mu);
    cu->live_bytes -= cap; /* owned by the cache, not a live tensor */
    pthread_mutex_unlock(&cu->mu);
    *out = p;
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

static const kn_cuda_kernel *const kn_cuda_tables[] = {kn_cuda_elementwise, kn_cuda_tensor, kn_cuda_nn, kn_cuda_linalg,
                                                       kn_cuda_fused, kn_cuda_attention,
                                                       kn_cuda_image, kn_cuda_quant, kn_cuda_einsum,
                                                       kn_cuda_control};

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

static kiln_status cu_run(void *state, const void *kernel, kn_kernel_ctx *c) {
    kn_cuda *cu = state;
    const kn_cuda_kernel *k = kernel;
    if (cu->device) cudaSetDevice(cu->device); /* the thread's current device */
    if (!cu->warmup_checked) kn_cu_warmup_start(cu); /* once, at the first node: a no-op without imported choices */
    return k->run(cu, c);
}

static kiln_status cu_new_tensor_op(void *state, kiln_dtype dtype, int rank, const int64_t *dims, kn_tensor **out) {
    return kn_cu_new_tensor(state, dtype, rank, dims, out);
}

static kiln_status cu_upload(void *state, const kn_tensor *host, bool persistent, kn_tensor **out) {
    kn_cuda *cu = state;
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

static kiln_status cu_download(void *state, const kn_tensor *dev, kn_tensor **out) {
    kn_cuda *cu = state;
    *out = NULL;
    if (cu->capture)
        return kn_error(KILN_ERR_UNSUPPORTED, "a %s value of cuda:%d is needed on the host while the run is recorded",
                        kiln_dtype_name(dev->dtype), cu->device);
    kn_tensor *t;
    KN_TRY(kn_tensor_new_pooled(NULL, false, dev->dtype, dev->rank, dev->dims, &t));
    cudaError_t e = cudaSuccess;
    if (dev->nbytes) e = cudaMemcpyAsync(t->data, dev->data, dev->nbytes, cudaMemcpyDeviceToHost, cu->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream);
    if (e != cudaSuccess) {
        kn_tensor_free(t);
        return kn_error(KILN_ERR_RUNTIME, "copy of %zu bytes from cuda:%d (after the device work that makes it): %s",
                        dev->nbytes, cu->device, cudaGetErrorString(e));
    }
    *out = t;
    return KILN_OK;
}

static kiln_status cu_sync(void *state) {
    kn_cuda *cu = state;
    if (cu->capture)
        return kn_error(KILN_ERR_UNSUPPORTED, "cuda:%d: the host waits for the device while the run is recorded",
                        cu->device);
    cudaError_t e = cudaStreamSynchronize(cu->stream);
    if (e != cudaSuccess) return kn_error(KILN_ERR_RUNTIME, "cuda:%d: %s", cu->device, cudaGetErrorString(e));
    return KILN_OK;
}

static void cu_stats(void *state, uint64_t *allocs, size_t *live, size_t *peak) {
    kn_cuda *cu = state;
    pthread_mutex_lock(&cu->mu);
    if (allocs) *allocs = cu->n_mallocs;
    if (live) *live = cu->live_bytes;
    if (peak) *peak = cu->peak_bytes;
    pthread_mutex_unlock(&cu->mu);
}

static void cu_destroy(void *state) {
    kn_cuda *cu = state;
    if (!cu) return;
    cudaSetDevice(cu->device);
    kn_cu_warmup_free(cu);
    if (cu->stream) cudaStreamSynchronize(cu->stream);
    if (cu->live_bytes)
        kn_log(KILN_LOG_DEBUG, "cuda:%d: %zu bytes of device tensors still live at session end", cu->device,
               cu->live_bytes);
    kn_cu_conv_release(cu);
    kn_cu_tuning_release(cu);
    release_cached(cu);
    for (int i = 0; i < cu->n_conv; i++) cudaFree(cu->conv[i].dst);
    free(cu->conv);
    free(cu->free_blocks);
    free(cu->scratch);
    free(cu->persistent);
    free(cu->lt_cache);
    if (cu->workspace) cudaFree(cu->workspace);
    if (cu->lt) cublasLtDestroy(cu->lt);
#ifdef KILN_HAVE_CUDNN
    if (cu->dnn) cudnnDestroy(cu->dnn);
#endif
    if (cu->stream) cudaStreamDestroy(cu->stream);
    pthread_mutex_lock(&cu->mu);
    if (cu->live_bytes) {
        /* device tensors the caller still holds (outputs left on the device) free their memory
         * through this state later; the last one frees it */
        cu->orphaned = true;
        pthread_mutex_unlock(&cu->mu);
        return;
    }
    pthread_mutex_unlock(&cu->mu);
    pthread_mutex_destroy(&cu->mu);
    free(cu);
}

void kn_cu_make_handles(kn_cuda *cu) {
    cublasStatus_t bs = cublasLtCreate(&cu->lt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cu->lt = NULL;
        cu->lt_status = (int)bs;
    }
#ifdef KILN_HAVE_CUDNN
    cudnnStatus_t ds = kn_cu_lib.dnn_loaded ? cudnnCreate(&cu->dnn) : CUDNN_STATUS_NOT_INITIALIZED;
    if (ds == CUDNN_STATUS_SUCCESS) ds = cudnnSetStream(cu->dnn, cu->stream);
    if (ds != CUDNN_STATUS_SUCCESS && kn_cu_lib.dnn_loaded) {
        kn_log(KILN_LOG_WARNING, "cuda:%d: cuDNN unusable (%s): Conv cannot run on this device", cu->device,
               cudnnGetErrorString(ds));
        if (cu->dnn) cudnnDestroy(cu->dnn);
        cu->dnn = NULL;
    }
#endif
}

static kiln_status cu_init(const kn_backend_config *cfg, void **state_out) {
    *state_out = NULL;
    const char *why;
    if (!cu_available(&why)) return kn_error(KILN_ERR_NO_DEVICE, "no CUDA device: %s", why);
    if (cfg->device_id >= kn_cu_count)
        return kn_error(KILN_ERR_NO_DEVICE, "no CUDA device: device_id %d asked for, %d device%s present",
                        cfg->device_id, kn_cu_count, kn_cu_count == 1 ? "" : "s");
    kn_cuda *cu = calloc(1, sizeof *cu);
    if (!cu) return KN_OOM();
    pthread_mutex_init(&cu->mu, NULL);
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
    if (e != cudaSuccess) {
        st = kn_error(KILN_ERR_NO_DEVICE, "no CUDA device: cuda:%d: %s", cu->device, cudaGetErrorString(e));
        goto fail;
    }
    double t_lt = kn_now_ms();
    /* as soon as there is a context: the start-up threads, the library handles among them */
    if (!kn_cu_warmup_boot(cu)) {
        kn_cu_make_handles(cu);
        if (!cu->lt) {
            st = kn_error(KILN_ERR_NO_DEVICE, "no CUDA device: cublasLtCreate failed (status %d)", cu->lt_status);
            goto fail;
        }
    }
    double t_dnn = kn_now_ms();
    cu->workspace_size = (size_t)(cfg->workspace_mb ? cfg->workspace_mb : 64) << 20;
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
    .new_tensor = cu_new_tensor_op,
    .upload = cu_upload,
    .download = cu_download,
    .sync = cu_sync,
    .stats = cu_stats,
    .check_pointer = kn_cu_check_pointer,
    .copy = kn_cu_copy,
    .capture_begin = kn_cu_capture_begin,
    .capture_end = kn_cu_capture_end,
    .capture_ready = kn_cu_capture_ready,
    .graph_launch = kn_cu_graph_launch,
    .graph_destroy = kn_cu_graph_destroy,
    .tuning_count = kn_cu_tuning_count,
    .tuning_record = kn_cu_tuning_record,
    .tuning_import = kn_cu_tuning_import,
    .prepare = cu_prepare,
};

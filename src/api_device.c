/* The public C API for device memory outside sessions: kiln_tensor_create_device and
 * kiln_tensor_copy (kiln.h). Backend-neutral: the device's backend is found by its kn_device
 * (backend.h), and one instance of it per device ordinal, made on first use and kept for the
 * process, allocates (new_tensor) and copies (copy, upload/download) through the backend's table.
 * A tensor it makes returns its memory to that instance when destroyed, so the instance is never
 * destroyed (a session's instance is, and its tensors outlive it through the orphan path of the
 * backend; a per-process one needs none). */
#include "kiln.h"

#include "backend/backend.h"
#include "ir/tensor.h"
#include "util/status.h"

#include <pthread.h>
#include <string.h>

#define KN_DEV_MAX_ORDINAL 64

typedef struct dev_slot {
    const kn_backend_ops *ops;
    void *state;
} dev_slot;

static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;
static dev_slot dev_slots[2][KN_DEV_MAX_ORDINAL]; /* [kn_device][ordinal] */

#ifdef KILN_HAVE_CUDA
/* The CUDA backend allocates on the thread's current device and a session's runs set it; these
 * calls make device_id current around an allocation or copy and put the caller's back. Declared
 * here rather than through cuda_runtime.h (the status is an int-sized enum). */
extern int cudaGetDevice(int *device);
extern int cudaSetDevice(int device);
static int device_enter(kn_device d, int id) {
    int prev = -1;
    if (d == KN_DEVICE_CUDA && cudaGetDevice(&prev) == 0 && prev != id) cudaSetDevice(id);
    return prev;
}
static void device_leave(kn_device d, int id, int prev) {
    if (d == KN_DEVICE_CUDA && prev >= 0 && prev != id) cudaSetDevice(prev);
}
#else
static int device_enter(kn_device d, int id) {
    (void)d;
    (void)id;
    return -1;
}
static void device_leave(kn_device d, int id, int prev) {
    (void)d;
    (void)id;
    (void)prev;
}
#endif

static const char *device_name(kiln_device_type d) { return d == KILN_DEVICE_CUDA ? "CUDA" : "host"; }

/* The per-process instance of the backend of device (d, id), made on first use. */
static kiln_status device_slot(const char *fn, kiln_device_type d, int id, dev_slot **out) {
    *out = NULL;
    if (d != KILN_DEVICE_CUDA)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: device type %d is not KILN_DEVICE_CUDA (1)", fn, (int)d);
    if (id < 0 || id >= KN_DEV_MAX_ORDINAL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: device_id %d is out of range (0..%d)", fn, id,
                        KN_DEV_MAX_ORDINAL - 1);
    const kn_backend_ops *ops = NULL;
    for (int i = 0; i < kn_backend_count(); i++) {
        const kn_backend_ops *b = kn_backend_at(i);
        if ((int)b->device == (int)d && b->new_tensor && b->copy && b->sync) {
            ops = b;
            break;
        }
    }
    if (!ops)
        return kn_error(KILN_ERR_NO_DEVICE, "%s: no %s device: this build of kiln has no %s backend", fn,
                        device_name(d), device_name(d));
    const char *why = NULL;
    if (!ops->available(&why))
        return kn_error(KILN_ERR_NO_DEVICE, "%s: no %s device: %s", fn, device_name(d), why ? why : "unavailable");
    size_t n = ops->device_count ? ops->device_count() : 0;
    if ((size_t)id >= n)
        return kn_error(KILN_ERR_NO_DEVICE, "%s: no %s device %d: %zu device%s present", fn, device_name(d), id, n,
                        n == 1 ? "" : "s");
    pthread_mutex_lock(&dev_mu);
    dev_slot *s = &dev_slots[d][id];
    kiln_status st = KILN_OK;
    if (!s->state) {
        kn_backend_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.device_id = id;
        cfg.precision = KN_PRECISION_FP32;
        cfg.graphs = 0;
        cfg.workspace_mb = 1; /* no kernels run here: the smallest scratch the backend takes */
        void *state = NULL;
        st = ops->init(&cfg, &state);
        if (st == KILN_OK) {
            s->ops = ops;
            s->state = state;
        }
    }
    pthread_mutex_unlock(&dev_mu);
    if (st != KILN_OK) return kn_error_prefix(st, "%s: ", fn);
    *out = s;
    return KILN_OK;
}

kiln_status kiln_tensor_create_device(kiln_dtype dtype, const int64_t *dims, int rank, kiln_device_type device,
                                      int device_id, kiln_tensor **out) {
    if (!out) return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_create_device: tensor_out is NULL");
    *out = NULL;
    if (device == KILN_DEVICE_HOST) return kiln_tensor_create(dtype, dims, rank, out);
    if (dtype <= KILN_DTYPE_UNDEFINED || dtype >= KILN_DTYPE_COUNT_)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_create_device: element type %d is not an ONNX type",
                        (int)dtype);
    if (dtype == KILN_DTYPE_STRING)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_tensor_create_device: string tensors cannot live in device memory");
    if (rank < 0 || rank > KILN_MAX_RANK)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_create_device: rank %d is out of range (0..%d)", rank,
                        KILN_MAX_RANK);
    if (rank > 0 && !dims) return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_create_device: dims is NULL");
    for (int i = 0; i < rank; i++)
        if (dims[i] < 0) {
            char d[256];
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_create_device: shape %s has a negative dim",
                            kn_dims_str(dims, rank, d, sizeof d));
        }
    dev_slot *s;
    KN_TRY(device_slot("kiln_tensor_create_device", device, device_id, &s));
    int prev = device_enter((kn_device)device, device_id);
    kiln_status st = s->ops->new_tensor(s->state, dtype, rank, dims, out);
    device_leave((kn_device)device, device_id, prev);
    if (st != KILN_OK) return kn_error_prefix(st, "kiln_tensor_create_device: ");
    (*out)->device_id = device_id;
    return KILN_OK;
}

static bool same_layout(const kn_tensor *a, const kn_tensor *b) {
    return a->dtype == b->dtype && a->rank == b->rank &&
           (a->rank == 0 || !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank)) && a->nbytes == b->nbytes;
}

kiln_status kiln_tensor_copy(const kiln_tensor *src, kiln_tensor *dst) {
    if (!src || !dst) return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_copy: %s is NULL", src ? "dst" : "src");
    char a[256], b[256];
    if (src->kind != KN_VALUE_TENSOR || dst->kind != KN_VALUE_TENSOR || src->dtype == KILN_DTYPE_STRING ||
        dst->dtype == KILN_DTYPE_STRING || !same_layout(src, dst))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_tensor_copy: cannot copy %s into %s (numeric tensors of one type and shape only)",
                        kn_tensor_describe(src, a, sizeof a), kn_tensor_describe(dst, b, sizeof b));
    if (src == dst || !src->nbytes) return KILN_OK;
    if (src->data == NULL || dst->data == NULL) return KN_INTERNAL("kiln_tensor_copy: a non-empty tensor without memory");
    bool src_host = src->device == KN_DEVICE_HOST, dst_host = dst->device == KN_DEVICE_HOST;
    if (src_host && dst_host) {
        memmove(dst->data, src->data, src->nbytes);
        return KILN_OK;
    }
    if (!src_host && !dst_host && (src->device != dst->device || src->device_id != dst->device_id)) {
        /* two devices: through the host */
        kn_tensor *h = NULL;
        KN_TRY(kn_tensor_new(src->dtype, src->rank, src->dims, &h));
        kiln_status st = kiln_tensor_copy(src, h);
        if (st == KILN_OK) st = kiln_tensor_copy(h, dst);
        kn_tensor_free(h);
        return st;
    }
    const kn_tensor *dev = src_host ? dst : src;
    dev_slot *s;
    KN_TRY(device_slot("kiln_tensor_copy", (kiln_device_type)dev->device, dev->device_id, &s));
    int prev = device_enter(dev->device, dev->device_id);
    kiln_status st = s->ops->copy(s->state, src, dst);
    if (st == KILN_OK) st = s->ops->sync(s->state);
    device_leave(dev->device, dev->device_id, prev);
    if (st != KILN_OK) return kn_error_prefix(st, "kiln_tensor_copy: ");
    return KILN_OK;
}

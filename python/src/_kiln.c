/* kiln._kiln: the CPython extension under the kiln Python package (python/kiln/__init__.py).
 *
 * Written against the limited API of CPython 3.9 (Py_LIMITED_API 0x03090000), so one build serves
 * every CPython from 3.9 on (an abi3 wheel). numpy is not used from C: the limited API of 3.9 has
 * no buffer protocol (PyObject_GetBuffer is limited-API only from 3.11) and numpy's C API is not
 * abi3-safe, so arrays cross the boundary through the array interface: the Python layer passes an
 * array's data pointer, dtype and shape (keeping the array alive for the call), and an output
 * comes back as a Tensor that owns the kiln_tensor and exposes __array_interface__, which
 * numpy.asarray turns into an array without a copy (the Tensor is the array's base). DLPack
 * capsules (PyCapsule is in the limited API) carry tensors both ways, host and CUDA.
 *
 * Nothing here may crash the interpreter on what a caller passes: every argument is checked and
 * every kiln failure becomes an exception of the class registered for its status. The GIL is
 * released while kiln compiles or runs. */
#include <Python.h>

#include "kiln.h"
#include "exec/session.h"
#include "ir/graph.h"
#include "ir/tensor.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ errors */

static PyObject *g_error_base;                    /* kiln.Error */
static PyObject *g_errors[KILN_STATUS_COUNT_];    /* one class per status, set by _set_errors */

static PyObject *error_class(kiln_status st) {
    if ((int)st > 0 && st < KILN_STATUS_COUNT_ && g_errors[st]) return g_errors[st];
    return g_error_base ? g_error_base : PyExc_RuntimeError;
}

/* Raises the exception of status st with the library's message; returns NULL. */
static PyObject *raise_status(kiln_status st, const char *msg) {
    if (!msg || !*msg) msg = kiln_status_name(st);
    PyErr_SetString(error_class(st), msg);
    return NULL;
}

static PyObject *raise_last(kiln_status st) { return raise_status(st, kiln_last_error()); }

static PyObject *raise_invalid(const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return raise_status(KILN_ERR_INVALID_ARGUMENT, buf);
}

/* _set_errors(base, {status: class}) */
static PyObject *py_set_errors(PyObject *self, PyObject *args) {
    PyObject *base, *map;
    if (!PyArg_ParseTuple(args, "OO!", &base, &PyDict_Type, &map)) return NULL;
    Py_XDECREF(g_error_base);
    Py_INCREF(base);
    g_error_base = base;
    for (int i = 1; i < KILN_STATUS_COUNT_; i++) {
        PyObject *key = PyLong_FromLong(i);
        if (!key) return NULL;
        PyObject *cls = PyDict_GetItem(map, key); /* borrowed */
        Py_DECREF(key);
        Py_XDECREF(g_errors[i]);
        g_errors[i] = cls;
        Py_XINCREF(cls);
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ small helpers */

/* UTF-8 of a str as a new malloc'ed string (the limited API of 3.9 has no PyUnicode_AsUTF8). */
static char *utf8_dup(PyObject *s, const char *what) {
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str", what);
        return NULL;
    }
    PyObject *b = PyUnicode_AsUTF8String(s);
    if (!b) return NULL;
    char *p = NULL;
    Py_ssize_t n = 0;
    if (PyBytes_AsStringAndSize(b, &p, &n) < 0) {
        Py_DECREF(b);
        return NULL;
    }
    char *out = malloc((size_t)n + 1);
    if (!out) {
        Py_DECREF(b);
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(out, p, (size_t)n);
    out[n] = 0;
    Py_DECREF(b);
    return out;
}

static void free_strings(char **v, Py_ssize_t n) {
    for (Py_ssize_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

/* A list/tuple of str as malloc'ed strings; *n_out its length. NULL with an exception on error
 * (and for an empty sequence, a valid 1-slot array). */
static char **utf8_list(PyObject *seq, Py_ssize_t *n_out, const char *what) {
    Py_ssize_t n = PySequence_Size(seq);
    if (n < 0) return NULL;
    char **v = calloc((size_t)n + 1, sizeof *v);
    if (!v) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_GetItem(seq, i);
        if (!it) {
            free_strings(v, n);
            return NULL;
        }
        v[i] = utf8_dup(it, what);
        Py_DECREF(it);
        if (!v[i]) {
            free_strings(v, n);
            return NULL;
        }
    }
    *n_out = n;
    return v;
}

/* A tuple/list of ints as dims; returns the rank or -1 with an exception. */
static int parse_dims(PyObject *shape, int64_t *dims) {
    Py_ssize_t r = PySequence_Size(shape);
    if (r < 0) return -1;
    if (r > KILN_MAX_RANK) {
        raise_invalid("rank %zd is more than kiln's maximum %d", r, KILN_MAX_RANK);
        return -1;
    }
    for (Py_ssize_t i = 0; i < r; i++) {
        PyObject *it = PySequence_GetItem(shape, i);
        if (!it) return -1;
        long long v = PyLong_AsLongLong(it);
        Py_DECREF(it);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (v < 0) {
            raise_invalid("negative dimension %lld", v);
            return -1;
        }
        dims[i] = v;
    }
    return (int)r;
}

/* ------------------------------------------------------------------ DLPack (ABI of dlpack.h) */

typedef struct { int32_t device_type, device_id; } DLDevice;
typedef struct { uint8_t code, bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
typedef struct { uint32_t major, minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13 };
enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLComplex = 5, kDLBool = 6 };

static kiln_dtype dl_to_kiln(DLDataType t) {
    if (t.lanes != 1) return KILN_DTYPE_UNDEFINED;
    switch (t.code) {
    case kDLInt:
        return t.bits == 8 ? KILN_DTYPE_INT8 : t.bits == 16 ? KILN_DTYPE_INT16 : t.bits == 32 ? KILN_DTYPE_INT32
             : t.bits == 64 ? KILN_DTYPE_INT64 : KILN_DTYPE_UNDEFINED;
    case kDLUInt:
        return t.bits == 8 ? KILN_DTYPE_UINT8 : t.bits == 16 ? KILN_DTYPE_UINT16 : t.bits == 32 ? KILN_DTYPE_UINT32
             : t.bits == 64 ? KILN_DTYPE_UINT64 : KILN_DTYPE_UNDEFINED;
    case kDLFloat:
        return t.bits == 16 ? KILN_DTYPE_FLOAT16 : t.bits == 32 ? KILN_DTYPE_FLOAT : t.bits == 64 ? KILN_DTYPE_DOUBLE
             : KILN_DTYPE_UNDEFINED;
    case kDLBfloat: return t.bits == 16 ? KILN_DTYPE_BFLOAT16 : KILN_DTYPE_UNDEFINED;
    case kDLComplex: return t.bits == 64 ? KILN_DTYPE_COMPLEX64 : t.bits == 128 ? KILN_DTYPE_COMPLEX128 : KILN_DTYPE_UNDEFINED;
    case kDLBool: return t.bits == 8 ? KILN_DTYPE_BOOL : KILN_DTYPE_UNDEFINED;
    default: return KILN_DTYPE_UNDEFINED;
    }
}

/* 0 when kiln's type has no DLPack equivalent (strings, packed and float8 types). */
static int kiln_to_dl(kiln_dtype d, DLDataType *t) {
    t->lanes = 1;
    switch (d) {
    case KILN_DTYPE_FLOAT: t->code = kDLFloat; t->bits = 32; return 1;
    case KILN_DTYPE_DOUBLE: t->code = kDLFloat; t->bits = 64; return 1;
    case KILN_DTYPE_FLOAT16: t->code = kDLFloat; t->bits = 16; return 1;
    case KILN_DTYPE_BFLOAT16: t->code = kDLBfloat; t->bits = 16; return 1;
    case KILN_DTYPE_INT8: t->code = kDLInt; t->bits = 8; return 1;
    case KILN_DTYPE_INT16: t->code = kDLInt; t->bits = 16; return 1;
    case KILN_DTYPE_INT32: t->code = kDLInt; t->bits = 32; return 1;
    case KILN_DTYPE_INT64: t->code = kDLInt; t->bits = 64; return 1;
    case KILN_DTYPE_UINT8: t->code = kDLUInt; t->bits = 8; return 1;
    case KILN_DTYPE_UINT16: t->code = kDLUInt; t->bits = 16; return 1;
    case KILN_DTYPE_UINT32: t->code = kDLUInt; t->bits = 32; return 1;
    case KILN_DTYPE_UINT64: t->code = kDLUInt; t->bits = 64; return 1;
    case KILN_DTYPE_BOOL: t->code = kDLBool; t->bits = 8; return 1;
    case KILN_DTYPE_COMPLEX64: t->code = kDLComplex; t->bits = 64; return 1;
    case KILN_DTYPE_COMPLEX128: t->code = kDLComplex; t->bits = 128; return 1;
    default: return 0;
    }
}

/* A DLPack capsule taken for the duration of a call: its deleter runs when the call is done. */
typedef struct dl_taken {
    DLManagedTensor *legacy;
    DLManagedTensorVersioned *versioned;
} dl_taken;

static void dl_release(dl_taken *d) {
    if (d->legacy && d->legacy->deleter) d->legacy->deleter(d->legacy);
    if (d->versioned && d->versioned->deleter) d->versioned->deleter(d->versioned);
    d->legacy = NULL;
    d->versioned = NULL;
}

/* Wraps the tensor of a "dltensor"/"dltensor_versioned" capsule without copying; the capsule is
 * marked used and *taken receives what to release after the call. */
static int dl_wrap(PyObject *cap, const char *what, kiln_tensor **out, dl_taken *taken) {
    DLTensor *t = NULL;
    int versioned = 0;
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        if (!m) return -1;
        t = &m->dl_tensor;
        taken->legacy = m;
    } else if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (!m) return -1;
        if (m->version.major > 1) {
            raise_invalid("%s: DLPack version %u.%u is newer than kiln reads (1.x)", what, m->version.major,
                          m->version.minor);
            return -1;
        }
        t = &m->dl_tensor;
        taken->versioned = m;
        versioned = 1;
    } else {
        raise_invalid("%s: not a DLPack capsule, or one already used", what);
        return -1;
    }
    /* from here the capsule is ours: its deleter runs in dl_release whatever happens */
    if (PyCapsule_SetName(cap, versioned ? "used_dltensor_versioned" : "used_dltensor") < 0) {
        taken->legacy = NULL;
        taken->versioned = NULL;
        return -1;
    }
    kiln_dtype dt = dl_to_kiln(t->dtype);
    if (dt == KILN_DTYPE_UNDEFINED) {
        raise_invalid("%s: DLPack type (code %u, %u bits, %u lanes) has no ONNX equivalent", what, t->dtype.code,
                      t->dtype.bits, t->dtype.lanes);
        return -1;
    }
    if (t->ndim < 0 || t->ndim > KILN_MAX_RANK) {
        raise_invalid("%s: rank %d is outside 0..%d", what, (int)t->ndim, KILN_MAX_RANK);
        return -1;
    }
    int64_t n = 1, expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] < 0) {
            raise_invalid("%s: negative dimension in a DLPack tensor", what);
            return -1;
        }
        if (t->strides && t->shape[i] != 1 && t->strides[i] != expect) {
            raise_invalid("%s: the DLPack tensor is not contiguous (dim %d has stride %lld, want %lld); "
                          "make it contiguous first", what, i, (long long)t->strides[i], (long long)expect);
            return -1;
        }
        expect *= t->shape[i];
        n *= t->shape[i];
    }
    size_t bytes = (size_t)n * (size_t)(t->dtype.bits / 8);
    void *data = (char *)t->data + t->byte_offset;
    kiln_status st;
    if (t->device.device_type == kDLCPU || t->device.device_type == kDLCUDAHost) {
        st = kiln_tensor_wrap(dt, t->shape, t->ndim, data, bytes, out);
    } else if (t->device.device_type == kDLCUDA || t->device.device_type == kDLCUDAManaged) {
        st = kiln_tensor_wrap_device(dt, t->shape, t->ndim, data, bytes, t->device.device_id, out);
    } else {
        raise_invalid("%s: DLPack device type %d is neither the CPU nor CUDA", what, (int)t->device.device_type);
        return -1;
    }
    if (st != KILN_OK) {
        raise_status(st, kiln_last_error());
        return -1;
    }
    return 0;
}

/* CUDA DLPack inputs are taken with stream=1: their producer orders the work that writes them
 * before CUDA's legacy default stream. kiln reads inputs on its own (non-blocking) stream, so the
 * host waits for that stream on each device before the run (called without the GIL). The module
 * holds the CUDA runtime kiln links statically; its three calls are declared here rather than
 * through cuda_runtime.h. */
#ifdef KILN_HAVE_CUDA
extern int cudaGetDevice(int *device);
extern int cudaSetDevice(int device);
extern int cudaStreamSynchronize(void *stream);
#define KILN_PY_CUDA_STREAM_LEGACY ((void *)0x1) /* cudaStreamLegacy */
static int sync_legacy_streams(unsigned devices) {
    int cur = 0, rc = 0;
    if (cudaGetDevice(&cur) != 0) return -1;
    for (int d = 0; d < 32; d++) {
        if (!(devices & (1u << d))) continue;
        if (cudaSetDevice(d) != 0 || cudaStreamSynchronize(KILN_PY_CUDA_STREAM_LEGACY) != 0) rc = -1;
    }
    cudaSetDevice(cur);
    return rc;
}
extern int cudaDeviceSynchronize(void);
/* synchronize(device_id): waits for all work on the CUDA device (IOBinding.synchronize_inputs) */
static PyObject *py_cuda_synchronize(PyObject *m, PyObject *arg) {
    long d = PyLong_AsLong(arg);
    if (d == -1 && PyErr_Occurred()) return NULL;
    if (!kiln_provider_available("cuda", NULL)) Py_RETURN_NONE;
    int rc = 0, cur = 0;
    Py_BEGIN_ALLOW_THREADS
    if (cudaGetDevice(&cur) != 0 || cudaSetDevice((int)d) != 0 || cudaDeviceSynchronize() != 0) rc = -1;
    cudaSetDevice(cur);
    Py_END_ALLOW_THREADS
    if (rc < 0) return raise_status(KILN_ERR_RUNTIME, "waiting for the CUDA device failed");
    Py_RETURN_NONE;
}
#else
static int sync_legacy_streams(unsigned devices) { return devices ? -1 : 0; }
static PyObject *py_cuda_synchronize(PyObject *m, PyObject *arg) { Py_RETURN_NONE; }
#endif

/* sync_legacy(device_id): waits for CUDA's legacy default stream on the device (where torch and
 * CuPy write by default), before a run reads caller pointers bound to it */
static PyObject *py_sync_legacy(PyObject *m, PyObject *arg) {
    long d = PyLong_AsLong(arg);
    if (d == -1 && PyErr_Occurred()) return NULL;
    if (d < 0 || d >= 32) return raise_invalid("device_id %ld is out of range", d);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sync_legacy_streams(1u << d);
    Py_END_ALLOW_THREADS
    if (rc < 0) return raise_status(KILN_ERR_RUNTIME, "waiting for the CUDA work that writes a bound input failed");
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ Tensor */

/* An owned kiln_tensor (a run's output, or a tensor made from Python). */
typedef struct {
    PyObject_HEAD
    kiln_tensor *t;
} TensorObject;

static PyObject *g_tensor_type;

static PyObject *tensor_new_owned(kiln_tensor *t) {
    TensorObject *o = PyObject_New(TensorObject, (PyTypeObject *)g_tensor_type);
    if (!o) {
        kiln_tensor_destroy(t);
        return NULL;
    }
    o->t = t;
    return (PyObject *)o;
}

static void tensor_dealloc(PyObject *self) {
    TensorObject *o = (TensorObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    kiln_tensor_destroy(o->t);
    o->t = NULL;
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static PyObject *tensor_get_dtype(PyObject *self, void *c) {
    return PyLong_FromLong(kiln_tensor_dtype(((TensorObject *)self)->t));
}

static PyObject *tensor_get_shape(PyObject *self, void *c) {
    kiln_tensor *t = ((TensorObject *)self)->t;
    int r = kiln_tensor_rank(t);
    const int64_t *d = kiln_tensor_dims(t);
    PyObject *tup = PyTuple_New(r);
    if (!tup) return NULL;
    for (int i = 0; i < r; i++) {
        PyObject *v = PyLong_FromLongLong(d[i]);
        if (!v) {
            Py_DECREF(tup);
            return NULL;
        }
        PyTuple_SetItem(tup, i, v);
    }
    return tup;
}

/* ("cpu"|"cuda", device_id) */
static PyObject *tensor_get_device(PyObject *self, void *c) {
    int id = 0;
    kiln_device_type d = kiln_tensor_device(((TensorObject *)self)->t, &id);
    return Py_BuildValue("(si)", d == KILN_DEVICE_CUDA ? "cuda" : "cpu", id);
}

static PyObject *tensor_get_data_ptr(PyObject *self, void *c) {
    return PyLong_FromVoidPtr(kiln_tensor_data(((TensorObject *)self)->t));
}

static PyObject *tensor_get_nbytes(PyObject *self, void *c) {
    return PyLong_FromSize_t(kiln_tensor_bytes(((TensorObject *)self)->t));
}

/* numpy's typestr of a kiln type, by its bytes (the Python layer views the 16-bit and 8-bit
 * float types as ml_dtypes' types where those are installed); NULL for none. */
static const char *typestr(kiln_dtype d) {
    switch (d) {
    case KILN_DTYPE_FLOAT: return "<f4";
    case KILN_DTYPE_DOUBLE: return "<f8";
    case KILN_DTYPE_FLOAT16: return "<f2";
    case KILN_DTYPE_INT8: return "|i1";
    case KILN_DTYPE_INT16: return "<i2";
    case KILN_DTYPE_INT32: return "<i4";
    case KILN_DTYPE_INT64: return "<i8";
    case KILN_DTYPE_UINT8: return "|u1";
    case KILN_DTYPE_UINT16: return "<u2";
    case KILN_DTYPE_UINT32: return "<u4";
    case KILN_DTYPE_UINT64: return "<u8";
    case KILN_DTYPE_BOOL: return "|b1";
    case KILN_DTYPE_COMPLEX64: return "<c8";
    case KILN_DTYPE_COMPLEX128: return "<c16";
    case KILN_DTYPE_BFLOAT16: return "<u2";
    case KILN_DTYPE_FLOAT8E4M3FN:
    case KILN_DTYPE_FLOAT8E4M3FNUZ:
    case KILN_DTYPE_FLOAT8E5M2:
    case KILN_DTYPE_FLOAT8E5M2FNUZ:
    case KILN_DTYPE_FLOAT8E8M0: return "|u1";
    default: return NULL;
    }
}

/* The array interface (version 3) of a host tensor of fixed-size elements; the packed sub-byte
 * types come out as their bytes (shape [nbytes]) for the Python layer to unpack. */
static PyObject *tensor_array_interface(PyObject *self, void *c) {
    kiln_tensor *t = ((TensorObject *)self)->t;
    if (kiln_tensor_device(t, NULL) != KILN_DEVICE_HOST) {
        PyErr_SetString(PyExc_AttributeError, "a CUDA tensor has no __array_interface__ (use DLPack)");
        return NULL;
    }
    kiln_dtype d = kiln_tensor_dtype(t);
    const char *ts = typestr(d);
    PyObject *shape;
    if (ts) {
        shape = tensor_get_shape(self, NULL);
    } else if (d != KILN_DTYPE_STRING && kiln_dtype_size(d) == 0) {
        ts = "|u1";
        shape = Py_BuildValue("(n)", (Py_ssize_t)kiln_tensor_bytes(t));
    } else {
        PyErr_SetString(PyExc_AttributeError, "this tensor's type has no numpy array interface");
        return NULL;
    }
    if (!shape) return NULL;
    void *data = kiln_tensor_data(t);
    static char dummy[16];
    if (!data) data = dummy; /* an empty tensor: numpy wants a non-NULL pointer */
    return Py_BuildValue("{s:N,s:s,s:(Ni),s:i}", "shape", shape, "typestr", ts, "data",
                         PyLong_FromVoidPtr(data), 0, "version", 3);
}

/* A STRING tensor's elements, flat, as a list of str. */
static PyObject *tensor_strings(PyObject *self, PyObject *unused) {
    kiln_tensor *t = ((TensorObject *)self)->t;
    if (kiln_tensor_dtype(t) != KILN_DTYPE_STRING) return raise_invalid("not a string tensor");
    int64_t n = kiln_tensor_element_count(t);
    char **s = kiln_tensor_data(t);
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list) return NULL;
    for (int64_t i = 0; i < n; i++) {
        const char *v = s[i] ? s[i] : "";
        PyObject *u = PyUnicode_DecodeUTF8(v, (Py_ssize_t)strlen(v), "surrogateescape");
        if (!u) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SetItem(list, (Py_ssize_t)i, u);
    }
    return list;
}

/* DLPack export: the capsule's tensor points into this Tensor, which it keeps alive. */
typedef struct dl_export {
    DLManagedTensor m;
    int64_t shape[KILN_MAX_RANK];
} dl_export;

static void dl_export_deleter(DLManagedTensor *m) {
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF((PyObject *)m->manager_ctx);
    free(m);
    PyGILState_Release(g);
}

static void dl_capsule_destructor(PyObject *cap) {
    if (!PyCapsule_IsValid(cap, "dltensor")) return; /* consumed: the consumer calls the deleter */
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
}

static PyObject *tensor_dlpack(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", kwlist, &stream, &max_version, &dl_device, &copy))
        return NULL;
    if (copy == Py_True) {
        PyErr_SetString(PyExc_BufferError, "kiln tensors are exported without a copy (copy=True is not supported)");
        return NULL;
    }
    kiln_tensor *t = ((TensorObject *)self)->t;
    DLDataType dt;
    if (!kiln_to_dl(kiln_tensor_dtype(t), &dt)) {
        PyErr_Format(PyExc_BufferError, "a tensor of type %s has no DLPack form", kiln_dtype_name(kiln_tensor_dtype(t)));
        return NULL;
    }
    int dev_id = 0;
    kiln_device_type dev = kiln_tensor_device(t, &dev_id);
    dl_export *e = calloc(1, sizeof *e);
    if (!e) return PyErr_NoMemory();
    int r = kiln_tensor_rank(t);
    memcpy(e->shape, kiln_tensor_dims(t), (size_t)r * sizeof(int64_t));
    e->m.dl_tensor.data = kiln_tensor_data(t);
    e->m.dl_tensor.device.device_type = dev == KILN_DEVICE_CUDA ? kDLCUDA : kDLCPU;
    e->m.dl_tensor.device.device_id = dev == KILN_DEVICE_CUDA ? dev_id : 0;
    e->m.dl_tensor.ndim = r;
    e->m.dl_tensor.dtype = dt;
    e->m.dl_tensor.shape = e->shape;
    e->m.dl_tensor.strides = NULL; /* row-major */
    e->m.manager_ctx = self;
    e->m.deleter = dl_export_deleter;
    Py_INCREF(self);
    PyObject *cap = PyCapsule_New(&e->m, "dltensor", dl_capsule_destructor);
    if (!cap) {
        Py_DECREF(self);
        free(e);
    }
    return cap;
}

static PyObject *tensor_dlpack_device(PyObject *self, PyObject *unused) {
    int id = 0;
    kiln_device_type d = kiln_tensor_device(((TensorObject *)self)->t, &id);
    return Py_BuildValue("(ii)", d == KILN_DEVICE_CUDA ? kDLCUDA : kDLCPU, d == KILN_DEVICE_CUDA ? id : 0);
}

/* Tensor.from_dlpack(capsule): a Tensor holding a copy of a host capsule's tensor (the capsule
 * is released at once), for OrtValue.from_dlpack. A CUDA capsule is refused: kiln has no
 * device copy here; pass the producer itself to run() instead. */
static PyObject *tensor_from_dlpack(PyObject *cls, PyObject *cap) {
    dl_taken taken = {0};
    kiln_tensor *view = NULL;
    if (dl_wrap(cap, "DLPack tensor", &view, &taken) < 0) {
        dl_release(&taken);
        return NULL;
    }
    if (kiln_tensor_device(view, NULL) != KILN_DEVICE_HOST) {
        kiln_tensor_destroy(view);
        dl_release(&taken);
        return raise_invalid("Tensor.from_dlpack copies host tensors only; pass a CUDA tensor to run() directly");
    }
    kiln_tensor *copy = NULL;
    kiln_status st = kiln_tensor_create(kiln_tensor_dtype(view), kiln_tensor_dims(view), kiln_tensor_rank(view), &copy);
    if (st == KILN_OK) memcpy(kiln_tensor_data(copy), kiln_tensor_data(view), kiln_tensor_bytes(view));
    else raise_last(st);
    kiln_tensor_destroy(view);
    dl_release(&taken);
    return st == KILN_OK ? tensor_new_owned(copy) : NULL;
}

static PyGetSetDef tensor_getset[] = {
    {"dtype", tensor_get_dtype, NULL, "element type (ONNX TensorProto number)", NULL},
    {"shape", tensor_get_shape, NULL, "dims", NULL},
    {"device", tensor_get_device, NULL, "(device, device_id)", NULL},
    {"data_ptr", tensor_get_data_ptr, NULL, "address of the elements", NULL},
    {"nbytes", tensor_get_nbytes, NULL, "bytes of the elements", NULL},
    {"__array_interface__", tensor_array_interface, NULL, "numpy's array interface (host tensors)", NULL},
    {NULL},
};

static PyMethodDef tensor_methods[] = {
    {"strings", tensor_strings, METH_NOARGS, "a string tensor's elements, flat"},
    {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_VARARGS | METH_KEYWORDS, "DLPack capsule"},
    {"__dlpack_device__", tensor_dlpack_device, METH_NOARGS, "(device type, id)"},
    {"from_dlpack", tensor_from_dlpack, METH_O | METH_CLASS, "copy of a host DLPack capsule"},
    {NULL},
};

static PyType_Slot tensor_slots[] = {
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_getset, tensor_getset},
    {Py_tp_methods, tensor_methods},
    {Py_tp_doc, "A kiln tensor (owned); numpy.asarray() views a host one without a copy."},
    {0, NULL},
};

static PyType_Spec tensor_spec = {"kiln._kiln.Tensor", sizeof(TensorObject), 0, Py_TPFLAGS_DEFAULT, tensor_slots};

/* ------------------------------------------------------------------ value specs -> kiln tensors */

/* What a call made from its Python arguments: tensors to destroy, capsules to release. */
typedef struct call_inputs {
    kiln_tensor **owned;
    size_t n_owned, cap_owned;
    dl_taken *dl;
    size_t n_dl, cap_dl;
    unsigned cuda_devices; /* bit d: a DLPack input lies on CUDA device d (d < 32) */
} call_inputs;

static int keep_owned(call_inputs *c, kiln_tensor *t) {
    if (c->n_owned == c->cap_owned) {
        size_t cap = c->cap_owned ? 2 * c->cap_owned : 8;
        kiln_tensor **p = realloc(c->owned, cap * sizeof *p);
        if (!p) {
            kiln_tensor_destroy(t);
            PyErr_NoMemory();
            return -1;
        }
        c->owned = p;
        c->cap_owned = cap;
    }
    c->owned[c->n_owned++] = t;
    return 0;
}

static dl_taken *new_dl(call_inputs *c) {
    if (c->n_dl == c->cap_dl) {
        size_t cap = c->cap_dl ? 2 * c->cap_dl : 4;
        dl_taken *p = realloc(c->dl, cap * sizeof *p);
        if (!p) {
            PyErr_NoMemory();
            return NULL;
        }
        c->dl = p;
        c->cap_dl = cap;
    }
    memset(&c->dl[c->n_dl], 0, sizeof *c->dl);
    return &c->dl[c->n_dl++];
}

static void call_inputs_free(call_inputs *c) {
    for (size_t i = 0; i < c->n_owned; i++) kiln_tensor_destroy(c->owned[i]);
    for (size_t i = 0; i < c->n_dl; i++) dl_release(&c->dl[i]);
    free(c->owned);
    free(c->dl);
    memset(c, 0, sizeof *c);
}

/* Builds the kiln tensor of one value spec; *out is borrowed (kept in c, or a Tensor's), or with
 * standalone != 0 a new tensor the caller owns (items of a sequence/optional).
 *   Tensor                                  a kiln tensor (borrowed)
 *   ("a", dtype, shape, ptr, nbytes)        host memory (borrowed; the caller keeps it alive)
 *   ("d", dtype, shape, ptr, nbytes, dev)   CUDA memory
 *   ("s", shape, [str, ...])                a string tensor (copied)
 *   ("q", elem_dtype, [spec, ...])          a sequence
 *   ("o", elem_dtype, spec | None)          an optional
 *   a DLPack capsule                        host or CUDA memory (no copy) */
static int make_value(PyObject *spec, const char *what, call_inputs *c, int standalone, kiln_tensor **out) {
    *out = NULL;
    if (PyObject_TypeCheck(spec, (PyTypeObject *)g_tensor_type)) {
        if (standalone) {
            raise_invalid("%s: a kiln Tensor cannot be an item of a sequence or optional", what);
            return -1;
        }
        *out = ((TensorObject *)spec)->t;
        return 0;
    }
    if (PyCapsule_CheckExact(spec)) {
        if (standalone) {
            raise_invalid("%s: a DLPack tensor cannot be an item of a sequence or optional", what);
            return -1;
        }
        dl_taken *d = new_dl(c);
        if (!d) return -1;
        kiln_tensor *t = NULL;
        if (dl_wrap(spec, what, &t, d) < 0) return -1;
        int dev = 0;
        if (kiln_tensor_device(t, &dev) == KILN_DEVICE_CUDA && dev >= 0 && dev < 32) c->cuda_devices |= 1u << dev;
        if (keep_owned(c, t) < 0) return -1;
        *out = t;
        return 0;
    }
    if (!PyTuple_Check(spec) || PyTuple_Size(spec) < 2) {
        PyErr_Format(PyExc_TypeError, "%s: bad value spec", what);
        return -1;
    }
    PyObject *kind_o = PyTuple_GetItem(spec, 0);
    char *kind = utf8_dup(kind_o, "value kind");
    if (!kind) return -1;
    char k = kind[0];
    free(kind);
    kiln_tensor *t = NULL;
    kiln_status st = KILN_OK;
    int64_t dims[KILN_MAX_RANK];
    if (k == 'a' || k == 'd') {
        int dtype, dev = 0;
        PyObject *shape, *ptr_o;
        Py_ssize_t nbytes;
        if (k == 'a' && !PyArg_ParseTuple(spec, "siOOn", &kind, &dtype, &shape, &ptr_o, &nbytes)) return -1;
        if (k == 'd' && !PyArg_ParseTuple(spec, "siOOni", &kind, &dtype, &shape, &ptr_o, &nbytes, &dev)) return -1;
        int rank = parse_dims(shape, dims);
        if (rank < 0) return -1;
        void *ptr = PyLong_AsVoidPtr(ptr_o);
        if (!ptr && PyErr_Occurred()) return -1;
        if (nbytes < 0) {
            raise_invalid("%s: negative byte count", what);
            return -1;
        }
        if (dtype <= 0 || dtype >= KILN_DTYPE_COUNT_ || dtype == KILN_DTYPE_STRING) {
            raise_invalid("%s: element type %d is not a numeric ONNX type", what, dtype);
            return -1;
        }
        static char empty[16];
        if (!ptr && nbytes == 0 && k == 'a') ptr = empty;
        if (k == 'a') st = kiln_tensor_wrap((kiln_dtype)dtype, dims, rank, ptr, (size_t)nbytes, &t);
        else st = kiln_tensor_wrap_device((kiln_dtype)dtype, dims, rank, ptr, (size_t)nbytes, dev, &t);
        /* a caller's CUDA pointer (IOBinding.bind_input, a torch tensor's data_ptr()) is written by
         * work on the legacy default stream as a DLPack input is: the run waits for it the same way */
        if (k == 'd' && st == KILN_OK && dev >= 0 && dev < 32) c->cuda_devices |= 1u << dev;
    } else if (k == 's') {
        PyObject *shape, *items;
        if (!PyArg_ParseTuple(spec, "sOO", &kind, &shape, &items)) return -1;
        int rank = parse_dims(shape, dims);
        if (rank < 0) return -1;
        Py_ssize_t n = 0;
        char **strs = utf8_list(items, &n, "a string element");
        if (!strs) return -1;
        st = kiln_tensor_create(KILN_DTYPE_STRING, dims, rank, &t);
        if (st == KILN_OK && kiln_tensor_element_count(t) != n) {
            kiln_tensor_destroy(t);
            free_strings(strs, n);
            raise_invalid("%s: %zd strings for %lld elements", what, n, (long long)kiln_tensor_element_count(t));
            return -1;
        }
        if (st == KILN_OK) { /* the tensor owns its strings (malloc'ed, freed on destroy) */
            char **d = kiln_tensor_data(t);
            for (Py_ssize_t i = 0; i < n; i++) {
                free(d[i]);
                d[i] = strs[i];
                strs[i] = NULL;
            }
        }
        free_strings(strs, n);
    } else if (k == 'q' || k == 'o') {
        int elem;
        PyObject *items;
        if (!PyArg_ParseTuple(spec, "siO", &kind, &elem, &items)) return -1;
        if (elem < 0 || elem >= KILN_DTYPE_COUNT_) {
            raise_invalid("%s: bad element type %d", what, elem);
            return -1;
        }
        if (k == 'o') {
            kiln_tensor *item = NULL;
            if (items != Py_None && make_value(items, what, c, 1, &item) < 0) return -1;
            st = kn_tensor_new_optional((kiln_dtype)elem, item, &t);
        } else {
            Py_ssize_t n = PySequence_Size(items);
            if (n < 0) return -1;
            st = kn_tensor_new_sequence((kiln_dtype)elem, &t);
            for (Py_ssize_t i = 0; st == KILN_OK && i < n; i++) {
                PyObject *it = PySequence_GetItem(items, i);
                if (!it) {
                    kiln_tensor_destroy(t);
                    return -1;
                }
                kiln_tensor *item = NULL;
                int rc = make_value(it, what, c, 1, &item);
                Py_DECREF(it);
                if (rc < 0) {
                    kiln_tensor_destroy(t);
                    return -1;
                }
                st = kn_sequence_append(t, item);
                if (st != KILN_OK) kiln_tensor_destroy(item);
            }
            if (st != KILN_OK) {
                kiln_tensor_destroy(t);
                t = NULL;
            }
        }
    } else {
        PyErr_Format(PyExc_TypeError, "%s: bad value spec kind", what);
        return -1;
    }
    if (st != KILN_OK) {
        raise_last(st);
        return -1;
    }
    if (standalone) {
        *out = t;
        return 0;
    }
    if (keep_owned(c, t) < 0) return -1;
    *out = t;
    return 0;
}

/* A run's output as Python: a Tensor, a list (sequence) or None (empty optional). Takes t. */
static PyObject *to_python(kiln_tensor *t) {
    if (!t) Py_RETURN_NONE;
    if (t->kind == KN_VALUE_TENSOR) return tensor_new_owned(t);
    if (t->kind == KN_VALUE_OPTIONAL) {
        kiln_tensor *item = t->n_items ? t->items[0] : NULL;
        if (t->n_items) t->items[0] = NULL;
        t->n_items = 0;
        kiln_tensor_destroy(t);
        return to_python(item);
    }
    /* sequence: the items move into Python one by one */
    PyObject *list = PyList_New(t->n_items);
    if (!list) {
        kiln_tensor_destroy(t);
        return NULL;
    }
    for (int i = 0; i < t->n_items; i++) {
        kiln_tensor *item = t->items[i];
        t->items[i] = NULL;
        PyObject *o = to_python(item);
        if (!o) {
            Py_DECREF(list);
            kiln_tensor_destroy(t);
            return NULL;
        }
        PyList_SetItem(list, i, o);
    }
    kiln_tensor_destroy(t);
    return list;
}

/* ------------------------------------------------------------------ RunOptions */

#ifdef KILN_PY_RUN_OPTIONS
typedef struct {
    PyObject_HEAD
    kiln_run_options *o;
} RunOptionsObject;

static PyObject *g_run_options_type;

static PyObject *run_options_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    if (!PyArg_ParseTuple(args, "")) return NULL;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    RunOptionsObject *self = (RunOptionsObject *)alloc(type, 0);
    if (!self) return NULL;
    kiln_status st = kiln_run_options_create(&self->o);
    if (st != KILN_OK) {
        Py_DECREF(self);
        return raise_last(st);
    }
    return (PyObject *)self;
}

static void run_options_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    kiln_run_options_destroy(((RunOptionsObject *)self)->o);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static PyObject *run_options_set_terminate(PyObject *self, PyObject *arg) {
    int v = PyObject_IsTrue(arg);
    if (v < 0) return NULL;
    kiln_status st = kiln_run_options_set_terminate(((RunOptionsObject *)self)->o, v);
    if (st != KILN_OK) return raise_last(st);
    Py_RETURN_NONE;
}

static PyObject *run_options_set_timeout_ms(PyObject *self, PyObject *arg) {
    long long v = PyLong_AsLongLong(arg);
    if (v == -1 && PyErr_Occurred()) return NULL;
    kiln_status st = kiln_run_options_set_timeout_ms(((RunOptionsObject *)self)->o, v);
    if (st != KILN_OK) return raise_last(st);
    Py_RETURN_NONE;
}

static PyMethodDef run_options_methods[] = {
    {"set_terminate", run_options_set_terminate, METH_O, "stop every run using these options"},
    {"set_timeout_ms", run_options_set_timeout_ms, METH_O, "a run's time limit (0: none)"},
    {NULL},
};

static PyType_Slot run_options_slots[] = {
    {Py_tp_new, run_options_new},
    {Py_tp_dealloc, run_options_dealloc},
    {Py_tp_methods, run_options_methods},
    {0, NULL},
};

static PyType_Spec run_options_spec = {"kiln._kiln.RunOptions", sizeof(RunOptionsObject), 0,
                                       Py_TPFLAGS_DEFAULT, run_options_slots};
#endif

/* The kiln_run_options of a run call's argument (None or a _kiln.RunOptions); 0 or -1. */
static int get_run_options(PyObject *o, const void **out) {
    *out = NULL;
    if (o == Py_None) return 0;
#ifdef KILN_PY_RUN_OPTIONS
    if (PyObject_TypeCheck(o, (PyTypeObject *)g_run_options_type)) {
        *out = ((RunOptionsObject *)o)->o;
        return 0;
    }
#endif
    PyErr_SetString(PyExc_TypeError, "run options must be a kiln._kiln.RunOptions or None");
    return -1;
}

/* ------------------------------------------------------------------ Session */

typedef struct {
    PyObject_HEAD
    kiln_session *s;
    /* One run at a time per session, where the library refuses a second concurrent run on a
     * session (before kiln_session_options_set_max_concurrent_runs): the Python threads take
     * turns instead of failing. NULL where the library runs concurrent calls itself. */
    PyThread_type_lock lock;
} SessionObject;

/* Session(source, base_dir, providers, opt_level, threads, log_level, dump_path, cache_enabled,
 *         cache_dir, dims, disabled_passes, output_device, save_path, load_path)
 * source: str (a path) or bytes (the model); providers: [(name, [(key, value), ...]), ...];
 * dims: [(name, value), ...]. */
static PyObject *session_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"source", "base_dir", "providers", "opt_level", "threads", "log_level", "dump_path",
                             "cache_enabled", "cache_dir", "dims", "disabled_passes", "output_device",
                             "save_path", "load_path", NULL};
    PyObject *source, *base_dir = Py_None, *providers = Py_None, *dump = Py_None, *cache_dir = Py_None;
    PyObject *dims = Py_None, *disabled = Py_None, *save = Py_None, *load = Py_None;
    int opt_level = 3, threads = 0, log_level = KILN_LOG_WARNING, cache_enabled = 1, output_device = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOiiiOiOOOiOO", kwlist, &source, &base_dir, &providers, &opt_level,
                                     &threads, &log_level, &dump, &cache_enabled, &cache_dir, &dims, &disabled,
                                     &output_device, &save, &load))
        return NULL;
    if (!PyUnicode_Check(source) && !PyBytes_Check(source)) {
        PyErr_SetString(PyExc_TypeError, "the model must be a path (str) or its bytes");
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    SessionObject *self = (SessionObject *)alloc(type, 0);
    if (!self) return NULL;
#ifndef KILN_PY_CONCURRENT_RUNS
    self->lock = PyThread_allocate_lock();
    if (!self->lock) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
#endif

    kiln_session_options *opts = NULL;
    char *path = NULL, *base = NULL, *tmp = NULL;
    PyObject *result = NULL;
    kiln_status st = kiln_session_options_create(&opts);
    if (st != KILN_OK) {
        raise_last(st);
        goto done;
    }
#define CHECK(call)                                                                                               \
    do {                                                                                                          \
        kiln_status st_ = (call);                                                                                 \
        if (st_ != KILN_OK) {                                                                                     \
            raise_last(st_);                                                                                      \
            goto done;                                                                                            \
        }                                                                                                         \
    } while (0)
    if (providers != Py_None) {
        Py_ssize_t np = PySequence_Size(providers);
        if (np < 0) goto done;
        for (Py_ssize_t i = 0; i < np; i++) {
            PyObject *p = PySequence_GetItem(providers, i), *name_o = NULL, *kv = NULL;
            if (!p) goto done;
            if (!PyArg_ParseTuple(p, "OO", &name_o, &kv)) {
                Py_DECREF(p);
                goto done;
            }
            char *name = utf8_dup(name_o, "a provider name");
            Py_ssize_t n = PySequence_Size(kv);
            char **keys = NULL, **values = NULL;
            int ok = name && n >= 0;
            if (ok) {
                keys = calloc((size_t)n + 1, sizeof *keys);
                values = calloc((size_t)n + 1, sizeof *values);
                ok = keys && values;
                if (!ok) PyErr_NoMemory();
            }
            for (Py_ssize_t j = 0; ok && j < n; j++) {
                PyObject *pair = PySequence_GetItem(kv, j), *k = NULL, *v = NULL;
                ok = pair && PyArg_ParseTuple(pair, "OO", &k, &v);
                if (ok) keys[j] = utf8_dup(k, "a provider option key");
                if (ok && keys[j]) values[j] = utf8_dup(v, "a provider option value");
                ok = ok && keys[j] && values[j];
                Py_XDECREF(pair);
            }
            if (ok) {
                st = kiln_session_options_append_provider(opts, name, (const char *const *)keys,
                                                          (const char *const *)values, (size_t)n);
                if (st != KILN_OK) raise_last(st);
                ok = st == KILN_OK;
            }
            free(name);
            free_strings(keys, n > 0 ? n : 0);
            free_strings(values, n > 0 ? n : 0);
            Py_DECREF(p);
            if (!ok) goto done;
        }
    }
    CHECK(kiln_session_options_set_opt_level(opts, opt_level));
    CHECK(kiln_session_options_set_intra_op_threads(opts, threads));
    CHECK(kiln_session_options_set_log_level(opts, (kiln_log_level)log_level));
    if (dump != Py_None) {
        if (!(tmp = utf8_dup(dump, "optimized_model_filepath"))) goto done;
        CHECK(kiln_session_options_set_dump_path(opts, tmp));
        free(tmp);
        tmp = NULL;
    }
    if (cache_dir != Py_None && !(tmp = utf8_dup(cache_dir, "the cache directory"))) goto done;
    CHECK(kiln_session_options_set_cache(opts, cache_enabled, tmp));
    free(tmp);
    tmp = NULL;
    if (save != Py_None || load != Py_None) {
        char *sp = save != Py_None ? utf8_dup(save, "the compiled save path") : NULL;
        char *lp = load != Py_None ? utf8_dup(load, "the compiled load path") : NULL;
        if ((save != Py_None && !sp) || (load != Py_None && !lp)) {
            free(sp);
            free(lp);
            goto done;
        }
        st = kiln_session_options_set_compiled_paths(opts, sp, lp);
        free(sp);
        free(lp);
        CHECK(st);
    }
    if (dims != Py_None) {
        Py_ssize_t n = PySequence_Size(dims);
        if (n < 0) goto done;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *pair = PySequence_GetItem(dims, i), *name_o = NULL;
            long long v = 0;
            if (!pair) goto done;
            int ok = PyArg_ParseTuple(pair, "OL", &name_o, &v);
            Py_DECREF(pair);
            if (!ok || !(tmp = utf8_dup(name_o, "a dimension name"))) goto done;
            CHECK(kiln_session_options_set_dim(opts, tmp, v));
            free(tmp);
            tmp = NULL;
        }
    }
    if (disabled != Py_None) {
        Py_ssize_t n = 0;
        char **names = utf8_list(disabled, &n, "a pass name");
        if (!names) goto done;
        for (Py_ssize_t i = 0; i < n && st == KILN_OK; i++) st = kiln_session_options_disable_pass(opts, names[i]);
        free_strings(names, n);
        CHECK(st);
    }
    if (output_device) CHECK(kiln_session_options_set_output_device(opts, KILN_DEVICE_CUDA));

    if (base_dir != Py_None && !(base = utf8_dup(base_dir, "base_dir"))) goto done;
    kiln_session *s = NULL;
    const char *msg = NULL;
    if (PyUnicode_Check(source)) {
        if (!(path = utf8_dup(source, "the model path"))) goto done;
        Py_BEGIN_ALLOW_THREADS
        st = kiln_session_create(path, opts, &s);
        if (st != KILN_OK) msg = kiln_last_error();
        Py_END_ALLOW_THREADS
    } else {
        char *data = NULL;
        Py_ssize_t size = 0;
        if (PyBytes_AsStringAndSize(source, &data, &size) < 0) goto done;
        Py_INCREF(source); /* the bytes stay alive while the GIL is released */
        Py_BEGIN_ALLOW_THREADS
        st = kiln_session_create_from_memory(data, (size_t)size, base, opts, &s);
        if (st != KILN_OK) msg = kiln_last_error();
        Py_END_ALLOW_THREADS
        Py_DECREF(source);
    }
    if (st != KILN_OK) {
        raise_status(st, msg);
        goto done;
    }
    self->s = s;
    result = (PyObject *)self;
    self = NULL;
#undef CHECK
done:
    free(path);
    free(base);
    free(tmp);
    kiln_session_options_destroy(opts);
    Py_XDECREF(self);
    return result;
}

static void session_dealloc(PyObject *self) {
    SessionObject *o = (SessionObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    if (o->s) {
        kiln_session *s = o->s;
        o->s = NULL;
        Py_BEGIN_ALLOW_THREADS
        kiln_session_destroy(s);
        Py_END_ALLOW_THREADS
    }
    if (o->lock) PyThread_free_lock(o->lock);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static const char *type_kind_name(kn_type_kind k) {
    switch (k) {
    case KN_TYPE_SEQUENCE: return "seq";
    case KN_TYPE_OPTIONAL: return "optional";
    case KN_TYPE_MAP: return "map";
    default: return NULL;
    }
}

/* ONNX Runtime's type string: tensor(float), seq(tensor(int64)), optional(seq(tensor(float))) */
static void type_string(const kn_type *t, char *buf, size_t cap) {
    const char *dt = t->dtype ? kiln_dtype_name(t->dtype) : "undefined";
    if (t->kind == KN_TYPE_SEQUENCE) snprintf(buf, cap, "seq(tensor(%s))", dt);
    else if (t->kind == KN_TYPE_OPTIONAL && t->elem_kind == KN_TYPE_SEQUENCE) snprintf(buf, cap, "optional(seq(tensor(%s)))", dt);
    else if (t->kind == KN_TYPE_OPTIONAL) snprintf(buf, cap, "optional(tensor(%s))", dt);
    else if (t->kind == KN_TYPE_MAP) snprintf(buf, cap, "map(?,tensor(%s))", dt);
    else snprintf(buf, cap, "tensor(%s)", dt);
}

/* [(name, type string, kind, dtype, shape)] where shape lists ints, symbol names (str) or None */
static PyObject *session_io(SessionObject *self, int outputs) {
    if (!self->s) return raise_status(KILN_ERR_INVALID_ARGUMENT, "the session is closed");
    size_t n = outputs ? kiln_session_output_count(self->s) : kiln_session_input_count(self->s);
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list) return NULL;
    for (size_t i = 0; i < n; i++) {
        kiln_value_info info;
        kiln_status st = outputs ? kiln_session_output_info(self->s, i, &info) : kiln_session_input_info(self->s, i, &info);
        if (st != KILN_OK) {
            Py_DECREF(list);
            return raise_last(st);
        }
        const kn_graph *g = self->s->model->graph;
        int v = outputs ? g->outputs[i] : g->inputs[i];
        const kn_type *ty = &g->values[v].type;
        char ts[128];
        type_string(ty, ts, sizeof ts);
        PyObject *shape;
        if (info.rank < 0) {
            shape = Py_None;
            Py_INCREF(shape);
        } else {
            shape = PyList_New(info.rank);
            for (int d = 0; shape && d < info.rank; d++) {
                PyObject *dim;
                if (info.dims[d] >= 0) dim = PyLong_FromLongLong(info.dims[d]);
                else if (info.dim_names && info.dim_names[d]) dim = PyUnicode_FromString(info.dim_names[d]);
                else {
                    dim = Py_None;
                    Py_INCREF(dim);
                }
                if (!dim) {
                    Py_CLEAR(shape);
                    break;
                }
                PyList_SetItem(shape, d, dim);
            }
        }
        const char *kind = type_kind_name(ty->kind);
        PyObject *item = shape ? Py_BuildValue("(ssziN)", info.name, ts, kind, (int)info.dtype, shape) : NULL;
        if (!item) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SetItem(list, (Py_ssize_t)i, item);
    }
    return list;
}

/* (producer_name, graph_name, domain, description, version) of the model */
static PyObject *session_meta(PyObject *self_o, PyObject *unused) {
    SessionObject *self = (SessionObject *)self_o;
    if (!self->s) return raise_status(KILN_ERR_INVALID_ARGUMENT, "the session is closed");
    const kn_model *m = self->s->model;
    const char *graph = m && m->graph && m->graph->name ? m->graph->name : "";
    return Py_BuildValue("(ssssL)", m && m->producer_name ? m->producer_name : "", graph,
                         m && m->model_domain ? m->model_domain : "", m && m->doc ? m->doc : "",
                         (long long)(m ? m->model_version : 0));
}

/* [(name, [(key, value), ...])]: the providers the session runs on, with their options */
static PyObject *session_providers(PyObject *self_o, PyObject *unused) {
    SessionObject *self = (SessionObject *)self_o;
    if (!self->s) return raise_status(KILN_ERR_INVALID_ARGUMENT, "the session is closed");
    size_t n = kiln_session_provider_count(self->s);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        const char *name;
        size_t n_opts;
        const char *const *keys, *const *values;
        kiln_status st = kiln_session_provider(self->s, i, &name, &n_opts, &keys, &values);
        if (st != KILN_OK) {
            raise_last(st);
            Py_CLEAR(list);
            break;
        }
        PyObject *opts = PyList_New((Py_ssize_t)n_opts);
        for (size_t k = 0; opts && k < n_opts; k++) {
            PyObject *kv = Py_BuildValue("(ss)", keys[k], values[k]);
            if (!kv) Py_CLEAR(opts);
            else PyList_SetItem(opts, (Py_ssize_t)k, kv);
        }
        PyObject *item = opts ? Py_BuildValue("(sN)", name, opts) : NULL;
        if (!item) {
            Py_CLEAR(list);
            break;
        }
        PyList_SetItem(list, (Py_ssize_t)i, item);
    }
    return list;
}

static PyObject *session_inputs(PyObject *self, PyObject *unused) { return session_io((SessionObject *)self, 0); }
static PyObject *session_outputs(PyObject *self, PyObject *unused) { return session_io((SessionObject *)self, 1); }

/* The inputs of a run call: names and kiln tensors (borrowed, or kept in c). */
static int run_inputs(PyObject *names_o, PyObject *values_o, call_inputs *c, char ***names, kiln_tensor ***values,
                      Py_ssize_t *n) {
    *names = utf8_list(names_o, n, "an input name");
    if (!*names) return -1;
    Py_ssize_t nv = PySequence_Size(values_o);
    if (nv < 0) return -1;
    if (nv != *n) {
        raise_invalid("%zd input names for %zd values", *n, nv);
        return -1;
    }
    *values = calloc((size_t)*n + 1, sizeof **values);
    if (!*values) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *v = PySequence_GetItem(values_o, i);
        if (!v) return -1;
        char what[300];
        snprintf(what, sizeof what, "input '%s'", (*names)[i]);
        int rc = make_value(v, what, c, 0, &(*values)[i]);
        Py_DECREF(v);
        if (rc < 0) return -1;
    }
    return 0;
}

/* run(input_names, input_values, output_names or None, run_options or None) -> [output, ...] */
static PyObject *session_run(PyObject *self_o, PyObject *args) {
    SessionObject *self = (SessionObject *)self_o;
    PyObject *in_names_o, *in_values_o, *out_names_o, *ro_o = Py_None;
    if (!PyArg_ParseTuple(args, "OOO|O", &in_names_o, &in_values_o, &out_names_o, &ro_o)) return NULL;
    if (!self->s) return raise_status(KILN_ERR_INVALID_ARGUMENT, "the session is closed");
    const void *ro = NULL;
    if (get_run_options(ro_o, &ro) < 0) return NULL;
    call_inputs c = {0};
    char **in_names = NULL, **out_names = NULL;
    kiln_tensor **in_values = NULL, **outs = NULL;
    Py_ssize_t n_in = 0, n_out = 0;
    PyObject *result = NULL;
    if (run_inputs(in_names_o, in_values_o, &c, &in_names, &in_values, &n_in) < 0) goto done;
    if (out_names_o == Py_None) {
        n_out = (Py_ssize_t)kiln_session_output_count(self->s);
    } else if (!(out_names = utf8_list(out_names_o, &n_out, "an output name"))) {
        goto done;
    }
    outs = calloc((size_t)n_out + 1, sizeof *outs);
    if (!outs) {
        PyErr_NoMemory();
        goto done;
    }
    kiln_status st;
    const char *msg = NULL;
    int synced = 0;
    Py_BEGIN_ALLOW_THREADS
    synced = c.cuda_devices ? sync_legacy_streams(c.cuda_devices) : 0;
    Py_END_ALLOW_THREADS
    if (synced < 0) {
        raise_status(KILN_ERR_RUNTIME, "waiting for the CUDA work that writes a DLPack input failed");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    if (self->lock) PyThread_acquire_lock(self->lock, WAIT_LOCK);
#ifdef KILN_PY_RUN_OPTIONS
    st = kiln_session_run_with(self->s, (const kiln_run_options *)ro, (const char *const *)in_names, in_values,
                               (size_t)n_in, (const char *const *)out_names, (size_t)n_out, outs);
#else
    st = kiln_session_run(self->s, (const char *const *)in_names, in_values, (size_t)n_in,
                          (const char *const *)out_names, (size_t)n_out, outs);
#endif
    if (st != KILN_OK) msg = kiln_last_error();
    if (self->lock) PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    if (st != KILN_OK) {
        raise_status(st, msg);
        goto done;
    }
    result = PyList_New(n_out);
    if (!result) goto done;
    for (Py_ssize_t i = 0; i < n_out; i++) {
        PyObject *o = to_python(outs[i]);
        outs[i] = NULL;
        if (!o) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SetItem(result, i, o);
    }
done:
    for (Py_ssize_t i = 0; outs && i < n_out; i++) kiln_tensor_destroy(outs[i]);
    free(outs);
    free_strings(in_names, n_in);
    free_strings(out_names, n_out);
    free(in_values);
    call_inputs_free(&c);
    return result;
}

/* run_into(input_names, input_values, output_names, output_values, run_options or None): the
 * outputs are written into the given tensors (host or CUDA specs, Tensors, DLPack capsules). */
static PyObject *session_run_into(PyObject *self_o, PyObject *args) {
    SessionObject *self = (SessionObject *)self_o;
    PyObject *in_names_o, *in_values_o, *out_names_o, *out_values_o, *ro_o = Py_None;
    if (!PyArg_ParseTuple(args, "OOOO|O", &in_names_o, &in_values_o, &out_names_o, &out_values_o, &ro_o)) return NULL;
    if (!self->s) return raise_status(KILN_ERR_INVALID_ARGUMENT, "the session is closed");
    const void *ro = NULL;
    if (get_run_options(ro_o, &ro) < 0) return NULL;
    call_inputs c = {0};
    char **in_names = NULL, **out_names = NULL;
    kiln_tensor **in_values = NULL, **out_values = NULL;
    Py_ssize_t n_in = 0, n_out = 0;
    PyObject *result = NULL;
    if (run_inputs(in_names_o, in_values_o, &c, &in_names, &in_values, &n_in) < 0) goto done;
    if (run_inputs(out_names_o, out_values_o, &c, &out_names, &out_values, &n_out) < 0) goto done;
    kiln_status st;
    const char *msg = NULL;
    int synced = 0;
    Py_BEGIN_ALLOW_THREADS
    synced = c.cuda_devices ? sync_legacy_streams(c.cuda_devices) : 0;
    Py_END_ALLOW_THREADS
    if (synced < 0) {
        raise_status(KILN_ERR_RUNTIME, "waiting for the CUDA work that writes a DLPack input failed");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    if (self->lock) PyThread_acquire_lock(self->lock, WAIT_LOCK);
#ifdef KILN_PY_RUN_OPTIONS
    st = kiln_session_run_into_with(self->s, (const kiln_run_options *)ro, (const char *const *)in_names, in_values,
                                    (size_t)n_in, (const char *const *)out_names, (size_t)n_out, out_values);
#else
    st = kiln_session_run_into(self->s, (const char *const *)in_names, in_values, (size_t)n_in,
                               (const char *const *)out_names, (size_t)n_out, out_values);
#endif
    if (st != KILN_OK) msg = kiln_last_error();
    if (self->lock) PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    if (st != KILN_OK) {
        raise_status(st, msg);
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    free_strings(in_names, n_in);
    free_strings(out_names, n_out);
    free(in_values);
    free(out_values);
    call_inputs_free(&c);
    return result;
}

/* ------------------------------------------------------------------ device tensors and copies */

/* device_tensor(dtype, shape, device ("cpu"|"cuda"), device_id) -> Tensor: new memory on that
 * device (kiln_tensor_create_device; a host one is zeroed, a device one not initialised). */
static PyObject *py_device_tensor(PyObject *m, PyObject *args) {
    int dtype, device_id;
    PyObject *shape, *dev_o;
    if (!PyArg_ParseTuple(args, "iOOi", &dtype, &shape, &dev_o, &device_id)) return NULL;
    char *dev = utf8_dup(dev_o, "a device type");
    if (!dev) return NULL;
    kiln_device_type d = KILN_DEVICE_HOST;
    if (!strcmp(dev, "cuda")) d = KILN_DEVICE_CUDA;
    else if (strcmp(dev, "cpu")) {
        PyObject *r = raise_invalid("device type '%s' is not 'cpu' or 'cuda'", dev);
        free(dev);
        return r;
    }
    free(dev);
    int64_t dims[KILN_MAX_RANK];
    int rank = parse_dims(shape, dims);
    if (rank < 0) return NULL;
    if (dtype <= 0 || dtype >= KILN_DTYPE_COUNT_) return raise_invalid("element type %d is not an ONNX type", dtype);
    kiln_tensor *t = NULL;
    kiln_status st;
    const char *msg = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = kiln_tensor_create_device((kiln_dtype)dtype, dims, rank, d, device_id, &t);
    if (st != KILN_OK) msg = kiln_last_error();
    Py_END_ALLOW_THREADS
    if (st != KILN_OK) return raise_status(st, msg);
    return tensor_new_owned(t);
}

/* copy(src, dst): kiln_tensor_copy of src into dst, each a value spec of a tensor (a Tensor, a host
 * or CUDA spec ("a"|"d", ...) or a DLPack capsule); complete on return. */
static PyObject *py_copy(PyObject *m, PyObject *args) {
    PyObject *src_o, *dst_o;
    if (!PyArg_ParseTuple(args, "OO", &src_o, &dst_o)) return NULL;
    call_inputs c = {0};
    kiln_tensor *src = NULL, *dst = NULL;
    if (make_value(src_o, "copy source", &c, 0, &src) < 0 || make_value(dst_o, "copy destination", &c, 0, &dst) < 0) {
        call_inputs_free(&c);
        return NULL;
    }
    kiln_status st = KILN_OK;
    const char *msg = NULL;
    int synced = 0;
    Py_BEGIN_ALLOW_THREADS
    synced = c.cuda_devices ? sync_legacy_streams(c.cuda_devices) : 0;
    if (synced >= 0) {
        st = kiln_tensor_copy(src, dst);
        if (st != KILN_OK) msg = kiln_last_error();
    }
    Py_END_ALLOW_THREADS
    PyObject *r = NULL;
    if (synced < 0) raise_status(KILN_ERR_RUNTIME, "waiting for the CUDA work that writes a DLPack tensor failed");
    else if (st != KILN_OK) raise_status(st, msg);
    else {
        r = Py_None;
        Py_INCREF(r);
    }
    call_inputs_free(&c);
    return r;
}

/* host_copy(src) -> a new host Tensor holding a copy of src (a value spec of a tensor, host or
 * device) */
static PyObject *py_host_copy(PyObject *m, PyObject *src_o) {
    call_inputs c = {0};
    kiln_tensor *src = NULL;
    if (make_value(src_o, "copy source", &c, 0, &src) < 0) {
        call_inputs_free(&c);
        return NULL;
    }
    if (kiln_tensor_dtype(src) == KILN_DTYPE_STRING || src->kind != KN_VALUE_TENSOR) {
        call_inputs_free(&c);
        return raise_invalid("host_copy: only numeric tensors are copied");
    }
    kiln_tensor *h = NULL;
    kiln_status st;
    const char *msg = NULL;
    int synced = 0;
    Py_BEGIN_ALLOW_THREADS
    synced = c.cuda_devices ? sync_legacy_streams(c.cuda_devices) : 0;
    st = kiln_tensor_create(kiln_tensor_dtype(src), kiln_tensor_dims(src), kiln_tensor_rank(src), &h);
    if (st == KILN_OK && synced >= 0) st = kiln_tensor_copy(src, h);
    if (st != KILN_OK) msg = kiln_last_error();
    Py_END_ALLOW_THREADS
    call_inputs_free(&c);
    if (synced < 0 || st != KILN_OK) {
        kiln_tensor_destroy(h);
        if (synced < 0) return raise_status(KILN_ERR_RUNTIME, "waiting for the CUDA work that writes a DLPack tensor failed");
        return raise_status(st, msg);
    }
    return tensor_new_owned(h);
}

/* wrap(("a"|"d", dtype, shape, ptr, nbytes[, device_id])) -> a Tensor over that memory (not
 * owned: the caller keeps it alive as long as the Tensor) */
static PyObject *py_wrap(PyObject *m, PyObject *spec) {
    if (!PyTuple_Check(spec) || PyTuple_Size(spec) < 5) {
        PyErr_SetString(PyExc_TypeError, "wrap: want a host or CUDA memory spec");
        return NULL;
    }
    call_inputs c = {0};
    kiln_tensor *t = NULL;
    if (make_value(spec, "bound memory", &c, 0, &t) < 0) {
        call_inputs_free(&c);
        return NULL;
    }
    /* make_value kept the wrapper in c: move it out */
    c.n_owned--;
    call_inputs_free(&c);
    return tensor_new_owned(t);
}

/* dlpack_info(capsule) -> (dtype, shape, data pointer): what a DLPack tensor is (the capsule is
 * used up: pass a fresh one from the producer's __dlpack__) */
static PyObject *py_dlpack_info(PyObject *m, PyObject *cap) {
    dl_taken taken = {0};
    kiln_tensor *view = NULL;
    if (dl_wrap(cap, "DLPack tensor", &view, &taken) < 0) {
        dl_release(&taken);
        return NULL;
    }
    TensorObject tmp;
    tmp.t = view;
    PyObject *shape = tensor_get_shape((PyObject *)&tmp, NULL);
    PyObject *r = shape ? Py_BuildValue("(iNN)", (int)kiln_tensor_dtype(view), shape,
                                        PyLong_FromVoidPtr(kiln_tensor_data(view)))
                        : NULL;
    kiln_tensor_destroy(view);
    dl_release(&taken);
    return r;
}

static PyMethodDef session_methods[] = {
    {"inputs", session_inputs, METH_NOARGS, "[(name, type, kind, dtype, shape)]"},
    {"meta", session_meta, METH_NOARGS, "(producer, graph name, domain, description, version)"},
    {"outputs", session_outputs, METH_NOARGS, "[(name, type, kind, dtype, shape)]"},
    {"providers", session_providers, METH_NOARGS, "[(name, [(key, value)])]: what the session runs on"},
    {"run", session_run, METH_VARARGS, "run(input_names, input_values, output_names, run_options)"},
    {"run_into", session_run_into, METH_VARARGS,
     "run_into(input_names, input_values, output_names, output_values, run_options)"},
    {NULL},
};

static PyType_Slot session_slots[] = {
    {Py_tp_new, session_new},
    {Py_tp_dealloc, session_dealloc},
    {Py_tp_methods, session_methods},
    {Py_tp_doc, "A kiln session (the C library's kiln_session)."},
    {0, NULL},
};

static PyType_Spec session_spec = {"kiln._kiln.Session", sizeof(SessionObject), 0, Py_TPFLAGS_DEFAULT, session_slots};

/* ------------------------------------------------------------------ module functions */

static PyObject *py_version(PyObject *m, PyObject *unused) { return PyUnicode_FromString(kiln_version()); }

/* [(name, available, reason)] for every provider this build has */
static PyObject *py_providers(PyObject *m, PyObject *unused) {
    size_t n = kiln_provider_count();
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list) return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *name = kiln_provider_name(i), *reason = NULL;
        int ok = kiln_provider_available(name, &reason);
        PyObject *t = Py_BuildValue("(sOz)", name, ok ? Py_True : Py_False, ok ? NULL : reason);
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SetItem(list, (Py_ssize_t)i, t);
    }
    return list;
}

static PyObject *py_devices(PyObject *m, PyObject *arg) {
    char *p = utf8_dup(arg, "a provider name");
    if (!p) return NULL;
    size_t n = kiln_device_count(p);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        const char *d = kiln_device_description(p, i);
        PyList_SetItem(list, (Py_ssize_t)i, PyUnicode_FromString(d ? d : ""));
    }
    free(p);
    return list;
}

static PyObject *py_status_names(PyObject *m, PyObject *unused) {
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < KILN_STATUS_COUNT_; i++) {
        PyObject *k = PyLong_FromLong(i), *v = PyUnicode_FromString(kiln_status_name((kiln_status)i));
        if (!k || !v || PyDict_SetItem(d, k, v) < 0) {
            Py_XDECREF(k);
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(k);
        Py_DECREF(v);
    }
    return d;
}

/* the kiln name of each element type: {1: "float", ...} */
static PyObject *py_dtype_names(PyObject *m, PyObject *unused) {
    PyObject *d = PyDict_New();
    for (int i = 1; d && i < KILN_DTYPE_COUNT_; i++) {
        PyObject *k = PyLong_FromLong(i), *v = PyUnicode_FromString(kiln_dtype_name((kiln_dtype)i));
        if (!k || !v || PyDict_SetItem(d, k, v) < 0) {
            Py_XDECREF(k);
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(k);
        Py_DECREF(v);
    }
    return d;
}

static PyMethodDef module_methods[] = {
    {"version", py_version, METH_NOARGS, "kiln's version"},
    {"providers", py_providers, METH_NOARGS, "[(name, available, reason)]"},
    {"devices", py_devices, METH_O, "device descriptions of a provider"},
    {"status_names", py_status_names, METH_NOARGS, "{status: name}"},
    {"dtype_names", py_dtype_names, METH_NOARGS, "{dtype: name}"},
    {"device_tensor", py_device_tensor, METH_VARARGS, "device_tensor(dtype, shape, device, device_id)"},
    {"copy", py_copy, METH_VARARGS, "copy(src, dst): the elements of src into dst"},
    {"host_copy", py_host_copy, METH_O, "host_copy(src) -> a host Tensor with a copy of src"},
    {"cuda_synchronize", py_cuda_synchronize, METH_O, "cuda_synchronize(device_id): waits for the device"},
    {"sync_legacy", py_sync_legacy, METH_O, "sync_legacy(device_id): waits for the legacy default stream"},
    {"dlpack_info", py_dlpack_info, METH_O, "dlpack_info(capsule) -> (dtype, shape, data pointer)"},
    {"wrap", py_wrap, METH_O, "wrap(memory spec) -> a Tensor over that memory (not owned)"},
    {"_set_errors", py_set_errors, METH_VARARGS, "registers the exception classes"},
    {NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_kiln", "kiln's C extension", -1, module_methods};

PyMODINIT_FUNC PyInit__kiln(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    g_tensor_type = PyType_FromSpec(&tensor_spec);
    if (!g_tensor_type) goto fail;
    Py_INCREF(g_tensor_type);
    if (PyModule_AddObject(m, "Tensor", g_tensor_type) < 0) goto fail;
    PyObject *session_type = PyType_FromSpec(&session_spec);
    if (!session_type || PyModule_AddObject(m, "Session", session_type) < 0) goto fail;
#ifdef KILN_PY_RUN_OPTIONS
    g_run_options_type = PyType_FromSpec(&run_options_spec);
    if (!g_run_options_type) goto fail;
    Py_INCREF(g_run_options_type);
    if (PyModule_AddObject(m, "RunOptions", g_run_options_type) < 0) goto fail;
#endif
    if (PyModule_AddIntConstant(m, "HAVE_RUN_OPTIONS",
#ifdef KILN_PY_RUN_OPTIONS
                                1
#else
                                0
#endif
                                ) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}

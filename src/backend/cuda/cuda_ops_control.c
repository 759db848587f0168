/* CUDA kernels for the control-flow operators If, Loop and Scan. Their semantics (which branch, the
 * trip count and condition, loop-carried values, Scan's slices and the stacking of scan outputs) are
 * the executor's, shared with the CPU (exec/control_flow.c); this file gives them device memory:
 *
 *  - the bodies run through the executor with the node's run as their outer scope; placement puts
 *    their nodes on the device where it has kernels (exec/placement.c), and their outputs come back
 *    where they were computed (exec.c, KN_EXEC_DEVICE_OUTPUTS), so nothing goes to the host that the
 *    operator does not read there;
 *  - the values read on the host are the If's condition and the Loop's trip count and condition
 *    (inputs marked host in the table below: the executor brings them, waiting for the device when
 *    they are computed there) and the Loop body's condition output after each iteration (read back
 *    here, a wait for the stream). A session where one of them is computed on the device at run
 *    time is not recorded into CUDA graphs (exec/graph_run.c says why, at info level); a download
 *    while recording would fail the recording anyway, and the run then goes uncaptured;
 *  - slices and stacking are device-to-device copies on the session stream (cudaMemcpyAsync, or
 *    cudaMemcpy2DAsync for rows), so they are ordered after the work that made their source and
 *    before the work that reads them, and are recorded into a graph like any kernel. A host value
 *    that becomes an output (a body constant, a CPU node's result) is uploaded (from a pinned copy
 *    the graph keeps while recording). */
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_graph.h"
#include "exec/control_flow.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cudaMemcpy2D's pitches stay below the device's limit (cudaDevAttrMaxPitch, 2^31 - 1 on every
 * current GPU); rows further apart are copied one by one. */
#define KN_CU_MAX_PITCH ((size_t)INT32_MAX)

/* ------------------------------------------------------------------ the mover */

static kiln_status cf_new(void *state, kiln_dtype dtype, int rank, const int64_t *dims, kn_tensor **out) {
    return kn_cu_new_tensor(state, dtype, rank, dims, out);
}

/* A copy of t on the device: t's elements uploaded (host) or copied (device). */
static kiln_status cf_clone(void *state, const kn_tensor *t, kn_tensor **out) {
    kn_cuda *cu = state;
    *out = NULL;
    if (t->kind != KN_VALUE_TENSOR)
        return kn_error(KILN_ERR_UNSUPPORTED, "a %s value cannot be held on cuda:%d (the CUDA backend holds tensors)",
                        t->kind == KN_VALUE_SEQUENCE ? "sequence" : "optional", cu->device);
    if (t->device == KN_DEVICE_HOST) return kn_backend_cuda.upload(cu, t, false, out);
    KN_TRY(kn_cu_new_tensor(cu, t->dtype, t->rank, t->dims, out));
    kiln_status st = kn_cu_copy(cu, t, *out);
    if (st != KILN_OK) {
        kn_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

static kiln_status cf_copy_rows(void *state, kn_tensor *dst, int64_t doff, int64_t dpitch, const kn_tensor *src,
                                int64_t soff, int64_t spitch, int64_t width, int64_t rows) {
    kn_cuda *cu = state;
    if (dst->kind != KN_VALUE_TENSOR || src->kind != KN_VALUE_TENSOR || dst->device != KN_DEVICE_CUDA)
        return KN_INTERNAL("a control-flow copy into a value that is not a device tensor");
    if (dst->dtype != src->dtype) return KN_INTERNAL("a control-flow copy between element types");
    size_t es = kiln_dtype_size(dst->dtype);
    if (kn_dtype_is_packed(dst->dtype) || dst->dtype == KILN_DTYPE_STRING || es == 0)
        return kn_error(KILN_ERR_UNSUPPORTED, "%s elements cannot be sliced or stacked on cuda:%d",
                        kiln_dtype_name(dst->dtype), cu->device);
    if (width <= 0 || rows <= 0) return KILN_OK;
    kn_tensor *staged = NULL;
    if (src->device == KN_DEVICE_HOST) {
        /* a host value (a CPU node's result in a body): on the device first, in stream order */
        KN_TRY(kn_backend_cuda.upload(cu, src, false, &staged));
        src = staged;
    }
    char *d = (char *)dst->data + (size_t)doff * es;
    const char *s = (const char *)src->data + (size_t)soff * es;
    size_t w = (size_t)width * es, dp = (size_t)dpitch * es, sp = (size_t)spitch * es;
    cudaError_t e;
    if (rows == 1 || (dp == w && sp == w))
        e = cudaMemcpyAsync(d, s, w * (size_t)rows, cudaMemcpyDeviceToDevice, cu->stream);
    else if (dp <= KN_CU_MAX_PITCH && sp <= KN_CU_MAX_PITCH)
        e = cudaMemcpy2DAsync(d, dp, s, sp, w, (size_t)rows, cudaMemcpyDeviceToDevice, cu->stream);
    else {
        e = cudaSuccess;
        for (int64_t r = 0; r < rows && e == cudaSuccess; r++)
            e = cudaMemcpyAsync(d + (size_t)r * dp, s + (size_t)r * sp, w, cudaMemcpyDeviceToDevice, cu->stream);
    }
    /* the block goes back to the allocator, whose next user comes after this copy in stream order */
    kn_tensor_free(staged);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return kn_error(KILN_ERR_RUNTIME, "cuda:%d: copy of %lld rows of %zu bytes on the device: %s (%s)", cu->device,
                        (long long)rows, w, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    return KILN_OK;
}

/* Element i on the host; a device value is downloaded, which waits for the stream (and fails while
 * a run is recorded: the recording is then dropped and the run goes uncaptured). */
static kiln_status cf_read(void *state, const kn_tensor *t, int64_t i, int64_t *out) {
    if (t->device == KN_DEVICE_HOST) {
        *out = kn_tensor_get_i64(t, i);
        return KILN_OK;
    }
    kn_tensor *h = NULL;
    KN_TRY(kn_backend_cuda.download(state, t, &h));
    *out = kn_tensor_get_i64(h, i);
    kn_tensor_free(h);
    return KILN_OK;
}

static kiln_status cf_adopt(void *state, kn_tensor *t, kn_tensor **out) {
    if (t->kind == KN_VALUE_TENSOR && t->device == KN_DEVICE_CUDA) {
        *out = t;
        return KILN_OK;
    }
    kiln_status st = cf_clone(state, t, out);
    kn_tensor_free(t);
    return st;
}

static kn_cf_mover device_mover(kn_cuda *cu) {
    kn_cf_mover m = {cu, cf_new, cf_copy_rows, cf_read, cf_clone, cf_adopt};
    return m;
}

/* ------------------------------------------------------------------ kernels */

static kiln_status run_if(kn_cuda *cu, kn_kernel_ctx *c) {
    kn_cf_mover m = device_mover(cu);
    return kn_cf_if(c, &m);
}

static kiln_status run_loop(kn_cuda *cu, kn_kernel_ctx *c) {
    kn_cf_mover m = device_mover(cu);
    return kn_cf_loop(c, &m);
}

static kiln_status run_scan(kn_cuda *cu, kn_kernel_ctx *c) {
    kn_cf_mover m = device_mover(cu);
    return kn_cf_scan(c, &m);
}

/* The bodies named give tensors of types the device holds (their inputs are the node's, checked by
 * the table's rules, or values the kernel makes). */
static bool bodies_hold_tensors(const kn_node *n, const char *const *names, int n_names, char *why, size_t cap) {
    for (int b = 0; b < n_names; b++) {
        const kn_attr *a = kn_node_attr(n, names[b]);
        const kn_graph *g = a && a->type == KN_ATTR_GRAPH ? a->g : NULL;
        if (!g) {
            snprintf(why, cap, "attribute %s is not a graph", names[b]);
            return false;
        }
        for (int o = 0; o < g->n_outputs; o++) {
            const kn_value *v = &g->values[g->outputs[o]];
            if (v->type.kind == KN_TYPE_SEQUENCE || v->type.kind == KN_TYPE_OPTIONAL) {
                snprintf(why, cap, "%s output %d ('%s') is a sequence or optional (the CUDA backend holds tensors)",
                         names[b], o, v->name);
                return false;
            }
            /* an element type not known before the run is taken: one the device cannot hold (a string)
             * is an error naming the node when it is handed over */
            kiln_dtype dt = v->type.dtype;
            if (dt != KILN_DTYPE_UNDEFINED && ((unsigned)dt >= 32 || !(KN_T_DENSE & KN_T(dt)))) {
                snprintf(why, cap, "%s output %d ('%s') is %s (the CUDA backend takes numeric and bool tensors)",
                         names[b], o, v->name, kiln_dtype_name(dt));
                return false;
            }
        }
    }
    return true;
}

/* If, Loop and Scan run here unless turned off (KILN_CUDA_CONTROL_FLOW=0: they stay on the CPU with
 * providers cuda,cpu); the GPU suite passed with them on 2 December (28 node tests with provider
 * cuda alone at levels 0 and 3, the GPU unit tests). */
static bool control_flow_enabled(char *why, size_t cap) {
    const char *v = getenv("KILN_CUDA_CONTROL_FLOW");
    if (!(v && !strcmp(v, "0"))) return true;
    snprintf(why, cap, "control flow on CUDA is turned off (KILN_CUDA_CONTROL_FLOW=0)");
    return false;
}

static bool supports_if(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)in;
    (void)n_in;
    if (!control_flow_enabled(why, cap)) return false;
    static const char *const names[2] = {"then_branch", "else_branch"};
    return bodies_hold_tensors(n, names, 2, why, cap);
}

static bool supports_body(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)in;
    (void)n_in;
    if (!control_flow_enabled(why, cap)) return false;
    static const char *const names[1] = {"body"};
    return bodies_hold_tensors(n, names, 1, why, cap);
}

/* If reads input 0 (the condition) on the host, Loop inputs 0 and 1 (trip count and condition);
 * every other input (Loop's carried values, Scan's states and scan inputs; opset 8's sequence_lens,
 * read back when given) is a device tensor of a numeric or bool type. */
const kn_cuda_kernel kn_cuda_control[] = {
    {"", "If", run_if, supports_if, 0, 0x1, 0, KN_CU_PARAMS(kn_cf_prepare, kn_cf_prm)},
    {"", "Loop", run_loop, supports_body, 0, 0x3, 0, KN_CU_PARAMS(kn_cf_prepare, kn_cf_prm)},
    {"", "Scan", run_scan, supports_body, 0, 0, 0, KN_CU_PARAMS(kn_cf_prepare, kn_cf_prm)},
    {0},
};

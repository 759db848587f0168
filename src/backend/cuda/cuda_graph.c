/* CUDA graphs for the CUDA backend: recording a run on its lane's stream, the memory a recorded
 * graph keeps, replays, copies between the host and the device, and checks of caller pointers.
 * See cuda_graph.h for how the memory of a graph stays valid between replays. */
#include "backend/cuda/cuda_graph.h"

#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kn_cu_capture {
    kn_cu_block *free_blocks; /* reserved blocks no tensor holds */
    int n_free, cap_free;
    size_t reserved_bytes;
    void **pinned; /* host sources of recorded copies */
    int n_pinned, cap_pinned;
    bool lost_block;     /* a block could not be recorded (out of host memory): discard the graph */
};

typedef struct kn_cu_graph {
    cudaGraphExec_t exec;
    kn_cu_capture *mem;
} kn_cu_graph;

/* ------------------------------------------------------------------ reserved memory */

void *kn_cu_capture_take(kn_cu_capture *cap, size_t need, size_t *size_out) {
    int best = -1;
    for (int i = 0; i < cap->n_free; i++) {
        size_t c = cap->free_blocks[i].size;
        if (c >= need && c / 2 <= need && (best < 0 || c < cap->free_blocks[best].size)) best = i;
    }
    if (best < 0) return NULL;
    void *p = cap->free_blocks[best].ptr;
    *size_out = cap->free_blocks[best].size;
    cap->free_blocks[best] = cap->free_blocks[--cap->n_free];
    return p;
}

void kn_cu_capture_keep(kn_cu_capture *cap, void *p, size_t size) {
    if (cap->n_free == cap->cap_free) {
        int nc = cap->cap_free ? cap->cap_free * 2 : 64;
        kn_cu_block *b = realloc(cap->free_blocks, sizeof *b * (size_t)nc);
        if (!b) {
            cap->lost_block = true; /* leaked rather than handed out while a graph may use it */
            return;
        }
        cap->free_blocks = b;
        cap->cap_free = nc;
    }
    cap->free_blocks[cap->n_free++] = (kn_cu_block){p, size};
    cap->reserved_bytes += size;
}

kiln_status kn_cu_capture_stage(kn_cuda *cu, const void *host, size_t bytes, const void **staged) {
    kn_cu_capture *cap = cu->capture;
    *staged = NULL;
    if (!cap) return KN_INTERNAL("staging outside a capture");
    if (cap->n_pinned == cap->cap_pinned) {
        int nc = cap->cap_pinned ? cap->cap_pinned * 2 : 16;
        void **b = realloc(cap->pinned, sizeof *b * (size_t)nc);
        if (!b) return KN_OOM();
        cap->pinned = b;
        cap->cap_pinned = nc;
    }
    void *h = NULL;
    cudaError_t e = cudaMallocHost(&h, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "cuda:%d: %zu bytes of pinned host memory for a recorded copy: %s",
                        cu->device, bytes, cudaGetErrorString(e));
    }
    if (bytes) memcpy(h, host, bytes);
    cap->pinned[cap->n_pinned++] = h;
    *staged = h;
    return KILN_OK;
}

/* Gives every reserved block back to the allocator and frees the pinned sources. */
static void capture_release(kn_cuda *cu, kn_cu_capture *cap) {
    if (!cap) return;
    for (int i = 0; i < cap->n_free; i++) kn_cu_unreserve_block(cu, cap->free_blocks[i].ptr, cap->free_blocks[i].size);
    for (int i = 0; i < cap->n_pinned; i++) cudaFreeHost(cap->pinned[i]);
    free(cap->free_blocks);
    free(cap->pinned);
    free(cap);
}

/* ------------------------------------------------------------------ capture and replay */

kiln_status kn_cu_capture_begin(void *state) {
    kn_cuda *cu = kn_cu_lane(state); /* the call's lane: its stream is recorded, its frees reserved */
    if (cu->capture) return KN_INTERNAL("a capture is already in progress");
    kn_cu_warmup_join(cu); /* its library calls must not overlap a recording */
    kn_cu_capture *cap = calloc(1, sizeof *cap);
    if (!cap) return KN_OOM();
    cudaSetDevice(cu->device);
    pthread_mutex_lock(&cu->sh->mu);
    cu->capture = cap;
    pthread_mutex_unlock(&cu->sh->mu);
    /* relaxed: an allocator miss may still call cudaMalloc (outside the graph) while recording */
    cudaError_t e = cudaStreamBeginCapture(cu->stream, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
        cudaGetLastError();
        pthread_mutex_lock(&cu->sh->mu);
        cu->capture = NULL;
        pthread_mutex_unlock(&cu->sh->mu);
        capture_release(cu, cap);
        return kn_error(KILN_ERR_RUNTIME, "cuda:%d: cudaStreamBeginCapture: %s", cu->device, cudaGetErrorString(e));
    }
    return KILN_OK;
}

kiln_status kn_cu_capture_end(void *state, bool ok, void **graph_out) {
    kn_cuda *cu = kn_cu_lane(state);
    *graph_out = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(cu->stream, &g);
    pthread_mutex_lock(&cu->sh->mu);
    kn_cu_capture *cap = cu->capture;
    cu->capture = NULL;
    pthread_mutex_unlock(&cu->sh->mu);
    if (!cap) {
        if (g) cudaGraphDestroy(g);
        return KN_INTERNAL("capture_end without capture_begin");
    }
    kiln_status st = KILN_OK;
    if (!ok)
        st = kn_error(KILN_ERR_RUNTIME, "the run failed while it was recorded");
    else if (e != cudaSuccess || !g)
        st = kn_error(KILN_ERR_RUNTIME, "cudaStreamEndCapture: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    else if (cap->lost_block)
        st = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of host memory recording the graph's memory");
    cudaGraphExec_t exec = NULL;
    if (st == KILN_OK) {
        e = cudaGraphInstantiate(&exec, g, 0);
        if (e != cudaSuccess) {
            exec = NULL;
            st = kn_error(KILN_ERR_RUNTIME, "cudaGraphInstantiate: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        }
    }
    if (g) cudaGraphDestroy(g);
    kn_cu_graph *graph = NULL;
    if (st == KILN_OK) {
        graph = calloc(1, sizeof *graph);
        if (!graph) st = KN_OOM();
    }
    if (st != KILN_OK) {
        cudaGetLastError(); /* recording errors are not sticky; clear them for the uncaptured run */
        if (exec) cudaGraphExecDestroy(exec);
        /* (a weight's first conversion is refused while recording, cuda_backend.c: none to drop) */
        capture_release(cu, cap);
        return st;
    }
    /* the first launch then does not pay for moving the graph to the device */
    cudaGraphUpload(exec, cu->stream);
    cudaGetLastError();
    graph->exec = exec;
    graph->mem = cap;
    kn_log(KILN_LOG_DEBUG, "cuda:%d: graph recorded, %zu bytes of device memory reserved for it, %d pinned sources",
           cu->device, cap->reserved_bytes, cap->n_pinned);
    *graph_out = graph;
    return KILN_OK;
}

kiln_status kn_cu_graph_launch(void *state, void *graph) {
    kn_cuda *cu = kn_cu_lane(state); /* the lane of the run context whose graph it is */
    kn_cu_graph *g = graph;
    if (!g) return KN_INTERNAL("launch of a NULL graph");
    if (cu->device) cudaSetDevice(cu->device);
    cudaError_t e = cudaGraphLaunch(g->exec, cu->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return kn_error(KILN_ERR_RUNTIME, "cuda:%d: cudaGraphLaunch: %s (%s)", cu->device, cudaGetErrorString(e),
                        cudaGetErrorName(e));
    }
    return KILN_OK;
}

void kn_cu_graph_destroy(void *state, void *graph) {
    kn_cuda *cu = kn_cu_lane(state);
    kn_cu_graph *g = graph;
    if (!g) return;
    /* an executable graph still in flight is freed when it completes; the blocks go back to the
     * free list, whose next users come after it in stream order */
    cudaGraphExecDestroy(g->exec);
    capture_release(cu, g->mem);
    free(g);
}

/* ------------------------------------------------------------------ copies */

kiln_status kn_cu_copy(void *state, const kn_tensor *src, kn_tensor *dst) {
    kn_cuda *cu = kn_cu_lane(state);
    if (src->kind != KN_VALUE_TENSOR || dst->kind != KN_VALUE_TENSOR || src->dtype == KILN_DTYPE_STRING ||
        src->dtype != dst->dtype || src->nbytes != dst->nbytes) {
        char a[256], b[256];
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "cannot copy %s into %s", kn_tensor_describe(src, a, sizeof a),
                        kn_tensor_describe(dst, b, sizeof b));
    }
    if (!src->nbytes) return KILN_OK;
    bool from_host = src->device == KN_DEVICE_HOST, to_host = dst->device == KN_DEVICE_HOST;
    if (from_host && to_host) {
        memcpy(dst->data, src->data, src->nbytes);
        return KILN_OK;
    }
    const void *from = src->data;
    if (cu->capture && to_host)
        return kn_error(KILN_ERR_UNSUPPORTED, "a device value is copied to the host while the run is recorded");
    if (cu->capture && from_host) KN_TRY(kn_cu_capture_stage(cu, src->data, src->nbytes, &from));
    enum cudaMemcpyKind kind = from_host ? cudaMemcpyHostToDevice
                               : to_host ? cudaMemcpyDeviceToHost
                                         : cudaMemcpyDeviceToDevice;
    cudaError_t e = cudaMemcpyAsync(dst->data, from, src->nbytes, kind, cu->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return kn_error(KILN_ERR_RUNTIME, "cuda:%d: copy of %zu bytes %s: %s", cu->device, src->nbytes,
                        from_host ? "to the device" : to_host ? "to the host" : "on the device", cudaGetErrorString(e));
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ caller pointers */

kiln_status kn_cu_check_pointer(const void *data, size_t bytes, int device_id) {
    (void)bytes; /* the runtime API cannot tell an allocation's size */
    size_t n = kn_backend_cuda.device_count ? kn_backend_cuda.device_count() : 0;
    if (device_id < 0 || (size_t)device_id >= n)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "device_id %d asked for, %zu CUDA device%s present", device_id, n,
                        n == 1 ? "" : "s");
    struct cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    cudaError_t e = cudaPointerGetAttributes(&a, data);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%p is not a pointer CUDA knows: %s", data, cudaGetErrorString(e));
    }
    switch (a.type) {
    case cudaMemoryTypeDevice:
        if (a.device != device_id)
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "%p is memory of cuda:%d, not of cuda:%d (device_id)", data,
                            a.device, device_id);
        return KILN_OK;
    case cudaMemoryTypeManaged: return KILN_OK;
    case cudaMemoryTypeHost:
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "%p is pinned host memory (cudaMallocHost/cudaHostRegister), not device memory: wrap host memory "
                        "with kiln_tensor_wrap",
                        data);
    default:
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "%p is host memory, not CUDA device memory: wrap host memory with kiln_tensor_wrap", data);
    }
}

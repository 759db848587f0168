/* Data errors found on the device: an index out of range in a Gather, a scatter, an embedding.
 * The CPU kernels check every index before they use it and fail naming the node; a CUDA kernel
 * cannot return an error, so it writes the first one it finds into its lane's record (pinned host
 * memory mapped into the device, claimed through a word of device memory) and carries on with a
 * safe value (zeros, or the write skipped). When the lane's work is done (lane_leave, after the
 * wait every call ends with; also a download in the middle of a run) the record is read from host
 * memory, with no copy and no extra launch, and becomes the call's KILN_ERR_INVALID_ARGUMENT, with
 * the CPU's wording. A recorded graph keeps the record's addresses, so a replay reports the same
 * way. */
#include "backend/cuda/cuda_backend.h"

#include <stdio.h>
#include <string.h>

/* The record and the claim word, made at a kernel's first need of them (most sessions have no
 * kernel that can find a data error, and pay nothing). */
static bool err_make(kn_cuda *cu) {
    void *h = NULL, *d = NULL;
    int *claim = NULL;
    cudaError_t e = cudaHostAlloc(&h, sizeof(kn_cu_err), cudaHostAllocMapped);
    if (e == cudaSuccess) e = cudaHostGetDevicePointer(&d, h, 0);
    if (e == cudaSuccess) e = cudaMalloc((void **)&claim, sizeof *claim);
    /* in stream order before the first kernel that may claim it (recorded, when a graph is) */
    if (e == cudaSuccess) e = cudaMemsetAsync(claim, 0, sizeof *claim, cu->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (claim) cudaFree(claim);
        if (h) cudaFreeHost(h);
        return false;
    }
    memset(h, 0, sizeof(kn_cu_err));
    cu->err = h;
    cu->err_dev = d;
    cu->err_claim = claim;
    return true;
}

kn_cu_errp kn_cu_err_at(kn_cuda *cu, const kn_kernel_ctx *c) {
    kn_cu_errp p = {NULL, NULL, (unsigned long long)(uintptr_t)(c ? c->node : NULL)};
    if (!cu->err && !err_make(cu)) return p; /* nothing checked, as before the record existed */
    p.rec = cu->err_dev;
    p.claim = cu->err_claim;
    return p;
}

static const char *where_of(int code) {
    switch (code) {
    case KN_CU_ERR_GATHER: return "for the gathered axis";
    case KN_CU_ERR_AXIS: return "along the axis";
    case KN_CU_ERR_GATHERND: return "in GatherND indices";
    case KN_CU_ERR_SCATTERND: return "in ScatterND indices";
    default: return "";
    }
}

kiln_status kn_cu_err_check(kn_cuda *cu) {
    volatile kn_cu_err *r = cu->err;
    if (!r || !r->set || cu->capture) return KILN_OK;
    kn_cu_err e;
    e.code = r->code;
    e.node = r->node;
    e.value = r->value;
    e.lo = r->lo;
    e.hi = r->hi;
    e.where = r->where;
    /* read: the next call starts clean (the claim word in its stream's order) */
    r->set = 0;
    cudaMemsetAsync(cu->err_claim, 0, sizeof *cu->err_claim, cu->stream);
    cudaGetLastError();
    const kn_node *n = (const kn_node *)(uintptr_t)e.node;
    char lbl[256], msg[512];
    const char *who = n ? kn_node_label(n, lbl, sizeof lbl) : "a CUDA kernel";
    /* the CPU kernels' words (src/backend/cpu: tensor_index.c, attention_misc.c, nn_softmax.c) */
    switch (e.code) {
    case KN_CU_ERR_POSITION:
        snprintf(msg, sizeof msg, "position id %lld is outside the cache's %lld rows (element %lld of position_ids)",
                 e.value, e.hi, e.where);
        break;
    case KN_CU_ERR_CLASS:
        snprintf(msg, sizeof msg, "target value %lld at position %lld is not a class in [0, %lld)", e.value, e.where,
                 e.hi);
        break;
    case KN_CU_ERR_SEQLEN:
        snprintf(msg, sizeof msg, "sequence_lens[%lld] = %lld is outside [0, %lld]", e.where, e.value, e.hi - 1);
        break;
    case KN_CU_ERR_GIDX:
        snprintf(msg, sizeof msg, "g_idx[%lld] = %lld is outside [0, %lld)", e.where, e.value, e.hi);
        break;
    default:
        snprintf(msg, sizeof msg, "index %lld is out of range [%lld, %lld) %s (element %lld of the indices)", e.value,
                 e.lo, e.hi, where_of(e.code), e.where);
    }
    return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: %s; found on cuda:%d", who, msg, cu->device);
}

void kn_cu_err_free(kn_cuda *cu) {
    if (cu->err_claim) cudaFree(cu->err_claim);
    if (cu->err) cudaFreeHost(cu->err);
    cu->err = cu->err_dev = NULL;
    cu->err_claim = NULL;
}

/* cuDNN backend-API steps shared by kiln's operation graphs (see cuda_dnn_graph.h). */
#include "backend/cuda/cuda_dnn_graph.h"

#ifdef KILN_HAVE_CUDNN

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cudnnBackendDescriptor_t kn_dnn_make(kn_dnn_builder *b, cudnnBackendDescriptorType_t type, const char *what) {
    cudnnBackendDescriptor_t d = NULL;
    if (b->s != CUDNN_STATUS_SUCCESS) return NULL;
    b->s = cudnnBackendCreateDescriptor(type, &d);
    if (b->s != CUDNN_STATUS_SUCCESS) b->what = what;
    return d;
}

void kn_dnn_set(kn_dnn_builder *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t n, const void *v, const char *what) {
    if (b->s != CUDNN_STATUS_SUCCESS) return;
    b->s = cudnnBackendSetAttribute(d, name, type, n, v);
    if (b->s != CUDNN_STATUS_SUCCESS) b->what = what;
}

void kn_dnn_finish(kn_dnn_builder *b, cudnnBackendDescriptor_t d, const char *what) {
    if (b->s != CUDNN_STATUS_SUCCESS) return;
    b->s = cudnnBackendFinalize(d);
    if (b->s != CUDNN_STATUS_SUCCESS) b->what = what;
}

void kn_dnn_drop(cudnnBackendDescriptor_t *d) {
    if (*d) cudnnBackendDestroyDescriptor(*d);
    *d = NULL;
}

cudnnBackendDescriptor_t kn_dnn_tensor(kn_dnn_builder *b, int64_t uid, cudnnDataType_t dt, int rank, const int64_t *dims,
                                       const int64_t *strides, bool is_virtual, bool by_value, const char *what) {
    cudnnBackendDescriptor_t d = kn_dnn_make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    const int64_t align = 16;
    kn_dnn_set(b, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, what);
    kn_dnn_set(b, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, dims, what);
    kn_dnn_set(b, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, strides, what);
    kn_dnn_set(b, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
    kn_dnn_set(b, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
    kn_dnn_set(b, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, what);
    if (by_value) kn_dnn_set(b, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, what);
    kn_dnn_finish(b, d, what);
    return d;
}

cudnnBackendDescriptor_t kn_dnn_pointwise(kn_dnn_builder *b, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t other, cudnnBackendDescriptor_t y,
                                          cudnnBackendDescriptor_t *pw_out, const char *what) {
    cudnnBackendDescriptor_t pw = kn_dnn_make(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    kn_dnn_set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
    kn_dnn_set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
    kn_dnn_finish(b, pw, what);
    *pw_out = pw;
    cudnnBackendDescriptor_t op = kn_dnn_make(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    kn_dnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, what);
    kn_dnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    if (other) kn_dnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &other, what);
    kn_dnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    kn_dnn_finish(b, op, what);
    return op;
}

cudnnBackendDescriptor_t kn_dnn_op_graph(kn_dnn_builder *b, cudnnHandle_t h, cudnnBackendDescriptor_t *ops, int n,
                                         bool dynamic) {
    cudnnBackendDescriptor_t graph = kn_dnn_make(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    kn_dnn_set(b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, ops, "operation graph");
    kn_dnn_set(b, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "operation graph");
    if (dynamic)
        kn_dnn_set(b, graph, CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED, CUDNN_TYPE_BOOLEAN, 1, &dynamic,
                   "operation graph");
    kn_dnn_finish(b, graph, "operation graph");
    return graph;
}

int64_t kn_dnn_engine_configs(kn_dnn_builder *b, cudnnBackendDescriptor_t graph, cudnnBackendDescriptor_t *cfgs,
                              int64_t want, cudnnBackendHeurMode_t mode) {
    cudnnBackendDescriptor_t heur = kn_dnn_make(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    kn_dnn_set(b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "heuristics");
    kn_dnn_set(b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics");
    kn_dnn_finish(b, heur, "heuristics");
    int64_t n = 0;
    for (int64_t i = 0; i < want && b->s == CUDNN_STATUS_SUCCESS; i++)
        cfgs[i] = kn_dnn_make(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine configs");
    if (b->s == CUDNN_STATUS_SUCCESS) {
        b->s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, want, &n, cfgs);
        if (b->s != CUDNN_STATUS_SUCCESS) b->what = "engine configs";
    }
    kn_dnn_drop(&heur);
    return n < want ? n : want;
}

int64_t kn_dnn_engine_count(cudnnBackendDescriptor_t graph) {
    int64_t n = 0, got = 0;
    if (cudnnBackendGetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &got, &n) !=
        CUDNN_STATUS_SUCCESS)
        return 0;
    return n;
}

cudnnBackendDescriptor_t kn_dnn_engine_config(cudnnBackendDescriptor_t graph, int64_t index) {
    kn_dnn_builder b = KN_DNN_BUILDER_INIT;
    cudnnBackendDescriptor_t engine = kn_dnn_make(&b, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
    kn_dnn_set(&b, engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "engine");
    kn_dnn_set(&b, engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &index, "engine");
    kn_dnn_finish(&b, engine, "engine"); /* fails where the engine does not take the graph */
    cudnnBackendDescriptor_t cfg = kn_dnn_make(&b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
    kn_dnn_set(&b, cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engine, "engine config");
    kn_dnn_finish(&b, cfg, "engine config");
    kn_dnn_drop(&engine);
    if (b.s != CUDNN_STATUS_SUCCESS) kn_dnn_drop(&cfg);
    return cfg;
}

cudnnBackendDescriptor_t kn_dnn_plan(cudnnHandle_t h, cudnnBackendDescriptor_t cfg, cudnnBackendDescriptor_t kc,
                                     int64_t *ws) {
    kn_dnn_builder b = KN_DNN_BUILDER_INIT;
    cudnnBackendDescriptor_t plan = kn_dnn_make(&b, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "plan");
    kn_dnn_set(&b, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "plan");
    kn_dnn_set(&b, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg, "plan");
    if (kc) kn_dnn_set(&b, plan, CUDNN_ATTR_EXECUTION_PLAN_KERNEL_CACHE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &kc, "plan");
    kn_dnn_finish(&b, plan, "plan");
    int64_t n = 0;
    if (b.s == CUDNN_STATUS_SUCCESS)
        b.s = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, ws);
    if (b.s != CUDNN_STATUS_SUCCESS) kn_dnn_drop(&plan);
    return plan;
}

cudnnStatus_t kn_dnn_execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, int n, const int64_t *uids, void *const *ptrs,
                             void *ws) {
    kn_dnn_builder b = KN_DNN_BUILDER_INIT;
    cudnnBackendDescriptor_t vp = kn_dnn_make(&b, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    kn_dnn_set(&b, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids, "variant pack");
    kn_dnn_set(&b, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs, "variant pack");
    kn_dnn_set(&b, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, "variant pack");
    kn_dnn_finish(&b, vp, "variant pack");
    if (b.s == CUDNN_STATUS_SUCCESS) b.s = cudnnBackendExecute(h, plan, vp);
    kn_dnn_drop(&vp);
    return b.s;
}

char *kn_dnn_plan_text(cudnnBackendDescriptor_t plan, size_t *n) {
    int64_t len = 0, got = 0;
    if (cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, &len, NULL) !=
            CUDNN_STATUS_SUCCESS ||
        len <= 1 || (uint64_t)len > KN_CU_TUNE_BIG_MAX)
        return NULL;
    char *text = calloc((size_t)len + 1, 1);
    if (!text) return NULL;
    if (cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, len, &got, text) !=
        CUDNN_STATUS_SUCCESS) {
        free(text);
        return NULL;
    }
    *n = strlen(text);
    return text;
}

cudnnBackendDescriptor_t kn_dnn_plan_from_text(cudnnHandle_t h, const uint8_t *text, size_t n, size_t max_ws, int64_t *ws,
                                               char *why, size_t cap) {
    kn_dnn_builder b = KN_DNN_BUILDER_INIT;
    cudnnBackendDescriptor_t plan = kn_dnn_make(&b, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "plan");
    kn_dnn_set(&b, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "plan");
    kn_dnn_set(&b, plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, (int64_t)n, text, "plan's text");
    kn_dnn_finish(&b, plan, "plan");
    int64_t got = 0;
    if (b.s == CUDNN_STATUS_SUCCESS)
        b.s = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, ws);
    if (b.s != CUDNN_STATUS_SUCCESS) {
        snprintf(why, cap, "%s: %s", b.what ? b.what : "workspace size", cudnnGetErrorString(b.s));
        kn_dnn_drop(&plan);
    } else if (*ws > (int64_t)max_ws) {
        snprintf(why, cap, "it needs %lld bytes of workspace, the lane has %zu", (long long)*ws, max_ws);
        kn_dnn_drop(&plan);
    }
    return plan;
}

#endif

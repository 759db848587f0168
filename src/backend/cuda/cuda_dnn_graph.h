/* Building and running cuDNN operation graphs through the backend (graph) API: the descriptor
 * steps, tensors, pointwise operations, plans and variant packs that cuda_conv_graph.c (FusedConv
 * with its epilogue) and cuda_sdpa.c (fused attention) share. A builder carries the first failure:
 * every step after it does nothing, and `what` names the step for the message. */
#ifndef KILN_CUDA_DNN_GRAPH_H
#define KILN_CUDA_DNN_GRAPH_H

#include "backend/cuda/cuda_backend.h"

#ifdef KILN_HAVE_CUDNN

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kn_dnn_builder {
    cudnnStatus_t s;
    const char *what; /* the step that failed */
} kn_dnn_builder;

#define KN_DNN_BUILDER_INIT {CUDNN_STATUS_SUCCESS, NULL}

cudnnBackendDescriptor_t kn_dnn_make(kn_dnn_builder *b, cudnnBackendDescriptorType_t type, const char *what);
void kn_dnn_set(kn_dnn_builder *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t n, const void *v, const char *what);
void kn_dnn_finish(kn_dnn_builder *b, cudnnBackendDescriptor_t d, const char *what);
void kn_dnn_drop(cudnnBackendDescriptor_t *d); /* destroys *d (when set) and clears it */

/* A tensor of `rank` dims and strides (elements), 16-byte aligned. by_value: a scalar passed by
 * its host address in the variant pack. */
cudnnBackendDescriptor_t kn_dnn_tensor(kn_dnn_builder *b, int64_t uid, cudnnDataType_t dt, int rank, const int64_t *dims,
                                       const int64_t *strides, bool is_virtual, bool by_value, const char *what);

/* A pointwise operation y = mode(x [, other]) computed in float; its pointwise descriptor goes to
 * *pw_out (the caller drops both). */
cudnnBackendDescriptor_t kn_dnn_pointwise(kn_dnn_builder *b, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t other, cudnnBackendDescriptor_t y,
                                          cudnnBackendDescriptor_t *pw_out, const char *what);

/* The operation graph of ops[0..n) on handle h (dynamic: with dynamic shapes). */
cudnnBackendDescriptor_t kn_dnn_op_graph(kn_dnn_builder *b, cudnnHandle_t h, cudnnBackendDescriptor_t *ops, int n,
                                         bool dynamic);

/* Up to `want` engine configs that cuDNN's heuristics (in mode `mode`) rank for graph, best
 * first, into cfgs (made here; the caller drops every one of the `want`); their count. */
int64_t kn_dnn_engine_configs(kn_dnn_builder *b, cudnnBackendDescriptor_t graph, cudnnBackendDescriptor_t *cfgs,
                              int64_t want, cudnnBackendHeurMode_t mode);

/* The number of engines cuDNN has for graph (by global index), or 0. */
int64_t kn_dnn_engine_count(cudnnBackendDescriptor_t graph);

/* The default config of engine `index` for graph, or NULL where that engine does not take it. */
cudnnBackendDescriptor_t kn_dnn_engine_config(cudnnBackendDescriptor_t graph, int64_t index);

/* The execution plan of engine config cfg (binding kernel cache kc, when not NULL) and its
 * workspace size, or NULL where cuDNN does not build it. */
cudnnBackendDescriptor_t kn_dnn_plan(cudnnHandle_t h, cudnnBackendDescriptor_t cfg, cudnnBackendDescriptor_t kc,
                                     int64_t *ws);

/* Runs plan with the tensors uids[i] at ptrs[i] and workspace ws. */
cudnnStatus_t kn_dnn_execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, int n, const int64_t *uids, void *const *ptrs,
                             void *ws);

/* plan's serialized form (malloc'ed text, *n bytes without the terminator), or NULL. */
char *kn_dnn_plan_text(cudnnBackendDescriptor_t plan, size_t *n);

/* A plan made from its serialized form on handle h, or NULL with why; at most max_ws bytes of
 * workspace. */
cudnnBackendDescriptor_t kn_dnn_plan_from_text(cudnnHandle_t h, const uint8_t *text, size_t n, size_t max_ws, int64_t *ws,
                                               char *why, size_t cap);

#endif
#endif

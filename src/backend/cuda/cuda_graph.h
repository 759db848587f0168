/* CUDA graphs and caller memory for the CUDA backend (cuda_graph.c): capture of a run's work on
 * a lane's stream into a replayable graph, the memory reserved for it, the copies a graph run
 * needs (inputs in, outputs out), and the check of caller device pointers.
 *
 * Memory while capturing: a graph replays at the addresses it was recorded with, so every block
 * the captured run frees goes to the capture's own free list instead of the allocator's, and the
 * captured run's later allocations are served from there first. Those blocks stay reserved until
 * the graph is destroyed; blocks still held by tensors at the end of the capture (the graph's
 * outputs and input buffers) are reserved by being held. Nothing else can be handed a reserved
 * block, so no other run, constant or caller tensor can overwrite what a replay reads. */
#ifndef KN_CUDA_GRAPH_H
#define KN_CUDA_GRAPH_H

#include "backend/cuda/cuda_backend.h"

typedef struct kn_cu_capture kn_cu_capture;

/* For the allocator, with cu->mu held. take: a reserved free block of at least `need` bytes (and
 * at most twice that), or NULL. keep: takes a freed block into the reservation. */
void *kn_cu_capture_take(kn_cu_capture *cap, size_t need, size_t *size_out);
void kn_cu_capture_keep(kn_cu_capture *cap, void *p, size_t size);
/* A host source for a copy recorded into the graph: a pinned copy of `bytes` at `host`, owned by the
 * graph (a replay reads it again, so it must hold the same bytes for the graph's lifetime). */
kiln_status kn_cu_capture_stage(kn_cuda *cu, const void *host, size_t bytes, const void **staged);

/* Backend-interface entries (see backend.h). */
kiln_status kn_cu_check_pointer(const void *data, size_t bytes, int device_id);
kiln_status kn_cu_copy(void *state, const kn_tensor *src, kn_tensor *dst);
kiln_status kn_cu_capture_begin(void *state);
kiln_status kn_cu_capture_end(void *state, bool ok, void **graph_out);
kiln_status kn_cu_graph_launch(void *state, void *graph);
void kn_cu_graph_destroy(void *state, void *graph);

/* From cuda_backend.c: a reserved block goes back to the allocator's free list. */
void kn_cu_unreserve_block(kn_cuda *cu, void *p, size_t size);

#endif

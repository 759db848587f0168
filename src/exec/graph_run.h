/* Captured runs (graph_run.c): a session's runs recorded into device graphs and replayed. */
#ifndef KN_GRAPH_RUN_H
#define KN_GRAPH_RUN_H

#include "backend/backend.h"
#include "exec/exec.h"
#include "exec/session.h"

struct kn_ctx_graphs;

/* A call's context as the session pools it (session.c): the executor's part (exec.h), the lane of
 * each device backend (backend.h lane_open: opened at the context's first call, closed with the
 * session) and the runs recorded on those lanes (below). A context keeps its lanes, so the graphs
 * it records replay on the stream, with the memory and the host arena, they were recorded with. */
typedef struct kn_call_ctx {
    kn_run_ctx run; /* first: the session's free list holds &run */
    void *lanes[KN_MAX_PROVIDERS + 1];
    struct kn_ctx_graphs *graphs; /* NULL until the context's first recordable call */
} kn_call_ctx;

/* Frees what a context recorded (its graphs' device memory goes back to its lane); before the lanes
 * are closed and the backends destroyed. */
void kn_ctx_graphs_free(kiln_session *s, kn_call_ctx *c);

/* Decides, once the nodes are placed, whether the session's runs are recorded (s->graphs, NULL
 * when not; the reason is logged at info level). Also checks the output-device option. */
kiln_status kn_graph_cache_create(kiln_session *s);
void kn_graph_cache_destroy(kiln_session *s);

/* Runs the main graph with bound inputs (one per graph input, NULL = its default) in the call's
 * context (its lanes bound to the calling thread). outs: one slot
 * per graph output. *borrowed false: outs are the caller's, as kn_exec_graph_flags with `flags`
 * gives them. *borrowed true: a graph was replayed and outs are its own values (device tensors in
 * its memory, or host values): not to be freed, and complete only once the device's stream is
 * waited for; copy them out (an output the graph wrote into the caller's tensor is that tensor:
 * nothing to copy). into: the caller's tensors per graph output (for a run that is not replayed nor
 * recorded, kn_exec_graph_ctx; device ones are written by a graph made for the caller's buffers),
 * or NULL. */
kiln_status kn_session_execute(kiln_session *s, kn_call_ctx *ctx, kn_tensor *const *bound, kn_tensor **outs,
                               unsigned flags, bool *borrowed, kn_tensor *const *into);

/* The session's backend instance for tensors on `device` (NULL: none). */
const kn_backend *kn_session_device_backend(const kiln_session *s, kn_device device);

/* For tests and tools: whether runs may be captured, graphs held (by all the session's contexts),
 * graph launches so far. */
void kn_graph_run_stats(const kiln_session *s, bool *enabled, int *graphs, uint64_t *launches);
/* Of those launches, the ones of graphs made for the caller's buffers (read and written in place). */
uint64_t kn_graph_run_in_place_launches(const kiln_session *s);
/* Whether a provider of the session still does work beside the runs that will make later runs
 * faster (backend.h: background_busy). */
bool kn_session_background_busy(const kiln_session *s);

#endif

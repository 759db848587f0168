/* Captured runs (graph_run.c): a session's runs recorded into device graphs and replayed. */
#ifndef KN_GRAPH_RUN_H
#define KN_GRAPH_RUN_H

#include "backend/backend.h"
#include "exec/session.h"

/* Decides, once the nodes are placed, whether the session's runs are recorded (s->graphs, NULL
 * when not; the reason is logged at info level). Also checks the output-device option. */
kiln_status kn_graph_cache_create(kiln_session *s);
void kn_graph_cache_destroy(kiln_session *s);

/* Runs the main graph with bound inputs (one per graph input, NULL = its default) in the call's run
 * context (exec.h; the caller holds the session's device lock when it has a device). outs: one slot
 * per graph output. *borrowed false: outs are the caller's, as kn_exec_graph_flags with `flags`
 * gives them. *borrowed true: a graph was replayed and outs are its own values (device tensors in
 * its memory, or host values): not to be freed, and complete only once the device's stream is
 * waited for; copy them out. into: the caller's tensors per graph output for a run that is not
 * replayed nor recorded (kn_exec_graph_ctx), or NULL. */
kiln_status kn_session_execute(kiln_session *s, struct kn_run_ctx *ctx, kn_tensor *const *bound, kn_tensor **outs,
                               unsigned flags, bool *borrowed, kn_tensor *const *into);

/* The session's backend instance for tensors on `device` (NULL: none). */
const kn_backend *kn_session_device_backend(const kiln_session *s, kn_device device);

/* For tests and tools: whether runs may be captured, graphs held, graph launches so far. */
void kn_graph_run_stats(const kiln_session *s, bool *enabled, int *graphs, uint64_t *launches);

#endif

/* The memory plan: where each intermediate tensor of the main graph lives in one host arena.
 *
 * A value's bytes are in use from the node that makes it to its last reader (in the executor's
 * order), and two values share bytes when those intervals do not meet; slots go first fit, largest
 * first. A run then takes its host intermediates from the session's arena at their planned
 * offsets: no allocation, no pool look-up, and a footprint known in advance.
 *
 * Where the graph's inputs have static shapes the plan is made when the session is compiled, from
 * the inferred types, and kept in the compiled file (section "memory.plan"). Where an input has a
 * symbolic dim the sizes are known only at run time: the first run with a set of input shapes
 * records every host intermediate's bytes, and a plan made from them serves the later runs with
 * the same shapes (up to KN_MEMPLAN_SHAPED sets, the least recently used replaced), as CUDA graphs
 * do. A value larger at run time than its slot (a data-dependent shape) is allocated as before.
 *
 * Planned: the outputs of nodes that run on the host (or that a device kernel writes on the host)
 * whose type is a static, non-string tensor, that are not graph outputs (those are handed to the
 * caller) and not read by a subgraph by name. A view (Reshape, Flatten, Squeeze, Unsqueeze,
 * Identity) of a planned value read by nobody else takes that value's bytes over, as the runtime
 * takes its tensor (exec.c), so the two share one slot and one interval. Everything else, device
 * memory included (CUDA's caching allocator and its recorded graphs plan that), is allocated as
 * before. */
#ifndef KN_MEMPLAN_H
#define KN_MEMPLAN_H

#include "ir/graph.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kn_runtime;

#define KN_MEMPLAN_ALIGN 64
#define KN_MEMPLAN_SHAPED 4

typedef struct kn_memplan {
    int n_values;     /* the main graph's value count the plan was made for */
    int64_t *offset;  /* per value: byte offset in the arena, -1 when not planned */
    int64_t *size;    /* per value: bytes of its slot (a multiple of KN_MEMPLAN_ALIGN) */
    int32_t *alias;   /* per value: the planned value whose slot a view takes over, else -1 */
    uint64_t arena_bytes;    /* the arena: the highest end of any slot */
    uint64_t unshared_bytes; /* the planned values each in a block of its own */
    int n_planned;           /* values with a slot of their own */
    int n_aliases;           /* views that take a slot over */
    int64_t *sig;            /* a run-time plan's input shapes (kn_memplan_signature), else NULL */
    int sig_len;
    uint64_t last_used;      /* a run-time plan's last run (for replacing the least recently used) */
} kn_memplan;

/* Whether output o of node n is allocated on the host by the executor (the values a plan covers). */
bool kn_memplan_host_output(const struct kn_runtime *rt, const kn_node *n, int o);

/* Plans the main graph g (placed on rt's providers, shapes inferred). bytes: per value, what a run
 * allocated for it (0: nothing), or NULL to plan from the static types. *out is NULL when nothing
 * is planned (no value qualifies). */
kiln_status kn_memplan_build(const kn_graph *g, const struct kn_runtime *rt, const int64_t *bytes, kn_memplan **out);
/* A run's input shapes as a signature (dtype, rank, dims of each); *len its length. NULL on OOM. */
int64_t *kn_memplan_signature(const kn_graph *g, kn_tensor *const *inputs, int *len);
/* An empty plan for n_values values (nothing planned: offsets and aliases -1), or NULL on OOM. */
kn_memplan *kn_memplan_new(int n_values);
void kn_memplan_free(kn_memplan *p);
/* The plan's sizes at debug level: "memory plan (what): N host intermediates in X MB (...)". */
void kn_memplan_log(const kn_memplan *p, const char *what);

/* Whether value v of g may have a slot: made by a live node on the host, a non-string tensor of
 * static shape (any shape when dynamic), not a graph output, not read by a subgraph (pinned: from
 * kn_memplan_pinned). */
bool kn_memplan_eligible(const kn_graph *g, const struct kn_runtime *rt, int v, const bool *pinned, bool dynamic);
/* Per value of g: read by name inside a subgraph (kept whole runs long, so never planned). NULL on
 * failure to allocate; the caller frees it. */
bool *kn_memplan_pinned(const kn_graph *g);
/* The bytes of a slot for a static tensor type: its elements rounded up to KN_MEMPLAN_ALIGN. */
int64_t kn_memplan_slot_bytes(const kn_type *t);

#endif

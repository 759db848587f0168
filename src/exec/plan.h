/* The compiled plan: what a run walks, made once when the session is created and never changed
 * after. Per graph (the main graph and every control-flow body, at any depth), one step per live
 * node in run order: the node, its kernel (the CPU kernel's function called directly, or the
 * device backend's entry), the traits the executor asks about at every node (a view, writes every
 * output element, runs on a device), and the attributes its kernel's prepare hook read
 * (kn_params). Concurrent runs share it read-only; what a call mutates (value slots, the memory
 * plan's arena, the shape memo with its per-shape prepared blocks, scratch, device lanes) is in
 * its run context (exec.h: kn_run_ctx, which points at the session's plan).
 *
 * Output shapes are not in the steps: a graph's declared types may state a data-dependent dim as
 * fixed, so the shapes a run can skip inferring are found by the first run with a set of input
 * shapes (the shape memo, per run context). */
#ifndef KN_PLAN_H
#define KN_PLAN_H

#include "exec/kernel.h"
#include "ir/graph.h"

struct kn_runtime;
struct kn_backend;

enum {
    KN_STEP_VIEW = 1u << 0,       /* kn_exec_is_view: may take its input's tensor over */
    KN_STEP_OVERWRITES = 1u << 1, /* the kernel writes every output element: outputs not zeroed */
    KN_STEP_DEVICE = 1u << 2,     /* runs on a device backend (inputs placed, outputs there) */
    KN_STEP_UNPLACED = 1u << 3,   /* a runtime's node without a provider or kernel: an internal error */
    KN_STEP_SUBGRAPH = 1u << 4,   /* runs a subgraph (If, Loop, Scan, ...) */
};

typedef struct kn_step {
    const kn_node *node;
    int idx;                      /* the node's index in its graph */
    unsigned flags;               /* KN_STEP_* */
    kn_kernel_fn cpu;             /* the CPU kernel, called directly; NULL: through be->ops->run */
    const struct kn_backend *be;  /* the node's provider instance; NULL in a run without a runtime */
    const kn_params *params;      /* its attributes, read at compile time, or NULL */
} kn_step;

/* What a run reads of each value at every node, packed (a kn_value holds its whole type: reading
 * its use count at each node cost a cache line per value). */
typedef struct kn_plan_value {
    kn_tensor *constant; /* the initializer or folded constant, or NULL */
    int uses;            /* kn_value.uses */
    bool outer;          /* kn_value.is_outer */
} kn_plan_value;

typedef struct kn_graph_plan {
    const kn_graph *g;
    kn_step *steps;
    int n_steps;
    kn_plan_value *values; /* per value id */
} kn_graph_plan;

typedef struct kn_plan {
    kn_graph_plan *graphs; /* [0]: the main graph, then the bodies */
    int n_graphs, cap_graphs;
} kn_plan;

/* The plan of g and its bodies for the session's runtime rt (NULL: every node on the CPU kernel
 * kn_graph_assign_cpu chose). params: whether kernels' prepare hooks run (a session's plan) or
 * not (a plan made for one run). */
kiln_status kn_plan_build(const kn_graph *g, const struct kn_runtime *rt, bool params, kn_plan **out);
/* The steps of graph g, or NULL when the plan has none for it. */
const kn_graph_plan *kn_plan_find(const kn_plan *p, const kn_graph *g);
void kn_plan_free(kn_plan *p);

#endif

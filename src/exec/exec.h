/* The executor: runs a graph's nodes in order on the kernels chosen at compile time.
 *
 * Each run infers concrete output shapes with the ops' infer functions (cheap, and exact
 * because every input value is known), allocates outputs, calls the kernel, and frees each
 * intermediate value after its last use. Subgraphs (If/Loop/Scan bodies) run through
 * kn_exec_subgraph with the enclosing run as their outer scope. */
#ifndef KN_EXEC_H
#define KN_EXEC_H

#include "exec/kernel.h"
#include "ir/graph.h"

typedef struct kn_exec {
    const kn_graph *graph;
    kn_tensor **slots;      /* per value id: the value in this run (borrowed or owned) */
    unsigned char *owned;   /* per value id: 1 when slots[i] is owned by this run */
    int *remaining;         /* per value id: uses left in this run */
    kn_threadpool *pool;
    kn_buffer_pool *buffers; /* where intermediate tensors' memory comes from (may be NULL) */
    struct kn_exec *parent;  /* enclosing run, for outer-scope values */
    struct kn_runtime *rt;   /* the session's backends (NULL: every node has a CPU kernel) */
    kn_tensor **alt;         /* per value id: its copy on the other side (host/device), owned */
    const struct kn_memplan *plan; /* the main graph's memory plan, for its run (else NULL) */
    unsigned char *arena;          /* the plan's memory (NULL: the plan is not used) */
    int64_t *record;               /* per value id: bytes allocated for it on the host (a run making a plan) */
} kn_exec;

/* Resolves schemas (kn_op_find) for every node of g and its subgraphs; an unknown operator or
 * opset is KILN_ERR_UNSUPPORTED naming the node, the domain, the op and the opset. */
kiln_status kn_graph_resolve(kn_graph *g);
/* Chooses the CPU kernel of every node of g and its subgraphs (node->kernel); a node with none is
 * KILN_ERR_UNSUPPORTED naming it and the reason. */
kiln_status kn_graph_assign_cpu(kn_graph *g);
/* Static shape inference over g (and subgraphs): fills value types; folds small constant
 * subexpressions to learn shapes. Errors name the node. */
kiln_status kn_graph_infer(kn_graph *g);

/* Runs g. inputs: one per g->inputs entry (borrowed; NULL = use the initializer default).
 * outputs: one slot per g->outputs entry, each receives a new tensor the caller owns (never
 * tied to `buffers`). */
kiln_status kn_exec_graph(const kn_graph *g, kn_threadpool *pool, kn_buffer_pool *buffers, kn_exec *parent,
                          kn_tensor *const *inputs, kn_tensor **outputs);
/* The same with the session's backends: each node runs on rt->backends[node->provider]; inputs
 * on the wrong side are copied (once per run; constants once per session); outputs come back on
 * the host. */
kiln_status kn_exec_graph_rt(const kn_graph *g, struct kn_runtime *rt, kn_threadpool *pool,
                             kn_buffer_pool *buffers, kn_exec *parent, kn_tensor *const *inputs,
                             kn_tensor **outputs);
/* kn_exec_graph_rt with flags: KN_EXEC_DEVICE_OUTPUTS leaves outputs computed on a device there
 * (without waiting for them). */
enum { KN_EXEC_DEVICE_OUTPUTS = 1u << 0 };
kiln_status kn_exec_graph_flags(const kn_graph *g, struct kn_runtime *rt, kn_threadpool *pool,
                                kn_buffer_pool *buffers, kn_exec *parent, kn_tensor *const *inputs,
                                kn_tensor **outputs, unsigned flags);
/* For control-flow kernels: runs `body` with the given inputs (borrowed, one per body input)
 * and the current run as outer scope; outputs as for kn_exec_graph. */
kiln_status kn_exec_subgraph(kn_kernel_ctx *c, const kn_graph *body, kn_tensor *const *inputs,
                             int n_inputs, kn_tensor **outputs, int n_outputs);
/* Operators whose output is their first input's elements under another shape (Reshape, Flatten,
 * Squeeze, Unsqueeze, Identity): a run hands such a node its input's tensor when it is that
 * tensor's last reader, and the memory plan gives the two one slot. */
bool kn_exec_is_view(const kn_node *n);
/* The type of a runtime value, for infer calls. */
void kn_type_of_tensor(const kn_tensor *t, kn_type *out);

#endif

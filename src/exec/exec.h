/* The executor: runs a graph's nodes in order on the kernels chosen at compile time.
 *
 * A run gets each node's concrete output types (from the ops' infer functions, exact because
 * every input value is known), allocates outputs, calls the kernel, and frees each intermediate
 * value after its last use. The main graph's first run with a set of input shapes also finds which
 * nodes' output types follow from those shapes alone (not from data) and keeps them (the shape
 * memo, per run context and input-shape set): later runs with those shapes infer only the nodes
 * whose shapes depend on data (NonZero, a Reshape or Range fed by an input's values, control flow)
 * and what reads them. Control-flow bodies keep theirs per body graph and body input shapes (from
 * the second run with those shapes: a Loop whose carried shapes change at each iteration keeps none). Subgraphs (If/Loop/Scan bodies) run through
 * kn_exec_subgraph with the enclosing run as their outer scope. */
#ifndef KN_EXEC_H
#define KN_EXEC_H

#include "exec/kernel.h"
#include "ir/graph.h"

struct kn_memplan;
struct kn_shape_memo;

/* What one call of a session mutates, kept apart from the compiled session (which is immutable
 * while runs go on and shared by them): the memory-plan arena, the plans made for input shapes
 * seen at run time, and the call's bounds. A session keeps a pool of them (session.c): a call
 * takes one on entry and gives it back on return. */
typedef struct kn_run_ctx {
    struct kn_run_ctx *next; /* in the session's free list */
    const struct kn_plan *plan; /* the session's compiled plan (exec/plan.h; shared, read only), or NULL */
    unsigned char *arena;    /* the plans' host memory (the largest one used so far) */
    uint64_t arena_bytes;
    struct kn_memplan *shaped[4]; /* plans made by runs, one per input-shape set (KN_MEMPLAN_SHAPED) */
    struct kn_shape_memo *shapes[4]; /* output types known from the input shapes, one per input-shape set */
    struct kn_body_memos **bodies;   /* the same for control-flow bodies, per body graph */
    int n_bodies;
    /* the session's switches, read from the environment as it was made (session.h; getenv on
     * each call's path was 2-3% of a one-node run): kn_run_ctx_begin clears them, run_common sets
     * them */
    bool memo_off;                   /* KILN_SHAPE_MEMO=0 */
    bool memplan_off;                /* KILN_MEMORY_PLAN=0 */
    uint64_t bytes_limit;            /* kn_tensor_bytes_limit() then (0: read it at the run) */
    uint64_t runs;
    /* the current call's bounds (kn_run_ctx_begin) */
    const int *terminate;   /* the run options' flag (atomic), or NULL */
    double deadline_ms;     /* kn_now_ms() time the call must end by; 0 = none */
    int64_t timeout_ms;     /* as given, for the message */
    double started_ms;
    int stop;               /* atomic: 0, or KILN_ERR_CANCELLED / KILN_ERR_DEADLINE once seen (sticky) */
    /* headers of views of the arena that runs of this context released, for the next outputs placed
     * there (a run makes one header per node output: malloc, checks and free were a fifth of a
     * tiny-node run); freed with the context */
    kn_tensor **spare;
    int n_spare;
    /* small tensors of the session's buffer pool that runs of this context released (a Loop
     * body's values, which no memory plan places), header and block kept together for the next
     * output that fits */
    kn_tensor **spare_blocks;
    int n_spare_blocks;
    /* graph runs' per-value arrays given back (a Loop body's run makes them at each iteration) */
    void *arrays[4];
    size_t arrays_bytes[4];
    int n_arrays;
    int64_t mem_limit;      /* bytes a run may hold (0 = no limit) */
    int64_t mem_live;       /* bytes the run holds now */
    int64_t mem_peak;
} kn_run_ctx;

/* Prepares c for a call: its bounds (terminate: an atomic int flag or NULL; timeout_ms 0 = none;
 * mem_limit 0 = none). */
void kn_run_ctx_begin(kn_run_ctx *c, const int *terminate, int64_t timeout_ms, int64_t mem_limit);
/* Frees a context's memory (not the struct's own, when embedded). */
void kn_run_ctx_clear(kn_run_ctx *c);
/* Whether the call must stop now (terminate set or deadline passed); records it (sticky). For
 * any thread. */
bool kn_run_ctx_stopping(kn_run_ctx *c);
/* For kernels with long loops of their own: KILN_ERR_CANCELLED or KILN_ERR_DEADLINE (with the
 * message) when the run must stop, else KILN_OK. */
kiln_status kn_exec_check_stop(const kn_kernel_ctx *c);

/* A value handed by a subgraph run to its operator's kernel (Loop, Scan, If), still counted in
 * the run's memory until the kernel passes it back in or the node ends. */
typedef struct kn_handed {
    const kn_tensor *t;
    int64_t bytes;
} kn_handed;

typedef struct kn_exec {
    const kn_graph *graph;
    const struct kn_plan_value *pv; /* the graph's values as its plan packs them (exec/plan.h) */
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
    kn_run_ctx *run;               /* the call's context (inherited by subgraph runs), or NULL */
    kn_handed *handed;             /* values subgraph runs handed to the current node's kernel */
    int n_handed, cap_handed;
    int64_t handed_bytes;          /* the rest they handed it (kept by the kernel until the node ends) */
    /* per value id of the main graph: the caller's host tensor (kiln_session_run_into) its node
     * writes into, or NULL; the array itself is NULL when no output is written in place */
    kn_tensor **direct;
    /* the main graph's shape memo for this run's input shapes (exec.c), or NULL; `rec`: the one
     * this run makes (first run with these shapes) */
    struct kn_shape_memo *memo; /* (its types are read only; its kernels' prepared blocks change) */
    struct kn_shape_memo *rec;
    struct kn_shape_memo **memo_home; /* where rec goes when the run succeeds (KN_MEMPLAN_SHAPED places) */
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
/* kn_exec_graph_flags within a run context (the main graph of a session's call: its memory plan
 * and arena come from ctx, and its bounds are checked).
 *
 * into: NULL, or one entry per graph output: the caller's tensor (kiln_session_run_into; borrowed,
 * may be NULL) that the node making that output writes straight into, where it can: a host tensor
 * whose element type and shape are those the node computes, made by a host node (no subgraph
 * operator), not overlapping an input or another caller tensor; a graph input, an initializer or
 * a value given for two outputs is left to the caller's copy. A view node (Reshape, Flatten, ...)
 * that makes such an output from a value nobody else reads passes the binding on to that value's
 * node. outputs[i] is then a view of into[i]'s memory (its data pointer is into[i]'s), else a
 * tensor to copy from, as without into. Written in place as each node runs: on an error the
 * caller's tensors may hold part of the results. */
kiln_status kn_exec_graph_ctx(const kn_graph *g, struct kn_runtime *rt, kn_threadpool *pool, kn_buffer_pool *buffers,
                              kn_run_ctx *ctx, kn_tensor *const *inputs, kn_tensor **outputs, unsigned flags,
                              kn_tensor *const *into);
/* For control-flow kernels: runs `body` with the given inputs (borrowed, one per body input)
 * and the current run as outer scope; outputs as for kn_exec_graph. */
kiln_status kn_exec_subgraph(kn_kernel_ctx *c, const kn_graph *body, kn_tensor *const *inputs,
                             int n_inputs, kn_tensor **outputs, int n_outputs);
/* For control-flow kernels: frees t, a value a subgraph run handed to the kernel that it no longer
 * needs (a Loop's previous carried state, its condition), or keeps it for the run context's next
 * output of that size (a small host tensor of the session's buffer pool: no pool lock, no
 * allocation at the next iteration). */
void kn_exec_discard(kn_kernel_ctx *c, kn_tensor *t);
/* Operators whose output is their first input's elements under another shape (Reshape, Flatten,
 * Squeeze, Unsqueeze, Identity): a run hands such a node its input's tensor when it is that
 * tensor's last reader, and the memory plan gives the two one slot. */
bool kn_exec_is_view(const kn_node *n);
/* How many infer calls runs made on this thread so far (the run path's shape inference, subgraph
 * runs included): for tests that check a run infers only what depends on data. */
uint64_t kn_exec_infer_count(void);
/* How many graph runs on this thread made a plan of their own (exec/plan.h) because their run
 * context had none for the graph: for tests that check a session's runs, bodies included, walk
 * the session's plan. */
uint64_t kn_exec_plan_count(void);
/* The type of a runtime value, for infer calls. */
void kn_type_of_tensor(const kn_tensor *t, kn_type *out);

#endif

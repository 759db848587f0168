/* The kernel interface shared by backends: what a kernel receives when a node runs. */
#ifndef KN_KERNEL_H
#define KN_KERNEL_H

#include "ir/graph.h"
#include "util/status.h"
#include "util/threadpool.h"

#include <stddef.h>
#include <string.h>

struct kn_exec;

/* Attributes read once, at compile time: a kernel's prepare hook (kn_cpu_kernel.prepare) fills its
 * parameter block from the node alone (attributes, opset, op type: never shapes, types or data).
 * The compiled plan (exec/plan.h) keeps the block per node, immutable and shared by concurrent
 * runs; the kernel reads it through kn_ctx_params. A failing hook keeps no block: the kernel's own
 * call then fails with the hook's error, at run time as before. */
typedef kiln_status (*kn_params_fn)(const kn_node *n, void *params);

typedef struct kn_params {
    kn_params_fn fn;     /* the hook that made it (the kernel's tag) */
    const kn_node *node; /* the node it was made from */
    max_align_t data[];  /* the kernel's parameter struct */
} kn_params;

typedef struct kn_kernel_ctx {
    const kn_node *node;
    const kn_graph *graph;
    int n_inputs;
    kn_tensor *const *in; /* in[i] NULL for an omitted optional input */
    int n_outputs;
    /* out[i] is allocated by the executor (zeroed, with the shape the op's infer function gave)
     * before the kernel runs, when that shape is static. It is NULL when infer could not know it
     * (data-dependent shapes, sequences): the kernel then calls kn_ctx_output. */
    kn_tensor **out;
    kn_threadpool *pool;  /* intra-op threads */
    struct kn_exec *exec; /* for subgraphs (If/Loop/Scan) */
    /* Where the kernel may keep what it prepares from the node and its inputs' shapes and types
     * (a broadcast plan: never data or addresses), so that runs with the same input shapes do not
     * prepare it again; NULL: prepare at each call. *prep is NULL or a block a kernel stored there
     * with kn_ctx_prep_put; the run context's shape memo holds it and frees it (free()). A block
     * is found only through kn_ctx_prep_get with the same tag, node and key, so a fused kernel
     * that passes a copy of its context to another kernel does not hand it the wrong one. */
    void **prep;
    /* The node's attributes as its kernel's prepare hook read them at compile time, or NULL (a
     * run without a compiled plan, a kernel without a hook): read with kn_ctx_params. */
    const kn_params *params;
} kn_kernel_ctx;

/* The kernel's parameters for c->node: the block its hook `fn` made at compile time when the plan
 * holds one for this node and hook, else `local` (the kernel's own struct) filled by fn now (a
 * fused kernel's copy of its context for another node, a run without a plan). *out points to one
 * of the two; fn's error otherwise. */
static inline kiln_status kn_ctx_params(const kn_kernel_ctx *c, kn_params_fn fn, void *local, const void **out) {
    const kn_params *p = c->params;
    if (p && p->fn == fn && p->node == c->node) {
        *out = p->data;
        return KILN_OK;
    }
    *out = local;
    return fn(c->node, local);
}

/* In a kernel: declares `const type *name`, c's block for hook fn as kn_ctx_params gives it (with a
 * local `type` for the fallback), returning fn's error from the kernel. */
#define KN_CTX_PRM(c, fn, type, name)                                                              \
    type name##_local;                                                                             \
    const type *name;                                                                              \
    KN_TRY(kn_ctx_params((c), (fn), &name##_local, (const void **)&name))

/* A parameter block handed to a call for another node than the plan's (a fused kernel's proxy
 * node, a layer's node): the header and the hook's struct, on the caller's stack. */
#define KN_PARAMS_HANDED_MAX 512
typedef union kn_params_handed {
    kn_params h;
    max_align_t a;
    unsigned char b[sizeof(kn_params) + KN_PARAMS_HANDED_MAX];
} kn_params_handed;
/* Fills blk with the block fn made (data, bytes of it) for node, for a kn_kernel_ctx's params; NULL
 * (the call runs fn itself) when bytes is over KN_PARAMS_HANDED_MAX. */
static inline const kn_params *kn_params_hand(kn_params_handed *blk, kn_params_fn fn, const kn_node *node,
                                              const void *data, size_t bytes) {
    if (bytes > KN_PARAMS_HANDED_MAX) return NULL;
    blk->h.fn = fn;
    blk->h.node = node;
    memcpy(blk->h.data, data, bytes);
    return &blk->h;
}

/* The block stored for tag (the address of a kernel's own static object), c->node and the key
 * bytes (what the preparation depends on: shapes, types), or NULL. */
const void *kn_ctx_prep_get(const kn_kernel_ctx *c, const void *tag, const void *key, size_t key_bytes);
/* Stores a copy of `bytes` bytes of data under tag, c->node and the key (replacing what was there);
 * does nothing without a place (c->prep NULL) or memory. */
void kn_ctx_prep_put(kn_kernel_ctx *c, const void *tag, const void *key, size_t key_bytes, const void *data,
                     size_t bytes);

typedef kiln_status (*kn_kernel_fn)(kn_kernel_ctx *c);

/* Output i with this dtype and shape: returns the preallocated tensor when it matches, otherwise
 * (re)allocates it. For sequences/optionals a kernel builds the value itself and stores it in
 * c->out[i] (freeing any previous one). */
kiln_status kn_ctx_output(kn_kernel_ctx *c, int i, kiln_dtype dtype, int rank, const int64_t *dims,
                          kn_tensor **out);
/* Scratch memory for a kernel's own use during one call (an im2col matrix, a converted copy,
 * score buffers): `bytes` bytes, 64-byte aligned, not zeroed. Bounded as tensors are: more than
 * the tensor size limit (kn_tensor_bytes_limit: the machine's memory or KILN_MAX_TENSOR_BYTES), or
 * more than the run's memory limit leaves room for (kiln_session_options_set_memory_limit; the
 * values the run holds count), is KILN_ERR_OUT_OF_MEMORY with a message naming the node, `what`
 * ("the im2col matrix"), the size and the limit, instead of an allocation without bound. While
 * held it counts in the run's memory. Any thread of the call may ask; free with
 * kn_ctx_scratch_free(c, p, bytes). */
kiln_status kn_ctx_scratch(kn_kernel_ctx *c, size_t bytes, const char *what, void **out);
void kn_ctx_scratch_free(kn_kernel_ctx *c, void *p, size_t bytes);

/* An error prefixed with the node label and the input shapes. */
kiln_status kn_kernel_error(const kn_kernel_ctx *c, kiln_status status, const char *fmt, ...) KN_PRINTF(3, 4);

#endif

/* Operator schemas: what an operator is (inputs, outputs, opset range) and how its output types
 * follow from its input types. Backends register kernels separately (src/backend/<name>/).
 *
 * Each operator family lives in its own file (src/ops/<family>.c) and exports one table,
 * `const kn_op_schema kn_ops_<family>[]`, ended by an entry with op_type NULL. The registry
 * (src/ops/registry.c) lists the family tables; adding an operator touches only its family file. */
#ifndef KN_OP_H
#define KN_OP_H

#include "ir/graph.h"
#include "util/status.h"

/* Context of one shape-inference call. The same function serves static inference (symbolic dims,
 * values known only for constants) and run time (every shape concrete, every input value known). */
typedef struct kn_infer_ctx {
    const kn_node *node;
    int n_inputs;
    const kn_type *const *in;          /* in[i] is NULL for an omitted optional input */
    const kn_tensor *const *in_value;  /* the input's value when known (constants; always at run time), else NULL */
    int n_outputs;
    kn_type *out;                      /* n_outputs entries, initialised to unknown; infer fills them */
    kn_arena *arena;                   /* for new symbol names */
} kn_infer_ctx;

typedef kiln_status (*kn_infer_fn)(kn_infer_ctx *c);

enum {
    KN_OP_NONDETERMINISTIC = 1u << 0, /* random generators: never folded into constants */
    KN_OP_HAS_SUBGRAPH = 1u << 1,     /* If/Loop/Scan: attributes hold graphs */
};

typedef struct kn_op_schema {
    const char *domain;  /* "" for ai.onnx */
    const char *op_type; /* NULL ends a table */
    int since;           /* first opset version this entry covers */
    int until;           /* last opset version it covers (inclusive); 0 = no upper bound */
    int min_inputs, max_inputs;   /* max -1 = variadic */
    int min_outputs, max_outputs;
    kn_infer_fn infer;
    unsigned flags;
} kn_op_schema;

/* Finds the schema for (domain, op_type) at the given opset; NULL when there is none. When the
 * op exists but not at that opset, *near_out (if non-NULL) gets one of its entries. */
const kn_op_schema *kn_op_find(const char *domain, const char *op_type, int opset,
                               const kn_op_schema **near_out);
/* Calls fn for every registered schema (for `kiln info` and tests). */
void kn_op_foreach(void (*fn)(const kn_op_schema *s, void *arg), void *arg);

/* ---- helpers for infer functions ---- */

/* An error prefixed with the node label: "node 'x' (Op, opset N): <message>". */
kiln_status kn_infer_error(const kn_infer_ctx *c, kiln_status status, const char *fmt, ...) KN_PRINTF(3, 4);
/* out[o] = tensor of in[i]'s dtype and shape (unary elementwise). */
kiln_status kn_infer_same(kn_infer_ctx *c, int i, int o);
/* out[o] = numpy-style broadcast of the shapes of all present inputs, element type `dtype`
 * (UNDEFINED = that of input 0). Fails with both shapes named when they cannot broadcast. */
kiln_status kn_infer_broadcast(kn_infer_ctx *c, int o, kiln_dtype dtype);
/* Broadcasts two static-type shapes into out (symbols kept when equal). */
kiln_status kn_broadcast_types(const kn_type *a, const kn_type *b, kn_type *out, char *why, size_t cap);
/* Sets out[o] to a tensor type with known dims (dims may contain -1 for unknown). */
void kn_infer_set(kn_infer_ctx *c, int o, kiln_dtype dtype, int rank, const int64_t *dims);
/* Normalises an axis in [-rank, rank) to [0, rank); fails naming the attribute otherwise. */
kiln_status kn_infer_axis(const kn_infer_ctx *c, int64_t axis, int rank, const char *what, int *axis_out);
/* Reads a 1-D integer input value into a C array (at most cap); -1 count when the value is unknown. */
kiln_status kn_infer_int_list(const kn_infer_ctx *c, int i, int64_t *vals, int cap, int *count_out);

#endif

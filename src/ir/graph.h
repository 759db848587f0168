/* The IR: a model is a graph of nodes over values. Every later stage (shape inference, passes,
 * partitioning, kernels) reads and writes this and nothing else.
 *
 * Values and nodes live in growable arrays and are referred to by index, never by pointer, so a
 * pass may add values and nodes freely. Strings and small arrays belong to the model's arena. */
#ifndef KN_GRAPH_H
#define KN_GRAPH_H

#include "ir/tensor.h"
#include "util/arena.h"

#include <stdbool.h>
#include <stdint.h>

/* One dimension of a static shape: a known size, a named symbol, or unknown. */
#define KN_UNKNOWN_DIM_MARK '?'
typedef struct kn_dim {
    int64_t value;      /* >= 0 when known, -1 otherwise */
    const char *symbol; /* dim_param name when symbolic (interned in the arena), else NULL; inference
                         * names an unknown dim of a node's output KN_UNKNOWN_DIM_MARK "value#axis"
                         * (kn_graph_infer), so values computed elementwise from it share it */
} kn_dim;
/* The dim's name as the model gives it (NULL for inference's own names). */
static inline const char *kn_dim_name(const kn_dim *d) {
    return d->symbol && d->symbol[0] != KN_UNKNOWN_DIM_MARK ? d->symbol : NULL;
}

typedef enum kn_type_kind {
    KN_TYPE_UNKNOWN = 0,
    KN_TYPE_TENSOR = 1,
    KN_TYPE_SEQUENCE = 2,
    KN_TYPE_OPTIONAL = 3,
    KN_TYPE_MAP = 4, /* parsed so the loader can name it; no operator uses it yet */
} kn_type_kind;

/* The static type of a value. For a sequence/optional, dtype/rank/dims describe the element
 * tensor (elem_kind says what the optional holds). */
typedef struct kn_type {
    kn_type_kind kind;
    kn_type_kind elem_kind;  /* for OPTIONAL: TENSOR or SEQUENCE */
    kiln_dtype dtype;        /* UNDEFINED when unknown */
    int rank;                /* -1 when unknown */
    kn_dim dims[KILN_MAX_RANK];
    /* For small 1-D int64 values that describe shapes (Shape -> Gather -> Concat -> Reshape):
     * the elements, each known or symbolic. n_shape_value is -1 when not tracked. */
    int n_shape_value;
    kn_dim shape_value[KILN_MAX_RANK];
} kn_type;

typedef enum kn_attr_type {
    KN_ATTR_UNDEFINED = 0,
    KN_ATTR_FLOAT = 1,
    KN_ATTR_INT = 2,
    KN_ATTR_STRING = 3,
    KN_ATTR_TENSOR = 4,
    KN_ATTR_GRAPH = 5,
    KN_ATTR_FLOATS = 6,
    KN_ATTR_INTS = 7,
    KN_ATTR_STRINGS = 8,
    KN_ATTR_TENSORS = 9,
    KN_ATTR_GRAPHS = 10,
    KN_ATTR_SPARSE_TENSOR = 11,
    KN_ATTR_SPARSE_TENSORS = 12,
    KN_ATTR_TYPE_PROTO = 13,
    KN_ATTR_TYPE_PROTOS = 14,
} kn_attr_type;

struct kn_graph;

typedef struct kn_attr {
    const char *name;
    kn_attr_type type;
    float f;
    int64_t i;
    const char *s; /* NUL-terminated (may hold embedded NULs: use s_len) */
    size_t s_len;
    kn_tensor *t;          /* owned by the model */
    struct kn_graph *g;    /* owned by the model */
    int n;                 /* element count of the list kinds */
    float *floats;
    int64_t *ints;
    const char **strings;
    kn_tensor **tensors;
    struct kn_graph **graphs;
    kn_type *type_protos;  /* TYPE_PROTO(S): n entries (1 for TYPE_PROTO) */
    const char *ref_attr_name; /* set inside function bodies; kiln does not expand those yet */
} kn_attr;

typedef struct kn_node {
    const char *name;    /* never NULL; synthesised "<op>_<index>" when the model has none */
    const char *op_type;
    const char *domain;  /* "" for ai.onnx ("ai.onnx" is normalised to "") */
    int opset;           /* the model's opset version for this node's domain */
    int *inputs;         /* value ids; -1 for an omitted optional input */
    int n_inputs;
    int *outputs;        /* value ids; -1 for an omitted optional output */
    int n_outputs;
    kn_attr *attrs;
    int n_attrs;
    const struct kn_op_schema *schema; /* resolved by kn_graph_resolve */
    void *kernel;                      /* the backend's kernel choice, set at compile time */
    int provider;                      /* index of the provider that runs it; -1 before placement */
    bool dead;                         /* removed by a pass; skipped everywhere */
} kn_node;

typedef struct kn_value {
    const char *name;      /* "" for none */
    kn_type type;
    int producer;          /* node index, or -1 for graph inputs, initializers and outer values */
    kn_tensor *constant;   /* initializer or folded constant (owned by the model), else NULL */
    bool is_graph_input;
    bool is_graph_output;
    bool is_outer;         /* a subgraph's reference to a value of an enclosing graph */
    int uses;              /* how many node inputs, graph outputs and subgraph reads read it */
    int sub_reads;         /* of those, reads by name from inside a node's subgraph (If/Loop/Scan
                            * bodies, at any depth): a use no node input shows (kn_graph_recount) */
    int outer_ref;         /* for an is_outer value: a guess of its id in the parent graph, checked
                            * by name before use (kn_graph_outer_value) */
} kn_value;

typedef struct kn_graph {
    const char *name;
    struct kn_model *model;
    struct kn_graph *parent; /* enclosing graph for subgraphs, else NULL */
    kn_value *values;
    int n_values, cap_values;
    kn_node *nodes;
    int n_nodes, cap_nodes;
    int *inputs;  /* graph inputs that are not initializers, in declared order */
    int n_inputs;
    int *outputs;
    int n_outputs;
} kn_graph;

typedef struct kn_opset_import {
    const char *domain; /* normalised: "" for ai.onnx */
    int64_t version;
} kn_opset_import;

typedef struct kn_model {
    kn_arena arena;
    int64_t ir_version;
    const char *producer_name, *producer_version, *model_domain, *doc;
    int64_t model_version;
    kn_opset_import *opsets;
    int n_opsets;
    kn_graph *graph;
    const char *base_dir;  /* folder external data resolves against; NULL when loaded from memory */
    void *mapping;         /* the mapped model file, when initializers point into it */
    size_t mapping_size;
    kn_tensor **owned_tensors; /* every tensor the model owns (initializers, attributes) */
    int n_owned_tensors, cap_owned_tensors;
    kn_graph **owned_graphs;
    int n_owned_graphs, cap_owned_graphs;
} kn_model;

/* ---- construction ---- */
kiln_status kn_model_new(kn_model **out);
void kn_model_free(kn_model *m);
kiln_status kn_graph_new(kn_model *m, kn_graph *parent, const char *name, kn_graph **out);
/* Registers a tensor for the model to free. */
kiln_status kn_model_own_tensor(kn_model *m, kn_tensor *t);
/* The newest opset version of `domain` ("" or "ai.onnx", "ai.onnx.ml", "com.microsoft", "kiln", ...)
 * whose operators kiln implements with their semantics at that version; 0 for a domain kiln does not
 * know. ai.onnx: 28, the newest of the pinned onnx 1.23.2 (tests/requirements.txt), whose node tests
 * pass. Raise it only when every operator changed up to the new version is implemented. A model
 * importing a newer version is refused by the loader. */
int64_t kn_opset_newest(const char *domain);
/* Opset version the model imports for `domain` ("" = ai.onnx); 0 when not imported. */
int64_t kn_model_opset(const kn_model *m, const char *domain);

/* Finds a value by name in this graph only; -1 when absent. Linear scan (names are few per
 * lookup at load); the loader keeps its own hash map while building. */
int kn_graph_find_value(const kn_graph *g, const char *name);
/* Adds a value (name copied into the arena; "" allowed); returns its id or -1 on OOM. */
int kn_graph_add_value(kn_graph *g, const char *name);
/* Adds a node; the arrays are copied. Returns its index or -1 on OOM. */
int kn_graph_add_node(kn_graph *g, const char *name, const char *op_type, const char *domain,
                      const int *inputs, int n_inputs, const int *outputs, int n_outputs);

/* ---- uses and definitions ----
 * A value is used by the node inputs that name it, by the graph's outputs, and by every node whose
 * subgraphs (If/Loop/Scan bodies, nested at any depth) read it by name from the enclosing scope.
 * That last kind, the node's outer reads, is a use like any other: it counts in value.uses, keeps the
 * value alive, orders the node after the value's producer, and (kn_opt_pinned) keeps its name.
 * Everything that counts, moves or deletes uses goes through these functions. */

/* The value of sub's parent graph that sub's outer value `v` (is_outer) refers to; -1 when the
 * parent has no value of that name. */
int kn_graph_outer_value(kn_graph *sub, int v);
/* The same without keeping the guess (for readers that share the graph across threads). */
int kn_graph_outer_lookup(const kn_graph *sub, int v);
/* Calls fn(arg, id) for each value id of g that node n's subgraphs read from g by name, at any
 * depth of nesting (a name a nested body takes from an intermediate body's own values is not a
 * read of g). A value read by several of n's subgraphs comes once per subgraph. Nothing for a
 * dead node. */
void kn_graph_node_outer_reads(kn_graph *g, const kn_node *n, void (*fn)(void *arg, int id), void *arg);
/* The outer reads of every node as a table: node i reads ids[start[i] .. start[i + 1]). Both
 * arrays are malloc'd for the caller to free. */
kiln_status kn_graph_outer_reads(kn_graph *g, int **start_out, int **ids_out);

/* Orders nodes so each comes after its producers, and after the producers of the values its
 * subgraphs read (outer reads); an error names a node in a cycle or one that reads a value
 * nothing produces. Recomputes producers and use counts. */
kiln_status kn_graph_sort(kn_graph *g);
/* Recomputes value.producer, value.uses and value.sub_reads from the nodes, the graph outputs and
 * the nodes' outer reads (dead nodes ignored). */
void kn_graph_recount(kn_graph *g);

/* ---- attributes ---- */
const kn_attr *kn_node_attr(const kn_node *n, const char *name);
/* Typed getters: return the default when absent; an attribute present with another type is
 * an error naming the node and attribute (use kn_attr_check for that). */
int64_t kn_attr_int(const kn_node *n, const char *name, int64_t dflt);
float kn_attr_float(const kn_node *n, const char *name, float dflt);
const char *kn_attr_string(const kn_node *n, const char *name, const char *dflt);
/* Lists: *count_out set to the length (0 when absent); returns the array or NULL. */
const int64_t *kn_attr_ints(const kn_node *n, const char *name, int *count_out);
const float *kn_attr_floats(const kn_node *n, const char *name, int *count_out);
/* Checks that attribute `name`, when present, has type `type`. */
kiln_status kn_attr_check(const kn_node *n, const char *name, kn_attr_type type);

/* ---- types ---- */
void kn_type_init(kn_type *t); /* unknown everything */
void kn_type_set_tensor(kn_type *t, kiln_dtype dtype, int rank, const int64_t *dims);
/* "float[batch,3,224,224]" into buf. */
const char *kn_type_str(const kn_type *t, char *buf, size_t cap);
bool kn_type_is_static(const kn_type *t); /* tensor with known dtype, rank and all dims */

/* "node 'name' (Op, opset N)" into buf: the prefix of every node error. */
const char *kn_node_label(const kn_node *n, char *buf, size_t cap);

#endif

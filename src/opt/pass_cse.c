/* Common-subexpression elimination. First equal constants become one (exporters emit a fresh
 * Constant for every axes list and scalar), then nodes with the same operator, opset, inputs and
 * attributes collapse into the first of them. Random generators and nodes with subgraphs are
 * never merged; a node whose outputs must keep their names (graph outputs) is kept. */
#include "opt/pass.h"

#include <stdlib.h>
#include <string.h>

/* Constants above this size are not compared (weights are unique in practice, and hashing
 * megabytes of them would slow every session creation). */
#define CSE_MAX_CONST_BYTES ((size_t)64 << 10)

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0x100000001b3ull;
}

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = mix(h, w);
    }
    for (; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t hash_tensor(const kn_tensor *t) {
    uint64_t h = mix(0xcbf29ce484222325ull, (uint64_t)t->dtype);
    h = mix(h, (uint64_t)t->rank);
    for (int d = 0; d < t->rank; d++) h = mix(h, (uint64_t)t->dims[d]);
    return hash_bytes(h, t->data, t->nbytes);
}

static bool tensor_equal(const kn_tensor *a, const kn_tensor *b) {
    if (a->kind != KN_VALUE_TENSOR || b->kind != KN_VALUE_TENSOR) return false;
    if (a->dtype != b->dtype || a->rank != b->rank || a->nbytes != b->nbytes) return false;
    if (a->dtype == KILN_DTYPE_STRING) return false;
    if (a->rank && memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank)) return false;
    return !a->nbytes || !memcmp(a->data, b->data, a->nbytes);
}

static bool attr_equal(const kn_attr *a, const kn_attr *b) {
    if (a->type != b->type || strcmp(a->name, b->name)) return false;
    switch (a->type) {
    case KN_ATTR_FLOAT: return !memcmp(&a->f, &b->f, sizeof a->f);
    case KN_ATTR_INT: return a->i == b->i;
    case KN_ATTR_STRING: return a->s_len == b->s_len && !memcmp(a->s, b->s, a->s_len);
    case KN_ATTR_TENSOR: return a->t && b->t && tensor_equal(a->t, b->t);
    case KN_ATTR_FLOATS: return a->n == b->n && (!a->n || !memcmp(a->floats, b->floats, sizeof(float) * (size_t)a->n));
    case KN_ATTR_INTS: return a->n == b->n && (!a->n || !memcmp(a->ints, b->ints, sizeof(int64_t) * (size_t)a->n));
    case KN_ATTR_STRINGS:
        if (a->n != b->n) return false;
        for (int i = 0; i < a->n; i++)
            if (strcmp(a->strings[i], b->strings[i])) return false;
        return true;
    default: return false; /* graphs and the rest: never equal */
    }
}

static uint64_t hash_attr(const kn_attr *a) {
    uint64_t h = hash_bytes(0xcbf29ce484222325ull, a->name, strlen(a->name));
    h = mix(h, (uint64_t)a->type);
    switch (a->type) {
    case KN_ATTR_FLOAT: return hash_bytes(h, &a->f, sizeof a->f);
    case KN_ATTR_INT: return mix(h, (uint64_t)a->i);
    case KN_ATTR_STRING: return hash_bytes(h, a->s, a->s_len);
    case KN_ATTR_TENSOR: return a->t ? mix(h, hash_tensor(a->t)) : h;
    case KN_ATTR_FLOATS: return hash_bytes(h, a->floats, sizeof(float) * (size_t)a->n);
    case KN_ATTR_INTS: return hash_bytes(h, a->ints, sizeof(int64_t) * (size_t)a->n);
    default: return mix(h, (uint64_t)a->n);
    }
}

static bool mergeable(const kn_graph *g, const kn_node *n) {
    if (n->dead || !n->schema) return false;
    /* tensors only: a sequence or optional might be extended in place by one of its readers */
    for (int o = 0; o < n->n_outputs; o++)
        if (n->outputs[o] >= 0 && g->values[n->outputs[o]].type.kind != KN_TYPE_TENSOR) return false;
    if (n->schema->flags & (KN_OP_NONDETERMINISTIC | KN_OP_HAS_SUBGRAPH)) return false;
    for (int a = 0; a < n->n_attrs; a++)
        if (n->attrs[a].type == KN_ATTR_GRAPH || n->attrs[a].type == KN_ATTR_GRAPHS) return false;
    return true;
}

static uint64_t hash_node(const kn_node *n) {
    uint64_t h = hash_bytes(0xcbf29ce484222325ull, n->op_type, strlen(n->op_type));
    h = hash_bytes(h, n->domain, strlen(n->domain));
    h = mix(h, (uint64_t)n->opset);
    h = mix(h, (uint64_t)n->n_outputs);
    for (int k = 0; k < n->n_inputs; k++) h = mix(h, (uint64_t)(int64_t)n->inputs[k]);
    uint64_t ah = 0; /* attribute order does not matter */
    for (int a = 0; a < n->n_attrs; a++) ah += hash_attr(&n->attrs[a]);
    return mix(h, ah);
}

static bool nodes_equal(const kn_node *a, const kn_node *b) {
    if (strcmp(a->op_type, b->op_type) || strcmp(a->domain, b->domain) || a->opset != b->opset) return false;
    if (a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs || a->n_attrs != b->n_attrs) return false;
    for (int k = 0; k < a->n_inputs; k++)
        if (a->inputs[k] != b->inputs[k]) return false;
    for (int i = 0; i < a->n_attrs; i++) {
        const kn_attr *o = kn_node_attr(b, a->attrs[i].name);
        if (!o || !attr_equal(&a->attrs[i], o)) return false;
    }
    return true;
}

typedef struct table {
    uint64_t *keys;
    int *vals;
    size_t cap;
} table;

static kiln_status table_init(table *t, size_t n) {
    t->cap = 16;
    while (t->cap < 2 * n + 16) t->cap *= 2;
    t->keys = calloc(t->cap, sizeof *t->keys);
    t->vals = malloc(sizeof *t->vals * t->cap);
    if (!t->keys || !t->vals) return KN_OOM();
    for (size_t i = 0; i < t->cap; i++) t->vals[i] = -1;
    return KILN_OK;
}

static void table_free(table *t) {
    free(t->keys);
    free(t->vals);
}

/* Finds an entry with this hash for which eq(arg, entry) holds; inserts val otherwise. Returns the
 * matching entry's value or -1 when inserted. */
static int table_find_or_add(table *t, uint64_t h, int val, bool (*eq)(void *arg, int a, int b), void *arg) {
    size_t i = (size_t)h & (t->cap - 1);
    while (t->vals[i] >= 0) {
        if (t->keys[i] == h && eq(arg, t->vals[i], val)) return t->vals[i];
        i = (i + 1) & (t->cap - 1);
    }
    t->keys[i] = h;
    t->vals[i] = val;
    return -1;
}

static bool const_eq(void *arg, int a, int b) {
    kn_graph *g = arg;
    return tensor_equal(g->values[a].constant, g->values[b].constant);
}

static bool node_eq(void *arg, int a, int b) {
    kn_graph *g = arg;
    return nodes_equal(&g->nodes[a], &g->nodes[b]);
}

static kiln_status merge_constants(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    table t;
    kiln_status st = table_init(&t, (size_t)g->n_values);
    for (int v = 0; v < g->n_values && st == KILN_OK; v++) {
        const kn_tensor *k = kn_opt_const(c, v);
        if (!k || k->dtype == KILN_DTYPE_STRING || k->nbytes > CSE_MAX_CONST_BYTES) continue;
        if (kn_opt_n_consumers(c, v) == 0) continue;
        int first = table_find_or_add(&t, hash_tensor(k), v, const_eq, g);
        if (first < 0 || kn_opt_pinned(c, v)) continue;
        if (!kn_opt_forward(c, v, first)) continue;
        kn_opt_note(c, "equal constants");
    }
    table_free(&t);
    if (st == KILN_OK) st = kn_opt_refresh(c);
    return st;
}

kiln_status kn_pass_cse(kn_opt_ctx *c) {
    KN_TRY(merge_constants(c));
    kn_graph *g = c->g;
    table t;
    kiln_status st = table_init(&t, (size_t)g->n_nodes);
    /* nodes are in topological order, so the first of two equal nodes is the one to keep */
    for (int i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        kn_node *n = &g->nodes[i];
        if (!mergeable(g, n)) continue;
        int first = table_find_or_add(&t, hash_node(n), i, node_eq, g);
        if (first < 0) continue;
        bool ok = true;
        for (int o = 0; o < n->n_outputs && ok; o++) {
            int v = n->outputs[o];
            if (v >= 0 && (kn_opt_pinned(c, v) || g->nodes[first].outputs[o] < 0)) ok = false;
        }
        if (!ok) continue;
        for (int o = 0; o < n->n_outputs; o++)
            if (n->outputs[o] >= 0) kn_opt_forward(c, n->outputs[o], g->nodes[first].outputs[o]);
        kn_opt_kill(c, i);
        kn_opt_note(c, n->op_type);
        st = kn_opt_refresh(c);
    }
    table_free(&t);
    return st;
}

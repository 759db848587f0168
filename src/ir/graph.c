#include "ir/graph.h"

#include "util/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

kiln_status kn_model_new(kn_model **out) {
    kn_model *m = calloc(1, sizeof *m);
    if (!m) return KN_OOM();
    kn_arena_init(&m->arena);
    *out = m;
    return KILN_OK;
}

static void graph_free(kn_graph *g) {
    if (!g) return;
    free(g->values);
    for (int i = 0; i < g->n_nodes; i++) {
        free(g->nodes[i].inputs);
        free(g->nodes[i].outputs);
    }
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g);
}

void kn_model_free(kn_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned_tensors; i++) kn_tensor_free(m->owned_tensors[i]);
    free(m->owned_tensors);
    for (int i = 0; i < m->n_owned_graphs; i++) graph_free(m->owned_graphs[i]);
    free(m->owned_graphs);
    kn_arena_free(&m->arena);
    /* the loader's mapping of the model file, which view initializers point into */
    if (m->mapping) munmap(m->mapping, m->mapping_size);
    free(m);
}

static int grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) return -1;
    memset((char *)p + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *arr = p;
    *cap = nc;
    return 0;
}

kiln_status kn_model_own_tensor(kn_model *m, kn_tensor *t) {
    if (grow((void **)&m->owned_tensors, &m->cap_owned_tensors, m->n_owned_tensors + 1,
             sizeof *m->owned_tensors))
        return KN_OOM();
    m->owned_tensors[m->n_owned_tensors++] = t;
    return KILN_OK;
}

kiln_status kn_graph_new(kn_model *m, kn_graph *parent, const char *name, kn_graph **out) {
    kn_graph *g = calloc(1, sizeof *g);
    if (!g) return KN_OOM();
    if (grow((void **)&m->owned_graphs, &m->cap_owned_graphs, m->n_owned_graphs + 1,
             sizeof *m->owned_graphs)) {
        free(g);
        return KN_OOM();
    }
    m->owned_graphs[m->n_owned_graphs++] = g;
    g->model = m;
    g->parent = parent;
    g->name = kn_arena_strdup(&m->arena, name ? name : "");
    if (!g->name) return KN_OOM();
    *out = g;
    return KILN_OK;
}

int64_t kn_opset_newest(const char *domain) {
    static const struct {
        const char *domain;
        int64_t newest;
    } known[] = {
        {"", 28},
        {"ai.onnx", 28},
        {"ai.onnx.ml", 5},
        {"ai.onnx.preview", 1},
        {"ai.onnx.preview.training", 1},
        {"com.microsoft", 1},
        {"kiln", 1},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(known[i].domain, domain ? domain : "")) return known[i].newest;
    return 0;
}

int64_t kn_model_opset(const kn_model *m, const char *domain) {
    for (int i = 0; i < m->n_opsets; i++)
        if (!strcmp(m->opsets[i].domain, domain)) return m->opsets[i].version;
    return 0;
}

int kn_graph_find_value(const kn_graph *g, const char *name) {
    for (int i = 0; i < g->n_values; i++)
        if (!strcmp(g->values[i].name, name)) return i;
    return -1;
}

void kn_type_init(kn_type *t) {
    memset(t, 0, sizeof *t);
    t->rank = -1;
    t->n_shape_value = -1;
}

int kn_graph_add_value(kn_graph *g, const char *name) {
    if (grow((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof *g->values)) return -1;
    kn_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = kn_arena_strdup(&g->model->arena, name ? name : "");
    if (!v->name) return -1;
    kn_type_init(&v->type);
    v->producer = -1;
    return g->n_values++;
}

int kn_graph_add_node(kn_graph *g, const char *name, const char *op_type, const char *domain,
                      const int *inputs, int n_inputs, const int *outputs, int n_outputs) {
    if (grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes)) return -1;
    kn_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    kn_arena *a = &g->model->arena;
    char synth[128];
    if (!name || !*name) {
        snprintf(synth, sizeof synth, "%s_%d", op_type, g->n_nodes);
        name = synth;
    }
    n->name = kn_arena_strdup(a, name);
    n->op_type = kn_arena_strdup(a, op_type);
    n->domain = kn_arena_strdup(a, domain && strcmp(domain, "ai.onnx") ? domain : "");
    n->inputs = malloc(sizeof(int) * (size_t)(n_inputs ? n_inputs : 1));
    n->outputs = malloc(sizeof(int) * (size_t)(n_outputs ? n_outputs : 1));
    if (!n->name || !n->op_type || !n->domain || !n->inputs || !n->outputs) {
        free(n->inputs);
        free(n->outputs);
        return -1;
    }
    if (n_inputs) memcpy(n->inputs, inputs, sizeof(int) * (size_t)n_inputs);
    if (n_outputs) memcpy(n->outputs, outputs, sizeof(int) * (size_t)n_outputs);
    n->n_inputs = n_inputs;
    n->n_outputs = n_outputs;
    n->provider = -1;
    return g->n_nodes++;
}

int kn_graph_outer_lookup(const kn_graph *sub, int v) {
    const kn_graph *parent = sub->parent;
    const kn_value *val = &sub->values[v];
    if (!parent || !val->is_outer) return -1;
    const int r = val->outer_ref;
    if (r >= 0 && r < parent->n_values &&
        (parent->values[r].name == val->name || !strcmp(parent->values[r].name, val->name)))
        return r;
    return kn_graph_find_value(parent, val->name);
}

int kn_graph_outer_value(kn_graph *sub, int v) {
    kn_graph *parent = sub->parent;
    kn_value *val = &sub->values[v];
    if (!parent || !val->is_outer) return -1;
    int r = val->outer_ref;
    if (r >= 0 && r < parent->n_values &&
        (parent->values[r].name == val->name || !strcmp(parent->values[r].name, val->name)))
        return r;
    r = kn_graph_find_value(parent, val->name);
    if (r >= 0) val->outer_ref = r;
    return r;
}

#define KN_MAX_SUBGRAPH_DEPTH 64

/* The outer reads of g found in `sub`, a subgraph nested depth graphs below g: chain[0] is g's
 * direct subgraph that contains it, chain[depth - 1] == sub. A name is g's when every graph
 * between takes it from outside too (is_outer there), which the loader arranges; a graph that
 * defines the name itself hides g's. */
static void outer_reads_in(kn_graph *g, kn_graph **chain, int depth, void (*fn)(void *, int), void *arg) {
    kn_graph *sub = chain[depth - 1];
    for (int v = 0; v < sub->n_values; v++) {
        if (!sub->values[v].is_outer) continue;
        int id = -1;
        if (depth == 1) {
            id = sub->parent == g ? kn_graph_outer_value(sub, v) : kn_graph_find_value(g, sub->values[v].name);
        } else {
            /* a deeper read is g's only when no graph in between has the name (when one has it
             * as an outer value too, that graph's read already counted) */
            bool hidden = false;
            for (int d = depth - 2; d >= 0 && !hidden; d--) hidden = kn_graph_find_value(chain[d], sub->values[v].name) >= 0;
            if (!hidden) id = kn_graph_find_value(g, sub->values[v].name);
        }
        if (id >= 0) fn(arg, id);
    }
    if (depth >= KN_MAX_SUBGRAPH_DEPTH) return;
    for (int i = 0; i < sub->n_nodes; i++) {
        const kn_node *n = &sub->nodes[i];
        if (n->dead) continue;
        for (int a = 0; a < n->n_attrs; a++) {
            const kn_attr *at = &n->attrs[a];
            int ng = at->type == KN_ATTR_GRAPH && at->g ? 1 : at->type == KN_ATTR_GRAPHS ? at->n : 0;
            for (int k = 0; k < ng; k++) {
                kn_graph *s2 = at->type == KN_ATTR_GRAPH ? at->g : at->graphs[k];
                if (!s2) continue;
                chain[depth] = s2;
                outer_reads_in(g, chain, depth + 1, fn, arg);
            }
        }
    }
}

void kn_graph_node_outer_reads(kn_graph *g, const kn_node *n, void (*fn)(void *arg, int id), void *arg) {
    if (n->dead) return;
    kn_graph *chain[KN_MAX_SUBGRAPH_DEPTH + 1];
    for (int a = 0; a < n->n_attrs; a++) {
        const kn_attr *at = &n->attrs[a];
        int ng = at->type == KN_ATTR_GRAPH && at->g ? 1 : at->type == KN_ATTR_GRAPHS ? at->n : 0;
        for (int k = 0; k < ng; k++) {
            chain[0] = at->type == KN_ATTR_GRAPH ? at->g : at->graphs[k];
            if (chain[0]) outer_reads_in(g, chain, 1, fn, arg);
        }
    }
}

static bool has_subgraph(const kn_node *n) {
    for (int a = 0; a < n->n_attrs; a++)
        if ((n->attrs[a].type == KN_ATTR_GRAPH && n->attrs[a].g) || (n->attrs[a].type == KN_ATTR_GRAPHS && n->attrs[a].n))
            return true;
    return false;
}

typedef struct reads_acc {
    int *ids;
    int n, cap;
    bool oom;
} reads_acc;

static void acc_read(void *arg, int id) {
    reads_acc *r = arg;
    if (r->n == r->cap) {
        int nc = r->cap ? r->cap * 2 : 16;
        int *p = realloc(r->ids, sizeof(int) * (size_t)nc);
        if (!p) {
            r->oom = true;
            return;
        }
        r->ids = p;
        r->cap = nc;
    }
    r->ids[r->n++] = id;
}

kiln_status kn_graph_outer_reads(kn_graph *g, int **start_out, int **ids_out) {
    *start_out = NULL;
    *ids_out = NULL;
    int *start = malloc(sizeof(int) * (size_t)(g->n_nodes + 1));
    reads_acc r = {NULL, 0, 0, false};
    if (!start) return KN_OOM();
    for (int i = 0; i < g->n_nodes; i++) {
        start[i] = r.n;
        if (has_subgraph(&g->nodes[i])) kn_graph_node_outer_reads(g, &g->nodes[i], acc_read, &r);
    }
    start[g->n_nodes] = r.n;
    if (r.oom) {
        free(start);
        free(r.ids);
        return KN_OOM();
    }
    if (!r.ids && !(r.ids = malloc(sizeof(int)))) {
        free(start);
        return KN_OOM();
    }
    *start_out = start;
    *ids_out = r.ids;
    return KILN_OK;
}

static void count_sub_read(void *arg, int id) {
    kn_graph *g = arg;
    g->values[id].uses++;
    g->values[id].sub_reads++;
}

void kn_graph_recount(kn_graph *g) {
    for (int i = 0; i < g->n_values; i++) {
        g->values[i].uses = 0;
        g->values[i].sub_reads = 0;
        if (!g->values[i].is_graph_input && !g->values[i].is_outer && !g->values[i].constant)
            g->values[i].producer = -1;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int j = 0; j < n->n_inputs; j++)
            if (n->inputs[j] >= 0) g->values[n->inputs[j]].uses++;
        for (int j = 0; j < n->n_outputs; j++)
            if (n->outputs[j] >= 0) g->values[n->outputs[j]].producer = i;
    }
    for (int i = 0; i < g->n_outputs; i++) g->values[g->outputs[i]].uses++;
    /* values that subgraphs read from this graph by name */
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && has_subgraph(&g->nodes[i])) kn_graph_node_outer_reads(g, &g->nodes[i], count_sub_read, g);
}

kiln_status kn_graph_sort(kn_graph *g) {
    int n = g->n_nodes;
    /* producer of each value among the nodes */
    int *prod = malloc(sizeof(int) * (size_t)(g->n_values ? g->n_values : 1));
    int *state = calloc((size_t)(n ? n : 1), sizeof(int)); /* 0 new, 1 on stack, 2 done */
    int *order = malloc(sizeof(int) * (size_t)(n ? n : 1));
    /* the stack holds (node, next dependency): its inputs, then its outer reads */
    int *stack = malloc(sizeof(int) * 2 * (size_t)(n ? n : 1));
    int *rstart = NULL, *rids = NULL;
    kiln_status st = KILN_OK;
    char lbl[256];
    if (!prod || !state || !order || !stack) {
        st = KN_OOM();
        goto done;
    }
    st = kn_graph_outer_reads(g, &rstart, &rids);
    if (st != KILN_OK) goto done;
    for (int i = 0; i < g->n_values; i++) prod[i] = -1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < g->nodes[i].n_outputs; j++) {
            int v = g->nodes[i].outputs[j];
            if (v < 0) continue;
            if (prod[v] >= 0 || g->values[v].is_graph_input || g->values[v].constant) {
                st = kn_error(KILN_ERR_INVALID_MODEL,
                              "%s: output '%s' is already produced by another node or is a graph input/initializer",
                              kn_node_label(&g->nodes[i], lbl, sizeof lbl), g->values[v].name);
                goto done;
            }
            prod[v] = i;
        }
    /* iterative DFS: keeps the original order where it is already topological */
    int n_order = 0;
    for (int root = 0; root < n; root++) {
        if (state[root]) continue;
        int sp = 0;
        stack[sp++] = root;
        stack[sp++] = 0;
        state[root] = 1;
        while (sp) {
            int node = stack[sp - 2], next_in = stack[sp - 1];
            kn_node *nd = &g->nodes[node];
            int n_deps = nd->n_inputs + (rstart[node + 1] - rstart[node]);
            if (next_in < n_deps) {
                stack[sp - 1] = next_in + 1;
                bool outer_read = next_in >= nd->n_inputs;
                int v = outer_read ? rids[rstart[node] + next_in - nd->n_inputs] : nd->inputs[next_in];
                if (v < 0) continue;
                int p = prod[v];
                if (p < 0) {
                    kn_value *val = &g->values[v];
                    if (!outer_read && !val->is_graph_input && !val->constant && !val->is_outer) {
                        st = kn_error(KILN_ERR_INVALID_MODEL,
                                      "%s: input '%s' is not produced by any node, graph input or initializer",
                                      kn_node_label(nd, lbl, sizeof lbl), val->name);
                        goto done;
                    }
                    continue;
                }
                if (state[p] == 1) {
                    st = kn_error(KILN_ERR_INVALID_MODEL, "%s: the graph has a cycle through value '%s'%s",
                                  kn_node_label(nd, lbl, sizeof lbl), g->values[v].name,
                                  outer_read ? " (read by a subgraph)" : "");
                    goto done;
                }
                if (state[p] == 0) {
                    state[p] = 1;
                    stack[sp++] = p;
                    stack[sp++] = 0;
                }
            } else {
                state[node] = 2;
                order[n_order++] = node;
                sp -= 2;
            }
        }
    }
    /* permute nodes */
    kn_node *sorted = malloc(sizeof(kn_node) * (size_t)(n > 0 ? n : 1));
    if (!sorted) {
        st = KN_OOM();
        goto done;
    }
    for (int i = 0; i < n; i++) sorted[i] = g->nodes[order[i]];
    if (n > 0) memcpy(g->nodes, sorted, sizeof(kn_node) * (size_t)n);
    free(sorted);
    kn_graph_recount(g);
done:
    free(rstart);
    free(rids);
    free(prod);
    free(state);
    free(order);
    free(stack);
    return st;
}

/* Whether two attribute names are equal: short names, compared inline (no library call). */
static inline bool same_name(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

const kn_attr *kn_node_attr(const kn_node *n, const char *name) {
    /* kernels look attributes up at each run: the first byte (or the same pointer) settles most
     * comparisons */
    const char c = name[0];
    for (int i = 0; i < n->n_attrs; i++) {
        const char *a = n->attrs[i].name;
        if (a == name || (a[0] == c && same_name(a, name))) return &n->attrs[i];
    }
    return NULL;
}

int64_t kn_attr_int(const kn_node *n, const char *name, int64_t dflt) {
    const kn_attr *a = kn_node_attr(n, name);
    return a && a->type == KN_ATTR_INT ? a->i : dflt;
}

float kn_attr_float(const kn_node *n, const char *name, float dflt) {
    const kn_attr *a = kn_node_attr(n, name);
    if (!a) return dflt;
    if (a->type == KN_ATTR_FLOAT) return a->f;
    if (a->type == KN_ATTR_INT) return (float)a->i;
    return dflt;
}

const char *kn_attr_string(const kn_node *n, const char *name, const char *dflt) {
    const kn_attr *a = kn_node_attr(n, name);
    return a && a->type == KN_ATTR_STRING ? a->s : dflt;
}

const int64_t *kn_attr_ints(const kn_node *n, const char *name, int *count_out) {
    const kn_attr *a = kn_node_attr(n, name);
    if (a && a->type == KN_ATTR_INTS) {
        *count_out = a->n;
        return a->ints;
    }
    *count_out = 0;
    return NULL;
}

const float *kn_attr_floats(const kn_node *n, const char *name, int *count_out) {
    const kn_attr *a = kn_node_attr(n, name);
    if (a && a->type == KN_ATTR_FLOATS) {
        *count_out = a->n;
        return a->floats;
    }
    *count_out = 0;
    return NULL;
}

static const char *attr_type_name(kn_attr_type t) {
    static const char *const names[] = {"undefined", "float",   "int",          "string",
                                        "tensor",    "graph",   "floats",       "ints",
                                        "strings",   "tensors", "graphs",       "sparse_tensor",
                                        "sparse_tensors", "type_proto", "type_protos"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

kiln_status kn_attr_check(const kn_node *n, const char *name, kn_attr_type type) {
    const kn_attr *a = kn_node_attr(n, name);
    char lbl[256];
    if (a && a->type != type)
        return kn_error(KILN_ERR_INVALID_MODEL, "%s: attribute '%s' is %s, expected %s",
                        kn_node_label(n, lbl, sizeof lbl), name, attr_type_name(a->type),
                        attr_type_name(type));
    return KILN_OK;
}

void kn_type_set_tensor(kn_type *t, kiln_dtype dtype, int rank, const int64_t *dims) {
    kn_type_init(t);
    t->kind = KN_TYPE_TENSOR;
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank && i < KILN_MAX_RANK; i++) {
        t->dims[i].value = dims ? dims[i] : -1;
        t->dims[i].symbol = NULL;
    }
}

bool kn_type_is_static(const kn_type *t) {
    if (t->kind != KN_TYPE_TENSOR || t->dtype == KILN_DTYPE_UNDEFINED || t->rank < 0) return false;
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i].value < 0) return false;
    return true;
}

const char *kn_type_str(const kn_type *t, char *buf, size_t cap) {
    size_t used = 0;
    const char *pre = "", *post = "";
    if (t->kind == KN_TYPE_SEQUENCE) pre = "seq<", post = ">";
    if (t->kind == KN_TYPE_OPTIONAL) pre = t->elem_kind == KN_TYPE_SEQUENCE ? "opt<seq<" : "opt<",
                                     post = t->elem_kind == KN_TYPE_SEQUENCE ? ">>" : ">";
    used += (size_t)snprintf(buf, cap, "%s%s", pre,
                             t->dtype ? kiln_dtype_name(t->dtype) : "?");
    if (used >= cap) return buf;
    if (t->rank < 0) {
        used += (size_t)snprintf(buf + used, cap - used, "[?]");
    } else {
        used += (size_t)snprintf(buf + used, cap - used, "[");
        for (int i = 0; i < t->rank && used < cap; i++) {
            const kn_dim *d = &t->dims[i];
            const char *sep = i ? "," : "";
            if (d->value >= 0)
                used += (size_t)snprintf(buf + used, cap - used, "%s%lld", sep, (long long)d->value);
            else if (kn_dim_name(d))
                used += (size_t)snprintf(buf + used, cap - used, "%s%s", sep, d->symbol);
            else
                used += (size_t)snprintf(buf + used, cap - used, "%s?", sep);
        }
        if (used < cap) used += (size_t)snprintf(buf + used, cap - used, "]");
    }
    if (used < cap) snprintf(buf + used, cap - used, "%s", post);
    return buf;
}

const char *kn_node_label(const kn_node *n, char *buf, size_t cap) {
    if (n->domain && *n->domain)
        snprintf(buf, cap, "node '%s' (%s:%s, opset %d)", n->name, n->domain, n->op_type, n->opset);
    else
        snprintf(buf, cap, "node '%s' (%s, opset %d)", n->name, n->op_type, n->opset);
    return buf;
}

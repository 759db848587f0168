/* Static shape inference over a graph: each node's infer function on the types known at load
 * time. Small subexpressions whose inputs are all known (exporters' Shape/Gather/Concat chains,
 * Constant nodes) are evaluated with the CPU kernels so later shapes become known too. */
#include "backend/cpu/cpu.h"
#include "exec/exec.h"
#include "ops/control.h"
#include "ops/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Folding evaluates only small values: shapes and indices, not weights. */
#define KN_FOLD_MAX_ELEMENTS 4096

typedef struct infer_state {
    kn_graph *g;
    kn_tensor **known;  /* per value: known value (borrowed constant or owned folded) */
    unsigned char *own; /* per value: known[v] owned by this pass */
} infer_state;

static const kn_type *outer_type(const kn_graph *g, const char *name) {
    for (const kn_graph *p = g->parent; p; p = p->parent) {
        int id = kn_graph_find_value(p, name);
        if (id >= 0) return &p->values[id].type;
    }
    return NULL;
}

/* Fills shape_value of a small 1-D/0-D integer value from its known elements. */
static void note_shape_value(kn_type *t, const kn_tensor *v) {
    if (v->kind != KN_VALUE_TENSOR || !kn_dtype_is_int(v->dtype) || v->rank > 1) return;
    int64_t n = kn_tensor_count(v);
    if (n > KILN_MAX_RANK) return;
    t->n_shape_value = (int)n;
    for (int64_t i = 0; i < n; i++) {
        t->shape_value[i].value = kn_tensor_get_i64(v, i);
        t->shape_value[i].symbol = NULL;
    }
}

/* Takes what the inferred type knows, keeping declared facts it does not. */
static void merge_type(kn_type *declared, const kn_type *inferred) {
    if (inferred->kind == KN_TYPE_UNKNOWN) return;
    /* a declared kind (the model's value_info/outputs) is authoritative: Loop-carried optionals
     * may turn into what the body makes of them */
    if (declared->kind != KN_TYPE_UNKNOWN && inferred->kind != declared->kind) return;
    kn_type r = *inferred;
    if (r.dtype == KILN_DTYPE_UNDEFINED) r.dtype = declared->dtype;
    if (r.rank < 0 && declared->rank >= 0 && declared->kind == r.kind) {
        r.rank = declared->rank;
        memcpy(r.dims, declared->dims, sizeof r.dims);
    } else if (r.rank >= 0 && r.rank == declared->rank) {
        for (int i = 0; i < r.rank; i++)
            if (r.dims[i].value < 0 && (declared->dims[i].value >= 0 || !r.dims[i].symbol))
                r.dims[i] = declared->dims[i];
    }
    *declared = r;
}

/* Names each unknown dim of value v (a node's output or a graph input) that has no name after
 * the value and axis (marked as inference's own): a dim is then provably equal where inference carries it (elementwise
 * broadcasting, views), so the optimiser's same-shape checks hold on models with anonymous
 * dims ('?' in the file), as they do on named ones. Each name is one value's own: it claims no
 * equality inference did not derive. */
static void name_unknown_dims(kn_graph *g, int v) {
    kn_value *val = &g->values[v];
    kn_type *t = &val->type;
    if (t->kind != KN_TYPE_TENSOR || t->rank <= 0 || !val->name || !val->name[0]) return;
    for (int d = 0; d < t->rank; d++) {
        if (t->dims[d].value >= 0 || t->dims[d].symbol) continue;
        char buf[512];
        if (snprintf(buf, sizeof buf, "%c%s#%d", KN_UNKNOWN_DIM_MARK, val->name, d) >= (int)sizeof buf) return;
        t->dims[d].symbol = kn_arena_strdup(&g->model->arena, buf); /* NULL (no memory): stays anonymous */
    }
}

static void try_fold(infer_state *s, kn_node *n, const kn_type *const *in_tp, kn_tensor **in_val,
                     kn_type *out_types) {
    kn_graph *g = s->g;
    if (n->schema->flags & (KN_OP_NONDETERMINISTIC | KN_OP_HAS_SUBGRAPH)) return;
    int64_t total = 0;
    for (int i = 0; i < n->n_inputs; i++) {
        if (n->inputs[i] < 0) continue;
        if (!in_val[i] || in_val[i]->kind != KN_VALUE_TENSOR) return;
        total += kn_tensor_count(in_val[i]);
    }
    for (int o = 0; o < n->n_outputs; o++) {
        if (!kn_type_is_static(&out_types[o])) return;
        int64_t dims[KILN_MAX_RANK];
        for (int d = 0; d < out_types[o].rank; d++) dims[d] = out_types[o].dims[d].value;
        int64_t c = kn_shape_count(dims, out_types[o].rank);
        if (c < 0 || c > KN_FOLD_MAX_ELEMENTS) return;
    }
    if (total > KN_FOLD_MAX_ELEMENTS && n->n_inputs > 0) return;
    char why[256];
    const kn_cpu_kernel *k = kn_cpu_find(n, in_tp, n->n_inputs, why, sizeof why);
    if (!k) return;
    kn_tensor *out[64] = {0};
    if (n->n_outputs > 64) return;
    for (int o = 0; o < n->n_outputs; o++) {
        int64_t dims[KILN_MAX_RANK];
        for (int d = 0; d < out_types[o].rank; d++) dims[d] = out_types[o].dims[d].value;
        if (kn_tensor_new(out_types[o].dtype, out_types[o].rank, dims, &out[o]) != KILN_OK) goto fail;
    }
    kn_kernel_ctx kc = {n, g, n->n_inputs, in_val, n->n_outputs, out, NULL, NULL};
    if (k->run(&kc) != KILN_OK) goto fail;
    for (int o = 0; o < n->n_outputs; o++) {
        int v = n->outputs[o];
        if (v < 0 || !out[o]) {
            kn_tensor_free(out[o]);
            continue;
        }
        s->known[v] = out[o];
        s->own[v] = 1;
        note_shape_value(&g->values[v].type, out[o]);
        out[o] = NULL;
    }
    kn_clear_error();
    return;
fail:
    for (int o = 0; o < n->n_outputs; o++) kn_tensor_free(out[o]);
    kn_clear_error(); /* folding is opportunistic: the run will report real errors */
}

static kiln_status infer_graph(kn_graph *g);

static kiln_status infer_subgraphs(kn_node *n) {
    for (int a = 0; a < n->n_attrs; a++) {
        kn_attr *at = &n->attrs[a];
        if (at->type == KN_ATTR_GRAPH && at->g) KN_TRY(infer_graph(at->g));
        if (at->type == KN_ATTR_GRAPHS)
            for (int k = 0; k < at->n; k++) KN_TRY(infer_graph(at->graphs[k]));
    }
    return KILN_OK;
}

static kiln_status infer_graph(kn_graph *g) {
    infer_state s = {g, NULL, NULL};
    size_t nv = (size_t)(g->n_values ? g->n_values : 1);
    s.known = calloc(nv, sizeof *s.known);
    s.own = calloc(nv, 1);
    kiln_status st = KILN_OK;
    if (!s.known || !s.own) {
        st = KN_OOM();
        goto done;
    }
    for (int v = 0; v < g->n_values; v++) {
        kn_value *val = &g->values[v];
        if (val->is_outer) {
            const kn_type *t = outer_type(g, val->name);
            if (t) val->type = *t;
        }
        /* an initializer that is also a graph input may be overridden: its value is not known */
        if (val->constant && !val->is_graph_input) {
            s.known[v] = val->constant;
            if (val->type.kind == KN_TYPE_UNKNOWN || val->type.rank < 0) {
                kn_type_of_tensor(val->constant, &val->type);
            }
            note_shape_value(&val->type, val->constant);
        }
    }
    for (int i = 0; i < g->n_inputs; i++) name_unknown_dims(g, g->inputs[i]);
    for (int i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        kn_node *n = &g->nodes[i];
        if (n->dead || !n->schema) continue;
        int ni = n->n_inputs, no = n->n_outputs;
        const kn_type **in_tp = calloc((size_t)(ni ? ni : 1), sizeof *in_tp);
        kn_tensor **in_val = calloc((size_t)(ni ? ni : 1), sizeof *in_val);
        kn_type *out_types = calloc((size_t)(no ? no : 1), sizeof *out_types);
        if (!in_tp || !in_val || !out_types) {
            st = KN_OOM();
        } else {
            for (int k = 0; k < ni; k++) {
                int v = n->inputs[k];
                if (v < 0) continue;
                in_tp[k] = &g->values[v].type;
                in_val[k] = s.known[v];
            }
            for (int o = 0; o < no; o++) kn_type_init(&out_types[o]);
            kn_control_type_body_inputs(n, in_tp, ni); /* untyped Loop/Scan body inputs */
            st = infer_subgraphs(n);
            kn_infer_ctx ic = {n, ni, in_tp, (const kn_tensor *const *)in_val, no, out_types, &g->model->arena};
            if (st == KILN_OK && n->schema->infer) st = n->schema->infer(&ic);
            if (st == KILN_OK) {
                for (int o = 0; o < no; o++)
                    if (n->outputs[o] >= 0) {
                        merge_type(&g->values[n->outputs[o]].type, &out_types[o]);
                        name_unknown_dims(g, n->outputs[o]);
                    }
                try_fold(&s, n, in_tp, in_val, out_types);
            }
        }
        free(in_tp);
        free(in_val);
        free(out_types);
    }
done:
    if (s.known)
        for (int v = 0; v < g->n_values; v++)
            if (s.own[v]) kn_tensor_free(s.known[v]);
    free(s.known);
    free(s.own);
    return st;
}

kiln_status kn_graph_infer(kn_graph *g) { return infer_graph(g); }

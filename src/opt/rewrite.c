/* Graph-rewriting helpers shared by the passes: queries over producers and consumers, value
 * forwarding that keeps graph outputs' names, new values and constants, and checked node creation. */
#include "opt/pass.h"

#include "exec/exec.h"
#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kn_opt_note(kn_opt_ctx *c, const char *what) {
    c->changes++;
    for (int i = 0; i < c->n_notes; i++)
        if (!strcmp(c->notes[i].what, what)) {
            c->notes[i].n++;
            return;
        }
    if (c->n_notes < KN_OPT_MAX_NOTES) {
        c->notes[c->n_notes].what = what;
        c->notes[c->n_notes].n = 1;
        c->n_notes++;
    }
}

kiln_status kn_opt_refresh(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    kn_graph_recount(g);
    /* a node's consumers are the nodes naming it as an input and the nodes whose subgraphs read it
     * (kn_graph_outer_reads): a fusion that asks "read only by this node" sees both */
    int *rstart, *rids;
    KN_TRY(kn_graph_outer_reads(g, &rstart, &rids));
    int nv = g->n_values;
    int total = rstart[g->n_nodes];
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead) total += g->nodes[i].n_inputs;
    int *start = realloc(c->cons_start, sizeof(int) * (size_t)(nv + 2));
    if (start) c->cons_start = start;
    int *cons = start ? realloc(c->cons, sizeof(int) * (size_t)(total + 1)) : NULL;
    if (!cons) {
        free(rstart);
        free(rids);
        return KN_OOM();
    }
    c->cons = cons;
    memset(start, 0, sizeof(int) * (size_t)(nv + 2));
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < g->n_nodes; i++) {
            const kn_node *n = &g->nodes[i];
            if (n->dead) continue;
            for (int k = 0; k < n->n_inputs + rstart[i + 1] - rstart[i]; k++) {
                int v = k < n->n_inputs ? n->inputs[k] : rids[rstart[i] + k - n->n_inputs];
                if (v < 0) continue;
                if (pass == 0) start[v + 2]++;
                else cons[start[v + 1]++] = i;
            }
        }
        if (pass == 0)
            for (int v = 0; v < nv; v++) start[v + 2] += start[v + 1];
    }
    free(rstart);
    free(rids);
    c->cons_values = nv;
    c->fresh = true;
    c->fresh_nodes = g->n_nodes;
    c->fresh_values = g->n_values;
    return KILN_OK;
}

/* ------------------------------------------------------------------ queries */

const kn_tensor *kn_opt_const(const kn_opt_ctx *c, int v) {
    /* a body's reference to an enclosing graph's value is that value: an LSTM inside an If reads
     * the model's weights through an Unsqueeze that folds like any other. Enclosing graphs are
     * optimised after their bodies, so what their folding will make does not count yet, but a
     * Constant node's tensor does (exporters that inline a whole model into an If branch write its
     * weights so). */
    const kn_graph *g = c->g;
    for (int depth = 0; depth < 64; depth++) {
        if (v < 0 || v >= g->n_values) return NULL;
        const kn_value *val = &g->values[v];
        if (depth > 0 && !val->constant && val->producer >= 0 && val->producer < g->n_nodes) {
            const kn_node *n = &g->nodes[val->producer];
            if (!n->dead && !*n->domain && !strcmp(n->op_type, "Constant") && n->n_attrs == 1 &&
                n->attrs[0].type == KN_ATTR_TENSOR && !strcmp(n->attrs[0].name, "value") && n->attrs[0].t &&
                n->attrs[0].t->kind == KN_VALUE_TENSOR)
                return n->attrs[0].t;
        }
        if (val->is_outer) {
            v = kn_graph_outer_lookup(g, v);
            g = g->parent;
            continue;
        }
        if (!val->constant || val->is_graph_input || val->constant->kind != KN_VALUE_TENSOR) return NULL;
        return val->constant;
    }
    return NULL;
}

bool kn_opt_scalar(const kn_opt_ctx *c, int v, double *out) {
    const kn_tensor *t = kn_opt_const(c, v);
    if (!t || kn_tensor_count(t) != 1 || t->dtype == KILN_DTYPE_STRING) return false;
    if (!kn_dtype_is_float(t->dtype) && !kn_dtype_is_int(t->dtype)) return false;
    *out = kn_tensor_get_f64(t, 0);
    return true;
}

bool kn_opt_const_all(const kn_opt_ctx *c, int v, double want) {
    const kn_tensor *t = kn_opt_const(c, v);
    if (!t || (!kn_dtype_is_float(t->dtype) && !kn_dtype_is_int(t->dtype) && t->dtype != KILN_DTYPE_BOOL)) return false;
    int64_t n = kn_tensor_count(t);
    if (n < 1 || n > (1 << 20)) return false;
    for (int64_t i = 0; i < n; i++)
        if (kn_tensor_get_f64(t, i) != want) return false;
    return true;
}

bool kn_opt_pinned(const kn_opt_ctx *c, int v) {
    const kn_value *val = &c->g->values[v];
    return val->is_graph_output || val->sub_reads > 0;
}

int kn_opt_producer(const kn_opt_ctx *c, int v) {
    if (v < 0) return -1;
    const kn_value *val = &c->g->values[v];
    if (val->constant || val->is_graph_input || val->is_outer) return -1;
    int p = val->producer;
    return p >= 0 && p < c->g->n_nodes && !c->g->nodes[p].dead ? p : -1;
}

int kn_opt_n_consumers(const kn_opt_ctx *c, int v) {
    if (v < 0 || v >= c->cons_values) return 0;
    return c->cons_start[v + 1] - c->cons_start[v];
}

int kn_opt_only_consumer(const kn_opt_ctx *c, int v) {
    if (v < 0 || v >= c->cons_values || kn_opt_pinned(c, v)) return -1;
    if (c->cons_start[v + 1] - c->cons_start[v] != 1) return -1;
    return c->cons[c->cons_start[v]];
}

bool kn_opt_used_only_by(const kn_opt_ctx *c, int v, const int *nodes, int n) {
    if (v < 0 || v >= c->cons_values || kn_opt_pinned(c, v)) return false;
    for (int k = c->cons_start[v]; k < c->cons_start[v + 1]; k++) {
        bool ok = false;
        for (int i = 0; i < n && !ok; i++) ok = c->cons[k] == nodes[i];
        if (!ok) return false;
    }
    return true;
}

bool kn_opt_is(const kn_opt_ctx *c, int node, const char *op_type) {
    if (node < 0 || node >= c->g->n_nodes) return false;
    const kn_node *n = &c->g->nodes[node];
    return !n->dead && !*n->domain && !strcmp(n->op_type, op_type);
}

int kn_opt_input(const kn_opt_ctx *c, int node, int i) {
    const kn_node *n = &c->g->nodes[node];
    return i >= 0 && i < n->n_inputs ? n->inputs[i] : -1;
}

int kn_opt_n_inputs(const kn_opt_ctx *c, int node) {
    const kn_node *n = &c->g->nodes[node];
    int k = n->n_inputs;
    while (k > 0 && n->inputs[k - 1] < 0) k--;
    return k;
}

int64_t kn_opt_static_count(const kn_type *t) {
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) {
        if (t->dims[d].value < 0) return -1;
        n *= t->dims[d].value;
    }
    return n;
}

bool kn_opt_same_shape(const kn_type *a, const kn_type *b) {
    if (a->kind != KN_TYPE_TENSOR || b->kind != KN_TYPE_TENSOR) return false;
    if (a->rank < 0 || a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++) {
        const kn_dim *x = &a->dims[i], *y = &b->dims[i];
        if (x->value >= 0 && y->value >= 0) {
            if (x->value != y->value) return false;
        } else if (x->value >= 0 || y->value >= 0 || !x->symbol || !y->symbol || strcmp(x->symbol, y->symbol)) {
            return false;
        }
    }
    return true;
}

bool kn_opt_conv_unpadded_unit_stride(const kn_node *n) {
    const char *ap = kn_attr_string(n, "auto_pad", "NOTSET");
    if (strcmp(ap, "NOTSET") && strcmp(ap, "VALID")) return false; /* SAME pads nothing for k=1, but keep it simple */
    int np = 0, ns = 0;
    const int64_t *pads = kn_attr_ints(n, "pads", &np), *strides = kn_attr_ints(n, "strides", &ns);
    for (int i = 0; pads && i < np; i++)
        if (pads[i]) return false;
    for (int i = 0; strides && i < ns; i++)
        if (strides[i] != 1) return false;
    return true;
}

bool kn_opt_is_f32(const kn_opt_ctx *c, int v) {
    if (v < 0) return false;
    const kn_type *t = &c->g->values[v].type;
    return t->kind == KN_TYPE_TENSOR && t->dtype == KILN_DTYPE_FLOAT && t->rank >= 0;
}

bool kn_opt_is_float(const kn_opt_ctx *c, int v) {
    if (v < 0) return false;
    const kn_type *t = &c->g->values[v].type;
    return t->kind == KN_TYPE_TENSOR && t->rank >= 0 &&
           (t->dtype == KILN_DTYPE_FLOAT || t->dtype == KILN_DTYPE_FLOAT16 || t->dtype == KILN_DTYPE_BFLOAT16);
}

bool kn_opt_reduce_axes(const kn_opt_ctx *c, int node, int64_t *axes, int cap, int *n_out) {
    const kn_node *n = &c->g->nodes[node];
    *n_out = 0;
    /* ReduceSum takes axes as an input from 13, the other reductions from 18 */
    int input_from = !strcmp(n->op_type, "ReduceSum") ? 13 : 18;
    if (n->opset < input_from) {
        int cnt = 0;
        const int64_t *a = kn_attr_ints(n, "axes", &cnt);
        if (cnt > cap) return false;
        for (int i = 0; i < cnt; i++) axes[i] = a[i];
        *n_out = cnt;
        return cnt > 0;
    }
    int v = kn_opt_input(c, node, 1);
    if (v < 0) return false;
    const kn_tensor *t = kn_opt_const(c, v);
    if (!t || !kn_dtype_is_int(t->dtype) || t->rank > 1) return false;
    int64_t cnt = kn_tensor_count(t);
    if (cnt <= 0 || cnt > cap) return false;
    for (int64_t i = 0; i < cnt; i++) axes[i] = kn_tensor_get_i64(t, i);
    *n_out = (int)cnt;
    return true;
}

/* ------------------------------------------------------------------ rewriting */

static void replace_reads(kn_graph *g, int from, int to) {
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] == from) n->inputs[k] = to;
    }
}

bool kn_opt_forward(kn_opt_ctx *c, int from, int to) {
    kn_graph *g = c->g;
    if (from == to) return true;
    if (!kn_opt_pinned(c, from)) {
        replace_reads(g, from, to);
        return true;
    }
    kn_value *F = &g->values[from], *T = &g->values[to];
    if (F->is_graph_input || F->is_outer || kn_opt_pinned(c, to) || T->is_graph_input || T->is_outer) return false;
    if (T->constant) {
        /* a graph output that is now a constant: it gets its own copy */
        if (F->constant) return false;
        kn_tensor *copy = NULL;
        if (kn_tensor_clone(T->constant, &copy) != KILN_OK || kn_model_own_tensor(c->model, copy) != KILN_OK) {
            kn_tensor_free(copy);
            kn_clear_error();
            return false;
        }
        F->constant = copy;
        F->producer = -1;
        replace_reads(g, from, to);
        return true;
    }
    int p = kn_opt_producer(c, to);
    if (p < 0) return false;
    kn_node *pn = &g->nodes[p];
    for (int k = 0; k < pn->n_outputs; k++)
        if (pn->outputs[k] == to) pn->outputs[k] = from;
    replace_reads(g, to, from);
    if (F->type.rank < 0 || F->type.dtype == KILN_DTYPE_UNDEFINED) F->type = T->type;
    return true;
}

void kn_opt_kill(kn_opt_ctx *c, int node) { c->g->nodes[node].dead = true; }

kiln_status kn_opt_set_ints(kn_opt_ctx *c, int node, const char *name, const int64_t *v, int n) {
    kn_arena *ar = &c->model->arena;
    kn_node *nd = &c->g->nodes[node];
    int64_t *copy = kn_arena_alloc(ar, sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!copy) return KN_OOM();
    if (n) memcpy(copy, v, sizeof(int64_t) * (size_t)n);
    for (int i = 0; i < nd->n_attrs; i++)
        if (!strcmp(nd->attrs[i].name, name)) {
            nd->attrs[i].type = KN_ATTR_INTS;
            nd->attrs[i].ints = copy;
            nd->attrs[i].n = n;
            return KILN_OK;
        }
    kn_attr *at = kn_arena_alloc(ar, sizeof(kn_attr) * (size_t)(nd->n_attrs + 1));
    if (!at) return KN_OOM();
    if (nd->n_attrs) memcpy(at, nd->attrs, sizeof(kn_attr) * (size_t)nd->n_attrs);
    memset(&at[nd->n_attrs], 0, sizeof(kn_attr));
    at[nd->n_attrs].name = kn_arena_strdup(ar, name);
    if (!at[nd->n_attrs].name) return KN_OOM();
    at[nd->n_attrs].type = KN_ATTR_INTS;
    at[nd->n_attrs].ints = copy;
    at[nd->n_attrs].n = n;
    nd->attrs = at;
    nd->n_attrs++;
    return KILN_OK;
}

int kn_opt_new_value(kn_opt_ctx *c, const char *base, const kn_type *type) {
    kn_graph *g = c->g;
    char name[512];
    for (;;) {
        snprintf(name, sizeof name, "%s_kn%d", base && *base ? base : "v", c->name_counter++);
        if (kn_graph_find_value(g, name) < 0) break;
    }
    int v = kn_graph_add_value(g, name);
    if (v >= 0 && type) g->values[v].type = *type;
    return v;
}

int kn_opt_new_const(kn_opt_ctx *c, const char *base, kn_tensor *t) {
    if (kn_model_own_tensor(c->model, t) != KILN_OK) {
        kn_tensor_free(t);
        return -1;
    }
    int v = kn_opt_new_value(c, base, NULL);
    if (v < 0) return -1;
    c->g->values[v].constant = t;
    kn_type_of_tensor(t, &c->g->values[v].type);
    return v;
}

/* ------------------------------------------------------------------ node prototypes */

void kn_proto_init(kn_opt_proto *p, const char *domain, const char *op_type) {
    memset(p, 0, sizeof *p);
    p->domain = domain;
    p->op_type = op_type;
}

void kn_proto_in(kn_opt_proto *p, int v) {
    if (p->n_inputs < KN_PROTO_MAX_IO) p->inputs[p->n_inputs++] = v;
}

void kn_proto_out(kn_opt_proto *p, int v) {
    if (p->n_outputs < KN_PROTO_MAX_IO) p->outputs[p->n_outputs++] = v;
}

static kn_attr *proto_attr(kn_opt_proto *p, const char *name, kn_attr_type type) {
    kn_attr *a = NULL;
    for (int i = 0; i < p->n_attrs; i++)
        if (!strcmp(p->attrs[i].name, name)) a = &p->attrs[i];
    if (!a) {
        if (p->n_attrs >= KN_PROTO_MAX_ATTRS) return NULL;
        a = &p->attrs[p->n_attrs++];
    }
    memset(a, 0, sizeof *a);
    a->name = name;
    a->type = type;
    return a;
}

void kn_proto_int(kn_opt_proto *p, const char *name, int64_t v) {
    kn_attr *a = proto_attr(p, name, KN_ATTR_INT);
    if (a) a->i = v;
}

void kn_proto_float(kn_opt_proto *p, const char *name, float v) {
    kn_attr *a = proto_attr(p, name, KN_ATTR_FLOAT);
    if (a) a->f = v;
}

void kn_proto_string(kn_opt_proto *p, const char *name, const char *s) {
    kn_attr *a = proto_attr(p, name, KN_ATTR_STRING);
    if (a) {
        a->s = s;
        a->s_len = strlen(s);
    }
}

void kn_proto_ints(kn_opt_proto *p, const char *name, const int64_t *v, int n) {
    kn_attr *a = proto_attr(p, name, KN_ATTR_INTS);
    if (a) {
        a->ints = (int64_t *)v;
        a->n = n;
    }
}

void kn_proto_floats(kn_opt_proto *p, const char *name, const float *v, int n) {
    kn_attr *a = proto_attr(p, name, KN_ATTR_FLOATS);
    if (a) {
        a->floats = (float *)v;
        a->n = n;
    }
}

void kn_proto_copy_attr(kn_opt_proto *p, const kn_opt_ctx *c, int from, const char *name) {
    const kn_attr *src = kn_node_attr(&c->g->nodes[from], name);
    if (!src) return;
    kn_attr *a = proto_attr(p, src->name, src->type);
    if (a) *a = *src;
}

void kn_proto_act(kn_opt_proto *p, const kn_act_spec *a) {
    kn_proto_string(p, "activation", kn_act_name(a->act));
    int n = 0;
    if (a->act == KN_ACT_LEAKY_RELU) n = 1;
    if (a->act == KN_ACT_CLIP || a->act == KN_ACT_HARD_SIGMOID) n = 2;
    p->act_params[0] = a->p0;
    p->act_params[1] = a->p1;
    if (n) kn_proto_floats(p, "activation_params", p->act_params, n);
    if (a->bounded) {
        p->act_bounds[0] = a->lo;
        p->act_bounds[1] = a->hi;
        kn_proto_floats(p, "activation_bounds", p->act_bounds, 2);
    }
}

/* Copies the prototype's attributes (arrays and strings) into the arena. */
static kiln_status attrs_to_arena(kn_arena *ar, const kn_opt_proto *p, kn_attr **out) {
    *out = NULL;
    if (!p->n_attrs) return KILN_OK;
    kn_attr *at = kn_arena_alloc(ar, sizeof(kn_attr) * (size_t)p->n_attrs);
    if (!at) return KN_OOM();
    for (int i = 0; i < p->n_attrs; i++) {
        at[i] = p->attrs[i];
        at[i].name = kn_arena_strdup(ar, p->attrs[i].name);
        if (!at[i].name) return KN_OOM();
        if (p->attrs[i].s) {
            at[i].s = kn_arena_strndup(ar, p->attrs[i].s, p->attrs[i].s_len);
            if (!at[i].s) return KN_OOM();
        }
        if (p->attrs[i].type == KN_ATTR_INTS && p->attrs[i].n) {
            at[i].ints = kn_arena_alloc(ar, sizeof(int64_t) * (size_t)p->attrs[i].n);
            if (!at[i].ints) return KN_OOM();
            memcpy(at[i].ints, p->attrs[i].ints, sizeof(int64_t) * (size_t)p->attrs[i].n);
        }
        if (p->attrs[i].type == KN_ATTR_FLOATS && p->attrs[i].n) {
            at[i].floats = kn_arena_alloc(ar, sizeof(float) * (size_t)p->attrs[i].n);
            if (!at[i].floats) return KN_OOM();
            memcpy(at[i].floats, p->attrs[i].floats, sizeof(float) * (size_t)p->attrs[i].n);
        }
    }
    *out = at;
    return KILN_OK;
}

/* The model imports the kiln domain once it holds a kiln node (com.microsoft: one of its operators). */
static kiln_status import_domain(kn_model *m, const char *domain, int version) {
    if (kn_model_opset(m, domain)) return KILN_OK;
    kn_opset_import *o = kn_arena_alloc(&m->arena, sizeof *o * (size_t)(m->n_opsets + 1));
    if (!o) return KN_OOM();
    if (m->n_opsets) memcpy(o, m->opsets, sizeof *o * (size_t)m->n_opsets);
    o[m->n_opsets].domain = kn_arena_strdup(&m->arena, domain);
    o[m->n_opsets].version = version;
    if (!o[m->n_opsets].domain) return KN_OOM();
    m->opsets = o;
    m->n_opsets++;
    return KILN_OK;
}

kiln_status kn_opt_emit(kn_opt_ctx *c, const kn_opt_proto *p, int name_from, int *node_out) {
    kn_graph *g = c->g;
    *node_out = -1;
    bool kiln_domain = !strcmp(p->domain, "kiln");
    /* ONNX Runtime's contrib operators are all version 1: a model that does not import the domain
     * gets it with the first one a pass forms */
    bool contrib_new = !strcmp(p->domain, "com.microsoft") && !kn_model_opset(c->model, p->domain);
    int opset = kiln_domain || contrib_new ? 1 : (int)kn_model_opset(c->model, p->domain);
    const kn_op_schema *schema = kn_op_find(p->domain, p->op_type, opset, NULL);
    if (!schema) return KILN_OK;
    int ni = p->n_inputs;
    while (ni > 0 && p->inputs[ni - 1] < 0) ni--;
    if (ni < schema->min_inputs || (schema->max_inputs >= 0 && ni > schema->max_inputs)) return KILN_OK;
    if (p->n_outputs < schema->min_outputs || (schema->max_outputs >= 0 && p->n_outputs > schema->max_outputs))
        return KILN_OK;

    kn_node tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.name = name_from >= 0 ? g->nodes[name_from].name : p->op_type;
    tmp.op_type = p->op_type;
    tmp.domain = p->domain;
    tmp.opset = opset;
    tmp.inputs = (int *)p->inputs;
    tmp.n_inputs = p->n_inputs;
    tmp.outputs = (int *)p->outputs;
    tmp.n_outputs = p->n_outputs;
    tmp.attrs = (kn_attr *)p->attrs;
    tmp.n_attrs = p->n_attrs;
    tmp.schema = schema;
    tmp.provider = -1;

    /* the operator must accept these inputs, with the same output types as before */
    const kn_type *in[KN_PROTO_MAX_IO] = {0};
    const kn_tensor *in_val[KN_PROTO_MAX_IO] = {0};
    kn_type out[KN_PROTO_MAX_IO];
    for (int i = 0; i < p->n_inputs; i++) {
        if (p->inputs[i] < 0) continue;
        in[i] = &g->values[p->inputs[i]].type;
        in_val[i] = kn_opt_const(c, p->inputs[i]);
    }
    for (int o = 0; o < p->n_outputs; o++) kn_type_init(&out[o]);
    if (schema->infer) {
        kn_infer_ctx ic = {&tmp, p->n_inputs, in, in_val, p->n_outputs, out, &c->model->arena};
        if (schema->infer(&ic) != KILN_OK) {
            kn_clear_error();
            return KILN_OK;
        }
    }
    for (int o = 0; o < p->n_outputs; o++) {
        if (p->outputs[o] < 0) continue;
        const kn_type *want = &g->values[p->outputs[o]].type;
        if (out[o].dtype != KILN_DTYPE_UNDEFINED && want->dtype != KILN_DTYPE_UNDEFINED && out[o].dtype != want->dtype)
            return KILN_OK;
        if (out[o].rank >= 0 && want->rank >= 0 && out[o].rank != want->rank) return KILN_OK;
        for (int d = 0; out[o].rank >= 0 && d < out[o].rank && d < want->rank; d++)
            if (out[o].dims[d].value >= 0 && want->dims[d].value >= 0 && out[o].dims[d].value != want->dims[d].value)
                return KILN_OK;
    }
    char why[256] = "";
    if (!kn_opt_target_supports(c, &tmp, in, p->n_inputs, name_from, why, sizeof why)) {
        kn_log(KILN_LOG_DEBUG, "optimiser: %s:%s at '%s' not formed: %s", p->domain, p->op_type, tmp.name, why);
        return KILN_OK;
    }

    kn_attr *attrs;
    KN_TRY(attrs_to_arena(&c->model->arena, p, &attrs));
    if (kiln_domain || contrib_new) KN_TRY(import_domain(c->model, p->domain, 1));
    char name[512];
    snprintf(name, sizeof name, "%s%s%s", name_from >= 0 ? g->nodes[name_from].name : "", name_from >= 0 ? "/" : "",
             p->op_type);
    int idx = kn_graph_add_node(g, name, p->op_type, p->domain, p->inputs, ni, p->outputs, p->n_outputs);
    if (idx < 0) return KN_OOM();
    kn_node *n = &g->nodes[idx];
    n->opset = opset;
    n->schema = schema;
    n->attrs = attrs;
    n->n_attrs = p->n_attrs;
    *node_out = idx;
    return KILN_OK;
}

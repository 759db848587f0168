#include "exec/exec.h"
#include "exec/memplan.h"
#include "exec/plan.h"
#include "exec/profile.h"
#include "util/progress.h"

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "ops/op.h"
#include "util/clock.h"
#include "util/limits.h"
#include "util/log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ resolve and assign */

static kiln_status for_each_subgraph(kn_graph *g, kiln_status (*fn)(kn_graph *)) {
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        for (int a = 0; a < n->n_attrs; a++) {
            kn_attr *at = &n->attrs[a];
            if (at->type == KN_ATTR_GRAPH && at->g) KN_TRY(fn(at->g));
            if (at->type == KN_ATTR_GRAPHS)
                for (int k = 0; k < at->n; k++) KN_TRY(fn(at->graphs[k]));
        }
    }
    return KILN_OK;
}

kiln_status kn_graph_resolve(kn_graph *g) {
    char lbl[256];
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        const kn_op_schema *near = NULL;
        n->schema = kn_op_find(n->domain, n->op_type, n->opset, &near);
        if (!n->schema) {
            const char *dom = *n->domain ? n->domain : "ai.onnx";
            if (near)
                return kn_error(KILN_ERR_UNSUPPORTED,
                                "%s: operator %s of domain %s is not supported at opset %d (kiln has it for opset %d%s)",
                                kn_node_label(n, lbl, sizeof lbl), n->op_type, dom, n->opset, near->since,
                                near->until ? " up to a later limit" : " and later");
            if (n->opset <= 0)
                return kn_error(KILN_ERR_INVALID_MODEL, "%s: the model imports no opset for domain %s",
                                kn_node_label(n, lbl, sizeof lbl), dom);
            return kn_error(KILN_ERR_UNSUPPORTED, "%s: operator %s of domain %s is not supported by kiln",
                            kn_node_label(n, lbl, sizeof lbl), n->op_type, dom);
        }
        int ni = 0;
        for (int k = 0; k < n->n_inputs; k++) ni = k + 1; /* count incl. trailing omitted */
        if (ni < n->schema->min_inputs || (n->schema->max_inputs >= 0 && ni > n->schema->max_inputs))
            return kn_error(KILN_ERR_INVALID_MODEL, "%s: has %d inputs, the operator takes %d to %d",
                            kn_node_label(n, lbl, sizeof lbl), ni, n->schema->min_inputs,
                            n->schema->max_inputs);
        if (n->n_outputs < n->schema->min_outputs ||
            (n->schema->max_outputs >= 0 && n->n_outputs > n->schema->max_outputs))
            return kn_error(KILN_ERR_INVALID_MODEL, "%s: has %d outputs, the operator gives %d to %d",
                            kn_node_label(n, lbl, sizeof lbl), n->n_outputs, n->schema->min_outputs,
                            n->schema->max_outputs);
    }
    return for_each_subgraph(g, kn_graph_resolve);
}

kiln_status kn_graph_assign_cpu(kn_graph *g) {
    char lbl[256], why[512];
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        const kn_type *in[64] = {0};
        int ni = n->n_inputs < 64 ? n->n_inputs : 64;
        for (int k = 0; k < ni; k++) in[k] = n->inputs[k] >= 0 ? &g->values[n->inputs[k]].type : NULL;
        why[0] = 0;
        const kn_cpu_kernel *k = kn_cpu_find(n, in, ni, why, sizeof why);
        if (!k)
            return kn_error(KILN_ERR_UNSUPPORTED, "%s: %s", kn_node_label(n, lbl, sizeof lbl), why);
        n->kernel = (void *)k;
        n->provider = 0;
    }
    return for_each_subgraph(g, kn_graph_assign_cpu);
}

/* ------------------------------------------------------------------ runtime */

void kn_type_of_tensor(const kn_tensor *t, kn_type *out) {
    kn_type_init(out);
    if (t->kind == KN_VALUE_TENSOR) {
        kn_type_set_tensor(out, t->dtype, t->rank, t->dims);
        return;
    }
    out->kind = t->kind == KN_VALUE_SEQUENCE ? KN_TYPE_SEQUENCE : KN_TYPE_OPTIONAL;
    out->dtype = t->dtype;
    const kn_tensor *e = t->n_items ? t->items[0] : NULL;
    if (t->kind == KN_VALUE_OPTIONAL) out->elem_kind = e && e->kind == KN_VALUE_SEQUENCE ? KN_TYPE_SEQUENCE : KN_TYPE_TENSOR;
    if (e && e->kind == KN_VALUE_TENSOR) {
        out->rank = e->rank;
        for (int i = 0; i < e->rank; i++) out->dims[i].value = e->dims[i];
    }
}

static kn_tensor *lookup_outer(const kn_exec *x, const char *name) {
    for (const kn_exec *p = x->parent; p; p = p->parent) {
        int id = kn_graph_find_value(p->graph, name);
        if (id < 0) continue;
        if (p->slots[id]) return p->slots[id];
        if (p->graph->values[id].constant) return p->graph->values[id].constant;
        if (!p->graph->values[id].is_outer) return NULL;
    }
    return NULL;
}

/* ------------------------------------------------------------------ the shape memo
 *
 * Which nodes' output types follow from the main graph's input shapes alone, and those types, kept
 * per input-shape set by the first run with that set (in its run context, so concurrent calls share
 * nothing). A value's type is known from the input shapes (MEMO_TYPE) when it is a graph input (its
 * shape is in the set's signature), a constant, or an output of a node whose outputs are; its
 * elements too (MEMO_ELEMS) when it is a constant the caller cannot replace, or the output of a
 * deterministic node whose inputs' elements are all known so (a Shape -> Gather -> Concat chain),
 * or of Shape/Size (elements = the input's shape). A node's output types are kept when its inputs'
 * types are known, it runs no subgraph, its infer function gives static tensor types with the
 * elements of only those inputs whose elements are known (the rest hidden: what it still derives
 * does not depend on data), and its kernel made outputs of exactly those types. Every other node
 * (NonZero, a Reshape or Range fed by an input's values, If/Loop/Scan, and what reads their
 * outputs) is inferred at each run, as before. Control-flow bodies have memos of their own
 * (kn_body_memos), keyed by their inputs' and outer reads' shapes. A kept node's kernel may also
 * keep what it prepares from those shapes (kn_kernel_ctx.prep). */

enum { MEMO_TYPE = 1, MEMO_ELEMS = 2 };

typedef struct kn_shape_memo {
    int64_t *sig; /* the input-shape set (shape_sig) */
    int sig_len;
    uint64_t last_used;
    int n_nodes;
    int *at;             /* per node: index in types of its output 0's type; -1: inferred at each run */
    kn_type *types;      /* the kept nodes' output types, n_outputs each */
    int n_types, cap_types;
    void **prep;         /* per node: its kernel's prepared block (kn_kernel_ctx.prep), kept nodes only */
    unsigned char *val;  /* while recording: per value, MEMO_TYPE | MEMO_ELEMS */
} kn_shape_memo;

/* A control-flow body's memos (kn_run_ctx.bodies), with the input-shape sets seen once: a body's
 * memo is made by its second run with a set, so that a Loop whose carried values grow at each
 * iteration records none. */
typedef struct kn_body_memos {
    const kn_graph *g;
    int *outer; /* the body's outer reads (value ids): their shapes are in its signatures */
    int n_outer;
    /* for each: the enclosing graph that holds the name first (levels up from the body's parent)
     * and its id there, found once: lookup_outer's walk by name at each run costs as much as the
     * body's small nodes */
    int *outer_level, *outer_id;
    const kn_graph **outer_graph;
    kn_shape_memo *m[KN_MEMPLAN_SHAPED];
    uint64_t seen[KN_MEMPLAN_SHAPED]; /* hashes of sets seen once (0: none) */
    int next_seen;
} kn_body_memos;

static _Thread_local uint64_t infer_calls;

uint64_t kn_exec_infer_count(void) { return infer_calls; }

static _Thread_local uint64_t plans_made;

uint64_t kn_exec_plan_count(void) { return plans_made; }

static void memo_free(kn_shape_memo *m) {
    if (!m) return;
    for (int i = 0; m->prep && i < m->n_nodes; i++) free(m->prep[i]);
    free(m->prep);
    free(m->sig);
    free(m->at);
    free(m->types);
    free(m->val);
    free(m);
}

static kn_tensor *lookup_outer(const kn_exec *x, const char *name);

/* The value the body's outer read i (bm->outer[i]) refers to, as lookup_outer finds it, through
 * the place found when the body's entry was made. */
static kn_tensor *outer_tensor(const kn_exec *x, const kn_body_memos *bm, int i) {
    const kn_exec *p = x->parent;
    for (int l = 0; p && l < bm->outer_level[i]; l++) p = p->parent;
    const int id = bm->outer_id[i];
    if (p && p->graph == bm->outer_graph[i] && id >= 0 && id < p->graph->n_values) {
        if (p->slots[id]) return p->slots[id];
        if (p->graph->values[id].constant) return p->graph->values[id].constant;
        if (!p->graph->values[id].is_outer) return NULL;
    }
    return lookup_outer(x, x->graph->values[bm->outer[i]].name);
}

/* Appends t's element type, device, rank and dims (-1 for none); false when t is not a tensor. */
static bool sig_add(int64_t *sig, int *n, const kn_tensor *t) {
    if (!t) {
        sig[(*n)++] = -1;
        return true;
    }
    if (t->kind != KN_VALUE_TENSOR) return false;
    sig[(*n)++] = (int64_t)t->dtype << 32 | (int64_t)t->device << 16 | t->rank;
    for (int d = 0; d < t->rank; d++) sig[(*n)++] = t->dims[d];
    return true;
}

/* The input-shape set of a graph's run: per input its element type, device, rank and dims (-1: not
 * given, the initializer's default), and for a body (bm) the same of each outer read. NULL when
 * one is not a tensor (a sequence's items are not in it: no memo) or out of memory. */
static int64_t *shape_sig(const kn_exec *x, kn_tensor *const *inputs, const kn_body_memos *bm, int *len) {
    const kn_graph *g = x->graph;
    const int n_outer = bm ? bm->n_outer : 0;
    int64_t *sig = malloc(sizeof(int64_t) * (size_t)((g->n_inputs + n_outer) * (KILN_MAX_RANK + 1) + 1));
    int n = 0;
    if (!sig) return NULL;
    bool ok = true;
    for (int i = 0; ok && i < g->n_inputs; i++) ok = sig_add(sig, &n, inputs[i]);
    /* a body's outer reads: an unresolved one (NULL) is an error the run reports */
    for (int i = 0; ok && i < n_outer; i++) {
        const kn_tensor *t = outer_tensor(x, bm, i);
        ok = t && sig_add(sig, &n, t);
    }
    if (!ok) {
        free(sig);
        return NULL;
    }
    *len = n;
    return sig;
}

static void body_memos_free(kn_body_memos *b) {
    if (!b) return;
    for (int i = 0; i < KN_MEMPLAN_SHAPED; i++) memo_free(b->m[i]);
    free(b->outer);
    free(b->outer_level);
    free(b->outer_id);
    free(b->outer_graph);
    free(b);
}

static uint64_t sig_hash(const int64_t *sig, int len) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < len; i++) h = (h ^ (uint64_t)sig[i]) * 1099511628211ull;
    return h ? h : 1;
}

/* Whether the value an outer reference `name` of body g resolves to (as lookup_outer finds it) is
 * a constant of an enclosing graph: the same tensor at every run of the session. */
static bool outer_is_constant(const kn_graph *g, const char *name) {
    for (const kn_graph *p = g->parent; p; p = p->parent) {
        int id = kn_graph_find_value(p, name);
        if (id < 0) continue;
        const kn_value *v = &p->values[id];
        if (v->is_outer) continue;
        return v->constant && !v->is_graph_input;
    }
    return false;
}

/* The memo for this run's input shapes (x->memo), or a new one for the run to record (x->rec),
 * among the KN_MEMPLAN_SHAPED in `home`; body: a control-flow body's (bm: its entry), which records
 * only a set seen before. */
static void choose_memo(kn_exec *x, kn_run_ctx *ctx, kn_shape_memo **home, kn_body_memos *bm,
                        kn_tensor *const *inputs) {
    const kn_graph *g = x->graph;
    int len = 0;
    int64_t *sig = shape_sig(x, inputs, bm, &len);
    if (!sig) {
        kn_clear_error();
        return;
    }
    for (int i = 0; i < KN_MEMPLAN_SHAPED; i++) {
        kn_shape_memo *m = home[i];
        if (m && m->n_nodes == g->n_nodes && m->sig_len == len && !memcmp(m->sig, sig, sizeof *sig * (size_t)len)) {
            m->last_used = ++ctx->runs;
            x->memo = m;
            free(sig);
            return;
        }
    }
    if (bm) {
        uint64_t h = sig_hash(sig, len);
        bool seen = false;
        for (int i = 0; i < KN_MEMPLAN_SHAPED && !seen; i++) seen = bm->seen[i] == h;
        if (!seen) {
            bm->seen[bm->next_seen] = h;
            bm->next_seen = (bm->next_seen + 1) % KN_MEMPLAN_SHAPED;
            free(sig);
            return;
        }
    }
    kn_shape_memo *m = calloc(1, sizeof *m);
    if (m) {
        m->sig = sig;
        m->sig_len = len;
        m->n_nodes = g->n_nodes;
        m->at = malloc(sizeof *m->at * (size_t)(g->n_nodes ? g->n_nodes : 1));
        m->val = calloc((size_t)(g->n_values ? g->n_values : 1), 1);
        m->prep = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *m->prep);
    }
    if (!m || !m->at || !m->val || !m->prep) {
        if (m) memo_free(m);
        else free(sig);
        return; /* no memo: the run infers as before */
    }
    for (int i = 0; i < g->n_nodes; i++) m->at[i] = -1;
    for (int v = 0; v < g->n_values; v++) {
        const kn_value *val = &g->values[v];
        if (val->constant) m->val[v] = MEMO_TYPE | (val->is_graph_input ? 0 : MEMO_ELEMS);
    }
    for (int i = 0; i < g->n_inputs; i++) m->val[g->inputs[i]] = MEMO_TYPE;
    /* a body's outer reads: their shapes are in the signature; their elements known when they are
     * an enclosing graph's constants */
    for (int i = 0; bm && i < bm->n_outer; i++) {
        int v = bm->outer[i];
        m->val[v] = MEMO_TYPE | (outer_is_constant(g, g->values[v].name) ? MEMO_ELEMS : 0);
    }
    x->rec = m;
    x->memo_home = home;
}

/* A body's entry in the run context (made on its first run); NULL when out of memory. */
static kn_body_memos *body_memos(kn_run_ctx *ctx, const kn_graph *g) {
    for (int i = 0; i < ctx->n_bodies; i++)
        if (ctx->bodies[i]->g == g) return ctx->bodies[i];
    kn_body_memos **b = realloc(ctx->bodies, sizeof *b * (size_t)(ctx->n_bodies + 1));
    if (!b) return NULL;
    ctx->bodies = b;
    kn_body_memos *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->g = g;
    for (int v = 0; v < g->n_values; v++) e->n_outer += g->values[v].is_outer;
    size_t no = (size_t)(e->n_outer ? e->n_outer : 1);
    e->outer = malloc(sizeof *e->outer * no);
    e->outer_level = malloc(sizeof *e->outer_level * no);
    e->outer_id = malloc(sizeof *e->outer_id * no);
    e->outer_graph = malloc(sizeof *e->outer_graph * no);
    if (!e->outer || !e->outer_level || !e->outer_id || !e->outer_graph) {
        body_memos_free(e);
        return NULL;
    }
    e->n_outer = 0;
    for (int v = 0; v < g->n_values; v++) {
        if (!g->values[v].is_outer) continue;
        int i = e->n_outer++, level = 0, id = -1;
        const kn_graph *q = g->parent;
        for (; q; q = q->parent, level++)
            if ((id = kn_graph_find_value(q, g->values[v].name)) >= 0) break;
        e->outer[i] = v;
        e->outer_level[i] = level;
        e->outer_id[i] = id;
        e->outer_graph[i] = q;
    }
    ctx->bodies[ctx->n_bodies++] = e;
    return e;
}

/* After a run that recorded a memo: kept, in a free place or in the least recently used one's. */
static void keep_memo(kn_exec *x, kn_run_ctx *ctx) {
    kn_shape_memo *m = x->rec, **home = x->memo_home;
    x->rec = NULL;
    free(m->val);
    m->val = NULL;
    if (kn_log_get_level() >= KILN_LOG_DEBUG) {
        int live = 0, kept = 0;
        for (int i = 0; i < x->graph->n_nodes; i++) {
            live += !x->graph->nodes[i].dead;
            kept += m->at[i] >= 0;
        }
        kn_log(KILN_LOG_DEBUG, "shape memo of graph '%s': %d of %d nodes' output types follow from the input shapes; "
               "the rest are inferred at each run with these shapes", x->graph->name, kept, live);
    }
    m->last_used = ++ctx->runs;
    int at = 0;
    for (int i = 0; i < KN_MEMPLAN_SHAPED; i++) {
        if (!home[i]) {
            at = i;
            break;
        }
        if (home[i]->last_used < home[at]->last_used) at = i;
    }
    memo_free(home[at]);
    home[at] = m;
}

static bool same_static_type(const kn_type *a, const kn_type *b) {
    if (a->kind != b->kind || a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d].value != b->dims[d].value) return false;
    return true;
}

static bool tensor_has_type(const kn_tensor *t, const kn_type *ty) {
    if (!t || t->kind != KN_VALUE_TENSOR || ty->kind != KN_TYPE_TENSOR || t->dtype != ty->dtype || t->rank != ty->rank)
        return false;
    for (int d = 0; d < t->rank; d++)
        if (t->dims[d] != ty->dims[d].value) return false;
    return true;
}

/* While recording: whether node n's output types (types_out, just inferred with every input's
 * value) follow from what the memo knows without data: its inputs' types, and the elements of only
 * those inputs whose elements are known from the input shapes. The check infers n once more with
 * the other inputs' elements hidden. */
static bool memo_node_static(const kn_exec *x, const kn_node *n, const kn_type *const *in_tp,
                             const kn_tensor *const *in_val, const kn_type *types_out) {
    const kn_shape_memo *m = x->rec;
    if (n->schema->flags & KN_OP_HAS_SUBGRAPH) return false;
    bool hidden = false;
    for (int i = 0; i < n->n_inputs; i++) {
        int v = n->inputs[i];
        if (v < 0) continue;
        if (!(m->val[v] & MEMO_TYPE)) return false;
        hidden |= in_val[i] && !(m->val[v] & MEMO_ELEMS);
    }
    for (int o = 0; o < n->n_outputs; o++)
        if (n->outputs[o] >= 0 && (types_out[o].kind != KN_TYPE_TENSOR || !kn_type_is_static(&types_out[o])))
            return false;
    if (!hidden || !n->schema->infer) return true;
    int ni = n->n_inputs, no = n->n_outputs;
    const kn_tensor **masked = malloc(sizeof *masked * (size_t)(ni ? ni : 1));
    kn_type *t2 = malloc(sizeof *t2 * (size_t)(no ? no : 1));
    bool same = masked && t2;
    if (same) {
        for (int i = 0; i < ni; i++)
            masked[i] = n->inputs[i] >= 0 && (m->val[n->inputs[i]] & MEMO_ELEMS) ? in_val[i] : NULL;
        for (int o = 0; o < no; o++) kn_type_init(&t2[o]);
        kn_infer_ctx ic = {n, ni, in_tp, masked, no, t2, &x->graph->model->arena};
        infer_calls++;
        if (n->schema->infer(&ic) != KILN_OK) {
            kn_clear_error(); /* it needs the hidden elements */
            same = false;
        }
        for (int o = 0; same && o < no; o++)
            if (n->outputs[o] >= 0) same = kn_type_is_static(&t2[o]) && same_static_type(&t2[o], &types_out[o]);
    }
    free(masked);
    free(t2);
    return same;
}

/* While recording, after node n (index idx) ran: keeps its output types when they follow from the
 * input shapes (is_static: memo_node_static's answer) and its outputs have them, and marks what is
 * known of its outputs. */
static void memo_node_done(kn_exec *x, const kn_node *n, int idx, bool is_static, const kn_type *types_out) {
    kn_shape_memo *m = x->rec;
    int no = n->n_outputs;
    for (int o = 0; is_static && o < no; o++)
        if (n->outputs[o] >= 0) is_static = tensor_has_type(x->slots[n->outputs[o]], &types_out[o]);
    unsigned char known = 0;
    if (is_static && m->n_types + no > m->cap_types) {
        int cap = m->cap_types ? m->cap_types * 2 : 64;
        while (cap < m->n_types + no) cap *= 2;
        kn_type *t = realloc(m->types, sizeof *t * (size_t)cap);
        if (t) {
            m->types = t;
            m->cap_types = cap;
        } else {
            is_static = false; /* out of memory: inferred at each run */
        }
    }
    if (is_static) {
        m->at[idx] = m->n_types;
        memcpy(&m->types[m->n_types], types_out, sizeof *types_out * (size_t)no);
        m->n_types += no;
        known = MEMO_TYPE;
        bool elems = !(n->schema->flags & KN_OP_NONDETERMINISTIC);
        for (int i = 0; elems && i < n->n_inputs; i++)
            elems = n->inputs[i] < 0 || (m->val[n->inputs[i]] & MEMO_ELEMS);
        if (!*n->domain && (!strcmp(n->op_type, "Shape") || !strcmp(n->op_type, "Size"))) elems = true;
        if (elems) known |= MEMO_ELEMS;
    }
    for (int o = 0; o < no; o++)
        if (n->outputs[o] >= 0) m->val[n->outputs[o]] = known;
}

/* ------------------------------------------------------------------ run contexts and bounds */

void kn_run_ctx_begin(kn_run_ctx *c, const int *terminate, int64_t timeout_ms, int64_t mem_limit) {
    c->terminate = terminate;
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
    c->started_ms = kn_now_ms();
    c->deadline_ms = timeout_ms > 0 ? c->started_ms + (double)timeout_ms : 0;
    atomic_store_explicit((_Atomic int *)&c->stop, 0, memory_order_relaxed);
    c->mem_limit = mem_limit > 0 ? mem_limit : 0;
    c->mem_live = 0;
    c->mem_peak = 0;
    c->memo_off = c->memplan_off = false;
    c->bytes_limit = 0;
}

void kn_run_ctx_clear(kn_run_ctx *c) {
    if (!c) return;
    for (int i = 0; i < KN_MEMPLAN_SHAPED; i++) {
        kn_memplan_free(c->shaped[i]);
        c->shaped[i] = NULL;
        memo_free(c->shapes[i]);
        c->shapes[i] = NULL;
    }
    for (int i = 0; i < c->n_bodies; i++) body_memos_free(c->bodies[i]);
    free(c->bodies);
    c->bodies = NULL;
    c->n_bodies = 0;
    free(c->arena);
    c->arena = NULL;
    c->arena_bytes = 0;
    for (int i = 0; i < c->n_spare; i++) free(c->spare[i]);
    free(c->spare);
    c->spare = NULL;
    c->n_spare = 0;
    for (int i = 0; i < c->n_arrays; i++) free(c->arrays[i]);
    c->n_arrays = 0;
    for (int i = 0; i < c->n_spare_blocks; i++) kn_tensor_free(c->spare_blocks[i]);
    free(c->spare_blocks);
    c->spare_blocks = NULL;
    c->n_spare_blocks = 0;
}

_Static_assert(sizeof ((kn_run_ctx *)0)->shaped / sizeof ((kn_run_ctx *)0)->shaped[0] == KN_MEMPLAN_SHAPED,
               "a run context holds KN_MEMPLAN_SHAPED plans");
_Static_assert(sizeof ((kn_run_ctx *)0)->shapes / sizeof ((kn_run_ctx *)0)->shapes[0] == KN_MEMPLAN_SHAPED,
               "a run context holds KN_MEMPLAN_SHAPED shape memos");

bool kn_run_ctx_stopping(kn_run_ctx *c) {
    if (!c) return false;
    _Atomic int *stop = (_Atomic int *)&c->stop;
    if (atomic_load_explicit(stop, memory_order_relaxed)) return true;
    int why = 0;
    if (c->terminate && atomic_load_explicit((_Atomic int *)c->terminate, memory_order_relaxed)) why = KILN_ERR_CANCELLED;
    else if (c->deadline_ms > 0 && kn_now_ms() >= c->deadline_ms) why = KILN_ERR_DEADLINE;
    if (!why) return false;
    int zero = 0;
    atomic_compare_exchange_strong(stop, &zero, why);
    return true;
}

static bool stop_check(void *arg) { return kn_run_ctx_stopping(arg); }

/* The error of a stopped run; where: "before node 'X' (Op)" or the like. */
static kiln_status stop_error(const kn_run_ctx *c, const char *where) {
    int why = atomic_load_explicit((_Atomic int *)&c->stop, memory_order_relaxed);
    double ran = kn_now_ms() - c->started_ms;
    if (why == KILN_ERR_DEADLINE)
        return kn_error(KILN_ERR_DEADLINE, "the run passed its timeout of %lld ms (kiln_run_options_set_timeout_ms): stopped %s after %.0f ms",
                        (long long)c->timeout_ms, where, ran);
    return kn_error(KILN_ERR_CANCELLED, "the run was cancelled (kiln_run_options_set_terminate): stopped %s after %.0f ms", where, ran);
}

kiln_status kn_exec_check_stop(const kn_kernel_ctx *c) {
    kn_run_ctx *r = c && c->exec ? c->exec->run : NULL;
    if (!r || !kn_run_ctx_stopping(r)) return KILN_OK;
    char lbl[256], where[320];
    snprintf(where, sizeof where, "in %s", c->node ? kn_node_label(c->node, lbl, sizeof lbl) : "a kernel");
    return stop_error(r, where);
}

/* The bytes a value holds (a sequence's or optional's items included). */
static int64_t value_bytes(const kn_tensor *t) {
    if (!t) return 0;
    if (t->kind == KN_VALUE_TENSOR) return (int64_t)t->nbytes;
    int64_t b = 0;
    for (int i = 0; i < t->n_items; i++) b += value_bytes(t->items[i]);
    return b;
}

static void mem_refund(kn_exec *x, int64_t bytes) {
    if (x->run) x->run->mem_live -= bytes;
}

/* Counts `bytes` more for the run; over the limit: KILN_ERR_OUT_OF_MEMORY naming the node and the
 * value (what: "output 0 ('y')" or the like). */
static kiln_status mem_charge(kn_exec *x, const kn_node *n, const char *what, int64_t bytes, bool allocated) {
    kn_run_ctx *r = x->run;
    if (!r) return KILN_OK;
    if (r->mem_limit && r->mem_live + bytes > r->mem_limit) {
        char lbl[256];
        return kn_error(KILN_ERR_OUT_OF_MEMORY,
                        "%s: %s %s %lld bytes, and the run already holds %lld bytes: over the session's memory limit "
                        "of %lld bytes (kiln_session_options_set_memory_limit)",
                        n ? kn_node_label(n, lbl, sizeof lbl) : "a node", what, allocated ? "holds" : "needs",
                        (long long)bytes, (long long)r->mem_live, (long long)r->mem_limit);
    }
    r->mem_live += bytes;
    if (r->mem_live > r->mem_peak) r->mem_peak = r->mem_live;
    return KILN_OK;
}

/* The values subgraph runs handed the node's kernel are no longer the run's to count. */
static void handed_clear(kn_exec *x) {
    for (int i = 0; i < x->n_handed; i++) mem_refund(x, x->handed[i].bytes);
    x->n_handed = 0;
    mem_refund(x, x->handed_bytes);
    x->handed_bytes = 0;
}

/* How many of the body's outputs a kernel passes back in as the next call's inputs: a Loop's
 * carried values (outputs 1..N after the condition), a Scan's states (the first N); 0 for the
 * rest (If, SequenceMap: what they get back they keep). */
static void carried_outputs(const kn_node *n, const kn_graph *body, int *first, int *count) {
    *first = 0;
    *count = 0;
    if (*n->domain) return;
    if (!strcmp(n->op_type, "Loop")) {
        *first = 1;
        *count = body->n_inputs - 2;
    } else if (!strcmp(n->op_type, "Scan")) {
        *count = body->n_inputs - (int)kn_attr_int(n, "num_scan_inputs", 0);
    }
    if (*count < 0) *count = 0;
}

enum { KN_SPARE_HEADERS = 64, KN_SPARE_BLOCK_BYTES = 16384 };

/* Whether t, a host tensor whose block is a small one of the session's buffer pool `pool`, was
 * kept whole for the context's next output of that size. */
static bool keep_spare_block(kn_run_ctx *r, kn_buffer_pool *pool, kn_tensor *t) {
    if (!pool || t->pool != pool || !t->owns_data || t->dtype == KILN_DTYPE_STRING || t->capacity > KN_SPARE_BLOCK_BYTES ||
        !t->data)
        return false;
    if (!r->spare_blocks) {
        r->spare_blocks = malloc(sizeof *r->spare_blocks * KN_SPARE_HEADERS);
        if (!r->spare_blocks) return false;
    }
    if (r->n_spare_blocks >= KN_SPARE_HEADERS) return false;
    r->spare_blocks[r->n_spare_blocks++] = t;
    return true;
}

/* Whether t, a header that kn_tensor_free would only free() (a host tensor viewing memory it does
 * not own: the arena's), or a small tensor of the buffer pool, was kept for the context's next
 * output. */
static bool keep_spare(kn_run_ctx *r, kn_buffer_pool *pool, kn_tensor *t) {
    if (!r || !t || t->kind != KN_VALUE_TENSOR || t->device != KN_DEVICE_HOST || t->items || t->n_items) return false;
    if (t->owns_data || t->pool) return keep_spare_block(r, pool, t);
    if (!r->spare) {
        r->spare = malloc(sizeof *r->spare * KN_SPARE_HEADERS);
        if (!r->spare) return false;
    }
    if (r->n_spare >= KN_SPARE_HEADERS) return false;
    r->spare[r->n_spare++] = t;
    return true;
}

void kn_exec_discard(kn_kernel_ctx *c, kn_tensor *t) {
    kn_exec *x = c ? c->exec : NULL;
    if (!t) return;
    if (!x || !keep_spare(x->run, x->buffers, t)) kn_tensor_free(t);
}

/* Frees owned value v (its memory no longer counted). */
static void free_owned(kn_exec *x, int v) {
    if (x->run) mem_refund(x, value_bytes(x->slots[v]));
    if (!keep_spare(x->run, x->buffers, x->slots[v])) kn_tensor_free(x->slots[v]);
}

static void release(kn_exec *x, int v) {
    if (v < 0 || (!x->owned[v] && !x->alt[v])) return;
    if (--x->remaining[v] > 0) return;
    if (x->owned[v]) free_owned(x, v);
    if (x->owned[v]) x->slots[v] = NULL;
    x->owned[v] = 0;
    if (x->alt[v]) {
        kn_tensor_free(x->alt[v]);
        x->alt[v] = NULL;
    }
}

static const kn_backend *backend_of_device(const kn_runtime *rt, kn_device d) {
    for (int b = 0; rt && b < rt->n_backends; b++)
        if (rt->backends[b].ops->device == d) return &rt->backends[b];
    return NULL;
}

/* Value v (tensor t) on the side the kernel wants: the tensor itself, or its copy, made once per
 * run (per session for the main graph's constants). */
static kiln_status place_input(kn_exec *x, const kn_backend *be, int v, bool want_host, kn_tensor *t,
                               kn_tensor **out) {
    *out = t;
    kn_device want = want_host ? KN_DEVICE_HOST : be->ops->device;
    if (!t || t->kind != KN_VALUE_TENSOR || t->device == want) return KILN_OK;
    if (x->alt[v] && x->alt[v]->device == want) {
        *out = x->alt[v];
        return KILN_OK;
    }
    const kn_graph *g = x->graph;
    kiln_status st;
    if (want_host) {
        const kn_backend *dev = backend_of_device(x->rt, t->device);
        if (!dev) return KN_INTERNAL("a device tensor without its backend");
        kn_tensor_free(x->alt[v]);
        x->alt[v] = NULL;
        st = dev->ops->download(dev->state, t, &x->alt[v]);
        *out = x->alt[v];
        return st;
    }
    if (t == g->values[v].constant && g == x->rt->main)
        return kn_runtime_const_on(x->rt, (int)(be - x->rt->backends), v, t, out);
    if (t == g->values[v].constant && g != x->rt->main && !g->values[v].is_graph_input)
        return kn_runtime_body_const_on(x->rt, (int)(be - x->rt->backends), t, out);
    if (g != x->rt->main && g->values[v].is_outer && x->rt->main) {
        /* a constant of the main graph read inside a control-flow body on a device: its session
         * copy, not one per body run */
        int mv = kn_graph_find_value(x->rt->main, g->values[v].name);
        if (mv >= 0 && x->rt->main->values[mv].constant == t)
            return kn_runtime_const_on(x->rt, (int)(be - x->rt->backends), mv, t, out);
    }
    kn_tensor_free(x->alt[v]);
    x->alt[v] = NULL;
    st = be->ops->upload(be->state, t, false, &x->alt[v]);
    *out = x->alt[v];
    return st;
}

/* A run's value on the host, for graph outputs: the value itself or a copy the caller owns. */
static kiln_status to_host(kn_exec *x, kn_tensor *t, kn_tensor **out) {
    const kn_backend *dev = backend_of_device(x->rt, t->device);
    if (!dev) return KN_INTERNAL("a device tensor without its backend");
    return dev->ops->download(dev->state, t, out);
}

#define KN_MAX_IO 1024

bool kn_exec_is_view(const kn_node *n) {
    if (*n->domain) return false;
    const char *op = n->op_type;
    /* asked for every node of every run: one comparison at most */
    switch (op[0]) {
    case 'R': return !strcmp(op, "Reshape");
    case 'F': return !strcmp(op, "Flatten");
    case 'S': return !strcmp(op, "Squeeze");
    case 'U': return !strcmp(op, "Unsqueeze");
    case 'I': return !strcmp(op, "Identity");
    default: return false;
    }
}

/* Whether t's bytes are in the run's planned arena. */
static bool in_arena(const kn_exec *x, const kn_tensor *t) {
    const unsigned char *d = t->data;
    return x->arena && !t->owns_data && d >= x->arena && d < x->arena + x->plan->arena_bytes;
}

/* Output value v's tensor at its planned offset, when v has a slot of its own there that holds it;
 * false otherwise (the caller allocates as usual). */
static bool arena_output(kn_exec *x, int v, kiln_dtype dtype, int rank, const int64_t *dims, bool zero,
                         kn_tensor **out) {
    const kn_memplan *p = x->plan;
    if (!x->arena || v < 0 || v >= p->n_values || p->offset[v] < 0 || p->alias[v] >= 0 || dtype == KILN_DTYPE_STRING)
        return false;
    const int64_t count = kn_shape_count(dims, rank);
    if (count < 0 || rank < 0 || rank > KILN_MAX_RANK) return false;
    const size_t nbytes = kn_dtype_nbytes(dtype, count);
    if (nbytes > (size_t)p->size[v]) return false;
    kn_run_ctx *r = x->run;
    if (r && r->n_spare && kiln_dtype_size(dtype)) {
        /* a header kept from a released view: set as kn_tensor_new_view sets a new one */
        kn_tensor *t = r->spare[--r->n_spare];
        /* field by field (a compound literal's zeroing of the whole header cost as much as the
         * malloc it replaces); keep_spare took it with device host, no pool and no items */
        t->kind = KN_VALUE_TENSOR;
        t->dtype = dtype;
        t->rank = rank;
        for (int d = 0; d < KILN_MAX_RANK; d++) t->dims[d] = d < rank ? dims[d] : 0;
        t->data = x->arena + p->offset[v];
        t->nbytes = nbytes;
        t->owns_data = false;
        t->device_owner = NULL;
        t->device_id = 0;
        *out = t;
    } else if (kn_tensor_new_view(dtype, rank, dims, x->arena + p->offset[v], (size_t)p->size[v], out) != KILN_OK) {
        kn_clear_error();
        return false;
    }
    (*out)->capacity = (size_t)p->size[v];
    if (zero) memset((*out)->data, 0, (size_t)p->size[v]);
    return true;
}

/* An output from the buffer pool: a small tensor the context kept (keep_spare_block) whose block
 * holds it, or a new one (kn_tensor_new_pooled). */
static kiln_status pooled_output(kn_exec *x, bool zero, kiln_dtype dtype, int rank, const int64_t *dims,
                                 kn_tensor **out) {
    kn_run_ctx *r = x->run;
    if (r && r->n_spare_blocks && dtype != KILN_DTYPE_STRING && kiln_dtype_size(dtype) && rank >= 0 &&
        rank <= KILN_MAX_RANK) {
        const int64_t count = kn_shape_count(dims, rank);
        const size_t nbytes = count >= 0 ? kn_dtype_nbytes(dtype, count) : 0;
        /* a block at most twice what is needed: small ones are not taken by much larger ones */
        for (int i = r->n_spare_blocks - 1; count >= 0 && i >= 0; i--) {
            kn_tensor *t = r->spare_blocks[i];
            if (t->capacity < nbytes || t->capacity > 2 * nbytes + 64) continue;
            r->spare_blocks[i] = r->spare_blocks[--r->n_spare_blocks];
            t->kind = KN_VALUE_TENSOR;
            t->dtype = dtype;
            t->rank = rank;
            for (int d = 0; d < KILN_MAX_RANK; d++) t->dims[d] = d < rank ? dims[d] : 0;
            t->nbytes = nbytes;
            if (zero) memset(t->data, 0, t->capacity);
            *out = t;
            return KILN_OK;
        }
    }
    return kn_tensor_new_pooled(x->buffers, zero, dtype, rank, dims, out);
}

/* ------------------------------------------------------------------ outputs in the caller's memory */

/* Whether the bytes [a, a + na) and [b, b + nb) meet. */
static bool bytes_meet(const void *a, size_t na, const void *b, size_t nb) {
    const unsigned char *p = a, *q = b;
    return p && q && na && nb && p < q + nb && q < p + na;
}

/* Whether host value t (a container's items included) has bytes in [data, data + nbytes). */
static bool value_meets(const kn_tensor *t, const void *data, size_t nbytes) {
    if (!t || t->device != KN_DEVICE_HOST) return false;
    if (t->kind == KN_VALUE_TENSOR) return t->dtype != KILN_DTYPE_STRING && bytes_meet(t->data, t->nbytes, data, nbytes);
    for (int i = 0; i < t->n_items; i++)
        if (value_meets(t->items[i], data, nbytes)) return true;
    return false;
}

/* Whether value v can be written into caller tensor d by the node that makes it: a tensor of d's
 * element type made at run time by a live host node that runs no subgraph (a subgraph operator
 * hands over its body's values). */
static bool direct_target(const kn_exec *x, int v, const kn_tensor *d) {
    const kn_graph *g = x->graph;
    const kn_value *val = &g->values[v];
    if (val->constant || val->is_graph_input || val->is_outer) return false;
    if (val->producer < 0 || val->producer >= g->n_nodes) return false;
    const kn_node *n = &g->nodes[val->producer];
    if (n->dead || !n->schema || (n->schema->flags & KN_OP_HAS_SUBGRAPH)) return false;
    if (val->type.kind != KN_TYPE_TENSOR || val->type.dtype != d->dtype) return false;
    for (int o = 0; o < n->n_outputs; o++)
        if (n->outputs[o] == v) return kn_memplan_host_output(x->rt, n, o);
    return false;
}

/* kn_exec_graph_ctx's `into`: x->direct[v] for each graph output v whose node can write into the
 * caller's tensor (see exec.h), and along a chain of views (Reshape, Flatten, ...) that make it
 * from values nobody else reads, for their nodes too (each view then takes its input's tensor
 * over: no copy at all). */
static kiln_status bind_direct(kn_exec *x, kn_tensor *const *inputs, kn_tensor *const *into) {
    const kn_graph *g = x->graph;
    for (int i = 0; i < g->n_outputs; i++) {
        kn_tensor *d = into[i];
        if (!d || d->kind != KN_VALUE_TENSOR || d->device != KN_DEVICE_HOST || d->dtype == KILN_DTYPE_STRING ||
            !d->data || !d->nbytes)
            continue;
        size_t es = kiln_dtype_size(d->dtype);
        if (!es || (uintptr_t)d->data % es) continue; /* packed sub-byte types; misaligned elements */
        int v = g->outputs[i];
        if (v < 0 || v >= g->n_values || (x->direct && x->direct[v])) continue; /* the second of one value: copied */
        if (!direct_target(x, v, d)) continue;
        /* memory the run reads, or another output's: written only after the run, by copies */
        bool clash = false;
        for (int j = 0; j < g->n_outputs && !clash; j++)
            clash = j != i && into[j] && value_meets(into[j], d->data, d->nbytes);
        for (int k = 0; k < g->n_inputs && !clash; k++) clash = inputs[k] && value_meets(inputs[k], d->data, d->nbytes);
        if (clash) continue;
        if (!x->direct) {
            x->direct = calloc((size_t)g->n_values, sizeof *x->direct);
            if (!x->direct) return KN_OOM();
        }
        x->direct[v] = d;
        for (int w = v, depth = 0; depth < g->n_nodes; depth++) {
            const kn_node *n = &g->nodes[g->values[w].producer];
            if (!kn_exec_is_view(n) || n->n_outputs != 1 || n->n_inputs < 1) break;
            int u = n->inputs[0];
            if (u < 0 || u >= g->n_values || x->direct[u]) break;
            bool twice = false;
            for (int k = 1; k < n->n_inputs; k++) twice |= n->inputs[k] == u;
            const kn_value *uv = &g->values[u];
            if (twice || uv->uses != 1 || uv->is_graph_output || !direct_target(x, u, d)) break;
            x->direct[u] = d;
            w = u;
        }
    }
    return KILN_OK;
}

/* Output o of node n (value v) as a view of the caller's tensor bound to v, when the node computes
 * what it holds: the same element type and bytes (and shape, for the graph output itself), and no
 * input of the node in its memory. false: the caller allocates as usual. */
static bool direct_output(kn_exec *x, const kn_node *n, int v, kn_tensor *const *in, kiln_dtype dtype, int rank,
                          const int64_t *dims, bool zero, kn_tensor **out) {
    kn_tensor *d = x->direct && v >= 0 ? x->direct[v] : NULL;
    if (!d || dtype != d->dtype || kn_dtype_nbytes(dtype, kn_shape_count(dims, rank)) != d->nbytes) return false;
    if (x->graph->values[v].is_graph_output &&
        (rank != d->rank || (rank && memcmp(dims, d->dims, sizeof(int64_t) * (size_t)rank))))
        return false;
    for (int i = 0; i < n->n_inputs; i++)
        if (value_meets(in[i], d->data, d->nbytes)) return false;
    if (kn_tensor_new_view(dtype, rank, dims, d->data, d->nbytes, out) != KILN_OK) {
        kn_clear_error();
        return false;
    }
    (*out)->capacity = d->nbytes;
    if (zero) memset((*out)->data, 0, d->nbytes);
    return true;
}

/* A view that reads the last use of a tensor this run made, where its kernel wants it, takes that
 * tensor and only gives it the new shape: no copy and no kernel (on CUDA one kernel less per view
 * in every run and in every captured graph). Otherwise the kernel copies as before. */
static bool take_as_view(kn_exec *x, const kn_node *n, kn_tensor *const *in, const kn_type *out_type) {
    int v = n->n_inputs > 0 ? n->inputs[0] : -1;
    if (n->n_outputs != 1 || n->outputs[0] < 0 || v < 0) return false;
    if (!x->owned[v] || x->remaining[v] != 1 || in[0] != x->slots[v] || in[0]->kind != KN_VALUE_TENSOR) return false;
    for (int i = 1; i < n->n_inputs; i++)
        if (n->inputs[i] == v) return false;
    if (!kn_type_is_static(out_type) || out_type->dtype != in[0]->dtype) return false;
    /* a tensor in the planned arena goes only to the view the plan gave its slot */
    if (in_arena(x, in[0]) && x->plan->alias[n->outputs[0]] < 0) return false;
    /* an output bound to the caller's tensor: taken only when the input is already there, else the
     * kernel's one copy puts it there */
    kn_tensor *d = x->direct ? x->direct[n->outputs[0]] : NULL;
    if (d && in[0]->data != d->data) return false;
    int64_t dims[KILN_MAX_RANK];
    for (int d = 0; d < out_type->rank; d++) dims[d] = out_type->dims[d].value;
    if (kn_shape_count(dims, out_type->rank) != kn_tensor_count(in[0])) return false;
    kn_tensor *t = x->slots[v];
    x->slots[v] = NULL;
    x->owned[v] = 0;
    t->rank = out_type->rank;
    memcpy(t->dims, dims, sizeof(int64_t) * (size_t)out_type->rank);
    int o = n->outputs[0];
    x->slots[o] = t;
    x->owned[o] = 1;
    x->remaining[o] = x->pv[o].uses;
    return true;
}

/* Runs step s of the graph's plan (its node, kernel and traits were found at compile time). */
static kiln_status run_node(kn_exec *x, const kn_step *s) {
    const kn_graph *g = x->graph;
    const kn_node *n = s->node;
    char lbl[256];
    if (s->flags & KN_STEP_UNPLACED)
        return kn_error(KILN_ERR_INTERNAL, "%s: not placed on a provider (at %s:%d)",
                        kn_node_label(n, lbl, sizeof lbl), __FILE__, __LINE__);
    const kn_backend *be = s->be;
    const bool device = (s->flags & KN_STEP_DEVICE) != 0;
    int ni = n->n_inputs, no = n->n_outputs;
    const int idx = s->idx;
    /* output types kept by the first run with these input shapes: no inference */
    const int memo_at = x->memo ? x->memo->at[idx] : -1;
    bool rec_static = false; /* recording: whether n's output types follow from the input shapes */
    if (ni > KN_MAX_IO || no > KN_MAX_IO)
        return kn_error(KILN_ERR_UNSUPPORTED, "%s: more than %d inputs or outputs",
                        kn_node_label(n, lbl, sizeof lbl), KN_MAX_IO);
    kn_tensor *in[KN_MAX_IO];
    kn_type in_types[KN_MAX_IO > 64 ? 64 : KN_MAX_IO];
    const kn_type *in_tp[KN_MAX_IO];
    const kn_tensor *in_val[KN_MAX_IO];
    kn_type out_types[KN_MAX_IO > 64 ? 64 : KN_MAX_IO];
    kn_tensor *out[KN_MAX_IO];
    kn_type *types_in = ni <= 64 || memo_at >= 0 ? in_types : calloc((size_t)ni, sizeof(kn_type));
    kn_type *types_out = no <= 64 || memo_at >= 0 ? out_types : calloc((size_t)no, sizeof(kn_type));
    /* the types the outputs get: inferred below, or the memo's */
    const kn_type *tout = memo_at >= 0 ? &x->memo->types[memo_at] : types_out;
    kiln_status st = KILN_OK;
    /* before anything can fail: `done` frees the outputs (an input that could not be placed on
     * its device freed uninitialised pointers) */
    for (int o = 0; o < no; o++) out[o] = NULL;
    if (!types_in || !types_out) {
        st = KN_OOM();
        goto done;
    }
    for (int i = 0; i < ni; i++) {
        int v = n->inputs[i];
        in[i] = NULL;
        if (v >= 0) {
            in[i] = x->slots[v];
            if (!in[i]) in[i] = x->pv[v].constant;
            if (!in[i] && x->pv[v].outer) in[i] = lookup_outer(x, g->values[v].name);
            if (!in[i]) {
                st = kn_error(KILN_ERR_INTERNAL, "%s: input '%s' has no value at run time (at %s:%d)",
                              kn_node_label(n, lbl, sizeof lbl), g->values[v].name, __FILE__, __LINE__);
                goto done;
            }
        }
        /* a host kernel's input is placed only when it is on a device (a mixed session) */
        if (in[i] && be && (device || in[i]->device != KN_DEVICE_HOST) &&
            !(be->ops->input_metadata_only && be->ops->input_metadata_only(n->kernel, n, i))) {
            bool want_host = !device || (be->ops->input_on_host && be->ops->input_on_host(n->kernel, n, i));
            st = place_input(x, be, v, want_host, in[i], &in[i]);
            if (st != KILN_OK) {
                kn_error_prefix(st, "%s: input %d: ", kn_node_label(n, lbl, sizeof lbl), i);
                goto done;
            }
        }
        if (memo_at >= 0) continue;
        if (in[i]) {
            kn_type_of_tensor(in[i], &types_in[i]);
            in_tp[i] = &types_in[i];
        } else {
            in_tp[i] = NULL;
        }
        /* infer reads values on the host only; a device kernel marks the inputs it needs there */
        in_val[i] = in[i] && in[i]->device == KN_DEVICE_HOST ? in[i] : NULL;
    }
    for (int o = 0; memo_at < 0 && o < no; o++) kn_type_init(&types_out[o]);
    const bool overwrites = (s->flags & KN_STEP_OVERWRITES) != 0;
    if (memo_at < 0 && n->schema->infer) {
        kn_infer_ctx ic = {n, ni, in_tp, in_val, no, types_out, &g->model->arena};
        infer_calls++;
        st = n->schema->infer(&ic);
        if (st != KILN_OK) goto done;
    }
    if (x->rec) rec_static = memo_node_static(x, n, in_tp, in_val, types_out);
    if (no == 1 && (s->flags & KN_STEP_VIEW) && take_as_view(x, n, in, &tout[0])) goto done;
    if (x->run && x->run->mem_limit) {
        /* the outputs whose size is known now, before they are allocated */
        int64_t need = 0, big_bytes = -1;
        int big = -1;
        for (int o = 0; o < no; o++) {
            if (n->outputs[o] < 0 || !kn_type_is_static(&tout[o]) || tout[o].kind != KN_TYPE_TENSOR) continue;
            int64_t dims[KILN_MAX_RANK];
            for (int d = 0; d < tout[o].rank; d++) dims[d] = tout[o].dims[d].value;
            int64_t b = (int64_t)kn_dtype_nbytes(tout[o].dtype, kn_shape_count(dims, tout[o].rank));
            need += b;
            if (b > big_bytes) {
                big = o;
                big_bytes = b;
            }
        }
        if (big >= 0 && x->run->mem_live + need > x->run->mem_limit) {
            char what[320];
            snprintf(what, sizeof what, "%s %d ('%s')", no > 1 ? "the outputs, the largest" : "output", big,
                     g->values[n->outputs[big]].name);
            st = mem_charge(x, n, what, need, false);
            if (st != KILN_OK) goto done;
            mem_refund(x, need);
        }
    }
    for (int o = 0; o < no; o++) {
        if (n->outputs[o] < 0 && !(s->flags & KN_STEP_SUBGRAPH)) continue;
        if (kn_type_is_static(&tout[o])) {
            int64_t dims[KILN_MAX_RANK];
            for (int d = 0; d < tout[o].rank; d++) dims[d] = tout[o].dims[d].value;
            if (device &&
                !(be->ops->output_on_host && be->ops->output_on_host(n->kernel, n, o)))
                st = be->ops->new_tensor(be->state, tout[o].dtype, tout[o].rank, dims, &out[o]);
            else if (!direct_output(x, n, n->outputs[o], in, tout[o].dtype, tout[o].rank, dims, !overwrites,
                                    &out[o]) &&
                     !arena_output(x, n->outputs[o], tout[o].dtype, tout[o].rank, dims, !overwrites, &out[o])) {
                st = pooled_output(x, !overwrites, tout[o].dtype, tout[o].rank, dims, &out[o]);
                if (st == KILN_OK && x->record && n->outputs[o] >= 0) x->record[n->outputs[o]] = (int64_t)out[o]->nbytes;
            }
            if (st != KILN_OK) {
                kn_error_prefix(st, "%s: output %d: ", kn_node_label(n, lbl, sizeof lbl), o);
                goto done;
            }
        }
    }
    /* a kept node's kernel may keep what it prepares for these shapes */
    kn_kernel_ctx kc = {n, g, ni, in, no, out, x->pool, x, memo_at >= 0 ? &x->memo->prep[idx] : NULL, s->params};
    double prof_t0 = kn_profile_on() ? kn_profile_begin(be) : 0;
    st = s->cpu ? s->cpu(&kc) : be->ops->run(be->state, n->kernel, &kc);
    if (prof_t0 != 0 && st == KILN_OK) kn_profile_end_call(&kc, n, be, prof_t0);
    if (st != KILN_OK) goto done;
    for (int o = 0; o < no; o++) {
        int v = n->outputs[o];
        if (v < 0) continue;
        if (!out[o]) {
            st = kn_error(KILN_ERR_INTERNAL, "%s: the kernel produced no output %d (at %s:%d)",
                          kn_node_label(n, lbl, sizeof lbl), o, __FILE__, __LINE__);
            goto done;
        }
        if (x->run) {
            int64_t bytes = value_bytes(out[o]);
            if (x->run->mem_limit && x->run->mem_live + bytes > x->run->mem_limit) {
                char what[320]; /* (made only for the message: a run makes many outputs) */
                snprintf(what, sizeof what, "output %d ('%s')", o, g->values[v].name);
                st = mem_charge(x, n, what, bytes, true);
                goto done;
            }
            x->run->mem_live += bytes;
            if (x->run->mem_live > x->run->mem_peak) x->run->mem_peak = x->run->mem_live;
        }
        x->slots[v] = out[o];
        x->owned[v] = 1;
        x->remaining[v] = x->pv[v].uses;
        out[o] = NULL;
    }
done:
    if (st == KILN_OK && x->rec) memo_node_done(x, n, idx, rec_static, types_out);
    if (x->n_handed || x->handed_bytes) handed_clear(x);
    for (int o = 0; o < no; o++)
        if (out[o]) kn_tensor_free(out[o]); /* (set only on an error: no call per output) */
    if (types_in != in_types) free(types_in);
    if (types_out != out_types) free(types_out);
    if (st == KILN_OK)
        for (int i = 0; i < ni; i++) release(x, n->inputs[i]);
    return st;
}

static kiln_status exec_graph(const kn_graph *g, kn_runtime *rt, kn_threadpool *pool, kn_buffer_pool *buffers,
                              kn_exec *parent, kn_run_ctx *ctx, kn_tensor *const *inputs, kn_tensor **outputs,
                              unsigned flags, kn_tensor *const *into);

kiln_status kn_exec_graph(const kn_graph *g, kn_threadpool *pool, kn_buffer_pool *buffers, kn_exec *parent,
                          kn_tensor *const *inputs, kn_tensor **outputs) {
    return kn_exec_graph_rt(g, parent ? parent->rt : NULL, pool, buffers, parent, inputs, outputs);
}

kiln_status kn_exec_graph_rt(const kn_graph *g, kn_runtime *rt, kn_threadpool *pool, kn_buffer_pool *buffers,
                             kn_exec *parent, kn_tensor *const *inputs, kn_tensor **outputs) {
    return kn_exec_graph_flags(g, rt, pool, buffers, parent, inputs, outputs, 0);
}

/* A device output the run cannot hand over (still read later, a graph input, asked for twice):
 * a copy on the same device. */
static kiln_status device_copy(kn_exec *x, const kn_tensor *t, kn_tensor **out) {
    const kn_backend *dev = backend_of_device(x->rt, t->device);
    *out = NULL;
    if (!dev || !dev->ops->copy) return KN_INTERNAL("a device tensor without a backend that copies it");
    KN_TRY(dev->ops->new_tensor(dev->state, t->dtype, t->rank, t->dims, out));
    kiln_status st = dev->ops->copy(dev->state, t, *out);
    if (st != KILN_OK) {
        kn_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

/* The main graph's run: its memory plan (the session's static one, or the one made for these input
 * shapes) and an arena that holds it; or, for input shapes not seen yet, a record of what the run
 * allocates (*sig_out: their signature, for the plan made after the run). */
static void choose_plan(kn_exec *x, kn_runtime *rt, kn_run_ctx *ctx, kn_tensor *const *inputs, int64_t **sig_out,
                        int *len_out) {
    const kn_graph *g = x->graph;
    kn_memplan *p = NULL;
    if (rt->memplan) {
        if (rt->memplan->n_values == g->n_values) p = rt->memplan;
    } else {
        int len = 0;
        int64_t *sig = kn_memplan_signature(g, inputs, &len);
        if (!sig) return;
        for (int i = 0; i < KN_MEMPLAN_SHAPED && !p; i++) {
            kn_memplan *q = ctx->shaped[i];
            if (q && q->n_values == g->n_values && q->sig_len == len && !memcmp(q->sig, sig, sizeof *sig * (size_t)len))
                p = q;
        }
        if (!p) {
            x->record = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *x->record);
            if (x->record) {
                *sig_out = sig;
                *len_out = len;
            } else {
                free(sig);
            }
            return;
        }
        free(sig);
        p->last_used = ++ctx->runs;
    }
    if (!p) return;
    if (ctx->arena_bytes < p->arena_bytes) {
        /* an arena past the run's memory limit or the tensor size limit is not made: the run then
         * allocates value by value, and the first value past a limit fails it with a message */
        const uint64_t run_limit = x->run && x->run->mem_limit ? (uint64_t)x->run->mem_limit : UINT64_MAX;
        if ((uint64_t)p->arena_bytes > run_limit || (uint64_t)p->arena_bytes > kn_tensor_bytes_limit()) return;
        unsigned char *a = aligned_alloc(KN_MEMPLAN_ALIGN, (size_t)p->arena_bytes);
        if (!a) return; /* the run allocates as before */
        free(ctx->arena);
        ctx->arena = a;
        ctx->arena_bytes = p->arena_bytes;
    }
    x->plan = p;
    x->arena = ctx->arena;
}

/* After a run that recorded its allocations: the plan for its input shapes, in a free place or in
 * the least recently used one's. */
static void keep_plan(kn_exec *x, kn_runtime *rt, kn_run_ctx *ctx, int64_t *sig, int len) {
    kn_memplan *p = NULL;
    if (kn_memplan_build(x->graph, rt, x->record, &p) != KILN_OK) {
        kn_clear_error();
        free(sig);
        return;
    }
    /* nothing to place (a graph of one node: only inputs and outputs): an empty plan all the same,
     * so that the next runs of these shapes find it instead of recording and building again (the
     * calloc, build and frees were ~5% of a one-node QLinearConv's run) */
    if (!p && !(p = kn_memplan_new(x->graph->n_values))) {
        free(sig);
        return;
    }
    p->sig = sig;
    p->sig_len = len;
    kn_memplan_log(p, "made by the first run with these input shapes");
    p->last_used = ++ctx->runs;
    int at = 0;
    for (int i = 0; i < KN_MEMPLAN_SHAPED; i++) {
        if (!ctx->shaped[i]) {
            at = i;
            break;
        }
        if (ctx->shaped[i]->last_used < ctx->shaped[at]->last_used) at = i;
    }
    kn_memplan_free(ctx->shaped[at]);
    ctx->shaped[at] = p;
}

kiln_status kn_exec_graph_flags(const kn_graph *g, kn_runtime *rt, kn_threadpool *pool, kn_buffer_pool *buffers,
                                kn_exec *parent, kn_tensor *const *inputs, kn_tensor **outputs, unsigned flags) {
    return exec_graph(g, rt, pool, buffers, parent, NULL, inputs, outputs, flags, NULL);
}

kiln_status kn_exec_graph_ctx(const kn_graph *g, kn_runtime *rt, kn_threadpool *pool, kn_buffer_pool *buffers,
                              kn_run_ctx *ctx, kn_tensor *const *inputs, kn_tensor **outputs, unsigned flags,
                              kn_tensor *const *into) {
    bool bounded = ctx && (ctx->terminate || ctx->deadline_ms > 0);
    if (bounded) kn_parallel_set_stop(stop_check, ctx);
    /* (asked at each allocation of the run) */
    if (ctx && ctx->bytes_limit) kn_tensor_bytes_limit_pin_to(ctx->bytes_limit);
    else kn_tensor_bytes_limit_pin();
    kiln_status st = exec_graph(g, rt, pool, buffers, NULL, ctx, inputs, outputs, flags, into);
    kn_tensor_bytes_limit_unpin();
    if (bounded) kn_parallel_set_stop(NULL, NULL);
    return st;
}

/* Runs g; ctx: the call's context for the main graph (NULL for a subgraph: its parent's); into:
 * the caller's tensors for the main graph's outputs (kn_exec_graph_ctx), or NULL. */
/* Zeroed memory for a graph run's per-value arrays: a block the run context kept (the most recent
 * one large enough), or a new one; *cap: its size. */
static unsigned char *arrays_take(kn_run_ctx *r, size_t bytes, size_t *cap) {
    for (int i = r ? r->n_arrays - 1 : -1; i >= 0; i--) {
        if (r->arrays_bytes[i] < bytes) continue;
        unsigned char *b = r->arrays[i];
        *cap = r->arrays_bytes[i];
        r->n_arrays--;
        r->arrays[i] = r->arrays[r->n_arrays];
        r->arrays_bytes[i] = r->arrays_bytes[r->n_arrays];
        memset(b, 0, bytes);
        return b;
    }
    *cap = bytes;
    return calloc(bytes, 1);
}

static void arrays_give(kn_run_ctx *r, unsigned char *b, size_t cap) {
    const int room = (int)(sizeof r->arrays / sizeof r->arrays[0]);
    if (!b) return;
    if (!r || r->n_arrays == room || cap > ((size_t)1 << 20)) { /* (a large graph's: not kept) */
        free(b);
        return;
    }
    r->arrays[r->n_arrays] = b;
    r->arrays_bytes[r->n_arrays++] = cap;
}

static kiln_status exec_graph(const kn_graph *g, kn_runtime *rt, kn_threadpool *pool, kn_buffer_pool *buffers,
                              kn_exec *parent, kn_run_ctx *ctx, kn_tensor *const *inputs, kn_tensor **outputs,
                              unsigned flags, kn_tensor *const *into) {
    kn_exec x = {g, NULL, NULL, NULL, NULL, pool, buffers, parent, rt, NULL};
    x.run = parent ? parent->run : ctx;
    int64_t *sig = NULL; /* the input shapes, for a run that makes a memory plan */
    int sig_len = 0;
    size_t nv = (size_t)(g->n_values ? g->n_values : 1);
    /* one block for the four per-value arrays (a Loop body's run makes them at each iteration) */
    const size_t block_bytes = nv * (sizeof *x.slots + sizeof *x.alt + sizeof *x.remaining + 1);
    size_t block_cap = 0;
    unsigned char *block = arrays_take(x.run, block_bytes, &block_cap);
    if (block) {
        x.slots = (kn_tensor **)block;
        x.alt = (kn_tensor **)(block + nv * sizeof *x.slots);
        x.remaining = (int *)(block + nv * (sizeof *x.slots + sizeof *x.alt));
        x.owned = block + nv * (sizeof *x.slots + sizeof *x.alt + sizeof *x.remaining);
    }
    kiln_status st = KILN_OK;
    kn_progress prog = {0};
    kn_plan *own_plan = NULL;
    char lbl[256];
    for (int i = 0; i < g->n_outputs; i++) outputs[i] = NULL;
    if (!x.slots || !x.owned || !x.remaining || !x.alt) {
        st = KN_OOM();
        goto done;
    }
    /* the graph's steps in the session's compiled plan (or made for this run where there is none:
     * a run outside a session) */
    const kn_graph_plan *gp = x.run && x.run->plan ? kn_plan_find(x.run->plan, g) : NULL;
    if (!gp) {
        plans_made++;
        st = kn_plan_build(g, rt, false, &own_plan);
        if (st != KILN_OK) goto done;
        gp = &own_plan->graphs[0];
    }
    x.pv = gp->values;
    /* (KILN_MEMORY_PLAN=0: every intermediate from the buffer pool; KILN_SHAPE_MEMO=0: every node
     * inferred; for measuring and checking what each saves) */
    if (rt && ctx && g == rt->main && !parent && !ctx->memplan_off) choose_plan(&x, rt, ctx, inputs, &sig, &sig_len);
    if (rt && ctx && g == rt->main && !parent && !ctx->memo_off) choose_memo(&x, ctx, ctx->shapes, NULL, inputs);
    if (parent && x.run && !x.run->memo_off) {
        kn_body_memos *bm = body_memos(x.run, g);
        if (bm) choose_memo(&x, x.run, bm->m, bm, inputs);
    }
    if (into && rt && ctx && g == rt->main && !parent) {
        st = bind_direct(&x, inputs, into);
        if (st != KILN_OK) goto done;
    }
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        x.slots[v] = inputs[i] ? inputs[i] : g->values[v].constant;
        x.remaining[v] = x.pv[v].uses; /* frees a device copy of the input after its last use */
    }
    /* a main-graph run that takes more than a second (a first run tuning its kernels, a large
     * model) shows its progress on a terminal (util/progress.h) */
    kn_progress_begin(&prog, parent ? NULL : "run: node");
    for (int si = 0; si < gp->n_steps; si++) {
        const kn_step *step = &gp->steps[si];
        const kn_node *n = step->node;
        const int i = step->idx;
        if ((si & 7) == 0 && prog.what && prog.t_start != 0 && kn_progress_due(&prog)) {
            char what[96];
            snprintf(what, sizeof what, "%s%s", n->op_type,
                     n->provider >= 0 && rt && n->provider < rt->n_backends ? " on " : "");
            if (n->provider >= 0 && rt && n->provider < rt->n_backends)
                snprintf(what + strlen(what), sizeof what - strlen(what), "%s", rt->backends[n->provider].ops->name);
            kn_progress_update(&prog, i, g->n_nodes, what);
        }
        if (x.run && kn_run_ctx_stopping(x.run)) {
            char where[320];
            snprintf(where, sizeof where, "before %s", kn_node_label(n, lbl, sizeof lbl));
            st = stop_error(x.run, where);
            goto done;
        }
        st = run_node(&x, step);
        /* a kernel whose parallel chunks saw the stop left its outputs incomplete */
        if (st == KILN_OK && x.run && atomic_load_explicit((_Atomic int *)&x.run->stop, memory_order_relaxed)) {
            char where[320];
            snprintf(where, sizeof where, "in %s", kn_node_label(n, lbl, sizeof lbl));
            st = stop_error(x.run, where);
        }
        if (st != KILN_OK) goto done;
    }
    for (int i = 0; i < g->n_outputs; i++) {
        int v = g->outputs[i];
        kn_tensor *t = x.slots[v];
        if (!t) t = g->values[v].constant;
        if (!t && g->values[v].is_outer) t = lookup_outer(&x, g->values[v].name);
        if (!t) {
            st = kn_error(KILN_ERR_INVALID_MODEL, "graph '%s': output '%s' was not computed", g->name,
                          g->values[v].name);
            goto done;
        }
        if (t->kind == KN_VALUE_TENSOR && t->device != KN_DEVICE_HOST && (flags & KN_EXEC_DEVICE_OUTPUTS)) {
            /* left on the device: handed over when this is the value's last reader, else copied */
            if (x.owned[v] && x.remaining[v] <= 1) {
                outputs[i] = t;
                mem_refund(&x, value_bytes(t));
                x.slots[v] = NULL;
                x.owned[v] = 0;
            } else {
                st = device_copy(&x, t, &outputs[i]);
                if (st != KILN_OK) goto done;
                if (x.owned[v]) x.remaining[v]--;
            }
            continue;
        }
        if (t->kind == KN_VALUE_TENSOR && t->device != KN_DEVICE_HOST) {
            /* outputs come back on the host */
            st = to_host(&x, t, &outputs[i]);
            if (st != KILN_OK) goto done;
            if (x.owned[v]) x.remaining[v]--;
            continue;
        }
        /* hand over the run's own value when this is its last reader; copy otherwise */
        if (x.owned[v] && x.remaining[v] <= 1) {
            outputs[i] = t; /* its block goes back to the session's pool when the caller is done with it */
            mem_refund(&x, value_bytes(t));
            x.slots[v] = NULL;
            x.owned[v] = 0;
        } else {
            st = kn_tensor_clone(t, &outputs[i]);
            if (st != KILN_OK) goto done;
            if (x.owned[v]) x.remaining[v]--;
        }
    }
done:
    (void)lbl;
    kn_progress_end(&prog);
    if (st != KILN_OK)
        for (int i = 0; i < g->n_outputs; i++) {
            kn_tensor_free(outputs[i]);
            outputs[i] = NULL;
        }
    if (x.slots)
        for (int i = 0; i < g->n_values; i++)
            if (x.owned[i]) free_owned(&x, i);
    if (x.alt)
        for (int i = 0; i < g->n_values; i++)
            if (x.alt[i]) kn_tensor_free(x.alt[i]); /* (rare: a call per value cost a tenth of the loop) */
    if (x.record && st == KILN_OK) keep_plan(&x, rt, ctx, sig, sig_len);
    else free(sig);
    if (x.rec && st == KILN_OK) keep_memo(&x, x.run);
    else memo_free(x.rec); /* a failed run's record may be partial */
    free(x.record);
    handed_clear(&x);
    free(x.handed);
    free(x.direct);
    arrays_give(x.run, block, block_cap);
    kn_plan_free(own_plan);
    return st;
}

kiln_status kn_exec_subgraph(kn_kernel_ctx *c, const kn_graph *body, kn_tensor *const *inputs,
                             int n_inputs, kn_tensor **outputs, int n_outputs) {
    if (n_inputs != body->n_inputs || n_outputs != body->n_outputs)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL,
                               "subgraph '%s' has %d inputs and %d outputs; the operator passes %d and expects %d",
                               body->name, body->n_inputs, body->n_outputs, n_inputs, n_outputs);
    kn_exec *px = c->exec;
    kn_run_ctx *r = px ? px->run : NULL;
    if (r && kn_run_ctx_stopping(r)) {
        char lbl[256], where[320];
        snprintf(where, sizeof where, "in %s, running its subgraph '%s'", kn_node_label(c->node, lbl, sizeof lbl),
                 body->name);
        for (int i = 0; i < n_outputs; i++) outputs[i] = NULL;
        return stop_error(r, where);
    }
    /* a value handed out by an earlier call and passed back in (a loop-carried state) is the
     * kernel's to free once this call is done: no longer counted */
    for (int i = 0; px && i < n_inputs; i++)
        for (int k = 0; inputs[i] && k < px->n_handed; k++)
            if (px->handed[k].t == inputs[i]) {
                mem_refund(px, px->handed[k].bytes);
                px->handed[k--] = px->handed[--px->n_handed];
            }
    /* a device backend's control-flow kernel gets the body's outputs where they were computed
     * (exec/control_flow.h); the CPU's get them on the host */
    kn_runtime *rt = px ? px->rt : NULL;
    unsigned flags = 0;
    if (rt && c->node->provider >= 0 && c->node->provider < rt->n_backends &&
        rt->backends[c->node->provider].ops->device != KN_DEVICE_HOST)
        flags = KN_EXEC_DEVICE_OUTPUTS;
    kiln_status st =
        kn_exec_graph_flags(body, rt, c->pool, px ? px->buffers : NULL, px, inputs, outputs, flags);
    if (st != KILN_OK || !r || !r->mem_limit) return st;
    /* what the body hands the kernel is counted until the node ends (a Loop's scan outputs pile up):
     * the values that come back as inputs one by one (the list stays as short as the carried
     * state), the rest as a sum */
    if (px->n_handed + n_outputs > px->cap_handed) {
        int cap = px->cap_handed ? px->cap_handed * 2 : 16;
        while (cap < px->n_handed + n_outputs) cap *= 2;
        kn_handed *h = realloc(px->handed, sizeof *h * (size_t)cap);
        if (!h) st = KN_OOM();
        else {
            px->handed = h;
            px->cap_handed = cap;
        }
    }
    int n0 = px->n_handed, first = 0, n_carried = 0;
    int64_t sum0 = px->handed_bytes;
    carried_outputs(c->node, body, &first, &n_carried);
    /* a Loop frees its body's condition at once: not counted */
    bool loop = !*c->node->domain && !strcmp(c->node->op_type, "Loop");
    for (int i = 0; st == KILN_OK && i < n_outputs; i++) {
        int64_t b = value_bytes(outputs[i]);
        if (!b || (loop && i == 0)) continue;
        char what[320];
        snprintf(what, sizeof what, "subgraph '%s' output %d ('%s')", body->name, i, body->values[body->outputs[i]].name);
        st = mem_charge(px, c->node, what, b, true);
        if (st != KILN_OK) break;
        if (i >= first && i < first + n_carried) px->handed[px->n_handed++] = (kn_handed){outputs[i], b};
        else px->handed_bytes += b;
    }
    if (st != KILN_OK) {
        while (px->n_handed > n0) mem_refund(px, px->handed[--px->n_handed].bytes);
        mem_refund(px, px->handed_bytes - sum0);
        px->handed_bytes = sum0;
        for (int i = 0; i < n_outputs; i++) {
            kn_tensor_free(outputs[i]);
            outputs[i] = NULL;
        }
    }
    return st;
}

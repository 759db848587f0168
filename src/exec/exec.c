#include "exec/exec.h"
#include "exec/memplan.h"
#include "exec/profile.h"

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "ops/op.h"

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

static void release(kn_exec *x, int v) {
    if (v < 0 || (!x->owned[v] && !x->alt[v])) return;
    if (--x->remaining[v] > 0) return;
    if (x->owned[v]) kn_tensor_free(x->slots[v]);
    if (x->owned[v]) x->slots[v] = NULL;
    x->owned[v] = 0;
    kn_tensor_free(x->alt[v]);
    x->alt[v] = NULL;
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
    return !strcmp(op, "Reshape") || !strcmp(op, "Flatten") || !strcmp(op, "Squeeze") || !strcmp(op, "Unsqueeze") ||
           !strcmp(op, "Identity");
}

/* KILN_MEMORY_PLAN=0: a run allocates every intermediate from the buffer pool instead (for
 * measuring and checking what the plan does; read at each run). */
static bool memplan_wanted(void) {
    const char *e = getenv("KILN_MEMORY_PLAN");
    return !(e && !strcmp(e, "0"));
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
    if (kn_dtype_nbytes(dtype, kn_shape_count(dims, rank)) > (size_t)p->size[v]) return false;
    if (kn_tensor_new_view(dtype, rank, dims, x->arena + p->offset[v], (size_t)p->size[v], out) != KILN_OK) {
        kn_clear_error();
        return false;
    }
    (*out)->capacity = (size_t)p->size[v];
    if (zero) memset((*out)->data, 0, (size_t)p->size[v]);
    return true;
}

/* A view that reads the last use of a tensor this run made, where its kernel wants it, takes that
 * tensor and only gives it the new shape: no copy and no kernel (on CUDA one kernel less per view
 * in every run and in every captured graph). Otherwise the kernel copies as before. */
static bool take_as_view(kn_exec *x, const kn_node *n, kn_tensor *const *in, const kn_type *out_type) {
    int v = n->n_inputs > 0 ? n->inputs[0] : -1;
    if (!kn_exec_is_view(n) || n->n_outputs != 1 || n->outputs[0] < 0 || v < 0) return false;
    if (!x->owned[v] || x->remaining[v] != 1 || in[0] != x->slots[v] || in[0]->kind != KN_VALUE_TENSOR) return false;
    for (int i = 1; i < n->n_inputs; i++)
        if (n->inputs[i] == v) return false;
    if (!kn_type_is_static(out_type) || out_type->dtype != in[0]->dtype) return false;
    /* a tensor in the planned arena goes only to the view the plan gave its slot */
    if (in_arena(x, in[0]) && x->plan->alias[n->outputs[0]] < 0) return false;
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
    x->remaining[o] = x->graph->values[o].uses;
    return true;
}

static kiln_status run_node(kn_exec *x, const kn_node *n) {
    const kn_graph *g = x->graph;
    char lbl[256];
    const kn_backend *be = NULL;
    if (x->rt) {
        if (n->provider < 0 || n->provider >= x->rt->n_backends || !n->kernel)
            return kn_error(KILN_ERR_INTERNAL, "%s: not placed on a provider (at %s:%d)",
                            kn_node_label(n, lbl, sizeof lbl), __FILE__, __LINE__);
        be = &x->rt->backends[n->provider];
    }
    int ni = n->n_inputs, no = n->n_outputs;
    if (ni > KN_MAX_IO || no > KN_MAX_IO)
        return kn_error(KILN_ERR_UNSUPPORTED, "%s: more than %d inputs or outputs",
                        kn_node_label(n, lbl, sizeof lbl), KN_MAX_IO);
    kn_tensor *in[KN_MAX_IO];
    kn_type in_types[KN_MAX_IO > 64 ? 64 : KN_MAX_IO];
    const kn_type *in_tp[KN_MAX_IO];
    const kn_tensor *in_val[KN_MAX_IO];
    kn_type out_types[KN_MAX_IO > 64 ? 64 : KN_MAX_IO];
    kn_tensor *out[KN_MAX_IO];
    kn_type *types_in = ni <= 64 ? in_types : calloc((size_t)ni, sizeof(kn_type));
    kn_type *types_out = no <= 64 ? out_types : calloc((size_t)no, sizeof(kn_type));
    kiln_status st = KILN_OK;
    if (!types_in || !types_out) {
        st = KN_OOM();
        goto done;
    }
    for (int i = 0; i < ni; i++) {
        int v = n->inputs[i];
        in[i] = NULL;
        if (v >= 0) {
            in[i] = x->slots[v];
            if (!in[i]) in[i] = g->values[v].constant;
            if (!in[i] && g->values[v].is_outer) in[i] = lookup_outer(x, g->values[v].name);
            if (!in[i]) {
                st = kn_error(KILN_ERR_INTERNAL, "%s: input '%s' has no value at run time (at %s:%d)",
                              kn_node_label(n, lbl, sizeof lbl), g->values[v].name, __FILE__, __LINE__);
                goto done;
            }
        }
        if (in[i] && be && !(be->ops->input_metadata_only && be->ops->input_metadata_only(n->kernel, n, i))) {
            bool want_host = be->ops->device == KN_DEVICE_HOST ||
                             (be->ops->input_on_host && be->ops->input_on_host(n->kernel, n, i));
            st = place_input(x, be, v, want_host, in[i], &in[i]);
            if (st != KILN_OK) {
                kn_error_prefix(st, "%s: input %d: ", kn_node_label(n, lbl, sizeof lbl), i);
                goto done;
            }
        }
        if (in[i]) {
            kn_type_of_tensor(in[i], &types_in[i]);
            in_tp[i] = &types_in[i];
        } else {
            in_tp[i] = NULL;
        }
        /* infer reads values on the host only; a device kernel marks the inputs it needs there */
        in_val[i] = in[i] && in[i]->device == KN_DEVICE_HOST ? in[i] : NULL;
    }
    for (int o = 0; o < no; o++) {
        kn_type_init(&types_out[o]);
        out[o] = NULL;
    }
    const kn_cpu_kernel *k = be ? NULL : n->kernel;
    bool overwrites = be ? be->ops->overwrites && be->ops->overwrites(n->kernel) : (k->flags & KN_KERNEL_OVERWRITES) != 0;
    kn_infer_ctx ic = {n, ni, in_tp, in_val, no, types_out, &g->model->arena};
    if (n->schema->infer) {
        st = n->schema->infer(&ic);
        if (st != KILN_OK) goto done;
    }
    if (no == 1 && take_as_view(x, n, in, &types_out[0])) goto done;
    for (int o = 0; o < no; o++) {
        if (n->outputs[o] < 0 && !(n->schema->flags & KN_OP_HAS_SUBGRAPH)) continue;
        if (kn_type_is_static(&types_out[o])) {
            int64_t dims[KILN_MAX_RANK];
            for (int d = 0; d < types_out[o].rank; d++) dims[d] = types_out[o].dims[d].value;
            if (be && be->ops->device != KN_DEVICE_HOST &&
                !(be->ops->output_on_host && be->ops->output_on_host(n->kernel, n, o)))
                st = be->ops->new_tensor(be->state, types_out[o].dtype, types_out[o].rank, dims, &out[o]);
            else if (!arena_output(x, n->outputs[o], types_out[o].dtype, types_out[o].rank, dims, !overwrites, &out[o])) {
                st = kn_tensor_new_pooled(x->buffers, !overwrites, types_out[o].dtype, types_out[o].rank, dims,
                                          &out[o]);
                if (st == KILN_OK && x->record && n->outputs[o] >= 0) x->record[n->outputs[o]] = (int64_t)out[o]->nbytes;
            }
            if (st != KILN_OK) {
                kn_error_prefix(st, "%s: output %d: ", kn_node_label(n, lbl, sizeof lbl), o);
                goto done;
            }
        }
    }
    kn_kernel_ctx kc = {n, g, ni, in, no, out, x->pool, x};
    double prof_t0 = kn_profile_on() ? kn_profile_begin(be) : 0;
    st = be ? be->ops->run(be->state, n->kernel, &kc) : k->run(&kc);
    if (prof_t0 != 0 && st == KILN_OK) kn_profile_end(n, be, prof_t0);
    if (st != KILN_OK) goto done;
    for (int o = 0; o < no; o++) {
        int v = n->outputs[o];
        if (v < 0) continue;
        if (!out[o]) {
            st = kn_error(KILN_ERR_INTERNAL, "%s: the kernel produced no output %d (at %s:%d)",
                          kn_node_label(n, lbl, sizeof lbl), o, __FILE__, __LINE__);
            goto done;
        }
        x->slots[v] = out[o];
        x->owned[v] = 1;
        x->remaining[v] = g->values[v].uses;
        out[o] = NULL;
    }
done:
    for (int o = 0; o < no; o++) kn_tensor_free(out[o]);
    if (types_in != in_types) free(types_in);
    if (types_out != out_types) free(types_out);
    if (st == KILN_OK)
        for (int i = 0; i < ni; i++) release(x, n->inputs[i]);
    return st;
}

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
static void choose_plan(kn_exec *x, kn_runtime *rt, kn_tensor *const *inputs, int64_t **sig_out, int *len_out) {
    const kn_graph *g = x->graph;
    kn_memplan *p = NULL;
    if (rt->memplan) {
        if (rt->memplan->n_values == g->n_values) p = rt->memplan;
    } else {
        int len = 0;
        int64_t *sig = kn_memplan_signature(g, inputs, &len);
        if (!sig) return;
        for (int i = 0; i < KN_MEMPLAN_SHAPED && !p; i++) {
            kn_memplan *q = rt->shaped[i];
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
        p->last_used = ++rt->runs;
    }
    if (!p) return;
    if (rt->arena_bytes < p->arena_bytes) {
        unsigned char *a = aligned_alloc(KN_MEMPLAN_ALIGN, (size_t)p->arena_bytes);
        if (!a) return; /* the run allocates as before */
        free(rt->arena);
        rt->arena = a;
        rt->arena_bytes = p->arena_bytes;
    }
    x->plan = p;
    x->arena = rt->arena;
}

/* After a run that recorded its allocations: the plan for its input shapes, in a free place or in
 * the least recently used one's. */
static void keep_plan(kn_exec *x, kn_runtime *rt, int64_t *sig, int len) {
    kn_memplan *p = NULL;
    if (kn_memplan_build(x->graph, rt, x->record, &p) != KILN_OK || !p) {
        kn_clear_error();
        free(sig);
        return;
    }
    p->sig = sig;
    p->sig_len = len;
    kn_memplan_log(p, "made by the first run with these input shapes");
    p->last_used = ++rt->runs;
    int at = 0;
    for (int i = 0; i < KN_MEMPLAN_SHAPED; i++) {
        if (!rt->shaped[i]) {
            at = i;
            break;
        }
        if (rt->shaped[i]->last_used < rt->shaped[at]->last_used) at = i;
    }
    kn_memplan_free(rt->shaped[at]);
    rt->shaped[at] = p;
}

kiln_status kn_exec_graph_flags(const kn_graph *g, kn_runtime *rt, kn_threadpool *pool, kn_buffer_pool *buffers,
                                kn_exec *parent, kn_tensor *const *inputs, kn_tensor **outputs, unsigned flags) {
    kn_exec x = {g, NULL, NULL, NULL, pool, buffers, parent, rt, NULL};
    int64_t *sig = NULL; /* the input shapes, for a run that makes a memory plan */
    int sig_len = 0;
    size_t nv = (size_t)(g->n_values ? g->n_values : 1);
    x.slots = calloc(nv, sizeof *x.slots);
    x.owned = calloc(nv, 1);
    x.remaining = calloc(nv, sizeof *x.remaining);
    x.alt = calloc(nv, sizeof *x.alt);
    kiln_status st = KILN_OK;
    char lbl[256];
    for (int i = 0; i < g->n_outputs; i++) outputs[i] = NULL;
    if (!x.slots || !x.owned || !x.remaining || !x.alt) {
        st = KN_OOM();
        goto done;
    }
    if (rt && g == rt->main && !parent && memplan_wanted()) choose_plan(&x, rt, inputs, &sig, &sig_len);
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        x.slots[v] = inputs[i] ? inputs[i] : g->values[v].constant;
        x.remaining[v] = g->values[v].uses; /* frees a device copy of the input after its last use */
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        st = run_node(&x, n);
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
    if (st != KILN_OK)
        for (int i = 0; i < g->n_outputs; i++) {
            kn_tensor_free(outputs[i]);
            outputs[i] = NULL;
        }
    if (x.slots)
        for (int i = 0; i < g->n_values; i++)
            if (x.owned[i]) kn_tensor_free(x.slots[i]);
    if (x.alt)
        for (int i = 0; i < g->n_values; i++) kn_tensor_free(x.alt[i]);
    if (x.record && st == KILN_OK) keep_plan(&x, rt, sig, sig_len);
    else free(sig);
    free(x.record);
    free(x.alt);
    free(x.slots);
    free(x.owned);
    free(x.remaining);
    return st;
}

kiln_status kn_exec_subgraph(kn_kernel_ctx *c, const kn_graph *body, kn_tensor *const *inputs,
                             int n_inputs, kn_tensor **outputs, int n_outputs) {
    if (n_inputs != body->n_inputs || n_outputs != body->n_outputs)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL,
                               "subgraph '%s' has %d inputs and %d outputs; the operator passes %d and expects %d",
                               body->name, body->n_inputs, body->n_outputs, n_inputs, n_outputs);
    return kn_exec_graph(body, c->pool, c->exec ? c->exec->buffers : NULL, c->exec, inputs, outputs);
}

/* Captured runs: a session whose device work can be recorded (the CUDA provider's graphs) runs
 * each set of input shapes once as usual, which makes every lazy choice (algorithms, converted
 * weights, constants on the device, allocator blocks); the next run with the same shapes is
 * recorded into a graph with its own input buffers, and later runs replay it: inputs are copied
 * into those buffers, the graph is launched, and the caller copies the outputs out of it. When the
 * caller's inputs are in device memory the graph reads them where they are and copies the outputs
 * into the caller's device tensors itself, for as long as the caller keeps the same buffers (see
 * kn_captured): a replay is one launch. Each
 * call context (graph_run.h, kn_call_ctx) does this on its own lane, with graphs of its own, so
 * concurrent calls never share a graph or its buffers.
 *
 * What makes a session not recordable is checked once, from the placement: a node on the CPU that
 * reads a value computed at run time (it would need the device's data on the host in the middle of
 * the run), a device kernel reading such a value on the host, random operators (a replay would
 * repeat the numbers). Control-flow bodies are checked by the same rules in their node's scope: an
 * If whose condition, or a Loop whose trip count or condition (its body's condition output after
 * each iteration too), is computed on the device at run time reads it back on the host, so such a
 * session runs uncaptured, with the reason logged; one whose choices come from constants and shapes
 * (and a Scan, which reads nothing back) is recorded with its bodies unrolled. What only the run
 * itself can tell (a kernel that waits for the device, an output shape that depends on data) makes
 * the recording fail: the reason is logged at info level and that set of shapes runs uncaptured
 * from then on. Host-side values that depend only on shapes
 * (Shape -> Gather -> Concat chains) are the same on every run with those shapes, so the graph
 * keeps what they were when it was recorded. */
#include "exec/graph_run.h"

#include "backend/backend.h"
#include "exec/control_flow.h"
#include "exec/exec.h"
#include "util/log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kn_ctx_graphs kn_ctx_graphs;

#define KN_MAX_GRAPHS 4 /* captured graphs per call context (least recently used goes) */
#define KN_MAX_SEEN 16  /* input-shape sets remembered as warmed up or not recordable */

/* A graph recorded for one input-shape set. A copying graph reads its own input buffers (each
 * replay copies the caller's inputs in first). A graph made for the caller's buffers, when every
 * input given was in the device's memory, reads them where they are and copies each output the
 * caller gave a device tensor for into it as its last step: a replay is then one launch, as a
 * CUDA graph replays in PyTorch or ONNX Runtime's IO binding, and it serves only calls with those
 * same addresses (a call with others drops it, see kn_seen.moves). */
typedef struct kn_captured {
    int64_t *sig; /* the input-shape set it was recorded for */
    size_t sig_len;
    void *graph;          /* the backend's handle */
    kn_tensor **inputs;   /* per graph input: the buffer the graph reads (NULL: not given, or read in place) */
    kn_tensor **outputs;  /* per graph output: the graph's value (device memory it keeps, or a host value) */
    const void **reads;   /* per graph input: the caller's memory the graph reads in place, or NULL */
    void **writes;        /* per graph output: the caller's memory the graph writes the output into, or NULL */
    bool in_place;        /* made for the caller's buffers (reads and writes hold its addresses) */
    uint64_t last_used;
} kn_captured;

/* A caller's buffers that move between calls: a graph made for them is dropped and remade for the
 * new ones this many times per shape set, then that set records copying graphs (a caller cycling
 * through several buffers would otherwise record at every call). */
#define KN_MAX_MOVES 2

typedef struct kn_seen {
    int64_t *sig;
    size_t sig_len;
    bool failed; /* recording failed: run uncaptured */
    int moves;   /* graphs made for the caller's buffers dropped because the buffers moved */
} kn_seen;

/* The session's decision (runs are recorded, on this backend) and its counts. */
struct kn_graph_cache {
    int backend; /* index of the recording backend in the session's runtime */
    _Atomic int n_graphs;       /* graphs held by all the contexts */
    _Atomic uint64_t launches;  /* graph launches (replays, and the first launch after a recording) */
    _Atomic uint64_t in_place_launches; /* those of graphs made for the caller's buffers */
};

/* What one call context recorded, on its lane (graph_run.h, kn_call_ctx): used by one call at a
 * time, so unlocked. Each context warms up and records its own graphs: they replay on its lane's
 * stream, into that lane's memory. */
struct kn_ctx_graphs {
    kn_captured graphs[KN_MAX_GRAPHS];
    int n_graphs;
    kn_seen seen[KN_MAX_SEEN];
    int n_seen, next_seen;
    uint64_t tick;
};

/* ------------------------------------------------------------------ recordability */

static bool is_random_op(const kn_node *n) {
    static const char *const ops[] = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                      "Multinomial", "Bernoulli"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!strcmp(n->op_type, ops[i])) return true;
    return false;
}

/* A graph being checked, inside the graphs whose control-flow nodes run it (NULL up for the main
 * graph). fixed: per value, known on the host before the run's device work, from constants and
 * shapes only. */
typedef struct rec_scope {
    const kn_graph *g;
    const unsigned char *fixed;
    const struct rec_scope *up;
} rec_scope;

/* Whether value v of s's graph is fixed: its own, or (read from an enclosing scope) the value of
 * that name in the nearest scope that has it, as the executor finds it (exec.c, lookup_outer). */
static bool value_fixed(const rec_scope *s, int v) {
    if (s->fixed[v]) return true;
    bool outer = s->g->values[v].is_outer;
    const char *name = s->g->values[v].name;
    for (const rec_scope *p = s->up; outer && p; p = p->up) {
        int id = kn_graph_find_value(p->g, name);
        if (id < 0) continue;
        if (p->fixed[id]) return true;
        outer = p->g->values[id].is_outer;
    }
    return false;
}

/* Whether every run of g with the same input shapes issues the same device work, with host-side
 * values that depend on shapes only; why says which node it is not so. A control-flow node's
 * bodies are checked in its scope: a body's first `fixed_inputs` inputs are fixed (all of them
 * under a node on the host, which reads only fixed values; under a device node those its kernel
 * sets on the host, a Loop's iteration number and condition: kn_cf_host_body_inputs), and its first
 * `host_read_outputs` outputs must be (a device Loop reads its body's condition on the host after
 * each iteration, as it reads its trip count and first condition, inputs marked host). */
static bool recordable_in(const kn_graph *g, const kn_runtime *rt, int dev, const rec_scope *up, int fixed_inputs,
                          int host_read_outputs, int depth, char *why, size_t cap) {
    char lbl[256];
    if (depth > 64) {
        snprintf(why, cap, "graph '%s': control flow nested more than 64 deep", g->name);
        return false;
    }
    unsigned char *fixed = calloc((size_t)(g->n_values ? g->n_values : 1), 1);
    if (!fixed) {
        snprintf(why, cap, "out of memory");
        return false;
    }
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].constant && !g->values[v].is_graph_input) fixed[v] = 1;
    for (int i = 0; i < fixed_inputs && i < g->n_inputs; i++) fixed[g->inputs[i]] = 1;
    rec_scope scope = {g, fixed, up};
    bool ok = true;
    for (int i = 0; ok && i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        if (is_random_op(n)) {
            snprintf(why, cap, "%s: a random operator (a replay would repeat its numbers)", kn_node_label(n, lbl, sizeof lbl));
            ok = false;
            break;
        }
        if (n->provider < 0 || n->provider >= rt->n_backends) {
            snprintf(why, cap, "%s: not placed", kn_node_label(n, lbl, sizeof lbl));
            ok = false;
            break;
        }
        const kn_backend *be = &rt->backends[n->provider];
        bool all_fixed = true;
        for (int k = 0; ok && k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            bool meta = be->ops->input_metadata_only && be->ops->input_metadata_only(n->kernel, n, k);
            if (meta || value_fixed(&scope, v)) continue;
            all_fixed = false;
            bool on_host = be->ops->device == KN_DEVICE_HOST ||
                           (be->ops->input_on_host && be->ops->input_on_host(n->kernel, n, k));
            if (on_host) {
                snprintf(why, cap, "%s runs on %s and reads input %d ('%s'), computed at run time, on the host",
                         kn_node_label(n, lbl, sizeof lbl), be->ops->device == KN_DEVICE_HOST ? "the CPU" : be->ops->name,
                         k, g->values[v].name);
                ok = false;
            }
        }
        if (!ok) break;
        if (n->provider != dev && be->ops->device != KN_DEVICE_HOST) {
            snprintf(why, cap, "%s runs on a second device provider '%s'", kn_node_label(n, lbl, sizeof lbl),
                     be->ops->name);
            ok = false;
            break;
        }
        /* control flow: its bodies, in this scope */
        bool host_node = be->ops->device == KN_DEVICE_HOST;
        for (int a = 0; ok && a < n->n_attrs; a++) {
            const kn_attr *at = &n->attrs[a];
            int nb = at->type == KN_ATTR_GRAPH ? (at->g != NULL) : at->type == KN_ATTR_GRAPHS ? at->n : 0;
            for (int k = 0; ok && k < nb; k++) {
                const kn_graph *body = at->type == KN_ATTR_GRAPH ? at->g : at->graphs[k];
                ok = recordable_in(body, rt, dev, &scope, host_node ? body->n_inputs : kn_cf_host_body_inputs(n),
                                   host_node ? 0 : kn_cf_host_read_body_outputs(n), depth + 1, why, cap);
                if (!ok) {
                    /* the innermost reason, with where it is */
                    char inner[768];
                    snprintf(inner, sizeof inner, "%s", why);
                    snprintf(why, cap, "in %s, body '%s': %s", kn_node_label(n, lbl, sizeof lbl), body->name, inner);
                }
            }
        }
        if (!ok) break;
        for (int o = 0; ok && o < n->n_outputs; o++) {
            int v = n->outputs[o];
            if (v < 0) continue;
            bool host_out = be->ops->device == KN_DEVICE_HOST ||
                            (be->ops->output_on_host && be->ops->output_on_host(n->kernel, n, o));
            if (host_out && !all_fixed) {
                /* a host value made from run-time data: a replay would not remake it */
                snprintf(why, cap, "%s makes output %d ('%s') on the host from data computed at run time",
                         kn_node_label(n, lbl, sizeof lbl), o, g->values[v].name);
                ok = false;
            }
            fixed[v] = host_out && all_fixed;
        }
    }
    for (int o = 0; ok && o < host_read_outputs && o < g->n_outputs; o++) {
        int v = g->outputs[o];
        if (!value_fixed(&scope, v)) {
            snprintf(why, cap, "its output %d ('%s') is computed at run time and read on the host after each iteration",
                     o, g->values[v].name);
            ok = false;
        }
    }
    free(fixed);
    return ok;
}

static bool recordable(const kn_graph *g, const kn_runtime *rt, int dev, char *why, size_t cap) {
    return recordable_in(g, rt, dev, NULL, 0, 0, 0, why, cap);
}

kiln_status kn_graph_cache_create(kiln_session *s) {
    s->graphs = NULL;
    const kn_runtime *rt = s->rt;
    const kn_graph *g = s->model->graph;
    int dev = -1;
    for (int b = 0; b < rt->n_backends && dev < 0; b++)
        if (rt->backends[b].listed && rt->backends[b].ops->device != KN_DEVICE_HOST) dev = b;
    if (s->opts.output_device != KILN_DEVICE_HOST) {
        bool found = false;
        for (int b = 0; b < rt->n_backends; b++)
            if ((int)rt->backends[b].ops->device == s->opts.output_device) found = true;
        if (!found)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "outputs on the CUDA device were asked for (kiln_session_options_set_output_device), but the "
                            "session has no CUDA provider");
    }
    if (dev < 0) return KILN_OK;
    const kn_backend *be = &rt->backends[dev];
    if (!be->ops->capture_begin || be->cfg.graphs == 0) {
        if (be->ops->capture_begin) kn_log(KILN_LOG_INFO, "%s: graphs=0: runs are not captured", be->ops->name);
        return KILN_OK;
    }
    char why[768];
    why[0] = 0;
    if (!recordable(g, rt, dev, why, sizeof why)) {
        kn_log(KILN_LOG_INFO, "%s: runs are not captured into graphs: %s", be->ops->name, why);
        return KILN_OK;
    }
    kn_graph_cache *c = calloc(1, sizeof *c);
    if (!c) return KN_OOM();
    c->backend = dev;
    s->graphs = c;
    return KILN_OK;
}

static void captured_free(kiln_session *s, kn_captured *e) {
    atomic_fetch_sub(&s->graphs->n_graphs, 1);
    const kn_backend *be = &s->rt->backends[s->graphs->backend];
    const kn_graph *g = s->model->graph;
    if (e->graph) be->ops->graph_destroy(be->state, e->graph);
    for (int i = 0; e->inputs && i < g->n_inputs; i++) kn_tensor_free(e->inputs[i]);
    for (int i = 0; e->outputs && i < g->n_outputs; i++) kn_tensor_free(e->outputs[i]);
    free(e->inputs);
    free(e->outputs);
    free(e->reads);
    free(e->writes);
    free(e->sig);
    memset(e, 0, sizeof *e);
}

void kn_ctx_graphs_free(kiln_session *s, kn_call_ctx *ctx) {
    kn_ctx_graphs *c = ctx->graphs;
    if (!c) return;
    for (int i = 0; i < c->n_graphs; i++) captured_free(s, &c->graphs[i]);
    for (int i = 0; i < c->n_seen; i++) free(c->seen[i].sig);
    free(c);
    ctx->graphs = NULL;
}

void kn_graph_cache_destroy(kiln_session *s) {
    free(s->graphs);
    s->graphs = NULL;
}

/* ------------------------------------------------------------------ runs */

/* The input-shape set of a run: per graph input, given or not, element type, rank, dims. */
static int64_t *signature(const kn_graph *g, kn_tensor *const *bound, size_t *len) {
    size_t n = 0;
    for (int i = 0; i < g->n_inputs; i++) n += 3 + (bound[i] ? (size_t)bound[i]->rank : 0);
    int64_t *sig = malloc(sizeof *sig * (n ? n : 1));
    if (!sig) return NULL;
    size_t at = 0;
    for (int i = 0; i < g->n_inputs; i++) {
        const kn_tensor *t = bound[i];
        sig[at++] = t ? 1 + (int64_t)t->kind : 0;
        sig[at++] = t ? (int64_t)t->dtype : 0;
        sig[at++] = t ? t->rank : 0;
        for (int d = 0; t && d < t->rank; d++) sig[at++] = t->dims[d];
    }
    *len = n;
    return sig;
}

static bool same_sig(const int64_t *a, size_t na, const int64_t *b, size_t nb) {
    return na == nb && !memcmp(a, b, sizeof *a * na);
}

static const char *sig_str(const kn_graph *g, kn_tensor *const *bound, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < g->n_inputs && used < cap; i++) {
        if (!bound[i]) continue;
        char d[256];
        used += (size_t)snprintf(buf + used, cap - used, "%s%s %s", used ? ", " : "", g->values[g->inputs[i]].name,
                                 kn_tensor_describe(bound[i], d, sizeof d));
    }
    return buf;
}

static kn_seen *find_seen(kn_ctx_graphs *c, const int64_t *sig, size_t len) {
    for (int i = 0; i < c->n_seen; i++)
        if (same_sig(c->seen[i].sig, c->seen[i].sig_len, sig, len)) return &c->seen[i];
    return NULL;
}

/* Remembers a set of shapes (takes sig). */
static void remember(kn_ctx_graphs *c, int64_t *sig, size_t len, bool failed) {
    kn_seen *e = find_seen(c, sig, len);
    if (e) {
        e->failed = failed;
        free(sig);
        return;
    }
    if (c->n_seen < KN_MAX_SEEN) {
        e = &c->seen[c->n_seen++];
    } else {
        e = &c->seen[c->next_seen];
        c->next_seen = (c->next_seen + 1) % KN_MAX_SEEN;
        free(e->sig);
    }
    e->sig = sig;
    e->sig_len = len;
    e->failed = failed;
    e->moves = 0;
}

static int64_t *sig_dup(const int64_t *sig, size_t len) {
    int64_t *d = malloc(sizeof *sig * (len ? len : 1));
    if (d) memcpy(d, sig, sizeof *sig * len);
    return d;
}

/* The seen entry of a shape set, made if the ring no longer holds it (NULL: out of memory). */
static kn_seen *seen_entry(kn_ctx_graphs *c, const int64_t *sig, size_t len) {
    kn_seen *e = find_seen(c, sig, len);
    if (e) return e;
    int64_t *d = sig_dup(sig, len);
    if (!d) return NULL;
    remember(c, d, len, false);
    return find_seen(c, sig, len);
}

/* Whether caller tensor t, given for a graph output the graph holds as o, can be written
 * by the graph itself: device memory of the recording device holding exactly that value. */
static bool graph_can_write(const kn_backend *be, const kn_tensor *o, const kn_tensor *t) {
    return t && o && t->kind == KN_VALUE_TENSOR && o->kind == KN_VALUE_TENSOR && t->device == be->ops->device &&
           o->device == be->ops->device && t->data && t->data != o->data && t->dtype == o->dtype &&
           t->rank == o->rank && t->nbytes == o->nbytes &&
           (!t->rank || !memcmp(t->dims, o->dims, sizeof(int64_t) * (size_t)t->rank));
}

/* KILN_GRAPHS_IN_PLACE=0: every graph copies (for measuring what reading and writing the caller's
 * buffers in place saves). */
static bool in_place_wanted(void) {
    const char *e = getenv("KILN_GRAPHS_IN_PLACE");
    return !(e && !strcmp(e, "0"));
}

/* Whether every input the call gives is in the recording device's memory (a graph can then read
 * them where they are). */
static bool inputs_on_device(const kn_backend *be, const kn_graph *g, kn_tensor *const *bound) {
    for (int i = 0; i < g->n_inputs; i++)
        if (bound[i] && (bound[i]->kind != KN_VALUE_TENSOR || bound[i]->device != be->ops->device || !bound[i]->data))
            return false;
    return true;
}

/* Whether graph e serves a call with these inputs and caller output tensors (into: per graph
 * output, or NULL): a copying graph serves any; one made for the caller's buffers only the same
 * buffers, holding the same shapes. */
static bool serves(const kn_backend *be, const kn_graph *g, const kn_captured *e, kn_tensor *const *bound,
                   kn_tensor *const *into) {
    if (!e->in_place) return true;
    for (int i = 0; i < g->n_inputs; i++)
        if (e->reads[i] && (!bound[i] || bound[i]->device != be->ops->device || bound[i]->data != e->reads[i]))
            return false;
    for (int i = 0; i < g->n_outputs; i++)
        if (e->writes[i] && (!into || !into[i] || into[i]->data != e->writes[i] ||
                             !graph_can_write(be, e->outputs[i], into[i])))
            return false;
    return true;
}

/* Inputs into the graph's buffers (those it does not read in place), then the graph. */
static kiln_status replay(kiln_session *s, kn_ctx_graphs *c, kn_captured *e, kn_tensor *const *bound) {
    const kn_backend *be = &s->rt->backends[s->graphs->backend];
    const kn_graph *g = s->model->graph;
    for (int i = 0; i < g->n_inputs; i++) {
        if (!bound[i] || e->reads[i]) continue;
        kiln_status st = be->ops->copy(be->state, bound[i], e->inputs[i]);
        if (st != KILN_OK)
            return kn_error_prefix(st, "input '%s' into the graph's buffer: ", g->values[g->inputs[i]].name);
    }
    e->last_used = ++c->tick;
    atomic_fetch_add(&s->graphs->launches, 1);
    if (e->in_place) atomic_fetch_add(&s->graphs->in_place_launches, 1);
    return be->ops->graph_launch(be->state, e->graph);
}

/* Makes the device copies of the constants device kernels read, before recording (a constant's
 * first copy must really run). Failures are left to the recording to report. */
static void upload_constants(kiln_session *s, kn_tensor *const *bound) {
    kn_runtime *rt = s->rt;
    int dev = s->graphs->backend;
    const kn_backend *be = &rt->backends[dev];
    const kn_graph *g = s->model->graph;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead || n->provider != dev) continue;
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            const kn_value *val = &g->values[v];
            kn_tensor *c = val->constant;
            if (!c || c->kind != KN_VALUE_TENSOR || c->dtype == KILN_DTYPE_STRING || c->device != KN_DEVICE_HOST) continue;
            if (val->is_graph_input) {
                int j = 0;
                while (j < g->n_inputs && g->inputs[j] != v) j++;
                if (j < g->n_inputs && bound[j]) continue; /* given by the caller this time */
            }
            if (be->ops->input_on_host && be->ops->input_on_host(n->kernel, n, k)) continue;
            if (be->ops->input_metadata_only && be->ops->input_metadata_only(n->kernel, n, k)) continue;
            kn_tensor *dev_copy;
            if (kn_runtime_const_on(rt, dev, v, c, &dev_copy) != KILN_OK) return;
        }
    }
}

/* Records a run for these shapes; on success the new graph has not run yet. in_place: made for the
 * caller's buffers (every input given is device memory): it reads them where they are and ends by
 * copying each output into the caller's device tensor for it (into, per graph output, or NULL). */
static kiln_status record(kiln_session *s, kn_call_ctx *ctx, kn_tensor *const *bound, kn_tensor *const *into,
                          bool in_place, int64_t *sig, size_t sig_len, kn_captured **out) {
    kn_ctx_graphs *c = ctx->graphs;
    const kn_backend *be = &s->rt->backends[s->graphs->backend];
    const kn_graph *g = s->model->graph;
    *out = NULL;
    kn_captured e;
    memset(&e, 0, sizeof e);
    e.inputs = calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof *e.inputs);
    e.outputs = calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *e.outputs);
    e.reads = calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof *e.reads);
    e.writes = calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *e.writes);
    e.in_place = in_place;
    kiln_status st = e.inputs && e.outputs && e.reads && e.writes ? KILN_OK : KN_OOM();
    upload_constants(s, bound);
    for (int i = 0; st == KILN_OK && i < g->n_inputs; i++) {
        const kn_tensor *t = bound[i];
        if (!t) continue;
        if (t->kind != KN_VALUE_TENSOR || t->dtype == KILN_DTYPE_STRING) {
            st = kn_error(KILN_ERR_UNSUPPORTED, "input '%s' is not a numeric tensor", g->values[g->inputs[i]].name);
            break;
        }
        if (in_place) e.reads[i] = t->data;
        else st = be->ops->new_tensor(be->state, t->dtype, t->rank, t->dims, &e.inputs[i]);
    }
    if (st == KILN_OK) {
        st = be->ops->capture_begin(be->state);
        if (st == KILN_OK) {
            kiln_status run_st = kn_exec_graph_ctx(g, s->rt, s->pool, s->buffers, &ctx->run, in_place ? bound : e.inputs,
                                                   e.outputs, KN_EXEC_DEVICE_OUTPUTS, NULL);
            /* the copies into the caller's output tensors, as the graph's last steps */
            for (int i = 0; run_st == KILN_OK && in_place && into && i < g->n_outputs; i++) {
                if (!graph_can_write(be, e.outputs[i], into[i])) continue;
                bool twice = false; /* one caller tensor given for two outputs: copied after the run */
                for (int j = 0; j < g->n_outputs; j++) twice |= j != i && into[j] && into[j]->data == into[i]->data;
                if (twice) continue;
                run_st = be->ops->copy(be->state, e.outputs[i], into[i]);
                if (run_st == KILN_OK) e.writes[i] = into[i]->data;
            }
            char run_msg[1024];
            snprintf(run_msg, sizeof run_msg, "%s", run_st == KILN_OK ? "" : kiln_last_error());
            st = be->ops->capture_end(be->state, run_st == KILN_OK, &e.graph);
            if (run_st != KILN_OK) st = kn_error(run_st, "%s", run_msg);
        }
    }
    if (st != KILN_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", kiln_last_error());
        /* the recording, if any, is already discarded */
        for (int i = 0; i < g->n_inputs && e.inputs; i++) kn_tensor_free(e.inputs[i]);
        for (int i = 0; i < g->n_outputs && e.outputs; i++) kn_tensor_free(e.outputs[i]);
        free(e.inputs);
        free(e.outputs);
        free(e.reads);
        free(e.writes);
        free(sig);
        return kn_error(st, "%s", msg);
    }
    /* room: the least recently used graph goes */
    if (c->n_graphs == KN_MAX_GRAPHS) {
        int lru = 0;
        for (int i = 1; i < c->n_graphs; i++)
            if (c->graphs[i].last_used < c->graphs[lru].last_used) lru = i;
        captured_free(s, &c->graphs[lru]);
        c->graphs[lru] = c->graphs[--c->n_graphs];
    }
    e.sig = sig;
    e.sig_len = sig_len;
    atomic_fetch_add(&s->graphs->n_graphs, 1);
    c->graphs[c->n_graphs] = e;
    *out = &c->graphs[c->n_graphs++];
    return KILN_OK;
}

kiln_status kn_session_execute(kiln_session *s, kn_call_ctx *ctx, kn_tensor *const *bound, kn_tensor **outs,
                               unsigned flags, bool *borrowed, kn_tensor *const *into) {
    const kn_graph *g = s->model->graph;
    *borrowed = false;
    if (!s->graphs) return kn_exec_graph_ctx(g, s->rt, s->pool, s->buffers, &ctx->run, bound, outs, flags, into);
    if (!ctx->graphs && !(ctx->graphs = calloc(1, sizeof *ctx->graphs))) return KN_OOM();
    kn_ctx_graphs *c = ctx->graphs;
    size_t len = 0;
    int64_t *sig = signature(g, bound, &len);
    if (!sig) return KN_OOM();
    const kn_backend *rec = &s->rt->backends[s->graphs->backend];
    kn_captured *e = NULL;
    for (int i = 0; i < c->n_graphs && !e; i++)
        if (same_sig(c->graphs[i].sig, c->graphs[i].sig_len, sig, len)) e = &c->graphs[i];
    if (e && !serves(rec, g, e, bound, into)) {
        /* made for the caller's buffers, and this call gives others: it goes, and a graph for this
         * call's buffers (or, once they have moved often, a copying one) is recorded below */
        kn_seen *sn = seen_entry(c, sig, len);
        if (!sn) {
            free(sig);
            return KN_OOM();
        }
        sn->moves++;
        char shapes[512];
        kn_log(KILN_LOG_DEBUG, "%s: the caller's buffers for %s moved (%d time%s): its graph is recorded again",
               rec->ops->name, sig_str(g, bound, shapes, sizeof shapes), sn->moves, sn->moves == 1 ? "" : "s");
        int at = (int)(e - c->graphs);
        captured_free(s, e);
        c->graphs[at] = c->graphs[--c->n_graphs];
        e = NULL;
    }
    kn_seen *seen = e ? NULL : find_seen(c, sig, len);
    /* warmed up, and the backend running its final kernels (asked only now: the question may
     * count, cuda_warmup.c): record this run */
    if (!e && seen && !seen->failed && (!rec->ops->capture_ready || rec->ops->capture_ready(rec->state))) {
        int64_t *sig_copy = sig_dup(sig, len);
        if (!sig_copy) {
            free(sig);
            return KN_OOM();
        }
        bool in_place = seen->moves < KN_MAX_MOVES && in_place_wanted() && inputs_on_device(rec, g, bound);
        kiln_status st = record(s, ctx, bound, into, in_place, sig_copy, len, &e);
        if (st != KILN_OK) {
            char shapes[512];
            kn_log(KILN_LOG_INFO, "%s: the run with %s is not captured into a graph (%s); it runs uncaptured",
                   rec->ops->name, sig_str(g, bound, shapes, sizeof shapes), kiln_last_error());
            remember(c, sig, len, true);
            sig = NULL;
            e = NULL;
        }
    }
    if (e) {
        free(sig);
        kiln_status st = replay(s, c, e, bound);
        if (st != KILN_OK) return st;
        for (int i = 0; i < g->n_outputs; i++) outs[i] = e->writes[i] ? into[i] : e->outputs[i];
        *borrowed = true;
        return KILN_OK;
    }
    kiln_status st = kn_exec_graph_ctx(g, s->rt, s->pool, s->buffers, &ctx->run, bound, outs, flags, into);
    if (sig) {
        if (st == KILN_OK && !find_seen(c, sig, len)) remember(c, sig, len, false);
        else free(sig);
    }
    return st;
}

const kn_backend *kn_session_device_backend(const kiln_session *s, kn_device device) {
    for (int b = 0; b < s->rt->n_backends; b++)
        if (s->rt->backends[b].ops->device == device) return &s->rt->backends[b];
    return NULL;
}

void kn_graph_run_stats(const kiln_session *s, bool *enabled, int *graphs, uint64_t *launches) {
    kn_graph_cache *c = s ? s->graphs : NULL;
    if (enabled) *enabled = c != NULL;
    if (graphs) *graphs = c ? atomic_load(&c->n_graphs) : 0;
    if (launches) *launches = c ? atomic_load(&c->launches) : 0;
}

uint64_t kn_graph_run_in_place_launches(const kiln_session *s) {
    return s && s->graphs ? atomic_load(&s->graphs->in_place_launches) : 0;
}

bool kn_session_background_busy(const kiln_session *s) {
    for (int b = 0; s && b < s->rt->n_backends; b++) {
        const kn_backend *be = &s->rt->backends[b];
        if (be->ops->background_busy && be->ops->background_busy(be->state)) return true;
    }
    return false;
}

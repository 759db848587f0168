#include "exec/session.h"
#include "exec/profile.h"
#include "exec/memplan.h"
#include "exec/plan.h"

#include "backend/backend.h"
#include "cache/cache.h"
#include "exec/exec.h"
#include "exec/graph_run.h"
#include "onnx/loader.h"
#include "onnx/writer.h"
#include "opt/opt.h"
#include "util/limits.h"
#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_or_null(const char *s) { return s && *s ? strdup(s) : NULL; }

void kn_session_options_defaults(kiln_session_options *o) {
    memset(o, 0, sizeof *o);
    o->opt_level = KILN_OPT_ALL;
    o->log_level = KILN_LOG_WARNING;
    o->cache_enabled = 1;
}

void kn_session_options_clear(kiln_session_options *o) {
    for (int i = 0; i < o->n_providers; i++) {
        free(o->providers[i].name);
        for (int k = 0; k < o->providers[i].n_options; k++) {
            free(o->providers[i].keys[k]);
            free(o->providers[i].values[k]);
        }
    }
    for (int i = 0; i < o->n_disabled_passes; i++) free(o->disabled_passes[i]);
    free(o->disabled_passes);
    free(o->dump_path);
    free(o->cache_dir);
    free(o->save_path);
    free(o->load_path);
    for (int i = 0; i < o->n_dims; i++) free(o->dims[i].name);
    free(o->dims);
    memset(o, 0, sizeof *o);
}

kiln_status kn_session_options_copy(const kiln_session_options *src, kiln_session_options *dst) {
    kn_session_options_defaults(dst);
    if (!src) return KILN_OK;
    *dst = *src;
    /* deep-copy every owned string */
    dst->disabled_passes = NULL;
    dst->dims = NULL;
    for (int i = 0; i < src->n_providers; i++) {
        dst->providers[i].name = strdup(src->providers[i].name);
        for (int k = 0; k < src->providers[i].n_options; k++) {
            dst->providers[i].keys[k] = strdup(src->providers[i].keys[k]);
            dst->providers[i].values[k] = strdup(src->providers[i].values[k]);
        }
    }
    if (src->n_disabled_passes) {
        dst->disabled_passes = calloc((size_t)src->n_disabled_passes, sizeof(char *));
        if (!dst->disabled_passes) return KN_OOM();
        for (int i = 0; i < src->n_disabled_passes; i++)
            dst->disabled_passes[i] = strdup(src->disabled_passes[i]);
    }
    if (src->n_dims) {
        dst->dims = calloc((size_t)src->n_dims, sizeof *dst->dims);
        if (!dst->dims) return KN_OOM();
        for (int i = 0; i < src->n_dims; i++) {
            dst->dims[i].name = strdup(src->dims[i].name);
            dst->dims[i].value = src->dims[i].value;
        }
    }
    dst->dump_path = dup_or_null(src->dump_path);
    dst->cache_dir = dup_or_null(src->cache_dir);
    dst->save_path = dup_or_null(src->save_path);
    dst->load_path = dup_or_null(src->load_path);
    return KILN_OK;
}

static void session_free(kiln_session *s) {
    if (!s) return;
    if (s->sync_made) {
        /* calls still inside (the caller's error): new ones are refused, these are waited for */
        pthread_mutex_lock(&s->ctx_mu);
        s->closing = true;
        pthread_cond_broadcast(&s->ctx_cv); /* calls waiting for a context leave */
        if (s->active)
            kn_log(KILN_LOG_ERROR,
                   "kiln_session_destroy: %d call(s) of the session still running on other threads; waiting for them "
                   "(destroying a session that runs is a misuse: calls entering now fail with KILN_ERR_MISUSE)",
                   s->active);
        while (s->active) pthread_cond_wait(&s->ctx_cv, &s->ctx_mu);
        pthread_mutex_unlock(&s->ctx_mu);
    }
    atomic_store(&s->magic, 0);
    if (s->at_end) s->at_end(s);
    kn_threadpool_destroy(s->pool);
    /* the contexts' recorded graphs and device lanes, while their backends exist */
    for (kn_run_ctx *c = s->free_ctx; c && s->rt; c = c->next) {
        kn_call_ctx *cc = (kn_call_ctx *)c;
        kn_ctx_graphs_free(s, cc);
        for (int b = 0; b < s->rt->n_backends; b++)
            if (cc->lanes[b]) s->rt->backends[b].ops->lane_close(s->rt->backends[b].state, cc->lanes[b]);
        memset(cc->lanes, 0, sizeof cc->lanes);
    }
    if (s->rt) kn_graph_cache_destroy(s);
    kn_runtime_destroy(s->rt);
    kn_plan_free(s->plan);
    kn_buffer_pool_destroy(s->buffers);
    kn_model_free(s->model);
    free(s->inputs);
    free(s->outputs);
    kn_session_options_clear(&s->opts);
    while (s->free_ctx) {
        kn_run_ctx *c = s->free_ctx;
        s->free_ctx = c->next;
        kn_run_ctx_clear(c);
        free(c);
    }
    if (s->sync_made) {
        pthread_mutex_destroy(&s->ctx_mu);
        pthread_cond_destroy(&s->ctx_cv);
    }
    free(s);
}

void kiln_session_destroy(kiln_session *s) { session_free(s); }

/* Fixes symbolic input dims the caller pinned with kiln_session_options_set_dim. */
static void apply_dim_overrides(kn_graph *g, const kiln_session_options *o) {
    for (int i = 0; i < g->n_inputs; i++) {
        kn_type *t = &g->values[g->inputs[i]].type;
        for (int d = 0; d < t->rank; d++)
            for (int k = 0; k < o->n_dims; k++)
                if (t->dims[d].symbol && !strcmp(t->dims[d].symbol, o->dims[k].name))
                    t->dims[d].value = o->dims[k].value;
    }
}

/* Which providers this session uses: an instance of each requested provider this build has and
 * this machine can run, in the options' order (see kn_runtime_create), plus the CPU for host work.
 * "cuda" alone on a machine without a usable GPU is "no CUDA device: <reason>". */
static kiln_status choose_providers(kiln_session *s) { return kn_runtime_create(&s->opts, &s->rt); }

static kiln_status fill_io(kiln_session *s) {
    kn_graph *g = s->model->graph;
    s->n_inputs = g->n_inputs;
    s->n_outputs = g->n_outputs;
    s->inputs = calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof *s->inputs);
    s->outputs = calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *s->outputs);
    if (!s->inputs || !s->outputs) return KN_OOM();
    for (int pass = 0; pass < 2; pass++) {
        kn_io_info *io = pass ? s->outputs : s->inputs;
        int n = pass ? g->n_outputs : g->n_inputs;
        const int *ids = pass ? g->outputs : g->inputs;
        for (int i = 0; i < n; i++) {
            io[i].value = ids[i];
            const kn_type *t = &g->values[ids[i]].type;
            for (int d = 0; d < t->rank && d < KILN_MAX_RANK; d++) {
                io[i].dims[d] = t->dims[d].value;
                io[i].dim_names[d] = kn_dim_name(&t->dims[d]);
            }
        }
    }
    return KILN_OK;
}

/* Whether the environment variable `name` is "0" (a switch turned off) */
static bool env_off(const char *name) {
    const char *e = getenv(name);
    return e && !strcmp(e, "0");
}

/* What every session needs after compilation, whether compiled now or read from a compiled
 * file: nodes placed on providers, threads, buffers, I/O info. */
static kiln_status finish_session(kiln_session *s) {
    kn_model *model = s->model;
    s->rt->main = model->graph;
    if (!s->sync_made) {
        if (pthread_mutex_init(&s->ctx_mu, NULL) != 0) return KN_OOM();
        if (pthread_cond_init(&s->ctx_cv, NULL) != 0) {
            pthread_mutex_destroy(&s->ctx_mu);
            return KN_OOM();
        }
        s->sync_made = true;
    }
    /* a device provider with lanes (a stream and what a call mutates, per call context) runs
     * calls at once; one without them (or with KILN_CUDA_LANES=0) has one state: its calls take
     * turns on one context */
    s->serial = false;
    for (int b = 0; b < s->rt->n_backends; b++) {
        const kn_backend *be = &s->rt->backends[b];
        if (be->ops->device != KN_DEVICE_HOST && !(be->ops->lane_open && be->ops->lanes_overlap(be->state)))
            s->serial = true;
    }
    s->memo_off = env_off("KILN_SHAPE_MEMO");
    s->memplan_off = env_off("KILN_MEMORY_PLAN");
    s->outputs_copy = env_off("KILN_OUTPUTS_IN_PLACE");
    s->bytes_limit = kn_tensor_bytes_limit();
    atomic_store(&s->magic, KN_SESSION_MAGIC);
    kiln_status st = kn_graph_place(model->graph, s->rt, NULL, NULL);
    if (st == KILN_OK) st = kn_threadpool_create(s->opts.intra_op_threads, &s->pool);
    if (st == KILN_OK) st = kn_buffer_pool_create(&s->buffers);
    if (st == KILN_OK) st = fill_io(s);
    if (st == KILN_OK) st = kn_graph_cache_create(s);
    if (st == KILN_OK) st = kn_plan_build(model->graph, s->rt, true, &s->plan);
    return st;
}

kiln_status kn_session_from_model(kn_model *model, const kiln_session_options *options,
                                  kiln_session **out) {
    *out = NULL;
    kiln_session *s = calloc(1, sizeof *s);
    if (!s) {
        kn_model_free(model);
        return KN_OOM();
    }
    s->model = model;
    kiln_status st = kn_session_options_copy(options, &s->opts);
    if (st == KILN_OK) {
        kn_log_set_level(s->opts.log_level); /* this thread's, for the creation (util/log.h) */
        st = choose_providers(s);
    }
    if (st == KILN_OK) {
        apply_dim_overrides(model->graph, &s->opts);
        st = kn_graph_resolve(model->graph);
    }
    if (st == KILN_OK) st = kn_graph_infer(model->graph);
    if (st == KILN_OK && s->opts.opt_level > 0) {
        st = kn_optimize(model, &s->opts, NULL, NULL);
        if (st == KILN_OK) st = kn_graph_infer(model->graph);
    }
    /* the optimised graph, for inspection (kiln's fused ops in the "kiln" domain) */
    if (st == KILN_OK && s->opts.dump_path) st = kn_onnx_write_file(model, s->opts.dump_path);
    if (st == KILN_OK) st = finish_session(s);
    /* the memory plan, where the inputs' shapes are static (a compiled file holds it:
     * kn_session_from_compiled's session reads it); else the runs plan per input-shape set */
    bool static_inputs = true;
    for (int i = 0; st == KILN_OK && i < model->graph->n_inputs; i++)
        static_inputs &= kn_type_is_static(&model->graph->values[model->graph->inputs[i]].type);
    if (st == KILN_OK && static_inputs) st = kn_memplan_build(model->graph, s->rt, NULL, &s->rt->memplan);
    if (st == KILN_OK && s->rt->memplan) kn_memplan_log(s->rt->memplan, "static input shapes");
    if (st != KILN_OK) {
        session_free(s);
        return st;
    }
    *out = s;
    return KILN_OK;
}

kiln_status kn_session_from_compiled(kn_model *model, const kiln_session_options *options,
                                     kiln_session **out) {
    *out = NULL;
    kiln_session *s = calloc(1, sizeof *s);
    if (!s) {
        kn_model_free(model);
        return KN_OOM();
    }
    s->model = model;
    kiln_status st = kn_session_options_copy(options, &s->opts);
    if (st == KILN_OK) {
        kn_log_set_level(s->opts.log_level);
        st = choose_providers(s);
    }
    if (st == KILN_OK) st = finish_session(s);
    if (st != KILN_OK) {
        session_free(s);
        return st;
    }
    *out = s;
    return KILN_OK;
}

kiln_status kiln_session_create(const char *path, const kiln_session_options *options,
                                kiln_session **session_out) {
    if (session_out) *session_out = NULL;
    if (!path || !session_out)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_session_create: %s is NULL",
                        !path ? "path" : "session_out");
    if (!*path) return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_session_create: path is empty");
    /* the compiled cache decides: a compiled file, a cache hit, or a compile (src/cache/use.c); the
     * session's log level holds on this thread while it is created */
    int level = kn_log_swap_level(options ? options->log_level : KILN_LOG_WARNING);
    kiln_status st = kn_cache_session_create(path, NULL, 0, NULL, options, session_out);
    kn_log_restore_level(level);
    return st;
}

kiln_status kiln_session_create_from_memory(const void *data, size_t size, const char *base_dir,
                                            const kiln_session_options *options,
                                            kiln_session **session_out) {
    if (session_out) *session_out = NULL;
    if (!data || !session_out)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_session_create_from_memory: %s is NULL",
                        !data ? "data" : "session_out");
    int level = kn_log_swap_level(options ? options->log_level : KILN_LOG_WARNING);
    kiln_status st =
        kn_cache_session_create(NULL, data, size, base_dir && *base_dir ? base_dir : NULL, options, session_out);
    kn_log_restore_level(level);
    return st;
}

/* the listed backends of the runtime, in its order (the CPU instance made only for host work is not) */
static const kn_backend *listed_backend(const kiln_session *s, size_t index) {
    size_t seen = 0;
    for (int i = 0; s && s->rt && i < s->rt->n_backends; i++)
        if (s->rt->backends[i].listed && seen++ == index) return &s->rt->backends[i];
    return NULL;
}

size_t kiln_session_provider_count(const kiln_session *s) {
    size_t n = 0;
    while (listed_backend(s, n)) n++;
    return n;
}

kiln_status kiln_session_provider(const kiln_session *s, size_t index, const char **name_out, size_t *n_options_out,
                                  const char *const **keys_out, const char *const **values_out) {
    if (!s) return kn_error(KILN_ERR_INVALID_ARGUMENT, "session is NULL");
    const kn_backend *b = listed_backend(s, index);
    if (!b)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "provider index %zu is out of range (the session has %zu)", index,
                        kiln_session_provider_count(s));
    const kn_provider_request *req = NULL;
    for (int j = 0; j < s->opts.n_providers && !req; j++)
        if (!strcmp(s->opts.providers[j].name, b->ops->name)) req = &s->opts.providers[j];
    if (name_out) *name_out = b->ops->name;
    if (n_options_out) *n_options_out = req ? (size_t)req->n_options : 0;
    if (keys_out) *keys_out = req ? (const char *const *)req->keys : NULL;
    if (values_out) *values_out = req ? (const char *const *)req->values : NULL;
    return KILN_OK;
}

size_t kiln_session_input_count(const kiln_session *s) { return s ? (size_t)s->n_inputs : 0; }
size_t kiln_session_output_count(const kiln_session *s) { return s ? (size_t)s->n_outputs : 0; }

static kiln_status io_info(const kiln_session *s, size_t index, kiln_value_info *info, int outputs) {
    if (!s || !info) return kn_error(KILN_ERR_INVALID_ARGUMENT, "session or info_out is NULL");
    size_t n = outputs ? (size_t)s->n_outputs : (size_t)s->n_inputs;
    if (index >= n)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s index %zu is out of range (the model has %zu)",
                        outputs ? "output" : "input", index, n);
    const kn_io_info *io = outputs ? &s->outputs[index] : &s->inputs[index];
    const kn_value *v = &s->model->graph->values[io->value];
    info->name = v->name;
    info->dtype = v->type.dtype;
    info->rank = v->type.rank;
    info->dims = io->dims;
    info->dim_names = io->dim_names;
    return KILN_OK;
}

kiln_status kiln_session_input_info(const kiln_session *s, size_t i, kiln_value_info *out) {
    return io_info(s, i, out, 0);
}
kiln_status kiln_session_output_info(const kiln_session *s, size_t i, kiln_value_info *out) {
    return io_info(s, i, out, 1);
}

/* Checks a caller's tensor against the declared input type. */
static kiln_status check_input(const kn_value *v, const kn_tensor *t) {
    char want[256], got[256];
    const kn_type *ty = &v->type;
    if (ty->kind == KN_TYPE_TENSOR && t->kind != KN_VALUE_TENSOR)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "input '%s': expected a tensor %s, got %s", v->name,
                        kn_type_str(ty, want, sizeof want), kn_tensor_describe(t, got, sizeof got));
    /* an empty sequence or optional read from a file may carry no element type */
    bool empty_container = t->kind != KN_VALUE_TENSOR && t->n_items == 0 && t->dtype == KILN_DTYPE_UNDEFINED;
    if (ty->dtype != KILN_DTYPE_UNDEFINED && t->dtype != ty->dtype && !empty_container)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "input '%s': element type is %s, the model expects %s (%s)",
                        v->name, kiln_dtype_name(t->dtype), kiln_dtype_name(ty->dtype),
                        kn_type_str(ty, want, sizeof want));
    if (ty->kind == KN_TYPE_TENSOR && ty->rank >= 0) {
        if (t->rank != ty->rank)
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "input '%s': rank %d (%s), the model expects rank %d (%s)",
                            v->name, t->rank, kn_tensor_describe(t, got, sizeof got), ty->rank,
                            kn_type_str(ty, want, sizeof want));
        for (int d = 0; d < ty->rank; d++)
            if (ty->dims[d].value >= 0 && t->dims[d] != ty->dims[d].value)
                return kn_error(KILN_ERR_INVALID_ARGUMENT,
                                "input '%s': dimension %d is %lld (%s), the model expects %s", v->name, d,
                                (long long)t->dims[d], kn_tensor_describe(t, got, sizeof got),
                                kn_type_str(ty, want, sizeof want));
    }
    return KILN_OK;
}

/* Where a caller's device tensor must be for this session: on the device of the provider that
 * runs there. what: "input" or "output". */
static kiln_status check_device_tensor(const kiln_session *s, const char *fn, const char *what, const char *name,
                                       const kn_tensor *t) {
    if (t->device == KN_DEVICE_HOST) return KILN_OK;
    const kn_backend *be = kn_session_device_backend(s, t->device);
    if (!be)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: %s '%s' is in CUDA memory (cuda:%d), but the session has no CUDA provider: copy it to the "
                        "host, or create the session with the 'cuda' provider",
                        fn, what, name, t->device_id);
    if (be->cfg.device_id != t->device_id)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: %s '%s' is in memory of %s:%d, but the session runs on %s:%d", fn,
                        what, name, be->ops->name, t->device_id, be->ops->name, be->cfg.device_id);
    return KILN_OK;
}

/* Checks the caller's inputs and binds them to the graph inputs (bound: one per graph input). */
static kiln_status bind_inputs(const kiln_session *s, const char *fn, const char *const *input_names,
                               kiln_tensor *const *inputs, size_t n_inputs, kn_tensor **bound) {
    const kn_graph *g = s->model->graph;
    for (size_t i = 0; i < n_inputs; i++) {
        if (!input_names[i] || !inputs[i])
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: input %zu has a NULL name or tensor", fn, i);
        int k = 0;
        for (; k < g->n_inputs; k++)
            if (!strcmp(g->values[g->inputs[k]].name, input_names[i])) break;
        if (k == g->n_inputs) {
            char names[1024];
            size_t used = 0;
            names[0] = 0;
            for (int j = 0; j < g->n_inputs && used < sizeof names; j++)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s'%s'", j ? ", " : "",
                                         g->values[g->inputs[j]].name);
            return kn_error(KILN_ERR_NOT_FOUND, "%s: the model has no input '%s' (its inputs: %s)", fn, input_names[i],
                            names);
        }
        if (bound[k]) return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: input '%s' is given twice", fn, input_names[i]);
        KN_TRY(check_input(&g->values[g->inputs[k]], inputs[i]));
        KN_TRY(check_device_tensor(s, fn, "input", input_names[i], inputs[i]));
        bound[k] = inputs[i];
    }
    for (int k = 0; k < g->n_inputs; k++)
        if (!bound[k] && !g->values[g->inputs[k]].constant) {
            char ty[256];
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: input '%s' (%s) is not given", fn,
                            g->values[g->inputs[k]].name, kn_type_str(&g->values[g->inputs[k]].type, ty, sizeof ty));
        }
    return KILN_OK;
}

/* want[i]: the graph output index of output_names[i] (all outputs in order when names is NULL). */
static kiln_status select_outputs(const kiln_session *s, const char *fn, const char *const *output_names,
                                  size_t n_outputs, int *want) {
    const kn_graph *g = s->model->graph;
    for (size_t i = 0; i < n_outputs; i++) {
        if (!output_names) {
            want[i] = (int)i;
            continue;
        }
        int k = 0;
        for (; output_names[i] && k < g->n_outputs; k++)
            if (!strcmp(g->values[g->outputs[k]].name, output_names[i])) break;
        if (!output_names[i] || k == g->n_outputs)
            return kn_error(KILN_ERR_NOT_FOUND, "%s: the model has no output '%s'", fn,
                            output_names[i] ? output_names[i] : "(NULL)");
        want[i] = k;
    }
    return KILN_OK;
}

/* The session's device backend when it has one that copies (NULL otherwise). */
static const kn_backend *copy_backend(const kiln_session *s) {
    for (int b = 0; b < s->rt->n_backends; b++)
        if (s->rt->backends[b].ops->device != KN_DEVICE_HOST && s->rt->backends[b].ops->copy) return &s->rt->backends[b];
    return NULL;
}

/* One output for the caller from the run's value t: t itself when the run hands it over (and it
 * is where the caller wants it), else a copy where the caller wants it (device_out: on the device
 * for numeric tensors). */
static kiln_status deliver(const kiln_session *s, kn_tensor **t, bool borrowed, bool device_out, kn_tensor **out) {
    kn_tensor *v = *t;
    *out = NULL;
    bool numeric = v->kind == KN_VALUE_TENSOR && v->dtype != KILN_DTYPE_STRING && kiln_dtype_size(v->dtype) > 0;
    kn_device where = device_out && numeric ? (kn_device)s->opts.output_device : KN_DEVICE_HOST;
    if (v->device == where && !borrowed) {
        *out = v;
        *t = NULL;
        return KILN_OK;
    }
    if (v->device == KN_DEVICE_HOST && where == KN_DEVICE_HOST) return kn_tensor_clone(v, out);
    const kn_backend *be = kn_session_device_backend(s, where != KN_DEVICE_HOST ? where : v->device);
    if (!be || !be->ops->copy) return KN_INTERNAL("an output on a device the session has no provider for");
    kn_tensor *n = NULL;
    kiln_status st = where != KN_DEVICE_HOST ? be->ops->new_tensor(be->state, v->dtype, v->rank, v->dims, &n)
                     : be->ops->new_host_tensor ? be->ops->new_host_tensor(be->state, v->dtype, v->rank, v->dims, &n)
                                                : kn_tensor_new_pooled(NULL, false, v->dtype, v->rank, v->dims, &n);
    if (st == KILN_OK) st = be->ops->copy(be->state, v, n);
    if (st != KILN_OK) {
        kn_tensor_free(n);
        return st;
    }
    *out = n;
    return KILN_OK;
}

/* Whether caller tensor t can hold a value of type ty as far as the model tells: the same element
 * type, rank and fixed dims (what the run computes is checked again after it). */
static bool fits_type(const kn_type *ty, const kn_tensor *t) {
    if (ty->kind != KN_TYPE_TENSOR || ty->dtype != t->dtype || ty->rank != t->rank) return false;
    for (int d = 0; d < ty->rank; d++)
        if (ty->dims[d].value >= 0 && ty->dims[d].value != t->dims[d]) return false;
    return true;
}

/* The common part of kiln_session_run (outputs_out) and kiln_session_run_into (into). */
static kiln_status run_body(kiln_session *s, kn_call_ctx *ctx, const char *fn, const char *const *input_names,
                            kiln_tensor *const *inputs, size_t n_inputs, const char *const *output_names,
                            size_t n_outputs, kiln_tensor **outputs_out, kiln_tensor *const *into) {
    if (n_inputs && (!input_names || !inputs))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: input_names or inputs is NULL", fn);
    if (n_outputs && !outputs_out && !into)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, into ? "outputs" : "outputs_out");
    const kn_graph *g = s->model->graph;
    if (!output_names && n_outputs != (size_t)g->n_outputs)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: output_names is NULL, so n_outputs must be %d (all outputs), not %zu", fn, g->n_outputs,
                        n_outputs);
    /* up to RUN_SMALL entries each in the frame, zeroed as calloc would (their four callocs and
     * frees were 15% of a one-node model's run: Softmax of 1x1000, 1 us a run) */
    enum { RUN_SMALL = 16 };
    kn_tensor *bound_s[RUN_SMALL], *all_out_s[RUN_SMALL], *in_place_s[RUN_SMALL];
    int want_s[RUN_SMALL];
    const bool small = g->n_inputs <= RUN_SMALL && g->n_outputs <= RUN_SMALL && n_outputs <= RUN_SMALL;
    if (small) {
        memset(bound_s, 0, sizeof bound_s);
        memset(all_out_s, 0, sizeof all_out_s);
        memset(want_s, 0, sizeof want_s);
    }
    kn_tensor **bound = small ? bound_s : calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof *bound);
    kn_tensor **all_out = small ? all_out_s : calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *all_out);
    int *want = small ? want_s : calloc(n_outputs ? n_outputs : 1, sizeof *want);
    kn_tensor **in_place = NULL;
    bool borrowed = false;
    kiln_status st = KILN_OK;
    if (!bound || !all_out || !want) {
        st = KN_OOM();
        goto done;
    }
    st = bind_inputs(s, fn, input_names, inputs, n_inputs, bound);
    if (st == KILN_OK) st = select_outputs(s, fn, output_names, n_outputs, want);
    for (size_t i = 0; st == KILN_OK && into && i < n_outputs; i++) {
        const char *name = g->values[g->outputs[want[i]]].name;
        if (!into[i]) st = kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: the tensor for output '%s' is NULL", fn, name);
        else if (into[i]->kind != KN_VALUE_TENSOR || into[i]->dtype == KILN_DTYPE_STRING)
            st = kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: output '%s': only numeric tensors can be given", fn, name);
        else st = check_device_tensor(s, fn, "output", name, into[i]);
    }
    if (st != KILN_OK) goto done;
    bool device_out = !into && s->opts.output_device != KILN_DEVICE_HOST;
    /* the caller's tensors, per graph output, for the nodes to write straight into (exec.h); only
     * when each agrees with what the model says of its output, so that a tensor the output cannot
     * fit is refused, after the run, with nothing written */
    /* (KILN_OUTPUTS_IN_PLACE=0: every output computed in kiln's memory and copied into the caller's
     * tensors, as before nodes wrote into them) */
    if (into && !s->outputs_copy) {
        if (small) in_place = memset(in_place_s, 0, sizeof in_place_s);
        else in_place = calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *in_place);
        bool agree = in_place != NULL;
        for (size_t i = 0; agree && i < n_outputs; i++) {
            agree = fits_type(&g->values[g->outputs[want[i]]].type, into[i]);
            if (!in_place[want[i]]) in_place[want[i]] = into[i];
        }
        if (!agree) {
            if (!small) free(in_place);
            in_place = NULL;
        }
    }
    st = kn_session_execute(s, ctx, bound, all_out, device_out || into ? KN_EXEC_DEVICE_OUTPUTS : 0, &borrowed,
                            in_place);
    if (st != KILN_OK) {
        memset(all_out, 0, sizeof *all_out * (size_t)g->n_outputs);
        goto done;
    }
    if (into) {
        /* every output checked before anything is written */
        for (size_t i = 0; i < n_outputs; i++) {
            const kn_tensor *v = all_out[want[i]], *d = into[i];
            const char *name = g->values[g->outputs[want[i]]].name;
            if (!v || v->kind != KN_VALUE_TENSOR || v->dtype == KILN_DTYPE_STRING) {
                st = kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: output '%s' is not a numeric tensor: use kiln_session_run",
                              fn, name);
                goto done;
            }
            if (v->dtype != d->dtype || v->rank != d->rank ||
                (v->rank && memcmp(v->dims, d->dims, sizeof(int64_t) * (size_t)v->rank))) {
                char a[256], b[256];
                st = kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: output '%s' is %s, the tensor given for it is %s", fn,
                              name, kn_tensor_describe(v, a, sizeof a), kn_tensor_describe(d, b, sizeof b));
                goto done;
            }
        }
        const kn_backend *be = copy_backend(s);
        for (size_t i = 0; i < n_outputs; i++) {
            const kn_tensor *v = all_out[want[i]];
            if (v == into[i]) continue; /* written by the run's graph itself (graph_run.c) */
            if (v->device == KN_DEVICE_HOST && into[i]->device == KN_DEVICE_HOST) {
                /* (written in place by its node: nothing to copy) */
                if (v->nbytes && v->data != into[i]->data) memcpy(into[i]->data, v->data, v->nbytes);
            } else if (!be) {
                st = KN_INTERNAL("a device tensor in a session without a device provider");
            } else {
                st = be->ops->copy(be->state, v, into[i]);
            }
            if (st != KILN_OK) goto done;
        }
        if (be && be->ops->sync) st = be->ops->sync(be->state);
        goto done;
    }
    for (size_t i = 0; i < n_outputs; i++) {
        int k = want[i];
        if (all_out[k]) {
            st = deliver(s, &all_out[k], borrowed, device_out, &outputs_out[i]);
        } else {
            /* the same output asked for twice: copy the first one handed out */
            size_t j = 0;
            while (j < i && want[j] != k) j++;
            if (j == i) {
                st = KN_INTERNAL("output slot already taken");
                goto done;
            }
            kn_tensor *first = outputs_out[j];
            st = deliver(s, &first, true, device_out, &outputs_out[i]);
        }
        if (st != KILN_OK) goto done;
    }
    /* outputs left on (or copied from) the device are complete when the run returns */
    if (borrowed || device_out) {
        const kn_backend *be = copy_backend(s);
        if (be && be->ops->sync) st = be->ops->sync(be->state);
    }
done:
    if (st != KILN_OK && outputs_out)
        for (size_t i = 0; i < n_outputs; i++) {
            kn_tensor_free(outputs_out[i]);
            outputs_out[i] = NULL;
        }
    if (all_out && !borrowed)
        for (int k = 0; k < g->n_outputs; k++) kn_tensor_free(all_out[k]);
    if (!small) {
        free(all_out);
        free(bound);
        free(want);
        free(in_place);
    }
    return st;
}

/* ------------------------------------------------------------------ concurrent calls */

/* A run context for a call: a free one, a new one (up to the bound), or, at the bound, the next
 * one given back. A context keeps its device lanes and the graphs recorded on them, with the host
 * arena they may read. A serial session (a device provider without lanes) has one context, so its
 * calls take turns here. A call waiting here counts as inside (destroy waits for it and it leaves
 * with KILN_ERR_MISUSE). */
static kiln_status ctx_take(kiln_session *s, const char *fn, kn_run_ctx **out) {
    *out = NULL;
    kn_run_ctx *c = NULL;
    kiln_status st = KILN_OK;
    int bound = s->serial ? 1 : s->opts.max_concurrent_runs;
    pthread_mutex_lock(&s->ctx_mu);
    s->active++;
    for (;;) {
        if (s->closing) {
            st = kn_error(KILN_ERR_MISUSE, "%s: the session is being destroyed (kiln_session_destroy) on another thread",
                          fn);
            break;
        }
        if (s->free_ctx) {
            c = s->free_ctx;
            s->free_ctx = c->next;
            break;
        }
        if (bound <= 0 || s->n_ctx < bound) {
            kn_call_ctx *cc = calloc(1, sizeof *cc); /* with room for its lanes (graph_run.h) */
            c = cc ? &cc->run : NULL;
            if (!c) {
                st = kn_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for a run context", fn);
                break;
            }
            s->n_ctx++;
            break;
        }
        pthread_cond_wait(&s->ctx_cv, &s->ctx_mu);
    }
    if (st != KILN_OK) {
        s->active--;
        pthread_cond_broadcast(&s->ctx_cv);
    } else {
        c->next = NULL;
        c->plan = s->plan;
        s->running++;
        if (s->running > s->peak_active) s->peak_active = s->running;
    }
    pthread_mutex_unlock(&s->ctx_mu);
    *out = c;
    return st;
}

static void ctx_give(kiln_session *s, kn_run_ctx *c) {
    pthread_mutex_lock(&s->ctx_mu);
    c->next = s->free_ctx;
    s->free_ctx = c;
    s->running--;
    s->active--;
    pthread_cond_broadcast(&s->ctx_cv);
    pthread_mutex_unlock(&s->ctx_mu);
}

void kn_session_ctx_stats(const kiln_session *s, int *contexts, int *peak_active) {
    kiln_session *m = (kiln_session *)s;
    pthread_mutex_lock(&m->ctx_mu);
    if (contexts) *contexts = m->n_ctx;
    if (peak_active) *peak_active = m->peak_active;
    pthread_mutex_unlock(&m->ctx_mu);
}

/* The context's device lanes bound to this thread for the call (opened at its first call). */
static kiln_status lanes_enter(kiln_session *s, kn_call_ctx *cc) {
    for (int b = 0; b < s->rt->n_backends; b++) {
        const kn_backend *be = &s->rt->backends[b];
        if (!be->ops->lane_open) continue;
        if (!cc->lanes[b]) {
            kiln_status st = be->ops->lane_open(be->state, &cc->lanes[b]);
            if (st != KILN_OK) {
                for (int k = 0; k < b; k++)
                    if (cc->lanes[k]) (void)s->rt->backends[k].ops->lane_leave(s->rt->backends[k].state, cc->lanes[k]);
                return st;
            }
        }
        be->ops->lane_enter(be->state, cc->lanes[b]);
    }
    return KILN_OK;
}

/* Unbinds them, once their work is done; an error a device kernel recorded (an index out of
 * range) fails a call that had succeeded, and its outputs are dropped. */
static kiln_status lanes_leave(kiln_session *s, kn_call_ctx *cc, kiln_status st, kiln_tensor **outputs_out,
                               size_t n_outputs) {
    for (int b = s->rt->n_backends - 1; b >= 0; b--) {
        const kn_backend *be = &s->rt->backends[b];
        if (!cc->lanes[b]) continue;
        char keep[1024];
        if (st != KILN_OK) snprintf(keep, sizeof keep, "%s", kiln_last_error());
        kiln_status ls = be->ops->lane_leave(be->state, cc->lanes[b]);
        if (st != KILN_OK) {
            if (ls != KILN_OK) kn_error(st, "%s", keep); /* the call's own error is the one to report */
        } else if (ls != KILN_OK) {
            st = ls;
            for (size_t i = 0; outputs_out && i < n_outputs; i++) {
                kn_tensor_free(outputs_out[i]);
                outputs_out[i] = NULL;
            }
        }
    }
    return st;
}

/* Any number of calls at once: each in a run context of its own (see session.h). */
static kiln_status run_common(kiln_session *s, const kiln_run_options *ro, const char *fn,
                              const char *const *input_names, kiln_tensor *const *inputs, size_t n_inputs,
                              const char *const *output_names, size_t n_outputs, kiln_tensor **outputs_out,
                              kiln_tensor *const *into) {
    if (outputs_out)
        for (size_t i = 0; i < n_outputs; i++) outputs_out[i] = NULL;
    if (!s) return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: session is NULL", fn);
    if (atomic_load(&s->magic) != KN_SESSION_MAGIC)
        return kn_error(KILN_ERR_MISUSE, "%s: the session is not a live kiln_session (destroyed, or another object)", fn);
    if (ro && ro->magic != KN_RUN_OPTIONS_MAGIC)
        return kn_error(KILN_ERR_MISUSE, "%s: run_options is not a live kiln_run_options (destroyed, or another object)",
                        fn);
    kn_run_ctx *ctx = NULL;
    KN_TRY(ctx_take(s, fn, &ctx));
    int level = kn_log_swap_level(s->opts.log_level);
    kn_run_ctx_begin(ctx, ro ? (const int *)&ro->terminate : NULL, ro ? (int64_t)atomic_load(&ro->timeout_ms) : 0,
                     (int64_t)(s->opts.memory_limit > INT64_MAX ? INT64_MAX : s->opts.memory_limit));
    ctx->memo_off = s->memo_off, ctx->memplan_off = s->memplan_off, ctx->bytes_limit = s->bytes_limit;
    double prof_t0 = kn_profile_run_begin(); /* a run's slice in a KILN_PROFILE trace */
    kn_call_ctx *cc = (kn_call_ctx *)ctx;
    kiln_status st = lanes_enter(s, cc);
    if (st == KILN_OK) {
        st = run_body(s, cc, fn, input_names, inputs, n_inputs, output_names, n_outputs, outputs_out, into);
        st = lanes_leave(s, cc, st, outputs_out, n_outputs);
    }
    kn_profile_run_end(prof_t0, st);
    if (st != KILN_OK && (st == KILN_ERR_CANCELLED || st == KILN_ERR_DEADLINE || st == KILN_ERR_OUT_OF_MEMORY))
        kn_error_prefix(st, "%s: ", fn);
    kn_log_restore_level(level);
    ctx_give(s, ctx);
    return st;
}

kiln_status kiln_session_run(kiln_session *s, const char *const *input_names, kiln_tensor *const *inputs,
                             size_t n_inputs, const char *const *output_names, size_t n_outputs,
                             kiln_tensor **outputs_out) {
    return run_common(s, NULL, "kiln_session_run", input_names, inputs, n_inputs, output_names, n_outputs,
                      outputs_out, NULL);
}

kiln_status kiln_session_run_with(kiln_session *s, const kiln_run_options *ro, const char *const *input_names,
                                  kiln_tensor *const *inputs, size_t n_inputs, const char *const *output_names,
                                  size_t n_outputs, kiln_tensor **outputs_out) {
    return run_common(s, ro, "kiln_session_run_with", input_names, inputs, n_inputs, output_names, n_outputs,
                      outputs_out, NULL);
}

static kiln_status run_into_common(kiln_session *s, const kiln_run_options *ro, const char *fn,
                                   const char *const *input_names, kiln_tensor *const *inputs, size_t n_inputs,
                                   const char *const *output_names, size_t n_outputs, kiln_tensor *const *outputs) {
    if (n_outputs && !outputs) return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: outputs is NULL", fn);
    static kiln_tensor *const none[1] = {NULL};
    return run_common(s, ro, fn, input_names, inputs, n_inputs, output_names, n_outputs, NULL,
                      outputs ? outputs : none);
}

kiln_status kiln_session_run_into(kiln_session *s, const char *const *input_names, kiln_tensor *const *inputs,
                                  size_t n_inputs, const char *const *output_names, size_t n_outputs,
                                  kiln_tensor *const *outputs) {
    return run_into_common(s, NULL, "kiln_session_run_into", input_names, inputs, n_inputs, output_names, n_outputs,
                           outputs);
}

kiln_status kiln_session_run_into_with(kiln_session *s, const kiln_run_options *ro, const char *const *input_names,
                                       kiln_tensor *const *inputs, size_t n_inputs, const char *const *output_names,
                                       size_t n_outputs, kiln_tensor *const *outputs) {
    return run_into_common(s, ro, "kiln_session_run_into_with", input_names, inputs, n_inputs, output_names,
                           n_outputs, outputs);
}

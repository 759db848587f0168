#include "exec/plan.h"

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "exec/exec.h"
#include "ops/op.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void graph_plan_clear(kn_graph_plan *gp) {
    for (int i = 0; i < gp->n_steps; i++) free((void *)gp->steps[i].params);
    free(gp->steps);
    free(gp->values);
}

void kn_plan_free(kn_plan *p) {
    if (!p) return;
    for (int i = 0; i < p->n_graphs; i++) graph_plan_clear(&p->graphs[i]);
    free(p->graphs);
    free(p);
}

/* The block of node n's kernel's prepare hook fn (bytes long), or NULL (no hook, or it failed: the
 * kernel's call then reports the error). */
static const kn_params *prepare_params(const kn_node *n, kn_params_fn fn, size_t bytes) {
    if (!fn) return NULL;
    kn_params *b = calloc(1, sizeof *b + bytes);
    if (!b) return NULL;
    b->fn = fn;
    b->node = n;
    if (fn(n, b->data) != KILN_OK) {
        kn_clear_error();
        free(b);
        return NULL;
    }
    return b;
}

static kiln_status add_graph(kn_plan *p, const kn_graph *g, const kn_runtime *rt, bool params) {
    if (p->n_graphs == p->cap_graphs) {
        int cap = p->cap_graphs ? p->cap_graphs * 2 : 4;
        kn_graph_plan *gs = realloc(p->graphs, sizeof *gs * (size_t)cap);
        if (!gs) return KN_OOM();
        p->graphs = gs;
        p->cap_graphs = cap;
    }
    kn_graph_plan *gp = &p->graphs[p->n_graphs++];
    memset(gp, 0, sizeof *gp);
    gp->g = g;
    int live = 0;
    for (int i = 0; i < g->n_nodes; i++) live += !g->nodes[i].dead;
    gp->steps = calloc((size_t)(live ? live : 1), sizeof *gp->steps);
    gp->values = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *gp->values);
    if (!gp->steps || !gp->values) return KN_OOM();
    for (int v = 0; v < g->n_values; v++) {
        gp->values[v].constant = g->values[v].constant;
        gp->values[v].uses = g->values[v].uses;
        gp->values[v].outer = g->values[v].is_outer;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        kn_step *s = &gp->steps[gp->n_steps++];
        s->node = n;
        s->idx = i;
        if (kn_exec_is_view(n)) s->flags |= KN_STEP_VIEW;
        if (n->schema && (n->schema->flags & KN_OP_HAS_SUBGRAPH)) s->flags |= KN_STEP_SUBGRAPH;
        const kn_cpu_kernel *k = NULL;
        if (rt) {
            if (n->provider < 0 || n->provider >= rt->n_backends || !n->kernel) {
                s->flags |= KN_STEP_UNPLACED;
                continue;
            }
            const kn_backend *be = &rt->backends[n->provider];
            s->be = be;
            if (be->ops->overwrites && be->ops->overwrites(n->kernel)) s->flags |= KN_STEP_OVERWRITES;
            if (be->ops->device != KN_DEVICE_HOST) s->flags |= KN_STEP_DEVICE;
            /* the CPU backend's run calls the kernel: the step calls it directly, unless the run
             * wraps it (precision=bf16 marks the thread around a matrix product's kernel); such a
             * step goes through the run, with the kernel's prepared parameters all the same, as a
             * device backend's step with its kernel's */
            if (be->ops == &kn_backend_cpu && !kn_cpu_node_wraps(be->state, n)) {
                k = n->kernel;
            } else if (params && be->ops->kernel_params) {
                size_t bytes = 0;
                kn_params_fn fn = be->ops->kernel_params(n->kernel, &bytes);
                s->params = prepare_params(n, fn, bytes);
            }
        } else {
            k = n->kernel;
            if (!k) {
                s->flags |= KN_STEP_UNPLACED;
                continue;
            }
            if (k->flags & KN_KERNEL_OVERWRITES) s->flags |= KN_STEP_OVERWRITES;
        }
        if (k) {
            s->cpu = k->run;
            if (params) s->params = prepare_params(n, k->prepare, k->params_bytes);
        }
    }
    return KILN_OK;
}

static kiln_status add_bodies(kn_plan *p, const kn_graph *g, const kn_runtime *rt, bool params) {
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int a = 0; a < n->n_attrs; a++) {
            const kn_attr *at = &n->attrs[a];
            if (at->type == KN_ATTR_GRAPH && at->g) {
                KN_TRY(add_graph(p, at->g, rt, params));
                KN_TRY(add_bodies(p, at->g, rt, params));
            }
            for (int k = 0; at->type == KN_ATTR_GRAPHS && k < at->n; k++) {
                KN_TRY(add_graph(p, at->graphs[k], rt, params));
                KN_TRY(add_bodies(p, at->graphs[k], rt, params));
            }
        }
    }
    return KILN_OK;
}

static int by_graph(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)((const kn_graph_plan *)a)->g, y = (uintptr_t)((const kn_graph_plan *)b)->g;
    return x < y ? -1 : x > y;
}

kiln_status kn_plan_build(const kn_graph *g, const kn_runtime *rt, bool params, kn_plan **out) {
    *out = NULL;
    kn_plan *p = calloc(1, sizeof *p);
    if (!p) return KN_OOM();
    kiln_status st = add_graph(p, g, rt, params);
    if (st == KILN_OK && params) st = add_bodies(p, g, rt, params);
    if (st != KILN_OK) {
        kn_plan_free(p);
        return st;
    }
    /* the bodies by address, for kn_plan_find (a model with hundreds of If branches runs each by
     * a search) */
    if (p->n_graphs > 2) qsort(p->graphs + 1, (size_t)(p->n_graphs - 1), sizeof *p->graphs, by_graph);
    *out = p;
    return KILN_OK;
}

const kn_graph_plan *kn_plan_find(const kn_plan *p, const kn_graph *g) {
    if (!p || !p->n_graphs) return NULL;
    if (p->graphs[0].g == g) return &p->graphs[0];
    int lo = 1, hi = p->n_graphs - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        uintptr_t m = (uintptr_t)p->graphs[mid].g;
        if (m == (uintptr_t)g) return &p->graphs[mid];
        if (m < (uintptr_t)g) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

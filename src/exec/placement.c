/* Placement: each node runs on the first provider, in the order the options list them, whose
 * backend has a kernel for it. Two exceptions by design:
 *  - small integer shape computations (Shape -> Gather -> Concat -> Reshape chains) whose inputs
 *    are already on the host stay on the CPU: moving a handful of int64s to a GPU and back would
 *    cost a synchronisation each and win nothing (an If over such values whose branches give such
 *    values too is one);
 *  - control-flow bodies (If/Loop/Scan subgraphs) of an operator placed on the CPU run on the CPU
 *    with it; those of an operator placed on a device are placed by these same rules (nested bodies
 *    too), so a device's If/Loop/Scan runs its bodies on the device where it has the kernels. */
#include "backend/backend.h"

#include "exec/control_flow.h"
#include "ops/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Shape computations are at most this many elements per output. */
#define KN_SHAPE_MAX_ELEMENTS 64

static kiln_status place_all_cpu(kn_graph *g, kn_runtime *rt, kn_place_report_fn report, void *arg);

static kiln_status place_subgraphs(kn_node *n, kn_runtime *rt, kn_place_report_fn report, void *arg) {
    for (int a = 0; a < n->n_attrs; a++) {
        kn_attr *at = &n->attrs[a];
        if (at->type == KN_ATTR_GRAPH && at->g) KN_TRY(place_all_cpu(at->g, rt, report, arg));
        if (at->type == KN_ATTR_GRAPHS)
            for (int k = 0; k < at->n; k++) KN_TRY(place_all_cpu(at->graphs[k], rt, report, arg));
    }
    return KILN_OK;
}

static kiln_status place_graph(kn_graph *g, kn_runtime *rt, kn_place_report_fn report, void *arg, int host_inputs);

/* The bodies of node n, once n is placed: by the same rules when n runs on a device (the body
 * inputs its kernel gives on the host, a Loop's iteration number and condition, count as host
 * values), else on the CPU. */
static kiln_status place_bodies(kn_node *n, kn_runtime *rt, kn_place_report_fn report, void *arg) {
    if (n->provider < 0 || n->provider >= rt->n_backends || rt->backends[n->provider].ops->device == KN_DEVICE_HOST)
        return place_subgraphs(n, rt, report, arg);
    int host_inputs = kn_cf_host_body_inputs(n);
    for (int a = 0; a < n->n_attrs; a++) {
        kn_attr *at = &n->attrs[a];
        if (at->type == KN_ATTR_GRAPH && at->g) KN_TRY(place_graph(at->g, rt, report, arg, host_inputs));
        if (at->type == KN_ATTR_GRAPHS)
            for (int k = 0; k < at->n; k++) KN_TRY(place_graph(at->graphs[k], rt, report, arg, host_inputs));
    }
    return KILN_OK;
}

static void input_types(const kn_graph *g, const kn_node *n, const kn_type **in, int cap) {
    for (int k = 0; k < n->n_inputs && k < cap; k++) in[k] = n->inputs[k] >= 0 ? &g->values[n->inputs[k]].type : NULL;
}

static kiln_status place_all_cpu(kn_graph *g, kn_runtime *rt, kn_place_report_fn report, void *arg) {
    char lbl[256], why[512];
    const kn_backend *cpu = &rt->backends[rt->cpu];
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        KN_TRY(place_subgraphs(n, rt, report, arg));
        const kn_type *in[64] = {0};
        int ni = n->n_inputs < 64 ? n->n_inputs : 64;
        input_types(g, n, in, 64);
        why[0] = 0;
        const void *k = cpu->ops->select(cpu->state, n, in, ni, why, sizeof why);
        if (!k) return kn_error(KILN_ERR_UNSUPPORTED, "%s: %s", kn_node_label(n, lbl, sizeof lbl), why);
        n->kernel = (void *)k;
        n->provider = rt->cpu;
        if (report) report(arg, g, n, rt->cpu, KN_PLACE_SUBGRAPH, "inside a control-flow body");
    }
    return KILN_OK;
}

static bool small_int_output(const kn_type *t) {
    if (t->kind != KN_TYPE_TENSOR || !kn_type_is_static(t)) return false;
    /* bool too: Equal/Where over shape values (exporters' "-1 means keep" masks) feed Expand and
     * Reshape, which read them on the host */
    if (t->dtype != KILN_DTYPE_INT64 && t->dtype != KILN_DTYPE_INT32 && t->dtype != KILN_DTYPE_BOOL) return false;
    /* stop as soon as it is too large: the dims may be anything a (hostile) file says */
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) {
        int64_t v = t->dims[d].value;
        if (v < 0 || v > KN_SHAPE_MAX_ELEMENTS) return false;
        n *= v;
        if (n > KN_SHAPE_MAX_ELEMENTS) return false;
    }
    return true;
}

/* Whether every value body (and the bodies in it) reads from outside is a host value of g (or is
 * made by an enclosing body, which then runs on the CPU as well). */
static bool reads_host_only(const kn_graph *g, const kn_graph *body, const unsigned char *host, int depth) {
    if (depth > 64) return false;
    for (int v = 0; v < body->n_values; v++) {
        if (!body->values[v].is_outer) continue;
        int id = kn_graph_find_value(g, body->values[v].name);
        if (id >= 0 && !host[id]) return false;
    }
    for (int i = 0; i < body->n_nodes; i++) {
        const kn_node *n = &body->nodes[i];
        for (int a = 0; !n->dead && a < n->n_attrs; a++) {
            const kn_attr *at = &n->attrs[a];
            if (at->type == KN_ATTR_GRAPH && at->g && !reads_host_only(g, at->g, host, depth + 1)) return false;
            for (int k = 0; at->type == KN_ATTR_GRAPHS && k < at->n; k++)
                if (!reads_host_only(g, at->graphs[k], host, depth + 1)) return false;
        }
    }
    return true;
}

/* An If that is a shape computation: each branch gives small integer values from host values only
 * (an exporter's "if the input is 2-D" over shapes). On the CPU with its branches, its outputs are
 * host values like any shape computation's, which keeps what reads them from waiting for the
 * device, and the run recordable. */
static bool shape_if(const kn_graph *g, const kn_node *n, const unsigned char *host) {
    if (*n->domain || strcmp(n->op_type, "If")) return false;
    static const char *const names[2] = {"then_branch", "else_branch"};
    for (int b = 0; b < 2; b++) {
        const kn_attr *a = kn_node_attr(n, names[b]);
        const kn_graph *body = a && a->type == KN_ATTR_GRAPH ? a->g : NULL;
        if (!body) return false;
        for (int o = 0; o < body->n_outputs; o++)
            if (!small_int_output(&body->values[body->outputs[o]].type)) return false;
        if (!reads_host_only(g, body, host, 0)) return false;
    }
    return true;
}

kiln_status kn_graph_place(kn_graph *g, kn_runtime *rt, kn_place_report_fn report, void *arg) {
    return place_graph(g, rt, report, arg, 0);
}

/* host_inputs: how many of g's first inputs are on the host (small integer ones count as shape
 * values). */
static kiln_status place_graph(kn_graph *g, kn_runtime *rt, kn_place_report_fn report, void *arg, int host_inputs) {
    char lbl[256], why[512], first_why[512];
    int first = -1;
    for (int b = 0; b < rt->n_backends && first < 0; b++)
        if (rt->backends[b].listed) first = b;
    if (first < 0) return KN_INTERNAL("no provider listed");
    bool device_first = rt->backends[first].ops->device != KN_DEVICE_HOST;
    /* values that are on the host when their readers run, small enough to be shape values */
    unsigned char *host = calloc((size_t)(g->n_values ? g->n_values : 1), 1);
    if (!host) return KN_OOM();
    for (int v = 0; v < g->n_values; v++) {
        const kn_value *val = &g->values[v];
        if (val->constant && !val->is_graph_input && val->constant->kind == KN_VALUE_TENSOR &&
            kn_tensor_count(val->constant) <= KN_SHAPE_MAX_ELEMENTS)
            host[v] = 1;
    }
    for (int i = 0; i < host_inputs && i < g->n_inputs; i++)
        if (small_int_output(&g->values[g->inputs[i]].type)) host[g->inputs[i]] = 1;
    kiln_status st = KILN_OK;
    for (int i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        const kn_type *in[64] = {0};
        int ni = n->n_inputs < 64 ? n->n_inputs : 64;
        input_types(g, n, in, 64);
        n->kernel = NULL;
        n->provider = -1;

        /* a kernel of the first provider that makes its outputs on the host (Shape, Constant) runs
         * there: nothing moves */
        if (device_first) {
            const kn_backend *fb = &rt->backends[first];
            why[0] = 0;
            const void *k = fb->ops->select(fb->state, n, in, ni, why, sizeof why);
            bool host_out = k && fb->ops->output_on_host;
            for (int o = 0; host_out && o < n->n_outputs; o++)
                if (!fb->ops->output_on_host(k, n, o)) host_out = false;
            if (host_out) {
                n->kernel = (void *)k;
                n->provider = first;
                st = place_bodies(n, rt, report, arg);
                if (st != KILN_OK) break;
                for (int o = 0; o < n->n_outputs; o++)
                    if (n->outputs[o] >= 0 && small_int_output(&g->values[n->outputs[o]].type)) host[n->outputs[o]] = 1;
                if (report) report(arg, g, n, first, KN_PLACE_FIRST, "");
                continue;
            }
        }

        /* a shape computation: host inputs only, small integer outputs (an If: each branch's) */
        bool cf = n->schema && (n->schema->flags & KN_OP_HAS_SUBGRAPH);
        bool shape = device_first && n->n_outputs > 0 && (!cf || shape_if(g, n, host));
        for (int k = 0; shape && k < n->n_inputs; k++)
            if (n->inputs[k] >= 0 && !host[n->inputs[k]]) shape = false;
        for (int o = 0; shape && !cf && o < n->n_outputs; o++)
            if (n->outputs[o] >= 0 && !small_int_output(&g->values[n->outputs[o]].type)) shape = false;
        if (shape) {
            const kn_backend *cpu = &rt->backends[rt->cpu];
            why[0] = 0;
            const void *k = cpu->ops->select(cpu->state, n, in, ni, why, sizeof why);
            if (k) {
                n->kernel = (void *)k;
                n->provider = rt->cpu;
                st = place_bodies(n, rt, report, arg);
                if (st != KILN_OK) break;
                for (int o = 0; o < n->n_outputs; o++)
                    if (n->outputs[o] >= 0) host[n->outputs[o]] = 1;
                if (report) report(arg, g, n, rt->cpu, KN_PLACE_SHAPE, "shape computation");
                continue;
            }
        }

        first_why[0] = 0;
        for (int b = 0; b < rt->n_backends; b++) {
            const kn_backend *be = &rt->backends[b];
            if (!be->listed) continue;
            why[0] = 0;
            const void *k = be->ops->select(be->state, n, in, ni, why, sizeof why);
            if (k) {
                n->kernel = (void *)k;
                n->provider = b;
                break;
            }
            if (!first_why[0]) snprintf(first_why, sizeof first_why, "%s: %s", be->ops->name, why);
            if (be->cfg.strict) {
                st = kn_error(KILN_ERR_UNSUPPORTED, "%s: provider '%s' (strict) cannot run it: %s",
                              kn_node_label(n, lbl, sizeof lbl), be->ops->name, why);
                break;
            }
        }
        if (st != KILN_OK) break;
        if (n->provider < 0) {
            st = kn_error(KILN_ERR_UNSUPPORTED, "%s: no provider can run it (%s)", kn_node_label(n, lbl, sizeof lbl),
                          first_why);
            break;
        }
        st = place_bodies(n, rt, report, arg);
        if (st != KILN_OK) break;
        const kn_backend *be = &rt->backends[n->provider];
        for (int o = 0; o < n->n_outputs; o++) {
            int v = n->outputs[o];
            if (v < 0) continue;
            bool on_host = be->ops->device == KN_DEVICE_HOST ||
                           (be->ops->output_on_host && be->ops->output_on_host(n->kernel, n, o));
            if (on_host && small_int_output(&g->values[v].type)) host[v] = 1;
        }
        if (report) report(arg, g, n, n->provider, n->provider == first ? KN_PLACE_FIRST : KN_PLACE_FALLBACK, first_why);
    }
    free(host);
    return st;
}

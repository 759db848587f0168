/* One-node models for GPU tests: a node with random graph inputs, run with provider cuda alone (so a
 * CPU fallback fails the test) and with the CPU backend, every output compared. Static functions,
 * so a test file uses only what it needs. */
#ifndef KN_TEST_ONEMODEL_H
#define KN_TEST_ONEMODEL_H

#include "unit.h"

#include "kiln.h"
#include "ir/graph.h"
#include "ir/tensor.h"
#include "onnx/writer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct onemodel {
    kn_model *m;
    kn_graph *g;
    int node;
    kn_tensor *inputs[8];
    const char *names[8];
    int n_inputs, n_outputs;
    uint32_t seed;
} onemodel;

static inline float urand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static inline void om_init(onemodel *o, int opset) {
    memset(o, 0, sizeof *o);
    o->seed = 2024;
    kn_model_new(&o->m);
    o->m->ir_version = 10;
    o->m->n_opsets = 1;
    o->m->opsets = kn_arena_alloc(&o->m->arena, sizeof(kn_opset_import));
    o->m->opsets[0].domain = "";
    o->m->opsets[0].version = opset;
    o->m->producer_name = "kiln-test";
    kn_graph_new(o->m, NULL, "test", &o->g);
    o->m->graph = o->g;
    o->node = -1;
}

/* A graph input with random values (bool: a pattern given by keep; int64: the values given). */
static inline int om_input(onemodel *o, const char *name, kiln_dtype dt, int rank, const int64_t *dims, float scale,
                    const void *values) {
    int v = kn_graph_add_value(o->g, name);
    kn_type_set_tensor(&o->g->values[v].type, dt, rank, dims);
    o->g->values[v].is_graph_input = true;
    o->g->inputs = realloc(o->g->inputs, sizeof(int) * (size_t)(o->g->n_inputs + 1));
    o->g->inputs[o->g->n_inputs++] = v;
    kn_tensor *t;
    kn_tensor_new(dt, rank, dims, &t);
    int64_t n = kn_tensor_count(t);
    if (values) memcpy(t->data, values, t->nbytes);
    else
        for (int64_t i = 0; i < n; i++) kn_tensor_set_f64(t, i, scale * urand(&o->seed));
    o->inputs[o->n_inputs] = t;
    o->names[o->n_inputs++] = o->g->values[v].name;
    return v;
}

static inline int om_value(onemodel *o, const char *name) { return kn_graph_add_value(o->g, name); }

static inline void om_node(onemodel *o, const char *op, const int *in, int nin, const int *out, int nout) {
    o->node = kn_graph_add_node(o->g, NULL, op, "", in, nin, out, nout);
    o->n_outputs = 0;
    for (int i = 0; i < nout; i++) {
        if (out[i] < 0) continue; /* an omitted optional output */
        o->n_outputs++;
        o->g->outputs = realloc(o->g->outputs, sizeof(int) * (size_t)(o->g->n_outputs + 1));
        o->g->outputs[o->g->n_outputs++] = out[i];
        o->g->values[out[i]].is_graph_output = true;
    }
}

static inline kn_attr *om_attr(onemodel *o, const char *name, kn_attr_type type) {
    kn_node *n = &o->g->nodes[o->node];
    kn_attr *a = kn_arena_alloc(&o->m->arena, sizeof(kn_attr) * (size_t)(n->n_attrs + 1));
    if (n->n_attrs) memcpy(a, n->attrs, sizeof(kn_attr) * (size_t)n->n_attrs);
    n->attrs = a;
    kn_attr *r = &a[n->n_attrs++];
    memset(r, 0, sizeof *r);
    r->name = kn_arena_strdup(&o->m->arena, name);
    r->type = type;
    return r;
}
/* Moves the model's last node into domain kiln (imported at version 1): kiln's fused operators. */
static inline void om_kiln_domain(onemodel *o) {
    kn_opset_import *ops = kn_arena_alloc(&o->m->arena, 2 * sizeof *ops);
    ops[0] = o->m->opsets[0];
    ops[1].domain = "kiln";
    ops[1].version = 1;
    o->m->opsets = ops;
    o->m->n_opsets = 2;
    o->g->nodes[o->node].domain = "kiln";
}

static inline void om_int(onemodel *o, const char *name, int64_t v) { om_attr(o, name, KN_ATTR_INT)->i = v; }
static inline void om_float(onemodel *o, const char *name, float v) { om_attr(o, name, KN_ATTR_FLOAT)->f = v; }
static inline void om_str(onemodel *o, const char *name, const char *v) {
    kn_attr *a = om_attr(o, name, KN_ATTR_STRING);
    a->s = kn_arena_strdup(&o->m->arena, v);
    a->s_len = strlen(v);
}

static inline kiln_session *om_session(const unsigned char *data, size_t size, const char *provider) {
    kiln_session_options *opt;
    kiln_session_options_create(&opt);
    kiln_session_options_set_opt_level(opt, 0);
    kiln_session_options_set_cache(opt, 0, NULL);
    kiln_session_options_append_provider(opt, provider, NULL, NULL, 0);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(data, size, NULL, opt, &s);
    kiln_session_options_destroy(opt);
    CHECK_MSG(st == KILN_OK, "session (%s): %s", provider, kiln_last_error());
    return s;
}

static inline void om_run(kiln_session *s, onemodel *o, kn_tensor **out) {
    for (int i = 0; i < o->n_outputs; i++) out[i] = NULL;
    kiln_status st = kiln_session_run(s, o->names, o->inputs, (size_t)o->n_inputs, NULL, (size_t)o->n_outputs, out);
    CHECK_MSG(st == KILN_OK, "run: %s", kiln_last_error());
}

/* Runs the model with provider cuda (alone) and cpu and compares every output; the model stays. */
static inline void om_check(onemodel *o, double rtol, double atol, const char *what) {
    unsigned char *data = NULL;
    size_t size = 0;
    kn_graph_recount(o->g);
    kiln_status st = kn_onnx_write_memory(o->m, &data, &size);
    CHECK_MSG(st == KILN_OK, "%s: writing the model: %s", what, kiln_last_error());
    kiln_session *cpu = st == KILN_OK ? om_session(data, size, "cpu") : NULL;
    kiln_session *gpu = cpu ? om_session(data, size, "cuda") : NULL;
    if (gpu) {
        kn_tensor *want[4], *got[4];
        om_run(cpu, o, want);
        om_run(gpu, o, got);
        for (int k = 0; k < o->n_outputs; k++) {
            if (!want[k] || !got[k]) continue;
            if (kn_tensor_count(want[k]) != kn_tensor_count(got[k]) || want[k]->dtype != got[k]->dtype) {
                kn_unit_fail(__FILE__, __LINE__, "%s: output %d differs in shape or type", what, k);
                continue;
            }
            for (int64_t i = 0; i < kn_tensor_count(want[k]); i++) {
                double w = kn_tensor_get_f64(want[k], i), g = kn_tensor_get_f64(got[k], i);
                if (!(fabs(w - g) <= atol + rtol * fabs(w)) && !(w != w && g != g)) {
                    kn_unit_fail(__FILE__, __LINE__, "%s: output %d element %lld is %.7g on CUDA, %.7g on the CPU", what,
                                 k, (long long)i, g, w);
                    break;
                }
            }
        }
        for (int k = 0; k < o->n_outputs; k++) {
            kiln_tensor_destroy(want[k]);
            kiln_tensor_destroy(got[k]);
        }
    }
    kiln_session_destroy(gpu);
    kiln_session_destroy(cpu);
    free(data);
}

static inline void om_free(onemodel *o) {
    for (int i = 0; i < o->n_inputs; i++) kn_tensor_free(o->inputs[i]);
    kn_model_free(o->m);
}

/* om_check, then om_free. */
static inline void om_compare(onemodel *o, double rtol, double atol, const char *what) {
    om_check(o, rtol, atol, what);
    om_free(o);
}

static inline double rtol_for(kiln_dtype dt) { return dt == KILN_DTYPE_FLOAT ? 1e-4 : 4e-3; }
static inline double atol_for(kiln_dtype dt) { return dt == KILN_DTYPE_FLOAT ? 1e-5 : 2e-3; }

#endif

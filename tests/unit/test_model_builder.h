/* A small in-memory ONNX model builder for unit tests that run whole sessions: graph inputs,
 * float and int64 constants, nodes with attributes, outputs, serialised with kiln's ONNX writer.
 * Static inline functions, so a test file uses only what it needs. */
#ifndef KN_TEST_MODEL_BUILDER_H
#define KN_TEST_MODEL_BUILDER_H

#include "unit.h"

#include "ir/graph.h"
#include "ir/tensor.h"
#include "onnx/writer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Whether a and b (either may be NULL) have the same type, shape and bytes: a run's outputs against
 * another run's, bit for bit. */
static inline bool tmb_same_tensor(const kiln_tensor *a, const kiln_tensor *b) {
    if (!a || !b || kiln_tensor_dtype(a) != kiln_tensor_dtype(b) || kiln_tensor_rank(a) != kiln_tensor_rank(b)) return false;
    if (kiln_tensor_rank(a) && memcmp(kiln_tensor_dims(a), kiln_tensor_dims(b), sizeof(int64_t) * (size_t)kiln_tensor_rank(a)))
        return false;
    return kiln_tensor_bytes(a) == kiln_tensor_bytes(b) &&
           !memcmp(kiln_tensor_data((kiln_tensor *)a), kiln_tensor_data((kiln_tensor *)b), kiln_tensor_bytes(a));
}

/* How many of got[0, n) lie farther from the reference want than atol + rtol * scale[i] (scale
 * NULL: |want[i]|); a NaN counts as off. *first: the index of the first such output. */
static inline size_t tmb_count_off(const float *got, const double *want, const double *scale, size_t n, double atol,
                                   double rtol, size_t *first) {
    size_t bad = 0;
    *first = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= atol + rtol * (scale ? scale[i] : fabs(want[i])))) {
            if (!bad) *first = i;
            bad++;
        }
    return bad;
}

/* Runs session s twice on its n_in inputs (names[i]: ins[i]) and checks its one output against the
 * ny reference values want, within tmb_count_off's atol + rtol * scale (scale NULL: |want|); ctx
 * names the case and settings in a failure's message. */
static inline void tmb_check_runs(kiln_session *s, const char *const *names, kiln_tensor *const *ins, size_t n_in,
                                  const double *want, const double *scale, size_t ny, double atol, double rtol,
                                  const char *ctx) {
    for (int run = 0; run < 2; run++) {
        kiln_tensor *y = NULL;
        CHECK_STATUS(kiln_session_run(s, names, ins, n_in, NULL, 1, &y), KILN_OK);
        if (!y) continue;
        CHECK_EQ_INT(kiln_tensor_element_count(y), (int64_t)ny);
        const float *got = kiln_tensor_data(y);
        size_t first = 0;
        const size_t bad =
            kiln_tensor_element_count(y) == (int64_t)ny ? tmb_count_off(got, want, scale, ny, atol, rtol, &first) : 0;
        CHECK_MSG(bad == 0, "%s, run %d: %zu of %zu outputs differ, first at %zu: %.9g, want %.9g (scale %g)", ctx, run,
                  bad, ny, first, bad ? got[first] : 0.0, bad ? want[first] : 0.0,
                  bad ? (scale ? scale[first] : fabs(want[first])) : 0.0);
        kiln_tensor_destroy(y);
    }
}

/* A session of the serialised model (data, size) on the CPU with `threads` intra-op threads (0:
 * the default, one a core) at optimisation level `level` (3: the default), no cache; NULL (the
 * test failed) where it was refused. */
static inline kiln_session *tmb_session(const unsigned char *data, size_t size, int threads, int level) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_intra_op_threads(o, threads);
    kiln_session_options_set_opt_level(o, level);
    kiln_session *s = NULL;
    CHECK_STATUS(kiln_session_create_from_memory(data, size, NULL, o, &s), KILN_OK);
    kiln_session_options_destroy(o);
    return s;
}

typedef struct tmb {
    kn_model *m;
    kn_graph *g;
    uint32_t seed;
    int last; /* the node tmb_op added last: the one tmb_op_attr and its kin set */
} tmb;

/* A model that imports the default domain alone, at `opset`; graph "test", constants' seed 12345. */
static inline void tmb_init_onnx(tmb *b, int opset) {
    memset(b, 0, sizeof *b);
    b->seed = 12345;
    kn_model_new(&b->m);
    b->m->ir_version = 8;
    b->m->n_opsets = 1;
    b->m->opsets = kn_arena_alloc(&b->m->arena, sizeof(kn_opset_import));
    b->m->opsets[0].domain = "";
    b->m->opsets[0].version = opset;
    kn_graph_new(b->m, NULL, "test", &b->g);
    b->m->graph = b->g;
}

/* Adds an import of domain kiln at version 1 (kiln's fused operators) after the model's others. */
static inline void tmb_import_kiln(tmb *b) {
    kn_opset_import *ops = kn_arena_alloc(&b->m->arena, sizeof(kn_opset_import) * (size_t)(b->m->n_opsets + 1));
    memcpy(ops, b->m->opsets, sizeof(kn_opset_import) * (size_t)b->m->n_opsets);
    ops[b->m->n_opsets].domain = "kiln";
    ops[b->m->n_opsets].version = 1;
    b->m->opsets = ops;
    b->m->n_opsets++;
}

/* tmb_init_onnx, and domain kiln imported too. */
static inline void tmb_init(tmb *b, int opset) {
    tmb_init_onnx(b, opset);
    tmb_import_kiln(b);
    b->m->producer_name = "kiln-test";
}

static inline void tmb_push(int **arr, int *n, int v) {
    *arr = realloc(*arr, sizeof(int) * (size_t)(*n + 1));
    (*arr)[(*n)++] = v;
}

/* A deterministic value in [-1, 1). */
static inline float tmb_rand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* A float tensor of shape dims holding mul * tmb_rand(seed) / div in turn (1 for either: exactly
 * tmb_rand's values, or their product or quotient); NULL, the test failed, where it was refused. */
static inline kiln_tensor *tmb_random_tensor(const int64_t *dims, int rank, uint32_t *seed, float mul, float div) {
    kiln_tensor *t = NULL;
    CHECK_STATUS(kiln_tensor_create(KILN_DTYPE_FLOAT, dims, rank, &t), KILN_OK);
    float *p = t ? kiln_tensor_data(t) : NULL;
    for (int64_t i = 0; p && i < kiln_tensor_element_count(t); i++) p[i] = mul * tmb_rand(seed) / div;
    return t;
}

/* The inputs of a convolution test's run: x, then w where the weights are fed (w_fed), then z
 * where given (a residual); returns their count. */
static inline size_t tmb_conv_feeds(kiln_tensor *x, kiln_tensor *w, bool w_fed, kiln_tensor *z, const char **names,
                                    kiln_tensor **ins) {
    size_t n = 0;
    names[n] = "x", ins[n++] = x;
    if (w_fed) names[n] = "w", ins[n++] = w;
    if (z) names[n] = "z", ins[n++] = z;
    return n;
}

/* A graph input; dims -1 with a symbol name in `symbols` (may be NULL) for a symbolic dim. */
static inline int tmb_input(tmb *b, const char *name, kiln_dtype dt, int rank, const int64_t *dims,
                            const char *const *symbols) {
    int v = kn_graph_add_value(b->g, name);
    kn_type_set_tensor(&b->g->values[v].type, dt, rank, dims);
    for (int d = 0; symbols && d < rank; d++)
        if (symbols[d]) b->g->values[v].type.dims[d].symbol = kn_arena_strdup(&b->m->arena, symbols[d]);
    b->g->values[v].is_graph_input = true;
    tmb_push(&b->g->inputs, &b->g->n_inputs, v);
    return v;
}

static inline int tmb_const_tensor(tmb *b, const char *name, kn_tensor *t) {
    int v = kn_graph_add_value(b->g, name);
    b->g->values[v].constant = t;
    kn_model_own_tensor(b->m, t);
    kn_type_set_tensor(&b->g->values[v].type, t->dtype, t->rank, t->dims);
    return v;
}

/* A float constant of random values times scale. */
static inline int tmb_const(tmb *b, const char *name, int rank, const int64_t *dims, float scale) {
    kn_tensor *t;
    kn_tensor_new(KILN_DTYPE_FLOAT, rank, dims, &t);
    float *p = t->data;
    for (int64_t i = 0; i < kn_tensor_count(t); i++) p[i] = scale * tmb_rand(&b->seed);
    return tmb_const_tensor(b, name, t);
}

/* An int64 constant of n values (rank 0 when rank0, else [n]). */
static inline int tmb_const_i64(tmb *b, const char *name, const int64_t *values, int n, bool rank0) {
    kn_tensor *t;
    int64_t d[1] = {n};
    kn_tensor_new(KILN_DTYPE_INT64, rank0 ? 0 : 1, d, &t);
    memcpy(t->data, values, sizeof(int64_t) * (size_t)n);
    return tmb_const_tensor(b, name, t);
}

static inline int tmb_value(tmb *b, const char *name) { return kn_graph_add_value(b->g, name); }

static inline int tmb_node(tmb *b, const char *op, const int *in, int nin, int out) {
    return kn_graph_add_node(b->g, NULL, op, "", in, nin, &out, 1);
}

/* A node of another domain ("kiln" for kiln's fused operators). */
static inline int tmb_node_in(tmb *b, const char *op, const char *domain, const int *in, int nin, int out) {
    return kn_graph_add_node(b->g, NULL, op, domain, in, nin, &out, 1);
}

static inline kn_attr *tmb_attr(tmb *b, int node, const char *name, kn_attr_type type) {
    kn_node *n = &b->g->nodes[node];
    kn_attr *a = kn_arena_alloc(&b->m->arena, sizeof(kn_attr) * (size_t)(n->n_attrs + 1));
    if (n->n_attrs) memcpy(a, n->attrs, sizeof(kn_attr) * (size_t)n->n_attrs);
    n->attrs = a;
    kn_attr *r = &a[n->n_attrs++];
    memset(r, 0, sizeof *r);
    r->name = kn_arena_strdup(&b->m->arena, name);
    r->type = type;
    return r;
}
static inline void tmb_int(tmb *b, int node, const char *name, int64_t v) { tmb_attr(b, node, name, KN_ATTR_INT)->i = v; }
static inline void tmb_float(tmb *b, int node, const char *name, float v) { tmb_attr(b, node, name, KN_ATTR_FLOAT)->f = v; }
static inline void tmb_str(tmb *b, int node, const char *name, const char *v) {
    kn_attr *a = tmb_attr(b, node, name, KN_ATTR_STRING);
    a->s = kn_arena_strdup(&b->m->arena, v);
    a->s_len = strlen(v);
}
static inline void tmb_ints(tmb *b, int node, const char *name, const int64_t *v, int n) {
    kn_attr *a = tmb_attr(b, node, name, KN_ATTR_INTS);
    a->ints = kn_arena_alloc(&b->m->arena, sizeof(int64_t) * (size_t)n);
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
    a->n = n;
}

/* A 2-D convolution's attributes: a k x k kernel at stride s, p padding on every side, group */
static inline void tmb_conv2d(tmb *b, int node, int64_t k, int64_t s, int64_t p, int64_t group) {
    tmb_ints(b, node, "kernel_shape", (int64_t[]){k, k}, 2);
    tmb_ints(b, node, "strides", (int64_t[]){s, s}, 2);
    tmb_ints(b, node, "pads", (int64_t[]){p, p, p, p}, 4);
    tmb_int(b, node, "group", group);
}

static inline void tmb_output(tmb *b, int v) {
    tmb_push(&b->g->outputs, &b->g->n_outputs, v);
    b->g->values[v].is_graph_output = true;
}

/* ------------------------------------------------ nodes named by their one output (the optimiser tests)
 * tmb_op adds a node and its output value under one name; the attribute setters below act on that
 * last node. The constants draw on tmb_rand_ansi, the generator these tests were written with. */

/* A deterministic value in [-1, 1) of the C standard's example generator. */
static inline float tmb_rand_ansi(uint32_t *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f;
}

/* An internal float tensor of shape dims holding tmb_rand_ansi(seed) * scale in turn (the RNN
 * kernels' tests: inputs, weights, biases); NULL where it could not be made. */
static inline kn_tensor *tmb_rand_kn(int rank, const int64_t *dims, uint32_t *seed, float scale) {
    kn_tensor *t = NULL;
    if (kn_tensor_new(KILN_DTYPE_FLOAT, rank, dims, &t) != KILN_OK) return NULL;
    float *p = t->data;
    for (int64_t i = 0; i < kn_tensor_count(t); i++) p[i] = tmb_rand_ansi(seed) * scale;
    return t;
}

/* A constant of type dt (float, double, float16, an integer type) of random values in [lo, hi). */
static inline int tmb_const_range(tmb *b, const char *name, kiln_dtype dt, int rank, const int64_t *dims, float lo,
                                  float hi) {
    kn_tensor *t = NULL;
    kn_tensor_new(dt, rank, dims, &t);
    for (int64_t i = 0; i < kn_tensor_count(t); i++)
        kn_tensor_set_f64(t, i, lo + (hi - lo) * (tmb_rand_ansi(&b->seed) + 1) / 2);
    return tmb_const_tensor(b, name, t);
}

/* A rank-0 constant of type dt holding val. */
static inline int tmb_scalar(tmb *b, const char *name, kiln_dtype dt, double val) {
    kn_tensor *t = NULL;
    kn_tensor_new(dt, 0, NULL, &t);
    kn_tensor_set_f64(t, 0, val);
    return tmb_const_tensor(b, name, t);
}

/* A node of the default domain (at the model's opset) with n inputs and one output, both named
 * out; returns the output value, and the node is b->last. */
static inline int tmb_op(tmb *b, const char *op, const int *ins, int n, const char *out) {
    int v = kn_graph_add_value(b->g, out);
    b->last = kn_graph_add_node(b->g, out, op, "", ins, n, &v, 1);
    b->g->nodes[b->last].opset = (int)b->m->opsets[0].version;
    return v;
}

static inline kn_attr *tmb_op_attr(tmb *b, const char *name, kn_attr_type type) { return tmb_attr(b, b->last, name, type); }
static inline void tmb_op_int(tmb *b, const char *name, int64_t v) { tmb_int(b, b->last, name, v); }
static inline void tmb_op_float(tmb *b, const char *name, float v) { tmb_float(b, b->last, name, v); }
static inline void tmb_op_ints(tmb *b, const char *name, const int64_t *v, int n) { tmb_ints(b, b->last, name, v, n); }

/* A convolution test's epilogue on value cur: + z as Add "a" (z < 0: none), then act 1 Relu, 2
 * Clip to [-0.25, 0.5], 3 SiLU (Sigmoid "sg" times cur), 4 HardSwish, as "r" (0: none); returns
 * the last value. */
static inline int tmb_conv_epilogue(tmb *b, int cur, int z, int act) {
    if (z >= 0) {
        int a = tmb_value(b, "a");
        tmb_node(b, "Add", (int[]){cur, z}, 2, a);
        cur = a;
    }
    if (act == 1) {
        int r = tmb_value(b, "r");
        tmb_node(b, "Relu", (int[]){cur}, 1, r);
        cur = r;
    } else if (act == 2) {
        int r = tmb_value(b, "r");
        int lo = tmb_scalar(b, "lo", KILN_DTYPE_FLOAT, -0.25f), hi = tmb_scalar(b, "hi", KILN_DTYPE_FLOAT, 0.5f);
        tmb_node(b, "Clip", (int[]){cur, lo, hi}, 3, r);
        cur = r;
    } else if (act == 3) {
        int sg = tmb_value(b, "sg"), r = tmb_value(b, "r");
        tmb_node(b, "Sigmoid", (int[]){cur}, 1, sg);
        tmb_node(b, "Mul", (int[]){cur, sg}, 2, r);
        cur = r;
    } else if (act == 4) {
        int r = tmb_value(b, "r");
        tmb_node(b, "HardSwish", (int[]){cur}, 1, r);
        cur = r;
    }
    return cur;
}

/* Serialises and frees the builder's model (NULL on failure, which is recorded). */
static inline unsigned char *tmb_finish(tmb *b, size_t *size) {
    unsigned char *data = NULL;
    kn_graph_recount(b->g);
    kiln_status st = kn_onnx_write_memory(b->m, &data, size);
    CHECK_MSG(st == KILN_OK, "writing the test model: %s", kiln_last_error());
    kn_model_free(b->m);
    b->m = NULL;
    return data;
}

/* A convolution as the tests describe it: [N, C, H, W] input, M output channels in G groups,
 * window KH x KW, strides, dilations, pads top, left, bottom, right. */
typedef struct tmb_conv_geom {
    int64_t N, C, H, W, M, G, KH, KW, sh, sw, dh, dw;
    int64_t pads[4];
} tmb_conv_geom;

/* A Conv model over g (rank 3 where oned: only W, KW and the row's stride, dilation and pads count)
 * with weights a graph input or a constant (cloned into consts[0]), a constant bias (consts[1]),
 * and tmb_conv_epilogue's residual z [N, M, OH, OW] and activation act. */
static inline unsigned char *tmb_conv_model(const tmb_conv_geom *g, bool oned, bool bias, bool w_input, bool res,
                                            int act, int64_t OH, int64_t OW, kiln_tensor **consts, size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    const int64_t Cg = g->C / g->G;
    const int r = oned ? 3 : 4;
    const int64_t xd[4] = {g->N, g->C, g->H, g->W}, xd1[3] = {g->N, g->C, g->W};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, r, oned ? xd1 : xd, NULL);
    const int64_t wd[4] = {g->M, Cg, g->KH, g->KW}, wd1[3] = {g->M, Cg, g->KW};
    int w;
    if (w_input) {
        w = tmb_input(&b, "w", KILN_DTYPE_FLOAT, r, oned ? wd1 : wd, NULL);
    } else {
        w = tmb_const(&b, "w", r, oned ? wd1 : wd, 1.0f / sqrtf((float)(Cg * g->KH * g->KW)));
        kn_tensor_clone(b.g->values[w].constant, &consts[0]);
    }
    const int64_t zd[4] = {g->N, g->M, OH, OW}, zd1[3] = {g->N, g->M, OW};
    int z = res ? tmb_input(&b, "z", KILN_DTYPE_FLOAT, r, oned ? zd1 : zd, NULL) : -1;
    int bi = bias ? tmb_const(&b, "b", 1, (int64_t[]){g->M}, 0.5f) : -1;
    if (bias) kn_tensor_clone(b.g->values[bi].constant, &consts[1]);
    int y = tmb_value(&b, "y");
    int node = tmb_node(&b, "Conv", (int[]){x, w, bi}, bias ? 3 : 2, y);
    if (oned) {
        tmb_ints(&b, node, "kernel_shape", (int64_t[]){g->KW}, 1);
        tmb_ints(&b, node, "strides", (int64_t[]){g->sw}, 1);
        tmb_ints(&b, node, "dilations", (int64_t[]){g->dw}, 1);
        tmb_ints(&b, node, "pads", (int64_t[]){g->pads[1], g->pads[3]}, 2);
    } else {
        tmb_ints(&b, node, "kernel_shape", (int64_t[]){g->KH, g->KW}, 2);
        tmb_ints(&b, node, "strides", (int64_t[]){g->sh, g->sw}, 2);
        tmb_ints(&b, node, "dilations", (int64_t[]){g->dh, g->dw}, 2);
        tmb_ints(&b, node, "pads", (int64_t[]){g->pads[0], g->pads[1], g->pads[2], g->pads[3]}, 4);
    }
    if (g->G > 1) tmb_int(&b, node, "group", g->G);
    tmb_output(&b, tmb_conv_epilogue(&b, y, z, act));
    return tmb_finish(&b, size);
}

/* The definition in double of Conv (+ bias) (+ z) then tmb_conv_epilogue's act, into want
 * [N, M, OH, OW] (bias, z may be NULL); scale: sum |x w| + |bias| + |z| per output, for an error
 * bound relative to the terms' size. */
static inline void tmb_conv_reference(const tmb_conv_geom *g, int act, const float *x, const float *w,
                                      const float *bias, const float *z, int64_t OH, int64_t OW, double *want,
                                      double *scale) {
    const int64_t Cg = g->C / g->G, Mg = g->M / g->G;
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t m = 0; m < g->M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double acc = bias ? bias[m] : 0.0, sc = bias ? fabs(bias[m]) : 0.0;
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t kh = 0; kh < g->KH; kh++)
                            for (int64_t kw = 0; kw < g->KW; kw++) {
                                const int64_t ih = oh * g->sh - g->pads[0] + kh * g->dh;
                                const int64_t iw = ow * g->sw - g->pads[1] + kw * g->dw;
                                if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W) continue;
                                const double p = (double)x[((n * g->C + m / Mg * Cg + c) * g->H + ih) * g->W + iw] *
                                                 w[((m * Cg + c) * g->KH + kh) * g->KW + kw];
                                acc += p;
                                sc += fabs(p);
                            }
                    const size_t i = (size_t)(((n * g->M + m) * OH + oh) * OW + ow);
                    if (z) acc += z[i], sc += fabs(z[i]);
                    if (act == 1) acc = acc < 0 ? 0 : acc;
                    if (act == 2) acc = acc < -0.25 ? -0.25 : acc > 0.5 ? 0.5 : acc;
                    if (act == 3) acc = acc / (1.0 + exp(-acc));
                    if (act == 4) acc = acc * fmin(1.0, fmax(0.0, acc / 6.0 + 0.5));
                    want[i] = acc;
                    scale[i] = sc;
                }
}

/* ------------------------------------------------ one-node models run on one input "x" */

/* An attribute as a row of a test's table: a string (s given), a float (is_float), ints (n_ints
 * > 0) or else the int i. */
typedef struct tmb_attr_spec {
    const char *name;
    int64_t i;
    bool is_float;
    float f;
    const int64_t *ints;
    int n_ints;
    const char *s;
} tmb_attr_spec;

static inline void tmb_attrs(tmb *b, int node, const tmb_attr_spec *a, int n) {
    for (int k = 0; k < n; k++) {
        if (a[k].s) tmb_str(b, node, a[k].name, a[k].s);
        else if (a[k].is_float) tmb_float(b, node, a[k].name, a[k].f);
        else if (a[k].n_ints) tmb_ints(b, node, a[k].name, a[k].ints, a[k].n_ints);
        else tmb_int(b, node, a[k].name, a[k].i);
    }
}

/* A node of the default domain with nin inputs and n_out (1 or 2) outputs y0, y1, the graph's
 * outputs; returns the node. */
static inline int tmb_node_outputs(tmb *b, const char *op, const int *in, int nin, int n_out) {
    int outs[2] = {tmb_value(b, "y0"), n_out > 1 ? tmb_value(b, "y1") : -1};
    int node = kn_graph_add_node(b->g, NULL, op, "", in, nin, outs, n_out);
    for (int o = 0; o < n_out; o++) tmb_output(b, outs[o]);
    return node;
}

/* A tensor of type dt and shape dims holding a copy of the values at v (NULL: the test failed). */
static inline kiln_tensor *tmb_tensor_of(kiln_dtype dt, const int64_t *dims, int rank, const void *v) {
    kiln_tensor *t = NULL;
    CHECK_STATUS(kiln_tensor_create(dt, dims, rank, &t), KILN_OK);
    if (t) memcpy(kiln_tensor_data(t), v, kiln_tensor_bytes(t));
    return t;
}

/* Serialises the builder's model (freeing it), opens it at level 3 with `threads` threads and runs
 * it once on its graph input "x" (type dt, shape dims, the values xv); its n_out outputs go to y
 * (the caller destroys them). False, with the failure recorded (op names the model), where any
 * step failed. */
static inline bool tmb_run_x(tmb *b, const char *op, kiln_dtype dt, int rank, const int64_t *dims, const void *xv,
                             int n_out, int threads, kiln_tensor **y) {
    size_t size;
    unsigned char *data = tmb_finish(b, &size);
    if (!data) return false;
    kiln_session *s = tmb_session(data, size, threads, 3);
    free(data);
    if (!s) return false;
    kiln_tensor *x = tmb_tensor_of(dt, dims, rank, xv);
    const char *names[1] = {"x"};
    for (int o = 0; o < n_out; o++) y[o] = NULL;
    kiln_status st = kiln_session_run(s, names, &x, 1, NULL, n_out, y);
    CHECK_MSG(st == KILN_OK, "%s run: %s", op, kiln_last_error());
    kiln_tensor_destroy(x);
    kiln_session_destroy(s);
    return st == KILN_OK;
}

#endif

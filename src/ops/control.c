/* Control flow (If, Loop, Scan), sequences and optionals: schemas and shape inference. */
#include "ops/control.h"
#include "ops/op.h"

#include <string.h>

static const kn_graph *graph_attr(const kn_node *n, const char *name) {
    const kn_attr *a = kn_node_attr(n, name);
    return a && a->type == KN_ATTR_GRAPH ? a->g : NULL;
}

/* Joins two types: what both agree on stays known. */
static kn_type join_types(const kn_type *a, const kn_type *b) {
    kn_type r = *a;
    r.n_shape_value = -1;
    if (a->kind != b->kind || a->dtype != b->dtype) {
        if (a->dtype != b->dtype) r.dtype = KILN_DTYPE_UNDEFINED;
    }
    if (a->rank != b->rank) {
        r.rank = -1;
        return r;
    }
    for (int i = 0; i < r.rank; i++)
        if (a->dims[i].value != b->dims[i].value ||
            (a->dims[i].value < 0 && (!a->dims[i].symbol || !b->dims[i].symbol ||
                                      strcmp(a->dims[i].symbol, b->dims[i].symbol))))
            r.dims[i] = (kn_dim){-1, NULL};
    return r;
}

/* A body input's type, when the model left it untyped. */
static void type_input(kn_graph *body, int i, const kn_type *t) {
    if (!body || i >= body->n_inputs || !t) return;
    kn_type *bt = &body->values[body->inputs[i]].type;
    if (bt->kind != KN_TYPE_UNKNOWN) {
        if (bt->kind == t->kind && bt->dtype == KILN_DTYPE_UNDEFINED) bt->dtype = t->dtype;
        return;
    }
    *bt = *t;
    bt->n_shape_value = -1;
}

void kn_control_type_body_inputs(kn_node *n, const kn_type *const *in, int n_in) {
    if (*n->domain) return;
    const kn_attr *a = kn_node_attr(n, "body");
    kn_graph *body = a && a->type == KN_ATTR_GRAPH ? a->g : NULL;
    if (!body) return;
    if (!strcmp(n->op_type, "Loop")) {
        kn_type t;
        kn_type_init(&t);
        kn_type_set_tensor(&t, KILN_DTYPE_INT64, 0, NULL);
        type_input(body, 0, &t);
        kn_type_set_tensor(&t, KILN_DTYPE_BOOL, 0, NULL);
        type_input(body, 1, &t);
        for (int i = 2; i < n_in; i++) {
            if (!in[i] || in[i]->kind == KN_TYPE_UNKNOWN) continue;
            t = *in[i];
            if (t.kind == KN_TYPE_TENSOR) t.rank = -1; /* a carried value may change its shape */
            type_input(body, i, &t);
        }
    } else if (!strcmp(n->op_type, "Scan") && n->opset >= 9) {
        int m = (int)kn_attr_int(n, "num_scan_inputs", -1), n_state = n_in - m, n_axes = 0;
        const int64_t *axes = kn_attr_ints(n, "scan_input_axes", &n_axes);
        if (m < 1 || n_state < 0) return;
        for (int i = 0; i < n_in; i++) {
            if (!in[i] || in[i]->kind != KN_TYPE_TENSOR) continue;
            kn_type t = *in[i];
            if (i < n_state) {
                t.rank = -1;
            } else if (t.rank >= 1) {
                int j = i - n_state;
                int64_t axis = j < n_axes ? axes[j] : 0;
                if (axis < 0) axis += t.rank;
                if (axis < 0 || axis >= t.rank) continue;
                for (int d = (int)axis; d + 1 < t.rank; d++) t.dims[d] = t.dims[d + 1];
                t.rank--;
            }
            type_input(body, i, &t);
        }
    }
}

static kiln_status infer_if(kn_infer_ctx *c) {
    const kn_graph *t = graph_attr(c->node, "then_branch"), *e = graph_attr(c->node, "else_branch");
    if (!t || !e) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "then_branch and else_branch graphs are required");
    if (t->n_outputs != c->n_outputs || e->n_outputs != c->n_outputs)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "the branches give %d and %d outputs; the node has %d",
                              t->n_outputs, e->n_outputs, c->n_outputs);
    for (int o = 0; o < c->n_outputs; o++) {
        const kn_type *tt = &t->values[t->outputs[o]].type, *et = &e->values[e->outputs[o]].type;
        c->out[o] = join_types(tt, et);
        /* a known condition (at run time, or folded from shapes): the taken branch's element type
         * without a shape, so the executor does not allocate what the kernel hands over */
        if (c->in_value[0]) {
            if (c->in_value[0]->kind != KN_VALUE_TENSOR || kn_tensor_count(c->in_value[0]) != 1 ||
                c->in_value[0]->device != KN_DEVICE_HOST) {
                c->out[o].kind = KN_TYPE_UNKNOWN;
                continue;
            }
            c->out[o] = *(kn_tensor_get_i64(c->in_value[0], 0) ? tt : et);
            c->out[o].n_shape_value = -1;
            c->out[o].rank = -1;
            if (c->out[o].kind == KN_TYPE_TENSOR && c->out[o].dtype == KILN_DTYPE_UNDEFINED)
                c->out[o].kind = KN_TYPE_UNKNOWN;
        }
    }
    return KILN_OK;
}

static kiln_status infer_loop(kn_infer_ctx *c) {
    const kn_graph *body = graph_attr(c->node, "body");
    if (!body) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "the body graph is required");
    int n_carried = c->n_inputs - 2;
    if (n_carried < 0 || body->n_inputs != n_carried + 2 || body->n_outputs < n_carried + 1)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL,
                              "the body takes %d inputs and gives %d outputs; with %d loop-carried values it must take %d and give at least %d",
                              body->n_inputs, body->n_outputs, n_carried, n_carried + 2, n_carried + 1);
    if (c->n_outputs > body->n_outputs - 1)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "the node has %d outputs; the body gives only %d values",
                              c->n_outputs, body->n_outputs - 1);
    /* static types only; at run time the kernel allocates every output (shapes may change per iteration) */
    int runtime = 1;
    for (int i = 0; i < c->n_inputs; i++) runtime &= !c->in[i] || c->in_value[i] != NULL;
    if (runtime) return KILN_OK;
    for (int o = 0; o < c->n_outputs; o++) {
        const kn_type *bt = &body->values[body->outputs[o + 1]].type;
        if (o < n_carried) {
            c->out[o] = c->in[o + 2] ? join_types(c->in[o + 2], bt) : *bt;
        } else {
            kn_type t = *bt;
            t.n_shape_value = -1;
            if (t.rank >= 0 && t.rank < KILN_MAX_RANK) {
                memmove(&t.dims[1], &t.dims[0], sizeof(kn_dim) * (size_t)t.rank);
                t.dims[0] = (kn_dim){-1, NULL};
                t.rank++;
            } else {
                t.rank = -1;
            }
            c->out[o] = t;
        }
    }
    return KILN_OK;
}

static kiln_status infer_scan(kn_infer_ctx *c) {
    const kn_graph *body = graph_attr(c->node, "body");
    if (!body) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "the body graph is required");
    int64_t m = kn_attr_int(c->node, "num_scan_inputs", -1);
    int n_state = c->n_inputs - (int)m;
    if (m < 1 || n_state < 0 || body->n_inputs != c->n_inputs || body->n_outputs != c->n_outputs)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL,
                              "num_scan_inputs=%lld with %d inputs; the body takes %d inputs and gives %d outputs, the node %d",
                              (long long)m, c->n_inputs, body->n_inputs, body->n_outputs, c->n_outputs);
    int runtime = 1;
    for (int i = 0; i < c->n_inputs; i++) runtime &= !c->in[i] || c->in_value[i] != NULL;
    if (runtime) return KILN_OK;
    for (int o = 0; o < c->n_outputs; o++) {
        const kn_type *bt = &body->values[body->outputs[o]].type;
        kn_type t = *bt;
        t.n_shape_value = -1;
        if (o >= n_state) { /* scan outputs gain the iteration axis */
            if (t.rank >= 0 && t.rank < KILN_MAX_RANK) {
                memmove(&t.dims[1], &t.dims[0], sizeof(kn_dim) * (size_t)t.rank);
                t.dims[0] = (kn_dim){-1, NULL};
                t.rank++;
            } else {
                t.rank = -1;
            }
        }
        c->out[o] = t;
    }
    return KILN_OK;
}

/* Scan before opset 9 (leading batch axis, sequence_lens first): element types only; the kernel
 * allocates its outputs. */
static kiln_status infer_scan8(kn_infer_ctx *c) {
    const kn_graph *body = graph_attr(c->node, "body");
    if (!body || body->n_inputs != c->n_inputs - 1 || body->n_outputs != c->n_outputs)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "the body must take %d inputs and give %d outputs",
                              c->n_inputs - 1, c->n_outputs);
    for (int o = 0; o < c->n_outputs; o++) {
        kn_type_init(&c->out[o]);
        c->out[o].kind = KN_TYPE_TENSOR;
        c->out[o].dtype = body->values[body->outputs[o]].type.dtype;
    }
    return KILN_OK;
}

static void set_sequence(kn_infer_ctx *c, int o, kiln_dtype dtype) {
    kn_type_init(&c->out[o]);
    c->out[o].kind = KN_TYPE_SEQUENCE;
    c->out[o].dtype = dtype;
}

static kiln_status infer_sequence_empty(kn_infer_ctx *c) {
    set_sequence(c, 0, (kiln_dtype)kn_attr_int(c->node, "dtype", KILN_DTYPE_FLOAT));
    return KILN_OK;
}

static kiln_status infer_sequence_construct(kn_infer_ctx *c) {
    set_sequence(c, 0, c->in[0] ? c->in[0]->dtype : KILN_DTYPE_UNDEFINED);
    return KILN_OK;
}

static kiln_status infer_same_sequence(kn_infer_ctx *c) {
    set_sequence(c, 0, c->in[0] ? c->in[0]->dtype : KILN_DTYPE_UNDEFINED);
    return KILN_OK;
}

static kiln_status infer_sequence_at(kn_infer_ctx *c) {
    /* element shapes vary: the kernel allocates the output */
    kn_type_init(&c->out[0]);
    c->out[0].kind = KN_TYPE_TENSOR;
    c->out[0].dtype = c->in[0] ? c->in[0]->dtype : KILN_DTYPE_UNDEFINED;
    return KILN_OK;
}

static kiln_status infer_sequence_length(kn_infer_ctx *c) {
    kn_infer_set(c, 0, KILN_DTYPE_INT64, 0, NULL);
    return KILN_OK;
}

static kiln_status infer_concat_from_sequence(kn_infer_ctx *c) {
    kn_type_init(&c->out[0]);
    c->out[0].kind = KN_TYPE_TENSOR;
    c->out[0].dtype = c->in[0] ? c->in[0]->dtype : KILN_DTYPE_UNDEFINED;
    return KILN_OK;
}

static kiln_status infer_optional(kn_infer_ctx *c) {
    kn_type_init(&c->out[0]);
    c->out[0].kind = KN_TYPE_OPTIONAL;
    if (c->n_inputs > 0 && c->in[0]) {
        c->out[0].elem_kind = c->in[0]->kind == KN_TYPE_SEQUENCE ? KN_TYPE_SEQUENCE : KN_TYPE_TENSOR;
        c->out[0].dtype = c->in[0]->dtype;
    } else {
        const kn_attr *a = kn_node_attr(c->node, "type");
        if (a && a->type == KN_ATTR_TYPE_PROTO && a->type_protos) {
            c->out[0].elem_kind = a->type_protos[0].kind;
            c->out[0].dtype = a->type_protos[0].dtype;
        }
    }
    return KILN_OK;
}

static kiln_status infer_optional_has_element(kn_infer_ctx *c) {
    kn_infer_set(c, 0, KILN_DTYPE_BOOL, 0, NULL);
    return KILN_OK;
}

static kiln_status infer_optional_get_element(kn_infer_ctx *c) {
    kn_type_init(&c->out[0]);
    if (!c->in[0]) return KILN_OK;
    const kn_type *t = c->in[0];
    if (t->kind == KN_TYPE_OPTIONAL) {
        c->out[0].kind = t->elem_kind == KN_TYPE_SEQUENCE ? KN_TYPE_SEQUENCE : KN_TYPE_TENSOR;
        c->out[0].dtype = t->dtype;
        if (c->out[0].kind == KN_TYPE_TENSOR) c->out[0].rank = -1;
    } else {
        c->out[0] = *t;
        c->out[0].n_shape_value = -1;
        if (t->kind == KN_TYPE_TENSOR) c->out[0].kind = KN_TYPE_UNKNOWN; /* kernel copies */
    }
    return KILN_OK;
}

static kiln_status infer_sequence_map(kn_infer_ctx *c) {
    const kn_graph *body = graph_attr(c->node, "body");
    if (!body) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "the body graph is required");
    for (int o = 0; o < c->n_outputs; o++) {
        kiln_dtype dt = o < body->n_outputs ? body->values[body->outputs[o]].type.dtype : KILN_DTYPE_UNDEFINED;
        set_sequence(c, o, dt);
    }
    return KILN_OK;
}

const kn_op_schema kn_ops_control[] = {
    {"", "If", 1, 0, 1, 1, 1, -1, infer_if, KN_OP_HAS_SUBGRAPH},
    {"", "Loop", 1, 0, 2, -1, 1, -1, infer_loop, KN_OP_HAS_SUBGRAPH},
    {"", "Scan", 8, 8, 2, -1, 1, -1, infer_scan8, KN_OP_HAS_SUBGRAPH},
    {"", "Scan", 9, 0, 1, -1, 1, -1, infer_scan, KN_OP_HAS_SUBGRAPH},
    {"", "SequenceEmpty", 11, 0, 0, 0, 1, 1, infer_sequence_empty, 0},
    {"", "SequenceConstruct", 11, 0, 1, -1, 1, 1, infer_sequence_construct, 0},
    {"", "SequenceInsert", 11, 0, 2, 3, 1, 1, infer_same_sequence, 0},
    {"", "SequenceErase", 11, 0, 1, 2, 1, 1, infer_same_sequence, 0},
    {"", "SequenceAt", 11, 0, 2, 2, 1, 1, infer_sequence_at, 0},
    {"", "SequenceLength", 11, 0, 1, 1, 1, 1, infer_sequence_length, 0},
    {"", "SplitToSequence", 11, 0, 1, 2, 1, 1, infer_same_sequence, 0},
    {"", "ConcatFromSequence", 11, 0, 1, 1, 1, 1, infer_concat_from_sequence, 0},
    {"", "SequenceMap", 17, 0, 1, -1, 1, -1, infer_sequence_map, KN_OP_HAS_SUBGRAPH},
    {"", "Optional", 15, 0, 0, 1, 1, 1, infer_optional, 0},
    {"", "OptionalHasElement", 15, 0, 0, 1, 1, 1, infer_optional_has_element, 0},
    {"", "OptionalGetElement", 15, 0, 1, 1, 1, 1, infer_optional_get_element, 0},
    {0},
};

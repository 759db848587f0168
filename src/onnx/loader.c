/* ModelProto -> kn_model: graphs, nodes, attributes, value types, model-local functions.
 *
 * A graph is read in phases so that names resolve regardless of the order of the file's fields:
 * initializers and inputs first, then every node's outputs, then value_info types, then each
 * node's inputs and attributes (subgraphs are read at that point, when every name of the
 * enclosing graph exists), then the outputs; finally the nodes are sorted topologically.
 *
 * Model-local functions (ModelProto.functions) are expanded inline: a node that calls one becomes
 * the function's body, with its formal inputs/outputs bound to the node's values, internal values
 * renamed "<calling node>/<name>", and attributes that reference the caller's (ref_attr_name)
 * substituted. */
#include "onnx/loader.h"
#include "onnx/loader_internal.h"
#include "onnx/sniff.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define KN_MAX_FUNCTION_DEPTH 16
#define NOT_FOUND (-2)

/* ---- message descriptors (field names for messages) ---- */

static const char *const model_fields[] = {
    [1] = "ir_version",  [2] = "producer_name", [3] = "producer_version", [4] = "domain",
    [5] = "model_version", [6] = "doc_string",  [7] = "graph",            [8] = "opset_import",
    [14] = "metadata_props", [20] = "training_info", [25] = "functions",  [26] = "configuration",
};
static const kn_pb_desc desc_model = {"ModelProto", model_fields, 27};
static const char *const opset_fields[] = {[1] = "domain", [2] = "version"};
static const kn_pb_desc desc_opset = {"OperatorSetIdProto", opset_fields, 3};
static const char *const graph_fields[] = {
    [1] = "node",        [2] = "name",   [5] = "initializer", [10] = "doc_string",
    [11] = "input",      [12] = "output", [13] = "value_info", [14] = "quantization_annotation",
    [15] = "sparse_initializer", [16] = "metadata_props",
};
static const kn_pb_desc desc_graph = {"GraphProto", graph_fields, 17};
static const char *const node_fields[] = {
    [1] = "input",  [2] = "output",    [3] = "name",   [4] = "op_type",        [5] = "attribute",
    [6] = "doc_string", [7] = "domain", [8] = "overload", [9] = "metadata_props", [10] = "device_configurations",
};
static const kn_pb_desc desc_node = {"NodeProto", node_fields, 11};
static const char *const attr_fields[] = {
    [1] = "name",     [2] = "f",        [3] = "i",      [4] = "s",           [5] = "t",
    [6] = "g",        [7] = "floats",   [8] = "ints",   [9] = "strings",     [10] = "tensors",
    [11] = "graphs",  [13] = "doc_string", [14] = "tp", [15] = "type_protos", [20] = "type",
    [21] = "ref_attr_name", [22] = "sparse_tensor", [23] = "sparse_tensors",
};
static const kn_pb_desc desc_attr = {"AttributeProto", attr_fields, 24};
static const char *const vi_fields[] = {[1] = "name", [2] = "type", [3] = "doc_string", [4] = "metadata_props"};
const kn_pb_desc kn_desc_value_info = {"ValueInfoProto", vi_fields, 5};
static const char *const type_fields[] = {
    [1] = "tensor_type", [4] = "sequence_type", [5] = "map_type", [6] = "denotation",
    [8] = "sparse_tensor_type", [9] = "optional_type",
};
const kn_pb_desc kn_desc_type = {"TypeProto", type_fields, 10};
static const char *const ttensor_fields[] = {[1] = "elem_type", [2] = "shape"};
static const kn_pb_desc desc_ttensor = {"TypeProto.Tensor", ttensor_fields, 3};
static const char *const shape_fields[] = {[1] = "dim"};
static const kn_pb_desc desc_shape = {"TensorShapeProto", shape_fields, 2};
static const char *const dim_fields[] = {[1] = "dim_value", [2] = "dim_param", [3] = "denotation"};
static const kn_pb_desc desc_dim = {"TensorShapeProto.Dimension", dim_fields, 4};
static const char *const tseq_fields[] = {[1] = "elem_type"};
static const kn_pb_desc desc_tseq = {"TypeProto.Sequence", tseq_fields, 2};
static const kn_pb_desc desc_topt = {"TypeProto.Optional", tseq_fields, 2};
static const char *const tmap_fields[] = {[1] = "key_type", [2] = "value_type"};
static const kn_pb_desc desc_tmap = {"TypeProto.Map", tmap_fields, 3};
static const char *const fn_fields[] = {
    [1] = "name",        [4] = "input",        [5] = "output",          [6] = "attribute",
    [7] = "node",        [8] = "doc_string",   [9] = "opset_import",    [10] = "domain",
    [11] = "attribute_proto", [12] = "value_info", [13] = "overload",   [14] = "metadata_props",
};
static const kn_pb_desc desc_fn = {"FunctionProto", fn_fields, 15};

/* ---- small helpers ---- */

typedef struct kn_span {
    const char *p;
    size_t n;
} kn_span;

static int vec_reserve(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    if (need > (1 << 28)) return -1;
    int nc = *cap ? *cap * 2 : 8;
    while (nc < need) nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) return -1;
    *arr = p;
    *cap = nc;
    return 0;
}
#define VEC_PUSH(arr, n, cap, val)                                                                 \
    (vec_reserve((void **)&(arr), &(cap), (n) + 1, sizeof *(arr)) ? -1 : ((arr)[(n)++] = (val), 0))

static kiln_status span_of(const kn_pb *r, const kn_pb_field *f, kn_span *s) {
    const uint8_t *p;
    KN_TRY(kn_pb_bytes(r, f, &p, &s->n));
    s->p = (const char *)p;
    return KILN_OK;
}

static bool span_eq(kn_span a, const char *s) { return a.n == strlen(s) && (a.n == 0 || !memcmp(a.p, s, a.n)); }
static bool spans_eq(kn_span a, kn_span b) { return a.n == b.n && (a.n == 0 || !memcmp(a.p, b.p, a.n)); }
/* "ai.onnx" is the default domain's other name. */
static kn_span norm_domain(kn_span d) {
    if (span_eq(d, "ai.onnx")) d.n = 0;
    return d;
}
#define SPAN_ARG(s) (int)((s).n > 200 ? 200 : (s).n), (s).p ? (s).p : ""

/* ---- load context ---- */

typedef struct fn_def {
    kn_span name, domain, overload;
    kn_pb msg;
    int next; /* the next function with the same name, or -1 */
} fn_def;

typedef struct ctx {
    kn_load L;
    kn_model *m;
    kn_nmap symbols;
    fn_def *fns;
    int n_fns, cap_fns;
    int n_calls; /* function calls expanded, for naming unnamed calling nodes */
    kn_nmap fn_by_name;  /* function name -> first index in fns */
    kn_nmap opset_by_domain; /* domain -> version (clamped to int) */
    /* Nodes function expansion may still create: calls nest, so a small file could otherwise
     * expand exponentially. */
    size_t expand_budget;
    /* negative dim_values read in types so far: each is an unknown dimension (as onnx.checker
     * and ONNX Runtime take it), logged at debug level by the reader of the type */
    int negative_dims;
} ctx;

static const char *arena_span(ctx *c, kn_span s) { return kn_arena_strndup(&c->m->arena, s.p ? s.p : "", s.n); }

/* A graph being built (or a function body being expanded into a graph): names -> value ids. */
typedef struct scope {
    kn_graph *g;
    kn_nmap map;
    struct scope *parent; /* enclosing graph's scope; NULL at the top and for function bodies */
} scope;

/* Adds a value named `name` (arena string) to g; -1 on OOM. */
static int new_value(kn_graph *g, const char *name) {
    int id = kn_graph_add_value(g, "");
    if (id >= 0) g->values[id].name = name;
    return id;
}

/* Finds the value a name refers to in scope s, climbing to enclosing graphs; a value found
 * outside becomes an is_outer value of each graph in between. *out is NOT_FOUND when no graph
 * defines it, -1 for an omitted function input. */
static kiln_status resolve(ctx *c, scope *s, kn_span name, int *out) {
    kn_nmap_entry *e = kn_nmap_get(&s->map, name.p, name.n);
    if (e) {
        *out = e->val;
        return KILN_OK;
    }
    *out = NOT_FOUND;
    if (!s->parent) return KILN_OK;
    int pid;
    KN_TRY(resolve(c, s->parent, name, &pid));
    if (pid < 0) {
        *out = pid;
        return KILN_OK;
    }
    const kn_value *pv = &s->parent->g->values[pid];
    int id = new_value(s->g, pv->name);
    if (id < 0) return KN_OOM();
    kn_value *v = &s->g->values[id];
    v->is_outer = true;
    v->type = s->parent->g->values[pid].type;
    if (kn_nmap_put(&s->map, name.p, name.n, id)) return KN_OOM();
    *out = id;
    return KILN_OK;
}

/* ---- types ---- */

static kiln_status intern(ctx *c, kn_span s, const char **out) {
    kn_nmap_entry *e = kn_nmap_get(&c->symbols, s.p, s.n);
    if (e) {
        *out = e->key;
        return KILN_OK;
    }
    const char *k = arena_span(c, s);
    if (!k || kn_nmap_put(&c->symbols, k, s.n, 0)) return KN_OOM();
    *out = k;
    return KILN_OK;
}

static kiln_status parse_dim(ctx *c, kn_pb *r, kn_dim *d) {
    kn_pb_field f;
    int rc;
    d->value = -1;
    d->symbol = NULL;
    while ((rc = kn_pb_next(r, &f)) > 0) {
        if (f.num == 1) {
            int64_t v;
            KN_TRY(kn_pb_int64(r, &f, &v));
            if (v < 0) {
                /* exporters write -1 for a dimension they do not know; tensors' dims stay strict */
                c->negative_dims++;
                d->value = -1;
                d->symbol = NULL;
                continue;
            }
            d->value = v;
            d->symbol = NULL;
        } else if (f.num == 2) {
            kn_span s;
            KN_TRY(span_of(r, &f, &s));
            if (d->value < 0 && s.n) KN_TRY(intern(c, s, &d->symbol));
        }
    }
    return rc < 0 ? KILN_ERR_INVALID_MODEL : KILN_OK;
}

static kiln_status parse_tensor_type(ctx *c, kn_pb *r, kn_type *t) {
    kn_pb_field f;
    int rc;
    t->kind = KN_TYPE_TENSOR;
    while ((rc = kn_pb_next(r, &f)) > 0) {
        if (f.num == 1) {
            int64_t v;
            KN_TRY(kn_pb_int64(r, &f, &v));
            KN_TRY(kn_load_check_dtype(r, &f, v, true, "elem_type"));
            t->dtype = (kiln_dtype)v;
        } else if (f.num == 2) {
            kn_pb s, dr;
            kn_pb_field g;
            KN_TRY(kn_pb_sub(r, &f, &desc_shape, &s));
            t->rank = 0;
            while ((rc = kn_pb_next(&s, &g)) > 0) {
                if (g.num != 1) continue;
                if (t->rank >= KILN_MAX_RANK)
                    return kn_pb_error(&s, &g, KILN_ERR_UNSUPPORTED, "rank above the %d kiln supports", KILN_MAX_RANK);
                KN_TRY(kn_pb_sub(&s, &g, &desc_dim, &dr));
                KN_TRY(parse_dim(c, &dr, &t->dims[t->rank]));
                t->rank++;
            }
            if (rc < 0) return KILN_ERR_INVALID_MODEL;
        }
    }
    return rc < 0 ? KILN_ERR_INVALID_MODEL : KILN_OK;
}

/* The element type of a sequence/optional: the innermost tensor's dtype and shape. */
static kiln_status parse_elem_type(ctx *c, kn_pb *r, const kn_pb_desc *desc, const kn_pb_field *f, kn_type *e,
                                   const char *what) {
    kn_pb s, tr;
    kn_pb_field g;
    int rc;
    KN_TRY(kn_pb_sub(r, f, desc, &s));
    kn_type_init(e);
    while ((rc = kn_pb_next(&s, &g)) > 0) {
        if (g.num != 1) continue;
        KN_TRY(kn_pb_sub(&s, &g, &kn_desc_type, &tr));
        KN_TRY(kn_load_type(&c->L, &tr, e, what));
    }
    return rc < 0 ? KILN_ERR_INVALID_MODEL : KILN_OK;
}

static void copy_elem(kn_type *t, const kn_type *e) {
    t->dtype = e->dtype;
    t->rank = e->rank;
    memcpy(t->dims, e->dims, sizeof t->dims);
}

kiln_status kn_load_type(kn_load *L, kn_pb *r, kn_type *t, const char *what) {
    ctx *c = (ctx *)L; /* L is the first member of the loader's context */
    kn_pb_field f;
    kn_pb s;
    int rc;
    kn_type_init(t);
    while ((rc = kn_pb_next(r, &f)) > 0) {
        switch (f.num) {
        case 1:
        case 8: /* sparse tensors: described like dense ones; no operator takes them */
            KN_TRY(kn_pb_sub(r, &f, &desc_ttensor, &s));
            kn_type_init(t);
            KN_TRY(parse_tensor_type(c, &s, t));
            break;
        case 4:
        case 9: {
            kn_type e;
            KN_TRY(parse_elem_type(c, r, f.num == 4 ? &desc_tseq : &desc_topt, &f, &e, what));
            kn_type_init(t);
            t->kind = f.num == 4 ? KN_TYPE_SEQUENCE : KN_TYPE_OPTIONAL;
            if (f.num == 9) t->elem_kind = e.kind == KN_TYPE_OPTIONAL ? e.elem_kind : e.kind;
            copy_elem(t, &e);
            break;
        }
        case 5: {
            kn_pb_field g;
            kn_pb tr;
            KN_TRY(kn_pb_sub(r, &f, &desc_tmap, &s));
            kn_type_init(t);
            t->kind = KN_TYPE_MAP;
            while ((rc = kn_pb_next(&s, &g)) > 0) {
                if (g.num == 1) {
                    int64_t v;
                    KN_TRY(kn_pb_int64(&s, &g, &v));
                    KN_TRY(kn_load_check_dtype(&s, &g, v, true, "key_type"));
                } else if (g.num == 2) {
                    kn_type e;
                    KN_TRY(kn_pb_sub(&s, &g, &kn_desc_type, &tr));
                    KN_TRY(kn_load_type(L, &tr, &e, what));
                    copy_elem(t, &e);
                }
            }
            if (rc < 0) return KILN_ERR_INVALID_MODEL;
            break;
        }
        default: break;
        }
    }
    return rc < 0 ? KILN_ERR_INVALID_MODEL : KILN_OK;
}

/* ValueInfoProto: name and (possibly absent) type. */
static kiln_status parse_value_info(ctx *c, kn_pb *r, kn_span *name, kn_type *t) {
    kn_pb_field f;
    kn_pb s;
    int rc;
    bool have_type = false;
    kn_pb type_r;
    name->p = NULL;
    name->n = 0;
    kn_type_init(t);
    while ((rc = kn_pb_next(r, &f)) > 0) {
        if (f.num == 1) KN_TRY(span_of(r, &f, name));
        else if (f.num == 2) {
            KN_TRY(kn_pb_sub(r, &f, &kn_desc_type, &s));
            type_r = s;
            have_type = true;
        }
    }
    if (rc < 0) return KILN_ERR_INVALID_MODEL;
    if (have_type) {
        int negative = c->negative_dims;
        kiln_status st = kn_load_type(&c->L, &type_r, t, "");
        if (st != KILN_OK) return kn_load_prefix(st, "value '%.*s': ", SPAN_ARG(*name));
        if (c->negative_dims > negative)
            kn_log(KILN_LOG_DEBUG, "value '%.*s': a negative dim_value in its declared shape is taken as an unknown dimension",
                   SPAN_ARG(*name));
    }
    return KILN_OK;
}

/* ---- nodes ---- */

typedef struct pnode {
    kn_span name, op_type, domain, overload;
    int in0, n_in, out0, n_out, at0, n_at;
    size_t off;
} pnode;

/* Nodes of one graph or function body, read but not yet built. */
typedef struct nodebuf {
    pnode *nodes;
    int n, cap;
    kn_span *ins;
    int n_ins, cap_ins;
    kn_span *outs;
    int n_outs, cap_outs;
    int *out_ids; /* parallel to outs */
    kn_pb *attrs;
    int n_attrs, cap_attrs;
} nodebuf;

static void nodebuf_free(nodebuf *b) {
    free(b->nodes);
    free(b->ins);
    free(b->outs);
    free(b->out_ids);
    free(b->attrs);
    memset(b, 0, sizeof *b);
}

static kiln_status read_node(kn_pb *r, nodebuf *b, pnode *pn) {
    kn_pb_field f;
    int rc;
    memset(pn, 0, sizeof *pn);
    pn->off = r->pos;
    pn->in0 = b->n_ins;
    pn->out0 = b->n_outs;
    pn->at0 = b->n_attrs;
    while ((rc = kn_pb_next(r, &f)) > 0) {
        kn_span s;
        switch (f.num) {
        case 1:
            KN_TRY(span_of(r, &f, &s));
            if (VEC_PUSH(b->ins, b->n_ins, b->cap_ins, s)) return KN_OOM();
            break;
        case 2:
            KN_TRY(span_of(r, &f, &s));
            if (VEC_PUSH(b->outs, b->n_outs, b->cap_outs, s)) return KN_OOM();
            break;
        case 3: KN_TRY(span_of(r, &f, &pn->name)); break;
        case 4: KN_TRY(span_of(r, &f, &pn->op_type)); break;
        case 7: KN_TRY(span_of(r, &f, &pn->domain)); break;
        case 8: KN_TRY(span_of(r, &f, &pn->overload)); break;
        case 5: {
            kn_pb a;
            KN_TRY(kn_pb_sub(r, &f, &desc_attr, &a));
            if (VEC_PUSH(b->attrs, b->n_attrs, b->cap_attrs, a)) return KN_OOM();
            break;
        }
        default: break;
        }
    }
    if (rc < 0) return KILN_ERR_INVALID_MODEL;
    pn->n_in = b->n_ins - pn->in0;
    pn->n_out = b->n_outs - pn->out0;
    pn->n_at = b->n_attrs - pn->at0;
    pn->domain = norm_domain(pn->domain);
    if (!pn->op_type.n) return kn_error(KILN_ERR_INVALID_MODEL, "NodeProto at byte offset %zu has no op_type", pn->off);
    return KILN_OK;
}

static kiln_status read_nodes(const kn_pb *list, int n, nodebuf *b) {
    for (int i = 0; i < n; i++) {
        pnode pn;
        kn_pb r = list[i];
        KN_TRY(read_node(&r, b, &pn));
        if (VEC_PUSH(b->nodes, b->n, b->cap, pn)) return KN_OOM();
    }
    b->out_ids = malloc(sizeof(int) * (size_t)(b->n_outs ? b->n_outs : 1));
    return b->out_ids ? KILN_OK : KN_OOM();
}

static kiln_status parse_graph(ctx *c, kn_pb *r, kn_graph *g, scope *parent);

static const char *const attr_kind_names[] = {
    "UNDEFINED", "FLOAT", "INT", "STRING", "TENSOR", "GRAPH", "FLOATS", "INTS", "STRINGS", "TENSORS",
    "GRAPHS", "SPARSE_TENSOR", "SPARSE_TENSORS", "TYPE_PROTO", "TYPE_PROTOS",
};
/* AttributeProto field number -> the attribute type its value belongs to. */
static int kind_of_field(uint32_t num) {
    switch (num) {
    case 2: return KN_ATTR_FLOAT;
    case 3: return KN_ATTR_INT;
    case 4: return KN_ATTR_STRING;
    case 5: return KN_ATTR_TENSOR;
    case 6: return KN_ATTR_GRAPH;
    case 7: return KN_ATTR_FLOATS;
    case 8: return KN_ATTR_INTS;
    case 9: return KN_ATTR_STRINGS;
    case 10: return KN_ATTR_TENSORS;
    case 11: return KN_ATTR_GRAPHS;
    case 22: return KN_ATTR_SPARSE_TENSOR;
    case 23: return KN_ATTR_SPARSE_TENSORS;
    case 14: return KN_ATTR_TYPE_PROTO;
    case 15: return KN_ATTR_TYPE_PROTOS;
    default: return 0;
    }
}
static const char *const attr_field_of_kind[] = {"", "f", "i", "s", "t", "g", "floats", "ints", "strings",
                                                 "tensors", "graphs", "sparse_tensor", "sparse_tensors", "tp",
                                                 "type_protos"};

static kiln_status own_tensor(ctx *c, kn_tensor *t) {
    kiln_status st = kn_model_own_tensor(c->m, t);
    if (st != KILN_OK) kn_tensor_free(t);
    return st;
}

static kiln_status parse_subgraph(ctx *c, scope *s, kn_pb *r, const kn_pb_field *f, kn_graph **out) {
    kn_pb gr;
    kn_graph *g;
    KN_TRY(kn_pb_sub(r, f, &desc_graph, &gr));
    KN_TRY(kn_graph_new(c->m, s->g, "", &g));
    KN_TRY(parse_graph(c, &gr, g, s));
    *out = g;
    return KILN_OK;
}

static kiln_status attr_body(ctx *c, scope *s, kn_pb *ar, kn_attr *a) {
    kn_pb it = *ar;
    kn_pb_field f, last[16] = {{0}};
    size_t counts[16] = {0};
    unsigned present = 0;
    int64_t type = 0;
    bool have_type = false;
    kn_pb_field type_f = {0};
    kn_span name = {0}, ref = {0};
    bool have_ref = false;
    int rc;
    memset(a, 0, sizeof *a);
    while ((rc = kn_pb_next(&it, &f)) > 0) {
        int k = kind_of_field(f.num);
        switch (f.num) {
        case 1: KN_TRY(span_of(&it, &f, &name)); continue;
        case 20:
            KN_TRY(kn_pb_int64(&it, &f, &type));
            type_f = f;
            have_type = true;
            continue;
        case 21:
            KN_TRY(span_of(&it, &f, &ref));
            have_ref = true;
            continue;
        case 2: KN_TRY(kn_pb_want(&it, &f, KN_PB_I32)); break;
        case 3: KN_TRY(kn_pb_want(&it, &f, KN_PB_VARINT)); break;
        case 7: KN_TRY(kn_pb_count(&it, &f, KN_PB_I32, &counts[k])); break;
        case 8: KN_TRY(kn_pb_count(&it, &f, KN_PB_VARINT, &counts[k])); break;
        case 4: case 5: case 6: case 9: case 10: case 11: case 14: case 15: case 22: case 23:
            KN_TRY(kn_pb_want(&it, &f, KN_PB_LEN));
            counts[k]++;
            break;
        default: continue;
        }
        present |= 1u << k;
        last[k] = f;
    }
    if (rc < 0) return KILN_ERR_INVALID_MODEL;
    if (!name.n) return kn_error(KILN_ERR_INVALID_MODEL, "AttributeProto at byte offset %zu has no name", ar->pos);
    a->name = arena_span(c, name);
    if (!a->name) return KN_OOM();
    if (have_ref) {
        a->ref_attr_name = arena_span(c, ref);
        if (!a->ref_attr_name) return KN_OOM();
    }
    if (have_type && (type < KN_ATTR_FLOAT || type > KN_ATTR_TYPE_PROTOS))
        return kn_pb_error(&it, &type_f, KILN_ERR_INVALID_MODEL, "unknown attribute type %lld", (long long)type);
    if (!have_type || type == 0) {
        /* old models leave 'type' out: the one value field set says it */
        type = 0;
        for (int k = 1; k < 15; k++) {
            if (!(present & (1u << k))) continue;
            if (type)
                return kn_error(KILN_ERR_INVALID_MODEL, "has no type and sets both '%s' and '%s'",
                                attr_field_of_kind[type], attr_field_of_kind[k]);
            type = k;
        }
    } else {
        for (int k = 1; k < 15; k++)
            if ((present & (1u << k)) && k != type)
                return kn_error(KILN_ERR_INVALID_MODEL, "type is %s but it sets field '%s' (%s)",
                                attr_kind_names[type], attr_field_of_kind[k], attr_kind_names[k]);
    }
    a->type = (kn_attr_type)type;
    if (have_ref) return KILN_OK; /* a reference to the calling node's attribute: no value here */
    kn_arena *ar_ = &c->m->arena;
    const kn_pb_field *lf = &last[type];
    switch (type) {
    case KN_ATTR_FLOAT: {
        uint32_t bits = (uint32_t)lf->u;
        memcpy(&a->f, &bits, sizeof bits);
        return KILN_OK;
    }
    case KN_ATTR_INT:
        a->i = (int64_t)lf->u;
        return KILN_OK;
    case KN_ATTR_STRING:
        if (present & (1u << KN_ATTR_STRING)) {
            a->s_len = lf->len;
            a->s = kn_arena_strndup(ar_, (const char *)it.base + lf->off, lf->len);
        } else {
            a->s = kn_arena_strdup(ar_, "");
        }
        return a->s ? KILN_OK : KN_OOM();
    case KN_ATTR_TENSOR:
        if (!(present & (1u << KN_ATTR_TENSOR)))
            return kn_error(KILN_ERR_INVALID_MODEL, "type is TENSOR but it has no value (field 't' is missing)");
        {
            kn_pb tr;
            const uint8_t *nm;
            size_t nl;
            KN_TRY(kn_pb_sub(&it, lf, &kn_desc_tensor, &tr));
            KN_TRY(kn_load_tensor(&c->L, &tr, &a->t, &nm, &nl));
            KN_TRY(own_tensor(c, a->t));
        }
        return KILN_OK;
    case KN_ATTR_GRAPH:
        if (!(present & (1u << KN_ATTR_GRAPH)))
            return kn_error(KILN_ERR_INVALID_MODEL, "type is GRAPH but it has no value (field 'g' is missing)");
        return parse_subgraph(c, s, &it, lf, &a->g);
    case KN_ATTR_TYPE_PROTO:
        a->type_protos = kn_arena_alloc(ar_, sizeof(kn_type));
        if (!a->type_protos) return KN_OOM();
        kn_type_init(a->type_protos);
        a->n = 1;
        if (present & (1u << KN_ATTR_TYPE_PROTO)) {
            kn_pb tr;
            KN_TRY(kn_pb_sub(&it, lf, &kn_desc_type, &tr));
            KN_TRY(kn_load_type(&c->L, &tr, a->type_protos, a->name));
        }
        return KILN_OK;
    case KN_ATTR_SPARSE_TENSOR:
    case KN_ATTR_SPARSE_TENSORS:
        return kn_error(KILN_ERR_UNSUPPORTED, "sparse tensor attributes are not supported");
    case KN_ATTR_UNDEFINED: return KILN_OK; /* no type and no value: getters treat it as absent */
    default: break;
    }
    /* lists */
    size_t n = counts[type];
    if (n > (size_t)1 << 28) return kn_error(KILN_ERR_INVALID_MODEL, "list of %zu elements is too long", n);
    a->n = (int)n;
    size_t elem = type == KN_ATTR_FLOATS ? sizeof(float) : type == KN_ATTR_INTS ? sizeof(int64_t)
                : type == KN_ATTR_STRINGS ? sizeof(char *) : type == KN_ATTR_TENSORS ? sizeof(kn_tensor *)
                : type == KN_ATTR_GRAPHS ? sizeof(kn_graph *) : sizeof(kn_type);
    void *arr = kn_arena_alloc(ar_, elem * (n ? n : 1));
    if (!arr) return KN_OOM();
    size_t got = 0;
    it = *ar;
    while ((rc = kn_pb_next(&it, &f)) > 0) {
        if (kind_of_field(f.num) != type) continue;
        switch (type) {
        case KN_ATTR_FLOATS: KN_TRY(kn_pb_read_fixed32(&it, &f, arr, n, &got)); break;
        case KN_ATTR_INTS: KN_TRY(kn_pb_read_varints(&it, &f, arr, n, &got)); break;
        case KN_ATTR_STRINGS: {
            const char *str = kn_arena_strndup(ar_, (const char *)it.base + f.off, f.len);
            if (!str) return KN_OOM();
            ((const char **)arr)[got++] = str;
            break;
        }
        case KN_ATTR_TENSORS: {
            kn_pb tr;
            const uint8_t *nm;
            size_t nl;
            kn_tensor *t;
            KN_TRY(kn_pb_sub(&it, &f, &kn_desc_tensor, &tr));
            KN_TRY(kn_load_tensor(&c->L, &tr, &t, &nm, &nl));
            KN_TRY(own_tensor(c, t));
            ((kn_tensor **)arr)[got++] = t;
            break;
        }
        case KN_ATTR_GRAPHS: KN_TRY(parse_subgraph(c, s, &it, &f, &((kn_graph **)arr)[got++])); break;
        case KN_ATTR_TYPE_PROTOS: {
            kn_pb tr;
            KN_TRY(kn_pb_sub(&it, &f, &kn_desc_type, &tr));
            KN_TRY(kn_load_type(&c->L, &tr, &((kn_type *)arr)[got++], a->name));
            break;
        }
        default: break;
        }
    }
    if (rc < 0) return KILN_ERR_INVALID_MODEL;
    switch (type) {
    case KN_ATTR_FLOATS: a->floats = arr; break;
    case KN_ATTR_INTS: a->ints = arr; break;
    case KN_ATTR_STRINGS: a->strings = arr; break;
    case KN_ATTR_TENSORS: a->tensors = arr; break;
    case KN_ATTR_GRAPHS: a->graphs = arr; break;
    default: a->type_protos = arr; break;
    }
    return KILN_OK;
}

static kiln_status parse_attr(ctx *c, scope *s, kn_pb *ar, kn_attr *a) {
    kiln_status st = attr_body(c, s, ar, a);
    if (st == KILN_OK) return st;
    /* name the attribute (read again: the failure may have come before its name) */
    kn_pb it = *ar;
    kn_pb_field f;
    while (kn_pb_next(&it, &f) > 0)
        if (f.num == 1 && f.wire == KN_PB_LEN)
            return kn_load_prefix(st, "attribute '%.*s': ", (int)(f.len > 200 ? 200 : f.len),
                                   (const char *)it.base + f.off);
    return kn_load_prefix(st, "attribute at byte offset %zu: ", ar->pos);
}

/* A node that calls a model-local function, while its body is expanded. */
typedef struct fncall {
    const fn_def *fn;
    const char *call_name;
    const kn_attr *call_attrs;
    int n_call_attrs;
    kn_nmap call_idx; /* name -> index in call_attrs */
    kn_attr *defaults;
    int n_defaults;
    kn_nmap default_idx;
    kn_nmap opsets; /* domain -> version */
} fncall;

/* Finds attribute `name` among a[0..n); idx (may be NULL) is a name -> position map over them. */
static const kn_attr *find_attr(const kn_attr *a, int n, const kn_nmap *idx, const char *name) {
    if (idx && idx->n) {
        kn_nmap_entry *e = kn_nmap_get(idx, name, strlen(name));
        return e ? &a[e->val] : NULL;
    }
    for (int i = 0; i < n; i++)
        if (!strcmp(a[i].name, name)) return &a[i];
    return NULL;
}

static const fn_def *find_function(const ctx *c, kn_span domain, kn_span op, kn_span overload) {
    kn_nmap_entry *e = kn_nmap_get(&c->fn_by_name, op.p, op.n);
    for (int i = e ? e->val : -1; i >= 0; i = c->fns[i].next) {
        const fn_def *f = &c->fns[i];
        if (spans_eq(f->domain, domain) && spans_eq(f->overload, overload)) return f;
    }
    return NULL;
}

static int64_t model_opset(const ctx *c, const char *domain) {
    kn_nmap_entry *e = kn_nmap_get(&c->opset_by_domain, domain, strlen(domain));
    return e ? e->val : 0;
}

static kiln_status expand(ctx *c, scope *caller, const fncall *outer, const char *call_name, const kn_attr *attrs,
                          int n_attrs, const int *in_ids, int n_in, const int *out_ids, int n_out, const fn_def *fn,
                          int depth);

/* Builds node pn of b into scope s's graph (or expands it when it calls a function). in_ids and
 * out_ids are its resolved values. fc is set inside a function body. */
static kiln_status build_node(ctx *c, scope *s, const nodebuf *b, const pnode *pn, const int *in_ids,
                              const int *out_ids, const fncall *fc, int depth) {
    kn_model *m = c->m;
    char *name = NULL;
    if (fc) {
        /* body nodes are named after the calling node */
        size_t cl = strlen(fc->call_name);
        name = kn_arena_alloc(&m->arena, cl + 1 + pn->name.n + 24);
        if (!name) return KN_OOM();
        if (pn->name.n)
            snprintf(name, cl + 1 + pn->name.n + 24, "%s/%.*s", fc->call_name, (int)pn->name.n, pn->name.p);
        else
            snprintf(name, cl + 1 + pn->name.n + 24, "%s/%.*s_%d", fc->call_name, SPAN_ARG(pn->op_type),
                     (int)(pn - b->nodes));
    } else {
        name = (char *)arena_span(c, pn->name);
    }
    const char *op = arena_span(c, pn->op_type), *dom = arena_span(c, pn->domain);
    kn_attr *attrs = kn_arena_alloc(&m->arena, sizeof(kn_attr) * (size_t)(pn->n_at ? pn->n_at : 1));
    if (!name || !op || !dom || !attrs) return KN_OOM();
    int na = 0;
    kn_nmap seen = {0};
    kiln_status st = KILN_OK;
    for (int k = 0; k < pn->n_at && st == KILN_OK; k++) {
        kn_pb ar = b->attrs[pn->at0 + k];
        kn_attr *a = &attrs[na];
        st = parse_attr(c, s, &ar, a);
        if (st != KILN_OK) break;
        if (a->ref_attr_name && fc) {
            const kn_attr *src = find_attr(fc->call_attrs, fc->n_call_attrs, &fc->call_idx, a->ref_attr_name);
            if (!src) src = find_attr(fc->defaults, fc->n_defaults, &fc->default_idx, a->ref_attr_name);
            if (!src) continue; /* not given: the attribute is absent */
            const char *keep = a->name;
            *a = *src;
            a->name = keep;
            a->ref_attr_name = NULL;
        }
        size_t len = strlen(a->name);
        if (kn_nmap_get(&seen, a->name, len))
            st = kn_error(KILN_ERR_INVALID_MODEL, "attribute '%s' appears twice", a->name);
        else if (kn_nmap_put(&seen, a->name, len, na))
            st = KN_OOM();
        na++;
    }
    kn_nmap_free(&seen);
    if (st != KILN_OK) return st;
    int64_t opset = 0;
    kn_nmap_entry *oe = fc ? kn_nmap_get(&fc->opsets, dom, strlen(dom)) : NULL;
    opset = oe ? oe->val : model_opset(c, dom);
    const fn_def *fn = c->n_fns ? find_function(c, pn->domain, pn->op_type, pn->overload) : NULL;
    if (fn) {
        const char *call = name;
        if (!*name) {
            char *synth = kn_arena_alloc(&m->arena, strlen(op) + 24);
            if (!synth) return KN_OOM();
            sprintf(synth, "%s_call%d", op, c->n_calls++);
            call = synth;
        }
        return expand(c, s, fc, call, attrs, na, in_ids, pn->n_in, out_ids, pn->n_out, fn, depth + 1);
    }
    int idx = kn_graph_add_node(s->g, name, op, dom, in_ids, pn->n_in, out_ids, pn->n_out);
    if (idx < 0) return KN_OOM();
    kn_node *n = &s->g->nodes[idx];
    n->attrs = attrs;
    n->n_attrs = na;
    n->opset = (int)opset;
    return KILN_OK;
}

/* Builds a name -> index map over attributes (for lists long enough to need one). */
static kiln_status index_attrs(const kn_attr *a, int n, kn_nmap *idx) {
    if (n <= 8) return KILN_OK;
    for (int i = 0; i < n; i++)
        if (!kn_nmap_get(idx, a[i].name, strlen(a[i].name)) && kn_nmap_put(idx, a[i].name, strlen(a[i].name), i))
            return KN_OOM();
    return KILN_OK;
}

static kiln_status node_error(kiln_status st, const pnode *pn) {
    if (pn->name.n) return kn_load_prefix(st, "node '%.*s' (%.*s): ", SPAN_ARG(pn->name), SPAN_ARG(pn->op_type));
    return kn_load_prefix(st, "node at byte offset %zu (%.*s): ", pn->off, SPAN_ARG(pn->op_type));
}

static kiln_status parse_opset(kn_pb *r, const kn_pb_field *f, kn_opset_import *o, kn_span *dom) {
    kn_pb s;
    kn_pb_field g;
    int rc;
    KN_TRY(kn_pb_sub(r, f, &desc_opset, &s));
    dom->p = NULL;
    dom->n = 0;
    o->version = 0;
    while ((rc = kn_pb_next(&s, &g)) > 0) {
        if (g.num == 1) KN_TRY(span_of(&s, &g, dom));
        else if (g.num == 2) KN_TRY(kn_pb_int64(&s, &g, &o->version));
    }
    if (rc < 0) return KILN_ERR_INVALID_MODEL;
    /* versions are small; keep them in int range for kn_node.opset */
    if (o->version < 0 || o->version > INT32_MAX)
        return kn_pb_error(r, f, KILN_ERR_INVALID_MODEL, "opset version %lld is out of range", (long long)o->version);
    *dom = norm_domain(*dom);
    /* a version newer than kiln knows may change what an operator means: refused, not guessed */
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(dom->n < 200 ? dom->n : 200), dom->p ? dom->p : "");
    int64_t newest = kn_opset_newest(name);
    if (newest > 0 && o->version > newest)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "the model imports opset %lld of %s, newer than kiln supports (newest: %s opset %lld); "
                        "operators may mean something kiln does not implement there: convert the model to opset "
                        "%lld or older (onnx.version_converter)",
                        (long long)o->version, *name ? name : "ai.onnx", *name ? name : "ai.onnx", (long long)newest,
                        (long long)newest);
    return KILN_OK;
}

static kiln_status expand_body(ctx *c, scope *fs, fncall *fc, kn_pb *fr, const int *in_ids, int n_in,
                               const int *out_ids, int n_out, int depth, nodebuf *b, kn_pb **subs, int *cap_subs) {
    const fn_def *fn = fc->fn;
    kn_graph *g = fs->g;
    kn_model *m = c->m;
    kn_pb_field f;
    int rc, n_fin = 0, n_fout = 0, n_subs = 0, n_nodes = 0;
    /* pass 1: formal inputs and outputs, counts */
    kn_pb it = *fr;
    while ((rc = kn_pb_next(&it, &f)) > 0) {
        kn_span nm;
        if (f.num == 4) {
            KN_TRY(span_of(&it, &f, &nm));
            int id = n_fin < n_in ? in_ids[n_fin] : -1;
            if (nm.n && kn_nmap_put(&fs->map, nm.p, nm.n, id)) return KN_OOM();
            n_fin++;
        } else if (f.num == 7) {
            kn_pb nr;
            KN_TRY(kn_pb_sub(&it, &f, &desc_node, &nr));
            if (VEC_PUSH(*subs, n_subs, *cap_subs, nr)) return KN_OOM();
            n_nodes++;
        }
    }
    if (rc < 0) return KILN_ERR_INVALID_MODEL;
    if (n_in > n_fin)
        return kn_error(KILN_ERR_INVALID_MODEL, "function '%.*s' takes %d inputs but the node gives %d",
                        SPAN_ARG(fn->name), n_fin, n_in);
    /* formal outputs bind to the node's outputs; one that is also a formal input needs a copy */
    it = *fr;
    int *identity = NULL, n_identity = 0, cap_identity = 0;
    kiln_status st = KILN_OK;
    while ((rc = kn_pb_next(&it, &f)) > 0) {
        if (f.num != 5) continue;
        kn_span nm;
        st = span_of(&it, &f, &nm);
        if (st != KILN_OK) break;
        int id = n_fout < n_out ? out_ids[n_fout] : -1;
        n_fout++;
        if (id < 0 || !nm.n) continue;
        kn_nmap_entry *e = kn_nmap_get(&fs->map, nm.p, nm.n);
        if (e) {
            if (VEC_PUSH(identity, n_identity, cap_identity, e->val) ||
                VEC_PUSH(identity, n_identity, cap_identity, id)) {
                st = KN_OOM();
                break;
            }
        } else if (kn_nmap_put(&fs->map, nm.p, nm.n, id)) {
            st = KN_OOM();
            break;
        }
    }
    if (rc < 0 && st == KILN_OK) st = KILN_ERR_INVALID_MODEL;
    if (st == KILN_OK && n_out > n_fout)
        st = kn_error(KILN_ERR_INVALID_MODEL, "function '%.*s' has %d outputs but the node names %d",
                      SPAN_ARG(fn->name), n_fout, n_out);
    /* default attribute values and the function's own opset imports */
    it = *fr;
    int n_def = 0;
    while (st == KILN_OK && (rc = kn_pb_next(&it, &f)) > 0)
        if (f.num == 11) n_def++;
    if (st == KILN_OK && rc < 0) st = KILN_ERR_INVALID_MODEL;
    if (st == KILN_OK) {
        fc->defaults = kn_arena_alloc(&m->arena, sizeof(kn_attr) * (size_t)(n_def ? n_def : 1));
        if (!fc->defaults) st = KN_OOM();
    }
    it = *fr;
    while (st == KILN_OK && (rc = kn_pb_next(&it, &f)) > 0) {
        if (f.num == 11 && fc->n_defaults < n_def) {
            kn_pb ar;
            st = kn_pb_sub(&it, &f, &desc_attr, &ar);
            if (st == KILN_OK) st = parse_attr(c, fs, &ar, &fc->defaults[fc->n_defaults]);
            if (st == KILN_OK) fc->n_defaults++;
        } else if (f.num == 9) {
            kn_span dom;
            kn_opset_import o;
            st = parse_opset(&it, &f, &o, &dom);
            if (st == KILN_OK && !kn_nmap_get(&fc->opsets, dom.p, dom.n) &&
                kn_nmap_put(&fc->opsets, dom.p ? dom.p : "", dom.n, (int)o.version))
                st = KN_OOM();
        }
    }
    if (st == KILN_OK && rc < 0) st = KILN_ERR_INVALID_MODEL;
    if (st == KILN_OK) st = index_attrs(fc->defaults, fc->n_defaults, &fc->default_idx);
    if (st == KILN_OK) st = index_attrs(fc->call_attrs, fc->n_call_attrs, &fc->call_idx);
    /* the body */
    if (st == KILN_OK && (size_t)n_nodes + 1 > c->expand_budget)
        st = kn_error(KILN_ERR_INVALID_MODEL,
                      "expanding model-local functions would create too many nodes (calls nest too much)");
    if (st == KILN_OK) c->expand_budget -= (size_t)n_nodes + 1;
    if (st == KILN_OK) st = read_nodes(*subs, n_nodes, b);
    for (int i = 0; st == KILN_OK && i < b->n; i++) {
        const pnode *pn = &b->nodes[i];
        for (int k = 0; st == KILN_OK && k < pn->n_out; k++) {
            kn_span o = b->outs[pn->out0 + k];
            int *id = &b->out_ids[pn->out0 + k];
            if (!o.n) {
                *id = -1;
                continue;
            }
            kn_nmap_entry *e = kn_nmap_get(&fs->map, o.p, o.n);
            if (e) {
                *id = e->val;
                continue;
            }
            size_t cl = strlen(fc->call_name), len = cl + 1 + o.n + 1;
            char *vn = kn_arena_alloc(&m->arena, len);
            if (!vn) {
                st = KN_OOM();
                break;
            }
            snprintf(vn, len, "%s/%.*s", fc->call_name, (int)o.n, o.p);
            *id = new_value(g, vn);
            if (*id < 0 || kn_nmap_put(&fs->map, o.p, o.n, *id)) st = KN_OOM();
        }
    }
    int *ins = NULL, cap_ins = 0;
    for (int i = 0; st == KILN_OK && i < b->n; i++) {
        const pnode *pn = &b->nodes[i];
        if (vec_reserve((void **)&ins, &cap_ins, pn->n_in ? pn->n_in : 1, sizeof *ins)) {
            st = KN_OOM();
            break;
        }
        for (int k = 0; st == KILN_OK && k < pn->n_in; k++) {
            kn_span nm = b->ins[pn->in0 + k];
            kn_nmap_entry *e = nm.n ? kn_nmap_get(&fs->map, nm.p, nm.n) : NULL;
            if (nm.n && !e)
                st = kn_error(KILN_ERR_INVALID_MODEL,
                              "reads '%.*s', which is neither an input of function '%.*s' nor produced inside it",
                              SPAN_ARG(nm), SPAN_ARG(fn->name));
            else
                ins[k] = e ? e->val : -1;
        }
        if (st == KILN_OK) st = build_node(c, fs, b, pn, ins, &b->out_ids[pn->out0], fc, depth);
        if (st != KILN_OK) node_error(st, pn);
    }
    free(ins);
    for (int i = 0; st == KILN_OK && i < n_identity; i += 2) {
        int idx = kn_graph_add_node(g, fc->call_name, "Identity", "", &identity[i], 1, &identity[i + 1], 1);
        if (idx < 0) st = KN_OOM();
        else g->nodes[idx].opset = (int)model_opset(c, "");
    }
    free(identity);
    return st;
}

static kiln_status expand(ctx *c, scope *caller, const fncall *outer, const char *call_name, const kn_attr *attrs,
                          int n_attrs, const int *in_ids, int n_in, const int *out_ids, int n_out, const fn_def *fn,
                          int depth) {
    (void)outer;
    if (depth > KN_MAX_FUNCTION_DEPTH)
        return kn_error(KILN_ERR_INVALID_MODEL,
                        "model-local function calls nest more than %d deep (does function '%.*s' call itself?)",
                        KN_MAX_FUNCTION_DEPTH, SPAN_ARG(fn->name));
    scope fs = {caller->g, {0}, NULL};
    fncall fc = {.fn = fn, .call_name = call_name, .call_attrs = attrs, .n_call_attrs = n_attrs};
    nodebuf b = {0};
    kn_pb *subs = NULL;
    int cap_subs = 0;
    kn_pb fr = fn->msg;
    kiln_status st = expand_body(c, &fs, &fc, &fr, in_ids, n_in, out_ids, n_out, depth, &b, &subs, &cap_subs);
    free(subs);
    nodebuf_free(&b);
    kn_nmap_free(&fs.map);
    kn_nmap_free(&fc.call_idx);
    kn_nmap_free(&fc.default_idx);
    kn_nmap_free(&fc.opsets);
    if (st != KILN_OK) kn_load_prefix(st, "in function '%.*s': ", SPAN_ARG(fn->name));
    return st;
}

/* ---- graphs ---- */

typedef struct graph_parts {
    kn_pb *init, *input, *output, *vinfo, *node;
    int n_init, n_input, n_output, n_vinfo, n_node;
    int cap_init, cap_input, cap_output, cap_vinfo, cap_node;
    kn_span *out_names;
    kn_type *out_types;
    int *ids;
    int *inputs;
    int n_inputs, cap_inputs;
} graph_parts;

static void graph_parts_free(graph_parts *p) {
    free(p->init);
    free(p->input);
    free(p->output);
    free(p->vinfo);
    free(p->node);
    free(p->out_names);
    free(p->out_types);
    free(p->ids);
    free(p->inputs);
}

static kiln_status graph_body(ctx *c, kn_pb *r, kn_graph *g, scope *s, graph_parts *p, nodebuf *b) {
    kn_pb_field f;
    int rc;
    kn_model *m = c->m;
    /* sort the fields by kind */
    while ((rc = kn_pb_next(r, &f)) > 0) {
        kn_pb sub;
        int err = 0;
        switch (f.num) {
        case 1:
            KN_TRY(kn_pb_sub(r, &f, &desc_node, &sub));
            err = VEC_PUSH(p->node, p->n_node, p->cap_node, sub);
            break;
        case 2: {
            kn_span nm;
            KN_TRY(span_of(r, &f, &nm));
            g->name = arena_span(c, nm);
            if (!g->name) return KN_OOM();
            break;
        }
        case 5:
            KN_TRY(kn_pb_sub(r, &f, &kn_desc_tensor, &sub));
            err = VEC_PUSH(p->init, p->n_init, p->cap_init, sub);
            break;
        case 11:
            KN_TRY(kn_pb_sub(r, &f, &kn_desc_value_info, &sub));
            err = VEC_PUSH(p->input, p->n_input, p->cap_input, sub);
            break;
        case 12:
            KN_TRY(kn_pb_sub(r, &f, &kn_desc_value_info, &sub));
            err = VEC_PUSH(p->output, p->n_output, p->cap_output, sub);
            break;
        case 13:
            KN_TRY(kn_pb_sub(r, &f, &kn_desc_value_info, &sub));
            err = VEC_PUSH(p->vinfo, p->n_vinfo, p->cap_vinfo, sub);
            break;
        case 15: return kn_pb_error(r, &f, KILN_ERR_UNSUPPORTED, "sparse initializers are not supported");
        default: break;
        }
        if (err) return KN_OOM();
    }
    if (rc < 0) return KILN_ERR_INVALID_MODEL;

    /* initializers */
    for (int i = 0; i < p->n_init; i++) {
        kn_tensor *t;
        const uint8_t *nm;
        size_t nl;
        KN_TRY(kn_load_tensor(&c->L, &p->init[i], &t, &nm, &nl));
        KN_TRY(own_tensor(c, t));
        if (!nl) return kn_error(KILN_ERR_INVALID_MODEL, "initializer #%d has no name", i);
        if (kn_nmap_get(&s->map, (const char *)nm, nl))
            return kn_error(KILN_ERR_INVALID_MODEL, "initializer '%.*s' is defined twice", (int)(nl > 200 ? 200 : nl),
                            (const char *)nm);
        const char *name = kn_arena_strndup(&m->arena, (const char *)nm, nl);
        int id = name ? new_value(g, name) : -1;
        if (id < 0 || kn_nmap_put(&s->map, name, nl, id)) return KN_OOM();
        kn_value *v = &g->values[id];
        v->constant = t;
        kn_type_set_tensor(&v->type, t->dtype, t->rank, t->dims);
    }
    /* inputs (an input that is also an initializer is an input with a default value) */
    for (int i = 0; i < p->n_input; i++) {
        kn_span nm;
        kn_type t;
        KN_TRY(parse_value_info(c, &p->input[i], &nm, &t));
        if (!nm.n) return kn_error(KILN_ERR_INVALID_MODEL, "graph input #%d has no name", i);
        kn_nmap_entry *e = kn_nmap_get(&s->map, nm.p, nm.n);
        int id;
        if (e) {
            id = e->val;
            if (g->values[id].is_graph_input)
                return kn_error(KILN_ERR_INVALID_MODEL, "graph input '%.*s' is declared twice", SPAN_ARG(nm));
        } else {
            const char *name = arena_span(c, nm);
            id = name ? new_value(g, name) : -1;
            if (id < 0 || kn_nmap_put(&s->map, name, nm.n, id)) return KN_OOM();
            if (VEC_PUSH(p->inputs, p->n_inputs, p->cap_inputs, id)) return KN_OOM();
        }
        kn_value *v = &g->values[id];
        v->is_graph_input = true;
        if (t.kind != KN_TYPE_UNKNOWN) v->type = t;
    }
    /* every node's outputs, so inputs can refer to nodes in any order */
    KN_TRY(read_nodes(p->node, p->n_node, b));
    for (int i = 0; i < b->n_outs; i++) {
        kn_span o = b->outs[i];
        if (!o.n) {
            b->out_ids[i] = -1;
            continue;
        }
        kn_nmap_entry *e = kn_nmap_get(&s->map, o.p, o.n);
        if (e) {
            b->out_ids[i] = e->val; /* produced twice or also an input: kn_graph_sort names it */
            continue;
        }
        const char *name = arena_span(c, o);
        int id = name ? new_value(g, name) : -1;
        if (id < 0 || kn_nmap_put(&s->map, name, o.n, id)) return KN_OOM();
        b->out_ids[i] = id;
    }
    /* declared types of intermediate values and outputs */
    for (int i = 0; i < p->n_vinfo; i++) {
        kn_span nm;
        kn_type t;
        KN_TRY(parse_value_info(c, &p->vinfo[i], &nm, &t));
        kn_nmap_entry *e = kn_nmap_get(&s->map, nm.p, nm.n);
        if (e && g->values[e->val].type.kind == KN_TYPE_UNKNOWN) g->values[e->val].type = t;
    }
    p->out_names = malloc(sizeof(kn_span) * (size_t)(p->n_output ? p->n_output : 1));
    p->out_types = malloc(sizeof(kn_type) * (size_t)(p->n_output ? p->n_output : 1));
    if (!p->out_names || !p->out_types) return KN_OOM();
    for (int i = 0; i < p->n_output; i++) {
        KN_TRY(parse_value_info(c, &p->output[i], &p->out_names[i], &p->out_types[i]));
        if (!p->out_names[i].n) return kn_error(KILN_ERR_INVALID_MODEL, "graph output #%d has no name", i);
        kn_nmap_entry *e = kn_nmap_get(&s->map, p->out_names[i].p, p->out_names[i].n);
        if (e && g->values[e->val].type.kind == KN_TYPE_UNKNOWN) g->values[e->val].type = p->out_types[i];
    }
    /* node inputs and attributes (subgraphs see every name of this graph by now) */
    int cap_ids = 0;
    for (int i = 0; i < b->n; i++) {
        const pnode *pn = &b->nodes[i];
        kiln_status st = KILN_OK;
        if (vec_reserve((void **)&p->ids, &cap_ids, pn->n_in ? pn->n_in : 1, sizeof *p->ids)) return KN_OOM();
        for (int k = 0; k < pn->n_in && st == KILN_OK; k++) {
            kn_span nm = b->ins[pn->in0 + k];
            if (!nm.n) {
                p->ids[k] = -1;
                continue;
            }
            st = resolve(c, s, nm, &p->ids[k]);
            if (st == KILN_OK && p->ids[k] == NOT_FOUND) {
                /* nothing defines it: kn_graph_sort reports the node and the name */
                const char *name = arena_span(c, nm);
                int id = name ? new_value(g, name) : -1;
                if (id < 0 || kn_nmap_put(&s->map, name, nm.n, id)) return KN_OOM();
                p->ids[k] = id;
            }
        }
        if (st == KILN_OK) st = build_node(c, s, b, pn, p->ids, &b->out_ids[pn->out0], NULL, 0);
        if (st != KILN_OK) return node_error(st, pn);
    }
    /* outputs */
    g->outputs = malloc(sizeof(int) * (size_t)(p->n_output ? p->n_output : 1));
    if (!g->outputs) return KN_OOM();
    for (int i = 0; i < p->n_output; i++) {
        int id;
        KN_TRY(resolve(c, s, p->out_names[i], &id));
        if (id < 0)
            return kn_error(KILN_ERR_INVALID_MODEL,
                            "graph output '%.*s' is not produced by any node and is not a graph input or initializer",
                            SPAN_ARG(p->out_names[i]));
        kn_value *v = &g->values[id];
        v->is_graph_output = true;
        if (v->type.kind == KN_TYPE_UNKNOWN) v->type = p->out_types[i];
        g->outputs[g->n_outputs++] = id;
    }
    g->inputs = p->inputs;
    g->n_inputs = p->n_inputs;
    p->inputs = NULL;
    /* kn_graph_sort orders each node after its inputs' producers and after those of the values its
     * subgraphs read (the outer reads it counts as uses), keeping the file's order where it works */
    if (g->n_nodes == 0) {
        /* nothing to order (and kn_graph_sort would memcpy to a NULL node array) */
        kn_graph_recount(g);
        return KILN_OK;
    }
    return kn_graph_sort(g);
}

static kiln_status parse_graph(ctx *c, kn_pb *r, kn_graph *g, scope *parent) {
    scope s = {g, {0}, parent};
    graph_parts p = {0};
    nodebuf b = {0};
    kiln_status st = graph_body(c, r, g, &s, &p, &b);
    graph_parts_free(&p);
    nodebuf_free(&b);
    kn_nmap_free(&s.map);
    if (st != KILN_OK && parent) {
        if (g->name && *g->name) kn_load_prefix(st, "subgraph '%s': ", g->name);
        else kn_load_prefix(st, "subgraph: ");
    }
    return st;
}

/* ---- models ---- */

static kiln_status model_body(ctx *c, const uint8_t *data, size_t size) {
    kn_model *m = c->m;
    kn_pb r, graph_r;
    kn_pb_field f;
    bool have_graph = false;
    int rc, n_ops = 0;
    if (size == 0) return kn_error(KILN_ERR_INVALID_MODEL, "the model is empty (0 bytes)");
    kn_pb_init(&r, data, size, &desc_model);
    while ((rc = kn_pb_next(&r, &f)) > 0) {
        kn_span s;
        switch (f.num) {
        case 1: KN_TRY(kn_pb_int64(&r, &f, &m->ir_version)); break;
        case 2: KN_TRY(span_of(&r, &f, &s)); if (!(m->producer_name = arena_span(c, s))) return KN_OOM(); break;
        case 3: KN_TRY(span_of(&r, &f, &s)); if (!(m->producer_version = arena_span(c, s))) return KN_OOM(); break;
        case 4: KN_TRY(span_of(&r, &f, &s)); if (!(m->model_domain = arena_span(c, s))) return KN_OOM(); break;
        case 5: KN_TRY(kn_pb_int64(&r, &f, &m->model_version)); break;
        case 6: KN_TRY(span_of(&r, &f, &s)); if (!(m->doc = arena_span(c, s))) return KN_OOM(); break;
        case 7:
            KN_TRY(kn_pb_sub(&r, &f, &desc_graph, &graph_r));
            have_graph = true;
            break;
        case 8: KN_TRY(kn_pb_want(&r, &f, KN_PB_LEN)); n_ops++; break;
        case 25: {
            fn_def fd = {0};
            kn_pb_field g;
            KN_TRY(kn_pb_sub(&r, &f, &desc_fn, &fd.msg));
            kn_pb it = fd.msg;
            while ((rc = kn_pb_next(&it, &g)) > 0) {
                if (g.num == 1) KN_TRY(span_of(&it, &g, &fd.name));
                else if (g.num == 10) KN_TRY(span_of(&it, &g, &fd.domain));
                else if (g.num == 13) KN_TRY(span_of(&it, &g, &fd.overload));
            }
            if (rc < 0) return KILN_ERR_INVALID_MODEL;
            fd.domain = norm_domain(fd.domain);
            /* chain functions of the same name (domains and overloads differ) */
            kn_nmap_entry *e = kn_nmap_get(&c->fn_by_name, fd.name.p, fd.name.n);
            fd.next = e ? e->val : -1;
            if (VEC_PUSH(c->fns, c->n_fns, c->cap_fns, fd) ||
                kn_nmap_put(&c->fn_by_name, fd.name.p ? fd.name.p : "", fd.name.n, c->n_fns - 1))
                return KN_OOM();
            break;
        }
        default: break;
        }
    }
    if (rc < 0) return KILN_ERR_INVALID_MODEL;
    m->opsets = kn_arena_alloc(&m->arena, sizeof(kn_opset_import) * (size_t)(n_ops ? n_ops : 1));
    if (!m->opsets) return KN_OOM();
    kn_pb_init(&r, data, size, &desc_model);
    while ((rc = kn_pb_next(&r, &f)) > 0) {
        if (f.num != 8) continue;
        kn_opset_import o;
        kn_span dom;
        KN_TRY(parse_opset(&r, &f, &o, &dom));
        if (kn_nmap_get(&c->opset_by_domain, dom.p, dom.n)) continue; /* the first import of a domain wins */
        o.domain = arena_span(c, dom);
        if (!o.domain || kn_nmap_put(&c->opset_by_domain, o.domain, dom.n, (int)o.version)) return KN_OOM();
        m->opsets[m->n_opsets++] = o;
    }
    if (rc < 0) return KILN_ERR_INVALID_MODEL;
    if (!have_graph) return kn_error(KILN_ERR_INVALID_MODEL, "the model has no graph (ModelProto.graph is missing)");
    KN_TRY(kn_graph_new(m, NULL, "", &m->graph));
    return parse_graph(c, &graph_r, m->graph, NULL);
}

static kiln_status load(const uint8_t *data, size_t size, const char *base_dir, bool view_ok, void *mapping,
                        kn_model **out) {
    kn_model *m;
    KN_TRY(kn_model_new(&m));
    m->mapping = mapping;
    m->mapping_size = mapping ? size : 0;
    ctx c;
    memset(&c, 0, sizeof c);
    c.m = m;
    c.L.m = m;
    c.L.view_ok = view_ok;
    c.L.symbols = &c.symbols;
    c.expand_budget = (size_t)1 << 18; /* far more than real models expand to */
    kiln_status st = KILN_OK;
    if (base_dir) {
        m->base_dir = kn_arena_strdup(&m->arena, base_dir);
        if (!m->base_dir) st = KN_OOM();
        c.L.base_dir = m->base_dir;
    }
    c.L.defer_copies = true;
    if (st == KILN_OK) st = model_body(&c, data, size);
    if (st == KILN_OK) st = kn_load_apply_copies(&c.L);
    free(c.L.copies);
    free(c.L.base_real);
    kn_nmap_free(&c.symbols);
    kn_nmap_free(&c.fn_by_name);
    kn_nmap_free(&c.opset_by_domain);
    free(c.fns);
    if (st != KILN_OK) {
        kn_model_free(m);
        return st;
    }
    if (mapping && c.L.n_views == 0) {
        /* nothing points into the file: give the mapping back now */
        munmap(mapping, size);
        m->mapping = NULL;
        m->mapping_size = 0;
    }
    *out = m;
    return KILN_OK;
}

kiln_status kn_onnx_load_memory(const void *data, size_t size, const char *base_dir, kn_model **out) {
    if (!out) return kn_error(KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (!data && size) return kn_error(KILN_ERR_INVALID_ARGUMENT, "data is NULL");
    static const uint8_t empty[1];
    /* bytes without a ModelProto's outline are "not an ONNX model", said first (onnx/sniff.c) */
    bool outline = kn_onnx_looks_like_model(data, size);
    const char *hint = outline ? NULL : kn_file_kind_hint(data, size);
    kiln_status st = load(data ? data : empty, size, base_dir, false, NULL, out);
    if (st != KILN_OK && !outline) kn_not_a(st, "the data", "an ONNX model", hint);
    return st;
}

/* The user's .onnx is read into memory kiln owns by default: a session's weights are then the
 * bytes that were read, and a later change, rewrite or truncation of the file (a deployment
 * copying a new model over the old one while a server runs) cannot change a result or kill the
 * process with SIGBUS. ONNX Runtime reads the .onnx into memory too. KILN_MODEL_READ=0 maps it in
 * place instead (MAP_PRIVATE: shared page cache between processes, no copy), and the file must
 * then stay unchanged while sessions made from it live (README, Security). */
static bool model_mapped_by_env(void) {
    const char *rd = getenv("KILN_MODEL_READ");
    return rd && !strcmp(rd, "0");
}

void kn_onnx_file_release(kn_model_file *f) {
    if (!f) return;
    if (f->mem) munmap(f->mem, f->mem_size);
    free(f->dir);
    memset(f, 0, sizeof *f);
}

kiln_status kn_onnx_file_read(const char *path, kn_model_file *f) {
    memset(f, 0, sizeof *f);
    if (!path || !*path) return kn_error(KILN_ERR_INVALID_ARGUMENT, "the model path is empty");
    /* non-blocking, then fstat: a FIFO or device given as the model is refused, never waited on */
    int fd;
    struct stat sb;
    KN_TRY(kn_file_open_regular(path, false, "model", &fd, &sb));
    size_t size = (size_t)sb.st_size;
    if (size == 0) {
        close(fd);
        return kn_error(KILN_ERR_INVALID_MODEL, "%s is not an ONNX model: the file is empty (0 bytes)", path);
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX / 2) {
        close(fd);
        return kn_error(KILN_ERR_INVALID_MODEL, "%s: %llu bytes is too large a model for this machine", path,
                        (unsigned long long)sb.st_size);
    }
    size_t map_size = size;
    void *map;
    int map_errno = 0;
    if (!model_mapped_by_env()) {
        map = kn_file_alloc_owned(size, &map_size);
        if (!map) {
            close(fd);
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes to read the model into", path, size);
        }
        if (!kn_file_pread_all(fd, map, size, 0)) {
            map_errno = errno;
            close(fd);
            munmap(map, map_size);
            return kn_error(KILN_ERR_IO, "%s: reading %zu bytes failed: %s", path, size,
                            map_errno == ENODATA ? "the file became shorter while being read" : strerror(map_errno));
        }
        /* the model unmaps `size` bytes: give back the huge-page rounding beyond them now */
        size_t page = (size_t)sysconf(_SC_PAGESIZE), used = (size + page - 1) / page * page;
        if (map_size > used) munmap((uint8_t *)map + used, map_size - used);
        map_size = size;
    } else {
        /* private and writable: pages a later pass writes to are copied, the file never changes */
        map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        map_errno = errno;
        f->mapped = true;
    }
    close(fd);
    if (map == MAP_FAILED) return kn_error(KILN_ERR_IO, "%s: cannot map %zu bytes: %s", path, size, strerror(map_errno));
    /* the folder external data resolves against */
    const char *slash = strrchr(path, '/');
    char *dir;
    if (!slash) {
        dir = strdup(".");
    } else {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        dir = malloc(n + 1);
        if (dir) {
            memcpy(dir, path, n);
            dir[n] = 0;
        }
    }
    if (!dir) {
        munmap(map, map_size);
        return KN_OOM();
    }
    f->data = map;
    f->size = size;
    f->mem = map;
    f->mem_size = map_size;
    f->dir = dir;
    return KILN_OK;
}

kiln_status kn_onnx_load_read(const char *path, kn_model_file *f, kn_model **out) {
    if (!out) return kn_error(KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (!f || !f->mem) return kn_error(KILN_ERR_INVALID_ARGUMENT, "no model bytes");
    /* the model owns the bytes from here on (load unmaps them on failure, or when nothing points
     * into them) */
    void *map = f->mem;
    size_t size = f->size;
    char *dir = f->dir;
    f->mem = NULL;
    f->dir = NULL;
    kn_onnx_file_release(f);
    /* a file without a ModelProto's outline is "PATH is not an ONNX model (it looks like text): ...",
     * said first (onnx/sniff.c); one with it that fails to load is "PATH: what is wrong" */
    bool outline = kn_onnx_looks_like_model(map, size);
    const char *hint = outline ? NULL : kn_file_kind_hint(map, size);
    kiln_status st = load(map, size, dir, true, map, out);
    free(dir);
    if (st != KILN_OK) {
        if (outline) kn_error_prefix(st, "%s: ", path);
        else kn_not_a(st, path, "an ONNX model", hint);
    }
    return st;
}

kiln_status kn_onnx_load_file(const char *path, kn_model **out) {
    if (!out) return kn_error(KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    kn_model_file f;
    KN_TRY(kn_onnx_file_read(path, &f));
    return kn_onnx_load_read(path, &f, out);
}

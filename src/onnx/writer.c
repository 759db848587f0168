/* Protobuf encoding of kiln's IR as an ONNX ModelProto (field numbers from onnx.proto).
 *
 * Each message is built in its own growable buffer and appended to its parent with a length
 * prefix; repeated scalars inside attributes are written one element per field (the plain proto2
 * encoding every parser reads). */
#include "onnx/writer.h"

#include "util/status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct buf {
    unsigned char *p;
    size_t n, cap;
    bool oom;
} buf;

static void put(buf *b, const void *data, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->n + n) nc *= 2;
        unsigned char *q = realloc(b->p, nc);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void varint(buf *b, uint64_t v) {
    unsigned char tmp[10];
    int n = 0;
    do {
        tmp[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) tmp[n] |= 0x80;
        n++;
    } while (v);
    put(b, tmp, (size_t)n);
}

static void tag(buf *b, uint32_t field, uint32_t wire) { varint(b, ((uint64_t)field << 3) | wire); }

static void f_varint(buf *b, uint32_t field, int64_t v) {
    tag(b, field, 0);
    varint(b, (uint64_t)v);
}

static void f_float(buf *b, uint32_t field, float v) {
    tag(b, field, 5);
    uint32_t u;
    memcpy(&u, &v, 4);
    unsigned char le[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16), (unsigned char)(u >> 24)};
    put(b, le, 4);
}

static void f_bytes(buf *b, uint32_t field, const void *data, size_t n) {
    tag(b, field, 2);
    varint(b, n);
    put(b, data, n);
}

static void f_string(buf *b, uint32_t field, const char *s) { f_bytes(b, field, s ? s : "", s ? strlen(s) : 0); }

/* Appends sub as a length-delimited field and frees it. */
static void f_msg(buf *b, uint32_t field, buf *sub) {
    if (sub->oom) b->oom = true;
    f_bytes(b, field, sub->p, sub->n);
    free(sub->p);
    memset(sub, 0, sizeof *sub);
}

/* ------------------------------------------------------------------ messages */

static void write_type(buf *b, const kn_type *t);

/* TensorProto: dims 1, data_type 2, string_data 6, name 8, raw_data 9. */
static void write_tensor(buf *b, const kn_tensor *t, const char *name) {
    for (int d = 0; d < t->rank; d++) f_varint(b, 1, t->dims[d]);
    f_varint(b, 2, t->dtype);
    if (name) f_string(b, 8, name);
    if (t->dtype == KILN_DTYPE_STRING) {
        char *const *s = t->data;
        int64_t n = kn_tensor_count(t);
        for (int64_t i = 0; i < n; i++) f_string(b, 6, s[i]);
        return;
    }
    /* kiln keeps elements little-endian and densely packed, as raw_data wants them */
    f_bytes(b, 9, t->data, t->nbytes);
}

/* TensorShapeProto: dim 1 {dim_value 1, dim_param 2}. */
static void write_shape(buf *b, const kn_type *t) {
    for (int d = 0; d < t->rank; d++) {
        buf dim = {0};
        if (t->dims[d].value >= 0) f_varint(&dim, 1, t->dims[d].value);
        else if (t->dims[d].symbol) f_string(&dim, 2, t->dims[d].symbol);
        f_msg(b, 1, &dim);
    }
}

/* TypeProto.Tensor: elem_type 1, shape 2. */
static void write_tensor_type(buf *b, kiln_dtype dtype, const kn_type *t) {
    f_varint(b, 1, dtype);
    if (t && t->rank >= 0) {
        buf sh = {0};
        write_shape(&sh, t);
        f_msg(b, 2, &sh);
    }
}

/* TypeProto: tensor_type 1, sequence_type 4, optional_type 9 (each holding elem_type 1). */
static void write_type(buf *b, const kn_type *t) {
    buf inner = {0};
    if (t->kind == KN_TYPE_SEQUENCE || t->kind == KN_TYPE_OPTIONAL) {
        kn_type elem = *t;
        elem.kind = t->kind == KN_TYPE_OPTIONAL ? t->elem_kind : KN_TYPE_TENSOR;
        if (t->kind == KN_TYPE_OPTIONAL && t->elem_kind == KN_TYPE_SEQUENCE) elem.kind = KN_TYPE_SEQUENCE;
        if (elem.kind == KN_TYPE_UNKNOWN) elem.kind = KN_TYPE_TENSOR;
        buf et = {0};
        write_type(&et, &elem);
        f_msg(&inner, 1, &et);
        f_msg(b, t->kind == KN_TYPE_SEQUENCE ? 4 : 9, &inner);
        return;
    }
    write_tensor_type(&inner, t->dtype, t);
    f_msg(b, 1, &inner);
}

/* ValueInfoProto: name 1, type 2. */
static void write_value_info(buf *b, uint32_t field, const kn_value *v) {
    buf vi = {0};
    f_string(&vi, 1, v->name);
    if (v->type.kind != KN_TYPE_UNKNOWN && (v->type.dtype != KILN_DTYPE_UNDEFINED || v->type.kind != KN_TYPE_TENSOR)) {
        buf ty = {0};
        write_type(&ty, &v->type);
        f_msg(&vi, 2, &ty);
    }
    f_msg(b, field, &vi);
}

static void write_graph(buf *b, const kn_graph *g);

/* AttributeProto: name 1, f 2, i 3, s 4, t 5, g 6, floats 7, ints 8, strings 9, tensors 10,
 * graphs 11, tp 14, type_protos 15, type 20, ref_attr_name 21. */
static void write_attr(buf *b, const kn_attr *a) {
    buf m = {0};
    f_string(&m, 1, a->name);
    if (a->ref_attr_name) f_string(&m, 21, a->ref_attr_name);
    f_varint(&m, 20, a->type);
    switch (a->type) {
    case KN_ATTR_FLOAT: f_float(&m, 2, a->f); break;
    case KN_ATTR_INT: f_varint(&m, 3, a->i); break;
    case KN_ATTR_STRING: f_bytes(&m, 4, a->s ? a->s : "", a->s ? a->s_len : 0); break;
    case KN_ATTR_TENSOR:
        if (a->t) {
            buf t = {0};
            write_tensor(&t, a->t, NULL);
            f_msg(&m, 5, &t);
        }
        break;
    case KN_ATTR_GRAPH:
        if (a->g) {
            buf g = {0};
            write_graph(&g, a->g);
            f_msg(&m, 6, &g);
        }
        break;
    case KN_ATTR_FLOATS:
        for (int i = 0; i < a->n; i++) f_float(&m, 7, a->floats[i]);
        break;
    case KN_ATTR_INTS:
        for (int i = 0; i < a->n; i++) f_varint(&m, 8, a->ints[i]);
        break;
    case KN_ATTR_STRINGS:
        for (int i = 0; i < a->n; i++) f_string(&m, 9, a->strings[i]);
        break;
    case KN_ATTR_TENSORS:
        for (int i = 0; i < a->n; i++) {
            buf t = {0};
            write_tensor(&t, a->tensors[i], NULL);
            f_msg(&m, 10, &t);
        }
        break;
    case KN_ATTR_GRAPHS:
        for (int i = 0; i < a->n; i++) {
            buf g = {0};
            write_graph(&g, a->graphs[i]);
            f_msg(&m, 11, &g);
        }
        break;
    case KN_ATTR_TYPE_PROTO:
    case KN_ATTR_TYPE_PROTOS:
        for (int i = 0; i < a->n || (a->type == KN_ATTR_TYPE_PROTO && i == 0 && a->type_protos); i++) {
            if (!a->type_protos) break;
            buf t = {0};
            write_type(&t, &a->type_protos[i]);
            f_msg(&m, a->type == KN_ATTR_TYPE_PROTO ? 14 : 15, &t);
            if (a->type == KN_ATTR_TYPE_PROTO) break;
        }
        break;
    default: break; /* sparse tensors: kiln keeps none */
    }
    f_msg(b, 5, &m);
}

static const char *value_name(const kn_graph *g, int v) { return v >= 0 ? g->values[v].name : ""; }

/* NodeProto: input 1, output 2, name 3, op_type 4, attribute 5, domain 7. */
static void write_node(buf *b, const kn_graph *g, const kn_node *n) {
    buf m = {0};
    for (int k = 0; k < n->n_inputs; k++) f_string(&m, 1, value_name(g, n->inputs[k]));
    for (int k = 0; k < n->n_outputs; k++) f_string(&m, 2, value_name(g, n->outputs[k]));
    f_string(&m, 3, n->name);
    f_string(&m, 4, n->op_type);
    for (int a = 0; a < n->n_attrs; a++) write_attr(&m, &n->attrs[a]);
    if (n->domain && *n->domain) f_string(&m, 7, n->domain);
    f_msg(b, 1, &m);
}

/* GraphProto: node 1, name 2, initializer 5, input 11, output 12, value_info 13. */
static void write_graph(buf *b, const kn_graph *g) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead) write_node(b, g, &g->nodes[i]);
    f_string(b, 2, g->name && *g->name ? g->name : "kiln");
    for (int v = 0; v < g->n_values; v++) {
        const kn_value *val = &g->values[v];
        if (!val->constant || val->is_outer) continue;
        buf t = {0};
        write_tensor(&t, val->constant, val->name);
        f_msg(b, 5, &t);
    }
    for (int i = 0; i < g->n_inputs; i++) write_value_info(b, 11, &g->values[g->inputs[i]]);
    /* overridable initializers are inputs too */
    for (int v = 0; v < g->n_values; v++) {
        if (!g->values[v].is_graph_input) continue;
        int k = 0;
        while (k < g->n_inputs && g->inputs[k] != v) k++;
        if (k == g->n_inputs) write_value_info(b, 11, &g->values[v]);
    }
    for (int i = 0; i < g->n_outputs; i++) write_value_info(b, 12, &g->values[g->outputs[i]]);
    /* the inferred type of every other value a live node produces */
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int o = 0; o < n->n_outputs; o++) {
            int v = n->outputs[o];
            if (v < 0 || g->values[v].is_graph_output || g->values[v].type.kind == KN_TYPE_UNKNOWN) continue;
            if (g->values[v].type.kind == KN_TYPE_TENSOR && g->values[v].type.dtype == KILN_DTYPE_UNDEFINED) continue;
            write_value_info(b, 13, &g->values[v]);
        }
    }
}

kiln_status kn_onnx_write_memory(const kn_model *m, unsigned char **data_out, size_t *size_out) {
    *data_out = NULL;
    *size_out = 0;
    if (!m || !m->graph) return kn_error(KILN_ERR_INVALID_ARGUMENT, "kn_onnx_write_memory: no model");
    buf b = {0};
    /* ModelProto: ir_version 1, producer_name 2, producer_version 3, domain 4, model_version 5,
     * doc_string 6, graph 7, opset_import 8 {domain 1, version 2} */
    f_varint(&b, 1, m->ir_version > 0 ? m->ir_version : 8);
    f_string(&b, 2, "kiln");
    f_string(&b, 3, kiln_version());
    if (m->model_domain && *m->model_domain) f_string(&b, 4, m->model_domain);
    if (m->model_version) f_varint(&b, 5, m->model_version);
    char doc[512];
    snprintf(doc, sizeof doc, "optimised by kiln %s from a model by %s %s", kiln_version(),
             m->producer_name ? m->producer_name : "?", m->producer_version ? m->producer_version : "");
    f_string(&b, 6, doc);
    buf g = {0};
    write_graph(&g, m->graph);
    f_msg(&b, 7, &g);
    for (int i = 0; i < m->n_opsets; i++) {
        buf o = {0};
        if (m->opsets[i].domain && *m->opsets[i].domain) f_string(&o, 1, m->opsets[i].domain);
        f_varint(&o, 2, m->opsets[i].version);
        f_msg(&b, 8, &o);
    }
    if (b.oom) {
        free(b.p);
        return KN_OOM();
    }
    *data_out = b.p;
    *size_out = b.n;
    return KILN_OK;
}

kiln_status kn_onnx_write_file(const kn_model *m, const char *path) {
    if (!path || !*path) return kn_error(KILN_ERR_INVALID_ARGUMENT, "the dump path is empty");
    unsigned char *data;
    size_t size;
    KN_TRY(kn_onnx_write_memory(m, &data, &size));
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp) {
        free(data);
        return KN_OOM();
    }
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    kiln_status st = KILN_OK;
    if (!f) {
        st = kn_error(KILN_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    } else {
        size_t w = fwrite(data, 1, size, f);
        int e = errno;
        if (fclose(f) != 0 || w != size) st = kn_error(KILN_ERR_IO, "writing %s: %s", tmp, strerror(e ? e : errno));
        if (st == KILN_OK && rename(tmp, path) != 0)
            st = kn_error(KILN_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        if (st != KILN_OK) remove(tmp);
    }
    free(tmp);
    free(data);
    return st;
}

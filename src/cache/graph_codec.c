#include "cache/graph_codec.h"

#include "cache/format.h"
#include "cache/hash.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define NO_STR 0xffffffffu
#define MAX_GRAPH_DEPTH 32
#define MAX_TENSOR_DEPTH 8

/* ================================================================== encoding */

typedef struct strent {
    const char *s;
    uint32_t len;
} strent;

typedef struct enc {
    kn_buf body;
    /* string table: entries + an open-addressing index on their content */
    strent *strs;
    uint32_t n_strs, cap_strs;
    uint32_t *sidx; /* slot -> string index + 1 (0 = empty) */
    uint32_t n_sidx;
    /* tensor table: in discovery order, indexed by pointer */
    const kn_tensor **tens;
    uint32_t n_tens, cap_tens;
    uint32_t *tidx;
    uint32_t n_tidx;
    kn_graph_blobs *blobs;
    kiln_status st;
} enc;

static uint64_t str_hash(const char *s, uint32_t len) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a: strings here are short names */
    for (uint32_t i = 0; i < len; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}

static int grow_index(uint32_t **idx, uint32_t *n_idx, uint32_t used) {
    if ((uint64_t)(used + 1) * 2 <= *n_idx) return 0;
    uint32_t n = *n_idx ? *n_idx * 2 : 1024;
    uint32_t *p = calloc(n, sizeof *p);
    if (!p) return -1;
    free(*idx);
    *idx = p;
    *n_idx = n;
    return 1; /* rebuilt: the caller reinserts */
}

static uint32_t intern(enc *e, const char *s, size_t len) {
    if (!s) return NO_STR;
    if (e->st != KILN_OK) return 0;
    if (len > UINT32_MAX - 1) {
        e->st = kn_error(KILN_ERR_CACHE, "a string of %zu bytes is too long for a compiled file", len);
        return 0;
    }
    int g = grow_index(&e->sidx, &e->n_sidx, e->n_strs);
    if (g < 0) {
        e->st = KN_OOM();
        return 0;
    }
    if (g > 0)
        for (uint32_t i = 0; i < e->n_strs; i++) {
            uint32_t slot = (uint32_t)str_hash(e->strs[i].s, e->strs[i].len) & (e->n_sidx - 1);
            while (e->sidx[slot]) slot = (slot + 1) & (e->n_sidx - 1);
            e->sidx[slot] = i + 1;
        }
    uint32_t slot = (uint32_t)str_hash(s, (uint32_t)len) & (e->n_sidx - 1);
    while (e->sidx[slot]) {
        const strent *x = &e->strs[e->sidx[slot] - 1];
        if (x->len == len && !memcmp(x->s, s, len)) return e->sidx[slot] - 1;
        slot = (slot + 1) & (e->n_sidx - 1);
    }
    if (e->n_strs == e->cap_strs) {
        uint32_t nc = e->cap_strs ? e->cap_strs * 2 : 256;
        strent *p = realloc(e->strs, sizeof *p * nc);
        if (!p) {
            e->st = KN_OOM();
            return 0;
        }
        e->strs = p;
        e->cap_strs = nc;
    }
    e->strs[e->n_strs] = (strent){s, (uint32_t)len};
    e->sidx[slot] = e->n_strs + 1;
    return e->n_strs++;
}

static void put_str(enc *e, const char *s) { kn_buf_u32(&e->body, intern(e, s, s ? strlen(s) : 0)); }

static int32_t tensor_index(enc *e, const kn_tensor *t) {
    if (!t) return -1;
    if (e->st != KILN_OK) return -1;
    int g = grow_index(&e->tidx, &e->n_tidx, e->n_tens);
    if (g < 0) {
        e->st = KN_OOM();
        return -1;
    }
    if (g > 0)
        for (uint32_t i = 0; i < e->n_tens; i++) {
            uint32_t slot = (uint32_t)(((uintptr_t)e->tens[i] >> 4) * 0x9E3779B97F4A7C15ull >> 20) & (e->n_tidx - 1);
            while (e->tidx[slot]) slot = (slot + 1) & (e->n_tidx - 1);
            e->tidx[slot] = i + 1;
        }
    uint32_t slot = (uint32_t)(((uintptr_t)t >> 4) * 0x9E3779B97F4A7C15ull >> 20) & (e->n_tidx - 1);
    while (e->tidx[slot]) {
        if (e->tens[e->tidx[slot] - 1] == t) return (int32_t)(e->tidx[slot] - 1);
        slot = (slot + 1) & (e->n_tidx - 1);
    }
    if (e->n_tens == e->cap_tens) {
        uint32_t nc = e->cap_tens ? e->cap_tens * 2 : 256;
        const kn_tensor **p = realloc(e->tens, sizeof *p * nc);
        if (!p) {
            e->st = KN_OOM();
            return -1;
        }
        e->tens = p;
        e->cap_tens = nc;
    }
    e->tens[e->n_tens] = t;
    e->tidx[slot] = e->n_tens + 1;
    return (int32_t)e->n_tens++;
}

static void put_type(enc *e, const kn_type *t) {
    kn_buf *b = &e->body;
    kn_buf_u8(b, (uint8_t)t->kind);
    kn_buf_u8(b, (uint8_t)t->elem_kind);
    kn_buf_i32(b, (int32_t)t->dtype);
    int rank = t->rank < -1 ? -1 : t->rank > KILN_MAX_RANK ? KILN_MAX_RANK : t->rank;
    kn_buf_i32(b, rank);
    for (int d = 0; d < rank; d++) {
        kn_buf_i64(b, t->dims[d].value);
        put_str(e, t->dims[d].symbol);
    }
    int nsv = t->n_shape_value < -1 ? -1 : t->n_shape_value > KILN_MAX_RANK ? KILN_MAX_RANK : t->n_shape_value;
    kn_buf_i32(b, nsv);
    for (int d = 0; d < nsv; d++) {
        kn_buf_i64(b, t->shape_value[d].value);
        put_str(e, t->shape_value[d].symbol);
    }
}

static void put_graph(enc *e, const kn_graph *g, int depth);

static void put_attr(enc *e, const kn_attr *a, int depth) {
    kn_buf *b = &e->body;
    put_str(e, a->name);
    kn_buf_u8(b, (uint8_t)a->type);
    put_str(e, a->ref_attr_name);
    switch (a->type) {
    case KN_ATTR_FLOAT: kn_buf_f32(b, a->f); break;
    case KN_ATTR_INT: kn_buf_i64(b, a->i); break;
    case KN_ATTR_STRING: kn_buf_u32(b, intern(e, a->s ? a->s : "", a->s ? a->s_len : 0)); break;
    case KN_ATTR_TENSOR: kn_buf_i32(b, tensor_index(e, a->t)); break;
    case KN_ATTR_GRAPH:
        kn_buf_u8(b, a->g != NULL);
        if (a->g) put_graph(e, a->g, depth + 1);
        break;
    case KN_ATTR_FLOATS:
        kn_buf_u32(b, (uint32_t)a->n);
        for (int i = 0; i < a->n; i++) kn_buf_f32(b, a->floats[i]);
        break;
    case KN_ATTR_INTS:
        kn_buf_u32(b, (uint32_t)a->n);
        for (int i = 0; i < a->n; i++) kn_buf_i64(b, a->ints[i]);
        break;
    case KN_ATTR_STRINGS:
        kn_buf_u32(b, (uint32_t)a->n);
        for (int i = 0; i < a->n; i++) put_str(e, a->strings[i] ? a->strings[i] : "");
        break;
    case KN_ATTR_TENSORS:
        kn_buf_u32(b, (uint32_t)a->n);
        for (int i = 0; i < a->n; i++) kn_buf_i32(b, tensor_index(e, a->tensors[i]));
        break;
    case KN_ATTR_GRAPHS:
        kn_buf_u32(b, (uint32_t)a->n);
        for (int i = 0; i < a->n; i++) put_graph(e, a->graphs[i], depth + 1);
        break;
    case KN_ATTR_TYPE_PROTO:
    case KN_ATTR_TYPE_PROTOS:
        kn_buf_u32(b, (uint32_t)(a->type_protos ? a->n : 0));
        for (int i = 0; a->type_protos && i < a->n; i++) put_type(e, &a->type_protos[i]);
        break;
    default:
        if (e->st == KILN_OK)
            e->st = kn_error(KILN_ERR_UNSUPPORTED, "attribute '%s' of type %d cannot be stored in a compiled file",
                             a->name, (int)a->type);
    }
}

static void put_graph(enc *e, const kn_graph *g, int depth) {
    kn_buf *b = &e->body;
    if (depth > MAX_GRAPH_DEPTH && e->st == KILN_OK)
        e->st = kn_error(KILN_ERR_CACHE, "subgraphs nest more than %d deep", MAX_GRAPH_DEPTH);
    if (e->st != KILN_OK) return;
    put_str(e, g->name);
    kn_buf_u32(b, (uint32_t)g->n_values);
    for (int i = 0; i < g->n_values; i++) {
        const kn_value *v = &g->values[i];
        put_str(e, v->name);
        put_type(e, &v->type);
        kn_buf_u8(b, (uint8_t)((v->is_graph_input ? 1 : 0) | (v->is_graph_output ? 2 : 0) | (v->is_outer ? 4 : 0)));
        kn_buf_i32(b, tensor_index(e, v->constant));
    }
    uint32_t live = 0;
    for (int i = 0; i < g->n_nodes; i++) live += !g->nodes[i].dead;
    kn_buf_u32(b, live);
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        put_str(e, n->name);
        put_str(e, n->op_type);
        put_str(e, n->domain);
        kn_buf_i32(b, n->opset);
        kn_buf_u32(b, (uint32_t)n->n_inputs);
        for (int k = 0; k < n->n_inputs; k++) kn_buf_i32(b, n->inputs[k]);
        kn_buf_u32(b, (uint32_t)n->n_outputs);
        for (int k = 0; k < n->n_outputs; k++) kn_buf_i32(b, n->outputs[k]);
        kn_buf_u32(b, (uint32_t)n->n_attrs);
        for (int k = 0; k < n->n_attrs; k++) put_attr(e, &n->attrs[k], depth);
        kn_buf_i32(b, n->provider);
    }
    kn_buf_u32(b, (uint32_t)g->n_inputs);
    for (int i = 0; i < g->n_inputs; i++) kn_buf_i32(b, g->inputs[i]);
    kn_buf_u32(b, (uint32_t)g->n_outputs);
    for (int i = 0; i < g->n_outputs; i++) kn_buf_i32(b, g->outputs[i]);
}

static void add_blob(enc *e, const void *data, uint64_t size, uint64_t *offset) {
    kn_graph_blobs *bl = e->blobs;
    uint64_t off = (bl->total + KN_CACHE_ALIGN - 1) & ~(uint64_t)(KN_CACHE_ALIGN - 1);
    *offset = off;
    bl->total = off + size;
    if (size == 0) return;
    if (bl->n == bl->cap) {
        int nc = bl->cap ? bl->cap * 2 : 64;
        kn_blob *p = realloc(bl->items, sizeof *p * (size_t)nc);
        if (!p) {
            e->st = KN_OOM();
            return;
        }
        bl->items = p;
        bl->cap = nc;
    }
    bl->items[bl->n++] = (kn_blob){data, size, off};
}

static void put_tensor(enc *e, kn_buf *b, const kn_tensor *t, int depth) {
    if (depth > MAX_TENSOR_DEPTH && e->st == KILN_OK)
        e->st = kn_error(KILN_ERR_CACHE, "a constant nests sequences more than %d deep", MAX_TENSOR_DEPTH);
    if (e->st != KILN_OK) return;
    if (t->device != KN_DEVICE_HOST) {
        /* a backend stores its device copies in its own section; the graph keeps host tensors */
        e->st = kn_error(KILN_ERR_INTERNAL, "a constant in device memory reached the graph section");
        return;
    }
    kn_buf_u8(b, (uint8_t)t->kind);
    kn_buf_i32(b, (int32_t)t->dtype);
    int rank = t->kind == KN_VALUE_TENSOR ? t->rank : 0;
    kn_buf_u8(b, (uint8_t)rank);
    for (int d = 0; d < rank; d++) kn_buf_i64(b, t->dims[d]);
    if (t->kind != KN_VALUE_TENSOR) {
        kn_buf_u32(b, (uint32_t)t->n_items);
        for (int i = 0; i < t->n_items; i++) put_tensor(e, b, t->items[i], depth + 1);
        return;
    }
    if (t->dtype == KILN_DTYPE_STRING) {
        int64_t n = kn_tensor_count(t);
        for (int64_t i = 0; i < n; i++) {
            const char *s = ((char *const *)t->data)[i];
            size_t l = s ? strlen(s) : 0;
            kn_buf_u32(b, (uint32_t)l);
            kn_buf_put(b, s, l);
        }
        return;
    }
    uint64_t off;
    add_blob(e, t->data, t->nbytes, &off);
    kn_buf_u64(b, off);
    kn_buf_u64(b, t->nbytes);
}

kiln_status kn_graph_encode(const kn_model *m, kn_buf *out, kn_graph_blobs *blobs) {
    enc e;
    memset(&e, 0, sizeof e);
    e.blobs = blobs;
    kn_buf *b = &e.body;
    kn_buf_i64(b, m->ir_version);
    put_str(&e, m->producer_name);
    put_str(&e, m->producer_version);
    put_str(&e, m->model_domain);
    put_str(&e, m->doc);
    kn_buf_i64(b, m->model_version);
    kn_buf_u32(b, (uint32_t)m->n_opsets);
    for (int i = 0; i < m->n_opsets; i++) {
        put_str(&e, m->opsets[i].domain);
        kn_buf_i64(b, m->opsets[i].version);
    }
    put_graph(&e, m->graph, 0);
    kn_buf tens = {0};
    kn_buf_u32(&tens, e.n_tens);
    for (uint32_t i = 0; i < e.n_tens && e.st == KILN_OK; i++) put_tensor(&e, &tens, e.tens[i], 0);
    blobs->total = (blobs->total + KN_CACHE_ALIGN - 1) & ~(uint64_t)(KN_CACHE_ALIGN - 1);
    if (e.st == KILN_OK) {
        kn_buf_u32(out, e.n_strs);
        for (uint32_t i = 0; i < e.n_strs; i++) {
            kn_buf_u32(out, e.strs[i].len);
            kn_buf_put(out, e.strs[i].s, e.strs[i].len);
        }
        kn_buf_put(out, tens.d, tens.n);
        kn_buf_put(out, e.body.d, e.body.n);
        if (out->oom || tens.oom || e.body.oom) e.st = KN_OOM();
    }
    kn_buf_free(&tens);
    kn_buf_free(&e.body);
    free(e.strs);
    free(e.sidx);
    free(e.tens);
    free(e.tidx);
    return e.st;
}

/* ================================================================== decoding */

typedef struct dec {
    kn_rd r;
    kn_model *m;
    char **strs;      /* arena copies */
    uint32_t *lens;
    uint32_t n_strs;
    kn_tensor **tens; /* owned by the model once registered */
    uint32_t n_tens;
    uint8_t *weights;
    size_t weights_size;
} dec;

static const char *get_str(dec *d, const char *field, bool allow_null) {
    uint32_t i = kn_rd_u32(&d->r, field);
    if (!kn_rd_ok(&d->r)) return NULL;
    if (i == NO_STR) {
        if (!allow_null) kn_rd_fail(&d->r, field, "is NULL where a string is required");
        return NULL;
    }
    if (i >= d->n_strs) {
        kn_rd_fail(&d->r, field, "string index %u is outside the table of %u strings", i, d->n_strs);
        return NULL;
    }
    return d->strs[i];
}

/* A string whose bytes must not hold a NUL (names; attribute strings keep their length). */
static const char *get_name(dec *d, const char *field) {
    size_t at = d->r.pos;
    uint32_t i = kn_rd_u32(&d->r, field);
    d->r.pos = at;
    const char *s = get_str(d, field, false);
    if (s && strlen(s) != d->lens[i]) {
        kn_rd_fail(&d->r, field, "holds a NUL byte");
        return NULL;
    }
    return s;
}

static kiln_status get_type(dec *d, kn_type *t) {
    kn_type_init(t);
    kn_rd *r = &d->r;
    uint8_t kind = kn_rd_u8(r, "type.kind"), ek = kn_rd_u8(r, "type.elem_kind");
    int32_t dtype = kn_rd_i32(r, "type.dtype"), rank = kn_rd_i32(r, "type.rank");
    if (!kn_rd_ok(r)) return r->st;
    if (kind > KN_TYPE_MAP || ek > KN_TYPE_MAP) return kn_rd_fail(r, "type.kind", "kind %u/%u is not a type kind", kind, ek);
    if (dtype != 0 && !kn_dtype_is_valid(dtype)) return kn_rd_fail(r, "type.dtype", "%d is not an element type", dtype);
    if (rank < -1 || rank > KILN_MAX_RANK) return kn_rd_fail(r, "type.rank", "%d is outside -1..%d", rank, KILN_MAX_RANK);
    t->kind = (kn_type_kind)kind;
    t->elem_kind = (kn_type_kind)ek;
    t->dtype = (kiln_dtype)dtype;
    t->rank = rank;
    for (int i = 0; i < rank; i++) {
        t->dims[i].value = kn_rd_i64(r, "type.dim");
        t->dims[i].symbol = get_str(d, "type.dim.symbol", true);
        if (kn_rd_ok(r) && t->dims[i].value < -1) return kn_rd_fail(r, "type.dim", "dimension %lld is negative", (long long)t->dims[i].value);
    }
    int32_t nsv = kn_rd_i32(r, "type.n_shape_value");
    if (kn_rd_ok(r) && (nsv < -1 || nsv > KILN_MAX_RANK))
        return kn_rd_fail(r, "type.n_shape_value", "%d is outside -1..%d", nsv, KILN_MAX_RANK);
    t->n_shape_value = nsv;
    for (int i = 0; i < nsv && kn_rd_ok(r); i++) {
        t->shape_value[i].value = kn_rd_i64(r, "type.shape_value");
        t->shape_value[i].symbol = get_str(d, "type.shape_value.symbol", true);
    }
    return r->st;
}

static kn_tensor *get_tensor_ref(dec *d, const char *field) {
    int32_t i = kn_rd_i32(&d->r, field);
    if (!kn_rd_ok(&d->r) || i == -1) return NULL;
    if (i < 0 || (uint32_t)i >= d->n_tens) {
        kn_rd_fail(&d->r, field, "tensor index %d is outside the table of %u tensors", i, d->n_tens);
        return NULL;
    }
    return d->tens[i];
}

static kiln_status get_graph(dec *d, kn_graph *parent, int depth, kn_graph **out);

static kiln_status get_attr(dec *d, kn_attr *a, kn_graph *g, int depth) {
    kn_rd *r = &d->r;
    kn_arena *ar = &d->m->arena;
    a->name = get_name(d, "attribute.name");
    uint8_t type = kn_rd_u8(r, "attribute.type");
    a->ref_attr_name = get_str(d, "attribute.ref_attr_name", true);
    if (!kn_rd_ok(r)) return r->st;
    a->type = (kn_attr_type)type;
    uint32_t n = 0;
    switch (type) {
    case KN_ATTR_FLOAT: a->f = kn_rd_f32(r, "attribute.f"); return r->st;
    case KN_ATTR_INT: a->i = kn_rd_i64(r, "attribute.i"); return r->st;
    case KN_ATTR_STRING: {
        uint32_t at = (uint32_t)r->pos;
        uint32_t idx = kn_rd_u32(r, "attribute.s");
        r->pos = at;
        a->s = get_str(d, "attribute.s", false);
        if (a->s) a->s_len = d->lens[idx];
        return r->st;
    }
    case KN_ATTR_TENSOR:
        a->t = get_tensor_ref(d, "attribute.t");
        if (kn_rd_ok(r) && !a->t) return kn_rd_fail(r, "attribute.t", "attribute '%s' has no tensor", a->name);
        return r->st;
    case KN_ATTR_GRAPH: {
        uint8_t has = kn_rd_u8(r, "attribute.g");
        if (kn_rd_ok(r) && has > 1) return kn_rd_fail(r, "attribute.g", "presence flag %u is not 0 or 1", has);
        if (has) KN_TRY(get_graph(d, g, depth + 1, &a->g));
        return r->st;
    }
    case KN_ATTR_FLOATS:
        n = kn_rd_count(r, 4, INT_MAX / 8, "attribute.floats");
        a->floats = kn_arena_alloc(ar, sizeof(float) * (n ? n : 1));
        if (!a->floats) return KN_OOM();
        for (uint32_t i = 0; i < n; i++) a->floats[i] = kn_rd_f32(r, "attribute.floats");
        break;
    case KN_ATTR_INTS:
        n = kn_rd_count(r, 8, INT_MAX / 8, "attribute.ints");
        a->ints = kn_arena_alloc(ar, sizeof(int64_t) * (n ? n : 1));
        if (!a->ints) return KN_OOM();
        for (uint32_t i = 0; i < n; i++) a->ints[i] = kn_rd_i64(r, "attribute.ints");
        break;
    case KN_ATTR_STRINGS:
        n = kn_rd_count(r, 4, INT_MAX / 8, "attribute.strings");
        a->strings = kn_arena_alloc(ar, sizeof(char *) * (n ? n : 1));
        if (!a->strings) return KN_OOM();
        for (uint32_t i = 0; i < n; i++) a->strings[i] = get_name(d, "attribute.strings");
        break;
    case KN_ATTR_TENSORS:
        n = kn_rd_count(r, 4, INT_MAX / 8, "attribute.tensors");
        a->tensors = kn_arena_alloc(ar, sizeof(kn_tensor *) * (n ? n : 1));
        if (!a->tensors) return KN_OOM();
        for (uint32_t i = 0; i < n && kn_rd_ok(r); i++) {
            a->tensors[i] = get_tensor_ref(d, "attribute.tensors");
            if (kn_rd_ok(r) && !a->tensors[i]) return kn_rd_fail(r, "attribute.tensors", "element %u has no tensor", i);
        }
        break;
    case KN_ATTR_GRAPHS:
        n = kn_rd_count(r, 12, INT_MAX / 8, "attribute.graphs");
        a->graphs = kn_arena_alloc(ar, sizeof(kn_graph *) * (n ? n : 1));
        if (!a->graphs) return KN_OOM();
        for (uint32_t i = 0; i < n && kn_rd_ok(r); i++) KN_TRY(get_graph(d, g, depth + 1, &a->graphs[i]));
        break;
    case KN_ATTR_TYPE_PROTO:
    case KN_ATTR_TYPE_PROTOS:
        n = kn_rd_count(r, 14, INT_MAX / 8, "attribute.type_protos");
        if (kn_rd_ok(r) && type == KN_ATTR_TYPE_PROTO && n != 1)
            return kn_rd_fail(r, "attribute.type_protos", "a TYPE_PROTO attribute holds %u types, not 1", n);
        a->type_protos = kn_arena_alloc(ar, sizeof(kn_type) * (n ? n : 1));
        if (!a->type_protos) return KN_OOM();
        for (uint32_t i = 0; i < n && kn_rd_ok(r); i++) KN_TRY(get_type(d, &a->type_protos[i]));
        break;
    default: return kn_rd_fail(r, "attribute.type", "%u is not an attribute type kiln stores", type);
    }
    a->n = (int)n;
    return r->st;
}

static kiln_status get_ids(dec *d, int **ids, int *n_out, int n_values, bool allow_omitted, const char *field) {
    kn_rd *r = &d->r;
    uint32_t n = kn_rd_count(r, 4, INT_MAX / 8, field);
    if (!kn_rd_ok(r)) return r->st;
    *ids = malloc(sizeof(int) * (n ? n : 1));
    if (!*ids) return KN_OOM();
    *n_out = (int)n;
    for (uint32_t i = 0; i < n; i++) {
        int32_t v = kn_rd_i32(r, field);
        if (!kn_rd_ok(r)) return r->st;
        if (v < (allow_omitted ? -1 : 0) || v >= n_values)
            return kn_rd_fail(r, field, "value id %d is outside %d..%d", v, allow_omitted ? -1 : 0, n_values - 1);
        (*ids)[i] = v;
    }
    return KILN_OK;
}

static kiln_status get_graph(dec *d, kn_graph *parent, int depth, kn_graph **out) {
    kn_rd *r = &d->r;
    if (depth > MAX_GRAPH_DEPTH) return kn_rd_fail(r, "graph", "subgraphs nest more than %d deep", MAX_GRAPH_DEPTH);
    const char *name = get_str(d, "graph.name", true);
    if (!kn_rd_ok(r)) return r->st;
    kn_graph *g;
    KN_TRY(kn_graph_new(d->m, parent, name, &g));
    *out = g;
    uint32_t nv = kn_rd_count(r, 23, INT_MAX / 8, "graph.n_values");
    if (!kn_rd_ok(r)) return r->st;
    g->values = calloc(nv ? nv : 1, sizeof *g->values);
    if (!g->values) return KN_OOM();
    g->cap_values = (int)(nv ? nv : 1);
    for (uint32_t i = 0; i < nv; i++) {
        kn_value *v = &g->values[i];
        v->name = get_name(d, "value.name");
        if (kn_rd_ok(r)) get_type(d, &v->type);
        uint8_t flags = kn_rd_u8(r, "value.flags");
        if (kn_rd_ok(r) && flags > 7) return kn_rd_fail(r, "value.flags", "%u has unknown bits", flags);
        v->constant = get_tensor_ref(d, "value.constant");
        if (!kn_rd_ok(r)) return r->st;
        v->is_graph_input = flags & 1;
        v->is_graph_output = (flags & 2) != 0;
        v->is_outer = (flags & 4) != 0;
        v->producer = -1;
        g->n_values = (int)i + 1;
    }
    uint32_t nn = kn_rd_count(r, 32, INT_MAX / 8, "graph.n_nodes");
    if (!kn_rd_ok(r)) return r->st;
    g->nodes = calloc(nn ? nn : 1, sizeof *g->nodes);
    if (!g->nodes) return KN_OOM();
    g->cap_nodes = (int)(nn ? nn : 1);
    for (uint32_t i = 0; i < nn; i++) {
        kn_node *n = &g->nodes[i];
        g->n_nodes = (int)i + 1; /* counted first, so the graph frees its arrays on failure */
        n->provider = -1;
        n->name = get_name(d, "node.name");
        n->op_type = get_name(d, "node.op_type");
        n->domain = get_name(d, "node.domain");
        n->opset = kn_rd_i32(r, "node.opset");
        if (!kn_rd_ok(r)) return r->st;
        KN_TRY(get_ids(d, &n->inputs, &n->n_inputs, g->n_values, true, "node.inputs"));
        KN_TRY(get_ids(d, &n->outputs, &n->n_outputs, g->n_values, true, "node.outputs"));
        uint32_t na = kn_rd_count(r, 9, INT_MAX / 8, "node.n_attrs");
        if (!kn_rd_ok(r)) return r->st;
        n->attrs = kn_arena_alloc(&d->m->arena, sizeof(kn_attr) * (na ? na : 1));
        if (!n->attrs) return KN_OOM();
        for (uint32_t k = 0; k < na; k++) {
            KN_TRY(get_attr(d, &n->attrs[k], g, depth));
            n->n_attrs = (int)k + 1;
        }
        int32_t prov = kn_rd_i32(r, "node.provider");
        if (kn_rd_ok(r) && (prov < -1 || prov > 64)) return kn_rd_fail(r, "node.provider", "%d is not a provider index", prov);
        if (!kn_rd_ok(r)) return r->st;
        n->provider = -1; /* placement is redone from the backend sections */
    }
    KN_TRY(get_ids(d, &g->inputs, &g->n_inputs, g->n_values, false, "graph.inputs"));
    KN_TRY(get_ids(d, &g->outputs, &g->n_outputs, g->n_values, false, "graph.outputs"));
    for (int i = 0; i < g->n_inputs; i++) g->values[g->inputs[i]].is_graph_input = true;
    for (int i = 0; i < g->n_outputs; i++) g->values[g->outputs[i]].is_graph_output = true;
    /* the same checks the loader makes: every input produced once, no cycles; then producers and
     * use counts */
    kiln_status st = g->n_nodes ? kn_graph_sort(g) : KILN_OK;
    if (st != KILN_OK) return kn_error_prefix(KILN_ERR_CACHE, "%s: section 'graph', graph '%s': ", r->file, g->name);
    if (!g->n_nodes) kn_graph_recount(g);
    return KILN_OK;
}

static kiln_status get_tensor(dec *d, int depth, kn_tensor **out) {
    kn_rd *r = &d->r;
    *out = NULL;
    if (depth > MAX_TENSOR_DEPTH) return kn_rd_fail(r, "tensor", "sequences nest more than %d deep", MAX_TENSOR_DEPTH);
    uint8_t kind = kn_rd_u8(r, "tensor.kind");
    int32_t dtype = kn_rd_i32(r, "tensor.dtype");
    uint8_t rank = kn_rd_u8(r, "tensor.rank");
    if (!kn_rd_ok(r)) return r->st;
    if (kind > KN_VALUE_OPTIONAL) return kn_rd_fail(r, "tensor.kind", "%u is not a value kind", kind);
    if (!kn_dtype_is_valid(dtype) || dtype == 0) return kn_rd_fail(r, "tensor.dtype", "%d is not an element type", dtype);
    if (rank > KILN_MAX_RANK) return kn_rd_fail(r, "tensor.rank", "%u exceeds %d", rank, KILN_MAX_RANK);
    if (kind != KN_VALUE_TENSOR && rank) return kn_rd_fail(r, "tensor.rank", "a sequence or optional has rank %u", rank);
    int64_t dims[KILN_MAX_RANK];
    for (int i = 0; i < rank; i++) dims[i] = kn_rd_i64(r, "tensor.dims");
    if (!kn_rd_ok(r)) return r->st;
    if (kind != KN_VALUE_TENSOR) {
        uint32_t n = kn_rd_count(r, 6, INT_MAX / 8, "tensor.n_items");
        if (!kn_rd_ok(r)) return r->st;
        if (kind == KN_VALUE_OPTIONAL && n > 1) return kn_rd_fail(r, "tensor.n_items", "an optional holds %u items", n);
        kn_tensor *c = NULL;
        if (kind == KN_VALUE_SEQUENCE) KN_TRY(kn_tensor_new_sequence((kiln_dtype)dtype, &c));
        else KN_TRY(kn_tensor_new_optional((kiln_dtype)dtype, NULL, &c));
        for (uint32_t i = 0; i < n; i++) {
            kn_tensor *item = NULL;
            kiln_status st = get_tensor(d, depth + 1, &item);
            if (st == KILN_OK) {
                if (kind == KN_VALUE_SEQUENCE) {
                    st = kn_sequence_append(c, item);
                    if (st != KILN_OK) kn_tensor_free(item);
                } else {
                    c->items = malloc(sizeof *c->items);
                    if (!c->items) {
                        kn_tensor_free(item);
                        st = KN_OOM();
                    } else {
                        c->items[0] = item;
                        c->n_items = 1;
                    }
                }
            }
            if (st != KILN_OK) {
                kn_tensor_free(c);
                return st;
            }
        }
        *out = c;
        return KILN_OK;
    }
    for (int i = 0; i < rank; i++)
        if (dims[i] < 0) return kn_rd_fail(r, "tensor.dims", "dimension %d is %lld", i, (long long)dims[i]);
    int64_t count = kn_shape_count(dims, rank);
    if (count < 0) return kn_rd_fail(r, "tensor.dims", "the element count overflows");
    if (dtype == KILN_DTYPE_STRING) {
        /* each element needs at least its 4-byte length: no allocation beyond what the file holds */
        if ((uint64_t)count > kn_rd_left(r) / 4) return kn_rd_fail(r, "tensor.strings", "%lld strings do not fit in the section", (long long)count);
        kn_tensor *t = NULL;
        KN_TRY(kn_tensor_new(KILN_DTYPE_STRING, rank, dims, &t));
        char **el = t->data;
        for (int64_t i = 0; i < count; i++) {
            uint32_t l = kn_rd_u32(r, "tensor.string.length");
            const uint8_t *p = kn_rd_bytes(r, l, "tensor.string");
            if (!p || memchr(p, 0, l)) {
                if (p) kn_rd_fail(r, "tensor.string", "element %lld holds a NUL byte", (long long)i);
                kn_tensor_free(t);
                return r->st;
            }
            el[i] = malloc((size_t)l + 1);
            if (!el[i]) {
                kn_tensor_free(t);
                return KN_OOM();
            }
            memcpy(el[i], p, l);
            el[i][l] = 0;
        }
        *out = t;
        return KILN_OK;
    }
    uint64_t off = kn_rd_u64(r, "tensor.offset"), nbytes = kn_rd_u64(r, "tensor.nbytes");
    if (!kn_rd_ok(r)) return r->st;
    /* fixed-size types, and the packed sub-byte ones (ceil(count * bits / 8) bytes) */
    if (kn_dtype_bits((kiln_dtype)dtype) == 0)
        return kn_rd_fail(r, "tensor.dtype", "element type %s has no byte size", kiln_dtype_name((kiln_dtype)dtype));
    if ((uint64_t)count > (uint64_t)INT64_MAX / 16 || nbytes != (uint64_t)kn_dtype_nbytes((kiln_dtype)dtype, count))
        return kn_rd_fail(r, "tensor.nbytes", "%llu bytes do not match %lld elements of %s", (unsigned long long)nbytes,
                          (long long)count, kiln_dtype_name((kiln_dtype)dtype));
    if (off % KN_CACHE_ALIGN) return kn_rd_fail(r, "tensor.offset", "%llu is not %d-byte aligned", (unsigned long long)off, KN_CACHE_ALIGN);
    if (off > d->weights_size || nbytes > d->weights_size - off)
        return kn_rd_fail(r, "tensor.offset", "bytes %llu..%llu lie outside the weights section (%zu bytes)",
                          (unsigned long long)off, (unsigned long long)(off + nbytes), d->weights_size);
    static uint8_t empty[KN_CACHE_ALIGN] __attribute__((aligned(KN_CACHE_ALIGN)));
    void *data = d->weights ? d->weights + off : empty;
    kiln_status st = kn_tensor_new_view((kiln_dtype)dtype, rank, dims, data, (size_t)nbytes, out);
    if (st != KILN_OK) return kn_error_prefix(KILN_ERR_CACHE, "%s: section 'graph', a tensor: ", r->file);
    return KILN_OK;
}

kiln_status kn_graph_decode(const uint8_t *data, size_t size, uint8_t *weights, size_t weights_size,
                            const char *file, kn_model **out) {
    *out = NULL;
    dec d;
    memset(&d, 0, sizeof d);
    kn_rd_init(&d.r, data, size, file, "graph");
    d.weights = weights;
    d.weights_size = weights_size;
    kn_rd *r = &d.r;
    KN_TRY(kn_model_new(&d.m));
    kiln_status st = KILN_OK;
    /* strings */
    d.n_strs = kn_rd_count(r, 4, INT_MAX / 8, "strings.count");
    d.strs = malloc(sizeof(char *) * (d.n_strs ? d.n_strs : 1));
    d.lens = malloc(sizeof(uint32_t) * (d.n_strs ? d.n_strs : 1));
    if (!d.strs || !d.lens) {
        st = KN_OOM();
        goto done;
    }
    for (uint32_t i = 0; i < d.n_strs && kn_rd_ok(r); i++) {
        uint32_t l = kn_rd_u32(r, "strings.length");
        const uint8_t *p = kn_rd_bytes(r, l, "strings.bytes");
        if (!p) break;
        d.strs[i] = kn_arena_strndup(&d.m->arena, (const char *)p, l);
        d.lens[i] = l;
        if (!d.strs[i]) {
            st = KN_OOM();
            goto done;
        }
    }
    if ((st = r->st) != KILN_OK) goto done;
    /* tensors */
    d.n_tens = kn_rd_count(r, 6, INT_MAX / 8, "tensors.count");
    d.tens = calloc(d.n_tens ? d.n_tens : 1, sizeof *d.tens);
    if (!d.tens) {
        st = KN_OOM();
        goto done;
    }
    for (uint32_t i = 0; i < d.n_tens && st == KILN_OK; i++) {
        kn_tensor *t = NULL;
        st = get_tensor(&d, 0, &t);
        if (st == KILN_OK) {
            st = kn_model_own_tensor(d.m, t);
            if (st != KILN_OK) kn_tensor_free(t);
            else d.tens[i] = t;
        }
    }
    if (st == KILN_OK) st = r->st;
    if (st != KILN_OK) goto done;
    /* the model */
    kn_model *m = d.m;
    m->ir_version = kn_rd_i64(r, "model.ir_version");
    m->producer_name = get_str(&d, "model.producer_name", true);
    m->producer_version = get_str(&d, "model.producer_version", true);
    m->model_domain = get_str(&d, "model.domain", true);
    m->doc = get_str(&d, "model.doc", true);
    m->model_version = kn_rd_i64(r, "model.model_version");
    uint32_t no = kn_rd_count(r, 12, 4096, "model.n_opsets");
    if ((st = r->st) != KILN_OK) goto done;
    m->opsets = kn_arena_alloc(&m->arena, sizeof(kn_opset_import) * (no ? no : 1));
    if (!m->opsets) {
        st = KN_OOM();
        goto done;
    }
    for (uint32_t i = 0; i < no && kn_rd_ok(r); i++) {
        m->opsets[i].domain = get_name(&d, "opset.domain");
        m->opsets[i].version = kn_rd_i64(r, "opset.version");
        m->n_opsets = (int)i + 1;
    }
    if ((st = r->st) != KILN_OK) goto done;
    st = get_graph(&d, NULL, 0, &m->graph);
    if (st == KILN_OK) st = r->st;
    if (st == KILN_OK && kn_rd_left(r))
        st = kn_rd_fail(r, "end", "%zu unexpected bytes after the main graph", kn_rd_left(r));
done:
    free(d.strs);
    free(d.lens);
    free(d.tens);
    if (st != KILN_OK) {
        kn_model_free(d.m);
        return st;
    }
    *out = d.m;
    return KILN_OK;
}

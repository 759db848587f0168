/* CPU kernels for control flow (If, Loop, Scan: exec/control_flow.c's semantics over host memory),
 * sequences and optionals. Bodies run through the executor (kn_exec_subgraph) with the current run
 * as their outer scope. */
#include "backend/cpu/cpu.h"
#include "exec/control_flow.h"
#include "exec/exec.h"

#include <stdlib.h>
#include <string.h>

/* Copies `count` elements (strings duplicated, so each tensor owns its own): the host mover's copy. */
static kiln_status copy_elems(kn_tensor *dst, int64_t doff, const kn_tensor *src, int64_t soff, int64_t count) {
    return kn_cf_host.copy_rows(NULL, dst, doff, 0, src, soff, 0, count, 1);
}

/* Replaces output i with value t (taking ownership). */
static void set_output(kn_kernel_ctx *c, int i, kn_tensor *t) { kn_cf_set_output(c, i, t); }

static int64_t inner_count(const kn_tensor *t, int axis) {
    int64_t n = 1;
    for (int d = axis + 1; d < t->rank; d++) n *= t->dims[d];
    return n;
}
static int64_t outer_count(const kn_tensor *t, int axis) {
    int64_t n = 1;
    for (int d = 0; d < axis; d++) n *= t->dims[d];
    return n;
}

/* If, Loop and Scan: the executor's driver (exec/control_flow.c) over host memory, which the CUDA
 * backend runs over device memory. */
static kiln_status run_if(kn_kernel_ctx *c) { return kn_cf_if(c, &kn_cf_host); }
static kiln_status run_loop(kn_kernel_ctx *c) { return kn_cf_loop(c, &kn_cf_host); }
static kiln_status run_scan(kn_kernel_ctx *c) { return kn_cf_scan(c, &kn_cf_host); }

static const kn_graph *graph_attr(const kn_node *n, const char *name) {
    const kn_attr *a = kn_node_attr(n, name);
    return a && a->type == KN_ATTR_GRAPH ? a->g : NULL;
}

/* The sequence and optional kernels' attributes, read once (their prepare hook) */
typedef struct seq_prm {
    kiln_dtype dtype;     /* SequenceEmpty */
    int64_t axis;         /* SplitToSequence, ConcatFromSequence */
    int keepdims, new_axis;
    const kn_graph *body; /* SequenceMap */
    kiln_dtype opt_type;  /* Optional's type attribute (UNDEFINED: none) */
} seq_prm;

static kiln_status seq_prepare(const kn_node *n, void *params) {
    seq_prm *p = params;
    memset(p, 0, sizeof *p);
    p->dtype = (kiln_dtype)kn_attr_int(n, "dtype", KILN_DTYPE_FLOAT);
    p->axis = kn_attr_int(n, "axis", 0);
    p->keepdims = (int)kn_attr_int(n, "keepdims", 1);
    p->new_axis = (int)kn_attr_int(n, "new_axis", 0);
    p->body = graph_attr(n, "body");
    const kn_attr *a = kn_node_attr(n, "type");
    p->opt_type = a && a->type == KN_ATTR_TYPE_PROTO && a->type_protos ? a->type_protos[0].dtype : KILN_DTYPE_UNDEFINED;
    return KILN_OK;
}

/* ---- sequences ---- */

static kiln_status seq_clone_into(kn_kernel_ctx *c, const kn_tensor *src, kn_tensor **out) {
    if (src->kind != KN_VALUE_SEQUENCE) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "input 0 is not a sequence");
    return kn_tensor_clone(src, out);
}

static kiln_status seq_position(kn_kernel_ctx *c, const kn_tensor *pos, int n, int insert, int *out) {
    int64_t p = pos ? kn_tensor_get_i64(pos, 0) : (insert ? n : n - 1);
    int64_t hi = insert ? n : n - 1;
    if (p < -n || p > hi)
        return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "position %lld is outside [-%d, %lld]", (long long)p, n, (long long)hi);
    *out = (int)(p < 0 ? p + n : p);
    return KILN_OK;
}

static kiln_status run_sequence_empty(kn_kernel_ctx *c) {
    kn_tensor *s;
    KN_CTX_PRM(c, seq_prepare, seq_prm, prm);
    KN_TRY(kn_tensor_new_sequence(prm->dtype, &s));
    set_output(c, 0, s);
    return KILN_OK;
}

static kiln_status run_sequence_construct(kn_kernel_ctx *c) {
    kn_tensor *s;
    KN_TRY(kn_tensor_new_sequence(c->in[0]->dtype, &s));
    for (int i = 0; i < c->n_inputs; i++) {
        kn_tensor *t;
        kiln_status st = kn_tensor_clone(c->in[i], &t);
        if (st == KILN_OK) st = kn_sequence_append(s, t);
        if (st != KILN_OK) {
            kn_tensor_free(s);
            return st;
        }
    }
    set_output(c, 0, s);
    return KILN_OK;
}

static kiln_status run_sequence_insert(kn_kernel_ctx *c) {
    kn_tensor *s, *t;
    KN_TRY(seq_clone_into(c, c->in[0], &s));
    int pos = 0;
    kiln_status st = seq_position(c, c->n_inputs > 2 ? c->in[2] : NULL, s->n_items, 1, &pos);
    if (st == KILN_OK) st = kn_tensor_clone(c->in[1], &t);
    if (st == KILN_OK && (st = kn_sequence_append(s, t)) == KILN_OK) {
        memmove(&s->items[pos + 1], &s->items[pos], sizeof(kn_tensor *) * (size_t)(s->n_items - 1 - pos));
        s->items[pos] = t;
    }
    if (st != KILN_OK) {
        kn_tensor_free(s);
        return st;
    }
    set_output(c, 0, s);
    return KILN_OK;
}

static kiln_status run_sequence_erase(kn_kernel_ctx *c) {
    kn_tensor *s;
    KN_TRY(seq_clone_into(c, c->in[0], &s));
    int pos = 0;
    kiln_status st = s->n_items ? seq_position(c, c->n_inputs > 1 ? c->in[1] : NULL, s->n_items, 0, &pos)
                                : kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "erase from an empty sequence");
    if (st != KILN_OK) {
        kn_tensor_free(s);
        return st;
    }
    kn_tensor_free(s->items[pos]);
    memmove(&s->items[pos], &s->items[pos + 1], sizeof(kn_tensor *) * (size_t)(s->n_items - 1 - pos));
    s->n_items--;
    set_output(c, 0, s);
    return KILN_OK;
}

static kiln_status run_sequence_at(kn_kernel_ctx *c) {
    const kn_tensor *s = c->in[0];
    if (s->kind != KN_VALUE_SEQUENCE) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "input 0 is not a sequence");
    int pos = 0;
    KN_TRY(seq_position(c, c->in[1], s->n_items, 0, &pos));
    kn_tensor *t;
    KN_TRY(kn_tensor_clone(s->items[pos], &t));
    set_output(c, 0, t);
    return KILN_OK;
}

static kiln_status run_sequence_length(kn_kernel_ctx *c) {
    kn_tensor *t;
    KN_TRY(kn_ctx_output(c, 0, KILN_DTYPE_INT64, 0, NULL, &t));
    ((int64_t *)t->data)[0] = c->in[0]->n_items;
    return KILN_OK;
}

static kiln_status run_split_to_sequence(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *split = c->n_inputs > 1 ? c->in[1] : NULL;
    KN_CTX_PRM(c, seq_prepare, seq_prm, prm);
    int64_t axis = prm->axis;
    int keepdims = prm->keepdims;
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis is out of range");
    int64_t len = x->dims[axis];
    int64_t sizes_buf[4096], *sizes = sizes_buf, n = 0;
    if (!split) {
        n = len;
        if (n > 4096) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "more than 4096 pieces");
        for (int64_t i = 0; i < n; i++) sizes[i] = 1;
    } else if (split->rank == 0) {
        int64_t chunk = kn_tensor_get_i64(split, 0);
        if (chunk <= 0) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "split size %lld is not positive", (long long)chunk);
        for (int64_t off = 0; off < len && n < 4096; off += chunk) sizes[n++] = off + chunk <= len ? chunk : len - off;
        keepdims = 1;
    } else {
        n = kn_tensor_count(split);
        if (n > 4096) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "more than 4096 pieces");
        int64_t total = 0;
        for (int64_t i = 0; i < n; i++) total += sizes[i] = kn_tensor_get_i64(split, i);
        if (total != len) return kn_kernel_error(c, KILN_ERR_SHAPE, "split sizes add up to %lld, the axis is %lld", (long long)total, (long long)len);
        keepdims = 1;
    }
    kn_tensor *s;
    KN_TRY(kn_tensor_new_sequence(x->dtype, &s));
    int64_t outer = outer_count(x, (int)axis), inner = inner_count(x, (int)axis), off = 0;
    for (int64_t p = 0; p < n; p++) {
        int64_t dims[KILN_MAX_RANK];
        int r = 0;
        for (int d = 0; d < x->rank; d++) {
            if (d == axis && !keepdims) continue;
            dims[r++] = d == axis ? sizes[p] : x->dims[d];
        }
        kn_tensor *t;
        kiln_status st = kn_tensor_new(x->dtype, r, dims, &t);
        for (int64_t o = 0; st == KILN_OK && o < outer; o++)
            st = copy_elems(t, o * sizes[p] * inner, x, (o * len + off) * inner, sizes[p] * inner);
        if (st == KILN_OK) st = kn_sequence_append(s, t);
        else kn_tensor_free(t);
        if (st != KILN_OK) {
            kn_tensor_free(s);
            return st;
        }
        off += sizes[p];
    }
    set_output(c, 0, s);
    return KILN_OK;
}

static kiln_status run_concat_from_sequence(kn_kernel_ctx *c) {
    const kn_tensor *s = c->in[0];
    KN_CTX_PRM(c, seq_prepare, seq_prm, prm);
    int new_axis = prm->new_axis;
    int64_t axis = prm->axis;
    if (s->n_items == 0) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "the sequence is empty");
    const kn_tensor *f = s->items[0];
    int rank = f->rank + (new_axis ? 1 : 0);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis is out of range");
    if (new_axis) {
        kn_tensor *t;
        KN_TRY(kn_cf_stack(c, &kn_cf_host, s->items, s->n_items, (int)axis, 0, f->dtype, &t));
        set_output(c, 0, t);
        return KILN_OK;
    }
    int64_t dims[KILN_MAX_RANK], total = 0;
    for (int i = 0; i < s->n_items; i++) {
        const kn_tensor *t = s->items[i];
        if (t->rank != f->rank) return kn_kernel_error(c, KILN_ERR_SHAPE, "sequence items have different ranks");
        for (int d = 0; d < f->rank; d++)
            if (d != axis && t->dims[d] != f->dims[d])
                return kn_kernel_error(c, KILN_ERR_SHAPE, "item %d differs from item 0 in dimension %d", i, d);
        total += t->dims[axis];
    }
    memcpy(dims, f->dims, sizeof(int64_t) * (size_t)f->rank);
    dims[axis] = total;
    kn_tensor *out;
    KN_TRY(kn_tensor_new(f->dtype, f->rank, dims, &out));
    int64_t outer = outer_count(f, (int)axis), inner = inner_count(f, (int)axis), off = 0;
    for (int i = 0; i < s->n_items; i++) {
        const kn_tensor *t = s->items[i];
        for (int64_t o = 0; o < outer; o++) {
            kiln_status st = copy_elems(out, (o * total + off) * inner, t, o * t->dims[axis] * inner, t->dims[axis] * inner);
            if (st != KILN_OK) {
                kn_tensor_free(out);
                return st;
            }
        }
        off += t->dims[axis];
    }
    set_output(c, 0, out);
    return KILN_OK;
}

static kiln_status run_sequence_map(kn_kernel_ctx *c) {
    KN_CTX_PRM(c, seq_prepare, seq_prm, prm);
    const kn_graph *body = prm->body;
    const kn_tensor *first = c->in[0];
    int n = first->n_items;
    for (int i = 1; i < c->n_inputs; i++)
        if (c->in[i] && c->in[i]->kind == KN_VALUE_SEQUENCE && c->in[i]->n_items != n)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "the sequences have different lengths");
    kn_tensor **seqs = calloc((size_t)c->n_outputs, sizeof *seqs);
    kn_tensor **args = calloc((size_t)c->n_inputs, sizeof *args);
    kn_tensor **outs = calloc((size_t)c->n_outputs, sizeof *outs);
    kiln_status st = (seqs && args && outs) ? KILN_OK : KN_OOM();
    for (int o = 0; st == KILN_OK && o < c->n_outputs; o++)
        st = kn_tensor_new_sequence(body->values[body->outputs[o]].type.dtype, &seqs[o]);
    for (int k = 0; st == KILN_OK && k < n; k++) {
        for (int i = 0; i < c->n_inputs; i++)
            args[i] = c->in[i]->kind == KN_VALUE_SEQUENCE ? c->in[i]->items[k] : c->in[i];
        st = kn_exec_subgraph(c, body, args, c->n_inputs, outs, c->n_outputs);
        for (int o = 0; st == KILN_OK && o < c->n_outputs; o++) {
            if (seqs[o]->dtype == KILN_DTYPE_UNDEFINED) seqs[o]->dtype = outs[o]->dtype;
            st = kn_sequence_append(seqs[o], outs[o]);
            if (st != KILN_OK)
                for (int r = o; r < c->n_outputs; r++) kn_tensor_free(outs[r]);
        }
    }
    for (int o = 0; seqs && o < c->n_outputs; o++) {
        if (st == KILN_OK) set_output(c, o, seqs[o]);
        else kn_tensor_free(seqs[o]);
    }
    free(seqs);
    free(args);
    free(outs);
    return st;
}

/* ---- optionals ---- */

static kiln_status run_optional(kn_kernel_ctx *c) {
    kn_tensor *item = NULL, *opt;
    kiln_dtype dt = KILN_DTYPE_UNDEFINED;
    if (c->n_inputs > 0 && c->in[0]) {
        KN_TRY(kn_tensor_clone(c->in[0], &item));
        dt = item->dtype;
    } else {
        KN_CTX_PRM(c, seq_prepare, seq_prm, prm);
        if (prm->opt_type != KILN_DTYPE_UNDEFINED) dt = prm->opt_type;
    }
    kiln_status st = kn_tensor_new_optional(dt, item, &opt);
    if (st != KILN_OK) {
        kn_tensor_free(item);
        return st;
    }
    set_output(c, 0, opt);
    return KILN_OK;
}

static kiln_status run_optional_has_element(kn_kernel_ctx *c) {
    kn_tensor *t;
    KN_TRY(kn_ctx_output(c, 0, KILN_DTYPE_BOOL, 0, NULL, &t));
    const kn_tensor *x = c->n_inputs > 0 ? c->in[0] : NULL;
    ((uint8_t *)t->data)[0] = x && (x->kind != KN_VALUE_OPTIONAL || x->n_items > 0);
    return KILN_OK;
}

static kiln_status run_optional_get_element(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    if (x->kind == KN_VALUE_OPTIONAL) {
        if (!x->n_items) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "the optional input is empty");
        x = x->items[0];
    }
    kn_tensor *t;
    KN_TRY(kn_tensor_clone(x, &t));
    set_output(c, 0, t);
    return KILN_OK;
}

const kn_cpu_kernel kn_cpu_control[] = {
    {"", "If", run_if, NULL, 0, KN_PARAMS(kn_cf_prepare, kn_cf_prm)},
    {"", "Loop", run_loop, NULL, 0, KN_PARAMS(kn_cf_prepare, kn_cf_prm)},
    {"", "Scan", run_scan, NULL, 0, KN_PARAMS(kn_cf_prepare, kn_cf_prm)},
    {"", "SequenceEmpty", run_sequence_empty, NULL, 0, KN_PARAMS(seq_prepare, seq_prm)},
    {"", "SequenceConstruct", run_sequence_construct, NULL},
    {"", "SequenceInsert", run_sequence_insert, NULL},
    {"", "SequenceErase", run_sequence_erase, NULL},
    {"", "SequenceAt", run_sequence_at, NULL},
    {"", "SequenceLength", run_sequence_length, NULL},
    {"", "SplitToSequence", run_split_to_sequence, NULL, 0, KN_PARAMS(seq_prepare, seq_prm)},
    {"", "ConcatFromSequence", run_concat_from_sequence, NULL, 0, KN_PARAMS(seq_prepare, seq_prm)},
    {"", "SequenceMap", run_sequence_map, NULL, 0, KN_PARAMS(seq_prepare, seq_prm)},
    {"", "Optional", run_optional, NULL, 0, KN_PARAMS(seq_prepare, seq_prm)},
    {"", "OptionalHasElement", run_optional_has_element, NULL},
    {"", "OptionalGetElement", run_optional_get_element, NULL},
    {0},
};

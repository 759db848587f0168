/* Shared helpers for operators' shape-inference functions. */
#include "ops/op.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

kiln_status kn_infer_error(const kn_infer_ctx *c, kiln_status status, const char *fmt, ...) {
    char lbl[256], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kn_error(status, "%s: %s", kn_node_label(c->node, lbl, sizeof lbl), msg);
}

kiln_status kn_infer_same(kn_infer_ctx *c, int i, int o) {
    if (i >= c->n_inputs || !c->in[i] || o >= c->n_outputs)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "missing input %d", i);
    c->out[o] = *c->in[i];
    c->out[o].n_shape_value = -1;
    return KILN_OK;
}

void kn_infer_set(kn_infer_ctx *c, int o, kiln_dtype dtype, int rank, const int64_t *dims) {
    if (o < c->n_outputs) kn_type_set_tensor(&c->out[o], dtype, rank, dims);
}

kiln_status kn_broadcast_types(const kn_type *a, const kn_type *b, kn_type *out, char *why, size_t cap) {
    kn_type r = *out;
    r.kind = KN_TYPE_TENSOR;
    r.n_shape_value = -1;
    if (a->rank < 0 || b->rank < 0) {
        r.rank = -1;
        *out = r;
        return KILN_OK;
    }
    int rank = a->rank > b->rank ? a->rank : b->rank;
    r.rank = rank;
    for (int k = 0; k < rank; k++) {
        int ia = k - (rank - a->rank), ib = k - (rank - b->rank);
        kn_dim da = ia >= 0 ? a->dims[ia] : (kn_dim){1, NULL};
        kn_dim db = ib >= 0 ? b->dims[ib] : (kn_dim){1, NULL};
        kn_dim d = {-1, NULL};
        if (da.value >= 0 && db.value >= 0) {
            if (da.value == db.value || db.value == 1) d = da;
            else if (da.value == 1) d = db;
            else {
                char sa[256], sb[256];
                snprintf(why, cap, "shapes %s and %s cannot broadcast (dimension %d: %lld vs %lld)",
                         kn_type_str(a, sa, sizeof sa), kn_type_str(b, sb, sizeof sb), k,
                         (long long)da.value, (long long)db.value);
                return KILN_ERR_SHAPE;
            }
        } else if (da.value == 1) {
            d = db;
        } else if (db.value == 1) {
            d = da;
        } else if (da.symbol && db.symbol && !strcmp(da.symbol, db.symbol)) {
            d = da;
        } else if (da.value > 1) {
            d = da; /* the other is unknown: it must be 1 or equal */
        } else if (db.value > 1) {
            d = db;
        }
        r.dims[k] = d;
    }
    *out = r;
    return KILN_OK;
}

kiln_status kn_infer_broadcast(kn_infer_ctx *c, int o, kiln_dtype dtype) {
    kn_type acc;
    bool first = true;
    for (int i = 0; i < c->n_inputs; i++) {
        if (!c->in[i]) continue;
        if (first) {
            acc = *c->in[i];
            acc.n_shape_value = -1;
            first = false;
            continue;
        }
        char why[768];
        if (kn_broadcast_types(&acc, c->in[i], &acc, why, sizeof why) != KILN_OK)
            return kn_infer_error(c, KILN_ERR_SHAPE, "%s", why);
    }
    if (first) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "no inputs");
    acc.kind = KN_TYPE_TENSOR;
    if (dtype != KILN_DTYPE_UNDEFINED) acc.dtype = dtype;
    c->out[o] = acc;
    return KILN_OK;
}

kiln_status kn_infer_axis(const kn_infer_ctx *c, int64_t axis, int rank, const char *what, int *axis_out) {
    if (axis < -rank || axis >= rank || rank == 0)
        if (!(rank == 0 && (axis == 0 || axis == -1)))
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "%s %lld is out of range for rank %d",
                                  what, (long long)axis, rank);
    *axis_out = (int)(axis < 0 ? axis + rank : axis);
    return KILN_OK;
}

kiln_status kn_infer_int_list(const kn_infer_ctx *c, int i, int64_t *vals, int cap, int *count_out) {
    *count_out = -1;
    if (i >= c->n_inputs || !c->in_value[i]) return KILN_OK;
    const kn_tensor *t = c->in_value[i];
    if (t->kind != KN_VALUE_TENSOR || !(kn_dtype_is_int(t->dtype)))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d must be an integer tensor, got %s", i,
                              kiln_dtype_name(t->dtype));
    if (t->rank > 1)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d must be 1-D, got rank %d", i, t->rank);
    int64_t n = kn_tensor_count(t);
    if (n > cap)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "input %d has %lld elements; at most %d supported", i,
                              (long long)n, cap);
    for (int64_t k = 0; k < n; k++) vals[k] = kn_tensor_get_i64(t, k);
    *count_out = (int)n;
    return KILN_OK;
}

/* The tensor family: shape and data movement (Reshape, Transpose, Gather, Slice, Concat, ...).
 * Schemas and shape inference. The index/scatter/misc operators' inference lives in
 * tensor_more.c; the table here lists them all.
 *
 * Shape values: small 1-D int64 tensors that describe shapes carry their elements in
 * kn_type.shape_value (each known or symbolic), so Shape -> Gather -> Unsqueeze -> Concat ->
 * Reshape resolves to symbolic output dims at load time. A scalar carries one element. */
#include "ops/tensor_infer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ helpers */

bool kn_ti_has(const kn_infer_ctx *c, int i) { return i < c->n_inputs && c->in[i]; }

kiln_dtype kn_ti_dtype(const kn_infer_ctx *c, int i) {
    return kn_ti_has(c, i) ? c->in[i]->dtype : KILN_DTYPE_UNDEFINED;
}

int kn_ti_rank(const kn_infer_ctx *c, int i) { return kn_ti_has(c, i) ? c->in[i]->rank : -1; }

const kn_tensor *kn_ti_value(const kn_infer_ctx *c, int i) {
    return i < c->n_inputs && c->in[i] ? c->in_value[i] : NULL;
}

void kn_ti_set(kn_infer_ctx *c, int o, kiln_dtype dtype, int rank, const kn_dim *dims) {
    if (o < 0 || o >= c->n_outputs) return;
    kn_type *t = &c->out[o];
    kn_type_init(t);
    t->kind = KN_TYPE_TENSOR;
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank && i < KILN_MAX_RANK; i++) t->dims[i] = dims ? dims[i] : kn_ti_unknown();
}

void kn_ti_set_unknown_rank(kn_infer_ctx *c, int o, kiln_dtype dtype) { kn_ti_set(c, o, dtype, -1, NULL); }

void kn_ti_dims_of(const kn_type *t, int64_t *dims) {
    for (int i = 0; i < t->rank; i++) dims[i] = t->dims[i].value;
}

kn_dim kn_ti_product(const kn_dim *d, int n) {
    int64_t p = 1;
    kn_dim sym = {-1, NULL};
    int n_sym = 0;
    for (int i = 0; i < n; i++) {
        if (d[i].value >= 0) {
            if (d[i].value != 0 && p > INT64_MAX / d[i].value) return kn_ti_unknown();
            p *= d[i].value;
        } else if (d[i].symbol) {
            sym = d[i];
            n_sym++;
        } else {
            return p == 0 ? kn_ti_known(0) : kn_ti_unknown();
        }
    }
    if (p == 0) return kn_ti_known(0);
    if (n_sym == 0) return kn_ti_known(p);
    if (n_sym == 1 && p == 1) return sym;
    return kn_ti_unknown();
}

int kn_ti_sv(const kn_infer_ctx *c, int i, kn_dim *out) {
    if (!kn_ti_has(c, i)) return -1;
    const kn_tensor *v = c->in_value[i];
    if (v) {
        int64_t vals[KILN_MAX_RANK];
        int n = kn_tensor_ints(v, vals, KILN_MAX_RANK);
        for (int k = 0; k < n; k++) out[k] = vals[k] >= 0 ? kn_ti_known(vals[k]) : kn_ti_unknown();
        return n;
    }
    const kn_type *t = c->in[i];
    if (t->n_shape_value < 0 || t->n_shape_value > KILN_MAX_RANK || t->rank > 1) return -1;
    for (int k = 0; k < t->n_shape_value; k++) out[k] = t->shape_value[k];
    return t->n_shape_value;
}

void kn_ti_put_sv(kn_infer_ctx *c, int o, const kn_dim *v, int n) {
    if (o < 0 || o >= c->n_outputs || n < 0 || n > KILN_MAX_RANK) return;
    kn_type *t = &c->out[o];
    if (t->kind != KN_TYPE_TENSOR || t->rank > 1) return;
    if (t->dtype != KILN_DTYPE_UNDEFINED && !kn_dtype_is_int(t->dtype)) return;
    if (t->rank == 0 && n != 1) return;
    if (t->rank == 1 && t->dims[0].value >= 0 && t->dims[0].value != n) return;
    if (t->rank == 1) t->dims[0] = kn_ti_known(n);
    t->n_shape_value = n;
    for (int k = 0; k < n; k++) t->shape_value[k] = v[k];
}

kiln_status kn_ti_need(const kn_infer_ctx *c, int n) {
    for (int i = 0; i < n; i++)
        if (!kn_ti_has(c, i)) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d is required but missing", i);
    return KILN_OK;
}

kiln_status kn_ti_fail(const kn_infer_ctx *c, kiln_status st, const char *why) {
    return kn_infer_error(c, st, "%s", why);
}

/* The parameter functions read values from a `const kn_tensor *const *` array. */
#define VALS(c) ((const kn_tensor *const *)(c)->in_value), (c)->n_inputs

static const char *type_str(const kn_type *t, char *buf, size_t cap) { return kn_type_str(t, buf, cap); }

static const char *ints_str(const int64_t *v, int n, char *buf, size_t cap) { return kn_dims_str(v, n, buf, cap); }

/* ------------------------------------------------------------------ Constant */

static kiln_status infer_constant(kn_infer_ctx *c) {
    static const char *names[] = {"value", "sparse_value", "value_float", "value_floats",
                                  "value_int", "value_ints", "value_string", "value_strings"};
    const kn_attr *found = NULL;
    int count = 0;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const kn_attr *a = kn_node_attr(c->node, names[k]);
        if (a) {
            found = a;
            count++;
        }
    }
    if (count != 1)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL,
                              "needs exactly one of the attributes value, value_float(s), value_int(s), "
                              "value_string(s), sparse_value; it has %d", count);
    const char *nm = found->name;
    int64_t len;
    if (!strcmp(nm, "sparse_value"))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "sparse_value constants are not supported");
    if (!strcmp(nm, "value")) {
        if (found->type != KN_ATTR_TENSOR || !found->t)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attribute 'value' must be a tensor");
        const kn_tensor *t = found->t;
        kn_type_set_tensor(&c->out[0], t->dtype, t->rank, t->dims);
        int64_t vals[KILN_MAX_RANK];
        int n = kn_tensor_ints(t, vals, KILN_MAX_RANK);
        if (n >= 0) {
            kn_dim sv[KILN_MAX_RANK];
            for (int k = 0; k < n; k++) sv[k] = vals[k] >= 0 ? kn_ti_known(vals[k]) : kn_ti_unknown();
            kn_ti_put_sv(c, 0, sv, n);
        }
        return KILN_OK;
    }
    kn_attr_type want = !strcmp(nm, "value_float")    ? KN_ATTR_FLOAT
                        : !strcmp(nm, "value_floats") ? KN_ATTR_FLOATS
                        : !strcmp(nm, "value_int")    ? KN_ATTR_INT
                        : !strcmp(nm, "value_ints")   ? KN_ATTR_INTS
                        : !strcmp(nm, "value_string") ? KN_ATTR_STRING
                                                      : KN_ATTR_STRINGS;
    KN_TRY(kn_attr_check(c->node, nm, want));
    len = found->n;
    switch (want) {
    case KN_ATTR_FLOAT: kn_type_set_tensor(&c->out[0], KILN_DTYPE_FLOAT, 0, NULL); break;
    case KN_ATTR_FLOATS: kn_type_set_tensor(&c->out[0], KILN_DTYPE_FLOAT, 1, &len); break;
    case KN_ATTR_STRING: kn_type_set_tensor(&c->out[0], KILN_DTYPE_STRING, 0, NULL); break;
    case KN_ATTR_STRINGS: kn_type_set_tensor(&c->out[0], KILN_DTYPE_STRING, 1, &len); break;
    case KN_ATTR_INT: {
        kn_type_set_tensor(&c->out[0], KILN_DTYPE_INT64, 0, NULL);
        kn_dim sv = found->i >= 0 ? kn_ti_known(found->i) : kn_ti_unknown();
        kn_ti_put_sv(c, 0, &sv, 1);
        break;
    }
    default: {
        kn_type_set_tensor(&c->out[0], KILN_DTYPE_INT64, 1, &len);
        if (found->n <= KILN_MAX_RANK) {
            kn_dim sv[KILN_MAX_RANK];
            for (int k = 0; k < found->n; k++)
                sv[k] = found->ints[k] >= 0 ? kn_ti_known(found->ints[k]) : kn_ti_unknown();
            kn_ti_put_sv(c, 0, sv, found->n);
        }
        break;
    }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ Identity, Dropout */

static kiln_status infer_identity(kn_infer_ctx *c) {
    if (!kn_ti_has(c, 0)) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input is missing");
    c->out[0] = *c->in[0];
    kn_dim sv[KILN_MAX_RANK];
    int n = kn_ti_sv(c, 0, sv);
    c->out[0].n_shape_value = -1;
    if (n >= 0) kn_ti_put_sv(c, 0, sv, n);
    return KILN_OK;
}

static kiln_status infer_dropout(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    KN_TRY(infer_identity(c));
    const kn_tensor *r = kn_ti_value(c, 1);
    if (r && r->kind == KN_VALUE_TENSOR && kn_tensor_count(r) == 1 && kn_dtype_is_float(r->dtype)) {
        double ratio = kn_tensor_get_f64(r, 0);
        if (!(ratio >= 0 && ratio < 1))
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "ratio %g is outside [0, 1)", ratio);
    }
    if (c->n_outputs > 1) {
        const kn_type *x = c->in[0];
        kn_ti_set(c, 1, c->node->opset >= 10 ? KILN_DTYPE_BOOL : x->dtype, x->rank, x->dims);
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ Shape, Size */

static kiln_status infer_shape(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    kn_dim len = kn_ti_unknown();
    int r = x->rank;
    int64_t start = kn_attr_int(c->node, "start", 0), end = kn_attr_int(c->node, "end", INT64_MAX);
    if (r >= 0) {
        if (start < 0) start += r;
        if (end < 0) end += r;
        start = start < 0 ? 0 : start > r ? r : start;
        end = end < 0 ? 0 : end > r ? r : end;
        len = kn_ti_known(end > start ? end - start : 0);
    }
    kn_ti_set(c, 0, KILN_DTYPE_INT64, 1, &len);
    if (r >= 0) kn_ti_put_sv(c, 0, x->dims + start, (int)len.value);
    return KILN_OK;
}

static kiln_status infer_size(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    kn_ti_set(c, 0, KILN_DTYPE_INT64, 0, NULL);
    if (x->rank >= 0) {
        kn_dim p = kn_ti_product(x->dims, x->rank);
        if (p.value >= 0 || p.symbol) kn_ti_put_sv(c, 0, &p, 1);
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ Reshape */

static bool mul_ok(int64_t *acc, int64_t v) {
    if (v != 0 && *acc > INT64_MAX / v) return false;
    *acc *= v;
    return true;
}

/* The size of out[skip] that gives out as many elements as x: known, a symbol of x's that the
 * other dims do not account for, or unknown. *bad when fully known sizes prove no size fits. */
static kn_dim solve_dim(const kn_type *x, const kn_dim *out, int n, int skip, bool *bad) {
    int64_t pin = 1, pout = 1;
    const char *sin[KILN_MAX_RANK];
    bool used[KILN_MAX_RANK] = {false};
    int nsin = 0;
    *bad = false;
    for (int i = 0; i < x->rank; i++) {
        kn_dim d = x->dims[i];
        if (d.value >= 0) {
            if (!mul_ok(&pin, d.value)) return kn_ti_unknown();
        } else if (d.symbol) {
            sin[nsin++] = d.symbol;
        } else {
            return kn_ti_unknown();
        }
    }
    for (int k = 0; k < n; k++) {
        if (k == skip) continue;
        kn_dim d = out[k];
        if (d.value >= 0) {
            if (!mul_ok(&pout, d.value)) return kn_ti_unknown();
        } else if (d.symbol) {
            int j = 0;
            while (j < nsin && (used[j] || strcmp(sin[j], d.symbol))) j++;
            if (j == nsin) return kn_ti_unknown();
            used[j] = true;
        } else {
            return kn_ti_unknown();
        }
    }
    int left = 0, lj = -1;
    for (int j = 0; j < nsin; j++)
        if (!used[j]) left++, lj = j;
    if (left == 0) {
        if (pout == 0) {
            *bad = pin != 0 && nsin == 0;
            return kn_ti_unknown();
        }
        if (pin % pout) {
            *bad = nsin == 0;
            return kn_ti_unknown();
        }
        return kn_ti_known(pin / pout);
    }
    if (left == 1 && pin == pout && pout != 0) return (kn_dim){-1, sin[lj]};
    return kn_ti_unknown();
}

static kiln_status infer_reshape(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    const kn_node *nd = c->node;
    int allowzero = nd->opset >= 14 ? (int)kn_attr_int(nd, "allowzero", 0) : 0;
    int64_t raw[KILN_MAX_RANK];
    kn_dim tgt[KILN_MAX_RANK], out[KILN_MAX_RANK];
    int n = -1;
    bool concrete = false;
    char xs[256], ts[256];
    if (nd->opset < 5) {
        const int64_t *s = kn_attr_ints(nd, "shape", &n);
        if (!kn_node_attr(nd, "shape"))
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attribute 'shape' is required");
        if (n > KILN_MAX_RANK)
            return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "target rank %d exceeds %d", n, KILN_MAX_RANK);
        if (n) memcpy(raw, s, sizeof(int64_t) * (size_t)n);
        concrete = true;
    } else {
        if (!kn_ti_has(c, 1)) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input 'shape' is missing");
        KN_TRY(kn_infer_int_list(c, 1, raw, KILN_MAX_RANK, &n));
        if (n >= 0) {
            concrete = true;
        } else if ((n = kn_ti_sv(c, 1, tgt)) < 0) {
            const kn_type *s = c->in[1];
            if (s->rank == 1 && s->dims[0].value >= 0 && s->dims[0].value <= KILN_MAX_RANK)
                kn_ti_set(c, 0, x->dtype, (int)s->dims[0].value, NULL);
            else
                kn_ti_set_unknown_rank(c, 0, x->dtype);
            return KILN_OK;
        }
    }
    int infer_at = -1, n_infer = 0;
    bool has_zero = false;
    for (int k = 0; k < n; k++) {
        if (concrete) {
            int64_t v = raw[k];
            if (v < -1)
                return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "shape %s has the invalid dimension %lld",
                                      ints_str(raw, n, ts, sizeof ts), (long long)v);
            if (v == -1) {
                if (n_infer)
                    return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "shape %s has more than one -1",
                                          ints_str(raw, n, ts, sizeof ts));
                n_infer++, infer_at = k;
                out[k] = kn_ti_unknown();
                continue;
            }
            tgt[k] = kn_ti_known(v);
        }
        kn_dim e = tgt[k];
        if (e.value == 0 && !allowzero) {
            has_zero = true;
            if (x->rank >= 0 && k >= x->rank) {
                if (concrete)
                    return kn_infer_error(c, KILN_ERR_SHAPE,
                                          "shape %s copies dimension %d (0) but the input %s has rank %d",
                                          ints_str(raw, n, ts, sizeof ts), k, type_str(x, xs, sizeof xs),
                                          x->rank);
                out[k] = kn_ti_unknown();
            } else {
                out[k] = x->rank >= 0 ? x->dims[k] : kn_ti_unknown();
            }
        } else if (e.value >= 0 || e.symbol) {
            if (e.value == 0) has_zero = true;
            out[k] = e;
        } else {
            out[k] = kn_ti_unknown();
            n_infer++, infer_at = k;
        }
    }
    if (concrete && allowzero && has_zero && n_infer)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "shape %s has both 0 and -1 with allowzero=1",
                              ints_str(raw, n, ts, sizeof ts));
    if (x->rank >= 0) {
        if (n_infer == 1) {
            bool bad;
            out[infer_at] = solve_dim(x, out, n, infer_at, &bad);
            if (bad && concrete)
                return kn_infer_error(c, KILN_ERR_SHAPE, "cannot reshape input %s to shape %s: the element counts do not divide",
                                      type_str(x, xs, sizeof xs), ints_str(raw, n, ts, sizeof ts));
        } else if (n_infer == 0) {
            kn_dim pi = kn_ti_product(x->dims, x->rank), po = kn_ti_product(out, n);
            if (pi.value >= 0 && po.value >= 0 && pi.value != po.value) {
                if (concrete)
                    return kn_infer_error(c, KILN_ERR_SHAPE,
                                          "cannot reshape input %s (%lld elements) to shape %s (%lld elements)",
                                          type_str(x, xs, sizeof xs), (long long)pi.value,
                                          ints_str(raw, n, ts, sizeof ts), (long long)po.value);
            }
        }
    }
    kn_ti_set(c, 0, x->dtype, n, out);
    if (n <= 1) {
        kn_dim sv[KILN_MAX_RANK];
        int ns = kn_ti_sv(c, 0, sv);
        if (ns >= 0) kn_ti_put_sv(c, 0, sv, ns);
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ Flatten */

static kiln_status infer_flatten(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    int64_t axis = kn_attr_int(c->node, "axis", 1);
    if (x->rank < 0) {
        kn_ti_set(c, 0, x->dtype, 2, NULL);
        return KILN_OK;
    }
    int r = x->rank;
    if (axis < -r || axis > r)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "axis %lld is out of range for rank %d",
                              (long long)axis, r);
    if (axis < 0) axis += r;
    kn_dim out[2] = {kn_ti_product(x->dims, (int)axis), kn_ti_product(x->dims + axis, r - (int)axis)};
    kn_ti_set(c, 0, x->dtype, 2, out);
    return KILN_OK;
}

/* ------------------------------------------------------------------ Squeeze, Unsqueeze */

static void keep_sv(kn_infer_ctx *c) {
    kn_dim sv[KILN_MAX_RANK];
    int n = kn_ti_sv(c, 0, sv);
    if (n >= 0 && c->out[0].rank >= 0 && c->out[0].rank <= 1) kn_ti_put_sv(c, 0, sv, n);
}

static kiln_status infer_squeeze(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    int64_t axes[KILN_MAX_RANK];
    int na;
    bool present;
    char why[256], xs[256];
    kiln_status st = kn_axes_param(c->node, VALS(c), axes, &na, &present, why, sizeof why);
    if (st) return kn_ti_fail(c, st, why);
    int r = x->rank;
    if (r < 0) {
        kn_ti_set_unknown_rank(c, 0, x->dtype);
        return KILN_OK;
    }
    if (na < 0) {
        /* axes unknown: the rank still follows from how many there are */
        const kn_type *a = kn_ti_has(c, 1) ? c->in[1] : NULL;
        if (a && a->rank == 1 && a->dims[0].value >= 0 && a->dims[0].value <= r)
            kn_ti_set(c, 0, x->dtype, r - (int)a->dims[0].value, NULL);
        else
            kn_ti_set_unknown_rank(c, 0, x->dtype);
        return KILN_OK;
    }
    bool drop[KILN_MAX_RANK] = {false};
    if (na == 0) {
        for (int k = 0; k < r; k++) {
            if (x->dims[k].value < 0) {
                kn_ti_set_unknown_rank(c, 0, x->dtype);
                return KILN_OK;
            }
            drop[k] = x->dims[k].value == 1;
        }
    } else {
        for (int i = 0; i < na; i++) {
            int a;
            KN_TRY(kn_infer_axis(c, axes[i], r, "axis", &a));
            if (r == 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "cannot squeeze a scalar");
            if (drop[a]) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "axis %d is given twice", a);
            if (x->dims[a].value >= 0 && x->dims[a].value != 1)
                return kn_infer_error(c, KILN_ERR_SHAPE, "cannot squeeze axis %d of input %s: its size is %lld, not 1",
                                      a, type_str(x, xs, sizeof xs), (long long)x->dims[a].value);
            drop[a] = true;
        }
    }
    kn_dim out[KILN_MAX_RANK];
    int n = 0;
    for (int k = 0; k < r; k++)
        if (!drop[k]) out[n++] = x->dims[k];
    kn_ti_set(c, 0, x->dtype, n, out);
    keep_sv(c);
    return KILN_OK;
}

static kiln_status infer_unsqueeze(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    int64_t axes[KILN_MAX_RANK];
    int na;
    bool present;
    char why[256];
    kiln_status st = kn_axes_param(c->node, VALS(c), axes, &na, &present, why, sizeof why);
    if (st) return kn_ti_fail(c, st, why);
    if (!present) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "axes are required");
    int r = x->rank;
    if (r < 0 || na < 0) {
        const kn_type *a = kn_ti_has(c, 1) ? c->in[1] : NULL;
        if (r >= 0 && a && a->rank == 1 && a->dims[0].value >= 0 && r + a->dims[0].value <= KILN_MAX_RANK)
            kn_ti_set(c, 0, x->dtype, r + (int)a->dims[0].value, NULL);
        else
            kn_ti_set_unknown_rank(c, 0, x->dtype);
        return KILN_OK;
    }
    int orank = r + na;
    if (orank > KILN_MAX_RANK)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "output rank %d exceeds %d", orank, KILN_MAX_RANK);
    bool ins[KILN_MAX_RANK] = {false};
    for (int i = 0; i < na; i++) {
        int a;
        KN_TRY(kn_infer_axis(c, axes[i], orank, "axis", &a));
        if (ins[a]) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "axis %d is given twice", a);
        ins[a] = true;
    }
    kn_dim out[KILN_MAX_RANK];
    for (int k = 0, j = 0; k < orank; k++) out[k] = ins[k] ? kn_ti_known(1) : x->dims[j++];
    kn_ti_set(c, 0, x->dtype, orank, out);
    keep_sv(c);
    return KILN_OK;
}

/* ------------------------------------------------------------------ Transpose */

kiln_status kn_ti_perm(const kn_infer_ctx *c, int rank, int *perm) {
    int n;
    const int64_t *p = kn_attr_ints(c->node, "perm", &n);
    if (!p) {
        for (int k = 0; k < rank; k++) perm[k] = rank - 1 - k;
        return KILN_OK;
    }
    if (n != rank)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "perm has %d entries for a rank-%d input", n, rank);
    bool seen[KILN_MAX_RANK] = {false};
    for (int k = 0; k < n; k++) {
        int64_t v = p[k] < 0 ? p[k] + rank : p[k];
        if (v < 0 || v >= rank || seen[v]) {
            char ps[256];
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "perm %s is not a permutation of 0..%d",
                                  ints_str(p, n, ps, sizeof ps), rank - 1);
        }
        seen[v] = true;
        perm[k] = (int)v;
    }
    return KILN_OK;
}

static kiln_status infer_transpose(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    if (x->rank < 0) {
        kn_ti_set_unknown_rank(c, 0, x->dtype);
        return KILN_OK;
    }
    int perm[KILN_MAX_RANK];
    KN_TRY(kn_ti_perm(c, x->rank, perm));
    kn_dim out[KILN_MAX_RANK];
    for (int k = 0; k < x->rank; k++) out[k] = x->dims[perm[k]];
    kn_ti_set(c, 0, x->dtype, x->rank, out);
    return KILN_OK;
}

/* ------------------------------------------------------------------ Concat */

static kiln_status infer_concat(kn_infer_ctx *c) {
    int rank = -1, first = -1;
    kiln_dtype dt = KILN_DTYPE_UNDEFINED;
    char as[256], bs[256];
    for (int i = 0; i < c->n_inputs; i++) {
        if (!c->in[i]) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d is missing", i);
        if (dt == KILN_DTYPE_UNDEFINED) dt = c->in[i]->dtype;
        if (c->in[i]->rank < 0) continue;
        if (rank < 0) {
            rank = c->in[i]->rank;
            first = i;
        } else if (c->in[i]->rank != rank) {
            return kn_infer_error(c, KILN_ERR_SHAPE, "input %d is %s but input %d is %s: ranks differ", first,
                                  type_str(c->in[first], as, sizeof as), i, type_str(c->in[i], bs, sizeof bs));
        }
    }
    int64_t axis = kn_attr_int(c->node, "axis", c->node->opset < 4 ? 1 : INT64_MIN);
    if (axis == INT64_MIN) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attribute 'axis' is required");
    if (rank < 0) {
        kn_ti_set_unknown_rank(c, 0, dt);
        return KILN_OK;
    }
    if (rank == 0) return kn_infer_error(c, KILN_ERR_SHAPE, "cannot concatenate scalars");
    int a;
    KN_TRY(kn_infer_axis(c, axis, rank, "axis", &a));
    kn_dim out[KILN_MAX_RANK];
    for (int k = 0; k < rank; k++) out[k] = kn_ti_unknown();
    int64_t sum = 0;
    int n_unknown = 0;
    kn_dim lone = kn_ti_unknown();
    bool all_ranked = true;
    for (int i = 0; i < c->n_inputs; i++) {
        const kn_type *t = c->in[i];
        if (t->rank < 0) {
            all_ranked = false;
            continue;
        }
        for (int k = 0; k < rank; k++) {
            kn_dim d = t->dims[k];
            if (k == a) {
                if (d.value >= 0) sum += d.value;
                else n_unknown++, lone = d;
                continue;
            }
            if (out[k].value >= 0 && d.value >= 0 && out[k].value != d.value)
                return kn_infer_error(c, KILN_ERR_SHAPE,
                                      "input %d is %s but input %d is %s: dimension %d differs (only axis %d may)",
                                      first, type_str(c->in[first], as, sizeof as), i,
                                      type_str(t, bs, sizeof bs), k, a);
            if (out[k].value < 0 && (d.value >= 0 || (!out[k].symbol && d.symbol))) out[k] = d;
        }
    }
    if (!all_ranked) out[a] = kn_ti_unknown();
    else if (n_unknown == 0) out[a] = kn_ti_known(sum);
    else if (n_unknown == 1 && sum == 0) out[a] = lone;
    else out[a] = kn_ti_unknown();
    kn_ti_set(c, 0, dt, rank, out);
    if (rank == 1) {
        kn_dim sv[KILN_MAX_RANK], part[KILN_MAX_RANK];
        int n = 0;
        for (int i = 0; i < c->n_inputs; i++) {
            int m = kn_ti_sv(c, i, part);
            if (m < 0 && c->in[i]->rank == 1 && c->in[i]->dims[0].value >= 0 &&
                c->in[i]->dims[0].value <= KILN_MAX_RANK) {
                /* a piece of known length but unknown values: its elements are unknown */
                m = (int)c->in[i]->dims[0].value;
                for (int k = 0; k < m; k++) part[k] = kn_ti_unknown();
            }
            if (m < 0 || n + m > KILN_MAX_RANK) return KILN_OK;
            memcpy(sv + n, part, sizeof(kn_dim) * (size_t)m);
            n += m;
        }
        kn_ti_put_sv(c, 0, sv, n);
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ Split */

static kiln_status infer_split(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    int64_t axis = kn_attr_int(c->node, "axis", 0);
    if (x->rank < 0) {
        for (int o = 0; o < c->n_outputs; o++) kn_ti_set_unknown_rank(c, o, x->dtype);
        return KILN_OK;
    }
    int a;
    KN_TRY(kn_infer_axis(c, axis, x->rank, "axis", &a));
    if (x->rank == 0) return kn_infer_error(c, KILN_ERR_SHAPE, "cannot split a scalar");
    /* infer runs on every execution: no allocation for the usual handful of outputs */
    int64_t small[16];
    int64_t *sizes = c->n_outputs <= 16 ? small : malloc(sizeof(int64_t) * (size_t)c->n_outputs);
    if (!sizes) return KN_OOM();
    bool known;
    char why[256];
    kiln_status st = kn_split_sizes(c->node, VALS(c), x->dims[a].value, c->n_outputs, sizes, &known, why,
                                    sizeof why);
    if (st == KILN_ERR_SHAPE && !kn_ti_value(c, 0)) {
        /* Statically, a split that cannot work may sit in an If branch that never runs (the
         * AffineGrid function body does this); leave the sizes unknown and let a run fail. */
        st = KILN_OK;
        known = false;
    }
    if (st) {
        if (sizes != small) free(sizes);
        return kn_ti_fail(c, st, why);
    }
    kn_dim sv[KILN_MAX_RANK];
    int nsv = x->rank == 1 ? kn_ti_sv(c, 0, sv) : -1;
    int64_t off = 0;
    for (int o = 0; o < c->n_outputs; o++) {
        kn_dim d[KILN_MAX_RANK];
        memcpy(d, x->dims, sizeof(kn_dim) * (size_t)x->rank);
        d[a] = known ? kn_ti_known(sizes[o]) : kn_ti_unknown();
        if (!known && c->n_outputs == 1) d[a] = x->dims[a];
        kn_ti_set(c, o, x->dtype, x->rank, d);
        if (known && nsv >= 0 && off + sizes[o] <= nsv) kn_ti_put_sv(c, o, sv + off, (int)sizes[o]);
        if (known) off += sizes[o];
    }
    if (sizes != small) free(sizes);
    return KILN_OK;
}

/* ------------------------------------------------------------------ Slice */

/* Slice parameters that are shape values (x[:, :seq] with seq from Shape): an axis sliced from
 * 0 with step 1 up to a symbolic end gets that symbol, taking the end to be within the axis as
 * exporters' position-id slices are; known elements clamp as usual. Refines out[]. */
static void symbolic_slice(kn_infer_ctx *c, const kn_type *x, kn_dim *out) {
    if (c->node->opset < 10) return;
    kn_dim st[KILN_MAX_RANK], en[KILN_MAX_RANK], ax[KILN_MAX_RANK], sp[KILN_MAX_RANK];
    int ns = kn_ti_sv(c, 1, st), ne = kn_ti_sv(c, 2, en);
    int na = kn_ti_has(c, 3) ? kn_ti_sv(c, 3, ax) : ns, nst = kn_ti_has(c, 4) ? kn_ti_sv(c, 4, sp) : ns;
    if (ns < 0 || ns != ne || ns != na || ns != nst || ns > x->rank) return;
    for (int i = 0; i < ns; i++) {
        int64_t a = kn_ti_has(c, 3) ? (ax[i].value >= 0 ? ax[i].value : -1) : i;
        const kn_tensor *av = kn_ti_value(c, 3);
        if (av) a = kn_tensor_get_i64(av, i); /* a negative axis is a valid value here */
        if (a < 0) a += x->rank;
        if (a < 0 || a >= x->rank) return;
        int64_t step = kn_ti_has(c, 4) ? sp[i].value : 1;
        if (kn_ti_has(c, 4) && kn_ti_value(c, 4)) step = kn_tensor_get_i64(kn_ti_value(c, 4), i);
        if (step != 1 || st[i].value != 0) continue;
        if (en[i].symbol) out[a] = en[i];
        else if (en[i].value >= 0 && x->dims[a].value >= 0)
            out[a] = kn_ti_known(en[i].value < x->dims[a].value ? en[i].value : x->dims[a].value);
    }
}

static kiln_status infer_slice(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    if (x->rank < 0) {
        kn_ti_set_unknown_rank(c, 0, x->dtype);
        return KILN_OK;
    }
    int64_t dims[KILN_MAX_RANK];
    kn_ti_dims_of(x, dims);
    kn_slice_plan p;
    bool known;
    char why[256];
    kiln_status st = kn_slice_plan_make(c->node, VALS(c), dims, x->rank, &p, &known, why, sizeof why);
    if (st) return kn_ti_fail(c, st, why);
    kn_dim out[KILN_MAX_RANK];
    if (!known) {
        /* which axes are sliced is known only when axes is (or starts' length, without axes) */
        int64_t axes[KILN_MAX_RANK];
        int na = -1;
        bool mark[KILN_MAX_RANK] = {false}, any = false;
        const kn_tensor *av = kn_ti_value(c, 3);
        if (av) na = kn_tensor_ints(av, axes, KILN_MAX_RANK);
        if (na >= 0) {
            for (int i = 0; i < na; i++) {
                int64_t ax = axes[i] < 0 ? axes[i] + x->rank : axes[i];
                if (ax >= 0 && ax < x->rank) mark[ax] = true;
            }
            any = true;
        } else if (!kn_ti_has(c, 3) && kn_ti_has(c, 1) && c->in[1]->rank == 1 &&
                   c->in[1]->dims[0].value >= 0 && c->in[1]->dims[0].value <= x->rank) {
            for (int i = 0; i < c->in[1]->dims[0].value; i++) mark[i] = true;
            any = true;
        }
        for (int k = 0; k < x->rank; k++) out[k] = (!any || mark[k]) ? kn_ti_unknown() : x->dims[k];
        symbolic_slice(c, x, out);
        kn_ti_set(c, 0, x->dtype, x->rank, out);
        return KILN_OK;
    }
    for (int k = 0; k < x->rank; k++) {
        if (!p.sliced[k] || (x->dims[k].value < 0 && p.whole[k])) out[k] = x->dims[k];
        else out[k] = p.len[k] >= 0 ? kn_ti_known(p.len[k]) : kn_ti_unknown();
    }
    kn_ti_set(c, 0, x->dtype, x->rank, out);
    if (x->rank == 1) {
        kn_dim sv[KILN_MAX_RANK], r[KILN_MAX_RANK];
        int n = kn_ti_sv(c, 0, sv);
        if (n >= 0 && p.len[0] >= 0) {
            for (int64_t i = 0; i < p.len[0]; i++) r[i] = sv[p.start[0] + i * p.step[0]];
            kn_ti_put_sv(c, 0, r, (int)p.len[0]);
        }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ Gather */

static kiln_status infer_gather(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 2));
    const kn_type *x = c->in[0], *idx = c->in[1];
    int r = x->rank, q = idx->rank;
    if (r < 0 || q < 0) {
        kn_ti_set_unknown_rank(c, 0, x->dtype);
        return KILN_OK;
    }
    if (r == 0) return kn_infer_error(c, KILN_ERR_SHAPE, "cannot gather from a scalar");
    int a;
    KN_TRY(kn_infer_axis(c, kn_attr_int(c->node, "axis", 0), r, "axis", &a));
    if (r - 1 + q > KILN_MAX_RANK)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "output rank %d exceeds %d", r - 1 + q, KILN_MAX_RANK);
    kn_dim out[KILN_MAX_RANK];
    int n = 0;
    for (int k = 0; k < a; k++) out[n++] = x->dims[k];
    for (int k = 0; k < q; k++) out[n++] = idx->dims[k];
    for (int k = a + 1; k < r; k++) out[n++] = x->dims[k];
    const kn_tensor *iv = kn_ti_value(c, 1);
    int64_t d = x->dims[a].value;
    if (iv && iv->kind == KN_VALUE_TENSOR && kn_dtype_is_int(iv->dtype) && d >= 0) {
        int64_t cnt = kn_tensor_count(iv);
        for (int64_t i = 0; i < cnt; i++) {
            int64_t v = kn_tensor_get_i64(iv, i);
            if (v < -d || v >= d) {
                char xs[256];
                return kn_infer_error(c, KILN_ERR_SHAPE, "index %lld is out of range for axis %d of input %s",
                                      (long long)v, a, type_str(x, xs, sizeof xs));
            }
        }
    }
    kn_ti_set(c, 0, x->dtype, n, out);
    if (r == 1 && iv && q <= 1 && kn_dtype_is_int(iv->dtype)) {
        kn_dim sv[KILN_MAX_RANK], res[KILN_MAX_RANK];
        int ns = kn_ti_sv(c, 0, sv);
        int64_t cnt = kn_tensor_count(iv);
        if (ns >= 0 && cnt <= KILN_MAX_RANK) {
            for (int64_t i = 0; i < cnt; i++) {
                int64_t v = kn_tensor_get_i64(iv, i);
                if (v < 0) v += ns;
                if (v < 0 || v >= ns) return KILN_OK;
                res[i] = sv[v];
            }
            kn_ti_put_sv(c, 0, res, (int)cnt);
        }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ Expand, ConstantOfShape */

/* The dims a shape input (1-D int64) describes: from its value, its shape values, or just its
 * length. Returns the count or -1 when even the length is unknown. */
static int shape_input(kn_infer_ctx *c, int i, kn_dim *dims, bool *concrete, int64_t *raw) {
    int n;
    *concrete = false;
    const kn_tensor *v = kn_ti_value(c, i);
    if (v) {
        n = kn_tensor_ints(v, raw, KILN_MAX_RANK);
        if (n < 0) return -2;
        for (int k = 0; k < n; k++) dims[k] = raw[k] >= 0 ? kn_ti_known(raw[k]) : kn_ti_unknown();
        *concrete = true;
        return n;
    }
    if ((n = kn_ti_sv(c, i, dims)) >= 0) return n;
    const kn_type *t = kn_ti_has(c, i) ? c->in[i] : NULL;
    if (t && t->rank == 1 && t->dims[0].value >= 0 && t->dims[0].value <= KILN_MAX_RANK) {
        n = (int)t->dims[0].value;
        for (int k = 0; k < n; k++) dims[k] = kn_ti_unknown();
        return n;
    }
    return -1;
}

static kiln_status shape_input_error(kn_infer_ctx *c, int i) {
    char d[128];
    const kn_tensor *v = kn_ti_value(c, i);
    return kn_infer_error(c, v && v->rank <= 1 && kn_dtype_is_int(v->dtype) ? KILN_ERR_UNSUPPORTED : KILN_ERR_INVALID_MODEL,
                          "the shape input must be a 1-D integer tensor of at most %d elements, got %s",
                          KILN_MAX_RANK, v ? kn_tensor_describe(v, d, sizeof d) : "?");
}

static kiln_status infer_expand(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 2));
    const kn_type *x = c->in[0];
    kn_dim sd[KILN_MAX_RANK];
    int64_t raw[KILN_MAX_RANK];
    bool concrete;
    int n = shape_input(c, 1, sd, &concrete, raw);
    if (n == -2) return shape_input_error(c, 1);
    if (n < 0 || x->rank < 0) {
        kn_ti_set_unknown_rank(c, 0, x->dtype);
        return KILN_OK;
    }
    if (concrete)
        for (int k = 0; k < n; k++)
            if (raw[k] < 0) {
                char ss[256];
                return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "shape %s has a negative dimension",
                                      ints_str(raw, n, ss, sizeof ss));
            }
    kn_type s;
    kn_type_init(&s);
    s.kind = KN_TYPE_TENSOR;
    s.dtype = x->dtype;
    s.rank = n;
    memcpy(s.dims, sd, sizeof(kn_dim) * (size_t)n);
    kn_type out = c->out[0];
    char why[768];
    if (kn_broadcast_types(x, &s, &out, why, sizeof why) != KILN_OK)
        return kn_infer_error(c, KILN_ERR_SHAPE, "cannot expand: %s", why);
    out.dtype = x->dtype;
    out.n_shape_value = -1;
    c->out[0] = out;
    return KILN_OK;
}

static kiln_status infer_constant_of_shape(kn_infer_ctx *c) {
    const kn_attr *va = kn_node_attr(c->node, "value");
    kiln_dtype dt = KILN_DTYPE_FLOAT;
    if (va) {
        if (va->type != KN_ATTR_TENSOR || !va->t || kn_tensor_count(va->t) != 1)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attribute 'value' must be a one-element tensor");
        dt = va->t->dtype;
    }
    kn_dim sd[KILN_MAX_RANK];
    int64_t raw[KILN_MAX_RANK];
    bool concrete;
    int n = shape_input(c, 0, sd, &concrete, raw);
    if (n == -2) return shape_input_error(c, 0);
    if (n < 0) {
        kn_ti_set_unknown_rank(c, 0, dt);
        return KILN_OK;
    }
    if (concrete)
        for (int k = 0; k < n; k++)
            if (raw[k] < 0) {
                char ss[256];
                return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "shape %s has a negative dimension",
                                      ints_str(raw, n, ss, sizeof ss));
            }
    kn_ti_set(c, 0, dt, n, sd);
    return KILN_OK;
}

/* ------------------------------------------------------------------ Range */

static kiln_status infer_range(kn_infer_ctx *c) {
    kiln_dtype dt = kn_ti_dtype(c, 0);
    for (int i = 0; i < 3; i++) {
        if (!kn_ti_has(c, i)) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d is missing", i);
        /* a scalar by the spec; one-element tensors are accepted as other runtimes do */
        kn_dim cnt = c->in[i]->rank >= 0 ? kn_ti_product(c->in[i]->dims, c->in[i]->rank) : kn_ti_unknown();
        if (cnt.value >= 0 && cnt.value != 1) {
            char ts[256];
            return kn_infer_error(c, KILN_ERR_SHAPE, "input %d is %s but must be a scalar", i,
                                  kn_type_str(c->in[i], ts, sizeof ts));
        }
    }
    kn_dim len = kn_ti_unknown();
    const kn_tensor *s = kn_ti_value(c, 0), *l = kn_ti_value(c, 1), *d = kn_ti_value(c, 2);
    if (s && l && d) {
        int64_t cnt;
        KN_TRY(kn_range_count(s, l, d, &cnt, c));
        len = kn_ti_known(cnt);
    } else if (s && d && kn_tensor_count(s) == 1 && kn_tensor_count(d) == 1 &&
               kn_tensor_get_f64(s, 0) == 0 && kn_tensor_get_f64(d, 0) == 1) {
        kn_dim sv[KILN_MAX_RANK];
        if (kn_ti_sv(c, 1, sv) == 1 && sv[0].symbol) len = sv[0]; /* Range(0, n, 1) has n elements */
    }
    kn_ti_set(c, 0, dt, 1, &len);
    return KILN_OK;
}

static double ceil_div_f(double a, double b) { return ceil(a / b); }

kiln_status kn_range_count(const kn_tensor *s, const kn_tensor *l, const kn_tensor *d, int64_t *count,
                           const kn_infer_ctx *c) {
    if (kn_tensor_count(s) != 1 || kn_tensor_count(l) != 1 || kn_tensor_count(d) != 1)
        return c ? kn_infer_error(c, KILN_ERR_SHAPE, "start, limit and delta must be scalars")
                 : kn_error(KILN_ERR_SHAPE, "start, limit and delta must be scalars");
    double cnt;
    if (kn_dtype_is_int(s->dtype)) {
        int64_t a = kn_tensor_get_i64(s, 0), b = kn_tensor_get_i64(l, 0), st = kn_tensor_get_i64(d, 0);
        if (st == 0)
            return c ? kn_infer_error(c, KILN_ERR_INVALID_MODEL, "delta is 0")
                     : kn_error(KILN_ERR_INVALID_MODEL, "delta is 0");
        /* exact ceil((b - a) / st) without overflow for realistic ranges */
        double span = (double)b - (double)a;
        if (span / (double)st > 4e18) cnt = 4e18;
        else {
            int64_t diff = b - a, q = diff / st;
            if (diff % st != 0 && ((diff < 0) == (st < 0))) q++;
            cnt = (double)q;
        }
    } else {
        double a = kn_tensor_get_f64(s, 0), b = kn_tensor_get_f64(l, 0), st = kn_tensor_get_f64(d, 0);
        if (st == 0 || st != st || a != a || b != b)
            return c ? kn_infer_error(c, KILN_ERR_INVALID_MODEL, "delta is 0 or a value is NaN")
                     : kn_error(KILN_ERR_INVALID_MODEL, "delta is 0 or a value is NaN");
        cnt = ceil_div_f(b - a, st);
    }
    if (cnt < 0) cnt = 0;
    if (cnt > (double)(INT64_MAX / 16))
        return c ? kn_infer_error(c, KILN_ERR_SHAPE, "the range has too many elements (%g)", cnt)
                 : kn_error(KILN_ERR_SHAPE, "the range has too many elements (%g)", cnt);
    *count = (int64_t)cnt;
    return KILN_OK;
}

/* ------------------------------------------------------------------ table */

const kn_op_schema kn_ops_tensor[] = {
    {"", "Constant", 1, 0, 0, 0, 1, 1, infer_constant, 0},
    {"", "Identity", 1, 0, 1, 1, 1, 1, infer_identity, 0},
    {"", "Dropout", 1, 11, 1, 1, 1, 2, infer_dropout, 0},
    {"", "Dropout", 12, 0, 1, 3, 1, 2, infer_dropout, 0},
    {"", "Shape", 1, 0, 1, 1, 1, 1, infer_shape, 0},
    {"", "Size", 1, 0, 1, 1, 1, 1, infer_size, 0},
    {"", "Reshape", 1, 4, 1, 1, 1, 1, infer_reshape, 0},
    {"", "Reshape", 5, 0, 2, 2, 1, 1, infer_reshape, 0},
    {"", "Flatten", 1, 0, 1, 1, 1, 1, infer_flatten, 0},
    {"", "Squeeze", 1, 12, 1, 1, 1, 1, infer_squeeze, 0},
    {"", "Squeeze", 13, 0, 1, 2, 1, 1, infer_squeeze, 0},
    {"", "Unsqueeze", 1, 12, 1, 1, 1, 1, infer_unsqueeze, 0},
    {"", "Unsqueeze", 13, 0, 2, 2, 1, 1, infer_unsqueeze, 0},
    {"", "Transpose", 1, 0, 1, 1, 1, 1, infer_transpose, 0},
    {"", "Concat", 1, 0, 1, -1, 1, 1, infer_concat, 0},
    {"", "Split", 1, 1, 1, 2, 1, -1, infer_split, 0},
    {"", "Split", 2, 12, 1, 1, 1, -1, infer_split, 0},
    {"", "Split", 13, 0, 1, 2, 1, -1, infer_split, 0},
    {"", "Slice", 1, 9, 1, 1, 1, 1, infer_slice, 0},
    {"", "Slice", 10, 0, 3, 5, 1, 1, infer_slice, 0},
    {"", "Gather", 1, 0, 2, 2, 1, 1, infer_gather, 0},
    {"", "Expand", 8, 0, 2, 2, 1, 1, infer_expand, 0},
    {"", "ConstantOfShape", 9, 0, 1, 1, 1, 1, infer_constant_of_shape, 0},
    {"", "Range", 11, 0, 3, 3, 1, 1, infer_range, 0},
    {"", "GatherElements", 11, 0, 2, 2, 1, 1, kn_infer_gather_elements, 0},
    {"", "GatherND", 11, 0, 2, 2, 1, 1, kn_infer_gather_nd, 0},
    {"", "ScatterElements", 11, 0, 3, 3, 1, 1, kn_infer_scatter, 0},
    {"", "ScatterND", 11, 0, 3, 3, 1, 1, kn_infer_scatter, 0},
    {"", "Scatter", 9, 10, 3, 3, 1, 1, kn_infer_scatter, 0},
    {"", "Tile", 1, 5, 3, 3, 1, 1, kn_infer_tile, 0},
    {"", "Tile", 6, 0, 2, 2, 1, 1, kn_infer_tile, 0},
    {"", "Pad", 1, 10, 1, 1, 1, 1, kn_infer_pad, 0},
    {"", "Pad", 11, 17, 2, 3, 1, 1, kn_infer_pad, 0},
    {"", "Pad", 18, 0, 2, 4, 1, 1, kn_infer_pad, 0},
    {"", "CumSum", 11, 0, 2, 2, 1, 1, kn_infer_cum, 0},
    {"", "CumProd", 26, 0, 2, 2, 1, 1, kn_infer_cum, 0},
    {"", "Trilu", 14, 0, 1, 2, 1, 1, kn_infer_trilu, 0},
    {"", "OneHot", 9, 0, 3, 3, 1, 1, kn_infer_onehot, 0},
    {"", "EyeLike", 9, 0, 1, 1, 1, 1, kn_infer_eyelike, 0},
    {"", "DepthToSpace", 1, 0, 1, 1, 1, 1, kn_infer_depth_to_space, 0},
    {"", "SpaceToDepth", 1, 0, 1, 1, 1, 1, kn_infer_space_to_depth, 0},
    {"", "ReverseSequence", 10, 0, 2, 2, 1, 1, kn_infer_reverse_sequence, 0},
    {"", "Compress", 9, 0, 2, 2, 1, 1, kn_infer_compress, 0},
    {"", "NonZero", 9, 0, 1, 1, 1, 1, kn_infer_nonzero, 0},
    {"", "Unique", 11, 0, 1, 1, 1, 4, kn_infer_unique, 0},
    {"", "CenterCropPad", 18, 0, 2, 2, 1, 1, kn_infer_center_crop_pad, 0},
    {"", "TensorScatter", 24, 0, 2, 3, 1, 1, kn_infer_tensor_scatter, 0},
    {0},
};

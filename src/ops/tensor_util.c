/* Slice/Pad/Split/axes parameter resolution shared by the tensor family's infer and kernels. */
#include "ops/tensor_util.h"

#include <stdio.h>
#include <string.h>

int kn_tensor_ints(const kn_tensor *t, int64_t *vals, int cap) {
    if (!t || t->kind != KN_VALUE_TENSOR || !kn_dtype_is_int(t->dtype) || t->rank > 1) return -1;
    int64_t n = kn_tensor_count(t);
    if (n < 0 || n > cap) return -1;
    for (int64_t i = 0; i < n; i++) vals[i] = kn_tensor_get_i64(t, i);
    return (int)n;
}

static const kn_tensor *val(const kn_tensor *const *vals, int n_vals, int i) {
    return i < n_vals ? vals[i] : NULL;
}

/* Reads an optional integer-vector input: *n = -1 when absent, -2 when present but unknown. */
static kiln_status read_ints(const kn_node *n, const kn_tensor *const *vals, int n_vals, int i,
                             const char *what, int64_t *out, int cap, int *count, char *why,
                             size_t wcap) {
    *count = -1;
    if (i >= n->n_inputs || n->inputs[i] < 0) return KILN_OK;
    const kn_tensor *t = val(vals, n_vals, i);
    if (!t) {
        *count = -2;
        return KILN_OK;
    }
    int c = kn_tensor_ints(t, out, cap);
    if (c < 0) {
        char d[128];
        snprintf(why, wcap, "%s must be a 1-D integer tensor of at most %d elements, got %s", what, cap,
                 kn_tensor_describe(t, d, sizeof d));
        return t->rank > 1 || !kn_dtype_is_int(t->dtype) ? KILN_ERR_INVALID_MODEL : KILN_ERR_UNSUPPORTED;
    }
    *count = c;
    return KILN_OK;
}

void kn_slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *start_out,
                   int64_t *len_out) {
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    int64_t len;
    if (step > 0) {
        start = start < 0 ? 0 : start > dim ? dim : start;
        end = end < 0 ? 0 : end > dim ? dim : end;
        len = end > start ? (end - start + step - 1) / step : 0;
    } else {
        start = start < 0 ? 0 : start > dim - 1 ? dim - 1 : start;
        end = end < -1 ? -1 : end > dim - 1 ? dim - 1 : end;
        len = start > end ? (start - end + (-step) - 1) / (-step) : 0;
    }
    *start_out = start;
    *len_out = len;
}

kiln_status kn_slice_prepare(const kn_node *n, void *params) {
    kn_slice_prm *a = params;
    memset(a, 0, sizeof *a);
    if (n->opset >= 10) return KILN_OK;
    a->starts = kn_attr_ints(n, "starts", &a->n_starts);
    a->ends = kn_attr_ints(n, "ends", &a->n_ends);
    a->axes = kn_attr_ints(n, "axes", &a->n_axes);
    return KILN_OK;
}

kiln_status kn_slice_plan_make(const kn_node *n, const kn_tensor *const *vals, int n_vals,
                               const int64_t *dims, int rank, kn_slice_plan *p, bool *known,
                               char *why, size_t cap) {
    kn_slice_prm a;
    kn_slice_prepare(n, &a);
    return kn_slice_plan_from(n, &a, vals, n_vals, dims, rank, p, known, why, cap);
}

kiln_status kn_slice_plan_from(const kn_node *n, const kn_slice_prm *attrs, const kn_tensor *const *vals, int n_vals,
                               const int64_t *dims, int rank, kn_slice_plan *p, bool *known, char *why,
                               size_t cap) {
    enum { CAP = KILN_MAX_RANK };
    int64_t starts[CAP], ends[CAP], axes[CAP], steps[CAP];
    int ns, ne, na = -1, nst = -1;
    *known = false;
    for (int k = 0; k < rank; k++) {
        p->start[k] = 0;
        p->step[k] = 1;
        p->len[k] = dims[k];
        p->sliced[k] = false;
        p->whole[k] = true;
    }
    if (n->opset < 10) {
        const int64_t *s = attrs->starts, *e = attrs->ends;
        ns = attrs->n_starts;
        ne = attrs->n_ends;
        if (!s || !e) {
            snprintf(why, cap, "attributes 'starts' and 'ends' are required");
            return KILN_ERR_INVALID_MODEL;
        }
        if (ns > CAP || ne > CAP) {
            snprintf(why, cap, "more than %d sliced axes", CAP);
            return KILN_ERR_UNSUPPORTED;
        }
        memcpy(starts, s, sizeof(int64_t) * (size_t)ns);
        memcpy(ends, e, sizeof(int64_t) * (size_t)ne);
        const int64_t *a = attrs->axes;
        na = attrs->n_axes;
        if (a) {
            if (na > CAP) {
                snprintf(why, cap, "more than %d sliced axes", CAP);
                return KILN_ERR_UNSUPPORTED;
            }
            memcpy(axes, a, sizeof(int64_t) * (size_t)na);
        } else {
            na = -1;
        }
    } else {
        kiln_status st;
        if ((st = read_ints(n, vals, n_vals, 1, "starts", starts, CAP, &ns, why, cap))) return st;
        if ((st = read_ints(n, vals, n_vals, 2, "ends", ends, CAP, &ne, why, cap))) return st;
        if ((st = read_ints(n, vals, n_vals, 3, "axes", axes, CAP, &na, why, cap))) return st;
        if ((st = read_ints(n, vals, n_vals, 4, "steps", steps, CAP, &nst, why, cap))) return st;
        if (ns == -1 || ne == -1) {
            snprintf(why, cap, "inputs 'starts' and 'ends' are required");
            return KILN_ERR_INVALID_MODEL;
        }
        if (ns < 0 || ne < 0 || na == -2 || nst == -2) return KILN_OK; /* not known yet */
    }
    if (ns != ne) {
        snprintf(why, cap, "starts has %d elements but ends has %d", ns, ne);
        return KILN_ERR_INVALID_MODEL;
    }
    if (na >= 0 && na != ns) {
        snprintf(why, cap, "starts has %d elements but axes has %d", ns, na);
        return KILN_ERR_INVALID_MODEL;
    }
    if (nst >= 0 && nst != ns) {
        snprintf(why, cap, "starts has %d elements but steps has %d", ns, nst);
        return KILN_ERR_INVALID_MODEL;
    }
    if (ns > rank) {
        snprintf(why, cap, "%d sliced axes for a rank-%d input", ns, rank);
        return KILN_ERR_INVALID_MODEL;
    }
    for (int i = 0; i < ns; i++) {
        int64_t ax = na >= 0 ? axes[i] : i;
        if (ax < -rank || ax >= rank) {
            snprintf(why, cap, "axis %lld is out of range for rank %d", (long long)ax, rank);
            return KILN_ERR_INVALID_MODEL;
        }
        int a = (int)(ax < 0 ? ax + rank : ax);
        if (p->sliced[a]) {
            snprintf(why, cap, "axis %d is sliced twice", a);
            return KILN_ERR_INVALID_MODEL;
        }
        int64_t step = nst >= 0 ? steps[i] : 1;
        if (step == 0) {
            snprintf(why, cap, "step of axis %d is 0", a);
            return KILN_ERR_INVALID_MODEL;
        }
        p->sliced[a] = true;
        p->step[a] = step;
        if (dims[a] >= 0) {
            kn_slice_axis(dims[a], starts[i], ends[i], step, &p->start[a], &p->len[a]);
            p->whole[a] = p->start[a] == 0 && step == 1 && p->len[a] == dims[a];
        } else {
            p->start[a] = starts[i];
            p->len[a] = -1;
            /* 0 to "the end" (INT64_MAX, or INT32_MAX from older exporters) with step 1 */
            p->whole[a] = starts[i] == 0 && step == 1 && ends[i] >= INT32_MAX;
        }
    }
    *known = true;
    return KILN_OK;
}

kiln_status kn_pad_prepare(const kn_node *n, void *params) {
    kn_pad_prm *a = params;
    const char *m = kn_attr_string(n, "mode", "constant");
    a->mode_name = m;
    a->mode = !strcmp(m, "constant") ? KN_PAD_CONSTANT
              : !strcmp(m, "reflect") ? KN_PAD_REFLECT
              : !strcmp(m, "edge")    ? KN_PAD_EDGE
              : !strcmp(m, "wrap")    ? KN_PAD_WRAP
                                      : -1;
    a->n_pads = 0;
    a->pads = n->opset < 11 ? kn_attr_ints(n, n->opset < 2 ? "paddings" : "pads", &a->n_pads) : NULL;
    a->value = kn_attr_float(n, "value", 0.0f);
    return KILN_OK;
}

kiln_status kn_pad_plan(const kn_node *n, const kn_tensor *const *vals, int n_vals, int rank,
                        int64_t *begin, int64_t *end, kn_pad_mode *mode, bool *known, char *why,
                        size_t cap) {
    kn_pad_prm a;
    kn_pad_prepare(n, &a);
    return kn_pad_plan_from(n, &a, vals, n_vals, rank, begin, end, mode, known, why, cap);
}

kiln_status kn_pad_plan_from(const kn_node *n, const kn_pad_prm *a, const kn_tensor *const *vals, int n_vals,
                             int rank, int64_t *begin, int64_t *end, kn_pad_mode *mode, bool *known, char *why,
                             size_t cap) {
    *known = false;
    if (a->mode < 0) {
        snprintf(why, cap, "mode '%s' is not one of constant, reflect, edge, wrap", a->mode_name);
        return KILN_ERR_INVALID_MODEL;
    }
    *mode = (kn_pad_mode)a->mode;
    for (int k = 0; k < rank; k++) begin[k] = end[k] = 0;
    int64_t pads[2 * KILN_MAX_RANK], axes[KILN_MAX_RANK];
    int np, na = -1;
    if (n->opset < 11) {
        const int64_t *p = a->pads;
        np = a->n_pads;
        if (!p) {
            snprintf(why, cap, "attribute '%s' is required", n->opset < 2 ? "paddings" : "pads");
            return KILN_ERR_INVALID_MODEL;
        }
        if (np > 2 * KILN_MAX_RANK) np = 2 * KILN_MAX_RANK + 1; /* reported below */
        else memcpy(pads, p, sizeof(int64_t) * (size_t)np);
    } else {
        kiln_status st;
        if ((st = read_ints(n, vals, n_vals, 1, "pads", pads, 2 * KILN_MAX_RANK, &np, why, cap))) return st;
        if (n->opset >= 18 &&
            (st = read_ints(n, vals, n_vals, 3, "axes", axes, KILN_MAX_RANK, &na, why, cap)))
            return st;
        if (np == -1) {
            snprintf(why, cap, "input 'pads' is required");
            return KILN_ERR_INVALID_MODEL;
        }
        if (np < 0 || na == -2) return KILN_OK;
    }
    int nax = na >= 0 ? na : rank;
    if (np != 2 * nax) {
        snprintf(why, cap, "pads has %d elements but %d axes need %d", np, nax, 2 * nax);
        return KILN_ERR_INVALID_MODEL;
    }
    for (int i = 0; i < nax; i++) {
        int64_t ax = na >= 0 ? axes[i] : i;
        if (ax < -rank || ax >= rank) {
            snprintf(why, cap, "axis %lld is out of range for rank %d", (long long)ax, rank);
            return KILN_ERR_INVALID_MODEL;
        }
        int a = (int)(ax < 0 ? ax + rank : ax);
        begin[a] = pads[i];
        end[a] = pads[nax + i];
    }
    *known = true;
    return KILN_OK;
}

kiln_status kn_split_sizes(const kn_node *n, const kn_tensor *const *vals, int n_vals, int64_t dim,
                           int n_out, int64_t *sizes, bool *known, char *why, size_t cap) {
    *known = false;
    int64_t split[1024];
    int ns = -1;
    if (n_out > 1024) {
        snprintf(why, cap, "%d outputs; at most 1024 supported", n_out);
        return KILN_ERR_UNSUPPORTED;
    }
    const int64_t *a = n->opset < 13 ? kn_attr_ints(n, "split", &ns) : NULL;
    if (a) {
        if (ns > 1024) ns = 1025;
        else memcpy(split, a, sizeof(int64_t) * (size_t)ns);
    } else {
        ns = -1;
        if (n->opset < 2 || n->opset >= 13) {
            kiln_status st = read_ints(n, vals, n_vals, 1, "split", split, 1024, &ns, why, cap);
            if (st) return st;
            if (ns == -2) return KILN_OK;
        }
    }
    if (n->opset >= 18) {
        const kn_attr *no = kn_node_attr(n, "num_outputs");
        if (no && ns >= 0) {
            snprintf(why, cap, "both the 'split' input and the 'num_outputs' attribute are given");
            return KILN_ERR_INVALID_MODEL;
        }
        if (no && no->i != n_out) {
            snprintf(why, cap, "num_outputs is %lld but the node has %d outputs", (long long)no->i, n_out);
            return KILN_ERR_INVALID_MODEL;
        }
    }
    if (ns >= 0) {
        if (ns != n_out) {
            snprintf(why, cap, "split has %d elements but the node has %d outputs", ns, n_out);
            return KILN_ERR_INVALID_MODEL;
        }
        int64_t sum = 0;
        for (int i = 0; i < ns; i++) {
            if (split[i] < 0) {
                snprintf(why, cap, "split[%d] is negative (%lld)", i, (long long)split[i]);
                return KILN_ERR_INVALID_MODEL;
            }
            sum += split[i];
            sizes[i] = split[i];
        }
        if (dim >= 0 && sum != dim) {
            snprintf(why, cap, "split sums to %lld but the axis has size %lld", (long long)sum, (long long)dim);
            return KILN_ERR_SHAPE;
        }
        *known = true;
        return KILN_OK;
    }
    if (dim < 0) return KILN_OK;
    if (n_out <= 0) {
        snprintf(why, cap, "no outputs");
        return KILN_ERR_INVALID_MODEL;
    }
    /* Equal parts; when uneven, parts of ceil(dim / n) and a smaller last one. */
    int64_t part = dim % n_out == 0 ? dim / n_out : dim / n_out + 1;
    int64_t left = dim;
    for (int i = 0; i < n_out; i++) {
        sizes[i] = i == n_out - 1 ? left : part;
        left -= sizes[i];
    }
    if (sizes[n_out - 1] < 0) {
        snprintf(why, cap, "an axis of size %lld cannot be split into %d parts", (long long)dim, n_out);
        return KILN_ERR_SHAPE;
    }
    *known = true;
    return KILN_OK;
}

kiln_status kn_axes_param(const kn_node *n, const kn_tensor *const *vals, int n_vals, int64_t *axes,
                          int *count, bool *present, char *why, size_t cap) {
    *count = -1;
    *present = false;
    if (n->opset < 13) {
        int na;
        const int64_t *a = kn_attr_ints(n, "axes", &na);
        if (!a && !kn_node_attr(n, "axes")) return *count = 0, KILN_OK;
        if (na > KILN_MAX_RANK) {
            snprintf(why, cap, "%d axes; at most %d supported", na, KILN_MAX_RANK);
            return KILN_ERR_UNSUPPORTED;
        }
        if (na) memcpy(axes, a, sizeof(int64_t) * (size_t)na);
        *count = na;
        *present = true;
        return KILN_OK;
    }
    int c;
    kiln_status st = read_ints(n, vals, n_vals, 1, "axes", axes, KILN_MAX_RANK, &c, why, cap);
    if (st) return st;
    if (c == -1) return *count = 0, KILN_OK;
    *present = true;
    *count = c < 0 ? -1 : c;
    return KILN_OK;
}

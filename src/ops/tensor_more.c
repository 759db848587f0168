/* The tensor family's index, scatter, padding and miscellaneous operators: shape inference.
 * (The table is in tensor.c.) */
#include "ops/tensor_infer.h"
#include "util/limits.h"

#include <stdio.h>
#include <string.h>

#define VALS(c) ((const kn_tensor *const *)(c)->in_value), (c)->n_inputs

static const char *tstr(const kn_type *t, char *buf, size_t cap) { return kn_type_str(t, buf, cap); }

/* ------------------------------------------------------------------ GatherElements, GatherND */

kiln_status kn_infer_gather_elements(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 2));
    const kn_type *x = c->in[0], *idx = c->in[1];
    char xs[256], is[256];
    if (x->rank >= 0 && idx->rank >= 0) {
        if (x->rank != idx->rank)
            return kn_infer_error(c, KILN_ERR_SHAPE, "data %s and indices %s must have the same rank",
                                  tstr(x, xs, sizeof xs), tstr(idx, is, sizeof is));
        int a;
        KN_TRY(kn_infer_axis(c, kn_attr_int(c->node, "axis", 0), x->rank, "axis", &a));
    }
    kn_ti_set(c, 0, x->dtype, idx->rank, idx->dims);
    return KILN_OK;
}

kiln_status kn_infer_gather_nd(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 2));
    const kn_type *x = c->in[0], *idx = c->in[1];
    int64_t b = kn_attr_int(c->node, "batch_dims", 0);
    int r = x->rank, q = idx->rank;
    char xs[256], is[256];
    if (r < 0 || q < 0 || idx->dims[q - 1].value < 0) {
        kn_ti_set_unknown_rank(c, 0, x->dtype);
        return KILN_OK;
    }
    if (r < 1 || q < 1)
        return kn_infer_error(c, KILN_ERR_SHAPE, "data %s and indices %s must both have rank >= 1",
                              tstr(x, xs, sizeof xs), tstr(idx, is, sizeof is));
    int64_t last = idx->dims[q - 1].value;
    if (b < 0 || b >= (r < q ? r : q))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "batch_dims %lld must be less than both ranks (%d, %d)",
                              (long long)b, r, q);
    if (last < 1 || last > r - b)
        return kn_infer_error(c, KILN_ERR_SHAPE,
                              "indices %s index %lld dims but data %s has %lld after the %lld batch dims",
                              tstr(idx, is, sizeof is), (long long)last, tstr(x, xs, sizeof xs),
                              (long long)(r - b), (long long)b);
    for (int k = 0; k < b; k++)
        if (x->dims[k].value >= 0 && idx->dims[k].value >= 0 && x->dims[k].value != idx->dims[k].value)
            return kn_infer_error(c, KILN_ERR_SHAPE, "batch dimension %d differs: data %s, indices %s", k,
                                  tstr(x, xs, sizeof xs), tstr(idx, is, sizeof is));
    kn_dim out[KILN_MAX_RANK];
    int n = 0;
    for (int k = 0; k < q - 1; k++) out[n++] = idx->dims[k];
    for (int k = (int)(b + last); k < r; k++) {
        if (n >= KILN_MAX_RANK) return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "output rank exceeds %d", KILN_MAX_RANK);
        out[n++] = x->dims[k];
    }
    kn_ti_set(c, 0, x->dtype, n, out);
    return KILN_OK;
}

/* ------------------------------------------------------------------ scatters */

kiln_status kn_infer_scatter(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 3));
    const kn_type *x = c->in[0], *idx = c->in[1], *upd = c->in[2];
    const char *red = kn_attr_string(c->node, "reduction", "none");
    char xs[256], is[256], us[256];
    if (strcmp(red, "none") && strcmp(red, "add") && strcmp(red, "mul") && strcmp(red, "max") &&
        strcmp(red, "min"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "reduction '%s' is not none, add, mul, max or min", red);
    bool nd = !strcmp(c->node->op_type, "ScatterND");
    if (x->rank >= 0 && idx->rank >= 0 && upd->rank >= 0) {
        if (!nd) {
            if (x->rank != idx->rank || idx->rank != upd->rank)
                return kn_infer_error(c, KILN_ERR_SHAPE, "data %s, indices %s and updates %s must have the same rank",
                                      tstr(x, xs, sizeof xs), tstr(idx, is, sizeof is), tstr(upd, us, sizeof us));
            int a;
            KN_TRY(kn_infer_axis(c, kn_attr_int(c->node, "axis", 0), x->rank, "axis", &a));
            for (int k = 0; k < idx->rank; k++)
                if (idx->dims[k].value >= 0 && upd->dims[k].value >= 0 && idx->dims[k].value != upd->dims[k].value)
                    return kn_infer_error(c, KILN_ERR_SHAPE, "indices %s and updates %s must have the same shape",
                                          tstr(idx, is, sizeof is), tstr(upd, us, sizeof us));
        } else if (idx->rank >= 1 && idx->dims[idx->rank - 1].value >= 0) {
            int64_t last = idx->dims[idx->rank - 1].value;
            int want = idx->rank - 1 + x->rank - (int)last;
            if (last > x->rank || upd->rank != want)
                return kn_infer_error(c, KILN_ERR_SHAPE,
                                      "updates %s must have shape indices[:-1] + data[%lld:] for data %s, indices %s",
                                      tstr(upd, us, sizeof us), (long long)last, tstr(x, xs, sizeof xs),
                                      tstr(idx, is, sizeof is));
        }
    }
    c->out[0] = *x;
    c->out[0].n_shape_value = -1;
    return KILN_OK;
}

kiln_status kn_infer_tensor_scatter(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 2));
    const kn_type *x = c->in[0], *upd = c->in[1];
    const char *mode = kn_attr_string(c->node, "mode", "linear");
    if (strcmp(mode, "linear") && strcmp(mode, "circular"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "mode '%s' is not linear or circular", mode);
    if (x->rank >= 0 && upd->rank >= 0) {
        char xs[256], us[256];
        int a;
        if (x->rank != upd->rank || x->rank < 1)
            return kn_infer_error(c, KILN_ERR_SHAPE, "past_cache %s and update %s must have the same rank >= 1",
                                  tstr(x, xs, sizeof xs), tstr(upd, us, sizeof us));
        KN_TRY(kn_infer_axis(c, kn_attr_int(c->node, "axis", -2), x->rank, "axis", &a));
        for (int k = 0; k < x->rank; k++) {
            int64_t dx = x->dims[k].value, du = upd->dims[k].value;
            if (dx >= 0 && du >= 0 && (k == a ? du > dx : du != dx))
                return kn_infer_error(c, KILN_ERR_SHAPE, "update %s does not fit past_cache %s at dimension %d",
                                      tstr(upd, us, sizeof us), tstr(x, xs, sizeof xs), k);
        }
    }
    c->out[0] = *x;
    c->out[0].n_shape_value = -1;
    return KILN_OK;
}

/* ------------------------------------------------------------------ Tile */

kiln_status kn_infer_tile(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 2));
    const kn_type *x = c->in[0];
    int r = x->rank;
    if (r < 0) {
        kn_ti_set_unknown_rank(c, 0, x->dtype);
        return KILN_OK;
    }
    kn_dim out[KILN_MAX_RANK];
    memcpy(out, x->dims, sizeof(kn_dim) * (size_t)r);
    if (c->node->opset < 6) {
        const kn_tensor *tv = kn_ti_value(c, 1), *av = kn_ti_value(c, 2);
        if (!tv || !av) {
            kn_ti_set(c, 0, x->dtype, r, NULL);
            return KILN_OK;
        }
        int a;
        KN_TRY(kn_infer_axis(c, kn_tensor_get_i64(av, 0), r, "axis", &a));
        int64_t t = kn_tensor_get_i64(tv, 0);
        if (t < 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "tiles %lld is negative", (long long)t);
        if (t != 1) out[a] = x->dims[a].value >= 0 ? kn_ti_known(x->dims[a].value * t) : kn_ti_unknown();
        kn_ti_set(c, 0, x->dtype, r, out);
        return KILN_OK;
    }
    int64_t rep[KILN_MAX_RANK];
    int n;
    KN_TRY(kn_infer_int_list(c, 1, rep, KILN_MAX_RANK, &n));
    if (n < 0) { /* repeats built from shape arithmetic: usable when every element is known */
        kn_dim sv[KILN_MAX_RANK];
        int ns = kn_ti_sv(c, 1, sv);
        bool all = ns >= 0;
        for (int k = 0; k < ns; k++) all = all && sv[k].value >= 0, rep[k] = sv[k].value;
        if (all) n = ns;
    }
    if (n < 0) {
        kn_ti_set(c, 0, x->dtype, r, NULL);
        return KILN_OK;
    }
    if (n != r) {
        char xs[256];
        return kn_infer_error(c, KILN_ERR_SHAPE, "repeats has %d elements but input %s has rank %d", n,
                              tstr(x, xs, sizeof xs), r);
    }
    for (int k = 0; k < r; k++) {
        if (rep[k] < 0)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "repeats[%d] is negative (%lld)", k, (long long)rep[k]);
        if (rep[k] == 1) continue;
        if (rep[k] == 0) out[k] = kn_ti_known(0);
        else if (x->dims[k].value >= 0) {
            if (x->dims[k].value > INT64_MAX / 16 / rep[k])
                return kn_infer_error(c, KILN_ERR_SHAPE, "tiled dimension %d is too large", k);
            out[k] = kn_ti_known(x->dims[k].value * rep[k]);
        } else {
            out[k] = kn_ti_unknown();
        }
    }
    kn_ti_set(c, 0, x->dtype, r, out);
    return KILN_OK;
}

/* ------------------------------------------------------------------ Pad */

kiln_status kn_infer_pad(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    int r = x->rank;
    if (r < 0) {
        kn_ti_set_unknown_rank(c, 0, x->dtype);
        return KILN_OK;
    }
    int64_t b[KILN_MAX_RANK], e[KILN_MAX_RANK];
    kn_pad_mode mode;
    bool known;
    char why[256], xs[256];
    kiln_status st = kn_pad_plan(c->node, VALS(c), r, b, e, &mode, &known, why, sizeof why);
    if (st) return kn_ti_fail(c, st, why);
    if (!known) {
        kn_ti_set(c, 0, x->dtype, r, NULL);
        return KILN_OK;
    }
    kn_dim out[KILN_MAX_RANK];
    for (int k = 0; k < r; k++) {
        kn_dim d = x->dims[k];
        if (b[k] == 0 && e[k] == 0) out[k] = d;
        else if (d.value < 0) out[k] = kn_ti_unknown();
        else {
            if (b[k] > ((int64_t)1 << 40) || e[k] > ((int64_t)1 << 40) || b[k] < -((int64_t)1 << 40) ||
                e[k] < -((int64_t)1 << 40))
                return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "pads %lld and %lld on axis %d are beyond any real model "
                                      "(refused: a size from the model's data)", (long long)b[k], (long long)e[k], k);
            int64_t v = d.value + b[k] + e[k];
            if (v < 0)
                return kn_infer_error(c, KILN_ERR_SHAPE, "pads %lld and %lld on axis %d of input %s leave a negative size",
                                      (long long)b[k], (long long)e[k], k, tstr(x, xs, sizeof xs));
            if (mode != KN_PAD_CONSTANT && d.value == 0 && v > 0)
                return kn_infer_error(c, KILN_ERR_SHAPE, "cannot pad the empty axis %d of input %s in this mode",
                                      k, tstr(x, xs, sizeof xs));
            out[k] = kn_ti_known(v);
        }
    }
    /* the output's size comes from the pads: bounded before anything is allocated */
    uint64_t count = 1;
    bool all_known = true;
    for (int k = 0; k < r; k++) {
        if (out[k].value < 0) all_known = false;
        else count = kn_bytes_of(count, (uint64_t)out[k].value);
    }
    size_t es = kiln_dtype_size(x->dtype);
    uint64_t bytes = kn_bytes_of(count, es ? es : 1), limit = kn_tensor_bytes_limit();
    if (all_known && bytes > limit)
        return kn_infer_error(c, KILN_ERR_OUT_OF_MEMORY,
                              "the pads make the output %llu elements (%llu bytes), more than the limit of %llu bytes (the "
                              "machine's memory, or KILN_MAX_TENSOR_BYTES)",
                              (unsigned long long)count, (unsigned long long)bytes, (unsigned long long)limit);
    kn_ti_set(c, 0, x->dtype, r, out);
    return KILN_OK;
}

/* ------------------------------------------------------------------ CumSum/CumProd, Trilu */

kiln_status kn_infer_cum(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 2));
    const kn_type *x = c->in[0];
    const kn_tensor *av = kn_ti_value(c, 1);
    if (av && x->rank >= 0) {
        if (kn_tensor_count(av) != 1 || !kn_dtype_is_int(av->dtype))
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "axis must be an integer scalar");
        int a;
        KN_TRY(kn_infer_axis(c, kn_tensor_get_i64(av, 0), x->rank, "axis", &a));
    }
    return kn_infer_same(c, 0, 0);
}

kiln_status kn_infer_trilu(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    if (x->rank >= 0 && x->rank < 2) {
        char xs[256];
        return kn_infer_error(c, KILN_ERR_SHAPE, "input %s must have rank >= 2", tstr(x, xs, sizeof xs));
    }
    return kn_infer_same(c, 0, 0);
}

/* ------------------------------------------------------------------ OneHot, EyeLike */

kiln_status kn_infer_onehot(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 3));
    const kn_type *idx = c->in[0];
    kiln_dtype dt = kn_ti_dtype(c, 2);
    int r = idx->rank;
    if (r < 0) {
        kn_ti_set_unknown_rank(c, 0, dt);
        return KILN_OK;
    }
    if (r + 1 > KILN_MAX_RANK) return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "output rank exceeds %d", KILN_MAX_RANK);
    int64_t axis = kn_attr_int(c->node, "axis", -1);
    if (axis < -(r + 1) || axis > r)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "axis %lld is out of range for output rank %d",
                              (long long)axis, r + 1);
    if (axis < 0) axis += r + 1;
    kn_dim depth = kn_ti_unknown();
    const kn_tensor *dv = kn_ti_value(c, 1);
    if (dv) {
        if (kn_tensor_count(dv) != 1)
            return kn_infer_error(c, KILN_ERR_SHAPE, "depth must have exactly one element");
        double d = kn_tensor_get_f64(dv, 0);
        if (!(d >= 1) || d > 1e15)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "depth %g must be a positive integer", d);
        depth = kn_ti_known((int64_t)d);
    }
    const kn_tensor *vv = kn_ti_value(c, 2);
    if (vv && kn_tensor_count(vv) != 2)
        return kn_infer_error(c, KILN_ERR_SHAPE, "values must have two elements [off, on], got %lld",
                              (long long)kn_tensor_count(vv));
    kn_dim out[KILN_MAX_RANK];
    for (int k = 0, j = 0; k <= r; k++) out[k] = k == axis ? depth : idx->dims[j++];
    kn_ti_set(c, 0, dt, r + 1, out);
    return KILN_OK;
}

kiln_status kn_infer_eyelike(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    const kn_attr *dta = kn_node_attr(c->node, "dtype");
    kiln_dtype dt = x->dtype;
    if (dta) {
        if (!kn_dtype_is_valid((int)dta->i) || dta->i == KILN_DTYPE_STRING)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "dtype %lld is not a supported element type",
                                  (long long)dta->i);
        dt = (kiln_dtype)dta->i;
    }
    if (x->rank >= 0 && x->rank != 2) {
        char xs[256];
        return kn_infer_error(c, KILN_ERR_SHAPE, "input %s must be 2-D", tstr(x, xs, sizeof xs));
    }
    kn_ti_set(c, 0, dt, x->rank, x->dims);
    return KILN_OK;
}

/* ------------------------------------------------------------------ DepthToSpace, SpaceToDepth */

static kiln_status block_param(kn_infer_ctx *c, int64_t *b) {
    const kn_attr *a = kn_node_attr(c->node, "blocksize");
    if (!a) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attribute 'blocksize' is required");
    if (a->i < 1 || a->i > (1 << 20))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "blocksize %lld must be positive", (long long)a->i);
    const char *mode = kn_attr_string(c->node, "mode", "DCR");
    if (strcmp(mode, "DCR") && strcmp(mode, "CRD"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "mode '%s' is not DCR or CRD", mode);
    *b = a->i;
    return KILN_OK;
}

static kn_dim dim_mul(kn_dim d, int64_t f) { return d.value >= 0 ? kn_ti_known(d.value * f) : kn_ti_unknown(); }

kiln_status kn_infer_depth_to_space(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    int64_t b = 1;
    char xs[256];
    KN_TRY(block_param(c, &b));
    if (x->rank < 0) {
        kn_ti_set(c, 0, x->dtype, 4, NULL);
        return KILN_OK;
    }
    if (x->rank != 4) return kn_infer_error(c, KILN_ERR_SHAPE, "input %s must be 4-D", tstr(x, xs, sizeof xs));
    kn_dim out[4] = {x->dims[0], kn_ti_unknown(), dim_mul(x->dims[2], b), dim_mul(x->dims[3], b)};
    if (x->dims[1].value >= 0) {
        if (x->dims[1].value % (b * b))
            return kn_infer_error(c, KILN_ERR_SHAPE, "channels of input %s are not a multiple of blocksize^2 = %lld",
                                  tstr(x, xs, sizeof xs), (long long)(b * b));
        out[1] = kn_ti_known(x->dims[1].value / (b * b));
    }
    kn_ti_set(c, 0, x->dtype, 4, out);
    return KILN_OK;
}

kiln_status kn_infer_space_to_depth(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    int64_t b = 1;
    char xs[256];
    KN_TRY(block_param(c, &b));
    if (x->rank < 0) {
        kn_ti_set(c, 0, x->dtype, 4, NULL);
        return KILN_OK;
    }
    if (x->rank != 4) return kn_infer_error(c, KILN_ERR_SHAPE, "input %s must be 4-D", tstr(x, xs, sizeof xs));
    kn_dim out[4] = {x->dims[0], dim_mul(x->dims[1], b * b), kn_ti_unknown(), kn_ti_unknown()};
    for (int k = 2; k < 4; k++) {
        if (x->dims[k].value < 0) continue;
        if (x->dims[k].value % b)
            return kn_infer_error(c, KILN_ERR_SHAPE, "dimension %d of input %s is not a multiple of blocksize %lld",
                                  k, tstr(x, xs, sizeof xs), (long long)b);
        out[k] = kn_ti_known(x->dims[k].value / b);
    }
    kn_ti_set(c, 0, x->dtype, 4, out);
    return KILN_OK;
}

/* ------------------------------------------------------------------ ReverseSequence, Compress, NonZero */

kiln_status kn_infer_reverse_sequence(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 2));
    const kn_type *x = c->in[0];
    int64_t ba = kn_attr_int(c->node, "batch_axis", 1), ta = kn_attr_int(c->node, "time_axis", 0);
    if (!((ba == 0 && ta == 1) || (ba == 1 && ta == 0)))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "batch_axis %lld and time_axis %lld must be 0 and 1 in some order",
                              (long long)ba, (long long)ta);
    if (x->rank >= 0 && x->rank < 2) {
        char xs[256];
        return kn_infer_error(c, KILN_ERR_SHAPE, "input %s must have rank >= 2", tstr(x, xs, sizeof xs));
    }
    return kn_infer_same(c, 0, 0);
}

kiln_status kn_infer_compress(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 2));
    const kn_type *x = c->in[0];
    const kn_attr *aa = kn_node_attr(c->node, "axis");
    const kn_tensor *cv = kn_ti_value(c, 1);
    kn_dim len = kn_ti_unknown();
    int a = -1;
    if (x->rank < 0) {
        if (aa) kn_ti_set_unknown_rank(c, 0, x->dtype);
        else kn_ti_set(c, 0, x->dtype, 1, NULL);
        return KILN_OK;
    }
    if (aa) KN_TRY(kn_infer_axis(c, aa->i, x->rank, "axis", &a));
    if (aa && x->rank == 0) return kn_infer_error(c, KILN_ERR_SHAPE, "cannot compress a scalar along an axis");
    int64_t limit = aa ? x->dims[a].value : kn_ti_product(x->dims, x->rank).value;
    if (cv && limit >= 0) {
        int64_t n = kn_tensor_count(cv);
        if (cv->rank != 1)
            return kn_infer_error(c, KILN_ERR_SHAPE, "condition must be 1-D, got rank %d", cv->rank);
        if (n > limit) {
            char xs[256];
            return kn_infer_error(c, KILN_ERR_SHAPE, "condition has %lld elements but input %s has %lld along the axis",
                                  (long long)n, tstr(x, xs, sizeof xs), (long long)limit);
        }
        len = kn_ti_known(kn_tensor_count_nonzero(cv));
    }
    if (!aa) {
        kn_ti_set(c, 0, x->dtype, 1, &len);
        return KILN_OK;
    }
    kn_dim out[KILN_MAX_RANK];
    memcpy(out, x->dims, sizeof(kn_dim) * (size_t)x->rank);
    out[a] = len;
    kn_ti_set(c, 0, x->dtype, x->rank, out);
    return KILN_OK;
}

kiln_status kn_infer_nonzero(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    kn_dim out[2] = {x->rank >= 0 ? kn_ti_known(x->rank == 0 ? 1 : x->rank) : kn_ti_unknown(), kn_ti_unknown()};
    const kn_tensor *v = kn_ti_value(c, 0);
    if (v && v->kind == KN_VALUE_TENSOR && v->dtype != KILN_DTYPE_STRING) {
        out[1] = kn_ti_known(kn_tensor_count_nonzero(v));
    }
    kn_ti_set(c, 0, KILN_DTYPE_INT64, 2, out);
    return KILN_OK;
}

/* ------------------------------------------------------------------ Unique */

kiln_status kn_infer_unique(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 1));
    const kn_type *x = c->in[0];
    const kn_attr *aa = kn_node_attr(c->node, "axis");
    kn_dim u = kn_ti_unknown();
    if (x->rank < 0) {
        if (aa) kn_ti_set_unknown_rank(c, 0, x->dtype);
        else kn_ti_set(c, 0, x->dtype, 1, NULL);
        for (int o = 1; o < c->n_outputs; o++) kn_ti_set(c, o, KILN_DTYPE_INT64, 1, NULL);
        return KILN_OK;
    }
    kn_dim inv;
    if (aa) {
        int a;
        KN_TRY(kn_infer_axis(c, aa->i, x->rank, "axis", &a));
        if (x->rank == 0) return kn_infer_error(c, KILN_ERR_SHAPE, "axis given for a scalar input");
        kn_dim out[KILN_MAX_RANK];
        memcpy(out, x->dims, sizeof(kn_dim) * (size_t)x->rank);
        out[a] = u;
        kn_ti_set(c, 0, x->dtype, x->rank, out);
        inv = x->dims[a];
    } else {
        kn_ti_set(c, 0, x->dtype, 1, &u);
        inv = kn_ti_product(x->dims, x->rank);
    }
    kn_ti_set(c, 1, KILN_DTYPE_INT64, 1, &u);
    kn_ti_set(c, 2, KILN_DTYPE_INT64, 1, &inv);
    kn_ti_set(c, 3, KILN_DTYPE_INT64, 1, &u);
    return KILN_OK;
}

/* ------------------------------------------------------------------ CenterCropPad */

kiln_status kn_infer_center_crop_pad(kn_infer_ctx *c) {
    KN_TRY(kn_ti_need(c, 2));
    const kn_type *x = c->in[0];
    int r = x->rank;
    if (r < 0) {
        kn_ti_set_unknown_rank(c, 0, x->dtype);
        return KILN_OK;
    }
    int na;
    const int64_t *axes = kn_attr_ints(c->node, "axes", &na);
    if (!axes) na = r;
    int64_t sh[KILN_MAX_RANK];
    int ns;
    KN_TRY(kn_infer_int_list(c, 1, sh, KILN_MAX_RANK, &ns));
    kn_dim out[KILN_MAX_RANK];
    memcpy(out, x->dims, sizeof(kn_dim) * (size_t)r);
    bool seen[KILN_MAX_RANK] = {false};
    if (ns >= 0 && ns != na)
        return kn_infer_error(c, KILN_ERR_SHAPE, "shape has %d elements for %d axes", ns, na);
    for (int i = 0; i < na; i++) {
        int a = i;
        if (axes) KN_TRY(kn_infer_axis(c, axes[i], r, "axis", &a));
        if (seen[a]) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "axis %d is given twice", a);
        seen[a] = true;
        if (ns < 0) out[a] = kn_ti_unknown();
        else if (sh[i] < 0)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "shape[%d] is negative (%lld)", i, (long long)sh[i]);
        else out[a] = kn_ti_known(sh[i]);
    }
    kn_ti_set(c, 0, x->dtype, r, out);
    return KILN_OK;
}

/* The image family: Resize/Upsample, GridSample, AffineGrid, RoiAlign, MaxRoiPool,
 * NonMaxSuppression and ImageDecoder. Schemas, shape inference and the Resize plan shared with
 * the kernels. */
#include "ops/image.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ the Resize plan */

static kiln_status why_error(char *why, size_t cap, kiln_status st, const char *fmt, ...) KN_PRINTF(4, 5);
static kiln_status why_error(char *why, size_t cap, kiln_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return st;
}

static const kn_tensor *nonempty(const kn_tensor *t) {
    return t && t->kind == KN_VALUE_TENSOR && kn_tensor_count(t) > 0 ? t : NULL;
}

static bool resize_is_legacy(const kn_node *node) {
    return !strcmp(node->op_type, "Upsample") || node->opset < 11;
}

void kn_resize_inputs(const kn_node *node, int n_inputs, const kn_tensor *const *values,
                      const kn_tensor **roi, const kn_tensor **scales, const kn_tensor **sizes) {
    kn_resize_inputs_of(resize_is_legacy(node), n_inputs, values, roi, scales, sizes);
}

void kn_resize_inputs_of(bool legacy, int n_inputs, const kn_tensor *const *values, const kn_tensor **roi,
                         const kn_tensor **scales, const kn_tensor **sizes) {
    *roi = *scales = *sizes = NULL;
    if (legacy) {
        if (n_inputs > 1) *scales = nonempty(values[1]);
        return;
    }
    if (n_inputs > 1) *roi = nonempty(values[1]);
    if (n_inputs > 2) *scales = nonempty(values[2]);
    if (n_inputs > 3) *sizes = nonempty(values[3]);
}

static bool parse_mode(const char *s, kn_resize_mode *m) {
    if (!strcmp(s, "nearest")) *m = KN_RESIZE_NEAREST;
    else if (!strcmp(s, "linear") || !strcmp(s, "bilinear")) *m = KN_RESIZE_LINEAR;
    else if (!strcmp(s, "cubic") || !strcmp(s, "bicubic")) *m = KN_RESIZE_CUBIC;
    else return false;
    return true;
}

static bool parse_coord(const char *s, kn_resize_coord *c) {
    static const struct { const char *name; kn_resize_coord v; } names[] = {
        {"half_pixel", KN_COORD_HALF_PIXEL},
        {"half_pixel_symmetric", KN_COORD_HALF_PIXEL_SYMMETRIC},
        {"pytorch_half_pixel", KN_COORD_PYTORCH_HALF_PIXEL},
        {"align_corners", KN_COORD_ALIGN_CORNERS},
        {"asymmetric", KN_COORD_ASYMMETRIC},
        {"tf_half_pixel_for_nn", KN_COORD_TF_HALF_PIXEL_FOR_NN},
        {"tf_crop_and_resize", KN_COORD_TF_CROP_AND_RESIZE},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            *c = names[i].v;
            return true;
        }
    return false;
}

static bool parse_nearest(const char *s, kn_resize_nearest *n) {
    if (!strcmp(s, "round_prefer_floor")) *n = KN_NEAREST_ROUND_PREFER_FLOOR;
    else if (!strcmp(s, "round_prefer_ceil")) *n = KN_NEAREST_ROUND_PREFER_CEIL;
    else if (!strcmp(s, "floor")) *n = KN_NEAREST_FLOOR;
    else if (!strcmp(s, "ceil")) *n = KN_NEAREST_CEIL;
    else return false;
    return true;
}

kiln_status kn_resize_prepare(const kn_node *node, void *params) {
    kn_resize_attrs *a = params;
    memset(a, 0, sizeof *a);
    a->legacy = resize_is_legacy(node);
    a->mode_name = kn_attr_string(node, "mode", "nearest");
    a->mode_ok = parse_mode(a->mode_name, &a->mode);
    a->cubic_a = -0.75;
    a->coord_ok = a->nearest_ok = true;
    a->policy_name = "stretch";
    if (!a->legacy) {
        a->coord_name = kn_attr_string(node, "coordinate_transformation_mode", "half_pixel");
        a->coord_ok = parse_coord(a->coord_name, &a->coord);
        a->nearest_name = kn_attr_string(node, "nearest_mode", "round_prefer_floor");
        a->nearest_ok = parse_nearest(a->nearest_name, &a->nearest);
        a->cubic_a = kn_attr_float(node, "cubic_coeff_a", -0.75f);
        a->exclude_outside = kn_attr_int(node, "exclude_outside", 0) != 0;
        a->extrapolation = kn_attr_float(node, "extrapolation_value", 0.0f);
        a->antialias = kn_attr_int(node, "antialias", 0) != 0;
        a->axes = kn_attr_ints(node, "axes", &a->n_axes);
        a->policy_name = kn_attr_string(node, "keep_aspect_ratio_policy", "stretch");
    }
    a->keep = !strcmp(a->policy_name, "stretch")      ? 0
              : !strcmp(a->policy_name, "not_larger")  ? 1
              : !strcmp(a->policy_name, "not_smaller") ? 2
                                                       : -1;
    a->attr_scales = !strcmp(node->op_type, "Upsample") && node->opset < 9;
    if (a->attr_scales) a->scales = kn_attr_floats(node, "scales", &a->n_scales);
    return KILN_OK;
}

kiln_status kn_resize_plan_make(const kn_node *node, int rank, const int64_t *in_dims,
                                const kn_tensor *roi, const kn_tensor *scales, const kn_tensor *sizes,
                                bool pending, kn_resize_plan *p, char *why, size_t cap) {
    kn_resize_attrs a;
    kn_resize_prepare(node, &a);
    return kn_resize_plan_from(&a, rank, in_dims, roi, scales, sizes, pending, p, why, cap);
}

kiln_status kn_resize_plan_from(const kn_resize_attrs *at, int rank, const int64_t *in_dims, const kn_tensor *roi,
                                const kn_tensor *scales, const kn_tensor *sizes, bool pending, kn_resize_plan *p,
                                char *why, size_t cap) {
    memset(p, 0, sizeof *p);
    if (rank < 0 || rank > KILN_MAX_RANK)
        return why_error(why, cap, KILN_ERR_UNSUPPORTED, "input rank %d is not supported", rank);
    p->rank = rank;
    for (int k = 0; k < rank; k++) {
        p->in_dims[k] = in_dims[k];
        p->out_dims[k] = in_dims[k];
        p->scale[k] = 1.0;
        p->roi_start[k] = 0.0;
        p->roi_end[k] = 1.0;
    }
    if (!at->mode_ok)
        return why_error(why, cap, KILN_ERR_INVALID_MODEL, "mode '%s' is not one of nearest, linear, cubic",
                         at->mode_name);
    p->mode = at->mode;
    const bool legacy = at->legacy;
    p->cubic_a = -0.75;
    if (legacy) {
        /* Upsample and Resize-10: output pixel x reads input x / scale */
        if (p->mode == KN_RESIZE_CUBIC)
            return why_error(why, cap, KILN_ERR_INVALID_MODEL, "mode 'cubic' needs Resize from opset 11");
        p->coord = KN_COORD_ASYMMETRIC;
        p->nearest = KN_NEAREST_SIMPLE;
    } else {
        if (!at->coord_ok)
            return why_error(why, cap, KILN_ERR_INVALID_MODEL, "coordinate_transformation_mode '%s' is not known",
                             at->coord_name);
        p->coord = at->coord;
        if (!at->nearest_ok)
            return why_error(why, cap, KILN_ERR_INVALID_MODEL,
                             "nearest_mode '%s' is not one of round_prefer_floor, round_prefer_ceil, floor, ceil",
                             at->nearest_name);
        p->nearest = at->nearest;
        p->cubic_a = at->cubic_a;
        p->exclude_outside = at->exclude_outside;
        p->extrapolation = at->extrapolation;
        p->antialias = at->antialias;
    }

    /* the resized axes, in the order the scales/sizes/roi entries list them */
    int axes[KILN_MAX_RANK], n_axes = rank;
    for (int k = 0; k < rank; k++) axes[k] = k;
    const int n_attr_axes = legacy ? 0 : at->n_axes;
    const int64_t *attr_axes = legacy ? NULL : at->axes;
    if (attr_axes && n_attr_axes > 0) {
        if (n_attr_axes > rank)
            return why_error(why, cap, KILN_ERR_INVALID_MODEL, "attribute 'axes' has %d entries for rank %d",
                             n_attr_axes, rank);
        bool seen[KILN_MAX_RANK] = {false};
        for (int i = 0; i < n_attr_axes; i++) {
            int64_t a = attr_axes[i];
            if (a < -rank || a >= rank)
                return why_error(why, cap, KILN_ERR_INVALID_MODEL, "axis %lld is out of range for rank %d",
                                 (long long)a, rank);
            if (a < 0) a += rank;
            if (seen[a])
                return why_error(why, cap, KILN_ERR_INVALID_MODEL, "axis %lld appears twice in 'axes'", (long long)a);
            seen[a] = true;
            axes[i] = (int)a;
        }
        n_axes = n_attr_axes;
    }
    const int keep = legacy ? 0 : at->keep; /* 0 stretch, 1 not_larger, 2 not_smaller */
    if (keep < 0)
        return why_error(why, cap, KILN_ERR_INVALID_MODEL,
                         "keep_aspect_ratio_policy '%s' is not one of stretch, not_larger, not_smaller",
                         at->policy_name);

    if (roi) {
        int64_t n = kn_tensor_count(roi);
        if (n != 2 * n_axes)
            return why_error(why, cap, KILN_ERR_INVALID_MODEL, "'roi' has %lld values; %d resized axes need %d",
                             (long long)n, n_axes, 2 * n_axes);
        for (int i = 0; i < n_axes; i++) {
            p->roi_start[axes[i]] = kn_tensor_get_f64(roi, i);
            p->roi_end[axes[i]] = kn_tensor_get_f64(roi, n_axes + i);
        }
    }

    /* Upsample-7 carries its scales as an attribute */
    double sv[KILN_MAX_RANK];
    int n_scales = -1;
    if (at->attr_scales) {
        int n = at->n_scales;
        const float *f = at->scales;
        if (!f) return why_error(why, cap, KILN_ERR_INVALID_MODEL, "attribute 'scales' is missing");
        if (n > KILN_MAX_RANK) n = KILN_MAX_RANK + 1;
        for (int i = 0; i < n && i < KILN_MAX_RANK; i++) sv[i] = f[i];
        n_scales = n;
    } else if (scales) {
        if (sizes)
            return why_error(why, cap, KILN_ERR_INVALID_MODEL, "both 'scales' and 'sizes' are given; only one may be");
        if (!kn_dtype_is_float(scales->dtype))
            return why_error(why, cap, KILN_ERR_INVALID_MODEL, "'scales' must be a float tensor, got %s",
                             kiln_dtype_name(scales->dtype));
        int64_t n = kn_tensor_count(scales);
        n_scales = n > KILN_MAX_RANK ? KILN_MAX_RANK + 1 : (int)n;
        for (int i = 0; i < n_scales && i < KILN_MAX_RANK; i++) sv[i] = kn_tensor_get_f64(scales, i);
    }
    if (n_scales >= 0) {
        if (n_scales != n_axes)
            return why_error(why, cap, KILN_ERR_INVALID_MODEL, "'scales' has %d values for %d resized axes (input rank %d)",
                             n_scales, n_axes, rank);
        for (int i = 0; i < n_axes; i++) {
            int a = axes[i];
            if (!(sv[i] > 0) || !isfinite(sv[i]))
                return why_error(why, cap, KILN_ERR_INVALID_MODEL, "scale %g for axis %d must be positive", sv[i], a);
            p->scale[a] = sv[i];
            /* floor(in * scale) in double, as the reference computes it from the float scale */
            p->out_dims[a] = in_dims[a] < 0 ? -1 : (int64_t)floor(sv[i] * (double)in_dims[a]);
        }
        return KILN_OK;
    }
    if (sizes) {
        if (!kn_dtype_is_int(sizes->dtype))
            return why_error(why, cap, KILN_ERR_INVALID_MODEL, "'sizes' must be an int64 tensor, got %s",
                             kiln_dtype_name(sizes->dtype));
        int64_t n = kn_tensor_count(sizes);
        if (n != n_axes)
            return why_error(why, cap, KILN_ERR_INVALID_MODEL, "'sizes' has %lld values for %d resized axes (input rank %d)",
                             (long long)n, n_axes, rank);
        int64_t sz[KILN_MAX_RANK];
        bool all_known = true;
        for (int i = 0; i < n_axes; i++) {
            sz[i] = kn_tensor_get_i64(sizes, i);
            if (sz[i] < 0)
                return why_error(why, cap, KILN_ERR_INVALID_MODEL, "size %lld for axis %d is negative", (long long)sz[i],
                                 axes[i]);
            int64_t in = in_dims[axes[i]];
            if (in == 0 && sz[i] > 0)
                return why_error(why, cap, KILN_ERR_SHAPE, "axis %d of the input is empty and cannot be resized to %lld",
                                 axes[i], (long long)sz[i]);
            if (in < 0) all_known = false;
        }
        if (keep == 0) {
            for (int i = 0; i < n_axes; i++) {
                int a = axes[i];
                p->out_dims[a] = sz[i];
                p->scale[a] = in_dims[a] > 0 ? (double)sz[i] / (double)in_dims[a] : 1.0;
            }
            return KILN_OK;
        }
        if (!all_known) {
            for (int i = 0; i < n_axes; i++) p->out_dims[axes[i]] = -1;
            return KILN_OK;
        }
        double s = 0;
        for (int i = 0; i < n_axes; i++) {
            int64_t in = in_dims[axes[i]];
            double r = in > 0 ? (double)sz[i] / (double)in : 1.0;
            if (i == 0 || (keep == 1 ? r < s : r > s)) s = r;
        }
        for (int i = 0; i < n_axes; i++) {
            int a = axes[i];
            p->scale[a] = s;
            p->out_dims[a] = (int64_t)(s * (double)in_dims[a] + 0.5); /* round half up */
        }
        return KILN_OK;
    }
    if (pending) {
        for (int i = 0; i < n_axes; i++) p->out_dims[axes[i]] = -1;
        return KILN_OK;
    }
    return why_error(why, cap, KILN_ERR_INVALID_MODEL, "neither 'scales' nor 'sizes' is given");
}

/* ------------------------------------------------------------------ infer helpers */

static kiln_status need_input(kn_infer_ctx *c, int i, const char *name) {
    if (i >= c->n_inputs || !c->in[i])
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d ('%s') is missing", i, name);
    return KILN_OK;
}


static void set_out_dims(kn_infer_ctx *c, int o, kiln_dtype dtype, int rank, const kn_dim *dims) {
    if (o >= c->n_outputs) return;
    kn_type *t = &c->out[o];
    kn_type_init(t);
    t->kind = KN_TYPE_TENSOR;
    t->dtype = dtype;
    t->rank = rank;
    for (int k = 0; k < rank && k < KILN_MAX_RANK; k++) t->dims[k] = dims[k];
}

static kn_dim dim_of(const kn_type *t, int k) {
    if (!t || t->rank <= k) return (kn_dim){-1, NULL};
    return t->dims[k];
}

static kn_dim known(int64_t v) { return (kn_dim){v, NULL}; }

/* ------------------------------------------------------------------ Resize / Upsample */

static kiln_status infer_resize(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    const kn_type *x = c->in[0];
    if (x->rank < 0) {
        set_out_dims(c, 0, x->dtype, -1, NULL);
        return KILN_OK;
    }
    int64_t in_dims[KILN_MAX_RANK];
    for (int k = 0; k < x->rank; k++) in_dims[k] = x->dims[k].value;
    const kn_tensor *roi, *scales, *sizes;
    kn_resize_inputs(c->node, c->n_inputs, c->in_value, &roi, &scales, &sizes);
    bool pending = false;
    for (int i = 1; i < c->n_inputs; i++)
        if (c->in[i] && !c->in_value[i]) pending = true;
    kn_resize_plan plan;
    char why[512];
    kiln_status st = kn_resize_plan_make(c->node, x->rank, in_dims, roi, scales, sizes, pending, &plan, why, sizeof why);
    if (st != KILN_OK) return kn_infer_error(c, st, "%s", why);
    kn_dim d[KILN_MAX_RANK];
    for (int k = 0; k < x->rank; k++) {
        if (plan.out_dims[k] >= 0 && plan.out_dims[k] == x->dims[k].value) d[k] = x->dims[k];
        else if (plan.out_dims[k] >= 0) d[k] = known(plan.out_dims[k]);
        else if (x->dims[k].value < 0 && plan.scale[k] == 1.0 && !pending) d[k] = x->dims[k];
        else d[k] = known(-1);
    }
    set_out_dims(c, 0, x->dtype, x->rank, d);
    return KILN_OK;
}

/* ------------------------------------------------------------------ GridSample / AffineGrid */

static kiln_status infer_gridsample(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    KN_TRY(need_input(c, 1, "grid"));
    const kn_type *x = c->in[0], *g = c->in[1];
    const char *mode = kn_attr_string(c->node, "mode", c->node->opset >= 20 ? "linear" : "bilinear");
    if (strcmp(mode, "linear") && strcmp(mode, "bilinear") && strcmp(mode, "nearest") && strcmp(mode, "cubic") &&
        strcmp(mode, "bicubic"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "mode '%s' is not one of linear, nearest, cubic", mode);
    const char *pad = kn_attr_string(c->node, "padding_mode", "zeros");
    if (strcmp(pad, "zeros") && strcmp(pad, "border") && strcmp(pad, "reflection"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "padding_mode '%s' is not one of zeros, border, reflection", pad);
    int rank = x->rank >= 0 ? x->rank : g->rank;
    if (rank < 0) {
        set_out_dims(c, 0, x->dtype, -1, NULL);
        return KILN_OK;
    }
    if (rank < 3)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input X has rank %d; it needs [N, C, D1, ...] (rank >= 3)", rank);
    if (x->rank >= 0 && g->rank >= 0 && x->rank != g->rank)
        return kn_infer_error(c, KILN_ERR_SHAPE, "X has rank %d but grid has rank %d; they must be equal", x->rank, g->rank);
    int sp = rank - 2;
    kn_dim last = dim_of(g, rank - 1);
    if (last.value >= 0 && last.value != sp)
        return kn_infer_error(c, KILN_ERR_SHAPE, "grid's last dimension is %lld but X has %d spatial dimensions",
                              (long long)last.value, sp);
    kn_dim n0 = dim_of(x, 0), n1 = dim_of(g, 0);
    if (n0.value >= 0 && n1.value >= 0 && n0.value != n1.value)
        return kn_infer_error(c, KILN_ERR_SHAPE, "X has batch %lld but grid has batch %lld", (long long)n0.value,
                              (long long)n1.value);
    kn_dim d[KILN_MAX_RANK];
    d[0] = n0.value >= 0 || n0.symbol ? n0 : n1;
    d[1] = dim_of(x, 1);
    for (int k = 0; k < sp; k++) d[2 + k] = dim_of(g, 1 + k);
    set_out_dims(c, 0, x->dtype, rank, d);
    return KILN_OK;
}

static kiln_status infer_affinegrid(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "theta"));
    KN_TRY(need_input(c, 1, "size"));
    const kn_type *th = c->in[0], *sz = c->in[1];
    int64_t v[8];
    int n = -1;
    KN_TRY(kn_infer_int_list(c, 1, v, 8, &n));
    int sp = -1;
    if (n >= 0) sp = n - 2;
    else if (sz->rank == 1 && sz->dims[0].value >= 0) sp = (int)sz->dims[0].value - 2;
    else if (th->rank == 3 && th->dims[1].value >= 0) sp = (int)th->dims[1].value;
    if (sp < 0) {
        set_out_dims(c, 0, th->dtype, -1, NULL);
        return KILN_OK;
    }
    if (sp != 2 && sp != 3)
        return kn_infer_error(c, KILN_ERR_SHAPE, "'size' must have 4 ([N,C,H,W]) or 5 ([N,C,D,H,W]) values, got %d", sp + 2);
    if (th->rank >= 0 && th->rank != 3)
        return kn_infer_error(c, KILN_ERR_SHAPE, "theta has rank %d; it must be [N, %d, %d]", th->rank, sp, sp + 1);
    if (th->rank == 3 && ((th->dims[1].value >= 0 && th->dims[1].value != sp) ||
                          (th->dims[2].value >= 0 && th->dims[2].value != sp + 1)))
        return kn_infer_error(c, KILN_ERR_SHAPE, "theta is [%lld, %lld, %lld] but a %d-D grid needs [N, %d, %d]",
                              (long long)th->dims[0].value, (long long)th->dims[1].value, (long long)th->dims[2].value,
                              sp, sp, sp + 1);
    kn_dim d[KILN_MAX_RANK];
    if (n >= 0) {
        for (int k = 0; k < n; k++)
            if (v[k] < 0) return kn_infer_error(c, KILN_ERR_SHAPE, "'size' has a negative value %lld", (long long)v[k]);
        d[0] = known(v[0]);
        for (int k = 0; k < sp; k++) d[1 + k] = known(v[2 + k]);
    } else {
        d[0] = dim_of(th, 0);
        for (int k = 0; k < sp; k++) d[1 + k] = known(-1);
    }
    d[sp + 1] = known(sp);
    set_out_dims(c, 0, th->dtype, sp + 2, d);
    return KILN_OK;
}

/* ------------------------------------------------------------------ RoiAlign / MaxRoiPool */

static kiln_status check_rank(kn_infer_ctx *c, const kn_type *t, int rank, const char *name, const char *layout) {
    if (t && t->rank >= 0 && t->rank != rank)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input '%s' has rank %d; it must be %s", name, t->rank, layout);
    return KILN_OK;
}

static kiln_status infer_roialign(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    KN_TRY(need_input(c, 1, "rois"));
    KN_TRY(need_input(c, 2, "batch_indices"));
    const kn_type *x = c->in[0], *rois = c->in[1], *bi = c->in[2];
    KN_TRY(check_rank(c, x, 4, "X", "[N, C, H, W]"));
    KN_TRY(check_rank(c, rois, 2, "rois", "[num_rois, 4]"));
    KN_TRY(check_rank(c, bi, 1, "batch_indices", "[num_rois]"));
    const char *mode = kn_attr_string(c->node, "mode", "avg");
    if (strcmp(mode, "avg") && strcmp(mode, "max"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "mode '%s' is not one of avg, max", mode);
    if (c->node->opset >= 16) {
        const char *ct = kn_attr_string(c->node, "coordinate_transformation_mode", "half_pixel");
        if (strcmp(ct, "half_pixel") && strcmp(ct, "output_half_pixel"))
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL,
                                  "coordinate_transformation_mode '%s' is not one of half_pixel, output_half_pixel", ct);
    }
    int64_t oh = kn_attr_int(c->node, "output_height", 1), ow = kn_attr_int(c->node, "output_width", 1);
    if (oh <= 0 || ow <= 0)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "output_height %lld and output_width %lld must be positive",
                              (long long)oh, (long long)ow);
    kn_dim r4 = dim_of(rois, 1);
    if (r4.value >= 0 && r4.value != 4)
        return kn_infer_error(c, KILN_ERR_SHAPE, "rois has %lld columns; it must be [num_rois, 4]", (long long)r4.value);
    kn_dim nr = dim_of(rois, 0), nb = dim_of(bi, 0);
    if (nr.value >= 0 && nb.value >= 0 && nr.value != nb.value)
        return kn_infer_error(c, KILN_ERR_SHAPE, "rois has %lld rows but batch_indices has %lld", (long long)nr.value,
                              (long long)nb.value);
    kn_dim d[4] = {nr.value >= 0 || nr.symbol ? nr : nb, dim_of(x, 1), known(oh), known(ow)};
    set_out_dims(c, 0, x->dtype, 4, d);
    return KILN_OK;
}

static kiln_status infer_maxroipool(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    KN_TRY(need_input(c, 1, "rois"));
    const kn_type *x = c->in[0], *rois = c->in[1];
    KN_TRY(check_rank(c, x, 4, "X", "[N, C, H, W]"));
    KN_TRY(check_rank(c, rois, 2, "rois", "[num_rois, 5]"));
    int n = 0;
    const int64_t *ps = kn_attr_ints(c->node, "pooled_shape", &n);
    if (!ps || n != 2 || ps[0] <= 0 || ps[1] <= 0)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attribute 'pooled_shape' must be two positive values");
    kn_dim r5 = dim_of(rois, 1);
    if (r5.value >= 0 && r5.value != 5)
        return kn_infer_error(c, KILN_ERR_SHAPE, "rois has %lld columns; it must be [num_rois, 5]", (long long)r5.value);
    kn_dim d[4] = {dim_of(rois, 0), dim_of(x, 1), known(ps[0]), known(ps[1])};
    set_out_dims(c, 0, x->dtype, 4, d);
    return KILN_OK;
}

/* ------------------------------------------------------------------ NonMaxSuppression */

static kiln_status infer_nms(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "boxes"));
    KN_TRY(need_input(c, 1, "scores"));
    const kn_type *b = c->in[0], *s = c->in[1];
    KN_TRY(check_rank(c, b, 3, "boxes", "[num_batches, num_boxes, 4]"));
    KN_TRY(check_rank(c, s, 3, "scores", "[num_batches, num_classes, num_boxes]"));
    kn_dim b4 = dim_of(b, 2);
    if (b4.value >= 0 && b4.value != 4)
        return kn_infer_error(c, KILN_ERR_SHAPE, "boxes' last dimension is %lld; it must be 4", (long long)b4.value);
    kn_dim nb = dim_of(b, 1), ns = dim_of(s, 2);
    if (nb.value >= 0 && ns.value >= 0 && nb.value != ns.value)
        return kn_infer_error(c, KILN_ERR_SHAPE, "boxes has %lld boxes but scores has %lld", (long long)nb.value,
                              (long long)ns.value);
    int64_t cpb = kn_attr_int(c->node, "center_point_box", 0);
    if (cpb != 0 && cpb != 1)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "center_point_box %lld must be 0 or 1", (long long)cpb);
    kn_dim d[2] = {known(-1), known(3)};
    set_out_dims(c, 0, KILN_DTYPE_INT64, 2, d);
    return KILN_OK;
}

/* ------------------------------------------------------------------ ImageDecoder */

static kiln_status infer_image_decoder(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "encoded_stream"));
    const kn_type *x = c->in[0];
    if (x->dtype && x->dtype != KILN_DTYPE_UINT8)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "encoded_stream must be uint8, got %s", kiln_dtype_name(x->dtype));
    KN_TRY(check_rank(c, x, 1, "encoded_stream", "1-D"));
    const char *fmt = kn_attr_string(c->node, "pixel_format", "RGB");
    if (strcmp(fmt, "RGB") && strcmp(fmt, "BGR") && strcmp(fmt, "Grayscale"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "pixel_format '%s' is not one of RGB, BGR, Grayscale", fmt);
    kn_dim d[3] = {known(-1), known(-1), known(strcmp(fmt, "Grayscale") ? 3 : 1)};
    set_out_dims(c, 0, KILN_DTYPE_UINT8, 3, d);
    return KILN_OK;
}

const kn_op_schema kn_ops_image[] = {
    {"", "Upsample", 7, 8, 1, 1, 1, 1, infer_resize, 0},
    {"", "Upsample", 9, 0, 2, 2, 1, 1, infer_resize, 0},
    {"", "Resize", 10, 10, 2, 2, 1, 1, infer_resize, 0},
    {"", "Resize", 11, 12, 2, 4, 1, 1, infer_resize, 0},
    {"", "Resize", 13, 0, 1, 4, 1, 1, infer_resize, 0},
    {"", "GridSample", 16, 0, 2, 2, 1, 1, infer_gridsample, 0},
    {"", "AffineGrid", 20, 0, 2, 2, 1, 1, infer_affinegrid, 0},
    {"", "RoiAlign", 10, 0, 3, 3, 1, 1, infer_roialign, 0},
    {"", "MaxRoiPool", 1, 0, 2, 2, 1, 1, infer_maxroipool, 0},
    {"", "NonMaxSuppression", 10, 0, 2, 5, 1, 1, infer_nms, 0},
    {"", "ImageDecoder", 20, 0, 1, 1, 1, 1, infer_image_decoder, 0},
    {0},
};

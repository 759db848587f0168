/* CPU kernels of the tensor family: the table, and the kernels that only copy or describe
 * (Constant, Identity, Dropout, Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze). The others
 * are in tensor_layout.c, tensor_index.c and tensor_misc.c. */
#include "backend/cpu/rng.h"
#include "backend/cpu/tensor_kernels.h"

#include <stdlib.h>
#include <string.h>

static kiln_status run_constant(kn_kernel_ctx *c) {
    kn_tensor *y;
    KN_TRY(kn_cpu_out(c, 0, &y));
    kn_cpu_tensor_prm local_prm;
    const kn_cpu_tensor_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_cpu_tensor_prepare, &local_prm, (const void **)&prm));
    const kn_attr *a = prm->value;
    const int kind = a ? prm->value_kind : -1;
    int64_t cnt = kn_tensor_count(y);
    if (kind == 0) return kn_cpu_copy_all(c, y, a->t);
    if (kind == 1) {
        if (y->dtype != KILN_DTYPE_FLOAT || cnt != 1) goto mismatch;
        ((float *)y->data)[0] = a->f;
    } else if (kind == 2) {
        if (y->dtype != KILN_DTYPE_FLOAT || cnt != a->n) goto mismatch;
        if (cnt) memcpy(y->data, a->floats, sizeof(float) * (size_t)cnt);
    } else if (kind == 3) {
        if (y->dtype != KILN_DTYPE_INT64 || cnt != 1) goto mismatch;
        ((int64_t *)y->data)[0] = a->i;
    } else if (kind == 4) {
        if (y->dtype != KILN_DTYPE_INT64 || cnt != a->n) goto mismatch;
        if (cnt) memcpy(y->data, a->ints, sizeof(int64_t) * (size_t)cnt);
    } else if (kind == 5) {
        if (y->dtype != KILN_DTYPE_STRING || cnt != 1) goto mismatch;
        if (!kn_cpu_fill_elems(y, 0, 1, &a->s)) return KN_OOM();
    } else if (kind == 6) {
        if (y->dtype != KILN_DTYPE_STRING || cnt != a->n) goto mismatch;
        for (int64_t i = 0; i < cnt; i++)
            if (!kn_cpu_fill_elems(y, i, 1, &a->strings[i])) return KN_OOM();
    } else {
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "no supported value attribute");
    }
    return KILN_OK;
mismatch:
    return kn_kernel_error(c, KILN_ERR_INTERNAL, "output does not match attribute '%s'", a->name);
}

/* Identity, and the views (Reshape, Flatten, Squeeze, Unsqueeze): the output holds the same
 * elements; one copy into the preallocated output. Sequences and optionals are cloned. */
static kiln_status run_copy(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    if (!x) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "input is missing");
    if (x->kind != KN_VALUE_TENSOR) {
        kn_tensor *copy;
        KN_TRY(kn_tensor_clone(x, &copy));
        kn_tensor_free(c->out[0]);
        c->out[0] = copy;
        return KILN_OK;
    }
    kn_tensor *y = c->out[0];
    if (!y && !strcmp(c->node->op_type, "Identity")) KN_TRY(kn_ctx_output(c, 0, x->dtype, x->rank, x->dims, &y));
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    return kn_cpu_copy_all(c, y, x);
}

/* Inference-mode Dropout is the identity with an all-true mask. In training mode (opset 12+,
 * training_mode true) an element is kept when a uniform [0, 1) draw is >= ratio and scaled by
 * 1/(1-ratio). The draws come from MT19937 seeded with the 'seed' attribute and turned into
 * doubles with 53 random bits, the generator and conversion numpy's RandomState uses (rng.h), so
 * a seeded node reproduces the reference outputs. */
static kiln_status run_dropout(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y, *mask = NULL;
    KN_TRY(kn_ctx_output(c, 0, x->dtype, x->rank, x->dims, &y));
    bool train = false;
    double ratio = 0.5;
    if (c->node->opset >= 12) {
        const kn_tensor *rt = c->n_inputs > 1 ? c->in[1] : NULL, *tm = c->n_inputs > 2 ? c->in[2] : NULL;
        if (rt && kn_tensor_count(rt) >= 1) ratio = kn_tensor_get_f64(rt, 0);
        if (tm && kn_tensor_count(tm) >= 1) train = kn_tensor_get_i64(tm, 0) != 0;
    }
    int64_t n = kn_tensor_count(x);
    if (c->n_outputs > 1 && c->node->outputs[1] >= 0)
        KN_TRY(kn_ctx_output(c, 1, c->node->opset >= 10 ? KILN_DTYPE_BOOL : x->dtype, x->rank, x->dims, &mask));
    if (!train || ratio == 0) {
        KN_TRY(kn_cpu_copy_all(c, y, x));
        if (mask) {
            if (mask->dtype == KILN_DTYPE_BOOL) memset(mask->data, 1, (size_t)n);
            else
                for (int64_t i = 0; i < n; i++) kn_tensor_set_f64(mask, i, 1.0);
        }
        return KILN_OK;
    }
    if (!kn_dtype_is_float(x->dtype))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "training-mode Dropout on %s", kiln_dtype_name(x->dtype));
    if (!(ratio >= 0 && ratio < 1)) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "ratio %g is outside [0, 1)", ratio);
    kn_rng state, *rng = &state; /* 2.5 KB on the stack */
    kn_cpu_tensor_prm local_prm;
    const kn_cpu_tensor_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_cpu_tensor_prepare, &local_prm, (const void **)&prm));
    kn_rng_seed(rng, (uint32_t)prm->seed);
    double scale = 1.0 / (1.0 - ratio);
    for (int64_t i = 0; i < n; i++) {
        bool keep = kn_rng_uniform(rng) >= ratio;
        if (x->dtype == KILN_DTYPE_FLOAT) /* float arithmetic, as the reference */
            ((float *)y->data)[i] = keep ? ((const float *)x->data)[i] * (float)scale : 0.0f;
        else
            kn_tensor_set_f64(y, i, keep ? kn_tensor_get_f64(x, i) * scale : 0.0);
        if (mask) kn_tensor_set_f64(mask, i, keep);
    }
    return KILN_OK;
}

/* Shape's start and end (its prepare hook) */
typedef struct shape_prm {
    int64_t start, end;
} shape_prm;

static kiln_status shape_prepare(const kn_node *n, void *params) {
    shape_prm *p = params;
    p->start = kn_attr_int(n, "start", 0);
    p->end = kn_attr_int(n, "end", INT64_MAX);
    return KILN_OK;
}

static kiln_status run_shape(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    int r = x->rank;
    shape_prm local;
    const shape_prm *prm;
    KN_TRY(kn_ctx_params(c, shape_prepare, &local, (const void **)&prm));
    int64_t start = prm->start, end = prm->end;
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = start < 0 ? 0 : start > r ? r : start;
    end = end < 0 ? 0 : end > r ? r : end;
    int64_t len = end > start ? end - start : 0;
    kn_tensor *y;
    KN_TRY(kn_ctx_output(c, 0, KILN_DTYPE_INT64, 1, &len, &y));
    if (len) memcpy(y->data, x->dims + start, sizeof(int64_t) * (size_t)len);
    return KILN_OK;
}

static kiln_status run_size(kn_kernel_ctx *c) {
    kn_tensor *y;
    KN_TRY(kn_ctx_output(c, 0, KILN_DTYPE_INT64, 0, NULL, &y));
    ((int64_t *)y->data)[0] = kn_tensor_count(c->in[0]);
    return KILN_OK;
}

const kn_cpu_kernel kn_cpu_tensor[] = {
    {"", "Constant", run_constant, NULL, 0, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "Identity", run_copy, NULL, KN_KERNEL_OVERWRITES},
    {"", "Dropout", run_dropout, NULL, 0, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "Shape", run_shape, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(shape_prepare, shape_prm)},
    {"", "Size", run_size, NULL, KN_KERNEL_OVERWRITES},
    {"", "Reshape", run_copy, NULL, KN_KERNEL_OVERWRITES},
    {"", "Flatten", run_copy, NULL, KN_KERNEL_OVERWRITES},
    {"", "Squeeze", run_copy, NULL, KN_KERNEL_OVERWRITES},
    {"", "Unsqueeze", run_copy, NULL, KN_KERNEL_OVERWRITES},
    {"", "Transpose", kn_cpu_transpose, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_perm_prepare, kn_cpu_perm_prm)},
    {"", "Concat", kn_cpu_concat, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_axis_prepare, kn_cpu_axis_prm)},
    {"", "Split", kn_cpu_split, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_axis_prepare, kn_cpu_axis_prm)},
    {"", "Slice", kn_cpu_slice, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_slice_prepare, kn_slice_prm)},
    {"", "Gather", kn_cpu_gather, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_axis_prepare, kn_cpu_axis_prm)},
    {"", "GatherElements", kn_cpu_gather_elements, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_axis_prepare, kn_cpu_axis_prm)},
    {"", "GatherND", kn_cpu_gather_nd, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "ScatterElements", kn_cpu_scatter_elements, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "Scatter", kn_cpu_scatter_elements, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "ScatterND", kn_cpu_scatter_nd, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "TensorScatter", kn_cpu_tensor_scatter, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "Expand", kn_cpu_expand, NULL, KN_KERNEL_OVERWRITES},
    {"", "Tile", kn_cpu_tile, NULL, KN_KERNEL_OVERWRITES},
    /* every path writes every output element (the pad value, the input, or edge/reflect/wrap copies) */
    {"", "Pad", kn_cpu_pad, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_pad_prepare, kn_pad_prm)},
    {"", "CenterCropPad", kn_cpu_center_crop_pad, NULL},
    {"", "DepthToSpace", kn_cpu_depth_to_space, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "SpaceToDepth", kn_cpu_space_to_depth, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "ConstantOfShape", kn_cpu_constant_of_shape, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "Range", kn_cpu_range, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "CumSum", kn_cpu_cumulative, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "CumProd", kn_cpu_cumulative, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "Trilu", kn_cpu_trilu, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "OneHot", kn_cpu_onehot, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "EyeLike", kn_cpu_eyelike, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "ReverseSequence", kn_cpu_reverse_sequence, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "Compress", kn_cpu_compress, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {"", "NonZero", kn_cpu_nonzero, NULL},
    {"", "Unique", kn_cpu_unique, NULL, 0, KN_PARAMS(kn_cpu_tensor_prepare, kn_cpu_tensor_prm)},
    {0},
};

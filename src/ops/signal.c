/* The signal family: DFT, STFT, the window functions and MelWeightMatrix. Schemas and shape
 * inference. */
#include "ops/signal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static kiln_status why_error(char *why, size_t cap, kiln_status st, const char *fmt, ...) KN_PRINTF(4, 5);
static kiln_status why_error(char *why, size_t cap, kiln_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return st;
}

static bool scalar_int(const kn_tensor *t, int64_t *v) {
    if (!t || t->kind != KN_VALUE_TENSOR || !kn_dtype_is_int(t->dtype) || kn_tensor_count(t) != 1) return false;
    *v = kn_tensor_get_i64(t, 0);
    return true;
}

void kn_dft_attrs_read(const kn_node *node, kn_dft_attrs *a) {
    a->inverse = kn_attr_int(node, "inverse", 0) != 0;
    a->onesided = kn_attr_int(node, "onesided", 0) != 0;
    a->axis = kn_attr_int(node, "axis", 1);
}

kiln_status kn_dft_params_get(const kn_node *node, int rank, const int64_t *dims, const kn_tensor *dft_length,
                              bool length_pending, const kn_tensor *axis_t, bool axis_pending, kn_dft_params *p,
                              char *why, size_t cap) {
    kn_dft_attrs a;
    kn_dft_attrs_read(node, &a);
    return kn_dft_params_get_with(node, &a, rank, dims, dft_length, length_pending, axis_t, axis_pending, p, why, cap);
}

kiln_status kn_dft_params_get_with(const kn_node *node, const kn_dft_attrs *a, int rank, const int64_t *dims,
                                   const kn_tensor *dft_length, bool length_pending, const kn_tensor *axis_t,
                                   bool axis_pending, kn_dft_params *p, char *why, size_t cap) {
    memset(p, 0, sizeof *p);
    p->inverse = a->inverse;
    p->onesided = a->onesided;
    p->out_last = p->inverse && p->onesided ? 1 : 2;
    p->n = p->out_len = -1;
    p->axis = -1;
    if (rank < 2) return why_error(why, cap, KILN_ERR_SHAPE, "input has rank %d; it needs [..., signal, 1 or 2]", rank);
    if (dims[rank - 1] >= 0 && dims[rank - 1] != 1 && dims[rank - 1] != 2)
        return why_error(why, cap, KILN_ERR_SHAPE, "the input's last dimension is %lld; it must be 1 (real) or 2 (complex)",
                         (long long)dims[rank - 1]);
    int64_t axis;
    if (node->opset >= 20) {
        axis = -2;
        if (axis_t) {
            if (!scalar_int(axis_t, &axis))
                return why_error(why, cap, KILN_ERR_INVALID_MODEL, "input 'axis' must be an integer scalar");
        } else if (axis_pending)
            return KILN_OK;
    } else
        axis = a->axis;
    if (axis < -rank || axis >= rank)
        return why_error(why, cap, KILN_ERR_INVALID_MODEL, "axis %lld is out of range for rank %d", (long long)axis, rank);
    if (axis < 0) axis += rank;
    if (axis == rank - 1)
        return why_error(why, cap, KILN_ERR_INVALID_MODEL,
                         "axis %lld is the last (real/imaginary) dimension; the signal axis must come before it",
                         (long long)axis);
    p->axis = (int)axis;
    int64_t len = dims[axis];
    if (dft_length) {
        if (!scalar_int(dft_length, &p->n))
            return why_error(why, cap, KILN_ERR_INVALID_MODEL, "input 'dft_length' must be an integer scalar");
        if (p->n < 1)
            return why_error(why, cap, KILN_ERR_INVALID_MODEL, "dft_length %lld must be positive", (long long)p->n);
    } else if (length_pending)
        return KILN_OK;
    else if (len >= 0) {
        p->n = p->inverse && p->onesided ? 2 * (len - 1) : len;
        if (p->n < 1)
            return why_error(why, cap, KILN_ERR_SHAPE, "the signal axis has length %lld, too short for a transform",
                             (long long)len);
    }
    if (p->n >= 0) p->out_len = !p->inverse && p->onesided ? p->n / 2 + 1 : p->n;
    return KILN_OK;
}

static kiln_status need_input(kn_infer_ctx *c, int i, const char *name) {
    if (i >= c->n_inputs || !c->in[i])
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d ('%s') is missing", i, name);
    return KILN_OK;
}

static const kn_tensor *in_val(const kn_infer_ctx *c, int i) { return i < c->n_inputs ? c->in_value[i] : NULL; }
static bool in_pending(const kn_infer_ctx *c, int i) { return i < c->n_inputs && c->in[i] && !c->in_value[i]; }

static void set_out(kn_infer_ctx *c, int o, kiln_dtype dtype, int rank, const kn_dim *dims) {
    if (o >= c->n_outputs) return;
    kn_type *t = &c->out[o];
    kn_type_init(t);
    t->kind = KN_TYPE_TENSOR;
    t->dtype = dtype;
    t->rank = rank;
    for (int k = 0; k < rank && k < KILN_MAX_RANK; k++) t->dims[k] = dims[k];
}

static kn_dim known(int64_t v) { return (kn_dim){v, NULL}; }

static kiln_status infer_dft(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "input"));
    const kn_type *x = c->in[0];
    if (x->dtype && !kn_dtype_is_float(x->dtype))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input must be a float tensor, got %s", kiln_dtype_name(x->dtype));
    if (x->rank < 0) {
        set_out(c, 0, x->dtype, -1, NULL);
        return KILN_OK;
    }
    int64_t dims[KILN_MAX_RANK];
    for (int k = 0; k < x->rank; k++) dims[k] = x->dims[k].value;
    kn_dft_params p;
    char why[512];
    kiln_status st = kn_dft_params_get(c->node, x->rank, dims, in_val(c, 1), in_pending(c, 1),
                                       c->node->opset >= 20 ? in_val(c, 2) : NULL,
                                       c->node->opset >= 20 && in_pending(c, 2), &p, why, sizeof why);
    if (st != KILN_OK) return kn_infer_error(c, st, "%s", why);
    kn_dim d[KILN_MAX_RANK];
    for (int k = 0; k < x->rank; k++) d[k] = x->dims[k];
    d[x->rank - 1] = known(p.out_last);
    if (p.axis < 0) { /* axis not known yet: any signal dim may change */
        for (int k = 0; k < x->rank - 1; k++) d[k] = known(-1);
    } else if (p.out_len != x->dims[p.axis].value || p.out_len < 0)
        d[p.axis] = known(p.out_len);
    set_out(c, 0, x->dtype, x->rank, d);
    return KILN_OK;
}

static kiln_status infer_stft(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "signal"));
    KN_TRY(need_input(c, 1, "frame_step"));
    const kn_type *x = c->in[0];
    if (x->rank >= 0 && x->rank != 3)
        return kn_infer_error(c, KILN_ERR_SHAPE, "signal has rank %d; it must be [batch, length, 1 or 2]", x->rank);
    int64_t step = -1, fl = -1;
    const kn_tensor *sv = in_val(c, 1), *fv = in_val(c, 3);
    const kn_type *win = c->n_inputs > 2 ? c->in[2] : NULL;
    if (sv && !scalar_int(sv, &step))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input 'frame_step' must be an integer scalar");
    if (sv && step < 1) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "frame_step %lld must be positive", (long long)step);
    if (fv && !scalar_int(fv, &fl))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input 'frame_length' must be an integer scalar");
    if (!fv && win && win->rank == 1) fl = win->dims[0].value;
    if (win && win->rank >= 0 && win->rank != 1)
        return kn_infer_error(c, KILN_ERR_SHAPE, "window has rank %d; it must be 1-D", win->rank);
    if (fv && win && win->rank == 1 && win->dims[0].value >= 0 && win->dims[0].value != fl)
        return kn_infer_error(c, KILN_ERR_SHAPE, "window has %lld values but frame_length is %lld",
                              (long long)win->dims[0].value, (long long)fl);
    bool fl_input = c->n_inputs > 3 && c->in[3];
    if (!fv && !win && !fl_input && x->rank == 3) fl = x->dims[1].value; /* one frame: the whole signal */
    int onesided = kn_attr_int(c->node, "onesided", 1) != 0;
    kn_dim d[4] = {x->rank == 3 ? x->dims[0] : known(-1), known(-1), known(-1), known(2)};
    int64_t L = x->rank == 3 ? x->dims[1].value : -1;
    if (fl >= 0 && (fl < 1 || (L >= 0 && fl > L)))
        return kn_infer_error(c, KILN_ERR_SHAPE, "frame_length %lld does not fit a signal of length %lld", (long long)fl,
                              (long long)L);
    if (fl >= 0 && L >= 0 && step >= 1) d[1] = known(1 + (L - fl) / step);
    if (fl >= 0) d[2] = known(onesided ? fl / 2 + 1 : fl);
    set_out(c, 0, x->dtype, 4, d);
    return KILN_OK;
}

static kiln_status output_datatype(kn_infer_ctx *c, kiln_dtype *dt) {
    int64_t v = kn_attr_int(c->node, "output_datatype", KILN_DTYPE_FLOAT);
    if (!kn_dtype_is_valid((int)v) || !(kn_dtype_is_float((kiln_dtype)v) || kn_dtype_is_int((kiln_dtype)v)))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "output_datatype %lld is not a numeric type", (long long)v);
    *dt = (kiln_dtype)v;
    return KILN_OK;
}

static kiln_status infer_window(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "size"));
    kiln_dtype dt = KILN_DTYPE_FLOAT;
    KN_TRY(output_datatype(c, &dt));
    int64_t n = -1;
    const kn_tensor *v = in_val(c, 0);
    if (v && !scalar_int(v, &n)) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input 'size' must be an integer scalar");
    if (v && n < 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "size %lld must not be negative", (long long)n);
    kn_dim d = known(n);
    set_out(c, 0, dt, 1, &d);
    return KILN_OK;
}

static kiln_status infer_mel(kn_infer_ctx *c) {
    for (int i = 0; i < 5; i++) KN_TRY(need_input(c, i, "num_mel_bins/dft_length/sample_rate/lower/upper"));
    kiln_dtype dt = KILN_DTYPE_FLOAT;
    KN_TRY(output_datatype(c, &dt));
    int64_t mel = -1, dft = -1;
    const kn_tensor *mv = in_val(c, 0), *dv = in_val(c, 1);
    if (mv && (!scalar_int(mv, &mel) || mel < 1))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "num_mel_bins must be a positive integer scalar");
    if (dv && (!scalar_int(dv, &dft) || dft < 1))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "dft_length must be a positive integer scalar");
    kn_dim d[2] = {known(dft >= 0 ? dft / 2 + 1 : -1), known(mel)};
    set_out(c, 0, dt, 2, d);
    return KILN_OK;
}

const kn_op_schema kn_ops_signal[] = {
    {"", "DFT", 17, 19, 1, 2, 1, 1, infer_dft, 0},
    {"", "DFT", 20, 0, 1, 3, 1, 1, infer_dft, 0},
    {"", "STFT", 17, 0, 2, 4, 1, 1, infer_stft, 0},
    {"", "HannWindow", 17, 0, 1, 1, 1, 1, infer_window, 0},
    {"", "HammingWindow", 17, 0, 1, 1, 1, 1, infer_window, 0},
    {"", "BlackmanWindow", 17, 0, 1, 1, 1, 1, infer_window, 0},
    {"", "MelWeightMatrix", 17, 0, 5, 5, 1, 1, infer_mel, 0},
    {0},
};

/* The nn family: reductions, ArgMax/ArgMin, TopK, Softmax/LogSoftmax/Hardmax, the
 * normalisations, RNN/GRU/LSTM and the two losses. Schemas and shape inference. */
#include "ops/nn.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ shared helpers */

static kiln_status node_error(const kn_node *n, kiln_status st, const char *fmt, ...) KN_PRINTF(3, 4);
static kiln_status node_error(const kn_node *n, kiln_status st, const char *fmt, ...) {
    char lbl[256], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kn_error(st, "%s: %s", kn_node_label(n, lbl, sizeof lbl), msg);
}

bool kn_nn_reduce_axes_from_input(const kn_node *node) {
    int since = strcmp(node->op_type, "ReduceSum") ? 18 : 13;
    return node->opset >= since;
}

void kn_nn_reduce_attrs(const kn_node *node, kn_nn_reduce_attr *a) {
    a->n_axes = 0;
    a->axes = kn_attr_ints(node, "axes", &a->n_axes);
    a->noop_empty = kn_attr_int(node, "noop_with_empty_axes", 0) != 0;
}

kiln_status kn_nn_reduce_mask(const kn_node *node, const kn_nn_reduce_attr *a, int rank, const kn_tensor *axes,
                              bool *mask, bool *noop_out) {
    for (int k = 0; k < KILN_MAX_RANK; k++) mask[k] = false;
    *noop_out = false;
    int64_t vals[KILN_MAX_RANK * 4];
    int n = 0;
    if (kn_nn_reduce_axes_from_input(node)) {
        if (axes) {
            if (axes->kind != KN_VALUE_TENSOR || !kn_dtype_is_int(axes->dtype) || axes->rank > 1)
                return node_error(node, KILN_ERR_INVALID_MODEL,
                                  "input 'axes' must be a 1-D integer tensor, got %s of rank %d",
                                  kiln_dtype_name(axes->dtype), axes->rank);
            int64_t cnt = kn_tensor_count(axes);
            if (cnt > (int64_t)(sizeof vals / sizeof vals[0]))
                return node_error(node, KILN_ERR_INVALID_MODEL, "input 'axes' has %lld entries for rank %d",
                                  (long long)cnt, rank);
            for (int64_t i = 0; i < cnt; i++) vals[n++] = kn_tensor_get_i64(axes, i);
        }
        if (n == 0 && a->noop_empty) {
            *noop_out = true;
            return KILN_OK;
        }
    } else {
        const int cnt = a->n_axes;
        if (cnt > (int)(sizeof vals / sizeof vals[0]))
            return node_error(node, KILN_ERR_INVALID_MODEL, "attribute 'axes' has %d entries for rank %d",
                              cnt, rank);
        for (int i = 0; i < cnt; i++) vals[n++] = a->axes[i];
    }
    if (n == 0) {
        for (int k = 0; k < rank; k++) mask[k] = true;
        return KILN_OK;
    }
    for (int i = 0; i < n; i++) {
        int64_t ax = vals[i];
        if (ax < -rank || ax >= rank)
            return node_error(node, KILN_ERR_INVALID_MODEL, "axis %lld is out of range for an input of rank %d",
                              (long long)ax, rank);
        mask[ax < 0 ? ax + rank : ax] = true;
    }
    return KILN_OK;
}

int kn_nn_rnn_gates(const kn_node *node) {
    if (!strcmp(node->op_type, "LSTM")) return 4;
    if (!strcmp(node->op_type, "GRU")) return 3;
    return 1;
}

kiln_status kn_nn_rnn_read_attrs(const kn_node *node, kn_nn_rnn_attrs *a) {
    memset(a, 0, sizeof *a);
    const char *dir = kn_attr_string(node, "direction", "forward");
    if (!strcmp(dir, "forward")) a->num_directions = 1;
    else if (!strcmp(dir, "reverse")) a->num_directions = 1, a->reverse = 1;
    else if (!strcmp(dir, "bidirectional")) a->num_directions = 2;
    else
        return node_error(node, KILN_ERR_INVALID_MODEL,
                          "direction '%s' is not one of forward, reverse, bidirectional", dir);
    a->hidden_size = kn_attr_int(node, "hidden_size", -1);
    if (kn_node_attr(node, "hidden_size") && a->hidden_size <= 0)
        return node_error(node, KILN_ERR_INVALID_MODEL, "hidden_size %lld must be positive",
                          (long long)a->hidden_size);
    int64_t layout = kn_attr_int(node, "layout", 0);
    if (layout != 0 && layout != 1)
        return node_error(node, KILN_ERR_INVALID_MODEL, "layout %lld must be 0 or 1", (long long)layout);
    a->layout = (int)layout;
    a->clip = kn_node_attr(node, "clip") ? kn_attr_float(node, "clip", 0.f) : -1.f;
    if (kn_node_attr(node, "clip") && !(a->clip > 0))
        return node_error(node, KILN_ERR_INVALID_MODEL, "clip %g must be positive", (double)a->clip);
    a->linear_before_reset = kn_attr_int(node, "linear_before_reset", 0) != 0;
    a->input_forget = kn_attr_int(node, "input_forget", 0) != 0;
    return KILN_OK;
}

/* ------------------------------------------------------------------ infer helpers */

static void set_out(kn_infer_ctx *c, int o, kiln_dtype dtype, int rank, const kn_dim *dims) {
    if (o >= c->n_outputs) return;
    kn_type *t = &c->out[o];
    kn_type_init(t);
    t->kind = KN_TYPE_TENSOR;
    t->dtype = dtype;
    t->rank = rank;
    for (int k = 0; k < rank && k < KILN_MAX_RANK; k++) t->dims[k] = dims[k];
}

static kiln_status need_input(kn_infer_ctx *c, int i, const char *name) {
    if (i >= c->n_inputs || !c->in[i])
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d ('%s') is missing", i, name);
    return KILN_OK;
}

static const kn_dim unknown_dim = {-1, NULL};
static kn_dim known_dim(int64_t v) { return (kn_dim){v, NULL}; }

/* ------------------------------------------------------------------ reductions */

static kiln_status infer_reduce(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "data"));
    const kn_type *x = c->in[0];
    int keep = kn_attr_int(c->node, "keepdims", 1) != 0;
    if (x->rank < 0) {
        set_out(c, 0, x->dtype, -1, NULL);
        return KILN_OK;
    }
    int rank = x->rank;
    const kn_tensor *axes = NULL;
    if (kn_nn_reduce_axes_from_input(c->node) && c->n_inputs > 1 && c->in[1]) {
        axes = c->in_value[1];
        if (!axes) {
            /* axes known only at run time: each dim is kept or becomes 1 */
            kn_dim d[KILN_MAX_RANK];
            if (keep) {
                for (int k = 0; k < rank; k++) d[k] = x->dims[k].value == 1 ? x->dims[k] : unknown_dim;
                set_out(c, 0, x->dtype, rank, d);
            } else {
                int r = -1;
                if (c->in[1]->rank == 1 && c->in[1]->dims[0].value > 0 &&
                    c->in[1]->dims[0].value <= rank)
                    r = rank - (int)c->in[1]->dims[0].value;
                for (int k = 0; k < KILN_MAX_RANK; k++) d[k] = unknown_dim;
                set_out(c, 0, x->dtype, r, d);
            }
            return KILN_OK;
        }
    }
    bool mask[KILN_MAX_RANK], noop;
    kn_nn_reduce_attr ra;
    kn_nn_reduce_attrs(c->node, &ra);
    KN_TRY(kn_nn_reduce_mask(c->node, &ra, rank, axes, mask, &noop));
    if (noop) return kn_infer_same(c, 0, 0);
    kn_dim d[KILN_MAX_RANK];
    int r = 0;
    for (int k = 0; k < rank; k++) {
        if (!mask[k]) d[r++] = x->dims[k];
        else if (keep) d[r++] = known_dim(1);
    }
    set_out(c, 0, x->dtype, r, d);
    return KILN_OK;
}

static kiln_status infer_argmax(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "data"));
    const kn_type *x = c->in[0];
    int keep = kn_attr_int(c->node, "keepdims", 1) != 0;
    if (x->rank < 0) {
        set_out(c, 0, KILN_DTYPE_INT64, -1, NULL);
        return KILN_OK;
    }
    if (x->rank == 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input is a scalar; it needs rank >= 1");
    int axis;
    KN_TRY(kn_infer_axis(c, kn_attr_int(c->node, "axis", 0), x->rank, "axis", &axis));
    kn_dim d[KILN_MAX_RANK];
    int r = 0;
    for (int k = 0; k < x->rank; k++) {
        if (k != axis) d[r++] = x->dims[k];
        else if (keep) d[r++] = known_dim(1);
    }
    set_out(c, 0, KILN_DTYPE_INT64, r, d);
    return KILN_OK;
}

static kiln_status infer_topk(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    const kn_type *x = c->in[0];
    int64_t k = -1;
    if (c->node->opset < 10) {
        if (!kn_node_attr(c->node, "k"))
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attribute 'k' is missing");
        k = kn_attr_int(c->node, "k", 0);
    } else {
        KN_TRY(need_input(c, 1, "K"));
        const kn_tensor *kt = c->in_value[1];
        if (kt) {
            if (!kn_dtype_is_int(kt->dtype) || kn_tensor_count(kt) != 1)
                return kn_infer_error(c, KILN_ERR_INVALID_MODEL,
                                      "input 'K' must hold one integer, got %s with %lld elements",
                                      kiln_dtype_name(kt->dtype), (long long)kn_tensor_count(kt));
            k = kn_tensor_get_i64(kt, 0);
        }
    }
    if (c->node->opset < 10 || c->in_value[1]) {
        if (k < 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "k = %lld must be >= 0", (long long)k);
    }
    if (x->rank < 0) {
        set_out(c, 0, x->dtype, -1, NULL);
        set_out(c, 1, KILN_DTYPE_INT64, -1, NULL);
        return KILN_OK;
    }
    if (x->rank == 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input is a scalar; it needs rank >= 1");
    int axis;
    KN_TRY(kn_infer_axis(c, kn_attr_int(c->node, "axis", -1), x->rank, "axis", &axis));
    if (k >= 0 && x->dims[axis].value >= 0 && k > x->dims[axis].value)
        return kn_infer_error(c, KILN_ERR_SHAPE, "k = %lld is larger than dimension %d (%lld) of the input",
                              (long long)k, axis, (long long)x->dims[axis].value);
    kn_dim d[KILN_MAX_RANK];
    for (int i = 0; i < x->rank; i++) d[i] = x->dims[i];
    d[axis] = k >= 0 ? known_dim(k) : unknown_dim;
    set_out(c, 0, x->dtype, x->rank, d);
    set_out(c, 1, KILN_DTYPE_INT64, x->rank, d);
    return KILN_OK;
}

/* Softmax, LogSoftmax, Hardmax: the output is like the input; the axis must fit. */
static kiln_status infer_softmax(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "input"));
    const kn_type *x = c->in[0];
    if (x->rank >= 0) {
        int axis, dflt = c->node->opset >= 13 ? -1 : 1;
        int rank = x->rank;
        int64_t a = kn_attr_int(c->node, "axis", dflt);
        /* before opset 13 the axis coerces to 2-D, so axis == rank is allowed */
        if (c->node->opset < 13 && a == rank) a = rank - 1 >= 0 ? rank - 1 : 0;
        if (rank > 0) KN_TRY(kn_infer_axis(c, a, rank, "axis", &axis));
    }
    return kn_infer_same(c, 0, 0);
}

/* ------------------------------------------------------------------ normalisations */

static kiln_status infer_layernorm(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    KN_TRY(need_input(c, 1, "Scale"));
    const kn_type *x = c->in[0];
    KN_TRY(kn_infer_same(c, 0, 0));
    int64_t stash = kn_attr_int(c->node, "stash_type", 1);
    /* Mean and InvStdDev have the stash type (float by default), whatever X's type */
    kiln_dtype u = kn_dtype_is_float((kiln_dtype)stash) ? (kiln_dtype)stash : KILN_DTYPE_FLOAT;
    if (x->rank < 0) {
        for (int o = 1; o < c->n_outputs && o < 3; o++) set_out(c, o, u, -1, NULL);
        return KILN_OK;
    }
    int axis;
    KN_TRY(kn_infer_axis(c, kn_attr_int(c->node, "axis", -1), x->rank, "axis", &axis));
    kn_dim d[KILN_MAX_RANK];
    for (int k = 0; k < x->rank; k++) d[k] = k < axis ? x->dims[k] : known_dim(1);
    for (int o = 1; o < c->n_outputs && o < 3; o++) set_out(c, o, u, x->rank, d);
    return KILN_OK;
}

static kiln_status infer_rmsnorm(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    KN_TRY(need_input(c, 1, "scale"));
    const kn_type *x = c->in[0];
    if (x->rank > 0) {
        int axis;
        KN_TRY(kn_infer_axis(c, kn_attr_int(c->node, "axis", -1), x->rank, "axis", &axis));
    }
    return kn_infer_same(c, 0, 0);
}

static kiln_status infer_batchnorm(kn_infer_ctx *c) {
    static const char *const names[] = {"X", "scale", "B", "input_mean", "input_var"};
    for (int i = 0; i < 5; i++) KN_TRY(need_input(c, i, names[i]));
    const kn_type *x = c->in[0];
    if (x->rank >= 0 && x->rank < 2)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input 'X' has rank %d; it needs [N, C, ...]", x->rank);
    kn_dim C = x->rank >= 2 ? x->dims[1] : unknown_dim;
    /* per-channel parameters must have C elements (spatial=0 before opset 9 allows C x D1 x ...) */
    int spatial = c->node->opset < 9 ? (int)kn_attr_int(c->node, "spatial", 1) : 1;
    for (int i = 1; i < 5 && spatial; i++) {
        const kn_type *p = c->in[i];
        if (p->rank == 1 && p->dims[0].value >= 0 && C.value >= 0 && p->dims[0].value != C.value) {
            char a[256], b[256];
            return kn_infer_error(c, KILN_ERR_SHAPE, "input '%s' is %s but X is %s: it needs C = %lld elements",
                                  names[i], kn_type_str(p, a, sizeof a), kn_type_str(x, b, sizeof b),
                                  (long long)C.value);
        }
    }
    KN_TRY(kn_infer_same(c, 0, 0));
    kiln_dtype u = c->in[3]->dtype ? c->in[3]->dtype : x->dtype;
    for (int o = 1; o < c->n_outputs; o++) {
        if (c->in[3]->rank >= 0) set_out(c, o, u, c->in[3]->rank, c->in[3]->dims);
        else set_out(c, o, u, 1, &C);
    }
    return KILN_OK;
}

static kiln_status infer_instancenorm(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "input"));
    KN_TRY(need_input(c, 1, "scale"));
    KN_TRY(need_input(c, 2, "B"));
    const kn_type *x = c->in[0];
    if (x->rank >= 0 && x->rank < 2)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input has rank %d; it needs [N, C, ...]", x->rank);
    if (x->rank >= 2 && x->dims[1].value >= 0)
        for (int i = 1; i <= 2; i++) {
            const kn_type *p = c->in[i];
            if (p->rank == 1 && p->dims[0].value >= 0 && p->dims[0].value != x->dims[1].value)
                return kn_infer_error(c, KILN_ERR_SHAPE, "input %d has %lld elements but the input has C = %lld",
                                      i, (long long)p->dims[0].value, (long long)x->dims[1].value);
        }
    return kn_infer_same(c, 0, 0);
}

static kiln_status infer_groupnorm(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    KN_TRY(need_input(c, 1, "scale"));
    KN_TRY(need_input(c, 2, "bias"));
    if (!kn_node_attr(c->node, "num_groups"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attribute 'num_groups' is missing");
    int64_t g = kn_attr_int(c->node, "num_groups", 0);
    if (g <= 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "num_groups %lld must be positive", (long long)g);
    const kn_type *x = c->in[0];
    if (x->rank >= 0 && x->rank < 2)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input 'X' has rank %d; it needs [N, C, ...]", x->rank);
    if (x->rank >= 2 && x->dims[1].value >= 0) {
        int64_t C = x->dims[1].value;
        if (C % g)
            return kn_infer_error(c, KILN_ERR_SHAPE, "C = %lld channels do not split into num_groups = %lld",
                                  (long long)C, (long long)g);
        for (int i = 1; i <= 2; i++) {
            const kn_type *p = c->in[i];
            if (p->rank == 1 && p->dims[0].value >= 0 && p->dims[0].value != C &&
                !(c->node->opset < 21 && p->dims[0].value == g))
                return kn_infer_error(c, KILN_ERR_SHAPE,
                                      "input %d has %lld elements; it needs C = %lld%s", i,
                                      (long long)p->dims[0].value, (long long)C,
                                      c->node->opset < 21 ? " or num_groups" : "");
        }
    }
    return kn_infer_same(c, 0, 0);
}

static kiln_status infer_lpnorm(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "input"));
    int64_t p = kn_attr_int(c->node, "p", 2);
    if (p != 1 && p != 2) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "p = %lld must be 1 or 2", (long long)p);
    const kn_type *x = c->in[0];
    if (x->rank > 0) {
        int axis;
        KN_TRY(kn_infer_axis(c, kn_attr_int(c->node, "axis", -1), x->rank, "axis", &axis));
    }
    return kn_infer_same(c, 0, 0);
}

static kiln_status infer_mvn(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    const kn_type *x = c->in[0];
    int n = 0;
    const int64_t *axes = kn_attr_ints(c->node, "axes", &n);
    if (x->rank >= 0)
        for (int i = 0; i < n; i++)
            if (axes[i] < -x->rank || axes[i] >= x->rank)
                return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "axis %lld is out of range for rank %d",
                                      (long long)axes[i], x->rank);
    if (!axes && x->rank >= 0 && x->rank < 4)
        return kn_infer_error(c, KILN_ERR_SHAPE, "the default axes [0, 2, 3] need rank 4, the input has rank %d",
                              x->rank);
    return kn_infer_same(c, 0, 0);
}

static kiln_status infer_lrn(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    int64_t size = kn_attr_int(c->node, "size", 0);
    if (size <= 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attribute 'size' must be positive, got %lld",
                                         (long long)size);
    const kn_type *x = c->in[0];
    if (x->rank >= 0 && x->rank < 2)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input has rank %d; it needs [N, C, ...]", x->rank);
    return kn_infer_same(c, 0, 0);
}

/* ------------------------------------------------------------------ RNN, GRU, LSTM */

static kiln_status check_dims(kn_infer_ctx *c, int i, const char *name, int rank, const int64_t *want) {
    const kn_type *t = c->in[i];
    if (!t || t->rank < 0) return KILN_OK;
    bool ok = t->rank == rank;
    for (int k = 0; ok && k < rank; k++)
        if (want[k] >= 0 && t->dims[k].value >= 0 && t->dims[k].value != want[k]) ok = false;
    if (ok) return KILN_OK;
    char a[256], b[256];
    return kn_infer_error(c, KILN_ERR_SHAPE, "input '%s' is %s but it must be %s (-1: any)", name,
                          kn_type_str(t, a, sizeof a), kn_dims_str(want, rank, b, sizeof b));
}

static kiln_status infer_rnn(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    KN_TRY(need_input(c, 1, "W"));
    KN_TRY(need_input(c, 2, "R"));
    kn_nn_rnn_attrs a;
    KN_TRY(kn_nn_rnn_read_attrs(c->node, &a));
    int gates = kn_nn_rnn_gates(c->node);
    const kn_type *x = c->in[0], *w = c->in[1], *r = c->in[2];
    if (x->rank >= 0 && x->rank != 3)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input 'X' has rank %d; it must be 3-D", x->rank);
    int64_t H = a.hidden_size;
    if (H < 0 && r->rank == 3) H = r->dims[2].value;
    if (H < 0 && w->rank == 3 && w->dims[1].value >= 0) H = w->dims[1].value / gates;
    kn_dim seq = unknown_dim, batch = unknown_dim;
    int64_t in_size = -1;
    if (x->rank == 3) {
        seq = x->dims[a.layout ? 1 : 0];
        batch = x->dims[a.layout ? 0 : 1];
        in_size = x->dims[2].value;
    }
    int64_t nd = a.num_directions;
    int64_t GH = H >= 0 ? gates * H : -1;
    KN_TRY(check_dims(c, 1, "W", 3, (int64_t[]){nd, GH, in_size}));
    KN_TRY(check_dims(c, 2, "R", 3, (int64_t[]){nd, GH, H}));
    if (c->n_inputs > 3) KN_TRY(check_dims(c, 3, "B", 2, (int64_t[]){nd, GH >= 0 ? 2 * GH : -1}));
    if (c->n_inputs > 4) KN_TRY(check_dims(c, 4, "sequence_lens", 1, (int64_t[]){batch.value}));
    int64_t hshape[3];
    if (a.layout) hshape[0] = batch.value, hshape[1] = nd, hshape[2] = H;
    else hshape[0] = nd, hshape[1] = batch.value, hshape[2] = H;
    if (c->n_inputs > 5) KN_TRY(check_dims(c, 5, "initial_h", 3, hshape));
    if (c->n_inputs > 6) KN_TRY(check_dims(c, 6, "initial_c", 3, hshape));
    if (c->n_inputs > 7) KN_TRY(check_dims(c, 7, "P", 2, (int64_t[]){nd, H >= 0 ? 3 * H : -1}));
    kn_dim hd = H >= 0 ? known_dim(H) : unknown_dim, ndd = known_dim(nd);
    kiln_dtype dt = x->dtype;
    if (a.layout) set_out(c, 0, dt, 4, (kn_dim[]){batch, seq, ndd, hd});
    else set_out(c, 0, dt, 4, (kn_dim[]){seq, ndd, batch, hd});
    for (int o = 1; o < c->n_outputs && o < 3; o++) {
        if (a.layout) set_out(c, o, dt, 3, (kn_dim[]){batch, ndd, hd});
        else set_out(c, o, dt, 3, (kn_dim[]){ndd, batch, hd});
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ losses */

static kiln_status infer_loss(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "input"));
    KN_TRY(need_input(c, 1, "target"));
    const kn_type *x = c->in[0], *t = c->in[1];
    const char *red = kn_attr_string(c->node, "reduction", "mean");
    if (strcmp(red, "none") && strcmp(red, "sum") && strcmp(red, "mean"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "reduction '%s' is not one of none, sum, mean", red);
    if (x->rank >= 0 && x->rank < 2)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input has rank %d; it needs [N, C, ...]", x->rank);
    if (x->rank >= 2 && t->rank >= 0) {
        bool ok = t->rank == x->rank - 1;
        for (int k = 0; ok && k < t->rank; k++) {
            int64_t a = x->dims[k == 0 ? 0 : k + 1].value, b = t->dims[k].value;
            if (a >= 0 && b >= 0 && a != b) ok = false;
        }
        if (!ok) {
            char s1[256], s2[256];
            return kn_infer_error(c, KILN_ERR_SHAPE, "target is %s but input is %s: it must be [N, d1, ...]",
                                  kn_type_str(t, s1, sizeof s1), kn_type_str(x, s2, sizeof s2));
        }
    }
    if (!strcmp(red, "none")) {
        if (t->rank >= 0) set_out(c, 0, x->dtype, t->rank, t->dims);
        else if (x->rank >= 2) {
            kn_dim d[KILN_MAX_RANK];
            d[0] = x->dims[0];
            for (int k = 2; k < x->rank; k++) d[k - 1] = x->dims[k];
            set_out(c, 0, x->dtype, x->rank - 1, d);
        } else set_out(c, 0, x->dtype, -1, NULL);
    } else {
        set_out(c, 0, x->dtype, 0, NULL);
    }
    if (c->n_outputs > 1) KN_TRY(kn_infer_same(c, 0, 1));
    return KILN_OK;
}

/* ------------------------------------------------------------------ Det */

/* Det: [*, M, M] -> [*] */
static kiln_status infer_det(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    const kn_type *x = c->in[0];
    if (x->dtype && !kn_dtype_is_float(x->dtype))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input must be a float tensor, got %s", kiln_dtype_name(x->dtype));
    if (x->rank < 0) {
        set_out(c, 0, x->dtype, -1, NULL);
        return KILN_OK;
    }
    if (x->rank < 2)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input has rank %d; it must be [..., M, M]", x->rank);
    kn_dim m = x->dims[x->rank - 2], n = x->dims[x->rank - 1];
    if (m.value >= 0 && n.value >= 0 && m.value != n.value)
        return kn_infer_error(c, KILN_ERR_SHAPE, "the last two dimensions are %lld x %lld; Det needs square matrices",
                              (long long)m.value, (long long)n.value);
    set_out(c, 0, x->dtype, x->rank - 2, x->dims);
    return KILN_OK;
}

/* ------------------------------------------------------------------ the table */

#define REDUCE_ATTR(op, until) {"", op, 1, until, 1, 1, 1, 1, infer_reduce, 0}
#define REDUCE_INPUT(op, since) {"", op, since, 0, 1, 2, 1, 1, infer_reduce, 0}

const kn_op_schema kn_ops_nn[] = {
    REDUCE_ATTR("ReduceSum", 12),
    REDUCE_INPUT("ReduceSum", 13),
    REDUCE_ATTR("ReduceMean", 17),
    REDUCE_INPUT("ReduceMean", 18),
    REDUCE_ATTR("ReduceMax", 17),
    REDUCE_INPUT("ReduceMax", 18),
    REDUCE_ATTR("ReduceMin", 17),
    REDUCE_INPUT("ReduceMin", 18),
    REDUCE_ATTR("ReduceProd", 17),
    REDUCE_INPUT("ReduceProd", 18),
    REDUCE_ATTR("ReduceL1", 17),
    REDUCE_INPUT("ReduceL1", 18),
    REDUCE_ATTR("ReduceL2", 17),
    REDUCE_INPUT("ReduceL2", 18),
    REDUCE_ATTR("ReduceLogSum", 17),
    REDUCE_INPUT("ReduceLogSum", 18),
    REDUCE_ATTR("ReduceLogSumExp", 17),
    REDUCE_INPUT("ReduceLogSumExp", 18),
    REDUCE_ATTR("ReduceSumSquare", 17),
    REDUCE_INPUT("ReduceSumSquare", 18),
    {"", "ArgMax", 1, 0, 1, 1, 1, 1, infer_argmax, 0},
    {"", "ArgMin", 1, 0, 1, 1, 1, 1, infer_argmax, 0},
    {"", "TopK", 1, 9, 1, 1, 2, 2, infer_topk, 0},
    {"", "TopK", 10, 0, 2, 2, 2, 2, infer_topk, 0},
    {"", "Softmax", 1, 0, 1, 1, 1, 1, infer_softmax, 0},
    {"", "LogSoftmax", 1, 0, 1, 1, 1, 1, infer_softmax, 0},
    {"", "Hardmax", 1, 0, 1, 1, 1, 1, infer_softmax, 0},
    {"", "LayerNormalization", 17, 0, 2, 3, 1, 3, infer_layernorm, 0},
    {"", "RMSNormalization", 23, 0, 2, 2, 1, 1, infer_rmsnorm, 0},
    {"", "BatchNormalization", 1, 13, 5, 5, 1, 5, infer_batchnorm, 0},
    {"", "BatchNormalization", 14, 0, 5, 5, 1, 3, infer_batchnorm, 0},
    {"", "InstanceNormalization", 1, 0, 3, 3, 1, 1, infer_instancenorm, 0},
    {"", "GroupNormalization", 18, 0, 3, 3, 1, 1, infer_groupnorm, 0},
    {"", "LpNormalization", 1, 0, 1, 1, 1, 1, infer_lpnorm, 0},
    {"", "MeanVarianceNormalization", 1, 0, 1, 1, 1, 1, infer_mvn, 0},
    {"", "LRN", 1, 0, 1, 1, 1, 1, infer_lrn, 0},
    {"", "RNN", 1, 0, 3, 6, 0, 2, infer_rnn, 0},
    {"", "GRU", 1, 0, 3, 6, 0, 2, infer_rnn, 0},
    {"", "LSTM", 1, 0, 3, 8, 0, 3, infer_rnn, 0},
    {"", "NegativeLogLikelihoodLoss", 12, 0, 2, 3, 1, 1, infer_loss, 0},
    {"", "SoftmaxCrossEntropyLoss", 12, 0, 2, 3, 1, 2, infer_loss, 0},
    {"", "Det", 11, 0, 1, 1, 1, 1, infer_det, 0},
    {0},
};

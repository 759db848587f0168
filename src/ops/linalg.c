/* The linalg family: MatMul, Gemm, Einsum, the convolutions and the pools. Schemas and shape
 * inference; the window arithmetic they share with the kernels is in linalg_util.c. */
#include "ops/linalg_util.h"
#include "ops/op.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ helpers */

static const kn_dim unknown_dim = {-1, NULL};
static kn_dim known_dim(int64_t v) { return (kn_dim){v, NULL}; }

static void set_out(kn_infer_ctx *c, int o, kiln_dtype dtype, int rank, const kn_dim *dims) {
    if (o >= c->n_outputs) return;
    kn_type *t = &c->out[o];
    kn_type_init(t);
    t->kind = KN_TYPE_TENSOR;
    t->dtype = dtype;
    t->rank = rank;
    for (int k = 0; k < rank && k < KILN_MAX_RANK; k++) t->dims[k] = dims[k];
}

static void set_out_unknown_rank(kn_infer_ctx *c, int o, kiln_dtype dtype) {
    if (o >= c->n_outputs) return;
    kn_type_init(&c->out[o]);
    c->out[o].kind = KN_TYPE_TENSOR;
    c->out[o].dtype = dtype;
}

static kiln_status need_input(kn_infer_ctx *c, int i, const char *name) {
    if (i >= c->n_inputs || !c->in[i])
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d ('%s') is missing", i, name);
    if (c->in[i]->kind != KN_TYPE_TENSOR && c->in[i]->kind != KN_TYPE_UNKNOWN)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d ('%s') must be a tensor", i, name);
    return KILN_OK;
}

static const char *tstr(const kn_type *t, char *buf, size_t cap) {
    if (t->rank < 0) {
        snprintf(buf, cap, "%s[?]", t->dtype ? kiln_dtype_name(t->dtype) : "?");
        return buf;
    }
    /* only the shape, "[1,64,100]", with symbols */
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->rank && used < cap; i++) {
        const kn_dim *d = &t->dims[i];
        if (d->value >= 0) used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? "," : "", (long long)d->value);
        else used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? "," : "", kn_dim_name(d) ? d->symbol : "?");
    }
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return buf;
}

static bool dims_differ(kn_dim a, kn_dim b) { return a.value >= 0 && b.value >= 0 && a.value != b.value; }

static bool type_is(kiln_dtype t, const kiln_dtype *allowed) {
    for (; *allowed; allowed++)
        if (*allowed == t) return true;
    return false;
}

static kiln_status check_dtype(kn_infer_ctx *c, int i, const char *name, const kiln_dtype *allowed) {
    kiln_dtype t = c->in[i]->dtype;
    if (t == KILN_DTYPE_UNDEFINED || type_is(t, allowed)) return KILN_OK;
    return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "input '%s' has element type %s, which %s does not take", name,
                          kiln_dtype_name(t), c->node->op_type);
}

static kiln_status same_dtype(kn_infer_ctx *c, int i, const char *ni, int j, const char *nj) {
    kiln_dtype a = c->in[i]->dtype, b = c->in[j]->dtype;
    if (a && b && a != b)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "inputs '%s' (%s) and '%s' (%s) must have the same element type",
                              ni, kiln_dtype_name(a), nj, kiln_dtype_name(b));
    return KILN_OK;
}

static const kiln_dtype matmul_types[] = {KILN_DTYPE_FLOAT,  KILN_DTYPE_DOUBLE, KILN_DTYPE_FLOAT16,
                                          KILN_DTYPE_BFLOAT16, KILN_DTYPE_INT32, KILN_DTYPE_INT64,
                                          KILN_DTYPE_UINT32, KILN_DTYPE_UINT64, 0};
static const kiln_dtype float_types[] = {KILN_DTYPE_FLOAT, KILN_DTYPE_DOUBLE, KILN_DTYPE_FLOAT16,
                                         KILN_DTYPE_BFLOAT16, 0};
static const kiln_dtype pool_types[] = {KILN_DTYPE_FLOAT, KILN_DTYPE_DOUBLE, KILN_DTYPE_FLOAT16,
                                        KILN_DTYPE_BFLOAT16, KILN_DTYPE_INT8, KILN_DTYPE_UINT8, 0};
static const kiln_dtype int8_types[] = {KILN_DTYPE_INT8, KILN_DTYPE_UINT8, 0};

/* ------------------------------------------------------------------ MatMul */

/* numpy matmul of in[ia] and in[ib] into out[0] with element type dtype. */
static kiln_status infer_matmul_shape(kn_infer_ctx *c, int ia, int ib, kiln_dtype dtype) {
    const kn_type *A = c->in[ia], *B = c->in[ib];
    if (A->rank < 0 || B->rank < 0) {
        set_out_unknown_rank(c, 0, dtype);
        return KILN_OK;
    }
    char sa[256], sb[256];
    int ra = A->rank, rb = B->rank;
    if (ra == 0 || rb == 0)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input 'A' is %s and 'B' is %s: MatMul does not take scalars",
                              tstr(A, sa, sizeof sa), tstr(B, sb, sizeof sb));
    kn_dim ka = A->dims[ra - 1], kb = rb == 1 ? B->dims[0] : B->dims[rb - 2];
    if (dims_differ(ka, kb))
        return kn_infer_error(c, KILN_ERR_SHAPE,
                              "input 'A' is %s and 'B' is %s: the inner dimensions differ (A's last dim is %lld, "
                              "B's %s is %lld)",
                              tstr(A, sa, sizeof sa), tstr(B, sb, sizeof sb), (long long)ka.value,
                              rb == 1 ? "only dim" : "second-to-last dim", (long long)kb.value);
    /* batch dims broadcast */
    kn_type ba, bb, bo;
    kn_type_init(&ba);
    kn_type_init(&bb);
    kn_type_init(&bo);
    ba.kind = bb.kind = KN_TYPE_TENSOR;
    ba.rank = ra > 2 ? ra - 2 : 0;
    bb.rank = rb > 2 ? rb - 2 : 0;
    for (int i = 0; i < ba.rank; i++) ba.dims[i] = A->dims[i];
    for (int i = 0; i < bb.rank; i++) bb.dims[i] = B->dims[i];
    char why[768];
    if (kn_broadcast_types(&ba, &bb, &bo, why, sizeof why) != KILN_OK)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input 'A' is %s and 'B' is %s: the batch dims do not broadcast (%s)",
                              tstr(A, sa, sizeof sa), tstr(B, sb, sizeof sb), why);
    kn_dim out[KILN_MAX_RANK];
    int r = 0;
    for (int i = 0; i < bo.rank; i++) out[r++] = bo.dims[i];
    if (ra >= 2) out[r++] = A->dims[ra - 2];
    if (rb >= 2) out[r++] = B->dims[rb - 1];
    if (r > KILN_MAX_RANK) return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "output rank %d is too large", r);
    set_out(c, 0, dtype, r, out);
    return KILN_OK;
}

static kiln_status infer_matmul(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "A"));
    KN_TRY(need_input(c, 1, "B"));
    KN_TRY(check_dtype(c, 0, "A", matmul_types));
    KN_TRY(same_dtype(c, 0, "A", 1, "B"));
    return infer_matmul_shape(c, 0, 1, c->in[0]->dtype ? c->in[0]->dtype : c->in[1]->dtype);
}

/* a zero point is a scalar or a 1-D tensor (per row of A / per column of B) */
static kiln_status check_zero_point(kn_infer_ctx *c, int i, const char *name, int ref, const char *refname) {
    if (i >= c->n_inputs || !c->in[i]) return KILN_OK;
    const kn_type *z = c->in[i];
    if (z->dtype && c->in[ref]->dtype && z->dtype != c->in[ref]->dtype)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "'%s' is %s but '%s' is %s: they must have the same element type",
                              name, kiln_dtype_name(z->dtype), refname, kiln_dtype_name(c->in[ref]->dtype));
    return KILN_OK;
}

static kiln_status infer_matmul_integer(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "A"));
    KN_TRY(need_input(c, 1, "B"));
    KN_TRY(check_dtype(c, 0, "A", int8_types));
    KN_TRY(check_dtype(c, 1, "B", int8_types));
    KN_TRY(check_zero_point(c, 2, "a_zero_point", 0, "A"));
    KN_TRY(check_zero_point(c, 3, "b_zero_point", 1, "B"));
    return infer_matmul_shape(c, 0, 1, KILN_DTYPE_INT32);
}

static kiln_status infer_qlinear_matmul(kn_infer_ctx *c) {
    static const char *names[] = {"a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale",
                                  "y_zero_point"};
    for (int i = 0; i < 7; i++)
        if (i != 2 && i != 5) KN_TRY(need_input(c, i, names[i]));
    KN_TRY(check_dtype(c, 0, "a", int8_types));
    KN_TRY(check_dtype(c, 3, "b", int8_types));
    /* the output takes y_zero_point's type, or a's when it is omitted */
    kiln_dtype yt = c->n_inputs > 7 && c->in[7] ? c->in[7]->dtype : KILN_DTYPE_UNDEFINED;
    if (!yt) yt = c->in[0]->dtype;
    return infer_matmul_shape(c, 0, 3, yt);
}

/* ------------------------------------------------------------------ Gemm */

static kiln_status infer_gemm(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "A"));
    KN_TRY(need_input(c, 1, "B"));
    KN_TRY(check_dtype(c, 0, "A", matmul_types));
    KN_TRY(same_dtype(c, 0, "A", 1, "B"));
    if (c->node->opset < 11 && (c->n_inputs < 3 || !c->in[2]))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input 'C' is required before opset 11");
    const kn_type *A = c->in[0], *B = c->in[1];
    const kn_type *C = c->n_inputs > 2 ? c->in[2] : NULL;
    kiln_dtype dt = A->dtype ? A->dtype : B->dtype;
    int64_t ta = kn_attr_int(c->node, "transA", 0), tb = kn_attr_int(c->node, "transB", 0);
    char sa[256], sb[256], sc[256];
    if (A->rank >= 0 && A->rank != 2)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input 'A' is %s but Gemm needs a 2-D matrix", tstr(A, sa, sizeof sa));
    if (B->rank >= 0 && B->rank != 2)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input 'B' is %s but Gemm needs a 2-D matrix", tstr(B, sb, sizeof sb));
    kn_dim M = unknown_dim, N = unknown_dim, Ka = unknown_dim, Kb = unknown_dim;
    if (A->rank == 2) {
        M = A->dims[ta ? 1 : 0];
        Ka = A->dims[ta ? 0 : 1];
    }
    if (B->rank == 2) {
        Kb = B->dims[tb ? 1 : 0];
        N = B->dims[tb ? 0 : 1];
    }
    if (dims_differ(Ka, Kb))
        return kn_infer_error(c, KILN_ERR_SHAPE,
                              "input 'A' is %s (M=%lld, K=%lld after transA=%lld) but 'B' is %s with transB=%lld "
                              "(K=%lld, N=%lld): the inner dimensions differ",
                              tstr(A, sa, sizeof sa), (long long)M.value, (long long)Ka.value, (long long)ta,
                              tstr(B, sb, sizeof sb), (long long)tb, (long long)Kb.value, (long long)N.value);
    if (C && C->rank >= 0) {
        if (C->rank > 2)
            return kn_infer_error(c, KILN_ERR_SHAPE, "input 'C' is %s but must be at most 2-D (broadcast to [M,N])",
                                  tstr(C, sc, sizeof sc));
        kn_dim want[2] = {M, N};
        for (int i = 0; i < C->rank; i++) {
            kn_dim d = C->dims[i], w = want[2 - C->rank + i];
            if (d.value >= 0 && d.value != 1 && dims_differ(d, w))
                return kn_infer_error(c, KILN_ERR_SHAPE,
                                      "input 'C' is %s but does not broadcast to the output [M,N] = [%lld,%lld] "
                                      "(A is %s with transA=%lld, B is %s with transB=%lld)",
                                      tstr(C, sc, sizeof sc), (long long)M.value, (long long)N.value,
                                      tstr(A, sa, sizeof sa), (long long)ta, tstr(B, sb, sizeof sb), (long long)tb);
        }
        if (C->dtype && dt && C->dtype != dt)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input 'C' is %s but A and B are %s",
                                  kiln_dtype_name(C->dtype), kiln_dtype_name(dt));
    }
    kn_dim out[2] = {M, N};
    set_out(c, 0, dt, 2, out);
    return KILN_OK;
}

/* ------------------------------------------------------------------ convolutions */

static const char *plural(int64_t n) { return n == 1 ? "" : "s"; }

/* Conv-like ops: input x at ix, weight w at iw, optional bias at ib (-1 none). transpose: the
 * weight is [C, M/group, k...] instead of [M, C/group, k...]. */
static kiln_status infer_conv_like(kn_infer_ctx *c, int ix, int iw, int ib, bool transpose, kiln_dtype out_dt) {
    const kn_type *X = c->in[ix], *W = c->in[iw];
    const kn_type *Bt = ib >= 0 && ib < c->n_inputs ? c->in[ib] : NULL;
    char sx[256], sw[256];
    if (X->rank >= 0 && X->rank < 3)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input 'X' is %s but needs rank >= 3 ([N,C,spatial...])",
                              tstr(X, sx, sizeof sx));
    if (W->rank >= 0 && W->rank < 3)
        return kn_infer_error(c, KILN_ERR_SHAPE, "weight 'W' is %s but needs rank >= 3", tstr(W, sw, sizeof sw));
    if (X->rank >= 0 && W->rank >= 0 && X->rank != W->rank)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input 'X' is %s (%d spatial dim%s) but weight 'W' is %s (%d spatial dim%s)",
                              tstr(X, sx, sizeof sx), X->rank - 2, plural(X->rank - 2), tstr(W, sw, sizeof sw),
                              W->rank - 2, plural(W->rank - 2));
    int rank = X->rank >= 0 ? X->rank : W->rank;
    if (rank < 0) {
        set_out_unknown_rank(c, 0, out_dt);
        return KILN_OK;
    }
    int64_t group = kn_attr_int(c->node, "group", 1);
    if (group < 1) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "group %lld must be positive", (long long)group);
    int nsp = rank - 2;
    kn_dim xc = X->rank >= 0 ? X->dims[1] : unknown_dim;
    kn_dim w0 = W->rank >= 0 ? W->dims[0] : unknown_dim, w1 = W->rank >= 0 ? W->dims[1] : unknown_dim;
    kn_dim mout = unknown_dim;
    if (!transpose) {
        if (xc.value >= 0 && xc.value % group)
            return kn_infer_error(c, KILN_ERR_SHAPE, "input 'X' is %s: its %lld channels are not divisible by group=%lld",
                                  tstr(X, sx, sizeof sx), (long long)xc.value, (long long)group);
        if (xc.value >= 0 && w1.value >= 0 && xc.value != w1.value * group)
            return kn_infer_error(c, KILN_ERR_SHAPE,
                                  "input 'X' is %s (%lld channels) but weight 'W' is %s, which with group=%lld expects "
                                  "%lld channels (W[1] * group)",
                                  tstr(X, sx, sizeof sx), (long long)xc.value, tstr(W, sw, sizeof sw), (long long)group,
                                  (long long)(w1.value * group));
        if (w0.value >= 0 && w0.value % group)
            return kn_infer_error(c, KILN_ERR_SHAPE, "weight 'W' is %s: its %lld output channels are not divisible by group=%lld",
                                  tstr(W, sw, sizeof sw), (long long)w0.value, (long long)group);
        mout = w0;
    } else {
        if (xc.value >= 0 && w0.value >= 0 && xc.value != w0.value)
            return kn_infer_error(c, KILN_ERR_SHAPE,
                                  "input 'X' is %s (%lld channels) but weight 'W' is %s, whose first dim must equal the "
                                  "input channels",
                                  tstr(X, sx, sizeof sx), (long long)xc.value, tstr(W, sw, sizeof sw));
        if (xc.value >= 0 && xc.value % group)
            return kn_infer_error(c, KILN_ERR_SHAPE, "input 'X' is %s: its %lld channels are not divisible by group=%lld",
                                  tstr(X, sx, sizeof sx), (long long)xc.value, (long long)group);
        if (w1.value >= 0) mout = known_dim(w1.value * group);
    }
    if (Bt && Bt->rank >= 0) {
        char sbias[256];
        if (Bt->rank != 1 || dims_differ(Bt->dims[0], mout))
            return kn_infer_error(c, KILN_ERR_SHAPE, "bias 'B' is %s but must be 1-D with the %lld output channels",
                                  tstr(Bt, sbias, sizeof sbias), (long long)mout.value);
    }
    int64_t in[KN_MAX_SPATIAL], ker[KN_MAX_SPATIAL];
    for (int i = 0; i < nsp; i++) {
        in[i] = X->rank >= 0 ? X->dims[2 + i].value : -1;
        ker[i] = W->rank >= 0 ? W->dims[2 + i].value : -1;
    }
    kn_window w;
    char why[512];
    kiln_status s = kn_window_plan(c->node, transpose ? KN_WINDOW_CONV_TRANSPOSE : KN_WINDOW_CONV, nsp, in, ker, &w,
                                   why, sizeof why);
    if (s) return kn_infer_error(c, s, "input 'X' is %s, weight 'W' is %s: %s", tstr(X, sx, sizeof sx),
                                 tstr(W, sw, sizeof sw), why);
    kn_dim out[KILN_MAX_RANK];
    out[0] = X->rank >= 0 ? X->dims[0] : unknown_dim;
    out[1] = mout;
    for (int i = 0; i < nsp; i++) {
        /* a spatial dim that passes through unchanged keeps its symbol */
        bool same = !transpose && w.kernel[i] == 1 && w.stride[i] == 1 && w.pad_begin[i] == 0 && w.pad_end[i] == 0;
        out[2 + i] = w.out[i] >= 0 ? known_dim(w.out[i]) : same && X->rank >= 0 ? X->dims[2 + i] : unknown_dim;
    }
    set_out(c, 0, out_dt, rank, out);
    return KILN_OK;
}

/* Conv and ConvTranspose: float X and W of one type. */
static kiln_status infer_float_conv(kn_infer_ctx *c, bool transpose) {
    KN_TRY(need_input(c, 0, "X"));
    KN_TRY(need_input(c, 1, "W"));
    KN_TRY(check_dtype(c, 0, "X", float_types));
    KN_TRY(same_dtype(c, 0, "X", 1, "W"));
    return infer_conv_like(c, 0, 1, 2, transpose, c->in[0]->dtype ? c->in[0]->dtype : c->in[1]->dtype);
}

static kiln_status infer_conv(kn_infer_ctx *c) { return infer_float_conv(c, false); }
static kiln_status infer_conv_transpose(kn_infer_ctx *c) { return infer_float_conv(c, true); }

static kiln_status infer_conv_integer(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "x"));
    KN_TRY(need_input(c, 1, "w"));
    KN_TRY(check_dtype(c, 0, "x", int8_types));
    KN_TRY(check_dtype(c, 1, "w", int8_types));
    KN_TRY(check_zero_point(c, 2, "x_zero_point", 0, "x"));
    KN_TRY(check_zero_point(c, 3, "w_zero_point", 1, "w"));
    return infer_conv_like(c, 0, 1, -1, false, KILN_DTYPE_INT32);
}

static kiln_status infer_qlinear_conv(kn_infer_ctx *c) {
    static const char *names[] = {"x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale",
                                  "y_zero_point"};
    for (int i = 0; i < 8; i++)
        if (i != 2 && i != 5 && i != 7) KN_TRY(need_input(c, i, names[i]));
    KN_TRY(check_dtype(c, 0, "x", int8_types));
    KN_TRY(check_dtype(c, 3, "w", int8_types));
    kiln_dtype yt = c->n_inputs > 7 && c->in[7] && c->in[7]->dtype ? c->in[7]->dtype : c->in[0]->dtype;
    return infer_conv_like(c, 0, 3, 8, false, yt);
}

static kiln_status infer_deform_conv(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    KN_TRY(need_input(c, 1, "W"));
    KN_TRY(need_input(c, 2, "offset"));
    KN_TRY(check_dtype(c, 0, "X", float_types));
    KN_TRY(same_dtype(c, 0, "X", 1, "W"));
    if (c->in[0]->rank >= 0 && c->in[0]->rank != 4) {
        char sx[256];
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "input 'X' is %s: only 2-D DeformConv is supported",
                              tstr(c->in[0], sx, sizeof sx));
    }
    int64_t og = kn_attr_int(c->node, "offset_group", 1);
    if (og < 1) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "offset_group %lld must be positive", (long long)og);
    return infer_conv_like(c, 0, 1, 3, false, c->in[0]->dtype ? c->in[0]->dtype : c->in[1]->dtype);
}

/* ------------------------------------------------------------------ pools */

static kiln_status infer_pool(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    KN_TRY(check_dtype(c, 0, "X", pool_types));
    const kn_type *X = c->in[0];
    char sx[256];
    bool is_max = !strcmp(c->node->op_type, "MaxPool");
    if (X->rank < 0) {
        set_out_unknown_rank(c, 0, X->dtype);
        if (is_max) set_out_unknown_rank(c, 1, KILN_DTYPE_INT64);
        return KILN_OK;
    }
    if (X->rank < 3)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input 'X' is %s but needs rank >= 3 ([N,C,spatial...])",
                              tstr(X, sx, sizeof sx));
    if (!is_max && X->dtype != KILN_DTYPE_UNDEFINED && !type_is(X->dtype, float_types))
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "input 'X' has element type %s, which %s does not take",
                              kiln_dtype_name(X->dtype), c->node->op_type);
    if (is_max) {
        int64_t so = kn_attr_int(c->node, "storage_order", 0);
        if (so != 0 && so != 1)
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "storage_order %lld must be 0 or 1", (long long)so);
    }
    if (!strcmp(c->node->op_type, "LpPool")) {
        const kn_attr *p = kn_node_attr(c->node, "p");
        double pv = !p ? 2.0 : p->type == KN_ATTR_FLOAT ? p->f : (double)p->i;
        if (!(pv > 0))
            return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "p = %g must be positive", pv);
    }
    int nsp = X->rank - 2;
    int64_t in[KN_MAX_SPATIAL];
    for (int i = 0; i < nsp; i++) in[i] = X->dims[2 + i].value;
    kn_window w;
    char why[512];
    kiln_status s = kn_window_plan(c->node, KN_WINDOW_POOL, nsp, in, NULL, &w, why, sizeof why);
    if (s) return kn_infer_error(c, s, "input 'X' is %s: %s", tstr(X, sx, sizeof sx), why);
    kn_dim out[KILN_MAX_RANK];
    out[0] = X->dims[0];
    out[1] = X->dims[1];
    for (int i = 0; i < nsp; i++) out[2 + i] = w.out[i] >= 0 ? known_dim(w.out[i]) : unknown_dim;
    set_out(c, 0, X->dtype, X->rank, out);
    if (is_max) set_out(c, 1, KILN_DTYPE_INT64, X->rank, out);
    return KILN_OK;
}

static kiln_status infer_global_pool(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    KN_TRY(check_dtype(c, 0, "X", float_types));
    const kn_type *X = c->in[0];
    char sx[256];
    if (X->rank < 0) {
        set_out_unknown_rank(c, 0, X->dtype);
        return KILN_OK;
    }
    if (X->rank < 2)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input 'X' is %s but needs rank >= 2 ([N,C,spatial...])",
                              tstr(X, sx, sizeof sx));
    kn_dim out[KILN_MAX_RANK];
    out[0] = X->dims[0];
    out[1] = X->dims[1];
    for (int i = 2; i < X->rank; i++) out[i] = known_dim(1);
    set_out(c, 0, X->dtype, X->rank, out);
    return KILN_OK;
}

static kiln_status infer_max_unpool(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "X"));
    KN_TRY(need_input(c, 1, "I"));
    KN_TRY(check_dtype(c, 0, "X", float_types));
    const kn_type *X = c->in[0], *I = c->in[1];
    char sx[256], si[256];
    if (I->dtype && I->dtype != KILN_DTYPE_INT64)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input 'I' must be int64, got %s", kiln_dtype_name(I->dtype));
    if (X->rank < 0) {
        set_out_unknown_rank(c, 0, X->dtype);
        return KILN_OK;
    }
    if (X->rank < 3)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input 'X' is %s but needs rank >= 3", tstr(X, sx, sizeof sx));
    if (I->rank >= 0) {
        bool bad = I->rank != X->rank;
        for (int i = 0; !bad && i < X->rank; i++) bad = dims_differ(I->dims[i], X->dims[i]);
        if (bad)
            return kn_infer_error(c, KILN_ERR_SHAPE, "input 'X' is %s but the indices 'I' are %s: they must match",
                                  tstr(X, sx, sizeof sx), tstr(I, si, sizeof si));
    }
    int nsp = X->rank - 2;
    kn_dim out[KILN_MAX_RANK];
    out[0] = X->dims[0];
    out[1] = X->dims[1];
    const kn_tensor *os = c->n_inputs > 2 ? c->in_value[2] : NULL;
    if (c->n_inputs > 2 && c->in[2]) {
        if (!os) {
            for (int i = 0; i < nsp; i++) out[2 + i] = unknown_dim;
            set_out(c, 0, X->dtype, X->rank, out);
            return KILN_OK;
        }
        int64_t n = kn_tensor_count(os);
        if (n != X->rank)
            return kn_infer_error(c, KILN_ERR_SHAPE, "input 'output_shape' has %lld values but X has rank %d",
                                  (long long)n, X->rank);
        for (int i = 0; i < X->rank; i++) out[i] = known_dim(kn_tensor_get_i64(os, i));
        set_out(c, 0, X->dtype, X->rank, out);
        return KILN_OK;
    }
    int64_t in[KN_MAX_SPATIAL];
    for (int i = 0; i < nsp; i++) in[i] = X->dims[2 + i].value;
    kn_window w;
    char why[512];
    kiln_status s = kn_window_plan(c->node, KN_WINDOW_POOL, nsp, in, NULL, &w, why, sizeof why);
    if (s) return kn_infer_error(c, s, "input 'X' is %s: %s", tstr(X, sx, sizeof sx), why);
    for (int i = 0; i < nsp; i++) {
        int64_t x = in[i];
        out[2 + i] = x < 0 ? unknown_dim
                           : known_dim((x - 1) * w.stride[i] + w.kernel[i] - w.pad_begin[i] - w.pad_end[i]);
    }
    set_out(c, 0, X->dtype, X->rank, out);
    return KILN_OK;
}

/* ------------------------------------------------------------------ Col2Im */

static kiln_status infer_col2im(kn_infer_ctx *c) {
    KN_TRY(need_input(c, 0, "input"));
    KN_TRY(need_input(c, 1, "image_shape"));
    KN_TRY(need_input(c, 2, "block_shape"));
    const kn_type *X = c->in[0];
    char sx[256];
    if (X->rank >= 0 && X->rank != 3)
        return kn_infer_error(c, KILN_ERR_SHAPE, "input is %s but must be 3-D [N, C*prod(block_shape), L]",
                              tstr(X, sx, sizeof sx));
    const kn_tensor *img = c->in_value[1], *blk = c->in_value[2];
    int64_t nsp = c->in[1]->rank == 1 && c->in[1]->dims[0].value >= 0 ? c->in[1]->dims[0].value : -1;
    if (img) nsp = kn_tensor_count(img);
    if (nsp < 0) {
        set_out_unknown_rank(c, 0, X->dtype);
        return KILN_OK;
    }
    if (nsp < 1 || nsp > KN_MAX_SPATIAL)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "image_shape has %lld values", (long long)nsp);
    kn_dim out[KILN_MAX_RANK];
    out[0] = X->rank == 3 ? X->dims[0] : unknown_dim;
    out[1] = unknown_dim;
    if (blk && X->rank == 3 && X->dims[1].value >= 0) {
        int64_t prod = 1;
        for (int64_t i = 0; i < kn_tensor_count(blk); i++) prod *= kn_tensor_get_i64(blk, i);
        if (prod <= 0 || X->dims[1].value % prod)
            return kn_infer_error(c, KILN_ERR_SHAPE, "input is %s but its dim 1 is not a multiple of prod(block_shape) = %lld",
                                  tstr(X, sx, sizeof sx), (long long)prod);
        out[1] = known_dim(X->dims[1].value / prod);
    }
    for (int i = 0; i < nsp; i++) out[2 + i] = img ? known_dim(kn_tensor_get_i64(img, i)) : unknown_dim;
    set_out(c, 0, X->dtype, (int)nsp + 2, out);
    return KILN_OK;
}

/* ------------------------------------------------------------------ Einsum */

static kiln_status infer_einsum(kn_infer_ctx *c) {
    const char *eq = kn_attr_string(c->node, "equation", NULL);
    if (!eq) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attribute 'equation' is required");
    kiln_dtype dt = KILN_DTYPE_UNDEFINED;
    int ranks[KN_EINSUM_MAX_IN];
    int64_t dimv[KN_EINSUM_MAX_IN][KILN_MAX_RANK];
    const int64_t *dims[KN_EINSUM_MAX_IN];
    if (c->n_inputs > KN_EINSUM_MAX_IN)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "%d inputs (at most %d supported)", c->n_inputs, KN_EINSUM_MAX_IN);
    for (int i = 0; i < c->n_inputs; i++) {
        KN_TRY(need_input(c, i, "Inputs"));
        if (!dt) dt = c->in[i]->dtype;
        if (c->in[i]->rank < 0) {
            set_out_unknown_rank(c, 0, dt);
            return KILN_OK;
        }
        ranks[i] = c->in[i]->rank;
        for (int k = 0; k < ranks[i]; k++) dimv[i][k] = c->in[i]->dims[k].value;
        dims[i] = dimv[i];
    }
    KN_TRY(check_dtype(c, 0, "Inputs", matmul_types));
    kn_einsum_plan p;
    char why[512];
    kiln_status s = kn_einsum_plan_make(eq, c->n_inputs, ranks, dims, &p, why, sizeof why);
    if (s) return kn_infer_error(c, s, "equation '%s': %s", eq, why);
    kn_dim out[KILN_MAX_RANK];
    for (int i = 0; i < p.out_rank; i++) {
        int64_t v = p.size[p.out_label[i]];
        out[i] = v >= 0 ? known_dim(v) : unknown_dim;
        /* keep a symbol when one input gives it */
        if (v < 0)
            for (int t = 0; t < c->n_inputs && !out[i].symbol; t++)
                for (int k = 0; k < p.in_rank[t]; k++)
                    if (p.in_label[t][k] == p.out_label[i] && c->in[t]->dims[k].symbol) out[i] = c->in[t]->dims[k];
    }
    set_out(c, 0, dt, p.out_rank, out);
    return KILN_OK;
}

/* ------------------------------------------------------------------ table */

const kn_op_schema kn_ops_linalg[] = {
    {"", "MatMul", 1, 0, 2, 2, 1, 1, infer_matmul, 0},
    {"", "MatMulInteger", 10, 0, 2, 4, 1, 1, infer_matmul_integer, 0},
    {"", "QLinearMatMul", 10, 0, 7, 8, 1, 1, infer_qlinear_matmul, 0},
    {"", "Gemm", 1, 0, 2, 3, 1, 1, infer_gemm, 0},
    {"", "Einsum", 12, 0, 1, -1, 1, 1, infer_einsum, 0},
    {"", "Conv", 1, 0, 2, 3, 1, 1, infer_conv, 0},
    {"", "ConvInteger", 10, 0, 2, 4, 1, 1, infer_conv_integer, 0},
    {"", "QLinearConv", 10, 0, 7, 9, 1, 1, infer_qlinear_conv, 0},
    {"", "ConvTranspose", 1, 0, 2, 3, 1, 1, infer_conv_transpose, 0},
    {"", "MaxPool", 1, 7, 1, 1, 1, 1, infer_pool, 0},
    {"", "MaxPool", 8, 0, 1, 1, 1, 2, infer_pool, 0},
    {"", "AveragePool", 1, 0, 1, 1, 1, 1, infer_pool, 0},
    {"", "LpPool", 1, 0, 1, 1, 1, 1, infer_pool, 0},
    {"", "GlobalAveragePool", 1, 0, 1, 1, 1, 1, infer_global_pool, 0},
    {"", "GlobalMaxPool", 1, 0, 1, 1, 1, 1, infer_global_pool, 0},
    {"", "GlobalLpPool", 1, 0, 1, 1, 1, 1, infer_global_pool, 0},
    {"", "MaxUnpool", 9, 0, 2, 3, 1, 1, infer_max_unpool, 0},
    {"", "Col2Im", 18, 0, 3, 3, 1, 1, infer_col2im, 0},
    {"", "DeformConv", 19, 0, 3, 5, 1, 1, infer_deform_conv, 0},
    {0},
};

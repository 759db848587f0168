/* CUDA kernels of the tensor family: the views (Reshape, Flatten, Squeeze, Unsqueeze: device
 * copies), Transpose, Concat, Split, Slice, Expand, Tile, Pad, the Gather and Scatter families,
 * Range, ConstantOfShape, Constant, Shape/Size (metadata only: host outputs), CumSum, Trilu,
 * OneHot, EyeLike, DepthToSpace/SpaceToDepth.
 *
 * Inputs an op's shape inference reads as values (Reshape's shape, Slice's starts, ...) are
 * marked "host" in the table, so they arrive here as host tensors. */
#include "backend/cuda/cuda_backend.h"

#include "backend/cpu/cpu.h"
#include "ops/tensor_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NEED_OUT(c, i)                                                                             \
    do {                                                                                           \
        if (!(c)->out[i]) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output %d shape unknown at run time", i); \
    } while (0)

static void contiguous_strides(const int64_t *dims, int rank, int64_t *st) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        st[d] = s;
        s *= dims[d];
    }
}

static kiln_status device_copy(kn_cuda *cu, kn_kernel_ctx *c, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return KILN_OK;
    return kn_cu_check(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu->stream), "device copy");
}

/* Reshape, Flatten, Squeeze, Unsqueeze: same elements, new shape. */
static kiln_status run_view(kn_cuda *cu, kn_kernel_ctx *c) {
    NEED_OUT(c, 0);
    if (c->out[0]->nbytes != c->in[0]->nbytes)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "view of %zu bytes as %zu", c->in[0]->nbytes, c->out[0]->nbytes);
    return device_copy(cu, c, c->out[0]->data, c->in[0]->data, c->in[0]->nbytes);
}

static kiln_status strided_copy(kn_cuda *cu, kn_kernel_ctx *c, const kn_tensor *x, int64_t offset, kn_tensor *y,
                                const int64_t *strides, const char *what) {
    kn_cu_view v;
    kn_cu_view_strided(&v, y->rank, y->dims, strides);
    return kn_cu_check(c, kn_cu_copy_view(kiln_dtype_size(x->dtype), x->data, offset, y->data, &v, cu->stream), what);
}

static int reduction_code(const kn_node *n) {
    const char *r = kn_attr_string(n, "reduction", "none");
    return !strcmp(r, "add") ? 1 : !strcmp(r, "mul") ? 2 : !strcmp(r, "max") ? 3 : !strcmp(r, "min") ? 4 : 0;
}

/* The attributes this file's kernels read, read once when the session is compiled (one prepare
 * hook for the table: tensor_prepare). Each holds the attribute as the node has it; `has_axis`
 * false lets each kernel apply its own default. */
typedef struct tensor_prm {
    const int64_t *perm; /* Transpose (NULL: reversed dims) */
    int n_perm;
    bool has_axis;
    int64_t axis;
    const char *mode;     /* DepthToSpace's mode ("": absent) */
    int64_t batch_dims;   /* GatherND (0) */
    int reduction;        /* ScatterElements: reduction_code */
    const kn_tensor *value; /* ConstantOfShape's value (NULL: absent) */
    bool exclusive, reverse, upper; /* CumSum/CumProd (0, 0), Trilu (1) */
    int64_t k, blocksize, batch_axis, time_axis; /* EyeLike (0), DepthToSpace (1), ReverseSequence (1, 0) */
} tensor_prm;

static kiln_status tensor_prepare(const kn_node *n, void *params) {
    tensor_prm *p = params;
    memset(p, 0, sizeof *p);
    p->perm = kn_attr_ints(n, "perm", &p->n_perm);
    const kn_attr *ax = kn_node_attr(n, "axis");
    p->has_axis = ax && ax->type == KN_ATTR_INT;
    p->axis = p->has_axis ? ax->i : 0;
    p->mode = kn_attr_string(n, "mode", "");
    p->batch_dims = kn_attr_int(n, "batch_dims", 0);
    p->reduction = reduction_code(n);
    const kn_attr *v = kn_node_attr(n, "value");
    p->value = v ? v->t : NULL;
    p->exclusive = kn_attr_int(n, "exclusive", 0) != 0;
    p->reverse = kn_attr_int(n, "reverse", 0) != 0;
    p->upper = kn_attr_int(n, "upper", 1) != 0;
    p->k = kn_attr_int(n, "k", 0);
    p->blocksize = kn_attr_int(n, "blocksize", 1);
    p->batch_axis = kn_attr_int(n, "batch_axis", 1);
    p->time_axis = kn_attr_int(n, "time_axis", 0);
    return KILN_OK;
}

static kiln_status tensor_params(kn_kernel_ctx *c, tensor_prm *local, const tensor_prm **out) {
    return kn_ctx_params(c, tensor_prepare, local, (const void **)out);
}

static int64_t axis_or(const tensor_prm *p, int64_t dflt) { return p->has_axis ? p->axis : dflt; }

static const char *pad_mode_name(kn_pad_mode m) {
    return m == KN_PAD_REFLECT ? "reflect" : m == KN_PAD_EDGE ? "edge" : m == KN_PAD_WRAP ? "wrap" : "constant";
}

static kiln_status run_transpose(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    tensor_prm local_prm;
    const tensor_prm *prm;
    KN_TRY(tensor_params(c, &local_prm, &prm));
    int r = x->rank, np = prm->n_perm;
    const int64_t *perm = prm->perm;
    int64_t xs[KILN_MAX_RANK], st[KILN_MAX_RANK];
    contiguous_strides(x->dims, r, xs);
    for (int d = 0; d < r; d++) {
        int64_t p = perm && np == r ? perm[d] : r - 1 - d;
        if (p < 0) p += r;
        if (p < 0 || p >= r) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "perm entry %lld out of range", (long long)p);
        st[d] = xs[p];
    }
    return strided_copy(cu, c, x, 0, y, st, "Transpose");
}

static kiln_status run_expand(kn_cuda *cu, kn_kernel_ctx *c) {
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    kn_cu_view v;
    const kn_tensor *ops[1] = {c->in[0]};
    kn_cu_make_view(&v, y->dims, y->rank, ops, 1);
    return kn_cu_check(c, kn_cu_copy_view(kiln_dtype_size(y->dtype), c->in[0]->data, 0, y->data, &v, cu->stream),
                       "Expand");
}

static int norm_axis(int64_t a, int r) { return (int)(a < 0 ? a + r : a); }

static void outer_inner(const int64_t *dims, int rank, int axis, int64_t *outer, int64_t *inner) {
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < axis; d++) *outer *= dims[d];
    for (int d = axis + 1; d < rank; d++) *inner *= dims[d];
}

/* The non-empty tensors of a Concat's inputs or a Split's outputs as pieces of the joined rows
 * along `axis` (inner: the elements after it); false when there are more than one launch takes. */
static bool gather_pieces(const kn_tensor *const *ts, int n, int axis, int64_t inner, kn_cu_pieces *pc) {
    pc->n = 0;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        const kn_tensor *t = ts[i];
        if (!t) continue;
        const int64_t len = t->rank ? t->dims[axis] : 1;
        if (len * inner > 0) {
            if (pc->n == KN_CU_MAX_PIECES) return false;
            pc->ptr[pc->n] = (void *)t->data;
            pc->width[pc->n] = len * inner;
            pc->off[pc->n] = at * inner;
            pc->n++;
        }
        at += len;
    }
    return pc->n > 0;
}

static kiln_status run_concat(kn_cuda *cu, kn_kernel_ctx *c) {
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    tensor_prm local_prm;
    const tensor_prm *prm;
    KN_TRY(tensor_params(c, &local_prm, &prm));
    int r = y->rank;
    int axis = norm_axis(axis_or(prm, 0), r);
    int64_t outer, inner;
    outer_inner(y->dims, r, axis, &outer, &inner);
    size_t es = kiln_dtype_size(y->dtype);
    size_t dpitch = (size_t)(y->dims[axis] * inner) * es;
    /* every input in one launch (a channels-last Concat joins thousands of short rows, which a
     * copy per input and row moved slowly) */
    kn_cu_pieces pc;
    if (gather_pieces((const kn_tensor *const *)c->in, c->n_inputs, axis, inner, &pc))
        return kn_cu_check(c, kn_cu_pieces_copy(es, y->data, outer, y->dims[axis] * inner, &pc, false, cu->stream), "Concat");
    int64_t at = 0;
    for (int i = 0; i < c->n_inputs; i++) {
        const kn_tensor *x = c->in[i];
        if (!x) continue;
        int64_t len = x->rank ? x->dims[axis] : 1;
        size_t width = (size_t)(len * inner) * es;
        if (width && outer)
            KN_TRY(kn_cu_check(c, cudaMemcpy2DAsync((char *)y->data + (size_t)(at * inner) * es, dpitch, x->data, width,
                                                    width, (size_t)outer, cudaMemcpyDeviceToDevice, cu->stream),
                               "Concat"));
        at += len;
    }
    return KILN_OK;
}

static kiln_status run_split(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    tensor_prm local_prm;
    const tensor_prm *prm;
    KN_TRY(tensor_params(c, &local_prm, &prm));
    int r = x->rank;
    int axis = norm_axis(axis_or(prm, 0), r);
    int64_t outer, inner;
    outer_inner(x->dims, r, axis, &outer, &inner);
    size_t es = kiln_dtype_size(x->dtype);
    size_t spitch = (size_t)(x->dims[axis] * inner) * es;
    for (int o = 0; o < c->n_outputs; o++)
        if (c->node->outputs[o] >= 0) NEED_OUT(c, o);
    /* every output in one launch, as Concat */
    kn_cu_pieces pc;
    if (c->n_outputs <= KN_CU_MAX_PIECES) {
        const kn_tensor *outs[KN_CU_MAX_PIECES];
        for (int o = 0; o < c->n_outputs; o++) outs[o] = c->node->outputs[o] >= 0 ? c->out[o] : NULL;
        if (gather_pieces(outs, c->n_outputs, axis, inner, &pc))
            return kn_cu_check(c, kn_cu_pieces_copy(es, x->data, outer, x->dims[axis] * inner, &pc, true, cu->stream), "Split");
    }
    int64_t at = 0;
    for (int o = 0; o < c->n_outputs; o++) {
        if (c->node->outputs[o] < 0) continue;
        NEED_OUT(c, o);
        kn_tensor *y = c->out[o];
        int64_t len = y->dims[axis];
        size_t width = (size_t)(len * inner) * es;
        if (width && outer)
            KN_TRY(kn_cu_check(c, cudaMemcpy2DAsync(y->data, width, (const char *)x->data + (size_t)(at * inner) * es,
                                                    spitch, width, (size_t)outer, cudaMemcpyDeviceToDevice, cu->stream),
                               "Split"));
        at += len;
    }
    return KILN_OK;
}

static kiln_status run_slice(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    const kn_tensor *vals[5] = {NULL};
    for (int i = 1; i < c->n_inputs && i < 5; i++) vals[i] = c->in[i];
    kn_slice_prm local;
    const kn_slice_prm *sp;
    KN_TRY(kn_ctx_params(c, kn_slice_prepare, &local, (const void **)&sp));
    kn_slice_plan p;
    bool known;
    char why[256];
    kiln_status st = kn_slice_plan_from(c->node, sp, vals, c->n_inputs < 5 ? c->n_inputs : 5, x->dims, x->rank, &p,
                                        &known, why, sizeof why);
    if (st) return kn_kernel_error(c, st, "%s", why);
    if (!known) return kn_kernel_error(c, KILN_ERR_INTERNAL, "slice parameters unknown at run time");
    int64_t xs[KILN_MAX_RANK], strides[KILN_MAX_RANK], off = 0;
    contiguous_strides(x->dims, x->rank, xs);
    for (int d = 0; d < x->rank; d++) {
        if (p.len[d] != y->dims[d])
            return kn_kernel_error(c, KILN_ERR_INTERNAL, "slice length %lld but output dim %lld", (long long)p.len[d],
                                   (long long)y->dims[d]);
        off += p.start[d] * xs[d];
        strides[d] = p.step[d] * xs[d];
    }
    if (kn_tensor_count(y) == 0) return KILN_OK;
    return strided_copy(cu, c, x, off, y, strides, "Slice");
}

static kiln_status run_tile(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    return kn_cu_check(c, kn_cu_tile(kiln_dtype_size(x->dtype), x->data, y->data, x->rank, x->dims, y->dims, cu->stream),
                       "Tile");
}

static kiln_status run_pad(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    const kn_tensor *vals[4] = {NULL};
    for (int i = 1; i < c->n_inputs && i < 4; i++) vals[i] = c->in[i];
    int64_t begin[KILN_MAX_RANK], end[KILN_MAX_RANK];
    kn_pad_prm local_prm;
    const kn_pad_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_pad_prepare, &local_prm, (const void **)&prm));
    kn_pad_mode mode;
    bool known;
    char why[256];
    kiln_status st = kn_pad_plan_from(c->node, prm, vals, c->n_inputs < 4 ? c->n_inputs : 4, x->rank, begin, end, &mode,
                                      &known, why, sizeof why);
    if (st) return kn_kernel_error(c, st, "%s", why);
    if (!known) return kn_kernel_error(c, KILN_ERR_INTERNAL, "pads unknown at run time");
    if (mode != KN_PAD_CONSTANT && kn_tensor_count(x) == 0 && kn_tensor_count(y) > 0)
        return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "cannot %s-pad an empty tensor", pad_mode_name(mode));
    /* the constant value in the element type, as raw bytes */
    unsigned char value[16] = {0};
    double v = c->node->opset < 11 ? prm->value
                                   : (c->n_inputs > 2 && c->in[2] && kn_tensor_count(c->in[2]) ? kn_tensor_get_f64(c->in[2], 0) : 0.0);
    kn_tensor tmp = {0};
    tmp.kind = KN_VALUE_TENSOR;
    tmp.dtype = x->dtype;
    tmp.data = value;
    tmp.nbytes = kiln_dtype_size(x->dtype);
    if (x->dtype == KILN_DTYPE_INT64 && c->n_inputs > 2 && c->in[2] && kn_tensor_count(c->in[2]))
        kn_tensor_set_i64(&tmp, 0, kn_tensor_get_i64(c->in[2], 0));
    else
        kn_tensor_set_f64(&tmp, 0, v);
    int m = mode == KN_PAD_CONSTANT ? 0 : mode == KN_PAD_REFLECT ? 1 : mode == KN_PAD_EDGE ? 2 : 3;
    return kn_cu_check(c, kn_cu_pad(kiln_dtype_size(x->dtype), x->data, y->data, x->rank, x->dims, y->dims, begin, m,
                                    value, cu->stream),
                       "Pad");
}

static bool idx64_of(const kn_tensor *t) { return t->dtype == KILN_DTYPE_INT64; }

static bool index_types(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n;
    if (n_in > 1 && in[1] && in[1]->dtype != KILN_DTYPE_INT64 && in[1]->dtype != KILN_DTYPE_INT32) {
        snprintf(why, cap, "indices of type %s", kiln_dtype_name(in[1]->dtype));
        return false;
    }
    return true;
}

static kiln_status run_gather(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *idx = c->in[1];
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    tensor_prm local_prm;
    const tensor_prm *prm;
    KN_TRY(tensor_params(c, &local_prm, &prm));
    int axis = norm_axis(axis_or(prm, 0), x->rank);
    int64_t outer, inner;
    outer_inner(x->dims, x->rank, axis, &outer, &inner);
    return kn_cu_check(c, kn_cu_gather(kiln_dtype_size(x->dtype), x->data, idx->data, idx64_of(idx), y->data, outer,
                                       x->dims[axis], kn_tensor_count(idx), inner, kn_cu_err_at(cu, c), cu->stream),
                       "Gather");
}

static kiln_status run_gather_elements(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *idx = c->in[1];
    NEED_OUT(c, 0);
    tensor_prm local_prm;
    const tensor_prm *prm;
    KN_TRY(tensor_params(c, &local_prm, &prm));
    int axis = norm_axis(axis_or(prm, 0), x->rank);
    return kn_cu_check(c, kn_cu_gather_elements(kiln_dtype_size(x->dtype), x->data, idx->data, idx64_of(idx),
                                                c->out[0]->data, x->rank, x->dims, idx->dims, axis,
                                                kn_cu_err_at(cu, c), cu->stream),
                       "GatherElements");
}

static kiln_status run_scatter_elements(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *idx = c->in[1], *upd = c->in[2];
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    KN_TRY(device_copy(cu, c, y->data, x->data, x->nbytes));
    tensor_prm local_prm;
    const tensor_prm *prm;
    KN_TRY(tensor_params(c, &local_prm, &prm));
    int axis = norm_axis(axis_or(prm, 0), x->rank);
    return kn_cu_check(c, kn_cu_scatter_elements(x->dtype, y->data, idx->data, idx64_of(idx), upd->data, x->rank, y->dims,
                                                 idx->dims, axis, prm->reduction, kn_cu_err_at(cu, c), cu->stream),
                       "ScatterElements");
}

static kiln_status run_gather_nd(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *idx = c->in[1];
    NEED_OUT(c, 0);
    tensor_prm local_prm;
    const tensor_prm *prm;
    KN_TRY(tensor_params(c, &local_prm, &prm));
    int b = (int)prm->batch_dims;
    int q = idx->rank;
    int k = q ? (int)idx->dims[q - 1] : 0;
    int64_t batch = 1, per = 1, slice = 1;
    for (int d = 0; d < b; d++) batch *= idx->dims[d];
    for (int d = b; d < q - 1; d++) per *= idx->dims[d];
    for (int d = b + k; d < x->rank; d++) slice *= x->dims[d];
    return kn_cu_check(c, kn_cu_gather_nd(kiln_dtype_size(x->dtype), x->data, idx->data, c->out[0]->data, batch, per, k,
                                          x->dims, x->rank, b, slice, kn_cu_err_at(cu, c), cu->stream),
                       "GatherND");
}

static kiln_status run_scatter_nd(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *idx = c->in[1], *upd = c->in[2];
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    KN_TRY(device_copy(cu, c, y->data, x->data, x->nbytes));
    int q = idx->rank;
    int k = q ? (int)idx->dims[q - 1] : 0;
    int64_t n_upd = 1, slice = 1;
    for (int d = 0; d < q - 1; d++) n_upd *= idx->dims[d];
    for (int d = k; d < x->rank; d++) slice *= x->dims[d];
    tensor_prm local_prm;
    const tensor_prm *prm;
    KN_TRY(tensor_params(c, &local_prm, &prm));
    return kn_cu_check(c, kn_cu_scatter_nd(x->dtype, y->data, idx->data, upd->data, n_upd, k, y->dims, y->rank, slice,
                                           prm->reduction, kn_cu_err_at(cu, c), cu->stream),
                       "ScatterND");
}

static bool int64_indices(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n;
    if (n_in > 1 && in[1] && in[1]->dtype != KILN_DTYPE_INT64) {
        snprintf(why, cap, "indices of type %s", kiln_dtype_name(in[1]->dtype));
        return false;
    }
    return true;
}

static kiln_status run_range(kn_cuda *cu, kn_kernel_ctx *c) {
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    const kn_tensor *s = c->in[0], *d = c->in[2];
    return kn_cu_check(c, kn_cu_range(y->dtype, kn_tensor_get_f64(s, 0), kn_tensor_get_f64(d, 0), kn_tensor_get_i64(s, 0),
                                      kn_tensor_get_i64(d, 0), y->data, kn_tensor_count(y), cu->stream),
                       "Range");
}

static kiln_status run_constant_of_shape(kn_cuda *cu, kn_kernel_ctx *c) {
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    unsigned char value[16] = {0};
    tensor_prm local_prm;
    const tensor_prm *prm;
    KN_TRY(tensor_params(c, &local_prm, &prm));
    const kn_tensor *t = prm->value;
    if (t && t->nbytes >= kiln_dtype_size(y->dtype) && t->device == KN_DEVICE_HOST)
        memcpy(value, t->data, kiln_dtype_size(y->dtype));
    return kn_cu_check(c, kn_cu_fill(kiln_dtype_size(y->dtype), value, y->data, kn_tensor_count(y), cu->stream),
                       "ConstantOfShape");
}

/* Ops that read only their inputs' metadata (Shape, Size) or none (Constant) run the CPU kernel on
 * the host: their output is on the host, no data moves. */
static kiln_status run_host_metadata(kn_cuda *cu, kn_kernel_ctx *c) {
    (void)cu;
    char why[256];
    const kn_type *in[1] = {NULL};
    kn_type t;
    if (c->n_inputs > 0 && c->in[0]) {
        kn_type_init(&t);
        kn_type_set_tensor(&t, c->in[0]->dtype, c->in[0]->rank, c->in[0]->dims);
        in[0] = &t;
    }
    const kn_cpu_kernel *k = kn_cpu_find(c->node, in, c->n_inputs > 0 ? 1 : 0, why, sizeof why);
    if (!k) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "%s", why);
    return k->run(c);
}

static bool constant_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)in;
    (void)n_in;
    /* the value stays on the host (copied to the device by the readers that need it there) */
    if (kn_node_attr(n, "sparse_value")) {
        snprintf(why, cap, "sparse constant");
        return false;
    }
    return true;
}

static kiln_status run_cumulative(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    int axis = norm_axis(kn_tensor_get_i64(c->in[1], 0), x->rank);
    if (axis < 0 || axis >= x->rank) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "axis out of range");
    int64_t outer, inner;
    outer_inner(x->dims, x->rank, axis, &outer, &inner);
    bool product = c->node->op_type[3] == 'P'; /* CumProd, CumSum */
    tensor_prm local_prm;
    const tensor_prm *prm;
    KN_TRY(tensor_params(c, &local_prm, &prm));
    return kn_cu_check(c, kn_cu_cumulative(x->dtype, x->data, c->out[0]->data, outer, x->dims[axis], inner,
                                           prm->exclusive, prm->reverse, product, cu->stream),
                       c->node->op_type);
}

static kiln_status run_trilu(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    int64_t k = c->n_inputs > 1 && c->in[1] ? kn_tensor_get_i64(c->in[1], 0) : 0;
    int r = x->rank;
    if (r < 2) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "Trilu needs rank >= 2");
    int64_t rows = x->dims[r - 2], cols = x->dims[r - 1], batch = 1;
    for (int d = 0; d < r - 2; d++) batch *= x->dims[d];
    tensor_prm local_prm;
    const tensor_prm *prm;
    KN_TRY(tensor_params(c, &local_prm, &prm));
    return kn_cu_check(c, kn_cu_trilu(kiln_dtype_size(x->dtype), x->data, c->out[0]->data, batch, rows, cols, k,
                                      prm->upper, cu->stream),
                       "Trilu");
}

static kiln_status run_onehot(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *idx = c->in[0], *vals = c->in[2];
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    tensor_prm local_prm;
    const tensor_prm *prm;
    KN_TRY(tensor_params(c, &local_prm, &prm));
    int axis = norm_axis(axis_or(prm, -1), y->rank);
    int64_t outer, inner;
    outer_inner(y->dims, y->rank, axis, &outer, &inner);
    size_t es = kiln_dtype_size(y->dtype);
    uint64_t off = 0, on = 0;
    if (kn_tensor_count(vals) < 2 || es > 8) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "values needs 2 elements");
    memcpy(&off, vals->data, es);
    memcpy(&on, (const char *)vals->data + es, es);
    return kn_cu_check(c, kn_cu_onehot(idx->dtype, es, idx->data, off, on, y->data, outer, y->dims[axis], inner, cu->stream),
                       "OneHot");
}

static bool onehot_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n;
    kiln_dtype t = in[0]->dtype;
    if (t != KILN_DTYPE_INT64 && t != KILN_DTYPE_INT32 && t != KILN_DTYPE_FLOAT && t != KILN_DTYPE_DOUBLE) {
        snprintf(why, cap, "indices of type %s", kiln_dtype_name(t));
        return false;
    }
    if (n_in > 2 && in[2] && !(KN_T_DENSE & KN_T(in[2]->dtype))) {
        snprintf(why, cap, "values of type %s", kiln_dtype_name(in[2]->dtype));
        return false;
    }
    return true;
}

static kiln_status run_eyelike(kn_cuda *cu, kn_kernel_ctx *c) {
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    size_t es = kiln_dtype_size(y->dtype);
    unsigned char one[16] = {0};
    kn_tensor tmp = {0};
    tmp.kind = KN_VALUE_TENSOR;
    tmp.dtype = y->dtype;
    tmp.data = one;
    tmp.nbytes = es;
    kn_tensor_set_f64(&tmp, 0, 1.0);
    uint64_t bits = 0;
    memcpy(&bits, one, es > 8 ? 8 : es);
    tensor_prm local_prm;
    const tensor_prm *prm;
    KN_TRY(tensor_params(c, &local_prm, &prm));
    return kn_cu_check(c, kn_cu_eyelike(es, bits, y->data, y->dims[0], y->rank > 1 ? y->dims[1] : 1, prm->k,
                                        cu->stream),
                       "EyeLike");
}

/* DepthToSpace / SpaceToDepth as a 6-D transpose. */
static kiln_status run_depth_space(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    if (x->rank != 4) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "rank %d (4 expected)", x->rank);
    tensor_prm local_prm;
    const tensor_prm *prm;
    KN_TRY(tensor_params(c, &local_prm, &prm));
    int64_t b = prm->blocksize;
    const bool crd = !strcmp(prm->mode, "CRD"); /* DCR when absent */
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t d6[6], perm[6], st6[6], in6[6];
    bool d2s = !strcmp(c->node->op_type, "DepthToSpace");
    if (d2s) {
        int64_t cc = C / (b * b);
        if (crd) {
            int64_t s[6] = {N, cc, b, b, H, W}, p[6] = {0, 1, 4, 2, 5, 3};
            memcpy(in6, s, sizeof s);
            memcpy(perm, p, sizeof p);
        } else {
            int64_t s[6] = {N, b, b, cc, H, W}, p[6] = {0, 3, 4, 1, 5, 2};
            memcpy(in6, s, sizeof s);
            memcpy(perm, p, sizeof p);
        }
    } else {
        int64_t s[6] = {N, C, H / b, b, W / b, b}, p_dcr[6] = {0, 3, 5, 1, 2, 4}, p_crd[6] = {0, 1, 3, 5, 2, 4};
        memcpy(in6, s, sizeof s);
        memcpy(perm, crd ? p_crd : p_dcr, sizeof p_dcr);
    }
    int64_t xs[6];
    contiguous_strides(in6, 6, xs);
    for (int d = 0; d < 6; d++) {
        d6[d] = in6[perm[d]];
        st6[d] = xs[perm[d]];
    }
    kn_cu_view v;
    kn_cu_view_strided(&v, 6, d6, st6);
    return kn_cu_check(c, kn_cu_copy_view(kiln_dtype_size(x->dtype), x->data, 0, y->data, &v, cu->stream),
                       c->node->op_type);
}

/* CenterCropPad: each named axis cropped or zero-padded about its centre to the given size. */
static kiln_status run_center_crop_pad(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    NEED_OUT(c, 0);
    kn_tensor *y = c->out[0];
    int64_t begin[KILN_MAX_RANK] = {0};
    for (int d = 0; d < x->rank; d++) {
        int64_t in = x->dims[d], out = y->dims[d];
        begin[d] = out >= in ? (out - in) / 2 : -((in - out) / 2);
    }
    unsigned char zero[16] = {0};
    return kn_cu_check(c, kn_cu_pad(kiln_dtype_size(x->dtype), x->data, y->data, x->rank, x->dims, y->dims, begin, 0,
                                    zero, cu->stream),
                       "CenterCropPad");
}

static kiln_status run_reverse_sequence(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *lens = c->in[1];
    NEED_OUT(c, 0);
    tensor_prm local_prm;
    const tensor_prm *prm;
    KN_TRY(tensor_params(c, &local_prm, &prm));
    int64_t ba = prm->batch_axis, ta = prm->time_axis;
    if (x->rank < 2 || !((ba == 0 && ta == 1) || (ba == 1 && ta == 0)))
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "batch_axis/time_axis must be 0 and 1");
    int64_t inner = 1;
    for (int d = 2; d < x->rank; d++) inner *= x->dims[d];
    return kn_cu_check(c, kn_cu_reverse_sequence(kiln_dtype_size(x->dtype), x->data, c->out[0]->data, lens->data,
                                                 x->dims[0], x->dims[1], inner, ba == 0, kn_cu_err_at(cu, c), cu->stream),
                       "ReverseSequence");
}

#define ALL KN_T_DENSE

const kn_cuda_kernel kn_cuda_tensor[] = {
    {"", "Reshape", run_view, NULL, ALL, 0x2, 0},
    {"", "Flatten", run_view, NULL, ALL, 0, 0},
    {"", "Squeeze", run_view, NULL, ALL, 0x2, 0},
    {"", "Unsqueeze", run_view, NULL, ALL, 0x2, 0},
    {"", "Transpose", run_transpose, NULL, ALL, 0, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "Concat", run_concat, NULL, ALL, 0, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "Split", run_split, NULL, ALL, 0x2, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "Slice", run_slice, NULL, ALL, 0x1e, 0, KN_CU_PARAMS(kn_slice_prepare, kn_slice_prm)},
    {"", "Expand", run_expand, NULL, ALL, 0x2, 0},
    {"", "Tile", run_tile, NULL, ALL, 0x2, 0},
    {"", "Pad", run_pad, NULL, ALL, 0xe, 0, KN_CU_PARAMS(kn_pad_prepare, kn_pad_prm)},
    {"", "Gather", run_gather, index_types, ALL, 0, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "GatherElements", run_gather_elements, index_types, ALL, 0, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "GatherND", run_gather_nd, int64_indices, ALL, 0, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "ScatterElements", run_scatter_elements, index_types, KN_T_NUM | KN_T_BOOL, 0, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "Scatter", run_scatter_elements, index_types, KN_T_NUM | KN_T_BOOL, 0, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "ScatterND", run_scatter_nd, int64_indices, KN_T_NUM | KN_T_BOOL, 0, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "Range", run_range, NULL, KN_T_FLOATS | KN_T_SINTS, 0x7, 0},
    {"", "ConstantOfShape", run_constant_of_shape, NULL, 0, 0x1, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "Constant", run_host_metadata, constant_supports, 0, 0, KN_CUK_HOST_OUTPUTS},
    {"", "Shape", run_host_metadata, NULL, 0, 0, KN_CUK_HOST_OUTPUTS | KN_CUK_METADATA},
    {"", "Size", run_host_metadata, NULL, 0, 0, KN_CUK_HOST_OUTPUTS | KN_CUK_METADATA},
    {"", "CumSum", run_cumulative, NULL, KN_T_NUM, 0x2, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "CumProd", run_cumulative, NULL, KN_T_NUM, 0x2, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "Trilu", run_trilu, NULL, ALL, 0x2, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "OneHot", run_onehot, onehot_supports, 0, 0x6, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "EyeLike", run_eyelike, NULL, ALL, 0, KN_CUK_METADATA, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "DepthToSpace", run_depth_space, NULL, ALL, 0, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "CenterCropPad", run_center_crop_pad, NULL, ALL, 0x2, 0},
    {"", "ReverseSequence", run_reverse_sequence, int64_indices, ALL, 0, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {"", "SpaceToDepth", run_depth_space, NULL, ALL, 0, 0, KN_CU_PARAMS(tensor_prepare, tensor_prm)},
    {NULL, NULL, NULL, NULL, 0, 0, 0},
};

/* Head splits and merges into kiln.Attention's operand views.
 *
 * Exporters feed attention through data movement: a projection [B, S, H*D] is Reshaped to
 * [B, S, H, D] and Transposed to [B, H, S, D] (K to [B, H, D, S]); torch's MultiheadAttention packs
 * Q, K and V in one projection and takes them apart with Reshape, Transpose, Squeeze and Gather;
 * the output goes back through Transpose and Reshape. Every one of those is a copy on its own, but
 * together they only say where each element of an operand lives in the tensor they start from: a
 * strided view (offset and one stride per dim). This pass replaces such chains by the view
 * (kiln.Attention's q_view, kt_view, v_view and y_view, src/ops/fused.h), so the kernel reads the
 * projection and writes the merged output in place and the copies go.
 *
 * Only where every value of the chain has a static shape but for symbolic dims that no stride or
 * offset depends on (a model's batch, outermost: the views are numbers, those dims read at run time
 * from the tensor); a Reshape joins only when it is a view of what comes before it (the dims it
 * merges lie evenly in memory). A value read elsewhere too stays computed for its other readers. */
#include "opt/pass.h"

#include <string.h>

#define MAX_CHAIN 16

/* A strided view whose dims may each be several factors (size, stride), outer first: a merge of
 * dims that do not lie evenly in memory stays exact as long as a later split takes it apart
 * again (torch's MultiheadAttention merges batch and heads of a packed projection, then splits
 * them). Only single-factor dims can be a kernel's view. */
#define MAX_FACTORS 4
typedef struct view {
    int rank;
    int nf[KILN_MAX_RANK];
    int64_t size[KILN_MAX_RANK][MAX_FACTORS], stride[KILN_MAX_RANK][MAX_FACTORS];
    int64_t offset;
} view;

/* Symbolic dims join the view algebra as stand-in sizes: distinct primes above every static dim
 * taken, so none divides a product of static sizes. A walk is made twice, with two sets of
 * stand-ins; where the two views differ in a stride or the offset, the view depends on a symbolic
 * size and is not taken, and a dim that is the one stand-in in one walk and its counterpart in
 * the other is that symbolic dim. */
#define MAX_SYMS 2
#define STAND_IN_MIN 1000003
static const int64_t stand_in[2][MAX_SYMS] = {{1000003, 1000033}, {1000037, 1000039}};

typedef struct syms {
    int round; /* which stand-ins */
    int n;
    const char *name[MAX_SYMS];
} syms;

/* A static tensor type's dims; symbolic ones (named) as stand-ins when s is given, and one unknown
 * dim as what the others leave of `total` elements (a Reshape's -1: the value a chain passes
 * through has as many elements before as after) when total >= 0. */
static bool known_dims(const kn_type *t, syms *s, int64_t total, int64_t *dims, int *rank) {
    if (t->kind != KN_TYPE_TENSOR || t->rank < 0) return false;
    int unknown = -1;
    int64_t rest = 1;
    for (int k = 0; k < t->rank; k++) {
        const kn_dim *d = &t->dims[k];
        if (d->value >= STAND_IN_MIN) return false;
        if (d->value >= 0) {
            dims[k] = d->value;
            if (d->value && rest > INT64_MAX / 4 / d->value) return false; /* the walks' products stay in range */
            rest *= d->value;
            continue;
        }
        if (s && !d->symbol && total >= 0 && unknown < 0) {
            unknown = k;
            continue;
        }
        if (!s || !d->symbol) return false;
        int j = 0;
        while (j < s->n && strcmp(s->name[j], d->symbol)) j++;
        if (j == MAX_SYMS) return false;
        if (j == s->n) s->name[s->n++] = d->symbol;
        dims[k] = stand_in[s->round][j];
        if (rest > INT64_MAX / 4 / dims[k]) return false;
        rest *= dims[k];
    }
    if (unknown >= 0) {
        if (rest <= 0 || total % rest) return false;
        dims[unknown] = total / rest;
    }
    *rank = t->rank;
    return true;
}

static bool static_dims(const kn_type *t, int64_t *dims, int *rank) { return known_dims(t, NULL, -1, dims, rank); }

static int64_t dim_size(const view *v, int k) {
    int64_t n = 1;
    for (int f = 0; f < v->nf[k]; f++) n *= v->size[k][f];
    return n;
}

/* The view's element count (its walk keeps it from node to node). */
static int64_t view_count(const view *v) {
    int64_t n = 1;
    for (int k = 0; k < v->rank; k++) n *= dim_size(v, k);
    return n;
}

static void contiguous(view *v, const int64_t *dims, int rank) {
    memset(v, 0, sizeof *v);
    v->rank = rank;
    int64_t s = 1;
    for (int k = rank - 1; k >= 0; k--) {
        v->nf[k] = 1;
        v->size[k][0] = dims[k];
        v->stride[k][0] = s;
        s *= dims[k];
    }
}

/* v reshaped to dims (same count): the factors, outer to inner, dealt out to the new dims, a factor
 * split where a new dim ends inside it (evenly); false where that is impossible or a dim would
 * need more than MAX_FACTORS factors. Factors that lie evenly merge back into one. */
static bool reshape_view(view *v, const int64_t *dims, int rank) {
    int64_t fs[KILN_MAX_RANK * MAX_FACTORS], ft[KILN_MAX_RANK * MAX_FACTORS], total = 1;
    int n = 0;
    for (int k = 0; k < v->rank; k++)
        for (int f = 0; f < v->nf[k]; f++)
            if (v->size[k][f] != 1) fs[n] = v->size[k][f], ft[n] = v->stride[k][f], total *= fs[n], n++;
    int64_t want = 1;
    for (int k = 0; k < rank; k++) want *= dims[k];
    if (want != total || total == 0 || rank > KILN_MAX_RANK) return false;
    view out;
    memset(&out, 0, sizeof out);
    out.rank = rank;
    out.offset = v->offset;
    int i = 0;
    for (int k = 0; k < rank; k++) {
        int64_t need = dims[k];
        while (need > 1) {
            if (i >= n || out.nf[k] == MAX_FACTORS) return false;
            if (fs[i] <= need) {
                if (need % fs[i]) return false;
                out.size[k][out.nf[k]] = fs[i], out.stride[k][out.nf[k]] = ft[i], out.nf[k]++;
                need /= fs[i];
                i++;
            } else { /* the dim ends inside this factor: its outer `need` part goes here, the rest stays */
                if (fs[i] % need) return false;
                fs[i] /= need;
                out.size[k][out.nf[k]] = need, out.stride[k][out.nf[k]] = ft[i] * fs[i], out.nf[k]++;
                need = 1;
            }
        }
        /* merge adjacent factors that lie evenly (outer stride = inner stride * inner size) */
        int m = 0;
        for (int f = 0; f < out.nf[k]; f++) {
            if (m > 0 && out.stride[k][m - 1] == out.stride[k][f] * out.size[k][f]) {
                out.size[k][m - 1] *= out.size[k][f];
                out.stride[k][m - 1] = out.stride[k][f];
            } else {
                out.size[k][m] = out.size[k][f], out.stride[k][m] = out.stride[k][f], m++;
            }
        }
        out.nf[k] = m;
        if (m == 0) out.nf[k] = 1, out.size[k][0] = 1, out.stride[k][0] = 0; /* a dim of 1 */
    }
    *v = out;
    return true;
}

static bool perm_of(const kn_node *n, int rank, int *perm) {
    const kn_attr *a = kn_node_attr(n, "perm");
    if (!a) {
        for (int k = 0; k < rank; k++) perm[k] = rank - 1 - k;
        return true;
    }
    if (a->type != KN_ATTR_INTS || a->n != rank) return false;
    bool seen[KILN_MAX_RANK] = {false};
    for (int k = 0; k < rank; k++) {
        int64_t p = a->ints[k] < 0 ? a->ints[k] + rank : a->ints[k];
        if (p < 0 || p >= rank || seen[p]) return false;
        seen[p] = true;
        perm[k] = (int)p;
    }
    return true;
}

/* A node that only moves data in a way a view can say: Transpose, the reshapes (Reshape,
 * Squeeze, Unsqueeze, Flatten, Identity: their output's static shape says all) and, reading
 * forward only, Gather of one constant index and the ranges of Split and Slice (a packed QKV
 * projection taken apart: timm's ViT splits it, GPT-2's exports split or slice it). */
static bool is_view_op(const kn_opt_ctx *c, int node, bool forward_only) {
    if (node < 0) return false;
    if (kn_opt_is(c, node, "Transpose") || kn_opt_is(c, node, "Reshape") || kn_opt_is(c, node, "Squeeze") ||
        kn_opt_is(c, node, "Unsqueeze") || kn_opt_is(c, node, "Flatten") || kn_opt_is(c, node, "Identity"))
        return true;
    return forward_only && (kn_opt_is(c, node, "Gather") || kn_opt_is(c, node, "Split") || kn_opt_is(c, node, "Slice"));
}

/* A constant 1-D integer input's k-th element (*ok false when it is not one). */
static int64_t const_int_at(const kn_opt_ctx *c, int value, int64_t k, bool *ok) {
    const kn_tensor *t = value >= 0 ? kn_opt_const(c, value) : NULL;
    if (!t || t->rank != 1 || k >= t->dims[0] || (t->dtype != KILN_DTYPE_INT64 && t->dtype != KILN_DTYPE_INT32)) {
        *ok = false;
        return 0;
    }
    return t->dtype == KILN_DTYPE_INT64 ? ((const int64_t *)t->data)[k] : ((const int32_t *)t->data)[k];
}

/* Elements [start, start + len * step) of dim `axis` by step: that dim must be one factor. */
static bool take_range(view *v, int64_t axis, int64_t start, int64_t len, int64_t step) {
    if (axis < 0 || axis >= v->rank || v->nf[axis] != 1 || start < 0 || len < 1 || step < 1 ||
        start + (len - 1) * step >= v->size[axis][0])
        return false;
    v->offset += start * v->stride[axis][0];
    v->size[axis][0] = len;
    v->stride[axis][0] *= step;
    return true;
}

/* Output `out` of a Split: the outputs before it (their static shapes) give its start. */
static bool split_forward(const kn_opt_ctx *c, syms *sy, const kn_node *n, int out, view *v) {
    int64_t axis = kn_attr_int(n, "axis", 0), start = 0;
    if (axis < 0) axis += v->rank;
    if (axis < 0 || axis >= v->rank) return false;
    for (int i = 0; i < n->n_outputs; i++) {
        int64_t d[KILN_MAX_RANK];
        int r;
        if (n->outputs[i] < 0 || !known_dims(&c->g->values[n->outputs[i]].type, sy, -1, d, &r) || r != v->rank) return false;
        if (n->outputs[i] == out) return take_range(v, axis, start, d[axis], 1);
        start += d[axis];
    }
    return false;
}

/* A Slice of constant starts, ends, axes and positive steps (opset 10 on: inputs). */
static bool slice_forward(const kn_opt_ctx *c, const kn_node *n, view *v) {
    if (n->opset < 10 || n->n_inputs < 3) return false;
    const kn_tensor *st = kn_opt_const(c, n->inputs[1]);
    if (!st || st->rank != 1) return false;
    const int64_t count = st->dims[0];
    bool ok = true;
    for (int64_t k = 0; k < count && ok; k++) {
        int64_t axis = n->n_inputs > 3 && n->inputs[3] >= 0 ? const_int_at(c, n->inputs[3], k, &ok) : k;
        int64_t step = n->n_inputs > 4 && n->inputs[4] >= 0 ? const_int_at(c, n->inputs[4], k, &ok) : 1;
        int64_t start = const_int_at(c, n->inputs[1], k, &ok), end = const_int_at(c, n->inputs[2], k, &ok);
        if (!ok) return false;
        if (axis < 0) axis += v->rank;
        if (axis < 0 || axis >= v->rank || v->nf[axis] != 1 || step < 1) return false;
        const int64_t dim = v->size[axis][0];
        if (start < 0) start += dim;
        if (end < 0) end += dim;
        start = start < 0 ? 0 : start > dim ? dim : start;
        end = end < 0 ? 0 : end > dim ? dim : end;
        if (end <= start) return false;
        ok = take_range(v, axis, start, (end - start + step - 1) / step, step);
    }
    return ok;
}

/* Applies node (from its input's view to its output's `out`), reading forward. */
static bool apply_forward(const kn_opt_ctx *c, syms *sy, int node, int out, view *v) {
    const kn_node *n = &c->g->nodes[node];
    int64_t od[KILN_MAX_RANK];
    int orank;
    /* an unknown dim of the output is what the others leave where the node keeps the count */
    const bool keeps_count = !kn_opt_is(c, node, "Split") && !kn_opt_is(c, node, "Slice") && !kn_opt_is(c, node, "Gather");
    if (n->n_outputs < 1 || !known_dims(&c->g->values[out].type, sy, keeps_count ? view_count(v) : -1, od, &orank))
        return false;
    if (kn_opt_is(c, node, "Split") || kn_opt_is(c, node, "Slice")) {
        if (!(kn_opt_is(c, node, "Split") ? split_forward(c, sy, n, out, v) : slice_forward(c, n, v)) || v->rank != orank)
            return false;
        for (int k = 0; k < orank; k++)
            if (dim_size(v, k) != od[k]) return false; /* what the output's static shape says */
        return true;
    }
    if (kn_opt_is(c, node, "Transpose")) {
        int perm[KILN_MAX_RANK];
        if (!perm_of(n, v->rank, perm)) return false;
        view t = *v;
        for (int k = 0; k < v->rank; k++) {
            t.nf[k] = v->nf[perm[k]];
            memcpy(t.size[k], v->size[perm[k]], sizeof t.size[k]);
            memcpy(t.stride[k], v->stride[perm[k]], sizeof t.stride[k]);
        }
        *v = t;
        return true;
    }
    if (kn_opt_is(c, node, "Gather")) {
        const kn_tensor *idx = kn_opt_const(c, n->inputs[1]);
        if (!idx || idx->rank != 0 || (idx->dtype != KILN_DTYPE_INT64 && idx->dtype != KILN_DTYPE_INT32)) return false;
        int64_t axis = kn_attr_int(n, "axis", 0);
        if (axis < 0) axis += v->rank;
        if (axis < 0 || axis >= v->rank) return false;
        int64_t i = idx->dtype == KILN_DTYPE_INT64 ? *(const int64_t *)idx->data : *(const int32_t *)idx->data;
        const int64_t n = dim_size(v, (int)axis);
        if (i < 0) i += n;
        if (i < 0 || i >= n) return false;
        for (int f = v->nf[axis] - 1; f >= 0; f--) { /* the index in each factor, inner first */
            v->offset += (i % v->size[axis][f]) * v->stride[axis][f];
            i /= v->size[axis][f];
        }
        for (int k = (int)axis; k + 1 < v->rank; k++) {
            v->nf[k] = v->nf[k + 1];
            memcpy(v->size[k], v->size[k + 1], sizeof v->size[k]);
            memcpy(v->stride[k], v->stride[k + 1], sizeof v->stride[k]);
        }
        v->rank--;
        return v->rank == orank;
    }
    return reshape_view(v, od, orank);
}

/* Undoes node (from its output's view to its input's), reading backward from a written output. */
static bool apply_backward(const kn_opt_ctx *c, syms *sy, int node, view *v) {
    const kn_node *n = &c->g->nodes[node];
    int64_t id[KILN_MAX_RANK];
    int irank;
    if (!known_dims(&c->g->values[n->inputs[0]].type, sy, view_count(v), id, &irank)) return false;
    if (kn_opt_is(c, node, "Transpose")) {
        int perm[KILN_MAX_RANK];
        if (!perm_of(n, irank, perm)) return false;
        view t = *v;
        for (int k = 0; k < irank; k++) {
            t.nf[perm[k]] = v->nf[k];
            memcpy(t.size[perm[k]], v->size[k], sizeof t.size[k]);
            memcpy(t.stride[perm[k]], v->stride[k], sizeof t.stride[k]);
        }
        *v = t;
        return true;
    }
    return reshape_view(v, id, irank);
}

static bool encodable(const view *v) {
    if (v->rank < 1 || v->rank > KN_ATTN_VIEW_MAX_RANK) return false;
    for (int k = 0; k < v->rank; k++)
        if (v->nf[k] != 1) return false;
    return true;
}

static void to_attn_view(const view *v, kn_attn_view *a) {
    memset(a, 0, sizeof *a);
    a->rank = v->rank;
    a->offset = v->offset;
    for (int k = 0; k < v->rank; k++) a->dims[k] = v->size[k][0], a->strides[k] = v->stride[k][0];
}

/* The dim of tensor type t that is symbol name, or -1. */
static int dim_named(const kn_type *t, const char *name) {
    for (int p = 0; t->kind == KN_TYPE_TENSOR && p < t->rank; p++)
        if (t->dims[p].value < 0 && t->dims[p].symbol && !strcmp(t->dims[p].symbol, name)) return p;
    return -1;
}

/* A stride s0 in the first walk and s1 in the second as m times the read tensor's stride of one
 * of its dims (dims rd[walk], rank rr) in both: *s0 becomes KN_ATTN_VIEW_STRIDE_OF(p, m). */
static bool symbolic_stride(int64_t *s0, int64_t s1, int64_t rd[2][KILN_MAX_RANK], int rr) {
    int64_t p0 = 1, p1 = 1; /* the products of the dims after p */
    for (int p = rr - 1; p >= 0; p--) {
        if (p0 > *s0 || p1 > s1) return false;
        if (*s0 % p0 == 0 && s1 % p1 == 0 && *s0 / p0 == s1 / p1) {
            *s0 = KN_ATTN_VIEW_STRIDE_OF(p, *s0 / p0);
            return true;
        }
        p0 *= rd[0][p], p1 *= rd[1][p];
    }
    return false;
}

/* The first s nodes of a chain of view nodes (chain[k] making made[k]), walked from the tensor
 * `from`: forward from an input to the operand, or backward from the last value to the output. */
typedef struct chain_walk {
    const int *chain, *made;
    int s, from;
    bool forward;
} chain_walk;

static bool walk_chain(const kn_opt_ctx *c, const chain_walk *w, syms *sy, view *v) {
    int64_t dims[KILN_MAX_RANK];
    int rank;
    if (!known_dims(&c->g->values[w->from].type, sy, -1, dims, &rank)) return false;
    contiguous(v, dims, rank);
    for (int k = w->s - 1; k >= 0; k--)
        if (!(w->forward ? apply_forward(c, sy, w->chain[k], w->made[k], v) : apply_backward(c, sy, w->chain[k], v)))
            return false;
    return true;
}

/* The chain walked with both sets of stand-ins as one view of the tensor it starts from: symbolic
 * dims as KN_ATTN_VIEW_SYMBOLIC(p) of that tensor, strides of a symbolic size as
 * KN_ATTN_VIEW_STRIDE_OF; false where a walk fails, the view is not one a kernel takes, or its
 * offset depends on a symbolic size. */
static bool both_walks(const kn_opt_ctx *c, const chain_walk *w, kn_attn_view *out) {
    const kn_type *reads = &c->g->values[w->from].type;
    syms sy[2] = {{.round = 0}, {.round = 1}};
    view v[2];
    if (!walk_chain(c, w, &sy[0], &v[0]) || !walk_chain(c, w, &sy[1], &v[1]) || !encodable(&v[0]) || !encodable(&v[1]))
        return false;
    kn_attn_view a[2];
    to_attn_view(&v[0], &a[0]);
    to_attn_view(&v[1], &a[1]);
    if (a[0].rank != a[1].rank || a[0].offset != a[1].offset || sy[0].n != sy[1].n) return false;
    int64_t rd[2][KILN_MAX_RANK]; /* the read tensor's dims in each walk */
    int rr = 0;
    syms again[2] = {{.round = 0}, {.round = 1}};
    if (!known_dims(reads, &again[0], -1, rd[0], &rr) || !known_dims(reads, &again[1], -1, rd[1], &rr)) return false;
    for (int k = 0; k < a[0].rank; k++) {
        if (a[0].strides[k] != a[1].strides[k] && !symbolic_stride(&a[0].strides[k], a[1].strides[k], rd, rr))
            return false;
        if (a[0].dims[k] == a[1].dims[k]) {
            if (a[0].dims[k] >= STAND_IN_MIN) return false; /* a product of stand-ins */
            continue;
        }
        int j = 0;
        while (j < sy[0].n && (a[0].dims[k] != stand_in[0][j] || a[1].dims[k] != stand_in[1][j])) j++;
        const int p = j < sy[0].n ? dim_named(reads, sy[0].name[j]) : -1;
        if (p < 0) return false;
        a[0].dims[k] = KN_ATTN_VIEW_SYMBOLIC(p);
    }
    *out = a[0];
    return true;
}

/* Operand value x as a view of the farthest tensor its chain of view nodes starts from: *src and
 * the view; false when no producer of x joins. */
static bool input_view(const kn_opt_ctx *c, int x, int *src, int *reader, kn_attn_view *out) {
    int chain[MAX_CHAIN], made[MAX_CHAIN], n = 0; /* made[k]: chain[k]'s output on the way to x */
    for (int v = x; n < MAX_CHAIN;) {
        int p = kn_opt_producer(c, v);
        if (!is_view_op(c, p, true) || c->g->nodes[p].n_inputs < 1) break;
        made[n] = v;
        chain[n++] = p;
        v = c->g->nodes[p].inputs[0];
    }
    for (int s = n; s >= 1; s--) { /* the longest chain that is a view */
        const chain_walk w = {chain, made, s, c->g->nodes[chain[s - 1]].inputs[0], true};
        if (both_walks(c, &w, out)) {
            *src = w.from;
            *reader = chain[s - 1];
            return true;
        }
    }
    return false;
}

/* The output y followed through its only readers that are view nodes: the last value *dst, the
 * nodes (to remove) and y as a view of it; false when none joins. */
static bool output_view(const kn_opt_ctx *c, int y, int *dst, int *nodes, int *n_nodes, kn_attn_view *out) {
    int chain[MAX_CHAIN], n = 0;
    for (int v = y; n < MAX_CHAIN;) {
        int r = kn_opt_only_consumer(c, v);
        if (!is_view_op(c, r, false) || c->g->nodes[r].inputs[0] != v || c->g->nodes[r].n_outputs != 1) break;
        chain[n++] = r;
        v = c->g->nodes[r].outputs[0];
    }
    for (int t = n; t >= 1; t--) {
        const chain_walk w = {chain, NULL, t, c->g->nodes[chain[t - 1]].outputs[0], false};
        if (both_walks(c, &w, out)) {
            *dst = w.from;
            for (int k = 0; k < t; k++) nodes[k] = chain[k];
            *n_nodes = t;
            return true;
        }
    }
    return false;
}

/* Y's tensor's shape as y_shape: a symbolic dim as the dim of an operand's tensor (in[0..2]) that
 * is the same symbol; false when none is. */
static bool y_shape_of(const kn_opt_ctx *c, int y, const int *in, int64_t *shape, int *rank) {
    const kn_type *t = &c->g->values[y].type;
    if (t->kind != KN_TYPE_TENSOR || t->rank < 0) return false;
    for (int k = 0; k < t->rank; k++) {
        const kn_dim *d = &t->dims[k];
        shape[k] = d->value;
        if (d->value >= 0) continue;
        bool found = false;
        for (int i = 0; i < 3 && !found && d->symbol; i++) {
            const int p = dim_named(&c->g->values[in[i]].type, d->symbol);
            if (p >= 0) shape[k] = KN_ATTN_Y_SHAPE_OF_INPUT(i, p), found = true;
        }
        if (!found) return false;
    }
    *rank = t->rank;
    return true;
}

/* ---- Q, K and V projections of one input as one product ----
 *
 * When the three operands are views of MatMul(X, W) (+ a constant bias) of the same X with
 * constant weights, one MatMul(X, [Wq Wk Wv]) (+ [bq bk bv]) makes them all (one launch, a wider
 * product) and the views read its column ranges. */

typedef struct projection {
    int matmul, add; /* nodes (add -1 without a bias) */
    int x;
    const kn_tensor *w, *b;
} projection;

static bool projection_of(const kn_opt_ctx *c, int v, projection *p) {
    int node = kn_opt_producer(c, v);
    p->add = -1;
    p->b = NULL;
    if (kn_opt_is(c, node, "Add") && c->g->nodes[node].n_inputs == 2) {
        for (int k = 0; k < 2; k++) {
            int a = c->g->nodes[node].inputs[k], bb = c->g->nodes[node].inputs[1 - k];
            const kn_tensor *b = kn_opt_const(c, bb);
            int mm = kn_opt_producer(c, a);
            if (b && kn_opt_is(c, mm, "MatMul") && kn_opt_only_consumer(c, a) == node) {
                p->add = node;
                p->b = b;
                node = mm;
                break;
            }
        }
        if (p->add < 0) return false;
    }
    if (!kn_opt_is(c, node, "MatMul") || c->g->nodes[node].n_inputs != 2) return false;
    p->matmul = node;
    p->x = c->g->nodes[node].inputs[0];
    p->w = kn_opt_const(c, c->g->nodes[node].inputs[1]);
    if (!p->w || p->w->rank != 2 || p->w->dtype != KILN_DTYPE_FLOAT) return false;
    if (p->b && (p->b->dtype != KILN_DTYPE_FLOAT || p->b->rank != 1 || p->b->dims[0] != p->w->dims[1])) return false;
    return true;
}

/* A view over a tensor whose rows (last dim) have n elements, moved onto the columns [off, off + n)
 * of a tensor whose rows have n_total: every stride either whole rows or steps inside one row. */
static bool rebase_rows(kn_attn_view *v, int64_t n, int64_t n_total, int64_t off) {
    int64_t in_row = v->offset % n;
    kn_attn_view r = *v;
    r.offset = v->offset / n * n_total + off + in_row;
    for (int k = 0; k < v->rank; k++) {
        if (v->dims[k] == 0 || v->dims[k] == 1) continue;
        /* a stride of a symbolic size steps whole rows (the dims after its dim take in the last):
         * read from the merged tensor it steps its rows */
        if (v->strides[k] < 0) continue;
        if (v->strides[k] % n == 0) r.strides[k] = v->strides[k] / n * n_total;
        else if (v->dims[k] < 0) return false; /* a symbolic dim stepping inside a row */
        else in_row += (v->dims[k] - 1) * v->strides[k];
    }
    if (in_row >= n) return false;
    *v = r;
    return true;
}

/* src[i]: the projections the attention node `attn` reads through views av[i]; chain_reader[i]:
 * the first node of the chain the views replaced (dead to be), the projection's only other reader. */
static kiln_status merge_projections(kn_opt_ctx *c, int attn, const int *chain_reader, int *src, kn_attn_view *av,
                                     bool *merged) {
    *merged = false;
    projection p[3];
    for (int i = 0; i < 3; i++) {
        const int readers[2] = {chain_reader[i], attn};
        if (!projection_of(c, src[i], &p[i]) || !kn_opt_used_only_by(c, src[i], readers, 2)) return KILN_OK;
        if (p[i].x != p[0].x || p[i].w->dims[0] != p[0].w->dims[0]) return KILN_OK;
        for (int j = 0; j < i; j++)
            if (src[j] == src[i]) return KILN_OK;
    }
    const int64_t K = p[0].w->dims[0];
    int64_t n[3] = {p[0].w->dims[1], p[1].w->dims[1], p[2].w->dims[1]}, nt = n[0] + n[1] + n[2];
    kn_attn_view rebased[3];
    for (int i = 0, off = 0; i < 3; off += (int)n[i], i++) {
        rebased[i] = av[i];
        if (!rebase_rows(&rebased[i], n[i], nt, off)) return KILN_OK;
    }
    kn_tensor *w = NULL, *b = NULL;
    int64_t wd[2] = {K, nt}, bd[1] = {nt};
    KN_TRY(kn_tensor_new(KILN_DTYPE_FLOAT, 2, wd, &w));
    const bool bias = p[0].b || p[1].b || p[2].b;
    if (bias && kn_tensor_new(KILN_DTYPE_FLOAT, 1, bd, &b) != KILN_OK) {
        kn_tensor_free(w);
        return KN_OOM();
    }
    for (int i = 0, off = 0; i < 3; off += (int)n[i], i++) {
        const float *wi = p[i].w->data;
        for (int64_t r = 0; r < K; r++) memcpy((float *)w->data + r * nt + off, wi + r * n[i], sizeof(float) * (size_t)n[i]);
        if (b) {
            if (p[i].b) memcpy((float *)b->data + off, p[i].b->data, sizeof(float) * (size_t)n[i]);
            else memset((float *)b->data + off, 0, sizeof(float) * (size_t)n[i]);
        }
    }
    /* the merged product's type, known now: the target check of the node that reads it needs it */
    kn_type mt = c->g->values[p[0].x].type;
    if (mt.kind != KN_TYPE_TENSOR || mt.rank < 1) {
        kn_tensor_free(w);
        kn_tensor_free(b);
        return KILN_OK;
    }
    mt.dtype = KILN_DTYPE_FLOAT;
    mt.dims[mt.rank - 1] = (kn_dim){nt, NULL};
    int wv = kn_opt_new_const(c, "qkv_weight", w);
    if (wv < 0) return KN_OOM();
    int bv = -1;
    if (b && (bv = kn_opt_new_const(c, "qkv_bias", b)) < 0) return KN_OOM();
    kn_opt_proto pr;
    kn_proto_init(&pr, "", "MatMul");
    kn_proto_in(&pr, p[0].x);
    kn_proto_in(&pr, wv);
    int mv = kn_opt_new_value(c, "qkv", &mt);
    if (mv < 0) return KN_OOM();
    kn_proto_out(&pr, mv);
    int made;
    KN_TRY(kn_opt_emit(c, &pr, p[0].matmul, &made));
    if (made < 0) return KILN_OK;
    int out = mv;
    if (bv >= 0) {
        kn_opt_proto pa;
        kn_proto_init(&pa, "", "Add");
        kn_proto_in(&pa, mv);
        kn_proto_in(&pa, bv);
        if ((out = kn_opt_new_value(c, "qkv_biased", &mt)) < 0) return KN_OOM();
        kn_proto_out(&pa, out);
        KN_TRY(kn_opt_emit(c, &pa, p[0].add >= 0 ? p[0].add : p[0].matmul, &made));
        if (made < 0) return KILN_OK; /* the lone MatMul goes as dead */
    }
    for (int i = 0; i < 3; i++) {
        src[i] = out;
        av[i] = rebased[i];
    }
    *merged = true;
    return KILN_OK;
}

/* ---- Transposes of rows moved onto the views ----
 *
 * A product whose B is one matrix treats the rows of A (all dims but the last) one by one, so a
 * Transpose that keeps the last dim commutes with it: MatMul(Transpose(x), W) = Transpose(MatMul(x,
 * W)). torch's batch-first MultiheadAttention puts such Transposes (batch and sequence swapped)
 * before its packed Q/K/V projection and after its output projection (a Gemm over the rows, then
 * Reshape and Transpose back); moved to the attention's side of the product they join the operand
 * chains and become part of the views. */

static bool rows_perm(const kn_opt_ctx *c, int node, int rank, int64_t *perm64) {
    int perm[KILN_MAX_RANK];
    if (!kn_opt_is(c, node, "Transpose") || rank < 2 || !perm_of(&c->g->nodes[node], rank, perm) ||
        perm[rank - 1] != rank - 1)
        return false;
    for (int k = 0; k < rank; k++) perm64[k] = perm[k];
    return true;
}

/* The value the operand chain of x starts from (through view nodes only). */
static int chain_source(const kn_opt_ctx *c, int x) {
    for (int n = 0; n < MAX_CHAIN; n++) {
        int p = kn_opt_producer(c, x);
        if (!is_view_op(c, p, true) || c->g->nodes[p].n_inputs < 1) break;
        x = c->g->nodes[p].inputs[0];
    }
    return x;
}

static kiln_status new_shape_const(kn_opt_ctx *c, const int64_t *dims, int rank, int *out) {
    kn_tensor *t = NULL;
    int64_t n = rank;
    KN_TRY(kn_tensor_new(KILN_DTYPE_INT64, 1, &n, &t));
    memcpy(t->data, dims, sizeof(int64_t) * (size_t)rank);
    *out = kn_opt_new_const(c, "shape", t);
    return *out < 0 ? KN_OOM() : KILN_OK;
}

/* Input side: src = [Add(] MatMul(Transpose_p(x), W) [, b)], read only by view nodes, becomes
 * Transpose_p([Add(] MatMul(x, W) [, b)]) (the old Transpose goes with its last reader). */
static kiln_status commute_input(kn_opt_ctx *c, int src, bool *changed) {
    projection pj;
    if (!projection_of(c, src, &pj)) return KILN_OK;
    const int t = kn_opt_producer(c, pj.x);
    int64_t perm[KILN_MAX_RANK], xd[KILN_MAX_RANK];
    int xr;
    if (t < 0 || kn_opt_pinned(c, src)) return KILN_OK;
    /* a Transpose that other products read too stays for them until they are moved as well */
    const bool last_reader = kn_opt_only_consumer(c, pj.x) == pj.matmul && !kn_opt_pinned(c, pj.x);
    const int x = c->g->nodes[t].inputs[0];
    if (!static_dims(&c->g->values[x].type, xd, &xr) || xr < 3 || !rows_perm(c, t, xr, perm)) return KILN_OK;
    for (int r = c->cons_start[src]; r < c->cons_start[src + 1]; r++)
        if (!is_view_op(c, c->cons[r], true)) return KILN_OK;
    if (pj.add >= 0 && kn_opt_pinned(c, c->g->nodes[pj.matmul].outputs[0])) return KILN_OK;
    kn_type mt = c->g->values[x].type;
    mt.dims[xr - 1] = (kn_dim){pj.w->dims[1], NULL};
    mt.dtype = c->g->values[src].type.dtype;
    int mv = kn_opt_new_value(c, "rows_product", &mt), made;
    if (mv < 0) return KN_OOM();
    kn_opt_proto pm;
    kn_proto_init(&pm, "", "MatMul");
    kn_proto_in(&pm, x);
    kn_proto_in(&pm, c->g->nodes[pj.matmul].inputs[1]);
    kn_proto_out(&pm, mv);
    KN_TRY(kn_opt_emit(c, &pm, pj.matmul, &made));
    if (made < 0) return KILN_OK;
    int last = mv;
    if (pj.add >= 0) {
        const kn_node *a = &c->g->nodes[pj.add];
        int bias = a->inputs[0] == c->g->nodes[pj.matmul].outputs[0] ? a->inputs[1] : a->inputs[0];
        if ((last = kn_opt_new_value(c, "rows_biased", &mt)) < 0) return KN_OOM();
        kn_opt_proto pa;
        kn_proto_init(&pa, "", "Add");
        kn_proto_in(&pa, mv);
        kn_proto_in(&pa, bias);
        kn_proto_out(&pa, last);
        KN_TRY(kn_opt_emit(c, &pa, pj.add, &made));
        if (made < 0) return KILN_OK; /* the new product goes as dead */
    }
    kn_opt_proto pt;
    kn_proto_init(&pt, "", "Transpose");
    kn_proto_in(&pt, last);
    kn_proto_out(&pt, src);
    kn_proto_ints(&pt, "perm", perm, xr);
    KN_TRY(kn_opt_emit(c, &pt, t, &made));
    if (made < 0) return KILN_OK;
    if (last_reader) kn_opt_kill(c, t);
    kn_opt_kill(c, pj.matmul);
    if (pj.add >= 0) kn_opt_kill(c, pj.add);
    kn_opt_note(c, "Transpose moved before the product onto the views");
    *changed = true;
    return kn_opt_refresh(c);
}

/* Output side: y's chain of view nodes ends in Y2 [R, K], read only by P = Gemm (not transposing
 * A) or MatMul with one matrix B, whose output goes only through Reshape to [d..., N] and then a
 * Transpose_p keeping the last dim, to U. The rows are permuted before the product instead:
 * Reshape(Y2, [d..., K]) -> Transpose_p -> Reshape([R, K]) -> P -> Reshape(U's shape) -> U. */
static kiln_status commute_output(kn_opt_ctx *c, int y, bool *changed) {
    int v = y;
    for (int n = 0; n < MAX_CHAIN; n++) {
        int r = kn_opt_only_consumer(c, v);
        if (!is_view_op(c, r, false) || c->g->nodes[r].inputs[0] != v || c->g->nodes[r].n_outputs != 1) break;
        v = c->g->nodes[r].outputs[0];
    }
    const int P = kn_opt_only_consumer(c, v);
    int64_t yd[KILN_MAX_RANK], zd[KILN_MAX_RANK], rd[KILN_MAX_RANK], ud[KILN_MAX_RANK], perm[KILN_MAX_RANK];
    int yr, zr, rr, ur;
    if (P < 0 || kn_opt_pinned(c, v) || c->g->nodes[P].inputs[0] != v || !static_dims(&c->g->values[v].type, yd, &yr) ||
        yr != 2)
        return KILN_OK;
    const kn_node *pn = &c->g->nodes[P];
    if (kn_opt_is(c, P, "Gemm")) {
        if (kn_attr_int(pn, "transA", 0) != 0) return KILN_OK;
        if (pn->n_inputs > 2 && pn->inputs[2] >= 0) { /* C broadcast over the rows, or the rows' order matters */
            const kn_type *ct = &c->g->values[pn->inputs[2]].type;
            if (ct->kind != KN_TYPE_TENSOR || ct->rank > 2 || (ct->rank == 2 && ct->dims[0].value != 1)) return KILN_OK;
        }
    } else if (kn_opt_is(c, P, "MatMul")) {
        const kn_type *bt = &c->g->values[pn->inputs[1]].type;
        if (bt->kind != KN_TYPE_TENSOR || bt->rank != 2) return KILN_OK;
    } else
        return KILN_OK;
    const int z = pn->outputs[0], rs = kn_opt_only_consumer(c, z);
    if (pn->n_outputs != 1 || kn_opt_pinned(c, z) || !kn_opt_is(c, rs, "Reshape") || c->g->nodes[rs].inputs[0] != z ||
        !static_dims(&c->g->values[z].type, zd, &zr))
        return KILN_OK;
    const int rv = c->g->nodes[rs].outputs[0], tr = kn_opt_only_consumer(c, rv);
    if (kn_opt_pinned(c, rv) || tr < 0 || c->g->nodes[tr].inputs[0] != rv || !static_dims(&c->g->values[rv].type, rd, &rr) ||
        rr < 3 || rd[rr - 1] != zd[1] || !rows_perm(c, tr, rr, perm))
        return KILN_OK;
    const int u = c->g->nodes[tr].outputs[0];
    if (!static_dims(&c->g->values[u].type, ud, &ur)) return KILN_OK;
    /* the rows of Y2 as [d..., K], permuted, flattened back */
    int64_t split[KILN_MAX_RANK], perm_split[KILN_MAX_RANK];
    for (int k = 0; k + 1 < rr; k++) split[k] = rd[k];
    split[rr - 1] = yd[1];
    for (int k = 0; k < rr; k++) perm_split[k] = split[perm[k]];
    int s1, s2, s3;
    KN_TRY(new_shape_const(c, split, rr, &s1));
    KN_TRY(new_shape_const(c, yd, 2, &s2));
    KN_TRY(new_shape_const(c, ud, ur, &s3));
    kn_type t1 = c->g->values[v].type, t2 = t1, t3 = t1, tz = c->g->values[z].type;
    t1.rank = t2.rank = rr;
    for (int k = 0; k < rr; k++) t1.dims[k] = (kn_dim){split[k], NULL}, t2.dims[k] = (kn_dim){perm_split[k], NULL};
    int v1 = kn_opt_new_value(c, "rows", &t1), v2 = kn_opt_new_value(c, "rows_permuted", &t2);
    int v3 = kn_opt_new_value(c, "rows_flat", &t3), zv = kn_opt_new_value(c, "rows_product", &tz);
    if (v1 < 0 || v2 < 0 || v3 < 0 || zv < 0) return KN_OOM();
    kn_opt_proto p1, p2, p3, pp, p4;
    int made;
    kn_proto_init(&p1, "", "Reshape");
    kn_proto_in(&p1, v);
    kn_proto_in(&p1, s1);
    kn_proto_out(&p1, v1);
    KN_TRY(kn_opt_emit(c, &p1, rs, &made));
    if (made < 0) return KILN_OK;
    kn_proto_init(&p2, "", "Transpose");
    kn_proto_in(&p2, v1);
    kn_proto_out(&p2, v2);
    kn_proto_ints(&p2, "perm", perm, rr);
    KN_TRY(kn_opt_emit(c, &p2, tr, &made));
    if (made < 0) return KILN_OK;
    kn_proto_init(&p3, "", "Reshape");
    kn_proto_in(&p3, v2);
    kn_proto_in(&p3, s2);
    kn_proto_out(&p3, v3);
    KN_TRY(kn_opt_emit(c, &p3, rs, &made));
    if (made < 0) return KILN_OK;
    kn_proto_init(&pp, "", c->g->nodes[P].op_type);
    kn_proto_in(&pp, v3);
    for (int k = 1; k < c->g->nodes[P].n_inputs; k++) kn_proto_in(&pp, c->g->nodes[P].inputs[k]);
    kn_proto_out(&pp, zv);
    static const char *const gemm_attrs[] = {"alpha", "beta", "transA", "transB"};
    for (int k = 0; k < 4; k++) kn_proto_copy_attr(&pp, c, P, gemm_attrs[k]);
    KN_TRY(kn_opt_emit(c, &pp, P, &made));
    if (made < 0) return KILN_OK;
    kn_proto_init(&p4, "", "Reshape");
    kn_proto_in(&p4, zv);
    kn_proto_in(&p4, s3);
    kn_proto_out(&p4, u);
    KN_TRY(kn_opt_emit(c, &p4, tr, &made));
    if (made < 0) return KILN_OK;
    kn_opt_kill(c, P);
    kn_opt_kill(c, rs);
    kn_opt_kill(c, tr);
    kn_opt_note(c, "Transpose moved before the product onto the output view");
    *changed = true;
    return kn_opt_refresh(c);
}

static kiln_status commute_transposes(kn_opt_ctx *c, int node) {
    bool changed = false;
    for (int i = 0; i < 3; i++) {
        const kn_node *N = &c->g->nodes[node];
        if (i < N->n_inputs && N->inputs[i] >= 0) KN_TRY(commute_input(c, chain_source(c, N->inputs[i]), &changed));
    }
    const kn_node *N = &c->g->nodes[node];
    if (N->n_outputs == 1 && !kn_opt_pinned(c, N->outputs[0])) KN_TRY(commute_output(c, N->outputs[0], &changed));
    (void)changed;
    return KILN_OK;
}

static kiln_status fold(kn_opt_ctx *c, int node) {
    for (int i = 0; i < 4; i++)
        if (kn_node_attr(&c->g->nodes[node], kn_attn_view_name(i))) return KILN_OK; /* folded already */
    KN_TRY(commute_transposes(c, node));
    const kn_node *N = &c->g->nodes[node];
    if (N->n_inputs < 3 || N->n_outputs != 1) return KILN_OK;
    int in[3], reader[3];
    bool has[4] = {false}, merged = false;
    kn_attn_view av[4];
    for (int i = 0; i < 3; i++) {
        in[i] = N->inputs[i];
        has[i] = input_view(c, N->inputs[i], &in[i], &reader[i], &av[i]);
    }
    int y = N->outputs[0], out_nodes[MAX_CHAIN], n_out = 0, y_rank = 0;
    int64_t shape[KILN_MAX_RANK];
    if (!kn_opt_pinned(c, y) && output_view(c, y, &y, out_nodes, &n_out, &av[3]))
        has[3] = y_shape_of(c, y, in, shape, &y_rank);
    if (!has[3]) y = N->outputs[0], n_out = 0;
    if (!has[0] && !has[1] && !has[2] && !has[3]) return KILN_OK;

    kn_opt_proto pr;
    kn_proto_init(&pr, "kiln", "Attention");
    for (int i = 0; i < 3; i++) kn_proto_in(&pr, in[i]);
    if (N->n_inputs > 3) kn_proto_in(&pr, N->inputs[3]);
    kn_proto_out(&pr, y);
    kn_proto_copy_attr(&pr, c, node, "scale");
    kn_proto_copy_attr(&pr, c, node, "nan_to_zero");
    int64_t ints[4][2 + 2 * KN_ATTN_VIEW_MAX_RANK];
    for (int i = 0; i < 4; i++)
        if (has[i]) kn_proto_ints(&pr, kn_attn_view_name(i), ints[i], kn_attn_view_encode(&av[i], ints[i]));
    if (has[3]) kn_proto_ints(&pr, "y_shape", shape, y_rank);
    int made;
    KN_TRY(kn_opt_emit(c, &pr, node, &made));
    if (made < 0) return KILN_OK;
    kn_opt_kill(c, node);
    for (int k = 0; k < n_out; k++) kn_opt_kill(c, out_nodes[k]);
    /* the node the target took: its three projections as one product, when they are (its
     * operands then read the merged product through rebased views) */
    if (has[0] && has[1] && has[2]) {
        KN_TRY(kn_opt_refresh(c));
        KN_TRY(merge_projections(c, made, reader, in, av, &merged));
        if (merged) {
            for (int i = 0; i < 3; i++) {
                c->g->nodes[made].inputs[i] = in[i];
                KN_TRY(kn_opt_set_ints(c, made, kn_attn_view_name(i), ints[i], kn_attn_view_encode(&av[i], ints[i])));
            }
        }
    }
    for (int i = 0; i < 3; i++)
        if (has[i]) kn_opt_note(c, i == 0 ? "Q read in place" : i == 1 ? "K read in place" : "V read in place");
    if (has[3]) kn_opt_note(c, "output written in place");
    if (merged) kn_opt_note(c, "Q, K and V projections as one product");
    return kn_opt_refresh(c);
}

kiln_status kn_pass_fold_attention_views(kn_opt_ctx *c) {
    int n = c->g->n_nodes; /* nodes the pass adds are done */
    for (int i = 0; i < n; i++)
        if (kn_opt_is_in(c, i, "kiln", "Attention")) KN_TRY(fold(c, i));
    return KILN_OK;
}

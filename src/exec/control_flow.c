/* If, Loop and Scan for every backend (control_flow.h): the operators' semantics over a backend's
 * mover, and the host's mover. */
#include "exec/control_flow.h"

#include "exec/exec.h"
#include "util/status.h"

#include <stdlib.h>
#include <string.h>

#define KN_CF_MAX_IO 256

static const kn_graph *graph_attr(const kn_node *n, const char *name) {
    const kn_attr *a = kn_node_attr(n, name);
    return a && a->type == KN_ATTR_GRAPH ? a->g : NULL;
}

static bool is_op(const kn_node *n, const char *op) { return !*n->domain && !strcmp(n->op_type, op); }

kiln_status kn_cf_prepare(const kn_node *n, void *params) {
    kn_cf_prm *p = params;
    memset(p, 0, sizeof *p);
    p->then_branch = graph_attr(n, "then_branch");
    p->else_branch = graph_attr(n, "else_branch");
    p->body = graph_attr(n, "body");
    p->num_scan_inputs = kn_attr_int(n, "num_scan_inputs", 0);
    const bool v8 = n->opset < 9;
    if (!v8) p->in_axes = kn_attr_ints(n, "scan_input_axes", &p->n_in_axes);
    p->in_dirs = kn_attr_ints(n, v8 ? "directions" : "scan_input_directions", &p->n_in_dirs);
    if (!v8) p->out_axes = kn_attr_ints(n, "scan_output_axes", &p->n_out_axes);
    if (!v8) p->out_dirs = kn_attr_ints(n, "scan_output_directions", &p->n_out_dirs);
    return KILN_OK;
}

int kn_cf_host_body_inputs(const kn_node *n) { return is_op(n, "Loop") ? 2 : 0; }
int kn_cf_host_read_body_outputs(const kn_node *n) { return is_op(n, "Loop") ? 1 : 0; }

void kn_cf_set_output(kn_kernel_ctx *c, int i, kn_tensor *t) {
    if (i >= c->n_outputs || c->node->outputs[i] < 0) {
        kn_tensor_free(t);
        return;
    }
    kn_tensor_free(c->out[i]);
    c->out[i] = t;
}

/* A mover's failure, prefixed with the node and what it was doing. */
static kiln_status moved(kn_kernel_ctx *c, kiln_status st, const char *what) {
    if (st == KILN_OK) return st;
    char lbl[256];
    return kn_error_prefix(st, "%s: %s: ", kn_node_label(c->node, lbl, sizeof lbl), what);
}

/* The one element of a condition or trip count, on the host. */
static kiln_status read_scalar(kn_kernel_ctx *c, const kn_cf_mover *m, const kn_tensor *t, const char *what,
                               int64_t *out) {
    if (t->kind != KN_VALUE_TENSOR || kn_tensor_count(t) != 1) {
        char d[256];
        return kn_kernel_error(c, KILN_ERR_SHAPE, "%s must hold exactly one element; it is %s", what,
                               kn_tensor_describe(t, d, sizeof d));
    }
    return moved(c, m->read_i64(m->state, t, 0, out), what);
}

static int64_t inner_count(const kn_tensor *t, int axis) {
    int64_t n = 1;
    for (int d = axis + 1; d < t->rank; d++) n *= t->dims[d];
    return n;
}
static int64_t outer_count(const kn_tensor *t, int axis) {
    int64_t n = 1;
    for (int d = 0; d < axis; d++) n *= t->dims[d];
    return n;
}

/* The slice t[..., i, ...] along axis as a new tensor of rank - 1. */
static kiln_status take_slice(kn_kernel_ctx *c, const kn_cf_mover *m, const kn_tensor *t, int axis, int64_t i,
                              kn_tensor **out) {
    int64_t dims[KILN_MAX_RANK];
    int r = 0;
    for (int d = 0; d < t->rank; d++)
        if (d != axis) dims[r++] = t->dims[d];
    *out = NULL;
    KN_TRY(moved(c, m->new_tensor(m->state, t->dtype, r, dims, out), "a slice of a scan input"));
    int64_t inner = inner_count(t, axis), n = t->dims[axis];
    kiln_status st = m->copy_rows(m->state, *out, 0, inner, t, i * inner, n * inner, inner, outer_count(t, axis));
    if (st != KILN_OK) {
        kn_tensor_free(*out);
        *out = NULL;
    }
    return moved(c, st, "a slice of a scan input");
}

kiln_status kn_cf_stack(kn_kernel_ctx *c, const kn_cf_mover *m, kn_tensor *const *items, int64_t n, int axis,
                        int reverse, kiln_dtype dtype, kn_tensor **out) {
    int64_t dims[KILN_MAX_RANK];
    const kn_tensor *first = n ? items[0] : NULL;
    int rank = first ? first->rank + 1 : 1;
    *out = NULL;
    if (rank > KILN_MAX_RANK) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "stacked rank %d is too large", rank);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "stacking axis out of range");
    for (int d = 0, k = 0; d < rank; d++) dims[d] = d == axis ? n : (first ? first->dims[k++] : 0);
    for (int64_t i = 0; i < n; i++) {
        if (items[i]->kind != KN_VALUE_TENSOR)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "iteration %lld gives a scan output that is not a tensor",
                                   (long long)i);
        if (i && (items[i]->rank != first->rank || items[i]->dtype != first->dtype ||
                  memcmp(items[i]->dims, first->dims, sizeof(int64_t) * (size_t)first->rank)))
            return kn_kernel_error(c, KILN_ERR_SHAPE,
                                   "iteration %lld gives a scan output of another shape or type than iteration 0",
                                   (long long)i);
    }
    KN_TRY(moved(c, m->new_tensor(m->state, first ? first->dtype : dtype, rank, dims, out), "a stacked scan output"));
    int64_t inner = 1, outer = 1;
    for (int d = axis + 1; d < rank; d++) inner *= dims[d];
    for (int d = 0; d < axis; d++) outer *= dims[d];
    kiln_status st = KILN_OK;
    for (int64_t i = 0; i < n && st == KILN_OK; i++) {
        const kn_tensor *src = items[reverse ? n - 1 - i : i];
        st = m->copy_rows(m->state, *out, i * inner, n * inner, src, 0, inner, inner, outer);
    }
    if (st != KILN_OK) {
        kn_tensor_free(*out);
        *out = NULL;
    }
    return moved(c, st, "a stacked scan output");
}

/* ------------------------------------------------------------------ If */

kiln_status kn_cf_if(kn_kernel_ctx *c, const kn_cf_mover *m) {
    const kn_tensor *cond = c->in[0];
    if (!cond) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "the condition is missing");
    int64_t v = 0;
    KN_TRY(read_scalar(c, m, cond, "the condition", &v));
    const char *which = v ? "then_branch" : "else_branch";
    KN_CTX_PRM(c, kn_cf_prepare, kn_cf_prm, prm);
    const kn_graph *g = v ? prm->then_branch : prm->else_branch;
    if (!g) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "%s is not a graph", which);
    if (g->n_outputs > KN_CF_MAX_IO)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "more than %d branch outputs", KN_CF_MAX_IO);
    kn_tensor *outs[KN_CF_MAX_IO];
    KN_TRY(kn_exec_subgraph(c, g, NULL, 0, outs, g->n_outputs));
    kiln_status st = KILN_OK;
    for (int o = 0; o < g->n_outputs; o++) {
        kn_tensor *t = NULL;
        if (st == KILN_OK) {
            st = moved(c, m->adopt(m->state, outs[o], &t), "a branch output");
            if (st == KILN_OK) kn_cf_set_output(c, o, t);
        } else {
            kn_tensor_free(outs[o]);
        }
    }
    return st;
}

/* ------------------------------------------------------------------ Loop */

kiln_status kn_cf_loop(kn_kernel_ctx *c, const kn_cf_mover *m) {
    KN_CTX_PRM(c, kn_cf_prepare, kn_cf_prm, prm);
    const kn_graph *body = prm->body;
    if (!body) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "the body is not a graph");
    int n_carried = c->n_inputs - 2, n_scan = body->n_outputs - 1 - n_carried;
    if (n_carried < 0 || n_scan < 0)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "the body gives %d outputs for %d loop-carried values",
                               body->n_outputs, n_carried);
    int64_t max_trip = INT64_MAX, cv = 1;
    if (c->in[0]) KN_TRY(read_scalar(c, m, c->in[0], "the trip count M", &max_trip));
    if (c->n_inputs > 1 && c->in[1]) KN_TRY(read_scalar(c, m, c->in[1], "the condition", &cv));
    int cond = cv != 0;
    kn_tensor **state = calloc((size_t)n_carried + 1, sizeof *state);
    kn_tensor **outs = calloc((size_t)body->n_outputs + 1, sizeof *outs);
    kn_tensor **args = calloc((size_t)n_carried + 2, sizeof *args);
    kn_tensor ***scans = calloc((size_t)n_scan + 1, sizeof *scans);
    int64_t n_iter = 0, cap = 0;
    kn_tensor *iter_t = NULL, *cond_t = NULL;
    kiln_status st = KILN_OK;
    if (!state || !outs || !args || !scans) {
        st = KN_OOM();
        goto done;
    }
    /* the iteration number and the condition the body is given are host values, set here */
    if ((st = kn_tensor_new(KILN_DTYPE_INT64, 0, NULL, &iter_t)) != KILN_OK) goto done;
    if ((st = kn_tensor_new(KILN_DTYPE_BOOL, 0, NULL, &cond_t)) != KILN_OK) goto done;
    for (int i = 0; i < n_carried; i++) {
        if (!c->in[i + 2]) {
            st = kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "loop-carried value %d is missing", i);
            goto done;
        }
        if ((st = moved(c, m->clone(m->state, c->in[i + 2], &state[i]), "a loop-carried value")) != KILN_OK) goto done;
    }
    while (cond && n_iter < max_trip) {
        ((int64_t *)iter_t->data)[0] = n_iter;
        ((uint8_t *)cond_t->data)[0] = 1;
        args[0] = iter_t;
        args[1] = cond_t;
        for (int i = 0; i < n_carried; i++) args[i + 2] = state[i];
        st = kn_exec_subgraph(c, body, args, n_carried + 2, outs, body->n_outputs);
        if (st != KILN_OK) goto done;
        /* the carried values and scan outputs are this kernel's from here, the condition too */
        int64_t next = 0;
        st = read_scalar(c, m, outs[0], "the body's condition output", &next);
        kn_exec_discard(c, outs[0]);
        outs[0] = NULL;
        for (int i = 0; i < n_carried; i++) {
            kn_exec_discard(c, state[i]);
            state[i] = outs[i + 1];
        }
        if (st == KILN_OK && n_iter == cap) {
            int64_t nc = cap ? cap * 2 : 16;
            for (int k = 0; k < n_scan && st == KILN_OK; k++) {
                kn_tensor **p = realloc(scans[k], sizeof(kn_tensor *) * (size_t)nc);
                if (!p) st = KN_OOM();
                else scans[k] = p;
            }
            if (st == KILN_OK) cap = nc;
        }
        if (st != KILN_OK) {
            for (int k = 0; k < n_scan; k++) kn_tensor_free(outs[1 + n_carried + k]);
            goto done;
        }
        for (int k = 0; k < n_scan; k++) scans[k][n_iter] = outs[1 + n_carried + k];
        n_iter++;
        cond = next != 0;
    }
    for (int i = 0; i < n_carried; i++) {
        kn_tensor *t = NULL;
        st = moved(c, m->adopt(m->state, state[i], &t), "a loop-carried value");
        state[i] = NULL;
        if (st != KILN_OK) goto done;
        kn_cf_set_output(c, i, t);
    }
    for (int k = 0; k < n_scan && n_carried + k < c->n_outputs; k++) {
        kn_tensor *t;
        kiln_dtype dt = body->values[body->outputs[1 + n_carried + k]].type.dtype;
        st = kn_cf_stack(c, m, scans[k], n_iter, 0, 0, dt ? dt : KILN_DTYPE_FLOAT, &t);
        if (st != KILN_OK) goto done;
        kn_cf_set_output(c, n_carried + k, t);
    }
done:
    kn_tensor_free(iter_t);
    kn_tensor_free(cond_t);
    if (state)
        for (int i = 0; i < n_carried; i++) kn_tensor_free(state[i]);
    if (scans)
        for (int k = 0; k < n_scan; k++) {
            for (int64_t i = 0; scans[k] && i < n_iter; i++) kn_tensor_free(scans[k][i]);
            free(scans[k]);
        }
    free(state);
    free(outs);
    free(args);
    free(scans);
    return st;
}

/* ------------------------------------------------------------------ Scan */

/* One scan over inputs `in` (states then scan inputs); results get the final states then the
 * stacked scan outputs (on the backend's side). `v8`: opset 8's attribute names (per batch element,
 * axes all 0). */
static kiln_status scan_core(kn_kernel_ctx *c, const kn_cf_mover *m, kn_tensor *const *in, int n_in, int n_out, int v8,
                             kn_tensor **results) {
    KN_CTX_PRM(c, kn_cf_prepare, kn_cf_prm, prm);
    const kn_graph *body = prm->body;
    if (!body) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "the body is not a graph");
    int n_scan_in = (int)prm->num_scan_inputs;
    int n_state = n_in - n_scan_in, k_out = n_out - n_state;
    if (n_scan_in < 0 || n_state < 0 || k_out < 0 || body->n_outputs != n_out)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "num_scan_inputs=%d with %d inputs and %d outputs", n_scan_in,
                               n_in, n_out);
    (void)v8; /* the hook read opset 8's names for an opset 8 node */
    int n_in_axes = prm->n_in_axes, n_in_dirs = prm->n_in_dirs, n_out_axes = prm->n_out_axes,
        n_out_dirs = prm->n_out_dirs;
    const int64_t *in_axes = prm->in_axes;
    const int64_t *in_dirs = prm->in_dirs;
    const int64_t *out_axes = prm->out_axes;
    const int64_t *out_dirs = prm->out_dirs;
    int64_t len = -1;
    for (int j = 0; j < n_scan_in; j++) {
        const kn_tensor *x = in[n_state + j];
        if (!x || x->kind != KN_VALUE_TENSOR)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "scan input %d is missing or not a tensor", j);
        int axis = (int)(j < n_in_axes ? in_axes[j] : 0);
        if (axis < 0) axis += x->rank;
        if (axis < 0 || axis >= x->rank)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "scan_input_axes[%d] is out of range", j);
        if (len >= 0 && x->dims[axis] != len)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "scan inputs have different lengths (%lld and %lld)",
                                   (long long)len, (long long)x->dims[axis]);
        len = x->dims[axis];
    }
    kn_tensor **state = calloc((size_t)n_state + 1, sizeof *state);
    kn_tensor **args = calloc((size_t)n_in + 1, sizeof *args);
    kn_tensor **outs = calloc((size_t)n_out + 1, sizeof *outs);
    kn_tensor **scans = calloc((size_t)(k_out > 0 ? k_out : 1) * (size_t)(len > 0 ? len : 1), sizeof *scans);
    kiln_status st = KILN_OK;
    if (!state || !args || !outs || !scans) {
        st = KN_OOM();
        goto done;
    }
    for (int i = 0; i < n_state; i++) {
        if (!in[i]) {
            st = kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "state %d is missing", i);
            goto done;
        }
        if ((st = moved(c, m->clone(m->state, in[i], &state[i]), "a scan state")) != KILN_OK) goto done;
    }
    for (int64_t t = 0; t < len; t++) {
        for (int i = 0; i < n_state; i++) args[i] = state[i];
        for (int j = 0; j < n_scan_in; j++) {
            const kn_tensor *x = in[n_state + j];
            int axis = (int)(j < n_in_axes ? in_axes[j] : 0);
            if (axis < 0) axis += x->rank;
            int64_t idx = (j < n_in_dirs && in_dirs[j]) ? len - 1 - t : t;
            if ((st = take_slice(c, m, x, axis, idx, &args[n_state + j])) != KILN_OK) break;
        }
        if (st == KILN_OK) st = kn_exec_subgraph(c, body, args, n_in, outs, body->n_outputs);
        for (int j = 0; j < n_scan_in; j++) {
            kn_tensor_free(args[n_state + j]);
            args[n_state + j] = NULL;
        }
        if (st != KILN_OK) goto done;
        for (int i = 0; i < n_state; i++) {
            kn_tensor_free(state[i]);
            state[i] = outs[i];
        }
        for (int k = 0; k < k_out; k++) scans[(size_t)k * (size_t)len + (size_t)t] = outs[n_state + k];
    }
    for (int i = 0; i < n_state; i++) {
        st = moved(c, m->adopt(m->state, state[i], &results[i]), "a scan state");
        state[i] = NULL;
        if (st != KILN_OK) goto done;
    }
    for (int k = 0; k < k_out; k++) {
        kn_tensor *t;
        int axis = (int)(k < n_out_axes ? out_axes[k] : 0);
        int rev = k < n_out_dirs && out_dirs[k];
        kiln_dtype dt = body->values[body->outputs[n_state + k]].type.dtype;
        st = kn_cf_stack(c, m, scans + (size_t)k * (size_t)len, len < 0 ? 0 : len, axis, rev,
                         dt ? dt : KILN_DTYPE_FLOAT, &t);
        if (st != KILN_OK) goto done;
        results[n_state + k] = t;
    }
done:
    if (st != KILN_OK)
        for (int o = 0; o < n_out; o++) {
            kn_tensor_free(results[o]);
            results[o] = NULL;
        }
    if (state)
        for (int i = 0; i < n_state; i++) kn_tensor_free(state[i]);
    if (scans)
        for (int64_t i = 0; i < (int64_t)(k_out > 0 ? k_out : 0) * (len > 0 ? len : 0); i++) kn_tensor_free(scans[i]);
    free(state);
    free(args);
    free(outs);
    free(scans);
    return st;
}

/* Scan before opset 9: every state and scan input has a leading batch axis (scan inputs scan
 * their axis 1); input 0 is the optional sequence_lens. Each batch element is one scan. */
static kiln_status scan8(kn_kernel_ctx *c, const kn_cf_mover *m) {
    KN_CTX_PRM(c, kn_cf_prepare, kn_cf_prm, prm);
    const kn_graph *body = prm->body;
    int n_in = c->n_inputs - 1, n_out = c->n_outputs;
    if (!body || n_in < 1) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "a body and at least one input are required");
    if (n_in > KN_CF_MAX_IO || n_out > KN_CF_MAX_IO)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "more than %d inputs or outputs", KN_CF_MAX_IO);
    for (int i = 1; i <= n_in; i++)
        if (!c->in[i] || c->in[i]->kind != KN_VALUE_TENSOR || c->in[i]->rank < 1)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "input %d must be a tensor with a batch axis", i);
    const kn_tensor *last = c->in[n_in];
    if (c->in[0] && last->rank >= 2)
        for (int64_t b = 0; b < kn_tensor_count(c->in[0]); b++) {
            int64_t len = 0;
            KN_TRY(moved(c, m->read_i64(m->state, c->in[0], b, &len), "sequence_lens"));
            if (len != last->dims[1])
                return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "sequence_lens shorter than the scan inputs are not supported");
        }
    int64_t batch = c->in[1]->dims[0];
    kn_tensor *args[KN_CF_MAX_IO];
    kn_tensor **per = calloc((size_t)(batch > 0 ? batch : 1) * (size_t)(n_out > 0 ? n_out : 1), sizeof *per);
    kn_tensor **items = calloc((size_t)(batch > 0 ? batch : 1), sizeof *items);
    if (!per || !items) {
        free(per);
        free(items);
        return KN_OOM();
    }
    kiln_status st = KILN_OK;
    for (int64_t b = 0; b < batch && st == KILN_OK; b++) {
        int made = 0;
        for (; made < n_in && st == KILN_OK; made++) st = take_slice(c, m, c->in[1 + made], 0, b, &args[made]);
        if (st != KILN_OK) made--; /* the failed one made nothing */
        if (st == KILN_OK) st = scan_core(c, m, args, n_in, n_out, 1, per + b * n_out);
        for (int i = 0; i < made; i++) kn_tensor_free(args[i]);
    }
    for (int o = 0; o < n_out && st == KILN_OK; o++) {
        kn_tensor *t;
        for (int64_t k = 0; k < batch; k++) items[k] = per[k * n_out + o];
        kiln_dtype dt = body->values[body->outputs[o]].type.dtype;
        st = kn_cf_stack(c, m, items, batch, 0, 0, dt ? dt : c->in[1]->dtype, &t);
        if (st == KILN_OK) kn_cf_set_output(c, o, t);
    }
    for (int64_t i = 0; i < batch * n_out; i++) kn_tensor_free(per[i]);
    free(per);
    free(items);
    return st;
}

kiln_status kn_cf_scan(kn_kernel_ctx *c, const kn_cf_mover *m) {
    if (c->node->opset < 9) return scan8(c, m);
    kn_tensor *results[KN_CF_MAX_IO] = {0};
    if (c->n_outputs > KN_CF_MAX_IO) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "more than %d outputs", KN_CF_MAX_IO);
    KN_TRY(scan_core(c, m, c->in, c->n_inputs, c->n_outputs, 0, results));
    for (int o = 0; o < c->n_outputs; o++) kn_cf_set_output(c, o, results[o]);
    return KILN_OK;
}

/* ------------------------------------------------------------------ the host's mover */

static kiln_status host_new(void *state, kiln_dtype dtype, int rank, const int64_t *dims, kn_tensor **out) {
    (void)state;
    return kn_tensor_new(dtype, rank, dims, out);
}

static kiln_status host_copy_rows(void *state, kn_tensor *dst, int64_t doff, int64_t dpitch, const kn_tensor *src,
                                  int64_t soff, int64_t spitch, int64_t width, int64_t rows) {
    (void)state;
    if (dst->device != KN_DEVICE_HOST || src->device != KN_DEVICE_HOST)
        return KN_INTERNAL("a device tensor given to the host's control-flow copies");
    if (dst->dtype != src->dtype) return KN_INTERNAL("a control-flow copy between element types");
    for (int64_t r = 0; r < rows; r++) {
        int64_t d = doff + r * dpitch, s = soff + r * spitch;
        if (dst->dtype == KILN_DTYPE_STRING) {
            char **dd = dst->data;
            char *const *ss = src->data;
            for (int64_t i = 0; i < width; i++) {
                free(dd[d + i]);
                dd[d + i] = strdup(ss[s + i] ? ss[s + i] : "");
                if (!dd[d + i]) return KN_OOM();
            }
        } else if (kn_dtype_is_packed(dst->dtype)) {
            for (int64_t i = 0; i < width; i++)
                kn_packed_set(dst->data, dst->dtype, d + i, kn_packed_get(src->data, src->dtype, s + i));
        } else if (width) {
            size_t es = kiln_dtype_size(dst->dtype);
            memcpy((char *)dst->data + (size_t)d * es, (const char *)src->data + (size_t)s * es, (size_t)width * es);
        }
    }
    return KILN_OK;
}

static kiln_status host_read(void *state, const kn_tensor *t, int64_t i, int64_t *out) {
    (void)state;
    if (t->device != KN_DEVICE_HOST) return KN_INTERNAL("a device tensor read by a host control-flow kernel");
    *out = kn_tensor_get_i64(t, i);
    return KILN_OK;
}

static kiln_status host_clone(void *state, const kn_tensor *t, kn_tensor **out) {
    (void)state;
    return kn_tensor_clone(t, out);
}

static kiln_status host_adopt(void *state, kn_tensor *t, kn_tensor **out) {
    (void)state;
    *out = t;
    return KILN_OK;
}

const kn_cf_mover kn_cf_host = {NULL, host_new, host_copy_rows, host_read, host_clone, host_adopt};

/* CPU kernels for control flow (If, Loop, Scan), sequences and optionals. Bodies run through the
 * executor (kn_exec_subgraph) with the current run as their outer scope. */
#include "backend/cpu/cpu.h"
#include "exec/exec.h"

#include <stdlib.h>
#include <string.h>

/* Copies `count` elements; strings are duplicated so each tensor owns its own. */
static kiln_status copy_elems(kn_tensor *dst, int64_t doff, const kn_tensor *src, int64_t soff, int64_t count) {
    if (dst->dtype == KILN_DTYPE_STRING) {
        char **d = dst->data;
        char *const *s = src->data;
        for (int64_t i = 0; i < count; i++) {
            free(d[doff + i]);
            d[doff + i] = strdup(s[soff + i] ? s[soff + i] : "");
            if (!d[doff + i]) return KN_OOM();
        }
        return KILN_OK;
    }
    size_t es = kiln_dtype_size(dst->dtype);
    if (count) memcpy((char *)dst->data + (size_t)doff * es, (const char *)src->data + (size_t)soff * es, (size_t)count * es);
    return KILN_OK;
}

/* Replaces output i with value t (taking ownership). */
static void set_output(kn_kernel_ctx *c, int i, kn_tensor *t) {
    if (i >= c->n_outputs || c->node->outputs[i] < 0) {
        kn_tensor_free(t);
        return;
    }
    kn_tensor_free(c->out[i]);
    c->out[i] = t;
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

/* The slice t[..., i, ...] along axis as a new tensor of rank-1. */
static kiln_status take_slice(const kn_tensor *t, int axis, int64_t i, kn_tensor **out) {
    int64_t dims[KILN_MAX_RANK];
    int r = 0;
    for (int d = 0; d < t->rank; d++)
        if (d != axis) dims[r++] = t->dims[d];
    KN_TRY(kn_tensor_new(t->dtype, r, dims, out));
    int64_t outer = outer_count(t, axis), inner = inner_count(t, axis), n = t->dims[axis];
    for (int64_t o = 0; o < outer; o++) {
        kiln_status s = copy_elems(*out, o * inner, t, (o * n + i) * inner, inner);
        if (s != KILN_OK) {
            kn_tensor_free(*out);
            *out = NULL;
            return s;
        }
    }
    return KILN_OK;
}

/* Stacks n same-shaped tensors along a new axis; `reverse` stacks them last to first. With n = 0
 * the element shape comes from `proto_rank`/`proto_dims` (may be NULL: a 1-D empty tensor). */
static kiln_status stack(kn_kernel_ctx *c, kn_tensor **items, int64_t n, int axis, int reverse, kiln_dtype dtype,
                         kn_tensor **out) {
    int64_t dims[KILN_MAX_RANK];
    const kn_tensor *first = n ? items[0] : NULL;
    int rank = first ? first->rank + 1 : 1;
    if (rank > KILN_MAX_RANK) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "stacked rank %d is too large", rank);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "stacking axis out of range");
    for (int d = 0, k = 0; d < rank; d++) dims[d] = d == axis ? n : (first ? first->dims[k++] : 0);
    for (int64_t i = 1; i < n; i++)
        if (items[i]->rank != first->rank || memcmp(items[i]->dims, first->dims, sizeof(int64_t) * (size_t)first->rank))
            return kn_kernel_error(c, KILN_ERR_SHAPE, "iteration %lld gives a scan output of another shape than iteration 0",
                                   (long long)i);
    KN_TRY(kn_tensor_new(first ? first->dtype : dtype, rank, dims, out));
    int64_t inner = 1, outer = 1;
    for (int d = axis + 1; d < rank; d++) inner *= dims[d];
    for (int d = 0; d < axis; d++) outer *= dims[d];
    for (int64_t i = 0; i < n; i++) {
        const kn_tensor *src = items[reverse ? n - 1 - i : i];
        for (int64_t o = 0; o < outer; o++) KN_TRY(copy_elems(*out, (o * n + i) * inner, src, o * inner, inner));
    }
    return KILN_OK;
}

static const kn_graph *graph_attr(const kn_node *n, const char *name) {
    const kn_attr *a = kn_node_attr(n, name);
    return a && a->type == KN_ATTR_GRAPH ? a->g : NULL;
}

static kiln_status run_if(kn_kernel_ctx *c) {
    const kn_tensor *cond = c->in[0];
    if (kn_tensor_count(cond) != 1)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "the condition must hold exactly one element");
    const kn_graph *g = graph_attr(c->node, kn_tensor_get_i64(cond, 0) ? "then_branch" : "else_branch");
    kn_tensor *outs[256];
    if (g->n_outputs > 256) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "more than 256 branch outputs");
    KN_TRY(kn_exec_subgraph(c, g, NULL, 0, outs, g->n_outputs));
    for (int o = 0; o < g->n_outputs; o++) set_output(c, o, outs[o]);
    return KILN_OK;
}

static kiln_status run_loop(kn_kernel_ctx *c) {
    const kn_graph *body = graph_attr(c->node, "body");
    int n_carried = c->n_inputs - 2, n_scan = body->n_outputs - 1 - n_carried;
    int64_t max_trip = c->in[0] ? kn_tensor_get_i64(c->in[0], 0) : INT64_MAX;
    int cond = c->in[1] ? kn_tensor_get_i64(c->in[1], 0) != 0 : 1;
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
    if ((st = kn_tensor_new(KILN_DTYPE_INT64, 0, NULL, &iter_t)) != KILN_OK) goto done;
    if ((st = kn_tensor_new(KILN_DTYPE_BOOL, 0, NULL, &cond_t)) != KILN_OK) goto done;
    for (int i = 0; i < n_carried; i++)
        if ((st = kn_tensor_clone(c->in[i + 2], &state[i])) != KILN_OK) goto done;
    while (cond && n_iter < max_trip) {
        ((int64_t *)iter_t->data)[0] = n_iter;
        ((uint8_t *)cond_t->data)[0] = 1;
        args[0] = iter_t;
        args[1] = cond_t;
        for (int i = 0; i < n_carried; i++) args[i + 2] = state[i];
        st = kn_exec_subgraph(c, body, args, n_carried + 2, outs, body->n_outputs);
        if (st != KILN_OK) goto done;
        cond = kn_tensor_get_i64(outs[0], 0) != 0;
        kn_tensor_free(outs[0]);
        for (int i = 0; i < n_carried; i++) {
            kn_tensor_free(state[i]);
            state[i] = outs[i + 1];
        }
        if (n_iter == cap) {
            cap = cap ? cap * 2 : 16;
            for (int k = 0; k < n_scan; k++) {
                kn_tensor **p = realloc(scans[k], sizeof(kn_tensor *) * (size_t)cap);
                if (!p) {
                    st = KN_OOM();
                    goto done;
                }
                scans[k] = p;
            }
        }
        for (int k = 0; k < n_scan; k++) scans[k][n_iter] = outs[1 + n_carried + k];
        n_iter++;
    }
    for (int i = 0; i < n_carried; i++) {
        set_output(c, i, state[i]);
        state[i] = NULL;
    }
    for (int k = 0; k < n_scan && n_carried + k < c->n_outputs; k++) {
        kn_tensor *t;
        kiln_dtype dt = body->values[body->outputs[1 + n_carried + k]].type.dtype;
        st = stack(c, scans[k], n_iter, 0, 0, dt ? dt : KILN_DTYPE_FLOAT, &t);
        if (st != KILN_OK) goto done;
        set_output(c, n_carried + k, t);
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

/* One scan over inputs `in` (states then scan inputs); results get the final states then the
 * stacked scan outputs. `v8`: opset 8's attribute names (per batch element, axes all 0). */
static kiln_status scan_core(kn_kernel_ctx *c, kn_tensor *const *in, int n_in, int n_out, int v8, kn_tensor **results) {
    const kn_graph *body = graph_attr(c->node, "body");
    int m = (int)kn_attr_int(c->node, "num_scan_inputs", 0);
    int n_state = n_in - m, k_out = n_out - n_state;
    int n_in_axes = 0, n_in_dirs = 0, n_out_axes = 0, n_out_dirs = 0;
    const int64_t *in_axes = v8 ? NULL : kn_attr_ints(c->node, "scan_input_axes", &n_in_axes);
    const int64_t *in_dirs = kn_attr_ints(c->node, v8 ? "directions" : "scan_input_directions", &n_in_dirs);
    const int64_t *out_axes = v8 ? NULL : kn_attr_ints(c->node, "scan_output_axes", &n_out_axes);
    const int64_t *out_dirs = v8 ? NULL : kn_attr_ints(c->node, "scan_output_directions", &n_out_dirs);
    int64_t len = -1;
    for (int j = 0; j < m; j++) {
        const kn_tensor *x = in[n_state + j];
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
    for (int i = 0; i < n_state; i++)
        if ((st = kn_tensor_clone(in[i], &state[i])) != KILN_OK) goto done;
    for (int64_t t = 0; t < len; t++) {
        for (int i = 0; i < n_state; i++) args[i] = state[i];
        for (int j = 0; j < m; j++) {
            const kn_tensor *x = in[n_state + j];
            int axis = (int)(j < n_in_axes ? in_axes[j] : 0);
            if (axis < 0) axis += x->rank;
            int64_t idx = (j < n_in_dirs && in_dirs[j]) ? len - 1 - t : t;
            if ((st = take_slice(x, axis, idx, &args[n_state + j])) != KILN_OK) goto done;
        }
        st = kn_exec_subgraph(c, body, args, n_in, outs, body->n_outputs);
        for (int j = 0; j < m; j++) {
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
        results[i] = state[i];
        state[i] = NULL;
    }
    for (int k = 0; k < k_out; k++) {
        kn_tensor *t;
        int axis = (int)(k < n_out_axes ? out_axes[k] : 0);
        int rev = k < n_out_dirs && out_dirs[k];
        st = stack(c, scans + (size_t)k * (size_t)len, len < 0 ? 0 : len, axis, rev,
                   body->values[body->outputs[n_state + k]].type.dtype, &t);
        if (st != KILN_OK) goto done;
        results[n_state + k] = t;
    }
done:
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

static kiln_status run_scan8(kn_kernel_ctx *c);

static kiln_status run_scan(kn_kernel_ctx *c) {
    if (c->node->opset < 9) return run_scan8(c);
    kn_tensor *results[256] = {0};
    if (c->n_outputs > 256) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "more than 256 outputs");
    KN_TRY(scan_core(c, c->in, c->n_inputs, c->n_outputs, 0, results));
    for (int o = 0; o < c->n_outputs; o++) set_output(c, o, results[o]);
    return KILN_OK;
}

/* Scan before opset 9: every state and scan input has a leading batch axis (scan inputs scan
 * their axis 1); input 0 is the optional sequence_lens. Each batch element is one scan. */
static kiln_status run_scan8(kn_kernel_ctx *c) {
    int n_in = c->n_inputs - 1, n_out = c->n_outputs;
    if (c->in[0])
        for (int64_t b = 0; b < kn_tensor_count(c->in[0]); b++)
            if (kn_tensor_get_i64(c->in[0], b) != c->in[1 + n_in - 1]->dims[1])
                return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "sequence_lens shorter than the scan inputs are not supported");
    if (n_in > 256 || n_out > 256) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "more than 256 inputs or outputs");
    int64_t batch = n_in > 0 ? c->in[1]->dims[0] : 0;
    kn_tensor *args[256], **per = calloc((size_t)(batch > 0 ? batch : 1) * (size_t)n_out, sizeof *per);
    if (!per) return KN_OOM();
    kiln_status st = KILN_OK;
    int64_t b = 0;
    for (; b < batch && st == KILN_OK; b++) {
        int made = 0;
        for (; made < n_in && st == KILN_OK; made++) st = take_slice(c->in[1 + made], 0, b, &args[made]);
        if (st == KILN_OK) st = scan_core(c, args, n_in, n_out, 1, per + b * n_out);
        for (int i = 0; i < made; i++) kn_tensor_free(args[i]);
    }
    for (int o = 0; o < n_out && st == KILN_OK; o++) {
        kn_tensor *items[4096], *t;
        if (batch > 4096) {
            st = kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "batch over 4096");
            break;
        }
        for (int64_t k = 0; k < batch; k++) items[k] = per[k * n_out + o];
        st = stack(c, items, batch, 0, 0, c->in[1]->dtype, &t);
        if (st == KILN_OK) set_output(c, o, t);
    }
    for (int64_t i = 0; i < batch * n_out; i++) kn_tensor_free(per[i]);
    free(per);
    return st;
}

/* ---- sequences ---- */

static kiln_status seq_clone_into(kn_kernel_ctx *c, const kn_tensor *src, kn_tensor **out) {
    if (src->kind != KN_VALUE_SEQUENCE) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "input 0 is not a sequence");
    return kn_tensor_clone(src, out);
}

static kiln_status seq_position(kn_kernel_ctx *c, const kn_tensor *pos, int n, int insert, int *out) {
    int64_t p = pos ? kn_tensor_get_i64(pos, 0) : (insert ? n : n - 1);
    int64_t hi = insert ? n : n - 1;
    if (p < -n || p > hi)
        return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "position %lld is outside [-%d, %lld]", (long long)p, n, (long long)hi);
    *out = (int)(p < 0 ? p + n : p);
    return KILN_OK;
}

static kiln_status run_sequence_empty(kn_kernel_ctx *c) {
    kn_tensor *s;
    KN_TRY(kn_tensor_new_sequence((kiln_dtype)kn_attr_int(c->node, "dtype", KILN_DTYPE_FLOAT), &s));
    set_output(c, 0, s);
    return KILN_OK;
}

static kiln_status run_sequence_construct(kn_kernel_ctx *c) {
    kn_tensor *s;
    KN_TRY(kn_tensor_new_sequence(c->in[0]->dtype, &s));
    for (int i = 0; i < c->n_inputs; i++) {
        kn_tensor *t;
        kiln_status st = kn_tensor_clone(c->in[i], &t);
        if (st == KILN_OK) st = kn_sequence_append(s, t);
        if (st != KILN_OK) {
            kn_tensor_free(s);
            return st;
        }
    }
    set_output(c, 0, s);
    return KILN_OK;
}

static kiln_status run_sequence_insert(kn_kernel_ctx *c) {
    kn_tensor *s, *t;
    KN_TRY(seq_clone_into(c, c->in[0], &s));
    int pos = 0;
    kiln_status st = seq_position(c, c->n_inputs > 2 ? c->in[2] : NULL, s->n_items, 1, &pos);
    if (st == KILN_OK) st = kn_tensor_clone(c->in[1], &t);
    if (st == KILN_OK && (st = kn_sequence_append(s, t)) == KILN_OK) {
        memmove(&s->items[pos + 1], &s->items[pos], sizeof(kn_tensor *) * (size_t)(s->n_items - 1 - pos));
        s->items[pos] = t;
    }
    if (st != KILN_OK) {
        kn_tensor_free(s);
        return st;
    }
    set_output(c, 0, s);
    return KILN_OK;
}

static kiln_status run_sequence_erase(kn_kernel_ctx *c) {
    kn_tensor *s;
    KN_TRY(seq_clone_into(c, c->in[0], &s));
    int pos = 0;
    kiln_status st = s->n_items ? seq_position(c, c->n_inputs > 1 ? c->in[1] : NULL, s->n_items, 0, &pos)
                                : kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "erase from an empty sequence");
    if (st != KILN_OK) {
        kn_tensor_free(s);
        return st;
    }
    kn_tensor_free(s->items[pos]);
    memmove(&s->items[pos], &s->items[pos + 1], sizeof(kn_tensor *) * (size_t)(s->n_items - 1 - pos));
    s->n_items--;
    set_output(c, 0, s);
    return KILN_OK;
}

static kiln_status run_sequence_at(kn_kernel_ctx *c) {
    const kn_tensor *s = c->in[0];
    if (s->kind != KN_VALUE_SEQUENCE) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "input 0 is not a sequence");
    int pos = 0;
    KN_TRY(seq_position(c, c->in[1], s->n_items, 0, &pos));
    kn_tensor *t;
    KN_TRY(kn_tensor_clone(s->items[pos], &t));
    set_output(c, 0, t);
    return KILN_OK;
}

static kiln_status run_sequence_length(kn_kernel_ctx *c) {
    kn_tensor *t;
    KN_TRY(kn_ctx_output(c, 0, KILN_DTYPE_INT64, 0, NULL, &t));
    ((int64_t *)t->data)[0] = c->in[0]->n_items;
    return KILN_OK;
}

static kiln_status run_split_to_sequence(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *split = c->n_inputs > 1 ? c->in[1] : NULL;
    int64_t axis = kn_attr_int(c->node, "axis", 0);
    int keepdims = (int)kn_attr_int(c->node, "keepdims", 1);
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis is out of range");
    int64_t len = x->dims[axis];
    int64_t sizes_buf[4096], *sizes = sizes_buf, n = 0;
    if (!split) {
        n = len;
        if (n > 4096) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "more than 4096 pieces");
        for (int64_t i = 0; i < n; i++) sizes[i] = 1;
    } else if (split->rank == 0) {
        int64_t chunk = kn_tensor_get_i64(split, 0);
        if (chunk <= 0) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "split size %lld is not positive", (long long)chunk);
        for (int64_t off = 0; off < len && n < 4096; off += chunk) sizes[n++] = off + chunk <= len ? chunk : len - off;
        keepdims = 1;
    } else {
        n = kn_tensor_count(split);
        if (n > 4096) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "more than 4096 pieces");
        int64_t total = 0;
        for (int64_t i = 0; i < n; i++) total += sizes[i] = kn_tensor_get_i64(split, i);
        if (total != len) return kn_kernel_error(c, KILN_ERR_SHAPE, "split sizes add up to %lld, the axis is %lld", (long long)total, (long long)len);
        keepdims = 1;
    }
    kn_tensor *s;
    KN_TRY(kn_tensor_new_sequence(x->dtype, &s));
    int64_t outer = outer_count(x, (int)axis), inner = inner_count(x, (int)axis), off = 0;
    for (int64_t p = 0; p < n; p++) {
        int64_t dims[KILN_MAX_RANK];
        int r = 0;
        for (int d = 0; d < x->rank; d++) {
            if (d == axis && !keepdims) continue;
            dims[r++] = d == axis ? sizes[p] : x->dims[d];
        }
        kn_tensor *t;
        kiln_status st = kn_tensor_new(x->dtype, r, dims, &t);
        for (int64_t o = 0; st == KILN_OK && o < outer; o++)
            st = copy_elems(t, o * sizes[p] * inner, x, (o * len + off) * inner, sizes[p] * inner);
        if (st == KILN_OK) st = kn_sequence_append(s, t);
        else kn_tensor_free(t);
        if (st != KILN_OK) {
            kn_tensor_free(s);
            return st;
        }
        off += sizes[p];
    }
    set_output(c, 0, s);
    return KILN_OK;
}

static kiln_status run_concat_from_sequence(kn_kernel_ctx *c) {
    const kn_tensor *s = c->in[0];
    int new_axis = (int)kn_attr_int(c->node, "new_axis", 0);
    int64_t axis = kn_attr_int(c->node, "axis", 0);
    if (s->n_items == 0) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "the sequence is empty");
    const kn_tensor *f = s->items[0];
    int rank = f->rank + (new_axis ? 1 : 0);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis is out of range");
    if (new_axis) {
        kn_tensor *t;
        KN_TRY(stack(c, s->items, s->n_items, (int)axis, 0, f->dtype, &t));
        set_output(c, 0, t);
        return KILN_OK;
    }
    int64_t dims[KILN_MAX_RANK], total = 0;
    for (int i = 0; i < s->n_items; i++) {
        const kn_tensor *t = s->items[i];
        if (t->rank != f->rank) return kn_kernel_error(c, KILN_ERR_SHAPE, "sequence items have different ranks");
        for (int d = 0; d < f->rank; d++)
            if (d != axis && t->dims[d] != f->dims[d])
                return kn_kernel_error(c, KILN_ERR_SHAPE, "item %d differs from item 0 in dimension %d", i, d);
        total += t->dims[axis];
    }
    memcpy(dims, f->dims, sizeof(int64_t) * (size_t)f->rank);
    dims[axis] = total;
    kn_tensor *out;
    KN_TRY(kn_tensor_new(f->dtype, f->rank, dims, &out));
    int64_t outer = outer_count(f, (int)axis), inner = inner_count(f, (int)axis), off = 0;
    for (int i = 0; i < s->n_items; i++) {
        const kn_tensor *t = s->items[i];
        for (int64_t o = 0; o < outer; o++) {
            kiln_status st = copy_elems(out, (o * total + off) * inner, t, o * t->dims[axis] * inner, t->dims[axis] * inner);
            if (st != KILN_OK) {
                kn_tensor_free(out);
                return st;
            }
        }
        off += t->dims[axis];
    }
    set_output(c, 0, out);
    return KILN_OK;
}

static kiln_status run_sequence_map(kn_kernel_ctx *c) {
    const kn_graph *body = graph_attr(c->node, "body");
    const kn_tensor *first = c->in[0];
    int n = first->n_items;
    for (int i = 1; i < c->n_inputs; i++)
        if (c->in[i] && c->in[i]->kind == KN_VALUE_SEQUENCE && c->in[i]->n_items != n)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "the sequences have different lengths");
    kn_tensor **seqs = calloc((size_t)c->n_outputs, sizeof *seqs);
    kn_tensor **args = calloc((size_t)c->n_inputs, sizeof *args);
    kn_tensor **outs = calloc((size_t)c->n_outputs, sizeof *outs);
    kiln_status st = (seqs && args && outs) ? KILN_OK : KN_OOM();
    for (int o = 0; st == KILN_OK && o < c->n_outputs; o++)
        st = kn_tensor_new_sequence(body->values[body->outputs[o]].type.dtype, &seqs[o]);
    for (int k = 0; st == KILN_OK && k < n; k++) {
        for (int i = 0; i < c->n_inputs; i++)
            args[i] = c->in[i]->kind == KN_VALUE_SEQUENCE ? c->in[i]->items[k] : c->in[i];
        st = kn_exec_subgraph(c, body, args, c->n_inputs, outs, c->n_outputs);
        for (int o = 0; st == KILN_OK && o < c->n_outputs; o++) {
            if (seqs[o]->dtype == KILN_DTYPE_UNDEFINED) seqs[o]->dtype = outs[o]->dtype;
            st = kn_sequence_append(seqs[o], outs[o]);
            if (st != KILN_OK)
                for (int r = o; r < c->n_outputs; r++) kn_tensor_free(outs[r]);
        }
    }
    for (int o = 0; seqs && o < c->n_outputs; o++) {
        if (st == KILN_OK) set_output(c, o, seqs[o]);
        else kn_tensor_free(seqs[o]);
    }
    free(seqs);
    free(args);
    free(outs);
    return st;
}

/* ---- optionals ---- */

static kiln_status run_optional(kn_kernel_ctx *c) {
    kn_tensor *item = NULL, *opt;
    kiln_dtype dt = KILN_DTYPE_UNDEFINED;
    if (c->n_inputs > 0 && c->in[0]) {
        KN_TRY(kn_tensor_clone(c->in[0], &item));
        dt = item->dtype;
    } else {
        const kn_attr *a = kn_node_attr(c->node, "type");
        if (a && a->type == KN_ATTR_TYPE_PROTO && a->type_protos) dt = a->type_protos[0].dtype;
    }
    kiln_status st = kn_tensor_new_optional(dt, item, &opt);
    if (st != KILN_OK) {
        kn_tensor_free(item);
        return st;
    }
    set_output(c, 0, opt);
    return KILN_OK;
}

static kiln_status run_optional_has_element(kn_kernel_ctx *c) {
    kn_tensor *t;
    KN_TRY(kn_ctx_output(c, 0, KILN_DTYPE_BOOL, 0, NULL, &t));
    const kn_tensor *x = c->n_inputs > 0 ? c->in[0] : NULL;
    ((uint8_t *)t->data)[0] = x && (x->kind != KN_VALUE_OPTIONAL || x->n_items > 0);
    return KILN_OK;
}

static kiln_status run_optional_get_element(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    if (x->kind == KN_VALUE_OPTIONAL) {
        if (!x->n_items) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "the optional input is empty");
        x = x->items[0];
    }
    kn_tensor *t;
    KN_TRY(kn_tensor_clone(x, &t));
    set_output(c, 0, t);
    return KILN_OK;
}

const kn_cpu_kernel kn_cpu_control[] = {
    {"", "If", run_if, NULL},
    {"", "Loop", run_loop, NULL},
    {"", "Scan", run_scan, NULL},
    {"", "SequenceEmpty", run_sequence_empty, NULL},
    {"", "SequenceConstruct", run_sequence_construct, NULL},
    {"", "SequenceInsert", run_sequence_insert, NULL},
    {"", "SequenceErase", run_sequence_erase, NULL},
    {"", "SequenceAt", run_sequence_at, NULL},
    {"", "SequenceLength", run_sequence_length, NULL},
    {"", "SplitToSequence", run_split_to_sequence, NULL},
    {"", "ConcatFromSequence", run_concat_from_sequence, NULL},
    {"", "SequenceMap", run_sequence_map, NULL},
    {"", "Optional", run_optional, NULL},
    {"", "OptionalHasElement", run_optional_has_element, NULL},
    {"", "OptionalGetElement", run_optional_get_element, NULL},
    {0},
};

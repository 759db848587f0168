/* The memory plan (see memplan.h): intervals from the execution order, slots by first fit. */
#include "exec/memplan.h"

#include "backend/backend.h"
#include "exec/exec.h"
#include "ops/op.h"
#include "util/log.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof ((kn_runtime *)0)->shaped / sizeof ((kn_runtime *)0)->shaped[0] == KN_MEMPLAN_SHAPED,
               "kn_runtime holds KN_MEMPLAN_SHAPED plans made by runs");

bool kn_memplan_host_output(const kn_runtime *rt, const kn_node *n, int o) {
    if (!rt || n->provider < 0 || n->provider >= rt->n_backends) return false;
    const kn_backend *be = &rt->backends[n->provider];
    if (!be->ops) return false;
    if (be->ops->device == KN_DEVICE_HOST) return true;
    return be->ops->output_on_host && be->ops->output_on_host(n->kernel, n, o);
}

int64_t kn_memplan_slot_bytes(const kn_type *t) {
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) {
        if (t->dims[d].value < 0 || (t->dims[d].value && n > INT64_MAX / 64 / t->dims[d].value)) return -1;
        n *= t->dims[d].value;
    }
    size_t es = kiln_dtype_size(t->dtype);
    if (es == 0 || (uint64_t)n > (uint64_t)INT64_MAX / 64 / es) return -1;
    int64_t bytes = (int64_t)kn_dtype_nbytes(t->dtype, n);
    bytes = (bytes + KN_MEMPLAN_ALIGN - 1) / KN_MEMPLAN_ALIGN * KN_MEMPLAN_ALIGN;
    return bytes ? bytes : KN_MEMPLAN_ALIGN;
}

static void pin_names(const kn_graph *main, const kn_graph *sub, bool *pinned, int depth) {
    if (depth > 64) return;
    for (int v = 0; v < sub->n_values; v++) {
        if (!sub->values[v].is_outer) continue;
        int id = kn_graph_find_value(main, sub->values[v].name);
        if (id >= 0) pinned[id] = true;
    }
    for (int i = 0; i < sub->n_nodes; i++)
        for (int a = 0; a < sub->nodes[i].n_attrs; a++) {
            const kn_attr *at = &sub->nodes[i].attrs[a];
            if (at->type == KN_ATTR_GRAPH && at->g) pin_names(main, at->g, pinned, depth + 1);
            if (at->type == KN_ATTR_GRAPHS)
                for (int k = 0; k < at->n; k++) pin_names(main, at->graphs[k], pinned, depth + 1);
        }
}

bool *kn_memplan_pinned(const kn_graph *g) {
    bool *pinned = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof(bool));
    if (!pinned) return NULL;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int a = 0; a < n->n_attrs; a++) {
            const kn_attr *at = &n->attrs[a];
            if (at->type == KN_ATTR_GRAPH && at->g) pin_names(g, at->g, pinned, 1);
            if (at->type == KN_ATTR_GRAPHS)
                for (int k = 0; k < at->n; k++) pin_names(g, at->graphs[k], pinned, 1);
        }
    }
    return pinned;
}

bool kn_memplan_eligible(const kn_graph *g, const kn_runtime *rt, int v, const bool *pinned, bool dynamic) {
    if (v < 0 || v >= g->n_values) return false;
    const kn_value *val = &g->values[v];
    if (val->constant || val->is_graph_input || val->is_graph_output || val->is_outer || pinned[v]) return false;
    if (val->producer < 0 || val->producer >= g->n_nodes) return false;
    const kn_node *n = &g->nodes[val->producer];
    if (n->dead || (n->schema && (n->schema->flags & KN_OP_HAS_SUBGRAPH))) return false;
    if (val->type.kind != KN_TYPE_TENSOR || val->type.dtype == KILN_DTYPE_STRING || val->type.dtype == KILN_DTYPE_UNDEFINED)
        return false;
    if (!dynamic && (!kn_type_is_static(&val->type) || kn_memplan_slot_bytes(&val->type) <= 0)) return false;
    int o = -1;
    for (int k = 0; k < n->n_outputs; k++)
        if (n->outputs[k] == v) o = k;
    return o >= 0 && kn_memplan_host_output(rt, n, o);
}

void kn_memplan_log(const kn_memplan *p, const char *what) {
    kn_log(KILN_LOG_DEBUG, "memory plan (%s): %d host intermediates in %.2f MB (%.2f MB each on its own), %d views "
           "take their input's slot", what, p->n_planned, p->arena_bytes / 1048576.0, p->unshared_bytes / 1048576.0,
           p->n_aliases);
}

kn_memplan *kn_memplan_new(int n_values) {
    size_t nv = (size_t)(n_values > 0 ? n_values : 1);
    kn_memplan *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_values = n_values;
    p->offset = malloc(sizeof(int64_t) * nv);
    p->size = calloc(nv, sizeof(int64_t));
    p->alias = malloc(sizeof(int32_t) * nv);
    if (!p->offset || !p->size || !p->alias) {
        kn_memplan_free(p);
        return NULL;
    }
    for (size_t v = 0; v < nv; v++) {
        p->offset[v] = -1;
        p->alias[v] = -1;
    }
    return p;
}

void kn_memplan_free(kn_memplan *p) {
    if (!p) return;
    free(p->sig);
    free(p->offset);
    free(p->size);
    free(p->alias);
    free(p);
}

typedef struct slot {
    int value;
    int start, end; /* node positions: made at start, last read at end (inclusive) */
    int64_t size, offset;
} slot;

static int by_size_desc(const void *a, const void *b) {
    const slot *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->start - y->start;
}

static int by_offset(const void *a, const void *b) {
    const slot *x = *(const slot *const *)a, *y = *(const slot *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* First fit, largest first: each slot goes to the lowest offset where it meets no placed slot
 * whose interval overlaps its own.
 *
 * The placed slots are indexed by time in a segment tree over the steps (each slot listed at the
 * O(log T) nodes that cover its interval exactly), so the slots overlapping an interval of length
 * L are found by visiting the O(L + log T) nodes above its steps, not by scanning every slot
 * placed so far: O(n log n) for a chain of n nodes (was O(n^2): a 1M-node chain never finished).
 * The result is the same as the scan's: the same set of overlapping slots, the same first gap. */
typedef struct seg_entry {
    int slot, next;
} seg_entry;

static kiln_status place(slot *s, int n, uint64_t *arena) {
    qsort(s, (size_t)n, sizeof *s, by_size_desc);
    *arena = 0;
    if (n == 0) return KILN_OK;
    int steps = 1;
    for (int i = 0; i < n; i++)
        if (s[i].end + 1 > steps) steps = s[i].end + 1;
    int levels = 0;
    int64_t leaves = 1;
    while (leaves < steps) {
        leaves <<= 1;
        levels++;
    }
    int64_t cap_entries = (int64_t)n * (2 * (levels + 1));
    int *head = malloc(sizeof(int) * (size_t)(2 * leaves));
    seg_entry *ent = malloc(sizeof *ent * (size_t)cap_entries);
    int *stamp = malloc(sizeof(int) * (size_t)n);
    const slot **live = malloc(sizeof *live * (size_t)n);
    if (!head || !ent || !stamp || !live) {
        free(head);
        free(ent);
        free(stamp);
        free(live);
        return KN_OOM();
    }
    for (int64_t x = 0; x < 2 * leaves; x++) head[x] = -1;
    for (int i = 0; i < n; i++) stamp[i] = -1;
    int64_t n_ent = 0;
    for (int i = 0; i < n; i++) {
        /* the placed slots overlapping [start, end]: those listed at a node above one of its steps */
        int nl = 0;
        for (int h = 0; h <= levels; h++) {
            int64_t lo = (leaves + s[i].start) >> h, hi = (leaves + s[i].end) >> h;
            for (int64_t x = lo; x <= hi; x++)
                for (int e = head[x]; e >= 0; e = ent[e].next) {
                    int j = ent[e].slot;
                    if (stamp[j] == i) continue;
                    stamp[j] = i;
                    live[nl++] = &s[j];
                }
        }
        qsort(live, (size_t)nl, sizeof *live, by_offset);
        int64_t at = 0;
        for (int j = 0; j < nl; j++) {
            if (live[j]->offset >= at + s[i].size) break; /* the gap before it fits */
            if (live[j]->offset + live[j]->size > at) at = live[j]->offset + live[j]->size;
        }
        s[i].offset = at;
        if ((uint64_t)(at + s[i].size) > *arena) *arena = (uint64_t)(at + s[i].size);
        /* list it at the nodes that cover [start, end] exactly */
        for (int64_t l = leaves + s[i].start, r = leaves + s[i].end + 1; l < r; l >>= 1, r >>= 1) {
            if (l & 1) {
                ent[n_ent] = (seg_entry){i, head[l]};
                head[l++] = (int)n_ent++;
            }
            if (r & 1) {
                ent[n_ent] = (seg_entry){i, head[--r]};
                head[r] = (int)n_ent++;
            }
        }
    }
    free(head);
    free(ent);
    free(stamp);
    free(live);
    return KILN_OK;
}

int64_t *kn_memplan_signature(const kn_graph *g, kn_tensor *const *inputs, int *len) {
    int64_t *sig = malloc(sizeof(int64_t) * (size_t)(g->n_inputs * (KILN_MAX_RANK + 2) + 1));
    int n = 0;
    if (!sig) return NULL;
    for (int i = 0; i < g->n_inputs; i++) {
        const kn_tensor *t = inputs[i];
        if (!t || t->kind != KN_VALUE_TENSOR) {
            sig[n++] = -1;
            continue;
        }
        sig[n++] = (int64_t)t->dtype << 8 | t->rank;
        for (int d = 0; d < t->rank; d++) sig[n++] = t->dims[d];
    }
    *len = n;
    return sig;
}

kiln_status kn_memplan_build(const kn_graph *g, const kn_runtime *rt, const int64_t *sizes, kn_memplan **out) {
    *out = NULL;
    const int nv = g->n_values;
    bool *pinned = kn_memplan_pinned(g);
    int *last = malloc(sizeof(int) * (size_t)(nv ? nv : 1));
    int *root = malloc(sizeof(int) * (size_t)(nv ? nv : 1)), *slot_of = malloc(sizeof(int) * (size_t)(nv ? nv : 1));
    slot *slots = malloc(sizeof(slot) * (size_t)(nv ? nv : 1));
    kn_memplan *p = kn_memplan_new(nv);
    kiln_status st = KILN_OK;
    if (!pinned || !last || !root || !slot_of || !slots || !p) {
        st = KN_OOM();
        goto done;
    }
    for (int v = 0; v < nv; v++) last[v] = root[v] = slot_of[v] = -1;
    /* the execution order: live nodes in index order; a value is read up to its last reader */
    int step = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0 && n->inputs[k] < nv) last[n->inputs[k]] = step;
        step++;
    }
    int n_slots = 0;
    for (int i = 0, s = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (!kn_memplan_eligible(g, rt, v, pinned, sizes != NULL)) continue;
            int64_t bytes = sizes ? (sizes[v] + KN_MEMPLAN_ALIGN - 1) / KN_MEMPLAN_ALIGN * KN_MEMPLAN_ALIGN
                                  : kn_memplan_slot_bytes(&g->values[v].type);
            int u = n->n_inputs > 0 ? n->inputs[0] : -1;
            /* a view of a planned value nobody else reads takes its slot over (exec.c's take_as_view) */
            if (k == 0 && n->n_outputs == 1 && kn_exec_is_view(n) && u >= 0 && root[u] >= 0 && g->values[u].uses == 1 &&
                p->size[root[u]] >= bytes && g->values[v].type.dtype == g->values[u].type.dtype) {
                /* (a run that took the view allocated nothing for it: bytes 0, its input's slot) */
                bool twice = false;
                for (int j = 1; j < n->n_inputs; j++) twice |= n->inputs[j] == u;
                if (!twice) {
                    root[v] = root[u];
                    p->alias[v] = root[u];
                    slot *sl = &slots[slot_of[root[u]]];
                    if (last[v] > sl->end) sl->end = last[v];
                    p->n_aliases++;
                    continue;
                }
            }
            if (bytes <= 0) continue; /* a run made nothing of it (a view that copied, a branch not taken) */
            root[v] = v;
            p->size[v] = bytes;
            slot_of[v] = n_slots;
            /* a value nobody reads is still written: its slot lasts the step that makes it */
            slots[n_slots++] = (slot){v, s, last[v] > s ? last[v] : s, bytes, 0};
            p->unshared_bytes += (uint64_t)bytes;
        }
        s++;
    }
    if (n_slots == 0) goto done;
    st = place(slots, n_slots, &p->arena_bytes);
    if (st != KILN_OK) goto done;
    for (int i = 0; i < n_slots; i++) p->offset[slots[i].value] = slots[i].offset;
    for (int v = 0; v < nv; v++)
        if (p->alias[v] >= 0) {
            p->offset[v] = p->offset[p->alias[v]];
            p->size[v] = p->size[p->alias[v]];
        }
    p->n_planned = n_slots;
    *out = p;
    p = NULL;
done:
    kn_memplan_free(p);
    free(pinned);
    free(last);
    free(root);
    free(slot_of);
    free(slots);
    return st;
}

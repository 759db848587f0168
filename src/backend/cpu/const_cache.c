/* Derived forms of constants, per session (see const_cache.h). A small open-addressing hash
 * table keyed by (constant tensor, layout); a lookup per node run costs a lock and a probe. */
#include "backend/cpu/const_cache.h"

#include "backend/backend.h"
#include "exec/exec.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct const_entry {
    const kn_tensor *tensor; /* NULL: empty slot */
    kn_const_layout layout;
    void *data;
    size_t bytes;
} const_entry;

struct kn_cpu_state {
    pthread_mutex_t lock; /* a session runs one call at a time, but subgraphs may share it */
    const_entry *slots;
    size_t cap, used; /* cap is a power of two */
    bool bf16;        /* precision=bf16 (sgemm_bf16.h) */
};

void kn_cpu_state_set_bf16(kn_cpu_state *s, bool on) {
    if (s) s->bf16 = on;
}
bool kn_cpu_state_bf16(const kn_cpu_state *s) { return s && s->bf16; }

kiln_status kn_cpu_state_create(kn_cpu_state **out) {
    *out = NULL;
    kn_cpu_state *s = calloc(1, sizeof *s);
    if (!s) return KN_OOM();
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s);
        return KN_OOM();
    }
    *out = s;
    return KILN_OK;
}

void kn_cpu_state_destroy(kn_cpu_state *s) {
    if (!s) return;
    for (size_t i = 0; i < s->cap; i++) free(s->slots[i].data);
    free(s->slots);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static size_t key_hash(const kn_tensor *t, const kn_const_layout *l) {
    uint64_t h = (uint64_t)(uintptr_t)t * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)l->kind + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    for (int i = 0; i < 4; i++) h ^= (uint64_t)l->p[i] + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return (size_t)(h ^ (h >> 29));
}

static bool key_equal(const const_entry *e, const kn_tensor *t, const kn_const_layout *l) {
    return e->tensor == t && e->layout.kind == l->kind && !memcmp(e->layout.p, l->p, sizeof l->p);
}

/* The slot of the key, or the empty slot where it would go. */
static const_entry *probe(const kn_cpu_state *s, const kn_tensor *t, const kn_const_layout *l) {
    size_t i = key_hash(t, l) & (s->cap - 1);
    while (s->slots[i].tensor && !key_equal(&s->slots[i], t, l)) i = (i + 1) & (s->cap - 1);
    return &s->slots[i];
}

static bool grow(kn_cpu_state *s) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    const_entry *old = s->slots;
    size_t old_cap = s->cap;
    s->slots = calloc(cap, sizeof *s->slots);
    if (!s->slots) {
        s->slots = old;
        return false;
    }
    s->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].tensor) *probe(s, old[i].tensor, &old[i].layout) = old[i];
    free(old);
    return true;
}

/* The session's CPU state when this node runs inside a session, else NULL. */
static kn_cpu_state *state_of(const kn_kernel_ctx *c) {
    const kn_runtime *rt = c->exec ? c->exec->rt : NULL;
    if (!rt || rt->cpu < 0 || rt->cpu >= rt->n_backends || rt->backends[rt->cpu].ops != &kn_backend_cpu) return NULL;
    return rt->backends[rt->cpu].state;
}

/* The constant behind value v of g: its own, or for a body's reference to an enclosing graph's
 * value (an LSTM inside an If reading the model's weights), that value's, graph by graph
 * outwards (read-only: bodies run on several threads). */
static const kn_tensor *constant_of(const kn_graph *g, int v) {
    for (int depth = 0; depth < 64 && g && v >= 0 && v < g->n_values; depth++) {
        if (!g->values[v].is_outer) return g->values[v].constant;
        v = kn_graph_outer_lookup(g, v);
        g = g->parent;
    }
    return NULL;
}

/* Input i when it is a constant of the graph (or of a graph enclosing it), read as itself (not an
 * override of it). */
static const kn_tensor *constant_input(const kn_kernel_ctx *c, int i) {
    if (!c->graph || !c->node || i < 0 || i >= c->n_inputs || i >= c->node->n_inputs) return NULL;
    int v = c->node->inputs[i];
    if (v < 0 || v >= c->graph->n_values) return NULL;
    const kn_tensor *k = constant_of(c->graph, v);
    return k && c->in[i] == k && k->device == KN_DEVICE_HOST ? k : NULL;
}

bool kn_cpu_input_is_const(const kn_kernel_ctx *c, int i) { return constant_input(c, i) != NULL; }

const void *kn_cpu_const_derived(const kn_kernel_ctx *c, int input, const kn_const_layout *layout, size_t bytes,
                                 kn_const_make_fn make, const void *ctx) {
    kn_cpu_state *s = state_of(c);
    const kn_tensor *t = s ? constant_input(c, input) : NULL;
    if (!t) return NULL;
    void *data = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->cap && probe(s, t, layout)->tensor) {
        data = probe(s, t, layout)->data;
    } else if ((s->used + 1) * 2 <= s->cap || grow(s)) {
        size_t rounded = (bytes + 63) / 64 * 64;
        data = aligned_alloc(64, rounded ? rounded : 64);
        if (data) {
            make(ctx, data);
            const_entry *e = probe(s, t, layout);
            *e = (const_entry){t, *layout, data, bytes};
            s->used++;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return data;
}

/* Derived forms of derived forms (the bf16 copies of packed weights) are keyed by the address they
 * were made from, in the same table: the key's tensor field holds that address, which no tensor
 * can share while the form it points into lives, and the layout's kind is negated. */
const void *kn_cpu_const_rederived(kn_cpu_state *s, const void *base, const kn_const_layout *layout, size_t bytes,
                                   kn_const_make_fn make, const void *ctx) {
    if (!s || !base) return NULL;
    const kn_tensor *key = (const kn_tensor *)base;
    kn_const_layout lay = *layout;
    lay.kind = -1 - layout->kind;
    void *data = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->cap && probe(s, key, &lay)->tensor) {
        data = probe(s, key, &lay)->data;
    } else {
        /* first request: base must lie inside a form of this state (it then lives as long) */
        bool owned = false;
        const char *b = base;
        for (size_t i = 0; i < s->cap && !owned; i++) {
            const const_entry *e = &s->slots[i];
            owned = e->tensor && e->layout.kind >= 0 && b >= (const char *)e->data && b < (const char *)e->data + e->bytes;
        }
        if (owned && ((s->used + 1) * 2 <= s->cap || grow(s))) {
            size_t rounded = (bytes + 63) / 64 * 64;
            data = aligned_alloc(64, rounded ? rounded : 64);
            if (data) {
                make(ctx, data);
                const_entry *e = probe(s, key, &lay);
                *e = (const_entry){key, lay, data, bytes};
                s->used++;
            }
        }
    }
    pthread_mutex_unlock(&s->lock);
    return data;
}

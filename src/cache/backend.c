/* The backends' compiled-file sections.
 *
 * The CPU's section, "cpu.kernels", records where each node was placed and, for nodes on the CPU,
 * which kernel (table and entry) was chosen. Choosing again on load is cheap for the CPU, so the
 * section serves as a check: placement on a warm start must give what the cold start gave (a
 * difference means the build or the device changed in a way the key did not catch, and the entry
 * is rebuilt instead of run with different kernels). Device backends store their expensive
 * decisions (tuning results, compiled kernels, converted weights) the same way and use them. */
#include "cache/backend.h"

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "exec/memplan.h"
#include "exec/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOT_CPU 0xffffu

typedef struct kwalk {
    int cpu;     /* the runtime's CPU provider index */
    kn_buf *out; /* save */
    kn_rd *in;   /* load */
    uint32_t count;
    int depth;
} kwalk;

/* provider (8 bits), kernel table (8 bits), entry (16 bits; NOT_CPU for other providers) */
static uint32_t encode(const kn_node *n, int cpu) {
    uint32_t prov = (uint32_t)(n->provider & 0xff);
    if (n->provider != cpu || !n->kernel) return prov << 24 | 0xff0000u | NOT_CPU;
    size_t n_tables;
    const kn_cpu_kernel *const *tables = kn_cpu_tables(&n_tables); /* the level's in use (backend/cpu/isa.h) */
    for (size_t t = 0; t < n_tables; t++)
        for (const kn_cpu_kernel *k = tables[t]; k->op_type; k++)
            if (k == (const kn_cpu_kernel *)n->kernel)
                return prov << 24 | (uint32_t)t << 16 | (uint32_t)(k - tables[t]);
    return prov << 24 | 0xff0000u | NOT_CPU;
}

static kiln_status walk(const kn_graph *g, kwalk *w) {
    if (++w->depth > 64) return kn_error(KILN_ERR_CACHE, "section 'cpu.kernels': subgraphs nest too deep");
    char lbl[256];
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        uint32_t mine = encode(n, w->cpu);
        if (w->out) {
            kn_buf_u32(w->out, mine);
        } else {
            uint32_t rec = kn_rd_u32(w->in, "kernel");
            if (!kn_rd_ok(w->in)) return w->in->st;
            if (rec != mine)
                return kn_rd_fail(w->in, "kernel",
                                  "%s was placed on provider %u with kernel %u.%u when compiled, now on provider %u "
                                  "with kernel %u.%u",
                                  kn_node_label(n, lbl, sizeof lbl), rec >> 24, (rec >> 16) & 0xff, rec & 0xffff,
                                  mine >> 24, (mine >> 16) & 0xff, mine & 0xffff);
        }
        w->count++;
        for (int a = 0; a < n->n_attrs; a++) {
            const kn_attr *at = &n->attrs[a];
            if (at->type == KN_ATTR_GRAPH && at->g) KN_TRY(walk(at->g, w));
            if (at->type == KN_ATTR_GRAPHS)
                for (int k = 0; k < at->n; k++) KN_TRY(walk(at->graphs[k], w));
        }
    }
    w->depth--;
    return KILN_OK;
}

static kiln_status cpu_save(const kiln_session *s, kn_buf *out) {
    kn_buf body = {0};
    kwalk w = {s->rt ? s->rt->cpu : 0, &body, NULL, 0, 0};
    kiln_status st = walk(s->model->graph, &w);
    if (st == KILN_OK && body.oom) st = KN_OOM();
    if (st == KILN_OK) {
        kn_buf_u32(out, w.count);
        kn_buf_put(out, body.d, body.n);
    }
    kn_buf_free(&body);
    return st;
}

static kiln_status cpu_load(kiln_session *s, const uint8_t *data, size_t size, const char *file) {
    kn_rd r;
    kn_rd_init(&r, data, size, file, "cpu.kernels");
    uint32_t n = kn_rd_count(&r, 4, UINT32_MAX, "count");
    if (!kn_rd_ok(&r)) return r.st;
    kwalk w = {s->rt ? s->rt->cpu : 0, NULL, &r, 0, 0};
    KN_TRY(walk(s->model->graph, &w));
    if (w.count != n) return kn_rd_fail(&r, "count", "the section has %u kernel choices, the graph %u nodes", n, w.count);
    if (kn_rd_left(&r)) return kn_rd_fail(&r, "end", "%zu unexpected bytes after the last entry", kn_rd_left(&r));
    return KILN_OK;
}

/* ---- "cuda.tuning": the algorithm choices of the CUDA backend (src/backend/cuda/cuda_tuning.c)
 * as opaque records: count, then per record its key and its value, each as length + bytes. */

#define TUNING_PROVIDER "cuda"
#define TUNING_MAX_RECORDS (1u << 20)

static const kn_backend *session_backend(const kiln_session *s, const char *name) {
    if (!s->rt) return NULL;
    for (int i = 0; i < s->rt->n_backends; i++)
        if (s->rt->backends[i].ops && s->rt->backends[i].state && !strcmp(s->rt->backends[i].ops->name, name))
            return &s->rt->backends[i];
    return NULL;
}

static kiln_status tuning_save(const kiln_session *s, kn_buf *out) {
    const kn_backend *b = session_backend(s, TUNING_PROVIDER);
    if (!b || !b->ops->tuning_count) return KILN_OK;
    int n = b->ops->tuning_count(b->state, NULL);
    if (n <= 0) return KILN_OK; /* no section */
    kn_buf_u32(out, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        const void *key, *val;
        size_t kl, vl;
        if (!b->ops->tuning_record(b->state, i, &key, &kl, &val, &vl)) return KN_INTERNAL("a tuning record vanished while being saved");
        kn_buf_u32(out, (uint32_t)kl);
        kn_buf_put(out, key, kl);
        kn_buf_u32(out, (uint32_t)vl);
        kn_buf_put(out, val, vl);
    }
    return out->oom ? KN_OOM() : KILN_OK;
}

kiln_status kn_cache_tuning_parse(const uint8_t *data, size_t size, const char *file, kn_tuning_import_fn import,
                                  void *arg) {
    kn_rd r;
    kn_rd_init(&r, data, size, file, "cuda.tuning");
    uint32_t n = kn_rd_count(&r, 8, TUNING_MAX_RECORDS, "count");
    for (uint32_t i = 0; i < n && kn_rd_ok(&r); i++) {
        uint32_t kl = kn_rd_u32(&r, "key length");
        const uint8_t *key = kn_rd_bytes(&r, kl, "key");
        uint32_t vl = kn_rd_u32(&r, "value length");
        const uint8_t *val = kn_rd_bytes(&r, vl, "value");
        if (!kn_rd_ok(&r)) break;
        if (kl == 0) return kn_rd_fail(&r, "key length", "record %u has an empty key", i);
        if (import && import(arg, key, kl, val, vl) != KILN_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", kn_last_error());
            return kn_rd_fail(&r, "record", "record %u: %s", i, why);
        }
    }
    if (!kn_rd_ok(&r)) return r.st;
    if (kn_rd_left(&r)) return kn_rd_fail(&r, "end", "%zu unexpected bytes after the last record", kn_rd_left(&r));
    return KILN_OK;
}

static kiln_status tuning_load(kiln_session *s, const uint8_t *data, size_t size, const char *file) {
    /* checked whole even where no backend takes it (the key's options said the file was made
     * for such a setup, so the records are not needed; a malformed section is still an error) */
    const kn_backend *b = session_backend(s, TUNING_PROVIDER);
    if (!b || !b->ops->tuning_import) return kn_cache_tuning_parse(data, size, file, NULL, NULL);
    return kn_cache_tuning_parse(data, size, file, b->ops->tuning_import, b->state);
}

/* ---- "memory.plan": the main graph's memory plan (src/exec/memplan.h): the arena's bytes, the
 * planned values' bytes each on its own, the graph's value count, then per planned value: its id,
 * the value whose slot it takes over (-1: a slot of its own), its offset and its slot's bytes. */

#define PLAN_ENTRY_BYTES 24
#define PLAN_MAX_ARENA ((uint64_t)1 << 44)

static kiln_status memplan_save(const kiln_session *s, kn_buf *out) {
    const kn_memplan *p = s->rt ? s->rt->memplan : NULL;
    if (!p) return KILN_OK; /* nothing planned: no section */
    kn_buf_u64(out, p->arena_bytes);
    kn_buf_u64(out, p->unshared_bytes);
    kn_buf_u32(out, (uint32_t)p->n_values);
    kn_buf_u32(out, (uint32_t)(p->n_planned + p->n_aliases));
    /* the slots of their own first: a view's entry names one written before it */
    for (int pass = 0; pass < 2; pass++)
        for (int v = 0; v < p->n_values; v++) {
            if (p->offset[v] < 0 || (p->alias[v] >= 0) != (pass == 1)) continue;
            kn_buf_u32(out, (uint32_t)v);
            kn_buf_i32(out, p->alias[v]);
            kn_buf_u64(out, (uint64_t)p->offset[v]);
            kn_buf_u64(out, (uint64_t)p->size[v]);
        }
    return out->oom ? KN_OOM() : KILN_OK;
}

/* Every field checked against the graph before the plan is used: a value the plan may not cover,
 * a slot smaller than its value or outside the arena is an error (the entry is then rebuilt). */
static kiln_status memplan_parse(kn_rd *r, const kn_graph *g, const kn_runtime *rt, kn_memplan *p) {
    char lbl[256];
    uint64_t arena = kn_rd_u64(r, "arena bytes"), unshared = kn_rd_u64(r, "unshared bytes");
    uint32_t nv = kn_rd_u32(r, "value count");
    if (!kn_rd_ok(r)) return r->st;
    if (nv != (uint32_t)g->n_values)
        return kn_rd_fail(r, "value count", "the plan is for %u values, the graph has %d", nv, g->n_values);
    if (arena == 0 || arena > PLAN_MAX_ARENA || arena % KN_MEMPLAN_ALIGN)
        return kn_rd_fail(r, "arena bytes", "%llu is not a usable arena size", (unsigned long long)arena);
    uint32_t n = kn_rd_count(r, PLAN_ENTRY_BYTES, nv, "entry count");
    if (!kn_rd_ok(r)) return r->st;
    bool *pinned = kn_memplan_pinned(g);
    if (!pinned) return KN_OOM();
    p->arena_bytes = arena;
    uint64_t sum = 0;
    kiln_status st = KILN_OK;
    for (uint32_t i = 0; i < n && st == KILN_OK; i++) {
        uint32_t v = kn_rd_u32(r, "value");
        int32_t alias = kn_rd_i32(r, "alias");
        uint64_t off = kn_rd_u64(r, "offset"), size = kn_rd_u64(r, "size");
        if (!kn_rd_ok(r)) {
            st = r->st;
            break;
        }
        if (v >= nv || p->offset[v] >= 0) {
            st = kn_rd_fail(r, "value", "entry %u: value %u is out of range or planned twice", i, v);
            break;
        }
        if (!kn_memplan_eligible(g, rt, (int)v, pinned, false)) {
            const kn_value *val = &g->values[v];
            const kn_node *prod = val->producer >= 0 && val->producer < g->n_nodes ? &g->nodes[val->producer] : NULL;
            st = kn_rd_fail(r, "value", "entry %u: value '%s'%s%s cannot be planned here (not a host intermediate of "
                            "static shape)", i, val->name, prod ? " of " : "", prod ? kn_node_label(prod, lbl, sizeof lbl) : "");
            break;
        }
        int64_t need = kn_memplan_slot_bytes(&g->values[v].type);
        if (alias < 0) {
            if (size != (uint64_t)need || off % KN_MEMPLAN_ALIGN || off > arena || size > arena - off) {
                st = kn_rd_fail(r, "slot", "entry %u: value '%s' of %lld bytes has a slot of %llu at %llu in an arena of "
                                "%llu", i, g->values[v].name, (long long)need, (unsigned long long)size,
                                (unsigned long long)off, (unsigned long long)arena);
                break;
            }
            sum += size;
            p->n_planned++;
        } else if ((uint32_t)alias >= nv || (uint32_t)alias == v) {
            st = kn_rd_fail(r, "alias", "entry %u: value '%s' takes over the slot of value %d, out of range", i,
                            g->values[v].name, alias);
            break;
        } else {
            p->n_aliases++;
        }
        p->offset[v] = (int64_t)off;
        p->size[v] = (int64_t)size;
        p->alias[v] = alias;
    }
    free(pinned);
    if (st != KILN_OK) return st;
    /* a view's slot (in any order of the entries): one of its own, at that offset, large enough */
    for (int v = 0; v < g->n_values; v++) {
        int32_t a = p->alias[v];
        if (p->offset[v] < 0 || a < 0) continue;
        if (p->offset[a] < 0 || p->alias[a] >= 0 || p->offset[v] != p->offset[a] || p->size[v] != p->size[a] ||
            kn_memplan_slot_bytes(&g->values[v].type) > p->size[v])
            return kn_rd_fail(r, "alias", "value '%s' takes over a slot that is not a planned one of its own or does not "
                              "hold it", g->values[v].name);
    }
    if (sum != unshared)
        return kn_rd_fail(r, "unshared bytes", "the slots add up to %llu bytes, the section says %llu",
                          (unsigned long long)sum, (unsigned long long)unshared);
    p->unshared_bytes = unshared;
    if (kn_rd_left(r)) return kn_rd_fail(r, "end", "%zu unexpected bytes after the last entry", kn_rd_left(r));
    return KILN_OK;
}

static kiln_status memplan_load(kiln_session *s, const uint8_t *data, size_t size, const char *file) {
    if (!s->rt) return KILN_OK;
    const kn_graph *g = s->model->graph;
    kn_memplan *p = kn_memplan_new(g->n_values);
    if (!p) return KN_OOM();
    kn_rd r;
    kn_rd_init(&r, data, size, file, "memory.plan");
    kiln_status st = memplan_parse(&r, g, s->rt, p);
    if (st != KILN_OK) {
        kn_memplan_free(p);
        return st;
    }
    kn_memplan_free(s->rt->memplan);
    s->rt->memplan = p;
    return KILN_OK;
}

const kn_cache_backend kn_cache_backends[] = {
    {"cpu.kernels", cpu_save, cpu_load},
    {"cuda.tuning", tuning_save, tuning_load},
    {"memory.plan", memplan_save, memplan_load},
    {0},
};

int kn_cache_tuning_made(const kiln_session *s) {
    int made = -1;
    for (int i = 0; s->rt && i < s->rt->n_backends; i++) {
        const kn_backend *b = &s->rt->backends[i];
        int here = 0;
        if (b->ops && b->ops->tuning_count && b->state) {
            b->ops->tuning_count(b->state, &here);
            made = (made < 0 ? 0 : made) + here;
        }
    }
    return made;
}

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

#include <stdio.h>
#include <string.h>

static const kn_cpu_kernel *const kn_sect_cpu_tables[] = {
#define KN_FAMILY(name) kn_cpu_##name,
    KN_OP_FAMILIES
#undef KN_FAMILY
};
#define N_CPU_TABLES (sizeof kn_sect_cpu_tables / sizeof kn_sect_cpu_tables[0])
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
    for (size_t t = 0; t < N_CPU_TABLES; t++)
        for (const kn_cpu_kernel *k = kn_sect_cpu_tables[t]; k->op_type; k++)
            if (k == (const kn_cpu_kernel *)n->kernel)
                return prov << 24 | (uint32_t)t << 16 | (uint32_t)(k - kn_sect_cpu_tables[t]);
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

const kn_cache_backend kn_cache_backends[] = {
    {"cpu.kernels", cpu_save, cpu_load},
    {"cuda.tuning", tuning_save, tuning_load},
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

#include "exec/kernel.h"

#include "exec/exec.h"
#include "util/limits.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kiln_status kn_ctx_output(kn_kernel_ctx *c, int i, kiln_dtype dtype, int rank, const int64_t *dims,
                          kn_tensor **out) {
    if (i < 0 || i >= c->n_outputs) return KN_INTERNAL("output index out of range");
    kn_tensor *t = c->out[i];
    if (t && t->kind == KN_VALUE_TENSOR && t->dtype == dtype && t->rank == rank &&
        (rank == 0 || !memcmp(t->dims, dims, sizeof(int64_t) * (size_t)rank))) {
        *out = t;
        return KILN_OK;
    }
    kn_tensor *n;
    kiln_status s = kn_tensor_new(dtype, rank, dims, &n);
    if (s != KILN_OK) {
        char lbl[256];
        return kn_error_prefix(s, "%s: output %d: ", kn_node_label(c->node, lbl, sizeof lbl), i);
    }
    kn_tensor_free(t);
    c->out[i] = n;
    *out = n;
    return KILN_OK;
}

/* A prepared block: its owner (tag, node), its key, then the data. */
typedef struct prep_block {
    const void *tag;
    const kn_node *node;
    size_t key_bytes, bytes;
    /* key bytes, then data bytes (max_align_t-aligned) */
} prep_block;

static size_t prep_key_room(size_t key_bytes) {
    const size_t a = _Alignof(max_align_t);
    return (key_bytes + a - 1) / a * a;
}

static unsigned char *prep_key(prep_block *b) { return (unsigned char *)b + prep_key_room(sizeof *b); }

const void *kn_ctx_prep_get(const kn_kernel_ctx *c, const void *tag, const void *key, size_t key_bytes) {
    prep_block *b = c && c->prep ? *c->prep : NULL;
    if (!b || b->tag != tag || b->node != c->node || b->key_bytes != key_bytes) return NULL;
    unsigned char *k = prep_key(b);
    if (key_bytes && memcmp(k, key, key_bytes)) return NULL;
    return k + prep_key_room(key_bytes);
}

void kn_ctx_prep_put(kn_kernel_ctx *c, const void *tag, const void *key, size_t key_bytes, const void *data,
                     size_t bytes) {
    if (!c || !c->prep) return;
    size_t head = prep_key_room(sizeof(prep_block)), kr = prep_key_room(key_bytes);
    prep_block *b = malloc(head + kr + bytes);
    if (!b) return; /* prepared again at the next call */
    b->tag = tag;
    b->node = c->node;
    b->key_bytes = key_bytes;
    b->bytes = bytes;
    unsigned char *k = prep_key(b);
    if (key_bytes) memcpy(k, key, key_bytes);
    if (bytes) memcpy(k + kr, data, bytes);
    free(*c->prep);
    *c->prep = b;
}

kiln_status kn_kernel_error(const kn_kernel_ctx *c, kiln_status status, const char *fmt, ...) {
    char lbl[256], msg[1024], shapes[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t used = 0;
    shapes[0] = 0;
    for (int i = 0; i < c->n_inputs && used < sizeof shapes; i++) {
        char d[256];
        used += (size_t)snprintf(shapes + used, sizeof shapes - used, "%s%s", i ? ", " : "",
                                 c->in[i] ? kn_tensor_describe(c->in[i], d, sizeof d) : "(none)");
    }
    return kn_error(status, "%s: %s (inputs: %s)", kn_node_label(c->node, lbl, sizeof lbl), msg, shapes);
}

/* The run a kernel call belongs to (subgraph runs share their parent's), or NULL. */
static kn_run_ctx *run_of(const kn_kernel_ctx *c) { return c && c->exec ? c->exec->run : NULL; }

kiln_status kn_ctx_scratch(kn_kernel_ctx *c, size_t bytes, const char *what, void **out) {
    *out = NULL;
    char lbl[256];
    const char *node = c && c->node ? kn_node_label(c->node, lbl, sizeof lbl) : "a kernel";
    const uint64_t limit = kn_tensor_bytes_limit();
    if ((uint64_t)bytes > limit || bytes > (size_t)INT64_MAX - 64)
        return kn_error(KILN_ERR_OUT_OF_MEMORY,
                        "%s: %s needs %llu bytes of scratch memory, more than the tensor size limit of %llu bytes "
                        "(the machine's memory, or KILN_MAX_TENSOR_BYTES)",
                        node, what, (unsigned long long)bytes, (unsigned long long)limit);
    kn_run_ctx *r = run_of(c);
    if (r && r->mem_limit) {
        /* several threads of the call may ask at once: the count is updated atomically */
        int64_t live = __atomic_add_fetch(&r->mem_live, (int64_t)bytes, __ATOMIC_RELAXED);
        if (live > r->mem_limit) {
            __atomic_sub_fetch(&r->mem_live, (int64_t)bytes, __ATOMIC_RELAXED);
            return kn_error(KILN_ERR_OUT_OF_MEMORY,
                            "%s: %s needs %llu bytes of scratch memory, and the run already holds %lld bytes: over the "
                            "session's memory limit of %lld bytes (kiln_session_options_set_memory_limit)",
                            node, what, (unsigned long long)bytes, (long long)(live - (int64_t)bytes),
                            (long long)r->mem_limit);
        }
        int64_t peak = __atomic_load_n(&r->mem_peak, __ATOMIC_RELAXED);
        while (live > peak &&
               !__atomic_compare_exchange_n(&r->mem_peak, &peak, live, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
    }
    size_t n = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, n ? n : 64);
    if (!p) {
        if (r && r->mem_limit) __atomic_sub_fetch(&r->mem_live, (int64_t)bytes, __ATOMIC_RELAXED);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %s (%llu bytes of scratch memory)", node, what,
                        (unsigned long long)bytes);
    }
    *out = p;
    return KILN_OK;
}

void kn_ctx_scratch_free(kn_kernel_ctx *c, void *p, size_t bytes) {
    if (!p) return;
    free(p);
    kn_run_ctx *r = run_of(c);
    if (r && r->mem_limit) __atomic_sub_fetch(&r->mem_live, (int64_t)bytes, __ATOMIC_RELAXED);
}

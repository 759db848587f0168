/* Open-addressing hash map from (pointer, length) names to ints, for the loader's name lookups. */
#include "onnx/loader_internal.h"

#include <stdlib.h>
#include <string.h>

static uint32_t hash_name(const char *s, size_t len) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)s[i];
        h *= 16777619u;
    }
    return h;
}

void kn_nmap_free(kn_nmap *m) {
    free(m->e);
    m->e = NULL;
    m->cap = m->n = 0;
}

kn_nmap_entry *kn_nmap_get(const kn_nmap *m, const char *key, size_t len) {
    if (!m->cap) return NULL;
    uint32_t h = hash_name(key, len);
    for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        kn_nmap_entry *e = &m->e[i];
        if (!e->key) return NULL;
        if (e->hash == h && e->len == len && (len == 0 || !memcmp(e->key, key, len))) return e;
    }
}

static int grow(kn_nmap *m) {
    size_t nc = m->cap ? m->cap * 2 : 64;
    kn_nmap_entry *ne = calloc(nc, sizeof *ne);
    if (!ne) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        kn_nmap_entry *e = &m->e[i];
        if (!e->key) continue;
        size_t j = e->hash & (nc - 1);
        while (ne[j].key) j = (j + 1) & (nc - 1);
        ne[j] = *e;
    }
    free(m->e);
    m->e = ne;
    m->cap = nc;
    return 0;
}

int kn_nmap_put(kn_nmap *m, const char *key, size_t len, int val) {
    if (len > UINT32_MAX) return -1;
    kn_nmap_entry *e = kn_nmap_get(m, key, len);
    if (e) {
        e->val = val;
        return 0;
    }
    if ((m->n + 1) * 2 > m->cap && grow(m)) return -1;
    uint32_t h = hash_name(key, len);
    size_t i = h & (m->cap - 1);
    while (m->e[i].key) i = (i + 1) & (m->cap - 1);
    /* an empty key still needs a non-NULL pointer to mark the slot used */
    m->e[i].key = key ? key : "";
    m->e[i].len = (uint32_t)len;
    m->e[i].hash = h;
    m->e[i].val = val;
    m->n++;
    return 0;
}

#include "util/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct kn_arena_block {
    kn_arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void kn_arena_init(kn_arena *a) { a->head = NULL; }

void kn_arena_free(kn_arena *a) {
    kn_arena_block *b = a->head;
    while (b) {
        kn_arena_block *n = b->next;
        free(b);
        b = n;
    }
    a->head = NULL;
}

void *kn_arena_alloc(kn_arena *a, size_t size) {
    size = (size + 15) & ~(size_t)15;
    if (size == 0) size = 16;
    kn_arena_block *b = a->head;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > 65536 ? size : 65536;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->used = 0;
        b->cap = cap;
        /* keep the big one-off block behind the current one so its free space is not lost */
        if (a->head && size > 65536) {
            b->next = a->head->next;
            a->head->next = b;
        } else {
            b->next = a->head;
            a->head = b;
        }
    }
    void *p = b->data + b->used;
    b->used += size;
    memset(p, 0, size);
    return p;
}

char *kn_arena_strndup(kn_arena *a, const char *s, size_t len) {
    if (len == SIZE_MAX) return NULL;
    char *p = kn_arena_alloc(a, len + 1);
    if (!p) return NULL;
    if (len) memcpy(p, s, len);
    p[len] = 0;
    return p;
}

char *kn_arena_strdup(kn_arena *a, const char *s) { return kn_arena_strndup(a, s, strlen(s)); }

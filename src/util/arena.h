/* A bump allocator for data that lives as long as its owner (a model's strings and arrays). */
#ifndef KN_ARENA_H
#define KN_ARENA_H

#include <stddef.h>

typedef struct kn_arena_block kn_arena_block;

typedef struct kn_arena {
    kn_arena_block *head;
} kn_arena;

void kn_arena_init(kn_arena *a);
void kn_arena_free(kn_arena *a);
/* Zeroed, 16-byte aligned; NULL on out of memory. */
void *kn_arena_alloc(kn_arena *a, size_t size);
/* Copies len bytes and appends a NUL. */
char *kn_arena_strndup(kn_arena *a, const char *s, size_t len);
char *kn_arena_strdup(kn_arena *a, const char *s);

#endif

#include "util/thread_buffer.h"

#include <stdlib.h>

typedef struct block {
    size_t cap;
    void *data;
} block;

static pthread_mutex_t make_lock = PTHREAD_MUTEX_INITIALIZER;

static void block_free(void *p) {
    block *t = p;
    free(t->data);
    free(t);
}

void *kn_thread_buffer_get(kn_thread_buffer *b, size_t bytes) {
    int state = __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);
    if (state == 0) {
        pthread_mutex_lock(&make_lock);
        if ((state = b->state) == 0) {
            state = pthread_key_create(&b->key, block_free) == 0 ? 1 : -1;
            __atomic_store_n(&b->state, state, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&make_lock);
    }
    if (state < 0) return NULL;
    block *t = pthread_getspecific(b->key);
    if (!t) {
        if (!(t = calloc(1, sizeof *t))) return NULL;
        if (pthread_setspecific(b->key, t) != 0) {
            free(t);
            return NULL;
        }
    }
    if (t->cap < bytes) {
        void *d = aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!d) return NULL;
        free(t->data);
        t->data = d;
        t->cap = bytes;
    }
    return t->data;
}

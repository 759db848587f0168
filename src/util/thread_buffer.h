/* Scratch memory per thread, kept between calls: the packing and tile buffers of the CPU kernels,
 * which mapping and faulting afresh on every call cost as much as a small product. Each buffer is
 * a static kn_thread_buffer; every thread gets its own block from it, grown as needed and freed
 * when the thread exits. */
#ifndef KN_UTIL_THREAD_BUFFER_H
#define KN_UTIL_THREAD_BUFFER_H

#include <pthread.h>
#include <stddef.h>

typedef struct kn_thread_buffer {
    int state; /* 0: key not made yet, 1: made, -1: pthread_key_create failed */
    pthread_key_t key;
} kn_thread_buffer;

#define KN_THREAD_BUFFER_INIT {0}

/* The calling thread's block of b, at least `bytes` long and 64-byte aligned; its contents are
 * undefined after it grows. NULL when out of memory. */
void *kn_thread_buffer_get(kn_thread_buffer *b, size_t bytes);

#endif

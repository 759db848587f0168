#include "util/threadpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

/* Workers sleep on a condition variable; a job is published with a generation counter and its
 * chunks are claimed with an atomic counter, so uneven chunks balance themselves. */
struct kn_threadpool {
    int n_threads; /* workers including the caller */
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    uint64_t generation;
    int stop;
    /* current job */
    kn_range_fn fn;
    void *arg;
    int64_t n, chunk, n_chunks;
    int64_t next_chunk; /* guarded by atomics */
    int active;         /* workers still inside the job */
};

static void run_chunks(kn_threadpool *p) {
    for (;;) {
        int64_t c = __atomic_fetch_add(&p->next_chunk, 1, __ATOMIC_RELAXED);
        if (c >= p->n_chunks) break;
        int64_t b = c * p->chunk, e = b + p->chunk;
        if (e > p->n) e = p->n;
        p->fn(p->arg, b, e);
    }
}

static void *worker_main(void *arg) {
    kn_threadpool *p = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_chunks(p);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

kiln_status kn_threadpool_create(int threads, kn_threadpool **out) {
    *out = NULL;
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    if (threads > 256) threads = 256;
    kn_threadpool *p = calloc(1, sizeof *p);
    if (!p) return KN_OOM();
    p->n_threads = threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (threads > 1) {
        p->workers = calloc((size_t)threads - 1, sizeof *p->workers);
        if (!p->workers) {
            free(p);
            return KN_OOM();
        }
        for (int i = 0; i < threads - 1; i++) {
            if (pthread_create(&p->workers[i], NULL, worker_main, p) != 0) {
                p->n_threads = i + 1; /* run with what started */
                break;
            }
        }
    }
    *out = p;
    return KILN_OK;
}

void kn_threadpool_destroy(kn_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads - 1; i++) pthread_join(p->workers[i], NULL);
    free(p->workers);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p);
}

int kn_threadpool_size(const kn_threadpool *p) { return p ? p->n_threads : 1; }

void kn_parallel_for(kn_threadpool *p, int64_t n, int64_t grain, kn_range_fn fn, void *arg) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t max_chunks = n / grain;
    if (!p || p->n_threads <= 1 || max_chunks <= 1) {
        fn(arg, 0, n);
        return;
    }
    /* a few chunks per thread so a slow chunk does not hold the others */
    int64_t n_chunks = (int64_t)p->n_threads * 4;
    if (n_chunks > max_chunks) n_chunks = max_chunks;
    int64_t chunk = (n + n_chunks - 1) / n_chunks;
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->chunk = chunk;
    p->n_chunks = (n + chunk - 1) / chunk;
    p->next_chunk = 0;
    p->active = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p);
    pthread_mutex_lock(&p->mu);
    while (p->active > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

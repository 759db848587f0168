/* The thread pool (util/threadpool.c): every chunk of every parallel loop runs exactly once, and
 * before kn_parallel_for returns, under back-to-back loops of changing sizes with more threads
 * than cores (workers preempted in the middle of a loop, late for the next one). A worker late
 * for a finished loop once read the next loop's fields, ran one of its chunks on the side and
 * counted it done, so a caller could return with a chunk still running (vit_tiny's CPU outputs
 * changed from run to run at 16 threads). */
#include "unit.h"
#include "util/threadpool.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct count_job {
    int *hits; /* per element: how often a chunk covered it */
} count_job;

static void count_range(void *arg, int64_t b, int64_t e) {
    count_job *j = arg;
    for (int64_t i = b; i < e; i++) __atomic_add_fetch(&j->hits[i], 1, __ATOMIC_RELAXED);
}

KN_TEST(threadpool_every_chunk_once_before_return) {
    kn_threadpool *pool = NULL;
    CHECK_STATUS(kn_threadpool_create(16, &pool), KILN_OK);
    enum { MAX_N = 700, LOOPS = 100000 };
    int *hits = calloc(MAX_N, sizeof *hits);
    uint32_t seed = 12345;
    int bad = 0;
    for (int loop = 0; loop < LOOPS && !bad; loop++) {
        seed = seed * 1664525u + 1013904223u;
        const int64_t n = 1 + (int64_t)(seed >> 8) % MAX_N; /* a new chunk count each loop */
        for (int64_t i = 0; i < n; i++) hits[i] = 0;
        count_job j = {hits};
        kn_parallel_for(pool, n, 1, count_range, &j);
        for (int64_t i = 0; i < n && !bad; i++) {
            const int h = __atomic_load_n(&hits[i], __ATOMIC_RELAXED);
            if (h != 1) {
                kn_unit_fail(__FILE__, __LINE__, "loop %d over %lld elements: element %lld covered %d times when the loop returned",
                             loop, (long long)n, (long long)i, h);
                bad = 1;
            }
        }
    }
    kn_threadpool_destroy(pool);
    free(hits);
}

/* Loops of fewer chunks than threads (a tensor of a few hundred kilobytes at 16 threads): every
 * element still covered once before the return, and at most one thread a chunk takes part (the
 * others used to race for the first chunks, so a chunk ran on whichever core got there first). */
typedef struct who_job {
    int *hits;
    pthread_t who[64];
    int n_who; /* atomic */
} who_job;

static void who_range(void *arg, int64_t b, int64_t e) {
    who_job *j = arg;
    for (int64_t i = b; i < e; i++) __atomic_add_fetch(&j->hits[i], 1, __ATOMIC_RELAXED);
    const int k = __atomic_fetch_add(&j->n_who, 1, __ATOMIC_ACQ_REL);
    if (k < 64) j->who[k] = pthread_self();
}

KN_TEST(threadpool_few_chunks_few_threads) {
    kn_threadpool *pool = NULL;
    CHECK_STATUS(kn_threadpool_create(16, &pool), KILN_OK);
    enum { MAX_N = 5000, LOOPS = 20000 };
    int *hits = calloc(MAX_N, sizeof *hits);
    uint32_t seed = 777;
    int bad = 0, n_two = 0;
    pthread_t two[16];
    for (int loop = 0; loop < LOOPS && !bad; loop++) {
        seed = seed * 1664525u + 1013904223u;
        const int64_t n = 64 + (int64_t)(seed >> 8) % (MAX_N - 64);
        const int64_t chunks_max = 2 + (int64_t)(seed >> 20) % 20; /* n / grain: 2 .. 21 chunks */
        const int64_t grain = n / chunks_max;
        for (int64_t i = 0; i < n; i++) hits[i] = 0;
        who_job j = {.hits = hits};
        kn_parallel_for(pool, n, grain, who_range, &j);
        for (int64_t i = 0; i < n && !bad; i++) {
            const int h = __atomic_load_n(&hits[i], __ATOMIC_RELAXED);
            if (h != 1) {
                kn_unit_fail(__FILE__, __LINE__, "loop %d over %lld elements, grain %lld: element %lld covered %d times",
                             loop, (long long)n, (long long)grain, (long long)i, h);
                bad = 1;
            }
        }
        /* a loop of 2 chunks runs on the caller and worker 1 only, whichever loop it is */
        if (j.n_who == 2)
            for (int w = 0; w < 2; w++) {
                int seen = 0;
                for (int b = 0; b < n_two && !seen; b++) seen = pthread_equal(j.who[w], two[b]);
                if (!seen && n_two < 16) two[n_two++] = j.who[w];
            }
    }
    if (!bad && n_two > 2) kn_unit_fail(__FILE__, __LINE__, "loops of 2 chunks ran on %d different threads", n_two);
    kn_threadpool_destroy(pool);
    free(hits);
}

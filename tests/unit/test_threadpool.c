/* The thread pool (util/threadpool.c): every chunk of every parallel loop runs exactly once, and
 * before kn_parallel_for returns, under back-to-back loops of changing sizes with more threads
 * than cores (workers preempted in the middle of a loop, late for the next one). A worker late
 * for a finished loop once read the next loop's fields, ran one of its chunks on the side and
 * counted it done, so a caller could return with a chunk still running (vit_tiny's CPU outputs
 * changed from run to run at 16 threads). */
#include "unit.h"
#include "util/threadpool.h"

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

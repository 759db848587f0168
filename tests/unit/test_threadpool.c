/* The thread pool (util/threadpool.c): every chunk of every parallel loop runs exactly once, and
 * before kn_parallel_for returns, under back-to-back loops of changing sizes with more threads
 * than cores (workers preempted in the middle of a loop, late for the next one). A worker late
 * for a finished loop once read the next loop's fields, ran one of its chunks on the side and
 * counted it done, so a caller could return with a chunk still running (vit_tiny's CPU outputs
 * changed from run to run at 16 threads). */
#include "unit.h"
#include "util/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Short loops after pauses long enough for the workers to fall asleep (a caller that runs a model
 * now and then), at 1 to 4 threads: every element once before the return, loops of fewer chunks
 * than threads among them; a loop started inside a chunk runs whole on that chunk's thread; and a
 * worker runs its chunks with the affinity it started with (it sleeps narrowed off the caller's
 * CPU, util/threadpool.c, and must put the rest back when it wakes: the check sees that where the
 * process may use as many CPUs as the pool has threads, 2 threads on the 2-core box). A loop of one chunk runs on the caller outside the pool, so a
 * loop inside it may use the pool: only checked for coverage. */
typedef struct pause_job {
    int *hits;
    kn_threadpool *pool;
    int nested;       /* per chunk: a loop of its own over nest[] */
    int *nest_hits;   /* n * 8 counters: element i's nested elements 8i .. 8i+7 */
    pthread_t caller;
    int affinity_bad; /* atomic: chunks run with a mask other than `start` */
    int nested_bad;   /* atomic: nested chunks that ran on another thread */
#if defined(__linux__)
    cpu_set_t start;
#endif
} pause_job;

typedef struct nest_arg {
    pause_job *j;
    pthread_t outer;
    int64_t base; /* the first of the chunk's nested counters */
} nest_arg;

static void nest_range(void *arg, int64_t b, int64_t e) {
    nest_arg *a = arg;
    if (!pthread_equal(pthread_self(), a->outer)) __atomic_add_fetch(&a->j->nested_bad, 1, __ATOMIC_RELAXED);
    for (int64_t i = b; i < e; i++) __atomic_add_fetch(&a->j->nest_hits[a->base + i], 1, __ATOMIC_RELAXED);
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static void pause_range(void *arg, int64_t b, int64_t e) {
    pause_job *j = arg;
    for (int64_t i = b; i < e; i++) __atomic_add_fetch(&j->hits[i], 1, __ATOMIC_RELAXED);
    /* 20 us a chunk: long enough for a woken worker to join the loop before the caller has taken
     * every chunk (else the affinity check below would rarely see a worker's chunk) */
    for (const double t0 = now_us(); now_us() - t0 < 20;) {
    }
#if defined(__linux__)
    cpu_set_t now;
    if (sched_getaffinity(0, sizeof now, &now) == 0 && !CPU_EQUAL(&now, &j->start))
        __atomic_add_fetch(&j->affinity_bad, 1, __ATOMIC_RELAXED);
#endif
    if (j->nested) {
        /* the nested loop covers this chunk's 8 counters per element, on this thread */
        nest_arg a = {j, pthread_self(), b * 8};
        kn_parallel_for(j->pool, (e - b) * 8, 1, nest_range, &a);
    }
}

KN_TEST(threadpool_loops_after_sleeps_1_to_4_threads) {
    enum { MAX_N = 4096, LOOPS = 48 };
    int *hits = calloc(MAX_N, sizeof *hits);
    int *nest_hits = calloc(MAX_N * 8, sizeof *nest_hits);
    for (int threads = 1; threads <= 4; threads++) {
        kn_threadpool *pool = NULL;
        CHECK_STATUS(kn_threadpool_create(threads, &pool), KILN_OK);
        uint32_t seed = 4242u + (uint32_t)threads;
        int bad = 0;
        for (int loop = 0; loop < LOOPS && !bad; loop++) {
            /* 0, 0.2 and 3 ms: the last past the workers' spinning, so they sleep and are woken */
            const long pause_us = loop % 3 == 0 ? 3000 : loop % 3 == 1 ? 200 : 0;
            if (pause_us) {
                struct timespec ts = {0, pause_us * 1000};
                nanosleep(&ts, NULL);
            }
            seed = seed * 1664525u + 1013904223u;
            const int64_t chunks = 1 + (int64_t)(seed >> 20) % (2 * threads + 2); /* fewer than threads, too */
            const int64_t n = chunks * (1 + (int64_t)(seed >> 8) % (MAX_N / 12));
            const int nested = loop % 4 == 3;
            memset(hits, 0, (size_t)n * sizeof *hits);
            pause_job j = {.hits = hits, .pool = pool, .nested = nested, .nest_hits = nest_hits,
                           .caller = pthread_self()};
            if (nested) memset(nest_hits, 0, (size_t)n * 8 * sizeof *nest_hits);
#if defined(__linux__)
            CHECK(sched_getaffinity(0, sizeof j.start, &j.start) == 0);
#endif
            kn_parallel_for(pool, n, n / chunks, pause_range, &j);
            for (int64_t i = 0; i < n && !bad; i++) {
                const int h = __atomic_load_n(&hits[i], __ATOMIC_RELAXED);
                int hn = 1;
                for (int k = 0; nested && k < 8 && hn == 1; k++) hn = __atomic_load_n(&nest_hits[i * 8 + k], __ATOMIC_RELAXED);
                if (h != 1 || hn != 1) {
                    kn_unit_fail(__FILE__, __LINE__,
                                 "%d threads, loop %d (%lld elements, %lld chunks%s): element %lld covered %d times, nested %d",
                                 threads, loop, (long long)n, (long long)chunks, nested ? ", nested loops" : "",
                                 (long long)i, h, hn);
                    bad = 1;
                }
            }
            if (!bad && j.affinity_bad) {
                kn_unit_fail(__FILE__, __LINE__, "%d threads, loop %d: %d chunks ran with an affinity other than the caller's",
                             threads, loop, j.affinity_bad);
                bad = 1;
            }
            if (!bad && chunks > 1 && j.nested_bad) {
                kn_unit_fail(__FILE__, __LINE__, "%d threads, loop %d: %d nested chunks left their chunk's thread",
                             threads, loop, j.nested_bad);
                bad = 1;
            }
        }
        kn_threadpool_destroy(pool);
    }
    free(hits);
    free(nest_hits);
}

/* KILN_POOL_PIN=1 (a measurement switch): each worker runs on one CPU of its own, never the one
 * the pool's creator was on, and the loops still cover every element once. */
#if defined(__linux__)
typedef struct pin_job {
    int *hits;
    pthread_t caller;
    int worker_cpus[64]; /* per worker seen: the CPUs its affinity allows, as a count, and which */
    int worker_only[64];
    pthread_t workers[64];
    int n_workers; /* under mu */
    pthread_mutex_t mu;
} pin_job;

static void pin_range(void *arg, int64_t b, int64_t e) {
    pin_job *j = arg;
    for (int64_t i = b; i < e; i++) __atomic_add_fetch(&j->hits[i], 1, __ATOMIC_RELAXED);
    if (pthread_equal(pthread_self(), j->caller)) return;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    int only = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) only = c;
    pthread_mutex_lock(&j->mu);
    int k = 0;
    while (k < j->n_workers && !pthread_equal(j->workers[k], pthread_self())) k++;
    if (k == j->n_workers && k < 64) {
        j->workers[k] = pthread_self();
        j->worker_cpus[k] = CPU_COUNT(&set);
        j->worker_only[k] = only;
        j->n_workers++;
    }
    pthread_mutex_unlock(&j->mu);
}

KN_TEST(threadpool_pinned_workers_one_cpu_each) {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 2) {
        kn_unit_skip("fewer than 2 CPUs allowed");
        return;
    }
    const int threads = CPU_COUNT(&allowed) < 4 ? CPU_COUNT(&allowed) : 4;
    const int creator_cpu = sched_getcpu();
    setenv("KILN_POOL_PIN", "1", 1);
    kn_threadpool *pool = NULL;
    CHECK_STATUS(kn_threadpool_create(threads, &pool), KILN_OK);
    unsetenv("KILN_POOL_PIN");
    enum { N = 4096 };
    pin_job j = {.hits = calloc(N, sizeof(int)), .caller = pthread_self()};
    pthread_mutex_init(&j.mu, NULL);
    for (int loop = 0; loop < 2000; loop++) {
        memset(j.hits, 0, N * sizeof(int));
        kn_parallel_for(pool, N, 64, pin_range, &j);
        for (int i = 0; i < N; i++)
            if (j.hits[i] != 1) {
                kn_unit_fail(__FILE__, __LINE__, "loop %d: element %d covered %d times", loop, i, j.hits[i]);
                loop = 2000;
                break;
            }
    }
    kn_threadpool_destroy(pool);
    CHECK(j.n_workers >= 1); /* 2000 loops of 64 chunks: the workers took some */
    for (int k = 0; k < j.n_workers; k++) {
        CHECK(j.worker_cpus[k] == 1);
        CHECK(j.worker_only[k] != creator_cpu);
        for (int l = 0; l < k; l++) CHECK(j.worker_only[l] != j.worker_only[k]);
    }
    pthread_mutex_destroy(&j.mu);
    free(j.hits);
}
#endif

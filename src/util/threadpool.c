#include "util/threadpool.h"
#include "util/aligned.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KN_CPU_RELAX() _mm_pause()
#else
#define KN_CPU_RELAX() ((void)0)
#endif

/* Workers wait for a job by spinning briefly (an operator's next parallel loop usually follows
 * within microseconds, and a condition-variable wake-up costs tens of microseconds per thread),
 * then sleep on a condition variable. A job is published by bumping a generation counter. Its
 * chunks are dealt out as contiguous shares, one per thread in a fixed order (the caller the first,
 * worker i the (i + 1)-th), each claimed through its own atomic counter: a thread runs its own
 * share first, then takes the chunks left in the others' shares, so uneven chunks still balance
 * themselves. With the shares fixed, consecutive loops over the same tensor give each thread the
 * same part of it (a convolution reads its input in the core's own cache, where the producer
 * wrote it): with one shared counter the chunks went to the threads in turn, at 2 threads each
 * thread's half of a layer was half the other core's writes. */
#define KN_SPIN_ITERATIONS 20000

/* A worker woken from its sleep is often queued on the CPU of the thread that woke it, the caller's
 * (wake-affine placement, or a VM's packing of small tasks onto busy virtual CPUs): on the 2-core VM
 * that happened in most rounds of short loops after a 50 ms pause, with the other core idle. The
 * caller then ran every chunk itself while the worker waited behind it for its time slice, a whole
 * round at one thread's speed (the worker's run-queue wait, /proc/<tid>/schedstat: 2-4 ms a round),
 * or the two took turns on one core. So each job notes the CPU its caller started on, and a worker
 * going to sleep narrows its affinity to its other allowed CPUs until it wakes (then puts back what
 * it had: the scheduler leaves it where it runs). Only where the allowed CPUs are at least the
 * pool's threads: with more threads than CPUs some share one anyway, and narrowing would put every
 * sleeping worker of a 4-thread pool on the 2-core box's one other CPU (reasoned, not measured).
 * bench/results/cpu-pool-wake-2026-12-06d-h75.md. */

/* One cache line per field the threads write while a job runs: with 16 threads, each claim of a
 * chunk (a CAS on a share's ticket) and each chunk done (done_chunks) moved a line that every other
 * thread was reading (eight tickets a line; done_chunks beside the job's fields; the generation the
 * idle workers spin on beside the caller's flags). */
#define KN_LINE 64
typedef struct kn_ticket {
    _Alignas(KN_LINE) uint64_t v; /* (generation << 32) | the share's next chunk */
} kn_ticket;

struct kn_threadpool {
    int n_threads; /* workers including the caller */
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    int sleepers;        /* workers waiting on `wake`; under mu */
    int waiting;         /* the caller sleeps on `done`; under mu */
    struct worker_arg *wargs; /* worker i's: (p, i + 1) */
    kn_ticket *ticket;   /* per share, n_threads of them */
    /* What idle workers spin on, alone in its line. */
    _Alignas(KN_LINE) uint64_t generation; /* atomic; changed under mu */
    int stop;            /* atomic; changed under mu */
    /* The current job. A chunk is claimed by a compare-and-swap on `ticket`, whose high 32 bits
     * are the job's generation: a worker that wakes late for a finished job fails the swap and
     * touches nothing, so the caller waits only for claimed chunks, never for idle workers. The
     * fields are atomics because a late worker may read them while the next job is written.
     * Written once per job, read by every thread. */
    _Alignas(KN_LINE) kn_range_fn fn;
    void *arg;
    int64_t n, chunk, n_chunks;
    int64_t parts;       /* the threads taking part: shares 0 .. parts - 1 (workers self >= parts skip it) */
    kn_stop_fn stop_fn;  /* the job's stop check (atomic, as fn) */
    void *stop_arg;
    /* atomic: the generation whose job fn..stop_arg describe, 0 while they are being written (a
     * sequence lock: a worker late for a job that is over could otherwise read the next job's
     * fields, claim with them a chunk the old job's ticket still allows, run a chunk of the next
     * job on the side and count it done, and the next caller returned before its last chunk) */
    uint64_t job_gen;
    int busy;            /* atomic: a caller is running a job on the workers */
    int caller_cpu;      /* atomic: the CPU the last job's caller started on; -1 unknown */
    _Alignas(KN_LINE) int64_t done_chunks; /* atomic */
    char pad_end[KN_LINE - sizeof(int64_t)];
};

static _Thread_local kn_stop_fn kn_stop_check;
static _Thread_local void *kn_stop_check_arg;

void kn_parallel_set_stop(kn_stop_fn fn, void *arg) {
    kn_stop_check = fn;
    kn_stop_check_arg = fn ? arg : NULL;
}

/* A parallel loop started from inside a worker's chunk runs serially instead of deadlocking. */
static _Thread_local int kn_in_parallel_region;

/* Chunks [share_begin(k), share_begin(k + 1)) are share k's. */
static inline int64_t share_begin(int64_t k, int64_t n_chunks, int threads) { return k * n_chunks / threads; }

/* Runs chunks of job `gen` until none is left (nothing at all if that job is over): share `self`
 * first, then the others in turn. */
static void run_chunks(kn_threadpool *p, uint64_t gen, int self) {
    if (__atomic_load_n(&p->job_gen, __ATOMIC_ACQUIRE) != gen) return;
    kn_range_fn fn = __atomic_load_n(&p->fn, __ATOMIC_RELAXED);
    void *arg = __atomic_load_n(&p->arg, __ATOMIC_RELAXED);
    int64_t n = __atomic_load_n(&p->n, __ATOMIC_RELAXED);
    int64_t chunk = __atomic_load_n(&p->chunk, __ATOMIC_RELAXED);
    int64_t n_chunks = __atomic_load_n(&p->n_chunks, __ATOMIC_RELAXED);
    kn_stop_fn stop = __atomic_load_n(&p->stop_fn, __ATOMIC_RELAXED);
    void *stop_arg = __atomic_load_n(&p->stop_arg, __ATOMIC_RELAXED);
    const int64_t parts = __atomic_load_n(&p->parts, __ATOMIC_RELAXED);
    /* the fields read are job gen's only if no caller started writing the next job meanwhile */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&p->job_gen, __ATOMIC_RELAXED) != gen) return;
    /* a thread without a share stays out: it would only race the others for their first chunks
     * (at 16 threads a loop of 3 chunks had 13 threads stealing them, each chunk then ran on
     * whichever core got there first, not where the last loop left its part of the tensor) */
    if (self >= parts) return;
    const int T = (int)parts;
    for (int i = 0; i < T; i++) {
        const int k = (self + i) % T;
        const int64_t end = share_begin(k + 1, n_chunks, T);
        uint64_t *ticket = &p->ticket[k].v;
        uint64_t t = __atomic_load_n(ticket, __ATOMIC_ACQUIRE);
        for (;;) {
            if ((t >> 32) != (gen & 0xffffffffu)) return; /* a later job: this one is over */
            if ((int64_t)(t & 0xffffffffu) >= end) break;
            if (!__atomic_compare_exchange_n(ticket, &t, t + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                continue; /* t now holds the current value */
            int64_t c = (int64_t)(t & 0xffffffffu);
            int64_t b = c * chunk, e = b + chunk;
            if (e > n) e = n;
            if (!stop || !stop(stop_arg)) fn(arg, b, e);
            if (__atomic_add_fetch(&p->done_chunks, 1, __ATOMIC_ACQ_REL) == n_chunks) {
                pthread_mutex_lock(&p->mu);
                if (p->waiting) pthread_cond_signal(&p->done);
                pthread_mutex_unlock(&p->mu);
            }
            t = __atomic_load_n(ticket, __ATOMIC_ACQUIRE);
        }
    }
}

static int current_cpu(void) {
#if defined(__linux__)
    return sched_getcpu();
#else
    return -1;
#endif
}

/* The calling thread's allowed CPUs, saved while it runs narrowed to keep off one of them. */
typedef struct kn_affinity {
#if defined(__linux__)
    cpu_set_t allowed;
#endif
    bool narrowed;
} kn_affinity;

/* Narrows the calling thread's affinity to its allowed CPUs other than `cpu` (the kernel moves it
 * now if it runs there), where it is allowed `min_cpus` or more; restore_cpus puts back what it had
 * (the user's or the process's own pinning). A cpuset without the others refuses the narrowing:
 * nothing changes. */
static void avoid_cpu(int cpu, int min_cpus, kn_affinity *a) {
    a->narrowed = false;
#if defined(__linux__)
    if (cpu < 0 || cpu >= CPU_SETSIZE) return;
    if (sched_getaffinity(0, sizeof a->allowed, &a->allowed) != 0 || !CPU_ISSET(cpu, &a->allowed) ||
        CPU_COUNT(&a->allowed) < (min_cpus > 2 ? min_cpus : 2))
        return;
    cpu_set_t others = a->allowed;
    CPU_CLR(cpu, &others);
    a->narrowed = sched_setaffinity(0, sizeof others, &others) == 0;
#else
    (void)cpu;
    (void)min_cpus;
#endif
}

static void restore_cpus(kn_affinity *a) {
#if defined(__linux__)
    if (a->narrowed) (void)sched_setaffinity(0, sizeof a->allowed, &a->allowed);
#endif
    a->narrowed = false;
}

typedef struct worker_arg {
    kn_threadpool *p;
    int self;
    int threads; /* the pool's threads as asked (n_threads may drop while workers start) */
    int pinned_cpu; /* the one CPU this worker runs on, or -1 (not pinned) */
} worker_arg;

/* KILN_POOL_PIN=1: each worker runs on a CPU of its own (the allowed CPUs in order, leaving out the
 * one the pool's creator ran on, where its caller is expected), where the allowed CPUs are at least
 * the pool's threads. Measurements: whether fixed placement steadies many-thread runs (a 16-core
 * host's ResNet-50 p50 at 16 threads moved 7.0-8.6 ms between processes of one binary). */
static bool pin_wanted(void) {
    const char *e = getenv("KILN_POOL_PIN");
    return e && e[0] == '1';
}

/* The CPUs worker 1..threads-1 are to be pinned to: cpus[i - 1] for worker i; false if not pinned. */
static bool pin_plan(int threads, int *cpus) {
#if defined(__linux__)
    cpu_set_t allowed;
    if (threads < 2 || !pin_wanted() || sched_getaffinity(0, sizeof allowed, &allowed) != 0 ||
        CPU_COUNT(&allowed) < threads)
        return false;
    const int mine = current_cpu();
    int k = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && k < threads - 1; cpu++)
        if (CPU_ISSET(cpu, &allowed) && cpu != mine) cpus[k++] = cpu;
    return k == threads - 1;
#else
    (void)threads;
    (void)cpus;
    return false;
#endif
}

static void pin_self(int cpu) {
#if defined(__linux__)
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    (void)sched_setaffinity(0, sizeof one, &one);
#else
    (void)cpu;
#endif
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    kn_threadpool *p = wa->p;
    const int self = wa->self;
    uint64_t seen = 0;
    kn_in_parallel_region = 1;
    if (wa->pinned_cpu >= 0) pin_self(wa->pinned_cpu);
    for (;;) {
        uint64_t gen = __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE);
        for (int spin = 0; gen == seen && spin < KN_SPIN_ITERATIONS && !__atomic_load_n(&p->stop, __ATOMIC_RELAXED); spin++) {
            KN_CPU_RELAX();
            gen = __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE);
        }
        if (gen == seen) {
            /* asleep off the caller's CPU: the wake-up then puts the worker on another one */
            kn_affinity away = {.narrowed = false};
            if (wa->pinned_cpu < 0) avoid_cpu(__atomic_load_n(&p->caller_cpu, __ATOMIC_RELAXED), wa->threads, &away);
            pthread_mutex_lock(&p->mu);
            while (!p->stop && p->generation == seen) {
                p->sleepers++;
                pthread_cond_wait(&p->wake, &p->mu);
                p->sleepers--;
            }
            gen = p->generation;
            pthread_mutex_unlock(&p->mu);
            restore_cpus(&away);
        }
        if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) break;
        seen = gen;
        run_chunks(p, gen, self);
    }
    return NULL;
}

kiln_status kn_threadpool_create(int threads, kn_threadpool **out) {
    *out = NULL;
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    if (threads > 256) threads = 256;
    kn_threadpool *p = kn_aligned_alloc(KN_LINE, (sizeof *p + KN_LINE - 1) / KN_LINE * KN_LINE);
    if (!p) return KN_OOM();
    memset(p, 0, sizeof *p);
    p->n_threads = threads;
    p->caller_cpu = -1;
    p->ticket = kn_aligned_alloc(KN_LINE, (size_t)threads * sizeof *p->ticket);
    if (p->ticket) memset(p->ticket, 0, (size_t)threads * sizeof *p->ticket);
    p->wargs = calloc((size_t)threads, sizeof *p->wargs);
    if (!p->ticket || !p->wargs) {
        free(p->ticket);
        free(p->wargs);
        free(p);
        return KN_OOM();
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (threads > 1) {
        p->workers = calloc((size_t)threads - 1, sizeof *p->workers);
        int *pins = calloc((size_t)threads - 1, sizeof *pins);
        const bool pinned = pins && pin_plan(threads, pins);
        if (!p->workers) {
            free(pins);
            free(p->ticket);
            free(p->wargs);
            free(p);
            return KN_OOM();
        }
        for (int i = 0; i < threads - 1; i++) {
            p->wargs[i] = (worker_arg){p, i + 1, threads, pinned ? pins[i] : -1};
            if (pthread_create(&p->workers[i], NULL, worker_main, &p->wargs[i]) != 0) {
                p->n_threads = i + 1; /* run with what started */
                break;
            }
        }
        free(pins);
    }
    *out = p;
    return KILN_OK;
}

void kn_threadpool_destroy(kn_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads - 1; i++) pthread_join(p->workers[i], NULL);
    free(p->workers);
    free(p->ticket);
    free(p->wargs);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p);
}

int kn_threadpool_size(const kn_threadpool *p) { return p ? p->n_threads : 1; }

int64_t kn_parallel_grain_light(const kn_threadpool *p, int64_t grain2) {
    const int64_t t = kn_threadpool_size(p);
    if (t <= 2) return grain2;
    int64_t g = grain2 * 2 / t;
    if (g < grain2 / 4) g = grain2 / 4;
    return g > 0 ? g : 1;
}

void kn_parallel_for(kn_threadpool *p, int64_t n, int64_t grain, kn_range_fn fn, void *arg) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t max_chunks = n / grain;
    if (!p || p->n_threads <= 1 || max_chunks <= 1 || kn_in_parallel_region) {
        fn(arg, 0, n);
        return;
    }
    /* a few chunks per thread so a slow chunk does not hold the others */
    int64_t n_chunks = (int64_t)p->n_threads * 4;
    if (n_chunks > max_chunks) n_chunks = max_chunks;
    if (n_chunks > 0x7fffffff) n_chunks = 0x7fffffff;
    int64_t chunk = (n + n_chunks - 1) / n_chunks;
    n_chunks = (n + chunk - 1) / chunk;
    /* as many chunks for each thread where fewer, larger chunks give that: with 3 chunks at 2
     * threads the third went to whichever thread finished first, so a third of a tensor the next
     * loop reads changed cores from run to run (a 2.4 MB Add whose halves fit the two L2s ran from
     * L3). Only when the larger chunks do come out even (36 products at 16 threads: 32 chunks
     * would be 18 of 2, two rounds of 2 where 36 of 1 take three of 1: kept) */
    if (n_chunks > p->n_threads && n_chunks % p->n_threads) {
        const int64_t fewer = n_chunks - n_chunks % p->n_threads;
        const int64_t c2 = (n + fewer - 1) / fewer, n2 = (n + c2 - 1) / c2;
        if (n2 % p->n_threads == 0) chunk = c2, n_chunks = n2;
    }
    /* one share per thread taking part: every thread while there are chunks for all (2 threads:
     * always), else one thread a chunk */
    const int64_t parts = n_chunks < p->n_threads ? n_chunks : p->n_threads;
    if (__atomic_exchange_n(&p->busy, 1, __ATOMIC_ACQUIRE)) {
        /* another call has the workers: this one's chunks on this thread, the same chunks */
        kn_in_parallel_region = 1;
        for (int64_t c = 0; c < n_chunks; c++) {
            if (kn_stop_check && kn_stop_check(kn_stop_check_arg)) break;
            int64_t b = c * chunk, e = b + chunk;
            fn(arg, b, e > n ? n : e);
        }
        kn_in_parallel_region = 0;
        return;
    }
    uint64_t gen = __atomic_load_n(&p->generation, __ATOMIC_RELAXED) + 1;
    __atomic_store_n(&p->job_gen, 0, __ATOMIC_RELAXED); /* the fields below are being written */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&p->fn, fn, __ATOMIC_RELAXED);
    __atomic_store_n(&p->arg, arg, __ATOMIC_RELAXED);
    __atomic_store_n(&p->n, n, __ATOMIC_RELAXED);
    __atomic_store_n(&p->chunk, chunk, __ATOMIC_RELAXED);
    __atomic_store_n(&p->n_chunks, n_chunks, __ATOMIC_RELAXED);
    __atomic_store_n(&p->parts, parts, __ATOMIC_RELAXED);
    __atomic_store_n(&p->done_chunks, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->stop_fn, kn_stop_check, __ATOMIC_RELAXED);
    __atomic_store_n(&p->stop_arg, kn_stop_check_arg, __ATOMIC_RELAXED);
    __atomic_store_n(&p->job_gen, gen, __ATOMIC_RELEASE);
    for (int k = 0; k < parts; k++)
        __atomic_store_n(&p->ticket[k].v, (gen & 0xffffffffu) << 32 | (uint64_t)share_begin(k, n_chunks, (int)parts),
                         __ATOMIC_RELEASE);
    __atomic_store_n(&p->caller_cpu, current_cpu(), __ATOMIC_RELAXED);
    pthread_mutex_lock(&p->mu);
    __atomic_store_n(&p->generation, gen, __ATOMIC_RELEASE);
    if (p->sleepers) pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    kn_in_parallel_region = 1;
    run_chunks(p, gen, 0);
    kn_in_parallel_region = 0;
    /* wait for the chunks other threads claimed (not for threads that never joined) */
    for (int spin = 0; spin < KN_SPIN_ITERATIONS * 4 && __atomic_load_n(&p->done_chunks, __ATOMIC_ACQUIRE) < n_chunks; spin++)
        KN_CPU_RELAX();
    if (__atomic_load_n(&p->done_chunks, __ATOMIC_ACQUIRE) < n_chunks) {
        pthread_mutex_lock(&p->mu);
        p->waiting = 1;
        while (__atomic_load_n(&p->done_chunks, __ATOMIC_ACQUIRE) < n_chunks) pthread_cond_wait(&p->done, &p->mu);
        p->waiting = 0;
        pthread_mutex_unlock(&p->mu);
    }
    __atomic_store_n(&p->busy, 0, __ATOMIC_RELEASE);
}

#include "util/lockstep.h"

#include <sched.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOCKSTEP_RELAX() _mm_pause()
#else
#define LOCKSTEP_RELAX() ((void)0)
#endif

#define LINE 64

/* Per part k, each alone in its cache line: claimed[k], how many steps' part k has been taken
 * (the next step whose part k is free; a compare-and-swap takes it); finished[k], how many are done
 * (stored by the one thread that ran it). present[i]: participant i has started. A step ends when
 * every part's finished count passes it: each thread writes its own lines and reads the others'
 * (one count of all parts done, bumped by every thread, cost two more transfers of its line per
 * step: 0.55 us a step at 2 threads on the 2-core box, more than a third of a small LSTM's step). */
typedef struct lockstep {
    struct {
        _Alignas(LINE) int64_t v;
    } claimed[KN_LOCKSTEP_MAX_PARTS], finished[KN_LOCKSTEP_MAX_PARTS], present[KN_LOCKSTEP_MAX_PARTS];
    _Alignas(LINE) kn_step_fn fn;
    void *arg;
    int64_t n_steps;
    int n_parts, threads;
} lockstep;

/* Spins before a waiting thread takes a free part of a participant that has started (it was
 * descheduled between steps), and before it yields the CPU while parts another thread holds run.
 * A participant that is there takes its part within a fraction of a microsecond of the step's
 * start; taking it from under it sooner left the workers idle (the caller, first at every step,
 * ran all the parts). */
#define STEAL_SPINS 2000
#define YIELD_SPINS 4000

static int owner(const lockstep *ls, int part) { return (int)((int64_t)part * ls->threads / ls->n_parts); }

static void take(lockstep *ls, int64_t s, int k) {
    int64_t want = s;
    if (__atomic_load_n(&ls->claimed[k].v, __ATOMIC_RELAXED) != s ||
        !__atomic_compare_exchange_n(&ls->claimed[k].v, &want, s + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return;
    ls->fn(ls->arg, s, k);
    __atomic_store_n(&ls->finished[k].v, s + 1, __ATOMIC_RELEASE);
}

/* Whether every part of step s is done (the acquire makes their writes visible) */
static int step_over(lockstep *ls, int64_t s) {
    for (int k = 0; k < ls->n_parts; k++)
        if (__atomic_load_n(&ls->finished[k].v, __ATOMIC_ACQUIRE) <= s) return 0;
    return 1;
}

/* Participant `who`, step after step: its own parts of the step, then, until the step is over, the
 * parts of participants that have not started, or that have not taken theirs for STEAL_SPINS. A
 * participant that starts late runs through the steps that are over (their parts are taken). */
static void participate(void *arg, int64_t begin, int64_t end) {
    lockstep *ls = arg;
    const int P = ls->n_parts;
    for (int64_t who = begin; who < end; who++) {
        __atomic_store_n(&ls->present[who].v, 1, __ATOMIC_RELAXED);
        for (int64_t s = 0; s < ls->n_steps; s++) {
            /* step s - 1 is over: claimed[k] is s or s + 1 */
            for (int k = 0; k < P; k++)
                if (owner(ls, k) == who) take(ls, s, k);
            for (int spin = 0; !step_over(ls, s); spin++) {
                for (int k = 0; k < P; k++) {
                    const int o = owner(ls, k);
                    if (o != who && (spin >= STEAL_SPINS || !__atomic_load_n(&ls->present[o].v, __ATOMIC_RELAXED)))
                        take(ls, s, k);
                }
                if (spin < YIELD_SPINS) LOCKSTEP_RELAX();
                else sched_yield();
            }
        }
    }
}

void kn_parallel_lockstep(kn_threadpool *pool, int64_t n_steps, int n_parts, kn_step_fn fn, void *arg) {
    if (n_steps <= 0 || n_parts <= 0) return;
    int threads = kn_threadpool_size(pool);
    if (threads > n_parts) threads = n_parts;
    if (threads <= 1 || n_parts > KN_LOCKSTEP_MAX_PARTS) {
        for (int64_t s = 0; s < n_steps; s++)
            for (int k = 0; k < n_parts; k++) fn(arg, s, k);
        return;
    }
    lockstep ls = {.fn = fn, .arg = arg, .n_steps = n_steps, .n_parts = n_parts, .threads = threads};
    /* one chunk per participant: the caller's and each worker's loop over all the steps; a chunk
     * that starts after the steps are over returns at once */
    kn_parallel_for(pool, threads, 1, participate, &ls);
}

/* ------------------------------------------------------------------ wavefront */

/* Per stage s, each alone in its cache line: claimed[s], the chunks of s taken; finished[s], the
 * chunks of s done (stored by the thread that ran the last one). present[i]: participant i has
 * started. */
typedef struct wavefront {
    struct {
        _Alignas(LINE) int64_t v;
    } claimed[KN_LOCKSTEP_MAX_PARTS], finished[KN_LOCKSTEP_MAX_PARTS], present[KN_LOCKSTEP_MAX_PARTS];
    _Alignas(LINE) kn_wave_fn fn;
    void *arg;
    int64_t n_chunks;
    int n_stages, threads;
    int owner[KN_LOCKSTEP_MAX_PARTS]; /* of each stage, -1 for a shared one */
} wavefront;

/* Runs the next chunk of stage s if it is ready (the previous chunk of s done, the same chunk of
 * s - 1 done) and nobody took it; 1 if it ran. finished[s] == claimed[s] means no chunk of s runs
 * now (the acquire of finished[s] also hands over the stage's state from the thread that ran its
 * last chunk). */
static int wave_take(wavefront *w, int s) {
    const int64_t k = __atomic_load_n(&w->finished[s].v, __ATOMIC_ACQUIRE);
    if (k >= w->n_chunks || __atomic_load_n(&w->claimed[s].v, __ATOMIC_RELAXED) != k) return 0;
    if (s > 0 && __atomic_load_n(&w->finished[s - 1].v, __ATOMIC_ACQUIRE) <= k) return 0;
    int64_t want = k;
    if (!__atomic_compare_exchange_n(&w->claimed[s].v, &want, k + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return 0;
    w->fn(w->arg, s, k);
    __atomic_store_n(&w->finished[s].v, k + 1, __ATOMIC_RELEASE);
    return 1;
}

/* Participant `who` until the last stage is done (then every stage is): its own stages and the
 * shared ones, the deepest ready one first (it feeds the stages after it); the others' when their
 * owner has not started, or when this one has found nothing to run for STEAL_SPINS. */
static void wave_participate(void *arg, int64_t begin, int64_t end) {
    wavefront *w = arg;
    const int S = w->n_stages;
    for (int64_t who = begin; who < end; who++) {
        __atomic_store_n(&w->present[who].v, 1, __ATOMIC_RELAXED);
        int idle = 0;
        while (__atomic_load_n(&w->finished[S - 1].v, __ATOMIC_ACQUIRE) < w->n_chunks) {
            int took = 0;
            for (int s = S - 1; s >= 0 && !took; s--)
                if (w->owner[s] == who || w->owner[s] < 0) took = wave_take(w, s);
            for (int s = S - 1; s >= 0 && !took; s--) {
                const int o = w->owner[s];
                if (o >= 0 && o != who && (idle >= STEAL_SPINS || !__atomic_load_n(&w->present[o].v, __ATOMIC_RELAXED)))
                    took = wave_take(w, s);
            }
            if (took) idle = 0;
            else if (++idle < YIELD_SPINS) LOCKSTEP_RELAX();
            else sched_yield();
        }
    }
}

void kn_parallel_wavefront(kn_threadpool *pool, int n_stages, int64_t n_chunks, uint64_t shared, kn_wave_fn fn,
                           void *arg) {
    if (n_stages <= 0 || n_chunks <= 0) return;
    int threads = kn_threadpool_size(pool), owned = 0;
    for (int s = 0; s < n_stages && s < 64; s++) owned += !(shared >> s & 1);
    /* a participant an owned stage (or a stage, where all are shared) at most */
    const int most = owned > 0 ? owned : n_stages;
    if (threads > most) threads = most;
    if (threads <= 1 || n_stages > KN_LOCKSTEP_MAX_PARTS) {
        for (int s = 0; s < n_stages; s++)
            for (int64_t k = 0; k < n_chunks; k++) fn(arg, s, k);
        return;
    }
    wavefront w = {.fn = fn, .arg = arg, .n_chunks = n_chunks, .n_stages = n_stages, .threads = threads};
    for (int s = 0, i = 0; s < n_stages; s++)
        w.owner[s] = shared >> s & 1 ? -1 : (int)((int64_t)(i++) * threads / owned);
    kn_parallel_for(pool, threads, 1, wave_participate, &w);
}

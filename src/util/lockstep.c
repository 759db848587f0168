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

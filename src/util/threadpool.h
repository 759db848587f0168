/* A fixed pool of worker threads for work inside one operator (the intra-op threads).
 *
 * Many threads may call kn_parallel_for on one pool at once (concurrent runs of one session): the
 * pool runs one job at a time, and a call that finds it busy runs its chunks on its own thread,
 * in the same chunks the pool would have used (so a kernel's result does not depend on which call
 * got the workers). */
#ifndef KN_THREADPOOL_H
#define KN_THREADPOOL_H

#include "util/status.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct kn_threadpool kn_threadpool;

/* threads: total workers including the caller; 0 = one per online CPU. */
kiln_status kn_threadpool_create(int threads, kn_threadpool **out);
void kn_threadpool_destroy(kn_threadpool *p);
int kn_threadpool_size(const kn_threadpool *p); /* 1 for a NULL pool */

/* Calls fn(arg, begin, end) over [0, n) split into contiguous chunks, one per worker at most,
 * each at least `grain` long; the caller's thread takes part. Blocks until all are done.
 * A NULL pool runs everything on the caller's thread. */
typedef void (*kn_range_fn)(void *arg, int64_t begin, int64_t end);
void kn_parallel_for(kn_threadpool *p, int64_t n, int64_t grain, kn_range_fn fn, void *arg);

/* The grain for this pool of a memory-bound loop whose grain `grain2` was tuned at 2 threads
 * (there, a chunk must be worth a wake that may find the other thread asleep: tens of microseconds
 * of work). With more threads the idle workers are usually spinning, a chunk costs about a
 * microsecond to hand out, and a tensor of a few hundred kilobytes cut at the 2-thread grain ran
 * on 3 of 16 threads (ONNX Runtime's cost model gives it most of them): grain2 at 1 and 2 threads,
 * grain2 / 2 at 4, grain2 / 4 from 8 threads on. */
int64_t kn_parallel_grain_light(const kn_threadpool *p, int64_t grain2);

/* A stop check for the parallel loops the calling thread starts (a run's cancellation and
 * deadline): when fn(arg) returns true, the chunks not yet begun are skipped (the loop's result is
 * then incomplete: the caller must look at its own stop state after the loop and discard it).
 * Thread-local; fn NULL clears it. Loops of a one-thread pool run whole, without checks. */
typedef bool (*kn_stop_fn)(void *arg);
void kn_parallel_set_stop(kn_stop_fn fn, void *arg);

#endif

/* Steps in lockstep on the intra-op pool: a loop of many short steps (a recurrent layer's time
 * steps), each cut into the same few parts, where step s + 1 may start only once every part of
 * step s is done.
 *
 * One parallel loop for all the steps, with one wait per step, instead of one parallel loop per
 * step (whose hand-out and wait cost about as much as a step of a small recurrent layer). The
 * parts are claimed, not assigned: each thread takes its own part of a step first, then any part
 * nobody has taken, so a thread that is late (asleep, descheduled, or the pool busy with another
 * call) only leaves its parts to the others, and the calling thread alone finishes every step. No
 * step waits for a thread that has not started. */
#ifndef KN_LOCKSTEP_H
#define KN_LOCKSTEP_H

#include "util/threadpool.h"

#include <stdint.h>

/* Calls fn(arg, step, part) once for every step in [0, n_steps) and part in [0, n_parts), every
 * part of a step before any part of the next (the writes of one step are visible to the next:
 * release/acquire), the parts of one step possibly at once on different threads. n_parts is
 * at most KN_LOCKSTEP_MAX_PARTS (more are run as that many threads would: still every call). A
 * NULL or one-thread pool, or one part, runs them in order on the caller's thread. */
#define KN_LOCKSTEP_MAX_PARTS 64
typedef void (*kn_step_fn)(void *arg, int64_t step, int part);
void kn_parallel_lockstep(kn_threadpool *pool, int64_t n_steps, int n_parts, kn_step_fn fn, void *arg);

/* A wavefront over stages (a stacked recurrence's layers) and chunks (runs of its time steps):
 * calls fn(arg, stage, chunk) once for every stage in [0, n_stages) and chunk in [0, n_chunks),
 * each after (stage - 1, chunk) and (stage, chunk - 1) (their writes visible: release/acquire),
 * so stage s may run chunk k while stage s - 1 runs chunk k + 1 on another thread. The stages
 * not in `shared` (bit s: stage s) are owned by participants in contiguous runs; a shared stage's
 * chunks go to whichever participant finds them ready first. Each participant runs the deepest
 * ready stage it may first (that feeds the stages after it). Owned stages are claimed like the
 * lockstep's parts: a participant that has not started, or that leaves a ready chunk for
 * STEAL_SPINS, loses it to the others, and the caller alone can finish everything. n_stages is at
 * most KN_LOCKSTEP_MAX_PARTS (more run in order on the caller's thread). A NULL or one-thread
 * pool, or one stage, runs stage after stage, each chunk after chunk, on the caller's thread. */
typedef void (*kn_wave_fn)(void *arg, int stage, int64_t chunk);
void kn_parallel_wavefront(kn_threadpool *pool, int n_stages, int64_t n_chunks, uint64_t shared, kn_wave_fn fn,
                           void *arg);

#endif

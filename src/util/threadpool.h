/* A fixed pool of worker threads for work inside one operator (the intra-op threads). */
#ifndef KN_THREADPOOL_H
#define KN_THREADPOOL_H

#include "util/status.h"

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

#endif

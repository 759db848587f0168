/* Per-node profiling, for finding where a run's time goes: with KILN_PROFILE=1 in the
 * environment every kernel call is timed (device backends are synchronised before and after the
 * call, so the time is the node's own; this slows the run and is for diagnosis only). At process
 * exit a report goes to stderr: the first execution of each node (where lazy work happens:
 * library handles, algorithm choice, kernel loading, weight conversion) apart from the later ones,
 * by operator and provider, and the slowest nodes of the first execution. */
#ifndef KN_PROFILE_H
#define KN_PROFILE_H

#include "backend/backend.h"

#include <stdbool.h>

bool kn_profile_on(void);
/* Before a kernel call: returns the start time (ms). */
double kn_profile_begin(const kn_backend *be);
/* After it: accounts the node's time. */
void kn_profile_end(const kn_node *n, const kn_backend *be, double t0);

#endif

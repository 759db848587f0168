/* Per-node profiling, for finding where a run's time goes: with KILN_PROFILE set in the
 * environment every kernel call is timed (device backends are synchronised before and after the
 * call, so the time is the node's own; this slows the run and is for diagnosis only).
 *
 * KILN_PROFILE=1: at process exit a report goes to stderr: the first execution of each node (where
 * lazy work happens: library handles, algorithm choice, kernel loading, weight conversion) apart
 * from the later ones, by operator and provider, and the slowest nodes of the first execution.
 *
 * KILN_PROFILE=FILE.json: a Chrome/Perfetto trace is written to FILE.json instead (open it in
 * https://ui.perfetto.dev or chrome://tracing): a slice per run and, on the run's thread, a slice
 * per node with its operator, provider, input and output shapes and whether it was the node's
 * first execution. Events are written as they happen (JSON array format), so the trace of a run
 * that crashes is readable up to the crash. */
#ifndef KN_PROFILE_H
#define KN_PROFILE_H

#include "backend/backend.h"

#include <stdbool.h>

bool kn_profile_on(void);
/* Before a kernel call: returns the start time (ms). */
double kn_profile_begin(const kn_backend *be);
/* After it: accounts the node's time (c: the call, for the trace's shapes; may be NULL). */
void kn_profile_end(const kn_node *n, const kn_backend *be, double t0);
void kn_profile_end_call(const kn_kernel_ctx *c, const kn_node *n, const kn_backend *be, double t0);
/* Around a whole run (kiln_session_run and its variants): a slice in the trace. begin returns 0
 * when no trace is written; end takes that value and the run's status. */
double kn_profile_run_begin(void);
void kn_profile_run_end(double t0, kiln_status st);

#endif

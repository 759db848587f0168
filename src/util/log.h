/* Logging to stderr, filtered by a level.
 *
 * The level is per thread where a session acts: a session's creation and each of its runs set
 * the calling thread's level to the session's option (kn_log_set_level / kn_log_swap_level) for
 * their duration, so sessions with different levels on different threads do not disturb each
 * other. Messages from kiln's own threads (intra-op workers, device start-up threads) and from a
 * thread no session acts on use the process-wide default, KILN_LOG_WARNING. KILN_LOG=
 * debug|info|warning|error in the environment overrides all of it (read once). Race-free: the
 * per-thread level is thread-local, the default and the environment are read atomically. */
#ifndef KN_LOG_H
#define KN_LOG_H

#include "kiln.h"
#include "util/status.h"

/* Sets the calling thread's level (until it is set again). */
void kn_log_set_level(kiln_log_level level);
/* Sets the calling thread's level and returns the previous setting, for kn_log_restore_level
 * (a scoped level: a session's creation, a run). */
int kn_log_swap_level(kiln_log_level level);
void kn_log_restore_level(int previous);
/* The level in effect on the calling thread. */
kiln_log_level kn_log_get_level(void);
void kn_log(kiln_log_level level, const char *fmt, ...) KN_PRINTF(2, 3);

#endif

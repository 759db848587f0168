/* Logging to stderr, filtered by a process-wide level (sessions raise it with their option). */
#ifndef KN_LOG_H
#define KN_LOG_H

#include "kiln.h"
#include "util/status.h"

void kn_log_set_level(kiln_log_level level);
kiln_log_level kn_log_get_level(void);
void kn_log(kiln_log_level level, const char *fmt, ...) KN_PRINTF(2, 3);

#endif

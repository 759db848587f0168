#include "util/log.h"

#include "util/clock.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kiln_log_level kn_level = KILN_LOG_WARNING;
static int kn_level_from_env = -1;

static kiln_log_level effective_level(void) {
    if (kn_level_from_env < 0) {
        /* KILN_LOG=debug|info|warning|error overrides the options (handy for users' bug reports). */
        const char *e = getenv("KILN_LOG");
        kn_level_from_env = 99;
        if (e) {
            if (!strcmp(e, "error")) kn_level_from_env = KILN_LOG_ERROR;
            else if (!strcmp(e, "warning")) kn_level_from_env = KILN_LOG_WARNING;
            else if (!strcmp(e, "info")) kn_level_from_env = KILN_LOG_INFO;
            else if (!strcmp(e, "debug")) kn_level_from_env = KILN_LOG_DEBUG;
        }
    }
    return kn_level_from_env != 99 ? (kiln_log_level)kn_level_from_env : kn_level;
}

/* KILN_LOG_TIME=1 stamps each line with the milliseconds since the library was loaded, for
 * seeing where a start-up's time goes without a profiler. */
static double kn_loaded_ms;
static int kn_stamp = -1;
__attribute__((constructor)) static void note_load_time(void) { kn_loaded_ms = kn_now_ms(); }

void kn_log_set_level(kiln_log_level level) { kn_level = level; }
kiln_log_level kn_log_get_level(void) { return effective_level(); }

void kn_log(kiln_log_level level, const char *fmt, ...) {
    if (level > effective_level()) return;
    static const char *const names[] = {"error", "warning", "info", "debug"};
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (kn_stamp < 0) {
        const char *e = getenv("KILN_LOG_TIME");
        kn_stamp = e && *e && strcmp(e, "0") != 0;
    }
    if (kn_stamp)
        fprintf(stderr, "[%9.2f ms] kiln %s: %s\n", kn_now_ms() - kn_loaded_ms, names[level], buf);
    else
        fprintf(stderr, "kiln %s: %s\n", names[level], buf);
}

#include "util/log.h"

#include "util/clock.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -1: not set on this thread (the default applies) */
static _Thread_local int kn_thread_level = -1;
static int kn_level_from_env = 99; /* 99: KILN_LOG not set; written once, under kn_env_once */
static int kn_stamp;               /* KILN_LOG_TIME; written once, under kn_env_once */
static pthread_once_t kn_env_once = PTHREAD_ONCE_INIT;

/* KILN_LOG_TIME=1 stamps each line with the milliseconds since the library was loaded, for
 * seeing where a start-up's time goes without a profiler. */
static double kn_loaded_ms;
__attribute__((constructor)) static void note_load_time(void) { kn_loaded_ms = kn_now_ms(); }

static void read_env(void) {
    /* KILN_LOG=debug|info|warning|error overrides the options (handy for users' bug reports). */
    const char *e = getenv("KILN_LOG");
    if (e) {
        if (!strcmp(e, "error")) kn_level_from_env = KILN_LOG_ERROR;
        else if (!strcmp(e, "warning")) kn_level_from_env = KILN_LOG_WARNING;
        else if (!strcmp(e, "info")) kn_level_from_env = KILN_LOG_INFO;
        else if (!strcmp(e, "debug")) kn_level_from_env = KILN_LOG_DEBUG;
    }
    const char *t = getenv("KILN_LOG_TIME");
    kn_stamp = t && *t && strcmp(t, "0") != 0;
}

static kiln_log_level effective_level(void) {
    pthread_once(&kn_env_once, read_env);
    if (kn_level_from_env != 99) return (kiln_log_level)kn_level_from_env;
    return kn_thread_level >= 0 ? (kiln_log_level)kn_thread_level : KILN_LOG_WARNING;
}

void kn_log_set_level(kiln_log_level level) { kn_thread_level = (int)level; }

int kn_log_swap_level(kiln_log_level level) {
    int prev = kn_thread_level;
    kn_thread_level = (int)level;
    return prev;
}

void kn_log_restore_level(int previous) { kn_thread_level = previous; }

kiln_log_level kn_log_get_level(void) { return effective_level(); }

void kn_log(kiln_log_level level, const char *fmt, ...) {
    if (level > effective_level()) return;
    static const char *const names[] = {"error", "warning", "info", "debug"};
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (kn_stamp)
        fprintf(stderr, "[%9.2f ms] kiln %s: %s\n", kn_now_ms() - kn_loaded_ms, names[level], buf);
    else
        fprintf(stderr, "kiln %s: %s\n", names[level], buf);
}

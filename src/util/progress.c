/* See progress.h. */
#include "util/progress.h"

#include "util/clock.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MODE_OFF, MODE_TTY, MODE_LOG };

static pthread_once_t kn_progress_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t kn_progress_mu = PTHREAD_MUTEX_INITIALIZER;
static int kn_progress_mode;
static bool kn_progress_busy; /* a piece of work holds the line */
static double kn_progress_ms = 1000; /* the first line after this much work, then at most one per */

static void init(void) {
    const char *e = getenv("KILN_PROGRESS");
    if (e && !strcmp(e, "0")) kn_progress_mode = MODE_OFF;
    else if (e && *e && strcmp(e, "0")) kn_progress_mode = isatty(2) ? MODE_TTY : MODE_LOG;
    else kn_progress_mode = isatty(2) ? MODE_TTY : MODE_OFF;
    const char *ms = getenv("KILN_PROGRESS_INTERVAL_MS");
    if (ms && *ms) {
        char *end;
        double v = strtod(ms, &end);
        if (!*end && v >= 0 && v <= 3.6e6) kn_progress_ms = v;
    }
}

void kn_progress_begin(kn_progress *p, const char *what) {
    pthread_once(&kn_progress_once, init);
    memset(p, 0, sizeof *p);
    p->what = what;
    if (kn_progress_mode == MODE_OFF) return;
    p->t_start = p->t_last = kn_now_ms();
}

bool kn_progress_due(const kn_progress *p) {
    if (kn_progress_mode == MODE_OFF || !p->what) return false;
    double t = kn_now_ms();
    return t - p->t_start >= kn_progress_ms && (!p->shown || t - p->t_last >= kn_progress_ms);
}

void kn_progress_update(kn_progress *p, long done, long total, const char *detail) {
    if (kn_progress_mode == MODE_OFF || !p->what) return;
    double t = kn_now_ms();
    /* nothing for the first second, then at most a line a second */
    if (t - p->t_start < kn_progress_ms || (p->shown && t - p->t_last < kn_progress_ms)) return;
    pthread_mutex_lock(&kn_progress_mu);
    if (!p->owner && !kn_progress_busy) p->owner = kn_progress_busy = true;
    if (p->owner) {
        char line[256];
        snprintf(line, sizeof line, "kiln: %s %ld/%ld%s%s%s, %.1f s", p->what, done, total, detail ? " (" : "",
                 detail ? detail : "", detail ? ")" : "", (t - p->t_start) / 1000.0);
        if (kn_progress_mode == MODE_TTY) fprintf(stderr, "\r%s\033[K", line);
        else fprintf(stderr, "%s\n", line);
        fflush(stderr);
        p->shown = true;
        p->t_last = t;
        p->total = total;
    }
    pthread_mutex_unlock(&kn_progress_mu);
}

void kn_progress_end(kn_progress *p) {
    if (kn_progress_mode == MODE_OFF || !p->owner) return;
    pthread_mutex_lock(&kn_progress_mu);
    if (p->shown) {
        if (kn_progress_mode == MODE_TTY) fprintf(stderr, "\r\033[K");
        else fprintf(stderr, "kiln: %s %ld/%ld, done in %.1f s\n", p->what, p->total, p->total,
                     (kn_now_ms() - p->t_start) / 1000.0);
        fflush(stderr);
    }
    kn_progress_busy = false;
    p->owner = false;
    pthread_mutex_unlock(&kn_progress_mu);
}

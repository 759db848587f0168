/* Progress of long work on a terminal: "kiln: run: node 120/350 (Conv on cuda), 2.1 s" on stderr,
 * first after a second of work and then at most once a second, on one line that is rewritten in
 * place and erased when the work ends. Shown when stderr is a terminal; KILN_PROGRESS=1 shows it
 * anywhere (one line per update, for logs), KILN_PROGRESS=0 never. KILN_PROGRESS_INTERVAL_MS
 * changes the second (the tests set 0). One piece of work shows at a time (a second one, on
 * another thread, stays quiet). */
#ifndef KN_PROGRESS_H
#define KN_PROGRESS_H

#include <stdbool.h>

typedef struct kn_progress {
    double t_start, t_last; /* ms */
    bool owner;             /* this one holds the terminal line */
    bool shown;             /* something was printed */
    const char *what;
    long total;
} kn_progress;

/* Starts timing a piece of work (cheap: no output yet). */
void kn_progress_begin(kn_progress *p, const char *what);
/* Whether an update would print now (a cheap check before formatting the detail). */
bool kn_progress_due(const kn_progress *p);
/* done of total finished; detail (may be NULL) says what is running now. Prints only when due. */
void kn_progress_update(kn_progress *p, long done, long total, const char *detail);
/* Ends it: the terminal line is erased (or, in log mode, a last line says how long it took). */
void kn_progress_end(kn_progress *p);

#endif

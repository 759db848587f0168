/* One session called from T threads at once against T sessions, one per thread (issue 23): for
 * each model of the zoo given and T in 1, 2, 4, 8, the throughput (runs per second over a fixed
 * time, every thread running the zoo's test_data_set_0 inputs) and the process's resident memory
 * after the runs (a fresh process per configuration: fork). Intra-op threads 1, so the threads are
 * the only parallelism. Build by hand after building the library:
 *   cc -O2 -Iinclude -Isrc -Itests/unit bench/session_threads_bench.c tests/unit/unit_zoo.c \
 *      build-thr/libkiln.a -lpthread -lm -ldl -lpng -ljpeg -lz -o /tmp/stb
 *   /tmp/stb SECONDS ../shared/models/mobilenet_v3_small ../shared/models/bert_mini ...
 * (unit_zoo.c reads the data sets; it needs the unit tests' CHECK symbols, defined below.) */
#include "kiln.h"
#include "unit_zoo.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* what unit_zoo.c calls */
void kn_unit_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}
void kn_unit_skip(const char *reason) { fprintf(stderr, "skip: %s\n", reason); }
const char *kn_unit_root(void) { return "."; }

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = atol(line + 6);
    if (f) fclose(f);
    return kb;
}

typedef struct job {
    kiln_session *s;
    kn_unit_zoo_data *d;
    double until;
    long runs;
    int failed;
} job;

static void *worker(void *arg) {
    job *j = arg;
    kiln_tensor *out[KN_UNIT_ZOO_MAX_IO];
    while (now_ms() < j->until) {
        memset(out, 0, sizeof out);
        if (kiln_session_run(j->s, j->d->names, j->d->in, j->d->n_in, NULL, j->d->n_out, out) != KILN_OK) {
            j->failed = 1;
            fprintf(stderr, "%s\n", kiln_last_error());
            return NULL;
        }
        for (size_t k = 0; k < j->d->n_out; k++) kiln_tensor_destroy(out[k]);
        j->runs++;
    }
    return NULL;
}

static kiln_session *open_session(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_intra_op_threads(o, 1);
    kiln_session *s = NULL;
    if (kiln_session_create(path, o, &s) != KILN_OK) fprintf(stderr, "%s: %s\n", dir, kiln_last_error());
    kiln_session_options_destroy(o);
    return s;
}

/* One configuration in this process: T threads on one session (shared) or on T sessions. */
static void measure(const char *dir, int threads, int shared, double seconds) {
    kiln_session *s[8] = {NULL};
    int n_sessions = shared ? 1 : threads;
    for (int i = 0; i < n_sessions; i++)
        if (!(s[i] = open_session(dir))) return;
    kn_unit_zoo_data d;
    kn_unit_zoo_read(dir, s[0], &d);
    job j[8];
    pthread_t t[8];
    /* one warm-up run per session, then the timed window */
    for (int i = 0; i < n_sessions; i++) {
        job w = {s[i], &d, now_ms(), 0, 0};
        w.until = 0;
        kiln_tensor *out[KN_UNIT_ZOO_MAX_IO] = {NULL};
        kiln_session_run(s[i], d.names, d.in, d.n_in, NULL, d.n_out, out);
        for (size_t k = 0; k < d.n_out; k++) kiln_tensor_destroy(out[k]);
        (void)w;
    }
    double t0 = now_ms(), until = t0 + seconds * 1e3;
    for (int i = 0; i < threads; i++) {
        j[i] = (job){s[shared ? 0 : i], &d, until, 0, 0};
        pthread_create(&t[i], NULL, worker, &j[i]);
    }
    long runs = 0;
    int failed = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        runs += j[i].runs;
        failed |= j[i].failed;
    }
    double el = now_ms() - t0;
    printf("| %s | %d | %s | %.1f | %ld |%s\n", strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir, threads,
           shared ? "one session" : "a session each", runs / (el / 1e3), rss_kb() / 1024, failed ? " FAILED" : "");
    fflush(stdout);
    kn_unit_zoo_free(&d);
    for (int i = 0; i < n_sessions; i++) kiln_session_destroy(s[i]);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s SECONDS ZOO_MODEL_DIR...\n", argv[0]);
        return 2;
    }
    double seconds = atof(argv[1]);
    printf("| model | threads | sessions | runs/s | RSS MB |\n|---|---|---|---|---|\n");
    fflush(stdout);
    for (int a = 2; a < argc; a++)
        for (int threads = 1; threads <= 8; threads *= 2)
            for (int shared = 1; shared >= 0; shared--) {
                if (threads == 1 && !shared) continue;
                pid_t p = fork();
                if (p == 0) {
                    measure(argv[a], threads, shared, seconds);
                    _exit(0);
                }
                int status;
                waitpid(p, &status, 0);
            }
    return 0;
}

/* Per-node profiling (KILN_PROFILE=1, or =FILE.json for a Chrome/Perfetto trace): see profile.h.
 * One table per process, under a lock: the cost only exists when the variable is set. */
#include "exec/profile.h"
#include "util/clock.h"
#include "util/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct prof_node {
    const kn_node *node;
    char label[96];
    char op[48];
    const char *provider;
    double first_ms, later_ms;
    long later_calls;
} prof_node;

static pthread_once_t kn_prof_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t kn_prof_mu = PTHREAD_MUTEX_INITIALIZER;
static bool kn_prof_enabled;
/* the trace (KILN_PROFILE=FILE.json): events appended as they happen, under kn_prof_mu */
static FILE *kn_trace;
static char kn_trace_path[4096];
static double kn_trace_t0;   /* ms: the trace's time zero */
static long kn_trace_events; /* written so far */
static long kn_trace_runs;
static int kn_trace_threads; /* thread ids handed out */
static _Thread_local int kn_trace_tid;
static prof_node *kn_prof;
static size_t kn_prof_n, kn_prof_cap;

typedef struct prof_group {
    char key[80];
    double first_ms, later_ms;
    long nodes, later_calls;
} prof_group;

static int by_first_desc(const void *a, const void *b) {
    double x = ((const prof_node *)a)->first_ms, y = ((const prof_node *)b)->first_ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* by time per later execution (a node's steady-state cost) */
static int by_later_desc(const void *a, const void *b) {
    const prof_node *p = a, *q = b;
    double x = p->later_calls ? p->later_ms / (double)p->later_calls : 0;
    double y = q->later_calls ? q->later_ms / (double)q->later_calls : 0;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int group_by_first_desc(const void *a, const void *b) {
    double x = ((const prof_group *)a)->first_ms, y = ((const prof_group *)b)->first_ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void report(void) {
    pthread_mutex_lock(&kn_prof_mu);
    if (!kn_prof_n) {
        pthread_mutex_unlock(&kn_prof_mu);
        return;
    }
    prof_group *gr = calloc(kn_prof_n, sizeof *gr);
    size_t ng = 0;
    double first_total = 0, later_total = 0;
    long max_calls = 0;
    for (size_t i = 0; gr && i < kn_prof_n; i++) {
        const prof_node *p = &kn_prof[i];
        char key[80];
        snprintf(key, sizeof key, "%s on %s", p->op, p->provider);
        size_t g = 0;
        while (g < ng && strcmp(gr[g].key, key)) g++;
        if (g == ng) snprintf(gr[ng++].key, sizeof gr[0].key, "%s", key);
        gr[g].first_ms += p->first_ms;
        gr[g].later_ms += p->later_ms;
        gr[g].nodes++;
        gr[g].later_calls += p->later_calls;
        first_total += p->first_ms;
        later_total += p->later_ms;
        if (p->later_calls > max_calls) max_calls = p->later_calls;
    }
    fprintf(stderr, "kiln profile: %zu nodes; first execution %.2f ms in kernels", kn_prof_n, first_total);
    if (max_calls) fprintf(stderr, ", later executions %.3f ms per run (%ld runs)", later_total / (double)max_calls, max_calls);
    fprintf(stderr, "\n  by operator (first ms, later ms per run, nodes):\n");
    if (gr) {
        qsort(gr, ng, sizeof *gr, group_by_first_desc);
        for (size_t g = 0; g < ng && g < 25; g++)
            fprintf(stderr, "    %-40s %9.2f %9.3f %5ld\n", gr[g].key, gr[g].first_ms,
                    max_calls ? gr[g].later_ms / (double)max_calls : 0.0, gr[g].nodes);
    }
    qsort(kn_prof, kn_prof_n, sizeof *kn_prof, by_first_desc);
    fprintf(stderr, "  slowest first executions:\n");
    for (size_t i = 0; i < kn_prof_n && i < 12; i++)
        fprintf(stderr, "    %9.2f ms  %s (%s on %s)\n", kn_prof[i].first_ms, kn_prof[i].label, kn_prof[i].op,
                kn_prof[i].provider);
    if (max_calls) {
        qsort(kn_prof, kn_prof_n, sizeof *kn_prof, by_later_desc);
        fprintf(stderr, "  slowest later executions (ms per run):\n");
        for (size_t i = 0; i < kn_prof_n && i < 12 && kn_prof[i].later_calls; i++)
            fprintf(stderr, "    %9.3f ms  %s (%s on %s)\n", kn_prof[i].later_ms / (double)kn_prof[i].later_calls,
                    kn_prof[i].label, kn_prof[i].op, kn_prof[i].provider);
    }
    free(gr);
    pthread_mutex_unlock(&kn_prof_mu);
}

/* A JSON string's contents (quotes and control characters escaped). */
static void json_str(FILE *f, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
}

static int trace_tid(void) { /* under kn_prof_mu */
    if (!kn_trace_tid) {
        kn_trace_tid = ++kn_trace_threads;
        fprintf(kn_trace, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"kiln run thread %d\"}},\n",
                kn_trace_tid, kn_trace_tid);
    }
    return kn_trace_tid;
}

static void trace_close(void) {
    pthread_mutex_lock(&kn_prof_mu);
    if (kn_trace) {
        fprintf(kn_trace, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"kiln\"}}\n]\n");
        bool ok = fclose(kn_trace) == 0;
        kn_trace = NULL;
        fprintf(stderr, "kiln profile: %s %ld events (%ld runs) to %s (open it in https://ui.perfetto.dev)\n",
                ok ? "wrote" : "failed writing", kn_trace_events, kn_trace_runs, kn_trace_path);
    }
    pthread_mutex_unlock(&kn_prof_mu);
}

static void init(void) {
    const char *e = getenv("KILN_PROFILE");
    kn_prof_enabled = e && *e && strcmp(e, "0");
    if (!kn_prof_enabled) return;
    size_t n = strlen(e);
    if (n > 5 && !strcmp(e + n - 5, ".json")) {
        snprintf(kn_trace_path, sizeof kn_trace_path, "%s", e);
        kn_trace = fopen(e, "w");
        if (!kn_trace) {
            kn_log(KILN_LOG_WARNING, "KILN_PROFILE=%s: cannot write the trace file (%s); printing the summary instead", e,
                   strerror(errno));
        } else {
            kn_trace_t0 = kn_now_ms();
            fprintf(kn_trace, "[\n");
            atexit(trace_close);
            return;
        }
    }
    atexit(report);
}

double kn_profile_run_begin(void) {
    if (!kn_profile_on() || !kn_trace) return 0;
    return kn_now_ms();
}

void kn_profile_run_end(double t0, kiln_status st) {
    if (t0 == 0) return;
    double t1 = kn_now_ms();
    pthread_mutex_lock(&kn_prof_mu);
    if (kn_trace) {
        int tid = trace_tid();
        kn_trace_runs++;
        kn_trace_events++;
        fprintf(kn_trace,
                "{\"name\":\"run %ld\",\"cat\":\"run\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":%d,"
                "\"args\":{\"status\":\"%s\"}},\n",
                kn_trace_runs, (t0 - kn_trace_t0) * 1000.0, (t1 - t0) * 1000.0, tid, kiln_status_name(st));
    }
    pthread_mutex_unlock(&kn_prof_mu);
}

/* One node's slice (under kn_prof_mu). */
static void trace_node(const kn_kernel_ctx *c, const kn_node *n, const char *provider, double t0, double t1,
                       bool first) {
    char label[160], desc[256];
    int tid = trace_tid();
    kn_trace_events++;
    fprintf(kn_trace, "{\"name\":\"");
    json_str(kn_trace, n->name && *n->name ? n->name : n->op_type);
    fprintf(kn_trace, "\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":%d,\"args\":{\"op\":\"",
            provider, (t0 - kn_trace_t0) * 1000.0, (t1 - t0) * 1000.0, tid);
    snprintf(label, sizeof label, "%s%s%s", n->domain && *n->domain ? n->domain : "",
             n->domain && *n->domain ? "." : "", n->op_type);
    json_str(kn_trace, label);
    fprintf(kn_trace, "\",\"provider\":\"%s\",\"first\":%s", provider, first ? "true" : "false");
    for (int side = 0; c && side < 2; side++) {
        int count = side ? c->n_outputs : c->n_inputs;
        fprintf(kn_trace, ",\"%s\":[", side ? "outputs" : "inputs");
        for (int i = 0; i < count; i++) {
            const kn_tensor *t = side ? c->out[i] : c->in[i];
            fprintf(kn_trace, "%s\"", i ? "," : "");
            json_str(kn_trace, t ? kn_tensor_describe(t, desc, sizeof desc) : "(none)");
            fputc('"', kn_trace);
        }
        fputc(']', kn_trace);
    }
    fprintf(kn_trace, "}},\n");
}

bool kn_profile_on(void) {
    pthread_once(&kn_prof_once, init);
    return kn_prof_enabled;
}

double kn_profile_begin(const kn_backend *be) {
    if (be && be->ops->sync) be->ops->sync(be->state);
    return kn_now_ms();
}

void kn_profile_end(const kn_node *n, const kn_backend *be, double t0) {
    kn_profile_end_call(NULL, n, be, t0);
}

void kn_profile_end_call(const kn_kernel_ctx *c, const kn_node *n, const kn_backend *be, double t0) {
    if (be && be->ops->sync) be->ops->sync(be->state);
    double t1 = kn_now_ms(), dt = t1 - t0;
    pthread_mutex_lock(&kn_prof_mu);
    size_t i = 0;
    while (i < kn_prof_n && kn_prof[i].node != n) i++;
    if (i == kn_prof_n) {
        if (kn_prof_n == kn_prof_cap) {
            size_t nc = kn_prof_cap ? kn_prof_cap * 2 : 256;
            prof_node *b = realloc(kn_prof, nc * sizeof *b);
            if (!b) {
                pthread_mutex_unlock(&kn_prof_mu);
                return;
            }
            kn_prof = b;
            kn_prof_cap = nc;
        }
        prof_node *p = &kn_prof[kn_prof_n++];
        memset(p, 0, sizeof *p);
        p->node = n;
        kn_node_label(n, p->label, sizeof p->label);
        snprintf(p->op, sizeof p->op, "%s%s%s", n->domain && *n->domain ? n->domain : "",
                 n->domain && *n->domain ? "." : "", n->op_type);
        p->provider = be ? be->ops->name : "cpu";
        p->first_ms = dt;
    } else {
        kn_prof[i].later_ms += dt;
        kn_prof[i].later_calls++;
    }
    if (kn_trace) trace_node(c, n, kn_prof[i].provider, t0, t1, kn_prof[i].later_calls == 0);
    pthread_mutex_unlock(&kn_prof_mu);
}

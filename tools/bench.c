/* kiln bench: latency and throughput of one model, trtexec-style.
 *
 * Session creation and the first run are timed on their own; then warm-up runs, then timed runs
 * whose latencies give p50/p90/p95/p99/min/max/mean and the throughput in items per second (an
 * item is one element of the first input's first dimension: an image, a sequence).
 *
 * --io device (CUDA): inputs and outputs are device buffers bound once and every run is
 *   kiln_session_run_into on them: the model's own time, as a server that keeps tensors on the
 *   GPU sees it (what PyTorch with device tensors is measured on).
 * --io host: inputs start on the host and outputs end there. With CUDA each run is split into its
 *   host-to-device copies, the run on device buffers and the device-to-host copies, each timed; on
 *   the CPU it is kiln_session_run.
 * --streams N: N threads run at once, each with its own buffers, on one session (as a server calls
 *   one session from many threads) or, with --session-per-stream, on a session each; latencies are
 *   pooled over the threads, throughput is all the streams' items over the time.
 */
#include "cli.h"

#include "exec/graph_run.h"
#include "util/clock.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef KILN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define MAX_STREAMS 64

typedef struct bench_args {
    cli_common common;
    const char *model;
    cli_dim dims[CLI_MAX_DIMS];
    int n_dims;
    long warmup;        /* warm-up runs; -1: at least 20 runs and 1 s */
    long iterations;    /* timed runs per stream; 0: run for `duration` seconds */
    double duration;    /* seconds, when iterations is 0 */
    bool device_io;
    long streams;
    bool session_per_stream; /* --session-per-stream: a session each instead of one shared */
    const char *json;
    bool cuda;          /* the provider list starts with cuda */
    const char *disabled[32]; /* --disable-pass: passes left out (A/B of a pass) */
    int n_disabled;
} bench_args;

/* One stream: a session, its inputs and outputs, and its latencies. */
typedef struct bench_stream {
    const bench_args *args;
    kiln_session *session;
    size_t n_in, n_out;
    const char **in_names, **out_names;
    kiln_tensor **host_in, **dev_in;   /* dev_in: CUDA buffers (NULL on the CPU) */
    kiln_tensor **host_out, **dev_out; /* bound outputs; host_out for --io host */
    double *lat, *h2d, *compute, *d2h; /* per timed run, ms */
    long n_lat, cap_lat;
    double first_run_ms, create_ms;
    int64_t items;                     /* items per run */
    bool split;                        /* host I/O timed in three parts */
    bool owns_session;                 /* false: the first stream's session, shared */
    int failed;
    char error[1024];
} bench_stream;

static int parse_args(bench_args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    cli_common_defaults(&a->common);
    a->warmup = -1;
    a->duration = 3.0;
    a->streams = 1;
    int err = 0;
    const char *warmup = NULL, *iterations = NULL, *duration = NULL, *io = NULL, *streams = NULL;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        if (cli_parse_common(&a->common, argc, argv, &i, &err)) {
            if (err) return 2;
            continue;
        }
        if (o[0] == '-' && strcmp(o, "--dim") && strcmp(o, "--warmup") && strcmp(o, "--iterations") &&
            strcmp(o, "--duration") && strcmp(o, "--io") && strcmp(o, "--streams") && strcmp(o, "--json") &&
            strcmp(o, "--session-per-stream") && strcmp(o, "--disable-pass")) {
            fprintf(stderr, "kiln bench: unknown option '%s' (kiln help bench lists them)\n", o);
            return 2;
        }
        if (!strcmp(o, "--session-per-stream")) {
            a->session_per_stream = true;
            continue;
        }
        if (o[0] == '-' && i + 1 >= argc) {
            fprintf(stderr, "kiln bench: %s needs a value\n", o);
            return 2;
        }
        const char *v = o[0] == '-' ? argv[++i] : NULL;
        bool ok = true;
        if (!strcmp(o, "--dim")) ok = cli_parse_dim(v, a->dims, &a->n_dims, CLI_MAX_DIMS);
        else if (!strcmp(o, "--warmup")) ok = cli_once(o, &warmup, v) && cli_parse_int(o, v, 0, 1000000000, &a->warmup);
        else if (!strcmp(o, "--iterations"))
            ok = cli_once(o, &iterations, v) && cli_parse_int(o, v, 1, 1000000000, &a->iterations);
        else if (!strcmp(o, "--duration"))
            ok = cli_once(o, &duration, v) && cli_parse_double(o, v, 0.001, 86400, &a->duration);
        else if (!strcmp(o, "--streams")) ok = cli_once(o, &streams, v) && cli_parse_int(o, v, 1, MAX_STREAMS, &a->streams);
        else if (!strcmp(o, "--json")) ok = cli_once(o, &a->json, v);
        else if (!strcmp(o, "--disable-pass")) {
            ok = a->n_disabled < (int)(sizeof a->disabled / sizeof a->disabled[0]);
            if (ok) a->disabled[a->n_disabled++] = v;
            else fprintf(stderr, "kiln bench: at most 32 --disable-pass\n");
        }
        else if (!strcmp(o, "--io")) {
            ok = cli_once(o, &io, v);
            if (ok && strcmp(v, "host") && strcmp(v, "device")) {
                fprintf(stderr, "kiln bench: --io takes host or device, not '%s'\n", v);
                ok = false;
            }
        } else if (!a->model) {
            a->model = o;
        } else {
            fprintf(stderr, "kiln bench: one model at a time ('%s' and '%s')\n", a->model, o);
            ok = false;
        }
        if (!ok) return 2;
    }
    if (iterations && duration) {
        fprintf(stderr, "kiln bench: give --iterations or --duration, not both\n");
        return 2;
    }
    if (!a->model) {
        cli_usage_of("bench", stderr);
        return 2;
    }
    a->cuda = !strncmp(a->common.providers, "cuda", 4);
    a->device_io = io ? !strcmp(io, "device") : a->cuda;
    if (a->device_io && !a->cuda) {
        fprintf(stderr, "kiln bench: --io device needs a provider list that starts with cuda\n");
        return 2;
    }
#ifndef KILN_HAVE_CUDA
    if (a->cuda) {
        fprintf(stderr, "kiln bench: this build has no CUDA backend (kiln info)\n");
        return 1;
    }
#endif
    return 0;
}

/* ------------------------------------------------------------------ device memory */

#ifdef KILN_HAVE_CUDA
static bool cuda_ok(bench_stream *b, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return true;
    snprintf(b->error, sizeof b->error, "%s: %s", what, cudaGetErrorString(e));
    return false;
}

/* A device tensor shaped as t (same dtype and dims), uninitialised unless copy. */
static bool device_like(bench_stream *b, kiln_tensor *t, bool copy, kiln_tensor **out) {
    size_t bytes = kiln_tensor_bytes(t);
    void *p = NULL;
    if (!cuda_ok(b, cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc")) return false;
    if (copy && !cuda_ok(b, cudaMemcpy(p, kiln_tensor_data(t), bytes, cudaMemcpyHostToDevice), "cudaMemcpy"))
        return false;
    int dev = 0;
    cudaGetDevice(&dev);
    if (kiln_tensor_wrap_device(kiln_tensor_dtype(t), kiln_tensor_dims(t), kiln_tensor_rank(t), p, bytes, dev, out) !=
        KILN_OK) {
        snprintf(b->error, sizeof b->error, "%s", kiln_last_error());
        cudaFree(p);
        return false;
    }
    return true;
}

static void device_free(kiln_tensor *t) {
    if (!t) return;
    cudaFree(kiln_tensor_data(t));
    kiln_tensor_destroy(t);
}

static size_t device_used(void) {
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) return 0;
    return total - free_b;
}
#endif

/* ------------------------------------------------------------------ one stream */

static void push_time(bench_stream *b, double lat, double h2d, double compute, double d2h) {
    if (b->n_lat == b->cap_lat) {
        long cap = b->cap_lat ? b->cap_lat * 2 : 1024;
        double *l = realloc(b->lat, (size_t)cap * sizeof *l), *h = realloc(b->h2d, (size_t)cap * sizeof *h);
        double *c = realloc(b->compute, (size_t)cap * sizeof *c), *d = realloc(b->d2h, (size_t)cap * sizeof *d);
        if (l) b->lat = l;
        if (h) b->h2d = h;
        if (c) b->compute = c;
        if (d) b->d2h = d;
        if (!l || !h || !c || !d) return; /* out of memory: the run is not recorded */
        b->cap_lat = cap;
    }
    b->lat[b->n_lat] = lat;
    b->h2d[b->n_lat] = h2d;
    b->compute[b->n_lat] = compute;
    b->d2h[b->n_lat++] = d2h;
}

/* One run; its times go to the out-parameters (ms). */
static bool run_once(bench_stream *b, double *lat, double *h2d, double *compute, double *d2h) {
    double t0 = kn_now_ms();
    *h2d = *d2h = 0;
    kiln_status st;
    if (b->dev_in && !b->args->device_io) { /* host I/O through device buffers, in three parts */
#ifdef KILN_HAVE_CUDA
        for (size_t i = 0; i < b->n_in; i++)
            if (!cuda_ok(b, cudaMemcpy(kiln_tensor_data(b->dev_in[i]), kiln_tensor_data(b->host_in[i]),
                                       kiln_tensor_bytes(b->host_in[i]), cudaMemcpyHostToDevice),
                         "cudaMemcpy (inputs)"))
                return false;
        double t1 = kn_now_ms();
        st = kiln_session_run_into(b->session, b->in_names, b->dev_in, b->n_in, b->out_names, b->n_out, b->dev_out);
        double t2 = kn_now_ms();
        if (st == KILN_OK)
            for (size_t i = 0; i < b->n_out; i++)
                if (!cuda_ok(b, cudaMemcpy(kiln_tensor_data(b->host_out[i]), kiln_tensor_data(b->dev_out[i]),
                                           kiln_tensor_bytes(b->host_out[i]), cudaMemcpyDeviceToHost),
                             "cudaMemcpy (outputs)"))
                    return false;
        double t3 = kn_now_ms();
        *h2d = t1 - t0;
        *compute = t2 - t1;
        *d2h = t3 - t2;
#else
        st = KILN_ERR_INTERNAL;
#endif
    } else if (b->dev_in) {
        st = kiln_session_run_into(b->session, b->in_names, b->dev_in, b->n_in, b->out_names, b->n_out, b->dev_out);
    } else if (b->host_out) {
        st = kiln_session_run_into(b->session, b->in_names, b->host_in, b->n_in, b->out_names, b->n_out, b->host_out);
    } else { /* outputs that run_into cannot take (sequences, strings): a plain run */
        kiln_tensor *outs[256] = {0};
        st = kiln_session_run(b->session, b->in_names, b->host_in, b->n_in, NULL, b->n_out, outs);
        for (size_t i = 0; i < b->n_out; i++) kiln_tensor_destroy(outs[i]);
    }
    *lat = kn_now_ms() - t0;
    if (!b->split) *compute = *lat;
    if (st != KILN_OK) {
        snprintf(b->error, sizeof b->error, "%s", kiln_last_error());
        return false;
    }
    return true;
}

static bool stream_buffers(bench_stream *b);

/* Sets up stream b: its own session, or (shared != NULL) that one. */
static bool stream_setup(bench_stream *b, kiln_session *shared) {
    const bench_args *a = b->args;
    if (shared) {
        b->session = shared;
        b->owns_session = false;
        return stream_buffers(b);
    }
    b->owns_session = true;
    kiln_session_options *opts = cli_make_options(&a->common);
    if (!opts) {
        snprintf(b->error, sizeof b->error, "bad options");
        return false;
    }
    if (!cli_apply_dims(opts, a->dims, a->n_dims)) {
        kiln_session_options_destroy(opts);
        snprintf(b->error, sizeof b->error, "bad --dim");
        return false;
    }
    for (int k = 0; k < a->n_disabled; k++)
        if (kiln_session_options_disable_pass(opts, a->disabled[k]) != KILN_OK) {
            snprintf(b->error, sizeof b->error, "--disable-pass %s: %s", a->disabled[k], kiln_last_error());
            kiln_session_options_destroy(opts);
            return false;
        }
    double t0 = kn_now_ms();
    kiln_status st = kiln_session_create(a->model, opts, &b->session);
    b->create_ms = kn_now_ms() - t0;
    kiln_session_options_destroy(opts);
    if (st != KILN_OK) {
        snprintf(b->error, sizeof b->error, "%s", kiln_last_error());
        return false;
    }
    return stream_buffers(b);
}

/* Stream b's inputs (made up: cli_random_input), the first run (timed) and the bound outputs. */
static bool stream_buffers(bench_stream *b) {
    const bench_args *a = b->args;
    kiln_status st;
    double t0;
    b->n_in = kiln_session_input_count(b->session);
    b->n_out = kiln_session_output_count(b->session);
    if (b->n_out > 256) {
        snprintf(b->error, sizeof b->error, "more than 256 outputs");
        return false;
    }
    b->in_names = calloc(b->n_in + 1, sizeof *b->in_names);
    b->out_names = calloc(b->n_out + 1, sizeof *b->out_names);
    b->host_in = calloc(b->n_in + 1, sizeof *b->host_in);
    if (!b->in_names || !b->out_names || !b->host_in) {
        snprintf(b->error, sizeof b->error, "out of memory");
        return false;
    }
    for (size_t i = 0; i < b->n_in; i++) {
        kiln_value_info info;
        kiln_session_input_info(b->session, i, &info);
        b->in_names[i] = info.name;
        /* integers 1: a valid token id, token type, index and attention mask (the rows all attend) */
        if (cli_random_input(&info, a->dims, a->n_dims,
                             "fix it in the model (a dim_param name or a size), e.g. with onnx's "
                             "update_inputs_outputs_dims",
                             1, &b->host_in[i]) != KILN_OK) {
            snprintf(b->error, sizeof b->error, "input '%s': %s", info.name, kiln_last_error());
            return false;
        }
        if (i == 0) b->items = kiln_tensor_rank(b->host_in[0]) > 0 ? kiln_tensor_dims(b->host_in[0])[0] : 1;
    }
    for (size_t i = 0; i < b->n_out; i++) {
        kiln_value_info info;
        kiln_session_output_info(b->session, i, &info);
        b->out_names[i] = info.name;
    }
    /* the first run, timed: host inputs, host outputs (what a first call sees); it also gives the
     * output shapes the bound buffers take */
    kiln_tensor *outs[256] = {0};
    t0 = kn_now_ms();
    st = kiln_session_run(b->session, b->in_names, b->host_in, b->n_in, NULL, b->n_out, outs);
    b->first_run_ms = kn_now_ms() - t0;
    if (st != KILN_OK) {
        snprintf(b->error, sizeof b->error, "%s", kiln_last_error());
        return false;
    }
    bool numeric = true;
    for (size_t i = 0; i < b->n_out; i++)
        numeric = numeric && outs[i] && kiln_tensor_dtype(outs[i]) != KILN_DTYPE_STRING &&
                  kiln_tensor_dtype(outs[i]) != KILN_DTYPE_UNDEFINED;
    bool ok = true;
    if (numeric) {
        b->host_out = calloc(b->n_out + 1, sizeof *b->host_out);
        ok = b->host_out != NULL;
        for (size_t i = 0; ok && i < b->n_out; i++) b->host_out[i] = outs[i], outs[i] = NULL;
    }
#ifdef KILN_HAVE_CUDA
    if (ok && a->cuda && numeric) {
        b->dev_in = calloc(b->n_in + 1, sizeof *b->dev_in);
        b->dev_out = calloc(b->n_out + 1, sizeof *b->dev_out);
        ok = b->dev_in && b->dev_out;
        for (size_t i = 0; ok && i < b->n_in; i++) ok = device_like(b, b->host_in[i], true, &b->dev_in[i]);
        for (size_t i = 0; ok && i < b->n_out; i++) ok = device_like(b, b->host_out[i], false, &b->dev_out[i]);
        b->split = !a->device_io;
    } else if (ok && a->device_io) {
        snprintf(b->error, sizeof b->error, "--io device: the model has outputs run_into cannot bind (strings, "
                                            "sequences); use --io host");
        ok = false;
    }
#endif
    for (size_t i = 0; i < b->n_out; i++) kiln_tensor_destroy(outs[i]);
    return ok;
}

static void stream_teardown(bench_stream *b) {
    for (size_t i = 0; b->host_in && i < b->n_in; i++) kiln_tensor_destroy(b->host_in[i]);
    for (size_t i = 0; b->host_out && i < b->n_out; i++) kiln_tensor_destroy(b->host_out[i]);
#ifdef KILN_HAVE_CUDA
    for (size_t i = 0; b->dev_in && i < b->n_in; i++) device_free(b->dev_in[i]);
    for (size_t i = 0; b->dev_out && i < b->n_out; i++) device_free(b->dev_out[i]);
#endif
    free(b->dev_in);
    free(b->dev_out);
    free(b->host_in);
    free(b->host_out);
    free(b->in_names);
    free(b->out_names);
    free(b->lat);
    free(b->h2d);
    free(b->compute);
    free(b->d2h);
    if (b->owns_session) kiln_session_destroy(b->session);
}

/* Shared between the streams: they start timing together and stop at one deadline. */
static pthread_barrier_t start_barrier;
static double timed_start_ms, timed_end_ms;

static void *stream_main(void *arg) {
    bench_stream *b = arg;
    const bench_args *a = b->args;
    double lat, h2d, compute, d2h;
    /* warm-up */
    double w0 = kn_now_ms();
    for (long r = 0; !b->failed; r++) {
        /* by default also past the provider's work beside the runs (CUDA: cuDNN graphs being
         * built, which later runs take), for at most 60 s */
        if (a->warmup >= 0 ? r >= a->warmup
                           : r >= 20 && kn_now_ms() - w0 >= 1000 &&
                                 (kn_now_ms() - w0 >= 60000 || !kn_session_background_busy(b->session)))
            break;
        if (!run_once(b, &lat, &h2d, &compute, &d2h)) b->failed = 1;
    }
    pthread_barrier_wait(&start_barrier);
    double start = kn_now_ms(), end = start + a->duration * 1000;
    for (long r = 0; !b->failed; r++) {
        if (a->iterations ? r >= a->iterations : kn_now_ms() >= end) break;
        if (!run_once(b, &lat, &h2d, &compute, &d2h)) b->failed = 1;
        else push_time(b, lat, h2d, compute, d2h);
    }
    return NULL;
}

/* ------------------------------------------------------------------ statistics and report */

/* s as a JSON string literal. */
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static int cmp_double(const void *x, const void *y) {
    double p = *(const double *)x, q = *(const double *)y;
    return p < q ? -1 : p > q;
}

/* Percentile of sorted v (nearest rank). */
static double pct(const double *v, long n, double p) {
    if (n == 0) return NAN;
    long k = (long)ceil(p / 100.0 * (double)n) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

static double mean(const double *v, long n) {
    double s = 0;
    for (long i = 0; i < n; i++) s += v[i];
    return n ? s / (double)n : NAN;
}

int cmd_bench(int argc, char **argv) {
    bench_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc;
    double context_ms = 0;
    size_t mem_before = 0, mem_peak = 0;
    (void)mem_before; /* CUDA builds only */
#ifdef KILN_HAVE_CUDA
    if (a.cuda) { /* the CUDA context first, so session creation is timed without it */
        double t0 = kn_now_ms();
        cudaError_t e = cudaFree(0);
        context_ms = kn_now_ms() - t0;
        if (e != cudaSuccess) {
            fprintf(stderr, "kiln bench: no usable CUDA device: %s\n", cudaGetErrorString(e));
            return 1;
        }
        mem_before = device_used();
    }
#endif
    bench_stream *streams = calloc((size_t)a.streams, sizeof *streams);
    if (!streams) return 1;
    rc = 1;
    long created = 0;
    for (; created < a.streams; created++) {
        streams[created].args = &a;
        kiln_session *shared = created > 0 && !a.session_per_stream ? streams[0].session : NULL;
        if (!stream_setup(&streams[created], shared)) {
            fprintf(stderr, "kiln bench: %s: %s\n", a.model, streams[created].error);
            created++;
            goto done;
        }
    }
    pthread_barrier_init(&start_barrier, NULL, (unsigned)a.streams + 1);
    pthread_t threads[MAX_STREAMS];
    for (long s = 0; s < a.streams; s++) pthread_create(&threads[s], NULL, stream_main, &streams[s]);
    pthread_barrier_wait(&start_barrier);
    timed_start_ms = kn_now_ms();
    for (long s = 0; s < a.streams; s++) pthread_join(threads[s], NULL);
    timed_end_ms = kn_now_ms();
    pthread_barrier_destroy(&start_barrier);
#ifdef KILN_HAVE_CUDA
    if (a.cuda) {
        size_t used = device_used();
        mem_peak = used > mem_before ? used - mem_before : 0;
    }
#endif
    long n = 0;
    int64_t items = 0;
    for (long s = 0; s < a.streams; s++) {
        if (streams[s].failed) {
            fprintf(stderr, "kiln bench: %s: %s\n", a.model, streams[s].error);
            goto done;
        }
        n += streams[s].n_lat;
        items += streams[s].n_lat * streams[s].items;
    }
    double *lat = malloc((size_t)(n ? n : 1) * sizeof *lat), *h2d = malloc((size_t)(n ? n : 1) * sizeof *h2d);
    double *cmp = malloc((size_t)(n ? n : 1) * sizeof *cmp), *d2h = malloc((size_t)(n ? n : 1) * sizeof *d2h);
    if (!lat || !h2d || !cmp || !d2h) {
        free(lat), free(h2d), free(cmp), free(d2h);
        goto done;
    }
    for (long s = 0, k = 0; s < a.streams; s++)
        for (long i = 0; i < streams[s].n_lat; i++, k++) {
            lat[k] = streams[s].lat[i];
            h2d[k] = streams[s].h2d[i];
            cmp[k] = streams[s].compute[i];
            d2h[k] = streams[s].d2h[i];
        }
    double h2d_mean = mean(h2d, n), cmp_mean = mean(cmp, n), d2h_mean = mean(d2h, n), lat_mean = mean(lat, n);
    qsort(lat, (size_t)n, sizeof *lat, cmp_double);
    qsort(cmp, (size_t)n, sizeof *cmp, cmp_double);
    double wall_s = (timed_end_ms - timed_start_ms) / 1000.0;
    double throughput = wall_s > 0 ? (double)items / wall_s : 0;
    const bench_stream *b0 = &streams[0];
    printf("model           %s\n", a.model);
    printf("provider        %s  (opt level %d, io %s, %ld stream%s%s)\n", a.common.providers, a.common.opt_level,
           a.device_io ? "device" : "host", a.streams, a.streams > 1 ? "s" : "",
           a.streams > 1 ? (a.session_per_stream ? ", a session each" : " on one session") : "");
    if (a.cuda) printf("cuda context    %.1f ms\n", context_ms);
    printf("session create  %.1f ms\n", b0->create_ms);
    printf("first run       %.3f ms\n", b0->first_run_ms);
    printf("runs            %ld timed in %.2f s (items per run %lld)\n", n, wall_s, (long long)b0->items);
    printf("latency ms      p50 %.4f  p90 %.4f  p95 %.4f  p99 %.4f\n", pct(lat, n, 50), pct(lat, n, 90), pct(lat, n, 95),
           pct(lat, n, 99));
    printf("                min %.4f  max %.4f  mean %.4f\n", n ? lat[0] : NAN, n ? lat[n - 1] : NAN, lat_mean);
    if (b0->split)
        printf("host I/O split  h2d %.4f  compute %.4f (p50 %.4f)  d2h %.4f  ms (means)\n", h2d_mean, cmp_mean,
               pct(cmp, n, 50), d2h_mean);
    printf("throughput      %.1f items/s  (%.1f runs/s)\n", throughput, wall_s > 0 ? (double)n / wall_s : 0);
    if (a.cuda) printf("device memory   %.1f MiB (in use above the context, after the runs)\n", mem_peak / 1048576.0);
    /* whether the runs replayed CUDA graphs: a run that cannot be captured pays every launch on
     * the host, the first thing to know about a batch-1 latency */
    bool graphs_on = false;
    int n_graphs = 0;
    uint64_t launches = 0;
    kn_graph_run_stats(b0->session, &graphs_on, &n_graphs, &launches);
    if (a.cuda)
        printf("cuda graphs     %s\n", !graphs_on ? "off (--log info says why)"
                                     : n_graphs ? "on" : "on, but no run was captured (--log info says why)");
    if (a.cuda && graphs_on) printf("                %d recorded, %llu replays\n", n_graphs, (unsigned long long)launches);
    if (a.json) {
        FILE *f = fopen(a.json, "w");
        if (!f) {
            fprintf(stderr, "kiln bench: cannot write %s\n", a.json);
        } else {
            fputs("{\n  \"model\": ", f);
            json_string(f, a.model);
            fputs(",\n  \"provider\": ", f);
            json_string(f, a.common.providers);
            fprintf(f,
                    ",\n  \"opt_level\": %d,\n  \"io\": \"%s\",\n"
                    "  \"streams\": %ld,\n  \"session_per_stream\": %s,\n  \"items_per_run\": %lld,\n  \"cuda_context_ms\": %.3f,\n"
                    "  \"session_create_ms\": %.3f,\n  \"first_run_ms\": %.4f,\n  \"runs\": %ld,\n"
                    "  \"duration_s\": %.9f,\n  \"latency_ms\": {\"p50\": %.5f, \"p90\": %.5f, \"p95\": %.5f, "
                    "\"p99\": %.5f, \"mean\": %.5f, \"min\": %.5f, \"max\": %.5f},\n",
                    a.common.opt_level, a.device_io ? "device" : "host", a.streams,
                    a.session_per_stream ? "true" : "false",
                    (long long)b0->items, context_ms, b0->create_ms, b0->first_run_ms, n, wall_s, pct(lat, n, 50),
                    pct(lat, n, 90), pct(lat, n, 95), pct(lat, n, 99), lat_mean, n ? lat[0] : NAN,
                    n ? lat[n - 1] : NAN);
            if (b0->split)
                fprintf(f, "  \"h2d_ms\": %.5f,\n  \"compute_ms\": %.5f,\n  \"d2h_ms\": %.5f,\n", h2d_mean, cmp_mean,
                        d2h_mean);
            fprintf(f, "  \"cuda_graphs\": {\"enabled\": %s, \"recorded\": %d, \"replays\": %llu},\n",
                    graphs_on ? "true" : "false", n_graphs, (unsigned long long)launches);
            fprintf(f, "  \"throughput_per_s\": %.3f,\n  \"device_memory_bytes\": %zu\n}\n", throughput, mem_peak);
            fclose(f);
        }
    }
    free(lat), free(h2d), free(cmp), free(d2h);
    rc = 0;
done:
    for (long s = 0; s < created; s++) stream_teardown(&streams[s]);
    free(streams);
    return rc;
}

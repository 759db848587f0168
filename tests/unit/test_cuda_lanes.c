/* One CUDA session, many threads (issue 23): each run context has a lane of its own (a stream,
 * cuDNN handle, workspace, scratch and free list, its recorded graphs), so calls overlap on the
 * device with the weights once.
 *
 * - 16 threads on one session, inputs of mixed batch sizes, graphs on and off, provider cuda alone
 *   and cuda,cpu with a node placed on the CPU in the middle of the run (Det): every output is
 *   bit-identical to the same input's output in a serial run of the session, and the lanes' calls
 *   overlapped (the most lanes inside a call at once > 1).
 * - max_concurrent_runs bounds the lanes; after a first round of calls, a second round with the
 *   same shapes makes no cudaMalloc.
 * - KILN_CUDA_LANES=0 brings back one context whose calls take turns.
 * Every test needs a GPU and skips, saying so, without one. */
#include "unit.h"

#include "backend/backend.h"
#include "exec/session.h"
#include "test_model_builder.h"
#include "util/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* x [N,16,20] (N symbolic) -> Conv (8 channels, pads 1) + bias -> Relu -> Reshape [N,160] ->
 * MatMul [160,32] -> Softmax = y; with cpu_node also z = 2 * Det(Reshape(y, [-1,4,4])) [2N]: Det
 * has no CUDA kernel, so with cuda,cpu it runs on the CPU between device nodes. */
static unsigned char *lanes_model(bool cpu_node, size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    const char *sym[3] = {"N", NULL, NULL};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, (int64_t[]){-1, 16, 20}, sym);
    int w = tmb_const(&b, "w", 3, (int64_t[]){8, 16, 3}, 0.3f), bias = tmb_const(&b, "bias", 1, (int64_t[]){8}, 0.5f);
    int c = tmb_value(&b, "c"), r = tmb_value(&b, "r"), f = tmb_value(&b, "f"), m = tmb_value(&b, "m");
    int y = tmb_value(&b, "y");
    int conv = tmb_node(&b, "Conv", (int[]){x, w, bias}, 3, c);
    tmb_ints(&b, conv, "pads", (int64_t[]){1, 1}, 2);
    tmb_node(&b, "Relu", (int[]){c}, 1, r);
    int shape = tmb_const_i64(&b, "shape", (int64_t[]){0, -1}, 2, false);
    tmb_node(&b, "Reshape", (int[]){r, shape}, 2, f);
    tmb_node(&b, "MatMul", (int[]){f, tmb_const(&b, "w2", 2, (int64_t[]){160, 32}, 0.1f)}, 2, m);
    tmb_int(&b, tmb_node(&b, "Softmax", (int[]){m}, 1, y), "axis", -1);
    tmb_output(&b, y);
    if (cpu_node) {
        int q = tmb_value(&b, "q"), d = tmb_value(&b, "d"), z = tmb_value(&b, "z");
        int sq = tmb_const_i64(&b, "sq", (int64_t[]){-1, 4, 4}, 3, false);
        tmb_node(&b, "Reshape", (int[]){y, sq}, 2, q);
        tmb_node(&b, "Det", (int[]){q}, 1, d);
        int two = tmb_const(&b, "two", 1, (int64_t[]){1}, 0.0f);
        ((float *)b.g->values[two].constant->data)[0] = 2.0f;
        tmb_node(&b, "Mul", (int[]){d, two}, 2, z);
        tmb_output(&b, z);
    }
    return tmb_finish(&b, size);
}

/* providers: "cuda" or "cuda,cpu"; graphs "0" or "1"; max_runs 0 = no bound; lanes: KILN_CUDA_LANES. */
static kiln_session *make_session_lanes(const unsigned char *m, size_t size, const char *providers, const char *graphs,
                                        int max_runs, const char *lanes) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    if (max_runs) kiln_session_options_set_max_concurrent_runs(o, max_runs);
    /* heuristic tuning: one algorithm per problem, chosen once and shared by the lanes */
    const char *k[2] = {"tuning", "graphs"}, *v[2] = {"heuristic", graphs};
    kiln_session_options_append_provider(o, "cuda", k, v, 2);
    if (strstr(providers, "cpu")) kiln_session_options_append_provider(o, "cpu", NULL, NULL, 0);
    /* KILN_CUDA_LANES (read at the session's creation) as the test asks, whatever the default or
     * the environment says; restored after */
    const char *was = getenv("KILN_CUDA_LANES");
    char keep[16] = "";
    if (was) snprintf(keep, sizeof keep, "%s", was);
    setenv("KILN_CUDA_LANES", lanes, 1);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(m, size, NULL, o, &s);
    if (was) setenv("KILN_CUDA_LANES", keep, 1);
    else unsetenv("KILN_CUDA_LANES");
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "session (%s, graphs=%s): %s", providers, graphs, kiln_last_error());
    return s;
}

static kiln_session *make_session(const unsigned char *m, size_t size, const char *providers, const char *graphs,
                                  int max_runs) {
    return make_session_lanes(m, size, providers, graphs, max_runs, "1");
}

#ifdef KILN_HAVE_CUDA
static void *cuda_state(kiln_session *s) {
    for (int i = 0; i < s->rt->n_backends; i++)
        if (!strcmp(s->rt->backends[i].ops->name, "cuda")) return s->rt->backends[i].state;
    return NULL;
}
#endif

/* Lanes open and the most inside calls at once (0, 0 in a build without CUDA, where the tests skip). */
static void lane_stats(kiln_session *s, int *lanes, int *peak) {
    *lanes = *peak = 0;
#ifdef KILN_HAVE_CUDA
    void *st = cuda_state(s);
    if (st) kn_cuda_lane_stats(st, lanes, peak);
#else
    (void)s;
#endif
}

static uint64_t device_allocs(kiln_session *s) {
    for (int i = 0; i < s->rt->n_backends; i++) {
        const kn_backend *be = &s->rt->backends[i];
        if (!strcmp(be->ops->name, "cuda") && be->ops->stats) {
            uint64_t n = 0;
            be->ops->stats(be->state, &n, NULL, NULL);
            return n;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ many threads */

#define N_CASES 6
#define N_THREADS 16

typedef struct lanes_run {
    kiln_session *s;
    size_t n_out;
    kiln_tensor *in[N_CASES];
    kiln_tensor *want[N_CASES][2]; /* the serial run's outputs */
    int rounds;
    atomic_int bad, failed, go;
} lanes_run;

typedef struct lanes_worker {
    lanes_run *sh;
    int id;
} lanes_worker;

static void *worker_main(void *arg) {
    lanes_worker *w = arg;
    lanes_run *sh = w->sh;
    const char *names[1] = {"x"};
    while (!atomic_load(&sh->go)) sched_yield();
    for (int r = 0; r < sh->rounds; r++) {
        int c = (w->id + r) % N_CASES;
        kiln_tensor *out[2] = {NULL, NULL};
        kiln_status st;
        if (w->id % 2) { /* odd threads: into the caller's tensors */
            for (size_t k = 0; k < sh->n_out; k++)
                kiln_tensor_create(kiln_tensor_dtype(sh->want[c][k]), kiln_tensor_dims(sh->want[c][k]),
                                   kiln_tensor_rank(sh->want[c][k]), &out[k]);
            st = kiln_session_run_into(sh->s, names, &sh->in[c], 1, NULL, sh->n_out, out);
        } else {
            st = kiln_session_run(sh->s, names, &sh->in[c], 1, NULL, sh->n_out, out);
        }
        if (st != KILN_OK) {
            if (atomic_fetch_add(&sh->failed, 1) == 0) fprintf(stderr, "  thread %d: %s\n", w->id, kiln_last_error());
        } else {
            for (size_t k = 0; k < sh->n_out; k++)
                if (!tmb_same_tensor(out[k], sh->want[c][k])) atomic_fetch_add(&sh->bad, 1);
        }
        for (size_t k = 0; k < sh->n_out; k++) kiln_tensor_destroy(out[k]);
    }
    return NULL;
}

/* Inputs: batches 1..N_CASES in a mixed order (same_batch: all 3). */
static void make_inputs(lanes_run *sh, bool same_batch) {
    uint32_t seed = 11;
    for (int c = 0; c < N_CASES; c++) {
        int64_t d[3] = {same_batch ? 3 : 1 + (c * 5) % N_CASES, 16, 20};
        kiln_tensor_create(KILN_DTYPE_FLOAT, d, 3, &sh->in[c]);
        float *x = kiln_tensor_data(sh->in[c]);
        for (int64_t i = 0; i < kiln_tensor_element_count(sh->in[c]); i++) x[i] = tmb_rand(&seed);
    }
}

/* Serial outputs (each case run twice: the second a replay where graphs are on), then the threads. */
static void serial_outputs(lanes_run *sh) {
    const char *names[1] = {"x"};
    for (int rep = 0; rep < 3; rep++)
        for (int c = 0; c < N_CASES; c++) {
            kiln_tensor *out[2] = {NULL, NULL};
            CHECK_STATUS(kiln_session_run(sh->s, names, &sh->in[c], 1, NULL, sh->n_out, out), KILN_OK);
            for (size_t k = 0; k < sh->n_out; k++) {
                if (rep == 0) {
                    sh->want[c][k] = out[k];
                    continue;
                }
                CHECK_MSG(tmb_same_tensor(out[k], sh->want[c][k]), "case %d output %zu: serial run %d differs from the first",
                          c, k, rep);
                kiln_tensor_destroy(out[k]);
            }
        }
}

static void threads_round(lanes_run *sh) {
    pthread_t t[N_THREADS];
    lanes_worker w[N_THREADS];
    atomic_store(&sh->go, 0);
    for (int i = 0; i < N_THREADS; i++) {
        w[i] = (lanes_worker){sh, i};
        CHECK(pthread_create(&t[i], NULL, worker_main, &w[i]) == 0);
    }
    atomic_store(&sh->go, 1);
    for (int i = 0; i < N_THREADS; i++) pthread_join(t[i], NULL);
}

static void free_run(lanes_run *sh) {
    for (int c = 0; c < N_CASES; c++) {
        kiln_tensor_destroy(sh->in[c]);
        for (size_t k = 0; k < 2; k++) kiln_tensor_destroy(sh->want[c][k]);
    }
}

static void sixteen_threads(const char *providers, const char *graphs) {
    size_t size;
    bool cpu_node = strstr(providers, "cpu") != NULL;
    unsigned char *m = lanes_model(cpu_node, &size);
    kiln_session *s = m ? make_session(m, size, providers, graphs, 0) : NULL;
    free(m);
    if (!s) return;
    static lanes_run sh;
    memset(&sh, 0, sizeof sh);
    sh.s = s;
    sh.n_out = cpu_node ? 2 : 1;
    sh.rounds = 40;
    make_inputs(&sh, false);
    serial_outputs(&sh);
    double t0 = kn_now_ms();
    threads_round(&sh);
    int contexts = 0, peak_calls = 0, lanes = 0, peak_lanes = 0;
    kn_session_ctx_stats(s, &contexts, &peak_calls);
    lane_stats(s, &lanes, &peak_lanes);
    printf("  %s, graphs=%s: %d threads x %d runs in %.0f ms; %d run contexts, %d lanes, at most %d calls and %d lanes "
           "inside at once\n",
           providers, graphs, N_THREADS, sh.rounds, kn_now_ms() - t0, contexts, lanes, peak_calls, peak_lanes);
    CHECK_EQ_INT(atomic_load(&sh.failed), 0);
    CHECK_MSG(atomic_load(&sh.bad) == 0, "%s graphs=%s: %d outputs differ from the serial run's", providers, graphs,
              atomic_load(&sh.bad));
    CHECK_MSG(peak_lanes > 1, "%s graphs=%s: the calls never overlapped on the device (at most %d lane in a call)",
              providers, graphs, peak_lanes);
    CHECK(lanes >= 1 && lanes <= contexts && contexts <= N_THREADS);
    free_run(&sh);
    kiln_session_destroy(s);
}

KN_TEST(cuda_lanes_16_threads_cuda_graphs) {
    NEED_GPU();
    sixteen_threads("cuda", "1");
}

KN_TEST(cuda_lanes_16_threads_cuda_no_graphs) {
    NEED_GPU();
    sixteen_threads("cuda", "0");
}

KN_TEST(cuda_lanes_16_threads_cuda_cpu_node) {
    NEED_GPU();
    sixteen_threads("cuda,cpu", "1");
    sixteen_threads("cuda,cpu", "0");
}

/* Four contexts for 16 threads: at most four lanes; once each has run the shapes (warm-up,
 * recording, replays), a second round of calls allocates no device memory. */
KN_TEST(cuda_lanes_bounded_and_steady) {
    NEED_GPU();
    size_t size;
    unsigned char *m = lanes_model(false, &size);
    if (!m) return;
    for (int g = 0; g <= 1; g++) {
        kiln_session *s = make_session(m, size, "cuda", g ? "1" : "0", 4);
        if (!s) break;
        static lanes_run sh;
        memset(&sh, 0, sizeof sh);
        sh.s = s;
        sh.n_out = 1;
        sh.rounds = 30;
        make_inputs(&sh, true);
        serial_outputs(&sh);
        threads_round(&sh);
        uint64_t a1 = device_allocs(s);
        threads_round(&sh);
        uint64_t a2 = device_allocs(s);
        int contexts = 0, lanes = 0, peak_lanes = 0;
        kn_session_ctx_stats(s, &contexts, NULL);
        lane_stats(s, &lanes, &peak_lanes);
        printf("  graphs=%d, max_concurrent_runs 4: %d contexts, %d lanes (at most %d in calls at once); cudaMalloc "
               "calls %llu after the first round, %llu after the second\n",
               g, contexts, lanes, peak_lanes, (unsigned long long)a1, (unsigned long long)a2);
        CHECK_EQ_INT(atomic_load(&sh.failed), 0);
        CHECK_EQ_INT(atomic_load(&sh.bad), 0);
        CHECK(contexts <= 4 && lanes <= 4 && peak_lanes <= 4);
        CHECK_MSG(a2 == a1, "graphs=%d: the second round of calls made %llu cudaMalloc calls", g,
                  (unsigned long long)(a2 - a1));
        free_run(&sh);
        kiln_session_destroy(s);
    }
    free(m);
}

/* KILN_CUDA_LANES=0: the calls take turns on one context and one lane, and are still right. */
KN_TEST(cuda_lanes_off_is_serial) {
    NEED_GPU();
    size_t size;
    unsigned char *m = lanes_model(false, &size);
    if (!m) return;
    kiln_session *s = make_session_lanes(m, size, "cuda", "1", 0, "0");
    free(m);
    if (!s) return;
    static lanes_run sh;
    memset(&sh, 0, sizeof sh);
    sh.s = s;
    sh.n_out = 1;
    sh.rounds = 10;
    make_inputs(&sh, false);
    serial_outputs(&sh);
    threads_round(&sh);
    int contexts = 0, lanes = 0, peak_lanes = 0;
    kn_session_ctx_stats(s, &contexts, NULL);
    lane_stats(s, &lanes, &peak_lanes);
    CHECK_EQ_INT(atomic_load(&sh.failed), 0);
    CHECK_EQ_INT(atomic_load(&sh.bad), 0);
    CHECK_EQ_INT(contexts, 1);
    CHECK_EQ_INT(lanes, 1);
    CHECK_EQ_INT(peak_lanes, 1);
    free_run(&sh);
    kiln_session_destroy(s);
}

/* The models above on the CPU (everywhere, no GPU needed): they load, run and give finite outputs,
 * so a failure of the GPU tests is the device's, not the model's. */
KN_TEST(cuda_lanes_models_run_on_cpu) {
    for (int cpu_node = 0; cpu_node <= 1; cpu_node++) {
        size_t size;
        unsigned char *m = lanes_model(cpu_node, &size);
        if (!m) return;
        kiln_session_options *o = NULL;
        kiln_session_options_create(&o);
        kiln_session_options_set_cache(o, 0, NULL);
        kiln_session *s = NULL;
        CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, o, &s), KILN_OK);
        kiln_session_options_destroy(o);
        free(m);
        if (!s) return;
        static lanes_run sh;
        memset(&sh, 0, sizeof sh);
        sh.s = s;
        sh.n_out = cpu_node ? 2 : 1;
        make_inputs(&sh, false);
        serial_outputs(&sh);
        for (int c = 0; c < N_CASES; c++)
            for (size_t k = 0; k < sh.n_out; k++) {
                const kiln_tensor *t = sh.want[c][k];
                CHECK(t != NULL);
                if (!t) continue;
                const float *p = kiln_tensor_data((kiln_tensor *)t);
                for (int64_t i = 0; i < kiln_tensor_element_count(t); i++) CHECK(p[i] == p[i]);
            }
        free_run(&sh);
        kiln_session_destroy(s);
    }
}

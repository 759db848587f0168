/* One session, many threads; bounded runs (issue 23).
 *
 * - 16 threads call one session at once with inputs of different shapes; every output is
 *   bit-identical to the same input's output in a serial run (a model with a symbolic batch, so
 *   each run context makes its own plans for the shapes it sees; and zoo models with static
 *   shapes, the compiled memory plan shared by the contexts).
 * - kiln_run_options: a Loop whose trip count comes from an input (2^62) is stopped by
 *   terminate from another thread and by a timeout, with distinct statuses; the session runs
 *   normally afterwards; terminate set before a call stops it before its first node.
 * - The memory limit turns a Loop that grows (a carried value, or scan outputs piling up) into
 *   KILN_ERR_OUT_OF_MEMORY naming the limit.
 * - Misuse: a call entering while the session is destroyed gets KILN_ERR_MISUSE.
 * - The log level is per session: it holds on the threads creating and running that session only.
 * Times are printed, not judged (a guard only keeps a broken cancellation from hanging the test). */
#include "test_model_builder.h"
#include "unit_zoo.h"

#include "exec/session.h"
#include "kiln.h"
#include "util/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

/* ------------------------------------------------------------------ models */

/* x [N,32] (N symbolic) -> MatMul w[32,32] -> Add b -> Relu -> Softmax -> y; and
 * s = ReduceSum(y * x, axis 1): intra-op loops, a constant the CPU packs once, shapes by run. */
static unsigned char *mlp_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    const char *sym[2] = {"N", NULL};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){-1, 32}, sym);
    int w = tmb_const(&b, "w", 2, (int64_t[]){32, 32}, 0.5f), bias = tmb_const(&b, "b", 1, (int64_t[]){32}, 0.1f);
    int mm = tmb_value(&b, "mm"), ad = tmb_value(&b, "ad"), r = tmb_value(&b, "r"), y = tmb_value(&b, "y");
    int p = tmb_value(&b, "p"), s = tmb_value(&b, "s");
    int axes = tmb_const_i64(&b, "axes", (int64_t[]){1}, 1, false);
    tmb_node(&b, "MatMul", (int[]){x, w}, 2, mm);
    tmb_node(&b, "Add", (int[]){mm, bias}, 2, ad);
    tmb_node(&b, "Relu", (int[]){ad}, 1, r);
    int sm = tmb_node(&b, "Softmax", (int[]){r}, 1, y);
    tmb_int(&b, sm, "axis", -1);
    tmb_node(&b, "Mul", (int[]){y, x}, 2, p);
    tmb_node(&b, "ReduceSum", (int[]){p, axes}, 2, s);
    tmb_output(&b, y);
    tmb_output(&b, s);
    return tmb_finish(&b, size);
}

/* A Loop: trip count M (int64 scalar input), condition true; carried v [4] (input v0), v += 1
 * each iteration. kind 1: also a carried `acc` that grows by 1024 floats (4 KB) each iteration
 * (Concat); kind 2: a scan output of 1024 floats each iteration. Outputs: v (and acc / the
 * stacked scan). */
static unsigned char *loop_model(int kind, size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    kn_graph *main_g = b.g;
    int m = tmb_input(&b, "M", KILN_DTYPE_INT64, 0, NULL, NULL);
    int v0 = tmb_input(&b, "v0", KILN_DTYPE_FLOAT, 1, (int64_t[]){4}, NULL);
    int acc0 = kind == 1 ? tmb_input(&b, "acc0", KILN_DTYPE_FLOAT, 1, (int64_t[]){1024}, NULL) : -1;
    kn_tensor *ct = NULL;
    kn_tensor_new(KILN_DTYPE_BOOL, 0, NULL, &ct);
    ((unsigned char *)ct->data)[0] = 1;
    int cond = tmb_const_tensor(&b, "cond", ct);
    int v = tmb_value(&b, "v"), extra = kind ? tmb_value(&b, kind == 1 ? "acc" : "scan") : -1;

    kn_graph *body = NULL;
    kn_graph_new(b.m, main_g, "body", &body);
    b.g = body;
    tmb_input(&b, "i", KILN_DTYPE_INT64, 0, NULL, NULL);
    int bc = tmb_input(&b, "c_in", KILN_DTYPE_BOOL, 0, NULL, NULL);
    int bv = tmb_input(&b, "v_in", KILN_DTYPE_FLOAT, 1, (int64_t[]){4}, NULL);
    int bacc = kind == 1 ? tmb_input(&b, "acc_in", KILN_DTYPE_FLOAT, 1, (int64_t[]){-1}, (const char *[]){"L"}) : -1;
    int one = tmb_const(&b, "one", 1, (int64_t[]){1}, 0.0f);
    ((float *)b.g->values[one].constant->data)[0] = 1.0f;
    int chunk = kind ? tmb_const(&b, "chunk", 1, (int64_t[]){1024}, 1.0f) : -1;
    int c_out = tmb_value(&b, "c_out"), v_out = tmb_value(&b, "v_out");
    tmb_node(&b, "Identity", (int[]){bc}, 1, c_out);
    tmb_node(&b, "Add", (int[]){bv, one}, 2, v_out);
    tmb_output(&b, c_out);
    tmb_output(&b, v_out);
    if (kind == 1) {
        int acc_out = tmb_value(&b, "acc_out");
        int cn = tmb_node(&b, "Concat", (int[]){bacc, chunk}, 2, acc_out);
        tmb_int(&b, cn, "axis", 0);
        tmb_output(&b, acc_out);
    } else if (kind == 2) {
        int s_out = tmb_value(&b, "s_out");
        tmb_node(&b, "Mul", (int[]){chunk, one}, 2, s_out);
        tmb_output(&b, s_out);
    }
    kn_graph_recount(body);
    b.g = main_g;
    int outs[2] = {v, extra};
    int in[4] = {m, cond, v0, acc0};
    int node = kn_graph_add_node(b.g, "loop", "Loop", "", in, kind == 1 ? 4 : 3, outs, kind ? 2 : 1);
    tmb_attr(&b, node, "body", KN_ATTR_GRAPH)->g = body;
    tmb_output(&b, v);
    if (kind) tmb_output(&b, extra);
    return tmb_finish(&b, size);
}

/* provider: NULL for the default (the CPU), else the only provider */
static kiln_session *make_session_on(const unsigned char *m, size_t size, int threads, uint64_t mem_limit, int max_runs,
                                     const char *provider) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    if (provider) kiln_session_options_append_provider(o, provider, NULL, NULL, 0);
    kiln_session_options_set_intra_op_threads(o, threads);
    if (mem_limit) kiln_session_options_set_memory_limit(o, mem_limit);
    if (max_runs) kiln_session_options_set_max_concurrent_runs(o, max_runs);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(m, size, NULL, o, &s);
    CHECK_MSG(st == KILN_OK, "session: %s", kiln_last_error());
    kiln_session_options_destroy(o);
    return s;
}

static kiln_session *make_session(const unsigned char *m, size_t size, int threads, uint64_t mem_limit, int max_runs) {
    return make_session_on(m, size, threads, mem_limit, max_runs, NULL);
}

/* ------------------------------------------------------------------ 16 threads, one session */

#define KN_CASES 8
#define KN_MAX_OUT 4

typedef struct shared_run {
    kiln_session *s;
    size_t n_in, n_out;
    const char *names[KN_UNIT_ZOO_MAX_IO];
    kiln_tensor *in[KN_CASES][KN_UNIT_ZOO_MAX_IO]; /* per case: the inputs */
    kiln_tensor *want[KN_CASES][KN_MAX_OUT];       /* per case: the serial run's outputs */
    int n_cases, rounds;
    atomic_int bad, failed, go;
} shared_run;

typedef struct worker {
    shared_run *sh;
    int id;
    int into; /* use kiln_session_run_into (odd threads) */
} worker;

static void *worker_main(void *arg) {
    worker *w = arg;
    shared_run *sh = w->sh;
    while (!atomic_load(&sh->go)) sched_yield();
    for (int r = 0; r < sh->rounds; r++) {
        int c = (w->id + r) % sh->n_cases;
        kiln_tensor *out[KN_MAX_OUT] = {NULL};
        kiln_status st;
        if (w->into) {
            for (size_t k = 0; k < sh->n_out; k++)
                kiln_tensor_create(kiln_tensor_dtype(sh->want[c][k]), kiln_tensor_dims(sh->want[c][k]),
                                   kiln_tensor_rank(sh->want[c][k]), &out[k]);
            st = kiln_session_run_into(sh->s, sh->names, sh->in[c], sh->n_in, NULL, sh->n_out, out);
        } else {
            st = kiln_session_run(sh->s, sh->names, sh->in[c], sh->n_in, NULL, sh->n_out, out);
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

/* The serial outputs of every case, then 16 threads at once (half through run_into). */
static void hammer(shared_run *sh, const char *what) {
    for (int c = 0; c < sh->n_cases; c++) {
        CHECK_STATUS(kiln_session_run(sh->s, sh->names, sh->in[c], sh->n_in, NULL, sh->n_out, sh->want[c]), KILN_OK);
        if (!sh->want[c][0]) return;
    }
    enum { N = 16 };
    pthread_t t[N];
    worker w[N];
    double t0 = kn_now_ms();
    for (int i = 0; i < N; i++) {
        w[i] = (worker){sh, i, i % 2};
        CHECK(pthread_create(&t[i], NULL, worker_main, &w[i]) == 0);
    }
    atomic_store(&sh->go, 1);
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    int contexts = 0, peak = 0;
    kn_session_ctx_stats(sh->s, &contexts, &peak);
    printf("  %s: 16 threads x %d runs in %.0f ms; %d run contexts, %d calls inside at once at most\n", what,
           sh->rounds, kn_now_ms() - t0, contexts, peak);
    CHECK_EQ_INT(atomic_load(&sh->failed), 0);
    CHECK_MSG(atomic_load(&sh->bad) == 0, "%s: %d outputs differ from the serial run's", what, atomic_load(&sh->bad));
    CHECK(contexts >= 1 && contexts <= N);
    for (int c = 0; c < sh->n_cases; c++)
        for (size_t k = 0; k < sh->n_out; k++) kiln_tensor_destroy(sh->want[c][k]);
}

KN_TEST(session_serves_16_threads_with_mixed_shapes) {
    size_t size;
    unsigned char *m = mlp_model(&size);
    kiln_session *s = make_session(m, size, 2, 0, 0);
    free(m);
    if (!s) return;
    static shared_run sh;
    memset(&sh, 0, sizeof sh);
    sh.s = s;
    sh.n_in = 1;
    sh.n_out = 2;
    sh.names[0] = "x";
    sh.n_cases = KN_CASES;
    sh.rounds = 200; /* tiny runs: enough of them that calls overlap (a thread preempted inside one) */
    uint32_t seed = 7;
    for (int c = 0; c < KN_CASES; c++) {
        int64_t dims[2] = {1 + c * 37 % 64, 32}; /* batches 1, 38, 11, 48, ... */
        kiln_tensor_create(KILN_DTYPE_FLOAT, dims, 2, &sh.in[c][0]);
        float *x = kiln_tensor_data(sh.in[c][0]);
        for (int64_t i = 0; i < dims[0] * 32; i++) x[i] = tmb_rand(&seed);
    }
    hammer(&sh, "symbolic batch");
    for (int c = 0; c < KN_CASES; c++) kiln_tensor_destroy(sh.in[c][0]);
    kiln_session_destroy(s);
}

typedef struct zoo_arg {
    int done;
} zoo_arg;

static void zoo_one(const char *dir, const char *name, void *arg) {
    zoo_arg *z = arg;
    if (strcmp(name, "mobilenet_v3_small") && strcmp(name, "bert_mini")) return;
    kiln_session *s = kn_unit_zoo_session(dir, name, 2, 3);
    if (!s) return;
    kn_unit_zoo_data d;
    kn_unit_zoo_read(dir, s, &d);
    static shared_run sh;
    memset(&sh, 0, sizeof sh);
    sh.s = s;
    sh.n_in = d.n_in;
    sh.n_out = d.n_out < KN_MAX_OUT ? d.n_out : KN_MAX_OUT;
    if (sh.n_out != d.n_out) sh.n_out = 0;
    for (size_t i = 0; i < d.n_in; i++) sh.names[i] = d.names[i];
    /* two cases: the data set's inputs, and float inputs scaled (integer inputs as they are) */
    sh.n_cases = 2;
    sh.rounds = 3;
    for (size_t i = 0; i < d.n_in; i++) {
        sh.in[0][i] = d.in[i];
        kiln_tensor *t = NULL;
        kiln_tensor_create(kiln_tensor_dtype(d.in[i]), kiln_tensor_dims(d.in[i]), kiln_tensor_rank(d.in[i]), &t);
        memcpy(kiln_tensor_data(t), kiln_tensor_data(d.in[i]), kiln_tensor_bytes(t));
        if (kiln_tensor_dtype(t) == KILN_DTYPE_FLOAT) {
            float *p = kiln_tensor_data(t);
            for (int64_t k = 0; k < kiln_tensor_element_count(t); k++) p[k] *= 0.5f;
        }
        sh.in[1][i] = t;
    }
    if (sh.n_out) {
        hammer(&sh, name);
        z->done++;
    }
    for (size_t i = 0; i < d.n_in; i++) kiln_tensor_destroy(sh.in[1][i]);
    kn_unit_zoo_free(&d);
    kiln_session_destroy(s);
}

KN_TEST(session_serves_16_threads_zoo) {
    zoo_arg z = {0};
    if (!kn_unit_each_zoo_model(zoo_one, &z)) KN_SKIP("no model zoo");
    if (!z.done) KN_SKIP("neither mobilenet_v3_small nor bert_mini in the zoo");
}

/* A bound on concurrent calls: 8 threads, at most 2 contexts, every output right. */
KN_TEST(session_bounds_concurrent_runs) {
    size_t size;
    unsigned char *m = mlp_model(&size);
    kiln_session *s = make_session(m, size, 1, 0, 2);
    free(m);
    if (!s) return;
    static shared_run sh;
    memset(&sh, 0, sizeof sh);
    sh.s = s;
    sh.n_in = 1;
    sh.n_out = 2;
    sh.names[0] = "x";
    sh.n_cases = 2;
    sh.rounds = 10;
    for (int c = 0; c < 2; c++) {
        int64_t dims[2] = {3 + c, 32};
        kiln_tensor_create(KILN_DTYPE_FLOAT, dims, 2, &sh.in[c][0]);
        float *x = kiln_tensor_data(sh.in[c][0]);
        for (int64_t i = 0; i < dims[0] * 32; i++) x[i] = (float)(i % 7) - 3;
    }
    hammer(&sh, "at most 2 at once");
    int contexts = 0;
    kn_session_ctx_stats(s, &contexts, NULL);
    CHECK(contexts <= 2);
    for (int c = 0; c < 2; c++) kiln_tensor_destroy(sh.in[c][0]);
    kiln_session_destroy(s);
}

/* ------------------------------------------------------------------ bounded runs */

typedef struct loop_call {
    kiln_session *s;
    kiln_run_options *ro;
    int64_t trips;
    kiln_status st;
    char msg[1024];
    float v0;       /* output v[0] on success */
    atomic_int done;
    double ended_ms;
} loop_call;

static void *loop_call_main(void *arg) {
    loop_call *c = arg;
    kiln_tensor *m = NULL, *v = NULL, *out[2] = {NULL, NULL};
    kiln_tensor_create(KILN_DTYPE_INT64, NULL, 0, &m);
    *(int64_t *)kiln_tensor_data(m) = c->trips;
    kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){4}, 1, &v);
    const char *names[2] = {"M", "v0"};
    kiln_tensor *in[2] = {m, v};
    c->st = kiln_session_run_with(c->s, c->ro, names, in, 2, NULL, 1, out);
    snprintf(c->msg, sizeof c->msg, "%s", kiln_last_error());
    c->v0 = c->st == KILN_OK && out[0] ? ((float *)kiln_tensor_data(out[0]))[0] : -1;
    c->ended_ms = kn_now_ms();
    kiln_tensor_destroy(out[0]);
    kiln_tensor_destroy(m);
    kiln_tensor_destroy(v);
    atomic_store(&c->done, 1);
    return NULL;
}

/* Waits for the call to end; false after `guard_ms` (a hang: the test fails, the thread is left). */
static bool wait_done(loop_call *c, double guard_ms) {
    double t0 = kn_now_ms();
    while (!atomic_load(&c->done)) {
        if (kn_now_ms() - t0 > guard_ms) return false;
        usleep(1000);
    }
    return true;
}

/* Run options on an endless Loop (2^62 trips) of session s: a bounded loop runs to its end, terminate
 * set from another thread stops the call promptly and every later call until cleared, a deadline
 * stops it, and runs without the options or within the limit are unaffected. Destroys s. */
static void check_cancel_and_deadline(kiln_session *s) {
    kiln_run_options *ro = NULL;
    CHECK_STATUS(kiln_run_options_create(&ro), KILN_OK);
    CHECK_STATUS(kiln_run_options_set_timeout_ms(ro, -1), KILN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(kiln_run_options_set_terminate(NULL, 1), KILN_ERR_INVALID_ARGUMENT);

    /* a bounded loop with the options: runs to its end */
    loop_call c = {s, ro, 10, 0, "", 0, 0, 0};
    loop_call_main(&c);
    CHECK_STATUS(c.st, KILN_OK);
    CHECK(c.v0 == 10.0f);

    /* terminate from another thread */
    pthread_t t;
    loop_call e = {s, ro, (int64_t)1 << 62, 0, "", 0, 0, 0};
    CHECK(pthread_create(&t, NULL, loop_call_main, &e) == 0);
    usleep(200 * 1000);
    CHECK(!atomic_load(&e.done));
    double set_at = kn_now_ms();
    CHECK_STATUS(kiln_run_options_set_terminate(ro, 1), KILN_OK);
    bool ended = wait_done(&e, 30000);
    CHECK_MSG(ended, "the cancelled run did not stop within 30 s");
    if (!ended) return;
    pthread_join(t, NULL);
    printf("  cancelled: stopped %.1f ms after terminate was set: %s\n", e.ended_ms - set_at, e.msg);
    CHECK_EQ_INT(e.st, KILN_ERR_CANCELLED);
    CHECK_MSG(strstr(e.msg, "cancelled") && strstr(e.msg, "kiln_session_run_with"), "message: %s", e.msg);

    /* still set: a new call stops before its first node */
    loop_call f = {s, ro, 10, 0, "", 0, 0, 0};
    loop_call_main(&f);
    CHECK_EQ_INT(f.st, KILN_ERR_CANCELLED);

    /* cleared: the session runs as before */
    CHECK_STATUS(kiln_run_options_set_terminate(ro, 0), KILN_OK);
    loop_call g = {s, ro, 7, 0, "", 0, 0, 0};
    loop_call_main(&g);
    CHECK_STATUS(g.st, KILN_OK);
    CHECK(g.v0 == 7.0f);

    /* a deadline */
    CHECK_STATUS(kiln_run_options_set_timeout_ms(ro, 300), KILN_OK);
    loop_call d = {s, ro, (int64_t)1 << 62, 0, "", 0, 0, 0};
    double t0 = kn_now_ms();
    CHECK(pthread_create(&t, NULL, loop_call_main, &d) == 0);
    ended = wait_done(&d, 30000);
    CHECK_MSG(ended, "the run with a 300 ms timeout did not stop within 30 s");
    if (!ended) return;
    pthread_join(t, NULL);
    printf("  deadline: a 300 ms timeout returned after %.1f ms: %s\n", d.ended_ms - t0, d.msg);
    CHECK_EQ_INT(d.st, KILN_ERR_DEADLINE);
    CHECK_MSG(strstr(d.msg, "timeout of 300 ms"), "message: %s", d.msg);

    /* plain runs are unaffected, the options' runs within the limit too */
    loop_call h = {s, NULL, 5, 0, "", 0, 0, 0};
    loop_call_main(&h);
    CHECK_STATUS(h.st, KILN_OK);
    CHECK(h.v0 == 5.0f);
    loop_call k = {s, ro, 5, 0, "", 0, 0, 0};
    loop_call_main(&k);
    CHECK_STATUS(k.st, KILN_OK);
    kiln_run_options_destroy(ro);
    kiln_run_options_destroy(NULL);
    kiln_session_destroy(s);
}


KN_TEST(run_options_cancel_and_deadline_stop_an_endless_loop) {
    size_t size;
    unsigned char *m = loop_model(0, &size);
    kiln_session *s = make_session(m, size, 1, 0, 0);
    free(m);
    if (s) check_cancel_and_deadline(s);
}

/* The same with the Loop and its body on CUDA (provider cuda alone): the run stops between the body's
 * device nodes as it does between the CPU's. */
KN_TEST(cuda_run_options_cancel_and_deadline_stop_an_endless_loop) {
    NEED_GPU();
    size_t size;
    unsigned char *m = loop_model(0, &size);
    kiln_session *s = make_session_on(m, size, 1, 0, 0, "cuda");
    free(m);
    if (s) check_cancel_and_deadline(s);
}

/* One options object stops several calls on several threads at once. */
KN_TEST(run_options_terminate_stops_every_call_using_it) {
    size_t size;
    unsigned char *m = loop_model(0, &size);
    kiln_session *s = make_session(m, size, 1, 0, 0);
    free(m);
    if (!s) return;
    kiln_run_options *ro = NULL;
    kiln_run_options_create(&ro);
    enum { N = 4 };
    loop_call c[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        c[i] = (loop_call){s, ro, (int64_t)1 << 62, 0, "", 0, 0, 0};
        CHECK(pthread_create(&t[i], NULL, loop_call_main, &c[i]) == 0);
    }
    usleep(100 * 1000);
    kiln_run_options_set_terminate(ro, 1);
    for (int i = 0; i < N; i++) {
        bool ended = wait_done(&c[i], 30000);
        CHECK_MSG(ended, "call %d did not stop within 30 s", i);
        if (!ended) return;
        pthread_join(t[i], NULL);
        CHECK_EQ_INT(c[i].st, KILN_ERR_CANCELLED);
    }
    kiln_run_options_destroy(ro);
    kiln_session_destroy(s);
}

static kiln_status run_growing(kiln_session *s, int kind, int64_t trips, char *msg, size_t cap) {
    kiln_tensor *m = NULL, *v = NULL, *acc = NULL, *out[2] = {NULL, NULL};
    kiln_tensor_create(KILN_DTYPE_INT64, NULL, 0, &m);
    *(int64_t *)kiln_tensor_data(m) = trips;
    kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){4}, 1, &v);
    kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){1024}, 1, &acc);
    const char *names[3] = {"M", "v0", "acc0"};
    kiln_tensor *in[3] = {m, v, acc};
    kiln_status st = kiln_session_run(s, names, in, kind == 1 ? 3 : 2, NULL, 2, out);
    snprintf(msg, cap, "%s", kiln_last_error());
    if (st == KILN_OK) {
        int64_t want = kind == 1 ? 1024 * (trips + 1) : 1024 * trips;
        if (kiln_tensor_element_count(out[1]) != want) st = KILN_ERR_INTERNAL;
    }
    kiln_tensor_destroy(out[0]);
    kiln_tensor_destroy(out[1]);
    kiln_tensor_destroy(m);
    kiln_tensor_destroy(v);
    kiln_tensor_destroy(acc);
    return st;
}

KN_TEST(memory_limit_stops_a_growing_loop) {
    for (int kind = 1; kind <= 2; kind++) {
        size_t size;
        unsigned char *m = loop_model(kind, &size);
        /* a carried value that grows is copied whole every iteration (quadratic): a smaller limit */
        uint64_t limit = kind == 1 ? 1u << 20 : 16u << 20;
        kiln_session *s = make_session(m, size, 1, limit, 0);
        free(m);
        if (!s) return;
        char msg[1024];
        /* within the limit */
        CHECK_MSG(run_growing(s, kind, 60, msg, sizeof msg) == KILN_OK, "kind %d: %s", kind, msg);
        /* endless: about 4 KB more every iteration */
        double t0 = kn_now_ms();
        kiln_status st = run_growing(s, kind, (int64_t)1 << 62, msg, sizeof msg);
        printf("  memory limit (%s): %.0f ms: %s\n", kind == 1 ? "carried Concat" : "scan outputs", kn_now_ms() - t0, msg);
        CHECK_EQ_INT(st, KILN_ERR_OUT_OF_MEMORY);
        char want[64];
        snprintf(want, sizeof want, "memory limit of %llu bytes", (unsigned long long)limit);
        CHECK_MSG(strstr(msg, want) && strstr(msg, kind == 1 ? "acc_out" : "s_out"), "kind %d: %s", kind, msg);
        /* the session is usable afterwards */
        CHECK_MSG(run_growing(s, kind, 50, msg, sizeof msg) == KILN_OK, "kind %d after: %s", kind, msg);
        kiln_session_destroy(s);
    }
}

/* ------------------------------------------------------------------ misuse */

typedef struct destroyer {
    kiln_session *s;
    atomic_int done;
} destroyer;

static void *destroy_main(void *arg) {
    destroyer *d = arg;
    kiln_session_destroy(d->s);
    atomic_store(&d->done, 1);
    return NULL;
}

KN_TEST(session_destroyed_while_running_is_misuse) {
    CHECK(!strcmp(kiln_status_name(KILN_ERR_MISUSE), "KILN_ERR_MISUSE"));
    CHECK(!strcmp(kiln_status_name(KILN_ERR_CANCELLED), "KILN_ERR_CANCELLED"));
    CHECK(!strcmp(kiln_status_name(KILN_ERR_DEADLINE), "KILN_ERR_DEADLINE"));
    CHECK_EQ_INT(KILN_ERR_MISUSE, 12);
    size_t size;
    unsigned char *m = loop_model(0, &size);
    kiln_session *s = make_session(m, size, 1, 0, 0);
    free(m);
    if (!s) return;
    kiln_run_options *ro = NULL;
    kiln_run_options_create(&ro);
    loop_call e = {s, ro, (int64_t)1 << 62, 0, "", 0, 0, 0};
    pthread_t t, td;
    CHECK(pthread_create(&t, NULL, loop_call_main, &e) == 0);
    usleep(50 * 1000);
    destroyer d = {s, 0};
    CHECK(pthread_create(&td, NULL, destroy_main, &d) == 0);
    /* destroy waits for the running call; a call entering now is refused */
    bool closing = false;
    for (int i = 0; i < 5000 && !closing; i++) {
        pthread_mutex_lock(&s->ctx_mu);
        closing = s->closing;
        pthread_mutex_unlock(&s->ctx_mu);
        if (!closing) usleep(1000);
    }
    CHECK(closing);
    if (closing) {
        loop_call late = {s, NULL, 3, 0, "", 0, 0, 0};
        loop_call_main(&late);
        CHECK_EQ_INT(late.st, KILN_ERR_MISUSE);
        CHECK_MSG(strstr(late.msg, "being destroyed"), "message: %s", late.msg);
    }
    CHECK(!atomic_load(&d.done));
    kiln_run_options_set_terminate(ro, 1);
    pthread_join(t, NULL);
    pthread_join(td, NULL);
    CHECK_EQ_INT(e.st, KILN_ERR_CANCELLED);
    CHECK(atomic_load(&d.done));
    kiln_run_options_destroy(ro);
}

/* A serial session (a device provider with KILN_CUDA_LANES=0) has one run context, so its calls take
 * turns (simulated on the CPU by marking the session so; test_cuda_lanes.c runs both on a GPU). */
KN_TEST(session_with_a_device_takes_calls_in_turn) {
    size_t size;
    unsigned char *m = mlp_model(&size);
    kiln_session *s = make_session(m, size, 1, 0, 0);
    free(m);
    if (!s) return;
    s->serial = true;
    static shared_run sh;
    memset(&sh, 0, sizeof sh);
    sh.s = s;
    sh.n_in = 1;
    sh.n_out = 2;
    sh.names[0] = "x";
    sh.n_cases = 2;
    sh.rounds = 10;
    for (int c = 0; c < 2; c++) {
        int64_t dims[2] = {2 + 5 * c, 32};
        kiln_tensor_create(KILN_DTYPE_FLOAT, dims, 2, &sh.in[c][0]);
        float *x = kiln_tensor_data(sh.in[c][0]);
        for (int64_t i = 0; i < dims[0] * 32; i++) x[i] = (float)(i % 5) - 2;
    }
    hammer(&sh, "one call at a time");
    int contexts = 0, peak = 0;
    kn_session_ctx_stats(s, &contexts, &peak);
    CHECK_EQ_INT(contexts, 1);
    CHECK_EQ_INT(peak, 1);
    for (int c = 0; c < 2; c++) kiln_tensor_destroy(sh.in[c][0]);
    kiln_session_destroy(s);
}

/* ------------------------------------------------------------------ per-session log level */

#include "util/log.h"

#include <fcntl.h>

typedef struct log_worker {
    kiln_session *s;
    int id, rounds;
    atomic_int *failed;
} log_worker;

/* Runs the MLP with a batch of its own per round: each run context's first run with a shape set
 * records a shape memo, which a session at level debug logs ("shape memo of graph"). */
static void *log_worker_main(void *arg) {
    log_worker *w = arg;
    const char *names[1] = {"x"};
    for (int r = 0; r < w->rounds; r++) {
        int64_t d[2] = {1 + (w->id + r) % 5, 32};
        kiln_tensor *x = NULL;
        kiln_tensor_create(KILN_DTYPE_FLOAT, d, 2, &x);
        if (x) memset(kiln_tensor_data(x), 0, (size_t)(d[0] * d[1]) * sizeof(float));
        kiln_tensor *out[2] = {NULL, NULL};
        if (!x || kiln_session_run(w->s, names, &x, 1, NULL, 2, out) != KILN_OK) atomic_fetch_add(w->failed, 1);
        kiln_tensor_destroy(out[0]);
        kiln_tensor_destroy(out[1]);
        kiln_tensor_destroy(x);
    }
    return NULL;
}

/* Counts "shape memo" lines written to fd 2 while `n` threads run s. */
static int memo_lines_while_running(kiln_session *s, int n) {
    char path[] = "/tmp/kiln_log_level_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return -1;
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    atomic_int failed = 0;
    pthread_t t[8];
    log_worker w[8];
    for (int i = 0; i < n; i++) {
        w[i] = (log_worker){s, i, 6, &failed};
        CHECK(pthread_create(&t[i], NULL, log_worker_main, &w[i]) == 0);
    }
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    CHECK_EQ_INT(atomic_load(&failed), 0);
    int lines = 0;
    FILE *f = fdopen(fd, "r");
    if (f) {
        rewind(f);
        char line[1024];
        while (fgets(line, sizeof line, f))
            if (strstr(line, "shape memo of graph")) lines++;
        fclose(f);
    } else {
        close(fd);
    }
    unlink(path);
    return lines;
}

/* The log level is the session's, on the threads that create and run it, and nothing else's: a
 * session at level error run from 4 threads logs nothing at debug while the creating thread's own
 * level is debug, a session at level debug run the same way does, and the threads' levels are
 * back to what they were after each call (issue 23: every session creation used to write a
 * process-wide level, a data race under ThreadSanitizer). */
KN_TEST(session_log_level_holds_on_its_own_threads) {
    if (getenv("KILN_LOG")) {
        printf("  KILN_LOG is set (it overrides every level): skipped\n");
        return;
    }
    size_t size = 0;
    unsigned char *m = mlp_model(&size);
    kiln_session *quiet = NULL, *loud = NULL;
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_intra_op_threads(o, 1);
    CHECK_EQ_INT((int)kn_log_get_level(), KILN_LOG_WARNING);
    kiln_session_options_set_log_level(o, KILN_LOG_ERROR);
    CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, o, &quiet), KILN_OK);
    kiln_session_options_set_log_level(o, KILN_LOG_DEBUG);
    CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, o, &loud), KILN_OK);
    kiln_session_options_destroy(o);
    CHECK_EQ_INT((int)kn_log_get_level(), KILN_LOG_WARNING); /* creation left this thread's level */
    if (quiet && loud) {
        int prev = kn_log_swap_level(KILN_LOG_DEBUG); /* this thread's own level: not the runs' */
        CHECK_EQ_INT(memo_lines_while_running(quiet, 4), 0);
        kn_log_restore_level(prev);
        int loud_lines = memo_lines_while_running(loud, 4);
        CHECK_MSG(loud_lines > 0, "a session at level debug logged no shape memo from its threads");
        CHECK_EQ_INT((int)kn_log_get_level(), KILN_LOG_WARNING);
    }
    kiln_session_destroy(quiet);
    kiln_session_destroy(loud);
    free(m);
}

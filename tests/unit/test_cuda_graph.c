/* The CUDA run path built for speed: runs captured into CUDA graphs and replayed give the outputs
 * an uncaptured run gives (several runs, changing input values), a change of input shapes falls
 * back (and is captured on its own), replays allocate no device memory, device inputs and outputs
 * (kiln_tensor_wrap_device, outputs left on the device, kiln_session_run_into) give what host ones
 * give, graphs made for the caller's device buffers follow them when they move, and the API
 * rejects bad device tensors with messages that say why. Tests that need a GPU
 * skip without one; the API checks that do not need one run everywhere. */
#include "unit.h"

#include "backend/backend.h"
#include "exec/graph_run.h"
#include "exec/session.h"
#include "test_model_builder.h"
#include "unit_zoo.h"

#ifdef KILN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ the model */

/* X [B,16,20] -> Conv(8 channels, pads 1) -> Relu -> Reshape to [B, 160] with the shape computed
 * from Shape -> Gather -> Unsqueeze -> Concat (host values) -> MatMul [160,10] -> times the float
 * of Shape(M)[1] (a host value the device reads) = Y; second output: Shape of the Relu (int64).
 * symbolic: B is the symbol "batch", else 2. */
static unsigned char *graph_model(bool symbolic, size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int64_t xd[3] = {symbolic ? -1 : 2, 16, 20}, wd[3] = {8, 16, 3}, bd[1] = {8}, w2d[2] = {160, 10};
    const char *sym[3] = {"batch", NULL, NULL};
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 3, xd, symbolic ? sym : NULL);
    int w = tmb_const(&b, "W", 3, wd, 0.3f), bias = tmb_const(&b, "Bc", 1, bd, 0.5f);
    int c = tmb_value(&b, "C"), r = tmb_value(&b, "R");
    int conv_in[3] = {x, w, bias};
    int conv = tmb_node(&b, "Conv", conv_in, 3, c);
    int64_t pads[2] = {1, 1};
    tmb_ints(&b, conv, "pads", pads, 2);
    int relu_in[1] = {c};
    tmb_node(&b, "Relu", relu_in, 1, r);
    int s = tmb_value(&b, "S"), b0 = tmb_value(&b, "B0"), b1 = tmb_value(&b, "B1"), sh = tmb_value(&b, "SH");
    int shape_in[1] = {r};
    tmb_node(&b, "Shape", shape_in, 1, s);
    int64_t zero = 0, minus1 = -1, one = 1;
    int g_in[2] = {s, tmb_const_i64(&b, "i0", &zero, 1, true)};
    tmb_int(&b, tmb_node(&b, "Gather", g_in, 2, b0), "axis", 0);
    int u_in[2] = {b0, tmb_const_i64(&b, "axes0", &zero, 1, false)};
    tmb_node(&b, "Unsqueeze", u_in, 2, b1);
    int cat_in[2] = {b1, tmb_const_i64(&b, "rest", &minus1, 1, false)};
    tmb_int(&b, tmb_node(&b, "Concat", cat_in, 2, sh), "axis", 0);
    int f = tmb_value(&b, "F"), m = tmb_value(&b, "M");
    int rs_in[2] = {r, sh};
    tmb_node(&b, "Reshape", rs_in, 2, f);
    int mm_in[2] = {f, tmb_const(&b, "W2", 2, w2d, 0.1f)};
    tmb_node(&b, "MatMul", mm_in, 2, m);
    int s2 = tmb_value(&b, "S2"), n = tmb_value(&b, "N"), nf = tmb_value(&b, "NF"), y = tmb_value(&b, "Y");
    int s2_in[1] = {m};
    tmb_node(&b, "Shape", s2_in, 1, s2);
    int g2_in[2] = {s2, tmb_const_i64(&b, "i1", &one, 1, true)};
    tmb_int(&b, tmb_node(&b, "Gather", g2_in, 2, n), "axis", 0);
    int cast_in[1] = {n};
    tmb_int(&b, tmb_node(&b, "Cast", cast_in, 1, nf), "to", KILN_DTYPE_FLOAT);
    int mul_in[2] = {m, nf};
    tmb_node(&b, "Mul", mul_in, 2, y);
    tmb_output(&b, y);
    tmb_output(&b, s);
    return tmb_finish(&b, size);
}

/* ------------------------------------------------------------------ sessions and runs */

static kiln_session *make_session(const unsigned char *m, size_t size, const char *provider, const char *graphs,
                                  int level, int output_device) {
    kiln_session_options *o;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, level);
    kiln_session_options_set_cache(o, 0, NULL);
    if (output_device) kiln_session_options_set_output_device(o, (kiln_device_type)output_device);
    /* heuristic tuning: the sessions compared here then pick the same algorithms (exhaustive tuning
     * times the candidates, and two sessions may pick different ones, which round differently) */
    const char *k[2], *v[2];
    int n = 0;
    if (!strcmp(provider, "cuda")) k[n] = "tuning", v[n++] = "heuristic";
    if (graphs) k[n] = "graphs", v[n++] = graphs;
    kiln_session_options_append_provider(o, provider, n ? k : NULL, n ? v : NULL, n);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(m, size, NULL, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "session (%s, graphs=%s, level %d): %s", provider, graphs ? graphs : "default", level,
              kiln_last_error());
    return s;
}

static kiln_tensor *random_x(int64_t batch, uint32_t seed) {
    int64_t d[3] = {batch, 16, 20};
    kiln_tensor *t = NULL;
    kiln_tensor_create(KILN_DTYPE_FLOAT, d, 3, &t);
    float *p = kiln_tensor_data(t);
    for (int64_t i = 0; i < kiln_tensor_element_count(t); i++) p[i] = tmb_rand(&seed);
    return t;
}

/* Runs with X; out[0] = Y, out[1] = S (the caller frees them). */
static kiln_status run_x(kiln_session *s, kiln_tensor *x, kiln_tensor **out) {
    const char *names[1] = {"X"};
    kiln_tensor *in[1] = {x};
    kiln_status st = kiln_session_run(s, names, in, 1, NULL, 2, out);
    CHECK_MSG(st == KILN_OK, "run: %s", kiln_last_error());
    return st;
}

static int same_floats(const kiln_tensor *a, const kiln_tensor *b, double rtol, double atol, const char *what) {
    if (!a || !b) return 0;
    if (kiln_tensor_element_count(a) != kiln_tensor_element_count(b) || kiln_tensor_rank(a) != kiln_tensor_rank(b)) {
        kn_unit_fail(__FILE__, __LINE__, "%s: shapes differ", what);
        return 0;
    }
    const float *x = kiln_tensor_data((kiln_tensor *)a), *y = kiln_tensor_data((kiln_tensor *)b);
    for (int64_t i = 0; i < kiln_tensor_element_count(a); i++)
        if (!(fabs((double)x[i] - y[i]) <= atol + rtol * fabs((double)y[i]))) {
            kn_unit_fail(__FILE__, __LINE__, "%s: element %lld is %.8g, expected %.8g", what, (long long)i, x[i], y[i]);
            return 0;
        }
    return 1;
}

static int same_i64(const kiln_tensor *a, const int64_t *want, int n, const char *what) {
    if (!a || kiln_tensor_element_count(a) != n || kiln_tensor_dtype(a) != KILN_DTYPE_INT64) {
        kn_unit_fail(__FILE__, __LINE__, "%s: not an int64 tensor of %d elements", what, n);
        return 0;
    }
    const int64_t *p = kiln_tensor_data((kiln_tensor *)a);
    for (int i = 0; i < n; i++)
        if (p[i] != want[i]) {
            kn_unit_fail(__FILE__, __LINE__, "%s: element %d is %lld, expected %lld", what, i, (long long)p[i],
                         (long long)want[i]);
            return 0;
        }
    return 1;
}

static const kn_backend *cuda_backend_of(kiln_session *s) {
    for (int i = 0; i < s->rt->n_backends; i++)
        if (!strcmp(s->rt->backends[i].ops->name, "cuda")) return &s->rt->backends[i];
    return NULL;
}

static uint64_t device_allocs(kiln_session *s) {
    const kn_backend *cu = cuda_backend_of(s);
    uint64_t n = 0;
    if (cu && cu->ops->stats) cu->ops->stats(cu->state, &n, NULL, NULL);
    return n;
}

/* ------------------------------------------------------------------ GPU tests */

KN_TEST(cuda_graph_replay_matches_uncaptured) {
    NEED_GPU();
    size_t size;
    unsigned char *m = graph_model(false, &size);
    if (!m) return;
    for (int level = 0; level <= 3; level += 3) {
        kiln_session *cpu = make_session(m, size, "cpu", NULL, 0, 0);
        kiln_session *graphed = make_session(m, size, "cuda", NULL, level, 0);
        kiln_session *plain = make_session(m, size, "cuda", "0", level, 0);
        if (!cpu || !graphed || !plain) goto next;
        bool enabled = false;
        kn_graph_run_stats(graphed, &enabled, NULL, NULL);
        CHECK_MSG(enabled, "level %d: static shapes, but runs are not captured by default (see the info log)", level);
        kn_graph_run_stats(plain, &enabled, NULL, NULL);
        CHECK_MSG(!enabled, "graphs=0 still captures");
        uint64_t allocs_after_capture = 0, plain_allocs = 0;
        for (int r = 0; r < 6; r++) {
            kiln_tensor *x = random_x(2, 100u + (uint32_t)r);
            kiln_tensor *want[2] = {0}, *got[2] = {0}, *ref[2] = {0};
            if (run_x(cpu, x, ref) == KILN_OK && run_x(plain, x, want) == KILN_OK && run_x(graphed, x, got) == KILN_OK) {
                char what[128];
                snprintf(what, sizeof what, "level %d run %d: graph replay against the uncaptured run", level, r);
                same_floats(got[0], want[0], 1e-5, 1e-6, what);
                snprintf(what, sizeof what, "level %d run %d: graph replay against the CPU", level, r);
                same_floats(got[0], ref[0], 1e-4, 1e-5, what);
                int64_t s_want[3] = {2, 8, 20};
                same_i64(got[1], s_want, 3, "the Shape output of a replay");
            }
            if (r == 2) {
                allocs_after_capture = device_allocs(graphed);
                plain_allocs = device_allocs(plain);
            }
            for (int i = 0; i < 2; i++) {
                kiln_tensor_destroy(want[i]);
                kiln_tensor_destroy(got[i]);
                kiln_tensor_destroy(ref[i]);
            }
            kiln_tensor_destroy(x);
        }
        int graphs = 0;
        uint64_t launches = 0;
        kn_graph_run_stats(graphed, NULL, &graphs, &launches);
        /* run 0 warms up, run 1 is recorded and launched, runs 2..5 replay */
        CHECK_MSG(graphs == 1 && launches == 5, "level %d: %d graphs, %llu launches (expected 1 and 5)", level, graphs,
                  (unsigned long long)launches);
        CHECK_MSG(device_allocs(graphed) == allocs_after_capture, "level %d: replays made %llu cudaMalloc calls", level,
                  (unsigned long long)(device_allocs(graphed) - allocs_after_capture));
        CHECK_MSG(device_allocs(plain) == plain_allocs, "level %d: uncaptured runs made %llu cudaMalloc calls", level,
                  (unsigned long long)(device_allocs(plain) - plain_allocs));
    next:
        kiln_session_destroy(cpu);
        kiln_session_destroy(graphed);
        kiln_session_destroy(plain);
    }
    free(m);
}

/* Host outputs of a CUDA session come in pinned memory (the device copies into it at full speed),
 * replayed or not, hold the right values, and stay valid after the session is destroyed. */
KN_TEST(cuda_host_outputs_pinned_and_outlive_session) {
    NEED_GPU();
    size_t size;
    unsigned char *m = graph_model(false, &size);
    if (!m) return;
    kiln_session *cpu = make_session(m, size, "cpu", NULL, 0, 0);
    kiln_session *gpu = make_session(m, size, "cuda", NULL, 3, 0);
    kiln_tensor *keep = NULL, *keep_ref = NULL;
    for (int r = 0; cpu && gpu && r < 5; r++) { /* warm-up, recorded, replays */
        kiln_tensor *x = random_x(2, 300u + (uint32_t)r);
        kiln_tensor *got[2] = {0}, *ref[2] = {0};
        if (run_x(cpu, x, ref) == KILN_OK && run_x(gpu, x, got) == KILN_OK) {
            char what[96];
            snprintf(what, sizeof what, "run %d against the CPU", r);
            same_floats(got[0], ref[0], 1e-4, 1e-5, what);
#ifdef KILN_HAVE_CUDA
            struct cudaPointerAttributes at;
            memset(&at, 0, sizeof at);
            cudaError_t e = cudaPointerGetAttributes(&at, kiln_tensor_data(got[0]));
            CHECK_MSG(e == cudaSuccess && at.type == cudaMemoryTypeHost,
                      "run %d: the float output is not in pinned host memory (type %d, %s)", r, (int)at.type,
                      cudaGetErrorString(e));
            cudaGetLastError();
#endif
        }
        if (r == 4) {
            keep = got[0], keep_ref = ref[0];
            got[0] = ref[0] = NULL;
        }
        for (int i = 0; i < 2; i++) {
            kiln_tensor_destroy(got[i]);
            kiln_tensor_destroy(ref[i]);
        }
        kiln_tensor_destroy(x);
    }
    kiln_session_destroy(gpu);
    kiln_session_destroy(cpu);
    if (keep && keep_ref) same_floats(keep, keep_ref, 1e-4, 1e-5, "an output read after its session was destroyed");
    kiln_tensor_destroy(keep);
    kiln_tensor_destroy(keep_ref);
    free(m);
}

KN_TEST(cuda_graph_shape_change_falls_back) {
    NEED_GPU();
    size_t size;
    unsigned char *m = graph_model(true, &size);
    if (!m) return;
    kiln_session *cpu = make_session(m, size, "cpu", NULL, 0, 0);
    kiln_session *graphed = make_session(m, size, "cuda", "1", 3, 0);
    kiln_session *disabled = make_session(m, size, "cuda", "0", 3, 0); /* graphs=0: never captured */
    kiln_session *unset = make_session(m, size, "cuda", NULL, 3, 0);     /* the default: as graphs=1 */
    if (cpu && graphed && disabled && unset) {
        bool enabled = true;
        kn_graph_run_stats(disabled, &enabled, NULL, NULL);
        CHECK_MSG(!enabled, "a session with graphs=0 is captured");
        kn_graph_run_stats(unset, &enabled, NULL, NULL);
        CHECK_MSG(enabled, "a model with a symbolic batch is not captured by default");
        static const int64_t batches[] = {2, 2, 2, 3, 3, 3, 2, 5, 2};
        for (size_t r = 0; r < sizeof batches / sizeof batches[0]; r++) {
            kiln_tensor *x = random_x(batches[r], 7u + (uint32_t)r);
            kiln_tensor *ref[2] = {0}, *got[2] = {0}, *dflt[2] = {0};
            kiln_tensor *dflt2[2] = {0};
            if (run_x(cpu, x, ref) == KILN_OK && run_x(graphed, x, got) == KILN_OK &&
                run_x(disabled, x, dflt) == KILN_OK && run_x(unset, x, dflt2) == KILN_OK) {
                char what[128];
                snprintf(what, sizeof what, "run %zu (batch %lld), graphs=1", r, (long long)batches[r]);
                same_floats(got[0], ref[0], 1e-4, 1e-5, what);
                snprintf(what, sizeof what, "run %zu (batch %lld), not captured", r, (long long)batches[r]);
                same_floats(dflt[0], ref[0], 1e-4, 1e-5, what);
                snprintf(what, sizeof what, "run %zu (batch %lld), graphs unset", r, (long long)batches[r]);
                same_floats(dflt2[0], ref[0], 1e-4, 1e-5, what);
                int64_t s_want[3] = {batches[r], 8, 20};
                same_i64(got[1], s_want, 3, "the Shape output after a shape change");
            }
            for (int i = 0; i < 2; i++) {
                kiln_tensor_destroy(ref[i]);
                kiln_tensor_destroy(got[i]);
                kiln_tensor_destroy(dflt[i]);
                kiln_tensor_destroy(dflt2[i]);
            }
            kiln_tensor_destroy(x);
        }
        int graphs = 0;
        uint64_t launches = 0;
        kn_graph_run_stats(graphed, NULL, &graphs, &launches);
        /* batch 2: recorded at run 1, replayed at 2, 6, 8; batch 3: recorded at 4, replayed at 5;
         * batch 5 ran once, uncaptured */
        CHECK_MSG(graphs == 2 && launches == 6, "%d graphs, %llu launches (expected 2 and 6)", graphs,
                  (unsigned long long)launches);
        kn_graph_run_stats(unset, NULL, &graphs, &launches);
        CHECK_MSG(graphs == 2 && launches == 6, "graphs unset: %d graphs, %llu launches (expected 2 and 6)", graphs,
                  (unsigned long long)launches);
    }
    kiln_session_destroy(cpu);
    kiln_session_destroy(graphed);
    kiln_session_destroy(disabled);
    kiln_session_destroy(unset);
    free(m);
}

#ifdef KILN_HAVE_CUDA
/* A device copy of a host tensor, wrapped (the caller frees the tensor, then *mem). */
static kiln_tensor *to_device(const kiln_tensor *host, void **mem) {
    size_t bytes = kiln_tensor_bytes(host);
    *mem = NULL;
    if (cudaMalloc(mem, bytes ? bytes : 1) != cudaSuccess) {
        kn_unit_fail(__FILE__, __LINE__, "cudaMalloc failed");
        return NULL;
    }
    cudaMemcpy(*mem, kiln_tensor_data((kiln_tensor *)host), bytes, cudaMemcpyHostToDevice);
    kiln_tensor *t = NULL;
    kiln_status st = kiln_tensor_wrap_device(kiln_tensor_dtype(host), kiln_tensor_dims(host), kiln_tensor_rank(host),
                                             *mem, bytes, 0, &t);
    CHECK_MSG(st == KILN_OK, "kiln_tensor_wrap_device: %s", kiln_last_error());
    return t;
}

/* A host copy of a device tensor. */
static kiln_tensor *to_host(kiln_tensor *dev) {
    kiln_tensor *h = NULL;
    kiln_tensor_create(kiln_tensor_dtype(dev), kiln_tensor_dims(dev), kiln_tensor_rank(dev), &h);
    cudaMemcpy(kiln_tensor_data(h), kiln_tensor_data(dev), kiln_tensor_bytes(dev), cudaMemcpyDeviceToHost);
    return h;
}
#endif

KN_TEST(cuda_graph_device_inputs_and_outputs) {
    NEED_GPU();
#ifdef KILN_HAVE_CUDA
    size_t size;
    unsigned char *m = graph_model(false, &size);
    if (!m) return;
    for (int graphs = 0; graphs < 2; graphs++) {
        const char *g = graphs ? "1" : "0";
        kiln_session *host_out = make_session(m, size, "cuda", g, 3, 0);
        kiln_session *dev_out = make_session(m, size, "cuda", g, 3, KILN_DEVICE_CUDA);
        if (!host_out || !dev_out) goto next;
        /* caller-provided outputs: one on the device, one on the host */
        int64_t yd[2] = {2, 10}, sd[1] = {3};
        void *y_mem = NULL;
        cudaMalloc(&y_mem, sizeof(float) * 20);
        kiln_tensor *y_into = NULL, *s_into = NULL;
        kiln_tensor_wrap_device(KILN_DTYPE_FLOAT, yd, 2, y_mem, sizeof(float) * 20, 0, &y_into);
        kiln_tensor_create(KILN_DTYPE_INT64, sd, 1, &s_into);
        uint64_t allocs = 0;
        for (int r = 0; r < 5; r++) {
            kiln_tensor *x = random_x(2, 300u + (uint32_t)r);
            void *x_mem = NULL;
            kiln_tensor *xd = to_device(x, &x_mem);
            CHECK(kiln_tensor_device(xd, NULL) == KILN_DEVICE_CUDA);
            kiln_tensor *want[2] = {0}, *a[2] = {0}, *b[2] = {0};
            char what[160];
            int64_t s_want[3] = {2, 8, 20};
            if (xd && run_x(host_out, x, want) == KILN_OK && run_x(host_out, xd, a) == KILN_OK) {
                snprintf(what, sizeof what, "graphs=%s run %d: device input, host output", g, r);
                same_floats(a[0], want[0], 1e-6, 1e-7, what);
            }
            if (xd && run_x(dev_out, xd, b) == KILN_OK) {
                int dev = -1;
                CHECK(kiln_tensor_device(b[0], &dev) == KILN_DEVICE_CUDA && dev == 0);
                CHECK(kiln_tensor_device(b[1], NULL) == KILN_DEVICE_CUDA);
                kiln_tensor *bh = to_host(b[0]), *sh = to_host(b[1]);
                snprintf(what, sizeof what, "graphs=%s run %d: device input, device output", g, r);
                same_floats(bh, want[0], 1e-6, 1e-7, what);
                same_i64(sh, s_want, 3, "the Shape output left on the device");
                kiln_tensor_destroy(bh);
                kiln_tensor_destroy(sh);
            }
            const char *in_names[1] = {"X"};
            kiln_tensor *ins[1] = {xd};
            kiln_tensor *into[2] = {y_into, s_into};
            if (r == 3) allocs = device_allocs(host_out);
            kiln_status st = kiln_session_run_into(host_out, in_names, ins, 1, NULL, 2, into);
            CHECK_MSG(st == KILN_OK, "run_into: %s", kiln_last_error());
            if (st == KILN_OK && want[0]) {
                kiln_tensor *yh = to_host(y_into);
                snprintf(what, sizeof what, "graphs=%s run %d: kiln_session_run_into", g, r);
                same_floats(yh, want[0], 1e-6, 1e-7, what);
                same_i64(s_into, s_want, 3, "the Shape output written into a host tensor");
                kiln_tensor_destroy(yh);
            }
            for (int i = 0; i < 2; i++) {
                kiln_tensor_destroy(want[i]);
                kiln_tensor_destroy(a[i]);
            }
            kiln_tensor_destroy(b[1]);
            if (r == 4) {
                /* the last device output outlives its session: its memory goes back afterwards */
                kiln_session_destroy(dev_out);
                dev_out = NULL;
            }
            kiln_tensor_destroy(b[0]);
            kiln_tensor_destroy(x);
            kiln_tensor_destroy(xd);
            cudaFree(x_mem);
        }
        if (graphs) {
            int n = 0;
            kn_graph_run_stats(host_out, NULL, &n, NULL);
            CHECK_MSG(n == 1, "graphs=1 with device inputs: %d graphs recorded", n);
            CHECK_MSG(device_allocs(host_out) == allocs, "run_into replays made %llu cudaMalloc calls",
                      (unsigned long long)(device_allocs(host_out) - allocs));
        }
        kiln_tensor_destroy(y_into);
        kiln_tensor_destroy(s_into);
        cudaFree(y_mem);
    next:
        kiln_session_destroy(host_out);
        kiln_session_destroy(dev_out);
    }
    free(m);
#endif
}

/* A caller that keeps its device buffers gets graphs made for them: replays read the inputs and
 * write the outputs in place (one launch). Buffers that move (another pair, then alternating
 * pairs) are served right, a buffer the call was not given is never written, and after the
 * moves the session settles on a copying graph. Every output against an uncaptured session. */
KN_TEST(cuda_graph_in_place_follows_the_callers_buffers) {
    NEED_GPU();
#ifdef KILN_HAVE_CUDA
    size_t size;
    unsigned char *m = graph_model(false, &size);
    if (!m) return;
    kiln_session *graphed = make_session(m, size, "cuda", "1", 3, 0);
    kiln_session *plain = make_session(m, size, "cuda", "0", 3, 0);
    int64_t xd[3] = {2, 16, 20}, yd[2] = {2, 10}, sd[1] = {3};
    size_t xbytes = sizeof(float) * 2 * 16 * 20, ybytes = sizeof(float) * 20;
    void *x_mem[2] = {0}, *y_mem[2] = {0};
    kiln_tensor *xs[2] = {0}, *ys[2] = {0}, *s_into = NULL;
    kiln_tensor_create(KILN_DTYPE_INT64, sd, 1, &s_into);
    for (int k = 0; k < 2; k++) {
        cudaMalloc(&x_mem[k], xbytes);
        cudaMalloc(&y_mem[k], ybytes);
        cudaMemset(y_mem[k], 0, ybytes);
        kiln_tensor_wrap_device(KILN_DTYPE_FLOAT, xd, 3, x_mem[k], xbytes, 0, &xs[k]);
        kiln_tensor_wrap_device(KILN_DTYPE_FLOAT, yd, 2, y_mem[k], ybytes, 0, &ys[k]);
    }
    if (!graphed || !plain || !xs[0] || !xs[1] || !ys[0] || !ys[1]) goto done;
    /* calls 0-5 on pair 0 (warm-up, recording, replays), 6-8 on pair 1, then alternating */
    const int pair_of[16] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 1, 0, 1, 0, 1, 0};
    uint64_t in_place_after_first_pair = 0;
    for (int r = 0; r < 16; r++) {
        int k = pair_of[r];
        kiln_tensor *x = random_x(2, 700u + (uint32_t)r), *want[2] = {0};
        if (run_x(plain, x, want) != KILN_OK) {
            kiln_tensor_destroy(x);
            break;
        }
        cudaMemcpy(x_mem[k], kiln_tensor_data(x), xbytes, cudaMemcpyHostToDevice);
        /* the other pair's output holds a sentinel the call must leave alone */
        kiln_tensor *other_before = to_host(ys[1 - k]);
        const char *in_names[1] = {"X"};
        kiln_tensor *ins[1] = {xs[k]}, *into[2] = {ys[k], s_into};
        kiln_status st = kiln_session_run_into(graphed, in_names, ins, 1, NULL, 2, into);
        CHECK_MSG(st == KILN_OK, "call %d (buffers %d): %s", r, k, kiln_last_error());
        if (st == KILN_OK) {
            char what[128];
            kiln_tensor *yh = to_host(ys[k]), *other_after = to_host(ys[1 - k]);
            snprintf(what, sizeof what, "call %d (buffers %d): output against an uncaptured session", r, k);
            same_floats(yh, want[0], 1e-5, 1e-6, what);
            int64_t s_want[3] = {2, 8, 20};
            same_i64(s_into, s_want, 3, "the Shape output (a host tensor) beside a graph's in-place output");
            snprintf(what, sizeof what, "call %d (buffers %d): the other buffers' output, not given, changed", r, k);
            same_floats(other_after, other_before, 0, 0, what);
            kiln_tensor_destroy(yh);
            kiln_tensor_destroy(other_after);
        }
        if (r == 5) in_place_after_first_pair = kn_graph_run_in_place_launches(graphed);
        kiln_tensor_destroy(other_before);
        kiln_tensor_destroy(want[0]);
        kiln_tensor_destroy(want[1]);
        kiln_tensor_destroy(x);
    }
    int graphs = 0;
    uint64_t launches = 0, in_place = kn_graph_run_in_place_launches(graphed);
    kn_graph_run_stats(graphed, NULL, &graphs, &launches);
    /* call 0 warms up, 1 records for pair 0 and 2-5 replay it in place: 5 in-place launches */
    CHECK_MSG(in_place_after_first_pair == 5, "calls 1-5 on one pair of buffers: %llu in-place launches, expected 5",
              (unsigned long long)in_place_after_first_pair);
    /* every later call replays or records (15 launches in all), one graph held; once the buffers
     * have moved twice the graph copies, so fewer than all launches are in place */
    CHECK_MSG(graphs == 1 && launches == 15, "%d graphs held, %llu launches (expected 1 and 15)", graphs,
              (unsigned long long)launches);
    CHECK_MSG(in_place > 5 && in_place < launches, "%llu of %llu launches in place: expected the second pair's "
              "in place, the alternating calls' copying", (unsigned long long)in_place, (unsigned long long)launches);
done:
    for (int k = 0; k < 2; k++) {
        kiln_tensor_destroy(xs[k]);
        kiln_tensor_destroy(ys[k]);
        cudaFree(x_mem[k]);
        cudaFree(y_mem[k]);
    }
    kiln_tensor_destroy(s_into);
    kiln_session_destroy(graphed);
    kiln_session_destroy(plain);
    free(m);
#endif
}

KN_TEST(cuda_graph_rejects_bad_device_tensors) {
    NEED_GPU();
#ifdef KILN_HAVE_CUDA
    int64_t d[2] = {2, 10};
    kiln_tensor *t = NULL;
    float host[20];
    CHECK_STATUS(kiln_tensor_wrap_device(KILN_DTYPE_FLOAT, d, 2, host, sizeof host, 0, &t), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("host memory");
    CHECK(t == NULL);
    void *pinned = NULL;
    if (cudaMallocHost(&pinned, 80) == cudaSuccess) {
        CHECK_STATUS(kiln_tensor_wrap_device(KILN_DTYPE_FLOAT, d, 2, pinned, 80, 0, &t), KILN_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_HAS("pinned host memory");
        cudaFreeHost(pinned);
    }
    void *mem = NULL;
    cudaMalloc(&mem, 80);
    CHECK_STATUS(kiln_tensor_wrap_device(KILN_DTYPE_FLOAT, d, 2, mem, 40, 0, &t), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("smaller");
    int count = (int)kiln_device_count("cuda");
    CHECK_STATUS(kiln_tensor_wrap_device(KILN_DTYPE_FLOAT, d, 2, mem, 80, count, &t), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("device_id");
    /* a well-formed device tensor of the wrong shape for an output */
    CHECK_STATUS(kiln_tensor_wrap_device(KILN_DTYPE_FLOAT, d, 2, mem, 80, 0, &t), KILN_OK);
    size_t size;
    unsigned char *m = graph_model(false, &size);
    kiln_session *s = m ? make_session(m, size, "cuda", NULL, 3, 0) : NULL;
    if (s && t) {
        kiln_tensor *x = random_x(2, 1);
        const char *in_names[1] = {"X"}, *out_names[1] = {"S"};
        kiln_tensor *ins[1] = {x}, *into[1] = {t};
        CHECK_STATUS(kiln_session_run_into(s, in_names, ins, 1, out_names, 1, into), KILN_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_HAS("output 'S'");
        /* a device tensor is not a valid input of the wrong shape either */
        kiln_tensor *bad[1] = {t};
        kiln_tensor *outs[2] = {0};
        CHECK_STATUS(kiln_session_run(s, in_names, bad, 1, NULL, 2, outs), KILN_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_HAS("'X'");
        kiln_tensor_destroy(x);
    }
    kiln_session_destroy(s);
    kiln_tensor_destroy(t);
    cudaFree(mem);
    free(m);
#endif
}

/* The backend's recording refuses what a replay could not repeat (a constant's first copy, a wait
 * for the device, a copy to the host), a failed recording leaves nothing behind, and the session
 * then runs as before. */
KN_TEST(cuda_graph_recording_failure_recovers) {
    NEED_GPU();
    size_t size;
    unsigned char *m = graph_model(false, &size);
    kiln_session *s = m ? make_session(m, size, "cuda", "0", 3, 0) : NULL;
    /* the same session that never records: what the allocator does after one run is the reference
     * (its block choices settle over the first runs, so "no cudaMalloc" alone would test the pool's
     * warm-up, not the recording) */
    kiln_session *twin = m ? make_session(m, size, "cuda", "0", 3, 0) : NULL;
    kiln_session *cpu = m ? make_session(m, size, "cpu", NULL, 0, 0) : NULL;
    const kn_backend *be = s ? cuda_backend_of(s) : NULL;
    if (be && cpu && twin) {
        kiln_tensor *x = random_x(2, 77);
        kiln_tensor *want[2] = {0}, *got[2] = {0};
        run_x(cpu, x, want);
        for (int i = 0; i < 2; i++) { /* warm-up */
            run_x(i ? twin : s, x, got);
            kiln_tensor_destroy(got[0]);
            kiln_tensor_destroy(got[1]);
        }
        CHECK_STATUS(be->ops->capture_begin(be->state), KILN_OK);
        kn_tensor *d = NULL, *h = NULL;
        CHECK_STATUS(be->ops->upload(be->state, x, true, &d), KILN_ERR_UNSUPPORTED);
        CHECK_ERROR_HAS("recorded");
        CHECK_STATUS(be->ops->upload(be->state, x, false, &d), KILN_OK); /* from a pinned copy */
        if (d) {
            CHECK_STATUS(be->ops->download(be->state, d, &h), KILN_ERR_UNSUPPORTED);
            CHECK_ERROR_HAS("on the host while the run is recorded");
        }
        CHECK_STATUS(be->ops->sync(be->state), KILN_ERR_UNSUPPORTED);
        void *graph = (void *)1;
        CHECK(be->ops->capture_end(be->state, false, &graph) != KILN_OK);
        CHECK(graph == NULL);
        kn_tensor_free(d);
        kn_tensor_free(h);
        /* the stream is out of capture mode: runs and copies work */
        CHECK_STATUS(be->ops->sync(be->state), KILN_OK);
        uint64_t allocs = device_allocs(s), twin_allocs = device_allocs(twin);
        for (int r = 0; r < 3; r++) {
            if (run_x(s, x, got) == KILN_OK) same_floats(got[0], want[0], 1e-4, 1e-5, "a run after a failed recording");
            kiln_tensor_destroy(got[0]);
            kiln_tensor_destroy(got[1]);
            if (run_x(twin, x, got) == KILN_OK) same_floats(got[0], want[0], 1e-4, 1e-5, "the twin's run");
            kiln_tensor_destroy(got[0]);
            kiln_tensor_destroy(got[1]);
        }
        CHECK_MSG(device_allocs(s) - allocs == device_allocs(twin) - twin_allocs,
                  "runs after a failed recording made %llu cudaMalloc calls, the same runs of a session that never "
                  "recorded %llu",
                  (unsigned long long)(device_allocs(s) - allocs), (unsigned long long)(device_allocs(twin) - twin_allocs));
        /* and the pool has settled: nothing the recording reserved is still held apart */
        allocs = device_allocs(s);
        for (int r = 0; r < 3; r++) {
            run_x(s, x, got);
            kiln_tensor_destroy(got[0]);
            kiln_tensor_destroy(got[1]);
        }
        CHECK_MSG(device_allocs(s) == allocs, "settled runs after a failed recording made %llu cudaMalloc calls",
                  (unsigned long long)(device_allocs(s) - allocs));
        kiln_tensor_destroy(want[0]);
        kiln_tensor_destroy(want[1]);
        kiln_tensor_destroy(x);
    }
    kiln_session_destroy(s);
    kiln_session_destroy(twin);
    kiln_session_destroy(cpu);
    free(m);
}

/* The zoo (KILN_ZOO, else ../shared/models) with graphs=1: the third run of test_data_set_0 (a
 * replay, where the session can be captured) against the reference outputs, relative L2 < 1e-4. */
static void zoo_replay(const char *dir, const char *name, void *arg) {
    (void)arg;
    char model[4300];
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    kiln_session_options *o;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    const char *k[1] = {"graphs"}, *v[1] = {"1"};
    kiln_session_options_append_provider(o, "cuda", k, v, 1);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create(model, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "%s: %s", name, kiln_last_error());
    if (st != KILN_OK) return;
    kn_unit_zoo_data d;
    kn_unit_zoo_read(dir, s, &d);
    kn_tensor *out[KN_UNIT_ZOO_MAX_IO] = {0};
    for (int r = 0; r < 3 && st == KILN_OK; r++) {
        for (size_t i = 0; i < KN_UNIT_ZOO_MAX_IO; i++) {
            kn_tensor_free(out[i]);
            out[i] = NULL;
        }
        st = kiln_session_run(s, d.names, d.in, d.n_in, NULL, d.n_out, out);
        CHECK_MSG(st == KILN_OK, "%s run %d: %s", name, r, kiln_last_error());
    }
    int graphs = 0;
    kn_graph_run_stats(s, NULL, &graphs, NULL);
    for (size_t i = 0; st == KILN_OK && i < d.n_out; i++) {
        if (!d.want[i] || !out[i] || !kn_dtype_is_float(d.want[i]->dtype)) continue;
        double err = kn_unit_rel_l2(out[i], d.want[i]);
        printf("      %-22s %s, output %zu: relative L2 error %.2e\n", name, graphs ? "replayed graph" : "not captured",
               i, err);
        CHECK_MSG(err < 1e-4, "%s output %zu (%s): relative L2 error %.3g", name, i,
                  graphs ? "replayed graph" : "not captured", err);
    }
    for (size_t i = 0; i < KN_UNIT_ZOO_MAX_IO; i++) kn_tensor_free(out[i]);
    kn_unit_zoo_free(&d);
    kiln_session_destroy(s);
}

KN_TEST(cuda_graph_zoo_replays_match_reference) {
    NEED_GPU();
    if (!kn_unit_each_zoo_model(zoo_replay, NULL)) KN_SKIP("the model zoo is not there or holds no model (set KILN_ZOO)");
}

/* ------------------------------------------------------------------ API checks without a GPU */

KN_TEST(api_device_tensors_checked_without_gpu) {
    int64_t d[2] = {2, 10};
    float host[20] = {0};
    kiln_tensor *t = (kiln_tensor *)1;
    CHECK_STATUS(kiln_tensor_wrap_device(KILN_DTYPE_FLOAT, d, 2, host, sizeof host, 0, NULL), KILN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(kiln_tensor_wrap_device(KILN_DTYPE_STRING, d, 2, host, sizeof host, 0, &t), KILN_ERR_INVALID_ARGUMENT);
    CHECK(t == NULL);
    CHECK_ERROR_HAS("string");
    CHECK_STATUS(kiln_tensor_wrap_device(KILN_DTYPE_FLOAT, d, 2, host, sizeof host, -1, &t), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("device_id");
    CHECK_STATUS(kiln_tensor_wrap_device(KILN_DTYPE_FLOAT, d, 2, NULL, 80, 0, &t), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("NULL");
    const char *why = NULL;
    if (!kiln_provider_available("cuda", &why)) {
        CHECK_STATUS(kiln_tensor_wrap_device(KILN_DTYPE_FLOAT, d, 2, host, sizeof host, 0, &t), KILN_ERR_NO_DEVICE);
        CHECK(t == NULL);
        CHECK_MSG(strstr(kiln_last_error(), "CUDA"), "the message does not say CUDA: %s", kiln_last_error());
    }
    /* where tensors live */
    int id = 7;
    CHECK(kiln_tensor_device(NULL, &id) == KILN_DEVICE_HOST && id == 0);
    kiln_tensor *h = NULL;
    kiln_tensor_create(KILN_DTYPE_FLOAT, d, 2, &h);
    id = 7;
    CHECK(kiln_tensor_device(h, &id) == KILN_DEVICE_HOST && id == 0);
    kiln_tensor_destroy(h);
    /* options */
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    CHECK_STATUS(kiln_session_options_set_output_device(o, (kiln_device_type)7), KILN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(kiln_session_options_set_output_device(NULL, KILN_DEVICE_HOST), KILN_ERR_INVALID_ARGUMENT);
    const char *k[1] = {"graphs"}, *v[1] = {"2"};
    CHECK_STATUS(kiln_session_options_append_provider(o, "cuda", k, v, 1), KILN_OK);
    size_t size;
    unsigned char *m = graph_model(false, &size);
    kiln_session *s = NULL;
    if (m) {
        CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, o, &s), KILN_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_HAS("graphs");
    }
    kiln_session_options_destroy(o);
    /* outputs on the device without a CUDA provider */
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    CHECK_STATUS(kiln_session_options_set_output_device(o, KILN_DEVICE_CUDA), KILN_OK);
    if (m) {
        CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, o, &s), KILN_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_HAS("no CUDA provider");
    }
    kiln_session_options_destroy(o);
    free(m);
}

KN_TEST(api_run_into_and_device_inputs_on_cpu_session) {
    size_t size;
    unsigned char *m = graph_model(false, &size);
    if (!m) return;
    kiln_session *s = make_session(m, size, "cpu", NULL, 3, 0);
    if (!s) {
        free(m);
        return;
    }
    kiln_tensor *x = random_x(2, 5);
    const char *in_names[1] = {"X"};
    kiln_tensor *ins[1] = {x};
    kiln_tensor *want[2] = {0};
    if (run_x(s, x, want) == KILN_OK) {
        int64_t yd[2] = {2, 10}, sd[1] = {3}, bad_d[2] = {2, 11};
        kiln_tensor *y = NULL, *sh = NULL, *bad = NULL;
        kiln_tensor_create(KILN_DTYPE_FLOAT, yd, 2, &y);
        kiln_tensor_create(KILN_DTYPE_INT64, sd, 1, &sh);
        kiln_tensor_create(KILN_DTYPE_FLOAT, bad_d, 2, &bad);
        kiln_tensor *into[2] = {y, sh};
        CHECK_STATUS(kiln_session_run_into(s, in_names, ins, 1, NULL, 2, into), KILN_OK);
        same_floats(y, want[0], 0, 0, "kiln_session_run_into on the CPU");
        int64_t s_want[3] = {2, 8, 20};
        same_i64(sh, s_want, 3, "kiln_session_run_into's Shape output");
        /* a wrong shape names the output and writes nothing */
        memset(kiln_tensor_data(y), 0, kiln_tensor_bytes(y));
        kiln_tensor *wrong[2] = {y, bad};
        const char *both[2] = {"Y", "Y"};
        CHECK_STATUS(kiln_session_run_into(s, in_names, ins, 1, both, 2, wrong), KILN_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_HAS("output 'Y'");
        CHECK_ERROR_HAS("[2,11]");
        CHECK(((float *)kiln_tensor_data(y))[0] == 0.0f);
        kiln_tensor *none[2] = {y, NULL};
        CHECK_STATUS(kiln_session_run_into(s, in_names, ins, 1, NULL, 2, none), KILN_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(kiln_session_run_into(s, in_names, ins, 1, NULL, 2, NULL), KILN_ERR_INVALID_ARGUMENT);
        /* a tensor that says it is in CUDA memory, given to a session without CUDA */
        kn_tensor *fake = NULL;
        CHECK_STATUS(kn_tensor_wrap_device(KN_DEVICE_CUDA, 0, kiln_tensor_data(x), kiln_tensor_bytes(x),
                                           KILN_DTYPE_FLOAT, kiln_tensor_rank(x), kiln_tensor_dims(x), &fake),
                     KILN_OK);
        kiln_tensor *fins[1] = {fake};
        kiln_tensor *outs[2] = {0};
        CHECK_STATUS(kiln_session_run(s, in_names, fins, 1, NULL, 2, outs), KILN_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_HAS("input 'X' is in CUDA memory");
        CHECK(outs[0] == NULL && outs[1] == NULL);
        kiln_tensor *fout[2] = {fake, sh};
        CHECK_STATUS(kiln_session_run_into(s, in_names, ins, 1, NULL, 2, fout), KILN_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_HAS("no CUDA provider");
        kiln_tensor_destroy(fake);
        kiln_tensor_destroy(y);
        kiln_tensor_destroy(sh);
        kiln_tensor_destroy(bad);
    }
    kiln_tensor_destroy(want[0]);
    kiln_tensor_destroy(want[1]);
    kiln_tensor_destroy(x);
    kiln_session_destroy(s);
    free(m);
}

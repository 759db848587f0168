/* kiln.StackedLSTM on the CPU (nn_rnn.c) and the wavefront under it (util/lockstep.c): the
 * wavefront runs every (stage, chunk) once, after the same chunk of the stage before and the chunk
 * before of its own stage, with stages owned and shared; the stacked layers, overlapped on 2, 3 and 5 threads or in turn, give
 * what a double-precision reference from the ONNX LSTM equations gives, and bit for bit what one
 * thread gives. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/nn_internal.h"
#include "ops/fused.h"
#include "test_model_builder.h"
#include "test_nodes.h"
#include "unit.h"
#include "util/lockstep.h"

#include <stdlib.h>

/* ------------------------------------------------------------------ wavefront */

typedef struct wave_job {
    int n_stages;
    int64_t n_chunks;
    int *done; /* [stages][chunks]: 1 once it ran (atomic) */
    int *bad;  /* a task that ran before one it depends on, or twice */
} wave_job;

static void wave_task(void *arg, int s, int64_t k) {
    wave_job *j = arg;
    if (s > 0 && !__atomic_load_n(&j->done[(s - 1) * j->n_chunks + k], __ATOMIC_ACQUIRE)) __atomic_store_n(j->bad, 1, __ATOMIC_RELAXED);
    if (k > 0 && !__atomic_load_n(&j->done[s * j->n_chunks + k - 1], __ATOMIC_ACQUIRE)) __atomic_store_n(j->bad, 1, __ATOMIC_RELAXED);
    volatile int x = 0; /* a little work, so stages overlap */
    for (int i = 0; i < 300 * (s + 1); i++) x++;
    if (__atomic_exchange_n(&j->done[s * j->n_chunks + k], 1, __ATOMIC_RELEASE)) __atomic_store_n(j->bad, 1, __ATOMIC_RELAXED);
}

KN_TEST(wavefront_every_task_once_after_its_two_predecessors) {
    const int threads_list[] = {1, 2, 3, 5};
    for (int ti = 0; ti < 4; ti++) {
        kn_threadpool *pool = NULL;
        CHECK_STATUS(kn_threadpool_create(threads_list[ti], &pool), KILN_OK);
        for (int stages = 1; stages <= 5; stages++)
            for (int64_t chunks = 1; chunks <= 120; chunks += 17)
            for (int sh = 0; sh < 3; sh++) {
                /* no stage shared, every odd one (a stack's projections), all */
                const uint64_t shared = sh == 0 ? 0 : sh == 1 ? 0xAAAAAAAAAAAAAAAAull : ~0ull;
                int *done = calloc((size_t)(stages * chunks), sizeof *done), bad = 0;
                wave_job j = {stages, chunks, done, &bad};
                kn_parallel_wavefront(pool, stages, chunks, shared, wave_task, &j);
                int missing = 0;
                for (int64_t i = 0; i < stages * chunks; i++) missing += !done[i];
                CHECK_MSG(!bad && !missing, "%d threads, %d stages, %lld chunks, shared %d: %d missing, out of order or twice: %d",
                          threads_list[ti], stages, (long long)chunks, sh, missing, bad);
                free(done);
            }
        kn_threadpool_destroy(pool);
    }
}

/* ------------------------------------------------------------------ reference */

static double sigm(double x) { return 1 / (1 + exp(-x)); }

/* One forward LSTM layer from the ONNX equations (gates i, o, f, c; default activations), layout
 * 0, in double: X [T, B, I] -> Y [T, B, H], final h and c [B, H] */
static void ref_lstm(int T, int B, int I, int H, const double *X, const float *W, const float *R, const float *Bi,
                     const float *h0, const float *c0, double *Y, double *Yh, double *Yc) {
    double *g = calloc((size_t)(4 * H), sizeof *g);
    for (int b = 0; b < B; b++) {
        double *h = Yh + b * H, *c = Yc + b * H;
        for (int k = 0; k < H; k++) h[k] = h0[b * H + k], c[k] = c0[b * H + k];
        for (int t = 0; t < T; t++) {
            for (int k = 0; k < 4 * H; k++) {
                double a = (double)Bi[k] + Bi[4 * H + k];
                for (int q = 0; q < I; q++) a += X[(t * B + b) * I + q] * W[k * I + q];
                for (int q = 0; q < H; q++) a += h[q] * R[k * H + q];
                g[k] = a;
            }
            for (int k = 0; k < H; k++) {
                const double ig = sigm(g[k]), og = sigm(g[H + k]), fg = sigm(g[2 * H + k]), cc = tanh(g[3 * H + k]);
                c[k] = fg * c[k] + ig * cc;
                h[k] = og * tanh(c[k]);
                Y[(t * B + b) * H + k] = h[k];
            }
        }
    }
    free(g);
}

/* ------------------------------------------------------------------ the kernel */

#define MAXL 4
typedef struct stack_case {
    int layers, T, B, I;
    int H[MAXL];
} stack_case;

typedef struct stack_io {
    kn_tensor *in[1 + 5 * MAXL];
    kn_tensor *out[3];
} stack_io;

static void make_io(const stack_case *sc, stack_io *io) {
    memset(io, 0, sizeof *io);
    unsigned seed = 11u + (unsigned)(sc->T * 7 + sc->B * 3 + sc->H[0]);
    const int64_t dx[] = {sc->T, sc->B, sc->I};
    io->in[0] = tmb_rand_kn(3, dx, &seed, 1.0f);
    int in = sc->I;
    for (int l = 0; l < sc->layers; l++) {
        const int64_t H = sc->H[l], dw[] = {1, 4 * H, in}, dr[] = {1, 4 * H, H}, db[] = {1, 8 * H}, ds[] = {1, sc->B, H};
        const float ws = 1.0f / sqrtf((float)H);
        kn_tensor **t = &io->in[kn_stacked_lstm_input(l, 0)];
        t[0] = tmb_rand_kn(3, dw, &seed, 1.5f * ws);
        t[1] = tmb_rand_kn(3, dr, &seed, 1.5f * ws);
        t[2] = tmb_rand_kn(2, db, &seed, 0.3f);
        t[3] = tmb_rand_kn(3, ds, &seed, 0.5f);
        t[4] = tmb_rand_kn(3, ds, &seed, 0.5f);
        in = (int)H;
    }
    const int64_t Hl = sc->H[sc->layers - 1], dy[] = {sc->T, 1, sc->B, Hl}, ds[] = {1, sc->B, Hl};
    kn_tensor_new(KILN_DTYPE_FLOAT, 4, dy, &io->out[0]);
    kn_tensor_new(KILN_DTYPE_FLOAT, 3, ds, &io->out[1]);
    kn_tensor_new(KILN_DTYPE_FLOAT, 3, ds, &io->out[2]);
}

static void free_io(stack_io *io) {
    for (int i = 0; i < 1 + 5 * MAXL; i++) kn_tensor_free(io->in[i]);
    for (int i = 0; i < 3; i++) kn_tensor_free(io->out[i]);
}

static kiln_status run_stack(const stack_case *sc, stack_io *io, int threads) {
    tnode t;
    tn_init(&t, "StackedLSTM", 1);
    t.node.domain = "kiln";
    kn_threadpool *pool = NULL;
    kn_threadpool_create(threads, &pool);
    kn_kernel_ctx c = {0};
    c.node = &t.node;
    c.in = io->in;
    c.n_inputs = 1 + 5 * sc->layers;
    c.out = io->out;
    c.n_outputs = 3;
    c.pool = pool;
    for (int i = 0; i < 3; i++) memset(io->out[i]->data, 0xff, (size_t)kn_tensor_count(io->out[i]) * sizeof(float)); /* NaN */
    /* the kernel through the table (a portable build forwards only listed calls to its level) */
    const kn_type *types[1 + 5 * MAXL] = {0};
    kn_type tt[1 + 5 * MAXL];
    for (int i = 0; i < c.n_inputs; i++) {
        kn_type_set_tensor(&tt[i], io->in[i]->dtype, io->in[i]->rank, io->in[i]->dims);
        types[i] = &tt[i];
    }
    char why[256];
    const kn_cpu_kernel *k = kn_cpu_find(&t.node, types, c.n_inputs, why, sizeof why);
    kiln_status st = k ? k->run(&c) : kn_error(KILN_ERR_UNSUPPORTED, "%s", why);
    kn_threadpool_destroy(pool);
    return st;
}

/* The largest difference of the outputs from the reference */
static double ref_error(const stack_case *sc, stack_io *io) {
    const int T = sc->T, B = sc->B;
    int in = sc->I;
    double *x = malloc(sizeof(double) * (size_t)(T * B * in));
    for (int i = 0; i < T * B * in; i++) x[i] = ((float *)io->in[0]->data)[i];
    double worst = 0;
    for (int l = 0; l < sc->layers; l++) {
        const int H = sc->H[l];
        double *y = malloc(sizeof(double) * (size_t)(T * B * H)), *yh = malloc(sizeof(double) * (size_t)(B * H)),
               *yc = malloc(sizeof(double) * (size_t)(B * H));
        kn_tensor **t = &io->in[kn_stacked_lstm_input(l, 0)];
        ref_lstm(T, B, in, H, x, t[0]->data, t[1]->data, t[2]->data, t[3]->data, t[4]->data, y, yh, yc);
        if (l == sc->layers - 1) {
            const float *oy = io->out[0]->data, *oh = io->out[1]->data, *oc = io->out[2]->data;
            for (int i = 0; i < T * B * H; i++) worst = fmax(worst, fabs(oy[i] - y[i]) + (oy[i] != oy[i]));
            for (int i = 0; i < B * H; i++) worst = fmax(worst, fabs(oh[i] - yh[i]) + fabs(oc[i] - yc[i]) + (oh[i] != oh[i]));
        }
        free(x), free(yh), free(yc);
        x = y, in = H;
    }
    free(x);
    return worst;
}

/* Layers that overlap at 2+ threads (H 96 as lstm_gru's, widths in partial panels, one step a
 * chunk at B 8, a chunk longer than T), a stack whose large layer splits over 2 threads (the
 * layers in turn there, overlapped at 3 and 5), and a batch that takes the per-step GEMM */
KN_TEST(cpu_stacked_lstm_threads_match_reference_bit_for_bit) {
    static const stack_case cases[] = {
        {2, 50, 1, 40, {96, 96}},
        {3, 23, 3, 17, {40, 24, 150}},
        {2, 9, 8, 5, {33, 16}},
        {2, 5, 2, 7, {20, 30}},
        {4, 13, 1, 9, {16, 48, 17, 64}},
        {2, 12, 2, 30, {256, 64}},
        {2, 6, 17, 9, {24, 20}},
    };
    const int threads_list[] = {1, 2, 3, 5};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const stack_case *sc = &cases[i];
        stack_io io;
        make_io(sc, &io);
        const int64_t ny = kn_tensor_count(io.out[0]), ns = kn_tensor_count(io.out[1]);
        float *one = malloc(sizeof(float) * (size_t)(ny + 2 * ns));
        for (int ti = 0; ti < 4; ti++) {
            const int threads = threads_list[ti];
            kiln_status st = run_stack(sc, &io, threads);
            CHECK_MSG(st == KILN_OK, "case %zu, %d threads: %s", i, threads, kiln_last_error());
            if (st != KILN_OK) continue;
            const double worst = ref_error(sc, &io);
            CHECK_MSG(worst < 2e-5, "case %zu (%d layers, T %d, B %d), %d threads: worst abs error %g", i, sc->layers,
                      sc->T, sc->B, threads, worst);
            for (int k = 0; k < 3; k++) {
                float *mine = one + (k == 0 ? 0 : ny + (k - 1) * ns);
                const size_t bytes = sizeof(float) * (size_t)(k == 0 ? ny : ns);
                if (threads == 1) memcpy(mine, io.out[k]->data, bytes);
                else CHECK_MSG(!memcmp(mine, io.out[k]->data, bytes), "case %zu, %d threads: output %d differs from 1 thread's", i,
                               threads, k);
            }
        }
        free(one);
        free_io(&io);
    }
}

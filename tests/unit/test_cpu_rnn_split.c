/* A recurrent layer's hidden units split among threads (nn_rnn.c, util/lockstep.c): the steps in
 * lockstep run every part of every step once, each step after the whole of the one before; and
 * LSTM, GRU (both linear_before_reset forms) and RNN give, on 2- and 3-thread pools whose plan
 * splits the units (widths that are not whole panels of 16 included), what independent
 * double-precision references from the ONNX equations give, as the one-thread kernel does. */
#include "backend/cpu/nn_internal.h"
#include "test_model_builder.h"
#include "test_nodes.h"
#include "unit.h"
#include "util/lockstep.h"

#include <stdlib.h>

/* ------------------------------------------------------------------ lockstep */

typedef struct order_job {
    int n_parts;
    int *done;     /* [steps][parts]: 1 once part ran (atomic) */
    int *bad;      /* a part that ran before all of the previous step, or twice */
} order_job;

static void order_step(void *arg, int64_t s, int k) {
    order_job *j = arg;
    for (int q = 0; s > 0 && q < j->n_parts; q++)
        if (!__atomic_load_n(&j->done[(s - 1) * j->n_parts + q], __ATOMIC_ACQUIRE)) __atomic_store_n(j->bad, 1, __ATOMIC_RELAXED);
    /* a little work, so the threads overlap inside a step */
    volatile int x = 0;
    for (int i = 0; i < 200 * (k + 1); i++) x++;
    if (__atomic_exchange_n(&j->done[s * j->n_parts + k], 1, __ATOMIC_RELEASE)) __atomic_store_n(j->bad, 1, __ATOMIC_RELAXED);
}

KN_TEST(lockstep_every_part_once_after_the_previous_step) {
    for (int threads = 1; threads <= 3; threads++) {
        kn_threadpool *pool = NULL;
        CHECK_STATUS(kn_threadpool_create(threads, &pool), KILN_OK);
        for (int parts = 1; parts <= 5; parts++)
            for (int64_t steps = 1; steps <= 300; steps += 37) {
                int *done = calloc((size_t)(steps * parts), sizeof *done), bad = 0;
                order_job j = {parts, done, &bad};
                kn_parallel_lockstep(pool, steps, parts, order_step, &j);
                int missing = 0;
                for (int64_t i = 0; i < steps * parts; i++) missing += !done[i];
                CHECK_MSG(!bad && !missing, "%d threads, %d parts, %lld steps: %d parts missing, out of order or twice: %d",
                          threads, parts, (long long)steps, missing, bad);
                free(done);
            }
        kn_threadpool_destroy(pool);
    }
}

/* ------------------------------------------------------------------ references */

static double sigm(double x) { return 1 / (1 + exp(-x)); }

/* One direction of LSTM (with peepholes P), GRU (linear_before_reset lbr) or RNN (tanh), layout
 * 0, from the ONNX equations in double. gates 4, 3 or 1; lens per batch row or NULL; reverse. */
static void ref_dir(int gates, int lbr, int reverse, int T, int B, int I, int H, const float *X, const float *W,
                    const float *R, const float *Bi, const float *P, const int32_t *lens, double *Y, double *Yh) {
    const int G = gates, GH = G * H;
    double *h = calloc((size_t)H, sizeof *h), *c = calloc((size_t)H, sizeof *c);
    double *xg = calloc((size_t)GH, sizeof *xg), *hg = calloc((size_t)GH, sizeof *hg), *hn = calloc((size_t)H, sizeof *hn);
    for (int b = 0; b < B; b++) {
        memset(h, 0, sizeof(double) * (size_t)H);
        memset(c, 0, sizeof(double) * (size_t)H);
        const int len = lens ? lens[b] : T;
        for (int i = 0; i < T * H; i++) Y[(i / H * B + b) * H + i % H] = 0;
        for (int s = 0; s < len; s++) {
            const int t = reverse ? len - 1 - s : s;
            for (int k = 0; k < GH; k++) {
                double a = Bi[k], r = Bi[GH + k];
                for (int q = 0; q < I; q++) a += (double)X[(t * B + b) * I + q] * W[k * I + q];
                for (int q = 0; q < H; q++) r += h[q] * R[k * H + q];
                xg[k] = a, hg[k] = r;
            }
            for (int k = 0; k < H; k++) {
                if (G == 1) hn[k] = tanh(xg[k] + hg[k]);
                else if (G == 4) {
                    const double ig = sigm(xg[k] + hg[k] + P[k] * c[k]);
                    const double fg = sigm(xg[2 * H + k] + hg[2 * H + k] + P[2 * H + k] * c[k]);
                    const double cn = fg * c[k] + ig * tanh(xg[3 * H + k] + hg[3 * H + k]);
                    const double og = sigm(xg[H + k] + hg[H + k] + P[H + k] * cn);
                    c[k] = cn;
                    hn[k] = og * tanh(cn);
                } else {
                    const double z = sigm(xg[k] + hg[k]), r = sigm(xg[H + k] + hg[H + k]);
                    double pre;
                    if (lbr) pre = xg[2 * H + k] + r * hg[2 * H + k];
                    else {
                        /* (r * h) Rh^T + Rbh: every unit's r */
                        pre = xg[2 * H + k] + Bi[GH + 2 * H + k];
                        for (int q = 0; q < H; q++) pre += sigm(xg[H + q] + hg[H + q]) * h[q] * R[(2 * H + k) * H + q];
                    }
                    hn[k] = (1 - z) * tanh(pre) + z * h[k];
                }
            }
            memcpy(h, hn, sizeof(double) * (size_t)H);
            for (int k = 0; k < H; k++) Y[(t * B + b) * H + k] = h[k];
        }
        for (int k = 0; k < H; k++) Yh[b * H + k] = h[k];
    }
    free(h), free(c), free(xg), free(hg), free(hn);
}

/* ------------------------------------------------------------------ the kernel on a pool */

typedef struct rnn_case {
    const char *op;
    int gates, lbr, reverse, T, B, I, H, with_lens;
} rnn_case;

/* The case on a pool of `threads`: the largest difference from the reference over Y and Y_h */
static double run_case(const rnn_case *rc, int threads) {
    const int G = rc->gates, T = rc->T, B = rc->B, I = rc->I, H = rc->H;
    unsigned seed = 7u + (unsigned)(G * 31 + H + rc->lbr);
    int64_t dx[] = {T, B, I}, dw[] = {1, G * H, I}, dr[] = {1, G * H, H}, db[] = {1, 2 * G * H}, dp[] = {1, 3 * H};
    int64_t dl[] = {B}, dy[] = {T, 1, B, H}, dh[] = {1, B, H};
    const float ws = 1.0f / sqrtf((float)H);
    kn_tensor *X = tmb_rand_kn(3, dx, &seed, 1.0f), *W = tmb_rand_kn(3, dw, &seed, ws);
    kn_tensor *R = tmb_rand_kn(3, dr, &seed, 1.5f * ws), *Bt = tmb_rand_kn(2, db, &seed, 0.3f);
    kn_tensor *P = tmb_rand_kn(2, dp, &seed, 0.5f), *L = NULL, *Y = NULL, *Yh = NULL;
    kn_tensor_new(KILN_DTYPE_INT32, 1, dl, &L);
    kn_tensor_new(KILN_DTYPE_FLOAT, 4, dy, &Y);
    kn_tensor_new(KILN_DTYPE_FLOAT, 3, dh, &Yh);
    int32_t *lens = L->data;
    for (int b = 0; b < B; b++) lens[b] = rc->with_lens ? T - (b * 5) % T : T;
    tnode t;
    tn_init(&t, rc->op, 14);
    tn_int(&t, "hidden_size", H);
    if (rc->reverse) tn_string(&t, "direction", "reverse");
    if (G == 3) tn_int(&t, "linear_before_reset", rc->lbr);
    kn_tensor *ins[8] = {X, W, R, Bt, rc->with_lens ? L : NULL, NULL, NULL, P}, *outs[2] = {Y, Yh};
    kn_threadpool *pool = NULL;
    kn_threadpool_create(threads, &pool);
    kn_kernel_ctx c = {0};
    c.node = &t.node;
    c.in = ins;
    c.n_inputs = G == 4 ? 8 : 5;
    c.out = outs;
    c.n_outputs = 2;
    c.pool = pool;
    double worst = INFINITY;
    if (kn_cpu_rnn(&c) == KILN_OK) {
        double *ry = calloc((size_t)(T * B * H), sizeof *ry), *rh = calloc((size_t)(B * H), sizeof *rh);
        ref_dir(G, rc->lbr, rc->reverse, T, B, I, H, X->data, W->data, R->data, Bt->data, P->data,
                rc->with_lens ? lens : NULL, ry, rh);
        worst = 0;
        for (int i = 0; i < T * B * H; i++) worst = fmax(worst, fabs(((float *)Y->data)[i] - ry[i]));
        for (int i = 0; i < B * H; i++) worst = fmax(worst, fabs(((float *)Yh->data)[i] - rh[i]));
        free(ry), free(rh);
    }
    kn_threadpool_destroy(pool);
    kn_tensor *all[] = {X, W, R, Bt, P, L, Y, Yh};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kn_tensor_free(all[i]);
    return worst;
}

/* Widths where the plan splits the units at 2 and 3 threads (a step's product of 64 K
 * multiply-adds or more a part): 128 and 160 in whole panels, 150 and 200 with a partial one; and
 * narrow layers on one thread whose last panel of 16 units ends in either half of it (13, 27, 9:
 * the AVX2 form's halves of 8), with one batch row (the second set of sums) and two */
KN_TEST(cpu_rnn_split_units_match_reference) {
    static const rnn_case cases[] = {
        {"LSTM", 4, 0, 0, 9, 2, 7, 128, 1},
        {"LSTM", 4, 0, 1, 7, 3, 5, 150, 0},
        {"GRU", 3, 1, 0, 8, 3, 6, 160, 1},
        {"GRU", 3, 0, 0, 6, 4, 5, 200, 1},
        {"GRU", 3, 0, 1, 6, 5, 3, 150, 0},
        {"RNN", 1, 0, 0, 10, 5, 4, 200, 1},
        {"LSTM", 4, 0, 0, 5, 1, 3, 13, 0},
        {"GRU", 3, 1, 1, 5, 1, 4, 27, 1},
        {"GRU", 3, 0, 0, 4, 2, 3, 13, 0},
        {"RNN", 1, 0, 0, 6, 2, 3, 9, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int threads = 1; threads <= 3; threads++) {
            const rnn_case *rc = &cases[i];
            const double worst = run_case(rc, threads);
            CHECK_MSG(worst < 2e-5, "%s H=%d B=%d lbr=%d reverse=%d lens=%d, %d threads: worst abs error %g", rc->op, rc->H,
                      rc->B, rc->lbr, rc->reverse, rc->with_lens, threads, worst);
        }
}

/* No hidden units (R [1, 0, 0], no hidden_size attribute, as shape inference accepts): every
 * output is empty and the call succeeds on one thread and on several (the plan of parts divided
 * by the units' share, which is 0 then). */
KN_TEST(cpu_rnn_no_hidden_units) {
    static const struct {
        const char *op;
        int gates;
    } ops[] = {{"LSTM", 4}, {"GRU", 3}, {"RNN", 1}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        for (int threads = 1; threads <= 3; threads++) {
            int64_t dx[] = {3, 2, 4}, dw[] = {1, 0, 4}, dr[] = {1, 0, 0}, dy[] = {3, 1, 2, 0}, dh[] = {1, 2, 0};
            unsigned seed = 3u;
            kn_tensor *X = tmb_rand_kn(3, dx, &seed, 1.0f), *W = NULL, *R = NULL, *Y = NULL, *Yh = NULL;
            kn_tensor_new(KILN_DTYPE_FLOAT, 3, dw, &W);
            kn_tensor_new(KILN_DTYPE_FLOAT, 3, dr, &R);
            kn_tensor_new(KILN_DTYPE_FLOAT, 4, dy, &Y);
            kn_tensor_new(KILN_DTYPE_FLOAT, 3, dh, &Yh);
            tnode t;
            tn_init(&t, ops[i].op, 14);
            kn_tensor *ins[3] = {X, W, R}, *outs[2] = {Y, Yh};
            kn_threadpool *pool = NULL;
            kn_threadpool_create(threads, &pool);
            kn_kernel_ctx c = {0};
            c.node = &t.node;
            c.in = ins;
            c.n_inputs = 3;
            c.out = outs;
            c.n_outputs = 2;
            c.pool = pool;
            CHECK_MSG(kn_cpu_rnn(&c) == KILN_OK, "%s, %d threads: %s", ops[i].op, threads, kiln_last_error());
            kn_threadpool_destroy(pool);
            kn_tensor *all[] = {X, W, R, Y, Yh};
            for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) kn_tensor_free(all[k]);
        }
}

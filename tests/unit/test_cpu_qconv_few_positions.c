/* int8 products with few output positions (qgemm.c's few-column form, its thread split on large
 * pools, kn_qgemm8's split) against the plain integer definition in int64:
 *  - kn_qgemm_run directly: N 1-5 columns (the few-column form up to 4, or 2 with VNNI; the tiles
 *    past it), odd M (1, 5, 7, 50) and K (1, 3, 9, 37, 200, 515: four-pair steps and their tails,
 *    past a pass of 256 pairs), int8 and uint8 B, zero points for all columns or per column,
 *    accumulate, packed B given or made by a pack_b callback, rows_done's blocks checked to be
 *    final and to cover C once; pools of 1, 2, 3 and 16 threads, VNNI on and off where the CPU has
 *    it;
 *  - kn_qgemm8_run (one or a few rows: a one-position convolution's form), its residual and sign
 *    forms, K's tail quad, on the same pools, VNNI on and off where present (the g8v panels, on by
 *    default on VNNI CPUs; KILN_QGEMM8_VNNI=0 in the environment keeps the AVX2 panels there);
 *  - QLinearConv on 1x1, 5x5 and 7x7 planes (k1, and k3 with pad 1), uint8 / int8 weights of full
 *    range (kn_qgemm8's sign form, or with a 0 / -128: kn_qgemm) or of 7 bits (its residual form),
 *    per tensor and per channel (equal zero points, or different ones: kn_qgemm), odd channel
 *    counts; scales of powers of two so the definition's double rounds exactly; threads 1, 2, 3,
 *    16. Outputs must be equal byte for byte. */
#include "test_model_builder.h"

#include "backend/cpu/isa.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/qgemm_amx.h"
#include "util/aligned.h"
#include "util/threadpool.h"
#include "kiln.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

static uint32_t fp_next(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static const int fp_threads[4] = {1, 2, 3, 16};

/* rows_done's record: every (row, column) once, and C already final there */
typedef struct fp_done {
    const int32_t *c, *want;
    int64_t ldc, N;
    atomic_int *seen;
    atomic_int wrong;
} fp_done;

static void fp_rows_done(const void *ctx, int64_t m0, int64_t m1, int64_t n0, int64_t nc) {
    fp_done *d = (fp_done *)ctx;
    for (int64_t i = m0; i < m1; i++)
        for (int64_t j = n0; j < n0 + nc; j++) {
            atomic_fetch_add(&d->seen[i * d->N + j], 1);
            if (d->c[i * d->ldc + j] != d->want[i * d->N + j]) atomic_store(&d->wrong, 1);
        }
}

typedef struct fp_packer {
    const uint8_t *b;
    int64_t K, N;
} fp_packer;

static void fp_pack_b(const void *ctx, int64_t n0, int64_t nc, uint8_t *dst) {
    const fp_packer *p = ctx;
    kn_qgemm_pack_b8(p->b, p->N, 1, p->K, n0, nc, dst);
}

KN_TEST(cpu_qgemm_few_columns_exact) {
    /* {M, K, N, a_s8, za, b_s8, zb (999: per column), accumulate, B by pack_b, rows_done} */
    static const int cases[][10] = {
        {1, 200, 1, 0, 131, 0, 17, 0, 1, 1},   /* a one-position 200 -> 1 */
        {50, 200, 1, 0, 131, 0, 17, 0, 1, 1},  /* 1x200x1x1 -> 50, uint8 weights as A */
        {7, 37, 1, 1, 0, 1, -3, 0, 0, 0},      /* K 37: nine four-pair steps, a pair's tail */
        {5, 1, 2, 1, -128, 0, 255, 1, 0, 0},   /* K 1, accumulate */
        {13, 3, 3, 0, 255, 1, 999, 0, 0, 1},   /* K 3, zero points per column */
        {50, 9, 4, 1, 127, 0, 0, 1, 1, 1},     /* K 9, no zero point, accumulate, rows_done */
        {19, 515, 2, 0, 7, 1, 999, 0, 1, 1},   /* K 515: past 256 pairs */
        {50, 200, 5, 0, 131, 0, 17, 0, 1, 1},  /* 5 columns: the tiles */
        {400, 515, 1, 1, 0, 0, 128, 0, 1, 1},  /* 400 rows: row panels split on 3 and 16 threads */
    };
    const bool had_vnni = kn_cpu_has_vnni();
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *t = cases[ci];
        const int64_t M = t[0], K = t[1], N = t[2];
        const bool as8 = t[3], bs8 = t[5], acc = t[7], by_cb = t[8], done = t[9];
        uint32_t seed = 9100 + (uint32_t)ci;
        uint8_t *a = malloc((size_t)(M * K)), *b = malloc((size_t)(K * N));
        int32_t *zbc = malloc(sizeof(int32_t) * (size_t)N);
        for (int64_t i = 0; i < M * K; i++) a[i] = (uint8_t)fp_next(&seed);
        for (int64_t i = 0; i < K * N; i++) b[i] = (uint8_t)fp_next(&seed);
        for (int64_t j = 0; j < N; j++) zbc[j] = t[6] == 999 ? (bs8 ? (int)(fp_next(&seed) % 256) - 128 : (int)(fp_next(&seed) % 256)) : t[6];
        int32_t *init = malloc(sizeof(int32_t) * (size_t)(M * N)), *want = malloc(sizeof(int32_t) * (size_t)(M * N));
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                int64_t s = 0;
                for (int64_t k = 0; k < K; k++) {
                    const int64_t av = as8 ? (int8_t)a[i * K + k] : a[i * K + k], bv = bs8 ? (int8_t)b[k * N + j] : b[k * N + j];
                    s += (av - t[4]) * (bv - zbc[j]);
                }
                init[i * N + j] = acc ? (int32_t)(fp_next(&seed) % 100001) - 50000 : 0;
                want[i * N + j] = (int32_t)(s + init[i * N + j]);
            }
        int32_t *pa = kn_aligned_alloc(64, sizeof(int32_t) * kn_qgemm_a_words(M, K));
        uint8_t *pb = kn_aligned_alloc(64, kn_qgemm_b_bytes(N, K));
        kn_qgemm_pack_a8(a, as8, K, 1, M, K, NULL, t[4], pa);
        kn_qgemm_pack_b8(b, N, 1, K, 0, N, pb);
        int32_t *c = malloc(sizeof(int32_t) * (size_t)(M * N));
        atomic_int *seen = malloc(sizeof(atomic_int) * (size_t)(M * N));
        for (int vnni = 0; vnni <= (had_vnni ? 1 : 0); vnni++) {
            kn_cpu_vnni_force(vnni == 1);
            for (int ti = 0; ti < 4; ti++) {
                kn_threadpool *pool = NULL;
                CHECK_STATUS(kn_threadpool_create(fp_threads[ti], &pool), KILN_OK);
                memcpy(c, init, sizeof(int32_t) * (size_t)(M * N));
                for (int64_t i = 0; i < M * N; i++) atomic_init(&seen[i], 0);
                fp_packer pk = {b, K, N};
                fp_done d = {c, want, N, N, seen, 0};
                kn_qgemm g = {.M = M, .N = N, .K = K, .a = pa, .b = by_cb ? NULL : pb, .pack_b = fp_pack_b, .pack_ctx = &pk,
                              .b_signed = bs8, .zb_cols = t[6] == 999 ? zbc : NULL, .zb = t[6] == 999 ? 0 : t[6],
                              .c = c, .ldc = N, .accumulate = acc, .rows_done = done ? fp_rows_done : NULL,
                              .done_ctx = &d};
                CHECK_STATUS(kn_qgemm_run(pool, &g), KILN_OK);
                int64_t bad = 0, first = -1, twice = 0;
                for (int64_t i = 0; i < M * N; i++) {
                    if (c[i] != want[i] && bad++ == 0) first = i;
                    if (done && atomic_load(&seen[i]) != 1) twice++;
                }
                CHECK_MSG(bad == 0, "qgemm %lldx%lldx%lld case %zu, %d threads, vnni %d: %lld of %lld differ, first at %lld: %d, want %d",
                          (long long)M, (long long)K, (long long)N, ci, fp_threads[ti], vnni, (long long)bad, (long long)(M * N),
                          (long long)first, first >= 0 ? c[first] : 0, first >= 0 ? want[first] : 0);
                CHECK_MSG(twice == 0 && atomic_load(&d.wrong) == 0,
                          "qgemm case %zu, %d threads: rows_done missed or repeated %lld outputs, or came before they were final",
                          ci, fp_threads[ti], (long long)twice);
                kn_threadpool_destroy(pool);
            }
        }
        kn_cpu_vnni_force(true);
        free(a), free(b), free(zbc), free(init), free(want), free(c), free(seen);
        free(pa);
        free(pb);
    }
}

KN_TEST(cpu_qgemm8_few_rows_split_exact) {
    /* {M, K, N, b_s8, full range (the sign form), za, zb} */
    static const int cases[][7] = {
        {1, 512, 128, 1, 1, 17, 0},  /* 1x512x1x1 -> 128: four panels of 32 */
        {1, 128, 512, 1, 1, 3, 0},   /* 1x128x1x1 -> 512 */
        {1, 203, 77, 0, 0, 200, 131},/* uint8 weights near their zero point (residual form), odd */
        {3, 301, 130, 1, 0, 0, 5},   /* three rows, odd K and N */
        {2, 512, 160, 1, 1, 255, 0}, /* two rows, the sign form */
        {5, 6, 300, 0, 1, 9, 128},   /* five rows (two, two, one), K 6: a quad and a tail, the sign form */
        {2, 3, 40, 1, 0, 250, 0},    /* K 3: the tail alone */
    };
    const bool had_vnni = kn_cpu_has_vnni();
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *t = cases[ci];
        const int64_t M = t[0], K = t[1], N = t[2];
        const bool bs8 = t[3], full = t[4];
        uint32_t seed = 5150 + (uint32_t)ci;
        uint8_t *a = malloc((size_t)(M * K)), *b = malloc((size_t)(K * N));
        for (int64_t i = 0; i < M * K; i++) a[i] = (uint8_t)fp_next(&seed);
        for (int64_t i = 0; i < K * N; i++) {
            const int v = full ? (int)(fp_next(&seed) % 255) - 127 : (int)(fp_next(&seed) % 61) - 30;
            b[i] = bs8 ? (uint8_t)(int8_t)v : (uint8_t)(v + t[6]);
        }
        int32_t *want = malloc(sizeof(int32_t) * (size_t)(M * N)), *c = malloc(sizeof(int32_t) * (size_t)(M * N));
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                int64_t s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += ((int64_t)a[i * K + k] - t[5]) * ((bs8 ? (int8_t)b[k * N + j] : b[k * N + j]) - (int64_t)t[6]);
                want[i * N + j] = (int32_t)s;
            }
        void *w8 = kn_aligned_alloc(64, kn_qgemv8_bytes(K, N));
        kn_qgemv8_pack(b, bs8, K, N, w8);
        CHECK_MSG(kn_qgemv8_form(w8) == (full ? 2 : 1), "qgemm8 case %zu: form %d", ci, kn_qgemv8_form(w8));
        for (int vnni = 0; vnni <= (had_vnni ? 1 : 0); vnni++) {
            kn_cpu_vnni_force(vnni == 1);
            for (int ti = 0; ti < 4; ti++) {
                kn_threadpool *pool = NULL;
                CHECK_STATUS(kn_threadpool_create(fp_threads[ti], &pool), KILN_OK);
                memset(c, 0x5a, sizeof(int32_t) * (size_t)(M * N));
                CHECK_STATUS(kn_qgemm8_run(pool, w8, a, K, M, t[5], t[6], bs8, c, N, NULL), KILN_OK);
                int64_t bad = 0, first = -1;
                for (int64_t i = 0; i < M * N; i++)
                    if (c[i] != want[i] && bad++ == 0) first = i;
                CHECK_MSG(bad == 0, "qgemm8 %lldx%lldx%lld case %zu, %d threads, vnni %d: %lld differ, first at %lld: %d, want %d",
                          (long long)M, (long long)K, (long long)N, ci, fp_threads[ti], vnni, (long long)bad, (long long)first,
                          first >= 0 ? c[first] : 0, first >= 0 ? want[first] : 0);
                kn_threadpool_destroy(pool);
            }
        }
        kn_cpu_vnni_force(true);
        free(a), free(b), free(want), free(c);
        free(w8);
    }
}

static kn_tensor *fp_tensor(kiln_dtype dt, int rank, const int64_t *dims) {
    kn_tensor *t = NULL;
    kn_tensor_new(dt, rank, dims, &t);
    return t;
}

static int64_t fp_at(const kn_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_INT8 ? ((const int8_t *)t->data)[i] : ((const uint8_t *)t->data)[i];
}

KN_TEST(cpu_qlinear_conv_few_positions_exact) {
    /* {C, H (= W), M, k, w_s8, weights (0: full range with the type's extreme, 1: full range
     *  without it, 2: 7 bits), zero points per channel (0: one, 1: per channel equal, 2: per
     *  channel different), x_s8} */
    static const int cases[][8] = {
        {512, 1, 128, 1, 1, 1, 1, 0}, /* the one-position 512 -> 128 (kn_qgemm8's sign form) */
        {128, 1, 33, 1, 1, 1, 0, 0},  /* 128 -> 33 */
        {201, 1, 51, 1, 0, 0, 0, 0},  /* uint8 weights with 0 (kn_qgemm: one column) */
        {37, 1, 7, 1, 0, 0, 2, 0},    /* per-channel zero points, few channels */
        {45, 1, 19, 3, 1, 0, 0, 1},   /* k3 on a 1x1 plane (K 405, mostly padding), int8 x */
        {99, 5, 37, 3, 1, 2, 0, 0},   /* 5x5, 7-bit weights (residual form) */
        {65, 5, 21, 3, 1, 2, 1, 0},   /* 5x5 per channel */
        {31, 7, 17, 3, 0, 0, 2, 0},   /* 7x7, uint8 weights, zero points per channel */
        {129, 7, 19, 1, 1, 0, 0, 1},  /* 7x7 k1, int8 x */
        {48, 5, 40, 1, 1, 1, 1, 0},   /* 5x5 k1, the sign form */
    };
    kn_qgemm_amx_force(false);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *t = cases[ci];
        const int64_t C = t[0], H = t[1], W = t[1], M = t[2], k = t[3], p = (t[3] - 1) / 2;
        const bool ws8 = t[4], xs8 = t[7], perch = t[6] > 0;
        const int64_t n = M * H * W;
        uint32_t seed = 31337 + (uint32_t)ci;
        const int64_t xd[4] = {1, C, H, W}, wd[4] = {M, C, k, k};
        const kiln_dtype xt = xs8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8, wt = ws8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8;
        kn_tensor *x = fp_tensor(xt, 4, xd), *w = fp_tensor(wt, 4, wd);
        for (int64_t i = 0; i < kn_tensor_count(x); i++) ((uint8_t *)x->data)[i] = (uint8_t)fp_next(&seed);
        int zw[600];
        for (int64_t m = 0; m < M; m++) zw[m] = t[6] == 2 ? (ws8 ? (int)(m % 7) - 3 : 120 + (int)(m % 9)) : ws8 ? 0 : 131;
        for (int64_t i = 0; i < kn_tensor_count(w); i++) {
            int v;
            if (t[5] == 2) v = (int)(fp_next(&seed) % 127) - 63 + (ws8 ? 0 : 131);
            else if (t[5] == 1) v = ws8 ? (int)(fp_next(&seed) % 255) - 127 : (int)(fp_next(&seed) % 255) + 1;
            else v = ws8 ? (int)(fp_next(&seed) % 256) - 128 : (int)(fp_next(&seed) % 256);
            ((uint8_t *)w->data)[i] = (uint8_t)v;
        }
        if (t[5] == 0) ((uint8_t *)w->data)[3] = ws8 ? 0x80 : 0; /* the extreme at least once */
        const int zx = xs8 ? -7 : 17;
        /* x_scale 2^-1, w_scale 2^-3 (per channel 2^-3 or 2^-4), y_scale 2^4: r = 2^-8 or 2^-9, so
         * (acc + bias) r + 128 is exact in double and rounds half to even; y uint8 */
        float ws[600];
        int32_t bias[600];
        for (int64_t m = 0; m < M; m++) ws[m] = perch && m % 2 ? 0.0625f : 0.125f, bias[m] = (int32_t)(fp_next(&seed) % 40001) - 20000;
        int64_t *want = malloc(sizeof(int64_t) * (size_t)n);
        for (int64_t m = 0; m < M; m++)
            for (int64_t oh = 0; oh < H; oh++)
                for (int64_t ow = 0; ow < W; ow++) {
                    int64_t acc = 0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t kh = 0; kh < k; kh++)
                            for (int64_t kw = 0; kw < k; kw++) {
                                const int64_t ih = oh - p + kh, iw = ow - p + kw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                acc += (fp_at(x, (c * H + ih) * W + iw) - zx) * (fp_at(w, ((m * C + c) * k + kh) * k + kw) - zw[m]);
                            }
                    const double r = 0.5 * (double)ws[m] / 16.0, d = (double)(acc + bias[m]) * r + 128.0;
                    want[(m * H + oh) * W + ow] = (int64_t)fmin(255.0, fmax(0.0, nearbyint(d)));
                }
        tmb mb;
        tmb_init(&mb, 13);
        kn_tensor *zxt = fp_tensor(xt, 0, NULL), *zwt = fp_tensor(wt, perch ? 1 : 0, (int64_t[]){M});
        ((uint8_t *)zxt->data)[0] = (uint8_t)zx;
        for (int64_t m = 0; m < (perch ? M : 1); m++) ((uint8_t *)zwt->data)[m] = (uint8_t)zw[m];
        kn_tensor *wst = fp_tensor(KILN_DTYPE_FLOAT, perch ? 1 : 0, (int64_t[]){M}), *bt = fp_tensor(KILN_DTYPE_INT32, 1, (int64_t[]){M});
        memcpy(wst->data, ws, sizeof(float) * (size_t)(perch ? M : 1));
        memcpy(bt->data, bias, sizeof(int32_t) * (size_t)M);
        kn_tensor *yz = fp_tensor(KILN_DTYPE_UINT8, 0, NULL);
        ((uint8_t *)yz->data)[0] = 128;
        int xv = tmb_input(&mb, "x", xt, 4, xd, NULL);
        int wv = tmb_const_tensor(&mb, "w", w), zxv = tmb_const_tensor(&mb, "zx", zxt), zwv = tmb_const_tensor(&mb, "zw", zwt);
        int xsv = tmb_scalar(&mb, "xs", KILN_DTYPE_FLOAT, 0.5), ysv = tmb_scalar(&mb, "ys", KILN_DTYPE_FLOAT, 16.0);
        int wsv = tmb_const_tensor(&mb, "ws", wst), yzv = tmb_const_tensor(&mb, "yz", yz), bv = tmb_const_tensor(&mb, "bias", bt);
        int y = tmb_value(&mb, "y");
        int node = tmb_node(&mb, "QLinearConv", (int[]){xv, xsv, zxv, wv, wsv, zwv, ysv, yzv, bv}, 9, y);
        tmb_conv2d(&mb, node, k, 1, p, 1);
        tmb_output(&mb, y);
        size_t size;
        unsigned char *model = tmb_finish(&mb, &size);
        kiln_tensor *xin = NULL;
        kiln_tensor_create(x->dtype, x->dims, x->rank, &xin);
        if (xin) memcpy(kiln_tensor_data(xin), x->data, (size_t)kn_tensor_count(x));
        const char *names[1] = {"x"};
        for (int ti = 0; ti < 4; ti++) {
            kiln_session *s = tmb_session(model, size, fp_threads[ti], 3);
            CHECK_MSG(s != NULL, "case %zu: no session", ci);
            if (!s) continue;
            for (int run = 0; run < 2; run++) {
                kiln_tensor *yt = NULL;
                CHECK_STATUS(kiln_session_run(s, names, &xin, 1, NULL, 1, &yt), KILN_OK);
                if (!yt) continue;
                CHECK_EQ_INT(kiln_tensor_element_count(yt), n);
                int64_t bad = 0, first = -1;
                const uint8_t *got = kiln_tensor_data(yt);
                for (int64_t i = 0; i < n && kiln_tensor_element_count(yt) == n; i++)
                    if (got[i] != want[i] && bad++ == 0) first = i;
                CHECK_MSG(bad == 0, "QLinearConv 1x%lldx%lldx%lld -> %lld k%lld %s x %s w kind %d zp %d, %d threads: %lld of %lld differ, first at %lld: %d, want %lld",
                          (long long)C, (long long)H, (long long)W, (long long)M, (long long)k, xs8 ? "s8" : "u8",
                          ws8 ? "s8" : "u8", t[5], t[6], fp_threads[ti], (long long)bad, (long long)n, (long long)first,
                          first >= 0 ? got[first] : 0, first >= 0 ? (long long)want[first] : 0LL);
                kiln_tensor_destroy(yt);
            }
            kiln_session_destroy(s);
        }
        free(model);
        free(want);
        kiln_tensor_destroy(xin);
        kn_tensor_free(x);
    }
    kn_qgemm_amx_force(true);
}

/* The fused requantisation's bound (rq_rows_ok) reads sum_k |a'| per row, made with the packing:
 * a row whose true bound passes 2^24 must keep the float form. Row 0's sum against column 0 is
 * 2^24 + 3 (float: 2^24 + 4) and r (0x36c8fffd) puts it 5e-6 below a tie: 100.499995 rounds to
 * 100, the float sum's 100.500001 to 101. An underestimated bound (a pass that missed pairs, a
 * sum over a panel's wrong rows) takes the one-rounding form there and gives 101. */
KN_TEST(cpu_qgemm_fused_requant_bound_exact) {
    const int64_t M = 3, K = 512, N = 16;
    uint32_t seed = 4242;
    uint8_t *a = malloc((size_t)(M * K)), *b = malloc((size_t)(K * N));
    for (int64_t i = 0; i < M * K; i++) a[i] = (uint8_t)(fp_next(&seed) % 40);
    for (int64_t i = 0; i < K * N; i++) b[i] = (uint8_t)fp_next(&seed);
    for (int64_t k = 0; k < K; k++) a[k] = k < 258 ? 255 : k < 261 ? 1 : k == 261 ? 4 : 0;
    for (int64_t k = 0; k < 262; k++) b[k * N] = k < 261 ? 255 : 1;
    float r[3];
    const uint32_t rbits = 0x36c8fffdu;
    memcpy(&r[0], &rbits, sizeof r[0]);
    r[1] = r[2] = r[0] * 64.0f;
    int64_t want[3 * 16];
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            int64_t s = 0;
            for (int64_t k = 0; k < K; k++) s += (int64_t)a[i * K + k] * b[k * N + j];
            if (i == 0 && j == 0) CHECK_EQ_INT(s, 16777219);
            want[i * N + j] = (int64_t)fmin(127.0, fmax(-128.0, nearbyint((double)s * (double)r[i])));
        }
    CHECK_EQ_INT(want[0], 100);
    int32_t *pa = kn_aligned_alloc(64, sizeof(int32_t) * kn_qgemm_a_words(M, K));
    uint8_t *pb = kn_aligned_alloc(64, kn_qgemm_b_bytes(N, K));
    kn_qgemm_pack_a8(a, false, K, 1, M, K, NULL, 0, pa);
    kn_qgemm_pack_b8(b, N, 1, K, 0, N, pb);
    int32_t c[3 * 16];
    int8_t y[3 * 16];
    kn_cpu_vnni_force(false); /* (the fused form is the AVX2 tiles') */
    kn_qgemm g = {.M = M, .N = N, .K = K, .a = pa, .b = pb, .b_signed = false, .c = c, .ldc = N, .rq_y = (uint8_t *)y,
                  .rq_ldy = N, .rq_r = r, .rq_zy = 0.0, .rq_s8 = true};
    memset(c, 0, sizeof c);
    CHECK_STATUS(kn_qgemm_run(NULL, &g), KILN_OK);
    kn_cpu_vnni_force(true);
    /* where the tiles did not requantise (no AVX2, or VNNI forced on by the CPU's absence of the
     * switch), C holds the sums: requantise them as the definition does */
    int64_t bad = 0, first = -1;
    const bool in_c = c[0] != 0;
    for (int64_t i = 0; i < M * N; i++) {
        const int64_t got = in_c ? (int64_t)fmin(127.0, fmax(-128.0, nearbyint((double)c[i] * (double)r[i / N]))) : y[i];
        if (got != want[i] && bad++ == 0) first = i;
    }
    CHECK_MSG(bad == 0, "fused requantisation: %lld of %lld differ, first at %lld: want %lld", (long long)bad,
              (long long)(M * N), (long long)first, first >= 0 ? (long long)want[first] : 0LL);
    free(a), free(b);
    free(pa);
    free(pb);
}

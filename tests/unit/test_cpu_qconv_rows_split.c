/* int8 products of many rows split among threads (helper-108, 12-07) against the plain integer
 * definition in int64:
 *  - kn_qgemm8_run with 16 rows and more on pools of 1, 2, 3 and 16 threads: a few panels of 32
 *    columns each split into blocks of rows (g8_units), odd row counts (a last single row), K off
 *    the quads, N off the panels, the residual form (7-bit weights, with and without entries in
 *    its list) and the sign form (full-range symmetric), zero points, int8 and uint8 weights;
 *  - QLinearConv through the transposed form on planes of 32 positions and more (7x7, 9x11, 8x8,
 *    14x14, a stride-2 plane): im2col^T's rows and the requantisation split by rows among the
 *    threads around a product split by its output channels, or all three in one pass per chunk
 *    of rows; chunks whose bounds fall off the 8-position blocks of the byte transposes; odd
 *    channel counts; weights of 7 bits (the residual form), full range without the extreme (the
 *    sign form) and with it (kn_qgemm); per tensor and per channel scales, x and w zero points,
 *    uint8 and int8 y; threads 1, 2, 3 and 16. Scales are powers of two so the definition's double
 *    rounds exactly. Outputs must be equal byte for byte.
 *  - (helper-113) large planes whose im2col^T is made and multiplied in blocks of rows (56x56,
 *    40x37 k5, stride 2, dilation 2, k7 s2; runs of KW * C bytes with odd C: masked tails). */
#include "test_model_builder.h"

#include "backend/cpu/isa.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/qgemm_amx.h"
#include "util/aligned.h"
#include "util/threadpool.h"
#include "kiln.h"

#include <math.h>
#include <stdlib.h>

static uint32_t rs_next(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static const int rs_threads[4] = {1, 2, 3, 16};

KN_TEST(cpu_qgemm8_row_blocks_exact) {
    /* {M, K, N, b_s8, weights (0: 7 bits, 1: 7 bits and some pairs past the bound: residual
     *  entries, 2: full range symmetric: the sign form), za, zb} */
    static const int cases[][7] = {
        {196, 1152, 128, 1, 0, 128, 0}, /* 1x128x14x14 k3: four panels, blocks of rows */
        {49, 603, 40, 1, 0, 17, 0},     /* odd rows (a last single row), K off the quads, N off a panel */
        {33, 117, 64, 0, 0, 3, 131},    /* uint8 weights */
        {64, 300, 100, 1, 1, 255, 0},   /* residual entries */
        {99, 77, 33, 1, 2, 0, 0},       /* the sign form, K 77 */
        {17, 9, 200, 0, 2, 9, 128},     /* one block (17 rows) */
        {250, 40, 32, 1, 0, 200, 3},    /* one panel, four blocks */
    };
    const bool had_vnni = kn_cpu_has_vnni();
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *t = cases[ci];
        const int64_t M = t[0], K = t[1], N = t[2];
        const bool bs8 = t[3];
        uint32_t seed = 8080 + (uint32_t)ci;
        uint8_t *a = malloc((size_t)(M * K)), *b = malloc((size_t)(K * N));
        for (int64_t i = 0; i < M * K; i++) a[i] = (uint8_t)rs_next(&seed);
        for (int64_t i = 0; i < K * N; i++) {
            int v = t[4] == 2 ? (int)(rs_next(&seed) % 255) - 127 : (int)(rs_next(&seed) % 127) - 63;
            if (t[4] == 1 && i % 401 == 0) v = 120; /* pairs past 128 together: entries in the list */
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
        CHECK_MSG(kn_qgemv8_form(w8) == (t[4] == 2 ? 2 : 1), "qgemm8 case %zu: form %d", ci, kn_qgemv8_form(w8));
        for (int vnni = 0; vnni <= (had_vnni ? 1 : 0); vnni++) {
            kn_cpu_vnni_force(vnni == 1);
            for (int ti = 0; ti < 4; ti++) {
                kn_threadpool *pool = NULL;
                CHECK_STATUS(kn_threadpool_create(rs_threads[ti], &pool), KILN_OK);
                memset(c, 0x5a, sizeof(int32_t) * (size_t)(M * N));
                CHECK_STATUS(kn_qgemm8_run(pool, w8, a, K, M, t[5], t[6], bs8, c, N, NULL), KILN_OK);
                int64_t bad = 0, first = -1;
                for (int64_t i = 0; i < M * N; i++)
                    if (c[i] != want[i] && bad++ == 0) first = i;
                CHECK_MSG(bad == 0, "qgemm8 %lldx%lldx%lld case %zu, %d threads, vnni %d: %lld differ, first at %lld: %d, want %d",
                          (long long)M, (long long)K, (long long)N, ci, rs_threads[ti], vnni, (long long)bad, (long long)first,
                          first >= 0 ? c[first] : 0, first >= 0 ? want[first] : 0);
                kn_threadpool_destroy(pool);
            }
        }
        kn_cpu_vnni_force(true);
        free(a), free(b), free(want), free(c);
        free(w8);
    }
}

/* (helper-114) kn_qgemm8_run reading A's rows through kn_qgemm8_taps (an implicit im2col over a
 * padded channels-last image) against the int64 definition of the rows gathered here: runs of a
 * kernel row's KW * C bytes, runs of C bytes (dilation along W), a stride, rows from p0 off an
 * output row's start, an odd row count (a 1-row tail), N off the panels; runs off whole quads
 * (C 3) and residual entries (the rows gathered by kn_qgemm8_run first), u8 and s8 weights with
 * zero points (A's row sums through the taps), the int32 sums and the requantised bytes (scales of
 * powers of two: the double definition exact; one panel's scales so large that its sums pass the
 * one-rounding bound: kn_rq8's form there), VNNI on and off, 1, 2, 3 and 16 threads. */
KN_TEST(cpu_qgemm8_taps_exact) {
    /* {C, KH, KW, stride, dilation, OW, p0, M, N, b_s8, weights (0: 7 bits, 1: residual entries,
     *  2: full range symmetric), za, zb} */
    static const int cases[][13] = {
        {64, 3, 3, 1, 1, 56, 0, 241, 64, 1, 0, 128, 0},  /* 1x64x56x56 k3's first block */
        {64, 3, 3, 1, 1, 56, 248, 203, 64, 1, 2, 7, 0},  /* a later block, the sign form */
        {12, 3, 3, 2, 1, 9, 5, 61, 40, 0, 0, 131, 140},  /* stride 2, uint8 weights, zero points */
        {20, 3, 3, 1, 2, 11, 3, 97, 33, 1, 0, 3, 5},     /* dilation 2: runs of C bytes */
        {3, 3, 3, 1, 1, 16, 0, 64, 32, 1, 0, 128, 0},    /* runs of 9 bytes: gathered */
        {32, 3, 3, 1, 1, 14, 0, 196, 96, 1, 1, 128, 0},  /* residual entries: gathered */
        {16, 1, 5, 1, 1, 30, 2, 29, 70, 0, 0, 200, 128}, /* 1-D, odd rows */
    };
    const bool had_vnni = kn_cpu_has_vnni();
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *t = cases[ci];
        const int64_t C = t[0], KH = t[1], KW = t[2], st = t[3], dl = t[4], OW = t[5], p0 = t[6], M = t[7], N = t[8];
        const bool bs8 = t[9];
        const int za = t[11], zb = t[12];
        const int64_t K = KH * KW * C, OH = (p0 + M + OW - 1) / OW;
        const int64_t WP = (OW - 1) * st + (KW - 1) * dl + 1, HP = (OH - 1) * st + (KH - 1) * dl + 1;
        uint32_t seed = 1140 + (uint32_t)ci;
        uint8_t *x = malloc((size_t)(HP * WP * C)), *a = malloc((size_t)(M * K)), *b = malloc((size_t)(K * N));
        for (int64_t i = 0; i < HP * WP * C; i++) x[i] = (uint8_t)rs_next(&seed);
        for (int64_t i = 0; i < K * N; i++) {
            int v = t[10] == 2 ? (int)(rs_next(&seed) % 255) - 127 : (int)(rs_next(&seed) % 127) - 63;
            if (t[10] == 1 && i % 401 == 0) v = 120;
            b[i] = bs8 ? (uint8_t)(int8_t)v : (uint8_t)(v + 128);
        }
        /* the rows, k = (kh, kw, c) */
        const bool runs_c = dl > 1;
        const int64_t nseg = runs_c ? KH * KW : KH, seg_len = runs_c ? C : KW * C;
        int64_t seg_off[64];
        for (int64_t kh = 0; kh < KH; kh++)
            for (int64_t kw = 0; kw < (runs_c ? KW : 1); kw++) seg_off[kh * (runs_c ? KW : 1) + kw] = (kh * dl * WP + kw * dl) * C;
        for (int64_t i = 0; i < M; i++) {
            const int64_t p = p0 + i, oh = p / OW, ow = p % OW;
            for (int64_t kh = 0; kh < KH; kh++)
                for (int64_t kw = 0; kw < KW; kw++)
                    for (int64_t c = 0; c < C; c++)
                        a[i * K + (kh * KW + kw) * C + c] = x[((oh * st + kh * dl) * WP + ow * st + kw * dl) * C + c];
        }
        const kn_qgemm8_taps taps = {x, p0, OW, st * WP * C, st * C, nseg, seg_len, seg_off};
        int64_t *want = malloc(sizeof(int64_t) * (size_t)(M * N));
        int32_t *c = malloc(sizeof(int32_t) * (size_t)(M * N)), bias[128];
        float r[128];
        uint8_t *y = malloc((size_t)(M * N)), *wy = malloc((size_t)(M * N));
        for (int64_t j = 0; j < N; j++) {
            bias[j] = (int32_t)(rs_next(&seed) % 40001) - 20000;
            r[j] = j >= 32 && j < 64 ? 4.0f : j % 3 ? 1.0f / 1024 : 1.0f / 2048;
        }
        const double zy = bs8 ? -3.0 : 100.0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                int64_t sum = 0;
                for (int64_t k = 0; k < K; k++)
                    sum += ((int64_t)a[i * K + k] - za) * ((bs8 ? (int8_t)b[k * N + j] : b[k * N + j]) - (int64_t)zb);
                want[i * N + j] = sum;
                const double d = (double)(sum + bias[j]) * (double)r[j] + zy;
                wy[i * N + j] = (uint8_t)(int)fmin(bs8 ? 127.0 : 255.0, fmax(bs8 ? -128.0 : 0.0, nearbyint(d)));
            }
        void *w8 = kn_aligned_alloc(64, kn_qgemv8_bytes(K, N));
        kn_qgemv8_pack(b, bs8, K, N, w8);
        for (int vnni = 0; vnni <= (had_vnni ? 1 : 0); vnni++) {
            kn_cpu_vnni_force(vnni == 1);
            for (int ti = 0; ti < 4; ti++) {
                kn_threadpool *pool = NULL;
                CHECK_STATUS(kn_threadpool_create(rs_threads[ti], &pool), KILN_OK);
                for (int rq = 0; rq < 2; rq++) {
                    memset(c, 0x5a, sizeof(int32_t) * (size_t)(M * N));
                    memset(y, 0x5a, (size_t)(M * N));
                    const kn_qgemm8_out fo = {.rq_y = rq ? y : NULL, .rq_ldy = N, .rq_r = r, .rq_bias = bias, .rq_zy = zy,
                                              .rq_s8 = bs8, .taps = &taps};
                    CHECK_STATUS(kn_qgemm8_run(pool, w8, NULL, 0, M, za, zb, bs8, c, N, &fo), KILN_OK);
                    int64_t bad = 0, first = -1;
                    for (int64_t e = 0; e < M * N; e++)
                        if ((rq ? y[e] != wy[e] : c[e] != (int32_t)want[e]) && bad++ == 0) first = e;
                    CHECK_MSG(bad == 0, "qgemm8 taps case %zu (%lldx%lldx%lld), rq %d, %d threads, vnni %d: %lld differ, first at %lld: %d, want %lld",
                              ci, (long long)M, (long long)K, (long long)N, rq, rs_threads[ti], vnni, (long long)bad,
                              (long long)first, first < 0 ? 0 : rq ? y[first] : c[first],
                              first < 0 ? 0LL : rq ? (long long)wy[first] : (long long)want[first]);
                }
                kn_threadpool_destroy(pool);
            }
        }
        kn_cpu_vnni_force(true);
        free(x), free(a), free(b), free(want), free(c), free(y), free(wy);
        free(w8);
    }
}

static kn_tensor *rs_tensor(kiln_dtype dt, int rank, const int64_t *dims) {
    kn_tensor *t = NULL;
    kn_tensor_new(dt, rank, dims, &t);
    return t;
}

static int64_t rs_at(const kn_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_INT8 ? ((const int8_t *)t->data)[i] : ((const uint8_t *)t->data)[i];
}

KN_TEST(cpu_qlinear_conv_rows_split_exact) {
    /* {C, H, W, M, k, stride, w_s8, weights (0: full range with the type's extreme: kn_qgemm,
     *  1: full range without it: the sign form, 2: 7 bits: the residual form), per channel, y_s8, dilation} */
    static const int cases[][11] = {
        {128, 14, 14, 128, 3, 1, 1, 2, 1, 0, 1}, /* op_sweep's 1x128x14x14 k3 per channel */
        {67, 9, 11, 40, 3, 1, 1, 2, 0, 0, 1},    /* 99 positions (chunk bounds off the 8-blocks), odd C */
        {33, 7, 7, 129, 3, 1, 0, 2, 1, 1, 1},    /* 49 positions, odd M, uint8 weights, int8 y */
        {64, 8, 8, 48, 3, 1, 1, 1, 1, 0, 1},     /* the sign form */
        {96, 15, 13, 16, 3, 2, 1, 2, 0, 0, 1},   /* stride 2: 8x7 positions */
        {256, 7, 7, 64, 1, 1, 1, 2, 1, 1, 1},    /* k1 on 7x7 (xh is im2col^T) */
        {40, 10, 10, 24, 3, 1, 1, 0, 1, 0, 1},   /* with the extreme: kn_qgemm */
        {64, 56, 56, 64, 3, 1, 1, 2, 1, 0, 1},  /* op_sweep's 1x64x56x56 k3: im2col^T in 13 blocks of rows */
        {35, 40, 37, 20, 5, 1, 0, 2, 0, 1, 1},  /* k5, odd C: runs of 175 bytes (a masked tail), uint8 w */
        {48, 63, 63, 32, 3, 2, 1, 2, 1, 0, 1},  /* stride 2 on 32x32 positions, 3 blocks */
        {24, 30, 33, 17, 3, 1, 1, 2, 0, 1, 2},  /* dilation 2: runs of C bytes, odd M */
        {9, 50, 41, 16, 7, 2, 0, 2, 1, 0, 1},   /* k7 s2, runs of 63 bytes */
    };
    kn_qgemm_amx_force(false);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *t = cases[ci];
        const int64_t C = t[0], H = t[1], W = t[2], M = t[3], k = t[4], st = t[5], p = (t[4] - 1) / 2, dl = t[10];
        const bool ws8 = t[6], perch = t[8], ys8 = t[9];
        const int64_t OH = (H + 2 * p - dl * (k - 1) - 1) / st + 1, OW = (W + 2 * p - dl * (k - 1) - 1) / st + 1, n = M * OH * OW;
        uint32_t seed = 27182 + (uint32_t)ci;
        const int64_t xd[4] = {1, C, H, W}, wd[4] = {M, C, k, k};
        const kiln_dtype wt = ws8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8, yt_ = ys8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8;
        kn_tensor *x = rs_tensor(KILN_DTYPE_UINT8, 4, xd), *w = rs_tensor(wt, 4, wd);
        for (int64_t i = 0; i < kn_tensor_count(x); i++) ((uint8_t *)x->data)[i] = (uint8_t)rs_next(&seed);
        const int zw = ws8 ? 0 : 131, zx = 128 - (int)(ci % 3) * 50;
        for (int64_t i = 0; i < kn_tensor_count(w); i++) {
            int v;
            if (t[7] == 2) v = (int)(rs_next(&seed) % 127) - 63 + zw;
            else if (t[7] == 1) v = ws8 ? (int)(rs_next(&seed) % 255) - 127 : (int)(rs_next(&seed) % 255) + 1;
            else v = ws8 ? (int)(rs_next(&seed) % 256) - 128 : (int)(rs_next(&seed) % 256);
            ((uint8_t *)w->data)[i] = (uint8_t)v;
        }
        if (t[7] == 0) ((uint8_t *)w->data)[5] = ws8 ? 0x80 : 0;
        /* x_scale 2^-1, w_scale 2^-5 (per channel 2^-5 or 2^-6), y_scale 2^4: (acc + bias) r + zy
         * exact in double, ties to even */
        float ws[300];
        int32_t bias[300];
        for (int64_t m = 0; m < M; m++)
            ws[m] = perch && m % 2 ? 1.0f / 64 : 1.0f / 32, bias[m] = (int32_t)(rs_next(&seed) % 40001) - 20000;
        /* (helper-114) 56x56's second panel: scales past kn_qgemm8's one-rounding bound (its other form) */
        for (int64_t m = 32; ci == 7 && m < M; m++) ws[m] = 64.0f;
        const int zy = ys8 ? -3 : 128;
        const double lo = ys8 ? -128.0 : 0.0, hi = ys8 ? 127.0 : 255.0;
        int64_t *want = malloc(sizeof(int64_t) * (size_t)n);
        for (int64_t m = 0; m < M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t acc = 0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t kh = 0; kh < k; kh++)
                            for (int64_t kw = 0; kw < k; kw++) {
                                const int64_t ih = oh * st - p + kh * dl, iw = ow * st - p + kw * dl;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                acc += (rs_at(x, (c * H + ih) * W + iw) - zx) * (rs_at(w, ((m * C + c) * k + kh) * k + kw) - zw);
                            }
                    const double r = 0.5 * (double)ws[m] / 16.0, d = (double)(acc + bias[m]) * r + zy;
                    want[(m * OH + oh) * OW + ow] = (int64_t)fmin(hi, fmax(lo, nearbyint(d)));
                }
        tmb mb;
        tmb_init(&mb, 13);
        kn_tensor *zxt = rs_tensor(KILN_DTYPE_UINT8, 0, NULL), *zwt = rs_tensor(wt, perch ? 1 : 0, (int64_t[]){M});
        ((uint8_t *)zxt->data)[0] = (uint8_t)zx;
        for (int64_t m = 0; m < (perch ? M : 1); m++) ((uint8_t *)zwt->data)[m] = (uint8_t)zw;
        kn_tensor *wst = rs_tensor(KILN_DTYPE_FLOAT, perch ? 1 : 0, (int64_t[]){M}), *bt = rs_tensor(KILN_DTYPE_INT32, 1, (int64_t[]){M});
        memcpy(wst->data, ws, sizeof(float) * (size_t)(perch ? M : 1));
        memcpy(bt->data, bias, sizeof(int32_t) * (size_t)M);
        kn_tensor *yz = rs_tensor(yt_, 0, NULL);
        ((uint8_t *)yz->data)[0] = (uint8_t)zy;
        int xv = tmb_input(&mb, "x", KILN_DTYPE_UINT8, 4, xd, NULL);
        int wv = tmb_const_tensor(&mb, "w", w), zxv = tmb_const_tensor(&mb, "zx", zxt), zwv = tmb_const_tensor(&mb, "zw", zwt);
        int xsv = tmb_scalar(&mb, "xs", KILN_DTYPE_FLOAT, 0.5), ysv = tmb_scalar(&mb, "ys", KILN_DTYPE_FLOAT, 16.0);
        int wsv = tmb_const_tensor(&mb, "ws", wst), yzv = tmb_const_tensor(&mb, "yz", yz), bv = tmb_const_tensor(&mb, "bias", bt);
        int y = tmb_value(&mb, "y");
        int node = tmb_node(&mb, "QLinearConv", (int[]){xv, xsv, zxv, wv, wsv, zwv, ysv, yzv, bv}, 9, y);
        tmb_conv2d(&mb, node, k, st, p, 1);
        if (dl > 1) tmb_ints(&mb, node, "dilations", (int64_t[]){dl, dl}, 2);
        tmb_output(&mb, y);
        size_t size;
        unsigned char *model = tmb_finish(&mb, &size);
        kiln_tensor *xin = NULL;
        kiln_tensor_create(x->dtype, x->dims, x->rank, &xin);
        if (xin) memcpy(kiln_tensor_data(xin), x->data, (size_t)kn_tensor_count(x));
        const char *names[1] = {"x"};
        for (int ti = 0; ti < 4; ti++) {
            kiln_session *s = tmb_session(model, size, rs_threads[ti], 3);
            CHECK_MSG(s != NULL, "case %zu: no session", ci);
            if (!s) continue;
            for (int run = 0; run < 2; run++) {
                kiln_tensor *yo = NULL;
                CHECK_STATUS(kiln_session_run(s, names, &xin, 1, NULL, 1, &yo), KILN_OK);
                if (!yo) continue;
                CHECK_EQ_INT(kiln_tensor_element_count(yo), n);
                int64_t bad = 0, first = -1;
                const uint8_t *got = kiln_tensor_data(yo);
                for (int64_t i = 0; i < n && kiln_tensor_element_count(yo) == n; i++) {
                    const int64_t g = ys8 ? (int8_t)got[i] : got[i];
                    if (g != want[i] && bad++ == 0) first = i;
                }
                CHECK_MSG(bad == 0, "QLinearConv 1x%lldx%lldx%lld -> %lld k%lld s%lld %s w kind %d, %d threads: %lld of %lld differ, first at %lld: %d, want %lld",
                          (long long)C, (long long)H, (long long)W, (long long)M, (long long)k, (long long)st,
                          ws8 ? "s8" : "u8", t[7], rs_threads[ti], (long long)bad, (long long)n, (long long)first,
                          first >= 0 ? got[first] : 0, first >= 0 ? (long long)want[first] : 0LL);
                kiln_tensor_destroy(yo);
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

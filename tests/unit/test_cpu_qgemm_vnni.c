/* The VNNI forms of qgemm.c (vpdpbusd, u8 x s8 quads, no int16 pair sums) against an int64
 * definition, byte for byte, with VNNI forced on and off (kn_cpu_vnni_force; on only where the
 * CPU has it, so on an AVX2 machine both runs take the AVX2 forms):
 *  - kn_qgemm8_run (A's rows of uint8 activations, B's weights in kn_qgemv8's panels of 32): the
 *    tile of 8 rows and its tails of 3-7 rows, one and two rows, K off multiples of 4, the residual
 *    form (weights near their zero point, a few pairs over the bound) and the sign form (full-range
 *    int8 weights but -128), int32 outputs and the fused requantisation (rq_y);
 *  - kn_qgemm_run (A packed by kn_qgemm_pack_a8, int8 or uint8, zero points per row; B int8 or
 *    uint8, one zero point or per column, packed or made by pack_b): full-range values, K off
 *    multiples of 4 and past a pass of 256 pairs, M and N off the tiles, int32 outputs
 *    (accumulated or not) and the fused requantisation (scales per row, powers of two so that the
 *    definition's double is exact).
 * 1, 2, 3 and 16 threads. */
#include "unit.h"

#include "backend/cpu/isa.h"
#include "backend/cpu/qgemm.h"
#include "util/aligned.h"
#include "util/threadpool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t qv_next(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static const int qv_threads[4] = {1, 2, 3, 16};

/* B made by kn_qgemm's pack_b (a convolution's way: the byte form for any M) */
typedef struct qv_packer {
    const uint8_t *b;
    int64_t K, N;
} qv_packer;
static void qv_pack_b(const void *ctx, int64_t n0, int64_t nc, uint8_t *dst) {
    const qv_packer *p = ctx;
    kn_qgemm_pack_b8(p->b, p->N, 1, p->K, n0, nc, dst);
}

/* the definition's byte: saturate(round-half-even(v * r + zy)) */
static int64_t qv_requant(int64_t v, double r, double zy, bool s8) {
    const double d = nearbyint((double)v * r + zy);
    return s8 ? (int64_t)fmin(127.0, fmax(-128.0, d)) : (int64_t)fmin(255.0, fmax(0.0, d));
}

KN_TEST(cpu_qgemm8_vnni_exact) {
    /* {M, K, N, b_s8, weights (0: near the zero point, a few pairs over; 1: full range but -128), za, zb, rq} */
    static const int cases[][8] = {
        {8, 64, 32, 1, 1, 128, 0, 0},    /* one tile of 8 rows, the sign form */
        {19, 37, 45, 1, 1, 3, 0, 0},     /* 8 + 8 + 3 rows, K 37 (a tail of 1), N off the panels */
        {23, 6, 70, 0, 0, 200, 131, 0},  /* 8 + 8 + 7, K 6, uint8 weights, the residual form */
        {13, 3, 33, 1, 0, 17, -2, 0},    /* K 3: the tail alone, 8 + 5 rows */
        {4, 301, 96, 1, 1, 255, 0, 1},   /* four rows, odd K, requantised */
        {64, 130, 64, 0, 0, 0, 128, 1},  /* 8 tiles, uint8 weights, requantised */
        {2, 99, 40, 1, 1, 9, 0, 0},      /* two rows */
        {1, 17, 40, 1, 0, 90, 5, 1},     /* one row */
        {150, 259, 129, 1, 1, 77, 0, 1}, /* row blocks split over the threads, requantised */
    };
    const bool had_vnni = kn_cpu_has_vnni();
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *t = cases[ci];
        const int64_t M = t[0], K = t[1], N = t[2];
        const bool bs8 = t[3], full = t[4], rq = t[7];
        const int za = t[5], zb = t[6];
        uint32_t seed = 5150 + (uint32_t)ci;
        uint8_t *a = malloc((size_t)(M * K)), *b = malloc((size_t)(K * N));
        for (int64_t i = 0; i < M * K; i++) a[i] = (uint8_t)qv_next(&seed);
        for (int64_t i = 0; i < K * N; i++) {
            int v;
            if (full) v = (int)(qv_next(&seed) % 255) - 127; /* [-127, 127] as packed */
            else if (qv_next(&seed) % 97 == 0) v = (qv_next(&seed) & 1) ? 120 : -120;
            else v = (int)(qv_next(&seed) % 61) - 30;
            /* as stored: int8 v + zb, or uint8 v + 128 (the packing takes 128 off uint8 weights) */
            b[i] = bs8 ? (uint8_t)(int8_t)(v + (full ? 0 : zb)) : (uint8_t)(v + 128);
        }
        const size_t bytes = kn_qgemv8_bytes(K, N);
        void *pk = kn_aligned_alloc(64, bytes);
        kn_qgemv8_pack(b, bs8, K, N, pk);
        CHECK_MSG(kn_qgemv8_form(pk) == (full ? 2 : 1), "qgemm8 case %zu: form %d", ci, kn_qgemv8_form(pk));
        float *r = malloc(sizeof(float) * (size_t)N);
        int32_t *bias = malloc(sizeof(int32_t) * (size_t)N);
        for (int64_t j = 0; j < N; j++) r[j] = ldexpf(1.0f, -9 - (int)(j % 3)), bias[j] = (int32_t)(qv_next(&seed) % 4001) - 2000;
        int64_t *want = malloc(sizeof(int64_t) * (size_t)(M * N));
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                int64_t s = 0;
                for (int64_t k = 0; k < K; k++) {
                    const int64_t bv = bs8 ? (int8_t)b[k * N + j] : b[k * N + j];
                    s += ((int64_t)a[i * K + k] - za) * (bv - zb);
                }
                want[i * N + j] = rq ? qv_requant(s + bias[j], r[j], 7.0, bs8) : s;
            }
        int32_t *c = malloc(sizeof(int32_t) * (size_t)(M * N));
        uint8_t *y = malloc((size_t)(M * N));
        for (int vnni = 0; vnni <= (had_vnni ? 1 : 0); vnni++) {
            kn_cpu_vnni_force(vnni == 1);
            for (int ti = 0; ti < 4; ti++) {
                kn_threadpool *pool = NULL;
                CHECK_STATUS(kn_threadpool_create(qv_threads[ti], &pool), KILN_OK);
                memset(c, 0x5a, sizeof(int32_t) * (size_t)(M * N));
                memset(y, 0x5a, (size_t)(M * N));
                kn_qgemm8_out fo = {.rq_y = y, .rq_ldy = N, .rq_r = r, .rq_bias = bias, .rq_zy = 7.0, .rq_s8 = bs8};
                CHECK_STATUS(kn_qgemm8_run(pool, pk, a, K, M, za, zb, bs8, c, N, rq ? &fo : NULL), KILN_OK);
                int64_t bad = 0, first = -1, got = 0;
                for (int64_t i = 0; i < M * N; i++) {
                    const int64_t g = !rq ? c[i] : bs8 ? (int8_t)y[i] : y[i];
                    if (g != want[i] && bad++ == 0) first = i, got = g;
                }
                CHECK_MSG(bad == 0, "qgemm8 %lldx%lldx%lld case %zu, %d threads, vnni %d: %lld of %lld differ, first at %lld: %lld, want %lld",
                          (long long)M, (long long)K, (long long)N, ci, qv_threads[ti], vnni, (long long)bad,
                          (long long)(M * N), (long long)first, (long long)got, first >= 0 ? (long long)want[first] : 0LL);
                kn_threadpool_destroy(pool);
            }
        }
        kn_cpu_vnni_force(true);
        free(a), free(b), free(r), free(bias), free(want), free(c), free(y);
        free(pk);
    }
}

KN_TEST(cpu_qgemm_vnni_exact) {
    /* {M, K, N, a_s8, za (999: per row), b_s8, zb (999: per column), accumulate, rq} */
    static const int cases[][9] = {
        {6, 64, 16, 1, 0, 0, 128, 0, 0},      /* one tile, int8 A zero point 0 (no column sums) */
        {7, 37, 33, 0, 131, 0, 17, 0, 0},     /* uint8 A zero point 131, K 37, N off the panels */
        {13, 6, 40, 1, 999, 1, 999, 0, 0},    /* zero points per row and column, K 6 */
        {3, 3, 20, 0, 128, 1, -128, 1, 0},    /* K 3, int8 B, accumulate */
        {5, 1, 18, 1, 5, 0, 0, 0, 0},         /* K 1 */
        {2, 45, 17, 0, 255, 1, 3, 0, 0},      /* two rows */
        {1, 515, 70, 1, -7, 0, 250, 0, 0},    /* one row, K 515: past a pass of 256 pairs */
        {20, 515, 35, 0, 0, 1, 999, 1, 0},    /* K 515, accumulate, per column */
        {32, 144, 100, 1, 0, 0, 17, 0, 1},    /* requantised: int8 weights as A, uint8 activations */
        {33, 27, 196, 0, 131, 0, 17, 0, 1},   /* requantised, uint8 weights zero point 131 */
        {64, 16, 3000, 1, 999, 1, -9, 0, 1},  /* K 16, many columns (row and column blocks), per row */
        {11, 510, 50, 1, 3, 1, 0, 0, 1},      /* K 510 (255 pairs, one pass), requantised */
    };
    const bool had_vnni = kn_cpu_has_vnni();
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *t = cases[ci];
        const int64_t M = t[0], K = t[1], N = t[2];
        const bool as8 = t[3], bs8 = t[5], acc = t[7], rq = t[8];
        uint32_t seed = 6160 + (uint32_t)ci;
        uint8_t *a = malloc((size_t)(M * K)), *b = malloc((size_t)(K * N));
        int32_t *zar = malloc(sizeof(int32_t) * (size_t)M), *zbc = malloc(sizeof(int32_t) * (size_t)N);
        for (int64_t i = 0; i < M * K; i++) a[i] = (uint8_t)qv_next(&seed);
        for (int64_t i = 0; i < K * N; i++) b[i] = (uint8_t)qv_next(&seed);
        for (int64_t i = 0; i < M; i++) zar[i] = t[4] == 999 ? (as8 ? (int)(qv_next(&seed) % 256) - 128 : (int)(qv_next(&seed) % 256)) : t[4];
        for (int64_t j = 0; j < N; j++) zbc[j] = t[6] == 999 ? (bs8 ? (int)(qv_next(&seed) % 256) - 128 : (int)(qv_next(&seed) % 256)) : t[6];
        float *r = malloc(sizeof(float) * (size_t)M);
        int32_t *bias = malloc(sizeof(int32_t) * (size_t)M);
        for (int64_t i = 0; i < M; i++) r[i] = ldexpf(1.0f, -12 - (int)(i % 4)), bias[i] = (int32_t)(qv_next(&seed) % 100001) - 50000;
        int32_t *init = malloc(sizeof(int32_t) * (size_t)(M * N));
        int64_t *want = malloc(sizeof(int64_t) * (size_t)(M * N));
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                int64_t s = 0;
                for (int64_t k = 0; k < K; k++) {
                    const int64_t av = as8 ? (int8_t)a[i * K + k] : a[i * K + k], bv = bs8 ? (int8_t)b[k * N + j] : b[k * N + j];
                    s += (av - zar[i]) * (bv - zbc[j]);
                }
                init[i * N + j] = acc ? (int32_t)(qv_next(&seed) % 100001) - 50000 : 0;
                want[i * N + j] = rq ? qv_requant(s + bias[i], r[i], -3.0, !as8) : (int32_t)(s + init[i * N + j]);
            }
        int32_t *pa = kn_aligned_alloc(64, sizeof(int32_t) * kn_qgemm_a_words(M, K));
        uint8_t *pb = kn_aligned_alloc(64, kn_qgemm_b_bytes(N, K));
        kn_qgemm_pack_b8(b, N, 1, K, 0, N, pb);
        int32_t *c = malloc(sizeof(int32_t) * (size_t)(M * N));
        uint8_t *y = malloc((size_t)(M * N));
        for (int vnni = 0; vnni <= (had_vnni ? 1 : 0); vnni++) {
            kn_cpu_vnni_force(vnni == 1);
            /* packed with the form the CPU runs, and (repack 1) packed with VNNI off but run with it
             * on: the int16 pairs then */
            for (int repack = 0; repack < (vnni ? 2 : 1); repack++) {
                kn_cpu_vnni_force(vnni == 1 && repack == 0);
                kn_qgemm_pack_a8(a, as8, K, 1, M, K, t[4] == 999 ? zar : NULL, t[4] == 999 ? 0 : t[4], pa);
                kn_cpu_vnni_force(vnni == 1);
                for (int ti = 0; ti < 8; ti++) {
                    /* B packed (the byte form from two row panels on) or by pack_b (for any M) */
                    const bool by_cb = ti >= 4;
                    qv_packer pk = {b, K, N};
                    kn_threadpool *pool = NULL;
                    CHECK_STATUS(kn_threadpool_create(qv_threads[ti % 4], &pool), KILN_OK);
                    memcpy(c, init, sizeof(int32_t) * (size_t)(M * N));
                    memset(y, 0x5a, (size_t)(M * N));
                    kn_qgemm g = {.M = M, .N = N, .K = K, .a = pa, .b = by_cb ? NULL : pb, .pack_b = qv_pack_b,
                                  .pack_ctx = &pk, .b_signed = bs8,
                                  .zb_cols = t[6] == 999 ? zbc : NULL, .zb = t[6] == 999 ? 0 : t[6], .c = c, .ldc = N,
                                  .accumulate = acc};
                    if (rq) g.rq_y = y, g.rq_ldy = N, g.rq_r = r, g.rq_bias = bias, g.rq_zy = -3.0, g.rq_s8 = !as8;
                    CHECK_STATUS(kn_qgemm_run(pool, &g), KILN_OK);
                    /* the fused requantisation where it ran (rq_y written), else C's sums requantised here */
                    int64_t bad = 0, first = -1, got = 0;
                    bool fused = false;
                    for (int64_t i = 0; rq && i < M * N; i++) fused |= y[i] != 0x5a;
                    for (int64_t i = 0; i < M * N; i++) {
                        int64_t g8 = c[i];
                        if (rq) g8 = fused ? (!as8 ? (int8_t)y[i] : y[i]) : qv_requant((int64_t)c[i] + bias[i / N], r[i / N], -3.0, !as8);
                        if (g8 != want[i] && bad++ == 0) first = i, got = g8;
                    }
                    CHECK_MSG(bad == 0, "qgemm %lldx%lldx%lld case %zu, %d threads, B %s, vnni %d, repack %d%s: %lld of %lld differ, first at %lld: %lld, want %lld",
                              (long long)M, (long long)K, (long long)N, ci, qv_threads[ti % 4], by_cb ? "by pack_b" : "packed", vnni, repack,
                              fused ? " (fused)" : "", (long long)bad, (long long)(M * N), (long long)first,
                              (long long)got, first >= 0 ? (long long)want[first] : 0LL);
                    kn_threadpool_destroy(pool);
                }
            }
        }
        kn_cpu_vnni_force(true);
        free(a), free(b), free(zar), free(zbc), free(r), free(bias), free(init), free(want), free(c), free(y);
        free(pa);
        free(pb);
    }
}

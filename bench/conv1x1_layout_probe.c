/* Probe: what the layout alone buys a 1x1 convolution on the CPU (AVX-512, 1 thread).
 *
 * Three loops, each the best plain C this probe's author found for its layout, no packing inside
 * the timed region except where the layout needs it:
 *   rows    NCHW in and out, kiln's orientation (sgemm.c's 12 x 32 tile: 12 output channels by 32
 *           pixels, pixels in the lanes, weights broadcast), B (the input) packed per block of
 *           1024 pixels into 32-pixel panels as kiln's rows-first GEMM does, rows first over the
 *           block; a plane's last short panel zero-padded and stored masked, as kiln's;
 *   nchwc   NCHW in, 16-channel-blocked out (ONNX Runtime's NCHWc pointwise tile: 4 blocks of 16
 *           output channels by 6 pixels, output channels in the lanes, inputs broadcast straight
 *           from the input planes, weights packed once [M/64][K][64]);
 *   nchwc-b the same with a 16-channel-blocked input.
 * Residual: 0 none (+ bias), 1 + a residual in a buffer of its own, then Relu, 2 the same with
 * the residual in the output buffer (ONNX Runtime's NCHWc Sum fusion: the Add's other input is the
 * convolution's output). Times are thread CPU time, the median of 7 rounds of 20 runs each.
 *
 *   cc -O2 -march=native -o /tmp/probe bench/conv1x1_layout_probe.c
 *   /tmp/probe C M HW [RESIDUAL]      e.g. /tmp/probe 64 256 56 1
 *   PROBE_NOPACK=1 /tmp/probe ...     the rows loop without its packing of B (what B already in the
 *                                     GEMM's panel layout would cost)
 *
 * Not built by CMake (AVX-512 only); the numbers it gave are in
 * bench/results/cpu-1x1-2026-12-06g-h84.md. */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- rows: C[M, P] = W[M, K] x[K, P], 12 x 32 tiles */
#define MR 12
static inline __attribute__((always_inline)) void row_tile(int mr, int64_t K, const float *a, const float *b,
                                                           const float *bias, float *c, int64_t ldc,
                                                           const float *res, int relu, int n) {
    /* n: the tile's columns (32, or fewer in the plane's last panel: masked stores, as kiln's) */
    const __mmask16 m0 = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
    const __mmask16 m1 = n >= 32 ? (__mmask16)0xFFFF : n <= 16 ? (__mmask16)0 : (__mmask16)((1u << (n - 16)) - 1);
    __m512 acc0[MR], acc1[MR];
    for (int r = 0; r < MR; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int64_t k = 0; k < K; k++) {
        const __m512 b0 = _mm512_loadu_ps(b + 32 * k), b1 = _mm512_loadu_ps(b + 32 * k + 16);
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            const __m512 ar = _mm512_set1_ps(a[MR * k + r]);
            acc0[r] = _mm512_fmadd_ps(ar, b0, acc0[r]);
            acc1[r] = _mm512_fmadd_ps(ar, b1, acc1[r]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
        __m512 v0 = _mm512_add_ps(acc0[r], _mm512_set1_ps(bias[r]));
        __m512 v1 = _mm512_add_ps(acc1[r], _mm512_set1_ps(bias[r]));
        if (res) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, res + r * ldc));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, res + r * ldc + 16));
        }
        if (relu) {
            v0 = _mm512_max_ps(v0, _mm512_setzero_ps());
            v1 = _mm512_max_ps(v1, _mm512_setzero_ps());
        }
        _mm512_mask_storeu_ps(c + r * ldc, m0, v0);
        _mm512_mask_storeu_ps(c + r * ldc + 16, m1, v1);
    }
}

static int pack = 1; /* PROBE_NOPACK=1: B not packed in the timed runs (stale panels: the loop and stores alone) */

static void run_rows(int64_t K, int64_t M, int64_t P, const float *x, const float *wp, const float *bias, float *y,
                     const float *res, float *bp) {
    const int64_t ncb = 1024;
    for (int64_t j0 = 0; j0 < P; j0 += ncb) {
        const int64_t nc = P - j0 < ncb ? P - j0 : ncb;
        for (int64_t jr = 0; jr < nc && pack; jr += 32) {
            const int64_t w = nc - jr < 32 ? nc - jr : 32; /* the last panel zero-padded */
            for (int64_t k = 0; k < K; k++) {
                memcpy(bp + jr * K + 32 * k, x + k * P + j0 + jr, sizeof(float) * (size_t)w);
                if (w < 32) memset(bp + jr * K + 32 * k + w, 0, sizeof(float) * (size_t)(32 - w));
            }
        }
        for (int64_t i = 0; i < M; i += MR) {
            const int mr = M - i < MR ? (int)(M - i) : MR;
            for (int64_t jr = 0; jr < nc; jr += 32) {
                float *c = y + i * P + j0 + jr;
                const float *rr = res ? res + i * P + j0 + jr : NULL;
                const int n = nc - jr < 32 ? (int)(nc - jr) : 32;
                if (mr == MR) row_tile(MR, K, wp + i * K, bp + jr * K, bias + i, c, P, rr, res != NULL, n);
                else row_tile(mr, K, wp + i * K, bp + jr * K, bias + i, c, P, rr, res != NULL, n);
            }
        }
    }
}

/* ---- nchwc: 4 blocks of 16 output channels by 6 pixels */
#define PX 6
static inline __attribute__((always_inline)) void blk_tile(int px, int64_t K, const float *x, int64_t P, int bin,
                                                           const float *w, const float *bias, float *y,
                                                           const float *res, int relu) {
    __m512 acc[PX][4];
    for (int f = 0; f < 4; f++) {
        const __m512 b = _mm512_loadu_ps(bias + 16 * f);
        for (int p = 0; p < PX; p++) acc[p][f] = b;
    }
    for (int64_t k = 0; k < K; k++) {
        __m512 wv[4];
#pragma GCC unroll 4
        for (int f = 0; f < 4; f++) wv[f] = _mm512_load_ps(w + 64 * k + 16 * f);
        const float *xk = bin ? x + (k >> 4) * P * 16 + (k & 15) : x + k * P;
#pragma GCC unroll 6
        for (int p = 0; p < px; p++) {
            const __m512 a = _mm512_set1_ps(bin ? xk[16 * p] : xk[p]);
#pragma GCC unroll 4
            for (int f = 0; f < 4; f++) acc[p][f] = _mm512_fmadd_ps(a, wv[f], acc[p][f]);
        }
    }
    for (int f = 0; f < 4; f++)
        for (int p = 0; p < px; p++) {
            __m512 v = acc[p][f];
            if (res) v = _mm512_add_ps(v, _mm512_loadu_ps(res + f * P * 16 + 16 * p));
            if (relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
            _mm512_storeu_ps(y + f * P * 16 + 16 * p, v);
        }
}

static void run_blk(int64_t K, int64_t M, int64_t P, int bin, const float *x, const float *w, const float *bias,
                    float *y, const float *res) {
    for (int64_t fb = 0; fb < M / 64; fb++)
        for (int64_t p = 0; p < P; p += PX) {
            const int px = P - p < PX ? (int)(P - p) : PX;
            float *yo = y + fb * 4 * P * 16 + p * 16;
            const float *ro = res ? res + fb * 4 * P * 16 + p * 16 : NULL;
            const float *xo = bin ? x + p * 16 : x + p;
            if (px == PX) blk_tile(PX, K, xo, P, bin, w + fb * K * 64, bias + fb * 64, yo, ro, res != NULL);
            else blk_tile(px, K, xo, P, bin, w + fb * K * 64, bias + fb * 64, yo, ro, res != NULL);
        }
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s C M HW [RESIDUAL 0|1|2]\n", argv[0]);
        return 2;
    }
    const int64_t K = atoll(argv[1]), M = atoll(argv[2]), HW = atoll(argv[3]), P = HW * HW;
    const int mode = argc > 4 ? atoi(argv[4]) : 0;
    pack = !getenv("PROBE_NOPACK");
    if (M % 64 || K % 16) {
        fprintf(stderr, "M a multiple of 64, C of 16\n");
        return 2;
    }
    float *x = aligned_alloc(64, sizeof(float) * (size_t)(K * P)), *w = aligned_alloc(64, sizeof(float) * (size_t)(K * M));
    float *wp = aligned_alloc(64, sizeof(float) * (size_t)(K * (M + MR)));
    float *bias = aligned_alloc(64, sizeof(float) * (size_t)(M + MR)), *bp = aligned_alloc(64, sizeof(float) * (size_t)(K * 1024));
    /* the residual's buffer 1 MB + 4 KB past the output's end: no 4 KB aliasing of the two */
    float *y = aligned_alloc(64, sizeof(float) * (size_t)(M * P) * 2 + (1 << 20) + 4096 + 64);
    float *r = y + M * P + (1 << 18) + 1024 + 16;
    if (!x || !w || !wp || !bias || !bp || !y) return 1;
    for (int64_t i = 0; i < K * P; i++) x[i] = (float)(i % 7) * 0.1f;
    for (int64_t i = 0; i < K * M; i++) w[i] = (float)(i % 5) * 0.01f;
    for (int64_t i = 0; i < M + MR; i++) bias[i] = 0.1f;
    for (int64_t i = 0; i < K * 1024; i++) bp[i] = 0.5f;
    /* rows: W packed in panels of MR rows, k-major ([M/MR][K][MR]) */
    memset(wp, 0, sizeof(float) * (size_t)(K * (M + MR)));
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++) wp[(i / MR) * MR * K + k * MR + i % MR] = w[i * K + k];
    /* nchwc: W packed [M/64][K][64] into w's copy */
    float *wb = aligned_alloc(64, sizeof(float) * (size_t)(K * M));
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) wb[(m / 64) * K * 64 + k * 64 + m % 64] = w[m * K + k];
    const char *names[3] = {"rows (NCHW)", "nchwc (NCHW in)", "nchwc-b (blocked in)"};
    for (int v = 0; v < 3; v++) {
        double ts[7];
        for (int it = 0; it < 7; it++) {
            for (int64_t i = 0; i < M * P; i++) y[i] = r[i] = 1.0f;
            const float *res = mode == 1 ? r : mode == 2 ? y : NULL;
            const double t0 = now();
            for (int rep = 0; rep < 20; rep++) {
                if (v == 0) run_rows(K, M, P, x, wp, bias, y, res, bp);
                else run_blk(K, M, P, v == 2, x, wb, bias, y, res);
            }
            ts[it] = (now() - t0) / 20;
        }
        for (int i = 1; i < 7; i++) /* the median of the 7 rounds (ab.py's statistic) */
            for (int j = i; j > 0 && ts[j - 1] > ts[j]; j--) {
                const double q = ts[j];
                ts[j] = ts[j - 1];
                ts[j - 1] = q;
            }
        const double best = ts[3];
        printf("%lld->%lld %lldx%lld residual %d  %-22s %.3f ms  %.1f GFLOP/s\n", (long long)K, (long long)M,
               (long long)HW, (long long)HW, mode, names[v], best * 1e3, 2.0 * (double)(K * M * P) / best / 1e9);
    }
    return 0;
}

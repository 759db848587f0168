/* GEMM benchmark: GFLOP/s of kn_sgemm on shapes that matter (square, transformer-like skinny,
 * GEMV), against the machine's measured FMA peak. Build by hand from the repository root:
 *   cc -O3 -march=native -Iinclude -Isrc bench/gemm_bench.c src/backend/cpu/sgemm.c \
 *      src/util/threadpool.c src/util/status.c -lpthread -lm -o /tmp/gemm_bench
 *   /tmp/gemm_bench [threads] [shape filter, e.g. square]
 * or build the CMake target kiln_gemm_bench. */
#include "backend/cpu/sgemm.h"
#include "util/threadpool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* With one thread the clock is the thread's CPU time, so other processes on a shared machine do
 * not inflate the result; with more, wall time (what a caller waits). */
static int use_cpu_clock;
static double now(void) {
    struct timespec ts;
    clock_gettime(use_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Peak single-core FMA rate: independent FMA chains, enough to cover latency x ports. */
static double fma_peak_gflops(void) {
#if defined(__AVX512F__)
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps((float)i * 1e-3f);
    const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-4f);
    long iters = 20000000;
    double t0 = now();
    for (long n = 0; n < iters; n++) {
        for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
    }
    double t = now() - t0;
    float s = 0;
    for (int i = 0; i < 16; i++) s += _mm512_reduce_add_ps(a[i]);
    if (s == 12345.f) printf(" ");
    return (double)iters * 16 * 32 / t * 1e-9;
#else
    return 0;
#endif
}

static void naive(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                  int ldb, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
            C[i * ldc + j] = (float)(alpha * s + beta * C[i * ldc + j]);
        }
}

typedef struct { int M, N, K, ta, tb; const char *what; } shape;

/* The FMA peak of all threads at once (frequency drops when every core runs AVX-512). */
static void peak_range(void *arg, int64_t b, int64_t e) {
    double *out = arg;
    for (int64_t i = b; i < e; i++) out[i] = fma_peak_gflops();
}

static volatile int64_t sink;
static void empty_range(void *arg, int64_t b, int64_t e) {
    (void)arg;
    sink += e - b;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    kn_threadpool *pool = NULL;
    if (kn_threadpool_create(threads, &pool) != KILN_OK) return 1;
    int nt = kn_threadpool_size(pool);
    use_cpu_clock = nt == 1;
    double peak1 = fma_peak_gflops();
    double per[256] = {0}, peak_all = peak1;
    if (nt > 1) {
        kn_parallel_for(pool, nt, 1, peak_range, per);
        peak_all = 0;
        for (int i = 0; i < nt; i++) peak_all += per[i];
    }
    double t0 = now();
    for (int i = 0; i < 2000; i++) kn_parallel_for(pool, nt, 1, empty_range, NULL);
    double pf_us = (now() - t0) / 2000 * 1e6;
    printf("isa %s, %d threads, FMA peak %.1f GFLOP/s on one core, %.1f with all %d busy; empty parallel_for %.1f us\n",
           kn_sgemm_isa(), nt, peak1, peak_all, nt, pf_us);
    const char *filter = argc > 2 ? argv[2] : NULL;
    static const shape shapes[] = {
        {512, 512, 512, 0, 0, "square"},
        {512, 512, 512, 0, 1, "square transB"},
        {512, 512, 512, 1, 0, "square transA"},
        {1024, 1024, 1024, 0, 0, "square"},
        {256, 256, 256, 0, 0, "square"},
        {128, 128, 128, 0, 0, "square"},
        {8, 768, 768, 0, 0, "skinny"},
        {8, 768, 768, 0, 1, "skinny transB"},
        {32, 1152, 128, 0, 1, "field Gemm transB"},
        {400, 1152, 128, 0, 1, "field Gemm transB"},
        {64, 768, 768, 0, 0, "skinny"},
        {128, 768, 3072, 0, 0, "bert ffn1"},
        {128, 3072, 768, 0, 0, "bert ffn2"},
        {128, 768, 768, 0, 1, "bert transB"},
        {400, 1152, 1152, 0, 0, "skinny"},
        {400, 64, 400, 0, 0, "attn AV"},
        {400, 400, 64, 0, 1, "attn QK^T"},
        {1, 768, 768, 0, 0, "gemv"},
        {1, 1152, 1152, 0, 1, "gemv transB"},
        {768, 1, 768, 0, 0, "matvec"},
        {3136, 64, 576, 0, 0, "conv3x3 as gemm"},
    };
    int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    for (int s = 0; s < nshapes; s++) {
        const shape *sh = &shapes[s];
        if (filter && !strstr(sh->what, filter)) continue;
        int M = sh->M, N = sh->N, K = sh->K;
        int lda = sh->ta ? M : K, ldb = sh->tb ? K : N;
        float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
        float *C = malloc(sizeof(float) * M * N), *R = malloc(sizeof(float) * M * N);
        for (int i = 0; i < M * K; i++) A[i] = (float)((i * 7 % 13) - 6) / 7.0f;
        for (int i = 0; i < K * N; i++) B[i] = (float)((i * 5 % 11) - 5) / 5.0f;
        memset(C, 0, sizeof(float) * M * N);
        kn_sgemm(pool, sh->ta, sh->tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
        double flop = 2.0 * M * N * K;
        int reps = (int)(3e9 / flop / (nt * 0.5)) + 3;
        if (reps > 20000) reps = 20000;
        double best = 1e9;
        for (int r = 0; r < 5; r++) {
            double t0 = now();
            for (int i = 0; i < reps; i++) kn_sgemm(pool, sh->ta, sh->tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
            double t = (now() - t0) / reps;
            if (t < best) best = t;
        }
        double err = 0;
        if (flop < 3e9) {
            naive(sh->ta, sh->tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, R, N);
            for (int i = 0; i < M * N; i++) err = fmax(err, fabs(R[i] - C[i]) / (1 + fabs(R[i])));
        }
        double gf = flop / best * 1e-9;
        printf("%5d x %5d x %5d %c%c %-18s %9.1f us %8.1f GFLOP/s %5.1f%% of peak  err %.1e\n", M, N, K,
               sh->ta ? 'T' : 'N', sh->tb ? 'T' : 'N', sh->what, best * 1e6, gf,
               peak1 > 0 ? 100 * gf / peak_all : 0, err);
        free(A), free(B), free(C), free(R);
    }
    kn_threadpool_destroy(pool);
    return 0;
}

/* bf16 GEMM benchmark (precision=bf16, src/backend/cpu/sgemm_bf16.h): GFLOP/s of the bf16 GEMM
 * against kiln's fp32 sgemm on the same shapes, and the measured vdpbf16ps / FMA peaks. Each shape
 * runs three ways: fp32 with the weights (B, or A for "conv" shapes) prepacked as the MatMul and
 * Conv kernels keep them, bf16 with the weights prepacked in bf16 (what a precision=bf16 session
 * runs: the activations are rounded and packed in every call), and bf16 with both operands
 * converted in the call. Build (repository root):
 *   cc -O3 -march=native -Iinclude -Isrc bench/gemm_bf16_bench.c build/libkiln.a -lpng -ljpeg -lpthread -lm \
 *      -o /tmp/gemm_bf16_bench   (build/: a CMake build of the library)
 * run: /tmp/gemm_bf16_bench [threads] [shape filter] */
#include "backend/cpu/sgemm.h"
#include "backend/cpu/sgemm_bf16.h"
#include "util/threadpool.h"

#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int use_cpu_clock;
static double now(void) {
    struct timespec ts;
    clock_gettime(use_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double fma_peak(void) {
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps((float)i * 1e-3f);
    const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-4f);
    const long iters = 10000000;
    double t0 = now();
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
    double t = now() - t0;
    float s = 0;
    for (int i = 0; i < 16; i++) s += _mm512_reduce_add_ps(a[i]);
    if (s == 12345.f) printf(" ");
    return (double)iters * 16 * 32 / t * 1e-9;
}

/* vdpbf16ps: 16 lanes x 2 products x 2 flops per instruction */
__attribute__((target("avx512f,avx512bf16"))) static double bf16_peak(void) {
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
    const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = (__m512bh)_mm512_set1_epi32(0x3a003a00);
    const long iters = 10000000;
    double t0 = now();
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < 16; i++) a[i] = _mm512_dpbf16_ps(a[i], x, y);
    double t = now() - t0;
    float s = 0;
    for (int i = 0; i < 16; i++) s += _mm512_reduce_add_ps(a[i]);
    if (s == 12345.f) printf(" ");
    return (double)iters * 16 * 64 / t * 1e-9;
}

typedef struct {
    int M, N, K, ta, tb, weights_a;
    const char *what;
} shape;

static double timeit(void (*fn)(void *), void *arg, double flop, int nt) {
    fn(arg);
    int reps = (int)(2e9 / flop / nt) + 3;
    if (reps > 20000) reps = 20000;
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        for (int i = 0; i < reps; i++) fn(arg);
        double t = (now() - t0) / reps;
        if (t < best) best = t;
    }
    return flop / best * 1e-9;
}

typedef struct {
    kn_threadpool *pool;
    kn_sgemm_batch g;
    const uint16_t *const *a16, *const *b16;
    int bf16;
} call;

static void run_call(void *arg) {
    call *c = arg;
    if (c->bf16) kn_bgemm_run_prepacked(c->pool, &c->g, c->a16, c->b16);
    else kn_sgemm_run(c->pool, &c->g);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    const char *filter = argc > 2 ? argv[2] : NULL;
    kn_threadpool *pool = NULL;
    if (kn_threadpool_create(threads, &pool) != KILN_OK) return 1;
    const int nt = kn_threadpool_size(pool);
    use_cpu_clock = nt == 1;
    if (!kn_bf16_cpu_supported()) {
        printf("this CPU has no AVX512_BF16\n");
        return 0;
    }
    const double pf = fma_peak(), pb = bf16_peak();
    int mr, nr, kc;
    kn_bgemm_tile(&mr, &nr, &kc);
    printf("%d thread(s); one core: fp32 FMA peak %.1f GFLOP/s, vdpbf16ps peak %.1f GFLOP/s (%.2fx); bf16 tile %dx%d, slice %d\n",
           nt, pf, pb, pb / pf, mr, nr, kc);
    printf("| shape | M x N x K | fp32 GFLOP/s | bf16 GFLOP/s (weights kept) | bf16/fp32 | bf16 %% of %d-core peak | bf16, all converted per call |\n",
           nt);
    printf("| --- | --- | --- | --- | --- | --- | --- |\n");
    static const shape shapes[] = {
        {512, 512, 512, 0, 0, 0, "square"},
        {1024, 1024, 1024, 0, 0, 0, "square"},
        {128, 768, 768, 0, 0, 0, "bert qkv/out (MatMul)"},
        {128, 3072, 768, 0, 0, 0, "bert ffn1"},
        {128, 768, 3072, 0, 0, 0, "bert ffn2"},
        {197, 768, 768, 0, 1, 0, "vit proj (transB)"},
        {197, 3072, 768, 0, 0, 0, "vit mlp1"},
        {64, 3136, 576, 0, 0, 1, "resnet 3x3 64 @56x56 (conv: A = weights)"},
        {256, 3136, 64, 0, 0, 1, "resnet 1x1 64->256 @56x56"},
        {512, 196, 4608, 0, 0, 1, "resnet 3x3 512 @14x14"},
        {2048, 49, 512, 0, 0, 1, "resnet 1x1 512->2048 @7x7"},
        {16, 768, 768, 0, 0, 0, "16 rows"},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape *sh = &shapes[s];
        if (filter && !strstr(sh->what, filter)) continue;
        const int M = sh->M, N = sh->N, K = sh->K;
        const int lda = sh->ta ? M : K, ldb = sh->tb ? K : N;
        float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
        float *C = malloc(sizeof(float) * M * N), *R = malloc(sizeof(float) * M * N);
        for (int i = 0; i < M * K; i++) A[i] = (float)((i * 7 % 13) - 6) / 7.0f;
        for (int i = 0; i < K * N; i++) B[i] = (float)((i * 5 % 11) - 5) / 5.0f;
        const float *ap[1] = {A}, *bp[1] = {B};
        float *cp[1] = {C}, *rp[1] = {R};
        /* fp32, weights prepacked as the kernels keep them */
        float *wp32 = NULL;
        const float *wp32p[1];
        call f = {pool, {.count = 1, .M = M, .N = N, .K = K, .trans_a = sh->ta, .trans_b = sh->tb, .alpha = 1.0f,
                         .a = ap, .lda = lda, .b = bp, .ldb = ldb, .c = rp, .ldc = N}, NULL, NULL, 0};
        if (sh->weights_a && !kn_sgemm_swaps(M, N, K)) {
            wp32 = aligned_alloc(64, (sizeof(float) * kn_sgemm_packed_a_floats(M, K) + 63) / 64 * 64);
            kn_sgemm_pack_a(A, lda, sh->ta, M, K, wp32);
            wp32p[0] = wp32;
            f.g.a_packed = wp32p;
        } else if (sh->weights_a) {
            wp32 = aligned_alloc(64, (sizeof(float) * kn_sgemm_packed_b_floats(M, K) + 63) / 64 * 64);
            kn_sgemm_pack_b_full(A, lda, !sh->ta, M, K, wp32);
            wp32p[0] = wp32;
            f.g.at_packed = wp32p;
        } else {
            wp32 = aligned_alloc(64, (sizeof(float) * kn_sgemm_packed_b_floats(N, K) + 63) / 64 * 64);
            kn_sgemm_pack_b_full(B, ldb, sh->tb, N, K, wp32);
            wp32p[0] = wp32;
            f.g.b_packed = wp32p;
        }
        const double flop = 2.0 * M * N * K;
        const double g32 = timeit(run_call, &f, flop, nt);
        /* bf16 with the weights kept in bf16 */
        uint16_t *w16 = NULL;
        const uint16_t *w16p[1];
        call h = {pool, {.count = 1, .M = M, .N = N, .K = K, .trans_a = sh->ta, .trans_b = sh->tb, .alpha = 1.0f,
                         .a = ap, .lda = lda, .b = bp, .ldb = ldb, .c = cp, .ldc = N}, NULL, NULL, 1};
        if (sh->weights_a) {
            w16 = aligned_alloc(64, (2 * kn_bgemm_packed_a_elems(M, N, K) + 63) / 64 * 64);
            kn_bgemm_pack_a(A, lda, sh->ta, M, N, K, w16);
            w16p[0] = w16;
            h.a16 = w16p;
        } else {
            w16 = aligned_alloc(64, (2 * kn_bgemm_packed_b_elems(N, K) + 63) / 64 * 64);
            kn_bgemm_pack_b(B, ldb, sh->tb, N, K, w16);
            w16p[0] = w16;
            h.b16 = w16p;
        }
        const double g16 = timeit(run_call, &h, flop, nt);
        /* accuracy of this run against fp32 */
        double num = 0, den = 0;
        for (int i = 0; i < M * N; i++) num += (double)(C[i] - R[i]) * (C[i] - R[i]), den += (double)R[i] * R[i];
        call h2 = h;
        h2.a16 = h2.b16 = NULL;
        const double g16c = timeit(run_call, &h2, flop, nt);
        printf("| %s | %dx%dx%d | %.1f | %.1f | %.2f | %.0f%% | %.1f |   (rel L2 vs fp32 %.1e)\n", sh->what, M, N, K, g32,
               g16, g16 / g32, 100.0 * g16 / (pb * nt), g16c, sqrt(num / (den + 1e-30)));
        free(A), free(B), free(C), free(R), free(wp32), free(w16);
    }
    kn_threadpool_destroy(pool);
    return 0;
}

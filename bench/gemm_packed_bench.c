/* The GEMM as kiln's MatMul/FusedMatMul runs a product with constant weights: B packed whole once
 * (kn_sgemm_pack_b_full, kn_sgemm_batch.b_packed), A the activations. Transformer shapes (ViT-B/16
 * at 197 tokens, BERT-base at 128), GFLOP/s against the one-core FMA peak. The weights of
 * consecutive calls rotate over `copies` packed copies, so that B comes from memory as it does in a
 * model (ViT-B/16 holds 340 MB of weights); A and C stay the same, as the previous layer leaves
 * them in cache. Build by hand from the repository root (KC etc. may be overridden with -D):
 *   cc -O3 -march=native -Iinclude -Isrc bench/gemm_packed_bench.c src/backend/cpu/sgemm.c \
 *      src/util/threadpool.c src/util/status.c src/util/thread_buffer.c -lpthread -lm \
 *      -o /tmp/gemm_packed_bench
 *   /tmp/gemm_packed_bench [threads] [filter] [copies]
 * One thread: the thread's CPU time; more: wall time. Prints the median of 11 rounds.
 * A/B in one process: compile another sgemm.c to an object whose kn_sgemm_* symbols are renamed
 * kn_sgemm_*_base, build with -DGPB_AB, and each shape alternates the two round by round (ABBA);
 * the ratio is the median of the rounds' new/base. From the repository root, OLD.c being the old
 * src/backend/cpu/sgemm.c (git show REV:src/backend/cpu/sgemm.c > /tmp/OLD.c):
 *   cc -O3 -march=native -Iinclude -Isrc -c /tmp/OLD.c -o /tmp/old.o
 *   for s in kn_sgemm_nr kn_sgemm_isa kn_sgemm_packed_a_floats kn_sgemm_pack_a kn_sgemm_packed_b_floats \
 *            kn_sgemm_pack_b_full kn_sgemm_swaps kn_sgemm_run kn_sgemm; do echo "$s ${s}_base"; done > /tmp/syms
 *   objcopy --redefine-syms=/tmp/syms /tmp/old.o /tmp/old_r.o
 *   cc -O3 -march=native -DGPB_AB -Iinclude -Isrc bench/gemm_packed_bench.c src/backend/cpu/sgemm.c \
 *      /tmp/old_r.o src/util/threadpool.c src/util/status.c src/util/thread_buffer.c -lpthread -lm -o /tmp/gpb_ab
 *   /tmp/gpb_ab 1 "" 16 */
#include "backend/cpu/sgemm.h"
#include "backend/cpu/sgemm_bf16.h"
#include "util/threadpool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

/* fp32 only: the bf16 GEMM's entry points, never taken */
bool kn_bgemm_active(void) { return false; }
bool kn_bgemm_takes(const kn_sgemm_batch *p) { return (void)p, false; }
kiln_status kn_bgemm_run(kn_threadpool *pool, const kn_sgemm_batch *p) { return (void)pool, (void)p, KILN_ERR_INTERNAL; }

#ifdef GPB_AB
kiln_status kn_sgemm_run_base(kn_threadpool *pool, const kn_sgemm_batch *p);
void kn_sgemm_pack_b_full_base(const float *B, int64_t ldb, bool trans_b, int64_t N, int64_t K, float *dst);
size_t kn_sgemm_packed_b_floats_base(int64_t N, int64_t K);
#endif

#define ROUNDS 11

static int use_cpu_clock;
static double now(void) {
    struct timespec ts;
    clock_gettime(use_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    int M, N, K;
    const char *what;
} shape;

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    const char *filter = argc > 2 && *argv[2] ? argv[2] : NULL;
    int copies = argc > 3 ? atoi(argv[3]) : 16;
    if (copies < 1) copies = 1;
    kn_threadpool *pool = NULL;
    if (kn_threadpool_create(threads, &pool) != KILN_OK) return 1;
    use_cpu_clock = kn_threadpool_size(pool) == 1;
    static const shape shapes[] = {
        {197, 2304, 768, "vit qkv"},   {197, 768, 768, "vit proj"},  {197, 3072, 768, "vit fc1"},
        {197, 768, 3072, "vit fc2"},   {128, 2304, 768, "bert qkv"}, {128, 768, 768, "bert proj"},
        {128, 3072, 768, "bert fc1"},  {128, 768, 3072, "bert fc2"},
    };
    printf("isa %s, %d threads, %d copies of B\n", kn_sgemm_isa(), kn_threadpool_size(pool), copies);
    double total = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape *sh = &shapes[s];
        if (filter && !strstr(sh->what, filter)) continue;
        const int M = sh->M, N = sh->N, K = sh->K;
        float *A = malloc(sizeof(float) * (size_t)M * K), *B = malloc(sizeof(float) * (size_t)K * N);
        float *C = malloc(sizeof(float) * (size_t)M * N);
        const size_t pf = kn_sgemm_packed_b_floats(N, K);
        const size_t bbytes = (sizeof(float) * pf * (size_t)copies + (2u << 20) - 1) / (2u << 20) * (2u << 20);
        float *Bp = aligned_alloc(2u << 20, bbytes);
        if (getenv("GPB_HUGE")) madvise(Bp, bbytes, MADV_HUGEPAGE);
        for (int i = 0; i < M * K; i++) A[i] = (float)((i * 7 % 13) - 6) / 7.0f;
        for (int i = 0; i < K * N; i++) B[i] = (float)((i * 5 % 11) - 5) / 5.0f;
        for (int c = 0; c < copies; c++) kn_sgemm_pack_b_full(B, N, false, N, K, Bp + pf * (size_t)c);
        const float *a1[1] = {A}, *b1[1] = {B};
        float *c1[1] = {C};
        const float *p1[1] = {Bp};
        kn_sgemm_batch g = {.count = 1, .M = M, .N = N, .K = K, .alpha = 1.0f, .a = a1, .lda = K, .b = b1,
                            .ldb = N, .c = c1, .ldc = N, .b_packed = p1};
        /* check one element row against a double product */
        kn_sgemm_run(pool, &g);
        double err = 0;
        for (int i = 0; i < M; i += 37)
            for (int j = 0; j < N; j += 13) {
                double r = 0;
                for (int k = 0; k < K; k++) r += (double)A[i * K + k] * B[k * N + j];
                err = fmax(err, fabs(r - C[i * N + j]) / (1 + fabs(r)));
            }
        const double flop = 2.0 * M * N * K;
        int reps = (int)(5e9 / flop) + 2;
        double t[ROUNDS];
        int c = 0;
#ifdef GPB_AB
        const size_t pfb = kn_sgemm_packed_b_floats_base(N, K);
        const size_t qbytes = (sizeof(float) * pfb * (size_t)copies + (2u << 20) - 1) / (2u << 20) * (2u << 20);
        float *Bq = aligned_alloc(2u << 20, qbytes); /* aligned as Bp is */
        for (int q = 0; q < copies; q++) kn_sgemm_pack_b_full_base(B, N, false, N, K, Bq + pfb * (size_t)q);
        double tb[ROUNDS], ratio[ROUNDS];
        int cb = 0;
        for (int r = 0; r < ROUNDS; r++) {
            /* A B, then B A: neither build always runs right after the other */
            for (int h = 0; h < 2; h++) {
                const int base_now = (h == 0) == (r % 2 == 0);
                double t0 = now();
                for (int i = 0; i < reps; i++) {
                    if (base_now) {
                        p1[0] = Bq + pfb * (size_t)(cb++ % copies);
                        kn_sgemm_run_base(pool, &g);
                    } else {
                        p1[0] = Bp + pf * (size_t)(c++ % copies);
                        kn_sgemm_run(pool, &g);
                    }
                }
                if (base_now) tb[r] = (now() - t0) / reps;
                else t[r] = (now() - t0) / reps;
            }
            ratio[r] = t[r] / tb[r];
        }
        qsort(tb, ROUNDS, sizeof tb[0], cmp);
        qsort(ratio, ROUNDS, sizeof ratio[0], cmp);
        free(Bq);
#else
        for (int r = 0; r < ROUNDS; r++) {
            double t0 = now();
            for (int i = 0; i < reps; i++) {
                p1[0] = Bp + pf * (size_t)(c++ % copies);
                kn_sgemm_run(pool, &g);
            }
            t[r] = (now() - t0) / reps;
        }
#endif
        qsort(t, ROUNDS, sizeof t[0], cmp);
        total += t[ROUNDS / 2];
        printf("%5d x %5d x %5d %-10s %8.1f us %7.1f GFLOP/s  (min %.1f us)  err %.1e", M, N, K, sh->what,
               t[ROUNDS / 2] * 1e6, flop / t[ROUNDS / 2] * 1e-9, t[0] * 1e6, err);
#ifdef GPB_AB
        printf("  base %8.1f us  new/base %.3f", tb[ROUNDS / 2] * 1e6, ratio[ROUNDS / 2]);
#endif
        printf("\n");
        free(A), free(B), free(C), free(Bp);
    }
    printf("sum of medians %.1f us\n", total * 1e6);
    kn_threadpool_destroy(pool);
    return 0;
}

/* Conv benchmark: GFLOP/s of the CPU Conv kernel on common CNN layer shapes (batch 1), next to
 * the GEMM rate for the same FLOPs. Build by hand after building the library:
 *   cc -O2 -march=native -Iinclude -Isrc bench/conv_bench.c build-linalg/libkiln.a -lpthread -lm \
 *      -o /tmp/conv_bench && /tmp/conv_bench [threads] */
#include "backend/cpu/linalg_impl.h"
#include "util/threadpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* With one thread the clock is the thread's CPU time, so other processes on a shared machine do
 * not inflate the result; with more, wall time (what a caller waits). */
static int use_cpu_clock;
static double now(void) {
    struct timespec ts;
    clock_gettime(use_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct { int64_t C, H, W, M, K, S, P, G; const char *what; } layer;

int main(int argc, char **argv) {
    kn_threadpool *pool;
    if (kn_threadpool_create(argc > 1 ? atoi(argv[1]) : 0, &pool)) return 1;
    static const layer layers[] = {
        {3, 224, 224, 64, 7, 2, 3, 1, "resnet conv1 7x7/2"},
        {64, 56, 56, 64, 3, 1, 1, 1, "resnet 3x3"},
        {64, 56, 56, 256, 1, 1, 0, 1, "resnet 1x1 expand"},
        {256, 56, 56, 64, 1, 1, 0, 1, "resnet 1x1 reduce"},
        {128, 56, 56, 128, 3, 2, 1, 1, "resnet 3x3/2"},
        {256, 14, 14, 256, 3, 1, 1, 1, "resnet 3x3 14x14"},
        {512, 7, 7, 512, 3, 1, 1, 1, "resnet 3x3 7x7"},
        {144, 56, 56, 144, 3, 1, 1, 144, "mobilenet dw 3x3"},
        {144, 56, 56, 144, 3, 2, 1, 144, "mobilenet dw 3x3/2"},
        {128, 1, 400, 128, 3, 1, 1, 1, "1-D conv k3 (as 2-D)"},
    };
    use_cpu_clock = kn_threadpool_size(pool) == 1;
    printf("%d threads (%s time)\n", kn_threadpool_size(pool), use_cpu_clock ? "CPU" : "wall");
    for (size_t li = 0; li < sizeof layers / sizeof layers[0]; li++) {
        const layer *L = &layers[li];
        bool one_d = L->H == 1;
        int rank = one_d ? 3 : 4;
        int64_t OH = (L->H + 2 * (one_d ? 0 : L->P) - (one_d ? 1 : L->K)) / (one_d ? 1 : L->S) + 1;
        int64_t OW = (L->W + 2 * L->P - L->K) / L->S + 1;
        int64_t xd[4] = {1, L->C, L->H, L->W}, wd[4] = {L->M, L->C / L->G, L->K, L->K}, yd[4] = {1, L->M, OH, OW};
        if (one_d) {
            xd[2] = L->W, wd[2] = L->K, yd[2] = OW;
        }
        kn_tensor *X, *W, *Y;
        kn_tensor_new(KILN_DTYPE_FLOAT, rank, xd, &X);
        kn_tensor_new(KILN_DTYPE_FLOAT, rank, wd, &W);
        kn_tensor_new(KILN_DTYPE_FLOAT, rank, yd, &Y);
        for (int64_t i = 0; i < kn_tensor_count(X); i++) ((float *)X->data)[i] = (float)(i % 7) * 0.1f;
        for (int64_t i = 0; i < kn_tensor_count(W); i++) ((float *)W->data)[i] = (float)(i % 5) * 0.1f;
        int nsp = rank - 2;
        int64_t pads[4] = {L->P, L->P, L->P, L->P}, strides[2] = {L->S, L->S};
        kn_attr attrs[3];
        memset(attrs, 0, sizeof attrs);
        attrs[0] = (kn_attr){.name = "pads", .type = KN_ATTR_INTS, .n = 2 * nsp, .ints = pads};
        attrs[1] = (kn_attr){.name = "strides", .type = KN_ATTR_INTS, .n = nsp, .ints = strides};
        attrs[2] = (kn_attr){.name = "group", .type = KN_ATTR_INT, .i = L->G};
        kn_node node = {.name = "c", .op_type = "Conv", .domain = "", .opset = 11, .attrs = attrs, .n_attrs = 3};
        kn_tensor *ins[2] = {X, W}, *outs[1] = {Y};
        kn_kernel_ctx ctx = {.node = &node, .n_inputs = 2, .in = ins, .n_outputs = 1, .out = outs, .pool = pool};
        if (kn_cpu_conv(&ctx)) {
            printf("%s: %s\n", L->what, kiln_last_error());
            continue;
        }
        double flop = 2.0 * L->M * OH * OW * (L->C / L->G) * (one_d ? L->K : L->K * L->K);
        int reps = (int)(2e9 / flop) + 2;
        double best = 1e9;
        for (int r = 0; r < 5; r++) {
            double t0 = now();
            for (int i = 0; i < reps; i++) kn_cpu_conv(&ctx);
            double t = (now() - t0) / reps;
            if (t < best) best = t;
        }
        printf("%-24s C=%4lld %3lldx%-3lld M=%4lld k=%lld s=%lld g=%-4lld %9.1f us %7.1f GFLOP/s\n", L->what,
               (long long)L->C, (long long)L->H, (long long)L->W, (long long)L->M, (long long)L->K, (long long)L->S,
               (long long)L->G, best * 1e6, flop / best * 1e-9);
        kn_tensor_free(X), kn_tensor_free(W), kn_tensor_free(Y);
    }
    kn_threadpool_destroy(pool);
    return 0;
}

/* Outputs in a caller's buffer 0-15 floats past a 64-byte boundary (numpy's buffers are often 16 or
 * 32 bytes past one): the AVX-512 float loops of Exp, Sigmoid, Tanh (elementwise_unary.c's masked
 * head up to the output's line) and the last pass of Softmax / LogSoftmax rows longer than 1024
 * (nn_softmax.c's rows_chain16) start differently there. Each offset must give the same bits as the
 * 64-byte aligned output, at 1 and 2 threads, and the values must be within the operators' accuracy
 * of a double-precision definition. */
#include "test_model_builder.h"
#include "util/aligned.h"
#include "unit.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* op on x (rank 2, dims d) into out (a caller's tensor over buf), threads threads */
static kiln_status ua_run(const char *op, const int64_t *d, const float *x, int threads, float *buf) {
    tmb b;
    tmb_init_onnx(&b, 13);
    const int in = tmb_input(&b, "i0", KILN_DTYPE_FLOAT, 2, d, NULL);
    const int node = tmb_node_outputs(&b, op, &in, 1, 1);
    (void)node;
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);
    if (!data) return KILN_ERR_INTERNAL;
    kiln_session *s = tmb_session(data, size, threads, 3);
    free(data);
    if (!s) return KILN_ERR_INTERNAL;
    kiln_tensor *t = tmb_tensor_of(KILN_DTYPE_FLOAT, d, 2, x), *out = NULL;
    const char *names[1] = {"i0"};
    kiln_status st = kiln_tensor_wrap(KILN_DTYPE_FLOAT, d, 2, buf, sizeof(float) * (size_t)(d[0] * d[1]), &out);
    if (st == KILN_OK) st = kiln_session_run_into(s, names, &t, 1, NULL, 1, &out);
    kiln_tensor_destroy(t);
    kiln_tensor_destroy(out);
    kiln_session_destroy(s);
    return st;
}

/* the definition in double of element (r, c) */
static double ua_ref(const char *op, const float *x, int64_t cols, int64_t r, int64_t c) {
    const double v = x[r * cols + c];
    if (!strcmp(op, "Exp")) return exp(v);
    if (!strcmp(op, "Sigmoid")) return 1.0 / (1.0 + exp(-v));
    if (!strcmp(op, "Tanh")) return tanh(v);
    double m = -INFINITY, s = 0;
    for (int64_t k = 0; k < cols; k++) m = fmax(m, x[r * cols + k]);
    for (int64_t k = 0; k < cols; k++) s += exp((double)x[r * cols + k] - m);
    return !strcmp(op, "Softmax") ? exp(v - m) / s : (v - m) - log(s);
}

KN_TEST(cpu_unaligned_outputs_same_bits_and_accuracy) {
    const char *ops[] = {"Exp", "Sigmoid", "Tanh", "Softmax", "LogSoftmax"};
    const int64_t shapes[][2] = {{3, 2000}, {2, 1500}, {5, 77}, {1, 1000}, {7, 33}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t *d = shapes[si], n = d[0] * d[1];
        float *x = malloc(sizeof(float) * (size_t)n);
        uint32_t z = 12345u + (uint32_t)si;
        for (int64_t i = 0; i < n; i++) {
            z = z * 1664525u + 1013904223u;
            x[i] = ((float)(z >> 8) / 16777216.0f - 0.5f) * 24.0f; /* [-12, 12) */
        }
        float *raw = kn_aligned_alloc(64, sizeof(float) * (size_t)(n + 64)), *want = malloc(sizeof(float) * (size_t)n);
        for (size_t oi = 0; oi < sizeof ops / sizeof ops[0]; oi++) {
            const char *op = ops[oi];
            CHECK_STATUS(ua_run(op, d, x, 1, raw), KILN_OK);
            memcpy(want, raw, sizeof(float) * (size_t)n);
            double worst = 0;
            for (int64_t r = 0; r < d[0]; r++)
                for (int64_t c = 0; c < d[1]; c++) {
                    const double ref = ua_ref(op, x, d[1], r, c), got = want[r * d[1] + c];
                    /* Softmax and the activations: relative (a few ulp; exp's reduction at |x| = 12);
                     * LogSoftmax: absolute against its magnitude (x - max - log sum, float rounding) */
                    const double err = !strcmp(op, "LogSoftmax") ? fabs(got - ref) / (fabs(ref) + 1.0)
                                                                 : fabs(got - ref) / fmax(fabs(ref), 1e-30);
                    if (err > worst) worst = err;
                }
            CHECK_MSG(worst <= 2e-6, "%s %lldx%lld: error %g against double", op, (long long)d[0], (long long)d[1], worst);
            for (int threads = 1; threads <= 2; threads++)
                for (int off = 0; off < 16; off++) {
                    float *buf = raw + off;
                    memset(buf, 0xAB, sizeof(float) * (size_t)n);
                    CHECK_STATUS(ua_run(op, d, x, threads, buf), KILN_OK);
                    CHECK_MSG(!memcmp(buf, want, sizeof(float) * (size_t)n),
                              "%s %lldx%lld: output %d floats past a line, %d threads: other bits than aligned", op,
                              (long long)d[0], (long long)d[1], off, threads);
                }
        }
        free(x);
        free(raw);
        free(want);
    }
}

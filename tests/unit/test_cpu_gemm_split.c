/* How the float GEMM splits its work at many threads (sgemm.c): a transposed product's tiles in
 * parts along K where its panels of rows are few (swap_kparts: 3x3 512 -> 512 on a 4x4 plane made
 * 16 tasks, one a thread at 16), and batched products' tile grids spread evenly over the threads
 * (attention's 12 heads made 24 tiles at 16 threads, 8 threads running two and 8 one). Through
 * kn_sgemm_run on pools of 1, 3 and 16 threads (the split's plan checked first: parts of K, tasks
 * a multiple of the threads) and through whole sessions (Conv, Einsum) at 1, 3 and 16 threads,
 * each output against the definition in double, and every thread count's output the same bits
 * as 1 thread's (the parts along K are a function of the shape, summed in their order). */
#include "backend/cpu/sgemm.h"
#include "test_model_builder.h"
#include "test_pack_b.h"
#include "unit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int gs_threads[3] = {1, 3, 16};

/* A float32 sum of K terms against the double one: a wrong part is off by O(1) */
static double gs_tol(int64_t K) { return 1e-5 + 2e-7 * (double)K; }

/* The transposed path with its tiles split along K (forced transposed: AVX2's rule leaves these
 * shapes to the usual path): op(B) from a packing callback (a convolution's im2col) and op(A)^T
 * prepacked (constant weights), or both plain; a row bias, beta, a Relu as C is stored. */
KN_TEST(cpu_sgemm_transposed_k_parts_threads) {
    setenv("KILN_GEMM_SWAP", "1", 1);
    static const int64_t shapes[][4] = {
        {1, 512, 16, 4608}, /* 3x3 512 -> 512 on 4x4 */
        {1, 96, 16, 4096},  /* 16 slices of KC in 4 parts */
        {1, 160, 7, 2000},  /* K not a multiple of KC: a short last part */
        {2, 100, 20, 3000}, /* two products, rows not a multiple of the panels */
        {1, 64, 3, 1100},   /* 5 slices: one part (each part at least 4 slices) */
    };
    kn_threadpool *pools[3] = {NULL, NULL, NULL};
    for (int t = 1; t < 3; t++) CHECK_STATUS(kn_threadpool_create(gs_threads[t], &pools[t]), KILN_OK);
    int split = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int v = 0; v < 2; v++) {
            const int64_t cnt = shapes[s][0], M = shapes[s][1], N = shapes[s][2], K = shapes[s][3];
            const int64_t lda = K + 3, ldb = N + 5, ldc = N + 7;
            uint32_t seed = 77u + (uint32_t)s;
            float *A = malloc(sizeof(float) * (size_t)(cnt * M * lda)), *B = malloc(sizeof(float) * (size_t)(cnt * K * ldb));
            float *C0 = malloc(sizeof(float) * (size_t)(cnt * M * ldc)), *C = malloc(sizeof(float) * (size_t)(cnt * M * ldc));
            float *bias = malloc(sizeof(float) * (size_t)M), *AT = malloc(sizeof(float) * kn_sgemm_packed_b_floats(M, K) * (size_t)cnt);
            double *R = malloc(sizeof(double) * (size_t)(cnt * M * N));
            for (int64_t i = 0; i < cnt * M * lda; i++) A[i] = tmb_rand(&seed);
            for (int64_t i = 0; i < cnt * K * ldb; i++) B[i] = tmb_rand(&seed);
            for (int64_t i = 0; i < M; i++) bias[i] = tmb_rand(&seed);
            for (int64_t i = 0; i < cnt * M * ldc; i++) C0[i] = tmb_rand(&seed);
            const float beta = v ? 0.0f : 0.5f;
            for (int64_t q = 0; q < cnt; q++)
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double acc = 0;
                        for (int64_t k = 0; k < K; k++)
                            acc += (double)A[(q * M + i) * lda + k] * (double)B[(q * K + k) * ldb + j];
                        acc += (double)bias[i] + (double)beta * (double)C0[(q * M + i) * ldc + j];
                        R[(q * M + i) * N + j] = v ? fmax(acc, 0.0) : acc;
                    }
            const float *ap[2], *bp[2], *atp[2], *rb[2] = {bias, bias};
            float *cp[2];
            tpb_plain ppc[2];
            for (int64_t q = 0; q < cnt; q++) {
                ap[q] = A + q * M * lda, bp[q] = B + q * K * ldb, cp[q] = C + q * M * ldc;
                atp[q] = AT + (size_t)q * kn_sgemm_packed_b_floats(M, K);
                kn_sgemm_pack_b_full(ap[q], lda, true, M, K, (float *)atp[q]);
                ppc[q] = (tpb_plain){bp[q], ldb};
            }
            float *first = malloc(sizeof(float) * (size_t)(cnt * M * ldc));
            for (int t = 0; t < 3; t++) {
                memcpy(C, C0, sizeof(float) * (size_t)(cnt * M * ldc));
                kn_sgemm_batch g = {.count = cnt, .M = M, .N = N, .K = K, .alpha = 1.0f, .beta = beta, .a = ap,
                                    .lda = lda, .b = bp, .ldb = ldb, .c = cp, .ldc = ldc, .row_bias = rb};
                if (v == 0) {
                    /* the convolution's way: the weights prepacked, the im2col by a callback (one
                     * context for every product: one product only) */
                    g.at_packed = atp;
                    if (cnt == 1) {
                        g.b = NULL;
                        g.pack_b = tpb_pack_plain;
                        g.pack_ctx = &ppc[0];
                    }
                } else {
                    g.clamp = true; /* a Relu as C is stored */
                    g.clamp_lo = 0.0f;
                    g.clamp_hi = INFINITY;
                }
                int64_t tm, tn, kp;
                const int64_t tasks = kn_sgemm_tasks(&g, gs_threads[t], &tm, &tn, &kp);
                const int64_t panels = cnt * ((M + kn_sgemm_nr() - 1) / kn_sgemm_nr()), slices = (K + 255) / 256;
                /* parts where the row panels are fewer than 32 and K has 8+ slices of 256 */
                const bool want_parts = panels < 32 && slices >= 8;
                CHECK_MSG(want_parts ? kp >= 2 : kp == 1, "%lldx%lldx%lld x%lld at %d threads: %lld parts of K",
                          (long long)M, (long long)N, (long long)K, (long long)cnt, gs_threads[t], (long long)kp);
                /* the 4x4 convolution's (AVX-512: 16 panels of 32 rows, 2 parts): 2 tasks a thread */
                if (gs_threads[t] == 16 && want_parts && s == 0)
                    CHECK_MSG(tasks >= 32, "%lldx%lldx%lld at 16 threads: %lld tasks", (long long)M, (long long)N,
                              (long long)K, (long long)tasks);
                split += kp > 1;
                CHECK_STATUS(kn_sgemm_run(pools[t], &g), KILN_OK);
                double err = 0;
                for (int64_t q = 0; q < cnt; q++)
                    for (int64_t i = 0; i < M; i++) {
                        for (int64_t j = 0; j < N; j++) {
                            const double r = R[(q * M + i) * N + j], d = fabs((double)C[(q * M + i) * ldc + j] - r) / (1.0 + fabs(r));
                            if (!(d <= err)) err = isnan(d) ? 1e9 : d;
                        }
                        for (int64_t j = N; j < ldc; j++) /* the padding between rows is untouched */
                            if (C[(q * M + i) * ldc + j] != C0[(q * M + i) * ldc + j]) err = 1e9;
                    }
                CHECK_MSG(err < gs_tol(K), "transposed %lldx%lldx%lld x%lld variant %d, %d threads: error %g",
                          (long long)M, (long long)N, (long long)K, (long long)cnt, v, gs_threads[t], err);
                if (t == 0) memcpy(first, C, sizeof(float) * (size_t)(cnt * M * ldc));
                else
                    CHECK_MSG(!memcmp(first, C, sizeof(float) * (size_t)(cnt * M * ldc)),
                              "transposed %lldx%lldx%lld variant %d: %d threads' C differs from 1 thread's", (long long)M,
                              (long long)N, (long long)K, v, gs_threads[t]);
            }
            free(A), free(B), free(C0), free(C), free(bias), free(AT), free(R), free(first);
        }
    CHECK_MSG(split > 0, "no case split its K");
    unsetenv("KILN_GEMM_SWAP");
    for (int t = 1; t < 3; t++) kn_threadpool_destroy(pools[t]);
}

/* Batched products (Einsum's and attention's heads): at 16 threads the tasks a multiple of the
 * threads where the tiles allow, and the products right and the same bits at 1, 3 and 16. */
KN_TEST(cpu_sgemm_batch_spread_threads) {
    static const int64_t shapes[][4] = {
        {12, 128, 64, 128}, /* bhqk,bhkd->bhqd */
        {12, 128, 128, 64}, /* bhqd,bhkd->bhqk (B transposed) */
        {8, 96, 80, 64},    /* bkm,bkn->bmn */
        {5, 70, 50, 90},    /* odd count, rows and columns past the panels */
    };
    kn_threadpool *pools[3] = {NULL, NULL, NULL};
    for (int t = 1; t < 3; t++) CHECK_STATUS(kn_threadpool_create(gs_threads[t], &pools[t]), KILN_OK);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t cnt = shapes[s][0], M = shapes[s][1], N = shapes[s][2], K = shapes[s][3];
        const bool tb = s == 1;
        uint32_t seed = 99u + (uint32_t)s;
        float *A = malloc(sizeof(float) * (size_t)(cnt * M * K)), *B = malloc(sizeof(float) * (size_t)(cnt * K * N));
        float *C = malloc(sizeof(float) * (size_t)(cnt * M * N)), *first = malloc(sizeof(float) * (size_t)(cnt * M * N));
        for (int64_t i = 0; i < cnt * M * K; i++) A[i] = tmb_rand(&seed);
        for (int64_t i = 0; i < cnt * K * N; i++) B[i] = tmb_rand(&seed);
        const float *ap[12], *bp[12];
        float *cp[12];
        for (int64_t q = 0; q < cnt; q++) ap[q] = A + q * M * K, bp[q] = B + q * K * N, cp[q] = C + q * M * N;
        kn_sgemm_batch g = {.count = cnt, .M = M, .N = N, .K = K, .trans_b = tb, .alpha = 1.0f, .a = ap, .lda = K,
                            .b = bp, .ldb = tb ? K : N, .c = cp, .ldc = N};
        int64_t tm, tn, kp;
        const int64_t t16 = kn_sgemm_tasks(&g, 16, &tm, &tn, &kp);
        if (s < 2) /* 12 heads: 48 tiles, 3 a thread */
            CHECK_MSG(t16 % 16 == 0, "%lld products of %lldx%lldx%lld: %lld tasks at 16 threads (%lld x %lld a product)",
                      (long long)cnt, (long long)M, (long long)N, (long long)K, (long long)t16, (long long)tm, (long long)tn);
        for (int t = 0; t < 3; t++) {
            memset(C, 0xff, sizeof(float) * (size_t)(cnt * M * N)); /* NaN: beta 0 never reads it */
            CHECK_STATUS(kn_sgemm_run(pools[t], &g), KILN_OK);
            double err = 0;
            for (int64_t q = 0; q < cnt; q++)
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double r = 0;
                        for (int64_t k = 0; k < K; k++)
                            r += (double)A[q * M * K + i * K + k] * (double)(tb ? B[q * K * N + j * K + k] : B[q * K * N + k * N + j]);
                        const double d = fabs((double)C[(q * M + i) * N + j] - r) / (1.0 + fabs(r));
                        if (!(d <= err)) err = isnan(d) ? 1e9 : d;
                    }
            CHECK_MSG(err < gs_tol(K), "%lld products of %lldx%lldx%lld, %d threads: error %g", (long long)cnt, (long long)M,
                      (long long)N, (long long)K, gs_threads[t], err);
            if (t == 0) memcpy(first, C, sizeof(float) * (size_t)(cnt * M * N));
            else
                CHECK_MSG(!memcmp(first, C, sizeof(float) * (size_t)(cnt * M * N)),
                          "%lld products of %lldx%lldx%lld: %d threads' C differs from 1 thread's", (long long)cnt,
                          (long long)M, (long long)N, (long long)K, gs_threads[t]);
        }
        free(A), free(B), free(C), free(first);
    }
    for (int t = 1; t < 3; t++) kn_threadpool_destroy(pools[t]);
}

/* Runs the serialised model at 1, 3 and 16 threads on its inputs and checks its one output against
 * want (within 1e-6 + 5e-6 * scale, scale: the sum of |terms|), and each thread count's the same
 * bits as 1 thread's. */
static void gs_check_sessions(const unsigned char *data, size_t size, const char *const *names, kiln_tensor *const *ins,
                              size_t n_in, const double *want, const double *scale, size_t ny, const char *what) {
    kiln_tensor *first = NULL;
    for (int t = 0; t < 3; t++) {
        kiln_session *s = tmb_session(data, size, gs_threads[t], 3);
        if (!s) continue;
        char ctx[160];
        snprintf(ctx, sizeof ctx, "%s, %d threads", what, gs_threads[t]);
        tmb_check_runs(s, names, ins, n_in, want, scale, ny, 1e-6, 5e-6, ctx);
        kiln_tensor *y = NULL;
        CHECK_STATUS(kiln_session_run(s, names, ins, n_in, NULL, 1, &y), KILN_OK);
        if (t == 0) first = y;
        else {
            CHECK_MSG(tmb_same_tensor(first, y), "%s: %d threads' output differs from 1 thread's", what, gs_threads[t]);
            kiln_tensor_destroy(y);
        }
        kiln_session_destroy(s);
    }
    kiln_tensor_destroy(first);
}

/* Whole sessions: 3x3 convolutions of many channels on tiny planes (the transposed GEMM's K in
 * parts on AVX-512: 512 -> 512 on 4x4 and 2x2; 256 -> 256 on 4x4, K of 9 slices, in 2) with a
 * bias, and attention's Einsum products of 12 heads, at 1, 3 and 16 threads. */
KN_TEST(cpu_gemm_split_sessions_threads) {
    static const int64_t convs[][3] = {{512, 4, 512}, {512, 2, 512}, {256, 4, 256}}; /* C, H = W, M */
    for (size_t c = 0; c < sizeof convs / sizeof convs[0]; c++) {
        const int64_t C = convs[c][0], H = convs[c][1], M = convs[c][2];
        tmb b;
        tmb_init(&b, 13);
        const int64_t xd[4] = {1, C, H, H}, wd[4] = {M, C, 3, 3}, bd[1] = {M};
        const int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, xd, NULL);
        const int w = tmb_const(&b, "w", 4, wd, 0.05f), bias = tmb_const(&b, "bias", 1, bd, 1.0f);
        float *wv = malloc(sizeof(float) * (size_t)(M * C * 9)), *bv = malloc(sizeof(float) * (size_t)M);
        memcpy(wv, b.g->values[w].constant->data, sizeof(float) * (size_t)(M * C * 9));
        memcpy(bv, b.g->values[bias].constant->data, sizeof(float) * (size_t)M);
        const int y = tmb_value(&b, "y");
        tmb_conv2d(&b, tmb_node(&b, "Conv", (int[]){x, w, bias}, 3, y), 3, 1, 1, 1);
        tmb_output(&b, y);
        size_t size;
        unsigned char *data = tmb_finish(&b, &size);
        uint32_t seed = 5u + (uint32_t)c;
        kiln_tensor *xt = tmb_random_tensor(xd, 4, &seed, 1.0f, 1.0f);
        const size_t ny = (size_t)(M * H * H);
        double *want = malloc(sizeof(double) * ny), *scale = malloc(sizeof(double) * ny);
        const float *xp = xt ? kiln_tensor_data(xt) : NULL;
        for (int64_t m = 0; xp && m < M; m++)
            for (int64_t oh = 0; oh < H; oh++)
                for (int64_t ow = 0; ow < H; ow++) {
                    double acc = bv[m], sc = fabs(bv[m]);
                    for (int64_t ci = 0; ci < C; ci++)
                        for (int64_t kh = 0; kh < 3; kh++)
                            for (int64_t kw = 0; kw < 3; kw++) {
                                const int64_t ih = oh + kh - 1, iw = ow + kw - 1;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= H) continue;
                                const double t = (double)xp[(ci * H + ih) * H + iw] * (double)wv[((m * C + ci) * 3 + kh) * 3 + kw];
                                acc += t, sc += fabs(t);
                            }
                    want[(m * H + oh) * H + ow] = acc, scale[(m * H + oh) * H + ow] = sc;
                }
        char what[96];
        snprintf(what, sizeof what, "Conv 3x3 %lld -> %lld on %lldx%lld", (long long)C, (long long)M, (long long)H, (long long)H);
        const char *names[1] = {"x"};
        if (data && xt) gs_check_sessions(data, size, names, &xt, 1, want, scale, ny, what);
        free(data), free(wv), free(bv), free(want), free(scale);
        kiln_tensor_destroy(xt);
    }
    static const char *const eqs[2] = {"bhqk,bhkd->bhqd", "bhqd,bhkd->bhqk"};
    for (int e = 0; e < 2; e++) {
        const int64_t H = 12, Q = 128, D = 64, ad[4] = {1, H, Q, e ? D : Q}, bd[4] = {1, H, Q, D};
        tmb b;
        tmb_init(&b, 12);
        const int a = tmb_input(&b, "a", KILN_DTYPE_FLOAT, 4, ad, NULL), bb = tmb_input(&b, "b", KILN_DTYPE_FLOAT, 4, bd, NULL);
        const int y = tmb_value(&b, "y");
        tmb_str(&b, tmb_node(&b, "Einsum", (int[]){a, bb}, 2, y), "equation", eqs[e]);
        tmb_output(&b, y);
        size_t size;
        unsigned char *data = tmb_finish(&b, &size);
        uint32_t seed = 11u + (uint32_t)e;
        kiln_tensor *ins[2] = {tmb_random_tensor(ad, 4, &seed, 1.0f, 1.0f), tmb_random_tensor(bd, 4, &seed, 1.0f, 1.0f)};
        const int64_t N = e ? Q : D, K = e ? D : Q; /* output [1, H, Q, N], summed over K */
        const size_t ny = (size_t)(H * Q * N);
        double *want = malloc(sizeof(double) * ny), *scale = malloc(sizeof(double) * ny);
        const float *A = ins[0] ? kiln_tensor_data(ins[0]) : NULL, *B = ins[1] ? kiln_tensor_data(ins[1]) : NULL;
        for (int64_t h = 0; A && B && h < H; h++)
            for (int64_t i = 0; i < Q; i++)
                for (int64_t j = 0; j < N; j++) {
                    double acc = 0, sc = 0;
                    for (int64_t k = 0; k < K; k++) {
                        /* e 0: A[h][i][k] B[h][k][j]; e 1: A[h][i][k] B[h][j][k] */
                        const double t = (double)A[(h * Q + i) * K + k] * (double)(e ? B[(h * Q + j) * D + k] : B[(h * Q + k) * D + j]);
                        acc += t, sc += fabs(t);
                    }
                    want[(h * Q + i) * N + j] = acc, scale[(h * Q + i) * N + j] = sc;
                }
        const char *names[2] = {"a", "b"};
        if (data && A && B) gs_check_sessions(data, size, names, ins, 2, want, scale, ny, eqs[e]);
        free(data), free(want), free(scale);
        kiln_tensor_destroy(ins[0]);
        kiln_tensor_destroy(ins[1]);
    }
}

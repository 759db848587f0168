/* The float GEMM (kn_sgemm_run) gives the same bits at every thread count: each element of C is the
 * same sum in the same order however the tile grid cuts the product (rows, columns, products of a
 * batch, parts of K), whichever micro-kernel a tile's edge gets. Shapes with tails of every kind
 * (M and N past the micro-kernel's rows and panels, K past a slice of KC and of KCB, 1-row and
 * 1-column products, few rows, few columns), A plain or transposed or prepacked (a_packed, or
 * at_packed for the transposed path), B plain or transposed, read in place, packed whole
 * (b_packed) or through a packing callback, with alpha, beta, a row bias, an addend, an activation
 * and a clamp, and an epilogue (which must see every element once), batches of 3; each with the
 * path the GEMM picks and with KILN_GEMM_SWAP=1 (transposed wherever it can). On 2, 3, 5 and 16
 * threads, C (with the padding between its rows) memcmp-equal to 1 thread's, and 1 thread's C
 * against the definition in double. Before the fix this failed at KILN_CPU_ISA=avx2 (the
 * micro-kernel's 1- and 2-row calls summed K's even and odd steps apart, so a 98 x 512 x 400
 * product split at 2 threads gave other bits), and at every level where a tile's size picked the
 * step of K (B packed whole: KCB for tiles of fewer than 16 rows) or the transposed path's pairing
 * of panels picked it (AVX-512: ukr_sw's 64 against ukr_any's 128). */
#include "backend/cpu/sgemm.h"
#include "test_model_builder.h"
#include "test_pack_b.h"
#include "unit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TB_A_PLAIN, TB_A_PACKED, TB_AT_PACKED };         /* op(A)'s source */
enum { TB_B_PLAIN, TB_B_PACKED, TB_B_CALLBACK };        /* op(B)'s source */
enum { TB_BIAS = 1, TB_ADD = 2, TB_CLAMP = 4, TB_EPI = 8, TB_BETA = 16, TB_ALPHA = 32 }; /* extras */

typedef struct tb_case {
    int64_t M, N, K;
    int ta, tb, asrc, bsrc, extras, count;
} tb_case;

/* the epilogue: an affine map, so that an element it sees twice (or never) misses the definition */
static void tb_epilogue(const void *ctx, int64_t op, int64_t i0, int64_t j0, int64_t m, int64_t n, float *c,
                        int64_t ldc) {
    (void)ctx, (void)op, (void)i0, (void)j0;
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < n; j++) c[r * ldc + j] = c[r * ldc + j] * 0.5f + 0.25f;
}

/* the packing callback (a convolution's im2col): product op's plain K x N matrix, ctx an array of
 * tpb_plain, one a product */
static void tb_pack(const void *ctx, int64_t op, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
    tpb_pack_plain((const tpb_plain *)ctx + op, op, k0, kc, n0, nc, dst);
}

static const int tb_threads[] = {2, 3, 5, 16};
#define TB_POOLS (sizeof tb_threads / sizeof tb_threads[0])

/* One case on 1 thread and on every pool: returns 0 (ok), 1 (bits differ at some thread count,
 * *bad_threads says which), 2 (1 thread's C misses the definition or touched the padding), 3
 * (a status). */
static int tb_run(kn_threadpool *const pools[TB_POOLS], const tb_case *k, uint32_t seed, int *bad_threads,
                  double *err_out) {
    const int64_t M = k->M, N = k->N, K = k->K, cnt = k->count;
    const int64_t lda = k->ta ? M + 1 : K + 1, ldb = k->tb ? K + 3 : N + 3, ldc = N + 2, ldd = N + 1;
    const size_t a_n = (size_t)((k->ta ? K : M) * lda), b_n = (size_t)((k->tb ? N : K) * ldb);
    const size_t c_n = (size_t)(M * ldc), d_n = (size_t)(M * ldd);
    const size_t ap_n = kn_sgemm_packed_a_floats(M, K), bp_n = kn_sgemm_packed_b_floats(N, K),
                 atp_n = kn_sgemm_packed_b_floats(M, K);
    float *A = malloc(sizeof(float) * a_n * (size_t)cnt), *B = malloc(sizeof(float) * b_n * (size_t)cnt);
    float *C0 = malloc(sizeof(float) * c_n * (size_t)cnt), *C1 = malloc(sizeof(float) * c_n * (size_t)cnt);
    float *Ct = malloc(sizeof(float) * c_n * (size_t)cnt), *D = malloc(sizeof(float) * d_n * (size_t)cnt);
    float *bias = malloc(sizeof(float) * (size_t)(M * cnt));
    float *Apk = malloc(sizeof(float) * ap_n * (size_t)cnt), *Bpk = malloc(sizeof(float) * bp_n * (size_t)cnt);
    float *ATpk = malloc(sizeof(float) * atp_n * (size_t)cnt);
    int rc = 0;
    if (!A || !B || !C0 || !C1 || !Ct || !D || !bias || !Apk || !Bpk || !ATpk) {
        rc = 3;
        goto done;
    }
    for (size_t i = 0; i < a_n * (size_t)cnt; i++) A[i] = tmb_rand(&seed);
    for (size_t i = 0; i < b_n * (size_t)cnt; i++) B[i] = tmb_rand(&seed);
    for (size_t i = 0; i < c_n * (size_t)cnt; i++) C0[i] = tmb_rand(&seed);
    for (size_t i = 0; i < d_n * (size_t)cnt; i++) D[i] = tmb_rand(&seed);
    for (int64_t i = 0; i < M * cnt; i++) bias[i] = tmb_rand(&seed);
    const float **ap = malloc(sizeof(float *) * (size_t)cnt * 6);
    float **cp = malloc(sizeof(float *) * (size_t)cnt);
    tpb_plain *ppc = malloc(sizeof(tpb_plain) * (size_t)cnt);
    if (!ap || !cp || !ppc) {
        free(ap), free(cp), free(ppc);
        rc = 3;
        goto done;
    }
    const float **bp = ap + cnt, **app = ap + 2 * cnt, **bpp = ap + 3 * cnt, **atp = ap + 4 * cnt, **dp = ap + 5 * cnt;
    const float **rbp = malloc(sizeof(float *) * (size_t)cnt);
    for (int64_t o = 0; o < cnt; o++) {
        ap[o] = A + (size_t)o * a_n;
        bp[o] = B + (size_t)o * b_n;
        app[o] = Apk + (size_t)o * ap_n;
        bpp[o] = Bpk + (size_t)o * bp_n;
        atp[o] = ATpk + (size_t)o * atp_n;
        dp[o] = D + (size_t)o * d_n;
        if (rbp) rbp[o] = bias + o * M;
        ppc[o] = (tpb_plain){B + (size_t)o * b_n, ldb};
        kn_sgemm_pack_a(ap[o], lda, k->ta, M, K, Apk + (size_t)o * ap_n);
        kn_sgemm_pack_b_full(bp[o], ldb, k->tb, N, K, Bpk + (size_t)o * bp_n);
        kn_sgemm_pack_b_full(ap[o], lda, !k->ta, M, K, ATpk + (size_t)o * atp_n);
    }
    const float alpha = k->extras & TB_ALPHA ? -0.75f : 1.0f, beta = k->extras & TB_BETA ? 0.5f : 0.0f;
    kn_sgemm_batch g = {.count = cnt, .M = M, .N = N, .K = K, .trans_a = k->ta, .trans_b = k->tb, .alpha = alpha,
                        .beta = beta, .a = ap, .lda = lda, .b = bp, .ldb = ldb, .c = cp, .ldc = ldc};
    if (k->asrc == TB_A_PACKED) g.a_packed = app;
    if (k->asrc == TB_AT_PACKED) g.at_packed = atp;
    if (k->bsrc == TB_B_PACKED) g.b_packed = bpp;
    if (k->bsrc == TB_B_CALLBACK) {
        g.b = NULL;
        g.pack_b = tb_pack;
        g.pack_ctx = ppc;
    }
    if ((k->extras & TB_BIAS) && rbp) g.row_bias = rbp;
    if (k->extras & TB_ADD) {
        g.c_add = dp;
        g.ldc_add = ldd;
    }
    if (k->extras & TB_CLAMP) {
        g.clamp = true;
        g.clamp_lo = -0.4f;
        g.clamp_hi = 3.0f;
        g.act = KN_GEMM_ACT_LEAKY;
        g.act_p0 = 0.1f;
    }
    if (k->extras & TB_EPI) g.epilogue = tb_epilogue;
    /* 1 thread (the caller's), then every pool into Ct */
    memcpy(C1, C0, sizeof(float) * c_n * (size_t)cnt);
    for (int64_t o = 0; o < cnt; o++) cp[o] = C1 + (size_t)o * c_n;
    if (kn_sgemm_run(NULL, &g) != KILN_OK) rc = 3;
    for (size_t t = 0; !rc && t < TB_POOLS; t++) {
        memcpy(Ct, C0, sizeof(float) * c_n * (size_t)cnt);
        for (int64_t o = 0; o < cnt; o++) cp[o] = Ct + (size_t)o * c_n;
        if (kn_sgemm_run(pools[t], &g) != KILN_OK) rc = 3;
        else if (memcmp(Ct, C1, sizeof(float) * c_n * (size_t)cnt) != 0) {
            rc = 1;
            *bad_threads = tb_threads[t];
        }
    }
    /* 1 thread's C against the definition (every product: the bits agreed), the padding untouched */
    double err = 0;
    for (int64_t o = 0; rc != 3 && o < cnt; o++) {
        const float *a = ap[o], *b = bp[o], *c0 = C0 + (size_t)o * c_n, *c1 = C1 + (size_t)o * c_n, *d = dp[o];
        for (int64_t i = 0; i < M; i++) {
            for (int64_t j = 0; j < N; j++) {
                double acc = 0, sc = 0;
                for (int64_t q = 0; q < K; q++) {
                    const double t = (double)(k->ta ? a[q * lda + i] : a[i * lda + q]) *
                                     (double)(k->tb ? b[j * ldb + q] : b[q * ldb + j]);
                    acc += t, sc += fabs(t);
                }
                double r = (double)alpha * acc + (double)beta * (double)c0[i * ldc + j];
                sc = fabs((double)alpha) * sc + fabs((double)beta * (double)c0[i * ldc + j]);
                if (k->extras & TB_BIAS) r += (double)bias[o * M + i], sc += fabs((double)bias[o * M + i]);
                if (k->extras & TB_ADD) r += (double)d[i * ldd + j], sc += fabs((double)d[i * ldd + j]);
                if (k->extras & TB_CLAMP) {
                    if (r < 0) r *= (double)0.1f;
                    r = fmin(3.0, fmax((double)-0.4f, r));
                }
                if (k->extras & TB_EPI) r = r * 0.5 + 0.25;
                const double e = fabs((double)c1[i * ldc + j] - r) / (1e-6 + 1.2e-7 * (double)(K + 8) * (sc + 1.0));
                if (!(e <= err)) err = isnan(e) ? 1e30 : e;
            }
            for (int64_t j = N; j < ldc; j++)
                if (memcmp(&c1[i * ldc + j], &c0[i * ldc + j], sizeof(float))) err = 1e30;
        }
    }
    *err_out = err;
    if (rc == 0 && !(err <= 1.0)) rc = 2;
    free(ap), free(cp), free(ppc), free(rbp);
done:
    free(A), free(B), free(C0), free(C1), free(Ct), free(D), free(bias), free(Apk), free(Bpk), free(ATpk);
    return rc;
}

KN_TEST(cpu_sgemm_same_bits_every_thread_count) {
    kn_threadpool *pools[TB_POOLS] = {NULL};
    for (size_t t = 0; t < TB_POOLS; t++) CHECK_STATUS(kn_threadpool_create(tb_threads[t], &pools[t]), KILN_OK);
    const int P = TB_A_PLAIN, AP = TB_A_PACKED, ATP = TB_AT_PACKED, BPL = TB_B_PLAIN, BP = TB_B_PACKED,
              CB = TB_B_CALLBACK;
    const int EPI = TB_EPI, ALL = TB_BIAS | TB_ADD | TB_CLAMP | TB_EPI | TB_BETA;
    static tb_case cases[64];
    int nc = 0;
#define TB(M_, N_, K_, ta_, tb_, as_, bs_, ex_, cnt_) cases[nc++] = (tb_case){M_, N_, K_, ta_, tb_, as_, bs_, ex_, cnt_}
    /* the strided 1-D convolution's frames (fr_run): 98 frames x 512 channels, K 400, B^T packed whole */
    TB(98, 512, 400, 0, 1, P, BP, EPI, 1);
    TB(98, 512, 400, 0, 1, P, BPL, TB_BIAS, 1);
    TB(124, 258, 256, 0, 1, P, BP, EPI | TB_ALPHA, 1);
    /* its im2col form: channels x positions, weights prepacked either way */
    TB(512, 98, 400, 0, 0, ATP, CB, TB_BIAS | EPI, 1);
    TB(258, 124, 256, 0, 0, AP, CB, TB_BIAS | TB_CLAMP, 1);
    /* B packed whole: few rows (tiles of 2 rows, of fewer than 16), C over PK_C_FLOATS, K past KCB */
    TB(14, 32, 2000, 0, 1, P, BP, ALL, 1);
    TB(8, 96, 1500, 0, 0, P, BP, TB_BIAS | TB_ADD, 1);
    TB(29, 37, 1000, 0, 1, P, BP, EPI, 1);
    TB(20, 600, 800, 0, 1, P, BP, ALL, 1);
    TB(40, 300, 900, 1, 0, P, BP, TB_CLAMP | TB_ALPHA, 1);
    TB(300, 1000, 777, 0, 1, P, BP, TB_ADD | EPI, 1);
    TB(430, 96, 800, 0, 1, P, BP, TB_BETA | TB_CLAMP, 1);
    TB(3, 700, 1600, 0, 1, P, BP, ALL, 1);
    /* transposed-path shapes: positions of 7x7, 5x5, 14x14 planes, channels past the pairs */
    TB(256, 49, 512, 0, 0, P, BPL, TB_BIAS | TB_CLAMP, 1);
    TB(96, 49, 300, 0, 0, ATP, BPL, ALL, 1);
    TB(160, 49, 960, 0, 0, ATP, CB, TB_BIAS | EPI, 1);
    TB(200, 25, 300, 1, 0, P, BPL, TB_BETA, 1);
    TB(320, 30, 700, 0, 0, ATP, BPL, TB_ADD, 1);
    TB(512, 16, 2304, 0, 0, ATP, CB, TB_BIAS, 1);
    TB(192, 196, 1024, 0, 0, ATP, CB, TB_BIAS | TB_CLAMP, 1);
    TB(130, 70, 257, 0, 1, P, BPL, TB_ALPHA, 1);
    /* rows first and the blocked path (A prepacked: a convolution's weights) */
    TB(64, 3136, 64, 0, 0, AP, CB, TB_BIAS | TB_ADD | TB_CLAMP, 1);
    TB(256, 196, 576, 0, 0, AP, BPL, TB_BIAS | EPI, 1);
    TB(100, 333, 300, 0, 0, AP, CB, ALL, 1);
    TB(128, 200, 144, 0, 0, AP, CB, TB_BIAS | TB_ADD | TB_CLAMP | EPI, 1); /* a last 2-row panel, rows first */
    TB(98, 300, 64, 0, 0, AP, BPL, TB_BETA | TB_ALPHA, 1);
    TB(512, 130, 300, 0, 0, AP, CB, TB_BIAS | EPI, 1);                      /* ... blocked */
    TB(128, 96, 500, 0, 0, P, BPL, TB_ADD, 2);
    /* plain operands, every orientation, batches */
    TB(130, 130, 130, 0, 0, P, BPL, TB_BETA, 1);
    TB(97, 75, 513, 1, 1, P, BPL, ALL, 1);
    TB(200, 333, 260, 0, 1, P, BPL, TB_BIAS | EPI, 1);
    TB(50, 70, 200, 0, 0, P, BPL, TB_ADD | TB_ALPHA, 3);
    TB(7, 300, 300, 0, 1, P, BPL, TB_BIAS, 3);
    TB(33, 17, 1000, 1, 0, P, BPL, TB_CLAMP, 3);
    TB(64, 49, 300, 0, 0, ATP, CB, TB_BIAS, 3);
    /* a row times a matrix, a matrix times a column, dot products */
    TB(1, 1000, 300, 0, 1, P, BPL, TB_BIAS | TB_CLAMP, 1);
    TB(1, 700, 300, 0, 0, P, BPL, EPI, 1);
    TB(1, 300, 500, 1, 1, P, BP, TB_BETA, 1);
    TB(1000, 1, 300, 0, 1, P, BPL, TB_ADD, 1);
    TB(700, 1, 257, 0, 0, P, BPL, TB_BIAS | TB_BETA, 1);
    TB(20, 200, 300, 0, 1, P, BPL, ALL, 1);
    TB(5, 9, 7, 0, 0, P, BPL, ALL, 1);
    TB(77, 45, 1, 1, 0, P, BP, TB_BIAS, 1);
#undef TB
    static const char *const swaps[2] = {NULL, "1"};
    int failures = 0, runs = 0;
    for (int sw = 0; sw < 2; sw++) {
        if (swaps[sw]) setenv("KILN_GEMM_SWAP", swaps[sw], 1);
        else unsetenv("KILN_GEMM_SWAP");
        for (int i = 0; i < nc; i++) {
            const tb_case *k = &cases[i];
            int bad = 0;
            double err = 0;
            const int rc = tb_run(pools, k, 7u + (uint32_t)(i * 31 + sw), &bad, &err);
            runs++;
            if (rc && failures++ < 12)
                CHECK_MSG(0, "%s: M %lld N %lld K %lld trans %d%d A %d B %d extras %d count %lld, KILN_GEMM_SWAP=%s: %s %d "
                          "(1 thread's error %g of the bound)",
                          kn_sgemm_isa(), (long long)k->M, (long long)k->N, (long long)k->K, k->ta, k->tb, k->asrc,
                          k->bsrc, k->extras, (long long)k->count, swaps[sw] ? swaps[sw] : "(unset)",
                          rc == 1 ? "other bits than 1 thread's at threads" : rc == 2 ? "1 thread misses the definition, threads"
                                                                              : "a status, threads",
                          bad, err);
        }
    }
    unsetenv("KILN_GEMM_SWAP");
    CHECK_MSG(failures == 0, "%d of %d products failed", failures, runs);
    for (size_t t = 0; t < TB_POOLS; t++) kn_threadpool_destroy(pools[t]);
}

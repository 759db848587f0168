/* The CPU's MatMul with constant weights and its fused epilogue against the definition in double:
 * MatMul (+ Add of a bias) (+ Add of a residual input) (+ Relu, Tanh or the erf GELU written out),
 * which level 3 fuses into one kiln.FusedMatMul (the GEMM, then bias, residual and activation in a
 * pass), at level 0 as separate nodes. Shapes: ViT-B/16's 197 tokens (more rows than a block of
 * the usual GEMM order), an output over 1 MB (sgemm.c's run_packed_tile: groups of slices of K), a
 * batch of A stacked into one GEMM, few rows (B read in place, not prepacked), K past several
 * slices; the packed-B order and the usual one (KILN_GEMM_PACKED_B=0); 1 and 2 threads. */
#include "test_model_builder.h"

#include "backend/cpu/sgemm_bf16.h"
#include "kiln.h"

#include <math.h>
#include <stdlib.h>

typedef struct fm_case {
    int64_t batch, M, K, N;
    bool bias, res;
    int act; /* 0 none, 1 Relu, 2 Tanh, 3 GELU (erf) */
} fm_case;

static int fm_node1(tmb *b, const char *op, int x, const char *name) {
    int y = tmb_value(b, name);
    tmb_node(b, op, (int[]){x}, 1, y);
    return y;
}

static int fm_node2(tmb *b, const char *op, int x, int z, const char *name) {
    int y = tmb_value(b, name);
    tmb_node(b, op, (int[]){x, z}, 2, y);
    return y;
}

static unsigned char *fm_model(const fm_case *t, kiln_tensor **consts, size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, (int64_t[]){t->batch, t->M, t->K}, NULL);
    int w = tmb_const(&b, "w", 2, (int64_t[]){t->K, t->N}, 1.0f / sqrtf((float)t->K));
    kn_tensor_clone(b.g->values[w].constant, &consts[0]);
    int cur = fm_node2(&b, "MatMul", x, w, "mm");
    if (t->bias) {
        int bias = tmb_const(&b, "b", 1, (int64_t[]){t->N}, 0.5f);
        kn_tensor_clone(b.g->values[bias].constant, &consts[1]);
        cur = fm_node2(&b, "Add", bias, cur, "biased"); /* the bias first, as exporters write it */
    }
    if (t->res) {
        int z = tmb_input(&b, "z", KILN_DTYPE_FLOAT, 3, (int64_t[]){t->batch, t->M, t->N}, NULL);
        cur = fm_node2(&b, "Add", cur, z, "res");
    }
    if (t->act == 1) cur = fm_node1(&b, "Relu", cur, "relu");
    if (t->act == 2) cur = fm_node1(&b, "Tanh", cur, "tanh");
    if (t->act == 3) {
        int d = fm_node2(&b, "Div", cur, tmb_scalar(&b, "sqrt2", KILN_DTYPE_FLOAT, 1.41421356f), "d");
        int e = fm_node1(&b, "Erf", d, "e");
        int p = fm_node2(&b, "Add", e, tmb_scalar(&b, "one", KILN_DTYPE_FLOAT, 1.0f), "p");
        int h = fm_node2(&b, "Mul", cur, p, "h");
        cur = fm_node2(&b, "Mul", h, tmb_scalar(&b, "half", KILN_DTYPE_FLOAT, 0.5f), "gelu");
    }
    tmb_output(&b, cur);
    return tmb_finish(&b, size);
}

/* Random inputs x [batch, M, K] (and the residual z [batch, M, N] where the case has one) from
 * seed, and the definition in double over them (with bf16: over the operands rounded to bfloat16,
 * as precision=bf16 multiplies them) with the scale of each sum for the error bound. */
static void fm_inputs_and_definition(const fm_case *t, uint32_t seed, kiln_tensor *const *consts, bool bf16,
                                     kiln_tensor **x_out, kiln_tensor **z_out, double *want, double *scale) {
    const int64_t rows = t->batch * t->M;
    kiln_tensor *x = tmb_random_tensor((int64_t[]){t->batch, t->M, t->K}, 3, &seed, 1, 1), *z = NULL;
    float *xp = kiln_tensor_data(x);
    if (t->res) z = tmb_random_tensor((int64_t[]){t->batch, t->M, t->N}, 3, &seed, 1, 1);
    const float *w = kiln_tensor_data(consts[0]), *bias = consts[1] ? kiln_tensor_data(consts[1]) : NULL;
    const float *zp = z ? kiln_tensor_data(z) : NULL;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < t->N; j++) {
            double acc = 0, sc = 0;
            for (int64_t k = 0; k < t->K; k++) {
                const float a = xp[r * t->K + k], b = w[k * t->N + j];
                const double p = bf16 ? (double)kn_bf16_round(a) * kn_bf16_round(b) : (double)a * b;
                acc += p;
                sc += fabs(p);
            }
            if (bias) acc += bias[j], sc += fabs(bias[j]);
            const size_t i = (size_t)(r * t->N + j);
            if (zp) acc += zp[i], sc += fabs(zp[i]);
            if (t->act == 1) acc = acc < 0 ? 0 : acc;
            if (t->act == 2) acc = tanh(acc);
            if (t->act == 3) acc = 0.5 * acc * (1.0 + erf(acc / sqrt(2.0)));
            want[i] = acc;
            scale[i] = sc;
        }
    *x_out = x;
    *z_out = z;
}

KN_TEST(cpu_fused_matmul_matches_definition) {
    const fm_case cases[] = {
        {1, 197, 96, 300, true, true, 0},   /* ViT's tokens: bias + residual (its projections) */
        {1, 197, 80, 1400, true, false, 3}, /* GELU on an output over 1 MB (its first MLP layer) */
        {1, 197, 700, 64, true, true, 0},   /* K past two slices, then bias and residual */
        {2, 64, 128, 96, true, true, 2},    /* a batch of A stacked into one GEMM, Tanh */
        {1, 40, 33, 70, false, true, 1},    /* residual and Relu, no bias */
        {1, 5, 48, 40, true, false, 3},     /* few rows: B read in place, not prepacked */
        {3, 7, 20, 33, true, true, 1},      /* 21 rows in all, odd columns */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const fm_case *t = &cases[ci];
        kiln_tensor *consts[2] = {0};
        size_t size;
        unsigned char *m = fm_model(t, consts, &size);
        if (!m) continue;
        const int64_t rows = t->batch * t->M;
        const size_t ny = (size_t)(rows * t->N);
        kiln_tensor *x = NULL, *z = NULL;
        double *want = malloc(sizeof(double) * ny), *scale = malloc(sizeof(double) * ny);
        fm_inputs_and_definition(t, 4242 + (uint32_t)ci, consts, false, &x, &z, want, scale);
        for (int order = 0; order < 2; order++) { /* 0: as chosen; 1: the usual GEMM order */
            if (order) setenv("KILN_GEMM_PACKED_B", "0", 1);
            for (int threads = 1; threads <= 2; threads++)
                for (int level = 0; level <= 3; level += 3) {
                    kiln_session *s = tmb_session(m, size, threads, level);
                    if (!s) continue;
                    const char *names[2] = {"x", "z"};
                    kiln_tensor *ins[2] = {x, z};
                    char ctx[160];
                    snprintf(ctx, sizeof ctx,
                             "case %zu (%lld x %lld x %lld -> %lld, bias %d, res %d, act %d), order %d, %d threads, level %d",
                             ci, (long long)t->batch, (long long)t->M, (long long)t->K, (long long)t->N, t->bias, t->res,
                             t->act, order, threads, level);
                    tmb_check_runs(s, names, ins, t->res ? 2 : 1, want, scale, ny, 1e-6, 2e-6, ctx);
                    kiln_session_destroy(s);
                }
            unsetenv("KILN_GEMM_PACKED_B");
        }
        free(want);
        free(scale);
        kiln_tensor_destroy(x);
        kiln_tensor_destroy(z);
        kiln_tensor_destroy(consts[0]);
        kiln_tensor_destroy(consts[1]);
        free(m);
    }
}

/* The same under precision=bf16 (1 and 2 threads; level 3: one FusedMatMul, its GEMM on AMX or
 * vdpbf16ps with B kept in bf16, panels outer; level 0: the MatMul in bf16, the rest as nodes)
 * against the definition in double on the bf16-rounded x and weights: what is left is fp32
 * accumulation.
 * Shapes as above with at least 16 rows in all (fewer run fp32) and BERT-base's 128 x 768 x 768;
 * a wrong column of the bias, a missing or doubled residual fail it. */
KN_TEST(cpu_fused_matmul_bf16_epilogue_matches_definition) {
    if (!kn_bf16_cpu_usable()) KN_SKIP("this CPU has no AVX512_BF16");
    const fm_case cases[] = {
        {1, 197, 96, 300, true, true, 0},  {1, 197, 80, 1400, true, false, 3}, {1, 197, 700, 64, true, true, 0},
        {2, 64, 128, 96, true, true, 2},   {1, 40, 33, 70, false, true, 1},    {3, 7, 20, 33, true, true, 1},
        {1, 128, 768, 768, true, true, 0},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const fm_case *t = &cases[ci];
        kiln_tensor *consts[2] = {0};
        size_t size;
        unsigned char *m = fm_model(t, consts, &size);
        if (!m) continue;
        const int64_t rows = t->batch * t->M;
        const size_t ny = (size_t)(rows * t->N);
        kiln_tensor *x = NULL, *z = NULL;
        double *want = malloc(sizeof(double) * ny), *scale = malloc(sizeof(double) * ny);
        fm_inputs_and_definition(t, 777 + (uint32_t)ci, consts, true, &x, &z, want, scale);
        for (int threads = 1; threads <= 2; threads++)
            for (int level = 0; level <= 3; level += 3) {
                kiln_session_options *o = NULL;
                kiln_session_options_create(&o);
                kiln_session_options_set_cache(o, 0, NULL);
                kiln_session_options_set_intra_op_threads(o, threads);
                kiln_session_options_set_opt_level(o, level);
                const char *k[1] = {"precision"}, *v[1] = {"bf16"};
                kiln_session_options_append_provider(o, "cpu", k, v, 1);
                kiln_session *s = NULL;
                CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, o, &s), KILN_OK);
                kiln_session_options_destroy(o);
                if (!s) continue;
                const char *names[2] = {"x", "z"};
                kiln_tensor *ins[2] = {x, z};
                char ctx[160];
                snprintf(ctx, sizeof ctx, "bf16 case %zu (%lld x %lld x %lld -> %lld, bias %d, res %d, act %d), %d threads, level %d",
                         ci, (long long)t->batch, (long long)t->M, (long long)t->K, (long long)t->N, t->bias, t->res,
                         t->act, threads, level);
                tmb_check_runs(s, names, ins, t->res ? 2 : 1, want, scale, ny, 1e-6, 1e-5, ctx);
                kiln_session_destroy(s);
            }
        free(want);
        free(scale);
        kiln_tensor_destroy(x);
        kiln_tensor_destroy(z);
        kiln_tensor_destroy(consts[0]);
        kiln_tensor_destroy(consts[1]);
        free(m);
    }
}

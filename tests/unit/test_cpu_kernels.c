/* CPU kernels against reference loops written here from the ONNX definitions: the fast paths of
 * pooling (separable MaxPool/AveragePool), convolution (one input channel per group feeding many
 * output channels: the GEMM path), Softmax over long rows and Resize. Geometries are drawn from a
 * fixed generator over kernel sizes, strides, dilations, asymmetric pads and ceil_mode, so each
 * run checks the same few hundred cases; a mismatch names the case. */
#include "unit.h"
#include "test_model_builder.h"

#include "kiln.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t ck_next(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}
static int64_t ck_range(uint32_t *s, int64_t lo, int64_t hi) { return lo + (int64_t)(ck_next(s) % (uint32_t)(hi - lo + 1)); }

/* Runs a one-input model on the CPU (threads: 0 = every core); the output tensor or NULL. */
static kiln_tensor *ck_run(const unsigned char *data, size_t size, kiln_tensor *x, int threads) {
    kiln_session_options *o;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_intra_op_threads(o, threads);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(data, size, NULL, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "session: %s", kiln_last_error());
    if (st) return NULL;
    const char *names[] = {"x"};
    kiln_tensor *y = NULL;
    st = kiln_session_run(s, names, &x, 1, NULL, 1, &y);
    CHECK_MSG(st == KILN_OK, "run: %s", kiln_last_error());
    kiln_session_destroy(s);
    return y;
}

/* float <-> the element types the pools take */
static double ck_get(const void *p, kiln_dtype dt, int64_t i) {
    switch (dt) {
    case KILN_DTYPE_INT8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case KILN_DTYPE_FLOAT16: {
        uint16_t h = ((const uint16_t *)p)[i];
        int e = (h >> 10) & 31, m = h & 1023;
        double v = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(1024 + m, e - 25);
        return h & 0x8000 ? -v : v;
    }
    default: return ((const float *)p)[i];
    }
}
static void ck_set_random(void *p, kiln_dtype dt, int64_t n, uint32_t *s) {
    for (int64_t i = 0; i < n; i++) {
        int v = (int)ck_range(s, -100, 100);
        switch (dt) {
        case KILN_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
        case KILN_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)(v + 100); break;
        case KILN_DTYPE_FLOAT16: { /* v/32 is exact in float16: sign, exponent, 10-bit mantissa */
            double a = fabs(v / 32.0);
            uint16_t h = 0;
            if (a > 0) {
                int e;
                double f = frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
                h = (uint16_t)(((e + 14) << 10) | ((int)ldexp(f, 11) & 1023));
            }
            ((uint16_t *)p)[i] = (uint16_t)(h | (v < 0 ? 0x8000 : 0));
            break;
        }
        default: ((float *)p)[i] = (float)ck_range(s, -100000, 100000) / 1000.0f; break;
        }
    }
}

/* ------------------------------------------------------------------ pooling */

typedef struct pool_case {
    int max; /* 1 MaxPool, 0 AveragePool */
    int nsp;
    int64_t N, C, in[2], k[2], s[2], d[2], pb[2], pe[2];
    int ceil, include_pad;
    kiln_dtype dt;
} pool_case;

static int64_t pool_out(const pool_case *p, int i) {
    int64_t ek = (p->k[i] - 1) * p->d[i] + 1, span = p->in[i] + p->pb[i] + p->pe[i] - ek;
    if (span < 0) return 0;
    int64_t o = (p->ceil ? (span + p->s[i] - 1) / p->s[i] : span / p->s[i]) + 1;
    if (p->ceil && (o - 1) * p->s[i] >= p->in[i] + p->pb[i]) o--;
    return o;
}

/* 1 when the case's output matches the reference loops. */
static int check_pool(const pool_case *p, int threads) {
    tmb b;
    tmb_init(&b, p->max ? 12 : 19);
    int64_t xd[4] = {p->N, p->C, p->in[0], p->in[1]};
    int x = tmb_input(&b, "x", p->dt, 2 + p->nsp, xd, NULL), y = tmb_value(&b, "y");
    int node = tmb_node(&b, p->max ? "MaxPool" : "AveragePool", &x, 1, y);
    int64_t pads[4];
    for (int i = 0; i < p->nsp; i++) pads[i] = p->pb[i], pads[p->nsp + i] = p->pe[i];
    tmb_ints(&b, node, "kernel_shape", p->k, p->nsp);
    tmb_ints(&b, node, "strides", p->s, p->nsp);
    tmb_ints(&b, node, "dilations", p->d, p->nsp);
    tmb_ints(&b, node, "pads", pads, 2 * p->nsp);
    if (p->ceil) tmb_int(&b, node, "ceil_mode", 1);
    if (!p->max) tmb_int(&b, node, "count_include_pad", p->include_pad);
    tmb_output(&b, y);
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);
    if (!data) return 0;

    kiln_tensor *X;
    kiln_tensor_create(p->dt, xd, 2 + p->nsp, &X);
    uint32_t seed = 7;
    const int64_t in_plane = p->in[0] * (p->nsp == 2 ? p->in[1] : 1);
    ck_set_random(kiln_tensor_data(X), p->dt, p->N * p->C * in_plane, &seed);
    kiln_tensor *Y = ck_run(data, size, X, threads);
    free(data);
    int ok = Y != NULL;
    int64_t out[2] = {pool_out(p, 0), p->nsp == 2 ? pool_out(p, 1) : 1};
    if (Y) {
        const int64_t *yd = kiln_tensor_dims(Y);
        ok = kiln_tensor_rank(Y) == 2 + p->nsp && yd[2] == out[0] && (p->nsp == 1 || yd[3] == out[1]);
        CHECK_MSG(ok, "output dims differ from the ONNX rule (%lld x %lld expected)", (long long)out[0],
                  (long long)out[1]);
    }
    const void *xv = kiln_tensor_data(X);
    const void *yv = Y ? kiln_tensor_data(Y) : NULL;
    const int64_t in1 = p->nsp == 2 ? p->in[1] : 1;
    for (int64_t pl = 0; ok && pl < p->N * p->C; pl++)
        for (int64_t o0 = 0; ok && o0 < out[0]; o0++)
            for (int64_t o1 = 0; ok && o1 < out[1]; o1++) {
                double best = -INFINITY, sum = 0;
                int64_t valid = 0, padded = 0;
                const int64_t k1n = p->nsp == 2 ? p->k[1] : 1;
                for (int64_t k0 = 0; k0 < p->k[0]; k0++)
                    for (int64_t k1 = 0; k1 < k1n; k1++) {
                        int64_t i0 = o0 * p->s[0] - p->pb[0] + k0 * p->d[0];
                        int64_t i1 = p->nsp == 2 ? o1 * p->s[1] - p->pb[1] + k1 * p->d[1] : 0;
                        /* inside input + explicit pads (not the extra ceil_mode positions) */
                        if (i0 < p->in[0] + p->pe[0] && (p->nsp == 1 || i1 < p->in[1] + p->pe[1])) padded++;
                        if (i0 < 0 || i0 >= p->in[0] || i1 < 0 || i1 >= in1) continue;
                        double v = ck_get(xv, p->dt, pl * in_plane + i0 * in1 + i1);
                        valid++;
                        sum += v;
                        if (v > best) best = v;
                    }
                if (!valid) continue; /* an empty window: outside what is checked here */
                double want = p->max ? best : sum / (double)(p->include_pad ? padded : valid);
                double got = ck_get(yv, p->dt, (pl * out[0] + o0) * out[1] + o1);
                double tol = p->dt == KILN_DTYPE_FLOAT16 ? 2e-3 * fabs(want) + 1e-3 : 1e-5 * fabs(want) + 1e-5;
                if (!(fabs(got - want) <= tol)) {
                    CHECK_MSG(0, "plane %lld output (%lld, %lld): %.7g, expected %.7g", (long long)pl, (long long)o0,
                              (long long)o1, got, want);
                    ok = 0;
                }
            }
    kiln_tensor_destroy(X);
    kiln_tensor_destroy(Y);
    return ok;
}

static void describe_pool(const pool_case *p) {
    printf("    %s %s %lldx%lld in %lldx%lld k %lldx%lld s %lldx%lld d %lldx%lld pads %lld,%lld,%lld,%lld ceil %d incl %d\n",
           p->max ? "MaxPool" : "AveragePool", kiln_dtype_name(p->dt), (long long)p->N, (long long)p->C,
           (long long)p->in[0], (long long)p->in[1], (long long)p->k[0], (long long)p->k[1], (long long)p->s[0],
           (long long)p->s[1], (long long)p->d[0], (long long)p->d[1], (long long)p->pb[0], (long long)p->pb[1],
           (long long)p->pe[0], (long long)p->pe[1], p->ceil, p->include_pad);
}

/* The detector shapes the separable path was written for, then random geometries. */
KN_TEST(cpu_pool_against_reference) {
    const pool_case fixed[] = {
        {1, 2, 1, 192, {13, 13}, {13, 13}, {1, 1}, {1, 1}, {6, 6}, {6, 6}, 0, 0, KILN_DTYPE_FLOAT},
        {1, 2, 1, 192, {13, 13}, {9, 9}, {1, 1}, {1, 1}, {4, 4}, {4, 4}, 0, 0, KILN_DTYPE_FLOAT},
        {1, 2, 1, 256, {20, 20}, {13, 13}, {1, 1}, {1, 1}, {6, 6}, {6, 6}, 0, 0, KILN_DTYPE_FLOAT},
        {1, 2, 2, 64, {56, 56}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 0, 0, KILN_DTYPE_FLOAT},
        {1, 2, 1, 8, {57, 31}, {3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, 1, 0, KILN_DTYPE_FLOAT},
        {0, 2, 1, 16, {28, 28}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 0, 0, KILN_DTYPE_FLOAT},
        {0, 2, 1, 16, {28, 28}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 0, 1, KILN_DTYPE_FLOAT},
        {1, 2, 1, 16, {13, 13}, {13, 13}, {1, 1}, {1, 1}, {6, 6}, {6, 6}, 0, 0, KILN_DTYPE_FLOAT16},
        {1, 2, 1, 16, {20, 20}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 0, 0, KILN_DTYPE_INT8},
        {1, 2, 1, 16, {20, 20}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, 0, 0, KILN_DTYPE_UINT8},
        {1, 1, 1, 32, {1000, 1}, {3, 1}, {2, 1}, {1, 1}, {1, 0}, {1, 0}, 0, 0, KILN_DTYPE_FLOAT},
        /* the separable pool's shapes with constant forms (3x3 s1 / s2, 2x2 s2, 5x5 s1), rows of
         * whole vectors and with tails, windows cut at the edges (ceil_mode, pads) */
        {0, 2, 1, 16, {28, 28}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, 0, 0, KILN_DTYPE_FLOAT},
        {1, 2, 1, 16, {27, 29}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, 1, 0, KILN_DTYPE_FLOAT},
        {1, 2, 1, 8, {20, 20}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, 0, 0, KILN_DTYPE_FLOAT},
        {0, 2, 1, 8, {21, 19}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 0, 1, KILN_DTYPE_FLOAT},
        {0, 2, 1, 8, {30, 61}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 0, 0, KILN_DTYPE_FLOAT},
        {0, 2, 1, 8, {30, 61}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, 1, 1, KILN_DTYPE_FLOAT},
        {1, 2, 1, 8, {33, 9}, {3, 3}, {1, 1}, {1, 1}, {0, 1}, {1, 0}, 0, 0, KILN_DTYPE_FLOAT16},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        int f0 = kn_unit_failures();
        check_pool(&fixed[i], i % 2 ? 1 : 0);
        if (kn_unit_failures() != f0 && bad++ < 5) describe_pool(&fixed[i]);
    }
    uint32_t s = 2026;
    const kiln_dtype types[] = {KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT, KILN_DTYPE_INT8,
                                KILN_DTYPE_UINT8, KILN_DTYPE_FLOAT16};
    for (int t = 0; t < 300; t++) {
        pool_case p = {0};
        p.max = (int)ck_range(&s, 0, 2) != 0;
        p.nsp = (int)ck_range(&s, 1, 2);
        p.N = ck_range(&s, 1, 2);
        p.C = ck_range(&s, 1, 5);
        p.dt = p.max ? types[ck_range(&s, 0, 5)] : KILN_DTYPE_FLOAT;
        p.ceil = ck_range(&s, 0, 3) == 0;
        p.include_pad = (int)ck_range(&s, 0, 1);
        for (int i = 0; i < 2; i++) {
            if (i >= p.nsp) {
                p.in[i] = p.k[i] = p.s[i] = p.d[i] = 1;
                continue;
            }
            p.k[i] = ck_range(&s, 1, 13);
            p.s[i] = ck_range(&s, 1, 3);
            p.d[i] = ck_range(&s, 0, 4) == 0 ? 2 : 1;
            const int64_t ek = (p.k[i] - 1) * p.d[i] + 1;
            p.pb[i] = ck_range(&s, 0, (ek - 1) / 2 + (ck_range(&s, 0, 3) == 0));
            p.pe[i] = ck_range(&s, 0, (ek - 1) / 2 + (ck_range(&s, 0, 3) == 0));
            if (p.pb[i] >= ek) p.pb[i] = ek - 1;
            if (p.pe[i] >= ek) p.pe[i] = ek - 1;
            const int64_t lo = ek - p.pb[i] - p.pe[i] > 1 ? ek - p.pb[i] - p.pe[i] : 1;
            p.in[i] = ck_range(&s, lo, lo + 24);
        }
        int f0 = kn_unit_failures();
        check_pool(&p, (int)(t % 3 == 0));
        if (kn_unit_failures() != f0 && bad++ < 5) describe_pool(&p);
    }
}

/* ------------------------------------------------------------------ convolution */

typedef struct conv_case {
    int nsp;
    int64_t N, C, M, G, in[2], k[2], s[2], d[2], pb[2], pe[2];
} conv_case;

static void check_conv(const conv_case *p, int threads, const char *what) {
    tmb b;
    tmb_init(&b, 17);
    const int r = 2 + p->nsp;
    int64_t xd[4] = {p->N, p->C, p->in[0], p->in[1]}, wd[4] = {p->M, p->C / p->G, p->k[0], p->k[1]}, bd[1] = {p->M};
    int in[3];
    in[0] = tmb_input(&b, "x", KILN_DTYPE_FLOAT, r, xd, NULL);
    in[1] = tmb_const(&b, "w", r, wd, 0.5f);
    in[2] = tmb_const(&b, "b", 1, bd, 0.5f);
    const float *w = b.g->values[in[1]].constant->data, *bias = b.g->values[in[2]].constant->data;
    int y = tmb_value(&b, "y");
    int node = tmb_node(&b, "Conv", in, 3, y);
    int64_t pads[4];
    for (int i = 0; i < p->nsp; i++) pads[i] = p->pb[i], pads[p->nsp + i] = p->pe[i];
    tmb_ints(&b, node, "kernel_shape", p->k, p->nsp);
    tmb_ints(&b, node, "strides", p->s, p->nsp);
    tmb_ints(&b, node, "dilations", p->d, p->nsp);
    tmb_ints(&b, node, "pads", pads, 2 * p->nsp);
    tmb_int(&b, node, "group", p->G);
    tmb_output(&b, y);
    /* the reference needs the weights after the builder is gone: copy them */
    const int64_t kk = p->k[0] * (p->nsp == 2 ? p->k[1] : 1), nw = p->M * (p->C / p->G) * kk;
    float *wc = malloc(sizeof(float) * (size_t)(nw + p->M));
    memcpy(wc, w, sizeof(float) * (size_t)nw);
    memcpy(wc + nw, bias, sizeof(float) * (size_t)p->M);
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);
    kiln_tensor *X;
    kiln_tensor_create(KILN_DTYPE_FLOAT, xd, r, &X);
    uint32_t seed = 99;
    const int64_t in1 = p->nsp == 2 ? p->in[1] : 1, in_plane = p->in[0] * in1;
    float *xv = kiln_tensor_data(X);
    for (int64_t i = 0; i < p->N * p->C * in_plane; i++) xv[i] = tmb_rand(&seed);
    kiln_tensor *Y = data ? ck_run(data, size, X, threads) : NULL;
    free(data);
    int64_t out[2];
    for (int i = 0; i < 2; i++)
        out[i] = i < p->nsp ? (p->in[i] + p->pb[i] + p->pe[i] - (p->k[i] - 1) * p->d[i] - 1) / p->s[i] + 1 : 1;
    int ok = Y != NULL;
    if (Y) {
        const int64_t *yd = kiln_tensor_dims(Y);
        ok = yd[1] == p->M && yd[2] == out[0] && (p->nsp == 1 || yd[3] == out[1]);
        CHECK_MSG(ok, "%s: output dims", what);
    }
    const float *yv = Y ? kiln_tensor_data(Y) : NULL;
    const int64_t Cg = p->C / p->G, Mg = p->M / p->G, k1n = p->nsp == 2 ? p->k[1] : 1;
    for (int64_t n = 0; ok && n < p->N; n++)
        for (int64_t m = 0; ok && m < p->M; m++)
            for (int64_t o0 = 0; ok && o0 < out[0]; o0++)
                for (int64_t o1 = 0; ok && o1 < out[1]; o1++) {
                    double acc = wc[nw + m], mag = fabs(acc);
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t k0 = 0; k0 < p->k[0]; k0++)
                            for (int64_t k1 = 0; k1 < k1n; k1++) {
                                int64_t i0 = o0 * p->s[0] - p->pb[0] + k0 * p->d[0];
                                int64_t i1 = p->nsp == 2 ? o1 * p->s[1] - p->pb[1] + k1 * p->d[1] : 0;
                                if (i0 < 0 || i0 >= p->in[0] || i1 < 0 || i1 >= in1) continue;
                                double t = (double)xv[((n * p->C + (m / Mg) * Cg + c) * in_plane) + i0 * in1 + i1] *
                                           (double)wc[(m * Cg + c) * kk + k0 * k1n + k1];
                                acc += t;
                                mag += fabs(t);
                            }
                    double got = yv[((n * p->M + m) * out[0] + o0) * out[1] + o1];
                    if (!(fabs(got - acc) <= 1e-5 * mag + 1e-6)) {
                        CHECK_MSG(0, "%s: image %lld channel %lld output (%lld, %lld): %.7g, expected %.7g", what,
                                  (long long)n, (long long)m, (long long)o0, (long long)o1, got, acc);
                        ok = 0;
                    }
                }
    free(wc);
    kiln_tensor_destroy(X);
    kiln_tensor_destroy(Y);
}

/* One input channel per group feeding many output channels: STFT front ends (1 -> 258 channels,
 * kernel 256, stride 128), grayscale stems, a grouped version, and true depthwise beside them. */
KN_TEST(cpu_conv_one_input_channel_against_reference) {
    const struct { conv_case c; const char *what; } cases[] = {
        {{1, 1, 1, 258, 1, {4000, 1}, {256, 1}, {128, 1}, {1, 1}, {0, 0}, {0, 0}}, "1-D 1->258 k256 s128"},
        {{1, 3, 1, 40, 1, {1000, 1}, {64, 1}, {32, 1}, {1, 1}, {0, 0}, {0, 0}}, "1-D 1->40 k64 s32 batch 3"},
        {{1, 1, 1, 64, 1, {2000, 1}, {10, 1}, {5, 1}, {1, 1}, {0, 0}, {0, 0}}, "1-D 1->64 k10 s5"},
        {{1, 2, 2, 32, 2, {500, 1}, {7, 1}, {3, 1}, {2, 1}, {3, 1}, {2, 1}}, "1-D grouped 2->32 g2 k7 s3 d2 pads"},
        {{2, 1, 1, 32, 1, {30, 27}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, "2-D 1->32 3x3"},
        {{2, 2, 1, 8, 1, {33, 20}, {5, 5}, {2, 2}, {1, 1}, {2, 1}, {1, 2}}, "2-D 1->8 5x5 s2 batch 2"},
        {{2, 1, 1, 3, 1, {16, 16}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, "2-D 1->3 3x3 (loops)"},
        {{2, 1, 16, 16, 16, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, "2-D depthwise 16ch"},
        {{2, 1, 8, 32, 8, {12, 12}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}}, "2-D depthwise multiplier 4"},
        /* few input taps (C*k*k <= 32): the direct register path */
        {{2, 2, 3, 19, 1, {37, 45}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 1}}, "2-D stem 3->19 3x3 s2 batch 2"},
        {{2, 1, 3, 16, 1, {30, 40}, {3, 3}, {1, 1}, {2, 1}, {2, 1}, {2, 1}}, "2-D 3->16 3x3 s1 row dilation 2"},
        {{2, 1, 2, 8, 1, {17, 50}, {4, 4}, {2, 2}, {1, 1}, {2, 1}, {1, 2}}, "2-D 2->8 4x4 s2 asymmetric pads"},
        {{1, 1, 3, 24, 1, {200, 1}, {9, 1}, {2, 1}, {1, 1}, {4, 0}, {4, 0}}, "1-D 3->24 k9 s2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_conv(&cases[i].c, i % 2 ? 1 : 0, cases[i].what);
}

/* ------------------------------------------------------------------ softmax */

static void check_softmax(const char *op, kiln_dtype dt, int64_t rows, int64_t n, float spread, int threads) {
    tmb b;
    tmb_init(&b, 13);
    int64_t xd[2] = {rows, n};
    int x = tmb_input(&b, "x", dt, 2, xd, NULL), y = tmb_value(&b, "y");
    int node = tmb_node(&b, op, &x, 1, y);
    tmb_int(&b, node, "axis", -1);
    tmb_output(&b, y);
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);
    kiln_tensor *X;
    kiln_tensor_create(dt, xd, 2, &X);
    uint32_t seed = (uint32_t)(n * 31 + rows);
    float *xf = malloc(sizeof(float) * (size_t)(rows * n));
    for (int64_t i = 0; i < rows * n; i++) {
        float v = spread * tmb_rand(&seed);
        if (dt == KILN_DTYPE_FLOAT16) { /* the value float16 holds: 1/64 steps */
            v = roundf(v * 64.0f) / 64.0f;
            ((uint16_t *)kiln_tensor_data(X))[i] = 0;
        } else {
            ((float *)kiln_tensor_data(X))[i] = v;
        }
        xf[i] = v;
    }
    if (dt == KILN_DTYPE_FLOAT16) { /* exact float16 of xf: via the builder's writer-free path */
        uint16_t *h = kiln_tensor_data(X);
        for (int64_t i = 0; i < rows * n; i++) {
            double a = fabs(xf[i]);
            uint16_t bits = 0;
            if (a > 0) {
                int e;
                double f = frexp(a, &e);
                bits = (uint16_t)(((e + 14) << 10) | ((int)ldexp(f, 11) & 1023));
            }
            h[i] = (uint16_t)(bits | (xf[i] < 0 ? 0x8000 : 0));
        }
    }
    kiln_tensor *Y = data ? ck_run(data, size, X, threads) : NULL;
    free(data);
    const int log = !strcmp(op, "LogSoftmax");
    for (int64_t r = 0; Y && r < rows; r++) {
        const float *xr = xf + r * n;
        double m = -INFINITY, s = 0;
        for (int64_t i = 0; i < n; i++) m = xr[i] > m ? xr[i] : m;
        for (int64_t i = 0; i < n; i++) s += exp((double)xr[i] - m);
        for (int64_t i = 0; i < n; i++) {
            double want = log ? ((double)xr[i] - m) - log1p(s - 1) : exp((double)xr[i] - m) / s;
            double got = ck_get(kiln_tensor_data(Y), dt, r * n + i);
            double tol = dt == KILN_DTYPE_FLOAT16 ? 1e-3 * fabs(want) + 1e-3 : 1e-5 * fabs(want) + (log ? 1e-5 : 1e-7);
            if (!(fabs(got - want) <= tol)) {
                CHECK_MSG(0, "%s %s %lldx%lld row %lld element %lld: %.8g, expected %.8g", op, kiln_dtype_name(dt),
                          (long long)rows, (long long)n, (long long)r, (long long)i, got, want);
                r = rows;
                break;
            }
        }
    }
    free(xf);
    kiln_tensor_destroy(X);
    kiln_tensor_destroy(Y);
}

/* Long rows (the vector body), short and odd rows (the masked tail alone), a wide spread. */
KN_TEST(cpu_softmax_against_reference) {
    const int64_t lens[] = {1, 5, 16, 17, 31, 33, 64, 100, 127, 128, 129, 1000, 4096, 4099};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        check_softmax("Softmax", KILN_DTYPE_FLOAT, 7, lens[i], 8.0f, (int)(i % 2));
        check_softmax("LogSoftmax", KILN_DTYPE_FLOAT, 3, lens[i], 8.0f, 1);
        check_softmax("Softmax", KILN_DTYPE_FLOAT16, 5, lens[i], 4.0f, 0);
    }
    check_softmax("Softmax", KILN_DTYPE_FLOAT, 2, 32000, 30.0f, 0);
    check_softmax("LogSoftmax", KILN_DTYPE_FLOAT16, 3, 77, 4.0f, 1);
}

/* ------------------------------------------------------------------ float16 convolution */

static uint16_t ck_f16_bits(float v) { /* v a multiple of 1/256 with |v| < 8: exact in float16 */
    double a = fabs(v);
    uint16_t bits = 0;
    if (a > 0) {
        int e;
        double f = frexp(a, &e);
        bits = (uint16_t)(((e + 14) << 10) | ((int)ldexp(f, 11) & 1023));
    }
    return (uint16_t)(bits | (v < 0 ? 0x8000 : 0));
}

/* float16 input, constant weights and bias: the weights are converted once per session (the
 * second run reads the session's converted copy), the output rounded to float16. */
static void check_conv_f16(int64_t N, int64_t C, int64_t M, int64_t G, int64_t H, int64_t W, int64_t k,
                           int64_t stride, const char *what) {
    tmb b;
    tmb_init(&b, 17);
    int64_t xd[4] = {N, C, H, W}, wd[4] = {M, C / G, k, k}, bd[1] = {M};
    const int64_t nw = M * (C / G) * k * k, nx = N * C * H * W;
    float *wf = malloc(sizeof(float) * (size_t)(nw + M)), *xf = malloc(sizeof(float) * (size_t)nx);
    uint32_t seed = 5;
    kn_tensor *wt, *bt;
    kn_tensor_new(KILN_DTYPE_FLOAT16, 4, wd, &wt);
    kn_tensor_new(KILN_DTYPE_FLOAT16, 1, bd, &bt);
    for (int64_t i = 0; i < nw + M; i++) {
        wf[i] = roundf(tmb_rand(&seed) * 64.0f) / 256.0f;
        if (i < nw) ((uint16_t *)wt->data)[i] = ck_f16_bits(wf[i]);
        else ((uint16_t *)bt->data)[i - nw] = ck_f16_bits(wf[i]);
    }
    int in[3];
    in[0] = tmb_input(&b, "x", KILN_DTYPE_FLOAT16, 4, xd, NULL);
    in[1] = tmb_const_tensor(&b, "w", wt);
    in[2] = tmb_const_tensor(&b, "b", bt);
    int y = tmb_value(&b, "y");
    int node = tmb_node(&b, "Conv", in, 3, y);
    const int64_t ks[2] = {k, k}, st[2] = {stride, stride}, pads[4] = {k / 2, k / 2, k / 2, k / 2};
    tmb_ints(&b, node, "kernel_shape", ks, 2);
    tmb_ints(&b, node, "strides", st, 2);
    tmb_ints(&b, node, "pads", pads, 4);
    tmb_int(&b, node, "group", G);
    tmb_output(&b, y);
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);
    kiln_tensor *X;
    kiln_tensor_create(KILN_DTYPE_FLOAT16, xd, 4, &X);
    for (int64_t i = 0; i < nx; i++) {
        xf[i] = roundf(tmb_rand(&seed) * 256.0f) / 256.0f;
        ((uint16_t *)kiln_tensor_data(X))[i] = ck_f16_bits(xf[i]);
    }
    kiln_session *s = tmb_session(data, size, 0, 3);
    free(data);
    const int64_t OH = (H + 2 * (k / 2) - k) / stride + 1, OW = (W + 2 * (k / 2) - k) / stride + 1;
    const int64_t Cg = C / G, Mg = M / G;
    for (int run = 0; s && run < 2; run++) {
        const char *names[] = {"x"};
        kiln_tensor *Y = NULL;
        if (kiln_session_run(s, names, &X, 1, NULL, 1, &Y) != KILN_OK) {
            CHECK_MSG(0, "%s: run: %s", what, kiln_last_error());
            break;
        }
        int ok = kiln_tensor_element_count(Y) == N * M * OH * OW;
        CHECK_MSG(ok, "%s: output size", what);
        for (int64_t e = 0; ok && e < N * M * OH * OW; e++) {
            const int64_t ow = e % OW, oh = e / OW % OH, m = e / (OW * OH) % M, n = e / (OW * OH * M);
            double acc = wf[nw + m], mag = fabs(acc);
            for (int64_t ci = 0; ci < Cg; ci++)
                for (int64_t kh = 0; kh < k; kh++)
                    for (int64_t kw = 0; kw < k; kw++) {
                        const int64_t ih = oh * stride - k / 2 + kh, iw = ow * stride - k / 2 + kw;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        const double t = (double)xf[((n * C + (m / Mg) * Cg + ci) * H + ih) * W + iw] *
                                         (double)wf[((m * Cg + ci) * k + kh) * k + kw];
                        acc += t;
                        mag += fabs(t);
                    }
            const double got = ck_get(kiln_tensor_data(Y), KILN_DTYPE_FLOAT16, e);
            if (!(fabs(got - acc) <= 1e-3 * fabs(acc) + 1e-5 * mag + 1e-4)) {
                CHECK_MSG(0, "%s run %d: output %lld is %.6g, expected %.6g", what, run, (long long)e, got, acc);
                ok = 0;
            }
        }
        kiln_tensor_destroy(Y);
    }
    kiln_session_destroy(s);
    kiln_tensor_destroy(X);
    free(wf);
    free(xf);
}

KN_TEST(cpu_conv_float16_against_reference) {
    check_conv_f16(2, 8, 16, 1, 10, 12, 3, 1, "3x3 8->16");
    check_conv_f16(1, 3, 16, 1, 33, 31, 3, 2, "3x3 s2 3->16");
    check_conv_f16(1, 16, 16, 16, 14, 14, 5, 1, "depthwise 5x5 16ch");
}

/* ------------------------------------------------------------------ bilinear Resize */

/* The ONNX reference's source coordinate: the output length in it is scale * in, unrounded. */
static double ck_src_coord(const char *mode, int64_t y, double scale, int64_t in) {
    const double out = scale * (double)in;
    if (!strcmp(mode, "align_corners")) return out == 1 ? 0.0 : (double)y * (double)(in - 1) / (out - 1);
    if (!strcmp(mode, "asymmetric")) return (double)y / scale;
    if (!strcmp(mode, "pytorch_half_pixel")) return out > 1 ? ((double)y + 0.5) / scale - 0.5 : 0.0;
    return ((double)y + 0.5) / scale - 0.5; /* half_pixel */
}

static void check_bilinear(int64_t N, int64_t C, int64_t H, int64_t W, float sh, float sw, const char *mode) {
    tmb b;
    tmb_init(&b, 13);
    int64_t xd[4] = {N, C, H, W}, rd[1] = {0}, sd[1] = {4};
    int in[3];
    in[0] = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, xd, NULL);
    in[1] = tmb_const(&b, "roi", 1, rd, 1.0f);
    in[2] = tmb_const(&b, "scales", 1, sd, 1.0f);
    float *sc = b.g->values[in[2]].constant->data;
    sc[0] = sc[1] = 1.0f;
    sc[2] = sh;
    sc[3] = sw;
    int y = tmb_value(&b, "y");
    int node = tmb_node(&b, "Resize", in, 3, y);
    tmb_str(&b, node, "mode", "linear");
    tmb_str(&b, node, "coordinate_transformation_mode", mode);
    tmb_output(&b, y);
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);
    kiln_tensor *X;
    kiln_tensor_create(KILN_DTYPE_FLOAT, xd, 4, &X);
    uint32_t seed = 3;
    float *xv = kiln_tensor_data(X);
    for (int64_t i = 0; i < N * C * H * W; i++) xv[i] = tmb_rand(&seed);
    kiln_tensor *Y = data ? ck_run(data, size, X, (int)(W % 2)) : NULL;
    free(data);
    const int64_t OH = (int64_t)floor((double)H * sh), OW = (int64_t)floor((double)W * sw);
    int ok = Y && kiln_tensor_element_count(Y) == N * C * OH * OW;
    CHECK_MSG(!Y || ok, "%s %lldx%lld x (%g, %g): output size", mode, (long long)H, (long long)W, sh, sw);
    for (int64_t e = 0; ok && e < N * C * OH * OW; e++) {
        const int64_t ow = e % OW, oh = e / OW % OH, pl = e / (OW * OH);
        const double yh = ck_src_coord(mode, oh, sh, H), yw = ck_src_coord(mode, ow, sw, W);
        const double fh = floor(yh), fw = floor(yw), rh = yh - fh, rw = yw - fw;
        double v = 0;
        for (int a = 0; a < 2; a++)
            for (int c = 0; c < 2; c++) {
                int64_t ih = (int64_t)fh + a, iw = (int64_t)fw + c;
                ih = ih < 0 ? 0 : ih >= H ? H - 1 : ih;
                iw = iw < 0 ? 0 : iw >= W ? W - 1 : iw;
                v += (a ? rh : 1 - rh) * (c ? rw : 1 - rw) * xv[(pl * H + ih) * W + iw];
            }
        const double got = ((const float *)kiln_tensor_data(Y))[e];
        if (!(fabs(got - v) <= 2e-6)) {
            CHECK_MSG(0, "%s %lldx%lld x (%g, %g): output (%lld, %lld, %lld) is %.7g, expected %.7g", mode, (long long)H,
                      (long long)W, sh, sw, (long long)pl, (long long)oh, (long long)ow, got, v);
            ok = 0;
        }
    }
    kiln_tensor_destroy(X);
    kiln_tensor_destroy(Y);
}

KN_TEST(cpu_resize_bilinear_against_reference) {
    const char *modes[] = {"half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"};
    for (int m = 0; m < 4; m++) {
        check_bilinear(1, 3, 13, 17, 2.0f, 2.0f, modes[m]);
        check_bilinear(2, 2, 20, 40, 0.5f, 0.5f, modes[m]);
        check_bilinear(1, 2, 7, 33, 1.7f, 0.6f, modes[m]);
        check_bilinear(1, 2, 31, 9, 0.6f, 1.7f, modes[m]);
        check_bilinear(1, 1, 5, 5, 1.0f, 3.0f, modes[m]);
        check_bilinear(1, 1, 1, 9, 4.0f, 1.5f, modes[m]);
    }
}

/* ------------------------------------------------------------------ Instance / Group normalisation */

/* InstanceNormalization (G = 0) or GroupNormalization with G groups (opset 21: scale and bias per
 * channel) on [N, C, inner] data of mean `offset`, against the definition computed in double:
 * y = (x - mean) / sqrt(var + eps) * scale[c] + bias[c], mean and biased variance over each
 * (n, group). */
static void check_group_norm(int64_t N, int64_t C, int64_t inner, int64_t G, float offset, int threads) {
    tmb b;
    tmb_init(&b, G ? 21 : 13);
    const int64_t xd[3] = {N, C, inner}, pd[1] = {C};
    int in[3];
    in[0] = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, xd, NULL);
    in[1] = tmb_const(&b, "s", 1, pd, 2.0f);
    in[2] = tmb_const(&b, "b", 1, pd, 1.0f);
    const float *sc = b.g->values[in[1]].constant->data, *bi = b.g->values[in[2]].constant->data;
    float *scv = malloc(sizeof(float) * (size_t)(2 * C));
    memcpy(scv, sc, sizeof(float) * (size_t)C);
    memcpy(scv + C, bi, sizeof(float) * (size_t)C);
    int y = tmb_value(&b, "y");
    int node = tmb_node(&b, G ? "GroupNormalization" : "InstanceNormalization", in, 3, y);
    if (G) tmb_int(&b, node, "num_groups", G);
    tmb_output(&b, y);
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);
    kiln_tensor *X;
    kiln_tensor_create(KILN_DTYPE_FLOAT, xd, 3, &X);
    float *xv = kiln_tensor_data(X);
    uint32_t seed = (uint32_t)(inner * 7 + C);
    for (int64_t i = 0; i < N * C * inner; i++) xv[i] = offset + 3.0f * tmb_rand(&seed);
    kiln_tensor *Y = data ? ck_run(data, size, X, threads) : NULL;
    free(data);
    const int64_t groups = G ? G : C, len = C / groups * inner;
    int ok = Y && kiln_tensor_element_count(Y) == N * C * inner;
    for (int64_t u = 0; ok && u < N * groups; u++) {
        const float *xg = xv + u * len;
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < len; i++) s += xg[i];
        const double m = s / (double)len;
        for (int64_t i = 0; i < len; i++) s2 += ((double)xg[i] - m) * ((double)xg[i] - m);
        const double inv = 1.0 / sqrt(s2 / (double)len + 1e-5);
        for (int64_t i = 0; i < len; i++) {
            const int64_t ch = (u % groups) * (C / groups) + i / inner;
            const double want = ((double)xg[i] - m) * inv * scv[ch] + scv[C + ch];
            const double got = ((const float *)kiln_tensor_data(Y))[u * len + i];
            if (!(fabs(got - want) <= 2e-5 * fabs(want) + 2e-5 + 1e-7 * fabs(offset))) {
                CHECK_MSG(0, "%s N%lld C%lld inner %lld offset %g: group %lld element %lld is %.8g, expected %.8g",
                          G ? "GroupNormalization" : "InstanceNormalization", (long long)N, (long long)C,
                          (long long)inner, offset, (long long)u, (long long)i, got, want);
                ok = 0;
                break;
            }
        }
    }
    CHECK_MSG(ok || !Y, "group norm output");
    free(scv);
    kiln_tensor_destroy(X);
    kiln_tensor_destroy(Y);
}

/* Short planes (the masked tail alone), planes over one 4096-element block, a large mean. */
KN_TEST(cpu_instance_group_norm_against_reference) {
    const int64_t inners[] = {1, 7, 16, 33, 49, 3136, 5000};
    for (size_t i = 0; i < sizeof inners / sizeof inners[0]; i++) {
        check_group_norm(2, 3, inners[i], 0, 0.0f, (int)(i % 2));
        check_group_norm(1, 4, inners[i], 0, 100.0f, 1);
        check_group_norm(2, 6, inners[i], 3, 2.0f, 0);
    }
}

/* ------------------------------------------------------------------ ArgMax / ArgMin */

/* ArgMax/ArgMin over the last axis of [rows, n] floats drawn from few values (ties everywhere),
 * with select_last_index 0 or 1; some rows hold NaN, which ONNX Runtime and numpy treat as the
 * extreme: the first NaN's index. Reference: the definition, a scan keeping the first (last)
 * index of the extreme value. */
static void check_argminmax(const char *op, int64_t rows, int64_t n, int last, int threads) {
    tmb b;
    tmb_init(&b, 13);
    int64_t xd[2] = {rows, n};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, xd, NULL), y = tmb_value(&b, "y");
    int node = tmb_node(&b, op, &x, 1, y);
    tmb_int(&b, node, "axis", -1);
    tmb_int(&b, node, "keepdims", 0);
    tmb_int(&b, node, "select_last_index", last);
    tmb_output(&b, y);
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);
    kiln_tensor *X;
    kiln_tensor_create(KILN_DTYPE_FLOAT, xd, 2, &X);
    float *xv = kiln_tensor_data(X);
    uint32_t seed = (uint32_t)(n * 13 + rows + last);
    for (int64_t i = 0; i < rows * n; i++) xv[i] = (float)ck_range(&seed, -3, 3) * 0.5f;
    for (int64_t r = 0; r < rows; r += 3) /* every third row: a NaN or two */
        for (int k = 0; k < 1 + (int)(r % 2); k++) xv[r * n + ck_range(&seed, 0, n - 1)] = NAN;
    kiln_tensor *Y = data ? ck_run(data, size, X, threads) : NULL;
    free(data);
    const int is_max = !strcmp(op, "ArgMax");
    int ok = Y && kiln_tensor_element_count(Y) == rows;
    CHECK_MSG(!Y || ok, "%s: output size", op);
    for (int64_t r = 0; ok && r < rows; r++) {
        const float *p = xv + r * n;
        int64_t want = -1;
        for (int64_t i = 0; i < n && want < 0; i++)
            if (isnan(p[i])) want = i;
        if (want < 0) {
            want = 0;
            for (int64_t i = 1; i < n; i++) {
                const int better = is_max ? (last ? p[i] >= p[want] : p[i] > p[want])
                                          : (last ? p[i] <= p[want] : p[i] < p[want]);
                if (better) want = i;
            }
        }
        const int64_t got = ((const int64_t *)kiln_tensor_data(Y))[r];
        if (got != want) {
            CHECK_MSG(0, "%s select_last_index %d, %lldx%lld: row %lld gives %lld, expected %lld", op, last,
                      (long long)rows, (long long)n, (long long)r, (long long)got, (long long)want);
            ok = 0;
        }
    }
    kiln_tensor_destroy(X);
    kiln_tensor_destroy(Y);
}

/* Rows shorter than a vector (the masked tail alone), of whole vectors and odd lengths. */
KN_TEST(cpu_argminmax_against_reference) {
    const int64_t lens[] = {1, 2, 5, 16, 17, 31, 33, 64, 100, 4096, 4099};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        for (int last = 0; last < 2; last++) {
            check_argminmax("ArgMax", 9, lens[i], last, (int)(i % 2));
            check_argminmax("ArgMin", 7, lens[i], last, 1);
        }
}

/* ------------------------------------------------------------------ float16 MatMul */

/* [batch, M, K] @ [K, N] in float16, B a constant (converted once per session: the second run
 * reads the session's copy) or a second graph input; values exact in float16, the output the
 * float16 rounding of the exact product. */
static void check_matmul_f16(int64_t batch, int64_t M, int64_t K, int64_t N, int b_const) {
    tmb b;
    tmb_init(&b, 13);
    const int64_t ad[3] = {batch, M, K}, bd[2] = {K, N};
    const int64_t na = batch * M * K, nb = K * N;
    float *af = malloc(sizeof(float) * (size_t)na), *bf = malloc(sizeof(float) * (size_t)nb);
    uint32_t seed = (uint32_t)(M * 3 + K * 5 + N);
    for (int64_t i = 0; i < nb; i++) bf[i] = roundf(tmb_rand(&seed) * 64.0f) / 256.0f;
    for (int64_t i = 0; i < na; i++) af[i] = roundf(tmb_rand(&seed) * 256.0f) / 256.0f;
    int in[2];
    in[0] = tmb_input(&b, "x", KILN_DTYPE_FLOAT16, 3, ad, NULL);
    kiln_tensor *Bt = NULL;
    if (b_const) {
        kn_tensor *wt;
        kn_tensor_new(KILN_DTYPE_FLOAT16, 2, bd, &wt);
        for (int64_t i = 0; i < nb; i++) ((uint16_t *)wt->data)[i] = ck_f16_bits(bf[i]);
        in[1] = tmb_const_tensor(&b, "w", wt);
    } else {
        in[1] = tmb_input(&b, "w", KILN_DTYPE_FLOAT16, 2, bd, NULL);
        kiln_tensor_create(KILN_DTYPE_FLOAT16, bd, 2, &Bt);
        for (int64_t i = 0; i < nb; i++) ((uint16_t *)kiln_tensor_data(Bt))[i] = ck_f16_bits(bf[i]);
    }
    int y = tmb_value(&b, "y");
    tmb_node(&b, "MatMul", in, 2, y);
    tmb_output(&b, y);
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);
    kiln_tensor *X;
    kiln_tensor_create(KILN_DTYPE_FLOAT16, ad, 3, &X);
    for (int64_t i = 0; i < na; i++) ((uint16_t *)kiln_tensor_data(X))[i] = ck_f16_bits(af[i]);
    kiln_session *s = tmb_session(data, size, 0, 3);
    free(data);
    for (int run = 0; s && run < 2; run++) {
        const char *names[] = {"x", "w"};
        kiln_tensor *ins[2] = {X, Bt}, *Y = NULL;
        if (kiln_session_run(s, names, ins, b_const ? 1 : 2, NULL, 1, &Y) != KILN_OK) {
            CHECK_MSG(0, "MatMul f16 run: %s", kiln_last_error());
            break;
        }
        int ok = kiln_tensor_element_count(Y) == batch * M * N;
        CHECK_MSG(ok, "MatMul f16: output size");
        for (int64_t e = 0; ok && e < batch * M * N; e++) {
            const int64_t j = e % N, i = e / N; /* row i of the stacked [batch*M, K] A */
            double acc = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                const double t = (double)af[i * K + k] * (double)bf[k * N + j];
                acc += t;
                mag += fabs(t);
            }
            const double got = ck_get(kiln_tensor_data(Y), KILN_DTYPE_FLOAT16, e);
            if (!(fabs(got - acc) <= 1e-3 * fabs(acc) + 1e-5 * mag + 1e-4)) {
                CHECK_MSG(0, "MatMul f16 %lldx%lldx%lld @ %lldx%lld (B %s) run %d: output %lld is %.6g, expected %.6g",
                          (long long)batch, (long long)M, (long long)K, (long long)K, (long long)N,
                          b_const ? "constant" : "input", run, (long long)e, got, acc);
                ok = 0;
            }
        }
        kiln_tensor_destroy(Y);
    }
    kiln_session_destroy(s);
    kiln_tensor_destroy(X);
    kiln_tensor_destroy(Bt);
    free(af);
    free(bf);
}

KN_TEST(cpu_matmul_float16_against_reference) {
    check_matmul_f16(1, 37, 64, 29, 1);
    check_matmul_f16(2, 5, 33, 17, 1);
    check_matmul_f16(1, 1, 100, 7, 1);
    check_matmul_f16(3, 9, 31, 40, 0);
    check_matmul_f16(2, 40, 96, 70, 1); /* 80 rows: the constant's float copy packed once (layout 16) */
}

/* ------------------------------------------------------------------ Exp, Tanh, Erf, Gelu */

/* One float unary operator over a dense sweep of [lo, hi] (an odd count: the masked tail) plus
 * specials, against the ONNX definitions in double. The error bound is relative, with an absolute
 * floor `abs_tol` (Gelu crosses zero; exp's subnormal results carry their own spacing). */
static double ck_gelu_ref(double x, int tanh_mode) {
    /* 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), which does not cancel for large negative u */
    if (tanh_mode) return x / (1.0 + exp(-2.0 * 0.79788456080286536 * (x + 0.044715 * x * x * x)));
    return 0.5 * x * erfc(-x * 0.70710678118654752);
}
static void check_unary_accuracy(const char *op, const char *approx, float lo, float hi, double rel_tol,
                                 double abs_tol) {
    const float specials[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e-30f, -1e-30f, 1.0f, -1.0f, 88.7f, 89.0f,
                              -87.4f, -103.9f, -150.0f, 9.0f, -9.0f, 10.5f, -10.5f, 1e-8f, -1e-8f, 3e38f, -3e38f};
    const int64_t ns = (int64_t)(sizeof specials / sizeof specials[0]), nd = 100003, n = nd + ns;
    tmb b;
    tmb_init(&b, 20);
    int64_t xd[1] = {n};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 1, xd, NULL), y = tmb_value(&b, "y");
    int node = tmb_node(&b, op, &x, 1, y);
    if (approx) tmb_str(&b, node, "approximate", approx);
    tmb_output(&b, y);
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);
    kiln_tensor *X;
    kiln_tensor_create(KILN_DTYPE_FLOAT, xd, 1, &X);
    float *xv = kiln_tensor_data(X);
    for (int64_t i = 0; i < nd; i++) xv[i] = lo + (hi - lo) * (float)i / (float)(nd - 1);
    for (int64_t i = 0; i < ns; i++) xv[nd + i] = specials[i];
    kiln_tensor *Y = data ? ck_run(data, size, X, 1) : NULL;
    free(data);
    int bad = 0;
    double worst = 0;
    for (int64_t i = 0; Y && i < n; i++) {
        const double v = xv[i];
        /* specials: the extremes always, the others where they fall in this call's range */
        if (i >= nd && isfinite(v) && fabs(v) < 1e30 && fabs(v) > 1e-6 && (v < lo || v > hi)) continue;
        double want;
        if (!strcmp(op, "Exp")) want = exp(v);
        else if (!strcmp(op, "Tanh")) want = tanh(v);
        else if (!strcmp(op, "Erf")) want = erf(v);
        else {
            if (isinf(v)) continue; /* -inf * 0: the definition leaves it open */
            want = ck_gelu_ref(v, approx != NULL);
        }
        want = (double)(float)want; /* the float result the definition rounds to (inf, subnormals) */
        const double got = ((const float *)kiln_tensor_data(Y))[i];
        const int ok = isnan(want) ? isnan(got)
                       : isinf(want) ? got == want
                                     : fabs(got - want) <= rel_tol * fabs(want) + abs_tol;
        if (!isnan(want) && !isinf(want) && fabs(want) > fmax(abs_tol, 1.18e-38)) /* normal results */
            worst = fmax(worst, fabs(got - want) / fabs(want));
        if (!ok && bad++ < 3)
            CHECK_MSG(0, "%s%s%s(%.9g) = %.9g, expected %.9g", op, approx ? " " : "", approx ? approx : "", v, got,
                      want);
    }
    CHECK_MSG(Y != NULL, "%s: no output", op);
    if (getenv("KN_TEST_VERBOSE")) fprintf(stderr, "%s%s: worst relative error %.3g\n", op, approx ? approx : "", worst);
    kiln_tensor_destroy(X);
    kiln_tensor_destroy(Y);
}

KN_TEST(cpu_unary_activations_accuracy) {
    check_unary_accuracy("Exp", NULL, -110.0f, 95.0f, 4e-7, 3e-45);
    check_unary_accuracy("Exp", NULL, -2.0f, 2.0f, 4e-7, 0);
    check_unary_accuracy("Tanh", NULL, -12.0f, 12.0f, 5e-7, 1e-45);
    check_unary_accuracy("Tanh", NULL, -0.01f, 0.01f, 5e-7, 1e-45);
    check_unary_accuracy("Erf", NULL, -12.0f, 12.0f, 1e-6, 1e-45);
    check_unary_accuracy("Erf", NULL, -0.01f, 0.01f, 1e-6, 1e-45);
    check_unary_accuracy("Gelu", NULL, -20.0f, 20.0f, 2e-6, 1e-40);
    /* the tanh form: its exp saturates near -87 (x < -10), results below 1e-36 stand in for 0;
     * and sigmoid(2u) for large negative u magnifies u's float rounding (relative error about
     * |2u| ulp: 1e-5 near x = -9), as in any float evaluation of the formula */
    check_unary_accuracy("Gelu", "tanh", -20.0f, 20.0f, 3e-5, 1e-36);
    check_unary_accuracy("Gelu", "tanh", -4.0f, 20.0f, 2e-6, 1e-36);
}

/* ------------------------------------------------------------------ BatchNormalization */

/* Inference BatchNormalization on [N, C, inner] against the definition in double:
 * y = (x - mean[c]) / sqrt(var[c] + eps) * scale[c] + bias[c]. The kernel writes every output
 * element itself (the executor no longer zeroes its output first): a second session run over other
 * values must not leave the first run's values anywhere. */
static void check_batchnorm(int64_t N, int64_t C, int64_t inner) {
    tmb b;
    tmb_init(&b, 15);
    const int64_t xd[3] = {N, C, inner}, pd[1] = {C};
    int in[5];
    in[0] = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, xd, NULL);
    in[1] = tmb_const(&b, "s", 1, pd, 2.0f);
    in[2] = tmb_const(&b, "b", 1, pd, 1.0f);
    in[3] = tmb_const(&b, "m", 1, pd, 1.0f);
    in[4] = tmb_const(&b, "v", 1, pd, 0.5f);
    float *prm = malloc(sizeof(float) * (size_t)(4 * C));
    for (int k = 0; k < 4; k++) memcpy(prm + k * C, b.g->values[in[1 + k]].constant->data, sizeof(float) * (size_t)C);
    for (int64_t c = 0; c < C; c++) { /* variances in [0.5, 1.5) */
        prm[3 * C + c] += 1.0f;
        ((float *)b.g->values[in[4]].constant->data)[c] = prm[3 * C + c];
    }
    int y = tmb_value(&b, "y");
    tmb_node(&b, "BatchNormalization", in, 5, y);
    tmb_output(&b, y);
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);
    kiln_tensor *X;
    kiln_tensor_create(KILN_DTYPE_FLOAT, xd, 3, &X);
    float *xv = kiln_tensor_data(X);
    kiln_session *s = tmb_session(data, size, 1, 3);
    free(data);
    uint32_t seed = (uint32_t)(inner + C);
    for (int run = 0; s && run < 2; run++) {
        for (int64_t i = 0; i < N * C * inner; i++) xv[i] = (run ? -4.0f : 4.0f) * tmb_rand(&seed);
        const char *names[] = {"x"};
        kiln_tensor *Y = NULL;
        if (kiln_session_run(s, names, &X, 1, NULL, 1, &Y) != KILN_OK) {
            CHECK_MSG(0, "BatchNormalization run: %s", kiln_last_error());
            break;
        }
        int ok = kiln_tensor_element_count(Y) == N * C * inner;
        for (int64_t e = 0; ok && e < N * C * inner; e++) {
            const int64_t c = e / inner % C;
            const double want = ((double)xv[e] - prm[2 * C + c]) / sqrt((double)prm[3 * C + c] + 1e-5) * prm[c] + prm[C + c];
            const double got = ((const float *)kiln_tensor_data(Y))[e];
            if (!(fabs(got - want) <= 1e-5 * fabs(want) + 1e-5)) {
                CHECK_MSG(0, "BatchNormalization N%lld C%lld inner %lld run %d: element %lld is %.8g, expected %.8g",
                          (long long)N, (long long)C, (long long)inner, run, (long long)e, got, want);
                ok = 0;
            }
        }
        kiln_tensor_destroy(Y);
    }
    kiln_session_destroy(s);
    kiln_tensor_destroy(X);
    free(prm);
}

KN_TEST(cpu_batchnorm_against_reference) {
    check_batchnorm(1, 3, 1);
    check_batchnorm(2, 5, 17);
    check_batchnorm(1, 64, 3136);
}

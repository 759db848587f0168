/* The CPU's float ConvTranspose against the definition in double, above all conv.c's phase GEMM
 * (ct_phase_*: one GEMM over every output phase, its epilogue storing C into the strided output)
 * and the column-buffer path it falls back to. Edges: odd sizes, asymmetric pads, pads that skip a
 * whole grid row (qlo > 0) or reach past the window, output_padding, output_shape, auto_pad
 * SAME_UPPER and SAME_LOWER, strides 1, 2, 3 and 8, kernels that the stride does not divide and
 * kernels smaller than the stride (outputs no tap reaches: the bias alone), groups, 1-D, 2-D and
 * 3-D, batch 2, bias or none, weights a constant or a graph input, products per row phase (the
 * split) or not, a product the GEMM runs transposed (few grid points, many phase rows) and one
 * deeper than a GEMM slice, dilation (the fallback). Each as chosen, forced onto the phases
 * (KILN_CT_PHASE=1) and kept off (KILN_CT_PHASE=0), at 1 and 2 threads. */
#include "test_model_builder.h"

#include "kiln.h"

#include <math.h>
#include <stdlib.h>

typedef struct ctp_case {
    int nsp;
    int64_t N, C, M, G;
    int64_t in[3], k[3], s[3], d[3];
    int64_t pads[6];     /* begins then ends; ignored with output_shape or auto_pad */
    int64_t opad[3];     /* output_padding */
    int64_t oshape[3];   /* output_shape where [0] > 0 */
    int auto_pad;        /* 0 NOTSET, 1 SAME_UPPER, 2 SAME_LOWER */
    bool bias, w_input;
} ctp_case;

static int64_t ctp_floordiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* The output sizes and begin pads of the ONNX definition */
static void ctp_geometry(const ctp_case *t, int64_t *out, int64_t *pb) {
    for (int i = 0; i < t->nsp; i++) {
        const int64_t full = t->s[i] * (t->in[i] - 1) + t->opad[i] + (t->k[i] - 1) * t->d[i] + 1;
        if (t->oshape[0] > 0 || t->auto_pad) {
            const int64_t target = t->oshape[0] > 0 ? t->oshape[i] : t->in[i] * t->s[i];
            const int64_t total = full - target, half = ctp_floordiv(total, 2);
            pb[i] = t->auto_pad == 1 ? half : total - half;
            out[i] = target;
        } else {
            pb[i] = t->pads[i];
            out[i] = full - t->pads[i] - t->pads[t->nsp + i];
        }
    }
}

static unsigned char *ctp_model(const ctp_case *t, kiln_tensor **consts, size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    const int r = t->nsp + 2;
    int64_t xd[5] = {t->N, t->C}, wd[5] = {t->C, t->M / t->G};
    for (int i = 0; i < t->nsp; i++) xd[2 + i] = t->in[i], wd[2 + i] = t->k[i];
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, r, xd, NULL);
    int64_t fan = t->C / t->G;
    for (int i = 0; i < t->nsp; i++) fan *= t->k[i];
    int w;
    if (t->w_input) {
        w = tmb_input(&b, "w", KILN_DTYPE_FLOAT, r, wd, NULL);
    } else {
        w = tmb_const(&b, "w", r, wd, 1.0f / sqrtf((float)fan));
        kn_tensor_clone(b.g->values[w].constant, &consts[0]);
    }
    int bi = t->bias ? tmb_const(&b, "b", 1, (int64_t[]){t->M}, 0.5f) : -1;
    if (t->bias) kn_tensor_clone(b.g->values[bi].constant, &consts[1]);
    int y = tmb_value(&b, "y");
    int node = tmb_node(&b, "ConvTranspose", (int[]){x, w, bi}, t->bias ? 3 : 2, y);
    tmb_ints(&b, node, "kernel_shape", t->k, t->nsp);
    tmb_ints(&b, node, "strides", t->s, t->nsp);
    tmb_ints(&b, node, "dilations", t->d, t->nsp);
    if (t->oshape[0] > 0) tmb_ints(&b, node, "output_shape", t->oshape, t->nsp);
    else if (t->auto_pad) tmb_str(&b, node, "auto_pad", t->auto_pad == 1 ? "SAME_UPPER" : "SAME_LOWER");
    else tmb_ints(&b, node, "pads", t->pads, 2 * t->nsp);
    if (t->opad[0] || t->opad[1] || t->opad[2]) tmb_ints(&b, node, "output_padding", t->opad, t->nsp);
    if (t->G > 1) tmb_int(&b, node, "group", t->G);
    tmb_output(&b, y);
    return tmb_finish(&b, size);
}

/* y[n][g Mg + m][i s + k d - pb] += x[n][g Cg + c][i] w[g Cg + c][m][k], in double; scale: the sum
 * of the terms' magnitudes (and the bias's) per output */
static void ctp_reference(const ctp_case *t, const float *x, const float *w, const float *bias, const int64_t *out,
                          const int64_t *pb, double *want, double *scale) {
    const int nsp = t->nsp;
    const int64_t Cg = t->C / t->G, Mg = t->M / t->G;
    int64_t in_plane = 1, out_plane = 1, kk = 1;
    for (int i = 0; i < nsp; i++) in_plane *= t->in[i], out_plane *= out[i], kk *= t->k[i];
    for (int64_t n = 0; n < t->N; n++)
        for (int64_t m = 0; m < t->M; m++)
            for (int64_t o = 0; o < out_plane; o++) {
                const size_t at = (size_t)((n * t->M + m) * out_plane + o);
                want[at] = bias ? bias[m] : 0.0;
                scale[at] = bias ? fabs(bias[m]) : 0.0;
            }
    for (int64_t n = 0; n < t->N; n++)
        for (int64_t ci = 0; ci < t->C; ci++) {
            const int64_t g = ci / Cg;
            for (int64_t i = 0; i < in_plane; i++) {
                const double xv = x[(n * t->C + ci) * in_plane + i];
                int64_t ip[3] = {0, 0, 0}, q = i;
                for (int a = nsp - 1; a >= 0; a--) ip[a] = q % t->in[a], q /= t->in[a];
                for (int64_t kf = 0; kf < kk; kf++) {
                    int64_t kp[3] = {0, 0, 0}, oidx = 0, kq = kf;
                    bool ok = true;
                    for (int a = nsp - 1; a >= 0; a--) kp[a] = kq % t->k[a], kq /= t->k[a];
                    for (int a = 0; a < nsp; a++) {
                        const int64_t o = ip[a] * t->s[a] + kp[a] * t->d[a] - pb[a];
                        ok &= o >= 0 && o < out[a];
                        oidx = oidx * out[a] + o;
                    }
                    if (!ok) continue;
                    for (int64_t m = 0; m < Mg; m++) {
                        const double p = xv * w[(ci * Mg + m) * kk + kf];
                        const size_t at = (size_t)((n * t->M + g * Mg + m) * out_plane + oidx);
                        want[at] += p;
                        scale[at] += fabs(p);
                    }
                }
            }
        }
}

#define P2(a, b) {a, b, 0}
#define P3(a, b, c) {a, b, c}

KN_TEST(cpu_conv_transpose_phases_match_definition) {
    const ctp_case cases[] = {
        /* 4x4 s2 p1 (the sweep's class), odd plane, bias */
        {2, 1, 8, 6, 1, P2(9, 7), P2(4, 4), P2(2, 2), P2(1, 1), {1, 1, 1, 1}, {0}, {0}, 0, true, false},
        /* rows 29 wide: the GEMM's 16-column blocks cross grid rows at every offset (short
         * segments, the store's masked vectors) */
        {2, 1, 8, 4, 1, P2(5, 29), P2(4, 4), P2(2, 2), P2(1, 1), {1, 1, 1, 1}, {0}, {0}, 0, true, false},
        /* 3x3 s2 p1 output_padding 1 (kernel not a multiple of the stride: zero taps in A) */
        {2, 1, 5, 4, 1, P2(7, 6), P2(3, 3), P2(2, 2), P2(1, 1), {1, 1, 1, 1}, P2(1, 1), {0}, 0, true, false},
        /* stride 3, 5x5, asymmetric pads */
        {2, 1, 3, 5, 1, P2(6, 5), P2(5, 5), P2(3, 3), P2(1, 1), {2, 1, 0, 2}, {0}, {0}, 0, true, false},
        /* 6x6 s3 (divides), stride (3, 2) mixed, output_padding (2, 1) */
        {2, 1, 4, 3, 1, P2(5, 8), P2(6, 4), P2(3, 2), P2(1, 1), {1, 2, 2, 0}, P2(2, 1), {0}, 0, false, false},
        /* 2x2 s2 no pads (the upsamplers), odd width, no bias */
        {2, 1, 16, 8, 1, P2(10, 9), P2(2, 2), P2(2, 2), P2(1, 1), {0, 0, 0, 0}, {0}, {0}, 0, false, false},
        /* groups, weights a graph input */
        {2, 1, 8, 12, 4, P2(6, 5), P2(4, 4), P2(2, 2), P2(1, 1), {1, 1, 1, 1}, {0}, {0}, 0, true, true},
        /* depthwise-like: one channel a group */
        {2, 1, 6, 6, 6, P2(5, 7), P2(4, 4), P2(2, 2), P2(1, 1), {1, 1, 1, 1}, {0}, {0}, 0, true, false},
        /* pads past a grid row (qlo 1) and past the window (im2col's pad negative) */
        {2, 1, 4, 3, 1, P2(8, 9), P2(4, 4), P2(2, 2), P2(1, 1), {3, 5, 2, 4}, {0}, {0}, 0, true, false},
        /* 1-D k16 s8 p4 (HiFi-GAN's upsampler), 1-D k3 s1 */
        {1, 1, 12, 10, 1, {9}, {16}, {8}, {1}, {4, 4}, {0}, {0}, 0, true, false},
        {1, 2, 4, 3, 1, {17}, {3}, {1}, {1}, {1, 1}, {0}, {0}, 0, true, false},
        /* 3-D 2x2x2 s2 and 3x2x4 s(1,2,2) */
        {3, 1, 3, 4, 1, P3(3, 4, 5), P3(2, 2, 2), P3(2, 2, 2), P3(1, 1, 1), {0}, {0}, {0}, 0, true, false},
        {3, 1, 4, 2, 2, P3(3, 3, 4), P3(3, 2, 4), P3(1, 2, 2), P3(1, 1, 1), {1, 0, 1, 1, 1, 2}, {0}, {0}, 0, false, false},
        /* dilation 2 (the column path), output_shape, auto_pad SAME_UPPER / SAME_LOWER */
        {2, 1, 3, 2, 1, P2(5, 5), P2(3, 3), P2(2, 2), P2(2, 2), {1, 1, 1, 1}, {0}, {0}, 0, true, false},
        {2, 1, 4, 3, 1, P2(5, 5), P2(4, 4), P2(2, 2), P2(1, 1), {0}, {0}, P2(11, 10), 0, true, false},
        {2, 1, 3, 2, 1, P2(5, 6), P2(3, 3), P2(2, 2), P2(1, 1), {0}, {0}, {0}, 1, true, false},
        {2, 1, 3, 2, 1, P2(5, 6), P2(4, 4), P2(2, 2), P2(1, 1), {0}, {0}, {0}, 2, false, false},
        /* kernels smaller than the stride: outputs no tap reaches (bias alone) */
        {2, 1, 4, 3, 1, P2(5, 5), P2(1, 1), P2(2, 2), P2(1, 1), {0, 0, 0, 0}, P2(1, 1), {0}, 0, true, false},
        {2, 1, 4, 3, 1, P2(4, 6), P2(2, 2), P2(3, 3), P2(1, 1), {0, 1, 1, 0}, {0}, {0}, 0, true, false},
        /* batch 2, deeper than a GEMM slice (K 96 x 4 = 384), rows 17 wide (vectors and tails) */
        {2, 2, 96, 20, 1, P2(6, 17), P2(4, 4), P2(2, 2), P2(1, 1), {1, 1, 1, 1}, {0}, {0}, 0, true, false},
        /* enough output channels that each row phase gets a product of its own (ct_phase's split:
         * r0 per phase), 2-D and 3-D */
        {2, 1, 8, 64, 1, P2(5, 7), P2(4, 4), P2(2, 2), P2(1, 1), {1, 1, 1, 1}, {0}, {0}, 0, true, false},
        {3, 1, 4, 32, 1, P3(3, 3, 3), P3(4, 4, 4), P3(2, 2, 2), P3(1, 1, 1), {1, 1, 1, 1, 1, 1}, {0}, {0}, 0, true, false},
        /* few grid points, many phase rows: the GEMM runs transposed */
        {2, 1, 32, 96, 1, P2(3, 4), P2(2, 2), P2(2, 2), P2(1, 1), {0, 0, 0, 0}, {0}, {0}, 0, true, false},
        {2, 1, 64, 48, 1, P2(3, 3), P2(4, 4), P2(2, 2), P2(1, 1), {1, 1, 1, 1}, {0}, {0}, 0, false, true},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const ctp_case *t = &cases[ci];
        int64_t out[3] = {1, 1, 1}, pb[3] = {0, 0, 0};
        ctp_geometry(t, out, pb);
        kiln_tensor *consts[2] = {0};
        size_t size;
        unsigned char *m = ctp_model(t, consts, &size);
        if (!m) continue;
        uint32_t seed = 4242 + (uint32_t)ci;
        int64_t xd[5] = {t->N, t->C}, wd[5] = {t->C, t->M / t->G}, ny = t->N * t->M;
        for (int i = 0; i < t->nsp; i++) xd[2 + i] = t->in[i], wd[2 + i] = t->k[i], ny *= out[i];
        kiln_tensor *x = tmb_random_tensor(xd, t->nsp + 2, &seed, 1, 1);
        kiln_tensor *w = consts[0];
        if (t->w_input) w = tmb_random_tensor(wd, t->nsp + 2, &seed, 1, 4.0f);
        double *want = malloc(sizeof(double) * (size_t)ny), *scale = malloc(sizeof(double) * (size_t)ny);
        ctp_reference(t, kiln_tensor_data(x), kiln_tensor_data(w), consts[1] ? kiln_tensor_data(consts[1]) : NULL, out,
                      pb, want, scale);
        /* 0: as chosen; 1: the phase GEMM wherever it applies; 2: the column path */
        for (int force = 0; force <= 2; force++) {
            if (force) setenv("KILN_CT_PHASE", force == 1 ? "1" : "0", 1);
            for (int threads = 1; threads <= 2; threads++) {
                kiln_session *s = tmb_session(m, size, threads, 3);
                if (!s) continue;
                const char *names[2] = {"x", "w"};
                kiln_tensor *ins[2] = {x, w};
                char ctx[160];
                snprintf(ctx, sizeof ctx, "case %zu (%d-D, %lld->%lld g%lld, k%lld s%lld), KILN_CT_PHASE mode %d, %d threads",
                         ci, t->nsp, (long long)t->C, (long long)t->M, (long long)t->G, (long long)t->k[0],
                         (long long)t->s[0], force, threads);
                tmb_check_runs(s, names, ins, t->w_input ? 2 : 1, want, scale, (size_t)ny, 1e-6, 4e-6, ctx);
                kiln_session_destroy(s);
            }
            unsetenv("KILN_CT_PHASE");
        }
        free(want);
        free(scale);
        kiln_tensor_destroy(x);
        if (t->w_input) kiln_tensor_destroy(w);
        kiln_tensor_destroy(consts[0]);
        kiln_tensor_destroy(consts[1]);
        free(m);
    }
}

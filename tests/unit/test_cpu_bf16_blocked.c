/* The blocked bf16 AMX convolution (conv_amx_blocked.c) against a double reference that rounds x
 * and w to bf16 (the products' inputs), for every input layout (fp32 NCHW, bf16 NCHW, blocked),
 * output layout (fp32, bf16, blocked) and residual layout, over 1x1 (the in-place read with its
 * tail copy), 3x3, strided, dilated and odd kernels, odd planes, batch 2, one thread and three; and
 * the layout conversions (any CPU). A blocked output is compared after converting it back, so a
 * wrong position or channel order fails the comparison. And sessions whose values the optimiser keeps
 * blocked (opt pass cpu_bf16_values) against the same model with them unblocked and in fp32. */
#include "backend/cpu/conv_amx_blocked.h"
#include "backend/cpu/pool_blocked.h"
#include "backend/cpu/sgemm_bf16.h"
#include "exec/session.h"
#include "ir/tensor.h"
#include "test_model_builder.h"
#include "unit.h"
#include "util/threadpool.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t brng = 4242;
static float brand(void) {
    brng = brng * 1664525u + 1013904223u;
    return (float)((brng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

KN_TEST(bf16_blocked_layout_round_trip) {
    const int64_t N = 2, C = 64, plane = 13;
    uint16_t *a = malloc(2 * N * C * plane), *b = malloc(2 * N * C * plane), *c = malloc(2 * N * C * plane);
    for (int64_t i = 0; i < N * C * plane; i++) a[i] = (uint16_t)(i * 7 + 3);
    kn_bf16_to_blocked(a, b, N, C, plane);
    /* channel 33 of image 1 at position 5: block 1, lane 1 */
    CHECK(b[((1 * 2 + 1) * plane + 5) * 32 + 1] == a[(1 * C + 33) * plane + 5]);
    kn_bf16_from_blocked(b, c, N, C, plane);
    CHECK(!memcmp(a, c, 2 * (size_t)(N * C * plane)));
    free(a);
    free(b);
    free(c);
}

typedef struct blk_case {
    int64_t N, C, M, H, W, KH, KW, pt, pl, pb, pr, dh, dw, sh, sw;
    int xin;  /* 0 fp32 NCHW, 1 bf16 NCHW, 2 blocked */
    int yout; /* 0 fp32 NCHW, 1 bf16 NCHW, 2 blocked */
    int res;  /* 0 none, 1 NCHW in Y's type (fp32 or bf16; blocked Y: fp32), 2 blocked bf16 */
    bool relu, bias;
} blk_case;

/* the largest |y - ref| / (1 + |ref|) of one case, 1e9 when the kernel failed */
static double blk_case_error(kn_threadpool *pool, const blk_case *k) {
    const int64_t OH = (k->H + k->pt + k->pb - k->dh * (k->KH - 1) - 1) / k->sh + 1;
    const int64_t OW = (k->W + k->pl + k->pr - k->dw * (k->KW - 1) - 1) / k->sw + 1;
    const int64_t nx = k->N * k->C * k->H * k->W, ny = k->N * k->M * OH * OW, nw = k->M * k->C * k->KH * k->KW;
    float *X = malloc(sizeof(float) * nx), *W = malloc(sizeof(float) * nw), *B = malloc(sizeof(float) * k->M);
    float *Z = malloc(sizeof(float) * ny), *Y = malloc(sizeof(float) * ny);
    uint16_t *X16 = malloc(2 * nx), *Xb = malloc(2 * nx), *Z16 = malloc(2 * ny), *Zb = malloc(2 * ny);
    uint16_t *Y16 = malloc(2 * ny), *Yb = malloc(2 * ny);
    for (int64_t i = 0; i < nx; i++) X[i] = brand(), X16[i] = kn_f32_to_bf16(X[i]);
    for (int64_t i = 0; i < nw; i++) W[i] = brand() * 0.2f;
    for (int64_t i = 0; i < k->M; i++) B[i] = brand();
    for (int64_t i = 0; i < ny; i++) Z[i] = brand(), Z16[i] = kn_f32_to_bf16(Z[i]);
    kn_bf16_to_blocked(X16, Xb, k->N, k->C, k->H * k->W);
    kn_bf16_to_blocked(Z16, Zb, k->N, k->M, OH * OW);
    /* output memory filled with a pattern: every value must be written */
    for (int64_t i = 0; i < ny; i++) Y[i] = NAN, Y16[i] = 0x7FC1, Yb[i] = 0x7FC1;
    kn_blocked_conv a = {{k->N, k->C, k->M, k->H, k->W, OH, OW, k->KH, k->KW, k->pt, k->pl, k->dh, k->dw, k->sh, k->sw}};
    a.x = k->xin == 0 ? X : NULL;
    a.x16 = k->xin == 1 ? X16 : NULL;
    a.xb = k->xin == 2 ? Xb : NULL;
    a.w = W;
    a.bias = k->bias ? B : NULL;
    a.y = k->yout == 0 ? Y : NULL;
    a.y16 = k->yout == 1 ? Y16 : NULL;
    a.yb = k->yout == 2 ? Yb : NULL;
    a.add = k->res == 1 && k->yout != 1 ? Z : NULL;
    a.add16 = k->res == 1 && k->yout == 1 ? Z16 : NULL;
    a.addb = k->res == 2 ? Zb : NULL;
    a.lo = k->relu ? 0.0f : -INFINITY;
    a.hi = INFINITY;
    kn_kernel_ctx ctx = {.pool = pool};
    double err = 1e9;
    if (kn_amx_blocked_conv(&ctx, &a) == KILN_OK) {
        if (k->yout == 2) kn_bf16_from_blocked(Yb, Y16, k->N, k->M, OH * OW);
        if (k->yout != 0)
            for (int64_t i = 0; i < ny; i++) Y[i] = kn_bf16_to_f32(Y16[i]);
        err = 0;
        for (int64_t n = 0; n < k->N; n++)
            for (int64_t m = 0; m < k->M; m++)
                for (int64_t oh = 0; oh < OH; oh++)
                    for (int64_t ow = 0; ow < OW; ow++) {
                        double acc = k->bias ? B[m] : 0.0;
                        for (int64_t c = 0; c < k->C; c++)
                            for (int64_t kh = 0; kh < k->KH; kh++)
                                for (int64_t kw = 0; kw < k->KW; kw++) {
                                    const int64_t ih = oh * k->sh + kh * k->dh - k->pt, iw = ow * k->sw + kw * k->dw - k->pl;
                                    if (ih < 0 || ih >= k->H || iw < 0 || iw >= k->W) continue;
                                    acc += (double)kn_bf16_round(X[((n * k->C + c) * k->H + ih) * k->W + iw]) *
                                           (double)kn_bf16_round(W[((m * k->C + c) * k->KH + kh) * k->KW + kw]);
                                }
                        const int64_t at = ((n * k->M + m) * OH + oh) * OW + ow;
                        if (k->res == 1 && k->yout != 1) acc += Z[at];
                        if ((k->res == 1 && k->yout == 1) || k->res == 2) acc += kn_bf16_to_f32(Z16[at]);
                        if (k->relu && acc < 0) acc = 0;
                        const double d = fabs((double)Y[at] - acc) / (1.0 + fabs(acc));
                        if (!(d <= err)) err = isnan(d) ? 1e9 : d;
                    }
    }
    free(X), free(W), free(B), free(Z), free(Y), free(X16), free(Xb), free(Z16), free(Zb), free(Y16), free(Yb);
    return err;
}

KN_TEST(bf16_blocked_amx_convolution_against_reference) {
    if (!kn_bf16_cpu_supported() || !kn_bgemm_amx()) KN_SKIP("this CPU has no AMX (or the OS refused its tile state)");
    static const blk_case cases[] = {
        /* N C M H W KH KW pt pl pb pr dh dw sh sw xin yout res relu bias */
        /* 1x1 stride 1 over a blocked input, read in place: 7x7 (49 positions: the tail copy), 12x12,
         * batch 2 over 5x5 (the tail of the last image), a plane of whole 32-position units */
        {1, 64, 64, 7, 7, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, true, true},
        {1, 64, 96, 12, 12, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 2, 0, 1, false, true},
        {2, 64, 32, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 0, true, false},
        {1, 96, 64, 8, 8, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 2, 1, 1, true, true},
        /* 3x3 stride 1 pads 1, blocked in and out, batch 2, odd plane; 56x56 64 channels (ResNet's) */
        {2, 32, 64, 13, 11, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, true, true},
        {1, 64, 64, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 0, true, true},
        /* strided: 3x3 stride 2 into bf16 NCHW with a bf16 residual, 1x1 stride 2 from fp32 NCHW */
        {1, 64, 32, 15, 15, 3, 3, 1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, true, true},
        {1, 64, 32, 14, 14, 1, 1, 0, 0, 0, 0, 1, 1, 2, 2, 0, 2, 0, false, true},
        {1, 32, 64, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1, 2, 2, 0, 2, 2, true, true},
        /* dilation 2 from bf16 NCHW; a 5x3 kernel at stride (3, 2) with uneven pads; fp32 in and out */
        {1, 32, 32, 9, 20, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 0, false, true},
        {1, 32, 64, 17, 19, 5, 3, 2, 1, 0, 2, 1, 1, 3, 2, 2, 0, 0, true, true},
        {2, 128, 64, 8, 9, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, true, true},
        /* 1x1 over 320 channels (the input's tiles loaded past L1), in place and from fp32 NCHW */
        {1, 320, 64, 9, 9, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, true, true},
        {1, 320, 32, 6, 11, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 0, false, true},
        /* blocked in, Y and residual on a plane narrower than a block (a 32-position block spans 4-5 padded
         * rows: store_block_blocked's runs, their row steps and the pad columns skipped), batch 2 */
        {2, 32, 64, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, true, true},
        {1, 64, 32, 3, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, false, false},
        /* an fp32 NCHW residual into a blocked Y */
        {1, 64, 64, 10, 10, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 1, true, true},
    };
    kn_threadpool *pool3 = NULL;
    CHECK_STATUS(kn_threadpool_create(3, &pool3), KILN_OK);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int th = 0; th < 2; th++) {
            const blk_case *k = &cases[i];
            /* bf16 outputs: the rounding (at most 2^-8 of the value) on top of the fp32 sums */
            const double bound = (k->yout ? 0x1p-8 : 0.0) + 1e-5 + 2e-7 * (double)(k->C * k->KH * k->KW);
            const double err = blk_case_error(th ? pool3 : NULL, k);
            CHECK_MSG(err < bound, "case %zu (C %lld M %lld %lldx%lld, kernel %lldx%lld, stride %lld, in %d out %d res %d, %s): error %g",
                      i, (long long)k->C, (long long)k->M, (long long)k->H, (long long)k->W, (long long)k->KH,
                      (long long)k->KW, (long long)k->sh, k->xin, k->yout, k->res, th ? "3 threads" : "1 thread", err);
        }
    kn_threadpool_destroy(pool3);
}

/* A chain of convolutions on 30x30 planes, 64 channels (the pass blocks values on planes of 28x28
 * and more, channels in 32s): A 1x1, B 3x3, C 1x1, D 1x1 + B's output + Relu, E 3x3 stride 2 (to
 * 15x15, 32 channels), F 1x1 (the output, fp32). With activations=half, B's output (read as C's X
 * and D's residual), C's and D's are kept blocked; without it the same (plain bf16 keeps the block
 * outputs in bf16 where values are blocked); with KILN_CPU_BF16_BLOCKED=0 none. */
static unsigned char *blocked_chain_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){1, 64, 30, 30}, NULL);
    static const struct {
        int64_t M, C, K, stride;
        int in, res; /* indices into v[] (0: x) */
    } L[6] = {{64, 64, 1, 1, 0, -1}, {64, 64, 3, 1, 1, -1}, {64, 64, 1, 1, 2, -1},
              {64, 64, 1, 1, 3, 2},  {32, 64, 3, 2, 4, -1}, {32, 32, 1, 1, 5, -1}};
    int v[7] = {x};
    char nm[32];
    for (int i = 0; i < 6; i++) {
        snprintf(nm, sizeof nm, "w%d", i);
        int w = tmb_const(&b, nm, 4, (int64_t[]){L[i].M, L[i].C, L[i].K, L[i].K}, 0.25f);
        snprintf(nm, sizeof nm, "b%d", i);
        int bb = tmb_const(&b, nm, 1, (int64_t[]){L[i].M}, 0.5f);
        snprintf(nm, sizeof nm, "c%d", i);
        int cv = tmb_value(&b, nm);
        int cn = tmb_node(&b, "Conv", (int[]){v[L[i].in], w, bb}, 3, cv);
        const int64_t p = L[i].K / 2;
        tmb_ints(&b, cn, "pads", (int64_t[]){p, p, p, p}, 4);
        tmb_ints(&b, cn, "strides", (int64_t[]){L[i].stride, L[i].stride}, 2);
        if (i == 5) {
            v[i + 1] = cv;
            break;
        }
        if (L[i].res >= 0) {
            snprintf(nm, sizeof nm, "a%d", i);
            int av = tmb_value(&b, nm);
            tmb_node(&b, "Add", (int[]){cv, v[L[i].res]}, 2, av);
            cv = av;
        }
        snprintf(nm, sizeof nm, "y%d", i);
        v[i + 1] = tmb_value(&b, nm);
        tmb_node(&b, "Relu", (int[]){cv}, 1, v[i + 1]);
    }
    tmb_output(&b, v[6]);
    return tmb_finish(&b, size);
}

/* A model's output for input X of shape dims under precision (NULL: fp32) with activations=half or
 * not and blocked values or not (declined: the blocked kernel declines after the graph was made for
 * it, so the FusedConvs convert their blocked operands around the other routes); *n_blocked: how
 * many nodes of type count_op (NULL: any) write a blocked value */
static kiln_tensor *blocked_session_run(const unsigned char *m, size_t size, const char *precision, bool half,
                                        bool blocked, bool declined, const float *X, const int64_t dims[4],
                                        const char *count_op, int *n_blocked) {
    setenv("KILN_CPU_BF16_BLOCKED", blocked ? "1" : "0", 1);
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_intra_op_threads(o, 2);
    const char *keys[2] = {"precision", "activations"}, *vals[2] = {precision, "half"};
    kiln_session_options_append_provider(o, "cpu", keys, vals, precision ? (half ? 2 : 1) : 0);
    kiln_session *s = NULL;
    kiln_tensor *in = NULL, *out = NULL;
    CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, o, &s), KILN_OK);
    kiln_session_options_destroy(o);
    unsetenv("KILN_CPU_BF16_BLOCKED");
    if (!s) return NULL;
    *n_blocked = 0;
    const kn_graph *g = s->model->graph;
    for (int i = 0; i < g->n_nodes; i++)
        *n_blocked += (!count_op || !strcmp(g->nodes[i].op_type, count_op)) && kn_node_attr(&g->nodes[i], "y_blocked") != NULL;
    kiln_tensor_create(KILN_DTYPE_FLOAT, dims, 4, &in);
    memcpy(kiln_tensor_data(in), X, sizeof(float) * (size_t)(dims[0] * dims[1] * dims[2] * dims[3]));
    const char *names[1] = {"x"};
    if (declined) kn_amx_blocked_decline(true);
    CHECK_STATUS(kiln_session_run(s, names, &in, 1, NULL, 1, &out), KILN_OK);
    if (declined) kn_amx_blocked_decline(false);
    kiln_tensor_destroy(in);
    kiln_session_destroy(s);
    return out;
}

/* the chain's output (1x64x30x30 input); *n_blocked: how many values were kept blocked */
static kiln_tensor *blocked_chain_run(const unsigned char *m, size_t size, const char *precision, bool half,
                                      bool blocked, bool declined, const float *X, int *n_blocked) {
    return blocked_session_run(m, size, precision, half, blocked, declined, X, (int64_t[]){1, 64, 30, 30}, NULL,
                               n_blocked);
}

static double rel_l2(kiln_tensor *a, kiln_tensor *b) {
    if (!a || !b || kiln_tensor_bytes(a) != kiln_tensor_bytes(b)) return 1e9;
    const float *x = kiln_tensor_data(a), *y = kiln_tensor_data(b);
    double num = 0, den = 0;
    for (size_t i = 0; i < kiln_tensor_bytes(a) / sizeof(float); i++) {
        num += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        den += (double)y[i] * y[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

KN_TEST(bf16_blocked_values_in_sessions) {
    if (!kn_bf16_cpu_supported() || !kn_bgemm_amx()) KN_SKIP("this CPU has no AMX (or the OS refused its tile state)");
    size_t size;
    unsigned char *m = blocked_chain_model(&size);
    float *X = malloc(sizeof(float) * 64 * 900);
    uint32_t seed = 3;
    for (int i = 0; i < 64 * 900; i++) X[i] = tmb_rand(&seed);
    int nb = 0;
    kiln_tensor *ref = blocked_chain_run(m, size, NULL, false, false, false, X, &nb);
    kiln_tensor *on_half = NULL, *fb_half = NULL;
    for (int half = 1; half >= 0; half--) {
        int n_on = -1, n_off = -1, n_fb = -1;
        kiln_tensor *on = blocked_chain_run(m, size, "bf16", half, true, false, X, &n_on);
        kiln_tensor *off = blocked_chain_run(m, size, "bf16", half, false, false, X, &n_off);
        kiln_tensor *fb = blocked_chain_run(m, size, "bf16", half, true, true, X, &n_fb);
        CHECK_MSG(n_on == 3 && n_off == 0 && n_fb == n_on, "values kept blocked: %d (off: %d), half %d", n_on, n_off, half);
        /* the bf16 runs round the same values (plain bf16 unblocked: the block outputs stay fp32, so
         * not quite); they differ by the sums' order and ties at most */
        const double d = rel_l2(on, off), e = rel_l2(on, ref);
        CHECK_MSG(d < 4e-3 && e < 1e-2, "half %d: blocked against unblocked %g, against fp32 %g", half, d, e);
        if (half) {
            /* the converted route runs the unblocked graph's kernels on the same values: bit for bit */
            const double f = rel_l2(fb, off);
            CHECK_MSG(f == 0.0, "converted against unblocked %g", f);
            on_half = on;
            fb_half = fb;
        } else {
            /* plain bf16 with blocking on keeps the block outputs in bf16 as activations=half does:
             * the same graph, so the same bits (blocked and converted) */
            const double g = rel_l2(on, on_half), h = rel_l2(fb, fb_half);
            CHECK_MSG(g == 0.0 && h == 0.0, "plain against activations=half: blocked %g, converted %g", g, h);
            kiln_tensor_destroy(on);
            kiln_tensor_destroy(fb);
        }
        kiln_tensor_destroy(off);
    }
    kiln_tensor_destroy(on_half);
    kiln_tensor_destroy(fb_half);
    kiln_tensor_destroy(ref);
    free(X);
    free(m);
}

/* MaxPool of bf16 NCHW into the blocked layout (pool_blocked.c), vector and scalar code, 1 and 3
 * threads, against the definition (the max over each window's input positions, pads excluded),
 * bit for bit: ResNet's stem pool, odd planes (row tails), stride 1 with a 5x5 window (SPP),
 * dilation, windows past the end (ceil_mode's last column), a 1x1 window at stride 2, batch 2; the
 * inputs hold -inf, NaNs of both signs (skipped) and -0. The output memory is NaN-filled first. Any
 * CPU. */
typedef struct pool_case {
    int64_t N, C, H, W, K, S, P, D, OH, OW; /* square window K, stride S, leading pads P, dilation D */
} pool_case;

static int64_t pool_case_mismatches(kn_threadpool *tp, const pool_case *k) {
    const int64_t nx = k->N * k->C * k->H * k->W, ny = k->N * k->C * k->OH * k->OW;
    uint16_t *x = malloc(2 * (size_t)nx), *y = malloc(2 * (size_t)ny);
    for (int64_t i = 0; i < nx; i++) x[i] = kn_f32_to_bf16(brand() * 8.0f);
    for (int64_t i = 0; i < nx; i += 97) x[i] = 0xFF80; /* -inf here and there */
    for (int64_t i = 5; i < nx; i += 89) x[i] = 0x7FC0;  /* NaNs (skipped, as by `v > m`) */
    for (int64_t i = 7; i < nx; i += 131) x[i] = 0xFFC1;
    for (int64_t i = 11; i < nx; i += 101) x[i] = 0x8000; /* -0 (below +0 there: no +0 around) */
    for (int64_t i = 0; i < ny; i++) y[i] = 0x7FC1;
    kn_window w = {.nsp = 2, .in = {k->H, k->W}, .kernel = {k->K, k->K}, .stride = {k->S, k->S},
                   .dilation = {k->D, k->D}, .pad_begin = {k->P, k->P}, .out = {k->OH, k->OW}, .known = true};
    int64_t bad = 0;
    if (!kn_max_pool_blocked_takes(&w) || !kn_max_pool_blocked(tp, &w, x, y, k->N, k->C)) bad = -1;
    for (int64_t n = 0; n < k->N && bad >= 0; n++)
        for (int64_t c = 0; c < k->C; c++)
            for (int64_t oh = 0; oh < k->OH; oh++)
                for (int64_t ow = 0; ow < k->OW; ow++) {
                    float m = -INFINITY;
                    for (int64_t a = 0; a < k->K; a++)
                        for (int64_t b = 0; b < k->K; b++) {
                            const int64_t ih = oh * k->S - k->P + a * k->D, iw = ow * k->S - k->P + b * k->D;
                            if (ih < 0 || ih >= k->H || iw < 0 || iw >= k->W) continue;
                            const float v = kn_bf16_to_f32(x[((n * k->C + c) * k->H + ih) * k->W + iw]);
                            if (v > m) m = v;
                        }
                    const uint16_t got = y[(((n * k->C + c) / 32 * k->OH + oh) * k->OW + ow) * 32 + c % 32];
                    bad += got != kn_f32_to_bf16(m);
                }
    free(x);
    free(y);
    return bad;
}

KN_TEST(bf16_blocked_max_pool_against_definition) {
    static const pool_case cases[] = {
        {1, 64, 112, 112, 3, 2, 1, 1, 56, 56}, {2, 32, 23, 37, 3, 2, 1, 1, 12, 19}, {1, 96, 13, 13, 5, 1, 2, 1, 13, 13},
        {1, 32, 20, 17, 3, 1, 0, 2, 16, 13},   {1, 32, 10, 10, 3, 2, 0, 1, 5, 5},   {1, 64, 5, 3, 1, 2, 0, 1, 3, 2},
    };
    kn_threadpool *pool3 = NULL;
    CHECK_STATUS(kn_threadpool_create(3, &pool3), KILN_OK);
    for (int scalar = 0; scalar < 2; scalar++) {
        kn_max_pool_blocked_scalar(scalar);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            for (int th = 0; th < 2; th++) {
                const int64_t bad = pool_case_mismatches(th ? pool3 : NULL, &cases[i]);
                CHECK_MSG(bad == 0, "case %zu (%s, %s): %lld outputs differ", i, scalar ? "scalar" : "vector",
                          th ? "3 threads" : "1 thread", (long long)bad);
            }
    }
    kn_max_pool_blocked_scalar(false);
    /* a window with no input position is not taken */
    kn_window w = {.nsp = 2, .in = {4, 4}, .kernel = {2, 2}, .stride = {1, 1}, .dilation = {1, 1}, .pad_begin = {2, 0},
                   .out = {5, 3}, .known = true};
    CHECK(!kn_max_pool_blocked_takes(&w));
    kn_threadpool_destroy(pool3);
}

/* A ResNet stem at small size, batch 2: Conv 3 -> 64 7x7 stride 2 + Relu, MaxPool 3x3 stride 2
 * (its output read by A 1x1 64 -> 64 + Relu and by the downsample D 1x1 64 -> 128), B 3x3 + Relu on
 * A, C 1x1 on B, + D + Relu (the output). Under bf16 with blocked values the MaxPool writes its output
 * blocked (y_blocked) and A and D read it in place; with the convolutions declining, they convert
 * it back: the blocked-off graph's output bit for bit (the max is exact). */
static unsigned char *stem_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){2, 3, 36, 36}, NULL);
    int w0 = tmb_const(&b, "w0", 4, (int64_t[]){64, 3, 7, 7}, 0.2f), b0 = tmb_const(&b, "b0", 1, (int64_t[]){64}, 0.3f);
    int c0 = tmb_value(&b, "c0"), r0 = tmb_value(&b, "r0"), p0 = tmb_value(&b, "p0");
    int n0 = tmb_node(&b, "Conv", (int[]){x, w0, b0}, 3, c0);
    tmb_ints(&b, n0, "pads", (int64_t[]){3, 3, 3, 3}, 4);
    tmb_ints(&b, n0, "strides", (int64_t[]){2, 2}, 2);
    tmb_node(&b, "Relu", (int[]){c0}, 1, r0);
    int np = tmb_node(&b, "MaxPool", (int[]){r0}, 1, p0);
    tmb_ints(&b, np, "kernel_shape", (int64_t[]){3, 3}, 2);
    tmb_ints(&b, np, "strides", (int64_t[]){2, 2}, 2);
    tmb_ints(&b, np, "pads", (int64_t[]){1, 1, 1, 1}, 4);
    /* A, B, C, then D (the order of the exports: fuse_conv fuses the Add into C, D's output its
     * residual) */
    static const struct {
        int64_t M, C, K;
        int in; /* 0: the pool, else 1 + layer */
    } L[4] = {{64, 64, 1, 0}, {64, 64, 3, 1}, {128, 64, 1, 2}, {128, 64, 1, 0}};
    int v[4];
    char nm[16];
    for (int i = 0; i < 4; i++) {
        snprintf(nm, sizeof nm, "w%d", i + 1);
        int w = tmb_const(&b, nm, 4, (int64_t[]){L[i].M, L[i].C, L[i].K, L[i].K}, 0.25f);
        snprintf(nm, sizeof nm, "b%d", i + 1);
        int bb = tmb_const(&b, nm, 1, (int64_t[]){L[i].M}, 0.5f);
        snprintf(nm, sizeof nm, "c%d", i + 1);
        int cv = tmb_value(&b, nm);
        int cn = tmb_node(&b, "Conv", (int[]){L[i].in ? v[L[i].in - 1] : p0, w, bb}, 3, cv);
        const int64_t p = L[i].K / 2;
        tmb_ints(&b, cn, "pads", (int64_t[]){p, p, p, p}, 4);
        v[i] = cv;
        if (i >= 2) continue; /* C and D: the Add and Relu below */
        snprintf(nm, sizeof nm, "y%d", i + 1);
        v[i] = tmb_value(&b, nm);
        tmb_node(&b, "Relu", (int[]){cv}, 1, v[i]);
    }
    int a = tmb_value(&b, "a"), y = tmb_value(&b, "y");
    tmb_node(&b, "Add", (int[]){v[2], v[3]}, 2, a);
    tmb_node(&b, "Relu", (int[]){a}, 1, y);
    tmb_output(&b, y);
    return tmb_finish(&b, size);
}

/* the stem model's output (2x3x36x36 input); *pools_blocked: MaxPools writing a blocked value */
static kiln_tensor *stem_run(const unsigned char *m, size_t size, bool bf16, bool blocked, bool declined, const float *X,
                             int *pools_blocked) {
    return blocked_session_run(m, size, bf16 ? "bf16" : NULL, true, blocked, declined, X, (int64_t[]){2, 3, 36, 36},
                               "MaxPool", pools_blocked);
}

KN_TEST(bf16_blocked_max_pool_in_sessions) {
    if (!kn_bf16_cpu_supported() || !kn_bgemm_amx()) KN_SKIP("this CPU has no AMX (or the OS refused its tile state)");
    size_t size;
    unsigned char *m = stem_model(&size);
    const int nx = 2 * 3 * 36 * 36;
    float *X = malloc(sizeof(float) * nx);
    uint32_t seed = 5;
    for (int i = 0; i < nx; i++) X[i] = tmb_rand(&seed);
    int p_ref = -1, p_on = -1, p_off = -1, p_fb = -1;
    kiln_tensor *ref = stem_run(m, size, false, false, false, X, &p_ref);
    kiln_tensor *on = stem_run(m, size, true, true, false, X, &p_on);
    kiln_tensor *off = stem_run(m, size, true, false, false, X, &p_off);
    kiln_tensor *fb = stem_run(m, size, true, true, true, X, &p_fb);
    CHECK_MSG(p_on == 1 && p_fb == 1 && p_off == 0 && p_ref == 0, "MaxPools blocked: %d, declined %d, off %d, fp32 %d",
              p_on, p_fb, p_off, p_ref);
    const double d = rel_l2(on, off), e = rel_l2(on, ref), f = rel_l2(fb, off);
    CHECK_MSG(d < 4e-3 && e < 1e-2 && f == 0.0, "blocked against unblocked %g, against fp32 %g; converted against unblocked %g",
              d, e, f);
    kiln_tensor_destroy(ref);
    kiln_tensor_destroy(on);
    kiln_tensor_destroy(off);
    kiln_tensor_destroy(fb);
    free(X);
    free(m);
}

/* GPU tests: the field regressions (a Gemm with transB=1 on A [1,128], B [1152,128], with and
 * without a broadcast bias; Conv1d + bias + ReLU, strided and dilated, fused and unfused) at every
 * optimisation level on CUDA against the CPU; steady-state runs make no device allocation; strict
 * mode names the node it cannot run; the zoo in fp16 and bf16 within a relative L2 error of 1e-2.
 * Without a usable CUDA device each test is skipped (and says so). */
#include "test_model_builder.h"
#include "unit_zoo.h"

#include "backend/backend.h"
#include "exec/session.h"
#include "ir/graph.h"
#include "onnx/writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ running */

static kiln_session *session_for(const unsigned char *data, size_t size, const char *provider, const char *precision,
                                 int level) {
    kiln_session_options *o;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, level);
    kiln_session_options_set_cache(o, 0, NULL);
    const char *k[1] = {"precision"}, *v[1] = {precision};
    char list[64];
    snprintf(list, sizeof list, "%s", provider);
    for (char *save = NULL, *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save))
        kiln_session_options_append_provider(o, p, !strcmp(p, "cuda") && precision ? k : NULL,
                                             !strcmp(p, "cuda") && precision ? v : NULL, !strcmp(p, "cuda") && precision);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(data, size, NULL, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "session (%s, level %d): %s", provider, level, kiln_last_error());
    return s;
}

static kn_tensor *run1(kiln_session *s, kn_tensor *x) {
    kiln_value_info info;
    kiln_session_input_info(s, 0, &info);
    const char *names[1] = {info.name};
    kn_tensor *ins[1] = {x}, *out[1] = {NULL};
    kiln_status st = kiln_session_run(s, names, ins, 1, NULL, 1, out);
    CHECK_MSG(st == KILN_OK, "run: %s", kiln_last_error());
    return out[0];
}

static int close_enough(const kn_tensor *a, const kn_tensor *b, double rtol, double atol, const char *what) {
    if (!a || !b) return 0;
    if (a->rank != b->rank || kn_tensor_count(a) != kn_tensor_count(b)) {
        kn_unit_fail(__FILE__, __LINE__, "%s: shapes differ", what);
        return 0;
    }
    const float *x = a->data, *y = b->data;
    for (int64_t i = 0; i < kn_tensor_count(a); i++)
        if (!(fabs((double)x[i] - y[i]) <= atol + rtol * fabs((double)y[i]))) {
            kn_unit_fail(__FILE__, __LINE__, "%s: element %lld is %.7g on CUDA, %.7g on the CPU", what, (long long)i,
                         x[i], y[i]);
            return 0;
        }
    return 1;
}

static kn_tensor *random_input(int rank, const int64_t *dims, uint32_t seed) {
    kn_tensor *t;
    kn_tensor_new(KILN_DTYPE_FLOAT, rank, dims, &t);
    float *p = t->data;
    for (int64_t i = 0; i < kn_tensor_count(t); i++) p[i] = tmb_rand(&seed);
    return t;
}

/* Runs the model on the CPU at level 0 and on CUDA at every level; compares. */
static void compare_levels(const unsigned char *data, size_t size, kn_tensor *x, const char *what) {
    kiln_session *ref = session_for(data, size, "cpu", NULL, 0);
    if (!ref) return;
    kn_tensor *want = run1(ref, x);
    for (int level = 0; level <= 3; level++) {
        kiln_session *s = session_for(data, size, "cuda", NULL, level);
        if (!s) continue;
        kn_tensor *got = run1(s, x);
        char w[160];
        snprintf(w, sizeof w, "%s at level %d", what, level);
        close_enough(got, want, 1e-4, 1e-5, w);
        kn_tensor_free(got);
        kiln_session_destroy(s);
    }
    kn_tensor_free(want);
    kiln_session_destroy(ref);
}

/* Runs the model on the CPU at level 0 and in session s (taken: destroyed here); compares within
 * rtol = atol = tol. */
static void compare_session(const unsigned char *data, size_t size, kiln_session *s, kn_tensor *x, double tol,
                            const char *what) {
    kiln_session *ref = session_for(data, size, "cpu", NULL, 0);
    if (ref && s) {
        kn_tensor *want = run1(ref, x), *got = run1(s, x);
        close_enough(got, want, tol, tol, what);
        kn_tensor_free(want);
        kn_tensor_free(got);
    }
    kiln_session_destroy(ref);
    kiln_session_destroy(s);
}

/* ------------------------------------------------------------------ field regressions */

static unsigned char *gemm_model(bool bias, bool relu, size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int64_t ad[2] = {1, 128}, bd[2] = {1152, 128}, cd[1] = {1152};
    int a = tmb_input(&b, "A", KILN_DTYPE_FLOAT, 2, ad, NULL);
    int w = tmb_const(&b, "B", 2, bd, 0.1f);
    int ins[3] = {a, w, bias ? tmb_const(&b, "C", 1, cd, 0.5f) : -1};
    int y = tmb_value(&b, "Y");
    int out = relu ? tmb_value(&b, "G") : y;
    int n = tmb_node_in(&b, "Gemm", "", ins, bias ? 3 : 2, out);
    tmb_int(&b, n, "transB", 1);
    if (relu) {
        int r[1] = {out};
        tmb_node_in(&b, "Relu", "", r, 1, y);
    }
    tmb_output(&b, y);
    return tmb_finish(&b, size);
}

KN_TEST(cuda_field_gemm_transB) {
    NEED_GPU();
    int64_t ad[2] = {1, 128};
    kn_tensor *x = random_input(2, ad, 7);
    for (int bias = 0; bias < 2; bias++)
        for (int relu = 0; relu < 2; relu++) {
            size_t size;
            unsigned char *m = gemm_model(bias, relu, &size);
            char what[96];
            snprintf(what, sizeof what, "Gemm [1,128] x [1152,128]^T%s%s", bias ? " + C[1152]" : "", relu ? " + Relu" : "");
            compare_levels(m, size, x, what);
            free(m);
        }
    kn_tensor_free(x);
}

/* Conv1d + bias + ReLU, twice (strided, then dilated), as separate nodes or as kiln.FusedConv. */
static unsigned char *conv1d_model(int64_t stride, int64_t dilation, const int64_t *pads, bool fused, size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int64_t xd[3] = {2, 16, 100}, w1d[3] = {32, 16, 3}, b1d[1] = {32}, w2d[3] = {24, 32, 5}, b2d[1] = {24};
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 3, xd, NULL);
    int cur = x;
    for (int layer = 0; layer < 2; layer++) {
        char nm[32];
        snprintf(nm, sizeof nm, "W%d", layer);
        int w = tmb_const(&b, nm, 3, layer ? w2d : w1d, 0.2f);
        snprintf(nm, sizeof nm, "B%d", layer);
        int bb = tmb_const(&b, nm, 1, layer ? b2d : b1d, 0.5f);
        snprintf(nm, sizeof nm, "Y%d", layer);
        int y = tmb_value(&b, nm);
        int ins[3] = {cur, w, bb};
        snprintf(nm, sizeof nm, "C%d", layer);
        int conv_out = fused ? y : tmb_value(&b, nm);
        int n = tmb_node_in(&b, fused ? "FusedConv" : "Conv", fused ? "kiln" : "", ins, 3, conv_out);
        int64_t st[1] = {layer == 0 ? stride : 1}, dl[1] = {layer == 1 ? dilation : 1};
        tmb_ints(&b, n, "strides", st, 1);
        tmb_ints(&b, n, "dilations", dl, 1);
        tmb_ints(&b, n, "pads", pads, 2);
        if (fused) {
            tmb_str(&b, n, "activation", "Relu");
        } else {
            int r[1] = {conv_out};
            tmb_node_in(&b, "Relu", "", r, 1, y);
        }
        cur = y;
    }
    tmb_output(&b, cur);
    return tmb_finish(&b, size);
}

KN_TEST(cuda_field_conv1d_bias_relu) {
    NEED_GPU();
    int64_t xd[3] = {2, 16, 100};
    kn_tensor *x = random_input(3, xd, 11);
    static const int64_t pads[3][2] = {{1, 1}, {0, 0}, {2, 1}};
    for (int fused = 0; fused < 2; fused++)
        for (int p = 0; p < 3; p++) {
            size_t size;
            unsigned char *m = conv1d_model(2, 2, pads[p], fused, &size);
            char what[128];
            snprintf(what, sizeof what, "Conv1d stride 2 / dilation 2, pads [%lld,%lld], %s", (long long)pads[p][0],
                     (long long)pads[p][1], fused ? "kiln.FusedConv" : "Conv + Relu");
            compare_levels(m, size, x, what);
            free(m);
        }
    kn_tensor_free(x);
}

/* A pointwise Conv (1x1 kernel, unit strides, no padding, one group), which CUDA runs as a matrix
 * product per image: [N, 24, H, W] -> [N, 40, H, W] with bias, for a feature map and for a 1x1 map
 * (squeeze-excite), batch 2 and 3; fp32 at every level and the fp16 precision against the CPU. */
static unsigned char *pointwise_model(const int64_t *xd, int64_t stride, size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int64_t wd[4] = {40, 24, 1, 1}, bd[1] = {40};
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 4, xd, NULL);
    int ins[3] = {x, tmb_const(&b, "W", 4, wd, 0.3f), tmb_const(&b, "B", 1, bd, 0.5f)};
    int y = tmb_value(&b, "Y");
    int n = tmb_node_in(&b, "Conv", "", ins, 3, y);
    int64_t st[2] = {stride, stride};
    tmb_ints(&b, n, "strides", st, 2);
    tmb_output(&b, y);
    return tmb_finish(&b, size);
}

KN_TEST(cuda_pointwise_conv_matches_cpu) {
    NEED_GPU();
    static const int64_t shapes[4][4] = {{2, 24, 7, 9}, {3, 24, 1, 1}, {2, 24, 7, 9}, {4, 24, 8, 6}};
    static const int64_t strides[4] = {1, 1, 2, 3};
    for (int k = 0; k < 8; k++) {
        /* the second time channels last (level 3 with KILN_LAYOUT=nhwc) */
        const int s_ = k % 4;
        if (k == 4) setenv("KILN_LAYOUT", "nhwc", 1);
        size_t size;
        unsigned char *m = pointwise_model(shapes[s_], strides[s_], &size);
        kn_tensor *x = random_input(4, shapes[s_], 21 + s_);
        char what[128];
        snprintf(what, sizeof what, "pointwise Conv [%lld,24,%lld,%lld] stride %lld -> 40 channels%s",
                 (long long)shapes[s_][0], (long long)shapes[s_][2], (long long)shapes[s_][3], (long long)strides[s_],
                 k >= 4 ? " (KILN_LAYOUT=nhwc)" : "");
        compare_levels(m, size, x, what);
        snprintf(what + strlen(what), sizeof what - strlen(what), " in fp16");
        compare_session(m, size, session_for(m, size, "cuda", "fp16", 0), x, 1e-2, what);
        kn_tensor_free(x);
        free(m);
    }
    unsetenv("KILN_LAYOUT");
}

/* One Conv1d with a bias: [N, C, L] -> [N, M, OL], kernel k. */
static unsigned char *conv1d_one_model(const int64_t *xd, int64_t m, int64_t k, int64_t stride, int64_t dil,
                                       const int64_t *pads, size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int64_t wd[3] = {m, xd[1], k}, bd[1] = {m};
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 3, xd, NULL);
    int ins[3] = {x, tmb_const(&b, "W", 3, wd, 0.3f), tmb_const(&b, "B", 1, bd, 0.5f)};
    int y = tmb_value(&b, "Y");
    int n = tmb_node_in(&b, "Conv", "", ins, 3, y);
    int64_t st[1] = {stride}, dl[1] = {dil};
    tmb_ints(&b, n, "strides", st, 1);
    tmb_ints(&b, n, "dilations", dl, 1);
    tmb_ints(&b, n, "pads", pads, 2);
    tmb_output(&b, y);
    return tmb_finish(&b, size);
}

static double rel_l2(const kn_tensor *got, const kn_tensor *want) {
    const float *g = got->data, *w = want->data;
    double num = 0, den = 0;
    for (int64_t i = 0; i < kn_tensor_count(want); i++) {
        num += ((double)g[i] - w[i]) * ((double)g[i] - w[i]);
        den += (double)w[i] * w[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* A CUDA session at level 3 with precision fp16 and activations=half (tensors in float16). */
static kiln_session *half_session(const unsigned char *m, size_t size) {
    kiln_session_options *o;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, 3);
    kiln_session_options_set_cache(o, 0, NULL);
    const char *k[2] = {"precision", "activations"}, *v[2] = {"fp16", "half"};
    kiln_session_options_append_provider(o, "cuda", k, v, 2);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(m, size, NULL, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "fp16 session: %s", kiln_last_error());
    return s;
}

/* 1-D convolutions run as a matrix product over the input's gathered columns (cuda_conv.c,
 * run_columns_1d), and with KILN_CUDA_CONV1D_COLUMNS=0 through cuDNN: both against the CPU, fp32 at
 * levels 0 and 3, and fp16 with activations=half within a relative L2 error of 5e-3. The shapes:
 * a whisper-style front end (kernel 3, pads 1, stride 1 and 2), an STFT-style strided long kernel
 * (1 channel, kernel 64, stride 32), asymmetric pads with dilation, a strided 1-tap kernel, batch 3. */
KN_TEST(cuda_conv1d_columns_match_cpu) {
    NEED_GPU();
    static const struct {
        int64_t x[3], m, k, stride, dil, pads[2];
    } cases[] = {
        {{1, 80, 300}, 96, 3, 1, 1, {1, 1}},  {{1, 96, 300}, 96, 3, 2, 1, {1, 1}}, {{2, 1, 4000}, 66, 64, 32, 1, {0, 0}},
        {{3, 12, 77}, 20, 5, 1, 3, {4, 1}},   {{2, 16, 50}, 8, 1, 2, 1, {0, 0}},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        size_t size;
        unsigned char *m = conv1d_one_model(cases[ci].x, cases[ci].m, cases[ci].k, cases[ci].stride, cases[ci].dil,
                                            cases[ci].pads, &size);
        kn_tensor *x = random_input(3, cases[ci].x, 31 + (uint32_t)ci);
        kiln_session *ref = session_for(m, size, "cpu", NULL, 0);
        kn_tensor *want = ref ? run1(ref, x) : NULL;
        for (int columns = 1; want && columns >= 0; columns--) {
            setenv("KILN_CUDA_CONV1D_COLUMNS", columns ? "1" : "0", 1);
            char what[160];
            for (int level = 0; level <= 3; level += 3) {
                kiln_session *s = session_for(m, size, "cuda", NULL, level);
                if (!s) continue;
                kn_tensor *got = run1(s, x);
                snprintf(what, sizeof what, "Conv1d [%lld,%lld,%lld] k%lld s%lld d%lld, %s, level %d",
                         (long long)cases[ci].x[0], (long long)cases[ci].x[1], (long long)cases[ci].x[2],
                         (long long)cases[ci].k, (long long)cases[ci].stride, (long long)cases[ci].dil,
                         columns ? "columns" : "cuDNN", level);
                close_enough(got, want, 1e-4, 1e-4, what);
                kn_tensor_free(got);
                kiln_session_destroy(s);
            }
            kiln_session *half = half_session(m, size);
            if (half) {
                kn_tensor *got = run1(half, x);
                double e = got ? rel_l2(got, want) : 1;
                CHECK_MSG(e < 5e-3, "Conv1d case %zu (%s) in fp16, activations=half: relative L2 error %.3g", ci,
                          columns ? "columns" : "cuDNN", e);
                kn_tensor_free(got);
                kiln_session_destroy(half);
            }
        }
        unsetenv("KILN_CUDA_CONV1D_COLUMNS");
        kn_tensor_free(want);
        kiln_session_destroy(ref);
        kn_tensor_free(x);
        free(m);
    }
}

/* Elementwise operators that level 3 fuses into one kiln.FusedElementwise (an interpreted chain on
 * CUDA, its registers in shared memory): Sub(Sigmoid(Mul(Add(X, B), S)), C) with B [16, 1] and C
 * [W] broadcast along different dims (strided inputs), S one value; X [N, 16, W] for a small and
 * a large N. W 40 runs in 16-byte words (k_chain_words: B one element a word, C whole words), W 7
 * an element at a time. Against the CPU at every level in fp32, and in float16 (activations=half). */
static unsigned char *chain_model(int64_t n, int64_t w, size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int64_t xd[3] = {n, 16, w}, bd[2] = {16, 1}, cd[1] = {w}, sd[1] = {1};
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 3, xd, NULL);
    int bb = tmb_const(&b, "B", 2, bd, 1.0f), sc = tmb_const(&b, "S", 1, sd, 2.0f), cc = tmb_const(&b, "C", 1, cd, 0.5f);
    int t1 = tmb_value(&b, "T1"), t2 = tmb_value(&b, "T2"), t3 = tmb_value(&b, "T3"), y = tmb_value(&b, "Y");
    int i1[2] = {x, bb}, i2[2] = {t1, sc}, i3[1] = {t2}, i4[2] = {t3, cc};
    tmb_node(&b, "Add", i1, 2, t1);
    tmb_node(&b, "Mul", i2, 2, t2);
    tmb_node(&b, "Sigmoid", i3, 1, t3);
    tmb_node(&b, "Sub", i4, 2, y);
    tmb_output(&b, y);
    return tmb_finish(&b, size);
}

KN_TEST(cuda_elementwise_chain_matches_cpu) {
    NEED_GPU();
    static const int64_t batches[3] = {3, 4099, 5}, widths[3] = {40, 40, 7};
    for (int k = 0; k < 3; k++) {
        size_t size;
        unsigned char *m = chain_model(batches[k], widths[k], &size);
        int64_t xd[3] = {batches[k], 16, widths[k]};
        kn_tensor *x = random_input(3, xd, 41 + k);
        char what[96];
        snprintf(what, sizeof what, "Sub(Sigmoid(Mul(Add(X, B), S)), C), X [%lld, 16, %lld]", (long long)batches[k],
                 (long long)widths[k]);
        compare_levels(m, size, x, what);
        snprintf(what + strlen(what), sizeof what - strlen(what), " in float16");
        compare_session(m, size, half_session(m, size), x, 4e-3, what);
        kn_tensor_free(x);
        free(m);
    }
}

/* Pad (opset 19) of X (rank 4) with pads begin..end and a mode */
static unsigned char *pad_model(const int64_t *xd, const int64_t *pads, const char *mode, size_t *size) {
    tmb b;
    tmb_init(&b, 19);
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 4, xd, NULL), y = tmb_value(&b, "Y");
    int in[2] = {x, tmb_const_i64(&b, "pads", pads, 8, false)};
    tmb_str(&b, tmb_node(&b, "Pad", in, 2, y), "mode", mode);
    tmb_output(&b, y);
    return tmb_finish(&b, size);
}

/* The CUDA Pad merges dims where the element order allows (an unpadded inner dim into a padded
 * one only with a constant value) and indexes in 32 bits where it can: every mode, with padded
 * and unpadded dims inside and outside, negative pads (crops), against the CPU. */
KN_TEST(cuda_pad_modes_and_merged_dims_match_cpu) {
    NEED_GPU();
    static const struct {
        int64_t x[4], pads[8];
        const char *mode;
    } cases[] = {
        {{2, 3, 5, 4}, {0, 0, 1, 0, 0, 0, 2, 0}, "constant"},  /* one middle axis: 3 dims become 2 */
        {{2, 6, 5, 4}, {0, -2, 0, 0, 0, 1, 0, 3}, "constant"}, /* a crop and an inner pad */
        {{1, 172, 30, 8}, {0, 0, 0, 0, 0, 0, 11, 0}, "constant"},
        {{2, 5, 3, 4}, {0, 2, 0, 0, 0, 3, 0, 0}, "reflect"},   /* unpadded inner dims stay apart */
        {{1, 2, 4, 5}, {0, 0, 1, 2, 0, 0, 3, 1}, "edge"},
        {{2, 3, 4, 2}, {0, 2, 0, 0, 0, 4, 0, 0}, "wrap"},
        {{3, 1, 1, 7}, {0, 0, 0, 3, 0, 0, 0, 2}, "reflect"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t size;
        unsigned char *m = pad_model(cases[k].x, cases[k].pads, cases[k].mode, &size);
        kn_tensor *x = random_input(4, cases[k].x, 90 + (uint32_t)k);
        char what[160];
        snprintf(what, sizeof what, "Pad %s of [%lld,%lld,%lld,%lld] (case %zu)", cases[k].mode,
                 (long long)cases[k].x[0], (long long)cases[k].x[1], (long long)cases[k].x[2], (long long)cases[k].x[3],
                 k);
        if (m && x) compare_levels(m, size, x, what);
        kn_tensor_free(x);
        free(m);
    }
}

/* LayerNormalization over rows of len (opset 17), with a scale and perhaps a bias */
static unsigned char *layernorm_model(int64_t rows, int64_t len, bool bias, size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int64_t xd[2] = {rows, len}, sd[1] = {len};
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 2, xd, NULL);
    int ins[3] = {x, tmb_const(&b, "scale", 1, sd, 1.5f), bias ? tmb_const(&b, "bias", 1, sd, 0.5f) : -1};
    int y = tmb_value(&b, "Y");
    int n = tmb_node_in(&b, "LayerNormalization", "", ins, bias ? 3 : 2, y);
    tmb_int(&b, n, "axis", -1);
    tmb_output(&b, y);
    return tmb_finish(&b, size);
}

/* The half-precision LayerNorm (a warp a row, the row in registers; one to eight 16-byte words a
 * lane by the row's length) against the CPU's float32, with and without a bias: row lengths of
 * one word, of a lane's whole first word set (256), just past it, and each word count a lane may
 * hold (a kernel each): 520 (3 words for some lanes), BERT-base's 768, 1032 ... 2048. */
KN_TEST(cuda_layernorm_half_matches_cpu) {
    NEED_GPU();
    enum { N_LENS = 11 };
    static const int64_t lens[N_LENS] = {8, 192, 256, 264, 520, 768, 1032, 1280, 1544, 1792, 2048};
    for (int k = 0; k < 4 * N_LENS; k++) {
        const int64_t len = lens[k % N_LENS], rows = 37, xd[2] = {rows, len};
        const bool bias = (k / N_LENS) % 2 == 1, bf16 = k >= 2 * N_LENS;
        size_t size;
        unsigned char *m = layernorm_model(rows, len, bias, &size);
        kn_tensor *x = random_input(2, xd, 91 + (uint32_t)k);
        kiln_session_options *o;
        kiln_session_options_create(&o);
        kiln_session_options_set_cache(o, 0, NULL);
        const char *keys[2] = {"precision", "activations"}, *vals[2] = {bf16 ? "bf16" : "fp16", "half"};
        kiln_session_options_append_provider(o, "cuda", keys, vals, 2);
        kiln_session *half = NULL;
        CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, o, &half), KILN_OK);
        kiln_session_options_destroy(o);
        kiln_session *ref = session_for(m, size, "cpu", NULL, 0);
        if (ref && half) {
            kn_tensor *want = run1(ref, x), *got = run1(half, x);
            char what[96];
            snprintf(what, sizeof what, "LayerNorm [%lld, %lld]%s in %s", (long long)rows, (long long)len,
                     bias ? " with bias" : "", vals[0]);
            /* bfloat16 keeps 8 significant bits: the input and output roundings are 8x float16's */
            close_enough(got, want, bf16 ? 3e-2 : 1e-2, bf16 ? 3e-2 : 1e-2, what);
            kn_tensor_free(want);
            kn_tensor_free(got);
        }
        kiln_session_destroy(ref);
        kiln_session_destroy(half);
        kn_tensor_free(x);
        free(m);
    }
}

KN_TEST(cuda_steady_state_runs_allocate_nothing) {
    NEED_GPU();
    size_t size;
    int64_t pads[2] = {1, 1};
    unsigned char *m = conv1d_model(2, 2, pads, false, &size);
    kiln_session *s = session_for(m, size, "cuda", NULL, 3);
    free(m);
    if (!s) return;
    int64_t xd[3] = {2, 16, 100};
    kn_tensor *x = random_input(3, xd, 3);
    const kn_runtime *rt = s->rt;
    const kn_backend *cu = NULL;
    for (int i = 0; i < rt->n_backends; i++)
        if (!strcmp(rt->backends[i].ops->name, "cuda")) cu = &rt->backends[i];
    CHECK(cu && cu->ops->stats);
    if (cu && cu->ops->stats) {
        uint64_t a1 = 0, a2 = 0;
        size_t live1 = 0, live2 = 0;
        /* warm-up: the first run makes every lazy choice, the second is recorded into a CUDA graph
         * (static shapes), which keeps its buffers for its lifetime */
        kn_tensor_free(run1(s, x));
        kn_tensor_free(run1(s, x));
        cu->ops->stats(cu->state, &a1, &live1, NULL);
        for (int i = 0; i < 3; i++) kn_tensor_free(run1(s, x));
        cu->ops->stats(cu->state, &a2, &live2, NULL);
        CHECK_MSG(a2 == a1, "device allocations grew from %llu to %llu over repeated runs", (unsigned long long)a1,
                  (unsigned long long)a2);
        CHECK_MSG(live2 == live1, "live device bytes went from %zu to %zu", live1, live2);
    }
    kn_tensor_free(x);
    kiln_session_destroy(s);
}

KN_TEST(cuda_strict_names_the_node) {
    NEED_GPU();
    tmb b;
    tmb_init(&b, 17);
    int64_t xd[1] = {8};
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 1, xd, NULL);
    int y = tmb_value(&b, "Y");
    int ins[1] = {x};
    kn_graph_add_node(b.g, "the_unique_node", "Unique", "", ins, 1, &y, 1);
    tmb_output(&b, y);
    size_t size;
    unsigned char *m = tmb_finish(&b, &size);
    kiln_session_options *o;
    kiln_session_options_create(&o);
    const char *k[1] = {"strict"}, *v[1] = {"1"};
    kiln_session_options_append_provider(o, "cuda", k, v, 1);
    kiln_session_options_append_provider(o, "cpu", NULL, NULL, 0);
    kiln_session *s = NULL;
    CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, o, &s), KILN_ERR_UNSUPPORTED);
    CHECK_ERROR_HAS("the_unique_node");
    CHECK_ERROR_HAS("strict");
    kiln_session_destroy(s);
    kiln_session_options_destroy(o);
    free(m);
}

/* ------------------------------------------------------------------ the zoo in reduced precision */

/* Runs a zoo model's data set 0 on CUDA alone (no CPU fallback possible) with these provider
 * options; err[i] gets output i's relative L2 error against the reference (-1 for non-float
 * outputs), want_max the largest |reference| over the float outputs. Returns the output count, or
 * -1 after a failed check. */
static int zoo_errors(const char *dir, const char *const *keys, const char *const *values, size_t n_opts, int level,
                      double *err, double *want_max) {
    char model[4200];
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    kiln_session_options *o;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_opt_level(o, level);
    kiln_session_options_append_provider(o, "cuda", keys, values, n_opts);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create(model, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "%s (%s): %s", dir, values[0], kiln_last_error());
    if (st != KILN_OK) return -1;
    kn_unit_zoo_data d;
    kn_unit_zoo_read(dir, s, &d);
    kn_tensor *out[KN_UNIT_ZOO_MAX_IO] = {0};
    st = kiln_session_run(s, d.names, d.in, d.n_in, NULL, d.n_out, out);
    CHECK_MSG(st == KILN_OK, "%s (%s): %s", dir, values[0], kiln_last_error());
    *want_max = 0;
    for (size_t i = 0; i < d.n_out; i++) {
        err[i] = -1;
        if (st != KILN_OK || !d.want[i] || !kn_dtype_is_float(d.want[i]->dtype)) continue;
        err[i] = kn_unit_rel_l2(out[i], d.want[i]);
        for (int64_t k = 0; k < kn_tensor_count(d.want[i]); k++)
            *want_max = fmax(*want_max, fabs(kn_tensor_get_f64(d.want[i], k)));
    }
    for (size_t i = 0; i < KN_UNIT_ZOO_MAX_IO; i++) kn_tensor_free(out[i]);
    kn_unit_zoo_free(&d);
    kiln_session_destroy(s);
    return st == KILN_OK ? (int)d.n_out : -1;
}

/* Every precision at the default level: fp32 must meet the zoo tolerance's spirit (rel L2 <
 * 1e-4), the others rel L2 < 1e-2 (activations stay float32 between the products). */
static void zoo_precisions(const char *dir, const char *name, void *arg) {
    (void)arg;
    static const char *const precs[4] = {"fp32", "tf32", "fp16", "bf16"};
    static const double limits[4] = {1e-4, 1e-2, 1e-2, 1e-2};
    for (int p = 0; p < 4; p++) {
        const char *k[1] = {"precision"}, *v[1] = {precs[p]};
        double err[KN_UNIT_ZOO_MAX_IO], want_max;
        int no = zoo_errors(dir, k, v, 1, 3, err, &want_max);
        for (int i = 0; i < no; i++) {
            if (err[i] < 0) continue;
            printf("      %-22s %s output %d: relative L2 error %.2e\n", name, precs[p], i, err[i]);
            CHECK_MSG(err[i] < limits[p], "%s (%s) output %d: relative L2 error %.3g >= %.0e", name, precs[p], i, err[i],
                      limits[p]);
        }
    }
}

KN_TEST(cuda_zoo_precisions) {
    NEED_GPU();
    if (!kn_unit_each_zoo_model(zoo_precisions, NULL)) KN_SKIP("the model zoo is not there (set KILN_ZOO)");
}

/* activations=half (level 3: pass lower_precision): the activations are rounded to the half type
 * after each operator, so the bounds are those of that rounding: float16 (11 significant bits)
 * rel L2 < 1e-2 like the other precisions; bfloat16 (8 bits, 8x coarser, rounded at each of a
 * transformer's dozens of operators) < 3e-2. A model whose reference outputs lie below float16's
 * smallest normal (2^-14: the zoo's random-weight CNNs, whose activations shrink block by block
 * to 1e-9 and 1e-13) cannot be represented in float16 at all; it is reported, not checked, in
 * float16. */
static int half_models_unchecked;

static void zoo_half_activations(const char *dir, const char *name, void *arg) {
    (void)arg;
    static const char *const precs[2] = {"fp16", "bf16"};
    static const double limits[2] = {1e-2, 3e-2};
    for (int p = 0; p < 2; p++) {
        const char *k[2] = {"precision", "activations"}, *v[2] = {precs[p], "half"};
        double err[KN_UNIT_ZOO_MAX_IO], want_max;
        int no = zoo_errors(dir, k, v, 2, 3, err, &want_max);
        bool representable = p == 1 || want_max >= 6.103515625e-05;
        if (!representable) half_models_unchecked++;
        for (int i = 0; i < no; i++) {
            if (err[i] < 0) continue;
            printf("      %-22s %s activations=half output %d: relative L2 error %.2e%s\n", name, precs[p], i, err[i],
                   representable ? "" : " (not checked: the reference outputs are below float16's normal range)");
            if (representable)
                CHECK_MSG(err[i] < limits[p], "%s (%s, activations=half) output %d: relative L2 error %.3g >= %.0e", name,
                          precs[p], i, err[i], limits[p]);
        }
    }
}

KN_TEST(cuda_zoo_half_activations) {
    NEED_GPU();
    half_models_unchecked = 0;
    if (!kn_unit_each_zoo_model(zoo_half_activations, NULL)) KN_SKIP("the model zoo is not there (set KILN_ZOO)");
    printf("      %d model(s) not checked in float16 (outputs below its normal range)\n", half_models_unchecked);
}

#ifdef KILN_HAVE_CUDA
/* cuBLASLt and cuDNN are loaded at first use, not linked: every function the backend calls must
 * resolve in the libraries installed here (no GPU needed; skipped where they are not installed). */
KN_TEST(cuda_libraries_resolve) {
    char why[512] = "";
    int n = 0, dnn = 0;
    int ok = kn_cuda_libs_report(why, sizeof why, &n, &dnn);
    if (!ok && strstr(why, "cannot load")) KN_SKIP(why);
    CHECK_MSG(ok, why);
    /* every function of the lists in cuda_libs.h: 14 of cuBLASLt, and 35 of cuDNN when it loaded
     * (29 of its legacy API, 6 of its graph API) */
    CHECK_EQ_INT(n, dnn ? 14 + 35 : 14);
    if (!dnn) printf("    cuDNN not loaded: Conv runs on another provider\n");
}
#endif

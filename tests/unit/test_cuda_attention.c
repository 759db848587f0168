/* GPU tests of the attention family's CUDA kernels (cuda_ops_attention.c, cu_attention.cu): ai.onnx
 * Attention in grouped-query, causal-with-past (3-D, present outputs), boolean-mask (with a fully
 * masked row) and softcap + additive-mask + scores-output configurations, in float32 and float16,
 * and RotaryEmbedding, CausalConvWithState and LinearAttention; each run with provider cuda alone
 * (so a CPU fallback fails the test) and compared with the CPU backend. Skipped without a device. */
#include "test_onemodel.h"

#ifdef KILN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ Attention */

static const kiln_dtype float_types[2] = {KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT16};

KN_TEST(cuda_attention_gqa_4d) {
    NEED_GPU();
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = float_types[t];
        onemodel o;
        om_init(&o, 24);
        int64_t qd[4] = {2, 8, 5, 16}, kd[4] = {2, 2, 7, 16}, vd[4] = {2, 2, 7, 12};
        int in[3] = {om_input(&o, "Q", dt, 4, qd, 1.0f, NULL), om_input(&o, "K", dt, 4, kd, 1.0f, NULL),
                     om_input(&o, "V", dt, 4, vd, 1.0f, NULL)};
        int out[1] = {om_value(&o, "Y")};
        om_node(&o, "Attention", in, 3, out, 1);
        char what[64];
        snprintf(what, sizeof what, "Attention GQA 8/2 heads (%s)", kiln_dtype_name(dt));
        om_compare(&o, rtol_for(dt), atol_for(dt), what);
    }
}

KN_TEST(cuda_attention_causal_past_3d) {
    NEED_GPU();
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = float_types[t];
        onemodel o;
        om_init(&o, 24);
        /* 6 query heads over 2 kv heads, head size 8, 3 new tokens after 5 past ones */
        int64_t qd[3] = {2, 3, 48}, kd[3] = {2, 3, 16}, pd[4] = {2, 2, 5, 8};
        int in[6] = {om_input(&o, "Q", dt, 3, qd, 1.0f, NULL), om_input(&o, "K", dt, 3, kd, 1.0f, NULL),
                     om_input(&o, "V", dt, 3, kd, 1.0f, NULL), -1,
                     om_input(&o, "past_key", dt, 4, pd, 1.0f, NULL), om_input(&o, "past_value", dt, 4, pd, 1.0f, NULL)};
        int out[3] = {om_value(&o, "Y"), om_value(&o, "present_key"), om_value(&o, "present_value")};
        om_node(&o, "Attention", in, 6, out, 3);
        om_int(&o, "q_num_heads", 6);
        om_int(&o, "kv_num_heads", 2);
        om_int(&o, "is_causal", 1);
        char what[80];
        snprintf(what, sizeof what, "Attention causal with past, 3-D (%s)", kiln_dtype_name(dt));
        om_compare(&o, rtol_for(dt), atol_for(dt), what);
    }
}

KN_TEST(cuda_attention_bool_mask) {
    NEED_GPU();
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = float_types[t];
        onemodel o;
        om_init(&o, 24);
        int64_t qd[4] = {2, 3, 4, 8}, kd[4] = {2, 3, 6, 8}, md[4] = {2, 1, 4, 6};
        unsigned char keep[48];
        for (int i = 0; i < 48; i++) keep[i] = (unsigned char)((i * 7 + i / 6) % 3 != 0);
        for (int j = 0; j < 6; j++) keep[6 + j] = 0; /* batch 0, query 1: every key masked */
        int in[4] = {om_input(&o, "Q", dt, 4, qd, 1.0f, NULL), om_input(&o, "K", dt, 4, kd, 1.0f, NULL),
                     om_input(&o, "V", dt, 4, kd, 1.0f, NULL), om_input(&o, "mask", KILN_DTYPE_BOOL, 4, md, 0, keep)};
        /* outputs 1 and 2 (present key/value) omitted: Y and the probabilities */
        int out[4] = {om_value(&o, "Y"), -1, -1, om_value(&o, "probs")};
        om_node(&o, "Attention", in, 4, out, 4);
        om_int(&o, "qk_matmul_output_mode", 3);
        char what[80];
        snprintf(what, sizeof what, "Attention with a boolean mask (%s)", kiln_dtype_name(dt));
        om_compare(&o, rtol_for(dt), atol_for(dt), what);
    }
}

KN_TEST(cuda_attention_softcap_additive_mask) {
    NEED_GPU();
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = float_types[t];
        for (int mode = 0; mode < 3; mode++) {
            onemodel o;
            om_init(&o, 24);
            int64_t qd[4] = {1, 4, 5, 16}, kd[4] = {1, 4, 9, 16}, md[2] = {5, 9};
            int in[4] = {om_input(&o, "Q", dt, 4, qd, 2.0f, NULL), om_input(&o, "K", dt, 4, kd, 2.0f, NULL),
                         om_input(&o, "V", dt, 4, kd, 1.0f, NULL), om_input(&o, "mask", dt, 2, md, 1.0f, NULL)};
            int out[4] = {om_value(&o, "Y"), om_value(&o, "pk"), om_value(&o, "pv"), om_value(&o, "qk")};
            om_node(&o, "Attention", in, 4, out, 4);
            om_float(&o, "softcap", 2.5f);
            om_float(&o, "scale", 0.3f);
            om_int(&o, "qk_matmul_output_mode", mode);
            char what[96];
            snprintf(what, sizeof what, "Attention softcap + additive mask, scores mode %d (%s)", mode,
                     kiln_dtype_name(dt));
            om_compare(&o, rtol_for(dt), atol_for(dt), what);
        }
    }
}

/* a key range long enough for several score-row iterations per thread, with nonpad lengths */
KN_TEST(cuda_attention_long_nonpad) {
    NEED_GPU();
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = float_types[t];
        onemodel o;
        om_init(&o, 24);
        int64_t qd[4] = {2, 4, 33, 64}, kd[4] = {2, 2, 700, 64}, nd[1] = {2};
        int64_t lens[2] = {700, 450};
        int in[7] = {om_input(&o, "Q", dt, 4, qd, 1.0f, NULL), om_input(&o, "K", dt, 4, kd, 1.0f, NULL),
                     om_input(&o, "V", dt, 4, kd, 1.0f, NULL), -1, -1, -1,
                     om_input(&o, "nonpad", KILN_DTYPE_INT64, 1, nd, 0, lens)};
        int out[1] = {om_value(&o, "Y")};
        om_node(&o, "Attention", in, 7, out, 1);
        om_int(&o, "is_causal", 1);
        char what[80];
        snprintf(what, sizeof what, "Attention 700 keys, nonpad lengths (%s)", kiln_dtype_name(dt));
        om_compare(&o, rtol_for(dt), atol_for(dt), what);
    }
}

/* ------------------------------------------------------------------ the smaller operators */

KN_TEST(cuda_rotary_embedding) {
    NEED_GPU();
    for (int t = 0; t < 2; t++)
        for (int inter = 0; inter < 2; inter++) {
            kiln_dtype dt = float_types[t];
            onemodel o;
            om_init(&o, 23);
            int64_t xd[3] = {2, 5, 48}, cd[2] = {20, 4}, pd[2] = {2, 5};
            int64_t pos[10] = {0, 1, 2, 3, 4, 7, 19, 3, 11, 0};
            int in[4] = {om_input(&o, "X", dt, 3, xd, 1.0f, NULL), om_input(&o, "cos", dt, 2, cd, 1.0f, NULL),
                         om_input(&o, "sin", dt, 2, cd, 1.0f, NULL),
                         om_input(&o, "pos", KILN_DTYPE_INT64, 2, pd, 0, pos)};
            int out[1] = {om_value(&o, "Y")};
            om_node(&o, "RotaryEmbedding", in, 4, out, 1);
            om_int(&o, "num_heads", 4);
            om_int(&o, "rotary_embedding_dim", 8);
            om_int(&o, "interleaved", inter);
            char what[80];
            snprintf(what, sizeof what, "RotaryEmbedding interleaved=%d (%s)", inter, kiln_dtype_name(dt));
            om_compare(&o, rtol_for(dt), atol_for(dt), what);
        }
}

KN_TEST(cuda_causal_conv_with_state) {
    NEED_GPU();
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = float_types[t];
        onemodel o;
        om_init(&o, 27);
        int64_t xd[3] = {2, 6, 9}, wd[3] = {6, 1, 4}, bd[1] = {6}, sd[3] = {2, 6, 3};
        int in[4] = {om_input(&o, "X", dt, 3, xd, 1.0f, NULL), om_input(&o, "W", dt, 3, wd, 1.0f, NULL),
                     om_input(&o, "B", dt, 1, bd, 1.0f, NULL), om_input(&o, "S", dt, 3, sd, 1.0f, NULL)};
        int out[2] = {om_value(&o, "Y"), om_value(&o, "state")};
        om_node(&o, "CausalConvWithState", in, 4, out, 2);
        om_str(&o, "activation", "silu");
        char what[80];
        snprintf(what, sizeof what, "CausalConvWithState silu (%s)", kiln_dtype_name(dt));
        om_compare(&o, rtol_for(dt), atol_for(dt), what);
    }
}

KN_TEST(cuda_linear_attention) {
    NEED_GPU();
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = float_types[t];
        onemodel o;
        om_init(&o, 27);
        /* gated delta rule, 8 query heads over 4 kv heads, dk 40 (two registers per lane), dv 8 */
        int64_t qd[3] = {2, 6, 320}, kd[3] = {2, 6, 160}, vd[3] = {2, 6, 32}, sd[4] = {2, 4, 40, 8},
                dd[3] = {2, 6, 4}, bd[3] = {2, 6, 4};
        int in[6] = {om_input(&o, "Q", dt, 3, qd, 0.5f, NULL), om_input(&o, "K", dt, 3, kd, 0.2f, NULL),
                     om_input(&o, "V", dt, 3, vd, 1.0f, NULL), om_input(&o, "S", KILN_DTYPE_FLOAT, 4, sd, 0.5f, NULL),
                     om_input(&o, "decay", dt, 3, dd, 0.3f, NULL), om_input(&o, "beta", dt, 3, bd, 0.5f, NULL)};
        int out[2] = {om_value(&o, "Y"), om_value(&o, "state")};
        om_node(&o, "LinearAttention", in, 6, out, 2);
        om_int(&o, "q_num_heads", 8);
        om_int(&o, "kv_num_heads", 4);
        char what[80];
        snprintf(what, sizeof what, "LinearAttention gated delta (%s)", kiln_dtype_name(dt));
        om_compare(&o, rtol_for(dt), atol_for(dt), what);
    }
}

/* ------------------------------------------------------------------ kiln.Attention in one kernel */


/* got (NULL when the run failed) against want[0..n): in a half type the scores and probabilities
 * are rounded to the type, so a few of its ulps; in float32 a few of float's */
static void check_attention_result(const kn_tensor *got, const double *want, int64_t n, kiln_dtype dt, const char *what) {
    CHECK_MSG(got && kn_tensor_count(got) == n, "%s: %lld elements, want %lld", what,
              got ? (long long)kn_tensor_count(got) : -1LL, (long long)n);
    if (!got || kn_tensor_count(got) != n) return;
    const double rtol = dt == KILN_DTYPE_BFLOAT16 ? 4e-2 : dt == KILN_DTYPE_FLOAT16 ? 1e-2 : 1e-5,
                 atol = dt == KILN_DTYPE_BFLOAT16 ? 2e-2 : dt == KILN_DTYPE_FLOAT16 ? 4e-3 : 1e-6;
    for (int64_t i = 0; i < n; i++) {
        const double g = kn_tensor_get_f64(got, i);
        if (!(fabs(g - want[i]) <= atol + rtol * fabs(want[i]))) {
            kn_unit_fail(__FILE__, __LINE__, "%s: element %lld is %.6g, want %.6g", what, (long long)i, g, want[i]);
            return;
        }
    }
}

/* kiln.Attention on CUDA in float32, float16 and bfloat16 against a reference computed here in
 * double from the same inputs, in each of its three forms: kiln's one kernel (cu_flash_attention.cu,
 * cu_flash_attention_f32.cu; KILN_CUDA_FLASH=1), the general one (KILN_CUDA_FLASH=0) and the
 * default (float32: the one kernel on large grids, so the general form at these sizes; half types:
 * cuDNN's fused attention, cuda_sdpa.c, where cuDNN builds a plan): head sizes 32, 64
 * and 128, query and key counts that are not multiples of the kernels' blocks, a boolean mask with a
 * fully masked row (nan_to_zero), an additive mask broadcast over the heads, one broadcast over heads
 * and queries ([B, 1, 1, sk]: BERT's), one with a row of -inf (nan_to_zero), 3-D and 4-D. Forms 3 and
 * 4 must run on cuDNN by default where it is there. */
static void attention_reference(const onemodel *o, int64_t B, int64_t H, int64_t sq, int64_t sk, int64_t hd,
                                int form, double scale, double *want) {
    const kn_tensor *Q = o->inputs[0], *KT = o->inputs[1], *V = o->inputs[2];
    const kn_tensor *M = form < 2 || form > 3 ? o->inputs[3] : NULL;
    double *s = malloc(sizeof(double) * (size_t)sk);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < sq; i++) {
                const int64_t bh = b * H + h;
                double mx = -INFINITY;
                for (int64_t j = 0; j < sk; j++) {
                    double a = 0;
                    for (int64_t c = 0; c < hd; c++)
                        a += kn_tensor_get_f64(Q, (bh * sq + i) * hd + c) * kn_tensor_get_f64(KT, (bh * hd + c) * sk + j);
                    a *= scale;
                    if (form == 0 && !kn_tensor_get_f64(M, (b * sq + i) * sk + j)) a = -INFINITY; /* [B, 1, sq, sk] */
                    if (form == 1 || form == 5) a += kn_tensor_get_f64(M, i * sk + j);             /* [sq, sk] */
                    if (form == 4) a += kn_tensor_get_f64(M, b * sk + j);                          /* [B, 1, 1, sk] */
                    s[j] = a;
                    mx = a > mx ? a : mx;
                }
                double sum = 0;
                for (int64_t j = 0; j < sk; j++) sum += mx == -INFINITY ? 0 : exp(s[j] - mx);
                for (int64_t c = 0; c < hd; c++) {
                    double y = 0;
                    for (int64_t j = 0; j < sk && sum > 0; j++) y += exp(s[j] - mx) / sum * kn_tensor_get_f64(V, (bh * sk + j) * hd + c);
                    want[(bh * sq + i) * hd + c] = sum > 0 ? y : 0.0; /* nan_to_zero: a fully masked row is 0 */
                }
            }
    free(s);
}

KN_TEST(cuda_kiln_attention_types) {
    NEED_GPU();
    const kiln_dtype types[3] = {KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT16, KILN_DTYPE_BFLOAT16};
    static const char *const kernel_names[3] = {"general form", "one kernel", "default"};
    for (int flash = 0; flash < 3; flash++) /* 0: the general form, 1: kiln's one kernel, 2: the default */
        for (int t = 0; t < 3; t++)
            for (int hd = 32; hd <= 128; hd *= 2)
                for (int form = 0; form < 6; form++) {
                    if (flash == 2) unsetenv("KILN_CUDA_FLASH"), unsetenv("KILN_CUDA_SDPA");
                    else setenv("KILN_CUDA_FLASH", flash ? "1" : "0", 1);
                    kiln_dtype dt = types[t];
                    onemodel o;
                    om_init(&o, 24);
                    /* form 3: no mask, 136 keys (16-byte rows of K transposed: three key blocks
                     * copied while the previous one is computed on); form 4: 128 keys */
                    const int64_t B = 2, H = 3, sq = form == 2 ? 200 : 77;
                    const int64_t sk = form == 2 ? 64 : form == 3 ? 136 : form == 4 ? 128 : 130;
                    int64_t qd[4] = {B, H, sq, hd}, kd[4] = {B, H, hd, sk}, vd[4] = {B, H, sk, hd};
                    const int rank = form == 1 ? 3 : 4;
                    /* 3-D: the batch and head dims as one of B * H */
                    if (rank == 3) qd[1] *= B, kd[1] *= B, vd[1] *= B;
                    const int64_t *q = rank == 3 ? qd + 1 : qd, *k = rank == 3 ? kd + 1 : kd, *v = rank == 3 ? vd + 1 : vd;
                    int in[4] = {om_input(&o, "Q", dt, rank, q, 0.5f, NULL), om_input(&o, "KT", dt, rank, k, 0.5f, NULL),
                                 om_input(&o, "V", dt, rank, v, 1.0f, NULL), -1};
                    int n_in = 3;
                    unsigned char *keep = NULL;
                    if (form == 0) { /* boolean [B, 1, sq, sk]: batch 1's query 5 sees no key */
                        int64_t md[4] = {B, 1, sq, sk};
                        keep = malloc((size_t)(B * sq * sk));
                        for (int64_t i = 0; i < B * sq * sk; i++) keep[i] = (unsigned char)((i * 7 + i / 13) % 4 != 0);
                        for (int64_t j = 0; j < sk; j++) keep[sq * sk + 5 * sk + j] = 0;
                        in[3] = om_input(&o, "mask", KILN_DTYPE_BOOL, 4, md, 0, keep);
                        n_in = 4;
                    } else if (form == 1) { /* additive [sq, sk] over every head */
                        int64_t md[2] = {sq, sk};
                        in[3] = om_input(&o, "mask", dt, 2, md, 2.0f, NULL);
                        n_in = 4;
                    } else if (form == 4) { /* additive [B, 1, 1, sk] */
                        int64_t md[4] = {B, 1, 1, sk};
                        in[3] = om_input(&o, "mask", dt, 4, md, 2.0f, NULL);
                        n_in = 4;
                    } else if (form == 5) { /* additive [sq, sk], query 3 sees no key */
                        int64_t md[2] = {sq, sk};
                        in[3] = om_input(&o, "mask", dt, 2, md, 2.0f, NULL);
                        kn_tensor *m = o.inputs[3];
                        for (int64_t j = 0; j < sk; j++) kn_tensor_set_f64(m, 3 * sk + j, -INFINITY);
                        n_in = 4;
                    }
                    int out[1] = {om_value(&o, "Y")};
                    om_node(&o, "Attention", in, n_in, out, 1);
                    om_kiln_domain(&o);
                    const double scale = 1.0 / sqrt((double)hd);
                    om_float(&o, "scale", (float)scale);
                    if (form == 0 || form == 5) om_int(&o, "nan_to_zero", 1);
                    char what[112];
                    snprintf(what, sizeof what, "kiln.Attention %s, %s, head %d, form %d", kernel_names[flash],
                             kiln_dtype_name(dt), hd, form);
                    const int64_t n = B * H * sq * hd;
                    double *want = malloc(sizeof(double) * (size_t)n);
                    attention_reference(&o, B, H, sq, sk, hd, form, scale, want);
                    unsigned char *data = NULL;
                    size_t size = 0;
                    kn_graph_recount(o.g);
                    kiln_status st = kn_onnx_write_memory(o.m, &data, &size);
                    CHECK_MSG(st == KILN_OK, "%s: writing the model: %s", what, kiln_last_error());
                    kiln_session *gpu = st == KILN_OK ? om_session(data, size, "cuda") : NULL;
                    if (gpu) {
                        kn_tensor *got[1];
                        om_run(gpu, &o, got);
                        check_attention_result(got[0], want, n, dt, what);
                        kiln_tensor_destroy(got[0]);
                    }
                    kiln_session_destroy(gpu);
                    free(data);
                    free(want);
                    free(keep);
                    om_free(&o);
                }
    unsetenv("KILN_CUDA_FLASH");
    unsetenv("KILN_CUDA_SDPA");
}

/* cuDNN's fused-attention plan goes to the compiled file and a later session
 * makes it from there instead of compiling it: a model of two attention nodes of one problem (one
 * plan for both) written with its compiled file, then read back; the same outputs from both
 * sessions. Skipped where cuDNN builds no plan for the graph (a device or cuDNN version without an
 * engine for it). */
KN_TEST(cuda_kiln_attention_fused_plan_kept) {
    NEED_GPU();
#ifdef KILN_HAVE_CUDA
    if (!kn_cu_conv_graph_available()) KN_SKIP("this build has no cuDNN, or it does not load");
    unsetenv("KILN_CUDA_SDPA"); /* (on by default) */
    char dir[] = "/tmp/kiln-sdpa-plan-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[64];
    snprintf(path, sizeof path, "%s/model.kiln", dir);
    onemodel o;
    om_init(&o, 24);
    const int64_t qd[4] = {2, 4, 96, 64}, kd[4] = {2, 4, 64, 96};
    const kiln_dtype dt = KILN_DTYPE_FLOAT16;
    int in[3] = {om_input(&o, "Q", dt, 4, qd, 0.5f, NULL), om_input(&o, "KT", dt, 4, kd, 0.5f, NULL),
                 om_input(&o, "V", dt, 4, qd, 1.0f, NULL)};
    int mid[1] = {om_value(&o, "Y1")}, out[1] = {om_value(&o, "Y")};
    om_node(&o, "Attention", in, 3, mid, 1);
    om_kiln_domain(&o);
    om_float(&o, "scale", 0.125f);
    int in2[3] = {mid[0], in[1], in[2]};
    om_node(&o, "Attention", in2, 3, out, 1);
    om_kiln_domain(&o);
    om_float(&o, "scale", 0.125f);
    unsigned char *data = NULL;
    size_t size = 0;
    o.n_outputs = o.g->n_outputs; /* (om_node counts the last node's) */
    kn_graph_recount(o.g);
    CHECK(kn_onnx_write_memory(o.m, &data, &size) == KILN_OK);
    kn_tensor *y[2][2] = {{NULL, NULL}, {NULL, NULL}}; /* per session: Y1 and Y (both graph outputs) */
    unsigned long long loaded[2] = {0, 0}, ran[2] = {0, 0};
    for (int pass = 0; pass < 2 && data; pass++) {
        kiln_session_options *opt;
        kiln_session_options_create(&opt);
        kiln_session_options_set_opt_level(opt, 0);
        kiln_session_options_set_cache(opt, 0, NULL);
        kiln_session_options_set_compiled_paths(opt, pass ? NULL : path, pass ? path : NULL);
        kiln_session_options_append_provider(opt, "cuda", NULL, NULL, 0);
        kiln_session *s = NULL;
        const unsigned long long l0 = kn_cu_sdpa_plans_loaded(), r0 = kn_cu_sdpa_runs();
        CHECK_MSG(kiln_session_create_from_memory(data, size, NULL, opt, &s) == KILN_OK, "session %d: %s", pass,
                  kiln_last_error());
        if (s) om_run(s, &o, y[pass]);
        kiln_session_destroy(s); /* (the first writes its file again, with the plan) */
        kiln_session_options_destroy(opt);
        loaded[pass] = kn_cu_sdpa_plans_loaded() - l0;
        ran[pass] = kn_cu_sdpa_runs() - r0;
    }
    unsetenv("KILN_CUDA_SDPA");
    const bool engine = ran[0] > 0; /* cuDNN built a plan for the graph on this device */
    if (engine) {
        CHECK_MSG(ran[0] == 2 && ran[1] == 2, "the fused attention ran %llu and %llu times, twice each expected", ran[0],
                  ran[1]);
        CHECK_MSG(loaded[0] == 0 && loaded[1] == 1, "plans made from the file: %llu then %llu (0 then 1 expected)",
                  loaded[0], loaded[1]);
    }
    for (int i = 0; i < 2; i++) {
        if (y[0][i] && y[1][i]) {
            CHECK(kn_tensor_count(y[0][i]) == kn_tensor_count(y[1][i]));
            CHECK_MSG(!memcmp(y[0][i]->data, y[1][i]->data, (size_t)kn_tensor_count(y[0][i]) * kiln_dtype_size(y[0][i]->dtype)),
                      "the plan from the file computed another output");
        }
        kiln_tensor_destroy(y[0][i]);
        kiln_tensor_destroy(y[1][i]);
    }
    free(data);
    om_free(&o);
    unlink(path);
    rmdir(dir);
    if (!engine) KN_SKIP("cuDNN built no plan for the attention graph on this device (KILN_LOG=debug says why)");
#endif
}

/* kiln.Attention with operand views (what fold_attention_views writes for torch's
 * MultiheadAttention): Q, K and V read in place from one packed projection [S, B, 3 * E] (K with
 * its head dim contiguous: the one-kernel form's untransposed path), Y written in place into
 * [S * B, E]; float32, float16 and bfloat16, the one-kernel form, the general one (dense copies) and the
 * default with cuDNN's fused attention asked for (where cuDNN builds a plan), head sizes 32, 64 and 128, against a reference computed here in double through the same views. */
static void om_ints(onemodel *o, const char *name, const int64_t *v, int n) {
    kn_attr *a = om_attr(o, name, KN_ATTR_INTS);
    a->ints = kn_arena_alloc(&o->m->arena, sizeof(int64_t) * (size_t)n);
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
    a->n = n;
}

KN_TEST(cuda_kiln_attention_views) {
    NEED_GPU();
    setenv("KILN_CUDA_ATTN_VIEWS", "1", 1); /* on, whatever the environment says */
    const kiln_dtype types[3] = {KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT16, KILN_DTYPE_BFLOAT16};
    static const char *const kernel_names[3] = {"general form", "one kernel", "default"};
    for (int flash = 0; flash < 3; flash++) /* 0: the general form, 1: kiln's one kernel, 2: the default (cuDNN's) */
        for (int t = 0; t < 3; t++)
            for (int hd = 32; hd <= 128; hd *= 2) {
                if (flash == 2) unsetenv("KILN_CUDA_FLASH"), unsetenv("KILN_CUDA_SDPA");
                else setenv("KILN_CUDA_FLASH", flash ? "1" : "0", 1);
                const kiln_dtype dt = types[t];
                const int64_t B = 3, H = 2, S = 75, E = H * hd;
                onemodel o;
                om_init(&o, 24);
                const int64_t pd[3] = {S, B, 3 * E};
                const int p = om_input(&o, "qkv", dt, 3, pd, 0.5f, NULL);
                int in[3] = {p, p, p}, out[1] = {om_value(&o, "Y")};
                om_node(&o, "Attention", in, 3, out, 1);
                om_kiln_domain(&o);
                const double scale = 1.0 / sqrt((double)hd);
                om_float(&o, "scale", (float)scale);
                /* q[b, h, s, e] = qkv[s, b, h * hd + e]; kt[b, h, e, s] = qkv[s, b, E + h * hd + e]; v: + 2E;
                 * Y[b, h, s, e] -> out[s * B + b, h * hd + e] */
                const int64_t qv[10] = {4, B, H, S, hd, 0, 3 * E, hd, B * 3 * E, 1};
                const int64_t kv[10] = {4, B, H, hd, S, E, 3 * E, hd, 1, B * 3 * E};
                const int64_t vv[10] = {4, B, H, S, hd, 2 * E, 3 * E, hd, B * 3 * E, 1};
                const int64_t yv[10] = {4, B, H, S, hd, 0, E, hd, B * E, 1};
                const int64_t ys[2] = {S * B, E};
                om_ints(&o, "q_view", qv, 10);
                om_ints(&o, "kt_view", kv, 10);
                om_ints(&o, "v_view", vv, 10);
                om_ints(&o, "y_view", yv, 10);
                om_ints(&o, "y_shape", ys, 2);
                const kn_tensor *X = o.inputs[0];
                double *want = malloc(sizeof(double) * (size_t)(S * B * E)), *sc = malloc(sizeof(double) * (size_t)S);
                for (int64_t b = 0; b < B; b++)
                    for (int64_t h = 0; h < H; h++)
                        for (int64_t i = 0; i < S; i++) {
                            double mx = -INFINITY, sum = 0;
                            for (int64_t j = 0; j < S; j++) {
                                double a = 0;
                                for (int64_t e = 0; e < hd; e++)
                                    a += kn_tensor_get_f64(X, (i * B + b) * 3 * E + h * hd + e) *
                                         kn_tensor_get_f64(X, (j * B + b) * 3 * E + E + h * hd + e);
                                sc[j] = a * scale;
                                mx = sc[j] > mx ? sc[j] : mx;
                            }
                            for (int64_t j = 0; j < S; j++) sum += exp(sc[j] - mx);
                            for (int64_t e = 0; e < hd; e++) {
                                double y = 0;
                                for (int64_t j = 0; j < S; j++)
                                    y += exp(sc[j] - mx) / sum * kn_tensor_get_f64(X, (j * B + b) * 3 * E + 2 * E + h * hd + e);
                                want[(i * B + b) * E + h * hd + e] = y;
                            }
                        }
                char what[112];
                snprintf(what, sizeof what, "kiln.Attention with views, %s, %s, head %d", kernel_names[flash],
                         kiln_dtype_name(dt), hd);
                unsigned char *data = NULL;
                size_t size = 0;
                kn_graph_recount(o.g);
                kiln_status st = kn_onnx_write_memory(o.m, &data, &size);
                CHECK_MSG(st == KILN_OK, "%s: writing the model: %s", what, kiln_last_error());
                kiln_session *gpu = st == KILN_OK ? om_session(data, size, "cuda") : NULL;
                if (gpu) {
                    kn_tensor *got[1];
                    om_run(gpu, &o, got);
                    CHECK_MSG(got[0] && got[0]->rank == 2, "%s: output of rank %d, want 2 ([S * B, E])", what,
                              got[0] ? got[0]->rank : -1);
                    check_attention_result(got[0], want, S * B * E, dt, what);
                    kiln_tensor_destroy(got[0]);
                }
                kiln_session_destroy(gpu);
                free(data);
                free(want);
                free(sc);
                om_free(&o);
            }
    unsetenv("KILN_CUDA_FLASH");
    unsetenv("KILN_CUDA_SDPA");
    unsetenv("KILN_CUDA_ATTN_VIEWS");
}

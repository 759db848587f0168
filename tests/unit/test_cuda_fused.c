/* kiln's fused operators on CUDA against the CPU's: FusedMatMul's bias, residual and activation,
 * which cuBLASLt applies in the product where it can (bias and ReLU as its epilogue, the residual as
 * its C input) and a pass after it elsewhere (kiln's stand-in kernels, widths cuBLASLt refuses). */
#include "test_onemodel.h"

#include "exec/graph_run.h"
#include "util/clock.h"

#ifdef KILN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static double act_ref(int a, double x) {
    switch (a) {
    case 1: return x > 0 ? x : 0;
    case 2: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case 3: return 1 / (1 + exp(-x));
    default: return x;
    }
}

/* Runs o's model with provider cuda alone and compares Y with a double-precision evaluation of
 * act(A x B + bias + Z) over the inputs as given (already in their type). */
static void check_against_double(onemodel *o, int act, bool bias, bool residual, int64_t M, int64_t K, int64_t N,
                                 double tol, const char *what) {
    unsigned char *data = NULL;
    size_t size = 0;
    kn_graph_recount(o->g);
    CHECK_MSG(kn_onnx_write_memory(o->m, &data, &size) == KILN_OK, "%s: writing the model: %s", what, kiln_last_error());
    kiln_session *s = data ? om_session(data, size, "cuda") : NULL;
    if (s) {
        kn_tensor *y = NULL;
        om_run(s, o, &y);
        if (y && kn_tensor_count(y) == M * N) {
            const kn_tensor *A = o->inputs[0], *B = o->inputs[1];
            const kn_tensor *C = bias ? o->inputs[2] : NULL, *Z = residual ? o->inputs[bias ? 3 : 2] : NULL;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double acc = 0;
                    for (int64_t k = 0; k < K; k++) acc += kn_tensor_get_f64(A, i * K + k) * kn_tensor_get_f64(B, k * N + j);
                    if (C) acc += kn_tensor_get_f64(C, j);
                    if (Z) acc += kn_tensor_get_f64(Z, i * N + j);
                    const double want = act_ref(act, acc), got = kn_tensor_get_f64(y, i * N + j);
                    if (!(fabs(got - want) <= tol * (1 + fabs(want)))) {
                        kn_unit_fail(__FILE__, __LINE__, "%s: element [%lld, %lld] is %.7g, %.7g expected", what,
                                     (long long)i, (long long)j, got, want);
                        i = M;
                        break;
                    }
                }
        } else
            kn_unit_fail(__FILE__, __LINE__, "%s: no output of %lld elements", what, (long long)(M * N));
        kiln_tensor_destroy(y);
    }
    kiln_session_destroy(s);
    free(data);
}

/* Y = act(A [2, 5, K] x B [K, N] + bias [N] + Z [2, 5, N]) for each combination of bias, residual
 * and activation, in float, float16 and bfloat16. */
static void fused_matmul_cases(const char *mode) {
    static const kiln_dtype types[3] = {KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT16, KILN_DTYPE_BFLOAT16};
    static const char *const acts[4] = {"", "Relu", "Gelu", "Sigmoid"};
    static const int64_t widths[2][2] = {{24, 40}, {9, 7}}; /* K, N: 7 columns leave rows 2-byte aligned in half */
    for (int t = 0; t < 3; t++)
        for (int w = 0; w < 2; w++)
            for (int a = 0; a < 4; a++)
                for (int extra = 0; extra < 4; extra++) {
                    const kiln_dtype dt = types[t];
                    const bool bias = extra & 1, residual = extra & 2;
                    const int64_t K = widths[w][0], N = widths[w][1];
                    onemodel o;
                    om_init(&o, 17);
                    int64_t ad[3] = {2, 5, K}, bd[2] = {K, N}, cd[1] = {N}, zd[3] = {2, 5, N};
                    int in[4] = {om_input(&o, "A", dt, 3, ad, 1.0f, NULL), om_input(&o, "B", dt, 2, bd, 0.5f, NULL), -1, -1};
                    int n_in = 2;
                    if (bias || residual) in[n_in++] = bias ? om_input(&o, "bias", dt, 1, cd, 1.0f, NULL) : -1;
                    if (residual) in[n_in++] = om_input(&o, "Z", dt, 3, zd, 1.0f, NULL);
                    int out[1] = {om_value(&o, "Y")};
                    om_node(&o, "FusedMatMul", in, n_in, out, 1);
                    om_kiln_domain(&o);
                    if (acts[a][0]) om_str(&o, "activation", acts[a]);
                    char what[160];
                    snprintf(what, sizeof what, "FusedMatMul %s K=%lld N=%lld activation '%s'%s%s (%s)",
                             kiln_dtype_name(dt), (long long)K, (long long)N, acts[a], bias ? " bias" : "",
                             residual ? " residual" : "", mode);
                    /* the output's rounding (a half ulp of it) and, in float, tf32-free fp32 accumulation */
                    const double tol = dt == KILN_DTYPE_FLOAT ? 1e-5 : dt == KILN_DTYPE_FLOAT16 ? 2e-3 : 1.6e-2;
                    check_against_double(&o, a, bias, residual, 10, K, N, tol, what);
                    om_free(&o);
                }
}

KN_TEST(cuda_fused_matmul_epilogue) {
    NEED_GPU();
    fused_matmul_cases("cuBLASLt");
}

/* The same through kiln's stand-in product kernels (read as a session starts): the epilogue then
 * runs as a pass of its own. */
KN_TEST(cuda_fused_matmul_epilogue_standins) {
    NEED_GPU();
    const char *was = getenv("KILN_CUDA_STAND_INS");
    char *saved = was ? strdup(was) : NULL;
    setenv("KILN_CUDA_STAND_INS", "always", 1);
    fused_matmul_cases("stand-in kernels");
    if (saved) setenv("KILN_CUDA_STAND_INS", saved, 1);
    else unsetenv("KILN_CUDA_STAND_INS");
    free(saved);
}

/* Convolutions whose kernel tiles the input (kernel = stride, no padding: a patch embedding), which
 * CUDA runs as one matrix product over gathered patches; sizes the kernel does not divide leave
 * the last rows and columns unread. Against the CPU's convolution. */
KN_TEST(cuda_conv_patchify) {
    NEED_GPU();
    static const int64_t shapes[3][6] = {
        /* N, C, H, W, kernel h, kernel w */
        {2, 3, 10, 12, 2, 3},
        {1, 4, 9, 8, 4, 4},
        {3, 3, 32, 32, 16, 16},
    };
    static const kiln_dtype types[2] = {KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT16};
    for (int s = 0; s < 3; s++)
        for (int t = 0; t < 2; t++)
            for (int layout = 0; layout < 2; layout++) {
                const int64_t *d = shapes[s];
                const kiln_dtype dt = types[t];
                const bool nhwc = layout == 1;
                const int64_t M = 8;
                if (nhwc && dt != KILN_DTYPE_FLOAT) continue; /* the CPU's FusedConv takes float only */
                onemodel o;
                om_init(&o, 17);
                int64_t xd[4] = {d[0], d[1], d[2], d[3]}, wd[4] = {M, d[1], d[4], d[5]}, bd[1] = {M};
                if (nhwc) {
                    int64_t xl[4] = {d[0], d[2], d[3], d[1]}, wl[4] = {M, d[4], d[5], d[1]};
                    memcpy(xd, xl, sizeof xd);
                    memcpy(wd, wl, sizeof wd);
                }
                int in[3] = {om_input(&o, "X", dt, 4, xd, 1.0f, NULL), om_input(&o, "W", dt, 4, wd, 0.25f, NULL),
                             om_input(&o, "B", dt, 1, bd, 1.0f, NULL)};
                int out[1] = {om_value(&o, "Y")};
                om_node(&o, nhwc ? "FusedConv" : "Conv", in, 3, out, 1);
                if (nhwc) {
                    om_kiln_domain(&o);
                    om_str(&o, "layout", "NHWC");
                }
                int64_t ks[2] = {d[4], d[5]};
                kn_attr *a = om_attr(&o, "kernel_shape", KN_ATTR_INTS);
                a->ints = kn_arena_alloc(&o.m->arena, sizeof ks);
                memcpy(a->ints, ks, sizeof ks);
                a->n = 2;
                a = om_attr(&o, "strides", KN_ATTR_INTS);
                a->ints = kn_arena_alloc(&o.m->arena, sizeof ks);
                memcpy(a->ints, ks, sizeof ks);
                a->n = 2;
                char what[128];
                snprintf(what, sizeof what, "%s %s x [%lld, %lld, %lld, %lld] kernel = stride %lldx%lld",
                         nhwc ? "FusedConv NHWC" : "Conv", kiln_dtype_name(dt), (long long)d[0], (long long)d[1],
                         (long long)d[2], (long long)d[3], (long long)d[4], (long long)d[5]);
                /* sums of up to 768 products: float16's accumulation order differs between the two */
                om_compare(&o, dt == KILN_DTYPE_FLOAT ? 1e-4 : 1e-2, dt == KILN_DTYPE_FLOAT ? 1e-4 : 1e-2, what);
            }
}

/* kiln.FusedConv = act(conv(X, W) + bias [+ Z]) built in dt with k x k kernels (3: padded by 1; 1:
 * pointwise), act NULL for none; NHWC when nhwc. */
static void fused_conv_model(onemodel *o, kiln_dtype dt, bool nhwc, bool residual, int k, const char *act,
                             const kn_tensor *const *values) {
    om_init(o, 17);
    int64_t xd[4] = {2, 8, 10, 10}, wd[4] = {16, 8, k, k}, bd[1] = {16}, zd[4] = {2, 16, 10, 10};
    if (nhwc) {
        int64_t xl[4] = {2, 10, 10, 8}, wl[4] = {16, k, k, 8}, zl[4] = {2, 10, 10, 16};
        memcpy(xd, xl, sizeof xd);
        memcpy(wd, wl, sizeof wd);
        memcpy(zd, zl, sizeof zd);
    }
    const char *names[4] = {"X", "W", "B", "Z"};
    const int64_t *dims[4] = {xd, wd, bd, zd};
    const int ranks[4] = {4, 4, 1, 4};
    int in[4];
    for (int i = 0; i < (residual ? 4 : 3); i++) {
        in[i] = om_input(o, names[i], dt, ranks[i], dims[i], i == 1 ? 0.25f : 1.0f, NULL);
        if (values) /* the other model's values, in this one's type */
            for (int64_t e = 0; e < kn_tensor_count(values[i]); e++)
                kn_tensor_set_f64(o->inputs[i], e, kn_tensor_get_f64(values[i], e));
    }
    int out[1] = {om_value(o, "Y")};
    om_node(o, "FusedConv", in, residual ? 4 : 3, out, 1);
    om_kiln_domain(o);
    if (act) om_str(o, "activation", act);
    if (nhwc) om_str(o, "layout", "NHWC");
    const int64_t p = k / 2;
    int64_t pads[4] = {p, p, p, p}, ks[2] = {k, k};
    kn_attr *a = om_attr(o, "pads", KN_ATTR_INTS);
    a->ints = kn_arena_alloc(&o->m->arena, sizeof pads);
    memcpy(a->ints, pads, sizeof pads);
    a->n = 4;
    a = om_attr(o, "kernel_shape", KN_ATTR_INTS);
    a->ints = kn_arena_alloc(&o->m->arena, sizeof ks);
    memcpy(a->ints, ks, sizeof ks);
    a->n = 2;
}

static kn_tensor *run_one(onemodel *o, const char *provider, const char *what) {
    unsigned char *data = NULL;
    size_t size = 0;
    kn_graph_recount(o->g);
    CHECK_MSG(kn_onnx_write_memory(o->m, &data, &size) == KILN_OK, "%s: writing the model: %s", what, kiln_last_error());
    kiln_session *s = data ? om_session(data, size, provider) : NULL;
    kn_tensor *y = NULL;
    if (s) om_run(s, o, &y);
    kiln_session_destroy(s);
    free(data);
    return y;
}

/* CUDA's output against the CPU's, element by element within tol relative to 1 + |CPU's|; frees both. */
static void check_conv_close(kn_tensor *got, kn_tensor *want, double tol, const char *what) {
    if (got && want && kn_tensor_count(got) == kn_tensor_count(want)) {
        for (int64_t i = 0; i < kn_tensor_count(want); i++) {
            const double w = kn_tensor_get_f64(want, i), g = kn_tensor_get_f64(got, i);
            if (!(fabs(g - w) <= tol * (1 + fabs(w)))) {
                kn_unit_fail(__FILE__, __LINE__, "%s: element %lld is %.7g on CUDA, %.7g on the CPU", what, (long long)i, g, w);
                break;
            }
        }
    } else
        kn_unit_fail(__FILE__, __LINE__, "%s: no output or outputs of different sizes", what);
    kiln_tensor_destroy(got);
    kiln_tensor_destroy(want);
}

/* FusedConv with a bias, an activation and maybe a residual: 3x3 with ReLU in cuDNN's one call
 * (cudnnConvolutionBiasActivationForward), pointwise channels last in cuBLASLt's epilogue (bias,
 * residual, ReLU; another activation a pass after), the rest as a pass. On CUDA in float, float16
 * and bfloat16 against the CPU's float FusedConv over the same values, and with
 * KILN_CUDA_CONV_FUSED=0 (the convolution, then a pass). */
KN_TEST(cuda_fused_conv_bias_relu) {
    NEED_GPU();
    static const kiln_dtype types[3] = {KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT16, KILN_DTYPE_BFLOAT16};
    static const char *const acts[3] = {"Relu", NULL, "Sigmoid"};
    for (int off = 0; off < 2; off++)
        for (int t = 0; t < 3; t++)
            for (int layout = 0; layout < 2; layout++)
                for (int residual = 0; residual < 2; residual++)
                    for (int k = 1; k <= 3; k += 2)
                        for (int ai = 0; ai < 3; ai++) {
                            const kiln_dtype dt = types[t];
                            char what[160];
                            snprintf(what, sizeof what, "FusedConv %dx%d %s %s bias %s%s%s", k, k, kiln_dtype_name(dt),
                                     layout ? "NHWC" : "NCHW", acts[ai] ? acts[ai] : "no activation",
                                     residual ? " residual" : "", off ? " (fused call off)" : "");
                            if (off) setenv("KILN_CUDA_CONV_FUSED", "0", 1);
                            onemodel gpu, cpu;
                            fused_conv_model(&gpu, dt, layout, residual, k, acts[ai], NULL);
                            fused_conv_model(&cpu, KILN_DTYPE_FLOAT, layout, residual, k, acts[ai],
                                             (const kn_tensor *const *)gpu.inputs);
                            kn_tensor *got = run_one(&gpu, "cuda", what), *want = run_one(&cpu, "cpu", what);
                            if (off) unsetenv("KILN_CUDA_CONV_FUSED");
                            const double tol = dt == KILN_DTYPE_FLOAT ? 1e-4 : dt == KILN_DTYPE_FLOAT16 ? 1e-2 : 6e-2;
                            check_conv_close(got, want, tol, what);
                            om_free(&gpu);
                            om_free(&cpu);
                        }
}

/* FusedConv channels last with an activation only cuDNN's operation graph takes (SiLU, Sigmoid,
 * Tanh, Gelu, GeluTanh), with and without bias and residual, 3x3 and pointwise, in float16 and
 * bfloat16: against the CPU's float FusedConv over the same values, with the graph
 * (KILN_CUDA_CONV_GRAPH=1, the provider option conv_graph=1's switch; it must have run:
 * cuda_conv_graph.c counts its runs) and without it (=0: the convolution, then a pass). */
KN_TEST(cuda_fused_conv_graph_activations) {
    NEED_GPU();
#ifdef KILN_HAVE_CUDA /* (KILN_HAVE_CUDNN is the library's definition, not the tests') */
    if (!kn_cu_conv_graph_available()) KN_SKIP("this build has no cuDNN, or it does not load");
    static const kiln_dtype types[2] = {KILN_DTYPE_FLOAT16, KILN_DTYPE_BFLOAT16};
    static const char *const acts[5] = {"SiLU", "Sigmoid", "Tanh", "Gelu", "GeluTanh"};
    setenv("KILN_CUDA_CONV_GRAPH_BUILD", "sync", 1); /* built in the run: each session runs once */
    for (int graph = 1; graph >= 0; graph--) {
        const unsigned long long runs0 = kn_cu_conv_graph_runs();
        setenv("KILN_CUDA_CONV_GRAPH", graph ? "1" : "0", 1);
        for (int t = 0; t < 2; t++)
            for (int residual = 0; residual < 2; residual++)
                for (int k = 1; k <= 3; k += 2)
                    for (int ai = 0; ai < 5; ai++) {
                        const kiln_dtype dt = types[t];
                        char what[160];
                        snprintf(what, sizeof what, "FusedConv %dx%d %s NHWC bias %s%s, graph %s", k, k,
                                 kiln_dtype_name(dt), acts[ai], residual ? " residual" : "", graph ? "on" : "off");
                        onemodel gpu, cpu;
                        fused_conv_model(&gpu, dt, true, residual, k, acts[ai], NULL);
                        fused_conv_model(&cpu, KILN_DTYPE_FLOAT, true, residual, k, acts[ai],
                                         (const kn_tensor *const *)gpu.inputs);
                        kn_tensor *got = run_one(&gpu, "cuda", what), *want = run_one(&cpu, "cpu", what);
                        /* products of 72 terms in float, rounded once to the type */
                        const double tol = dt == KILN_DTYPE_FLOAT16 ? 1e-2 : 6e-2;
                        check_conv_close(got, want, tol, what);
                        om_free(&gpu);
                        om_free(&cpu);
                    }
        unsetenv("KILN_CUDA_CONV_GRAPH");
        const unsigned long long ran = kn_cu_conv_graph_runs() - runs0;
        if (graph) CHECK_MSG(ran >= 40, "cuDNN's operation graph ran %llu of 40 convolutions", ran);
        else CHECK_MSG(ran == 0, "KILN_CUDA_CONV_GRAPH=0, yet the graph ran %llu times", ran);
    }
    unsetenv("KILN_CUDA_CONV_GRAPH_BUILD");
#endif
}

/* A plan of cuDNN's operation graph is kept in the compiled file: a session saving its compiled
 * model (FusedConv 3x3 float16 with SiLU and a residual, conv_graph on), then a session loading
 * that file, which must make the plan from the file's record instead of building it, and give the
 * very same output. */
KN_TEST(cuda_fused_conv_graph_plan_kept) {
    NEED_GPU();
#ifdef KILN_HAVE_CUDA
    if (!kn_cu_conv_graph_available()) KN_SKIP("this build has no cuDNN, or it does not load");
    char dir[] = "/tmp/kiln-graph-plan-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[64];
    snprintf(path, sizeof path, "%s/model.kiln", dir);
    onemodel o;
    fused_conv_model(&o, KILN_DTYPE_FLOAT16, true, true, 3, "SiLU", NULL);
    unsigned char *data = NULL;
    size_t size = 0;
    kn_graph_recount(o.g);
    CHECK(kn_onnx_write_memory(o.m, &data, &size) == KILN_OK);
    kn_tensor *y[2] = {NULL, NULL};
    unsigned long long loaded[2] = {0, 0}, ran[2] = {0, 0};
    setenv("KILN_CUDA_CONV_GRAPH_BUILD", "sync", 1); /* built in the first session's one run */
    for (int pass = 0; pass < 2 && data; pass++) {
        kiln_session_options *opt;
        kiln_session_options_create(&opt);
        kiln_session_options_set_opt_level(opt, 0);
        kiln_session_options_set_cache(opt, 0, NULL);
        kiln_session_options_set_compiled_paths(opt, pass ? NULL : path, pass ? path : NULL);
        const char *keys[1] = {"conv_graph"}, *vals[1] = {"1"};
        kiln_session_options_append_provider(opt, "cuda", keys, vals, 1);
        kiln_session *s = NULL;
        const unsigned long long l0 = kn_cu_conv_graph_plans_loaded(), r0 = kn_cu_conv_graph_runs();
        CHECK_MSG(kiln_session_create_from_memory(data, size, NULL, opt, &s) == KILN_OK, "session %d: %s", pass,
                  kiln_last_error());
        if (s) om_run(s, &o, &y[pass]);
        kiln_session_destroy(s); /* (the first writes its file again, with the plan) */
        kiln_session_options_destroy(opt);
        loaded[pass] = kn_cu_conv_graph_plans_loaded() - l0;
        ran[pass] = kn_cu_conv_graph_runs() - r0;
    }
    unsetenv("KILN_CUDA_CONV_GRAPH_BUILD");
    CHECK_MSG(ran[0] == 1 && ran[1] == 1, "the graph ran %llu and %llu times, once each expected", ran[0], ran[1]);
    CHECK_MSG(loaded[0] == 0 && loaded[1] == 1, "plans made from the file: %llu then %llu (0 then 1 expected)",
              loaded[0], loaded[1]);
    if (y[0] && y[1]) {
        CHECK(kn_tensor_count(y[0]) == kn_tensor_count(y[1]));
        CHECK_MSG(!memcmp(y[0]->data, y[1]->data, (size_t)kn_tensor_count(y[0]) * kiln_dtype_size(y[0]->dtype)), "the plan from the file computed another output");
    }
    kiln_tensor_destroy(y[0]);
    kiln_tensor_destroy(y[1]);
    free(data);
    om_free(&o);
    unlink(path);
    rmdir(dir);
#endif
}

#ifdef KILN_HAVE_CUDA
static kn_tensor *copy_of(const kn_tensor *t) {
    kn_tensor *c = NULL;
    if (t && kn_tensor_clone(t, &c) != KILN_OK) c = NULL;
    return c;
}
#endif

/* By default the graphs are built in the background: a session's first run takes the old way
 * (the convolution, then a pass) without waiting for cuDNN's compiler, a later run takes the graph
 * once its builder is done, and runs are recorded into a CUDA graph only after that. Every run's
 * output is checked against the CPU's (FusedConv 3x3 float16 with SiLU and a residual). */
KN_TEST(cuda_fused_conv_graph_built_in_background) {
    NEED_GPU();
#ifdef KILN_HAVE_CUDA
    if (!kn_cu_conv_graph_available()) KN_SKIP("this build has no cuDNN, or it does not load");
    onemodel gpu, cpu;
    fused_conv_model(&gpu, KILN_DTYPE_FLOAT16, true, true, 3, "SiLU", NULL);
    fused_conv_model(&cpu, KILN_DTYPE_FLOAT, true, true, 3, "SiLU", (const kn_tensor *const *)gpu.inputs);
    kn_tensor *want = run_one(&cpu, "cpu", "the CPU's FusedConv");
    unsigned char *data = NULL;
    size_t size = 0;
    kn_graph_recount(gpu.g);
    CHECK(kn_onnx_write_memory(gpu.m, &data, &size) == KILN_OK);
    kiln_session_options *opt;
    kiln_session_options_create(&opt);
    kiln_session_options_set_opt_level(opt, 0);
    kiln_session_options_set_cache(opt, 0, NULL);
    const char *keys[1] = {"conv_graph"}, *vals[1] = {"1"};
    kiln_session_options_append_provider(opt, "cuda", keys, vals, 1);
    kiln_session *s = NULL;
    CHECK_MSG(data && kiln_session_create_from_memory(data, size, NULL, opt, &s) == KILN_OK, "session: %s",
              kiln_last_error());
    kiln_session_options_destroy(opt);
    const unsigned long long r0 = kn_cu_conv_graph_runs();
    int runs = 0, first_with_graph = -1;
    uint64_t launches_before_graph = 0;
    const double t0 = kn_now_ms();
    while (s && first_with_graph < 0 && kn_now_ms() - t0 < 120e3) {
        kn_tensor *y = NULL;
        om_run(s, &gpu, &y);
        char what[64];
        snprintf(what, sizeof what, "run %d", runs);
        check_conv_close(y, copy_of(want), 1e-2, what);
        if (kn_cu_conv_graph_runs() > r0) first_with_graph = runs;
        else kn_graph_run_stats(s, NULL, NULL, &launches_before_graph);
        runs++;
        if (first_with_graph < 0) usleep(20000);
    }
    CHECK_MSG(first_with_graph > 0, "the graph ran first at run %d (a later run than the first expected; %d runs)",
              first_with_graph, runs);
    CHECK_MSG(launches_before_graph == 0, "%llu CUDA graph launches before the cuDNN graph was in use",
              (unsigned long long)launches_before_graph);
    for (int r = 0; s && r < 3; r++) { /* then recorded and replayed, with the graph in it */
        kn_tensor *y = NULL;
        om_run(s, &gpu, &y);
        check_conv_close(y, copy_of(want), 1e-2, "a run after the graph's");
    }
    uint64_t launches = 0;
    kn_graph_run_stats(s, NULL, NULL, &launches);
    CHECK_MSG(launches > 0, "no run was recorded into a CUDA graph after the cuDNN graph came into use");
    /* with nothing left to build the builders end (their handles and streams back), while the
     * session lives on */
    const double t1 = kn_now_ms();
    while (kn_cu_conv_graph_builders() > 0 && kn_now_ms() - t1 < 20e3) usleep(50000);
    CHECK_MSG(kn_cu_conv_graph_builders() == 0, "%d cuDNN graph builder thread(s) still there %.0f ms after the last build",
              kn_cu_conv_graph_builders(), kn_now_ms() - t1);
    kn_tensor *y_after = NULL;
    if (s) om_run(s, &gpu, &y_after);
    check_conv_close(y_after, copy_of(want), 1e-2, "a run after the builders ended");
    kiln_session_destroy(s);
    kiln_tensor_destroy(want);
    free(data);
    om_free(&gpu);
    om_free(&cpu);
#endif
}

/* A FusedConv whose y_type asks for Y in bfloat16 from float X (what the CPU's pass
 * cpu_bf16_values writes; a model may carry it): CUDA's kernels write Y in X's type, so CUDA refuses
 * the node. With cuda alone the session says so; with cuda then cpu the node runs on the CPU and
 * gives the CPU's result. */
KN_TEST(cuda_fused_conv_y_type_refused) {
    NEED_GPU();
    onemodel o;
    fused_conv_model(&o, KILN_DTYPE_FLOAT, false, false, 3, "Relu", NULL);
    kn_attr *a = om_attr(&o, "y_type", KN_ATTR_INTS);
    a->ints = kn_arena_alloc(&o.m->arena, sizeof(int64_t));
    a->ints[0] = KILN_DTYPE_BFLOAT16;
    a->n = 1;
    unsigned char *data = NULL;
    size_t size = 0;
    kn_graph_recount(o.g);
    CHECK(kn_onnx_write_memory(o.m, &data, &size) == KILN_OK);
    kn_tensor *y[2] = {NULL, NULL};
    for (int both = 0; both < 2 && data; both++) {
        kiln_session_options *opt;
        kiln_session_options_create(&opt);
        kiln_session_options_set_opt_level(opt, 0);
        kiln_session_options_set_cache(opt, 0, NULL);
        kiln_session_options_append_provider(opt, "cuda", NULL, NULL, 0);
        if (both) kiln_session_options_append_provider(opt, "cpu", NULL, NULL, 0);
        kiln_session *s = NULL;
        const kiln_status st = kiln_session_create_from_memory(data, size, NULL, opt, &s);
        kiln_session_options_destroy(opt);
        if (!both) {
            CHECK_MSG(st != KILN_OK && strstr(kiln_last_error(), "y_type"), "cuda alone: %s",
                      st == KILN_OK ? "the session was made" : kiln_last_error());
        } else {
            CHECK_MSG(st == KILN_OK, "cuda,cpu: %s", kiln_last_error());
            if (s) om_run(s, &o, &y[0]);
        }
        kiln_session_destroy(s);
    }
    free(data);
    y[1] = run_one(&o, "cpu", "y_type on the CPU");
    CHECK(y[0] && y[1] && y[0]->dtype == KILN_DTYPE_BFLOAT16);
    if (y[0] && y[1] && y[0]->dtype == y[1]->dtype && kn_tensor_count(y[0]) == kn_tensor_count(y[1]))
        CHECK_MSG(!memcmp(y[0]->data, y[1]->data, (size_t)kn_tensor_count(y[0]) * 2), "cuda,cpu and cpu differ");
    kiln_tensor_destroy(y[0]);
    kiln_tensor_destroy(y[1]);
    om_free(&o);
}

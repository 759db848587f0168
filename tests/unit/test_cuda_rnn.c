/* GPU tests of the recurrent operators' CUDA kernels (cuda_linalg.c, cu_rnn.cu): LSTM, GRU and RNN
 * in the configurations the ONNX operators define (both directions, sequence lengths, initial
 * states, peepholes, clip, input_forget, linear_before_reset 0 and 1, float32 and float16), each
 * compared with the CPU backend every way CUDA runs a recurrence: in one launch with R in
 * registers (the default for hidden sizes up to 96), in one launch with R in shared memory
 * (KILN_CUDA_RNN=shared, and the default where registers do not take it) and step by step
 * (KILN_CUDA_RNN=steps, and what a hidden size too large for one block's shared memory or a batch
 * wider than the device takes). Skipped without a device. */
#include "test_model_builder.h"
#include "test_onemodel.h"

#ifdef KILN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rnn_case {
    const char *op; /* LSTM, GRU, RNN */
    const char *direction;
    kiln_dtype dt;
    int64_t T, B, I, H;
    bool bias, lens, initial, peepholes, input_forget, lbr;
    float clip;
    const char *act; /* RNN's activation, NULL for the default */
    bool one_launch;  /* whether the default run takes the one-launch kernel */
    bool batch_first; /* layout=1: X [B, T, I], Y [B, T, D, H], states [B, D, H] */
} rnn_case;

static void build(onemodel *o, const rnn_case *k) {
    om_init(o, 14);
    int G = !strcmp(k->op, "LSTM") ? 4 : !strcmp(k->op, "GRU") ? 3 : 1;
    int64_t D = !strcmp(k->direction, "bidirectional") ? 2 : 1;
    int64_t xd[3] = {k->T, k->B, k->I}, wd[3] = {D, G * k->H, k->I}, rd[3] = {D, G * k->H, k->H},
            bd[2] = {D, 2 * G * k->H}, ld[1] = {k->B}, hd[3] = {D, k->B, k->H}, pd[2] = {D, 3 * k->H};
    if (k->batch_first) {
        xd[0] = k->B, xd[1] = k->T;
        hd[0] = k->B, hd[1] = D;
    }
    int in[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    in[0] = om_input(o, "X", k->dt, 3, xd, 1.0f, NULL);
    in[1] = om_input(o, "W", k->dt, 3, wd, 0.3f, NULL);
    in[2] = om_input(o, "R", k->dt, 3, rd, 0.3f, NULL);
    if (k->bias) in[3] = om_input(o, "B", k->dt, 2, bd, 0.5f, NULL);
    if (k->lens) {
        int32_t lens[64];
        for (int64_t b = 0; b < k->B && b < 64; b++) lens[b] = (int32_t)(k->T - (b * 3) % k->T);
        in[4] = om_input(o, "sequence_lens", KILN_DTYPE_INT32, 1, ld, 0, lens);
    }
    if (k->initial) {
        in[5] = om_input(o, "initial_h", k->dt, 3, hd, 0.8f, NULL);
        if (G == 4) in[6] = om_input(o, "initial_c", k->dt, 3, hd, 0.8f, NULL);
    }
    if (k->peepholes) in[7] = om_input(o, "P", k->dt, 2, pd, 0.5f, NULL);
    int nin = 8;
    while (nin > 0 && in[nin - 1] < 0) nin--;
    int out[3] = {om_value(o, "Y"), om_value(o, "Y_h"), G == 4 ? om_value(o, "Y_c") : -1};
    om_node(o, k->op, in, nin, out, G == 4 ? 3 : 2);
    om_int(o, "hidden_size", k->H);
    om_str(o, "direction", k->direction);
    if (k->clip > 0) om_float(o, "clip", k->clip);
    if (k->input_forget) om_int(o, "input_forget", 1);
    if (k->batch_first) om_int(o, "layout", 1);
    if (G == 3) om_int(o, "linear_before_reset", k->lbr);
    if (k->act) {
        kn_attr *a = om_attr(o, "activations", KN_ATTR_STRINGS);
        a->n = (int)D;
        a->strings = kn_arena_alloc(&o->m->arena, sizeof(char *) * (size_t)D);
        for (int i = 0; i < D; i++) a->strings[i] = k->act;
    }
}

static void check_case(const rnn_case *k) {
    char what[200];
    snprintf(what, sizeof what, "%s %s %s T=%lld B=%lld I=%lld H=%lld%s%s%s%s%s%s%s", k->op, k->direction,
             kiln_dtype_name(k->dt), (long long)k->T, (long long)k->B, (long long)k->I, (long long)k->H,
             k->bias ? " bias" : "", k->lens ? " seq_lens" : "", k->initial ? " initial" : "",
             k->peepholes ? " peepholes" : "", k->clip > 0 ? " clip" : "", k->lbr ? " linear_before_reset" : "",
             k->batch_first ? " layout=1" : "");
    double rtol = k->dt == KILN_DTYPE_FLOAT ? 1e-4 : 1e-2, atol = k->dt == KILN_DTYPE_FLOAT ? 2e-5 : 1e-2;
    onemodel o;
    build(&o, k);
#ifdef KILN_HAVE_CUDA
    long long before = kn_cuda_rnn_one_launch_runs(), before_reg = kn_cuda_rnn_register_runs();
#endif
    om_check(&o, rtol, atol, what);
#ifdef KILN_HAVE_CUDA
    long long ran = kn_cuda_rnn_one_launch_runs() - before, reg = kn_cuda_rnn_register_runs() - before_reg;
    CHECK_MSG((ran > 0) == k->one_launch, "%s: ran %s, expected %s", what, ran > 0 ? "in one launch" : "step by step",
              k->one_launch ? "in one launch" : "step by step");
    /* registers take hidden sizes up to 96 (a GRU only with linear_before_reset) and up to 4 items
     * per block */
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    int64_t dirs = !strcmp(k->direction, "bidirectional") ? 2 : 1;
    bool want_reg = k->one_launch && k->H <= 96 && (strcmp(k->op, "GRU") || k->lbr) && k->B * dirs <= 4 * (int64_t)sms;
    CHECK_MSG((reg > 0) == want_reg, "%s: R %s registers, expected %s", what, reg > 0 ? "in" : "not in",
              want_reg ? "in" : "not in");
#endif
    if (k->one_launch) {
        /* the same case with R in shared memory, and step by step */
        static const char *const modes[2][2] = {{"shared", "R in shared memory"}, {"steps", "step by step"}};
        for (int m = 0; m < 2; m++) {
            setenv("KILN_CUDA_RNN", modes[m][0], 1);
            char w2[240];
            snprintf(w2, sizeof w2, "%s, %s", what, modes[m][1]);
            om_check(&o, rtol, atol, w2);
            unsetenv("KILN_CUDA_RNN");
        }
    }
    om_free(&o);
}

#define F32 KILN_DTYPE_FLOAT
#define F16 KILN_DTYPE_FLOAT16

KN_TEST(cuda_lstm_matches_cpu) {
    NEED_GPU();
    static const rnn_case cases[] = {
        /* op, direction, dt, T, B, I, H, bias, lens, initial, peep, input_forget, lbr, clip, act, one launch */
        {"LSTM", "forward", F32, 9, 3, 40, 96, true, false, true, false, false, false, 0, NULL, true},
        {"LSTM", "bidirectional", F32, 7, 5, 12, 33, true, true, true, true, false, false, 0, NULL, true},
        {"LSTM", "reverse", F32, 6, 2, 8, 16, false, true, false, false, true, false, 1.5f, NULL, true},
        {"LSTM", "forward", F16, 9, 3, 40, 96, true, false, true, true, false, false, 0, NULL, true},
        {"LSTM", "forward", F32, 5, 300, 16, 64, true, false, false, false, false, false, 0, NULL, true},
        /* R of 4 * 200 * 200 floats is over a block's shared memory: step by step */
        {"LSTM", "forward", F32, 4, 2, 16, 200, true, false, true, false, false, false, 0, NULL, false},
        /* more batch items than 8 per block on every SM: step by step */
        {"LSTM", "bidirectional", F32, 3, 1100, 8, 16, true, false, false, false, false, false, 0, NULL, false},
        /* no time steps: Y empty, Y_h and Y_c zero (as the CPU and ONNX Runtime give them) */
        {"LSTM", "forward", F32, 0, 3, 8, 16, true, false, true, false, false, false, 0, NULL, false},
        /* layout=1 (batch first): transposed around the time-major recurrence */
        {"LSTM", "bidirectional", F32, 7, 5, 12, 33, true, true, true, true, false, false, 0, NULL, true, true},
        {"LSTM", "forward", F32, 4, 2, 16, 200, true, false, true, false, false, false, 0, NULL, false, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
}

KN_TEST(cuda_gru_matches_cpu) {
    NEED_GPU();
    static const rnn_case cases[] = {
        {"GRU", "bidirectional", F32, 50, 1, 96, 64, true, false, true, false, false, true, 0, NULL, true},
        {"GRU", "bidirectional", F32, 8, 4, 10, 24, true, true, true, false, false, false, 0, NULL, true},
        {"GRU", "reverse", F32, 6, 3, 7, 20, true, true, false, false, false, true, 2.0f, NULL, true},
        {"GRU", "forward", F32, 6, 3, 7, 20, false, false, false, false, false, false, 0, NULL, true},
        {"GRU", "bidirectional", F16, 12, 2, 32, 64, true, false, true, false, false, true, 0, NULL, true},
        {"GRU", "forward", F32, 3, 2, 8, 300, true, false, true, false, false, false, 0, NULL, false},
        {"GRU", "bidirectional", F16, 9, 3, 16, 40, true, true, true, false, false, true, 0, NULL, true, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
}

KN_TEST(cuda_rnn_matches_cpu) {
    NEED_GPU();
    static const rnn_case cases[] = {
        {"RNN", "bidirectional", F32, 7, 4, 9, 30, true, true, true, false, false, false, 0, NULL, true},
        {"RNN", "forward", F32, 7, 4, 9, 30, true, false, false, false, false, false, 0, "Relu", true},
        {"RNN", "reverse", F32, 5, 2, 6, 12, false, false, true, false, false, false, 0.7f, "Sigmoid", true},
        {"RNN", "bidirectional", F32, 6, 3, 5, 10, true, false, true, false, false, false, 0, NULL, true, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
}

/* ------------------------------------------------------------------ kiln.StackedLSTM */

static int typed_const(tmb *b, kiln_dtype dt, const char *name, int rank, const int64_t *dims, float scale) {
    kn_tensor *t;
    kn_tensor_new(dt, rank, dims, &t);
    for (int64_t i = 0; i < kn_tensor_count(t); i++) kn_tensor_set_f64(t, i, scale * tmb_rand(&b->seed));
    return tmb_const_tensor(b, name, t);
}

/* X [T, B, I] -> LSTM -> Squeeze(1) -> LSTM -> ... (hidden sizes hs[0..layers)), as PyTorch exports
 * nn.LSTM(num_layers); the top layer's Y, Y_h, Y_c are the outputs. Layer 1 starts from given
 * initial states, the others from zeros. */
static unsigned char *stacked_model(kiln_dtype dt, int64_t T, int64_t B, int64_t I, const int64_t *hs, int layers,
                                    size_t *size) {
    tmb b;
    tmb_init(&b, 14);
    const char *sym[3] = {NULL, "batch", NULL};
    int64_t xd[3] = {T, -1, I};
    int x = tmb_input(&b, "X", dt, 3, xd, sym);
    int64_t in = I;
    for (int l = 0; l < layers; l++) {
        int64_t H = hs[l], wd[3] = {1, 4 * H, in}, rd[3] = {1, 4 * H, H}, bd[2] = {1, 8 * H};
        char name[32];
        int ins[7] = {x, -1, -1, -1, -1, -1, -1};
        snprintf(name, sizeof name, "W%d", l);
        ins[1] = typed_const(&b, dt, name, 3, wd, 0.25f);
        snprintf(name, sizeof name, "R%d", l);
        ins[2] = typed_const(&b, dt, name, 3, rd, 0.25f);
        snprintf(name, sizeof name, "B%d", l);
        ins[3] = typed_const(&b, dt, name, 2, bd, 0.5f);
        if (l == 1) {
            int64_t hd[3] = {1, B, H};
            ins[5] = typed_const(&b, dt, "h0", 3, hd, 0.8f);
            ins[6] = typed_const(&b, dt, "c0", 3, hd, 0.8f);
        }
        char yn[32], hn[32], cn[32];
        snprintf(yn, sizeof yn, "Y%d", l);
        snprintf(hn, sizeof hn, "Y_h%d", l);
        snprintf(cn, sizeof cn, "Y_c%d", l);
        int outs[3] = {tmb_value(&b, yn), tmb_value(&b, hn), tmb_value(&b, cn)};
        int node = kn_graph_add_node(b.g, NULL, "LSTM", "", ins, 7, outs, 3);
        tmb_int(&b, node, "hidden_size", H);
        if (l == layers - 1) {
            for (int o = 0; o < 3; o++) tmb_output(&b, outs[o]);
        } else {
            int64_t axes[1] = {1};
            snprintf(name, sizeof name, "axes%d", l);
            int sq[2] = {outs[0], tmb_const_i64(&b, name, axes, 1, false)};
            snprintf(name, sizeof name, "S%d", l);
            x = tmb_value(&b, name);
            tmb_node(&b, "Squeeze", sq, 2, x);
        }
        in = H;
    }
    return tmb_finish(&b, size);
}

static kiln_session *stacked_session(const unsigned char *m, size_t size, const char *provider, int level) {
    kiln_session_options *o;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, level);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_append_provider(o, provider, NULL, NULL, 0);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(m, size, NULL, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "session (%s, level %d): %s", provider, level, kiln_last_error());
    return s;
}

/* pipelined: whether KILN_CUDA_RNN=shared runs the layers as one pipelined launch (R in shared
 * memory); registers: whether by default each layer runs with R in registers, one after another. */
static void stacked_case(kiln_dtype dt, int64_t T, int64_t B, int64_t I, const int64_t *hs, int layers,
                         bool pipelined, bool registers) {
    char what[160];
    snprintf(what, sizeof what, "%d stacked LSTM layers (%s, T=%lld B=%lld I=%lld H0=%lld)", layers,
             kiln_dtype_name(dt), (long long)T, (long long)B, (long long)I, (long long)hs[0]);
    size_t size;
    unsigned char *m = stacked_model(dt, T, B, I, hs, layers, &size);
    kiln_session *cpu = stacked_session(m, size, "cpu", 0);
    kn_tensor *x;
    int64_t xd[3] = {T, B, I};
    kn_tensor_new(dt, 3, xd, &x);
    uint32_t seed = 77;
    for (int64_t i = 0; i < kn_tensor_count(x); i++) kn_tensor_set_f64(x, i, tmb_rand(&seed));
    const char *names[1] = {"X"};
    kn_tensor *ins[1] = {x}, *want[3] = {NULL, NULL, NULL};
    CHECK_MSG(cpu && kiln_session_run(cpu, names, ins, 1, NULL, 3, want) == KILN_OK, "%s on the CPU: %s", what,
              kiln_last_error());
    double tol = dt == KILN_DTYPE_FLOAT ? 2e-5 : 1e-2;
    static const char *const mode_env[3] = {NULL, "shared", "steps"}, *const mode_name[3] = {"", ", R in shared memory", ", step by step"};
    for (int mode = 0; mode < 3 && want[0]; mode++) {
        if (mode_env[mode]) setenv("KILN_CUDA_RNN", mode_env[mode], 1);
#ifdef KILN_HAVE_CUDA
        long long before = kn_cuda_lstm_stack_runs(), before_reg = kn_cuda_rnn_register_runs();
#endif
        kiln_session *gpu = stacked_session(m, size, "cuda", 3);
        kn_tensor *got[3] = {NULL, NULL, NULL};
        if (gpu) {
            CHECK_MSG(kiln_session_run(gpu, names, ins, 1, NULL, 3, got) == KILN_OK, "%s on CUDA: %s", what,
                      kiln_last_error());
            for (int k = 0; k < 3 && got[k]; k++)
                for (int64_t i = 0; i < kn_tensor_count(want[k]); i++) {
                    double w = kn_tensor_get_f64(want[k], i), g = kn_tensor_get_f64(got[k], i);
                    if (!(fabs(w - g) <= tol + tol * fabs(w))) {
                        kn_unit_fail(__FILE__, __LINE__, "%s%s: output %d element %lld is %.7g on CUDA, %.7g on the CPU",
                                     what, mode_name[mode], k, (long long)i, g, w);
                        break;
                    }
                }
        }
#ifdef KILN_HAVE_CUDA
        bool ran = kn_cuda_lstm_stack_runs() > before, reg = kn_cuda_rnn_register_runs() > before_reg;
        bool want_pipe = pipelined && (mode == 1 || (mode == 0 && !registers));
        CHECK_MSG(ran == want_pipe, "%s%s: %s pipelined", what, mode_name[mode], ran ? "ran" : "did not run");
        CHECK_MSG(reg == (registers && mode == 0), "%s%s: %s with R in registers", what, mode_name[mode],
                  reg ? "ran" : "did not run");
#endif
        for (int k = 0; k < 3; k++) kn_tensor_free(got[k]);
        kiln_session_destroy(gpu);
        unsetenv("KILN_CUDA_RNN");
    }
    for (int k = 0; k < 3; k++) kn_tensor_free(want[k]);
    kn_tensor_free(x);
    kiln_session_destroy(cpu);
    free(m);
}

KN_TEST(cuda_stacked_lstm_matches_cpu) {
    NEED_GPU();
    static const int64_t two[2] = {96, 96}, three[3] = {32, 48, 20}, wide[2] = {256, 256};
    stacked_case(KILN_DTYPE_FLOAT, 50, 1, 40, two, 2, true, true);
    stacked_case(KILN_DTYPE_FLOAT, 17, 3, 40, two, 2, true, true);
    stacked_case(KILN_DTYPE_FLOAT, 9, 70, 12, three, 3, true, true);
    stacked_case(KILN_DTYPE_FLOAT16, 12, 2, 16, two, 2, true, true);
    /* R of 4 * 256 * 256 floats fits neither registers nor a block's shared memory: the layers one
     * by one, step by step */
    stacked_case(KILN_DTYPE_FLOAT, 5, 2, 8, wide, 2, false, false);
}

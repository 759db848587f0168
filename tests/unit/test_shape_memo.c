/* The shape memo (src/exec/exec.c): a run with input shapes seen before infers only the nodes whose
 * output shapes depend on data. What must hold: a model whose shapes follow from its input shapes
 * infers nothing after its first run with those shapes (kn_exec_infer_count), for each set of input
 * shapes; a shape that depends on data (NonZero, Range from an input scalar, Reshape to a shape
 * given as an input) is inferred again at each run, and the outputs are right when the data change
 * between runs with the same shapes. References computed here. */
#include "test_model_builder.h"

#include "exec/exec.h"
#include "unit_zoo.h"
#include "kiln.h"

#include <stdlib.h>

static kiln_session *memo_session(unsigned char *m, size_t size, int level) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, level);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session *s = NULL;
    CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, o, &s), KILN_OK);
    kiln_session_options_destroy(o);
    return s;
}

/* x [N,16] (N symbolic), 20 blocks of:
 *   a = Add(x, c)  r = Relu(a)  t = Reshape(r, Concat(Shape(r)[0], [4,4]))  p = Transpose(t, [0,2,1])
 *   x' = Reshape(p, Concat(Shape(r)[0], [16]))
 * Every shape follows from N (the Reshapes' shapes from Shape chains). y = the last x'. */
static unsigned char *static_model(size_t *size, int *n_nodes) {
    tmb b;
    tmb_init(&b, 17);
    const char *sym[2] = {"N", NULL};
    int64_t xd[2] = {-1, 16}, cd[2] = {1, 16}, s44[2] = {4, 4}, s16[1] = {16}, zero[1] = {0};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, xd, sym);
    int c = tmb_const(&b, "c", 2, cd, 0.5f);
    int k44 = tmb_const_i64(&b, "s44", s44, 2, false), k16 = tmb_const_i64(&b, "s16", s16, 1, false);
    int i0 = tmb_const_i64(&b, "i0", zero, 1, false);
    int cur = x, nodes = 0;
    for (int i = 0; i < 20; i++) {
        char nm[32];
#define V(fmt) (snprintf(nm, sizeof nm, fmt "_%d", i), tmb_value(&b, nm))
        int a = V("a"), r = V("r"), sh = V("sh"), n = V("n"), s1 = V("s1"), t = V("t"), p = V("p"), s2 = V("s2"), o = V("o");
#undef V
        tmb_node(&b, "Add", (int[]){cur, c}, 2, a);
        tmb_node(&b, "Relu", (int[]){a}, 1, r);
        tmb_node(&b, "Shape", (int[]){r}, 1, sh);
        int g = tmb_node(&b, "Gather", (int[]){sh, i0}, 2, n);
        tmb_int(&b, g, "axis", 0);
        int c1 = tmb_node(&b, "Concat", (int[]){n, k44}, 2, s1);
        tmb_int(&b, c1, "axis", 0);
        tmb_node(&b, "Reshape", (int[]){r, s1}, 2, t);
        int tr = tmb_node(&b, "Transpose", (int[]){t}, 1, p);
        tmb_ints(&b, tr, "perm", (int64_t[]){0, 2, 1}, 3);
        int c2 = tmb_node(&b, "Concat", (int[]){n, k16}, 2, s2);
        tmb_int(&b, c2, "axis", 0);
        tmb_node(&b, "Reshape", (int[]){p, s2}, 2, o);
        cur = o;
        nodes += 9;
    }
    tmb_output(&b, cur);
    *n_nodes = nodes;
    return tmb_finish(&b, size);
}

/* The static model's output for x (rows of 16). */
static void static_ref(const float *x, int rows, const float *c, float *y) {
    float cur[64 * 16], tmp[16];
    memcpy(cur, x, sizeof(float) * (size_t)rows * 16);
    for (int i = 0; i < 20; i++)
        for (int r = 0; r < rows; r++) {
            for (int k = 0; k < 16; k++) {
                float v = cur[r * 16 + k] + c[k];
                tmp[k] = v > 0 ? v : 0;
            }
            for (int p = 0; p < 4; p++)
                for (int q = 0; q < 4; q++) cur[r * 16 + p * 4 + q] = tmp[q * 4 + p];
        }
    memcpy(y, cur, sizeof(float) * (size_t)rows * 16);
}

static void fill(float *p, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) p[i] = tmb_rand(&seed) * 2.0f;
}

KN_TEST(shape_memo_static_model_infers_nothing_after_its_first_run) {
    size_t size;
    int n_nodes = 0;
    unsigned char *m = static_model(&size, &n_nodes);
    /* the constant c, as the builder drew it: its first 16 random values */
    float c[16];
    uint32_t seed = 12345;
    for (int k = 0; k < 16; k++) c[k] = 0.5f * tmb_rand(&seed);
    for (int level = 0; level <= 3; level += 3) {
        kiln_session *s = memo_session(m, size, level);
        if (!s) continue;
        const char *in_names[1] = {"x"};
        /* batch sizes: 2 (first), 2 (memo), 3 (new shapes: first), 2 and 3 again (both kept) */
        static const int rows_of[5] = {2, 2, 3, 2, 3};
        for (int run = 0; run < 5; run++) {
            int rows = rows_of[run];
            float xv[3 * 16], want[3 * 16];
            fill(xv, rows * 16, 77u + (uint32_t)run);
            static_ref(xv, rows, c, want);
            int64_t xd[2] = {rows, 16};
            kiln_tensor *x = NULL, *y = NULL;
            CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_FLOAT, xd, 2, xv, sizeof(float) * (size_t)rows * 16, &x), KILN_OK);
            uint64_t before = kn_exec_infer_count();
            CHECK_STATUS(kiln_session_run(s, in_names, &x, 1, NULL, 1, &y), KILN_OK);
            uint64_t infers = kn_exec_infer_count() - before;
            if (run == 0 || run == 2) {
                /* the first run with these shapes infers every node (level 3 folds some away) */
                CHECK_MSG(infers > 0, "level %d run %d (batch %d): no node inferred on a first run", level, run, rows);
                if (level == 0)
                    CHECK_MSG(infers >= (uint64_t)n_nodes, "level 0 run %d: %llu infer calls for %d nodes", run,
                              (unsigned long long)infers, n_nodes);
            } else {
                CHECK_MSG(infers == 0, "level %d run %d (batch %d, seen before): %llu infer calls, want none", level,
                          run, rows, (unsigned long long)infers);
            }
            if (y) {
                const int64_t *d = kiln_tensor_dims(y);
                CHECK_MSG(kiln_tensor_rank(y) == 2 && d[0] == rows && d[1] == 16, "level %d run %d: output shape", level,
                          run);
                const float *yv = kiln_tensor_data(y);
                for (int i = 0; i < rows * 16; i++)
                    CHECK_MSG(fabsf(yv[i] - want[i]) <= 1e-5f, "level %d run %d: y[%d] = %g, want %g", level, run, i,
                              yv[i], want[i]);
            }
            kiln_tensor_destroy(y);
            kiln_tensor_destroy(x);
        }
        kiln_session_destroy(s);
    }
    free(m);
}

/* x float [2,3], n int64 scalar, s int64 [2]:
 *   nz   = NonZero(x)           [2, count]: data
 *   flat = Reshape(nz, [-1])    [2 * count]
 *   r    = Range(0, n, 1)       [n]: data
 *   r2   = Add(r, r)
 *   rx   = Reshape(x, s)        s's values: data
 *   rl   = Relu(x)              the only node whose shape follows from the input shapes
 * outputs flat, r2, rx, rl */
static unsigned char *dynamic_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int64_t xd[2] = {2, 3}, sd[1] = {2}, m1[1] = {-1}, zero = 0, one = 1;
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, xd, NULL);
    int n = tmb_input(&b, "n", KILN_DTYPE_INT64, 0, NULL, NULL);
    int s = tmb_input(&b, "s", KILN_DTYPE_INT64, 1, sd, NULL);
    int km1 = tmb_const_i64(&b, "minus1", m1, 1, false);
    int k0 = tmb_const_i64(&b, "zero", &zero, 1, true), k1 = tmb_const_i64(&b, "one", &one, 1, true);
    int nz = tmb_value(&b, "nz"), flat = tmb_value(&b, "flat"), r = tmb_value(&b, "r"), r2 = tmb_value(&b, "r2");
    int rx = tmb_value(&b, "rx"), rl = tmb_value(&b, "rl");
    tmb_node(&b, "NonZero", (int[]){x}, 1, nz);
    tmb_node(&b, "Reshape", (int[]){nz, km1}, 2, flat);
    tmb_node(&b, "Range", (int[]){k0, n, k1}, 3, r);
    tmb_node(&b, "Add", (int[]){r, r}, 2, r2);
    tmb_node(&b, "Reshape", (int[]){x, s}, 2, rx);
    tmb_node(&b, "Relu", (int[]){x}, 1, rl);
    tmb_output(&b, flat);
    tmb_output(&b, r2);
    tmb_output(&b, rx);
    tmb_output(&b, rl);
    return tmb_finish(&b, size);
}

KN_TEST(shape_memo_data_dependent_shapes_are_inferred_at_each_run) {
    size_t size;
    unsigned char *m = dynamic_model(&size);
    for (int level = 0; level <= 3; level += 3) {
        kiln_session *s = memo_session(m, size, level);
        if (!s) continue;
        /* the same input shapes each run, other data: 2, 5, 0, 6 nonzeros; n 3, 7, 0, 1; s [3,2], [6,1], [1,6], [2,3] */
        static const float xs[4][6] = {{0, 1.5f, 0, 0, -2, 0}, {1, 2, 3, 0, 4, 5}, {0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, -1}};
        static const int64_t ns[4] = {3, 7, 0, 1};
        static const int64_t ss[4][2] = {{3, 2}, {6, 1}, {1, 6}, {2, 3}};
        for (int run = 0; run < 4; run++) {
            float xv[6];
            memcpy(xv, xs[run], sizeof xv);
            int64_t nv = ns[run], sv[2] = {ss[run][0], ss[run][1]};
            int64_t xd[2] = {2, 3}, sd[1] = {2};
            kiln_tensor *in[3] = {NULL}, *out[4] = {NULL};
            CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_FLOAT, xd, 2, xv, sizeof xv, &in[0]), KILN_OK);
            CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_INT64, NULL, 0, &nv, sizeof nv, &in[1]), KILN_OK);
            CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_INT64, sd, 1, sv, sizeof sv, &in[2]), KILN_OK);
            const char *in_names[3] = {"x", "n", "s"}, *out_names[4] = {"flat", "r2", "rx", "rl"};
            uint64_t before = kn_exec_infer_count();
            CHECK_STATUS(kiln_session_run(s, in_names, in, 3, out_names, 4, out), KILN_OK);
            uint64_t infers = kn_exec_infer_count() - before;
            if (run > 0)
                /* NonZero, both Reshapes, Range and Add again; not Relu */
                CHECK_MSG(infers == 5, "level %d run %d: %llu infer calls, want 5 (the data-dependent nodes)", level,
                          run, (unsigned long long)infers);
            /* flat: NonZero's row indices then column indices */
            int64_t want_flat[12];
            int cnt = 0;
            for (int i = 0; i < 6; i++) cnt += xv[i] != 0;
            for (int i = 0, k = 0; i < 6; i++)
                if (xv[i] != 0) {
                    want_flat[k] = i / 3;
                    want_flat[cnt + k] = i % 3;
                    k++;
                }
            if (out[0]) {
                CHECK_MSG(kiln_tensor_rank(out[0]) == 1 && kiln_tensor_dims(out[0])[0] == 2 * cnt,
                          "level %d run %d: flat has %lld elements, want %d", level, run,
                          kiln_tensor_rank(out[0]) == 1 ? (long long)kiln_tensor_dims(out[0])[0] : -1LL, 2 * cnt);
                const int64_t *f = kiln_tensor_data(out[0]);
                for (int i = 0; kiln_tensor_rank(out[0]) == 1 && i < 2 * cnt && i < kiln_tensor_dims(out[0])[0]; i++)
                    CHECK_MSG(f[i] == want_flat[i], "level %d run %d: flat[%d] = %lld, want %lld", level, run, i,
                              (long long)f[i], (long long)want_flat[i]);
            }
            if (out[1]) {
                CHECK_MSG(kiln_tensor_rank(out[1]) == 1 && kiln_tensor_dims(out[1])[0] == nv,
                          "level %d run %d: r2's shape, want [%lld]", level, run, (long long)nv);
                const int64_t *r = kiln_tensor_data(out[1]);
                for (int64_t i = 0; kiln_tensor_rank(out[1]) == 1 && i < nv && i < kiln_tensor_dims(out[1])[0]; i++)
                    CHECK_MSG(r[i] == 2 * i, "level %d run %d: r2[%lld] = %lld", level, run, (long long)i,
                              (long long)r[i]);
            }
            if (out[2]) {
                const int64_t *d = kiln_tensor_dims(out[2]);
                CHECK_MSG(kiln_tensor_rank(out[2]) == 2 && d[0] == sv[0] && d[1] == sv[1],
                          "level %d run %d: rx is not [%lld,%lld]", level, run, (long long)sv[0], (long long)sv[1]);
                CHECK(!memcmp(kiln_tensor_data(out[2]), xv, sizeof xv));
            }
            if (out[3]) {
                const float *rl = kiln_tensor_data(out[3]);
                for (int i = 0; i < 6; i++)
                    CHECK_MSG(rl[i] == (xv[i] > 0 ? xv[i] : 0), "level %d run %d: rl[%d] = %g", level, run, i, rl[i]);
            }
            for (int k = 0; k < 4; k++) kiln_tensor_destroy(out[k]);
            for (int k = 0; k < 3; k++) kiln_tensor_destroy(in[k]);
        }
        kiln_session_destroy(s);
    }
    free(m);
}

/* KILN_SHAPE_MEMO=0 turns it off: every run infers every node. */
KN_TEST(shape_memo_off_infers_every_run) {
    size_t size;
    int n_nodes = 0;
    unsigned char *m = static_model(&size, &n_nodes);
    const char *prev = getenv("KILN_SHAPE_MEMO");
    char *saved = prev ? strdup(prev) : NULL;
    setenv("KILN_SHAPE_MEMO", "0", 1); /* (read as the session is made: restored at once) */
    kiln_session *s = memo_session(m, size, 0);
    if (saved) setenv("KILN_SHAPE_MEMO", saved, 1);
    else unsetenv("KILN_SHAPE_MEMO");
    free(saved);
    free(m);
    if (!s) return;
    float xv[16];
    fill(xv, 16, 5);
    int64_t xd[2] = {1, 16};
    kiln_tensor *x = NULL;
    CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_FLOAT, xd, 2, xv, sizeof xv, &x), KILN_OK);
    const char *in_names[1] = {"x"};
    for (int run = 0; run < 2; run++) {
        kiln_tensor *y = NULL;
        uint64_t before = kn_exec_infer_count();
        CHECK_STATUS(kiln_session_run(s, in_names, &x, 1, NULL, 1, &y), KILN_OK);
        CHECK_MSG(kn_exec_infer_count() - before == (uint64_t)n_nodes, "run %d: %llu infer calls, want %d", run,
                  (unsigned long long)(kn_exec_infer_count() - before), n_nodes);
        kiln_tensor_destroy(y);
    }
    kiln_tensor_destroy(x);
    kiln_session_destroy(s);
}

/* Loop(M, true, v0) whose body computes v' = Relu(v + w + bias) (w: a constant of the main graph,
 * bias: an input of it, both read from the outer scope) and, with `grow`, also acc' = Concat(acc, [i]) (a carried value one longer at each
 * iteration: a new input shape at each run of the body). */
static unsigned char *loop_model(size_t *size, bool grow) {
    tmb b;
    tmb_init(&b, 17);
    kn_graph *main_g = b.g;
    int m = tmb_input(&b, "M", KILN_DTYPE_INT64, 0, NULL, NULL);
    int v0 = tmb_input(&b, "v0", KILN_DTYPE_FLOAT, 1, (int64_t[]){4}, NULL);
    tmb_input(&b, "bias", KILN_DTYPE_FLOAT, 1, (int64_t[]){4}, NULL);
    tmb_const(&b, "w", 1, (int64_t[]){4}, 1.0f);
    int64_t none[1] = {0};
    int acc0 = grow ? tmb_input(&b, "acc0", KILN_DTYPE_INT64, 1, none, NULL) : -1;
    kn_tensor *ct = NULL;
    kn_tensor_new(KILN_DTYPE_BOOL, 0, NULL, &ct);
    ((unsigned char *)ct->data)[0] = 1;
    int cond = tmb_const_tensor(&b, "cond", ct);
    int v = tmb_value(&b, "v"), acc = grow ? tmb_value(&b, "acc") : -1;
    kn_graph *body = NULL;
    kn_graph_new(b.m, main_g, "body", &body);
    b.g = body;
    int bi = tmb_input(&b, "i", KILN_DTYPE_INT64, 0, NULL, NULL);
    int bc = tmb_input(&b, "c_in", KILN_DTYPE_BOOL, 0, NULL, NULL);
    int bv = tmb_input(&b, "v_in", KILN_DTYPE_FLOAT, 1, (int64_t[]){4}, NULL);
    int bacc = grow ? tmb_input(&b, "acc_in", KILN_DTYPE_INT64, 1, (int64_t[]){-1}, (const char *[]){"L"}) : -1;
    int bw = tmb_value(&b, "w"), bb = tmb_value(&b, "bias");
    b.g->values[bw].is_outer = true;
    b.g->values[bb].is_outer = true;
    int ax0 = tmb_const_i64(&b, "ax0", none, 1, false);
    int c_out = tmb_value(&b, "c_out"), a = tmb_value(&b, "a"), a2 = tmb_value(&b, "a2");
    int v_out = tmb_value(&b, "v_out");
    tmb_node(&b, "Identity", (int[]){bc}, 1, c_out);
    tmb_node(&b, "Add", (int[]){bv, bw}, 2, a);
    tmb_node(&b, "Add", (int[]){a, bb}, 2, a2);
    tmb_node(&b, "Relu", (int[]){a2}, 1, v_out);
    tmb_output(&b, c_out);
    tmb_output(&b, v_out);
    if (grow) {
        int iu = tmb_value(&b, "iu"), acc_out = tmb_value(&b, "acc_out");
        tmb_node(&b, "Unsqueeze", (int[]){bi, ax0}, 2, iu);
        int cn = tmb_node(&b, "Concat", (int[]){bacc, iu}, 2, acc_out);
        tmb_int(&b, cn, "axis", 0);
        tmb_output(&b, acc_out);
    }
    kn_graph_recount(body);
    b.g = main_g;
    int in[4] = {m, cond, v0, acc0}, outs[2] = {v, acc};
    int node = kn_graph_add_node(b.g, "loop", "Loop", "", in, grow ? 4 : 3, outs, grow ? 2 : 1);
    tmb_attr(&b, node, "body", KN_ATTR_GRAPH)->g = body;
    tmb_output(&b, v);
    if (grow) tmb_output(&b, acc);
    return tmb_finish(&b, size);
}

KN_TEST(shape_memo_loop_body_infers_nothing_once_its_shapes_repeat) {
    float w[4];
    uint32_t seed = 12345;
    for (int k = 0; k < 4; k++) w[k] = tmb_rand(&seed);
    for (int grow = 0; grow <= 1; grow++) {
        size_t size;
        unsigned char *m = loop_model(&size, grow);
        kiln_session *s = memo_session(m, size, 0);
        free(m);
        if (!s) continue;
        for (int run = 0; run < 3; run++) {
            int64_t mv = 6 + run; /* trip count: data */
            float v0[4] = {0.5f, -2.0f, 1.0f + run, -0.25f}, bias[4] = {0.1f * run, -0.2f, 0.3f, -0.1f * run}, want[4];
            memcpy(want, v0, sizeof want);
            for (int64_t it = 0; it < mv; it++)
                for (int k = 0; k < 4; k++) {
                    float t = want[k] + w[k] + bias[k];
                    want[k] = t > 0 ? t : 0;
                }
            int64_t vd[1] = {4}, ad[1] = {0};
            kiln_tensor *in[4] = {NULL}, *out[2] = {NULL};
            CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_INT64, NULL, 0, &mv, sizeof mv, &in[0]), KILN_OK);
            CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_FLOAT, vd, 1, v0, sizeof v0, &in[1]), KILN_OK);
            CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_FLOAT, vd, 1, bias, sizeof bias, &in[2]), KILN_OK);
            int64_t dummy = 0;
            if (grow) CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_INT64, ad, 1, &dummy, 0, &in[3]), KILN_OK);
            const char *in_names[4] = {"M", "v0", "bias", "acc0"};
            uint64_t before = kn_exec_infer_count(), plans = kn_exec_plan_count();
            CHECK_STATUS(kiln_session_run(s, in_names, in, grow ? 4 : 3, NULL, grow ? 2 : 1, out), KILN_OK);
            uint64_t infers = kn_exec_infer_count() - before;
            /* the main graph and the body run on the session's compiled plan (exec/plan.h) */
            CHECK_MSG(kn_exec_plan_count() == plans, "run %d: %llu graph runs made a plan of their own", run,
                      (unsigned long long)(kn_exec_plan_count() - plans));
            /* from the second call on: the Loop node only (its outputs come from its body) when the
             * body's shapes repeat; with a growing carried value, every body node at each iteration */
            if (run > 0 && !grow)
                CHECK_MSG(infers == 1, "run %d: %llu infer calls, want 1 (the Loop node)", run, (unsigned long long)infers);
            if (run > 0 && grow)
                CHECK_MSG(infers == 1 + 6 * (uint64_t)mv, "grow, run %d: %llu infer calls, want %llu", run,
                          (unsigned long long)infers, (unsigned long long)(1 + 6 * mv));
            if (out[0]) {
                const float *y = kiln_tensor_data(out[0]);
                for (int k = 0; k < 4; k++)
                    CHECK_MSG(fabsf(y[k] - want[k]) <= 1e-6f, "grow %d run %d: v[%d] = %g, want %g", grow, run, k, y[k],
                              want[k]);
            }
            if (grow && out[1]) {
                CHECK_MSG(kiln_tensor_rank(out[1]) == 1 && kiln_tensor_dims(out[1])[0] == mv, "run %d: acc's shape", run);
                const int64_t *av = kiln_tensor_data(out[1]);
                for (int64_t k = 0; kiln_tensor_rank(out[1]) == 1 && k < mv && k < kiln_tensor_dims(out[1])[0]; k++)
                    CHECK_MSG(av[k] == k, "run %d: acc[%lld] = %lld", run, (long long)k, (long long)av[k]);
            }
            for (int k = 0; k < 2; k++) kiln_tensor_destroy(out[k]);
            for (int k = 0; k < 4; k++) kiln_tensor_destroy(in[k]);
        }
        kiln_session_destroy(s);
    }
}

/* Values that infer used to check at each run and that do not change an output's shape (Gather's
 * indices, CumSum's axis) are checked by the kernels: with the types kept, a bad value in a later
 * run with the same shapes is still an error naming the node, not a read out of bounds. */
KN_TEST(shape_memo_kept_nodes_still_check_their_data) {
    tmb b;
    tmb_init(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){3, 4}, NULL);
    int idx = tmb_input(&b, "idx", KILN_DTYPE_INT64, 1, (int64_t[]){2}, NULL);
    int ax = tmb_input(&b, "ax", KILN_DTYPE_INT64, 0, NULL, NULL);
    int g = tmb_value(&b, "g"), cs = tmb_value(&b, "cs");
    int gn = tmb_node(&b, "Gather", (int[]){x, idx}, 2, g);
    tmb_int(&b, gn, "axis", 0);
    tmb_node(&b, "CumSum", (int[]){x, ax}, 2, cs);
    tmb_output(&b, g);
    tmb_output(&b, cs);
    size_t size;
    unsigned char *m = tmb_finish(&b, &size);
    kiln_session *s = memo_session(m, size, 0);
    free(m);
    if (!s) return;
    float xv[12];
    for (int i = 0; i < 12; i++) xv[i] = (float)i;
    static const int64_t idxs[4][2] = {{0, 2}, {0, 7}, {1, 2}, {2, -1}};
    static const int64_t axs[4] = {1, 0, 5, -2};
    static const bool ok[4] = {true, false, false, true};
    for (int run = 0; run < 4; run++) {
        int64_t iv[2] = {idxs[run][0], idxs[run][1]}, av = axs[run];
        kiln_tensor *in[3] = {NULL}, *out[2] = {NULL};
        CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_FLOAT, (int64_t[]){3, 4}, 2, xv, sizeof xv, &in[0]), KILN_OK);
        CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_INT64, (int64_t[]){2}, 1, iv, sizeof iv, &in[1]), KILN_OK);
        CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_INT64, NULL, 0, &av, sizeof av, &in[2]), KILN_OK);
        const char *in_names[3] = {"x", "idx", "ax"};
        kiln_status st = kiln_session_run(s, in_names, in, 3, NULL, 2, out);
        if (ok[run]) {
            CHECK_MSG(st == KILN_OK, "run %d: %s", run, kiln_last_error());
            if (out[0]) {
                const float *gv = kiln_tensor_data(out[0]);
                int64_t r1 = iv[1] < 0 ? iv[1] + 3 : iv[1];
                CHECK_MSG(gv[0] == xv[iv[0] * 4] && gv[4] == xv[r1 * 4], "run %d: Gather's rows", run);
            }
        } else {
            CHECK_MSG(st != KILN_OK, "run %d: bad %s accepted", run, run == 1 ? "index" : "axis");
            CHECK_MSG(strstr(kiln_last_error(), run == 1 ? "Gather" : "CumSum") != NULL, "run %d: %s", run,
                      kiln_last_error());
        }
        for (int k = 0; k < 2; k++) kiln_tensor_destroy(out[k]);
        for (int k = 0; k < 3; k++) kiln_tensor_destroy(in[k]);
    }
    kiln_session_destroy(s);
}

/* kn_ctx_prep_get finds a prepared block only under the tag, node and key it was stored with (a
 * fused kernel may pass its context, prep slot included, to another kernel with other inputs). */
KN_TEST(kernel_prep_blocks_are_found_only_by_their_owner_and_key) {
    static const char tag_a = 0, tag_b = 0;
    kn_node n1 = {0}, n2 = {0};
    void *slot = NULL;
    kn_kernel_ctx c = {0};
    c.node = &n1;
    c.prep = &slot;
    const int64_t k1[2] = {1, 16}, k2[2] = {2, 16};
    const double data = 42.5;
    CHECK(kn_ctx_prep_get(&c, &tag_a, k1, sizeof k1) == NULL);
    kn_ctx_prep_put(&c, &tag_a, k1, sizeof k1, &data, sizeof data);
    const double *got = kn_ctx_prep_get(&c, &tag_a, k1, sizeof k1);
    CHECK(got && *got == 42.5);
    CHECK(kn_ctx_prep_get(&c, &tag_b, k1, sizeof k1) == NULL);    /* another kernel */
    CHECK(kn_ctx_prep_get(&c, &tag_a, k2, sizeof k2) == NULL);    /* other shapes */
    CHECK(kn_ctx_prep_get(&c, &tag_a, k1, sizeof k1[0]) == NULL); /* another key length */
    kn_kernel_ctx copy = c;
    copy.node = &n2; /* a fused kernel's call of another node's kernel through a copy */
    CHECK(kn_ctx_prep_get(&copy, &tag_a, k1, sizeof k1) == NULL);
    const double other = -1;
    kn_ctx_prep_put(&c, &tag_a, k2, sizeof k2, &other, sizeof other); /* replaces */
    CHECK(kn_ctx_prep_get(&c, &tag_a, k1, sizeof k1) == NULL);
    got = kn_ctx_prep_get(&c, &tag_a, k2, sizeof k2);
    CHECK(got && *got == -1);
    kn_kernel_ctx none = {0};
    none.node = &n1;
    kn_ctx_prep_put(&none, &tag_a, k1, sizeof k1, &data, sizeof data); /* no place: nothing */
    CHECK(kn_ctx_prep_get(&none, &tag_a, k1, sizeof k1) == NULL);
    free(slot);
}

/* The zoo's models run three times on one session (levels 0 and 3): the runs after the first use
 * the memo (fewer infer calls, none where every shape follows from the input shapes) and give the
 * first run's outputs bit for bit, within the reference tolerance. */
typedef struct memo_zoo_arg {
    int models;
} memo_zoo_arg;

static void memo_zoo_one(const char *dir, const char *name, void *arg) {
    memo_zoo_arg *z = arg;
    for (int level = 0; level <= 3; level += 3) {
        kiln_session *s = kn_unit_zoo_session(dir, name, 1, level);
        if (!s) return;
        kn_unit_zoo_data d;
        kn_unit_zoo_read(dir, s, &d);
        kiln_tensor *first[KN_UNIT_ZOO_MAX_IO] = {NULL};
        uint64_t infers[3] = {0};
        for (int run = 0; run < 3; run++) {
            kiln_tensor *out[KN_UNIT_ZOO_MAX_IO] = {NULL};
            uint64_t before = kn_exec_infer_count();
            CHECK_STATUS(kiln_session_run(s, d.names, d.in, d.n_in, NULL, d.n_out, out), KILN_OK);
            infers[run] = kn_exec_infer_count() - before;
            for (size_t k = 0; k < d.n_out; k++) {
                if (!out[k]) continue;
                if (run == 0) {
                    first[k] = out[k];
                    if (d.want[k] && kn_unit_rel_l2(out[k], d.want[k]) > 1e-3)
                        kn_unit_fail(__FILE__, __LINE__, "%s level %d: output %zu differs from the reference", name,
                                     level, k);
                    continue;
                }
                bool same = first[k] && kiln_tensor_bytes(out[k]) == kiln_tensor_bytes(first[k]) &&
                            !memcmp(kiln_tensor_data(out[k]), kiln_tensor_data(first[k]), kiln_tensor_bytes(out[k]));
                CHECK_MSG(same, "%s level %d run %d: output %zu differs from the first run's", name, level, run, k);
                kiln_tensor_destroy(out[k]);
            }
        }
        CHECK_MSG(infers[1] < infers[0] && infers[2] == infers[1],
                  "%s level %d: infer calls per run %llu, %llu, %llu (want fewer after the first, then the same)", name,
                  level, (unsigned long long)infers[0], (unsigned long long)infers[1], (unsigned long long)infers[2]);
        for (size_t k = 0; k < d.n_out; k++) kiln_tensor_destroy(first[k]);
        kn_unit_zoo_free(&d);
        kiln_session_destroy(s);
    }
    z->models++;
}

KN_TEST(shape_memo_zoo_runs_repeat_bit_for_bit) {
    memo_zoo_arg z = {0};
    int n = kn_unit_each_zoo_model(memo_zoo_one, &z);
    if (!n) KN_SKIP("no model zoo");
    CHECK_EQ_INT(z.models, n);
    printf("  %d zoo models, 3 runs each at levels 0 and 3\n", z.models);
}

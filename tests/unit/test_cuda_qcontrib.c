/* GPU tests of the quantised com.microsoft operators' CUDA kernels (cuda_ops_qcontrib.c,
 * cu_qcontrib.cu): MatMulNBits on every road (one row and a few: the direct kernel; many rows: the
 * dequantisation and cuBLASLt; accuracy_level 4's int8 products), K not a multiple of the block
 * size, zero points absent / packed / float, g_idx (a graph input and a constant), 2-, 4- and
 * 8-bit weights, float32 and float16 activations, bias; and the QLinear operators in uint8 and
 * int8, whose outputs must equal the CPU's exactly (the CPU kernels agree with ONNX Runtime bit for
 * bit). Each model runs with provider cuda alone (so a CPU fallback fails the test) and with the
 * CPU backend. Skipped, with the reason, without a device. */
#include "test_model_builder.h"
#include "test_onemodel.h" /* om_session */

#include "kiln.h"
#include "ir/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QM_MAX_IN 16

typedef struct qm {
    tmb b;
    int node;
    kn_tensor *in[QM_MAX_IN];
    const char *names[QM_MAX_IN];
    char name_buf[QM_MAX_IN][32]; /* the model's own strings go with it (tmb_finish) */
    int n_in;
    uint32_t seed;
} qm;

static uint32_t qm_next(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void qm_init(qm *q, uint32_t seed) {
    memset(q, 0, sizeof *q);
    tmb_init(&q->b, 17);
    q->b.m->opsets[1].domain = kn_arena_strdup(&q->b.m->arena, "com.microsoft");
    q->seed = seed;
    q->node = -1;
}

/* A graph input holding t (kept for the runs). */
static int qm_input(qm *q, const char *name, kn_tensor *t) {
    int v = tmb_input(&q->b, name, t->dtype, t->rank, t->dims, NULL);
    q->in[q->n_in] = t;
    snprintf(q->name_buf[q->n_in], sizeof q->name_buf[0], "%s", name);
    q->names[q->n_in] = q->name_buf[q->n_in];
    q->n_in++;
    return v;
}

/* A constant of the model (owned by it). */
static int qm_const(qm *q, const char *name, kn_tensor *t) { return tmb_const_tensor(&q->b, name, t); }

static kn_tensor *qm_tensor(kiln_dtype dt, int rank, const int64_t *dims) {
    kn_tensor *t = NULL;
    kn_tensor_new(dt, rank, dims, &t);
    return t;
}

/* uniform floats in [lo, hi) of type dt */
static kn_tensor *qm_floats(qm *q, kiln_dtype dt, int rank, const int64_t *dims, double lo, double hi) {
    kn_tensor *t = qm_tensor(dt, rank, dims);
    for (int64_t i = 0; i < kn_tensor_count(t); i++)
        kn_tensor_set_f64(t, i, lo + (hi - lo) * (double)(qm_next(&q->seed) & 0xffffff) / 16777216.0);
    return t;
}

/* random bytes (every value of int8 or uint8) */
static kn_tensor *qm_bytes(qm *q, kiln_dtype dt, int rank, const int64_t *dims) {
    kn_tensor *t = qm_tensor(dt, rank, dims);
    uint8_t *p = t->data;
    for (int64_t i = 0; i < kn_tensor_count(t); i++) p[i] = (uint8_t)qm_next(&q->seed);
    return t;
}

static kn_tensor *qm_scalar_f(float v) {
    kn_tensor *t = qm_tensor(KILN_DTYPE_FLOAT, 0, NULL);
    *(float *)t->data = v;
    return t;
}

static kn_tensor *qm_scalar_q(kiln_dtype dt, int v) {
    kn_tensor *t = qm_tensor(dt, 0, NULL);
    *(uint8_t *)t->data = (uint8_t)v;
    return t;
}

static void qm_node(qm *q, const char *op, const int *in, int nin) {
    int y = tmb_value(&q->b, "Y");
    q->node = tmb_node_in(&q->b, op, "com.microsoft", in, nin, y);
    tmb_output(&q->b, y);
}

static kn_tensor *qm_run(kiln_session *s, qm *q, int runs) {
    kn_tensor *out = NULL;
    for (int r = 0; r < runs; r++) {
        kiln_tensor_destroy(out);
        out = NULL;
        kiln_status st = kiln_session_run(s, q->names, q->in, (size_t)q->n_in, NULL, 1, &out);
        CHECK_MSG(st == KILN_OK, "run: %s", kiln_last_error());
        if (st != KILN_OK) return NULL;
    }
    return out;
}

static int qm_checked, qm_mismatches;

/* Runs the model on CUDA alone (twice: the second run replays what the first recorded) and on
 * the CPU; every element must agree within atol + rtol |cpu| (0, 0: exactly). Frees everything. */
static void qm_compare(qm *q, double rtol, double atol, const char *what) {
    size_t size = 0;
    unsigned char *data = tmb_finish(&q->b, &size);
    kiln_session *cpu = data ? om_session(data, size, "cpu") : NULL;
    kiln_session *gpu = cpu ? om_session(data, size, "cuda") : NULL;
    if (gpu) {
        kn_tensor *want = qm_run(cpu, q, 1), *got = qm_run(gpu, q, 2);
        if (want && got) {
            if (kn_tensor_count(want) != kn_tensor_count(got) || want->dtype != got->dtype) {
                kn_unit_fail(__FILE__, __LINE__, "%s: the output differs in shape or type", what);
            } else {
                int64_t bad = 0, first = -1;
                for (int64_t i = 0; i < kn_tensor_count(want); i++) {
                    double w = kn_tensor_get_f64(want, i), g = kn_tensor_get_f64(got, i);
                    if (!(fabs(w - g) <= atol + rtol * fabs(w)) && !(w != w && g != g)) {
                        if (first < 0) first = i;
                        bad++;
                    }
                }
                qm_checked++;
                if (bad) {
                    qm_mismatches++;
                    kn_unit_fail(__FILE__, __LINE__, "%s: %lld of %lld elements differ; element %lld is %.7g on CUDA, %.7g on the CPU",
                                 what, (long long)bad, (long long)kn_tensor_count(want), (long long)first,
                                 kn_tensor_get_f64(got, first), kn_tensor_get_f64(want, first));
                }
            }
        }
        kiln_tensor_destroy(want);
        kiln_tensor_destroy(got);
    }
    kiln_session_destroy(gpu);
    kiln_session_destroy(cpu);
    free(data);
    for (int i = 0; i < q->n_in; i++) kn_tensor_free(q->in[i]);
}

/* ------------------------------------------------------------------ MatMulNBits */

enum { ZP_NONE, ZP_PACKED, ZP_FLOAT };

typedef struct nb_case {
    int64_t M, K, N, bs;
    int bits, zp;
    bool gidx, bias, fp16, consts, gidx_const;
    int accuracy_level;
} nb_case;

static kn_tensor *pack_codes(qm *q, int64_t rows, int64_t n, int bits, int64_t row_bytes) {
    int64_t d[1] = {rows * row_bytes};
    kn_tensor *t = qm_tensor(KILN_DTYPE_UINT8, 1, d);
    uint8_t *p = t->data;
    memset(p, 0, (size_t)(rows * row_bytes));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n; i++) {
            unsigned code = qm_next(&q->seed) & ((1u << bits) - 1);
            int64_t bit = i * bits;
            p[r * row_bytes + bit / 8] |= (uint8_t)(code << (bit % 8));
        }
    return t;
}

static void nbits_case(const nb_case *c, const char *what) {
    qm q;
    qm_init(&q, (uint32_t)(c->M * 131 + c->K * 7 + c->N + c->bits * 1000 + c->zp * 17));
    kiln_dtype ft = c->fp16 ? KILN_DTYPE_FLOAT16 : KILN_DTYPE_FLOAT;
    int64_t kb = (c->K + c->bs - 1) / c->bs, blob = c->bs * c->bits / 8;
    int64_t ad[2] = {c->M, c->K};
    int in[6] = {-1, -1, -1, -1, -1, -1};
    in[0] = qm_input(&q, "A", qm_floats(&q, ft, 2, ad, -1.0, 1.0));
    /* B [N, kb, blob]: the codes of every block, padded ones included */
    kn_tensor *B = pack_codes(&q, c->N * kb, c->bs, c->bits, blob);
    B->rank = 3;
    B->dims[0] = c->N, B->dims[1] = kb, B->dims[2] = blob;
    int64_t sd[1] = {c->N * kb};
    kn_tensor *S = qm_floats(&q, ft, 1, sd, 0.005, 0.05);
    kn_tensor *Z = NULL;
    if (c->zp == ZP_PACKED) {
        int64_t zrow = (kb * c->bits + 7) / 8;
        Z = pack_codes(&q, c->N, kb, c->bits, zrow);
    } else if (c->zp == ZP_FLOAT) {
        Z = qm_floats(&q, ft, 1, sd, 0.0, (double)((1 << c->bits) - 1));
    }
    if (c->consts) {
        in[1] = qm_const(&q, "B", B);
        in[2] = qm_const(&q, "scales", S);
        if (Z) in[3] = qm_const(&q, "zero_points", Z);
    } else {
        in[1] = qm_input(&q, "B", B);
        in[2] = qm_input(&q, "scales", S);
        if (Z) in[3] = qm_input(&q, "zero_points", Z);
    }
    int nin = Z ? 4 : 3;
    if (c->gidx) {
        int64_t gd[1] = {c->K};
        kn_tensor *G = qm_tensor(KILN_DTYPE_INT32, 1, gd);
        int32_t *g = G->data;
        for (int64_t k = 0; k < c->K; k++) g[k] = (int32_t)(k / c->bs);
        for (int64_t k = c->K - 1; k > 0; k--) { /* shuffled: act-order */
            int64_t j = (int64_t)(qm_next(&q.seed) % (uint32_t)(k + 1));
            int32_t t = g[k];
            g[k] = g[j];
            g[j] = t;
        }
        in[4] = c->gidx_const ? qm_const(&q, "g_idx", G) : qm_input(&q, "g_idx", G);
        nin = 5;
    }
    if (c->bias) {
        int64_t bd[1] = {c->N};
        in[5] = qm_input(&q, "bias", qm_floats(&q, ft, 1, bd, -0.5, 0.5));
        nin = 6;
    }
    qm_node(&q, "MatMulNBits", in, nin);
    tmb_int(&q.b, q.node, "K", c->K);
    tmb_int(&q.b, q.node, "N", c->N);
    tmb_int(&q.b, q.node, "bits", c->bits);
    tmb_int(&q.b, q.node, "block_size", c->bs);
    if (c->accuracy_level) tmb_int(&q.b, q.node, "accuracy_level", c->accuracy_level);
    char w[200];
    snprintf(w, sizeof w, "MatMulNBits %s: M=%lld K=%lld N=%lld block %lld, %d bits, zero points %s%s%s (%s)", what,
             (long long)c->M, (long long)c->K, (long long)c->N, (long long)c->bs, c->bits,
             c->zp == ZP_NONE ? "none" : c->zp == ZP_PACKED ? "packed" : "float", c->gidx ? ", g_idx" : "",
             c->bias ? ", bias" : "", c->fp16 ? "float16" : "float32");
    /* float16: one unit of its last place either way, and the cuBLASLt road's float16 weights */
    double rtol = c->fp16 ? 4e-3 : 1e-4, atol = c->fp16 ? 4e-3 : 1e-4;
    qm_compare(&q, rtol, atol, w);
}

KN_TEST(cuda_matmulnbits_one_row) {
    NEED_GPU();
    for (int fp16 = 0; fp16 < 2; fp16++)
        for (int zp = ZP_NONE; zp <= ZP_FLOAT; zp++) {
            nb_case c = {.M = 1, .K = 199, .N = 37, .bs = 32, .bits = 4, .zp = zp, .fp16 = fp16};
            nbits_case(&c, "one row, K a block and a tail");
            c.K = 512, c.bs = 128, c.N = 64, c.bias = true;
            nbits_case(&c, "one row");
            c.K = 72, c.bs = 16, c.N = 29; /* rows of 40 bytes: the 4-byte loads */
            nbits_case(&c, "one row, odd block count");
            c.bits = 2, c.K = 100, c.bs = 32;
            nbits_case(&c, "one row, 2 bits");
            c.bits = 8;
            nbits_case(&c, "one row, 8 bits");
        }
}

KN_TEST(cuda_matmulnbits_few_rows) {
    NEED_GPU();
    for (int fp16 = 0; fp16 < 2; fp16++)
        for (int zp = ZP_NONE; zp <= ZP_FLOAT; zp++) {
            nb_case c = {.M = 5, .K = 200, .N = 33, .bs = 32, .bits = 4, .zp = zp, .fp16 = fp16, .bias = true};
            nbits_case(&c, "a few rows");
            c.M = 19, c.K = 80, c.bs = 16; /* three passes of the kernel's 8 rows */
            nbits_case(&c, "rows in several passes");
        }
}

KN_TEST(cuda_matmulnbits_many_rows) {
    NEED_GPU();
    for (int fp16 = 0; fp16 < 2; fp16++)
        for (int zp = ZP_NONE; zp <= ZP_FLOAT; zp++) {
            nb_case c = {.M = 70, .K = 131, .N = 80, .bs = 64, .bits = 4, .zp = zp, .fp16 = fp16, .bias = true};
            nbits_case(&c, "cuBLASLt road");
            c.consts = true, c.bias = false, c.M = 129;
            nbits_case(&c, "cuBLASLt road, constant weights");
        }
}

KN_TEST(cuda_matmulnbits_g_idx) {
    NEED_GPU();
    for (int zp = ZP_NONE; zp <= ZP_FLOAT; zp++)
        for (int rows = 0; rows < 2; rows++) {
            /* packed zero points are not read with g_idx (ONNX Runtime's CPU kernel) */
            nb_case c = {.M = rows ? 40 : 3, .K = 128, .N = 16, .bs = 32, .bits = 4, .zp = zp, .gidx = true};
            nbits_case(&c, "g_idx (an input)");
            c.gidx_const = true, c.consts = true, c.K = 120;
            nbits_case(&c, "g_idx (a constant), K a block and a tail");
        }
}

KN_TEST(cuda_matmulnbits_bits) {
    NEED_GPU();
    int bits[2] = {2, 8};
    for (int b = 0; b < 2; b++)
        for (int rows = 0; rows < 2; rows++) {
            nb_case c = {.M = rows ? 48 : 3, .K = 100, .N = 16, .bs = 32, .bits = bits[b], .zp = ZP_PACKED};
            nbits_case(&c, "other widths");
            c.zp = ZP_NONE, c.bs = 16;
            nbits_case(&c, "other widths");
        }
}

KN_TEST(cuda_matmulnbits_accuracy_level4) {
    NEED_GPU();
    /* constant weights with integer zero points: ONNX Runtime's int8 compute type (A quantised per
     * row and block), on both backends */
    for (int fp16 = 0; fp16 < 2; fp16++)
        for (int zp = ZP_NONE; zp <= ZP_PACKED; zp++) {
            nb_case c = {.M = 3, .K = 200, .N = 24, .bs = 32, .bits = 4, .zp = zp, .fp16 = fp16, .consts = true,
                         .accuracy_level = 4, .bias = true};
            nbits_case(&c, "accuracy_level 4");
            c.M = 50, c.bs = 64, c.bits = 8;
            nbits_case(&c, "accuracy_level 4, many rows");
        }
    /* float zero points and weights that are graph inputs compute in float32 (as ONNX Runtime) */
    nb_case c = {.M = 2, .K = 96, .N = 20, .bs = 32, .bits = 4, .zp = ZP_FLOAT, .consts = true, .accuracy_level = 4};
    nbits_case(&c, "accuracy_level 4 with float zero points");
    c.zp = ZP_PACKED, c.consts = false;
    nbits_case(&c, "accuracy_level 4, weights not constant");
}

/* ------------------------------------------------------------------ QLinear operators */

static const kiln_dtype q8_types[2] = {KILN_DTYPE_UINT8, KILN_DTYPE_INT8};

/* X, X_scale, X_zero_point, Y_scale, Y_zero_point (zero points omitted when !zp) */
static void unary_inputs(qm *q, kiln_dtype dt, int rank, const int64_t *dims, float sx, float sy, bool zp, int *in) {
    in[0] = qm_input(q, "X", qm_bytes(q, dt, rank, dims));
    in[1] = qm_input(q, "X_scale", qm_scalar_f(sx));
    in[2] = zp ? qm_input(q, "X_zero_point", qm_scalar_q(dt, (int)(qm_next(&q->seed) & 255))) : -1;
    in[3] = qm_input(q, "Y_scale", qm_scalar_f(sy));
    in[4] = zp ? qm_input(q, "Y_zero_point", qm_scalar_q(dt, (int)(qm_next(&q->seed) & 255))) : -1;
}

KN_TEST(cuda_qlinear_add_mul) {
    NEED_GPU();
    int64_t shapes[6][3] = {{2, 3, 8}, {8, 0, 0}, {3, 1, 0}, {0, 0, 0}, {2, 1, 8}, {1, 3, 8}};
    int ranks[6] = {3, 1, 2, 0, 3, 3};
    for (int t = 0; t < 2; t++)
        for (int mul = 0; mul < 2; mul++)
            for (int s = 0; s < 7; s++) {
                qm q;
                qm_init(&q, 100u + (uint32_t)(t * 50 + mul * 20 + s));
                kiln_dtype dt = q8_types[t];
                int64_t ad[3] = {2, 3, 8}, bd[3] = {4, 37, 0};
                int arank = 3;
                if (s == 6) arank = 0; /* a scalar A (the CPU swaps the operands) */
                int in[8];
                in[0] = qm_input(&q, "A", qm_bytes(&q, dt, arank, ad));
                in[1] = qm_input(&q, "A_scale", qm_scalar_f(0.031f));
                in[2] = qm_input(&q, "A_zero_point", qm_scalar_q(dt, (int)(qm_next(&q.seed) & 255)));
                in[3] = qm_input(&q, "B", qm_bytes(&q, dt, s == 6 ? 2 : ranks[s], s == 6 ? bd : shapes[s]));
                in[4] = qm_input(&q, "B_scale", qm_scalar_f(0.017f));
                in[5] = qm_input(&q, "B_zero_point", qm_scalar_q(dt, (int)(qm_next(&q.seed) & 255)));
                in[6] = qm_input(&q, "C_scale", qm_scalar_f(mul ? 0.4f : 0.05f));
                in[7] = qm_input(&q, "C_zero_point", qm_scalar_q(dt, (int)(qm_next(&q.seed) & 255)));
                qm_node(&q, mul ? "QLinearMul" : "QLinearAdd", in, 8);
                char w[120];
                snprintf(w, sizeof w, "%s %s, B shape case %d", mul ? "QLinearMul" : "QLinearAdd", kiln_dtype_name(dt), s);
                qm_compare(&q, 0, 0, w);
            }
}

KN_TEST(cuda_qlinear_sigmoid_leaky_relu) {
    NEED_GPU();
    for (int t = 0; t < 2; t++)
        for (int op = 0; op < 2; op++)
            for (int zp = 0; zp < 2; zp++) {
                qm q;
                qm_init(&q, 300u + (uint32_t)(t * 4 + op * 2 + zp));
                kiln_dtype dt = q8_types[t];
                int64_t d[2] = {5, 300};
                int in[5];
                unary_inputs(&q, dt, 2, d, 0.05f, op ? 0.04f : 1.0f / 256, zp, in);
                qm_node(&q, op ? "QLinearLeakyRelu" : "QLinearSigmoid", in, zp ? 5 : 4);
                if (op && zp) tmb_attr(&q.b, q.node, "alpha", KN_ATTR_FLOAT)->f = 0.1f;
                char w[120];
                snprintf(w, sizeof w, "%s %s%s", op ? "QLinearLeakyRelu" : "QLinearSigmoid", kiln_dtype_name(dt),
                         zp ? "" : ", no zero points");
                qm_compare(&q, 0, 0, w);
            }
}

KN_TEST(cuda_qlinear_concat) {
    NEED_GPU();
    for (int t = 0; t < 2; t++)
        for (int same = 0; same < 2; same++) {
            qm q;
            qm_init(&q, 400u + (uint32_t)(t * 2 + same));
            kiln_dtype dt = q8_types[t];
            int zy = (int)(qm_next(&q.seed) & 255);
            int in[11];
            in[0] = qm_input(&q, "Y_scale", qm_scalar_f(0.05f));
            in[1] = qm_input(&q, "Y_zero_point", qm_scalar_q(dt, zy));
            float sc[3] = {0.05f, 0.02f, 0.11f};
            int64_t mid[3] = {3, 5, 1};
            for (int i = 0; i < 3; i++) {
                char n[16];
                int64_t d[3] = {2, mid[i], 4};
                snprintf(n, sizeof n, "X%d", i);
                in[2 + 3 * i] = qm_input(&q, n, qm_bytes(&q, dt, 3, d));
                snprintf(n, sizeof n, "s%d", i);
                in[3 + 3 * i] = qm_input(&q, n, qm_scalar_f(same ? 0.05f : sc[i]));
                snprintf(n, sizeof n, "z%d", i);
                in[4 + 3 * i] = qm_input(&q, n, qm_scalar_q(dt, same ? zy : (int)(qm_next(&q.seed) & 255)));
            }
            qm_node(&q, "QLinearConcat", in, 11);
            tmb_int(&q.b, q.node, "axis", same ? -2 : 1);
            char w[120];
            snprintf(w, sizeof w, "QLinearConcat %s%s", kiln_dtype_name(dt), same ? ", the output's parameters" : "");
            qm_compare(&q, 0, 0, w);
        }
}

KN_TEST(cuda_qlinear_softmax) {
    NEED_GPU();
    struct {
        int rank;
        int64_t dims[3];
        int axis, opset;
    } cs[5] = {{2, {3, 10}, -1, 13}, {3, {2, 5, 4}, 1, 13}, {3, {2, 3, 4}, 1, 12}, {3, {1, 2, 64}, -1, 13},
               {2, {4, 1000}, 1, 13}};
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 5; k++) {
            qm q;
            qm_init(&q, 500u + (uint32_t)(t * 5 + k));
            kiln_dtype dt = q8_types[t];
            int in[5];
            in[0] = qm_input(&q, "X", qm_bytes(&q, dt, cs[k].rank, cs[k].dims));
            in[1] = qm_input(&q, "X_scale", qm_scalar_f(0.08f));
            in[2] = qm_input(&q, "X_zero_point", qm_scalar_q(dt, (int)(qm_next(&q.seed) & 255)));
            in[3] = qm_input(&q, "Y_scale", qm_scalar_f(1.0f / 256));
            in[4] = qm_input(&q, "Y_zero_point", qm_scalar_q(dt, t ? -128 : 0));
            qm_node(&q, "QLinearSoftmax", in, 5);
            tmb_int(&q.b, q.node, "axis", cs[k].axis);
            tmb_int(&q.b, q.node, "opset", cs[k].opset);
            char w[120];
            snprintf(w, sizeof w, "QLinearSoftmax %s, case %d", kiln_dtype_name(dt), k);
            qm_compare(&q, 0, 0, w);
        }
}

KN_TEST(cuda_qlinear_pools) {
    NEED_GPU();
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = q8_types[t];
        /* global: NCHW, NHWC, 1-D */
        int64_t gd[3][4] = {{2, 3, 5, 6}, {2, 5, 6, 3}, {1, 4, 7, 0}};
        for (int k = 0; k < 3; k++) {
            qm q;
            qm_init(&q, 600u + (uint32_t)(t * 3 + k));
            int in[5];
            unary_inputs(&q, dt, k == 2 ? 3 : 4, gd[k], 0.03f, 0.02f, true, in);
            qm_node(&q, "QLinearGlobalAveragePool", in, 5);
            tmb_int(&q.b, q.node, "channels_last", k == 1);
            char w[120];
            snprintf(w, sizeof w, "QLinearGlobalAveragePool %s, case %d", kiln_dtype_name(dt), k);
            qm_compare(&q, 0, 0, w);
        }
        struct {
            int rank;
            int64_t dims[5];
            int nsp;
            int64_t k[3], s[3], pads[6];
            int cl, incl, ceil;
        } ps[6] = {
            {4, {2, 3, 7, 8}, 2, {3, 3}, {2, 2}, {0, 0, 0, 0}, 0, 0, 0},
            {4, {1, 2, 6, 7}, 2, {3, 2}, {1, 1}, {1, 1, 1, 0}, 0, 0, 0},
            {4, {1, 2, 6, 7}, 2, {3, 3}, {1, 1}, {1, 1, 1, 1}, 0, 1, 0},
            {4, {1, 2, 7, 7}, 2, {2, 2}, {2, 2}, {0, 0, 0, 0}, 0, 0, 1},
            {4, {2, 6, 5, 3}, 2, {2, 3}, {1, 1}, {0, 0, 0, 0}, 1, 0, 0},
            {5, {1, 2, 4, 5, 6}, 3, {2, 2, 3}, {1, 1, 1}, {0, 1, 0, 0, 1, 1}, 0, 0, 0},
        };
        for (int k = 0; k < 6; k++) {
            qm q;
            qm_init(&q, 700u + (uint32_t)(t * 6 + k));
            int in[5];
            unary_inputs(&q, dt, ps[k].rank, ps[k].dims, 0.03f, 0.025f, true, in);
            qm_node(&q, "QLinearAveragePool", in, 5);
            tmb_ints(&q.b, q.node, "kernel_shape", ps[k].k, ps[k].nsp);
            tmb_ints(&q.b, q.node, "strides", ps[k].s, ps[k].nsp);
            tmb_ints(&q.b, q.node, "pads", ps[k].pads, 2 * ps[k].nsp);
            if (ps[k].cl) tmb_int(&q.b, q.node, "channels_last", 1);
            if (ps[k].incl) tmb_int(&q.b, q.node, "count_include_pad", 1);
            if (ps[k].ceil) tmb_int(&q.b, q.node, "ceil_mode", 1);
            char w[120];
            snprintf(w, sizeof w, "QLinearAveragePool %s, case %d", kiln_dtype_name(dt), k);
            qm_compare(&q, 0, 0, w);
        }
    }
}

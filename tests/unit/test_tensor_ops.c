/* Tensor-family operators: shape-value propagation through Shape -> Gather -> Unsqueeze ->
 * Concat -> Reshape with symbolic dims, error messages for bad Reshape targets, and a few CPU
 * kernels checked against naive loops (blocked transpose, strings, negative-step Slice, Pad). */
#include "backend/cpu/cpu.h"
#include "ir/graph.h"
#include "ops/op.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

/* ---- a small hand-built graph and a driver that calls each node's infer function ---- */

typedef struct tg {
    kn_model *m;
    kn_graph *g;
} tg;

static int tg_value(tg *t, const char *name, kiln_dtype dt, int rank, const kn_dim *dims) {
    int v = kn_graph_add_value(t->g, name);
    kn_type *ty = &t->g->values[v].type;
    if (rank >= 0) {
        kn_type_set_tensor(ty, dt, rank, NULL);
        for (int k = 0; k < rank; k++) ty->dims[k] = dims[k];
    }
    return v;
}

/* A constant int64 vector (or scalar when rank 0) value. */
static int tg_const(tg *t, const char *name, const int64_t *vals, int n, int rank) {
    int64_t d = n;
    kn_tensor *c;
    if (kn_tensor_new(KILN_DTYPE_INT64, rank, &d, &c) != KILN_OK) return -1;
    memcpy(c->data, vals, sizeof(int64_t) * (size_t)n);
    kn_model_own_tensor(t->m, c);
    int v = kn_graph_add_value(t->g, name);
    t->g->values[v].constant = c;
    kn_type_set_tensor(&t->g->values[v].type, KILN_DTYPE_INT64, rank, &d);
    return v;
}

static int tg_node(tg *t, const char *op, int opset, const int *in, int nin, const int *out, int nout,
                   kn_attr *attrs, int nattrs) {
    int i = kn_graph_add_node(t->g, NULL, op, "", in, nin, out, nout);
    kn_node *n = &t->g->nodes[i];
    n->opset = opset;
    n->attrs = attrs;
    n->n_attrs = nattrs;
    return i;
}

/* Runs node i's infer with its inputs' types and constant values; writes the output types. */
static kiln_status tg_infer(tg *t, int i) {
    kn_node *n = &t->g->nodes[i];
    const kn_op_schema *s = kn_op_find(n->domain, n->op_type, n->opset, NULL);
    if (!s) return kn_error(KILN_ERR_UNSUPPORTED, "no schema for %s", n->op_type);
    const kn_type *in[8] = {0};
    const kn_tensor *val[8] = {0};
    kn_type out[8];
    for (int k = 0; k < n->n_inputs; k++) {
        if (n->inputs[k] < 0) continue;
        in[k] = &t->g->values[n->inputs[k]].type;
        val[k] = t->g->values[n->inputs[k]].constant;
    }
    for (int o = 0; o < n->n_outputs; o++) kn_type_init(&out[o]);
    kn_infer_ctx c = {n, n->n_inputs, in, val, n->n_outputs, out, &t->m->arena};
    KN_TRY(s->infer(&c));
    for (int o = 0; o < n->n_outputs; o++) t->g->values[n->outputs[o]].type = out[o];
    return KILN_OK;
}

static void tg_open(tg *t) {
    kn_model_new(&t->m);
    kn_graph_new(t->m, NULL, "g", &t->g);
}

static const char *type_of(tg *t, int v, char *buf) { return kn_type_str(&t->g->values[v].type, buf, 256); }

#define SYM(s) ((kn_dim){-1, (s)})
#define KNOWN(v) ((kn_dim){(v), NULL})
#define UNKNOWN ((kn_dim){-1, NULL})

KN_TEST(tensor_shape_values_resolve_symbolic_reshape) {
    tg t;
    tg_open(&t);
    char buf[256];
    kn_dim ids_dims[2] = {SYM("batch"), SYM("seq")};
    kn_dim x_dims[3] = {SYM("batch"), SYM("seq"), KNOWN(256)};
    int ids = tg_value(&t, "input_ids", KILN_DTYPE_INT64, 2, ids_dims);
    int x = tg_value(&t, "x", KILN_DTYPE_FLOAT, 3, x_dims);
    int64_t zero = 0, one = 1, four = 4, sixtyfour = 64;
    int i0 = tg_const(&t, "i0", &zero, 1, 0), i1 = tg_const(&t, "i1", &one, 1, 0);
    int ax0 = tg_const(&t, "ax0", &zero, 1, 1);
    int c4 = tg_const(&t, "c4", &four, 1, 1), c64 = tg_const(&t, "c64", &sixtyfour, 1, 1);
    int shp = tg_value(&t, "shape", 0, -1, NULL);
    int b = tg_value(&t, "b", 0, -1, NULL), s = tg_value(&t, "s", 0, -1, NULL);
    int bu = tg_value(&t, "bu", 0, -1, NULL), su = tg_value(&t, "su", 0, -1, NULL);
    int cat = tg_value(&t, "cat", 0, -1, NULL), y = tg_value(&t, "y", 0, -1, NULL);
    int n[7];
    n[0] = tg_node(&t, "Shape", 15, &ids, 1, &shp, 1, NULL, 0);
    n[1] = tg_node(&t, "Gather", 13, (int[]){shp, i0}, 2, &b, 1, NULL, 0);
    n[2] = tg_node(&t, "Gather", 13, (int[]){shp, i1}, 2, &s, 1, NULL, 0);
    n[3] = tg_node(&t, "Unsqueeze", 13, (int[]){b, ax0}, 2, &bu, 1, NULL, 0);
    n[4] = tg_node(&t, "Unsqueeze", 13, (int[]){s, ax0}, 2, &su, 1, NULL, 0);
    kn_attr axis0 = {.name = "axis", .type = KN_ATTR_INT, .i = 0};
    n[5] = tg_node(&t, "Concat", 13, (int[]){bu, su, c4, c64}, 4, &cat, 1, &axis0, 1);
    n[6] = tg_node(&t, "Reshape", 14, (int[]){x, cat}, 2, &y, 1, NULL, 0);
    for (int i = 0; i < 7; i++) CHECK_STATUS(tg_infer(&t, n[i]), KILN_OK);

    const kn_type *st = &t.g->values[shp].type;
    CHECK_EQ_INT(st->n_shape_value, 2);
    CHECK(st->shape_value[0].symbol && !strcmp(st->shape_value[0].symbol, "batch"));
    const kn_type *sv = &t.g->values[s].type;
    CHECK_EQ_INT(sv->rank, 0);
    CHECK_EQ_INT(sv->n_shape_value, 1);
    CHECK(sv->shape_value[0].symbol && !strcmp(sv->shape_value[0].symbol, "seq"));
    const kn_type *ct = &t.g->values[cat].type;
    CHECK_EQ_INT(ct->rank, 1);
    CHECK_EQ_INT(ct->dims[0].value, 4);
    CHECK_EQ_INT(ct->n_shape_value, 4);
    CHECK_MSG(!strcmp(type_of(&t, y, buf), "float[batch,seq,4,64]"), "Reshape gave %s", buf);

    /* the inverse with an unknown element: [batch, seq, 4, 64] -> Concat([batch], [seq], [?]) solves ? = 256 */
    int y2 = tg_value(&t, "y2", 0, -1, NULL), cat2 = tg_value(&t, "cat2", 0, -1, NULL);
    int unk = tg_value(&t, "unk", KILN_DTYPE_INT64, 1, (kn_dim[]){KNOWN(1)});
    int n7 = tg_node(&t, "Concat", 13, (int[]){bu, su, unk}, 3, &cat2, 1, &axis0, 1);
    int n8 = tg_node(&t, "Reshape", 14, (int[]){y, cat2}, 2, &y2, 1, NULL, 0);
    CHECK_STATUS(tg_infer(&t, n7), KILN_OK);
    CHECK_STATUS(tg_infer(&t, n8), KILN_OK);
    CHECK_MSG(!strcmp(type_of(&t, y2, buf), "float[batch,seq,256]"), "Reshape gave %s", buf);

    /* [batch, seq, 256] -> [batch, ?, 4, 64]: the unknown is the symbol seq */
    int cat3 = tg_value(&t, "cat3", 0, -1, NULL), y3 = tg_value(&t, "y3", 0, -1, NULL);
    int n9 = tg_node(&t, "Concat", 13, (int[]){bu, unk, c4, c64}, 4, &cat3, 1, &axis0, 1);
    int n10 = tg_node(&t, "Reshape", 14, (int[]){x, cat3}, 2, &y3, 1, NULL, 0);
    CHECK_STATUS(tg_infer(&t, n9), KILN_OK);
    CHECK_STATUS(tg_infer(&t, n10), KILN_OK);
    CHECK_MSG(!strcmp(type_of(&t, y3, buf), "float[batch,seq,4,64]"), "Reshape gave %s", buf);

    /* Reshape with a constant [0, 0, -1] copies symbols and infers 4*64 */
    int64_t t00m[3] = {0, 0, -1};
    int c00m = tg_const(&t, "c00m", t00m, 3, 1), y4 = tg_value(&t, "y4", 0, -1, NULL);
    int n11 = tg_node(&t, "Reshape", 14, (int[]){y, c00m}, 2, &y4, 1, NULL, 0);
    CHECK_STATUS(tg_infer(&t, n11), KILN_OK);
    CHECK_MSG(!strcmp(type_of(&t, y4, buf), "float[batch,seq,256]"), "Reshape gave %s", buf);

    /* Slice of the shape vector keeps its elements; Range(0, seq, 1) has seq elements */
    int64_t one_v = 1, big = INT64_MAX;
    int st1 = tg_const(&t, "st1", &one_v, 1, 1), en = tg_const(&t, "en", &big, 1, 1);
    int sl = tg_value(&t, "sl", 0, -1, NULL);
    int n12 = tg_node(&t, "Slice", 13, (int[]){shp, st1, en}, 3, &sl, 1, NULL, 0);
    CHECK_STATUS(tg_infer(&t, n12), KILN_OK);
    CHECK_EQ_INT(t.g->values[sl].type.n_shape_value, 1);
    CHECK(t.g->values[sl].type.shape_value[0].symbol && !strcmp(t.g->values[sl].type.shape_value[0].symbol, "seq"));
    int r0 = tg_const(&t, "r0", &zero, 1, 0), r1 = tg_const(&t, "r1", &one, 1, 0), rg = tg_value(&t, "rg", 0, -1, NULL);
    int n13 = tg_node(&t, "Range", 11, (int[]){r0, s, r1}, 3, &rg, 1, NULL, 0);
    CHECK_STATUS(tg_infer(&t, n13), KILN_OK);
    CHECK_MSG(!strcmp(type_of(&t, rg, buf), "int64[seq]"), "Range gave %s", buf);

    /* Expand and ConstantOfShape take dims from shape values */
    int e = tg_value(&t, "e", 0, -1, NULL), cs = tg_value(&t, "cs", 0, -1, NULL);
    int one_f = tg_value(&t, "one_f", KILN_DTYPE_FLOAT, 2, (kn_dim[]){KNOWN(1), KNOWN(1)});
    int n14 = tg_node(&t, "Expand", 13, (int[]){one_f, shp}, 2, &e, 1, NULL, 0);
    int n15 = tg_node(&t, "ConstantOfShape", 20, &cat, 1, &cs, 1, NULL, 0);
    CHECK_STATUS(tg_infer(&t, n14), KILN_OK);
    CHECK_STATUS(tg_infer(&t, n15), KILN_OK);
    CHECK_MSG(!strcmp(type_of(&t, e, buf), "float[batch,seq]"), "Expand gave %s", buf);
    CHECK_MSG(!strcmp(type_of(&t, cs, buf), "float[batch,seq,4,64]"), "ConstantOfShape gave %s", buf);
    kn_model_free(t.m);
}

KN_TEST(tensor_reshape_rejects_bad_targets) {
    tg t;
    tg_open(&t);
    kn_dim xd[3] = {KNOWN(2), KNOWN(3), KNOWN(4)};
    int x = tg_value(&t, "x", KILN_DTYPE_FLOAT, 3, xd);
    int64_t two_neg[3] = {-1, 2, -1}, bad[2] = {5, 5}, nodiv[2] = {5, -1}, ok[2] = {-1, 6};
    int a = tg_const(&t, "a", two_neg, 3, 1), b = tg_const(&t, "b", bad, 2, 1);
    int c = tg_const(&t, "c", nodiv, 2, 1), d = tg_const(&t, "d", ok, 2, 1);
    int y = tg_value(&t, "y", 0, -1, NULL);
    int n1 = tg_node(&t, "Reshape", 14, (int[]){x, a}, 2, &y, 1, NULL, 0);
    CHECK_STATUS(tg_infer(&t, n1), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("more than one -1");
    CHECK_ERROR_HAS("Reshape, opset 14");
    int n2 = tg_node(&t, "Reshape", 14, (int[]){x, b}, 2, &y, 1, NULL, 0);
    CHECK_STATUS(tg_infer(&t, n2), KILN_ERR_SHAPE);
    CHECK_ERROR_HAS("[2,3,4]");
    CHECK_ERROR_HAS("[5,5]");
    CHECK_ERROR_HAS("24 elements");
    int n3 = tg_node(&t, "Reshape", 14, (int[]){x, c}, 2, &y, 1, NULL, 0);
    CHECK_STATUS(tg_infer(&t, n3), KILN_ERR_SHAPE);
    CHECK_ERROR_HAS("[5,-1]");
    int n4 = tg_node(&t, "Reshape", 14, (int[]){x, d}, 2, &y, 1, NULL, 0);
    CHECK_STATUS(tg_infer(&t, n4), KILN_OK);
    CHECK_EQ_INT(t.g->values[y].type.dims[0].value, 4);
    /* other ops' checks name shapes too */
    kn_attr perm = {.name = "perm", .type = KN_ATTR_INTS, .n = 3, .ints = (int64_t[]){0, 0, 1}};
    int n5 = tg_node(&t, "Transpose", 13, &x, 1, &y, 1, &perm, 1);
    CHECK_STATUS(tg_infer(&t, n5), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("not a permutation");
    int64_t axes1 = 1;
    int ax = tg_const(&t, "ax", &axes1, 1, 1);
    int n6 = tg_node(&t, "Squeeze", 13, (int[]){x, ax}, 2, &y, 1, NULL, 0);
    CHECK_STATUS(tg_infer(&t, n6), KILN_ERR_SHAPE);
    CHECK_ERROR_HAS("its size is 3");
    kn_model_free(t.m);
}

/* ---- kernels ---- */

static kiln_status run_kernel(kn_node *n, kn_tensor **in, int nin, kn_tensor **out, int nout) {
    const kn_type *types[8] = {0};
    kn_type tt[8];
    for (int i = 0; i < nin; i++) {
        if (!in[i]) continue;
        kn_type_set_tensor(&tt[i], in[i]->dtype, in[i]->rank, in[i]->dims);
        types[i] = &tt[i];
    }
    char why[256];
    const kn_cpu_kernel *k = kn_cpu_find(n, types, nin, why, sizeof why);
    if (!k) return kn_error(KILN_ERR_UNSUPPORTED, "%s", why);
    kn_kernel_ctx c = {n, NULL, nin, in, nout, out, NULL, NULL};
    return k->run(&c);
}

/* Constant Pad that only grows (every output row written once: pad_const_rows) against the
 * definition, for 1-, 2-, 4- and 8-byte elements, zero and nonzero values, pads of 0-3 on every
 * axis; the output starts as garbage (the kernel is marked as writing every element), and one
 * case crops (a negative pad: the fill-then-copy path). */
KN_TEST(tensor_pad_constant_writes_every_element) {
    tg t;
    tg_open(&t);
    int x = tg_value(&t, "x", 0, -1, NULL), p = tg_value(&t, "p", 0, -1, NULL), v = tg_value(&t, "v", 0, -1, NULL),
        y = tg_value(&t, "y", 0, -1, NULL);
    int np = tg_node(&t, "Pad", 18, (int[]){x, p, v}, 3, &y, 1, NULL, 0);
    static const kiln_dtype dts[] = {KILN_DTYPE_FLOAT, KILN_DTYPE_INT8, KILN_DTYPE_FLOAT16, KILN_DTYPE_INT64,
                                     KILN_DTYPE_DOUBLE, KILN_DTYPE_FLOAT};
    static const int64_t pads[6][6] = {{1, 0, 2, 0, 2, 1}, {0, 3, 1, 2, 0, 0}, {2, 1, 0, 1, 1, 3},
                                       {0, 0, 0, 0, 0, 5}, {1, 1, 1, 1, 1, 1}, {1, -1, 2, 0, 2, -2}};
    const int64_t xd[3] = {2, 3, 21};
    for (int ci = 0; ci < 6; ci++) {
        const kiln_dtype dt = dts[ci];
        const size_t es = kiln_dtype_size(dt);
        int64_t yd[3], d3 = 3, d6 = 6, d1 = 1;
        for (int k = 0; k < 3; k++) yd[k] = xd[k] + pads[ci][k] + pads[ci][k + 3];
        kn_tensor *in[3], *out;
        kn_tensor_new(dt, 3, xd, &in[0]);
        kn_tensor_new(KILN_DTYPE_INT64, 1, &d6, &in[1]);
        kn_tensor_new(dt, 1, &d1, &in[2]);
        kn_tensor_new(dt, 3, yd, &out);
        (void)d3;
        unsigned char *xb = in[0]->data, *vb = in[2]->data, *yb = out->data;
        for (int64_t i = 0; i < 2 * 3 * 21 * (int64_t)es; i++) xb[i] = (unsigned char)(i * 7 + 1);
        memcpy(in[1]->data, pads[ci], sizeof pads[ci]);
        for (size_t i = 0; i < es; i++) vb[i] = ci % 2 ? (unsigned char)(0x11 * (i + 1)) : 0;
        memset(yb, 0xAB, (size_t)(yd[0] * yd[1] * yd[2]) * es);
        CHECK_STATUS(run_kernel(&t.g->nodes[np], in, 3, &out, 1), KILN_OK);
        int64_t bad = 0;
        for (int64_t a = 0; a < yd[0]; a++)
            for (int64_t b = 0; b < yd[1]; b++)
                for (int64_t c = 0; c < yd[2]; c++) {
                    const int64_t i = a - pads[ci][0], j = b - pads[ci][1], k = c - pads[ci][2];
                    const bool inside = i >= 0 && i < xd[0] && j >= 0 && j < xd[1] && k >= 0 && k < xd[2];
                    const unsigned char *want = inside ? xb + ((i * xd[1] + j) * xd[2] + k) * (int64_t)es : vb;
                    bad += memcmp(yb + ((a * yd[1] + b) * yd[2] + c) * (int64_t)es, want, es) != 0;
                }
        CHECK_MSG(bad == 0, "Pad case %d (%s): %lld of %lld elements wrong", ci, kiln_dtype_name(dt), (long long)bad,
                  (long long)(yd[0] * yd[1] * yd[2]));
        for (int k = 0; k < 3; k++) kn_tensor_free(in[k]);
        kn_tensor_free(out);
    }
    kn_model_free(t.m);
}

KN_TEST(tensor_transpose_matches_naive) {
    tg t;
    tg_open(&t);
    int x = tg_value(&t, "x", 0, -1, NULL), y = tg_value(&t, "y", 0, -1, NULL);
    /* NCHW -> NHWC and a full reversal, on shapes that exercise the blocked 2-D path */
    static const int64_t perms[3][4] = {{0, 2, 3, 1}, {3, 2, 1, 0}, {0, 1, 3, 2}};
    static const int64_t shapes[3][4] = {{2, 37, 19, 45}, {2, 37, 19, 45}, {1, 1, 1029, 67}};
    for (int pi = 0; pi < 3; pi++) {
        kn_attr perm = {.name = "perm", .type = KN_ATTR_INTS, .n = 4, .ints = (int64_t *)perms[pi]};
        int ni = tg_node(&t, "Transpose", 13, &x, 1, &y, 1, &perm, 1);
        int64_t xd[4], yd[4];
        memcpy(xd, shapes[pi], sizeof xd);
        for (int k = 0; k < 4; k++) yd[k] = xd[perms[pi][k]];
        kn_tensor *in, *out;
        kn_tensor_new(KILN_DTYPE_FLOAT, 4, xd, &in);
        kn_tensor_new(KILN_DTYPE_FLOAT, 4, yd, &out);
        float *xv = in->data, *yv = out->data;
        int64_t n = kn_tensor_count(in);
        for (int64_t i = 0; i < n; i++) xv[i] = (float)i;
        CHECK_STATUS(run_kernel(&t.g->nodes[ni], &in, 1, &out, 1), KILN_OK);
        int64_t bad = 0, idx[4];
        for (idx[0] = 0; idx[0] < yd[0]; idx[0]++)
            for (idx[1] = 0; idx[1] < yd[1]; idx[1]++)
                for (idx[2] = 0; idx[2] < yd[2]; idx[2]++)
                    for (idx[3] = 0; idx[3] < yd[3]; idx[3]++) {
                        int64_t src[4], si = 0, di = 0;
                        for (int k = 0; k < 4; k++) src[perms[pi][k]] = idx[k];
                        for (int k = 0; k < 4; k++) si = si * xd[k] + src[k], di = di * yd[k] + idx[k];
                        bad += yv[di] != xv[si];
                    }
        CHECK_EQ_INT(bad, 0);
        kn_tensor_free(in);
        kn_tensor_free(out);
    }
    kn_model_free(t.m);
}

KN_TEST(tensor_string_and_slice_kernels) {
    tg t;
    tg_open(&t);
    int x = tg_value(&t, "x", 0, -1, NULL), y = tg_value(&t, "y", 0, -1, NULL);
    int s = tg_value(&t, "s", 0, -1, NULL), e = tg_value(&t, "e", 0, -1, NULL), a = tg_value(&t, "a", 0, -1, NULL),
        st = tg_value(&t, "st", 0, -1, NULL);
    /* Transpose of strings duplicates the elements */
    int nt = tg_node(&t, "Transpose", 13, &x, 1, &y, 1, NULL, 0);
    int64_t d23[2] = {2, 3}, d32[2] = {3, 2};
    kn_tensor *in, *out;
    kn_tensor_new(KILN_DTYPE_STRING, 2, d23, &in);
    kn_tensor_new(KILN_DTYPE_STRING, 2, d32, &out);
    const char *words[6] = {"a", "b", "c", "d", "e", "f"};
    for (int i = 0; i < 6; i++) ((char **)in->data)[i] = strdup(words[i]);
    CHECK_STATUS(run_kernel(&t.g->nodes[nt], &in, 1, &out, 1), KILN_OK);
    const char *want[6] = {"a", "d", "b", "e", "c", "f"};
    for (int i = 0; i < 6; i++) {
        const char *got = ((char **)out->data)[i];
        CHECK_MSG(got && !strcmp(got, want[i]) && got != ((char **)in->data)[0], "element %d is %s", i, got ? got : "NULL");
    }
    kn_tensor_free(in);
    kn_tensor_free(out);

    /* Slice with a negative step and clamped bounds: x[7:-100:-3] of 0..9 = 7, 4, 1 */
    int ns = tg_node(&t, "Slice", 13, (int[]){x, s, e, a, st}, 5, &y, 1, NULL, 0);
    int64_t d10 = 10, d1 = 1, d3 = 3;
    kn_tensor *v[5];
    kn_tensor_new(KILN_DTYPE_INT32, 1, &d10, &v[0]);
    for (int i = 0; i < 10; i++) ((int32_t *)v[0]->data)[i] = i;
    int64_t params[4] = {7, -100, 0, -3};
    for (int k = 0; k < 4; k++) {
        kn_tensor_new(KILN_DTYPE_INT64, 1, &d1, &v[k + 1]);
        ((int64_t *)v[k + 1]->data)[0] = params[k];
    }
    kn_tensor_new(KILN_DTYPE_INT32, 1, &d3, &out);
    CHECK_STATUS(run_kernel(&t.g->nodes[ns], v, 5, &out, 1), KILN_OK);
    CHECK_EQ_INT(((int32_t *)out->data)[0], 7);
    CHECK_EQ_INT(((int32_t *)out->data)[1], 4);
    CHECK_EQ_INT(((int32_t *)out->data)[2], 1);
    for (int k = 0; k < 5; k++) kn_tensor_free(v[k]);
    kn_tensor_free(out);

    /* Pad reflect on [1,2,3] by (2, 2): 3 2 1 2 3 2 1 */
    kn_attr mode = {.name = "mode", .type = KN_ATTR_STRING, .s = "reflect", .s_len = 7};
    int np = tg_node(&t, "Pad", 18, (int[]){x, s}, 2, &y, 1, &mode, 1);
    int64_t d2 = 2, d7 = 7;
    kn_tensor *pin[2], *pout;
    kn_tensor_new(KILN_DTYPE_FLOAT, 1, &d3, &pin[0]);
    kn_tensor_new(KILN_DTYPE_INT64, 1, &d2, &pin[1]);
    for (int i = 0; i < 3; i++) ((float *)pin[0]->data)[i] = (float)(i + 1);
    ((int64_t *)pin[1]->data)[0] = ((int64_t *)pin[1]->data)[1] = 2;
    kn_tensor_new(KILN_DTYPE_FLOAT, 1, &d7, &pout);
    CHECK_STATUS(run_kernel(&t.g->nodes[np], pin, 2, &pout, 1), KILN_OK);
    const float pw[7] = {3, 2, 1, 2, 3, 2, 1};
    for (int i = 0; i < 7; i++) CHECK_NEAR(((float *)pout->data)[i], pw[i], 0);
    kn_tensor_free(pin[0]);
    kn_tensor_free(pin[1]);
    kn_tensor_free(pout);

    /* Gather with an out-of-range index is an error naming the index */
    int ng = tg_node(&t, "Gather", 13, (int[]){x, s}, 2, &y, 1, NULL, 0);
    kn_tensor *gin[2], *gout;
    kn_tensor_new(KILN_DTYPE_FLOAT, 1, &d3, &gin[0]);
    kn_tensor_new(KILN_DTYPE_INT64, 1, &d1, &gin[1]);
    ((int64_t *)gin[1]->data)[0] = 5;
    kn_tensor_new(KILN_DTYPE_FLOAT, 1, &d1, &gout);
    CHECK_STATUS(run_kernel(&t.g->nodes[ng], gin, 2, &gout, 1), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("index 5 is out of range");
    kn_tensor_free(gin[0]);
    kn_tensor_free(gin[1]);
    kn_tensor_free(gout);
    kn_model_free(t.m);
}

/* The buffer pool: a freed tensor's block serves the next request of its size (no fresh pages),
 * a tensor keeps its pool alive past the pool's destroy, and the last one frees it (the
 * sanitizer build in CI reports a use after free or a leak). */
KN_TEST(tensor_buffer_pool_reuses_blocks_and_outlives_its_owner) {
    kn_buffer_pool *pool = NULL;
    CHECK_STATUS(kn_buffer_pool_create(&pool), KILN_OK);
    int64_t dims[1] = {1 << 20}; /* 4 MiB: beyond malloc's mapping threshold, so plain reuse is not malloc's doing */
    kn_tensor *a = NULL, *b = NULL, *c = NULL;
    CHECK_STATUS(kn_tensor_new_pooled(pool, false, KILN_DTYPE_FLOAT, 1, dims, &a), KILN_OK);
    if (!a) return;
    void *block = a->data;
    kn_tensor_free(a);
    CHECK_STATUS(kn_tensor_new_pooled(pool, false, KILN_DTYPE_FLOAT, 1, dims, &b), KILN_OK);
    CHECK(b && b->data == block);
    /* a much smaller request does not take the big block */
    int64_t small[1] = {1000};
    CHECK_STATUS(kn_tensor_new_pooled(pool, false, KILN_DTYPE_FLOAT, 1, small, &c), KILN_OK);
    CHECK(c && c->data != block);
    kn_buffer_pool_destroy(pool); /* b and c still hold it */
    float *p = b ? b->data : NULL;
    for (int64_t i = 0; p && i < dims[0]; i += 4096) p[i] = (float)i;
    CHECK(!p || p[4096] == 4096.0f);
    kn_tensor_free(c);
    kn_tensor_free(b); /* the last holder: the pool goes */
}

/* A pool with its own allocator (the CUDA provider's pinned host memory): blocks come from it and
 * go back through its release, idle blocks beyond max_cached are released at once, and where the
 * allocator refuses the tensor gets plain memory that never reaches its release. */
static int fake_allocs, fake_releases, fake_refuse;
static void *fake_alloc(size_t bytes) {
    if (fake_refuse) return NULL;
    fake_allocs++;
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}
static void fake_release(void *p) {
    fake_releases++;
    free(p);
}

KN_TEST(tensor_buffer_pool_with_own_allocator) {
    fake_allocs = fake_releases = fake_refuse = 0;
    const kn_host_allocator a = {fake_alloc, fake_release, (size_t)5 << 20};
    kn_buffer_pool *pool = NULL;
    CHECK_STATUS(kn_buffer_pool_create_with(&a, &pool), KILN_OK);
    if (!pool) return;
    int64_t dims[1] = {1 << 20}; /* 4 MiB */
    kn_tensor *x = NULL, *y = NULL, *z = NULL;
    CHECK_STATUS(kn_tensor_new_pooled(pool, false, KILN_DTYPE_FLOAT, 1, dims, &x), KILN_OK);
    CHECK_STATUS(kn_tensor_new_pooled(pool, false, KILN_DTYPE_FLOAT, 1, dims, &y), KILN_OK);
    CHECK_MSG(fake_allocs == 2, "%d blocks from the allocator, expected 2", fake_allocs);
    void *kept = x ? x->data : NULL;
    kn_tensor_free(x); /* cached (4 MiB <= 5) */
    kn_tensor_free(y); /* over the cache's 5 MiB: released */
    CHECK_MSG(fake_releases == 1, "%d released after two frees, expected 1", fake_releases);
    CHECK_STATUS(kn_tensor_new_pooled(pool, false, KILN_DTYPE_FLOAT, 1, dims, &x), KILN_OK);
    CHECK(x && x->data == kept && fake_allocs == 2);
    fake_refuse = 1; /* the allocator refuses: plain memory, freed with free() */
    CHECK_STATUS(kn_tensor_new_pooled(pool, false, KILN_DTYPE_FLOAT, 1, dims, &z), KILN_OK);
    CHECK(z && z->data && z->pool == NULL);
    float *p = z ? z->data : NULL;
    if (p) p[dims[0] - 1] = 1.0f;
    kn_tensor_free(z);
    CHECK_MSG(fake_releases == 1, "plain memory went to the allocator's release (%d)", fake_releases);
    kn_buffer_pool_destroy(pool);
    kn_tensor_free(x); /* the last holder: its block goes back through release */
    CHECK_MSG(fake_releases == 2, "%d released at the end, expected 2", fake_releases);
}

/* kn_tensor_count_nonzero (NonZero's output length, counted again at every run by shape inference)
 * against each type's zero: -0 is zero and NaN is not for every float type, a subnormal or a high
 * byte alone makes an element nonzero, float8's -0 (0x80) is zero */
KN_TEST(tensor_count_nonzero_by_type) {
    static const struct {
        kiln_dtype dt;
        int n;
        uint64_t bits[6];
        int64_t want;
    } cases[] = {
        {KILN_DTYPE_FLOAT, 6, {0x80000000u, 0, 0x7fc00000u, 1, 0xff800000u, 0x3f800000u}, 4},
        {KILN_DTYPE_DOUBLE, 4, {0x8000000000000000ull, 0, 1, 0x7ff8000000000000ull}, 2},
        {KILN_DTYPE_FLOAT16, 5, {0x8000, 0, 0x0001, 0x7e00, 0xfc00}, 3},
        {KILN_DTYPE_BFLOAT16, 4, {0x8000, 0x8001, 0, 0x3f80}, 2},
        {KILN_DTYPE_INT64, 4, {0, 1ull << 40, ~0ull, 0}, 2},
        {KILN_DTYPE_INT32, 3, {0x80000000u, 0, 0x100}, 2},
        {KILN_DTYPE_UINT16, 3, {0x8000, 0, 0}, 1},
        {KILN_DTYPE_BOOL, 3, {1, 0, 1}, 2},
        {KILN_DTYPE_FLOAT8E4M3FN, 4, {0x80, 0, 0x01, 0x7f}, 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int64_t d[1] = {cases[k].n};
        kn_tensor *t = NULL;
        CHECK_STATUS(kn_tensor_new(cases[k].dt, 1, d, &t), KILN_OK);
        if (!t) continue;
        const size_t es = kiln_dtype_size(cases[k].dt);
        for (int i = 0; i < cases[k].n; i++) {
            const uint64_t b = cases[k].bits[i]; /* little-endian: the low bytes are the element */
            memcpy((unsigned char *)t->data + (size_t)i * es, &b, es);
        }
        const int64_t got = kn_tensor_count_nonzero(t);
        CHECK_MSG(got == cases[k].want, "%s: %lld nonzero, want %lld", kiln_dtype_name(cases[k].dt), (long long)got,
                  (long long)cases[k].want);
        kn_tensor_free(t);
    }
}

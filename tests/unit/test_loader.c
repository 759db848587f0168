/* The ONNX loader: models built byte by byte with a tiny protobuf writer, every malformed input
 * an error with a clear message (never a crash: run under ASan or valgrind), external data
 * confinement, values files, and the model zoo. */
#include "onnx/loader.h"
#include "test_pb_writer.h"
#include "test_tmpfiles.h"
#include "unit.h"

#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- ONNX message builders (field numbers from onnx.proto) ---- */

static pbw tensor_raw(const char *name, int dtype, const int64_t *dims, int rank, const void *raw, size_t nraw) {
    pbw t = {0};
    for (int i = 0; i < rank; i++) w_int(&t, 1, dims[i]);
    w_int(&t, 2, dtype);
    w_str(&t, 8, name);
    w_bytes(&t, 9, raw, nraw);
    return t;
}

static pbw node(const char *op, const char *name, const char *const *ins, int nin, const char *const *outs, int nout) {
    pbw n = {0};
    for (int i = 0; i < nin; i++) w_str(&n, 1, ins[i]);
    for (int i = 0; i < nout; i++) w_str(&n, 2, outs[i]);
    if (name) w_str(&n, 3, name);
    w_str(&n, 4, op);
    return n;
}

static pbw model_of(pbw *graph, int opset) {
    pbw m = {0}, os = {0};
    w_int(&m, 1, 8);
    w_str(&m, 2, "kiln-test");
    w_msg(&m, 7, graph);
    w_str(&os, 1, "");
    w_int(&os, 2, opset);
    w_msg(&m, 8, &os);
    return m;
}

/* Loads from an exactly sized heap copy, so a sanitizer sees any read past the end. */
static kiln_status load_bytes(const pbw *w, size_t n, const char *base_dir, kn_model **out) {
    uint8_t *copy = malloc(n ? n : 1);
    if (n) memcpy(copy, w->d, n);
    kiln_status st = kn_onnx_load_memory(n ? copy : NULL, n, base_dir, out);
    free(copy);
    return st;
}

/* Y = Add(X, W); Z = LeakyRelu(Y, alpha=0.25) with extra attributes; C = Constant(value=tensor) */
static pbw small_model(void) {
    pbw g = {0};
    const char *add_in[] = {"X", "W"}, *add_out[] = {"Y"};
    pbw n1 = node("Add", "add0", add_in, 2, add_out, 1);
    w_msg(&g, 1, &n1);
    const char *lr_in[] = {"Y"}, *lr_out[] = {"Z"};
    pbw n2 = node("LeakyRelu", "lrelu", lr_in, 1, lr_out, 1);
    pbw a = {0};
    w_str(&a, 1, "alpha");
    w_float(&a, 2, 0.25f);
    w_int(&a, 20, 1);
    w_msg(&n2, 5, &a);
    int64_t axes[] = {0, -1, 300};
    w_str(&a, 1, "axes");
    w_packed_ints(&a, 8, axes, 3);
    w_int(&a, 20, 7);
    w_msg(&n2, 5, &a);
    w_str(&a, 1, "mode");
    w_str(&a, 4, "linear");
    /* no 'type' field, as old exporters wrote it */
    w_msg(&n2, 5, &a);
    w_msg(&g, 1, &n2);
    const char *c_out[] = {"C"};
    pbw n3 = node("Constant", NULL, NULL, 0, c_out, 1);
    int64_t cd[] = {2};
    pbw ct = {0};
    w_int(&ct, 1, 2);
    w_int(&ct, 2, 7); /* int64 via int64_data, unpacked */
    w_int(&ct, 7, -5);
    w_int(&ct, 7, 1LL << 40);
    (void)cd;
    w_str(&a, 1, "value");
    w_msg(&a, 5, &ct);
    w_int(&a, 20, 4);
    w_msg(&n3, 5, &a);
    w_msg(&g, 1, &n3);
    w_str(&g, 2, "main");
    float wv[3] = {1.5f, -2.0f, 3.25f};
    int64_t wd[] = {3};
    pbw wt = tensor_raw("W", 1, wd, 1, wv, sizeof wv);
    w_msg(&g, 5, &wt);
    /* B: an initializer that is also a graph input (a default value), float_data packed */
    pbw bt = {0};
    w_int(&bt, 1, 2);
    w_int(&bt, 2, 1);
    w_str(&bt, 8, "B");
    uint8_t fl[8];
    float bv[2] = {7.0f, 8.0f};
    memcpy(fl, bv, 8);
    w_bytes(&bt, 4, fl, 8);
    w_msg(&g, 5, &bt);
    int64_t xd[] = {-1, 3};
    pbw vx = value_info("X", 1, 2, xd);
    w_msg(&g, 11, &vx);
    int64_t bd[] = {2};
    pbw vb = value_info("B", 1, 1, bd);
    w_msg(&g, 11, &vb);
    pbw vz = value_info("Z", 1, 2, xd);
    w_msg(&g, 12, &vz);
    pbw vc = value_info("C", 7, 1, bd);
    w_msg(&g, 12, &vc);
    pbw vy = value_info("Y", 1, 2, xd);
    w_msg(&g, 13, &vy);
    return model_of(&g, 17);
}

static int value_named(const kn_graph *g, const char *name) { return kn_graph_find_value(g, name); }

KN_TEST(loader_small_model) {
    pbw w = small_model();
    kn_model *m = NULL;
    CHECK_STATUS(load_bytes(&w, w.n, NULL, &m), KILN_OK);
    free(w.d);
    if (!m) return;
    CHECK_EQ_INT(m->ir_version, 8);
    CHECK(m->producer_name && !strcmp(m->producer_name, "kiln-test"));
    CHECK_EQ_INT(kn_model_opset(m, ""), 17);
    kn_graph *g = m->graph;
    CHECK(!strcmp(g->name, "main"));
    CHECK_EQ_INT(g->n_nodes, 3);
    CHECK_EQ_INT(g->n_inputs, 1); /* B has a default value: not among the plain inputs */
    CHECK(!strcmp(g->values[g->inputs[0]].name, "X"));
    CHECK_EQ_INT(g->n_outputs, 2);
    int x = value_named(g, "X"), wv = value_named(g, "W"), b = value_named(g, "B"), y = value_named(g, "Y"),
        z = value_named(g, "Z"), c = value_named(g, "C");
    CHECK(x >= 0 && wv >= 0 && b >= 0 && y >= 0 && z >= 0 && c >= 0);
    if (x < 0 || wv < 0 || b < 0 || y < 0 || z < 0 || c < 0) goto done;
    CHECK(g->values[x].is_graph_input && !g->values[x].constant);
    CHECK_EQ_INT(g->values[x].type.dtype, KILN_DTYPE_FLOAT);
    CHECK_EQ_INT(g->values[x].type.rank, 2);
    CHECK_EQ_INT(g->values[x].type.dims[0].value, -1);
    CHECK(g->values[x].type.dims[0].symbol && !strcmp(g->values[x].type.dims[0].symbol, "N"));
    /* dim_param names are interned: the same symbol is the same pointer */
    CHECK(g->values[x].type.dims[0].symbol == g->values[z].type.dims[0].symbol);
    CHECK_EQ_INT(g->values[x].type.dims[1].value, 3);
    CHECK(g->values[b].is_graph_input && g->values[b].constant);
    CHECK(!g->values[wv].is_graph_input && g->values[wv].constant);
    kn_tensor *t = g->values[wv].constant;
    if (t) {
        CHECK_EQ_INT(t->dtype, KILN_DTYPE_FLOAT);
        CHECK_EQ_INT(t->rank, 1);
        CHECK_EQ_INT(t->dims[0], 3);
        CHECK_NEAR(((float *)t->data)[0], 1.5, 0);
        CHECK_NEAR(((float *)t->data)[2], 3.25, 0);
        CHECK_EQ_INT(g->values[wv].type.dtype, KILN_DTYPE_FLOAT);
    }
    t = g->values[b].constant;
    if (t) {
        CHECK_NEAR(((float *)t->data)[1], 8.0, 0);
    }
    CHECK(g->values[z].is_graph_output && g->values[c].is_graph_output);
    CHECK_EQ_INT(g->values[y].type.rank, 2); /* from value_info */
    CHECK_EQ_INT(g->values[y].producer, 0);
    /* nodes and attributes */
    const kn_node *add = NULL, *lr = NULL, *cn = NULL;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (!strcmp(n->op_type, "Add")) add = n;
        if (!strcmp(n->op_type, "LeakyRelu")) lr = n;
        if (!strcmp(n->op_type, "Constant")) cn = n;
    }
    CHECK(add && lr && cn);
    if (!add || !lr || !cn) goto done;
    CHECK(!strcmp(add->name, "add0"));
    CHECK_EQ_INT(add->opset, 17);
    CHECK(!strcmp(add->domain, ""));
    CHECK_EQ_INT(add->n_inputs, 2);
    CHECK_EQ_INT(add->inputs[0], x);
    CHECK_EQ_INT(add->inputs[1], wv);
    CHECK_EQ_INT(add->outputs[0], y);
    CHECK(add < lr); /* topological order */
    CHECK(cn->name && *cn->name); /* a synthesised name */
    CHECK_NEAR(kn_attr_float(lr, "alpha", 0), 0.25, 0);
    int na = 0;
    const int64_t *ax = kn_attr_ints(lr, "axes", &na);
    CHECK_EQ_INT(na, 3);
    if (ax && na == 3) {
        CHECK_EQ_INT(ax[0], 0);
        CHECK_EQ_INT(ax[1], -1);
        CHECK_EQ_INT(ax[2], 300);
    }
    CHECK(!strcmp(kn_attr_string(lr, "mode", "?"), "linear"));
    const kn_attr *va = kn_node_attr(cn, "value");
    CHECK(va && va->type == KN_ATTR_TENSOR && va->t);
    if (va && va->t) {
        CHECK_EQ_INT(va->t->dtype, KILN_DTYPE_INT64);
        CHECK_EQ_INT(((int64_t *)va->t->data)[0], -5);
        CHECK_EQ_INT(((int64_t *)va->t->data)[1], 1LL << 40);
    }
done:
    kn_model_free(m);
}

KN_TEST(loader_every_truncation_is_an_error_or_a_valid_prefix) {
    pbw w = small_model();
    int ok = 0, failed = 0;
    for (size_t len = 0; len < w.n; len++) {
        kn_model *m = NULL;
        kiln_status st = load_bytes(&w, len, NULL, &m);
        if (st == KILN_OK) {
            /* a cut exactly between two top-level fields is itself a well-formed message */
            CHECK(m != NULL);
            ok++;
        } else {
            CHECK(m == NULL);
            CHECK_MSG(kiln_last_error()[0] != 0, "empty message at prefix %zu", len);
            failed++;
        }
        kn_model_free(m);
    }
    CHECK(failed > (int)w.n - 5);
    free(w.d);
}

KN_TEST(loader_wrong_wire_type) {
    pbw w = {0};
    w_str(&w, 1, "8"); /* ir_version as a string */
    kn_model *m = NULL;
    CHECK_STATUS(load_bytes(&w, w.n, NULL, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("ModelProto.ir_version at byte offset 0");
    CHECK_ERROR_HAS("wire type 2 (length-delimited), expected 0 (varint)");
    free(w.d);
    /* a node input as a varint, deep inside */
    pbw g = {0}, n = {0};
    w_int(&n, 1, 5);
    w_str(&n, 4, "Relu");
    w_msg(&g, 1, &n);
    w = model_of(&g, 13);
    CHECK_STATUS(load_bytes(&w, w.n, NULL, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("NodeProto.input at byte offset");
    free(w.d);
    /* groups are rejected */
    pbw x = {0};
    w_tag(&x, 7, 3);
    CHECK_STATUS(load_bytes(&x, x.n, NULL, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("group");
    free(x.d);
}

KN_TEST(loader_length_past_end) {
    pbw w = {0};
    w_int(&w, 1, 8);
    w_tag(&w, 7, 2);
    w_varint(&w, 4000000);
    w_raw(&w, "abc", 3);
    kn_model *m = NULL;
    CHECK_STATUS(load_bytes(&w, w.n, NULL, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("ModelProto.graph: length 4000000 at byte offset 3 runs past the end of the buffer");
    CHECK_ERROR_HAS("(size 10)");
    free(w.d);
    /* a nested length past its enclosing message (but inside the buffer) */
    pbw g = {0};
    w_tag(&g, 1, 2);
    w_varint(&g, 50);
    w = model_of(&g, 13);
    CHECK_STATUS(load_bytes(&w, w.n, NULL, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("GraphProto.node: length 50");
    CHECK_ERROR_HAS("runs past the end of the enclosing GraphProto");
    free(w.d);
    /* an over-long varint */
    pbw v = {0};
    w_tag(&v, 1, 0);
    for (int i = 0; i < 11; i++) w_raw(&v, "\xff", 1);
    CHECK_STATUS(load_bytes(&v, v.n, NULL, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("over-long varint");
    free(v.d);
}

static kiln_status load_graph(pbw *g, kn_model **m) {
    pbw w = model_of(g, 17);
    kiln_status st = load_bytes(&w, w.n, NULL, m);
    free(w.d);
    return st;
}

static pbw graph_with_init(pbw *tensor) {
    pbw g = {0};
    w_msg(&g, 5, tensor);
    return g;
}

KN_TEST(loader_bad_dims) {
    kn_model *m = NULL;
    float v[3] = {0};
    int64_t neg[] = {-3};
    pbw t = tensor_raw("w", 1, neg, 1, v, sizeof v);
    pbw g = graph_with_init(&t);
    CHECK_STATUS(load_graph(&g, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("tensor 'w': dimension 0 is negative (-3)");
    int64_t huge[] = {1LL << 40, 1LL << 40};
    t = tensor_raw("big", 1, huge, 2, v, sizeof v);
    g = graph_with_init(&t);
    CHECK_STATUS(load_graph(&g, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("tensor 'big': dims [1099511627776,1099511627776] of float hold too many elements");
    int64_t big1[] = {1LL << 61};
    t = tensor_raw("big1", 1, big1, 1, v, sizeof v);
    g = graph_with_init(&t);
    CHECK_STATUS(load_graph(&g, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("too many elements");
    /* a negative dim_value in a value's shape (input, output, value_info): an unknown dimension, as
     * onnx.checker and ONNX Runtime take it (issue 18: an OCR model declares its batch as -1) */
    pbw g2 = {0};
    for (int field = 11; field <= 13; field++) {
        pbw dim = {0}, dim2 = {0}, shape = {0}, tt = {0}, tp = {0}, vi = {0};
        w_int(&dim, 1, -7);
        w_msg(&shape, 1, &dim);
        w_int(&dim2, 1, 3);
        w_msg(&shape, 1, &dim2);
        w_int(&tt, 1, 1);
        w_msg(&tt, 2, &shape);
        w_msg(&tp, 1, &tt);
        w_str(&vi, 1, field == 11 ? "x" : field == 12 ? "y" : "r");
        w_msg(&vi, 2, &tp);
        w_msg(&g2, field, &vi);
        free(dim.d), free(dim2.d), free(shape.d), free(tt.d), free(tp.d), free(vi.d);
    }
    const char *rin[] = {"x"}, *rout[] = {"r"}, *nin[] = {"r"}, *nout[] = {"y"};
    pbw n1 = node("Relu", "relu", rin, 1, rout, 1), n2 = node("Neg", "neg", nin, 1, nout, 1);
    w_msg(&g2, 1, &n1);
    w_msg(&g2, 1, &n2);
    free(n1.d), free(n2.d);
    CHECK_STATUS(load_graph(&g2, &m), KILN_OK);
    if (m) {
        for (int k = 0; k < 3; k++) {
            const char *nm = k == 0 ? "x" : k == 1 ? "y" : "r";
            int v = value_named(m->graph, nm);
            CHECK_MSG(v >= 0, "value '%s' missing", nm);
            if (v < 0) continue;
            const kn_type *t = &m->graph->values[v].type;
            CHECK_EQ_INT(t->rank, 2);
            CHECK_EQ_INT((int)t->dims[0].value, -1);
            CHECK_MSG(t->dims[0].symbol == NULL, "'%s': the negative dim got a symbol", nm);
            CHECK_EQ_INT((int)t->dims[1].value, 3);
        }
        kn_model_free(m);
        m = NULL;
    }
    free(g2.d);
}

/* A model importing an opset newer than kiln implements is refused, naming the opset and the
 * newest kiln supports (ONNX Runtime refuses such a model; running an operator under semantics kiln
 * does not know is not acceptable). A domain kiln does not know is left to its operators. */
KN_TEST(loader_future_opset_is_refused) {
    kn_model *m = NULL;
    int64_t newest = kn_opset_newest("");
    CHECK_MSG(newest >= 28, "ai.onnx's newest opset is %lld", (long long)newest);
    CHECK_EQ_INT((int)kn_opset_newest("ai.onnx"), (int)newest);
    CHECK_EQ_INT((int)kn_opset_newest("com.example"), 0);
    for (int future = 0; future < 2; future++) {
        pbw g = {0};
        const char *in[] = {"x"}, *out[] = {"y"};
        int64_t d1[] = {1};
        pbw n = node("Relu", "relu", in, 1, out, 1), vx = value_info("x", 1, 1, d1);
        w_msg(&g, 1, &n);
        w_msg(&g, 11, &vx);
        free(n.d), free(vx.d);
        pbw w = model_of(&g, (int)newest + future);
        kiln_status st = load_bytes(&w, w.n, NULL, &m);
        free(w.d);
        free(g.d);
        if (!future) {
            CHECK_STATUS(st, KILN_OK);
        } else {
            CHECK_STATUS(st, KILN_ERR_UNSUPPORTED);
            char want[160];
            snprintf(want, sizeof want, "imports opset %lld of ai.onnx, newer than kiln supports (newest: ai.onnx opset %lld)",
                     (long long)newest + 1, (long long)newest);
            CHECK_ERROR_HAS(want);
        }
        kn_model_free(m);
        m = NULL;
    }
    /* another known domain, and an unknown one (accepted) */
    for (int k = 0; k < 2; k++) {
        pbw g = {0}, mm = {0}, os = {0}, os2 = {0};
        w_int(&mm, 1, 8);
        w_msg(&mm, 7, &g);
        w_str(&os, 1, "");
        w_int(&os, 2, 17);
        w_msg(&mm, 8, &os);
        w_str(&os2, 1, k == 0 ? "com.microsoft" : "com.example");
        w_int(&os2, 2, 7);
        w_msg(&mm, 8, &os2);
        kiln_status st = load_bytes(&mm, mm.n, NULL, &m);
        free(mm.d), free(os.d), free(os2.d), free(g.d);
        if (k == 0) {
            CHECK_STATUS(st, KILN_ERR_UNSUPPORTED);
            CHECK_ERROR_HAS("imports opset 7 of com.microsoft, newer than kiln supports (newest: com.microsoft opset 1)");
        } else {
            CHECK_STATUS(st, KILN_OK);
        }
        kn_model_free(m);
        m = NULL;
    }
}

KN_TEST(loader_raw_data_size_mismatch) {
    kn_model *m = NULL;
    float v[2] = {1, 2};
    int64_t d[] = {3};
    pbw t = tensor_raw("w", 1, d, 1, v, sizeof v);
    pbw g = graph_with_init(&t);
    CHECK_STATUS(load_graph(&g, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("tensor 'w': raw_data has 8 bytes, but float[3] needs 12");
    /* typed data count mismatch */
    pbw t2 = {0};
    w_int(&t2, 1, 4);
    w_int(&t2, 2, 7);
    w_str(&t2, 8, "i");
    w_int(&t2, 7, 1);
    g = graph_with_init(&t2);
    CHECK_STATUS(load_graph(&g, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("tensor 'i': int64_data holds 1 values, but int64[4] needs 4");
    /* data in the field of another type */
    pbw t3 = {0};
    w_int(&t3, 1, 1);
    w_int(&t3, 2, 7);
    w_str(&t3, 8, "j");
    w_float(&t3, 4, 1.0f);
    g = graph_with_init(&t3);
    CHECK_STATUS(load_graph(&g, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("float_data holds 1 values, but data_type int64 keeps its values in int64_data");
}

KN_TEST(loader_unknown_elem_type) {
    kn_model *m = NULL;
    pbw g = {0};
    int64_t d[] = {2};
    pbw vi = value_info("x", 99, 1, d);
    w_msg(&g, 11, &vi);
    CHECK_STATUS(load_graph(&g, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("value 'x': TypeProto.Tensor.elem_type at byte offset");
    CHECK_ERROR_HAS("unknown elem_type 99");
    uint8_t raw[2] = {0};
    pbw t = tensor_raw("t", 1000, d, 1, raw, 2);
    g = graph_with_init(&t);
    CHECK_STATUS(load_graph(&g, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("tensor 't': TensorProto.data_type at byte offset");
    CHECK_ERROR_HAS("unknown data_type 1000");
}

static pbw relu_with_attr(pbw *attr) {
    pbw g = {0};
    const char *in[] = {"x"}, *out[] = {"y"};
    pbw n = node("Relu", "r", in, 1, out, 1);
    w_msg(&n, 5, attr);
    w_msg(&g, 1, &n);
    int64_t d[] = {2};
    pbw vx = value_info("x", 1, 1, d), vy = value_info("y", 1, 1, d);
    w_msg(&g, 11, &vx);
    w_msg(&g, 12, &vy);
    return g;
}

KN_TEST(loader_attribute_wrong_kind) {
    kn_model *m = NULL;
    pbw a = {0};
    w_str(&a, 1, "alpha");
    w_float(&a, 2, 1.0f);
    w_int(&a, 20, 2); /* declared INT, holds a float */
    pbw g = relu_with_attr(&a);
    CHECK_STATUS(load_graph(&g, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("node 'r' (Relu): attribute 'alpha': type is INT but it sets field 'f' (FLOAT)");
    /* no type and two value fields */
    w_str(&a, 1, "beta");
    w_float(&a, 2, 1.0f);
    w_int(&a, 3, 1);
    g = relu_with_attr(&a);
    CHECK_STATUS(load_graph(&g, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("attribute 'beta': has no type and sets both 'f' and 'i'");
    /* an unknown type number */
    w_str(&a, 1, "gamma");
    w_int(&a, 20, 77);
    g = relu_with_attr(&a);
    CHECK_STATUS(load_graph(&g, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("unknown attribute type 77");
    /* the wire type of a known attribute field */
    w_str(&a, 1, "delta");
    w_int(&a, 2, 5); /* f as a varint */
    g = relu_with_attr(&a);
    CHECK_STATUS(load_graph(&g, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("attribute 'delta': AttributeProto.f at byte offset");
    /* an attribute without a type whose field says INTS */
    w_str(&a, 1, "pads");
    w_int(&a, 8, 1);
    w_int(&a, 8, 2);
    g = relu_with_attr(&a);
    CHECK_STATUS(load_graph(&g, &m), KILN_OK);
    if (m) {
        int n = 0;
        const int64_t *p = kn_attr_ints(&m->graph->nodes[0], "pads", &n);
        CHECK_EQ_INT(n, 2);
        if (p && n == 2) CHECK_EQ_INT(p[1], 2);
        kn_model_free(m);
    }
}

KN_TEST(loader_graph_errors) {
    kn_model *m = NULL;
    /* an input nothing defines */
    pbw g = {0};
    const char *in[] = {"nowhere"}, *out[] = {"y"};
    pbw n = node("Relu", "r", in, 1, out, 1);
    w_msg(&g, 1, &n);
    CHECK_STATUS(load_graph(&g, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("input 'nowhere' is not produced by any node, graph input or initializer");
    /* an output nothing produces */
    pbw g2 = {0};
    int64_t d[] = {1};
    pbw vo = value_info("ghost", 1, 1, d);
    w_msg(&g2, 12, &vo);
    CHECK_STATUS(load_graph(&g2, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("graph output 'ghost' is not produced by any node");
    /* a cycle */
    pbw g3 = {0};
    const char *ia[] = {"b"}, *oa[] = {"a"}, *ib[] = {"a"}, *ob[] = {"b"};
    pbw na = node("Relu", "A", ia, 1, oa, 1), nb = node("Relu", "B", ib, 1, ob, 1);
    w_msg(&g3, 1, &na);
    w_msg(&g3, 1, &nb);
    CHECK_STATUS(load_graph(&g3, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("cycle");
    /* no graph at all */
    pbw w = {0};
    w_int(&w, 1, 8);
    CHECK_STATUS(load_bytes(&w, w.n, NULL, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("no graph");
    free(w.d);
    CHECK_STATUS(load_bytes(&w, 0, NULL, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("empty");
    /* sparse initializers are refused by name */
    pbw g4 = {0}, sp = {0};
    w_msg(&g4, 15, &sp);
    CHECK_STATUS(load_graph(&g4, &m), KILN_ERR_UNSUPPORTED);
    CHECK_ERROR_HAS("sparse initializers are not supported");
}

KN_TEST(loader_nodes_out_of_order_and_subgraph_outer_values) {
    /* Y = Relu(X) written after its consumer; If(cond) whose branch reads the outer value Y */
    pbw g = {0}, then_g = {0}, else_g = {0};
    const char *in_id[] = {"Y"}, *out_id[] = {"t_out"};
    pbw tn = node("Identity", "then_id", in_id, 1, out_id, 1);
    w_msg(&then_g, 1, &tn);
    w_str(&then_g, 2, "then");
    int64_t d[] = {2};
    pbw tv = value_info("t_out", 1, 1, d);
    w_msg(&then_g, 12, &tv);
    const char *in_neg[] = {"X"}, *out_neg[] = {"e_out"};
    pbw en = node("Neg", "else_neg", in_neg, 1, out_neg, 1);
    w_msg(&else_g, 1, &en);
    w_str(&else_g, 2, "else");
    pbw ev = value_info("e_out", 1, 1, d);
    w_msg(&else_g, 12, &ev);
    const char *if_in[] = {"cond"}, *if_out[] = {"Z"};
    pbw ifn = node("If", "if0", if_in, 1, if_out, 1);
    pbw a = {0};
    w_str(&a, 1, "then_branch");
    w_int(&a, 20, 5);
    w_msg(&a, 6, &then_g);
    w_msg(&ifn, 5, &a);
    w_str(&a, 1, "else_branch");
    w_int(&a, 20, 5);
    w_msg(&a, 6, &else_g);
    w_msg(&ifn, 5, &a);
    w_msg(&g, 1, &ifn);
    const char *r_in[] = {"X"}, *r_out[] = {"Y"};
    pbw rn = node("Relu", "relu", r_in, 1, r_out, 1);
    w_msg(&g, 1, &rn);
    pbw vx = value_info("X", 1, 1, d), vc = value_info("cond", 9, 0, NULL), vz = value_info("Z", 1, 1, d);
    w_msg(&g, 11, &vx);
    w_msg(&g, 11, &vc);
    w_msg(&g, 12, &vz);
    kn_model *m = NULL;
    CHECK_STATUS(load_graph(&g, &m), KILN_OK);
    if (!m) return;
    kn_graph *mg = m->graph;
    CHECK_EQ_INT(mg->n_nodes, 2);
    CHECK(!strcmp(mg->nodes[0].op_type, "Relu")); /* sorted */
    const kn_node *ifnode = &mg->nodes[1];
    const kn_attr *tb = kn_node_attr(ifnode, "then_branch"), *eb = kn_node_attr(ifnode, "else_branch");
    CHECK(tb && tb->type == KN_ATTR_GRAPH && tb->g);
    CHECK(eb && eb->type == KN_ATTR_GRAPH && eb->g);
    if (tb && tb->g && eb && eb->g) {
        kn_graph *t = tb->g;
        CHECK(t->parent == mg);
        CHECK(!strcmp(t->name, "then"));
        int y = kn_graph_find_value(t, "Y");
        CHECK(y >= 0 && t->values[y].is_outer && t->values[y].producer == -1);
        /* the outer value's type came along */
        if (y >= 0) CHECK_EQ_INT(t->values[y].type.rank, -1);
        CHECK_EQ_INT(t->n_outputs, 1);
        int x = kn_graph_find_value(eb->g, "X");
        CHECK(x >= 0 && eb->g->values[x].is_outer);
        if (x >= 0) CHECK_EQ_INT(eb->g->values[x].type.rank, 1);
        CHECK_EQ_INT(eb->g->nodes[0].opset, 17);
    }
    kn_model_free(m);
}

KN_TEST(loader_deep_nesting_is_refused) {
    /* a TypeProto nested 400 sequence levels deep: no stack overflow, a clear error */
    pbw t = {0}, tt = {0};
    w_int(&tt, 1, 1);
    w_msg(&t, 1, &tt);
    for (int i = 0; i < 400; i++) {
        pbw seq = {0}, outer = {0};
        w_msg(&seq, 1, &t);
        w_msg(&outer, 4, &seq);
        t = outer;
    }
    pbw vi = {0}, g = {0};
    w_str(&vi, 1, "deep");
    w_msg(&vi, 2, &t);
    w_msg(&g, 11, &vi);
    kn_model *m = NULL;
    CHECK_STATUS(load_graph(&g, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("nest more than");
    /* graphs nested through If attributes */
    pbw sub = {0};
    for (int i = 0; i < 60; i++) {
        pbw n = node("If", NULL, NULL, 0, NULL, 0), a = {0}, gg = {0};
        w_str(&a, 1, "then_branch");
        w_msg(&a, 6, &sub);
        w_msg(&n, 5, &a);
        w_msg(&gg, 1, &n);
        sub = gg;
    }
    CHECK_STATUS(load_graph(&sub, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("nest more than");
}

KN_TEST(loader_model_local_function_is_expanded) {
    /* custom.AddScale(a, b) = Mul(Add(a, b), Constant(value_float = @scale)), default scale 2 */
    pbw fn = {0};
    w_str(&fn, 1, "AddScale");
    w_str(&fn, 10, "custom");
    w_str(&fn, 4, "a");
    w_str(&fn, 4, "b");
    w_str(&fn, 5, "out");
    w_str(&fn, 6, "scale");
    const char *ai[] = {"a", "b"}, *ao[] = {"s"};
    pbw n1 = node("Add", "add", ai, 2, ao, 1);
    w_msg(&fn, 7, &n1);
    const char *co[] = {"k"};
    pbw n2 = node("Constant", "k", NULL, 0, co, 1), ra = {0};
    w_str(&ra, 1, "value_float");
    w_int(&ra, 20, 1);
    w_str(&ra, 21, "scale");
    w_msg(&n2, 5, &ra);
    w_msg(&fn, 7, &n2);
    const char *mi[] = {"s", "k"}, *mo[] = {"out"};
    pbw n3 = node("Mul", "mul", mi, 2, mo, 1);
    w_msg(&fn, 7, &n3);
    pbw os = {0};
    w_str(&os, 1, "");
    w_int(&os, 2, 13);
    w_msg(&fn, 9, &os);
    pbw def = {0};
    w_str(&def, 1, "scale");
    w_float(&def, 2, 2.0f);
    w_int(&def, 20, 1);
    w_msg(&fn, 11, &def);

    pbw g = {0};
    const char *ci[] = {"x", "y"}, *cout1[] = {"r1"}, *cout2[] = {"r2"};
    pbw c1 = node("AddScale", "call1", ci, 2, cout1, 1);
    w_str(&c1, 7, "custom");
    pbw sa = {0};
    w_str(&sa, 1, "scale");
    w_float(&sa, 2, 5.0f);
    w_int(&sa, 20, 1);
    w_msg(&c1, 5, &sa);
    w_msg(&g, 1, &c1);
    pbw c2 = node("AddScale", "call2", ci, 2, cout2, 1);
    w_str(&c2, 7, "custom");
    w_msg(&g, 1, &c2);
    int64_t d[] = {2};
    pbw vx = value_info("x", 1, 1, d), vy = value_info("y", 1, 1, d), v1 = value_info("r1", 1, 1, d),
        v2 = value_info("r2", 1, 1, d);
    w_msg(&g, 11, &vx);
    w_msg(&g, 11, &vy);
    w_msg(&g, 12, &v1);
    w_msg(&g, 12, &v2);
    pbw w = model_of(&g, 17), os2 = {0};
    w_str(&os2, 1, "custom");
    w_int(&os2, 2, 1);
    w_msg(&w, 8, &os2);
    w_msg(&w, 25, &fn);
    kn_model *m = NULL;
    CHECK_STATUS(load_bytes(&w, w.n, NULL, &m), KILN_OK);
    free(w.d);
    if (!m) return;
    kn_graph *mg = m->graph;
    CHECK_EQ_INT(mg->n_nodes, 6);
    int found = 0;
    for (int i = 0; i < mg->n_nodes; i++) {
        const kn_node *n = &mg->nodes[i];
        CHECK(strcmp(n->op_type, "AddScale") != 0);
        if (!strcmp(n->name, "call1/k")) {
            CHECK_NEAR(kn_attr_float(n, "value_float", 0), 5.0, 0);
            CHECK_EQ_INT(n->opset, 13); /* the function's own import */
            found++;
        }
        if (!strcmp(n->name, "call2/k")) {
            CHECK_NEAR(kn_attr_float(n, "value_float", 0), 2.0, 0); /* the default */
            found++;
        }
        if (!strcmp(n->name, "call1/mul")) {
            CHECK_EQ_INT(n->outputs[0], kn_graph_find_value(mg, "r1"));
            CHECK_EQ_INT(n->inputs[0], kn_graph_find_value(mg, "call1/s"));
            found++;
        }
        if (!strcmp(n->name, "call2/add")) {
            CHECK_EQ_INT(n->inputs[0], kn_graph_find_value(mg, "x"));
            found++;
        }
    }
    CHECK_EQ_INT(found, 4);
    kn_model_free(m);
}

KN_TEST(loader_recursive_function_is_refused) {
    pbw fn = {0};
    w_str(&fn, 1, "Loop1");
    w_str(&fn, 10, "custom");
    w_str(&fn, 4, "a");
    w_str(&fn, 5, "b");
    const char *i[] = {"a"}, *o[] = {"b"};
    pbw n = node("Loop1", NULL, i, 1, o, 1);
    w_str(&n, 7, "custom");
    w_msg(&fn, 7, &n);
    pbw g = {0};
    const char *ci[] = {"x"}, *co[] = {"y"};
    pbw c = node("Loop1", "call", ci, 1, co, 1);
    w_str(&c, 7, "custom");
    w_msg(&g, 1, &c);
    int64_t d[] = {1};
    pbw vx = value_info("x", 1, 1, d);
    w_msg(&g, 11, &vx);
    pbw w = model_of(&g, 17);
    w_msg(&w, 25, &fn);
    kn_model *m = NULL;
    CHECK_STATUS(load_bytes(&w, w.n, NULL, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("does function 'Loop1' call itself?");
    free(w.d);
}

/* ---- files ---- */

static char tmp_root[256];

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* The temporary folder goes when the test binary exits. */
__attribute__((destructor)) static void remove_tmp_root(void) {
    if (tmp_root[0]) nftw(tmp_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *tmpdir(void) {
    if (!tmp_root[0]) {
        snprintf(tmp_root, sizeof tmp_root, "/tmp/kiln_loader_test_XXXXXX");
        if (!mkdtemp(tmp_root)) return NULL;
    }
    return tmp_root;
}

/* A model whose initializer 'w' (float[4]) lives in external data at `location`. */
static pbw external_model(const char *location, const char *offset, const char *length) {
    pbw t = {0}, e = {0};
    w_int(&t, 1, 4);
    w_int(&t, 2, 1);
    w_str(&t, 8, "w");
    w_str(&e, 1, "location");
    w_str(&e, 2, location);
    w_msg(&t, 13, &e);
    if (offset) {
        w_str(&e, 1, "offset");
        w_str(&e, 2, offset);
        w_msg(&t, 13, &e);
    }
    if (length) {
        w_str(&e, 1, "length");
        w_str(&e, 2, length);
        w_msg(&t, 13, &e);
    }
    w_int(&t, 14, 1);
    pbw g = graph_with_init(&t);
    return model_of(&g, 17);
}

static kiln_status load_external(const char *dir, const char *location, const char *offset, const char *length,
                                 kn_model **m) {
    char path[512];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    pbw w = external_model(location, offset, length);
    int rc = ttf_write(path, w.d, w.n);
    free(w.d);
    if (rc) return KILN_ERR_IO;
    return kn_onnx_load_file(path, m);
}

KN_TEST(loader_external_data) {
    const char *root = tmpdir();
    if (!root) KN_SKIP("cannot create a temporary folder");
    char dir[512], path[600], outside[600];
    snprintf(dir, sizeof dir, "%s/ext", root);
    mkdir(dir, 0755);
    float vals[6] = {9, 1, 2, 3, 4, 9};
    snprintf(path, sizeof path, "%s/weights.bin", dir);
    CHECK(ttf_write(path, vals, sizeof vals) == 0);
    kn_model *m = NULL;
    CHECK_STATUS(load_external(dir, "weights.bin", "4", "16", &m), KILN_OK);
    if (m) {
        kn_tensor *t = m->graph->values[0].constant;
        CHECK(t && t->owns_data);
        if (t) {
            CHECK_NEAR(((float *)t->data)[0], 1, 0);
            CHECK_NEAR(((float *)t->data)[3], 4, 0);
        }
        kn_model_free(m);
    }
    /* escapes */
    CHECK_STATUS(load_external(dir, "../x", NULL, NULL, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("tensor 'w': external data location '../x' is absolute or contains '..'");
    CHECK_STATUS(load_external(dir, "/etc/passwd", NULL, NULL, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("'/etc/passwd' is absolute");
    CHECK_STATUS(load_external(dir, "sub/../../x", NULL, NULL, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("contains '..'");
    /* a symlink inside the folder that points outside it */
    snprintf(outside, sizeof outside, "%s/outside.bin", root);
    CHECK(ttf_write(outside, vals, sizeof vals) == 0);
    snprintf(path, sizeof path, "%s/link.bin", dir);
    unlink(path);
    if (symlink(outside, path) == 0) {
        CHECK_STATUS(load_external(dir, "link.bin", NULL, "16", &m), KILN_ERR_INVALID_MODEL);
        CHECK_ERROR_HAS("outside the model folder");
    }
    /* missing and short files */
    CHECK_STATUS(load_external(dir, "missing.bin", NULL, NULL, &m), KILN_ERR_IO);
    CHECK_ERROR_HAS("tensor 'w': external data file 'missing.bin'");
    CHECK_ERROR_HAS("does not exist");
    CHECK_STATUS(load_external(dir, "weights.bin", "16", NULL, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("external data file 'weights.bin' is 24 bytes, too short for offset 16 + length 16 (float[4])");
    CHECK_STATUS(load_external(dir, "weights.bin", NULL, "8", &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("external data length 8 does not match the 16 bytes that float[4] needs");
    CHECK_STATUS(load_external(dir, "weights.bin", "x1", NULL, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("not a decimal byte count");
    /* from memory without a folder */
    pbw w = external_model("weights.bin", NULL, NULL);
    CHECK_STATUS(load_bytes(&w, w.n, NULL, &m), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("without a base folder");
    CHECK_STATUS(load_bytes(&w, w.n, dir, &m), KILN_OK);
    kn_model_free(m);
    free(w.d);
}

KN_TEST(loader_file_views_into_the_mapping) {
    const char *root = tmpdir();
    if (!root) KN_SKIP("cannot create a temporary folder");
    char path[512];
    snprintf(path, sizeof path, "%s/view.onnx", root);
    /* pad the file so the raw data lands at each alignment; aligned ones must be views */
    int views = 0, copies = 0;
    for (int pad = 0; pad < 8; pad++) {
        float vals[64];
        for (int i = 0; i < 64; i++) vals[i] = (float)i * 0.5f;
        int64_t d[] = {64};
        pbw t = tensor_raw("w", 1, d, 1, vals, sizeof vals);
        pbw g = graph_with_init(&t);
        pbw w = {0};
        char doc[16] = "pppppppppppppp";
        doc[pad] = 0;
        w_str(&w, 6, doc);
        pbw rest = model_of(&g, 17);
        w_raw(&w, rest.d, rest.n);
        free(rest.d);
        CHECK(ttf_write(path, w.d, w.n) == 0);
        free(w.d);
        kn_model *m = NULL;
        CHECK_STATUS(kn_onnx_load_file(path, &m), KILN_OK);
        if (!m) continue;
        kn_tensor *c = m->graph->values[0].constant;
        CHECK(c != NULL);
        if (c) {
            CHECK_NEAR(((float *)c->data)[63], 31.5, 0);
            CHECK(((uintptr_t)c->data % 4) == 0);
            bool in_map = m->mapping && (uint8_t *)c->data >= (uint8_t *)m->mapping &&
                          (uint8_t *)c->data < (uint8_t *)m->mapping + m->mapping_size;
            if (in_map) views++;
            else copies++;
            CHECK(!c->owns_data);
        }
        kn_model_free(m);
    }
    CHECK(views >= 2);
    CHECK(copies >= 2);
    CHECK_STATUS(kn_onnx_load_file("/nonexistent/model.onnx", &(kn_model *){NULL}), KILN_ERR_IO);
    CHECK_ERROR_HAS("/nonexistent/model.onnx: cannot open");
}

/* ---- values (test data files) ---- */

KN_TEST(loader_parse_values) {
    kn_tensor *t = NULL;
    char *name = NULL;
    /* TensorProto with int32_data carrying float16 bits and a name */
    pbw tp = {0};
    w_int(&tp, 1, 2);
    w_int(&tp, 2, KILN_DTYPE_FLOAT16);
    w_int(&tp, 5, 0x3c00); /* 1.0 */
    w_int(&tp, 5, 0xc000); /* -2.0 */
    w_str(&tp, 8, "input_0");
    CHECK_STATUS(kn_onnx_parse_value(tp.d, tp.n, &t, &name), KILN_OK);
    if (t) {
        CHECK_EQ_INT(t->kind, KN_VALUE_TENSOR);
        CHECK_EQ_INT(t->dtype, KILN_DTYPE_FLOAT16);
        CHECK_NEAR(kn_f16_to_f32(((uint16_t *)t->data)[1]), -2.0, 0);
    }
    CHECK(name && !strcmp(name, "input_0"));
    kn_tensor_free(t);
    free(name);
    /* strings */
    pbw sp = {0};
    w_int(&sp, 1, 2);
    w_int(&sp, 2, KILN_DTYPE_STRING);
    w_str(&sp, 6, "hello");
    w_str(&sp, 6, "");
    CHECK_STATUS(kn_onnx_parse_value(sp.d, sp.n, &t, NULL), KILN_OK);
    if (t) {
        CHECK(!strcmp(((char **)t->data)[0], "hello") && !strcmp(((char **)t->data)[1], ""));
        kn_tensor_free(t);
    }
    /* a SequenceProto of two tensors */
    pbw seq = {0};
    w_str(&seq, 1, "seq");
    w_int(&seq, 2, 1);
    pbw copy = {0};
    w_raw(&copy, tp.d, tp.n);
    w_msg(&seq, 3, &copy);
    w_raw(&copy, tp.d, tp.n);
    w_msg(&seq, 3, &copy);
    CHECK_STATUS(kn_onnx_parse_value(seq.d, seq.n, &t, &name), KILN_OK);
    if (t) {
        CHECK_EQ_INT(t->kind, KN_VALUE_SEQUENCE);
        CHECK_EQ_INT(t->n_items, 2);
        CHECK_EQ_INT(t->dtype, KILN_DTYPE_FLOAT16);
        kn_tensor_free(t);
    }
    CHECK(name && !strcmp(name, "seq"));
    free(name);
    CHECK_STATUS(kn_onnx_parse_value_as(seq.d, seq.n, KN_VALUE_SEQUENCE, &t, NULL), KILN_OK);
    kn_tensor_free(t);
    /* an empty OptionalProto, as onnx writes it: name + elem_type 0 */
    pbw opt = {0};
    w_str(&opt, 1, "optional_input");
    w_int(&opt, 2, 0);
    CHECK_STATUS(kn_onnx_parse_value(opt.d, opt.n, &t, NULL), KILN_OK);
    if (t) {
        CHECK_EQ_INT(t->kind, KN_VALUE_OPTIONAL);
        CHECK_EQ_INT(t->n_items, 0);
        kn_tensor_free(t);
    }
    /* an optional tensor, told the kind */
    pbw opt2 = {0};
    w_str(&opt2, 1, "o");
    w_int(&opt2, 2, 1);
    w_raw(&copy, tp.d, tp.n);
    w_msg(&opt2, 3, &copy);
    CHECK_STATUS(kn_onnx_parse_value_as(opt2.d, opt2.n, KN_VALUE_OPTIONAL, &t, NULL), KILN_OK);
    if (t) {
        CHECK_EQ_INT(t->kind, KN_VALUE_OPTIONAL);
        CHECK_EQ_INT(t->n_items, 1);
        kn_tensor_free(t);
    }
    /* every truncation of each is handled */
    pbw *all[] = {&tp, &sp, &seq, &opt2};
    for (int k = 0; k < 4; k++)
        for (size_t len = 0; len < all[k]->n; len++) {
            uint8_t *b = malloc(len ? len : 1);
            memcpy(b, all[k]->d, len);
            for (int kind = -1; kind < 3; kind++) {
                kiln_status st = kn_onnx_parse_value_as(b, len, kind, &t, &name);
                if (st == KILN_OK) {
                    kn_tensor_free(t);
                    free(name);
                } else {
                    CHECK(t == NULL && name == NULL);
                }
            }
            free(b);
        }
    free(tp.d);
    free(sp.d);
    free(seq.d);
    free(opt.d);
    free(opt2.d);
    /* a bad tensor names its problem */
    pbw bad = {0};
    w_int(&bad, 1, 3);
    w_int(&bad, 2, 1);
    w_bytes(&bad, 9, "abcd", 4);
    CHECK_STATUS(kn_onnx_parse_value_as(bad.d, bad.n, KN_VALUE_TENSOR, &t, NULL), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("raw_data has 4 bytes, but float[3] needs 12");
    free(bad.d);
}

/* ---- the model zoo ---- */

/* Facts read with the onnx Python package (onnx 1.23: onnx.load, m.opset_import, len(g.node),
 * len(g.initializer), graph inputs that are not initializers, g.output[0].name, and the first
 * input's elem_type and rank). */
static const struct zoo_fact {
    const char *name;
    int opset, nodes, initializers, inputs;
    const char *input0, *output0;
    int input0_dtype, input0_rank;
} zoo[] = {
    {"bert_mini", 14, 537, 31, 3, "input_ids", "last_hidden_state", 7, 2},
    {"efficientnet_b0", 17, 298, 105, 1, "images", "logits", 1, 4},
    {"field_conv1d_gemm", 17, 9, 10, 1, "signal", "scores", 1, 3},
    {"gpt2_tiny_dynamo", 18, 157, 40, 1, "input_ids", "hidden", 7, 2},
    {"lstm_gru", 17, 49, 11, 1, "frames", "scores", 1, 3},
    {"mobilenet_v3_small", 17, 159, 71, 1, "images", "logits", 1, 4},
    {"vit_tiny", 17, 955, 58, 1, "images", "logits", 1, 4},
    {"whisper_tiny_encoder", 17, 182, 18, 1, "input_features", "hidden", 1, 3},
};

KN_TEST(loader_model_zoo) {
    /* $KILN_MODELS_DIR, else the zoo next to the checkout (../shared/models) or inside it */
    char cand[3][512];
    const char *env = getenv("KILN_MODELS_DIR");
    snprintf(cand[0], sizeof cand[0], "%s", env && *env ? env : "/nonexistent");
    snprintf(cand[1], sizeof cand[1], "%s/../shared/models", kn_unit_root());
    snprintf(cand[2], sizeof cand[2], "%s/shared/models", kn_unit_root());
    const char *dir = NULL;
    struct stat sb;
    for (int i = 0; i < 3 && !dir; i++)
        if (stat(cand[i], &sb) == 0 && S_ISDIR(sb.st_mode)) dir = cand[i];
    if (!dir && stat("/work/shared/models", &sb) == 0) dir = "/work/shared/models";
    if (!dir) KN_SKIP("no model zoo (set KILN_MODELS_DIR)");
    int loaded = 0;
    for (size_t i = 0; i < sizeof zoo / sizeof zoo[0]; i++) {
        const struct zoo_fact *z = &zoo[i];
        char path[1600];
        snprintf(path, sizeof path, "%s/%s/model.onnx", dir, z->name);
        if (stat(path, &sb) != 0) continue;
        kn_model *m = NULL;
        CHECK_STATUS(kn_onnx_load_file(path, &m), KILN_OK);
        if (!m) continue;
        loaded++;
        kn_graph *g = m->graph;
        CHECK_EQ_INT(kn_model_opset(m, ""), z->opset);
        CHECK_EQ_INT(g->n_nodes, z->nodes);
        int inits = 0;
        for (int v = 0; v < g->n_values; v++) inits += g->values[v].constant != NULL;
        CHECK_EQ_INT(inits, z->initializers);
        CHECK_EQ_INT(g->n_inputs, z->inputs);
        if (g->n_inputs > 0) {
            const kn_value *in = &g->values[g->inputs[0]];
            CHECK_MSG(!strcmp(in->name, z->input0), "%s: first input '%s'", z->name, in->name);
            CHECK_EQ_INT(in->type.dtype, z->input0_dtype);
            CHECK_EQ_INT(in->type.rank, z->input0_rank);
            CHECK(in->type.dims[0].symbol && !strcmp(in->type.dims[0].symbol, "batch"));
        }
        CHECK(g->n_outputs > 0 && !strcmp(g->values[g->outputs[0]].name, z->output0));
        for (int n = 0; n < g->n_nodes; n++) CHECK_EQ_INT(g->nodes[n].opset, z->opset);
        kn_model_free(m);
    }
    if (!loaded) KN_SKIP("no zoo model found");
}

KN_TEST(loader_function_expansion_bomb_is_refused) {
    /* F0 = Identity; Fk calls F(k-1) 16 times: F7 would expand to 16^7 nodes */
    pbw w = {0};
    pbw g = {0};
    const char *ci[] = {"x"}, *co[] = {"y"};
    pbw c = node("F7", "call", ci, 1, co, 1);
    w_str(&c, 7, "bomb");
    w_msg(&g, 1, &c);
    int64_t d[] = {1};
    pbw vx = value_info("x", 1, 1, d);
    w_msg(&g, 11, &vx);
    w = model_of(&g, 17);
    for (int k = 0; k < 8; k++) {
        pbw fn = {0};
        char name[8], inner[8];
        snprintf(name, sizeof name, "F%d", k);
        snprintf(inner, sizeof inner, "F%d", k - 1);
        w_str(&fn, 1, name);
        w_str(&fn, 10, "bomb");
        w_str(&fn, 4, "a");
        w_str(&fn, 5, "b");
        const char *i[] = {"a"}, *o[] = {"b"};
        if (k == 0) {
            pbw n = node("Identity", NULL, i, 1, o, 1);
            w_msg(&fn, 7, &n);
        } else {
            for (int j = 0; j < 16; j++) {
                const char *oo[] = {j == 15 ? "b" : ""};
                pbw n = node(inner, NULL, i, 1, oo, 1);
                w_str(&n, 7, "bomb");
                w_msg(&fn, 7, &n);
            }
        }
        w_msg(&w, 25, &fn);
    }
    kn_model *m = NULL;
    CHECK_STATUS(load_bytes(&w, w.n, NULL, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("would create too many nodes");
    free(w.d);
}

KN_TEST(loader_duplicate_attribute) {
    kn_model *m = NULL;
    pbw g = {0};
    const char *in[] = {"x"}, *out[] = {"y"};
    pbw n = node("Relu", "r", in, 1, out, 1);
    for (int k = 0; k < 2; k++) {
        pbw a = {0};
        w_str(&a, 1, "alpha");
        w_float(&a, 2, 1.0f);
        w_msg(&n, 5, &a);
    }
    w_msg(&g, 1, &n);
    int64_t d[] = {2};
    pbw vx = value_info("x", 1, 1, d);
    w_msg(&g, 11, &vx);
    CHECK_STATUS(load_graph(&g, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("node 'r' (Relu): attribute 'alpha' appears twice");
}

/* GPU tests of the image, quant and einsum kernels: Resize (nearest, linear with antialias, cubic
 * with exclude_outside, tf_crop_and_resize with extrapolation), GridSample (2-D and 3-D),
 * QuantizeLinear -> DequantizeLinear per axis, blocked and into int4, and Einsum (a batched
 * product through the GEMM path and a diagonal through the direct sum), each run on CUDA only and
 * compared with the CPU backend. Without a usable CUDA device each test is skipped. */
#include "unit.h"

#include "ir/graph.h"
#include "onnx/writer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ a one-input model builder */

typedef struct mb {
    kn_model *m;
    kn_graph *g;
    uint32_t seed;
} mb;

static float rnd(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void mb_init(mb *b, int opset) {
    memset(b, 0, sizeof *b);
    b->seed = 4242;
    kn_model_new(&b->m);
    b->m->ir_version = 10;
    b->m->n_opsets = 1;
    b->m->opsets = kn_arena_alloc(&b->m->arena, sizeof(kn_opset_import));
    b->m->opsets[0].domain = "";
    b->m->opsets[0].version = opset;
    b->m->producer_name = "kiln-test";
    kn_graph_new(b->m, NULL, "test", &b->g);
    b->m->graph = b->g;
}

static int mb_input(mb *b, int rank, const int64_t *dims) {
    int v = kn_graph_add_value(b->g, "X");
    kn_type_set_tensor(&b->g->values[v].type, KILN_DTYPE_FLOAT, rank, dims);
    b->g->values[v].is_graph_input = true;
    b->g->inputs = realloc(b->g->inputs, sizeof(int) * (size_t)(b->g->n_inputs + 1));
    b->g->inputs[b->g->n_inputs++] = v;
    return v;
}

/* A constant of any numeric type from doubles (vals NULL: random in [lo, hi)). */
static int mb_const(mb *b, const char *name, kiln_dtype dt, int rank, const int64_t *dims, const double *vals,
                    double lo, double hi) {
    kn_tensor *t;
    kn_tensor_new(dt, rank, dims, &t);
    for (int64_t i = 0; i < kn_tensor_count(t); i++)
        kn_tensor_set_f64(t, i, vals ? vals[i] : lo + (hi - lo) * (rnd(&b->seed) + 1) / 2);
    int v = kn_graph_add_value(b->g, name);
    b->g->values[v].constant = t;
    kn_model_own_tensor(b->m, t);
    kn_type_set_tensor(&b->g->values[v].type, dt, rank, dims);
    return v;
}

static int mb_node(mb *b, const char *op, const int *in, int nin, const char *out_name) {
    int out = kn_graph_add_value(b->g, out_name);
    kn_graph_add_node(b->g, NULL, op, "", in, nin, &out, 1);
    return out;
}

static kn_attr *mb_attr(mb *b, const char *name, kn_attr_type type) {
    kn_node *n = &b->g->nodes[b->g->n_nodes - 1]; /* the last node added */
    kn_attr *a = kn_arena_alloc(&b->m->arena, sizeof(kn_attr) * (size_t)(n->n_attrs + 1));
    if (n->n_attrs) memcpy(a, n->attrs, sizeof(kn_attr) * (size_t)n->n_attrs);
    n->attrs = a;
    kn_attr *r = &a[n->n_attrs++];
    r->name = kn_arena_strdup(&b->m->arena, name);
    r->type = type;
    return r;
}
static void mb_int(mb *b, const char *name, int64_t v) { mb_attr(b, name, KN_ATTR_INT)->i = v; }
static void mb_float(mb *b, const char *name, float v) { mb_attr(b, name, KN_ATTR_FLOAT)->f = v; }
static void mb_str(mb *b, const char *name, const char *v) {
    kn_attr *a = mb_attr(b, name, KN_ATTR_STRING);
    a->s = kn_arena_strdup(&b->m->arena, v);
    a->s_len = strlen(v);
}

/* A serialised model (returned by value so a call can build it inside another's arguments). */
typedef struct blob {
    unsigned char *data;
    size_t size;
} blob;

static blob mb_finish(mb *b, int out) {
    size_t sz = 0;
    b->g->outputs = realloc(b->g->outputs, sizeof(int) * (size_t)(b->g->n_outputs + 1));
    b->g->outputs[b->g->n_outputs++] = out;
    b->g->values[out].is_graph_output = true;
    unsigned char *data = NULL;
    kn_graph_recount(b->g);
    kiln_status st = kn_onnx_write_memory(b->m, &data, &sz);
    CHECK_MSG(st == KILN_OK, "writing the test model: %s", kiln_last_error());
    kn_model_free(b->m);
    b->m = NULL;
    return (blob){data, sz};
}

/* ------------------------------------------------------------------ running and comparing */

static kn_tensor *run_on(const unsigned char *data, size_t size, const char *provider, kn_tensor *x) {
    kiln_session_options *o;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, 0);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_append_provider(o, provider, NULL, NULL, 0); /* cuda alone: no CPU fallback */
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(data, size, NULL, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "session (%s): %s", provider, kiln_last_error());
    if (!s) return NULL;
    kiln_value_info info;
    kiln_session_input_info(s, 0, &info);
    const char *names[1] = {info.name};
    kn_tensor *ins[1] = {x}, *out[1] = {NULL};
    st = kiln_session_run(s, names, ins, 1, NULL, 1, out);
    CHECK_MSG(st == KILN_OK, "run (%s): %s", provider, kiln_last_error());
    kiln_session_destroy(s);
    return out[0];
}

/* The model on CUDA against the CPU: same type and shape, values within rtol/atol. */
static void compare(blob model_blob, int rank, const int64_t *dims, double rtol, double atol,
                    const char *what) {
    unsigned char *model = model_blob.data;
    size_t size = model_blob.size;
    kn_tensor *x;
    kn_tensor_new(KILN_DTYPE_FLOAT, rank, dims, &x);
    uint32_t seed = 99;
    for (int64_t i = 0; i < kn_tensor_count(x); i++) ((float *)x->data)[i] = 2 * rnd(&seed);
    kn_tensor *want = run_on(model, size, "cpu", x), *got = run_on(model, size, "cuda", x);
    if (want && got) {
        CHECK_MSG(got->dtype == want->dtype && got->rank == want->rank &&
                      kn_tensor_count(got) == kn_tensor_count(want),
                  "%s: CUDA gives %s of %lld elements, the CPU %s of %lld", what, kiln_dtype_name(got->dtype),
                  (long long)kn_tensor_count(got), kiln_dtype_name(want->dtype), (long long)kn_tensor_count(want));
        if (got->dtype == want->dtype && kn_tensor_count(got) == kn_tensor_count(want))
            for (int64_t i = 0; i < kn_tensor_count(want); i++) {
                double g = kn_tensor_get_f64(got, i), w = kn_tensor_get_f64(want, i);
                if (!(fabs(g - w) <= atol + rtol * fabs(w))) {
                    kn_unit_fail(__FILE__, __LINE__, "%s: element %lld is %.9g on CUDA, %.9g on the CPU", what,
                                 (long long)i, g, w);
                    break;
                }
            }
    }
    kn_tensor_free(want);
    kn_tensor_free(got);
    kn_tensor_free(x);
    free(model);
}

/* ------------------------------------------------------------------ Resize */

static blob resize_model(const int64_t *xd, const double *scales, const double *roi, const char *mode,
                                   const char *coord, bool antialias, bool exclude) {
    mb b;
    mb_init(&b, 19);
    int x = mb_input(&b, 4, xd);
    int64_t four = 4, eight = 8;
    int in[3] = {x, roi ? mb_const(&b, "roi", KILN_DTYPE_FLOAT, 1, &eight, roi, 0, 0) : -1,
                 mb_const(&b, "scales", KILN_DTYPE_FLOAT, 1, &four, scales, 0, 0)};
    int y = mb_node(&b, "Resize", in, 3, "Y");
    mb_str(&b, "mode", mode);
    mb_str(&b, "coordinate_transformation_mode", coord);
    if (antialias) mb_int(&b, "antialias", 1);
    if (exclude) mb_int(&b, "exclude_outside", 1);
    if (!strcmp(mode, "cubic")) mb_float(&b, "cubic_coeff_a", -0.5f);
    if (roi) mb_float(&b, "extrapolation_value", 3.5f);
    return mb_finish(&b, y);
}

KN_TEST(cuda_image_resize_modes) {
    NEED_GPU();
    int64_t xd[4] = {2, 3, 9, 13};
    const double up[4] = {1, 1, 2.5, 1.75}, down[4] = {1, 1, 0.45, 0.6};
    const double roi[8] = {0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3};
    compare(resize_model(xd, up, NULL, "nearest", "asymmetric", false, false), 4, xd, 0, 0,
            "Resize nearest asymmetric upsample");
    compare(resize_model(xd, down, NULL, "nearest", "half_pixel", false, false), 4, xd, 0, 0,
            "Resize nearest half_pixel downsample");
    compare(resize_model(xd, up, NULL, "linear", "align_corners", false, false), 4, xd, 1e-5, 1e-6,
            "Resize linear align_corners");
    compare(resize_model(xd, down, NULL, "linear", "half_pixel", true, false), 4, xd, 1e-5, 1e-6,
            "Resize linear antialias downsample");
    compare(resize_model(xd, down, NULL, "cubic", "half_pixel", true, true), 4, xd, 1e-5, 1e-6,
            "Resize cubic antialias exclude_outside");
    compare(resize_model(xd, up, NULL, "cubic", "pytorch_half_pixel", false, true), 4, xd, 1e-5, 1e-6,
            "Resize cubic exclude_outside upsample");
    compare(resize_model(xd, up, roi, "linear", "tf_crop_and_resize", false, false), 4, xd, 1e-5, 1e-6,
            "Resize linear tf_crop_and_resize with extrapolation");
    compare(resize_model(xd, up, roi, "nearest", "tf_crop_and_resize", false, false), 4, xd, 0, 0,
            "Resize nearest tf_crop_and_resize with extrapolation");
}

/* ------------------------------------------------------------------ GridSample */

static blob gridsample_model(int rank, const int64_t *xd, const int64_t *gd, const char *mode,
                                       const char *pad, int align) {
    mb b;
    mb_init(&b, 20);
    int x = mb_input(&b, rank, xd);
    int in[2] = {x, mb_const(&b, "grid", KILN_DTYPE_FLOAT, rank, gd, NULL, -1.3, 1.3)};
    int y = mb_node(&b, "GridSample", in, 2, "Y");
    mb_str(&b, "mode", mode);
    mb_str(&b, "padding_mode", pad);
    mb_int(&b, "align_corners", align);
    return mb_finish(&b, y);
}

KN_TEST(cuda_image_gridsample) {
    NEED_GPU();
    int64_t xd[4] = {2, 3, 7, 9}, gd[4] = {2, 5, 6, 2};
    static const char *modes[3] = {"nearest", "linear", "cubic"}, *pads[3] = {"zeros", "border", "reflection"};
    for (int m = 0; m < 3; m++)
        for (int p = 0; p < 3; p++)
            for (int a = 0; a < 2; a++) {
                        char what[128];
                snprintf(what, sizeof what, "GridSample 2-D %s %s align_corners=%d", modes[m], pads[p], a);
                compare(gridsample_model(4, xd, gd, modes[m], pads[p], a), 4, xd, 1e-5, 1e-6, what);
            }
    int64_t xd3[5] = {1, 2, 4, 5, 6}, gd3[5] = {1, 3, 2, 4, 3};
    for (int m = 0; m < 2; m++) {
        char what[128];
        snprintf(what, sizeof what, "GridSample 3-D %s", modes[m]);
        compare(gridsample_model(5, xd3, gd3, modes[m], "border", 0), 5, xd3, 1e-5, 1e-6, what);
    }
}

/* ------------------------------------------------------------------ QuantizeLinear / DequantizeLinear */

/* X -> QuantizeLinear (to `qt`) -> DequantizeLinear (or the quantised values when !dq). */
static blob qdq_model(const int64_t *xd, int axis, int64_t block, kiln_dtype qt, bool dq) {
    mb b;
    mb_init(&b, 21);
    int x = mb_input(&b, 3, xd);
    int64_t sd[3] = {xd[0], xd[1], xd[2]};
    int srank = 3;
    if (block) sd[axis] = (xd[axis] + block - 1) / block;
    else {
        srank = 1;
        sd[0] = xd[axis];
    }
    int s = mb_const(&b, "scale", KILN_DTYPE_FLOAT, srank, sd, NULL, 0.01, 0.05);
    double zlo = qt == KILN_DTYPE_INT4 ? -3 : qt == KILN_DTYPE_UINT8 ? 100 : -20;
    int z = mb_const(&b, "zp", qt, srank, sd, NULL, zlo, zlo + 6);
    int in[3] = {x, s, z};
    int q = mb_node(&b, "QuantizeLinear", in, 3, "Q");
    mb_int(&b, "axis", axis);
    if (block) mb_int(&b, "block_size", block);
    int out = q;
    if (dq) {
        in[0] = q;
        out = mb_node(&b, "DequantizeLinear", in, 3, "Y");
        mb_int(&b, "axis", axis);
        if (block) mb_int(&b, "block_size", block);
    }
    return mb_finish(&b, out);
}

KN_TEST(cuda_quant_per_axis_and_blocked) {
    NEED_GPU();
    int64_t xd[3] = {3, 8, 10};
    static const kiln_dtype types[4] = {KILN_DTYPE_INT8, KILN_DTYPE_UINT8, KILN_DTYPE_INT16, KILN_DTYPE_INT4};
    for (int t = 0; t < 4; t++)
        for (int dq = 0; dq < 2; dq++) {
                char what[128];
            snprintf(what, sizeof what, "QuantizeLinear%s per axis 1 to %s", dq ? " + DequantizeLinear" : "",
                     kiln_dtype_name(types[t]));
            compare(qdq_model(xd, 1, 0, types[t], dq), 3, xd, 1e-6, 1e-7, what);
            snprintf(what, sizeof what, "QuantizeLinear%s blocked (axis 2, block 4) to %s",
                     dq ? " + DequantizeLinear" : "", kiln_dtype_name(types[t]));
            compare(qdq_model(xd, 2, 4, types[t], dq), 3, xd, 1e-6, 1e-7, what);
        }
}

/* ------------------------------------------------------------------ Einsum */

static blob einsum_model(const char *eq, const int64_t *xd, int xr, const int64_t *wd, int wr) {
    mb b;
    mb_init(&b, 12);
    int x = mb_input(&b, xr, xd);
    int in[2] = {x, wr ? mb_const(&b, "W", KILN_DTYPE_FLOAT, wr, wd, NULL, -1, 1) : -1};
    int y = mb_node(&b, "Einsum", in, wr ? 2 : 1, "Y");
    mb_str(&b, "equation", eq);
    return mb_finish(&b, y);
}

KN_TEST(cuda_einsum) {
    NEED_GPU();
    int64_t xd[4] = {2, 5, 3, 4}, wd[3] = {5, 4, 6};
    compare(einsum_model("bnhd,ndk->bhnk", xd, 4, wd, 3), 4, xd, 1e-4, 1e-5,
            "Einsum bnhd,ndk->bhnk (batched GEMM)");
    int64_t sd[3] = {3, 4, 4};
    compare(einsum_model("bii->bi", sd, 3, NULL, 0), 3, sd, 1e-6, 1e-7, "Einsum bii->bi (diagonal)");
    int64_t ad[3] = {3, 4, 5}, bd[2] = {1, 5};
    compare(einsum_model("...ij,...j->...i", ad, 3, bd, 2), 3, ad, 1e-5, 1e-6,
            "Einsum ...ij,...j->...i (broadcast, direct sum)");
}

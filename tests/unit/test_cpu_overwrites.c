/* CPU kernels marked KN_KERNEL_OVERWRITES (the executor no longer zeroes their outputs first):
 * Trilu, CumSum/CumProd, DepthToSpace, SpaceToDepth, TopK, LpNormalization,
 * MeanVarianceNormalization, LRN, GatherElements, GatherND, ScatterElements, ScatterND, OneHot,
 * ReverseSequence, Compress, TensorScatter, EyeLike, ConstantOfShape, Range and Hardmax, on every path of each kernel (float rows and the general
 * loops, float16 widened copies, the TopK column and row forms, block sizes and modes). Each
 * one-node model runs with kiln_session_run_into into caller tensors filled beforehand with 0x00
 * and then with 0xA5 bytes (outputs written in place, not zeroed by the executor): an element the
 * kernel leaves unwritten keeps the fill, so the two runs differ there. Both must also equal
 * kiln_session_run's outputs, bit for bit. 1 and 2 threads. Also LRN's beta 3/4 path against its float
 * steps written out, bit for bit. */
#include "ir/tensor.h"
#include "test_model_builder.h"
#include "unit.h"

#include <math.h>
#include <stdlib.h>

/* a constant input: int64 values (iv), or floats from a fixed generator (iv NULL) */
typedef struct ow_const {
    kiln_dtype dt;
    int rank;
    int64_t dims[4];
    const int64_t *iv;
} ow_const;

typedef struct ow_case {
    const char *what, *op;
    int opset;
    kiln_dtype dt;
    int rank;
    int64_t dims[4];
    int64_t konst; /* the second input, an int64 (TopK's K, CumSum's axis, Trilu's k), or: */
    int konst_rank; /* -1: no second input */
    tmb_attr_spec attrs[3];
    int n_attrs, n_out;
    ow_const more[2]; /* further constant inputs (rank 0 with dt 0: none) */
    const int64_t *x_i64; /* x's values where they matter (a shape, a start) */
} ow_case;

static kn_tensor *ow_const_tensor(const ow_const *k) {
    kn_tensor *t = NULL;
    kn_tensor_new(k->dt, k->rank, k->dims, &t);
    const int64_t n = kn_tensor_count(t);
    uint32_t seed = 23;
    for (int64_t i = 0; i < n; i++) {
        if (k->iv && k->dt == KILN_DTYPE_BOOL) ((uint8_t *)t->data)[i] = k->iv[i] != 0;
        else if (k->iv) ((int64_t *)t->data)[i] = k->iv[i];
        else ((float *)t->data)[i] = tmb_rand(&seed) * 2.0f;
    }
    return t;
}

/* x's elements: values from a fixed generator in each type (some ties among the integers) */
static void *ow_input(kiln_dtype dt, int64_t n, uint32_t seed) {
    void *p = malloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) {
        const float v = tmb_rand(&seed) * 3.0f;
        switch (dt) {
        case KILN_DTYPE_FLOAT: ((float *)p)[i] = v; break;
        case KILN_DTYPE_DOUBLE: ((double *)p)[i] = (double)v * 1.25; break;
        case KILN_DTYPE_FLOAT16: ((uint16_t *)p)[i] = kn_f32_to_f16(v); break;
        case KILN_DTYPE_INT64: ((int64_t *)p)[i] = (int64_t)(v * 4); break;
        case KILN_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)(v * 4); break;
        case KILN_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)(i * 7 + 1); break;
        default: memset((char *)p + i * 8, 0, 8);
        }
    }
    return p;
}

static void ow_check(const ow_case *c) {
    tmb b;
    tmb_init(&b, c->opset);
    int in[4];
    in[0] = tmb_input(&b, "x", c->dt, c->rank, c->dims, NULL);
    int nin = 1;
    if (c->konst_rank >= 0) in[nin++] = tmb_const_i64(&b, "k", &c->konst, 1, c->konst_rank == 0);
    for (int m = 0; m < 2 && c->more[m].dt; m++) {
        char nm[8];
        snprintf(nm, sizeof nm, "m%d", m);
        in[nin++] = tmb_const_tensor(&b, nm, ow_const_tensor(&c->more[m]));
    }
    tmb_attrs(&b, tmb_node_outputs(&b, c->op, in, nin, c->n_out), c->attrs, c->n_attrs);
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);
    CHECK_MSG(data != NULL, "%s: model", c->what);
    if (!data) return;
    int64_t n = 1;
    for (int d = 0; d < c->rank; d++) n *= c->dims[d];
    void *xv = ow_input(c->dt, n, 17u + (uint32_t)c->rank);
    if (c->x_i64) memcpy(xv, c->x_i64, sizeof(int64_t) * (size_t)n);
    for (int threads = 1; threads <= 2; threads++) {
        kiln_session *s = tmb_session(data, size, threads, 3);
        if (!s) break;
        kiln_tensor *x = tmb_tensor_of(c->dt, c->dims, c->rank, xv);
        const char *names[1] = {"x"};
        kiln_tensor *ref[2] = {NULL, NULL};
        CHECK_STATUS(kiln_session_run(s, names, &x, 1, NULL, c->n_out, ref), KILN_OK);
        void *got[2][2] = {{NULL, NULL}, {NULL, NULL}};
        for (int fill = 0; fill < 2 && ref[0]; fill++) {
            kiln_tensor *into[2] = {NULL, NULL};
            for (int o = 0; o < c->n_out; o++) {
                const size_t bytes = kiln_tensor_bytes(ref[o]);
                got[fill][o] = malloc(bytes ? bytes : 1);
                memset(got[fill][o], fill ? 0xA5 : 0x00, bytes);
                CHECK_STATUS(kiln_tensor_wrap(kiln_tensor_dtype(ref[o]), kiln_tensor_dims(ref[o]),
                                              kiln_tensor_rank(ref[o]), got[fill][o], bytes, &into[o]),
                             KILN_OK);
            }
            CHECK_STATUS(kiln_session_run_into(s, names, &x, 1, NULL, c->n_out, into), KILN_OK);
            for (int o = 0; o < c->n_out; o++) kiln_tensor_destroy(into[o]);
        }
        for (int o = 0; o < c->n_out && ref[0]; o++) {
            const size_t bytes = kiln_tensor_bytes(ref[o]);
            const unsigned char *r = kiln_tensor_data(ref[o]), *g0 = got[0][o], *g1 = got[1][o];
            size_t unwritten = 0, off = 0;
            for (size_t i = 0; i < bytes; i++) unwritten += g0[i] != g1[i], off += g0[i] != r[i];
            CHECK_MSG(unwritten == 0 && off == 0,
                      "%s, %d threads, output %d: %zu of %zu bytes keep the caller's fill (unwritten), %zu differ "
                      "from kiln_session_run's", c->what, threads, o, unwritten, bytes, off);
        }
        for (int o = 0; o < 2; o++) {
            kiln_tensor_destroy(ref[o]);
            free(got[0][o]);
            free(got[1][o]);
        }
        kiln_tensor_destroy(x);
        kiln_session_destroy(s);
    }
    free(xv);
    free(data);
}

#define A_INT(n, v) {.name = (n), .i = (v)}
#define A_F(n, v) {.name = (n), .is_float = true, .f = (v)}

KN_TEST(cpu_overwrites_every_output_element) {
    static const int64_t axes1[1] = {1}, axes023[3] = {0, 2, 3};
    static const int64_t ge_idx[24] = {0, 4, -1, 2, 3, 3, 1, -5, 2, 0, 0, 1, 4, 4, 4, 4, -2, 1, 0, 3, 2, 2, 1, 0};
    static const int64_t gnd_rows[4] = {2, 1, 0, -1}, gnd_batch[3] = {3, 0, -2};
    static const int64_t gnd_elems[12] = {0, 0, 0, 2, 3, 4, -1, 1, 2, 1, 1, -5};
    static const int64_t se_idx[10] = {3, 0, 1, 1, 2, 0, 0, 3, -1, 2}, snd_idx[2] = {1, 3};
    static const int64_t oh_idx[6] = {0, 4, -1, 7, 2, -6}, rs_lens[3] = {4, 1, 2}, cos_shape[3] = {2, 3, 4};
    static const int64_t cp_cond[5] = {1, 0, 1, 1, 0}, cp_flat[9] = {0, 1, 1, 0, 0, 1, 0, 1, 1};
    static const int64_t ts_pos[2] = {1, 3};
    static const int64_t range_start[1] = {2}, range_limit[1] = {17}, range_delta[1] = {3};
    const ow_case cases[] = {
        /* Trilu: the one-pass rows, k inside and past the matrix */
        {"Trilu lower k -1 f32", "Trilu", 14, KILN_DTYPE_FLOAT, 3, {2, 5, 9}, -1, 0, {A_INT("upper", 0)}, 1, 1},
        {"Trilu upper k 2 i64", "Trilu", 14, KILN_DTYPE_INT64, 3, {3, 7, 4}, 2, 0, {A_INT("upper", 1)}, 1, 1},
        {"Trilu upper k 9 u8", "Trilu", 14, KILN_DTYPE_UINT8, 2, {6, 37}, 40, 0, {A_INT("upper", 1)}, 1, 1},
        /* CumSum / CumProd: typed loops (exclusive, reverse), float16 rows and columns */
        {"CumSum axis 1 excl rev f32", "CumSum", 14, KILN_DTYPE_FLOAT, 3, {3, 4, 5}, 1, 0,
         {A_INT("exclusive", 1), A_INT("reverse", 1)}, 2, 1},
        {"CumSum last axis f16", "CumSum", 14, KILN_DTYPE_FLOAT16, 3, {3, 4, 5}, 2, 0, {{0}}, 0, 1},
        {"CumSum axis 0 excl f16", "CumSum", 14, KILN_DTYPE_FLOAT16, 3, {3, 4, 5}, 0, 0, {A_INT("exclusive", 1)}, 1, 1},
        {"CumSum axis -1 i32", "CumSum", 14, KILN_DTYPE_INT32, 2, {6, 9}, -1, 0, {{0}}, 0, 1},
        {"CumSum axis 0 f64", "CumSum", 14, KILN_DTYPE_DOUBLE, 1, {11}, 0, 0, {{0}}, 0, 1},
        /* DepthToSpace / SpaceToDepth: the row kernel (2, 3 blocks; 1-8 bytes) */
        {"DepthToSpace b2 DCR f32", "DepthToSpace", 13, KILN_DTYPE_FLOAT, 4, {2, 8, 3, 5}, 0, -1,
         {A_INT("blocksize", 2)}, 1, 1},
        {"DepthToSpace b2 CRD u8", "DepthToSpace", 13, KILN_DTYPE_UINT8, 4, {1, 8, 3, 5}, 0, -1,
         {A_INT("blocksize", 2), {.name = "mode", .s = "CRD"}}, 2, 1},
        {"DepthToSpace b3 i64", "DepthToSpace", 13, KILN_DTYPE_INT64, 4, {1, 18, 2, 3}, 0, -1,
         {A_INT("blocksize", 3)}, 1, 1},
        {"SpaceToDepth b2 f32", "SpaceToDepth", 13, KILN_DTYPE_FLOAT, 4, {2, 3, 6, 4}, 0, -1,
         {A_INT("blocksize", 2)}, 1, 1},
        {"SpaceToDepth b3 f16", "SpaceToDepth", 13, KILN_DTYPE_FLOAT16, 4, {1, 2, 6, 9}, 0, -1,
         {A_INT("blocksize", 3)}, 1, 1},
        /* TopK: float columns in vectors (k <= 8, sorted), keyed rows, small k kept sorted (int64),
         * the whole-row selection, columns gathered for the key heap; values and indices */
        {"TopK axis 1 k3 columns f32", "TopK", 11, KILN_DTYPE_FLOAT, 3, {2, 20, 11}, 3, 1, {A_INT("axis", 1)}, 1, 2},
        {"TopK last axis k4 f32", "TopK", 11, KILN_DTYPE_FLOAT, 2, {3, 50}, 4, 1, {A_INT("sorted", 0)}, 1, 2},
        {"TopK last axis k20 f32", "TopK", 11, KILN_DTYPE_FLOAT, 2, {3, 50}, 20, 1, {A_INT("largest", 0)}, 1, 2},
        {"TopK last axis k3 i64", "TopK", 11, KILN_DTYPE_INT64, 2, {3, 50}, 3, 1, {{0}}, 0, 2},
        {"TopK axis 1 k4 unsorted f32", "TopK", 11, KILN_DTYPE_FLOAT, 3, {2, 20, 9}, 4, 1,
         {A_INT("axis", 1), A_INT("sorted", 0)}, 2, 2},
        {"TopK axis 0 k2 f64", "TopK", 11, KILN_DTYPE_DOUBLE, 2, {7, 5}, 2, 1, {A_INT("axis", 0)}, 1, 2},
        /* LpNormalization: float rows (p 1, 2), float16 rows, the general loop (an inner axis) */
        {"LpNormalization p2 rows f32", "LpNormalization", 1, KILN_DTYPE_FLOAT, 2, {3, 40}, 0, -1, {A_INT("p", 2)}, 1, 1},
        {"LpNormalization p1 rows f32", "LpNormalization", 1, KILN_DTYPE_FLOAT, 2, {3, 40}, 0, -1, {A_INT("p", 1)}, 1, 1},
        {"LpNormalization p2 rows f16", "LpNormalization", 1, KILN_DTYPE_FLOAT16, 2, {5, 33}, 0, -1, {{0}}, 0, 1},
        {"LpNormalization axis 1 f32", "LpNormalization", 1, KILN_DTYPE_FLOAT, 3, {3, 4, 5}, 0, -1,
         {A_INT("axis", 1)}, 1, 1},
        /* MeanVarianceNormalization: float runs, float16, the double loop */
        {"MeanVarianceNormalization f32", "MeanVarianceNormalization", 13, KILN_DTYPE_FLOAT, 4, {2, 3, 4, 5}, 0, -1,
         {{0}}, 0, 1},
        {"MeanVarianceNormalization axes 1 f16", "MeanVarianceNormalization", 13, KILN_DTYPE_FLOAT16, 4, {2, 3, 4, 5},
         0, -1, {{.name = "axes", .ints = axes1, .n_ints = 1}}, 1, 1},
        {"MeanVarianceNormalization f64", "MeanVarianceNormalization", 13, KILN_DTYPE_DOUBLE, 4, {2, 3, 4, 5}, 0, -1,
         {{.name = "axes", .ints = axes023, .n_ints = 3}}, 1, 1},
        /* LRN: float blocks (beta 3/4 and another), float16, the double loop; planes over 512 */
        {"LRN size 5 f32", "LRN", 13, KILN_DTYPE_FLOAT, 4, {2, 7, 23, 25}, 0, -1, {A_INT("size", 5)}, 1, 1},
        {"LRN size 3 beta 0.5 f32", "LRN", 13, KILN_DTYPE_FLOAT, 4, {1, 4, 3, 7}, 0, -1,
         {A_INT("size", 3), A_F("beta", 0.5f)}, 2, 1},
        {"LRN size 4 f16", "LRN", 13, KILN_DTYPE_FLOAT16, 4, {1, 6, 5, 5}, 0, -1, {A_INT("size", 4)}, 1, 1},
        {"LRN size 2 f64", "LRN", 13, KILN_DTYPE_DOUBLE, 3, {2, 5, 9}, 0, -1, {A_INT("size", 2)}, 1, 1},
        /* indexing: gathers (elements; rows and single elements by depth, batch_dims), scatters
         * (elements with and without a reduction, rows), OneHot, ReverseSequence */
        {"GatherElements axis 1 f32", "GatherElements", 13, KILN_DTYPE_FLOAT, 3, {3, 5, 4}, 0, -1, {A_INT("axis", 1)},
         1, 1, {{KILN_DTYPE_INT64, 3, {3, 2, 4}, ge_idx}}},
        {"GatherND rows f32", "GatherND", 13, KILN_DTYPE_FLOAT, 3, {3, 4, 5}, 0, -1, {{0}}, 0, 1,
         {{KILN_DTYPE_INT64, 2, {2, 2}, gnd_rows}}},
        {"GatherND batch_dims 1 f32", "GatherND", 13, KILN_DTYPE_FLOAT, 3, {3, 4, 5}, 0, -1, {A_INT("batch_dims", 1)},
         1, 1, {{KILN_DTYPE_INT64, 2, {3, 1}, gnd_batch}}},
        {"GatherND elements i64", "GatherND", 13, KILN_DTYPE_INT64, 3, {3, 4, 5}, 0, -1, {{0}}, 0, 1,
         {{KILN_DTYPE_INT64, 2, {4, 3}, gnd_elems}}},
        {"ScatterElements axis 0 f32", "ScatterElements", 16, KILN_DTYPE_FLOAT, 2, {4, 5}, 0, -1, {{0}}, 0, 1,
         {{KILN_DTYPE_INT64, 2, {2, 5}, se_idx}, {KILN_DTYPE_FLOAT, 2, {2, 5}, NULL}}},
        {"ScatterElements add f32", "ScatterElements", 16, KILN_DTYPE_FLOAT, 2, {4, 5}, 0, -1,
         {{.name = "reduction", .s = "add"}}, 1, 1, {{KILN_DTYPE_INT64, 2, {2, 5}, se_idx}, {KILN_DTYPE_FLOAT, 2, {2, 5}, NULL}}},
        {"ScatterND rows f32", "ScatterND", 16, KILN_DTYPE_FLOAT, 3, {4, 5, 6}, 0, -1, {{0}}, 0, 1,
         {{KILN_DTYPE_INT64, 2, {2, 1}, snd_idx}, {KILN_DTYPE_FLOAT, 3, {2, 5, 6}, NULL}}},
        {"OneHot depth 5 f32", "OneHot", 11, KILN_DTYPE_INT64, 2, {2, 3}, 5, 0, {{0}}, 0, 1,
         {{KILN_DTYPE_FLOAT, 1, {2}, NULL}}, oh_idx},
        {"ReverseSequence f32", "ReverseSequence", 10, KILN_DTYPE_FLOAT, 3, {4, 3, 2}, 0, -1,
         {A_INT("time_axis", 0), A_INT("batch_axis", 1)}, 2, 1, {{KILN_DTYPE_INT64, 1, {3}, rs_lens}}},
        {"Compress axis 1 f32 (rows)", "Compress", 11, KILN_DTYPE_FLOAT, 3, {2, 5, 3}, 0, -1, {A_INT("axis", 1)}, 1, 1,
         {{KILN_DTYPE_BOOL, 1, {5}, cp_cond}}},
        {"Compress last axis f32 (elements)", "Compress", 11, KILN_DTYPE_FLOAT, 2, {3, 5}, 0, -1, {A_INT("axis", -1)},
         1, 1, {{KILN_DTYPE_BOOL, 1, {5}, cp_cond}}},
        {"Compress flattened u8", "Compress", 11, KILN_DTYPE_UINT8, 2, {3, 4}, 0, -1, {{0}}, 0, 1,
         {{KILN_DTYPE_BOOL, 1, {9}, cp_flat}}},
        {"TensorScatter f32", "TensorScatter", 24, KILN_DTYPE_FLOAT, 3, {2, 5, 3}, 0, -1, {{0}}, 0, 1,
         {{KILN_DTYPE_FLOAT, 3, {2, 2, 3}, NULL}, {KILN_DTYPE_INT64, 1, {2}, ts_pos}}},
        /* generators: EyeLike, ConstantOfShape, Range; Hardmax */
        {"EyeLike k 1 f32", "EyeLike", 9, KILN_DTYPE_FLOAT, 2, {5, 7}, 0, -1, {A_INT("k", 1)}, 1, 1},
        {"ConstantOfShape 2x3x4", "ConstantOfShape", 9, KILN_DTYPE_INT64, 1, {3}, 0, -1, {{0}}, 0, 1, {{0}}, cos_shape},
        {"Range 2..17 by 3 i64", "Range", 11, KILN_DTYPE_INT64, 0, {0}, 0, -1, {{0}}, 0, 1,
         {{KILN_DTYPE_INT64, 0, {0}, range_limit}, {KILN_DTYPE_INT64, 0, {0}, range_delta}}, range_start},
        {"Hardmax f32", "Hardmax", 13, KILN_DTYPE_FLOAT, 2, {3, 7}, 0, -1, {{0}}, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) ow_check(&cases[i]);
}

/* LRN with beta 3/4 (the sums of squares in registers, the power as t sqrt(t)) against the same
 * float steps written out here: 0 + x_c0^2 + ... + x_c1^2 in ascending channels, t = sqrt(1 /
 * (bias + alpha / size * s)), y = x (t sqrt(t)), bit for bit (each step is correctly rounded);
 * planes of 5 (no vector), 575 (a block of 512 and a tail of 63, itself 7 past the vectors),
 * windows of 1 to past the channels, 1 and 2 threads */
KN_TEST(cpu_lrn_three_quarters_exact) {
    const int64_t shapes[2][4] = {{2, 3, 1, 5}, {1, 7, 23, 25}};
    const int64_t sizes[4] = {1, 3, 5, 9};
    const float alpha = 0.3f, bias = 1.5f;
    for (int sh = 0; sh < 2; sh++) {
        const int64_t *dims = shapes[sh], N = dims[0], C = dims[1], inner = dims[2] * dims[3], n = N * C * inner;
        float *x = malloc(sizeof(float) * (size_t)n), *want = malloc(sizeof(float) * (size_t)n);
        uint32_t seed = 11;
        for (int64_t i = 0; i < n; i++) x[i] = tmb_rand(&seed) * 4.0f;
        for (int si = 0; si < 4; si++) {
            const int64_t size = sizes[si], lo = (size - 1) / 2, hi = size - 1 - lo;
            const float an = (float)((double)alpha / (double)size);
            for (int64_t e = 0; e < n; e++) {
                const int64_t img = e / (C * inner), ch = e / inner % C, i = e % inner;
                const int64_t c0 = ch - lo < 0 ? 0 : ch - lo, c1 = ch + hi >= C ? C - 1 : ch + hi;
                float s = 0;
                for (int64_t k = c0; k <= c1; k++) {
                    const float v = x[(img * C + k) * inner + i];
                    s += v * v;
                }
                const float t = sqrtf(1.0f / (bias + an * s));
                want[e] = x[e] * (t * sqrtf(t));
            }
            for (int threads = 1; threads <= 2; threads++) {
                tmb b;
                tmb_init(&b, 13);
                int in = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, dims, NULL), out = tmb_value(&b, "y");
                int node = tmb_node(&b, "LRN", &in, 1, out);
                tmb_int(&b, node, "size", size);
                tmb_attr(&b, node, "alpha", KN_ATTR_FLOAT)->f = alpha;
                tmb_attr(&b, node, "beta", KN_ATTR_FLOAT)->f = 0.75f;
                tmb_attr(&b, node, "bias", KN_ATTR_FLOAT)->f = bias;
                tmb_output(&b, out);
                size_t bytes;
                unsigned char *data = tmb_finish(&b, &bytes);
                kiln_session *s = data ? tmb_session(data, bytes, threads, 3) : NULL;
                free(data);
                if (!s) continue;
                kiln_tensor *xt = NULL, *y = NULL;
                kiln_tensor_create(KILN_DTYPE_FLOAT, dims, 4, &xt);
                memcpy(kiln_tensor_data(xt), x, sizeof(float) * (size_t)n);
                const char *names[1] = {"x"};
                CHECK_STATUS(kiln_session_run(s, names, &xt, 1, NULL, 1, &y), KILN_OK);
                if (y) {
                    const float *g = kiln_tensor_data(y);
                    int64_t bad = 0;
                    for (int64_t i = 0; i < n; i++) bad += memcmp(&g[i], &want[i], sizeof(float)) != 0;
                    CHECK_MSG(bad == 0, "LRN shape %d size %lld, %d threads: %lld of %lld outputs differ from the float steps",
                              sh, (long long)size, threads, (long long)bad, (long long)n);
                }
                kiln_tensor_destroy(y);
                kiln_tensor_destroy(xt);
                kiln_session_destroy(s);
            }
        }
        free(x);
        free(want);
    }
}

/* GatherElements by rows of the indices' last axis (typed loops, the indices checked in the same
 * pass) against the definition: every axis of rank 1-3 shapes, negative indices, int64 and int32
 * indices, 1-, 2-, 4- and 8-byte elements, 1 and 2 threads; an index out of range (first or last)
 * fails the run with KILN_ERR_INVALID_ARGUMENT naming it */
KN_TEST(cpu_gather_elements_rows) {
    const struct {
        int rank;
        int64_t xd[3], id[3];
    } shapes[4] = {{1, {37}, {50}}, {2, {6, 9}, {4, 9}}, {2, {6, 9}, {6, 3}}, {3, {3, 5, 4}, {2, 7, 3}}};
    const kiln_dtype dts[4] = {KILN_DTYPE_UINT8, KILN_DTYPE_FLOAT16, KILN_DTYPE_FLOAT, KILN_DTYPE_INT64};
    for (int sh = 0; sh < 4; sh++)
        for (int a = 0; a < shapes[sh].rank; a++)
            for (int t = 0; t < 4; t++)
                for (int i32 = 0; i32 < 2; i32++)
                    for (int badi = -1; badi < 2; badi++) {
                        const int r = shapes[sh].rank;
                        int64_t id[3], xs[3], nx = 1, n = 1;
                        for (int k = 0; k < r; k++) id[k] = k == a ? shapes[sh].id[k] : (shapes[sh].id[k] < shapes[sh].xd[k] ? shapes[sh].id[k] : shapes[sh].xd[k]);
                        for (int k = r - 1; k >= 0; k--) xs[k] = nx, nx *= shapes[sh].xd[k];
                        for (int k = 0; k < r; k++) n *= id[k];
                        const int64_t D = shapes[sh].xd[a];
                        const size_t es = kiln_dtype_size(dts[t]);
                        unsigned char *x = malloc(es * (size_t)nx);
                        for (size_t i = 0; i < es * (size_t)nx; i++) x[i] = (unsigned char)(i * 13 + 5);
                        if (dts[t] == KILN_DTYPE_FLOAT16) /* finite halves */
                            for (int64_t i = 0; i < nx; i++) ((uint16_t *)x)[i] = kn_f32_to_f16((float)i);
                        if (dts[t] == KILN_DTYPE_FLOAT)
                            for (int64_t i = 0; i < nx; i++) ((float *)x)[i] = (float)i * 0.5f;
                        kn_tensor *it = NULL;
                        kn_tensor_new(i32 ? KILN_DTYPE_INT32 : KILN_DTYPE_INT64, r, id, &it);
                        uint32_t seed = 7u + (uint32_t)(sh * 16 + a);
                        int64_t *iv = malloc(sizeof(int64_t) * (size_t)n);
                        for (int64_t i = 0; i < n; i++) {
                            int64_t v = (int64_t)((tmb_rand(&seed) + 1) * 0.5f * (float)(2 * D)) - D; /* [-D, D) */
                            if (v >= D) v = D - 1;
                            if (v < -D) v = -D;
                            if (badi >= 0 && i == (badi ? n - 1 : 0)) v = badi ? D : -D - 1;
                            iv[i] = v;
                            if (i32) ((int32_t *)it->data)[i] = (int32_t)v;
                            else ((int64_t *)it->data)[i] = v;
                        }
                        for (int threads = 1; threads <= 2; threads++) {
                            tmb b;
                            tmb_init(&b, 13);
                            int in[2] = {tmb_input(&b, "x", dts[t], r, shapes[sh].xd, NULL), 0}, out = tmb_value(&b, "y");
                            kn_tensor *copy = NULL;
                            kn_tensor_new(it->dtype, it->rank, it->dims, &copy);
                            memcpy(copy->data, it->data, it->nbytes);
                            in[1] = tmb_const_tensor(&b, "i", copy);
                            tmb_int(&b, tmb_node(&b, "GatherElements", in, 2, out), "axis", a);
                            tmb_output(&b, out);
                            size_t bytes;
                            unsigned char *data = tmb_finish(&b, &bytes);
                            kiln_session *s = data ? tmb_session(data, bytes, threads, 3) : NULL;
                            free(data);
                            if (!s) continue;
                            kiln_tensor *xt = NULL, *y = NULL;
                            kiln_tensor_create(dts[t], shapes[sh].xd, r, &xt);
                            memcpy(kiln_tensor_data(xt), x, es * (size_t)nx);
                            const char *names[1] = {"x"};
                            const kiln_status st = kiln_session_run(s, names, &xt, 1, NULL, 1, &y);
                            if (badi >= 0) {
                                CHECK_MSG(st == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "out of range"),
                                          "GatherElements shape %d axis %d: index %s out of range gave %d: %s", sh, a,
                                          badi ? "last" : "first", (int)st, kiln_last_error());
                            } else if (st == KILN_OK) {
                                const unsigned char *g = kiln_tensor_data(y);
                                int64_t bad = 0;
                                for (int64_t e = 0; e < n; e++) {
                                    int64_t rem = e, si = 0;
                                    for (int k = r - 1; k >= 0; k--) {
                                        const int64_t pk = rem % id[k];
                                        rem /= id[k];
                                        si += (k == a ? (iv[e] < 0 ? iv[e] + D : iv[e]) : pk) * xs[k];
                                    }
                                    bad += memcmp(g + (size_t)e * es, x + (size_t)si * es, es) != 0;
                                }
                                CHECK_MSG(bad == 0, "GatherElements shape %d axis %d type %d i32 %d, %d threads: %lld of %lld wrong",
                                          sh, a, t, i32, threads, (long long)bad, (long long)n);
                            } else {
                                CHECK_MSG(false, "GatherElements shape %d axis %d: %s", sh, a, kiln_last_error());
                            }
                            kiln_tensor_destroy(y);
                            kiln_tensor_destroy(xt);
                            kiln_session_destroy(s);
                        }
                        kn_tensor_free(it);
                        free(iv);
                        free(x);
                    }
}

/* One Hardmax (opset 13, the last axis) over x of dims [2] */
static bool oc_run_simple_hardmax(const float *x, const int64_t *dims, kiln_tensor **y) {
    tmb b;
    tmb_init(&b, 13);
    int in = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, dims, NULL), out = tmb_value(&b, "y");
    tmb_node(&b, "Hardmax", &in, 1, out);
    tmb_output(&b, out);
    size_t bytes;
    unsigned char *data = tmb_finish(&b, &bytes);
    kiln_session *s = data ? tmb_session(data, bytes, 1, 3) : NULL;
    free(data);
    if (!s) return false;
    kiln_tensor *xt = NULL;
    kiln_tensor_create(KILN_DTYPE_FLOAT, dims, 2, &xt);
    memcpy(kiln_tensor_data(xt), x, sizeof(float) * (size_t)(dims[0] * dims[1]));
    const char *names[1] = {"x"};
    const kiln_status st = kiln_session_run(s, names, &xt, 1, NULL, 1, y);
    CHECK_STATUS(st, KILN_OK);
    kiln_tensor_destroy(xt);
    kiln_session_destroy(s);
    return st == KILN_OK;
}

/* Hardmax on float rows (the maximum over the numbers, then its first occurrence) against the
 * rule of the double loop: a later element must be greater, a NaN never is, a NaN first keeps
 * index 0; rows of 1-37 and 1000 with ties, -0 and 0, -inf, NaNs first, inside and everywhere */
KN_TEST(cpu_hardmax_rows) {
    const int64_t lens[5] = {1, 7, 8, 37, 1000};
    for (int li = 0; li < 5; li++) {
        const int64_t n = lens[li], rows = 9, dims[2] = {rows, n};
        float *x = malloc(sizeof(float) * (size_t)(rows * n));
        uint32_t seed = 3u + (uint32_t)li;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < n; i++) {
                float v = floorf(tmb_rand(&seed) * 4.0f); /* ties */
                if (r == 1 && i % 5 == 2) v = NAN;
                if (r == 2 && i == 0) v = NAN;
                if (r == 3) v = NAN;
                if (r == 4) v = -INFINITY;
                if (r == 5) v = (i % 2) ? 0.0f : -0.0f;
                if (r == 6 && i % 9 == 1) v = NAN;
                if (r == 6 && i == n - 1) v = 9.0f;
                if (r == 7 && i % 8 == 1) v = 9.0f; /* the maximum in lane 1 of each vector */
                if (r == 7 && i == 1) v = NAN;
                x[r * n + i] = v;
            }
        kiln_tensor *y = NULL;
        if (oc_run_simple_hardmax(x, dims, &y)) {
            const float *g = kiln_tensor_data(y);
            int64_t bad = 0;
            for (int64_t r = 0; r < rows; r++) {
                const float *p = x + r * n;
                int64_t bi = 0;
                for (int64_t i = 1; i < n; i++)
                    if ((double)p[i] > (double)p[bi]) bi = i;
                for (int64_t i = 0; i < n; i++) bad += g[r * n + i] != (i == bi ? 1.0f : 0.0f);
            }
            CHECK_MSG(bad == 0, "Hardmax rows of %lld: %lld outputs differ from the rule", (long long)n, (long long)bad);
        }
        kiln_tensor_destroy(y);
        free(x);
    }
}

/* ScatterElements without a reduction by rows (scatter_rows) against the definition applied in
 * the indices' order (a repeated index keeps its last update): every axis of rank 1-3 shapes,
 * negative and repeated indices, int64 and int32, 1-, 2-, 4- and 8-byte elements; an index out of
 * range (first or last) fails the run with its message */
KN_TEST(cpu_scatter_elements_rows) {
    const struct {
        int rank;
        int64_t xd[3], id[3];
    } shapes[3] = {{1, {37}, {20}}, {2, {6, 9}, {4, 9}}, {3, {3, 5, 4}, {2, 3, 3}}};
    const kiln_dtype dts[4] = {KILN_DTYPE_UINT8, KILN_DTYPE_FLOAT16, KILN_DTYPE_FLOAT, KILN_DTYPE_INT64};
    for (int sh = 0; sh < 3; sh++)
        for (int a = 0; a < shapes[sh].rank; a++)
            for (int t = 0; t < 4; t++)
                for (int i32 = 0; i32 < 2; i32++)
                    for (int badi = -1; badi < 2; badi++) {
                        const int r = shapes[sh].rank;
                        int64_t id[3], xs[3], nx = 1, n = 1;
                        for (int k = 0; k < r; k++)
                            id[k] = shapes[sh].id[k] < shapes[sh].xd[k] ? shapes[sh].id[k] : shapes[sh].xd[k];
                        for (int k = r - 1; k >= 0; k--) xs[k] = nx, nx *= shapes[sh].xd[k];
                        for (int k = 0; k < r; k++) n *= id[k];
                        const int64_t D = shapes[sh].xd[a];
                        const size_t es = kiln_dtype_size(dts[t]);
                        unsigned char *x = malloc(es * (size_t)nx), *want = malloc(es * (size_t)nx);
                        for (size_t i = 0; i < es * (size_t)nx; i++) x[i] = (unsigned char)(i * 13 + 5);
                        if (dts[t] == KILN_DTYPE_FLOAT16)
                            for (int64_t i = 0; i < nx; i++) ((uint16_t *)x)[i] = kn_f32_to_f16((float)i);
                        kn_tensor *it = NULL, *ut = NULL;
                        kn_tensor_new(i32 ? KILN_DTYPE_INT32 : KILN_DTYPE_INT64, r, id, &it);
                        kn_tensor_new(dts[t], r, id, &ut);
                        for (size_t i = 0; i < es * (size_t)n; i++) ((unsigned char *)ut->data)[i] = (unsigned char)(i * 7 + 200);
                        if (dts[t] == KILN_DTYPE_FLOAT16)
                            for (int64_t i = 0; i < n; i++) ((uint16_t *)ut->data)[i] = kn_f32_to_f16(-(float)i);
                        memcpy(want, x, es * (size_t)nx);
                        uint32_t seed = 9u + (uint32_t)(sh * 16 + a);
                        for (int64_t i = 0; i < n; i++) {
                            int64_t v = (int64_t)((tmb_rand(&seed) + 1) * 0.5f * (float)(2 * D)) - D; /* repeats */
                            if (v >= D) v = D - 1;
                            if (v < -D) v = -D;
                            if (badi >= 0 && i == (badi ? n - 1 : 0)) v = badi ? D : -D - 1;
                            if (i32) ((int32_t *)it->data)[i] = (int32_t)v;
                            else ((int64_t *)it->data)[i] = v;
                            int64_t rem = i, di = 0;
                            for (int k = r - 1; k >= 0; k--) {
                                const int64_t pk = rem % id[k];
                                rem /= id[k];
                                di += (k == a ? (v < 0 ? v + D : v) : pk) * xs[k];
                            }
                            if (badi < 0) memcpy(want + (size_t)di * es, (const unsigned char *)ut->data + (size_t)i * es, es);
                        }
                        tmb b;
                        tmb_init(&b, 16);
                        int in[3] = {tmb_input(&b, "x", dts[t], r, shapes[sh].xd, NULL), 0, 0}, out = tmb_value(&b, "y");
                        in[1] = tmb_const_tensor(&b, "i", it);
                        in[2] = tmb_const_tensor(&b, "u", ut);
                        tmb_int(&b, tmb_node(&b, "ScatterElements", in, 3, out), "axis", a);
                        tmb_output(&b, out);
                        size_t bytes;
                        unsigned char *data = tmb_finish(&b, &bytes);
                        kiln_session *s = data ? tmb_session(data, bytes, 1, 3) : NULL;
                        free(data);
                        if (s) {
                            kiln_tensor *xt = NULL, *y = NULL;
                            kiln_tensor_create(dts[t], shapes[sh].xd, r, &xt);
                            memcpy(kiln_tensor_data(xt), x, es * (size_t)nx);
                            const char *names[1] = {"x"};
                            const kiln_status st = kiln_session_run(s, names, &xt, 1, NULL, 1, &y);
                            if (badi >= 0)
                                CHECK_MSG(st == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "out of range"),
                                          "ScatterElements shape %d axis %d: index out of range gave %d: %s", sh, a, (int)st,
                                          kiln_last_error());
                            else if (st != KILN_OK)
                                CHECK_MSG(false, "ScatterElements shape %d axis %d: %s", sh, a, kiln_last_error());
                            else
                                CHECK_MSG(!memcmp(kiln_tensor_data(y), want, es * (size_t)nx),
                                          "ScatterElements shape %d axis %d type %d i32 %d: output differs", sh, a, t, i32);
                            kiln_tensor_destroy(y);
                            kiln_tensor_destroy(xt);
                            kiln_session_destroy(s);
                        }
                        free(x);
                        free(want);
                    }
}

/* Compress (a byte condition read directly; rows by memcpy; single elements by a typed loop)
 * against the definition: no axis (flattened), every axis of [5, 7] and [3, 4, 5], a condition
 * shorter than the axis, all false and all true, 1-, 2-, 4- and 8-byte elements */
KN_TEST(cpu_compress_rows) {
    const struct {
        int rank;
        int64_t d[3];
    } shapes[2] = {{2, {5, 7}}, {3, {3, 4, 5}}}; /* the flattened axes: at most 60 */
    const kiln_dtype dts[4] = {KILN_DTYPE_UINT8, KILN_DTYPE_FLOAT16, KILN_DTYPE_FLOAT, KILN_DTYPE_INT64};
    for (int sh = 0; sh < 2; sh++)
        for (int a = -1; a < shapes[sh].rank; a++)
            for (int t = 0; t < 4; t++)
                for (int pat = 0; pat < 3; pat++) {
                    const int r = shapes[sh].rank;
                    int64_t nx = 1, pre = 1, post = 1;
                    for (int k = 0; k < r; k++) nx *= shapes[sh].d[k];
                    const int64_t D = a < 0 ? nx : shapes[sh].d[a];
                    for (int k = 0; a >= 0 && k < a; k++) pre *= shapes[sh].d[k];
                    for (int k = a + 1; a >= 0 && k < r; k++) post *= shapes[sh].d[k];
                    const int64_t nc = D > 2 ? D - 1 : D; /* shorter than the axis */
                    const size_t es = kiln_dtype_size(dts[t]);
                    unsigned char *x = malloc(es * (size_t)nx);
                    for (size_t i = 0; i < es * (size_t)nx; i++) x[i] = (unsigned char)(i * 13 + 5);
                    kn_tensor *ct = NULL;
                    const int64_t cd[1] = {nc};
                    kn_tensor_new(KILN_DTYPE_BOOL, 1, cd, &ct);
                    uint8_t cv[64]; /* the model owns ct (freed with it) */
                    int64_t K = 0;
                    for (int64_t i = 0; i < nc; i++) {
                        cv[i] = pat == 0 ? (i * 7 + sh) % 3 == 0 : pat == 1 ? 1 : 0;
                        ((uint8_t *)ct->data)[i] = cv[i];
                        K += cv[i];
                    }
                    tmb b;
                    tmb_init(&b, 11);
                    int in[2] = {tmb_input(&b, "x", dts[t], r, shapes[sh].d, NULL), 0}, out = tmb_value(&b, "y");
                    in[1] = tmb_const_tensor(&b, "c", ct);
                    const int node = tmb_node(&b, "Compress", in, 2, out);
                    if (a >= 0) tmb_int(&b, node, "axis", a);
                    tmb_output(&b, out);
                    size_t bytes;
                    unsigned char *data = tmb_finish(&b, &bytes);
                    kiln_session *s = data ? tmb_session(data, bytes, 1, 3) : NULL;
                    free(data);
                    if (s) {
                        kiln_tensor *xt = NULL, *y = NULL;
                        kiln_tensor_create(dts[t], shapes[sh].d, r, &xt);
                        memcpy(kiln_tensor_data(xt), x, es * (size_t)nx);
                        const char *names[1] = {"x"};
                        CHECK_STATUS(kiln_session_run(s, names, &xt, 1, NULL, 1, &y), KILN_OK);
                        if (y) {
                            CHECK_MSG((int64_t)kiln_tensor_bytes(y) == (int64_t)es * pre * K * post,
                                      "Compress shape %d axis %d: %zu bytes", sh, a, kiln_tensor_bytes(y));
                            const unsigned char *g = kiln_tensor_data(y);
                            int64_t bad = 0;
                            for (int64_t p = 0, k = 0; p < pre && (int64_t)kiln_tensor_bytes(y) == (int64_t)es * pre * K * post; p++, k = 0)
                                for (int64_t i = 0; i < nc; i++) {
                                    if (!cv[i]) continue;
                                    bad += memcmp(g + (size_t)((p * K + k) * post) * es, x + (size_t)((p * D + i) * post) * es,
                                                  (size_t)post * es) != 0;
                                    k++;
                                }
                            CHECK_MSG(bad == 0, "Compress shape %d axis %d type %d pattern %d: %lld rows wrong", sh, a, t,
                                      pat, (long long)bad);
                        }
                        kiln_tensor_destroy(y);
                        kiln_tensor_destroy(xt);
                        kiln_session_destroy(s);
                    }
                    free(x);
                }
}

/* NonZero by rows of the last axis (a byte mask, the columns written without a branch) against
 * the definition: ranks 1-3, float with -0 (zero) and NaN (nonzero), float16 -0, int64, bool; all
 * zero, all nonzero and mixed */
KN_TEST(cpu_nonzero_rows) {
    const struct {
        int rank;
        int64_t d[3];
    } shapes[3] = {{1, {37}}, {2, {5, 9}}, {3, {3, 4, 6}}};
    const kiln_dtype dts[4] = {KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT16, KILN_DTYPE_INT64, KILN_DTYPE_BOOL};
    for (int sh = 0; sh < 3; sh++)
        for (int t = 0; t < 4; t++)
            for (int pat = 0; pat < 3; pat++) {
                const int r = shapes[sh].rank;
                int64_t n = 1;
                for (int k = 0; k < r; k++) n *= shapes[sh].d[k];
                const size_t es = kiln_dtype_size(dts[t]);
                unsigned char *x = calloc((size_t)n, es);
                bool *want = calloc((size_t)n, 1);
                for (int64_t i = 0; i < n; i++) {
                    const int v = pat == 0 ? 0 : pat == 1 ? 1 + (int)(i % 3) : (int)((i * 7) % 5) - 2; /* -2..2 */
                    want[i] = v != 0;
                    if (dts[t] == KILN_DTYPE_FLOAT) {
                        float f = (float)v;
                        if (v == 0 && i % 2) f = -0.0f;
                        if (v == 2) f = NAN;
                        ((float *)x)[i] = f;
                    } else if (dts[t] == KILN_DTYPE_FLOAT16) {
                        ((uint16_t *)x)[i] = v == 0 ? (i % 2 ? 0x8000 : 0) : kn_f32_to_f16((float)v);
                    } else if (dts[t] == KILN_DTYPE_INT64) {
                        ((int64_t *)x)[i] = v;
                    } else {
                        x[i] = v != 0;
                    }
                }
                tmb b;
                tmb_init(&b, 13);
                int in = tmb_input(&b, "x", dts[t], r, shapes[sh].d, NULL), out = tmb_value(&b, "y");
                tmb_node(&b, "NonZero", &in, 1, out);
                tmb_output(&b, out);
                size_t bytes;
                unsigned char *data = tmb_finish(&b, &bytes);
                kiln_session *s = data ? tmb_session(data, bytes, 1, 3) : NULL;
                free(data);
                if (s) {
                    kiln_tensor *xt = NULL, *y = NULL;
                    kiln_tensor_create(dts[t], shapes[sh].d, r, &xt);
                    memcpy(kiln_tensor_data(xt), x, es * (size_t)n);
                    const char *names[1] = {"x"};
                    CHECK_STATUS(kiln_session_run(s, names, &xt, 1, NULL, 1, &y), KILN_OK);
                    if (y) {
                        int64_t cnt = 0;
                        for (int64_t i = 0; i < n; i++) cnt += want[i];
                        CHECK_MSG(kiln_tensor_rank(y) == 2 && kiln_tensor_dims(y)[0] == r && kiln_tensor_dims(y)[1] == cnt,
                                  "NonZero shape %d type %d pattern %d: wrong output shape", sh, t, pat);
                        const int64_t *g = kiln_tensor_data(y);
                        int64_t bad = 0, col = 0;
                        for (int64_t i = 0; i < n && kiln_tensor_dims(y)[1] == cnt; i++) {
                            if (!want[i]) continue;
                            int64_t rem = i;
                            for (int k = r - 1; k >= 0; k--) {
                                bad += g[k * cnt + col] != rem % shapes[sh].d[k];
                                rem /= shapes[sh].d[k];
                            }
                            col++;
                        }
                        CHECK_MSG(bad == 0, "NonZero shape %d type %d pattern %d: %lld coordinates wrong", sh, t, pat,
                                  (long long)bad);
                    }
                    kiln_tensor_destroy(y);
                    kiln_tensor_destroy(xt);
                    kiln_session_destroy(s);
                }
                free(x);
                free(want);
            }
}

/* Unit tests of the image family (Resize shapes and coordinate edge cases) and of the signal
 * family's FFT, against values worked out by hand here (or by a naive DFT), not by the code under
 * test. */
#include "backend/cpu/image_impl.h"
#include "backend/cpu/signal_fft.h"
#include "ops/op.h"
#include "test_nodes.h"
#include "unit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef KILN_HAVE_WEBP
#include <webp/encode.h>
#endif
#ifdef KILN_HAVE_OPENJPEG
#include <openjpeg.h>
#endif

/* ------------------------------------------------------------------ helpers */

/* tnode, tn_init, tn_int, ...: tests/unit/test_nodes.h */

static kn_tensor *tens(kiln_dtype dt, int rank, const int64_t *dims, const void *vals) {
    kn_tensor *t = NULL;
    if (kn_tensor_new(dt, rank, dims, &t) != KILN_OK) return NULL;
    if (vals) memcpy(t->data, vals, t->nbytes);
    return t;
}
static kn_tensor *tfloats(int n, const float *v) {
    int64_t d = n;
    return tens(KILN_DTYPE_FLOAT, 1, &d, v);
}
static kn_tensor *tints(int n, const int64_t *v) {
    int64_t d = n;
    return tens(KILN_DTYPE_INT64, 1, &d, v);
}

/* Runs Resize (opset 19 unless the node says otherwise) on x with the given optional inputs;
 * returns the output (caller frees) or NULL on error (status in *st). */
static kn_tensor *run_resize(tnode *t, kn_tensor *x, kn_tensor *roi, kn_tensor *scales, kn_tensor *sizes,
                             kiln_status *st) {
    kn_tensor *in[4] = {x, roi, scales, sizes};
    kn_tensor *out[1] = {NULL};
    kn_kernel_ctx c = {0};
    c.node = &t->node;
    c.in = in;
    c.n_inputs = 4;
    c.out = out;
    c.n_outputs = 1;
    *st = kn_cpu_resize(&c);
    if (*st != KILN_OK) {
        kn_tensor_free(out[0]);
        return NULL;
    }
    return out[0];
}

static kn_resize_plan plan_of(tnode *t, int rank, const int64_t *dims, kn_tensor *scales, kn_tensor *sizes,
                              kiln_status *st) {
    kn_resize_plan p;
    char why[256];
    *st = kn_resize_plan_make(&t->node, rank, dims, NULL, scales, sizes, false, &p, why, sizeof why);
    return p;
}

/* ------------------------------------------------------------------ shapes */

KN_TEST(resize_scales_floor_in_double) {
    /* out = floor(in * scale) with the float scale widened to double: 0.7f is 0.699999988..., so
     * 10 * 0.7f = 6.9999998... -> 6 (not 7); 0.6f = 0.600000024... so 5 * 0.6f -> 3; 1/3f =
     * 0.333333343... so 3 * (1/3f) = 1.00000003 -> 1 */
    tnode t;
    tn_init(&t, "Resize", 19);
    float s[3] = {0.7f, 0.6f, 1.0f / 3.0f};
    kn_tensor *sc = tfloats(3, s);
    int64_t dims[3] = {10, 5, 3};
    kiln_status st;
    kn_resize_plan p = plan_of(&t, 3, dims, sc, NULL, &st);
    CHECK_STATUS(st, KILN_OK);
    CHECK_EQ_INT(p.out_dims[0], 6);
    CHECK_EQ_INT(p.out_dims[1], 3);
    CHECK_EQ_INT(p.out_dims[2], 1);
    kn_tensor_free(sc);
}

KN_TEST(resize_keep_aspect_ratio) {
    /* [4, 6] to sizes [3, 3]: per-axis ratios 0.75 and 0.5. not_larger takes 0.5: [2, 3];
     * not_smaller takes 0.75: [3, round_half_up(4.5) = 5] */
    int64_t axes[2] = {2, 3}, sz[2] = {3, 3}, dims[4] = {1, 1, 4, 6};
    kn_tensor *sizes = tints(2, sz);
    kiln_status st;
    tnode t;
    tn_init(&t, "Resize", 19);
    tn_ints(&t, "axes", axes, 2);
    tn_string(&t, "keep_aspect_ratio_policy", "not_larger");
    kn_resize_plan p = plan_of(&t, 4, dims, NULL, sizes, &st);
    CHECK_STATUS(st, KILN_OK);
    CHECK_EQ_INT(p.out_dims[0], 1);
    CHECK_EQ_INT(p.out_dims[2], 2);
    CHECK_EQ_INT(p.out_dims[3], 3);
    CHECK_NEAR(p.scale[3], 0.5, 0);
    tn_init(&t, "Resize", 19);
    tn_ints(&t, "axes", axes, 2);
    tn_string(&t, "keep_aspect_ratio_policy", "not_smaller");
    p = plan_of(&t, 4, dims, NULL, sizes, &st);
    CHECK_STATUS(st, KILN_OK);
    CHECK_EQ_INT(p.out_dims[2], 3);
    CHECK_EQ_INT(p.out_dims[3], 5);
    CHECK_NEAR(p.scale[2], 0.75, 0);
    kn_tensor_free(sizes);
}

KN_TEST(resize_invalid_inputs) {
    tnode t;
    tn_init(&t, "Resize", 13);
    float s[2] = {1, 2};
    int64_t sz[2] = {2, 4}, dims[2] = {2, 2};
    kn_tensor *sc = tfloats(2, s), *si = tints(2, sz);
    kiln_status st;
    char why[256];
    kn_resize_plan p;
    st = kn_resize_plan_make(&t.node, 2, dims, NULL, sc, si, false, &p, why, sizeof why);
    CHECK(st == KILN_ERR_INVALID_MODEL && strstr(why, "both 'scales' and 'sizes'"));
    st = kn_resize_plan_make(&t.node, 3, (int64_t[]){1, 2, 2}, NULL, sc, NULL, false, &p, why, sizeof why);
    CHECK(st == KILN_ERR_INVALID_MODEL && strstr(why, "'scales' has 2 values"));
    st = kn_resize_plan_make(&t.node, 2, dims, NULL, NULL, NULL, false, &p, why, sizeof why);
    CHECK(st == KILN_ERR_INVALID_MODEL && strstr(why, "neither"));
    /* at load time an unknown sizes value leaves the dims unknown rather than failing */
    st = kn_resize_plan_make(&t.node, 2, dims, NULL, NULL, NULL, true, &p, why, sizeof why);
    CHECK_STATUS(st, KILN_OK);
    CHECK_EQ_INT(p.out_dims[0], -1);
    float bad[2] = {1, 0};
    kn_tensor *sb = tfloats(2, bad);
    st = kn_resize_plan_make(&t.node, 2, dims, NULL, sb, NULL, false, &p, why, sizeof why);
    CHECK(st == KILN_ERR_INVALID_MODEL && strstr(why, "must be positive"));
    kn_tensor_free(sc);
    kn_tensor_free(si);
    kn_tensor_free(sb);
}

KN_TEST(resize_infer_keeps_symbols) {
    /* sizes known, the batch dimension symbolic and not resized: it passes through by name */
    const kn_op_schema *s = kn_op_find("", "Resize", 19, NULL);
    CHECK(s != NULL);
    if (!s) return;
    tnode t;
    tn_init(&t, "Resize", 19);
    int64_t axes[2] = {2, 3};
    tn_ints(&t, "axes", axes, 2);
    kn_type x, none, sizes_t, out;
    kn_type_set_tensor(&x, KILN_DTYPE_FLOAT, 4, (int64_t[]){-1, 3, 10, 20});
    x.dims[0].symbol = "batch";
    kn_type_set_tensor(&sizes_t, KILN_DTYPE_INT64, 1, (int64_t[]){2});
    kn_type_init(&none);
    kn_type_init(&out);
    int64_t sz[2] = {5, 7};
    kn_tensor *sizes = tints(2, sz);
    const kn_type *in[4] = {&x, NULL, NULL, &sizes_t};
    const kn_tensor *vals[4] = {NULL, NULL, NULL, sizes};
    kn_infer_ctx c = {.node = &t.node, .n_inputs = 4, .in = in, .in_value = vals, .n_outputs = 1, .out = &out};
    CHECK_STATUS(s->infer(&c), KILN_OK);
    CHECK_EQ_INT(out.rank, 4);
    CHECK(out.dims[0].symbol && !strcmp(out.dims[0].symbol, "batch"));
    CHECK_EQ_INT(out.dims[1].value, 3);
    CHECK_EQ_INT(out.dims[2].value, 5);
    CHECK_EQ_INT(out.dims[3].value, 7);
    /* the sizes value unknown (a graph input): the resized dims are unknown, the rank is not */
    vals[3] = NULL;
    kn_type_init(&out);
    CHECK_STATUS(s->infer(&c), KILN_OK);
    CHECK_EQ_INT(out.rank, 4);
    CHECK_EQ_INT(out.dims[2].value, -1);
    kn_tensor_free(sizes);
}

/* ------------------------------------------------------------------ coordinates */

/* Resizes [1, 2, 3, 4] (float) to one element with the given transformation. */
static double resize_to_one(const char *coord) {
    tnode t;
    tn_init(&t, "Resize", 19);
    tn_string(&t, "mode", "linear");
    tn_string(&t, "coordinate_transformation_mode", coord);
    float v[4] = {1, 2, 3, 4};
    int64_t one = 1;
    kn_tensor *x = tfloats(4, v), *sizes = tints(1, &one);
    kiln_status st;
    kn_tensor *y = run_resize(&t, x, NULL, NULL, sizes, &st);
    double r = y && kn_tensor_count(y) == 1 ? ((float *)y->data)[0] : NAN;
    kn_tensor_free(x);
    kn_tensor_free(sizes);
    kn_tensor_free(y);
    return r;
}

KN_TEST(resize_single_output_coordinates) {
    /* half_pixel: x = (0 + 0.5) / 0.25 - 0.5 = 1.5, between 2 and 3; pytorch_half_pixel maps a
     * length-1 output to -0.5 (edge-clamped to the first element); align_corners to 0 */
    CHECK_NEAR(resize_to_one("half_pixel"), 2.5, 1e-6);
    CHECK_NEAR(resize_to_one("pytorch_half_pixel"), 1.0, 1e-6);
    CHECK_NEAR(resize_to_one("align_corners"), 1.0, 1e-6);
    CHECK_NEAR(resize_to_one("asymmetric"), 1.0, 1e-6);
}

KN_TEST(resize_tf_crop_extrapolation) {
    /* roi [0, 1.5] over 3 elements to 4 outputs: x = y * 1.5 * 2 / 3 = y, so outputs 0..2 are the
     * inputs and output 3 (x = 3 > 2) is the extrapolation value */
    tnode t;
    tn_init(&t, "Resize", 19);
    tn_string(&t, "mode", "linear");
    tn_string(&t, "coordinate_transformation_mode", "tf_crop_and_resize");
    tn_float(&t, "extrapolation_value", 9.0f);
    float v[3] = {5, 6, 7}, r[2] = {0.0f, 1.5f};
    int64_t four = 4;
    kn_tensor *x = tfloats(3, v), *roi = tfloats(2, r), *sizes = tints(1, &four);
    kiln_status st;
    kn_tensor *y = run_resize(&t, x, roi, NULL, sizes, &st);
    CHECK_STATUS(st, KILN_OK);
    if (y) {
        const float *o = y->data, want[4] = {5, 6, 7, 9};
        for (int i = 0; i < 4; i++) CHECK_NEAR(o[i], want[i], 1e-6);
    }
    kn_tensor_free(y);
    /* without roi the mode cannot run */
    y = run_resize(&t, x, NULL, NULL, sizes, &st);
    CHECK(st == KILN_ERR_INVALID_MODEL && y == NULL);
    kn_tensor_free(x);
    kn_tensor_free(roi);
    kn_tensor_free(sizes);
}

KN_TEST(resize_nearest_tie_modes) {
    /* asymmetric 2x upsampling of [10, 20, 30]: output 1 reads x = 0.5, a tie */
    static const struct {
        const char *mode;
        float want1, want5;
    } cases[] = {
        {"round_prefer_floor", 10, 30}, /* x = 2.5 at output 5: ties to 2; 2 is the last anyway */
        {"round_prefer_ceil", 20, 30},
        {"floor", 10, 30},
        {"ceil", 20, 30}, /* ceil(2.5) = 3, clamped to the last element */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tnode t;
        tn_init(&t, "Resize", 19);
        tn_string(&t, "coordinate_transformation_mode", "asymmetric");
        tn_string(&t, "nearest_mode", cases[k].mode);
        float v[3] = {10, 20, 30}, s = 2;
        kn_tensor *x = tfloats(3, v), *sc = tfloats(1, &s);
        kiln_status st;
        kn_tensor *y = run_resize(&t, x, NULL, sc, NULL, &st);
        CHECK_STATUS(st, KILN_OK);
        if (y) {
            CHECK_EQ_INT(kn_tensor_count(y), 6);
            const float *o = y->data;
            CHECK_MSG(o[0] == 10 && o[1] == cases[k].want1 && o[2] == 20 && o[5] == cases[k].want5,
                      "%s: got %g %g %g %g %g %g", cases[k].mode, o[0], o[1], o[2], o[3], o[4], o[5]);
        }
        kn_tensor_free(x);
        kn_tensor_free(sc);
        kn_tensor_free(y);
    }
}

KN_TEST(resize_integer_rounding_and_saturation) {
    /* uint8 [0, 3], asymmetric linear 2x: x = 0.5 gives 1.5, rounded half to even -> 2 */
    tnode t;
    tn_init(&t, "Resize", 19);
    tn_string(&t, "mode", "linear");
    tn_string(&t, "coordinate_transformation_mode", "asymmetric");
    uint8_t v[2] = {0, 3};
    int64_t d = 2;
    float s = 2;
    kn_tensor *x = tens(KILN_DTYPE_UINT8, 1, &d, v), *sc = tfloats(1, &s);
    kiln_status st;
    kn_tensor *y = run_resize(&t, x, NULL, sc, NULL, &st);
    CHECK_STATUS(st, KILN_OK);
    if (y) {
        const uint8_t *o = y->data;
        CHECK(o[0] == 0 && o[1] == 2 && o[2] == 3 && o[3] == 3);
    }
    kn_tensor_free(y);
    kn_tensor_free(x);
    /* cubic overshoot past 255 saturates instead of wrapping: [0, 255, 255, 0] upsampled, the
     * Keys kernel (A = -0.75) at x = 1.5 between the two 255s gives 255 * (1 + 2 * 0.09375) */
    tnode c;
    tn_init(&c, "Resize", 19);
    tn_string(&c, "mode", "cubic");
    tn_string(&c, "coordinate_transformation_mode", "asymmetric");
    uint8_t w[4] = {0, 255, 255, 0};
    d = 4;
    x = tens(KILN_DTYPE_UINT8, 1, &d, w);
    y = run_resize(&c, x, NULL, sc, NULL, &st);
    CHECK_STATUS(st, KILN_OK);
    if (y) CHECK_EQ_INT(((uint8_t *)y->data)[3], 255);
    kn_tensor_free(y);
    kn_tensor_free(x);
    kn_tensor_free(sc);
}

/* Nearest x2 along the last two axes of [2, 3, 3, W] for elements of 1, 2, 4 and 8 bytes and
 * widths around the 16-byte steps of the doubled rows (repeat2_row) and their tails, against the
 * ONNX definition's source index worked out here: asymmetric + floor, half_pixel +
 * round_prefer_floor and align_corners + round_prefer_floor map output j to j / 2 (the doubling
 * path), asymmetric + ceil does not (the gather). */
KN_TEST(resize_nearest_x2_rows_against_definition) {
    static const kiln_dtype types[4] = {KILN_DTYPE_UINT8, KILN_DTYPE_FLOAT16, KILN_DTYPE_INT32, KILN_DTYPE_INT64};
    static const size_t sizes_of[4] = {1, 2, 4, 8};
    static const int64_t widths[] = {1, 7, 8, 9, 16, 17, 33};
    static const char *const coords[4][2] = {{"asymmetric", "floor"},
                                             {"half_pixel", "round_prefer_floor"},
                                             {"align_corners", "round_prefer_floor"},
                                             {"asymmetric", "ceil"}};
    for (int ti = 0; ti < 4; ti++)
        for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
            for (int ci = 0; ci < 4; ci++) {
                const int64_t W = widths[wi], H = 3, dims[4] = {2, 3, H, W}, OH = 2 * H, OW = 2 * W;
                const size_t es = sizes_of[ti];
                kn_tensor *x = tens(types[ti], 4, dims, NULL);
                if (!x) continue;
                unsigned char *xb = x->data;
                for (size_t b = 0; b < x->nbytes; b++) xb[b] = (unsigned char)(b * 37 + 11); /* distinct bytes */
                tnode t;
                tn_init(&t, "Resize", 19);
                tn_string(&t, "coordinate_transformation_mode", coords[ci][0]);
                tn_string(&t, "nearest_mode", coords[ci][1]);
                const float sv[4] = {1, 1, 2, 2};
                kn_tensor *sc = tfloats(4, sv);
                kiln_status st;
                kn_tensor *y = run_resize(&t, x, NULL, sc, NULL, &st);
                CHECK_STATUS(st, KILN_OK);
                if (y) {
                    CHECK_EQ_INT(kn_tensor_count(y), 2 * 3 * OH * OW);
                    int64_t bad = 0, first = -1;
                    for (int64_t i = 0; i < 2 * 3 * OH * OW; i++) {
                        const int64_t ow = i % OW, oh = i / OW % OH, nc = i / (OW * OH);
                        int64_t src[2];
                        const int64_t o[2] = {oh, ow}, in[2] = {H, W};
                        for (int a = 0; a < 2; a++) {
                            double xs;
                            if (ci == 0) xs = floor(o[a] / 2.0);
                            else if (ci == 1) xs = ceil((o[a] + 0.5) / 2.0 - 0.5 - 0.5);
                            else if (ci == 2) xs = ceil(o[a] * (double)(in[a] - 1) / (double)(2 * in[a] - 1) - 0.5);
                            else xs = ceil(o[a] / 2.0);
                            src[a] = xs < 0 ? 0 : xs > in[a] - 1 ? in[a] - 1 : (int64_t)xs;
                        }
                        const unsigned char *want = xb + (size_t)((nc * H + src[0]) * W + src[1]) * es;
                        if (memcmp((const unsigned char *)y->data + (size_t)i * es, want, es) && !bad++) first = i;
                    }
                    CHECK_MSG(bad == 0, "%s %s, %zu-byte elements, width %lld: %lld of %lld outputs differ (first %lld)",
                              coords[ci][0], coords[ci][1], es, (long long)W, (long long)bad,
                              (long long)(2 * 3 * OH * OW), (long long)first);
                }
                kn_tensor_free(y);
                kn_tensor_free(x);
                kn_tensor_free(sc);
            }
}

KN_TEST(resize_antialias_linear_downsample) {
    /* [0..7] halved with antialias: the triangle filter widens to 4 taps with weights
     * 1/8, 3/8, 3/8, 1/8 around x = 2y + 0.5 (edge-clamped): y0 = (0 + 0 * 3 + 1 * 3 + 2) / 8
     * = 0.625, y1 = (1 + 2 * 3 + 3 * 3 + 4) / 8 = 2.5, y3 = (5 + 18 + 21 + 7) / 8 = 6.375 */
    tnode t;
    tn_init(&t, "Resize", 19);
    tn_string(&t, "mode", "linear");
    tn_int(&t, "antialias", 1);
    float v[8] = {0, 1, 2, 3, 4, 5, 6, 7}, s = 0.5f;
    kn_tensor *x = tfloats(8, v), *sc = tfloats(1, &s);
    kiln_status st;
    kn_tensor *y = run_resize(&t, x, NULL, sc, NULL, &st);
    CHECK_STATUS(st, KILN_OK);
    if (y) {
        const float *o = y->data;
        CHECK_EQ_INT(kn_tensor_count(y), 4);
        CHECK_NEAR(o[0], 0.625, 1e-6);
        CHECK_NEAR(o[1], 2.5, 1e-6);
        CHECK_NEAR(o[2], 4.5, 1e-6);
        CHECK_NEAR(o[3], 6.375, 1e-6);
    }
    kn_tensor_free(x);
    kn_tensor_free(sc);
    kn_tensor_free(y);
}

KN_TEST(resize_axes_reordered_and_legacy_upsample) {
    /* axes [1, 0] with sizes [3, 1] on a [2, 2] input: axis 1 -> 3, axis 0 -> 1 */
    tnode t;
    tn_init(&t, "Resize", 19);
    int64_t axes[2] = {1, 0}, sz[2] = {3, 1}, dims[2] = {2, 2};
    tn_ints(&t, "axes", axes, 2);
    kn_tensor *sizes = tints(2, sz);
    kiln_status st;
    kn_resize_plan p = plan_of(&t, 2, dims, NULL, sizes, &st);
    CHECK_STATUS(st, KILN_OK);
    CHECK_EQ_INT(p.out_dims[0], 1);
    CHECK_EQ_INT(p.out_dims[1], 3);
    kn_tensor_free(sizes);
    /* Upsample-9 (asymmetric, nearest by truncation) of [1, 2] by 1.5 -> floor(3) = 3 outputs
     * reading x = 0, 0.67, 1.33 -> elements 0, 0, 1 */
    tnode u;
    tn_init(&u, "Upsample", 9);
    float v[2] = {1, 2}, s = 1.5f;
    kn_tensor *x = tfloats(2, v), *sc = tfloats(1, &s);
    kn_tensor *in[2] = {x, sc}, *out[1] = {NULL};
    kn_kernel_ctx c = {.node = &u.node, .in = in, .n_inputs = 2, .out = out, .n_outputs = 1};
    CHECK_STATUS(kn_cpu_resize(&c), KILN_OK);
    if (out[0]) {
        const float *o = out[0]->data;
        CHECK(kn_tensor_count(out[0]) == 3 && o[0] == 1 && o[1] == 1 && o[2] == 2);
    }
    kn_tensor_free(out[0]);
    kn_tensor_free(x);
    kn_tensor_free(sc);
}

/* ------------------------------------------------------------------ FFT */

KN_TEST(fft_matches_naive_dft) {
    /* radix 2, 4, mixed (6, 60), a direct prime (7), Bluestein primes (37, 97) and a power (343) */
    const int64_t lens[] = {1, 2, 6, 7, 16, 37, 60, 97, 343};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        int64_t n = lens[li];
        for (int inv = 0; inv < 2; inv++) {
            kn_fft_plan *p = NULL;
            CHECK_STATUS(kn_fft_plan_new(n, inv, &p), KILN_OK);
            if (!p) continue;
            kn_cpx *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
            kn_cpx *s = malloc(kn_fft_scratch_len(p) * sizeof *s);
            unsigned seed = (unsigned)(n * 7 + inv);
            for (int64_t i = 0; i < n; i++) {
                seed = seed * 1103515245u + 12345u;
                x[i].re = (double)((seed >> 8) & 0xffff) / 65536.0 - 0.5;
                seed = seed * 1103515245u + 12345u;
                x[i].im = (double)((seed >> 8) & 0xffff) / 65536.0 - 0.5;
            }
            kn_fft_exec(p, x, y, s);
            double worst = 0;
            for (int64_t k = 0; k < n; k++) {
                double re = 0, im = 0;
                for (int64_t j = 0; j < n; j++) {
                    double a = (inv ? 2 : -2) * M_PI * (double)((j * k) % n) / (double)n;
                    re += x[j].re * cos(a) - x[j].im * sin(a);
                    im += x[j].re * sin(a) + x[j].im * cos(a);
                }
                worst = fmax(worst, fmax(fabs(re - y[k].re), fabs(im - y[k].im)));
            }
            CHECK_MSG(worst < 1e-9 * (double)n, "n %lld inverse %d: max error %g", (long long)n, inv, worst);
            free(x);
            free(y);
            free(s);
            kn_fft_plan_free(p);
        }
    }
}

/* ------------------------------------------------------------------ ImageDecoder (own formats) */

static kn_tensor *decode(const uint8_t *bytes, int64_t n, const char *fmt, kiln_status *st) {
    tnode t;
    tn_init(&t, "ImageDecoder", 20);
    tn_string(&t, "pixel_format", fmt);
    kn_tensor *x = tens(KILN_DTYPE_UINT8, 1, &n, bytes), *out[1] = {NULL};
    kn_tensor *in[1] = {x};
    kn_kernel_ctx c = {.node = &t.node, .in = in, .n_inputs = 1, .out = out, .n_outputs = 1};
    *st = kn_cpu_image_decode(&c);
    kn_tensor_free(x);
    return out[0];
}

KN_TEST(image_decoder_bmp_pnm_tiff) {
    /* a 2x2 24-bit BMP, rows stored bottom-up as B, G, R with rows padded to 4 bytes */
    uint8_t bmp[54 + 16] = {'B', 'M'};
    bmp[10] = 54, bmp[14] = 40, bmp[18] = 2, bmp[22] = 2, bmp[26] = 1, bmp[28] = 24;
    const uint8_t px[16] = {/* bottom row */ 3, 2, 1, 6, 5, 4, 0, 0, /* top row */ 30, 20, 10, 60, 50, 40, 0, 0};
    memcpy(bmp + 54, px, 16);
    kiln_status st;
    kn_tensor *y = decode(bmp, sizeof bmp, "RGB", &st);
    CHECK_STATUS(st, KILN_OK);
    if (y) {
        const uint8_t want[12] = {10, 20, 30, 40, 50, 60, 1, 2, 3, 4, 5, 6};
        CHECK(y->rank == 3 && y->dims[0] == 2 && y->dims[1] == 2 && y->dims[2] == 3 && !memcmp(y->data, want, 12));
    }
    kn_tensor_free(y);
    /* BGR swaps the channels */
    y = decode(bmp, sizeof bmp, "BGR", &st);
    if (y) CHECK(((uint8_t *)y->data)[0] == 30 && ((uint8_t *)y->data)[2] == 10);
    kn_tensor_free(y);
    /* ASCII PNM (P3) with maxval 15 scales to 0..255 (15 -> 255, 5 -> 85); Grayscale of pure red
     * is (255 * 19595 + 0x8000) >> 16 = 76 */
    const char *p3 = "P3\n# comment\n2 1\n15\n15 0 0  5 5 5\n";
    y = decode((const uint8_t *)p3, (int64_t)strlen(p3), "Grayscale", &st);
    CHECK_STATUS(st, KILN_OK);
    if (y) CHECK(y->dims[2] == 1 && ((uint8_t *)y->data)[0] == 76 && ((uint8_t *)y->data)[1] == 85);
    kn_tensor_free(y);
    /* a big-endian uncompressed 1x2 gray TIFF (min-is-black) with one strip */
    uint8_t tif[8 + 2 + 6 * 12 + 4 + 2] = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 6};
    const uint16_t tags[6][2] = {{256, 2}, {257, 1}, {259, 1}, {262, 1}, {273, 8 + 2 + 72 + 4}, {277, 1}};
    for (int k = 0; k < 6; k++) {
        uint8_t *e = tif + 10 + k * 12;
        e[0] = (uint8_t)(tags[k][0] >> 8), e[1] = (uint8_t)tags[k][0], e[3] = 3, e[7] = 1;
        e[8] = (uint8_t)(tags[k][1] >> 8), e[9] = (uint8_t)tags[k][1];
    }
    tif[sizeof tif - 2] = 7, tif[sizeof tif - 1] = 200;
    y = decode(tif, sizeof tif, "RGB", &st);
    CHECK_STATUS(st, KILN_OK);
    if (y) {
        const uint8_t want[6] = {7, 7, 7, 200, 200, 200};
        CHECK(y->dims[0] == 1 && y->dims[1] == 2 && !memcmp(y->data, want, 6));
    }
    kn_tensor_free(y);
    /* truncated and unknown data fail with a message, not a crash */
    y = decode(bmp, 60, "RGB", &st);
    CHECK(st == KILN_ERR_INVALID_ARGUMENT && y == NULL);
    CHECK_ERROR_HAS("truncated");
    const uint8_t junk[4] = {1, 2, 3, 4};
    y = decode(junk, 4, "RGB", &st);
    CHECK(st == KILN_ERR_UNSUPPORTED && y == NULL);
}

/* ------------------------------------------------------------------ ImageDecoder through libraries */

/* a w x h test card, RGB: every pixel distinct enough that a swapped or shifted channel shows */
static void test_card(uint8_t *px, int w, int h, int bpp) {
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + (y * w + x) * bpp;
            p[0] = (uint8_t)(17 * x + 3 * y), p[1] = (uint8_t)(200 - 11 * y + x), p[2] = (uint8_t)(x * y + 40);
            if (bpp == 4) p[3] = (uint8_t)(40 + 15 * x); /* alpha, dropped by the decoder; never 0, under
                                                          which a lossless encoder may drop the colour */
        }
}

static void check_decoded_card(const kn_tensor *y, const uint8_t *px, int w, int h, int bpp) {
    CHECK(y && y->rank == 3 && y->dims[0] == h && y->dims[1] == w && y->dims[2] == 3);
    if (!y || y->dims[0] != h || y->dims[1] != w) return;
    int bad = 0;
    for (int i = 0; i < w * h; i++)
        for (int k = 0; k < 3; k++) bad += ((uint8_t *)y->data)[i * 3 + k] != px[i * bpp + k];
    CHECK_MSG(bad == 0, "%d of %d samples differ from the encoded image", bad, w * h * 3);
}

#ifdef KILN_HAVE_WEBP
/* lossless WebP (RGB and RGBA) round trips exactly: the decoder's output is the encoder's input */
KN_TEST(image_decoder_webp_lossless) {
    const int w = 13, h = 7;
    for (int bpp = 3; bpp <= 4; bpp++) {
        uint8_t px[13 * 7 * 4];
        test_card(px, w, h, bpp);
        uint8_t *enc = NULL;
        size_t n = bpp == 3 ? WebPEncodeLosslessRGB(px, w, h, w * 3, &enc) : WebPEncodeLosslessRGBA(px, w, h, w * 4, &enc);
        CHECK(n > 0);
        kiln_status st;
        kn_tensor *y = decode(enc, (int64_t)n, "RGB", &st);
        CHECK_STATUS(st, KILN_OK);
        check_decoded_card(y, px, w, h, bpp);
        kn_tensor_free(y);
        /* cut short: a status naming the format, not a crash */
        y = decode(enc, (int64_t)(n * 2 / 3), "RGB", &st);
        CHECK(st == KILN_ERR_INVALID_ARGUMENT && y == NULL);
        CHECK_ERROR_HAS("WebP");
        WebPFree(enc);
    }
}
#endif

#ifdef KILN_HAVE_OPENJPEG
typedef struct j2k_buf {
    uint8_t *d;
    size_t n, cap, pos;
} j2k_buf;

static OPJ_SIZE_T j2k_write(void *src, OPJ_SIZE_T len, void *user) {
    j2k_buf *b = user;
    if (b->pos + len > b->cap) {
        size_t cap = (b->pos + len) * 2;
        uint8_t *d = realloc(b->d, cap);
        if (!d) return (OPJ_SIZE_T)-1;
        b->d = d, b->cap = cap;
    }
    memcpy(b->d + b->pos, src, len);
    b->pos += len;
    if (b->pos > b->n) b->n = b->pos;
    return len;
}
static OPJ_OFF_T j2k_skip(OPJ_OFF_T len, void *user) {
    j2k_buf *b = user;
    b->pos += (size_t)len;
    return len;
}
static OPJ_BOOL j2k_seek(OPJ_OFF_T to, void *user) {
    ((j2k_buf *)user)->pos = (size_t)to;
    return OPJ_TRUE;
}

/* a raw JPEG 2000 codestream of px (nc = 1 or 3 components of 8 bits), lossless (the reversible
 * 5/3 wavelet, one quality layer at rate 0) */
static j2k_buf j2k_encode(const uint8_t *px, int w, int h, int nc) {
    j2k_buf b = {0};
    opj_image_cmptparm_t cp[3];
    memset(cp, 0, sizeof cp);
    for (int k = 0; k < nc; k++) cp[k].dx = cp[k].dy = 1, cp[k].w = (OPJ_UINT32)w, cp[k].h = (OPJ_UINT32)h, cp[k].prec = 8;
    opj_image_t *img = opj_image_create((OPJ_UINT32)nc, cp, nc == 3 ? OPJ_CLRSPC_SRGB : OPJ_CLRSPC_GRAY);
    if (!img) return b;
    img->x1 = (OPJ_UINT32)w, img->y1 = (OPJ_UINT32)h;
    for (int k = 0; k < nc; k++)
        for (int i = 0; i < w * h; i++) img->comps[k].data[i] = px[i * 3 + k];
    opj_cparameters_t prm;
    opj_set_default_encoder_parameters(&prm);
    prm.tcp_numlayers = 1, prm.tcp_rates[0] = 0, prm.cp_disto_alloc = 1, prm.numresolution = 2;
    opj_codec_t *codec = opj_create_compress(OPJ_CODEC_J2K);
    opj_stream_t *s = opj_stream_create(1 << 12, OPJ_FALSE);
    opj_stream_set_user_data(s, &b, NULL);
    opj_stream_set_write_function(s, j2k_write);
    opj_stream_set_skip_function(s, j2k_skip);
    opj_stream_set_seek_function(s, j2k_seek);
    bool ok = opj_setup_encoder(codec, &prm, img) && opj_start_compress(codec, img, s) && opj_encode(codec, s) &&
              opj_end_compress(codec, s);
    opj_stream_destroy(s);
    opj_destroy_codec(codec);
    opj_image_destroy(img);
    if (!ok) free(b.d), b.d = NULL, b.n = 0;
    return b;
}

/* lossless JPEG 2000 codestreams (RGB and one gray component) round trip exactly */
KN_TEST(image_decoder_jpeg2000_lossless) {
    const int w = 11, h = 9;
    uint8_t px[11 * 9 * 3];
    test_card(px, w, h, 3);
    for (int nc = 1; nc <= 3; nc += 2) {
        j2k_buf b = j2k_encode(px, w, h, nc);
        CHECK_MSG(b.n > 0, "OpenJPEG did not encode the %d-component test image", nc);
        if (!b.n) continue;
        kiln_status st;
        kn_tensor *y = decode(b.d, (int64_t)b.n, "RGB", &st);
        CHECK_STATUS(st, KILN_OK);
        if (nc == 3) {
            check_decoded_card(y, px, w, h, 3);
        } else { /* one component: replicated into R, G and B */
            uint8_t gray[11 * 9 * 3];
            for (int i = 0; i < w * h; i++) gray[i * 3] = gray[i * 3 + 1] = gray[i * 3 + 2] = px[i * 3];
            check_decoded_card(y, gray, w, h, 3);
        }
        kn_tensor_free(y);
        /* cut short after its header: a status naming the format, not a crash */
        y = decode(b.d, (int64_t)(b.n / 2), "RGB", &st);
        CHECK(st == KILN_ERR_INVALID_ARGUMENT && y == NULL);
        CHECK_ERROR_HAS("JPEG 2000");
        free(b.d);
    }
}
#endif

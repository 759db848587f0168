/* Hostile arithmetic (issue 24): float-to-integer conversions of NaN and inf from zero scales are
 * defined (the type's minimum for NaN, saturation for inf, as ONNX Runtime on x86), and sizes
 * derived from attributes or constants are bounded before anything is allocated, with a message
 * naming the node and the size. */
#include "kiln.h"
#include "ir/tensor.h"
#include "test_model_builder.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static kn_tensor *const_u8(const int64_t *dims, int rank, const uint8_t *v, kiln_dtype dt) {
    kn_tensor *t;
    kn_tensor_new(dt, rank, dims, &t);
    memcpy(t->data, v, t->nbytes);
    return t;
}

static kn_tensor *scalar_f(float v) {
    kn_tensor *t;
    kn_tensor_new(KILN_DTYPE_FLOAT, 0, NULL, &t);
    *(float *)t->data = v;
    return t;
}

/* Creates a session from the model (level 0, CPU) and runs it on input x; the output's bytes in
 * out (n of them). Returns the status of the first step that failed. */
static kiln_status run_model(unsigned char *data, size_t size, kiln_dtype dt, const int64_t *dims, int rank,
                             const void *x, void *out, size_t n) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_opt_level(o, 0);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(data, size, NULL, o, &s);
    kiln_session_options_destroy(o);
    if (st != KILN_OK) return st;
    kiln_tensor *in = NULL, *y = NULL;
    st = kiln_tensor_create(dt, dims, rank, &in);
    if (st == KILN_OK) {
        memcpy(kiln_tensor_data(in), x, kiln_tensor_bytes(in));
        kiln_value_info info;
        kiln_session_input_info(s, 0, &info);
        const char *names[1] = {info.name};
        st = kiln_session_run(s, names, &in, 1, NULL, 1, &y);
    }
    if (st == KILN_OK) memcpy(out, kiln_tensor_data(y), n);
    kiln_tensor_destroy(in);
    kiln_tensor_destroy(y);
    kiln_session_destroy(s);
    return st;
}

/* QLinearMatMul and QLinearConv with zero scales: a_scale 0 and y_scale 0 make the multiplier
 * 0/0 = NaN (was a cast of NaN to uint8/int8: undefined, reported by clang's
 * -fsanitize=float-cast-overflow); a_scale 1 and y_scale 0 make it inf (saturates). */
KN_TEST(hostile_qlinear_zero_scales_are_defined) {
    for (int conv = 0; conv < 2; conv++)
        for (int sgn = 0; sgn < 2; sgn++)
            for (int nan = 0; nan < 2; nan++) {
                kiln_dtype dt = sgn ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8;
                tmb b;
                tmb_init(&b, 13);
                int64_t xd4[4] = {1, 1, 2, 2}, xd2[2] = {2, 2}, wd4[4] = {1, 1, 1, 1}, wd2[2] = {2, 2};
                static const uint8_t ident[4] = {1, 0, 0, 1}, one[1] = {1}, zero[1] = {0};
                int x = tmb_input(&b, "x", dt, conv ? 4 : 2, conv ? xd4 : xd2, NULL);
                int xs = tmb_const_tensor(&b, "xs", scalar_f(nan ? 0.0f : 1.0f));
                int xz = tmb_const_tensor(&b, "xz", const_u8(NULL, 0, zero, dt));
                int w = tmb_const_tensor(&b, "w", conv ? const_u8(wd4, 4, one, dt) : const_u8(wd2, 2, ident, dt));
                int ws = tmb_const_tensor(&b, "ws", scalar_f(1.0f));
                int wz = tmb_const_tensor(&b, "wz", const_u8(NULL, 0, zero, dt));
                int ys = tmb_const_tensor(&b, "ys", scalar_f(0.0f));
                int yz = tmb_const_tensor(&b, "yz", const_u8(NULL, 0, zero, dt));
                int y = tmb_value(&b, "y");
                int in[8];
                if (conv) {
                    int order[8] = {x, xs, xz, w, ws, wz, ys, yz};
                    memcpy(in, order, sizeof in);
                } else {
                    int order[8] = {x, xs, xz, w, ws, wz, ys, yz};
                    memcpy(in, order, sizeof in);
                }
                tmb_node(&b, conv ? "QLinearConv" : "QLinearMatMul", in, 8, y);
                kn_type_set_tensor(&b.g->values[y].type, dt, conv ? 4 : 2, conv ? xd4 : xd2);
                tmb_output(&b, y);
                size_t size;
                unsigned char *data = tmb_finish(&b, &size);
                uint8_t xv[4] = {3, 0, 5, 7}, got[4] = {0xAA, 0xAA, 0xAA, 0xAA};
                CHECK_STATUS(run_model(data, size, dt, conv ? xd4 : xd2, conv ? 4 : 2, xv, got, 4), KILN_OK);
                free(data);
                for (int i = 0; i < 4; i++) {
                    int v = sgn ? (int)(int8_t)got[i] : (int)got[i];
                    int lo = sgn ? -128 : 0, hi = sgn ? 127 : 255;
                    /* NaN: the minimum everywhere; inf: the maximum where the product is positive,
                     * the minimum where it is 0 (0 * inf = NaN) */
                    int want = nan ? lo : xv[i] ? hi : lo;
                    CHECK_MSG(v == want, "%s %s %s: element %d is %d, expected %d", conv ? "QLinearConv" : "QLinearMatMul",
                              sgn ? "int8" : "uint8", nan ? "0/0" : "1/0", i, v, want);
                }
            }
}

static double ms_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static kiln_status create_only(unsigned char *data, size_t size) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(data, size, NULL, o, &s);
    kiln_session_options_destroy(o);
    kiln_session_destroy(s);
    return st;
}

/* A TfIdfVectorizer whose one ngram_indexes entry asks for a 2^40-column output (was 7 GB from a
 * 300-byte model): refused at session creation, naming the node and the size. */
KN_TEST(hostile_tfidf_width_from_an_attribute_is_bounded) {
    for (int huge = 0; huge < 2; huge++) {
        tmb b;
        tmb_init(&b, 13);
        int64_t xd[1] = {4};
        int x = tmb_input(&b, "x", KILN_DTYPE_INT64, 1, xd, NULL);
        int y = tmb_value(&b, "y");
        int node = tmb_node(&b, "TfIdfVectorizer", &x, 1, y);
        b.g->nodes[node].name = "tfidf_bomb";
        tmb_str(&b, node, "mode", "TF");
        tmb_int(&b, node, "min_gram_length", 1);
        tmb_int(&b, node, "max_gram_length", 1);
        tmb_int(&b, node, "max_skip_count", 0);
        int64_t counts[1] = {0}, pool[2] = {1, 2}, idx[2] = {0, huge ? (int64_t)1 << 40 : 200000000};
        tmb_ints(&b, node, "ngram_counts", counts, 1);
        tmb_ints(&b, node, "pool_int64s", pool, 2);
        tmb_ints(&b, node, "ngram_indexes", idx, 2);
        tmb_output(&b, y);
        size_t size;
        unsigned char *data = tmb_finish(&b, &size);
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHECK_STATUS(create_only(data, size), KILN_ERR_INVALID_MODEL);
        CHECK_ERROR_HAS("tfidf_bomb");
        CHECK_ERROR_HAS(huge ? "1099511627776" : "200000000");
        CHECK_ERROR_HAS("columns wide");
        CHECK(ms_since(&t0) < 2000);
        free(data);
    }
}

/* Conv with pads of 14M on an 8-element input (was 2.3 GB and 44 s): refused at once. Pads within
 * the input and kernel still work. */
KN_TEST(hostile_conv_pads_from_an_attribute_are_bounded) {
    for (int bomb = 0; bomb < 2; bomb++) {
        tmb b;
        tmb_init(&b, 13);
        int64_t xd[3] = {1, 1, 8}, wd[3] = {1, 1, 3};
        int in[2];
        in[0] = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, xd, NULL);
        in[1] = tmb_const(&b, "w", 3, wd, 1.0f);
        int y = tmb_value(&b, "y");
        int node = tmb_node(&b, "Conv", in, 2, y);
        b.g->nodes[node].name = "conv_bomb";
        int64_t pads[2] = {bomb ? 14000000 : 2, bomb ? 14000000 : 11};
        tmb_ints(&b, node, "pads", pads, 2);
        tmb_output(&b, y);
        size_t size;
        unsigned char *data = tmb_finish(&b, &size);
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (bomb) {
            CHECK_STATUS(create_only(data, size), KILN_ERR_INVALID_MODEL);
            CHECK_ERROR_HAS("conv_bomb");
            CHECK_ERROR_HAS("pads 14000000+14000000 are larger than the input (8)");
        } else {
            float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8 + 2 + 11 - 2];
            CHECK_STATUS(run_model(data, size, KILN_DTYPE_FLOAT, xd, 3, x, out, sizeof out), KILN_OK);
        }
        CHECK(ms_since(&t0) < 2000);
        free(data);
    }
}

/* Every host tensor is bounded by the tensor size limit (the machine's memory, or
 * KILN_MAX_TENSOR_BYTES), wherever its shape comes from: an Expand of one float to
 * [1024, 1024, 64] (256 MiB) under a 16 MiB limit fails the run with KILN_ERR_OUT_OF_MEMORY and a
 * message with the shape and the limit, at once, and the same model runs under the default limit. */
KN_TEST(hostile_any_tensor_is_bounded_by_the_size_limit) {
    tmb b;
    tmb_init(&b, 13);
    int64_t xd[1] = {1}, shape[3] = {1024, 1024, 64};
    int in[2];
    in[0] = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 1, xd, NULL);
    in[1] = tmb_const_i64(&b, "shape", shape, 3, false);
    int y = tmb_value(&b, "y");
    int node = tmb_node(&b, "Expand", in, 2, y);
    b.g->nodes[node].name = "expand_bomb";
    tmb_output(&b, y);
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);
    float x[1] = {2.0f}, first[4];
    setenv("KILN_MAX_TENSOR_BYTES", "16M", 1);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_STATUS(run_model(data, size, KILN_DTYPE_FLOAT, xd, 1, x, first, sizeof first), KILN_ERR_OUT_OF_MEMORY);
    CHECK_ERROR_HAS("expand_bomb");
    CHECK_ERROR_HAS("[1024,1024,64]");
    CHECK_ERROR_HAS("more than the limit of 16777216");
    CHECK(ms_since(&t0) < 2000);
    unsetenv("KILN_MAX_TENSOR_BYTES");
    CHECK_STATUS(run_model(data, size, KILN_DTYPE_FLOAT, xd, 1, x, first, sizeof first), KILN_OK);
    CHECK(first[0] == 2.0f && first[3] == 2.0f);
    free(data);
}

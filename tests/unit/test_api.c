/* The public API: argument checks, ownership, and every bad input a caller can give. */
#include "kiln.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

/* Z = Relu(X + Y), X float [N,3] (N symbolic), Y float [1,3], opset 17. Made with
 * onnx.helper (onnx 1.23): make_node Add/Relu, make_graph "api_test", make_model(ir_version=8). */
static const unsigned char kAddRelu[] = {
    0x08, 0x08, 0x12, 0x0a, 0x6b, 0x69, 0x6c, 0x6e, 0x2d, 0x74, 0x65, 0x73, 0x74, 0x73, 0x3a, 0x76,
    0x0a, 0x14, 0x0a, 0x01, 0x58, 0x0a, 0x01, 0x59, 0x12, 0x01, 0x53, 0x1a, 0x04, 0x61, 0x64, 0x64,
    0x30, 0x22, 0x03, 0x41, 0x64, 0x64, 0x0a, 0x13, 0x0a, 0x01, 0x53, 0x12, 0x01, 0x5a, 0x1a, 0x05,
    0x72, 0x65, 0x6c, 0x75, 0x30, 0x22, 0x04, 0x52, 0x65, 0x6c, 0x75, 0x12, 0x08, 0x61, 0x70, 0x69,
    0x5f, 0x74, 0x65, 0x73, 0x74, 0x5a, 0x14, 0x0a, 0x01, 0x58, 0x12, 0x0f, 0x0a, 0x0d, 0x08, 0x01,
    0x12, 0x09, 0x0a, 0x03, 0x12, 0x01, 0x4e, 0x0a, 0x02, 0x08, 0x03, 0x5a, 0x13, 0x0a, 0x01, 0x59,
    0x12, 0x0e, 0x0a, 0x0c, 0x08, 0x01, 0x12, 0x08, 0x0a, 0x02, 0x08, 0x01, 0x0a, 0x02, 0x08, 0x03,
    0x62, 0x14, 0x0a, 0x01, 0x5a, 0x12, 0x0f, 0x0a, 0x0d, 0x08, 0x01, 0x12, 0x09, 0x0a, 0x03, 0x12,
    0x01, 0x4e, 0x0a, 0x02, 0x08, 0x03, 0x42, 0x04, 0x0a, 0x00, 0x10, 0x11};

static kiln_session *make_session(void) {
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(kAddRelu, sizeof kAddRelu, NULL, NULL, &s);
    if (st != KILN_OK) kn_unit_fail(__FILE__, __LINE__, "session: %s", kiln_last_error());
    return s;
}

KN_TEST(api_version_and_status_names) {
    CHECK(kiln_version()[0] >= '0' && kiln_version()[0] <= '9');
    CHECK(!strcmp(kiln_status_name(KILN_ERR_SHAPE), "KILN_ERR_SHAPE"));
    CHECK(!strcmp(kiln_status_name((kiln_status)999), "KILN_STATUS_UNKNOWN"));
    CHECK(!strcmp(kiln_dtype_name(KILN_DTYPE_BFLOAT16), "bfloat16"));
    CHECK_EQ_INT(kiln_dtype_size(KILN_DTYPE_INT64), 8);
}

KN_TEST(api_destroy_null_is_a_no_op) {
    kiln_session_destroy(NULL);
    kiln_session_options_destroy(NULL);
    kiln_tensor_destroy(NULL);
}

KN_TEST(api_null_and_empty_arguments) {
    kiln_session *s = (kiln_session *)1;
    CHECK_STATUS(kiln_session_create(NULL, NULL, &s), KILN_ERR_INVALID_ARGUMENT);
    CHECK(s == NULL);
    CHECK_STATUS(kiln_session_create("", NULL, &s), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("empty");
    CHECK_STATUS(kiln_session_create("x.onnx", NULL, NULL), KILN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(kiln_session_create_from_memory(NULL, 10, NULL, NULL, &s), KILN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(kiln_session_options_create(NULL), KILN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(kiln_session_options_set_opt_level(NULL, 1), KILN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(kiln_tensor_create(KILN_DTYPE_FLOAT, NULL, 0, NULL), KILN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(kiln_session_run(NULL, NULL, NULL, 0, NULL, 0, NULL), KILN_ERR_INVALID_ARGUMENT);
}

KN_TEST(api_missing_file_names_the_path) {
    kiln_session *s = NULL;
    CHECK_STATUS(kiln_session_create("/nonexistent/dir/model.onnx", NULL, &s), KILN_ERR_IO);
    CHECK_ERROR_HAS("/nonexistent/dir/model.onnx");
    CHECK(s == NULL);
}

KN_TEST(api_options_validation) {
    kiln_session_options *o = NULL;
    CHECK_STATUS(kiln_session_options_create(&o), KILN_OK);
    CHECK_STATUS(kiln_session_options_set_opt_level(o, 4), KILN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(kiln_session_options_set_opt_level(o, 0), KILN_OK);
    CHECK_STATUS(kiln_session_options_append_provider(o, "tpu", NULL, NULL, 0), KILN_ERR_NOT_FOUND);
    CHECK_ERROR_HAS("tpu");
    const char *k[] = {"no_such_key"}, *v[] = {"1"};
    CHECK_STATUS(kiln_session_options_append_provider(o, "cuda", k, v, 1), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("no_such_key");
    CHECK_STATUS(kiln_session_options_append_provider(o, "cpu", NULL, NULL, 0), KILN_OK);
    CHECK_STATUS(kiln_session_options_append_provider(o, "cpu", NULL, NULL, 0), KILN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(kiln_session_options_set_dump_path(o, ""), KILN_OK); /* "" means unset */
    CHECK_STATUS(kiln_session_options_set_compiled_paths(o, NULL, ""), KILN_OK);
    CHECK_STATUS(kiln_session_options_set_dim(o, "", 3), KILN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(kiln_session_options_disable_pass(o, NULL), KILN_ERR_INVALID_ARGUMENT);
    kiln_session_options_destroy(o);
}

KN_TEST(api_cuda_without_device_is_a_clear_error) {
    if (kiln_provider_available("cuda", NULL)) KN_SKIP("a CUDA device is available here");
    kiln_session_options *o = NULL;
    kiln_session *s = NULL;
    kiln_session_options_create(&o);
    CHECK_STATUS(kiln_session_options_append_provider(o, "cuda", NULL, NULL, 0), KILN_OK);
    CHECK_STATUS(kiln_session_create_from_memory(kAddRelu, sizeof kAddRelu, NULL, o, &s), KILN_ERR_NO_DEVICE);
    CHECK_ERROR_HAS("no CUDA device");
    /* with cpu listed after it, the session falls back */
    CHECK_STATUS(kiln_session_options_append_provider(o, "cpu", NULL, NULL, 0), KILN_OK);
    CHECK_STATUS(kiln_session_create_from_memory(kAddRelu, sizeof kAddRelu, NULL, o, &s), KILN_OK);
    kiln_session_destroy(s);
    kiln_session_options_destroy(o);
}

/* What a session runs on: the CPU when nothing is listed, the listed providers that could be used
 * with their options (a CUDA provider passed over for the CPU is not reported), and a range check. */
KN_TEST(api_session_reports_its_providers) {
    kiln_session *s = make_session();
    const char *name = NULL;
    size_t n_opts = 9;
    CHECK(kiln_session_provider_count(s) == 1);
    CHECK_STATUS(kiln_session_provider(s, 0, &name, &n_opts, NULL, NULL), KILN_OK);
    CHECK(name && !strcmp(name, "cpu") && n_opts == 0);
    CHECK_STATUS(kiln_session_provider(s, 1, &name, NULL, NULL, NULL), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("provider index 1 is out of range (the session has 1)");
    CHECK(kiln_session_provider_count(NULL) == 0);
    kiln_session_destroy(s);

    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    const char *key[1] = {"precision"}, *fp32[1] = {"fp32"};
    kiln_session_options_append_provider(o, "cuda", NULL, NULL, 0);
    kiln_session_options_append_provider(o, "cpu", key, fp32, 1);
    s = NULL;
    CHECK_STATUS(kiln_session_create_from_memory(kAddRelu, sizeof kAddRelu, NULL, o, &s), KILN_OK);
    size_t cuda = kiln_provider_available("cuda", NULL) ? 1 : 0;
    CHECK(kiln_session_provider_count(s) == 1 + cuda);
    if (cuda) {
        CHECK_STATUS(kiln_session_provider(s, 0, &name, &n_opts, NULL, NULL), KILN_OK);
        CHECK(name && !strcmp(name, "cuda") && n_opts == 0);
    }
    const char *const *keys = NULL, *const *values = NULL;
    CHECK_STATUS(kiln_session_provider(s, cuda, &name, &n_opts, &keys, &values), KILN_OK);
    CHECK(name && !strcmp(name, "cpu") && n_opts == 1 && keys && values);
    if (n_opts == 1 && keys && values) CHECK(!strcmp(keys[0], "precision") && !strcmp(values[0], "fp32"));
    kiln_session_destroy(s);
    kiln_session_options_destroy(o);
}

KN_TEST(api_io_info) {
    kiln_session *s = make_session();
    if (!s) return;
    CHECK_EQ_INT(kiln_session_input_count(s), 2);
    CHECK_EQ_INT(kiln_session_output_count(s), 1);
    kiln_value_info info;
    CHECK_STATUS(kiln_session_input_info(s, 0, &info), KILN_OK);
    CHECK(!strcmp(info.name, "X"));
    CHECK_EQ_INT(info.dtype, KILN_DTYPE_FLOAT);
    CHECK_EQ_INT(info.rank, 2);
    CHECK_EQ_INT(info.dims[0], -1);
    CHECK(info.dim_names[0] && !strcmp(info.dim_names[0], "N"));
    CHECK_EQ_INT(info.dims[1], 3);
    CHECK_STATUS(kiln_session_output_info(s, 0, &info), KILN_OK);
    CHECK(!strcmp(info.name, "Z"));
    CHECK_STATUS(kiln_session_input_info(s, 2, &info), KILN_ERR_INVALID_ARGUMENT);
    kiln_session_destroy(s);
}

KN_TEST(api_run_computes_and_wraps_without_copying) {
    kiln_session *s = make_session();
    if (!s) return;
    float x[6] = {-1, 2, -3, 4, -5, 6}, y[3] = {0.5f, -10, 1};
    int64_t xd[2] = {2, 3}, yd[2] = {1, 3};
    kiln_tensor *tx = NULL, *ty = NULL, *out = NULL;
    CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_FLOAT, xd, 2, x, sizeof x, &tx), KILN_OK);
    CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_FLOAT, yd, 2, y, sizeof y, &ty), KILN_OK);
    CHECK(kiln_tensor_data(tx) == (void *)x);
    const char *names[] = {"X", "Y"}, *outs[] = {"Z"};
    kiln_tensor *ins[] = {tx, ty};
    CHECK_STATUS(kiln_session_run(s, names, ins, 2, outs, 1, &out), KILN_OK);
    if (out) {
        CHECK_EQ_INT(kiln_tensor_rank(out), 2);
        CHECK_EQ_INT(kiln_tensor_dims(out)[0], 2);
        const float *z = kiln_tensor_data(out);
        for (int i = 0; i < 6; i++) {
            float want = x[i] + y[i % 3];
            CHECK_NEAR(z[i], want > 0 ? want : 0, 0);
        }
    }
    kiln_tensor_destroy(out);
    kiln_tensor_destroy(tx);
    kiln_tensor_destroy(ty);
    kiln_session_destroy(s);
}

/* An output handed to the caller may outlive its session (its memory comes from the session's
 * buffer pool, which stays until the last such output is destroyed). Run under the sanitizers in
 * CI: a pool freed too early is a use after free, one never freed a leak. */
KN_TEST(api_outputs_outlive_the_session_and_return_their_memory) {
    kiln_session *s = make_session();
    if (!s) return;
    enum { N = 4096 }; /* rows: a 48 KiB output */
    static float x[N * 3], y[3] = {0.5f, -10, 1};
    for (int i = 0; i < N * 3; i++) x[i] = (float)(i % 7) - 3;
    int64_t xd[2] = {N, 3}, yd[2] = {1, 3};
    kiln_tensor *tx = NULL, *ty = NULL, *first = NULL, *second = NULL;
    CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_FLOAT, xd, 2, x, sizeof x, &tx), KILN_OK);
    CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_FLOAT, yd, 2, y, sizeof y, &ty), KILN_OK);
    const char *names[] = {"X", "Y"}, *outs[] = {"Z"};
    kiln_tensor *ins[] = {tx, ty};
    CHECK_STATUS(kiln_session_run(s, names, ins, 2, outs, 1, &first), KILN_OK);
    kiln_tensor_destroy(first);
    CHECK_STATUS(kiln_session_run(s, names, ins, 2, outs, 1, &second), KILN_OK);
    kiln_session_destroy(s);
    /* the session is gone; its output is still whole */
    if (second) {
        const float *z = kiln_tensor_data(second);
        for (int i = 0; i < N * 3; i += 97) {
            float want = x[i] + y[i % 3];
            CHECK_NEAR(z[i], want > 0 ? want : 0, 0);
        }
    }
    kiln_tensor_destroy(second);
    kiln_tensor_destroy(tx);
    kiln_tensor_destroy(ty);
}

KN_TEST(api_bad_inputs_are_named) {
    kiln_session *s = make_session();
    if (!s) return;
    float buf[64] = {0};
    int64_t d23[2] = {2, 3}, d13[2] = {1, 3}, d24[2] = {2, 4}, d3[1] = {3};
    kiln_tensor *x = NULL, *y = NULL, *bad = NULL, *out = NULL;
    kiln_tensor_wrap(KILN_DTYPE_FLOAT, d23, 2, buf, sizeof buf, &x);
    kiln_tensor_wrap(KILN_DTYPE_FLOAT, d13, 2, buf, sizeof buf, &y);
    const char *names[] = {"X", "Y"};

    const char *wrong[] = {"X", "W"};
    kiln_tensor *ins[] = {x, y};
    CHECK_STATUS(kiln_session_run(s, wrong, ins, 2, NULL, 1, &out), KILN_ERR_NOT_FOUND);
    CHECK_ERROR_HAS("'W'");
    CHECK(out == NULL);

    CHECK_STATUS(kiln_session_run(s, names, ins, 1, NULL, 1, &out), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("'Y'"); /* missing input */

    kiln_tensor_wrap(KILN_DTYPE_INT32, d13, 2, buf, sizeof buf, &bad);
    kiln_tensor *ins_type[] = {x, bad};
    CHECK_STATUS(kiln_session_run(s, names, ins_type, 2, NULL, 1, &out), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("int32");
    kiln_tensor_destroy(bad);

    kiln_tensor_wrap(KILN_DTYPE_FLOAT, d3, 1, buf, sizeof buf, &bad);
    kiln_tensor *ins_rank[] = {x, bad};
    CHECK_STATUS(kiln_session_run(s, names, ins_rank, 2, NULL, 1, &out), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("rank 1");
    kiln_tensor_destroy(bad);

    kiln_tensor_wrap(KILN_DTYPE_FLOAT, d24, 2, buf, sizeof buf, &bad);
    kiln_tensor *ins_dim[] = {bad, y};
    CHECK_STATUS(kiln_session_run(s, names, ins_dim, 2, NULL, 1, &out), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("dimension 1 is 4");
    kiln_tensor_destroy(bad);

    const char *no_out[] = {"Q"};
    CHECK_STATUS(kiln_session_run(s, names, ins, 2, no_out, 1, &out), KILN_ERR_NOT_FOUND);
    CHECK_ERROR_HAS("'Q'");

    CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_FLOAT, d23, 2, buf, 4, &bad), KILN_ERR_INVALID_ARGUMENT);
    int64_t neg[1] = {-2};
    CHECK_STATUS(kiln_tensor_create(KILN_DTYPE_FLOAT, neg, 1, &bad), KILN_ERR_SHAPE);
    int64_t huge[3] = {1LL << 40, 1LL << 40, 1LL << 40};
    CHECK_STATUS(kiln_tensor_create(KILN_DTYPE_FLOAT, huge, 3, &bad), KILN_ERR_SHAPE);
    kiln_tensor_destroy(x);
    kiln_tensor_destroy(y);
    kiln_session_destroy(s);
}

/* A kernel's own scratch memory is bounded (issue 24): kn_ctx_scratch refuses more than the tensor
 * size limit (KILN_MAX_TENSOR_BYTES) or than the run's memory limit leaves room for, with a
 * message naming the node, what and the size, and counts what it gives in the run's memory until
 * it is freed. Checked directly and through DeformConv, whose im2col matrix (C*kH*kW x oH*oW
 * floats) is far larger than any of its inputs or outputs. */
#include "exec/exec.h"
#include "exec/kernel.h"
#include "kiln.h"
#include "test_model_builder.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

KN_TEST(scratch_is_bounded_and_counted_in_the_run) {
    kn_run_ctx r;
    memset(&r, 0, sizeof r);
    kn_run_ctx_begin(&r, NULL, 0, 1000);
    kn_exec x;
    memset(&x, 0, sizeof x);
    x.run = &r;
    kn_kernel_ctx c;
    memset(&c, 0, sizeof c);
    c.exec = &x;
    void *a = NULL, *b = NULL;
    CHECK_STATUS(kn_ctx_scratch(&c, 600, "the first buffer", &a), KILN_OK);
    CHECK(a && ((uintptr_t)a % 64) == 0);
    CHECK_EQ_INT((int)r.mem_live, 600);
    CHECK_STATUS(kn_ctx_scratch(&c, 600, "the second buffer", &b), KILN_ERR_OUT_OF_MEMORY);
    CHECK(!b);
    CHECK_ERROR_HAS("the second buffer needs 600 bytes of scratch memory");
    CHECK_ERROR_HAS("the run already holds 600 bytes");
    CHECK_ERROR_HAS("memory limit of 1000 bytes");
    CHECK_EQ_INT((int)r.mem_live, 600);
    kn_ctx_scratch_free(&c, a, 600);
    CHECK_EQ_INT((int)r.mem_live, 0);
    CHECK_STATUS(kn_ctx_scratch(&c, 600, "the second buffer", &b), KILN_OK);
    kn_ctx_scratch_free(&c, b, 600);
    CHECK_EQ_INT((int)r.mem_live, 0);
    CHECK_EQ_INT((int)r.mem_peak, 600);
    /* no run (a kernel called directly): the tensor size limit still holds */
    setenv("KILN_MAX_TENSOR_BYTES", "4K", 1);
    kn_kernel_ctx bare;
    memset(&bare, 0, sizeof bare);
    CHECK_STATUS(kn_ctx_scratch(&bare, 8192, "a table", &a), KILN_ERR_OUT_OF_MEMORY);
    CHECK_ERROR_HAS("a table needs 8192 bytes of scratch memory, more than the tensor size limit of 4096 bytes");
    CHECK_STATUS(kn_ctx_scratch(&bare, SIZE_MAX, "a table", &a), KILN_ERR_OUT_OF_MEMORY);
    unsetenv("KILN_MAX_TENSOR_BYTES");
    CHECK_STATUS(kn_ctx_scratch(&bare, 0, "nothing", &a), KILN_OK);
    kn_ctx_scratch_free(&bare, a, 0);
}

/* y = DeformConv(x [1,16,64,64], w [1,16,3,3], zero offsets): its im2col matrix is 16*9 x 62*62
 * floats, 2214144 bytes, against 262144 bytes of x. */
static unsigned char *deform_model(size_t *size) {
    tmb b;
    tmb_init(&b, 19);
    int64_t xd[4] = {1, 16, 64, 64}, wd[4] = {1, 16, 3, 3}, od[4] = {1, 18, 62, 62};
    int in[3];
    in[0] = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, xd, NULL);
    in[1] = tmb_const(&b, "w", 4, wd, 1.0f);
    in[2] = tmb_const(&b, "offset", 4, od, 0.0f);
    int y = tmb_value(&b, "y");
    int node = tmb_node(&b, "DeformConv", in, 3, y);
    b.g->nodes[node].name = "deform";
    tmb_output(&b, y);
    return tmb_finish(&b, size);
}

static kiln_status run_deform(const unsigned char *data, size_t size, uint64_t mem_limit, float *y0) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_opt_level(o, 0);
    if (mem_limit) kiln_session_options_set_memory_limit(o, mem_limit);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(data, size, NULL, o, &s);
    kiln_session_options_destroy(o);
    if (st != KILN_OK) return st;
    int64_t xd[4] = {1, 16, 64, 64};
    kiln_tensor *in = NULL, *y = NULL;
    st = kiln_tensor_create(KILN_DTYPE_FLOAT, xd, 4, &in);
    if (st == KILN_OK) {
        float *x = kiln_tensor_data(in);
        for (int i = 0; i < 16 * 64 * 64; i++) x[i] = 1.0f;
        const char *names[1] = {"x"};
        /* twice: what the first run's scratch counted is given back */
        for (int k = 0; k < 2 && st == KILN_OK; k++) {
            kiln_tensor_destroy(y);
            y = NULL;
            st = kiln_session_run(s, names, &in, 1, NULL, 1, &y);
        }
        if (st == KILN_OK && y0) *y0 = *(const float *)kiln_tensor_data(y);
    }
    kiln_tensor_destroy(in);
    kiln_tensor_destroy(y);
    kiln_session_destroy(s);
    return st;
}

KN_TEST(scratch_of_deform_conv_is_bounded) {
    size_t size;
    unsigned char *data = deform_model(&size);
    float y0 = 0, y1 = 0;
    CHECK_STATUS(run_deform(data, size, 0, &y0), KILN_OK);
    /* 3 MiB of run memory is room for the matrix (and the 15 KB output), run after run */
    CHECK_STATUS(run_deform(data, size, 3 << 20, &y1), KILN_OK);
    CHECK(y0 == y1);
    CHECK_STATUS(run_deform(data, size, 1 << 20, NULL), KILN_ERR_OUT_OF_MEMORY);
    CHECK_ERROR_HAS("deform");
    CHECK_ERROR_HAS("the deformed im2col matrix needs 2214144 bytes of scratch memory");
    CHECK_ERROR_HAS("memory limit of 1048576 bytes");
    setenv("KILN_MAX_TENSOR_BYTES", "1M", 1);
    CHECK_STATUS(run_deform(data, size, 0, NULL), KILN_ERR_OUT_OF_MEMORY);
    CHECK_ERROR_HAS("the deformed im2col matrix needs 2214144 bytes of scratch memory, more than the tensor size "
                    "limit of 1048576 bytes");
    unsetenv("KILN_MAX_TENSOR_BYTES");
    free(data);
}

/* ConvTranspose's column buffer: x [1,1,8,8], w [1,64,15,15] gives 64*225 x 64 floats (3686400
 * bytes) for a 123904-byte output (dilated: the undilated one goes to the phase GEMM, conv.c's
 * ct_phase_*, which has no column buffer). */
KN_TEST(scratch_of_conv_transpose_is_bounded) {
    tmb b;
    tmb_init(&b, 17);
    int64_t xd[4] = {1, 1, 8, 8}, wd[4] = {1, 64, 15, 15};
    int in[2];
    in[0] = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, xd, NULL);
    in[1] = tmb_const(&b, "w", 4, wd, 1.0f);
    int y = tmb_value(&b, "y");
    int node = tmb_node(&b, "ConvTranspose", in, 2, y);
    b.g->nodes[node].name = "up";
    tmb_ints(&b, node, "dilations", (int64_t[]){2, 2}, 2);
    tmb_output(&b, y);
    size_t size;
    unsigned char *data = tmb_finish(&b, &size);
    for (int limited = 0; limited < 2; limited++) {
        kiln_session_options *o = NULL;
        kiln_session_options_create(&o);
        kiln_session_options_set_cache(o, 0, NULL);
        kiln_session_options_set_opt_level(o, 0);
        kiln_session_options_set_memory_limit(o, limited ? 1 << 20 : 8 << 20);
        kiln_session *s = NULL;
        CHECK_STATUS(kiln_session_create_from_memory(data, size, NULL, o, &s), KILN_OK);
        kiln_session_options_destroy(o);
        kiln_tensor *x = NULL, *out = NULL;
        CHECK_STATUS(kiln_tensor_create(KILN_DTYPE_FLOAT, xd, 4, &x), KILN_OK);
        const char *names[1] = {"x"};
        if (s && x) {
            CHECK_STATUS(kiln_session_run(s, names, &x, 1, NULL, 1, &out), limited ? KILN_ERR_OUT_OF_MEMORY : KILN_OK);
            if (limited) {
                CHECK_ERROR_HAS("'up' (ConvTranspose");
                CHECK_ERROR_HAS("the column buffer needs 3686400 bytes of scratch memory");
            }
        }
        kiln_tensor_destroy(x);
        kiln_tensor_destroy(out);
        kiln_session_destroy(s);
    }
    free(data);
}

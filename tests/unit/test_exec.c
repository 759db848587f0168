/* The executor's views: a Reshape/Flatten/Squeeze/Unsqueeze/Identity that reads the last use of a
 * tensor its run made takes that tensor under the new shape (src/exec/exec.c, take_as_view). What
 * must hold: a value with a later reader, a graph output, or a caller's input is never taken (its
 * elements and shape stay as they were), chains of views keep the elements, and repeated runs
 * (the buffer pool reusing blocks) give the same outputs. References computed here. And the
 * runtime's word on provider options that cannot act. */
#include "test_model_builder.h"

#include "exec/session.h"
#include "kiln.h"

#include <stdio.h>
#include <unistd.h>

/* x [2,3] (input)
 *   a  = Relu(x)                 read by r1, s (twice) and the output list: never taken
 *   r1 = Reshape(a, [3,2])       a has later readers: copied
 *   s  = Add(a, a)
 *   r2 = Reshape(s, [6])         s's last use: taken
 *   u  = Unsqueeze(r2, [0])      r2's last use: taken -> [1,6]
 *   f  = Flatten(u)              u's last use: taken -> [1,6]
 *   ix = Identity(x)             x is the caller's: copied
 * outputs r1, f, ix, a */
static unsigned char *views_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int64_t xd[2] = {2, 3}, s32[2] = {3, 2}, s6[1] = {6}, ax0[1] = {0};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, xd, NULL);
    int shape32 = tmb_const_i64(&b, "shape32", s32, 2, false), shape6 = tmb_const_i64(&b, "shape6", s6, 1, false);
    int axes = tmb_const_i64(&b, "axes", ax0, 1, false);
    int a = tmb_value(&b, "a"), r1 = tmb_value(&b, "r1"), s = tmb_value(&b, "s"), r2 = tmb_value(&b, "r2");
    int u = tmb_value(&b, "u"), f = tmb_value(&b, "f"), ix = tmb_value(&b, "ix");
    tmb_node(&b, "Relu", (int[]){x}, 1, a);
    tmb_node(&b, "Reshape", (int[]){a, shape32}, 2, r1);
    tmb_node(&b, "Add", (int[]){a, a}, 2, s);
    tmb_node(&b, "Reshape", (int[]){s, shape6}, 2, r2);
    tmb_node(&b, "Unsqueeze", (int[]){r2, axes}, 2, u);
    tmb_node(&b, "Flatten", (int[]){u}, 1, f);
    tmb_node(&b, "Identity", (int[]){x}, 1, ix);
    tmb_output(&b, r1);
    tmb_output(&b, f);
    tmb_output(&b, ix);
    tmb_output(&b, a);
    return tmb_finish(&b, size);
}

KN_TEST(exec_views_take_only_a_last_use) {
    size_t size;
    unsigned char *m = views_model(&size);
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, 0); /* the views as written, none folded away */
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session *s = NULL;
    CHECK_STATUS(kiln_session_create_from_memory(m, size, NULL, o, &s), KILN_OK);
    kiln_session_options_destroy(o);
    free(m);
    if (!s) return;
    float xv[6] = {-1.5f, 2, 0.25f, 3, -0.5f, 4};
    int64_t xd[2] = {2, 3};
    kiln_tensor *x = NULL;
    CHECK_STATUS(kiln_tensor_wrap(KILN_DTYPE_FLOAT, xd, 2, xv, sizeof xv, &x), KILN_OK);
    const char *in_names[1] = {"x"}, *out_names[4] = {"r1", "f", "ix", "a"};
    static const int64_t want_dims[4][2] = {{3, 2}, {1, 6}, {2, 3}, {2, 3}};
    for (int run = 0; run < 3; run++) {
        kiln_tensor *out[4] = {NULL};
        CHECK_STATUS(kiln_session_run(s, in_names, &x, 1, out_names, 4, out), KILN_OK);
        for (int k = 0; k < 4; k++) {
            if (!out[k]) continue;
            int rank = kiln_tensor_rank(out[k]);
            const int64_t *dims = kiln_tensor_dims(out[k]);
            CHECK_MSG(rank == 2 && dims[0] == want_dims[k][0] && dims[1] == want_dims[k][1],
                      "run %d: output %s has rank %d dims [%lld, %lld]", run, out_names[k], rank,
                      rank > 0 ? (long long)dims[0] : -1LL, rank > 1 ? (long long)dims[1] : -1LL);
            const float *v = kiln_tensor_data(out[k]);
            for (int i = 0; i < 6; i++) {
                float relu = xv[i] > 0 ? xv[i] : 0;
                float want = k == 1 ? 2 * relu : k == 2 ? xv[i] : relu;
                CHECK_MSG(v[i] == want, "run %d: %s[%d] = %g, want %g", run, out_names[k], i, v[i], want);
            }
        }
        for (int k = 0; k < 4; k++) kiln_tensor_destroy(out[k]);
        /* the caller's input keeps its shape and elements */
        const int64_t *dims = kiln_tensor_dims(x);
        CHECK(kiln_tensor_rank(x) == 2 && dims[0] == 2 && dims[1] == 3);
        CHECK(xv[0] == -1.5f && xv[5] == 4);
    }
    kiln_tensor_destroy(x);
    kiln_session_destroy(s);
}

/* ------------------------------------------------------------------ provider options */

/* Creates a session of a one-Relu model with providers "cuda:<options>,cpu" at `level`, with
 * stderr captured; returns what was written there (malloc'ed). The CUDA provider need not be
 * usable: its options are read before it is started (and skipped for cpu). */
static char *session_stderr(const char *const *keys, const char *const *values, size_t n, int level) {
    tmb b;
    tmb_init(&b, 17);
    int64_t xd[1] = {4};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 1, xd, NULL), y = tmb_value(&b, "y");
    tmb_node(&b, "Relu", (int[]){x}, 1, y);
    tmb_output(&b, y);
    size_t size;
    unsigned char *m = tmb_finish(&b, &size);
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, level);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_log_level(o, KILN_LOG_WARNING);
    kiln_session_options_append_provider(o, "cuda", keys, values, n);
    kiln_session_options_append_provider(o, "cpu", NULL, NULL, 0);
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    char *text = NULL;
    if (saved >= 0 && tmp && dup2(fileno(tmp), 2) >= 0) {
        kiln_session *s = NULL;
        kiln_status st = kiln_session_create_from_memory(m, size, NULL, o, &s);
        fflush(stderr);
        dup2(saved, 2);
        CHECK_MSG(st == KILN_OK, "session: %s", kiln_last_error());
        kiln_session_destroy(s);
        long len = ftell(tmp);
        text = calloc(1, (size_t)(len > 0 ? len : 0) + 1);
        rewind(tmp);
        if (text && len > 0 && fread(text, 1, (size_t)len, tmp) != (size_t)len) text[0] = 0;
    }
    if (saved >= 0) close(saved);
    if (tmp) fclose(tmp);
    kiln_session_options_destroy(o);
    free(m);
    return text;
}

/* activations=half where it cannot act (precision fp32, or a level below 3) is said, not ignored. */
KN_TEST(runtime_warns_of_activations_half_without_effect) {
    const char *k[2] = {"activations", "precision"}, *fp32[2] = {"half", "fp32"}, *fp16[2] = {"half", "fp16"};
    char *t = session_stderr(k, fp32, 2, 3);
    CHECK_MSG(t && strstr(t, "activations=half has no effect without precision fp16 or bf16"), "stderr: %s", t ? t : "");
    free(t);
    t = session_stderr(k, fp16, 2, 2);
    CHECK_MSG(t && strstr(t, "activations=half takes effect at optimisation level 3 (this session: 2)"), "stderr: %s",
              t ? t : "");
    free(t);
    t = session_stderr(k, fp16, 2, 3);
    CHECK_MSG(t && !strstr(t, "activations=half"), "stderr: %s", t ? t : "");
    free(t);
}

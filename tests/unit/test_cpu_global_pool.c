/* GlobalMaxPool on the CPU (pool.c, the AVX-512 path): every plane length from 1 to 140 (the
 * 64-wide loop, the 16-wide masked tail, a plane shorter than a vector), 3 planes each, the maximum
 * at every position class, a NaN past the first element (skipped, as the scalar loop skips it),
 * against the definition. */
#include "test_model_builder.h"

#include "kiln.h"

#include <stdlib.h>

KN_TEST(cpu_global_max_pool_plane_lengths) {
    int bad = 0;
    for (int64_t L = 1; L <= 140; L++) {
        tmb b;
        tmb_init(&b, 17);
        int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, (int64_t[]){1, 3, L}, NULL), y = tmb_value(&b, "y");
        tmb_node(&b, "GlobalMaxPool", (int[]){x}, 1, y);
        tmb_output(&b, y);
        size_t size;
        unsigned char *m = tmb_finish(&b, &size);
        if (!m) return;
        kiln_session *s = tmb_session(m, size, 1, 3);
        kiln_tensor *xt = NULL;
        kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){1, 3, L}, 3, &xt);
        float *xp = kiln_tensor_data(xt);
        uint32_t seed = (uint32_t)L;
        for (int64_t i = 0; i < 3 * L; i++) xp[i] = tmb_rand(&seed) - 2.0f; /* all negative */
        /* plane 0: the maximum last; plane 1: in the middle, a NaN after the first element; plane
         * 2: the first element */
        xp[L - 1] = 5.0f;
        xp[L + L / 2] = 4.0f;
        if (L > 2) xp[2 * L - 1] = NAN; /* the plane's last element, after the maximum */
        xp[2 * L] = 3.0f;
        const float want[3] = {5.0f, 4.0f, 3.0f};
        const char *names[1] = {"x"};
        kiln_tensor *ins[1] = {xt}, *yt = NULL;
        if (s) CHECK_STATUS(kiln_session_run(s, names, ins, 1, NULL, 1, &yt), KILN_OK);
        if (yt) {
            const float *yp = kiln_tensor_data(yt);
            for (int p = 0; p < 3; p++)
                if (!(yp[p] == want[p]) && bad++ < 5)
                    CHECK_MSG(0, "plane length %lld, plane %d: %g, want %g", (long long)L, p, yp[p], want[p]);
        }
        kiln_tensor_destroy(yt);
        kiln_tensor_destroy(xt);
        kiln_session_destroy(s);
        free(m);
    }
    CHECK(bad == 0);
}

/* Softmax and LogSoftmax rows (nn_softmax.c): the row maximum comes from four running maxima; a
 * large value in any of the four 16-lane groups of a 64-wide step, or in the tail, must be the
 * maximum (a missed one makes exp overflow: inf / inf). Rows of 200 floats near 0 with 1000 at
 * one position. */
KN_TEST(cpu_softmax_row_maximum_anywhere) {
    const int64_t n = 200;
    for (int log = 0; log < 2; log++) {
        tmb b;
        tmb_init(&b, 17);
        int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){n, n}, NULL), y = tmb_value(&b, "y");
        int node = tmb_node(&b, log ? "LogSoftmax" : "Softmax", (int[]){x}, 1, y);
        tmb_int(&b, node, "axis", -1);
        tmb_output(&b, y);
        size_t size;
        unsigned char *m = tmb_finish(&b, &size);
        if (!m) return;
        kiln_session *s = tmb_session(m, size, 0, 3);
        kiln_tensor *xt = NULL, *yt = NULL;
        kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){n, n}, 2, &xt);
        float *xp = kiln_tensor_data(xt);
        uint32_t seed = 3;
        for (int64_t r = 0; r < n; r++)
            for (int64_t i = 0; i < n; i++) xp[r * n + i] = r == i ? 1000.0f : tmb_rand(&seed);
        const char *names[1] = {"x"};
        kiln_tensor *ins[1] = {xt};
        if (s) CHECK_STATUS(kiln_session_run(s, names, ins, 1, NULL, 1, &yt), KILN_OK);
        if (yt) {
            const float *yp = kiln_tensor_data(yt);
            int bad = 0;
            for (int64_t r = 0; r < n; r++) {
                const float want = log ? 0.0f : 1.0f, got = yp[r * n + r];
                if (!(fabsf(got - want) <= 1e-5f) && bad++ < 3)
                    CHECK_MSG(0, "%s row %lld (1000 at %lld): %g, want %g", log ? "LogSoftmax" : "Softmax",
                              (long long)r, (long long)r, got, want);
            }
        }
        kiln_tensor_destroy(yt);
        kiln_tensor_destroy(xt);
        kiln_session_destroy(s);
        free(m);
    }
}

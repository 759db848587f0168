/* QLinearConv's requantisation (kn_q_requant, kn_q_requant_cols in conv_int_dw.c: 8- or 16-lane
 * doubles by the build's vector level) against its definition computed here: the integer sums
 * (exact), the multiplier x_scale * w_scale / y_scale in float as kiln takes it, then
 * sum * multiplier + y_zero_point in double, rounded to nearest even and saturated. The scales put
 * outputs past both ends of the type (saturation) and on every value between; the planes' lengths
 * leave tails of 1-15 values after whole vectors. Depthwise convolutions (conv_int_dw.c's row and
 * small-plane kernels) and one-position planes (a multiplier per output channel) reach the two
 * functions; outputs must be equal bytes. */
#include "test_model_builder.h"

#include "kiln.h"

#include <math.h>
#include <stdlib.h>

static kn_tensor *rq_tensor(kiln_dtype dt, int rank, const int64_t *dims) {
    kn_tensor *t;
    kn_tensor_new(dt, rank, dims, &t);
    return t;
}

static uint32_t rq_next(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

KN_TEST(cpu_qlinear_conv_requant_exact) {
    /* {C, H, W, multiplier, kernel, stride, y_s8} */
    static const int64_t cases[][7] = {
        {8, 23, 29, 1, 3, 1, 0},  /* rows of 29: a vector of 16, one of 8, a tail of 5 */
        {16, 7, 7, 1, 5, 1, 1},   /* small planes (channels in the lanes), int8 output */
        {6, 17, 33, 2, 3, 2, 0},  /* stride 2, two outputs a channel */
        {200, 1, 1, 1, 1, 1, 0},  /* one position: a multiplier per channel (kn_q_requant_cols) */
        {40, 1, 1, 1, 1, 1, 1},   /* the same, int8 output */
        /* AVX-512 forms: small planes with 16 channels in the lanes (blocks with tails), the row
         * form with 16 output columns a vector */
        {20, 7, 7, 1, 5, 1, 0},   /* a block of 16 and one of 4, 49 positions (16-position tail 1) */
        {37, 9, 11, 1, 3, 1, 1},  /* three blocks, the last of 5 channels, int8 output */
        {37, 14, 14, 1, 5, 1, 0}, /* k5 on 14x14 */
        {24, 28, 28, 1, 3, 1, 1}, /* rows of 28 at stride 1 (small planes up to 32) */
        {20, 13, 13, 1, 3, 2, 0}, /* small planes at stride 2 */
        {20, 56, 56, 1, 3, 2, 0}, /* stride 2, rows of 28: a vector of 16 and 12 */
        {5, 13, 70, 1, 5, 1, 1},  /* rows of 70: four vectors of 16 and a tail of 6 */
        {7, 11, 41, 2, 5, 2, 1},  /* multiplier 2, k5, stride 2 (rows of 21) */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int64_t C = cases[ci][0], H = cases[ci][1], W = cases[ci][2], mult = cases[ci][3], k = cases[ci][4],
                      s = cases[ci][5];
        const bool y_s8 = cases[ci][6], one_position = H == 1 && W == 1;
        /* one position: a dense 1x1 product (a group of all channels) to M = C / 4 outputs */
        const int64_t G = one_position ? 1 : C, M = one_position ? C / 4 : C * mult, Cg = C / G, Mg = M / G;
        const int64_t p = k / 2, OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
        uint32_t seed = 5150 + (uint32_t)ci;
        const int64_t xd[4] = {1, C, H, W}, wd[4] = {M, Cg, k, k}, md[1] = {M};
        kn_tensor *x = rq_tensor(KILN_DTYPE_UINT8, 4, xd), *w = rq_tensor(KILN_DTYPE_INT8, 4, wd);
        kn_tensor *ws = rq_tensor(KILN_DTYPE_FLOAT, 1, md), *bias = rq_tensor(KILN_DTYPE_INT32, 1, md);
        kn_tensor *xs = rq_tensor(KILN_DTYPE_FLOAT, 0, NULL), *ys = rq_tensor(KILN_DTYPE_FLOAT, 0, NULL);
        kn_tensor *xz = rq_tensor(KILN_DTYPE_UINT8, 0, NULL), *wz = rq_tensor(KILN_DTYPE_INT8, 1, md);
        kn_tensor *yz = rq_tensor(y_s8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8, 0, NULL);
        uint8_t *xp = x->data;
        int8_t *wp = w->data;
        for (int64_t i = 0; i < kn_tensor_count(x); i++) xp[i] = (uint8_t)rq_next(&seed);
        for (int64_t i = 0; i < kn_tensor_count(w); i++) wp[i] = (int8_t)(rq_next(&seed) % 255 - 127);
        for (int64_t m = 0; m < M; m++) {
            ((float *)ws->data)[m] = 0.002f + 0.004f * (float)(rq_next(&seed) % 1000) / 1000.0f;
            ((int32_t *)bias->data)[m] = (int32_t)(rq_next(&seed) % 20001) - 10000;
            ((int8_t *)wz->data)[m] = 0;
        }
        *(float *)xs->data = 0.02f;
        *(uint8_t *)xz->data = 131;
        /* a y_scale that puts a good share of the outputs past each end */
        *(float *)ys->data = 0.02f * 0.004f * 127.0f * 40.0f * sqrtf((float)(Cg * k * k)) / 150.0f;
        if (y_s8) *(int8_t *)yz->data = 3;
        else *(uint8_t *)yz->data = 120;
        const double zy = y_s8 ? *(int8_t *)yz->data : *(uint8_t *)yz->data, lo = y_s8 ? -128 : 0, hi = y_s8 ? 127 : 255;
        const int64_t n = M * OH * OW;
        uint8_t *want = malloc((size_t)n);
        int64_t low = 0, high = 0;
        for (int64_t m = 0; m < M; m++) {
            const float r = (float)(*(float *)xs->data * ((float *)ws->data)[m]) / *(float *)ys->data;
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t acc = ((int32_t *)bias->data)[m];
                    for (int64_t cg = 0; cg < Cg; cg++)
                        for (int64_t kh = 0; kh < k; kh++)
                            for (int64_t kw = 0; kw < k; kw++) {
                                const int64_t ih = oh * s - p + kh, iw = ow * s - p + kw, c = m / Mg * Cg + cg;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                acc += (int64_t)(xp[(c * H + ih) * W + iw] - 131) * wp[((m * Cg + cg) * k + kh) * k + kw];
                            }
                    double v = (double)acc * (double)r + zy;
                    v = v < lo ? lo : v > hi ? hi : v;
                    v = nearbyint(v);
                    low += v == lo, high += v == hi;
                    const int64_t i = (m * OH + oh) * OW + ow;
                    want[i] = y_s8 ? (uint8_t)(int8_t)v : (uint8_t)v;
                }
        }
        CHECK_MSG(low > 0 && high > 0, "case %zu: the outputs do not reach both ends (%lld low, %lld high)", ci,
                  (long long)low, (long long)high);
        tmb b;
        tmb_init(&b, 13);
        int in[9];
        in[0] = tmb_input(&b, "x", KILN_DTYPE_UINT8, 4, xd, NULL);
        in[1] = tmb_const_tensor(&b, "xs", xs);
        in[2] = tmb_const_tensor(&b, "xz", xz);
        in[3] = tmb_const_tensor(&b, "w", w);
        in[4] = tmb_const_tensor(&b, "ws", ws);
        in[5] = tmb_const_tensor(&b, "wz", wz);
        in[6] = tmb_const_tensor(&b, "ys", ys);
        in[7] = tmb_const_tensor(&b, "yz", yz);
        in[8] = tmb_const_tensor(&b, "bias", bias);
        int y = tmb_value(&b, "y");
        int node = tmb_node(&b, "QLinearConv", in, 9, y);
        tmb_ints(&b, node, "kernel_shape", (int64_t[]){k, k}, 2);
        tmb_ints(&b, node, "strides", (int64_t[]){s, s}, 2);
        tmb_ints(&b, node, "pads", (int64_t[]){p, p, p, p}, 4);
        tmb_int(&b, node, "group", G);
        tmb_output(&b, y);
        size_t size;
        unsigned char *model = tmb_finish(&b, &size);
        kiln_tensor *xin = NULL;
        kiln_tensor_create(KILN_DTYPE_UINT8, xd, 4, &xin);
        memcpy(kiln_tensor_data(xin), xp, (size_t)kn_tensor_count(x));
        for (int threads = 1; threads <= 2; threads++) {
            kiln_session *sess = tmb_session(model, size, threads, 3);
            if (!sess) continue;
            const char *names[1] = {"x"};
            kiln_tensor *out = NULL;
            CHECK_STATUS(kiln_session_run(sess, names, &xin, 1, NULL, 1, &out), KILN_OK);
            if (out && kiln_tensor_element_count(out) == n) {
                const uint8_t *got = kiln_tensor_data(out);
                int64_t bad = 0, first = -1;
                for (int64_t i = 0; i < n; i++)
                    if (got[i] != want[i]) bad++, first = first < 0 ? i : first;
                CHECK_MSG(bad == 0,
                          "QLinearConv 1x%lldx%lldx%lld -> %lld k%lld s%lld group %lld %s (%d threads): %lld of %lld "
                          "outputs differ from the definition, first at %lld: %u, want %u",
                          (long long)C, (long long)H, (long long)W, (long long)M, (long long)k, (long long)s,
                          (long long)G, y_s8 ? "int8" : "uint8", threads, (long long)bad, (long long)n,
                          (long long)first, first >= 0 ? got[first] : 0u, first >= 0 ? want[first] : 0u);
            } else {
                CHECK_MSG(out != NULL, "case %zu: no output", ci);
            }
            kiln_tensor_destroy(out);
            kiln_session_destroy(sess);
        }
        kiln_tensor_destroy(xin);
        free(model);
        free(want);
        kn_tensor_free(x);
    }
}

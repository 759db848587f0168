/* QLinearConv's requantisation (kn_q_requant, kn_q_requant_cols in conv_int_dw.c: 8- or 16-lane
 * doubles by the build's vector level) against its definition computed here: the integer sums
 * (exact), the multiplier x_scale * w_scale / y_scale in float as kiln takes it, then
 * sum * multiplier + y_zero_point in double, rounded to nearest even and saturated. The scales put
 * outputs past both ends of the type (saturation) and on every value between; the planes' lengths
 * leave tails of 1-15 values after whole vectors. Depthwise convolutions (conv_int_dw.c's row and
 * small-plane kernels) and one-position planes (a multiplier per output channel) reach the two
 * functions; outputs must be equal bytes. */
#include "test_model_builder.h"

#include "backend/cpu/isa.h"
#include "backend/cpu/qgemm_amx.h"
#include "kiln.h"

#include <math.h>
#include <stdio.h>
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

/* A one-node QLinearConv model of input x (uint8, dims xd) and the constants c = x_scale,
 * x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, bias (the builder takes them) */
static unsigned char *rq_qlinear_conv_model(const int64_t *xd, kn_tensor *const c[8], int64_t k, int64_t s, int64_t p,
                                            int64_t G, size_t *size) {
    static const char *const names[8] = {"xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"};
    tmb b;
    tmb_init(&b, 13);
    int in[9];
    in[0] = tmb_input(&b, "x", KILN_DTYPE_UINT8, 4, xd, NULL);
    for (int i = 0; i < 8; i++) in[i + 1] = tmb_const_tensor(&b, names[i], c[i]);
    int y = tmb_value(&b, "y");
    tmb_conv2d(&b, tmb_node(&b, "QLinearConv", in, 9, y), k, s, p, G);
    tmb_output(&b, y);
    return tmb_finish(&b, size);
}

/* kiln_session_run_into into caller memory filled with 0x00 and then 0xA5 (QLinearConv and
 * QLinearMatMul are marked KN_KERNEL_OVERWRITES: nothing zeroes the memory before them), both runs
 * against want: an output the kernel leaves unwritten keeps the fill */
static void rq_check_into(kiln_session *sess, const char *in_name, kiln_tensor *xin, const kiln_tensor *like,
                          const uint8_t *want, int64_t n, const char *what, int threads) {
    const char *names[1] = {in_name};
    uint8_t *buf = malloc((size_t)(n > 0 ? n : 1));
    for (int fill = 0; fill < 2 && buf; fill++) {
        memset(buf, fill ? 0xA5 : 0x00, (size_t)n);
        kiln_tensor *into = NULL;
        CHECK_STATUS(kiln_tensor_wrap(kiln_tensor_dtype(like), kiln_tensor_dims(like), kiln_tensor_rank(like), buf,
                                      (size_t)n, &into),
                     KILN_OK);
        CHECK_STATUS(kiln_session_run_into(sess, names, &xin, 1, NULL, 1, &into), KILN_OK);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++)
            if (buf[i] != want[i]) bad++, first = first < 0 ? i : first;
        CHECK_MSG(bad == 0, "%s (%d threads, run_into over 0x%02x): %lld of %lld outputs differ, first at %lld: %u, want %u",
                  what, threads, fill ? 0xA5 : 0, (long long)bad, (long long)n, (long long)first,
                  first >= 0 ? buf[first] : 0u, first >= 0 ? want[first] : 0u);
        kiln_tensor_destroy(into);
    }
    free(buf);
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
        {12, 9, 100, 1, 3, 3, 1}, /* stride 3: the phase rows built from an int16 row (row_to_i16) */
        /* the AVX2 row form's requantisation from the registers (out_block) at stride 2: rows of
         * 33 (outputs 8 + 8 + 1, int8), of 5 (the tensor's last rows converted by the scalar loop),
         * of 16 with two outputs a channel, k5 on rows of 80 (outputs 32 + 8), k4 (pads 2), k1 */
        {5, 31, 33, 1, 3, 2, 1},
        {5, 6, 5, 1, 3, 2, 0},
        {3, 20, 16, 2, 3, 2, 0},
        {7, 40, 80, 1, 5, 2, 1},
        {4, 15, 37, 1, 4, 2, 0},
        {6, 9, 35, 1, 1, 2, 1},
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
        size_t size;
        unsigned char *model = rq_qlinear_conv_model(xd, (kn_tensor *[8]){xs, xz, w, ws, wz, ys, yz, bias}, k, s, p, G, &size);
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
                char what[64];
                snprintf(what, sizeof what, "QLinearConv case %zu", ci);
                rq_check_into(sess, "x", xin, out, want, n, what, threads);
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

/* ------------------------------------------------------------------ near ties (helper-67)
 *
 * The requantisation's vector forms compute in float32 and redo a vector in double where a lane
 * lies near a .5 tie (qrequant.h). These cases put the lanes there on purpose: a convolution whose
 * only nonzero weight (less its zero point) is 1 makes each output acc = bias[m] + x - 128, and
 * each channel's scale is chosen against its bias (x_scale = y_scale = 1, so the multiplier is
 * w_scale exactly):
 *   0  near ties with accs of 2^22..2^30 (float loses the sum's low bits): (T - zy) / A0 in float
 *      for a half-integer T inside the type, bias A0 (256 accs around A0, many within float's
 *      error of T);
 *   1  the same with accs of 2^12..2^20 (exact in float; only the product rounds);
 *   2  exact ties: a power-of-two scale, half the accs odd multiples of the half;
 *   3  accs of magnitude near 2^31 with the scale that takes one of them near a tie;
 *   4  saturation: scales from 2^-20 to 2^10 over random accs of any size;
 *   5  a NaN, +inf and -inf scale (NaN gives the type's minimum, as kiln's definition says).
 * Every form the CPU has is run (the AMX epilogue and the VNNI / AVX2 products with kn_q_requant
 * after them, depthwise small planes with the channels in the lanes and large planes, one position
 * with a scale per channel (kn_q_requant_cols), QLinearMatMul with a scale per column), int8 and
 * uint8 outputs, zero points at both ends and negative ones. The test also checks that its values
 * are hard: a plain float32 requantisation (fmaf then round) must get some of them wrong. */

static double tie_lo(bool s8) { return s8 ? -128 : 0; }
static double tie_hi(bool s8) { return s8 ? 127 : 255; }

static uint8_t tie_want(int64_t acc, float r, double zy, bool s8) {
    double v = (double)(int32_t)acc * (double)r + zy;
    v = v != v ? tie_lo(s8) : v < tie_lo(s8) ? tie_lo(s8) : v > tie_hi(s8) ? tie_hi(s8) : v;
    v = nearbyint(v);
    return s8 ? (uint8_t)(int8_t)v : (uint8_t)v;
}

static uint8_t tie_float(int64_t acc, float r, double zy, bool s8) {
    float v = fmaf((float)(int32_t)acc, r, (float)zy);
    v = v != v ? (float)tie_lo(s8) : v < tie_lo(s8) ? (float)tie_lo(s8) : v > tie_hi(s8) ? (float)tie_hi(s8) : v;
    v = nearbyintf(v);
    return s8 ? (uint8_t)(int8_t)v : (uint8_t)v;
}

static double tie_unit(uint32_t *s) { return (double)rq_next(s) / 16777216.0; } /* [0, 1) */

/* a channel's scale and bias by kind (above); zy the output's zero point */
static void tie_channel(int kind, uint32_t *s, double zy, bool s8, float *r, int32_t *bias) {
    const double T = tie_lo(s8) + (double)(rq_next(s) % 255) + 0.5; /* a half-integer inside the type */
    switch (kind) {
    case 0:
    case 1:
    case 3: {
        double a0 = kind == 0 ? ldexp(1.0 + tie_unit(s), 22 + (int)(rq_next(s) % 8))
                    : kind == 1 ? ldexp(1.0 + tie_unit(s), 12 + (int)(rq_next(s) % 8))
                                : 2147483647.0 - 200.0 - (double)(rq_next(s) % 100000);
        if (T - zy < 0) a0 = -a0; /* scales stay positive */
        *bias = (int32_t)a0;
        *r = T - zy == 0 ? 0.001f : (float)((T - zy) / (double)*bias);
        break;
    }
    case 2: {
        const int e = 1 + (int)(rq_next(s) % 6);
        *r = (float)ldexp(1.0, -e);
        *bias = (int32_t)((T - zy) * ldexp(1.0, e)); /* the accs around it cover ties and not */
        break;
    }
    case 4:
        *r = (float)ldexp(1.0 + tie_unit(s), -20 + (int)(rq_next(s) % 31));
    {
        uint32_t u = rq_next(s);
        u = u << 8 | (rq_next(s) & 255u); /* 32 random bits */
        *bias = (int32_t)(u >> 2) - (rq_next(s) % 2 ? 1 << 30 : 0); /* [-2^30, 2^30) */
    }
        break;
    default: {
        static const float odd[3] = {NAN, INFINITY, -INFINITY};
        *r = odd[rq_next(s) % 3];
        *bias = (int32_t)(rq_next(s) % 2001) - 1000;
    }
    }
}

typedef struct tie_stats {
    int64_t lanes, ties, float_wrong;
} tie_stats;

/* runs the model (input x) on 1 and 2 threads and compares with want */
static void tie_run(const char *what, const unsigned char *model, size_t size, const char *in_name, kiln_dtype in_t,
                    const int64_t *xd, int xr, const void *xp, const uint8_t *want, int64_t n) {
    kiln_tensor *xin = NULL;
    kiln_tensor_create(in_t, xd, (size_t)xr, &xin);
    int64_t nx = 1;
    for (int d = 0; d < xr; d++) nx *= xd[d];
    memcpy(kiln_tensor_data(xin), xp, (size_t)nx);
    for (int threads = 1; threads <= 2; threads++) {
        kiln_session *sess = tmb_session(model, size, threads, 3);
        if (!sess) continue;
        const char *names[1] = {in_name};
        kiln_tensor *out = NULL;
        CHECK_STATUS(kiln_session_run(sess, names, &xin, 1, NULL, 1, &out), KILN_OK);
        CHECK_MSG(out && kiln_tensor_element_count(out) == n, "%s: no output or a wrong size", what);
        if (out && kiln_tensor_element_count(out) == n) {
            const uint8_t *got = kiln_tensor_data(out);
            int64_t bad = 0, first = -1;
            for (int64_t i = 0; i < n; i++)
                if (got[i] != want[i]) bad++, first = first < 0 ? i : first;
            CHECK_MSG(bad == 0, "%s (%d threads): %lld of %lld outputs differ from the definition, first at %lld: %u, want %u",
                      what, threads, (long long)bad, (long long)n, (long long)first, first >= 0 ? got[first] : 0u,
                      first >= 0 ? want[first] : 0u);
            rq_check_into(sess, in_name, xin, out, want, n, what, threads);
        }
        kiln_tensor_destroy(out);
        kiln_session_destroy(sess);
    }
    kiln_tensor_destroy(xin);
}

/* QLinearConv [N, C, H, W] -> M channels, kernel k, group G, output int8 when s8 with zero point
 * zy; nonzero weight zero points when wzp; kinds cycle over the channels from kind0 (-1: all) */
static void tie_conv(const char *what, int64_t N, int64_t C, int64_t H, int64_t W, int64_t M, int64_t k, int64_t G,
                     bool s8, int zy, bool wzp, uint32_t seed, tie_stats *st) {
    const int64_t Cg = C / G, Mg = M / G, p = k / 2, OP = H * W, n = N * M * OP;
    const int64_t xd[4] = {N, C, H, W}, wd[4] = {M, Cg, k, k}, md[1] = {M};
    kn_tensor *w = rq_tensor(KILN_DTYPE_INT8, 4, wd), *ws = rq_tensor(KILN_DTYPE_FLOAT, 1, md);
    kn_tensor *bias = rq_tensor(KILN_DTYPE_INT32, 1, md), *wz = rq_tensor(KILN_DTYPE_INT8, 1, md);
    kn_tensor *xs = rq_tensor(KILN_DTYPE_FLOAT, 0, NULL), *ys = rq_tensor(KILN_DTYPE_FLOAT, 0, NULL);
    kn_tensor *xz = rq_tensor(KILN_DTYPE_UINT8, 0, NULL), *yz = rq_tensor(s8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8, 0, NULL);
    uint8_t *xp = malloc((size_t)(N * C * OP)), *want = malloc((size_t)n);
    int8_t *wp = w->data;
    float *r = ws->data;
    int32_t *b = bias->data;
    for (int64_t i = 0; i < N * C * OP; i++) xp[i] = (uint8_t)rq_next(&seed);
    for (int64_t m = 0; m < M; m++) {
        const int8_t z = wzp ? (int8_t)((int)(rq_next(&seed) % 201) - 100) : 0;
        ((int8_t *)wz->data)[m] = z;
        for (int64_t q = 0; q < Cg * k * k; q++) wp[m * Cg * k * k + q] = z;
        wp[m * Cg * k * k + p * k + p] = (int8_t)(z + 1); /* input channel 0 of the group, the centre */
        tie_channel(m % 12 == 5 ? 5 : (int)(m % 5), &seed, zy, s8, &r[m], &b[m]);
    }
    *(float *)xs->data = 1.0f, *(float *)ys->data = 1.0f;
    *(uint8_t *)xz->data = 128;
    if (s8) *(int8_t *)yz->data = (int8_t)zy;
    else *(uint8_t *)yz->data = (uint8_t)zy;
    for (int64_t im = 0; im < N; im++)
        for (int64_t m = 0; m < M; m++) {
            const float rm = 1.0f * r[m] / 1.0f;
            const uint8_t *xc = xp + (im * C + m / Mg * Cg) * OP;
            for (int64_t q = 0; q < OP; q++) {
                const int64_t acc = (int64_t)b[m] + xc[q] - 128, i = (im * M + m) * OP + q;
                want[i] = tie_want(acc, rm, zy, s8);
                const double v = (double)(int32_t)acc * (double)rm + zy;
                st->lanes++;
                st->ties += v >= tie_lo(s8) - 0.5 && v <= tie_hi(s8) + 0.5 && v - floor(v) == 0.5;
                st->float_wrong += tie_float(acc, rm, zy, s8) != want[i];
            }
        }
    size_t size;
    unsigned char *model = rq_qlinear_conv_model(xd, (kn_tensor *[8]){xs, xz, w, ws, wz, ys, yz, bias}, k, 1, p, G, &size);
    tie_run(what, model, size, "x", KILN_DTYPE_UINT8, xd, 4, xp, want, n);
    free(model);
    free(xp);
    free(want);
}

/* QLinearMatMul [M, K] u8 x [K, N] s8 with a b_scale per column chosen to put one acc of the
 * column (row j % M) near a tie (kinds 0-3 by column) */
static void tie_matmul(const char *what, int64_t M, int64_t K, int64_t N, bool s8, int zy, uint32_t seed, tie_stats *st) {
    const int64_t ad[2] = {M, K}, bd[2] = {K, N}, nd[1] = {N};
    kn_tensor *B = rq_tensor(KILN_DTYPE_INT8, 2, bd), *bs = rq_tensor(KILN_DTYPE_FLOAT, 1, nd);
    kn_tensor *as = rq_tensor(KILN_DTYPE_FLOAT, 0, NULL), *az = rq_tensor(KILN_DTYPE_UINT8, 0, NULL);
    kn_tensor *bz = rq_tensor(KILN_DTYPE_INT8, 0, NULL), *ys = rq_tensor(KILN_DTYPE_FLOAT, 0, NULL);
    kn_tensor *yz = rq_tensor(s8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8, 0, NULL);
    uint8_t *ap = malloc((size_t)(M * K)), *want = malloc((size_t)(M * N));
    int64_t *acc = malloc(sizeof(int64_t) * (size_t)(M * N));
    int8_t *bp = B->data;
    float *r = bs->data;
    for (int64_t i = 0; i < M * K; i++) ap[i] = (uint8_t)rq_next(&seed);
    for (int64_t i = 0; i < K * N; i++) bp[i] = (int8_t)rq_next(&seed);
    *(float *)as->data = 1.0f, *(float *)ys->data = 1.0f;
    *(uint8_t *)az->data = 7;
    *(int8_t *)bz->data = -3;
    if (s8) *(int8_t *)yz->data = (int8_t)zy;
    else *(uint8_t *)yz->data = (uint8_t)zy;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            int64_t s = 0;
            for (int64_t q = 0; q < K; q++) s += (int64_t)(ap[i * K + q] - 7) * (bp[q * N + j] + 3);
            acc[i * N + j] = s;
        }
    for (int64_t j = 0; j < N; j++) {
        /* a half-integer T on a0's side of zy (a positive scale) */
        const int64_t a0 = acc[(j % M) * N + j];
        const double from = a0 > 0 ? zy + 0.5 : tie_lo(s8) + 0.5, to = a0 > 0 ? tie_hi(s8) - 0.5 : zy - 0.5;
        const double T = from + (double)(rq_next(&seed) % (uint32_t)(to >= from ? to - from + 1 : 1));
        r[j] = a0 == 0 || to < from ? 0.01f : (float)((T - zy) / (double)a0);
    }
    for (int64_t i = 0; i < M * N; i++) {
        const float rj = (float)(1.0f * r[i % N]) / 1.0f;
        want[i] = tie_want(acc[i], rj, zy, s8);
        const double v = (double)acc[i] * (double)rj + zy;
        st->lanes++;
        st->ties += v >= tie_lo(s8) - 0.5 && v <= tie_hi(s8) + 0.5 && v - floor(v) == 0.5;
        st->float_wrong += tie_float(acc[i], rj, zy, s8) != want[i];
    }
    tmb b_;
    tmb_init(&b_, 13);
    int in[8];
    in[0] = tmb_input(&b_, "a", KILN_DTYPE_UINT8, 2, ad, NULL);
    in[1] = tmb_const_tensor(&b_, "as", as);
    in[2] = tmb_const_tensor(&b_, "az", az);
    in[3] = tmb_const_tensor(&b_, "b", B);
    in[4] = tmb_const_tensor(&b_, "bs", bs);
    in[5] = tmb_const_tensor(&b_, "bz", bz);
    in[6] = tmb_const_tensor(&b_, "ys", ys);
    in[7] = tmb_const_tensor(&b_, "yz", yz);
    int y = tmb_value(&b_, "y");
    tmb_node(&b_, "QLinearMatMul", in, 8, y);
    tmb_output(&b_, y);
    size_t size;
    unsigned char *model = tmb_finish(&b_, &size);
    tie_run(what, model, size, "a", KILN_DTYPE_UINT8, ad, 2, ap, want, M * N);
    free(model);
    free(ap);
    free(acc);
    free(want);
}

KN_TEST(cpu_qrequant_near_ties) {
    tie_stats st = {0};
    const bool amx = kn_qgemm_amx_force(true), vnni = kn_cpu_has_vnni() && kn_cpu_isa_active() == KN_ISA_AVX512;
    /* pointwise: the AMX epilogue where the CPU has it, then the VNNI and AVX2 products (each then
     * kn_q_requant per row block) */
    for (int form = 0; form < 3; form++) {
        if ((form == 0 && !amx) || (form == 1 && !vnni)) continue;
        kn_qgemm_amx_force(form == 0);
        kn_cpu_vnni_force(form != 2);
        char what[96];
        snprintf(what, sizeof what, "pointwise 16 -> 48 on 32x32, uint8 zy 128 (%s)", form == 0 ? "AMX" : form == 1 ? "VNNI" : "AVX2");
        tie_conv(what, 1, 16, 32, 32, 48, 1, 1, false, 128, false, 71 + (uint32_t)form, &st);
        snprintf(what, sizeof what, "pointwise 16 -> 40 on 31x33, int8 zy -100, w zero points (%s)",
                 form == 0 ? "AMX" : form == 1 ? "VNNI" : "AVX2");
        tie_conv(what, 1, 16, 31, 33, 40, 1, 1, true, -100, true, 81 + (uint32_t)form, &st);
        snprintf(what, sizeof what, "pointwise 32 -> 36 on 30x30, uint8 zy 0 (%s)", form == 0 ? "AMX" : form == 1 ? "VNNI" : "AVX2");
        tie_conv(what, 1, 32, 30, 30, 36, 1, 1, false, 0, false, 91 + (uint32_t)form, &st);
    }
    kn_qgemm_amx_force(true);
    kn_cpu_vnni_force(true);
    tie_conv("depthwise 3x3 on 7x7 (small planes), uint8 zy 255", 1, 40, 7, 7, 40, 3, 40, false, 255, false, 101, &st);
    tie_conv("depthwise 3x3 on 9x11 (small planes), int8 zy -128, w zero points", 1, 37, 9, 11, 37, 3, 37, true, -128,
             true, 102, &st);
    tie_conv("depthwise 3x3 on 40x41 (planes), int8 zy 127", 1, 24, 40, 41, 24, 3, 24, true, 127, false, 103, &st);
    tie_conv("depthwise 3x3 on 45x45 (planes), uint8 zy 3", 1, 12, 45, 45, 12, 3, 12, false, 3, true, 104, &st);
    tie_conv("one position, 16 -> 200, batch 8, uint8 zy 200", 8, 16, 1, 1, 200, 1, 1, false, 200, false, 105, &st);
    tie_conv("one position, 16 -> 75, batch 5, int8 zy -7", 5, 16, 1, 1, 75, 1, 1, true, -7, true, 106, &st);
    tie_matmul("QLinearMatMul 37x64 @ 64x300 per column, uint8 zy 100", 37, 64, 300, false, 100, 107, &st);
    tie_matmul("QLinearMatMul 16x200 @ 200x77 per column, int8 zy -50", 16, 200, 77, true, -50, 108, &st);
    /* the values are hard: exact ties, and lanes a plain float32 requantisation gets wrong */
    CHECK_MSG(st.ties > 1000 && st.float_wrong > 100,
              "the cases do not reach ties: %lld lanes, %lld exact ties, %lld wrong in plain float32",
              (long long)st.lanes, (long long)st.ties, (long long)st.float_wrong);
    printf("     near ties: %lld lanes, %lld exact ties, %lld that plain float32 gets wrong\n", (long long)st.lanes,
           (long long)st.ties, (long long)st.float_wrong);
}

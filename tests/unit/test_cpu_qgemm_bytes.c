/* kn_qgemm's byte forms (qgemm.h: vpmaddubsw's int16 pair sums where the weights' pairs less their
 * zero points have |w0| + |w1| <= 128, so that no sum against uint8 values can saturate) against
 * the integer definition in int64. The weights are made at that bound (pairs like (64, -64),
 * (-128, 0), (t, 128 - |t|)) against activations mostly at their extremes (255 and 0, or 127 and
 * -128), so every pair sum an activation can make is reached; a case "beyond" puts one pair at
 * |w0| + |w1| = 129 (the int16 pairs then, for all of A or for B's block of columns). Zero points
 * 0, 128 and 255 (int8: 0, -128, 127) and per channel; K off multiples of 4, 16 and 32 and past a
 * pass of 256 pairs; 1 and 2 threads, optimiser levels 0 and 3; the AVX2 forms only (VNNI and
 * AMX-INT8 off where the CPU has them, as the byte forms are AVX2's). Outputs must be equal.
 *  - ConvInteger / QLinearConv: the weights are kn_qgemm's A (QB_SIGNED: A's bytes signed, the
 *    activations' unsigned, int8 ones plus 128);
 *  - MatMulInteger (with an int8 A, zero points per row or column, or B an input, where
 *    kn_qgemm_run takes it): the weights are B (QB_UNSIGNED: A's bytes unsigned, B's signed,
 *    checked per block of columns). */
#include "test_model_builder.h"

#include "backend/cpu/isa.h"
#include "backend/cpu/qgemm_amx.h"
#include "kiln.h"

#include <math.h>
#include <stdlib.h>

static uint32_t qb_next(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static int qb_clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* a pair (s0, s1) of weights less their zero point with |s0| + |s1| <= 128, mostly = 128, within
 * [lo, hi] (which holds 0; clamping only shrinks them) */
static void qb_pair(uint32_t *seed, int lo, int hi, int *s0, int *s1) {
    const uint32_t r = qb_next(seed);
    int a, b;
    switch (r % 5) {
    case 0: a = (r & 32) ? 64 : -64, b = (r & 64) ? 64 : -64; break;
    case 1: a = -128, b = 0; break;
    case 2: {
        const int t = (int)(qb_next(seed) % 255) - 127;
        a = t, b = ((r & 128) ? 1 : -1) * (128 - abs(t));
        break;
    }
    case 3: a = 127, b = (r & 32) ? 1 : -1; break;
    default: a = (int)(qb_next(seed) % 41) - 20, b = (int)(qb_next(seed) % 41) - 20; break;
    }
    if (r & 256) {
        const int t = a;
        a = b, b = t;
    }
    /* one-sided ranges (uint8 weights with zero point 0 or 255): the same magnitudes on that side */
    if (lo >= 0) a = abs(a), b = abs(b);
    if (hi <= 0) a = -abs(a), b = -abs(b);
    *s0 = qb_clamp(a, lo > -128 ? lo : -128, hi < 127 ? hi : 127);
    *s1 = qb_clamp(b, lo > -128 ? lo : -128, hi < 127 ? hi : 127);
}

/* weights: R rows (output channels, or B's columns) of K values, value (r, k) at w[r * rs + k * ks],
 * zero point z[r]; beyond >= 0: row beyond's pair at k = 2 * (K / 4) gets |s0| + |s1| = 129;
 * small: within 16 of the zero point (so that B's padding, 0 less its zero point, would pass the
 * bound if it were not masked, and its column sums would take it in) */
static void qb_weights(kn_tensor *t, int64_t R, int64_t K, int64_t rs, int64_t ks, const int *z, int64_t beyond,
                       bool small, uint32_t *seed) {
    const bool s8 = t->dtype == KILN_DTYPE_INT8;
    for (int64_t r = 0; r < R; r++) {
        const int lo = (s8 ? -128 : 0) - z[r], hi = (s8 ? 127 : 255) - z[r];
        for (int64_t k = 0; k < K; k += 2) {
            int s0, s1;
            qb_pair(seed, lo, hi, &s0, &s1);
            if (small) s0 = qb_clamp(s0 / 8, lo, hi), s1 = qb_clamp(s1 / 8, lo, hi);
            if (r == beyond && k == 2 * (K / 4) && k + 1 < K) {
                /* 65 + 64 of one sign: one past the bound, on the side the zero point leaves room
                 * for; against two activations at the top, 255 * 129 passes int16 */
                s0 = hi >= 65 ? 65 : -65, s1 = hi >= 65 ? 64 : -64;
            }
            const int v0 = s0 + z[r], v1 = s1 + z[r];
            if (s8) {
                ((int8_t *)t->data)[r * rs + k * ks] = (int8_t)v0;
                if (k + 1 < K) ((int8_t *)t->data)[r * rs + (k + 1) * ks] = (int8_t)v1;
            } else {
                ((uint8_t *)t->data)[r * rs + k * ks] = (uint8_t)v0;
                if (k + 1 < K) ((uint8_t *)t->data)[r * rs + (k + 1) * ks] = (uint8_t)v1;
            }
        }
    }
}

/* activations mostly at their extremes (the largest pair sums), some anywhere */
static void qb_activations(kn_tensor *t, uint32_t *seed) {
    const bool s8 = t->dtype == KILN_DTYPE_INT8;
    uint8_t *p = t->data;
    for (int64_t i = 0; i < kn_tensor_count(t); i++) {
        const uint32_t r = qb_next(seed) % 10;
        const int v = r < 6 ? (s8 ? 127 : 255) : r < 8 ? (s8 ? -128 : 0) : (int)(qb_next(seed) % 256) + (s8 ? -128 : 0);
        p[i] = (uint8_t)v;
    }
}

static int64_t qb_at(const kn_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_INT8 ? ((const int8_t *)t->data)[i] : ((const uint8_t *)t->data)[i];
}

static kn_tensor *qb_tensor(kiln_dtype dt, int rank, const int64_t *dims) {
    kn_tensor *t = NULL;
    kn_tensor_new(dt, rank, dims, &t);
    return t;
}

static kn_tensor *qb_zero_points(kiln_dtype dt, int64_t n, const int *z) {
    kn_tensor *t = qb_tensor(dt, n > 1 ? 1 : 0, (int64_t[]){n});
    for (int64_t i = 0; i < n; i++) ((uint8_t *)t->data)[i] = (uint8_t)z[i];
    return t;
}

static kiln_tensor *qb_input(const kn_tensor *t) {
    kiln_tensor *k = NULL;
    kiln_tensor_create(t->dtype, t->dims, t->rank, &k);
    if (k) memcpy(kiln_tensor_data(k), t->data, (size_t)kn_tensor_count(t));
    return k;
}

/* the zero point of kind zk (0, 1, 2: the type's 0 / 128 / 255, int8 0 / -128 / 127; 3: per
 * channel, those three and others in turn; 4: 3, int8 -5) for channel i */
static int qb_zp(bool s8, int zk, int64_t i) {
    static const int u[5] = {0, 128, 255, 3, 131}, s[5] = {0, -128, 127, -5, 17};
    const int pick = zk < 3 ? zk : zk == 4 ? 3 : (int)(i % 5);
    return s8 ? s[pick] : u[pick];
}

/* Runs the model with 1 and 2 threads at levels 0 and 3, the AVX2 forms; the output (int32, or
 * bytes when y8) must equal want */
static void qb_check(const unsigned char *m, size_t size, const char *const *names, kiln_tensor *const *ins, int nin,
                     const int64_t *want, int64_t n, bool y8, bool ys8, const char *what) {
    kn_qgemm_amx_force(false);
    kn_cpu_vnni_force(false);
    for (int threads = 1; threads <= 2; threads++)
        for (int level = 0; level <= 3; level += 3) {
            kiln_session *s = tmb_session(m, size, threads, level);
            CHECK_MSG(s != NULL, "%s: no session", what);
            if (!s) continue;
            kiln_tensor *y = NULL;
            CHECK_STATUS(kiln_session_run(s, names, ins, (size_t)nin, NULL, 1, &y), KILN_OK);
            if (y) {
                CHECK_EQ_INT(kiln_tensor_element_count(y), n);
                int64_t bad = 0, first = -1, got1 = 0;
                for (int64_t i = 0; i < n && kiln_tensor_element_count(y) == n; i++) {
                    const int64_t g = !y8 ? ((const int32_t *)kiln_tensor_data(y))[i]
                                      : ys8 ? ((const int8_t *)kiln_tensor_data(y))[i]
                                            : ((const uint8_t *)kiln_tensor_data(y))[i];
                    if (g != want[i]) {
                        if (first < 0) first = i, got1 = g;
                        bad++;
                    }
                }
                CHECK_MSG(bad == 0, "%s (%d threads, level %d): %lld of %lld outputs differ, first at %lld: %lld, want %lld",
                          what, threads, level, (long long)bad, (long long)n, (long long)first, (long long)got1,
                          first >= 0 ? (long long)want[first] : 0LL);
                kiln_tensor_destroy(y);
            }
            kiln_session_destroy(s);
        }
    kn_cpu_vnni_force(true);
    kn_qgemm_amx_force(true);
}

KN_TEST(cpu_qgemm_bytes_matmul_integer_exact) {
    /* {M, K, N, a_s8, za kind (3: per row), b_s8, zb kind (3: per column), B an input, beyond, small} */
    static const int cases[][10] = {
        {7, 37, 33, 1, 0, 1, 0, 0, 0},    /* int8 A: K 37 (a quad of 1), columns past two panels */
        {3, 64, 16, 0, 3, 1, 0, 0, 0},    /* three rows, zero points per row */
        {13, 31, 40, 0, 1, 0, 3, 0, 0},   /* uint8 B, zero points per column 0/128/255/..., K 31 */
        {6, 1, 20, 1, 2, 0, 1, 0, 0},     /* K 1 */
        {9, 2, 17, 1, 1, 1, 2, 0, 0},     /* K 2, int8 B zero point 127 */
        {12, 3, 18, 0, 3, 0, 2, 0, 0},    /* K 3, uint8 B zero point 255 */
        {8, 5, 16, 1, 0, 1, 1, 1, 0},     /* K 5, B an input, int8 B zero point -128 */
        {20, 33, 48, 0, 2, 1, 3, 0, 0},   /* K 33 */
        {17, 513, 35, 1, 3, 1, 3, 0, 0},  /* K 513: two passes of 256 pairs, the second odd */
        {64, 200, 100, 0, 3, 1, 0, 0, 1}, /* beyond in column 1: int16 pairs where that column is */
        {64, 200, 100, 0, 3, 1, 0, 0, 90},/* beyond in column 90: another block (2 threads) */
        {30, 96, 70, 1, 1, 0, 1, 1, 5},   /* beyond, B an input */
        {10, 7, 24, 0, 3, 1, 4, 0, 0, 1}, /* K 7, small weights, zero point -5: the odd K's padding */
        {10, 9, 24, 0, 3, 0, 4, 1, 0, 1}, /* K 9, uint8 B zero point 3, B an input */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *t = cases[ci];
        const int64_t M = t[0], K = t[1], N = t[2];
        const bool as8 = t[3], bs8 = t[5], bin = t[7];
        const int64_t beyond = t[8] ? t[8] : -1;
        uint32_t seed = 777 + (uint32_t)ci;
        const int64_t ad[2] = {M, K}, bd[2] = {K, N};
        const kiln_dtype at = as8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8, bt = bs8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8;
        int *za = malloc(sizeof(int) * (size_t)M), *zb = malloc(sizeof(int) * (size_t)N);
        for (int64_t i = 0; i < M; i++) za[i] = qb_zp(as8, t[4], i);
        for (int64_t j = 0; j < N; j++) zb[j] = qb_zp(bs8, t[6], j);
        kn_tensor *a = qb_tensor(at, 2, ad), *b = qb_tensor(bt, 2, bd);
        qb_activations(a, &seed);
        qb_weights(b, N, K, 1, N, zb, beyond, t[9], &seed); /* B's column j: a row of K, k steps N apart */
        kn_tensor *zat = qb_zero_points(at, t[4] == 3 ? M : 1, za), *zbt = qb_zero_points(bt, t[6] == 3 ? N : 1, zb);
        int64_t *want = malloc(sizeof(int64_t) * (size_t)(M * N));
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                int64_t acc = 0;
                for (int64_t k = 0; k < K; k++) acc += (qb_at(a, i * K + k) - za[i]) * (qb_at(b, k * N + j) - zb[j]);
                want[i * N + j] = acc;
            }
        tmb mb;
        tmb_init(&mb, 13);
        int x = tmb_input(&mb, "a", at, 2, ad, NULL);
        int w = bin ? tmb_input(&mb, "b", bt, 2, bd, NULL) : tmb_const_tensor(&mb, "b", b);
        int zav = tmb_const_tensor(&mb, "za", zat), zbv = tmb_const_tensor(&mb, "zb", zbt);
        int y = tmb_value(&mb, "y");
        tmb_node(&mb, "MatMulInteger", (int[]){x, w, zav, zbv}, 4, y);
        tmb_output(&mb, y);
        size_t size;
        unsigned char *m = tmb_finish(&mb, &size);
        kiln_tensor *ain = qb_input(a), *bi = bin ? qb_input(b) : NULL;
        char what[160];
        snprintf(what, sizeof what, "MatMulInteger %lldx%lld %s @ %lldx%lld %s, zero points kinds %d/%d%s, beyond %lld",
                 (long long)M, (long long)K, as8 ? "s8" : "u8", (long long)K, (long long)N, bs8 ? "s8" : "u8", t[4], t[6],
                 bin ? ", B an input" : "", (long long)beyond);
        const char *names[2] = {"a", "b"};
        kiln_tensor *ins[2] = {ain, bi};
        qb_check(m, size, names, ins, bin ? 2 : 1, want, M * N, false, false, what);
        free(m);
        free(want);
        free(za);
        free(zb);
        kiln_tensor_destroy(ain);
        kiln_tensor_destroy(bi);
        kn_tensor_free(a);
        if (bin) kn_tensor_free(b);
    }
}

/* ConvInteger (int32 sums) and QLinearConv (the tiles' requantisation from the sums: scales of
 * powers of two, so the definition's double a * r + zy is exact and rounds half to even) */
KN_TEST(cpu_qgemm_bytes_conv_exact) {
    /* {C, H, W, M, k, stride, pad, w_s8, zw kind (3: per channel), x_s8, zx kind, beyond, qlinear} */
    static const int cases[][13] = {
        {5, 9, 11, 7, 3, 1, 1, 1, 0, 0, 1, 0, 0},    /* K 45 (a quad of 1), 7 rows: a panel and 1 */
        {5, 9, 11, 7, 3, 1, 1, 1, 0, 0, 1, 0, 1},    /* the same requantised in the tiles */
        {3, 8, 8, 4, 1, 1, 0, 0, 1, 0, 0, 0, 0},     /* pointwise K 3, uint8 weights zero point 128 */
        {7, 6, 9, 13, 1, 1, 0, 0, 3, 1, 1, 0, 0},    /* K 7, per channel 0/128/255, int8 x zero point -128 */
        {33, 5, 7, 6, 1, 1, 0, 1, 3, 0, 2, 0, 1},    /* K 33, per channel, requantised */
        {16, 10, 10, 32, 3, 1, 1, 1, 0, 1, 0, 0, 1}, /* K 144, int8 x (its bytes plus 128), requantised */
        {64, 7, 7, 12, 3, 1, 1, 1, 2, 0, 1, 0, 0},   /* K 576: two passes of 256 pairs */
        {8, 13, 13, 9, 3, 2, 1, 0, 2, 0, 2, 0, 0},   /* stride 2, uint8 weights zero point 255 */
        {16, 10, 10, 32, 3, 1, 1, 1, 0, 1, 0, 17, 1},/* beyond in channel 17: the int16 pairs */
        {5, 9, 11, 7, 3, 1, 1, 0, 1, 0, 1, 3, 0},    /* beyond, uint8 weights */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *t = cases[ci];
        const int64_t C = t[0], H = t[1], W = t[2], M = t[3], k = t[4], s = t[5], p = t[6];
        const bool ws8 = t[7], xs8 = t[9], ql = t[12];
        const int64_t beyond = t[11] ? t[11] : -1, K = C * k * k;
        const int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1, n = M * OH * OW;
        uint32_t seed = 4040 + (uint32_t)ci;
        const int64_t xd[4] = {1, C, H, W}, wd[4] = {M, C, k, k};
        const kiln_dtype xt = xs8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8, wt = ws8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8;
        int *zw = malloc(sizeof(int) * (size_t)M);
        for (int64_t i = 0; i < M; i++) zw[i] = qb_zp(ws8, t[8], i);
        const int zx = qb_zp(xs8, t[10], 0);
        kn_tensor *x = qb_tensor(xt, 4, xd), *w = qb_tensor(wt, 4, wd);
        qb_activations(x, &seed);
        qb_weights(w, M, K, K, 1, zw, beyond, false, &seed);
        kn_tensor *zxt = qb_zero_points(xt, 1, &zx), *zwt = qb_zero_points(wt, t[8] == 3 ? M : 1, zw);
        /* QLinearConv: x_scale 2^-1, w_scale 2^-2 (per channel 2^-2 or 2^-3), y_scale 2^3: r = 2^-6 or
         * 2^-7, y uint8 with zero point 128, a bias */
        float ws[64];
        int32_t bias[64];
        for (int64_t i = 0; i < M; i++) ws[i] = t[8] == 3 && i % 2 ? 0.125f : 0.25f, bias[i] = (int32_t)(qb_next(&seed) % 20001) - 10000;
        int64_t *want = malloc(sizeof(int64_t) * (size_t)n);
        for (int64_t m = 0; m < M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t acc = 0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t kh = 0; kh < k; kh++)
                            for (int64_t kw = 0; kw < k; kw++) {
                                const int64_t ih = oh * s - p + kh, iw = ow * s - p + kw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                acc += (qb_at(x, (c * H + ih) * W + iw) - zx) * (qb_at(w, ((m * C + c) * k + kh) * k + kw) - zw[m]);
                            }
                    int64_t v = acc;
                    if (ql) {
                        const double r = 0.5 * (double)ws[m] / 8.0, d = (double)(acc + bias[m]) * r + 128.0;
                        v = (int64_t)fmin(255.0, fmax(0.0, nearbyint(d)));
                    }
                    want[(m * OH + oh) * OW + ow] = v;
                }
        tmb mb;
        tmb_init(&mb, 13);
        int xv = tmb_input(&mb, "x", xt, 4, xd, NULL);
        int wv = tmb_const_tensor(&mb, "w", w), zxv = tmb_const_tensor(&mb, "zx", zxt), zwv = tmb_const_tensor(&mb, "zw", zwt);
        int y = tmb_value(&mb, "y"), node;
        if (ql) {
            kn_tensor *wst = qb_tensor(KILN_DTYPE_FLOAT, t[8] == 3 ? 1 : 0, (int64_t[]){M});
            kn_tensor *bt = qb_tensor(KILN_DTYPE_INT32, 1, (int64_t[]){M});
            memcpy(wst->data, ws, sizeof(float) * (size_t)(t[8] == 3 ? M : 1));
            memcpy(bt->data, bias, sizeof(int32_t) * (size_t)M);
            kn_tensor *yz = qb_tensor(KILN_DTYPE_UINT8, 0, NULL);
            ((uint8_t *)yz->data)[0] = 128;
            int xsv = tmb_scalar(&mb, "xs", KILN_DTYPE_FLOAT, 0.5), ysv = tmb_scalar(&mb, "ys", KILN_DTYPE_FLOAT, 8.0);
            int wsv = tmb_const_tensor(&mb, "ws", wst), yzv = tmb_const_tensor(&mb, "yz", yz), bv = tmb_const_tensor(&mb, "bias", bt);
            node = tmb_node(&mb, "QLinearConv", (int[]){xv, xsv, zxv, wv, wsv, zwv, ysv, yzv, bv}, 9, y);
        } else {
            node = tmb_node(&mb, "ConvInteger", (int[]){xv, wv, zxv, zwv}, 4, y);
        }
        tmb_conv2d(&mb, node, k, s, p, 1);
        tmb_output(&mb, y);
        size_t size;
        unsigned char *m = tmb_finish(&mb, &size);
        kiln_tensor *xin = qb_input(x);
        char what[160];
        snprintf(what, sizeof what, "%s 1x%lldx%lldx%lld -> %lld k%lld s%lld %s x %s w, zero points kinds %d/%d, beyond %lld",
                 ql ? "QLinearConv" : "ConvInteger", (long long)C, (long long)H, (long long)W, (long long)M, (long long)k,
                 (long long)s, xs8 ? "s8" : "u8", ws8 ? "s8" : "u8", t[10], t[8], (long long)beyond);
        const char *names[1] = {"x"};
        qb_check(m, size, names, &xin, 1, want, n, ql, false, what);
        free(m);
        free(want);
        free(zw);
        kiln_tensor_destroy(xin);
        kn_tensor_free(x);
    }
}

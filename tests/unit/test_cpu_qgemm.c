/* The CPU's exact 8-bit products (qgemm.c, qgemm_amx.c) against their definition in int64, with
 * each form of the micro-kernels the CPU has: AMX-INT8's tiles where the CPU has them (off with
 * kn_qgemm_amx_force(false)), AVX-512 VNNI's (vpdpwssd) where the CPU has it, and the AVX2
 * forms (kn_cpu_vnni_force(false)) on the same CPU. MatMulInteger reaches kn_qgemm_run with A
 * packed per call and B a constant packed once (or a graph input), one row (the one-row tile) to
 * many, odd K (a pair's empty high half), column counts around the 16-column panel, zero points
 * per tensor and per column, B in int8 and uint8; ConvInteger reaches it with B made by the
 * im2col packing callback. Outputs must be equal, not close. */
#include "test_model_builder.h"

#include "backend/cpu/isa.h"
#include "backend/cpu/qgemm_amx.h"
#include "kiln.h"

#include <math.h>
#include <stdlib.h>

typedef struct mmi_case {
    int64_t M, K, N;
    bool b_s8, zb_cols, b_input, a_s8, za_rows;
} mmi_case;

static kn_tensor *q8_tensor(kiln_dtype dt, int rank, const int64_t *dims, uint32_t *seed) {
    kn_tensor *t;
    kn_tensor_new(dt, rank, dims, &t);
    uint8_t *p = t->data;
    for (int64_t i = 0; i < kn_tensor_count(t); i++) {
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(*seed >> 24);
    }
    return t;
}

static int64_t q8_at(const kn_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_INT8 ? ((const int8_t *)t->data)[i] : ((const uint8_t *)t->data)[i];
}

static kiln_tensor *q8_input(const kn_tensor *t) {
    kiln_tensor *k = NULL;
    kiln_tensor_create(t->dtype, t->dims, t->rank, &k);
    if (k) memcpy(kiln_tensor_data(k), t->data, (size_t)kn_tensor_count(t));
    return k;
}

/* Runs the model (data, size) on its input "x" with `threads` threads, AMX-INT8 forced on (y[0];
 * the other forms where the CPU has none) and then off (y[1]); a run that failed leaves NULL. */
static void q8_amx_on_off(const unsigned char *m, size_t size, kiln_tensor *x, int threads, kiln_tensor **y) {
    const char *names[1] = {"x"};
    y[0] = y[1] = NULL;
    for (int form = 0; form < 2; form++) {
        kn_qgemm_amx_force(form == 0);
        kiln_session *s = tmb_session(m, size, threads, 3);
        if (!s) continue;
        CHECK_STATUS(kiln_session_run(s, names, &x, 1, NULL, 1, &y[form]), KILN_OK);
        kiln_session_destroy(s);
    }
    kn_qgemm_amx_force(true);
}

/* Runs the model at levels 0 and 3 with 1 and 2 threads, each form of the kernels the CPU has:
 * AMX-INT8's tiles (qgemm_amx.c, for the products large enough), AVX-512 VNNI's and the AVX2
 * forms; every output element must equal want. */
static void q8_check(const unsigned char *m, size_t size, const char *const *names, kiln_tensor *const *ins, int nin,
                     const int64_t *want, int64_t n, const char *what) {
    const bool vnni = kn_cpu_has_vnni(), amx = kn_qgemm_amx_force(true);
    static const char *const form_names[3] = {"AMX-INT8", "VNNI", "AVX2 forms"};
    for (int form = 0; form < 3; form++) {
        if ((form == 0 && !amx) || (form == 1 && !vnni)) continue;
        kn_qgemm_amx_force(form == 0);
        kn_cpu_vnni_force(form < 2);
        for (int threads = 1; threads <= 2; threads++)
            for (int level = 0; level <= 3; level += 3) {
                kiln_session *s = tmb_session(m, size, threads, level);
                if (!s) continue;
                kiln_tensor *y = NULL;
                CHECK_STATUS(kiln_session_run(s, names, ins, nin, NULL, 1, &y), KILN_OK);
                if (y) {
                    CHECK_EQ_INT(kiln_tensor_element_count(y), n);
                    const int32_t *got = kiln_tensor_data(y);
                    int64_t bad = 0, first = -1;
                    for (int64_t i = 0; i < n && kiln_tensor_element_count(y) == n; i++)
                        if (got[i] != want[i]) bad++, first = first < 0 ? i : first;
                    CHECK_MSG(bad == 0, "%s (%s, %d threads, level %d): %lld of %lld outputs differ, first at %lld: %d, want %lld",
                              what, form_names[form], threads, level, (long long)bad,
                              (long long)n, (long long)first, first >= 0 ? got[first] : 0,
                              first >= 0 ? (long long)want[first] : 0LL);
                    kiln_tensor_destroy(y);
                }
                kiln_session_destroy(s);
            }
    }
    kn_cpu_vnni_force(true);
    kn_qgemm_amx_force(true);
}

KN_TEST(cpu_qgemm_matmul_integer_exact) {
    static const mmi_case cases[] = {
        {1, 64, 40, true, false, false},   /* one row: the gemv tile */
        {2, 7, 17, false, false, false},   /* two rows, odd K, a panel and one column */
        {3, 300, 16, true, true, false},   /* three rows: the six-row tile, per-column zero points */
        {6, 513, 33, true, false, false},  /* a whole panel of rows, K past a block of 256 pairs */
        {13, 96, 15, false, true, false},  /* panels and a tail of rows, fewer columns than a panel */
        {128, 768, 64, true, false, false},/* a transformer's projection, shrunk */
        {5, 1, 20, true, false, true},     /* K of 1, B a graph input (packed per call) */
        {40, 130, 48, false, false, true}, /* B u8 and an input */
        /* past kn_qgemm_amx_pays' threshold (the tiles where the CPU has AMX-INT8): tails of rows
         * (past 32 and 16), of K (past 64) and of columns (past 32 and 16), each signedness */
        {37, 200, 70, true, true, false, false, true},   /* u8 x s8, zero points per row and column */
        {50, 256, 45, false, false, false, true, false}, /* s8 x u8, K whole tiles: A's rows read directly */
        {33, 129, 97, true, false, true, true, true},    /* s8 x s8, B an input, odd K */
        {64, 320, 100, false, true, false, false, true}, /* u8 x u8, both zero points per row / column */
        {20, 1100, 300, true, false, false},             /* several column blocks of B */
        {1, 768, 400, true, false, false},               /* one row of A in a tile of 16 */
        {3, 200, 500, false, true, false, true, true},   /* three rows, s8 x u8, zero points per row / column */
        {128, 16, 140, false, false, false},             /* K 16: tiles 16 bytes deep, A read directly */
        {96, 24, 130, true, true, true, true, true},     /* K 24: 32 deep, padded; s8 x s8, B an input */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const mmi_case *t = &cases[ci];
        uint32_t seed = 4242 + (uint32_t)ci;
        const int64_t ad[2] = {t->M, t->K}, bd[2] = {t->K, t->N}, zd[1] = {t->N};
        const kiln_dtype bt = t->b_s8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8;
        const kiln_dtype at = t->a_s8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8;
        const int64_t zad[1] = {t->M};
        kn_tensor *a = q8_tensor(at, 2, ad, &seed), *bm = q8_tensor(bt, 2, bd, &seed);
        kn_tensor *za = q8_tensor(at, t->za_rows ? 1 : 0, zad, &seed);
        kn_tensor *zb = q8_tensor(bt, t->zb_cols ? 1 : 0, zd, &seed);
        int64_t *want = malloc(sizeof(int64_t) * (size_t)(t->M * t->N));
        for (int64_t i = 0; i < t->M; i++)
            for (int64_t j = 0; j < t->N; j++) {
                int64_t acc = 0;
                const int64_t zbj = q8_at(zb, t->zb_cols ? j : 0);
                for (int64_t k = 0; k < t->K; k++)
                    acc += (q8_at(a, i * t->K + k) - q8_at(za, t->za_rows ? i : 0)) * (q8_at(bm, k * t->N + j) - zbj);
                want[i * t->N + j] = acc;
            }
        tmb b;
        tmb_init(&b, 13);
        int x = tmb_input(&b, "a", at, 2, ad, NULL);
        kiln_tensor *ain = q8_input(a), *bin = t->b_input ? q8_input(bm) : NULL;
        int w = t->b_input ? tmb_input(&b, "b", bt, 2, bd, NULL) : tmb_const_tensor(&b, "b", bm);
        int zav = tmb_const_tensor(&b, "za", za), zbv = tmb_const_tensor(&b, "zb", zb);
        int y = tmb_value(&b, "y");
        tmb_node(&b, "MatMulInteger", (int[]){x, w, zav, zbv}, 4, y);
        tmb_output(&b, y);
        size_t size;
        unsigned char *m = tmb_finish(&b, &size);
        char what[128];
        snprintf(what, sizeof what, "MatMulInteger %lldx%lld %s @ %lldx%lld %s%s%s%s", (long long)t->M,
                 (long long)t->K, t->a_s8 ? "s8" : "u8", (long long)t->K, (long long)t->N, t->b_s8 ? "s8" : "u8",
                 t->za_rows ? ", zero point per row" : "", t->zb_cols ? ", zero point per column" : "",
                 t->b_input ? ", B an input" : "");
        const char *names[2] = {"a", "b"};
        kiln_tensor *ins[2] = {ain, bin};
        q8_check(m, size, names, ins, t->b_input ? 2 : 1, want, t->M * t->N, what);
        free(m);
        free(want);
        kiln_tensor_destroy(ain);
        kiln_tensor_destroy(bin);
        kn_tensor_free(a);
        if (t->b_input) kn_tensor_free(bm);
    }
}

/* ConvInteger through the GEMM (one group) and through the depthwise kernel (conv_int_dw.c: a
 * group per input channel; its int16 pair products are the same instruction choice) */
KN_TEST(cpu_qgemm_conv_integer_exact) {
    /* {C, H, W, M, kernel, stride, pad, w_s8, groups, w zero point per output channel} */
    static const int64_t cases[][10] = {
        {16, 12, 14, 32, 1, 1, 0, 1, 1, 0}, /* pointwise: the input planes as B */
        {8, 11, 9, 20, 3, 1, 1, 1, 1, 0},   /* 3x3 padded: im2col by the packing callback */
        {5, 13, 13, 17, 3, 2, 1, 0, 1, 0},  /* stride 2, uint8 weights, odd channel counts */
        {64, 7, 7, 6, 3, 1, 1, 1, 1, 0},    /* K 576, six output channels: one panel of rows */
        {24, 30, 37, 24, 3, 1, 1, 1, 24, 0},/* depthwise 3x3: output columns in the lanes */
        {16, 29, 40, 16, 3, 2, 1, 1, 16, 0},/* depthwise stride 2 (the int16 rows read directly) */
        {12, 14, 14, 24, 5, 1, 2, 0, 12, 0},/* depthwise 5x5, two outputs a channel, uint8 weights */
        {16, 7, 7, 16, 5, 1, 2, 1, 16, 0},  /* small planes: channels in the lanes */
        {20, 7, 7, 20, 5, 1, 2, 1, 20, 1},  /* small planes: 16 + 4 channels (AVX-512's blocks of 16) */
        {37, 10, 12, 37, 3, 1, 1, 0, 37, 0},/* small planes: three blocks, the last of 5 */
        {21, 15, 15, 21, 3, 2, 1, 1, 21, 0},/* small planes at stride 2 */
        {20, 56, 56, 20, 3, 2, 1, 1, 20, 0},/* depthwise stride 2, rows of 28 (16 + 12 columns) */
        {6, 9, 75, 12, 5, 1, 2, 1, 6, 1},   /* depthwise 5x5 two outputs a channel, rows of 75 */
        /* stride 2's int16 planes (plane_to_i16): rows of 5 (every step past the tensor's last
         * bytes for the last rows), of 16 (one whole step), of 33 (a last step of one column), k5 */
        {5, 6, 5, 5, 3, 2, 1, 1, 5, 0},
        {3, 9, 16, 6, 3, 2, 1, 0, 3, 1},
        {7, 11, 33, 7, 5, 2, 2, 1, 7, 0},
        /* past kn_qgemm_amx_pays' threshold: the weights' rows on AMX-INT8's tiles, B from the
         * im2col callbacks' pairs */
        {40, 15, 17, 36, 3, 1, 1, 1, 1, 1}, /* s8 weights per channel zero points, K 360, 36 rows */
        {64, 9, 11, 48, 1, 1, 0, 0, 1, 0},  /* pointwise u8 weights, K one tile: rows read directly */
        {33, 20, 20, 20, 3, 2, 1, 0, 1, 1}, /* odd K (297), stride 2 from the padded planes, u8 per channel */
        {32, 26, 26, 24, 3, 3, 1, 1, 1, 0}, /* stride 3: the pair packers' panels, converted */
        {32, 20, 22, 40, 1, 1, 0, 1, 1, 1}, /* pointwise K 32: tiles 32 bytes deep */
        {16, 30, 31, 36, 1, 1, 0, 0, 1, 1}, /* pointwise K 16, u8 weights: 16 deep */
        {3, 40, 41, 24, 3, 1, 1, 1, 1, 0},  /* a network's first layer: K 27, padded to 32 */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int64_t C = cases[ci][0], H = cases[ci][1], W = cases[ci][2], M = cases[ci][3], k = cases[ci][4],
                      s = cases[ci][5], p = cases[ci][6], G = cases[ci][8], Cg = C / G, Mg = M / G;
        const bool w_s8 = cases[ci][7], zw_ch = cases[ci][9];
        const int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
        uint32_t seed = 9191 + (uint32_t)ci;
        const int64_t xd[4] = {1, C, H, W}, wd[4] = {M, Cg, k, k};
        const kiln_dtype wt = w_s8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8;
        kn_tensor *x = q8_tensor(KILN_DTYPE_UINT8, 4, xd, &seed), *w = q8_tensor(wt, 4, wd, &seed);
        kn_tensor *zx = q8_tensor(KILN_DTYPE_UINT8, 0, NULL, &seed), *zw = q8_tensor(wt, zw_ch ? 1 : 0, (int64_t[]){M}, &seed);
        const int64_t n = M * OH * OW;
        int64_t *want = malloc(sizeof(int64_t) * (size_t)n);
        for (int64_t m = 0; m < M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t acc = 0;
                    for (int64_t cg = 0; cg < Cg; cg++)
                        for (int64_t kh = 0; kh < k; kh++)
                            for (int64_t kw = 0; kw < k; kw++) {
                                const int64_t ih = oh * s - p + kh, iw = ow * s - p + kw;
                                /* a padded position holds the input's zero point: (zx - zx) = 0 */
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                const int64_t c = m / Mg * Cg + cg;
                                acc += (q8_at(x, (c * H + ih) * W + iw) - q8_at(zx, 0)) *
                                       (q8_at(w, ((m * Cg + cg) * k + kh) * k + kw) - q8_at(zw, zw_ch ? m : 0));
                            }
                    want[(m * OH + oh) * OW + ow] = acc;
                }
        tmb b;
        tmb_init(&b, 13);
        int xv = tmb_input(&b, "x", KILN_DTYPE_UINT8, 4, xd, NULL);
        int wv = tmb_const_tensor(&b, "w", w), zxv = tmb_const_tensor(&b, "zx", zx), zwv = tmb_const_tensor(&b, "zw", zw);
        int y = tmb_value(&b, "y");
        int node = tmb_node(&b, "ConvInteger", (int[]){xv, wv, zxv, zwv}, 4, y);
        tmb_conv2d(&b, node, k, s, p, G);
        tmb_output(&b, y);
        size_t size;
        unsigned char *m = tmb_finish(&b, &size);
        kiln_tensor *xin = q8_input(x);
        char what[128];
        snprintf(what, sizeof what, "ConvInteger 1x%lldx%lldx%lld -> %lld k%lld s%lld p%lld group %lld %s%s",
                 (long long)C, (long long)H, (long long)W, (long long)M, (long long)k, (long long)s, (long long)p,
                 (long long)G, w_s8 ? "s8" : "u8", zw_ch ? " per channel" : "");
        const char *names[1] = {"x"};
        q8_check(m, size, names, &xin, 1, want, n, what);
        free(m);
        free(want);
        kiln_tensor_destroy(xin);
        kn_tensor_free(x);
    }
}

/* uint8 x int8 products at the bounds of the u8 x s8 forms (qgemm.h): A's bytes mostly 255 and
 * B's pairs (k, k + 1) at the int16 limit of vpmaddubsw's pair sums (255 * 127 * 2 = 64770 >
 * 32767: pairs of -128, 127, -127 that saturate a form that keeps them). B's classes:
 *  0: |b| <= 40 but for `few` pairs of extremes ((-128, -128), (127, 127), (-128, 127), ...) and
 *     pairs exactly at the bound (|b0| + |b1| = 128: (-128, 0), (64, -64), (127, 1), ...):
 *     kn_qgemm8's residual form (the extremes' second values in its list);
 *  1: full-range symmetric, [-127, 127], mostly +-127: kn_qgemm8's sign form (ConvInteger on small
 *     planes) or, where that is not taken, kn_qgemm's int16 pairs;
 *  2: full range with -128 and 127 everywhere: kn_qgemm's int16 pairs (and VNNI's, AMX's).
 * uint8 weights take the same classes as b + 128 (kn_qgemm8 packs them less 128). */
static int8_t sat_pick(uint32_t *seed, const int8_t *v, int n) {
    *seed = *seed * 1664525u + 1013904223u;
    return v[(*seed >> 16) % (uint32_t)n];
}

static uint32_t sat_rand(uint32_t *seed) {
    *seed = *seed * 1664525u + 1013904223u;
    return *seed >> 8;
}

static void sat_set(kn_tensor *t, int64_t i, int v) {
    if (t->dtype == KILN_DTYPE_INT8) ((int8_t *)t->data)[i] = (int8_t)v;
    else ((uint8_t *)t->data)[i] = (uint8_t)(v + 128);
}

/* B [K, N] (element (k, j) at k * N + j) of class cls; `few` extreme pairs in class 0 */
static void sat_fill_b(kn_tensor *t, int64_t K, int64_t N, int cls, int few, uint32_t *seed) {
    static const int8_t ext[] = {-128, 127, -127, 126, -128, 127};
    static const int8_t sym[] = {-127, 127, -127, 127, -126, 126, 100, -100};
    for (int64_t i = 0; i < K * N; i++) {
        const uint32_t r = sat_rand(seed);
        if (cls == 0) sat_set(t, i, (int)(r % 81) - 40);
        else if (cls == 1) sat_set(t, i, r % 4 ? sat_pick(seed, sym, 8) : (int)(r % 255) - 127);
        else sat_set(t, i, r % 4 ? sat_pick(seed, ext, 6) : (int)(r % 256) - 128);
    }
    if (cls != 0 || K < 2) return;
    static const int8_t bound[][2] = {{-128, 0}, {0, -128}, {64, -64}, {-64, 64}, {127, 1}, {-1, -127}, {64, 64}, {-100, -28}};
    static const int8_t over[][2] = {{-128, -128}, {127, 127}, {-128, 127}, {127, -128}, {-128, -1}, {90, 100}};
    for (int e = 0; e < 2 * few; e++) {
        const int64_t k = 2 * (int64_t)(sat_rand(seed) % (uint32_t)(K / 2)), j = (int64_t)(sat_rand(seed) % (uint32_t)N);
        const int8_t *pr = e % 2 ? bound[sat_rand(seed) % 8] : over[sat_rand(seed) % 6];
        sat_set(t, k * N + j, pr[0]);
        sat_set(t, (k + 1) * N + j, pr[1]);
    }
}

/* A's bytes: 255 three times in four, else any byte */
static void sat_fill_a(kn_tensor *t, uint32_t *seed) {
    for (int64_t i = 0; i < kn_tensor_count(t); i++) {
        const uint32_t r = sat_rand(seed);
        ((uint8_t *)t->data)[i] = r % 4 ? 255 : (uint8_t)(r >> 4);
    }
}

static kn_tensor *sat_scalar(kiln_dtype dt, int v) {
    kn_tensor *t;
    kn_tensor_new(dt, 0, NULL, &t);
    if (dt == KILN_DTYPE_INT8) *(int8_t *)t->data = (int8_t)v;
    else *(uint8_t *)t->data = (uint8_t)v;
    return t;
}

KN_TEST(cpu_qgemm_u8s8_saturating_pairs_exact) {
    /* MatMulInteger, u8 A: {M, K, N, B int8, class, few, za, zb (as int8; + 128 for uint8 B), B an input} */
    static const int mm[][9] = {
        {1, 64, 40, 1, 0, 24, 0, 0, 0},    /* one row, the residual form (a 255 pair into -128, -128 ...) */
        {2, 67, 33, 1, 0, 30, 3, -2, 0},   /* two rows, K off the quads, zero points */
        {3, 130, 70, 1, 0, 40, 255, 5, 0}, /* three rows (two and one), za 255 */
        {7, 256, 32, 0, 0, 40, 0, 0, 0},   /* uint8 weights: 0 and 255 as -128 and 127 */
        {1, 96, 20, 0, 0, 20, 9, 3, 0},
        {1, 64, 40, 1, 1, 0, 0, 0, 0},     /* full-range symmetric: past the list, kn_qgemm */
        {5, 67, 17, 1, 1, 0, 128, -1, 0},
        {2, 200, 64, 0, 1, 0, 1, 0, 0},
        {1, 64, 16, 1, 2, 0, 0, 0, 0},     /* full range: the one-row tile */
        {2, 33, 9, 1, 2, 0, 0, 0, 0},      /* two rows */
        {6, 513, 33, 1, 2, 0, 7, -128, 0}, /* six rows, K past a block, zb -128 */
        {13, 100, 30, 1, 2, 0, 255, 127, 0},
        {20, 100, 30, 1, 2, 0, 0, 0, 1},   /* B an input */
        {4, 64, 48, 1, 0, 24, 0, 0, 1},    /* class 0 as an input: kn_qgemm */
    };
    for (size_t ci = 0; ci < sizeof mm / sizeof mm[0]; ci++) {
        const int64_t M = mm[ci][0], K = mm[ci][1], N = mm[ci][2];
        const bool b_s8 = mm[ci][3], b_input = mm[ci][8];
        const int cls = mm[ci][4], few = mm[ci][5];
        uint32_t seed = 777 + (uint32_t)ci;
        const int64_t ad[2] = {M, K}, bd[2] = {K, N};
        const kiln_dtype bt = b_s8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8;
        kn_tensor *a, *bm;
        kn_tensor_new(KILN_DTYPE_UINT8, 2, ad, &a);
        kn_tensor_new(bt, 2, bd, &bm);
        sat_fill_a(a, &seed);
        sat_fill_b(bm, K, N, cls, few, &seed);
        kn_tensor *za = sat_scalar(KILN_DTYPE_UINT8, mm[ci][6]), *zb = sat_scalar(bt, b_s8 ? mm[ci][7] : mm[ci][7] + 128);
        int64_t *want = malloc(sizeof(int64_t) * (size_t)(M * N));
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                int64_t acc = 0;
                for (int64_t k = 0; k < K; k++)
                    acc += (q8_at(a, i * K + k) - q8_at(za, 0)) * (q8_at(bm, k * N + j) - q8_at(zb, 0));
                want[i * N + j] = acc;
            }
        tmb b;
        tmb_init(&b, 13);
        int x = tmb_input(&b, "a", KILN_DTYPE_UINT8, 2, ad, NULL);
        kiln_tensor *ain = q8_input(a), *bin = b_input ? q8_input(bm) : NULL;
        int w = b_input ? tmb_input(&b, "b", bt, 2, bd, NULL) : tmb_const_tensor(&b, "b", bm);
        int zav = tmb_const_tensor(&b, "za", za), zbv = tmb_const_tensor(&b, "zb", zb);
        int y = tmb_value(&b, "y");
        tmb_node(&b, "MatMulInteger", (int[]){x, w, zav, zbv}, 4, y);
        tmb_output(&b, y);
        size_t size;
        unsigned char *m = tmb_finish(&b, &size);
        char what[160];
        snprintf(what, sizeof what, "MatMulInteger %lldx%lld u8 @ %lldx%lld %s, weights of class %d%s", (long long)M,
                 (long long)K, (long long)K, (long long)N, b_s8 ? "s8" : "u8", cls, b_input ? ", B an input" : "");
        const char *names[2] = {"a", "b"};
        kiln_tensor *ins[2] = {ain, bin};
        q8_check(m, size, names, ins, b_input ? 2 : 1, want, M * N, what);
        free(m);
        free(want);
        kiln_tensor_destroy(ain);
        kiln_tensor_destroy(bin);
        kn_tensor_free(a);
        if (b_input) kn_tensor_free(bm);
    }

    /* ConvInteger, u8 x: {C, H, W, M, kernel, pad, W int8, class, zx, zw}. Class 0 here: output
     * channel 0's weights all extremes (K / 2 pairs past the bound, within the residual list) on a
     * plane of at most 16 positions (the residual form's limit); class 1 on small planes: the sign
     * form (kn_qgemm8, K tap-major), class 2: kn_qgemm. */
    static const int cv[][10] = {
        {16, 4, 4, 32, 3, 1, 1, 0, 0, 0},  /* residual form, 3x3 */
        {32, 2, 2, 16, 1, 0, 1, 0, 5, 1},  /* residual form, 1x1, zero points */
        {16, 6, 6, 32, 3, 1, 1, 1, 0, 0},  /* sign form, 3x3 */
        {32, 5, 5, 16, 1, 0, 0, 1, 3, 2},  /* sign form, uint8 weights (1-255 as -127-127) */
        {17, 3, 3, 20, 3, 1, 1, 1, 255, 0},/* sign form, odd C (K 153: a quad's tail), za 255 */
        {16, 1, 1, 40, 1, 0, 1, 1, 0, 0},  /* one position: one row */
        {16, 5, 5, 24, 3, 1, 1, 2, 0, 0},  /* full range: kn_qgemm */
        {9, 12, 12, 16, 3, 1, 0, 2, 7, 4}, /* full range, uint8 weights, a larger plane */
    };
    for (size_t ci = 0; ci < sizeof cv / sizeof cv[0]; ci++) {
        const int64_t C = cv[ci][0], H = cv[ci][1], W = cv[ci][2], M = cv[ci][3], k = cv[ci][4], p = cv[ci][5];
        const bool w_s8 = cv[ci][6];
        const int cls = cv[ci][7];
        const int64_t OH = H + 2 * p - k + 1, OW = W + 2 * p - k + 1, K = C * k * k;
        uint32_t seed = 991 + (uint32_t)ci;
        const int64_t xd[4] = {1, C, H, W}, wd[4] = {M, C, k, k};
        const kiln_dtype wt = w_s8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8;
        kn_tensor *x, *w;
        kn_tensor_new(KILN_DTYPE_UINT8, 4, xd, &x);
        kn_tensor_new(wt, 4, wd, &w);
        sat_fill_a(x, &seed);
        /* the classes over W as [M, K] (class 0's extremes: output channel 0's) */
        sat_fill_b(w, M, K, cls == 0 ? 0 : cls, 0, &seed);
        if (cls == 0) {
            static const int8_t ext[] = {-128, 127, -127, 127, -128};
            for (int64_t i = 0; i < K; i++) sat_set(w, i, sat_pick(&seed, ext, 5));
        }
        kn_tensor *zx = sat_scalar(KILN_DTYPE_UINT8, cv[ci][8]), *zw = sat_scalar(wt, w_s8 ? cv[ci][9] : cv[ci][9] + 128);
        const int64_t n = M * OH * OW;
        int64_t *want = malloc(sizeof(int64_t) * (size_t)n);
        for (int64_t m = 0; m < M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t acc = 0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t kh = 0; kh < k; kh++)
                            for (int64_t kw = 0; kw < k; kw++) {
                                const int64_t ih = oh - p + kh, iw = ow - p + kw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue; /* x's zero point there */
                                acc += (q8_at(x, (c * H + ih) * W + iw) - q8_at(zx, 0)) *
                                       (q8_at(w, ((m * C + c) * k + kh) * k + kw) - q8_at(zw, 0));
                            }
                    want[(m * OH + oh) * OW + ow] = acc;
                }
        tmb b;
        tmb_init(&b, 13);
        int xv = tmb_input(&b, "x", KILN_DTYPE_UINT8, 4, xd, NULL);
        int wv = tmb_const_tensor(&b, "w", w), zxv = tmb_const_tensor(&b, "zx", zx), zwv = tmb_const_tensor(&b, "zw", zw);
        int y = tmb_value(&b, "y");
        int node = tmb_node(&b, "ConvInteger", (int[]){xv, wv, zxv, zwv}, 4, y);
        tmb_conv2d(&b, node, k, 1, p, 1);
        tmb_output(&b, y);
        size_t size;
        unsigned char *m = tmb_finish(&b, &size);
        kiln_tensor *xin = q8_input(x);
        char what[160];
        snprintf(what, sizeof what, "ConvInteger 1x%lldx%lldx%lld -> %lld k%lld p%lld, %s weights of class %d",
                 (long long)C, (long long)H, (long long)W, (long long)M, (long long)k, (long long)p,
                 w_s8 ? "s8" : "u8", cls);
        const char *names[1] = {"x"};
        q8_check(m, size, names, &xin, 1, want, n, what);
        free(m);
        free(want);
        kiln_tensor_destroy(xin);
        kn_tensor_free(x);
    }
}

/* com.microsoft DynamicQuantizeLSTM past the AMX threshold (its input projection; with a batch
 * of 4 and H 128 its steps too): AMX-INT8's int32 products go through the same float loop as
 * the other forms' (kn_qgemm8_out's operations), so the outputs must be the same bits with the
 * tiles on and off (kn_qgemm_amx_force). On a CPU without AMX-INT8 there is one form only. */
KN_TEST(cpu_qgemm_dq_lstm_amx_same_bits) {
    /* {T, B, I, H, directions, int8 weights, weight range (0: full)} */
    static const int64_t cases[][7] = {
        {12, 3, 256, 64, 1, 1, 0},  /* the input projection on the tiles, the steps not */
        {6, 4, 200, 128, 2, 1, 40}, /* both, two directions, weights in kn_qgemm8's form when off */
        {5, 4, 96, 128, 1, 0, 0},   /* uint8 weights */
    };
    const bool amx = kn_qgemm_amx_force(true);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int64_t T = cases[ci][0], B = cases[ci][1], I = cases[ci][2], H = cases[ci][3], nd = cases[ci][4],
                      range = cases[ci][6];
        const bool s8 = cases[ci][5];
        const kiln_dtype wt = s8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8;
        uint32_t seed = 777 + (uint32_t)ci;
        const int64_t xd[3] = {T, B, I}, wd[3] = {nd, I, 4 * H}, rd[3] = {nd, H, 4 * H}, sd[1] = {nd};
        kn_tensor *w = q8_tensor(wt, 3, wd, &seed), *r = q8_tensor(wt, 3, rd, &seed);
        for (int k = 0; k < 2 && range; k++) { /* int8 weights in [-range, range] */
            kn_tensor *t = k ? r : w;
            for (int64_t i = 0; i < kn_tensor_count(t); i++)
                ((int8_t *)t->data)[i] = (int8_t)((int)((uint8_t *)t->data)[i] % (2 * (int)range + 1) - (int)range);
        }
        kn_tensor *ws, *rs, *wz, *rz;
        kn_tensor_new(KILN_DTYPE_FLOAT, 1, sd, &ws);
        kn_tensor_new(KILN_DTYPE_FLOAT, 1, sd, &rs);
        kn_tensor_new(wt, 1, sd, &wz);
        kn_tensor_new(wt, 1, sd, &rz);
        for (int64_t d = 0; d < nd; d++) {
            ((float *)ws->data)[d] = 0.004f, ((float *)rs->data)[d] = 0.003f;
            ((uint8_t *)wz->data)[d] = ((uint8_t *)rz->data)[d] = s8 ? 0 : 128;
        }
        kn_tensor *x;
        kn_tensor_new(KILN_DTYPE_FLOAT, 3, xd, &x);
        for (int64_t i = 0; i < kn_tensor_count(x); i++) ((float *)x->data)[i] = tmb_rand(&seed) * 2.0f - 1.0f;
        tmb b;
        tmb_init(&b, 17);
        b.m->opsets[1].domain = kn_arena_strdup(&b.m->arena, "com.microsoft");
        int xv = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, xd, NULL);
        int in[12] = {xv, tmb_const_tensor(&b, "w", w), tmb_const_tensor(&b, "r", r), -1, -1, -1, -1, -1,
                      tmb_const_tensor(&b, "ws", ws), tmb_const_tensor(&b, "wz", wz), tmb_const_tensor(&b, "rs", rs),
                      tmb_const_tensor(&b, "rz", rz)};
        int y = tmb_value(&b, "y");
        int node = tmb_node_in(&b, "DynamicQuantizeLSTM", "com.microsoft", in, 12, y);
        tmb_int(&b, node, "hidden_size", H);
        tmb_str(&b, node, "direction", nd == 2 ? "bidirectional" : "forward");
        tmb_output(&b, y);
        size_t size;
        unsigned char *m = tmb_finish(&b, &size);
        kiln_tensor *xin = NULL;
        kiln_tensor_create(KILN_DTYPE_FLOAT, xd, 3, &xin);
        if (xin) memcpy(kiln_tensor_data(xin), x->data, sizeof(float) * (size_t)kn_tensor_count(x));
        for (int threads = 1; threads <= 2; threads++) {
            kiln_tensor *y2[2];
            q8_amx_on_off(m, size, xin, threads, y2);
            if (y2[0] && y2[1]) {
                const int64_t n = kiln_tensor_element_count(y2[0]);
                CHECK_EQ_INT(kiln_tensor_element_count(y2[1]), n);
                CHECK_MSG(n == kiln_tensor_element_count(y2[1]) &&
                              !memcmp(kiln_tensor_data(y2[0]), kiln_tensor_data(y2[1]), sizeof(float) * (size_t)n),
                          "DynamicQuantizeLSTM T%lld B%lld I%lld H%lld (%d threads): AMX-INT8 (%s) and the other forms differ",
                          (long long)T, (long long)B, (long long)I, (long long)H, threads, amx ? "on" : "absent");
            }
            kiln_tensor_destroy(y2[0]);
            kiln_tensor_destroy(y2[1]);
        }
        free(m);
        kiln_tensor_destroy(xin);
        kn_tensor_free(x);
    }
}

/* QLinearConv past the AMX threshold: the tiles' epilogue adds the bias and requantises straight
 * from the sums (kn_qgemm_amx_args.rq_y) with kn_q_requant's operations, so the output bytes must
 * equal the other forms' (the int32 sums, then that pass over them), tiles on and off; bias or
 * none, per-channel or per-tensor scales, uint8 and int8 outputs with both ends saturating. */
KN_TEST(cpu_qgemm_qlinear_conv_amx_same_bytes) {
    /* {C, H, W, M, kernel, stride, pad, bias, per-channel scales, int8 output} */
    static const int64_t cases[][10] = {
        {64, 15, 15, 64, 3, 1, 1, 1, 1, 0}, /* 3x3 from the padded planes */
        {32, 28, 30, 48, 1, 1, 0, 0, 0, 1}, /* pointwise K 32 */
        {3, 50, 52, 32, 3, 2, 1, 1, 1, 0},  /* a first layer, stride 2 */
        {40, 21, 23, 36, 3, 3, 1, 1, 0, 1}, /* stride 3 (converted pairs) */
    };
    const bool amx = kn_qgemm_amx_force(true);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int64_t C = cases[ci][0], H = cases[ci][1], W = cases[ci][2], M = cases[ci][3], k = cases[ci][4],
                      st = cases[ci][5], p = cases[ci][6];
        const bool has_bias = cases[ci][7], per_ch = cases[ci][8], y_s8 = cases[ci][9];
        uint32_t seed = 4711 + (uint32_t)ci;
        const int64_t xd[4] = {1, C, H, W}, wd[4] = {M, C, k, k}, md[1] = {M};
        kn_tensor *x = q8_tensor(KILN_DTYPE_UINT8, 4, xd, &seed), *w = q8_tensor(KILN_DTYPE_INT8, 4, wd, &seed);
        kn_tensor *xs, *xz, *ws, *wz, *ys, *yz, *bt = NULL;
        kn_tensor_new(KILN_DTYPE_FLOAT, 0, NULL, &xs);
        kn_tensor_new(KILN_DTYPE_UINT8, 0, NULL, &xz);
        kn_tensor_new(KILN_DTYPE_FLOAT, per_ch ? 1 : 0, md, &ws);
        kn_tensor_new(KILN_DTYPE_INT8, per_ch ? 1 : 0, md, &wz);
        kn_tensor_new(KILN_DTYPE_FLOAT, 0, NULL, &ys);
        kn_tensor_new(y_s8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8, 0, NULL, &yz);
        *(float *)xs->data = 0.02f, *(uint8_t *)xz->data = 121, *(float *)ys->data = 0.05f;
        *(uint8_t *)yz->data = y_s8 ? (uint8_t)(int8_t)-5 : 7;
        for (int64_t m = 0; m < (per_ch ? M : 1); m++) {
            ((float *)ws->data)[m] = 0.001f + 0.004f * tmb_rand(&seed);
            ((int8_t *)wz->data)[m] = 0;
        }
        if (has_bias) {
            kn_tensor_new(KILN_DTYPE_INT32, 1, md, &bt);
            for (int64_t m = 0; m < M; m++) ((int32_t *)bt->data)[m] = (int32_t)(tmb_rand(&seed) * 40000.0f) - 20000;
        }
        tmb b;
        tmb_init(&b, 13);
        int in[9] = {tmb_input(&b, "x", KILN_DTYPE_UINT8, 4, xd, NULL), tmb_const_tensor(&b, "xs", xs),
                     tmb_const_tensor(&b, "xz", xz), tmb_const_tensor(&b, "w", w), tmb_const_tensor(&b, "ws", ws),
                     tmb_const_tensor(&b, "wz", wz), tmb_const_tensor(&b, "ys", ys), tmb_const_tensor(&b, "yz", yz),
                     bt ? tmb_const_tensor(&b, "b", bt) : -1};
        int y = tmb_value(&b, "y");
        tmb_conv2d(&b, tmb_node(&b, "QLinearConv", in, bt ? 9 : 8, y), k, st, p, 1);
        tmb_output(&b, y);
        size_t size;
        unsigned char *mb = tmb_finish(&b, &size);
        kiln_tensor *xin = q8_input(x);
        for (int threads = 1; threads <= 2; threads++) {
            kiln_tensor *y2[2];
            q8_amx_on_off(mb, size, xin, threads, y2);
            if (y2[0] && y2[1]) {
                const int64_t n = kiln_tensor_element_count(y2[0]);
                CHECK_MSG(n == kiln_tensor_element_count(y2[1]) && !memcmp(kiln_tensor_data(y2[0]), kiln_tensor_data(y2[1]), (size_t)n),
                          "QLinearConv 1x%lldx%lldx%lld -> %lld k%lld s%lld (%d threads): AMX-INT8 (%s) and the other forms differ",
                          (long long)C, (long long)H, (long long)W, (long long)M, (long long)k, (long long)st, threads,
                          amx ? "on" : "absent");
            }
            kiln_tensor_destroy(y2[0]);
            kiln_tensor_destroy(y2[1]);
        }
        free(mb);
        kiln_tensor_destroy(xin);
        kn_tensor_free(x);
    }
}

/* QLinearConv through kn_qgemm's tiles that requantise from their registers (rq_y; planes past
 * 4096 outputs, which the transposed kn_qgemm8 form does not take) against the definition: acc =
 * bias + sum (x - xz)(w - wz) in int64, y = saturate(round_half_even((double)acc * r + yz)) with
 * r = x_scale * w_scale / y_scale in float (the kernel's scale). Row counts past the six-row tile
 * (a 2-row and a 1-row last panel), planes not a multiple of 16 columns, x's zero point 0 and not
 * (A's row sums), int8 and uint8 outputs, saturation at both ends, power-of-two scales whose odd
 * sums are exact ties (the double form), K from 1 to 72 (1x1 and 3x3), 1 and 2 threads, the
 * AVX2 tiles and (where the CPU has them) the VNNI ones, levels 0 and 3. */
KN_TEST(cpu_qgemm_qlinear_conv_requant_tiles_exact) {
    /* {C, H, W, M, kernel, pad, bias, per-channel scales, int8 output, x zero point, y scale (0: from
     * the spread, 1: 1, 2: 16 with biases near +-2^25, past the one-rounding form's bound: the
     * float form with its double fallback), power-of-two scales} */
    static const int64_t cases[][12] = {
        {16, 70, 70, 32, 1, 0, 1, 1, 0, 17, 0, 0},  /* the 1x16x112x112 -> 32 class: K 16, 2-row panel */
        {32, 65, 66, 13, 1, 0, 1, 0, 1, 128, 0, 0}, /* K 32, a 1-row panel, 4290 = 268 x 16 + 2 columns */
        {1, 80, 81, 7, 1, 0, 0, 1, 0, 0, 0, 0},     /* K 1 (one odd pair), no bias, x zero point 0 */
        {8, 66, 66, 20, 3, 1, 1, 1, 1, 3, 0, 0},    /* 3x3, K 72 from the padded planes */
        {16, 64, 70, 9, 1, 0, 1, 0, 0, 200, 1, 1},  /* power-of-two scales: exact ties; many saturate */
        {24, 65, 65, 6, 1, 0, 1, 1, 1, 90, 1, 1},   /* per-channel powers of two: ties, int8 */
        {16, 66, 64, 11, 1, 0, 1, 1, 0, 40, 2, 0},  /* biases past 2^24: rq16_avx2's rows */
        {16, 66, 64, 8, 1, 0, 1, 0, 1, 60, 2, 1},   /* the same with exact ties (the double fallback) */
    };
    const bool vnni = kn_cpu_has_vnni();
    kn_qgemm_amx_force(false);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int64_t C = cases[ci][0], H = cases[ci][1], W = cases[ci][2], M = cases[ci][3], k = cases[ci][4],
                      p = cases[ci][5];
        const bool has_bias = cases[ci][6], per_ch = cases[ci][7], y_s8 = cases[ci][8], pow2 = cases[ci][11];
        const int32_t zx = (int32_t)cases[ci][9];
        uint32_t seed = 9001 + (uint32_t)ci;
        const int64_t xd[4] = {1, C, H, W}, wd[4] = {M, C, k, k}, md[1] = {M};
        kn_tensor *x = q8_tensor(KILN_DTYPE_UINT8, 4, xd, &seed), *w = q8_tensor(KILN_DTYPE_INT8, 4, wd, &seed);
        kn_tensor *xs, *xz, *ws, *wz, *ys, *yz, *bt = NULL;
        kn_tensor_new(KILN_DTYPE_FLOAT, 0, NULL, &xs);
        kn_tensor_new(KILN_DTYPE_UINT8, 0, NULL, &xz);
        kn_tensor_new(KILN_DTYPE_FLOAT, per_ch ? 1 : 0, md, &ws);
        kn_tensor_new(KILN_DTYPE_INT8, per_ch ? 1 : 0, md, &wz);
        kn_tensor_new(KILN_DTYPE_FLOAT, 0, NULL, &ys);
        kn_tensor_new(y_s8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8, 0, NULL, &yz);
        const int32_t yzv = y_s8 ? -5 : 120;
        *(float *)xs->data = pow2 ? 0.5f : 0.02f, *(uint8_t *)xz->data = (uint8_t)zx;
        /* the sums' spread (~74 * 128 * sqrt(K)) over ~60 steps, or a scale that saturates many */
        const double K = (double)(C * k * k);
        /* (2 with powers of two: r = 2^-18 and biases +-(2^25 + 2^17), whose sums lie about 128.5 steps
         * from y's zero point: ties where a sum is 2^17 mod 2^18 from them) */
        *(float *)ys->data = cases[ci][10] == 2 ? (pow2 ? 2048.0f : 16.0f) : cases[ci][10] ? 1.0f
                                                        : (float)(0.02 * 0.004 * 74.0 * 128.0 * sqrt(K) / 60.0);
        *(uint8_t *)yz->data = (uint8_t)(int8_t)yzv;
        for (int64_t m = 0; m < (per_ch ? M : 1); m++) {
            ((float *)ws->data)[m] = pow2 ? ldexpf(1.0f, -6 - (int)(m % 3)) : 0.002f + 0.004f * (tmb_rand(&seed) + 1.0f);
            ((int8_t *)wz->data)[m] = 0;
        }
        if (has_bias) {
            kn_tensor_new(KILN_DTYPE_INT32, 1, md, &bt);
            for (int64_t m = 0; m < M; m++)
                ((int32_t *)bt->data)[m] = cases[ci][10] == 2 ? (m % 2 ? -1 : 1) * (33554432 + (pow2 ? 131072 : (int32_t)(tmb_rand(&seed) * 2e6f)))
                                                              : (int32_t)(tmb_rand(&seed) * 40000.0f);
        }
        /* the definition */
        const int64_t OH = H + 2 * p - k + 1, OW = W + 2 * p - k + 1, P = OH * OW, n = M * P;
        int64_t *want = malloc(sizeof(int64_t) * (size_t)n);
        int64_t lo_hits = 0, hi_hits = 0;
        for (int64_t m = 0; m < M; m++) {
            const float r = *(const float *)xs->data * ((const float *)ws->data)[per_ch ? m : 0] / *(const float *)ys->data;
            for (int64_t o = 0; o < P; o++) {
                const int64_t oh = o / OW, ow = o % OW;
                int64_t acc = bt ? ((const int32_t *)bt->data)[m] : 0;
                for (int64_t c = 0; c < C; c++)
                    for (int64_t kh = 0; kh < k; kh++)
                        for (int64_t kw = 0; kw < k; kw++) {
                            const int64_t ih = oh + kh - p, iw = ow + kw - p;
                            const int64_t xv = ih < 0 || ih >= H || iw < 0 || iw >= W ? zx : q8_at(x, (c * H + ih) * W + iw);
                            acc += (xv - zx) * q8_at(w, ((m * C + c) * k + kh) * k + kw);
                        }
                const double lo = y_s8 ? -128 : 0, hi = y_s8 ? 127 : 255;
                double v = nearbyint((double)acc * (double)r + (double)yzv);
                v = v < lo ? lo : v > hi ? hi : v;
                lo_hits += v == lo, hi_hits += v == hi;
                want[m * P + o] = (int64_t)v;
            }
        }
        CHECK_MSG(cases[ci][10] != 1 || (lo_hits > 0 && hi_hits > 0), "case %zu: the scale saturates at both ends", ci);
        tmb b;
        tmb_init(&b, 13);
        int in[9] = {tmb_input(&b, "x", KILN_DTYPE_UINT8, 4, xd, NULL), tmb_const_tensor(&b, "xs", xs),
                     tmb_const_tensor(&b, "xz", xz), tmb_const_tensor(&b, "w", w), tmb_const_tensor(&b, "ws", ws),
                     tmb_const_tensor(&b, "wz", wz), tmb_const_tensor(&b, "ys", ys), tmb_const_tensor(&b, "yz", yz),
                     bt ? tmb_const_tensor(&b, "b", bt) : -1};
        int y = tmb_value(&b, "y");
        tmb_conv2d(&b, tmb_node(&b, "QLinearConv", in, bt ? 9 : 8, y), k, 1, p, 1);
        tmb_output(&b, y);
        size_t size;
        unsigned char *mb = tmb_finish(&b, &size);
        kiln_tensor *xin = q8_input(x);
        const char *names[1] = {"x"};
        for (int form = 0; form < 2; form++) {
            if (form == 1 && !vnni) continue;
            kn_cpu_vnni_force(form == 1);
            for (int threads = 1; threads <= 2; threads++)
                for (int level = 0; level <= 3; level += 3) {
                    kiln_session *s = tmb_session(mb, size, threads, level);
                    if (!s) continue;
                    kiln_tensor *yt = NULL;
                    CHECK_STATUS(kiln_session_run(s, names, &xin, 1, NULL, 1, &yt), KILN_OK);
                    if (yt && kiln_tensor_element_count(yt) == n) {
                        const void *got = kiln_tensor_data(yt);
                        int64_t bad = 0, first = -1;
                        for (int64_t i = 0; i < n; i++) {
                            const int64_t g = y_s8 ? ((const int8_t *)got)[i] : ((const uint8_t *)got)[i];
                            if (g != want[i]) bad++, first = first < 0 ? i : first;
                        }
                        CHECK_MSG(bad == 0,
                                  "QLinearConv 1x%lldx%lldx%lld -> %lld k%lld (%s, %d threads, level %d): %lld of %lld "
                                  "outputs differ from the definition, first at %lld: want %lld",
                                  (long long)C, (long long)H, (long long)W, (long long)M, (long long)k,
                                  form ? "VNNI" : "AVX2 tiles", threads, level, (long long)bad, (long long)n,
                                  (long long)first, first >= 0 ? (long long)want[first] : 0LL);
                    } else {
                        CHECK_MSG(false, "case %zu: no output of %lld elements", ci, (long long)n);
                    }
                    kiln_tensor_destroy(yt);
                    kiln_session_destroy(s);
                }
        }
        kn_cpu_vnni_force(true);
        free(want);
        free(mb);
        kiln_tensor_destroy(xin);
        kn_tensor_free(x);
    }
    kn_qgemm_amx_force(true);
}

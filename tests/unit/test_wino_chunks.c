/* conv_winograd.c's whole chunks of tile rows on each thread (F(4x4, 3x3), few channels over many
 * tile rows at several threads: each chunk's input transform, products and output transform on one
 * thread) against the definition in double: chunks that split images, a partial last chunk, tile
 * rows not a multiple of the vector's group, partial tiles, asymmetric pads, weights a constant
 * (prepacked) or a graph input, a fused Relu (level 3), 2 and 3 threads, by the default choice and
 * forced (KILN_WINO_CHUNKS=1), and the usual order (KILN_WINO_CHUNKS=0) on the same cases. */
#include "test_model_builder.h"

#include "kiln.h"

#include <math.h>
#include <stdlib.h>

typedef struct wc_case {
    int64_t N, C, H, W, M;
    int64_t pads[4]; /* top, left, bottom, right */
    bool w_input, relu;
} wc_case;

static unsigned char *wc_model(const wc_case *t, kiln_tensor **w_const, kiln_tensor **b_const, size_t *size) {
    tmb b;
    tmb_init(&b, 23);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){t->N, t->C, t->H, t->W}, NULL);
    int64_t wd[4] = {t->M, t->C, 3, 3};
    int w;
    if (t->w_input) {
        w = tmb_input(&b, "w", KILN_DTYPE_FLOAT, 4, wd, NULL);
    } else {
        w = tmb_const(&b, "w", 4, wd, 0.3f);
        kn_tensor_clone(b.g->values[w].constant, w_const);
    }
    int bias = tmb_const(&b, "b", 1, (int64_t[]){t->M}, 0.5f);
    kn_tensor_clone(b.g->values[bias].constant, b_const);
    int y = tmb_value(&b, "y"), r = tmb_value(&b, "r");
    int node = tmb_node(&b, "Conv", (int[]){x, w, bias}, 3, y);
    tmb_ints(&b, node, "kernel_shape", (int64_t[]){3, 3}, 2);
    tmb_ints(&b, node, "pads", (int64_t[]){t->pads[0], t->pads[1], t->pads[2], t->pads[3]}, 4);
    if (t->relu) {
        tmb_node(&b, "Relu", (int[]){y}, 1, r);
        tmb_output(&b, r);
    } else {
        tmb_output(&b, y);
    }
    return tmb_finish(&b, size);
}

KN_TEST(cpu_wino_chunks_per_thread_match_definition) {
    static const wc_case cases[] = {
        {32, 32, 14, 14, 32, {1, 1, 1, 1}, false, false}, /* issue 22's b32 case: 128 tile rows */
        {9, 16, 13, 15, 24, {1, 0, 2, 1}, false, true},   /* odd sizes, asymmetric pads, Relu: 36 rows */
        {5, 24, 30, 16, 40, {1, 1, 1, 1}, true, false},   /* W a graph input, 8 rows an image: 40 */
        {33, 8, 6, 9, 16, {0, 0, 0, 0}, false, false},    /* one tile row an image, partial tiles: 33 */
        {3, 64, 60, 12, 64, {1, 1, 1, 1}, false, true},   /* chunks that split images: 45 rows */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const wc_case *t = &cases[ci];
        kiln_tensor *wc = NULL, *bc = NULL;
        size_t size;
        unsigned char *m = wc_model(t, &wc, &bc, &size);
        CHECK(m != NULL);
        if (!m) continue;
        const int64_t OH = t->H + t->pads[0] + t->pads[2] - 2, OW = t->W + t->pads[1] + t->pads[3] - 2;
        uint32_t seed = 77 + (uint32_t)ci;
        kiln_tensor *x = NULL, *w = wc;
        kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){t->N, t->C, t->H, t->W}, 4, &x);
        float *xp = kiln_tensor_data(x);
        for (int64_t i = 0; i < kiln_tensor_element_count(x); i++) xp[i] = tmb_rand(&seed);
        if (t->w_input) {
            kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){t->M, t->C, 3, 3}, 4, &w);
            float *wp = kiln_tensor_data(w);
            for (int64_t i = 0; i < kiln_tensor_element_count(w); i++) wp[i] = 0.3f * tmb_rand(&seed);
        }
        const float *wp = kiln_tensor_data(w), *bp = kiln_tensor_data(bc);
        const size_t ny = (size_t)(t->N * t->M * OH * OW);
        double *want = malloc(sizeof(double) * ny), *scale = malloc(sizeof(double) * ny);
        for (int64_t n = 0; n < t->N; n++)
            for (int64_t o = 0; o < t->M; o++)
                for (int64_t oh = 0; oh < OH; oh++)
                    for (int64_t ow = 0; ow < OW; ow++) {
                        double acc = bp[o], sc = fabs(bp[o]);
                        for (int64_t c = 0; c < t->C; c++)
                            for (int64_t kh = 0; kh < 3; kh++)
                                for (int64_t kw = 0; kw < 3; kw++) {
                                    const int64_t ih = oh - t->pads[0] + kh, iw = ow - t->pads[1] + kw;
                                    if (ih < 0 || ih >= t->H || iw < 0 || iw >= t->W) continue;
                                    const double p = (double)xp[((n * t->C + c) * t->H + ih) * t->W + iw] *
                                                     wp[((o * t->C + c) * 3 + kh) * 3 + kw];
                                    acc += p;
                                    sc += fabs(p);
                                }
                        const size_t i = (size_t)(((n * t->M + o) * OH + oh) * OW + ow);
                        want[i] = t->relu && acc < 0 ? 0 : acc;
                        scale[i] = sc;
                    }
        setenv("KILN_WINO", "1", 1);
        setenv("KILN_WINO2", "0", 1);
        for (int force = 0; force < 3; force++) { /* the default choice, forced on, forced off */
            if (force) setenv("KILN_WINO_CHUNKS", force == 1 ? "1" : "0", 1);
            for (int threads = 2; threads <= 3; threads++) {
                kiln_session *s = tmb_session(m, size, threads, t->relu ? 3 : 0);
                CHECK(s != NULL);
                if (!s) continue;
                const char *names[2] = {"x", "w"};
                kiln_tensor *ins[2] = {x, w};
                for (int run = 0; run < 2; run++) {
                    kiln_tensor *y = NULL;
                    CHECK_STATUS(kiln_session_run(s, names, ins, t->w_input ? 2 : 1, NULL, 1, &y), KILN_OK);
                    if (!y) continue;
                    size_t first = 0, bad = (size_t)-1;
                    if (kiln_tensor_element_count(y) == (int64_t)ny)
                        bad = tmb_count_off(kiln_tensor_data(y), want, scale, ny, 1e-6, 5e-6, &first);
                    CHECK_MSG(bad == 0, "case %zu (%lldx%lldx%lldx%lld -> %lld), chunks forced %d, %d threads, run %d: "
                              "%zu of %zu outputs differ, first at %zu", ci, (long long)t->N, (long long)t->C,
                              (long long)t->H, (long long)t->W, (long long)t->M, force, threads, run, bad, ny, first);
                    kiln_tensor_destroy(y);
                }
                kiln_session_destroy(s);
            }
        }
        unsetenv("KILN_WINO_CHUNKS"), unsetenv("KILN_WINO"), unsetenv("KILN_WINO2");
        free(want);
        free(scale);
        kiln_tensor_destroy(x);
        kiln_tensor_destroy(w);
        kiln_tensor_destroy(bc);
        free(m);
    }
}

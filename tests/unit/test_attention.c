/* Unit tests of the CPU attention engine (attention_core.c) against a naive reference computed
 * here in double precision: causal and windowed masks with offsets, GQA, boolean and additive
 * masks, key lengths, fully masked rows (zeros for ai.onnx, an average with a finite filter value
 * as ONNX Runtime does), strided 3-D layouts, softcap, and key ranges long enough for the tiled
 * online-softmax path. */
#include "backend/cpu/attention_impl.h"
#include "util/threadpool.h"
#include "unit.h"

#include <stdlib.h>

static float urand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f;
}

static float *rand_buf(int64_t n, unsigned *seed) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = urand(seed);
    return p;
}

/* The reference: per (b, h, i), scores over all keys in double with the engine's semantics. */
static void reference(const kn_attn *a, double *y) {
    const int64_t group = a->q_heads / a->kv_heads;
    double *s = malloc(sizeof(double) * (size_t)(a->skv > 0 ? a->skv : 1));
    for (int64_t b = 0; b < a->batch; b++)
        for (int64_t h = 0; h < a->q_heads; h++)
            for (int64_t i = 0; i < a->sq; i++) {
                const int64_t kh = h / group, p = (a->offset ? a->offset[b] : 0) + i;
                bool any = false;
                for (int64_t j = 0; j < a->skv; j++) {
                    double acc = 0.0;
                    for (int64_t x = 0; x < a->dk; x++)
                        acc += (double)a->q.p[b * a->q.sb + h * a->q.sh + i * a->q.ss + x] *
                               a->k.p[b * a->k.sb + kh * a->k.sh + j * a->k.ss + x];
                    acc *= a->scale;
                    if (a->softcap > 0) acc = a->softcap * tanh(acc / a->softcap);
                    bool excluded = (a->causal && j > p) || (a->left_window >= 0 && j < p - a->left_window) ||
                                    (a->right_window >= 0 && j > p + a->right_window);
                    bool padded = (a->kv_end && j >= a->kv_end[b]) || (a->kv_begin && j < a->kv_begin[b]) ||
                                  (a->mask_cols >= 0 && j >= a->mask_cols);
                    if (!padded && a->keep.p &&
                        !((const unsigned char *)a->keep.p)[b * a->keep.sb + h * a->keep.sh + i * a->keep.si + j * a->keep.sj])
                        padded = true;
                    double bias = 0.0;
                    if (a->bias.p && (a->mask_cols < 0 || j < a->mask_cols))
                        bias = ((const float *)a->bias.p)[b * a->bias.sb + h * a->bias.sh + i * a->bias.si + j * a->bias.sj];
                    if (excluded) acc = -INFINITY;
                    else if (padded) acc += a->masked;
                    acc += bias;
                    if (!excluded && !padded && bias != -INFINITY) any = true;
                    s[j] = acc;
                }
                double mx = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j < a->skv; j++) mx = s[j] > mx ? s[j] : mx;
                for (int64_t j = 0; j < a->skv; j++) {
                    s[j] = mx == -INFINITY ? 0.0 : exp(s[j] - mx);
                    sum += s[j];
                }
                for (int64_t x = 0; x < a->dv; x++) {
                    double acc = 0.0;
                    if (sum > 0 && (any || !a->zero_masked_rows))
                        for (int64_t j = 0; j < a->skv; j++)
                            acc += s[j] / sum * a->v.p[b * a->v.sb + kh * a->v.sh + j * a->v.ss + x];
                    y[((b * a->q_heads + h) * a->sq + i) * a->dv + x] = acc;
                }
            }
    free(s);
}

/* Runs the engine (4-D contiguous Q/K/V/Y unless the caller set strides) with and without
 * threads and compares with the reference: |got - want| <= 2e-4 (floor + |want|). A finite filter
 * value (-10000) costs the scores their low bits in float (ONNX Runtime's too), hence the larger
 * floor for those cases. */
static void check_tol(kn_attn *a, const char *what, double floor) {
    int64_t ny = a->batch * a->q_heads * a->sq * a->dv;
    double *want = malloc(sizeof(double) * (size_t)(ny > 0 ? ny : 1));
    reference(a, want);
    kn_threadpool *pool = NULL;
    CHECK_STATUS(kn_threadpool_create(2, &pool), KILN_OK);
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t i = 0; i < ny; i++) a->y[i] = NAN;
        CHECK_STATUS(kn_attn_run(pass ? pool : NULL, a), KILN_OK);
        double worst = 0.0;
        int64_t at = -1;
        for (int64_t b = 0; b < a->batch; b++)
            for (int64_t h = 0; h < a->q_heads; h++)
                for (int64_t i = 0; i < a->sq; i++)
                    for (int64_t x = 0; x < a->dv; x++) {
                        double got = a->y[b * a->y_sb + h * a->y_sh + i * a->y_ss + x];
                        double w = want[((b * a->q_heads + h) * a->sq + i) * a->dv + x];
                        double err = fabs(got - w) / (floor + fabs(w));
                        if (!(err <= worst)) {
                            worst = isnan(err) ? INFINITY : err;
                            at = ((b * a->q_heads + h) * a->sq + i) * a->dv + x;
                        }
                    }
        CHECK_MSG(worst < 2e-4, "%s (%s): relative error %g at output element %lld", what, pass ? "2 threads" : "1 thread",
                  worst, (long long)at);
    }
    kn_threadpool_destroy(pool);
    free(want);
}

static void check(kn_attn *a, const char *what) { check_tol(a, what, 1e-4); }

typedef struct setup {
    float *q, *k, *v, *y;
} setup;

static void make(kn_attn *a, setup *st, int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Skv, int64_t D,
                 int64_t Dv, unsigned seed) {
    kn_attn_init(a);
    a->batch = B;
    a->q_heads = Hq;
    a->kv_heads = Hkv;
    a->sq = Sq;
    a->skv = Skv;
    a->dk = D;
    a->dv = Dv;
    st->q = rand_buf(B * Hq * Sq * D, &seed);
    st->k = rand_buf(B * Hkv * Skv * D, &seed);
    st->v = rand_buf(B * Hkv * Skv * Dv, &seed);
    st->y = malloc(sizeof(float) * (size_t)(B * Hq * Sq * Dv + 1));
    a->q = (kn_attn_mat){st->q, Hq * Sq * D, Sq * D, D};
    a->k = (kn_attn_mat){st->k, Hkv * Skv * D, Skv * D, D};
    a->v = (kn_attn_mat){st->v, Hkv * Skv * Dv, Skv * Dv, Dv};
    a->y = st->y;
    a->y_sb = Hq * Sq * Dv;
    a->y_sh = Sq * Dv;
    a->y_ss = Dv;
    a->scale = (float)(1.0 / sqrt((double)D));
    a->zero_masked_rows = true;
}

static void release(setup *st) {
    free(st->q);
    free(st->k);
    free(st->v);
    free(st->y);
}

KN_TEST(attention_plain_and_gqa) {
    kn_attn a;
    setup st;
    make(&a, &st, 2, 6, 2, 37, 53, 16, 24, 1u);
    check(&a, "gqa");
    a.softcap = 2.0f;
    check(&a, "gqa softcap");
    release(&st);
    make(&a, &st, 1, 3, 3, 1, 70, 8, 8, 2u);
    check(&a, "decode row");
    release(&st);
}

KN_TEST(attention_causal_offsets_and_windows) {
    kn_attn a;
    setup st;
    int64_t off[2] = {5, -2};
    make(&a, &st, 2, 4, 4, 19, 24, 8, 8, 3u);
    a.causal = true;
    check(&a, "causal");
    a.offset = off;
    check(&a, "causal with per-batch offsets (negative: leading rows fully masked)");
    a.left_window = 3;
    check(&a, "causal left window");
    a.causal = false;
    a.left_window = 2;
    a.right_window = 1;
    check(&a, "bidirectional window");
    release(&st);
}

KN_TEST(attention_masks_and_lengths) {
    kn_attn a;
    setup st;
    const int64_t B = 2, H = 4, Sq = 9, Skv = 13;
    make(&a, &st, B, H, 2, Sq, Skv, 8, 8, 4u);
    unsigned seed = 99u;
    /* bool mask (B, 1, Sq, Skv) broadcast over heads, one row fully masked */
    unsigned char *keep = malloc((size_t)(B * Sq * Skv));
    for (int64_t i = 0; i < B * Sq * Skv; i++) keep[i] = urand(&seed) > -0.5f;
    for (int64_t j = 0; j < Skv; j++) keep[(1 * Sq + 4) * Skv + j] = 0;
    int64_t dims[4] = {B, 1, Sq, Skv};
    CHECK(kn_attn_bcast_strides(dims, 4, B, H, Sq, Skv, &a.keep));
    a.keep.p = keep;
    check(&a, "bool mask with a fully masked row");
    /* additive mask (Sq, 10) shorter than the keys, with -inf entries */
    float *bias = rand_buf(Sq * 10, &seed);
    bias[3] = -INFINITY;
    for (int64_t j = 0; j < 10; j++) bias[2 * 10 + j] = -INFINITY;
    int64_t bd[2] = {Sq, 10};
    CHECK(kn_attn_bcast_strides(bd, 2, B, H, Sq, 10, &a.bias));
    a.bias.p = bias;
    a.mask_cols = 10;
    check(&a, "short additive mask plus bool mask");
    int64_t len[2] = {7, 0};
    a.kv_end = len;
    check(&a, "key lengths (one batch entry without keys)");
    /* ONNX Runtime's semantics: masked keys get a finite filter value, causal ones are excluded */
    a.masked = -10000.0f;
    a.zero_masked_rows = false;
    a.causal = true;
    check_tol(&a, "finite filter value", 5.0);
    free(keep);
    free(bias);
    release(&st);
}

KN_TEST(attention_strided_3d_layout) {
    /* Q [B, S, H*D], K/V [B, L, Hkv*D], Y [B, S, H*Dv]: heads in the last dimension */
    const int64_t B = 2, H = 4, Hkv = 2, S = 11, L = 17, D = 8, Dv = 12;
    unsigned seed = 5u;
    kn_attn a;
    kn_attn_init(&a);
    float *q = rand_buf(B * S * H * D, &seed), *k = rand_buf(B * L * Hkv * D, &seed), *v = rand_buf(B * L * Hkv * Dv, &seed);
    float *y = malloc(sizeof(float) * (size_t)(B * S * H * Dv));
    a.batch = B, a.q_heads = H, a.kv_heads = Hkv, a.sq = S, a.skv = L, a.dk = D, a.dv = Dv;
    a.q = (kn_attn_mat){q, S * H * D, D, H * D};
    a.k = (kn_attn_mat){k, L * Hkv * D, D, Hkv * D};
    a.v = (kn_attn_mat){v, L * Hkv * Dv, Dv, Hkv * Dv};
    a.y = y, a.y_sb = S * H * Dv, a.y_sh = Dv, a.y_ss = H * Dv;
    a.scale = 0.3f;
    a.causal = true;
    int64_t off[2] = {L - S, L - S};
    a.offset = off;
    a.zero_masked_rows = true;
    check(&a, "3-D layout, causal with offset");
    free(q);
    free(k);
    free(v);
    free(y);
}

KN_TEST(attention_long_keys_online_softmax) {
    /* more keys than one tile: the online softmax path, with causal skipping and a mask */
    kn_attn a;
    setup st;
    make(&a, &st, 1, 2, 1, 21, 1500, 16, 16, 6u);
    check(&a, "1500 keys");
    a.causal = true;
    int64_t off[1] = {1500 - 21};
    a.offset = off;
    check(&a, "1500 keys, causal");
    a.left_window = 700;
    check(&a, "1500 keys, causal window");
    a.left_window = -1;
    int64_t len[1] = {1200};
    a.kv_end = len;
    a.causal = false;
    unsigned seed = 7u;
    float *bias = rand_buf(1500, &seed);
    int64_t bd[1] = {1500};
    CHECK(kn_attn_bcast_strides(bd, 1, 1, 2, 21, 1500, &a.bias));
    a.bias.p = bias;
    check(&a, "1500 keys, lengths and additive mask");
    a.masked = -10000.0f;
    a.zero_masked_rows = false;
    check_tol(&a, "1500 keys, finite filter value", 5.0);
    free(bias);
    release(&st);
}

KN_TEST(attention_bcast_strides_rejects_mismatch) {
    kn_attn_bcast v;
    int64_t ok[3] = {3, 1, 8}, bad[2] = {5, 8};
    CHECK(kn_attn_bcast_strides(ok, 3, 2, 3, 4, 8, &v));
    CHECK_EQ_INT(v.sb, 0);
    CHECK_EQ_INT(v.sh, 8);
    CHECK_EQ_INT(v.si, 0);
    CHECK_EQ_INT(v.sj, 1);
    CHECK(!kn_attn_bcast_strides(bad, 2, 2, 3, 4, 8, &v));
}

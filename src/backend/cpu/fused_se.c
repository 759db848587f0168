/* CPU kernel of kiln.SqueezeExcite (src/ops/fused.h): Y = X * gate(W2 act(W1 mean(X) + B1) + B2).
 *
 * Three passes: the channel means (one read of X), the two small products per batch item (M x C
 * each, a few thousand multiply-adds), then Y = X times the gate (a read of X and a write of Y).
 * The unfused graph wrote and read back the pooled vector, the hidden vector and the gate as
 * tensors of their own and ran each 1x1 convolution through the convolution machinery; here they
 * live in one scratch block. Sums are taken in float with 16 running partial sums (the loops the
 * compiler vectorises without reassociating them itself). */
#include "backend/cpu/const_cache.h"
#include "backend/cpu/fused_impl.h"

#include <stdio.h>
#include <string.h>

kiln_status kn_cpu_squeeze_excite_prepare(const kn_node *n, void *params) {
    kn_cpu_se_prm *p = params;
    memset(p, 0, sizeof *p);
    p->ok = kn_squeeze_excite_from_node(n, &p->act, &p->gate, &p->nhwc, p->why, sizeof p->why);
    return KILN_OK;
}

#define LANES 16

/* sum of a[0..n) */
static float sum_of(const float *restrict a, int64_t n) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) acc[k] += a[i + k];
    float s = 0;
    for (; i < n; i++) s += a[i];
    for (int k = 0; k < LANES; k++) s += acc[k];
    return s;
}

/* sum of a[i] * b[i] over [0, n) */
static float dot(const float *restrict a, const float *restrict b, int64_t n) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) acc[k] += a[i + k] * b[i + k];
    float s = 0;
    for (; i < n; i++) s += a[i] * b[i];
    for (int k = 0; k < LANES; k++) s += acc[k];
    return s;
}

typedef struct se_job {
    const float *x, *w1, *b1, *w2t, *b2; /* w2t: W2 transposed, [M, C] */
    float *y;
    float *mean, *hidden, *gate; /* [N, C], [N, M], [N, C] */
    int64_t N, C, S, M;
    int64_t chunk; /* NHWC means: channels per job */
    const kn_cpu_se_prm *p;
} se_job;

/* NCHW means: rows r of S values each (r = n * C + c). */
static void means_nchw(void *arg, int64_t r0, int64_t r1) {
    const se_job *j = arg;
    const float inv = 1.0f / (float)j->S;
    for (int64_t r = r0; r < r1; r++) j->mean[r] = sum_of(j->x + r * j->S, j->S) * inv;
}

/* NHWC means: job t is batch item t / blocks, channels [cb * chunk, +chunk) of it; the positions'
 * rows added in turn into the running sums. */
static void means_nhwc(void *arg, int64_t t0, int64_t t1) {
    const se_job *j = arg;
    const int64_t blocks = (j->C + j->chunk - 1) / j->chunk;
    const float inv = 1.0f / (float)j->S;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t n = t / blocks, c0 = (t % blocks) * j->chunk;
        const int64_t nc = j->C - c0 < j->chunk ? j->C - c0 : j->chunk;
        float *restrict m = j->mean + n * j->C + c0;
        for (int64_t c = 0; c < nc; c++) m[c] = 0;
        const float *x = j->x + n * j->S * j->C + c0;
        for (int64_t s = 0; s < j->S; s++, x += j->C)
            for (int64_t c = 0; c < nc; c++) m[c] += x[c];
        for (int64_t c = 0; c < nc; c++) m[c] *= inv;
    }
}

/* The squeeze: hidden rows [r0, r1) (r = n * M + m: W1's row m times item n's means) and their
 * activation. Rows, not batch items, are what the threads share: at batch 1 the products are the
 * block's only serial work otherwise. */
static void squeeze_rows(void *arg, int64_t r0, int64_t r1) {
    const se_job *j = arg;
    const int64_t C = j->C, M = j->M;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t n = r / M, m = r % M;
        j->hidden[r] = dot(j->w1 + m * C, j->mean + n * C, C) + (j->b1 ? j->b1[m] : 0.0f);
    }
    kn_fused_act(j->hidden + r0, r1 - r0, &j->p->act);
}

/* The excite: job t is batch item t / blocks, gate channels [cb * EXCITE_CHUNK, +EXCITE_CHUNK) of
 * it, summed from W2's transposed rows (contiguous channels: the short rows of W2 itself, M of 4 to
 * 48 values, left every dot product a scalar tail), then the gate's activation. */
#define EXCITE_CHUNK 256
static void excite_chunks(void *arg, int64_t t0, int64_t t1) {
    const se_job *j = arg;
    const int64_t C = j->C, M = j->M, blocks = (C + EXCITE_CHUNK - 1) / EXCITE_CHUNK;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t n = t / blocks, c0 = (t % blocks) * EXCITE_CHUNK;
        const int64_t nc = C - c0 < EXCITE_CHUNK ? C - c0 : EXCITE_CHUNK;
        float *restrict g = j->gate + n * C + c0;
        const float *h = j->hidden + n * M;
        for (int64_t c = 0; c < nc; c++) g[c] = j->b2 ? j->b2[c0 + c] : 0.0f;
        for (int64_t m = 0; m < M; m++) {
            const float hm = h[m];
            const float *restrict w = j->w2t + m * C + c0;
            for (int64_t c = 0; c < nc; c++) g[c] += w[c] * hm;
        }
        kn_fused_act(g, nc, &j->p->gate);
    }
}

/* W2 [C, M] as [M, C] (kn_const_make_fn: ctx is W2's data and its C and M) */
typedef struct transpose_src {
    const float *w;
    int64_t C, M;
} transpose_src;
static void transpose_w2(const void *ctx, void *dst) {
    const transpose_src *t = ctx;
    float *o = dst;
    for (int64_t c = 0; c < t->C; c++)
        for (int64_t m = 0; m < t->M; m++) o[m * t->C + c] = t->w[c * t->M + m];
}

/* Y = X * gate: NCHW rows r of S values, each times gate[r]. */
static void scale_nchw(void *arg, int64_t r0, int64_t r1) {
    const se_job *j = arg;
    for (int64_t r = r0; r < r1; r++) {
        const float g = j->gate[r];
        const float *restrict x = j->x + r * j->S;
        float *restrict y = j->y + r * j->S;
        for (int64_t i = 0; i < j->S; i++) y[i] = x[i] * g;
    }
}

/* NHWC rows r = n * S + s of C values, each times the gate of batch item n. */
static void scale_nhwc(void *arg, int64_t r0, int64_t r1) {
    const se_job *j = arg;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict g = j->gate + (r / j->S) * j->C;
        const float *restrict x = j->x + r * j->C;
        float *restrict y = j->y + r * j->C;
        for (int64_t c = 0; c < j->C; c++) y[c] = x[c] * g[c];
    }
}

static int64_t grain_rows(int64_t row_len) {
    int64_t g = 16384 / (row_len > 0 ? row_len : 1);
    return g > 0 ? g : 1;
}

kiln_status kn_cpu_fused_squeeze_excite(kn_kernel_ctx *c) {
    KN_CTX_PRM(c, kn_cpu_squeeze_excite_prepare, kn_cpu_se_prm, prm);
    if (!prm->ok) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "%s", prm->why);
    const kn_tensor *X = c->in[0], *W1 = c->in[1], *B1 = c->n_inputs > 2 ? c->in[2] : NULL, *W2 = c->in[3],
                    *B2 = c->n_inputs > 4 ? c->in[4] : NULL;
    kn_tensor *Y = c->out[0];
    const bool nhwc = prm->nhwc;
    int64_t N, C, M, S;
    KN_TRY(kn_squeeze_excite_dims(c, nhwc, &N, &C, &M, &S));
    if (kn_tensor_count(Y) == 0) return KILN_OK;
    /* W2 transposed: kept with the session where it is a constant, else made here each call */
    const transpose_src tsrc = {W2->data, C, M};
    const kn_const_layout lay = {120, {C, M, 0, 0}};
    const float *w2t = kn_cpu_const_derived(c, 3, &lay, sizeof(float) * (size_t)(C * M), transpose_w2, &tsrc);
    const size_t bytes = sizeof(float) * (size_t)(N * (2 * C + M) + (w2t ? 0 : C * M));
    void *scratch = NULL;
    KN_TRY(kn_ctx_scratch(c, bytes, "the squeeze-excite vectors", &scratch));
    se_job j = {X->data, W1->data, B1 ? B1->data : NULL, w2t, B2 ? B2->data : NULL, Y->data, NULL, NULL, NULL,
                N, C, S, M, 64, prm};
    j.mean = scratch;
    j.hidden = j.mean + N * C;
    j.gate = j.hidden + N * M;
    if (!w2t) {
        float *own = j.gate + N * C;
        transpose_w2(&tsrc, own);
        j.w2t = own;
    }
    if (nhwc) {
        const int64_t blocks = (C + j.chunk - 1) / j.chunk;
        kn_parallel_for(c->pool, N * blocks, grain_rows(S * j.chunk), means_nhwc, &j);
    } else {
        kn_parallel_for(c->pool, N * C, grain_rows(S), means_nchw, &j);
    }
    kn_parallel_for(c->pool, N * M, grain_rows(C), squeeze_rows, &j);
    kn_parallel_for(c->pool, N * ((C + EXCITE_CHUNK - 1) / EXCITE_CHUNK), grain_rows(EXCITE_CHUNK * M), excite_chunks, &j);
    if (nhwc) kn_parallel_for(c->pool, N * S, grain_rows(C), scale_nhwc, &j);
    else kn_parallel_for(c->pool, N * C, grain_rows(S), scale_nchw, &j);
    kn_ctx_scratch_free(c, scratch, bytes);
    return KILN_OK;
}

/* Float convolutions with few output positions (at most FP_DEFAULT_P an image) and many weights: see
 * conv_fewpos.h for why.
 *
 * A task is one image and one block of MB output channels (one or two vectors). Its MB x P
 * accumulators live in a small buffer T[position][channel]; for each tap (kh, kw) of the window
 * the positions whose input for that tap lies inside the image are listed once per call (the
 * others read the padding: on a 4x4 plane 3x3 windows have 100 of their 144 tap-positions inside),
 * and for every FP_CC input channels those positions run in groups of up to R, R x nv vectors of
 * accumulators: per input channel nv vectors of weights are loaded and each position's input is
 * one broadcast read from x itself (x[c][ih][iw]: no im2col). The weights are packed once per
 * session as [block][tap][C][MB], so a task reads its block's weights in one pass, the first
 * group of positions from memory (prefetched a part ahead), the others from L1.
 *
 * Per output element the sum runs from the bias over the taps, then the input channels, whatever
 * the block width, the groups or the threads: the same bits at every thread count. */
#include "backend/cpu/conv_fewpos.h"

#include "backend/cpu/const_cache.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cpu/isa_vec.h"
#include "util/aligned.h"

#if KN_VL

#define FP_MAX_P 64 /* output positions of an image (the kernel's buffer; KILN_FPCONV=1) */
/* ... where taken by default. AVX2, 1 thread, CPU time (op_ab), against the GEMM it replaces:
 * 3x3 512->512 on 7x7 0.86, 128->128 on 6x6 0.71 (kiln bench p50), 512->512 on 2x2 0.54; 256->256
 * on 8x8 (64 positions, Winograd's) 1.04. AVX-512 measured on 4x4 only (ResNet-50's 7x7 layers
 * there: KILN_FPCONV=1 against unset) */
#if KN_VREGS == 32
#define FP_DEFAULT_P 16
#else
#define FP_DEFAULT_P 49
#endif
#define FP_CC 128   /* input channels a pass: the weights' part (FP_CC x MB floats) stays in L1 */
#if KN_VREGS == 32
#define FP_R2 12 /* positions a call with two vectors of channels: 24 accumulators */
#define FP_R1 16 /* ... with one */
#else
#define FP_R2 6 /* 12 accumulators of the 16 registers */
#define FP_R1 12
#endif

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* n positions by nv vectors of channels over cc input channels: T[pos[i]][0:nv KN_VL] +=
 * sum_c x[c plane + off[i]] w[c mb + 0:nv KN_VL]. pf: prefetch the weights FP_CC channels ahead
 * (the next part, read by this thread next). */
static inline __attribute__((always_inline)) void fp_tile(const int nv, const int n, const int pf, int64_t cc,
                                                          const float *restrict w, int64_t mb, const float *restrict x,
                                                          int64_t plane, const int64_t *off, const int *pos,
                                                          float *restrict t) {
    kn_vf acc[FP_R1][2];
    int64_t o[FP_R1];
    for (int i = 0; i < n; i++) {
        o[i] = off[i];
        for (int v = 0; v < nv; v++) acc[i][v] = kn_vf_loadu(t + pos[i] * mb + v * KN_VL);
    }
    for (int64_t c = 0; c < cc; c++, w += mb, x += plane) {
        if (pf) {
            _mm_prefetch((const char *)(w + FP_CC * mb), _MM_HINT_T0);
            if (nv * KN_VL > 16) _mm_prefetch((const char *)(w + FP_CC * mb + 16), _MM_HINT_T0);
        }
        const kn_vf w0 = kn_vf_loadu(w);
        const kn_vf w1 = nv > 1 ? kn_vf_loadu(w + KN_VL) : w0;
        for (int i = 0; i < n; i++) {
            const kn_vf a = kn_vf_set1(x[o[i]]);
            acc[i][0] = kn_vf_fmadd(a, w0, acc[i][0]);
            if (nv > 1) acc[i][1] = kn_vf_fmadd(a, w1, acc[i][1]);
        }
    }
    for (int i = 0; i < n; i++)
        for (int v = 0; v < nv; v++) kn_vf_storeu(t + pos[i] * mb + v * KN_VL, acc[i][v]);
}

#define FP_ARGS int64_t cc, const float *w, int64_t mb, const float *x, int64_t plane, const int64_t *off, const int *pos, float *t
#define FP_CASE(NV, N, PF) \
    case N: fp_tile(NV, N, PF, cc, w, mb, x, plane, off, pos, t); break;
#define FP_CASES_6(NV, PF) FP_CASE(NV, 1, PF) FP_CASE(NV, 2, PF) FP_CASE(NV, 3, PF) FP_CASE(NV, 4, PF) FP_CASE(NV, 5, PF) FP_CASE(NV, 6, PF)
#define FP_CASES_12(NV, PF) FP_CASES_6(NV, PF) FP_CASE(NV, 7, PF) FP_CASE(NV, 8, PF) FP_CASE(NV, 9, PF) FP_CASE(NV, 10, PF) \
    FP_CASE(NV, 11, PF) FP_CASE(NV, 12, PF)
#define FP_CASES_16(NV, PF) FP_CASES_12(NV, PF) FP_CASE(NV, 13, PF) FP_CASE(NV, 14, PF) FP_CASE(NV, 15, PF) FP_CASE(NV, 16, PF)
#if KN_VREGS == 32
#define FP_CASES_R2 FP_CASES_12
#define FP_CASES_R1 FP_CASES_16
#else
#define FP_CASES_R2 FP_CASES_6
#define FP_CASES_R1 FP_CASES_12
#endif
static void fp_tile2(int n, FP_ARGS) {
    switch (n) { FP_CASES_R2(2, 0) }
}
static void fp_tile2_pf(int n, FP_ARGS) {
    switch (n) { FP_CASES_R2(2, 1) }
}
static void fp_tile1(int n, FP_ARGS) {
    switch (n) { FP_CASES_R1(1, 0) }
}
static void fp_tile1_pf(int n, FP_ARGS) {
    switch (n) { FP_CASES_R1(1, 1) }
}

typedef struct fp_wctx {
    const float *w;
    int64_t M, C, kk, mb;
} fp_wctx;

/* [block][tap][C][mb], channels past M zero */
static void fp_make_weights(const void *ctx, void *dst) {
    const fp_wctx *k = ctx;
    float *d = dst;
    for (int64_t m0 = 0; m0 < k->M; m0 += k->mb)
        for (int64_t t = 0; t < k->kk; t++)
            for (int64_t c = 0; c < k->C; c++, d += k->mb)
                for (int64_t l = 0; l < k->mb; l++) d[l] = m0 + l < k->M ? k->w[((m0 + l) * k->C + c) * k->kk + t] : 0.0f;
}

typedef struct fp_job {
    const kn_dconv_shape *s;
    const float *x, *w, *bias;
    float *y;
    kn_conv_epilogue_fn epi;
    const void *epi_ctx;
    int64_t mb, blocks, P, kk;
    const int *cnt;     /* [kk]: positions inside the image for each tap */
    const int *pos;     /* [kk][P]: those positions */
    const int64_t *off; /* [kk][P]: their input's offset in a channel's plane */
} fp_job;

static void fp_range(void *arg, int64_t begin, int64_t end) {
    const fp_job *j = arg;
    const kn_dconv_shape *s = j->s;
    const int64_t mb = j->mb, P = j->P, C = s->C, M = s->M, plane = s->H * s->W;
    const int R = mb > KN_VL ? FP_R2 : FP_R1;
    _Alignas(64) float T[FP_MAX_P * 2 * KN_VL];
    for (int64_t task = begin; task < end; task++) {
        const int64_t n = task / j->blocks, b = task % j->blocks, m0 = b * mb, mv = min64(mb, M - m0);
        for (int64_t p = 0; p < P; p++)
            for (int64_t l = 0; l < mb; l++) T[p * mb + l] = j->bias && l < mv ? j->bias[m0 + l] : 0.0f;
        const float *xn = j->x + n * C * plane;
        for (int64_t t = 0; t < j->kk; t++) {
            const int cnt = j->cnt[t];
            if (!cnt) continue;
            const int *pos = j->pos + t * P;
            const int64_t *off = j->off + t * P;
            /* groups of near-equal size (16 = 6 + 5 + 5): fewer than 4 rows left the FMAs' latency
             * uncovered */
            const int ng = (cnt + R - 1) / R, base = cnt / ng, extra = cnt % ng;
            const float *wt = j->w + (b * j->kk + t) * C * mb;
            for (int64_t c0 = 0; c0 < C; c0 += FP_CC) {
                const int64_t cc = min64(FP_CC, C - c0);
                for (int g = 0, i = 0; g < ng; g++) {
                    const int gn = base + (g < extra);
                    const float *wc = wt + c0 * mb, *xc = xn + c0 * plane;
                    if (mb > KN_VL) (g ? fp_tile2 : fp_tile2_pf)(gn, cc, wc, mb, xc, plane, off + i, pos + i, T);
                    else (g ? fp_tile1 : fp_tile1_pf)(gn, cc, wc, mb, xc, plane, off + i, pos + i, T);
                    i += gn;
                }
            }
        }
        float *yb = j->y + (n * M + m0) * P;
        for (int64_t l = 0; l < mv; l++)
            for (int64_t p = 0; p < P; p++) yb[l * P + p] = T[p * mb + l];
        if (j->epi) j->epi(j->epi_ctx, j->y, (n * M + m0) * P, mv, P, P);
    }
}

bool kn_fpconv_suits(const kn_dconv_shape *s) {
    if (s->G != 1 || s->sh != 1 || s->sw != 1 || s->dh < 1 || s->dw < 1 || s->N < 1 || s->C < 1 || s->M < 1) return false;
    const int64_t P = s->OH * s->OW, kk = s->KH * s->KW;
    if (P < 1 || P > FP_MAX_P || kk < 2 || s->H * s->W >= ((int64_t)1 << 40)) return false;
    /* KILN_FPCONV=0: never (the GEMM, measurements), 1: wherever it can (tests) */
    const char *e = getenv("KILN_FPCONV");
    if (e && *e) return e[0] == '1';
    return P <= FP_DEFAULT_P && s->M >= 2 * KN_VL && s->C >= 16;
}

kiln_status kn_fpconv_run(kn_kernel_ctx *c, const kn_dconv_shape *s, const float *x, const float *w, const float *bias,
                          float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_const) {
    const int64_t threads = kn_threadpool_size(c->pool), P = s->OH * s->OW, kk = s->KH * s->KW;
    /* two vectors of channels a block, one where two leave threads without a block (256 -> 256 at
     * 16 threads on AVX-512: 8 blocks of 32, 16 of 16) */
    int64_t mb = 2 * KN_VL;
    if (threads > 1 && s->N * ((s->M + mb - 1) / mb) < threads) mb = KN_VL;
    const int64_t blocks = (s->M + mb - 1) / mb;
    const size_t wbytes = sizeof(float) * (size_t)(blocks * mb) * (size_t)(kk * s->C);
    fp_wctx wc = {w, s->M, s->C, kk, mb};
    kn_const_layout lay = {130, {s->M, s->C, kk, mb}};
    const float *wp = w_const ? kn_cpu_const_derived(c, 1, &lay, wbytes, fp_make_weights, &wc) : NULL;
    float *own = NULL;
    int *cnt = malloc(sizeof(int) * (size_t)(kk * (P + 1)));
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(kk * P));
    if (!wp && (own = kn_aligned_alloc(64, (wbytes + 63) / 64 * 64)) != NULL) {
        fp_make_weights(&wc, own);
        wp = own;
    }
    if (!wp || !cnt || !off) {
        free(own), free(cnt), free(off);
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    int *pos = cnt + kk;
    for (int64_t t = 0; t < kk; t++) {
        const int64_t kh = t / s->KW, kw = t % s->KW;
        int n = 0;
        for (int64_t p = 0; p < P; p++) {
            const int64_t ih = p / s->OW * s->sh - s->ph + kh * s->dh, iw = p % s->OW * s->sw - s->pw + kw * s->dw;
            if (ih < 0 || ih >= s->H || iw < 0 || iw >= s->W) continue;
            pos[t * P + n] = (int)p;
            off[t * P + n] = ih * s->W + iw;
            n++;
        }
        cnt[t] = n;
    }
    fp_job j = {s, x, wp, bias, y, epi, epi_ctx, mb, blocks, P, kk, cnt, pos, off};
    kn_parallel_for(c->pool, s->N * blocks, 1, fp_range, &j);
    free(own), free(cnt), free(off);
    return KILN_OK;
}

#else

bool kn_fpconv_suits(const kn_dconv_shape *s) {
    (void)s;
    return false;
}

kiln_status kn_fpconv_run(kn_kernel_ctx *c, const kn_dconv_shape *s, const float *x, const float *w, const float *bias,
                          float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_const) {
    (void)s, (void)x, (void)w, (void)bias, (void)y, (void)epi, (void)epi_ctx, (void)w_const;
    return kn_kernel_error(c, KILN_ERR_INTERNAL, "the few-position convolution is not in this build");
}

#endif

/* Convolutions on the CPU: Conv, ConvTranspose, ConvInteger, QLinearConv and Col2Im.
 *
 * float Conv takes one of these paths:
 *  - depthwise at stride 2 along rows of two vectors or more: each input row split once into its
 *    even and odd columns (phase rows), every tap then a plain load (dws2);
 *  - depthwise (one input channel per group), AVX-512 or AVX2 (isa_vec.h: written once, 16 or 8
 *    lanes): a vector of channels through a zero-bordered scratch image of [rows][cols][lanes]
 *    (planes too small to fill vectors along their rows); one output channel a group at stride 1
 *    with fewer channels than lanes or rows too wide for that scratch: conv_direct.c's depthwise
 *    kernel (rows copied into a zero-bordered scratch, tiles of output rows x vectors); other
 *    dilated or very wide planes: direct loops vectorised along the output row;
 *  - pointwise (1x1 kernel, stride 1, no pads) on small planes (7x7), AVX-512: vectors along the
 *    output channels, 48 x 7 tiles;
 *  - other pointwise: the input planes are already the GEMM's B;
 *  - 3x3 at stride 1 with 16+ channels on planes of 16+ tiles: Winograd F(4x4, 3x3)
 *    (conv_winograd.c); dilated, over the phase images (rows and columns of one residue mod the
 *    dilation), when they make 16+ tiles;
 *  - 3x3 at stride 1 or 2 with at most 16 input channels, M a multiple of 8: a direct kernel with
 *    output pixels in the lanes (rk_conv), from rows copied once per output row (split into even
 *    and odd columns at stride 2);
 *  - 3x3 at stride 2, dilation 2, or stride 1 on small planes, M a multiple of 32: the direct kernel
 *    with output channels in the lanes (cl_conv, cl3_tile), as for the few-channel stems;
 *  - everything else: implicit GEMM. W_g [M/g, C/g*k] times the im2col matrix of the input,
 *    whose panels the GEMM asks for through a pack callback that gathers them straight from the
 *    input (contiguous masked loads where the window row is contiguous, gathers otherwise), so no
 *    im2col buffer is ever built.
 * Constant weights are rearranged for these kernels once per session (const_cache.h); the bias
 * starts the accumulators or is added as the GEMM stores C, and a fused node's residual and
 * activation run on each finished block while it is in cache (the epilogue).
 * ConvTranspose is a GEMM (W_g^T x_g) into a column buffer followed by col2im.
 * float16/bfloat16 are converted to float around the float path; the integer convs are exact
 * 8-bit products (qgemm.h); double runs direct loops. */
#include "backend/cpu/const_cache.h"
#include "backend/cpu/conv_amx.h"
#include "backend/cpu/conv_amx_blocked.h"
#include "backend/cpu/conv_direct.h"
#include "backend/cpu/conv_fewpos.h"
#include "backend/cpu/conv_int_dw.h"
#include "backend/cpu/conv_winograd.h"
#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/qgemm_amx.h"
#include "backend/cpu/linalg_impl.h"
#include "backend/cpu/sgemm.h"
#include "backend/cpu/sgemm_bf16.h"
#include "backend/cpu/vec_math.h"
#include "ops/linalg_util.h"
#include "util/limits.h"

#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/isa_vec.h"
#include "util/aligned.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* ------------------------------------------------------------------ geometry */

typedef struct conv_shape {
    int64_t N, C, M, G, Cg, Mg;
    int nsp;
    kn_window w;
    int64_t in_plane, out_plane, kk;
} conv_shape;

/* What conv_shape_make keeps for the node's later calls with these shapes (kn_ctx_prep: a node
 * whose shapes the run's memo knows), so that those read no attribute: the geometry comes from
 * the node's attributes (group, kernel_shape, strides, pads, dilations, auto_pad, output_padding,
 * output_shape) and the two shapes alone. */
typedef struct conv_key {
    int32_t transpose, rank;
    int64_t dims[2 * KILN_MAX_RANK]; /* X's then W's (2 * rank of them compared) */
} conv_key;
static const char conv_tag = 0;

static kiln_status conv_shape_read(kn_kernel_ctx *c, const kn_tensor *X, const kn_tensor *W, bool transpose,
                                   conv_shape *s);

static kiln_status conv_shape_make(kn_kernel_ctx *c, const kn_tensor *X, const kn_tensor *W, bool transpose,
                                   conv_shape *s) {
    if (X->rank < 3 || W->rank != X->rank || X->rank > KILN_MAX_RANK) return conv_shape_read(c, X, W, transpose, s);
    conv_key key = {transpose, X->rank, {0}};
    memcpy(key.dims, X->dims, sizeof(int64_t) * (size_t)X->rank);
    memcpy(key.dims + X->rank, W->dims, sizeof(int64_t) * (size_t)X->rank);
    const size_t key_bytes = offsetof(conv_key, dims) + 2 * sizeof(int64_t) * (size_t)X->rank;
    const conv_shape *kept = kn_ctx_prep_get(c, &conv_tag, &key, key_bytes);
    if (kept) {
        *s = *kept;
        return KILN_OK;
    }
    KN_TRY(conv_shape_read(c, X, W, transpose, s));
    kn_ctx_prep_put(c, &conv_tag, &key, key_bytes, s, sizeof *s);
    return KILN_OK;
}

static kiln_status conv_shape_read(kn_kernel_ctx *c, const kn_tensor *X, const kn_tensor *W, bool transpose,
                                   conv_shape *s) {
    memset(s, 0, sizeof *s);
    if (X->rank < 3 || W->rank != X->rank)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "X must have rank >= 3 and W the same rank");
    s->nsp = X->rank - 2;
    s->N = X->dims[0];
    s->C = X->dims[1];
    s->G = kn_attr_int(c->node, "group", 1);
    if (s->G < 1 || s->C % s->G) return kn_kernel_error(c, KILN_ERR_SHAPE, "group %lld does not divide the %lld channels", (long long)s->G, (long long)s->C);
    s->Cg = s->C / s->G;
    if (!transpose) {
        s->M = W->dims[0];
        if (W->dims[1] != s->Cg || s->M % s->G)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "weight does not match the input channels and group=%lld",
                                   (long long)s->G);
        s->Mg = s->M / s->G;
    } else {
        if (W->dims[0] != s->C)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "weight's first dim must equal the input channels");
        s->Mg = W->dims[1];
        s->M = s->Mg * s->G;
    }
    char why[512];
    kiln_status st = kn_window_plan(c->node, transpose ? KN_WINDOW_CONV_TRANSPOSE : KN_WINDOW_CONV, s->nsp, X->dims + 2,
                                    W->dims + 2, &s->w, why, sizeof why);
    if (st) return kn_kernel_error(c, st, "%s", why);
    s->in_plane = s->out_plane = s->kk = 1;
    for (int i = 0; i < s->nsp; i++) {
        s->in_plane *= s->w.in[i];
        s->out_plane *= s->w.out[i];
        s->kk *= s->w.kernel[i];
    }
    return KILN_OK;
}

/* 2-D view of a window of rank <= 2 (1-D as height 1). */
typedef struct win2 {
    int64_t H, W, OH, OW, KH, KW, sh, sw, dh, dw, ph, pw;
} win2;

static win2 win2_of(const kn_window *w) {
    win2 v;
    if (w->nsp == 1) {
        v = (win2){1, w->in[0], 1, w->out[0], 1, w->kernel[0], 1, w->stride[0], 1, w->dilation[0], 0, w->pad_begin[0]};
    } else {
        v = (win2){w->in[0], w->in[1], w->out[0], w->out[1], w->kernel[0], w->kernel[1], w->stride[0],
                   w->stride[1], w->dilation[0], w->dilation[1], w->pad_begin[0], w->pad_begin[1]};
    }
    return v;
}

/* ------------------------------------------------------------------ implicit GEMM packing */

/* The phase rows of a strided 1-D window (pt_suits, below) */
typedef struct pt_geom {
    int64_t Q;     /* phase row length used: q_max + OW */
    int64_t ldq;   /* its row stride (a multiple of the vector width) */
    int64_t plane; /* floats per channel: sw * ldq */
} pt_geom;

typedef struct conv_pack_ctx {
    const float *x;
    const conv_shape *s;
    win2 v;
    bool vec_ok;          /* int32 index arithmetic is safe */
    const float *xt;      /* the phase rows of every channel of every image, or NULL */
    pt_geom pt;
    const int64_t *pt_tap; /* per tap kw: r_kw ldq + q_kw */
    bool tr;               /* pack_conv_tr */
} conv_pack_ctx;

#define MAX_NR 64

#define PACK_COLS 1024 /* columns whose coordinates are precomputed at once (a multiple of NR) */

#if KN_VL
/* Lane l of the result is p[l] (stride 1) or p[2l] (stride 2) where lane l of m is set, else 0;
 * nothing outside those elements is read (masked loads; for stride 2 the mask spread over the even
 * elements of two vectors). */
static inline kn_vf run_load(const float *p, kn_vmask m, bool stride2, kn_vi even) {
    if (!stride2) return kn_vf_maskz_loadu(m, p);
    const uint32_t mm = m, half = KN_VL / 2;
#if defined(__BMI2__)
    const uint32_t ev = 0x5555u & KN_VALL;
    const kn_vmask lo = (kn_vmask)_pdep_u32(mm & ((1u << half) - 1u), ev), hi = (kn_vmask)_pdep_u32(mm >> half, ev);
#else
    kn_vmask lo = 0, hi = 0;
    for (uint32_t l = 0; l < half; l++) {
        lo |= (kn_vmask)(((mm >> l) & 1u) << (2 * l));
        hi |= (kn_vmask)(((mm >> (l + half)) & 1u) << (2 * l));
    }
#endif
    return kn_vf_perm2(kn_vf_maskz_loadu(lo, p), even, kn_vf_maskz_loadu(hi, p + KN_VL));
}

/* The even elements of p[0 .. 2 KN_VL), every one of them to be read (the caller has checked that
 * p[2 KN_VL - 1] is inside the plane too): two plain loads. With AVX2 a masked load is a vmaskmovps
 * after building its mask vector and the two-source permute two vpermps and a blend, and stride-2
 * im2col packing was a third of a 3x3 s2 128->128 convolution on 56x56 on the AVX2 EPYC. */
static inline kn_vf even_load(const float *p, kn_vi even) {
#if KN_VL == 8
    (void)even;
    const __m256 t = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), 0x88); /* a0 a2 b0 b2 a4 a6 b4 b6 */
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), 0xD8));
#else
    return kn_vf_perm2(kn_vf_loadu(p), even, kn_vf_loadu(p + KN_VL));
#endif
}
#endif

/* The im2col block rows k0..k0+kc, columns n0..n0+nc of image n, group g, for windows of rank
 * <= 2, in the GEMM's packed-B layout. Column coordinates are computed once per block; rows
 * walk (channel, kh, kw) incrementally. Each group of KN_VL columns whose input addresses are
 * consecutive (stride 1 within a row, or whole rows when the output is as wide as the input)
 * is one masked load; stride 2 is two loads and a permute; anything else a masked gather. */
static void pack_conv2d(const conv_pack_ctx *cc, const float *xg, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                        float *dst) {
    const win2 *v = &cc->v;
    const int NRv = kn_sgemm_nr();
    const int64_t in_plane = cc->s->in_plane;
    int64_t hb[PACK_COLS], wb[PACK_COLS];
    for (int64_t c0 = 0; c0 < nc; c0 += PACK_COLS) {
        const int64_t cn = min64(PACK_COLS, nc - c0);
        const int64_t lanes = (cn + NRv - 1) / NRv * NRv;
        float *d0 = dst + c0 * kc;
        int64_t oh = (n0 + c0) / v->OW, ow = (n0 + c0) % v->OW;
        for (int64_t j = 0; j < lanes; j++) {
            if (j < cn) {
                hb[j] = oh * v->sh - v->ph;
                wb[j] = ow * v->sw - v->pw;
                if (++ow == v->OW) ow = 0, oh++;
            } else {
                hb[j] = -((int64_t)1 << 40); /* never valid */
                wb[j] = 0;
            }
        }
        int64_t ci = k0 / (v->KH * v->KW), r = k0 % (v->KH * v->KW), kh = r / v->KW, kw = r % v->KW;
#if KN_VL
        if (cc->vec_ok && NRv % KN_VL == 0) {
            int32_t hb32[PACK_COLS], wb32[PACK_COLS];
            /* 0 gather; 1 consecutive, 2 stride 2; 3 and 4: the same in two runs, lanes [0, split)
             * from base0 and [split, KN_VL) from base1 (a group of outputs across two output rows
             * of a strided convolution: 14-wide rows at stride 2 were all gathers, 29% of a
             * 3x3 s2 128->128 convolution's time on 28x28) */
            int8_t kind[PACK_COLS / KN_VL], split[PACK_COLS / KN_VL];
            int64_t base0[PACK_COLS / KN_VL], base1[PACK_COLS / KN_VL];
            const int64_t groups = lanes / KN_VL, gpp = NRv / KN_VL;
            for (int64_t j = 0; j < lanes; j++) {
                hb32[j] = j < cn ? (int32_t)hb[j] : INT32_MIN / 2;
                wb32[j] = (int32_t)wb[j];
            }
            for (int64_t gi = 0; gi < groups; gi++) {
                int64_t cnt = max64(0, min64(KN_VL, cn - gi * KN_VL)), j0 = gi * KN_VL;
                base0[gi] = cnt ? hb[j0] * v->W + wb[j0] : 0;
                base1[gi] = 0;
                kind[gi] = 0;
                split[gi] = KN_VL;
                for (int step = 1; step <= 2 && !kind[gi] && cnt; step++) {
                    int64_t l = 1;
                    while (l < cnt && hb[j0 + l] * v->W + wb[j0 + l] == base0[gi] + step * l) l++;
                    if (l == cnt) {
                        kind[gi] = (int8_t)step;
                        continue;
                    }
                    /* a second run from lane l to the end */
                    const int64_t b1 = hb[j0 + l] * v->W + wb[j0 + l] - step * l;
                    int64_t q = l + 1;
                    while (q < cnt && hb[j0 + q] * v->W + wb[j0 + q] == b1 + step * q) q++;
                    if (q == cnt) {
                        kind[gi] = (int8_t)(step + 2);
                        split[gi] = (int8_t)l;
                        base1[gi] = b1;
                    }
                }
            }
            const kn_vi vH = kn_vi_set1((int32_t)v->H), vW = kn_vi_set1((int32_t)v->W);
            const kn_vi zero = kn_vi_zero(), even = kn_vi_iota(0, 2);
            for (int64_t k = 0; k < kc; k++) {
                const float *src = xg + ci * in_plane;
                const kn_vi voh = kn_vi_set1((int32_t)(kh * v->dh)), vow = kn_vi_set1((int32_t)(kw * v->dw));
                const int64_t koff = kh * v->dh * v->W + kw * v->dw;
                for (int64_t gi = 0; gi < groups; gi++) {
                    float *row = d0 + (gi / gpp) * NRv * kc + k * NRv + (gi % gpp) * KN_VL;
                    const kn_vi ih = kn_vi_add(kn_vi_loadu(hb32 + gi * KN_VL), voh);
                    const kn_vi iw = kn_vi_add(kn_vi_loadu(wb32 + gi * KN_VL), vow);
                    const kn_vmask m = kn_vi_cmpge_mask(ih, zero) & kn_vi_cmplt_mask(ih, vH) &
                                       kn_vi_cmpge_mask(iw, zero) & kn_vi_cmplt_mask(iw, vW);
                    kn_vf val;
                    const int kd = kind[gi];
                    if (!m) val = kn_vf_zero();
                    else if (kd == 2 && m == KN_VALL && base0[gi] + koff + 2 * KN_VL <= in_plane)
                        val = even_load(src + base0[gi] + koff, even);
                    else if (kd == 1) val = kn_vf_maskz_loadu(m, src + base0[gi] + koff);
                    else if (kd == 2 || kd == 4 || kd == 3) {
                        const kn_vmask first = kd == 2 ? KN_VALL : kn_v_tail(split[gi]);
                        val = run_load(src + base0[gi] + koff, (kn_vmask)(m & first), kd != 3, even);
                        if (kd != 2)
                            val = kn_vf_blend((kn_vmask)~first, val,
                                              run_load(src + base1[gi] + koff, (kn_vmask)(m & ~first), kd == 4, even));
                    } else
                        val = kn_vf_mask_gather(m, kn_vi_add(kn_vi_mullo(ih, vW), iw), src);
                    kn_vf_storeu(row, val);
                }
                if (++kw == v->KW) {
                    kw = 0;
                    if (++kh == v->KH) kh = 0, ci++;
                }
            }
            continue;
        }
#endif
        for (int64_t k = 0; k < kc; k++) {
            const float *src = xg + ci * in_plane;
            for (int64_t j = 0; j < lanes; j++) {
                int64_t ih = hb[j] + kh * v->dh, iw = wb[j] + kw * v->dw;
                d0[(j / NRv) * NRv * kc + k * NRv + j % NRv] =
                    ih >= 0 && ih < v->H && iw >= 0 && iw < v->W ? src[ih * v->W + iw] : 0.0f;
            }
            if (++kw == v->KW) {
                kw = 0;
                if (++kh == v->KH) kh = 0, ci++;
            }
        }
    }
}

/* Any rank: per element, slow but general (3-D convs and beyond). */
static void pack_conv_nd(const conv_pack_ctx *cc, const float *xg, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                         float *dst) {
    const kn_window *w = &cc->s->w;
    const int nsp = w->nsp, NRv = kn_sgemm_nr();
    const int64_t kk = cc->s->kk;
    for (int64_t jr = 0; jr < nc; jr += NRv) {
        int nr = (int)min64(NRv, nc - jr);
        float *d = dst + jr * kc;
        int64_t base[MAX_NR][KN_MAX_SPATIAL];
        for (int j = 0; j < nr; j++) {
            int64_t col = n0 + jr + j;
            for (int i = nsp - 1; i >= 0; i--) {
                int64_t o = col % w->out[i];
                col /= w->out[i];
                base[j][i] = o * w->stride[i] - w->pad_begin[i];
            }
        }
        for (int64_t k = k0; k < k0 + kc; k++) {
            int64_t ci = k / kk, r = k % kk, off[KN_MAX_SPATIAL];
            for (int i = nsp - 1; i >= 0; i--) {
                off[i] = (r % w->kernel[i]) * w->dilation[i];
                r /= w->kernel[i];
            }
            const float *src = xg + ci * cc->s->in_plane;
            float *row = d + (k - k0) * NRv;
            for (int j = 0; j < NRv; j++) {
                float val = 0.0f;
                if (j < nr) {
                    int64_t idx = 0;
                    bool ok = true;
                    for (int i = 0; i < nsp && ok; i++) {
                        int64_t p = base[j][i] + off[i];
                        ok = p >= 0 && p < w->in[i];
                        idx = idx * w->in[i] + p;
                    }
                    if (ok) val = src[idx];
                }
                row[j] = val;
            }
        }
    }
}

/* ------------------------------------------------------------------ strided 1-D windows: phase rows */

/* A 1-D convolution at stride s >= 3 (an STFT or speech front end: 1 -> 512 channels, kernel 400,
 * stride 160) reads its im2col row k (tap kw) at x[j s + kw d - p] for the columns j: elements s
 * apart, which pack_conv2d gathered (a masked gather per vector of columns: 10% of a 1 -> 512
 * k400 s160 convolution on 16000 samples, perf). Written u = q s + r (0 <= r < s) in the padded
 * row's coordinates, tap kw is element (j + q_kw) of phase row r_kw, where phase row r is
 * xpad[r], xpad[s + r], xpad[2 s + r], ...: made once per channel (a blocked transpose of the row
 * seen as rows of s elements), the phase rows turn every row of the im2col matrix into a run of
 * consecutive elements, packed as the stride-1 case is, by plain loads. Used for dilation > 1
 * (and without vectors); dilation 1 transposes the frames' runs straight from the input
 * (pack_conv_tr), or runs the transposed product on the frames (fr_run). */
static bool pt_suits(const conv_shape *s) {
    if (s->nsp < 1 || s->nsp > 2) return false;
    const win2 v = win2_of(&s->w);
    /* one row of input and output (1-D, or 2-D of height 1); stride 3+ along it (stride 1 and 2
     * are plain loads and even_load in pack_conv2d) */
    if (v.H != 1 || v.KH != 1 || v.OH != 1 || v.ph != 0 || v.sw < 3 || v.OW < 1) return false;
    /* long windows: with a few taps a channel a transpose yields a few rows of the panel (and the
     * frames' copy runs of a few elements): 256 -> 256 k3 s3 on 1500 samples was 1.18x the
     * gathers' time through pack_conv_tr, 64 -> 128 k16 s8 0.75x (op_ab, 1 thread) */
    if (v.KW < 8) return false;
    /* the phase rows hold about one padded input row per channel: at most twice the input plus
     * the pads, and int32-safe offsets */
    const int64_t span = (v.OW - 1) * v.sw + (v.KW - 1) * v.dw + 1;
    return span < (INT32_MAX / 4) && s->in_plane < (INT32_MAX / 4);
}

static pt_geom pt_geom_of(const win2 *v) {
    pt_geom g;
    g.Q = (v->KW - 1) * v->dw / v->sw + v->OW;
    const int64_t vl = KN_VL ? KN_VL : 1;
    g.ldq = (g.Q + vl - 1) / vl * vl;
    g.plane = v->sw * g.ldq;
    return g;
}

typedef struct pt_job {
    const float *x;
    float *xt;
    win2 v;
    pt_geom g;
} pt_job;

#if KN_VL
/* o[t] lane i = in[i] lane t */
static inline __attribute__((always_inline)) void pt_transpose(const kn_vf in[KN_VL], kn_vf o[KN_VL]) {
#if KN_VL == 16
    kn_v16_transpose_regs(in, o);
#else
    kn_v8_transpose_regs(in, o);
#endif
}
#endif

/* Tasks [begin, end) of the phase rows: task t is channel t / chunks (of all images), positions
 * q of chunk t % chunks (PT_QCHUNK of them: one channel is many tasks, a mono front end's one
 * channel was one thread's): xt[r ldq + q] = xpad[q sw + r] for r < sw, q < Q (zero where the
 * pads are), zero in the row strides' slack. */
#define PT_QCHUNK 64 /* a multiple of every vector width */
static int64_t pt_chunks(const pt_geom *g) { return (g->ldq + PT_QCHUNK - 1) / PT_QCHUNK; }

static void pt_range(void *arg, int64_t begin, int64_t end) {
    const pt_job *j = arg;
    const win2 *v = &j->v;
    const int64_t sw = v->sw, W = v->W, pw = v->pw, Q = j->g.Q, ldq = j->g.ldq, chunks = pt_chunks(&j->g);
    for (int64_t task = begin; task < end; task++) {
        const int64_t p = task / chunks, qa = task % chunks * PT_QCHUNK, qb = min64(ldq, qa + PT_QCHUNK);
        const float *x = j->x + p * W;
        float *xt = j->xt + p * j->g.plane;
#if KN_VL
        /* blocks of KN_VL phase positions q by KN_VL phases r: rows of the block are the
         * consecutive elements xpad[q sw + r0 ..], loaded where inside x, then transposed */
        for (int64_t q0 = qa; q0 < qb; q0 += KN_VL)
            for (int64_t r0 = 0; r0 < sw; r0 += KN_VL) {
                kn_vf in[KN_VL], o[KN_VL];
                const int64_t rn = min64(KN_VL, sw - r0), at0 = q0 * sw + r0 - pw;
                /* inside x and the phase rows: whole vectors, unrolled (with a mask made per
                 * row for every block this pass was 7.5% of 1 -> 258 k256 s128 batch 8, perf;
                 * now 4.5%, its samples at the loads of x) */
                if (rn == KN_VL && q0 + KN_VL <= Q && at0 >= 0 && at0 + (KN_VL - 1) * sw + KN_VL <= W) {
                    const float *xp = x + at0;
#pragma GCC unroll 16
                    for (int i = 0; i < KN_VL; i++, xp += sw) in[i] = kn_vf_loadu(xp);
                    pt_transpose(in, o);
#pragma GCC unroll 16
                    for (int t = 0; t < KN_VL; t++) kn_vf_storeu(xt + (r0 + t) * ldq + q0, o[t]);
                    continue;
                }
                for (int i = 0; i < KN_VL; i++) {
                    const int64_t at = at0 + i * sw; /* x index of lane 0 */
                    const kn_vmask m = q0 + i < Q ? (kn_vmask)(kn_v_tail(rn) & kn_v_range(-at, W - at)) : 0;
                    in[i] = m ? kn_vf_maskz_loadu(m, x + at) : kn_vf_zero();
                }
                pt_transpose(in, o);
                float tb[KN_VL][KN_VL];
#pragma GCC unroll 16
                for (int t = 0; t < KN_VL; t++) kn_vf_storeu(tb[t], o[t]);
                for (int64_t t = 0; t < rn; t++) kn_vf_storeu(xt + (r0 + t) * ldq + q0, kn_vf_loadu(tb[t]));
            }
        continue;
#endif
        for (int64_t r = 0; r < sw; r++)
            for (int64_t q = qa; q < qb; q++) {
                const int64_t i = q * sw + r - pw;
                xt[r * ldq + q] = q < Q && i >= 0 && i < W ? x[i] : 0.0f;
            }
    }
}

/* Rows k0..k0+kc, columns n0..n0+nc of image n, group g's im2col matrix from its channels' phase
 * rows, in the GEMM's packed-B layout: row k of a panel is a run of consecutive elements of phase
 * row r_kw from q_kw + column (tap[kw] = r_kw ldq + q_kw). PT_ROWS rows at a time across every
 * panel (pack_b_plain_rows' order): each phase row is read along its length, from L1 after the
 * first panel, and each panel gets PT_ROWS * NR consecutive floats. Panel by panel this packing
 * was 4.9% of 1 -> 258 k256 s128 batch 8 (perf, samples at its loads), this way 4.5%. */
#define PT_ROWS 8
static void pack_conv_pt(const conv_pack_ctx *cc, const float *xt, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                         float *dst) {
    const int NRv = kn_sgemm_nr();
    const int64_t KW = cc->v.KW, plane = cc->pt.plane;
    int64_t ci = k0 / KW, kw = k0 % KW;
    for (int64_t kb = 0; kb < kc; kb += PT_ROWS) {
        const int64_t kn = min64(PT_ROWS, kc - kb);
        const float *src[PT_ROWS];
        for (int64_t r = 0; r < kn; r++) {
            src[r] = xt + ci * plane + cc->pt_tap[kw] + n0;
            if (++kw == KW) kw = 0, ci++;
        }
        for (int64_t jr = 0; jr < nc; jr += NRv) {
            const int64_t cols = min64(NRv, nc - jr);
            float *d = dst + jr * kc + kb * NRv;
            for (int64_t r = 0; r < kn; r++) {
                const float *sp = src[r] + jr;
                float *row = d + r * NRv;
#if KN_VL
                if (NRv % KN_VL == 0) {
                    for (int64_t l = 0; l < NRv; l += KN_VL) {
                        const kn_vmask m = kn_v_tail(cols - l);
                        kn_vf_storeu(row + l, m == KN_VALL ? kn_vf_loadu(sp + l) : kn_vf_maskz_loadu(m, sp + l));
                    }
                    continue;
                }
#endif
                int64_t l = 0;
                for (; l < cols; l++) row[l] = sp[l];
                for (; l < NRv; l++) row[l] = 0.0f;
            }
        }
    }
}

#if KN_VL
/* The same rows and columns for dilation 1, straight from the input: the taps kw.. kw + KN_VL of
 * KN_VL consecutive frames are KN_VL runs of consecutive elements (frame f's from f sw - pw + kw),
 * loaded and transposed in registers into KN_VL rows of the panel. No phase rows: made for a 10 s
 * signal (160000 samples, 1 -> 512 k400 s160) they were 4% of its time and their packing 3% more
 * (perf; written and read back through memory), where these transposes cost per element of the
 * im2col what the phase rows' copy did. xc: channel 0 of the group. */
static void pack_conv_tr(const conv_pack_ctx *cc, const float *xc, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                         float *dst) {
    const win2 *v = &cc->v;
    const int NRv = kn_sgemm_nr();
    const int64_t KW = v->KW, W = v->W, sw = v->sw, pw = v->pw, in_plane = cc->s->in_plane;
    for (int64_t jr = 0; jr < nc; jr += NRv) {
        const int64_t cols = min64(NRv, nc - jr);
        for (int64_t h = 0; h < NRv; h += KN_VL) {
            const int64_t rows = min64(KN_VL, cols - h), f0 = n0 + jr + h;
            float *d = dst + jr * kc + h;
            if (rows <= 0) {
                for (int64_t k = 0; k < kc; k++) kn_vf_storeu(d + k * NRv, kn_vf_zero());
                continue;
            }
            /* every frame of the group whole inside the row */
            const bool inside = rows == KN_VL && f0 * sw - pw >= 0 && (f0 + KN_VL - 1) * sw - pw + KW <= W;
            int64_t ci = k0 / KW, kw = k0 % KW;
            for (int64_t k = 0; k < kc;) {
                const int64_t run = min64(KN_VL, min64(KW - kw, kc - k));
                const float *xp = xc + ci * in_plane + f0 * sw - pw + kw;
                kn_vf in[KN_VL], o[KN_VL];
                if (inside && run == KN_VL) {
#pragma GCC unroll 16
                    for (int i = 0; i < KN_VL; i++) in[i] = kn_vf_loadu(xp + i * sw);
                } else {
                    const kn_vmask rm = kn_v_tail(run);
                    for (int i = 0; i < KN_VL; i++) {
                        const int64_t at = (f0 + i) * sw - pw + kw; /* x index of lane 0 */
                        const kn_vmask m = i < rows ? (kn_vmask)(rm & kn_v_range(-at, W - at)) : 0;
                        in[i] = m ? kn_vf_maskz_loadu(m, xp + i * sw) : kn_vf_zero();
                    }
                }
                pt_transpose(in, o);
                if (run == KN_VL) {
#pragma GCC unroll 16
                    for (int t = 0; t < KN_VL; t++) kn_vf_storeu(d + (k + t) * NRv, o[t]);
                } else {
                    float tb[KN_VL][KN_VL];
#pragma GCC unroll 16
                    for (int t = 0; t < KN_VL; t++) kn_vf_storeu(tb[t], o[t]);
                    for (int64_t t = 0; t < run; t++) kn_vf_storeu(d + (k + t) * NRv, kn_vf_loadu(tb[t]));
                }
                k += run;
                if ((kw += run) == KW) kw = 0, ci++;
            }
        }
    }
}
#endif

static void conv_pack_b(const void *ctx, int64_t op, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
    const conv_pack_ctx *cc = ctx;
    const conv_shape *s = cc->s;
    int64_t n = op / s->G, g = op % s->G;
    if (cc->xt) {
        pack_conv_pt(cc, cc->xt + (n * s->C + g * s->Cg) * cc->pt.plane, k0, kc, n0, nc, dst);
        return;
    }
    const float *xg = cc->x + (n * s->C + g * s->Cg) * s->in_plane;
#if KN_VL
    if (cc->tr) {
        pack_conv_tr(cc, xg, k0, kc, n0, nc, dst);
        return;
    }
#endif
    if (s->nsp <= 2) pack_conv2d(cc, xg, k0, kc, n0, nc, dst);
    else pack_conv_nd(cc, xg, k0, kc, n0, nc, dst);
}

/* ------------------------------------------------------------------ depthwise */

struct dw_tap;

typedef struct dw_job {
    const conv_shape *s;
    win2 v;
    const float *x, *w;
    float *y;
    const struct dw_tap *taps; /* vector path when set */
    kn_conv_epilogue_fn epi;   /* optional, per finished plane */
    const void *epi_ctx;
    const float *bias;         /* the 16-channel path adds it; the others find it preloaded in y */
    const float *w16;          /* the 16-channel path: weights as [group][tap][16] */
    int64_t split;             /* the 16-channel path: slices of output rows per channel group */
    int *failed;
} dw_job;

#if KN_VL
/* bits [lo, hi) of a 32-bit mask */
static inline uint32_t range_mask32(int64_t lo, int64_t hi) {
    if (lo < 0) lo = 0;
    if (hi > 32) hi = 32;
    if (hi <= lo) return 0;
    uint32_t up = hi >= 32 ? 0xFFFFFFFFu : (1u << hi) - 1;
    return up & ~((1u << lo) - 1);
}

/* Per chunk of KN_VL outputs along a row and per kw: the input index of lane 0 and the lanes (for
 * stride 2, the input lanes of a 32-float window) that fall inside the row. The same for every
 * row and plane, so computed once per call. */
typedef struct dw_tap {
    int64_t i0;
    uint32_t mask;
} dw_tap;

static void dw_taps(const win2 *v, dw_tap *taps) {
    const int64_t chunks = (v->OW + KN_VL - 1) / KN_VL;
    memset(taps + chunks * v->KW, 0, sizeof(dw_tap) * (size_t)(3 * v->KW)); /* spare chunks: no lanes */
    for (int64_t c = 0, ow0 = 0; ow0 < v->OW; ow0 += KN_VL, c++) {
        const int64_t nout = min64(KN_VL, v->OW - ow0);
        for (int64_t kw = 0; kw < v->KW; kw++) {
            dw_tap *t = &taps[c * v->KW + kw];
            t->i0 = ow0 * v->sw + kw * v->dw - v->pw;
            t->mask = v->sw == 1 ? range_mask32(-t->i0, min64(nout, v->W - t->i0))
                                 : range_mask32(-t->i0, min64(2 * nout, v->W - t->i0)) & 0x55555555u;
        }
    }
}

/* One depthwise plane, strides 1 and 2 along the row: KN_VL outputs per vector, every tap a masked
 * load (stride 2: two loads and a permute keeping the even lanes). Four vectors at a time, so
 * four independent FMA chains hide the FMA latency. The tap table has DW_CHUNKS - 1 spare
 * all-zero chunks at its end. */
#define DW_CHUNKS 4
static inline __attribute__((always_inline)) void dw_plane_impl(const float *xs, const float *ws, float *ys,
                                                                const win2 *v, const dw_tap *taps, const int SW,
                                                                const int NCH) {
    const kn_vi even = kn_vi_iota(0, 2);
    const int64_t KW = v->KW;
    for (int64_t oh = 0; oh < v->OH; oh++) {
        float *yrow = ys + oh * v->OW;
        /* the rows of the window inside the input */
        int64_t kh0 = 0, kh1 = v->KH, ih0 = oh * v->sh - v->ph;
        while (kh0 < kh1 && ih0 + kh0 * v->dh < 0) kh0++;
        while (kh1 > kh0 && ih0 + (kh1 - 1) * v->dh >= v->H) kh1--;
        for (int64_t c = 0, ow0 = 0; ow0 < v->OW; ow0 += KN_VL * NCH, c += NCH) {
            kn_vmask om[4];
            kn_vf acc[4];
            for (int q = 0; q < NCH; q++) {
                om[q] = (kn_vmask)range_mask32(0, min64(KN_VL, v->OW - ow0 - KN_VL * q));
                acc[q] = kn_vf_maskz_loadu(om[q], yrow + ow0 + KN_VL * q);
            }
            for (int64_t kh = kh0; kh < kh1; kh++) {
                const float *xrow = xs + (ih0 + kh * v->dh) * v->W;
                const float *wr = ws + kh * KW;
                for (int64_t kw = 0; kw < KW; kw++) {
                    const kn_vf wv = kn_vf_set1(wr[kw]);
#pragma GCC unroll 4
                    for (int q = 0; q < NCH; q++) {
                        const dw_tap *t = &taps[(c + q) * KW + kw];
                        kn_vf xv;
                        if (SW == 1) {
                            xv = kn_vf_maskz_loadu((kn_vmask)t->mask, xrow + t->i0);
                        } else {
                            kn_vf a = kn_vf_maskz_loadu((kn_vmask)(t->mask & KN_VALL), xrow + t->i0);
                            kn_vf b = kn_vf_maskz_loadu((kn_vmask)(t->mask >> KN_VL), xrow + t->i0 + KN_VL);
                            xv = kn_vf_perm2(a, even, b);
                        }
                        acc[q] = kn_vf_fmadd(wv, xv, acc[q]);
                    }
                }
            }
            for (int q = 0; q < NCH; q++) kn_vf_mask_storeu(yrow + ow0 + KN_VL * q, om[q], acc[q]);
        }
    }
}

/* Undilated windows: R output rows at once, NCH vectors of KN_VL outputs each. Every input row
 * loaded (per tap column, per vector) serves each of the R output rows whose window covers it, so
 * loads drop from R*KH*KW to about (R*sh+KH)*KW per group, and the R*NCH accumulators are
 * independent FMA chains: with one row of one vector per step (7- and 14-wide planes) each tap's
 * FMA waited for the previous one's result. */
static inline __attribute__((always_inline)) void dw_rows_impl(const float *xs, const float *ws, float *ys,
                                                               const win2 *v, const dw_tap *taps, const int SW,
                                                               const int SH, const int NCH, const int R) {
    const kn_vi even = kn_vi_iota(0, 2);
    const int64_t KW = v->KW, KH = v->KH, OH = v->OH;
    for (int64_t oh0 = 0; oh0 < OH; oh0 += R) {
        for (int64_t c = 0, ow0 = 0; ow0 < v->OW; ow0 += KN_VL * NCH, c += NCH) {
            kn_vmask om[4];
            kn_vf acc[8][4];
#pragma GCC unroll 4
            for (int q = 0; q < NCH; q++) om[q] = (kn_vmask)range_mask32(0, min64(KN_VL, v->OW - ow0 - KN_VL * q));
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
#pragma GCC unroll 4
                for (int q = 0; q < NCH; q++)
                    acc[r][q] = oh0 + r < OH ? kn_vf_maskz_loadu(om[q], ys + (oh0 + r) * v->OW + ow0 + KN_VL * q)
                                             : kn_vf_zero();
            /* input rows ih0 + t, t < (R-1)*SH + KH, feed output row r through kernel row t - r*SH */
            const int64_t ih0 = oh0 * SH - v->ph, tn = (R - 1) * SH + KH;
            for (int64_t t = 0; t < tn; t++) {
                const int64_t ih = ih0 + t;
                if (ih < 0 || ih >= v->H) continue;
                const float *xrow = xs + ih * v->W;
                for (int64_t kw = 0; kw < KW; kw++) {
                    kn_vf xv[4];
#pragma GCC unroll 4
                    for (int q = 0; q < NCH; q++) {
                        const dw_tap *tp = &taps[(c + q) * KW + kw];
                        if (SW == 1) {
                            xv[q] = kn_vf_maskz_loadu((kn_vmask)tp->mask, xrow + tp->i0);
                        } else {
                            kn_vf a = kn_vf_maskz_loadu((kn_vmask)(tp->mask & KN_VALL), xrow + tp->i0);
                            kn_vf b = kn_vf_maskz_loadu((kn_vmask)(tp->mask >> KN_VL), xrow + tp->i0 + KN_VL);
                            xv[q] = kn_vf_perm2(a, even, b);
                        }
                    }
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++) {
                        const int64_t kh = t - (int64_t)r * SH;
                        if (kh < 0 || kh >= KH) continue;
                        const kn_vf wv = kn_vf_set1(ws[kh * KW + kw]);
#pragma GCC unroll 4
                        for (int q = 0; q < NCH; q++) acc[r][q] = kn_vf_fmadd(wv, xv[q], acc[r][q]);
                    }
                }
            }
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                if (oh0 + r < OH)
#pragma GCC unroll 4
                    for (int q = 0; q < NCH; q++)
                        kn_vf_mask_storeu(ys + (oh0 + r) * v->OW + ow0 + KN_VL * q, om[q], acc[r][q]);
        }
    }
}

/* One output row (1-D convolutions: a Conformer's 31-tap depthwise layer), stride 1: four vectors of
 * KN_VL outputs, even and odd taps into separate accumulators, so eight independent FMA chains (the
 * rows path keeps R = 2 rows of four, and with one row only four chains, half the FMA rate). */
static void dw_row1_s1(const float *xs, const float *ws, float *ys, const win2 *v, const dw_tap *taps) {
    const int64_t KW = v->KW;
    const float *xrow = xs + (0 * v->sh - v->ph) * v->W; /* the one input row the window covers */
    for (int64_t c = 0, ow0 = 0; ow0 < v->OW; ow0 += KN_VL * DW_CHUNKS, c += DW_CHUNKS) {
        kn_vmask om[DW_CHUNKS];
        kn_vf a0[DW_CHUNKS], a1[DW_CHUNKS];
        for (int q = 0; q < DW_CHUNKS; q++) {
            om[q] = (kn_vmask)range_mask32(0, min64(KN_VL, v->OW - ow0 - KN_VL * q));
            a0[q] = kn_vf_maskz_loadu(om[q], ys + ow0 + KN_VL * q);
            a1[q] = kn_vf_zero();
        }
        int64_t kw = 0;
        for (; kw + 2 <= KW; kw += 2) {
            const kn_vf w0 = kn_vf_set1(ws[kw]), w1 = kn_vf_set1(ws[kw + 1]);
#pragma GCC unroll 4
            for (int q = 0; q < DW_CHUNKS; q++) {
                const dw_tap *t0 = &taps[(c + q) * KW + kw], *t1 = t0 + 1;
                a0[q] = kn_vf_fmadd(w0, kn_vf_maskz_loadu((kn_vmask)t0->mask, xrow + t0->i0), a0[q]);
                a1[q] = kn_vf_fmadd(w1, kn_vf_maskz_loadu((kn_vmask)t1->mask, xrow + t1->i0), a1[q]);
            }
        }
        if (kw < KW) {
            const kn_vf w0 = kn_vf_set1(ws[kw]);
            for (int q = 0; q < DW_CHUNKS; q++) {
                const dw_tap *t0 = &taps[(c + q) * KW + kw];
                a0[q] = kn_vf_fmadd(w0, kn_vf_maskz_loadu((kn_vmask)t0->mask, xrow + t0->i0), a0[q]);
            }
        }
        for (int q = 0; q < DW_CHUNKS; q++) kn_vf_mask_storeu(ys + ow0 + KN_VL * q, om[q], kn_vf_add(a0[q], a1[q]));
    }
}

/* dw_row1_s1 from a zero-padded copy of the row (on the stack, rows up to DW_PAD_MAX floats): every
 * tap a plain load at a constant offset, no tap table or masks (the Conformer's 31 taps over 500
 * outputs: 0.137 ms with the masked taps, ONNX Runtime 0.45, OpenVINO 0.113), eight vectors of
 * KN_VL outputs a step (eight FMA chains). */
#define DW_PAD_MAX 6144
static bool dw_row1_pad(const float *xs, const float *ws, float *ys, const win2 *v) {
    const int64_t KW = v->KW, dw = v->dw, OW = v->OW, ext = (KW - 1) * dw, owr = (OW + 127) / 128 * 128;
    if (owr + ext + KN_VL > DW_PAD_MAX) return false;
    float xp[DW_PAD_MAX] __attribute__((aligned(64)));
    /* xp[i] = x[i - pw], zero outside the row */
    for (int64_t i = 0; i < owr + ext; i += KN_VL) {
        const int64_t u = i - v->pw;
        kn_vf_store(xp + i, kn_vf_maskz_loadu((kn_vmask)range_mask32(-u, v->W - u), xs + u));
    }
    for (int64_t ow0 = 0; ow0 < OW; ow0 += 8 * KN_VL) {
        kn_vf acc[8];
        kn_vmask om[8];
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) {
            om[q] = kn_v_tail(OW - ow0 - KN_VL * q);
            acc[q] = kn_vf_maskz_loadu(om[q], ys + ow0 + KN_VL * q);
        }
        const float *x0 = xp + ow0;
        for (int64_t kw = 0; kw < KW; kw++, x0 += dw) {
            const kn_vf wv = kn_vf_set1(ws[kw]);
#pragma GCC unroll 8
            for (int q = 0; q < 8; q++) acc[q] = kn_vf_fmadd(wv, kn_vf_loadu(x0 + KN_VL * q), acc[q]);
        }
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) kn_vf_mask_storeu(ys + ow0 + KN_VL * q, om[q], acc[q]);
    }
    return true;
}

#define DW_ROWS(SW, SH)                                                                                do {                                                                                                   if (nch == 1) dw_rows_impl(xs, ws, ys, v, taps, SW, SH, 1, 8);                                    else if (nch == 2) dw_rows_impl(xs, ws, ys, v, taps, SW, SH, 2, 4);                               else dw_rows_impl(xs, ws, ys, v, taps, SW, SH, DW_CHUNKS, 2);                                 } while (0)

/* As many vectors per step as the row needs, up to DW_CHUNKS: a 7- or 14-wide row (late
 * MobileNet/EfficientNet layers) would otherwise compute three all-masked vectors per tap. */
static void dw_plane_vec(const float *xs, const float *ws, float *ys, const win2 *v, const dw_tap *taps) {
    const int nch = v->OW <= KN_VL ? 1 : v->OW <= 2 * KN_VL ? 2 : DW_CHUNKS;
    if (v->OH == 1 && v->H == 1 && v->KH == 1 && v->ph == 0 && v->sw == 1 && nch == DW_CHUNKS) {
        if (dw_row1_pad(xs, ws, ys, v)) return;
        dw_row1_s1(xs, ws, ys, v, taps);
        return;
    }
    if (v->dh == 1 && v->sh <= 2) {
        if (v->sw == 1 && v->sh == 1) DW_ROWS(1, 1);
        else if (v->sw == 1) DW_ROWS(1, 2);
        else if (v->sh == 1) DW_ROWS(2, 1);
        else DW_ROWS(2, 2);
        return;
    }
    if (v->sw == 1) {
        if (nch == 1) dw_plane_impl(xs, ws, ys, v, taps, 1, 1);
        else if (nch == 2) dw_plane_impl(xs, ws, ys, v, taps, 1, 2);
        else dw_plane_impl(xs, ws, ys, v, taps, 1, DW_CHUNKS);
    } else {
        if (nch == 1) dw_plane_impl(xs, ws, ys, v, taps, 2, 1);
        else if (nch == 2) dw_plane_impl(xs, ws, ys, v, taps, 2, 2);
        else dw_plane_impl(xs, ws, ys, v, taps, 2, DW_CHUNKS);
    }
}
#endif

#if KN_VL
/* ---- depthwise, KN_VL channels per vector (small planes) ----
 * A 7x7 or 14x14 plane fills a vector poorly along its rows. Here the KN_VL lanes (isa_vec.h) are KN_VL
 * channels at one pixel: each group of KN_VL channel planes is transposed into a zero-bordered
 * scratch image of [rows][cols][KN_VL] (so window taps need no bounds checks), convolved with the
 * group's weights laid out [tap][KN_VL], and transposed back. Up to 8 output pixels of a row are
 * computed at once: 8 independent FMA chains sharing each tap's weight vector. */
#ifndef DW16_MAX_OW /* rows up to 512 wide (was 128): on 304-wide rows (3x3 16ch 400x304 s1, 32ch s2)
                     * it ran 0.96 and 0.79 of the direct kernel's (conv_direct.c) time, the 500-wide
                     * Conformer row 0.82; on 1000- and 2000-wide rows 1.17 and 1.3 (its bands of
                     * rows shrink to a few, each transposing the window's extra rows again) */
#define DW16_MAX_OW 512
#endif
#ifndef DW16_MAX_FLOATS
#define DW16_MAX_FLOATS (512 * 1024)
#endif
#ifndef DW16_BAND_FLOATS /* 256 KB: measured best of 16K-64K floats and whole planes */
#define DW16_BAND_FLOATS (64 * 1024)
#endif

typedef struct dw16_geom {
    int64_t band;         /* output rows per band */
    int64_t SR, SC;       /* scratch rows (for one band) and columns */
    int64_t scratch, out; /* floats of the scratch image and of the transposed output, per band */
} dw16_geom;

/* Large planes go in bands of output rows, so that a band's scratch and output stay in cache
 * (the halo of KH - 1 input rows is transposed twice). */
static dw16_geom dw16_geom_of(const win2 *v) {
    dw16_geom g;
    g.SC = max64(v->pw + v->W, (v->OW - 1) * v->sw + (v->KW - 1) * v->dw + 1);
    const int64_t halo = (v->KH - 1) * v->dh + 1;
    g.band = v->OH;
    while (g.band > 1 && (((g.band - 1) * v->sh + halo) * g.SC + g.band * v->OW) * KN_VL > DW16_BAND_FLOATS)
        g.band = (g.band + 1) / 2;
    g.SR = (g.band - 1) * v->sh + halo;
    g.scratch = g.SR * g.SC * KN_VL;
    g.out = g.band * v->OW * KN_VL;
    return g;
}

/* The weights of channels c0..c0+KN_VL as [tap][KN_VL] for every group: (C + KN_VL - 1) / KN_VL * kk * KN_VL floats. */
typedef struct dw16_wctx {
    const float *w;
    int64_t C, kk;
} dw16_wctx;

static void dw16_make_weights(const void *ctx, void *dst) {
    const dw16_wctx *k = ctx;
    float *d = dst;
    for (int64_t c0 = 0; c0 < k->C; c0 += KN_VL)
        for (int64_t t = 0; t < k->kk; t++, d += KN_VL)
            for (int64_t l = 0; l < KN_VL; l++) d[l] = c0 + l < k->C ? k->w[(c0 + l) * k->kk + t] : 0.0f;
}

static inline __attribute__((always_inline)) void dw16_block(const float *srow, const float *wg, const kn_vf b,
                                                             float *orow, const win2 *v, int64_t SC, const int NB) {
    kn_vf acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < NB; j++) acc[j] = b;
    const int64_t xs = v->sw * KN_VL, KW = v->KW;
    for (int64_t kh = 0; kh < v->KH; kh++) {
        const float *r = srow + kh * v->dh * SC * KN_VL;
        const float *wr = wg + kh * KW * KN_VL;
        for (int64_t kw = 0; kw < KW; kw++) {
            const kn_vf wv = kn_vf_loadu(wr + kw * KN_VL);
            const float *p = r + kw * v->dw * KN_VL;
#pragma GCC unroll 8
            for (int j = 0; j < NB; j++) acc[j] = kn_vf_fmadd(kn_vf_loadu(p + j * xs), wv, acc[j]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NB; j++) kn_vf_storeu(orow + j * KN_VL, acc[j]);
}

#if KN_VL == 16
/* dw16_block for stride 1 and dilation 1 along the row with KWC (3, 5 or 7) columns of taps: each
 * row of taps loads its NB + KWC - 1 input pixels once and slides over them (AVX-512's 32
 * registers hold 8 sums and 14 pixels), where dw16_block loads NB pixels for every tap: on a 7x7
 * window 21 loads for 56 multiply-adds instead of 63, which at two 64-byte loads a cycle bounded
 * the loop (ConvNeXt's dw 7x7 128ch 28x28 at 1.11 of ONNX Runtime's time). The same sums in the
 * same order. */
static inline __attribute__((always_inline)) void dw16_block_slide(const float *srow, const float *wg, const kn_vf b,
                                                                   float *orow, const win2 *v, int64_t SC, const int NB,
                                                                   const int KWC) {
    kn_vf acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < NB; j++) acc[j] = b;
    for (int64_t kh = 0; kh < v->KH; kh++) {
        const float *r = srow + kh * v->dh * SC * KN_VL;
        const float *wr = wg + kh * KWC * KN_VL;
        kn_vf in[8 + 7 - 1];
#pragma GCC unroll 14
        for (int q = 0; q < NB + KWC - 1; q++) in[q] = kn_vf_loadu(r + q * KN_VL);
#pragma GCC unroll 7
        for (int kw = 0; kw < KWC; kw++) {
            const kn_vf wv = kn_vf_loadu(wr + kw * KN_VL);
#pragma GCC unroll 8
            for (int j = 0; j < NB; j++) acc[j] = kn_vf_fmadd(in[j + kw], wv, acc[j]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NB; j++) kn_vf_storeu(orow + j * KN_VL, acc[j]);
}

#define DW16_SLIDE_CASES(KWC)                                                                      \
    switch (nb) {                                                                                  \
    case 8: dw16_block_slide(sp, wg, b, op, v, SC, 8, KWC); break;                                 \
    case 7: dw16_block_slide(sp, wg, b, op, v, SC, 7, KWC); break;                                 \
    case 6: dw16_block_slide(sp, wg, b, op, v, SC, 6, KWC); break;                                 \
    case 5: dw16_block_slide(sp, wg, b, op, v, SC, 5, KWC); break;                                 \
    case 4: dw16_block_slide(sp, wg, b, op, v, SC, 4, KWC); break;                                 \
    case 3: dw16_block_slide(sp, wg, b, op, v, SC, 3, KWC); break;                                 \
    case 2: dw16_block_slide(sp, wg, b, op, v, SC, 2, KWC); break;                                 \
    default: dw16_block_slide(sp, wg, b, op, v, SC, 1, KWC); break;                                \
    }

/* one block of nb (<= 8) output pixels through dw16_block_slide; false where it does not apply */
static bool dw16_slide(const float *sp, const float *wg, const kn_vf b, float *op, const win2 *v, int64_t SC, int nb) {
    if (v->sw != 1 || v->dw != 1) return false;
    switch (v->KW) {
    case 7: DW16_SLIDE_CASES(7) return true;
    case 5: DW16_SLIDE_CASES(5) return true;
    case 3: DW16_SLIDE_CASES(3) return true;
    default: return false;
    }
}
#endif

/* Output rows [oh_begin, oh_end) of channels c0..c0+nc (< KN_VL at the end) of image n, band after
 * band. scratch: geometry g, its border columns already 0. */
static void dw16_group(const dw_job *j, int64_t n, int64_t c0, int nc, const float *wg, int64_t oh_begin,
                       int64_t oh_end, float *scratch, float *obuf, const dw16_geom *g) {
    const conv_shape *s = j->s;
    const win2 *v = &j->v;
    const float *x = j->x + (n * s->C + c0) * s->in_plane;
    float *y = j->y + (n * s->M + c0) * s->out_plane;
    kn_vf b = kn_vf_zero();
    if (j->bias) b = kn_vf_maskz_loadu(kn_v_tail(nc), j->bias + c0);
    for (int64_t ob0 = oh_begin; ob0 < oh_end; ob0 += g->band) {
        const int64_t ob1 = min64(oh_end, ob0 + g->band);
        /* scratch row r is input row r0 + r; rows outside the input are zeros */
        const int64_t r0 = ob0 * v->sh - v->ph, rows = (ob1 - 1 - ob0) * v->sh + (v->KH - 1) * v->dh + 1;
        const int64_t lo = max64(r0, 0), hi = min64(r0 + rows, v->H);
        for (int64_t r = 0; r < rows; r++)
            if (r0 + r < lo || r0 + r >= hi) memset(scratch + r * g->SC * KN_VL, 0, sizeof(float) * (size_t)(g->SC * KN_VL));
        /* in: KN_VL channel planes -> scratch pixels; (ih, iw) of pixel p0 + q advance with q (a
         * division per pixel cost more than the transpose) */
        int64_t ih = lo, iw = 0;
        for (int64_t p0 = lo * v->W; p0 < hi * v->W; p0 += KN_VL) {
            const int cnt = (int)min64(KN_VL, hi * v->W - p0);
            kn_vf o[KN_VL];
            if (nc == KN_VL) kn_v_transpose(x + p0, s->in_plane, KN_VL, cnt, o); /* constant rows: no tests */
            else kn_v_transpose(x + p0, s->in_plane, nc, cnt, o);
            float *dst = scratch + ((ih - r0) * g->SC + iw + v->pw) * KN_VL;
            for (int q = 0; q < cnt; q++) {
                kn_vf_storeu(dst, o[q]);
                dst += KN_VL;
                if (++iw == v->W) {
                    iw = 0, ih++;
                    dst = scratch + ((ih - r0) * g->SC + v->pw) * KN_VL;
                }
            }
        }
        for (int64_t oh = ob0; oh < ob1; oh++) {
            const float *srow = scratch + (oh - ob0) * v->sh * g->SC * KN_VL;
            float *orow = obuf + (oh - ob0) * v->OW * KN_VL;
            for (int64_t ow = 0; ow < v->OW; ow += 8) {
                const float *sp = srow + ow * v->sw * KN_VL;
                float *op = orow + ow * KN_VL;
#if KN_VL == 16
                if (dw16_slide(sp, wg, b, op, v, g->SC, (int)min64(8, v->OW - ow))) continue;
#endif
                switch (min64(8, v->OW - ow)) {
                case 8: dw16_block(sp, wg, b, op, v, g->SC, 8); break;
                case 7: dw16_block(sp, wg, b, op, v, g->SC, 7); break;
                case 6: dw16_block(sp, wg, b, op, v, g->SC, 6); break;
                case 5: dw16_block(sp, wg, b, op, v, g->SC, 5); break;
                case 4: dw16_block(sp, wg, b, op, v, g->SC, 4); break;
                case 3: dw16_block(sp, wg, b, op, v, g->SC, 3); break;
                case 2: dw16_block(sp, wg, b, op, v, g->SC, 2); break;
                default: dw16_block(sp, wg, b, op, v, g->SC, 1); break;
                }
            }
        }
        /* out: pixels -> KN_VL channel planes */
        const int64_t q0 = ob0 * v->OW, q1 = ob1 * v->OW;
        for (int64_t p0 = q0; p0 < q1; p0 += KN_VL) {
            const int cnt = (int)min64(KN_VL, q1 - p0);
            const kn_vmask m = kn_v_tail(cnt);
            kn_vf o[KN_VL];
            if (cnt == KN_VL) kn_v_transpose(obuf + (p0 - q0) * KN_VL, KN_VL, KN_VL, KN_VL, o);
            else kn_v_transpose(obuf + (p0 - q0) * KN_VL, KN_VL, cnt, KN_VL, o);
            for (int l = 0; l < nc; l++) kn_vf_mask_storeu(y + l * s->out_plane + p0, m, o[l]);
        }
        if (j->epi) j->epi(j->epi_ctx, j->y, (n * s->M + c0) * s->out_plane + q0, nc, q1 - q0, s->out_plane);
    }
}

/* Where the KN_VL-channel path wins: one input channel per output channel and rows too short to
 * fill vectors along them (measured on EfficientNet/MobileNet layers, see the commit), with a
 * scratch image that stays in L1/L2. */
static bool dw16_suits(const conv_shape *s) {
    if (s->Mg != 1 || s->nsp > 2) return false;
    const win2 v = win2_of(&s->w);
    const dw16_geom g = dw16_geom_of(&v);
    return v.OW <= DW16_MAX_OW && g.scratch + g.out <= DW16_MAX_FLOATS && s->in_plane < ((int64_t)1 << 30);
}

/* Tasks are (image, group of KN_VL channels, slice of output rows). */
static void dw16_range(void *arg, int64_t begin, int64_t end) {
    const dw_job *j = arg;
    const conv_shape *s = j->s;
    const dw16_geom g = dw16_geom_of(&j->v);
    const int64_t groups = (s->C + KN_VL - 1) / KN_VL;
    float *scratch = kn_aligned_alloc(64, sizeof(float) * (size_t)(g.scratch + g.out));
    if (!scratch) {
        __atomic_store_n(j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    memset(scratch, 0, sizeof(float) * (size_t)g.scratch);
    const int64_t OH = j->v.OH, split = j->split;
    for (int64_t t = begin; t < end; t++) {
        const int64_t ng = t / split, part = t % split, n = ng / groups, c0 = (ng % groups) * KN_VL;
        dw16_group(j, n, c0, (int)min64(KN_VL, s->C - c0), j->w16 + (c0 / KN_VL) * s->kk * KN_VL, part * OH / split,
                   (part + 1) * OH / split, scratch, scratch + g.scratch, &g);
    }
    free(scratch);
}
#endif

#if KN_VL
/* ---- depthwise at stride 2 along the row, plane by plane ----
 * Each input row that a band of output rows reads is split once into its even and its odd columns
 * (E[m] = x[2m], O[m] = x[2m + 1]), so tap kw of output ow, input column 2 ow + t (t = kw - pw), is
 * E[ow + t / 2] or O[ow + (t - 1) / 2]: plain loads at constant offsets, up to two rows of four
 * vectors (eight FMA chains) a step. Each phase row has KN_VL zeros before it and zeros after the
 * row's end (the pads), written once per task: the split loads whole vectors inside the row
 * only, its last one overlapping the one before. Masked loads at the rows' ends (AVX2's
 * vmaskmovps on Zen 3) or a zero-padded copy of each row read back at once (a store-forwarding
 * stall per vector) made the split cost 4x the plain loads. Rows outside the input are zero rows. */
typedef struct dws2_job {
    const conv_shape *s;
    win2 v;
    const float *x, *w, *bias;
    float *y;
    kn_conv_epilogue_fn epi;
    const void *epi_ctx;
    int64_t split; /* row slices per plane */
    int64_t Q;     /* floats per phase row: KN_VL zeros, then E or O and zeros */
    int64_t band;  /* output rows per band (its input rows fill the scratch) */
    int *failed;
} dws2_job;

#ifndef DWS2_SCRATCH_FLOATS /* 64 KB of phase rows a band: the band's rows stay in L2 */
#define DWS2_SCRATCH_FLOATS (16 * 1024)
#endif
#define DWS2_NV 4

/* the even and the odd lanes of a ++ b */
static inline void dws2_split(kn_vf a, kn_vf b, kn_vf *e, kn_vf *o) {
#if KN_VL == 8
    const __m256 lo = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), hi = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    /* a0 a2 b0 b2 | a4 a6 b4 b6: swap the middle 64-bit quarters */
    *e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(lo), _MM_SHUFFLE(3, 1, 2, 0)));
    *o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(hi), _MM_SHUFFLE(3, 1, 2, 0)));
#else
    *e = kn_vf_perm2(a, kn_vi_iota(0, 2), b);
    *o = kn_vf_perm2(a, kn_vi_iota(1, 2), b);
#endif
}

static inline void dws2_split_at(const float *xrow, int64_t i, float *e, int64_t Q) {
    kn_vf ev, ov;
    dws2_split(kn_vf_loadu(xrow + i), kn_vf_loadu(xrow + i + KN_VL), &ev, &ov);
    kn_vf_storeu(e + i / 2, ev);
    kn_vf_storeu(e + Q + i / 2, ov);
}

/* E and O of one input row (W >= 2 KN_VL) at e + KN_VL and e + Q + KN_VL; xrow NULL: a zero row */
static void dws2_fill(const float *xrow, float *e, const win2 *v, int64_t Q) {
    if (!xrow) {
        memset(e, 0, sizeof(float) * (size_t)(2 * Q));
        return;
    }
    const int64_t W = v->W;
    e += KN_VL;
    int64_t i = 0;
    for (; i + 2 * KN_VL <= W; i += 2 * KN_VL) dws2_split_at(xrow, i, e, Q);
    if (i < W) dws2_split_at(xrow, (W - 2 * KN_VL) & ~(int64_t)1, e, Q); /* even start: E stays E */
    if (W & 1) e[W / 2] = xrow[W - 1];
}

/* R (1 or 2) output rows from the phase rows at s0 (row oh's first window row) on, columns
 * [ow_begin, ow_end) (NV KN_VL a block, ow_end - ow_begin a multiple of that or less), NV vectors a
 * step; KWC: the window's width where constant (3 or 5), 0 otherwise. A row's last vector is
 * stored whole where what it spills over (the next rows' first columns) is below lim and written
 * after it (blocks right to left): AVX2's masked stores are microcoded on AMD's cores, and a
 * 28-wide row ends inside a vector on every row. */
static inline __attribute__((always_inline)) void dws2_rows(const float *s0, const float *ws, float bias, float *y0,
                                                            const float *lim, int64_t ow_begin, int64_t ow_end,
                                                            const dws2_job *j, const int R, const int NV,
                                                            const int KWC) {
    const win2 *v = &j->v;
    const int64_t Q = j->Q, KW = KWC ? KWC : v->KW, KH = v->KH, OW = v->OW;
    const int64_t rs = v->sh * 2 * Q, ks = v->dh * 2 * Q;
    const kn_vf b = kn_vf_set1(bias);
    s0 += KN_VL;
    for (int64_t ow0 = ow_begin + (ow_end - 1 - ow_begin) / (NV * KN_VL) * (NV * KN_VL); ow0 >= ow_begin;
         ow0 -= NV * KN_VL) {
        kn_vf acc[2][DWS2_NV];
#pragma GCC unroll 2
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int q = 0; q < NV; q++) acc[r][q] = b;
        for (int64_t kh = 0; kh < KH; kh++) {
            const float *row = s0 + kh * ks + ow0;
            const float *wr = ws + kh * KW;
#pragma GCC unroll 5
            for (int64_t kw = 0; kw < KW; kw++) {
                const kn_vf wv = kn_vf_set1(wr[kw]);
                const int64_t t = kw - v->pw;
                const float *p = row + (t & 1) * Q + (t >> 1); /* t >> 1: floor(t / 2), t < 0 too */
#pragma GCC unroll 2
                for (int r = 0; r < R; r++)
#pragma GCC unroll 4
                    for (int q = 0; q < NV; q++) acc[r][q] = kn_vf_fmadd(kn_vf_loadu(p + r * rs + q * KN_VL), wv, acc[r][q]);
            }
        }
#pragma GCC unroll 2
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int q = 0; q < NV; q++) {
                const int64_t left = OW - ow0 - q * KN_VL;
                float *dst = y0 + r * OW + ow0 + q * KN_VL;
                if (left >= KN_VL || (left > 0 && dst + KN_VL <= lim)) kn_vf_storeu(dst, acc[r][q]);
                else if (left > 0) kn_vf_mask_storeu(dst, kn_v_tail(left), acc[r][q]);
            }
    }
}

#define DWS2_KW(R, NV, B, E)                                                                           \
    do {                                                                                               \
        if (v->KW == 3) dws2_rows(s0, ws, bias, y0, lim, B, E, j, R, NV, 3);                           \
        else if (v->KW == 5) dws2_rows(s0, ws, bias, y0, lim, B, E, j, R, NV, 5);                      \
        else dws2_rows(s0, ws, bias, y0, lim, B, E, j, R, NV, 0);                                      \
    } while (0)

/* the row's last block (the columns past the last whole block of DWS2_NV vectors, in as many
 * vectors as they need: a 38-wide row is 4 + 1 vectors, not 8), then the whole blocks, right to
 * left (dws2_rows' whole-vector tails) */
#define DWS2_ROWS(R)                                                                                   \
    do {                                                                                               \
        switch (tail_nv) {                                                                             \
        case 1: DWS2_KW(R, 1, ow4, v->OW); break;                                                      \
        case 2: DWS2_KW(R, 2, ow4, v->OW); break;                                                      \
        case 3: DWS2_KW(R, 3, ow4, v->OW); break;                                                      \
        case 4: DWS2_KW(R, 4, ow4, v->OW); break;                                                      \
        default: break;                                                                                \
        }                                                                                              \
        if (ow4 > 0) DWS2_KW(R, DWS2_NV, 0, ow4);                                                      \
    } while (0)

/* output rows [oh_begin, oh_end) of plane p (image n, channel c), band after band */
static void dws2_plane(const dws2_job *j, int64_t p, int64_t oh_begin, int64_t oh_end, float *scratch) {
    const conv_shape *s = j->s;
    const win2 *v = &j->v;
    const int64_t c = p % s->C, Q = j->Q;
    const float *x = j->x + p * s->in_plane, *ws = j->w + c * s->kk;
    float *y = j->y + p * s->out_plane;
    const float *lim = y + oh_end * v->OW; /* the task's rows end here */
    const float bias = j->bias ? j->bias[c] : 0.0f;
    const int64_t ow4 = v->OW / (DWS2_NV * KN_VL) * (DWS2_NV * KN_VL); /* whole blocks end here */
    const int tail_nv = (int)((v->OW - ow4 + KN_VL - 1) / KN_VL);
    for (int64_t ob0 = oh_begin; ob0 < oh_end; ob0 += j->band) {
        const int64_t ob1 = min64(oh_end, ob0 + j->band);
        const int64_t r0 = ob0 * v->sh - v->ph, rows = (ob1 - 1 - ob0) * v->sh + (v->KH - 1) * v->dh + 1;
        for (int64_t r = 0; r < rows; r++) {
            const int64_t ih = r0 + r;
            dws2_fill(ih >= 0 && ih < v->H ? x + ih * v->W : NULL, scratch + r * 2 * Q, v, Q);
        }
        for (int64_t oh = ob0; oh < ob1; oh += 2) {
            const float *s0 = scratch + (oh - ob0) * v->sh * 2 * Q;
            float *y0 = y + oh * v->OW;
            if (oh + 1 < ob1) DWS2_ROWS(2);
            else DWS2_ROWS(1);
        }
        if (j->epi) j->epi(j->epi_ctx, j->y, p * s->out_plane + ob0 * v->OW, 1, (ob1 - ob0) * v->OW, s->out_plane);
    }
}

/* scratch rows a band of `band` output rows reads */
static int64_t dws2_rows_of(const win2 *v, int64_t band) { return (band - 1) * v->sh + (v->KH - 1) * v->dh + 1; }

/* Q: KN_VL zeros, then room for the reads of whole vectors past OW and for the row's half */
static void dws2_geom(const win2 *v, int64_t *Q, int64_t *band) {
    const int64_t owr = (v->OW + DWS2_NV * KN_VL - 1) / (DWS2_NV * KN_VL) * (DWS2_NV * KN_VL);
    const int64_t L = max64(owr + (v->KW - 1) / 2 + 1, (v->W + 1) / 2);
    *Q = KN_VL + (L + KN_VL - 1) / KN_VL * KN_VL;
    int64_t b = v->OH;
    while (b > 1 && dws2_rows_of(v, b) * 2 * *Q > DWS2_SCRATCH_FLOATS) b = (b + 1) / 2;
    *band = b;
}

/* Stride 2 along the row with an undilated window, one output channel per input channel, rows of
 * two vectors or more (narrower planes: dw16, whose transpose is cheap there); KILN_DWS2=0/1
 * keeps this kernel out or takes it wherever it can run (tests, measurements). */
static bool dws2_suits(const conv_shape *s) {
    if (s->Cg != 1 || s->Mg != 1 || s->nsp > 2 || s->kk < 2) return false;
    const win2 v = win2_of(&s->w);
    /* the left pad within the KN_VL zeros; a whole split (2 KN_VL columns) inside the row */
    if (v.sw != 2 || v.dw != 1 || v.KW > 64 || v.pw > 2 * KN_VL - 1 || v.W < 2 * KN_VL || v.W >= ((int64_t)1 << 30) ||
        s->in_plane >= ((int64_t)1 << 40))
        return false;
    int64_t Q, band;
    dws2_geom(&v, &Q, &band);
    if (dws2_rows_of(&v, 1) * 2 * Q > 16 * DWS2_SCRATCH_FLOATS) return false;
    const char *e = getenv("KILN_DWS2");
    if (e) return e[0] == '1';
    /* measured (1 thread, against dw16 or the masked-tap loops): 3x3 wins (8ch 37x301 0.70-0.81,
     * 16ch 112x112 0.75-0.87, 72ch 56x56 0.91-0.95, 64ch 200x152 0.91), so do 1-D rows (32ch k5
     * L4001 0.82); 5x5 loses (128ch 100x76 1.29, 16ch 60x2000 1.56: its taps at odd offsets split
     * cache lines, not yet looked into), and so do 2-D rows over 512 wide (3x3 16ch 60x2000 1.35:
     * bands of 2 rows, read from L2), and so do images of more than 5 MB (3x3 s2 64ch 200x152
     * 1.03-1.14, 32ch 400x304 1.3: read from memory; the next band's rows prefetched did not
     * help; 16ch 240x240, 3.7 MB, 0.83-0.88) */
    return v.OW >= 2 * KN_VL && (v.KH == 1 || (s->kk <= 9 && v.OW <= DW16_MAX_OW)) &&
           s->C * s->in_plane <= 5 * 1024 * 1024 / (int64_t)sizeof(float);
}

/* tasks: (plane, slice of output rows) */
static void dws2_range(void *arg, int64_t begin, int64_t end) {
    const dws2_job *j = arg;
    const int64_t OH = j->v.OH, split = j->split;
    const size_t bytes = sizeof(float) * (size_t)(dws2_rows_of(&j->v, j->band) * 2 * j->Q);
    float *scratch = kn_aligned_alloc(64, bytes);
    if (!scratch) {
        __atomic_store_n(j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    memset(scratch, 0, bytes); /* the pads: every row writes the same places */
    for (int64_t t = begin; t < end; t++) {
        const int64_t p = t / split, part = t % split;
        dws2_plane(j, p, part * OH / split, (part + 1) * OH / split, scratch);
    }
    free(scratch);
}

static kiln_status dws2_run(kn_kernel_ctx *c, const conv_shape *s, const float *x, const float *w, const float *bias,
                            float *y, kn_conv_epilogue_fn epi, const void *epi_ctx) {
    int failed = 0;
    dws2_job j = {s, win2_of(&s->w), x, w, bias, y, epi, epi_ctx, 1, 0, 0, &failed};
    dws2_geom(&j.v, &j.Q, &j.band);
    /* few planes (8 channels) would leave threads idle: slices of rows, 4 tasks per thread */
    const int64_t planes = s->N * s->C, threads = kn_threadpool_size(c->pool);
    if (threads > 1 && planes < 4 * threads) j.split = max64(1, min64((4 * threads + planes - 1) / planes, j.v.OH / 4));
    const int64_t work = s->out_plane * s->kk / j.split;
    kn_parallel_for(c->pool, planes * j.split, work > 32768 ? 1 : 32768 / (work + 1) + 1, dws2_range, &j);
    return failed ? kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory") : KILN_OK;
}
#endif

static void dw_range(void *arg, int64_t begin, int64_t end) {
    const dw_job *j = arg;
    const conv_shape *s = j->s;
    const win2 *v = &j->v;
    for (int64_t p = begin; p < end; p++) {
        int64_t n = p / s->M, m = p % s->M, g = m / s->Mg;
        const float *xs = j->x + (n * s->C + g) * s->in_plane;
        const float *ws = j->w + m * s->kk;
        float *ys = j->y + p * s->out_plane;
#if KN_VL
        if (j->taps) {
            dw_plane_vec(xs, ws, ys, v, j->taps);
            if (j->epi) j->epi(j->epi_ctx, j->y, p * s->out_plane, 1, s->out_plane, s->out_plane);
            continue;
        }
#endif
        for (int64_t oh = 0; oh < v->OH; oh++) {
            float *yrow = ys + oh * v->OW;
            for (int64_t kh = 0; kh < v->KH; kh++) {
                int64_t ih = oh * v->sh - v->ph + kh * v->dh;
                if (ih < 0 || ih >= v->H) continue;
                const float *xrow = xs + ih * v->W;
                for (int64_t kw = 0; kw < v->KW; kw++) {
                    const float wv = ws[kh * v->KW + kw];
                    const int64_t off = kw * v->dw - v->pw;
                    /* ow with 0 <= ow*sw + off < W */
                    int64_t lo = off >= 0 ? 0 : (-off + v->sw - 1) / v->sw;
                    int64_t hi = v->W - 1 - off < 0 ? 0 : min64(v->OW, (v->W - 1 - off) / v->sw + 1);
                    if (v->sw == 1) {
                        const float *xr = xrow + off;
                        for (int64_t ow = lo; ow < hi; ow++) yrow[ow] += wv * xr[ow];
                    } else {
                        for (int64_t ow = lo; ow < hi; ow++) yrow[ow] += wv * xrow[ow * v->sw + off];
                    }
                }
            }
        }
        if (j->epi) j->epi(j->epi_ctx, j->y, p * s->out_plane, 1, s->out_plane, s->out_plane);
    }
}

/* The GEMM's epilogue blocks, as blocks of the convolution's output (bias already in). */
typedef struct conv_epi_ctx {
    kn_conv_epilogue_fn fn;
    const void *ctx;
    float *y;
} conv_epi_ctx;

static void conv_gemm_epilogue(const void *ctx, int64_t op, int64_t i0, int64_t j0, int64_t m, int64_t n, float *c,
                               int64_t ldc) {
    const conv_epi_ctx *e = ctx;
    (void)op, (void)i0, (void)j0;
    e->fn(e->ctx, e->y, c - e->y, m, n, ldc);
}

/* A convolution's weights in the GEMM's packed-A layout, one block per group. */
typedef struct conv_weight_pack {
    const float *w;
    int64_t G, Mg, K;
} conv_weight_pack;

static void make_packed_weights(const void *ctx, void *dst) {
    const conv_weight_pack *p = ctx;
    const size_t per = kn_sgemm_packed_a_floats(p->Mg, p->K);
    for (int64_t g = 0; g < p->G; g++) kn_sgemm_pack_a(p->w + g * p->Mg * p->K, p->K, false, p->Mg, p->K, (float *)dst + g * per);
}

/* The same weights for a GEMM that runs transposed (kn_sgemm_swaps): W^T packed as its B. */
static void make_packed_weights_t(const void *ctx, void *dst) {
    const conv_weight_pack *p = ctx;
    const size_t per = kn_sgemm_packed_b_floats(p->Mg, p->K);
    for (int64_t g = 0; g < p->G; g++)
        kn_sgemm_pack_b_full(p->w + g * p->Mg * p->K, p->K, true, p->Mg, p->K, (float *)dst + g * per);
}

#if KN_VL
/* ---- pointwise convolution on small planes ----
 * A 7x7 plane gives the GEMM 49 = 32 + 17 columns: vectors along the plane compute 64. Here the
 * lanes run along the output channels instead: a tile is PW_MB = 3 vectors of channels (48 or 24)
 * x PW_NB pixels (7 with AVX-512's 32 registers, 4 with AVX2's 16), 21 or 12 accumulators fed per
 * input channel by 3 loads of weights (packed once per session as [M/PW_MB][K][PW_MB]) and PW_NB
 * broadcasts of input pixels read in place; the tile is transposed into the output rows. */
#define PW_MB (3 * KN_VL)
#if KN_VREGS == 32
#define PW_NB 7
#else
#define PW_NB 4
#endif

typedef struct pw_wctx {
    const float *w;
    int64_t M, K;
} pw_wctx;

static void pw_make_weights(const void *ctx, void *dst) {
    const pw_wctx *k = ctx;
    float *d = dst;
    for (int64_t m0 = 0; m0 < k->M; m0 += PW_MB)
        for (int64_t c = 0; c < k->K; c++, d += PW_MB)
            for (int64_t r = 0; r < PW_MB; r++) d[r] = m0 + r < k->M ? k->w[(m0 + r) * k->K + c] : 0.0f;
}

/* Channels where the GEMM's column vectors are under 90% full, with a full tile of channels,
 * unless the GEMM runs the product transposed (kn_sgemm_swaps), channels in its lanes too: that is
 * faster (1 thread, Zen 5, 1x1 2048->512 on 7x7: 0.48 -> 0.43 ms alone, 12 such convolutions
 * with weights from memory 10-17% faster). */
static bool pw_suits(const conv_shape *s) {
    const int64_t n = s->out_plane;
    return s->G == 1 && s->M >= PW_MB && n > 16 && n <= 64 && (n + 15) / 16 * 16 * 9 > n * 10 &&
           !kn_sgemm_swaps(s->M, n, s->C);
}

typedef struct pw_job {
    const conv_shape *s;
    const float *x, *wp, *bias;
    float *y;
    kn_conv_epilogue_fn epi;
    const void *epi_ctx;
    int64_t groups; /* groups of pixel tiles each panel is split into */
} pw_job;

/* out[j*PW_MB + r] = bias + sum_c a[c][r] * b[c*ldb + j] for j < NB, r < PW_MB */
static inline __attribute__((always_inline)) void pw_tile(const float *a, const float *b, int64_t ldb, int64_t K,
                                                          const kn_vf bias[3], float *out, const int NB) {
    kn_vf acc[PW_NB][3];
#pragma GCC unroll 7
    for (int j = 0; j < NB; j++)
        for (int v = 0; v < 3; v++) acc[j][v] = bias[v];
    for (int64_t c = 0; c < K; c++, a += PW_MB, b += ldb) {
        const kn_vf a0 = kn_vf_loadu(a), a1 = kn_vf_loadu(a + KN_VL), a2 = kn_vf_loadu(a + 2 * KN_VL);
#pragma GCC unroll 7
        for (int j = 0; j < NB; j++) {
            const kn_vf bj = kn_vf_set1(b[j]);
            acc[j][0] = kn_vf_fmadd(a0, bj, acc[j][0]);
            acc[j][1] = kn_vf_fmadd(a1, bj, acc[j][1]);
            acc[j][2] = kn_vf_fmadd(a2, bj, acc[j][2]);
        }
    }
#pragma GCC unroll 7
    for (int j = 0; j < NB; j++)
        for (int v = 0; v < 3; v++) kn_vf_storeu(out + j * PW_MB + v * KN_VL, acc[j][v]);
}

/* Tasks are (image, panel of PW_MB output channels, group of pixel tiles). */
static void pw_range(void *arg, int64_t begin, int64_t end) {
    const pw_job *jb = arg;
    const conv_shape *s = jb->s;
    const int64_t N = s->out_plane, K = s->C, panels = (s->M + PW_MB - 1) / PW_MB, tiles = (N + PW_NB - 1) / PW_NB;
    float tile[PW_NB * PW_MB];
    for (int64_t t = begin; t < end; t++) {
        const int64_t n = t / (panels * jb->groups), m0 = (t / jb->groups % panels) * PW_MB, mr = min64(PW_MB, s->M - m0);
        const int64_t g = t % jb->groups, j_begin = g * tiles / jb->groups * PW_NB,
                      j_end = min64(N, (g + 1) * tiles / jb->groups * PW_NB);
        if (j_end <= j_begin) continue;
        const float *a = jb->wp + m0 * K, *b = jb->x + n * K * N;
        float *y = jb->y + (n * s->M + m0) * N;
        kn_vf bias[3];
        for (int v = 0; v < 3; v++)
            bias[v] = jb->bias ? kn_vf_maskz_loadu(kn_v_tail(mr - KN_VL * v), jb->bias + m0 + KN_VL * v)
                               : kn_vf_zero();
        for (int64_t j0 = j_begin; j0 < j_end; j0 += PW_NB) {
            const int nb = (int)min64(PW_NB, N - j0);
            if (nb > PW_NB) __builtin_unreachable(); /* tells GCC the transposes below stay in `tile` */
            switch (nb) {
#if PW_NB == 7
            case 7: pw_tile(a, b + j0, N, K, bias, tile, 7); break;
            case 6: pw_tile(a, b + j0, N, K, bias, tile, 6); break;
            case 5: pw_tile(a, b + j0, N, K, bias, tile, 5); break;
#endif
            case 4: pw_tile(a, b + j0, N, K, bias, tile, 4); break;
            case 3: pw_tile(a, b + j0, N, K, bias, tile, 3); break;
            case 2: pw_tile(a, b + j0, N, K, bias, tile, 2); break;
            default: pw_tile(a, b + j0, N, K, bias, tile, 1); break;
            }
            /* tile [pixel][channel] -> output rows [channel][pixel] */
            const kn_vmask keep = kn_v_tail(nb);
            for (int v = 0; v < 3 && KN_VL * v < mr; v++) {
                kn_vf o[KN_VL];
                kn_v_transpose(tile + KN_VL * v, PW_MB, nb, KN_VL, o);
                const int rows = (int)min64(KN_VL, mr - KN_VL * v);
                for (int q = 0; q < rows; q++) kn_vf_mask_storeu(y + (KN_VL * v + q) * N + j0, keep, o[q]);
            }
        }
        if (jb->epi) jb->epi(jb->epi_ctx, jb->y, (n * s->M + m0) * N + j_begin, mr, j_end - j_begin, N);
    }
}

/* The weights are packed once per session when they are a constant, else for this call (M*K
 * floats against M*K*N multiply-adds). */
static kiln_status pw_conv(kn_kernel_ctx *c, const conv_shape *s, const float *x, const float *w, const float *bias,
                           float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_is_input) {
    const int64_t panels = (s->M + PW_MB - 1) / PW_MB, K = s->C;
    const size_t bytes = sizeof(float) * (size_t)(panels * PW_MB * K);
    pw_wctx wc = {w, s->M, K};
    kn_const_layout lay = {3, {s->M, K, PW_MB, 0}};
    const float *wp = w_is_input ? kn_cpu_const_derived(c, 1, &lay, bytes, pw_make_weights, &wc) : NULL;
    float *own = NULL;
    if (!wp) {
        if (!(own = malloc(bytes ? bytes : 1))) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        pw_make_weights(&wc, own);
        wp = own;
    }
    /* two tasks a thread: where the images' panels are fewer, each panel's pixels split too (its
     * weights then read by each group): 512 output channels are 11 panels, 5 of 16 threads idle.
     * (ResNet-50's 1x1 2048 -> 512 on 7x7, which scaled 5x at 16 threads, runs the transposed
     * GEMM instead, kn_sgemm_swaps: bench/results/cpu-host-2026-12-06c.md) */
    const int64_t target = 2 * kn_threadpool_size(c->pool), tiles = (s->out_plane + PW_NB - 1) / PW_NB;
    const int64_t groups = s->N * panels >= target ? 1 : min64(tiles, (target + s->N * panels - 1) / (s->N * panels));
    pw_job j = {s, x, wp, bias, y, epi, epi_ctx, groups};
    const int64_t work = PW_MB * K * s->out_plane / groups;
    kn_parallel_for(c->pool, s->N * panels * groups, work > 262144 ? 1 : 262144 / (work + 1) + 1, pw_range, &j);
    free(own);
    return KILN_OK;
}
#endif

#if KN_VL
/* ---- few input taps (stems): direct, in registers ----
 * A convolution whose im2col depth C*KH*KW is small (an RGB stem: 27 for 3x3, 147 is too deep)
 * spent half its GEMM time packing that im2col (perf: 3x3 s2 3->16 on 224x224). Here each block
 * of KN_VL outputs along a row loads its K input vectors once (masked loads, stride 2 by
 * deinterleaving two loads, gathers at the borders) and every output channel is K FMAs on them,
 * 8 channels at a time in registers. Undilated rows, strides 1 and 2, one group. */
#define SK_MAX 32

typedef struct sk_job {
    const conv_shape *s;
    win2 v;
    const float *x, *w, *bias;
    float *y;
    int64_t bands;
    kn_conv_epilogue_fn epi;
    const void *epi_ctx;
} sk_job;

static bool sk_suits(const conv_shape *s) {
    if (s->G != 1 || s->nsp > 2 || s->Cg * s->kk > SK_MAX || s->M < 8) return false;
    const win2 v = win2_of(&s->w);
    return v.dw == 1 && v.sw <= 2 && v.OW >= 16 && v.W < (1 << 24) && s->in_plane < ((int64_t)1 << 30);
}

static void sk_range(void *arg, int64_t begin, int64_t end) {
    const sk_job *j = arg;
    const conv_shape *s = j->s;
    const win2 *v = &j->v;
    const int64_t K = s->Cg * s->kk, M = s->M, OW = v->OW;
    const kn_vi even = kn_vi_iota(0, 2), lane = kn_vi_iota(0, 1);
    kn_vf xv[SK_MAX];
    for (int64_t t = begin; t < end; t++) {
        const int64_t n = t / j->bands, band = t % j->bands;
        const int64_t oh0 = band * v->OH / j->bands, oh1 = (band + 1) * v->OH / j->bands;
        const float *xn = j->x + n * s->C * s->in_plane;
        float *yn = j->y + n * M * s->out_plane;
        for (int64_t oh = oh0; oh < oh1; oh++)
            for (int64_t ow = 0; ow < OW; ow += KN_VL) {
                const kn_vmask om = kn_v_tail(OW - ow);
                const int64_t iw0 = ow * v->sw - v->pw;
                /* input columns of the lanes for kw = 0: iw0 + lane * sw */
                const kn_vi cols = kn_vi_add(kn_vi_set1((int)iw0),
                                                      kn_vi_mullo(lane, kn_vi_set1((int)v->sw)));
                int k = 0;
                for (int64_t c = 0; c < s->Cg; c++)
                    for (int64_t kh = 0; kh < v->KH; kh++) {
                        const int64_t ih = oh * v->sh - v->ph + kh * v->dh;
                        const bool row_ok = ih >= 0 && ih < v->H;
                        const float *row = xn + c * s->in_plane + (row_ok ? ih : 0) * v->W;
                        for (int64_t kw = 0; kw < v->KW; kw++, k++) {
                            if (!row_ok) {
                                xv[k] = kn_vf_zero();
                                continue;
                            }
                            const int64_t first = iw0 + kw, last = first + (KN_VL - 1) * v->sw;
                            if (first >= 0 && last + (v->sw == 2 ? 1 : 0) < v->W) {
                                xv[k] = v->sw == 1 ? kn_vf_loadu(row + first)
                                                   : kn_vf_perm2(kn_vf_loadu(row + first), even,
                                                                            kn_vf_loadu(row + first + KN_VL));
                            } else {
                                const kn_vi ci = kn_vi_add(cols, kn_vi_set1((int)kw));
                                const kn_vmask in = om & kn_vi_cmpge_mask(ci, kn_vi_zero()) &
                                                     kn_vi_cmplt_mask(ci, kn_vi_set1((int)v->W));
                                xv[k] = kn_vf_mask_gather(in, ci, row);
                            }
                        }
                    }
                float *yo = yn + oh * OW + ow;
                int64_t m = 0;
                for (; m + 8 <= M; m += 8) {
                    kn_vf acc[8];
                    for (int r = 0; r < 8; r++) acc[r] = kn_vf_set1(j->bias ? j->bias[m + r] : 0.0f);
                    const float *wm = j->w + m * K;
                    for (int q = 0; q < K; q++)
                        for (int r = 0; r < 8; r++) acc[r] = kn_vf_fmadd(kn_vf_set1(wm[r * K + q]), xv[q], acc[r]);
                    for (int r = 0; r < 8; r++) kn_vf_mask_storeu(yo + (m + r) * s->out_plane, om, acc[r]);
                }
                for (; m < M; m++) {
                    kn_vf acc = kn_vf_set1(j->bias ? j->bias[m] : 0.0f);
                    for (int q = 0; q < K; q++) acc = kn_vf_fmadd(kn_vf_set1(j->w[m * K + q]), xv[q], acc);
                    kn_vf_mask_storeu(yo + m * s->out_plane, om, acc);
                }
            }
        if (j->epi && oh1 > oh0)
            j->epi(j->epi_ctx, j->y, n * M * s->out_plane + oh0 * OW, M, (oh1 - oh0) * OW, s->out_plane);
    }
}

static void sk_conv(kn_kernel_ctx *c, const conv_shape *s, const float *x, const float *w, const float *bias, float *y,
                    kn_conv_epilogue_fn epi, const void *epi_ctx) {
    sk_job j = {s, win2_of(&s->w), x, w, bias, y, 1, epi, epi_ctx};
    /* tasks are (image, band of output rows): about 4 per thread */
    const int64_t threads = kn_threadpool_size(c->pool);
    j.bands = max64(1, min64(j.v.OH, (4 * threads + s->N - 1) / s->N));
    const int64_t work = s->M * s->Cg * s->kk * s->out_plane / j.bands + 1;
    kn_parallel_for(c->pool, s->N * j.bands, work > 65536 ? 1 : 65536 / work + 1, sk_range, &j);
}
#endif

#if KN_VL
/* ---- few input channels, deep windows (the 7x7 RGB stem): output channels in the lanes ----
 * The 7x7 s2 3->64 stem has an im2col depth of 147, too deep for the few-taps path above, and the
 * implicit GEMM spent a quarter of its time packing that im2col (perf on 1x3x224x224: packing
 * 26%, micro-kernel 71%, 11% of whose rows were padding: 64 channels in panels of 12). Here the
 * KN_VL lanes (isa_vec.h) run along the output channels: a tile of MV x KN_VL channels by P pixels of
 * one output row (CL_ACC accumulators: AVX-512 4 x 6 or 2 x 12, AVX2 4 x 3 or 2 x 6) takes, per tap,
 * MV loads of weights (packed once per session as [M / KN_VL MV][C*KH*KW][KN_VL MV]) and P broadcasts of input pixels read from a zero-padded copy of
 * the input (no bounds checks anywhere); each segment of up to 60 pixels lands channels-last in a
 * buffer on the stack and is transposed into the output rows. Strides 2 to 4, any dilation and
 * padding, one group, up to 4 input channels, output channels a multiple of 32. */
#define CL_SEG 60
#define CL_ACC (KN_VREGS == 32 ? 24 : 12) /* accumulators of a tile */
#define CL_PMAX (CL_ACC / 2)              /* pixels of a tile of two vectors of channels */
#define CL_PMIN (CL_PMAX / 2 + 1)

/* 3x3 convolutions with many channels, stride 2 (ResNet's and YOLO's downsamplers) or small planes
 * at stride 1 that Winograd leaves (7x7): the same kernel, two vectors of channels (32 or 16) by a row
 * tile of CL_PMIN..CL_PMAX pixels
 * (cl_p_of: the width that wastes fewest columns; cl3_tile: all addresses constant offsets), every
 * tap a broadcast of the input read in place (cl_range) or, when the weights exceed the caches,
 * from a padded copy per task over ranges of channel blocks (cl_range_mfirst). Against the
 * implicit GEMM: bench/results/cpu-conv3x3-2026-12-03.md. */
#define CL3_MAX_OW 4096
#define CL3_CB 32 /* input channels per partial sum in cl3_tile */
#define CLB (2 * KN_VL) /* output channels of a cl3_tile */
#define CL3_MAX_WBYTES (4 << 20) /* larger weights: the GEMM (cl3_suits), below CL3_BIG_W_THREADS threads */
#define CL3_BIG_W_THREADS 4
/* the kernel row's three taps unrolled (with AVX2's 16 registers only since cl3_bcast: before it
 * that spilled accumulators, 3x3 s2 128->128 on 28x28 12% slower than the loop) */
#define CL3_UNROLL_KW _Pragma("GCC unroll 3")

static bool cl3_suits(const conv_shape *s, int64_t threads) {
    if (s->G != 1 || s->nsp != 2 || s->M % 32 || s->C < 8 || s->w.kernel[0] != 3 || s->w.kernel[1] != 3) return false;
    const win2 v = win2_of(&s->w);
    /* dilation 2 at stride 1 only (cl_tile_any's instances) */
    if (v.dh != v.dw || v.dw > 2 || (v.dw == 2 && v.sw != 1) || v.sh != v.sw || v.sw > 2 || v.OW < 7 ||
        v.OW > CL3_MAX_OW || v.W >= (1 << 20) || v.H >= (1 << 20))
        return false;
    const char *e = getenv("KILN_CL3");
    if (e) return e[0] == '1';
    /* stride 2; stride 1 on the small planes Winograd leaves (fewer than 16 tiles: 7x7), 16 channels
     * or more. 1 thread, CPU time, min of 4 alternating rounds (busy machine), GEMM -> this:
     * s2 128->128 28x28 0.305 -> 0.276 ms, 512->512 14x14 1.06 -> 0.95, 16->32 320x320 1.93 -> 1.30,
     * s1 512->512 7x7 0.99 -> 0.92 */
    if (v.dw == 2) return true;
    /* Weights over 4 MB (3x3 512 -> 512) go to the GEMM at few threads, which runs these small
     * planes transposed: on the 2-core Sapphire Rapids guest (2 MB L2 a core), ResNet-50 per node,
     * GEMM / this: 1 thread s1 512->512 7x7 0.83-0.86, s2 512->512 14x14 0.78-0.82; 2 threads
     * 0.91-0.94, 0.91-0.92. s2 256->256 28x28 (2.4 MB) 1.01-1.07 at 1 thread, 0.95 at 2, and s2
     * 128->128 56x56 (0.6 MB) 1.09 / 1.07 stay here. From 4 threads the GEMM's tiles of 49
     * columns scale worse than this kernel's channel blocks: 16-core host, ResNet-50 per node,
     * layer4's three 512->512 at 4 threads 0.60 ms each against 0.47-0.50, at 8 0.43 against
     * 0.24, at 16 0.34-0.35 against 0.12-0.19 (cpu-host-2026-12-06c.md) */
    if (threads < CL3_BIG_W_THREADS && (double)s->M * (double)s->C * 9.0 * sizeof(float) > (double)CL3_MAX_WBYTES)
        return false;
    /* AVX2 too on output rows of 16+ columns, since its tiles' registers (cl3_bcast) and edge
     * padding (cl_pad_chan) were fixed; the GEMM's im2col was 20% of 3x3 s2 128->128 on 56x56
     * (perf). 2-core Zen 3 EPYC, 1 thread, kiln bench min, GEMM / rk_wide -> this: s2 128->128 56x56
     * 2.94 -> 2.60 ms (ORT 2.56), 64->64 112x112 (rk_wide) 3.17 -> 2.59 (ORT 2.67), 64->128
     * 112x112 6.0 -> 5.5, 32->32 112x112 (rk_wide) 0.815 -> 0.65, 32->64 80x80 0.76 -> 0.635 */
    if (v.sw == 2) return true;
    return s->C >= 16 && s->N * ((v.OH + 3) / 4) * ((v.OW + 3) / 4) < 16;
}

/* Pixels per tile for a row of OW outputs with two vectors of channels a tile: CL_PMIN..CL_PMAX
 * (AVX-512 7..12, AVX2 4..6), the fewest columns computed past the row, then the widest. 13 and 14 (28 accumulators) spilled half of them to the
 * stack once the nine taps were unrolled: 1 thread, CPU time, s2 128->128 28x28 0.292 ms with
 * tiles of 14, 0.237 with 7 (ORT 0.245); s2 256->256 28x28 1.17 -> 0.85 (the GEMM 1.06). */
static int cl_p_of(int64_t OW) {
    const char *e = getenv("KILN_CL3_PMAX");
    const int pmax = e && atoi(e) >= CL_PMIN && atoi(e) <= CL_PMAX ? atoi(e) : CL_PMAX;
    int best = pmax;
    int64_t best_cols = (OW + pmax - 1) / pmax * pmax;
    for (int p = pmax - 1; p >= CL_PMIN; p--) {
        const int64_t cols = (OW + p - 1) / p * p;
        if (cols < best_cols) best = p, best_cols = cols;
    }
    return best;
}

static bool cl_suits(const conv_shape *s, int64_t threads) {
    if (cl3_suits(s, threads)) return true;
    if (s->G != 1 || s->nsp != 2 || s->Cg * s->kk <= SK_MAX || s->C > 4 || s->M % 32 || s->M > 1024) return false;
    const char *e = getenv("KILN_CL"); /* KILN_CL=0: the few-channel stems to the GEMM (measurements) */
    if (e && e[0] == '0') return false;
    const win2 v = win2_of(&s->w);
    /* AVX2, stride 2 on rows of 16+ outputs: the GEMM, its im2col by plain loads (even_load). 2-core
     * AVX2 EPYC, 1 thread, CPU time, 7x7 s2 3->64 on 224x224: GEMM / this 0.93 (op_ab, KILN_CL=0) */
    if (KN_VREGS < 32 && v.sw == 2 && v.sh == 2 && v.dw == 1 && v.OW >= 2 * KN_VL && !(e && e[0] == '1')) return false;
    /* strided: at stride 1 the im2col rows are plain loads and the GEMM is as fast (5x5 s1 3->64) */
    return v.OW >= 8 && v.sw >= 2 && v.sw <= 4 && v.sh <= 4 && v.W < (1 << 20) && v.H < (1 << 20);
}

typedef struct cl_wctx {
    const float *w;
    int64_t M, K, MB; /* MB: channels per block, KN_VL * MV */
} cl_wctx;

static void cl_make_weights(const void *ctx, void *dst) {
    const cl_wctx *k = ctx;
    float *d = dst;
    for (int64_t m0 = 0; m0 < k->M; m0 += k->MB)
        for (int64_t q = 0; q < k->K; q++, d += k->MB)
            for (int64_t r = 0; r < k->MB; r++) d[r] = k->w[(m0 + r) * k->K + q];
}

typedef struct cl_job {
    const conv_shape *s;
    win2 v;
    const float *xp; /* padded input: N*C planes of Hp x Wp, the image at (ph, pw) */
    int64_t Hp, Wp;
    const float *wp, *bias;
    float *y;
    int MV, P;
    int64_t bands;
    kn_conv_epilogue_fn epi;
    const void *epi_ctx;
    /* inplace (many channels): no padded copy of the whole input (its serial copy was a fifth of
     * the time on 16 x 320 x 320): cl_range reads x in place and pads only the tiles at the edges */
    const float *x;
    bool inplace;
    int *failed;
    bool mfirst; /* bands are ranges of channel blocks (cl_range_mfirst) */
    int64_t rbands; /* mfirst: bands of output rows within each channel band */
    bool clamp;  /* the output clamped to [lo, hi] as it is stored (a Relu or Clip; no epilogue then) */
    float lo, hi;
    int64_t pad_bands; /* cl_pad_range: bands of rows a plane */
} cl_job;

/* out[p*MB + KN_VL v + r] = bias + sum over taps of w[tap][KN_VL v + r] * x(tap, pixel p) for p < P;
 * x0: the padded input at channel 0 and the first tap of pixel 0. */
static inline __attribute__((always_inline)) void cl_tile(const cl_job *j, const float *x0, const float *w,
                                                          const kn_vf *bias, float *out, const int MV, const int P) {
    const conv_shape *s = j->s;
    const win2 *v = &j->v;
    const int64_t plane = j->Hp * j->Wp, sw = v->sw, MB = KN_VL * MV;
    kn_vf acc[12][4];
#pragma GCC unroll 12
    for (int p = 0; p < P; p++)
#pragma GCC unroll 4
        for (int q = 0; q < MV; q++) acc[p][q] = bias[q];
    for (int64_t c = 0; c < s->C; c++)
        for (int64_t kh = 0; kh < v->KH; kh++) {
            const float *row = x0 + c * plane + kh * v->dh * j->Wp;
            for (int64_t kw = 0; kw < v->KW; kw++, w += MB) {
                const float *px = row + kw * v->dw;
                kn_vf wv[4];
#pragma GCC unroll 4
                for (int q = 0; q < MV; q++) wv[q] = kn_vf_loadu(w + KN_VL * q);
#pragma GCC unroll 12
                for (int p = 0; p < P; p++) {
                    const kn_vf b = kn_vf_set1(px[p * sw]);
#pragma GCC unroll 4
                    for (int q = 0; q < MV; q++) acc[p][q] = kn_vf_fmadd(wv[q], b, acc[p][q]);
                }
            }
        }
#pragma GCC unroll 12
    for (int p = 0; p < P; p++)
#pragma GCC unroll 4
        for (int q = 0; q < MV; q++) kn_vf_storeu(out + p * MB + KN_VL * q, acc[p][q]);
}

/* AVX2 (16 registers): GCC kept each broadcast input for the taps that share it (stride 2: tap kw
 * = 2 of pixel p is tap 0 of pixel p + 1) and folded weight loads into the FMAs, which spilled
 * accumulators to the stack (perf: a third of the tile's instructions were moves and reloads).
 * Each broadcast its own instruction (volatile: not merged) and the tap's two weight vectors
 * pinned in registers: 2P accumulators, 2 weights and one broadcast live. */
#if KN_VREGS < 32 && KN_VL == 8
#define CL3_PIN(x) __asm__("" : "+x"(x))
static inline __attribute__((always_inline)) kn_vf cl3_bcast(const float *p) {
    kn_vf b;
    __asm__ volatile("vbroadcastss %1, %0" : "=x"(b) : "m"(*p));
    return b;
}
#else
#define CL3_PIN(x) (void)0
static inline __attribute__((always_inline)) kn_vf cl3_bcast(const float *p) { return kn_vf_set1(*p); }
#endif

/* cl_tile for 3x3 windows, two vectors of channels (CLB), stride SW, dilation D: every address a constant
 * offset from three row pointers (the generic tile kept 14 pixel offsets in registers and
 * spilled). */
static inline __attribute__((always_inline)) void cl3_tile(const cl_job *j, const float *x0, const float *w,
                                                           const kn_vf *bias, float *out, const int P, const int SW,
                                                           const int D) {
    const int64_t plane = j->Hp * j->Wp, Wp = j->Wp, C = j->s->C;
    kn_vf acc[12][2];
    /* blocks of CL3_CB channels, each summed from zero and added to the running total in `out`:
     * one chain of 9 C products rounded 10x more than the GEMM's slices of 256 (512 -> 512 on
     * 7x7: max error relative to the largest output 3.4e-6, ORT 2.3e-7) */
    for (int64_t cb = 0; cb < C; cb += CL3_CB) {
#pragma GCC unroll 12
    for (int p = 0; p < P; p++)
        acc[p][0] = cb ? kn_vf_zero() : bias[0], acc[p][1] = cb ? kn_vf_zero() : bias[1];
    for (int64_t c = cb; c < min64(C, cb + CL3_CB); c++, w += 9 * CLB) {
        const float *r0 = x0 + c * plane;
#pragma GCC unroll 3
        for (int kh = 0; kh < 3; kh++) {
            const float *row = r0 + kh * D * Wp;
            CL3_UNROLL_KW
            for (int kw = 0; kw < 3; kw++) {
                kn_vf w0 = kn_vf_loadu(w + (kh * 3 + kw) * CLB), w1 = kn_vf_loadu(w + (kh * 3 + kw) * CLB + KN_VL);
                CL3_PIN(w0);
                CL3_PIN(w1);
#pragma GCC unroll 12
                for (int p = 0; p < P; p++) {
                    const kn_vf b = cl3_bcast(row + kw * D + p * SW);
                    acc[p][0] = kn_vf_fmadd(w0, b, acc[p][0]);
                    acc[p][1] = kn_vf_fmadd(w1, b, acc[p][1]);
                }
            }
        }
    }
    if (cb) {
#pragma GCC unroll 12
        for (int p = 0; p < P; p++)
            acc[p][0] = kn_vf_add(acc[p][0], kn_vf_loadu(out + p * CLB)),
            acc[p][1] = kn_vf_add(acc[p][1], kn_vf_loadu(out + p * CLB + KN_VL));
    }
#pragma GCC unroll 12
    for (int p = 0; p < P; p++) kn_vf_storeu(out + p * CLB, acc[p][0]), kn_vf_storeu(out + p * CLB + KN_VL, acc[p][1]);
    }
}

#define CL3_CASE(PP)                                                                                               \
    case PP:                                                                                                       \
        if (j->v.dw == 2) cl3_tile(j, x0, w, bias, out, PP, 1, 2);                                                 \
        else if (j->v.sw == 1) cl3_tile(j, x0, w, bias, out, PP, 1, 1);                                            \
        else cl3_tile(j, x0, w, bias, out, PP, 2, 1);                                                              \
        return;

/* cl_tile with the job's tile shape as constants. */
static void cl_tile_any(const cl_job *j, const float *x0, const float *w, const kn_vf *bias, float *out) {
    if (j->MV == 4) {
        cl_tile(j, x0, w, bias, out, 4, CL_ACC / 4);
        return;
    }
    if (j->inplace) { /* cl3_suits: 3x3, stride 1 or 2, dilation 1 (or 2 at stride 1) */
        switch (j->P) {
#if KN_VREGS < 32
            CL3_CASE(4)
            CL3_CASE(5)
            CL3_CASE(6)
#else
            CL3_CASE(7)
            CL3_CASE(8)
            CL3_CASE(9)
            CL3_CASE(10)
            CL3_CASE(11)
            CL3_CASE(12)
#endif
        default: break;
        }
    }
    switch (j->P) {
#if KN_VREGS < 32
    case 4: cl_tile(j, x0, w, bias, out, 2, 4); break;
    case 5: cl_tile(j, x0, w, bias, out, 2, 5); break;
    default: cl_tile(j, x0, w, bias, out, 2, 6); break;
#else
    case 7: cl_tile(j, x0, w, bias, out, 2, 7); break;
    case 8: cl_tile(j, x0, w, bias, out, 2, 8); break;
    case 9: cl_tile(j, x0, w, bias, out, 2, 9); break;
    case 10: cl_tile(j, x0, w, bias, out, 2, 10); break;
    case 11: cl_tile(j, x0, w, bias, out, 2, 11); break;
    default: cl_tile(j, x0, w, bias, out, 2, 12); break;
#endif
    }
}

/* Tasks are (image, band of output rows). */
/* Pads the input columns [c0, c0 + cols) of rows [ih0, ih0 + rows) of channel ch of image n into
 * dst ([rows][cols], zero outside the image). Plain loads and stores: with AVX2's masked ones
 * (vmaskmovps, a store many times the cost of a plain one on Zen 3) this was 16% of 3x3 s2
 * 128->128 on 28x28 (perf, 2-core EPYC, 1 thread). A row's stores may run up to KN_VL - 1 floats
 * past its end, into the next row, which is written after it; the last row's run past dst only
 * where `slack` (the caller's buffer has KN_VL floats more), else they end exactly (masked).
 * AVX-512's masked stores cost what plain ones do: every row there is stored exactly, as before
 * the plain form (CL_PAD_MASKED), which has not run on an AVX-512 CPU yet: a ResNet-50 run at 16
 * threads on the 16-core host aborted in glibc's heap checks with it in the tree, not reproduced
 * on AVX2 (bench/results/cpu-host-2026-12-07b.md). */
#define CL_PAD_MASKED (KN_VREGS == 32)
static void cl_pad_chan(const cl_job *j, int64_t n, int64_t ch, int64_t ih0, int64_t rows, int64_t c0, int64_t cols,
                        float *dst, bool slack) {
    const win2 *v = &j->v;
    const float *xc = j->x + (n * j->s->C + ch) * v->H * v->W;
    const kn_vf z = kn_vf_zero();
    /* the image's columns are [a, b) of each row of dst */
    const int64_t a = min64(max64(-c0, 0), cols), b = max64(a, min64(v->W - c0, cols));
    for (int64_t r = 0; r < rows; r++) {
        float *row = dst + r * cols;
        const int64_t ih = ih0 + r;
        const bool in = ih >= 0 && ih < v->H && b > a;
        const float *xr = xc + (in ? ih : 0) * v->W + c0;
        if (CL_PAD_MASKED || (!slack && r == rows - 1)) {
            for (int64_t q = 0; q < cols; q += KN_VL) {
                const kn_vmask keep = kn_v_tail(cols - q);
                const kn_vmask m = in ? (kn_vmask)(keep & kn_v_range(a - q, b - q)) : 0;
                kn_vf_mask_storeu(row + q, keep, kn_vf_maskz_loadu(m, xr + q));
            }
            continue;
        }
        if (!in) {
            for (int64_t q = 0; q < cols; q += KN_VL) kn_vf_storeu(row + q, z);
            continue;
        }
        for (int64_t q = 0; q < a; q += KN_VL) kn_vf_storeu(row + q, z); /* left padding (its run rewritten below) */
        int64_t q = a;
        for (; q + KN_VL <= b; q += KN_VL) kn_vf_storeu(row + q, kn_vf_loadu(xr + q));
        if (q < b) {
            /* the last columns: the vector ending at b where the row holds one (columns stored
             * twice), else a masked load whose other lanes are padding */
            if (b - a >= KN_VL) kn_vf_storeu(row + b - KN_VL, kn_vf_loadu(xr + b - KN_VL));
            else kn_vf_storeu(row + q, kn_vf_maskz_loadu(kn_v_tail(b - q), xr + q));
        }
        for (q = b; q < cols; q += KN_VL) kn_vf_storeu(row + q, z); /* right padding */
    }
}

/* every channel ([C][rows][cols]); dst has KN_VL floats of slack past its end */
static void cl_pad_block(const cl_job *j, int64_t n, int64_t ih0, int64_t rows, int64_t c0, int64_t cols, float *dst) {
    for (int64_t ch = 0; ch < j->s->C; ch++) cl_pad_chan(j, n, ch, ih0, rows, c0, cols, dst + ch * rows * cols, true);
}

/* cl_pad_block for an edge tile of rows inside the image (ih0 >= 0, ih0 + rows <= H) with AVX-512's
 * masks: the lanes each vector keeps and reads are the same for every channel and row, so they
 * are made once here and the loop is a masked load and store a vector. cl_pad_chan made them per
 * row (its in/out tests, bounds and masks per call, 256 calls a row): 8% of 3x3 s2 128->128 on
 * 57x57 at 1 thread (the same run reading the edge tiles unpadded: 1.97 -> 1.81 ms). false (dst
 * untouched): more than 4 vectors a row. */
static bool cl_pad_edge(const cl_job *j, int64_t n, int64_t ih0, int64_t rows, int64_t c0, int64_t cols, float *dst) {
    const win2 *v = &j->v;
    const int64_t nq = (cols + KN_VL - 1) / KN_VL;
    if (nq > 4) return false;
    const int64_t a = min64(max64(-c0, 0), cols), b = max64(a, min64(v->W - c0, cols)), HW = v->H * v->W;
    kn_vmask keep[4] = {0, 0, 0, 0}, m[4] = {0, 0, 0, 0};
    for (int64_t q = 0; q < nq; q++) {
        keep[q] = kn_v_tail(cols - q * KN_VL);
        m[q] = (kn_vmask)(keep[q] & kn_v_range(a - q * KN_VL, b - q * KN_VL));
    }
    /* c0 + lanes outside [a, b) are never read: the address itself may lie before the row */
    const float *xs = j->x + n * j->s->C * HW + ih0 * v->W + c0;
    for (int64_t ch = 0; ch < j->s->C; ch++)
        for (int64_t r = 0; r < rows; r++) {
            const float *sr = xs + ch * HW + r * v->W;
            float *d = dst + (ch * rows + r) * cols;
            kn_vf_mask_storeu(d, keep[0], kn_vf_maskz_loadu(m[0], sr));
            if (nq > 1) kn_vf_mask_storeu(d + KN_VL, keep[1], kn_vf_maskz_loadu(m[1], sr + KN_VL));
            if (nq > 2) kn_vf_mask_storeu(d + 2 * KN_VL, keep[2], kn_vf_maskz_loadu(m[2], sr + 2 * KN_VL));
            if (nq > 3) kn_vf_mask_storeu(d + 3 * KN_VL, keep[3], kn_vf_maskz_loadu(m[3], sr + 3 * KN_VL));
        }
    return true;
}

/* The whole padded input (N*C planes of Hp x Wp, the image at (ph, pw)), planes [begin, end) of it:
 * made once for all the tasks, on the pool (each task padding its image itself did it once per
 * task: 4 times at 2 threads for 3x3 s2 256->256 on 28x28; a serial copy before the loop was the
 * stem's only part on one thread) */
static void cl_pad_range(void *arg, int64_t begin, int64_t end) {
    const cl_job *j = arg;
    /* items (image, band of rows, channel), bands outer within an image: a thread pads the rows
     * its bands of the convolution read first (the stem's 3 planes were 3 items: at 2 threads one
     * thread padded two while the other waited) */
    const int64_t C = j->s->C, nb = j->pad_bands;
    for (int64_t t = begin; t < end; t++) {
        const int64_t n = t / (nb * C), b = t / C % nb, ch = t % C, p = n * C + ch;
        const int64_t r0 = b * j->Hp / nb, r1 = (b + 1) * j->Hp / nb;
        if (r1 > r0)
            cl_pad_chan(j, n, ch, r0 - j->v.ph, r1 - r0, -j->v.pw, j->Wp, (float *)j->xp + p * j->Hp * j->Wp + r0 * j->Wp,
                        false); /* the next item may be another thread's */
    }
}

/* A segment's tiles, seg [pixel][channel] (sn pixels of MB channels), into the output rows
 * [channel][pixel] at y (channels a plane apart). */
static inline __attribute__((always_inline)) void cl_store_seg_impl(const float *seg, int64_t MB, int MV, int64_t sn,
                                                                    float *y, int64_t plane, const bool clamp, float lo,
                                                                    float hi) {
    const kn_vf vlo = kn_vf_set1(lo), vhi = kn_vf_set1(hi);
    for (int64_t r0 = 0; r0 < sn; r0 += KN_VL) {
        const int rows = (int)min64(KN_VL, sn - r0);
        const kn_vmask keep = kn_v_tail(rows);
        for (int q = 0; q < MV; q++) {
            kn_vf o[KN_VL];
            kn_v_transpose(seg + r0 * MB + KN_VL * q, MB, rows, KN_VL, o);
            float *yo = y + KN_VL * q * plane + r0;
            /* min(hi, max(lo, v)): the epilogue's Relu and Clip, NaN kept */
            for (int c = 0; c < KN_VL; c++)
                kn_vf_mask_storeu(yo + c * plane, keep, clamp ? kn_vf_min(vhi, kn_vf_max(vlo, o[c])) : o[c]);
        }
    }
}

/* (clamped to [j->lo, j->hi] where j->clamp) */
static void cl_store_seg(const cl_job *j, const float *seg, int64_t MB, int MV, int64_t sn, float *y, int64_t plane) {
    if (j->clamp) cl_store_seg_impl(seg, MB, MV, sn, y, plane, true, j->lo, j->hi);
    else cl_store_seg_impl(seg, MB, MV, sn, y, plane, false, 0.0f, 0.0f);
}

/* Tasks are (image, band of output rows). */
static void cl_range(void *arg, int64_t begin, int64_t end) {
    const cl_job *j = arg;
    const conv_shape *s = j->s;
    const win2 *v = &j->v;
    const int MV = j->MV, P = j->P, SEG = CL_SEG / P * P;
    const int64_t MB = KN_VL * MV, K = s->C * s->kk, OW = v->OW, plane = s->out_plane;
    float seg[(CL_SEG + 14) * 64] __attribute__((aligned(64)));
    /* in place (many channels): tiles whose window lies inside the image read it where it is;
     * a row whose window crosses the top or bottom is padded whole into the thread's buffer,
     * and in the other rows the tiles that cross the left or right edge are padded one by one
     * (ew columns each) */
    const int64_t kh_ext = (v->KH - 1) * v->dh + 1, ew = (P - 1) * v->sw + (v->KW - 1) * v->dw + 1;
    const int64_t ntile_row = (min64(SEG, OW) + P - 1) / P + OW / SEG * (SEG / P); /* tiles a row, upper bound */
    float *own = NULL, *buf = NULL;
    size_t row_floats = 0;
    if (j->inplace) {
        row_floats = (size_t)(s->C * kh_ext * j->Wp);
        const size_t bf = row_floats + (size_t)(ntile_row * s->C * kh_ext * ew) + KN_VL; /* cl_pad_block's slack */
        buf = kn_conv_thread_buffer(bf);
        if (!buf) buf = own = malloc(sizeof(float) * bf);
        if (!buf) {
            __atomic_store_n(j->failed, 1, __ATOMIC_RELAXED);
            return;
        }
    }
    cl_job rowj = *j, inj = *j, edgej = *j;
    rowj.Hp = kh_ext, edgej.Hp = kh_ext, edgej.Wp = ew, inj.Hp = v->H, inj.Wp = v->W;
    /* per tile of a row: where it reads and with which job (cl3_suits: at most CL3_MAX_OW / CL_PMIN) */
    const float *tsrc[CL3_MAX_OW / CL_PMIN + 1];
    const cl_job *tjob[CL3_MAX_OW / CL_PMIN + 1];
    for (int64_t t = begin; t < end; t++) {
        const int64_t n = t / j->bands, band = t % j->bands;
        const int64_t oh0 = band * v->OH / j->bands, oh1 = (band + 1) * v->OH / j->bands;
        const float *xn = j->inplace ? NULL : j->xp + n * s->C * j->Hp * j->Wp;
        float *yn = j->y + n * s->M * plane;
        for (int64_t oh = oh0; oh < oh1; oh++) {
            if (j->inplace) {
                const int64_t ih0 = oh * v->sh - v->ph;
                const bool inside = ih0 >= 0 && ih0 + kh_ext <= v->H;
                if (!inside) cl_pad_block(j, n, ih0, kh_ext, -v->pw, j->Wp, buf);
                int64_t k = 0, e = 0;
                for (int64_t s0 = 0; s0 < OW; s0 += SEG)
                    for (int64_t p0 = 0; p0 < min64(SEG, OW - s0); p0 += P, k++) {
                        const int64_t col = (s0 + p0) * v->sw - v->pw; /* first input column */
                        if (!inside) {
                            tsrc[k] = buf + (s0 + p0) * v->sw;
                            tjob[k] = &rowj;
                        } else if (col >= 0 && col + ew <= v->W) {
                            tsrc[k] = j->x + (n * s->C * v->H + ih0) * v->W + col;
                            tjob[k] = &inj;
                        } else {
                            float *eb = buf + row_floats + (size_t)(e++ * s->C * kh_ext * ew);
                            if (!CL_PAD_MASKED || !cl_pad_edge(j, n, ih0, kh_ext, col, ew, eb))
                                cl_pad_block(j, n, ih0, kh_ext, col, ew, eb);
                            tsrc[k] = eb;
                            tjob[k] = &edgej;
                        }
                    }
            }
            for (int64_t m0 = 0; m0 < s->M; m0 += MB) {
                const float *w = j->wp + m0 * K;
                kn_vf bias[4];
                for (int q = 0; q < MV; q++)
                    bias[q] = j->bias ? kn_vf_loadu(j->bias + m0 + KN_VL * q) : kn_vf_zero();
                int64_t k = 0;
                for (int64_t s0 = 0; s0 < OW; s0 += SEG) {
                    const int64_t sn = min64(SEG, OW - s0);
                    for (int64_t p0 = 0; p0 < sn; p0 += P, k++) {
                        if (j->inplace) {
                            cl_tile_any(tjob[k], tsrc[k], w, bias, seg + p0 * MB);
                        } else {
                            const float *x0 = xn + oh * v->sh * j->Wp + (s0 + p0) * v->sw;
                            cl_tile_any(j, x0, w, bias, seg + p0 * MB);
                        }
                    }
                    /* seg [pixel][channel] -> output rows [channel][pixel] */
                    cl_store_seg(j, seg, MB, MV, sn, yn + m0 * plane + oh * OW + s0, plane);
                }
            }
        }
        if (j->epi && oh1 > oh0) j->epi(j->epi_ctx, j->y, n * s->M * plane + oh0 * OW, s->M, (oh1 - oh0) * OW, plane);
    }
    free(own);
}

/* Weights too large for the caches (512 -> 512: 9.4 MB): tasks are (image, range of channel
 * blocks) instead of bands of rows, so that each block of weights (K x 32, 590 KB at 512 input
 * channels) is read once per task and stays in L2 over all the rows, where the bands read every
 * weight once per row; each task pads its image whole into its thread's buffer (small next to the
 * weights: 400 KB at 512 x 14 x 14). */
static void cl_range_mfirst(void *arg, int64_t begin, int64_t end) {
    const cl_job *j = arg;
    const conv_shape *s = j->s;
    const win2 *v = &j->v;
    const int MV = j->MV, P = j->P, SEG = CL_SEG / P * P;
    const int64_t MB = KN_VL * MV, K = s->C * s->kk, OW = v->OW, plane = s->out_plane, nmb = s->M / MB;
    float seg[(CL_SEG + 14) * 64] __attribute__((aligned(64)));
    for (int64_t t = begin; t < end; t++) {
        const int64_t n = t / (j->bands * j->rbands), ch = t / j->rbands % j->bands, rb = t % j->rbands;
        const int64_t mb0 = ch * nmb / j->bands, mb1 = (ch + 1) * nmb / j->bands;
        const int64_t oh0 = rb * v->OH / j->rbands, oh1 = (rb + 1) * v->OH / j->rbands;
        if (mb1 <= mb0 || oh1 <= oh0) continue;
        const float *pad = j->xp + n * s->C * j->Hp * j->Wp;
        float *yn = j->y + n * s->M * plane;
        for (int64_t m0 = mb0 * MB; m0 < mb1 * MB; m0 += MB) {
            const float *w = j->wp + m0 * K;
            kn_vf bias[4];
            for (int q = 0; q < MV; q++)
                bias[q] = j->bias ? kn_vf_loadu(j->bias + m0 + KN_VL * q) : kn_vf_zero();
            for (int64_t oh = oh0; oh < oh1; oh++)
                for (int64_t s0 = 0; s0 < OW; s0 += SEG) {
                    const int64_t sn = min64(SEG, OW - s0);
                    for (int64_t p0 = 0; p0 < sn; p0 += P)
                        cl_tile_any(j, pad + oh * v->sh * j->Wp + (s0 + p0) * v->sw, w, bias, seg + p0 * MB);
                    cl_store_seg(j, seg, MB, MV, sn, yn + m0 * plane + oh * OW + s0, plane);
                }
        }
        if (j->epi)
            j->epi(j->epi_ctx, j->y, (n * s->M + mb0 * MB) * plane + oh0 * OW, (mb1 - mb0) * MB, (oh1 - oh0) * OW, plane);
    }
}

static kiln_status cl_conv(kn_kernel_ctx *c, const conv_shape *s, const float *x, const float *w, const float *bias,
                           float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, const kn_conv_tail *clamp,
                           bool w_is_input) {
    const int64_t threads = kn_threadpool_size(c->pool);
    const bool many = cl3_suits(s, threads);
    int failed = 0;
    cl_job j = {s, win2_of(&s->w), NULL, 0, 0, NULL, bias, y, many || s->M % (4 * KN_VL) ? 2 : 4, 0, 1, epi, epi_ctx, x,
                false, &failed};
    const win2 *v = &j.v;
    if (clamp) j.clamp = true, j.lo = clamp->lo, j.hi = clamp->hi;
    const int P = j.P = many ? cl_p_of(v->OW) : CL_ACC / j.MV, SEG = CL_SEG / P * P;
    /* the padded input covers every tap of every tile, the last tile's pixels past the row too */
    const int64_t tiles_w = (min64(SEG, v->OW) + P - 1) / P * P + (v->OW / SEG) * SEG;
    j.Hp = max64(v->H + v->ph, (v->OH - 1) * v->sh + (v->KH - 1) * v->dh + 1);
    j.Wp = max64(v->W + v->pw, (tiles_w - 1) * v->sw + (v->KW - 1) * v->dw + 1);
    const size_t xbytes = sizeof(float) * (size_t)(s->N * s->C * j.Hp * j.Wp);
    const int64_t MB = KN_VL * j.MV, K = s->C * s->kk;
    const size_t wbytes = sizeof(float) * (size_t)(s->M * K);
    if (many) {
        j.inplace = true;
        const char *e = getenv("KILN_CL3_MFIRST");
        /* or rows whose every tile crosses the left or right edge, which the in-place reading pads
         * tile by tile on every row (d2 64->64 28x28: 0.32 ms, by channel blocks 0.27; s2 on 56x56,
         * one tile of two at the edge, stays: 1.15 against 1.21) */
        const int64_t ew = (P - 1) * v->sw + (v->KW - 1) * v->dw + 1;
        bool all_edges = true;
        for (int64_t s0 = 0; s0 < v->OW && all_edges; s0 += SEG)
            for (int64_t p0 = 0; p0 < min64(SEG, v->OW - s0); p0 += P) {
                const int64_t col = (s0 + p0) * v->sw - v->pw;
                if (col >= 0 && col + ew <= v->W) all_edges = false;
            }
        /* and, at 1 thread, weights over half the L2 on short rows: the bands read every weight
         * once per output row (per OW pixels). 2-core Zen 3 EPYC (512 KB L2), 590 KB of weights,
         * kiln bench min: 3x3 s2 128->128 on 28x28 (OW 14) 0.72 ms by bands, 0.68 by blocks; on
         * 56x56 (OW 28) 2.60 against 2.77. At 2 threads the bands won (28x28: 0.37 against 0.48;
         * blocks make 4 tasks there, bands 8, and the box's other load left one thread waiting:
         * kn_parallel_for and worker_main 15% of the samples of 256->256 by blocks) */
        const bool big_w = wbytes > ((size_t)1 << 20) || (threads == 1 && (int64_t)wbytes > kn_conv_l2_bytes() / 2 &&
                                                          v->OW < 2 * KN_VL);
        j.mfirst = e ? e[0] == '1' : big_w || all_edges;
    }
    float *xp = NULL;
    if (!many || j.mfirst) {
        KN_TRY(kn_ctx_scratch(c, xbytes, "the zero-padded input", (void **)&xp));
        j.xp = xp;
        const int64_t plane_floats = j.Hp * j.Wp;
        /* bands enough for 4 items a thread where the planes are large (at least 16 rows a band) */
        j.pad_bands = max64(1, min64((4 * threads + s->N * s->C - 1) / (s->N * s->C), j.Hp / 16));
        const int64_t item_floats = plane_floats / j.pad_bands;
        kn_parallel_for(c->pool, s->N * s->C * j.pad_bands, item_floats > 16384 ? 1 : 16384 / item_floats + 1,
                        cl_pad_range, &j);
    }
    cl_wctx wc = {w, s->M, K, MB};
    kn_const_layout lay = {7, {s->M, K, MB, 0}};
    const float *wp = w_is_input ? kn_cpu_const_derived(c, 1, &lay, wbytes, cl_make_weights, &wc) : NULL;
    float *own = NULL;
    if (!wp) {
        if (!(own = kn_aligned_alloc(64, (wbytes + 63) / 64 * 64))) {
            if (xp) kn_ctx_scratch_free(c, xp, xbytes);
            return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
        cl_make_weights(&wc, own);
        wp = own;
    }
    j.wp = wp;
    j.rbands = 1;
    if (j.mfirst) {
        /* two tasks a thread; where the images' channel blocks are fewer, each block's rows split
         * too (its weights then read by each of its bands: 32 x K floats, a few hundred KB). At 16
         * threads 3x3 s2 256 -> 256 on 28x28 had 8 blocks, half the threads idle (0.40 ms, the GEMM
         * 0.18; 16-core host, ResNet-50 per node, bench/results/cpu-host-2026-12-06c.md) */
        const int64_t target = 2 * threads;
        j.bands = max64(1, min64(s->M / MB, (target + s->N - 1) / s->N));
        if (s->N * j.bands < target) j.rbands = max64(1, min64(v->OH, (target + s->N * j.bands - 1) / (s->N * j.bands)));
    } else {
        j.bands = max64(1, min64(v->OH, (4 * threads + s->N - 1) / s->N));
    }
    const int64_t work = s->M * K * s->out_plane / (j.bands * j.rbands) + 1;
    kn_parallel_for(c->pool, s->N * j.bands * j.rbands, work > 65536 ? 1 : 65536 / work + 1,
                    j.mfirst ? cl_range_mfirst : cl_range, &j);
    free(own);
    if (xp) kn_ctx_scratch_free(c, xp, xbytes);
    return failed ? kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory") : KILN_OK;
}

/* ---- 3x3 at stride 1 or 2 with few input channels (YOLO's 16 -> 32 downsampler on 320x320, RGB
 * and grayscale stems): output pixels in the lanes. With 16 input channels the channels-in-lanes
 * kernel above spent a fifth of its time turning its [pixel][channel] tiles into output rows and
 * padding edge tiles (perf: cl_range 16%, cl_pad_block 5%, the tiles 70%). Here a tile is RK_MB
 * output channels by NV vectors of KN_VL consecutive output pixels of one row (24 accumulators at
 * RK_MB = 8, NV = 3 with AVX-512; 12 at RK_MB = 4 with AVX2's 16 registers: 8 x 1 vectors there ran
 * 3x3 1->32 on 128x128 3.9x and s2 3->16 on 224x224 1.25x slower), stored straight into the output rows. Per output row the three input rows of every
 * channel are copied once, zero-padded, into the thread's buffer ([C][3 slots][SW][wh]; a row
 * shared with the previous output row is kept), at stride 2 split into even and odd columns, so
 * that the taps kw = 0, 1, 2 of output pixel ow are even[ow], odd[ow], even[ow + 1] (stride 1:
 * row[ow + kw]): plain loads, no bounds checks; the tap's RK_MB weights are broadcasts (packed once
 * per session as [M / RK_MB][C][3][3][RK_MB]). Rows outside the image are skipped. */
#define RK_MB (KN_VREGS == 32 ? 8 : 4)

/* Grouped convolutions (ResNeXt's 3x3 with 4-16 channels a group) run here too: a block of RK_MB
 * output channels reads the input channels of the groups it spans (rk_span: Cg when a group holds
 * whole blocks, RK_MB / Mg groups' when a block holds whole groups), with zero weights for the
 * channels outside an output channel's own group. 3x3 g32 128->128 28x28, 1 thread: im2col for
 * the GEMM (4 rows a group) was 74% of the time (perf). */
static int64_t rk_span(const conv_shape *s) {
    if (s->G == 1) return s->C;
    return s->Mg % RK_MB == 0 ? s->Cg : RK_MB / s->Mg * s->Cg;
}

/* the first input channel of the block of output channels starting at m0 */
static int64_t rk_cin0(const conv_shape *s, int64_t m0) { return s->G == 1 ? 0 : m0 / s->Mg * s->Cg; }

/* More input channels than rk_span's 16 at stride 2, AVX2 only (the AVX-512 tile is another
 * shape, not measured): one group, up to 64 output channels, output rows of 4+ vectors, the copied
 * rows ([C][3][2][wh]) within 256 KB (L2). The implicit GEMM these went to spent more time on its
 * im2col than on the products (perf, 3x3 s2 48->24 48x80: pack_conv2d 22% of the samples, the
 * micro-kernel 16%): it packs K x N for only M rows. 2-core AVX2 EPYC, 1 thread, CPU time, this
 * kernel / the GEMM, variants and ORT in shuffled order (ppocr det/rec, nudenet layers):
 * s2 48->24 48x80 0.72, 32->16 48x80 0.61-0.63, 64->32 48x80 0.73, 96->48 24x160 0.85-0.87, 32->32
 * 112x112 0.79, 64->64 112x112 0.93, 32->64 80x80 0.93. Left to the GEMM: 96+ output channels
 * (96->96 48x80 0.99, 64->128 112x112 1.02, 96->192 52x52 1.36) and rows of 3 vectors (64->64
 * 56x56 1.05, 128->128 56x56 1.26). KILN_RK_WIDE=0: not here (measurements). */
static bool rk_wide(const conv_shape *s, const win2 *v) {
#if KN_VREGS < 32
    if (s->G != 1 || v->dh != 1 || v->dw != 1) return false;
    const char *e = getenv("KILN_RK_WIDE");
    if (e && e[0] == '0') return false;
    const int64_t wh = (v->OW + 3 - v->sw + 15) / 16 * 16;
    if ((double)s->C * 3.0 * (double)v->sw * (double)wh * sizeof(float) > 256.0 * 1024) return false;
    /* (32 and 64 output channels: cl3_suits' kernel, 0.78-0.84 of this one's time on the shapes
     * there) */
    return v->sw == 2 && v->OW >= 4 * KN_VL && s->M <= 64 && s->M % 32;
#else
    (void)s, (void)v;
    return false;
#endif
}

static bool rk_suits(const conv_shape *s) {
    if (s->nsp != 2 || s->M % RK_MB || s->w.kernel[0] != 3 || s->w.kernel[1] != 3) return false;
    if (s->G != 1 && (s->Cg < 2 || (s->Mg % RK_MB && RK_MB % s->Mg))) return false;
    const win2 v = win2_of(&s->w);
    if (v.sh != v.sw || v.sw > 2 || v.dh != 1 || v.dw != 1 || v.OW < 16 || v.W >= (1 << 24) || v.H >= (1 << 24))
        return false;
    const char *e = getenv("KILN_RK");
    if (e) return e[0] == '1';
    return rk_span(s) <= 16 || rk_wide(s, &v);
}

typedef struct rk_wctx {
    const float *w;
    int64_t M, Mg, Cg, span, G;
} rk_wctx;

/* [M / RK_MB][span][3][3][RK_MB], zero where the input channel is not in the output's group */
static void rk_make_weights(const void *ctx, void *dst) {
    const rk_wctx *k = ctx;
    float *d = dst;
    for (int64_t m0 = 0; m0 < k->M; m0 += RK_MB) {
        const int64_t cin0 = k->G == 1 ? 0 : m0 / k->Mg * k->Cg;
        for (int64_t c = 0; c < k->span; c++)
            for (int t = 0; t < 9; t++, d += RK_MB)
                for (int r = 0; r < RK_MB; r++) {
                    const int64_t m = m0 + r, cg = cin0 + c - m / k->Mg * k->Cg;
                    d[r] = cg >= 0 && cg < k->Cg ? k->w[(m * k->Cg + cg) * 9 + t] : 0.0f;
                }
    }
}

typedef struct rk_job {
    const conv_shape *s;
    win2 v;
    const float *x, *wp, *bias;
    float *y;
    int64_t bands, wh; /* wh: floats per copied row (per half at stride 2), a multiple of 16 */
    kn_conv_epilogue_fn epi;
    const void *epi_ctx;
    int *failed;
    int64_t span; /* input channels a block of RK_MB output channels reads (rk_span) */
} rk_job;

/* Output channels [m0, m0 + RK_MB) of row oh, pixels [ow0, ow0 + KN_VL NV) (the last vector cut to `last`
 * lanes) from the split rows sp ([C][3 slots][2][wh], at column ow0; tap kh's row in slot sl[kh]);
 * taps kh in [kh0, kh1). */
static inline __attribute__((always_inline)) void rk_tile(const rk_job *j, const float *sp, const float *w,
                                                          const float *bias, float *yo, const int *sl, int64_t kh0,
                                                          int64_t kh1, kn_vmask last, const int NV, const int SW) {
    const int64_t C = j->span, wh = j->wh, plane = j->v.OH * j->v.OW;
    kn_vf acc[RK_MB][3];
#pragma GCC unroll 8
    for (int mi = 0; mi < RK_MB; mi++) {
        const kn_vf b = bias ? kn_vf_set1(bias[mi]) : kn_vf_zero();
#pragma GCC unroll 3
        for (int q = 0; q < NV; q++) acc[mi][q] = b;
    }
    for (int64_t c = 0; c < C; c++)
        for (int64_t kh = kh0; kh < kh1; kh++) {
            const float *ev = sp + (c * 3 + sl[kh]) * SW * wh, *od = ev + wh;
            const float *wt = w + (c * 9 + kh * 3) * RK_MB;
#pragma GCC unroll 3
            for (int kw = 0; kw < 3; kw++) {
                const float *src = SW == 1 ? ev + kw : kw == 1 ? od : ev + (kw >> 1);
                kn_vf in[3];
#pragma GCC unroll 3
                for (int q = 0; q < NV; q++) in[q] = kn_vf_loadu(src + KN_VL * q);
#pragma GCC unroll 8
                for (int mi = 0; mi < RK_MB; mi++) {
                    const kn_vf wv = kn_vf_set1(wt[kw * RK_MB + mi]);
#pragma GCC unroll 3
                    for (int q = 0; q < NV; q++) acc[mi][q] = kn_vf_fmadd(in[q], wv, acc[mi][q]);
                }
            }
        }
#pragma GCC unroll 8
    for (int mi = 0; mi < RK_MB; mi++)
#pragma GCC unroll 3
        for (int q = 0; q < NV; q++) {
            float *p = yo + mi * plane + KN_VL * q;
            if (q == NV - 1) kn_vf_mask_storeu(p, last, acc[mi][q]);
            else kn_vf_storeu(p, acc[mi][q]);
        }
}

static void rk_tile_any(const rk_job *j, const float *sp, const float *w, const float *bias, float *yo, const int *sl,
                        int64_t kh0, int64_t kh1, kn_vmask last, int nv) {
    if (j->v.sw == 1) {
        if (nv == 3) rk_tile(j, sp, w, bias, yo, sl, kh0, kh1, last, 3, 1);
        else if (nv == 2) rk_tile(j, sp, w, bias, yo, sl, kh0, kh1, last, 2, 1);
        else rk_tile(j, sp, w, bias, yo, sl, kh0, kh1, last, 1, 1);
    } else {
        if (nv == 3) rk_tile(j, sp, w, bias, yo, sl, kh0, kh1, last, 3, 2);
        else if (nv == 2) rk_tile(j, sp, w, bias, yo, sl, kh0, kh1, last, 2, 2);
        else rk_tile(j, sp, w, bias, yo, sl, kh0, kh1, last, 1, 2);
    }
}

/* Copies row ih of every channel of image n (zero outside the image) into slot r: at stride 1 the
 * padded row, dst[c][r][i] = x(ih, i - pw); at stride 2 its even and odd columns,
 * dst[c][r][0][i] = x(ih, 2i - pw), dst[c][r][1][i] = x(ih, 2i + 1 - pw). */
static void rk_split_rows(const rk_job *j, const float *xn, int64_t ih, int r, float *dst) {
    const win2 *v = &j->v;
    const int64_t SW = v->sw, wh = j->wh;
    const kn_vi ev = kn_vi_iota(0, 2), od = kn_vi_iota(1, 2);
    for (int64_t c = 0; c < j->s->C; c++) {
        const float *row = xn + (c * v->H + ih) * v->W;
        float *e = dst + (c * 3 + r) * SW * wh, *o = e + wh;
        for (int64_t i = 0; i < wh; i += KN_VL) {
            const int64_t u = SW * i - v->pw; /* the first input column of this vector (or pair) */
            if (SW == 1) {
                const kn_vf a = u >= 0 && u + KN_VL <= v->W ? kn_vf_loadu(row + u)
                                                            : kn_vf_maskz_loadu(kn_v_range(-u, v->W - u), row + u);
                kn_vf_store(e + i, a);
                continue;
            }
            kn_vf a, b;
            if (u >= 0 && u + 2 * KN_VL <= v->W) {
                a = kn_vf_loadu(row + u), b = kn_vf_loadu(row + u + KN_VL);
            } else {
                a = kn_vf_maskz_loadu(kn_v_range(-u, v->W - u), row + u);
                b = kn_vf_maskz_loadu(kn_v_range(-u - KN_VL, v->W - u - KN_VL), row + u + KN_VL);
            }
            kn_vf_store(e + i, kn_vf_perm2(a, ev, b));
            kn_vf_store(o + i, kn_vf_perm2(a, od, b));
        }
    }
}

/* Tasks are (image, band of output rows); per row, per tile position every block of RK_MB channels
 * (the tile's inputs stay in L1 across the blocks). */
static void rk_range(void *arg, int64_t begin, int64_t end) {
    const rk_job *j = arg;
    const conv_shape *s = j->s;
    const win2 *v = &j->v;
    const int64_t OW = v->OW, plane = v->OH * OW, nvec = (OW + KN_VL - 1) / KN_VL;
    /* a tile loads whole vectors: its masked-off lanes read up to 2 floats past the last row (OW
     * 14: wh 16, the last tap reads column 17), so the buffer has a vector of slack */
    const size_t bf = (size_t)(s->C * 3 * v->sw * j->wh) + KN_VL;
    float *own = NULL, *sp = kn_conv_thread_buffer(bf);
    if (!sp && !(sp = own = kn_aligned_alloc(64, sizeof(float) * bf))) {
        __atomic_store_n(j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t t = begin; t < end; t++) {
        const int64_t n = t / j->bands, band = t % j->bands;
        const int64_t oh0 = band * v->OH / j->bands, oh1 = (band + 1) * v->OH / j->bands;
        const float *xn = j->x + n * s->C * v->H * v->W;
        float *yn = j->y + n * s->M * plane;
        int64_t have[3] = {-1, -1, -1}; /* the input row in each slot: row ih in slot ih mod 3 */
        for (int64_t oh = oh0; oh < oh1; oh++) {
            const int64_t ih0 = oh * v->sh - v->ph, kh0 = max64(0, -ih0), kh1 = min64(3, v->H - ih0);
            int sl[3] = {0, 0, 0};
            for (int64_t kh = kh0; kh < kh1; kh++) {
                const int64_t ih = ih0 + kh;
                sl[kh] = (int)(ih % 3);
                if (have[sl[kh]] != ih) rk_split_rows(j, xn, ih, sl[kh], sp), have[sl[kh]] = ih;
            }
            /* the next output row's new input rows (stride 2: two), into L2 while this row computes:
             * the copy had waited on memory for a fifth of the time (16 streams of a 320-float row
             * each) */
            for (int64_t ih = ih0 + 3; ih < min64(ih0 + 3 + v->sh, v->H) && oh + 1 < oh1; ih++)
                for (int64_t ch = 0; ch < s->C; ch++) {
                    const char *p = (const char *)(xn + (ch * v->H + ih) * v->W);
                    for (int64_t b = 0; b < (int64_t)sizeof(float) * v->W; b += 64) _mm_prefetch(p + b, _MM_HINT_T1);
                }
            for (int64_t q0 = 0; q0 < nvec;) {
                /* tiles of 3 vectors; a remainder of 1 or 2 vectors as 2 + 2 or 2 (not 3 + 1) */
                const int64_t left = nvec - q0;
                const int nv = left == 4 ? 2 : (int)min64(3, left);
                const int64_t ow0 = KN_VL * q0, cols = min64(KN_VL * nv, OW - ow0);
                const kn_vmask last = kn_v_tail(cols - KN_VL * (nv - 1));
                for (int64_t m0 = 0; m0 < s->M; m0 += RK_MB)
                    rk_tile_any(j, sp + rk_cin0(s, m0) * 3 * v->sw * j->wh + ow0, j->wp + m0 * j->span * 9,
                                j->bias ? j->bias + m0 : NULL, yn + m0 * plane + oh * OW + ow0, sl, kh0, kh1, last, nv);
                q0 += nv;
            }
        }
        if (j->epi && oh1 > oh0) j->epi(j->epi_ctx, j->y, n * s->M * plane + oh0 * OW, s->M, (oh1 - oh0) * OW, plane);
    }
    free(own);
}

static kiln_status rk_conv(kn_kernel_ctx *c, const conv_shape *s, const float *x, const float *w, const float *bias,
                           float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_is_input) {
    int failed = 0;
    rk_job j = {s, win2_of(&s->w), x, NULL, bias, y, 1, 0, epi, epi_ctx, &failed, rk_span(s)};
    /* the last pixel's taps: even[ow + 1] at stride 2, row[ow + 2] at stride 1 */
    j.wh = (j.v.OW + 3 - j.v.sw + 15) / 16 * 16;
    const size_t wbytes = sizeof(float) * (size_t)(s->M * j.span * 9);
    rk_wctx wc = {w, s->M, s->Mg, s->Cg, j.span, s->G};
    kn_const_layout lay = {10, {s->M, s->C, RK_MB, s->G}};
    const float *wp = w_is_input ? kn_cpu_const_derived(c, 1, &lay, wbytes, rk_make_weights, &wc) : NULL;
    float *own = NULL;
    if (!wp) {
        if (!(own = kn_aligned_alloc(64, (wbytes + 63) / 64 * 64))) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        rk_make_weights(&wc, own);
        wp = own;
    }
    j.wp = wp;
    const int64_t threads = kn_threadpool_size(c->pool);
    j.bands = max64(1, min64(j.v.OH, (4 * threads + s->N - 1) / s->N));
    const int64_t work = s->M * j.span * 9 * s->out_plane / j.bands + 1;
    kn_parallel_for(c->pool, s->N * j.bands, work > 65536 ? 1 : 65536 / work + 1, rk_range, &j);
    free(own);
    return failed ? kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory") : KILN_OK;
}

#endif

/* ------------------------------------------------------------------ float Conv */

/* ------------------------------------------------------------------ strided 1-D windows: frames */

/* A strided 1-D convolution whose product the GEMM would run transposed (kn_sgemm_swaps: 98
 * frames of a 1 -> 512, kernel 400, stride 160 front end fill 4 panels of 32 columns by 77%,
 * 512 channels fill them all) runs as that transposed product itself, a plain one: Y_g^T
 * [OW, Mg] = F [OW, Cg KW] W_g^T, F's row j the window of frame j (one input channel without pads:
 * the input itself, row stride sw, read in place; else copied once, F), W_g^T the weights as
 * packed B (the layout the transposed product packs them in), then Y_g^T moved into Y with the
 * bias. The GEMM's transposed path reads the im2col's column panels as its A (the phase rows'
 * packing, pack_conv_pt): 1 -> 512 k400 s160 on 16000 samples spent 0.30 ms in its micro-kernel
 * where the plain product of the same sizes (a MatMul 98 x 400 x 512) takes 0.28 ms in all. */
static bool fr_suits(const conv_shape *s) {
    if (!pt_suits(s)) return false;
    const win2 v = win2_of(&s->w);
    /* the frames' copy gathers a dilated window: int32 lane offsets */
    if (v.dw != 1 && (v.KW - 1) * v.dw >= INT32_MAX / 4) return false;
    /* KILN_CONV_FRAMES=1: wherever it can run, 0: never (tests, measurements) */
    const char *e = getenv("KILN_CONV_FRAMES");
    if (e && *e) return *e == '1';
    /* at avx2 too since the GEMM's sums stopped depending on the threads there: where kn_sgemm_swaps
     * holds (few frames) 0.95-0.97 of the im2col path's time (1 -> 512 k400 s160 on 4000 samples, 23
     * frames; 1 -> 256 k256 s128 on 6000, 45). Not past it: 98 frames of 1 -> 512 k400 s160 on 16000
     * samples ran even (0.99-1.01), 124 of 1 -> 258 k256 s128 1.05 (b1) and 1.10 (b8) of its time
     * (op_ab, 1 thread, KILN_CPU_ISA=avx2, both orders of the variants, 2-core AVX-512 Xeon) */
    return kn_sgemm_swaps(s->Mg, s->out_plane, s->Cg * s->kk);
}

typedef struct fr_job {
    const conv_shape *s;
    win2 v;
    const float *x, *bias;
    float *f;        /* the frames' windows [N G][OW][Cg KW], or NULL (read in place) */
    float *y;
    kn_conv_epilogue_fn epi;
    const void *epi_ctx;
} fr_job;

/* Rows [begin, end) of F over all products: row j of product op = (n, g) is, per channel ci of the
 * group, xpad_ci[j sw .. j sw + KW) (zero in the pads). */
static void fr_frames_range(void *arg, int64_t begin, int64_t end) {
    const fr_job *j = arg;
    const conv_shape *s = j->s;
    const win2 *v = &j->v;
    const int64_t OW = v->OW, KW = v->KW, W = v->W, K = s->Cg * KW, dw = v->dw;
#if KN_VL
    const kn_vi steps = kn_vi_iota(0, (int32_t)dw); /* dilated: lane l is tap k + l, dw l further */
#endif
    for (int64_t r = begin; r < end; r++) {
        const int64_t op = r / OW, ow = r % OW, n = op / s->G, g = op % s->G;
        float *d = j->f + r * K;
        const int64_t at = ow * v->sw - v->pw; /* x index of tap 0 */
        /* the taps inside x: at + k dw in [0, W) for k in [lo, hi) */
        const int64_t lo = min64(KW, at >= 0 ? 0 : (-at + dw - 1) / dw);
        const int64_t hi = max64(lo, min64(KW, W - at <= 0 ? 0 : (W - at + dw - 1) / dw));
        for (int64_t ci = 0; ci < s->Cg; ci++, d += KW) {
            const float *x = j->x + (n * s->C + g * s->Cg + ci) * s->in_plane;
            int64_t k = 0;
            for (; k < lo; k++) d[k] = 0.0f;
#if KN_VL
            if (dw == 1)
                for (; k + KN_VL <= hi; k += KN_VL) kn_vf_storeu(d + k, kn_vf_loadu(x + at + k));
            else
                for (; k + KN_VL <= hi; k += KN_VL) kn_vf_storeu(d + k, kn_vf_mask_gather(KN_VALL, steps, x + at + k * dw));
#endif
            for (; k < hi; k++) d[k] = x[at + k * dw];
            for (; k < KW; k++) d[k] = 0.0f;
        }
    }
}

/* Frames [f0, f0 + nf) x channels [m0, m0 + nm) of product op: y[m][f] = t[f][m] + bias[m] (t at
 * Y^T[f0][m0], row stride ldt), then the epilogue on that block of Y. */
static void fr_store(const fr_job *j, int64_t op, int64_t f0, int64_t nf, int64_t m0, int64_t nm, const float *t,
                     int64_t ldt) {
    const conv_shape *s = j->s;
    const int64_t OW = j->v.OW, g = op % s->G, n = op / s->G;
    float *y = j->y + (n * s->M + g * s->Mg + m0) * OW + f0;
    const float *bias = j->bias ? j->bias + g * s->Mg + m0 : NULL;
    int64_t m = 0;
#if KN_VL
    /* KN_VL x KN_VL blocks, every loop over the block's rows of a fixed count (unrolled: with
     * counts of the edges they kept the vectors on the stack, 6% of 1 -> 512 k400 s160) */
    for (; m < nm; m += KN_VL) {
        const int64_t mn = min64(KN_VL, nm - m);
        const kn_vmask mm = kn_v_tail(mn);
        for (int64_t f = 0; f < nf; f += KN_VL) {
            const int64_t fn = min64(KN_VL, nf - f);
            kn_vf in[KN_VL], o[KN_VL];
#pragma GCC unroll 16
            for (int i = 0; i < KN_VL; i++)
                in[i] = kn_vf_maskz_loadu(i < fn ? mm : 0, t + (f + (i < fn ? i : 0)) * ldt + m);
            pt_transpose(in, o);
            float *yb = y + m * OW + f;
            if (mn == KN_VL && fn == KN_VL) {
#pragma GCC unroll 16
                for (int q = 0; q < KN_VL; q++)
                    kn_vf_storeu(yb + q * OW, bias ? kn_vf_add(o[q], kn_vf_set1(bias[m + q])) : o[q]);
            } else {
                /* the edges: through a buffer (no vector indexed by a variable) */
                float tb[KN_VL][KN_VL];
                const kn_vmask fm = kn_v_tail(fn);
#pragma GCC unroll 16
                for (int q = 0; q < KN_VL; q++) kn_vf_storeu(tb[q], o[q]);
                for (int64_t q = 0; q < mn; q++) {
                    const kn_vf val = kn_vf_loadu(tb[q]);
                    kn_vf_mask_storeu(yb + q * OW, fm, bias ? kn_vf_add(val, kn_vf_set1(bias[m + q])) : val);
                }
            }
        }
    }
#endif
    for (; m < nm; m++)
        for (int64_t f = 0; f < nf; f++) y[m * OW + f] = t[f * ldt + m] + (bias ? bias[m] : 0.0f);
    if (j->epi) j->epi(j->epi_ctx, j->y, (n * s->M + g * s->Mg + m0) * OW + f0, nm, nf, OW);
}

/* The GEMM's epilogue: each final block of Y^T (frames i0.., channels j0..) into Y while in cache */
static void fr_gemm_epilogue(const void *ctx, int64_t op, int64_t i0, int64_t j0, int64_t m, int64_t n, float *c,
                             int64_t ldc) {
    fr_store(ctx, op, i0, m, j0, n, c, ldc);
}

static kiln_status fr_run(kn_kernel_ctx *c, const conv_shape *s, const float *x, const float *w, const float *bias,
                          float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_is_input) {
    const win2 v = win2_of(&s->w);
    const int64_t count = s->N * s->G, OW = v.OW, Mg = s->Mg, K = s->Cg * v.KW;
    /* one channel whose frames all lie inside the input, dilation 1: read in place */
    const bool in_place = s->Cg == 1 && v.dw == 1 && v.pw == 0 && (OW - 1) * v.sw + v.KW <= v.W;
    fr_job j = {s, v, x, bias, NULL, y, epi, epi_ctx};
    const size_t f_bytes = in_place ? 0 : sizeof(float) * (size_t)(count * OW * K);
    const size_t t_bytes = sizeof(float) * (size_t)(count * OW * Mg);
    float *t = NULL;
    KN_TRY(kn_ctx_scratch(c, t_bytes, "the strided convolution's transposed output", (void **)&t));
    kiln_status st = KILN_OK;
    if (!in_place) {
        st = kn_ctx_scratch(c, f_bytes, "the strided convolution's frames", (void **)&j.f);
        if (st) {
            kn_ctx_scratch_free(c, t, t_bytes);
            return st;
        }
        kn_parallel_for(c->pool, count * OW, K >= 2048 ? 1 : 2048 / K + 1, fr_frames_range, &j);
    }
    const float **ap = malloc(sizeof(float *) * (size_t)count * 3);
    float **cp = malloc(sizeof(float *) * (size_t)count);
    if (!ap || !cp) st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (!st) {
        const float **bp = ap + count, **bpk = ap + 2 * count;
        for (int64_t op = 0; op < count; op++) {
            const int64_t n = op / s->G, g = op % s->G;
            ap[op] = in_place ? x + (n * s->C + g) * s->in_plane : j.f + op * OW * K;
            bp[op] = w + g * Mg * K;
            cp[op] = t + op * OW * Mg;
        }
        kn_sgemm_batch gb = {.count = count, .M = OW, .N = Mg, .K = K, .trans_b = true, .alpha = 1.0f, .beta = 0.0f,
                             .a = ap, .lda = in_place ? v.sw : K, .b = bp, .ldb = K, .c = cp, .ldc = Mg};
        /* the weights as the transposed product packs them (make_packed_weights_t), once per session */
        if (w_is_input) {
            conv_weight_pack wp = {w, s->G, Mg, K};
            kn_const_layout lay = {8, {s->G, Mg, K, 0}};
            const size_t per = kn_sgemm_packed_b_floats(Mg, K);
            const float *packed =
                kn_cpu_const_derived(c, 1, &lay, sizeof(float) * per * (size_t)s->G, make_packed_weights_t, &wp);
            if (packed) {
                for (int64_t op = 0; op < count; op++) bpk[op] = packed + (op % s->G) * per;
                gb.b_packed = bpk;
            }
        }
        gb.epilogue = fr_gemm_epilogue;
        gb.epilogue_ctx = &j;
        st = kn_sgemm_run(c->pool, &gb);
        if (st) st = kn_kernel_error(c, st, "out of memory in the GEMM");
    }
    free(ap);
    free(cp);
    if (j.f) kn_ctx_scratch_free(c, j.f, f_bytes);
    kn_ctx_scratch_free(c, t, t_bytes);
    return st;
}

static void fill_bias(float *y, const float *bias, int64_t N, int64_t M, int64_t plane) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            float *p = y + (n * M + m) * plane, b = bias[m];
            for (int64_t i = 0; i < plane; i++) p[i] = b;
        }
}

/* A strided 1x1 convolution without pads reads every sh-th row and sw-th column of its input: that
 * subsample, made once on the pool, is a pointwise convolution's input. Through the GEMM's pack
 * callback (im2col) each tile of the product gathered its own columns again, per slice of K
 * (1x1 s2 512 -> 1024 on 28x28: 1.55 ms at 1 thread, 1.15 at 2). */
typedef struct sub_job {
    const float *x;
    float *xs;
    win2 v;
} sub_job;

static void subsample_range(void *arg, int64_t begin, int64_t end) {
    const sub_job *j = arg;
    const win2 *v = &j->v;
#if KN_VL
    const kn_vi even = kn_vi_iota(0, 2);
#endif
    for (int64_t p = begin; p < end; p++) {
        const float *xp = j->x + p * v->H * v->W;
        float *dp = j->xs + p * v->OH * v->OW;
        for (int64_t oh = 0; oh < v->OH; oh++) {
            const float *row = xp + oh * v->sh * v->W;
            float *d = dp + oh * v->OW;
            int64_t ow = 0;
#if KN_VL
            if (v->sw <= 2)
                for (; ow < v->OW; ow += KN_VL) {
                    const kn_vmask m = kn_v_tail(v->OW - ow);
                    kn_vf_mask_storeu(d + ow, m, run_load(row + ow * v->sw, m, v->sw == 2, even));
                }
#endif
            for (; ow < v->OW; ow++) d[ow] = row[ow * v->sw];
        }
    }
}

static bool strided_pointwise(const conv_shape *s) {
    if (s->nsp < 1 || s->nsp > 2) return false;
    bool strided = false;
    for (int i = 0; i < s->nsp; i++) {
        if (s->w.kernel[i] != 1 || s->w.pad_begin[i] != 0 || s->w.pad_end[i] != 0) return false;
        strided |= s->w.stride[i] > 1;
    }
    return strided;
}

static kn_dconv_shape dconv_shape_of(const conv_shape *s) {
    const win2 v = win2_of(&s->w);
    return (kn_dconv_shape){s->N, s->C, s->M, s->G, v.H, v.W, v.OH, v.OW, v.KH, v.KW, v.sh, v.sw, v.dh, v.dw, v.ph, v.pw};
}

static kiln_status conv_f32(kn_kernel_ctx *c, const conv_shape *s, const float *x, const float *w,
                            const float *bias, float *y, kn_conv_epilogue_fn epi, const void *epi_ctx,
                            const kn_conv_tail *tail, bool w_is_input) {
    if (s->N == 0 || s->M == 0 || s->out_plane == 0) return KILN_OK;
    /* one input channel per group: the direct per-channel loops, unless each input channel feeds
     * many output channels through a long enough window (a 1 -> 258 channel, kernel-256,
     * stride-128 STFT front end, a grayscale stem): then the channels' products form a GEMM
     * (W_g [Mg, kk] times the strided im2col of that one channel) like any other convolution;
     * the per-channel loops ran it 30-40x slower than ONNX Runtime */
    const bool depthwise = s->Cg == 1 && s->nsp <= 2 && (s->Mg == 1 || s->Mg * s->kk < 64);
    bool dw16 = false; /* the channels-in-lanes depthwise path writes every output itself, bias included */
#if KN_VL
    /* stride 2 along rows of two vectors or more: phase rows (bias and epilogue its own) */
    if (depthwise && dws2_suits(s)) return dws2_run(c, s, x, w, bias, y, epi, epi_ctx);
    dw16 = depthwise && s->kk > 0 && dw16_suits(s);
#endif
    /* other depthwise layers on wide rows (fewer channels than lanes: 4 on 100x300 0.63 of the
     * channels-in-lanes kernel's time; channel multipliers 2-4; rows its scratch cannot hold): the
     * direct kernel (conv_direct.c), which starts from the bias itself (no fill_bias pass) */
    if ((!dw16 || s->C < KN_VL) && s->Cg == 1 && s->Mg <= 4 && s->nsp <= 2 && s->kk > 1) {
        const kn_dconv_shape ds = dconv_shape_of(s);
        /* one output channel a group: the depthwise kernel (conv_direct.c) */
        if (s->Mg == 1 && kn_dwconv_suits(&ds)) return kn_dwconv_run(c, &ds, x, w, bias, y, epi, epi_ctx);
        if (kn_dconv_suits(&ds)) return kn_dconv_run(c, &ds, x, w, bias, y, epi, epi_ctx, w_is_input);
    }
    if (s->Cg == 0 || s->kk == 0 || (depthwise && !dw16)) {
        if (bias) fill_bias(y, bias, s->N, s->M, s->out_plane);
        else memset(y, 0, sizeof(float) * (size_t)(s->N * s->M * s->out_plane));
    }
    if (s->Cg == 0 || s->kk == 0) {
        if (epi) epi(epi_ctx, y, 0, 1, s->N * s->M * s->out_plane, s->N * s->M * s->out_plane);
        return KILN_OK;
    }

    if (depthwise) {
        dw_job j = {s, win2_of(&s->w), x, w, y, NULL, epi, epi_ctx, bias, NULL, 1, NULL};
        int64_t work = s->out_plane * s->kk;
#if KN_VL
        if (dw16) {
            int failed = 0;
            j.failed = &failed;
            dw16_wctx wc = {w, s->C, s->kk};
            const size_t wfloats = (size_t)((s->C + KN_VL - 1) / KN_VL * s->kk * KN_VL);
            kn_const_layout lay = {2, {s->C, s->kk, KN_VL, 0}};
            const float *w16 = w_is_input ? kn_cpu_const_derived(c, 1, &lay, sizeof(float) * wfloats, dw16_make_weights, &wc)
                                          : NULL;
            float *own = NULL;
            if (!w16) {
                own = kn_aligned_alloc(64, sizeof(float) * wfloats);
                if (!own) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
                dw16_make_weights(&wc, own);
                w16 = own;
            }
            j.w16 = w16;
            /* few channel groups (16 or 72 channels) would leave threads idle or unevenly loaded:
             * cut each group's rows into slices (of 4 rows at least), for 4 tasks per thread */
            const int64_t groups = (s->C + KN_VL - 1) / KN_VL, tasks = s->N * groups, threads = kn_threadpool_size(c->pool);
            j.split = 1;
            if (threads > 1 && tasks < 4 * threads)
                j.split = max64(1, min64((4 * threads + tasks - 1) / tasks, j.v.OH / 4));
            const int64_t twork = KN_VL * work / j.split;
            kn_parallel_for(c->pool, tasks * j.split, twork > 65536 ? 1 : 65536 / (twork + 1) + 1, dw16_range, &j);
            free(own);
            return failed ? kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory") : KILN_OK;
        }
        dw_tap *taps = NULL;
        if (j.v.sw <= 2) {
            taps = malloc(sizeof(dw_tap) * (size_t)(((j.v.OW + KN_VL - 1) / KN_VL + DW_CHUNKS - 1) * j.v.KW + 1));
            if (!taps) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
            dw_taps(&j.v, taps);
            j.taps = taps;
        }
#endif
        kn_parallel_for(c->pool, s->N * s->M, work > 16384 ? 1 : 16384 / (work + 1) + 1, dw_range, &j);
#if KN_VL
        free(taps);
#endif
        return KILN_OK;
    }

    bool pointwise = true;
    for (int i = 0; i < s->nsp; i++)
        pointwise &= s->w.kernel[i] == 1 && s->w.stride[i] == 1 && s->w.pad_begin[i] == 0 && s->w.pad_end[i] == 0;
    /* the epilogue is the tail's clamp alone (the caller passes tail only with epi) */
    const bool clamp_only = tail && !tail->residual && !tail->residual16 && tail->act == KN_GEMM_ACT_NONE;
    int64_t count = s->N * s->G, K = s->Cg * s->kk;
    /* precision=bf16 on AMX: the GEMM's tiles outrun every fp32 kernel below (Winograd included)
     * wherever the bf16 GEMM takes the product (sgemm_bf16.h); with vdpbf16ps they do not */
    const bool amx_gemm = kn_bgemm_active() && kn_bgemm_amx() && s->Mg >= 16 && s->out_plane >= 16 && K >= 16;
    /* and without im2col (conv_amx.c: stride 1, and strides 2-4 over phase images) */
    if (amx_gemm && s->nsp == 2 && s->G == 1) {
        const kn_amx_conv_shape as = {s->N, s->C, s->M, s->w.in[0], s->w.in[1], s->w.out[0], s->w.out[1],
                                      s->w.kernel[0], s->w.kernel[1], s->w.pad_begin[0], s->w.pad_begin[1],
                                      s->w.dilation[0], s->w.dilation[1], s->w.stride[0], s->w.stride[1]};
        if (kn_amx_conv_suits(&as)) {
            /* a Relu or Clip alone: applied as the tiles' blocks are stored, no pass of its own */
            if (clamp_only) {
                const kn_amx_io io = {NULL, NULL, tail->lo, tail->hi};
                return kn_amx_conv_io(c, &as, x, w, bias, y, NULL, NULL, w_is_input, &io);
            }
            return kn_amx_conv(c, &as, x, w, bias, y, epi, epi_ctx, w_is_input);
        }
    }
    if (strided_pointwise(s)) {
        sub_job sj = {x, NULL, win2_of(&s->w)};
        const size_t bytes = sizeof(float) * (size_t)(s->N * s->C * s->out_plane);
        KN_TRY(kn_ctx_scratch(c, bytes, "the strided 1x1 convolution's subsampled input", (void **)&sj.xs));
        const int64_t plane = s->out_plane + 1;
        kn_parallel_for(c->pool, s->N * s->C, plane > 8192 ? 1 : 8192 / plane + 1, subsample_range, &sj);
        conv_shape ps = *s;
        ps.in_plane = s->out_plane;
        for (int i = 0; i < s->nsp; i++) ps.w.in[i] = s->w.out[i], ps.w.stride[i] = 1;
        const kiln_status st = conv_f32(c, &ps, sj.xs, w, bias, y, epi, epi_ctx, tail, w_is_input);
        kn_ctx_scratch_free(c, sj.xs, bytes);
        return st;
    }
    /* dilated: Winograd over the phase images (conv_winograd.c) */
    if (!amx_gemm && s->nsp == 2 && s->G == 1 && s->w.kernel[0] == 3 && s->w.kernel[1] == 3 && s->w.stride[0] == 1 &&
        s->w.stride[1] == 1) {
        const kn_wino_shape ws = {s->N, s->C, s->M, s->w.in[0], s->w.in[1], s->w.out[0], s->w.out[1],
                                  s->w.pad_begin[0], s->w.pad_begin[1], s->w.dilation[0], s->w.dilation[1]};
        if (kn_wino_suits(&ws, kn_threadpool_size(c->pool)))
            return kn_wino_conv(c, &ws, x, w, bias, y, epi, epi_ctx, w_is_input);
    }
    /* few output channels a group, or few input taps (large kernels, large planes, the stems): the
     * direct kernel (conv_direct.c) ahead of the kernels below and the implicit GEMM */
    if (!amx_gemm && !pointwise && s->nsp <= 2) {
        const kn_dconv_shape ds = dconv_shape_of(s);
        if (kn_dconv_suits(&ds)) return kn_dconv_run(c, &ds, x, w, bias, y, epi, epi_ctx, w_is_input);
    }
#if KN_VL
    if (!amx_gemm) {
        if (pointwise && pw_suits(s)) return pw_conv(c, s, x, w, bias, y, epi, epi_ctx, w_is_input);
        /* 3x3 stride 1-2, few channels: ahead of the few-taps path (3x3 s2 3->16 on 224x224: 0.089 ->
         * 0.060 ms, 1 thread) */
        if (!pointwise && rk_suits(s)) return rk_conv(c, s, x, w, bias, y, epi, epi_ctx, w_is_input);
        if (!pointwise && sk_suits(s)) {
            sk_conv(c, s, x, w, bias, y, epi, epi_ctx);
            return KILN_OK;
        }
        if (!pointwise && cl_suits(s, kn_threadpool_size(c->pool)))
            return cl_conv(c, s, x, w, bias, y, clamp_only ? NULL : epi, epi_ctx, clamp_only ? tail : NULL, w_is_input);
    }
#endif
    /* few output positions (a 4x4 plane), many weights: channels in the lanes, no im2col, the
     * padding's taps left out (conv_fewpos.c) */
    if (!amx_gemm && !kn_bgemm_active() && !pointwise && s->nsp <= 2) {
        const kn_dconv_shape ds = dconv_shape_of(s);
        if (kn_fpconv_suits(&ds))
            return kn_fpconv_run(c, &ds, x, w, bias, y, epi, epi_ctx, w_is_input);
    }
    /* a strided 1-D window whose product the GEMM would run transposed: that product, plain */
    if (!amx_gemm && !kn_bgemm_active() && fr_suits(s)) return fr_run(c, s, x, w, bias, y, epi, epi_ctx, w_is_input);
    const float **ap = malloc(sizeof(float *) * (size_t)count * 2);
    float **cp = malloc(sizeof(float *) * (size_t)count);
    if (!ap || !cp) {
        free(ap);
        free(cp);
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    const float **bp = ap + count;
    for (int64_t op = 0; op < count; op++) {
        int64_t n = op / s->G, g = op % s->G;
        ap[op] = w + g * s->Mg * K;
        bp[op] = x + (n * s->C + g * s->Cg) * s->in_plane;
        cp[op] = y + (n * s->M + g * s->Mg) * s->out_plane;
    }
    conv_pack_ctx pc = {x, s, {0}, false, NULL, {0, 0, 0}, NULL, false};
    if (s->nsp <= 2) {
        pc.v = win2_of(&s->w);
        /* int32 lane arithmetic: input plane and coordinates must fit */
        pc.vec_ok = s->in_plane < (INT32_MAX / 4) && pc.v.OH * pc.v.sh + pc.v.KH * pc.v.dh < (INT32_MAX / 4) &&
                    pc.v.OW * pc.v.sw + pc.v.KW * pc.v.dw < (INT32_MAX / 4);
    }
    kn_sgemm_batch g = {.count = count, .M = s->Mg, .N = s->out_plane, .K = K, .alpha = 1.0f,
                        .beta = 0.0f, .a = ap, .lda = K, .c = cp, .ldc = s->out_plane};
    conv_epi_ctx ec = {epi, epi_ctx, y};
    float **addp = NULL;
    if (tail) {
        /* the GEMM's micro-kernel adds the residual and clamps as it stores C */
        if (tail->residual && !(addp = malloc(sizeof(float *) * (size_t)count))) {
            free(ap);
            free(cp);
            return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
        for (int64_t op = 0; tail->residual && op < count; op++) addp[op] = (float *)tail->residual + (cp[op] - y);
        g.c_add = (const float *const *)addp;
        g.ldc_add = s->out_plane;
        g.clamp = true;
        g.clamp_lo = tail->lo;
        g.clamp_hi = tail->hi;
        g.act = tail->act; /* a LeakyRelu, HardSigmoid or HardSwish before the clamp */
        g.act_p0 = tail->p0;
        g.act_p1 = tail->p1;
    } else if (epi) {
        g.epilogue = conv_gemm_epilogue;
        g.epilogue_ctx = &ec;
    }
    const float **rbias = NULL; /* the GEMM adds the bias as it stores C: no pass of its own */
    if (bias) {
        rbias = malloc(sizeof(float *) * (size_t)count);
        if (!rbias) {
            free(ap);
            free(cp);
            return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
        for (int64_t op = 0; op < count; op++) rbias[op] = bias + (op % s->G) * s->Mg;
        g.row_bias = rbias;
    }
    /* constant weights: packed once per session (the GEMM would re-pack them on every call);
     * not for the shapes the GEMM runs without packing A (one output channel or one column) */
    const float **apk = NULL;
    if (w_is_input && s->Mg > 1 && s->out_plane > 1) {
        conv_weight_pack wp = {w, s->G, s->Mg, K};
        /* small planes (7x7, 14x14) run the GEMM transposed: its weights are packed the other way */
        const bool swaps = kn_sgemm_swaps(s->Mg, s->out_plane, K);
        kn_const_layout lay = {swaps ? 8 : 1, {s->G, s->Mg, K, 0}};
        const size_t per = swaps ? kn_sgemm_packed_b_floats(s->Mg, K) : kn_sgemm_packed_a_floats(s->Mg, K);
        const float *packed = kn_cpu_const_derived(c, 1, &lay, sizeof(float) * per * (size_t)s->G,
                                                   swaps ? make_packed_weights_t : make_packed_weights, &wp);
        if (packed && (apk = malloc(sizeof(float *) * (size_t)count)) != NULL) {
            for (int64_t op = 0; op < count; op++) apk[op] = packed + (op % s->G) * per;
            if (swaps) g.at_packed = apk;
            else g.a_packed = apk;
        }
    }
    /* a strided 1-D window: the phase rows of every channel, made once on the pool (pt_range) */
    float *xt = NULL;
    int64_t *tap = NULL;
    size_t xt_bytes = 0;
    kiln_status st = KILN_OK;
    /* dilation 1 (and vectors): transposed straight from the input (pack_conv_tr) */
    if (!pointwise && pt_suits(s) && KN_VL > 0 && pc.v.dw == 1 && kn_sgemm_nr() % (KN_VL ? KN_VL : 1) == 0) pc.tr = true;
    else if (!pointwise && pt_suits(s)) {
        pc.pt = pt_geom_of(&pc.v);
        xt_bytes = sizeof(float) * (size_t)(s->N * s->C * pc.pt.plane);
        tap = malloc(sizeof(int64_t) * (size_t)pc.v.KW);
        if (!tap) st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        else st = kn_ctx_scratch(c, xt_bytes, "the strided convolution's phase rows", (void **)&xt);
        if (!st) {
            for (int64_t kw = 0; kw < pc.v.KW; kw++)
                tap[kw] = kw * pc.v.dw % pc.v.sw * pc.pt.ldq + kw * pc.v.dw / pc.v.sw;
            pt_job pj = {x, xt, pc.v, pc.pt};
            const int64_t per = PT_QCHUNK * pc.v.sw + 1;
            kn_parallel_for(c->pool, s->N * s->C * pt_chunks(&pc.pt), per > 8192 ? 1 : 8192 / per + 1, pt_range, &pj);
            pc.xt = xt;
            pc.pt_tap = tap;
        }
    }
    if (pointwise) {
        g.b = bp;
        g.ldb = s->in_plane;
    } else {
        g.pack_b = conv_pack_b;
        g.pack_ctx = &pc;
    }
    if (!st) {
        st = kn_sgemm_run(c->pool, &g);
        if (st) st = kn_kernel_error(c, st, "out of memory in the GEMM");
    }
    if (xt) kn_ctx_scratch_free(c, xt, xt_bytes);
    free(tap);
    free(ap);
    free(cp);
    free(apk);
    free(rbias);
    free(addp);
    return st;
}

/* ------------------------------------------------------------------ direct loops (double) */

/* y[n][m][o] += sum_{c, r} x[n][g*Cg + c][o*s - p + r*d] * w[m][c][r] over any rank. */
#define DEF_DIRECT_CONV(NAME, T, ACC)                                                              \
    static void NAME(const conv_shape *s, const T *x, const T *w, T *y) {                          \
        const kn_window *win = &s->w;                                                              \
        const int nsp = s->nsp;                                                                    \
        for (int64_t n = 0; n < s->N; n++)                                                         \
            for (int64_t m = 0; m < s->M; m++) {                                                   \
                int64_t g = m / s->Mg;                                                             \
                T *yp = y + (n * s->M + m) * s->out_plane;                                         \
                for (int64_t o = 0; o < s->out_plane; o++) {                                       \
                    int64_t base[KN_MAX_SPATIAL], t = o;                                           \
                    for (int i = nsp - 1; i >= 0; i--) {                                           \
                        base[i] = (t % win->out[i]) * win->stride[i] - win->pad_begin[i];          \
                        t /= win->out[i];                                                          \
                    }                                                                              \
                    ACC acc = 0;                                                                   \
                    for (int64_t r = 0; r < s->kk; r++) {                                          \
                        int64_t idx = 0, q = r, pos[KN_MAX_SPATIAL];                               \
                        bool ok = true;                                                            \
                        for (int i = nsp - 1; i >= 0; i--) {                                       \
                            pos[i] = base[i] + (q % win->kernel[i]) * win->dilation[i];            \
                            q /= win->kernel[i];                                                   \
                            ok &= pos[i] >= 0 && pos[i] < win->in[i];                              \
                        }                                                                          \
                        if (!ok) continue;                                                         \
                        for (int i = 0; i < nsp; i++) idx = idx * win->in[i] + pos[i];             \
                        for (int64_t ci = 0; ci < s->Cg; ci++)                                     \
                            acc += (ACC)x[(n * s->C + g * s->Cg + ci) * s->in_plane + idx] *       \
                                   (ACC)w[(m * s->Cg + ci) * s->kk + r];                           \
                    }                                                                              \
                    yp[o] = (T)(yp[o] + acc);                                                      \
                }                                                                                  \
            }                                                                                      \
    }

DEF_DIRECT_CONV(direct_conv_f64, double, double)

kiln_status kn_cpu_conv(kn_kernel_ctx *c) { return kn_cpu_conv_with_epilogue(c, NULL, NULL); }

/* A tensor as float: float16 through vcvtph2ps (kn_ew_f16_to_f32), other types as linalg does. */
static const float *conv_f32_in(const kn_tensor *t, bool *owned) {
    if (t->dtype != KILN_DTYPE_FLOAT16) return kn_linalg_f32_in(t, owned);
    const int64_t n = kn_tensor_count(t);
    float *f = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    *owned = f != NULL;
    if (f) kn_ew_f16_to_f32(t->data, f, n);
    return f;
}

static void f16_weights_make(const void *ctx, void *dst) {
    const kn_tensor *t = ctx;
    kn_ew_f16_to_f32(t->data, dst, kn_tensor_count(t));
}

kiln_status kn_cpu_conv_with_epilogue(kn_kernel_ctx *c, kn_conv_epilogue_fn epi, const void *epi_ctx) {
    return kn_cpu_conv_with_tail(c, epi, epi_ctx, NULL);
}

/* bf16 activations: X and/or Y in bfloat16 (a value the graph keeps in bf16 between two
 * convolutions under precision=bf16 on AMX: opt pass cpu_bf16_values), read and written as they
 * are by the AMX convolution (conv_amx.c) or, for a 1x1 stride-1 one, the bf16 GEMM (B read from
 * bf16 rows, C stored in bf16), where one of them takes the shape. Y in bf16 needs the epilogue to be
 * a clamp (the tail without a residual: a Relu or Clip, which commutes with the rounding). *done
 * false: not taken (the caller converts, as for any other type). */
static kiln_status conv_bf16_io(kn_kernel_ctx *c, const conv_shape *s, const kn_tensor *X, const float *w, bool w_const,
                                const float *bias, kn_tensor *Y, kn_conv_epilogue_fn epi, const void *epi_ctx,
                                const kn_conv_tail *tail, bool *done) {
    *done = false;
    const bool x16 = X->dtype == KILN_DTYPE_BFLOAT16, y16 = Y->dtype == KILN_DTYPE_BFLOAT16;
    if ((!x16 && X->dtype != KILN_DTYPE_FLOAT) || (!y16 && Y->dtype != KILN_DTYPE_FLOAT)) return KILN_OK;
    if (!kn_bgemm_active() || !kn_bgemm_amx() || s->nsp != 2 || s->G != 1 || s->Mg < 16 || s->out_plane < 16 ||
        s->Cg * s->kk < 16 || s->N < 1)
        return KILN_OK;
    if (y16 && epi && !tail) return KILN_OK;
    const bool res = tail && (tail->residual || tail->residual16);
    /* a bf16 Y clamped and rounded; an fp32 Y without a residual clamped as it is stored (no epi) */
    const bool clamp = tail && (y16 || !res);
    const float lo = clamp ? tail->lo : -INFINITY, hi = clamp ? tail->hi : INFINITY;
    const kn_amx_conv_shape as = {s->N, s->C, s->M, s->w.in[0], s->w.in[1], s->w.out[0], s->w.out[1],
                                  s->w.kernel[0], s->w.kernel[1], s->w.pad_begin[0], s->w.pad_begin[1],
                                  s->w.dilation[0], s->w.dilation[1], s->w.stride[0], s->w.stride[1]};
    /* (the tail, residual included, applied as the AMX convolution stores its blocks: no epi) */
    if (x16 ? kn_amx_conv_takes_x16(&as) : kn_amx_conv_suits(&as)) {
        const kn_amx_io io = {x16 ? X->data : NULL, y16 ? Y->data : NULL, tail ? tail->lo : lo, tail ? tail->hi : hi,
                              res ? tail->residual : NULL, res ? tail->residual16 : NULL};
        *done = true;
        return kn_amx_conv_io(c, &as, x16 ? NULL : X->data, w, bias, y16 ? NULL : Y->data, tail ? NULL : epi, epi_ctx,
                              w_const, &io);
    }
    bool pointwise = true;
    for (int i = 0; i < s->nsp; i++)
        pointwise &= s->w.kernel[i] == 1 && s->w.stride[i] == 1 && s->w.pad_begin[i] == 0 && s->w.pad_end[i] == 0;
    if (!pointwise) return KILN_OK;
    /* the 1x1 convolution as conv_f32 runs it: per image, W [M, C] times X [C, plane] */
    const int64_t count = s->N, K = s->C, plane = s->in_plane;
    void **ptrs = calloc((size_t)count * 5, sizeof(void *));
    if (!ptrs) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    const float **ap = (const float **)ptrs, **bp = (const float **)(ptrs + count), **rb = (const float **)(ptrs + 2 * count);
    float **cp = (float **)(ptrs + 3 * count);
    const float **apk = (const float **)(ptrs + 4 * count);
    const uint16_t **b16 = NULL;
    uint16_t **c16 = NULL;
    if ((x16 && !(b16 = calloc((size_t)count, sizeof *b16))) || (y16 && !(c16 = calloc((size_t)count, sizeof *c16)))) {
        free(ptrs);
        free(b16);
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int64_t n = 0; n < count; n++) {
        ap[n] = w;
        rb[n] = bias;
        if (x16) b16[n] = (const uint16_t *)X->data + n * s->C * plane;
        else bp[n] = (const float *)X->data + n * s->C * plane;
        if (y16) c16[n] = (uint16_t *)Y->data + n * s->M * s->out_plane;
        else cp[n] = (float *)Y->data + n * s->M * s->out_plane;
    }
    kn_sgemm_batch g = {.count = count, .M = s->M, .N = s->out_plane, .K = K, .alpha = 1.0f, .beta = 0.0f, .a = ap,
                        .lda = K, .b = bp, .ldb = plane, .c = cp, .ldc = s->out_plane, .row_bias = bias ? rb : NULL};
    conv_epi_ctx ec = {epi, epi_ctx, Y->data};
    kn_bgemm_io io = {(const uint16_t *const *)b16, (uint16_t *const *)c16, lo, hi, false, NULL, 0, NULL};
    const void **addp = NULL;
    if (epi && tail) { /* the residual and a Relu or Clip as C is finished */
        io.tail = true;
        io.lo = tail->lo;
        io.hi = tail->hi;
        if (res) {
            addp = malloc(sizeof(void *) * (size_t)count);
            if (!addp) {
                free(ptrs);
                free(b16);
                free(c16);
                return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
            }
            for (int64_t n = 0; n < count; n++)
                addp[n] = tail->residual ? (const void *)(tail->residual + n * s->M * s->out_plane)
                                         : (const void *)(tail->residual16 + n * s->M * s->out_plane);
            if (tail->residual) io.add = (const float *const *)addp;
            else io.add16 = (const uint16_t *const *)addp;
            io.ld_add = s->out_plane;
        }
    } else if (!y16 && epi) { /* other activations on the fp32 C (conv_f32's epilogue) */
        g.epilogue = conv_gemm_epilogue;
        g.epilogue_ctx = &ec;
    }
    /* constant weights: their kept bf16 form is found through the fp32 packed copy (as conv_f32) */
    if (w_const) {
        conv_weight_pack wp = {w, 1, s->M, K};
        const bool swaps = kn_sgemm_swaps(s->M, s->out_plane, K);
        kn_const_layout lay = {swaps ? 8 : 1, {1, s->M, K, 0}};
        const size_t per = swaps ? kn_sgemm_packed_b_floats(s->M, K) : kn_sgemm_packed_a_floats(s->M, K);
        const float *packed = kn_cpu_const_derived(c, 1, &lay, sizeof(float) * per, swaps ? make_packed_weights_t : make_packed_weights, &wp);
        if (packed) {
            for (int64_t n = 0; n < count; n++) apk[n] = packed;
            if (swaps) g.at_packed = apk;
            else g.a_packed = apk;
        }
    }
    kiln_status st = KILN_OK;
    if (kn_bgemm_io_takes(&g, &io)) {
        *done = true;
        st = kn_bgemm_run_io(c->pool, &g, &io);
    }
    free(addp);
    free(ptrs);
    free(b16);
    free(c16);
    return st ? kn_kernel_error(c, st, "the bf16 GEMM failed") : KILN_OK;
}

/* A convolution with a channel-blocked bf16 X, residual or Y (conv_amx_blocked.h; the graph's
 * x_blocked, z_blocked, y_blocked), on the blocked AMX kernel where it takes the shape and the tail
 * (bias, residual, a clamp). *done false: not taken (the caller converts the blocked operands). */
kiln_status kn_cpu_conv_blocked(kn_kernel_ctx *c, const kn_conv_tail *tail, bool xb, bool zb, bool yb, bool *done) {
    *done = false;
    const kn_tensor *X = c->in[0], *W = c->in[1], *B = c->n_inputs > 2 ? c->in[2] : NULL;
    kn_tensor *Y = c->out[0];
    if (!kn_bgemm_active() || W->dtype != KILN_DTYPE_FLOAT || (B && B->dtype != KILN_DTYPE_FLOAT) ||
        (tail && tail->act != KN_GEMM_ACT_NONE) || (X->dtype != KILN_DTYPE_FLOAT && X->dtype != KILN_DTYPE_BFLOAT16) ||
        (Y->dtype != KILN_DTYPE_FLOAT && Y->dtype != KILN_DTYPE_BFLOAT16) || (xb && X->dtype != KILN_DTYPE_BFLOAT16) ||
        (yb && Y->dtype != KILN_DTYPE_BFLOAT16) || (zb && !(tail && tail->residual16)))
        return KILN_OK;
    conv_shape s;
    KN_TRY(conv_shape_make(c, X, W, false, &s));
    if (s.nsp != 2 || s.G != 1 || (B && kn_tensor_count(B) != s.M)) return KILN_OK;
    kn_blocked_conv a = {{s.N, s.C, s.M, s.w.in[0], s.w.in[1], s.w.out[0], s.w.out[1], s.w.kernel[0], s.w.kernel[1],
                          s.w.pad_begin[0], s.w.pad_begin[1], s.w.dilation[0], s.w.dilation[1], s.w.stride[0],
                          s.w.stride[1]}};
    if (!kn_amx_blocked_suits(&a.s)) return KILN_OK;
    if (xb) a.xb = X->data;
    else if (X->dtype == KILN_DTYPE_BFLOAT16) a.x16 = X->data;
    else a.x = X->data;
    if (yb) a.yb = Y->data;
    else if (Y->dtype == KILN_DTYPE_BFLOAT16) a.y16 = Y->data;
    else a.y = Y->data;
    a.w = W->data;
    a.w_const = true; /* (the packed form is kept only where input 1 is a constant) */
    a.bias = B ? B->data : NULL;
    if (tail && tail->residual) a.add = tail->residual;
    else if (tail && tail->residual16) {
        if (zb) a.addb = tail->residual16;
        else a.add16 = tail->residual16;
    }
    a.lo = tail ? tail->lo : -INFINITY;
    a.hi = tail ? tail->hi : INFINITY;
    *done = true;
    return kn_amx_blocked_conv(c, &a);
}

kiln_status kn_cpu_conv_with_tail(kn_kernel_ctx *c, kn_conv_epilogue_fn epi, const void *epi_ctx,
                                  const kn_conv_tail *tail) {
    const kn_tensor *X = c->in[0], *W = c->in[1], *B = c->n_inputs > 2 ? c->in[2] : NULL;
    kn_tensor *Y = c->out[0];
    conv_shape s;
    KN_TRY(conv_shape_make(c, X, W, false, &s));
    if (B && kn_tensor_count(B) != s.M)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "bias has %lld values for %lld output channels",
                               (long long)kn_tensor_count(B), (long long)s.M);
    if (X->dtype == KILN_DTYPE_DOUBLE) {
        double *y = Y->data;
        for (int64_t n = 0; n < s.N; n++)
            for (int64_t m = 0; m < s.M; m++)
                for (int64_t i = 0; i < s.out_plane; i++)
                    y[(n * s.M + m) * s.out_plane + i] = B ? ((const double *)B->data)[m] : 0.0;
        direct_conv_f64(&s, X->data, W->data, y);
        return KILN_OK; /* fused kernels take float only; they never pass an epilogue here */
    }
    bool ox = false, ow = false, ob = false;
    /* float16 constant weights: converted once per session (then packed once like float ones) */
    const float *w = NULL;
    if (W->dtype == KILN_DTYPE_FLOAT16) {
        kn_const_layout lay = {3, {kn_tensor_count(W), W->dtype, 0, 0}};
        w = kn_cpu_const_derived(c, 1, &lay, sizeof(float) * (size_t)(kn_tensor_count(W) + 1), f16_weights_make, W);
    }
    const bool w_const = w != NULL;
    if (!w) w = conv_f32_in(W, &ow);
    const float *b = B ? conv_f32_in(B, &ob) : NULL;
    if ((X->dtype == KILN_DTYPE_BFLOAT16 || Y->dtype == KILN_DTYPE_BFLOAT16) && w && (!B || b)) {
        bool done = false;
        /* (the bf16 kernels take no activation but the clamp: such a tail goes to epi) */
        kiln_status st = conv_bf16_io(c, &s, X, w, w == W->data || w_const, b, Y, epi, epi_ctx,
                                      tail && tail->act != KN_GEMM_ACT_NONE ? NULL : tail, &done);
        if (done || st) {
            if (ow) free((void *)w);
            if (ob) free((void *)b);
            return st;
        }
    }
    const float *x = conv_f32_in(X, &ox);
    int64_t ny = kn_tensor_count(Y);
    float *y = Y->dtype == KILN_DTYPE_FLOAT ? Y->data : malloc(sizeof(float) * (size_t)(ny > 0 ? ny : 1));
    kiln_status st;
    if (!x || !w || (B && !b) || !y) st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    else if ((st = conv_f32(c, &s, x, w, b, y, y == Y->data ? epi : NULL, epi_ctx,
                              y == Y->data && epi && !(tail && tail->residual16) ? tail : NULL,
                              w == W->data || w_const)) ==
                 KILN_OK &&
             y != Y->data) {
        if (epi) epi(epi_ctx, y, 0, 1, ny, ny); /* converted output: after the whole convolution */
        if (Y->dtype == KILN_DTYPE_FLOAT16) kn_ew_f32_to_f16(y, Y->data, ny);
        else kn_linalg_f32_out(y, Y, ny);
    }
    if (ox) free((void *)x);
    if (ow) free((void *)w);
    if (ob) free((void *)b);
    if (y && y != Y->data) free(y);
    return st;
}

/* ------------------------------------------------------------------ quantised convs */

/* The integer convolutions are exact integer products (qgemm.h): W_g less its zero points
 * [Mg, Cg*kk] times the im2col matrix of x (x's zero point applied by the product; padding reads
 * the zero point itself), made panel by panel straight from x by the GEMM's threads. A 1x1
 * convolution at stride 1 without pads packs x's planes as they are. */

#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

/* one panel's pair of K rows: d[2q] = a[q], d[2q + 1] = b[q] for 16 columns */
static inline void iconv_zip16(const uint8_t *a, const uint8_t *b, uint8_t *d) {
#if defined(__SSE2__)
    const __m128i va = _mm_loadu_si128((const __m128i *)a), vb = _mm_loadu_si128((const __m128i *)b);
    _mm_storeu_si128((__m128i *)d, _mm_unpacklo_epi8(va, vb));
    _mm_storeu_si128((__m128i *)(d + 16), _mm_unpackhi_epi8(va, vb));
#else
    for (int q = 0; q < 16; q++) d[2 * q] = a[q], d[2 * q + 1] = b[q];
#endif
}

/* W less its zero points (per output channel, or one), every group packed as qgemm's A */
typedef struct iconv_w_ctx {
    const conv_shape *s;
    const kn_tensor *W;
    const int32_t *zw; /* per output channel, or NULL */
    int32_t z;
} iconv_w_ctx;

static void make_iconv_w(const void *ctx, void *dst) {
    const iconv_w_ctx *q = ctx;
    const int64_t Kg = q->s->Cg * q->s->kk;
    const size_t per = kn_qgemm_a_words(q->s->Mg, Kg);
    for (int64_t g = 0; g < q->s->G; g++)
        kn_qgemm_pack_a8((const int8_t *)q->W->data + g * q->s->Mg * Kg, q->W->dtype == KILN_DTYPE_INT8, Kg, 1, q->s->Mg,
                         Kg, q->zw ? q->zw + g * q->s->Mg : NULL, q->z, (int32_t *)dst + g * per);
}

/* W's row sums (every group's rows: M x Kg) for the AMX-INT8 product (qgemm_amx.h) */
static void make_iconv_w_sums(const void *ctx, void *dst) {
    const iconv_w_ctx *q = ctx;
    kn_qgemm_amx_row_sums(q->W->data, q->s->Cg * q->s->kk, q->W->dtype == KILN_DTYPE_INT8, q->s->M,
                          q->s->Cg * q->s->kk, dst);
}

/* The im2col matrix of one image and group as qgemm's packed B */
typedef struct iconv_cols {
    const conv_shape *s;
    const void *x; /* the group's Cg planes */
    bool s8;
    int32_t z;
    /* 1-D and 2-D: the group's planes with their padding (the zero point) around them, or NULL:
     * Cg planes of HP x WP bytes, output (oh, ow) and tap (kh, kw) reading
     * (oh*sh + kh*dh, ow*sw + kw*dw) */
    const uint8_t *xp;
    int64_t HP, WP;
} iconv_cols;

/* any rank: element by element, a tap outside x reading the zero point (a' = 0) */
static void iconv_pack_cols(const void *ctx, int64_t n0, int64_t nc, uint8_t *dst) {
    const iconv_cols *j = ctx;
    const conv_shape *s = j->s;
    const kn_window *w = &s->w;
    const int nsp = s->nsp;
    const int64_t K = s->Cg * s->kk, KP = (K + 1) / 2;
    const uint8_t *x = j->x, pad = (uint8_t)j->z;
    for (int64_t p = 0; p * KN_QGEMM_NR < nc; p++) {
        const int64_t cols = min64(KN_QGEMM_NR, nc - p * KN_QGEMM_NR);
        int64_t base[KN_MAX_SPATIAL][KN_QGEMM_NR];
        for (int64_t q = 0; q < cols; q++)
            for (int64_t i = nsp - 1, t = n0 + p * KN_QGEMM_NR + q; i >= 0; i--) {
                base[i][q] = (t % w->out[i]) * w->stride[i] - w->pad_begin[i];
                t /= w->out[i];
            }
        uint8_t *d = dst + p * KP * 2 * KN_QGEMM_NR;
        memset(d, 0, (size_t)(KP * 2 * KN_QGEMM_NR));
        for (int64_t k = 0; k < K; k++) {
            const int64_t ci = k / s->kk;
            int64_t off[KN_MAX_SPATIAL];
            for (int64_t i = nsp - 1, r = k % s->kk; i >= 0; i--) {
                off[i] = (r % w->kernel[i]) * w->dilation[i];
                r /= w->kernel[i];
            }
            uint8_t *dk = d + k / 2 * 2 * KN_QGEMM_NR + k % 2;
            for (int64_t q = 0; q < cols; q++) {
                int64_t idx = 0;
                bool in = true;
                for (int i = 0; i < nsp; i++) {
                    const int64_t pos = base[i][q] + off[i];
                    in &= pos >= 0 && pos < w->in[i];
                    idx = idx * w->in[i] + pos;
                }
                dk[2 * q] = in ? x[ci * s->in_plane + idx] : pad;
            }
        }
    }
}

/* One row k of the im2col matrix of a 1-D or 2-D convolution, columns [n0, n0 + nc), into out:
 * output row by output row, each a run of in-range taps (contiguous at stride 1) between the
 * padding's zero points. */
static void iconv_row2(const iconv_cols *j, int64_t k, int64_t n0, int64_t nc, uint8_t *out) {
    const conv_shape *s = j->s;
    const kn_window *w = &s->w;
    const bool two = s->nsp == 2;
    const int64_t H = two ? w->in[0] : 1, W = w->in[two], OW = w->out[two], KW = w->kernel[two];
    const int64_t sh = two ? w->stride[0] : 1, sw = w->stride[two], ph = two ? w->pad_begin[0] : 0;
    const int64_t dh = two ? w->dilation[0] : 1, dw = w->dilation[two], pw = w->pad_begin[two];
    const int64_t ci = k / s->kk, r = k % s->kk, kh = r / KW, kw = r % KW;
    const int64_t base = kw * dw - pw; /* iw = ow * sw + base */
    /* the output columns whose tap is inside the row: [lo, hi] */
    const int64_t lo = base >= 0 ? 0 : (-base + sw - 1) / sw, hi = W - 1 - base < 0 ? -1 : (W - 1 - base) / sw;
    const uint8_t pad = (uint8_t)j->z, *x = (const uint8_t *)j->x + ci * s->in_plane;
    int64_t q = n0, oh = n0 / OW, ow = n0 % OW;
    while (q < n0 + nc) {
        const int64_t seg = min64(OW - ow, n0 + nc - q), ih = oh * sh - ph + kh * dh;
        uint8_t *o = out + (q - n0);
        const bool row_in = ih >= 0 && ih < H;
        const int64_t a = row_in ? min64(max64(ow, lo), ow + seg) : ow + seg;
        const int64_t b = row_in ? max64(a, min64(ow + seg, hi + 1)) : ow + seg;
        memset(o, pad, (size_t)(a - ow));
        if (b > a) {
            const uint8_t *p = x + ih * W + a * sw + base;
            if (sw == 1) memcpy(o + (a - ow), p, (size_t)(b - a));
            else
                for (int64_t t = 0; t < b - a; t++) o[a - ow + t] = p[t * sw];
        }
        memset(o + (b - ow), pad, (size_t)(ow + seg - b));
        q += seg;
        ow = 0;
        oh++;
    }
}

/* 1-D and 2-D: the im2col rows a pair at a time (iconv_row2), interleaved into the panels */
static void iconv_pack_cols2(const void *ctx, int64_t n0, int64_t nc, uint8_t *dst) {
    const iconv_cols *j = ctx;
    const int64_t K = j->s->Cg * j->s->kk, KP = (K + 1) / 2, panels = (nc + KN_QGEMM_NR - 1) / KN_QGEMM_NR;
    const int64_t width = panels * KN_QGEMM_NR;
    uint8_t *r0 = malloc((size_t)width * 2), *r1 = r0 ? r0 + width : NULL;
    if (!r0) { /* (rare) the general form needs no scratch */
        iconv_pack_cols(ctx, n0, nc, dst);
        return;
    }
    memset(r0, 0, (size_t)width * 2);
    for (int64_t kp = 0; kp < KP; kp++) {
        iconv_row2(j, 2 * kp, n0, nc, r0);
        if (2 * kp + 1 < K) iconv_row2(j, 2 * kp + 1, n0, nc, r1);
        else memset(r1, 0, (size_t)nc);
        for (int64_t p = 0; p < panels; p++)
            iconv_zip16(r0 + p * KN_QGEMM_NR, r1 + p * KN_QGEMM_NR, dst + (p * KP + kp) * 2 * KN_QGEMM_NR);
    }
    free(r0);
}

/* a 1x1 convolution at stride 1 without pads: the planes are B as they are */
static void iconv_pack_planes(const void *ctx, int64_t n0, int64_t nc, uint8_t *dst) {
    const iconv_cols *j = ctx;
    const int64_t K = j->s->Cg, KP = (K + 1) / 2, P = j->s->in_plane, full = nc / KN_QGEMM_NR;
    const uint8_t *x = (const uint8_t *)j->x + n0;
    /* whole panels zipped two planes at a time (kn_qgemm_pack_b8 the rest) */
    for (int64_t p = 0; p < full; p++) {
        uint8_t *d = dst + p * KP * 2 * KN_QGEMM_NR;
        const uint8_t *r = x + p * KN_QGEMM_NR;
        for (int64_t kp = 0; kp < K / 2; kp++, d += 2 * KN_QGEMM_NR, r += 2 * P) iconv_zip16(r, r + P, d);
        if (K % 2) {
            uint8_t zero[KN_QGEMM_NR] = {0};
            iconv_zip16(r, zero, d);
        }
    }
    if (full * KN_QGEMM_NR < nc)
        kn_qgemm_pack_b8(j->x, P, 1, K, n0 + full * KN_QGEMM_NR, nc - full * KN_QGEMM_NR,
                         dst + full * KP * 2 * KN_QGEMM_NR);
}

/* x's Cg planes of one group into j->xp's padded planes (iconv_cols) */
static void iconv_pad_planes(const iconv_cols *j, uint8_t *xp) {
    const conv_shape *s = j->s;
    const kn_window *w = &s->w;
    const bool two = s->nsp == 2;
    const int64_t H = two ? w->in[0] : 1, W = w->in[two], ph = two ? w->pad_begin[0] : 0, pw = w->pad_begin[two];
    const uint8_t pad = (uint8_t)j->z;
    for (int64_t ci = 0; ci < s->Cg; ci++) {
        const uint8_t *x = (const uint8_t *)j->x + ci * s->in_plane;
        for (int64_t r = 0; r < j->HP; r++) {
            uint8_t *d = xp + (ci * j->HP + r) * j->WP;
            const int64_t ih = r - ph;
            if (ih < 0 || ih >= H) {
                memset(d, pad, (size_t)j->WP);
                continue;
            }
            /* columns [pw, pw + W) of the row hold x's, clipped to the padded width */
            const int64_t a = min64(pw, j->WP), b = min64(pw + W, j->WP);
            memset(d, pad, (size_t)a);
            if (b > a) memcpy(d + a, x + ih * W, (size_t)(b - a));
            if (j->WP > max64(a, b)) memset(d + max64(a, b), pad, (size_t)(j->WP - max64(a, b)));
        }
    }
}

/* 1-D and 2-D from the padded planes: each pair of K rows zipped straight into the panels, a
 * panel's 16 columns loaded at once where they lie in one output row at stride 1, gathered else */
static void iconv_pack_padded(const void *ctx, int64_t n0, int64_t nc, uint8_t *dst) {
    const iconv_cols *j = ctx;
    const conv_shape *s = j->s;
    const kn_window *w = &s->w;
    const bool two = s->nsp == 2;
    const int64_t OW = w->out[two], KW = w->kernel[two], sh = two ? w->stride[0] : 1, sw = w->stride[two];
    const int64_t dh = two ? w->dilation[0] : 1, dw = w->dilation[two], WP = j->WP, plane = j->HP * WP;
    const int64_t K = s->Cg * s->kk, KP = (K + 1) / 2, panels = (nc + KN_QGEMM_NR - 1) / KN_QGEMM_NR;
    /* per panel: the offset of its first column and whether its columns are one run; the columns'
     * offsets (past nc: column 0's) for the others */
    int64_t *poff = malloc(sizeof(int64_t) * (size_t)panels * (KN_QGEMM_NR + 1));
    if (!poff) {
        iconv_pack_cols(ctx, n0, nc, dst);
        return;
    }
    int64_t *coff = poff + panels;
    /* kind[p]: 1 a run at stride 1, 2 at stride 2 (every other byte of 32), 0 gathered */
    uint8_t *kind = malloc((size_t)panels);
    if (!kind) {
        free(poff);
        iconv_pack_cols(ctx, n0, nc, dst);
        return;
    }
    for (int64_t p = 0; p < panels; p++) {
        bool run = sw == 1 || sw == 2;
        for (int q = 0; q < KN_QGEMM_NR; q++) {
            const int64_t col = n0 + p * KN_QGEMM_NR + q < n0 + nc ? n0 + p * KN_QGEMM_NR + q : n0;
            coff[p * KN_QGEMM_NR + q] = col / OW * sh * WP + col % OW * sw;
            if (q == 0) poff[p] = coff[p * KN_QGEMM_NR];
            run &= coff[p * KN_QGEMM_NR + q] == poff[p] + q * sw;
        }
        kind[p] = run ? (uint8_t)sw : 0;
    }
    static const uint8_t zero[KN_QGEMM_NR] = {0};
    for (int64_t kp = 0; kp < KP; kp++) {
        const uint8_t *src[2];
        for (int e = 0; e < 2; e++) {
            const int64_t k = 2 * kp + e;
            if (k >= K) {
                src[e] = NULL;
                continue;
            }
            const int64_t ci = k / s->kk, r = k % s->kk, kh = r / KW, kw = r % KW;
            src[e] = j->xp + ci * plane + kh * dh * WP + kw * dw;
        }
        uint8_t *d = dst + kp * 2 * KN_QGEMM_NR;
        for (int64_t p = 0; p < panels; p++, d += KP * 2 * KN_QGEMM_NR) {
            if (kind[p] == 1) {
                iconv_zip16(src[0] + poff[p], src[1] ? src[1] + poff[p] : zero, d);
#if defined(__SSE2__)
            } else if (kind[p] == 2) { /* the even bytes of 32 (the planes have 32 bytes of slack) */
                const __m128i lo = _mm_set1_epi16(0xff);
                const uint8_t *a = src[0] + poff[p];
                const __m128i ea = _mm_packus_epi16(_mm_and_si128(_mm_loadu_si128((const __m128i *)a), lo),
                                                    _mm_and_si128(_mm_loadu_si128((const __m128i *)(a + 16)), lo));
                __m128i eb = _mm_setzero_si128();
                if (src[1]) {
                    const uint8_t *b = src[1] + poff[p];
                    eb = _mm_packus_epi16(_mm_and_si128(_mm_loadu_si128((const __m128i *)b), lo),
                                          _mm_and_si128(_mm_loadu_si128((const __m128i *)(b + 16)), lo));
                }
                _mm_storeu_si128((__m128i *)d, _mm_unpacklo_epi8(ea, eb));
                _mm_storeu_si128((__m128i *)(d + 16), _mm_unpackhi_epi8(ea, eb));
#endif
            } else {
                uint8_t t0[KN_QGEMM_NR], t1[KN_QGEMM_NR] = {0};
                const int64_t *co = coff + p * KN_QGEMM_NR;
                for (int q = 0; q < KN_QGEMM_NR; q++) t0[q] = src[0][co[q]];
                if (src[1])
                    for (int q = 0; q < KN_QGEMM_NR; q++) t1[q] = src[1][co[q]];
                iconv_zip16(t0, t1, d);
            }
        }
    }
    free(poff);
    free(kind);
}

/* Small planes, uint8 x: the product transposed, C^T [out_plane, M] = im2col^T [out_plane, K] x
 * W^T [K, M], through kn_qgemm8 (u8 x s8 pairs by vpmaddubsw, twice vpmaddwd's products an
 * instruction, exact through its residual pairs: qgemm.h). K runs tap-major, (kh, kw, ci), so that
 * an im2col^T row is KH*KW runs of C bytes copied from x in channels-last form. On 5x5 to 15x15
 * planes (128-512 channels, 1 thread) the vpmaddwd form ran 1.5-2.0x ONNX Runtime's time, its
 * tile's arithmetic the bound (the requantisation a few percent); weights whose pairs do not
 * allow the form (full-range ones, about half their pairs) keep it. */
typedef struct iconv_w8_ctx {
    const conv_shape *s;
    const kn_tensor *W;
} iconv_w8_ctx;

/* W^T with K tap-major: wt[(t * C + ci) * M + m] = W[m][ci][t] */
static uint8_t *iconv_w8_transpose(const iconv_w8_ctx *q) {
    const int64_t M = q->s->M, C = q->s->C, kk = q->s->kk;
    uint8_t *wt = malloc((size_t)(M * C * kk));
    if (!wt) return NULL;
    const uint8_t *w = q->W->data;
    for (int64_t m = 0; m < M; m++)
        for (int64_t ci = 0; ci < C; ci++)
            for (int64_t t = 0; t < kk; t++) wt[(t * C + ci) * M + m] = w[(m * C + ci) * kk + t];
    return wt;
}

static void make_iconv_w8_fits(const void *ctx, void *dst) {
    const iconv_w8_ctx *q = ctx;
    uint8_t *wt = iconv_w8_transpose(q);
    /* the form the weights allow: 1 residual, 2 sign (full-range symmetric), 0 neither */
    *(int32_t *)dst = wt ? kn_qgemv8_fits_form(wt, q->W->dtype == KILN_DTYPE_INT8, q->s->C * q->s->kk, q->s->M) : 0;
    free(wt);
}

static void make_iconv_w8(const void *ctx, void *dst) {
    const iconv_w8_ctx *q = ctx;
    uint8_t *wt = iconv_w8_transpose(q);
    if (!wt) { /* (rare) a zero header reads as unusable: the caller takes the other form */
        memset(dst, 0, 64);
        return;
    }
    kn_qgemv8_pack(wt, q->W->dtype == KILN_DTYPE_INT8, q->s->C * q->s->kk, q->s->M, dst);
    free(wt);
}


/* x's C planes of one image, HP x WP with the padding (zx) around them, channels last: xh[(r *
 * WP + c) * C + ci], r = ih + ph, c = iw + pw (8 x 8 blocks of bytes at a time); rows [r0, r1) of
 * xh (iconv_to_hwc_par splits them among the threads) */
static void iconv_to_hwc_rows(const conv_shape *s, const uint8_t *x, uint8_t zx, int64_t HP, int64_t WP, uint8_t *xh,
                              int64_t r0, int64_t r1) {
    const bool two = s->nsp == 2;
    const kn_window *v = &s->w;
    const int64_t H = two ? v->in[0] : 1, W = v->in[two], ph = two ? v->pad_begin[0] : 0, pw = v->pad_begin[two];
    const int64_t C = s->C;
    if (ph >= 0 && pw >= 0 && H + ph <= HP && W + pw <= WP) {
        /* the plane lies inside: only its border is padding (the whole buffer's memset, then the
         * plane over it, wrote xh twice) */
        for (int64_t r = r0; r < r1; r++) {
            if (r < ph || r >= ph + H) {
                memset(xh + r * WP * C, zx, (size_t)(WP * C));
                continue;
            }
            memset(xh + r * WP * C, zx, (size_t)(pw * C));
            memset(xh + (r * WP + pw + W) * C, zx, (size_t)((WP - pw - W) * C));
        }
    } else memset(xh + r0 * WP * C, zx, (size_t)((r1 - r0) * WP * C));
#if defined(__SSE2__)
    /* every column inside (the usual pads): 8 channels x 8 pixels of the flattened plane at a time,
     * rows narrower than 8 (7x7) included, each pixel's 8 bytes stored where its row puts them */
    const int64_t ih0 = max64(max64(0, -ph), r0 - ph), ih1 = min64(min64(H, HP - ph), r1 - ph);
    if (pw >= 0 && W + pw <= WP) {
        if (ih1 <= ih0) return;
        const int64_t P0 = ih0 * W, P1 = ih1 * W;
        /* 8 pixels a step, all their channels (8 x 8 blocks) before the next 8: their 8 lines of xh
         * (C 64) written whole while in L1 (channels outside, each line was written 8 bytes at a
         * time on 8 passes over all of xh: 7.8% of 1x64x56x56 -> 64 k3's time by perf) */
        int64_t pix8 = P0;
        if (C >= 8)
            for (; pix8 + 8 <= P1; pix8 += 8) {
                uint8_t *d[8];
                int64_t ih = pix8 / W, iw = pix8 % W;
                for (int q = 0; q < 8; q++) {
                    d[q] = xh + ((ih + ph) * WP + iw + pw) * C;
                    if (++iw == W) iw = 0, ih++;
                }
                for (int64_t ci0 = 0; ci0 + 8 <= C; ci0 += 8) {
                    __m128i t[4];
                    kn_u8_transpose8x8(x + ci0 * s->in_plane + pix8, s->in_plane, t);
                    for (int q = 0; q < 8; q += 2) {
                        _mm_storel_epi64((__m128i *)(d[q] + ci0), t[q / 2]);
                        _mm_storel_epi64((__m128i *)(d[q + 1] + ci0), _mm_unpackhi_epi64(t[q / 2], t[q / 2]));
                    }
                }
            }
        for (int64_t ci0 = 0; ci0 + 8 <= C; ci0 += 8) {
            int64_t pix = pix8;
            for (; pix < P1; pix++) {
                uint8_t *d = xh + ((pix / W + ph) * WP + pix % W + pw) * C + ci0;
                for (int e = 0; e < 8; e++) d[e] = x[(ci0 + e) * s->in_plane + pix];
            }
        }
        for (int64_t ci = C / 8 * 8; ci < C; ci++)
            for (int64_t pix = P0; pix < P1; pix++)
                xh[((pix / W + ph) * WP + pix % W + pw) * C + ci] = x[ci * s->in_plane + pix];
        return;
    }
#endif
    for (int64_t ih = 0; ih < H; ih++) {
        const int64_t r = ih + ph;
        if (r < r0 || r >= r1) continue;
        const int64_t c0 = max64(0, -pw), c1 = min64(W, WP - pw); /* iw in [c0, c1) lands inside */
        for (int64_t ci0 = 0; ci0 < C; ci0 += 8) {
            const int64_t cn = min64(8, C - ci0);
            int64_t iw = c0;
#if defined(__SSE2__)
            if (cn == 8) /* 8 channels x 8 columns transposed in registers */
                for (; iw + 8 <= c1; iw += 8) {
                    __m128i t[4]; /* t[q] holds columns 2q and 2q + 1, 8 channels each */
                    kn_u8_transpose8x8(x + ci0 * s->in_plane + ih * W + iw, s->in_plane, t);
                    uint8_t *d = xh + (r * WP + iw + pw) * C + ci0;
                    for (int q = 0; q < 4; q++) {
                        _mm_storel_epi64((__m128i *)(d + 2 * q * C), t[q]);
                        _mm_storel_epi64((__m128i *)(d + (2 * q + 1) * C), _mm_unpackhi_epi64(t[q], t[q]));
                    }
                }
#endif
            for (; iw < c1; iw++) {
                uint8_t *d = xh + (r * WP + iw + pw) * C + ci0;
                const uint8_t *sp = x + ci0 * s->in_plane + ih * W + iw;
                for (int64_t e = 0; e < cn; e++) d[e] = sp[e * s->in_plane];
            }
        }
    }
}

typedef struct iconv_hwc_job {
    const conv_shape *s;
    const uint8_t *x;
    uint8_t zx;
    int64_t HP, WP, parts;
    uint8_t *xh;
} iconv_hwc_job;

static void iconv_hwc_range(void *arg, int64_t u0, int64_t u1) {
    const iconv_hwc_job *j = arg;
    iconv_to_hwc_rows(j->s, j->x, j->zx, j->HP, j->WP, j->xh, u0 * j->HP / j->parts, u1 * j->HP / j->parts);
}

/* iconv_to_hwc_rows for all of xh, its rows split among the pool's threads where there are more than
 * 64 KB (made on the calling thread alone it was ~7% of 1x64x56x56 -> 64 k3's time at 1 thread,
 * the other thread waiting at 2) */
static void iconv_to_hwc(kn_threadpool *pool, const conv_shape *s, const uint8_t *x, uint8_t zx, int64_t HP, int64_t WP,
                         uint8_t *xh) {
    const int64_t threads = kn_threadpool_size(pool);
    if (threads <= 1 || HP < 2 * threads || HP * WP * s->C < (64 << 10)) {
        iconv_to_hwc_rows(s, x, zx, HP, WP, xh, 0, HP);
        return;
    }
    iconv_hwc_job j = {s, x, zx, HP, WP, threads, xh};
    kn_parallel_for(pool, threads, 1, iconv_hwc_range, &j);
}

/* QLinearConv's requantisation for the depthwise kernel or kn_qgemm's rows_done to do, or NULL */
typedef struct iconv_rq {
    const float *r; /* M scales */
    double zy;
    bool s8;
    void *y;
    bool done; /* set when y holds the output */
} iconv_rq;

/* The im2col^T rows [r0, r1) of one image (from xh, channels last) and their product, on one
 * thread: the threads' split when kn_qgemm8's own (panels of 32 output channels) has too few */
typedef struct iconv_rows8_job {
    const conv_shape *s;
    const uint8_t *xh;
    uint8_t *cols;     /* the rows made here (unless direct) */
    const uint8_t *a;  /* the product's rows: cols, or x itself (a 1x1 plane, pointwise) */
    int32_t *ct;
    const void *w8;
    int64_t WP, chunks;
    int32_t zx, zw;
    bool direct, w_s8;
    atomic_int failed;
    /* QLinearConv on planes of several positions (iconv_rows8's fused form): a chunk's rows of ct
     * plus the bias requantised into yt and transposed into y's planes where they are made */
    const struct iconv_rq *rq;
    const int32_t *bias;
    uint8_t *yt, *y;
    int64_t cols_chunks; /* iconv_cols_range's, ahead of a product split by its channels */
    /* kn_qgemm8 reads the rows in place from xh (its p0 set per call; no cols) */
    bool use_taps;
    kn_qgemm8_taps taps;
} iconv_rows8_job;

/* chunk u of `chunks` over P rows: [rows8_at(u), rows8_at(u + 1)), bounds at multiples of 8 (the
 * byte transposes' blocks of positions) but the last */
static int64_t rows8_at(int64_t u, int64_t chunks, int64_t P) { return u >= chunks ? P : u * P / chunks / 8 * 8; }

/* n bytes from sp to d, inline (im2col^T's runs of C or KW * C bytes: a memcpy call per 64-byte
 * run, and the loop around it, were 15% of 1x64x56x56 -> 64 k3 by perf) */
static inline void iconv_copy(uint8_t *d, const uint8_t *sp, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512BW__)
    for (; i + 64 <= n; i += 64) _mm512_storeu_si512((void *)(d + i), _mm512_loadu_si512((const void *)(sp + i)));
    if (i < n) {
        const __mmask64 m = ~0ULL >> (64 - (n - i));
        _mm512_mask_storeu_epi8(d + i, m, _mm512_maskz_loadu_epi8(m, sp + i));
    }
    return;
#elif defined(__AVX2__)
    for (; i + 32 <= n; i += 32)
        _mm256_storeu_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(sp + i)));
#endif
    if (i < n) memcpy(d + i, sp + i, (size_t)(n - i));
}

/* im2col^T's rows [r0, r1) from xh: along W without dilation a kernel row's KW taps are KW * C
 * bytes side by side in xh, one run */
static void iconv_rows8_cols(const iconv_rows8_job *j, int64_t r0, int64_t r1, uint8_t *dst) {
    const conv_shape *s = j->s;
    const bool two = s->nsp == 2;
    const kn_window *v = &s->w;
    const int64_t OW = v->out[two], KH = two ? v->kernel[0] : 1, KW = v->kernel[two], C = s->C, K = C * s->kk;
    const int64_t sh = two ? v->stride[0] : 1, sw = v->stride[two], dh = two ? v->dilation[0] : 1, dw = v->dilation[two];
    const int64_t run = dw == 1 ? KW * C : C, runs = dw == 1 ? 1 : KW;
    int64_t oh = r0 / OW, ow = r0 % OW;
    for (int64_t p = r0; p < r1; p++) {
        uint8_t *row = dst + (p - r0) * K;
        for (int64_t kh = 0; kh < KH; kh++) {
            const uint8_t *src = j->xh + ((oh * sh + kh * dh) * j->WP + ow * sw) * C;
            for (int64_t kw = 0; kw < runs; kw++, row += run) iconv_copy(row, src + kw * dw * C, run);
        }
        if (++ow == OW) ow = 0, oh++;
    }
}

/* (the rows alone, chunk by chunk, ahead of a product split by its output channels) */
static void iconv_cols_range(void *arg, int64_t u0, int64_t u1) {
    const iconv_rows8_job *j = arg;
    const int64_t P = j->s->out_plane;
    const int64_t K = j->s->C * j->s->kk;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t r0 = rows8_at(u, j->cols_chunks, P);
        iconv_rows8_cols(j, r0, rows8_at(u + 1, j->cols_chunks, P), j->cols + r0 * K);
    }
}

static void iconv_rq_done(const void *ctx, int64_t i0, int64_t i1, int64_t n0, int64_t nc);

/* kn_qgemm8's done for a call on rows from r0 on (its rows count from 0) */
typedef struct iconv_done8 {
    const iconv_rows8_job *j;
    int64_t r0;
} iconv_done8;

static void iconv_rq_done_at(const void *ctx, int64_t i0, int64_t i1, int64_t n0, int64_t nc) {
    const iconv_done8 *d = ctx;
    iconv_rq_done(d->j, d->r0 + i0, d->r0 + i1, n0, nc);
}

/* rows [r0, r1)'s product, their im2col^T rows at a; with rq (QLinearConv) requantised by
 * kn_qgemm8's stores into yt and transposed into y's planes there */
static void iconv_rows8_rows(iconv_rows8_job *j, kn_threadpool *pool, int64_t r0, int64_t r1, const uint8_t *a) {
    const int64_t K = j->s->C * j->s->kk, M = j->s->M;
    const iconv_done8 dd = {j, r0};
    kn_qgemm8_taps tp = j->taps;
    tp.p0 = r0;
    const kn_qgemm8_out fo = {.rq_y = j->rq ? j->yt + r0 * M : NULL, .rq_ldy = M, .rq_r = j->rq ? j->rq->r : NULL,
                              .rq_bias = j->bias, .rq_zy = j->rq ? j->rq->zy : 0, .rq_s8 = j->rq && j->rq->s8,
                              .done = j->rq ? iconv_rq_done_at : NULL, .done_ctx = &dd, .taps = j->use_taps ? &tp : NULL};
    if (kn_qgemm8_run(pool, j->w8, a, K, r1 - r0, j->zx, j->zw, j->w_s8, j->ct ? j->ct + r0 * M : NULL, M,
                      j->rq || j->use_taps ? &fo : NULL))
        atomic_store(&j->failed, 1);
}

/* blocks [u0, u1) of `chunks` over the rows, each made and multiplied while in cache, in the
 * first block's place of cols (the whole im2col^T made first, 1.8 MB on 1x64x56x56 k3, was read
 * back from L3 once per panel; made block by block into fresh lines, its stores waited on them) */
static void iconv_rows8_range(void *arg, int64_t u0, int64_t u1) {
    iconv_rows8_job *j = arg;
    const int64_t P = j->s->out_plane, K = j->s->C * j->s->kk;
    uint8_t *buf = j->direct || j->use_taps ? NULL : j->cols + rows8_at(u0, j->chunks, P) * K;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t r0 = rows8_at(u, j->chunks, P), r1 = rows8_at(u + 1, j->chunks, P);
        if (r1 <= r0) continue;
        if (buf) iconv_rows8_cols(j, r0, r1, buf);
        iconv_rows8_rows(j, NULL, r0, r1, buf ? buf : j->use_taps ? NULL : j->a + r0 * K);
    }
}


/* a[i] += b[i], i < n */
static void iconv_add_bias(int32_t *a, const int32_t *b, int64_t n) {
    int64_t i = 0;
#if defined(__AVX2__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(a + i), _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(a + i)),
                                                                 _mm256_loadu_si256((const __m256i *)(b + i))));
#endif
    for (; i < n; i++) a[i] += b[i];
}

/* y[m * ys + p] = t[p * ts + m]: P rows of M bytes (ts apart) to M planes (ys apart) of P (8 x 8
 * blocks) */
static void iconv_bytes_to_planes(const uint8_t *t, int64_t ts, int64_t P, int64_t M, uint8_t *y, int64_t ys) {
    int64_t m0 = 0;
#if defined(__SSE2__)
    for (; m0 + 8 <= M; m0 += 8) {
        int64_t p0 = 0;
        for (; p0 + 8 <= P; p0 += 8) {
            __m128i q[4]; /* q[i]: channel m0 + 2i's 8 positions, then m0 + 2i + 1's */
            kn_u8_transpose8x8(t + p0 * ts + m0, ts, q);
            for (int i = 0; i < 4; i++) {
                _mm_storel_epi64((__m128i *)(y + (m0 + 2 * i) * ys + p0), q[i]);
                _mm_storel_epi64((__m128i *)(y + (m0 + 2 * i + 1) * ys + p0), _mm_unpackhi_epi64(q[i], q[i]));
            }
        }
        for (int64_t m = m0; m < m0 + 8; m++)
            for (int64_t p = p0; p < P; p++) y[m * ys + p] = t[p * ts + m];
    }
#endif
    for (int64_t m = m0; m < M; m++)
        for (int64_t p = 0; p < P; p++) y[m * ys + p] = t[p * ts + m];
}

/* Whether the transposed form takes this convolution: 1-D or 2-D, one group, uint8 x, constant
 * W and w zero points (all one value), 16 output channels or more unless the plane is one position
 * (a product of one row), planes of at most 4096 outputs and an im2col^T of at most
 * 8 MB (28x28 and 56x56 planes gained too: 1.47x ORT's time to 1.09 and 1.19) */
static bool iconv_rows8_wanted(kn_kernel_ctx *c, const conv_shape *s, const kn_tensor *X, int w_in, int wz_in,
                               const kn_tensor *wz) {
    if (X->dtype != KILN_DTYPE_UINT8 || s->G != 1 || s->nsp > 2 || s->out_plane > 4096 || (s->M < 16 && s->out_plane > 1) || s->C < 1 ||
        s->out_plane * s->C * s->kk > ((int64_t)8 << 20))
        return false;
    if (!kn_cpu_input_is_const(c, w_in) || (wz && !kn_cpu_input_is_const(c, wz_in))) return false;
    /* the zero points all one value: every element's bytes those of the first (one memcmp: the
     * loop over int32 copies was a sixteenth of int_conv's own time on a one-position layer) */
    const int64_t nwz = wz ? kn_tensor_count(wz) : 0;
    const size_t es = wz ? kiln_dtype_size(wz->dtype) : 0;
    return nwz <= 1 || (es && !memcmp(wz->data, (const char *)wz->data + es, es * (size_t)(nwz - 1)));
}


/* kn_qgemm8's done where it requantises the product into yt (split by its output channels): rows
 * [i0, i1) of channels [n0, n0 + nc) transposed into y's planes while in cache (the int32 sums
 * written, read back, requantised and transposed in a pass of their own after the product: a
 * second read of all the sums, and another wake of the threads) */
static void iconv_rq_done(const void *ctx, int64_t i0, int64_t i1, int64_t n0, int64_t nc) {
    const iconv_rows8_job *j = ctx;
    const int64_t M = j->s->M, P = j->s->out_plane;
    iconv_bytes_to_planes(j->yt + i0 * M + n0, M, i1 - i0, nc, j->y + n0 * P + i0, P);
}

/* acc = bias + the product (int_conv's contract) through the transposed form, or with rq (QLinearConv)
 * on planes of several positions y itself (rq->done set); false when the weights' pairs do not
 * allow it (nothing written) */
static bool iconv_rows8(kn_kernel_ctx *c, const conv_shape *s, const kn_tensor *X, int w_in, int32_t zx, int32_t zw,
                        const kn_tensor *bias, int32_t *acc, iconv_rq *rq, kiln_status *st) {
    const kn_tensor *W = c->in[w_in];
    const int64_t K = s->C * s->kk, M = s->M, P = s->out_plane, C = s->C;
    iconv_w8_ctx wc = {s, W};
    const kn_const_layout fits_lay = {65, {M, C, s->kk, 0}}, lay = {64, {M, C, s->kk, 0}};
    const int32_t *fits = kn_cpu_const_derived(c, w_in, &fits_lay, sizeof(int32_t), make_iconv_w8_fits, &wc);
    /* the sign form (full-range symmetric weights) beats the old path only on small planes:
     * 0.69-0.86x its time up to 14x14, 1.05-1.18x from 28x28 (helper-57's results, 12-05) */
    if (!fits || !*fits || (*fits == 2 && P > 256)) return false;
    const void *w8 = kn_cpu_const_derived(c, w_in, &lay, kn_qgemv8_bytes(K, M), make_iconv_w8, &wc);
    if (!w8 || kn_qgemv8_form(w8) != *fits) return false;
    /* residual entries cost a scalar multiply-add each per output position: past 16 positions
     * kn_qgemm's exact int16 form was the faster (ppocr_mobile_v2_cls_qdq's 1x1 convolutions of
     * 192-1152 positions with 10-80 entries: 0.5-0.8x the time here, helper-59 12-05) */
    if (kn_qgemv8_residuals(w8) > 0 && P > 16) return false;
    const bool two = s->nsp == 2;
    const kn_window *v = &s->w;
    const int64_t OH = two ? v->out[0] : 1, OW = v->out[two], KH = two ? v->kernel[0] : 1, KW = v->kernel[two];
    const int64_t sh = two ? v->stride[0] : 1, sw = v->stride[two], dh = two ? v->dilation[0] : 1, dw = v->dilation[two];
    const int64_t HP = (OH - 1) * sh + (KH - 1) * dh + 1, WP = (OW - 1) * sw + (KW - 1) * dw + 1;
    /* a 1x1 plane, pointwise, unpadded: x's C bytes are im2col^T's one row as they are (no xh) */
    bool in_place = P == 1 && s->kk == 1 && s->in_plane == 1;
    for (int i = 0; i < s->nsp; i++) in_place &= v->pad_begin[i] == 0;
    const bool direct = in_place || (s->kk == 1 && sh == 1 && sw == 1 && HP * WP == P); /* xh is im2col^T */
    /* kn_qgemm8 reading im2col^T's rows in place from xh (a kernel row's KW * C bytes a run, or a
     * tap's C with dilation along W): no copy of K bytes a position (the copies were ~10% of
     * 1x64x56x56 -> 64 k3 by perf, helper-113) */
    const int64_t nseg = dw == 1 ? KH : KH * KW;
    int64_t *seg_off = direct ? NULL : malloc(sizeof(int64_t) * (size_t)nseg);
    const kn_qgemm8_taps taps = {NULL, 0, OW, sh * WP * C, sw * C, nseg, dw == 1 ? KW * C : C, seg_off};
    for (int64_t kh = 0; seg_off && kh < KH; kh++)
        for (int64_t kw = 0; kw < (dw == 1 ? 1 : KW); kw++) seg_off[kh * (dw == 1 ? 1 : KW) + kw] = (kh * dh * WP + kw * dw) * C;
    const bool use_taps = seg_off && kn_qgemm8_taps_direct(w8, &taps);
    /* (64-byte aligned: C = 64 runs of whole lines, each load and store in one line) */
    uint8_t *xh = in_place ? NULL : kn_aligned_alloc(64, (size_t)(HP * WP * C));
    uint8_t *cols = direct ? xh : use_taps ? NULL : kn_aligned_alloc(64, (size_t)(P * K));
    /* one position: ct's [P][M] is acc's [M][P], the product written into acc (no ct); QLinearConv
     * on several: requantised from kn_qgemm8's registers (no ct) */
    const bool fused = rq && rq->r && P > 1;
    int32_t *ct = P == 1 || fused ? NULL : malloc(sizeof(int32_t) * (size_t)(P * M)), *bown = NULL;
    /* the bias as int32 (QLinearConv's type: its data as they are) */
    const int32_t *bv = bias && bias->dtype == KILN_DTYPE_INT32 ? (const int32_t *)bias->data : NULL;
    if (bias && !bv && (bown = malloc(sizeof(int32_t) * (size_t)M))) {
        kn_q_int32_values(bias, M, bown);
        bv = bown;
    }
    /* QLinearConv, several positions: each row of ct (a position's M channels) requantised with the
     * channels' scales in the lanes into yt [P][M], then its bytes transposed into y's planes (the
     * int32 transposition and a requantisation per channel, whose rows of P ended in a partial
     * vector each, were a fifth of a 1x256x7x7 -> 256 1x1 layer) */
    uint8_t *yt = fused ? malloc((size_t)(P * M)) : NULL;
    *st = KILN_OK;
    if ((!in_place && !xh) || (!direct && !use_taps && !cols) || (!direct && !seg_off) || (P > 1 && !fused && !ct) ||
        (bias && !bv) || (fused && !yt))
        *st = KILN_ERR_OUT_OF_MEMORY;
    /* threads past kn_qgemm8's panels of 32 output channels, or planes of 256 outputs and more
     * (whose im2col^T, made on one thread, kept 1x64x56x56 3x3 from gaining on a second): the rows
     * split among the threads instead */
    const int64_t threads = kn_threadpool_size(c->pool), panels = (M + 31) / 32;
    const bool split = threads > 1 && (threads > panels || P >= 256) && (double)P * (double)M * (double)K >= 4e5 &&
                       P >= 32;
    /* im2col^T's rows in blocks of ~128 KB, each multiplied while in L2 (one thread, or the rows'
     * split: blocks of the split's chunks) */
    const int64_t blocks = direct ? 1 : max64(1, min64(P / 8, use_taps ? P * M / (32 << 10) : P * K / (128 << 10)));
    const bool serial = threads <= 1;
    /* (split: a multiple of the threads, kn_parallel_for's chunks being one contiguous run each) */
    const int64_t chunks = split ? min64(max64(P / 8, 1), (max64(min64(threads, P / 16), blocks) + threads - 1) / threads * threads)
                                 : serial ? blocks : 1;
    iconv_rows8_job job = {s, xh, cols, cols, ct, w8, WP, chunks, zx, zw, direct, W->dtype == KILN_DTYPE_INT8};
    job.use_taps = use_taps, job.taps = taps;
    /* a product split by its output channels: im2col^T's rows before it split among the threads
     * by rows too (made on the calling thread alone they and the requantisation were ~7% of
     * 1x128x14x14 k3 per channel at 1 thread by perf, the other thread idle meanwhile) */
    job.cols_chunks = threads > 1 && P >= 32 && (double)P * (double)M * (double)K >= 4e5 ? min64(threads, P / 16) : 1;
    atomic_init(&job.failed, 0);
    for (int64_t n = 0; *st == KILN_OK && n < s->N; n++) {
        const uint8_t *xn = (const uint8_t *)X->data + n * C * s->in_plane;
        int32_t *an = acc + n * M * P;
        if (in_place) job.a = xn;
        else iconv_to_hwc(c->pool, s, xn, (uint8_t)zx, HP, WP, xh);
        job.taps.x = xh;
        if (P == 1) job.ct = an;
        if (fused) job.rq = rq, job.bias = bv, job.yt = yt, job.y = (uint8_t *)rq->y + n * M * P;
        if (split) kn_parallel_for(c->pool, job.chunks, 1, iconv_rows8_range, &job);
        else if (serial) iconv_rows8_range(&job, 0, job.chunks);
        else {
            /* (im2col^T's rows split among the threads ahead of the product's own split) */
            const bool cols_split = !direct && !use_taps && job.cols_chunks > 1;
            if (cols_split) kn_parallel_for(c->pool, job.cols_chunks, 1, iconv_cols_range, &job);
            else if (!direct && !use_taps) iconv_rows8_cols(&job, 0, P, cols);
            iconv_rows8_rows(&job, c->pool, 0, P, job.a);
        }
        if (atomic_load(&job.failed)) *st = KILN_ERR_OUT_OF_MEMORY;
        if (P == 1) { /* the bias, one vector pass */
            if (bv) iconv_add_bias(an, bv, M);
            continue;
        }
        if (fused) continue; /* (requantised by the product's blocks, or the chunks' rows) */
        /* back to planes, bias added: 8 x 8 blocks */
        for (int64_t m0 = 0; m0 < M; m0 += 8)
            for (int64_t p0 = 0; p0 < P; p0 += 8) {
#if defined(__AVX2__)
                if (m0 + 8 <= M && p0 + 8 <= P) {
                    __m256i w[8], t[8];
                    for (int e = 0; e < 8; e++) w[e] = _mm256_loadu_si256((const __m256i *)(ct + (p0 + e) * M + m0));
                    kn_q_transpose8x32(w, t);
                    for (int e = 0; e < 8; e++)
                        _mm256_storeu_si256((__m256i *)(an + (m0 + e) * P + p0),
                                            _mm256_add_epi32(t[e], _mm256_set1_epi32(bv ? bv[m0 + e] : 0)));
                    continue;
                }
#endif
                for (int64_t m = m0; m < min64(m0 + 8, M); m++) {
                    const int32_t b = bv ? bv[m] : 0;
                    for (int64_t p = p0; p < min64(p0 + 8, P); p++) an[m * P + p] = ct[p * M + m] + b;
                }
            }
    }
    if (cols != xh) free(cols);
    free(xh);
    free(seg_off);
    free(ct);
    free(bown);
    free(yt);
    if (fused && *st == KILN_OK) rq->done = true;
    return true;
}

/* acc (the output's shape, int32) = bias (or 0) + the convolution of x - x_zero_point by
 * w - w_zero_point. Inputs x, its zero point, W, its zero point by index (past the inputs: none). */
/* kn_qgemm's rows_done for QLinearConv: a finished block of one image's group (rows are its output
 * channels, columns output positions), its bias added and requantised into y while in cache (a
 * separate pass after, and the bias written into all of acc before, read and wrote the whole int32
 * output through L3 on large planes: a third of a 1x1 16 -> 32 convolution on 112x112) */
typedef struct iconv_done {
    int32_t *c;          /* the group's rows of acc, P apart */
    const int32_t *bias; /* the group's, or NULL */
    const float *r;      /* the group's scales */
    double zy;
    bool s8;
    uint8_t *y; /* the group's rows of the output */
    int64_t P;
} iconv_done;

static void iconv_rows_done(const void *ctx, int64_t m0, int64_t m1, int64_t n0, int64_t nc) {
    const iconv_done *d = ctx;
    if (d->P == 1) { /* one position: the rows' sums side by side, requantised at once with their
                      * scales in the lanes (a call per value was a sixth of a 200 -> 50 layer) */
        int32_t *c = d->c + m0;
        for (int64_t m = m0; d->bias && m < m1; m++) c[m - m0] += d->bias[m];
        kn_q_requant_cols(c, m1 - m0, d->r + m0, d->zy, d->s8, d->y + m0);
        return;
    }
    for (int64_t m = m0; m < m1; m++) {
        int32_t *c = d->c + m * d->P + n0;
        if (d->bias) {
            const int32_t b = d->bias[m]; /* (read once: c and bias may alias as far as C knows) */
            for (int64_t q = 0; q < nc; q++) c[q] += b;
        }
        kn_q_requant(c, nc, d->r[m], d->zy, d->s8, d->y + m * d->P + n0);
    }
}

static void make_qdw_weights(const void *ctx, void *dst) { kn_qdw_pack_weights(ctx, dst); }

static kiln_status int_conv(kn_kernel_ctx *c, int x_in, int xz_in, int w_in, int wz_in, const kn_tensor *bias,
                            conv_shape *s, int32_t *acc, iconv_rq *rq) {
    const kn_tensor *X = c->in[x_in], *W = c->in[w_in];
    const kn_tensor *xz = xz_in < c->n_inputs ? c->in[xz_in] : NULL, *wz = wz_in < c->n_inputs ? c->in[wz_in] : NULL;
    KN_TRY(conv_shape_make(c, X, W, false, s));
    const int64_t nwz = wz ? kn_tensor_count(wz) : 0;
    if (nwz > 1 && nwz != s->M)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "w_zero_point has %lld values for %lld output channels",
                               (long long)nwz, (long long)s->M);
    if (s->N * s->M * s->out_plane == 0) return KILN_OK;
    const int64_t Kg = s->Cg * s->kk;
    const size_t per_group = kn_qgemm_a_words(s->Mg, Kg), wbytes = sizeof(int32_t) * per_group * (size_t)s->G;
    /* depthwise: conv_int_dw.h, on planes of every size (its loads and stores bounded: 7600 hostile
     * one-node cases from 1x1 up, byte-exact against the qgemm path, clean under ASan+UBSan; 6-25x
     * faster than qgemm's one-row products on 1x1 to 15x15 planes) */
    const bool depthwise = s->Cg == 1 && s->nsp <= 2 && (s->G > 1 || s->Mg <= 4);
    /* AMX-INT8 (qgemm_amx.h): the weights' rows as they are, their zero points applied after;
     * ahead of the transposed form below (1x64x56x56 k3: 0.2x its time) */
    const bool amx = !depthwise && kn_qgemm_amx_pays(s->Mg, s->out_plane, Kg);
    /* the transposed form (ahead of the zero points' int32 copy, which it does not read) */
    if (!depthwise && !amx && iconv_rows8_wanted(c, s, X, w_in, wz_in, wz)) {
        kiln_status st = KILN_OK;
        const int32_t zx = xz && kn_tensor_count(xz) ? (int32_t)kn_tensor_get_i64(xz, 0) : 0;
        if (iconv_rows8(c, s, X, w_in, zx, nwz ? (int32_t)kn_tensor_get_i64(wz, 0) : 0, bias, acc, rq, &st))
            return st ? kn_kernel_error(c, st, "out of memory") : KILN_OK;
    }
    int32_t *zw = nwz > 1 ? malloc(sizeof(int32_t) * (size_t)nwz) : NULL;
    if (nwz > 1 && !zw) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (zw) kn_q_int32_values(wz, nwz, zw);
    if (depthwise) {
        int32_t *bv = bias ? malloc(sizeof(int32_t) * (size_t)s->M) : NULL;
        if (bv) kn_q_int32_values(bias, s->M, bv);
        const bool two = s->nsp == 2;
        const kn_window *v = &s->w;
        kn_qdw d = {s->N, s->C, s->Mg, two ? v->in[0] : 1, v->in[two], two ? v->out[0] : 1, v->out[two],
                    two ? v->kernel[0] : 1, v->kernel[two], two ? v->stride[0] : 1, v->stride[two],
                    two ? v->pad_begin[0] : 0, v->pad_begin[two], two ? v->dilation[0] : 1, v->dilation[two],
                    X->data, X->dtype == KILN_DTYPE_INT8, xz && kn_tensor_count(xz) ? (int32_t)kn_tensor_get_i64(xz, 0) : 0,
                    W->data, W->dtype == KILN_DTYPE_INT8, zw, nwz == 1 ? (int32_t)kn_tensor_get_i64(wz, 0) : 0,
                    acc, bv};
        if (rq && rq->r) {
            d.rq = rq->r, d.zy = rq->zy, d.y_s8 = rq->s8, d.y8 = rq->y;
            rq->done = true;
        }
        /* the weight pairs kept per session where W and its zero points are constants (packed per
         * call they were a ninth of a 200-channel 5x5 layer on 2x96 planes) */
        if (kn_cpu_input_is_const(c, w_in) && (!wz || kn_cpu_input_is_const(c, wz_in))) {
            const kn_const_layout lay = {66, {s->M, s->w.kernel[0], s->kk, (int64_t)(intptr_t)wz}};
            d.wk = kn_cpu_const_derived(c, w_in, &lay, sizeof(int32_t) * (size_t)kn_qdw_weights_words(&d), make_qdw_weights, &d);
        }
        const kiln_status dst = bias && !bv ? KILN_ERR_OUT_OF_MEMORY : kn_qdw_conv(c->pool, &d);
        free(zw);
        free(bv);
        return dst ? kn_kernel_error(c, dst, "out of memory") : KILN_OK;
    }
    /* the packed weights, kept per session when they and their zero points are constants */
    iconv_w_ctx wc = {s, W, zw, nwz == 1 ? (int32_t)kn_tensor_get_i64(wz, 0) : 0};
    const int32_t *wp = NULL;
    int32_t *wown = NULL;
    if (!amx && (!wz || kn_cpu_input_is_const(c, wz_in))) {
        kn_const_layout lay = {61, {s->M, s->G, Kg, (int64_t)(intptr_t)wz}};
        wp = kn_cpu_const_derived(c, w_in, &lay, wbytes, make_iconv_w, &wc);
    }
    const int32_t *wsums = NULL; /* AMX: W's row sums, kept with a constant W */
    if (amx) {
        const kn_const_layout lay = {68, {s->M, s->G, Kg, 0}};
        wsums = kn_cpu_const_derived(c, w_in, &lay, sizeof(int32_t) * (size_t)s->M, make_iconv_w_sums, &wc);
    }
    if (!amx && !wp && (wown = kn_aligned_alloc(64, wbytes))) {
        make_iconv_w(&wc, wown);
        wp = wown;
    }
    if (!amx && !wp) {
        free(zw);
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    /* QLinearConv: bias and requantisation block by block in kn_qgemm (iconv_rows_done) */
    const bool fused = rq && rq->r;
    int32_t *bv = fused && bias ? malloc(sizeof(int32_t) * (size_t)s->M) : NULL;
    if (fused && bias && !bv) {
        free(wown);
        free(zw);
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (bv) kn_q_int32_values(bias, s->M, bv);
    if (bias && !fused)
        for (int64_t n = 0; n < s->N; n++)
            for (int64_t m = 0; m < s->M; m++) {
                const int32_t b0 = (int32_t)kn_tensor_get_i64(bias, m);
                int32_t *a = acc + (n * s->M + m) * s->out_plane;
                for (int64_t o = 0; o < s->out_plane; o++) a[o] = b0;
            }
    bool pointwise = true;
    for (int i = 0; i < s->nsp; i++)
        pointwise &= s->w.kernel[i] == 1 && s->w.stride[i] == 1 && s->w.pad_begin[i] == 0 && s->w.pad_end[i] == 0;
    const int32_t zx = xz && kn_tensor_count(xz) ? (int32_t)kn_tensor_get_i64(xz, 0) : 0;
    /* 1-D and 2-D: the group's planes padded once (iconv_pack_padded), within 64 MB */
    uint8_t *xpad = NULL;
    int64_t HP = 1, WP = 1;
    if (!pointwise && s->nsp <= 2) {
        const bool two = s->nsp == 2;
        const kn_window *v = &s->w;
        HP = two ? (v->out[0] - 1) * v->stride[0] + (v->kernel[0] - 1) * v->dilation[0] + 1 : 1;
        WP = (v->out[two] - 1) * v->stride[two] + (v->kernel[two] - 1) * v->dilation[two] + 1;
        if (s->Cg * HP * WP <= ((int64_t)64 << 20)) xpad = malloc((size_t)(s->Cg * HP * WP + 32));
    }
    kiln_status st = KILN_OK;
    for (int64_t n = 0; st == KILN_OK && n < s->N; n++)
        for (int64_t g = 0; st == KILN_OK && g < s->G; g++) {
            iconv_cols job = {s, (const int8_t *)X->data + (n * s->C + g * s->Cg) * s->in_plane,
                              X->dtype == KILN_DTYPE_INT8, zx, xpad, HP, WP};
            if (xpad) iconv_pad_planes(&job, xpad);
            const int64_t at = (n * s->M + g * s->Mg) * s->out_plane;
            iconv_done done = {acc + at, bv ? bv + g * s->Mg : NULL, fused ? rq->r + g * s->Mg : NULL,
                               fused ? rq->zy : 0, fused && rq->s8, fused ? (uint8_t *)rq->y + at : NULL, s->out_plane};
            const kn_qgemm_pack_b_fn pack = pointwise ? iconv_pack_planes
                                            : xpad    ? iconv_pack_padded
                                            : s->nsp <= 2 ? iconv_pack_cols2
                                                          : iconv_pack_cols;
            if (amx) {
                /* B straight from the planes (pointwise) or the padded planes at stride 1 or 2
                 * along W; else the pair packers' panels, converted */
                const bool two = s->nsp == 2;
                const kn_window *v = &s->w;
                kn_qgemm_amx_planes pl = {(const uint8_t *)job.x, s->in_plane, 1, s->out_plane, 1, 1, 1, 1, 1, 1};
                if (!pointwise)
                    pl = (kn_qgemm_amx_planes){xpad, HP * WP, WP, v->out[two], two ? v->stride[0] : 1,
                                               two ? v->kernel[0] : 1, v->kernel[two], two ? v->dilation[0] : 1,
                                               v->dilation[two], v->stride[two]};
                const bool planes = pointwise || (xpad && (v->stride[two] == 1 || v->stride[two] == 2));
                kn_qgemm_amx_args q = {.M = s->Mg, .N = s->out_plane, .K = Kg,
                                       .a = (const int8_t *)W->data + g * s->Mg * Kg, .lda = Kg,
                                       .a_signed = W->dtype == KILN_DTYPE_INT8, .a_sums = wsums ? wsums + g * s->Mg : NULL,
                                       .za_rows = zw ? zw + g * s->Mg : NULL,
                                       .za = wc.z, .planes = planes ? &pl : NULL, .pack_b = pack, .pack_ctx = &job,
                                       .b_signed = job.s8, .zb = zx,
                                       .c = acc + at, .ldc = s->out_plane, .accumulate = bias != NULL && !fused,
                                       /* QLinearConv: bias and requantisation from the tiles' sums */
                                       .rq_y = done.y, .rq_ldy = s->out_plane, .rq_r = done.r, .rq_bias = done.bias,
                                       .rq_zy = done.zy, .rq_s8 = done.s8};
                st = kn_qgemm_amx_run(c->pool, &q);
                continue;
            }
            kn_qgemm q = {.M = s->Mg, .N = s->out_plane, .K = Kg, .a = wp + g * per_group, .pack_b = pack,
                          .pack_ctx = &job, .b_signed = job.s8, .zb = zx, .c = acc + at, .ldc = s->out_plane,
                          .accumulate = bias != NULL && !fused, .rows_done = fused ? iconv_rows_done : NULL,
                          .done_ctx = &done,
                          /* or the tiles requantise from their registers (kn_qgemm says where): planes
                           * of a position or a few keep rows_done's form across the channels */
                          .rq_y = fused && s->out_plane >= KN_QGEMM_NR ? done.y : NULL, .rq_ldy = s->out_plane,
                          .rq_r = done.r, .rq_bias = done.bias, .rq_zy = done.zy, .rq_s8 = done.s8};
            st = kn_qgemm_run(c->pool, &q);
        }
    if (fused && st == KILN_OK) rq->done = true;
    free(bv);
    free(wown);
    free(zw);
    free(xpad);
    return st ? kn_kernel_error(c, st, "out of memory") : KILN_OK;
}

kiln_status kn_cpu_conv_integer(kn_kernel_ctx *c) {
    conv_shape s;
    return int_conv(c, 0, 2, 1, 3, NULL, &s, c->out[0]->data, NULL);
}

kiln_status kn_cpu_qlinear_conv(kn_kernel_ctx *c) {
    const kn_tensor *xs = c->in[1], *ws = c->in[4], *ys = c->in[6], *yz = c->n_inputs > 7 ? c->in[7] : NULL;
    const kn_tensor *b = c->n_inputs > 8 ? c->in[8] : NULL;
    kn_tensor *Y = c->out[0];
    if (Y->dtype != KILN_DTYPE_INT8 && Y->dtype != KILN_DTYPE_UINT8)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "output type %s", kiln_dtype_name(Y->dtype));
    const int64_t ny = kn_tensor_count(Y);
    /* the int32 sums in the thread's kept buffer (a fresh megabyte a call is mapped and faulted in) */
#if KN_VL
    int32_t *acc = (int32_t *)kn_conv_thread_buffer((size_t)(ny > 0 ? ny : 1)), *own = NULL;
#else
    int32_t *acc = NULL, *own = NULL; /* (the kept buffer is built with the vector levels) */
#endif
    if (!acc && !(acc = own = malloc(sizeof(int32_t) * (size_t)(ny > 0 ? ny : 1))))
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    /* the scales per output channel: x_scale * w_scale / y_scale in float, as the reference */
    const int64_t nws = kn_tensor_count(ws), M = c->in[3]->rank > 0 ? c->in[3]->dims[0] : 0;
    float rbuf[1024]; /* (a malloc a call was a few percent of a one-position layer) */
    float *r = M <= 1024 ? rbuf : malloc(sizeof(float) * (size_t)M);
    if (!r) {
        free(own);
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    const float xs0 = (float)kn_linalg_qparam(xs, 0), ys0 = (float)kn_linalg_qparam(ys, 0);
    if (ws->dtype == KILN_DTYPE_FLOAT && nws >= M) /* per channel, in a loop of its type */
        for (int64_t m = 0; m < M; m++) r[m] = xs0 * ((const float *)ws->data)[m] / ys0;
    else if (nws > 1)
        for (int64_t m = 0; m < M; m++) r[m] = xs0 * (float)kn_linalg_qparam(ws, m) / ys0;
    else { /* one scale, computed once (a call per channel was 2% of a 1x256x7x7 -> 256 1x1 layer) */
        const float r0 = M > 0 ? xs0 * (float)kn_linalg_qparam(ws, 0) / ys0 : 0.0f;
        for (int64_t m = 0; m < M; m++) r[m] = r0;
    }
    const double zy = yz ? kn_linalg_qparam(yz, 0) : 0;
    iconv_rq rq = {r, zy, Y->dtype == KILN_DTYPE_INT8, Y->data, false};
    conv_shape s;
    kiln_status st = int_conv(c, 0, 2, 3, 5, b, &s, acc, &rq);
    if (st == KILN_OK && !rq.done && s.out_plane == 1) /* one value a channel: the channels' scales in the lanes */
        for (int64_t n = 0; n < s.N; n++)
            kn_q_requant_cols(acc + n * s.M, s.M, r, zy, rq.s8, (uint8_t *)Y->data + n * s.M);
    else if (st == KILN_OK && !rq.done)
        for (int64_t n = 0; n < s.N; n++)
            for (int64_t m = 0; m < s.M; m++)
                kn_q_requant(acc + (n * s.M + m) * s.out_plane, s.out_plane, r[m], zy, rq.s8,
                             (uint8_t *)Y->data + (n * s.M + m) * s.out_plane);
    if (r != rbuf) free(r);
    free(own);
    return st;
}

/* ------------------------------------------------------------------ col2im */

typedef struct col2im_job {
    const float *col;
    int nsp;
    const int64_t *image, *grid, *kernel, *stride, *dilation, *pad;
    int64_t kk, gplane, iplane;
    float *out;
} col2im_job;

#if KN_VL
/* Stride 2 along the row, undilated: taps kw and kw + 1 of one kernel row land on the even and odd
 * columns of the same image columns, so their two columns of the column buffer interleave into
 * whole vectors: one load, add and store per two vectors of image columns for both (ConvTranspose 4x4 s2
 * 64->32 on 28x28: col2im was a fifth of the time with a masked add per tap). Columns where
 * only one of the two lands stay with the caller's per-tap loop: returns how many grid columns
 * [lo, hi) it did per row. */
static void col2im_pair_s2(const col2im_job *j, float *img, const float *sa, const float *sb, int64_t oh0,
                           int64_t ow0, int64_t lo, int64_t hi) {
    const int nsp = j->nsp;
    const int64_t GH = nsp == 2 ? j->grid[0] : 1, GW = j->grid[nsp - 1];
    const int64_t IH = nsp == 2 ? j->image[0] : 1, IW = j->image[nsp - 1], sh = nsp == 2 ? j->stride[0] : 1;
    /* lane l: element l/2 of a (even l) or of b (odd l); ihi the same KN_VL/2 elements on */
    int32_t t[KN_VL];
    for (int l = 0; l < KN_VL; l++) t[l] = (l & 1 ? KN_VL : 0) + (l >> 1);
    const kn_vi ilo = kn_vi_loadu(t), ihi = kn_vi_add(ilo, kn_vi_set1(KN_VL / 2));
    for (int64_t gh = 0; gh < GH; gh++) {
        const int64_t ih = gh * sh + oh0;
        if (ih < 0 || ih >= IH) continue;
        float *irow = img + ih * IW + ow0;
        const float *ra = sa + gh * GW, *rb = sb + gh * GW;
        int64_t gw = lo;
        for (; gw + KN_VL <= hi; gw += KN_VL) {
            const kn_vf a = kn_vf_loadu(ra + gw), b = kn_vf_loadu(rb + gw);
            float *p = irow + 2 * gw;
            kn_vf_storeu(p, kn_vf_add(kn_vf_loadu(p), kn_vf_perm2(a, ilo, b)));
            kn_vf_storeu(p + KN_VL, kn_vf_add(kn_vf_loadu(p + KN_VL), kn_vf_perm2(a, ihi, b)));
        }
        for (; gw < hi; gw++) irow[2 * gw] += ra[gw], irow[2 * gw + 1] += rb[gw];
    }
}
#endif

/* the grid columns [lo, hi) of a tap at column offset ow0 that land inside the row */
static void col2im_cols(int64_t IW, int64_t GW, int64_t sw, int64_t ow0, int64_t *lo, int64_t *hi) {
    *lo = ow0 >= 0 ? 0 : (-ow0 + sw - 1) / sw;
    *hi = IW - 1 - ow0 < 0 ? 0 : min64(GW, (IW - 1 - ow0) / sw + 1);
}

static void col2im_range(void *arg, int64_t begin, int64_t end) {
    const col2im_job *j = arg;
    const int nsp = j->nsp;
    for (int64_t ch = begin; ch < end; ch++) {
        float *img = j->out + ch * j->iplane;
        /* per tap, the grid columns [done_lo, done_hi) col2im_pair_s2 already added */
        int64_t done_lo = 0, done_hi = 0;
        for (int64_t r = 0; r < j->kk; r++) {
            const float *src = j->col + (ch * j->kk + r) * j->gplane;
#if KN_VL
            const int64_t KW = j->kernel[nsp - 1], kw = r % KW;
            if (nsp <= 2 && j->stride[nsp - 1] == 2 && j->dilation[nsp - 1] == 1) {
                if (kw % 2 == 0 && kw + 1 < KW) {
                    /* taps r and r + 1: the columns both cover, together */
                    const int64_t IW = j->image[nsp - 1], GW = j->grid[nsp - 1];
                    const int64_t ow0 = kw - j->pad[nsp - 1];
                    const int64_t oh0 = nsp == 2 ? (r / KW) * j->dilation[0] - j->pad[0] : 0;
                    int64_t la, ha, lb, hb;
                    col2im_cols(IW, GW, 2, ow0, &la, &ha);
                    col2im_cols(IW, GW, 2, ow0 + 1, &lb, &hb);
                    done_lo = max64(la, lb), done_hi = max64(done_lo, min64(ha, hb));
                    if (done_hi > done_lo) col2im_pair_s2(j, img, src, src + j->gplane, oh0, ow0, done_lo, done_hi);
                } else if (kw % 2 == 0) {
                    done_lo = done_hi = 0; /* the odd kernel width's last tap: alone */
                }
            } else {
                done_lo = done_hi = 0;
            }
#endif
            int64_t off[KN_MAX_SPATIAL], q = r;
            for (int i = nsp - 1; i >= 0; i--) {
                off[i] = (q % j->kernel[i]) * j->dilation[i] - j->pad[i];
                q /= j->kernel[i];
            }
            if (nsp <= 2) {
                int64_t GH = nsp == 2 ? j->grid[0] : 1, GW = j->grid[nsp - 1];
                int64_t IH = nsp == 2 ? j->image[0] : 1, IW = j->image[nsp - 1];
                int64_t sh = nsp == 2 ? j->stride[0] : 1, sw = j->stride[nsp - 1];
                int64_t oh0 = nsp == 2 ? off[0] : 0, ow0 = off[nsp - 1];
                int64_t lo, hi;
                col2im_cols(IW, GW, sw, ow0, &lo, &hi);
                /* [done_lo, done_hi): added with the tap's pair (col2im_pair_s2); the rest here */
                const int64_t cut_lo = done_hi > done_lo ? max64(lo, done_lo) : hi;
                const int64_t cut_hi = done_hi > done_lo ? min64(hi, done_hi) : hi;
                for (int64_t gh = 0; gh < GH; gh++) {
                    int64_t ih = gh * sh + oh0;
                    if (ih < 0 || ih >= IH) continue;
                    float *irow = img + ih * IW + ow0;
                    const float *srow = src + gh * GW;
                    if (sw == 1) {
                        for (int64_t gw = lo; gw < hi; gw++) irow[gw] += srow[gw];
                        continue;
                    }
                    if (done_hi > done_lo) {
                        /* only the columns the pair did not cover: [lo, cut_lo) and [cut_hi, hi) */
                        for (int64_t gw = lo; gw < cut_lo; gw++) irow[gw * sw] += srow[gw];
                        for (int64_t gw = cut_hi; gw < hi; gw++) irow[gw * sw] += srow[gw];
                        continue;
                    }
                    int64_t gw = lo;
#if KN_VL
                    if (sw == 2) {
                        /* a vector of columns spread over the even lanes of two vectors, added and
                         * stored under a mask of those lanes: the odd positions (another tap's) are
                         * not touched (perf on a 2x2 s2 ConvTranspose: 15% in the scalar loop) */
                        int32_t t[KN_VL];
                        for (int l = 0; l < KN_VL; l++) t[l] = l >> 1;
                        const kn_vi lo8 = kn_vi_loadu(t), hi8 = kn_vi_add(lo8, kn_vi_set1(KN_VL / 2));
                        const kn_vmask even = (kn_vmask)(0x5555u & KN_VALL);
                        for (; gw + KN_VL <= hi; gw += KN_VL) {
                            const kn_vf sv = kn_vf_loadu(srow + gw);
                            float *p = irow + 2 * gw;
                            kn_vf_mask_storeu(p, even, kn_vf_add(kn_vf_maskz_loadu(even, p), kn_vf_perm(lo8, sv)));
                            kn_vf_mask_storeu(p + KN_VL, even, kn_vf_add(kn_vf_maskz_loadu(even, p + KN_VL), kn_vf_perm(hi8, sv)));
                        }
                    }
#endif
                    for (; gw < hi; gw++) irow[gw * sw] += srow[gw];
                }
                continue;
            }
            for (int64_t gidx = 0; gidx < j->gplane; gidx++) {
                int64_t t = gidx, idx = 0, pos[KN_MAX_SPATIAL];
                bool ok = true;
                for (int i = nsp - 1; i >= 0; i--) {
                    pos[i] = (t % j->grid[i]) * j->stride[i] + off[i];
                    t /= j->grid[i];
                    ok &= pos[i] >= 0 && pos[i] < j->image[i];
                }
                if (!ok) continue;
                for (int i = 0; i < nsp; i++) idx = idx * j->image[i] + pos[i];
                img[idx] += src[gidx];
            }
        }
    }
}

void kn_linalg_col2im(kn_threadpool *pool, const float *col, int64_t channels, int nsp, const int64_t *image,
                      const int64_t *grid, const int64_t *kernel, const int64_t *stride, const int64_t *dilation,
                      const int64_t *pad_begin, float *out) {
    col2im_job j = {col, nsp, image, grid, kernel, stride, dilation, pad_begin, 1, 1, 1, out};
    for (int i = 0; i < nsp; i++) {
        j.kk *= kernel[i];
        j.gplane *= grid[i];
        j.iplane *= image[i];
    }
    int64_t work = j.kk * j.gplane;
    kn_parallel_for(pool, channels, work > 16384 ? 1 : 16384 / (work + 1) + 1, col2im_range, &j);
}

/* ------------------------------------------------------------------ ConvTranspose */

/* Kernel == stride, undilated, no pads, output exactly input x stride (the 2x2 s2 upsamplers of
 * UNet and YOLO heads): the taps' outputs do not overlap and cover the output, so the column
 * buffer is a permutation of it: y[m][ih sh + a][iw sw + b] = col[(m kh + a) kw + b][ih IW + iw]
 * + bias, written once (no zero fill, no adds). */
static bool conv_transpose_tiles(const conv_shape *s) {
    if (s->nsp < 1 || s->nsp > 2) return false;
    for (int d = 0; d < s->nsp; d++)
        if (s->w.kernel[d] != s->w.stride[d] || s->w.dilation[d] != 1 || s->w.pad_begin[d] != 0 ||
            s->w.out[d] != s->w.in[d] * s->w.stride[d])
            return false;
    return true;
}

typedef struct ct_tiles_job {
    const conv_shape *s;
    const float *col, *bias;
    float *y;
} ct_tiles_job;

/* items: output channels */
static void ct_tiles_range(void *arg, int64_t begin, int64_t end) {
    const ct_tiles_job *j = arg;
    const conv_shape *s = j->s;
    const int two = s->nsp == 2;
    const int64_t IH = two ? s->w.in[0] : 1, IW = s->w.in[s->nsp - 1];
    const int64_t kh = two ? s->w.kernel[0] : 1, kw = s->w.kernel[s->nsp - 1], OW = s->w.out[s->nsp - 1];
#if KN_VL
    int32_t t[KN_VL];
    for (int l = 0; l < KN_VL; l++) t[l] = (l & 1 ? KN_VL : 0) + (l >> 1);
    const kn_vi ilo = kn_vi_loadu(t), ihi = kn_vi_add(ilo, kn_vi_set1(KN_VL / 2));
#endif
    for (int64_t m = begin; m < end; m++) {
        const float bm = j->bias ? j->bias[m] : 0.0f;
        float *ym = j->y + m * s->out_plane;
        for (int64_t a = 0; a < kh; a++) {
            const float *src = j->col + (m * kh + a) * kw * s->in_plane;
            for (int64_t ih = 0; ih < IH; ih++) {
                float *yr = ym + (ih * kh + a) * OW;
                const float *r0 = src + ih * IW;
                int64_t iw = 0;
#if KN_VL
                if (kw == 2) {
                    const float *r1 = r0 + s->in_plane;
                    const kn_vf vb = kn_vf_set1(bm);
                    for (; iw + KN_VL <= IW; iw += KN_VL) {
                        const kn_vf e = kn_vf_loadu(r0 + iw), o = kn_vf_loadu(r1 + iw);
                        kn_vf_storeu(yr + 2 * iw, kn_vf_add(kn_vf_perm2(e, ilo, o), vb));
                        kn_vf_storeu(yr + 2 * iw + KN_VL, kn_vf_add(kn_vf_perm2(e, ihi, o), vb));
                    }
                }
#endif
                for (; iw < IW; iw++)
                    for (int64_t b = 0; b < kw; b++) yr[iw * kw + b] = r0[b * s->in_plane + iw] + bm;
            }
        }
    }
}

typedef struct ct_weight_pack {
    const float *w;
    int64_t G, Cg, rows;
    bool swap;
} ct_weight_pack;

/* W_g^T (rows x Cg, W_g read transposed) packed as the GEMM's A, or as B for the transposed GEMM */
static void ct_make_packed_weights(const void *ctx, void *dst) {
    const ct_weight_pack *p = ctx;
    const size_t per = p->swap ? kn_sgemm_packed_b_floats(p->rows, p->Cg) : kn_sgemm_packed_a_floats(p->rows, p->Cg);
    for (int64_t g = 0; g < p->G; g++) {
        const float *a = p->w + g * p->Cg * p->rows;
        if (p->swap) kn_sgemm_pack_b_full(a, p->rows, false, p->rows, p->Cg, (float *)dst + g * per);
        else kn_sgemm_pack_a(a, p->rows, true, p->rows, p->Cg, (float *)dst + g * per);
    }
}

/* Output phases. With undilated taps o = i s + k - p (per axis): writing k = s a + r and
 * o + p = s q + r, output o takes sum_a W[s a + r] x[q - a]. So the outputs of one phase r (one
 * residue of o + p mod s per axis) are a stride-1 correlation of x with the taps r, r + s, ..., a
 * window of T = ceil(K / s) over the grid q; all phases share that window, so one GEMM computes
 * every phase: A [(m, phase), (c, T taps)] (zero where s a + r >= K) times the im2col of a
 * stride-1 T-tap convolution, and its epilogue stores each finished block of C straight into the
 * strided output with the bias: no column buffer, no col2im, no zero fill, every output written
 * once. Where s divides K the FLOPs equal the column GEMM's (4x4 s2: 66% GEMM and 23% col2im in
 * perf before). The im2col comes from a zero-bordered copy of x (U = Q + T - 1 per axis) whose
 * rows (2-D, 3-D) are held T times, shifted by each tap along the row and Q wide: every row of B
 * is then a plain run of the copy, packed with plain loads (through conv_pack_b's masked loads,
 * packing was 16% of the 4x4 s2 64->32 28x28 case), with no grid column computed and dropped. */
typedef struct ct_phase {
    int64_t P, Mp, Kp, Tk, N;          /* phases, A's rows and depth, taps, grid points */
    int64_t T[3], qlo[3], Q[3], U[3];  /* per axis: taps, first grid index, grid size, copy's size */
    int64_t GD[3];                     /* the grid's sizes: U on a middle axis (3-D), else Q */
    int64_t TW, RW;                    /* the copy's shifted row sets (T of the row, 1 in 1-D), row width */
    int64_t splane, cplane;            /* floats of one shifted set of a channel, of a channel */
    /* products per group: 1, or (split, 2-D and 3-D) one per phase of the outer axis (S = its
     * stride; rows (m, the other axes' phase, Pr of those), Mq = Mg Pr) over the NH grid rows
     * (planes in 3-D) from r0[phase] on, where that phase lands inside the output: the grid's
     * first and last rows carry only some phases (4x4 s2 p1: 29 grid rows, 28 for each phase) */
    int64_t S, Pr, Mq, NH, Nq, rowc;   /* rowc: a grid row's points, and floats of the copy */
    int64_t r0[64];
} ct_phase;

static int64_t floordiv64(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* The phase geometry, false where it does not apply: rank > 3, dilations, negative pads */
static bool ct_phase_geom(const conv_shape *s, ct_phase *ph) {
    if (s->nsp < 1 || s->nsp > 3 || s->Cg < 1 || s->Mg < 1 || s->in_plane < 1 || s->out_plane < 1) return false;
    memset(ph, 0, sizeof *ph);
    ph->P = ph->Tk = ph->N = 1;
    const int last = s->nsp - 1;
    for (int d = 0; d < s->nsp; d++) {
        const int64_t st = s->w.stride[d], K = s->w.kernel[d], p = s->w.pad_begin[d], O = s->w.out[d];
        if (s->w.dilation[d] != 1 || st < 1 || K < 1 || p < 0 || O < 1 || st > 64) return false;
        ph->T[d] = (K + st - 1) / st;
        ph->qlo[d] = p / st;
        ph->Q[d] = (O - 1 + p) / st - ph->qlo[d] + 1;
        ph->U[d] = ph->Q[d] + ph->T[d] - 1;
        ph->GD[d] = d == 0 || d == last ? ph->Q[d] : ph->U[d];
        ph->P *= st;
        ph->Tk *= ph->T[d];
        ph->N *= ph->GD[d];
    }
    ph->TW = last ? ph->T[last] : 1;
    ph->RW = last ? ph->Q[last] : ph->U[last];
    ph->splane = ph->RW;
    for (int d = 0; d < last; d++) ph->splane *= ph->U[d];
    ph->cplane = ph->TW * ph->splane;
    if (ph->cplane > ((int64_t)1 << 40) || ph->N > ((int64_t)1 << 40)) return false;
    ph->Mp = s->Mg * ph->P;
    ph->Kp = s->Cg * ph->Tk;
    ph->rowc = ph->N / ph->Q[0];
    const int64_t s0 = s->w.stride[0], b0 = ph->qlo[0] * s0 - s->w.pad_begin[0], Q0 = ph->Q[0];
    int64_t NH = 1;
    for (int64_t r = 0; r < s0 && last; r++) {
        const int64_t lo = max64(0, -floordiv64(b0 + r, s0));
        const int64_t hi = max64(lo, min64(Q0, floordiv64(s->w.out[0] - 1 - b0 - r, s0) + 1));
        ph->r0[r] = lo;
        NH = max64(NH, hi - lo);
    }
    /* split where the rows saved outweigh packing B once per product (B's packing costs about
     * 9.4 / M of the GEMM on the AVX2 EPYC: 4x4 s2 64->32 28x28 split, Mq 64: packing 6 -> 11%,
     * no gain; 256->128 14x14, Mq 256: 0.94x) */
    const bool split = last && s0 > 1 && (double)NH * (1.0 + 9.4 / (double)(s->Mg * ph->P / s0)) <
                                             (double)Q0 * (1.0 + 9.4 / (double)(s->Mg * ph->P));
    ph->S = split ? s0 : 1;
    ph->Pr = ph->P / ph->S;
    ph->Mq = s->Mg * ph->Pr;
    ph->NH = split ? NH : Q0;
    for (int64_t r = 0; r < ph->S; r++) ph->r0[r] = split ? min64(ph->r0[r], Q0 - NH) : 0;
    ph->Nq = ph->NH * ph->rowc;
    return ph->Tk <= 64 && ph->Mp < ((int64_t)1 << 31) && ph->Kp < ((int64_t)1 << 31);
}

static bool conv_transpose_tiles(const conv_shape *s);

/* Whether the phase GEMM takes this node: KILN_CT_PHASE=0/1 forces it off/on (where it applies).
 * By default where its work beats the column path's: it computes Nq / in_plane times the column
 * GEMM's columns (the grid's border rows and columns) times P Tk / kk its rows x depth (zero
 * taps where s does not divide K), plus its store and packing, about 36 / Kp of its GEMM; col2im
 * costs about X / Cg of the column GEMM, X 21 at stride 1 along the row, 27 at stride 2 (its
 * vector pairs), 100 otherwise (scalar scatter). Fitted on the 2-core EPYC, 1 thread, CPU time
 * (phase/column): 4x4 s2 64->32 28x28 0.89, 32->16 56x56 0.76, 128->64 30x40 0.97, g8 128->128
 * 28x28 0.34, 8x8 s4 64->32 14x14 0.56, 3x3 s1 64->64 28x28 0.86, 1-D k16 s8 256->128 L64 0.94;
 * 4x4 s2 256->128 14x14 1.08 and 3x3 s2 64->32 28x28 1.47 stay. Not where kernel == stride
 * without pads (ct_tiles: no col2im to save; 2x2 s2 256->128 20x20 1.06). */
static bool ct_phase_suits(const conv_shape *s, ct_phase *ph) {
    if (!ct_phase_geom(s, ph)) return false;
    const char *e = getenv("KILN_CT_PHASE");
    if (e && (e[0] == '0' || e[0] == '1')) return e[0] == '1';
    if (conv_transpose_tiles(s)) return false;
    const double phase = (double)ph->Nq / (double)s->in_plane * (double)(ph->P * ph->Tk) / (double)s->kk *
                         (1.0 + 36.0 / (double)ph->Kp);
    const int64_t sw = s->w.stride[s->nsp - 1];
    const double col2im = s->nsp <= 2 && sw == 1 ? 21.0 : s->nsp <= 2 && sw == 2 ? 27.0 : 100.0;
    return phase < 1.0 + col2im / (double)s->Cg;
}

typedef struct ct_phase_wctx {
    const float *w;
    const conv_shape *s;
    const ct_phase *ph;
    const float *plain; /* for the packed form */
    bool swap;
} ct_phase_wctx;

/* A per group, [Mp][Kp] row-major: row (m, phase r), column (c, t) with t the T-tap window's tap
 * (reversed: im2col's tap t reads x[q - (T - 1 - t)]) */
static void ct_phase_weights(const void *ctx, void *dst) {
    const ct_phase_wctx *k = ctx;
    const conv_shape *s = k->s;
    const ct_phase *ph = k->ph;
    const int nsp = s->nsp;
    float *a = dst;
    /* rows (the outer axis's phase, m, the other axes' phase): product (g, outer phase) contiguous */
    for (int64_t g = 0; g < s->G; g++)
        for (int64_t row = 0; row < ph->P * s->Mg; row++) {
            const int64_t m = row / ph->Pr % s->Mg, r = row / (ph->Pr * s->Mg) * ph->Pr + row % ph->Pr;
            int64_t rr[3] = {0, 0, 0}, q = r;
            for (int d = nsp - 1; d >= 0; d--) rr[d] = q % s->w.stride[d], q /= s->w.stride[d];
            for (int64_t c = 0; c < s->Cg; c++) {
                const float *wc = k->w + ((g * s->Cg + c) * s->Mg + m) * s->kk;
                for (int64_t t = 0; t < ph->Tk; t++) {
                    int64_t tq = t, kidx = 0;
                    bool in = true;
                    int64_t tap[3] = {0, 0, 0};
                    for (int d = nsp - 1; d >= 0; d--) {
                        const int64_t ta = ph->T[d] - 1 - tq % ph->T[d];
                        tq /= ph->T[d];
                        tap[d] = s->w.stride[d] * ta + rr[d];
                        in &= tap[d] < s->w.kernel[d];
                    }
                    for (int d = 0; d < nsp; d++) kidx = kidx * s->w.kernel[d] + tap[d];
                    *a++ = in ? wc[kidx] : 0.0f;
                }
            }
        }
}

/* per product (group, outer phase): its Mq rows of A packed */
static void ct_phase_packed(const void *ctx, void *dst) {
    const ct_phase_wctx *k = ctx;
    const int64_t Mq = k->ph->Mq, Kp = k->ph->Kp;
    const size_t per = k->swap ? kn_sgemm_packed_b_floats(Mq, Kp) : kn_sgemm_packed_a_floats(Mq, Kp);
    for (int64_t op = 0; op < k->s->G * k->ph->S; op++) {
        const float *a = k->plain + op * Mq * Kp;
        if (k->swap) kn_sgemm_pack_b_full(a, Kp, true, Mq, Kp, (float *)dst + op * per);
        else kn_sgemm_pack_a(a, Kp, false, Mq, Kp, (float *)dst + op * per);
    }
}

typedef struct ct_phase_epi {
    const conv_shape *s;
    const ct_phase *ph;
    const float *bias;
    float *y; /* this image's output */
    /* 1-D as one row: output (oh, ow) = (qh sh + bh + rh, qw sw + bw + rw) for grid row and column
     * qh, qw; per phase row rh the grid rows [hlo, hhi) land inside the output, per phase column
     * rw the grid columns [wlo, whi) */
    int64_t bh, bw, hlo[64], hhi[64], wlo[64], whi[64];
} ct_phase_epi;

static void ct_phase_epi_init(ct_phase_epi *e, const conv_shape *s, const ct_phase *ph, const float *bias) {
    memset(e, 0, sizeof *e);
    e->s = s, e->ph = ph, e->bias = bias;
    if (s->nsp > 2) return;
    const int two = s->nsp == 2;
    const int64_t sh = two ? s->w.stride[0] : 1, sw = s->w.stride[s->nsp - 1];
    const int64_t OH = two ? s->w.out[0] : 1, OW = s->w.out[s->nsp - 1];
    e->bh = two ? ph->qlo[0] * sh - s->w.pad_begin[0] : 0;
    e->bw = ph->qlo[s->nsp - 1] * sw - s->w.pad_begin[s->nsp - 1];
    for (int64_t r = 0; r < sh; r++) {
        e->hlo[r] = max64(0, -floordiv64(e->bh + r, sh));
        e->hhi[r] = max64(e->hlo[r], floordiv64(OH - 1 - e->bh - r, sh) + 1);
    }
    for (int64_t r = 0; r < sw; r++) {
        e->wlo[r] = max64(0, -floordiv64(e->bw + r, sw));
        e->whi[r] = max64(e->wlo[r], floordiv64(OW - 1 - e->bw - r, sw) + 1);
    }
}

/* grid columns [lo, hi) of one C row (column q at c[q - qa]) to yo[q sw], plus the bias */
static inline void ct_phase_row(float *yo, const float *c, int64_t qa, int64_t lo, int64_t hi, int64_t sw, float b) {
    if (sw == 1)
        for (int64_t q = lo; q < hi; q++) yo[q] = c[q - qa] + b;
    else
        for (int64_t q = lo; q < hi; q++) yo[q * sw] = c[q - qa] + b;
}

/* the GEMM's epilogue: block [i0, i0 + m) x [j0, j0 + n) of C into y. Product op is group op / S,
 * split: outer phase rh = op % S, rows (m, rw), else rows (m, rh, rw); columns: the grid's points
 * from row r0[rh] on;
 * the block's columns go by grid row (segments computed once), the rows by counters (divisions
 * per row were most of this store's time) */
static void ct_phase_store(const void *ctx, int64_t op, int64_t i0, int64_t j0, int64_t m, int64_t n, float *c,
                           int64_t ldc) {
    const ct_phase_epi *e = ctx;
    const conv_shape *s = e->s;
    const ct_phase *ph = e->ph;
    const int nsp = s->nsp;
    if (nsp == 3) { /* per element (3-D deconvolutions are rare) */
        for (int64_t i = i0; i < i0 + m; i++) {
            const int64_t ch = op / ph->S * s->Mg + i / ph->Pr;
            const float b = e->bias ? e->bias[ch] : 0.0f;
            int64_t rr[3], q = i % ph->Pr;
            rr[0] = op % ph->S; /* unless the product has every phase (S 1) */
            for (int d = 2; d >= (ph->S > 1); d--) rr[d] = q % s->w.stride[d], q /= s->w.stride[d];
            for (int64_t j = j0; j < j0 + n; j++) {
                int64_t t = j + ph->r0[rr[0]] * ph->rowc, idx = 0, o[3];
                bool in = true;
                for (int d = 2; d >= 0; d--) {
                    const int64_t qi = t % ph->GD[d];
                    o[d] = (qi + ph->qlo[d]) * s->w.stride[d] + rr[d] - s->w.pad_begin[d];
                    t /= ph->GD[d];
                    in &= qi < ph->Q[d] && o[d] >= 0 && o[d] < s->w.out[d];
                }
                if (!in) continue;
                for (int d = 0; d < 3; d++) idx = idx * s->w.out[d] + o[d];
                e->y[ch * s->out_plane + idx] = c[(i - i0) * ldc + (j - j0)] + b;
            }
        }
        return;
    }
    const int two = nsp == 2;
    const int64_t sh = two ? s->w.stride[0] : 1, sw = s->w.stride[nsp - 1], QW = ph->Q[nsp - 1], GW = ph->GD[nsp - 1];
    const int64_t OW = s->w.out[nsp - 1], g = op / ph->S, rb = op % ph->S, qh0 = ph->r0[rb];
    const int64_t SH = sh / ph->S; /* the product's rows: (m, rh - rb of SH, rw) */
    for (int64_t j = j0; j < j0 + n;) {
        /* grid row qh's columns [qa, qb) (those from QW to qe: computed and dropped) */
        const int64_t qh = qh0 + j / GW, qa = j % GW, qe = min64(GW, qa + (j0 + n - j)), qb = min64(qe, QW);
        const float *cs = c + (j - j0);
        j += qe - qa;
        if (qb <= qa) continue;
        int64_t mg = i0 / (SH * sw), rhl = i0 / sw % SH, rw = i0 % sw;
        for (int64_t i = i0; i < i0 + m;) {
            /* stride 2 along the row: phase columns 0 and 1 of one (m, rh) interleave into vectors */
            const int step = KN_VL && sw == 2 && rw == 0 && i + 1 < i0 + m ? 2 : 1;
            const int64_t rh = rb + rhl;
            if (qh >= e->hlo[rh] && qh < e->hhi[rh]) {
                const int64_t ch = g * s->Mg + mg;
                const float b = e->bias ? e->bias[ch] : 0.0f;
                float *yr = e->y + ch * s->out_plane + (qh * sh + e->bh + rh) * OW + e->bw;
                const float *c0 = cs + (i - i0) * ldc;
                if (step == 1) {
                    ct_phase_row(yr + rw, c0, qa, max64(qa, e->wlo[rw]), min64(qb, e->whi[rw]), sw, b);
                } else {
#if KN_VL
                    const float *c1 = c0 + ldc;
                    const int64_t lo0 = max64(qa, e->wlo[0]), hi0 = min64(qb, e->whi[0]);
                    const int64_t lo1 = max64(qa, e->wlo[1]), hi1 = min64(qb, e->whi[1]);
                    const int64_t lo = max64(lo0, lo1), hi = max64(lo, min64(hi0, hi1));
                    /* the columns only one of the two lands on, alone; the rest by vectors, the
                     * last one masked (short segments, where the GEMM's 16-column blocks cross a
                     * grid row, were 40% of the outputs of 28x28 and went element by element) */
                    ct_phase_row(yr, c0, qa, lo0, min64(lo, hi0), 2, b);
                    ct_phase_row(yr + 1, c1, qa, lo1, min64(lo, hi1), 2, b);
                    ct_phase_row(yr, c0, qa, max64(lo0, hi), hi0, 2, b);
                    ct_phase_row(yr + 1, c1, qa, max64(lo1, hi), hi1, 2, b);
                    const kn_vf vb = kn_vf_set1(b);
                    for (int64_t q = lo; q < hi; q += KN_VL) {
                        const int64_t cnt = min64(KN_VL, hi - q);
                        const kn_vmask mk = kn_v_tail(cnt);
                        const kn_vf a0 = kn_vf_add(kn_vf_maskz_loadu(mk, c0 + (q - qa)), vb);
                        const kn_vf a1 = kn_vf_add(kn_vf_maskz_loadu(mk, c1 + (q - qa)), vb);
                        float *p = yr + 2 * q;
#if KN_VL == 8
                        const __m256 ul = _mm256_unpacklo_ps(a0, a1), uh = _mm256_unpackhi_ps(a0, a1);
                        const __m256 v0 = _mm256_permute2f128_ps(ul, uh, 0x20), v1 = _mm256_permute2f128_ps(ul, uh, 0x31);
#else
                        int32_t t[KN_VL];
                        for (int l = 0; l < KN_VL; l++) t[l] = (l & 1 ? KN_VL : 0) + (l >> 1);
                        const kn_vi ilo = kn_vi_loadu(t), ihi = kn_vi_add(ilo, kn_vi_set1(KN_VL / 2));
                        const kn_vf v0 = kn_vf_perm2(a0, ilo, a1), v1 = kn_vf_perm2(a0, ihi, a1);
#endif
                        if (cnt == KN_VL) {
                            kn_vf_storeu(p, v0);
                            kn_vf_storeu(p + KN_VL, v1);
                        } else {
                            kn_vf_mask_storeu(p, kn_v_tail(min64(KN_VL, 2 * cnt)), v0);
                            if (2 * cnt > KN_VL) kn_vf_mask_storeu(p + KN_VL, kn_v_tail(2 * cnt - KN_VL), v1);
                        }
                    }
#endif
                }
            }
            i += step;
            rw += step; /* step 2 only from rw 0 of sw 2 */
            if (rw == sw) {
                rw = 0;
                if (++rhl == SH) rhl = 0, mg++;
            }
        }
    }
}

typedef struct ct_phase_copy {
    const conv_shape *s;
    const ct_phase *ph;
    const float *x; /* one image */
    float *xp;
} ct_phase_copy;

/* items: channels of one image into the bordered copy: set tw (2-D, 3-D), row (a, b), column q is
 * x[a + off0][b + off1][q + tw + off2] or 0, off = qlo - T + 1 (1-D: one set, U wide) */
static void ct_phase_copy_range(void *arg, int64_t begin, int64_t end) {
    const ct_phase_copy *j = arg;
    const conv_shape *s = j->s;
    const ct_phase *ph = j->ph;
    const int nsp = s->nsp;
    /* as 3-D: leading axes of size 1 */
    int64_t in[3] = {1, 1, 1}, U[3] = {1, 1, 1}, off[3] = {0, 0, 0};
    for (int d = 0; d < nsp; d++) {
        in[3 - nsp + d] = s->w.in[d];
        U[3 - nsp + d] = ph->U[d];
        off[3 - nsp + d] = ph->qlo[d] - ph->T[d] + 1;
    }
    const int64_t RW = ph->RW;
    for (int64_t ch = begin; ch < end; ch++) {
        const float *xc = j->x + ch * s->in_plane;
        float *d = j->xp + ch * ph->cplane;
        for (int64_t tw = 0; tw < ph->TW; tw++) {
            const int64_t o2 = off[2] + tw, lo = min64(RW, max64(0, -o2)), hi = max64(lo, min64(RW, in[2] - o2));
            for (int64_t a = 0; a < U[0]; a++)
                for (int64_t b = 0; b < U[1]; b++, d += RW) {
                    const int64_t ia = a + off[0], ib = b + off[1];
                    if (ia < 0 || ia >= in[0] || ib < 0 || ib >= in[1] || hi <= lo) {
                        memset(d, 0, sizeof(float) * (size_t)RW);
                        continue;
                    }
                    const float *src = xc + (ia * in[1] + ib) * in[2] + o2;
                    if (lo) memset(d, 0, sizeof(float) * (size_t)lo);
                    memcpy(d + lo, src + lo, sizeof(float) * (size_t)(hi - lo));
                    if (hi < RW) memset(d + hi, 0, sizeof(float) * (size_t)(RW - hi));
                }
        }
    }
}

typedef struct ct_phase_pack {
    const ct_phase *ph;
    const float *xp; /* the image's bordered copy, group 0 */
    int64_t cg_floats; /* a group's channels in it */
    int64_t toff[64]; /* tap t's offset in the copy (Tk <= 64, see ct_phase_suits) */
} ct_phase_pack;

/* The GEMM's B rows (c, t) [k0, k0 + kc), columns [n0, n0 + nc): row (c, t) is the copy's channel
 * c from offset toff[t] on, so each panel row is NR consecutive floats (columns past nc zero) */
static void ct_phase_pack_b(const void *ctx, int64_t op, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
    const ct_phase_pack *pk = ctx;
    const ct_phase *ph = pk->ph;
    const int NRv = kn_sgemm_nr();
    /* product op: group op / S from its grid row r0[op % S] on */
    const float *xg = pk->xp + op / ph->S * pk->cg_floats + ph->r0[op % ph->S] * ph->rowc + n0;
    const int64_t full = nc / NRv, rest = nc - full * NRv;
    for (int64_t k = 0; k < kc; k++) {
        const int64_t c = (k0 + k) / ph->Tk, t = (k0 + k) % ph->Tk;
        const float *src = xg + c * ph->cplane + pk->toff[t];
        float *d = dst + k * NRv;
        for (int64_t p = 0; p < full; p++, src += NRv, d += NRv * kc) {
#if KN_VL
            for (int l = 0; l < NRv; l += KN_VL) kn_vf_storeu(d + l, kn_vf_loadu(src + l));
#else
            memcpy(d, src, sizeof(float) * (size_t)NRv);
#endif
        }
        if (rest) {
            memcpy(d, src, sizeof(float) * (size_t)rest);
            memset(d + rest, 0, sizeof(float) * (size_t)(NRv - rest));
        }
    }
}

/* ConvTranspose through the phase GEMM (ct_phase_suits): per image, a batch of G S products. */
static kiln_status conv_transpose_phases(kn_kernel_ctx *c, const conv_shape *s, const ct_phase *ph, const float *x,
                                         const float *w, const float *bias, float *y, bool w_is_input) {
    const int64_t Mq = ph->Mq, Kp = ph->Kp, N = ph->Nq, G = s->G, ops = s->G * ph->S;
    ct_phase_wctx wc = {w, s, ph, NULL, false};
    const size_t plain_floats = (size_t)G * (size_t)ph->Mp * (size_t)Kp;
    const bool swap = kn_sgemm_swaps(Mq, N, Kp);
    const float *plain = NULL, *packed = NULL;
    float *own = NULL;
    if (w_is_input) {
        /* both keyed by the strides too (A depends on them; the kernel comes with W) */
        int64_t sk = 0;
        for (int d = 0; d < s->nsp; d++) sk = sk * 65 + s->w.stride[d];
        const kn_const_layout lay = {18, {G, ph->Mp, Kp, sk}};
        plain = kn_cpu_const_derived(c, 1, &lay, sizeof(float) * plain_floats, ct_phase_weights, &wc);
        if (plain && Mq > 1 && N > 1) {
            wc.plain = plain;
            wc.swap = swap;
            const kn_const_layout play = {swap ? 20 : 19, {G, ph->Mp, Kp, sk}};
            const size_t per = swap ? kn_sgemm_packed_b_floats(Mq, Kp) : kn_sgemm_packed_a_floats(Mq, Kp);
            packed = kn_cpu_const_derived(c, 1, &play, sizeof(float) * per * (size_t)ops, ct_phase_packed, &wc);
        }
    }
    /* per call (weights not a constant): P T^d / K^d times W's size, bounded (kn_ctx_scratch) */
    const size_t own_bytes = (size_t)kn_bytes_of((uint64_t)plain_floats, sizeof(float));
    if (!plain) {
        KN_TRY(kn_ctx_scratch(c, own_bytes, "the phase weights", (void **)&own));
        ct_phase_weights(&wc, own);
        plain = own;
    }
    /* C, every product (read back by the epilogue while the block is in cache), then the bordered
     * copy of one image with slack for the last channel's dropped columns: one allocation (as two
     * of 430 and 445 KB, glibc gave their pages back after each call and the next faulted them in
     * again, about 115 faults a call: 4x4 s2 64->32 28x28 at 2 threads in op_sweep's workers ran
     * 0.86 ms against the column path's 0.64) */
    const size_t c_floats = (size_t)kn_bytes_of(kn_bytes_of((uint64_t)ops, (uint64_t)Mq), (uint64_t)N);
    const int64_t slack = ph->splane / ph->U[0]; /* >= the farthest tap offset past the grid (3-D) */
    const size_t x_floats = (size_t)kn_bytes_of((uint64_t)s->C, (uint64_t)ph->cplane) + (size_t)slack;
    const size_t c_bytes = (size_t)kn_bytes_of((uint64_t)c_floats + (uint64_t)x_floats + 16, sizeof(float));
    float *cbuf = NULL;
    kiln_status st = kn_ctx_scratch(c, c_bytes, "the phase GEMM's output and bordered input", (void **)&cbuf);
    float *xp = st ? NULL : cbuf + (c_floats + 15) / 16 * 16;
    const float **ap = st ? NULL : malloc(sizeof(float *) * (size_t)ops * 2);
    float **cp = st ? NULL : malloc(sizeof(float *) * (size_t)ops);
    if (st || !ap || !cp) {
        if (!st) kn_ctx_scratch_free(c, cbuf, c_bytes);
        if (own) kn_ctx_scratch_free(c, own, own_bytes);
        free(ap);
        free(cp);
        return st ? st : kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    const float **pka = ap + ops;
    const size_t per = swap ? kn_sgemm_packed_b_floats(Mq, Kp) : kn_sgemm_packed_a_floats(Mq, Kp);
    for (int64_t op = 0; op < ops; op++) {
        ap[op] = plain + op * Mq * Kp;
        cp[op] = cbuf + op * Mq * N;
        if (packed) pka[op] = packed + op * per;
    }
    /* B's rows: tap t reads the copy from t's offset (the copy's strides); past a channel's end
     * only by columns the epilogue drops, into the next channel or the slack */
    ct_phase_pack pk = {ph, xp, s->Cg * ph->cplane, {0}};
    const int last = s->nsp - 1;
    for (int64_t t = 0; t < ph->Tk; t++) {
        /* the row's tap picks the shifted set (1-D: a shift), the others a row of it */
        int64_t q = t / ph->T[last], off = last ? t % ph->T[last] * ph->splane : t % ph->T[last], stride = ph->RW;
        for (int d = last - 1; d >= 0; d--) {
            off += (q % ph->T[d]) * stride;
            q /= ph->T[d];
            stride *= ph->U[d];
        }
        pk.toff[t] = off;
    }
    memset(xp + s->C * ph->cplane, 0, sizeof(float) * (size_t)slack);
    ct_phase_epi ec;
    ct_phase_epi_init(&ec, s, ph, bias);
    for (int64_t n = 0; n < s->N && st == KILN_OK; n++) {
        ct_phase_copy cj = {s, ph, x + n * s->C * s->in_plane, xp};
        kn_parallel_for(c->pool, s->C, max64(1, 16384 / (ph->cplane + 1)), ct_phase_copy_range, &cj);
        ec.y = y + n * s->M * s->out_plane;
        kn_sgemm_batch gb = {.count = ops, .M = Mq, .N = N, .K = Kp, .alpha = 1.0f, .beta = 0.0f, .a = ap,
                             .lda = Kp, .c = cp, .ldc = N, .pack_b = ct_phase_pack_b, .pack_ctx = &pk,
                             .epilogue = ct_phase_store, .epilogue_ctx = &ec};
        if (packed) {
            if (swap) gb.at_packed = pka;
            else gb.a_packed = pka;
        }
        if (kn_sgemm_run(c->pool, &gb)) st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory in the GEMM");
    }
    kn_ctx_scratch_free(c, cbuf, c_bytes);
    if (own) kn_ctx_scratch_free(c, own, own_bytes);
    free(ap);
    free(cp);
    return st;
}

static kiln_status conv_transpose_f32(kn_kernel_ctx *c, const conv_shape *s, const float *x, const float *w,
                                      const float *bias, float *y, bool w_is_input) {
    int64_t ny = s->N * s->M * s->out_plane;
    ct_phase ph;
    if (ny > 0 && ct_phase_suits(s, &ph)) return conv_transpose_phases(c, s, &ph, x, w, bias, y, w_is_input);
    const bool tiles = conv_transpose_tiles(s) && s->in_plane > 0 && s->Cg > 0;
    if (tiles) {
        /* every output written once by ct_tiles_range */
    } else if (bias) {
        fill_bias(y, bias, s->N, s->M, s->out_plane);
    } else {
        memset(y, 0, sizeof(float) * (size_t)ny);
    }
    if (ny == 0 || s->in_plane == 0 || s->Cg == 0) return KILN_OK;
    int64_t rows = s->Mg * s->kk; /* col rows per group */
    /* kH*kW times the output's channels over the input's plane: bounded (kn_ctx_scratch) */
    const size_t col_bytes =
        (size_t)kn_bytes_of(kn_bytes_of(kn_bytes_of((uint64_t)s->G, (uint64_t)rows), (uint64_t)s->in_plane), sizeof(float));
    float *col = NULL;
    KN_TRY(kn_ctx_scratch(c, col_bytes, "the column buffer", (void **)&col));
    const float **ap = malloc(sizeof(float *) * (size_t)s->G * 2);
    float **cp = malloc(sizeof(float *) * (size_t)s->G);
    if (!ap || !cp) {
        kn_ctx_scratch_free(c, col, col_bytes);
        free(ap);
        free(cp);
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory for a %lld x %lld column buffer",
                               (long long)(s->G * rows), (long long)s->in_plane);
    }
    const float **bp = ap + s->G;
    /* constant weights: W_g^T packed once per session (the GEMM would pack them on every call; 9%
     * of a 2x2 s2 256->128 20x20 at 1 thread); not where the GEMM reads A in place */
    const float **apk = NULL;
    bool apk_swap = false;
    if (w_is_input && rows > 1 && s->in_plane > 1) {
        const bool swap = apk_swap = kn_sgemm_swaps(rows, s->in_plane, s->Cg);
        ct_weight_pack wp = {w, s->G, s->Cg, rows, swap};
        kn_const_layout lay = {swap ? 15 : 14, {s->G, s->Cg, rows, 0}};
        const size_t per = swap ? kn_sgemm_packed_b_floats(rows, s->Cg) : kn_sgemm_packed_a_floats(rows, s->Cg);
        const float *packed =
            kn_cpu_const_derived(c, 1, &lay, sizeof(float) * per * (size_t)s->G, ct_make_packed_weights, &wp);
        if (packed && (apk = malloc(sizeof(float *) * (size_t)s->G)) != NULL)
            for (int64_t g = 0; g < s->G; g++) apk[g] = packed + g * per;
    }
    /* 2-D with overlapping taps: the input's rows in chunks whose column buffer fits in half the L2,
     * the GEMM then col2im per chunk (col2im's rows shifted by the chunk's first row: its pad), so the
     * column buffer goes from the GEMM to col2im through L2, not L3 (4x4 s2 64->32 28x28: 1.6 MB) */
    const int64_t IH = s->nsp == 2 ? s->w.in[0] : 1, IW = s->nsp == 2 ? s->w.in[1] : s->in_plane;
    int64_t crows = IH;
    if (!tiles && s->nsp == 2) {
        const int64_t per_row = s->G * rows * IW * (int64_t)sizeof(float);
        const int64_t fit = max64(1, kn_conv_l2_bytes() / 2 / (per_row > 0 ? per_row : 1));
        if (fit < IH) {
            /* of [fit/2, fit] rows, the count whose columns fill the GEMM's 32-wide panels best and
             * keep the product's orientation (a transposed product would not read the packed weights) */
            double best = 0;
            for (int64_t r = (fit + 1) / 2; r <= fit; r++) {
                const int64_t n = r * IW;
                if (apk && kn_sgemm_swaps(rows, n, s->Cg) != apk_swap) continue;
                const double f = (double)n / (double)((n + 31) / 32 * 32);
                if (f >= best) best = f, crows = r;
            }
        }
    }
    kiln_status st = KILN_OK;
    for (int64_t n = 0; n < s->N && st == KILN_OK; n++) {
        for (int64_t r0 = 0; r0 < IH && st == KILN_OK; r0 += crows) {
            const int64_t nr = min64(crows, IH - r0), cn = nr * IW;
            for (int64_t g = 0; g < s->G; g++) {
                ap[g] = w + g * s->Cg * rows;
                bp[g] = x + (n * s->C + g * s->Cg) * s->in_plane + r0 * IW;
                cp[g] = col + g * rows * cn;
            }
            kn_sgemm_batch gb = {.count = s->G, .M = rows, .N = cn, .K = s->Cg, .trans_a = true,
                                 .alpha = 1.0f, .beta = 0.0f, .a = ap, .lda = rows, .b = bp, .ldb = s->in_plane,
                                 .c = cp, .ldc = cn};
            if (apk) { /* packed for the whole plane: used where the chunk's product runs the same way */
                const bool swap_now = kn_sgemm_swaps(rows, cn, s->Cg);
                if (swap_now == apk_swap) {
                    if (swap_now) gb.at_packed = apk;
                    else gb.a_packed = apk;
                }
            }
            st = kn_sgemm_run(c->pool, &gb);
            if (st) {
                st = kn_kernel_error(c, st, "out of memory in the GEMM");
                break;
            }
            if (tiles) {
                ct_tiles_job tj = {s, col, bias, y + n * s->M * s->out_plane};
                kn_parallel_for(c->pool, s->M, max64(1, 16384 / (s->out_plane + 1)), ct_tiles_range, &tj);
            } else if (nr == IH) {
                kn_linalg_col2im(c->pool, col, s->M, s->nsp, s->w.out, s->w.in, s->w.kernel, s->w.stride,
                                 s->w.dilation, s->w.pad_begin, y + n * s->M * s->out_plane);
            } else {
                const int64_t grid[2] = {nr, IW}, pad[2] = {s->w.pad_begin[0] - r0 * s->w.stride[0], s->w.pad_begin[1]};
                kn_linalg_col2im(c->pool, col, s->M, 2, s->w.out, grid, s->w.kernel, s->w.stride, s->w.dilation, pad,
                                 y + n * s->M * s->out_plane);
            }
        }
    }
    kn_ctx_scratch_free(c, col, col_bytes);
    free(ap);
    free(cp);
    free(apk);
    return st;
}

kiln_status kn_cpu_conv_transpose(kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0], *W = c->in[1], *B = c->n_inputs > 2 ? c->in[2] : NULL;
    kn_tensor *Y = c->out[0];
    conv_shape s;
    KN_TRY(conv_shape_make(c, X, W, true, &s));
    if (B && kn_tensor_count(B) != s.M)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "bias has %lld values for %lld output channels",
                               (long long)kn_tensor_count(B), (long long)s.M);
    if (kn_tensor_count(Y) != s.N * s.M * s.out_plane)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "output size does not match the computed geometry");
    /* double is computed in float here: ConvTranspose on doubles is rare */
    bool ox = false, ow = false, ob = false;
    const float *x = kn_linalg_f32_in(X, &ox), *w = kn_linalg_f32_in(W, &ow);
    const float *b = B ? kn_linalg_f32_in(B, &ob) : NULL;
    int64_t ny = kn_tensor_count(Y);
    float *y = Y->dtype == KILN_DTYPE_FLOAT ? Y->data : malloc(sizeof(float) * (size_t)(ny > 0 ? ny : 1));
    kiln_status st;
    if (!x || !w || (B && !b) || !y) st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    else if ((st = conv_transpose_f32(c, &s, x, w, b, y, w == W->data)) == KILN_OK && y != Y->data)
        kn_linalg_f32_out(y, Y, ny);
    if (ox) free((void *)x);
    if (ow) free((void *)w);
    if (ob) free((void *)b);
    if (y && y != Y->data) free(y);
    return st;
}

/* ------------------------------------------------------------------ Col2Im */

kiln_status kn_cpu_col2im(kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0], *img = c->in[1], *blk = c->in[2];
    kn_tensor *Y = c->out[0];
    int64_t nsp = kn_tensor_count(img);
    if (X->rank != 3 || nsp < 1 || nsp > KN_MAX_SPATIAL || kn_tensor_count(blk) != nsp)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "input must be 3-D and image_shape/block_shape of equal length");
    int64_t image[KN_MAX_SPATIAL], kernel[KN_MAX_SPATIAL], grid[KN_MAX_SPATIAL];
    for (int i = 0; i < nsp; i++) {
        image[i] = kn_tensor_get_i64(img, i);
        kernel[i] = kn_tensor_get_i64(blk, i);
    }
    /* the block grid is the output of a convolution of the image with the block */
    kn_window w;
    char why[512];
    kiln_status st = kn_window_plan(c->node, KN_WINDOW_CONV, (int)nsp, image, kernel, &w, why, sizeof why);
    if (st) return kn_kernel_error(c, st, "%s", why);
    int64_t L = 1, kk = 1;
    for (int i = 0; i < nsp; i++) {
        grid[i] = w.out[i];
        L *= grid[i];
        kk *= kernel[i];
    }
    if (L != X->dims[2] || X->dims[1] % kk)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "the input has %lld blocks but image and block shapes give %lld",
                               (long long)X->dims[2], (long long)L);
    int64_t C = X->dims[1] / kk, iplane = kn_tensor_count(Y) / (X->dims[0] * C > 0 ? X->dims[0] * C : 1);
    bool ox = false;
    const float *x = kn_linalg_f32_in(X, &ox);
    int64_t ny = kn_tensor_count(Y);
    float *y = Y->dtype == KILN_DTYPE_FLOAT ? Y->data : calloc((size_t)(ny > 0 ? ny : 1), sizeof(float));
    if (!x || !y) st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    else {
        memset(y, 0, sizeof(float) * (size_t)ny);
        for (int64_t n = 0; n < X->dims[0]; n++)
            kn_linalg_col2im(c->pool, x + n * X->dims[1] * L, C, (int)nsp, image, grid, kernel, w.stride, w.dilation,
                             w.pad_begin, y + n * C * iplane);
        if (y != Y->data) kn_linalg_f32_out(y, Y, ny);
    }
    if (ox) free((void *)x);
    if (y && y != Y->data) free(y);
    return st;
}

/* ------------------------------------------------------------------ DeformConv */

/* Bilinear sample of plane x (H x W) at (h, w); corners outside the plane count as zero. */
static float bilinear(const float *x, int64_t H, int64_t W, float h, float w) {
    if (!(h > -1.0f && h < (float)H && w > -1.0f && w < (float)W)) return 0.0f;
    float hf = floorf(h), wf = floorf(w);
    int64_t h0 = (int64_t)hf, w0 = (int64_t)wf;
    float lh = h - hf, lw = w - wf;
    float v00 = h0 >= 0 && w0 >= 0 ? x[h0 * W + w0] : 0.0f;
    float v01 = h0 >= 0 && w0 + 1 < W ? x[h0 * W + w0 + 1] : 0.0f;
    float v10 = h0 + 1 < H && w0 >= 0 ? x[(h0 + 1) * W + w0] : 0.0f;
    float v11 = h0 + 1 < H && w0 + 1 < W ? x[(h0 + 1) * W + w0 + 1] : 0.0f;
    return (1 - lh) * ((1 - lw) * v00 + lw * v01) + lh * ((1 - lw) * v10 + lw * v11);
}

/* 2-D only (as the ONNX reference): per image and group, the offset- and mask-adjusted im2col
 * matrix is sampled into a buffer and multiplied by the group's weights. */
/* DeformConv's offset_group (its prepare hook); the geometry is conv_shape_make's */
kiln_status kn_cpu_deform_conv_prepare(const kn_node *n, void *params) {
    kn_cpu_deform_prm *p = params;
    p->offset_group = kn_attr_int(n, "offset_group", 1);
    return KILN_OK;
}

kiln_status kn_cpu_deform_conv(kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0], *W = c->in[1], *O = c->in[2];
    const kn_tensor *B = c->n_inputs > 3 ? c->in[3] : NULL, *Mk = c->n_inputs > 4 ? c->in[4] : NULL;
    kn_tensor *Y = c->out[0];
    if (X->rank != 4) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "only 2-D DeformConv is supported");
    conv_shape s;
    KN_TRY(conv_shape_make(c, X, W, false, &s));
    win2 v = win2_of(&s.w);
    kn_cpu_deform_prm local;
    const kn_cpu_deform_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_cpu_deform_conv_prepare, &local, (const void **)&prm));
    int64_t og = prm->offset_group;
    if (og < 1 || s.C % og)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "offset_group %lld does not divide the %lld channels", (long long)og,
                               (long long)s.C);
    if (O->rank != 4 || O->dims[0] != s.N || O->dims[1] != og * s.kk * 2 || O->dims[2] != v.OH || O->dims[3] != v.OW)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "offset must be [N, offset_group*2*kH*kW, oH, oW] = [%lld,%lld,%lld,%lld]",
                               (long long)s.N, (long long)(og * s.kk * 2), (long long)v.OH, (long long)v.OW);
    if (Mk && kn_tensor_count(Mk) != s.N * og * s.kk * s.out_plane)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "mask must be [N, offset_group*kH*kW, oH, oW]");
    if (B && kn_tensor_count(B) != s.M)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "bias must have the %lld output channels", (long long)s.M);
    bool ox = false, ow = false, oo = false, ob = false, om = false;
    const float *x = kn_linalg_f32_in(X, &ox), *w = kn_linalg_f32_in(W, &ow), *off = kn_linalg_f32_in(O, &oo);
    const float *b = B ? kn_linalg_f32_in(B, &ob) : NULL, *mask = Mk ? kn_linalg_f32_in(Mk, &om) : NULL;
    int64_t ny = kn_tensor_count(Y), K = s.Cg * s.kk, P = s.out_plane;
    float *y = Y->dtype == KILN_DTYPE_FLOAT ? Y->data : malloc(sizeof(float) * (size_t)(ny > 0 ? ny : 1));
    /* the im2col matrix can be far larger than any input or output: bounded (kn_ctx_scratch) */
    const uint64_t kp = kn_bytes_of((uint64_t)K, (uint64_t)P);
    const size_t col_bytes = (size_t)kn_bytes_of(kp ? kp : 1, sizeof(float));
    float *col = NULL;
    kiln_status st = kn_ctx_scratch(c, col_bytes, "the deformed im2col matrix", (void **)&col);
    if (st != KILN_OK) {
        /* the message names the node, the size and the limit */
    } else if (!x || !w || !off || (B && !b) || (Mk && !mask) || !y)
        st = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    else {
        if (b) fill_bias(y, b, s.N, s.M, P);
        else memset(y, 0, sizeof(float) * (size_t)ny);
        const int64_t c_per_og = s.C / og;
        for (int64_t n = 0; n < s.N && st == KILN_OK; n++)
            for (int64_t g = 0; g < s.G && st == KILN_OK; g++) {
                for (int64_t ci = 0; ci < s.Cg; ci++) {
                    int64_t ch = g * s.Cg + ci, o = ch / c_per_og;
                    const float *xp = x + (n * s.C + ch) * s.in_plane;
                    for (int64_t r = 0; r < s.kk; r++) {
                        int64_t kh = r / v.KW, kw = r % v.KW;
                        const float *oh_p = off + ((n * og + o) * s.kk + r) * 2 * P, *ow_p = oh_p + P;
                        const float *mp = mask ? mask + ((n * og + o) * s.kk + r) * P : NULL;
                        float *dst = col + (ci * s.kk + r) * P;
                        for (int64_t q = 0; q < P; q++) {
                            int64_t i = q / v.OW, j = q % v.OW;
                            float hh = (float)(i * v.sh - v.ph + kh * v.dh) + oh_p[q];
                            float ww = (float)(j * v.sw - v.pw + kw * v.dw) + ow_p[q];
                            float val = bilinear(xp, v.H, v.W, hh, ww);
                            dst[q] = mp ? val * mp[q] : val;
                        }
                    }
                }
                st = kn_sgemm(c->pool, false, false, s.Mg, P, K, 1.0f, w + g * s.Mg * K, K, col, P, 1.0f,
                              y + (n * s.M + g * s.Mg) * P, P);
                if (st) st = kn_kernel_error(c, st, "out of memory in the GEMM");
            }
        if (st == KILN_OK && y != Y->data) kn_linalg_f32_out(y, Y, ny);
    }
    if (ox) free((void *)x);
    if (ow) free((void *)w);
    if (oo) free((void *)off);
    if (ob) free((void *)b);
    if (om) free((void *)mask);
    if (y && y != Y->data) free(y);
    kn_ctx_scratch_free(c, col, col_bytes);
    return st;
}

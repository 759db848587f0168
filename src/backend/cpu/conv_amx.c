/* bf16 convolution on AMX tiles without im2col (conv_amx.h).
 *
 * At stride 1, tap (kh, kw) of a convolution reads the input shifted by a constant: with the input
 * zero-padded to Hp x Wp and the output computed at every padded column (p = oh * Wp + ow, the
 * columns ow >= OW dropped when stored), output column p of tap (kh, kw) reads padded position
 * p + kh * dh * Wp + kw * dw. So the padded input is packed once, in AMX's B layout over whole
 * rows: unit (q, col) = channels 2q and 2q+1 at padded position col, rows of NX units (the padded
 * plane rounded up, plus the largest shift), and a B tile for channel pairs q..q+15 and 16
 * columns is a tile load from (q, col + shift) with a stride of one such row. No im2col (KH * KW
 * copies of the input, 73% of a 3x3 64-channel convolution's time through the GEMM) and the
 * input rounded to bf16 once.
 *
 * At stride s the same holds per phase image: phase (a, b) of the padded input is its rows
 * s * i + a and columns s * j + b, and tap (kh, kw) reads phase ((kh * dh) % sh, (kw * dw) % sw)
 * shifted by ((kh * dh) / sh) rows and ((kw * dw) / sw) columns of that image. Each phase a tap
 * uses is packed as above (cq rows of nx units), one after the other; the output columns' row pitch
 * Wp is a phase image's width. A 3x3 stride-2 convolution packs four phases (the input once, no
 * im2col's 2.25x), a 1x1 stride-2 one phase (the input subsampled).
 *
 * Few input channels (a stem: 3 channels, 7x7 at stride 2) would leave most of a tile's 32-deep
 * products empty: the kernel's columns are folded into the channels instead. Channel (c, kw) of
 * the folded input is x[c] read at columns sw * ow + kw * dw - pl, for each output column ow, so
 * the convolution becomes one of C * KW channels, a KH x 1 kernel and column stride 1 over a plane
 * OW wide (its rows still in phases of sh). Its packed input is blocked instead (fold_rows): 16
 * columns' cq pairs side by side, a B tile in one piece; a tap's shift, whole rows of Wp rounded
 * up to 16, stays a whole number of blocks. Fewer than 16 pairs (a stem's 21 channels: 11) are
 * packed compact, only the pairs used, and run with A tiles that many pairs wide and B tiles that
 * many rows (run_range's tile configuration): the 5 zero pairs of 16 were a third of the packed
 * bytes, of the B loads and of each product's depth (ResNet-50's stem 0.665 -> 0.531 ms).
 *
 * The weights are packed per tap as AMX A tiles: [tap][M rounded to 16][C/2 pairs rounded to 16].
 * A task computes 32 output channels over a chunk of columns, 32 at a time in four C tiles,
 * over every tap and channel pair; the tiles go through a block on the stack into y (only the
 * valid columns, the bias added), and the epilogue runs on the chunk's output.
 *
 * Compiled once with its own target (as sgemm_bf16.c), called only when kn_bgemm_amx(). */
#include "backend/cpu/conv_amx.h"

#include "backend/cpu/const_cache.h"
#include "backend/cpu/sgemm_bf16.h"
#include "ir/tensor.h"
#include "util/thread_buffer.h"
#include "util/threadpool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) &&                                                                      \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11)) &&                    \
    !defined(KN_NO_BF16_KERNEL)
#define KN_CONV_AMX 1
#include <immintrin.h>
#include "backend/cpu/vec_math.h" /* kn_v16_transpose_regs (bf16_pairs.h), outside the target region */
#endif

#define COL_CHUNK 256 /* padded columns per task */
#define WPF_STEPS 12   /* the weights' prefetch distance, in steps of 16 pairs (rows x 64 bytes each) */
#define MAX_INPUT_BYTES ((size_t)64 << 20)

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t pad_to(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

#define MAX_STRIDE 4

/* the padded geometry: Hp x Wp a phase image (at stride 1 the padded input) */
typedef struct geom {
    int64_t Hp, Wp, npad, npad32, shift_max, nx, mp; /* mp: M rounded to 16 */
    int64_t cqa; /* channel pairs rounded to 16: the weights' layout, an A tile 16 pairs deep */
    int64_t cq;  /* channel pairs in the packed input: cqa, or in the compact folded layout the pairs used (< 16) */
    int64_t nph; /* phase images packed (1 at stride 1) */
    bool blocked; /* the folded layout: columns in blocks of 16, a block's cq pairs side by side (geom_of) */
    int ph_h[MAX_STRIDE], ph_w[MAX_STRIDE]; /* a row / column phase's index among the packed ones, -1: unused */
    int nph_h, nph_w;
} geom;

static geom geom_of(const kn_amx_conv_shape *s, bool blocked) {
    geom g;
    g.blocked = blocked;
    g.Hp = s->OH + (s->KH - 1) * s->dh / s->sh;
    g.Wp = s->OW + (s->KW - 1) * s->dw / s->sw;
    if (blocked) g.Wp = pad_to(g.Wp, 16); /* (KW 1: every tap's shift a whole number of rows, of blocks) */
    g.npad = s->OH * g.Wp;
    g.npad32 = pad_to(g.npad, 32);
    g.shift_max = (s->KH - 1) * s->dh / s->sh * g.Wp + (s->KW - 1) * s->dw / s->sw;
    g.nx = pad_to(g.npad32 + g.shift_max, 16);
    g.cqa = pad_to((s->C + 1) / 2, 16);
    g.cq = blocked && (s->C + 1) / 2 < 16 ? (s->C + 1) / 2 : g.cqa;
    g.mp = pad_to(s->M, 16);
    g.nph_h = g.nph_w = 0;
    for (int a = 0; a < MAX_STRIDE; a++) g.ph_h[a] = g.ph_w[a] = -1;
    for (int64_t kh = 0; kh < s->KH && s->sh <= MAX_STRIDE; kh++)
        if (g.ph_h[kh * s->dh % s->sh] < 0) g.ph_h[kh * s->dh % s->sh] = g.nph_h++;
    for (int64_t kw = 0; kw < s->KW && s->sw <= MAX_STRIDE; kw++)
        if (g.ph_w[kw * s->dw % s->sw] < 0) g.ph_w[kw * s->dw % s->sw] = g.nph_w++;
    g.nph = (int64_t)g.nph_h * g.nph_w;
    return g;
}

/* tap t's B columns from the image's packed start: its phase's rows, then the shift in it */
static inline int64_t tap_offset(const kn_amx_conv_shape *s, const geom *g, int64_t kh, int64_t kw) {
    const int64_t ph = (int64_t)g->ph_h[kh * s->dh % s->sh] * g->nph_w + g->ph_w[kw * s->dw % s->sw];
    const int64_t shift = kh * s->dh / s->sh * g->Wp + kw * s->dw / s->sw;
    return ph * g->cq * g->nx + (g->blocked ? shift * g->cq : shift);
}

/* whether the kernel's columns go into the channels (few channels: C * KW of them fill more of a
 * tile's 32-deep products than C) */
static bool folds(const kn_amx_conv_shape *s) { return s->C < 16 && s->KW > 1 && s->C * s->KW >= 12 && s->C * s->KW <= 64; }

/* the folded convolution (folds(s)): C * KW channels, a KH x 1 kernel, column stride 1, no column
 * pads, OW columns; x is read through the original shape (split_rows, fold_rows) */
static kn_amx_conv_shape folded(const kn_amx_conv_shape *s) {
    kn_amx_conv_shape f = *s;
    f.C = s->C * s->KW;
    f.W = s->OW;
    f.KW = 1;
    f.pl = 0;
    f.dw = 1;
    f.sw = 1;
    return f;
}

bool kn_amx_conv_suits(const kn_amx_conv_shape *s) {
#if defined(KN_CONV_AMX)
    if (!kn_bgemm_amx() || (s->C < 16 && !folds(s)) || s->M < 16 || s->OH < 1 || s->OW < 1 || s->dh < 1 ||
        s->dw < 1 || s->sh < 1 || s->sw < 1 || s->sh > MAX_STRIDE || s->sw > MAX_STRIDE || s->KH < 1 || s->KW < 1)
        return false;
    /* A 1x1 kernel at stride 1 has no shifted copies to save, and the GEMM's packing of B (a 32-column
     * panel's pairs contiguous) beats this kernel's rows a plane apart: tried here with the bias,
     * residual and rounding applied to each block from the stack, ResNet-50's 56x56 and 28x28 1x1
     * layers were 1.07-1.47x slower than through the GEMM (bf16h, 1 thread, 2026-12-06). */
    if (s->KH * s->KW < 2 && s->sh * s->sw < 2) return false;
    /* (ONNX pads are not negative; input rows and columns no output reads are not packed) */
    if (s->pt < 0 || s->pl < 0) return false;
    const kn_amx_conv_shape e = folds(s) ? folded(s) : *s;
    const geom g = geom_of(&e, folds(s));
    return (double)g.nph * (double)g.cq * (double)g.nx * 4.0 * (double)s->N <= (double)MAX_INPUT_BYTES;
#else
    (void)s;
    return false;
#endif
}

bool kn_amx_conv_takes_x16(const kn_amx_conv_shape *s) { return kn_amx_conv_suits(s) && !folds(s); }

#if defined(KN_CONV_AMX)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")
#endif

/* GCC's tile intrinsics are asm statements that name no memory: order them with the plain loads
 * and stores around them */
#define FENCE() __asm__ volatile("" ::: "memory")

#include "backend/cpu/bf16_pairs.h"

/* ---------------------------------------------------------------- weights */

typedef struct wctx {
    const float *w;
    int64_t M, C, KH, KW, cq, mp; /* the convolution as run (folded: C * KW channels, KW 1) */
    int64_t fold;                 /* folded: the original KW (channel ch is (ch / fold, ch % fold)), else 1 */
} wctx;

static size_t weight_units(const wctx *c) { return (size_t)(c->KH * c->KW * c->mp * c->cq); }

/* Unit (m, q, t) = (w[m][2q][t], w[m][2q+1][t]) in bf16, zero past M and C, in the order the tiles
 * read them: blocks of 32 rows (the last of mp % 32 = 16 rows), each of taps x cq / 16 steps of
 * its rows' 16 pairs (64 bytes a row, an A tile 16 consecutive rows). A task streams its block's
 * weights from start to end (a deep layer's are larger than L2 and come from memory): in rows of
 * cq pairs, a tile read 64 bytes of 16 rows 4 * cq bytes apart and the hardware's prefetchers
 * did not follow (512 -> 512 3x3 at 7x7: 7 GB/s of weights; memory gives 13). */
static inline int64_t wunit(int64_t mp, int64_t cq, int64_t taps, int64_t m, int64_t q, int64_t t) {
    const int64_t m0 = m / 32 * 32, rb = min64(32, mp - m0);
    return m0 * taps * cq + ((t * (cq / 16) + q / 16) * rb + (m - m0)) * 16 + q % 16;
}

static void make_weights(const void *ctx, void *dst) {
    const wctx *c = ctx;
    uint32_t *u = dst;
    const int64_t taps = c->KH * c->KW;
    for (int64_t t = 0; t < taps; t++)
        for (int64_t m = 0; m < c->mp; m++)
            for (int64_t q = 0; q < c->cq; q++) {
                uint32_t v = 0;
                for (int h = 0; h < 2; h++) {
                    const int64_t ch = 2 * q + h;
                    /* folded: w[m][ch / fold][t][ch % fold] of the original [M, C / fold, KH, fold] */
                    const int64_t at = c->fold > 1 ? ((m * (c->C / c->fold) + ch / c->fold) * c->KH + t) * c->fold + ch % c->fold
                                                   : (m * c->C + ch) * taps + t;
                    if (m < c->M && ch < c->C) v |= (uint32_t)kn_f32_to_bf16(c->w[at]) << (16 * h);
                }
                u[wunit(c->mp, c->cq, taps, m, q, t)] = v;
            }
}

/* ---------------------------------------------------------------- the input */

/* the calling thread's buffer for the packed input */
static kn_thread_buffer input_buffer = KN_THREAD_BUFFER_INIT;
/* and for the folded input's rows in bf16 (split_rows) */
static kn_thread_buffer split_buffer = KN_THREAD_BUFFER_INIT;

typedef struct in_job {
    const kn_amx_conv_shape *s; /* as run (folded or not) */
    const geom *g;
    const float *x;
    const uint16_t *x16; /* x in bf16 instead (kn_amx_conv_io), or NULL */
    uint32_t *xv; /* N images of nph phases of cq rows of nx units */
} in_job;

/* 16 (or cnt < 16) floats src[0], src[2], ... src[2 * (cnt - 1)] */
static inline __m512 load_even(const float *src, int64_t cnt) {
    const int64_t span = 2 * cnt - 1;
    const __m512i idx = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    return _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(m16(span), src), idx,
                                  _mm512_maskz_loadu_ps(m16(span - 16), src + 16));
}

/* The folded input (folds()) in two passes. First x is rounded to bf16 once, each input row split
 * into its sw column phases and padded with zeros (xs): element k of row (n, c, ih)'s phase b is
 * x[n][c][ih][sw * k + b - pl] (0 outside the row), k < xs_len. Then channel (c, kw) of the folded
 * input at column ow is phase (kw * dw) % sw at k = ow + (kw * dw) / sw: a plain 16-lane load per
 * channel and 16 columns, where reading x directly took strided loads (gathers at the edges) for
 * each of the KW channels that share a row. */
static int64_t xs_len(const kn_amx_conv_shape *o, const geom *g) {
    return pad_to(g->Wp + (o->KW - 1) * o->dw / o->sw, 16);
}

typedef struct xs_job {
    const kn_amx_conv_shape *o; /* the convolution as given */
    const geom *g;              /* the folded one's */
    const float *x;
    uint16_t *xs; /* N x C x H rows of sw phases of xs_len elements */
} xs_job;

static void split_rows(void *arg, int64_t begin, int64_t end) {
    const xs_job *j = arg;
    const kn_amx_conv_shape *o = j->o;
    const int64_t L = xs_len(o, j->g);
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int64_t r = begin; r < end; r++) { /* r: input row (n, c, ih) */
        const float *src = j->x + r * o->W;
        for (int64_t b = 0; b < o->sw; b++) {
            uint16_t *dst = j->xs + (r * o->sw + b) * L;
            for (int64_t k = 0; k < L; k += 16) {
                const int64_t t0 = o->sw * k + b - o->pl; /* lane l reads column t0 + sw * l */
                __m512 v;
                if (o->sw == 1 && t0 >= 0 && t0 + 15 < o->W) v = _mm512_loadu_ps(src + t0);
                else if (o->sw == 2 && t0 >= 0 && t0 + 30 < o->W) v = load_even(src + t0, 16);
                else {
                    const __m512i iw = _mm512_add_epi32(_mm512_mullo_epi32(lane, _mm512_set1_epi32((int)o->sw)),
                                                        _mm512_set1_epi32((int)t0));
                    const __mmask16 in = _mm512_cmpge_epi32_mask(iw, _mm512_setzero_si512()) &
                                         _mm512_cmplt_epi32_mask(iw, _mm512_set1_epi32((int)o->W));
                    v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), in, iw, src, 4);
                }
                _mm256_storeu_si256((__m256i *)(dst + k), (__m256i)_mm512_cvtneps_pbh(v));
            }
        }
    }
}

typedef struct fold_job {
    const kn_amx_conv_shape *o;
    const geom *g;
    const uint16_t *xs;
    uint32_t *xv;
    int64_t i0; /* the phase rows' first (a band's, band_range), row i of g is row i0 + i of the phase image */
} fold_job;

/* Row i of phase image ph of image n (task (n, ph, i); i == Hp: the columns past the image that the
 * taps read), in the blocked layout: unit (q, col) of the image at col / 16 * 16 * cq + q * 16 +
 * col % 16, so that a B tile (cq pairs, 16 columns; cq < 16 in the compact layout) is in one
 * piece, and a row's units are written in one sweep, zeros included (a pair's half past C * KW, the
 * pairs past it in a 16-pair layout, the columns OW..Wp, rows outside x): the buffer is not cleared
 * first. */
static void fold_rows(void *arg, int64_t begin, int64_t end) {
    const fold_job *j = arg;
    const kn_amx_conv_shape *o = j->o;
    const geom *g = j->g;
    const int64_t L = xs_len(o, g), rows = g->Hp + 1, nch = o->C * o->KW;
    int ah[MAX_STRIDE]; /* packed row phase -> row phase (nph_w is 1: the folded column stride is 1) */
    for (int a = 0; a < MAX_STRIDE; a++)
        if (g->ph_h[a] >= 0) ah[g->ph_h[a]] = a;
    /* channel ch's row in xs relative to row (n, 0, ih)'s phase 0, at its shift: once a call, where
     * four divisions a channel and row were 40% of this function's samples (perf, ResNet-50's stem) */
    int64_t rel[64];
    for (int64_t ch = 0, c = 0, kw = 0; ch < nch; ch++) {
        const int64_t off = kw * o->dw;
        rel[ch] = (c * o->H * o->sw + off % o->sw) * L + off / o->sw;
        if (++kw == o->KW) kw = 0, c++;
    }
    for (int64_t r = begin; r < end; r++) {
        const int64_t n = r / (g->nph * rows), ph = r / rows % g->nph, i = r % rows;
        uint32_t *img = j->xv + (n * g->nph + ph) * g->cq * g->nx;
        if (i == g->Hp) {
            memset(img + i * g->Wp * g->cq, 0, sizeof(uint32_t) * (size_t)((g->nx - g->Hp * g->Wp) * g->cq));
            continue;
        }
        uint32_t *row = img + i * g->Wp * g->cq;
        const int64_t ih = o->sh * (j->i0 + i) + ah[ph] - o->pt;
        if (ih < 0 || ih >= o->H) {
            memset(row, 0, sizeof(uint32_t) * (size_t)(g->Wp * g->cq));
            continue;
        }
        /* channel ch's row in xs, at its shift */
        const uint16_t *chan[64], *base = j->xs + ((n * o->C * o->H + ih) * o->sw) * L;
        for (int64_t ch = 0; ch < nch; ch++) chan[ch] = base + rel[ch];
        for (int64_t jj = 0; jj < g->Wp; jj += 16) {
            const __mmask16 live = m16(o->OW - jj);
            uint32_t *blk = row + jj * g->cq;
            for (int64_t q = 0; q < g->cq; q++) {
                __m512i v = _mm512_setzero_si512();
                if (2 * q < nch) {
                    v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(live, chan[2 * q] + jj));
                    if (2 * q + 1 < nch)
                        v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_cvtepu16_epi32(
                                                                     _mm256_maskz_loadu_epi16(live, chan[2 * q + 1] + jj)),
                                                                 16));
                }
                _mm512_store_si512(blk + q * 16, v);
            }
        }
    }
}

/* pack_input's rows of channels c0, c0 + 1 of image n at phase (a, b) from a bf16 input (x16): the
 * pairs are the two channels' elements side by side, nothing to round */
static void pack_rows16(const in_job *j, int64_t a, int64_t b, int64_t c0, int64_t n, int64_t jlo, int64_t jend,
                        uint32_t *dst) {
    const kn_amx_conv_shape *s = j->s;
    const geom *g = j->g;
    const int64_t plane = s->H * s->W;
    const uint16_t *lo = j->x16 + (n * s->C + c0) * plane, *hi = c0 + 1 < s->C ? lo + plane : NULL;
    const __m512i low16 = _mm512_set1_epi32(0xFFFF);
    for (int64_t i = 0; i < g->Hp; i++) {
        const int64_t ih = s->sh * i + a - s->pt;
        if (ih < 0 || ih >= s->H || jlo >= jend) continue;
        uint32_t *row = dst + i * g->Wp;
        const uint16_t *l = lo + ih * s->W, *h = hi ? hi + ih * s->W : NULL;
        if (s->sw <= 2)
            for (int64_t jj = jlo; jj < jend; jj += 16) {
                const int64_t cnt = min64(16, jend - jj), iw = s->sw * jj + b - s->pl;
                __m512i vl, vh = _mm512_setzero_si512();
                if (s->sw == 1) {
                    vl = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m16(cnt), l + iw));
                    if (h) vh = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m16(cnt), h + iw));
                } else { /* elements iw, iw + 2, ...: the low halves of 32-bit lanes */
                    const __mmask32 m = (__mmask32)((1ull << (2 * cnt - 1)) - 1);
                    vl = _mm512_and_si512(_mm512_maskz_loadu_epi16(m, l + iw), low16);
                    if (h) vh = _mm512_and_si512(_mm512_maskz_loadu_epi16(m, h + iw), low16);
                }
                _mm512_mask_storeu_epi32(row + jj, m16(cnt), _mm512_or_si512(vl, _mm512_slli_epi32(vh, 16)));
            }
        else
            for (int64_t jj = jlo; jj < jend; jj++) {
                const int64_t iw = s->sw * jj + b - s->pl;
                row[jj] = (uint32_t)l[iw] | (h ? (uint32_t)h[iw] << 16 : 0u);
            }
    }
}

/* rows (image, phase, pair) of the packed input: zeros, then the phase image's part of the input's
 * rows at their padded place */
static void pack_input(void *arg, int64_t begin, int64_t end) {
    const in_job *j = arg;
    const kn_amx_conv_shape *s = j->s;
    const geom *g = j->g;
    const int64_t plane = s->H * s->W;
    int ah[MAX_STRIDE], aw[MAX_STRIDE]; /* packed phase index -> row / column phase */
    for (int a = 0; a < MAX_STRIDE; a++) {
        if (g->ph_h[a] >= 0) ah[g->ph_h[a]] = a;
        if (g->ph_w[a] >= 0) aw[g->ph_w[a]] = a;
    }
    for (int64_t r = begin; r < end; r++) {
        const int64_t n = r / (g->nph * g->cq), ph = r / g->cq % g->nph, q = r % g->cq, c0 = 2 * q;
        const int64_t a = ah[ph / g->nph_w], b = aw[ph % g->nph_w];
        uint32_t *dst = j->xv + r * g->nx;
        memset(dst, 0, sizeof(uint32_t) * (size_t)g->nx);
        if (c0 >= s->C) continue;
        /* phase columns jlo..jhi read input columns sw * j + b - pl inside [0, W) */
        const int64_t jlo = s->pl - b > 0 ? (s->pl - b + s->sw - 1) / s->sw : 0;
        const int64_t jend = s->W - 1 + s->pl - b < 0 ? 0 : min64(g->Wp, (s->W - 1 + s->pl - b) / s->sw + 1);
        if (j->x16) {
            pack_rows16(j, a, b, c0, n, jlo, jend, dst);
            continue;
        }
        const float *lo = j->x + (n * s->C + c0) * plane, *hi = c0 + 1 < s->C ? lo + plane : NULL;
        for (int64_t i = 0; i < g->Hp; i++) {
            const int64_t ih = s->sh * i + a - s->pt;
            if (ih < 0 || ih >= s->H || jlo >= jend) continue;
            uint32_t *row = dst + i * g->Wp;
            const float *l = lo + ih * s->W, *h = hi ? hi + ih * s->W : NULL;
            if (s->sw == 1) {
                for (int64_t jj = jlo; jj < jend; jj += 16) {
                    const __mmask16 m = m16(jend - jj);
                    const int64_t iw = jj + b - s->pl;
                    const __m512 va = _mm512_maskz_loadu_ps(m, l + iw);
                    const __m512 vb = h ? _mm512_maskz_loadu_ps(m, h + iw) : _mm512_setzero_ps();
                    _mm512_mask_storeu_epi32(row + jj, m, pairs_of(va, vb));
                }
            } else if (s->sw == 2) {
                for (int64_t jj = jlo; jj < jend; jj += 16) {
                    const int64_t cnt = min64(16, jend - jj), iw = 2 * jj + b - s->pl;
                    const __m512 va = load_even(l + iw, cnt);
                    const __m512 vb = h ? load_even(h + iw, cnt) : _mm512_setzero_ps();
                    _mm512_mask_storeu_epi32(row + jj, m16(cnt), pairs_of(va, vb));
                }
            } else {
                for (int64_t jj = jlo; jj < jend; jj++) {
                    const int64_t iw = s->sw * jj + b - s->pl;
                    row[jj] = (uint32_t)kn_f32_to_bf16(l[iw]) | (h ? (uint32_t)kn_f32_to_bf16(h[iw]) << 16 : 0u);
                }
            }
        }
    }
}

/* ---------------------------------------------------------------- the tiles */

typedef struct run_job {
    const kn_amx_conv_shape *s;
    const geom *g;
    const uint32_t *wa, *xv;
    const int64_t *toff; /* per tap: tap_offset */
    const float *bias;
    float *y;
    uint16_t *y16; /* y in bf16 instead, clamped to [lo, hi] (kn_amx_conv_io), or NULL */
    const float *add;      /* the residual (kn_amx_io), or NULL */
    const uint16_t *add16; /* the same in bf16, or NULL */
    float lo, hi;
    bool clamp; /* y (fp32) clamped to [lo, hi] as it is stored */
    kn_conv_epilogue_fn epi;
    const void *epi_ctx;
    int64_t mblocks, chunks; /* chunk ci: 32-column units [ci * units / chunks, (ci + 1) * units / chunks) */
    bool chunk_major;        /* tasks (image, chunk, block) instead of (image, block, chunk) */
    bool stream_a;           /* the weights' tiles loaded past L1 (tiles()) */
    int64_t plane;           /* y's channel stride: OH * OW of the whole output (a band's s is shorter) */
} run_job;

/* the output position of padded column p (p <= npad): columns past OW map to the next row's start */
static inline int64_t out_pos(const kn_amx_conv_shape *s, const geom *g, int64_t p) {
    const int64_t oh = p / g->Wp, ow = p % g->Wp;
    return oh * s->OW + (ow < s->OW ? ow : s->OW);
}

/* 16 values of a stored block: the sums (lanes k of t) plus the bias b, plus the residual (rk 1:
 * fp32 res, 2: bf16 res, at its element at), clamped to [vlo, vhi] where clamp */
static inline __attribute__((always_inline)) __m512 block_vec(const float *t, __mmask16 k, __m512 b, const int rk,
                                                              const void *res, int64_t at, const bool clamp,
                                                              __m512 vlo, __m512 vhi) {
    __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(k, t), b);
    if (rk == 1) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, (const float *)res + at));
    if (rk == 2) /* bf16 -> fp32: the 16 bits as the float's high half */
        v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32(
                                 _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)res + at)), 16)));
    /* (NaN stays NaN, as the epilogue's Relu and Clip leave it) */
    return clamp ? _mm512_min_ps(vhi, _mm512_max_ps(vlo, v)) : v;
}

/* 32 padded columns from p0 of output rows m0..m0+mr of image y: the valid columns of T (32 x 32,
 * row r for channel m0 + r) plus the bias, plus the residual (rk 1: fp32 res, 2: bf16 res, indexed
 * as y), clamped to [lo, hi] where clamp; half: y is bf16 (y16), the values clamped and rounded
 * (called with constant half, clamp and rk: one copy each) */
static inline __attribute__((always_inline)) void store_block(const kn_amx_conv_shape *s, const geom *g, int64_t plane,
                                                              const float *T, int mr, int64_t p0, void *y, int64_t m0,
                                                              const float *bias,
                                                              const bool half, const bool clamp, const int rk,
                                                              const void *res, float lo, float hi) {
    const int64_t ncols = min64(32, g->npad - p0);
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    for (int64_t j = 0; j < ncols;) {
        const int64_t p = p0 + j, oh = p / g->Wp, ow = p % g->Wp;
        const int64_t seg = min64(ncols - j, g->Wp - ow), valid = ow < s->OW ? min64(seg, s->OW - ow) : 0;
        if (valid > 0) {
            for (int r = 0; r < mr; r++) {
                const int64_t at = (m0 + r) * plane + oh * s->OW + ow;
                const __m512 b = _mm512_set1_ps(bias ? bias[m0 + r] : 0.0f);
                const float *t = T + r * 32 + j;
                if (half && valid == 32) { /* both halves rounded into one 64-byte store */
                    const __m512 v0 = block_vec(t, 0xFFFF, b, rk, res, at, true, vlo, vhi);
                    const __m512 v1 = block_vec(t + 16, 0xFFFF, b, rk, res, at + 16, true, vlo, vhi);
                    _mm512_storeu_si512((uint16_t *)y + at, (__m512i)_mm512_cvtne2ps_pbh(v1, v0));
                    continue;
                }
                for (int h = 0; h < 2 && valid > 16 * h; h++) {
                    const __mmask16 k = m16(valid - 16 * h);
                    const __m512 v = block_vec(t + 16 * h, k, b, rk, res, at + 16 * h, half || clamp, vlo, vhi);
                    if (half)
                        _mm256_mask_storeu_epi16((uint16_t *)y + at + 16 * h, k, (__m256i)_mm512_cvtneps_pbh(v));
                    else
                        _mm512_mask_storeu_ps((float *)y + at + 16 * h, k, v);
                }
            }
        }
        j += seg;
    }
}

/* The four C tiles of 32 channels from m0 and 32 padded columns from p0, into T. first: the task's
 * first columns, whose weights come from memory (a deep layer's are larger than L2): each tap
 * streams its block's weights (make_weights' order) a few steps ahead into L2 while it computes.
 * stream_a: the weights' tiles loaded with the hint that they are not reused soon (TILELOADDT1),
 * where a block's weights do not fit in L1 beside the input rows its 32 columns read (run_job's
 * stream_a). */
static inline __attribute__((always_inline)) void tiles(const bool two_m, const bool stream_a, const run_job *j,
                                                         const uint32_t *xv, int64_t m0, int64_t p0, bool first,
                                                         float *T) {
    const kn_amx_conv_shape *s = j->s;
    const geom *g = j->g;
    /* B tile (pairs q.., columns p..): b + q * qs + p * ps, rows bs bytes apart (the blocked layout: 16
     * pairs a block of 64 bytes, a column block 16 * cq units on) */
    const size_t bs = g->blocked ? 64 : (size_t)g->nx * 4;
    const int64_t qs = g->blocked ? 16 : g->nx, ps = g->blocked ? g->cq : 1;
    const int64_t taps = s->KH * s->KW, rb = min64(32, g->mp - m0); /* rb: rows of the block (16 or 32) */
    const uint32_t *ablk = j->wa + m0 * taps * g->cqa;
    _tile_zero(0);
    _tile_zero(1);
    if (two_m) {
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int64_t kh = 0; kh < s->KH; kh++)
        for (int64_t kw = 0; kw < s->KW; kw++) {
            const int64_t t = kh * s->KW + kw;
            const uint32_t *a = ablk + t * g->cqa * rb, *b = xv + p0 * ps + j->toff[t];
            for (int64_t q = 0; q < g->cq; q += 16, a += 16 * rb) {
                if (first) /* the stream WPF_STEPS steps ahead (past the block's end: the next block's) */
                    for (int r = 0; r < rb; r++) _mm_prefetch((const char *)(a + (WPF_STEPS * rb + r) * 16), _MM_HINT_T1);
                if (stream_a) _tile_stream_loadd(4, a, 64);
                else _tile_loadd(4, a, 64);
                _tile_loadd(6, b + q * qs, bs);
                _tile_loadd(7, b + q * qs + 16 * ps, bs);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                if (two_m) {
                    if (stream_a) _tile_stream_loadd(5, a + 16 * 16, 64);
                    else _tile_loadd(5, a + 16 * 16, 64);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
            }
        }
    _tile_stored(0, T, 128);
    _tile_stored(1, T + 16, 128);
    if (two_m) {
        _tile_stored(2, T + 16 * 32, 128);
        _tile_stored(3, T + 16 * 32 + 16, 128);
    }
    FENCE();
}

/* a tile configuration (palette 1): tiles 0-3 C, 4-5 A, 6-7 B */
typedef struct __attribute__((aligned(64))) tile_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_cfg;

static void run_range(void *arg, int64_t begin, int64_t end) {
    const run_job *j = arg;
    const kn_amx_conv_shape *s = j->s;
    const geom *g = j->g;
    const int64_t plane = j->plane;
    float T[32 * 32] __attribute__((aligned(64)));
    kn_amx_tiles_begin();
    if (g->cq < 16) { /* the compact folded layout: A tiles cq pairs wide (their rows still 64 bytes
                       * apart in the weights' layout), B tiles cq rows */
        tile_cfg cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.palette = 1;
        for (int t = 0; t < 8; t++) {
            cfg.colsb[t] = (uint16_t)(t == 4 || t == 5 ? 4 * g->cq : 64);
            cfg.rows[t] = (uint8_t)(t == 6 || t == 7 ? g->cq : 16);
        }
        FENCE();
        _tile_loadconfig(&cfg);
    }
    for (int64_t task = begin; task < end; task++) {
        const int64_t n = task / (j->mblocks * j->chunks), r = task % (j->mblocks * j->chunks);
        const int64_t m0 = (j->chunk_major ? r % j->mblocks : r / j->chunks) * 32,
                      ci = j->chunk_major ? r / j->mblocks : r % j->chunks;
        /* chunk ci: its share of the 32-column units, as even as they go */
        const int64_t units = (g->npad + 31) / 32, c0 = ci * units / j->chunks * 32;
        const int64_t c1 = min64(g->npad, (ci + 1) * units / j->chunks * 32);
        const int mr = (int)min64(32, s->M - m0);
        const uint32_t *xv = j->xv + n * g->nph * g->cq * g->nx;
        FENCE();
        for (int64_t p0 = c0; p0 < c1; p0 += 32) {
            if (mr > 16 && j->stream_a) tiles(true, true, j, xv, m0, p0, p0 == c0, T);
            else if (mr > 16) tiles(true, false, j, xv, m0, p0, p0 == c0, T);
            else if (j->stream_a) tiles(false, true, j, xv, m0, p0, p0 == c0, T);
            else tiles(false, false, j, xv, m0, p0, p0 == c0, T);
            void *yn = j->y16 ? (void *)(j->y16 + n * s->M * plane) : (void *)(j->y + n * s->M * plane);
            const float *a = j->add ? j->add + n * s->M * plane : NULL;
            const uint16_t *a16 = j->add16 ? j->add16 + n * s->M * plane : NULL;
            if (j->y16) {
                if (a) store_block(s, g, plane, T, mr, p0, yn, m0, j->bias, true, true, 1, a, j->lo, j->hi);
                else if (a16) store_block(s, g, plane, T, mr, p0, yn, m0, j->bias, true, true, 2, a16, j->lo, j->hi);
                else store_block(s, g, plane, T, mr, p0, yn, m0, j->bias, true, true, 0, NULL, j->lo, j->hi);
            } else if (a) store_block(s, g, plane, T, mr, p0, yn, m0, j->bias, false, true, 1, a, j->lo, j->hi);
            else if (a16) store_block(s, g, plane, T, mr, p0, yn, m0, j->bias, false, true, 2, a16, j->lo, j->hi);
            else if (j->clamp) store_block(s, g, plane, T, mr, p0, yn, m0, j->bias, false, true, 0, NULL, j->lo, j->hi);
            else store_block(s, g, plane, T, mr, p0, yn, m0, j->bias, false, false, 0, NULL, 0.0f, 0.0f);
        }
        if (j->epi && !j->y16) {
            const int64_t o0 = out_pos(s, g, c0), o1 = out_pos(s, g, c1);
            if (o1 > o0) j->epi(j->epi_ctx, j->y, n * s->M * plane + m0 * plane + o0, mr, o1 - o0, plane);
        }
    }
    kn_amx_tiles_end();
}


/* The folded convolution in bands of output rows (kn_amx_conv_io): a task packs the phase rows its
 * band's taps read (fold_rows, i0 the band's first row) into the calling thread's buffer, then runs
 * every channel block over the band (run_range on the band's geometry, y at the band's first row).
 * The packed rows are written into lines the thread wrote last band (in L2), where the whole
 * image's packed input (1.13 MB for ResNet's stem) was written into lines evicted since the last
 * run and read back from L2 by each channel block; the taps' extra rows (KH - 1 over sh of them a
 * band) are packed twice. */
typedef struct band_job {
    const kn_amx_conv_shape *o, *s; /* the convolution as given, as run (folded) */
    const uint16_t *xs;             /* split_rows' output */
    run_job rj;                     /* the whole output's; xv, toff, g, y16 set per band */
    int64_t rows, nbands;           /* output rows a band, bands an image */
    int failed;
} band_job;

static kn_thread_buffer band_buffer = KN_THREAD_BUFFER_INIT;

static void band_range(void *arg, int64_t begin, int64_t end) {
    band_job *b = arg;
    const kn_amx_conv_shape *s = b->s, *o = b->o;
    for (int64_t t = begin; t < end; t++) {
        const int64_t n = t / b->nbands, oh0 = t % b->nbands * b->rows, oh1 = min64(s->OH, oh0 + b->rows);
        kn_amx_conv_shape sb = *s;
        sb.N = 1;
        sb.OH = oh1 - oh0;
        const geom gb = geom_of(&sb, true);
        uint32_t *xv = kn_thread_buffer_get(&band_buffer, sizeof(uint32_t) * (size_t)(gb.nph * gb.cq * gb.nx));
        if (!xv) {
            __atomic_store_n(&b->failed, 1, __ATOMIC_RELAXED);
            return;
        }
        int64_t toff[32]; /* (KH <= 32: kn_amx_conv_io) */
        for (int64_t kh = 0; kh < s->KH; kh++) toff[kh] = tap_offset(&sb, &gb, kh, 0);
        const fold_job fj = {o, &gb, b->xs + n * o->C * o->H * o->sw * xs_len(o, &gb), xv, oh0};
        fold_rows((void *)&fj, 0, gb.nph * (gb.Hp + 1));
        run_job rj = b->rj;
        rj.s = &sb;
        rj.g = &gb;
        rj.xv = xv;
        rj.toff = toff;
        rj.y16 = b->rj.y16 + n * s->M * rj.plane + oh0 * s->OW;
        rj.chunks = 1;
        rj.chunk_major = false;
        run_range(&rj, 0, rj.mblocks);
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

kiln_status kn_amx_conv(kn_kernel_ctx *c, const kn_amx_conv_shape *s, const float *x, const float *w,
                        const float *bias, float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_const) {
    return kn_amx_conv_io(c, s, x, w, bias, y, epi, epi_ctx, w_const, NULL);
}

kiln_status kn_amx_conv_io(kn_kernel_ctx *c, const kn_amx_conv_shape *s_in, const float *x, const float *w,
                           const float *bias, float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_const,
                           const kn_amx_io *io) {
    const bool fold = folds(s_in);
    if (io && ((io->x16 && fold) || ((io->y16 || io->add || io->add16) && epi) || (io->add && io->add16) ||
               io->lo > io->hi))
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "the AMX convolution given bf16 operands it does not take");
    const kn_amx_conv_shape sf = fold ? folded(s_in) : *s_in, *s = &sf;
    const geom g = geom_of(s, fold);
    wctx wc = {w, s->M, s->C, s->KH, s->KW, g.cqa, g.mp, fold ? s_in->KW : 1};
    const size_t wbytes = sizeof(uint32_t) * weight_units(&wc);
    kn_const_layout lay = {fold ? 32 : 31, {s_in->M, s_in->C, s_in->KH, s_in->KW}};
    const uint32_t *wa = w_const ? kn_cpu_const_derived(c, 1, &lay, wbytes, make_weights, &wc) : NULL;
    uint32_t *own = NULL;
    if (!wa) {
        if (!(own = aligned_alloc(64, (wbytes + 63) / 64 * 64)))
            return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        make_weights(&wc, own);
        wa = own;
    }
    /* A 32-row block's weights over every tap (4 KB a tap per 16 channel pairs) are re-read for each
     * 32 columns; the input rows those columns read (a tap row's 16 pairs x 2-3 lines) are re-read by
     * the next kw taps. Where the weights exceed two thirds of L1 the two evicted each other: loaded
     * past L1 (TILELOADDT1) the input stays. Thread CPU time, 1 thread, bf16h, 3x3 (2026-12-06):
     * 64 channels on 56x56 (37 KB) 0.90, 256 on 28x28 0.96, 512 on 14x14 0.93, 512 on 7x7 0.94, 128
     * on 28x28 1.00-1.03, 256 stride 2 0.97; the 1x1 stride-2 layers level or (16 KB of weights) 1.05. */
    const bool stream_a = 32.0 * (double)(s->KH * s->KW) * (double)g.cqa * 4.0 > 32768.0;
    /* the folded convolution into bf16 without a residual (a ResNet stem under precision=bf16): in
     * bands of about 16 output rows (band_range; 8 to 28 rows tried on ResNet-50's stem at 1 thread,
     * 14-16 best), as many for each thread */
    const int64_t th = kn_threadpool_size(c->pool);
    const int64_t nbands = th * ((s->OH + 16 * th - 1) / (16 * th)), band_rows = (s->OH + nbands - 1) / nbands;
    const bool banded = fold && io && io->y16 && !io->add && !io->add16 && s->KH <= 32;
    uint32_t *xv = banded ? NULL : kn_thread_buffer_get(&input_buffer, sizeof(uint32_t) * (size_t)(s->N * g.nph * g.cq * g.nx));
    int64_t *toff = malloc(sizeof(int64_t) * (size_t)(s->KH * s->KW));
    if ((!xv && !banded) || !toff) {
        free(own);
        free(toff);
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int64_t kh = 0; kh < s->KH; kh++)
        for (int64_t kw = 0; kw < s->KW; kw++) toff[kh * s->KW + kw] = tap_offset(s, &g, kh, kw);
    if (fold) {
        uint16_t *xs = kn_thread_buffer_get(&split_buffer, sizeof(uint16_t) * (size_t)(s_in->N * s_in->C * s_in->H *
                                                                                        s_in->sw * xs_len(s_in, &g)));
        if (!xs) {
            free(own);
            free(toff);
            return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
        xs_job xj = {s_in, &g, x, xs};
        kn_parallel_for(c->pool, s_in->N * s_in->C * s_in->H, 8, split_rows, &xj);
        if (banded) {
            band_job bj = {.o = s_in,
                           .s = s,
                           .xs = xs,
                           .rj = {.s = s,
                                  .g = &g,
                                  .wa = wa,
                                  .bias = bias,
                                  .y16 = io->y16,
                                  .lo = io->lo,
                                  .hi = io->hi,
                                  .mblocks = (s->M + 31) / 32,
                                  .chunks = 1,
                                  .stream_a = stream_a,
                                  .plane = s->OH * s->OW},
                           .rows = band_rows,
                           .nbands = (s->OH + band_rows - 1) / band_rows};
            kn_parallel_for(c->pool, s->N * bj.nbands, 1, band_range, &bj);
            free(own);
            free(toff);
            return bj.failed ? kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory") : KILN_OK;
        }
        fold_job fj = {s_in, &g, xs, xv, 0};
        kn_parallel_for(c->pool, s->N * g.nph * (g.Hp + 1), 4, fold_rows, &fj);
    } else {
        in_job ij = {s, &g, x, io ? io->x16 : NULL, xv};
        kn_parallel_for(c->pool, s->N * g.nph * g.cq, 4, pack_input, &ij);
    }
    run_job rj = {s, &g, wa, xv, toff, bias, y, io ? io->y16 : NULL, io ? io->add : NULL, io ? io->add16 : NULL,
                  io ? io->lo : 0.0f, io ? io->hi : 0.0f,
                  io && !io->y16 && (io->lo > -INFINITY || io->hi < INFINITY), epi, epi_ctx, (s->M + 31) / 32,
                  (g.npad + COL_CHUNK - 1) / COL_CHUNK, false, false, s->OH * s->OW};
    /* Several threads, weights small against the input (the large planes: 64 channels 3x3 on 56x56,
     * the stem, 3x3 stride 2 on 56x56): the tasks column-chunk major, so the pool's contiguous shares
     * give each thread every channel block of its part of the plane (it reads only that part of the
     * packed input, though half of it packed by the other thread, which packs by channel pairs, and
     * writes the part of the output the next layer's share reads), the chunks a multiple of the
     * threads. Deep layers (weights larger than the input, from memory) stay channel
     * block major: each thread streams half the weights. */
    rj.stream_a = stream_a;
    if (th > 1 && 2.0 * (double)wbytes <= (double)g.nph * (double)g.cq * (double)g.nx * 4.0) {
        rj.chunk_major = true;
        rj.chunks = (rj.chunks + th - 1) / th * th;
    }
    kn_parallel_for(c->pool, s->N * rj.mblocks * rj.chunks, 1, run_range, &rj);
    free(own);
    free(toff);
    return KILN_OK;
}

#else /* no AMX intrinsics: kn_amx_conv_suits is false, this is never called */

kiln_status kn_amx_conv(kn_kernel_ctx *c, const kn_amx_conv_shape *s, const float *x, const float *w,
                        const float *bias, float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_const) {
    (void)s, (void)x, (void)w, (void)bias, (void)y, (void)epi, (void)epi_ctx, (void)w_const;
    return kn_kernel_error(c, KILN_ERR_INTERNAL, "this build has no AMX convolution");
}
kiln_status kn_amx_conv_io(kn_kernel_ctx *c, const kn_amx_conv_shape *s, const float *x, const float *w,
                           const float *bias, float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_const,
                           const kn_amx_io *io) {
    (void)s, (void)x, (void)w, (void)bias, (void)y, (void)epi, (void)epi_ctx, (void)w_const, (void)io;
    return kn_kernel_error(c, KILN_ERR_INTERNAL, "this build has no AMX convolution");
}

#endif

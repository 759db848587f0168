/* bf16 convolution on AMX tiles over channel-blocked activations (conv_amx_blocked.h).
 *
 * conv_amx.c keeps activations as AMX's B operand: a B tile row is one channel pair over 16
 * positions, so its input is repacked into channel pairs for every layer, its rows are a plane
 * apart, and a shifted 3x3 tap starts at any 4-byte offset. Here the activations are the A operand:
 * an A tile row is one position's 32 channels (16 pairs, 64 bytes), which the blocked layout stores
 * contiguously, so a tile is 16 consecutive positions of one 32-channel block with a row stride of
 * 64 bytes, and a shifted tap moves the tile by whole rows. The weights are B, packed once per
 * session: tile (m block, tap, c block, half) is 16 channel pairs x 16 output channels.
 *
 * Geometry as in conv_amx.c: the input is zero-padded to Hp x Wp (per phase image at stride s),
 * every padded column is computed (p = oh * Wp + ow) and those with ow >= OW dropped when stored;
 * tap (kh, kw) reads phase ((kh * dh) % sh, (kw * dw) % sw) shifted by (kh * dh / sh) * Wp +
 * (kw * dw / sw) positions. A 1x1 stride-1 convolution without pads over a blocked input reads it in
 * place (the tensor's last partial 32 positions through a small copy, so that no tile reads past
 * its end); every
 * other case copies the input into the padded blocked form first (64-byte rows; from an NCHW input,
 * transposed 16 x 16).
 *
 * A task computes 32 output channels over a chunk of positions, 32 at a time in four C tiles (two
 * position halves x two channel halves); the block goes through the stack: bias and a blocked
 * residual per position row, then either the clamp and a 64-byte bf16 store per position (blocked
 * Y) or a transpose and the NCHW stores (with an NCHW residual and the clamp).
 *
 * Compiled per CPU level like the other backend files; the tile code has its own target and runs only
 * where kn_bgemm_amx(). */
#include "backend/cpu/conv_amx_blocked.h"

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
#define KN_CONV_AMX_BLOCKED 1
#include <immintrin.h>
#include "backend/cpu/vec_math.h" /* kn_v16_transpose_regs (bf16_pairs.h), outside the target region */
#endif

#define BC KN_BLOCKED_CHANNELS
#define CHUNK 256 /* positions per task */
#define WPF_STEPS 8 /* the weights' prefetch distance, in steps of 2 KB */
#define MAX_STRIDE 4
#define MAX_COPY_BYTES ((size_t)64 << 20)

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t pad_to(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static bool declined; /* kn_amx_blocked_decline */
void kn_amx_blocked_decline(bool on) { declined = on; }

/* ---------------------------------------------------------------- layout conversions (any CPU) */

void kn_bf16_to_blocked(const uint16_t *src, uint16_t *dst, int64_t N, int64_t C, int64_t plane) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < plane; p++)
                dst[((n * (C / BC) + c / BC) * plane + p) * BC + c % BC] = src[(n * C + c) * plane + p];
}

void kn_bf16_from_blocked(const uint16_t *src, uint16_t *dst, int64_t N, int64_t C, int64_t plane) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < plane; p++)
                dst[(n * C + c) * plane + p] = src[((n * (C / BC) + c / BC) * plane + p) * BC + c % BC];
}

#if defined(KN_CONV_AMX_BLOCKED)

/* ---------------------------------------------------------------- geometry */

typedef struct bgeom {
    int64_t Hp, Wp, npad, nx, CB, MB, taps; /* nx: positions of one padded (phase) image of a block */
    int64_t nph;                             /* phase images (1 at stride 1) */
    int ph_h[MAX_STRIDE], ph_w[MAX_STRIDE], nph_h, nph_w;
    bool in_place; /* the blocked input read as it is (1x1, stride 1, no pads) */
} bgeom;

static bgeom bgeom_of(const kn_amx_conv_shape *s, bool blocked_x) {
    bgeom g;
    g.Hp = s->OH + (s->KH - 1) * s->dh / s->sh;
    g.Wp = s->OW + (s->KW - 1) * s->dw / s->sw;
    g.npad = s->OH * g.Wp;
    g.nx = pad_to(g.npad, 32) + (s->KH - 1) * s->dh / s->sh * g.Wp + (s->KW - 1) * s->dw / s->sw;
    g.CB = s->C / BC;
    g.MB = s->M / BC;
    g.taps = s->KH * s->KW;
    g.nph_h = g.nph_w = 0;
    for (int a = 0; a < MAX_STRIDE; a++) g.ph_h[a] = g.ph_w[a] = -1;
    for (int64_t kh = 0; kh < s->KH && s->sh <= MAX_STRIDE; kh++)
        if (g.ph_h[kh * s->dh % s->sh] < 0) g.ph_h[kh * s->dh % s->sh] = g.nph_h++;
    for (int64_t kw = 0; kw < s->KW && s->sw <= MAX_STRIDE; kw++)
        if (g.ph_w[kw * s->dw % s->sw] < 0) g.ph_w[kw * s->dw % s->sw] = g.nph_w++;
    g.nph = (int64_t)g.nph_h * g.nph_w;
    g.in_place = blocked_x && s->KH == 1 && s->KW == 1 && s->sh == 1 && s->sw == 1 && s->pt == 0 && s->pl == 0 &&
                 s->OH == s->H && s->OW == s->W;
    return g;
}

bool kn_amx_blocked_suits(const kn_amx_conv_shape *s) {
    if (declined || !kn_bgemm_amx() || s->N < 1 || s->C < BC || s->M < BC || s->C % BC || s->M % BC || s->OH < 1 || s->OW < 1 ||
        s->H < 1 || s->W < 1 || s->KH < 1 || s->KW < 1 || s->dh < 1 || s->dw < 1 || s->sh < 1 || s->sw < 1 ||
        s->sh > MAX_STRIDE || s->sw > MAX_STRIDE || s->pt < 0 || s->pl < 0)
        return false;
    const bgeom g = bgeom_of(s, false);
    return (double)s->N * (double)g.CB * (double)g.nph * (double)g.nx * 64.0 <= (double)MAX_COPY_BYTES;
}

/* ---------------------------------------------------------------- weights */

typedef struct bw_ctx {
    const float *w;
    int64_t M, C, taps;
} bw_ctx;

/* B tile (mb, t, cb, h) at (((mb * taps + t) * CB + cb) * 2 + h) * 512: row r (channel pair
 * cb * 16 + r), column n (output channel mb * 32 + h * 16 + n), the pair's two bf16 side by side.
 * An m block's tiles are contiguous in the order a task reads them. */
static void make_bweights(const void *ctx, void *dst) {
    const bw_ctx *c = ctx;
    uint16_t *u = dst;
    const int64_t CB = c->C / BC, MB = c->M / BC;
    for (int64_t mb = 0; mb < MB; mb++)
        for (int64_t t = 0; t < c->taps; t++)
            for (int64_t cb = 0; cb < CB; cb++)
                for (int64_t h = 0; h < 2; h++)
                    for (int64_t r = 0; r < 16; r++)
                        for (int64_t n = 0; n < 16; n++)
                            for (int64_t e = 0; e < 2; e++) {
                                const int64_t m = mb * BC + h * 16 + n, ch = cb * BC + 2 * r + e;
                                u[((((mb * c->taps + t) * CB + cb) * 2 + h) * 16 + r) * 32 + n * 2 + e] =
                                    kn_f32_to_bf16(c->w[(m * c->C + ch) * c->taps + t]);
                            }
}

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

static inline __m512 bf16_to_ps(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

/* ---------------------------------------------------------------- the padded copy */

static kn_thread_buffer copy_buffer = KN_THREAD_BUFFER_INIT;

typedef struct pack_job {
    const kn_blocked_conv *a;
    const bgeom *g;
    uint16_t *xp; /* N x CB x nph images of nx positions x 32 channels */
} pack_job;

/* 16 values of channel row src (fp32 or bf16 by f16) at columns iw0 + sw * i, i < cnt (in range) */
static inline __m512 load_cols(const float *f, const uint16_t *h, int64_t iw0, int64_t sw, int64_t cnt) {
    if (sw == 1) {
        const __mmask16 k = m16(cnt);
        return f ? _mm512_maskz_loadu_ps(k, f + iw0) : bf16_to_ps(_mm256_maskz_loadu_epi16(k, h + iw0));
    }
    float t[16] __attribute__((aligned(64)));
    for (int64_t i = 0; i < 16; i++)
        t[i] = i >= cnt ? 0.0f : f ? f[iw0 + sw * i] : kn_bf16_to_f32(h[iw0 + sw * i]);
    return _mm512_load_ps(t);
}

static void pack_range(void *arg, int64_t begin, int64_t end) {
    const pack_job *j = arg;
    const kn_blocked_conv *a = j->a;
    const kn_amx_conv_shape *s = &a->s;
    const bgeom *g = j->g;
    const int64_t plane = s->H * s->W;
    int ah[MAX_STRIDE], aw[MAX_STRIDE]; /* packed phase index -> row / column phase */
    for (int q = 0; q < MAX_STRIDE; q++) {
        if (g->ph_h[q] >= 0) ah[g->ph_h[q]] = q;
        if (g->ph_w[q] >= 0) aw[g->ph_w[q]] = q;
    }
    for (int64_t r = begin; r < end; r++) {
        const int64_t n = r / (g->CB * g->nph), cb = r / g->nph % g->CB, ph = r % g->nph;
        const int64_t pa = ah[ph / g->nph_w], pb = aw[ph % g->nph_w];
        uint16_t *dst = j->xp + r * g->nx * BC;
        /* phase columns jlo..jend read input columns sw * j + pb - pl inside [0, W) */
        const int64_t jlo = s->pl - pb > 0 ? (s->pl - pb + s->sw - 1) / s->sw : 0;
        const int64_t jend = s->W - 1 + s->pl - pb < 0 ? 0 : min64(g->Wp, (s->W - 1 + s->pl - pb) / s->sw + 1);
        /* only what no input reaches is zeroed: the rows outside the input, each row's pad columns
         * (64-byte stores) and the positions past the image (the copy writes the rest once) */
        memset(dst + g->Hp * g->Wp * BC, 0, sizeof(uint16_t) * BC * (size_t)(g->nx - g->Hp * g->Wp));
        for (int64_t i = 0; i < g->Hp; i++) {
            const int64_t ih = s->sh * i + pa - s->pt;
            uint16_t *row = dst + i * g->Wp * BC;
            if (ih < 0 || ih >= s->H || jlo >= jend) {
                memset(row, 0, sizeof(uint16_t) * BC * (size_t)g->Wp);
                continue;
            }
            for (int64_t jj = 0; jj < jlo; jj++) _mm512_storeu_si512(row + jj * BC, _mm512_setzero_si512());
            for (int64_t jj = jend; jj < g->Wp; jj++) _mm512_storeu_si512(row + jj * BC, _mm512_setzero_si512());
            const int64_t iw_lo = s->sw * jlo + pb - s->pl;
            if (a->xb) {
                const uint16_t *src = a->xb + ((n * g->CB + cb) * plane + ih * s->W) * BC;
                if (s->sw == 1) memcpy(row + jlo * BC, src + iw_lo * BC, sizeof(uint16_t) * BC * (size_t)(jend - jlo));
                else
                    for (int64_t jj = jlo; jj < jend; jj++)
                        _mm512_storeu_si512(row + jj * BC, _mm512_loadu_si512(src + (s->sw * jj + pb - s->pl) * BC));
                continue;
            }
            /* NCHW: 32 channel rows of 16 columns, paired and transposed into 16 position rows */
            const int64_t base = (n * s->C + cb * BC) * plane + ih * s->W;
            for (int64_t jj = jlo; jj < jend; jj += 16) {
                const int64_t cnt = min64(16, jend - jj), iw0 = s->sw * jj + pb - s->pl;
                __m512i v[16], o[16];
                for (int q = 0; q < 16; q++) {
                    const int64_t c0 = base + 2 * q * plane, c1 = c0 + plane;
                    const __m512 lo = load_cols(a->x ? a->x + c0 : NULL, a->x ? NULL : a->x16 + c0, iw0, s->sw, cnt);
                    const __m512 hi = load_cols(a->x ? a->x + c1 : NULL, a->x ? NULL : a->x16 + c1, iw0, s->sw, cnt);
                    v[q] = pairs_of(lo, hi);
                }
                tr16(v, o);
                for (int64_t k = 0; k < cnt; k++) _mm512_storeu_si512(row + (jj + k) * BC, o[k]);
            }
        }
    }
}

/* ---------------------------------------------------------------- the tiles */

typedef struct run_job {
    const kn_blocked_conv *a;
    const bgeom *g;
    const uint16_t *wb, *xp; /* xp: the padded copy, or NULL (in place) */
    const int64_t *toff;     /* per tap: its phase image and shift, in positions */
    const uint16_t *last;    /* in place, a plane not of whole 32-position units: the last block's last
                              * unit, zero-padded (32 positions) */
    int64_t chunks;          /* chunk ci: 32-position units [ci * units / chunks, (ci + 1) * units / chunks) */
    bool chunk_major;        /* tasks (image, chunk, block) instead of (image, block, chunk) */
    bool stream_x;           /* the input's tiles loaded past L1 (TILELOADDT1) */
    bool stream_w;           /* the weights' tiles loaded past L1 */
} run_job;

/* the sums of 32 positions from p (img's, whose c blocks are cbs positions apart) and m block mb,
 * into T (position rows of 32 channels). first: the task's first positions, whose weights come from
 * memory (a deep layer's are larger than L2): the block's weights (2 KB a step, in the order read)
 * brought into L2 WPF_STEPS steps ahead. half: only the first 16 positions (T's rows 0-15; a plane's
 * last block with at most 16 positions left: 14x14's 196 = 6 x 32 + 4, 28x28's 784 = 24 x 32 + 16),
 * two C tiles instead of four. */
static inline __attribute__((always_inline)) void block_tiles(const bool half, const run_job *j, const uint16_t *img,
                                                               int64_t cbs, int64_t p, int64_t mb, bool first,
                                                               const uint16_t *last, float *T) {
    const bgeom *g = j->g;
    const uint16_t *wm = j->wb + mb * g->taps * g->CB * 1024;
    _tile_zero(0);
    _tile_zero(1);
    if (!half) {
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int64_t t = 0; t < g->taps; t++) {
        const uint16_t *at = img + (j->toff[t] + p) * BC, *bt = wm + t * g->CB * 1024;
        for (int64_t cb = 0; cb < g->CB; cb++) {
            const uint16_t *x = last && cb == g->CB - 1 ? last : at + cb * cbs * BC, *w = bt + cb * 1024;
            if (first)
                for (int l = 0; l < 32; l++) _mm_prefetch((const char *)(w + WPF_STEPS * 1024 + l * 32), _MM_HINT_T1);
            if (j->stream_x) {
                _tile_stream_loadd(4, x, 64);
                if (!half) _tile_stream_loadd(5, x + 16 * BC, 64);
            } else {
                _tile_loadd(4, x, 64);
                if (!half) _tile_loadd(5, x + 16 * BC, 64);
            }
            if (j->stream_w) {
                _tile_stream_loadd(6, w, 64);
                _tile_stream_loadd(7, w + 512, 64);
            } else {
                _tile_loadd(6, w, 64);
                _tile_loadd(7, w + 512, 64);
            }
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            if (!half) {
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
        }
    }
    _tile_stored(0, T, 128);
    _tile_stored(1, T + 16, 128);
    if (!half) {
        _tile_stored(2, T + 16 * 32, 128);
        _tile_stored(3, T + 16 * 32 + 16, 128);
    }
    FENCE();
}

/* the block T (32 positions from p0 of image n, 32 channels from mb * 32) into Y */
static void store_block(const run_job *j, float *T, int64_t n, int64_t mb, int64_t p0) {
    const kn_blocked_conv *a = j->a;
    const kn_amx_conv_shape *s = &a->s;
    const bgeom *g = j->g;
    const int64_t OHW = s->OH * s->OW, rows = min64(32, g->npad - p0);
    const __m512 vlo = _mm512_set1_ps(a->lo), vhi = _mm512_set1_ps(a->hi);
    const __m512 b0 = a->bias ? _mm512_loadu_ps(a->bias + mb * BC) : _mm512_setzero_ps();
    const __m512 b1 = a->bias ? _mm512_loadu_ps(a->bias + mb * BC + 16) : _mm512_setzero_ps();
    const int64_t blk = (n * g->MB + mb) * OHW; /* the block's first position in blocked Y or residual */
    /* (the row and column stepped, not divided out per position: two divisions a row cost more
     * than the block's products on a 64-channel 1x1) */
    int64_t oh = p0 / g->Wp, ow = p0 % g->Wp - 1;
    for (int64_t r = 0; r < rows; r++) {
        if (++ow == g->Wp) ow = 0, oh++;
        if (ow >= s->OW) continue;
        const int64_t o = oh * s->OW + ow;
        __m512 v0 = _mm512_add_ps(_mm512_load_ps(T + r * 32), b0), v1 = _mm512_add_ps(_mm512_load_ps(T + r * 32 + 16), b1);
        if (a->addb) {
            const __m512i z = _mm512_loadu_si512(a->addb + (blk + o) * BC);
            v0 = _mm512_add_ps(v0, bf16_to_ps(_mm512_castsi512_si256(z)));
            v1 = _mm512_add_ps(v1, bf16_to_ps(_mm512_extracti64x4_epi64(z, 1)));
        }
        if (a->yb && (a->add || a->add16)) { /* an NCHW residual into a blocked Y: its 32 channel rows */
            float z[32] __attribute__((aligned(64)));
            for (int m = 0; m < 32; m++) {
                const int64_t at = (n * s->M + mb * BC + m) * OHW + o;
                z[m] = a->add ? a->add[at] : kn_bf16_to_f32(a->add16[at]);
            }
            v0 = _mm512_add_ps(v0, _mm512_load_ps(z));
            v1 = _mm512_add_ps(v1, _mm512_load_ps(z + 16));
        }
        if (a->yb) { /* (NaN stays NaN, as the epilogue's Relu and Clip leave it) */
            v0 = _mm512_min_ps(vhi, _mm512_max_ps(vlo, v0));
            v1 = _mm512_min_ps(vhi, _mm512_max_ps(vlo, v1));
            _mm512_storeu_si512(a->yb + (blk + o) * BC, (__m512i)_mm512_cvtne2ps_pbh(v1, v0));
        } else {
            _mm512_store_ps(T + r * 32, v0);
            _mm512_store_ps(T + r * 32 + 16, v1);
        }
    }
    if (a->yb) return;
    /* NCHW Y: channel rows of the 32 positions, then the valid runs of each row */
    float Tt[32 * 32] __attribute__((aligned(64)));
    for (int pb = 0; pb < 2; pb++)
        for (int cb = 0; cb < 2; cb++) {
            __m512i in[16], out[16];
            for (int i = 0; i < 16; i++) in[i] = _mm512_castps_si512(_mm512_load_ps(T + (pb * 16 + i) * 32 + cb * 16));
            tr16(in, out);
            for (int k = 0; k < 16; k++) _mm512_store_si512((__m512i *)(Tt + (cb * 16 + k) * 32 + pb * 16), out[k]);
        }
    for (int64_t jc = 0; jc < rows;) {
        const int64_t p = p0 + jc, oh = p / g->Wp, ow = p % g->Wp;
        const int64_t seg = min64(rows - jc, g->Wp - ow), valid = ow < s->OW ? min64(seg, s->OW - ow) : 0;
        for (int64_t h = 0; h < valid; h += 16) {
            const __mmask16 k = m16(valid - h);
            for (int m = 0; m < 32; m++) {
                const int64_t at = (n * s->M + mb * BC + m) * OHW + oh * s->OW + ow + h;
                __m512 v = _mm512_maskz_loadu_ps(k, Tt + m * 32 + jc + h);
                if (a->add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, a->add + at));
                if (a->add16) v = _mm512_add_ps(v, bf16_to_ps(_mm256_maskz_loadu_epi16(k, a->add16 + at)));
                v = _mm512_min_ps(vhi, _mm512_max_ps(vlo, v));
                if (a->y16) _mm256_mask_storeu_epi16(a->y16 + at, k, (__m256i)_mm512_cvtneps_pbh(v));
                else _mm512_mask_storeu_ps(a->y + at, k, v);
            }
        }
        jc += seg;
    }
}

/* rows position rows of T (32 channels each) into blocked Y at y: the bias, the blocked residual at
 * res where has_res, the clamp, one 64-byte bf16 store a row (the same operations, in the same
 * order, as store_block's blocked path) */
static inline __attribute__((always_inline)) void store_run_blocked(const float *T, int64_t rows, uint16_t *y,
                                                                    const uint16_t *res, __m512 b0, __m512 b1,
                                                                    __m512 vlo, __m512 vhi, const bool has_res) {
    for (int64_t r = 0; r < rows; r++) {
        __m512 v0 = _mm512_add_ps(_mm512_load_ps(T + r * 32), b0), v1 = _mm512_add_ps(_mm512_load_ps(T + r * 32 + 16), b1);
        if (has_res) {
            const __m512i z = _mm512_loadu_si512(res + r * BC);
            v0 = _mm512_add_ps(v0, bf16_to_ps(_mm512_castsi512_si256(z)));
            v1 = _mm512_add_ps(v1, bf16_to_ps(_mm512_extracti64x4_epi64(z, 1)));
        }
        v0 = _mm512_min_ps(vhi, _mm512_max_ps(vlo, v0));
        v1 = _mm512_min_ps(vhi, _mm512_max_ps(vlo, v1));
        _mm512_storeu_si512(y + r * BC, (__m512i)_mm512_cvtne2ps_pbh(v1, v0));
    }
}

/* store_block for a blocked Y with a blocked residual or none (every layer of a blocked chain): the
 * block's valid columns in runs of consecutive positions (a 1x1 layer's whole block one run), each
 * run a tight loop; store_block's general loop kept its position, row and pointers on the stack and
 * tested the operands per row (ResNet-50's 56x56 1x1 layers spent as long there as in the tiles). */
static void store_block_blocked(const run_job *j, const float *T, int64_t n, int64_t mb, int64_t p0) {
    const kn_blocked_conv *a = j->a;
    const kn_amx_conv_shape *s = &a->s;
    const bgeom *g = j->g;
    const int64_t OHW = s->OH * s->OW, rows = min64(32, g->npad - p0), blk = (n * g->MB + mb) * OHW * BC;
    const __m512 vlo = _mm512_set1_ps(a->lo), vhi = _mm512_set1_ps(a->hi);
    const __m512 b0 = a->bias ? _mm512_loadu_ps(a->bias + mb * BC) : _mm512_setzero_ps();
    const __m512 b1 = a->bias ? _mm512_loadu_ps(a->bias + mb * BC + 16) : _mm512_setzero_ps();
    uint16_t *y = a->yb + blk;
    const uint16_t *res = a->addb ? a->addb + blk : NULL;
    int64_t oh = p0 / g->Wp, ow = p0 % g->Wp; /* one division a block: the runs step the row */
    for (int64_t jc = 0; jc < rows;) {
        const int64_t seg = min64(rows - jc, g->Wp - ow), valid = ow < s->OW ? min64(seg, s->OW - ow) : 0;
        if (valid > 0) {
            const int64_t o = (oh * s->OW + ow) * BC;
            if (res) store_run_blocked(T + jc * 32, valid, y + o, res + o, b0, b1, vlo, vhi, true);
            else store_run_blocked(T + jc * 32, valid, y + o, NULL, b0, b1, vlo, vhi, false);
        }
        jc += seg;
        if ((ow += seg) == g->Wp) ow = 0, oh++;
    }
}

static void run_range(void *arg, int64_t begin, int64_t end) {
    const run_job *j = arg;
    const kn_amx_conv_shape *s = &j->a->s;
    const bgeom *g = j->g;
    const int64_t plane = s->H * s->W, units = (g->npad + 31) / 32;
    const bool blocked_y = j->a->yb && !j->a->add && !j->a->add16; /* (store_block_blocked) */
    float T[32 * 32] __attribute__((aligned(64)));
    kn_amx_tiles_begin();
    for (int64_t task = begin; task < end; task++) {
        const int64_t n = task / (g->MB * j->chunks), r = task % (g->MB * j->chunks);
        const int64_t mb = j->chunk_major ? r % g->MB : r / j->chunks, ci = j->chunk_major ? r / g->MB : r % j->chunks;
        const int64_t c0 = ci * units / j->chunks * 32, c1 = min64(g->npad, (ci + 1) * units / j->chunks * 32);
        const uint16_t *img = j->xp ? j->xp + n * g->CB * g->nph * g->nx * BC : j->a->xb + n * g->CB * plane * BC;
        const int64_t cbs = j->xp ? g->nph * g->nx : plane;
        for (int64_t p0 = c0; p0 < c1; p0 += 32) {
            /* in place, the tensor's last positions: their tile rows past its end read from the copy
             * (the other blocks' rows past their plane read the next block's, and are dropped) */
            const bool at_end = j->last && n == s->N - 1 && p0 + 32 > plane;
            if (g->npad - p0 <= 16) block_tiles(true, j, img, cbs, p0, mb, p0 == c0, at_end ? j->last : NULL, T);
            else block_tiles(false, j, img, cbs, p0, mb, p0 == c0, at_end ? j->last : NULL, T);
            if (blocked_y) store_block_blocked(j, T, n, mb, p0);
            else store_block(j, T, n, mb, p0);
        }
    }
    kn_amx_tiles_end();
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

kiln_status kn_amx_blocked_conv(kn_kernel_ctx *c, const kn_blocked_conv *a) {
    const kn_amx_conv_shape *s = &a->s;
    const int nx_in = !!a->x + !!a->x16 + !!a->xb, ny = !!a->y + !!a->y16 + !!a->yb,
              nres = !!a->add + !!a->add16 + !!a->addb;
    if (!kn_amx_blocked_suits(s) || nx_in != 1 || ny != 1 || nres > 1 || !(a->lo <= a->hi))
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "the blocked AMX convolution given operands it does not take");
    const bgeom g = bgeom_of(s, a->xb != NULL);
    bw_ctx wc = {a->w, s->M, s->C, g.taps};
    const size_t wbytes = sizeof(uint16_t) * (size_t)(s->M * s->C * g.taps);
    kn_const_layout lay = {35, {s->M, s->C, s->KH, s->KW}};
    const uint16_t *wb = a->w_const ? kn_cpu_const_derived(c, 1, &lay, wbytes, make_bweights, &wc) : NULL;
    uint16_t *own = NULL;
    if (!wb) {
        if (!(own = aligned_alloc(64, (wbytes + 63) / 64 * 64))) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        make_bweights(&wc, own);
        wb = own;
    }
    int64_t toff[64];
    int64_t *tp = g.taps <= 64 ? toff : malloc(sizeof(int64_t) * (size_t)g.taps);
    uint16_t *xp = NULL;
    if (!g.in_place)
        xp = kn_thread_buffer_get(&copy_buffer, sizeof(uint16_t) * BC * (size_t)(s->N * g.CB * g.nph * g.nx));
    if (!tp || (!g.in_place && !xp)) {
        free(own);
        if (tp != toff) free(tp);
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int64_t kh = 0; kh < s->KH; kh++)
        for (int64_t kw = 0; kw < s->KW; kw++) {
            const int64_t ph = (int64_t)g.ph_h[kh * s->dh % s->sh] * g.nph_w + g.ph_w[kw * s->dw % s->sw];
            tp[kh * s->KW + kw] = ph * g.nx + kh * s->dh / s->sh * g.Wp + kw * s->dw / s->sw;
        }
    if (xp) {
        pack_job pj = {a, &g, xp};
        kn_parallel_for(c->pool, s->N * g.CB * g.nph, 1, pack_range, &pj);
    }
    const int64_t plane = s->H * s->W, u0 = plane / 32 * 32;
    uint16_t last[32 * BC] __attribute__((aligned(64)));
    if (g.in_place && u0 < plane) {
        memset(last, 0, sizeof last);
        memcpy(last, a->xb + ((s->N * g.CB - 1) * plane + u0) * BC, sizeof(uint16_t) * BC * (size_t)(plane - u0));
    }
    run_job rj = {a, &g, wb, xp, tp, g.in_place && u0 < plane ? last : NULL, (g.npad + CHUNK - 1) / CHUNK, false};
    /* weights smaller than the input: chunk major (a chunk's input rows stay in L2 while every m
     * block's weights pass), the chunks a multiple of the threads; else block major (a block's
     * weights stay while the chunks pass) */
    const double in_bytes = (double)g.CB * (double)g.nph * (double)g.nx * 64.0;
    if ((double)wbytes <= in_bytes) {
        const int64_t th = kn_threadpool_size(c->pool);
        rj.chunk_major = true;
        rj.chunks = (rj.chunks + th - 1) / th * th;
    }
    /* A 1x1 layer's 32-position step reads 2 KB of input and 2 KB of weights per 32 channels, the
     * input once (the next m block's task reads it again, from L2), the weights again at the next
     * step: over 32 KB a step the two evicted each other from L1, and the input loaded past L1
     * (TILELOADDT1) keeps the weights (1 thread, bf16h, thread CPU time, 2026-12-06: 512 -> 512 ->
     * 1024 stride 2 on 28x28 chain 1.75 -> 1.52 ms). Not for 3x3 layers: their taps re-read the
     * input rows (128 channels at 28x28 1.16 -> 1.21 ms streamed); there the weights (read once a
     * step) go past L1 instead where they exceed 32 KB a block (chains of four 3x3, same setting:
     * 64 channels at 56x56 1.186 -> 1.15 and 1.18 -> 1.16, 128 at 28x28 1.18 -> 1.127, with a
     * stride-2 layer 2.28 -> 2.23). KILN_BLK_STREAM / KILN_BLK_STREAMW=KB: other thresholds. */
    {
        const char *e = getenv("KILN_BLK_STREAM"), *f = getenv("KILN_BLK_STREAMW");
        rj.stream_x = e ? atoi(e) > 0 : g.taps == 1 && g.CB * 4096 > 32768;
        const double wkb = f ? atoi(f) : 32.0, wblock = (double)g.taps * (double)g.CB * 2048.0;
        rj.stream_w = g.taps > 1 && wkb > 0 && wblock > wkb * 1024.0;
    }
    kn_parallel_for(c->pool, s->N * g.MB * rj.chunks, 1, run_range, &rj);
    free(own);
    if (tp != toff) free(tp);
    return KILN_OK;
}

#else /* no AMX intrinsics: kn_amx_blocked_suits is false, the convolution is never called */

bool kn_amx_blocked_suits(const kn_amx_conv_shape *s) {
    (void)s;
    return false;
}

kiln_status kn_amx_blocked_conv(kn_kernel_ctx *c, const kn_blocked_conv *a) {
    (void)a;
    return kn_kernel_error(c, KILN_ERR_INTERNAL, "this build has no AMX convolution");
}

#endif

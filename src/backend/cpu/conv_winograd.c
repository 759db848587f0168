/* Winograd F(4x4, 3x3) convolution on the CPU (AVX-512 or AVX2).
 *
 * A 3x3 stride-1 convolution computes each 4x4 block of outputs ("tile") from a 6x6 patch of
 * input with 36 multiplications per (input channel, output channel) pair instead of 144 (Lavin &
 * Gray 2016, interpolation points 0, +-1, +-2, infinity):
 *
 *     Y = A^T [ (G g G^T) (.) (B^T d B) ] A
 *
 * The weights are transformed once per session into U[36][M][C] (in double, then rounded), also
 * packed in the GEMM's A layout. A run goes over chunks of tile rows; per chunk:
 *  1. input transform: V[36][C][T] = B^T d B for every (channel, tile), 16 (AVX-512) or 8 (AVX2)
 *     tiles along a row per vector (isa_vec.h: the kernels are written once for both widths) (the patch columns come from 4-way deinterleaving permutes of contiguous loads);
 *  2. 36 independent GEMMs O[xi] = U[xi] V[xi] (M x T x C) over the existing micro-kernel;
 *  3. output transform: y = A^T O A + bias, interleaved back into the output rows, then the
 *     fused node's epilogue on the finished rows while they are in cache.
 * The transforms are O(C T) and O(M T); the products carry the work at 4x fewer FLOPs than the
 * direct convolution. Error: F(4x4, 3x3)'s transforms amplify rounding by about 10x over the
 * direct sum's (|G| entries 1/24..1, |A^T| up to 8); measured max error against a double
 * reference is reported in bench/results/cpu-conv3x3-2026-12-03.md and checked by the unit test. */
#include "backend/cpu/conv_winograd.h"

#include "backend/cpu/const_cache.h"
#include "backend/cpu/sgemm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/isa_vec.h"
#include "util/aligned.h"

/* The core's L2 in bytes (sysconf, which asks cpuid: once per process; 1 MB where unknown). */
int64_t kn_conv_l2_bytes(void) {
    static _Atomic int64_t kept;
    int64_t v = atomic_load_explicit(&kept, memory_order_relaxed);
    if (!v) {
        const long l = sysconf(_SC_LEVEL2_CACHE_SIZE);
        v = l >= (64 << 10) && l <= (64 << 20) ? l : 1 << 20;
        atomic_store_explicit(&kept, v, memory_order_relaxed);
    }
    return v;
}

#if KN_VL
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* ------------------------------------------------------------------ weights */

/* G of F(4x4, 3x3): u = G g G^T, 6x6 from 3x3. */
static const double WG[6][3] = {
    {1.0 / 4, 0, 0},
    {-1.0 / 6, -1.0 / 6, -1.0 / 6},
    {-1.0 / 6, 1.0 / 6, -1.0 / 6},
    {1.0 / 24, 1.0 / 12, 1.0 / 6},
    {1.0 / 24, -1.0 / 12, 1.0 / 6},
    {0, 0, 1},
};

typedef struct wino_wctx {
    const float *w;
    int64_t M, C;
    bool pack; /* also the packed copy after the plain one */
    bool swap; /* packed for the transposed product (U^T as the GEMM's B: kn_sgemm_swaps) */
} wino_wctx;

static size_t wino_u_floats(int64_t M, int64_t C) { return (size_t)(36 * M * C + 15) / 16 * 16; }

/* dst: U[n * n][M][C] = G g G^T (G: n x 3, in double), then (pack) n * n blocks packed for the
 * GEMM (A's layout, or B's when swap) from u_floats on: F(4x4, 3x3)'s (n 6) and F(2x2, 3x3)'s (n 4). */
static void wino_transform_weights(const wino_wctx *k, float *u, const double (*G)[3], int n, size_t u_floats) {
    const int64_t MC = k->M * k->C;
    for (int64_t m = 0; m < k->M; m++)
        for (int64_t c = 0; c < k->C; c++) {
            const float *g = k->w + (m * k->C + c) * 9;
            double t[6][3];
            for (int a = 0; a < n; a++)
                for (int j = 0; j < 3; j++) t[a][j] = G[a][0] * g[j] + G[a][1] * g[3 + j] + G[a][2] * g[6 + j];
            for (int a = 0; a < n; a++)
                for (int b = 0; b < n; b++)
                    u[(a * n + b) * MC + m * k->C + c] = (float)(t[a][0] * G[b][0] + t[a][1] * G[b][1] + t[a][2] * G[b][2]);
        }
    if (k->pack) {
        float *p = u + u_floats;
        const size_t per = k->swap ? kn_sgemm_packed_b_floats(k->M, k->C) : kn_sgemm_packed_a_floats(k->M, k->C);
        for (int xi = 0; xi < n * n; xi++) {
            if (k->swap) kn_sgemm_pack_b_full(u + xi * MC, k->C, true, k->M, k->C, p + xi * per);
            else kn_sgemm_pack_a(u + xi * MC, k->C, false, k->M, k->C, p + xi * per);
        }
    }
}

/* dst: U[36][M][C], then (pack) 36 blocks of kn_sgemm_packed_a_floats(M, C). */
static void wino_make_weights(const void *ctx, void *dst) {
    const wino_wctx *k = ctx;
    wino_transform_weights(k, dst, WG, 6, wino_u_floats(k->M, k->C));
}

/* ------------------------------------------------------------------ input transform */

typedef struct wino_job {
    const kn_wino_shape *s;
    const float *x;
    float *y;
    const float *bias;
    float *V, *O;        /* V[36][C][Tb], O[36][M][Tb] of the chunk */
    int64_t th, tw;      /* tiles per column and row of an image */
    int64_t r0, rows;    /* the chunk: tile rows [r0, r0 + rows) over all images */
    int64_t Tb;          /* tiles in the chunk: rows * tw */
    kn_conv_epilogue_fn epi;
    const void *epi_ctx;
    int64_t G;           /* rows of fewer than KN_VL tiles: G whole tile rows a vector (wino_*_multi) */
    int rows2;           /* AVX2, 3-4 tiles a row: wino_in_rows2 and half-vector stores (KILN_WINO_ROWS2) */
} wino_job;

#define lane_range kn_v_range /* lanes l with lo <= l < hi, l in [0, KN_VL) */

/* B^T (6x6) applied to six vectors. */
#define WINO_BT(d0, d1, d2, d3, d4, d5, o0, o1, o2, o3, o4, o5)                                         \
    do {                                                                                                \
        const kn_vf f4 = kn_vf_set1(4.0f), f5 = kn_vf_set1(5.0f), f2 = kn_vf_set1(2.0f); \
        o0 = kn_vf_fnmadd(f5, d2, kn_vf_fmadd(f4, d0, d4));                                     \
        o5 = kn_vf_fnmadd(f5, d3, kn_vf_fmadd(f4, d1, d5));                                     \
        const kn_vf s12 = kn_vf_add(d1, d2), s34 = kn_vf_add(d3, d4);                          \
        const kn_vf m12 = kn_vf_sub(d1, d2), m43 = kn_vf_sub(d4, d3);                          \
        o1 = kn_vf_fnmadd(f4, s12, s34);                                                            \
        o2 = kn_vf_fmadd(f4, m12, m43);                                                             \
        const kn_vf m42 = kn_vf_sub(d4, d2), m31 = kn_vf_sub(d3, d1);                          \
        o3 = kn_vf_fmadd(f2, m31, m42);                                                             \
        o4 = kn_vf_fnmadd(f2, m31, m42);                                                            \
    } while (0)

static void wino_in_range(void *arg, int64_t begin, int64_t end) {
    const wino_job *j = arg;
    const kn_wino_shape *s = j->s;
    const int64_t groups = (j->tw + KN_VL - 1) / KN_VL;
    float u[6][5 * KN_VL] __attribute__((aligned(64)));
    /* lane l of P_m is element 4l + m of 4 KN_VL: index (4l + m) mod 2 KN_VL into the pair (lo, hi);
     * P_4 and P_5 are P_0 and P_1 a lane on, their last lane E's first or second */
    kn_vi idx[4], sh0, sh1;
    {
        int32_t t[KN_VL];
        for (int m = 0; m < 4; m++) {
            for (int l = 0; l < KN_VL; l++) t[l] = (4 * l + m) & (2 * KN_VL - 1);
            idx[m] = kn_vi_loadu(t);
        }
        for (int l = 0; l < KN_VL; l++) t[l] = l + 1;
        sh0 = kn_vi_loadu(t);
        t[KN_VL - 1] = KN_VL + 1;
        sh1 = kn_vi_loadu(t);
    }
    const kn_vmask upper = (kn_vmask)(KN_VALL & ~kn_v_tail(KN_VL / 2));
    for (int64_t it = begin; it < end; it++) {
        const int64_t c = it / j->rows, rr = it % j->rows, r = j->r0 + rr;
        const int64_t n = r / j->th, ti = r % j->th;
        const float *xc = j->x + (n * s->C + c) * s->H * s->W;
        const float *rowp[6];
        for (int k = 0; k < 6; k++) {
            const int64_t ih = ti * 4 - s->ph + k;
            rowp[k] = ih >= 0 && ih < s->H ? xc + ih * s->W : NULL;
        }
        for (int64_t g = 0; g < groups; g++) {
            const int64_t nt = min64(KN_VL, j->tw - KN_VL * g);
            /* vertical: the six patch rows over 5 vectors of columns */
            for (int v = 0; v < 5; v++) {
                const int64_t iw0 = 4 * KN_VL * g + KN_VL * v - s->pw;
                const kn_vmask mk = lane_range(-iw0, s->W - iw0);
                kn_vf d[6];
                for (int k = 0; k < 6; k++)
                    d[k] = rowp[k] && mk ? kn_vf_maskz_loadu(mk, rowp[k] + iw0) : kn_vf_zero();
                kn_vf o0, o1, o2, o3, o4, o5;
                WINO_BT(d[0], d[1], d[2], d[3], d[4], d[5], o0, o1, o2, o3, o4, o5);
                kn_vf_store(u[0] + KN_VL * v, o0);
                kn_vf_store(u[1] + KN_VL * v, o1);
                kn_vf_store(u[2] + KN_VL * v, o2);
                kn_vf_store(u[3] + KN_VL * v, o3);
                kn_vf_store(u[4] + KN_VL * v, o4);
                kn_vf_store(u[5] + KN_VL * v, o5);
            }
            /* horizontal: per row a, the six columns of KN_VL tiles, then B^T along them */
            const kn_vmask keep = kn_v_tail(nt);
            float *dst = j->V + c * j->Tb + rr * j->tw + KN_VL * g;
            const int64_t xs = s->C * j->Tb; /* between consecutive xi */
            for (int a = 0; a < 6; a++) {
                const kn_vf A = kn_vf_load(u[a]), B = kn_vf_load(u[a] + KN_VL), C = kn_vf_load(u[a] + 2 * KN_VL),
                            D = kn_vf_load(u[a] + 3 * KN_VL), E = kn_vf_load(u[a] + 4 * KN_VL);
                kn_vf p[6];
                for (int m = 0; m < 4; m++)
                    p[m] = kn_vf_blend(upper, kn_vf_perm2(A, idx[m], B), kn_vf_perm2(C, idx[m], D));
                p[4] = kn_vf_perm2(p[0], sh0, E);
                p[5] = kn_vf_perm2(p[1], sh1, E);
                kn_vf o[6];
                WINO_BT(p[0], p[1], p[2], p[3], p[4], p[5], o[0], o[1], o[2], o[3], o[4], o[5]);
                for (int b = 0; b < 6; b++) kn_vf_mask_storeu(dst + (a * 6 + b) * xs, keep, o[b]);
            }
        }
    }
}

/* ------------------------------------------------------------------ rows of fewer than KN_VL tiles
 * (14x14 planes: 4 tiles a row, 25% of AVX-512's lanes above): a vector holds G = KN_VL / tw whole tile
 * rows so the lanes stay full; the patches are gathered (masked lanes read nothing, so the padding
 * needs no copy) and the outputs stored 4 columns a tile. Items: (vector, block of 16 channels). */

typedef struct wino_lanes {
    int32_t base[KN_VL]; /* offset of the tile's patch origin in channel 0's plane of its image */
    int64_t yoff[KN_VL]; /* offset of the tile's first output in output channel 0 */
    int ti[KN_VL], tj[KN_VL], n[KN_VL];
    kn_vmask valid, row[6], col[6];
} wino_lanes;

static void wino_lanes_of(const wino_job *j, int64_t vec, wino_lanes *L) {
    const kn_wino_shape *s = j->s;
    memset(L, 0, sizeof *L);
    for (int l = 0; l < KN_VL; l++) {
        const int64_t rr = vec * j->G + l / j->tw, tj = l % j->tw;
        if (l >= j->G * j->tw || rr >= j->rows) continue;
        const int64_t r = j->r0 + rr, n = r / j->th, ti = r % j->th;
        L->valid |= (kn_vmask)(1u << l);
        L->base[l] = (int32_t)((n * s->C * s->H + ti * 4 - s->ph) * s->W + tj * 4 - s->pw);
        L->yoff[l] = n * s->M * s->OH * s->OW + ti * 4 * s->OW + tj * 4;
        L->ti[l] = (int)ti, L->tj[l] = (int)tj, L->n[l] = (int)n;
        for (int k = 0; k < 6; k++) {
            const int64_t ih = ti * 4 - s->ph + k, iw = tj * 4 - s->pw + k;
            if (ih >= 0 && ih < s->H) L->row[k] |= (kn_vmask)(1u << l);
            if (iw >= 0 && iw < s->W) L->col[k] |= (kn_vmask)(1u << l);
        }
    }
}

#if KN_VL == 8
/* AVX2, rows of 3 or 4 tiles (planes 9-16 columns wide: G = 2 tile rows a vector): the 36 masked
 * gathers a channel (Zen 3: 35% of 3x3 32 -> 32 on 14x14 at batch 32) become contiguous loads. Per
 * tile row (the vector's two halves), the six patch rows over 3 vectors of columns (masked at the
 * plane's edges), B^T down them; then per transformed row a the tiles' columns 4t .. 4t + 5 are
 * gathered by in-lane 4x4 transposes of 128-bit loads (tile t in lane t of each half: the upper
 * half holds the second tile row), B^T along them. At 3 tiles a row, lanes (0 1 2 4 5 6) move to
 * (0 .. 5), the layout of wino_in_multi. The same sums as wino_in_range's order (columns last).
 * KILN_WINO_ROWS2=0: the gathers, and wino_out_multi's masked stores (tests, measurements). */

static void wino_in_rows2(const wino_job *j, int64_t begin, int64_t end) {
    const kn_wino_shape *s = j->s;
    const int64_t ncb = (s->C + 15) / 16, xs = s->C * j->Tb, plane = s->H * s->W;
    float u[2][6][24] __attribute__((aligned(32)));
    const __m256i pack3 = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 7, 7);
    kn_vmask colm[3];
    for (int v = 0; v < 3; v++) colm[v] = lane_range(s->pw - 8 * v, s->W + s->pw - 8 * v);
    wino_lanes L;
    int64_t have = -1;
    for (int64_t it = begin; it < end; it++) {
        const int64_t vec = it / ncb, cb = it % ncb;
        if (vec != have) wino_lanes_of(j, vec, &L), have = vec;
        const int64_t t0 = vec * j->G * j->tw;
        const int half_lane[2] = {0, (int)j->tw};
        for (int64_t c = cb * 16; c < min64(s->C, cb * 16 + 16); c++) {
            const float *xc = j->x + c * plane;
            for (int h = 0; h < 2; h++) {
                const int l = half_lane[h];
                const bool on = L.valid >> l & 1;
                for (int v = 0; v < 3; v++) {
                    kn_vf d[6];
                    for (int k = 0; k < 6; k++)
                        d[k] = on && (L.row[k] >> l & 1) && colm[v]
                                   ? kn_vf_maskz_loadu(colm[v], xc + L.base[l] + (int64_t)k * s->W + 8 * v)
                                   : kn_vf_zero();
                    kn_vf o[6];
                    WINO_BT(d[0], d[1], d[2], d[3], d[4], d[5], o[0], o[1], o[2], o[3], o[4], o[5]);
                    for (int a = 0; a < 6; a++) kn_vf_store(u[h][a] + 8 * v, o[a]);
                }
            }
            float *dst = j->V + c * j->Tb + t0;
            for (int a = 0; a < 6; a++) {
                __m256 r[5];
                for (int t = 0; t < 5; t++) r[t] = _mm256_loadu2_m128(u[1][a] + 4 * t, u[0][a] + 4 * t);
                const __m256 a0 = _mm256_unpacklo_ps(r[0], r[1]), a1 = _mm256_unpackhi_ps(r[0], r[1]);
                const __m256 b0 = _mm256_unpacklo_ps(r[2], r[3]), b1 = _mm256_unpackhi_ps(r[2], r[3]);
                const __m256 c0 = _mm256_unpacklo_ps(r[1], r[2]), c1 = _mm256_unpacklo_ps(r[3], r[4]);
                const kn_vf p0 = _mm256_shuffle_ps(a0, b0, 0x44), p1 = _mm256_shuffle_ps(a0, b0, 0xEE);
                const kn_vf p2 = _mm256_shuffle_ps(a1, b1, 0x44), p3 = _mm256_shuffle_ps(a1, b1, 0xEE);
                const kn_vf p4 = _mm256_shuffle_ps(c0, c1, 0x44), p5 = _mm256_shuffle_ps(c0, c1, 0xEE);
                kn_vf o[6];
                WINO_BT(p0, p1, p2, p3, p4, p5, o[0], o[1], o[2], o[3], o[4], o[5]);
                for (int b = 0; b < 6; b++) {
                    if (j->tw == 3) o[b] = _mm256_permutevar8x32_ps(o[b], pack3);
                    kn_vf_mask_storeu(dst + (a * 6 + b) * xs, L.valid, o[b]);
                }
            }
        }
    }
}
#endif

static void wino_in_multi(void *arg, int64_t begin, int64_t end) {
    const wino_job *j = arg;
#if KN_VL == 8
    if ((j->tw == 4 || j->tw == 3) && j->G == 2 && j->rows2) {
        wino_in_rows2(j, begin, end);
        return;
    }
#endif
    const kn_wino_shape *s = j->s;
    const int64_t ncb = (s->C + 15) / 16, xs = s->C * j->Tb, plane = s->H * s->W;
    float h[6][6][KN_VL] __attribute__((aligned(64)));
    wino_lanes L;
    int64_t have = -1;
    for (int64_t it = begin; it < end; it++) {
        const int64_t vec = it / ncb, cb = it % ncb;
        if (vec != have) wino_lanes_of(j, vec, &L), have = vec;
        const kn_vi vbase = kn_vi_loadu(L.base);
        kn_vmask mk[6][6];
        for (int r = 0; r < 6; r++)
            for (int q = 0; q < 6; q++) mk[r][q] = L.row[r] & L.col[q] & L.valid;
        const int64_t t0 = vec * j->G * j->tw;
        for (int64_t c = cb * 16; c < min64(s->C, cb * 16 + 16); c++) {
            const float *xc = j->x + c * plane;
            for (int r = 0; r < 6; r++) {
                kn_vf d[6];
                for (int q = 0; q < 6; q++) {
                    const kn_vi idx = kn_vi_add(vbase, kn_vi_set1((int32_t)(r * s->W + q)));
                    d[q] = kn_vf_mask_gather(mk[r][q], idx, xc);
                }
                kn_vf o0, o1, o2, o3, o4, o5;
                WINO_BT(d[0], d[1], d[2], d[3], d[4], d[5], o0, o1, o2, o3, o4, o5);
                kn_vf_store(h[r][0], o0);
                kn_vf_store(h[r][1], o1);
                kn_vf_store(h[r][2], o2);
                kn_vf_store(h[r][3], o3);
                kn_vf_store(h[r][4], o4);
                kn_vf_store(h[r][5], o5);
            }
            float *dst = j->V + c * j->Tb + t0;
            for (int b = 0; b < 6; b++) {
                kn_vf o[6];
                WINO_BT(kn_vf_load(h[0][b]), kn_vf_load(h[1][b]), kn_vf_load(h[2][b]),
                        kn_vf_load(h[3][b]), kn_vf_load(h[4][b]), kn_vf_load(h[5][b]), o[0], o[1], o[2],
                        o[3], o[4], o[5]);
                for (int a = 0; a < 6; a++) kn_vf_mask_storeu(dst + (a * 6 + b) * xs, L.valid, o[a]);
            }
        }
    }
}

/* ------------------------------------------------------------------ output transform */

/* A^T (4x6) applied to six vectors. */
#define WINO_AT(m0, m1, m2, m3, m4, m5, o0, o1, o2, o3)                                                    \
    do {                                                                                                   \
        const kn_vf s12 = kn_vf_add(m1, m2), d12 = kn_vf_sub(m1, m2);                             \
        const kn_vf s34 = kn_vf_add(m3, m4), d34 = kn_vf_sub(m3, m4);                             \
        o0 = kn_vf_add(kn_vf_add(m0, s12), s34);                                                   \
        o1 = kn_vf_fmadd(kn_vf_set1(2.0f), d34, d12);                                              \
        o2 = kn_vf_fmadd(kn_vf_set1(4.0f), s34, s12);                                              \
        o3 = kn_vf_add(kn_vf_fmadd(kn_vf_set1(8.0f), d34, d12), m5);                           \
    } while (0)

/* y = A^T O A + bias for one output channel and the KN_VL tiles of a vector, interleaved: out[r][v]
 * holds output row r of tiles v KN_VL/4 .. (v + 1) KN_VL/4 - 1, 4 columns each. */
static inline void wino_out_tiles(const float *src, int64_t xs, kn_vmask keep, kn_vf bias, const kn_vi *idx,
                                  kn_vf out[4][4]) {
    float sbuf[6][4][KN_VL] __attribute__((aligned(64)));
    for (int a = 0; a < 6; a++) {
        kn_vf q[6];
        for (int b = 0; b < 6; b++) q[b] = kn_vf_maskz_loadu(keep, src + (a * 6 + b) * xs);
        kn_vf o0, o1, o2, o3;
        WINO_AT(q[0], q[1], q[2], q[3], q[4], q[5], o0, o1, o2, o3);
        kn_vf_store(sbuf[a][0], o0);
        kn_vf_store(sbuf[a][1], o1);
        kn_vf_store(sbuf[a][2], o2);
        kn_vf_store(sbuf[a][3], o3);
    }
    kn_vf yr[4][4];
    for (int cc = 0; cc < 4; cc++) {
        kn_vf o0, o1, o2, o3;
        WINO_AT(kn_vf_load(sbuf[0][cc]), kn_vf_load(sbuf[1][cc]), kn_vf_load(sbuf[2][cc]),
                kn_vf_load(sbuf[3][cc]), kn_vf_load(sbuf[4][cc]), kn_vf_load(sbuf[5][cc]), o0, o1, o2, o3);
        yr[0][cc] = kn_vf_add(o0, bias);
        yr[1][cc] = kn_vf_add(o1, bias);
        yr[2][cc] = kn_vf_add(o2, bias);
        yr[3][cc] = kn_vf_add(o3, bias);
    }
    for (int r = 0; r < 4; r++)
        for (int v = 0; v < 4; v++)
            out[r][v] = kn_vf_blend((kn_vmask)(0xCCCCu & KN_VALL), kn_vf_perm2(yr[r][0], idx[v], yr[r][1]),
                                             kn_vf_perm2(yr[r][2], idx[v], yr[r][3]));
}

/* The lane permutations that interleave four A^T O A column vectors into output vectors: output
 * vector v, lane l is tile v KN_VL/4 + l/4, column l%4, taken from column vector l%4's lane
 * v KN_VL/4 + l/4. */
static inline void wino_out_idx(kn_vi idx[4]) {
    for (int v = 0; v < 4; v++) {
        int32_t t[KN_VL];
        for (int l = 0; l < KN_VL; l++) t[l] = ((l & 1) ? KN_VL : 0) + KN_VL / 4 * v + (l >> 2);
        idx[v] = kn_vi_loadu(t);
    }
}

static void wino_out_range(void *arg, int64_t begin, int64_t end) {
    const wino_job *j = arg;
    const kn_wino_shape *s = j->s;
    const int64_t groups = (j->tw + KN_VL - 1) / KN_VL, plane = s->OH * s->OW;
    kn_vi idx[4];
    wino_out_idx(idx);
    const int64_t xs = s->M * j->Tb;
    for (int64_t it = begin; it < end; it++) {
        const int64_t m = it / j->rows, rr = it % j->rows, r = j->r0 + rr;
        const int64_t n = r / j->th, ti = r % j->th;
        const int64_t off = (n * s->M + m) * plane + ti * 4 * s->OW;
        float *yb = j->y + off;
        const int64_t nrows = min64(4, s->OH - ti * 4);
        const kn_vf bias = kn_vf_set1(j->bias ? j->bias[m] : 0.0f);
        for (int64_t g = 0; g < groups; g++) {
            const int64_t nt = min64(KN_VL, j->tw - KN_VL * g);
            const kn_vmask keep = kn_v_tail(nt);
            kn_vf out[4][4];
            wino_out_tiles(j->O + m * j->Tb + rr * j->tw + KN_VL * g, xs, keep, bias, idx, out);
            const int64_t col0 = 4 * KN_VL * g;
            for (int64_t rw = 0; rw < nrows; rw++) {
                float *yp = yb + rw * s->OW + col0;
                for (int v = 0; v < 4; v++) {
                    const kn_vmask mk = lane_range(0, s->OW - col0 - KN_VL * v);
                    if (!mk) break;
                    kn_vf_mask_storeu(yp + KN_VL * v, mk, out[rw][v]);
                }
            }
        }
        if (j->epi) j->epi(j->epi_ctx, j->y, off, nrows, s->OW, s->OW);
    }
}

static void wino_out_multi(void *arg, int64_t begin, int64_t end) {
    const wino_job *j = arg;
    const kn_wino_shape *s = j->s;
    const int64_t nmb = (s->M + 15) / 16, xs = s->M * j->Tb, plane = s->OH * s->OW;
    kn_vi idx[4];
    wino_out_idx(idx);
    wino_lanes L;
#if KN_VL == 8
    const int halves = j->rows2;
#endif
    int64_t have = -1;
    for (int64_t it = begin; it < end; it++) {
        const int64_t vec = it / nmb, mb = it % nmb;
        if (vec != have) wino_lanes_of(j, vec, &L), have = vec;
        const int64_t t0 = vec * j->G * j->tw, m1 = min64(s->M, mb * 16 + 16);
        for (int64_t m = mb * 16; m < m1; m++) {
            kn_vf out[4][4];
            wino_out_tiles(j->O + m * j->Tb + t0, xs, L.valid, kn_vf_set1(j->bias ? j->bias[m] : 0.0f), idx, out);
            for (int l = 0; l < KN_VL; l++) {
                if (!(L.valid >> l & 1)) continue;
                const int v = l / (KN_VL / 4), i = l % (KN_VL / 4);
                const int64_t rows = min64(4, s->OH - 4 * (int64_t)L.ti[l]), cols = min64(4, s->OW - 4 * (int64_t)L.tj[l]);
                const kn_vmask mk = (kn_vmask)(((1u << cols) - 1u) << (4 * i));
                float *p = j->y + m * plane + L.yoff[l] - 4 * i;
#if KN_VL == 8
                /* AVX2: a whole tile's 4 columns are half a vector (vmaskmovps stores are slow on Zen 3;
                 * KILN_WINO_ROWS2=0: the masked stores) */
                if (halves && mk == 0x0Fu) {
                    for (int64_t r = 0; r < rows; r++) _mm_storeu_ps(p + r * s->OW, _mm256_castps256_ps128(out[r][v]));
                    continue;
                }
                if (halves && mk == 0xF0u) {
                    for (int64_t r = 0; r < rows; r++) _mm_storeu_ps(p + 4 + r * s->OW, _mm256_extractf128_ps(out[r][v], 1));
                    continue;
                }
#endif
                for (int64_t r = 0; r < rows; r++) kn_vf_mask_storeu(p + r * s->OW, mk, out[r][v]);
            }
        }
        if (j->epi) { /* the vector's tile rows, one run per image */
            for (int l = 0; l < KN_VL;) {
                if (!(L.valid >> l & 1)) {
                    l++;
                    continue;
                }
                int e = l;
                while (e + 1 < KN_VL && (L.valid >> (e + 1) & 1) && L.n[e + 1] == L.n[l]) e++;
                const int64_t oh0 = 4 * (int64_t)L.ti[l], oh1 = min64(s->OH, 4 * (int64_t)L.ti[e] + 4);
                for (int64_t m = mb * 16; m < m1; m++)
                    j->epi(j->epi_ctx, j->y, (L.n[l] * s->M + m) * plane + oh0 * s->OW, oh1 - oh0, s->OW, s->OW);
                l = e + 1;
            }
        }
    }
}

/* ------------------------------------------------------------------ the thread's scratch */

typedef struct tbuf {
    size_t cap[2];
    float *data[2];
} tbuf;

static pthread_key_t tb_key;
static pthread_once_t tb_once = PTHREAD_ONCE_INIT;
static int tb_key_ok;

static void tb_free(void *p) {
    tbuf *b = p;
    free(b->data[0]);
    free(b->data[1]);
    free(b);
}
static void tb_init(void) { tb_key_ok = pthread_key_create(&tb_key, tb_free) == 0; }

/* Slot 0 is kn_conv_thread_buffer's; slot 1 the dilated path's phase images (its undilated
 * convolution takes slot 0 meanwhile). */
static float *thread_buffer_slot(int slot, size_t floats) {
    if (slot < 0 || slot > 1 || floats > ((size_t)64 << 20) / sizeof(float)) return NULL;
    pthread_once(&tb_once, tb_init);
    if (!tb_key_ok) return NULL;
    tbuf *b = pthread_getspecific(tb_key);
    if (!b) {
        if (!(b = calloc(1, sizeof *b))) return NULL;
        if (pthread_setspecific(tb_key, b) != 0) {
            free(b);
            return NULL;
        }
    }
    if (b->cap[slot] < floats) {
        const size_t cap = (floats + 1023) / 1024 * 1024;
        float *d = kn_aligned_alloc(64, cap * sizeof(float));
        if (!d) return NULL;
        free(b->data[slot]);
        b->data[slot] = d;
        b->cap[slot] = cap;
    }
    return b->data[slot];
}

float *kn_conv_thread_buffer(size_t floats) { return thread_buffer_slot(0, floats); }

/* ------------------------------------------------------------------ driver */

/* Tile rows per chunk (V and O of a chunk: row_bytes a tile row of tw tiles; R rows in all).
 * Every chunk streams all 36 M C transformed weights U (u_bytes) through the products, and V and O
 * that do not fit in L2 go out to L3 and back (written by one pass, read by the next); the
 * products run NR tiles a micro-panel (32 AVX-512, 16 AVX2), so a chunk of Tb tiles does padded(Tb) / Tb
 * of the work.
 * Chunks of at most half the L2 (the rows r in [fit/2, fit], G a vector's rows in wino_*_multi
 * dividing them, filling the panels best; the larger r of a tie, AVX2 the smaller) are taken where their weight
 * bytes (chunks x |U|) are at most half of the whole V and O, or at most all of it with panels
 * at least 95% full; else chunks of up to 4 MB (the budget that measured best on the Zen 5 box,
 * whose L3 is near): large weights (256->256: |U| 9.4 MB) go through as few times as that allows.
 * Intel Xeon (2 MB L2, a far L3), 1 thread, CPU time (bench/op_ab.py): 32->32 14x14 b32
 * 1.16 -> 0.60 ms, 32->32 160x160 -15%, 64->64 128x128 -16%; 64->64 56x56 and 80x80, whose
 * L2-sized chunks (56 and 40 tiles) measured 6-8% slower, keep 4 MB. KILN_WINO_CHUNK_KB=N forces
 * chunks of N KB.
 * Beyond 2 threads the L2 budget is threads / 2 L2s: every pass of a chunk is spread over the
 * threads, so each thread writes and reads about chunk / threads of V and O, and a chunk is three
 * parallel loops: at 16 threads 32->32 14x14 b32 ran 5 chunks, 15 loops of 2-3 microseconds of
 * work a thread, and scaled 2.2x from 1 thread (ONNX Runtime 6.6x); now 1 chunk. */
static int64_t wino_chunk_rows(int64_t R, int64_t tw, int64_t row_bytes, int64_t u_bytes, int64_t G, int threads) {
    const char *e = getenv("KILN_WINO_CHUNK_KB");
    if (e && atoll(e) > 0) return max64(1, min64(R, atoll(e) * 1024 / row_bytes));
    const int64_t big = max64(1, min64(R, ((int64_t)4 << 20) / row_bytes));
    const int64_t l2s = threads > 2 ? threads / 2 : 1;
    const int64_t fit = max64(1, min64(R, kn_conv_l2_bytes() / 2 * l2s / row_bytes));
    if (fit >= R) return R;
    int64_t top = fit;
#if KN_VL == 8
    /* AVX2: chunks up to where V, O and the weights together take 7/8 of the L2, where that is more
     * than half of it (small weights): a partial last micro-panel (ukr_any) cost more than the L2
     * saved. 2-core Zen 3 (512 KB L2), 1 thread, 3 x 3 32 -> 32 on 14x14 at batch 32: rows of 7
     * (28 tiles, 252 KB) ran as 4 MB chunks (their weight score 0.59), 8 (32 tiles, 288 KB with
     * 144 KB of weights) 0.86-0.89 of that (bench/op_ab.py, KILN_WINO_CHUNK_KB) */
    top = max64(fit, min64(R, (kn_conv_l2_bytes() * 7 / 8 * l2s - u_bytes) / row_bytes));
#endif
    int64_t best = 0;
    double fill = 0;
    /* the products' panels are the GEMM's NR tiles wide (32 with AVX-512, 16 with AVX2) */
    const int64_t nr = kn_sgemm_nr();
    for (int64_t r = (fit + 1) / 2; r <= top; r++) {
        if (r % G && r != top) continue;
        const double f = (double)(r * tw) / (double)((r * tw + nr - 1) / nr * nr);
#if KN_VL == 8
        /* AVX2: of equally full panels the smallest chunk, the L2 left to the rest. 2-core Zen 3,
         * 1 thread, CPU time, 32 -> 32 14x14 b32 (U 144 KB, a tile row of 4 tiles 36 KB): 4 rows
         * (16 tiles, V + O + U 291 KB) 0.82-0.91 of 8 rows (32 tiles, 435 KB), 0.80-0.81 with a
         * memory-bound process on the other core (ORT 1.0 -> 0.9 of kiln's time there); 5 and 7
         * rows (20 and 28 tiles: a partial panel) 1.09-1.21 (bench/op_ab.py, KILN_WINO_CHUNK_KB) */
        if (f > fill) fill = f, best = r;
#else
        if (f >= fill) fill = f, best = r;
#endif
    }
    if (!best) best = fit;
    const int64_t chunks = (R + best - 1) / best;
    const double score = (double)chunks * (double)u_bytes / ((double)R * (double)row_bytes);
    return score <= 0.5 || (score <= 1.0 && fill >= 0.95) ? best : big;
}

/* ------------------------------------------------------------------ dilation: phase images
 * With dilation d (stride 1), output row oh reads input rows oh - ph + d kh, all of one residue
 * q = (oh - ph) mod d: writing oh - ph = d a + q, y(oh) = sum_kh w(kh) x_q(a + kh) with
 * x_q(r) = x(d r + q), an undilated 3x3 convolution over the phase image x_q. Per axis, a runs over
 * [amin, amax] = [floor(-ph / d), floor((OH - 1 - ph) / d)] for every phase (the few (a, q) past
 * the output are computed and dropped), so the d_h d_w phase images of every image form one batch
 * of N d_h d_w images of ceil(H / d) x ceil(W / d) (zero past the input) with pads -amin, -bmin,
 * run by the undilated path. The input is split into phases once (masked loads and permutes at
 * d = 2), the output interleaved back, and the fused epilogue runs on each finished plane. */

static int64_t fdiv64(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

typedef struct wino_phase {
    const kn_wino_shape *s; /* the dilated convolution */
    kn_wino_shape sub;      /* the phase images' undilated one: image (n dh + qh) dw + qw */
    int64_t dh, dw, amin, bmin;
    const float *x;
    float *xs, *ys, *y;
    kn_conv_epilogue_fn epi;
    const void *epi_ctx;
} wino_phase;

static void wino_phase_geom(const kn_wino_shape *s, wino_phase *p) {
    p->dh = s->dh > 1 ? s->dh : 1, p->dw = s->dw > 1 ? s->dw : 1;
    p->amin = fdiv64(-s->ph, p->dh), p->bmin = fdiv64(-s->pw, p->dw);
    const int64_t A = fdiv64(s->OH - 1 - s->ph, p->dh) - p->amin + 1, B = fdiv64(s->OW - 1 - s->pw, p->dw) - p->bmin + 1;
    p->sub = (kn_wino_shape){s->N * p->dh * p->dw, s->C, s->M, (s->H + p->dh - 1) / p->dh, (s->W + p->dw - 1) / p->dw,
                             A, B, -p->amin, -p->bmin, 1, 1};
}

/* Items (image, channel): the channel's phase images. */
static void wino_split_range(void *arg, int64_t begin, int64_t end) {
    const wino_phase *p = arg;
    const kn_wino_shape *s = p->s, *u = &p->sub;
    const int64_t dh = p->dh, dw = p->dw, Hs = u->H, Ws = u->W;
    const kn_vi ev = kn_vi_iota(0, 2), od = kn_vi_iota(1, 2);
    for (int64_t it = begin; it < end; it++) {
        const int64_t n = it / s->C, c = it % s->C;
        const float *xc = p->x + it * s->H * s->W;
        for (int64_t qh = 0; qh < dh; qh++)
            for (int64_t r = 0; r < Hs; r++) {
                const int64_t ih = r * dh + qh;
                float *dst[64];
                for (int64_t qw = 0; qw < dw; qw++)
                    dst[qw] = p->xs + (((n * dh + qh) * dw + qw) * s->C + c) * Hs * Ws + r * Ws;
                if (ih >= s->H) {
                    for (int64_t qw = 0; qw < dw; qw++) memset(dst[qw], 0, sizeof(float) * (size_t)Ws);
                    continue;
                }
                const float *xr = xc + ih * s->W;
                if (dw == 1) {
                    memcpy(dst[0], xr, sizeof(float) * (size_t)s->W);
                } else if (dw == 2) {
                    for (int64_t b0 = 0; b0 < Ws; b0 += KN_VL) {
                        const kn_vf lo = kn_vf_maskz_loadu(lane_range(0, s->W - 2 * b0), xr + 2 * b0);
                        const kn_vf hi = kn_vf_maskz_loadu(lane_range(0, s->W - 2 * b0 - KN_VL), xr + 2 * b0 + KN_VL);
                        const kn_vmask keep = lane_range(0, Ws - b0);
                        kn_vf_mask_storeu(dst[0] + b0, keep, kn_vf_perm2(lo, ev, hi));
                        kn_vf_mask_storeu(dst[1] + b0, keep, kn_vf_perm2(lo, od, hi));
                    }
                } else {
                    for (int64_t qw = 0; qw < dw; qw++)
                        for (int64_t b = 0; b < Ws; b++) {
                            const int64_t iw = b * dw + qw;
                            dst[qw][b] = iw < s->W ? xr[iw] : 0.0f;
                        }
                }
            }
    }
}

/* Items (image, output channel): the plane interleaved back from its phases, then the epilogue. */
static void wino_merge_range(void *arg, int64_t begin, int64_t end) {
    const wino_phase *p = arg;
    const kn_wino_shape *s = p->s, *u = &p->sub;
    const int64_t dh = p->dh, dw = p->dw, A = u->OH, B = u->OW, plane = s->OH * s->OW;
    kn_vi ilo, ihi;
    {
        int32_t t[KN_VL], h[KN_VL];
        for (int l = 0; l < KN_VL; l++) t[l] = (l & 1 ? KN_VL : 0) + (l >> 1), h[l] = t[l] + KN_VL / 2;
        ilo = kn_vi_loadu(t), ihi = kn_vi_loadu(h);
    }
    /* dw == 2: even outputs from phase qe at column be + k, odd ones from qo at bo + k */
    const int64_t te = -s->pw, to = 1 - s->pw;
    const int64_t qe = te - 2 * fdiv64(te, 2), be = fdiv64(te, 2) - p->bmin;
    const int64_t qo = to - 2 * fdiv64(to, 2), bo = fdiv64(to, 2) - p->bmin;
    for (int64_t it = begin; it < end; it++) {
        const int64_t n = it / s->M, m = it % s->M;
        float *yp = p->y + it * plane;
        for (int64_t oh = 0; oh < s->OH; oh++) {
            const int64_t t = oh - s->ph, a = fdiv64(t, dh), qh = t - a * dh;
            const float *sp[64];
            for (int64_t qw = 0; qw < dw; qw++)
                sp[qw] = p->ys + (((n * dh + qh) * dw + qw) * s->M + m) * A * B + (a - p->amin) * B;
            float *yr = yp + oh * s->OW;
            if (dw == 1) {
                memcpy(yr, sp[0] + (-s->pw - p->bmin), sizeof(float) * (size_t)s->OW);
            } else if (dw == 2) {
                for (int64_t k0 = 0; 2 * k0 < s->OW; k0 += KN_VL) {
                    const int64_t rem = s->OW - 2 * k0;
                    const kn_vf E = kn_vf_maskz_loadu(lane_range(0, (rem + 1) / 2), sp[qe] + be + k0);
                    const kn_vf O = kn_vf_maskz_loadu(lane_range(0, rem / 2), sp[qo] + bo + k0);
                    kn_vf_mask_storeu(yr + 2 * k0, lane_range(0, rem), kn_vf_perm2(E, ilo, O));
                    if (rem > KN_VL) kn_vf_mask_storeu(yr + 2 * k0 + KN_VL, lane_range(0, rem - KN_VL), kn_vf_perm2(E, ihi, O));
                }
            } else {
                for (int64_t ow = 0; ow < s->OW; ow++) {
                    const int64_t tw = ow - s->pw, b = fdiv64(tw, dw);
                    yr[ow] = sp[tw - b * dw][b - p->bmin];
                }
            }
        }
        if (p->epi) p->epi(p->epi_ctx, p->y, it * plane, s->OH, s->OW, s->OW);
    }
}

static kiln_status wino_conv_dilated(kn_kernel_ctx *c, const kn_wino_shape *s, const float *x, const float *w,
                                     const float *bias, float *y, kn_conv_epilogue_fn epi, const void *epi_ctx,
                                     bool w_const) {
    wino_phase p = {.s = s, .x = x, .y = y, .epi = epi, .epi_ctx = epi_ctx};
    wino_phase_geom(s, &p);
    const kn_wino_shape *u = &p.sub;
    const size_t xf = (size_t)(u->N * u->C * u->H * u->W + 16), yf = (size_t)(u->N * u->M * u->OH * u->OW + 16);
    /* slot 1: the undilated convolution takes the thread's slot 0 for its own scratch */
    float *buf = thread_buffer_slot(1, xf + yf), *own = NULL;
    if (!buf && !(buf = own = kn_aligned_alloc(64, sizeof(float) * (xf + yf))))
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    p.xs = buf, p.ys = buf + xf;
    const int64_t in_plane = s->H * s->W, out_plane = s->OH * s->OW;
    kn_parallel_for(c->pool, s->N * s->C, max64(1, 4096 / (in_plane + 1)), wino_split_range, &p);
    kiln_status st = kn_wino_conv(c, u, p.xs, w, bias, p.ys, NULL, NULL, w_const);
    if (!st) kn_parallel_for(c->pool, s->N * s->M, max64(1, 4096 / (out_plane + 1)), wino_merge_range, &p);
    free(own);
    return st;
}

#endif /* KN_VL */

bool kn_wino_suits(const kn_wino_shape *s, int threads) {
#if KN_VL
    const char *e = getenv("KILN_WINO");
    if (e && e[0] == '0') return false;
    if (s->dh > 1 || s->dw > 1) {
        /* the phase images' undilated convolution; at most 64 phases (d <= 8 per axis) */
        if (s->dh > 8 || s->dw > 8) return false;
        wino_phase p;
        wino_phase_geom(s, &p);
        /* threads 0: not the few-tile rule below (measured on undilated layers only) */
        return kn_wino_suits(&p.sub, 0);
    }
    if (e && e[0] == '1') return s->C >= 1 && s->M >= 1;
    const int64_t th = (s->OH + 3) / 4, tw = (s->OW + 3) / 4, T = s->N * th * tw;
    /* 16 tiles: 14x14 planes (256 -> 256: 1.2 -> 0.8 ms in ResNet-50 at 1 thread, its transformed
     * weights from memory); 7x7 (4 tiles) ran 2x slower than the GEMM */
    if (s->C >= 16 && s->M >= 16 && T >= 16) return true;
#if KN_VL == 8
    /* AVX2, 1 thread: 4-15 tiles that cover the plane (at most a tenth of their outputs past its
     * edge: planes of 8x8, 8x16, 12x20, 4x20), 48+ input channels, transformed weights (36 M C
     * floats) within 16 MB. The GEMM (or conv.c's channels-in-lanes kernel) these went to, against
     * this: 2-core EPYC, CPU time, this / that: 128->128 8x8 0.57, 256->256 8x8 0.72, 64->64 8x8
     * 0.66, 128->128 4x20 0.64, 64->64 8x12 0.84, 128->128 12x12 0.70, 64->256 8x16 0.49 (ddddocr),
     * 128->128 8x20 0.57 (captcha_crnn), 64->128 and 96->192 12x20 0.57 and 0.53 (aecmos), 96->24
     * 12x20 0.68 and 48->24 8x16 0.65 (ppocr det). Left out: one tile (512->512 4x4 2.2x), planes
     * the tiles overrun (512->512 7x7 1.31, 64->64 10x10 0.96-1.11, 96->24 6x10 1.21), 16-32
     * channels (32->32 12x12 1.05, 16->16 12x16 1.14); 2 threads not measured. KILN_WINO_FEW=0:
     * not these (measurements). */
    const char *ef = getenv("KILN_WINO_FEW");
    if (threads == 1 && !(ef && ef[0] == '0') && s->C >= 48 && s->M >= 16 && T >= 4 &&
        T * 16 * 10 <= s->N * s->OH * s->OW * 11 && 36.0 * (double)s->M * (double)s->C * sizeof(float) <= 16.0 * (1 << 20))
        return true;
#endif
    return false;
#else
    (void)s, (void)threads;
    return false;
#endif
}

#if KN_VL
/* The 36 products, split over the pool by this file instead of the GEMM's: the GEMM gives each
 * of them a task and the pool cuts 36 tasks into chunks of ceil(36 / (4 threads)), at 2 threads
 * 7 of 5 and 1 of 1, taken in turn: one thread ran 20 products, the other 16. Here the grain is
 * the smallest that makes the chunks equal and their count a multiple of the threads (2 threads:
 * 6 chunks of 6); where none does (16 threads), the GEMM's own split (0). */
static int64_t wino_grain_of(int64_t threads, int64_t count) {
    if (threads <= 1) return 0;
    for (int64_t g = 1; g <= count; g++) {
        const int64_t nc = min64(4 * threads, count / g);
        if (nc <= 1) break;
        const int64_t chunk = (count + nc - 1) / nc, n = (count + chunk - 1) / chunk;
        if (count % chunk == 0 && n % threads == 0) return g;
    }
    return 0;
}

static int64_t wino_gemm_grain(int64_t threads) { return wino_grain_of(threads, 36); }

/* Whole chunks of tile rows on each thread (wino_conv, few channels, many tile rows): a chunk's input
 * transform, its 36 products and its output transform on one thread, into that thread's buffer,
 * where the usual order splits each phase over the threads: the transforms by channel blocks and
 * the products by matrices, so every chunk's V and O crossed between the cores' L2s, three
 * parallel loops a chunk. */
typedef struct wino_chunks {
    const kn_wino_shape *s;
    const float *x, *bias, *U, *P; /* P: U packed for the GEMM (a_packed), or NULL */
    float *y;
    int64_t th, tw, R, rows, G;
    size_t per; /* floats of one packed matrix of P */
    kn_conv_epilogue_fn epi;
    const void *epi_ctx;
    int failed;
    int rows2; /* wino_job's */
} wino_chunks;

static void wino_chunks_range(void *arg, int64_t begin, int64_t end) {
    wino_chunks *q = arg;
    const kn_wino_shape *s = q->s;
    const int64_t Tmax = q->rows * q->tw;
    float *V = kn_conv_thread_buffer((size_t)(36 * (s->C + s->M) * Tmax + 16));
    if (!V) {
        __atomic_store_n(&q->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *O = V + 36 * s->C * Tmax;
    const float *ap[36], *apk[36], *bp[36];
    float *cp[36];
    for (int64_t ci = begin; ci < end; ci++) {
        const int64_t r0 = ci * q->rows, nr = min64(q->rows, q->R - r0), Tb = nr * q->tw;
        wino_job j = {s, q->x, q->y, q->bias, V, O, q->th, q->tw, r0, nr, Tb, q->epi, q->epi_ctx, q->G, q->rows2};
        const int64_t nvec = (nr + j.G - 1) / j.G;
        wino_in_multi(&j, 0, nvec * ((s->C + 15) / 16));
        for (int xi = 0; xi < 36; xi++) {
            ap[xi] = q->U + xi * s->M * s->C;
            apk[xi] = q->P ? q->P + xi * q->per : NULL;
            bp[xi] = V + xi * s->C * Tb;
            cp[xi] = O + xi * s->M * Tb;
        }
        kn_sgemm_batch g = {.count = 36, .M = s->M, .N = Tb, .K = s->C, .alpha = 1.0f, .beta = 0.0f, .a = ap,
                            .lda = s->C, .b = bp, .ldb = Tb, .c = cp, .ldc = Tb, .a_packed = q->P ? apk : NULL};
        if (kn_sgemm_run(NULL, &g)) {
            __atomic_store_n(&q->failed, 1, __ATOMIC_RELAXED);
            return;
        }
        wino_out_multi(&j, 0, nvec * ((s->M + 15) / 16));
    }
}

/* KILN_WINO_CHUNKS=0/1: whole chunks per thread off / wherever the vector path runs (tests, measurements) */
static int wino_chunks_env(void) {
    const char *e = getenv("KILN_WINO_CHUNKS");
    return e && *e ? *e == '1' : -1;
}

typedef struct wino_gemm_job {
    const kn_sgemm_batch *g;
    int failed;
} wino_gemm_job;

static void wino_gemm_range(void *arg, int64_t begin, int64_t end) {
    wino_gemm_job *j = arg;
    kn_sgemm_batch q = *j->g;
    q.count = end - begin;
    q.a += begin, q.b += begin, q.c += begin;
    if (q.a_packed) q.a_packed += begin;
    if (q.at_packed) q.at_packed += begin;
    if (kn_sgemm_run(NULL, &q)) __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
}
#endif

#if KN_VL == 16
/* ------------------------------------------------------------------ F(2x2, 3x3) on small planes
 * Where F(4x4, 3x3)'s transformed weights (36 M C floats: 9.4 MB at 256 -> 256) do not fit the
 * L2, every run streams them from memory for only a few tiles each (16 on a 14x14 plane): the
 * products are bound by those bytes, not by their multiply-adds. F(2x2, 3x3) (points 0, +-1,
 * infinity) keeps 16 M C floats (2.25x fewer) for 1.78x the products' work; its transforms are
 * exact sums and differences and G's entries halves, so it also rounds less. Planes up to 14
 * columns (7 tiles a row): a padded input row is one vector (lane l: column l - pw), B^T's column
 * part is shifted copies of it, and the 7 tiles of a row are its even lanes.
 *   U[16][M][C] = G g G^T, V[16][C][T] = B^T d B, O[xi] = U[xi] V[xi], y = A^T O A + bias. */
static const double WG2[4][3] = {{1.0, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1.0}};

static size_t wino2_u_floats(int64_t M, int64_t C) { return (size_t)(16 * M * C + 15) / 16 * 16; }

/* dst: U[16][M][C], then (pack) 16 blocks packed for the GEMM (A's layout, or B's when swap) */
static void wino2_make_weights(const void *ctx, void *dst) {
    const wino_wctx *k = ctx;
    wino_transform_weights(k, dst, WG2, 4, wino2_u_floats(k->M, k->C));
}

typedef struct wino2_job {
    const kn_wino_shape *s;
    const float *x;
    float *y;
    const float *bias;
    float *V, *O;       /* V[16][C][Tb], O[16][M][Tb] of the chunk */
    int64_t th, tw;     /* tiles per column and row of an image */
    int64_t n0, Tb;     /* the chunk: images n0.., Tb tiles (whole images) */
    kn_conv_epilogue_fn epi;
    const void *epi_ctx;
} wino2_job;

/* Items (image of the chunk, input channel). */
static void wino2_in_range(void *arg, int64_t begin, int64_t end) {
    const wino2_job *j = arg;
    const kn_wino_shape *s = j->s;
    const kn_vi sh1 = kn_vi_iota(1, 1), sh2 = kn_vi_iota(2, 1), sh3 = kn_vi_iota(3, 1), ev = kn_vi_iota(0, 2);
    const kn_vmask cols = lane_range(s->pw, s->pw + s->W), keep = kn_v_tail(j->tw);
    const int64_t xs = s->C * j->Tb, per = j->th * j->tw;
    for (int64_t it = begin; it < end; it++) {
        const int64_t i = it / s->C, c = it % s->C;
        const float *xc = j->x + ((j->n0 + i) * s->C + c) * s->H * s->W;
        float *dst = j->V + c * j->Tb + i * per;
        for (int64_t ty = 0; ty < j->th; ty++) {
            kn_vf d[4];
            for (int k = 0; k < 4; k++) {
                const int64_t ih = 2 * ty - s->ph + k;
                d[k] = ih >= 0 && ih < s->H ? kn_vf_maskz_loadu(cols, xc + ih * s->W - s->pw) : kn_vf_zero();
            }
            /* B^T d: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3; then the same along the columns
             * 2 tx .. 2 tx + 3 of each (lane 2 tx of the shifted copies) */
            const kn_vf t[4] = {kn_vf_sub(d[0], d[2]), kn_vf_add(d[1], d[2]), kn_vf_sub(d[2], d[1]),
                                kn_vf_sub(d[1], d[3])};
            for (int a = 0; a < 4; a++) {
                const kn_vf r1 = kn_vf_perm(sh1, t[a]), r2 = kn_vf_perm(sh2, t[a]), r3 = kn_vf_perm(sh3, t[a]);
                float *da = dst + a * 4 * xs + ty * j->tw;
                kn_vf_mask_storeu(da, keep, kn_vf_perm(ev, kn_vf_sub(t[a], r2)));
                kn_vf_mask_storeu(da + xs, keep, kn_vf_perm(ev, kn_vf_add(r1, r2)));
                kn_vf_mask_storeu(da + 2 * xs, keep, kn_vf_perm(ev, kn_vf_sub(r2, r1)));
                kn_vf_mask_storeu(da + 3 * xs, keep, kn_vf_perm(ev, kn_vf_sub(r1, r3)));
            }
        }
    }
}

/* Items (image of the chunk, output channel): y = A^T O A + bias, the two columns of each tile
 * interleaved into the output rows, then the epilogue on the finished plane. */
static void wino2_out_range(void *arg, int64_t begin, int64_t end) {
    const wino2_job *j = arg;
    const kn_wino_shape *s = j->s;
    kn_vi il;
    {
        int32_t t[KN_VL];
        for (int l = 0; l < KN_VL; l++) t[l] = (l & 1 ? KN_VL : 0) + (l >> 1);
        il = kn_vi_loadu(t);
    }
    const kn_vmask keep = kn_v_tail(j->tw), row = kn_v_tail(s->OW);
    const int64_t xs = s->M * j->Tb, per = j->th * j->tw, plane = s->OH * s->OW;
    for (int64_t it = begin; it < end; it++) {
        const int64_t i = it / s->M, m = it % s->M, off = ((j->n0 + i) * s->M + m) * plane;
        const float *src = j->O + m * j->Tb + i * per;
        float *yp = j->y + off;
        const kn_vf bias = kn_vf_set1(j->bias ? j->bias[m] : 0.0f);
        for (int64_t ty = 0; ty < j->th; ty++) {
            kn_vf o[16];
            for (int xi = 0; xi < 16; xi++) o[xi] = kn_vf_maskz_loadu(keep, src + xi * xs + ty * j->tw);
            kn_vf p0[4], p1[4];
            for (int b = 0; b < 4; b++) {
                p0[b] = kn_vf_add(kn_vf_add(o[b], o[4 + b]), o[8 + b]);
                p1[b] = kn_vf_sub(kn_vf_sub(o[4 + b], o[8 + b]), o[12 + b]);
            }
            const kn_vf y00 = kn_vf_add(kn_vf_add(kn_vf_add(p0[0], p0[1]), p0[2]), bias);
            const kn_vf y01 = kn_vf_add(kn_vf_sub(kn_vf_sub(p0[1], p0[2]), p0[3]), bias);
            kn_vf_mask_storeu(yp + 2 * ty * s->OW, row, kn_vf_perm2(y00, il, y01));
            if (2 * ty + 1 < s->OH) {
                const kn_vf y10 = kn_vf_add(kn_vf_add(kn_vf_add(p1[0], p1[1]), p1[2]), bias);
                const kn_vf y11 = kn_vf_add(kn_vf_sub(kn_vf_sub(p1[1], p1[2]), p1[3]), bias);
                kn_vf_mask_storeu(yp + (2 * ty + 1) * s->OW, row, kn_vf_perm2(y10, il, y11));
            }
        }
        if (j->epi) j->epi(j->epi_ctx, j->y, off, s->OH, s->OW, s->OW);
    }
}

/* KILN_WINO2=1: F(2x2, 3x3) wherever it can run (tests), 0: never (measurements) */
static bool wino2_suits(const kn_wino_shape *s) {
    if (s->dh > 1 || s->dw > 1 || s->OW > 14 || s->OW < 1 || s->OH < 1 || s->C < 1 || s->M < 1) return false;
    const char *e = getenv("KILN_WINO2");
    if (e && *e) return *e == '1';
    /* F(4x4)'s weights larger than the L2 (from memory every run), and tiles enough for the
     * products (7x7 planes: 16, whose 16 M C weights would be more bytes than the plain ones) */
    const int64_t T = s->N * ((s->OH + 1) / 2) * ((s->OW + 1) / 2);
    return 36.0 * (double)s->M * (double)s->C * sizeof(float) > (double)kn_conv_l2_bytes() && T >= 32 &&
           s->C >= 16 && s->M >= 16;
}

static kiln_status wino2_conv(kn_kernel_ctx *c, const kn_wino_shape *s, const float *x, const float *w,
                              const float *bias, float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_const) {
    const int64_t th = (s->OH + 1) / 2, tw = (s->OW + 1) / 2, per = th * tw;
    /* whole images a chunk, V and O within 4 MB (at least one image) */
    const int64_t img_bytes = 16 * 4 * (s->C + s->M) * per;
    const int64_t nimg = max64(1, min64(s->N, ((int64_t)4 << 20) / img_bytes)), Tmax = nimg * per;
    const char *se = getenv("KILN_WINO2_SWAP");
    const bool swap = se && *se ? se[0] == '1' && kn_sgemm_swaps(s->M, Tmax, s->C) : kn_sgemm_swaps(s->M, Tmax, s->C);
    const size_t ufl = wino2_u_floats(s->M, s->C),
                 pfl = swap ? kn_sgemm_packed_b_floats(s->M, s->C) : kn_sgemm_packed_a_floats(s->M, s->C);
    wino_wctx wc = {w, s->M, s->C, true, swap};
    kn_const_layout lay = {77, {s->M, s->C, swap, 0}};
    const float *U = w_const ? kn_cpu_const_derived(c, 1, &lay, sizeof(float) * (ufl + 16 * pfl), wino2_make_weights, &wc)
                             : NULL;
    float *own = NULL;
    const float *P = NULL;
    if (U) {
        P = U + ufl;
    } else {
        wc.pack = false;
        if (!(own = kn_aligned_alloc(64, sizeof(float) * ufl))) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        wino2_make_weights(&wc, own);
        U = own;
    }
    const size_t vfloats = (size_t)(16 * (s->C + s->M) * Tmax + 16);
    float *V = kn_conv_thread_buffer(vfloats), *Vown = NULL;
    if (!V) V = Vown = kn_aligned_alloc(64, sizeof(float) * vfloats);
    const float **ap = malloc(sizeof(float *) * 16 * 4);
    if (!V || !ap) {
        free(Vown);
        free(ap);
        free(own);
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    const float **apk = ap + 16, **bp = ap + 32;
    float **cp = (float **)(ap + 48);
    float *O = V + 16 * s->C * Tmax;
    const int64_t grain = wino_grain_of(kn_threadpool_size(c->pool), 16);
    kiln_status st = KILN_OK;
    for (int64_t n0 = 0; n0 < s->N && !st; n0 += nimg) {
        const int64_t ni = min64(nimg, s->N - n0), Tb = ni * per;
        wino2_job j = {s, x, y, bias, V, O, th, tw, n0, Tb, epi, epi_ctx};
        kn_parallel_for(c->pool, ni * s->C, max64(1, 64 / (th + 1)), wino2_in_range, &j);
        for (int xi = 0; xi < 16; xi++) {
            ap[xi] = U + xi * s->M * s->C;
            apk[xi] = P ? P + xi * pfl : NULL;
            bp[xi] = V + xi * s->C * Tb;
            cp[xi] = O + xi * s->M * Tb;
        }
        kn_sgemm_batch g = {.count = 16, .M = s->M, .N = Tb, .K = s->C, .alpha = 1.0f, .beta = 0.0f, .a = ap,
                            .lda = s->C, .b = bp, .ldb = Tb, .c = cp, .ldc = Tb};
        /* the last chunk may have fewer tiles: it runs transposed only if the GEMM would */
        if (P && swap && kn_sgemm_swaps(s->M, Tb, s->C)) g.at_packed = apk;
        else if (P && !swap) g.a_packed = apk;
        if (grain) {
            wino_gemm_job gj = {&g, 0};
            kn_parallel_for(c->pool, 16, grain, wino_gemm_range, &gj);
            st = gj.failed ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
        } else {
            st = kn_sgemm_run(c->pool, &g);
        }
        if (st) break;
        kn_parallel_for(c->pool, ni * s->M, max64(1, 64 / (th + 1)), wino2_out_range, &j);
    }
    free(Vown);
    free(ap);
    free(own);
    return st ? kn_kernel_error(c, st, "out of memory in the GEMM") : KILN_OK;
}
#endif /* KN_VL == 16 */

kiln_status kn_wino_conv(kn_kernel_ctx *c, const kn_wino_shape *s, const float *x, const float *w, const float *bias,
                         float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_const) {
#if KN_VL
    if (s->dh > 1 || s->dw > 1) {
        if (s->dh > 8 || s->dw > 8) return kn_kernel_error(c, KILN_ERR_INTERNAL, "Winograd with dilation above 8");
        return wino_conv_dilated(c, s, x, w, bias, y, epi, epi_ctx, w_const);
    }
#if KN_VL == 16
    if (wino2_suits(s)) return wino2_conv(c, s, x, w, bias, y, epi, epi_ctx, w_const);
#endif
    const int64_t th = (s->OH + 3) / 4, tw = (s->OW + 3) / 4, R = s->N * th;
    /* tile rows per chunk: V and O within the budget, at least one row */
    const int64_t row_bytes = 36 * 4 * (s->C + s->M) * tw;
    /* rows of 4 tiles or fewer: whole tile rows gathered into full vectors (int32 offsets); at 5-7
     * tiles a row the gathers cost more than the idle lanes (1 thread: 28x28 128->128 0.39 -> 0.47 ms,
     * 20x20 256->256 0.76 -> 0.96 ms), at 4 they cost less (14x14 256->256 0.73 -> 0.46 ms) */
    const char *me = getenv("KILN_WINO_MULTI"), *re = getenv("KILN_WINO_ROWS2");
    const int rows2 = !(re && re[0] == '0');
    const bool multi = (me ? me[0] == '1' : tw <= 4) && tw <= KN_VL &&
                       s->N * s->C * s->H * s->W < ((int64_t)1 << 31) - ((int64_t)1 << 24);
    const int64_t rows = wino_chunk_rows(R, tw, row_bytes, 36 * 4 * s->M * s->C, multi ? KN_VL / tw : 1,
                                         kn_threadpool_size(c->pool));
    const int64_t Tmax = rows * tw;
    /* few tiles a chunk (16 on a 14x14 plane) fill half the micro-kernel's 32 columns: at 1 thread
     * the GEMM then runs transposed, output channels in the lanes, from weights packed for it
     * (CPU time, min of 4 rounds: 256->256 14x14 0.444 -> 0.420 ms, 128->128 28x28 0.380 -> 0.332;
     * 196 and 452 tiles 2-4% slower, so under 64 tiles only). At 2 threads the transposed GEMM made
     * 14x14 2x slower (0.27 -> 0.54-0.61 ms) and 28x28 no faster: not taken there. */
    const char *se = getenv("KILN_WINO_SWAP");
    const bool swap = kn_sgemm_swaps(s->M, Tmax, s->C) &&
                      (se ? se[0] == '1' : Tmax < 64 && kn_threadpool_size(c->pool) == 1);
    const size_t ufl = wino_u_floats(s->M, s->C),
                 per = swap ? kn_sgemm_packed_b_floats(s->M, s->C) : kn_sgemm_packed_a_floats(s->M, s->C);
    wino_wctx wc = {w, s->M, s->C, true, swap};
    kn_const_layout lay = {9, {s->M, s->C, swap, 0}};
    const float *U = w_const ? kn_cpu_const_derived(c, 1, &lay, sizeof(float) * (ufl + 36 * per), wino_make_weights, &wc)
                             : NULL;
    float *own = NULL;
    const float *P = NULL;
    if (U) {
        P = U + ufl;
    } else {
        wc.pack = false;
        own = kn_aligned_alloc(64, sizeof(float) * ufl);
        if (!own) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        wino_make_weights(&wc, own);
        U = own;
    }
    /* few channels (the products a few hundred KFLOP each) over many tile rows at several threads:
     * whole chunks on each thread, as many chunks for each (3 x 3 32 -> 32 on 14x14 at batch 32, 2
     * threads, p50 of 2000 runs: 0.83 -> 0.38-0.39 ms, ONNX Runtime 0.48; 1 thread 0.66). The rows
     * go in units of G (a vector of tiles); with 4+ units a thread the last ones even out, with
     * fewer an equal count each is needed: a dilated 3x3 64 -> 64 on 28x28 (dilation 2: four 14x14
     * phase images, 4 units) split each phase over 2 threads in 0.230 ms, 1 thread 0.24; whole
     * chunks 0.127-0.131 (ONNX Runtime 0.198) */
    const int64_t nthreads = kn_threadpool_size(c->pool), G = multi ? KN_VL / tw : 1, units = (R + G - 1) / G;
    const int ce = wino_chunks_env();
    if (multi && !swap && nthreads > 1 && ce != 0 &&
        (ce == 1 || (s->C <= 64 && s->M <= 64 && units >= nthreads &&
                     (units >= 4 * nthreads || units % nthreads == 0)))) {
        const int64_t fit = max64(G, kn_conv_l2_bytes() / 2 / row_bytes);
        const int64_t per_thread = (R + nthreads * fit - 1) / (nthreads * fit);
        int64_t crows = (R + nthreads * per_thread - 1) / (nthreads * per_thread);
        crows = (crows + G - 1) / G * G;
#if KN_VL == 8
        /* AVX2: no larger than a chunk of the 1-thread order (wino_chunk_rows: of equally full
         * panels the smallest). 2 threads, 3x3 32 -> 32 on 14x14 at batch 32: 8 rows a chunk -> 4
         * (with 1-thread chunks), wall time in one process, blocks of 20 runs against ONNX
         * Runtime, 12 and 16 rounds on the loaded 2-core Zen 3 (KILN_WINO_CHUNK_KB=144 against the
         * default 8): min 0.685 -> 0.603 and 0.690 -> 0.606 ms, median of rounds 0.969 -> 0.876 and
         * 0.928 -> 0.841 (ORT 0.847, 0.821). The dilated 64 -> 64 on 28x28 keeps its 4 rows. */
        if (rows < crows) crows = max64(G, rows / G * G);
#endif
        /* KILN_WINO_CHUNK_KB=N: chunks of N KB here too (measurements) */
        const char *ck = getenv("KILN_WINO_CHUNK_KB");
        if (ck && atoll(ck) > 0) crows = max64(G, min64(R, atoll(ck) * 1024 / row_bytes) / G * G);
        wino_chunks q = {s, x, bias, U, P, y, th, tw, R, crows, G, per, epi, epi_ctx, 0, rows2};
        kn_parallel_for(c->pool, (R + crows - 1) / crows, 1, wino_chunks_range, &q);
        free(own);
        return q.failed ? kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory") : KILN_OK;
    }
    const size_t vfloats = (size_t)(36 * (s->C + s->M) * Tmax + 16);
    float *V = kn_conv_thread_buffer(vfloats), *Vown = NULL;
    if (!V) V = Vown = kn_aligned_alloc(64, sizeof(float) * vfloats);
    const float **ap = malloc(sizeof(float *) * 36 * 4);
    if (!V || !ap) {
        free(Vown);
        free(ap);
        free(own);
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    const float **apk = ap + 36, **bp = ap + 72;
    float **cp = (float **)(ap + 108);
    float *O = V + 36 * s->C * Tmax;
    kiln_status st = KILN_OK;
    const char *ge = getenv("KILN_WINO_GEMM_SPLIT");
    const int64_t gemm_grain = ge && ge[0] == '0' ? 0 : wino_gemm_grain(kn_threadpool_size(c->pool));
    for (int64_t r0 = 0; r0 < R && !st; r0 += rows) {
        const int64_t nr = min64(rows, R - r0), Tb = nr * tw;
        wino_job j = {s, x, y, bias, V, O, th, tw, r0, nr, Tb, epi, epi_ctx, multi ? KN_VL / tw : 1, rows2};
        const int64_t nvec = (nr + j.G - 1) / j.G;
        if (multi) kn_parallel_for(c->pool, nvec * ((s->C + 15) / 16), 1, wino_in_multi, &j);
        else kn_parallel_for(c->pool, s->C * nr, max64(1, 16 / ((tw + KN_VL - 1) / KN_VL * 4)), wino_in_range, &j);
        for (int xi = 0; xi < 36; xi++) {
            ap[xi] = U + xi * s->M * s->C;
            apk[xi] = P ? P + xi * per : NULL;
            bp[xi] = V + xi * s->C * Tb;
            cp[xi] = O + xi * s->M * Tb;
        }
        kn_sgemm_batch g = {.count = 36, .M = s->M, .N = Tb, .K = s->C, .alpha = 1.0f, .beta = 0.0f, .a = ap,
                            .lda = s->C, .b = bp, .ldb = Tb, .c = cp, .ldc = Tb};
        /* the last chunk may have fewer tiles: it runs transposed only if the GEMM would */
        if (P && swap && kn_sgemm_swaps(s->M, Tb, s->C)) g.at_packed = apk;
        else if (P && !swap) g.a_packed = apk;
        if (gemm_grain) {
            wino_gemm_job gj = {&g, 0};
            kn_parallel_for(c->pool, 36, gemm_grain, wino_gemm_range, &gj);
            st = gj.failed ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
        } else {
            st = kn_sgemm_run(c->pool, &g);
        }
        if (st) break;
        if (multi) kn_parallel_for(c->pool, nvec * ((s->M + 15) / 16), 1, wino_out_multi, &j);
        else kn_parallel_for(c->pool, s->M * nr, max64(1, 16 / ((tw + KN_VL - 1) / KN_VL * 4)), wino_out_range, &j);
    }
    free(Vown);
    free(ap);
    free(own);
    return st ? kn_kernel_error(c, st, "out of memory in the GEMM") : KILN_OK;
#else
    (void)s, (void)x, (void)w, (void)bias, (void)y, (void)epi, (void)epi_ctx, (void)w_const;
    return kn_kernel_error(c, KILN_ERR_INTERNAL, "Winograd convolution without AVX2 or AVX-512");
#endif
}

/* Direct float convolution, output pixels in the vector lanes (conv_direct.h).
 *
 * Written once for AVX2 and AVX-512 (isa_vec.h: KN_VL = 8 or 16 lanes); without either the build
 * has no kernel and kn_dconv_suits says no.
 *
 * Per task (image, group, band of output rows, or of columns of a one-row output) the input rows a
 * window needs are copied once into a ring of rows per input channel of the group
 * ([channel][slot][copy][wpc]; input row ih lives in slot ih mod span, span = (KH - 1) dh + 1),
 * zero-bordered (the left and right pads, and enough columns past the row for whole vectors) and,
 * at column stride sw > 1, split into the sw phases of the row (phase p, element j = padded column
 * j sw + p), so that tap kw of output column ow reads phase (kw dw) mod sw at element ow + (kw dw)
 * / sw: every tap is a plain load at a constant offset, with no mask and no bounds test. Where
 * enough output channels share them (dc_copies_pay) the row is kept as copies of its phases
 * shifted so that every tap's loads are aligned (dc_copies_of). Rows of the window outside the
 * image are left out of the loop (kh0..kh1), not copied as zeros.
 *
 * A tile is MB output channels of the group by NV vectors of KN_VL consecutive output pixels of one
 * row, MB x NV accumulators started from the bias; per tap the NV input vectors are loaded once and
 * the MB weights broadcast (packed once per session as [group][block of MB][C/G][KH][KW][MB]).
 * The row's last, partial tile is computed into a buffer and copied. Finished rows of the group
 * are handed to the epilogue (a fused node's residual and activation) in blocks of a few rows,
 * while they are in cache. */
#include "backend/cpu/conv_direct.h"

#include "backend/cpu/const_cache.h"
#include "backend/cpu/conv_winograd.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cpu/isa_vec.h"
#include "util/aligned.h"

#if KN_VL

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* vectors of a tile per block size MB (accumulators MB x NV within the level's registers) */
#if KN_VREGS == 32 /* AVX-512 (not run on the machine this was written on): accumulators + inputs + 1 <= 32 */
#define DC_NV1 12
#define DC_NV2 8
#define DC_NV4 6
#else
/* 2 x 6 ran 1.5x slower than 4 x 3 on AVX2: GCC folds each input load into both channels' FMAs
 * (12 FMAs, 16 loads, a load-port bound); 2 x 4 keeps 6 loads to 8 FMAs */
#define DC_NV1 12
#define DC_NV2 4
#define DC_NV4 3
#endif
#define DC_NVMAX (DC_NV1 > DC_NV2 ? DC_NV1 : DC_NV2)
/* Blocks of 8 output channels by 3 vectors (AVX-512, the row kernel) on deep windows: per tap 3
 * input loads, most of them split across two lines at a stride-2 phase's odd offsets, and 8
 * broadcasts for 24 FMAs, where 4 x 6 (or the row's 4 x 4 and 4 x 3 at 7 vectors) took 4 loads
 * and 4 broadcasts for 16: the 7x7 s2 3->64 stem (147 taps a tile) was bound by the load ports
 * (1 thread, in ResNet-50: 1.9 ms against ONNX Runtime's 1.5). DC_MB8_MIN_TAPS: the shallowest
 * window (Cg KH KW) given blocks of 8. */
#if KN_VREGS == 32
#define DC_NV8 3
#define DC_MB8 1
#else
#define DC_MB8 0
#endif
#ifndef DC_MB8_MIN_TAPS
#define DC_MB8_MIN_TAPS 64
#endif
#define DC_MAX_KW 512 /* kernel widths up to this (a 1-D 256-tap stride-2 filter: 4.6 GFLOP/s on conv.c's masked taps) */
#define DC_RING_MAX (256 * 1024) /* floats of one task's ring of rows (1 MB) */
#define DC_EPI_FLOATS 8192      /* output floats per epilogue call (rows of the group, in cache) */
/* The row's last tile stored with a mask on its last vector (AVX-512), where a buffer and a copy
 * of its Mg rows were 8% of 5x5 s(1,3) 8->32 on 172x264 (OW 88: every row one tile of 6 vectors,
 * all through the buffer). Not at AVX2: vmaskmovps stores are microcoded on AMD's cores. */
#define DC_MASKED_END (KN_VL == 16)

static int dc_mb_of(int64_t Mg) { return Mg % 4 == 0 ? 4 : Mg % 2 == 0 ? 2 : 1; }

/* The row kernel's widest tile, in vectors, for blocks of mb output channels. */
static int dc_nv_of(int64_t mb) {
#if DC_MB8
    if (mb == 8) return DC_NV8;
#endif
    return mb == 1 ? DC_NV1 : mb == 2 ? DC_NV2 : DC_NV4;
}

typedef struct dc_geom {
    int64_t span;   /* input rows a window spans */
    int64_t wp;     /* floats of one phase of a copied row */
    int64_t rowf;   /* floats of a copied row (sw phases) */
    bool copies;    /* the row kernel's rows with shifted copies (dc_copies_of) after the phases */
    int64_t ncp;    /* the shifted copies of a row (dc_copies_of) */
    int64_t wpc;    /* floats of one copy */
    int64_t rowc;   /* floats of a row in the ring (sw wp + ncp wpc) */
    int64_t ring;   /* floats of the ring (C/G channels x span slots x rowc) */
    int64_t scratch; /* floats a task needs: ring, the padded row before its split, a tile buffer */
} dc_geom;

/* The row kernel's shifted copies of an input row, after its sw phases (wp floats each), one per
 * (phase p, shift r > 0) its taps need: tap kw reads phase p = (kw dw) mod sw at element e =
 * (kw dw) / sw, i.e. copy (p, e mod KN_VL) at element e - e mod KN_VL (the phase itself where that
 * is 0), a multiple of KN_VL, so that every tap's loads are aligned as the tile's columns are. Copy
 * (p, r) element i is phase p element i + r. Loads at e itself split across cache lines at half the
 * tiles' columns where e is not a multiple of KN_VL: the 4 x 3 tile's loop ran 33 GFMA/s on such
 * taps against 42 aligned (2-core AVX2 EPYC, a test loop in L1). Fills cp_p, cp_r and koff (each
 * tap's offset in a ring row, wpc floats a copy) where not NULL; returns the number of copies (at
 * most min(KW, sw KN_VL)). The copies cost a pass over them per input row and channel, shared by
 * the output channels and the rows of a window: where those are few (dc_copies_pay) the row stays
 * as its phases, tap kw at phase p element e. */
static int64_t dc_copies_of(const kn_dconv_shape *s, int *cp_p, int *cp_r, int64_t *koff, int64_t wp, int64_t wpc) {
    int64_t n = 0;
    int key[DC_MAX_KW]; /* p KN_VL + r of copy k */
    for (int64_t kw = 0; kw < s->KW; kw++) {
        const int64_t p = kw * s->dw % s->sw, e = kw * s->dw / s->sw, r = e % KN_VL;
        if (r == 0) {
            if (koff) koff[kw] = p * wp + e;
            continue;
        }
        int64_t k = 0;
        while (k < n && key[k] != (int)(p * KN_VL + r)) k++;
        if (k == n) {
            key[n++] = (int)(p * KN_VL + r);
            if (cp_p) cp_p[k] = (int)p, cp_r[k] = (int)r;
        }
        if (koff) koff[kw] = s->sw * wp + k * wpc + (e - r);
    }
    return n;
}

/* Whether the copies pay for themselves: an input row's copies feed Mg output channels times the
 * KH / sh output rows whose windows it lies in. 2-core AVX2 EPYC, 1 thread, against the phases: 3x3
 * s2 24->48 on 208x208 (Mg KH / sh = 72) faster; 1-D 16->4 k9 s2 (4) 1.4x slower, depthwise 8ch k129
 * s2 (1) 1.2x; 3x39 8->8 (24, 8 copies) 1.1x. Not on 2-D rows at column stride 3: there 2 of a 5x5
 * window's 5 columns of taps are off the vector grid, and the copies (2 rows more to the 3 phases)
 * cost more in copying and in the tile's L1 footprint than the split loads they save: 5x5 s(1,3)
 * 8->32 on 172x264 (160), once faster with them, ran 1.06x the phases' time once the whole windows
 * became one loop of taps (best of 150 runs 2.21 against 2.08 ms); 7x7 s(1,3) 1->32 the same either
 * way (0.529 / 0.525). KILN_DC_COPIES=0/1: never / always (measurements). */
static bool dc_copies_pay(const kn_dconv_shape *s, int64_t ncp) {
    if (ncp == 0) return false; /* every tap aligned already */
    const char *e = getenv("KILN_DC_COPIES");
    if (e) return e[0] == '1';
    if (s->OH > 1 && s->sw == 3) return false;
    return (s->M / s->G) * s->KH >= 32 * s->sh && ncp <= s->sw + 4;
}

static dc_geom dc_geom_of(const kn_dconv_shape *s) {
    dc_geom g;
    const int64_t Cg = s->C / s->G, owr = (s->OW + KN_VL - 1) / KN_VL * KN_VL;
    g.span = (s->KH - 1) * s->dh + 1;
    /* the last tile loads whole vectors up to owr, at offsets up to (KW - 1) dw / sw */
    g.wp = (owr + (s->KW - 1) * s->dw / s->sw + KN_VL) / KN_VL * KN_VL;
    g.rowf = s->sw * g.wp;
    const int64_t emax = (s->KW - 1) * s->dw / s->sw;
    g.wpc = owr + emax / KN_VL * KN_VL;
    g.ncp = dc_copies_of(s, NULL, NULL, NULL, g.wp, g.wpc);
    g.copies = dc_copies_pay(s, g.ncp);
    if (!g.copies) g.ncp = 0;
    g.rowc = g.rowf + g.ncp * g.wpc;
    g.ring = Cg * g.span * g.rowc;
    /* ring, dc_copy_row's tmp, a tile buffer, toff */
    g.scratch = g.ring + g.rowf + KN_VL + (s->M / s->G) * DC_NVMAX * KN_VL + 2 * Cg * s->KH * s->KW;
    return g;
}

typedef struct dc_job {
    const kn_dconv_shape *s;
    dc_geom g;
    const float *x, *wp, *bias;
    float *y;
    kn_conv_epilogue_fn epi;
    const void *epi_ctx;
    int64_t bands, Cg, Mg, mb;
    int64_t cw; /* one output row (1-D): columns a band, from dc_chunk_of (OW: the whole row) */
    int64_t mblk; /* output channels per pass over a band's rows (Mg, or fewer: dc_shallow_wide) */
    bool flat;    /* the band as one flat run of positions (dc_flat_range) */
    bool runs;    /* dc_flat_range: the band's rows are x's rows as they lie (dc_flat_runs) */
    int64_t *toff, taps; /* dc_flat_range: each tap's offset in the copied band */
    int64_t koff[DC_MAX_KW]; /* tap kw's offset in a row's copies (dc_copies_of) */
    int cp_p[DC_MAX_KW], cp_r[DC_MAX_KW]; /* copy k: phase, shift */
    int *failed;
} dc_job;

/* The register tile's three steps, shared by the row kernel (dc_tile) and the flat bands
 * (dc_ftile): MB output channels x NV vectors started at the bias, one tap added (the weights of
 * the MB channels at w, the inputs at src), and stored with row m at dst + m * ldm. */
typedef kn_vf dc_acc[DC_MB8 ? 8 : 4][DC_NVMAX];
static inline __attribute__((always_inline)) void dc_acc_init(dc_acc acc, const float *bias, const int MB,
                                                              const int NV) {
#pragma GCC unroll 8
    for (int m = 0; m < MB; m++) {
        const kn_vf b = bias ? kn_vf_set1(bias[m]) : kn_vf_zero();
#pragma GCC unroll 16
        for (int q = 0; q < NV; q++) acc[m][q] = b;
    }
}
static inline __attribute__((always_inline)) void dc_acc_tap(dc_acc acc, const float *src, const float *w,
                                                             const int MB, const int NV) {
    if (MB == 1) { /* the inputs straight into the products: no registers held for them */
        const kn_vf wv = kn_vf_set1(w[0]);
#pragma GCC unroll 16
        for (int q = 0; q < NV; q++) acc[0][q] = kn_vf_fmadd(kn_vf_loadu(src + KN_VL * q), wv, acc[0][q]);
        return;
    }
    kn_vf in[DC_NVMAX];
#pragma GCC unroll 16
    for (int q = 0; q < NV; q++) in[q] = kn_vf_loadu(src + KN_VL * q);
#pragma GCC unroll 8
    for (int m = 0; m < MB; m++) {
        const kn_vf wv = kn_vf_set1(w[m]);
#pragma GCC unroll 16
        for (int q = 0; q < NV; q++) acc[m][q] = kn_vf_fmadd(in[q], wv, acc[m][q]);
    }
}
/* lastm: the lanes of the last vector stored (KN_VALL: all) */
static inline __attribute__((always_inline)) void dc_acc_store(dc_acc acc, float *dst, int64_t ldm, const int MB,
                                                               const int NV, kn_vmask lastm) {
#pragma GCC unroll 8
    for (int m = 0; m < MB; m++) {
#pragma GCC unroll 16
        for (int q = 0; q < NV - 1; q++) kn_vf_storeu(dst + m * ldm + KN_VL * q, acc[m][q]);
        if (lastm == KN_VALL) kn_vf_storeu(dst + m * ldm + KN_VL * (NV - 1), acc[m][NV - 1]);
        else kn_vf_mask_storeu(dst + m * ldm + KN_VL * (NV - 1), lastm, acc[m][NV - 1]);
    }
}

/* MB output channels x NV vectors at src (channel 0, position of the tile), every tap of the
 * window one offset of toff (in the weights' order: channel, kh, kw), one loop: the flat bands'
 * tiles, and the row kernel's on rows whose window lies in the image. */
static inline __attribute__((always_inline)) void dc_ftile(const float *src, const int64_t *toff, int64_t taps,
                                                           const float *w, const float *bias, float *dst,
                                                           int64_t ldm, const int MB, const int NV) {
    dc_acc acc;
    dc_acc_init(acc, bias, MB, NV);
    for (int64_t t = 0; t < taps; t++, w += MB) dc_acc_tap(acc, src + toff[t], w, MB, NV);
    dc_acc_store(acc, dst, ldm, MB, NV, KN_VALL);
}

/* MB output channels x NV vectors from the rows rows[kh] (channel 0 of the group, at the tile's
 * first column; channel c is c * cstride further), taps kh in [kh0, kh1); the result to dst, row m
 * at dst + m * ldm. */
static inline __attribute__((always_inline)) void dc_tile(const dc_job *j, const float *const *rows, int64_t kh0,
                                                          int64_t kh1, const float *w, const float *bias, float *dst,
                                                          int64_t ldm, const int MB, const int NV, kn_vmask lastm) {
    const int64_t KW = j->s->KW, KH = j->s->KH, Cg = j->Cg, cstride = j->g.span * j->g.rowc;
    const int64_t *koff = j->koff;
    dc_acc acc;
    dc_acc_init(acc, bias, MB, NV);
    for (int64_t c = 0; c < Cg; c++)
        for (int64_t kh = kh0; kh < kh1; kh++) {
            const float *r = rows[kh] + c * cstride;
            const float *wk = w + (c * KH + kh) * KW * MB;
            for (int64_t kw = 0; kw < KW; kw++, wk += MB) dc_acc_tap(acc, r + koff[kw], wk, MB, NV);
        }
    dc_acc_store(acc, dst, ldm, MB, NV, lastm);
}

/* `count` tile positions of NV vectors from column offset o0 (rows and dst at o0's column), each
 * for every block of MB of the group's Mg output channels: one call per run of tiles, so that
 * shallow windows (a 3x3 one-channel stem: 9 taps a tile) do not pay a call per tile. w and bias:
 * the group's; dst row m at dst + m * ldm; lastm: the lanes stored of each tile's last vector. */
static inline __attribute__((always_inline)) void dc_tiles(const dc_job *j, const float *const *rows, int64_t o0,
                                                           int64_t count, int64_t kh0, int64_t kh1, const float *w,
                                                           const float *bias, float *dst, int64_t ldm, const int MB,
                                                           const int NV, kn_vmask lastm) {
    const int64_t wblock = j->Cg * j->s->KH * j->s->KW * MB;
    for (int64_t t = 0; t < count; t++) {
        const int64_t o = o0 + t * NV * KN_VL;
        const float *tr[64];
        for (int64_t kh = kh0; kh < kh1; kh++) tr[kh] = rows[kh] + o;
        for (int64_t m0 = 0, b = 0; m0 < j->Mg; m0 += MB, b++)
            dc_tile(j, tr, kh0, kh1, w + b * wblock, bias ? bias + m0 : NULL, dst + m0 * ldm + (o - o0), ldm, MB, NV,
                    lastm);
    }
}

#define DC_CASE(MB, NV)                                                                                      \
    case NV: dc_tiles(j, rows, o0, count, kh0, kh1, w, bias, dst, ldm, MB, NV, lastm); break;
#define DC_ARGS                                                                                              \
    const dc_job *j, const float *const *rows, int64_t o0, int64_t count, int64_t kh0, int64_t kh1,          \
        const float *w, const float *bias, float *dst, int64_t ldm, int nv, kn_vmask lastm

/* nv: 1 .. DC_NVn vectors (the row's last tiles), DC_NVn the default */
static void dc_tiles_1(DC_ARGS) {
    switch (nv) {
#if DC_NV1 > 1
        DC_CASE(1, 1)
#endif
#if DC_NV1 > 2
        DC_CASE(1, 2)
#endif
#if DC_NV1 > 3
        DC_CASE(1, 3)
#endif
#if DC_NV1 > 4
        DC_CASE(1, 4)
#endif
#if DC_NV1 > 5
        DC_CASE(1, 5)
#endif
#if DC_NV1 > 6
        DC_CASE(1, 6)
#endif
#if DC_NV1 > 7
        DC_CASE(1, 7)
#endif
#if DC_NV1 > 8
        DC_CASE(1, 8)
#endif
#if DC_NV1 > 9
        DC_CASE(1, 9)
#endif
#if DC_NV1 > 10
        DC_CASE(1, 10)
#endif
#if DC_NV1 > 11
        DC_CASE(1, 11)
#endif
        default: dc_tiles(j, rows, o0, count, kh0, kh1, w, bias, dst, ldm, 1, DC_NV1, lastm); break;
    }
}

static void dc_tiles_2(DC_ARGS) {
    switch (nv) {
#if DC_NV2 > 1
        DC_CASE(2, 1)
#endif
#if DC_NV2 > 2
        DC_CASE(2, 2)
#endif
#if DC_NV2 > 3
        DC_CASE(2, 3)
#endif
#if DC_NV2 > 4
        DC_CASE(2, 4)
#endif
#if DC_NV2 > 5
        DC_CASE(2, 5)
#endif
#if DC_NV2 > 6
        DC_CASE(2, 6)
#endif
#if DC_NV2 > 7
        DC_CASE(2, 7)
#endif
#if DC_NV2 > 8
        DC_CASE(2, 8)
#endif
#if DC_NV2 > 9
        DC_CASE(2, 9)
#endif
#if DC_NV2 > 10
        DC_CASE(2, 10)
#endif
#if DC_NV2 > 11
        DC_CASE(2, 11)
#endif
        default: dc_tiles(j, rows, o0, count, kh0, kh1, w, bias, dst, ldm, 2, DC_NV2, lastm); break;
    }
}

static void dc_tiles_4(DC_ARGS) {
    switch (nv) {
#if DC_NV4 > 1
        DC_CASE(4, 1)
#endif
#if DC_NV4 > 2
        DC_CASE(4, 2)
#endif
#if DC_NV4 > 3
        DC_CASE(4, 3)
#endif
#if DC_NV4 > 4
        DC_CASE(4, 4)
#endif
#if DC_NV4 > 5
        DC_CASE(4, 5)
#endif
#if DC_NV4 > 6
        DC_CASE(4, 6)
#endif
#if DC_NV4 > 7
        DC_CASE(4, 7)
#endif
#if DC_NV4 > 8
        DC_CASE(4, 8)
#endif
#if DC_NV4 > 9
        DC_CASE(4, 9)
#endif
#if DC_NV4 > 10
        DC_CASE(4, 10)
#endif
#if DC_NV4 > 11
        DC_CASE(4, 11)
#endif
        default: dc_tiles(j, rows, o0, count, kh0, kh1, w, bias, dst, ldm, 4, DC_NV4, lastm); break;
    }
}

#if DC_MB8
static void dc_tiles_8(DC_ARGS) {
    switch (nv) {
        DC_CASE(8, 1)
        DC_CASE(8, 2)
        default: dc_tiles(j, rows, o0, count, kh0, kh1, w, bias, dst, ldm, 8, DC_NV8, lastm); break;
    }
}
#endif

static void dc_tiles_any(DC_ARGS) {
#if DC_MB8
    if (j->mb == 8) {
        dc_tiles_8(j, rows, o0, count, kh0, kh1, w, bias, dst, ldm, nv, lastm);
        return;
    }
#endif
    if (j->mb == 1) dc_tiles_1(j, rows, o0, count, kh0, kh1, w, bias, dst, ldm, nv, lastm);
    else if (j->mb == 2) dc_tiles_2(j, rows, o0, count, kh0, kh1, w, bias, dst, ldm, nv, lastm);
    else dc_tiles_4(j, rows, o0, count, kh0, kh1, w, bias, dst, ldm, nv, lastm);
}

/* count tiles of NV vectors from position o0, each for every block of MB of the Mg channels */
static inline __attribute__((always_inline)) void dc_ftiles(const float *src, const int64_t *toff, int64_t taps,
                                                            int64_t Mg, int64_t o0, int64_t count, const float *w,
                                                            const float *bias, float *dst, int64_t ldm, const int MB,
                                                            const int NV) {
    for (int64_t t = 0; t < count; t++) {
        const int64_t o = o0 + t * NV * KN_VL;
        for (int64_t m0 = 0, b = 0; m0 < Mg; m0 += MB, b++)
            dc_ftile(src + o, toff, taps, w + b * taps * MB, bias ? bias + m0 : NULL, dst + m0 * ldm + (o - o0), ldm,
                     MB, NV);
    }
}

#define DCF_ARGS                                                                                             \
    const float *src, const int64_t *toff, int64_t taps, int64_t Mg, int64_t o0, int64_t count, const float *w, \
        const float *bias, float *dst, int64_t ldm, int nv
#define DCF_CASE(MB, NV)                                                                                     \
    case NV: dc_ftiles(src, toff, taps, Mg, o0, count, w, bias, dst, ldm, MB, NV); break;
static void dc_ftiles_1(DCF_ARGS) {
    switch (nv) {
        DCF_CASE(1, 1) DCF_CASE(1, 2) DCF_CASE(1, 3) DCF_CASE(1, 4) DCF_CASE(1, 5) DCF_CASE(1, 6)
        DCF_CASE(1, 7) DCF_CASE(1, 8) DCF_CASE(1, 9) DCF_CASE(1, 10) DCF_CASE(1, 11)
        default: dc_ftiles(src, toff, taps, Mg, o0, count, w, bias, dst, ldm, 1, DC_NV1); break;
    }
}
static void dc_ftiles_2(DCF_ARGS) {
    switch (nv) {
#if DC_NV2 > 4
        DCF_CASE(2, 4) DCF_CASE(2, 5) DCF_CASE(2, 6) DCF_CASE(2, 7)
#endif
        DCF_CASE(2, 1) DCF_CASE(2, 2) DCF_CASE(2, 3)
        default: dc_ftiles(src, toff, taps, Mg, o0, count, w, bias, dst, ldm, 2, DC_NV2); break;
    }
}
static void dc_ftiles_4(DCF_ARGS) {
    switch (nv) {
#if DC_NV4 > 3
        DCF_CASE(4, 3) DCF_CASE(4, 4) DCF_CASE(4, 5)
#endif
        DCF_CASE(4, 1) DCF_CASE(4, 2)
        default: dc_ftiles(src, toff, taps, Mg, o0, count, w, bias, dst, ldm, 4, DC_NV4); break;
    }
}
static void dc_ftiles_any(int64_t mb, DCF_ARGS) {
    if (mb == 1) dc_ftiles_1(src, toff, taps, Mg, o0, count, w, bias, dst, ldm, nv);
    else if (mb == 2) dc_ftiles_2(src, toff, taps, Mg, o0, count, w, bias, dst, ldm, nv);
    else dc_ftiles_4(src, toff, taps, Mg, o0, count, w, bias, dst, ldm, nv);
}

/* dc_copy_row at column strides 3 and 4 (SW a constant: the masks and permutations are constants
 * and the loops over phases and vectors unrolled, where at a variable stride each row's call
 * divided for its 9-16 masks and looped over the phases: its idivs and loop tests were most of
 * dc_copy_row_phases' samples, 6% of 5x5 s(1,3) 8->32 on 172x264). Apart (not inlined), so that
 * dc_copy_row stays small enough to inline into dc_flat_range's loop over rows (inlined there with
 * this in it, it was not: a call per row of 3 columns made 7x1 4->4 on 300x3 1.3x slower). */
static inline __attribute__((always_inline)) void dc_phases_body(const float *src, int64_t W, int64_t pw, int64_t wp,
                                                                 float *dst, const int SW) {
    /* SW vectors of the row (masked loads at its ends) give a vector of each phase: lane l of
     * phase p is element e = l SW + p of the block, lane e mod KN_VL of vector e / KN_VL:
     * each vector permuted by l SW + p (the permutes take the index mod KN_VL) and blended in
     * over the lanes it holds (the scalar split through tmp was 8% of 5x5 s(1,3) 8->32 on
     * 172x264) */
    kn_vi idx[4];
    kn_vmask sel[4][4];
#pragma GCC unroll 4
    for (int p = 0; p < SW; p++) {
        idx[p] = kn_vi_iota(p, SW);
        /* lanes l with v KN_VL <= l SW + p < (v + 1) KN_VL */
#pragma GCC unroll 4
        for (int v = 0; v < SW; v++)
            sel[p][v] = kn_v_range((v * KN_VL - p + SW - 1) / SW, ((v + 1) * KN_VL - p + SW - 1) / SW);
    }
    for (int64_t i = 0; i < wp; i += KN_VL) {
        kn_vf in[4];
        const int64_t u0 = i * SW - pw; /* the block's first input column */
        if (u0 >= 0 && u0 + SW * KN_VL <= W) {
#pragma GCC unroll 4
            for (int v = 0; v < SW; v++) in[v] = kn_vf_loadu(src + u0 + v * KN_VL);
        } else {
#pragma GCC unroll 4
            for (int v = 0; v < SW; v++) {
                const int64_t u = u0 + v * KN_VL;
                const kn_vmask m = kn_v_range(-u, W - u);
                in[v] = m ? kn_vf_maskz_loadu(m, src + u) : kn_vf_zero();
            }
        }
#pragma GCC unroll 4
        for (int p = 0; p < SW; p++) {
            kn_vf r = kn_vf_perm(idx[p], in[0]);
#pragma GCC unroll 4
            for (int v = 1; v < SW; v++) r = kn_vf_blend(sel[p][v], r, kn_vf_perm(idx[p], in[v]));
            kn_vf_storeu(dst + p * wp + i, r);
        }
    }
}

static __attribute__((noinline)) void dc_copy_row_phases(const float *src, int64_t W, int64_t pw, int64_t sw,
                                                         int64_t wp, float *dst) {
    if (sw == 3) dc_phases_body(src, W, pw, wp, dst, 3);
    else dc_phases_body(src, W, pw, wp, dst, 4);
}

/* One input row into a copied row: padded column i is src[i - pw], zero outside the row; at sw > 1
 * split into phases through tmp (rowf + KN_VL floats): phase p, element e = padded column e sw + p. */
static void dc_copy_row(const float *src, int64_t W, int64_t pw, int64_t sw, int64_t wp, float *dst, float *tmp) {
    const int64_t rowf = sw * wp;
    const int64_t lo = min64(pw, rowf), hi = min64(rowf, pw + W); /* padded columns that hold input */
    if (sw == 2) { /* straight from the row, masked loads at its ends (a scalar copy of those blocks
                    * was 80% of a depthwise 3x3 s2 on 56x56) */
        float *ev = dst, *od = dst + wp;
        for (int64_t i = 0; i < wp; i += KN_VL) {
            const int64_t u = 2 * i - pw; /* the block's first padded column's input column */
            kn_vf a, b;
            if (u >= 0 && u + 2 * KN_VL <= W) {
                a = kn_vf_loadu(src + u), b = kn_vf_loadu(src + u + KN_VL);
            } else {
                const kn_vmask ma = kn_v_range(-u, W - u), mb = kn_v_range(-u - KN_VL, W - u - KN_VL);
                a = ma ? kn_vf_maskz_loadu(ma, src + u) : kn_vf_zero();
                b = mb ? kn_vf_maskz_loadu(mb, src + u + KN_VL) : kn_vf_zero();
            }
#if KN_VL == 8
            const __m256 e = _mm256_shuffle_ps(a, b, 0x88), o = _mm256_shuffle_ps(a, b, 0xDD);
            kn_vf_storeu(ev + i, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8)));
            kn_vf_storeu(od + i, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xD8)));
#else
            kn_vf_storeu(ev + i, kn_vf_perm2(a, kn_vi_iota(0, 2), b));
            kn_vf_storeu(od + i, kn_vf_perm2(a, kn_vi_iota(1, 2), b));
#endif
        }
        return;
    }
    if (sw == 3 || sw == 4) {
        dc_copy_row_phases(src, W, pw, sw, wp, dst);
        return;
    }
    if (sw == 1 && W < 256) { /* vectors, masked loads at the ends (memset, memcpy, memset: a third
                               * of a depthwise 3x3 on 56x56; on 1000-wide rows memcpy is faster) */
        for (int64_t i = 0; i < rowf; i += KN_VL) {
            const int64_t u = i - pw;
            kn_vf v;
            if (u >= 0 && u + KN_VL <= W) {
                v = kn_vf_loadu(src + u);
            } else {
                const kn_vmask m = kn_v_range(-u, W - u);
                v = m ? kn_vf_maskz_loadu(m, src + u) : kn_vf_zero();
            }
            kn_vf_storeu(dst + i, v);
        }
        return;
    }
    float *row = sw == 1 ? dst : tmp;
    if (lo > 0) memset(row, 0, sizeof(float) * (size_t)lo);
    if (hi > lo) memcpy(row + lo, src, sizeof(float) * (size_t)(hi - lo));
    if (rowf > max64(hi, lo)) memset(row + max64(hi, lo), 0, sizeof(float) * (size_t)(rowf - max64(hi, lo)));
    if (sw == 1) return;
    for (int64_t p = 0; p < sw; p++) {
        float *ph = dst + p * wp;
        for (int64_t i = 0; i < wp; i++) ph[i] = tmp[i * sw + p];
    }
}

/* Input row ih of the group's channels (image n) into ring slot `slot`: split into phases
 * (dc_copy_row), then the shifted copies (dc_copies_of). The row's columns from xoff, wl of them,
 * pl pads before them (a column chunk's: dc_range). */
static void dc_copy_rows(const dc_job *j, const float *xg, int64_t ih, int64_t xoff, int64_t wl, int64_t pl,
                         int64_t slot, float *ring, float *tmp) {
    const kn_dconv_shape *s = j->s;
    const int64_t wpc = j->g.wpc, wp = j->g.wp;
    for (int64_t c = 0; c < j->Cg; c++) {
        float *ph = ring + (c * j->g.span + slot) * j->g.rowc, *d = ph + s->sw * wp;
        dc_copy_row(xg + (c * s->H + ih) * s->W + xoff, wl, pl, s->sw, wp, ph, tmp);
        for (int64_t k = 0; k < j->g.ncp; k++, d += wpc) {
            const float *src = ph + j->cp_p[k] * wp + j->cp_r[k];
            for (int64_t i = 0; i < wpc; i += KN_VL) kn_vf_store(d + i, kn_vf_loadu(src + i));
        }
    }
}

static void dc_range(void *arg, int64_t begin, int64_t end) {
    const dc_job *j = arg;
    const kn_dconv_shape *s = j->s;
    const dc_geom *g = &j->g;
    const int64_t OWF = s->OW, OH = s->OH, plane = OH * OWF, Mg = j->Mg, mb = j->mb, KH = s->KH;
    const int nvmax = dc_nv_of(mb);
    float *own = NULL, *buf = kn_conv_thread_buffer((size_t)g->scratch);
    if (!buf && !(buf = own = kn_aligned_alloc(64, sizeof(float) * (size_t)g->scratch))) {
        __atomic_store_n(j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *ring = buf, *tmp = buf + g->ring, *tb = tmp + g->rowf + KN_VL;
    /* the taps' offsets from ring for rows whose window lies in the image (an even float offset) */
    int64_t *toff = (int64_t *)(tb + Mg * DC_NVMAX * KN_VL);
    const int64_t cstride = g->span * g->rowc, KW = s->KW, taps = j->Cg * KH * KW;
    int64_t have[64];
    const float *rows[64];
    for (int64_t t = begin; t < end; t++) {
        const int64_t ng = t / j->bands, band = t % j->bands, n = ng / s->G, gi = ng % s->G;
        /* bands of rows, or of j->cw columns (one output row: dc_range's row then is the chunk's,
         * copied from its own input columns) */
        const bool chunks = j->cw < OWF;
        const int64_t oh0 = chunks ? 0 : band * OH / j->bands, oh1 = chunks ? OH : (band + 1) * OH / j->bands;
        const int64_t c0 = chunks ? band * j->cw : 0, OW = chunks ? min64(j->cw, OWF - c0) : OWF;
        const int64_t nvec = (OW + KN_VL - 1) / KN_VL, xs = c0 * s->sw - s->pw;
        const int64_t xoff = min64(max64(xs, 0), s->W), wl = s->W - xoff, pl = xs < 0 ? -xs : 0;
        const float *xg = j->x + (n * s->C + gi * j->Cg) * s->H * s->W;
        const int64_t ybase = (n * s->M + gi * Mg) * plane + c0;
        const float *wg = j->wp + gi * Mg * j->Cg * KH * s->KW;
        for (int64_t i = 0; i < g->span; i++) have[i] = -1;
        for (int64_t mb0 = 0; mb0 < Mg; mb0 += j->mblk) {
            /* a pass over the band's rows for output channels [mb0, mb0 + jb->Mg) (the whole group
             * unless dc_shallow_wide cuts it); the ring keeps its rows from pass to pass */
            dc_job jbs;
            const dc_job *jb = j;
            if (j->mblk < Mg) jbs = *j, jbs.Mg = min64(j->mblk, Mg - mb0), jb = &jbs;
            const int64_t Mb = jb->Mg, epi_rows = max64(1, DC_EPI_FLOATS / max64(1, Mb * OW));
            int64_t epi_from = oh0;
            /* r0: ih0 mod span, kept up to date without a division per row (an idiv per row and tap
             * row was a tenth of a depthwise 3x3's time) */
            const int64_t span = g->span, dh = s->dh, sh_mod = s->sh % span;
            int64_t r0 = (oh0 * s->sh - s->ph) % span;
            if (r0 < 0) r0 += span;
            for (int64_t oh = oh0; oh < oh1; oh++) {
                const int64_t ih0 = oh * s->sh - s->ph, below = s->H - 1 - ih0;
                const int64_t kh0 = ih0 >= 0 ? 0 : dh == 1 ? -ih0 : (-ih0 + dh - 1) / dh;
                const int64_t kh1 = below < 0 ? 0 : min64(KH, dh == 1 ? below + 1 : below / dh + 1);
                int64_t slot = r0 + kh0 * dh % span; /* ih0 + kh0 dh mod span */
                if (slot >= span) slot -= span;
                for (int64_t kh = kh0; kh < kh1; kh++) {
                    const int64_t ih = ih0 + kh * dh;
                    if (have[slot] != ih) dc_copy_rows(j, xg, ih, xoff, wl, pl, slot, ring, tmp), have[slot] = ih;
                    rows[kh] = ring + slot * g->rowc;
                    if ((slot += dh) >= span) slot -= span;
                }
                if ((r0 += sh_mod) >= span) r0 -= span;
                const bool whole = kh0 == 0 && kh1 == KH;
                if (whole)
                    for (int64_t c = 0, t = 0; c < j->Cg; c++)
                        for (int64_t kh = 0; kh < KH; kh++)
                            for (int64_t kw = 0; kw < KW; kw++, t++)
                                toff[t] = (rows[kh] - ring) + c * cstride + j->koff[kw];
                /* whole windows: the flat bands' tiles, one loop over the window's taps (toff), in
                 * place of dc_tile's loops over channels, kh and kw of 3-5 taps each, whose loop
                 * state GCC kept partly on the stack (perf: 3 reloads a tap in the 4 x 3 tile's
                 * loop). 2-core AVX2 EPYC, 1 thread: 5x5 s(1,3) 8->32 172x264 0.86, 3x3 s2 24->48
                 * 208x208 0.84 of the time before (with the copies) */
                const int64_t *tt = whole && mb != 8 ? toff : NULL;
#define DC_ROW_TILES(O, COUNT, DST, LDM, NV, LASTM)                                                          \
    do {                                                                                                     \
        if (tt && (LASTM) == KN_VALL)                                                                        \
            dc_ftiles_any(mb, ring + (O), tt, taps, Mb, 0, COUNT, wb, bg, DST, LDM, NV);                     \
        else                                                                                                 \
            dc_tiles_any(jb, rows, O, COUNT, kh0, kh1, wb, bg, DST, LDM, NV, LASTM);                         \
    } while (0)
                /* the next output row's new input rows, towards L2 while this row computes (the copy of
                 * a 3-channel stride-2 stem's rows waited on memory: 3x3 s2 3->16 on 800x608 ran 1.07x
                 * the time of conv.c's 3x3 kernel, which prefetches them) */
                if (oh + 1 < oh1 && mb0 == 0)
                    for (int64_t ih = max64(0, ih0 + span); ih < min64(ih0 + span + s->sh, s->H); ih++)
                        for (int64_t c = 0; c < j->Cg; c++) {
                            const char *p = (const char *)(xg + (c * s->H + ih) * s->W);
                            for (int64_t b = 0; b < (int64_t)sizeof(float) * s->W; b += 64) _mm_prefetch(p + b, _MM_HINT_T1);
                        }
                const float *bg = j->bias ? j->bias + gi * Mg + mb0 : NULL;
                float *yrow = j->y + ybase + mb0 * plane + oh * OWF;
                const float *wb = wg + mb0 * j->Cg * KH * s->KW;
                /* tiles of nvmax vectors while 2 nvmax or more are left; the last two split evenly (a tile
                 * of 1 vector by 4 channels is 4 FMA chains, under the 8 that hide the FMA latency) */
                const int64_t nfull = nvec >= 2 * nvmax ? (nvec - nvmax) / nvmax : 0;
                if (nfull) DC_ROW_TILES(0, nfull, yrow, plane, nvmax, KN_VALL);
                for (int64_t q0 = nfull * nvmax; q0 < nvec;) {
                    const int64_t left = nvec - q0;
                    const int nv = (int)(left <= nvmax ? left : (left + 1) / 2);
                    const int64_t ow0 = q0 * KN_VL, cols = min64((int64_t)nv * KN_VL, OW - ow0);
                    if (cols == (int64_t)nv * KN_VL) {
                        DC_ROW_TILES(ow0, 1, yrow + ow0, plane, nv, KN_VALL);
                    } else if (DC_MASKED_END) {
                        DC_ROW_TILES(ow0, 1, yrow + ow0, plane, nv, kn_v_tail(cols - (int64_t)(nv - 1) * KN_VL));
                    } else { /* the row's end: through the buffer, Mg rows of nv vectors */
                        const int64_t ldb = (int64_t)nv * KN_VL;
                        DC_ROW_TILES(ow0, 1, tb, ldb, nv, KN_VALL);
                        for (int64_t m = 0; m < Mb; m++)
                            memcpy(yrow + ow0 + m * plane, tb + m * ldb, sizeof(float) * (size_t)cols);
                    }
                    q0 += nv;
                }
#undef DC_ROW_TILES
                if (j->epi && (oh + 1 == oh1 || oh + 1 - epi_from >= epi_rows)) {
                    j->epi(j->epi_ctx, j->y, ybase + mb0 * plane + epi_from * OWF, Mb, (oh + 1 - epi_from) * OW, plane);
                    epi_from = oh + 1;
                }
            }
        }
    }
    free(own);
}


typedef struct dc_wctx {
    const float *w;
    int64_t M, Cg, kk, mb;
} dc_wctx;

/* [M / mb][Cg][kk][mb] (blocks never straddle groups: mb divides M / G) */
static void dc_make_weights(const void *ctx, void *dst) {
    const dc_wctx *k = ctx;
    float *d = dst;
    const int64_t K = k->Cg * k->kk;
    for (int64_t m0 = 0; m0 < k->M; m0 += k->mb)
        for (int64_t i = 0; i < K; i++)
            for (int64_t r = 0; r < k->mb; r++) *d++ = k->w[(m0 + r) * K + i];
}

/* Shallow windows (at most 18 taps over the group's input channels: one-channel 3x3 spectrogram
 * stems, 2-channel 3x3) with more than 8 output channels a group whose output exceeds twice the
 * L2: passes of 8 output channels over each band of rows, not all of them per row. A row for all
 * channels writes as many planes at once (32 for dnsmos' 1 -> 32 on 900x120, 128 for 1 -> 128 on
 * 901x161), and those stores, not the 9 FMAs an output, set the pace; the ring of input rows is
 * small and is reused from pass to pass. 2-core AVX2 EPYC, 1 thread, CPU time, passes of 8 / one
 * pass: 3x3 1->32 900x120 0.56-0.60, 1->32 128x128 0.67, 2->32 900x120 0.71; 1->128 901x161 0.38 of
 * the output-pixels-in-lanes kernel conv.c gave it (14.5 ms in ONNX Runtime, 8.7 here). Deeper
 * windows gained less or lost (4->32 3x3 0.85-0.95, 3-channel stems 0.98-1.18, 5x5 8->32 1.30), as
 * did outputs that fit the L2 (1->32 on 30x120 1.21). KILN_DC_MBLK=n: passes of n channels. */
static bool dc_shallow_wide(const kn_dconv_shape *s) {
#if KN_VL == 8 /* measured on AVX2 only (the AVX-512 tiles are other shapes) */
    const int64_t Cg = s->C / s->G, Mg = s->M / s->G;
    return Cg * s->KH * s->KW <= 18 && Mg > 8 &&
           (double)Mg * (double)s->OH * (double)s->OW * sizeof(float) > 2.0 * (double)kn_conv_l2_bytes();
#else
    (void)s;
    return false;
#endif
}

static int64_t dc_mblk_of(const kn_dconv_shape *s, int64_t Mg, int64_t mb) {
    const char *e = getenv("KILN_DC_MBLK");
    if (e && atoi(e) > 0) return max64(mb, atoi(e) / mb * mb);
    return dc_shallow_wide(s) ? 8 : Mg; /* 8: a multiple of every mb */
}

/* ---- stride 1 on narrow rows: the band as one flat run of positions ----
 * At stride 1 output (oh, ow) reads padded input (oh + kh dh, ow + kw dw): in a copy of the band's
 * input rows whose rows are Wp = OW + (KW - 1) dw wide, position p = r Wp + ow reads p + kh dh Wp +
 * kw dw, one constant offset a tap across the whole band. So the tiles run over the band's
 * positions as one row (the columns past OW of each row computed and dropped), where the row
 * kernel split each row of 1-4 vectors into tiles of 1-2 vectors (4-8 FMA chains, a call and a
 * store of the tile per row: oww_embedding's 1x3 / 3x1 layers on 32-, 16- and 8-wide rows). The
 * tiles land in a buffer ([Mg][positions]) whose rows' first OW columns are copied out. */
static int64_t dc_flat_wp(const kn_dconv_shape *s) { return s->OW + (s->KW - 1) * s->dw; }

/* output rows per band: its copied input and its output buffer within about 192 KB (L2) */
static int64_t dc_flat_rows(const kn_dconv_shape *s) {
    const int64_t Cg = s->C / s->G, Mg = s->M / s->G, wp = dc_flat_wp(s);
    const int64_t per_row = (Cg + Mg) * wp, halo = Cg * (s->KH - 1) * s->dh * wp;
    return max64(1, min64(s->OH, (48 * 1024 - halo) / per_row));
}

/* floats of one channel's copied band (rows, then slack for the last tile's loads) and of one output
 * channel's positions in the buffer */
static int64_t dc_flat_chan(const kn_dconv_shape *s, int64_t rows) {
    const int64_t wp = dc_flat_wp(s);
    return ((rows + (s->KH - 1) * s->dh) * wp + (s->KW - 1) * s->dw + (DC_NVMAX + 1) * KN_VL) / KN_VL * KN_VL;
}
static int64_t dc_flat_out(const kn_dconv_shape *s, int64_t rows) {
    return (rows * dc_flat_wp(s) + KN_VL - 1) / KN_VL * KN_VL;
}

/* Whether the band's rows are x's rows as they lie: no pads along the row (Wp = W), so a channel's
 * band is one run of its plane, copied by one memcpy between the zeros of the rows above and below
 * the image, not row by row (kh x 1 kernels: Inception's 7x1 on 17-wide rows spent a tenth of its
 * time in dc_copy_row's masked 3-vector copies, per row). KILN_DC_RUNS=0: row by row (tests). */
static bool dc_flat_runs(const kn_dconv_shape *s) {
    if (s->pw != 0 || dc_flat_wp(s) != s->W) return false;
    const char *e = getenv("KILN_DC_RUNS");
    return !(e && e[0] == '0');
}


static void dc_flat_range(void *arg, int64_t begin, int64_t end) {
    const dc_job *j = arg;
    const kn_dconv_shape *s = j->s;
    const int64_t OW = s->OW, OH = s->OH, plane = OH * OW, Mg = j->Mg, Cg = j->Cg, mb = j->mb, KH = s->KH;
    const int64_t wp = dc_flat_wp(s), rmax = (OH + j->bands - 1) / j->bands;
    const int64_t cf = dc_flat_chan(s, rmax), of = dc_flat_out(s, rmax);
    const int nvmax = mb == 1 ? DC_NV1 : mb == 2 ? DC_NV2 : DC_NV4;
    const size_t floats = (size_t)(Cg * cf + Mg * of);
    float *own = NULL, *buf = kn_conv_thread_buffer(floats);
    if (!buf && !(buf = own = kn_aligned_alloc(64, sizeof(float) * floats))) {
        __atomic_store_n(j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *xin = buf, *ob = buf + Cg * cf;
    const int64_t *toff = j->toff;
    /* row by row: the rows' pads are zero from here on, as every task writes the same columns */
    if (!j->runs) memset(xin, 0, sizeof(float) * (size_t)(Cg * cf));
    for (int64_t t = begin; t < end; t++) {
        const int64_t ng = t / j->bands, band = t % j->bands, n = ng / s->G, gi = ng % s->G;
        const int64_t oh0 = band * OH / j->bands, oh1 = (band + 1) * OH / j->bands, rows = oh1 - oh0;
        if (rows <= 0) continue;
        const float *xg = j->x + (n * s->C + gi * Cg) * s->H * s->W;
        const int64_t ybase = (n * s->M + gi * Mg) * plane, rin = rows + (KH - 1) * s->dh;
        /* the band's input rows inside the image: [r0, r1) of its rin */
        const int64_t ihb = oh0 - s->ph, r0 = min64(rin, max64(0, -ihb)), r1 = max64(r0, min64(rin, s->H - ihb));
        for (int64_t c = 0; c < Cg; c++) {
            float *d = xin + c * cf;
            const float *xc = xg + c * s->H * s->W;
            if (j->runs) { /* the rows as they lie in x: one run a channel */
                memset(d, 0, sizeof(float) * (size_t)(r0 * wp));
                memcpy(d + r0 * wp, xc + (ihb + r0) * s->W, sizeof(float) * (size_t)((r1 - r0) * wp));
                memset(d + r1 * wp, 0, sizeof(float) * (size_t)(cf - r1 * wp));
                continue;
            }
            /* a row's W columns only, at pw (its pads stay zero): whole vectors, the last one ending
             * at the row's end (dc_copy_row's masked vectors over the pads, a row at a time, were a
             * tenth of 1x7 16->16 on 17x17) */
            for (int64_t r = 0; r < rin; r++) {
                float *dr = d + r * wp + s->pw;
                if (r < r0 || r >= r1) {
                    memset(dr, 0, sizeof(float) * (size_t)s->W);
                } else if (s->W < KN_VL) {
                    memcpy(dr, xc + (ihb + r) * s->W, sizeof(float) * (size_t)s->W);
                } else {
                    const float *xr = xc + (ihb + r) * s->W;
                    for (int64_t i = 0; i < s->W - KN_VL; i += KN_VL) kn_vf_storeu(dr + i, kn_vf_loadu(xr + i));
                    kn_vf_storeu(dr + s->W - KN_VL, kn_vf_loadu(xr + s->W - KN_VL));
                }
            }
            memset(d + rin * wp, 0, sizeof(float) * (size_t)(cf - rin * wp));
        }
        const float *bg = j->bias ? j->bias + gi * Mg : NULL;
        const float *wg = j->wp + gi * Mg * Cg * KH * s->KW;
        const int64_t npos = rows * wp, nvec = (npos + KN_VL - 1) / KN_VL;
        /* rows as wide as the output's (KW = 1): the band is a run of y's plane, so the tiles
         * store into y, all but one reaching past the band's end (into the buffer, then copied) */
        const bool direct = wp == OW;
        float *yb = j->y + ybase + oh0 * OW, *db = direct ? yb : ob;
        const int64_t ld = direct ? plane : of;
        /* tiles of nvmax vectors while 2 nvmax or more are left; the last two split evenly */
        const int64_t nfull = nvec >= 2 * nvmax ? (nvec - nvmax) / nvmax : 0;
        if (nfull) dc_ftiles_any(mb, xin, toff, j->taps, Mg, 0, nfull, wg, bg, db, ld, nvmax);
        for (int64_t q0 = nfull * nvmax; q0 < nvec;) {
            const int64_t left = nvec - q0;
            const int nv = (int)(left <= nvmax ? left : (left + 1) / 2);
            if (direct && (q0 + nv) * KN_VL > npos) {
                dc_ftiles_any(mb, xin + q0 * KN_VL, toff, j->taps, Mg, 0, 1, wg, bg, ob, of, nv);
                for (int64_t m = 0; m < Mg; m++)
                    memcpy(yb + m * plane + q0 * KN_VL, ob + m * of, sizeof(float) * (size_t)(npos - q0 * KN_VL));
            } else {
                dc_ftiles_any(mb, xin + q0 * KN_VL, toff, j->taps, Mg, 0, 1, wg, bg, db + q0 * KN_VL, ld, nv);
            }
            q0 += nv;
        }
        for (int64_t m = 0; m < Mg && !direct; m++)
            for (int64_t r = 0; r < rows; r++)
                memcpy(yb + m * plane + r * OW, ob + m * of + r * wp, sizeof(float) * (size_t)OW);
        if (j->epi) j->epi(j->epi_ctx, j->y, ybase + oh0 * OW, Mg, rows * OW, plane);
    }
    free(own);
}

/* Stride 1, whole groups per pass, a band of at least 2 rows within the buffer. */
static bool dc_flat_fits(const kn_dconv_shape *s) {
    if (s->sh != 1 || s->sw != 1 || s->KH > 64 || dc_shallow_wide(s)) return false;
    const int64_t Cg = s->C / s->G, Mg = s->M / s->G, wp = dc_flat_wp(s);
    return (Cg + Mg) * wp * 2 + Cg * (s->KH - 1) * s->dh * wp <= 48 * 1024;
}

/* Whether the row kernel (dc_range) suits a shape that is not depthwise. */
static bool dc_rows_suit(const kn_dconv_shape *s) {
    const int64_t Cg = s->C / s->G, Mg = s->M / s->G, owr = (s->OW + KN_VL - 1) / KN_VL * KN_VL;
    /* rows that would leave most lanes idle: other kernels (a tiny plane costs little either way) */
    if (owr > 2 * s->OW && s->OH * s->OW >= 256) return false;
    /* shallow windows on many output channels and large planes, in passes (dc_shallow_wide) */
    if (dc_shallow_wide(s) && s->OW >= 3 * KN_VL) return true;
    /* few output channels a group, or a shallow im2col (Cg KH KW: a stem, a one-channel input),
     * where the GEMM's packing outweighed its reuse; not on rows of fewer than 3 vectors there
     * (3x1 48->48 on 36x16: 1.27x the GEMM's time) */
    return Mg <= 8 || (Mg <= 64 && Cg * s->KH * s->KW <= 256 && s->OW >= 3 * KN_VL);
}

/* The flat bands on rows of at most 4 vectors: in place of the row kernel where its rows end in a
 * narrower tile than its widest (rows of 1, 2 or 4 vectors with 4 channels a block) or it computes
 * more lanes a row than the flat band's Wp; in place of the GEMM with the row kernel's depths.
 * 2-core AVX2 EPYC, 1 thread, best p50 of 3-5 alternating rounds, flat / row kernel: 1x3 24->24
 * 74x32 0.80, 3x1 24->24 74x32 0.69, 1x3 48->48 32x32 0.80, 3x1 48->48 40x16 0.71, 3x3 8->8 20x20
 * 0.93, 5x5 8->16 32x32 1.01, 1x3 48->48 32x24 (rows of 3 whole tiles: left to the row kernel)
 * 1.14; flat / GEMM: 1x7 16->16 17x17 0.78, 7x1 32->32 17x17 0.74, 3x1 24->24 40x16 0.87, 1x3
 * 48->48 34x16 0.93, 3x1 48->48 36x16 0.86, 1x3 24->48 36x16 1.02. KILN_DC_FLAT=0/1: never /
 * wherever the direct kernel's depths allow (measurements). */
static bool dc_flat_wanted(const kn_dconv_shape *s) {
    if (!dc_flat_fits(s)) return false;
    const int64_t Cg = s->C / s->G, Mg = s->M / s->G, kk = s->KH * s->KW;
    const char *e = getenv("KILN_DC_FLAT");
    if (e) return e[0] == '1' && (Mg <= 8 || (Mg <= 64 && Cg * kk <= 256));
    if (s->OW > 4 * KN_VL) return false;
    if (dc_rows_suit(s)) {
        /* windows under 16 taps deep (a one-channel 3x3 stem) stay: the buffer's copy costs more
         * than the narrower tiles (1->24 3x3 76x34: 1.01-1.03) */
        if (Cg * kk < 16) return false;
        const int64_t nvmax = dc_nv_of(dc_mb_of(Mg));
        const int64_t nvec = (s->OW + KN_VL - 1) / KN_VL;
        return nvec % nvmax != 0 || dc_flat_wp(s) < nvec * KN_VL;
    }
    /* against the GEMM: the row kernel's depths, at most an eighth of the band's columns dropped
     * past 32 output channels (1x3 48->48 34x16, 2 of 18: 0.93; 72->72 30x8, 2 of 10: 1.21) */
    const int64_t wp = dc_flat_wp(s);
    return Mg <= 64 && Cg * kk <= 256 && (Mg <= 32 || 8 * (wp - s->OW) <= wp);
}

bool kn_dconv_suits(const kn_dconv_shape *s) {
    if (s->G < 1 || s->C % s->G || s->M % s->G || s->N < 1 || s->OW < 1 || s->OH < 1) return false;
    if (s->KH < 1 || s->KW < 1 || s->KW > DC_MAX_KW || s->sw < 1 || s->sh < 1 || s->dh < 1 || s->dw < 1) return false;
    /* strides 5-8 on one row (1-D: wav2vec's k10 s5 1 -> 512 front end; other 2-D shapes not measured) */
    if (s->sw > (s->H == 1 && s->KH == 1 ? 8 : 4)) return false;
    if (s->KH * s->KW < 2) return false;
    if (s->W >= ((int64_t)1 << 30) || s->H >= ((int64_t)1 << 30)) return false;
    const dc_geom g = dc_geom_of(s);
    if (g.span > 64 || g.ring > DC_RING_MAX) return false;
    const char *e = getenv("KILN_DCONV");
    if (e) return e[0] == '1';
    const int64_t Cg = s->C / s->G, Mg = s->M / s->G;
    /* depthwise: wide rows (narrower ones fill vectors of channels better: conv.c's dw16) */
    if (Cg == 1 && Mg <= 4) return s->OW > 128;
    return dc_flat_wanted(s) || dc_rows_suit(s);
}

/* One output row (a 1-D convolution): the row kernel's bands are chunks of its columns, enough for
 * about 4 tasks a thread and, with copies (dc_copies_pay), of at most DC_CHUNK outputs (the ring then
 * holds a chunk's copies, not the row's: 10 copies of a 16000-long stride-5 row were 128 KB), each a
 * multiple of the widest tile. Without copies no more chunks than the threads need (each copies its
 * window's overlap again: depthwise 8ch k129 s2 in 4 chunks at 1 thread 1.04x the whole row's time).
 * Returns the chunk's width (OW: no chunks). */
#define DC_CHUNK 512
static int64_t dc_chunk_of(const kn_dconv_shape *s, int64_t nvmax, int64_t threads, bool copies) {
    if (s->OH != 1) return s->OW;
    const int64_t unit = nvmax * KN_VL, groups = s->N * s->G;
    const int64_t want = max64(copies ? (s->OW + DC_CHUNK - 1) / DC_CHUNK : 1, (4 * threads + groups - 1) / groups);
    const int64_t cw = max64(2 * unit, ((s->OW + want - 1) / want + unit - 1) / unit * unit);
    return cw < s->OW ? cw : s->OW;
}

kiln_status kn_dconv_run(kn_kernel_ctx *c, const kn_dconv_shape *s, const float *x, const float *w, const float *bias,
                         float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_const) {
    int failed = 0;
    dc_job j;
    memset(&j, 0, sizeof j);
    j.s = s, j.g = dc_geom_of(s), j.x = x, j.bias = bias, j.y = y, j.epi = epi, j.epi_ctx = epi_ctx;
    j.Cg = s->C / s->G, j.Mg = s->M / s->G, j.mb = dc_mb_of(j.Mg), j.failed = &failed;
    j.flat = dc_flat_wanted(s);
#if DC_MB8
    /* the row kernel only (the flat bands' tiles are 1, 2 or 4 channels) */
    const char *e8 = getenv("KILN_DC_MB8"); /* KILN_DC_MB8=0: blocks of at most 4 (measurements) */
    if (!j.flat && j.Mg % 8 == 0 && j.Cg * s->KH * s->KW >= DC_MB8_MIN_TAPS && !(e8 && e8[0] == '0')) j.mb = 8;
#endif
    j.mblk = dc_mblk_of(s, j.Mg, j.mb);
    const int64_t threads = kn_threadpool_size(c->pool), groups = s->N * s->G;
    j.cw = j.flat ? s->OW : dc_chunk_of(s, dc_nv_of(j.mb), threads, j.g.copies);
    if (j.cw < s->OW) { /* the ring's rows are a chunk's */
        kn_dconv_shape sc = *s;
        sc.OW = j.cw;
        j.g = dc_geom_of(&sc);
    }
    if (j.g.copies) dc_copies_of(s, j.cp_p, j.cp_r, j.koff, j.g.wp, j.g.wpc);
    else
        for (int64_t kw = 0; kw < s->KW; kw++) j.koff[kw] = (kw * s->dw) % s->sw * j.g.wp + (kw * s->dw) / s->sw;
    const int64_t kk = s->KH * s->KW;
    const size_t wbytes = sizeof(float) * (size_t)(s->M * j.Cg * kk);
    dc_wctx wc = {w, s->M, j.Cg, kk, j.mb};
    kn_const_layout lay = {90, {s->M, j.Cg, kk, j.mb}};
    const float *wp = w_const ? kn_cpu_const_derived(c, 1, &lay, wbytes, dc_make_weights, &wc) : NULL;
    float *own = NULL;
    if (!wp) {
        if (!(own = kn_aligned_alloc(64, (wbytes + 63) / 64 * 64)))
            return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        dc_make_weights(&wc, own);
        wp = own;
    }
    j.wp = wp;
    /* tasks are (image, group, band of output rows or of a row's columns): about 4 per thread */
    j.bands = j.cw < s->OW ? (s->OW + j.cw - 1) / j.cw : max64(1, min64(s->OH, (4 * threads + groups - 1) / groups));
    if (j.flat) {
        j.bands = max64(j.bands, (s->OH + dc_flat_rows(s) - 1) / dc_flat_rows(s));
        const int64_t wpf = dc_flat_wp(s), cf = dc_flat_chan(s, (s->OH + j.bands - 1) / j.bands);
        j.taps = j.Cg * kk;
        j.runs = dc_flat_runs(s);
        if (!(j.toff = malloc(sizeof(int64_t) * (size_t)j.taps))) {
            free(own);
            return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
        for (int64_t ci = 0, t = 0; ci < j.Cg; ci++)
            for (int64_t kh = 0; kh < s->KH; kh++)
                for (int64_t kw = 0; kw < s->KW; kw++, t++) j.toff[t] = ci * cf + kh * s->dh * wpf + kw * s->dw;
    }
    const int64_t work = j.Mg * j.Cg * kk * s->OH * s->OW / j.bands + 1;
    kn_parallel_for(c->pool, groups * j.bands, work > 65536 ? 1 : 65536 / work + 1, j.flat ? dc_flat_range : dc_range, &j);
    free(j.toff);
    free(own);
    return failed ? kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory") : KILN_OK;
}

/* ---- depthwise: one input channel per output channel (kn_dwconv_*) ----
 * Per task (image, channel, band of output rows) the band's input rows are copied once into a
 * zero-bordered scratch (dc_copy_row: the pads, and the phases at sw > 1; rows above and below the
 * image as zeros), a group of output rows ahead of the tiles that read them, so every tap is a
 * plain load at a constant offset with no mask and no bounds test. A tile is R output rows x NV vectors of
 * KN_VL outputs (at most 12 accumulators: independent FMA chains), per tap one broadcast weight
 * and R NV FMAs reading the scratch; the bias starts the accumulators, and a fused node's
 * epilogue runs on finished rows while they are in cache (applied as each tile was stored, a
 * HardSwish cost more than that: 3x3 16ch 60x1000 0.76 against 0.56 ms without it). The taps run
 * in the order of conv.c's channels-in-lanes kernel (kh, then kw, from the bias), so the sums are
 * the same bits. */
#define DW_SCRATCH_FLOATS (32 * 1024) /* a band's copied rows (128 KB: L2) */
#define DW_ACC 12

typedef struct dw_job {
    const kn_dconv_shape *s;
    const float *x, *w, *bias;
    float *y;
    kn_conv_epilogue_fn epi; /* on finished rows, or NULL */
    const void *epi_ctx;
    int64_t wp, rowf, bands;
    int64_t koff[DC_MAX_KW];
    int *failed;
} dw_job;

/* R output rows x NV vectors from the copied rows at base (output row r's window starts rs floats
 * further per row), weights wc [KH][KW]; y at yo, rows OW apart; the last vector holds `last`
 * outputs (KN_VL: whole). */
static inline __attribute__((always_inline)) void dw_tile(const dw_job *j, const float *base, int64_t rs,
                                                          const float *wc, kn_vf b, int64_t yo, int last,
                                                          const int R, const int NV) {
    const kn_dconv_shape *s = j->s;
    const int64_t KH = s->KH, KW = s->KW, ks = s->dh * j->rowf, OW = s->OW;
    kn_vf acc[DW_ACC];
#pragma GCC unroll 12
    for (int i = 0; i < R * NV; i++) acc[i] = b;
    const float *rp = base;
    for (int64_t kh = 0; kh < KH; kh++, rp += ks, wc += KW)
        for (int64_t kw = 0; kw < KW; kw++) {
            const kn_vf wv = kn_vf_set1(wc[kw]);
            const float *p = rp + j->koff[kw];
#pragma GCC unroll 12
            for (int r = 0; r < R; r++)
#pragma GCC unroll 4
                for (int q = 0; q < NV; q++)
                    acc[r * NV + q] = kn_vf_fmadd(kn_vf_loadu(p + r * rs + KN_VL * q), wv, acc[r * NV + q]);
        }
#pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
        float *yr = j->y + yo + r * OW;
#pragma GCC unroll 4
        for (int q = 0; q < NV - 1; q++) kn_vf_storeu(yr + KN_VL * q, acc[r * NV + q]);
        const kn_vf v = acc[r * NV + NV - 1];
        if (last == KN_VL) {
            kn_vf_storeu(yr + KN_VL * (NV - 1), v);
        } else { /* the row's end (a masked store is slow on Zen 3) */
            float tmp[KN_VL] __attribute__((aligned(64)));
            kn_vf_store(tmp, v);
            memcpy(yr + KN_VL * (NV - 1), tmp, sizeof(float) * (size_t)last);
        }
    }
}

/* A row of tiles: R output rows at yo (column 0), the copied rows at base. Tiles of 4 vectors,
 * the last two of a row split evenly (3 + 3, not 4 + 2: two chains too few). */
static inline __attribute__((always_inline)) void dw_rowtiles(const dw_job *j, const float *base, int64_t rs,
                                                              const float *wc, kn_vf b, int64_t yo, const int R,
                                                              const int NVMAX) {
    const int64_t OW = j->s->OW, nvec = (OW + KN_VL - 1) / KN_VL;
    const int lastn = (int)(OW - (nvec - 1) * KN_VL);
    for (int64_t q0 = 0; q0 < nvec;) {
        const int64_t left = nvec - q0;
        const int nv = (int)(left <= NVMAX ? left : left < 2 * NVMAX ? (left + 1) / 2 : NVMAX);
        const int last = q0 + nv == nvec ? lastn : KN_VL;
        const float *bp = base + q0 * KN_VL;
        const int64_t o = yo + q0 * KN_VL;
        switch (nv) {
        case 1: dw_tile(j, bp, rs, wc, b, o, last, R, 1); break;
        case 2: if (NVMAX >= 2) dw_tile(j, bp, rs, wc, b, o, last, R, NVMAX >= 2 ? 2 : 1); break;
        case 3: if (NVMAX >= 3) dw_tile(j, bp, rs, wc, b, o, last, R, NVMAX >= 3 ? 3 : 1); break;
        default: if (NVMAX >= 4) dw_tile(j, bp, rs, wc, b, o, last, R, NVMAX >= 4 ? 4 : 1); break;
        }
        q0 += nv;
    }
}

/* rows: 1 .. rmax(nvmax) output rows */
static void dw_rows(const dw_job *j, const float *base, int64_t rs, const float *wc, kn_vf b, int64_t yo, int rows,
                    int nvmax) {
#define DW_R(R, NV)                                                                                          \
    case R: dw_rowtiles(j, base, rs, wc, b, yo, R, NV); break;
    if (nvmax >= 4) {
        switch (rows) { DW_R(1, 4) DW_R(2, 4) default: dw_rowtiles(j, base, rs, wc, b, yo, 3, 4); break; }
    } else if (nvmax == 3) {
        switch (rows) { DW_R(1, 3) DW_R(2, 3) DW_R(3, 3) default: dw_rowtiles(j, base, rs, wc, b, yo, 4, 3); break; }
    } else if (nvmax == 2) {
        switch (rows) {
            DW_R(1, 2) DW_R(2, 2) DW_R(3, 2) DW_R(4, 2) DW_R(5, 2)
            default: dw_rowtiles(j, base, rs, wc, b, yo, 6, 2); break;
        }
    } else {
        switch (rows) {
            DW_R(1, 1) DW_R(2, 1) DW_R(3, 1) DW_R(4, 1) DW_R(5, 1) DW_R(6, 1) DW_R(7, 1)
            default: dw_rowtiles(j, base, rs, wc, b, yo, 8, 1); break;
        }
    }
#undef DW_R
}

static void dw_range(void *arg, int64_t begin, int64_t end) {
    const dw_job *j = arg;
    const kn_dconv_shape *s = j->s;
    const int64_t OH = s->OH, OW = s->OW, plane = OH * OW, rowf = j->rowf, sh = s->sh;
    const int64_t nvec = (OW + KN_VL - 1) / KN_VL;
    const int nvmax = (int)min64(nvec, 4), rmax = DW_ACC / nvmax > 8 ? 8 : DW_ACC / nvmax;
    const int64_t band_rows = (OH + j->bands - 1) / j->bands;
    const int64_t srows = (band_rows - 1) * sh + (s->KH - 1) * s->dh + 1;
    const size_t need = (size_t)(srows * rowf + rowf + KN_VL);
    float *own = NULL, *buf = kn_conv_thread_buffer(need);
    if (!buf && !(buf = own = kn_aligned_alloc(64, sizeof(float) * need))) {
        __atomic_store_n(j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *tmp = buf + srows * rowf;
    const int64_t epi_rows = max64(1, DC_EPI_FLOATS / OW);
    for (int64_t t = begin; t < end; t++) {
        const int64_t nc = t / j->bands, band = t % j->bands, c = nc % s->C;
        const int64_t oh0 = band * band_rows, oh1 = min64(OH, oh0 + band_rows);
        if (oh0 >= oh1) continue;
        const float *xc = j->x + nc * s->H * s->W, *wc = j->w + c * s->KH * s->KW;
        const kn_vf b = j->bias ? kn_vf_set1(j->bias[c]) : kn_vf_zero();
        const int64_t ih0 = oh0 * sh - s->ph; /* scratch row 0 */
        int64_t copied = 0, epi_from = oh0;
        for (int64_t oh = oh0; oh < oh1;) {
            const int rows = (int)min64(rmax, oh1 - oh);
            /* the rows this group and the next read: a group's rows are copied a group ahead, so
             * that its loads do not meet the copy's stores still in flight */
            const int64_t need_rows =
                min64(srows, (min64(oh1, oh + 2 * rows) - 1 - oh0) * sh + (s->KH - 1) * s->dh + 1);
            for (; copied < need_rows; copied++) {
                const int64_t ih = ih0 + copied;
                float *dst = buf + copied * rowf;
                if (ih < 0 || ih >= s->H) memset(dst, 0, sizeof(float) * (size_t)rowf);
                else dc_copy_row(xc + ih * s->W, s->W, s->pw, s->sw, j->wp, dst, tmp);
            }
            dw_rows(j, buf + (oh - oh0) * sh * rowf, sh * rowf, wc, b, nc * plane + oh * OW, rows, nvmax);
            oh += rows;
            if (j->epi && (oh == oh1 || oh - epi_from >= epi_rows)) {
                j->epi(j->epi_ctx, j->y, nc * plane + epi_from * OW, 1, (oh - epi_from) * OW, plane);
                epi_from = oh;
            }
        }
    }
    free(own);
}

bool kn_dwconv_suits(const kn_dconv_shape *s) {
    if (s->G < 1 || s->C != s->G || s->M != s->G || s->N < 1 || s->OW < 1 || s->OH < 1) return false;
    if (s->KH < 1 || s->KW < 1 || s->KW > DC_MAX_KW || s->KH * s->KW < 2 || s->sw < 1 || s->sw > 4 || s->sh < 1 ||
        s->dh < 1 || s->dw < 1 || s->ph < 0 || s->pw < 0)
        return false;
    if (s->W >= ((int64_t)1 << 30) || s->H >= ((int64_t)1 << 30)) return false;
    const dc_geom g = dc_geom_of(s);
    /* one output row's window must fit the scratch */
    if (((s->KH - 1) * s->dh + 1) * g.rowf > DW_SCRATCH_FLOATS) return false;
    const char *e = getenv("KILN_DWCONV");
    if (e) return e[0] == '1';
    /* conv.c asks where its channels-in-lanes kernel does not suit (rows over 512 wide) or has
     * lanes to spare (under KN_VL channels). Stride 1 only: at stride 2 the copy's split into
     * phases cost more than the tiles gained (3x3 s2 64ch 56x56: 1.7x dw16's time); rows of 4
     * vectors or more (a 20-wide row: 1.2x its time). 2-core AVX2 EPYC, 1 thread, against the
     * paths before: 3x3 16ch 60x1000 0.94, 4ch 100x300 0.75, 4ch 112x112 0.52, 4ch 56x56 0.62. */
    return s->sw == 1 && s->sh == 1 && s->OW >= 4 * KN_VL;
}

kiln_status kn_dwconv_run(kn_kernel_ctx *c, const kn_dconv_shape *s, const float *x, const float *w, const float *bias,
                          float *y, kn_conv_epilogue_fn epi, const void *epi_ctx) {
    int failed = 0;
    dw_job j;
    memset(&j, 0, sizeof j);
    const dc_geom g = dc_geom_of(s);
    j.s = s, j.x = x, j.w = w, j.bias = bias, j.y = y, j.failed = &failed;
    j.wp = g.wp, j.rowf = g.rowf;
    for (int64_t kw = 0; kw < s->KW; kw++) j.koff[kw] = (kw * s->dw) % s->sw * g.wp + (kw * s->dw) / s->sw;
    j.epi = epi, j.epi_ctx = epi_ctx;
    /* bands: a band's rows fit the scratch; about 4 tasks per thread */
    const int64_t win = (s->KH - 1) * s->dh + 1;
    const int64_t fit = max64(1, ((DW_SCRATCH_FLOATS / g.rowf) - win) / s->sh + 1);
    int64_t bands = (s->OH + fit - 1) / fit;
    const int64_t threads = kn_threadpool_size(c->pool), planes = s->N * s->C;
    if (planes * bands < 4 * threads) bands = min64(s->OH, (4 * threads + planes - 1) / planes);
    j.bands = max64(1, bands);
    const int64_t work = s->KH * s->KW * s->OH * s->OW / j.bands + 1;
    kn_parallel_for(c->pool, planes * j.bands, work > 65536 ? 1 : 65536 / work + 1, dw_range, &j);
    return failed ? kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory") : KILN_OK;
}

#else /* no vector level: conv.c keeps its other paths */

bool kn_dconv_suits(const kn_dconv_shape *s) {
    (void)s;
    return false;
}

kiln_status kn_dconv_run(kn_kernel_ctx *c, const kn_dconv_shape *s, const float *x, const float *w, const float *bias,
                         float *y, kn_conv_epilogue_fn epi, const void *epi_ctx, bool w_const) {
    (void)s, (void)x, (void)w, (void)bias, (void)y, (void)epi, (void)epi_ctx, (void)w_const;
    return kn_kernel_error(c, KILN_ERR_INTERNAL, "the direct convolution is not built for this CPU level");
}

bool kn_dwconv_suits(const kn_dconv_shape *s) {
    (void)s;
    return false;
}

kiln_status kn_dwconv_run(kn_kernel_ctx *c, const kn_dconv_shape *s, const float *x, const float *w, const float *bias,
                          float *y, kn_conv_epilogue_fn epi, const void *epi_ctx) {
    (void)s, (void)x, (void)w, (void)bias, (void)y, (void)epi, (void)epi_ctx;
    return kn_kernel_error(c, KILN_ERR_INTERNAL, "the depthwise kernel is not built for this CPU level");
}

#endif

/* Pooling on the CPU: MaxPool (with Indices), AveragePool, LpPool, their Global forms and
 * MaxUnpool. Any number of spatial dims; planes (n, c) run in parallel.
 *
 * Window semantics follow the ONNX reference: a window covers start + k*dilation for k < kernel
 * with start = o*stride - pad_begin; only positions inside the input count for MaxPool and for
 * AveragePool without count_include_pad; with count_include_pad (and for LpPool) the positions
 * inside the explicit pads count too, but not the extra positions ceil_mode adds past the end
 * pad. float16/bfloat16 go through float; int8/uint8 only in MaxPool. */
#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/linalg_impl.h"
#include "ops/linalg_util.h"

#include "backend/cpu/isa_vec.h"
#include "backend/cpu/conv_amx_blocked.h"
#include "backend/cpu/pool_blocked.h"

#include <math.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

enum { POOL_MAX, POOL_AVG, POOL_LP };

typedef struct pool_job {
    const kn_window *w;
    int kind;
    bool include_pad;
    double p;          /* LpPool */
    int storage_order; /* MaxPool indices: 0 row-major, 1 column-major spatial */
    int64_t in_plane, out_plane, kernel_total;
    const void *x;
    void *y;
    int64_t *ind; /* MaxPool indices or NULL */
} pool_job;

/* Per spatial dim of output position o: window start, the valid kernel index range [lo, hi)
 * (inside the input) and the end of the range inside input + pads (hp). */
static void window_ranges(const kn_window *w, int64_t o, int64_t *st, int64_t *lo, int64_t *hi, int64_t *hp) {
    for (int i = w->nsp - 1; i >= 0; i--) {
        int64_t oi = o % w->out[i];
        o /= w->out[i];
        int64_t s = oi * w->stride[i] - w->pad_begin[i], d = w->dilation[i], k = w->kernel[i], in = w->in[i];
        st[i] = s;
        lo[i] = s >= 0 ? 0 : (-s + d - 1) / d;
        hi[i] = in - 1 - s < 0 ? 0 : min64(k, (in - 1 - s) / d + 1);
        int64_t lim = in + w->pad_end[i] - s; /* positions s + k*d < in + pad_end */
        hp[i] = lim <= 0 ? 0 : min64(k, (lim + d - 1) / d);
    }
}

#define DEF_POOL(NAME, T)                                                                          \
    static void NAME(void *arg, int64_t begin, int64_t end) {                                      \
        const pool_job *j = arg;                                                                   \
        const kn_window *w = j->w;                                                                 \
        const int nsp = w->nsp;                                                                    \
        for (int64_t pl = begin; pl < end; pl++) {                                                 \
            const T *x = (const T *)j->x + pl * j->in_plane;                                       \
            T *y = (T *)j->y + pl * j->out_plane;                                                  \
            for (int64_t o = 0; o < j->out_plane; o++) {                                           \
                int64_t st[KN_MAX_SPATIAL], lo[KN_MAX_SPATIAL], hi[KN_MAX_SPATIAL], hp[KN_MAX_SPATIAL]; \
                window_ranges(w, o, st, lo, hi, hp);                                               \
                int64_t valid = 1, padded = 1;                                                     \
                for (int i = 0; i < nsp; i++) {                                                    \
                    valid *= hi[i] > lo[i] ? hi[i] - lo[i] : 0;                                    \
                    padded *= hp[i];                                                               \
                }                                                                                  \
                double acc = 0;                                                                    \
                T best = 0;                                                                        \
                int64_t best_idx = -1;                                                             \
                if (valid > 0) {                                                                   \
                    int64_t k[KN_MAX_SPATIAL];                                                     \
                    for (int i = 0; i < nsp; i++) k[i] = lo[i];                                    \
                    for (;;) {                                                                     \
                        int64_t idx = 0;                                                           \
                        for (int i = 0; i < nsp; i++) idx = idx * w->in[i] + st[i] + k[i] * w->dilation[i]; \
                        T v = x[idx];                                                              \
                        if (j->kind == POOL_MAX) {                                                 \
                            if (best_idx < 0 || v > best) {                                        \
                                best = v;                                                          \
                                best_idx = idx;                                                    \
                            }                                                                      \
                        } else if (j->kind == POOL_AVG) {                                          \
                            acc += (double)v;                                                      \
                        } else {                                                                   \
                            acc += pow(fabs((double)v), j->p);                                     \
                        }                                                                          \
                        int i = nsp - 1;                                                           \
                        while (i >= 0 && ++k[i] >= hi[i]) {                                        \
                            k[i] = lo[i];                                                          \
                            i--;                                                                   \
                        }                                                                          \
                        if (i < 0) break;                                                          \
                    }                                                                              \
                }                                                                                  \
                if (j->kind == POOL_MAX) {                                                         \
                    y[o] = best;                                                                   \
                    if (j->ind) {                                                                  \
                        int64_t r = 0;                                                             \
                        if (best_idx >= 0 && j->storage_order) {                                   \
                            /* column-major over the spatial dims: the first is fastest */         \
                            int64_t t = best_idx, mul = 1;                                         \
                            int64_t pos[KN_MAX_SPATIAL];                                           \
                            for (int i = nsp - 1; i >= 0; i--) {                                   \
                                pos[i] = t % w->in[i];                                             \
                                t /= w->in[i];                                                     \
                            }                                                                      \
                            for (int i = 0; i < nsp; i++) {                                        \
                                r += pos[i] * mul;                                                 \
                                mul *= w->in[i];                                                   \
                            }                                                                      \
                        } else if (best_idx >= 0) {                                                \
                            r = best_idx;                                                          \
                        }                                                                          \
                        j->ind[pl * j->out_plane + o] = pl * j->in_plane + r;                      \
                    }                                                                              \
                } else if (j->kind == POOL_AVG) {                                                  \
                    int64_t cnt = j->include_pad ? padded : valid;                                 \
                    y[o] = (T)(cnt > 0 ? acc / (double)cnt : 0.0);                                 \
                } else {                                                                           \
                    double scaled = padded > 0 ? acc * (double)j->kernel_total / (double)padded : 0.0; \
                    y[o] = (T)pow(scaled, 1.0 / j->p);                                             \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

DEF_POOL(pool_f32, float)
DEF_POOL(pool_f64, double)
DEF_POOL(pool_i8, int8_t)
DEF_POOL(pool_u8, uint8_t)

/* ------------------------------------------------------------------ separable 1-D/2-D pools
 *
 * MaxPool (without Indices) and AveragePool over one or two spatial dims, every window holding at
 * least one input position: the window is a product of a row window and a column window, so the
 * pool runs as two 1-D passes: along each input row (into one row of OW values per input row),
 * then down the columns of that. Each pass is a max (or sum) of whole shifted rows, which the
 * compiler vectorises (AVX-512 or AVX2): (KH + KW) / 16 vector operations per output instead of
 * KH * KW scalar ones with index arithmetic per element (MaxPool 13x13 stride 1 on 13x13 planes,
 * the SPP blocks of detectors, ran 60x slower than ONNX Runtime through the general loop).
 * Positions outside the input read as the lowest value (max) or zero (sum); the average divides
 * by the product of the per-dim counts (positions inside the input, or inside input and explicit
 * pads with count_include_pad), which is the general loop's count. */

typedef struct sep_job {
    int kind; /* POOL_MAX or POOL_AVG */
    int64_t H, W, OH, OW, KH, KW, sh, sw, dh, dw, ph, pw;
    int64_t wext;               /* padded row: input positions -pw .. wext-pw-1 */
    int64_t in_plane, out_plane;
    const int64_t *rlo, *rhi;   /* per output row: the window rows [lo, hi) inside the input */
    const float *inv_h, *inv_w; /* AveragePool: 1 / count per output row and column */
    const void *x;
    void *y;
    int f16; /* sep_range_16: the planes are float16 (else bfloat16) */
    int failed;
} sep_job;

/* Valid kernel taps [lo, hi) of output o along one dim, and the count with the explicit pads. */
static void dim_taps(int64_t o, int64_t stride, int64_t pad, int64_t d, int64_t k, int64_t in, int64_t pad_end,
                     int64_t *lo, int64_t *hi, int64_t *hp) {
    int64_t s = o * stride - pad;
    *lo = s >= 0 ? 0 : (-s + d - 1) / d;
    *hi = in - 1 - s < 0 ? 0 : min64(k, (in - 1 - s) / d + 1);
    int64_t lim = in + pad_end - s;
    *hp = lim <= 0 ? 0 : min64(k, (lim + d - 1) / d);
}

#define MAX_OP(a, b) ((a) > (b) ? (a) : (b))
#define SUM_OP(a, b) ((a) + (b))

/* One plane of type T, per output row: the column pass combines the window's input rows into the
 * padded row v (wext values, pads at PADV), then the row pass combines v's shifted copies into
 * the output row (for strides above 1 through the stride-1 row t, then every sw-th of it). */
#define DEF_SEP_PLANE(NAME, T, OP, PADV)                                                           \
    static void NAME(const sep_job *j, const T *x, T *y, T *v, T *t) {                             \
        const int64_t W = j->W, OW = j->OW, KW = j->KW, dw = j->dw, pw = j->pw, sw = j->sw;         \
        const int64_t full = (OW - 1) * sw + 1, ncol = min64(W, j->wext - pw);                     \
        T *vc = v + pw;                                                                            \
        for (int64_t i = 0; i < pw; i++) v[i] = PADV;                                              \
        for (int64_t i = pw + ncol; i < j->wext; i++) v[i] = PADV;                                 \
        for (int64_t oh = 0; oh < j->OH; oh++) {                                                   \
            const int64_t lo = j->rlo[oh], hi = j->rhi[oh], r0 = oh * j->sh - j->ph;              \
            const T *a = x + (r0 + lo * j->dh) * W;                                                \
            if (hi - lo == 1) {                                                                    \
                memcpy(vc, a, sizeof(T) * (size_t)ncol);                                           \
            } else {                                                                               \
                const T *b = a + j->dh * W;                                                        \
                for (int64_t i = 0; i < ncol; i++) vc[i] = OP(a[i], b[i]);                         \
                for (int64_t k = lo + 2; k < hi; k++) {                                            \
                    const T *c = x + (r0 + k * j->dh) * W;                                         \
                    for (int64_t i = 0; i < ncol; i++) vc[i] = OP(vc[i], c[i]);                    \
                }                                                                                  \
            }                                                                                      \
            T *yr = y + oh * OW, *d = sw == 1 ? yr : t;                                            \
            if (KW == 1) memcpy(d, v, sizeof(T) * (size_t)full);                                   \
            else                                                                                   \
                for (int64_t i = 0; i < full; i++) d[i] = OP(v[i], v[i + dw]);                     \
            for (int64_t k = 2; k < KW; k++) {                                                     \
                const T *src = v + k * dw;                                                         \
                for (int64_t i = 0; i < full; i++) d[i] = OP(d[i], src[i]);                        \
            }                                                                                      \
            if (sw != 1)                                                                           \
                for (int64_t o = 0; o < OW; o++) yr[o] = t[o * sw];                                \
            if (j->kind == POOL_AVG) {                                                             \
                const float ih = j->inv_h[oh];                                                     \
                for (int64_t o = 0; o < OW; o++) ((float *)yr)[o] *= ih * j->inv_w[o];             \
            }                                                                                      \
        }                                                                                          \
    }

#if !KN_VL
DEF_SEP_PLANE(sep_max_f32, float, MAX_OP, -INFINITY)
DEF_SEP_PLANE(sep_sum_f32, float, SUM_OP, 0.0f)
#endif
DEF_SEP_PLANE(sep_max_i8, int8_t, MAX_OP, INT8_MIN)
DEF_SEP_PLANE(sep_max_u8, uint8_t, MAX_OP, 0)

#if KN_VL
/* float with AVX-512 or AVX2 (isa_vec.h): KN_VL outputs a vector, masked tails (planes of 13 or 20
 * columns are one or two vectors per row); the column pass keeps its vector in a register across
 * the window's rows; stride 2 along the row deinterleaves two loads, other strides gather. v has
 * slack after wext (read only by lanes whose outputs are masked off). */
/* The plane's body takes the window's shape (KH, KW, the row stride sw, the dilations) as
 * arguments and is inlined into calls with constants for the common shapes (3x3 stride 1 and 2,
 * 2x2 stride 2, 5x5 stride 1, no dilation): with the trip counts known the tap loops unroll and
 * the stride branches go; whole vectors and a row's masked tail are separate loops (AveragePool
 * 3x3 stride 1 on 56x56 planes ran at a third of the speed of that form in the general loop, with
 * its mask per vector: measured outside kiln). Other shapes take the general call. AVG: the plane
 * is an AveragePool's sum (scaled by the counts' inverses). */
#define DEF_SEP_PLANEV(NAME, VOP, PADV, AVG)                                                       \
    /* one vector of the column pass: taps rows rstep apart */                                     \
    static inline __attribute__((always_inline)) void NAME##_colv(const float *a, float *vc, int64_t rstep, \
                                                                  int64_t taps, kn_vmask m) {              \
        kn_vf acc = kn_vf_maskz_loadu(m, a);                                                       \
        for (int64_t k = 1; k < taps; k++) acc = VOP(acc, kn_vf_maskz_loadu(m, a + k * rstep));    \
        SEP_STORE_PADDED(vc, m, acc, PADV);                                                        \
    }                                                                                              \
    /* the column pass of one output row: ncol values into vc */                                   \
    static inline __attribute__((always_inline)) void NAME##_col(const float *a, float *vc, int64_t ncol, \
                                                                 int64_t rstep, int64_t taps) {           \
        int64_t i = 0;                                                                             \
        for (; i + KN_VL <= ncol; i += KN_VL) NAME##_colv(a + i, vc + i, rstep, taps, KN_VALL);    \
        if (i < ncol) NAME##_colv(a + i, vc + i, rstep, taps, kn_v_tail(ncol - i));                \
    }                                                                                              \
    /* one output vector of the row pass (lanes m), from the padded row v */                       \
    static inline __attribute__((always_inline)) kn_vf NAME##_rowv(const float *v, int64_t o, int64_t KW, \
                                                                   int64_t sw, int64_t dw, kn_vmask m,  \
                                                                   kn_vi even, kn_vi lane) {            \
        kn_vf acc;                                                                                 \
        if (sw == 1) {                                                                             \
            acc = kn_vf_loadu(v + o);                                                              \
            for (int64_t k = 1; k < KW; k++) acc = VOP(acc, kn_vf_loadu(v + o + k * dw));         \
        } else if (sw == 2) {                                                                      \
            const float *p = v + 2 * o;                                                            \
            SEP_ROW_S2(acc, p, VOP);                                                               \
        } else {                                                                                   \
            const kn_vi idx = kn_vi_mullo(kn_vi_add(lane, kn_vi_set1((int)o)), kn_vi_set1((int)sw)); \
            acc = kn_vf_mask_gather(m, idx, v);                                                    \
            for (int64_t k = 1; k < KW; k++) acc = VOP(acc, kn_vf_mask_gather(m, idx, v + k * dw)); \
        }                                                                                          \
        (void)even, (void)lane, (void)m;                                                           \
        return acc;                                                                                \
    }                                                                                              \
    static inline __attribute__((always_inline)) void NAME##_body(const sep_job *j, const float *x, float *y, \
                                                                  float *vbuf, const int64_t KH, const int64_t KW, \
                                                                  const int64_t sw, const int64_t dh,         \
                                                                  const int64_t dw) {                         \
        const int64_t W = j->W, OW = j->OW, pw = j->pw;                                            \
        const int64_t ncol = min64(W, j->wext - pw), nv = j->wext + SEP_SLACK(sw);                 \
        /* (the rows' pads and slack hold PADV from the range's start: only [pw, pw + ncol) is      \
         * ever written) */                                                                        \
        const kn_vi even = kn_vi_iota(0, 2), lane = kn_vi_iota(0, 1);                              \
        for (int64_t oh0 = 0; oh0 < j->OH; oh0 += SEP_ROWS) {                                      \
            const int64_t oh1 = min64(j->OH, oh0 + SEP_ROWS);                                      \
            /* the column pass of SEP_ROWS output rows first: the row pass then reads what it      \
             * wrote long after the stores (read at once, the masked stores' data could not be      \
             * forwarded to the unaligned loads: 40% of the time in those loads, perf on SPPF) */    \
            for (int64_t oh = oh0; oh < oh1; oh++) {                                               \
                const int64_t lo = j->rlo[oh], hi = j->rhi[oh], r0 = oh * j->sh - j->ph;          \
                const float *a = x + (r0 + lo * dh) * W;                                           \
                float *vc = vbuf + (oh - oh0) * nv + pw;                                           \
                /* the whole window (KH taps: a constant in the common shapes) or its part inside */ \
                if (hi - lo == KH) NAME##_col(a, vc, ncol, dh * W, KH);                            \
                else NAME##_col(a, vc, ncol, dh * W, hi - lo);                                     \
            }                                                                                      \
            for (int64_t oh = oh0; oh < oh1; oh++) {                                               \
                const float *v = vbuf + (oh - oh0) * nv;                                           \
                float *yr = y + oh * OW;                                                           \
                const kn_vf ih = kn_vf_set1(AVG ? j->inv_h[oh] : 1.0f);                            \
                int64_t o = 0;                                                                     \
                for (; o + KN_VL <= OW; o += KN_VL) {                                              \
                    kn_vf acc = NAME##_rowv(v, o, KW, sw, dw, KN_VALL, even, lane);                \
                    if (AVG) acc = kn_vf_mul(acc, kn_vf_mul(ih, kn_vf_loadu(j->inv_w + o)));       \
                    kn_vf_storeu(yr + o, acc);                                                     \
                }                                                                                  \
                if (o < OW) {                                                                      \
                    const kn_vmask m = kn_v_tail(OW - o);                                          \
                    kn_vf acc = NAME##_rowv(v, o, KW, sw, dw, m, even, lane);                      \
                    if (AVG) acc = kn_vf_mul(acc, kn_vf_mul(ih, kn_vf_maskz_loadu(m, j->inv_w + o))); \
                    SEP_STORE_OUT(yr + o, m, OW - o, acc);                                         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void NAME(const sep_job *j, const float *x, float *y, float *vbuf, float *t) {          \
        (void)t;                                                                                   \
        const int64_t KH = j->KH, KW = j->KW, sw = j->sw, dh = j->dh, dw = j->dw;                  \
        if (dh == 1 && dw == 1 && KH == KW && (sw == 1 || sw == 2)) {                              \
            if (KW == 3 && sw == 1) return NAME##_body(j, x, y, vbuf, 3, 3, 1, 1, 1);              \
            if (KW == 3 && sw == 2) return NAME##_body(j, x, y, vbuf, 3, 3, 2, 1, 1);              \
            if (KW == 2 && sw == 2) return NAME##_body(j, x, y, vbuf, 2, 2, 2, 1, 1);              \
            if (KW == 5 && sw == 1) return NAME##_body(j, x, y, vbuf, 5, 5, 1, 1, 1);              \
        }                                                                                          \
        NAME##_body(j, x, y, vbuf, KH, KW, sw, dh, dw);                                            \
    }

#if KN_VL == 8
/* AVX2: vmaskmovps stores are microcoded on AMD's cores (a third of AveragePool 2x2 stride 2 on
 * 28x28 planes, perf). A row of the buffer takes the whole vector, its lanes past the row's end
 * set to the pad value they already held (the row's right pad and slack); an output row's tail
 * goes through a buffer. */
static inline void sep_store_padded(float *p, kn_vmask m, kn_vf v, float pad) {
    kn_vf_storeu(p, (m & 0xFFu) == 0xFFu ? v : kn_vf_blend(m, kn_vf_set1(pad), v));
}
#define SEP_STORE_PADDED(p, m, v, PADV) sep_store_padded((p), (m), (v), (PADV))
static inline void sep_store_out(float *p, kn_vmask m, int64_t left, kn_vf v) {
    if (left >= KN_VL) {
        kn_vf_storeu(p, v);
    } else {
        float b[KN_VL];
        kn_vf_storeu(b, v);
        memcpy(p, b, sizeof(float) * (size_t)left);
    }
    (void)m;
}
#define SEP_STORE_OUT(p, m, left, v) sep_store_out((p), (m), (left), (v))
#else
#define SEP_STORE_PADDED(p, m, v, PADV) kn_vf_mask_storeu((p), (m), (v))
#define SEP_STORE_OUT(p, m, left, v) kn_vf_mask_storeu((p), (m), (v))
#endif
#if KN_VL == 8
/* stride 2 along the row: every tap's even elements by one vshufps within the 128-bit halves
 * (lanes q0 q2 q8 q10 | q4 q6 q12 q14), the taps combined in that order, one vpermpd at the end
 * (the two-source permute is two vpermps and a blend a tap: AveragePool 2x2 s2) */
#define SEP_ROW_S2(acc, p, VOP)                                                                    \
    do {                                                                                           \
        kn_vf a8_ = _mm256_shuffle_ps(kn_vf_loadu(p), kn_vf_loadu((p) + 8), 0x88);                \
        for (int64_t k = 1; k < KW; k++) {                                                         \
            const float *q_ = (p) + k * dw;                                                        \
            a8_ = VOP(a8_, _mm256_shuffle_ps(kn_vf_loadu(q_), kn_vf_loadu(q_ + 8), 0x88));         \
        }                                                                                          \
        (acc) = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(a8_), 0xD8));              \
        (void)even;                                                                                \
    } while (0)
#else
#define SEP_ROW_S2(acc, p, VOP)                                                                    \
    do {                                                                                           \
        (acc) = kn_vf_perm2(kn_vf_loadu(p), even, kn_vf_loadu((p) + KN_VL));                      \
        for (int64_t k = 1; k < KW; k++) {                                                         \
            const float *q_ = (p) + k * dw;                                                        \
            (acc) = VOP((acc), kn_vf_perm2(kn_vf_loadu(q_), even, kn_vf_loadu(q_ + KN_VL)));      \
        }                                                                                          \
    } while (0)
#endif
#define SEP_SLACK(sw) (KN_VL * (sw) + 64)
#define SEP_ROWS 16 /* output rows whose column pass runs before their row pass */
DEF_SEP_PLANEV(sepv_max_f32, kn_vf_max, -INFINITY, 0)
DEF_SEP_PLANEV(sepv_sum_f32, kn_vf_add, 0.0f, 1)
#define SEP_MAX_F32 sepv_max_f32
#define SEP_SUM_F32 sepv_sum_f32
#else
#define SEP_MAX_F32 sep_max_f32
#define SEP_SUM_F32 sep_sum_f32
#define SEP_SLACK(sw) 16
#define SEP_ROWS 1
#endif

/* 64-byte aligned: the int8 MaxPool's inner loops ran 1.15-1.2x slower when only the function's
 * address moved (by 0x7b0, to 48 mod 64: the same instructions) */
#define DEF_SEP_RANGE(NAME, T, PLANE, PADV)                                                        \
    __attribute__((aligned(64))) static void NAME(void *arg, int64_t begin, int64_t end) {         \
        sep_job *j = arg;                                                                          \
        const int64_t full = (j->OW - 1) * j->sw + 1, nv = j->wext + SEP_SLACK(j->sw);             \
        T *buf = malloc(sizeof(T) * (size_t)(SEP_ROWS * nv + full));                               \
        if (!buf) {                                                                                \
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);                                     \
            return;                                                                                \
        }                                                                                          \
        for (int64_t i = 0; i < SEP_ROWS * nv; i++) buf[i] = PADV; /* the slack too: never uninitialised */ \
        for (int64_t pl = begin; pl < end; pl++)                                                   \
            PLANE(j, (const T *)j->x + pl * j->in_plane, (T *)j->y + pl * j->out_plane, buf, buf + SEP_ROWS * nv); \
        free(buf);                                                                                 \
    }

DEF_SEP_RANGE(sep_range_max_f32, float, SEP_MAX_F32, -INFINITY)

/* Pooling of 16-bit planes into 16-bit planes: MaxPool of bf16 (a value the graph keeps in bf16
 * between a convolution and its readers under precision=bf16, opt pass cpu_bf16_values), MaxPool
 * and AveragePool of float16. Each plane widened band by band into a buffer of the thread, pooled
 * as fp32, narrowed back: for bf16 max by dropping the low half (the max of bf16 values is one of
 * them: exact, NaN included), for float16 by the same conversions as the whole-tensor route (the
 * same results). Against widening the whole tensor first (run_pool's other 16-bit route, which
 * AveragePool of bf16 still takes): no tensor-sized buffers, the input read once, and the
 * conversions run on the threads, plane by plane: at 16 threads float16 MaxPool of 1x64x112x112
 * converted its 1.6 MB in and 0.4 MB out on one thread and ran no faster than at 1. */
static void sep_range_16(void *arg, int64_t begin, int64_t end) {
    sep_job *j = arg;
    const bool avg = j->kind == POOL_AVG;
    const int64_t full = (j->OW - 1) * j->sw + 1, nv = j->wext + SEP_SLACK(j->sw);
    /* a band's input rows: at most (SEP_ROWS - 1) * sh + (KH - 1) * dh + 1 */
    const int64_t band_rows = min64(j->H, (SEP_ROWS - 1) * j->sh + (j->KH - 1) * j->dh + 1);
    float *buf = malloc(sizeof(float) * (size_t)(SEP_ROWS * nv + full + band_rows * j->W + SEP_ROWS * j->OW));
    if (!buf) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t i = 0; i < SEP_ROWS * nv; i++) buf[i] = avg ? 0.0f : -INFINITY;
    float *xf = buf + SEP_ROWS * nv + full, *yf = xf + band_rows * j->W;
    for (int64_t pl = begin; pl < end; pl++) {
        const uint16_t *x = (const uint16_t *)j->x + pl * j->in_plane;
        uint16_t *y = (uint16_t *)j->y + pl * j->out_plane;
        /* by bands of SEP_ROWS output rows: the input rows [rs, re) a band reads widened into a
         * buffer of the thread that stays in L1 (the plane widened whole, 50 KB at 112x112, missed
         * it on every store) */
        for (int64_t oh0 = 0; oh0 < j->OH; oh0 += SEP_ROWS) {
            const int64_t oh1 = min64(j->OH, oh0 + SEP_ROWS);
            int64_t rs = j->H, re = 0;
            for (int64_t oh = oh0; oh < oh1; oh++) {
                const int64_t r0 = oh * j->sh - j->ph;
                rs = min64(rs, r0 + j->rlo[oh] * j->dh);
                re = r0 + (j->rhi[oh] - 1) * j->dh + 1 > re ? r0 + (j->rhi[oh] - 1) * j->dh + 1 : re;
            }
            if (j->f16) {
                kn_ew_f16_to_f32(x + rs * j->W, xf, (re - rs) * j->W);
            } else {
                for (int64_t i = 0; i < (re - rs) * j->W; i++) {
                    const uint32_t u = (uint32_t)x[rs * j->W + i] << 16;
                    memcpy(&xf[i], &u, 4);
                }
            }
            sep_job b = *j;
            b.OH = oh1 - oh0;
            b.rlo = j->rlo + oh0;
            b.rhi = j->rhi + oh0;
            b.inv_h = j->inv_h + oh0;
            b.ph = j->ph - oh0 * j->sh + rs; /* band row oh reads buffer row (oh0 + oh) * sh - ph + k * dh - rs */
            if (avg) SEP_SUM_F32(&b, xf, yf, buf, buf + SEP_ROWS * nv);
            else SEP_MAX_F32(&b, xf, yf, buf, buf + SEP_ROWS * nv);
            if (j->f16) {
                kn_ew_f32_to_f16(yf, y + oh0 * j->OW, (oh1 - oh0) * j->OW);
            } else {
                for (int64_t i = 0; i < (oh1 - oh0) * j->OW; i++) {
                    uint32_t u;
                    memcpy(&u, &yf[i], 4);
                    y[oh0 * j->OW + i] = (uint16_t)(u >> 16);
                }
            }
        }
    }
    free(buf);
}
DEF_SEP_RANGE(sep_range_sum_f32, float, SEP_SUM_F32, 0.0f)
DEF_SEP_RANGE(sep_range_max_i8, int8_t, sep_max_i8, INT8_MIN)
DEF_SEP_RANGE(sep_range_max_u8, uint8_t, sep_max_u8, 0)

/* Runs the separable path when it applies (1 or 2 spatial dims, MaxPool without Indices or
 * AveragePool, float/int8/uint8 for max, float for average, every window with an input position
 * in each dim); *done says whether it ran. x and y are float for float16/bfloat16 (converted), but
 * with planes16 (MaxPool of bfloat16, Max- and AveragePool of float16, 16-bit in and out) the
 * tensors' 16-bit data (sep_range_16). */
static kiln_status try_separable(kn_kernel_ctx *c, const kn_window *w, int kind, bool include_pad, kiln_dtype dt,
                                 bool planes16, const void *x, void *y, int64_t planes, bool *done) {
    *done = false;
    if (w->nsp > 2 || (kind != POOL_MAX && kind != POOL_AVG)) return KILN_OK;
    kn_range_fn fn = NULL;
    if (planes16 && ((dt == KILN_DTYPE_BFLOAT16 && kind == POOL_MAX) || dt == KILN_DTYPE_FLOAT16)) fn = sep_range_16;
    else if (planes16) return KILN_OK;
    else if (dt == KILN_DTYPE_FLOAT || dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16)
        fn = kind == POOL_MAX ? sep_range_max_f32 : sep_range_sum_f32;
    else if (kind == POOL_MAX && dt == KILN_DTYPE_INT8) fn = sep_range_max_i8;
    else if (kind == POOL_MAX && dt == KILN_DTYPE_UINT8) fn = sep_range_max_u8;
    if (!fn) return KILN_OK;
    sep_job j = {.kind = kind, .x = x, .y = y, .f16 = dt == KILN_DTYPE_FLOAT16};
    const int a = w->nsp - 1; /* the row dim */
    j.H = w->nsp == 2 ? w->in[0] : 1;
    j.OH = w->nsp == 2 ? w->out[0] : 1;
    j.KH = w->nsp == 2 ? w->kernel[0] : 1;
    j.sh = w->nsp == 2 ? w->stride[0] : 1;
    j.dh = w->nsp == 2 ? w->dilation[0] : 1;
    j.ph = w->nsp == 2 ? w->pad_begin[0] : 0;
    j.W = w->in[a], j.OW = w->out[a], j.KW = w->kernel[a], j.sw = w->stride[a], j.dw = w->dilation[a];
    j.pw = w->pad_begin[a];
    if (j.OH <= 0 || j.OW <= 0 || j.H <= 0 || j.W <= 0 || j.KH <= 0 || j.KW <= 0) return KILN_OK;
    j.wext = (j.OW - 1) * j.sw + (j.KW - 1) * j.dw + 1;
    j.in_plane = j.H * j.W;
    j.out_plane = j.OH * j.OW;
    /* every window must hold an input position along each dim (else the general loop's rules for
     * empty windows apply), and the padded row must cover the pads it starts with */
    if (j.pw >= j.wext) return KILN_OK;
    float *inv = malloc(sizeof(float) * (size_t)(j.OH + j.OW + 1) + sizeof(int64_t) * (size_t)(2 * j.OH));
    if (!inv) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    int64_t *rlo = (int64_t *)(inv + j.OH + j.OW + ((j.OH + j.OW) & 1)), *rhi = rlo + j.OH;
    bool ok = true;
    for (int64_t o = 0; o < j.OH && ok; o++) {
        int64_t hp;
        dim_taps(o, j.sh, j.ph, j.dh, j.KH, j.H, w->nsp == 2 ? w->pad_end[0] : 0, &rlo[o], &rhi[o], &hp);
        ok = rhi[o] > rlo[o];
        inv[o] = 1.0f / (float)(include_pad ? hp : rhi[o] - rlo[o]);
    }
    for (int64_t o = 0; o < j.OW && ok; o++) {
        int64_t lo, hi, hp;
        dim_taps(o, j.sw, j.pw, j.dw, j.KW, j.W, w->pad_end[a], &lo, &hi, &hp);
        ok = hi > lo;
        inv[j.OH + o] = 1.0f / (float)(include_pad ? hp : hi - lo);
    }
    if (ok) {
        j.inv_h = inv;
        j.inv_w = inv + j.OH;
        j.rlo = rlo;
        j.rhi = rhi;
        const int64_t work = j.out_plane * (j.KH + j.KW) + j.in_plane;
        kn_parallel_for(c->pool, planes, work > 16384 ? 1 : 16384 / (work + 1) + 1, fn, &j);
        *done = true;
    }
    free(inv);
    return j.failed ? kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory") : KILN_OK;
}

static double lp_p(const kn_node *n) {
    const kn_attr *a = kn_node_attr(n, "p");
    if (!a) return 2.0;
    return a->type == KN_ATTR_FLOAT ? a->f : (double)a->i;
}

/* What run_pool prepares from the node and the input's shape (kn_ctx_prep). */
typedef struct pool_key {
    int32_t kind, rank;
    int64_t dims[KILN_MAX_RANK]; /* only rank of them are compared */
} pool_key;
typedef struct pool_prepared {
    kn_window w;
    double p;
    bool include_pad;
    int storage_order;
} pool_prepared;
static const char pool_tag = 0;

static kiln_status run_pool(kn_kernel_ctx *c, int kind) {
    const kn_tensor *X = c->in[0];
    kn_tensor *Y = c->out[0];
    kn_tensor *I = kind == POOL_MAX && c->n_outputs > 1 ? c->out[1] : NULL;
    if (X->rank < 3) return kn_kernel_error(c, KILN_ERR_SHAPE, "X must have rank >= 3");
    /* the window and attributes, kept for the node's later calls with this input shape
     * (kn_ctx_prep: a node whose shapes the run's memo knows) */
    pool_key key = {kind, X->rank, {0}};
    memcpy(key.dims, X->dims, sizeof(int64_t) * (size_t)X->rank);
    const size_t key_bytes = offsetof(pool_key, dims) + sizeof(int64_t) * (size_t)X->rank;
    const pool_prepared *kept = kn_ctx_prep_get(c, &pool_tag, &key, key_bytes);
    pool_prepared pp;
    if (kept) {
        pp = *kept;
    } else {
        char why[512];
        kiln_status st = kn_window_plan(c->node, KN_WINDOW_POOL, X->rank - 2, X->dims + 2, NULL, &pp.w, why, sizeof why);
        if (st) return kn_kernel_error(c, st, "%s", why);
        pp.p = lp_p(c->node);
        pp.include_pad = kind == POOL_LP || (kind == POOL_AVG && kn_attr_int(c->node, "count_include_pad", 0) != 0);
        pp.storage_order = (int)kn_attr_int(c->node, "storage_order", 0);
        kn_ctx_prep_put(c, &pool_tag, &key, key_bytes, &pp, sizeof pp);
    }
    kn_window w = pp.w;
    /* a bf16 MaxPool whose readers take its output channel-blocked (opt pass cpu_bf16_values) */
    if (kind == POOL_MAX && kn_node_attr(c->node, "y_blocked")) {
        if (I || X->rank != 4 || X->dtype != KILN_DTYPE_BFLOAT16 || Y->dtype != KILN_DTYPE_BFLOAT16 ||
            X->dims[1] % KN_BLOCKED_CHANNELS || !kn_max_pool_blocked_takes(&w))
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL,
                                   "a channel-blocked MaxPool output needs a bfloat16 4-D input with channels in "
                                   "blocks of %d, no Indices, and an input position in every window",
                                   KN_BLOCKED_CHANNELS);
        if (!kn_max_pool_blocked(c->pool, &w, X->data, Y->data, X->dims[0], X->dims[1]))
            return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        return KILN_OK;
    }
    pool_job j = {.w = &w, .kind = kind, .p = pp.p, .in_plane = 1, .out_plane = 1, .kernel_total = 1};
    j.include_pad = pp.include_pad;
    j.storage_order = pp.storage_order;
    for (int i = 0; i < w.nsp; i++) {
        j.in_plane *= w.in[i];
        j.out_plane *= w.out[i];
        j.kernel_total *= w.kernel[i];
    }
    int64_t planes = X->dims[0] * X->dims[1];
    if (kn_tensor_count(Y) != planes * j.out_plane)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "output size does not match the computed geometry");
    j.ind = I ? I->data : NULL;
    kn_range_fn fn = NULL;
    bool ox = false;
    float *tmp = NULL;
    switch (X->dtype) {
    case KILN_DTYPE_FLOAT: fn = pool_f32; break;
    case KILN_DTYPE_DOUBLE: fn = pool_f64; break;
    case KILN_DTYPE_INT8: fn = kind == POOL_MAX ? pool_i8 : NULL; break;
    case KILN_DTYPE_UINT8: fn = kind == POOL_MAX ? pool_u8 : NULL; break;
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: fn = pool_f32; break;
    default: break;
    }
    if (!fn) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s", kiln_dtype_name(X->dtype));
    j.x = X->data;
    j.y = Y->data;
    /* bf16 MaxPool without Indices, float16 Max- and AveragePool without Indices: plane by plane,
     * no widened copies (sep_range_16), where the separable path takes the window */
    if (!I && X->dtype == Y->dtype &&
        ((kind == POOL_MAX && X->dtype == KILN_DTYPE_BFLOAT16) || ((kind == POOL_MAX || kind == POOL_AVG) && X->dtype == KILN_DTYPE_FLOAT16))) {
        bool done = false;
        KN_TRY(try_separable(c, &w, kind, j.include_pad, X->dtype, true, X->data, Y->data, planes, &done));
        if (done) return KILN_OK;
    }
    if (X->dtype == KILN_DTYPE_FLOAT16 || X->dtype == KILN_DTYPE_BFLOAT16) {
        if (X->dtype == KILN_DTYPE_FLOAT16) { /* vcvtph2ps (kn_linalg_f32_in converts one by one) */
            float *xf = malloc(sizeof(float) * (size_t)(kn_tensor_count(X) + 1));
            if (xf) kn_ew_f16_to_f32(X->data, xf, kn_tensor_count(X));
            j.x = xf;
            ox = xf != NULL;
        } else {
            j.x = kn_linalg_f32_in(X, &ox);
        }
        tmp = malloc(sizeof(float) * (size_t)(planes * j.out_plane + 1));
        j.y = tmp;
        if (!j.x || !tmp) {
            if (ox) free((void *)j.x);
            free(tmp);
            return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    bool done = false;
    kiln_status sst = KILN_OK;
    if (!I) sst = try_separable(c, &w, kind, j.include_pad, X->dtype, false, j.x, j.y, planes, &done);
    if (!done && !sst) {
        int64_t work = j.out_plane * j.kernel_total;
        kn_parallel_for(c->pool, planes, work > 8192 ? 1 : 8192 / (work + 1) + 1, fn, &j);
    }
    if (tmp && !sst) {
        if (Y->dtype == KILN_DTYPE_FLOAT16) kn_ew_f32_to_f16(tmp, Y->data, planes * j.out_plane);
        else kn_linalg_f32_out(tmp, Y, planes * j.out_plane);
    }
    if (ox) free((void *)j.x);
    free(tmp);
    return sst;
}

kiln_status kn_cpu_max_pool(kn_kernel_ctx *c) { return run_pool(c, POOL_MAX); }
kiln_status kn_cpu_average_pool(kn_kernel_ctx *c) { return run_pool(c, POOL_AVG); }
kiln_status kn_cpu_lp_pool(kn_kernel_ctx *c) { return run_pool(c, POOL_LP); }

/* ------------------------------------------------------------------ global pools */

typedef struct gpool_job {
    int kind;
    double p;
    int64_t plane;
    const float *xf;
    float *yf;
    const double *xd;
    double *yd;
} gpool_job;

/* Sum of a float plane in double, in 8 independent lanes so the compiler vectorises it (a single
 * running sum waits on the previous add for every element). With AVX-512 or AVX2 explicitly: 2
 * vectors of floats a step into four accumulators of KN_VL / 2 doubles and a masked tail (the
 * compiler's loop used 8 floats a step, half-width vectors, and a scalar tail: most of a 7x7 plane). */
#if KN_VL
static double plane_sum_f32(const float *x, int64_t n) {
    kn_vd a0 = kn_vd_zero(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 2 * KN_VL <= n; i += 2 * KN_VL) {
        const kn_vf v0 = kn_vf_loadu(x + i), v1 = kn_vf_loadu(x + i + KN_VL);
        a0 = kn_vd_add(a0, kn_vd_of_lo(v0));
        a1 = kn_vd_add(a1, kn_vd_of_hi(v0));
        a2 = kn_vd_add(a2, kn_vd_of_lo(v1));
        a3 = kn_vd_add(a3, kn_vd_of_hi(v1));
    }
    for (; i < n; i += KN_VL) {
        const kn_vf v = kn_vf_maskz_loadu(kn_v_tail(n - i), x + i);
        a0 = kn_vd_add(a0, kn_vd_of_lo(v));
        a1 = kn_vd_add(a1, kn_vd_of_hi(v));
    }
    return kn_vd_reduce_add(kn_vd_add(kn_vd_add(a0, a1), kn_vd_add(a2, a3)));
}
#else
static double plane_sum_f32(const float *x, int64_t n) {
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += (double)x[i + k];
    double s = 0;
    for (int k = 0; k < 8; k++) s += acc[k];
    for (; i < n; i++) s += (double)x[i];
    return s;
}
#endif

static void gpool_range(void *arg, int64_t begin, int64_t end) {
    const gpool_job *j = arg;
    if (j->xf && j->kind == POOL_AVG) {
        for (int64_t pl = begin; pl < end; pl++) {
            double r = j->plane ? plane_sum_f32(j->xf + pl * j->plane, j->plane) / (double)j->plane : 0.0;
            if (j->yf) j->yf[pl] = (float)r;
            else j->yd[pl] = r;
        }
        return;
    }
#if KN_VL
    if (j->xf && j->kind == POOL_MAX && j->plane > 0) {
        /* 4 x KN_VL running maxima, a masked tail, one reduction (the loop below left the tail and
         * the reduction scalar: 1.2x ONNX Runtime on 512 planes of 14x14). A NaN past the first
         * element is skipped, as there (vmaxps gives its second operand for a NaN); all lanes
         * start at the first element */
        for (int64_t pl = begin; pl < end; pl++) {
            const float *x = j->xf + pl * j->plane;
            const int64_t n = j->plane;
            kn_vf a0 = kn_vf_set1(x[0]), a1 = a0, a2 = a0, a3 = a0;
            int64_t i = 0;
            for (; i + 4 * KN_VL <= n; i += 4 * KN_VL) {
                a0 = kn_vf_max(kn_vf_loadu(x + i), a0);
                a1 = kn_vf_max(kn_vf_loadu(x + i + KN_VL), a1);
                a2 = kn_vf_max(kn_vf_loadu(x + i + 2 * KN_VL), a2);
                a3 = kn_vf_max(kn_vf_loadu(x + i + 3 * KN_VL), a3);
            }
            for (; i < n; i += KN_VL) {
                const kn_vmask m = kn_v_tail(n - i);
                a0 = kn_vf_blend(m, a0, kn_vf_max(kn_vf_maskz_loadu(m, x + i), a0));
            }
            const float r = kn_vf_reduce_max(kn_vf_max(kn_vf_max(a0, a1), kn_vf_max(a2, a3)));
            if (j->yf) j->yf[pl] = r;
            else j->yd[pl] = r;
        }
        return;
    }
#endif
    if (j->xf && j->kind == POOL_MAX && j->plane > 0) {
        /* 16 independent maxima (vectorised), then one */
        for (int64_t pl = begin; pl < end; pl++) {
            const float *x = j->xf + pl * j->plane;
            float m[16];
            for (int l = 0; l < 16; l++) m[l] = x[0];
            int64_t i = 0;
            for (; i + 16 <= j->plane; i += 16)
                for (int l = 0; l < 16; l++) m[l] = x[i + l] > m[l] ? x[i + l] : m[l];
            for (; i < j->plane; i++) m[0] = x[i] > m[0] ? x[i] : m[0];
            float r = m[0];
            for (int l = 1; l < 16; l++) r = m[l] > r ? m[l] : r;
            if (j->yf) j->yf[pl] = r;
            else j->yd[pl] = r;
        }
        return;
    }
    for (int64_t pl = begin; pl < end; pl++) {
        double acc = j->kind == POOL_MAX ? -INFINITY : 0.0;
        for (int64_t i = 0; i < j->plane; i++) {
            double v = j->xf ? (double)j->xf[pl * j->plane + i] : j->xd[pl * j->plane + i];
            if (j->kind == POOL_MAX) acc = v > acc || i == 0 ? v : acc;
            else if (j->kind == POOL_AVG) acc += v;
            else acc += pow(fabs(v), j->p);
        }
        double r = j->kind == POOL_MAX ? acc
                   : j->kind == POOL_AVG ? (j->plane ? acc / (double)j->plane : 0.0)
                                         : pow(acc, 1.0 / j->p);
        if (j->yf) j->yf[pl] = (float)r;
        else j->yd[pl] = r;
    }
}

kiln_status kn_cpu_gpool_prepare(const kn_node *n, void *params) {
    ((kn_cpu_gpool_prm *)params)->p = lp_p(n);
    return KILN_OK;
}

static kiln_status run_global(kn_kernel_ctx *c, int kind) {
    const kn_tensor *X = c->in[0];
    kn_tensor *Y = c->out[0];
    if (X->rank < 2) return kn_kernel_error(c, KILN_ERR_SHAPE, "X must have rank >= 2");
    int64_t planes = X->dims[0] * X->dims[1];
    KN_CTX_PRM(c, kn_cpu_gpool_prepare, kn_cpu_gpool_prm, prm);
    gpool_job j = {.kind = kind, .p = prm->p, .plane = planes ? kn_tensor_count(X) / planes : 0};
    bool ox = false;
    float *tmp = NULL;
    if (X->dtype == KILN_DTYPE_DOUBLE) {
        j.xd = X->data;
        j.yd = Y->data;
    } else {
        j.xf = kn_linalg_f32_in(X, &ox);
        j.yf = X->dtype == KILN_DTYPE_FLOAT ? Y->data : (tmp = malloc(sizeof(float) * (size_t)(planes + 1)));
        if (!j.xf || !j.yf) {
            if (ox) free((void *)j.xf);
            free(tmp);
            return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    kn_parallel_for(c->pool, planes, j.plane > 4096 ? 1 : 4096 / (j.plane + 1) + 1, gpool_range, &j);
    if (tmp) kn_linalg_f32_out(tmp, Y, planes);
    if (ox) free((void *)j.xf);
    free(tmp);
    return KILN_OK;
}

kiln_status kn_cpu_global_average_pool(kn_kernel_ctx *c) { return run_global(c, POOL_AVG); }
kiln_status kn_cpu_global_max_pool(kn_kernel_ctx *c) { return run_global(c, POOL_MAX); }
kiln_status kn_cpu_global_lp_pool(kn_kernel_ctx *c) { return run_global(c, POOL_LP); }

/* ------------------------------------------------------------------ MaxUnpool */

typedef struct unpool_key {
    int rank;
    int64_t dims[KILN_MAX_RANK];
} unpool_key;
static const char unpool_tag = 0;

kiln_status kn_cpu_max_unpool(kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0], *I = c->in[1];
    kn_tensor *Y = c->out[0];
    if (I->dtype != KILN_DTYPE_INT64 || kn_tensor_count(I) != kn_tensor_count(X) || X->rank < 3 ||
        Y->rank != X->rank)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "indices must be int64 with the shape of X");
    /* the window, kept for the node's later calls with this input shape (kn_ctx_prep) */
    unpool_key key = {X->rank, {0}};
    memcpy(key.dims, X->dims, sizeof(int64_t) * (size_t)X->rank);
    const size_t key_bytes = offsetof(unpool_key, dims) + sizeof(int64_t) * (size_t)X->rank;
    const kn_window *kept = kn_ctx_prep_get(c, &unpool_tag, &key, key_bytes);
    kn_window w;
    if (kept) {
        w = *kept;
    } else {
        char why[512];
        kiln_status st = kn_window_plan(c->node, KN_WINDOW_POOL, X->rank - 2, X->dims + 2, NULL, &w, why, sizeof why);
        if (st) return kn_kernel_error(c, st, "%s", why);
        kn_ctx_prep_put(c, &unpool_tag, &key, key_bytes, &w, sizeof w);
    }
    /* the indices address the tensor MaxPool read: [N, C, (x-1)*stride - pads + kernel]; when
     * output_shape differs, that tensor sits at the origin of the output */
    int64_t inf[KILN_MAX_RANK];
    inf[0] = X->dims[0];
    inf[1] = X->dims[1];
    for (int i = 0; i < w.nsp; i++)
        inf[2 + i] = (X->dims[2 + i] - 1) * w.stride[i] - w.pad_begin[i] - w.pad_end[i] + w.kernel[i];
    int64_t n_inf = kn_shape_count(inf, X->rank);
    size_t es = kiln_dtype_size(X->dtype);
    int64_t ny = kn_tensor_count(Y), nx = kn_tensor_count(X);
    memset(Y->data, 0, (size_t)ny * es);
    const int64_t *idx = I->data;
    for (int64_t e = 0; e < nx; e++) {
        if (idx[e] < 0 || idx[e] >= n_inf)
            return kn_kernel_error(c, KILN_ERR_RUNTIME, "index %lld at position %lld is outside the unpooled tensor (%lld elements)",
                                   (long long)idx[e], (long long)e, (long long)n_inf);
        int64_t t = idx[e], off = 0, mul = 1;
        bool inside = true;
        for (int d = X->rank - 1; d >= 0; d--) {
            int64_t p = t % inf[d];
            t /= inf[d];
            inside &= p < Y->dims[d];
            off += p * mul;
            mul *= Y->dims[d];
        }
        if (inside) memcpy((char *)Y->data + (size_t)off * es, (const char *)X->data + (size_t)e * es, es);
    }
    return KILN_OK;
}

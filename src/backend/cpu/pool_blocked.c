/* MaxPool of a bf16 NCHW value into the channel-blocked layout (pool_blocked.h).
 *
 * A task is one output row of one 32-channel block: the max over the window's input rows, per
 * channel along the row (32 positions a vector, on order-preserving 16-bit keys of the bf16 bits),
 * then the 32 channel rows transposed into position rows of 32 channels (channel pairs interleaved,
 * then 16 x 16 transposes of the pairs), then the max over the window's columns, one position row
 * (one vector) per tap, each output position's 32 channels stored as one 64-byte row (the keys turned
 * back into their bits: exact). The readers' packing of the same NCHW input (a transpose per reader)
 * goes away.
 *
 * Compiled once, not per CPU level (pool.c at any level calls it): the AVX-512 code has its own
 * target and runs where the CPU has AVX512_BF16 (which implies F/BW/VL); elsewhere the same in
 * scalar code. */
#include "backend/cpu/pool_blocked.h"

#include "backend/cpu/conv_amx_blocked.h"
#include "backend/cpu/sgemm_bf16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define KN_POOL_BLOCKED_X86 1
#include <immintrin.h>

#include "backend/cpu/vec_math.h" /* kn_v16_transpose_regs, outside the target region */
#endif

#define BC KN_BLOCKED_CHANNELS

static bool scalar_only; /* kn_max_pool_blocked_scalar */
void kn_max_pool_blocked_scalar(bool on) { scalar_only = on; }

typedef struct pb_job {
    const uint16_t *x;
    uint16_t *y;
    int64_t H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw;
    int64_t Wv; /* a channel row's stride in the row-max buffer: W rounded up to 16 */
    int failed;
} pb_job;

static inline float bf16_f(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f_bf16(float f) { /* f is a bf16 value: its upper half */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

/* the valid input rows of output row oh: rows[0..*n) */
static int window_rows(const pb_job *j, int64_t oh, int64_t *rows) {
    int n = 0;
    for (int64_t k = 0; k < j->KH; k++) {
        const int64_t r = oh * j->sh - j->ph + k * j->dh;
        if (r >= 0 && r < j->H) rows[n++] = r;
    }
    return n;
}

/* one task in scalar code: max over the window's rows into vm[c * Wv + iw], then over its columns */
static void pb_row_scalar(const pb_job *j, const uint16_t *xb, uint16_t *yrow, const int64_t *rows, int nr,
                          float *vm) {
    for (int64_t c = 0; c < BC; c++) {
        const uint16_t *xc = xb + c * j->H * j->W;
        for (int64_t iw = 0; iw < j->W; iw++) {
            float m = -INFINITY; /* (a NaN is skipped, in any row) */
            for (int k = 0; k < nr; k++) {
                const float v = bf16_f(xc[rows[k] * j->W + iw]);
                m = v > m ? v : m;
            }
            vm[c * j->Wv + iw] = m;
        }
    }
    for (int64_t ow = 0; ow < j->OW; ow++)
        for (int64_t c = 0; c < BC; c++) {
            float m = -INFINITY;
            for (int64_t k = 0; k < j->KW; k++) {
                const int64_t iw = ow * j->sw - j->pw + k * j->dw;
                if (iw >= 0 && iw < j->W && vm[c * j->Wv + iw] > m) m = vm[c * j->Wv + iw];
            }
            yrow[ow * BC + c] = f_bf16(m);
        }
}

#if defined(KN_POOL_BLOCKED_X86)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl")
#endif

/* The max runs on 16-bit keys, 32 lanes a vector: key(x) = (x with its other bits flipped where its
 * sign is set) - 0x7F81, so that unsigned order is -inf < ... < -0 < +0 < ... < +inf for the bf16
 * bits x and both kinds of NaN come below -inf (a window's NaNs are skipped, as the definition's
 * `v > m` skips them; a window of NaNs only gives -inf, the column max starting there). */
#define KEY_NEG_INF 0x00FE /* key(0xFF80) */
static inline __m512i pb_key(__m512i x) {
    const __m512i flip = _mm512_srli_epi16(_mm512_srai_epi16(x, 15), 1);
    return _mm512_sub_epi16(_mm512_xor_si512(x, flip), _mm512_set1_epi16(0x7F81));
}
static inline __m512i pb_unkey(__m512i k) {
    const __m512i x = _mm512_add_epi16(k, _mm512_set1_epi16(0x7F81));
    return _mm512_xor_si512(x, _mm512_srli_epi16(_mm512_srai_epi16(x, 15), 1));
}

/* One task, 32 input positions at a time: vk (32 channel rows of 32 keys) the max over the window's
 * rows; channel rows 2k and 2k + 1 interleaved into pairs (unpacklo / unpackhi: positions 0-3, 8-11,
 * 16-19, 24-27 and 4-7, 12-15, ... of the 32), two 16 x 16 transposes of the 32-bit pairs give each
 * position's 32 channels in one vector (tr: W rounded to 32 position rows of 32 keys); then the max
 * over the window's columns per output position, one vector a tap. Half the transposes, loads and
 * maxima of widening to fp32 (16 lanes a vector) as this did before: ResNet-50's stem pool 0.160 ->
 * 0.123 ms (node_ab, 1 thread, bench/results/cpu-bf16-2026-12-06e-h77.md). */
static void pb_row_avx512(const pb_job *j, const uint16_t *xb, uint16_t *yrow, const int64_t *rows, int nr,
                          uint16_t *vk, uint16_t *tr) {
    const int64_t W = j->W, HW = j->H * W;
    for (int64_t iw0 = 0; iw0 < W; iw0 += 32) {
        const __mmask32 m = W - iw0 >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (W - iw0)) - 1);
        for (int64_t c = 0; c < BC; c++) {
            const uint16_t *xc = xb + c * HW + iw0;
            __m512i v = pb_key(_mm512_maskz_loadu_epi16(m, xc + rows[0] * W));
            for (int k = 1; k < nr; k++) v = _mm512_max_epu16(pb_key(_mm512_maskz_loadu_epi16(m, xc + rows[k] * W)), v);
            _mm512_store_si512(vk + c * 32, v);
        }
        __m512 lo[16], hi[16], o[16];
        for (int k = 0; k < 16; k++) {
            const __m512i a = _mm512_load_si512(vk + 2 * k * 32), b = _mm512_load_si512(vk + (2 * k + 1) * 32);
            lo[k] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(a, b));
            hi[k] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(a, b));
        }
        /* o[q]: 32-bit lane q of lo[k] (hi[k]) is position 8 (q / 4) + q % 4 (+ 4) of the 32 */
        kn_v16_transpose_regs(lo, o);
        for (int q = 0; q < 16; q++) _mm512_store_ps(tr + (iw0 + q / 4 * 8 + q % 4) * BC, o[q]);
        kn_v16_transpose_regs(hi, o);
        for (int q = 0; q < 16; q++) _mm512_store_ps(tr + (iw0 + q / 4 * 8 + q % 4 + 4) * BC, o[q]);
    }
    for (int64_t ow = 0; ow < j->OW; ow++) {
        __m512i a = _mm512_set1_epi16(KEY_NEG_INF);
        for (int64_t k = 0; k < j->KW; k++) {
            const int64_t iw = ow * j->sw - j->pw + k * j->dw;
            if (iw >= 0 && iw < W) a = _mm512_max_epu16(_mm512_load_si512(tr + iw * BC), a);
        }
        _mm512_storeu_si512(yrow + ow * BC, pb_unkey(a));
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

static void pb_range(void *arg, int64_t begin, int64_t end) {
    pb_job *j = arg;
    /* 64-byte aligned: the row-max buffer (scalar code: 32 x Wv floats; vector code: 32 x 32 keys), the
     * transposed rows (vector code: Wv rounded to 32 rows of 32 keys), the rows */
    const size_t vm_n = (size_t)(BC * j->Wv), tr_n = (size_t)((j->Wv + 31) / 32 * 32 * BC) / 2;
    const size_t bytes = (sizeof(float) * (vm_n + tr_n) + sizeof(int64_t) * (size_t)j->KH + 63) / 64 * 64;
    float *buf = aligned_alloc(64, bytes);
    if (!buf) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *vm = buf, *tr = buf + vm_n;
    int64_t *rows = (int64_t *)(tr + tr_n);
#if defined(KN_POOL_BLOCKED_X86)
    const bool vec = !scalar_only && kn_bf16_cpu_supported();
#endif
    for (int64_t t = begin; t < end; t++) {
        const int64_t blk = t / j->OH, oh = t % j->OH; /* blk: n * C/32 + channel block */
        const int nr = window_rows(j, oh, rows);
        const uint16_t *xb = j->x + blk * BC * j->H * j->W;
        uint16_t *yrow = j->y + (blk * j->OH + oh) * j->OW * BC;
        if (nr == 0) continue; /* (kn_max_pool_blocked_takes: never) */
#if defined(KN_POOL_BLOCKED_X86)
        if (vec) {
            pb_row_avx512(j, xb, yrow, rows, nr, (uint16_t *)vm, (uint16_t *)tr);
            continue;
        }
#endif
        pb_row_scalar(j, xb, yrow, rows, nr, vm);
    }
    free(buf);
}

static bool dim_covered(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d) {
    for (int64_t o = 0; o < out; o++) {
        bool any = false;
        for (int64_t t = 0; t < k && !any; t++) {
            const int64_t i = o * s - p + t * d;
            any = i >= 0 && i < in;
        }
        if (!any) return false;
    }
    return true;
}

bool kn_max_pool_blocked_takes(const kn_window *w) {
    if (w->nsp != 2) return false;
    for (int i = 0; i < 2; i++)
        if (w->in[i] <= 0 || w->out[i] <= 0 || w->kernel[i] <= 0 || w->stride[i] <= 0 || w->dilation[i] <= 0 ||
            !dim_covered(w->in[i], w->out[i], w->kernel[i], w->stride[i], w->pad_begin[i], w->dilation[i]))
            return false;
    return true;
}

bool kn_max_pool_blocked(kn_threadpool *pool, const kn_window *w, const uint16_t *x, uint16_t *y, int64_t N,
                         int64_t C) {
    pb_job j = {.x = x, .y = y, .H = w->in[0], .W = w->in[1], .OH = w->out[0], .OW = w->out[1]};
    j.KH = w->kernel[0], j.KW = w->kernel[1], j.sh = w->stride[0], j.sw = w->stride[1];
    j.ph = w->pad_begin[0], j.pw = w->pad_begin[1], j.dh = w->dilation[0], j.dw = w->dilation[1];
    j.Wv = (j.W + 15) / 16 * 16;
    const int64_t tasks = N * (C / BC) * j.OH, work = BC * (j.KH * j.W + j.OW * j.KW) + 1;
    kn_parallel_for(pool, tasks, work > 8192 ? 1 : 8192 / work + 1, pb_range, &j);
    return !j.failed;
}

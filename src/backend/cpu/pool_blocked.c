/* MaxPool of a bf16 NCHW value into the channel-blocked layout (pool_blocked.h).
 *
 * A task is one output row of one 32-channel block: the max over the window's input rows, per
 * channel along the row (16 positions a vector, as fp32), then the 32 channel rows transposed into
 * position rows of 32 channels (16 x 16 transposes), then the max over the window's columns, one
 * position row (two vectors) per tap, and each output position's 32 channels narrowed back to bf16
 * (the upper halves: exact) and stored as one 64-byte row. The readers' packing of the same NCHW
 * input (a transpose per reader) goes away.
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
            float m = bf16_f(xc[rows[0] * j->W + iw]);
            for (int k = 1; k < nr; k++) {
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

static inline __m512 bf16x16(const uint16_t *p, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

/* one task: vm (32 channel rows of Wv floats) the max over the window's rows; tr (W position rows of
 * 32 floats) its transpose; then the max over the window's columns per output position */
static void pb_row_avx512(const pb_job *j, const uint16_t *xb, uint16_t *yrow, const int64_t *rows, int nr,
                          float *vm, float *tr) {
    const int64_t W = j->W, HW = j->H * W;
    for (int64_t c = 0; c < BC; c++) {
        const uint16_t *xc = xb + c * HW;
        for (int64_t iw = 0; iw < W; iw += 16) {
            const __mmask16 m = (__mmask16)(W - iw >= 16 ? 0xFFFF : (1u << (W - iw)) - 1);
            __m512 v = bf16x16(xc + rows[0] * W + iw, m);
            for (int k = 1; k < nr; k++) v = _mm512_max_ps(bf16x16(xc + rows[k] * W + iw, m), v);
            _mm512_store_ps(vm + c * j->Wv + iw, v);
        }
    }
    for (int64_t iw = 0; iw < W; iw += 16)
        for (int c0 = 0; c0 < BC; c0 += 16) {
            __m512 in[16], o[16];
            for (int i = 0; i < 16; i++) in[i] = _mm512_load_ps(vm + (c0 + i) * j->Wv + iw);
            kn_v16_transpose_regs(in, o);
            const int64_t n = W - iw < 16 ? W - iw : 16;
            for (int64_t q = 0; q < n; q++) _mm512_store_ps(tr + (iw + q) * BC + c0, o[q]);
        }
    for (int64_t ow = 0; ow < j->OW; ow++) {
        __m512 a = _mm512_set1_ps(-INFINITY), b = a;
        for (int64_t k = 0; k < j->KW; k++) {
            const int64_t iw = ow * j->sw - j->pw + k * j->dw;
            if (iw < 0 || iw >= W) continue;
            a = _mm512_max_ps(_mm512_load_ps(tr + iw * BC), a);
            b = _mm512_max_ps(_mm512_load_ps(tr + iw * BC + 16), b);
        }
        const __m256i lo = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(a), 16));
        const __m256i hi = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(b), 16));
        _mm512_storeu_si512(yrow + ow * BC, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
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
    /* 64-byte aligned: the row-max buffer (32 x Wv floats), the transposed rows (W x 32), the rows */
    const size_t vm_n = (size_t)(BC * j->Wv), tr_n = (size_t)(j->Wv * BC);
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
            pb_row_avx512(j, xb, yrow, rows, nr, vm, tr);
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

// Kernels of the quantised com.microsoft operators: MatMulNBits (a direct product from the packed
// weights for few rows, a dequantisation for cuBLASLt, ONNX Runtime's int8 compute type for
// accuracy_level 4) and the QLinear operators.
//
// The CPU kernels (src/backend/cpu/qcontrib.c, qcontrib_linear.c) are the reference and agree with
// ONNX Runtime bit for bit on the quantised outputs. Every float operation that decides a
// quantised value is written here as the CPU performs it: the _rn intrinsics where the CPU does
// a separate multiply and add (nvcc would otherwise fuse them), fmaf where the CPU (MLAS) fuses,
// the same order of summation where float sums feed a rounding, rintf for round half to even.
#include "backend/cuda/cu_common.cuh"
#include "backend/cuda/cuda_qcontrib.h"

#include <float.h>

using namespace kncu;

namespace {

// Element i of a float-typed tensor as float.
__device__ __forceinline__ float ldf(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_DTYPE_FLOAT16: return __half2float(((const f16 *)p)[i]);
    case KILN_DTYPE_BFLOAT16: return __bfloat162float(((const bf16 *)p)[i]);
    case KILN_DTYPE_DOUBLE: return (float)((const double *)p)[i];
    default: return ((const float *)p)[i];
    }
}

__device__ __forceinline__ void stf(void *p, kiln_dtype t, int64_t i, float v) {
    if (t == KILN_DTYPE_FLOAT16) ((f16 *)p)[i] = __float2half_rn(v);
    else if (t == KILN_DTYPE_BFLOAT16) ((bf16 *)p)[i] = __float2bfloat16_rn(v);
    else ((float *)p)[i] = v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ------------------------------------------------------------------ MatMulNBits

__device__ __forceinline__ float nb_zero(const kn_cu_nbits &p, int64_t n, int64_t b) {
    if (!p.zp || (p.zp_dt == KILN_DTYPE_UINT8 && p.g_idx)) return (float)(1 << (p.bits - 1));
    if (p.zp_dt == KILN_DTYPE_UINT8) {
        int64_t zrow = (p.kb * p.bits + 7) / 8, zo = b * p.bits;
        return (float)((((const uint8_t *)p.zp)[n * zrow + zo / 8] >> (zo % 8)) & ((1 << p.bits) - 1));
    }
    return ldf(p.zp, p.zp_dt, n * p.kb + b);
}

__device__ __forceinline__ int64_t nb_group(const kn_cu_nbits &p, int64_t k) {
    int64_t g = p.g_idx[k];
    return g < 0 ? 0 : g >= p.kb ? p.kb - 1 : g;
}

template <typename T> __device__ __forceinline__ float lda(const T *a, int64_t i) { return ld(a[i]); }

// One warp per column n, MR rows of A per warp (blockIdx.y picks which): the row's packed words
// lane-strided (each word: 32 / bits codes of one block), the per-row sums reduced across the warp.
#define NB_MR 8
template <typename T>
__global__ void nbits_gemv_kernel(kn_cu_nbits p, const T *A, kiln_dtype y_dt, void *Y) {
    const int lane = threadIdx.x & 31;
    const int64_t n = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int64_t m0 = (int64_t)blockIdx.y * NB_MR;
    if (n >= p.N) return;
    const int mr = p.M - m0 < NB_MR ? (int)(p.M - m0) : NB_MR;
    const int bits = p.bits, epw = 32 / bits;
    const uint32_t mask = (1u << bits) - 1;
    const int64_t words = p.kb * p.bs * bits / 32;
    const uint32_t *row = (const uint32_t *)(p.B + n * p.kb * (p.bs * bits / 8));
    float acc[NB_MR];
#pragma unroll
    for (int r = 0; r < NB_MR; r++) acc[r] = 0.0f;
    for (int64_t w = lane; w < words; w += 32) {
        const int64_t k0 = w * epw;
        if (k0 >= p.K) break;
        const uint32_t word = row[w];
        const int cnt = p.K - k0 < epw ? (int)(p.K - k0) : epw;
        if (!p.g_idx) {
            const int64_t b = k0 / p.bs;
            const float z = nb_zero(p, n, b), sc = ldf(p.scales, p.s_dt, n * p.kb + b);
            float part[NB_MR];
#pragma unroll
            for (int r = 0; r < NB_MR; r++) part[r] = 0.0f;
            for (int i = 0; i < cnt; i++) {
                const float wv = (float)((word >> (i * bits)) & mask) - z;
#pragma unroll
                for (int r = 0; r < NB_MR; r++)
                    if (r < mr) part[r] = fmaf(lda(A, (m0 + r) * p.K + k0 + i), wv, part[r]);
            }
#pragma unroll
            for (int r = 0; r < NB_MR; r++) acc[r] = fmaf(part[r], sc, acc[r]);
        } else {
            for (int i = 0; i < cnt; i++) {
                const int64_t gb = nb_group(p, k0 + i);
                const float wv = ((float)((word >> (i * bits)) & mask) - nb_zero(p, n, gb)) *
                                 ldf(p.scales, p.s_dt, n * p.kb + gb);
#pragma unroll
                for (int r = 0; r < NB_MR; r++)
                    if (r < mr) acc[r] = fmaf(lda(A, (m0 + r) * p.K + k0 + i), wv, acc[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < NB_MR; r++) acc[r] = warp_sum(acc[r]);
    if (lane == 0) {
        const float bias = p.bias ? ldf(p.bias, p.b_dt, n) : 0.0f;
        for (int r = 0; r < mr; r++) stf(Y, y_dt, (m0 + r) * p.N + n, acc[r] + bias);
    }
}

// The same product without g_idx, specialised: BITS-wide codes, MR rows of A per warp, VW words per
// load (4: 16-byte loads, where every row of B starts 16-byte aligned). Per word: one block's scale
// and zero point, the word's codes unrolled.
template <typename T, int BITS, int MR, int VW>
__global__ void nbits_gemv_fast_kernel(kn_cu_nbits p, int bs_shift, const T *A, kiln_dtype y_dt, void *Y) {
    constexpr int EPW = 32 / BITS;
    constexpr uint32_t MASK = (1u << BITS) - 1;
    const int lane = threadIdx.x & 31;
    const int64_t n = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int64_t m0 = (int64_t)blockIdx.y * MR;
    if (n >= p.N) return;
    const int mr = p.M - m0 < MR ? (int)(p.M - m0) : MR;
    const int64_t K = p.K, words = p.kb * p.bs * BITS / 32;
    const uint32_t *row = (const uint32_t *)(p.B + n * p.kb * (p.bs * BITS / 8));
    const T *a0 = A + m0 * K;
    float acc[MR];
#pragma unroll
    for (int r = 0; r < MR; r++) acc[r] = 0.0f;
    for (int64_t w0 = (int64_t)lane * VW; w0 < words; w0 += 32 * VW) {
        if (w0 * EPW >= K) break;
        uint32_t wd[VW];
        if (VW == 4) {
            const uint4 v = *(const uint4 *)(row + w0);
            wd[0] = v.x, wd[VW > 1 ? 1 : 0] = v.y, wd[VW > 2 ? 2 : 0] = v.z, wd[VW > 3 ? 3 : 0] = v.w;
        } else {
            wd[0] = row[w0];
        }
#pragma unroll
        for (int j = 0; j < VW; j++) {
            const int64_t k0 = (w0 + j) * EPW;
            if (k0 >= K) break;
            const int64_t b = k0 >> bs_shift;
            const float z = nb_zero(p, n, b), sc = ldf(p.scales, p.s_dt, n * p.kb + b);
            float part[MR];
#pragma unroll
            for (int r = 0; r < MR; r++) part[r] = 0.0f;
            if (k0 + EPW <= K) {
#pragma unroll
                for (int i = 0; i < EPW; i++) {
                    const float wv = (float)((wd[j] >> (i * BITS)) & MASK) - z;
#pragma unroll
                    for (int r = 0; r < MR; r++)
                        if (r < mr) part[r] = fmaf(ld(a0[r * K + k0 + i]), wv, part[r]);
                }
            } else {
                for (int i = 0; i < (int)(K - k0); i++) {
                    const float wv = (float)((wd[j] >> (i * BITS)) & MASK) - z;
#pragma unroll
                    for (int r = 0; r < MR; r++)
                        if (r < mr) part[r] = fmaf(ld(a0[r * K + k0 + i]), wv, part[r]);
                }
            }
#pragma unroll
            for (int r = 0; r < MR; r++) acc[r] = fmaf(part[r], sc, acc[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < MR; r++) acc[r] = warp_sum(acc[r]);
    if (lane == 0) {
        const float bias = p.bias ? ldf(p.bias, p.b_dt, n) : 0.0f;
        for (int r = 0; r < mr; r++) stf(Y, y_dt, (m0 + r) * p.N + n, acc[r] + bias);
    }
}

// accuracy_level 4: integer products of A's int8 codes with the weights' codes less the (integer)
// zero point, per word exact in int32, scaled by A's block scale times the weights'.
__global__ void nbits_gemv_int8_kernel(kn_cu_nbits p, const int8_t *aq, const float *sa, kiln_dtype y_dt, void *Y) {
    const int lane = threadIdx.x & 31;
    const int64_t n = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int64_t m0 = (int64_t)blockIdx.y * NB_MR;
    if (n >= p.N) return;
    const int mr = p.M - m0 < NB_MR ? (int)(p.M - m0) : NB_MR;
    const int bits = p.bits, epw = 32 / bits;
    const uint32_t mask = (1u << bits) - 1;
    const int64_t words = p.kb * p.bs * bits / 32;
    const uint32_t *row = (const uint32_t *)(p.B + n * p.kb * (p.bs * bits / 8));
    float acc[NB_MR];
#pragma unroll
    for (int r = 0; r < NB_MR; r++) acc[r] = 0.0f;
    for (int64_t w = lane; w < words; w += 32) {
        const int64_t k0 = w * epw;
        if (k0 >= p.K) break;
        const uint32_t word = row[w];
        const int cnt = p.K - k0 < epw ? (int)(p.K - k0) : epw;
        const int64_t b = k0 / p.bs;
        const int z = (int)nb_zero(p, n, b);
        const float sc = ldf(p.scales, p.s_dt, n * p.kb + b);
        int part[NB_MR];
#pragma unroll
        for (int r = 0; r < NB_MR; r++) part[r] = 0;
        for (int i = 0; i < cnt; i++) {
            const int wv = (int)((word >> (i * bits)) & mask) - z;
#pragma unroll
            for (int r = 0; r < NB_MR; r++)
                if (r < mr) part[r] += (int)aq[(m0 + r) * p.K + k0 + i] * wv;
        }
#pragma unroll
        for (int r = 0; r < NB_MR; r++)
            if (r < mr) acc[r] += (float)part[r] * __fmul_rn(sa[(m0 + r) * p.kb + b], sc);
    }
#pragma unroll
    for (int r = 0; r < NB_MR; r++) acc[r] = warp_sum(acc[r]);
    if (lane == 0) {
        const float bias = p.bias ? ldf(p.bias, p.b_dt, n) : 0.0f;
        for (int r = 0; r < mr; r++) stf(Y, y_dt, (m0 + r) * p.N + n, acc[r] + bias);
    }
}

// One thread per packed word: its codes written as W[n, k] = (code - zero point) * scale.
template <typename W> __global__ void nbits_dequant_kernel(kn_cu_nbits p, W *out) {
    const int bits = p.bits, epw = 32 / bits;
    const uint32_t mask = (1u << bits) - 1;
    const int64_t wpr = p.kb * p.bs * bits / 32; // words per row
    KNCU_LOOP(t, p.N * wpr) {
        const int64_t n = t / wpr, k0 = (t % wpr) * epw;
        if (k0 >= p.K) continue;
        const uint32_t word = ((const uint32_t *)p.B)[t];
        const int cnt = p.K - k0 < epw ? (int)(p.K - k0) : epw;
        const int64_t b = k0 / p.bs;
        float z = 0.0f, sc = 0.0f;
        if (!p.g_idx) z = nb_zero(p, n, b), sc = ldf(p.scales, p.s_dt, n * p.kb + b);
        for (int i = 0; i < cnt; i++) {
            if (p.g_idx) {
                const int64_t gb = nb_group(p, k0 + i);
                z = nb_zero(p, n, gb);
                sc = ldf(p.scales, p.s_dt, n * p.kb + gb);
            }
            out[n * p.K + k0 + i] = st<W, float>(__fmul_rn((float)((word >> (i * bits)) & mask) - z, sc));
        }
    }
}

// One warp per (row m, block b) of A: max|a|, scale max / 127, codes round(a * (127 / max)).
template <typename T>
__global__ void nbits_quant_a_kernel(const T *A, int64_t M, int64_t K, int64_t bs, int64_t kb, int8_t *aq, float *sa) {
    const int lane = threadIdx.x & 31;
    const int64_t item = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (item >= M * kb) return;
    const int64_t m = item / kb, b = item % kb, k0 = b * bs, k1 = k0 + bs < K ? k0 + bs : K;
    float amax = 0.0f;
    for (int64_t k = k0 + lane; k < k1; k += 32) amax = fmaxf(amax, fabsf(ld(A[m * K + k])));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float inv = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    if (lane == 0) sa[m * kb + b] = __fdiv_rn(amax, 127.0f);
    for (int64_t k = k0 + lane; k < k1; k += 32) aq[m * K + k] = (int8_t)(int)rintf(__fmul_rn(ld(A[m * K + k]), inv));
}

// ------------------------------------------------------------------ QLinear helpers

__device__ __forceinline__ float q_scale(const kn_cu_qparam &q) { return ldf(q.scale, q.s_dt, 0); }
__device__ __forceinline__ int32_t q_zero(const kn_cu_qparam &q, bool sg) {
    if (!q.zp) return 0;
    return sg ? (int32_t)*(const int8_t *)q.zp : (int32_t)*(const uint8_t *)q.zp;
}
__device__ __forceinline__ int32_t q_at(const void *p, bool sg, int64_t i) {
    return sg ? (int32_t)((const int8_t *)p)[i] : (int32_t)((const uint8_t *)p)[i];
}
__device__ __forceinline__ void q_put(void *p, bool sg, int64_t i, int32_t q) {
    if (sg) ((int8_t *)p)[i] = (int8_t)q;
    else ((uint8_t *)p)[i] = (uint8_t)q;
}

// kn_qc_requant: clamp to the range less the zero point (NaN to the minimum), round half to even
__device__ __forceinline__ int32_t requant(float v, int32_t zp, bool sg) {
    const float lo = (float)((sg ? -128 : 0) - zp), hi = (float)((sg ? 127 : 255) - zp);
    v = v > lo ? v : lo;
    v = v < hi ? v : hi;
    return (int32_t)rintf(v) + zp;
}
__device__ __forceinline__ int32_t quantize(float v, float s, int32_t z, bool sg) { return requant(__fdiv_rn(v, s), z, sg); }

// x86's conversion of a float to int32: out of range (and NaN) gives INT32_MIN, as the CPU's cast
__device__ __forceinline__ int32_t cvt_x86(float r) {
    return r == r && r >= -2147483648.0f && r < 2147483648.0f ? (int32_t)r : INT32_MIN;
}

// MlasComputeLogistic's FMA3 rational approximation (kn_qc_mlas_logistic)
__device__ float mlas_logistic(float x) {
    float v = x < -18.0f ? -18.0f : x;
    v = v > 18.0f ? 18.0f : v;
    const float v2 = __fmul_rn(v, v);
    float p = fmaf(v2, 4.37031012579801e-11f, 1.15627324459942e-07f);
    p = fmaf(p, v2, 6.08574864600143e-05f);
    p = fmaf(p, v2, 8.51377133304701e-03f);
    p = fmaf(p, v2, 2.48287947061529e-01f);
    p = __fmul_rn(p, v);
    float q = fmaf(v2, 6.10247389755681e-13f, 5.76102136993427e-09f);
    q = fmaf(q, v2, 6.29106785017040e-06f);
    q = fmaf(q, v2, 1.70198817374094e-03f);
    q = fmaf(q, v2, 1.16817656904453e-01f);
    q = fmaf(q, v2, 9.93151921023180e-01f);
    const float r = __fadd_rn(__fdiv_rn(p, q), 0.5f);
    return r < 0.0f ? 0.0f : r > 1.0f ? 1.0f : r;
}

// The CPU's build_table: table[byte] for x the byte read as the data type.
__device__ __forceinline__ uint8_t table_entry(int i, bool sg, float sx, int32_t zx, float sy, int32_t zy, int fn,
                                               float alpha) {
    const int32_t x = sg ? (int32_t)(int8_t)(uint8_t)i : i;
    float v = __fmul_rn(sx, (float)(x - zx));
    if (fn == 1) v = mlas_logistic(v);
    else if (fn == 2) v = v >= 0.0f ? v : __fmul_rn(alpha, v);
    return (uint8_t)quantize(v, sy, zy, sg);
}

// ------------------------------------------------------------------ QLinearAdd, QLinearMul

__global__ void qlinear_binary_kernel(bool mul, bool sg, const uint8_t *A, kn_cu_qparam qa, const uint8_t *B,
                                      kn_cu_qparam qb, uint8_t *C, kn_cu_qparam qc, kn_cu_view v, bool a_sc,
                                      int64_t n) {
    const float sa = q_scale(qa), sb = q_scale(qb), sc = q_scale(qc);
    const int32_t za = q_zero(qa, sg), zb = q_zero(qb, sg), zc = q_zero(qc, sg);
    const float rac = __fdiv_rn(sa, sc), rbc = __fdiv_rn(sb, sc), rm = __fdiv_rn(__fmul_rn(sa, sb), sc);
    const float fixed = a_sc ? __fsub_rn((float)zc, fmaf(rbc, (float)zb, __fmul_rn(rac, (float)za)))
                             : __fsub_rn((float)zc, fmaf(rac, (float)za, __fmul_rn(rbc, (float)zb)));
    const int32_t lo = sg ? -128 : 0, hi = sg ? 127 : 255;
    KNCU_LOOP(i, n) {
        const int32_t a = q_at(A, sg, view_offset(v, 0, i)), b = q_at(B, sg, view_offset(v, 1, i));
        int32_t q;
        if (mul) {
            const float x = __fadd_rn(__fmul_rn((float)((a - za) * (b - zb)), rm), (float)zc);
            q = cvt_x86(rintf(x));
            q = !(x == x) ? lo : q < lo ? lo : q > hi ? hi : q;
        } else {
            const float x = a_sc ? fmaf((float)b, rbc, fmaf((float)a, rac, fixed))
                                 : fmaf((float)a, rac, fmaf((float)b, rbc, fixed));
            q = !(x == x) || !(fabsf(x) < 2147483520.0f) ? lo : (int32_t)rintf(x);
            q = q < lo ? lo : q > hi ? hi : q;
        }
        q_put(C, sg, i, q);
    }
}

// ------------------------------------------------------------------ table operators, Concat

__global__ void qlinear_table_kernel(int fn, float alpha, bool sg, const uint8_t *X, kn_cu_qparam qx, uint8_t *Y,
                                     kn_cu_qparam qy, int64_t n) {
    __shared__ uint8_t table[256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x)
        table[i] = table_entry(i, sg, q_scale(qx), q_zero(qx, sg), q_scale(qy), q_zero(qy, sg), fn, alpha);
    __syncthreads();
    KNCU_LOOP(i, n) Y[i] = table[X[i]];
}

__global__ void qlinear_concat_kernel(bool sg, const uint8_t *X, kn_cu_qparam qx, uint8_t *Y, kn_cu_qparam qy,
                                      int64_t outer, int64_t xrow, int64_t yrow, int64_t off) {
    __shared__ uint8_t table[256];
    const float sx = q_scale(qx), sy = q_scale(qy);
    const int32_t zx = q_zero(qx, sg), zy = q_zero(qy, sg);
    const bool same = sx == sy && zx == zy;
    if (!same) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) table[i] = table_entry(i, sg, sx, zx, sy, zy, 0, 0.0f);
        __syncthreads();
    }
    KNCU_LOOP(i, outer * xrow) {
        const int64_t o = i / xrow, j = i % xrow;
        const uint8_t x = X[i];
        Y[o * yrow + off + j] = same ? x : table[x];
    }
}

// ------------------------------------------------------------------ Softmax

// One warp per row: the max across the warp, the sum of the exponent table's entries in the CPU's
// order (one lane: the sum feeds a rounding), then every output.
__global__ void qlinear_softmax_kernel(bool sg, const uint8_t *X, kn_cu_qparam qx, uint8_t *Y, kn_cu_qparam qy,
                                       int64_t outer, int64_t D, int64_t inner) {
    __shared__ float table[256];
    const float sx = q_scale(qx), sy = q_scale(qy);
    const int32_t zy = q_zero(qy, sg);
    {
        double shift = log((double)__fdiv_rn(FLT_MAX, (float)D));
        shift = (shift - 5.0 > 0.0 ? shift - 5.0 : 0.0) / (double)sx;
        for (int i = threadIdx.x; i < 256; i += blockDim.x) {
            const double e = exp(__dmul_rn(__dadd_rn((double)i - 255, shift), (double)sx));
            table[(uint8_t)(sg ? i - 128 : i)] = (float)e;
        }
    }
    __syncthreads();
    const float ys = floorf(__fdiv_rn(1.0f, sy));
    const int lane = threadIdx.x & 31, wpb = blockDim.x / 32;
    const int64_t rows = outer * inner;
    for (int64_t row = (int64_t)blockIdx.x * wpb + threadIdx.x / 32; row < rows; row += (int64_t)gridDim.x * wpb) {
        const int64_t o = row / inner, in = row % inner, base = o * D * inner + in;
        int32_t mx = sg ? -128 : 0;
        for (int64_t k = lane; k < D; k += 32) {
            const int32_t v = q_at(X, sg, base + k * inner);
            mx = v > mx ? v : mx;
        }
        for (int s = 16; s > 0; s >>= 1) {
            const int32_t t = __shfl_xor_sync(0xffffffffu, mx, s);
            mx = t > mx ? t : mx;
        }
        float sum = 0.0f;
        if (lane == 0)
            for (int64_t k = 0; k < D; k++) {
                const int32_t v = q_at(X, sg, base + k * inner);
                sum = __fadd_rn(sum, sg ? table[(uint8_t)(127 - mx + v)] : table[255 - mx + v]);
            }
        sum = __shfl_sync(0xffffffffu, sum, 0);
        for (int64_t k = lane; k < D; k += 32) {
            const int64_t i = base + k * inner;
            if (sum == 0.0f) {
                Y[i] = 0;
                continue;
            }
            const int32_t v = q_at(X, sg, i);
            const float t = sg ? table[(uint8_t)(127 - mx + v)] : table[255 - mx + v];
            const int32_t q = cvt_x86(rintf(__fdiv_rn(__fmul_rn(t, ys), sum))) + zy;
            if (sg) Y[i] = (uint8_t)(int8_t)(q > 127 ? 127 : q < -128 ? -128 : q);
            else Y[i] = (uint32_t)q > 255u ? (uint8_t)255 : (uint8_t)q;
        }
    }
}

// ------------------------------------------------------------------ pools

// One warp per (image, channel): the integer sum (exact in any order), requantised.
__global__ void qlinear_gap_kernel(bool sg, const uint8_t *X, kn_cu_qparam qx, uint8_t *Y, kn_cu_qparam qy, int64_t N,
                                   int64_t C, int64_t img, bool cl) {
    const int lane = threadIdx.x & 31, wpb = blockDim.x / 32;
    const float sx = q_scale(qx), sy = q_scale(qy);
    const int32_t zx = q_zero(qx, sg), zy = q_zero(qy, sg);
    const float scale = __fdiv_rn(sx, __fmul_rn(sy, (float)img));
    for (int64_t item = (int64_t)blockIdx.x * wpb + threadIdx.x / 32; item < N * C; item += (int64_t)gridDim.x * wpb) {
        const int64_t nb = item / C, ch = item % C;
        int32_t sum = 0;
        for (int64_t p = lane; p < img; p += 32) sum += q_at(X, sg, cl ? (nb * img + p) * C + ch : (nb * C + ch) * img + p);
        for (int s = 16; s > 0; s >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, s);
        if (lane == 0) q_put(Y, sg, item, requant(__fmul_rn((float)(sum - zx * (int32_t)img), scale), zy, sg));
    }
}

// One thread per output: the dequantised window summed in float in the CPU's order.
__global__ void qlinear_avgpool_kernel(bool sg, const uint8_t *X, kn_cu_qparam qx, uint8_t *Y, kn_cu_qparam qy,
                                       kn_cu_qpool p) {
    const float sx = q_scale(qx), sy = q_scale(qy);
    const int32_t zx = q_zero(qx, sg), zy = q_zero(qy, sg);
    int64_t ximg = 1, yimg = 1, ksize = 1;
    for (int i = 0; i < p.nsp; i++) ximg *= p.in[i], yimg *= p.out[i], ksize *= p.k[i];
    const int32_t lo8 = sg ? -128 : 0, hi8 = sg ? 127 : 255;
    KNCU_LOOP(t, p.n * p.c * yimg) {
        int64_t nb, ch, o;
        if (p.channels_last) ch = t % p.c, o = (t / p.c) % yimg, nb = t / (p.c * yimg);
        else o = t % yimg, ch = (t / yimg) % p.c, nb = t / (p.c * yimg);
        int64_t op[3], lo[3], hi[3], cur[3], cnt = 1;
        bool empty = false;
        int64_t r = o;
        for (int i = p.nsp - 1; i >= 0; i--) {
            op[i] = r % p.out[i];
            r /= p.out[i];
        }
        for (int i = 0; i < p.nsp; i++) {
            int64_t s = op[i] * p.stride[i] - p.pad_b[i], e = s + p.k[i];
            e = e < p.in[i] ? e : p.in[i];
            s = s > 0 ? s : 0;
            lo[i] = cur[i] = s;
            hi[i] = e;
            if (e <= s) empty = true;
            cnt *= e - s;
        }
        float sum = 0.0f;
        while (!empty) {
            int64_t q = 0;
            for (int i = 0; i < p.nsp; i++) q = q * p.in[i] + cur[i];
            const int32_t x = q_at(X, sg, p.channels_last ? (nb * ximg + q) * p.c + ch : (nb * p.c + ch) * ximg + q);
            sum = __fadd_rn(sum, __fmul_rn(sx, (float)(x - zx)));
            int i = p.nsp - 1;
            for (; i >= 0; i--) {
                if (++cur[i] < hi[i]) break;
                cur[i] = lo[i];
            }
            if (i < 0) break;
        }
        const float avg = __fdiv_rn(sum, (float)(p.count_include_pad ? ksize : cnt));
        const float v = rintf(__fadd_rn(__fdiv_rn(avg, sy), (float)zy));
        const int32_t q = !(v == v) ? lo8 : v < (float)lo8 ? lo8 : v > (float)hi8 ? hi8 : (int32_t)v;
        q_put(Y, sg, t, q);
    }
}

} // namespace

// ------------------------------------------------------------------ launchers

static unsigned blocks_for_warps(int64_t warps, int wpb) {
    int64_t g = (warps + wpb - 1) / wpb;
    if (g > 65535LL * 32) g = 65535LL * 32;
    return (unsigned)(g < 1 ? 1 : g);
}

template <int BITS>
static void nbits_fast_launch(const kn_cu_nbits *p, int bs_shift, bool vec, dim3 grid, int threads, const f16 *A,
                              kiln_dtype y_dt, void *Y, cudaStream_t s) {
    if (vec) nbits_gemv_fast_kernel<f16, BITS, 1, 4><<<grid, threads, 0, s>>>(*p, bs_shift, A, y_dt, Y);
    else nbits_gemv_fast_kernel<f16, BITS, 1, 1><<<grid, threads, 0, s>>>(*p, bs_shift, A, y_dt, Y);
}

// One float16 row without g_idx (a decoder's token): the specialised kernel (measured on an H200,
// M=1, K=4096, N=11008, 4 bits, block 32: 0.109 ms a run against 0.149 ms for the generic one).
// Otherwise the generic kernel, which measured faster for float32 A (0.146 against 0.197 ms) and for
// 4 rows (0.163 against 0.380 ms): the specialised one's A reads are less coalesced.
template <typename T>
static cudaError_t nbits_gemv_launch(const kn_cu_nbits *p, const T *A, kiln_dtype y_dt, void *Y, cudaStream_t s) {
    const int wpb = 4;
    if ((p->N + wpb - 1) / wpb > 0x7fffffffLL) return cudaErrorInvalidValue;
    if (std::is_same<T, f16>::value && p->M == 1 && !p->g_idx) {
        int bs_shift = 0;
        while ((1LL << bs_shift) < p->bs) bs_shift++;
        const bool vec = (p->kb * (p->bs * p->bits / 8)) % 16 == 0 && ((uintptr_t)p->B & 15) == 0;
        dim3 grid((unsigned)((p->N + wpb - 1) / wpb), 1);
        const f16 *a = (const f16 *)A;
        if (p->bits == 4) nbits_fast_launch<4>(p, bs_shift, vec, grid, wpb * 32, a, y_dt, Y, s);
        else if (p->bits == 8) nbits_fast_launch<8>(p, bs_shift, vec, grid, wpb * 32, a, y_dt, Y, s);
        else nbits_fast_launch<2>(p, bs_shift, vec, grid, wpb * 32, a, y_dt, Y, s);
        return cudaGetLastError();
    }
    const int64_t gy = (p->M + NB_MR - 1) / NB_MR;
    if (gy > 65535) return cudaErrorInvalidValue;
    dim3 grid((unsigned)((p->N + wpb - 1) / wpb), (unsigned)gy);
    nbits_gemv_kernel<T><<<grid, wpb * 32, 0, s>>>(*p, A, y_dt, Y);
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_nbits_gemv(const kn_cu_nbits *p, kiln_dtype a_dt, const void *A, kiln_dtype y_dt, void *Y,
                                        cudaStream_t s) {
    if (p->M <= 0 || p->N <= 0) return cudaSuccess;
    if (p->bits != 2 && p->bits != 4 && p->bits != 8) return cudaErrorNotSupported;
    if (a_dt == KILN_DTYPE_FLOAT) return nbits_gemv_launch<float>(p, (const float *)A, y_dt, Y, s);
    if (a_dt == KILN_DTYPE_FLOAT16) return nbits_gemv_launch<f16>(p, (const f16 *)A, y_dt, Y, s);
    return cudaErrorNotSupported;
}

extern "C" cudaError_t kn_cu_nbits_gemv_int8(const kn_cu_nbits *p, const int8_t *aq, const float *sa, kiln_dtype y_dt,
                                             void *Y, cudaStream_t s) {
    if (p->M <= 0 || p->N <= 0) return cudaSuccess;
    if (p->bits != 2 && p->bits != 4 && p->bits != 8) return cudaErrorNotSupported;
    const int wpb = 4;
    const int64_t gy = (p->M + NB_MR - 1) / NB_MR;
    if (gy > 65535 || (p->N + wpb - 1) / wpb > 0x7fffffffLL) return cudaErrorInvalidValue;
    dim3 grid((unsigned)((p->N + wpb - 1) / wpb), (unsigned)gy);
    nbits_gemv_int8_kernel<<<grid, wpb * 32, 0, s>>>(*p, aq, sa, y_dt, Y);
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_nbits_dequant(const kn_cu_nbits *p, kiln_dtype w_dt, void *W, cudaStream_t s) {
    if (p->N <= 0 || p->K <= 0) return cudaSuccess;
    if (p->bits != 2 && p->bits != 4 && p->bits != 8) return cudaErrorNotSupported;
    const int64_t words = p->N * (p->kb * p->bs * p->bits / 32);
    if (w_dt == KILN_DTYPE_FLOAT) nbits_dequant_kernel<float><<<grid_for(words, 256), 256, 0, s>>>(*p, (float *)W);
    else if (w_dt == KILN_DTYPE_FLOAT16) nbits_dequant_kernel<f16><<<grid_for(words, 256), 256, 0, s>>>(*p, (f16 *)W);
    else return cudaErrorNotSupported;
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_nbits_quant_a(kiln_dtype a_dt, const void *A, int64_t M, int64_t K, int64_t bs, int64_t kb,
                                           int8_t *aq, float *sa, cudaStream_t s) {
    if (M <= 0 || K <= 0) return cudaSuccess;
    const unsigned g = blocks_for_warps(M * kb, 4);
    if ((int64_t)g * 4 < M * kb) return cudaErrorInvalidValue;
    if (a_dt == KILN_DTYPE_FLOAT) nbits_quant_a_kernel<float><<<g, 128, 0, s>>>((const float *)A, M, K, bs, kb, aq, sa);
    else if (a_dt == KILN_DTYPE_FLOAT16) nbits_quant_a_kernel<f16><<<g, 128, 0, s>>>((const f16 *)A, M, K, bs, kb, aq, sa);
    else return cudaErrorNotSupported;
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_qlinear_binary(bool mul, bool is_signed, const void *A, kn_cu_qparam a, const void *B,
                                            kn_cu_qparam b, void *C, kn_cu_qparam c, const kn_cu_view *v, bool a_scalar,
                                            cudaStream_t s) {
    int64_t n = view_count(*v);
    if (n <= 0) return cudaSuccess;
    qlinear_binary_kernel<<<grid_for(n, 256), 256, 0, s>>>(mul, is_signed, (const uint8_t *)A, a, (const uint8_t *)B, b,
                                                          (uint8_t *)C, c, *v, a_scalar, n);
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_qlinear_table(int fn, float alpha, bool is_signed, const void *X, kn_cu_qparam x, void *Y,
                                           kn_cu_qparam y, int64_t n, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    qlinear_table_kernel<<<grid_for(n, 256), 256, 0, s>>>(fn, alpha, is_signed, (const uint8_t *)X, x, (uint8_t *)Y, y, n);
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_qlinear_concat_part(bool is_signed, const void *X, kn_cu_qparam x, void *Y, kn_cu_qparam y,
                                                 int64_t outer, int64_t xrow, int64_t yrow, int64_t off, cudaStream_t s) {
    if (outer * xrow <= 0) return cudaSuccess;
    qlinear_concat_kernel<<<grid_for(outer * xrow, 256), 256, 0, s>>>(is_signed, (const uint8_t *)X, x, (uint8_t *)Y, y,
                                                                      outer, xrow, yrow, off);
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_qlinear_softmax(bool is_signed, const void *X, kn_cu_qparam x, void *Y, kn_cu_qparam y,
                                             int64_t outer, int64_t D, int64_t inner, cudaStream_t s) {
    if (outer * inner <= 0 || D <= 0) return cudaSuccess;
    qlinear_softmax_kernel<<<blocks_for_warps(outer * inner, 4), 128, 0, s>>>(is_signed, (const uint8_t *)X, x,
                                                                              (uint8_t *)Y, y, outer, D, inner);
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_qlinear_gap(bool is_signed, const void *X, kn_cu_qparam x, void *Y, kn_cu_qparam y,
                                         int64_t N, int64_t C, int64_t img, bool channels_last, cudaStream_t s) {
    if (N * C <= 0 || img <= 0) return cudaSuccess;
    qlinear_gap_kernel<<<blocks_for_warps(N * C, 4), 128, 0, s>>>(is_signed, (const uint8_t *)X, x, (uint8_t *)Y, y, N,
                                                                  C, img, channels_last);
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_qlinear_avgpool(bool is_signed, const void *X, kn_cu_qparam x, void *Y, kn_cu_qparam y,
                                             const kn_cu_qpool *p, cudaStream_t s) {
    int64_t yimg = 1;
    for (int i = 0; i < p->nsp; i++) yimg *= p->out[i];
    const int64_t n = p->n * p->c * yimg;
    if (n <= 0) return cudaSuccess;
    if (p->nsp < 1 || p->nsp > 3) return cudaErrorNotSupported;
    qlinear_avgpool_kernel<<<grid_for(n, 128), 128, 0, s>>>(is_signed, (const uint8_t *)X, x, (uint8_t *)Y, y, *p);
    return cudaGetLastError();
}

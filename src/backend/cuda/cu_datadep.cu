// Kernels whose work depends on the data (cuda_datadep.h): NonZero's count and compaction,
// DynamicQuantizeLinear's range, scale and quantisation, and TopK by a bitonic sort in device
// memory for lines of any length.
#include "backend/cuda/cu_common.cuh"
#include "backend/cuda/cuda_datadep.h"

using namespace kncu;

namespace {

// ------------------------------------------------------------------ block scans and reductions

// Exclusive prefix sum of v over the block (blockDim.x a multiple of 32, at most 1024); *total gets
// the block's sum. Every thread of the block calls it.
template <typename T> __device__ T block_exclusive_scan(T v, T *total) {
    __shared__ T warp_sums[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    T incl = v;
    for (int o = 1; o < 32; o <<= 1) {
        T u = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += u;
    }
    if (lane == 31) warp_sums[w] = incl;
    __syncthreads();
    if (w == 0) {
        T s = lane < nw ? warp_sums[lane] : (T)0;
        for (int o = 1; o < 32; o <<= 1) {
            T u = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += u;
        }
        if (lane < nw) warp_sums[lane] = s; // inclusive prefix of the warps' sums
    }
    __syncthreads();
    T before = w > 0 ? warp_sums[w - 1] : (T)0;
    *total = warp_sums[nw - 1];
    __syncthreads(); // warp_sums is read again by the next call
    return before + incl - v;
}

// ------------------------------------------------------------------ NonZero

constexpr int NZ_THREADS = 256;
constexpr int NZ_ITEMS = KN_CU_NZ_CHUNK / NZ_THREADS; // consecutive elements per thread

template <typename U> __device__ __forceinline__ bool nz(const U *x, int64_t i, U mask) { return (x[i] & mask) != 0; }

// counts[blockIdx.x] = the nonzero elements of chunk blockIdx.x
template <typename U> __global__ void k_nz_count(const U *x, int64_t n, U mask, int64_t *counts) {
    const int64_t base = (int64_t)blockIdx.x * KN_CU_NZ_CHUNK;
    int c = 0;
    for (int j = threadIdx.x; j < KN_CU_NZ_CHUNK; j += NZ_THREADS) {
        int64_t i = base + j;
        if (i < n && nz(x, i, mask)) c++;
    }
    int total;
    block_exclusive_scan<int>(c, &total);
    if (threadIdx.x == 0) counts[blockIdx.x] = total;
}

// One block: counts[0..m) becomes its exclusive prefix sum; *total = the sum.
__global__ void k_nz_offsets(int64_t *counts, int64_t m, int64_t *total) {
    long long carry = 0;
    for (int64_t base = 0; base < m; base += blockDim.x) {
        const int64_t i = base + threadIdx.x;
        long long v = i < m ? (long long)counts[i] : 0, tile;
        long long before = block_exclusive_scan<long long>(v, &tile);
        if (i < m) counts[i] = carry + before;
        carry += tile;
    }
    if (threadIdx.x == 0) *total = carry;
}

struct NzDims {
    int rank;
    int64_t dims[KN_CU_MAX_RANK];
};

// Chunk blockIdx.x's nonzero elements, in order, from column counts[blockIdx.x] on: thread t takes
// elements [t * NZ_ITEMS, (t + 1) * NZ_ITEMS) of the chunk, after the nonzeros of the threads
// before it.
template <typename U>
__global__ void k_nz_write(const U *x, int64_t n, U mask, NzDims d, const int64_t *counts, int64_t cnt, int64_t *y) {
    const int64_t first = (int64_t)blockIdx.x * KN_CU_NZ_CHUNK + (int64_t)threadIdx.x * NZ_ITEMS;
    int c = 0;
    for (int j = 0; j < NZ_ITEMS; j++) {
        int64_t i = first + j;
        if (i < n && nz(x, i, mask)) c++;
    }
    int block_total;
    int64_t col = counts[blockIdx.x] + block_exclusive_scan<int>(c, &block_total);
    for (int j = 0; j < NZ_ITEMS && c > 0; j++) {
        int64_t i = first + j;
        if (i >= n || !nz(x, i, mask)) continue;
        if (col >= cnt) return; // cannot happen when counts and cnt come from step 1 on the same data
        if (d.rank == 0) y[col] = 0;
        int64_t r = i;
        for (int k = d.rank - 1; k >= 0; k--) {
            int64_t dim = d.dims[k];
            y[(int64_t)k * cnt + col] = r % dim;
            r /= dim;
        }
        col++;
        c--;
    }
}

template <typename U> U nz_mask(bool float_bits) {
    // float types: every bit but the sign's
    const U all = (U)~(U)0; // (U) again: a 16-bit ~ is an int's
    return float_bits ? (U)(all >> 1) : all;
}

template <typename U>
cudaError_t nz_count(const void *x, int64_t n, bool float_bits, int64_t *counts, int64_t *total, cudaStream_t s) {
    const int64_t m = kn_cu_nz_chunks(n);
    if (m > 0) k_nz_count<U><<<(unsigned)m, NZ_THREADS, 0, s>>>((const U *)x, n, nz_mask<U>(float_bits), counts);
    k_nz_offsets<<<1, 1024, 0, s>>>(counts, m, total);
    return cudaGetLastError();
}

template <typename U>
cudaError_t nz_write(const void *x, int64_t n, bool float_bits, const NzDims &d, const int64_t *counts, int64_t cnt,
                     int64_t *y, cudaStream_t s) {
    const int64_t m = kn_cu_nz_chunks(n);
    if (m == 0 || cnt == 0) return cudaSuccess;
    k_nz_write<U><<<(unsigned)m, NZ_THREADS, 0, s>>>((const U *)x, n, nz_mask<U>(float_bits), d, counts, cnt, y);
    return cudaGetLastError();
}

// ------------------------------------------------------------------ DynamicQuantizeLinear

constexpr int DQL_THREADS = 256;
constexpr int DQL_MAX_PARTS = 1024;

// The CPU kernel's steps: a value replaces the maximum only when greater (NaN never does, nor -0
// the starting +0), the minimum likewise; the order of the steps does not change the result.
__device__ __forceinline__ void minmax_step(float v, float &mx, float &mn) {
    if (v > mx) mx = v;
    if (v < mn) mn = v;
}

// The warp's maximum and minimum of (mx, mn) pairs, to lane 0: each lane takes in the pair of the
// lane o above it (both values into both, which leaves each the extreme of the union).
__device__ __forceinline__ void warp_minmax(float &mx, float &mn) {
    for (int o = 16; o > 0; o >>= 1) {
        const float omx = __shfl_down_sync(0xffffffffu, mx, o), omn = __shfl_down_sync(0xffffffffu, mn, o);
        minmax_step(omx, mx, mn);
        minmax_step(omn, mx, mn);
    }
}

// The block's maximum and minimum of (mx, mn) pairs, to thread 0.
__device__ void block_minmax(float &mx, float &mn) {
    __shared__ float smx[32], smn[32];
    warp_minmax(mx, mn);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) {
        smx[w] = mx;
        smn[w] = mn;
    }
    __syncthreads();
    if (w == 0) {
        mx = lane < nw ? smx[lane] : 0.0f;
        mn = lane < nw ? smn[lane] : 0.0f;
        warp_minmax(mx, mn);
    }
}

// part[2 b], part[2 b + 1] = block b's maximum and minimum (both start at 0)
__global__ void k_dql_range(const float *x, int64_t n, float *part) {
    float mx = 0.0f, mn = 0.0f;
    KNCU_LOOP(i, n) minmax_step(x[i], mx, mn);
    block_minmax(mx, mn);
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = mx;
        part[2 * blockIdx.x + 1] = mn;
    }
}

// One block: the range over the parts, then scale and zero point as the CPU kernel computes them
// (each step rounded to float32: the _rn intrinsics are never contracted nor approximated).
// zpf (the zero point as a float, which the quantisation adds) goes to part[2 * parts].
__global__ void k_dql_params(float *part, int parts, float *y_scale, uint8_t *y_zp) {
    float mx = 0.0f, mn = 0.0f;
    for (int i = threadIdx.x; i < parts; i += blockDim.x) {
        minmax_step(part[2 * i], mx, mn);
        minmax_step(part[2 * i + 1], mx, mn);
    }
    block_minmax(mx, mn);
    if (threadIdx.x != 0) return;
    const float scale = __fdiv_rn(mx == mn ? 1.0f : __fsub_rn(mx, mn), 255.0f);
    float zp0 = __fsub_rn(0.0f, __fdiv_rn(mn, scale));
    zp0 = zp0 < 0.0f ? 0.0f : zp0 > 255.0f ? 255.0f : zp0;
    const float zpi = rintf(zp0); // half to even, as nearbyintf in the default rounding mode
    *y_scale = scale;
    *y_zp = zpi == zpi ? (uint8_t)zpi : (uint8_t)0; // NaN (x spans -inf..inf): 0, as x86's conversion gives
    part[2 * parts] = zpi;
}

__global__ void k_dql_quantize(const float *x, int64_t n, const float *y_scale, const float *zpf, uint8_t *y) {
    const float scale = *y_scale, zpi = *zpf;
    KNCU_LOOP(i, n) {
        const float v = __fadd_rn(rintf(__fdiv_rn(x[i], scale)), zpi);
        y[i] = !(v > 0.0f) ? (uint8_t)0 : v >= 255.0f ? (uint8_t)255 : (uint8_t)v; // the CPU's sat_u8
    }
}

int dql_parts(int64_t n) {
    if (n <= 0) return 0;
    int64_t b = (n + DQL_THREADS * 8 - 1) / (DQL_THREADS * 8);
    return (int)(b < DQL_MAX_PARTS ? b : DQL_MAX_PARTS);
}

// ------------------------------------------------------------------ TopK by a sort in device memory

// Whether (va, ia) comes before (vb, ib): the better value first (NaN the largest value), the lower
// index on ties (two NaNs tie); padding (index INT32_MAX) last.
template <typename A> __device__ __forceinline__ bool topk_before(A va, int ia, A vb, int ib, bool largest) {
    if (ia == INT32_MAX) return false;
    if (ib == INT32_MAX) return true;
    const bool na = va != va, nb = vb != vb;
    if (na != nb) return largest ? na : nb;
    if (!na && va != vb) return largest ? va > vb : va < vb;
    return ia < ib;
}

// The lines' elements are sorted as they are (their bytes come out unchanged, NaN payloads too, as
// the CPU kernel copies them) and compared through ld().
template <typename T>
__global__ void k_topk_fill(const T *x, T *sv, int *si, int64_t lines, int64_t len, int64_t inner, int64_t pow2) {
    KNCU_LOOP(t, lines * pow2) {
        const int64_t line = t / pow2, j = t % pow2;
        if (j < len) {
            const int64_t o = line / inner, in = line % inner;
            sv[t] = x[(o * len + j) * inner + in];
            si[t] = (int)j;
        } else {
            sv[t] = x[0]; // any value: padding goes by its index
            si[t] = INT32_MAX;
        }
    }
}

// One step (size, stride) of the bitonic sort of every line: each thread one pair.
template <typename T>
__global__ void k_topk_step(T *sv, int *si, int64_t lines, int64_t pow2, int64_t size, int64_t stride, bool largest) {
    const int64_t half = pow2 >> 1;
    KNCU_LOOP(p, lines * half) {
        const int64_t line = p / half, q = p % half;
        const int64_t j = 2 * stride * (q / stride) + q % stride, partner = j + stride;
        const bool up = (j & size) == 0;
        const int64_t a = line * pow2 + j, b = line * pow2 + partner;
        const T va = sv[a], vb = sv[b];
        const int ia = si[a], ib = si[b];
        if (topk_before(ld(va), ia, ld(vb), ib, largest) != up) {
            sv[a] = vb;
            sv[b] = va;
            si[a] = ib;
            si[b] = ia;
        }
    }
}

template <typename T>
__global__ void k_topk_out(const T *sv, const int *si, T *values, int64_t *indices, int64_t lines, int64_t pow2,
                           int64_t inner, int64_t k) {
    KNCU_LOOP(t, lines * k) {
        const int64_t line = t / k, j = t % k;
        const int64_t o = line / inner, in = line % inner, off = (o * k + j) * inner + in;
        values[off] = sv[line * pow2 + j];
        indices[off] = si[line * pow2 + j];
    }
}

int64_t pow2_of(int64_t len) {
    int64_t p = 1;
    while (p < len) p <<= 1;
    return p;
}

template <typename T>
cudaError_t topk_sort(const void *x, void *values, int64_t *indices, int64_t lines, int64_t len, int64_t inner,
                      int64_t k, bool largest, void *scratch, cudaStream_t s) {
    const int64_t pow2 = pow2_of(len);
    T *sv = (T *)scratch;
    int *si = (int *)((char *)scratch + (((size_t)(lines * pow2) * sizeof(T) + 255) & ~(size_t)255));
    k_topk_fill<T><<<grid_for(lines * pow2, 256), 256, 0, s>>>((const T *)x, sv, si, lines, len, inner, pow2);
    for (int64_t size = 2; size <= pow2; size <<= 1)
        for (int64_t stride = size >> 1; stride > 0; stride >>= 1)
            k_topk_step<T><<<grid_for(lines * (pow2 >> 1), 256), 256, 0, s>>>(sv, si, lines, pow2, size, stride, largest);
    k_topk_out<T><<<grid_for(lines * k, 256), 256, 0, s>>>(sv, si, (T *)values, indices, lines, pow2, inner, k);
    return cudaGetLastError();
}

template <typename T> size_t topk_scratch(int64_t lines, int64_t len) {
    const size_t m = (size_t)(lines * pow2_of(len));
    return ((m * sizeof(T) + 255) & ~(size_t)255) + m * sizeof(int);
}

} // namespace

extern "C" {

int64_t kn_cu_nz_chunks(int64_t n) { return n > 0 ? (n + KN_CU_NZ_CHUNK - 1) / KN_CU_NZ_CHUNK : 0; }

cudaError_t kn_cu_nonzero_count(size_t esize, bool float_bits, const void *x, int64_t n, int64_t *counts,
                                int64_t *total, cudaStream_t s) {
    if (kn_cu_nz_chunks(n) > INT32_MAX) return cudaErrorNotSupported;
    switch (esize) {
    case 1: return nz_count<uint8_t>(x, n, float_bits, counts, total, s);
    case 2: return nz_count<uint16_t>(x, n, float_bits, counts, total, s);
    case 4: return nz_count<uint32_t>(x, n, float_bits, counts, total, s);
    case 8: return nz_count<unsigned long long>(x, n, float_bits, counts, total, s);
    default: return cudaErrorNotSupported;
    }
}

cudaError_t kn_cu_nonzero_write(size_t esize, bool float_bits, const void *x, int64_t n, int rank, const int64_t *dims,
                                const int64_t *counts, int64_t cnt, int64_t *y, cudaStream_t s) {
    if (rank < 0 || rank > KN_CU_MAX_RANK || kn_cu_nz_chunks(n) > INT32_MAX) return cudaErrorNotSupported;
    NzDims d;
    d.rank = rank;
    for (int k = 0; k < KN_CU_MAX_RANK; k++) d.dims[k] = k < rank ? dims[k] : 1;
    switch (esize) {
    case 1: return nz_write<uint8_t>(x, n, float_bits, d, counts, cnt, y, s);
    case 2: return nz_write<uint16_t>(x, n, float_bits, d, counts, cnt, y, s);
    case 4: return nz_write<uint32_t>(x, n, float_bits, d, counts, cnt, y, s);
    case 8: return nz_write<unsigned long long>(x, n, float_bits, d, counts, cnt, y, s);
    default: return cudaErrorNotSupported;
    }
}

size_t kn_cu_dql_scratch(int64_t n) { return (size_t)(2 * dql_parts(n) + 1); }

cudaError_t kn_cu_dynamic_quantize(const float *x, int64_t n, float *part, uint8_t *y, float *y_scale, uint8_t *y_zp,
                                   cudaStream_t s) {
    const int parts = dql_parts(n);
    if (parts > 0) k_dql_range<<<(unsigned)parts, DQL_THREADS, 0, s>>>(x, n, part);
    k_dql_params<<<1, DQL_THREADS, 0, s>>>(part, parts, y_scale, y_zp);
    if (n > 0) k_dql_quantize<<<grid_for(n, 256), 256, 0, s>>>(x, n, y_scale, part + 2 * parts, y);
    return cudaGetLastError();
}

size_t kn_cu_topk_sort_scratch(kiln_dtype dt, int64_t lines, int64_t len) {
    if (len > ((int64_t)1 << 30)) return 0;
    switch (dt) { // by the element's size
    case KILN_DTYPE_INT8: case KILN_DTYPE_UINT8: return topk_scratch<uint8_t>(lines, len);
    case KILN_DTYPE_INT16: case KILN_DTYPE_UINT16: case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: return topk_scratch<uint16_t>(lines, len);
    case KILN_DTYPE_INT32: case KILN_DTYPE_UINT32: case KILN_DTYPE_FLOAT: return topk_scratch<float>(lines, len);
    case KILN_DTYPE_INT64: case KILN_DTYPE_UINT64: case KILN_DTYPE_DOUBLE: return topk_scratch<double>(lines, len);
    default: return 0;
    }
}

cudaError_t kn_cu_topk_sort(kiln_dtype dt, const void *x, void *values, int64_t *indices, int64_t outer, int64_t len,
                            int64_t inner, int64_t k, bool largest, void *scratch, cudaStream_t s) {
    const int64_t lines = outer * inner;
    if (lines == 0 || k == 0 || len == 0) return cudaSuccess;
    if (len > ((int64_t)1 << 30) || k > len) return cudaErrorNotSupported;
    KNCU_DISPATCH_NUM(dt, return topk_sort<type_>(x, values, indices, lines, len, inner, k, largest, scratch, s));
    return cudaSuccess;
}

} // extern "C"

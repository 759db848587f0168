// kiln.Attention in one kernel for float16/bfloat16 with head size 64 or 128: a block takes
// 16 query rows per warp of one (batch, head) and walks the keys 64 at a time, the scores made on
// tensor cores (WMMA, float accumulation) and never written to global memory: the two products,
// the mask pass and the softmax pass of the general form (four kernels and a scratch of
// batch * sq * sk) become one kernel.
//
// It rounds where the general form rounds, so both give the same numbers: a score is rounded to
// the input type after scaling (the first product's output) and again after an additive mask
// (the elementwise add), the softmax runs in float over those and its probabilities are rounded
// to the input type before the second product. That needs each row's maximum and sum before any
// probability, so the keys are walked twice: first for the row statistics, then for P V (the
// output then stays in the tensor cores' registers, never rescaled). At the head sizes it takes,
// the second QK^T costs less than the memory traffic it replaces.
#include "backend/cuda/cu_common.cuh"

#include <mma.h>

using namespace kncu;
using namespace nvcuda;

namespace {

constexpr int BN = 64; // keys per block step

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ f16 from_float<f16>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }
template <typename T> __device__ __forceinline__ float round_to(float x) { return ld(from_float<T>(x)); }

template <int WARPS, int D> struct Smem {
    static constexpr int BM = 16 * WARPS;
    template <typename T> static constexpr size_t bytes() {
        return sizeof(T) * (BM * D + D * BN + BN * D + WARPS * 16 * BN) + sizeof(float) * (WARPS * 16 * (BN > D ? BN : D));
    }
};

// rows x cols of T from src (row stride rs, columns contiguous) into dst [rows][cols]; rows past
// n_rows and columns past n_cols are zeros. 16-byte loads where the tile is whole and aligned.
template <typename T>
__device__ __forceinline__ void load_tile(T *dst, const T *src, int rows, int cols, int64_t rs, int64_t n_rows,
                                          int64_t n_cols, bool vec) {
    const int tid = threadIdx.x, nt = blockDim.x;
    if (vec && n_rows >= rows && n_cols >= cols) {
        const int wpr = cols / 8; // 16-byte words per row
        for (int e = tid; e < rows * wpr; e += nt) {
            const int r = e / wpr, w = e % wpr;
            ((uint4 *)dst)[e] = *(const uint4 *)(src + r * rs + w * 8);
        }
        return;
    }
    for (int e = tid; e < rows * cols; e += nt) {
        const int r = e / cols, c = e % cols;
        dst[e] = r < n_rows && c < n_cols ? src[r * rs + c] : from_float<T>(0.0f);
    }
}

template <typename T, int WARPS, int D> __global__ void __launch_bounds__(32 * WARPS) k_flash(kn_cu_flash p) {
    constexpr int BM = 16 * WARPS;
    extern __shared__ __align__(128) unsigned char smem[];
    T *sQ = (T *)smem;                    // [BM][D]
    T *sK = sQ + BM * D;                  // [D][BN]: KT's block
    T *sV = sK + D * BN;                  // [BN][D]
    T *sP = sV + BN * D;                  // [WARPS][16][BN] probabilities
    float *sF = (float *)(sP + WARPS * 16 * BN); // [WARPS][16][max(BN, D)] scores, then the output

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t b0 = blockIdx.y / p.b1, b1 = blockIdx.y % p.b1;
    const int64_t i0 = (int64_t)blockIdx.x * BM;
    const T *q = (const T *)p.q + b0 * p.q_s0 + b1 * p.q_s1;
    const T *k = (const T *)p.k + b0 * p.k_s0 + b1 * p.k_s1;
    const T *v = (const T *)p.v + b0 * p.v_s0 + b1 * p.v_s1;
    T *y = (T *)p.y + b0 * p.y_s0 + b1 * p.y_s1;
    const unsigned char *mb = p.mask_bool ? (const unsigned char *)p.mask + b0 * p.m_s0 + b1 * p.m_s1 : NULL;
    const T *mf = p.mask && !p.mask_bool ? (const T *)p.mask + b0 * p.m_s0 + b1 * p.m_s1 : NULL;
    const bool vq = p.q_si % 8 == 0 && ((uintptr_t)q & 15) == 0;
    const bool vk = p.k_sj == 1 && p.k_sc % 8 == 0 && ((uintptr_t)k & 15) == 0;
    const bool vv = p.v_sj % 8 == 0 && ((uintptr_t)v & 15) == 0;

    load_tile(sQ, q + i0 * p.q_si, BM, D, p.q_si, p.sq - i0, D, vq);
    float *myF = sF + warp * 16 * (BN > D ? BN : D);
    T *myP = sP + warp * 16 * BN;
    const int64_t row0 = i0 + warp * 16; // the warp's first query row

    // lanes take columns: lane and lane + 32 of every row (consecutive words: no bank conflicts);
    // every lane keeps all 16 rows' maximum and sum
    float m[16], l[16];
#pragma unroll
    for (int r = 0; r < 16; r++) m[r] = -INFINITY, l[r] = 0.0f;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> o[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::fill_fragment(o[n], 0.0f);

    for (int pass = 0; pass < 2; pass++)
        for (int64_t j0 = 0; j0 < p.sk; j0 += BN) {
            __syncthreads(); // every warp is done with the previous block's tiles
            if (vk) {
                load_tile(sK, k + j0, D, BN, p.k_sc, D, p.sk - j0, true);
            } else { // K as [.., sk, d] or unaligned: element by element, along the contiguous dim
                for (int e = threadIdx.x; e < D * BN; e += blockDim.x) {
                    const int c = p.k_sj == 1 ? e / BN : e % D, jj = p.k_sj == 1 ? e % BN : e / D;
                    const int64_t j = j0 + jj;
                    sK[c * BN + jj] = j < p.sk ? k[j * p.k_sj + c * p.k_sc] : from_float<T>(0.0f);
                }
            }
            if (pass == 1) load_tile(sV, v + j0 * p.v_sj, BN, D, p.v_sj, p.sk - j0, D, vv);
            __syncthreads();

            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[BN / 16];
#pragma unroll
            for (int n = 0; n < BN / 16; n++) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
            for (int kk = 0; kk < D; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
                wmma::load_matrix_sync(a, sQ + warp * 16 * D + kk, D);
#pragma unroll
                for (int n = 0; n < BN / 16; n++) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
                    wmma::load_matrix_sync(b, sK + kk * BN + n * 16, BN);
                    wmma::mma_sync(acc[n], a, b, acc[n]);
                }
            }
#pragma unroll
            for (int n = 0; n < BN / 16; n++) wmma::store_matrix_sync(myF + n * 16, acc[n], BN, wmma::mem_row_major);
            __syncwarp();

#pragma unroll
            for (int r = 0; r < 16; r++) {
                const int64_t i = row0 + r;
                float x[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int jj = lane + 32 * h;
                    const int64_t j = j0 + jj;
                    float s = round_to<T>(myF[r * BN + jj] * p.scale); // the first product's output
                    if (j >= p.sk || i >= p.sq) s = -INFINITY;
                    else if (mb) s = mb[i * p.m_si + j * p.m_sj] ? s : -INFINITY;
                    else if (mf) s = round_to<T>(s + ld(mf[i * p.m_si + j * p.m_sj])); // the mask add's output
                    x[h] = s;
                }
                if (pass == 0) { // the row's maximum and sum, carried across key blocks
                    float mx = fmaxf(x[0], x[1]);
                    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
                    const float m_new = fmaxf(m[r], mx);
                    float e = m_new == -INFINITY ? 0.0f : expf(x[0] - m_new) + expf(x[1] - m_new);
                    for (int off = 16; off > 0; off >>= 1) e += __shfl_xor_sync(0xffffffffu, e, off);
                    l[r] = (m_new == -INFINITY ? 0.0f : l[r] * expf(m[r] - m_new)) + e;
                    m[r] = m_new;
                } else { // the probabilities, rounded as the softmax's output (exp times 1/sum, as it)
                    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
#pragma unroll
                    for (int h = 0; h < 2; h++) myP[r * BN + lane + 32 * h] = from_float<T>(expf(x[h] - m[r]) * inv);
                }
            }
            if (pass == 0) continue;
            __syncwarp();
#pragma unroll
            for (int kk = 0; kk < BN; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
                wmma::load_matrix_sync(a, myP + kk, BN);
#pragma unroll
                for (int n = 0; n < D / 16; n++) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
                    wmma::load_matrix_sync(b, sV + kk * D + n * 16, D);
                    wmma::mma_sync(o[n], a, b, o[n]);
                }
            }
        }

    // the output: a row whose every key is masked out has no softmax (0/0: NaN), which
    // nan_to_zero turns into 0
    __syncwarp();
#pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::store_matrix_sync(myF + n * 16, o[n], D, wmma::mem_row_major);
    __syncwarp();
#pragma unroll
    for (int r = 0; r < 16; r++) {
        const int64_t i = row0 + r;
        if (i >= p.sq) break;
        for (int c = lane; c < D; c += 32) {
            const float val = l[r] > 0.0f ? myF[r * D + c] : (p.nan_to_zero ? 0.0f : NAN);
            y[i * p.y_si + c] = from_float<T>(val);
        }
    }
}

template <typename T, int WARPS, int D> cudaError_t launch(const kn_cu_flash *p, cudaStream_t s) {
    const size_t bytes = Smem<WARPS, D>::template bytes<T>();
    // per device: set on every launch (a host call, no stream work, so graph capture allows it)
    cudaError_t e = cudaFuncSetAttribute(k_flash<T, WARPS, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess) return e;
    constexpr int BM = 16 * WARPS;
    dim3 grid((unsigned)((p->sq + BM - 1) / BM), (unsigned)(p->b0 * p->b1));
    k_flash<T, WARPS, D><<<grid, 32 * WARPS, bytes, s>>>(*p);
    return cudaGetLastError();
}

// Blocks of four warps share their key and value tiles; where that leaves too few blocks to fill
// the device (a batch of one), blocks of one warp.
template <typename T> cudaError_t launch_any(const kn_cu_flash *p, cudaStream_t s) {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) sms = 100;
    const bool small = ((p->sq + 63) / 64) * p->b0 * p->b1 < 2 * sms;
    if (p->d == 64) return small ? launch<T, 1, 64>(p, s) : launch<T, 4, 64>(p, s);
    return small ? launch<T, 1, 128>(p, s) : launch<T, 4, 128>(p, s);
}

} // namespace

extern "C" cudaError_t kn_cu_flash_attention(kiln_dtype dt, const kn_cu_flash *p, cudaStream_t s) {
    if ((p->d != 64 && p->d != 128) || p->b0 * p->b1 > 65535 || p->b0 * p->b1 < 1 || p->sq < 1 || p->sk < 1 ||
        (p->sq + 15) / 16 > 2147483647LL)
        return cudaErrorNotSupported;
    if (dt == KILN_DTYPE_FLOAT16) return launch_any<f16>(p, s);
    if (dt == KILN_DTYPE_BFLOAT16) return launch_any<bf16>(p, s);
    return cudaErrorNotSupported;
}

// kiln.Attention in one kernel for float32 with head size 32, 64 or 128: the flash form of
// cu_flash_attention.cu (the scores never leave the chip, an online softmax over key blocks) on
// the CUDA cores in float, the precision the node asks for (tensor cores would take TF32).
//
// Why: the general form of float32 attention writes the scores, adds the mask in a pass of its
// own, runs the softmax in another and, where the operands are head views of [B, S, H*D] (BERT,
// ViT), copies Q, K, V and Y to and from dense buffers around the two products: BERT-base at
// batch 32 spent 3.6 of its 21 ms there on an H100 (KILN_PROFILE,
// bench/results/gpu-peers-2026-12-07-h100-fp32.md).
//
// A block of 256 threads takes 64 query rows of one (batch, head) and walks the keys 64 at a
// time. Thread (ty, tx) of a 16 x 16 grid holds the scores of rows 4 ty.. and keys 4 tx.., and
// the output of the same rows for head columns D/16 tx..; a row's 16 threads are one half-warp,
// so its maximum and sum are shuffles. Q and K are kept head-dim-major in shared memory (four
// rows or keys a 16-byte read), the probabilities are handed to the second product through
// shared memory, transposed the same way.
#include "backend/cuda/cu_common.cuh"

#include <stdint.h>

using namespace kncu;

namespace {

constexpr int BM = 64, BN = 64, THREADS = 256;
constexpr int LQ = BM + 4, LK = BN + 4, LP = BM + 4; // padded, still 16-byte aligned rows

template <int D> constexpr size_t smem_floats() { return (size_t)D * LQ + (size_t)D * LK + (size_t)BN * D + (size_t)BN * LP; }

// rows x cols floats of a strided source into dst (dst index of element (r, c): r * drs + c * dcs);
// rows past n_rows and columns past n_cols are zeros. The column index runs fastest across
// threads when the source's columns are contiguous (cs == 1), else the row index. Loads go in
// chunks of 8 a thread, all in flight before their stores (one round trip to memory per chunk).
template <int ROWS, int COLS>
__device__ __forceinline__ void load_tile(float *dst, int drs, int dcs, const float *src, int64_t rs, int64_t cs,
                                          int64_t n_rows, int64_t n_cols) {
    constexpr int PER = ROWS * COLS / THREADS, CHUNK = PER < 8 ? PER : 8;
    const bool col_fast = cs == 1;
#pragma unroll 1
    for (int u0 = 0; u0 < PER; u0 += CHUNK) {
        float r[CHUNK];
#pragma unroll
        for (int u = 0; u < CHUNK; u++) {
            const int e = threadIdx.x + (u0 + u) * THREADS;
            const int row = col_fast ? e / COLS : e % ROWS, col = col_fast ? e % COLS : e / ROWS;
            r[u] = row < n_rows && col < n_cols ? src[row * rs + col * cs] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < CHUNK; u++) {
            const int e = threadIdx.x + (u0 + u) * THREADS;
            const int row = col_fast ? e / COLS : e % ROWS, col = col_fast ? e % COLS : e / ROWS;
            dst[row * drs + col * dcs] = r[u];
        }
    }
}

template <int D> __global__ void __launch_bounds__(THREADS, D == 32 ? 2 : 1) k_flash_f32(kn_cu_flash p) {
    constexpr int DPT = D / 16; // head columns of the output per thread
    extern __shared__ __align__(16) float smem[];
    float *sQ = smem;         // [D][LQ]: Q transposed
    float *sK = sQ + D * LQ;  // [D][LK]: K with the head dim first
    float *sV = sK + D * LK;  // [BN][D]
    float *sP = sV + BN * D;  // [BN][LP]: the probabilities, transposed

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t b0 = blockIdx.y / p.b1, b1 = blockIdx.y % p.b1;
    const int64_t i0 = (int64_t)blockIdx.x * BM;
    const float *q = (const float *)p.q + b0 * p.q_s0 + b1 * p.q_s1;
    const float *k = (const float *)p.k + b0 * p.k_s0 + b1 * p.k_s1;
    const float *v = (const float *)p.v + b0 * p.v_s0 + b1 * p.v_s1;
    float *y = (float *)p.y + b0 * p.y_s0 + b1 * p.y_s1;
    const unsigned char *mb = p.mask_bool ? (const unsigned char *)p.mask + b0 * p.m_s0 + b1 * p.m_s1 : NULL;
    const float *mf = p.mask && !p.mask_bool ? (const float *)p.mask + b0 * p.m_s0 + b1 * p.m_s1 : NULL;

    load_tile<BM, D>(sQ, 1, LQ, q + i0 * p.q_si, p.q_si, 1, p.sq - i0, D);

    float m_run[4], l_run[4], o[4][DPT];
#pragma unroll
    for (int a = 0; a < 4; a++) {
        m_run[a] = -INFINITY, l_run[a] = 0.0f;
#pragma unroll
        for (int e = 0; e < DPT; e++) o[a][e] = 0.0f;
    }

    for (int64_t j0 = 0; j0 < p.sk; j0 += BN) {
        __syncthreads(); // the previous block's tiles and probabilities are used up
        load_tile<BN, D>(sK, 1, LK, k + j0 * p.k_sj, p.k_sj, p.k_sc, p.sk - j0, D);
        load_tile<BN, D>(sV, D, 1, v + j0 * p.v_sj, p.v_sj, 1, p.sk - j0, D);
        __syncthreads();

        float s[4][4];
#pragma unroll
        for (int a = 0; a < 4; a++) s[a][0] = s[a][1] = s[a][2] = s[a][3] = 0.0f;
#pragma unroll 8
        for (int c = 0; c < D; c++) {
            const float4 qa = *(const float4 *)(sQ + c * LQ + ty * 4), kb = *(const float4 *)(sK + c * LK + tx * 4);
            const float qv[4] = {qa.x, qa.y, qa.z, qa.w}, kv[4] = {kb.x, kb.y, kb.z, kb.w};
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int b = 0; b < 4; b++) s[a][b] = fmaf(qv[a], kv[b], s[a][b]);
        }

        // scale, mask, and the online softmax's running maximum per row
#pragma unroll
        for (int a = 0; a < 4; a++) {
            const int64_t i = i0 + ty * 4 + a;
            float mx = -INFINITY;
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const int64_t j = j0 + tx * 4 + b;
                float x = s[a][b] * p.scale;
                if (j >= p.sk || i >= p.sq) x = -INFINITY;
                else if (mb) x = mb[i * p.m_si + j * p.m_sj] ? x : -INFINITY;
                else if (mf) x += mf[i * p.m_si + j * p.m_sj];
                s[a][b] = x;
                mx = fmaxf(mx, x);
            }
#pragma unroll
            for (int off = 1; off < 16; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float m_new = fmaxf(m_run[a], mx);
            // a row with no key seen yet keeps zeros (exp of -inf - -inf would be NaN)
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = expf(m_run[a] - m_use);
            m_run[a] = m_new;
            l_run[a] *= alpha;
#pragma unroll
            for (int e = 0; e < DPT; e++) o[a][e] *= alpha;
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const float pr = expf(s[a][b] - m_use);
                l_run[a] += pr;
                sP[(tx * 4 + b) * LP + ty * 4 + a] = pr;
            }
        }
        __syncthreads();

        // the second product: this thread's rows times V's columns D/16 tx..
#pragma unroll 4
        for (int j = 0; j < BN; j++) {
            const float4 pj = *(const float4 *)(sP + j * LP + ty * 4);
            const float pv[4] = {pj.x, pj.y, pj.z, pj.w};
            float vv[DPT];
#pragma unroll
            for (int e = 0; e < DPT; e++) vv[e] = sV[j * D + tx * DPT + e];
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int e = 0; e < DPT; e++) o[a][e] = fmaf(pv[a], vv[e], o[a][e]);
        }
    }

    // a row whose every key is masked out has no softmax (0/0: NaN), which nan_to_zero makes 0
#pragma unroll
    for (int a = 0; a < 4; a++) {
        float l = l_run[a];
#pragma unroll
        for (int off = 1; off < 16; off <<= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
        const int64_t i = i0 + ty * 4 + a;
        if (i >= p.sq) continue;
        const bool empty = !(l > 0.0f);
        const float inv = empty ? 0.0f : 1.0f / l, fill = p.nan_to_zero ? 0.0f : NAN;
        float *yr = y + i * p.y_si + tx * DPT;
#pragma unroll
        for (int e = 0; e < DPT; e++) yr[e] = empty ? fill : o[a][e] * inv;
    }
}

template <int D> cudaError_t launch(const kn_cu_flash *p, cudaStream_t s) {
    const size_t bytes = smem_floats<D>() * sizeof(float);
    // per device: set on every launch (a host call, no stream work, so graph capture allows it)
    // a device with less shared memory a block than the tiles need: the general form instead
    if (cudaFuncSetAttribute(k_flash_f32<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) != cudaSuccess) {
        cudaGetLastError();
        return cudaErrorNotSupported;
    }
    dim3 grid((unsigned)((p->sq + BM - 1) / BM), (unsigned)(p->b0 * p->b1));
    k_flash_f32<D><<<grid, THREADS, bytes, s>>>(*p);
    return cudaGetLastError();
}

} // namespace

// cudaErrorNotSupported (nothing launched) where the kernel does not apply: the caller runs the
// general form. Q, V and Y have their head dim contiguous (the caller checks); K either dim.
// By default only where it was measured faster than the general form: grids of at least 256 blocks
// (two a multiprocessor on an H100 or H200). BERT-base b32 (768 blocks) on an H100, kiln bench
// --io device, CUDA graphs: 17.4 ms a run against 19.6 (bench/results/gpu-fp32-attention-2026-12-07.md).
// Smaller grids (batch 1: BERT-base 24 blocks) leave most of the device idle and were not measured;
// p->force (KILN_CUDA_FLASH=1) takes them too.
extern "C" cudaError_t kn_cu_flash_attention_f32(const kn_cu_flash *p, cudaStream_t s) {
    if (!p->force && (p->sq + BM - 1) / BM * p->b0 * p->b1 < 256) return cudaErrorNotSupported;
    if ((p->d != 32 && p->d != 64 && p->d != 128) || p->b0 < 1 || p->b1 < 1 || p->b0 * p->b1 > 65535 || p->sq < 1 ||
        p->sk < 1 || (p->sq + BM - 1) / BM > 2147483647LL || (p->k_sj != 1 && p->k_sc != 1))
        return cudaErrorNotSupported;
    if (p->d == 32) return launch<32>(p, s);
    if (p->d == 64) return launch<64>(p, s);
    return launch<128>(p, s);
}

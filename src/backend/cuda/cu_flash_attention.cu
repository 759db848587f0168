// kiln.Attention in one kernel for float16/bfloat16 with head size 32, 64 or 128 (flash attention:
// the scores never leave the chip). A block takes 16 query rows per warp of one (batch, head) and
// walks the keys 64 at a time with an online softmax: per key block the scores come from tensor
// cores (mma.sync m16n8k16, float accumulation), the running row maximum rescales the sum and the
// output accumulators, and the probabilities go straight from the score registers into the second
// product's operand registers (the accumulator layout of m16n8 is the operand layout of m16k16).
//
// Operands are read through strides, so a head split or merge that is a view of a larger tensor
// (the optimiser folds such Transposes and Reshapes into the node) costs nothing: Q, V and Y rows
// have their head dim contiguous; K is either [key][d] (d contiguous) or transposed [d][key] (key
// contiguous), each with its own shared-memory layout and fragment load (ldmatrix with or without
// .trans). Shared-memory rows are padded by 16 bytes, so the eight rows an ldmatrix reads fall on
// different banks.
//
// Rounding: a score is rounded to the input type after scaling (the first product's output) and
// again after an additive mask (the add's output), as the general form does; the probabilities are
// rounded to the input type unnormalised (exp(s - running max)) for the second product, and the
// output is divided by the row sum in float. Against the general form (normalised probabilities
// rounded) that is a difference within the type's precision.
#include "backend/cuda/cu_common.cuh"

#include <stdint.h>

using namespace kncu;

namespace {

constexpr int BN = 64; // keys per step

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ f16 from_float<f16>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }
template <typename T> __device__ __forceinline__ float round_to(float x) { return ld(from_float<T>(x)); }

// two floats as one register of two T (the low half first, as the fragments want)
template <typename T> __device__ __forceinline__ uint32_t pack2(float a, float b);
template <> __device__ __forceinline__ uint32_t pack2<f16>(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *(uint32_t *)&h;
}
template <> __device__ __forceinline__ uint32_t pack2<bf16>(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(uint32_t *)&h;
}

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x2_t(uint32_t (&r)[2], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(p)));
}

// d += a * b for one m16n8k16 tile, float accumulation
template <typename T> __device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);
template <> __device__ __forceinline__ void mma16816<f16>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> __device__ __forceinline__ void mma16816<bf16>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// rows x cols of T (cols a multiple of 8) from src (row stride rs, columns contiguous) into dst
// with row stride lds; rows past n_rows and columns past n_cols are zeros. 16-byte loads where the
// source rows allow them.
template <typename T>
__device__ __forceinline__ void load_tile(T *dst, int lds, const T *src, int rows, int cols, int64_t rs, int64_t n_rows,
                                          int64_t n_cols, bool vec) {
    const int tid = threadIdx.x, nt = blockDim.x;
    const int wpr = cols / 8; // 16-byte words per row
    if (vec) {
        for (int e = tid; e < rows * wpr; e += nt) {
            const int r = e / wpr, c = (e % wpr) * 8;
            uint4 w = make_uint4(0, 0, 0, 0);
            if (r < n_rows && c + 8 <= n_cols) w = *(const uint4 *)(src + r * rs + c);
            else if (r < n_rows) {
                T tmp[8];
                for (int x = 0; x < 8; x++) tmp[x] = c + x < n_cols ? src[r * rs + c + x] : from_float<T>(0.0f);
                w = *(uint4 *)tmp;
            }
            *(uint4 *)(dst + r * lds + c) = w;
        }
        return;
    }
    for (int e = tid; e < rows * cols; e += nt) {
        const int r = e / cols, c = e % cols;
        dst[r * lds + c] = r < n_rows && c < n_cols ? src[r * rs + c] : from_float<T>(0.0f);
    }
}

// A tile of ROWS x COLS elements (COLS a multiple of 8) in 16-byte words, NT threads: word u of this
// thread is element row e / (COLS / 8), column (e % (COLS / 8)) * 8 with e = threadIdx.x + u * NT.
// Loads and stores apart, in chunks of CHUNK words a thread: every load of a chunk is in flight at
// once (a loop that stored each word before loading the next waited for memory once per word:
// four round trips per tile for BERT-base's heads, the most of the kernel's time at batch 32).
template <typename T, int ROWS, int COLS, int NT> struct VecTile {
    static constexpr int WPR = COLS / 8, WORDS = ROWS * WPR, PER = (WORDS + NT - 1) / NT;
    __device__ static __forceinline__ uint4 fetch(const T *src, int64_t rs, int64_t n_rows, int64_t n_cols, int u) {
        const int e = threadIdx.x + u * NT, r = e / WPR, c = (e % WPR) * 8;
        uint4 w = make_uint4(0, 0, 0, 0);
        if (e < WORDS && r < n_rows) {
            if (c + 8 <= n_cols) w = *(const uint4 *)(src + r * rs + c);
            else {
                T tmp[8];
                for (int x = 0; x < 8; x++) tmp[x] = c + x < n_cols ? src[r * rs + c + x] : from_float<T>(0.0f);
                w = *(uint4 *)tmp;
            }
        }
        return w;
    }
    __device__ static __forceinline__ void store(T *dst, int lds, int u, uint4 w) {
        const int e = threadIdx.x + u * NT;
        if (e < WORDS) *(uint4 *)(dst + (e / WPR) * lds + (e % WPR) * 8) = w;
    }
};

constexpr int CHUNK = 4;

// Two tiles (A and B) loaded together, CHUNK words of each in flight per thread.
template <typename T, typename TA, typename TB>
__device__ __forceinline__ void load_tiles_vec(T *da, int lda, const T *sa, int64_t rsa, int64_t ra, int64_t ca, T *db,
                                               int ldb, const T *sb, int64_t rsb, int64_t rb, int64_t cb) {
    constexpr int PER = TA::PER > TB::PER ? TA::PER : TB::PER;
#pragma unroll
    for (int u0 = 0; u0 < PER; u0 += CHUNK) {
        uint4 wa[CHUNK], wb[CHUNK];
#pragma unroll
        for (int u = 0; u < CHUNK; u++) {
            if (u0 + u < TA::PER) wa[u] = TA::fetch(sa, rsa, ra, ca, u0 + u);
            if (u0 + u < TB::PER) wb[u] = TB::fetch(sb, rsb, rb, cb, u0 + u);
        }
#pragma unroll
        for (int u = 0; u < CHUNK; u++) {
            if (u0 + u < TA::PER) TA::store(da, lda, u0 + u, wa[u]);
            if (u0 + u < TB::PER) TB::store(db, ldb, u0 + u, wb[u]);
        }
    }
}

// KT: K arrives transposed ([d][key], keys contiguous); else [key][d].
template <typename T, int WARPS, int D, bool KT> __global__ void __launch_bounds__(32 * WARPS) k_flash(kn_cu_flash p) {
    constexpr int BM = 16 * WARPS;
    constexpr int LDQ = D + 8, LDV = D + 8;
    constexpr int LDK = KT ? BN + 8 : D + 8;
    extern __shared__ __align__(128) unsigned char smem[];
    T *sQ = (T *)smem;                 // [BM][LDQ]
    T *sK = sQ + BM * LDQ;             // [BN][LDK] or, transposed, [D][LDK]
    T *sV = sK + (KT ? D : BN) * LDK;  // [BN][LDV]

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
    const bool vk = (KT ? p.k_sc : p.k_sj) % 8 == 0 && ((uintptr_t)k & 15) == 0;
    const bool vv = p.v_sj % 8 == 0 && ((uintptr_t)v & 15) == 0;

    if (vq) { /* (a tile of no words as the second) */
        typedef VecTile<T, BM, D, 32 * WARPS> TQ;
        typedef VecTile<T, 0, 8, 32 * WARPS> TNone;
        load_tiles_vec<T, TQ, TNone>(sQ, LDQ, q + i0 * p.q_si, p.q_si, p.sq - i0, D, NULL, 0, NULL, 0, 0, 0);
    } else {
        load_tile(sQ, LDQ, q + i0 * p.q_si, BM, D, p.q_si, p.sq - i0, D, vq);
    }
    __syncthreads();

    // the warp's 16 query rows as operand fragments, for the whole head dim
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        ldsm_x4(qf[kk], sQ + (warp * 16 + (lane & 15)) * LDQ + kk * 16 + (lane >> 4) * 8);

    // this lane's rows (r = 0: lane / 4, r = 1: lane / 4 + 8) and columns (2 * (lane % 4) + {0, 1})
    const int64_t rowA = i0 + warp * 16 + (lane >> 2), rowB = rowA + 8;
    const int colq = 2 * (lane & 3);
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    constexpr float LOG2E = 1.4426950408889634f;

    for (int64_t j0 = 0; j0 < p.sk; j0 += BN) {
        __syncthreads(); // every warp is done with the previous block's tiles
        if (vk && vv) {
            typedef VecTile<T, KT ? D : BN, KT ? BN : D, 32 * WARPS> TK;
            typedef VecTile<T, BN, D, 32 * WARPS> TV;
            if (KT)
                load_tiles_vec<T, TK, TV>(sK, LDK, k + j0, p.k_sc, D, p.sk - j0, sV, LDV, v + j0 * p.v_sj, p.v_sj,
                                          p.sk - j0, D);
            else
                load_tiles_vec<T, TK, TV>(sK, LDK, k + j0 * p.k_sj, p.k_sj, p.sk - j0, D, sV, LDV, v + j0 * p.v_sj,
                                          p.v_sj, p.sk - j0, D);
        } else {
            if (KT) load_tile(sK, LDK, k + j0, D, BN, p.k_sc, D, p.sk - j0, vk);
            else load_tile(sK, LDK, k + j0 * p.k_sj, BN, D, p.k_sj, p.sk - j0, D, vk);
            load_tile(sV, LDV, v + j0 * p.v_sj, BN, D, p.v_sj, p.sk - j0, D, vv);
        }
        __syncthreads();

        float s[BN / 8][4];
#pragma unroll
        for (int n = 0; n < BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
            for (int n = 0; n < BN / 8; n++) {
                uint32_t b[2];
                const int l16 = lane & 15;
                if (KT) ldsm_x2_t(b, sK + (kk * 16 + l16) * LDK + n * 8);
                else ldsm_x2(b, sK + (n * 8 + (l16 & 7)) * LDK + kk * 16 + (l16 >> 3) * 8);
                mma16816<T>(s[n], qf[kk], b);
            }

        // scale, mask, and the block's row maxima
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < BN / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t i = e < 2 ? rowA : rowB, j = j0 + n * 8 + colq + (e & 1);
                float x = round_to<T>(s[n][e] * p.scale); // the first product's output
                if (j >= p.sk || i >= p.sq) x = -INFINITY;
                else if (mb) x = mb[i * p.m_si + j * p.m_sj] ? x : -INFINITY;
                else if (mf) x = round_to<T>(x + ld(mf[i * p.m_si + j * p.m_sj])); // the mask add's output
                s[n][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        float alpha[2], m_use[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float m_new = fmaxf(m_run[r], mx[r]);
            // a row with no key seen yet keeps zeros (exp of -inf - -inf would be NaN)
            m_use[r] = m_new == -INFINITY ? 0.0f : m_new;
            alpha[r] = exp2f((m_run[r] - m_use[r]) * LOG2E);
            m_run[r] = m_new;
            l_run[r] *= alpha[r];
        }
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            o[n][0] *= alpha[0], o[n][1] *= alpha[0];
            o[n][2] *= alpha[1], o[n][3] *= alpha[1];
        }
        // probabilities (unnormalised), their row sums, and the second product
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t a[4];
            float pr[2][4];
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float x = exp2f((s[2 * kk + h][e] - m_use[e >> 1]) * LOG2E);
                    pr[h][e] = round_to<T>(x);
                    l_run[e >> 1] += pr[h][e];
                }
            a[0] = pack2<T>(pr[0][0], pr[0][1]);
            a[1] = pack2<T>(pr[0][2], pr[0][3]);
            a[2] = pack2<T>(pr[1][0], pr[1][1]);
            a[3] = pack2<T>(pr[1][2], pr[1][3]);
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                uint32_t b[2];
                ldsm_x2_t(b, sV + (kk * 16 + (lane & 15)) * LDV + n * 8);
                mma16816<T>(o[n], a, b);
            }
        }
    }

    // the output: a row whose every key is masked out has no softmax (0/0: NaN), which
    // nan_to_zero turns into 0
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t i = r ? rowB : rowA;
        if (i >= p.sq) continue;
        const bool empty = !(l_run[r] > 0.0f);
        const float inv = empty ? 0.0f : 1.0f / l_run[r];
        const float fill = p.nan_to_zero ? 0.0f : NAN;
        T *yr = y + i * p.y_si;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const float a = empty ? fill : o[n][2 * r] * inv, b = empty ? fill : o[n][2 * r + 1] * inv;
            *(uint32_t *)(yr + n * 8 + colq) = pack2<T>(a, b);
        }
    }
}

template <int WARPS, int D, bool KT, typename T> constexpr size_t smem_bytes() {
    return sizeof(T) * (16 * WARPS * (D + 8) + (KT ? D * (BN + 8) : BN * (D + 8)) + BN * (D + 8));
}

template <typename T, int WARPS, int D, bool KT> cudaError_t launch(const kn_cu_flash *p, cudaStream_t s) {
    const size_t bytes = smem_bytes<WARPS, D, KT, T>();
    // per device: set on every launch (a host call, no stream work, so graph capture allows it)
    // a device with less shared memory a block than the tiles need: the general form instead
    if (cudaFuncSetAttribute(k_flash<T, WARPS, D, KT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) != cudaSuccess) {
        cudaGetLastError();
        return cudaErrorNotSupported;
    }
    constexpr int BM = 16 * WARPS;
    dim3 grid((unsigned)((p->sq + BM - 1) / BM), (unsigned)(p->b0 * p->b1));
    k_flash<T, WARPS, D, KT><<<grid, 32 * WARPS, bytes, s>>>(*p);
    return cudaGetLastError();
}

template <typename T, int D, bool KT> cudaError_t launch_warps(const kn_cu_flash *p, cudaStream_t s, int warps) {
    if (warps == 1) return launch<T, 1, D, KT>(p, s);
    if (warps == 2) return launch<T, 2, D, KT>(p, s);
    return launch<T, 4, D, KT>(p, s);
}

template <typename T, bool KT> cudaError_t launch_d(const kn_cu_flash *p, cudaStream_t s, int warps) {
    if (p->d == 32) return launch_warps<T, 32, KT>(p, s, warps);
    if (p->d == 64) return launch_warps<T, 64, KT>(p, s, warps);
    return launch_warps<T, 128, KT>(p, s, warps);
}

// Blocks of four warps, which share their key and value tiles: also at batch 1, where they leave
// most of the device idle (ViT-B/16: 48 blocks) and still beat blocks of one or two warps (H200,
// fp16, kiln bench --io device, CUDA graphs: ViT-B/16 b1 0.763 / 0.700 / 0.688 ms with 1 / 2 / 4
// warps, BERT-base b1 0.647 / 0.637 / 0.626; the general form 0.808 and 0.694).
template <typename T> cudaError_t launch_any(const kn_cu_flash *p, cudaStream_t s) {
    const bool kt = p->k_sj == 1 && p->k_sc != 1;
    // By default only where it was measured faster than the general form on the H200: operand rows
    // that take 16-byte loads (BERT-base batch 32: 12 nodes in 0.58 ms against 1.96). Element-wise
    // loads (ViT-B/16's 197 keys transposed) ran slower; p->force (KILN_CUDA_FLASH=1) takes them too.
    const bool aligned16 = ((uintptr_t)p->q & 15) == 0 && ((uintptr_t)p->k & 15) == 0 && ((uintptr_t)p->v & 15) == 0;
    const bool rows8 = p->q_s0 % 8 == 0 && p->q_s1 % 8 == 0 && p->q_si % 8 == 0 && p->k_s0 % 8 == 0 &&
                       p->k_s1 % 8 == 0 && (kt ? p->k_sc : p->k_sj) % 8 == 0 && p->v_s0 % 8 == 0 && p->v_s1 % 8 == 0 &&
                       p->v_sj % 8 == 0;
    if (!p->force && (!aligned16 || !rows8)) return cudaErrorNotSupported;
    const int warps = p->warps == 1 || p->warps == 2 ? p->warps : 4;
    return kt ? launch_d<T, true>(p, s, warps) : launch_d<T, false>(p, s, warps);
}

} // namespace

extern "C" cudaError_t kn_cu_flash_attention(kiln_dtype dt, const kn_cu_flash *p, cudaStream_t s) {
    if (dt == KILN_DTYPE_FLOAT) return kn_cu_flash_attention_f32(p, s);
    if ((p->d != 32 && p->d != 64 && p->d != 128) || p->b0 * p->b1 > 65535 || p->b0 * p->b1 < 1 || p->sq < 1 ||
        p->sk < 1 || (p->sq + 15) / 16 > 2147483647LL)
        return cudaErrorNotSupported;
    // K must have one of its two dims contiguous; Y's rows are written two elements at a time
    if (!((p->k_sj == 1) || (p->k_sc == 1)) || p->y_si % 2 != 0 || p->y_s0 % 2 != 0 || p->y_s1 % 2 != 0 || ((uintptr_t)p->y & 3) != 0)
        return cudaErrorNotSupported;
    if (dt == KILN_DTYPE_FLOAT16) return launch_any<f16>(p, s);
    if (dt == KILN_DTYPE_BFLOAT16) return launch_any<bf16>(p, s);
    return cudaErrorNotSupported;
}

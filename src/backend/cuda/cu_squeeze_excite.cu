// kiln.SqueezeExcite on CUDA: Y = X * gate(W2 act(W1 mean(X) + B1) + B2), float accumulation.
//
// Two or three launches where the unfused block took four nodes (a pool, two cuDNN / cuBLASLt
// pointwise convolutions with their epilogues, an elementwise Mul):
//   pool   (large X[n] only) partial channel sums over segments of the positions, many blocks, into
//          scratch part[seg][n][c]
//   gate   per batch items (up to 4) and channel chunk: the means (from part, or from X itself
//          when X[n] is small: KILN_CUDA_SE_POOL_LIMIT), hidden = act(W1 m + B1), then the gate
//          for its channels into scratch gate[n][c]; both products by teams of lanes a weight row,
//          in 16-byte words where the rows allow (launch latency, not arithmetic, bounds them)
//   scale  Y = X * gate, in 16-byte words where the rows allow
// Every launch is on the caller's stream with scratch the caller provides: no allocation, no host
// synchronisation, so the node records into a CUDA graph as the others do.
#include "backend/cuda/cu_common.cuh"

using namespace kncu;

namespace {

// The kn_act numbering of src/ops/fused.h (as kn_cu_epilogue's).
__device__ __forceinline__ float se_act(int act, float v, float p0, float p1) {
    switch (act) {
    case 1: return v > 0.0f ? v : 0.0f;
    case 2: return v < 0.0f ? p0 * v : v;
    case 3: return v < p0 ? p0 : (v > p1 ? p1 : v);
    case 4: return v >= 0.0f ? 1.0f / (1.0f + expf(-v)) : expf(v) / (1.0f + expf(v));
    case 5: return tanhf(v);
    case 6: {
        float t = p0 * v + p1;
        return t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
    }
    case 7: {
        float t = v / 6.0f + 0.5f;
        return v * (t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t));
    }
    case 8: return v * (v >= 0.0f ? 1.0f / (1.0f + expf(-v)) : expf(v) / (1.0f + expf(v)));
    case 9: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case 10: return 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    default: return v;
    }
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

constexpr int POOL_SEG = 256;   // positions per NCHW pool segment
constexpr int NHWC_CH = 64;     // channels per NHWC pool block
constexpr int GATE_THREADS = 512;

// NCHW pool: warp w of the block sums row r = blockIdx.x * 8 + w (r = n * C + c) over the
// positions of segment blockIdx.y, four loads in flight per lane.
template <typename T>
__global__ void k_pool_nchw(const T *__restrict__ x, float *__restrict__ part, int64_t rows, int64_t S, int64_t seg_len) {
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    const int lane = threadIdx.x % 32;
    const int64_t s0 = (int64_t)blockIdx.y * seg_len, s1 = s0 + seg_len < S ? s0 + seg_len : S;
    const T *row = x + r * S;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    int64_t s = s0 + lane;
    for (; s + 96 < s1; s += 128) {
        a0 += (float)ld(row[s]);
        a1 += (float)ld(row[s + 32]);
        a2 += (float)ld(row[s + 64]);
        a3 += (float)ld(row[s + 96]);
    }
    for (; s < s1; s += 32) a0 += (float)ld(row[s]);
    const float acc = warp_sum((a0 + a1) + (a2 + a3));
    if (lane == 0) part[(int64_t)blockIdx.y * rows + r] = acc;
}

// NHWC pool: block (channel chunk blockIdx.x, segment blockIdx.y, batch item n0 + blockIdx.z); thread t
// sums channel chunk * 64 + t % 64 over the segment's positions t / 64, + 4, ...
template <typename T>
__global__ void k_pool_nhwc(const T *__restrict__ x, float *__restrict__ part, int64_t N, int64_t C, int64_t S,
                            int64_t seg_len, int64_t n0) {
    __shared__ float sums[256];
    const int64_t n = n0 + blockIdx.z, c = (int64_t)blockIdx.x * NHWC_CH + threadIdx.x % NHWC_CH;
    const int lane_p = threadIdx.x / NHWC_CH, lanes = blockDim.x / NHWC_CH;
    const int64_t s0 = (int64_t)blockIdx.y * seg_len, s1 = s0 + seg_len < S ? s0 + seg_len : S;
    float acc = 0.0f;
    if (c < C) {
        const T *base = x + n * S * C + c;
        float a1 = 0.0f;
        int64_t s = s0 + lane_p;
        for (; s + lanes < s1; s += 2 * lanes) { // two loads in flight
            acc += (float)ld(base[s * C]);
            a1 += (float)ld(base[(s + lanes) * C]);
        }
        if (s < s1) acc += (float)ld(base[s * C]);
        acc += a1;
    }
    sums[threadIdx.x] = acc;
    __syncthreads();
    if (lane_p == 0 && c < C) {
        for (int k = 1; k < lanes; k++) acc += sums[threadIdx.x + k * NHWC_CH];
        part[(int64_t)blockIdx.y * N * C + n * C + c] = acc;
    }
}

struct se_args {
    const void *x, *w1, *b1, *w2, *b2;
    float *part, *gate;
    int64_t N, C, M, S;
    int n_seg;      // pool segments in part; 0: the gate kernel pools X itself
    int chunk;      // channels per gate block
    int nb;         // batch items per gate block
    int max_team;   // lanes a weight row at most (kn_cu_se_tuning)
    bool nhwc;
    bool vec_x;     // X read in 16-byte words by the gate's channels-last pool (C % V == 0, aligned)
    bool vec_w1;    // W1's rows in 16-byte words (C % V == 0, aligned)
    bool vec_w2;    // W2's rows likewise (M % V == 0)
    int act, gate_act;
    float a0, a1, g0, g1;
};

constexpr int GATE_NB = 4;

// V consecutive elements as floats: one 16-byte load where V > 1
template <typename T, int V> __device__ __forceinline__ void load_words(const T *p, float *out) {
    if constexpr (V == 1) {
        out[0] = (float)ld(p[0]);
    } else {
        static_assert(sizeof(T) * V == 16, "a word is 16 bytes");
        const uint4 u = *(const uint4 *)p;
        const T *e = (const T *)&u;
#pragma unroll
        for (int q = 0; q < V; q++) out[q] = (float)ld(e[q]);
    }
}

// Rows r0..r1 of the row-major weights w [.., len] times nb vectors in shared memory (vector k at
// vec + k * len; 16-byte aligned where V >= 4, len then a multiple of V), out(row, k, sum) for each.
// A team of lanes takes a row: as many lanes as the row has V-element words, at most max_team (a
// power of two up to a warp), so that short rows (W2's, of M hidden values) keep every lane busy
// and long ones have many loads in flight at once, across a warp (32) or across the rows of several
// smaller teams. The loop over rows is the same for the whole warp (the teams' shuffles need every lane).
template <typename T, int V, typename Out>
__device__ __forceinline__ void weight_rows(const T *__restrict__ w, int64_t r0, int64_t r1, int64_t len,
                                            const float *vec, int nb, int max_team, Out out) {
    const int64_t words = len / V;
    int team = 1;
    while (team < max_team && team < words) team *= 2;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const int per_warp = 32 / team, tl = lane % team;
    for (int64_t base = r0 + (int64_t)warp * per_warp; base < r1; base += (int64_t)warps * per_warp) {
        const int64_t r = base + lane / team;
        float s[GATE_NB] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (r < r1) {
            const T *row = w + r * len;
            // a lane's words in blocks of WORDS_A_BLOCK, each summed apart and then added to s: a
            // lane that takes a whole long row (team 1) would otherwise add thousands of products
            // into one float in turn, its rounding growing with the row (2e-5 off at 4000 channels)
            constexpr int WORDS_A_BLOCK = 8;
            for (int64_t j0 = tl; j0 < words; j0 += (int64_t)WORDS_A_BLOCK * team) {
                const int64_t j1 = j0 + (int64_t)WORDS_A_BLOCK * team < words ? j0 + (int64_t)WORDS_A_BLOCK * team : words;
                float t[GATE_NB] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
                for (int64_t j = j0; j < j1; j += team) {
                    float wv[V];
                    load_words<T, V>(row + j * V, wv);
#pragma unroll
                    for (int k = 0; k < GATE_NB; k++)
                        if (k < nb) {
                            const float *v = vec + k * len + j * V;
                            if constexpr (V >= 4) { // float4 reads: a scalar read at a stride of V floats
                                                     // was a V-way bank conflict
#pragma unroll
                                for (int q = 0; q < V; q += 4) {
                                    const float4 u = *(const float4 *)(v + q);
                                    t[k] += wv[q] * u.x;
                                    t[k] += wv[q + 1] * u.y;
                                    t[k] += wv[q + 2] * u.z;
                                    t[k] += wv[q + 3] * u.w;
                                }
                            } else {
#pragma unroll
                                for (int q = 0; q < V; q++) t[k] += wv[q] * v[q];
                            }
                        }
                }
#pragma unroll
                for (int k = 0; k < GATE_NB; k++) s[k] += t[k];
            }
        }
#pragma unroll
        for (int k = 0; k < GATE_NB; k++)
            for (int o = team / 2; o > 0; o >>= 1) s[k] += __shfl_xor_sync(0xffffffffu, s[k], o);
        if (r < r1 && tl == 0)
            for (int k = 0; k < nb; k++) out(r, k, s[k]);
    }
}

// Channel means of one channels-last item x [S, C] into mean[C], by the block: thread t takes V
// channels (a word) at positions t / (C / V), + P, ...; the P partial sums of each channel added in
// red, one word's component at a time (a fixed order: the same sums every run).
template <typename T, int V>
__device__ void pool_channels_last(const T *__restrict__ x, int64_t C, int64_t S, float inv, float *mean, float *red) {
    const int64_t groups = C / V;
    const int lanes_g = groups < (int64_t)blockDim.x ? (int)groups : (int)blockDim.x;
    const int P = (int)blockDim.x / lanes_g, gl = (int)threadIdx.x % lanes_g, pl = (int)threadIdx.x / lanes_g;
    for (int64_t g0 = 0; g0 < groups; g0 += lanes_g) {
        const int64_t g = g0 + gl;
        float s[V];
#pragma unroll
        for (int q = 0; q < V; q++) s[q] = 0.0f;
        if (pl < P && g < groups) {
#pragma unroll 2
            for (int64_t p = pl; p < S; p += P) {
                float v[V];
                load_words<T, V>(x + p * C + g * V, v);
#pragma unroll
                for (int q = 0; q < V; q++) s[q] += v[q];
            }
        }
#pragma unroll
        for (int q = 0; q < V; q++) {
            red[threadIdx.x] = s[q];
            __syncthreads();
            if (pl == 0 && g < groups) {
                float t = s[q];
                for (int k = 1; k < P; k++) t += red[k * lanes_g + gl];
                mean[g * V + q] = t * inv;
            }
            __syncthreads();
        }
    }
}

// where the gate's hidden values start in its shared memory: after nb x C means, on a 16-byte
// boundary (weight_rows reads them four at a time)
__host__ __device__ __forceinline__ int64_t hidden_offset(int64_t nb, int64_t C) { return (nb * C + 3) / 4 * 4; }

// Gate: block (batch items blockIdx.x * nb.., channel chunk blockIdx.y), nb <= GATE_NB items a
// block so that each row of W1 and W2 read serves all of them. Shared memory: nb x C means, then
// (from a 16-byte boundary) nb x M hidden values.
template <typename T>
__global__ void __launch_bounds__(GATE_THREADS) k_gate(se_args a) {
    constexpr int V = 16 / sizeof(T);
    extern __shared__ float4 sh4[];
    float *sh = (float *)sh4;
    __shared__ float red[GATE_THREADS];
    const int64_t C = a.C, M = a.M, S = a.S;
    const int64_t n0 = (int64_t)blockIdx.x * a.nb;
    const int nb = (int)(a.N - n0 < a.nb ? a.N - n0 : a.nb);
    float *mean = sh, *hidden = sh + hidden_offset(a.nb, C);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const float inv = 1.0f / (float)S;
    for (int k = 0; k < nb; k++) {
        const int64_t n = n0 + k;
        const T *x = (const T *)a.x + n * C * S;
        float *mk = mean + k * C;
        if (a.n_seg > 0) {
            for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
                float s = 0.0f;
                for (int j = 0; j < a.n_seg; j++) s += a.part[(int64_t)j * a.N * C + n * C + c];
                mk[c] = s * inv;
            }
        } else if (!a.nhwc) {
            for (int64_t c0 = 4 * warp; c0 < C; c0 += 4 * warps) { // a warp per 4 channel rows
                float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                for (int64_t p = lane; p < S; p += 32)
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        if (c0 + j < C) s[j] += (float)ld(x[(c0 + j) * S + p]);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const float v = warp_sum(s[j]);
                    if (lane == 0 && c0 + j < C) mk[c0 + j] = v * inv;
                }
            }
        } else if (a.vec_x) {
            pool_channels_last<T, V>(x, C, S, inv, mk, red);
        } else {
            pool_channels_last<T, 1>(x, C, S, inv, mk, red);
        }
    }
    __syncthreads();
    const T *w1 = (const T *)a.w1, *w2 = (const T *)a.w2, *b1 = (const T *)a.b1, *b2 = (const T *)a.b2;
    auto to_hidden = [&](int64_t m, int k, float v) {
        hidden[k * M + m] = se_act(a.act, v + (b1 ? (float)ld(b1[m]) : 0.0f), a.a0, a.a1);
    };
    if (a.vec_w1)
        weight_rows<T, V>(w1, 0, M, C, mean, nb, a.max_team, to_hidden);
    else
        weight_rows<T, 1>(w1, 0, M, C, mean, nb, a.max_team, to_hidden);
    __syncthreads();
    const int64_t c0 = (int64_t)blockIdx.y * a.chunk, c1 = c0 + a.chunk < C ? c0 + a.chunk : C;
    auto to_gate = [&](int64_t c, int k, float v) {
        a.gate[(n0 + k) * C + c] = se_act(a.gate_act, v + (b2 ? (float)ld(b2[c]) : 0.0f), a.g0, a.g1);
    };
    if (a.vec_w2)
        weight_rows<T, V>(w2, c0, c1, M, hidden, nb, a.max_team, to_gate);
    else
        weight_rows<T, 1>(w2, c0, c1, M, hidden, nb, a.max_team, to_gate);
}

// Y = X * gate, element by element; the gate of element i is gate[i / S] (NCHW) or
// gate[(i / (S C)) C + i % C] (NHWC).
template <typename T>
__global__ void k_scale(const T *__restrict__ x, const float *__restrict__ gate, T *__restrict__ y, int64_t total,
                        int64_t C, int64_t S, bool nhwc) {
    KNCU_LOOP(i, total) {
        const int64_t gi = nhwc ? (i / (S * C)) * C + i % C : i / S;
        y[i] = st<T>((float)ld(x[i]) * gate[gi]);
    }
}

// The same in 16-byte words of V elements, 32-bit indices: a word lies in one channel's row
// (NCHW, S % V == 0) or runs along V consecutive channels (NHWC, C % V == 0).
template <typename T, int V>
__global__ void k_scale_vec(const T *__restrict__ x, const float *__restrict__ gate, T *__restrict__ y, int32_t words,
                            int32_t C, int32_t S, bool nhwc) {
    static_assert(sizeof(T) * V == 16, "a word is 16 bytes");
    for (int32_t w = blockIdx.x * blockDim.x + threadIdx.x; w < words; w += blockDim.x * gridDim.x) {
        const int32_t i0 = w * V;
        uint4 xw = ((const uint4 *)x)[w];
        const T *xe = (const T *)&xw;
        T out[V];
        if (nhwc) {
            const float *g = gate + (i0 / (S * C)) * C + i0 % C;
            for (int k = 0; k < V; k++) out[k] = st<T>((float)ld(xe[k]) * g[k]);
        } else {
            const float g = gate[i0 / S];
            for (int k = 0; k < V; k++) out[k] = st<T>((float)ld(xe[k]) * g);
        }
        ((uint4 *)y)[w] = *(const uint4 *)out;
    }
}

// How the work is split: the pool's segments (0: the gate kernel pools), the gate's batch items
// per block and channel chunks.
struct se_plan {
    int n_seg, chunk, nb, gate_blocks;
    int64_t seg_len;
};

// the gate kernel's dynamic shared memory: the 48 KiB a launch has without opting in, less its
// static red[] (GATE_THREADS floats); of it, the widest C + M (up to 3 floats of padding before the
// hidden values)
constexpr size_t GATE_SHARED = 48 * 1024 - GATE_THREADS * sizeof(float);
constexpr int64_t GATE_WIDTH = (int64_t)(GATE_SHARED / sizeof(float)) - 3;

// batch items a gate block takes at most: as many as its shared memory holds, at most GATE_NB and
// t->max_items, at least 1
int64_t items_per_block(int64_t C, int64_t M, const kn_cu_se_tuning *t) {
    int64_t nb = GATE_WIDTH / (C + M);
    if (nb > GATE_NB) nb = GATE_NB;
    if (nb > t->max_items) nb = t->max_items;
    return nb < 1 ? 1 : nb;
}

se_plan plan_for(int64_t N, int64_t C, int64_t M, int64_t S, bool nhwc, const kn_cu_se_tuning *t) {
    const int64_t pool_limit = t->pool_limit;
    se_plan p;
    // the gate kernel reads X[n] itself while that is at most pool_limit elements; beyond, the
    // positions are split over many blocks first
    if (C * S <= pool_limit) {
        p.n_seg = 0;
        p.seg_len = S;
    } else {
        // NCHW: a warp per row of a segment; NHWC: 4 positions at a time a block, so shorter
        // segments (64) for as many blocks
        int64_t seg = nhwc ? 64 : POOL_SEG;
        int64_t n_seg = (S + seg - 1) / seg;
        if (n_seg > 64) {
            n_seg = 64;
            seg = (S + n_seg - 1) / n_seg;
        }
        p.n_seg = (int)(n_seg < 1 ? 1 : n_seg);
        p.seg_len = seg;
    }
    int64_t nb = items_per_block(C, M, t);
    if (nb > N) nb = N;
    p.nb = (int)(nb < 1 ? 1 : nb);
    // few batch items: the gate's channels over several blocks (each computes the hidden vector
    // again, from L2); many: one block per nb items
    const int64_t chunk = N >= 16 ? C : 128;
    p.chunk = (int)(chunk < C ? chunk : C);
    p.gate_blocks = (int)((C + p.chunk - 1) / p.chunk);
    return p;
}

template <typename T> cudaError_t launch(const se_args &in, const kn_cu_se_tuning *t, void *y, cudaStream_t s) {
    se_args a = in;
    const se_plan p = plan_for(a.N, a.C, a.M, a.S, a.nhwc, t);
    constexpr int V = 16 / sizeof(T);
    auto aligned = [](const void *q) { return (uintptr_t)q % 16 == 0; };
    a.vec_x = a.nhwc && a.C % V == 0 && aligned(a.x);
    a.vec_w1 = a.C % V == 0 && aligned(a.w1);
    a.vec_w2 = a.M % V == 0 && aligned(a.w2);
    a.n_seg = p.n_seg;
    a.chunk = p.chunk;
    a.nb = p.nb;
    if (p.n_seg > 0) {
        if (!a.nhwc) {
            const int64_t rows = a.N * a.C;
            dim3 grid((unsigned)((rows + 7) / 8), (unsigned)p.n_seg);
            k_pool_nchw<T><<<grid, 256, 0, s>>>((const T *)a.x, a.part, rows, a.S, p.seg_len);
        } else {
            // the batch on grid z, at most 65535 items a launch
            for (int64_t n0 = 0; n0 < a.N; n0 += 65535) {
                const int64_t nz = a.N - n0 < 65535 ? a.N - n0 : 65535;
                dim3 grid((unsigned)((a.C + NHWC_CH - 1) / NHWC_CH), (unsigned)p.n_seg, (unsigned)nz);
                k_pool_nhwc<T><<<grid, 256, 0, s>>>((const T *)a.x, a.part, a.N, a.C, a.S, p.seg_len, n0);
            }
        }
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    const size_t shared = sizeof(float) * (size_t)(hidden_offset(p.nb, a.C) + p.nb * a.M);
    k_gate<T><<<dim3((unsigned)((a.N + p.nb - 1) / p.nb), (unsigned)p.gate_blocks), GATE_THREADS, shared, s>>>(a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const int64_t total = a.N * a.C * a.S;
    const bool words = total % V == 0 && total < INT32_MAX && (uintptr_t)a.x % 16 == 0 &&
                       (uintptr_t)y % 16 == 0 && (a.nhwc ? a.C % V == 0 : a.S % V == 0);
    if (words) {
        const int32_t nw = (int32_t)(total / V);
        k_scale_vec<T, V><<<grid_for(nw, 256), 256, 0, s>>>((const T *)a.x, a.gate, (T *)y, nw, (int32_t)a.C,
                                                            (int32_t)a.S, a.nhwc);
    } else {
        k_scale<T><<<grid_for(total, 256), 256, 0, s>>>((const T *)a.x, a.gate, (T *)y, total, a.C, a.S, a.nhwc);
    }
    return cudaGetLastError();
}

} // namespace

extern "C" size_t kn_cu_squeeze_excite_scratch(int64_t N, int64_t C, int64_t M, int64_t S, bool nhwc,
                                               const kn_cu_se_tuning *t) {
    const se_plan p = plan_for(N, C, M, S, nhwc, t);
    return sizeof(float) * (size_t)(N * C) * (size_t)(1 + p.n_seg);
}

extern "C" int64_t kn_cu_squeeze_excite_max_width(void) { return GATE_WIDTH; }

extern "C" int64_t kn_cu_squeeze_excite_items(int64_t C, int64_t M, const kn_cu_se_tuning *t) {
    return items_per_block(C, M, t);
}

extern "C" cudaError_t kn_cu_squeeze_excite(kiln_dtype dt, const void *x, const void *w1, const void *b1, const void *w2,
                                            const void *b2, void *y, void *scratch, int64_t N, int64_t C, int64_t M,
                                            int64_t S, bool nhwc, const kn_cu_se_tuning *t, int act, float a0, float a1,
                                            int gate, float g0, float g1, cudaStream_t s) {
    if (N * C * S == 0) return cudaSuccess;
    if (C + M > kn_cu_squeeze_excite_max_width()) return cudaErrorNotSupported;
    se_args a;
    a.x = x, a.w1 = w1, a.b1 = b1, a.w2 = w2, a.b2 = b2;
    a.gate = (float *)scratch;
    a.part = a.gate + N * C;
    a.N = N, a.C = C, a.M = M, a.S = S;
    a.n_seg = 0, a.chunk = (int)C, a.nb = 1;
    a.nhwc = nhwc;
    a.max_team = t->max_team;
    a.act = act, a.gate_act = gate;
    a.a0 = a0, a.a1 = a1, a.g0 = g0, a.g1 = g1;
    switch (dt) {
    case KILN_DTYPE_FLOAT: return launch<float>(a, t, y, s);
    case KILN_DTYPE_FLOAT16: return launch<f16>(a, t, y, s);
    case KILN_DTYPE_BFLOAT16: return launch<bf16>(a, t, y, s);
    default: return cudaErrorNotSupported;
    }
}

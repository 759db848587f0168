// Reductions and normalisations: Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax,
// LayerNormalization/RMSNormalization, BatchNormalization (inference), Instance/Group
// normalisation, LpNormalization, pooling and TopK. Statistics are accumulated in fp32 (fp64 for
// double) whatever the element type.
#include "backend/cuda/cu_common.cuh"

#include <float.h>
#include <math.h>

using namespace kncu;

namespace {

// Accumulation type of reductions: fp32/fp64 for floats, int64 for integers.
template <typename T> struct racc { typedef typename acc<T>::type type; };
template <> struct racc<int8_t> { typedef int64_t type; };
template <> struct racc<int16_t> { typedef int64_t type; };
template <> struct racc<int32_t> { typedef int64_t type; };
template <> struct racc<uint8_t> { typedef int64_t type; };
template <> struct racc<uint16_t> { typedef int64_t type; };
template <> struct racc<uint32_t> { typedef int64_t type; };
template <> struct racc<uint64_t> { typedef int64_t type; };

template <typename A> __device__ __forceinline__ A lowest() {
    if constexpr (std::is_same<A, double>::value) return -INFINITY;
    else if constexpr (std::is_same<A, float>::value) return -INFINITY;
    else return (A)INT64_MIN;
}
template <typename A> __device__ __forceinline__ A highest() {
    if constexpr (std::is_same<A, double>::value) return INFINITY;
    else if constexpr (std::is_same<A, float>::value) return INFINITY;
    else return (A)INT64_MAX;
}

template <typename A> __device__ __forceinline__ A rinit(int op) {
    switch (op) {
    case KN_CU_RMAX: return lowest<A>();
    case KN_CU_RMIN: return highest<A>();
    case KN_CU_RPROD: return (A)1;
    case KN_CU_RLOGSUMEXP: return (A)0;
    default: return (A)0;
    }
}

template <typename A> __device__ __forceinline__ A rmap(int op, A v, A shift) {
    switch (op) {
    case KN_CU_RL1: return v < (A)0 ? -v : v;
    case KN_CU_RL2:
    case KN_CU_RSUMSQUARE: return v * v;
    case KN_CU_RLOGSUMEXP: return (A)exp((double)(v - shift));
    default: return v;
    }
}

template <typename A> __device__ __forceinline__ A rcombine(int op, A a, A b) {
    switch (op) {
    case KN_CU_RMAX: return (a != a || a > b) ? a : b;
    case KN_CU_RMIN: return (a != a || a < b) ? a : b;
    case KN_CU_RPROD: return a * b;
    default: return a + b;
    }
}

template <typename A> __device__ __forceinline__ A warp_reduce(int op, A v) {
    for (int o = 16; o > 0; o >>= 1) v = rcombine(op, v, (A)__shfl_down_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide reduction; every thread gets the result.
template <typename A> __device__ A block_reduce(int op, A v) {
    __shared__ A sh[32];
    __shared__ A result;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_reduce(op, v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        int nw = (blockDim.x + 31) >> 5;
        A w = lane < nw ? sh[lane] : rinit<A>(op == KN_CU_RMAX || op == KN_CU_RMIN || op == KN_CU_RPROD ? op : KN_CU_RSUM);
        w = warp_reduce(op, w);
        if (lane == 0) result = w;
    }
    __syncthreads();
    return result;
}

struct RedPlan {
    int nk, nr;
    int64_t kd[KN_CU_MAX_RANK], ks[KN_CU_MAX_RANK]; // kept dims and their input strides
    int64_t rd[KN_CU_MAX_RANK], rs[KN_CU_MAX_RANK]; // reduced dims and strides
    int64_t count;                                  // elements per output
    bool contiguous;                                // reduced elements are x[base .. base + count)
};

__device__ __forceinline__ int64_t plan_base(const RedPlan &p, int64_t o) {
    int64_t off = 0;
    for (int d = p.nk - 1; d >= 0; d--) {
        off += (o % p.kd[d]) * p.ks[d];
        o /= p.kd[d];
    }
    return off;
}
__device__ __forceinline__ int64_t plan_inner(const RedPlan &p, int64_t r) {
    if (p.contiguous) return r;
    int64_t off = 0;
    for (int d = p.nr - 1; d >= 0; d--) {
        off += (r % p.rd[d]) * p.rs[d];
        r /= p.rd[d];
    }
    return off;
}

template <typename T, typename A> __device__ __forceinline__ T rfinish(int op, A v, int64_t count) {
    switch (op) {
    case KN_CU_RMEAN: return st<T>((typename acc<T>::type)((double)v / (double)count));
    case KN_CU_RL2: return st<T>((typename acc<T>::type)sqrt((double)v));
    case KN_CU_RLOGSUM: return st<T>((typename acc<T>::type)log((double)v));
    default: return st<T>((typename acc<T>::type)v);
    }
}

// One block per output.
template <typename T> __global__ void k_reduce_block(int op, const T *x, T *y, RedPlan p, int64_t n_out) {
    typedef typename racc<T>::type A;
    for (int64_t o = blockIdx.x; o < n_out; o += gridDim.x) {
        const T *base = x + plan_base(p, o);
        A shift = 0;
        if (op == KN_CU_RLOGSUMEXP) {
            A m = lowest<A>();
            for (int64_t r = threadIdx.x; r < p.count; r += blockDim.x) m = rcombine(KN_CU_RMAX, m, (A)ld(base[plan_inner(p, r)]));
            shift = block_reduce(KN_CU_RMAX, m);
            if (!(shift > lowest<A>())) shift = 0;
        }
        int cop = op == KN_CU_RMAX || op == KN_CU_RMIN || op == KN_CU_RPROD ? op : KN_CU_RSUM;
        A a = rinit<A>(op);
        for (int64_t r = threadIdx.x; r < p.count; r += blockDim.x)
            a = rcombine(cop, a, rmap(op, (A)ld(base[plan_inner(p, r)]), shift));
        a = block_reduce(cop, a);
        if (threadIdx.x == 0) {
            if (op == KN_CU_RLOGSUMEXP) y[o] = st<T>((typename acc<T>::type)((double)shift + log((double)a)));
            else y[o] = rfinish<T>(op, a, p.count);
        }
    }
}

// One warp per output (tens to hundreds of elements each: a squeeze-excite block's global average
// pool over a 7x7 map): the lanes share each output's elements, where one thread per output would
// walk them one dependent load after another (22 us for efficientnet_b0's [1, 1152, 7, 7] on an
// H200, against 2 us of data).
template <typename T> __global__ void k_reduce_warp(int op, const T *x, T *y, RedPlan p, int64_t n_out) {
    typedef typename racc<T>::type A;
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t o = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); o < n_out; o += warps) {
        const T *base = x + plan_base(p, o);
        A shift = 0;
        if (op == KN_CU_RLOGSUMEXP) {
            A m = lowest<A>();
            for (int64_t r = lane; r < p.count; r += 32) m = rcombine(KN_CU_RMAX, m, (A)ld(base[plan_inner(p, r)]));
            shift = (A)__shfl_sync(0xffffffffu, warp_reduce(KN_CU_RMAX, m), 0);
            if (!(shift > lowest<A>())) shift = 0;
        }
        int cop = op == KN_CU_RMAX || op == KN_CU_RMIN || op == KN_CU_RPROD ? op : KN_CU_RSUM;
        A a = rinit<A>(op);
        for (int64_t r = lane; r < p.count; r += 32) a = rcombine(cop, a, rmap(op, (A)ld(base[plan_inner(p, r)]), shift));
        a = warp_reduce(cop, a);
        if (lane == 0) {
            if (op == KN_CU_RLOGSUMEXP) y[o] = st<T>((typename acc<T>::type)((double)shift + log((double)a)));
            else y[o] = rfinish<T>(op, a, p.count);
        }
    }
}

// Outputs side by side in memory (the innermost kept dim contiguous) whose elements are not (a
// channels-last global pool: [N, H, W, C] over H and W): a block takes 32 neighbouring outputs,
// its 8 rows of threads share their elements, so each load of a warp is one coalesced row. One
// warp per output read [256, 7, 7, 2048] (ResNet-50's pool at batch 256) in 340 us on the H200,
// one 2-byte element per 32-byte sector.
template <typename T> __global__ void k_reduce_cols(int op, const T *x, T *y, RedPlan p, int64_t n_out) {
    typedef typename racc<T>::type A;
    __shared__ A part[8][33];
    const int64_t o = (int64_t)blockIdx.x * 32 + threadIdx.x;
    const bool live = o < n_out;
    const T *base = x + (live ? plan_base(p, o) : 0);
    const int cop = op == KN_CU_RMAX || op == KN_CU_RMIN || op == KN_CU_RPROD ? op : KN_CU_RSUM;
    A shift = 0;
    if (op == KN_CU_RLOGSUMEXP) {
        A m = lowest<A>();
        for (int64_t r = threadIdx.y; live && r < p.count; r += 8) m = rcombine(KN_CU_RMAX, m, (A)ld(base[plan_inner(p, r)]));
        part[threadIdx.y][threadIdx.x] = m;
        __syncthreads();
        m = part[0][threadIdx.x];
        for (int k = 1; k < 8; k++) m = rcombine(KN_CU_RMAX, m, part[k][threadIdx.x]);
        shift = m > lowest<A>() ? m : (A)0;
        __syncthreads();
    }
    A a = rinit<A>(op);
    for (int64_t r = threadIdx.y; live && r < p.count; r += 8) a = rcombine(cop, a, rmap(op, (A)ld(base[plan_inner(p, r)]), shift));
    part[threadIdx.y][threadIdx.x] = a;
    __syncthreads();
    if (threadIdx.y == 0 && live) {
        for (int k = 1; k < 8; k++) a = rcombine(cop, a, part[k][threadIdx.x]);
        if (op == KN_CU_RLOGSUMEXP) y[o] = st<T>((typename acc<T>::type)((double)shift + log((double)a)));
        else y[o] = rfinish<T>(op, a, p.count);
    }
}

// The same where the reduced elements of an output lie one stride apart (one reduced run, p.nr 1)
// and the innermost kept dim is contiguous and a multiple of V: a thread takes V neighbouring
// outputs with one 16-byte load a row. k_reduce_cols's 2-byte loads and 64-bit index arithmetic
// per element read ResNet-50's [256, 7, 7, 2048] half pool at 320 GB/s on the H200.
template <typename T, int V> __global__ void k_reduce_cols_vec(int op, const T *x, T *y, RedPlan p, int64_t n_vec) {
    typedef typename racc<T>::type A;
    __shared__ A part[8][32 * V + 1];
    const int64_t v = (int64_t)blockIdx.x * 32 + threadIdx.x;
    const bool live = v < n_vec;
    const T *base = x + (live ? plan_base(p, v * V) : 0);
    const int cop = op == KN_CU_RMAX || op == KN_CU_RMIN || op == KN_CU_RPROD ? op : KN_CU_RSUM;
    A a[V];
#pragma unroll
    for (int j = 0; j < V; j++) a[j] = rinit<A>(op);
    const int64_t step = p.rs[0];
    for (int64_t r = threadIdx.y; live && r < p.count; r += 8) {
        T e[V];
        *(uint4 *)e = __ldg((const uint4 *)(base + r * step));
#pragma unroll
        for (int j = 0; j < V; j++) a[j] = rcombine(cop, a[j], rmap(op, (A)ld(e[j]), (A)0));
    }
#pragma unroll
    for (int j = 0; j < V; j++) part[threadIdx.y][threadIdx.x * V + j] = a[j];
    __syncthreads();
    if (threadIdx.y == 0 && live) {
        T out[V];
#pragma unroll
        for (int j = 0; j < V; j++) {
            A t = a[j];
            for (int k = 1; k < 8; k++) t = rcombine(cop, t, part[k][threadIdx.x * V + j]);
            out[j] = rfinish<T>(op, t, p.count);
        }
        *(uint4 *)(y + v * V) = *(const uint4 *)out;
    }
}

// One thread per output (few elements per output).
template <typename T> __global__ void k_reduce_thread(int op, const T *x, T *y, RedPlan p, int64_t n_out) {
    typedef typename racc<T>::type A;
    KNCU_LOOP(o, n_out) {
        const T *base = x + plan_base(p, o);
        A shift = 0;
        if (op == KN_CU_RLOGSUMEXP) {
            A m = lowest<A>();
            for (int64_t r = 0; r < p.count; r++) m = rcombine(KN_CU_RMAX, m, (A)ld(base[plan_inner(p, r)]));
            shift = m > lowest<A>() ? m : (A)0;
        }
        int cop = op == KN_CU_RMAX || op == KN_CU_RMIN || op == KN_CU_RPROD ? op : KN_CU_RSUM;
        A a = rinit<A>(op);
        for (int64_t r = 0; r < p.count; r++) a = rcombine(cop, a, rmap(op, (A)ld(base[plan_inner(p, r)]), shift));
        if (op == KN_CU_RLOGSUMEXP) y[o] = st<T>((typename acc<T>::type)((double)shift + log((double)a)));
        else y[o] = rfinish<T>(op, a, p.count);
    }
}

template <typename T>
__global__ void k_argminmax(const T *x, int64_t *y, int64_t len, int64_t inner, bool is_max, bool last, int64_t n) {
    typedef typename acc<T>::type A;
    KNCU_LOOP(line, n) {
        int64_t o = line / inner, in = line % inner;
        const T *p = x + o * len * inner + in;
        A best = ld(p[0]);
        int64_t bi = 0;
        for (int64_t j = 1; j < len; j++) {
            A v = ld(p[j * inner]);
            bool better = is_max ? (v > best || (last && v == best)) : (v < best || (last && v == best));
            if (best != best) better = false; // first NaN wins
            else if (v != v) better = true;
            if (better) {
                best = v;
                bi = j;
            }
        }
        y[line] = bi;
    }
}

// Softmax over rows (inner == 1): one block per row.
template <typename T> __global__ void k_softmax_rows(const T *x, T *y, int64_t rows, int64_t len, int kind) {
    typedef typename acc<T>::type A;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *px = x + r * len;
        T *py = y + r * len;
        A m = lowest<A>();
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) m = rcombine(KN_CU_RMAX, m, ld(px[j]));
        m = block_reduce(KN_CU_RMAX, m);
        if (kind == 2) { // hardmax: 1 at the first maximum
            __shared__ long long first;
            if (threadIdx.x == 0) first = len;
            __syncthreads();
            for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
                if (ld(px[j]) == m) atomicMin(&first, (long long)j);
            __syncthreads();
            for (int64_t j = threadIdx.x; j < len; j += blockDim.x) py[j] = st<T>((A)(j == first ? 1 : 0));
            __syncthreads();
            continue;
        }
        A s = 0;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) s += exp(ld(px[j]) - m);
        s = block_reduce(KN_CU_RSUM, s);
        if (kind == 1) {
            A ls = log(s);
            for (int64_t j = threadIdx.x; j < len; j += blockDim.x) py[j] = st<T>(ld(px[j]) - m - ls);
        } else {
            A inv = (A)1 / s;
            for (int64_t j = threadIdx.x; j < len; j += blockDim.x) py[j] = st<T>(exp(ld(px[j]) - m) * inv);
        }
    }
}

// Softmax along a strided axis: one thread per (outer, inner) column.
template <typename T>
__global__ void k_softmax_cols(const T *x, T *y, int64_t len, int64_t inner, int kind, int64_t n) {
    typedef typename acc<T>::type A;
    KNCU_LOOP(line, n) {
        int64_t o = line / inner, in = line % inner;
        const T *px = x + o * len * inner + in;
        T *py = y + o * len * inner + in;
        A m = lowest<A>();
        int64_t first = 0;
        for (int64_t j = 0; j < len; j++) {
            A v = ld(px[j * inner]);
            if (v > m) {
                m = v;
                first = j;
            }
        }
        if (kind == 2) {
            for (int64_t j = 0; j < len; j++) py[j * inner] = st<T>((A)(j == first ? 1 : 0));
            continue;
        }
        A s = 0;
        for (int64_t j = 0; j < len; j++) s += exp(ld(px[j * inner]) - m);
        if (kind == 1) {
            A ls = log(s);
            for (int64_t j = 0; j < len; j++) py[j * inner] = st<T>(ld(px[j * inner]) - m - ls);
        } else {
            for (int64_t j = 0; j < len; j++) py[j * inner] = st<T>(exp(ld(px[j * inner]) - m) / s);
        }
    }
}

template <typename T>
__global__ void k_layernorm(const T *x, const T *scale, const T *bias, T *y, float *mean_out, float *inv_out,
                            int64_t rows, int64_t len, float eps, bool rms) {
    typedef typename acc<T>::type A0;
    typedef typename std::conditional<std::is_same<A0, double>::value, double, float>::type A;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *px = x + r * len;
        T *py = y + r * len;
        A mean = 0;
        if (!rms) {
            A s = 0;
            for (int64_t j = threadIdx.x; j < len; j += blockDim.x) s += (A)ld(px[j]);
            mean = block_reduce(KN_CU_RSUM, s) / (A)len;
        }
        A q = 0;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
            A d = (A)ld(px[j]) - mean;
            q += d * d;
        }
        A var = block_reduce(KN_CU_RSUM, q) / (A)len;
        A inv = (A)1 / sqrt(var + (A)eps);
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
            A v = ((A)ld(px[j]) - mean) * inv;
            if (scale) v *= (A)ld(scale[j]);
            if (bias) v += (A)ld(bias[j]);
            py[j] = st<T>((typename acc<T>::type)v);
        }
        if (threadIdx.x == 0) {
            if (mean_out) mean_out[r] = (float)mean;
            if (inv_out) inv_out[r] = (float)inv;
        }
    }
}

// Layer normalisation of rows of at most 32 * 8 * MAXW 16-bit elements (len % 8 == 0): a warp per
// row, the row held in registers (read once, 16 bytes a load), reductions by shuffles. The
// block-per-row kernel above reads each row three times and synchronises its block twice, which
// made BERT-base's LayerNorms run at a fifth of the memory's speed. MAXW is exactly the words a
// lane needs (3 for BERT-base's 768). The row stays as its 16-bit words and is widened at each of
// the three uses: held as floats it took 74-92 registers, two or three blocks an SM, and a
// latency-bound row needs as many warps in flight as fit (64 registers: four blocks). With
// vec_affine the scale and bias words are loaded with the row, before the reductions.
template <typename T, int MAXW>
__global__ void __launch_bounds__(256, MAXW <= 3 ? 4 : MAXW <= 6 ? 2 : 1)
    k_layernorm_warp(const T *x, const T *scale, const T *bias, T *y, float *mean_out, float *inv_out, int32_t rows,
                     int32_t len, float eps, bool rms, bool vec_affine) {
    const int lane = threadIdx.x & 31;
    const int32_t words = len / 8;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int32_t r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += gridDim.x * (blockDim.x / 32)) {
        const uint4 *px = (const uint4 *)(x + (int64_t)r * len);
        uint4 xw[MAXW], sw[MAXW], bw[MAXW];
#pragma unroll
        for (int k = 0; k < MAXW; k++) {
            const int32_t w = k * 32 + lane;
            xw[k] = sw[k] = bw[k] = zero;
            if (w < words) {
                xw[k] = px[w];
                if (vec_affine) {
                    if (scale) sw[k] = ((const uint4 *)scale)[w];
                    if (bias) bw[k] = ((const uint4 *)bias)[w];
                }
            }
        }
        float s = 0; /* the zero words of lanes past the row add nothing */
#pragma unroll
        for (int k = 0; k < MAXW; k++) {
            const T *e = (const T *)&xw[k];
#pragma unroll
            for (int j = 0; j < 8; j++) s += ld(e[j]);
        }
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        const float mean = rms ? 0.0f : s / (float)len;
        float q = 0;
#pragma unroll
        for (int k = 0; k < MAXW; k++)
            if (k * 32 + lane < words) {
                const T *e = (const T *)&xw[k];
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const float d = ld(e[j]) - mean;
                    q += d * d;
                }
            }
        for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
        const float inv = 1.0f / sqrtf(q / (float)len + eps);
        uint4 *py = (uint4 *)(y + (int64_t)r * len);
#pragma unroll
        for (int k = 0; k < MAXW; k++) {
            const int32_t w = k * 32 + lane;
            if (w < words) {
                const T *e = (const T *)&xw[k], *se = (const T *)&sw[k], *be = (const T *)&bw[k];
                T o[8];
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    float a = (ld(e[j]) - mean) * inv;
                    if (scale) a *= vec_affine ? ld(se[j]) : ld(scale[w * 8 + j]);
                    if (bias) a += vec_affine ? ld(be[j]) : ld(bias[w * 8 + j]);
                    o[j] = st<T>(a);
                }
                py[w] = *(const uint4 *)o;
            }
        }
        if (lane == 0) {
            if (mean_out) mean_out[r] = mean;
            if (inv_out) inv_out[r] = inv;
        }
    }
}

template <typename T>
__global__ void k_channel_affine(const T *x, T *y, const float *a, const float *b, int64_t c, int64_t inner,
                                 int64_t n) {
    typedef typename acc<T>::type A;
    KNCU_LOOP(i, n) {
        int64_t ch = (i / inner) % c;
        y[i] = st<T>((A)(ld(x[i]) * (A)a[ch] + (A)b[ch]));
    }
}

template <typename T>
__global__ void k_bn_coeffs(const T *scale, const T *bias, const T *mean, const T *var, float eps, float *a, float *b,
                            int64_t c) {
    KNCU_LOOP(i, c) {
        double s = (double)ld(scale[i]) / sqrt((double)ld(var[i]) + (double)eps);
        a[i] = (float)s;
        b[i] = (float)((double)ld(bias[i]) - (double)ld(mean[i]) * s);
    }
}

template <typename T>
__global__ void k_groupnorm(const T *x, const T *scale, const T *bias, T *y, int64_t c, int64_t groups,
                            int64_t inner, float eps, bool per_group, int64_t n_blocks) {
    typedef typename acc<T>::type A0;
    typedef typename std::conditional<std::is_same<A0, double>::value, double, float>::type A;
    int64_t cpg = c / groups, len = cpg * inner;
    for (int64_t bidx = blockIdx.x; bidx < n_blocks; bidx += gridDim.x) {
        int64_t g = bidx % groups;
        const T *px = x + bidx * len;
        T *py = y + bidx * len;
        A s = 0;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) s += (A)ld(px[j]);
        A mean = block_reduce(KN_CU_RSUM, s) / (A)len;
        A q = 0;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
            A d = (A)ld(px[j]) - mean;
            q += d * d;
        }
        A inv = (A)1 / sqrt(block_reduce(KN_CU_RSUM, q) / (A)len + (A)eps);
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
            int64_t ch = per_group ? g : g * cpg + j / inner;
            A v = ((A)ld(px[j]) - mean) * inv;
            v = v * (A)ld(scale[ch]) + (A)ld(bias[ch]);
            py[j] = st<T>((typename acc<T>::type)v);
        }
    }
}

template <typename T>
__global__ void k_lpnorm(const T *x, T *y, int64_t len, int64_t inner, int p, int64_t n) {
    typedef typename acc<T>::type A;
    KNCU_LOOP(line, n) {
        int64_t o = line / inner, in = line % inner;
        const T *px = x + o * len * inner + in;
        T *py = y + o * len * inner + in;
        A s = 0;
        for (int64_t j = 0; j < len; j++) {
            A v = ld(px[j * inner]);
            s += p == 1 ? (v < (A)0 ? -v : v) : v * v;
        }
        A norm = p == 1 ? s : sqrt(s);
        for (int64_t j = 0; j < len; j++) py[j * inner] = st<T>(norm == (A)0 ? (A)0 : ld(px[j * inner]) / norm);
    }
}

template <typename T> __global__ void k_pool(const T *x, T *y, int64_t *ind, kn_cu_pool p, int64_t n) {
    typedef typename acc<T>::type A;
    KNCU_LOOP(i, n) {
        int64_t rest = i, o[3] = {0, 0, 0};
        for (int d = p.nsp - 1; d >= 0; d--) {
            o[d] = rest % p.out[d];
            rest /= p.out[d];
        }
        int64_t nc = rest; // n * C + c
        int64_t in_sz = 1;
        for (int d = 0; d < p.nsp; d++) in_sz *= p.in[d];
        const T *px = x + nc * in_sz;
        int64_t k0 = p.k[0], k1 = p.nsp > 1 ? p.k[1] : 1, k2 = p.nsp > 2 ? p.k[2] : 1;
        A best = lowest<A>(), sum = 0;
        int64_t best_i = -1, count = 0, count_pad = 0;
        for (int64_t a = 0; a < k0; a++)
            for (int64_t b = 0; b < k1; b++)
                for (int64_t c = 0; c < k2; c++) {
                    int64_t w[3] = {a, b, c}, pos[3], flat = 0;
                    bool inside = true, in_padded = true;
                    for (int d = 0; d < p.nsp; d++) {
                        pos[d] = o[d] * p.stride[d] - p.pad_b[d] + w[d] * p.dil[d];
                        if (pos[d] < 0 || pos[d] >= p.in[d]) inside = false;
                        if (pos[d] < -p.pad_b[d] || pos[d] >= p.in[d] + p.pad_e[d]) in_padded = false;
                        flat = flat * p.in[d] + pos[d];
                    }
                    if (in_padded) count_pad++;
                    if (!inside) continue;
                    A v = ld(px[flat]);
                    count++;
                    if (p.kind == 0) {
                        if (v > best || best_i < 0 || v != v) {
                            if (!(best != best)) {
                                best = v;
                                if (p.storage_order == 1 && p.nsp == 2) best_i = pos[1] * p.in[0] + pos[0];
                                else best_i = flat;
                            }
                        }
                    } else if (p.kind == 3) {
                        A av = v < (A)0 ? -v : v;
                        sum += p.p == 1 ? av : (p.p == 2 ? av * av : (A)pow((double)av, (double)p.p));
                    } else {
                        sum += v;
                    }
                }
        A r;
        if (p.kind == 0) r = best;
        else if (p.kind == 1) r = count_pad ? sum / (A)count_pad : (A)0;
        else if (p.kind == 2) r = count ? sum / (A)count : (A)0;
        else r = p.p == 1 ? sum : (p.p == 2 ? sqrt(sum) : (A)pow((double)sum, 1.0 / p.p));
        y[i] = st<T>(r);
        if (ind) ind[i] = best_i < 0 ? 0 : nc * in_sz + best_i;
    }
}

// 2-D max and average pooling without indices, the CNN case, with 32-bit index arithmetic and the
// window's rows and columns walked directly: the general kernel above decomposes every tap's
// position in 64-bit arithmetic, which made ResNet-50's MaxPool take 30x its memory time.
struct Pool2d {
    int32_t ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, peh, pew, dh, dw;
    int kind; // 0 max, 1 average counting the pads, 2 average over the inside taps
};

// One output of a 2-D pool: the window at (oy, ox) over the map whose tap (yy, xx) is
// px[(yy * iw + xx) * step] (step 1 channels first, the channel count channels last).
template <typename T>
__device__ __forceinline__ T pool2d_window(const T *px, int64_t step, const Pool2d &q, int32_t oy, int32_t ox) {
    typedef typename acc<T>::type A;
    const int32_t y0 = oy * q.sh - q.ph, x0 = ox * q.sw - q.pw;
    A best = lowest<A>(), sum = 0;
    bool nan = false;
    int32_t inside = 0, rows_pad = 0, cols_pad = 0;
    for (int32_t a = 0; a < q.kh; a++) {
        const int32_t yy = y0 + a * q.dh;
        if (yy >= -q.ph && yy < q.ih + q.peh) rows_pad++;
        if (yy < 0 || yy >= q.ih) continue;
        for (int32_t b = 0; b < q.kw; b++) {
            const int32_t xx = x0 + b * q.dw;
            if (xx < 0 || xx >= q.iw) continue;
            A v = ld(px[(int64_t)(yy * q.iw + xx) * step]); // a plane's taps fit 32 bits (the launch checks)
            inside++;
            if (q.kind == 0) {
                nan |= v != v;
                best = inside == 1 || v > best ? v : best; // the first tap sets it (-inf included)
            } else {
                sum += v;
            }
        }
    }
    for (int32_t b = 0; b < q.kw; b++) {
        const int32_t xx = x0 + b * q.dw;
        if (xx >= -q.pw && xx < q.iw + q.pew) cols_pad++;
    }
    A r;
    if (q.kind == 0) r = nan ? (A)NAN : best;
    else if (q.kind == 1) r = rows_pad * cols_pad ? sum / (A)(rows_pad * cols_pad) : (A)0;
    else r = inside ? sum / (A)inside : (A)0;
    return st<T>(r);
}

template <typename T> __global__ void k_pool2d(const T *x, T *y, Pool2d q, int32_t n) {
    for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        const int32_t ox = i % q.ow, t = i / q.ow, oy = t % q.oh, nc = t / q.oh;
        y[i] = pool2d_window(x + (int64_t)nc * q.ih * q.iw, 1, q, oy, ox);
    }
}

// The same channels last: neighbouring threads take neighbouring channels of one output position,
// so every tap is a coalesced row of the warp.
template <typename T> __global__ void k_pool2d_nhwc(const T *x, T *y, Pool2d q, int32_t c, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x) {
        const int32_t ch = (int32_t)(i % c);
        const int64_t t = i / c;
        const int32_t ox = (int32_t)(t % q.ow), oy = (int32_t)((t / q.ow) % q.oh);
        const int64_t img = t / ((int64_t)q.ow * q.oh);
        y[i] = pool2d_window(x + img * q.ih * q.iw * (int64_t)c + ch, c, q, oy, ox);
    }
}

// The same with V neighbouring channels a thread (one 16-byte load a tap, 32-bit index arithmetic:
// the element kernel's 64-bit divisions and 2-byte loads ran ResNet-50's stem MaxPool at batch 256,
// [256, 112, 112, 64] half, in 1.25 ms, ten times its memory time). The window's bounds and counts
// are the same for every channel; each channel's max and NaN as pool2d_window. K: a square window
// known when compiled (3, the classifiers' stem pool; 0 any), so its taps' loads unroll.
template <typename T, int V, int K> __global__ void k_pool2d_nhwc_vec(const T *x, T *y, Pool2d q, int32_t cv, int32_t n) {
    typedef typename acc<T>::type A;
    const int64_t c = (int64_t)cv * V;
    for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        const int32_t vc = i % cv, t = i / cv, ox = t % q.ow, t2 = t / q.ow, oy = t2 % q.oh, img = t2 / q.oh;
        const T *px = x + (int64_t)img * q.ih * q.iw * c + (int64_t)vc * V;
        const int32_t y0 = oy * q.sh - q.ph, x0 = ox * q.sw - q.pw;
        A acc_[V];
        bool nan[V];
#pragma unroll
        for (int j = 0; j < V; j++) {
            acc_[j] = q.kind == 0 ? lowest<A>() : (A)0;
            nan[j] = false;
        }
        int32_t inside = 0, rows_pad = 0, cols_pad = 0;
        const int32_t kh = K ? K : q.kh, kw = K ? K : q.kw;
#pragma unroll
        for (int32_t a = 0; a < kh; a++) {
            const int32_t yy = y0 + a * q.dh;
            if (yy >= -q.ph && yy < q.ih + q.peh) rows_pad++;
            if (yy < 0 || yy >= q.ih) continue;
#pragma unroll
            for (int32_t b = 0; b < kw; b++) {
                const int32_t xx = x0 + b * q.dw;
                if (xx < 0 || xx >= q.iw) continue;
                T e[V];
                *(uint4 *)e = __ldg((const uint4 *)(px + (int64_t)(yy * q.iw + xx) * c));
                inside++;
#pragma unroll
                for (int j = 0; j < V; j++) {
                    const A v = ld(e[j]);
                    if (q.kind == 0) {
                        nan[j] |= v != v;
                        acc_[j] = inside == 1 || v > acc_[j] ? v : acc_[j];
                    } else {
                        acc_[j] += v;
                    }
                }
            }
        }
        for (int32_t b = 0; b < kw; b++) {
            const int32_t xx = x0 + b * q.dw;
            if (xx >= -q.pw && xx < q.iw + q.pew) cols_pad++;
        }
        T out[V];
#pragma unroll
        for (int j = 0; j < V; j++) {
            A r;
            if (q.kind == 0) r = nan[j] ? (A)NAN : acc_[j];
            else if (q.kind == 1) r = rows_pad * cols_pad ? acc_[j] / (A)(rows_pad * cols_pad) : (A)0;
            else r = inside ? acc_[j] / (A)inside : (A)0;
            out[j] = st<T>(r);
        }
        *(uint4 *)(y + (int64_t)i * V) = *(const uint4 *)out;
    }
}

// Top-k of one line per block: bitonic sort of (value, index) in shared memory. The elements are
// sorted as they are (their bytes come out unchanged, NaN payloads too, as the CPU kernel copies
// them) and compared through ld(); the indices first, so both arrays are aligned whatever pow2.
static inline size_t topk_values_at(int pow2) { return ((size_t)pow2 * sizeof(int) + 15) & ~(size_t)15; }

template <typename T>
__global__ void k_topk(const T *x, T *values, int64_t *indices, int64_t len, int64_t inner, int64_t k, bool largest,
                       int pow2) {
    typedef typename acc<T>::type A;
    extern __shared__ __align__(16) unsigned char smem[];
    int *si = (int *)smem;
    T *sv = (T *)(smem + (((size_t)pow2 * sizeof(int) + 15) & ~(size_t)15)); // topk_values_at(pow2)
    int64_t line = blockIdx.x;
    int64_t o = line / inner, in = line % inner;
    const T *px = x + o * len * inner + in;
    for (int j = threadIdx.x; j < pow2; j += blockDim.x) {
        if (j < len) {
            sv[j] = px[(int64_t)j * inner];
            si[j] = j;
        } else {
            sv[j] = px[0]; // any value: padding goes by its index
            si[j] = INT32_MAX;
        }
    }
    __syncthreads();
    // "a before b": larger (or smaller) value first, NaN as the largest value (the CPU kernel's
    // order), lower index first on ties (two NaNs tie); padding last
    for (int size = 2; size <= pow2; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int j = threadIdx.x; j < pow2; j += blockDim.x) {
                int partner = j ^ stride;
                if (partner > j) {
                    bool up = (j & size) == 0;
                    const T ta = sv[j], tb = sv[partner];
                    const A va = ld(ta), vb = ld(tb);
                    int ia = si[j], ib = si[partner];
                    bool a_first;
                    const bool na = va != va, nb = vb != vb;
                    if (ia == INT32_MAX) a_first = false;
                    else if (ib == INT32_MAX) a_first = true;
                    else if (na != nb) a_first = largest ? na : nb;
                    else if (!na && va != vb) a_first = largest ? va > vb : va < vb;
                    else a_first = ia < ib;
                    if (a_first != up) {
                        sv[j] = tb;
                        sv[partner] = ta;
                        si[j] = ib;
                        si[partner] = ia;
                    }
                }
            }
            __syncthreads();
        }
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
        int64_t off = (o * k + j) * inner + in;
        values[off] = sv[j];
        indices[off] = si[j];
    }
}

static RedPlan make_plan(int rank, const int64_t *dims, const bool *reduce, int64_t *n_out) {
    RedPlan p;
    p.nk = p.nr = 0;
    p.count = 1;
    *n_out = 1;
    int64_t stride = 1;
    int64_t strides[KN_CU_MAX_RANK];
    for (int d = rank - 1; d >= 0; d--) {
        strides[d] = stride;
        stride *= dims[d];
    }
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1) continue;
        if (reduce[d]) {
            // merge with the previous reduced dim when contiguous with it
            if (p.nr && p.rs[p.nr - 1] == dims[d] * strides[d]) {
                p.rd[p.nr - 1] *= dims[d];
                p.rs[p.nr - 1] = strides[d];
            } else {
                p.rd[p.nr] = dims[d];
                p.rs[p.nr++] = strides[d];
            }
            p.count *= dims[d];
        } else {
            if (p.nk && p.ks[p.nk - 1] == dims[d] * strides[d]) {
                p.kd[p.nk - 1] *= dims[d];
                p.ks[p.nk - 1] = strides[d];
            } else {
                p.kd[p.nk] = dims[d];
                p.ks[p.nk++] = strides[d];
            }
            *n_out *= dims[d];
        }
    }
    p.contiguous = p.nr == 0 || (p.nr == 1 && p.rs[0] == 1);
    for (int d = 0; d < rank; d++)
        if (dims[d] == 0) {
            if (reduce[d]) p.count = 0;
            else *n_out = 0;
        }
    return p;
}

template <typename T> cudaError_t launch_reduce(int op, const void *x, void *y, const RedPlan &p, int64_t n_out,
                                                cudaStream_t s) {
    const bool columns = p.nk > 0 && p.ks[p.nk - 1] == 1 && p.nr > 0 && !p.contiguous && p.kd[p.nk - 1] >= 32;
    constexpr int V = 16 / sizeof(T);
    if (columns && p.count >= 2 && p.nr == 1 && op != KN_CU_RLOGSUMEXP && (sizeof(T) == 2 || sizeof(T) == 4) &&
        p.kd[p.nk - 1] % V == 0 && p.rs[0] % V == 0 && ((uintptr_t)x | (uintptr_t)y) % 16 == 0 &&
        (n_out / V + 31) / 32 <= INT32_MAX) {
        bool aligned = true; // every kept dim's stride keeps the 16-byte alignment
        for (int d = 0; d < p.nk; d++) aligned &= p.ks[d] % V == 0 || d == p.nk - 1;
        if (aligned) {
            const int64_t n_vec = n_out / V;
            k_reduce_cols_vec<T, V><<<(unsigned)((n_vec + 31) / 32), dim3(32, 8), 0, s>>>(op, (const T *)x, (T *)y, p,
                                                                                           n_vec);
            return cudaGetLastError();
        }
    }
    if (columns && p.count >= 2 && (n_out + 31) / 32 <= INT32_MAX) {
        k_reduce_cols<T><<<(unsigned)((n_out + 31) / 32), dim3(32, 8), 0, s>>>(op, (const T *)x, (T *)y, p, n_out);
    } else if (p.count >= 512) {
        // long outputs: a block each, wider the longer (more loads in flight per output)
        unsigned blocks = (unsigned)(n_out < 65535 * 4 ? n_out : 65535 * 4);
        int threads = p.count >= 8192 ? 512 : p.count >= 1024 ? 256 : 128;
        k_reduce_block<T><<<blocks, threads, 0, s>>>(op, (const T *)x, (T *)y, p, n_out);
    } else if (p.count >= 8) {
        int64_t blocks = (n_out + 3) / 4; // four warps of 32 per block
        k_reduce_warp<T><<<(unsigned)(blocks < 65535 * 4 ? blocks : 65535 * 4), 128, 0, s>>>(op, (const T *)x, (T *)y, p,
                                                                                            n_out);
    } else {
        k_reduce_thread<T><<<grid_for(n_out, 128), 128, 0, s>>>(op, (const T *)x, (T *)y, p, n_out);
    }
    return cudaGetLastError();
}

template <typename T>
cudaError_t launch_topk(const void *x, void *values, int64_t *indices, int64_t lines, int64_t len, int64_t inner,
                        int64_t k, bool largest, int pow2, int threads, cudaStream_t s) {
    size_t sh = topk_values_at(pow2) + (size_t)pow2 * sizeof(T);
    k_topk<T><<<(unsigned)lines, threads, sh, s>>>((const T *)x, (T *)values, indices, len, inner, k, largest, pow2);
    return cudaGetLastError();
}

} // namespace

extern "C" {

cudaError_t kn_cu_reduce(int op, kiln_dtype dt, const void *x, void *y, int rank, const int64_t *dims,
                         const bool *reduce, cudaStream_t s) {
    int64_t n_out;
    RedPlan p = make_plan(rank, dims, reduce, &n_out);
    if (n_out == 0) return cudaSuccess;
    KNCU_DISPATCH_NUM(dt, return launch_reduce<type_>(op, x, y, p, n_out, s));
    return cudaSuccess;
}

cudaError_t kn_cu_argminmax(kiln_dtype dt, const void *x, int64_t *y, int64_t outer, int64_t len, int64_t inner,
                            bool is_max, bool select_last, cudaStream_t s) {
    int64_t n = outer * inner;
    if (n == 0 || len == 0) return cudaSuccess;
    KNCU_DISPATCH_NUM(dt, (k_argminmax<type_><<<grid_for(n, 128), 128, 0, s>>>((const type_ *)x, y, len, inner,
                                                                                 is_max, select_last, n)));
    return cudaGetLastError();
}

cudaError_t kn_cu_softmax(kiln_dtype dt, const void *x, void *y, int64_t outer, int64_t len, int64_t inner, int kind,
                          cudaStream_t s) {
    if (outer * inner == 0 || len == 0) return cudaSuccess;
    if (inner == 1) {
        unsigned blocks = (unsigned)(outer < 65535 * 4 ? outer : 65535 * 4);
        int threads = len >= 512 ? 256 : (len >= 128 ? 128 : 64);
        KNCU_DISPATCH_FLOAT(dt, (k_softmax_rows<type_><<<blocks, threads, 0, s>>>((const type_ *)x, (type_ *)y, outer,
                                                                                   len, kind)));
    } else {
        int64_t n = outer * inner;
        KNCU_DISPATCH_FLOAT(dt, (k_softmax_cols<type_><<<grid_for(n, 128), 128, 0, s>>>((const type_ *)x, (type_ *)y,
                                                                                         len, inner, kind, n)));
    }
    return cudaGetLastError();
}

cudaError_t kn_cu_layernorm(kiln_dtype dt, const void *x, const void *scale, const void *bias, void *y, void *mean,
                            void *inv_std, int64_t rows, int64_t len, float eps, bool rms, cudaStream_t s) {
    if (rows == 0 || len == 0) return cudaSuccess;
    if ((dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16) && len % 8 == 0 && len <= 32 * 8 * 8 &&
        rows < INT32_MAX && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0) {
        const unsigned blocks = (unsigned)((rows + 7) / 8 < 65535 * 4 ? (rows + 7) / 8 : 65535 * 4); /* 8 warps a block */
        const bool vec = (uintptr_t)scale % 16 == 0 && (uintptr_t)bias % 16 == 0; /* NULL is aligned */
        const int maxw = (int)((len / 8 + 31) / 32); /* 1..8 */
#define KN_LN_WARP(T_, W_)                                                                                           \
    k_layernorm_warp<T_, W_><<<blocks, 256, 0, s>>>((const T_ *)x, (const T_ *)scale, (const T_ *)bias, (T_ *)y,       \
                                                    (float *)mean, (float *)inv_std, (int32_t)rows, (int32_t)len, eps, \
                                                    rms, vec)
#define KN_LN_WARPS(T_)                                                                                              \
    switch (maxw) {                                                                                                  \
    case 1: KN_LN_WARP(T_, 1); break;                                                                                \
    case 2: KN_LN_WARP(T_, 2); break;                                                                                \
    case 3: KN_LN_WARP(T_, 3); break;                                                                                \
    case 4: KN_LN_WARP(T_, 4); break;                                                                                \
    case 5: KN_LN_WARP(T_, 5); break;                                                                                \
    case 6: KN_LN_WARP(T_, 6); break;                                                                                \
    case 7: KN_LN_WARP(T_, 7); break;                                                                                \
    default: KN_LN_WARP(T_, 8); break;                                                                               \
    }
        if (dt == KILN_DTYPE_FLOAT16) {
            KN_LN_WARPS(f16)
        } else {
            KN_LN_WARPS(bf16)
        }
#undef KN_LN_WARPS
#undef KN_LN_WARP
        return cudaGetLastError();
    }
    unsigned blocks = (unsigned)(rows < 65535 * 4 ? rows : 65535 * 4);
    int threads = len >= 1024 ? 256 : 128;
    KNCU_DISPATCH_FLOAT(dt, (k_layernorm<type_><<<blocks, threads, 0, s>>>((const type_ *)x, (const type_ *)scale,
                                                                            (const type_ *)bias, (type_ *)y,
                                                                            (float *)mean, (float *)inv_std, rows, len,
                                                                            eps, rms)));
    return cudaGetLastError();
}

cudaError_t kn_cu_channel_affine(kiln_dtype dt, const void *x, void *y, const float *a, const float *b, int64_t n,
                                 int64_t c, int64_t inner, cudaStream_t s) {
    int64_t total = n * c * inner;
    if (total == 0) return cudaSuccess;
    KNCU_DISPATCH_FLOAT(dt, (k_channel_affine<type_><<<grid_for(total, 256), 256, 0, s>>>((const type_ *)x, (type_ *)y,
                                                                                          a, b, c, inner, total)));
    return cudaGetLastError();
}

cudaError_t kn_cu_bn_coeffs(kiln_dtype dt, const void *scale, const void *bias, const void *mean, const void *var,
                            float eps, float *a_out, float *b_out, int64_t c, cudaStream_t s) {
    if (c == 0) return cudaSuccess;
    KNCU_DISPATCH_FLOAT(dt, (k_bn_coeffs<type_><<<grid_for(c, 128), 128, 0, s>>>(
                                (const type_ *)scale, (const type_ *)bias, (const type_ *)mean, (const type_ *)var,
                                eps, a_out, b_out, c)));
    return cudaGetLastError();
}

cudaError_t kn_cu_groupnorm(kiln_dtype dt, const void *x, const void *scale, const void *bias, void *y, int64_t n,
                            int64_t c, int64_t groups, int64_t inner, float eps, bool per_group, cudaStream_t s) {
    int64_t nb = n * groups;
    if (nb == 0 || c == 0) return cudaSuccess;
    unsigned blocks = (unsigned)(nb < 65535 * 4 ? nb : 65535 * 4);
    KNCU_DISPATCH_FLOAT(dt, (k_groupnorm<type_><<<blocks, 256, 0, s>>>((const type_ *)x, (const type_ *)scale,
                                                                        (const type_ *)bias, (type_ *)y, c, groups,
                                                                        inner, eps, per_group, nb)));
    return cudaGetLastError();
}

cudaError_t kn_cu_lpnorm(kiln_dtype dt, const void *x, void *y, int64_t outer, int64_t len, int64_t inner, int p,
                         cudaStream_t s) {
    int64_t n = outer * inner;
    if (n == 0) return cudaSuccess;
    KNCU_DISPATCH_FLOAT(dt, (k_lpnorm<type_><<<grid_for(n, 128), 128, 0, s>>>((const type_ *)x, (type_ *)y, len, inner,
                                                                               p, n)));
    return cudaGetLastError();
}

cudaError_t kn_cu_pool_run(kiln_dtype dt, const void *x, void *y, int64_t *indices, const kn_cu_pool *p,
                           cudaStream_t s) {
    int64_t n = p->n * p->c;
    for (int d = 0; d < p->nsp; d++) n *= p->out[d];
    if (n == 0) return cudaSuccess;
    int64_t in_elems = p->n * p->c * (p->nsp == 2 ? p->in[0] * p->in[1] : 0);
    if (p->nhwc) {
        if (p->nsp != 2 || indices || p->kind > 2 || p->c > INT32_MAX) return cudaErrorNotSupported;
        for (int d = 0; d < 2; d++)
            if (p->in[d] > INT32_MAX / 2 || p->out[d] > INT32_MAX / 2) return cudaErrorNotSupported;
        if (p->in[0] * p->in[1] >= INT32_MAX) return cudaErrorNotSupported;
        Pool2d q = {(int32_t)p->in[0], (int32_t)p->in[1], (int32_t)p->out[0], (int32_t)p->out[1], (int32_t)p->k[0],
                    (int32_t)p->k[1], (int32_t)p->stride[0], (int32_t)p->stride[1], (int32_t)p->pad_b[0],
                    (int32_t)p->pad_b[1], (int32_t)p->pad_e[0], (int32_t)p->pad_e[1], (int32_t)p->dil[0],
                    (int32_t)p->dil[1], p->kind};
        const size_t es = kiln_dtype_size(dt);
        const int64_t V = es == 2 || es == 4 ? 16 / (int64_t)es : 0;
        const bool vec = V && p->c % V == 0 && n / V < INT32_MAX / 2 && p->n * p->in[0] * p->in[1] < INT32_MAX &&
                         ((uintptr_t)x | (uintptr_t)y) % 16 == 0;
        const int32_t cv = vec ? (int32_t)(p->c / V) : 0, nv = vec ? (int32_t)(n / V) : 0;
        const bool k3 = q.kh == 3 && q.kw == 3;
#define KN_POOL_VEC(T_, V_)                                                                                        \
    do {                                                                                                           \
        if (k3) k_pool2d_nhwc_vec<T_, V_, 3><<<grid_for(nv, 256), 256, 0, s>>>((const T_ *)x, (T_ *)y, q, cv, nv);   \
        else k_pool2d_nhwc_vec<T_, V_, 0><<<grid_for(nv, 256), 256, 0, s>>>((const T_ *)x, (T_ *)y, q, cv, nv);      \
        return cudaGetLastError();                                                                                 \
    } while (0)
        if (vec && dt == KILN_DTYPE_FLOAT) KN_POOL_VEC(float, 4);
        if (vec && dt == KILN_DTYPE_FLOAT16) KN_POOL_VEC(f16, 8);
        if (vec && dt == KILN_DTYPE_BFLOAT16) KN_POOL_VEC(bf16, 8);
#undef KN_POOL_VEC
        KNCU_DISPATCH_FLOAT(dt, (k_pool2d_nhwc<type_><<<grid_for(n, 256), 256, 0, s>>>((const type_ *)x, (type_ *)y, q,
                                                                                        (int32_t)p->c, n)));
        return cudaGetLastError();
    }
    if (p->nsp == 2 && !indices && p->kind <= 2 && n < INT32_MAX && in_elems < INT32_MAX) {
        Pool2d q = {(int32_t)p->in[0], (int32_t)p->in[1], (int32_t)p->out[0], (int32_t)p->out[1], (int32_t)p->k[0],
                    (int32_t)p->k[1], (int32_t)p->stride[0], (int32_t)p->stride[1], (int32_t)p->pad_b[0],
                    (int32_t)p->pad_b[1], (int32_t)p->pad_e[0], (int32_t)p->pad_e[1], (int32_t)p->dil[0],
                    (int32_t)p->dil[1], p->kind};
        KNCU_DISPATCH_FLOAT(dt, (k_pool2d<type_><<<grid_for(n, 256), 256, 0, s>>>((const type_ *)x, (type_ *)y, q,
                                                                                   (int32_t)n)));
        return cudaGetLastError();
    }
    KNCU_DISPATCH_FLOAT(dt, (k_pool<type_><<<grid_for(n, 128), 128, 0, s>>>((const type_ *)x, (type_ *)y, indices, *p,
                                                                             n)));
    return cudaGetLastError();
}

cudaError_t kn_cu_topk(kiln_dtype dt, const void *x, void *values, int64_t *indices, int64_t outer, int64_t len,
                       int64_t inner, int64_t k, bool largest, bool sorted, cudaStream_t s) {
    (void)sorted; // always sorted
    int64_t lines = outer * inner;
    if (lines == 0 || k == 0) return cudaSuccess;
    int pow2 = 1;
    while (pow2 < len) pow2 <<= 1;
    if (pow2 > 4096 || lines > 2147483647LL) return cudaErrorNotSupported;
    int threads = pow2 < 256 ? (pow2 < 32 ? 32 : pow2) : 256;
    KNCU_DISPATCH_NUM(dt, return launch_topk<type_>(x, values, indices, lines, len, inner, k, largest, pow2, threads, s));
    return cudaSuccess;
}

} // extern "C"

// A kernel of this file, whose first load loads the file's module (kn_cu_preload_modules).
extern "C" const void *kn_cu_module_reduce(void) { return (const void *)k_layernorm<float>; }

// Device kernels of the attention family (the C side is cuda_ops_attention.c):
//  - a strided copy with type conversion, scaling and rounding (packing Q/K/V into [B, H, S, D],
//    building present key/value, unpacking the output into the 3-D layout);
//  - the score-row kernel between the two batched products: softcap, the structural masks
//    (causal, windows, key lengths), boolean and additive masks with broadcasting, the softmax
//    (in float, or step by step in float16/bfloat16 the way the ONNX reference computes it) and the
//    optional copy of the scores at the stage qk_matmul_output_mode names;
//  - RotaryEmbedding, SwiGLU, CausalConvWithState and LinearAttention.
// Arithmetic is in float (double where the operator's tensors are double and the CPU does so too).
#include "backend/cuda/cu_common.cuh"

#include <math.h>

using namespace kncu;

namespace {

__device__ __forceinline__ float round_as(kiln_dtype t, float x) {
    if (t == KILN_DTYPE_FLOAT16) return __half2float(__float2half_rn(x));
    if (t == KILN_DTYPE_BFLOAT16) return __bfloat162float(__float2bfloat16_rn(x));
    return x;
}

// An element of a float-type (or bool) tensor as float.
__device__ __forceinline__ float load_as_float(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_DTYPE_FLOAT: return ((const float *)p)[i];
    case KILN_DTYPE_FLOAT16: return __half2float(((const f16 *)p)[i]);
    case KILN_DTYPE_BFLOAT16: return __bfloat162float(((const bf16 *)p)[i]);
    case KILN_DTYPE_DOUBLE: return (float)((const double *)p)[i];
    case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i] ? 1.0f : 0.0f;
    default: return 0.0f;
    }
}

__device__ __forceinline__ void store_from_float(void *p, kiln_dtype t, int64_t i, float x) {
    switch (t) {
    case KILN_DTYPE_FLOAT: ((float *)p)[i] = x; break;
    case KILN_DTYPE_FLOAT16: ((f16 *)p)[i] = __float2half_rn(x); break;
    case KILN_DTYPE_BFLOAT16: ((bf16 *)p)[i] = __float2bfloat16_rn(x); break;
    case KILN_DTYPE_DOUBLE: ((double *)p)[i] = (double)x; break;
    default: break;
    }
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// NaN-ignoring maximum (a NaN never compares greater), as the CPU engine's scalar loop.
__device__ __forceinline__ float max_keep(float a, float b) { return b > a ? b : a; }

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = max_keep(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide reductions (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ float block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = 0.0f;
    for (int w = 0; w < nw; w++) r += sh[w];
    return r;
}

__device__ float block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = -INFINITY;
    for (int w = 0; w < nw; w++) r = max_keep(r, sh[w]);
    return r;
}

// ------------------------------------------------------------------ strided copy

template <typename Ts, typename Td>
__global__ void k_attn_copy(const Ts *src, Td *dst, kn_cu_attn_copy_dims g, float mult, kiln_dtype round_to,
                            int64_t n) {
    typedef typename acc<Ts>::type A;
    KNCU_LOOP(idx, n) {
        int64_t r = idx;
        int64_t c3 = r % g.dims[3];
        r /= g.dims[3];
        int64_t c2 = r % g.dims[2];
        r /= g.dims[2];
        int64_t c1 = r % g.dims[1];
        int64_t c0 = r / g.dims[1];
        int64_t so = c0 * g.src[0] + c1 * g.src[1] + c2 * g.src[2] + c3 * g.src[3];
        int64_t dof = c0 * g.dst[0] + c1 * g.dst[1] + c2 * g.dst[2] + c3 * g.dst[3];
        A x = ld(src[so]);
        if (mult != 1.0f) x = x * (A)mult;
        if (round_to == KILN_DTYPE_FLOAT16 || round_to == KILN_DTYPE_BFLOAT16) x = (A)round_as(round_to, (float)x);
        dst[dof] = st<Td>(x);
    }
}

template <typename Ts>
cudaError_t copy_from(kiln_dtype to, const Ts *src, void *dst, const kn_cu_attn_copy_dims &g, float mult,
                      kiln_dtype round_to, int64_t n, cudaStream_t s) {
    unsigned grid = grid_for(n, 256);
    switch (to) {
    case KILN_DTYPE_FLOAT: k_attn_copy<Ts, float><<<grid, 256, 0, s>>>(src, (float *)dst, g, mult, round_to, n); break;
    case KILN_DTYPE_DOUBLE: k_attn_copy<Ts, double><<<grid, 256, 0, s>>>(src, (double *)dst, g, mult, round_to, n); break;
    case KILN_DTYPE_FLOAT16: k_attn_copy<Ts, f16><<<grid, 256, 0, s>>>(src, (f16 *)dst, g, mult, round_to, n); break;
    case KILN_DTYPE_BFLOAT16: k_attn_copy<Ts, bf16><<<grid, 256, 0, s>>>(src, (bf16 *)dst, g, mult, round_to, n); break;
    default: return cudaErrorNotSupported;
    }
    return cudaGetLastError();
}

// ------------------------------------------------------------------ score rows

// The keys row (b, i) may see by the structural masks: [lo, hi).
__device__ __forceinline__ void row_interval(const kn_cu_attn_rows &p, int64_t b, int64_t i, int64_t *lo,
                                             int64_t *hi) {
    int64_t l = 0, h = p.skv;
    if (p.kv_end) h = min(h, p.kv_end[b]);
    if (p.mask_cols >= 0) h = min(h, p.mask_cols);
    int64_t pos = (p.kv_end ? p.kv_end[b] - p.sq : p.past) + i;
    if (p.causal) h = min(h, pos + 1);
    if (p.left_window >= 0) l = max(l, pos - p.left_window);
    if (p.right_window >= 0) h = min(h, pos + p.right_window + 1);
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

// Softmax numerator of one (pre-softmax) score against the row maximum: float softmax, or the
// reference's steps in type sm (scores rounded to sm, then exp rounded).
__device__ __forceinline__ float softmax_num(float x, float mx, bool emulate, kiln_dtype sm) {
    if (!emulate) return expf(x - mx); // NaN stays NaN, -inf gives 0
    float safe = mx == -INFINITY ? 0.0f : mx;
    float d = round_as(sm, round_as(sm, x) - safe);
    return d == -INFINITY ? 0.0f : round_as(sm, expf(d));
}

// One block per score row: stage the scores (softcap, masks, rounding, copies), then softmax
// them in place into probabilities.
template <typename T> __global__ void k_attn_rows(T *S, kn_cu_attn_rows p) {
    __shared__ float sh[32];
    __shared__ int any_key;
    const int64_t n = p.skv;
    const bool half_scores = p.round_to == KILN_DTYPE_FLOAT16 || p.round_to == KILN_DTYPE_BFLOAT16;
    const bool emulate = half_scores || p.softmax_to == KILN_DTYPE_FLOAT16 || p.softmax_to == KILN_DTYPE_BFLOAT16;
    const kiln_dtype sm = p.softmax_to == KILN_DTYPE_FLOAT16 || p.softmax_to == KILN_DTYPE_BFLOAT16
                              ? p.softmax_to
                              : (p.softmax_to == KILN_DTYPE_UNDEFINED && half_scores ? p.round_to : KILN_DTYPE_FLOAT);
    const float cap = p.softcap, inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;
    for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
        const int64_t g = p.row0 + r, i = g % p.sq, bh = g / p.sq, h = bh % p.q_heads, b = bh / p.q_heads;
        T *s = S + r * n;
        int64_t lo, hi;
        row_interval(p, b, i, &lo, &hi);
        const int64_t moff = b * p.m_sb + h * p.m_sh + i * p.m_si;
        const int64_t cols = p.mask_cols >= 0 ? min(n, p.mask_cols) : n;
        const bool keep_mask = p.mask && p.mask_dt == KILN_DTYPE_BOOL, bias_mask = p.mask && !keep_mask;
        if (threadIdx.x == 0) any_key = 0;
        __syncthreads();
        bool ok = false;
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            float x = round_as(p.round_to, ld(s[j]));
            if (p.qk && p.qk_mode == 0) store_from_float(p.qk, p.qk_dt, g * n + j, x);
            if (cap > 0.0f) {
                if (half_scores) {
                    float t = round_as(p.round_to, x / cap);
                    t = round_as(p.round_to, tanhf(t));
                    x = round_as(p.round_to, t * cap);
                } else {
                    x = cap * tanhf(x * inv_cap);
                }
            }
            if (p.qk && p.qk_mode == 1) store_from_float(p.qk, p.qk_dt, g * n + j, x);
            bool allowed = j >= lo && j < hi, masked = !allowed;
            if (allowed && keep_mask && !((const uint8_t *)p.mask)[moff + j * p.m_sj]) masked = true;
            if (masked) x += -INFINITY;
            float bias = 0.0f;
            if (bias_mask && j < cols) {
                bias = load_as_float(p.mask, p.mask_dt, moff + j * p.m_sj);
                x += bias;
            }
            if (!masked && bias != -INFINITY) ok = true;
            x = round_as(p.round_to, x);
            if (p.qk && p.qk_mode == 2) store_from_float(p.qk, p.qk_dt, g * n + j, x);
            s[j] = st<T>(x); // exact: x is already rounded to T's precision
            mx = max_keep(mx, emulate ? round_as(sm, x) : x);
        }
        if (ok) any_key = 1;
        mx = block_max(mx, sh);
        const bool row_ok = !p.zero_masked_rows || any_key;
        // the denominator
        float sum;
        if (emulate && sm == KILN_DTYPE_BFLOAT16) {
            // the reference sums bfloat16 values in bfloat16, one after the other
            __syncthreads();
            if (threadIdx.x == 0) {
                float acc = 0.0f;
                for (int64_t j = 0; j < n; j++) acc = round_as(sm, acc + softmax_num(ld(s[j]), mx, true, sm));
                sh[0] = acc;
            }
            __syncthreads();
            sum = sh[0];
            __syncthreads();
        } else {
            float part = 0.0f;
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x) part += softmax_num(ld(s[j]), mx, emulate, sm);
            sum = block_sum(part, sh);
        }
        float inv = 0.0f;
        if (emulate) {
            sum = round_as(sm, sum);
            if (sum == 0.0f) sum = 1.0f;
        } else {
            inv = 1.0f / sum;
        }
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            float x = ld(s[j]), e;
            if (!row_ok) {
                e = 0.0f;
            } else if (emulate) {
                e = round_as(sm, softmax_num(x, mx, true, sm) / sum);
            } else if (mx == -INFINITY) {
                e = x != x ? x : 0.0f; // no finite score: zeros (NaN kept)
            } else {
                e = expf(x - mx) * inv;
            }
            e = round_as(p.probs_to, e);
            if (p.qk && p.qk_mode == 3) store_from_float(p.qk, p.qk_dt, g * n + j, e);
            s[j] = st<T>(e);
        }
        __syncthreads(); // sh and any_key are reused by the next row
    }
}

// ------------------------------------------------------------------ RotaryEmbedding

template <typename T>
__global__ void k_rotary(const T *x, const T *cs, const T *sn, const int64_t *pos, T *y, kn_cu_rotary p, int64_t n,
                         kn_cu_errp err) {
    typedef typename acc<T>::type A;
    const int64_t half = p.rot_dim / 2;
    KNCU_LOOP(idx, n) {
        int64_t d = idx % p.head, r = idx / p.head, b, s;
        if (p.rank3) { // [B, S, H*D]
            s = (r / p.heads) % p.seq;
            b = r / (p.heads * p.seq);
        } else { // [B, H, S, D]
            s = r % p.seq;
            b = r / (p.seq * p.heads);
        }
        const int64_t base = idx - d;
        if (d >= p.rot_dim) {
            y[idx] = x[idx];
            continue;
        }
        int64_t row = pos ? pos[b * p.seq + s] : b * p.seq + s;
        if (pos && (row < 0 || row >= p.max_pos)) { // a position outside the cache: no value
            report(err, KN_CU_ERR_POSITION, row, 0, p.max_pos, b * p.seq + s);
            y[idx] = st<T>((A)NAN);
            continue;
        }
        int64_t k;
        A v;
        if (p.interleaved) {
            k = d / 2;
            A c = ld(cs[row * half + k]), sv = ld(sn[row * half + k]);
            A x1 = ld(x[base + 2 * k]), x2 = ld(x[base + 2 * k + 1]);
            v = (d & 1) ? sv * x1 + c * x2 : c * x1 - sv * x2;
        } else {
            k = d < half ? d : d - half;
            A c = ld(cs[row * half + k]), sv = ld(sn[row * half + k]);
            A x1 = ld(x[base + k]), x2 = ld(x[base + k + half]);
            v = d < half ? c * x1 - sv * x2 : sv * x1 + c * x2;
        }
        y[idx] = st<T>(v);
    }
}

// ------------------------------------------------------------------ SwiGLU

template <typename T> __global__ void k_swiglu(const T *a, const T *b, T *y, float alpha, int64_t n) {
    KNCU_LOOP(i, n) {
        float av = ld(a[i]), bv = ld(b[i]);
        y[i] = st<T>(av / (1.0f + expf(-alpha * av)) * bv);
    }
}

__global__ void k_swiglu_double(const double *a, const double *b, double *y, float alpha, int64_t n) {
    KNCU_LOOP(i, n) y[i] = a[i] / (1.0 + exp(-(double)alpha * a[i])) * b[i];
}

// float16/bfloat16: every step rounded, as the reference computes in that type
template <typename T> __global__ void k_swiglu_half(const T *a, const T *b, T *y, float alpha, kiln_dtype t, int64_t n) {
    const float na = round_as(t, -alpha);
    KNCU_LOOP(i, n) {
        float av = ld(a[i]), bv = ld(b[i]);
        float e = round_as(t, expf(round_as(t, na * av)));
        float sg = round_as(t, 1.0f / round_as(t, 1.0f + e));
        y[i] = st<T>(round_as(t, round_as(t, av * sg) * bv));
    }
}

// ------------------------------------------------------------------ CausalConvWithState

template <typename T>
__global__ void k_causal_conv(const T *x, const T *w, const T *bias, const T *past, T *y, T *state, int64_t B,
                              int64_t C, int64_t L, int64_t k, bool silu, kiln_dtype t) {
    typedef typename acc<T>::type A;
    const int64_t P = k - 1, n = B * C * (L + P);
    KNCU_LOOP(idx, n) {
        const int64_t i = idx % (L + P), bc = idx / (L + P), ch = bc % C;
        const T *xr = x + bc * L;
        const T *pr = past ? past + bc * P : nullptr;
        if (i >= L) { // the new state: the last P positions of [past, x]
            if (!state) continue;
            int64_t q = i - L, p = L + q;
            A v = p < P ? (pr ? ld(pr[p]) : (A)0) : ld(xr[p - P]);
            state[bc * P + q] = st<T>(v);
            continue;
        }
        A acc_v = bias ? ld(bias[ch]) : (A)0;
        for (int64_t m = 0; m < k; m++) {
            int64_t p = i + m; // position in [past (P), x (L)]
            A v = p < P ? (pr ? ld(pr[p]) : (A)0) : ld(xr[p - P]);
            acc_v += ld(w[ch * k + m]) * v;
        }
        // the reference rounds the convolution to the input type before the activation
        if (t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16) acc_v = (A)round_as(t, (float)acc_v);
        if (silu) acc_v = acc_v / ((A)1 + exp(-acc_v));
        y[bc * L + i] = st<T>(acc_v);
    }
}

// ------------------------------------------------------------------ LinearAttention

// One warp per (batch, kv head, value column m): column m of the state (dk values) lives in the
// lanes' registers, NPER per lane; every update of the recurrence acts on columns independently.
template <typename T, int NPER> __global__ void k_linear_attn(const T *q, const T *k, const T *v, const T *decay,
                                                              const T *beta, kn_cu_linear_attn p) {
    const int lane = threadIdx.x & 31;
    const int64_t wid = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t total = p.batch * p.kv_heads * p.dv;
    if (wid >= total) return;
    const int64_t m = wid % p.dv, bh = wid / p.dv, h = bh % p.kv_heads, b = bh / p.kv_heads;
    const int64_t dk = p.dk, dv = p.dv, group = p.q_heads / p.kv_heads;
    float S[NPER];
#pragma unroll
    for (int e = 0; e < NPER; e++) {
        int64_t d = lane + 32 * e;
        S[e] = d < dk && p.past ? load_as_float(p.past, p.past_dt, (bh * dk + d) * dv + m) : 0.0f;
    }
    for (int64_t t = 0; t < p.seq; t++) {
        const int64_t bt = b * p.seq + t;
        float kt[NPER];
#pragma unroll
        for (int e = 0; e < NPER; e++) {
            int64_t d = lane + 32 * e;
            kt[e] = d < dk ? ld(k[(bt * p.kv_heads + h) * dk + d]) : 0.0f;
        }
        if (decay) {
#pragma unroll
            for (int e = 0; e < NPER; e++) {
                int64_t d = lane + 32 * e;
                if (d >= dk) continue;
                float gl = p.decay_last == p.kv_heads ? ld(decay[bt * p.decay_last + h])
                                                      : ld(decay[bt * p.decay_last + h * dk + d]);
                S[e] *= expf(gl);
            }
        }
        float vt = ld(v[(bt * p.kv_heads + h) * dv + m]);
        if (beta) { // delta rule: v_t <- beta * (v_t - S^T k_t)
            float dot = 0.0f;
#pragma unroll
            for (int e = 0; e < NPER; e++) dot += S[e] * kt[e];
            dot = warp_sum(dot);
            float bt_v = ld(beta[bt * p.beta_last + (p.beta_last == 1 ? 0 : h)]);
            vt = bt_v * (vt - dot);
        }
#pragma unroll
        for (int e = 0; e < NPER; e++) S[e] += kt[e] * vt;
        for (int64_t gq = 0; gq < group; gq++) {
            const int64_t hq = h * group + gq;
            float o = 0.0f;
#pragma unroll
            for (int e = 0; e < NPER; e++) {
                int64_t d = lane + 32 * e;
                if (d < dk) o += ld(q[(bt * p.q_heads + hq) * dk + d]) * S[e];
            }
            o = warp_sum(o);
            if (lane == 0) store_from_float(p.out, p.out_dt, (bt * p.q_heads + hq) * dv + m, o * p.scale);
        }
    }
    if (p.state) {
#pragma unroll
        for (int e = 0; e < NPER; e++) {
            int64_t d = lane + 32 * e;
            if (d < dk) store_from_float(p.state, p.state_dt, (bh * dk + d) * dv + m, S[e]);
        }
    }
}

template <typename T>
cudaError_t linear_attn_launch(const T *q, const T *k, const T *v, const T *decay, const T *beta,
                               const kn_cu_linear_attn &p, cudaStream_t s) {
    const int64_t warps = p.batch * p.kv_heads * p.dv;
    const int threads = 128;
    const int64_t blocks64 = (warps * 32 + threads - 1) / threads;
    if (blocks64 > 0x7fffffffLL) return cudaErrorInvalidValue;
    const unsigned blocks = (unsigned)blocks64;
    if (p.dk <= 32) k_linear_attn<T, 1><<<blocks, threads, 0, s>>>(q, k, v, decay, beta, p);
    else if (p.dk <= 64) k_linear_attn<T, 2><<<blocks, threads, 0, s>>>(q, k, v, decay, beta, p);
    else if (p.dk <= 128) k_linear_attn<T, 4><<<blocks, threads, 0, s>>>(q, k, v, decay, beta, p);
    else if (p.dk <= KN_CU_LINEAR_ATTN_MAX_DK) k_linear_attn<T, 8><<<blocks, threads, 0, s>>>(q, k, v, decay, beta, p);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}

} // namespace

// ------------------------------------------------------------------ launchers

extern "C" cudaError_t kn_cu_attn_copy(kiln_dtype from, kiln_dtype to, const void *src, void *dst,
                                       const kn_cu_attn_copy_dims *g, float mult, kiln_dtype round_to,
                                       cudaStream_t s) {
    int64_t n = g->dims[0] * g->dims[1] * g->dims[2] * g->dims[3];
    if (n == 0) return cudaSuccess;
    switch (from) {
    case KILN_DTYPE_FLOAT: return copy_from(to, (const float *)src, dst, *g, mult, round_to, n, s);
    case KILN_DTYPE_DOUBLE: return copy_from(to, (const double *)src, dst, *g, mult, round_to, n, s);
    case KILN_DTYPE_FLOAT16: return copy_from(to, (const f16 *)src, dst, *g, mult, round_to, n, s);
    case KILN_DTYPE_BFLOAT16: return copy_from(to, (const bf16 *)src, dst, *g, mult, round_to, n, s);
    default: return cudaErrorNotSupported;
    }
}

extern "C" cudaError_t kn_cu_attn_rows_run(kiln_dtype st, void *scores, const kn_cu_attn_rows *p, cudaStream_t s) {
    if (p->rows <= 0) return cudaSuccess;
    int threads = p->skv <= 32 ? 32 : p->skv <= 128 ? 64 : p->skv <= 512 ? 128 : 256;
    unsigned grid = (unsigned)(p->rows < (1 << 20) ? p->rows : (1 << 20));
    switch (st) {
    case KILN_DTYPE_FLOAT: k_attn_rows<float><<<grid, threads, 0, s>>>((float *)scores, *p); break;
    case KILN_DTYPE_FLOAT16: k_attn_rows<f16><<<grid, threads, 0, s>>>((f16 *)scores, *p); break;
    case KILN_DTYPE_BFLOAT16: k_attn_rows<bf16><<<grid, threads, 0, s>>>((bf16 *)scores, *p); break;
    default: return cudaErrorNotSupported;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_rotary_run(kiln_dtype dt, const void *x, const void *cos_cache, const void *sin_cache,
                                        const int64_t *position_ids, void *y, const kn_cu_rotary *p, kn_cu_errp err,
                                        cudaStream_t s) {
    int64_t n = p->batch * p->heads * p->seq * p->head;
    if (n == 0) return cudaSuccess;
    unsigned grid = grid_for(n, 256);
    KNCU_DISPATCH_FLOAT(dt, (k_rotary<type_><<<grid, 256, 0, s>>>((const type_ *)x, (const type_ *)cos_cache,
                                                                    (const type_ *)sin_cache, position_ids,
                                                                    (type_ *)y, *p, n, err)));
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_swiglu(kiln_dtype dt, const void *a, const void *b, void *y, int64_t n, float alpha,
                                    cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    unsigned grid = grid_for(n, 256);
    switch (dt) {
    case KILN_DTYPE_FLOAT: k_swiglu<float><<<grid, 256, 0, s>>>((const float *)a, (const float *)b, (float *)y, alpha, n); break;
    case KILN_DTYPE_DOUBLE: k_swiglu_double<<<grid, 256, 0, s>>>((const double *)a, (const double *)b, (double *)y, alpha, n); break;
    case KILN_DTYPE_FLOAT16:
        k_swiglu_half<f16><<<grid, 256, 0, s>>>((const f16 *)a, (const f16 *)b, (f16 *)y, alpha, dt, n);
        break;
    case KILN_DTYPE_BFLOAT16:
        k_swiglu_half<bf16><<<grid, 256, 0, s>>>((const bf16 *)a, (const bf16 *)b, (bf16 *)y, alpha, dt, n);
        break;
    default: return cudaErrorNotSupported;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_causal_conv_state(kiln_dtype dt, const void *x, const void *w, const void *bias,
                                               const void *past, void *y, void *state, int64_t B, int64_t C,
                                               int64_t L, int64_t k, bool silu, cudaStream_t s) {
    int64_t n = B * C * (L + k - 1);
    if (n == 0 || k < 1) return cudaSuccess;
    unsigned grid = grid_for(n, 256);
    KNCU_DISPATCH_FLOAT(dt, (k_causal_conv<type_><<<grid, 256, 0, s>>>(
                                (const type_ *)x, (const type_ *)w, (const type_ *)bias, (const type_ *)past,
                                (type_ *)y, (type_ *)state, B, C, L, k, silu, dt)));
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_linear_attn_run(kiln_dtype dt, const void *q, const void *k, const void *v,
                                             const void *decay, const void *beta, const kn_cu_linear_attn *p,
                                             cudaStream_t s) {
    if (p->batch * p->kv_heads * p->dv == 0) return cudaSuccess;
    switch (dt) {
    case KILN_DTYPE_FLOAT:
        return linear_attn_launch((const float *)q, (const float *)k, (const float *)v, (const float *)decay,
                                  (const float *)beta, *p, s);
    case KILN_DTYPE_FLOAT16:
        return linear_attn_launch((const f16 *)q, (const f16 *)k, (const f16 *)v, (const f16 *)decay,
                                  (const f16 *)beta, *p, s);
    case KILN_DTYPE_BFLOAT16:
        return linear_attn_launch((const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (const bf16 *)decay,
                                  (const bf16 *)beta, *p, s);
    case KILN_DTYPE_DOUBLE:
        return linear_attn_launch((const double *)q, (const double *)k, (const double *)v, (const double *)decay,
                                  (const double *)beta, *p, s);
    default: return cudaErrorNotSupported;
    }
}

// A kernel of this file, whose first load loads the file's module (kn_cu_preload_modules).
extern "C" const void *kn_cu_module_attention(void) { return (const void *)k_attn_copy<float, float>; }

// fp16 precision with a per-tensor power-of-two scale. fp16 holds magnitudes from about 6e-8 to
// 65504 only; an fp32 activation outside that range (a randomly initialised network's deep layers
// reach 1e-14) would flush to zero or overflow when a Conv or MatMul runs on fp16 tensor cores.
// So the operand is multiplied by 2^e, with e chosen on the device from its largest magnitude so
// that it lands in [1, 2), converted, multiplied, and the product divided by the scales again.
// Powers of two make the scaling exact; everything stays on the stream (no host round trip).
#include "backend/cuda/cu_common.cuh"

using namespace kncu;

namespace {

// slot[0]: the largest magnitude as float bits (non-negative floats order as unsigned ints);
// slot[1]: the scale, written by one thread of the conversion kernel.
__global__ void amax_kernel(const float *__restrict__ x, int64_t n, unsigned *__restrict__ slot) {
    float m = 0.f;
    KNCU_LOOP(i, n) {
        float a = fabsf(x[i]);
        if (a == a && a > m) m = a; // NaN does not count (it stays NaN through any scale)
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    __shared__ float warp_max[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_max[warp] = m;
    __syncthreads();
    if (warp == 0) {
        m = lane < (int)(blockDim.x >> 5) ? warp_max[lane] : 0.f;
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0) atomicMax(slot, __float_as_uint(m));
    }
}

__device__ __forceinline__ float scale_of(const unsigned *slot) {
    float amax = __uint_as_float(slot[0]);
    if (!(amax > 0.f) || isinf(amax)) return 1.f;
    int e;
    frexpf(amax, &e); // amax = f * 2^e with f in [0.5, 1): amax * 2^(1-e) is in [1, 2)
    int k = 1 - e;
    k = k < -60 ? -60 : k > 60 ? 60 : k; // two scales multiplied stay finite in float
    return ldexpf(1.f, k);
}

__global__ void to_f16_scaled(const float *__restrict__ x, f16 *__restrict__ y, int64_t n, unsigned *__restrict__ slot) {
    float s = scale_of(slot);
    if (blockIdx.x == 0 && threadIdx.x == 0) reinterpret_cast<float *>(slot)[1] = s;
    KNCU_LOOP(i, n) y[i] = __float2half_rn(x[i] * s);
}

__global__ void from_f16_unscaled(const f16 *__restrict__ y, float *__restrict__ out, int64_t n,
                                  const float *__restrict__ s1, const float *__restrict__ s2) {
    float inv = 1.f / ((s1 ? *s1 : 1.f) * (s2 ? *s2 : 1.f));
    KNCU_LOOP(i, n) out[i] = __half2float(y[i]) * inv;
}

__global__ void gemm_scalars(float *__restrict__ out, float alpha, float beta, const float *__restrict__ sa,
                             const float *__restrict__ sb) {
    out[0] = alpha / ((sa ? *sa : 1.f) * (sb ? *sb : 1.f));
    out[1] = beta;
}

} // namespace

extern "C" cudaError_t kn_cu_to_f16_scaled(const float *x, void *y, int64_t n, void *slot, cudaStream_t s) {
    cudaError_t e = cudaMemsetAsync(slot, 0, 2 * sizeof(float), s);
    if (e != cudaSuccess) return e;
    if (n > 0) {
        unsigned g = grid_for(n, 256);
        if (g > 1024) g = 1024; // few atomics: each block strides over the rest
        amax_kernel<<<g, 256, 0, s>>>(x, n, (unsigned *)slot);
    }
    to_f16_scaled<<<grid_for(n, 256), 256, 0, s>>>(x, (f16 *)y, n, (unsigned *)slot);
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_from_f16_unscaled(const void *y, float *out, int64_t n, const float *s1, const float *s2,
                                               cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    from_f16_unscaled<<<grid_for(n, 256), 256, 0, s>>>((const f16 *)y, out, n, s1, s2);
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_gemm_scalars(float *out, float alpha, float beta, const float *sa, const float *sb,
                                          cudaStream_t s) {
    gemm_scalars<<<1, 1, 0, s>>>(out, alpha, beta, sa, sb);
    return cudaGetLastError();
}

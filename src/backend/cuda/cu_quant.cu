// Quantisation kernels (QuantizeLinear, DequantizeLinear, the integer matrix products of
// MatMulInteger and QLinearMatMul) and Einsum's direct sum.
//
// The CPU kernels (src/backend/cpu/quant.c, linalg.c, einsum.c) are the reference. The element
// types vary per input (scale, zero point, packed 4-/2-bit data), so values are read through one
// switch on the type (uniform across a launch) rather than a template per combination.
#include "backend/cuda/cu_common.cuh"

using namespace kncu;

namespace {

__device__ __forceinline__ int packed_bits(kiln_dtype t) {
    return t == KILN_DTYPE_UINT4 || t == KILN_DTYPE_INT4 ? 4 : t == KILN_DTYPE_UINT2 || t == KILN_DTYPE_INT2 ? 2 : 0;
}

// Element i of p (type t) as a double; packed types hold the first element in the low bits.
__device__ double ld_any(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_DTYPE_FLOAT: return ((const float *)p)[i];
    case KILN_DTYPE_DOUBLE: return ((const double *)p)[i];
    case KILN_DTYPE_FLOAT16: return __half2float(((const f16 *)p)[i]);
    case KILN_DTYPE_BFLOAT16: return __bfloat162float(((const bf16 *)p)[i]);
    case KILN_DTYPE_INT8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case KILN_DTYPE_INT16: return ((const int16_t *)p)[i];
    case KILN_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case KILN_DTYPE_INT32: return ((const int32_t *)p)[i];
    case KILN_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case KILN_DTYPE_INT64: return (double)((const int64_t *)p)[i];
    case KILN_DTYPE_UINT64: return (double)((const uint64_t *)p)[i];
    case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
    case KILN_DTYPE_UINT4: case KILN_DTYPE_INT4: case KILN_DTYPE_UINT2: case KILN_DTYPE_INT2: {
        int bits = packed_bits(t), per = 8 / bits;
        unsigned code = (((const uint8_t *)p)[i / per] >> ((i % per) * bits)) & ((1u << bits) - 1);
        bool sgn = t == KILN_DTYPE_INT4 || t == KILN_DTYPE_INT2;
        return sgn && (code >> (bits - 1)) ? (double)((int)code - (1 << bits)) : (double)code;
    }
    default: return 0;
    }
}

// Stores an integer already in range (or a float) at element i of a non-packed type.
__device__ void st_any(void *p, kiln_dtype t, int64_t i, double v) {
    switch (t) {
    case KILN_DTYPE_FLOAT: ((float *)p)[i] = (float)v; break;
    case KILN_DTYPE_DOUBLE: ((double *)p)[i] = v; break;
    case KILN_DTYPE_FLOAT16: ((f16 *)p)[i] = __float2half_rn((float)v); break;
    case KILN_DTYPE_BFLOAT16: ((bf16 *)p)[i] = __float2bfloat16_rn((float)v); break;
    case KILN_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case KILN_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case KILN_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    case KILN_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case KILN_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case KILN_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case KILN_DTYPE_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
    case KILN_DTYPE_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

__device__ __forceinline__ int64_t q_index(const kn_cu_qlayout &l, int64_t i) {
    switch (l.mode) {
    case 1: return (i / l.inner) % l.D;
    case 2: {
        int64_t in = i % l.inner, c = (i / l.inner) % l.D, o = i / (l.D * l.inner);
        return (o * l.Ds + c / l.block) * l.inner + in;
    }
    default: return 0;
    }
}

// x / scale rounded to the quotient type, as the CPU's round_to.
__device__ double round_to(kiln_dtype t, double v) {
    switch (t) {
    case KILN_DTYPE_FLOAT: return (float)v;
    case KILN_DTYPE_FLOAT16: return __half2float(__float2half_rn((float)v));
    case KILN_DTYPE_BFLOAT16: return __bfloat162float(__float2bfloat16_rn((float)v));
    default: return v;
    }
}

struct QArgs {
    kiln_dtype x_dt, s_dt, zp_dt, q_dt, y_dt;
    const void *x, *scale, *zp;
    void *y;
    int64_t n, lo, hi;
    kn_cu_qlayout l;
};

__device__ double quantize_one(const QArgs &a, int64_t i) {
    int64_t k = q_index(a.l, i);
    double q;
    if (a.q_dt == KILN_DTYPE_FLOAT && a.x_dt == KILN_DTYPE_FLOAT && a.s_dt == KILN_DTYPE_FLOAT)
        q = (double)(((const float *)a.x)[i] / ((const float *)a.scale)[k]); // the CPU's float path
    else q = round_to(a.q_dt, ld_any(a.x, a.x_dt, i) / ld_any(a.scale, a.s_dt, k));
    if (a.y_dt == KILN_DTYPE_FLOAT) return q; // float8 output: cast by the caller
    double v = rint(q);
    if (v != v) v = -2147483648.0; // NaN: INT32_MIN as numpy's conversion gives, then clip
    v = v < -2147483648.0 ? -2147483648.0 : v > 2147483647.0 ? 2147483647.0 : v;
    int64_t iv = (int64_t)v + (a.zp ? (int64_t)ld_any(a.zp, a.zp_dt, k) : 0);
    return (double)(iv < a.lo ? a.lo : iv > a.hi ? a.hi : iv);
}

// One thread per output byte for packed types, per element otherwise.
__global__ void k_quantize(QArgs a, int bits) {
    if (bits) {
        int per = 8 / bits;
        int64_t units = (a.n + per - 1) / per;
        KNCU_LOOP(u, units) {
            unsigned byte = 0;
            for (int e = 0; e < per; e++) {
                int64_t i = u * per + e;
                if (i >= a.n) break;
                int v = (int)quantize_one(a, i);
                byte |= ((unsigned)v & ((1u << bits) - 1)) << (e * bits);
            }
            ((uint8_t *)a.y)[u] = (uint8_t)byte;
        }
        return;
    }
    KNCU_LOOP(i, a.n) st_any(a.y, a.y_dt, i, quantize_one(a, i));
}

__global__ void k_dequantize(kiln_dtype x_dt, const void *x, kiln_dtype s_dt, const void *scale, kiln_dtype zp_dt,
                             const void *zp, bool in_double, kiln_dtype y_dt, void *y, int64_t n, kn_cu_qlayout l) {
    KNCU_LOOP(i, n) {
        int64_t k = q_index(l, i);
        float xf = (float)ld_any(x, x_dt, i);
        double sd = ld_any(scale, s_dt, k), r;
        if (zp && zp_dt == KILN_DTYPE_INT32) {
            r = ((double)xf - ld_any(zp, zp_dt, k)) * sd;
        } else {
            float dx = zp ? xf - (float)ld_any(zp, zp_dt, k) : xf;
            r = in_double ? (double)dx * sd : (double)(dx * (float)sd);
        }
        st_any(y, y_dt, i, r);
    }
}

// a_scale * b_scale / y_scale in the scales' precision (the CPU's scale_ratio).
__device__ double scale_ratio(const kn_cu_imatmul &p, int64_t ia, int64_t ib) {
    double a = ld_any(p.a_scale, p.s_dt, ia), b = ld_any(p.b_scale, p.s_dt, ib), y = ld_any(p.y_scale, p.s_dt, 0);
    if (p.s_dt == KILN_DTYPE_FLOAT16) {
        float ab = __half2float(__float2half_rn((float)a * (float)b));
        return __half2float(__float2half_rn(ab / (float)y));
    }
    if (p.s_dt == KILN_DTYPE_DOUBLE) return a * b / y;
    return (double)((float)((float)a * (float)b) / (float)y);
}

__global__ void k_imatmul(kn_cu_imatmul p, const void *A, const void *B, void *Y, int64_t total) {
    KNCU_LOOP(e, total) {
        int64_t j = e % p.N, i = (e / p.N) % p.M, b = e / (p.N * p.M);
        int64_t ao = b * p.sa + i * p.K, bo = b * p.sb + j;
        int64_t za = p.a_zp ? (int64_t)ld_any(p.a_zp, p.a_dt, p.a_zp_n > 1 ? i : 0) : 0;
        int64_t zb = p.b_zp ? (int64_t)ld_any(p.b_zp, p.b_dt, p.b_zp_n > 1 ? j : 0) : 0;
        int64_t acc = 0;
        for (int64_t k = 0; k < p.K; k++)
            acc += ((int64_t)ld_any(A, p.a_dt, ao + k) - za) * ((int64_t)ld_any(B, p.b_dt, bo + k * p.N) - zb);
        int64_t yi = b * p.sy + i * p.N + j;
        int32_t a32 = (int32_t)acc;
        if (!p.y_scale) {
            ((int32_t *)Y)[yi] = a32;
            continue;
        }
        double r = scale_ratio(p, p.a_s_n > 1 ? i : 0, p.b_s_n > 1 ? j : 0);
        double v = rint((double)a32 * r + (p.y_zp ? ld_any(p.y_zp, p.y_dt, 0) : 0.0));
        double lo = p.y_dt == KILN_DTYPE_INT8 ? -128 : 0, hi = p.y_dt == KILN_DTYPE_INT8 ? 127 : 255;
        v = v < lo ? lo : v > hi ? hi : v;
        st_any(Y, p.y_dt, yi, v);
    }
}

__global__ void k_einsum(kn_cu_einsum p, kiln_dtype y_dt, void *y, int64_t n, int64_t nsum) {
    KNCU_LOOP(o, n) {
        int64_t base[KN_CU_EINSUM_MAX_IN] = {0}, t = o;
        for (int i = p.out_rank - 1; i >= 0; i--) {
            int64_t idx = t % p.out_dims[i];
            t /= p.out_dims[i];
            for (int q = 0; q < p.n_in; q++) base[q] += idx * p.out_stride[q][i];
        }
        double acc = 0;
        for (int64_t s = 0; s < nsum; s++) {
            int64_t off[KN_CU_EINSUM_MAX_IN], u = s;
            for (int q = 0; q < p.n_in; q++) off[q] = base[q];
            for (int i = p.n_sum - 1; i >= 0; i--) {
                int64_t idx = u % p.sum_dims[i];
                u /= p.sum_dims[i];
                for (int q = 0; q < p.n_in; q++) off[q] += idx * p.sum_stride[q][i];
            }
            double prod = 1;
            for (int q = 0; q < p.n_in; q++) prod *= ld_any(p.in[q], p.in_dt[q], off[q]);
            acc += prod;
        }
        st_any(y, y_dt, o, acc);
    }
}

} // namespace

extern "C" cudaError_t kn_cu_quantize(kiln_dtype x_dt, const void *x, kiln_dtype s_dt, const void *scale,
                                      kiln_dtype zp_dt, const void *zp, kiln_dtype q_dt, kiln_dtype y_dt, void *y,
                                      int64_t n, const kn_cu_qlayout *l, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    QArgs a;
    a.x_dt = x_dt, a.s_dt = s_dt, a.zp_dt = zp_dt, a.q_dt = q_dt, a.y_dt = y_dt;
    a.x = x, a.scale = scale, a.zp = zp, a.y = y, a.n = n, a.l = *l;
    int bits = 0;
    switch (y_dt) {
    case KILN_DTYPE_INT8: a.lo = -128, a.hi = 127; break;
    case KILN_DTYPE_UINT8: a.lo = 0, a.hi = 255; break;
    case KILN_DTYPE_INT16: a.lo = -32768, a.hi = 32767; break;
    case KILN_DTYPE_UINT16: a.lo = 0, a.hi = 65535; break;
    case KILN_DTYPE_INT32: a.lo = INT32_MIN, a.hi = INT32_MAX; break;
    case KILN_DTYPE_INT4: a.lo = -8, a.hi = 7, bits = 4; break;
    case KILN_DTYPE_UINT4: a.lo = 0, a.hi = 15, bits = 4; break;
    case KILN_DTYPE_INT2: a.lo = -2, a.hi = 1, bits = 2; break;
    case KILN_DTYPE_UINT2: a.lo = 0, a.hi = 3, bits = 2; break;
    case KILN_DTYPE_FLOAT: a.lo = a.hi = 0; break;
    default: return cudaErrorNotSupported;
    }
    int64_t units = bits ? (n + 8 / bits - 1) / (8 / bits) : n;
    k_quantize<<<grid_for(units, 256), 256, 0, s>>>(a, bits);
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_dequantize(kiln_dtype x_dt, const void *x, kiln_dtype s_dt, const void *scale,
                                        kiln_dtype zp_dt, const void *zp, bool in_double, kiln_dtype y_dt, void *y,
                                        int64_t n, const kn_cu_qlayout *l, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    if (y_dt != KILN_DTYPE_FLOAT && y_dt != KILN_DTYPE_DOUBLE && y_dt != KILN_DTYPE_FLOAT16 &&
        y_dt != KILN_DTYPE_BFLOAT16)
        return cudaErrorNotSupported;
    k_dequantize<<<grid_for(n, 256), 256, 0, s>>>(x_dt, x, s_dt, scale, zp_dt, zp, in_double, y_dt, y, n, *l);
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_imatmul_run(const kn_cu_imatmul *p, const void *A, const void *B, void *y,
                                         cudaStream_t s) {
    int64_t total = p->batch * p->M * p->N;
    if (total == 0) return cudaSuccess;
    k_imatmul<<<grid_for(total, 128), 128, 0, s>>>(*p, A, B, y, total);
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_einsum_direct(const kn_cu_einsum *p, kiln_dtype y_dt, void *y, int64_t n,
                                           cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    if (p->n_in < 1 || p->n_in > KN_CU_EINSUM_MAX_IN) return cudaErrorNotSupported;
    int64_t nsum = 1;
    for (int i = 0; i < p->n_sum; i++) nsum *= p->sum_dims[i];
    k_einsum<<<grid_for(n, 128), 128, 0, s>>>(*p, y_dt, y, n, nsum);
    return cudaGetLastError();
}

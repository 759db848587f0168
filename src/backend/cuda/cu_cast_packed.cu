// Casts where either side is a packed sub-byte type (int4, uint4, int2, uint2, float4e2m1) or
// float8e8m0, with the CPU backend's semantics (src/backend/cpu/elementwise_cast.c): integer to
// integer exactly through int64 (wrapping into the narrow type), anything else through double;
// double to integer truncates (out of range and NaN: INT64_MIN, then wrapped); float4e2m1 rounds to
// nearest even and clamps to +-6; e8m0 takes the float32 exponent, rounded up/down/to nearest.
// A packed output is written one byte per thread (its 2 or 4 elements), so no two threads share a
// byte.
#include "backend/cuda/cu_common.cuh"

using namespace kncu;

namespace {

struct side {
    int dt;   // kiln_dtype
    int bits; // 2 or 4 for packed types, else 0
};

__device__ __forceinline__ bool is_packed_int(int t) {
    return t == KILN_DTYPE_INT4 || t == KILN_DTYPE_UINT4 || t == KILN_DTYPE_INT2 || t == KILN_DTYPE_UINT2;
}
__device__ __forceinline__ bool is_int(int t) {
    return t == KILN_DTYPE_INT8 || t == KILN_DTYPE_INT16 || t == KILN_DTYPE_INT32 || t == KILN_DTYPE_INT64 ||
           t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_UINT16 || t == KILN_DTYPE_UINT32 || t == KILN_DTYPE_UINT64 ||
           t == KILN_DTYPE_BOOL || is_packed_int(t);
}

__device__ __forceinline__ float f4_to_f32(unsigned code) {
    const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return (code & 8) ? -mag[code & 7] : mag[code & 7];
}

__device__ unsigned f32_to_f4(float v) {
    unsigned s = signbit(v) ? 8u : 0u;
    if (isnan(v)) return 8u ^ s;
    double a = fabs((double)v);
    if (a >= 6.0) return 7u | s;
    if (a == 0.0) return s;
    int e;
    frexp(a, &e);
    int E = e - 1;
    if (E < 0) E = 0; // subnormal: steps of 0.5
    int m = (int)rint(ldexp(a, 1 - E)); // half to even
    if (m >= 4) {
        m >>= 1;
        E++;
    }
    if (E > 2) return 7u | s;
    unsigned code = m < 2 ? (unsigned)m : ((unsigned)(E + 1) << 1) | (unsigned)(m - 2);
    return code | s;
}

__device__ __forceinline__ float e8m0_to_f32(uint8_t b) {
    return b == 0xff ? __int_as_float(0x7fc00000) : ldexpf(1.0f, (int)b - 127);
}

__device__ uint8_t f32_to_e8m0(float v, bool saturate, int mode) {
    uint32_t bits = __float_as_uint(v);
    unsigned e = (bits >> 23) & 0xff;
    if (e == 0xff) return 0xff; // inf and NaN
    bool up = false;
    if (mode == 0) { // up
        up = (bits & 0x7fffff) != 0;
    } else if (mode == 2) { // nearest
        bool g = bits & 0x400000, r = bits & 0x200000, st = (bits & 0x1fffff) != 0;
        up = g && (r || st || e > 0);
    }
    if (up && saturate && e == 0xfe) up = false;
    return (uint8_t)(e + (up ? 1 : 0));
}

__device__ __forceinline__ int64_t d2i64(double v) {
    if (v > -9223372036854775808.0 && v < 9223372036854775808.0) return (int64_t)v;
    return INT64_MIN;
}

// Element i of x, as int64 (integer sources) and as double.
__device__ void load(int t, const void *x, int64_t i, int64_t &iv, double &dv) {
    iv = 0;
    dv = 0;
    if (is_packed_int(t) || t == KILN_DTYPE_FLOAT4E2M1) {
        int bits = (t == KILN_DTYPE_INT2 || t == KILN_DTYPE_UINT2) ? 2 : 4, per = 8 / bits;
        unsigned c = (((const uint8_t *)x)[i / per] >> ((i % per) * bits)) & ((1u << bits) - 1);
        if (t == KILN_DTYPE_FLOAT4E2M1) {
            dv = f4_to_f32(c);
            return;
        }
        iv = ((t == KILN_DTYPE_INT4 || t == KILN_DTYPE_INT2) && (c >> (bits - 1))) ? (int64_t)c - (1 << bits) : c;
        dv = (double)iv;
        return;
    }
    switch (t) {
    case KILN_DTYPE_FLOAT: dv = ((const float *)x)[i]; break;
    case KILN_DTYPE_DOUBLE: dv = ((const double *)x)[i]; break;
    case KILN_DTYPE_FLOAT16: dv = __half2float(((const f16 *)x)[i]); break;
    case KILN_DTYPE_BFLOAT16: dv = __bfloat162float(((const bf16 *)x)[i]); break;
    case KILN_DTYPE_FLOAT8E8M0: dv = e8m0_to_f32(((const uint8_t *)x)[i]); break;
    case KILN_DTYPE_INT8: iv = ((const int8_t *)x)[i]; break;
    case KILN_DTYPE_INT16: iv = ((const int16_t *)x)[i]; break;
    case KILN_DTYPE_INT32: iv = ((const int32_t *)x)[i]; break;
    case KILN_DTYPE_INT64: iv = ((const int64_t *)x)[i]; break;
    case KILN_DTYPE_UINT8: iv = ((const uint8_t *)x)[i]; break;
    case KILN_DTYPE_UINT16: iv = ((const uint16_t *)x)[i]; break;
    case KILN_DTYPE_UINT32: iv = ((const uint32_t *)x)[i]; break;
    case KILN_DTYPE_UINT64: iv = (int64_t)((const uint64_t *)x)[i]; dv = (double)((const uint64_t *)x)[i]; return;
    case KILN_DTYPE_BOOL: iv = ((const uint8_t *)x)[i] != 0; break;
    default: break;
    }
    if (is_int(t)) dv = (double)iv;
}

// The code of a value in a packed type.
__device__ __forceinline__ unsigned packed_code(int to, bool as_int, int64_t iv, double dv) {
    if (to == KILN_DTYPE_FLOAT4E2M1) return f32_to_f4((float)dv);
    int64_t v = as_int ? iv : d2i64(dv);
    return (unsigned)((uint64_t)v & 0xf);
}

__global__ void k_to_packed(int from, int to, const void *__restrict__ x, uint8_t *__restrict__ y, int64_t n) {
    int bits = (to == KILN_DTYPE_INT2 || to == KILN_DTYPE_UINT2) ? 2 : 4, per = 8 / bits;
    bool as_int = is_int(from) && is_int(to);
    int64_t nbytes = (n + per - 1) / per;
    KNCU_LOOP(b, nbytes) {
        unsigned byte = 0;
        for (int k = 0; k < per; k++) {
            int64_t i = b * per + k;
            if (i >= n) break;
            int64_t iv;
            double dv;
            load(from, x, i, iv, dv);
            byte |= (packed_code(to, as_int, iv, dv) & ((1u << bits) - 1)) << (k * bits);
        }
        y[b] = (uint8_t)byte;
    }
}

__global__ void k_from_packed(int from, int to, const void *__restrict__ x, void *__restrict__ y, int64_t n,
                              bool saturate, int e8_mode) {
    bool as_int = is_int(from) && is_int(to);
    KNCU_LOOP(i, n) {
        int64_t iv;
        double dv;
        load(from, x, i, iv, dv);
        switch (to) {
        case KILN_DTYPE_FLOAT: ((float *)y)[i] = (float)dv; break;
        case KILN_DTYPE_DOUBLE: ((double *)y)[i] = dv; break;
        case KILN_DTYPE_FLOAT16: ((f16 *)y)[i] = __float2half_rn((float)dv); break;
        case KILN_DTYPE_BFLOAT16: ((bf16 *)y)[i] = __float2bfloat16_rn((float)dv); break;
        case KILN_DTYPE_FLOAT8E8M0: ((uint8_t *)y)[i] = f32_to_e8m0((float)dv, saturate, e8_mode); break;
        case KILN_DTYPE_BOOL: ((uint8_t *)y)[i] = as_int ? iv != 0 : dv != 0.0; break;
        default: {
            int64_t v = as_int ? iv : d2i64(dv);
            switch (to) {
            case KILN_DTYPE_INT8: ((int8_t *)y)[i] = (int8_t)(uint64_t)v; break;
            case KILN_DTYPE_INT16: ((int16_t *)y)[i] = (int16_t)(uint64_t)v; break;
            case KILN_DTYPE_INT32: ((int32_t *)y)[i] = (int32_t)(uint64_t)v; break;
            case KILN_DTYPE_INT64: ((int64_t *)y)[i] = v; break;
            case KILN_DTYPE_UINT8: ((uint8_t *)y)[i] = (uint8_t)(uint64_t)v; break;
            case KILN_DTYPE_UINT16: ((uint16_t *)y)[i] = (uint16_t)(uint64_t)v; break;
            case KILN_DTYPE_UINT32: ((uint32_t *)y)[i] = (uint32_t)(uint64_t)v; break;
            case KILN_DTYPE_UINT64:
                ((uint64_t *)y)[i] = as_int ? (uint64_t)v
                                            : (dv >= 9223372036854775808.0 && dv < 18446744073709551616.0
                                                   ? (uint64_t)dv
                                                   : (uint64_t)d2i64(dv));
                break;
            default: break;
            }
        }
        }
    }
}

} // namespace

extern "C" bool kn_cu_cast_packed_supported(kiln_dtype from, kiln_dtype to) {
    auto plain = [](kiln_dtype t) {
        return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_DOUBLE || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16 ||
               t == KILN_DTYPE_INT8 || t == KILN_DTYPE_INT16 || t == KILN_DTYPE_INT32 || t == KILN_DTYPE_INT64 ||
               t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_UINT16 || t == KILN_DTYPE_UINT32 || t == KILN_DTYPE_UINT64 ||
               t == KILN_DTYPE_BOOL;
    };
    auto special = [](kiln_dtype t) {
        return t == KILN_DTYPE_INT4 || t == KILN_DTYPE_UINT4 || t == KILN_DTYPE_INT2 || t == KILN_DTYPE_UINT2 ||
               t == KILN_DTYPE_FLOAT4E2M1 || t == KILN_DTYPE_FLOAT8E8M0;
    };
    if (!special(from) && !special(to)) return false;
    return (plain(from) || special(from)) && (plain(to) || special(to));
}

extern "C" cudaError_t kn_cu_cast_packed(kiln_dtype from, kiln_dtype to, const void *x, void *y, int64_t n,
                                         bool saturate, int e8_mode, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    bool packed_out = to == KILN_DTYPE_INT4 || to == KILN_DTYPE_UINT4 || to == KILN_DTYPE_INT2 ||
                      to == KILN_DTYPE_UINT2 || to == KILN_DTYPE_FLOAT4E2M1;
    if (packed_out) {
        int per = (to == KILN_DTYPE_INT2 || to == KILN_DTYPE_UINT2) ? 4 : 2;
        k_to_packed<<<grid_for((n + per - 1) / per, 256), 256, 0, s>>>((int)from, (int)to, x, (uint8_t *)y, n);
    } else {
        k_from_packed<<<grid_for(n, 256), 256, 0, s>>>((int)from, (int)to, x, y, n, saturate, e8_mode);
    }
    return cudaGetLastError();
}

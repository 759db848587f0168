// Elementwise kernels: unary and binary operators (with broadcasting), Where, Cast, Clip, strided
// copies (Expand, Transpose, Slice), fills. One kernel per element type; the operator is a
// run-time switch, uniform across a warp, so a handful of instantiations cover every operator.
#include "backend/cuda/cu_common.cuh"

#include <math.h>
#include <string.h>

using namespace kncu;

namespace {

// ---------------------------------------------------------------- unary

template <typename A> __device__ __forceinline__ A funary(int op, A x, float a, float b) {
    const A zero = 0, one = 1;
    switch (op) {
    case KN_CU_ABS: return x < zero ? -x : x;
    case KN_CU_NEG: return -x;
    case KN_CU_EXP: return exp(x);
    case KN_CU_LOG: return log(x);
    case KN_CU_SQRT: return sqrt(x);
    case KN_CU_RECIP: return one / x;
    case KN_CU_FLOOR: return floor(x);
    case KN_CU_CEIL: return ceil(x);
    case KN_CU_ROUND: return rint(x);
    case KN_CU_SIGN: return x > zero ? one : (x < zero ? -one : (x == zero ? zero : x));
    case KN_CU_ERF: return erf(x);
    case KN_CU_TANH: return tanh(x);
    case KN_CU_SIGMOID: return x >= zero ? one / (one + exp(-x)) : exp(x) / (one + exp(x));
    case KN_CU_RELU: return x > zero ? x : (x == x ? zero : x);
    case KN_CU_LEAKYRELU: return x >= zero ? x : (A)a * x;
    case KN_CU_ELU: return x >= zero ? x : (A)a * (exp(x) - one);
    case KN_CU_SELU: return (A)b * (x > zero ? x : (A)a * (exp(x) - one));
    case KN_CU_HARDSIGMOID: {
        A v = (A)a * x + (A)b;
        return v < zero ? zero : (v > one ? one : v);
    }
    case KN_CU_HARDSWISH: {
        A v = x / (A)6 + (A)0.5;
        v = v < zero ? zero : (v > one ? one : v);
        return x * v;
    }
    case KN_CU_SOFTPLUS: return x > (A)20 ? x : log1p(exp(x));
    case KN_CU_SOFTSIGN: return x / (one + (x < zero ? -x : x));
    case KN_CU_SIN: return sin(x);
    case KN_CU_COS: return cos(x);
    case KN_CU_TAN: return tan(x);
    case KN_CU_ASIN: return asin(x);
    case KN_CU_ACOS: return acos(x);
    case KN_CU_ATAN: return atan(x);
    case KN_CU_SINH: return sinh(x);
    case KN_CU_COSH: return cosh(x);
    case KN_CU_ASINH: return asinh(x);
    case KN_CU_ACOSH: return acosh(x);
    case KN_CU_ATANH: return atanh(x);
    case KN_CU_GELU: return (A)0.5 * x * (one + erf(x * (A)0.70710678118654752440));
    case KN_CU_GELU_TANH: {
        A inner = (A)0.79788456080286535588 * (x + (A)0.044715 * x * x * x);
        return (A)0.5 * x * (one + tanh(inner));
    }
    case KN_CU_MISH: return x * tanh(x > (A)20 ? x : log1p(exp(x)));
    case KN_CU_THRESHOLDEDRELU: return x > (A)a ? x : zero;
    case KN_CU_CELU: {
        A al = (A)a;
        A neg = al * (exp(x / al) - one);
        return (x > zero ? x : zero) + (neg < zero ? neg : zero);
    }
    case KN_CU_SHRINK: return x < -(A)a ? x + (A)b : (x > (A)a ? x - (A)b : zero);
    case KN_CU_SWISH: return x / (one + exp(-(A)a * x));
    case KN_CU_NAN_TO_ZERO: return x != x ? zero : x;
    case KN_CU_IDENTITY:
    default: return x;
    }
}

template <typename T> __device__ __forceinline__ T iunary(int op, T x) {
    switch (op) {
    case KN_CU_ABS: return x < (T)0 ? (T)(0 - x) : x;
    case KN_CU_NEG: return (T)(0 - x);
    case KN_CU_SIGN: return x > (T)0 ? (T)1 : (x < (T)0 ? (T)(0 - 1) : (T)0);
    case KN_CU_RELU: return x > (T)0 ? x : (T)0;
    case KN_CU_BITNOT: return (T)~x;
    case KN_CU_NOT: return (T)(x ? 0 : 1);
    default: return x;
    }
}

template <typename T> __global__ void k_unary_f(int op, const T *x, T *y, int64_t n, float a, float b) {
    KNCU_LOOP(i, n) y[i] = st<T>(funary(op, ld(x[i]), a, b));
}
template <typename T> __global__ void k_unary_i(int op, const T *x, T *y, int64_t n) {
    KNCU_LOOP(i, n) y[i] = iunary(op, x[i]);
}
template <typename T> __global__ void k_isnan(const T *x, uint8_t *y, int64_t n) {
    KNCU_LOOP(i, n) {
        auto v = ld(x[i]);
        y[i] = v != v;
    }
}
template <typename T> __global__ void k_isinf(const T *x, uint8_t *y, int64_t n, bool pos, bool neg) {
    KNCU_LOOP(i, n) {
        auto v = ld(x[i]);
        y[i] = isinf(v) && ((v > 0 && pos) || (v < 0 && neg));
    }
}

// ---------------------------------------------------------------- binary

template <typename A> __device__ __forceinline__ A fbinary(int op, A a, A b) {
    switch (op) {
    case KN_CU_ADD: return a + b;
    case KN_CU_SUB: return a - b;
    case KN_CU_MUL: return a * b;
    case KN_CU_DIV: return a / b;
    case KN_CU_POW: return pow(a, b);
    case KN_CU_FMOD: return fmod(a, b);
    case KN_CU_MOD: {
        A r = fmod(a, b);
        if (r != (A)0 && ((r < (A)0) != (b < (A)0))) r += b;
        return r;
    }
    case KN_CU_MAX: return (a != a || b != b) ? a + b : (a > b ? a : b);
    case KN_CU_MIN: return (a != a || b != b) ? a + b : (a < b ? a : b);
    case KN_CU_PRELU: return a < (A)0 ? a * b : a;
    default: return a;
    }
}

template <typename T> __device__ __forceinline__ T ibinary(int op, T a, T b) {
    switch (op) {
    case KN_CU_ADD: return (T)(a + b);
    case KN_CU_SUB: return (T)(a - b);
    case KN_CU_MUL: return (T)(a * b);
    case KN_CU_DIV: return b == 0 ? (T)0 : (T)(a / b);
    case KN_CU_POW: {
        // exact integer power by squaring (negative exponents: 0, except for bases 1 and -1)
        if (b < (T)0) return a == (T)1 ? (T)1 : (a == (T)(0 - 1) ? ((b & 1) ? a : (T)1) : (T)0);
        T r = 1, base = a;
        uint64_t e = (uint64_t)b;
        while (e) {
            if (e & 1) r = (T)(r * base);
            base = (T)(base * base);
            e >>= 1;
        }
        return r;
    }
    case KN_CU_FMOD: return b == 0 ? (T)0 : (T)(a % b);
    case KN_CU_MOD: {
        if (b == 0) return 0;
        T r = (T)(a % b);
        if (r != 0 && ((r < 0) != (b < 0))) r = (T)(r + b);
        return r;
    }
    case KN_CU_MAX: return a > b ? a : b;
    case KN_CU_MIN: return a < b ? a : b;
    case KN_CU_PRELU: return a < (T)0 ? (T)(a * b) : a;
    case KN_CU_SHL: {
        /* out-of-range shifts give 0; signed values shift as their unsigned bits */
        if (b < (T)0 || (uint64_t)b >= sizeof(T) * 8) return (T)0;
        typedef typename std::make_unsigned<T>::type U;
        return (T)(U)((U)a << (U)b);
    }
    case KN_CU_SHR:
        /* arithmetic for signed types; out of range: the sign (-1 or 0) */
        if (b < (T)0 || (uint64_t)b >= sizeof(T) * 8) return a < (T)0 ? (T)(0 - 1) : (T)0;
        return (T)(a >> b);
    case KN_CU_BITAND: return (T)(a & b);
    case KN_CU_BITOR: return (T)(a | b);
    case KN_CU_BITXOR: return (T)(a ^ b);
    default: return a;
    }
}

template <typename A> __device__ __forceinline__ uint8_t compare(int op, A a, A b) {
    switch (op) {
    case KN_CU_EQ: return a == b;
    case KN_CU_LT: return a < b;
    case KN_CU_LE: return a <= b;
    case KN_CU_GT: return a > b;
    case KN_CU_GE: return a >= b;
    case KN_CU_AND: return (a != (A)0) && (b != (A)0);
    case KN_CU_OR: return (a != (A)0) || (b != (A)0);
    case KN_CU_XOR: return (a != (A)0) != (b != (A)0);
    default: return 0;
    }
}

template <typename T, bool SAME>
__global__ void k_binary_f(int op, const T *a, const T *b, T *y, kn_cu_view v, int64_t n) {
    KNCU_LOOP(i, n) {
        int64_t ia = SAME ? i : view_offset(v, 0, i), ib = SAME ? i : view_offset(v, 1, i);
        y[i] = st<T>(fbinary(op, ld(a[ia]), ld(b[ib])));
    }
}
template <typename T, bool SAME>
__global__ void k_binary_i(int op, const T *a, const T *b, T *y, kn_cu_view v, int64_t n) {
    KNCU_LOOP(i, n) {
        int64_t ia = SAME ? i : view_offset(v, 0, i), ib = SAME ? i : view_offset(v, 1, i);
        y[i] = ibinary(op, a[ia], b[ib]);
    }
}
template <typename T, bool SAME>
__global__ void k_compare(int op, const T *a, const T *b, uint8_t *y, kn_cu_view v, int64_t n) {
    KNCU_LOOP(i, n) {
        int64_t ia = SAME ? i : view_offset(v, 0, i), ib = SAME ? i : view_offset(v, 1, i);
        y[i] = compare(op, ld(a[ia]), ld(b[ib]));
    }
}

static bool same_shape(const kn_cu_view *v, int k) {
    // operand k is contiguous with the output's shape
    int64_t s = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        if (v->dims[d] != 1 && v->strides[k][d] != s) return false;
        s *= v->dims[d];
    }
    return true;
}

template <typename T>
cudaError_t launch_binary(int op, const void *a, const void *b, void *y, const kn_cu_view *v, cudaStream_t s) {
    int64_t n = view_count(*v);
    if (n == 0) return cudaSuccess;
    bool same = same_shape(v, 0) && same_shape(v, 1);
    unsigned g = grid_for(n, 256);
    const T *pa = (const T *)a, *pb = (const T *)b;
    if (op >= KN_CU_EQ) {
        if (same) k_compare<T, true><<<g, 256, 0, s>>>(op, pa, pb, (uint8_t *)y, *v, n);
        else k_compare<T, false><<<g, 256, 0, s>>>(op, pa, pb, (uint8_t *)y, *v, n);
    } else if constexpr (is_fp<T>::value) {
        if (same) k_binary_f<T, true><<<g, 256, 0, s>>>(op, pa, pb, (T *)y, *v, n);
        else k_binary_f<T, false><<<g, 256, 0, s>>>(op, pa, pb, (T *)y, *v, n);
    } else {
        if (same) k_binary_i<T, true><<<g, 256, 0, s>>>(op, pa, pb, (T *)y, *v, n);
        else k_binary_i<T, false><<<g, 256, 0, s>>>(op, pa, pb, (T *)y, *v, n);
    }
    return cudaGetLastError();
}

// ---------------------------------------------------------------- where, cast, clip, copies

template <typename T>
__global__ void k_where(const uint8_t *c, const T *x, const T *y, T *out, kn_cu_view v, int64_t n) {
    KNCU_LOOP(i, n) {
        // strides[0] = cond, [1] = x, [2] = y
        out[i] = c[view_offset(v, 0, i)] ? x[view_offset(v, 1, i)] : y[view_offset(v, 2, i)];
    }
}

template <typename D, typename S> __device__ __forceinline__ D cvt(S x) {
    if (std::is_same<D, S>::value) return *(D *)&x;
    return st<D>(ld(x));
}
template <typename D, typename S> __global__ void k_cast(const S *x, D *y, int64_t n) {
    KNCU_LOOP(i, n) y[i] = cvt<D>(x[i]);
}
// The same four elements a thread (n4 groups; the tail by k_cast), one load and one store of
// 4 * size bytes each: float32 -> float16 of a batch of images ran at under half the memory's
// speed one element a thread.
template <typename D, typename S> __global__ void k_cast4(const S *x, D *y, int32_t n4) {
    struct __align__(4 * sizeof(S)) In { S v[4]; };
    struct __align__(4 * sizeof(D)) Out { D v[4]; };
    for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += blockDim.x * gridDim.x) {
        const In a = ((const In *)x)[i];
        Out b;
#pragma unroll
        for (int k = 0; k < 4; k++) b.v[k] = cvt<D>(a.v[k]);
        ((Out *)y)[i] = b;
    }
}
template <typename S> __global__ void k_cast_bool(const S *x, uint8_t *y, int64_t n) {
    KNCU_LOOP(i, n) y[i] = ld(x[i]) != (typename acc<S>::type)0;
}

template <typename S> cudaError_t cast_from(kiln_dtype to, const S *x, void *y, int64_t n, cudaStream_t s) {
    unsigned g = grid_for(n, 256);
    if (to == KILN_DTYPE_BOOL) {
        k_cast_bool<S><<<g, 256, 0, s>>>(x, (uint8_t *)y, n);
        return cudaGetLastError();
    }
    const bool float_s = std::is_same<S, float>::value || std::is_same<S, f16>::value || std::is_same<S, bf16>::value;
    const size_t dsize = to == KILN_DTYPE_FLOAT ? 4 : 2;
    if (float_s && (to == KILN_DTYPE_FLOAT || to == KILN_DTYPE_FLOAT16 || to == KILN_DTYPE_BFLOAT16) && n >= 4 &&
        n / 4 < INT32_MAX / 2 && (uintptr_t)x % (4 * sizeof(S)) == 0 && (uintptr_t)y % (4 * dsize) == 0) {
        const int64_t n4 = n / 4, tail = n - n4 * 4;
        const unsigned g4 = grid_for(n4, 256);
        const S *xt = x + n4 * 4;
        if (to == KILN_DTYPE_FLOAT) {
            k_cast4<float, S><<<g4, 256, 0, s>>>(x, (float *)y, (int32_t)n4);
            if (tail) k_cast<float, S><<<1, 32, 0, s>>>(xt, (float *)y + n4 * 4, tail);
        } else if (to == KILN_DTYPE_FLOAT16) {
            k_cast4<f16, S><<<g4, 256, 0, s>>>(x, (f16 *)y, (int32_t)n4);
            if (tail) k_cast<f16, S><<<1, 32, 0, s>>>(xt, (f16 *)y + n4 * 4, tail);
        } else {
            k_cast4<bf16, S><<<g4, 256, 0, s>>>(x, (bf16 *)y, (int32_t)n4);
            if (tail) k_cast<bf16, S><<<1, 32, 0, s>>>(xt, (bf16 *)y + n4 * 4, tail);
        }
        return cudaGetLastError();
    }
    KNCU_DISPATCH_NUM(to, (k_cast<type_, S><<<g, 256, 0, s>>>(x, (type_ *)y, n)));
    return cudaGetLastError();
}

// ---------------------------------------------------------------- float8

struct F8 {
    int mbits, bias;
    float max;
    bool fnuz, inf;
};

static bool f8_format(kiln_dtype t, F8 *f) {
    switch (t) {
    case KILN_DTYPE_FLOAT8E4M3FN: *f = F8{3, 7, 448.0f, false, false}; return true;
    case KILN_DTYPE_FLOAT8E4M3FNUZ: *f = F8{3, 8, 240.0f, true, false}; return true;
    case KILN_DTYPE_FLOAT8E5M2: *f = F8{2, 15, 57344.0f, false, true}; return true;
    case KILN_DTYPE_FLOAT8E5M2FNUZ: *f = F8{2, 16, 57344.0f, true, false}; return true;
    default: return false;
    }
}

__device__ __forceinline__ uint8_t f8_nan(const F8 &f, unsigned s) {
    return f.fnuz ? 0x80 : (uint8_t)((f.inf ? 0x7e : 0x7f) | s);
}

// Round to nearest even; out of range: the largest finite value with saturate, else infinity
// (E5M2) or NaN. FNUZ formats have no negative zero.
__device__ uint8_t f8_encode(float v, const F8 &f, bool saturate) {
    unsigned s = signbit(v) ? 0x80u : 0u;
    if (v != v) return f8_nan(f, s);
    double a = fabs((double)v);
    if (saturate && a > f.max) a = f.max;
    if (isinf(a)) return f.inf ? (uint8_t)(0x7c | s) : f8_nan(f, s);
    if (a == 0.0) return f.fnuz ? 0 : (uint8_t)s;
    int e;
    frexp(a, &e);
    int E = e - 1, emin = 1 - f.bias;
    if (E < emin) E = emin;
    double q = rint(ldexp(a, f.mbits - E));
    double val = ldexp(q, E - f.mbits);
    if (val > f.max) return f.inf ? (uint8_t)(0x7c | s) : f8_nan(f, s);
    int m = (int)q, one = 1 << f.mbits;
    if (m >= 2 * one) {
        m >>= 1;
        E++;
    }
    unsigned code = m < one ? (unsigned)m : (((unsigned)(E + f.bias) << f.mbits) | (unsigned)(m - one));
    code |= s;
    if (f.fnuz && code == 0x80) code = 0;
    return (uint8_t)code;
}

__device__ float f8_decode(uint8_t b, const F8 &f) {
    unsigned s = b & 0x80u, ebits = 7 - (unsigned)f.mbits;
    unsigned ex = (b >> f.mbits) & ((1u << ebits) - 1), m = b & ((1u << f.mbits) - 1);
    if (f.fnuz) {
        if (b == 0x80) return NAN;
    } else if (f.inf) {
        if (ex == (1u << ebits) - 1) return m ? NAN : (s ? -INFINITY : INFINITY);
    } else if ((b & 0x7f) == 0x7f) {
        return NAN;
    }
    double v = ex == 0 ? ldexp((double)m, 1 - f.bias - f.mbits)
                       : ldexp((double)(m + (1u << f.mbits)), (int)ex - f.bias - f.mbits);
    return (float)(s ? -v : v);
}

template <typename S> __global__ void k_to_f8(const S *x, uint8_t *y, int64_t n, F8 f, bool sat) {
    KNCU_LOOP(i, n) y[i] = f8_encode((float)ld(x[i]), f, sat);
}
__global__ void k_f8_to_f8(const uint8_t *x, uint8_t *y, int64_t n, F8 from, F8 to, bool sat) {
    KNCU_LOOP(i, n) y[i] = f8_encode(f8_decode(x[i], from), to, sat);
}
template <typename D> __global__ void k_from_f8(const uint8_t *x, D *y, int64_t n, F8 f) {
    KNCU_LOOP(i, n) {
        float v = f8_decode(x[i], f);
        if constexpr (is_fp<D>::value) y[i] = st<D>((typename acc<D>::type)v);
        else y[i] = (D)v;
    }
}
__global__ void k_f8_to_bool(const uint8_t *x, uint8_t *y, int64_t n, F8 f) {
    KNCU_LOOP(i, n) y[i] = f8_decode(x[i], f) != 0.0f;
}

template <typename T> __global__ void k_clip(const T *x, T *y, int64_t n, double lo, double hi) {
    typedef typename acc<T>::type A;
    KNCU_LOOP(i, n) {
        A v = ld(x[i]);
        if (lo == lo && (double)v < lo) v = (A)lo;
        if (hi == hi && (double)v > hi) v = (A)hi;
        y[i] = st<T>(v);
    }
}

template <typename E> __global__ void k_copy_view(const E *x, E *y, kn_cu_view v, int64_t n) {
    KNCU_LOOP(i, n) y[i] = x[view_offset(v, 0, i)];
}
// The same with 32-bit index arithmetic (a 64-bit division is a long software sequence), for views
// whose element count and source offsets fit.
template <typename E> __global__ void k_copy_view32(const E *x, E *y, kn_cu_view v, int32_t n) {
    for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        int32_t r = i, off = 0;
        for (int d = v.rank - 1; d >= 0; d--) {
            int32_t dim = (int32_t)v.dims[d];
            int32_t q = r / dim;
            off += (r - q * dim) * (int32_t)v.strides[0][d];
            r = q;
        }
        y[i] = x[off];
    }
}

// A copy whose output's innermost dim (b) is strided in the source while another dim (a) is the
// source's contiguous one: 32x32 tiles through shared memory, so reads run along a and writes
// along b, both coalesced (Transpose NCHW <-> NHWC, [B, S, H, D] -> [B, H, D, S]). The other dims
// are the tile's batch: `rank` dims of sizes od, source strides os and output strides ot.
struct TileCopy {
    int64_t na, nb;         // sizes of dims a and b
    int64_t sb;             // source stride of b (a's is 1)
    int64_t ta;             // output stride of a (b's is 1)
    int rank;               // the batch dims
    int64_t od[KN_CU_MAX_RANK], os[KN_CU_MAX_RANK], ot[KN_CU_MAX_RANK];
};

template <typename E> __global__ void k_copy_tiles(const E *x, E *y, TileCopy t, int64_t tiles_a, int64_t n_tiles) {
    __shared__ E tile[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y; // 32 x 8 threads
    for (int64_t k = blockIdx.x; k < n_tiles; k += gridDim.x) {
        int64_t rest = k / (tiles_a * ((t.nb + 31) / 32)), in_batch = k % (tiles_a * ((t.nb + 31) / 32));
        int64_t a0 = (in_batch % tiles_a) * 32, b0 = (in_batch / tiles_a) * 32;
        int64_t xo = 0, yo = 0;
        for (int d = t.rank - 1; d >= 0; d--) {
            int64_t c = rest % t.od[d];
            rest /= t.od[d];
            xo += c * t.os[d];
            yo += c * t.ot[d];
        }
        __syncthreads(); // the previous tile's reads are done
        for (int j = ty; j < 32; j += 8) {
            int64_t a = a0 + tx, b = b0 + j;
            if (a < t.na && b < t.nb) tile[j][tx] = x[xo + a + b * t.sb];
        }
        __syncthreads();
        for (int j = ty; j < 32; j += 8) {
            int64_t a = a0 + j, b = b0 + tx;
            if (a < t.na && b < t.nb) y[yo + a * t.ta + b] = tile[tx][j];
        }
    }
}
// The same for a narrow b (under 8: NCHW -> NHWC of an image's 3 colour planes): a thread per
// element of a, which reads its nb values along b (each read coalesced across the warp, as a is
// contiguous in the source) and writes them side by side. 32-bit offsets (the launch checks).
// As a 32-wide tile or an element-wise strided copy it ran ResNet-50's input transpose, [256, 3,
// 224, 224] half, at a fifth of the memory's speed.
template <typename E> __global__ void k_copy_narrow(const E *x, E *y, TileCopy t, int32_t n_a) {
    const int32_t na = (int32_t)t.na, nb = (int32_t)t.nb, sb = (int32_t)t.sb, ta = (int32_t)t.ta;
    for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n_a; i += blockDim.x * gridDim.x) {
        int32_t rest = i / na, a = i - rest * na, xo = a, yo = a * ta;
        for (int d = t.rank - 1; d >= 0; d--) {
            const int32_t dim = (int32_t)t.od[d], q = rest / dim, c = rest - q * dim;
            xo += c * (int32_t)t.os[d];
            yo += c * (int32_t)t.ot[d];
            rest = q;
        }
        for (int32_t b = 0; b < nb; b++) y[yo + b] = x[xo + b * sb];
    }
}
template <typename E> __global__ void k_fill(E *y, E value, int64_t n) {
    KNCU_LOOP(i, n) y[i] = value;
}
template <typename T> __global__ void k_scale(const T *x, T *y, int64_t n, float a) {
    typedef typename acc<T>::type A;
    KNCU_LOOP(i, n) y[i] = st<T>(ld(x[i]) * (A)a);
}
template <typename T>
__global__ void k_bias_act(T *y, const T *bias, int64_t n, int64_t cols, int64_t inner, int act, float alpha,
                           float beta) {
    typedef typename acc<T>::type A;
    KNCU_LOOP(i, n) {
        A v = ld(y[i]);
        if (bias) v += ld(bias[(i / inner) % cols]);
        switch (act) {
        case 1: v = v > (A)0 ? v : (A)0; break;
        case 2: v = v >= (A)0 ? v : (A)alpha * v; break;
        case 3: v = (A)1 / ((A)1 + exp(-v)); break;
        case 4: v = tanh(v); break;
        case 5: { // clip
            if (v < (A)alpha) v = (A)alpha;
            if (v > (A)beta) v = (A)beta;
            break;
        }
        case 6: { // hard sigmoid
            v = (A)alpha * v + (A)beta;
            v = v < (A)0 ? (A)0 : (v > (A)1 ? (A)1 : v);
            break;
        }
        default: break;
        }
        y[i] = st<T>(v);
    }
}

template <typename A> __device__ __forceinline__ A apply_act(int act, A v, float p0, float p1) {
    const A zero = 0, one = 1;
    switch (act) {
    case 1: return v > zero ? v : zero;
    case 2: return v < zero ? (A)p0 * v : v;
    case 3: return v < (A)p0 ? (A)p0 : (v > (A)p1 ? (A)p1 : v);
    case 4: return funary(KN_CU_SIGMOID, v, 0, 0);
    case 5: return tanh(v);
    case 6: {
        A t = (A)p0 * v + (A)p1;
        return t < zero ? zero : (t > one ? one : t);
    }
    case 7: return funary(KN_CU_HARDSWISH, v, 0, 0);
    case 8: return v * funary(KN_CU_SIGMOID, v, 0, 0);
    case 9: return funary(KN_CU_GELU, v, 0, 0);
    case 10: return funary(KN_CU_GELU_TANH, v, 0, 0);
    default: return v;
    }
}

template <typename T>
__global__ void k_epilogue(T *y, const T *bias, int64_t n_bias, int64_t cols, int64_t inner, const T *z, int act,
                           float p0, float p1, int64_t n) {
    typedef typename acc<T>::type A;
    KNCU_LOOP(i, n) {
        A v = ld(y[i]);
        if (n_bias == 1) v += ld(bias[0]);
        else if (n_bias > 1) v += ld(bias[(i / inner) % cols]);
        if (z) v += ld(z[i]);
        y[i] = st<T>(apply_act(act, v, p0, p1));
    }
}

// The same in 16-byte words of V elements with 32-bit indices: the epilogue after every fused
// convolution and product moves its output twice (and the residual once), so it runs at memory
// speed only when each thread moves whole words and does no 64-bit division. A word lies in one
// bias channel (inner % V == 0) or runs along consecutive ones (inner == 1, cols % V == 0).
template <typename T, int V>
__global__ void k_epilogue_vec(T *y, const T *bias, int32_t n_bias, int32_t cols, int32_t inner, const T *z, int act,
                               float p0, float p1, int32_t n_words) {
    typedef typename acc<T>::type A;
    static_assert(sizeof(T) * V == 16, "a word is 16 bytes");
    for (int32_t w = blockIdx.x * blockDim.x + threadIdx.x; w < n_words; w += blockDim.x * gridDim.x) {
        const int32_t i0 = w * V;
        uint4 yw = ((const uint4 *)y)[w], zw = z ? ((const uint4 *)z)[w] : make_uint4(0, 0, 0, 0);
        const T *ye = (const T *)&yw, *ze = (const T *)&zw;
        T out[V];
        const int32_t ch0 = n_bias > 1 ? (inner == 1 ? i0 % cols : (i0 / inner) % cols) : 0;
        for (int k = 0; k < V; k++) {
            A v = ld(ye[k]);
            if (n_bias == 1) v += ld(bias[0]);
            else if (n_bias > 1) v += ld(bias[inner == 1 ? ch0 + k : ch0]);
            if (z) v += ld(ze[k]);
            out[k] = st<T>(apply_act(act, v, p0, p1));
        }
        ((uint4 *)y)[w] = *(const uint4 *)out;
    }
}

// ---------------------------------------------------------------- chains (kiln.FusedElementwise)

// The chain's registers live in shared memory, one column per thread (register k of thread t at
// k * blockDim.x + t: no bank conflicts), since they are indexed at run time: as a local array
// they were per-thread stack that 256 threads a block spilled out of L1 (BERT-base's embedding
// sum, [32, 128, 768] half, took 71 us on the H200). The step loop and its switch are uniform
// across the grid, so no warp diverges. An interpreter rather than code generated per chain: no
// runtime compilation on a session's start path, and a chain is bound by memory traffic, which
// the interpreter cuts to one read per input and one write. I: the index type, 32 bits wherever
// every offset fits (64-bit division is several times the cost).
// The offsets of element i in each strided input (the chain's inputs broadcast by strides).
template <typename I> __device__ __forceinline__ void chain_offsets(const kn_cu_chain &p, I i, I *off) {
    for (int k = 0; k < p.n_inputs; k++) off[k] = 0;
    I rest = i;
    for (int d = p.rank - 1; d >= 0; d--) {
        const I c = rest % (I)p.dims[d];
        rest /= (I)p.dims[d];
        for (int k = 0; k < p.n_inputs; k++) off[k] += c * (I)p.strides[k][d];
    }
}

// One step of the chain's program: a unary operator, a binary one (b), or a clip to [p0, p1].
__device__ __forceinline__ float chain_step(const kn_cu_chain_step &s, float a, float b) {
    if (s.kind == 0) return funary<float>(s.op, a, s.p0, s.p1);
    if (s.kind == 1) return fbinary<float>(s.op, a, b);
    const float v = a < s.p0 ? s.p0 : a;
    return v > s.p1 ? s.p1 : v;
}

template <typename T, typename I> __global__ void k_chain(const kn_cu_chain p, T *y, I n) {
    extern __shared__ float chain_regs[];
    float *r = chain_regs + threadIdx.x;
    const int B = blockDim.x;
    for (int k = 0; k < p.n_consts; k++) r[(p.n_inputs + k) * B] = p.consts[k];
    const int at = p.n_inputs + p.n_consts;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)blockDim.x * gridDim.x) {
        if (!p.any_strided) {
            for (int k = 0; k < p.n_inputs; k++)
                r[k * B] = ld(((const T *)p.in[k])[p.mode[k] == KN_CU_CHAIN_SCALAR ? 0 : i]);
        } else {
            I off[KN_CU_CHAIN_INPUTS];
            chain_offsets(p, i, off);
            for (int k = 0; k < p.n_inputs; k++) {
                I o = p.mode[k] == KN_CU_CHAIN_SCALAR ? 0 : p.mode[k] == KN_CU_CHAIN_CONTIGUOUS ? i : off[k];
                r[k * B] = ld(((const T *)p.in[k])[o]);
            }
        }
        for (int t = 0; t < p.n_steps; t++) {
            const kn_cu_chain_step &s = p.steps[t];
            r[(at + t) * B] = chain_step(s, r[s.a * B], s.kind == 1 ? r[s.b * B] : 0.0f);
        }
        y[i] = st<T>(r[(at + p.n_steps - 1) * B]);
    }
}

// One step of the chain over a word's V lanes (register q of lane j at q's column + j * B). The
// four arithmetic operators, most of what chains are made of (embedding and residual sums, affine
// transforms), run as their own unrolled loops; any other step runs chain_step lane by lane in a
// loop kept rolled, so chain_step's switch over every unary operator is in the kernel once, not V
// times (unrolled, that made k_chain_words several times the size of k_chain).
template <int V>
__device__ __forceinline__ void chain_step_words(const kn_cu_chain_step &s, const float *ra, const float *rb, float *ro,
                                                 int B) {
    if (s.kind == 1) switch (s.op) {
        case KN_CU_ADD:
#pragma unroll
            for (int j = 0; j < V; j++) ro[j * B] = ra[j * B] + rb[j * B];
            return;
        case KN_CU_SUB:
#pragma unroll
            for (int j = 0; j < V; j++) ro[j * B] = ra[j * B] - rb[j * B];
            return;
        case KN_CU_MUL:
#pragma unroll
            for (int j = 0; j < V; j++) ro[j * B] = ra[j * B] * rb[j * B];
            return;
        case KN_CU_DIV:
#pragma unroll
            for (int j = 0; j < V; j++) ro[j * B] = ra[j * B] / rb[j * B];
            return;
        default: break;
        }
#pragma unroll 1
    for (int j = 0; j < V; j++) ro[j * B] = chain_step(s, ra[j * B], s.kind == 1 ? rb[j * B] : 0.0f);
}

// The same program over 16-byte words of V elements (8 halves or 4 floats), where every input is
// a scalar, or a run of whole words along the innermost dim (stride 1), or one element per word
// (stride 0 there): each thread moves its inputs and its output a word at a time and works out the
// strided inputs' offsets once a word, not once an element (k_chain ran BERT-base's [32, 128, 768]
// half embedding sum at a sixth of the memory's speed). Register q of lane j of thread t lives at
// ((q * V + j) * blockDim.x + t) in shared memory: consecutive threads, consecutive banks.
template <typename T, int V, typename I> __global__ void k_chain_words(const kn_cu_chain p, T *y, I n_words) {
    static_assert(sizeof(T) * V == 16, "a word is 16 bytes");
    extern __shared__ float chain_regs[];
    float *r = chain_regs + threadIdx.x;
    const int B = blockDim.x, VB = V * B;
    for (int k = 0; k < p.n_consts; k++)
#pragma unroll
        for (int j = 0; j < V; j++) r[(p.n_inputs + k) * VB + j * B] = p.consts[k];
    const int at = p.n_inputs + p.n_consts;
    for (I w = (I)blockIdx.x * blockDim.x + threadIdx.x; w < n_words; w += (I)blockDim.x * gridDim.x) {
        const I i = w * V;
        I off[KN_CU_CHAIN_INPUTS];
        if (p.any_strided) chain_offsets(p, i, off);
        for (int k = 0; k < p.n_inputs; k++) {
            const T *in = (const T *)p.in[k];
            float *rk = r + k * VB;
            const bool whole = p.mode[k] == KN_CU_CHAIN_CONTIGUOUS ||
                               (p.mode[k] == KN_CU_CHAIN_STRIDED && p.strides[k][p.rank - 1] == 1);
            if (whole) {
                const uint4 u = *(const uint4 *)(in + (p.mode[k] == KN_CU_CHAIN_CONTIGUOUS ? i : off[k]));
                const T *e = (const T *)&u;
#pragma unroll
                for (int j = 0; j < V; j++) rk[j * B] = (float)ld(e[j]);
            } else {
                const float v = (float)ld(in[p.mode[k] == KN_CU_CHAIN_SCALAR ? 0 : off[k]]);
#pragma unroll
                for (int j = 0; j < V; j++) rk[j * B] = v;
            }
        }
        for (int t = 0; t < p.n_steps; t++) {
            const kn_cu_chain_step &s = p.steps[t];
            chain_step_words<V>(s, r + s.a * VB, r + s.b * VB, r + (at + t) * VB, B);
        }
        const float *rl = r + (at + p.n_steps - 1) * VB;
        T o[V];
#pragma unroll
        for (int j = 0; j < V; j++) o[j] = st<T>(rl[j * B]);
        ((uint4 *)y)[w] = *(const uint4 *)o;
    }
}

} // namespace

extern "C" {

cudaError_t kn_cu_epilogue(kiln_dtype dt, void *y, const void *bias, int64_t n_bias, int64_t cols, int64_t inner,
                           const void *z, int act, float p0, float p1, int64_t n, cudaStream_t s) {
    if (n == 0 || (!n_bias && !z && !act)) return cudaSuccess;
    if (inner < 1) inner = 1;
    if (cols < 1) cols = 1;
    const int64_t V = 16 / (int64_t)kiln_dtype_size(dt);
    const bool words = (dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16 || dt == KILN_DTYPE_FLOAT) && n % V == 0 &&
                       n < INT32_MAX && (uintptr_t)y % 16 == 0 && (!z || (uintptr_t)z % 16 == 0) &&
                       (n_bias <= 1 || (inner == 1 ? cols % V == 0 : inner % V == 0));
    if (words) {
        const int32_t nw = (int32_t)(n / V);
        const unsigned g = grid_for(nw, 256);
        if (dt == KILN_DTYPE_FLOAT16)
            k_epilogue_vec<f16, 8><<<g, 256, 0, s>>>((f16 *)y, (const f16 *)bias, (int32_t)n_bias, (int32_t)cols,
                                                     (int32_t)inner, (const f16 *)z, act, p0, p1, nw);
        else if (dt == KILN_DTYPE_BFLOAT16)
            k_epilogue_vec<bf16, 8><<<g, 256, 0, s>>>((bf16 *)y, (const bf16 *)bias, (int32_t)n_bias, (int32_t)cols,
                                                      (int32_t)inner, (const bf16 *)z, act, p0, p1, nw);
        else
            k_epilogue_vec<float, 4><<<g, 256, 0, s>>>((float *)y, (const float *)bias, (int32_t)n_bias, (int32_t)cols,
                                                       (int32_t)inner, (const float *)z, act, p0, p1, nw);
        return cudaGetLastError();
    }
    KNCU_DISPATCH_FLOAT(dt, (k_epilogue<type_><<<grid_for(n, 256), 256, 0, s>>>((type_ *)y, (const type_ *)bias, n_bias,
                                                                                 cols, inner, (const type_ *)z, act, p0,
                                                                                 p1, n)));
    return cudaGetLastError();
}

cudaError_t kn_cu_unary(int op, kiln_dtype dt, const void *x, void *y, int64_t n, float a, float b, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    unsigned g = grid_for(n, 256);
    if (op == KN_CU_ISNAN) {
        KNCU_DISPATCH_FLOAT(dt, (k_isnan<type_><<<g, 256, 0, s>>>((const type_ *)x, (uint8_t *)y, n)));
        return cudaGetLastError();
    }
    if (op == KN_CU_ISINF) {
        KNCU_DISPATCH_FLOAT(dt, (k_isinf<type_><<<g, 256, 0, s>>>((const type_ *)x, (uint8_t *)y, n, a != 0, b != 0)));
        return cudaGetLastError();
    }
    if (dt == KILN_DTYPE_BOOL) {
        k_unary_i<uint8_t><<<g, 256, 0, s>>>(op, (const uint8_t *)x, (uint8_t *)y, n);
        return cudaGetLastError();
    }
    switch (dt) {
    case KILN_DTYPE_FLOAT:
    case KILN_DTYPE_DOUBLE:
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16:
        KNCU_DISPATCH_FLOAT(dt, (k_unary_f<type_><<<g, 256, 0, s>>>(op, (const type_ *)x, (type_ *)y, n, a, b)));
        break;
    default:
        KNCU_DISPATCH_INT(dt, (k_unary_i<type_><<<g, 256, 0, s>>>(op, (const type_ *)x, (type_ *)y, n)));
    }
    return cudaGetLastError();
}

cudaError_t kn_cu_binary(int op, kiln_dtype dt, const void *a, const void *b, void *y, const kn_cu_view *v,
                         cudaStream_t s) {
    if (dt == KILN_DTYPE_BOOL) return launch_binary<uint8_t>(op, a, b, y, v, s);
    KNCU_DISPATCH_NUM(dt, return launch_binary<type_>(op, a, b, y, v, s));
    return cudaSuccess;
}

cudaError_t kn_cu_where(kiln_dtype dt, const void *cond, const void *x, const void *y, void *out,
                        const kn_cu_view *v, cudaStream_t s) {
    int64_t n = view_count(*v);
    if (n == 0) return cudaSuccess;
    unsigned g = grid_for(n, 256);
    size_t es = kiln_dtype_size(dt);
    KNCU_DISPATCH_SIZE(es, (k_where<type_><<<g, 256, 0, s>>>((const uint8_t *)cond, (const type_ *)x,
                                                                 (const type_ *)y, (type_ *)out, *v, n)));
    return cudaGetLastError();
}

cudaError_t kn_cu_cast(kiln_dtype from, kiln_dtype to, const void *x, void *y, int64_t n, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    if (from == KILN_DTYPE_BOOL) from = KILN_DTYPE_UINT8; // 0/1 either way
    KNCU_DISPATCH_NUM(from, return cast_from<type_>(to, (const type_ *)x, y, n, s));
    return cudaSuccess;
}

cudaError_t kn_cu_cast_f8(kiln_dtype from, kiln_dtype to, const void *x, void *y, int64_t n, bool saturate,
                          cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    unsigned g = grid_for(n, 256);
    F8 ff, ft;
    bool f8_from = f8_format(from, &ff), f8_to = f8_format(to, &ft);
    if (f8_from && f8_to) {
        k_f8_to_f8<<<g, 256, 0, s>>>((const uint8_t *)x, (uint8_t *)y, n, ff, ft, saturate);
    } else if (f8_to) {
        if (from == KILN_DTYPE_BOOL) from = KILN_DTYPE_UINT8;
        KNCU_DISPATCH_NUM(from, (k_to_f8<type_><<<g, 256, 0, s>>>((const type_ *)x, (uint8_t *)y, n, ft, saturate)));
    } else if (f8_from) {
        if (to == KILN_DTYPE_BOOL) k_f8_to_bool<<<g, 256, 0, s>>>((const uint8_t *)x, (uint8_t *)y, n, ff);
        else KNCU_DISPATCH_NUM(to, (k_from_f8<type_><<<g, 256, 0, s>>>((const uint8_t *)x, (type_ *)y, n, ff)));
    } else {
        return kn_cu_cast(from, to, x, y, n, s);
    }
    return cudaGetLastError();
}

cudaError_t kn_cu_clip(kiln_dtype dt, const void *x, void *y, int64_t n, double lo, double hi, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    unsigned g = grid_for(n, 256);
    KNCU_DISPATCH_NUM(dt, (k_clip<type_><<<g, 256, 0, s>>>((const type_ *)x, (type_ *)y, n, lo, hi)));
    return cudaGetLastError();
}

/* Widens a view's elements to `w` bytes where its innermost dim is contiguous in the source and
 * every size, stride and both base addresses allow: a copy in 16-byte words moves the same bytes
 * in an eighth of the instructions of 2-byte ones. */
static size_t widen_view(kn_cu_view *v, size_t esize, const void *x, const void *y) {
    const int r = v->rank;
    if (r < 1 || v->strides[0][r - 1] != 1) return esize;
    for (size_t w = 16; w > esize; w /= 2) {
        const int64_t k = (int64_t)(w / esize);
        bool ok = ((uintptr_t)x % w) == 0 && ((uintptr_t)y % w) == 0 && v->dims[r - 1] % k == 0;
        for (int d = 0; ok && d < r - 1; d++) ok = v->strides[0][d] % k == 0;
        if (!ok) continue;
        v->dims[r - 1] /= k;
        for (int d = 0; d < r - 1; d++) v->strides[0][d] /= k;
        return w;
    }
    return esize;
}

/* The tiled form of a view (see k_copy_tiles): the source's contiguous dim a is not the output's
 * innermost b. False when no dim is contiguous in the source, or the innermost already is. */
static bool tile_view(const kn_cu_view *v, TileCopy *t) {
    const int r = v->rank, b = r - 1;
    if (r < 2 || v->strides[0][b] == 1) return false;
    int a = -1;
    for (int d = 0; d < b; d++)
        if (v->strides[0][d] == 1 && v->dims[d] > 1) a = d;
    if (a < 0) return false;
    int64_t out_st[KN_CU_MAX_RANK], acc = 1;
    for (int d = r - 1; d >= 0; d--) {
        out_st[d] = acc;
        acc *= v->dims[d];
    }
    memset(t, 0, sizeof *t);
    t->na = v->dims[a], t->nb = v->dims[b], t->sb = v->strides[0][b], t->ta = out_st[a];
    for (int d = 0; d < b; d++) {
        if (d == a) continue;
        t->od[t->rank] = v->dims[d], t->os[t->rank] = v->strides[0][d], t->ot[t->rank] = out_st[d];
        t->rank++;
    }
    return true;
}

cudaError_t kn_cu_copy_view(size_t esize, const void *x, int64_t x_offset, void *y, const kn_cu_view *v_in,
                            cudaStream_t s) {
    int64_t n = view_count(*v_in);
    if (n == 0) return cudaSuccess;
    const char *xb = (const char *)x + x_offset * (int64_t)esize;
    kn_cu_view v = *v_in;
    TileCopy t;
    if (esize <= 8 && tile_view(&v, &t) && t.na >= 8 && t.nb >= 8) { /* narrower tiles waste their threads */
        const int64_t tiles_a = (t.na + 31) / 32, per_batch = tiles_a * ((t.nb + 31) / 32);
        const int64_t n_tiles = per_batch * (n / (t.na * t.nb));
        const unsigned g = (unsigned)(n_tiles < 65535LL * 16 ? n_tiles : 65535LL * 16);
        KNCU_DISPATCH_SIZE(esize, (k_copy_tiles<type_><<<g, dim3(32, 8), 0, s>>>((const type_ *)xb, (type_ *)y, t,
                                                                                tiles_a, n_tiles)));
        return cudaGetLastError();
    }
    if (esize <= 8 && tile_view(&v, &t) && t.nb < 8 && t.na >= 32 && n < INT32_MAX / 2) {
        int64_t reach = (t.na - 1) + (t.nb - 1) * t.sb, out_reach = (t.na - 1) * t.ta + t.nb - 1;
        bool fits = t.sb >= 0;
        for (int d = 0; d < t.rank; d++) {
            reach += (t.od[d] - 1) * t.os[d];
            out_reach += (t.od[d] - 1) * t.ot[d];
            fits &= t.os[d] >= 0;
        }
        if (fits && reach < INT32_MAX && out_reach < INT32_MAX) {
            const int64_t n_a = n / t.nb;
            KNCU_DISPATCH_SIZE(esize, (k_copy_narrow<type_><<<grid_for(n_a, 256), 256, 0, s>>>((const type_ *)xb, (type_ *)y,
                                                                                              t, (int32_t)n_a)));
            return cudaGetLastError();
        }
    }
    esize = widen_view(&v, esize, xb, y);
    n = view_count(v);
    int64_t reach = 0; /* the largest source offset's magnitude */
    for (int d = 0; d < v.rank; d++) reach += (v.dims[d] - 1) * (v.strides[0][d] < 0 ? -v.strides[0][d] : v.strides[0][d]);
    unsigned g = grid_for(n, 256);
    if (n < INT32_MAX && reach < INT32_MAX) {
        KNCU_DISPATCH_SIZE(esize, (k_copy_view32<type_><<<g, 256, 0, s>>>((const type_ *)xb, (type_ *)y, v, (int32_t)n)));
    } else {
        KNCU_DISPATCH_SIZE(esize, (k_copy_view<type_><<<g, 256, 0, s>>>((const type_ *)xb, (type_ *)y, v, n)));
    }
    return cudaGetLastError();
}

cudaError_t kn_cu_fill(size_t esize, const void *value, void *y, int64_t n, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    unsigned g = grid_for(n, 256);
    KNCU_DISPATCH_SIZE(esize, (k_fill<type_><<<g, 256, 0, s>>>((type_ *)y, *(const type_ *)value, n)));
    return cudaGetLastError();
}

cudaError_t kn_cu_scale(kiln_dtype dt, const void *x, void *y, int64_t n, float scale, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    unsigned g = grid_for(n, 256);
    KNCU_DISPATCH_FLOAT(dt, (k_scale<type_><<<g, 256, 0, s>>>((const type_ *)x, (type_ *)y, n, scale)));
    return cudaGetLastError();
}

cudaError_t kn_cu_bias_act(kiln_dtype dt, void *y, const void *bias, int64_t rows, int64_t cols, int64_t inner,
                           int act, float alpha, float beta, cudaStream_t s) {
    int64_t n = rows * cols * inner;
    if (n == 0) return cudaSuccess;
    unsigned g = grid_for(n, 256);
    KNCU_DISPATCH_FLOAT(dt, (k_bias_act<type_><<<g, 256, 0, s>>>((type_ *)y, (const type_ *)bias, n, cols, inner,
                                                                    act, alpha, beta)));
    return cudaGetLastError();
}

/* Whether k_chain_words can run the chain: V-element words that every input reads whole (or as
 * one element) at 16-byte aligned addresses, and their registers fit the shared memory. */
static bool chain_in_words(const kn_cu_chain *c, const void *y, int64_t n, int V, int threads) {
    if (n % V || (uintptr_t)y % 16 || c->rank < 1 || c->dims[c->rank - 1] % V) return false;
    if ((size_t)(c->n_inputs + c->n_consts + c->n_steps) * (size_t)(V * threads) * sizeof(float) > 48 * 1024)
        return false;
    for (int k = 0; k < c->n_inputs; k++) {
        if (c->mode[k] == KN_CU_CHAIN_SCALAR) continue;
        if (c->mode[k] == KN_CU_CHAIN_STRIDED && c->strides[k][c->rank - 1] == 0) continue; /* one element a word */
        if ((uintptr_t)c->in[k] % 16) return false;
        if (c->mode[k] == KN_CU_CHAIN_CONTIGUOUS) continue;
        if (c->strides[k][c->rank - 1] != 1) return false;
        for (int d = 0; d < c->rank - 1; d++)
            if (c->dims[d] > 1 && c->strides[k][d] % V) return false;
    }
    return true;
}

cudaError_t kn_cu_chain_run(kiln_dtype dt, const kn_cu_chain *c, void *y, int64_t n, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    const int threads = 128;
    const size_t smem = (size_t)(c->n_inputs + c->n_consts + c->n_steps) * threads * sizeof(float);
    /* 32-bit indices where every offset fits and a grid-stride step past n cannot overflow */
    bool narrow = n < INT32_MAX / 2;
    for (int k = 0; k < c->n_inputs && narrow; k++) {
        int64_t last = 0;
        for (int d = 0; d < c->rank; d++) last += (c->dims[d] - 1) * c->strides[k][d];
        narrow = c->mode[k] != KN_CU_CHAIN_STRIDED || (last >= 0 && last < INT32_MAX);
        for (int d = 0; d < c->rank; d++) narrow &= c->strides[k][d] >= 0;
    }
    const int V = dt == KILN_DTYPE_FLOAT ? 4 : 8;
    if ((dt == KILN_DTYPE_FLOAT || dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16) &&
        chain_in_words(c, y, n, V, threads)) {
        const int64_t nw = n / V;
        const unsigned gw = grid_for(nw, threads);
        const size_t smem_w = smem * (size_t)V;
#define KN_CHAIN_WORDS(T, V_)                                                                                       \
    (narrow ? k_chain_words<T, V_, int32_t><<<gw, threads, smem_w, s>>>(*c, (T *)y, (int32_t)nw)                  \
            : k_chain_words<T, V_, int64_t><<<gw, threads, smem_w, s>>>(*c, (T *)y, nw))
        if (dt == KILN_DTYPE_FLOAT) KN_CHAIN_WORDS(float, 4);
        else if (dt == KILN_DTYPE_FLOAT16) KN_CHAIN_WORDS(f16, 8);
        else KN_CHAIN_WORDS(bf16, 8);
#undef KN_CHAIN_WORDS
        return cudaGetLastError();
    }
    unsigned g = grid_for(n, threads);
#define KN_CHAIN_LAUNCH(T)                                                                                   \
    (narrow ? k_chain<T, int32_t><<<g, threads, smem, s>>>(*c, (T *)y, (int32_t)n)                          \
            : k_chain<T, int64_t><<<g, threads, smem, s>>>(*c, (T *)y, n))
    switch (dt) {
    case KILN_DTYPE_FLOAT: KN_CHAIN_LAUNCH(float); break;
    case KILN_DTYPE_FLOAT16: KN_CHAIN_LAUNCH(f16); break;
    case KILN_DTYPE_BFLOAT16: KN_CHAIN_LAUNCH(bf16); break;
    default: return cudaErrorNotSupported;
    }
#undef KN_CHAIN_LAUNCH
    return cudaGetLastError();
}

} // extern "C"

// A kernel of this file, whose first load loads the file's module (kn_cu_preload_modules).
extern "C" const void *kn_cu_module_eltwise(void) { return (const void *)k_binary_f<float, true>; }

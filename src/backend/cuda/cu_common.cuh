// Shared device helpers of the CUDA kernels: element types, the accumulation type of each,
// loads/stores through it, grid sizing and dtype dispatch.
#pragma once

#include "backend/cuda/cuda_internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <type_traits>

namespace kncu {

typedef __half f16;
typedef __nv_bfloat16 bf16;

// Arithmetic happens in float for the 16-bit float types, in the type itself otherwise.
template <typename T> struct acc { typedef T type; };
template <> struct acc<f16> { typedef float type; };
template <> struct acc<bf16> { typedef float type; };

template <typename T> __device__ __forceinline__ typename acc<T>::type ld(T x) { return x; }
template <> __device__ __forceinline__ float ld<f16>(f16 x) { return __half2float(x); }
template <> __device__ __forceinline__ float ld<bf16>(bf16 x) { return __bfloat162float(x); }

template <typename T, typename A> __device__ __forceinline__ T st(A x) { return (T)x; }
template <> __device__ __forceinline__ f16 st<f16, float>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ bf16 st<bf16, float>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ f16 st<f16, double>(double x) { return __double2half(x); }
template <> __device__ __forceinline__ bf16 st<bf16, double>(double x) { return __float2bfloat16_rn((float)x); }

template <typename T> struct is_fp {
    static const bool value = std::is_floating_point<T>::value || std::is_same<T, f16>::value ||
                              std::is_same<T, bf16>::value;
};

static inline unsigned grid_for(int64_t n, int block) {
    int64_t g = (n + block - 1) / block;
    if (g > 65535LL * 32) g = 65535LL * 32; // grid-stride loops cover the rest
    if (g < 1) g = 1;
    return (unsigned)g;
}

#define KNCU_LOOP(i, n)                                                                            \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)blockDim.x * gridDim.x)

// A data error (cuda_internal.h, kn_cu_err): the first thread of the lane's work to find one since
// the record was read claims it in device memory and writes the record, `set` last; later finders
// leave it (the first is what the CPU kernel would report, or one as good).
__device__ __forceinline__ void report(const kn_cu_errp &e, int code, long long value, long long lo, long long hi,
                                       long long where) {
    if (!e.rec || !e.claim) return;
    if (atomicCAS(e.claim, 0, 1) != 0) return;
    volatile kn_cu_err *r = e.rec;
    r->code = code;
    r->node = e.node;
    r->value = value;
    r->lo = lo;
    r->hi = hi;
    r->where = where;
    __threadfence_system();
    r->set = 1;
}

// Offset of flat output index i in operand k of a view.
__device__ __forceinline__ int64_t view_offset(const kn_cu_view &v, int k, int64_t i) {
    int64_t off = 0;
    for (int d = v.rank - 1; d >= 0; d--) {
        int64_t dim = v.dims[d];
        int64_t c = i % dim;
        i /= dim;
        off += c * v.strides[k][d];
    }
    return off;
}

static inline int64_t view_count(const kn_cu_view &v) {
    int64_t n = 1;
    for (int d = 0; d < v.rank; d++) n *= v.dims[d];
    return n;
}

} // namespace kncu

// Calls F<T>(args) for the element type dt; 'default' returns cudaErrorNotSupported.
#define KNCU_CASE(DT, T, CALL)                                                                     \
    case DT: {                                                                                     \
        typedef T type_;                                                                           \
        CALL;                                                                                      \
        break;                                                                                     \
    }
#define KNCU_DISPATCH_FLOAT(dt, CALL)                                                              \
    switch (dt) {                                                                                  \
        KNCU_CASE(KILN_DTYPE_FLOAT, float, CALL)                                                   \
        KNCU_CASE(KILN_DTYPE_DOUBLE, double, CALL)                                                 \
        KNCU_CASE(KILN_DTYPE_FLOAT16, kncu::f16, CALL)                                             \
        KNCU_CASE(KILN_DTYPE_BFLOAT16, kncu::bf16, CALL)                                           \
    default: return cudaErrorNotSupported;                                                         \
    }
#define KNCU_INT_CASES(CALL)                                                                       \
    KNCU_CASE(KILN_DTYPE_INT8, int8_t, CALL)                                                       \
    KNCU_CASE(KILN_DTYPE_INT16, int16_t, CALL)                                                     \
    KNCU_CASE(KILN_DTYPE_INT32, int32_t, CALL)                                                     \
    KNCU_CASE(KILN_DTYPE_INT64, int64_t, CALL)                                                     \
    KNCU_CASE(KILN_DTYPE_UINT8, uint8_t, CALL)                                                     \
    KNCU_CASE(KILN_DTYPE_UINT16, uint16_t, CALL)                                                   \
    KNCU_CASE(KILN_DTYPE_UINT32, uint32_t, CALL)                                                   \
    KNCU_CASE(KILN_DTYPE_UINT64, uint64_t, CALL)
#define KNCU_DISPATCH_INT(dt, CALL)                                                                \
    switch (dt) {                                                                                  \
        KNCU_INT_CASES(CALL)                                                                       \
    default: return cudaErrorNotSupported;                                                         \
    }
#define KNCU_DISPATCH_NUM(dt, CALL)                                                                \
    switch (dt) {                                                                                  \
        KNCU_CASE(KILN_DTYPE_FLOAT, float, CALL)                                                   \
        KNCU_CASE(KILN_DTYPE_DOUBLE, double, CALL)                                                 \
        KNCU_CASE(KILN_DTYPE_FLOAT16, kncu::f16, CALL)                                             \
        KNCU_CASE(KILN_DTYPE_BFLOAT16, kncu::bf16, CALL)                                           \
        KNCU_INT_CASES(CALL)                                                                       \
    default: return cudaErrorNotSupported;                                                         \
    }
// Type-agnostic work by element size.
#define KNCU_DISPATCH_SIZE(es, CALL)                                                               \
    switch (es) {                                                                                  \
        KNCU_CASE(1, uint8_t, CALL)                                                                \
        KNCU_CASE(2, uint16_t, CALL)                                                               \
        KNCU_CASE(4, uint32_t, CALL)                                                               \
        KNCU_CASE(8, uint64_t, CALL)                                                               \
        KNCU_CASE(16, ulonglong2, CALL)                                                            \
    default: return cudaErrorNotSupported;                                                         \
    }

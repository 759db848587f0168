/* CUDA kernels whose work depends on the data itself, not only on shapes (cu_datadep.cu; the C side
 * is cuda_ops_datadep.c): NonZero (its output's length is the count of nonzero elements),
 * DynamicQuantizeLinear (its scale and zero point come from the range of the whole tensor) and TopK
 * over lines too long for one block's shared memory (a line's length known only at run time). */
#ifndef KN_CUDA_DATADEP_H
#define KN_CUDA_DATADEP_H

#include "backend/cuda/cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NonZero in two steps around a read-back of the count.
 * Step 1: counts[c] = the nonzero elements of chunk c (KN_CU_NZ_CHUNK elements each) of the n
 * elements of size esize (1, 2, 4 or 8 bytes) at x; each count replaced by the count of the chunks
 * before it; *total (device) = their sum. `float_bits`: the sign bit is ignored (float types: -0 is
 * zero, NaN is not), else every bit counts. counts holds kn_cu_nz_chunks(n) values.
 * Step 2: y [rank, cnt] (int64) gets each nonzero element's index along every dim, in order (rank
 * 0: one row of zeros). */
#define KN_CU_NZ_CHUNK 4096
int64_t kn_cu_nz_chunks(int64_t n);
cudaError_t kn_cu_nonzero_count(size_t esize, bool float_bits, const void *x, int64_t n, int64_t *counts,
                                int64_t *total, cudaStream_t s);
cudaError_t kn_cu_nonzero_write(size_t esize, bool float_bits, const void *x, int64_t n, int rank, const int64_t *dims,
                                const int64_t *counts, int64_t cnt, int64_t *y, cudaStream_t s);

/* DynamicQuantizeLinear of n float32 elements: the range of x widened to include 0 (NaNs left out),
 * scale = (max - min) / 255 (1 / 255 when max == min), zero point = round half to even of
 * clamp(0 - min / scale, 0, 255), y = saturate(round(x / scale) + zero point) into uint8; the
 * CPU kernel's float32 arithmetic, operation by operation. part: kn_cu_dql_scratch(n) floats of
 * scratch. y_scale (float) and y_zp (uint8) are device scalars. */
size_t kn_cu_dql_scratch(int64_t n);
cudaError_t kn_cu_dynamic_quantize(const float *x, int64_t n, float *part, uint8_t *y, float *y_scale, uint8_t *y_zp,
                                   cudaStream_t s);

/* TopK over lines of any length (outer * inner lines of len elements, the axis in the middle): a
 * bitonic sort of each line in device memory (scratch: kn_cu_topk_sort_scratch bytes), the k best
 * written sorted: larger (largest) or smaller values first, NaN as the largest value, the lower
 * index first on ties, as the CPU kernel orders them. cudaErrorNotSupported for a line longer than
 * 2^30 or a type it does not take. */
#define KN_CU_TOPK_BLOCK_MAX 4096 /* the longest line kn_cu_topk (one block each, cu_reduce.cu) takes */
size_t kn_cu_topk_sort_scratch(kiln_dtype dt, int64_t lines, int64_t len);
cudaError_t kn_cu_topk_sort(kiln_dtype dt, const void *x, void *values, int64_t *indices, int64_t outer, int64_t len,
                            int64_t inner, int64_t k, bool largest, void *scratch, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#ifndef __CUDACC__
#include "backend/cuda/cuda_backend.h"

/* TopK on the sorting kernel above (its scratch taken and given back here), for lines longer than
 * the one-block kernel takes (cuda_ops_nn.c). */
kiln_status kn_cu_run_topk_sorted(kn_cuda *cu, const kn_kernel_ctx *c, const kn_tensor *x, kn_tensor *values,
                                  kn_tensor *indices, int64_t outer, int64_t len, int64_t inner, int64_t k, bool largest);

extern const kn_cuda_kernel kn_cuda_datadep[]; /* NonZero, DynamicQuantizeLinear (cuda_ops_datadep.c) */
#endif

#endif

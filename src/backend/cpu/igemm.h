/* Exact integer matrix products on the float GEMM, for the 8-bit integer operators (MatMulInteger,
 * QLinearMatMul, ConvInteger, QLinearConv and the com.microsoft quantised family).
 *
 * The operands are 8-bit values less their zero points, integers of magnitude at most 255, held
 * as floats. A product of two is at most 65025 and a sum of KN_IGEMM_DEPTH = 256 of them at most
 * 16 646 400 < 2^24, below which every integer is a float: the float GEMM (kn_sgemm, tuned and
 * threaded for every ISA level) computes each 256-deep slice of K exactly in any summation order,
 * and each slice is added into the int32 result as the GEMM finishes its blocks (the epilogue,
 * on the pool's threads). This runs at the float GEMM's rate; an 8-bit kernel (vpmaddubsw /
 * VNNI) would do about twice the products per instruction but saturates pairs on AVX2 unless
 * the weights are 7-bit, which kiln cannot assume of a model. */
#ifndef KN_CPU_IGEMM_H
#define KN_CPU_IGEMM_H

#include "kiln.h"
#include "util/threadpool.h"

#include <stdbool.h>
#include <stdint.h>

#define KN_IGEMM_DEPTH 256

/* acc (M x N int32, row stride ldacc) = A x op(B), or += when accumulate. A is M x K floats (row
 * stride lda); B is K x N (row stride ldb), or N x K (row stride ldb) when trans_b; every element
 * an integer of magnitude <= 255. tmp: M x N floats of scratch (row stride N). Returns
 * KILN_ERR_OUT_OF_MEMORY when the GEMM's packing buffers cannot be had. */
kiln_status kn_igemm(kn_threadpool *pool, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                     int64_t ldb, bool trans_b, int32_t *acc, int64_t ldacc, bool accumulate, float *tmp);

#endif

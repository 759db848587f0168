/* CUDA kernels whose work depends on the data, the C side (the device side is cu_datadep.cu):
 *
 *  - NonZero: its output's length is the number of nonzero elements, known only once they are
 *    counted. The count is made on the device and read back (a wait for the stream), the output
 *    allocated, and the indices written. The read-back cannot be recorded into a CUDA graph: while a
 *    run is recorded the kernel fails with a message, the recording is dropped and that set of
 *    input shapes runs uncaptured from then on (exec/graph_run.c, as a download in the middle of a
 *    run does). Which elements are nonzero is the CPU kernel's rule: every bit but the sign's for
 *    the float types (-0 is zero, NaN is not), every bit for the others.
 *  - DynamicQuantizeLinear: the range of x (with 0 in it), the scale and the zero point on the
 *    device, then the quantisation, all in stream order with no read-back (so recorded like any
 *    kernel); float32 arithmetic step for step as the CPU kernel's (src/backend/cpu/quant.c), so
 *    the three outputs are the CPU's bit for bit.
 *  - TopK over lines longer than the one-block kernel of cuda_ops_nn.c takes (4096), or whose
 *    length was not known when the node was placed: a bitonic sort of each line in device memory.
 */
#include "backend/cuda/cuda_datadep.h"

#include <stdio.h>

/* ------------------------------------------------------------------ NonZero */

static bool float_bits(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_DOUBLE || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16;
}

static kiln_status run_nonzero(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    if (cu->capture)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED,
                               "NonZero's output length is read back on the host, which a recorded run cannot do");
    const int64_t n = kn_tensor_count(x);
    const size_t es = kiln_dtype_size(x->dtype);
    const bool fb = float_bits(x->dtype);
    const int r = x->rank == 0 ? 1 : x->rank;
    int64_t cnt = 0;
    const int64_t chunks = kn_cu_nz_chunks(n);
    /* the chunks' counts (then their offsets) and, after them, the total */
    const size_t bytes = (size_t)(chunks + 1) * sizeof(int64_t);
    void *scratch = NULL;
    KN_TRY(kn_cu_scratch(cu, bytes, &scratch));
    int64_t *counts = scratch, *total = counts + chunks;
    kiln_status st =
        kn_cu_check(c, kn_cu_nonzero_count(es, fb, x->data, n, counts, total, cu->stream), "NonZero (count)");
    if (st == KILN_OK)
        st = kn_cu_check(c, cudaMemcpyAsync(&cnt, total, sizeof cnt, cudaMemcpyDeviceToHost, cu->stream),
                         "NonZero (reading the count back)");
    if (st == KILN_OK) st = kn_cu_check(c, cudaStreamSynchronize(cu->stream), "NonZero (reading the count back)");
    /* a count made from data an earlier kernel found out of range would steer the rest of the run
     * (as a download's value would: cuda_backend.c, cu_download) */
    if (st == KILN_OK) st = kn_cu_err_check(cu);
    if (st == KILN_OK && (cnt < 0 || cnt > n))
        st = kn_kernel_error(c, KILN_ERR_INTERNAL, "NonZero counted %lld nonzero elements of %lld", (long long)cnt,
                             (long long)n);
    kn_tensor *y = NULL;
    const int64_t dims[2] = {r, cnt};
    if (st == KILN_OK) st = kn_cu_output(cu, c, 0, KILN_DTYPE_INT64, 2, dims, &y);
    if (st == KILN_OK)
        st = kn_cu_check(c, kn_cu_nonzero_write(es, fb, x->data, n, x->rank, x->dims, counts, cnt, y->data, cu->stream),
                         "NonZero");
    kn_cu_scratch_free(cu, scratch, bytes);
    return st;
}

static bool nonzero_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n;
    (void)n_in;
    size_t es = kiln_dtype_size(in[0]->dtype);
    if (es != 1 && es != 2 && es != 4 && es != 8) {
        snprintf(why, cap, "element type %s", kiln_dtype_name(in[0]->dtype));
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ DynamicQuantizeLinear */

static kiln_status run_dynamic_quantize(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    if (x->dtype != KILN_DTYPE_FLOAT)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "x has element type %s; DynamicQuantizeLinear takes float",
                               kiln_dtype_name(x->dtype));
    const int64_t n = kn_tensor_count(x);
    kn_tensor *y, *ys, *yz;
    KN_TRY(kn_cu_output(cu, c, 0, KILN_DTYPE_UINT8, x->rank, x->dims, &y));
    KN_TRY(kn_cu_output(cu, c, 1, KILN_DTYPE_FLOAT, 0, NULL, &ys));
    KN_TRY(kn_cu_output(cu, c, 2, KILN_DTYPE_UINT8, 0, NULL, &yz));
    const size_t bytes = kn_cu_dql_scratch(n) * sizeof(float);
    void *part = NULL;
    KN_TRY(kn_cu_scratch(cu, bytes, &part));
    kiln_status st = kn_cu_check(c, kn_cu_dynamic_quantize(x->data, n, part, y->data, ys->data, yz->data, cu->stream),
                                 "DynamicQuantizeLinear");
    kn_cu_scratch_free(cu, part, bytes);
    return st;
}

static bool dynamic_quantize_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n;
    (void)n_in;
    if (in[0]->dtype != KILN_DTYPE_FLOAT) {
        snprintf(why, cap, "x of element type %s (DynamicQuantizeLinear takes float)", kiln_dtype_name(in[0]->dtype));
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ TopK over long lines */

kiln_status kn_cu_run_topk_sorted(kn_cuda *cu, const kn_kernel_ctx *c, const kn_tensor *x, kn_tensor *values,
                                  kn_tensor *indices, int64_t outer, int64_t len, int64_t inner, int64_t k, bool largest) {
    if (outer * inner == 0 || k == 0 || len == 0) return KILN_OK;
    const size_t bytes = kn_cu_topk_sort_scratch(x->dtype, outer * inner, len);
    if (!bytes)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "TopK over an axis of %lld %s elements on CUDA", (long long)len,
                               kiln_dtype_name(x->dtype));
    void *scratch = NULL;
    KN_TRY(kn_cu_scratch(cu, bytes, &scratch));
    kiln_status st = kn_cu_check(c,
                                 kn_cu_topk_sort(x->dtype, x->data, values->data, indices->data, outer, len, inner, k,
                                                 largest, scratch, cu->stream),
                                 "TopK");
    kn_cu_scratch_free(cu, scratch, bytes);
    return st;
}

/* ------------------------------------------------------------------ the table */

const kn_cuda_kernel kn_cuda_datadep[] = {
    {"", "NonZero", run_nonzero, nonzero_supports, KN_T_DENSE, 0, 0},
    {"", "DynamicQuantizeLinear", run_dynamic_quantize, dynamic_quantize_supports, KN_T(KILN_DTYPE_FLOAT), 0, 0},
    {NULL, NULL, NULL, NULL, 0, 0, 0},
};

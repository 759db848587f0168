/* What the kernels of the quantised com.microsoft operators (src/ops/qcontrib.c) share across
 * backends. */
#ifndef KN_OPS_QCONTRIB_H
#define KN_OPS_QCONTRIB_H

#include "exec/kernel.h"

#include <stdint.h>

/* MatMulNBits' sizes: K and N (attributes), bits, block_size (bs), blocks per column (kb), bytes
 * per block (blob), rows of A (M). */
typedef struct kn_nbits_params {
    int64_t K, N, bits, bs, kb, blob, M;
} kn_nbits_params;

/* MatMulNBits' attributes (K, N, bits, block_size, as the kernel's prepare hook read them) and
 * operands checked, the sizes derived: every backend's kernel starts here (an error names the
 * node, the shapes and the reason). g_idx's values are the kernel's to check: they may live on a
 * device. */
kiln_status kn_matmul_nbits_check_with(kn_kernel_ctx *c, int64_t K, int64_t N, int64_t bits, int64_t bs,
                                       kn_nbits_params *p);

/* QLinearSoftmax's rows for its attributes opset and axis (axis defaulted by opset: 1 before 13,
 * else -1; as the kernel's prepare hook read them): *D elements each along the axis (before opset
 * 13 every dim from the axis on, flattened), *inner apart; an axis out of range is an error naming
 * the node. */
kiln_status kn_qlinear_softmax_rows_with(kn_kernel_ctx *c, const kn_tensor *X, int64_t opset, int64_t axis, int64_t *D,
                                         int64_t *inner);

#endif

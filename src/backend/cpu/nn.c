/* The CPU kernel table of the nn family; the kernels live in nn_reduce.c, nn_softmax.c,
 * nn_norm.c and nn_rnn.c. */
#include "backend/cpu/nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static bool type_known(const kn_type *const *in, int n_in) { return n_in > 0 && in[0] && in[0]->dtype; }

/* numbers and bool: float, double, float16, bfloat16, the integers */
static bool supports_numeric(const kn_node *node, const kn_type *const *in, int n_in, char *why, size_t cap) {
    if (!type_known(in, n_in)) return true;
    if (kn_nn_compute_type(in[0]->dtype) != KILN_DTYPE_UNDEFINED) return true;
    snprintf(why, cap, "%s on the CPU does not support element type %s", node->op_type, kiln_dtype_name(in[0]->dtype));
    return false;
}

/* float, double, float16, bfloat16 */
static bool supports_float(const kn_node *node, const kn_type *const *in, int n_in, char *why, size_t cap) {
    if (!type_known(in, n_in)) return true;
    if (kn_dtype_is_float(in[0]->dtype)) return true;
    snprintf(why, cap, "%s on the CPU does not support element type %s", node->op_type, kiln_dtype_name(in[0]->dtype));
    return false;
}

/* Det: LU factorisation with partial pivoting, per matrix, in double precision. */
static kiln_status run_det(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    if (x->rank < 2 || x->dims[x->rank - 1] != x->dims[x->rank - 2])
        return kn_kernel_error(c, KILN_ERR_SHAPE, "input must be [..., M, M]");
    kn_tensor *y;
    KN_TRY(kn_ctx_output(c, 0, x->dtype, x->rank - 2, x->dims, &y));
    int64_t m = x->dims[x->rank - 1], count = kn_tensor_count(y);
    double *a = malloc((size_t)(m > 0 ? m * m : 1) * sizeof *a);
    if (!a) return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for a %lld x %lld matrix", (long long)m, (long long)m);
    for (int64_t b = 0; b < count; b++) {
        for (int64_t i = 0; i < m * m; i++) a[i] = kn_tensor_get_f64(x, b * m * m + i);
        double det = 1;
        for (int64_t k = 0; k < m && det != 0; k++) {
            int64_t p = k;
            for (int64_t i = k + 1; i < m; i++)
                if (fabs(a[i * m + k]) > fabs(a[p * m + k])) p = i;
            if (a[p * m + k] == 0) {
                det = 0;
                break;
            }
            if (p != k) {
                for (int64_t j = 0; j < m; j++) {
                    double t = a[k * m + j];
                    a[k * m + j] = a[p * m + j];
                    a[p * m + j] = t;
                }
                det = -det;
            }
            double piv = a[k * m + k];
            det *= piv;
            for (int64_t i = k + 1; i < m; i++) {
                double f = a[i * m + k] / piv;
                for (int64_t j = k + 1; j < m; j++) a[i * m + j] -= f * a[k * m + j];
            }
        }
        kn_tensor_set_f64(y, b, det);
    }
    free(a);
    return KILN_OK;
}

const kn_cpu_kernel kn_cpu_nn[] = {
    {"", "ReduceSum", kn_cpu_reduce, supports_numeric, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_reduce_prepare, kn_reduce_prm)},
    {"", "ReduceMean", kn_cpu_reduce, supports_numeric, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_reduce_prepare, kn_reduce_prm)},
    {"", "ReduceMax", kn_cpu_reduce, supports_numeric, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_reduce_prepare, kn_reduce_prm)},
    {"", "ReduceMin", kn_cpu_reduce, supports_numeric, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_reduce_prepare, kn_reduce_prm)},
    {"", "ReduceProd", kn_cpu_reduce, supports_numeric, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_reduce_prepare, kn_reduce_prm)},
    {"", "ReduceL1", kn_cpu_reduce, supports_numeric, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_reduce_prepare, kn_reduce_prm)},
    {"", "ReduceL2", kn_cpu_reduce, supports_numeric, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_reduce_prepare, kn_reduce_prm)},
    {"", "ReduceLogSum", kn_cpu_reduce, supports_numeric, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_reduce_prepare, kn_reduce_prm)},
    {"", "ReduceLogSumExp", kn_cpu_reduce, supports_numeric, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_reduce_prepare, kn_reduce_prm)},
    {"", "ReduceSumSquare", kn_cpu_reduce, supports_numeric, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_reduce_prepare, kn_reduce_prm)},
    {"", "ArgMax", kn_cpu_argminmax, supports_numeric, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_argminmax_prepare, kn_argminmax_prm)},
    {"", "ArgMin", kn_cpu_argminmax, supports_numeric, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_argminmax_prepare, kn_argminmax_prm)},
    {"", "TopK", kn_cpu_topk, supports_numeric, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_topk_prepare, kn_topk_prm)},
    {"", "Softmax", kn_cpu_softmax, supports_float, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_softmax_prepare, kn_softmax_prm)},
    {"", "LogSoftmax", kn_cpu_softmax, supports_float, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_softmax_prepare, kn_softmax_prm)},
    {"", "Hardmax", kn_cpu_hardmax, supports_numeric, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_softmax_prepare, kn_softmax_prm)},
    {"", "LayerNormalization", kn_cpu_layernorm, supports_float, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_norm_rows_prepare, kn_norm_rows_prm)},
    {"", "RMSNormalization", kn_cpu_rmsnorm, supports_float, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_norm_rows_prepare, kn_norm_rows_prm)},
    {"", "BatchNormalization", kn_cpu_batchnorm, supports_float, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_nn_norm_prepare, kn_nn_norm_prm)},
    {"", "InstanceNormalization", kn_cpu_instancenorm, supports_float, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_nn_norm_prepare, kn_nn_norm_prm)},
    {"", "GroupNormalization", kn_cpu_groupnorm, supports_float, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_nn_norm_prepare, kn_nn_norm_prm)},
    {"", "LpNormalization", kn_cpu_lpnorm, supports_float, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_nn_norm_prepare, kn_nn_norm_prm)},
    {"", "MeanVarianceNormalization", kn_cpu_mvn, supports_float, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_nn_norm_prepare, kn_nn_norm_prm)},
    {"", "LRN", kn_cpu_lrn, supports_float, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_nn_norm_prepare, kn_nn_norm_prm)},
    {"", "RNN", kn_cpu_rnn, supports_float, 0, KN_PARAMS(kn_cpu_rnn_prepare, kn_cpu_rnn_prm)},
    {"", "GRU", kn_cpu_rnn, supports_float, 0, KN_PARAMS(kn_cpu_rnn_prepare, kn_cpu_rnn_prm)},
    {"", "LSTM", kn_cpu_rnn, supports_float, 0, KN_PARAMS(kn_cpu_rnn_prepare, kn_cpu_rnn_prm)},
    {"kiln", "StackedLSTM", kn_cpu_stacked_lstm, supports_float, 0, KN_PARAMS(kn_cpu_stacked_lstm_prepare, kn_cpu_rnn_prm)},
    {"", "NegativeLogLikelihoodLoss", kn_cpu_nll_loss, supports_float, 0, KN_PARAMS(kn_loss_prepare, kn_loss_prm)},
    {"", "SoftmaxCrossEntropyLoss", kn_cpu_sce_loss, supports_float, 0, KN_PARAMS(kn_loss_prepare, kn_loss_prm)},
    {"", "Det", run_det, supports_float, KN_KERNEL_OVERWRITES},
    {0},
};

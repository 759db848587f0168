/* kiln.MaxPool and kiln.AveragePool on the CPU. Layout NCHW is ai.onnx's pooling; NHWC is the
 * reference (channels moved first, pooled, moved back), as FusedConv's NHWC is here: the optimiser
 * forms channels-last pools for device providers, and for the CPU only when KILN_LAYOUT=nhwc asks
 * (to check the layout pass against the plain graph). */
#include "backend/cpu/linalg_impl.h"
#include "ops/fused.h"

#include <string.h>

static kiln_status run_layout_pool(kn_kernel_ctx *c, kiln_status (*pool)(kn_kernel_ctx *)) {
    bool nhwc;
    if (!kn_fused_conv_layout(c->node, &nhwc)) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "layout must be NCHW or NHWC");
    kn_node proxy = *c->node; /* the ai.onnx kernel reads the same attributes */
    proxy.domain = "";
    proxy.opset = 19;
    kn_kernel_ctx pc = *c;
    pc.node = &proxy;
    pc.prep = NULL;
    if (!nhwc) return pool(&pc);
    const kn_tensor *X = c->in[0];
    kn_tensor *Y = c->out[0];
    if (!Y || X->rank < 3 || Y->rank != X->rank)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "layout NHWC needs X and Y of one rank, 3 or more");
    int to_first[KILN_MAX_RANK], to_last[KILN_MAX_RANK];
    kn_nhwc_perms(X->rank, to_first, to_last);
    int64_t ydims[KILN_MAX_RANK];
    for (int d = 0; d < Y->rank; d++) ydims[d] = Y->dims[to_first[d]];
    kn_tensor *xf = NULL, *yf = NULL, *yl = NULL;
    kiln_status st = kn_tensor_permuted(X, to_first, &xf);
    if (st == KILN_OK) st = kn_tensor_new(Y->dtype, Y->rank, ydims, &yf);
    if (st == KILN_OK) {
        kn_tensor *in[1] = {xf}, *out[1] = {yf};
        pc.in = in;
        pc.n_inputs = 1;
        pc.out = out;
        pc.n_outputs = 1;
        st = pool(&pc);
    }
    if (st == KILN_OK) st = kn_tensor_permuted(yf, to_last, &yl);
    if (st == KILN_OK) memcpy(Y->data, yl->data, Y->nbytes);
    kn_tensor_free(xf);
    kn_tensor_free(yf);
    kn_tensor_free(yl);
    return st;
}

kiln_status kn_cpu_max_pool_layout(kn_kernel_ctx *c) { return run_layout_pool(c, kn_cpu_max_pool); }
kiln_status kn_cpu_average_pool_layout(kn_kernel_ctx *c) { return run_layout_pool(c, kn_cpu_average_pool); }

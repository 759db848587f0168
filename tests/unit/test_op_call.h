/* One hand-built node (test_nodes.h) run as the executor runs it: shape inference, then the CPU
 * kernel the backend picks for the inferred types, on tensors the test owns. */
#ifndef KN_TEST_OP_CALL_H
#define KN_TEST_OP_CALL_H

#include "backend/cpu/cpu.h"
#include "exec/exec.h"
#include "ops/op.h"

/* Runs node (of the default domain) on in[0, n_in) with its one output preallocated where
 * inference gives it a static shape; *out gets the output (the caller frees it) or NULL on
 * failure, whose status is returned. */
static inline kiln_status toc_run(const kn_node *node, kn_threadpool *pool, kn_tensor **in, int n_in, kn_tensor **out) {
    *out = NULL;
    const kn_op_schema *s = kn_op_find("", node->op_type, node->opset, NULL);
    if (!s) return kn_error(KILN_ERR_UNSUPPORTED, "no schema for %s", node->op_type);
    kn_type types[8];
    const kn_type *tp[8];
    const kn_tensor *vals[8];
    for (int i = 0; i < n_in; i++) {
        if (in[i]) kn_type_of_tensor(in[i], &types[i]);
        tp[i] = in[i] ? &types[i] : NULL;
        vals[i] = in[i];
    }
    kn_type ot;
    kn_type_init(&ot);
    kn_infer_ctx ic = {node, n_in, tp, vals, 1, &ot, NULL};
    KN_TRY(s->infer(&ic));
    kn_tensor *o = NULL;
    if (kn_type_is_static(&ot)) {
        int64_t dims[KILN_MAX_RANK];
        for (int d = 0; d < ot.rank; d++) dims[d] = ot.dims[d].value;
        KN_TRY(kn_tensor_new(ot.dtype, ot.rank, dims, &o));
    }
    char why[256];
    const kn_cpu_kernel *k = kn_cpu_find(node, tp, n_in, why, sizeof why);
    if (!k) {
        kn_tensor_free(o);
        return kn_error(KILN_ERR_UNSUPPORTED, "%s", why);
    }
    kn_tensor *outs[1] = {o};
    kn_kernel_ctx kc = {node, NULL, n_in, in, 1, outs, pool, NULL};
    kiln_status st = k->run(&kc);
    if (st != KILN_OK) {
        kn_tensor_free(outs[0]);
        return st;
    }
    *out = outs[0];
    return KILN_OK;
}

#endif

/* kiln.ElementwiseChain on the CPU (not formed yet: the kernel refuses every node, so the
 * optimiser never creates one). */
#include "backend/cpu/fused_impl.h"

#include <stdio.h>

bool kn_cpu_fused_chain_supports(const kn_node *node, const kn_type *const *in, int n_in, char *why, size_t cap) {
    snprintf(why, cap, "kiln.ElementwiseChain has no CPU kernel yet");
    return false;
}

kiln_status kn_cpu_fused_chain(kn_kernel_ctx *c) {
    return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "kiln.ElementwiseChain has no CPU kernel yet");
}

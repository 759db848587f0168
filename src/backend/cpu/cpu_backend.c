#include "backend/cpu/cpu.h"

#include <stdio.h>
#include <string.h>

static const kn_cpu_kernel *const kn_cpu_families[] = {
#define KN_FAMILY(name) kn_cpu_##name,
    KN_OP_FAMILIES
#undef KN_FAMILY
};

/* The kernels that read packed sub-byte inputs (int4, uint4, float4e2m1, int2, uint2): most
 * kernels address elements by kiln_dtype_size, which is 0 for them. */
static bool reads_packed(const kn_node *node) {
    static const char *const ops[] = {"Cast",    "CastLike", "DequantizeLinear", "QuantizeLinear", "Shape",
                                      "Size",    "Identity", "Reshape",          "Flatten",        "Squeeze",
                                      "Unsqueeze", "BitCast", NULL};
    if (*node->domain) return false;
    for (int i = 0; ops[i]; i++)
        if (!strcmp(node->op_type, ops[i])) return true;
    return false;
}

const kn_cpu_kernel *const *kn_cpu_tables(size_t *count) {
    *count = sizeof kn_cpu_families / sizeof kn_cpu_families[0];
    return kn_cpu_families;
}

const kn_cpu_kernel *kn_cpu_find(const kn_node *node, const kn_type *const *in, int n_in,
                                 char *why, size_t cap) {
    for (size_t f = 0; f < sizeof kn_cpu_families / sizeof kn_cpu_families[0]; f++)
        for (const kn_cpu_kernel *k = kn_cpu_families[f]; k->op_type; k++) {
            if (strcmp(k->op_type, node->op_type) || strcmp(k->domain, node->domain)) continue;
            for (int i = 0; i < n_in; i++)
                if (in && in[i] && kn_dtype_is_packed(in[i]->dtype) && !reads_packed(node)) {
                    snprintf(why, cap, "input %d has the packed %d-bit element type %s, which the CPU kernel of %s does not read",
                             i, kn_dtype_bits(in[i]->dtype), kiln_dtype_name(in[i]->dtype), node->op_type);
                    return NULL;
                }
            if (k->supports && !k->supports(node, in, n_in, why, cap)) return NULL;
            return k;
        }
    snprintf(why, cap, "the CPU backend has no kernel for %s%s%s", node->domain,
             *node->domain ? ":" : "", node->op_type);
    return NULL;
}

#include "backend/cpu/cpu.h"

#include <stdio.h>
#include <string.h>

static const kn_cpu_kernel *const kn_cpu_families[] = {
#define KN_FAMILY(name) kn_cpu_##name,
    KN_OP_FAMILIES
#undef KN_FAMILY
};

const kn_cpu_kernel *kn_cpu_find(const kn_node *node, const kn_type *const *in, int n_in,
                                 char *why, size_t cap) {
    for (size_t f = 0; f < sizeof kn_cpu_families / sizeof kn_cpu_families[0]; f++)
        for (const kn_cpu_kernel *k = kn_cpu_families[f]; k->op_type; k++) {
            if (strcmp(k->op_type, node->op_type) || strcmp(k->domain, node->domain)) continue;
            if (k->supports && !k->supports(node, in, n_in, why, cap)) return NULL;
            return k;
        }
    snprintf(why, cap, "the CPU backend has no kernel for %s%s%s", node->domain,
             *node->domain ? ":" : "", node->op_type);
    return NULL;
}

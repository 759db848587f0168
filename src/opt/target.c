/* Target awareness: a pass forms a fused node only when every provider the session may place it
 * on has a kernel for it with these input types and attributes. Today the CPU is the only backend;
 * a new backend adds its query here (and until it does, fusions are not formed for it). */
#include "opt/pass.h"

#include "backend/cpu/cpu.h"

#include <stdio.h>
#include <string.h>

static bool cpu_supports(const kn_node *node, const kn_type *const *in, int n_in, char *why, size_t cap) {
    return kn_cpu_find(node, in, n_in, why, cap) != NULL;
}

bool kn_opt_target_supports(const kn_opt_ctx *c, const kn_node *node, const kn_type *const *in, int n_in,
                            char *why, size_t cap) {
    const kiln_session_options *o = c->options;
    int n = o ? o->n_providers : 0;
    bool any = false;
    for (int i = 0; i < n; i++) {
        const char *name = o->providers[i].name;
        if (!name) continue;
        if (!strcmp(name, "cpu")) {
            any = true;
            if (!cpu_supports(node, in, n_in, why, cap)) return false;
            continue;
        }
        /* a provider this build cannot run never receives nodes; one it can run but whose
         * kernels this check does not know yet gets no fused nodes */
        if (!kiln_provider_available(name, NULL)) continue;
        snprintf(why, cap, "provider '%s' cannot be asked about fused nodes yet", name);
        return false;
    }
    if (!any) return cpu_supports(node, in, n_in, why, cap); /* the default provider */
    return true;
}

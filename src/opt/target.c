/* Target awareness: whether a pass may form a fused node, asked of the providers' backends
 * (kn_backend_supports: their kernel tables, including each kernel's `supports` check; no device
 * is needed).
 *
 * The rule, chosen to agree with placement (src/exec/placement.c puts each node on the first
 * listed provider whose backend has a kernel for it):
 *   - the candidates are the providers the session lists, in order, that this build has and that
 *     can run on this machine (the runtime skips the others; kiln inspect, which places from the
 *     kernel tables alone, keeps them: kn_optimize_from_tables);
 *   - the pattern's provider is the first candidate that supports the pattern's anchor node (the
 *     node the fused one is named after: the Conv, MatMul, Gemm, ... whose work dominates);
 *   - the fused node forms when the first candidate that supports it, which is where placement
 *     will put it, is the pattern's provider or one listed before it.
 * So a fusion never moves work to a provider later in the user's order than where the unfused
 * nodes would run (an fp32-only CPU kernel does not pull an fp16 CUDA convolution to the CPU,
 * and with cpu,cuda a CPU pattern is not pulled to the GPU), and a fusion one provider lacks is
 * still formed for the provider that would run it (fp16 FusedConv with cuda,cpu), which the
 * stricter rule "every candidate supports it" would refuse.
 *
 * One attribute is the optimiser's own business: a fused node's activation_bounds (a constant
 * clamp after its activation, src/ops/fused.h) is applied by the CPU's kernels only; CUDA's fused
 * kernels would accept the node and ignore it. So a node carrying it forms only where the provider
 * placement gives it is the CPU, and the passes then form it without the clamp. */
#include "opt/pass.h"

#include "backend/backend.h"

#include <stdio.h>
#include <string.h>

#define KN_TARGET_MAX_IN 64

/* The providers placement would consider, in order; "cpu" when none is listed. requests (may be
 * NULL) gets each one's entry in the session options, or NULL for that default "cpu". */
static int candidates(const kn_opt_ctx *c, const char **names, const kn_provider_request **requests, int cap) {
    const kiln_session_options *o = c->options;
    int n = 0;
    for (int i = 0; o && i < o->n_providers && n < cap; i++) {
        const char *name = o->providers[i].name;
        if (!name || !kn_backend_find(name)) continue; /* not in this build: never receives nodes */
        if (!c->providers_from_tables && !kiln_provider_available(name, NULL)) continue;
        if (requests) requests[n] = &o->providers[i];
        names[n++] = name;
    }
    if (!o || o->n_providers == 0) {
        if (requests) requests[n] = NULL;
        names[n++] = "cpu";
    }
    return n;
}

const char *kn_opt_first_provider(const kn_opt_ctx *c, kn_backend_config *cfg) {
    const char *names[KN_MAX_PROVIDERS + 1];
    const kn_provider_request *req[KN_MAX_PROVIDERS + 1];
    int n = candidates(c, names, req, KN_MAX_PROVIDERS + 1);
    kn_provider_request none;
    memset(&none, 0, sizeof none);
    none.name = (char *)"cpu";
    if (n == 0 || kn_backend_parse_config(req[0] ? req[0] : &none, cfg) != KILN_OK) {
        kn_clear_error(); /* a bad option is the session's error to report, when it starts the provider */
        kn_backend_parse_config(&none, cfg);
    }
    return n ? names[0] : NULL;
}

/* Index of the first candidate supporting the node, or -1; why_first (may be NULL) gets the first
 * refusal as "provider: reason". */
static int first_supporting(const char *const *names, int n, const kn_node *node, const kn_type *const *in,
                            int n_in, char *why_first, size_t cap) {
    char why[256];
    if (why_first && cap) why_first[0] = 0;
    for (int i = 0; i < n; i++) {
        why[0] = 0;
        if (kn_backend_supports(names[i], node, in, n_in, why, sizeof why)) return i;
        if (why_first && cap && !why_first[0]) snprintf(why_first, cap, "%s: %s", names[i], why);
    }
    return -1;
}

/* Whether the provider's fused kernels apply activation_bounds (the CPU's: src/backend/cpu/fused.c). */
static bool applies_bounds(const char *provider) { return !strcmp(provider, "cpu"); }

bool kn_opt_target_supports(const kn_opt_ctx *c, const kn_node *node, const kn_type *const *in, int n_in,
                            int anchor, char *why, size_t cap) {
    const char *names[KN_MAX_PROVIDERS + 1];
    int n = candidates(c, names, NULL, KN_MAX_PROVIDERS + 1);
    char refusal[384];
    if (n == 0) {
        snprintf(why, cap, "no provider of the session can run on this machine");
        return false;
    }
    int fused_at = first_supporting(names, n, node, in, n_in, refusal, sizeof refusal);
    if (fused_at < 0) {
        snprintf(why, cap, "no provider has a kernel for %s%s%s (%s)", node->domain, *node->domain ? ":" : "",
                 node->op_type, refusal);
        return false;
    }
    if (kn_node_attr(node, "activation_bounds") && !applies_bounds(names[fused_at])) {
        snprintf(why, cap, "provider '%s' would run %s%s%s but does not apply its activation_bounds", names[fused_at],
                 node->domain, *node->domain ? ":" : "", node->op_type);
        return false;
    }
    int pattern_at = 0; /* without an anchor: the first candidate, where most nodes go */
    if (anchor >= 0 && anchor < c->g->n_nodes) {
        const kn_node *a = &c->g->nodes[anchor];
        const kn_type *ain[KN_TARGET_MAX_IN] = {0};
        int na = a->n_inputs < KN_TARGET_MAX_IN ? a->n_inputs : KN_TARGET_MAX_IN;
        for (int k = 0; k < na; k++) ain[k] = a->inputs[k] >= 0 ? &c->g->values[a->inputs[k]].type : NULL;
        pattern_at = first_supporting(names, n, a, ain, na, NULL, 0);
        if (pattern_at < 0) pattern_at = n; /* nobody runs the pattern as it is: any kernel will do */
    }
    if (fused_at <= pattern_at) return true;
    /* the provider that runs the pattern has no kernel for the fused node: ask it again for why */
    char reason[256] = "";
    kn_backend_supports(names[pattern_at], node, in, n_in, reason, sizeof reason);
    snprintf(why, cap, "provider '%s' would run the pattern but cannot run %s%s%s (%s); forming it would move the work to '%s'",
             names[pattern_at], node->domain, *node->domain ? ":" : "", node->op_type, reason, names[fused_at]);
    return false;
}

/* kiln inspect --provider P[,P]: where each node would run and why, from the providers' kernel
 * tables (no device is needed: on a machine without a GPU this shows what a GPU run would place). */
#include "cli.h"

#include "backend/backend.h"
#include "exec/exec.h"

#include <stdio.h>
#include <string.h>

typedef struct place_counts {
    int total, first, shape, fallback, subgraph;
    const kn_runtime *rt;
} place_counts;

static void on_place(void *arg, const kn_graph *g, const kn_node *n, int provider, kn_place_kind kind,
                     const char *why) {
    (void)g;
    place_counts *pc = arg;
    const char *name = pc->rt->backends[provider].ops->name;
    pc->total++;
    switch (kind) {
    case KN_PLACE_FIRST: pc->first++; break;
    case KN_PLACE_SHAPE:
        pc->shape++;
        printf("  %-28s %-20s placed on %s: %s\n", n->name, n->op_type, name, why);
        break;
    case KN_PLACE_FALLBACK:
        pc->fallback++;
        printf("  %-28s %-20s falls back to %s: %s\n", n->name, n->op_type, name, why);
        break;
    case KN_PLACE_SUBGRAPH: pc->subgraph++; break;
    }
}

int cli_print_placement(kn_model *m, const kiln_session_options *o) {
    kn_runtime rt;
    memset(&rt, 0, sizeof rt);
    rt.cpu = -1;
    for (int i = 0; i < o->n_providers && rt.n_backends < KN_MAX_PROVIDERS; i++) {
        const kn_backend_ops *ops = kn_backend_find(o->providers[i].name);
        if (!ops) {
            printf("provider %s: not in this build\n", o->providers[i].name);
            continue;
        }
        const char *why = NULL;
        if (!ops->available(&why)) printf("provider %s: not usable here (%s); placement from its kernel tables\n", ops->name, why);
        kn_backend *b = &rt.backends[rt.n_backends];
        kn_backend_parse_config(&o->providers[i], &b->cfg);
        b->ops = ops;
        b->listed = true;
        if (ops == &kn_backend_cpu) rt.cpu = rt.n_backends;
        rt.n_backends++;
    }
    if (rt.cpu < 0) {
        rt.backends[rt.n_backends].ops = &kn_backend_cpu;
        rt.backends[rt.n_backends].listed = rt.n_backends == 0;
        rt.cpu = rt.n_backends++;
    }
    place_counts pc = {0, 0, 0, 0, 0, &rt};
    printf("placement (providers:");
    for (int b = 0; b < rt.n_backends; b++)
        if (rt.backends[b].listed) printf(" %s", rt.backends[b].ops->name);
    printf("):\n");
    kiln_status st = kn_graph_place(m->graph, &rt, on_place, &pc);
    if (st != KILN_OK) {
        printf("placement: %s\n", kiln_last_error());
        return 1;
    }
    int first = 0;
    while (!rt.backends[first].listed) first++;
    printf("placement summary: nodes=%d %s=%d shape_on_cpu=%d fallback=%d subgraph=%d\n", pc.total,
           rt.backends[first].ops->name, pc.first, pc.shape, pc.fallback, pc.subgraph);
    return 0;
}

/* kiln inspect: what a model is made of and what kiln makes of it. */
#include "cli.h"

#include "backend/cpu/cpu.h"
#include "exec/exec.h"
#include "exec/session.h"
#include "onnx/loader.h"
#include "ops/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct op_count {
    char key[160];
    int count;
    int unsupported;
    char why[256];
} op_count;

static int cmp_count(const void *a, const void *b) {
    const op_count *x = a, *y = b;
    return x->count != y->count ? y->count - x->count : strcmp(x->key, y->key);
}

static void print_values(const kn_graph *g, int depth) {
    char ty[512];
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        printf("%*s%-28s %-20s", depth * 2, "", n->name, n->op_type);
        for (int o = 0; o < n->n_outputs; o++) {
            if (n->outputs[o] < 0) continue;
            const kn_value *v = &g->values[n->outputs[o]];
            printf("  %s: %s", v->name, kn_type_str(&v->type, ty, sizeof ty));
        }
        printf("\n");
        for (int a = 0; a < n->n_attrs; a++)
            if (n->attrs[a].type == KN_ATTR_GRAPH && n->attrs[a].g) {
                printf("%*s  subgraph '%s':\n", depth * 2, "", n->attrs[a].name);
                print_values(n->attrs[a].g, depth + 2);
            }
    }
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    kiln_session_options *dims_opts = NULL;
    kiln_session_options_create(&dims_opts);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--dim") && i + 1 < argc) {
            char *kv = argv[++i], *eq = strchr(kv, '=');
            if (!eq) {
                fprintf(stderr, "kiln inspect: --dim takes NAME=VALUE\n");
                return 2;
            }
            *eq = 0;
            kiln_session_options_set_dim(dims_opts, kv, atoll(eq + 1));
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "kiln inspect: unknown option '%s'\n", argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        fprintf(stderr, "usage: kiln inspect MODEL [--dim NAME=VALUE ...]\n");
        return 2;
    }
    kn_model *m;
    if (kn_onnx_load_file(path, &m) != KILN_OK) {
        fprintf(stderr, "kiln inspect: %s\n", kiln_last_error());
        return 1;
    }
    kn_graph *g = m->graph;
    char ty[512];
    printf("model: %s\n", path);
    printf("producer: %s %s, IR version %lld\n", m->producer_name ? m->producer_name : "?",
           m->producer_version ? m->producer_version : "", (long long)m->ir_version);
    printf("opsets:");
    for (int i = 0; i < m->n_opsets; i++)
        printf(" %s=%lld", *m->opsets[i].domain ? m->opsets[i].domain : "ai.onnx", (long long)m->opsets[i].version);
    printf("\n");

    /* resolve each node on its own so every unsupported operator is listed, not just the first */
    op_count *ops = calloc((size_t)(g->n_nodes + 1), sizeof *ops);
    int n_ops = 0, n_unsupported = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        char key[160];
        snprintf(key, sizeof key, "%s%s%s", n->domain, *n->domain ? ":" : "", n->op_type);
        int k = 0;
        while (k < n_ops && strcmp(ops[k].key, key)) k++;
        if (k == n_ops) {
            snprintf(ops[k].key, sizeof ops[k].key, "%s", key);
            n_ops++;
            n->schema = kn_op_find(n->domain, n->op_type, n->opset, NULL);
            char why[256] = "";
            if (!n->schema) {
                snprintf(why, sizeof why, "no schema for opset %d", n->opset);
            } else {
                const kn_type *in[64] = {0};
                for (int j = 0; j < n->n_inputs && j < 64; j++)
                    in[j] = n->inputs[j] >= 0 ? &g->values[n->inputs[j]].type : NULL;
                if (!kn_cpu_find(n, in, n->n_inputs < 64 ? n->n_inputs : 64, why, sizeof why)) ops[k].unsupported = 1;
            }
            if (!n->schema) ops[k].unsupported = 1;
            snprintf(ops[k].why, sizeof ops[k].why, "%s", why);
            n_unsupported += ops[k].unsupported;
        }
        ops[k].count++;
    }
    printf("inputs:\n");
    for (int i = 0; i < g->n_inputs; i++)
        printf("  %s: %s\n", g->values[g->inputs[i]].name, kn_type_str(&g->values[g->inputs[i]].type, ty, sizeof ty));
    int n_init = 0;
    int64_t init_bytes = 0;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].constant) {
            n_init++;
            init_bytes += (int64_t)g->values[v].constant->nbytes;
        }
    printf("initializers: %d (%.2f MB)\n", n_init, (double)init_bytes / 1e6);
    printf("nodes: %d\noperators:\n", g->n_nodes);
    qsort(ops, (size_t)n_ops, sizeof *ops, cmp_count);
    for (int k = 0; k < n_ops; k++) printf("  %-32s %5d%s\n", ops[k].key, ops[k].count, ops[k].unsupported ? "  (unsupported)" : "");

    kiln_session_options *o = dims_opts;
    kiln_status st = kn_graph_resolve(g);
    if (st == KILN_OK) {
        for (int i = 0; i < g->n_inputs; i++) {
            kn_type *t = &g->values[g->inputs[i]].type;
            for (int d = 0; d < t->rank; d++)
                for (int k = 0; k < o->n_dims; k++)
                    if (t->dims[d].symbol && !strcmp(t->dims[d].symbol, o->dims[k].name)) t->dims[d].value = o->dims[k].value;
        }
        st = kn_graph_infer(g);
    }
    if (st != KILN_OK) printf("shape inference: %s\n", kiln_last_error());
    printf("values (node, operator, outputs):\n");
    print_values(g, 1);
    printf("outputs:\n");
    for (int i = 0; i < g->n_outputs; i++)
        printf("  %s: %s\n", g->values[g->outputs[i]].name, kn_type_str(&g->values[g->outputs[i]].type, ty, sizeof ty));
    if (n_unsupported) {
        printf("unsupported by every provider of this build:\n");
        for (int k = 0; k < n_ops; k++)
            if (ops[k].unsupported) printf("  %s: %s\n", ops[k].key, ops[k].why);
    } else {
        printf("every operator is supported by this build\n");
    }
    free(ops);
    kiln_session_options_destroy(dims_opts);
    kn_model_free(m);
    return st == KILN_OK ? 0 : 1;
}

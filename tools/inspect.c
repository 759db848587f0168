/* kiln inspect: what a model is made of and what kiln makes of it. */
#include "cli.h"

#include "backend/cpu/cpu.h"
#include "cache/format.h"
#include "cache/key.h"
#include "cache/summary.h"
#include "exec/exec.h"
#include "exec/session.h"
#include "onnx/loader.h"
#include "onnx/writer.h"
#include "ops/op.h"
#include "opt/opt.h"

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
        if (n->dead) continue;
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

/* The operator histogram of a graph; resolves schemas so unsupported operators are named. */
static op_count *histogram(kn_graph *g, int *n_ops_out, int *n_unsupported_out) {
    op_count *ops = calloc((size_t)(g->n_nodes + 1), sizeof *ops);
    int n_ops = 0, n_unsupported = 0;
    for (int i = 0; ops && i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        char key[160];
        snprintf(key, sizeof key, "%s%s%s", n->domain, *n->domain ? ":" : "", n->op_type);
        int k = 0;
        while (k < n_ops && strcmp(ops[k].key, key)) k++;
        if (k == n_ops) {
            snprintf(ops[k].key, sizeof ops[k].key, "%s", key);
            n_ops++;
            if (!n->schema) n->schema = kn_op_find(n->domain, n->op_type, n->opset, NULL);
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
    if (ops) qsort(ops, (size_t)n_ops, sizeof *ops, cmp_count);
    *n_ops_out = n_ops;
    *n_unsupported_out = n_unsupported;
    return ops;
}

static int live_nodes(const kn_graph *g) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead;
    return n;
}

typedef struct opt_log {
    int after[4]; /* live nodes after each level (-1: not run) */
    int last_level;
} opt_log;

static void on_pass(void *arg, const char *pass, int level, int before, int after, const char *detail) {
    opt_log *l = arg;
    if (level >= 0 && level < 4) l->after[level] = after;
    l->last_level = level;
    printf("  level %d  %-22s %5d -> %5d nodes  %s\n", level, pass, before, after, detail);
}

static void list_passes(void) {
    printf("optimisation passes (run level by level, each level to a fixed point):\n");
    int level;
    const char *desc, *name;
    for (int i = 0; (name = kn_opt_pass_info(i, &level, &desc)); i++) printf("  %d  %-22s %s\n", level, name, desc);
    printf("  (level 3 holds the backend-dependent rewrites: on the CPU alone none applies yet)\n");
}

static const char *section_kind(uint32_t kind) {
    return kind == KN_SECT_GRAPH ? "graph" : kind == KN_SECT_WEIGHTS ? "weights" : kind == KN_SECT_BACKEND ? "backend" : "?";
}

static const char *size_str(uint64_t bytes, char *buf, size_t cap) {
    if (bytes >= 1048576) snprintf(buf, cap, "%.2f MB", bytes / 1048576.0);
    else if (bytes >= 1024) snprintf(buf, cap, "%.1f KB", bytes / 1024.0);
    else snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
    return buf;
}

/* kiln inspect FILE.kiln: the compiled file's key, sections, memory plan and tuning records, and
 * whether it runs here; *out is the opened file (NULL, and 1 returned, when it is not usable). */
static int print_compiled(const char *path, const kiln_session_options *o, kn_cfile **out) {
    *out = NULL;
    kn_cfile *f = NULL;
    if (kn_cfile_open(path, &f) != KILN_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", kiln_last_error());
        printf("compiled file: %s\n", path);
        if (kn_cfile_open_header(path, &f) == KILN_OK) {
            printf("key (the header and key block are intact):\n");
            for (int i = 0; i < f->fields.n; i++) printf("  %s=%s\n", f->fields.f[i].name, f->fields.f[i].value);
            kn_cfile_close(f);
        }
        fprintf(stderr, "kiln inspect: %s\n", why);
        return 1;
    }
    char a[32], b[32];
    printf("compiled file: %s (%s, format %u)\nkey:\n", path, size_str(f->size, a, sizeof a), f->version);
    for (int i = 0; i < f->fields.n; i++) printf("  %s=%s\n", f->fields.f[i].name, f->fields.f[i].value);
    kn_cache_key env;
    memset(&env, 0, sizeof env);
    kiln_session_options *cpu = NULL; /* the environment of a cpu session when no --provider was given */
    if (!o->n_providers && kiln_session_options_create(&cpu) == KILN_OK) cli_add_providers(cpu, "cpu");
    if (kn_cache_key_env(cpu ? cpu : o, &env) == KILN_OK) {
        char why[512] = "";
        int diff = kn_cfile_compare_key(f, &env, true, why, sizeof why);
        printf("runs here: %s%s\n", diff ? "no, " : "yes (kiln version, build and device match)", diff ? why : "");
        kn_cache_key_free(&env);
    }
    kiln_session_options_destroy(cpu);
    printf("sections (every checksum verified):\n");
    for (int i = 0; i < f->n_sections; i++) {
        const kn_section *sc = &f->sections[i];
        printf("  %-16s %-8s %10s  checksum %016llx ok\n", sc->name, section_kind(sc->kind), size_str(sc->size, a, sizeof a),
               (unsigned long long)sc->checksum);
    }
    kn_cfile_summary sum;
    if (kn_cfile_summarise(f, &sum) != KILN_OK) {
        fprintf(stderr, "kiln inspect: %s\n", kiln_last_error());
        kn_cfile_close(f);
        return 1;
    }
    if (sum.has_plan) {
        printf("memory plan: %u values in a %s arena (%s one buffer each)\n", sum.plan_values,
               size_str(sum.plan_arena_bytes, a, sizeof a), size_str(sum.plan_unshared_bytes, b, sizeof b));
    } else {
        printf("memory plan: none (symbolic shapes are planned at run time)\n");
    }
    if (sum.n_tuning_sections) printf("tuning records: %d (kernel and algorithm choices made at compile time)\n", sum.n_tuning);
    else printf("tuning records: none (nothing tuned: a CPU compile, or tuning=heuristic)\n");
    *out = f;
    return 0;
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL, *dump = NULL;
    int opt_level = -1;
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    cli_dim dims[CLI_MAX_DIMS];
    int n_dims = 0;
    const char *level_text = NULL, *provider_text = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool takes_value = !strcmp(a, "--dim") || !strcmp(a, "--opt-level") || !strcmp(a, "--dump") ||
                           !strcmp(a, "--disable-pass") || !strcmp(a, "--provider");
        if (takes_value && i + 1 >= argc) {
            fprintf(stderr, "kiln inspect: %s needs a value\n", a);
            kiln_session_options_destroy(o);
            return 2;
        }
        bool ok = true;
        if (!strcmp(a, "--dim")) {
            ok = cli_parse_dim(argv[++i], dims, &n_dims, CLI_MAX_DIMS);
        } else if (!strcmp(a, "--opt-level")) {
            ok = cli_once(a, &level_text, argv[++i]) && cli_parse_int_as(a, level_text, 0, 3, &opt_level);
        } else if (!strcmp(a, "--dump")) {
            ok = cli_once(a, &dump, argv[++i]);
        } else if (!strcmp(a, "--disable-pass")) {
            kiln_session_options_disable_pass(o, argv[++i]);
        } else if (!strcmp(a, "--provider")) {
            ok = cli_once(a, &provider_text, argv[++i]) && !cli_add_providers(o, provider_text);
        } else if (!strcmp(a, "--list-passes")) {
            list_passes();
            kiln_session_options_destroy(o);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "kiln inspect: unknown option '%s' (kiln help inspect lists them)\n", a);
            ok = false;
        } else if (path) {
            fprintf(stderr, "kiln inspect: one file at a time ('%s' and '%s')\n", path, a);
            ok = false;
        } else {
            path = a;
        }
        if (!ok) {
            kiln_session_options_destroy(o);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "kiln inspect: no model given\n");
        cli_usage_of("inspect", stderr);
        kiln_session_options_destroy(o);
        return 2;
    }
    if (!cli_apply_dims(o, dims, n_dims)) {
        kiln_session_options_destroy(o);
        return 2;
    }
    kn_model *m;
    kn_cfile *cf = NULL;
    if (kn_cache_file_is_compiled(path)) {
        /* a compiled file: its own summary, then its (optimised) graph like a model's */
        if (print_compiled(path, o, &cf)) {
            kiln_session_options_destroy(o);
            return 1;
        }
        if (kn_cfile_model(cf, &m) != KILN_OK) {
            fprintf(stderr, "kiln inspect: %s\n", kiln_last_error());
            kn_cfile_close(cf);
            kiln_session_options_destroy(o);
            return 1;
        }
        kn_cfile_close(cf);
        if (opt_level >= 0) printf("(--opt-level: a compiled file's graph is already optimised; shown as it is)\n");
        opt_level = -1;
    } else {
        if (dump && opt_level < 0) opt_level = 3;
        if (kn_onnx_load_file(path, &m) != KILN_OK) {
            fprintf(stderr, "kiln inspect: %s\n", kiln_last_error());
            kiln_session_options_destroy(o);
            return 1;
        }
    }
    kn_graph *g = m->graph;
    char ty[512];
    printf("%s: %s\n", cf ? "graph" : "model", path);
    printf("producer: %s %s, IR version %lld\n", m->producer_name ? m->producer_name : "?",
           m->producer_version ? m->producer_version : "", (long long)m->ir_version);
    printf("opsets:");
    for (int i = 0; i < m->n_opsets; i++)
        printf(" %s=%lld", *m->opsets[i].domain ? m->opsets[i].domain : "ai.onnx", (long long)m->opsets[i].version);
    printf("\n");

    /* resolve each node on its own so every unsupported operator is listed, not just the first */
    int n_ops = 0, n_unsupported = 0;
    op_count *ops = histogram(g, &n_ops, &n_unsupported);
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
    for (int k = 0; k < n_ops; k++) printf("  %-32s %5d%s\n", ops[k].key, ops[k].count, ops[k].unsupported ? "  (unsupported)" : "");

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
    if (st == KILN_OK && opt_level >= 0) {
        opt_log log = {{-1, -1, -1, -1}, 0};
        log.after[0] = live_nodes(g);
        printf("optimisation to level %d (passes that changed something):\n", opt_level);
        kiln_session_options_set_opt_level(o, opt_level);
        /* with --provider, fusions are judged as on a machine where those providers run, like
         * the placement printed below (from the kernel tables) */
        if (opt_level > 0)
            st = o->n_providers ? kn_optimize_from_tables(m, o, on_pass, &log) : kn_optimize(m, o, on_pass, &log);
        if (st == KILN_OK) st = kn_graph_infer(g);
        if (st != KILN_OK) {
            printf("optimisation: %s\n", kiln_last_error());
        } else {
            printf("nodes per level:");
            int last = log.after[0];
            for (int l = 0; l <= opt_level; l++) {
                if (log.after[l] >= 0) last = log.after[l];
                printf("  %d: %d", l, last);
            }
            printf("\n");
            free(ops);
            ops = histogram(g, &n_ops, &n_unsupported);
            printf("operators after optimisation:\n");
            for (int k = 0; k < n_ops; k++)
                printf("  %-32s %5d%s\n", ops[k].key, ops[k].count, ops[k].unsupported ? "  (unsupported)" : "");
        }
    }
    if (st == KILN_OK && dump) {
        st = kn_onnx_write_file(m, dump);
        if (st == KILN_OK) printf("wrote %s\n", dump);
        else fprintf(stderr, "kiln inspect: %s\n", kiln_last_error());
    }
    if (st == KILN_OK && o->n_providers) cli_print_placement(m, o);
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
    kiln_session_options_destroy(o);
    kn_model_free(m);
    return st == KILN_OK ? 0 : 1;
}

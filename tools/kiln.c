/* kiln: the command-line tool. `kiln help` lists the subcommands. */
#include "cli.h"

#include "onnx/loader.h"
#include "util/npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: kiln COMMAND [ARGS]\n"
            "  run MODEL [--input NAME=FILE ...] [--dim NAME=VALUE ...] [--output-dir DIR] [--repeat N [--times]]\n"
            "            [--provider P[,P]] [--opt-level N] [--threads N]\n"
            "            run a model on given (.npy/.pb) or random inputs; print each output\n"
            "  inspect MODEL [--dim NAME=VALUE ...]\n"
            "            producer, opsets, inputs/outputs, operator histogram, every value's shape,\n"
            "            and operators no provider of this build supports\n"
            "  test [--provider P] [--opt-level N] [--expected-failures FILE] [--compare-levels] DIR...\n"
            "            run every ONNX backend-test folder under DIRs; ends with N passed, N failed, N skipped\n"
            "            (--compare-levels: levels 1..3 against level 0's outputs, every data set)\n"
            "  compile MODEL -o FILE [--provider P[,P]] [--opt-level N] [--dim NAME=VALUE ...] [--precision P]\n"
            "            compile ahead of time into a self-contained compiled file (`kiln run FILE` runs it)\n"
            "  cache list|verify|prune|key MODEL [--cache-dir DIR]\n"
            "            the compiled-model cache ($KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)\n"
            "  info      build options, providers compiled in, devices seen\n"
            "  --version\n"
            "common flags: --provider cpu|cuda[:KEY=VALUE...][,cpu]  (cuda:precision=fp16:device_id=0)\n"
            "              --opt-level 0..3 (default 3)  --threads N (0 = all cores)\n"
            "              --log error|warning|info|debug\n");
}

void cli_common_defaults(cli_common *c) {
    c->providers = "cpu";
    c->opt_level = 3;
    c->threads = 0;
    c->log_level = KILN_LOG_WARNING;
}

bool cli_parse_common(cli_common *c, int argc, char **argv, int *i, int *error) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (strcmp(a, "--provider") && strcmp(a, "--opt-level") && strcmp(a, "--threads") && strcmp(a, "--log"))
        return false;
    if (!v) {
        fprintf(stderr, "kiln: %s needs a value\n", a);
        *error = 1;
        return true;
    }
    (*i)++;
    if (!strcmp(a, "--provider")) c->providers = v;
    else if (!strcmp(a, "--opt-level")) c->opt_level = atoi(v);
    else if (!strcmp(a, "--threads")) c->threads = atoi(v);
    else {
        static const char *const names[] = {"error", "warning", "info", "debug"};
        int k = 0;
        while (k < 4 && strcmp(names[k], v)) k++;
        if (k == 4) {
            fprintf(stderr, "kiln: --log takes error|warning|info|debug, not '%s'\n", v);
            *error = 1;
        }
        c->log_level = k;
    }
    return true;
}

kiln_session_options *cli_make_options(const cli_common *c) {
    kiln_session_options *o = NULL;
    kiln_status st = kiln_session_options_create(&o);
    if (st == KILN_OK) st = kiln_session_options_set_opt_level(o, c->opt_level);
    if (st == KILN_OK) st = kiln_session_options_set_intra_op_threads(o, c->threads);
    if (st == KILN_OK) st = kiln_session_options_set_log_level(o, (kiln_log_level)c->log_level);
    if (st == KILN_OK && cli_add_providers(o, c->providers)) {
        kiln_session_options_destroy(o);
        return NULL;
    }
    if (st != KILN_OK) {
        fprintf(stderr, "kiln: %s\n", kiln_last_error());
        kiln_session_options_destroy(o);
        return NULL;
    }
    return o;
}

int cli_add_providers(kiln_session_options *o, const char *providers) {
    char list[512];
    if ((size_t)snprintf(list, sizeof list, "%s", providers) >= sizeof list) {
        fprintf(stderr, "kiln: --provider: the list is longer than %zu characters\n", sizeof list - 1);
        return 1;
    }
    /* each item: NAME or NAME:KEY=VALUE[:KEY=VALUE...] (cuda:precision=fp16:device_id=1) */
    for (char *save = NULL, *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        const char *keys[16], *vals[16];
        size_t n = 0;
        char *opt = strchr(p, ':');
        if (opt) *opt++ = 0;
        for (char *s2 = NULL, *kv = opt ? strtok_r(opt, ":", &s2) : NULL; kv; kv = strtok_r(NULL, ":", &s2)) {
            char *eq = strchr(kv, '=');
            if (!eq || eq == kv || n == 16) {
                fprintf(stderr, "kiln: --provider %s: '%s' is not KEY=VALUE\n", p, kv);
                return 1;
            }
            *eq = 0;
            keys[n] = kv;
            vals[n++] = eq + 1;
        }
        if (kiln_session_options_append_provider(o, p, n ? keys : NULL, n ? vals : NULL, n) != KILN_OK) {
            fprintf(stderr, "kiln: %s\n", kiln_last_error());
            return 1;
        }
    }
    return 0;
}

kiln_status cli_read_tensor(const char *path, kn_tensor **out) {
    size_t n = strlen(path);
    if (n > 4 && !strcmp(path + n - 4, ".npy")) return kn_npy_read(path, out);
    char *name = NULL;
    kiln_status st = kn_onnx_read_value_file(path, out, &name);
    free(name);
    return st;
}

static int cmd_info(void) {
    printf("kiln %s\n", kiln_version());
    printf("build: %s, %s, C11\n", KILN_BUILD_TYPE_STR, KILN_COMPILER_STR);
    printf("providers compiled in:");
    for (size_t i = 0; i < kiln_provider_count(); i++) printf(" %s", kiln_provider_name(i));
    printf("\n");
    static const char *const all[] = {"cpu", "cuda"};
    for (size_t p = 0; p < 2; p++) {
        const char *why = NULL;
        int ok = kiln_provider_available(all[p], &why);
        printf("provider %s: %s\n", all[p], ok ? "available" : why);
        for (size_t d = 0; d < kiln_device_count(all[p]); d++)
            printf("  device %zu: %s\n", d, kiln_device_description(all[p], d));
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("kiln %s\n", kiln_version());
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "info")) return cmd_info();
    if (!strcmp(cmd, "run")) return cmd_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 2, argv + 2);
    if (!strcmp(cmd, "test")) return cmd_test(argc - 2, argv + 2);
    if (!strcmp(cmd, "compile")) return cmd_compile(argc - 2, argv + 2);
    if (!strcmp(cmd, "cache")) return cmd_cache(argc - 2, argv + 2);
    fprintf(stderr, "kiln: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}

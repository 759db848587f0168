/* kiln: the command-line tool. `kiln help` lists the subcommands (their text: tools/help.c). */
#include "cli.h"

#include "onnx/loader.h"
#include "util/npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef KILN_HAVE_CUDA
#include "backend/backend.h"

/* The libraries the CUDA backend loads at first use, checked whether or not a driver and a GPU are
 * there (the provider line above says why CUDA cannot run; this one what else would be missing):
 * cuBLASLt is required, cuDNN optional (without it Conv and ConvTranspose run on another provider;
 * the loader's reason is the warning it logs). */
static void info_cuda_libraries(void) {
    char why[512] = "";
    int n = 0, dnn = 0;
    if (!kn_cuda_libs_report(why, sizeof why, &n, &dnn))
        printf("  libraries: cuBLASLt not usable: %s (the CUDA provider needs it)\n", why);
    else if (!dnn)
        printf("  libraries: cuBLASLt loaded; cuDNN not loaded (the warning says why): Conv and ConvTranspose run on another "
               "provider\n");
    else printf("  libraries: cuBLASLt and cuDNN loaded (%d functions)\n", n);
}
#endif

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
        bool compiled_in = false;
        for (size_t i = 0; i < kiln_provider_count(); i++) compiled_in |= !strcmp(kiln_provider_name(i), all[p]);
        if (!compiled_in && !strcmp(all[p], "cuda"))
            printf("  (the CUDA backend is built where the CUDA toolkit is found and a GPU is present, or with\n"
                   "   cmake -DKILN_CUDA=ON wherever the toolkit is)\n");
#ifdef KILN_HAVE_CUDA
        if (!strcmp(all[p], "cuda")) info_cuda_libraries();
#endif
    }
    return 0;
}

static bool is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

int main(int argc, char **argv) {
    if (argc < 2) {
        cli_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    /* `kiln COMMAND ... --help` anywhere prints the command's help (the same text as kiln help COMMAND) */
    for (int i = 2; i < argc; i++)
        if (is_help(argv[i]) && cli_help(!strcmp(cmd, "--version") ? "version" : cmd, stdout)) return 0;
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("kiln %s\n", kiln_version());
        return 0;
    }
    if (is_help(cmd)) {
        cli_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "help")) return cmd_help(argc - 2, argv + 2);
    static char prog[64];
    snprintf(prog, sizeof prog, "kiln %.40s", cmd);
    cli_prog = prog;
    if (!strcmp(cmd, "info")) {
        if (argc > 2) {
            fprintf(stderr, "kiln info: takes no arguments ('%s')\n", argv[2]);
            return 2;
        }
        return cmd_info();
    }
    if (!strcmp(cmd, "run")) return cmd_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 2, argv + 2);
    if (!strcmp(cmd, "test")) return cmd_test(argc - 2, argv + 2);
    if (!strcmp(cmd, "compile")) return cmd_compile(argc - 2, argv + 2);
    if (!strcmp(cmd, "cache")) return cmd_cache(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 2, argv + 2);
    cli_prog = "kiln";
    fprintf(stderr, "kiln: unknown command '%s'\n", cmd);
    cli_usage(stderr);
    return 2;
}

/* kiln run: one model, given or random inputs, a summary of each output. */
#include "cli.h"

#include "util/npy.h"
#include "util/clock.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_ITEMS 64

typedef struct named {
    char *name;
    char *value;
} named;

/* What kiln run asks for when a dim cannot be given with --dim: the input itself. */
static const char *run_unnamed_hint(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "give the input itself with --input %s=FILE (.npy or .pb)", name);
    return buf;
}

static void summarise(const char *name, const kn_tensor *t) {
    char desc[256];
    printf("%s: %s", name, kn_tensor_describe(t, desc, sizeof desc));
    if (t->kind != KN_VALUE_TENSOR || t->dtype == KILN_DTYPE_STRING) {
        printf("\n");
        return;
    }
    int64_t n = kn_tensor_count(t);
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = kn_tensor_get_f64(t, i);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        sum += v;
    }
    if (n) printf("  min %.6g  max %.6g  mean %.6g", lo, hi, sum / (double)n);
    printf("  first [");
    for (int64_t i = 0; i < n && i < 5; i++) printf("%s%.6g", i ? ", " : "", kn_tensor_get_f64(t, i));
    printf("%s]\n", n > 5 ? ", ..." : "");
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int cmd_run(int argc, char **argv) {
    cli_common common;
    cli_common_defaults(&common);
    const char *model = NULL, *out_dir = NULL;
    named inputs[MAX_ITEMS];
    cli_dim dims[CLI_MAX_DIMS];
    const char *repeat_text = NULL;
    int n_inputs = 0, n_dims = 0, repeat = 1, err = 0;
    int64_t timeout_ms = 0; /* --timeout-ms: each run stops with KILN_ERR_DEADLINE after this long */
    bool each_time = false; /* --times: every run's latency, in order (how a warm start settles) */
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (cli_parse_common(&common, argc, argv, &i, &err)) {
            if (err) return 2;
            continue;
        }
        bool takes_value = !strcmp(a, "--input") || !strcmp(a, "--dim") || !strcmp(a, "--output-dir") ||
                           !strcmp(a, "--repeat");
        if (takes_value && i + 1 >= argc) {
            fprintf(stderr, "kiln run: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--dim")) {
            if (!cli_parse_dim(argv[++i], dims, &n_dims, CLI_MAX_DIMS)) return 2;
        } else if (!strcmp(a, "--input")) {
            char *kv = argv[++i], *eq = strchr(kv, '=');
            if (!eq || eq == kv || !eq[1]) {
                fprintf(stderr, "kiln run: --input takes NAME=FILE (.npy or .pb), not '%s'\n", kv);
                return 2;
            }
            *eq = 0;
            for (int k = 0; k < n_inputs; k++)
                if (!strcmp(inputs[k].name, kv)) {
                    fprintf(stderr, "kiln run: --input %s given twice ('%s' and '%s')\n", kv, inputs[k].value, eq + 1);
                    return 2;
                }
            if (n_inputs >= MAX_ITEMS) {
                fprintf(stderr, "kiln run: more than %d --input options\n", MAX_ITEMS);
                return 2;
            }
            inputs[n_inputs].name = kv;
            inputs[n_inputs++].value = eq + 1;
        } else if (!strcmp(a, "--output-dir")) {
            if (!cli_once(a, &out_dir, argv[++i])) return 2;
        } else if (!strcmp(a, "--repeat")) {
            if (!cli_once(a, &repeat_text, argv[++i]) || !cli_parse_int_as(a, repeat_text, 1, 100000000, &repeat))
                return 2;
        } else if (!strcmp(a, "--timeout-ms")) {
            char *end = NULL;
            if (i + 1 < argc) timeout_ms = strtoll(argv[++i], &end, 10);
            if (!end || end == argv[i] || *end || timeout_ms < 0) {
                fprintf(stderr, "kiln run: --timeout-ms takes a number of milliseconds (0 = no limit)\n");
                return 2;
            }
        } else if (!strcmp(a, "--times")) {
            each_time = true;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "kiln run: unknown option '%s' (kiln help run lists them)\n", a);
            return 2;
        } else if (!model) {
            model = a;
        } else {
            fprintf(stderr, "kiln run: one model at a time ('%s' and '%s')\n", model, a);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "kiln run: no model given\n");
        cli_usage_of("run", stderr);
        return 2;
    }
    kiln_session_options *opts = cli_make_options(&common);
    if (!opts) return 1;
    if (!cli_apply_dims(opts, dims, n_dims)) {
        kiln_session_options_destroy(opts);
        return 2;
    }
    kiln_session *s = NULL;
    double t0 = kn_now_ms();
    kiln_status st = kiln_session_create(model, opts, &s);
    double t_create = kn_now_ms() - t0;
    kiln_session_options_destroy(opts);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln run: %s\n", kiln_last_error());
        return 1;
    }
    size_t ni = kiln_session_input_count(s), no = kiln_session_output_count(s);
    const char **in_names = calloc(ni + 1, sizeof *in_names);
    kn_tensor **in_tensors = calloc(ni + 1, sizeof *in_tensors);
    kn_tensor **outs = calloc(no + 1, sizeof *outs);
    int rc = 1;
    size_t bound = 0;
    for (int k = 0; k < n_inputs; k++) {
        size_t j = 0;
        kiln_value_info info;
        for (; j < ni; j++) {
            kiln_session_input_info(s, j, &info);
            if (!strcmp(info.name, inputs[k].name)) break;
        }
        if (j == ni) {
            fprintf(stderr, "kiln run: the model has no input '%s'\n", inputs[k].name);
            goto done;
        }
    }
    for (size_t j = 0; j < ni; j++) {
        kiln_value_info info;
        kiln_session_input_info(s, j, &info);
        kn_tensor *t = NULL;
        const char *file = NULL;
        for (int k = 0; k < n_inputs; k++)
            if (!strcmp(inputs[k].name, info.name)) file = inputs[k].value;
        char hint[320];
        st = file ? cli_read_tensor(file, &t)
                  : cli_random_input(&info, dims, n_dims, run_unnamed_hint(info.name, hint, sizeof hint), -1, &t);
        if (st != KILN_OK) {
            fprintf(stderr, "kiln run: input '%s': %s\n", info.name, kiln_last_error());
            goto done;
        }
        in_names[bound] = info.name;
        in_tensors[bound++] = t;
    }
    kiln_run_options *run_opts = NULL;
    if (timeout_ms > 0 && (kiln_run_options_create(&run_opts) != KILN_OK ||
                           kiln_run_options_set_timeout_ms(run_opts, timeout_ms) != KILN_OK)) {
        fprintf(stderr, "kiln run: %s\n", kiln_last_error());
        kiln_run_options_destroy(run_opts);
        goto done;
    }
    double *times = calloc((size_t)repeat, sizeof *times);
    for (int r = 0; r < repeat; r++) {
        for (size_t j = 0; j < no; j++) {
            kn_tensor_free(outs[j]);
            outs[j] = NULL;
        }
        double t1 = kn_now_ms();
        st = kiln_session_run_with(s, run_opts, in_names, in_tensors, bound, NULL, no, outs);
        times[r] = kn_now_ms() - t1;
        if (st != KILN_OK) {
            fprintf(stderr, "kiln run: %s\n", kiln_last_error());
            free(times);
            kiln_run_options_destroy(run_opts);
            goto done;
        }
    }
    kiln_run_options_destroy(run_opts);
    for (size_t j = 0; j < no; j++) {
        kiln_value_info info;
        kiln_session_output_info(s, j, &info);
        summarise(info.name, outs[j]);
        if (out_dir) {
            char path[4096];
            mkdir(out_dir, 0777);
            snprintf(path, sizeof path, "%s/%s.npy", out_dir, info.name);
            for (char *c = path + strlen(out_dir) + 1; *c; c++)
                if (*c == '/' || *c == ':') *c = '_';
            if (kn_npy_write(path, outs[j]) != KILN_OK) {
                fprintf(stderr, "kiln run: %s\n", kiln_last_error());
                free(times);
                goto done;
            }
        }
    }
    if (each_time) {
        printf("run times ms:");
        for (int r = 0; r < repeat; r++) printf(" %.3f", times[r]);
        printf("\n");
    }
    qsort(times, (size_t)repeat, sizeof *times, cmp_double);
    printf("session created in %.1f ms; run %.3f ms", t_create, times[repeat / 2]);
    if (repeat > 1) printf(" (median of %d, min %.3f ms)", repeat, times[0]);
    printf("\n");
    fflush(stdout); /* the outputs reach a pipe now, not after the session's teardown */
    free(times);
    rc = 0;
done:
    for (size_t j = 0; j < bound; j++) kn_tensor_free(in_tensors[j]);
    for (size_t j = 0; j < no; j++) kn_tensor_free(outs[j]);
    free(in_names);
    free(in_tensors);
    free(outs);
    kiln_session_destroy(s);
    return rc;
}

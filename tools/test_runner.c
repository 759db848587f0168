/* kiln test: runs folders in the ONNX backend-test layout (model.onnx + test_data_set_N/
 * input_I.pb, output_I.pb) and compares outputs with the expected ones.
 *
 * Each test runs in a child process so that a crash or a hang in one test is reported as that
 * test's failure and the run goes on. */
#include "cli.h"

#include "exec/session.h"
#include "onnx/loader.h"
#include "util/file.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TEST_TIMEOUT_S 300

typedef struct test_list {
    char **items;
    int n, cap;
} test_list;

static void list_add(test_list *l, const char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->items = realloc(l->items, sizeof(char *) * (size_t)l->cap);
    }
    l->items[l->n++] = strdup(s);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}
static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Every folder under root (root included) that holds a model.onnx. */
static void find_tests(const char *root, test_list *out, int depth) {
    char p[4096];
    snprintf(p, sizeof p, "%s/model.onnx", root);
    if (is_file(p)) {
        list_add(out, root);
        return;
    }
    if (depth > 6) return;
    DIR *d = opendir(root);
    if (!d) return;
    test_list sub = {0};
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", root, e->d_name);
            if (is_dir(p)) list_add(&sub, p);
        }
    closedir(d);
    qsort(sub.items, (size_t)sub.n, sizeof(char *), cmp_str);
    for (int i = 0; i < sub.n; i++) {
        find_tests(sub.items[i], out, depth + 1);
        free(sub.items[i]);
    }
    free(sub.items);
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Tolerance for a test folder: the entry of its name in a zoo.json beside it, if any. */
static void zoo_tolerance(const char *dir, double *rtol, double *atol) {
    char parent[4096], path[4200];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash) *slash = 0;
    else snprintf(parent, sizeof parent, ".");
    snprintf(path, sizeof path, "%s/zoo.json", parent);
    unsigned char *data;
    size_t size;
    if (kn_file_read_all(path, &data, &size) != KILN_OK) return;
    char key[512];
    snprintf(key, sizeof key, "\"%s\"", base_name(dir));
    char *p = strstr((char *)data, key);
    if (p && (p = strchr(p, '{'))) {
        /* the entry's object ends at its matching brace (entries hold no nested objects) */
        char *end = strchr(p, '}');
        char *r = strstr(p, "\"rtol\""), *a = strstr(p, "\"atol\"");
        if (r && (!end || r < end)) *rtol = strtod(strchr(r, ':') + 1, NULL);
        if (a && (!end || a < end)) *atol = strtod(strchr(a, ':') + 1, NULL);
    }
    free(data);
}

/* Compares one output; on mismatch writes the reason. */
static int compare(const kn_tensor *got, const kn_tensor *want, double rtol, double atol, char *why, size_t cap) {
    char g[256], w[256];
    if (got->kind != want->kind) {
        snprintf(why, cap, "kind differs: got %s, want %s", kn_tensor_describe(got, g, sizeof g),
                 kn_tensor_describe(want, w, sizeof w));
        return 0;
    }
    if (got->kind != KN_VALUE_TENSOR) {
        if (got->n_items != want->n_items) {
            snprintf(why, cap, "%s has %d items, want %d", got->kind == KN_VALUE_SEQUENCE ? "sequence" : "optional",
                     got->n_items, want->n_items);
            return 0;
        }
        for (int i = 0; i < got->n_items; i++)
            if (!compare(got->items[i], want->items[i], rtol, atol, why, cap)) return 0;
        return 1;
    }
    if (got->dtype != want->dtype || got->rank != want->rank ||
        (got->rank && memcmp(got->dims, want->dims, sizeof(int64_t) * (size_t)got->rank))) {
        snprintf(why, cap, "got %s, want %s", kn_tensor_describe(got, g, sizeof g), kn_tensor_describe(want, w, sizeof w));
        return 0;
    }
    int64_t n = kn_tensor_count(got);
    if (got->dtype == KILN_DTYPE_STRING) {
        char *const *a = got->data, *const *b = want->data;
        for (int64_t i = 0; i < n; i++)
            if (strcmp(a[i] ? a[i] : "", b[i] ? b[i] : "")) {
                snprintf(why, cap, "string %lld: got \"%.40s\", want \"%.40s\"", (long long)i, a[i], b[i]);
                return 0;
            }
        return 1;
    }
    if (kn_dtype_is_packed(got->dtype)) {
        /* sub-byte types: element codes (the unused bits of the last byte are not compared) */
        for (int64_t i = 0; i < n; i++) {
            unsigned a = kn_packed_get(got->data, got->dtype, i), b = kn_packed_get(want->data, want->dtype, i);
            if (a != b) {
                snprintf(why, cap, "element %lld: got %g (code 0x%x), want %g (code 0x%x)", (long long)i,
                         kn_tensor_get_f64(got, i), a, kn_tensor_get_f64(want, i), b);
                return 0;
            }
        }
        return 1;
    }
    if (!kn_dtype_is_float(got->dtype) && kiln_dtype_size(got->dtype) && kn_dtype_is_int(got->dtype) == 0 &&
        got->dtype != KILN_DTYPE_BOOL) {
        /* float8 and other byte-coded types: exact bytes */
        if (memcmp(got->data, want->data, got->nbytes)) {
            snprintf(why, cap, "bytes differ");
            return 0;
        }
        return 1;
    }
    /* A reduced-precision output may differ from the reference by rounding once more or less
     * (a graph of several nodes rounds after each): allow one unit in its last place. */
    if (got->dtype == KILN_DTYPE_BFLOAT16 && rtol < 1.0 / 128) rtol = 1.0 / 128;
    if (got->dtype == KILN_DTYPE_FLOAT16 && rtol < 1.0 / 1024) rtol = 1.0 / 1024;
    double worst = 0;
    int64_t worst_i = -1, bad = 0;
    int exact = !kn_dtype_is_float(got->dtype);
    for (int64_t i = 0; i < n; i++) {
        if (exact) {
            int64_t a = kn_tensor_get_i64(got, i), b = kn_tensor_get_i64(want, i);
            if (got->dtype == KILN_DTYPE_UINT64 ? ((uint64_t *)got->data)[i] != ((uint64_t *)want->data)[i] : a != b) {
                if (!bad) worst_i = i;
                bad++;
            }
            continue;
        }
        double a = kn_tensor_get_f64(got, i), b = kn_tensor_get_f64(want, i);
        if (isnan(b)) {
            if (!isnan(a)) {
                if (!bad) worst_i = i;
                bad++;
            }
            continue;
        }
        if (isinf(b)) {
            if (a != b) {
                if (!bad) worst_i = i;
                bad++;
            }
            continue;
        }
        double err = fabs(a - b);
        if (!(err <= atol + rtol * fabs(b))) {
            bad++;
            if (!(err <= worst) || worst_i < 0) {
                worst = isnan(err) ? INFINITY : err;
                worst_i = i;
            }
        }
    }
    if (bad) {
        snprintf(why, cap, "%lld of %lld elements differ; %s at index %lld: got %.9g, want %.9g (rtol %g, atol %g)",
                 (long long)bad, (long long)n, exact ? "first" : "max error", (long long)worst_i,
                 kn_tensor_get_f64(got, worst_i), kn_tensor_get_f64(want, worst_i), rtol, atol);
        return 0;
    }
    return 1;
}

/* Reads a test-data .pb as the kind the model declares for that input/output: a one-element
 * SequenceProto and an OptionalProto holding a tensor are the same bytes on the wire. */
static kiln_status read_as_declared(const kiln_session *s, int is_output, size_t i, const char *path, kn_tensor **out) {
    const kn_graph *g = s->model->graph;
    int v = is_output ? g->outputs[i] : g->inputs[i];
    int kind = -1;
    switch (g->values[v].type.kind) {
    case KN_TYPE_TENSOR: kind = KN_VALUE_TENSOR; break;
    case KN_TYPE_SEQUENCE: kind = KN_VALUE_SEQUENCE; break;
    case KN_TYPE_OPTIONAL: kind = KN_VALUE_OPTIONAL; break;
    default: break;
    }
    char *name = NULL;
    kiln_status st = kn_onnx_read_value_file_as(path, kind, out, &name);
    free(name);
    /* older ONNX test data (onnx 1.12, Debian's libonnx-testdata) stores bfloat16 tensors with
     * data_type UINT16: the bits are bfloat16's */
    if (st == KILN_OK && (*out)->kind == KN_VALUE_TENSOR && (*out)->dtype == KILN_DTYPE_UINT16 &&
        g->values[v].type.dtype == KILN_DTYPE_BFLOAT16)
        (*out)->dtype = KILN_DTYPE_BFLOAT16;
    return st;
}

/* Runs one test folder in this process; returns 0 pass, 1 fail (reason in why), 2 skip. */
static int run_one(const char *dir, const cli_common *common, char *why, size_t cap) {
    char path[4096];
    double rtol = 1e-3, atol = 1e-5;
    zoo_tolerance(dir, &rtol, &atol);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    kiln_session_options *opts = cli_make_options(common);
    if (!opts) {
        snprintf(why, cap, "bad options");
        return 1;
    }
    /* thousands of small test models would fill the user's compiled cache: compile each afresh */
    kiln_session_options_set_cache(opts, 0, NULL);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create(path, opts, &s);
    kiln_session_options_destroy(opts);
    if (st != KILN_OK) {
        snprintf(why, cap, "%s", kiln_last_error());
        return 1;
    }
    int result = 0, n_sets = 0;
    size_t ni = kiln_session_input_count(s), no = kiln_session_output_count(s);
    for (int set = 0; result == 0; set++) {
        char sdir[4200];
        snprintf(sdir, sizeof sdir, "%s/test_data_set_%d", dir, set);
        if (!is_dir(sdir)) break;
        n_sets++;
        kn_tensor **in = calloc(ni + 1, sizeof *in), **want = calloc(no + 1, sizeof *want),
                  **got = calloc(no + 1, sizeof *got);
        const char **names = calloc(ni + 1, sizeof *names);
        size_t n_in = 0, n_want = 0;
        for (size_t i = 0; i < ni; i++) {
            snprintf(path, sizeof path, "%s/input_%zu.pb", sdir, i);
            if (!is_file(path)) break;
            kiln_value_info info;
            kiln_session_input_info(s, i, &info);
            if (read_as_declared(s, 0, i, path, &in[i]) != KILN_OK) {
                snprintf(why, cap, "reading %s: %s", path, kiln_last_error());
                result = 1;
                break;
            }
            names[i] = info.name;
            n_in++;
        }
        for (size_t i = 0; result == 0 && i < no; i++) {
            snprintf(path, sizeof path, "%s/output_%zu.pb", sdir, i);
            if (!is_file(path)) break;
            if (read_as_declared(s, 1, i, path, &want[i]) != KILN_OK) {
                snprintf(why, cap, "reading %s: %s", path, kiln_last_error());
                result = 1;
            }
            n_want++;
        }
        if (result == 0) {
            st = kiln_session_run(s, names, in, n_in, NULL, no, got);
            if (st != KILN_OK) {
                snprintf(why, cap, "data set %d: %s", set, kiln_last_error());
                result = 1;
            }
        }
        for (size_t i = 0; result == 0 && i < n_want; i++) {
            kiln_value_info info;
            kiln_session_output_info(s, i, &info);
            char reason[768];
            if (!compare(got[i], want[i], rtol, atol, reason, sizeof reason)) {
                snprintf(why, cap, "data set %d, output '%s': %s", set, info.name, reason);
                result = 1;
            }
        }
        for (size_t i = 0; i < ni; i++) kn_tensor_free(in[i]);
        for (size_t i = 0; i < no; i++) {
            kn_tensor_free(want[i]);
            kn_tensor_free(got[i]);
        }
        free(in);
        free(want);
        free(got);
        free(names);
    }
    kiln_session_destroy(s);
    if (result == 0 && n_sets == 0) {
        snprintf(why, cap, "no test_data_set_0");
        return 2;
    }
    return result;
}

/* Runs a test in a child; the child writes its verdict and reason into a pipe. */
static int run_isolated(const char *dir, const cli_common *common, char *why, size_t cap) {
    int fd[2];
    if (pipe(fd) != 0) return run_one(dir, common, why, cap);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return run_one(dir, common, why, cap);
    }
    if (pid == 0) {
        close(fd[0]);
        alarm(TEST_TIMEOUT_S);
        char reason[2048] = "";
        int r = run_one(dir, common, reason, sizeof reason);
        char buf[2100];
        int len = snprintf(buf, sizeof buf, "%d%s", r, reason);
        ssize_t w = write(fd[1], buf, (size_t)(len < (int)sizeof buf ? len : (int)sizeof buf - 1));
        (void)w;
        close(fd[1]);
        _exit(0);
    }
    close(fd[1]);
    char buf[2100];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof buf - 1 && (r = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)r;
    buf[got] = 0;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        snprintf(why, cap, "%s (signal %d)", sig == SIGALRM ? "timed out" : "crashed", sig);
        return 1;
    }
    if (got == 0) {
        snprintf(why, cap, "the test process exited without a verdict (status %d)", WEXITSTATUS(status));
        return 1;
    }
    snprintf(why, cap, "%s", buf + 1);
    return buf[0] - '0';
}

/* Reads an expected-failures list: "name  # reason" per line. A reason that starts with
 * "nondeterministic" marks a test whose outcome is random (unseeded random operators): it goes to
 * `random` and is skipped, since it may pass or fail on any run. */
static void load_expected(const char *path, test_list *out, test_list *random) {
    unsigned char *data;
    size_t size;
    if (kn_file_read_all(path, &data, &size) != KILN_OK) {
        fprintf(stderr, "kiln test: %s\n", kiln_last_error());
        exit(2);
    }
    for (char *save = NULL, *line = strtok_r((char *)data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        while (*line == ' ' || *line == '\t') line++;
        if (!*line || *line == '#') continue;
        char *reason = strchr(line, '#');
        bool nondeterministic = false;
        if (reason) {
            reason++;
            while (*reason == ' ') reason++;
            nondeterministic = !strncmp(reason, "nondeterministic", 16);
        }
        line[strcspn(line, " \t#")] = 0;
        list_add(nondeterministic ? random : out, line);
    }
    free(data);
}

static int listed(const test_list *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->items[i], name)) return 1;
    return 0;
}

int cmd_test(int argc, char **argv) {
    cli_common common;
    cli_common_defaults(&common);
    common.threads = 1; /* tests are small; one thread keeps a parallel CI machine fair */
    test_list dirs = {0}, tests = {0}, expected = {0}, random_tests = {0};
    int err = 0, isolate = 1, verbose = 0;
    for (int i = 0; i < argc; i++) {
        if (cli_parse_common(&common, argc, argv, &i, &err)) {
            if (err) return 2;
            continue;
        }
        if (!strcmp(argv[i], "--expected-failures") && i + 1 < argc) load_expected(argv[++i], &expected, &random_tests);
        else if (!strcmp(argv[i], "--no-isolate")) isolate = 0;
        else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) verbose = 1;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "kiln test: unknown option '%s'\n", argv[i]);
            return 2;
        } else list_add(&dirs, argv[i]);
    }
    if (!dirs.n) {
        fprintf(stderr, "usage: kiln test [--provider P] [--opt-level N] [--expected-failures FILE] DIR...\n");
        return 2;
    }
    for (int i = 0; i < dirs.n; i++) {
        char d[4096];
        snprintf(d, sizeof d, "%s", dirs.items[i]);
        size_t len = strlen(d);
        while (len > 1 && d[len - 1] == '/') d[--len] = 0;
        if (!is_dir(d)) {
            fprintf(stderr, "kiln test: %s is not a folder\n", d);
            return 2;
        }
        find_tests(d, &tests, 0);
    }
    int passed = 0, failed = 0, skipped = 0, xfail = 0;
    for (int i = 0; i < tests.n; i++) {
        char why[2048] = "";
        const char *name = base_name(tests.items[i]);
        if (listed(&random_tests, name)) {
            printf("SKIP %s: nondeterministic (listed in the expected-failures file)\n", name);
            skipped++;
            continue;
        }
        int r = isolate ? run_isolated(tests.items[i], &common, why, sizeof why)
                        : run_one(tests.items[i], &common, why, sizeof why);
        int is_listed = listed(&expected, name);
        if (r == 0 && is_listed) {
            printf("FAIL %s: passes but is in the expected-failures list: remove it from the list\n", name);
            failed++;
        } else if (r == 0) {
            if (verbose) printf("ok   %s\n", name);
            passed++;
        } else if (r == 2) {
            printf("SKIP %s: %s\n", name, why);
            skipped++;
        } else if (is_listed) {
            if (verbose) printf("XFAIL %s: %s\n", name, why);
            xfail++;
        } else {
            printf("FAIL %s: %s\n", name, why);
            failed++;
        }
        fflush(stdout);
    }
    if (xfail) printf("(%d expected failures counted as skipped)\n", xfail);
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped + xfail);
    for (int i = 0; i < dirs.n; i++) free(dirs.items[i]);
    for (int i = 0; i < tests.n; i++) free(tests.items[i]);
    for (int i = 0; i < expected.n; i++) free(expected.items[i]);
    free(dirs.items);
    free(tests.items);
    free(expected.items);
    for (int i = 0; i < random_tests.n; i++) free(random_tests.items[i]);
    free(random_tests.items);
    return failed ? 1 : 0;
}

/* kiln test: runs folders in the ONNX backend-test layout (model.onnx + test_data_set_N/
 * input_I.pb, output_I.pb) and compares outputs with the expected ones.
 *
 * With --compare-levels it checks the optimisation levels instead (scripts/equivalence.sh): each
 * folder's model runs at level 0 and at levels 1, 2 and 3 on the same inputs in one process, and
 * every level must give level 0's outputs (within the folder's tolerance) and match the reference
 * wherever level 0 does.
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
    if (sub.n > 1) qsort(sub.items, (size_t)sub.n, sizeof(char *), cmp_str); /* (NULL items when empty: UB) */
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

/* The session of a test folder's model at an optimisation level; NULL with the reason in why. */
static kiln_session *open_session(const char *dir, const cli_common *common, int level, char *why, size_t cap) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    cli_common c = *common;
    c.opt_level = level;
    kiln_session_options *opts = cli_make_options(&c);
    if (!opts) {
        snprintf(why, cap, "bad options");
        return NULL;
    }
    /* thousands of small test models would fill the user's compiled cache: compile each afresh */
    kiln_session_options_set_cache(opts, 0, NULL);
    kiln_session *s = NULL;
    if (kiln_session_create(path, opts, &s) != KILN_OK) snprintf(why, cap, "%s", kiln_last_error());
    kiln_session_options_destroy(opts);
    return s;
}

/* One test_data_set_N folder, read as the model declares its inputs and outputs. */
typedef struct data_set {
    size_t ni, no;          /* the session's input and output counts: the arrays' lengths */
    kn_tensor **in, **want; /* the inputs given (n_in) and the reference outputs given (n_want) */
    const char **names;     /* input names, borrowed from the session */
    size_t n_in, n_want;
} data_set;

static void data_set_free(data_set *d) {
    for (size_t i = 0; d->in && i < d->ni; i++) kn_tensor_free(d->in[i]);
    for (size_t i = 0; d->want && i < d->no; i++) kn_tensor_free(d->want[i]);
    free(d->in);
    free(d->want);
    free(d->names);
    memset(d, 0, sizeof *d);
}

/* Reads dir/test_data_set_<set>: 0 read, 1 unreadable (reason in why), 2 no such folder. On 1
 * and 2, d holds nothing to free. */
static int data_set_read(const kiln_session *s, const char *dir, int set, data_set *d, char *why, size_t cap) {
    char sdir[4200], path[4300];
    memset(d, 0, sizeof *d);
    snprintf(sdir, sizeof sdir, "%s/test_data_set_%d", dir, set);
    if (!is_dir(sdir)) return 2;
    d->ni = kiln_session_input_count(s);
    d->no = kiln_session_output_count(s);
    d->in = calloc(d->ni + 1, sizeof *d->in);
    d->want = calloc(d->no + 1, sizeof *d->want);
    d->names = calloc(d->ni + 1, sizeof *d->names);
    for (size_t i = 0; i < d->ni; i++) {
        snprintf(path, sizeof path, "%s/input_%zu.pb", sdir, i);
        if (!is_file(path)) break;
        kiln_value_info info;
        kiln_session_input_info(s, i, &info);
        if (read_as_declared(s, 0, i, path, &d->in[i]) != KILN_OK) goto unreadable;
        d->names[i] = info.name;
        d->n_in = i + 1;
    }
    for (size_t i = 0; i < d->no; i++) {
        snprintf(path, sizeof path, "%s/output_%zu.pb", sdir, i);
        if (!is_file(path)) break;
        if (read_as_declared(s, 1, i, path, &d->want[i]) != KILN_OK) goto unreadable;
        d->n_want = i + 1;
    }
    return 0;
unreadable:
    snprintf(why, cap, "reading %s: %s", path, kiln_last_error());
    data_set_free(d);
    return 1;
}

/* Runs s on a data set's inputs; got has a slot for each output. */
static kiln_status data_set_run(kiln_session *s, const data_set *d, kn_tensor **got) {
    return kiln_session_run(s, d->names, d->in, d->n_in, NULL, kiln_session_output_count(s), got);
}

static void outputs_free(kn_tensor **got, size_t n) {
    for (size_t i = 0; i < n; i++) {
        kn_tensor_free(got[i]);
        got[i] = NULL;
    }
}

/* Compares s's outputs 0..n-1; on the first mismatch writes "output 'NAME': reason" to why. */
static bool outputs_match(const kiln_session *s, kn_tensor *const *got, kn_tensor *const *want, size_t n, double rtol,
                          double atol, char *why, size_t cap) {
    for (size_t i = 0; i < n; i++) {
        char reason[768];
        if (compare(got[i], want[i], rtol, atol, reason, sizeof reason)) continue;
        kiln_value_info info;
        kiln_session_output_info(s, i, &info);
        snprintf(why, cap, "output '%s': %s", info.name, reason);
        return false;
    }
    return true;
}

/* --repeat: runs of each data set in one session, every one compared (a later run takes the paths a
 * first one does not: the shape memo, prepared kernel parameters, recorded CUDA graphs). A child
 * process of an isolated test inherits it. */
static int test_repeat = 1;

/* Runs one test folder in this process; returns 0 pass, 1 fail (reason in why), 2 skip. */
static int run_one(const char *dir, const cli_common *common, char *why, size_t cap) {
    double rtol = 1e-3, atol = 1e-5;
    zoo_tolerance(dir, &rtol, &atol);
    kiln_session *s = open_session(dir, common, common->opt_level, why, cap);
    if (!s) return 1;
    size_t no = kiln_session_output_count(s);
    kn_tensor **got = calloc(no + 1, sizeof *got);
    int result = 0, set = 0;
    for (; result == 0; set++) {
        data_set d;
        int r = data_set_read(s, dir, set, &d, why, cap);
        if (r == 2) break;
        if (r == 1) {
            result = 1;
            break;
        }
        for (int run = 1; run <= test_repeat && result == 0; run++) {
            char reason[1024], which[48] = "";
            if (test_repeat > 1) snprintf(which, sizeof which, " (run %d of %d)", run, test_repeat);
            if (data_set_run(s, &d, got) != KILN_OK) {
                snprintf(why, cap, "data set %d%s: %s", set, which, kiln_last_error());
                result = 1;
            } else if (!outputs_match(s, got, d.want, d.n_want, rtol, atol, reason, sizeof reason)) {
                snprintf(why, cap, "data set %d%s, %s", set, which, reason);
                result = 1;
            }
            outputs_free(got, no);
        }
        data_set_free(&d);
    }
    free(got);
    kiln_session_destroy(s);
    if (result == 0 && set == 0) {
        snprintf(why, cap, "no test_data_set_0");
        return 2;
    }
    return result;
}

/* ---- --compare-levels: every optimisation level against level 0 ---- */

#define N_LEVELS 4 /* optimisation levels 0..3 */

typedef struct tally {
    int passed, failed, skipped;
} tally;

/* Whether g or a subgraph of it draws random numbers without a seed: such a model's outputs
 * differ between any two runs, so two levels cannot be compared. */
static bool draws_unseeded_random(const kn_graph *g) {
    static const char *const random_ops[] = {"Bernoulli",        "Multinomial",   "RandomNormal",
                                             "RandomNormalLike", "RandomUniform", "RandomUniformLike"};
    for (int n = 0; n < g->n_nodes; n++) {
        const kn_node *node = &g->nodes[n];
        if (node->dead) continue;
        for (size_t k = 0; k < sizeof random_ops / sizeof *random_ops; k++)
            if (!strcmp(node->op_type, random_ops[k]) && !kn_node_attr(node, "seed")) return true;
        for (int a = 0; a < node->n_attrs; a++) {
            const kn_attr *at = &node->attrs[a];
            if (at->type == KN_ATTR_GRAPH && at->g && draws_unseeded_random(at->g)) return true;
            for (int k = 0; at->type == KN_ATTR_GRAPHS && k < at->n; k++)
                if (draws_unseeded_random(at->graphs[k])) return true;
        }
    }
    return false;
}

/* Counts one (data set, level) comparison; a failure is always printed, a pass when verbose. */
static void count_level(FILE *out, tally *t, int verbose, const char *label, int level, bool ok, const char *why) {
    if (ok) {
        t->passed++;
        if (verbose) fprintf(out, "ok   %s level %d\n", label, level);
    } else {
        t->failed++;
        fprintf(out, "FAIL %s level %d: %s\n", label, level, why);
    }
}

/* Whether a level's outputs got equal level 0's (base) and, where level 0 matches the reference
 * (base_ok), match the reference too; the reason in why when not. */
static bool level_matches(const kiln_session *s, kn_tensor *const *got, kn_tensor *const *base, const data_set *d,
                          bool base_ok, double rtol, double atol, char *why, size_t cap) {
    char reason[1024];
    if (!outputs_match(s, got, base, d->no, rtol, atol, reason, sizeof reason)) {
        snprintf(why, cap, "%s (want: level 0's output)", reason);
        return false;
    }
    if (base_ok && !outputs_match(s, got, d->want, d->n_want, rtol, atol, reason, sizeof reason)) {
        snprintf(why, cap, "%s (want: the reference output, which level 0 matches)", reason);
        return false;
    }
    return true;
}

/* One data set at every level: level 0 against the reference, as plain kiln test checks it, and
 * each level whose session was made against level 0 (and the reference where level 0 matches it).
 * Returns false when level 0 does not run: the folder is skipped from there on. */
static bool compare_data_set(const char *label, kiln_session *const *s, const data_set *d, double rtol, double atol,
                             int verbose, FILE *out, tally *t) {
    kn_tensor **base = calloc(d->no + 1, sizeof *base), **got = calloc(d->no + 1, sizeof *got);
    char why[2048];
    bool ran = data_set_run(s[0], d, base) == KILN_OK;
    if (!ran) {
        fprintf(out, "SKIP %s: level 0 does not run: %s\n", label, kiln_last_error());
        t->skipped++;
    } else {
        bool base_ok = outputs_match(s[0], base, d->want, d->n_want, rtol, atol, why, sizeof why);
        count_level(out, t, verbose, label, 0, base_ok, why);
        for (int level = 1; level < N_LEVELS; level++) {
            if (!s[level]) continue; /* counted once when its session failed */
            bool ok;
            if (data_set_run(s[level], d, got) != KILN_OK) {
                snprintf(why, sizeof why, "level 0 runs but this level fails: %s", kiln_last_error());
                ok = false;
            } else ok = level_matches(s[level], got, base, d, base_ok, rtol, atol, why, sizeof why);
            count_level(out, t, verbose, label, level, ok, why);
            outputs_free(got, d->no);
        }
    }
    outputs_free(base, d->no);
    free(base);
    free(got);
    return ran;
}

/* One folder at levels 0..3 on the same inputs; writes its FAIL and SKIP lines (ok lines when
 * verbose) to out and adds its counts to t. A folder level 0 cannot load or run, or whose
 * outputs are random, is skipped once. */
static void compare_levels(const char *dir, const cli_common *common, int verbose, FILE *out, tally *t) {
    const char *name = base_name(dir);
    char why[2048];
    double rtol = 1e-3, atol = 1e-5;
    zoo_tolerance(dir, &rtol, &atol);
    kiln_session *s[N_LEVELS] = {0};
    s[0] = open_session(dir, common, 0, why, sizeof why);
    if (!s[0]) {
        fprintf(out, "SKIP %s: level 0 does not load: %s\n", name, why);
        t->skipped++;
        return;
    }
    if (draws_unseeded_random(s[0]->model->graph)) {
        fprintf(out, "SKIP %s: unseeded random operator: its outputs differ between any two runs\n", name);
        t->skipped++;
        kiln_session_destroy(s[0]);
        return;
    }
    for (int level = 1; level < N_LEVELS; level++) {
        s[level] = open_session(dir, common, level, why, sizeof why);
        if (!s[level]) {
            fprintf(out, "FAIL %s level %d: level 0 loads but this level does not: %s\n", name, level, why);
            t->failed++;
        }
    }
    for (int set = 0;; set++) {
        char label[4200];
        snprintf(label, sizeof label, "%s/test_data_set_%d", name, set);
        data_set d;
        int r = data_set_read(s[0], dir, set, &d, why, sizeof why);
        if (r == 2 && set == 0) {
            fprintf(out, "SKIP %s: no test_data_set_0\n", name);
            t->skipped++;
        } else if (r == 1) {
            fprintf(out, "SKIP %s: %s\n", label, why);
            t->skipped++;
        }
        if (r != 0) break;
        bool ran = compare_data_set(label, s, &d, rtol, atol, verbose, out, t);
        data_set_free(&d);
        if (!ran) break;
    }
    for (int level = 0; level < N_LEVELS; level++) kiln_session_destroy(s[level]);
}

/* ---- isolation: each folder in a child process ---- */

typedef struct folder_job {
    const char *dir;
    const cli_common *common;
    int verbose;
} folder_job;

/* Runs fn(job, out) in a child process under a time limit, so that a crash or a hang is reported
 * instead of ending the run; what fn writes to out comes back in *text (malloc'd). Returns 0 when
 * the child finished, 1 with the reason in why when it crashed, timed out or wrote nothing. */
static int run_in_child(void (*fn)(const folder_job *, FILE *), const folder_job *job, unsigned timeout_s,
                        char **text, char *why, size_t cap) {
    *text = NULL;
    fflush(stdout);
    fflush(stderr);
    int fd[2];
    pid_t pid = -1;
    if (pipe(fd) == 0 && (pid = fork()) < 0) {
        close(fd[0]);
        close(fd[1]);
    }
    if (pid < 0) { /* no child to be had: run it here */
        size_t len;
        FILE *out = open_memstream(text, &len);
        if (!out) {
            snprintf(why, cap, "out of memory");
            return 1;
        }
        fn(job, out);
        fclose(out);
        return 0;
    }
    if (pid == 0) {
        close(fd[0]);
        alarm(timeout_s);
        FILE *out = fdopen(fd[1], "w");
        if (out) {
            fn(job, out);
            fclose(out);
        }
        _exit(0);
    }
    close(fd[1]);
    size_t len = 0, size = 4096;
    char *buf = malloc(size);
    ssize_t r;
    while (buf && (r = read(fd[0], buf + len, size - 1 - len)) > 0) {
        len += (size_t)r;
        if (len < size - 1) continue;
        char *bigger = realloc(buf, size * 2);
        if (!bigger) break; /* out of memory: keep what came so far */
        buf = bigger;
        size *= 2;
    }
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (buf) buf[len] = 0;
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        snprintf(why, cap, "%s (signal %d)", sig == SIGALRM ? "timed out" : "crashed", sig);
    } else if (!buf || len == 0) {
        snprintf(why, cap, "the test process exited without a verdict (status %d)", WEXITSTATUS(status));
    } else {
        *text = buf;
        return 0;
    }
    free(buf);
    return 1;
}

/* The child's side of run_isolated: the verdict digit, then the reason. */
static void run_one_to(const folder_job *job, FILE *out) {
    char why[2048] = "";
    int r = run_one(job->dir, job->common, why, sizeof why);
    fprintf(out, "%d%s", r, why);
}

/* Runs a test in a child; returns as run_one. */
static int run_isolated(const char *dir, const cli_common *common, char *why, size_t cap) {
    folder_job job = {dir, common, 0};
    char *text;
    if (run_in_child(run_one_to, &job, TEST_TIMEOUT_S, &text, why, cap)) return 1;
    snprintf(why, cap, "%s", text + 1);
    int r = text[0] - '0';
    free(text);
    return r;
}

/* The child's side of compare_levels_isolated: the lines, then "= passed failed skipped". */
static void compare_levels_to(const folder_job *job, FILE *out) {
    tally t = {0};
    compare_levels(job->dir, job->common, job->verbose, out, &t);
    fprintf(out, "= %d %d %d\n", t.passed, t.failed, t.skipped);
}

/* compare_levels in a child (four sessions, so four times a test's time limit): prints its lines
 * and adds its counts to t; a crash or a hang counts once as failed. */
static void compare_levels_isolated(const char *dir, const cli_common *common, int verbose, tally *t) {
    folder_job job = {dir, common, verbose};
    char *text, why[2048];
    if (run_in_child(compare_levels_to, &job, N_LEVELS * TEST_TIMEOUT_S, &text, why, sizeof why)) {
        printf("FAIL %s: %s\n", base_name(dir), why);
        t->failed++;
        return;
    }
    size_t len = strlen(text);
    while (len && text[len - 1] == '\n') text[--len] = 0;
    char *last = strrchr(text, '\n');
    last = last ? last + 1 : text;
    tally c;
    if (sscanf(last, "= %d %d %d", &c.passed, &c.failed, &c.skipped) == 3) {
        *last = 0; /* the lines before the counts */
        fputs(text, stdout);
        t->passed += c.passed;
        t->failed += c.failed;
        t->skipped += c.skipped;
    } else {
        printf("FAIL %s: the test process exited without its counts\n", base_name(dir));
        t->failed++;
    }
    free(text);
}

/* Reads an expected-failures list: "name  # reason" per line. A reason that starts with
 * "nondeterministic" marks a test whose outcome is random (unseeded random operators): it goes to
 * `random` and is skipped, since it may pass or fail on any run. One that starts with "level 0"
 * marks a test that fails only unoptimised (a float16 graph that the CPU runs in float32 from level
 * 1 on, against a reference that rounds every step): it goes to `level0`. */
static void load_expected(const char *path, test_list *out, test_list *random, test_list *level0) {
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
        bool nondeterministic = false, at_level0 = false;
        if (reason) {
            reason++;
            while (*reason == ' ') reason++;
            nondeterministic = !strncmp(reason, "nondeterministic", 16);
            at_level0 = !strncmp(reason, "level 0", 7);
        }
        line[strcspn(line, " \t#")] = 0;
        list_add(nondeterministic ? random : at_level0 ? level0 : out, line);
    }
    free(data);
}

static int listed(const test_list *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->items[i], name)) return 1;
    return 0;
}

/* One folder of a plain run: its verdict against the reference, printed and counted (a listed
 * test's failure goes to xfail). */
static void test_folder(const char *dir, const cli_common *common, int isolate, int verbose, int is_listed, tally *t,
                        int *xfail) {
    char why[2048] = "";
    const char *name = base_name(dir);
    int r = isolate ? run_isolated(dir, common, why, sizeof why) : run_one(dir, common, why, sizeof why);
    if (r == 0 && is_listed) {
        printf("FAIL %s: passes but is in the expected-failures list: remove it from the list\n", name);
        t->failed++;
    } else if (r == 0) {
        if (verbose) printf("ok   %s\n", name);
        t->passed++;
    } else if (r == 2) {
        printf("SKIP %s: %s\n", name, why);
        t->skipped++;
    } else if (is_listed) {
        if (verbose) printf("XFAIL %s: %s\n", name, why);
        (*xfail)++;
    } else {
        printf("FAIL %s: %s\n", name, why);
        t->failed++;
    }
}

/* One folder of a --compare-levels run. A listed test is skipped: what fails against the
 * reference at level 0 has nothing to prove at the other levels. */
static void compare_folder(const char *dir, const cli_common *common, int isolate, int verbose, int is_listed,
                           tally *t) {
    if (is_listed) {
        printf("SKIP %s: in the expected-failures list\n", base_name(dir));
        t->skipped++;
    } else if (isolate) compare_levels_isolated(dir, common, verbose, t);
    else compare_levels(dir, common, verbose, stdout, t);
}

int cmd_test(int argc, char **argv) {
    cli_common common;
    cli_common_defaults(&common);
    common.threads = 1; /* tests are small; one thread keeps a parallel CI machine fair */
    test_list dirs = {0}, tests = {0}, expected = {0}, random_tests = {0}, level0 = {0};
    int err = 0, isolate = 1, verbose = 0, compare = 0;
    for (int i = 0; i < argc; i++) {
        if (cli_parse_common(&common, argc, argv, &i, &err)) {
            if (err) return 2;
            continue;
        }
        if (!strcmp(argv[i], "--expected-failures") && i + 1 < argc) load_expected(argv[++i], &expected, &random_tests, &level0);
        else if (!strcmp(argv[i], "--no-isolate")) isolate = 0;
        else if (!strcmp(argv[i], "--compare-levels")) compare = 1;
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
            if (!cli_parse_int_as("--repeat", argv[++i], 1, 1000, &test_repeat)) return 2;
        } else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) verbose = 1;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "kiln test: unknown option '%s'\n", argv[i]);
            return 2;
        } else list_add(&dirs, argv[i]);
    }
    if (!dirs.n) {
        fprintf(stderr, "usage: kiln test [--provider P] [--opt-level N | --compare-levels] [--expected-failures FILE]\n"
                        "                 [--repeat N] [--no-isolate] [-v] DIR...\n"
                        "  --compare-levels  run each test at levels 0..3; each level must equal level 0\n");
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
    tally t = {0};
    int xfail = 0;
    for (int i = 0; i < tests.n; i++) {
        const char *name = base_name(tests.items[i]);
        /* a level-0 failure: listed where level 0 runs (alone, or first of the compared levels) */
        int is_listed = listed(&expected, name) || ((compare || common.opt_level == 0) && listed(&level0, name));
        if (listed(&random_tests, name)) {
            printf("SKIP %s: nondeterministic (listed in the expected-failures file)\n", name);
            t.skipped++;
        } else if (compare) compare_folder(tests.items[i], &common, isolate, verbose, is_listed, &t);
        else test_folder(tests.items[i], &common, isolate, verbose, is_listed, &t, &xfail);
        fflush(stdout);
    }
    if (xfail) printf("(%d expected failures counted as skipped)\n", xfail);
    printf("%d passed, %d failed, %d skipped\n", t.passed, t.failed, t.skipped + xfail);
    for (int i = 0; i < dirs.n; i++) free(dirs.items[i]);
    for (int i = 0; i < tests.n; i++) free(tests.items[i]);
    for (int i = 0; i < expected.n; i++) free(expected.items[i]);
    for (int i = 0; i < level0.n; i++) free(level0.items[i]);
    free(level0.items);
    free(dirs.items);
    free(tests.items);
    free(expected.items);
    for (int i = 0; i < random_tests.n; i++) free(random_tests.items[i]);
    free(random_tests.items);
    return t.failed ? 1 : 0;
}

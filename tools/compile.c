/* kiln compile: ahead-of-time compilation into a compiled file; kiln cache: the cache directory. */
#include "cli.h"

#include "cache/cache.h"
#include "cache/format.h"
#include "cache/store.h"
#include "exec/session.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Options shared by compile and cache key: the common flags, --dim, and provider options that
 * change compilation (--precision: of the cuda provider, else the cpu's; --tuning: of the cuda provider). */
typedef struct job_flags {
    cli_common common;
    cli_dim dims[CLI_MAX_DIMS];
    int n_dims;
    const char *precision, *tuning;
} job_flags;

/* 1 when argv[*i] was a job flag, 0 when not, -1 on an error (printed). */
static int parse_job_flag(job_flags *j, const char *cmd, int argc, char **argv, int *i) {
    int err = 0;
    if (cli_parse_common(&j->common, argc, argv, i, &err)) return err ? -1 : 1;
    const char *a = argv[*i];
    if (strcmp(a, "--dim") && strcmp(a, "--precision") && strcmp(a, "--tuning")) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "kiln %s: %s needs a value\n", cmd, a);
        return -1;
    }
    const char *v = argv[++*i];
    if (!strcmp(a, "--dim")) {
        if (!cli_parse_dim(v, j->dims, &j->n_dims, CLI_MAX_DIMS)) return -1;
    } else if (!strcmp(a, "--precision")) {
        if (!cli_once(a, &j->precision, v)) return -1;
    } else {
        if (!cli_once(a, &j->tuning, v)) return -1;
    }
    return 1;
}

static kiln_session_options *job_options(const job_flags *j, const char *cmd) {
    kiln_session_options *o = NULL;
    kiln_status st = kiln_session_options_create(&o);
    if (st == KILN_OK) st = kiln_session_options_set_opt_level(o, j->common.opt_level);
    if (st == KILN_OK) st = kiln_session_options_set_intra_op_threads(o, j->common.threads);
    if (st == KILN_OK) st = kiln_session_options_set_log_level(o, (kiln_log_level)j->common.log_level);
    /* the --provider list (items NAME[:KEY=VALUE...]), with --precision and --tuning added to cuda's;
     * without cuda, --precision goes to the cpu's (fp32 or bf16) */
    char list[512], items[256];
    size_t used = 0;
    bool cuda_named = false;
    list[0] = 0;
    snprintf(items, sizeof items, "%s", j->common.providers);
    for (char *save = NULL, *p = strtok_r(items, ",", &save); p; p = strtok_r(NULL, ",", &save))
        cuda_named |= strcspn(p, ":") == 4 && !strncmp(p, "cuda", 4);
    snprintf(items, sizeof items, "%s", j->common.providers);
    for (char *save = NULL, *p = strtok_r(items, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        size_t name_len = strcspn(p, ":");
        used += (size_t)snprintf(list + used, used < sizeof list ? sizeof list - used : 0, "%s%s", used ? "," : "", p);
        if (!cuda_named && name_len == 3 && !strncmp(p, "cpu", 3) && j->precision)
            used += (size_t)snprintf(list + used, used < sizeof list ? sizeof list - used : 0, ":precision=%s", j->precision);
        if (name_len != 4 || strncmp(p, "cuda", 4)) continue;
        if (j->precision)
            used += (size_t)snprintf(list + used, used < sizeof list ? sizeof list - used : 0, ":precision=%s", j->precision);
        if (j->tuning)
            used += (size_t)snprintf(list + used, used < sizeof list ? sizeof list - used : 0, ":tuning=%s", j->tuning);
    }
    if (st == KILN_OK && used >= sizeof list)
        st = kn_error(KILN_ERR_INVALID_ARGUMENT, "the provider list is too long");
    if (st == KILN_OK && j->tuning && !cuda_named)
        st = kn_error(KILN_ERR_INVALID_ARGUMENT, "--tuning is an option of the cuda provider: add --provider cuda");
    if (st == KILN_OK && cli_add_providers(o, list)) {
        kiln_session_options_destroy(o);
        return NULL;
    }
    if (st == KILN_OK && !cli_apply_dims(o, j->dims, j->n_dims)) {
        kiln_session_options_destroy(o);
        return NULL;
    }
    if (st != KILN_OK) {
        fprintf(stderr, "kiln %s: %s\n", cmd, kiln_last_error());
        kiln_session_options_destroy(o);
        return NULL;
    }
    return o;
}

/* ------------------------------------------------------------------ kiln compile */

typedef struct progress {
    bool tty;
    int stage;
    double t0, t_stage;
    char last[96];
} progress;

static void on_stage(void *arg, const char *stage) {
    progress *p = arg;
    double t = kn_now_ms();
    if (p->tty && p->stage > 0) fprintf(stderr, "\r\033[K[%d/4] %s: done in %.0f ms\n", p->stage, p->last, t - p->t_stage);
    p->stage++;
    p->t_stage = t;
    snprintf(p->last, sizeof p->last, "%s", stage);
    if (p->tty) {
        fprintf(stderr, "[%d/4] %s ...", p->stage, stage);
        fflush(stderr);
    }
}

int cmd_compile(int argc, char **argv) {
    job_flags j;
    memset(&j, 0, sizeof j);
    cli_common_defaults(&j.common);
    const char *model = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        int r = parse_job_flag(&j, "compile", argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i];
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "kiln compile: %s needs a value\n", a);
                return 2;
            }
            if (!cli_once("-o", &out, argv[++i])) return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "kiln compile: unknown option '%s' (kiln help compile lists them)\n", a);
            return 2;
        } else if (!model) {
            model = a;
        } else {
            fprintf(stderr, "kiln compile: one model at a time ('%s' and '%s')\n", model, a);
            return 2;
        }
    }
    if (!model || !out || !*out) {
        fprintf(stderr, "kiln compile: %s\n", !model ? "no model given" : "no output file given (-o FILE)");
        cli_usage_of("compile", stderr);
        return 2;
    }
    kiln_session_options *o = job_options(&j, "compile");
    if (!o) return 1;
    progress p = {isatty(2), 0, kn_now_ms(), kn_now_ms(), ""};
    kn_compile_stats stats;
    kiln_status st = kn_cache_compile_to(model, o, out, on_stage, &p, &stats);
    kiln_session_options_destroy(o);
    if (p.tty && p.stage > 0) {
        if (st == KILN_OK) fprintf(stderr, "\r\033[K[%d/4] %s: done in %.0f ms\n", p.stage, p.last, kn_now_ms() - p.t_stage);
        else fprintf(stderr, "\r\033[K[%d/4] %s: failed\n", p.stage, p.last);
    }
    if (st != KILN_OK) {
        fprintf(stderr, "kiln compile: %s\n", kiln_last_error());
        kn_cache_key_free(&stats.key);
        return 1;
    }
    printf("compiled '%s' -> '%s' (%.2f MB): hash %.1f ms, load %.1f ms, compile %.1f ms, write %.1f ms\n", model, out,
           stats.bytes / 1048576.0, stats.hash_ms, stats.load_ms, stats.compile_ms, stats.write_ms);
    printf("key %s\n", stats.key.name);
    kn_cache_key_free(&stats.key);
    return 0;
}

/* ------------------------------------------------------------------ kiln cache */

static void cache_usage(FILE *f) { cli_usage_of("cache", f); }

static const char *ago(struct timespec t, char *buf, size_t cap) {
    double s = difftime(time(NULL), t.tv_sec);
    if (s < 120) snprintf(buf, cap, "%.0f s ago", s);
    else if (s < 7200) snprintf(buf, cap, "%.0f min ago", s / 60);
    else if (s < 172800) snprintf(buf, cap, "%.0f h ago", s / 3600);
    else snprintf(buf, cap, "%.0f days ago", s / 86400);
    return buf;
}

static int cache_list(const char *dir, const kiln_session_options *o) {
    kn_cache_entry *e;
    int n;
    if (kn_cache_list(dir, &e, &n) != KILN_OK) {
        fprintf(stderr, "kiln cache list: %s\n", kiln_last_error());
        return 1;
    }
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += e[i].size;
    printf("%s: %d entries, %.1f MB (limit %.1f MB)\n", dir, n, total / 1048576.0, kn_cache_limit(o) / 1048576.0);
    /* most recently used first */
    for (int i = n - 1; i >= 0; i--) {
        char when[64];
        printf("%s  %8.2f MB  used %s\n", e[i].name, e[i].size / 1048576.0, ago(e[i].atime, when, sizeof when));
        kn_cfile *f;
        if (kn_cfile_open_header(e[i].path, &f) != KILN_OK) {
            printf("    unreadable: %s\n", kiln_last_error());
            continue;
        }
        const char *src = kn_cache_key_get(&f->fields, "info.source");
        const char *opts = kn_cache_key_get(&f->fields, "options");
        const char *shapes = kn_cache_key_get(&f->fields, "shapes");
        const char *ver = kn_cache_key_get(&f->fields, "kiln");
        printf("    from %s\n    %s%s%s, kiln %s\n", src ? src : "?", opts ? opts : "?", shapes && *shapes ? " shapes=" : "",
               shapes && *shapes ? shapes : "", ver ? ver : "?");
        kn_cfile_close(f);
    }
    kn_cache_list_free(e, n);
    return 0;
}

static int cache_verify(const char *dir, bool del) {
    kn_cache_entry *e;
    int n;
    if (kn_cache_list(dir, &e, &n) != KILN_OK) {
        fprintf(stderr, "kiln cache verify: %s\n", kiln_last_error());
        return 1;
    }
    int ok = 0, stale = 0, bad = 0;
    for (int i = 0; i < n; i++) {
        if (kn_cache_verify_file(e[i].path) != KILN_OK) {
            printf("BAD   %s: %s%s\n", e[i].name, kiln_last_error(), del ? " (deleted)" : "");
            if (del) unlink(e[i].path);
            bad++;
            continue;
        }
        /* valid, but made for another kiln or device: never used here, pruned in time */
        kn_cfile *f;
        kn_cache_key env;
        char why[768] = "";
        if (kn_cfile_open_header(e[i].path, &f) == KILN_OK) {
            if (kn_cache_key_env(NULL, &env) == KILN_OK) {
                kn_cfile_compare_key(f, &env, true, why, sizeof why);
                kn_cache_key_free(&env);
            }
            kn_cfile_close(f);
        }
        if (why[0]) {
            printf("other %s: for another environment: %s\n", e[i].name, why);
            stale++;
        } else {
            printf("ok    %s\n", e[i].name);
            ok++;
        }
    }
    printf("%d ok, %d for another environment (kiln version or device; pruned when unused), %d bad\n", ok, stale, bad);
    kn_cache_list_free(e, n);
    return bad ? 1 : 0;
}

static int cache_key(const char *dir, int argc, char **argv) {
    job_flags j;
    memset(&j, 0, sizeof j);
    cli_common_defaults(&j.common);
    const char *model = NULL;
    for (int i = 0; i < argc; i++) {
        int r = parse_job_flag(&j, "cache key", argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (argv[i][0] == '-' || model) {
            cache_usage(stderr);
            return 2;
        }
        model = argv[i];
    }
    if (!model) {
        cache_usage(stderr);
        return 2;
    }
    kiln_session_options *o = job_options(&j, "cache key");
    if (!o) return 1;
    kn_cache_key k;
    kiln_status st = kn_cache_key_for_file(model, o, &k);
    kiln_session_options_destroy(o);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln cache key: %s\n", kiln_last_error());
        return 1;
    }
    printf("%s\n", k.name);
    for (int i = 0; i < k.n; i++) printf("  %s=%s\n", k.f[i].name, k.f[i].value);
    char *entry = kn_cache_entry_path(dir, &k);
    if (entry) printf("entry %s (%s)\n", entry, access(entry, F_OK) == 0 ? "present" : "absent");
    free(entry);
    kn_cache_key_free(&k);
    return 0;
}

int cmd_cache(int argc, char **argv) {
    const char *dir_flag = NULL;
    int i = 0;
    while (i < argc && !strcmp(argv[i], "--cache-dir") && i + 1 < argc) {
        dir_flag = argv[i + 1];
        i += 2;
    }
    if (i >= argc) {
        cache_usage(stderr);
        return 2;
    }
    const char *sub = argv[i++];
    kiln_session_options *o = NULL;
    if (kiln_session_options_create(&o) != KILN_OK) return 1;
    kiln_session_options_set_cache(o, 1, dir_flag);
    char *dir = kn_cache_dir(o);
    int rc = 2;
    if (!dir) {
        fprintf(stderr, "kiln cache: no cache directory: set KILN_CACHE_DIR or HOME, or give --cache-dir\n");
        rc = 1;
    } else if (!strcmp(sub, "list") && i < argc) {
        fprintf(stderr, "kiln cache list: takes no arguments ('%s')\n", argv[i]);
    } else if (!strcmp(sub, "list")) {
        rc = cache_list(dir, o);
    } else if (!strcmp(sub, "verify") && i < argc && (strcmp(argv[i], "--delete") || i + 1 < argc)) {
        fprintf(stderr, "kiln cache verify: takes only --delete, not '%s'\n", argv[i + !strcmp(argv[i], "--delete")]);
    } else if (!strcmp(sub, "verify")) {
        bool del = i < argc && !strcmp(argv[i], "--delete");
        rc = cache_verify(dir, del);
    } else if (!strcmp(sub, "prune")) {
        uint64_t limit = kn_cache_limit(o);
        rc = 0;
        for (; i < argc; i++) {
            if (!strcmp(argv[i], "--all")) {
                limit = 0;
            } else if (!strcmp(argv[i], "--max-size") && i + 1 < argc) {
                const char *v = argv[++i];
                limit = kn_cache_parse_size(v);
                if (!limit && strcmp(v, "0")) {
                    fprintf(stderr, "kiln cache prune: --max-size '%s' is not a size (e.g. 500M, 2G)\n", v);
                    rc = 2;
                }
            } else {
                cache_usage(stderr);
                rc = 2;
            }
        }
        if (rc == 0) {
            int n = 0;
            uint64_t freed = 0;
            if (kn_cache_prune(dir, limit, NULL, &n, &freed) != KILN_OK) {
                fprintf(stderr, "kiln cache prune: %s\n", kiln_last_error());
                rc = 1;
            } else {
                printf("%s: deleted %d entries (%.1f MB) to stay under %.1f MB\n", dir, n, freed / 1048576.0,
                       limit / 1048576.0);
            }
        }
    } else if (!strcmp(sub, "key")) {
        cli_prog = "kiln cache key";
        rc = cache_key(dir, argc - i, argv + i);
    } else {
        fprintf(stderr, "kiln cache: unknown subcommand '%s'\n", sub);
        cache_usage(stderr);
    }
    free(dir);
    kiln_session_options_destroy(o);
    return rc;
}

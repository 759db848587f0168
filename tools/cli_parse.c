/* Strict parsing of the kiln command's numeric options: the whole text must be a number in range.
 * Every subcommand (and kiln bench) uses these, so `--threads two`, `--repeat 3x` and
 * `--dim batch=-3` are errors that name the option and the text instead of silently becoming 0. */
#include "cli.h"

#include "onnx/loader.h"
#include "util/npy.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *cli_prog = "kiln";

static void bad(const char *option, const char *text, const char *why) {
    fprintf(stderr, "%s: %s: '%s' %s\n", cli_prog, option, text, why);
}

bool cli_parse_int(const char *option, const char *text, long min, long max, long *out) {
    char why[128];
    if (!text || !*text) {
        fprintf(stderr, "%s: %s needs a value (an integer, %ld..%ld)\n", cli_prog, option, min, max);
        return false;
    }
    /* strtol skips leading blanks and accepts "0x" only with base 0: both are refused here */
    if (isspace((unsigned char)text[0])) {
        snprintf(why, sizeof why, "is not an integer (%ld..%ld)", min, max);
        bad(option, text, why);
        return false;
    }
    errno = 0;
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (end == text || *end) {
        snprintf(why, sizeof why, "is not an integer (%ld..%ld)", min, max);
        bad(option, text, why);
        return false;
    }
    if (errno == ERANGE || v < min || v > max) {
        snprintf(why, sizeof why, "is out of range (%ld..%ld)", min, max);
        bad(option, text, why);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_int_as(const char *option, const char *text, long min, long max, int *out) {
    long v;
    if (!cli_parse_int(option, text, min, max, &v)) return false;
    *out = (int)v;
    return true;
}

bool cli_parse_double(const char *option, const char *text, double min, double max, double *out) {
    char why[128];
    errno = 0;
    char *end = NULL;
    double v = text && *text && !isspace((unsigned char)text[0]) ? strtod(text, &end) : NAN;
    if (!text || !*text) {
        fprintf(stderr, "%s: %s needs a value (a number, %g..%g)\n", cli_prog, option, min, max);
        return false;
    }
    if (!end || end == text || *end || isnan(v) || isinf(v)) {
        snprintf(why, sizeof why, "is not a number (%g..%g)", min, max);
        bad(option, text, why);
        return false;
    }
    if (errno == ERANGE || v < min || v > max) {
        snprintf(why, sizeof why, "is out of range (%g..%g)", min, max);
        bad(option, text, why);
        return false;
    }
    *out = v;
    return true;
}

bool cli_once(const char *option, const char **slot, const char *value) {
    if (*slot) {
        fprintf(stderr, "%s: %s given twice ('%s' and '%s')\n", cli_prog, option, *slot, value);
        return false;
    }
    *slot = value;
    return true;
}

bool cli_parse_dim(const char *text, cli_dim *dims, int *n, int cap) {
    const char *eq = strchr(text, '=');
    if (!eq || eq == text) {
        fprintf(stderr, "%s: --dim takes NAME=VALUE (a symbolic dimension and its size), not '%s'\n", cli_prog, text);
        return false;
    }
    size_t len = (size_t)(eq - text);
    if (len >= sizeof dims[0].name) {
        fprintf(stderr, "%s: --dim: the name '%.40s...' is longer than %zu characters\n", cli_prog, text,
                sizeof dims[0].name - 1);
        return false;
    }
    for (int k = 0; k < *n; k++)
        if (strlen(dims[k].name) == len && !strncmp(dims[k].name, text, len)) {
            fprintf(stderr, "%s: --dim %s given twice ('%ld' and '%s')\n", cli_prog, dims[k].name, dims[k].value,
                    eq + 1);
            return false;
        }
    if (*n >= cap) {
        fprintf(stderr, "%s: more than %d --dim options\n", cli_prog, cap);
        return false;
    }
    char option[300];
    snprintf(option, sizeof option, "--dim %.*s", (int)len, text);
    long v;
    if (!cli_parse_int(option, eq + 1, 0, 2147483647L, &v)) return false;
    memcpy(dims[*n].name, text, len);
    dims[*n].name[len] = 0;
    dims[*n].value = v;
    (*n)++;
    return true;
}

bool cli_apply_dims(kiln_session_options *o, const cli_dim *dims, int n) {
    for (int k = 0; k < n; k++)
        if (kiln_session_options_set_dim(o, dims[k].name, dims[k].value) != KILN_OK) {
            fprintf(stderr, "%s: --dim %s: %s\n", cli_prog, dims[k].name, kiln_last_error());
            return false;
        }
    return true;
}

/* ------------------------------------------------------------------ the common flags */

void cli_common_defaults(cli_common *c) {
    c->providers = "cpu";
    c->opt_level = 3;
    c->threads = 0;
    c->log_level = KILN_LOG_WARNING;
    c->given = 0;
}

bool cli_parse_common(cli_common *c, int argc, char **argv, int *i, int *error) {
    static const char *const flags[] = {"--provider", "--opt-level", "--threads", "--log"};
    const char *a = argv[*i];
    int which = 0;
    while (which < 4 && strcmp(a, flags[which])) which++;
    if (which == 4) return false;
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!v) {
        fprintf(stderr, "%s: %s needs a value\n", cli_prog, a);
        *error = 1;
        return true;
    }
    (*i)++;
    if (c->given & (1u << which)) {
        fprintf(stderr, "%s: %s given twice (the second is '%s')\n", cli_prog, a, v);
        *error = 1;
        return true;
    }
    c->given |= 1u << which;
    if (which == 0) {
        if (!*v) {
            fprintf(stderr, "%s: --provider needs a provider name (cpu, cuda)\n", cli_prog);
            *error = 1;
        }
        c->providers = v;
    } else if (which == 1) {
        if (!cli_parse_int_as(a, v, 0, 3, &c->opt_level)) *error = 1;
    } else if (which == 2) {
        if (!cli_parse_int_as(a, v, 0, 4096, &c->threads)) *error = 1;
    } else {
        static const char *const names[] = {"error", "warning", "info", "debug"};
        int k = 0;
        while (k < 4 && strcmp(names[k], v)) k++;
        if (k == 4) {
            fprintf(stderr, "%s: --log takes error|warning|info|debug, not '%s'\n", cli_prog, v);
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
        fprintf(stderr, "%s: %s\n", cli_prog, kiln_last_error());
        kiln_session_options_destroy(o);
        return NULL;
    }
    return o;
}

int cli_add_providers(kiln_session_options *o, const char *providers) {
    char list[512];
    if ((size_t)snprintf(list, sizeof list, "%s", providers) >= sizeof list) {
        fprintf(stderr, "%s: --provider: the list is longer than %zu characters\n", cli_prog, sizeof list - 1);
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
                fprintf(stderr, "%s: --provider %s: '%s' is not KEY=VALUE\n", cli_prog, p, kv);
                return 1;
            }
            *eq = 0;
            keys[n] = kv;
            vals[n++] = eq + 1;
        }
        if (kiln_session_options_append_provider(o, p, n ? keys : NULL, n ? vals : NULL, n) != KILN_OK) {
            fprintf(stderr, "%s: %s\n", cli_prog, kiln_last_error());
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


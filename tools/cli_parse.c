/* Strict parsing of the kiln command's numeric options: the whole text must be a number in range.
 * Every subcommand (and kiln bench) uses these, so `--threads two`, `--repeat 3x` and
 * `--dim batch=-3` are errors that name the option and the text instead of silently becoming 0. */
#include "cli.h"

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

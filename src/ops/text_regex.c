/* RE2 -> POSIX extended regular expressions for RegexFullMatch (see text.h). */
#include "ops/text.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = (b->cap ? b->cap * 2 : 64) + n;
        char *q = realloc(b->p, nc);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }
static void putc_(sbuf *b, char c) { put(b, &c, 1); }

static kiln_status fail(char *why, size_t cap, const char *fmt, ...) KN_PRINTF(3, 4);
static kiln_status fail(char *why, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return KILN_ERR_UNSUPPORTED;
}

/* RE2's Perl classes (ASCII) as the contents of a POSIX bracket; NULL for other letters. */
static const char *perl_class(char c, bool *negated) {
    *negated = isupper((unsigned char)c) != 0;
    switch (tolower((unsigned char)c)) {
    case 'd': return "0-9";
    case 'w': return "0-9A-Za-z_";
    case 's': return "\t\n\f\r ";
    default: return NULL;
    }
}

/* A single-character escape: the character, or -1 when c does not name one. */
static int char_escape(const char *p, int *used) {
    *used = 1;
    switch (*p) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    case 'a': return '\a';
    case 'x':
        if (isxdigit((unsigned char)p[1]) && isxdigit((unsigned char)p[2])) {
            char h[3] = {p[1], p[2], 0};
            *used = 3;
            return (int)strtol(h, NULL, 16);
        }
        return -1;
    default:
        if (ispunct((unsigned char)*p) || *p == ' ') return (unsigned char)*p;
        return -1;
    }
}

/* A literal character outside brackets, backslash-escaped when ERE gives it a meaning. */
static void put_literal(sbuf *b, int c) {
    if (c && strchr(".[]{}()\\*+?^$|", c)) putc_(b, '\\');
    putc_(b, (char)c);
}

/* Parses an RE2 bracket expression at p (just after '['); appends a POSIX one. */
static kiln_status bracket(const char **pp, sbuf *out, char *why, size_t cap) {
    const char *p = *pp;
    bool neg = false;
    if (*p == '^') {
        neg = true;
        p++;
    }
    /* collect: ranges and single characters as byte pairs, and named classes */
    unsigned char lo[256], hi[256];
    int n = 0;
    sbuf classes = {0};
    bool first = true;
    while (*p && (*p != ']' || first)) {
        first = false;
        int c;
        if (*p == '[' && p[1] == ':') { /* [:alpha:] */
            const char *e = strstr(p + 2, ":]");
            if (!e) return fail(why, cap, "unterminated [: in a bracket expression");
            put(&classes, p, (size_t)(e + 2 - p));
            p = e + 2;
            continue;
        }
        if (*p == '\\') {
            bool cneg;
            const char *pc = perl_class(p[1], &cneg);
            if (pc) {
                if (cneg) {
                    free(classes.p);
                    return fail(why, cap, "the negated class \\%c inside brackets is not supported", p[1]);
                }
                for (const char *q = pc; *q; q++) {
                    if (q[1] == '-' && q[2]) {
                        lo[n] = (unsigned char)q[0], hi[n++] = (unsigned char)q[2];
                        q += 2;
                    } else {
                        lo[n] = hi[n] = (unsigned char)*q, n++;
                    }
                }
                p += 2;
                continue;
            }
            int used;
            c = char_escape(p + 1, &used);
            if (c < 0) {
                free(classes.p);
                return fail(why, cap, "the escape \\%c inside brackets is not supported", p[1]);
            }
            p += 1 + used;
        } else {
            c = (unsigned char)*p++;
        }
        int h = c;
        if (*p == '-' && p[1] && p[1] != ']') { /* a range */
            p++;
            if (*p == '\\') {
                int used;
                h = char_escape(p + 1, &used);
                if (h < 0) {
                    free(classes.p);
                    return fail(why, cap, "the escape \\%c in a range is not supported", p[1]);
                }
                p += 1 + used;
            } else {
                h = (unsigned char)*p++;
            }
        }
        if (n >= 250) {
            free(classes.p);
            return fail(why, cap, "bracket expression too long");
        }
        lo[n] = (unsigned char)c, hi[n++] = (unsigned char)h;
    }
    if (*p != ']') {
        free(classes.p);
        return fail(why, cap, "unterminated bracket expression");
    }
    *pp = p + 1;
    /* emit: ']' first, '-' last, '^' not first; other characters and ranges in between */
    bool has_rb = false, has_dash = false, has_caret = false;
    putc_(out, '[');
    if (neg) putc_(out, '^');
    for (int i = 0; i < n; i++)
        if (lo[i] == hi[i]) {
            if (lo[i] == ']') has_rb = true;
        }
    if (has_rb) putc_(out, ']');
    for (int i = 0; i < n; i++) {
        if (lo[i] == hi[i]) {
            if (lo[i] == ']') continue;
            if (lo[i] == '-') {
                has_dash = true;
                continue;
            }
            if (lo[i] == '^') {
                has_caret = true;
                continue;
            }
            putc_(out, (char)lo[i]);
        } else {
            putc_(out, (char)lo[i]);
            putc_(out, '-');
            putc_(out, (char)hi[i]);
        }
    }
    if (classes.p) puts_(out, classes.p);
    free(classes.p);
    if (has_caret) {
        if (out->n && out->p[out->n - 1] == '[') puts_(out, "[:punct:]"); /* only '^': avoid "[^" */
        else putc_(out, '^');
    }
    if (has_dash) putc_(out, '-');
    if (out->n && out->p[out->n - 1] == '[') puts_(out, "[:punct:]"); /* cannot be empty */
    putc_(out, ']');
    return KILN_OK;
}

kiln_status kn_regex_compile(const char *pattern, regex_t *re, char *why, size_t cap) {
    sbuf b = {0};
    int flags = REG_EXTENDED | REG_NOSUB;
    const char *p = pattern;
    kiln_status st = KILN_OK;
    if (!strncmp(p, "(?i)", 4)) {
        flags |= REG_ICASE;
        p += 4;
    }
    puts_(&b, "^(");
    while (*p && st == KILN_OK) {
        char c = *p;
        if (c == '\\') {
            char e = p[1];
            bool neg;
            const char *pc = perl_class(e, &neg);
            if (!e) {
                st = fail(why, cap, "the pattern ends with a lone backslash");
            } else if (pc) {
                putc_(&b, '[');
                if (neg) putc_(&b, '^');
                puts_(&b, pc);
                putc_(&b, ']');
                p += 2;
            } else if (e == 'b' || e == 'B') {
                putc_(&b, '\\');
                putc_(&b, e);
                p += 2;
            } else if (e == 'A') {
                putc_(&b, '^');
                p += 2;
            } else if (e == 'z') {
                putc_(&b, '$');
                p += 2;
            } else if (e == 'p' || e == 'P' || e == 'Q' || e == 'E' || e == 'C' || isdigit((unsigned char)e)) {
                st = fail(why, cap, "the RE2 construct \\%c is not supported", e);
            } else {
                int used, ch = char_escape(p + 1, &used);
                if (ch < 0) {
                    st = fail(why, cap, "the escape \\%c is not supported", e);
                } else {
                    put_literal(&b, ch);
                    p += 1 + used;
                }
            }
        } else if (c == '[') {
            p++;
            st = bracket(&p, &b, why, cap);
        } else if (c == '(' && p[1] == '?') {
            if (p[2] == ':') {
                putc_(&b, '(');
                p += 3;
            } else if ((p[2] == 'P' && p[3] == '<') || (p[2] == '<' && p[3] != '=' && p[3] != '!')) {
                const char *e = strchr(p, '>');
                if (!e) st = fail(why, cap, "unterminated group name");
                else {
                    putc_(&b, '(');
                    p = e + 1;
                }
            } else {
                st = fail(why, cap, "the group or flag construct '(?%c' is not supported", p[2]);
            }
        } else if ((c == '*' || c == '+' || c == '?' || c == '}') && p[1] == '?') {
            putc_(&b, c); /* lazy: same set of full matches as greedy */
            p += 2;
        } else {
            putc_(&b, c);
            p++;
        }
    }
    puts_(&b, ")$");
    if (st == KILN_OK && b.oom) st = KN_OOM();
    if (st == KILN_OK) {
        int rc = regcomp(re, b.p, flags);
        if (rc) {
            char msg[256];
            regerror(rc, re, msg, sizeof msg);
            snprintf(why, cap, "pattern '%s' does not compile: %s", pattern, msg);
            st = KILN_ERR_INVALID_MODEL;
        }
    }
    free(b.p);
    return st;
}

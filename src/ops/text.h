/* Internal to the text family (src/ops/text*.c, src/backend/cpu/text.c). */
#ifndef KN_OPS_TEXT_H
#define KN_OPS_TEXT_H

#include "ops/op.h"

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>

/* Compiles an RE2 pattern for a full match (the whole string must match) with POSIX regcomp,
 * translating the RE2 constructs POSIX lacks: \d \D \w \W \s \S (outside and inside brackets,
 * ASCII as in RE2), \A \z, \n \t \r \f \v \xHH escapes, (?: and (?P<name> groups, lazy
 * quantifiers (laziness does not change whether a full match exists), a leading (?i). \b and \B
 * use the GNU extensions of glibc's regcomp. Unsupported (an error naming the construct):
 * Unicode classes \p \P, other inline flags, \Q..\E, \C, negated classes inside brackets ([\W]).
 * Note '.' and bracket classes match one byte, where RE2 matches one UTF-8 character.
 * On failure writes the reason to why. */
kiln_status kn_regex_compile(const char *pattern, regex_t *re, char *why, size_t cap);

#endif

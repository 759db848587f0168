/* Shared pieces of the kiln command's subcommands. */
#ifndef KN_CLI_H
#define KN_CLI_H

#include "kiln.h"
#include "ir/tensor.h"
#include "util/status.h"

#include <stdbool.h>

typedef struct cli_common {
    const char *providers; /* "cpu" or "cuda,cpu" */
    int opt_level;
    int threads;
    int log_level;
} cli_common;

/* The program name errors start with ("kiln run", set by each subcommand; "kiln" by default). */
extern const char *cli_prog;

/* Strict numbers (tools/cli_parse.c): the whole of text must be a decimal integer (or, for
 * cli_parse_double, a finite number) in [min, max]; no blanks, no trailing text. On success stores it
 * in *out and returns true; otherwise prints "kiln run: --threads: 'two' is not an integer (0..4096)"
 * (or "is out of range (...)", or "--threads needs a value") to stderr, leaves *out alone and
 * returns false: the caller exits with status 2. option names the flag in the message ("--threads",
 * "--dim batch"). */
bool cli_parse_int(const char *option, const char *text, long min, long max, long *out);
bool cli_parse_int_as(const char *option, const char *text, long min, long max, int *out);
bool cli_parse_double(const char *option, const char *text, double min, double max, double *out);

/* Builds session options from the common flags; prints the error and returns NULL on failure. */
kiln_session_options *cli_make_options(const cli_common *c);
/* Parses one of the common flags at argv[*i]; returns true when it was one (advancing *i). */
bool cli_parse_common(cli_common *c, int argc, char **argv, int *i, int *error);
void cli_common_defaults(cli_common *c);

/* Reads an input from .npy or a TensorProto .pb file. */
kiln_status cli_read_tensor(const char *path, kn_tensor **out);

/* Adds the providers of a --provider list ("cuda:precision=fp16,cpu": NAME[:KEY=VALUE...] items)
 * to o; prints the error and returns 1 on failure. */
int cli_add_providers(kiln_session_options *o, const char *list);
/* kiln inspect --provider (tools/placement.c): prints where each node of m would run (after shape
 * inference and optimisation). */
struct kn_model;
int cli_print_placement(struct kn_model *m, const kiln_session_options *o);

int cmd_run(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_test(int argc, char **argv);
int cmd_compile(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif

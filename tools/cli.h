/* Shared pieces of the kiln command's subcommands. */
#ifndef KN_CLI_H
#define KN_CLI_H

#include "kiln.h"
#include "ir/tensor.h"
#include "util/status.h"

#include <stdbool.h>
#include <stdio.h>

typedef struct cli_common {
    const char *providers; /* "cpu" or "cuda,cpu" */
    int opt_level;
    int threads;
    int log_level;
    unsigned given; /* which of the four were given (a second one is an error) */
} cli_common;

/* A --dim NAME=VALUE: VALUE a whole integer 0..2147483647. */
#define CLI_MAX_DIMS 64
typedef struct cli_dim {
    char name[256];
    long value;
} cli_dim;

/* Parses the text of one --dim into dims[*n] (capacity cap): NAME=VALUE with a non-empty name, a
 * strict integer value, and a name not given before; prints the error and returns false. */
bool cli_parse_dim(const char *text, cli_dim *dims, int *n, int cap);
/* Sets every --dim on o; prints the error and returns false. */
bool cli_apply_dims(kiln_session_options *o, const cli_dim *dims, int n);
/* For a flag that may be given once: prints "kiln run: --repeat given twice ('2' and '3')" and
 * returns false when *slot is already set, else stores value there. */
bool cli_once(const char *option, const char **slot, const char *value);

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

/* A made-up input for info (tools/inputs.c): its declared shape with symbolic dims from dims,
 * floats random in [-1, 1), bools random, integers int_value (or, when it is negative, random in
 * [0, 10): indices and token ids of small vocabularies). unnamed_hint says what to do instead when a
 * dim has neither a size nor a name. The error does not name the input (callers prefix it). */
kiln_status cli_random_input(const kiln_value_info *info, const cli_dim *dims, int n_dims, const char *unnamed_hint,
                             int int_value, kn_tensor **out);

/* Reads an input from .npy or a TensorProto .pb file. */
kiln_status cli_read_tensor(const char *path, kn_tensor **out);

/* Adds the providers of a --provider list ("cuda:precision=fp16,cpu": NAME[:KEY=VALUE...] items)
 * to o; prints the error and returns 1 on failure. */
int cli_add_providers(kiln_session_options *o, const char *list);
/* kiln inspect --provider (tools/placement.c): prints where each node of m would run (after shape
 * inference and optimisation). */
struct kn_model;
int cli_print_placement(struct kn_model *m, const kiln_session_options *o);

/* Help (tools/help.c, the one source of the options' text): the command list; one line of a
 * command's usage; a command's full help (false when there is no such command); the man page; the
 * bash completion script. */
void cli_usage(FILE *f);
void cli_usage_of(const char *command, FILE *f);
bool cli_help(const char *command, FILE *f);
void cli_man(FILE *f);
void cli_bash_completion(FILE *f);
int cmd_help(int argc, char **argv);

int cmd_run(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_test(int argc, char **argv);
int cmd_compile(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif

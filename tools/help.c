/* The kiln command's help: one table of commands and options, from which `kiln help`, `kiln help
 * COMMAND`, `kiln COMMAND --help`, the man page (`kiln help --man`, installed as kiln.1) and the
 * bash completion script (`kiln help --bash-completion`, installed as share/bash-completion/
 * completions/kiln) are all generated. A new option is added here once and appears everywhere. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

typedef struct cli_opt {
    const char *flag;  /* "--threads" (or "-o, --output") */
    const char *arg;   /* "N", or NULL for a switch */
    const char *help;  /* one sentence */
    const char *def;   /* the default, or NULL */
    const char *words; /* what completes the value: "cpu cuda", "@file", "@dir", or NULL */
} cli_opt;

typedef struct cli_cmd {
    const char *name;
    const char *args;    /* the synopsis after the command's name */
    const char *summary; /* one line for the command list */
    const char *about;   /* a paragraph for its own help */
    const cli_opt *opts;
    const char *words; /* what completes a positional argument: "@file", "@dir", or words */
} cli_cmd;

#define OPT_PROVIDER(def)                                                                                     \
    {"--provider", "P[,P...]",                                                                                 \
     "providers in order of preference; options follow a name: cuda:precision=fp16:device_id=0,cpu", def,      \
     "cpu cuda cuda,cpu"}
#define OPT_LEVEL {"--opt-level", "N", "optimisation level 0..3", "3", "0 1 2 3"}
#define OPT_THREADS(def) {"--threads", "N", "intra-op threads 0..4096 (0: every core)", def, NULL}
#define OPT_LOG {"--log", "LEVEL", "error, warning, info or debug", "warning", "error warning info debug"}
#define OPT_DIM                                                                                               \
    {"--dim", "NAME=N", "size of a symbolic input dimension (0..2147483647; once per name)", NULL, NULL}
#define OPT_HELP {"-h, --help", NULL, "print this help", NULL, NULL}
#define OPT_END {NULL, NULL, NULL, NULL, NULL}

static const cli_opt run_opts[] = {
    {"--input", "NAME=FILE", "read input NAME from a .npy or TensorProto .pb file (once per input)",
     "random: floats in [-1,1), integers in [0,10)", "@file"},
    OPT_DIM,
    {"--output-dir", "DIR", "write every output to DIR/NAME.npy", "not written", "@dir"},
    {"--repeat", "N", "run N times (1..100000000) and print the median latency", "1", NULL},
    {"--times", NULL, "with --repeat, print every run's latency in order", NULL, NULL},
    {"--timeout-ms", "N", "stop each run after N milliseconds with KILN_ERR_DEADLINE (0: no limit)", "0", NULL},
    OPT_PROVIDER("cpu"),
    OPT_LEVEL,
    OPT_THREADS("0"),
    OPT_LOG,
    OPT_HELP,
    OPT_END,
};
static const cli_opt inspect_opts[] = {
    OPT_DIM,
    {"--opt-level", "N", "optimise to level 0..3 and show what each pass changed", "not optimised (3 with --dump)",
     "0 1 2 3"},
    {"--dump", "FILE.onnx", "write the optimised graph as an ONNX file (Netron and onnx open it)", NULL, "@file"},
    {"--disable-pass", "NAME", "leave out an optimisation pass (repeatable; --list-passes names them)", NULL, NULL},
    {"--provider", "P[,P...]", "judge fusions for these providers and show where each node would run", NULL,
     "cpu cuda cuda,cpu"},
    {"--list-passes", NULL, "list the optimisation passes with their levels, and exit", NULL, NULL},
    OPT_HELP,
    OPT_END,
};
static const cli_opt compile_opts[] = {
    {"-o, --output", "FILE.kiln", "the compiled file to write (required)", NULL, "@file"},
    OPT_DIM,
    {"--precision", "P", "cuda precision: fp32, tf32, fp16 or bf16 (with --provider cuda); without cuda, the cpu's: fp32 or bf16", "fp32",
     "fp32 tf32 fp16 bf16"},
    {"--tuning", "T", "cuda kernel choice: exhaustive (measured) or heuristic (needs --provider cuda)",
     "exhaustive", "exhaustive heuristic"},
    OPT_PROVIDER("cpu"),
    OPT_LEVEL,
    OPT_THREADS("0"),
    OPT_LOG,
    OPT_HELP,
    OPT_END,
};
static const cli_opt test_opts[] = {
    {"--expected-failures", "FILE", "tests listed here may fail; a listed test that passes fails the run", NULL,
     "@file"},
    {"--compare-levels", NULL, "run each test at levels 0..3; every level must equal level 0", NULL, NULL},
    {"--repeat", "N", "run each data set N times in one session, comparing every run (later runs take the "
     "shape memo's and recorded graphs' paths; not with --compare-levels)", "1", NULL},
    {"--no-isolate", NULL, "run the tests in this process (faster; a crash ends the run)", "a child per test", NULL},
    {"-v, --verbose", NULL, "print every comparison", NULL, NULL},
    OPT_PROVIDER("cpu"),
    OPT_LEVEL,
    OPT_THREADS("1"),
    OPT_LOG,
    OPT_HELP,
    OPT_END,
};
static const cli_opt cache_opts[] = {
    {"--cache-dir", "DIR", "the cache directory (before the subcommand)",
     "$KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln", "@dir"},
    {"--delete", NULL, "verify: delete the entries that fail", NULL, NULL},
    {"--max-size", "SIZE", "prune: the size to prune down to (500M, 2G)", "$KILN_CACHE_MAX_SIZE or the built-in limit",
     NULL},
    {"--all", NULL, "prune: delete every entry", NULL, NULL},
    {"--dim, --provider, ...", NULL, "key: the options of kiln compile, which change the key", NULL, NULL},
    OPT_HELP,
    OPT_END,
};
static const cli_opt bench_opts[] = {
    OPT_DIM,
    OPT_PROVIDER("cpu"),
    OPT_LEVEL,
    OPT_THREADS("0"),
    {"--warmup", "N", "runs before timing", "at least 20 runs and 1 s, and until the provider has built what it builds beside the runs, at most 60 s", NULL},
    {"--iterations", "N", "timed runs per stream", "as many as --duration allows", NULL},
    {"--duration", "S", "seconds of timed runs", "3", NULL},
    {"--io", "WHERE", "host or device: where inputs and outputs live", "device with cuda, host on the CPU",
     "host device"},
    {"--streams", "N", "concurrent streams: threads calling one session, each with its own buffers", "1", NULL},
    {"--session-per-stream", NULL, "give each stream a session of its own instead", NULL, NULL},
    {"--json", "FILE", "also write the results as JSON", NULL, "@file"},
    {"--disable-pass", "NAME", "leave out an optimisation pass, to time with and without it (repeatable; kiln "
     "inspect --list-passes names them)", NULL, NULL},
    OPT_LOG,
    OPT_HELP,
    OPT_END,
};
static const cli_opt help_opts[] = {
    {"--man", NULL, "print the man page (troff) instead, or write it to FILE", NULL, NULL},
    {"--bash-completion", NULL, "print the bash completion script instead, or write it to FILE", NULL, NULL},
    OPT_END,
};
static const cli_opt no_opts[] = {OPT_HELP, OPT_END};

static const cli_cmd commands[] = {
    {"run", "MODEL|FILE.kiln [OPTIONS]", "run a model on given or random inputs; print each output",
     "Loads MODEL (an .onnx file, or a compiled .kiln file from kiln compile), optimises and compiles it (or loads "
     "it from the compiled-model cache), runs it and prints each output's type, shape, range and first values. "
     "Inputs not given with --input are random; symbolic dimensions of random inputs need --dim.",
     run_opts, "@file"},
    {"inspect", "MODEL|FILE.kiln [OPTIONS]", "what a model is made of and what kiln makes of it",
     "For an .onnx file: producer, opsets, inputs and outputs, the operator histogram, every value's shape, the "
     "operators no provider of this build supports, and with --opt-level what each optimisation pass changed. For "
     "a compiled .kiln file: its key fields, sections with sizes and checksums, tuning records, memory plan and "
     "graph.",
     inspect_opts, "@file"},
    {"compile", "MODEL -o FILE.kiln [OPTIONS]", "compile ahead of time into a self-contained file",
     "Optimises and compiles MODEL for the providers given and writes a compiled file that `kiln run FILE.kiln` "
     "(or kiln_session_create) runs without the .onnx. On a terminal each stage is shown as it runs.",
     compile_opts, "@file"},
    {"test", "DIR... [OPTIONS]", "run ONNX backend-test folders; ends with N passed, N failed, N skipped",
     "Finds every folder under DIRs holding model.onnx and test_data_set_*/ and compares kiln's outputs with the "
     "reference outputs (tolerances from a zoo.json beside the folders, else rtol 1e-3, atol 1e-5). Each test "
     "runs in a child process, so a crash is that test's failure.",
     test_opts, "@dir"},
    {"cache", "[--cache-dir DIR] list|verify|prune|key MODEL [OPTIONS]", "manage the compiled-model cache",
     "list: the entries, most recently used first, with the model and options each was compiled from. verify: "
     "check every entry's checksum (--delete removes the bad ones). prune: delete the least recently used entries "
     "down to a size. key MODEL: the cache key a session with these options would use, field by field.",
     cache_opts, "list verify prune key"},
    {"bench", "MODEL [OPTIONS]", "latency percentiles, throughput, session-create and first-run times",
     "Times MODEL's runs after a warm-up: latency percentiles and throughput, with the session's creation and "
     "first run timed apart; --streams N calls one session from N threads at once (--session-per-stream: a session "
     "each).",
     bench_opts, "@file"},
    {"info", "", "build options, providers compiled in, devices seen",
     "Prints kiln's version and build, the providers compiled in, and for each whether it can run here and why "
     "not (no NVIDIA driver, no device, a driver older than the CUDA runtime, a missing library), with the "
     "devices seen; with the CUDA backend, also whether cuBLASLt and cuDNN load here, GPU or not.",
     no_opts, NULL},
    {"help", "[COMMAND] [--man|--bash-completion [FILE]]", "this help, or a command's",
     "Prints the list of commands, or one command's options with their defaults.", help_opts,
     "run inspect compile test cache bench info help version"},
    {"version", "", "print kiln's version (also --version)", "Prints kiln's version.", no_opts, NULL},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static const struct {
    const char *name, *help;
} environment[] = {
    {"KILN_CACHE", "0 turns the compiled-model cache off"},
    {"KILN_CACHE_DIR", "the cache directory (else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)"},
    {"KILN_LOG", "the log level: error, warning, info (cache hits and misses), debug"},
    {"KILN_LOG_TIME", "1 stamps each log line with the milliseconds since kiln was loaded"},
    {"KILN_PROFILE", "1 prints where the runs spent their time at exit; a FILE.json writes a Chrome/Perfetto trace"},
    {"KILN_PROGRESS", "a run that takes over a second (a first run tuning its kernels, a large model) shows its "
                      "progress on a terminal; 1 shows it in logs too, 0 never"},
    {"KILN_CACHE_MAX_SIZE", "the cache directory's size limit (500M, 2G); the least recently used entries go"},
    {"KILN_MEMORY_PLAN", "0 turns the planned activation arena off"},
    {"KILN_SHAPE_MEMO", "0 makes every run infer every node's output shapes (by default a run with input shapes "
                        "seen before infers only the nodes whose shapes depend on data)"},
    {"KILN_OUTPUTS_IN_PLACE", "0 makes kiln_session_run_into copy each output into the caller's tensor after the run "
                              "instead of the node writing it there"},
    {"KILN_LAYOUT", "nhwc forms level 3's channels-last regions at any batch, nchw never"},
    {"KILN_MAX_TENSOR_BYTES", "the largest tensor a model may make (a hostile model's shapes are refused above it)"},
    {"KILN_ALLOW_HARDLINKS", "1 accepts external data files with hard links from outside the model's folder"},
    {"KILN_MODEL_READ", "0 maps the .onnx in place instead of reading it (the file must then not change while "
                        "sessions use it)"},
    {"KILN_CUDA_STAND_INS", "never keeps every CUDA run on cuBLASLt/cuDNN (no stand-in kernels while they load)"},
    {"KILN_CUDA_NO_WARMUP", "1 turns off the warm start's library loading beside the first run"},
    {"KILN_CUDA_RNN", "steps runs LSTM/GRU/RNN step by step instead of in one launch"},
    {"KILN_CUDA_FLASH", "0 runs kiln.Attention on CUDA in its general form (two products and a softmax), 1 in one "
                        "kernel wherever it applies (by default: where that was measured faster)"},
    {"KILN_CUDA_CONV_GRAPH", "0 never runs FusedConv's SiLU, Sigmoid, Tanh and Gelu on CUDA in cuDNN's operation graph "
                             "with the convolution (the convolution, then a pass), 1 always: over the provider option "
                             "conv_graph (default 1)"},
    {"KILN_CUDA_CONV_GRAPH_BUILD", "sync builds those graphs in the run that first needs them (by default threads "
                                   "beside the runs build them, and the runs take each once it is built)"},
    {"KILN_CUDA_CONV_GRAPH_CACHE", "1 builds those graphs with dynamic shapes and a kernel cache (a fast first run, "
                                   "slower kernels); by default static shapes, each convolution compiling its own"},
    {"KILN_CUDA_FLASH_WARPS", "1, 2 or 4: warps per block of that one kernel (by default 4; to measure)"},
    {"KILN_CUDA_ATTN_VIEWS", "0 keeps CUDA from running kiln.Attention with operand views (the optimiser's folded "
                             "head splits and merges; on by default)"},
    {"KILN_CUDA_CONTROL_FLOW", "0 keeps If, Loop and Scan on the CPU with providers cuda,cpu (by default they run on "
                               "CUDA with their bodies on the device)"},
    {"KILN_CUDA_LANES", "0 gives a CUDA session one lane (stream, handles, workspace): its calls take turns instead "
                        "of overlapping"},
    {"KILN_CUDA_CONV_FUSED", "0 runs FusedConv's bias and ReLU on CUDA as a pass after the convolution instead of in "
                             "cuDNN's fused convolution call"},
};
#define N_ENV (sizeof environment / sizeof environment[0])

static const cli_cmd *find(const char *name) {
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(commands[i].name, name)) return &commands[i];
    return NULL;
}

/* Prints text wrapped at width, the lines after the first indented by indent; the first starts at
 * column col (the caller has printed that much) after first_indent blanks. */
static void wrap_at(FILE *f, const char *text, int col, int first_indent, int indent, int width) {
    col += first_indent;
    fprintf(f, "%*s", first_indent, "");
    const char *p = text;
    bool line_start = true;
    while (*p) {
        while (*p == ' ') p++;
        if (!*p) break;
        int len = (int)strcspn(p, " ");
        if (!line_start && col + 1 + len > width) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
            line_start = true;
        }
        if (!line_start) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", len, p);
        col += len;
        p += len;
        line_start = false;
    }
    fputc('\n', f);
}

static void wrap(FILE *f, const char *text, int first_indent, int indent, int width) {
    wrap_at(f, text, 0, first_indent, indent, width);
}

void cli_usage(FILE *f) {
    fprintf(f, "usage: kiln COMMAND [OPTIONS]   (kiln help COMMAND, or kiln COMMAND --help, for its options)\n\n"
               "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nmost commands take --provider cpu|cuda[:KEY=VALUE...][,cpu], --opt-level 0..3 (default 3),\n"
               "--threads N (default 0: every core) and --log error|warning|info|debug (default warning).\n"
               "kiln help --man prints the manual page.\n");
}

void cli_usage_of(const char *name, FILE *f) {
    const cli_cmd *c = find(name);
    if (c) fprintf(f, "usage: kiln %s %s   (kiln help %s lists the options)\n", c->name, c->args, c->name);
}

static void opt_label(const cli_opt *o, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s%s", o->flag, o->arg ? " " : "", o->arg ? o->arg : "");
}

bool cli_help(const char *name, FILE *f) {
    const cli_cmd *c = find(name);
    if (!c) return false;
    fprintf(f, "usage: kiln %s %s\n\n", c->name, c->args);
    wrap(f, c->about, 0, 0, 100);
    if (c->opts[0].flag) fprintf(f, "\noptions:\n");
    for (const cli_opt *o = c->opts; o->flag; o++) {
        char label[96], line[512];
        opt_label(o, label, sizeof label);
        snprintf(line, sizeof line, "%s%s%s%s", o->help, o->def ? " (default: " : "", o->def ? o->def : "",
                 o->def ? ")" : "");
        if (strlen(label) <= 22) {
            fprintf(f, "  %-22s", label);
            wrap_at(f, line, 24, 1, 25, 100);
        } else {
            fprintf(f, "  %s\n", label);
            wrap(f, line, 25, 25, 100);
        }
    }
    return true;
}

/* troff escapes: a backslash, and a leading dot or quote */
static void roff(FILE *f, const char *s) {
    if (*s == '.' || *s == '\'') fputs("\\&", f);
    for (; *s; s++) {
        if (*s == '\\') fputs("\\e", f);
        else if (*s == '-') fputs("\\-", f);
        else fputc(*s, f);
    }
}

void cli_man(FILE *f) {
    fprintf(f, ".\\\" generated by `kiln help --man` from tools/help.c; do not edit\n"
               ".TH KILN 1 \"\" \"kiln %s\" \"User Commands\"\n"
               ".SH NAME\nkiln \\- run, inspect, compile and test ONNX models\n"
               ".SH SYNOPSIS\n",
            kiln_version());
    for (size_t i = 0; i < N_COMMANDS; i++) {
        fprintf(f, ".B kiln %s\n", commands[i].name);
        if (*commands[i].args) {
            roff(f, commands[i].args);
            fputc('\n', f);
        }
        fprintf(f, ".br\n");
    }
    fprintf(f, ".SH DESCRIPTION\nkiln is an ONNX inference runtime for CPUs and NVIDIA GPUs. It optimises and compiles "
               "a model once and keeps the compiled result in a validated cache, so the next process starts in "
               "milliseconds. Every failure is a message naming what, where and why; exit status 0 is success, 1 "
               "a failure, 2 a usage error.\n.SH COMMANDS\n");
    for (size_t i = 0; i < N_COMMANDS; i++) {
        const cli_cmd *c = &commands[i];
        fprintf(f, ".SS \"kiln %s\"\n", c->name);
        roff(f, c->about);
        fputc('\n', f);
        for (const cli_opt *o = c->opts; o->flag; o++) {
            fprintf(f, ".TP\n.B ");
            roff(f, o->flag);
            if (o->arg) {
                fprintf(f, " \\fI");
                roff(f, o->arg);
                fprintf(f, "\\fR");
            }
            fputc('\n', f);
            roff(f, o->help);
            if (o->def) {
                fprintf(f, " (default: ");
                roff(f, o->def);
                fputc(')', f);
            }
            fputc('\n', f);
        }
    }
    fprintf(f, ".SH ENVIRONMENT\n");
    for (size_t i = 0; i < N_ENV; i++) {
        fprintf(f, ".TP\n.B %s\n", environment[i].name);
        roff(f, environment[i].help);
        fputc('\n', f);
    }
    fprintf(f, ".SH EXIT STATUS\n0 success; 1 a failure (the message says what, where and why); 2 a usage error "
               "(an unknown option, a bad number, an option given twice).\n"
               ".SH EXAMPLES\n.nf\nkiln run model.onnx \\-\\-dim batch=1\n"
               "kiln run model.onnx \\-\\-input x=x.npy \\-\\-provider cuda:precision=fp16,cpu\n"
               "kiln inspect model.onnx \\-\\-opt\\-level 3\n"
               "kiln compile model.onnx \\-o model.kiln && kiln run model.kiln\n.fi\n");
}

/* The words to complete for a value or a positional argument: compgen arguments. */
static void completion_words(FILE *f, const char *words) {
    if (!strcmp(words, "@file")) fprintf(f, "COMPREPLY=($(compgen -f -- \"$cur\")); compopt -o filenames 2>/dev/null");
    else if (!strcmp(words, "@dir")) fprintf(f, "COMPREPLY=($(compgen -d -- \"$cur\")); compopt -o filenames 2>/dev/null");
    else fprintf(f, "COMPREPLY=($(compgen -W \"%s\" -- \"$cur\"))", words);
}

/* Each flag of "-o, --output" on its own. */
static void each_flag(const char *flags, char out[][48], int *n) {
    *n = 0;
    const char *p = flags;
    while (*p && *n < 4) {
        while (*p == ' ' || *p == ',') p++;
        int len = (int)strcspn(p, ", ");
        if (len > 0 && p[0] == '-' && len < 48) {
            memcpy(out[*n], p, (size_t)len);
            out[(*n)++][len] = 0;
        }
        p += len;
    }
}

void cli_bash_completion(FILE *f) {
    fprintf(f, "# bash completion for kiln; generated by `kiln help --bash-completion` from tools/help.c\n"
               "_kiln() {\n"
               "  local cur prev cmd\n"
               "  cur=\"${COMP_WORDS[COMP_CWORD]}\"; prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
               "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n"
               "    COMPREPLY=($(compgen -W \"");
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(f, "%s%s", i ? " " : "", commands[i].name);
    fprintf(f, " --version --help\" -- \"$cur\")); return\n  fi\n  cmd=\"${COMP_WORDS[1]}\"\n  case \"$cmd\" in\n");
    for (size_t i = 0; i < N_COMMANDS; i++) {
        const cli_cmd *c = &commands[i];
        fprintf(f, "  %s)\n    case \"$prev\" in\n", c->name);
        for (const cli_opt *o = c->opts; o->flag; o++) {
            if (!o->arg) continue;
            char flags[4][48];
            int n;
            each_flag(o->flag, flags, &n);
            if (!n) continue;
            fprintf(f, "    ");
            for (int k = 0; k < n; k++) fprintf(f, "%s%s", k ? "|" : "", flags[k]);
            fprintf(f, ") ");
            if (o->words) completion_words(f, o->words);
            else fprintf(f, "COMPREPLY=()");
            fprintf(f, "; return;;\n");
        }
        fprintf(f, "    esac\n    if [[ \"$cur\" == -* ]]; then\n      COMPREPLY=($(compgen -W \"");
        bool first = true;
        for (const cli_opt *o = c->opts; o->flag; o++) {
            char flags[4][48];
            int n;
            each_flag(o->flag, flags, &n);
            for (int k = 0; k < n; k++, first = false) fprintf(f, "%s%s", first ? "" : " ", flags[k]);
        }
        fprintf(f, "\" -- \"$cur\"))\n");
        if (c->words) {
            fprintf(f, "    else\n      ");
            completion_words(f, c->words);
            fprintf(f, "\n");
        }
        fprintf(f, "    fi;;\n");
    }
    fprintf(f, "  esac\n}\ncomplete -F _kiln kiln\n");
}

int cmd_help(int argc, char **argv) {
    if (argc == 0) {
        cli_usage(stdout);
        return 0;
    }
    bool man = !strcmp(argv[0], "--man"), completion = !strcmp(argv[0], "--bash-completion");
    if (man || completion) {
        if (argc > 2) {
            fprintf(stderr, "kiln help: %s takes at most one FILE\n", argv[0]);
            return 2;
        }
        FILE *f = argc == 2 ? fopen(argv[1], "w") : stdout;
        if (!f) {
            fprintf(stderr, "kiln help: cannot write '%s': ", argv[1]);
            perror(NULL);
            return 1;
        }
        if (man) cli_man(f);
        else cli_bash_completion(f);
        if (f != stdout && fclose(f) != 0) {
            fprintf(stderr, "kiln help: cannot write '%s'\n", argv[1]);
            return 1;
        }
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "kiln help: one command at a time\n");
        return 2;
    }
    if (!cli_help(argv[0], stdout)) {
        fprintf(stderr, "kiln help: no command '%s'\n", argv[0]);
        cli_usage(stderr);
        return 2;
    }
    return 0;
}

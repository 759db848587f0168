/* The graph optimiser: passes registered with a name and a level, run up to the session's level. */
#ifndef KN_OPT_H
#define KN_OPT_H

#include "exec/session.h"
#include "ir/graph.h"

/* Called once per pass run that changed something: the pass, the level being run (a level-1
 * clean-up also runs within later levels), the live node counts before and after, and what it
 * matched ("Conv+Relu x3, ..."). */
typedef void (*kn_opt_report_fn)(void *arg, const char *pass, int level, int nodes_before, int nodes_after,
                                 const char *detail);

/* Runs the passes of every level up to options->opt_level (skipping disabled ones) on the model's
 * main graph, and levels 1-2 of them on its If/Loop/Scan bodies (deepest first; judged for the CPU,
 * which runs the bodies). A value a body reads from an enclosing graph is a use there (graph.h).
 * Shapes must have been inferred; the caller infers again afterwards. */
kiln_status kn_optimize(kn_model *m, const kiln_session_options *options, kn_opt_report_fn report, void *arg);

/* As kn_optimize, but a listed provider that cannot run on this machine (no GPU) is judged from
 * its kernel tables as if it could: kiln inspect --provider, showing what a machine with the
 * device would form and place. A session uses kn_optimize (the runtime skips such providers). */
kiln_status kn_optimize_from_tables(kn_model *m, const kiln_session_options *options, kn_opt_report_fn report,
                                    void *arg);

/* The registered passes, for listing: name, level and description of pass i (NULL past the end). */
const char *kn_opt_pass_info(int i, int *level_out, const char **description_out);

/* The environment variables that change what the optimiser makes (KILN_LAYOUT, the CPU's bf16
 * switches, CUDA's attention views and control flow), as
 * "NAME=value" items separated by spaces, only those set; "" when none is. The compiled cache keys
 * on it, so a file made under one setting is not loaded under another. */
void kn_opt_environment(char *buf, size_t cap);

#endif

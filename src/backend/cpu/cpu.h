/* The CPU backend's kernel tables. Each family file (src/backend/cpu/<family>.c) exports
 * `const kn_cpu_kernel kn_cpu_<family>[]`, ended by an entry with op_type NULL. */
#ifndef KN_CPU_H
#define KN_CPU_H

#include "exec/kernel.h"
#include "ops/families.h"
#include "ops/op.h"

#include <stdbool.h>

typedef struct kn_cpu_kernel {
    const char *domain;  /* "" for ai.onnx */
    const char *op_type; /* NULL ends a table */
    kn_kernel_fn run;
    /* Optional: whether this kernel handles the node with these input types (NULL = all the
     * schema allows). On false it writes the reason, e.g. "element type int8 not supported". */
    bool (*supports)(const kn_node *node, const kn_type *const *in, int n_in, char *why, size_t cap);
    unsigned flags; /* KN_KERNEL_* */
    /* Optional: reads the node's attributes into a block of params_bytes bytes once, at compile
     * time (exec/kernel.h: kn_params_fn, kn_ctx_params); the kernel passes the same function to
     * kn_ctx_params. KN_PARAMS(fn, type) fills both fields. */
    kn_params_fn prepare;
    size_t params_bytes;
} kn_cpu_kernel;

#define KN_PARAMS(fn, type) fn, sizeof(type)

enum {
    /* The kernel writes every element of every preallocated output, so the executor need not
     * zero them first (most kernels; not those that accumulate into or skip output elements). */
    KN_KERNEL_OVERWRITES = 1u << 0,
};

/* The kernel for a node, or NULL (with the reason in why). */
const kn_cpu_kernel *kn_cpu_find(const kn_node *node, const kn_type *const *in, int n_in,
                                 char *why, size_t cap);

/* The kernel tables (kn_cpu_<family> below, in KN_OP_FAMILIES' order) and their count: code outside
 * the backend (the cache key, the compiled file's kernel indices) reads them through this, which in
 * a build with run-time dispatch gives the chosen level's (isa.h). */
const kn_cpu_kernel *const *kn_cpu_tables(size_t *count);

#define KN_FAMILY(name) extern const kn_cpu_kernel kn_cpu_##name[];
KN_OP_FAMILIES
#undef KN_FAMILY

#endif

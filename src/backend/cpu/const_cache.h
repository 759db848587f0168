/* Derived forms of a session's constant inputs (a convolution's weights in the GEMM's packed
 * layout), made on first use and kept for the session's lifetime.
 *
 * Why: re-packing constant weights on every run cost about a tenth of a CNN's CPU time. The
 * derived form lives in the CPU backend's per-session state (created and destroyed with the
 * session's runtime), keyed by the constant tensor and a layout description, so it can never
 * outlive the weights it was made from or be confused with another model's. */
#ifndef KN_CPU_CONST_CACHE_H
#define KN_CPU_CONST_CACHE_H

#include "exec/kernel.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kn_cpu_state kn_cpu_state;

/* The CPU backend's per-session state (see backend.c: init/destroy). */
kiln_status kn_cpu_state_create(kn_cpu_state **out);
void kn_cpu_state_destroy(kn_cpu_state *s);

/* What a derived form is: a kind chosen by the caller and the parameters that decide its layout
 * (shapes, groups). Two requests share one form only when all of it is equal. */
typedef struct kn_const_layout {
    int kind;
    int64_t p[4];
} kn_const_layout;

typedef void (*kn_const_make_fn)(const void *ctx, void *dst);

/* Whether input i of the running node is a constant of the session's graph, read as itself (not
 * an initializer the caller overrode): what kn_cpu_const_derived keeps forms of. */
bool kn_cpu_input_is_const(const kn_kernel_ctx *c, int i);

/* The derived form of input `input` of the running node with this layout, `bytes` long, made by
 * make(ctx, dst) the first time (64-byte aligned). NULL when the input is not a constant of the
 * session (a graph input, a computed value, an initializer the caller overrode), when the kernel
 * runs outside a session, or when memory runs out: the caller then derives it per call. */
const void *kn_cpu_const_derived(const kn_kernel_ctx *c, int input, const kn_const_layout *layout, size_t bytes,
                                 kn_const_make_fn make, const void *ctx);

/* bf16 precision (sgemm_bf16.h): whether the session's CPU provider runs its matrix products in
 * bf16, set once when the backend is made. */
void kn_cpu_state_set_bf16(kn_cpu_state *s, bool on);
bool kn_cpu_state_bf16(const kn_cpu_state *s);

/* A form derived from `base`, where base points into a derived form this state already holds (a
 * constant's packed weights, the data of a kn_cpu_const_derived result or a part of it): made by
 * make(ctx, dst) the first time, keyed by base and layout, kept with the session. NULL when base is
 * not inside such a form (so a per-call buffer is never mistaken for a constant) or when memory
 * runs out: the caller then derives it per call. */
const void *kn_cpu_const_rederived(kn_cpu_state *s, const void *base, const kn_const_layout *layout, size_t bytes,
                                   kn_const_make_fn make, const void *ctx);

#endif

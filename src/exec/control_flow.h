/* The ONNX semantics of the control-flow operators (If, Loop, Scan), once for every backend.
 *
 * A backend's kernel for If, Loop or Scan calls kn_cf_if / kn_cf_loop / kn_cf_scan with a mover: the
 * few operations that depend on where the elements live (make a tensor, copy rows of elements,
 * read one element on the host, bring a body's output to the backend's side). The driver does the
 * rest: which branch, the trip count and condition, the loop-carried values, the slices a Scan's
 * body sees (axes, directions), the stacking of scan outputs, opset 8's batched Scan, and the
 * errors. Bodies run through the executor (kn_exec_subgraph) with the node's run as their outer
 * scope; a device backend gets their outputs where they were computed (exec.c).
 *
 * The CPU's mover is kn_cf_host; the CUDA backend's is in cuda_ops_control.c. */
#ifndef KN_CONTROL_FLOW_H
#define KN_CONTROL_FLOW_H

#include "exec/kernel.h"

typedef struct kn_cf_mover {
    void *state; /* the backend's, passed back to each call */
    /* A new tensor on the backend's side (contents undefined). */
    kiln_status (*new_tensor)(void *state, kiln_dtype dtype, int rank, const int64_t *dims, kn_tensor **out);
    /* `rows` runs of `width` elements: dst[dst_off + r * dst_pitch + k] = src[src_off + r * src_pitch
     * + k] (offsets and pitches in elements). dst is on the backend's side; src on either side.
     * Ordered after the work that made src and before any later work on dst. */
    kiln_status (*copy_rows)(void *state, kn_tensor *dst, int64_t dst_off, int64_t dst_pitch, const kn_tensor *src,
                             int64_t src_off, int64_t src_pitch, int64_t width, int64_t rows);
    /* Element i of t (either side) on the host, as int64 (a device value is waited for). */
    kiln_status (*read_i64)(void *state, const kn_tensor *t, int64_t i, int64_t *out);
    /* A copy of t (either side; sequences too where the backend holds them) on the backend's side. */
    kiln_status (*clone)(void *state, const kn_tensor *t, kn_tensor **out);
    /* t (taken) as a value of the backend's side: t itself when it is there already. On failure t
     * is freed. */
    kiln_status (*adopt)(void *state, kn_tensor *t, kn_tensor **out);
} kn_cf_mover;

/* The host's: plain memory (strings duplicated, packed types element by element). */
extern const kn_cf_mover kn_cf_host;

/* If's, Loop's and Scan's attributes, read once: the kernels' prepare hook (a backend's table
 * names it; without it they read them at each call). Pointers are the node's. */
typedef struct kn_cf_prm {
    const kn_graph *then_branch, *else_branch, *body; /* NULL: absent or not a graph */
    int64_t num_scan_inputs;
    /* Scan's axes and directions (opset 8: `directions` as in_dirs, no axes) */
    const int64_t *in_axes, *in_dirs, *out_axes, *out_dirs;
    int n_in_axes, n_in_dirs, n_out_axes, n_out_dirs;
} kn_cf_prm;
kiln_status kn_cf_prepare(const kn_node *n, void *params);

kiln_status kn_cf_if(kn_kernel_ctx *c, const kn_cf_mover *m);
kiln_status kn_cf_loop(kn_kernel_ctx *c, const kn_cf_mover *m);
/* Scan of every opset (opset 8: batched, sequence_lens first). */
kiln_status kn_cf_scan(kn_kernel_ctx *c, const kn_cf_mover *m);

/* Stacks n same-shaped tensors along a new axis (negative: from the end of the result's rank);
 * `reverse` stacks them last to first. With n = 0 the result is a 1-D empty tensor of `dtype`. */
kiln_status kn_cf_stack(kn_kernel_ctx *c, const kn_cf_mover *m, kn_tensor *const *items, int64_t n, int axis,
                        int reverse, kiln_dtype dtype, kn_tensor **out);

/* What the driver does on the host whatever the backend, for placement and graph capture: how
 * many of a body's first inputs it gives as host values it sets itself (a Loop's iteration number
 * and condition: 2), and how many of a body's first outputs it reads on the host after each run of
 * the body (a Loop's condition: 1); 0 for other operators. */
int kn_cf_host_body_inputs(const kn_node *n);
int kn_cf_host_read_body_outputs(const kn_node *n);

/* Replaces output i of the kernel with t (taken; freed when the output is omitted). */
void kn_cf_set_output(kn_kernel_ctx *c, int i, kn_tensor *t);

#endif

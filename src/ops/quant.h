/* Internal to the quant family (src/ops/quant.c, src/backend/cpu/quant.c): how the scale and zero
 * point of QuantizeLinear/DequantizeLinear map onto the elements of x. */
#ifndef KN_OPS_QUANT_H
#define KN_OPS_QUANT_H

#include "ops/op.h"

#include <stdbool.h>
#include <stddef.h>

/* Element i of x (row-major, viewed as [outer, D, inner] around `axis`) uses scale element
 *   per-tensor: 0
 *   per-axis:   (i / inner) % D
 *   blocked:    ((i / (D * inner)) * Ds + ((i / inner) % D) / block) * inner + i % inner */
typedef enum kn_quant_mode { KN_QUANT_TENSOR, KN_QUANT_AXIS, KN_QUANT_BLOCKED } kn_quant_mode;

typedef struct kn_quant_layout {
    kn_quant_mode mode;
    int axis;                       /* normalised (not used per-tensor) */
    int64_t block;                  /* block_size (blocked only) */
    int64_t outer, D, inner, Ds;    /* from concrete dims; -1 where a dim is unknown */
} kn_quant_layout;

/* Works out the layout from x's and the scale's shapes (dims may hold -1 at load time: checks
 * that need them are skipped). On failure writes the reason to why and returns the status. */
kiln_status kn_quant_layout_get(const kn_node *node, int x_rank, const int64_t *x_dims, int s_rank,
                                const int64_t *s_dims, kn_quant_layout *l, char *why, size_t cap);
/* The same with the node's axis (default 1) and block_size (default 0) already read (a kernel's
 * prepare hook). */
kiln_status kn_quant_layout_get_with(int64_t axis, int64_t block, int x_rank, const int64_t *x_dims, int s_rank,
                                     const int64_t *s_dims, kn_quant_layout *l, char *why, size_t cap);

/* Scale index of element i. */
static inline int64_t kn_quant_index(const kn_quant_layout *l, int64_t i) {
    switch (l->mode) {
    case KN_QUANT_AXIS: return (i / l->inner) % l->D;
    case KN_QUANT_BLOCKED: {
        int64_t in = i % l->inner, c = (i / l->inner) % l->D, o = i / (l->D * l->inner);
        return (o * l->Ds + c / l->block) * l->inner + in;
    }
    default: return 0;
    }
}

/* The integer range of a quantised integer type; false for the float types. */
bool kn_quant_int_range(kiln_dtype t, int64_t *lo, int64_t *hi);
/* QuantizeLinear's output type: the zero point's, else output_dtype, else uint8. */
kiln_status kn_quant_out_dtype(const kn_node *node, kiln_dtype zp_dtype, kiln_dtype *out, char *why, size_t cap);

#endif

/* Internal to the tensor family's shape inference (src/ops/tensor.c, src/ops/tensor_more.c). */
#ifndef KN_OPS_TENSOR_INFER_H
#define KN_OPS_TENSOR_INFER_H

#include "ops/op.h"
#include "ops/tensor_util.h"

static inline kn_dim kn_ti_known(int64_t v) { return (kn_dim){v, NULL}; }
static inline kn_dim kn_ti_unknown(void) { return (kn_dim){-1, NULL}; }

bool kn_ti_has(const kn_infer_ctx *c, int i);
kiln_dtype kn_ti_dtype(const kn_infer_ctx *c, int i);
int kn_ti_rank(const kn_infer_ctx *c, int i);
const kn_tensor *kn_ti_value(const kn_infer_ctx *c, int i);
/* out[o] = tensor of dtype with these dims (NULL: all unknown); rank -1 for an unknown rank. */
void kn_ti_set(kn_infer_ctx *c, int o, kiln_dtype dtype, int rank, const kn_dim *dims);
void kn_ti_set_unknown_rank(kn_infer_ctx *c, int o, kiln_dtype dtype);
void kn_ti_dims_of(const kn_type *t, int64_t *dims); /* values, -1 for unknown/symbolic */
/* Product of dims: known, a lone symbol (others 1), or unknown. */
kn_dim kn_ti_product(const kn_dim *d, int n);
/* Shape values of input i (from its value when known, else its type); -1 when not tracked. */
int kn_ti_sv(const kn_infer_ctx *c, int i, kn_dim *out);
/* Records shape values on out[o] (a 0-D or 1-D integer tensor whose length matches). */
void kn_ti_put_sv(kn_infer_ctx *c, int o, const kn_dim *v, int n);
/* Fails naming the first of inputs 0..n-1 that is missing. */
kiln_status kn_ti_need(const kn_infer_ctx *c, int n);
kiln_status kn_ti_fail(const kn_infer_ctx *c, kiln_status st, const char *why);
/* Transpose's perm attribute (default: reversed), validated. */
kiln_status kn_ti_perm(const kn_infer_ctx *c, int rank, int *perm);
/* Range's element count (max(ceil((limit - start) / delta), 0)); c may be NULL (plain error). */
kiln_status kn_range_count(const kn_tensor *start, const kn_tensor *limit, const kn_tensor *delta,
                           int64_t *count, const kn_infer_ctx *c);

kiln_status kn_infer_gather_elements(kn_infer_ctx *c);
kiln_status kn_infer_gather_nd(kn_infer_ctx *c);
kiln_status kn_infer_scatter(kn_infer_ctx *c);
kiln_status kn_infer_tile(kn_infer_ctx *c);
kiln_status kn_infer_pad(kn_infer_ctx *c);
kiln_status kn_infer_cum(kn_infer_ctx *c);
kiln_status kn_infer_trilu(kn_infer_ctx *c);
kiln_status kn_infer_onehot(kn_infer_ctx *c);
kiln_status kn_infer_eyelike(kn_infer_ctx *c);
kiln_status kn_infer_depth_to_space(kn_infer_ctx *c);
kiln_status kn_infer_space_to_depth(kn_infer_ctx *c);
kiln_status kn_infer_reverse_sequence(kn_infer_ctx *c);
kiln_status kn_infer_compress(kn_infer_ctx *c);
kiln_status kn_infer_nonzero(kn_infer_ctx *c);
kiln_status kn_infer_unique(kn_infer_ctx *c);
kiln_status kn_infer_center_crop_pad(kn_infer_ctx *c);
kiln_status kn_infer_tensor_scatter(kn_infer_ctx *c);

#endif

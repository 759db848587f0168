/* Helpers of the image family shared by its shape inference (src/ops/image.c) and its CPU kernels
 * (src/backend/cpu/image*.c), so that both read Resize's attributes and inputs the same way and
 * agree on the output shape to the element. */
#ifndef KN_OPS_IMAGE_H
#define KN_OPS_IMAGE_H

#include "ops/op.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum kn_resize_mode { KN_RESIZE_NEAREST, KN_RESIZE_LINEAR, KN_RESIZE_CUBIC } kn_resize_mode;

typedef enum kn_resize_coord {
    KN_COORD_HALF_PIXEL,
    KN_COORD_HALF_PIXEL_SYMMETRIC,
    KN_COORD_PYTORCH_HALF_PIXEL,
    KN_COORD_ALIGN_CORNERS,
    KN_COORD_ASYMMETRIC,
    KN_COORD_TF_HALF_PIXEL_FOR_NN,
    KN_COORD_TF_CROP_AND_RESIZE,
} kn_resize_coord;

typedef enum kn_resize_nearest {
    KN_NEAREST_ROUND_PREFER_FLOOR,
    KN_NEAREST_ROUND_PREFER_CEIL,
    KN_NEAREST_FLOOR,
    KN_NEAREST_CEIL,
    KN_NEAREST_SIMPLE, /* Upsample and Resize-10: truncate, or ceil when downsampling */
} kn_resize_nearest;

/* Everything a Resize/Upsample node does, with the inputs' values folded in. */
typedef struct kn_resize_plan {
    kn_resize_mode mode;
    kn_resize_coord coord;
    kn_resize_nearest nearest;
    double cubic_a;
    double extrapolation;
    bool exclude_outside;
    bool antialias;
    int rank;
    int64_t in_dims[KILN_MAX_RANK];  /* -1 where unknown (shape inference) */
    int64_t out_dims[KILN_MAX_RANK]; /* -1 where not known yet */
    double scale[KILN_MAX_RANK];     /* the scale the coordinate transform uses, per axis */
    double roi_start[KILN_MAX_RANK], roi_end[KILN_MAX_RANK]; /* tf_crop_and_resize only */
} kn_resize_plan;

/* The node's roi, scales and sizes inputs (NULL when omitted or empty), by opset. */
void kn_resize_inputs(const kn_node *node, int n_inputs, const kn_tensor *const *values,
                      const kn_tensor **roi, const kn_tensor **scales, const kn_tensor **sizes);
/* Builds the plan for an input of `rank` with dims in_dims (-1 = unknown). roi/scales/sizes are
 * the inputs' values, NULL when absent, empty or unknown; `pending` is set at load time when a
 * scales or sizes input is there but its value is not known yet (then the resized dims stay -1).
 * On an invalid node returns an error status with the reason in why (without the node label). */
kiln_status kn_resize_plan_make(const kn_node *node, int rank, const int64_t *in_dims,
                                const kn_tensor *roi, const kn_tensor *scales, const kn_tensor *sizes,
                                bool pending, kn_resize_plan *p, char *why, size_t cap);

/* Resize/Upsample's attributes, read once: the prepare hook (exec/kernel.h: kn_params_fn) of the
 * CPU and CUDA kernels, which pass the block to kn_resize_plan_from. A name that parses to none of
 * its values is kept (its *_ok false) for the plan's message. */
typedef struct kn_resize_attrs {
    bool legacy; /* Upsample, or Resize before opset 11 */
    bool mode_ok, coord_ok, nearest_ok;
    kn_resize_mode mode;
    kn_resize_coord coord;
    kn_resize_nearest nearest;
    const char *mode_name, *coord_name, *nearest_name, *policy_name;
    int keep; /* keep_aspect_ratio_policy: 0 stretch, 1 not_larger, 2 not_smaller, -1 none of them */
    double cubic_a, extrapolation;
    bool exclude_outside, antialias;
    const int64_t *axes; /* the axes attribute (NULL: every axis) */
    int n_axes;
    bool attr_scales;    /* Upsample before opset 9: scales is an attribute ... */
    const float *scales; /* ... these (NULL: missing) */
    int n_scales;
} kn_resize_attrs;
kiln_status kn_resize_prepare(const kn_node *node, void *params);
/* kn_resize_inputs for a node whose kn_resize_attrs.legacy is given */
void kn_resize_inputs_of(bool legacy, int n_inputs, const kn_tensor *const *values, const kn_tensor **roi,
                         const kn_tensor **scales, const kn_tensor **sizes);
kiln_status kn_resize_plan_from(const kn_resize_attrs *a, int rank, const int64_t *in_dims, const kn_tensor *roi,
                                const kn_tensor *scales, const kn_tensor *sizes, bool pending, kn_resize_plan *p,
                                char *why, size_t cap);

#endif

/* Internal to the CPU kernels of the image family (src/backend/cpu/image*.c). */
#ifndef KN_CPU_IMAGE_IMPL_H
#define KN_CPU_IMAGE_IMPL_H

#include "backend/cpu/cpu.h"
#include "ops/image.h"

#include <stdbool.h>
#include <stdint.h>

kiln_status kn_cpu_resize(kn_kernel_ctx *c);
kiln_status kn_cpu_gridsample(kn_kernel_ctx *c);
kiln_status kn_cpu_affinegrid(kn_kernel_ctx *c);
kiln_status kn_cpu_roialign(kn_kernel_ctx *c);
kiln_status kn_cpu_maxroipool(kn_kernel_ctx *c);
kiln_status kn_cpu_nms(kn_kernel_ctx *c);
kiln_status kn_cpu_image_decode(kn_kernel_ctx *c);

/* The family's attributes but Resize's, read once at compile time (kn_cpu_image_prepare,
 * image_sample.c): GridSample's mode and padding_mode (image_sample.c's GS_* and PAD_*),
 * align_corners (GridSample, AffineGrid); RoiAlign's output size, spatial_scale, sampling_ratio,
 * mode and coordinate transformation; MaxRoiPool's pooled_shape and spatial_scale;
 * NonMaxSuppression's center_point_box; ImageDecoder's pixel_format (0 RGB, 1 BGR, 2 Grayscale,
 * -1 none of them: the call says why). */
typedef struct kn_cpu_image_prm {
    int gs_mode, gs_pad;
    bool align, max_mode, half_pixel, center;
    int64_t oh, ow, sampling;
    float scale;
    const int64_t *pooled; /* the node's */
    int n_pooled;
    int pixel_format;
} kn_cpu_image_prm;
kiln_status kn_cpu_image_prepare(const kn_node *n, void *params);

/* Writes v into element i of a numeric tensor: integers are rounded half to even and saturated
 * (as the reference implementation's saturate_cast), floats converted. */
void kn_cpu_image_store(kn_tensor *t, int64_t i, double v);

#endif

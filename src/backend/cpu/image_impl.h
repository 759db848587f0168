/* Internal to the CPU kernels of the image family (src/backend/cpu/image*.c). */
#ifndef KN_CPU_IMAGE_IMPL_H
#define KN_CPU_IMAGE_IMPL_H

#include "backend/cpu/cpu.h"
#include "ops/image.h"

#include <stdint.h>

kiln_status kn_cpu_resize(kn_kernel_ctx *c);
kiln_status kn_cpu_gridsample(kn_kernel_ctx *c);
kiln_status kn_cpu_affinegrid(kn_kernel_ctx *c);
kiln_status kn_cpu_roialign(kn_kernel_ctx *c);
kiln_status kn_cpu_maxroipool(kn_kernel_ctx *c);
kiln_status kn_cpu_nms(kn_kernel_ctx *c);
kiln_status kn_cpu_image_decode(kn_kernel_ctx *c);

/* Writes v into element i of a numeric tensor: integers are rounded half to even and saturated
 * (as the reference implementation's saturate_cast), floats converted. */
void kn_cpu_image_store(kn_tensor *t, int64_t i, double v);

#endif

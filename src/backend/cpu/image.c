/* The CPU kernel table of the image family; the kernels live in image_resize.c (Resize,
 * Upsample), image_sample.c (GridSample, AffineGrid, RoiAlign, MaxRoiPool), image_nms.c and
 * image_decode.c (ImageDecoder). */
#include "backend/cpu/image_impl.h"

#include <stdio.h>

/* float, double, float16, bfloat16 */
static bool supports_float(const kn_node *node, const kn_type *const *in, int n_in, char *why, size_t cap) {
    if (n_in < 1 || !in[0] || !in[0]->dtype || kn_dtype_is_float(in[0]->dtype)) return true;
    snprintf(why, cap, "%s on the CPU does not support element type %s", node->op_type, kiln_dtype_name(in[0]->dtype));
    return false;
}

#define IMAGE_PRM KN_PARAMS(kn_cpu_image_prepare, kn_cpu_image_prm)

const kn_cpu_kernel kn_cpu_image[] = {
    {"", "Resize", kn_cpu_resize, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_resize_prepare, kn_resize_attrs)},
    {"", "Upsample", kn_cpu_resize, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_resize_prepare, kn_resize_attrs)},
    {"", "GridSample", kn_cpu_gridsample, NULL, KN_KERNEL_OVERWRITES, IMAGE_PRM},
    {"", "AffineGrid", kn_cpu_affinegrid, supports_float, KN_KERNEL_OVERWRITES, IMAGE_PRM},
    {"", "RoiAlign", kn_cpu_roialign, supports_float, KN_KERNEL_OVERWRITES, IMAGE_PRM},
    {"", "MaxRoiPool", kn_cpu_maxroipool, supports_float, KN_KERNEL_OVERWRITES, IMAGE_PRM},
    {"", "NonMaxSuppression", kn_cpu_nms, supports_float, 0, IMAGE_PRM},
    {"", "ImageDecoder", kn_cpu_image_decode, NULL, 0, IMAGE_PRM},
    {0},
};

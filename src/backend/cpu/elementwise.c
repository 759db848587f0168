/* The CPU elementwise family's kernel table. The kernels live in elementwise_unary.c,
 * elementwise_binary.c and elementwise_cast.c (broadcast iteration in elementwise_bcast.c). */
#include "backend/cpu/cpu.h"
#include "backend/cpu/elementwise_impl.h"

/* Every kernel writes each element of its output, so the executor need not zero-fill it. */
const kn_cpu_kernel kn_cpu_elementwise[] = {
#define KN_EW_ENTRY(op) {"", #op, kn_cpu_ew_##op, NULL, KN_KERNEL_OVERWRITES},
    KN_EW_KERNELS(KN_EW_ENTRY)
#undef KN_EW_ENTRY
#define KN_EW_ENTRY(op) {"", #op, kn_cpu_ew_##op, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_ew_un_prepare, kn_ew_un_prm)},
    KN_EW_ATTR_KERNELS(KN_EW_ENTRY)
#undef KN_EW_ENTRY
#define KN_EW_ENTRY(op) {"", #op, kn_cpu_ew_##op, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_ew_cast_prepare, kn_ew_cast_prm)},
    KN_EW_CAST_KERNELS(KN_EW_ENTRY)
#undef KN_EW_ENTRY
    {0},
};

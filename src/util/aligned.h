/* aligned_alloc with the size rounded up to a multiple of the alignment, as C11 asks of its callers
 * (AddressSanitizer refuses others): a buffer sized in whole vectors is a multiple of 64 bytes with
 * AVX-512's 16 floats but not with AVX2's 8. */
#ifndef KN_UTIL_ALIGNED_H
#define KN_UTIL_ALIGNED_H

#include <stdlib.h>

static inline void *kn_aligned_alloc(size_t align, size_t bytes) {
    const size_t n = (bytes + align - 1) / align * align;
    return aligned_alloc(align, n ? n : align);
}

#endif

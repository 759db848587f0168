#include "util/limits.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

uint64_t kn_bytes_of(uint64_t count, uint64_t elem_size) {
    if (elem_size && count > UINT64_MAX / elem_size) return UINT64_MAX;
    return count * elem_size;
}

uint64_t kn_tensor_bytes_limit(void) {
    const char *e = getenv("KILN_MAX_TENSOR_BYTES");
    if (e && *e) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(e, &end, 10);
        uint64_t mul = *end == 'k' || *end == 'K' ? 1ull << 10 : *end == 'm' || *end == 'M' ? 1ull << 20
                     : *end == 'g' || *end == 'G' ? 1ull << 30 : 1;
        if (!errno && end != e && v && v <= UINT64_MAX / mul) return (uint64_t)v * mul;
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return (uint64_t)1 << 40;
    return kn_bytes_of((uint64_t)pages, (uint64_t)page);
}

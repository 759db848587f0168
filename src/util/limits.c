#include "util/limits.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

uint64_t kn_bytes_of(uint64_t count, uint64_t elem_size) {
    if (elem_size && count > UINT64_MAX / elem_size) return UINT64_MAX;
    return count * elem_size;
}

/* The machine's memory, read once: every host tensor allocation asks for the limit. */
static pthread_once_t physical_once = PTHREAD_ONCE_INIT;
static uint64_t physical_bytes;
static void physical_read(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    physical_bytes = pages <= 0 || page <= 0 ? (uint64_t)1 << 40 : kn_bytes_of((uint64_t)pages, (uint64_t)page);
}

static uint64_t limit_read(void);

/* the pinned limit of the run on this thread (pinned > 0) */
static _Thread_local uint64_t pinned_limit;
static _Thread_local int pinned;

void kn_tensor_bytes_limit_pin(void) {
    if (pinned++ == 0) pinned_limit = limit_read();
}

void kn_tensor_bytes_limit_pin_to(uint64_t limit) {
    if (pinned++ == 0) pinned_limit = limit;
}

void kn_tensor_bytes_limit_unpin(void) {
    if (pinned > 0) pinned--;
}

uint64_t kn_tensor_bytes_limit(void) { return pinned > 0 ? pinned_limit : limit_read(); }

static uint64_t limit_read(void) {
    const char *e = getenv("KILN_MAX_TENSOR_BYTES");
    if (e && *e) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(e, &end, 10);
        uint64_t mul = *end == 'k' || *end == 'K' ? 1ull << 10 : *end == 'm' || *end == 'M' ? 1ull << 20
                     : *end == 'g' || *end == 'G' ? 1ull << 30 : 1;
        if (!errno && end != e && v && v <= UINT64_MAX / mul) return (uint64_t)v * mul;
    }
    pthread_once(&physical_once, physical_read);
    return physical_bytes;
}

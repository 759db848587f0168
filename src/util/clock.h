/* A monotonic clock in milliseconds, for the timings kiln reports (cache, start-up, profiles). */
#ifndef KN_CLOCK_H
#define KN_CLOCK_H

#include <time.h>

static inline double kn_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

#endif

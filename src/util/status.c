#include "util/status.h"

#include <stdio.h>
#include <string.h>

#define KN_MSG_CAP 2048

static _Thread_local char kn_msg[KN_MSG_CAP];

kiln_status kn_verror(kiln_status status, const char *fmt, va_list ap) {
    vsnprintf(kn_msg, sizeof kn_msg, fmt, ap);
    return status;
}

kiln_status kn_error(kiln_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kn_verror(status, fmt, ap);
    va_end(ap);
    return status;
}

kiln_status kn_error_prefix(kiln_status status, const char *fmt, ...) {
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[KN_MSG_CAP];
    memcpy(old, kn_msg, sizeof old);
    size_t n = strlen(prefix);
    if (n >= sizeof kn_msg) n = sizeof kn_msg - 1;
    memcpy(kn_msg, prefix, n);
    size_t rest = strnlen(old, sizeof old - 1);
    if (rest > sizeof kn_msg - 1 - n) rest = sizeof kn_msg - 1 - n;
    memcpy(kn_msg + n, old, rest);
    kn_msg[n + rest] = 0;
    return status;
}

const char *kn_last_error(void) { return kn_msg; }
void kn_clear_error(void) { kn_msg[0] = 0; }

const char *kiln_last_error(void) { return kn_msg; }

static const char *const kn_status_names[] = {
    "KILN_OK",           "KILN_ERR_INVALID_ARGUMENT", "KILN_ERR_INVALID_MODEL",
    "KILN_ERR_UNSUPPORTED", "KILN_ERR_IO",            "KILN_ERR_OUT_OF_MEMORY",
    "KILN_ERR_SHAPE",    "KILN_ERR_NOT_FOUND",        "KILN_ERR_NO_DEVICE",
    "KILN_ERR_RUNTIME",  "KILN_ERR_CACHE",            "KILN_ERR_INTERNAL",
    "KILN_ERR_MISUSE",   "KILN_ERR_CANCELLED",        "KILN_ERR_DEADLINE",
};
_Static_assert(sizeof kn_status_names / sizeof kn_status_names[0] == KILN_STATUS_COUNT_,
               "one name per status");

const char *kiln_status_name(kiln_status status) {
    if ((int)status < 0 || status >= KILN_STATUS_COUNT_) return "KILN_STATUS_UNKNOWN";
    return kn_status_names[status];
}

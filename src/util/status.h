/* Internal status helpers: a thread-local last-error message and macros to set and propagate it. */
#ifndef KN_STATUS_H
#define KN_STATUS_H

#include "kiln.h"

#include <stdarg.h>

#if defined(__GNUC__)
#define KN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KN_PRINTF(a, b)
#endif

/* Sets the thread's message (printf-style) and returns `status`, so callers write
 * `return kn_error(KILN_ERR_SHAPE, "...", ...)`. */
kiln_status kn_error(kiln_status status, const char *fmt, ...) KN_PRINTF(2, 3);
kiln_status kn_verror(kiln_status status, const char *fmt, va_list ap);
/* Prepends context ("node 'x' (Conv, opset 11): ") to the current message; returns status. */
kiln_status kn_error_prefix(kiln_status status, const char *fmt, ...) KN_PRINTF(2, 3);
const char *kn_last_error(void);
void kn_clear_error(void);

#define KN_TRY(expr)                                                                               \
    do {                                                                                           \
        kiln_status kn_try_status_ = (expr);                                                       \
        if (kn_try_status_ != KILN_OK) return kn_try_status_;                                      \
    } while (0)

/* A broken internal invariant (never something input can cause). */
#define KN_INTERNAL(msg) kn_error(KILN_ERR_INTERNAL, "internal error at %s:%d: %s", __FILE__, __LINE__, (msg))
#define KN_OOM() kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory at %s:%d", __FILE__, __LINE__)

#endif

/* A minimal unit-test harness: KN_TEST(name) { ... } registers a test; CHECK* record failures
 * and continue; KN_SKIP(reason) skips. tests/unit/main.c runs them all (or those whose name
 * contains argv[1]) and ends with "N passed, N failed, N skipped". */
#ifndef KN_UNIT_H
#define KN_UNIT_H

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct kn_unit_test {
    const char *name;
    void (*fn)(void);
    struct kn_unit_test *next;
} kn_unit_test;

void kn_unit_register(kn_unit_test *t);
void kn_unit_fail(const char *file, int line, const char *fmt, ...);
void kn_unit_skip(const char *reason);
/* Failed checks so far in this run (to tell which case of a loop failed). */
int kn_unit_failures(void);
/* Path of the project's root (for fixtures); from KILN_SOURCE_DIR or the current directory. */
const char *kn_unit_root(void);

#define KN_TEST(name)                                                                              \
    static void name(void);                                                                        \
    static kn_unit_test name##_entry = {#name, name, NULL};                                        \
    __attribute__((constructor)) static void name##_register(void) { kn_unit_register(&name##_entry); } \
    static void name(void)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) kn_unit_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);                        \
    } while (0)
#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) kn_unit_fail(__FILE__, __LINE__, __VA_ARGS__);                               \
    } while (0)
#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long kn_a_ = (long long)(a), kn_b_ = (long long)(b);                                  \
        if (kn_a_ != kn_b_) kn_unit_fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", #a, kn_a_, #b, kn_b_); \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double kn_a_ = (double)(a), kn_b_ = (double)(b);                                           \
        if (!(fabs(kn_a_ - kn_b_) <= (tol))) kn_unit_fail(__FILE__, __LINE__, "%s = %g, expected %g (tol %g)", #a, kn_a_, kn_b_, (double)(tol)); \
    } while (0)
/* A status check that prints kiln_last_error() on mismatch. */
#define CHECK_STATUS(expr, want)                                                                   \
    do {                                                                                           \
        int kn_s_ = (int)(expr);                                                                   \
        if (kn_s_ != (int)(want)) kn_unit_fail(__FILE__, __LINE__, "%s returned %d, expected %d: %s", #expr, kn_s_, (int)(want), kiln_last_error()); \
    } while (0)
/* Checks that the last error message contains a substring. */
#define CHECK_ERROR_HAS(sub)                                                                       \
    do {                                                                                           \
        if (!strstr(kiln_last_error(), (sub))) kn_unit_fail(__FILE__, __LINE__, "error message lacks \"%s\": %s", (sub), kiln_last_error()); \
    } while (0)
/* Skips the test (and returns) when no usable CUDA device is here, saying why. */
#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        const char *why_ = NULL;                                                                   \
        if (!kiln_provider_available("cuda", &why_)) {                                             \
            KN_SKIP(why_ ? why_ : "no CUDA device");                                               \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define KN_SKIP(reason)                                                                            \
    do {                                                                                           \
        kn_unit_skip(reason);                                                                      \
        return;                                                                                    \
    } while (0)

#endif

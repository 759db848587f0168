#include "kiln.h"
#include "unit.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static kn_unit_test *kn_tests, **kn_tail = &kn_tests;
static int kn_failed_now, kn_skipped_now, kn_checks_failed;

void kn_unit_register(kn_unit_test *t) {
    *kn_tail = t;
    kn_tail = &t->next;
}

void kn_unit_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stdout, "    %s:%d: ", file, line);
    vfprintf(stdout, fmt, ap);
    fprintf(stdout, "\n");
    va_end(ap);
    kn_failed_now = 1;
    kn_checks_failed++;
}

int kn_unit_failures(void) { return kn_checks_failed; }

void kn_unit_skip(const char *reason) {
    fprintf(stdout, "    skipped: %s\n", reason);
    kn_skipped_now = 1;
}

const char *kn_unit_root(void) {
    const char *r = getenv("KILN_SOURCE_DIR");
    return r && *r ? r : ".";
}

/* Filters: a test runs when its name contains one of the plain arguments (or there is none) and
 * none of the arguments given as -NAME. --shard I/N (read in main) keeps every Nth selected test. */
static int selected(const char *name, int argc, char **argv) {
    int any_plain = 0, match = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shard")) { i++; continue; }
        if (argv[i][0] == '-') {
            if (argv[i][1] && strstr(name, argv[i] + 1)) return 0;
            continue;
        }
        any_plain = 1;
        if (strstr(name, argv[i])) match = 1;
    }
    return !any_plain || match;
}

int main(int argc, char **argv) {
    int passed = 0, failed = 0, skipped = 0;
    /* --shard I/N: the selected tests numbered I, I+N, I+2N, ... (from 0), so one long list can be
     * spread over processes (scripts/gpu_test.sh runs the GPU unit tests that way) */
    int shard = 0, shards = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--shard")) continue;
        if (i + 1 >= argc || sscanf(argv[i + 1], "%d/%d", &shard, &shards) != 2 || shards < 1 || shard < 0 ||
            shard >= shards) {
            fprintf(stderr, "--shard wants I/N with 0 <= I < N\n");
            return 2;
        }
    }
    int index = 0;
    for (kn_unit_test *t = kn_tests; t; t = t->next) {
        if (!selected(t->name, argc, argv)) continue;
        if (index++ % shards != shard) continue;
        kn_failed_now = kn_skipped_now = 0;
        t->fn();
        if (kn_failed_now) {
            printf("FAIL %s\n", t->name);
            failed++;
        } else if (kn_skipped_now) {
            printf("SKIP %s\n", t->name);
            skipped++;
        } else {
            printf("ok   %s\n", t->name);
            passed++;
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}

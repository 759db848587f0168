/* Files and folders under /tmp for tests that write what a loader or the cache then reads. */
#ifndef KN_TEST_TMPFILES_H
#define KN_TEST_TMPFILES_H

#include <stdio.h>
#include <stdlib.h>

/* Writes the n bytes at d to path (replacing it): 0, or -1 where they could not all be written. */
static inline int ttf_write(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(d, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

/* A new empty folder /tmp/kiln-<what>-test-<tag>-XXXXXX, or NULL; the name lives in a ring of 16,
 * so a test may hold that many at once. */
static inline char *ttf_tmp_dir(const char *what, const char *tag) {
    static char dirs[16][256];
    static int n;
    char *d = dirs[n++ % 16];
    snprintf(d, 256, "/tmp/kiln-%s-test-%s-XXXXXX", what, tag);
    return mkdtemp(d);
}

/* Removes dir and all below it (a message on stderr where that failed). */
static inline void ttf_rm_rf(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

#endif

#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symbolic link";
    return "not a regular file";
}

kiln_status kn_file_open_regular(const char *path, bool nofollow, const char *what, int *fd_out, struct stat *sb_out) {
    *fd_out = -1;
    if (!what) what = "file";
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (nofollow ? O_NOFOLLOW : 0));
    if (fd < 0) {
        int e = errno;
        kiln_status st = nofollow && e == ELOOP
                             ? kn_error(KILN_ERR_IO, "%s: cannot open: the %s is a symbolic link, which kiln does not "
                                        "follow here", path, what)
                             : kn_error(KILN_ERR_IO, "%s: cannot open: %s", path, strerror(e));
        errno = e; /* for callers that word it their way */
        return st;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        kiln_status st = kn_error(KILN_ERR_IO, "%s '%s' cannot be examined (fstat): %s", what, path, strerror(errno));
        close(fd);
        return st;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        errno = 0;
        return kn_error(S_ISDIR(sb.st_mode) ? KILN_ERR_INVALID_ARGUMENT : KILN_ERR_IO, "%s: the %s is %s, not a regular file",
                        path, what, kind_of(sb.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (sb_out) *sb_out = sb;
    *fd_out = fd;
    return KILN_OK;
}

bool kn_file_pread_all(int fd, void *buf, size_t n, uint64_t off) {
    size_t got = 0;
    while (got < n) {
        size_t chunk = n - got > ((size_t)1 << 30) ? ((size_t)1 << 30) : n - got;
        ssize_t r = pread(fd, (uint8_t *)buf + got, chunk, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return false;
        if (r == 0) {
            errno = ENODATA;
            return false;
        }
        got += (size_t)r;
    }
    return true;
}

kiln_status kn_file_read_all(const char *path, unsigned char **data_out, size_t *size_out) {
    *data_out = NULL;
    *size_out = 0;
    int fd;
    struct stat sb = {0};
    KN_TRY(kn_file_open_regular(path, false, "file", &fd, &sb));
    if ((uint64_t)sb.st_size >= SIZE_MAX) {
        close(fd);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "%s: %llu bytes do not fit in memory", path, (unsigned long long)sb.st_size);
    }
    size_t size = (size_t)sb.st_size;
    unsigned char *d = malloc(size + 1);
    if (!d) {
        close(fd);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory reading %zu bytes", path, size);
    }
    bool ok = !size || kn_file_pread_all(fd, d, size, 0);
    int e = errno;
    close(fd);
    if (!ok) {
        free(d);
        return kn_error(KILN_ERR_IO, "%s: reading %zu bytes failed: %s", path, size,
                        e == ENODATA ? "the file became shorter while being read" : strerror(e));
    }
    d[size] = 0;
    *data_out = d;
    *size_out = size;
    return KILN_OK;
}

void *kn_file_alloc_owned(size_t size, size_t *cap_out) {
    const size_t huge = (size_t)2 << 20;
    if (size < huge) {
        void *m = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        *cap_out = size ? size : 1;
        return m == MAP_FAILED ? NULL : m;
    }
    size_t cap = (size + huge - 1) & ~(huge - 1);
    if (cap < size || cap + huge < cap) return NULL;
    uint8_t *raw = mmap(NULL, cap + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uint8_t *m = (uint8_t *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    if (m > raw) munmap(raw, (size_t)(m - raw));
    if (raw + cap + huge > m + cap) munmap(m + cap, (size_t)(raw + cap + huge - (m + cap)));
#ifdef MADV_HUGEPAGE
    madvise(m, cap, MADV_HUGEPAGE); /* advice only: without THP the pages are 4 KiB */
#endif
    *cap_out = cap;
    return m;
}

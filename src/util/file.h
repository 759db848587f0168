/* Small file helpers. */
#ifndef KN_FILE_H
#define KN_FILE_H

#include "util/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* Opens path read-only for a file kiln is about to read, checked before any byte is read: opened
 * non-blocking (a FIFO or a device given as a model or data file cannot hang the open), then
 * fstat'ed, and refused unless it is a regular file; the descriptor is then made blocking again.
 * With nofollow a symbolic link as the last component is refused too. `what` names the file in
 * messages ("model", "external data file", ...). *sb_out (may be NULL) gets the fstat result.
 * On failure errno is open's error, or 0 when the file opened but is not a regular file. */
kiln_status kn_file_open_regular(const char *path, bool nofollow, const char *what, int *fd_out, struct stat *sb_out);
/* Reads exactly n bytes at offset off (retrying short reads and EINTR). false on an error or an
 * early end of file (errno is the read's error, or ENODATA at an early end of file). */
bool kn_file_pread_all(int fd, void *buf, size_t n, uint64_t off);
/* Memory to read a file into, that a model can own and unmap: an anonymous private mapping of at
 * least size bytes (munmap(p, *cap_out)), 2 MiB-aligned and advised for transparent huge pages
 * when it is that large, so the kernel faults it in 2 MiB at a time (a 21 MB compiled file read
 * in 6-24 ms instead of 38-49 ms with 4 KiB faults: bench/results/cache-read-2026-12-02.md).
 * NULL when it cannot be had. */
void *kn_file_alloc_owned(size_t size, size_t *cap_out);
/* Reads a whole file into a malloc'ed buffer (NUL-terminated beyond size), through
 * kn_file_open_regular. */
kiln_status kn_file_read_all(const char *path, unsigned char **data_out, size_t *size_out);

#endif

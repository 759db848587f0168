#include "util/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

kiln_status kn_file_read_all(const char *path, unsigned char **data_out, size_t *size_out) {
    *data_out = NULL;
    *size_out = 0;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return kn_error(KILN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return kn_error(KILN_ERR_IO, "%s: not a regular file", path);
    FILE *f = fopen(path, "rb");
    if (!f) return kn_error(KILN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t size = (size_t)sb.st_size;
    unsigned char *d = malloc(size + 1);
    if (!d) {
        fclose(f);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory reading %zu bytes", path, size);
    }
    size_t got = size ? fread(d, 1, size, f) : 0;
    fclose(f);
    if (got != size) {
        free(d);
        return kn_error(KILN_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, size);
    }
    d[size] = 0;
    *data_out = d;
    *size_out = size;
    return KILN_OK;
}

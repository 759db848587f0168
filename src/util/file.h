/* Small file helpers. */
#ifndef KN_FILE_H
#define KN_FILE_H

#include "util/status.h"

#include <stddef.h>

/* Reads a whole file into a malloc'ed buffer (NUL-terminated beyond size). */
kiln_status kn_file_read_all(const char *path, unsigned char **data_out, size_t *size_out);

#endif

/* NumPy .npy files (format versions 1-3, C order, little-endian numeric and bool types). */
#ifndef KN_NPY_H
#define KN_NPY_H

#include "ir/tensor.h"

kiln_status kn_npy_read(const char *path, kn_tensor **out);
kiln_status kn_npy_parse(const unsigned char *data, size_t size, const char *what, kn_tensor **out);
kiln_status kn_npy_write(const char *path, const kn_tensor *t);

#endif

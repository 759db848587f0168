/* Shared between the container validation (format.c) and the readers (reader.c). */
#ifndef KN_CACHE_FORMAT_INTERNAL_H
#define KN_CACHE_FORMAT_INTERNAL_H

#include "cache/format.h"

/* Validates f->data[0..f->size) as a compiled file of file_size bytes: everything, or with
 * header_only the header, key block and section table (f->size may then be just their bytes). */
kiln_status kn_cfile_parse(kn_cfile *f, size_t file_size, bool header_only);

#endif

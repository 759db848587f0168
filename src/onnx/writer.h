/* The ONNX writer: a model in kiln's IR (typically the optimised graph) as a ModelProto that
 * onnx.load, onnx.checker and Netron open. Kiln's fused operators are written as nodes of the
 * custom domain "kiln" (version 1), which the model imports. Initializers are written inline
 * (raw_data), every value with an inferred type gets a value_info, subgraphs are written in full.
 * Dead nodes are skipped. */
#ifndef KN_ONNX_WRITER_H
#define KN_ONNX_WRITER_H

#include "ir/graph.h"

#include <stddef.h>

/* The serialised model in a malloc'ed buffer the caller frees. */
kiln_status kn_onnx_write_memory(const kn_model *m, unsigned char **data_out, size_t *size_out);
/* Writes the model to path (through a temporary file renamed into place). */
kiln_status kn_onnx_write_file(const kn_model *m, const char *path);

#endif

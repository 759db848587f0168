/* What a file that failed to load as an ONNX model (or tensor) is instead: a cheap look at its
 * bytes, so the message can say "notes.txt is not an ONNX model (it looks like text): ..." first,
 * and the parser's detail after. */
#ifndef KN_ONNX_SNIFF_H
#define KN_ONNX_SNIFF_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether data has the outline of a ModelProto: every top-level field well formed with the wire
 * type ONNX gives it, and a graph. A file with this outline that fails to load is a broken ONNX
 * model; one without it is not an ONNX model at all. */
bool kn_onnx_looks_like_model(const uint8_t *data, size_t size);
/* The same for a value file: a TensorProto with a data_type, or a SequenceProto/OptionalProto with
 * an elem_type. */
bool kn_onnx_looks_like_value(const uint8_t *data, size_t size);
/* A short description of what data looks like when it is not what was expected ("a kiln compiled
 * file", "text", "a .npy array", "an ONNX model", ...), or NULL when nothing is recognised. */
const char *kn_file_kind_hint(const uint8_t *data, size_t size);

/* Rewrites the current error (status st, raised while loading what: a path or "the data") as
 * "WHAT is not KIND (it looks like HINT): DETAIL" and returns st. kind is "an ONNX model" or "an
 * ONNX tensor file"; hint is kn_file_kind_hint's (taken before the bytes went away), or NULL. The
 * detail is the error's message without a leading "WHAT: ". */
kiln_status kn_not_a(kiln_status st, const char *what, const char *kind, const char *hint);

#endif

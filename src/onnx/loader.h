/* ONNX model loading: the protobuf wire format read directly, with a bounds check on every
 * length, index and offset. A malformed file is an error naming the byte offset and the field,
 * never a crash or a read outside the buffer. */
#ifndef KN_LOADER_H
#define KN_LOADER_H

#include "ir/graph.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Loads a model file. The file is read into memory the model owns (an anonymous mapping;
 * KILN_MODEL_READ=0 maps the file in place instead, MAP_PRIVATE); little-endian raw_data
 * initializers point into those bytes instead of being copied (the model keeps them until
 * kn_model_free). Read, a later change or truncation of the file cannot reach the model.
 * External data is resolved relative to the model's folder; a location that escapes that folder
 * (absolute, or with ".."), a missing file or one shorter than offset+length is an error; its
 * bytes are read (pread) into tensors the model owns, never mapped. */
kiln_status kn_onnx_load_file(const char *path, kn_model **out);

/* kn_onnx_load_file in two steps, for a caller that looks at the bytes before loading them (the
 * compiled cache hashes the very bytes it then compiles, so a file changing between the two
 * cannot put one version's compiled result under another's key). */
typedef struct kn_model_file {
    const uint8_t *data; /* the file's bytes */
    size_t size;
    char *dir;           /* the folder external data resolves against (malloc'ed) */
    bool mapped;         /* mapped in place (KILN_MODEL_READ=0), not read */
    void *mem;           /* what is unmapped */
    size_t mem_size;
} kn_model_file;
/* Reads (or maps) the model file: regular files only, opened non-blocking; an empty or shortened
 * file is an error naming it. */
kiln_status kn_onnx_file_read(const char *path, kn_model_file *f);
/* Loads the model from f's bytes, which it takes over (f is emptied, on failure too). path names
 * the file in messages. */
kiln_status kn_onnx_load_read(const char *path, kn_model_file *f, kn_model **out);
/* Frees what f holds (nothing after kn_onnx_load_read). */
void kn_onnx_file_release(kn_model_file *f);
/* Loads from memory; the bytes are copied where needed (data is borrowed for the call only).
 * base_dir: folder for external data, or NULL (then external data is an error). */
kiln_status kn_onnx_load_memory(const void *data, size_t size, const char *base_dir, kn_model **out);

/* Parses a serialized TensorProto (or SequenceProto / OptionalProto, for test data) into a new
 * owning tensor. The name field, if any, goes to *name_out (malloc'ed; may be NULL). */
kiln_status kn_onnx_parse_value(const uint8_t *data, size_t size, kn_tensor **out, char **name_out);
/* Reads a .pb file holding a TensorProto / SequenceProto / OptionalProto. */
kiln_status kn_onnx_read_value_file(const char *path, kn_tensor **out, char **name_out);

/* As above, for a caller that knows which message the bytes hold (the ONNX test runner takes it
 * from the model's input/output type): kind is KN_VALUE_TENSOR (TensorProto), KN_VALUE_SEQUENCE
 * (SequenceProto) or KN_VALUE_OPTIONAL (OptionalProto), or -1 to guess as the functions above do:
 * a TensorProto when the bytes parse as one; otherwise an OptionalProto when elem_type is
 * UNDEFINED (an empty optional) or it holds exactly one sequence_value; otherwise a
 * SequenceProto. The guess cannot tell an optional tensor from a one-element sequence. */
kiln_status kn_onnx_parse_value_as(const uint8_t *data, size_t size, int kind, kn_tensor **out, char **name_out);
kiln_status kn_onnx_read_value_file_as(const char *path, int kind, kn_tensor **out, char **name_out);

#endif

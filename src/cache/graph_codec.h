/* The graph section of a compiled file: a model's IR after optimisation, serialised.
 *
 * Layout (little-endian; "str" is a u32 index into the string table, 0xffffffff for NULL):
 *   string table   u32 count, then per string: u32 length, bytes (may hold NULs: attribute
 *                  strings keep their length)
 *   tensor table   u32 count, then per tensor: u8 kind, i32 dtype, u8 rank, i64 dims[rank], and
 *                    tensor of a fixed-size or packed sub-byte type: u64 offset into the weights
 *                    section (64-byte aligned), u64 byte size
 *                    STRING tensor: per element u32 length, bytes
 *                    sequence / optional: u32 item count, items as tensor records
 *   model          i64 ir_version, str producer_name, producer_version, domain, doc,
 *                  i64 model_version, u32 opset count + (str domain, i64 version)*, main graph
 *   graph          str name, u32 value count + values, u32 node count + nodes,
 *                  u32 input count + i32 ids, u32 output count + i32 ids
 *   value          str name, type, u8 flags (1 graph input, 2 graph output, 4 outer), i32 tensor
 *                  index of its constant or -1
 *   type           u8 kind, u8 elem_kind, i32 dtype, i32 rank (-1..12), (i64 value, str symbol)
 *                  per dim, i32 n_shape_value (-1..12), (i64, str) per element
 *   node           str name, op_type, domain, i32 opset, u32 + i32 input ids, u32 + i32 output
 *                  ids, u32 attribute count + attributes, i32 provider
 *   attribute      str name, u8 type, str ref_attr_name, then by type: f32 | i64 | str |
 *                  i32 tensor | graph | u32 n + f32* | u32 n + i64* | u32 n + str* |
 *                  u32 n + i32* | u32 n + graph* | u32 n + type*
 * Dead nodes are left out; producers and use counts are recomputed on reading. */
#ifndef KN_CACHE_GRAPH_CODEC_H
#define KN_CACHE_GRAPH_CODEC_H

#include "cache/buf.h"
#include "ir/graph.h"

typedef struct kn_blob {
    const void *data;
    uint64_t size, offset; /* offset in the weights section */
} kn_blob;

typedef struct kn_graph_blobs {
    kn_blob *items;
    int n, cap;
    uint64_t total; /* size of the weights section (64-byte multiple) */
} kn_graph_blobs;

/* Serialises m into out; the weight bytes are not copied but listed in blobs, in offset order. */
kiln_status kn_graph_encode(const kn_model *m, kn_buf *out, kn_graph_blobs *blobs);
/* Builds a model from a graph section; tensors of fixed-size types become views into weights
 * (which must stay mapped as long as the model: the caller hands its mapping to the model).
 * Errors are KILN_ERR_CACHE naming the file, the section, the byte offset and the field. */
kiln_status kn_graph_decode(const uint8_t *data, size_t size, uint8_t *weights, size_t weights_size,
                            const char *file, kn_model **out);

#endif

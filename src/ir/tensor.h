/* Tensors: the runtime value type shared by the loader, the kernels and the API.
 *
 * A kiln_tensor is a dense host tensor (kind KN_VALUE_TENSOR), or, for the ONNX sequence and
 * optional types, a container of tensors (KN_VALUE_SEQUENCE, KN_VALUE_OPTIONAL). */
#ifndef KN_TENSOR_H
#define KN_TENSOR_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where a tensor's elements live. Device memory is owned by the backend that allocated it and
 * goes back to it through the hook that backend registers (kn_tensor_set_device_free). */
typedef enum kn_device {
    KN_DEVICE_HOST = 0,
    KN_DEVICE_CUDA = 1,
} kn_device;

typedef enum kn_value_kind {
    KN_VALUE_TENSOR = 0,
    KN_VALUE_SEQUENCE = 1,
    KN_VALUE_OPTIONAL = 2, /* n_items is 0 (none) or 1 */
} kn_value_kind;

struct kiln_tensor {
    kn_value_kind kind;
    kiln_dtype dtype; /* element type; for a sequence/optional, that of its elements */
    int rank;
    int64_t dims[KILN_MAX_RANK];
    void *data;     /* elements; for STRING an array of char* each malloc'ed and owned */
    size_t nbytes;  /* bytes of `data` (for STRING: count * sizeof(char*)) */
    bool owns_data; /* free `data` (and the strings) on destroy */
    struct kn_buffer_pool *pool; /* when set, `data` goes back to this pool on free */
    size_t capacity;             /* bytes of the `data` block (>= nbytes) */
    kn_device device;            /* KN_DEVICE_HOST unless `data` is device memory */
    void *device_owner;          /* for device memory: the allocator the free hook returns it to */
    int device_id;               /* for device memory: the device ordinal */
    /* containers */
    struct kiln_tensor **items;
    int n_items;
};

typedef struct kiln_tensor kn_tensor;

int64_t kn_shape_count(const int64_t *dims, int rank); /* product; -1 on overflow or negative */
/* A new host tensor holding x (host, fixed-size elements) with its dims in the order perm gives:
 * out->dims[d] = x->dims[perm[d]]. */
kiln_status kn_tensor_permuted(const kn_tensor *x, const int *perm, kn_tensor **out);
/* The element strides of a contiguous operand of shape dims[0..rank) broadcast onto out_rank dims
 * (aligned to the right, rank <= out_rank): 0 along its size-1 and missing dims. */
void kn_broadcast_strides(const int64_t *dims, int rank, int out_rank, int64_t *strides);
/* Drops the size-1 dims of `dims` (rank of them) and merges neighbours that every one of n_ops
 * operands walks contiguously (strides[k][d] in elements, 0 where broadcast): dims_out[0..r) and
 * strides_out[k][0..r), r returned (1 for a single element). The loops of the CPU and CUDA
 * elementwise kernels run over the result. dims_out/strides_out may not alias the inputs. */
int kn_shape_collapse(int n_ops, int rank, const int64_t *dims, int64_t (*strides)[KILN_MAX_RANK], int64_t *dims_out,
                      int64_t (*strides_out)[KILN_MAX_RANK]);
int64_t kn_tensor_count(const kn_tensor *t);

/* New owning tensor with zeroed memory; dims borrowed. Fails on negative dims, rank > max,
 * or an overflowing size (message names the shape). */
kiln_status kn_tensor_new(kiln_dtype dtype, int rank, const int64_t *dims, kn_tensor **out);
/* New tensor that borrows `data` (not freed). */
kiln_status kn_tensor_new_view(kiln_dtype dtype, int rank, const int64_t *dims, void *data,
                               size_t nbytes, kn_tensor **out);
kiln_status kn_tensor_new_sequence(kiln_dtype elem_dtype, kn_tensor **out);
kiln_status kn_tensor_new_optional(kiln_dtype elem_dtype, kn_tensor *item /* owned, may be NULL */,
                                   kn_tensor **out);
/* Appends (takes ownership of) item to a sequence. */
kiln_status kn_sequence_append(kn_tensor *seq, kn_tensor *item);
/* A per-session pool of element buffers: a run's tensors reuse the blocks of the previous run
 * instead of going back to malloc (and the page faults of fresh memory). Thread-safe. Each tensor
 * from it holds a reference: an output handed to the caller returns its block to the pool when
 * destroyed, and destroying the pool frees it once the last such tensor is gone. */
typedef struct kn_buffer_pool kn_buffer_pool;
kiln_status kn_buffer_pool_create(kn_buffer_pool **out);
/* A pool whose blocks come from alloc and go back through release (pinned host memory: a device
 * copies into it at full speed), keeping at most max_cached bytes of idle blocks. Where alloc
 * refuses, the tensor gets plain memory (and does not come back to this pool). */
typedef struct kn_host_allocator {
    void *(*alloc)(size_t bytes);
    void (*release)(void *data);
    size_t max_cached;
} kn_host_allocator;
kiln_status kn_buffer_pool_create_with(const kn_host_allocator *a, kn_buffer_pool **out);
void kn_buffer_pool_destroy(kn_buffer_pool *p);
/* As kn_tensor_new, with memory from the pool (NULL pool = plain allocation); zeroed only when
 * `zero` is set. */
kiln_status kn_tensor_new_pooled(kn_buffer_pool *pool, bool zero, kiln_dtype dtype, int rank,
                                 const int64_t *dims, kn_tensor **out);

/* The function that frees device memory of tensors on `device` (registered by that backend). */
typedef void (*kn_device_free_fn)(void *owner, void *data, size_t capacity);
void kn_tensor_set_device_free(kn_device device, kn_device_free_fn fn);
/* A tensor header for device memory (owned: freed through the device's hook with `owner`). */
kiln_status kn_tensor_new_device(kn_device device, void *owner, void *data, size_t capacity,
                                 kiln_dtype dtype, int rank, const int64_t *dims, kn_tensor **out);

/* A tensor header over caller device memory (not freed: the caller owns it). */
kiln_status kn_tensor_wrap_device(kn_device device, int device_id, void *data, size_t bytes, kiln_dtype dtype,
                                  int rank, const int64_t *dims, kn_tensor **out);

/* Deep copy (data copied, owning; host tensors only). */
kiln_status kn_tensor_clone(const kn_tensor *src, kn_tensor **out);
void kn_tensor_free(kn_tensor *t);

/* "float[1,3,224,224]" into buf; returns buf. */
const char *kn_tensor_describe(const kn_tensor *t, char *buf, size_t cap);
/* "[1,3,224,224]" into buf; returns buf. */
const char *kn_dims_str(const int64_t *dims, int rank, char *buf, size_t cap);

/* Reads element i of a numeric tensor as double / int64 (any numeric or bool dtype, the packed
 * types and float8e8m0 included). */
double kn_tensor_get_f64(const kn_tensor *t, int64_t i);
int64_t kn_tensor_get_i64(const kn_tensor *t, int64_t i);
/* Whether element i of a numeric tensor is not zero (-0 is zero, NaN is not; complex: either
 * part), and how many are (by typed loops: NonZero's output length, which shape inference takes
 * again at every run of a data-dependent shape). */
bool kn_tensor_elem_nonzero(const kn_tensor *t, int64_t i);
int64_t kn_tensor_count_nonzero(const kn_tensor *t);
/* out[i] = 1 where element i is not zero, else 0 (out: one byte per element). */
void kn_tensor_nonzero_mask(const kn_tensor *t, uint8_t *out);
/* Writes element i of a numeric tensor from a double / int64 (converted to its dtype). */
void kn_tensor_set_f64(kn_tensor *t, int64_t i, double v);
void kn_tensor_set_i64(kn_tensor *t, int64_t i, int64_t v);

/* Half-precision conversions (round to nearest even). */
float kn_f16_to_f32(uint16_t h);
uint16_t kn_f32_to_f16(float f);
float kn_bf16_to_f32(uint16_t h);
uint16_t kn_f32_to_bf16(float f);

/* Bits per element: 4 for uint4/int4/float4e2m1, 2 for uint2/int2, else 8 * kiln_dtype_size
 * (0 for unknown types). */
int kn_dtype_bits(kiln_dtype t);
/* Fewer than 8 bits an element: stored packed, element 0 in the lowest bits of byte 0. Kernels
 * cannot address such elements by byte offset (kiln_dtype_size is 0): use kn_packed_get/set. */
bool kn_dtype_is_packed(kiln_dtype t);
/* Bytes that `count` elements of t occupy (packed types: ceil(count * bits / 8)). */
size_t kn_dtype_nbytes(kiln_dtype t, int64_t count);
/* The raw code of element i of packed data of type t, and its store (other bits kept). */
unsigned kn_packed_get(const void *data, kiln_dtype t, int64_t i);
void kn_packed_set(void *data, kiln_dtype t, int64_t i, unsigned code);

bool kn_dtype_is_float(kiln_dtype t); /* float, double, float16, bfloat16 (not float8) */
bool kn_dtype_is_int(kiln_dtype t);   /* signed or unsigned integers of 8..64 bits */
bool kn_dtype_is_signed_int(kiln_dtype t);
bool kn_dtype_is_valid(int t);

#endif

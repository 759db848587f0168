#include "ir/tensor.h"
#include "util/limits.h"

#include "util/status.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} kn_dtypes[] = {
    [KILN_DTYPE_UNDEFINED] = {"undefined", 0}, [KILN_DTYPE_FLOAT] = {"float", 4},
    [KILN_DTYPE_UINT8] = {"uint8", 1},         [KILN_DTYPE_INT8] = {"int8", 1},
    [KILN_DTYPE_UINT16] = {"uint16", 2},       [KILN_DTYPE_INT16] = {"int16", 2},
    [KILN_DTYPE_INT32] = {"int32", 4},         [KILN_DTYPE_INT64] = {"int64", 8},
    [KILN_DTYPE_STRING] = {"string", sizeof(char *)}, [KILN_DTYPE_BOOL] = {"bool", 1},
    [KILN_DTYPE_FLOAT16] = {"float16", 2},     [KILN_DTYPE_DOUBLE] = {"double", 8},
    [KILN_DTYPE_UINT32] = {"uint32", 4},       [KILN_DTYPE_UINT64] = {"uint64", 8},
    [KILN_DTYPE_COMPLEX64] = {"complex64", 8}, [KILN_DTYPE_COMPLEX128] = {"complex128", 16},
    [KILN_DTYPE_BFLOAT16] = {"bfloat16", 2},   [KILN_DTYPE_FLOAT8E4M3FN] = {"float8e4m3fn", 1},
    [KILN_DTYPE_FLOAT8E4M3FNUZ] = {"float8e4m3fnuz", 1},
    [KILN_DTYPE_FLOAT8E5M2] = {"float8e5m2", 1}, [KILN_DTYPE_FLOAT8E5M2FNUZ] = {"float8e5m2fnuz", 1},
    [KILN_DTYPE_UINT4] = {"uint4", 0},         [KILN_DTYPE_INT4] = {"int4", 0},
    [KILN_DTYPE_FLOAT4E2M1] = {"float4e2m1", 0}, [KILN_DTYPE_FLOAT8E8M0] = {"float8e8m0", 1},
    [KILN_DTYPE_UINT2] = {"uint2", 0},         [KILN_DTYPE_INT2] = {"int2", 0},
};
_Static_assert(sizeof kn_dtypes / sizeof kn_dtypes[0] == KILN_DTYPE_COUNT_, "one entry per dtype");

bool kn_dtype_is_valid(int t) { return t > 0 && t < KILN_DTYPE_COUNT_; }

const char *kiln_dtype_name(kiln_dtype t) {
    return ((int)t >= 0 && t < KILN_DTYPE_COUNT_) ? kn_dtypes[t].name : "?";
}

/* STRING elements are stored as char* pointers, so their size is a pointer's. */
size_t kiln_dtype_size(kiln_dtype t) {
    return ((int)t >= 0 && t < KILN_DTYPE_COUNT_) ? kn_dtypes[t].size : 0;
}

int kn_dtype_bits(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_UINT4:
    case KILN_DTYPE_INT4:
    case KILN_DTYPE_FLOAT4E2M1: return 4;
    case KILN_DTYPE_UINT2:
    case KILN_DTYPE_INT2: return 2;
    default: return (int)(8 * kiln_dtype_size(t));
    }
}

bool kn_dtype_is_packed(kiln_dtype t) {
    int b = kn_dtype_bits(t);
    return b > 0 && b < 8;
}

size_t kn_dtype_nbytes(kiln_dtype t, int64_t count) {
    if (count <= 0) return 0;
    if (kn_dtype_is_packed(t)) return (size_t)(((uint64_t)count * (uint64_t)kn_dtype_bits(t) + 7) / 8);
    return (size_t)count * kiln_dtype_size(t);
}

unsigned kn_packed_get(const void *data, kiln_dtype t, int64_t i) {
    int bits = kn_dtype_bits(t), per = 8 / bits;
    unsigned byte = ((const uint8_t *)data)[i / per];
    return (byte >> ((i % per) * bits)) & ((1u << bits) - 1);
}

void kn_packed_set(void *data, kiln_dtype t, int64_t i, unsigned code) {
    int bits = kn_dtype_bits(t), per = 8 / bits, sh = (int)(i % per) * bits;
    unsigned mask = ((1u << bits) - 1) << sh;
    uint8_t *p = (uint8_t *)data + i / per;
    *p = (uint8_t)((*p & ~mask) | ((code << sh) & mask));
}

/* float4 e2m1: sign, 2 exponent bits (bias 1), 1 mantissa bit; no inf or NaN. */
static double f4e2m1_value(unsigned code) {
    static const double mag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
    return (code & 8) ? -mag[code & 7] : mag[code & 7];
}

/* The value of element i of a packed tensor (signed integer types sign-extended). */
static double packed_value(const kn_tensor *t, int64_t i) {
    unsigned c = kn_packed_get(t->data, t->dtype, i);
    switch (t->dtype) {
    case KILN_DTYPE_INT4: return (double)((int)c - ((c & 8) ? 16 : 0));
    case KILN_DTYPE_INT2: return (double)((int)c - ((c & 2) ? 4 : 0));
    case KILN_DTYPE_FLOAT4E2M1: return f4e2m1_value(c);
    default: return (double)c;
    }
}

bool kn_dtype_is_float(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_DOUBLE || t == KILN_DTYPE_FLOAT16 ||
           t == KILN_DTYPE_BFLOAT16;
}
bool kn_dtype_is_signed_int(kiln_dtype t) {
    return t == KILN_DTYPE_INT8 || t == KILN_DTYPE_INT16 || t == KILN_DTYPE_INT32 ||
           t == KILN_DTYPE_INT64;
}
bool kn_dtype_is_int(kiln_dtype t) {
    return kn_dtype_is_signed_int(t) || t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_UINT16 ||
           t == KILN_DTYPE_UINT32 || t == KILN_DTYPE_UINT64;
}

int64_t kn_shape_count(const int64_t *dims, int rank) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0) return -1;
        /* checked without a division: this runs several times per node of every run */
        if (__builtin_mul_overflow(n, dims[i], &n)) return -1;
    }
    return n;
}

int64_t kn_tensor_count(const kn_tensor *t) { return kn_shape_count(t->dims, t->rank); }

kiln_status kn_tensor_permuted(const kn_tensor *x, const int *perm, kn_tensor **out) {
    const int r = x->rank;
    int64_t dims[KILN_MAX_RANK] = {0}, in_stride[KILN_MAX_RANK], stride[KILN_MAX_RANK], idx[KILN_MAX_RANK] = {0};
    for (int d = 0; d < r; d++) dims[d] = x->dims[perm[d]];
    KN_TRY(kn_tensor_new(x->dtype, r, dims, out));
    const size_t es = kiln_dtype_size(x->dtype);
    if (r > 0) in_stride[r - 1] = 1;
    for (int d = r - 2; d >= 0; d--) in_stride[d] = in_stride[d + 1] * x->dims[d + 1];
    for (int d = 0; d < r; d++) stride[d] = in_stride[perm[d]]; /* out's dim d walks x's dim perm[d] */
    const char *src = x->data;
    char *dst = (*out)->data;
    int64_t n = kn_tensor_count(*out), off = 0;
    for (int64_t i = 0; i < n; i++) {
        memcpy(dst + (size_t)i * es, src + (size_t)off * es, es);
        for (int d = r - 1; d >= 0; d--) {
            off += stride[d];
            if (++idx[d] < dims[d]) break;
            off -= stride[d] * dims[d];
            idx[d] = 0;
        }
    }
    return KILN_OK;
}

void kn_broadcast_strides(const int64_t *dims, int rank, int out_rank, int64_t *strides) {
    int64_t s = 1;
    for (int d = out_rank - 1; d >= 0; d--) {
        int j = d - (out_rank - rank);
        int64_t e = j >= 0 ? dims[j] : 1;
        strides[d] = e == 1 ? 0 : s;
        s *= e;
    }
}

int kn_shape_collapse(int n_ops, int rank, const int64_t *dims, int64_t (*strides)[KILN_MAX_RANK], int64_t *dims_out,
                      int64_t (*strides_out)[KILN_MAX_RANK]) {
    /* drop size-1 dims, then merge neighbours that are contiguous in every operand */
    int r = 0;
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1) continue;
        if (r > 0) {
            bool merge = true;
            for (int k = 0; k < n_ops; k++)
                if (strides_out[k][r - 1] != strides[k][d] * dims[d]) merge = false;
            if (merge) {
                dims_out[r - 1] *= dims[d];
                for (int k = 0; k < n_ops; k++) strides_out[k][r - 1] = strides[k][d];
                continue;
            }
        }
        dims_out[r] = dims[d];
        for (int k = 0; k < n_ops; k++) strides_out[k][r] = strides[k][d];
        r++;
    }
    if (r == 0) {
        dims_out[0] = 1;
        for (int k = 0; k < n_ops; k++) strides_out[k][0] = 0;
        r = 1;
    }
    return r;
}

const char *kn_dims_str(const int64_t *dims, int rank, char *buf, size_t cap) {
    size_t used = 0;
    if (cap == 0) return buf;
    buf[0] = 0;
    used += (size_t)snprintf(buf + used, cap - used, "[");
    for (int i = 0; i < rank && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, i ? ",%lld" : "%lld", (long long)dims[i]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return buf;
}

const char *kn_tensor_describe(const kn_tensor *t, char *buf, size_t cap) {
    char d[256];
    if (t->kind == KN_VALUE_SEQUENCE)
        snprintf(buf, cap, "sequence<%s> of %d", kiln_dtype_name(t->dtype), t->n_items);
    else if (t->kind == KN_VALUE_OPTIONAL)
        snprintf(buf, cap, "optional<%s>%s", kiln_dtype_name(t->dtype), t->n_items ? "" : " (none)");
    else
        snprintf(buf, cap, "%s%s", kiln_dtype_name(t->dtype), kn_dims_str(t->dims, t->rank, d, sizeof d));
    return buf;
}

static kiln_status check_shape(kiln_dtype dtype, int rank, const int64_t *dims, int64_t *count) {
    char d[256];
    if (!kn_dtype_is_valid((int)dtype))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "invalid element type %d", (int)dtype);
    if (rank < 0 || rank > KILN_MAX_RANK)
        return kn_error(KILN_ERR_UNSUPPORTED, "rank %d is outside 0..%d", rank, KILN_MAX_RANK);
    if (rank > 0 && !dims) return kn_error(KILN_ERR_INVALID_ARGUMENT, "dims is NULL for rank %d", rank);
    int64_t n = kn_shape_count(dims, rank);
    if (n < 0)
        return kn_error(KILN_ERR_SHAPE, "shape %s has a negative dimension or too many elements",
                        kn_dims_str(dims, rank, d, sizeof d));
    size_t es = kiln_dtype_size(dtype);
    if (kn_dtype_bits(dtype) == 0)
        return kn_error(KILN_ERR_UNSUPPORTED, "element type %s has no byte size kiln supports",
                        kiln_dtype_name(dtype));
    if (es == 0) es = 1; /* packed: fewer bytes than elements */
    if ((uint64_t)n > (uint64_t)(INT64_MAX / 2) / es)
        return kn_error(KILN_ERR_SHAPE, "shape %s of %s is too large",
                        kn_dims_str(dims, rank, d, sizeof d), kiln_dtype_name(dtype));
    *count = n;
    return KILN_OK;
}

static kn_tensor *alloc_header(kiln_dtype dtype, int rank, const int64_t *dims) {
    /* malloc and a compound literal, not calloc: glibc's calloc bypasses its per-thread cache, and
     * a run makes one header per node output (a third of a small model's run time went to it) */
    kn_tensor *t = malloc(sizeof *t);
    if (!t) return NULL;
    *t = (kn_tensor){0};
    t->kind = KN_VALUE_TENSOR;
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    return t;
}

/* ---- buffer pool ---- */

typedef struct pool_block {
    void *data;
    size_t capacity;
} pool_block;

struct kn_buffer_pool {
    pthread_mutex_t mu;
    pool_block *free_blocks;
    int n_free, cap_free;
    size_t cached_bytes, max_cached;
    kn_host_allocator alloc; /* alloc NULL: aligned_alloc and free */
    atomic_int refs;         /* the owner's, and one per tensor whose buffer comes back here */
};

/* Cached bytes beyond this are given back to the system. */
#define KN_POOL_MAX_CACHED ((size_t)8 << 30)

kiln_status kn_buffer_pool_create_with(const kn_host_allocator *a, kn_buffer_pool **out) {
    kn_buffer_pool *p = calloc(1, sizeof *p);
    if (!p) return KN_OOM();
    pthread_mutex_init(&p->mu, NULL);
    atomic_init(&p->refs, 1);
    p->max_cached = KN_POOL_MAX_CACHED;
    if (a && a->alloc && a->release) {
        p->alloc = *a;
        if (a->max_cached < p->max_cached) p->max_cached = a->max_cached;
    }
    *out = p;
    return KILN_OK;
}

kiln_status kn_buffer_pool_create(kn_buffer_pool **out) { return kn_buffer_pool_create_with(NULL, out); }

static void block_free(const kn_buffer_pool *p, void *data) {
    if (!data) return;
    if (p->alloc.release) p->alloc.release(data);
    else free(data);
}

static void pool_release(kn_buffer_pool *p) {
    if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1) return;
    for (int i = 0; i < p->n_free; i++) block_free(p, p->free_blocks[i].data);
    free(p->free_blocks);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void kn_buffer_pool_destroy(kn_buffer_pool *p) {
    if (p) pool_release(p);
}

/* Best fit among cached blocks no more than twice the request, so a small tensor does not pin a
 * big block. */
static void *pool_get(kn_buffer_pool *p, size_t need, size_t *capacity) {
    void *data = NULL;
    pthread_mutex_lock(&p->mu);
    int best = -1;
    for (int i = 0; i < p->n_free; i++) {
        size_t c = p->free_blocks[i].capacity;
        if (c >= need && c / 2 <= need && (best < 0 || c < p->free_blocks[best].capacity)) best = i;
    }
    if (best >= 0) {
        data = p->free_blocks[best].data;
        *capacity = p->free_blocks[best].capacity;
        p->cached_bytes -= *capacity;
        p->free_blocks[best] = p->free_blocks[--p->n_free];
    }
    pthread_mutex_unlock(&p->mu);
    return data;
}

static void pool_put(kn_buffer_pool *p, void *data, size_t capacity) {
    pthread_mutex_lock(&p->mu);
    if (p->cached_bytes + capacity <= p->max_cached) {
        if (p->n_free == p->cap_free) {
            int nc = p->cap_free ? p->cap_free * 2 : 64;
            pool_block *b = realloc(p->free_blocks, sizeof *b * (size_t)nc);
            if (b) {
                p->free_blocks = b;
                p->cap_free = nc;
            }
        }
        if (p->n_free < p->cap_free) {
            p->free_blocks[p->n_free++] = (pool_block){data, capacity};
            p->cached_bytes += capacity;
            data = NULL;
        }
    }
    pthread_mutex_unlock(&p->mu);
    block_free(p, data);
}

kiln_status kn_tensor_new_pooled(kn_buffer_pool *pool, bool zero, kiln_dtype dtype, int rank,
                                 const int64_t *dims, kn_tensor **out) {
    int64_t n;
    *out = NULL;
    KN_TRY(check_shape(dtype, rank, dims, &n));
    const uint64_t want = kn_dtype_nbytes(dtype, n), limit = kn_tensor_bytes_limit();
    if (want > limit) { /* a size from a hostile attribute or shape is an error, not a huge allocation */
        char d[256];
        return kn_error(KILN_ERR_OUT_OF_MEMORY,
                        "a %s tensor of shape %s needs %llu bytes, more than the limit of %llu (the machine's "
                        "memory, or KILN_MAX_TENSOR_BYTES)",
                        kiln_dtype_name(dtype), kn_dims_str(dims, rank, d, sizeof d), (unsigned long long)want,
                        (unsigned long long)limit);
    }
    kn_tensor *t = alloc_header(dtype, rank, dims);
    if (!t) return KN_OOM();
    t->nbytes = kn_dtype_nbytes(dtype, n);
    /* at least 64 bytes so data is never NULL; 64-byte aligned for vector kernels */
    size_t cap = (t->nbytes + 63) & ~(size_t)63;
    if (cap == 0) cap = 64;
    t->data = pool ? pool_get(pool, cap, &cap) : NULL;
    if (!t->data && pool && pool->alloc.alloc) t->data = pool->alloc.alloc(cap);
    if (!t->data) {
        /* plain memory; it goes back to a pool only if that pool frees with free() */
        t->data = aligned_alloc(64, cap);
        if (pool && pool->alloc.alloc) pool = NULL;
    }
    if (!t->data) {
        size_t want = t->nbytes;
        free(t);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory allocating %zu bytes", want);
    }
    if (pool) atomic_fetch_add_explicit(&pool->refs, 1, memory_order_relaxed);
    /* strings must start NULL; everything else is zeroed on request */
    if (zero || dtype == KILN_DTYPE_STRING) memset(t->data, 0, cap);
    t->owns_data = true;
    t->pool = pool;
    t->capacity = cap;
    *out = t;
    return KILN_OK;
}

kiln_status kn_tensor_new(kiln_dtype dtype, int rank, const int64_t *dims, kn_tensor **out) {
    return kn_tensor_new_pooled(NULL, true, dtype, rank, dims, out);
}

/* ---- device memory ---- */

static kn_device_free_fn kn_device_free[2];

void kn_tensor_set_device_free(kn_device device, kn_device_free_fn fn) {
    if ((int)device > 0 && (int)device < 2) kn_device_free[device] = fn;
}

kiln_status kn_tensor_new_device(kn_device device, void *owner, void *data, size_t capacity,
                                 kiln_dtype dtype, int rank, const int64_t *dims, kn_tensor **out) {
    int64_t n;
    *out = NULL;
    KN_TRY(check_shape(dtype, rank, dims, &n));
    if (dtype == KILN_DTYPE_STRING)
        return kn_error(KILN_ERR_UNSUPPORTED, "string tensors cannot live in device memory");
    kn_tensor *t = alloc_header(dtype, rank, dims);
    if (!t) return KN_OOM();
    t->nbytes = kn_dtype_nbytes(dtype, n);
    t->data = data;
    t->capacity = capacity;
    t->owns_data = true;
    t->device = device;
    t->device_owner = owner;
    *out = t;
    return KILN_OK;
}

kiln_status kn_tensor_wrap_device(kn_device device, int device_id, void *data, size_t bytes, kiln_dtype dtype,
                                  int rank, const int64_t *dims, kn_tensor **out) {
    KN_TRY(kn_tensor_new_view(dtype, rank, dims, data, bytes, out));
    (*out)->device = device;
    (*out)->device_id = device_id;
    return KILN_OK;
}

kiln_status kn_tensor_new_view(kiln_dtype dtype, int rank, const int64_t *dims, void *data,
                               size_t nbytes, kn_tensor **out) {
    int64_t n;
    *out = NULL;
    KN_TRY(check_shape(dtype, rank, dims, &n));
    size_t need = kn_dtype_nbytes(dtype, n);
    if (nbytes < need)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "buffer of %zu bytes is smaller than the %zu a %s tensor needs",
                        nbytes, need, kiln_dtype_name(dtype));
    kn_tensor *t = alloc_header(dtype, rank, dims);
    if (!t) return KN_OOM();
    t->data = data;
    t->nbytes = need;
    t->owns_data = false;
    *out = t;
    return KILN_OK;
}

kiln_status kn_tensor_new_sequence(kiln_dtype elem_dtype, kn_tensor **out) {
    kn_tensor *t = calloc(1, sizeof *t);
    if (!t) return KN_OOM();
    t->kind = KN_VALUE_SEQUENCE;
    t->dtype = elem_dtype;
    *out = t;
    return KILN_OK;
}

kiln_status kn_tensor_new_optional(kiln_dtype elem_dtype, kn_tensor *item, kn_tensor **out) {
    kn_tensor *t = calloc(1, sizeof *t);
    if (!t) return KN_OOM();
    t->kind = KN_VALUE_OPTIONAL;
    t->dtype = elem_dtype;
    if (item) {
        t->items = malloc(sizeof *t->items);
        if (!t->items) {
            free(t);
            return KN_OOM();
        }
        t->items[0] = item;
        t->n_items = 1;
    }
    *out = t;
    return KILN_OK;
}

kiln_status kn_sequence_append(kn_tensor *seq, kn_tensor *item) {
    kn_tensor **items = realloc(seq->items, (size_t)(seq->n_items + 1) * sizeof *items);
    if (!items) return KN_OOM();
    seq->items = items;
    seq->items[seq->n_items++] = item;
    return KILN_OK;
}

kiln_status kn_tensor_clone(const kn_tensor *src, kn_tensor **out) {
    *out = NULL;
    if (src->device != KN_DEVICE_HOST)
        return KN_INTERNAL("kn_tensor_clone of a device tensor (copy it to the host first)");
    if (src->kind != KN_VALUE_TENSOR) {
        kn_tensor *c = calloc(1, sizeof *c);
        if (!c) return KN_OOM();
        c->kind = src->kind;
        c->dtype = src->dtype;
        for (int i = 0; i < src->n_items; i++) {
            kn_tensor *it;
            kiln_status s = kn_tensor_clone(src->items[i], &it);
            if (s == KILN_OK) s = kn_sequence_append(c, it);
            if (s != KILN_OK) {
                kn_tensor_free(c);
                return s;
            }
        }
        *out = c;
        return KILN_OK;
    }
    KN_TRY(kn_tensor_new(src->dtype, src->rank, src->dims, out));
    if (src->dtype == KILN_DTYPE_STRING) {
        int64_t n = kn_tensor_count(src);
        char **d = (*out)->data, **s = src->data;
        for (int64_t i = 0; i < n; i++) {
            d[i] = strdup(s[i] ? s[i] : "");
            if (!d[i]) {
                kn_tensor_free(*out);
                *out = NULL;
                return KN_OOM();
            }
        }
    } else if (src->nbytes) {
        memcpy((*out)->data, src->data, src->nbytes);
    }
    return KILN_OK;
}

void kn_tensor_free(kn_tensor *t) {
    if (!t) return;
    if (t->device != KN_DEVICE_HOST) {
        if (t->owns_data && t->data && kn_device_free[t->device])
            kn_device_free[t->device](t->device_owner, t->data, t->capacity);
        free(t);
        return;
    }
    for (int i = 0; i < t->n_items; i++) kn_tensor_free(t->items[i]);
    free(t->items);
    if (t->owns_data && t->data) {
        if (t->dtype == KILN_DTYPE_STRING && t->kind == KN_VALUE_TENSOR) {
            int64_t n = kn_tensor_count(t);
            char **s = t->data;
            for (int64_t i = 0; i < n; i++) free(s[i]);
        }
        if (t->pool) pool_put(t->pool, t->data, t->capacity);
        else free(t->data);
    }
    if (t->pool) pool_release(t->pool);
    free(t);
}

/* ---- half precision ---- */

float kn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t kn_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffff;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 | ((absx >> 13) & 0x3ff) : 0));
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow after rounding */
    if (absx < 0x38800000u) {                                 /* subnormal or zero in half */
        if (absx < 0x33000000u) return (uint16_t)sign;        /* rounds to zero */
        uint32_t e = absx >> 23, m = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* value / 2^-24, the half subnormal step */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((absx - 0x38000000u) >> 13);
    uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

float kn_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t kn_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    uint32_t lsb = (x >> 16) & 1;
    x += 0x7fff + lsb;
    return (uint16_t)(x >> 16);
}

/* ---- generic element access (slow path: shape arithmetic, constant folding, tests) ---- */

double kn_tensor_get_f64(const kn_tensor *t, int64_t i) {
    const void *p = t->data;
    switch (t->dtype) {
    case KILN_DTYPE_FLOAT: return ((const float *)p)[i];
    case KILN_DTYPE_DOUBLE: return ((const double *)p)[i];
    case KILN_DTYPE_FLOAT16: return kn_f16_to_f32(((const uint16_t *)p)[i]);
    case KILN_DTYPE_BFLOAT16: return kn_bf16_to_f32(((const uint16_t *)p)[i]);
    case KILN_DTYPE_INT8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_INT16: return ((const int16_t *)p)[i];
    case KILN_DTYPE_INT32: return ((const int32_t *)p)[i];
    case KILN_DTYPE_INT64: return (double)((const int64_t *)p)[i];
    case KILN_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case KILN_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case KILN_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case KILN_DTYPE_UINT64: return (double)((const uint64_t *)p)[i];
    case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i] ? 1.0 : 0.0;
    case KILN_DTYPE_FLOAT8E8M0: { /* 2^(e-127); 0xff is NaN */
        uint8_t e = ((const uint8_t *)p)[i];
        return e == 0xff ? NAN : ldexp(1.0, (int)e - 127);
    }
    default: return kn_dtype_is_packed(t->dtype) ? packed_value(t, i) : NAN;
    }
}

/* How an element of dtype is tested against zero: its bytes (1, 2, 4 or 8) as an unsigned
 * integer under a mask that drops a float's sign bits (-0 is zero; NaN, with its exponent bits
 * set, is not). false: no such test (complex128, packed types, strings, float8e8m0: which has no
 * zero at all, every code being 2^k or NaN). The fnuz float8 types have no -0 (0x80 is their NaN). */
static bool zero_test(kiln_dtype dt, size_t *bytes, uint64_t *mask) {
    switch (dt) {
    case KILN_DTYPE_FLOAT: *bytes = 4, *mask = 0x7fffffffu; return true;
    case KILN_DTYPE_DOUBLE: *bytes = 8, *mask = 0x7fffffffffffffffull; return true;
    case KILN_DTYPE_COMPLEX64: *bytes = 8, *mask = 0x7fffffff7fffffffull; return true;
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: *bytes = 2, *mask = 0x7fffu; return true;
    case KILN_DTYPE_FLOAT8E4M3FN:
    case KILN_DTYPE_FLOAT8E5M2: *bytes = 1, *mask = 0x7fu; return true;
    case KILN_DTYPE_FLOAT8E4M3FNUZ:
    case KILN_DTYPE_FLOAT8E5M2FNUZ:
    case KILN_DTYPE_INT8:
    case KILN_DTYPE_UINT8:
    case KILN_DTYPE_BOOL: *bytes = 1, *mask = 0xffu; return true;
    case KILN_DTYPE_INT16:
    case KILN_DTYPE_UINT16: *bytes = 2, *mask = 0xffffu; return true;
    case KILN_DTYPE_INT32:
    case KILN_DTYPE_UINT32: *bytes = 4, *mask = 0xffffffffu; return true;
    case KILN_DTYPE_INT64:
    case KILN_DTYPE_UINT64: *bytes = 8, *mask = ~0ull; return true;
    default: return false;
    }
}

bool kn_tensor_elem_nonzero(const kn_tensor *t, int64_t i) {
    size_t bytes;
    uint64_t mask;
    if (t->dtype == KILN_DTYPE_FLOAT8E8M0) return true;
    if (zero_test(t->dtype, &bytes, &mask)) {
        uint64_t v = 0;
        memcpy(&v, (const unsigned char *)t->data + (size_t)i * bytes, bytes); /* little-endian hosts */
        return (v & mask) != 0;
    }
    if (t->dtype == KILN_DTYPE_COMPLEX128) {
        const double *z = (const double *)t->data + 2 * i;
        return z[0] != 0 || z[1] != 0;
    }
    return kn_tensor_get_f64(t, i) != 0; /* packed types */
}

/* OUT_EXPR(i_, nz_) over the elements, nz_ whether element i_ is not zero: typed loops, which
 * the compiler vectorises */
#define KN_NONZERO_LOOP(T, OUT_EXPR)                                                                         \
    do {                                                                                                     \
        const T *q_ = (const T *)t->data, m_ = (T)mask;                                                      \
        for (int64_t i_ = 0; i_ < n; i_++) OUT_EXPR(i_, (q_[i_] & m_) != 0);                                 \
    } while (0)
#define KN_NONZERO_BY_SIZE(OUT_EXPR)                                                                         \
    switch (bytes) {                                                                                         \
    case 1: KN_NONZERO_LOOP(uint8_t, OUT_EXPR); break;                                                       \
    case 2: KN_NONZERO_LOOP(uint16_t, OUT_EXPR); break;                                                      \
    case 4: KN_NONZERO_LOOP(uint32_t, OUT_EXPR); break;                                                      \
    default: KN_NONZERO_LOOP(uint64_t, OUT_EXPR); break;                                                     \
    }
#define KN_COUNT_INTO(i, nz) cnt += (nz)
#define KN_MASK_INTO(i, nz) out[i] = (uint8_t)(nz)

int64_t kn_tensor_count_nonzero(const kn_tensor *t) {
    const int64_t n = kn_tensor_count(t);
    size_t bytes;
    uint64_t mask;
    if (t->dtype == KILN_DTYPE_FLOAT8E8M0) return n;
    if (!zero_test(t->dtype, &bytes, &mask)) {
        int64_t cnt = 0;
        for (int64_t i = 0; i < n; i++) cnt += kn_tensor_elem_nonzero(t, i);
        return cnt;
    }
    int64_t cnt = 0;
    KN_NONZERO_BY_SIZE(KN_COUNT_INTO)
    return cnt;
}

void kn_tensor_nonzero_mask(const kn_tensor *t, uint8_t *out) {
    const int64_t n = kn_tensor_count(t);
    size_t bytes;
    uint64_t mask;
    if (t->dtype == KILN_DTYPE_FLOAT8E8M0) {
        memset(out, 1, (size_t)n);
    } else if (!zero_test(t->dtype, &bytes, &mask)) {
        for (int64_t i = 0; i < n; i++) out[i] = kn_tensor_elem_nonzero(t, i);
    } else {
        KN_NONZERO_BY_SIZE(KN_MASK_INTO)
    }
}
#undef KN_MASK_INTO
#undef KN_COUNT_INTO
#undef KN_NONZERO_BY_SIZE
#undef KN_NONZERO_LOOP

int64_t kn_tensor_get_i64(const kn_tensor *t, int64_t i) {
    const void *p = t->data;
    switch (t->dtype) {
    case KILN_DTYPE_INT8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_INT16: return ((const int16_t *)p)[i];
    case KILN_DTYPE_INT32: return ((const int32_t *)p)[i];
    case KILN_DTYPE_INT64: return ((const int64_t *)p)[i];
    case KILN_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case KILN_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case KILN_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case KILN_DTYPE_UINT64: return (int64_t)((const uint64_t *)p)[i];
    case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i] ? 1 : 0;
    case KILN_DTYPE_UINT4:
    case KILN_DTYPE_INT4:
    case KILN_DTYPE_UINT2:
    case KILN_DTYPE_INT2: return (int64_t)packed_value(t, i);
    default: {
        double v = kn_tensor_get_f64(t, i);
        if (!(v == v)) return 0;
        if (v >= 9.2e18) return INT64_MAX;
        if (v <= -9.2e18) return INT64_MIN;
        return (int64_t)v;
    }
    }
}

void kn_tensor_set_f64(kn_tensor *t, int64_t i, double v) {
    void *p = t->data;
    switch (t->dtype) {
    case KILN_DTYPE_FLOAT: ((float *)p)[i] = (float)v; break;
    case KILN_DTYPE_DOUBLE: ((double *)p)[i] = v; break;
    case KILN_DTYPE_FLOAT16: ((uint16_t *)p)[i] = kn_f32_to_f16((float)v); break;
    case KILN_DTYPE_BFLOAT16: ((uint16_t *)p)[i] = kn_f32_to_bf16((float)v); break;
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: kn_tensor_set_i64(t, i, (int64_t)v); break;
    }
}

void kn_tensor_set_i64(kn_tensor *t, int64_t i, int64_t v) {
    void *p = t->data;
    switch (t->dtype) {
    case KILN_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case KILN_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    case KILN_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case KILN_DTYPE_INT64: ((int64_t *)p)[i] = v; break;
    case KILN_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case KILN_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case KILN_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case KILN_DTYPE_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case KILN_DTYPE_UINT4:
    case KILN_DTYPE_INT4:
    case KILN_DTYPE_UINT2:
    case KILN_DTYPE_INT2: kn_packed_set(p, t->dtype, i, (unsigned)((uint64_t)v & 0xf)); break; /* wraps */
    default: /* the float types; float8, float4 and complex are left as they are (no recursion) */
        if (kn_dtype_is_float(t->dtype)) kn_tensor_set_f64(t, i, (double)v);
        break;
    }
}

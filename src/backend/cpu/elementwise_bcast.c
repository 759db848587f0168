/* Broadcast iteration and half-precision bulk conversion for the elementwise kernels. */
#include "backend/cpu/elementwise_impl.h"

#include <stdio.h>

#if defined(__F16C__) || defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

kiln_status kn_ew_broadcast_shape(int n, const int *ranks, const int64_t *const *dims, int *rank_out,
                                  int64_t *dims_out) {
    int rank = 0;
    for (int i = 0; i < n; i++)
        if (ranks[i] > rank) rank = ranks[i];
    if (rank > KILN_MAX_RANK) return kn_error(KILN_ERR_UNSUPPORTED, "rank %d is above %d", rank, KILN_MAX_RANK);
    for (int d = 0; d < rank; d++) {
        int64_t v = 1;
        for (int i = 0; i < n; i++) {
            int k = d - (rank - ranks[i]);
            if (k < 0) continue;
            int64_t e = dims[i][k];
            if (e == v || e == 1) continue;
            if (v == 1) {
                v = e;
                continue;
            }
            /* name every shape involved: "[3,4] and [2,4]" */
            char msg[1024];
            size_t used = 0;
            for (int j = 0; j < n && used < sizeof msg; j++) {
                char s[256];
                used += (size_t)snprintf(msg + used, sizeof msg - used, "%s%s", j ? " and " : "",
                                         kn_dims_str(dims[j], ranks[j], s, sizeof s));
            }
            return kn_error(KILN_ERR_SHAPE, "shapes %s cannot broadcast (dimension %d: %lld vs %lld)", msg,
                            d, (long long)v, (long long)e);
        }
        dims_out[d] = v;
    }
    *rank_out = rank;
    return KILN_OK;
}

kiln_status kn_ew_plan_init(kn_ew_plan *p, int out_rank, const int64_t *out_dims, int n_in,
                            const int *in_ranks, const int64_t *const *in_dims) {
    if (n_in + 1 > KN_EW_MAX_OPS || out_rank > KILN_MAX_RANK || out_rank < 0)
        return KN_INTERNAL("elementwise plan: too many operands or too high a rank");
    int64_t st[KN_EW_MAX_OPS][KILN_MAX_RANK];
    /* full-rank strides, aligned to the right, of operands that broadcast to the output */
    for (int k = 0; k <= n_in; k++) {
        int r = k == 0 ? out_rank : in_ranks[k - 1];
        const int64_t *dd = k == 0 ? out_dims : in_dims[k - 1];
        if (r > out_rank) goto mismatch;
        for (int j = 0; j < r; j++)
            if (dd[j] != out_dims[j + out_rank - r] && dd[j] != 1) goto mismatch;
        kn_broadcast_strides(dd, r, out_rank, st[k]);
    }
    p->count = 1;
    for (int d = 0; d < out_rank; d++) p->count *= out_dims[d];
    int r = kn_shape_collapse(n_in + 1, out_rank, out_dims, st, p->dims, p->strides);
    p->rank = r;
    p->n_ops = n_in + 1;
    return KILN_OK;
mismatch:;
    char so[256], si[256];
    for (int k = 1; k <= n_in; k++) {
        bool ok = in_ranks[k - 1] <= out_rank;
        for (int j = 0; ok && j < in_ranks[k - 1]; j++) {
            int64_t e = in_dims[k - 1][j], o = out_dims[j + out_rank - in_ranks[k - 1]];
            if (e != o && e != 1) ok = false;
        }
        if (!ok)
            return kn_error(KILN_ERR_SHAPE, "input %d of shape %s does not broadcast to the output shape %s",
                            k - 1, kn_dims_str(in_dims[k - 1], in_ranks[k - 1], si, sizeof si),
                            kn_dims_str(out_dims, out_rank, so, sizeof so));
    }
    return kn_error(KILN_ERR_SHAPE, "inputs do not broadcast to the output shape %s",
                    kn_dims_str(out_dims, out_rank, so, sizeof so));
}

typedef struct plan_job {
    const kn_ew_plan *p;
    char *const *base;
    kn_ew_rows_fn fn;
    void *ctx;
    int64_t bstride[KN_EW_MAX_OPS][KILN_MAX_RANK]; /* strides in bytes (0 past n_ops) */
    int64_t row_bstride[KN_EW_MAX_OPS];            /* of the second-innermost dimension */
    int64_t step[KN_EW_MAX_OPS];                   /* inner step: 1, or 0 for a broadcast operand */
} plan_job;

/* Moves the pointers from the end of dimension d+1 to the next index of dimension d (and on
 * outwards while a dimension wraps). */
static void plan_carry(const plan_job *j, int d, int64_t *idx, char **ptr) {
    const kn_ew_plan *p = j->p;
    for (; d >= 0; d--) {
        for (int k = 0; k < p->n_ops; k++) ptr[k] += j->bstride[k][d] - p->dims[d + 1] * j->bstride[k][d + 1];
        if (++idx[d] < p->dims[d]) return;
        idx[d] = 0;
    }
}

/* Elements [begin, end) of the output in row-major order: partial rows at the ends of the range
 * one at a time, whole rows in blocks. */
static void plan_range(void *arg, int64_t begin, int64_t end) {
    const plan_job *j = arg;
    const kn_ew_plan *p = j->p;
    const int r = p->rank, n = p->n_ops;
    int64_t idx[KILN_MAX_RANK];
    char *ptr[KN_EW_MAX_OPS] = {NULL};
    int64_t rem = begin;
    for (int d = r - 1; d >= 0; d--) {
        idx[d] = rem % p->dims[d];
        rem /= p->dims[d];
    }
    for (int k = 0; k < n; k++) {
        ptr[k] = j->base[k];
        for (int d = 0; d < r; d++) ptr[k] += idx[d] * j->bstride[k][d];
    }
    const int64_t inner = p->dims[r - 1];
    for (int64_t pos = begin; pos < end;) {
        if (r >= 2 && idx[r - 1] == 0 && end - pos >= inner) {
            int64_t rows = (end - pos) / inner, left = p->dims[r - 2] - idx[r - 2];
            if (rows > left) rows = left;
            j->fn(j->ctx, rows, inner, ptr, j->row_bstride, j->step);
            pos += rows * inner;
            if (pos >= end) break;
            for (int k = 0; k < n; k++) ptr[k] += rows * j->bstride[k][r - 2];
            idx[r - 2] += rows;
            if (idx[r - 2] == p->dims[r - 2]) { /* dimension r-2 is done */
                idx[r - 2] = 0;
                plan_carry(j, r - 3, idx, ptr);
            }
            continue;
        }
        int64_t len = inner - idx[r - 1];
        if (len > end - pos) len = end - pos;
        j->fn(j->ctx, 1, len, ptr, j->row_bstride, j->step);
        pos += len;
        if (pos >= end) break;
        for (int k = 0; k < n; k++) ptr[k] += len * j->bstride[k][r - 1];
        idx[r - 1] += len;
        if (idx[r - 1] == inner) { /* the row is done */
            idx[r - 1] = 0;
            plan_carry(j, r - 2, idx, ptr);
        }
    }
}

void kn_ew_plan_run(const kn_ew_plan *p, kn_threadpool *pool, int64_t grain, char *const *base,
                    const size_t *esize, kn_ew_rows_fn fn, void *ctx) {
    if (p->count <= 0) return;
    plan_job j;
    memset(&j, 0, sizeof j);
    j.p = p;
    j.base = base;
    j.fn = fn;
    j.ctx = ctx;
    for (int k = 0; k < p->n_ops; k++) {
        for (int d = 0; d < p->rank; d++) j.bstride[k][d] = p->strides[k][d] * (int64_t)esize[k];
        j.row_bstride[k] = p->rank >= 2 ? j.bstride[k][p->rank - 2] : 0;
        j.step[k] = p->strides[k][p->rank - 1] ? 1 : 0;
    }
    kn_parallel_for(pool, p->count, grain, plan_range, &j);
}

/* ------------------------------------------------------------------ half precision */

/* Both conversions start on a 64-byte boundary and take two vectors a step: the callers convert
 * row by row (pooling, softmax, the chunked elementwise paths), and with one vector a step a shift
 * of the library's layout (16 bytes, from changes elsewhere) cost a float16 MaxPool 4-5%. */
__attribute__((aligned(64))) void kn_ew_f16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
#elif defined(__F16C__)
    for (; i + 16 <= n; i += 16) {
        const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
        const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i + 8)));
        _mm256_storeu_ps(dst + i, a);
        _mm256_storeu_ps(dst + i + 8, b);
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
    for (; i < n; i++) dst[i] = kn_f16_to_f32(src[i]);
}

__attribute__((aligned(64))) void kn_ew_f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__F16C__)
    for (; i + 16 <= n; i += 16) {
        const __m128i a = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m128i b = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 8), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(dst + i), a);
        _mm_storeu_si128((__m128i *)(dst + i + 8), b);
    }
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    for (; i < n; i++) dst[i] = kn_f32_to_f16(src[i]);
}

void kn_ew_bf16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = kn_ew_u2f((uint32_t)src[i] << 16);
}

void kn_ew_f32_to_bf16(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t x = kn_ew_f2u(src[i]);
        /* round to nearest even; NaN stays a (quiet) NaN */
        uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
        dst[i] = (x & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((x >> 16) | 0x40u) : (uint16_t)r;
    }
}

void kn_ew_half_to_f32(kiln_dtype dtype, const void *src, float *dst, int64_t n) {
    if (dtype == KILN_DTYPE_FLOAT16) kn_ew_f16_to_f32(src, dst, n);
    else kn_ew_bf16_to_f32(src, dst, n);
}

void kn_ew_f32_to_half(kiln_dtype dtype, const float *src, void *dst, int64_t n) {
    if (dtype == KILN_DTYPE_FLOAT16) kn_ew_f32_to_f16(src, dst, n);
    else kn_ew_f32_to_bf16(src, dst, n);
}

void kn_ew_sqrt_f32(int64_t n, float *o, const float *x) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(o + i, _mm512_sqrt_ps(_mm512_loadu_ps(x + i)));
#elif defined(__AVX__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++) o[i] = sqrtf(x[i]);
}

/* float16 elementwise rows computed in float32 inside the vector loop: each vector of 8 halves
 * is widened by vcvtph2ps, the float32 operation runs on it, and the result is narrowed by
 * vcvtps2ph rounding to nearest even, so a float16 node reads its inputs and writes its output once
 * (the chunked path converted a chunk into a float buffer, ran the float loop over it and converted
 * it back: three passes, 60% of an Add's time in the conversions on Zen 3). The float32
 * operations are those of the float kernels, so each result is the float32 result rounded once
 * to float16, bit for bit the chunked path's (and ONNX Runtime's, which casts a float16 node
 * without a float16 kernel to float32 and back).
 *
 * A tail of fewer than 8 elements goes through an 8-element buffer (zero-padded): the same
 * vector operations, no per-element conversions.
 *
 * Defined for targets with F16C, AVX2 and FMA (the avx2 and avx512 levels); KN_EW_F16_V8 says so. */
#ifndef KN_CPU_ELEMENTWISE_F16_H
#define KN_CPU_ELEMENTWISE_F16_H

#include <stdint.h>
#include <string.h>

#if defined(__F16C__) && defined(__AVX2__) && defined(__FMA__)
#define KN_EW_F16_V8 1
#include <immintrin.h>

static inline __m256 kn_h8_load(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}
static inline void kn_h8_store(uint16_t *p, __m256 v) {
    _mm_storeu_si128((__m128i *)(void *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* the first n (< 8) halves at p, zero above / stored to p */
static inline __m256 kn_h8_load_part(const uint16_t *p, int64_t n) {
    uint16_t b[8] = {0};
    memcpy(b, p, (size_t)n * sizeof(uint16_t));
    return kn_h8_load(b);
}
static inline void kn_h8_store_part(uint16_t *p, int64_t n, __m256 v) {
    uint16_t b[8];
    kn_h8_store(b, v);
    memcpy(p, b, (size_t)n * sizeof(uint16_t));
}
/* 8 bools (1 where the lane's mask is set, else 0) from a compare mask / the first n (< 8) of them */
static inline void kn_h8_store_bool(uint8_t *p, __m256 m) {
    const __m256i v = _mm256_srli_epi32(_mm256_castps_si256(m), 31);
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    w = _mm_packus_epi16(w, w);
    _mm_storel_epi64((__m128i *)(void *)p, w);
}
static inline void kn_h8_store_bool_part(uint8_t *p, int64_t n, __m256 m) {
    uint8_t b[8];
    kn_h8_store_bool(b, m);
    memcpy(p, b, (size_t)n);
}
/* one half as 8 equal float lanes */
static inline __m256 kn_h8_splat(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_set1_epi16((short)*p));
}

/* o[i] = VFN(x[i]) for i < n halves (o may be x): two vectors a step, then one, then the tail
 * through a buffer. VFN: an __m256 -> __m256 function or function-like macro. */
#define KN_H8_MAP(o, x, n, VFN)                                                                    \
    do {                                                                                           \
        uint16_t *kn_hm_o = (o);                                                                   \
        const uint16_t *kn_hm_x = (x);                                                             \
        const int64_t kn_hm_n = (n);                                                               \
        int64_t kn_hm_i = 0;                                                                       \
        for (; kn_hm_i + 16 <= kn_hm_n; kn_hm_i += 16) {                                           \
            const __m256 kn_hm_a = VFN(kn_h8_load(kn_hm_x + kn_hm_i));                             \
            const __m256 kn_hm_b = VFN(kn_h8_load(kn_hm_x + kn_hm_i + 8));                         \
            kn_h8_store(kn_hm_o + kn_hm_i, kn_hm_a);                                               \
            kn_h8_store(kn_hm_o + kn_hm_i + 8, kn_hm_b);                                           \
        }                                                                                          \
        for (; kn_hm_i + 8 <= kn_hm_n; kn_hm_i += 8)                                               \
            kn_h8_store(kn_hm_o + kn_hm_i, VFN(kn_h8_load(kn_hm_x + kn_hm_i)));                    \
        if (kn_hm_i < kn_hm_n)                                                                     \
            kn_h8_store_part(kn_hm_o + kn_hm_i, kn_hm_n - kn_hm_i,                                 \
                             VFN(kn_h8_load_part(kn_hm_x + kn_hm_i, kn_hm_n - kn_hm_i)));          \
    } while (0)
#endif

/* The same at 16 lanes for the AVX-512 level (F, BW, VL): vcvtph2ps / vcvtps2ph on zmm, the tail
 * by masked 16-bit loads and stores (zero above the tail, as the 8-lane buffer), for the
 * operators whose float32 kernels are vec_math.h's 16-lane functions: the same VFN on the same
 * floats, so each result is the float32 kernel's rounded once to float16, as the chunked path
 * gave it (one pass over the row instead of three). KN_EW_F16_V16 says it is defined. */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define KN_EW_F16_V16 1
#include <immintrin.h>

static inline __mmask16 kn_h16_tail(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }
static inline __m512 kn_h16_load(const uint16_t *p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
static inline void kn_h16_store(uint16_t *p, __mmask16 m, __m512 v) {
    _mm256_mask_storeu_epi16(p, m, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* o[i] = VFN(x[i]) for i < n halves (o may be x): two vectors a step (two independent chains
 * through VFN's branches and polynomials: 4-9% faster than one on the Xeon), then 16 a step, the
 * last step masked. VFN: an __m512 -> __m512 function or function-like macro. */
#define KN_H16_MAP(o, x, n, VFN)                                                                   \
    do {                                                                                           \
        uint16_t *kn_hm_o = (o);                                                                   \
        const uint16_t *kn_hm_x = (x);                                                             \
        const int64_t kn_hm_n = (n);                                                               \
        int64_t kn_hm_j = 0;                                                                       \
        for (; kn_hm_j + 32 <= kn_hm_n; kn_hm_j += 32) {                                           \
            const __m512 kn_hm_a = VFN(kn_h16_load(kn_hm_x + kn_hm_j, 0xFFFF));                    \
            const __m512 kn_hm_b = VFN(kn_h16_load(kn_hm_x + kn_hm_j + 16, 0xFFFF));               \
            kn_h16_store(kn_hm_o + kn_hm_j, 0xFFFF, kn_hm_a);                                      \
            kn_h16_store(kn_hm_o + kn_hm_j + 16, 0xFFFF, kn_hm_b);                                 \
        }                                                                                          \
        for (int64_t kn_hm_i = kn_hm_j; kn_hm_i < kn_hm_n; kn_hm_i += 16) {                        \
            const __mmask16 kn_hm_m = kn_h16_tail(kn_hm_n - kn_hm_i);                              \
            kn_h16_store(kn_hm_o + kn_hm_i, kn_hm_m, VFN(kn_h16_load(kn_hm_x + kn_hm_i, kn_hm_m))); \
        }                                                                                          \
    } while (0)
#endif

#endif

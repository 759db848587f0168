/* One float vector at the level's width, for kernels written once for AVX-512 and AVX2 (isa.h).
 *
 * KN_VL is 16 (AVX-512) or 8 (AVX2 + FMA); without either it is 0 and the callers keep their
 * scalar loops. The operations below are the AVX-512 intrinsics' semantics at that width:
 *
 *   kn_vf          float vector               kn_vi   int32 vector
 *   kn_vmask       lane mask as bits (lane l = bit l; KN_VL bits used)
 *   kn_vf_maskz_loadu(m, p)   lanes not in m are 0 and their memory is not read
 *   kn_vf_mask_storeu(p, m, v) lanes not in m are not written
 *   kn_vf_perm2(a, idx, b)    lane l = (a ++ b)[idx[l] mod 2 KN_VL]   (vpermt2ps)
 *   kn_vf_perm(idx, a)        lane l = a[idx[l] mod KN_VL]           (vpermps)
 *   kn_vf_blend(m, a, b)      lane l = m bit l ? b[l] : a[l]
 *   kn_vf_mask_gather(m, idx, p)   lane l = m bit l ? p[idx[l]] : 0
 *
 * AVX2 has no mask registers: a mask becomes a vector of all-ones lanes where it is used
 * (kn_vmask_vec: three instructions, hoisted out of loops where the mask is invariant), masked
 * loads and stores are vmaskmovps (masked-off lanes neither read nor written, so no fault past an
 * array's end), a two-source permute two vpermps and a blend. Index tables are built at the level's
 * width by the caller (kn_vi_loadu of KN_VL int32). */
#ifndef KN_CPU_ISA_VEC_H
#define KN_CPU_ISA_VEC_H

#include <stdint.h>

#if defined(__AVX512F__)
#include "backend/cpu/vec_math.h"

#include <immintrin.h>
#define KN_VL 16
#define KN_VREGS 32 /* vector registers: what a kernel's tile of accumulators may take */
typedef __m512 kn_vf;
typedef __m512i kn_vi;
typedef __mmask16 kn_vmask;

#define kn_vf_loadu _mm512_loadu_ps
#define kn_vf_load _mm512_load_ps
#define kn_vf_storeu _mm512_storeu_ps
#define kn_vf_store _mm512_store_ps
#define kn_vf_set1 _mm512_set1_ps
#define kn_vf_zero _mm512_setzero_ps
#define kn_vf_add _mm512_add_ps
#define kn_vf_sub _mm512_sub_ps
#define kn_vf_mul _mm512_mul_ps
#define kn_vf_max _mm512_max_ps
#define kn_vf_min _mm512_min_ps
#define kn_vf_fmadd _mm512_fmadd_ps
#define kn_vf_fnmadd _mm512_fnmadd_ps
#define kn_vf_maskz_loadu _mm512_maskz_loadu_ps
#define kn_vf_mask_storeu _mm512_mask_storeu_ps
#define kn_vf_perm2 _mm512_permutex2var_ps
#define kn_vf_perm _mm512_permutexvar_ps
#define kn_vf_blend _mm512_mask_blend_ps
#define kn_vf_reduce_add _mm512_reduce_add_ps
#define kn_vf_reduce_max _mm512_reduce_max_ps
static inline kn_vf kn_vf_mask_gather(kn_vmask m, kn_vi idx, const float *p) {
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, p, 4);
}
/* doubles: KN_VL / 2 lanes; kn_vd_of_lo / _hi widen a float vector's lower or upper half */
typedef __m512d kn_vd;
#define kn_vd_zero _mm512_setzero_pd
#define kn_vd_add _mm512_add_pd
#define kn_vd_reduce_add _mm512_reduce_add_pd
#define kn_vd_of_lo(v) _mm512_cvtps_pd(_mm512_castps512_ps256(v))
#define kn_vd_of_hi(v) _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))

#define kn_vi_loadu(p) _mm512_loadu_si512((const void *)(p))
#define kn_vi_set1 _mm512_set1_epi32
#define kn_vi_zero _mm512_setzero_si512
#define kn_vi_add _mm512_add_epi32
#define kn_vi_mullo _mm512_mullo_epi32
#define kn_vi_cmpge_mask _mm512_cmpge_epi32_mask
#define kn_vi_cmplt_mask _mm512_cmplt_epi32_mask
/* rows x cols (<= KN_VL x KN_VL) floats at src (row stride ld), zero elsewhere, transposed:
 * o[q] lane r = src[r*ld + q] */
#define kn_v_transpose kn_v16_transpose

#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define KN_VL 8
#define KN_VREGS 16
typedef __m256 kn_vf;
typedef __m256i kn_vi;
typedef uint8_t kn_vmask;

/* all-ones lanes where m has its bit */
static inline __m256i kn_vmask_vec(unsigned m) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)m), bit), bit);
}

#define kn_vf_loadu _mm256_loadu_ps
#define kn_vf_load _mm256_load_ps
#define kn_vf_storeu _mm256_storeu_ps
#define kn_vf_store _mm256_store_ps
#define kn_vf_set1 _mm256_set1_ps
#define kn_vf_zero _mm256_setzero_ps
#define kn_vf_add _mm256_add_ps
#define kn_vf_sub _mm256_sub_ps
#define kn_vf_mul _mm256_mul_ps
#define kn_vf_max _mm256_max_ps
#define kn_vf_min _mm256_min_ps
#define kn_vf_fmadd _mm256_fmadd_ps
#define kn_vf_fnmadd _mm256_fnmadd_ps
/* a whole vector takes the plain load or store: vmaskmovps stores are microcoded on AMD's cores
 * (and the mask costs three instructions to make) */
static inline kn_vf kn_vf_maskz_loadu(unsigned m, const float *p) {
    if ((m & 0xFFu) == 0xFFu) return _mm256_loadu_ps(p);
    return _mm256_maskload_ps(p, kn_vmask_vec(m));
}
static inline void kn_vf_mask_storeu(float *p, unsigned m, kn_vf v) {
    if ((m & 0xFFu) == 0xFFu) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, kn_vmask_vec(m), v);
}
static inline kn_vf kn_vf_perm(__m256i idx, kn_vf a) { return _mm256_permutevar8x32_ps(a, idx); }
static inline kn_vf kn_vf_perm2(kn_vf a, __m256i idx, kn_vf b) {
    const __m256 from_b = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)); /* index bit 3 in the sign */
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(a, idx), _mm256_permutevar8x32_ps(b, idx), from_b);
}
static inline kn_vf kn_vf_blend(unsigned m, kn_vf a, kn_vf b) {
    return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(kn_vmask_vec(m)));
}
static inline float kn_vf_reduce_add(kn_vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline float kn_vf_reduce_max(kn_vf v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
static inline kn_vf kn_vf_mask_gather(unsigned m, __m256i idx, const float *p) {
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), p, idx, _mm256_castsi256_ps(kn_vmask_vec(m)), 4);
}
typedef __m256d kn_vd;
#define kn_vd_zero _mm256_setzero_pd
#define kn_vd_add _mm256_add_pd
#define kn_vd_of_lo(v) _mm256_cvtps_pd(_mm256_castps256_ps128(v))
#define kn_vd_of_hi(v) _mm256_cvtps_pd(_mm256_extractf128_ps((v), 1))
static inline double kn_vd_reduce_add(kn_vd v) {
    const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

#define kn_vi_loadu(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define kn_vi_set1 _mm256_set1_epi32
#define kn_vi_zero _mm256_setzero_si256
#define kn_vi_add _mm256_add_epi32
#define kn_vi_mullo _mm256_mullo_epi32
static inline kn_vmask kn_vi_cmplt_mask(__m256i a, __m256i b) {
    return (kn_vmask)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(b, a)));
}
static inline kn_vmask kn_vi_cmpge_mask(__m256i a, __m256i b) { return (kn_vmask)(~kn_vi_cmplt_mask(a, b) & 0xFFu); }
/* o[q] lane i = in[i] lane q: an 8 x 8 transpose in registers */
static inline __attribute__((always_inline)) void kn_v8_transpose_regs(const __m256 in[8], __m256 o[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(in[i], in[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(in[i], in[i + 1]);
    }
    for (int b = 0; b < 8; b += 4) {
        u[b] = _mm256_shuffle_ps(t[b], t[b + 2], 0x44);
        u[b + 1] = _mm256_shuffle_ps(t[b], t[b + 2], 0xEE);
        u[b + 2] = _mm256_shuffle_ps(t[b + 1], t[b + 3], 0x44);
        u[b + 3] = _mm256_shuffle_ps(t[b + 1], t[b + 3], 0xEE);
    }
    for (int q = 0; q < 4; q++) {
        o[q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x20);
        o[4 + q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x31);
    }
}
static inline __attribute__((always_inline)) void kn_v_transpose(const float *src, int64_t ld, int rows, int cols,
                                                                 __m256 o[8]) {
    const __m256i cm = kn_vmask_vec(cols >= 8 ? 0xFFu : (1u << cols) - 1u);
    __m256 r[8];
    /* whole rows by plain loads (the depthwise kernel's planes: 8 pixels of 8 channels) */
    for (int i = 0; i < 8; i++)
        r[i] = i >= rows ? _mm256_setzero_ps() : cols >= 8 ? _mm256_loadu_ps(src + i * ld) : _mm256_maskload_ps(src + i * ld, cm);
    kn_v8_transpose_regs(r, o);
}

#else
#define KN_VL 0
#endif

#if KN_VL
/* the first n lanes (n <= 0: none, n >= KN_VL: all) */
static inline kn_vmask kn_v_tail(int64_t n) {
    return n >= KN_VL ? (kn_vmask)((1u << KN_VL) - 1u) : n <= 0 ? (kn_vmask)0 : (kn_vmask)((1u << n) - 1u);
}
/* lanes l with lo <= l < hi */
static inline kn_vmask kn_v_range(int64_t lo, int64_t hi) {
    return (kn_vmask)(kn_v_tail(hi) & ~kn_v_tail(lo));
}
#define KN_VALL ((kn_vmask)((1u << KN_VL) - 1u))
/* lane l: start + step l */
static inline kn_vi kn_vi_iota(int32_t start, int32_t step) {
    int32_t t[KN_VL];
    for (int l = 0; l < KN_VL; l++) t[l] = start + step * l;
    return kn_vi_loadu(t);
}
#endif

#endif

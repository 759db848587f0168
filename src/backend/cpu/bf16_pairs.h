/* The AVX-512 helpers the bf16 kernels share (sgemm_bf16.c, conv_amx.c, conv_amx_blocked.c): a lane
 * mask, the rounding of two float vectors into pairs of bf16 (the unit both vdpbf16ps and AMX's
 * TDPBF16PS multiply) and a 16 x 16 transpose of 32-bit lanes (vec_math.h's kn_v16_transpose_regs). No include guard on purpose:
 * include it inside a region whose target has avx512f,avx512bw,avx512vl,avx512bf16 (those files'
 * target pragmas), after <immintrin.h> and vec_math.h (included outside the region). */

/* lanes [0, n) of 16 */
static inline __mmask16 m16(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* lane j = (bf16(lo[j]), bf16(hi[j])) as one 32-bit unit, lo in the low half (round to nearest even) */
static inline __m512i pairs_of(__m512 lo, __m512 hi) {
    __m256i l = (__m256i)_mm512_cvtneps_pbh(lo), h = (__m256i)_mm512_cvtneps_pbh(hi);
    return _mm512_or_si512(_mm512_cvtepu16_epi32(l), _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* r[i] lane j -> o[j] lane i (32-bit elements) */
static inline __attribute__((always_inline)) void tr16(__m512i in[16], __m512i out[16]) {
    __m512 r[16], o[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_castsi512_ps(in[i]);
    kn_v16_transpose_regs(r, o);
    for (int i = 0; i < 16; i++) out[i] = _mm512_castps_si512(o[i]);
}

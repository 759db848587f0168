#include "cache/hash.h"

#include <string.h>

/* 24 key words from splitmix64 seeded with "kiln-cac": lane j of stripe s uses K[s + j]; the
 * scramble uses K[16 + j]. */
static const uint64_t K[24] = {
    0xe4d64357c0011dadull, 0x7fbdc048ddd98f7eull, 0x190837a112d8b006ull,
    0x801162c3242eb38full, 0xa74d2040b546e17full, 0xef8047adca6d1c78ull,
    0x29ed51e538694fd3ull, 0x4e374653b426cd7full, 0xf9cc58da7431ab93ull,
    0xd26d2883a5ed7b1aull, 0x12d40e59caad2ea1ull, 0x94177c1106175916ull,
    0xc24713fa0eb3e7fbull, 0xfe24cfc41cc5d148ull, 0x9b1b18dd5bb9c139ull,
    0x5eaab609e04b9266ull, 0xf95e70c50d73d374ull, 0x29f27c10fb616f9full,
    0x8e5f6b8e0db40c81ull, 0xcff5426bb58b9c8full, 0x86be769d2112901eull,
    0x0845240d74f9c374ull, 0xf271dbb6af42298eull, 0x04df281e9e3255efull,
};

#define KH_STRIPES_PER_BLOCK 16
#define KH_P32 0x9E3779B1u
#define KH_P64A 0x9E3779B97F4A7C15ull
#define KH_P64B 0xC2B2AE3D27D4EB4Full

static inline uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* One 64-byte stripe into the lanes. Written as plain loops over arrays so compilers vectorise
 * it (AVX2/AVX-512: vpmuludq does the 32x32->64 products of four or eight lanes at once). */
static inline void stripe(uint64_t *restrict acc, const uint8_t *restrict p, const uint64_t *restrict key) {
    uint64_t w[8];
    for (int j = 0; j < 8; j++) w[j] = rd64(p + 8 * j);
    for (int j = 0; j < 8; j++) {
        uint64_t x = w[j] ^ key[j];
        acc[j] += (x & 0xffffffffu) * (x >> 32);
        acc[j ^ 1] += w[j];
    }
}

static inline void scramble(uint64_t *acc) {
    for (int j = 0; j < 8; j++) {
        uint64_t a = acc[j];
        a ^= a >> 47;
        a ^= K[16 + j];
        acc[j] = a * KH_P32;
    }
}

/* A whole block (16 stripes then the scramble), the hot loop. The same arithmetic as stripe() and
 * scramble(), written with SIMD intrinsics where the build has them, because compilers differ in
 * whether they vectorise the plain loops (gcc 13 does not; gcc 12 picks the slow vpmullq with
 * AVX-512). Lane j adds lo32(x) * hi32(x) (vpmuludq) and the word of lane j ^ 1 (a shuffle that
 * swaps 64-bit halves of each 128-bit lane). */
#if defined(__AVX512F__)
#include <immintrin.h>
static void block(uint64_t *acc, const uint8_t *p) {
    __m512i a = _mm512_loadu_si512((const void *)acc);
    for (int s = 0; s < KH_STRIPES_PER_BLOCK; s++) {
        __m512i w = _mm512_loadu_si512((const void *)(p + 64 * s));
        __m512i x = _mm512_xor_si512(w, _mm512_loadu_si512((const void *)(K + s)));
        a = _mm512_add_epi64(a, _mm512_mul_epu32(x, _mm512_srli_epi64(x, 32)));
        a = _mm512_add_epi64(a, _mm512_shuffle_epi32(w, (_MM_PERM_ENUM)0x4E));
    }
    a = _mm512_xor_si512(a, _mm512_srli_epi64(a, 47));
    a = _mm512_xor_si512(a, _mm512_loadu_si512((const void *)(K + 16)));
    __m512i prime = _mm512_set1_epi64(KH_P32);
    __m512i lo = _mm512_mul_epu32(a, prime), hi = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), prime);
    _mm512_storeu_si512((void *)acc, _mm512_add_epi64(lo, _mm512_slli_epi64(hi, 32)));
}
#elif defined(__AVX2__)
#include <immintrin.h>
static void block(uint64_t *acc, const uint8_t *p) {
    __m256i a0 = _mm256_loadu_si256((const __m256i *)acc), a1 = _mm256_loadu_si256((const __m256i *)(acc + 4));
    for (int s = 0; s < KH_STRIPES_PER_BLOCK; s++) {
        __m256i w0 = _mm256_loadu_si256((const __m256i *)(p + 64 * s));
        __m256i w1 = _mm256_loadu_si256((const __m256i *)(p + 64 * s + 32));
        __m256i x0 = _mm256_xor_si256(w0, _mm256_loadu_si256((const __m256i *)(K + s)));
        __m256i x1 = _mm256_xor_si256(w1, _mm256_loadu_si256((const __m256i *)(K + s + 4)));
        a0 = _mm256_add_epi64(a0, _mm256_mul_epu32(x0, _mm256_srli_epi64(x0, 32)));
        a1 = _mm256_add_epi64(a1, _mm256_mul_epu32(x1, _mm256_srli_epi64(x1, 32)));
        a0 = _mm256_add_epi64(a0, _mm256_shuffle_epi32(w0, 0x4E));
        a1 = _mm256_add_epi64(a1, _mm256_shuffle_epi32(w1, 0x4E));
    }
    __m256i prime = _mm256_set1_epi64x(KH_P32);
    __m256i *out[2] = {&a0, &a1};
    for (int v = 0; v < 2; v++) {
        __m256i a = *out[v];
        a = _mm256_xor_si256(a, _mm256_srli_epi64(a, 47));
        a = _mm256_xor_si256(a, _mm256_loadu_si256((const __m256i *)(K + 16 + 4 * v)));
        __m256i lo = _mm256_mul_epu32(a, prime), hi = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), prime);
        _mm256_storeu_si256((__m256i *)(acc + 4 * v), _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 32)));
    }
}
#elif defined(__SSE2__)
#include <emmintrin.h>
static void block(uint64_t *acc, const uint8_t *p) {
    __m128i a[4];
    for (int v = 0; v < 4; v++) a[v] = _mm_loadu_si128((const __m128i *)(acc + 2 * v));
    for (int s = 0; s < KH_STRIPES_PER_BLOCK; s++)
        for (int v = 0; v < 4; v++) {
            __m128i w = _mm_loadu_si128((const __m128i *)(p + 64 * s + 16 * v));
            __m128i x = _mm_xor_si128(w, _mm_loadu_si128((const __m128i *)(K + s + 2 * v)));
            a[v] = _mm_add_epi64(a[v], _mm_mul_epu32(x, _mm_srli_epi64(x, 32)));
            a[v] = _mm_add_epi64(a[v], _mm_shuffle_epi32(w, 0x4E));
        }
    __m128i prime = _mm_set1_epi64x(KH_P32);
    for (int v = 0; v < 4; v++) {
        __m128i x = _mm_xor_si128(a[v], _mm_srli_epi64(a[v], 47));
        x = _mm_xor_si128(x, _mm_loadu_si128((const __m128i *)(K + 16 + 2 * v)));
        __m128i lo = _mm_mul_epu32(x, prime), hi = _mm_mul_epu32(_mm_srli_epi64(x, 32), prime);
        _mm_storeu_si128((__m128i *)(acc + 2 * v), _mm_add_epi64(lo, _mm_slli_epi64(hi, 32)));
    }
}
#else
static void block(uint64_t *acc, const uint8_t *p) {
    for (int s = 0; s < KH_STRIPES_PER_BLOCK; s++) stripe(acc, p + 64 * s, K + s);
    scramble(acc);
}
#endif

static inline void take_stripe(kn_hasher *h, const uint8_t *p) {
    stripe(h->acc, p, K + h->stripe);
    if (++h->stripe == KH_STRIPES_PER_BLOCK) {
        scramble(h->acc);
        h->stripe = 0;
    }
}

void kn_hasher_init(kn_hasher *h, uint64_t seed) {
    memset(h, 0, sizeof *h);
    for (int j = 0; j < 8; j++) h->acc[j] = K[j] + seed * (KH_P64A + 2 * (uint64_t)j);
}

void kn_hasher_update(kn_hasher *h, const void *data, size_t len) {
    const uint8_t *p = data;
    h->total += len;
    if (h->buf_len) {
        size_t take = 64 - h->buf_len;
        if (take > len) take = len;
        memcpy(h->buf + h->buf_len, p, take);
        h->buf_len += take;
        p += take;
        len -= take;
        if (h->buf_len < 64) return;
        take_stripe(h, h->buf);
        h->buf_len = 0;
    }
    /* whole blocks with the scramble hoisted out of the stripe loop */
    while (h->stripe == 0 && len >= 64 * KH_STRIPES_PER_BLOCK) {
        block(h->acc, p);
        p += 64 * KH_STRIPES_PER_BLOCK;
        len -= 64 * KH_STRIPES_PER_BLOCK;
    }
    while (len >= 64) {
        take_stripe(h, p);
        p += 64;
        len -= 64;
    }
    if (len) {
        memcpy(h->buf, p, len);
        h->buf_len = len;
    }
}

static inline uint64_t mum(uint64_t a, uint64_t b) {
#if defined(__SIZEOF_INT128__)
    unsigned __int128 r = (unsigned __int128)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
#else
    uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
    uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
    uint64_t lo = (ll & 0xffffffffu) | (mid << 32);
    uint64_t hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
    return lo ^ hi;
#endif
}

static inline uint64_t avalanche(uint64_t x) {
    x ^= x >> 37;
    x *= 0x165667919E3779F9ull;
    x ^= x >> 32;
    x *= KH_P64B;
    x ^= x >> 29;
    return x;
}

kn_hash128 kn_hasher_final(const kn_hasher *h) {
    uint64_t acc[8];
    memcpy(acc, h->acc, sizeof acc);
    if (h->buf_len) {
        uint8_t last[64] = {0};
        memcpy(last, h->buf, h->buf_len);
        stripe(acc, last, K + h->stripe);
    }
    uint64_t lo = h->total * KH_P64A, hi = ~h->total * KH_P64B;
    for (int i = 0; i < 4; i++) {
        lo += mum(acc[2 * i] ^ K[2 * i], acc[2 * i + 1] ^ K[2 * i + 1]);
        hi += mum(acc[2 * i + 1] ^ K[8 + 2 * i], acc[(2 * i + 2) & 7] ^ K[9 + 2 * i]);
    }
    kn_hash128 r;
    r.lo = avalanche(lo);
    r.hi = avalanche(hi ^ (r.lo >> 17));
    return r;
}

void kn_hasher_u64(kn_hasher *h, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    kn_hasher_update(h, b, 8);
}

void kn_hasher_str(kn_hasher *h, const char *s) {
    size_t n = s ? strlen(s) : 0;
    kn_hasher_u64(h, s ? n : UINT64_MAX); /* NULL and "" differ */
    if (n) kn_hasher_update(h, s, n);
}

kn_hash128 kn_hash(const void *data, size_t len, uint64_t seed) {
    kn_hasher h;
    kn_hasher_init(&h, seed);
    kn_hasher_update(&h, data, len);
    return kn_hasher_final(&h);
}

void kn_hash_hex(kn_hash128 h, char out[33]) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[i] = hex[(h.hi >> (60 - 4 * i)) & 15];
        out[16 + i] = hex[(h.lo >> (60 - 4 * i)) & 15];
    }
    out[32] = 0;
}

int kn_hash_equal(kn_hash128 a, kn_hash128 b) { return a.lo == b.lo && a.hi == b.hi; }

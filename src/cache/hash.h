/* kh128: the cache's 128-bit non-cryptographic hash, for model digests and file checksums.
 *
 * Why our own and not a cryptographic one: a warm start hashes every byte of the model (and
 * checks every byte of the compiled file), so the hash must run at memory speed. SHA-256 runs at
 * roughly 0.5-2 GB/s, which for a 500 MB model would cost more than the compile it saves; kh128
 * runs at over 10 GB/s on one core. The cache defends against accidents (stale, corrupt,
 * truncated files), not against an attacker who can write to the cache directory: such a writer
 * could replace the compiled file anyway. So a well-mixed 128-bit hash is the right tool.
 *
 * Design: eight 64-bit lanes eat 64-byte stripes; each lane adds lo32(x) * hi32(x) for
 * x = word ^ key (a 32x32->64 multiply, which compilers vectorise) plus the neighbouring lane's
 * raw word (so a product that loses input bits cannot cancel it); every 16 stripes the lanes are
 * scrambled with a xor-shift and an odd multiply. The end folds the lanes pairwise through
 * 64x64->128 multiplies with the length, then avalanches. Output is the same on every host
 * (words are read little-endian). */
#ifndef KN_CACHE_HASH_H
#define KN_CACHE_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct kn_hash128 {
    uint64_t lo, hi;
} kn_hash128;

typedef struct kn_hasher {
    uint64_t acc[8];
    uint8_t buf[64];
    size_t buf_len;
    uint64_t total;
    unsigned stripe; /* stripes taken in the current block */
} kn_hasher;

void kn_hasher_init(kn_hasher *h, uint64_t seed);
void kn_hasher_update(kn_hasher *h, const void *data, size_t len);
kn_hash128 kn_hasher_final(const kn_hasher *h);
/* Convenience: feed a 64-bit value (little-endian) or a NUL-terminated string with its length. */
void kn_hasher_u64(kn_hasher *h, uint64_t v);
void kn_hasher_str(kn_hasher *h, const char *s);

kn_hash128 kn_hash(const void *data, size_t len, uint64_t seed);
/* 32 lowercase hex digits (hi then lo) and a NUL into out[33]. */
void kn_hash_hex(kn_hash128 h, char out[33]);
int kn_hash_equal(kn_hash128 a, kn_hash128 b);

#endif

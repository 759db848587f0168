/* The compiled-model file: layout, validation and the reader/writer entry points.
 *
 * Layout (all integers little-endian):
 *
 *   offset 0   header, 64 bytes
 *                0  magic "KILNCOMP"
 *                8  u32 format version
 *               12  u32 header size (64)
 *               16  u64 file size
 *               24  u32 key block size        (the key block follows the header)
 *               28  u32 section count
 *               32  u64 section table offset
 *               40  u64 body checksum         (over the key block and the section table)
 *               48  u64 reserved (0)
 *               56  u64 header checksum       (over bytes 0..55)
 *   64         key block: "name=value\n" lines in clear (see cache/key.h), readable with
 *              `strings`, then NUL padding to 8 bytes
 *   ...        section table: one 48-byte entry per section
 *                0  u32 kind (KN_SECT_*)
 *                4  u32 flags (0)
 *                8  u64 offset
 *               16  u64 size
 *               24  u64 checksum of the section's bytes
 *               32  char name[16] (NUL-padded): "graph", "weights", "cpu.kernels", ...
 *   ...        sections, each starting 64-byte aligned; the weights last, so tensors in it are
 *              64-byte aligned in the file and therefore in a mapping of it (loading maps them in
 *              place, no copy)
 *
 * Every byte is covered by exactly one checksum: the header by its own, the key block and table by
 * the body checksum, each section by its table entry; a reader checks all of them, and bounds-
 * checks every offset, size and count, before it uses anything. */
#ifndef KN_CACHE_FORMAT_H
#define KN_CACHE_FORMAT_H

#include "cache/hash.h"
#include "cache/key.h"
#include "ir/graph.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KN_CACHE_MAGIC "KILNCOMP"
#define KN_CACHE_MAGIC_LEN 8
#define KN_CACHE_FORMAT_VERSION 4 /* 2: the "memory.plan" section; 3: cuBLASLt tuning keys with the epilogue;
                                     4: fused nodes' activation_bounds (an older reader would ignore it) */
#define KN_CACHE_HEADER_SIZE 64
#define KN_CACHE_ENTRY_SIZE 48
#define KN_CACHE_ALIGN 64
#define KN_CACHE_MAX_SECTIONS 64
#define KN_CACHE_MAX_KEY_BLOCK (64 * 1024)
#define KN_CACHE_SECTION_NAME 16

typedef enum kn_section_kind {
    KN_SECT_GRAPH = 1,   /* the optimised graph: values, types, nodes, attributes, opsets, I/O */
    KN_SECT_WEIGHTS = 2, /* tensor bytes, each 64-byte aligned */
    KN_SECT_BACKEND = 3, /* a backend's data, named "<provider>.<what>" (kernel choices, tuning) */
} kn_section_kind;

/* Seeds that keep the checksums of different parts from being interchangeable. */
#define KN_SEED_HEADER 0x68647231u
#define KN_SEED_BODY 0x626f6479u
#define KN_SEED_SECTION 0x73656374u

typedef struct kn_section {
    uint32_t kind;
    uint64_t offset, size, checksum;
    char name[KN_CACHE_SECTION_NAME + 1];
    const uint8_t *data; /* into the file's bytes */
} kn_section;

/* An opened and fully validated compiled file. */
typedef struct kn_cfile {
    char *path;              /* for messages ("<memory>" when from memory) */
    const uint8_t *data;
    size_t size;
    void *mapping;           /* owned copy of the file's bytes, an anonymous mapping (NULL once handed to a model) */
    size_t mapping_size;
    uint32_t version;
    kn_cache_key fields;     /* every key-block field, info.* included (id/env not computed) */
    int n_sections;
    kn_section sections[KN_CACHE_MAX_SECTIONS];
} kn_cfile;

/* Whether these bytes start like a compiled file. */
bool kn_cache_is_compiled(const void *data, size_t size);
/* Whether the file at path starts with the compiled-file magic (0 when it cannot be read). */
bool kn_cache_file_is_compiled(const char *path);

/* Opens and validates a compiled file: header, format version, key block, section table, the
 * body checksum and every section's checksum. Errors are KILN_ERR_CACHE (KILN_ERR_IO when the
 * file cannot be opened or read, KILN_ERR_INVALID_ARGUMENT for a directory) naming the path, the
 * part (header, key block, section table, section 'x') and the field. The file is read into
 * memory kiln owns (see cache/reader.c: never used in place), after its header was validated. */
kiln_status kn_cfile_open(const char *path, kn_cfile **out);
/* Same for an entry of the cache directory: not through a symbolic link, and only a file owned by
 * this user and writable by nobody else (KILN_ERR_CACHE saying why not). */
kiln_status kn_cfile_open_entry(const char *path, kn_cfile **out);
/* Same, over bytes in memory. With copy, the bytes are copied into an owned mapping (so a model
 * can keep pointing into them); otherwise data is borrowed and must outlive the kn_cfile and
 * kn_cfile_model must not be called. */
kiln_status kn_cfile_open_memory(const void *data, size_t size, const char *label, bool copy, kn_cfile **out);
/* Only the header and key block (for listing a cache and explaining misses): sections are not
 * checked. */
kiln_status kn_cfile_open_header(const char *path, kn_cfile **out);
kiln_status kn_cfile_open_entry_header(const char *path, kn_cfile **out);
void kn_cfile_close(kn_cfile *f);
const kn_section *kn_cfile_section(const kn_cfile *f, uint32_t kind, const char *name);

/* Compares the file's key fields with `want` (only the environment fields when env_only): 0 when
 * they match, else writes the first difference to why, e.g. "kiln version 0.1.0 != 0.0.9 in
 * file", and returns how many fields differ. */
int kn_cfile_compare_key(const kn_cfile *f, const kn_cache_key *want, bool env_only, char *why, size_t cap);

/* Builds the model the file holds (schemas resolved; nodes not yet placed). The model takes
 * over the file's mapping: weights point into it. */
kiln_status kn_cfile_model(kn_cfile *f, kn_model **out);
/* Applies the file's backend sections to a session made from its model (after placement). */
kiln_status kn_cfile_apply_backends(const kn_cfile *f, kiln_session *s);

/* The writer: serialises a finished session's optimised graph and weights, and each backend's
 * section, with these key fields into a file at path, atomically (a temporary file in the same
 * folder, fsync, rename, fsync of the folder). */
kiln_status kn_cache_write(const char *path, const kiln_session *s, const kn_cache_key *key);
/* Same for an entry of the cache directory: written with mode 0600 (the user's alone). */
kiln_status kn_cache_write_entry(const char *path, const kiln_session *s, const kn_cache_key *key);
/* Same into memory (malloc'ed), for tests and the fuzzer's seeds. */
kiln_status kn_cache_write_memory(const kiln_session *s, const kn_cache_key *key, uint8_t **data_out,
                                  size_t *size_out);

/* Recomputes every checksum of a file in memory wherever its structure allows (for the fuzzer,
 * so mutated files get past the checksums into the parsers, and for tests that forge fields). */
void kn_cache_fix_checksums(uint8_t *data, size_t size);

/* ---- little-endian helpers shared by the reader and writer ---- */
static inline uint32_t kn_rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t kn_rd64(const uint8_t *p) { return (uint64_t)kn_rd32(p) | (uint64_t)kn_rd32(p + 4) << 32; }
static inline void kn_wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void kn_wr64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

#endif

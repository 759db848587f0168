/* The compiled-model cache as the rest of kiln sees it (src/cache/use.c).
 *
 * kn_cache_session_create is what kiln_session_create and kiln_session_create_from_memory do:
 *  - bytes that start with the compiled-file magic are loaded as a compiled model (its
 *    environment must match this build and device; its options are the ones it was compiled with);
 *  - options->load_path: the compiled file there is loaded; it must exist, be valid and match this
 *    model, these options and this device, else an error names the path and the field;
 *  - otherwise, with the automatic cache on (options->cache_enabled, a model from a file, and the
 *    environment variable KILN_CACHE not "0"/"off"), the key
 *    is looked up in the cache directory: a hit loads, a miss compiles and stores (one process per
 *    key compiles; others wait and load), a broken or mismatching entry is rebuilt (or, with
 *    cache_strict, an error);
 *  - options->save_path: the compiled model is also written there.
 * Each outcome is logged at info level: hit, miss, or rebuilt and why. */
#ifndef KN_CACHE_H
#define KN_CACHE_H

#include "cache/key.h"
#include "exec/session.h"

/* path (a file) or data/size/base_dir (bytes in memory; base_dir may be NULL). */
kiln_status kn_cache_session_create(const char *path, const void *data, size_t size, const char *base_dir,
                                    const kiln_session_options *options, kiln_session **out);

/* Ahead-of-time compilation for `kiln compile`: compiles the model at path with options and writes
 * the compiled file to out_path. progress (may be NULL) is told each stage as it starts. */
typedef void (*kn_cache_progress_fn)(void *arg, const char *stage);
typedef struct kn_compile_stats {
    double hash_ms, load_ms, compile_ms, write_ms;
    uint64_t bytes;
    kn_cache_key key;
} kn_compile_stats;
kiln_status kn_cache_compile_to(const char *path, const kiln_session_options *options, const char *out_path,
                                kn_cache_progress_fn progress, void *arg, kn_compile_stats *stats);

/* Fully checks a compiled file: container, checksums, graph, and a session made from it with its
 * backend sections applied. */
kiln_status kn_cache_verify_file(const char *path);

/* Test hook: when set, called with the model's path after its cache key is made and before it is
 * read again to be compiled (a cache miss, or a save path), so a test can change the file in
 * between. */
extern void (*kn_cache_test_after_key)(const char *path);

#endif

/* The compiled-cache key: everything that decides what compiling a model produces.
 *
 * A key is a list of named text fields, written in clear into every compiled file:
 *   format            the compiled-file format version
 *   kiln              the kiln version
 *   registry          a digest of this build's operator schemas and CPU kernel tables
 *   build             KILN_BUILD_ID if the build defines it, else a digest of the binary's machine
 *                     code: development builds of one version do not share compiled graphs
 *                     (compared for cache entries only, not for explicitly given compiled files)
 *   device.<p>.<x>    the device fingerprint of each provider the options use (cpu.model,
 *                     cpu.isa; cuda.name, cuda.cc, cuda.driver, ... from the CUDA backend)
 *   model             a digest of the model's content: every byte of the .onnx and of every
 *                     external data file it names
 *   options           every option that changes compilation (opt level, disabled passes,
 *                     providers and their options)
 *   shapes            the input-shape profile (dims fixed with kiln_session_options_set_dim)
 * Fields whose name starts with "info." (source path, creation time) are informative and never
 * compared.
 *
 * The first five describe the environment, the last three the compile job. A cache entry is
 * named <id>-<env>.kiln with id = a digest of the job fields (32 hex digits) and env = a digest of
 * the environment fields (16 hex digits), so one cache directory serves several devices or kiln
 * versions side by side, and a miss can say why by reading the entries with the same id. */
#ifndef KN_CACHE_KEY_H
#define KN_CACHE_KEY_H

#include "cache/hash.h"
#include "exec/session.h"

#include <stdbool.h>

#define KN_KEY_MAX_FIELDS 32
#define KN_KEY_NAME_MAX 48

typedef struct kn_key_field {
    char name[KN_KEY_NAME_MAX];
    char *value; /* malloc'ed, printable (escaped), no newline */
} kn_key_field;

typedef struct kn_cache_key {
    int n;
    kn_key_field f[KN_KEY_MAX_FIELDS];
    kn_hash128 id;
    uint64_t env;
    char name[64]; /* "<id hex>-<env hex>" */
} kn_cache_key;

/* The key for a model file (or for model bytes in memory whose external data, if any, resolves
 * against base_dir, which may be NULL) under these options (NULL = defaults). Hashes the whole
 * model and its external data. An external file that cannot be read is hashed as "missing" (the
 * compile that follows reports the loader's error). */
kiln_status kn_cache_key_for_file(const char *path, const kiln_session_options *o, kn_cache_key *out);
kiln_status kn_cache_key_for_memory(const void *data, size_t size, const char *base_dir,
                                    const kiln_session_options *o, kn_cache_key *out);
/* The environment fields only (format, kiln, registry, device): what a compiled file run on its
 * own must match. */
kiln_status kn_cache_key_env(const kiln_session_options *o, kn_cache_key *out);
void kn_cache_key_free(kn_cache_key *k);
kiln_status kn_cache_key_copy(const kn_cache_key *src, kn_cache_key *dst);

/* Sets (adds or replaces) a field; value is escaped into printable text. */
kiln_status kn_cache_key_set(kn_cache_key *k, const char *name, const char *value);
const char *kn_cache_key_get(const kn_cache_key *k, const char *name);
void kn_cache_key_unset(kn_cache_key *k, const char *name);
/* Computes id, env and name from the fields. */
void kn_cache_key_finish(kn_cache_key *k);
bool kn_cache_field_is_env(const char *name);
/* A human label for a field: "kiln version", "device cuda.cc", "compile options", ... */
const char *kn_cache_field_label(const char *name, char *buf, size_t cap);

/* The canonical text of the options that change compilation, and of the shape profile. */
char *kn_cache_options_text(const kiln_session_options *o);
char *kn_cache_shapes_text(const kiln_session_options *o);

/* The content digest of model bytes plus their external data (see kn_cache_key_for_memory). */
kn_hash128 kn_cache_content_digest(const uint8_t *data, size_t size, const char *base_dir);

/* Device fingerprint fields for the providers the options use (src/cache/device.c). */
kiln_status kn_cache_device_fields(const kiln_session_options *o, kn_cache_key *k);
/* Test hook: "name=value;name=value" fields that replace (or add to) the real device fields of
 * every key made afterwards, e.g. "device.cpu.model=Fake CPU" (or the "build" field, to act as
 * another build of kiln). NULL or "" turns it off. The
 * environment variable KILN_CACHE_FAKE_DEVICE does the same for whole processes. */
void kn_cache_set_fake_device(const char *spec);

#endif

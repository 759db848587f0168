/* Backend sections of a compiled file: what each backend decided at compile time (kernel choices,
 * tuning results, compiled kernels, weights converted to their compiled precision/layout), stored
 * so a warm start repeats none of it.
 *
 * A backend registers one entry in kn_cache_backends (src/cache/backend.c): the section name
 * ("<provider>.<what>"), a save function that appends its data for a finished session (nodes
 * placed, kernels chosen), and a load function that applies a section to a session made from a
 * compiled file, after placement (kn_graph_place) and before the first run: it may check or
 * replace kernel choices and attach tuned parameters or converted weights. load must validate
 * everything it reads (checksums are no defence against a hostile file) and return
 * KILN_ERR_CACHE naming the section and the field; the session is then discarded and, for a cache
 * entry, the model compiled afresh. */
#ifndef KN_CACHE_BACKEND_H
#define KN_CACHE_BACKEND_H

#include "cache/buf.h"
#include "exec/session.h"

typedef struct kn_cache_backend {
    const char *section; /* NULL ends the table; at most 16 characters */
    /* Appends the section's bytes to out; writing nothing leaves the section out. */
    kiln_status (*save)(const kiln_session *s, kn_buf *out);
    kiln_status (*load)(kiln_session *s, const uint8_t *data, size_t size, const char *file);
} kn_cache_backend;

extern const kn_cache_backend kn_cache_backends[];

/* Parses a "cuda.tuning" section: a count, then per record a key and a value, each as a u32
 * length and its bytes, every length checked against the bytes left. import (may be NULL: the
 * structure is checked only) takes each record; its error fails the parse, naming the record. */
typedef kiln_status (*kn_tuning_import_fn)(void *arg, const void *key, size_t key_len, const void *val, size_t val_len);
kiln_status kn_cache_tuning_parse(const uint8_t *data, size_t size, const char *file, kn_tuning_import_fn import,
                                  void *arg);

/* How many tuning results the session's backends made themselves (not read from a compiled file):
 * when it grows after the file was written, the file is written again (cache/use.c). -1 when no
 * backend of the session tunes (the CPU). */
int kn_cache_tuning_made(const kiln_session *s);

#endif

/* libFuzzer target for the compiled-file reader: container validation, the graph section, the
 * backend sections, and a session made from what they hold; and the "cuda.tuning" section's
 * parser on the raw input (a CPU build has no backend that would take that section from a file).
 *
 * Each input is read twice: as it is (almost every mutation then stops at a checksum, which is
 * the point of checksums), and with its checksums recomputed (kn_cache_fix_checksums), so the
 * mutations reach the parsers behind them as a hostile file with valid checksums would.
 * Everything is freed; a crash, a leak, an out-of-bounds read or undefined behaviour is a
 * finding. Seeds: tests/fuzz/corpus_cache (tests/fuzz/make_cache_corpus.py). */
#include "cache/backend.h"
#include "cache/format.h"
#include "exec/session.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static kiln_session_options *opts;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    kiln_session_options_create(&opts);
    kiln_session_options_set_intra_op_threads(opts, 1); /* no thread start-up per input */
    kiln_session_options_set_log_level(opts, KILN_LOG_ERROR);
    return 0;
}

static void read_all(const uint8_t *data, size_t size) {
    kn_cfile *f = NULL;
    if (kn_cfile_open_memory(data, size, "fuzz.kiln", true, &f) != KILN_OK) return;
    kn_cache_key env;
    if (kn_cache_key_env(NULL, &env) == KILN_OK) {
        char why[256];
        kn_cfile_compare_key(f, &env, false, why, sizeof why);
        kn_cache_key_free(&env);
    }
    kn_model *m = NULL;
    if (kn_cfile_model(f, &m) == KILN_OK) {
        kiln_session *s = NULL;
        if (kn_session_from_compiled(m, opts, &s) == KILN_OK) {
            kn_cfile_apply_backends(f, s);
            kiln_session_destroy(s);
        }
    }
    kn_cfile_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kn_cache_tuning_parse(data, size, "fuzz.kiln", NULL, NULL);
    read_all(data, size);
    if (size >= KN_CACHE_HEADER_SIZE && size <= ((size_t)4 << 20)) {
        uint8_t *copy = malloc(size);
        if (!copy) return 0;
        memcpy(copy, data, size);
        kn_cache_fix_checksums(copy, size);
        read_all(copy, size);
        free(copy);
    }
    return 0;
}

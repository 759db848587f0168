/* libFuzzer target for the ONNX loader: a model from memory (with a folder holding a small
 * external-data file, so external references are resolved for real) and the value readers.
 * Everything is freed; a leak, an out-of-bounds read or undefined behaviour is a finding. */
#include "onnx/loader.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char ext_dir[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    /* one fixed folder: parallel fuzzing jobs write the same bytes into it */
    snprintf(ext_dir, sizeof ext_dir, "/tmp/kiln_fuzz_ext");
    mkdir(ext_dir, 0700);
    char path[128];
    snprintf(path, sizeof path, "%s/data.bin", ext_dir);
    FILE *f = fopen(path, "wb");
    if (f) {
        uint8_t bytes[256];
        for (int i = 0; i < 256; i++) bytes[i] = (uint8_t)i;
        fwrite(bytes, 1, sizeof bytes, f);
        fclose(f);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kn_model *m = NULL;
    if (kn_onnx_load_memory(data, size, ext_dir, &m) == KILN_OK) kn_model_free(m);
    for (int kind = -1; kind <= KN_VALUE_OPTIONAL; kind++) {
        kn_tensor *t = NULL;
        char *name = NULL;
        if (kn_onnx_parse_value_as(data, size, kind, &t, &name) == KILN_OK) {
            kn_tensor_free(t);
            free(name);
        }
    }
    return 0;
}

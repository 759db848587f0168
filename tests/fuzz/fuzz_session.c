/* libFuzzer target for a whole session: a model from memory is optimised, compiled and run on the
 * CPU at every optimisation level in turn (one level per input, from its first byte), each graph
 * input given as zeros of its declared shape (symbolic dims 1), under a run timeout, a memory
 * limit and a tensor size limit, so a model that legitimately runs long or grows (a Loop of 2^62
 * steps, a ConstantOfShape of 10^10) stops as it would for a caller. A crash, a hang past the timeout, a leak, an out-of-bounds access or undefined
 * behaviour is a finding; a refused model or a failed run is not. */
#include "kiln.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUT_ELEMENTS (1 << 16)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    setenv("KILN_LOG", "error", 0);
    /* no tensor past 256 MB (a fuzzed shape asks for any size; libFuzzer counts a huge malloc as a
     * finding, kiln refuses it with a message) */
    setenv("KILN_MAX_TENSOR_BYTES", "256M", 0);
    return 0;
}

/* Zeros of the input's declared shape, or NULL where that is not a small numeric tensor. */
static kiln_tensor *zeros_for(const kiln_value_info *info) {
    if (info->rank < 0 || info->rank > KILN_MAX_RANK || info->dtype == KILN_DTYPE_STRING ||
        info->dtype == KILN_DTYPE_UNDEFINED)
        return NULL;
    int64_t dims[KILN_MAX_RANK], n = 1;
    for (int d = 0; d < info->rank; d++) {
        dims[d] = info->dims[d] < 0 ? 1 : info->dims[d];
        if (dims[d] > MAX_INPUT_ELEMENTS || (n *= dims[d]) > MAX_INPUT_ELEMENTS) return NULL;
    }
    kiln_tensor *t = NULL;
    return kiln_tensor_create(info->dtype, dims, info->rank, &t) == KILN_OK ? t : NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    kiln_session_options *o = NULL;
    if (kiln_session_options_create(&o) != KILN_OK) return 0;
    kiln_session_options_set_opt_level(o, data[0] % 4);
    kiln_session_options_set_intra_op_threads(o, 1);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_memory_limit(o, 64u << 20);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create_from_memory(data + 1, size - 1, NULL, o, &s);
    kiln_session_options_destroy(o);
    if (st != KILN_OK) return 0;
    size_t ni = kiln_session_input_count(s), no = kiln_session_output_count(s);
    const char **names = calloc(ni + 1, sizeof *names);
    kiln_tensor **inputs = calloc(ni + 1, sizeof *inputs);
    kiln_tensor **outputs = calloc(no + 1, sizeof *outputs);
    kiln_run_options *ro = NULL;
    bool ready = names && inputs && outputs && kiln_run_options_create(&ro) == KILN_OK &&
                 kiln_run_options_set_timeout_ms(ro, 200) == KILN_OK;
    for (size_t i = 0; ready && i < ni; i++) {
        kiln_value_info info;
        ready = kiln_session_input_info(s, i, &info) == KILN_OK && (inputs[i] = zeros_for(&info)) != NULL;
        if (ready) names[i] = info.name;
    }
    if (ready && kiln_session_run_with(s, ro, names, inputs, ni, NULL, no, outputs) == KILN_OK)
        for (size_t i = 0; i < no; i++) kiln_tensor_destroy(outputs[i]);
    for (size_t i = 0; inputs && i < ni; i++) kiln_tensor_destroy(inputs[i]);
    kiln_run_options_destroy(ro);
    free(names);
    free(inputs);
    free(outputs);
    kiln_session_destroy(s);
    return 0;
}

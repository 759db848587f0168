/* See sniff.h: the outline of a protobuf message, and what else a file might be. */
#include "onnx/sniff.h"

#include "util/status.h"

#include <stdio.h>
#include <string.h>

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5, WT_ANY = -1, WT_PACKED = -2 };

static bool varint(const uint8_t *d, size_t n, size_t *pos, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*pos >= n) return false;
        uint8_t b = d[(*pos)++];
        x |= (uint64_t)(b & 0x7f) << (shift < 64 ? shift : 63);
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* Walks the top-level fields of a message; want[num] is the wire type field num must have
 * (WT_ANY: either not known or any; WT_PACKED: varint or length-delimited, a repeated number).
 * Counts each field in seen[num] (num < n_want). False when the bytes are not a well-formed
 * sequence of fields or a known field has another wire type; *truncated (when not NULL) tells
 * whether they were well formed up to a field that runs past the end. */
static bool outline_ex(const uint8_t *d, size_t n, const int *want, int n_want, int *seen, bool *truncated) {
    size_t pos = 0;
    if (truncated) *truncated = false;
    if (n == 0) return false;
    while (pos < n) {
        uint64_t tag, v;
        if (!varint(d, n, &pos, &tag)) return false;
        uint64_t num = tag >> 3;
        int wt = (int)(tag & 7);
        if (num == 0 || num > 536870911u) return false;
        switch (wt) {
        case WT_VARINT:
            if (!varint(d, n, &pos, &v)) return false;
            break;
        case WT_I64:
            if (n - pos < 8) return false;
            pos += 8;
            break;
        case WT_LEN:
            if (!varint(d, n, &pos, &v)) return false;
            if (v > n - pos) {
                if (truncated && (int64_t)num < n_want && want[num] == WT_LEN) *truncated = true;
                return false;
            }
            pos += (size_t)v;
            break;
        case WT_I32:
            if (n - pos < 4) return false;
            pos += 4;
            break;
        default: return false; /* groups (3, 4) and 6, 7: not in any ONNX message */
        }
        if ((int64_t)num < n_want) {
            int w = want[num];
            if (w == WT_PACKED && wt != WT_VARINT && wt != WT_LEN) return false;
            if (w >= 0 && w != wt) return false;
            seen[num]++;
        }
    }
    return true;
}

static bool outline(const uint8_t *d, size_t n, const int *want, int n_want, int *seen) {
    return outline_ex(d, n, want, n_want, seen, NULL);
}

/* 1: a ModelProto's outline; -1: one cut short (well formed up to a field that runs past the end,
 * after an ir_version); 0: neither */
static int model_outline(const uint8_t *d, size_t n) {
    /* ModelProto: 1 ir_version, 2 producer_name, 3 producer_version, 4 domain, 5 model_version,
     * 6 doc_string, 7 graph, 8 opset_import, 14 metadata_props, 20 training_info, 25 functions,
     * 26 configuration */
    int want[27], seen[27] = {0};
    for (int i = 0; i < 27; i++) want[i] = WT_ANY;
    want[1] = WT_VARINT, want[2] = want[3] = want[4] = WT_LEN, want[5] = WT_VARINT, want[6] = WT_LEN;
    want[7] = want[8] = want[14] = want[20] = want[25] = want[26] = WT_LEN;
    bool truncated;
    if (!d) return 0;
    if (outline_ex(d, n, want, 27, seen, &truncated)) return seen[7] >= 1;
    return truncated && seen[1] ? -1 : 0;
}

bool kn_onnx_looks_like_model(const uint8_t *d, size_t n) { return model_outline(d, n) == 1; }

bool kn_onnx_looks_like_value(const uint8_t *d, size_t n) {
    if (!d) return false;
    /* TensorProto: 1 dims, 2 data_type, 3 segment, 4 float_data, 5 int32_data, 6 string_data,
     * 7 int64_data, 8 name, 9 raw_data, 10 double_data, 11 uint64_data, 12 doc_string,
     * 13 external_data, 14 data_location, 16 metadata_props */
    int want[17], seen[17] = {0};
    for (int i = 0; i < 17; i++) want[i] = WT_ANY;
    want[1] = WT_PACKED, want[2] = WT_VARINT, want[3] = WT_LEN, want[4] = WT_ANY, want[5] = WT_PACKED;
    want[6] = WT_LEN, want[7] = WT_PACKED, want[8] = want[9] = WT_LEN, want[10] = WT_ANY;
    want[11] = WT_PACKED, want[12] = want[13] = WT_LEN, want[14] = WT_VARINT, want[16] = WT_LEN;
    if (outline(d, n, want, 17, seen) && seen[2] >= 1) return true;
    /* SequenceProto / OptionalProto: 1 name, 2 elem_type, 3..7 values */
    int want2[8] = {WT_ANY, WT_LEN, WT_VARINT, WT_LEN, WT_LEN, WT_LEN, WT_LEN, WT_LEN}, seen2[8] = {0};
    return outline(d, n, want2, 8, seen2) && seen2[2] >= 1;
}

const char *kn_file_kind_hint(const uint8_t *d, size_t n) {
    if (!d || n == 0) return NULL;
    if (n >= 8 && !memcmp(d, "KILNCOMP", 8)) return "a kiln compiled file";
    if (n >= 6 && !memcmp(d, "\x93NUMPY", 6)) return "a .npy array";
    if (n >= 4 && !memcmp(d, "PK\x03\x04", 4)) return "a ZIP archive: a PyTorch checkpoint or .npz?";
    if (n >= 8 && !memcmp(d, "\x89HDF\r\n\x1a\n", 8)) return "an HDF5 file: a Keras model?";
    if (n >= 4 && !memcmp(d, "\x7f" "ELF", 4)) return "an executable";
    if (n >= 8 && (!memcmp(d + 4, "TFL3", 4))) return "a TensorFlow Lite model";
    if (n >= 2 && d[0] == 0x1f && d[1] == 0x8b) return "a gzip file: decompress it first";
    int model = model_outline(d, n);
    if (model == 1) return "an ONNX model";
    if (model == -1) return "an ONNX model cut short: a truncated copy?";
    if (kn_onnx_looks_like_value(d, n)) return "an ONNX tensor (TensorProto): an input or output file";
    /* text: the first 512 bytes printable ASCII or UTF-8 */
    size_t k = n < 512 ? n : 512, printable = 0;
    for (size_t i = 0; i < k; i++) printable += d[i] >= 0x20 || d[i] == '\n' || d[i] == '\r' || d[i] == '\t' || d[i] >= 0x80;
    if (printable == k) return "text";
    return NULL;
}

kiln_status kn_not_a(kiln_status st, const char *what, const char *kind, const char *hint) {
    char detail[1024];
    const char *msg = kn_last_error();
    size_t wl = strlen(what);
    /* the detail without the loader's own "PATH: " */
    if (!strncmp(msg, what, wl) && msg[wl] == ':' && msg[wl + 1] == ' ') msg += wl + 2;
    snprintf(detail, sizeof detail, "%s", msg);
    if (hint && !strcmp(kind, "an ONNX tensor file") && !strncmp(hint, "an ONNX tensor", 14)) hint = NULL;
    if (hint && !strcmp(kind, "an ONNX model") && !strcmp(hint, "an ONNX model")) hint = NULL;
    if (hint) return kn_error(st, "%s is not %s (it looks like %s): %s", what, kind, hint, detail);
    return kn_error(st, "%s is not %s: %s", what, kind, detail);
}

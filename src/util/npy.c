#include "util/npy.h"

#include "util/file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *descr;
    kiln_dtype dtype;
} kn_npy_types[] = {
    {"<f4", KILN_DTYPE_FLOAT},   {"<f8", KILN_DTYPE_DOUBLE},  {"<f2", KILN_DTYPE_FLOAT16},
    {"<i8", KILN_DTYPE_INT64},   {"<i4", KILN_DTYPE_INT32},   {"<i2", KILN_DTYPE_INT16},
    {"|i1", KILN_DTYPE_INT8},    {"<u8", KILN_DTYPE_UINT64},  {"<u4", KILN_DTYPE_UINT32},
    {"<u2", KILN_DTYPE_UINT16},  {"|u1", KILN_DTYPE_UINT8},   {"|b1", KILN_DTYPE_BOOL},
};

kiln_status kn_npy_parse(const unsigned char *d, size_t size, const char *what, kn_tensor **out) {
    *out = NULL;
    if (size < 10 || memcmp(d, "\x93NUMPY", 6))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s is not a .npy file: %s", what,
                        size < 10 ? "shorter than a .npy header (10 bytes)"
                                  : "it does not start with the .npy magic \\x93NUMPY");
    int major = d[6];
    size_t hlen, off;
    if (major == 1) {
        hlen = (size_t)d[8] | (size_t)d[9] << 8;
        off = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12) return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: truncated .npy header", what);
        hlen = (size_t)d[8] | (size_t)d[9] << 8 | (size_t)d[10] << 16 | (size_t)d[11] << 24;
        off = 12;
    } else {
        return kn_error(KILN_ERR_UNSUPPORTED, "%s: .npy format version %d is not supported", what, major);
    }
    if (hlen > size - off) return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: .npy header runs past the end", what);
    char *h = malloc(hlen + 1);
    if (!h) return KN_OOM();
    memcpy(h, d + off, hlen);
    h[hlen] = 0;
    kiln_status st = KILN_OK;
    kiln_dtype dtype = KILN_DTYPE_UNDEFINED;
    int64_t dims[KILN_MAX_RANK];
    int rank = 0;
    char *p = strstr(h, "'descr'");
    if (p && (p = strchr(p + 7, '\''))) {
        for (size_t i = 0; i < sizeof kn_npy_types / sizeof kn_npy_types[0]; i++)
            if (!strncmp(p + 1, kn_npy_types[i].descr, 3) && p[4] == '\'') dtype = kn_npy_types[i].dtype;
        if (!dtype) {
            st = kn_error(KILN_ERR_UNSUPPORTED, "%s: .npy element type %.8s is not supported (little-endian numeric and bool only)", what, p);
            goto done;
        }
    } else {
        st = kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: .npy header has no descr", what);
        goto done;
    }
    if ((p = strstr(h, "'fortran_order'")) && (p = strchr(p + 15, ':')) && !strncmp(p + 1 + strspn(p + 1, " "), "True", 4)) {
        st = kn_error(KILN_ERR_UNSUPPORTED, "%s: Fortran-ordered .npy arrays are not supported", what);
        goto done;
    }
    p = strstr(h, "'shape'");
    if (!p || !(p = strchr(p, '('))) {
        st = kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: .npy header has no shape", what);
        goto done;
    }
    p++;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || rank >= KILN_MAX_RANK) {
            st = kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: bad .npy shape", what);
            goto done;
        }
        dims[rank++] = v;
        p = end;
    }
    st = kn_tensor_new(dtype, rank, dims, out);
    if (st != KILN_OK) goto done;
    size_t body = off + hlen;
    if ((*out)->nbytes > size - body) {
        kn_tensor_free(*out);
        *out = NULL;
        st = kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: .npy data is %zu bytes, the shape needs %zu", what,
                      size - body, (size_t)0 + (size_t)kn_shape_count(dims, rank) * kiln_dtype_size(dtype));
        goto done;
    }
    memcpy((*out)->data, d + body, (*out)->nbytes);
done:
    free(h);
    return st;
}

kiln_status kn_npy_read(const char *path, kn_tensor **out) {
    unsigned char *data;
    size_t size;
    KN_TRY(kn_file_read_all(path, &data, &size));
    kiln_status st = kn_npy_parse(data, size, path, out);
    free(data);
    return st;
}

kiln_status kn_npy_write(const char *path, const kn_tensor *t) {
    const char *descr = NULL;
    for (size_t i = 0; i < sizeof kn_npy_types / sizeof kn_npy_types[0]; i++)
        if (kn_npy_types[i].dtype == t->dtype) descr = kn_npy_types[i].descr;
    if (kn_dtype_is_packed(t->dtype))
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "%s: cannot write element type %s as .npy: .npy has no packed %d-bit type (Cast to int8, "
                        "uint8 or float first)",
                        path, kiln_dtype_name(t->dtype), kn_dtype_bits(t->dtype));
    if (!descr || t->kind != KN_VALUE_TENSOR)
        return kn_error(KILN_ERR_UNSUPPORTED, "%s: cannot write element type %s as .npy", path,
                        kiln_dtype_name(t->dtype));
    char header[512], shape[400];
    size_t used = 0;
    shape[0] = 0;
    for (int i = 0; i < t->rank; i++)
        used += (size_t)snprintf(shape + used, sizeof shape - used, "%lld,%s", (long long)t->dims[i],
                                 i + 1 < t->rank ? " " : "");
    if (t->rank > 1) shape[strlen(shape) - 1] = 0; /* "(2, 3)" not "(2, 3,)" */
    int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape);
    /* pad with spaces so the data starts on a 64-byte boundary; header ends in '\n' */
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) return kn_error(KILN_ERR_IO, "%s: cannot open for writing", path);
    unsigned hl = (unsigned)(n + pad + 1);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff), (unsigned char)(hl >> 8)};
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(header, 1, (size_t)n, f) == (size_t)n;
    for (size_t i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && (t->nbytes == 0 || fwrite(t->data, 1, t->nbytes, f) == t->nbytes);
    ok = (fclose(f) == 0) && ok;
    return ok ? KILN_OK : kn_error(KILN_ERR_IO, "%s: write failed", path);
}

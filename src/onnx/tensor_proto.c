/* TensorProto (inline typed fields, raw_data, external data), SequenceProto and OptionalProto. */
#include "onnx/loader.h"
#include "onnx/loader_internal.h"
#include "onnx/sniff.h"
#include "util/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const tensor_fields[] = {
    [1] = "dims",        [2] = "data_type",   [3] = "segment",   [4] = "float_data",
    [5] = "int32_data",  [6] = "string_data", [7] = "int64_data", [8] = "name",
    [9] = "raw_data",    [10] = "double_data", [11] = "uint64_data", [12] = "doc_string",
    [13] = "external_data", [14] = "data_location", [16] = "metadata_props",
};
const kn_pb_desc kn_desc_tensor = {"TensorProto", tensor_fields, 17};

static const char *const entry_fields[] = {[1] = "key", [2] = "value"};
static const kn_pb_desc desc_entry = {"StringStringEntryProto", entry_fields, 3};

static const char *const seq_fields[] = {
    [1] = "name", [2] = "elem_type", [3] = "tensor_values", [4] = "sparse_tensor_values",
    [5] = "sequence_values", [6] = "map_values", [7] = "optional_values",
};
const kn_pb_desc kn_desc_sequence = {"SequenceProto", seq_fields, 8};
static const char *const opt_fields[] = {
    [1] = "name", [2] = "elem_type", [3] = "tensor_value", [4] = "sparse_tensor_value",
    [5] = "sequence_value", [6] = "map_value", [7] = "optional_value",
};
const kn_pb_desc kn_desc_optional = {"OptionalProto", opt_fields, 8};

kiln_status kn_load_prefix(kiln_status st, const char *fmt, ...) {
    if (strlen(kn_last_error()) > 1000) return st;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return kn_error_prefix(st, "%s", buf);
}

static bool host_le(void) {
    const uint16_t x = 1;
    return *(const uint8_t *)&x == 1;
}

kiln_status kn_load_check_dtype(const kn_pb *r, const kn_pb_field *f, int64_t v, bool allow_undefined,
                                const char *what) {
    if (v == 0 && allow_undefined) return KILN_OK;
    if (v == 0) return kn_pb_error(r, f, KILN_ERR_INVALID_MODEL, "%s is 0 (UNDEFINED)", what);
    /* types newer ONNX versions define that kiln cannot hold yet */
    static const char *const newer[] = {[27] = "float6e2m3", [28] = "float6e3m2"};
    if (!kn_dtype_is_valid((int)v) && v >= 27 && v <= 28)
        return kn_pb_error(r, f, KILN_ERR_UNSUPPORTED, "%s %lld (%s) is not supported by kiln yet", what, (long long)v,
                           newer[v]);
    if (!kn_dtype_is_valid((int)v) || v != (int)v)
        return kn_pb_error(r, f, KILN_ERR_INVALID_MODEL, "unknown %s %lld (known types are 1..%d)", what,
                           (long long)v, KILN_DTYPE_COUNT_ - 1);
    return KILN_OK;
}

/* The typed field that holds elements of type t when raw_data is not used. */
static int typed_field_for(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT:
    case KILN_DTYPE_COMPLEX64: return 4;
    case KILN_DTYPE_STRING: return 6;
    case KILN_DTYPE_INT64: return 7;
    case KILN_DTYPE_DOUBLE:
    case KILN_DTYPE_COMPLEX128: return 10;
    case KILN_DTYPE_UINT32:
    case KILN_DTYPE_UINT64: return 11;
    default: return 5; /* int32_data carries every other type's bits */
    }
}

static bool is_complex(kiln_dtype t) { return t == KILN_DTYPE_COMPLEX64 || t == KILN_DTYPE_COMPLEX128; }

/* Copies n elements of size es, swapping bytes on a big-endian host (raw_data is little-endian). */
static void copy_le(void *dst, const uint8_t *src, size_t nbytes, size_t es) {
    if (host_le() || es == 1) {
        if (nbytes) memcpy(dst, src, nbytes);
        return;
    }
    uint8_t *d = dst;
    for (size_t i = 0; i + es <= nbytes; i += es)
        for (size_t b = 0; b < es; b++) d[i + b] = src[i + es - 1 - b];
}

/* Memory for a tensor's copied elements, freed by kn_tensor_free (free()). Large ones are
 * 2 MiB aligned and advised to use huge pages: one fault per 2 MiB instead of one per 4 KiB is
 * most of the time of copying a big embedding table. */
static void *alloc_copy(size_t need) {
    const size_t huge = (size_t)2 << 20;
    if (need >= 2 * huge && need <= SIZE_MAX - huge) {
        size_t cap = (need + huge - 1) & ~(huge - 1);
        void *p = aligned_alloc(huge, cap);
        if (p) {
#ifdef MADV_HUGEPAGE
            madvise(p, cap, MADV_HUGEPAGE);
#endif
            return p;
        }
    }
    return aligned_alloc(64, (need + 63) & ~(size_t)63);
}

kiln_status kn_load_apply_copies(kn_load *L) {
    size_t total = 0;
    kiln_status st = KILN_OK;
    for (int i = 0; i < L->n_copies; i++) {
        size_t n = (L->copies[i].nbytes + 63) & ~(size_t)63;
        if (n < L->copies[i].nbytes || total > SIZE_MAX - n) {
            st = kn_error(KILN_ERR_OUT_OF_MEMORY, "initializers too large to copy");
            goto done;
        }
        total += n;
    }
    if (total) {
        uint8_t *block = alloc_copy(total);
        kn_tensor *holder = NULL;
        int64_t dim = (int64_t)total;
        if (!block) {
            st = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory copying %zu bytes of initializers", total);
            goto done;
        }
        st = kn_tensor_new_view(KILN_DTYPE_UINT8, 1, &dim, block, total, &holder);
        if (st != KILN_OK) {
            free(block);
            goto done;
        }
        holder->owns_data = true;
        holder->capacity = total;
        st = kn_model_own_tensor(L->m, holder);
        if (st != KILN_OK) {
            kn_tensor_free(holder);
            goto done;
        }
        size_t off = 0;
        for (int i = 0; i < L->n_copies; i++) {
            kn_copy *c = &L->copies[i];
            copy_le(block + off, c->src, c->nbytes, c->elem);
            c->t->data = block + off;
            off += (c->nbytes + 63) & ~(size_t)63;
        }
    }
done:
    free(L->copies);
    L->copies = NULL;
    L->n_copies = L->cap_copies = 0;
    return st;
}

/* ---- external data ---- */

typedef struct ext_info {
    const uint8_t *loc;
    size_t loc_len;
    bool has_off, has_len;
    uint64_t off, len;
} ext_info;

static kiln_status parse_u64(const kn_pb *r, const kn_pb_field *f, const uint8_t *s, size_t n, const char *key,
                             uint64_t *out) {
    uint64_t v = 0;
    if (n == 0 || n > 20) goto bad;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') goto bad;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) goto bad;
        v = v * 10 + d;
    }
    *out = v;
    return KILN_OK;
bad:
    return kn_pb_error(r, f, KILN_ERR_INVALID_MODEL, "external_data '%s' is \"%.*s\", not a decimal byte count", key,
                       (int)(n > 40 ? 40 : n), (const char *)s);
}

static kiln_status parse_ext_entry(kn_pb *r, const kn_pb_field *f, ext_info *x) {
    kn_pb e;
    kn_pb_field g;
    KN_TRY(kn_pb_sub(r, f, &desc_entry, &e));
    const uint8_t *k = NULL, *v = NULL;
    size_t kl = 0, vl = 0;
    int rc;
    while ((rc = kn_pb_next(&e, &g)) > 0) {
        if (g.num == 1) KN_TRY(kn_pb_bytes(&e, &g, &k, &kl));
        else if (g.num == 2) KN_TRY(kn_pb_bytes(&e, &g, &v, &vl));
    }
    if (rc < 0) return KILN_ERR_INVALID_MODEL;
    if (!k) return KILN_OK;
    if (kl == 8 && !memcmp(k, "location", 8)) {
        x->loc = v ? v : (const uint8_t *)"";
        x->loc_len = vl;
    } else if (kl == 6 && !memcmp(k, "offset", 6)) {
        KN_TRY(parse_u64(r, f, v, vl, "offset", &x->off));
        x->has_off = true;
    } else if (kl == 6 && !memcmp(k, "length", 6)) {
        KN_TRY(parse_u64(r, f, v, vl, "length", &x->len));
        x->has_len = true;
    }
    return KILN_OK;
}

static bool bad_location(const char *loc) {
    if (!*loc || loc[0] == '/' || loc[0] == '\\') return true;
    if (strlen(loc) >= 2 && loc[1] == ':') return true; /* a Windows drive */
    /* any ".." component, with either separator */
    const char *p = loc;
    while (*p) {
        size_t n = strcspn(p, "/\\");
        if (n == 2 && p[0] == '.' && p[1] == '.') return true;
        p += n;
        if (*p) p++;
    }
    return false;
}

/* Counts the names of (dev, ino) under dir, not crossing into other file systems or following
 * links; stops at *budget entries (returns false then: not all were seen). */
static bool count_names(const char *dir, dev_t dev, ino_t ino, int depth, long *budget, nlink_t *found) {
    if (depth > 32) return false;
    DIR *d = opendir(dir);
    if (!d) return true; /* unreadable: the names there are not counted */
    bool complete = true;
    struct dirent *de;
    size_t dl = strlen(dir);
    while (complete && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (--*budget < 0) {
            complete = false;
            break;
        }
        size_t pl = dl + strlen(de->d_name) + 2;
        char *p = malloc(pl);
        if (!p) {
            complete = false;
            break;
        }
        snprintf(p, pl, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && sb.st_dev == dev) {
            if (S_ISREG(sb.st_mode) && sb.st_ino == ino) (*found)++;
            else if (S_ISDIR(sb.st_mode)) complete = count_names(p, dev, ino, depth + 1, budget, found);
        }
        free(p);
    }
    closedir(d);
    return complete;
}

/* An external data file with more than one name (a hard link) is used only when every name is
 * inside the model's folder: a hard link can make any file of the same file system that the
 * model's author could read (another user's key, /etc/shadow for a root process) look like a file
 * of the folder, and realpath cannot tell. KILN_ALLOW_HARDLINKS=1 allows such files. */
static kiln_status check_hardlinks(kn_load *L, const char *loc, const char *real, const struct stat *sb) {
    const char *allow = getenv("KILN_ALLOW_HARDLINKS");
    if (allow && !strcmp(allow, "1")) return KILN_OK;
    long budget = 100000;
    nlink_t found = 0;
    bool complete = count_names(L->base_real, sb->st_dev, sb->st_ino, 0, &budget, &found);
    if (found < sb->st_nlink)
        return kn_error(KILN_ERR_INVALID_MODEL,
                        "external data file '%s' ('%s') has %llu names (hard links) and %s%llu of them %s inside the model "
                        "folder '%s': a hard link can bring a file from outside the folder in, so it is refused (set "
                        "KILN_ALLOW_HARDLINKS=1 to allow it)",
                        loc, real, (unsigned long long)sb->st_nlink, complete ? "only " : "after searching 100000 entries, ",
                        (unsigned long long)found, found == 1 ? "is" : "are", L->base_real);
    L->hardlink_ok = true;
    L->hardlink_dev = (uint64_t)sb->st_dev;
    L->hardlink_ino = (uint64_t)sb->st_ino;
    return KILN_OK;
}

static kiln_status load_external(kn_load *L, const ext_info *x, kiln_dtype dtype, int rank, const int64_t *dims,
                                 size_t need, kn_tensor **out) {
    char d[256];
    if (!x->loc)
        return kn_error(KILN_ERR_INVALID_MODEL, "data_location is EXTERNAL but external_data has no 'location'");
    if (memchr(x->loc, 0, x->loc_len) || x->loc_len > 4096)
        return kn_error(KILN_ERR_INVALID_MODEL, "external data location is not a valid file name");
    char loc[4097];
    memcpy(loc, x->loc, x->loc_len);
    loc[x->loc_len] = 0;
    if (!L->base_dir)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "its data is in external file '%s', but the model was loaded from memory without a base folder",
                        loc);
    if (bad_location(loc))
        return kn_error(KILN_ERR_INVALID_MODEL,
                        "external data location '%s' is absolute or contains '..': it must name a file inside the model's folder",
                        loc);
    if (dtype == KILN_DTYPE_STRING)
        return kn_error(KILN_ERR_INVALID_MODEL, "string tensors cannot use external data");
    if (!L->base_real) {
        L->base_real = realpath(L->base_dir, NULL);
        if (!L->base_real)
            return kn_error(KILN_ERR_IO, "model folder '%s' cannot be resolved: %s", L->base_dir, strerror(errno));
    }
    size_t pl = strlen(L->base_dir) + 1 + strlen(loc) + 1;
    char *path = malloc(pl);
    if (!path) return KN_OOM();
    snprintf(path, pl, "%s/%s", L->base_dir, loc);
    char *real = realpath(path, NULL);
    if (!real) {
        int e = errno;
        kiln_status st = kn_error(KILN_ERR_IO, "external data file '%s' (looked for '%s') %s", loc, path,
                                  e == ENOENT ? "does not exist" : strerror(e));
        free(path);
        return st;
    }
    free(path);
    size_t bl = strlen(L->base_real);
    bool inside = !strncmp(real, L->base_real, bl) && (real[bl] == '/' || (bl == 1 && L->base_real[0] == '/'));
    if (!inside) {
        kiln_status st = kn_error(KILN_ERR_INVALID_MODEL,
                                  "external data location '%s' resolves to '%s', outside the model folder '%s'", loc,
                                  real, L->base_real);
        free(real);
        return st;
    }
    /* real has no links left: O_NOFOLLOW refuses one swapped in since; non-blocking and regular
     * files only, so a FIFO cannot hang the load */
    int fd;
    struct stat sb;
    kiln_status st = kn_file_open_regular(real, true, "external data file", &fd, &sb);
    if (st != KILN_OK) {
        free(real);
        return st;
    }
    kn_tensor *t = NULL;
    uint64_t fsize = (uint64_t)sb.st_size;
    uint64_t off = x->has_off ? x->off : 0;
    if (sb.st_nlink > 1 && !(L->hardlink_ok && L->hardlink_dev == (uint64_t)sb.st_dev &&
                             L->hardlink_ino == (uint64_t)sb.st_ino)) {
        st = check_hardlinks(L, loc, real, &sb);
        if (st != KILN_OK) goto done;
    }
    if (x->has_len && x->len != need) {
        st = kn_error(KILN_ERR_INVALID_MODEL,
                      "external data length %llu does not match the %zu bytes that %s%s needs (file '%s')",
                      (unsigned long long)x->len, need, kiln_dtype_name(dtype), kn_dims_str(dims, rank, d, sizeof d),
                      loc);
        goto done;
    }
    if (off > fsize || need > fsize - off) {
        st = kn_error(KILN_ERR_INVALID_MODEL,
                      "external data file '%s' is %llu bytes, too short for offset %llu + length %zu (%s%s)", loc,
                      (unsigned long long)fsize, (unsigned long long)off, need, kiln_dtype_name(dtype),
                      kn_dims_str(dims, rank, d, sizeof d));
        goto done;
    }
    st = kn_tensor_new_pooled(NULL, false, dtype, rank, dims, &t); /* pread fills it */
    if (st != KILN_OK) goto done;
    size_t got = 0;
    while (got < need) {
        size_t chunk = need - got > ((size_t)1 << 30) ? ((size_t)1 << 30) : need - got;
        ssize_t n = pread(fd, (uint8_t *)t->data + got, chunk, (off_t)(off + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            st = kn_error(KILN_ERR_IO, "reading %zu bytes at offset %llu of external data file '%s' failed: %s", need,
                          (unsigned long long)off, loc, n < 0 ? strerror(errno) : "unexpected end of file");
            goto done;
        }
        got += (size_t)n;
    }
    if (!host_le()) {
        size_t es = kiln_dtype_size(dtype);
        if (is_complex(dtype)) es /= 2;
        uint8_t *p = t->data;
        for (size_t i = 0; es > 1 && i + es <= need; i += es)
            for (size_t b = 0; b < es / 2; b++) {
                uint8_t tmp = p[i + b];
                p[i + b] = p[i + es - 1 - b];
                p[i + es - 1 - b] = tmp;
            }
    }
done:
    close(fd);
    free(real);
    if (st != KILN_OK) {
        kn_tensor_free(t);
        return st;
    }
    *out = t;
    return KILN_OK;
}

/* ---- TensorProto ---- */

static const char *const typed_names[12] = {[4] = "float_data",  [5] = "int32_data", [6] = "string_data",
                                            [7] = "int64_data",  [10] = "double_data", [11] = "uint64_data"};

static kiln_status fill_typed(const kn_pb *msg, int field, kiln_dtype dtype, size_t n_vals, kn_tensor *t) {
    kn_pb it = *msg;
    kn_pb_field f;
    size_t n = 0;
    uint64_t *tmp = NULL;
    kiln_status st = KILN_OK;
    int rc;
    bool direct = (field == 7) || (field == 11 && dtype == KILN_DTYPE_UINT64);
    if ((field == 5 || field == 11) && !direct) {
        tmp = malloc(sizeof *tmp * (n_vals ? n_vals : 1));
        if (!tmp) return KN_OOM();
    }
    while ((rc = kn_pb_next(&it, &f)) > 0) {
        if ((int)f.num != field) continue;
        switch (field) {
        case 4: st = kn_pb_read_fixed32(&it, &f, t->data, n_vals, &n); break;
        case 10: st = kn_pb_read_fixed64(&it, &f, t->data, n_vals, &n); break;
        case 7:
        case 11: st = kn_pb_read_varints(&it, &f, direct ? (uint64_t *)t->data : tmp, n_vals, &n); break;
        case 5: st = kn_pb_read_varints(&it, &f, tmp, n_vals, &n); break;
        case 6: {
            const uint8_t *s;
            size_t len;
            st = kn_pb_bytes(&it, &f, &s, &len);
            if (st != KILN_OK) break;
            if (n >= n_vals) {
                st = KN_INTERNAL("more strings than counted");
                break;
            }
            char *c = malloc(len + 1);
            if (!c) {
                st = KN_OOM();
                break;
            }
            if (len) memcpy(c, s, len);
            c[len] = 0;
            ((char **)t->data)[n++] = c;
            break;
        }
        default: break;
        }
        if (st != KILN_OK) break;
    }
    if (rc < 0 && st == KILN_OK) st = KILN_ERR_INVALID_MODEL;
    if (st == KILN_OK && tmp) {
        void *d = t->data;
        for (size_t i = 0; i < n; i++) {
            uint64_t v = tmp[i];
            switch (dtype) {
            case KILN_DTYPE_INT32: ((int32_t *)d)[i] = (int32_t)(uint32_t)v; break;
            case KILN_DTYPE_UINT32: ((uint32_t *)d)[i] = (uint32_t)v; break;
            case KILN_DTYPE_INT16: ((int16_t *)d)[i] = (int16_t)(uint16_t)v; break;
            case KILN_DTYPE_UINT16:
            case KILN_DTYPE_FLOAT16:
            case KILN_DTYPE_BFLOAT16: ((uint16_t *)d)[i] = (uint16_t)v; break;
            case KILN_DTYPE_BOOL: ((uint8_t *)d)[i] = v != 0; break;
            default: ((uint8_t *)d)[i] = (uint8_t)v; break; /* int8, uint8, float8 bit patterns */
            }
        }
    }
    free(tmp);
    return st;
}

/* Best-effort: the name of the TensorProto (for messages), read without failing. */
static void peek_name(const kn_pb *r, const uint8_t **name, size_t *len) {
    kn_pb it = *r;
    kn_pb_field f;
    while (kn_pb_next(&it, &f) > 0)
        if (f.num == 8 && f.wire == KN_PB_LEN) {
            *name = it.base + f.off;
            *len = f.len;
        }
}

static kiln_status tensor_body(kn_load *L, kn_pb *r, kn_tensor **out) {
    kn_pb it = *r;
    kn_pb_field f, dtype_f = {0}, raw = {0};
    size_t n_dims = 0, counts[12] = {0};
    int64_t dtype = 0, location = 0;
    bool have_dtype = false, have_raw = false;
    ext_info ext = {0};
    char d[256];
    int rc;
    while ((rc = kn_pb_next(&it, &f)) > 0) {
        switch (f.num) {
        case 1: KN_TRY(kn_pb_count(&it, &f, KN_PB_VARINT, &n_dims)); break;
        case 2:
            KN_TRY(kn_pb_int64(&it, &f, &dtype));
            dtype_f = f;
            have_dtype = true;
            break;
        case 3: return kn_pb_error(&it, &f, KILN_ERR_UNSUPPORTED, "segmented tensors are not supported");
        case 4: KN_TRY(kn_pb_count(&it, &f, KN_PB_I32, &counts[4])); break;
        case 5:
        case 7:
        case 11: KN_TRY(kn_pb_count(&it, &f, KN_PB_VARINT, &counts[f.num])); break;
        case 10: KN_TRY(kn_pb_count(&it, &f, KN_PB_I64, &counts[10])); break;
        case 6:
            KN_TRY(kn_pb_want(&it, &f, KN_PB_LEN));
            counts[6]++;
            break;
        case 8: KN_TRY(kn_pb_want(&it, &f, KN_PB_LEN)); break;
        case 9:
            KN_TRY(kn_pb_want(&it, &f, KN_PB_LEN));
            raw = f;
            have_raw = true;
            break;
        case 13: KN_TRY(parse_ext_entry(&it, &f, &ext)); break;
        case 14: KN_TRY(kn_pb_int64(&it, &f, &location)); break;
        default: break;
        }
    }
    if (rc < 0) return KILN_ERR_INVALID_MODEL;
    if (!have_dtype) return kn_error(KILN_ERR_INVALID_MODEL, "TensorProto at byte offset %zu has no data_type", r->pos);
    KN_TRY(kn_load_check_dtype(r, &dtype_f, dtype, false, "data_type"));
    kiln_dtype dt = (kiln_dtype)dtype;
    if (n_dims > KILN_MAX_RANK)
        return kn_error(KILN_ERR_UNSUPPORTED, "rank %zu is more than the %d kiln supports", n_dims, KILN_MAX_RANK);
    /* dims */
    uint64_t udims[KILN_MAX_RANK];
    int64_t dims[KILN_MAX_RANK];
    size_t nd = 0;
    it = *r;
    while ((rc = kn_pb_next(&it, &f)) > 0)
        if (f.num == 1) KN_TRY(kn_pb_read_varints(&it, &f, udims, KILN_MAX_RANK, &nd));
    if (rc < 0) return KILN_ERR_INVALID_MODEL;
    int rank = (int)nd;
    for (int i = 0; i < rank; i++) {
        dims[i] = (int64_t)udims[i];
        if (dims[i] < 0)
            return kn_error(KILN_ERR_INVALID_MODEL, "dimension %d is negative (%lld)", i, (long long)dims[i]);
    }
    int64_t count = kn_shape_count(dims, rank);
    size_t es = kiln_dtype_size(dt);
    bool packed = kn_dtype_is_packed(dt);
    if (packed) es = 1; /* whole bytes of packed elements below */
    if (es == 0)
        return kn_error(KILN_ERR_UNSUPPORTED, "element type %s (%d) is not supported yet", kiln_dtype_name(dt),
                        (int)dt);
    if (count < 0 || (uint64_t)count > (uint64_t)(INT64_MAX / 2) / es)
        return kn_error(KILN_ERR_INVALID_MODEL, "dims %s of %s hold too many elements",
                        kn_dims_str(dims, rank, d, sizeof d), kiln_dtype_name(dt));
    size_t need = kn_dtype_nbytes(dt, count);
    int want = typed_field_for(dt);
    /* int32_data holds one packed byte (2 or 4 elements) per entry for the sub-byte types */
    size_t n_vals = packed ? need : (size_t)count * (is_complex(dt) ? 2 : 1);
    for (int k = 4; k < 12; k++)
        if (typed_names[k] && k != want && counts[k])
            return kn_error(KILN_ERR_INVALID_MODEL, "%s holds %zu values, but data_type %s keeps its values in %s",
                            typed_names[k], counts[k], kiln_dtype_name(dt), typed_names[want]);
    if (location == 1) return load_external(L, &ext, dt, rank, dims, need, out);
    if (location != 0) return kn_error(KILN_ERR_INVALID_MODEL, "data_location %lld is neither DEFAULT (0) nor EXTERNAL (1)", (long long)location);
    if (have_raw) {
        if (dt == KILN_DTYPE_STRING) return kn_error(KILN_ERR_INVALID_MODEL, "raw_data cannot hold strings");
        if (counts[want])
            return kn_error(KILN_ERR_INVALID_MODEL, "both raw_data and %s (%zu values) are set", typed_names[want],
                            counts[want]);
        if (raw.len != need)
            return kn_error(KILN_ERR_INVALID_MODEL,
                            "raw_data has %zu bytes, but %s%s needs %zu (%lld elements of %d bits)", raw.len,
                            kiln_dtype_name(dt), kn_dims_str(dims, rank, d, sizeof d), need, (long long)count,
                            kn_dtype_bits(dt));
        const uint8_t *src = r->base + raw.off;
        size_t align = is_complex(dt) ? es / 2 : es;
        if (L->view_ok && host_le() && need && ((uintptr_t)src % align) == 0) {
            KN_TRY(kn_tensor_new_view(dt, rank, dims, (void *)(uintptr_t)src, need, out));
            L->n_views++;
            return KILN_OK;
        }
        if (L->defer_copies) {
            if (L->n_copies == L->cap_copies) {
                int nc = L->cap_copies ? L->cap_copies * 2 : 64;
                kn_copy *p = realloc(L->copies, sizeof *p * (size_t)nc);
                if (!p) return KN_OOM();
                L->copies = p;
                L->cap_copies = nc;
            }
            KN_TRY(kn_tensor_new_view(dt, rank, dims, (void *)(uintptr_t)src, need, out));
            L->copies[L->n_copies++] = (kn_copy){*out, src, need, is_complex(dt) ? es / 2 : es};
            return KILN_OK;
        }
        /* an owned copy, not zero-filled first (every byte is written here) */
        KN_TRY(kn_tensor_new_pooled(NULL, false, dt, rank, dims, out));
        copy_le((*out)->data, src, need, is_complex(dt) ? es / 2 : es);
        return KILN_OK;
    }
    if (counts[want] != n_vals)
        return kn_error(KILN_ERR_INVALID_MODEL, "%s holds %zu values, but %s%s needs %zu", typed_names[want],
                        counts[want], kiln_dtype_name(dt), kn_dims_str(dims, rank, d, sizeof d), n_vals);
    KN_TRY(kn_tensor_new_pooled(NULL, false, dt, rank, dims, out)); /* every element is written below */
    if (n_vals) {
        kiln_status st = fill_typed(r, want, dt, n_vals, *out);
        if (st != KILN_OK) {
            kn_tensor_free(*out);
            *out = NULL;
            return st;
        }
    }
    return KILN_OK;
}

kiln_status kn_load_tensor(kn_load *L, kn_pb *r, kn_tensor **out, const uint8_t **name, size_t *name_len) {
    *out = NULL;
    *name = NULL;
    *name_len = 0;
    peek_name(r, name, name_len);
    kiln_status st = tensor_body(L, r, out);
    if (st != KILN_OK) {
        *out = NULL;
        if (*name_len)
            kn_load_prefix(st, "tensor '%.*s': ", (int)(*name_len > 200 ? 200 : *name_len), (const char *)*name);
        else
            kn_load_prefix(st, "tensor at byte offset %zu: ", r->pos);
    }
    return st;
}

/* ---- SequenceProto / OptionalProto ---- */

enum { ELEM_UNDEFINED = 0, ELEM_TENSOR = 1, ELEM_SPARSE = 2, ELEM_SEQUENCE = 3, ELEM_MAP = 4, ELEM_OPTIONAL = 5 };

static kiln_status parse_container(kn_load *L, kn_pb *r, bool optional, kn_tensor **out, const uint8_t **name,
                                   size_t *name_len);

/* One element of a sequence / the value of an optional, in field f of r. */
static kiln_status parse_item(kn_load *L, kn_pb *r, const kn_pb_field *f, kn_tensor **item) {
    kn_pb sub;
    const uint8_t *nm;
    size_t nl;
    switch (f->num) {
    case 3:
        KN_TRY(kn_pb_sub(r, f, &kn_desc_tensor, &sub));
        return kn_load_tensor(L, &sub, item, &nm, &nl);
    case 5:
        KN_TRY(kn_pb_sub(r, f, &kn_desc_sequence, &sub));
        return parse_container(L, &sub, false, item, &nm, &nl);
    case 7:
        KN_TRY(kn_pb_sub(r, f, &kn_desc_optional, &sub));
        return parse_container(L, &sub, true, item, &nm, &nl);
    default: return kn_pb_error(r, f, KILN_ERR_UNSUPPORTED, "sparse tensor and map values are not supported");
    }
}

static kiln_status parse_container(kn_load *L, kn_pb *r, bool optional, kn_tensor **out, const uint8_t **name,
                                   size_t *name_len) {
    kn_pb it = *r;
    kn_pb_field f;
    int64_t elem = 0;
    kn_tensor *c = NULL;
    kiln_status st;
    int rc;
    *out = NULL;
    st = optional ? kn_tensor_new_optional(KILN_DTYPE_UNDEFINED, NULL, &c) : kn_tensor_new_sequence(KILN_DTYPE_UNDEFINED, &c);
    if (st != KILN_OK) return st;
    while ((rc = kn_pb_next(&it, &f)) > 0) {
        if (f.num == 1) {
            st = kn_pb_bytes(&it, &f, name, name_len);
        } else if (f.num == 2) {
            st = kn_pb_int64(&it, &f, &elem);
            if (st == KILN_OK && (elem < 0 || elem > ELEM_OPTIONAL))
                st = kn_pb_error(&it, &f, KILN_ERR_INVALID_MODEL, "unknown elem_type %lld", (long long)elem);
        } else if (f.num >= 3 && f.num <= 7) {
            kn_tensor *item = NULL;
            if (optional && c->n_items)
                st = kn_pb_error(&it, &f, KILN_ERR_INVALID_MODEL, "an optional holds more than one value");
            if (st == KILN_OK) st = parse_item(L, &it, &f, &item);
            if (st == KILN_OK) {
                st = kn_sequence_append(c, item);
                if (st != KILN_OK) kn_tensor_free(item);
            }
            if (st == KILN_OK && c->dtype == KILN_DTYPE_UNDEFINED) c->dtype = item->dtype;
        }
        if (st != KILN_OK) break;
    }
    if (rc < 0 && st == KILN_OK) st = KILN_ERR_INVALID_MODEL;
    if (st != KILN_OK) {
        kn_tensor_free(c);
        return st;
    }
    *out = c;
    return KILN_OK;
}

/* Guesses which message a value file holds (see kn_onnx_parse_value_as). */
static int guess_kind(const uint8_t *data, size_t size) {
    kn_pb r;
    kn_pb_field f;
    kn_pb_init(&r, data, size, &kn_desc_tensor);
    int64_t elem = -1;
    int n3 = 0, n5 = 0;
    while (kn_pb_next(&r, &f) > 0) {
        if (f.num == 2 && f.wire == KN_PB_VARINT) elem = (int64_t)f.u;
        if (f.num == 3 && f.wire == KN_PB_LEN) n3++;
        if (f.num == 5 && f.wire == KN_PB_LEN) n5++;
    }
    if (elem == ELEM_UNDEFINED) return KN_VALUE_OPTIONAL; /* an empty optional */
    if (elem == ELEM_SEQUENCE && n5 == 1 && n3 == 0) return KN_VALUE_OPTIONAL;
    return KN_VALUE_SEQUENCE;
}

kiln_status kn_onnx_parse_value_as(const uint8_t *data, size_t size, int kind, kn_tensor **out, char **name_out) {
    if (!out) return kn_error(KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (name_out) *name_out = NULL;
    if (!data && size) return kn_error(KILN_ERR_INVALID_ARGUMENT, "data is NULL");
    static const uint8_t empty[1];
    if (!data) data = empty;
    kn_load L = {0};
    kn_pb r;
    const uint8_t *name = NULL;
    size_t name_len = 0;
    kiln_status st;
    if (kind < 0) {
        kn_pb_init(&r, data, size, &kn_desc_tensor);
        st = kn_load_tensor(&L, &r, out, &name, &name_len);
        if (st == KILN_OK) goto named;
        /* keep the tensor's message if the other readings fail too */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", kn_last_error());
        kiln_status tensor_st = st;
        kind = guess_kind(data, size);
        kn_pb_init(&r, data, size, kind == KN_VALUE_OPTIONAL ? &kn_desc_optional : &kn_desc_sequence);
        name = NULL;
        name_len = 0;
        st = parse_container(&L, &r, kind == KN_VALUE_OPTIONAL, out, &name, &name_len);
        if (st != KILN_OK) return kn_error(tensor_st, "%s", msg);
        goto named;
    }
    switch (kind) {
    case KN_VALUE_TENSOR:
        kn_pb_init(&r, data, size, &kn_desc_tensor);
        st = kn_load_tensor(&L, &r, out, &name, &name_len);
        break;
    case KN_VALUE_SEQUENCE:
    case KN_VALUE_OPTIONAL:
        kn_pb_init(&r, data, size, kind == KN_VALUE_OPTIONAL ? &kn_desc_optional : &kn_desc_sequence);
        st = parse_container(&L, &r, kind == KN_VALUE_OPTIONAL, out, &name, &name_len);
        break;
    default: return kn_error(KILN_ERR_INVALID_ARGUMENT, "unknown value kind %d", kind);
    }
    if (st != KILN_OK) return st;
named:
    if (name_out && name) {
        *name_out = malloc(name_len + 1);
        if (!*name_out) {
            kn_tensor_free(*out);
            *out = NULL;
            return KN_OOM();
        }
        if (name_len) memcpy(*name_out, name, name_len);
        (*name_out)[name_len] = 0;
    }
    return KILN_OK;
}

kiln_status kn_onnx_parse_value(const uint8_t *data, size_t size, kn_tensor **out, char **name_out) {
    return kn_onnx_parse_value_as(data, size, -1, out, name_out);
}

kiln_status kn_onnx_read_value_file_as(const char *path, int kind, kn_tensor **out, char **name_out) {
    if (!out) return kn_error(KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (name_out) *name_out = NULL;
    if (!path) return kn_error(KILN_ERR_INVALID_ARGUMENT, "path is NULL");
    unsigned char *data;
    size_t size;
    KN_TRY(kn_file_read_all(path, &data, &size));
    kiln_status st = kn_onnx_parse_value_as(data, size, kind, out, name_out);
    if (st != KILN_OK) {
        /* a file without a TensorProto's (or SequenceProto's) outline is "PATH is not an ONNX tensor
         * file (it looks like an ONNX model): ...", said first (onnx/sniff.c) */
        if (size == 0) st = kn_error(st, "%s is not an ONNX tensor file: the file is empty (0 bytes)", path);
        else if (!kn_onnx_looks_like_value(data, size))
            kn_not_a(st, path, "an ONNX tensor file", kn_file_kind_hint(data, size));
        else kn_error_prefix(st, "%s: ", path);
    }
    free(data);
    return st;
}

kiln_status kn_onnx_read_value_file(const char *path, kn_tensor **out, char **name_out) {
    return kn_onnx_read_value_file_as(path, -1, out, name_out);
}

/* The model content digest: every byte of the model and of every external data file it names.
 *
 * The external files are found by walking the protobuf for TensorProto.external_data entries
 * (initializers, sparse initializers, tensor attributes, in the main graph, subgraphs and
 * functions) before the model is loaded, so a cache hit never parses the model. Weights are in
 * the key because runtimes that key on file names load stale engines after a retrain. */
#include "cache/key.h"
#include "onnx/wire.h"
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const kn_pb_desc d_model = {"ModelProto", NULL, 0};
static const kn_pb_desc d_graph = {"GraphProto", NULL, 0};
static const kn_pb_desc d_node = {"NodeProto", NULL, 0};
static const kn_pb_desc d_attr = {"AttributeProto", NULL, 0};
static const kn_pb_desc d_tensor = {"TensorProto", NULL, 0};
static const kn_pb_desc d_sparse = {"SparseTensorProto", NULL, 0};
static const kn_pb_desc d_entry = {"StringStringEntryProto", NULL, 0};
static const kn_pb_desc d_function = {"FunctionProto", NULL, 0};

typedef struct ext_list {
    char **loc;
    int n, cap;
    bool bad; /* the walk stopped on a malformed message */
} ext_list;

static void add_loc(ext_list *l, const uint8_t *s, size_t n) {
    for (int i = 0; i < l->n; i++)
        if (strlen(l->loc[i]) == n && !memcmp(l->loc[i], s, n)) return;
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 8;
        char **p = realloc(l->loc, sizeof(char *) * (size_t)nc);
        if (!p) {
            l->bad = true;
            return;
        }
        l->loc = p;
        l->cap = nc;
    }
    char *c = malloc(n + 1);
    if (!c) {
        l->bad = true;
        return;
    }
    memcpy(c, s, n);
    c[n] = 0;
    l->loc[l->n++] = c;
}

static int walk_graph(ext_list *l, kn_pb *g);

static int walk_tensor(ext_list *l, kn_pb *t) {
    kn_pb_field f;
    int rc;
    while ((rc = kn_pb_next(t, &f)) > 0) {
        if (f.num != 13 || f.wire != KN_PB_LEN) continue;
        kn_pb e;
        if (kn_pb_sub(t, &f, &d_entry, &e) != KILN_OK) return -1;
        const uint8_t *k = NULL, *v = NULL;
        size_t kl = 0, vl = 0;
        kn_pb_field g;
        int rc2;
        while ((rc2 = kn_pb_next(&e, &g)) > 0) {
            if (g.wire != KN_PB_LEN) continue;
            if (g.num == 1 && kn_pb_bytes(&e, &g, &k, &kl) != KILN_OK) return -1;
            if (g.num == 2 && kn_pb_bytes(&e, &g, &v, &vl) != KILN_OK) return -1;
        }
        if (rc2 < 0) return -1;
        if (k && kl == 8 && !memcmp(k, "location", 8) && v) add_loc(l, v, vl);
    }
    return rc;
}

static int walk_sub(ext_list *l, kn_pb *r, const kn_pb_field *f, const kn_pb_desc *d, int (*fn)(ext_list *, kn_pb *)) {
    if (f->wire != KN_PB_LEN) return 0;
    kn_pb s;
    if (kn_pb_sub(r, f, d, &s) != KILN_OK) return -1;
    return fn(l, &s) < 0 ? -1 : 0;
}

static int walk_sparse(ext_list *l, kn_pb *s) {
    kn_pb_field f;
    int rc;
    while ((rc = kn_pb_next(s, &f)) > 0)
        if ((f.num == 1 || f.num == 2) && walk_sub(l, s, &f, &d_tensor, walk_tensor) < 0) return -1;
    return rc;
}

static int walk_attr(ext_list *l, kn_pb *a) {
    kn_pb_field f;
    int rc;
    while ((rc = kn_pb_next(a, &f)) > 0) {
        int r = 0;
        if (f.num == 5 || f.num == 10) r = walk_sub(l, a, &f, &d_tensor, walk_tensor);
        else if (f.num == 6 || f.num == 11) r = walk_sub(l, a, &f, &d_graph, walk_graph);
        else if (f.num == 22 || f.num == 23) r = walk_sub(l, a, &f, &d_sparse, walk_sparse);
        if (r < 0) return -1;
    }
    return rc;
}

static int walk_node(ext_list *l, kn_pb *n) {
    kn_pb_field f;
    int rc;
    while ((rc = kn_pb_next(n, &f)) > 0)
        if (f.num == 5 && walk_sub(l, n, &f, &d_attr, walk_attr) < 0) return -1;
    return rc;
}

static int walk_graph(ext_list *l, kn_pb *g) {
    kn_pb_field f;
    int rc;
    while ((rc = kn_pb_next(g, &f)) > 0) {
        int r = 0;
        if (f.num == 1) r = walk_sub(l, g, &f, &d_node, walk_node);
        else if (f.num == 5) r = walk_sub(l, g, &f, &d_tensor, walk_tensor);
        else if (f.num == 15) r = walk_sub(l, g, &f, &d_sparse, walk_sparse);
        if (r < 0) return -1;
    }
    return rc;
}

static int walk_function(ext_list *l, kn_pb *fn) {
    kn_pb_field f;
    int rc;
    while ((rc = kn_pb_next(fn, &f)) > 0)
        if (f.num == 7 && walk_sub(l, fn, &f, &d_node, walk_node) < 0) return -1;
    return rc;
}

static int walk_model(ext_list *l, kn_pb *m) {
    kn_pb_field f;
    int rc;
    while ((rc = kn_pb_next(m, &f)) > 0) {
        int r = 0;
        if (f.num == 7) r = walk_sub(l, m, &f, &d_graph, walk_graph);
        else if (f.num == 25) r = walk_sub(l, m, &f, &d_function, walk_function);
        if (r < 0) return -1;
    }
    return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The loader refuses these; hash a marker instead of reading outside the model's folder. */
static bool unsafe_location(const char *loc) {
    if (!*loc || loc[0] == '/' || loc[0] == '\\' || (loc[0] && loc[1] == ':')) return true;
    const char *p = loc;
    while (*p) {
        size_t n = strcspn(p, "/\\");
        if (n == 2 && p[0] == '.' && p[1] == '.') return true;
        p += n;
        if (*p) p++;
    }
    return false;
}

static void hash_file(kn_hasher *h, const char *dir, const char *loc) {
    if (!dir || unsafe_location(loc)) {
        kn_hasher_str(h, dir ? "unsafe" : "no-base-dir");
        return;
    }
    size_t pl = strlen(dir) + strlen(loc) + 2;
    char *path = malloc(pl);
    if (!path) {
        kn_hasher_str(h, "oom");
        return;
    }
    snprintf(path, pl, "%s/%s", dir, loc);
    /* non-blocking and regular files only, as the loader opens it (a FIFO must not hang) */
    int fd;
    struct stat sb;
    kiln_status st = kn_file_open_regular(path, false, "external data file", &fd, &sb);
    free(path);
    if (st != KILN_OK) {
        kn_clear_error(); /* the loader names the problem if the model is used */
        kn_hasher_str(h, "missing");
        return;
    }
    kn_hasher_u64(h, (uint64_t)sb.st_size);
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = malloc(CHUNK);
    if (!buf) {
        close(fd);
        kn_hasher_str(h, "oom");
        return;
    }
    for (;;) {
        ssize_t n = read(fd, buf, CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            kn_hasher_str(h, "read-error");
            break;
        }
        if (n == 0) break;
        kn_hasher_update(h, buf, (size_t)n);
    }
    free(buf);
    close(fd);
}

kn_hash128 kn_cache_content_digest(const uint8_t *data, size_t size, const char *base_dir) {
    kn_hasher h;
    kn_hasher_init(&h, 0x6d6f64656c);
    kn_hasher_u64(&h, size);
    kn_hasher_update(&h, data, size);
    ext_list l = {0};
    kn_pb m;
    kn_pb_init(&m, data, size, &d_model);
    if (walk_model(&l, &m) < 0) l.bad = true;
    /* the walk's parse errors are not ours to report: the loader names them if the model is used */
    kn_clear_error();
    if (l.bad) kn_hasher_str(&h, "walk-incomplete");
    if (l.n) qsort(l.loc, (size_t)l.n, sizeof *l.loc, cmp_str);
    kn_hasher_u64(&h, (uint64_t)l.n);
    for (int i = 0; i < l.n; i++) {
        kn_hasher_str(&h, l.loc[i]);
        hash_file(&h, base_dir, l.loc[i]);
        free(l.loc[i]);
    }
    free(l.loc);
    return kn_hasher_final(&h);
}

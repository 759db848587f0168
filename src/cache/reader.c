/* Reads compiled files: maps them, validates the container (format.c), then builds the model from
 * the graph section with the weights left in the mapping, and applies the backend sections. */
#include "cache/backend.h"
#include "cache/format_internal.h"
#include "cache/graph_codec.h"
#include "exec/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void kn_cfile_close(kn_cfile *f) {
    if (!f) return;
    if (f->mapping) munmap(f->mapping, f->mapping_size);
    kn_cache_key_free(&f->fields);
    free(f->path);
    free(f);
}

static kiln_status new_cfile(const char *path, kn_cfile **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return KN_OOM();
    (*out)->path = strdup(path);
    if (!(*out)->path) {
        free(*out);
        *out = NULL;
        return KN_OOM();
    }
    return KILN_OK;
}

/* Opens path for reading with messages that say which of the usual problems it is. */
static kiln_status open_checked(const char *path, int *fd_out, size_t *size_out) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        if (e == ENOENT) return kn_error(KILN_ERR_IO, "compiled file '%s' does not exist", path);
        return kn_error(KILN_ERR_IO, "compiled file '%s' cannot be read: %s", path, strerror(e));
    }
    if (S_ISDIR(sb.st_mode))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "'%s' is a directory, not a compiled file", path);
    if (!S_ISREG(sb.st_mode)) return kn_error(KILN_ERR_IO, "compiled file '%s' is not a regular file", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kn_error(KILN_ERR_IO, "compiled file '%s' cannot be read: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return kn_error(KILN_ERR_IO, "compiled file '%s' changed while being opened", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return kn_error(KILN_ERR_CACHE, "%s: header: the file is empty (0 bytes)", path);
    }
    *fd_out = fd;
    *size_out = (size_t)sb.st_size;
    return KILN_OK;
}

kiln_status kn_cfile_open(const char *path, kn_cfile **out) {
    *out = NULL;
    int fd;
    size_t size;
    KN_TRY(open_checked(path, &fd, &size));
    /* private and writable, like the loader's mapping: a kernel that writes to a constant gets its
     * own copy of the page and the file never changes */
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return kn_error(KILN_ERR_IO, "compiled file '%s' cannot be mapped: %s", path, strerror(e));
    /* Mapped read-only first so MAP_POPULATE maps the page cache's pages instead of copying each
     * one for writing; made writable after, so only a page actually written gets copied. */
    if (mprotect(map, size, PROT_READ | PROT_WRITE) != 0) {
        e = errno;
        munmap(map, size);
        return kn_error(KILN_ERR_IO, "compiled file '%s' cannot be mapped writable: %s", path, strerror(e));
    }
    kn_cfile *f;
    kiln_status st = new_cfile(path, &f);
    if (st != KILN_OK) {
        munmap(map, size);
        return st;
    }
    f->mapping = map;
    f->mapping_size = size;
    f->data = map;
    f->size = size;
    st = kn_cfile_parse(f, size, false);
    if (st != KILN_OK) {
        kn_cfile_close(f);
        return st;
    }
    *out = f;
    return KILN_OK;
}

kiln_status kn_cfile_open_memory(const void *data, size_t size, const char *label, bool copy, kn_cfile **out) {
    *out = NULL;
    kn_cfile *f;
    KN_TRY(new_cfile(label ? label : "<memory>", &f));
    if (copy && size) {
        void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED) {
            kn_cfile_close(f);
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "cannot map %zu bytes for a compiled model", size);
        }
        memcpy(map, data, size);
        f->mapping = map;
        f->mapping_size = size;
        f->data = map;
    } else {
        f->data = data;
    }
    f->size = size;
    kiln_status st = kn_cfile_parse(f, size, false);
    if (st != KILN_OK) {
        kn_cfile_close(f);
        return st;
    }
    *out = f;
    return KILN_OK;
}

static kiln_status read_at(int fd, void *buf, size_t n, off_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (uint8_t *)buf + got, n - got, off + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return KILN_ERR_IO;
        got += (size_t)r;
    }
    return KILN_OK;
}

kiln_status kn_cfile_open_header(const char *path, kn_cfile **out) {
    *out = NULL;
    int fd;
    size_t size;
    KN_TRY(open_checked(path, &fd, &size));
    kn_cfile *f;
    kiln_status st = new_cfile(path, &f);
    uint8_t *buf = NULL;
    if (st == KILN_OK) {
        /* the header says how much more to read; cap it at what the format allows */
        size_t want = KN_CACHE_HEADER_SIZE + KN_CACHE_MAX_KEY_BLOCK + KN_CACHE_MAX_SECTIONS * KN_CACHE_ENTRY_SIZE;
        if (want > size) want = size;
        buf = malloc(want ? want : 1);
        if (!buf) st = KN_OOM();
        else if (read_at(fd, buf, want, 0) != KILN_OK)
            st = kn_error(KILN_ERR_IO, "compiled file '%s' cannot be read: %s", path, strerror(errno));
        if (st == KILN_OK) {
            f->data = buf;
            f->size = want;
            st = kn_cfile_parse(f, size, true);
        }
    }
    close(fd);
    if (f) {
        f->data = NULL; /* the buffer holds only the header part: keep nothing pointing into it */
        for (int i = 0; i < f->n_sections; i++) f->sections[i].data = NULL;
    }
    free(buf);
    if (st != KILN_OK) {
        kn_cfile_close(f);
        return st;
    }
    *out = f;
    return KILN_OK;
}

kiln_status kn_cfile_model(kn_cfile *f, kn_model **out) {
    *out = NULL;
    if (!f->mapping) return KN_INTERNAL("kn_cfile_model on a compiled file without its own mapping");
    const kn_section *gs = kn_cfile_section(f, KN_SECT_GRAPH, NULL);
    const kn_section *ws = kn_cfile_section(f, KN_SECT_WEIGHTS, NULL);
    if (!gs || !ws) return KN_INTERNAL("validated compiled file without graph or weights");
    uint8_t *weights = (uint8_t *)f->mapping + ws->offset;
    kn_model *m;
    KN_TRY(kn_graph_decode(gs->data, (size_t)gs->size, weights, (size_t)ws->size, f->path, &m));
    kiln_status st = kn_graph_resolve(m->graph);
    if (st != KILN_OK) st = kn_error_prefix(KILN_ERR_CACHE, "%s: section 'graph': ", f->path);
    if (st != KILN_OK) {
        kn_model_free(m);
        return st;
    }
    m->mapping = f->mapping;
    m->mapping_size = f->mapping_size;
    f->mapping = NULL;
    *out = m;
    return KILN_OK;
}

kiln_status kn_cfile_apply_backends(const kn_cfile *f, kiln_session *s) {
    /* a section of a backend this build lacks is ignored: the session runs without it (and the
     * key's options and device fields already say the file was made for such a setup) */
    for (const kn_cache_backend *b = kn_cache_backends; b->section; b++) {
        const kn_section *sec = kn_cfile_section(f, KN_SECT_BACKEND, b->section);
        if (sec) KN_TRY(b->load(s, sec->data, (size_t)sec->size, f->path));
    }
    return KILN_OK;
}

bool kn_cache_file_is_compiled(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    uint8_t magic[KN_CACHE_MAGIC_LEN];
    bool yes = read_at(fd, magic, sizeof magic, 0) == KILN_OK && kn_cache_is_compiled(magic, sizeof magic);
    close(fd);
    return yes;
}

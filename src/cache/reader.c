/* Reads compiled files: reads them into owned memory, validates the container (format.c), then
 * builds the model from the graph section with the weights left in that memory, and applies the
 * backend sections. */
#include "cache/backend.h"
#include "cache/format_internal.h"
#include "cache/graph_codec.h"
#include "cache/store.h"
#include "exec/exec.h"
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
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

/* Opens path for reading, checked before any byte is read (util/file.h: non-blocking, regular
 * files only). A cache entry (entry) is also never reached through a symbolic link and must be the
 * user's own: owned by the effective uid and writable by nobody else. */
static kiln_status open_checked(const char *path, bool entry, int *fd_out, size_t *size_out) {
    int fd;
    struct stat sb;
    kiln_status st = kn_file_open_regular(path, entry, entry ? "cache entry" : "compiled file", &fd, &sb);
    if (st != KILN_OK) {
        int e = errno;
        if (e == ENOENT) return kn_error(KILN_ERR_IO, "compiled file '%s' does not exist", path);
        if (e && !(entry && e == ELOOP))
            return kn_error(KILN_ERR_IO, "compiled file '%s' cannot be read: %s", path, strerror(e));
        return st;
    }
    char why[768];
    if (entry && !kn_cache_owned(&sb, "cache entry", path, why, sizeof why)) {
        close(fd);
        return kn_error(KILN_ERR_CACHE, "%s: not loaded (another user may have planted or changed it)", why);
    }
    if (sb.st_size == 0) {
        close(fd);
        return kn_error(KILN_ERR_CACHE, "%s: header: the file is empty (0 bytes)", path);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX / 2) {
        close(fd);
        return kn_error(KILN_ERR_CACHE, "%s: %llu bytes is more than this machine can address", path,
                        (unsigned long long)sb.st_size);
    }
    *fd_out = fd;
    *size_out = (size_t)sb.st_size;
    return KILN_OK;
}

/* The header, key block and section table (everything the header declares before the sections),
 * read and validated into f with f->data pointing to nothing afterwards. */
static kiln_status read_header(kn_cfile *f, int fd, size_t size) {
    /* the header says how much more to read; cap it at what the format allows */
    size_t want = KN_CACHE_HEADER_SIZE + KN_CACHE_MAX_KEY_BLOCK + KN_CACHE_MAX_SECTIONS * KN_CACHE_ENTRY_SIZE;
    if (want > size) want = size;
    uint8_t *buf = malloc(want ? want : 1);
    if (!buf) return KN_OOM();
    kiln_status st = KILN_OK;
    if (!kn_file_pread_all(fd, buf, want, 0))
        st = kn_error(KILN_ERR_IO, "compiled file '%s' cannot be read: %s", f->path,
                      errno == ENODATA ? "it became shorter while being read" : strerror(errno));
    if (st == KILN_OK) {
        f->data = buf;
        f->size = want;
        st = kn_cfile_parse(f, size, true);
    }
    f->data = NULL; /* the buffer holds only the header part: keep nothing pointing into it */
    f->size = 0;
    for (int i = 0; i < f->n_sections; i++) f->sections[i].data = NULL;
    free(buf);
    return st;
}

/* Reads and validates a whole compiled file. The bytes are read into memory kiln owns (an
 * anonymous mapping the model can keep) and checked there, so the bytes a session uses are the
 * bytes that were verified: a later change of the file, in place or by truncation, cannot alter a
 * result or raise SIGBUS, as it could with the file mapped (a MAP_PRIVATE mapping still shows the
 * file's changes on every page the process has not written). The header, key block and section
 * table are read and validated first, so a file whose header does not declare its size (a sparse
 * or foreign file of any size) is refused after reading at most 67 KB of it. */
static kiln_status open_file(const char *path, bool entry, kn_cfile **out) {
    *out = NULL;
    int fd;
    size_t size;
    KN_TRY(open_checked(path, entry, &fd, &size));
    kn_cfile *f;
    kiln_status st = new_cfile(path, &f);
    if (st != KILN_OK) {
        close(fd);
        return st;
    }
    st = read_header(f, fd, size);
    if (st == KILN_OK) {
        kn_cache_key_free(&f->fields); /* parsed again below, over the owned bytes */
        f->n_sections = 0;
        size_t cap;
        void *map = kn_file_alloc_owned(size, &cap);
        if (!map) {
            st = kn_error(KILN_ERR_OUT_OF_MEMORY, "compiled file '%s': cannot allocate %zu bytes to read it into", path, size);
        } else {
            f->mapping = map;
            f->mapping_size = cap;
            if (!kn_file_pread_all(fd, map, size, 0))
                st = kn_error(KILN_ERR_CACHE, "compiled file '%s' cannot be read: %s", path,
                              errno == ENODATA ? "it became shorter while being read (truncated)" : strerror(errno));
        }
    }
    close(fd);
    if (st == KILN_OK) {
        f->data = f->mapping;
        f->size = size;
        st = kn_cfile_parse(f, size, false);
    }
    if (st != KILN_OK) {
        kn_cfile_close(f);
        return st;
    }
    *out = f;
    return KILN_OK;
}

kiln_status kn_cfile_open(const char *path, kn_cfile **out) { return open_file(path, false, out); }

kiln_status kn_cfile_open_entry(const char *path, kn_cfile **out) { return open_file(path, true, out); }

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

static kiln_status open_header(const char *path, bool entry, kn_cfile **out) {
    *out = NULL;
    int fd;
    size_t size;
    KN_TRY(open_checked(path, entry, &fd, &size));
    kn_cfile *f;
    kiln_status st = new_cfile(path, &f);
    if (st == KILN_OK) st = read_header(f, fd, size);
    close(fd);
    if (st != KILN_OK) {
        kn_cfile_close(f);
        return st;
    }
    *out = f;
    return KILN_OK;
}

kiln_status kn_cfile_open_header(const char *path, kn_cfile **out) { return open_header(path, false, out); }

kiln_status kn_cfile_open_entry_header(const char *path, kn_cfile **out) { return open_header(path, true, out); }

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
    int fd;
    if (kn_file_open_regular(path, false, "model", &fd, NULL) != KILN_OK) {
        kn_clear_error(); /* the loader says what is wrong with it */
        return false;
    }
    uint8_t magic[KN_CACHE_MAGIC_LEN];
    bool yes = kn_file_pread_all(fd, magic, sizeof magic, 0) && kn_cache_is_compiled(magic, sizeof magic);
    close(fd);
    return yes;
}

/* Warm start from the compiled cache: reading an entry into owned memory and verifying it there
 * (what kiln does since issue 24) against mapping it MAP_PRIVATE|MAP_POPULATE and verifying the
 * mapping (what it did: fast, but the file's later changes showed through the mapping, and a
 * truncation raised SIGBUS). For each model: the open+verify time of both (median of N, page
 * cache warm), the whole warm start (kiln_session_create on a hit, which reads as kiln does now),
 * and what each way costs in memory (RssAnon, RssFile of a process holding the opened file).
 * Build by hand after building the library:
 *   cc -O2 -Iinclude -Isrc bench/cache_read_bench.c build-sec/libkiln.a -lpthread -lm -ldl -lpng -ljpeg -lz \
 *      -o /tmp/cache_read_bench && /tmp/cache_read_bench MODEL.onnx...   */
#include "cache/format_internal.h"
#include "cache/store.h"
#include "kiln.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* the mapping kiln used before: MAP_PRIVATE|MAP_POPULATE read-only, then writable, then verified */
static kn_cfile *open_mapped(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) return NULL;
    size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED || mprotect(map, size, PROT_READ | PROT_WRITE) != 0) return NULL;
    kn_cfile *f = calloc(1, sizeof *f);
    f->path = strdup(path);
    f->mapping = map;
    f->mapping_size = size;
    f->data = map;
    f->size = size;
    if (kn_cfile_parse(f, size, false) != KILN_OK) {
        kn_cfile_close(f);
        return NULL;
    }
    return f;
}

static kn_cfile *open_read(const char *path) {
    kn_cfile *f = NULL;
    return kn_cfile_open(path, &f) == KILN_OK ? f : NULL;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_open(kn_cfile *(*op)(const char *), const char *path, int n) {
    double t[64];
    for (int i = 0; i < n; i++) {
        double t0 = now_ms();
        kn_cfile *f = op(path);
        t[i] = now_ms() - t0;
        if (!f) return -1;
        kn_cfile_close(f);
    }
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    return t[n / 2];
}

static long status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n)) v = atol(line + n + 1);
    if (f) fclose(f);
    return v;
}

/* In a child: the growth of RssAnon and RssFile while the opened file is held. */
static void memory_of(kn_cfile *(*op)(const char *), const char *path, long *anon_kb, long *file_kb) {
    int p[2];
    if (pipe(p)) return;
    pid_t pid = fork();
    if (pid == 0) {
        long a0 = status_kb("RssAnon:"), f0 = status_kb("RssFile:");
        kn_cfile *f = op(path);
        long d[2] = {status_kb("RssAnon:") - a0, status_kb("RssFile:") - f0};
        if (write(p[1], d, sizeof d) != sizeof d) _exit(1);
        kn_cfile_close(f);
        _exit(0);
    }
    long d[2] = {0, 0};
    if (read(p[0], d, sizeof d) != sizeof d) d[0] = d[1] = -1;
    waitpid(pid, NULL, 0);
    close(p[0]);
    close(p[1]);
    *anon_kb = d[0];
    *file_kb = d[1];
}

int main(int argc, char **argv) {
    char dir[] = "/tmp/kiln-cache-read-bench-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    printf("| model | entry MB | map+verify ms | read+verify ms | warm start ms (read) | map: RssAnon / RssFile MB | read: RssAnon / RssFile MB |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|\n");
    for (int a = 1; a < argc; a++) {
        kiln_session_options *o = NULL;
        kiln_session_options_create(&o);
        kiln_session_options_set_cache(o, 1, dir);
        kiln_session *s = NULL;
        if (kiln_session_create(argv[a], o, &s) != KILN_OK) {
            fprintf(stderr, "%s: %s\n", argv[a], kiln_last_error());
            continue;
        }
        kiln_session_destroy(s);
        kn_cache_key k;
        kn_cache_key_for_file(argv[a], o, &k);
        char *entry = kn_cache_entry_path(dir, &k);
        kn_cache_key_free(&k);
        struct stat sb;
        stat(entry, &sb);
        double tm = median_open(open_mapped, entry, 21), tr = median_open(open_read, entry, 21);
        double ws[11];
        for (int i = 0; i < 11; i++) {
            double t0 = now_ms();
            kiln_session_create(argv[a], o, &s);
            ws[i] = now_ms() - t0;
            kiln_session_destroy(s);
        }
        qsort(ws, 11, sizeof *ws, cmp_d);
        long ma, mf, ra, rf;
        memory_of(open_mapped, entry, &ma, &mf);
        memory_of(open_read, entry, &ra, &rf);
        const char *name = argv[a];
        const char *slash = strrchr(name, '/');
        char label[256];
        snprintf(label, sizeof label, "%.*s", slash ? (int)(slash - name) : (int)strlen(name), name);
        const char *base = strrchr(label, '/');
        printf("| %s | %.1f | %.2f | %.2f | %.1f | %.1f / %.1f | %.1f / %.1f |\n", base ? base + 1 : label,
               sb.st_size / 1048576.0, tm, tr, ws[5], ma / 1024.0, mf / 1024.0, ra / 1024.0, rf / 1024.0);
        fflush(stdout);
        free(entry);
        kiln_session_options_destroy(o);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

#include "cache/store.h"

#include "cache/format.h"
#include "util/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static char *join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", a, b);
    return p;
}

char *kn_cache_dir(const kiln_session_options *o) {
    if (o && o->cache_dir && *o->cache_dir) return strdup(o->cache_dir);
    const char *e = getenv("KILN_CACHE_DIR");
    if (e && *e) return strdup(e);
    e = getenv("XDG_CACHE_HOME");
    if (e && *e) return join(e, "kiln");
    e = getenv("HOME");
    if (e && *e) return join(e, ".cache/kiln");
    return NULL;
}

uint64_t kn_cache_parse_size(const char *s) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return 0;
    uint64_t mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1ull << 10;
    else if (*end == 'm' || *end == 'M') mul = 1ull << 20;
    else if (*end == 'g' || *end == 'G') mul = 1ull << 30;
    else if (*end == 't' || *end == 'T') mul = 1ull << 40;
    else if (*end) return 0;
    if (mul > 1 && end[1] && strcmp(end + 1, "B") && strcmp(end + 1, "iB") && strcmp(end + 1, "b")) return 0;
    if (v > UINT64_MAX / mul) return 0;
    return (uint64_t)v * mul;
}

uint64_t kn_cache_limit(const kiln_session_options *o) {
    if (o && o->cache_max_bytes > 0) return o->cache_max_bytes;
    const char *e = getenv("KILN_CACHE_MAX_SIZE");
    uint64_t v = kn_cache_parse_size(e);
    if (e && *e && !v) kn_log(KILN_LOG_WARNING, "KILN_CACHE_MAX_SIZE='%s' is not a size (e.g. 2G, 500M): using 2G", e);
    return v ? v : KN_CACHE_DEFAULT_LIMIT;
}

bool kn_cache_owned(const struct stat *sb, const char *what, const char *path, char *why, size_t cap) {
    uid_t me = geteuid();
    if (sb->st_uid != me) {
        snprintf(why, cap, "%s '%s' is owned by uid %u, not by this user (uid %u)", what, path, (unsigned)sb->st_uid,
                 (unsigned)me);
        return false;
    }
    if (sb->st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, cap, "%s '%s' is writable by %s (mode %04o; `chmod go-w` it)", what, path,
                 (sb->st_mode & S_IWOTH) ? "every user" : "its group", (unsigned)(sb->st_mode & 07777));
        return false;
    }
    return true;
}

kiln_status kn_cache_dir_check(const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) != 0) return kn_error(KILN_ERR_IO, "cache directory '%s' cannot be used: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return kn_error(KILN_ERR_IO, "cache directory '%s' exists and is not a directory", dir);
    char why[768];
    if (!kn_cache_owned(&sb, "cache directory", dir, why, sizeof why))
        return kn_error(KILN_ERR_CACHE, "%s: kiln uses only a cache directory that is the user's own (another user could "
                        "plant compiled files or links in it)", why);
    return KILN_OK;
}

kiln_status kn_cache_dir_ensure(const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) == 0) return kn_cache_dir_check(dir);
    char *p = strdup(dir);
    if (!p) return KN_OOM();
    /* each parent in turn, like mkdir -p; private to the user like ~/.cache should be */
    for (char *s = p + 1; ; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0700) != 0 && errno != EEXIST) {
            kiln_status st = kn_error(KILN_ERR_IO, "cache directory '%s' cannot be created: '%s': %s", dir, p, strerror(errno));
            free(p);
            return st;
        }
        *s = c;
        if (!c) break;
    }
    free(p);
    return kn_cache_dir_check(dir);
}

/* Opens (creating, mode 0600) one of the directory's bookkeeping files for reading and writing:
 * never through a symbolic link, and only a regular file of this user's with no other name. */
static int open_private(const char *path, bool create, const char *what) {
    int fd = open(path, (create ? O_RDWR | O_CREAT : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0600);
    if (fd < 0) {
        if (errno == ELOOP) kn_log(KILN_LOG_WARNING, "cache: %s '%s' is a symbolic link: not used", what, path);
        return -1;
    }
    struct stat sb;
    char why[768];
    bool ok = fstat(fd, &sb) == 0;
    if (ok && !S_ISREG(sb.st_mode)) {
        kn_log(KILN_LOG_WARNING, "cache: %s '%s' is not a regular file: not used", what, path);
        ok = false;
    } else if (ok && !kn_cache_owned(&sb, what, path, why, sizeof why)) {
        kn_log(KILN_LOG_WARNING, "cache: %s: not used", why);
        ok = false;
    } else if (ok && sb.st_nlink != 1) {
        kn_log(KILN_LOG_WARNING, "cache: %s '%s' has %u names (hard links): not used", what, path, (unsigned)sb.st_nlink);
        ok = false;
    }
    if (!ok) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

char *kn_cache_entry_path(const char *dir, const kn_cache_key *k) {
    char name[96];
    snprintf(name, sizeof name, "%s.kiln", k->name);
    return join(dir, name);
}

/* "<dir>/<id hex>.lock": one lock per compile job (model and options), whatever the environment.
 * Its content is the environment digest of the entry last stored for the job, which explains a
 * miss without listing the directory (see kn_cache_explain_miss). */
static char *lock_path(const char *dir, const kn_cache_key *k) {
    char hex[33], name[48];
    kn_hash_hex(k->id, hex);
    snprintf(name, sizeof name, "%s.lock", hex);
    return join(dir, name);
}

kiln_status kn_cache_lock(const char *dir, const kn_cache_key *k, int *fd_out, bool *waited_out) {
    *fd_out = -1;
    if (waited_out) *waited_out = false;
    char *lp = lock_path(dir, k);
    if (!lp) return KN_OOM();
    int fd = open_private(lp, true, "lock file");
    if (fd < 0) {
        kiln_status st = kn_error(KILN_ERR_IO, "cannot create lock file '%s': %s", lp,
                                  errno == EPERM ? "a file of that name is there and is not kiln's own" : strerror(errno));
        free(lp);
        return st;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            kiln_status st = kn_error(KILN_ERR_IO, "cannot lock '%s': %s", lp, strerror(errno));
            close(fd);
            free(lp);
            return st;
        }
        kn_log(KILN_LOG_INFO, "cache: another process is compiling this model (lock '%s'): waiting for it", lp);
        if (waited_out) *waited_out = true;
        int rc;
        while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
        }
        if (rc != 0) {
            kiln_status st = kn_error(KILN_ERR_IO, "cannot lock '%s': %s", lp, strerror(errno));
            close(fd);
            free(lp);
            return st;
        }
    }
    free(lp);
    *fd_out = fd;
    return KILN_OK;
}

void kn_cache_lock_note(int fd, const kn_cache_key *k) {
    if (fd < 0) return;
    char buf[24];
    int n = snprintf(buf, sizeof buf, "%016llx\n", (unsigned long long)k->env);
    if (ftruncate(fd, 0) == 0 && pwrite(fd, buf, (size_t)n, 0) != n) {
        /* only the explanation of a later miss is lost */
    }
}

void kn_cache_unlock(int fd) {
    if (fd < 0) return;
    flock(fd, LOCK_UN);
    close(fd);
}

void kn_cache_touch(const char *entry_path) {
    struct timespec ts[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
    utimensat(AT_FDCWD, entry_path, ts, AT_SYMLINK_NOFOLLOW);
}

static int ts_cmp(struct timespec a, struct timespec b) {
    if (a.tv_sec != b.tv_sec) return a.tv_sec < b.tv_sec ? -1 : 1;
    return a.tv_nsec < b.tv_nsec ? -1 : a.tv_nsec > b.tv_nsec;
}

static int lru_cmp(const void *x, const void *y) {
    const kn_cache_entry *a = x, *b = y;
    int c = ts_cmp(a->atime, b->atime);
    return c ? c : strcmp(a->name, b->name);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

kiln_status kn_cache_list(const char *dir, kn_cache_entry **out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) return kn_error(KILN_ERR_IO, "cache directory '%s' cannot be read: %s", dir, strerror(errno));
    kn_cache_entry *e = NULL;
    int n = 0, cap = 0;
    kiln_status st = KILN_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!ends_with(de->d_name, ".kiln") || de->d_name[0] == '.') continue;
        char *path = join(dir, de->d_name);
        struct stat sb;
        if (!path || lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            free(path);
            continue;
        }
        if (n == cap) {
            int nc = cap ? cap * 2 : 32;
            kn_cache_entry *p = realloc(e, sizeof *p * (size_t)nc);
            if (!p) {
                free(path);
                st = KN_OOM();
                break;
            }
            e = p;
            cap = nc;
        }
        e[n].path = path;
        e[n].name = strdup(de->d_name);
        e[n].size = (uint64_t)sb.st_size;
        e[n].atime = sb.st_atim;
        e[n].mtime = sb.st_mtim;
        if (!e[n].name) {
            free(path);
            st = KN_OOM();
            break;
        }
        n++;
    }
    closedir(d);
    if (st != KILN_OK) {
        kn_cache_list_free(e, n);
        return st;
    }
    if (n) qsort(e, (size_t)n, sizeof *e, lru_cmp);
    *out = e;
    *n_out = n;
    return KILN_OK;
}

void kn_cache_list_free(kn_cache_entry *e, int n) {
    for (int i = 0; i < n; i++) {
        free(e[i].path);
        free(e[i].name);
    }
    free(e);
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Temporary files of writers that died, and locks of jobs with no entry left, once they are an
 * hour old (a live writer's temporary file is younger; a lock is recreated by the next writer). */
static void remove_leftovers(const char *dir) {
    kn_cache_entry *e;
    int n;
    if (kn_cache_list(dir, &e, &n) != KILN_OK) return;
    char **ids = malloc(sizeof(char *) * (size_t)(n ? n : 1));
    if (!ids) {
        kn_cache_list_free(e, n);
        return;
    }
    for (int i = 0; i < n; i++) ids[i] = e[i].name; /* "<id>-<env>.kiln": compared on 32 characters */
    if (n) qsort(ids, (size_t)n, sizeof *ids, cmp_cstr);
    DIR *d = opendir(dir);
    time_t now = time(NULL);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        bool tmp = strstr(de->d_name, ".kiln.tmp.") != NULL;
        bool lock = strlen(de->d_name) == 37 && ends_with(de->d_name, ".lock");
        if (!tmp && !lock) continue;
        char *path = join(dir, de->d_name);
        struct stat sb;
        if (path && lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && now - sb.st_mtime > 3600) {
            bool remove = tmp;
            if (lock) {
                remove = true;
                for (int lo = 0, hi = n - 1; lo <= hi && remove;) {
                    int mid = (lo + hi) / 2, c = strncmp(de->d_name, ids[mid], 32);
                    if (c == 0) remove = false;
                    else if (c < 0) hi = mid - 1;
                    else lo = mid + 1;
                }
            }
            if (remove) unlink(path);
        }
        free(path);
    }
    if (d) closedir(d);
    free(ids);
    kn_cache_list_free(e, n);
}

/* Deletes LRU entries until the total is at most limit; *remaining gets the total left. */
static kiln_status prune_now(const char *dir, uint64_t limit, const char *keep, int *n_deleted, uint64_t *bytes_freed,
                             uint64_t *remaining) {
    remove_leftovers(dir);
    kn_cache_entry *e;
    int n;
    KN_TRY(kn_cache_list(dir, &e, &n));
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += e[i].size;
    for (int i = 0; i < n && total > limit; i++) {
        if (keep && !strcmp(e[i].path, keep)) continue;
        if (unlink(e[i].path) != 0) continue;
        kn_log(KILN_LOG_INFO, "cache: pruned '%s' (%llu bytes, least recently used) to stay under %llu bytes",
               e[i].path, (unsigned long long)e[i].size, (unsigned long long)limit);
        total -= e[i].size;
        if (n_deleted) (*n_deleted)++;
        if (bytes_freed) *bytes_freed += e[i].size;
    }
    kn_cache_list_free(e, n);
    *remaining = total;
    return KILN_OK;
}

/* The size account: "<total bytes> <time of the last full scan>" in <dir>/.kiln-size, under an
 * flock. A store adds its size to the total instead of listing the directory (which made storing
 * N entries cost N^2 stats); the directory is listed again when the total passes the limit, when
 * the account is missing or unreadable, and at least once an hour, so entries removed or added
 * behind its back only delay pruning a little. */
typedef struct account {
    int fd;
    uint64_t total;
    time_t scanned;
    bool valid;
} account;

static void account_open(const char *dir, account *a) {
    memset(a, 0, sizeof *a);
    char *path = join(dir, ".kiln-size");
    a->fd = path ? open_private(path, true, "size account") : -1;
    free(path);
    if (a->fd < 0) return;
    while (flock(a->fd, LOCK_EX) != 0 && errno == EINTR) {
    }
    char buf[64];
    ssize_t n = pread(a->fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return;
    buf[n] = 0;
    unsigned long long total, scanned;
    if (sscanf(buf, "%llu %llu", &total, &scanned) == 2) {
        a->total = total;
        a->scanned = (time_t)scanned;
        a->valid = time(NULL) - a->scanned < 3600 && a->scanned <= time(NULL);
    }
}

static void account_close(account *a) {
    if (a->fd < 0) return;
    char buf[64];
    int n = snprintf(buf, sizeof buf, "%llu %llu\n", (unsigned long long)a->total, (unsigned long long)a->scanned);
    if (ftruncate(a->fd, 0) == 0 && pwrite(a->fd, buf, (size_t)n, 0) != n) {
        /* a broken account only means an early rescan */
    }
    flock(a->fd, LOCK_UN);
    close(a->fd);
}

kiln_status kn_cache_prune(const char *dir, uint64_t limit, const char *keep, int *n_deleted, uint64_t *bytes_freed) {
    if (n_deleted) *n_deleted = 0;
    if (bytes_freed) *bytes_freed = 0;
    KN_TRY(kn_cache_dir_check(dir));
    account a;
    account_open(dir, &a);
    uint64_t left = 0;
    kiln_status st = prune_now(dir, limit, keep, n_deleted, bytes_freed, &left);
    if (st == KILN_OK) {
        a.total = left;
        a.scanned = time(NULL);
    }
    account_close(&a);
    return st;
}

void kn_cache_note_store(const char *dir, uint64_t bytes, uint64_t limit, const char *keep) {
    account a;
    account_open(dir, &a);
    uint64_t total = a.total + bytes;
    if (!a.valid || a.fd < 0 || total > limit) {
        if (prune_now(dir, limit, keep, NULL, NULL, &total) == KILN_OK) a.scanned = time(NULL);
        kn_clear_error();
    }
    a.total = total;
    account_close(&a);
}

bool kn_cache_explain_miss(const char *dir, const kn_cache_key *k, char *why, size_t cap) {
    /* the job's lock file names the environment of the entry stored last for it */
    char *lp = lock_path(dir, k);
    int fd = lp ? open_private(lp, false, "lock file") : -1;
    free(lp);
    if (fd < 0) return false;
    char env[17] = {0};
    ssize_t n = pread(fd, env, 16, 0);
    close(fd);
    if (n != 16 || strspn(env, "0123456789abcdef") != 16) return false;
    char mine[17];
    snprintf(mine, sizeof mine, "%016llx", (unsigned long long)k->env);
    if (!strcmp(env, mine)) return false;
    char hex[33], name[64];
    kn_hash_hex(k->id, hex);
    snprintf(name, sizeof name, "%s-%s.kiln", hex, env);
    char *path = join(dir, name);
    kn_cfile *f = NULL;
    bool found = false;
    if (path && kn_cfile_open_entry_header(path, &f) == KILN_OK) {
        char w[512];
        if (kn_cfile_compare_key(f, k, true, w, sizeof w)) {
            snprintf(why, cap, "%s (the compiled file '%s' was made for another environment)", w, name);
            found = true;
        }
    }
    kn_clear_error();
    kn_cfile_close(f);
    free(path);
    return found;
}

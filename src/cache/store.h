/* The cache directory: where entries live, per-key locks, use times, the size limit and pruning.
 *
 * Entries are <dir>/<key name>.kiln (see cache/key.h for the name). Writers hold an exclusive
 * flock on <dir>/<id>.lock (one per model and options) while they compile and store, so processes
 * that start together compile once: the others wait on the lock and then load what the first one
 * stored. Readers take no
 * lock: entries appear by atomic rename, so a reader sees a whole file or none. A hit sets the
 * entry's access time (relatime mounts do not), and pruning deletes the least recently used
 * entries until the directory is under its size limit.
 *
 * Trust: the directory is used only when it is the user's own (kn_cache_dir_check); entries are
 * written 0600, the lock and size files are opened with O_NOFOLLOW and used only when they are
 * regular files of the user's with one name, and an entry is loaded only when it is a regular
 * file (not a link) owned by the user and writable by nobody else (cache/reader.c). */
#ifndef KN_CACHE_STORE_H
#define KN_CACHE_STORE_H

#include "cache/key.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#define KN_CACHE_DEFAULT_LIMIT ((uint64_t)2 << 30)

/* o->cache_dir, else $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln
 * (malloc'ed; NULL when none can be determined). */
char *kn_cache_dir(const kiln_session_options *o);
/* The size limit: o->cache_max_bytes, else $KILN_CACHE_MAX_SIZE (bytes, or with a K/M/G suffix),
 * else 2 GiB. */
uint64_t kn_cache_limit(const kiln_session_options *o);
/* Parses "123", "64M", "2G" (binary units); 0 on a malformed value. */
uint64_t kn_cache_parse_size(const char *s);
/* Creates dir and its parents (mode 0700) when missing, then checks it as kn_cache_dir_check; the
 * error names the path and the reason. */
kiln_status kn_cache_dir_ensure(const char *dir);
/* Whether kiln may use dir as its cache: a directory owned by this user (effective uid) and
 * writable by nobody else; KILN_ERR_CACHE saying why not (owner, mode), KILN_ERR_IO when it
 * cannot be examined. Everything kiln reads from or writes to a cache directory relies on this:
 * in a directory others can write to they could plant entries or links. */
kiln_status kn_cache_dir_check(const char *dir);
/* Whether a file or directory of the cache (its fstat) is this user's alone: owned by the
 * effective uid, not writable by group or others. Else writes why ("<what> '<path>' is owned by
 * uid 1000, not by this user (uid 0)") and returns false. */
bool kn_cache_owned(const struct stat *sb, const char *what, const char *path, char *why, size_t cap);
/* "<dir>/<key name>.kiln" (malloc'ed). */
char *kn_cache_entry_path(const char *dir, const kn_cache_key *k);

/* Takes the lock of the key's compile job (<dir>/<id>.lock), waiting for another holder (logging
 * that it waits); *fd_out is the lock's descriptor for kn_cache_unlock. */
kiln_status kn_cache_lock(const char *dir, const kn_cache_key *k, int *fd_out, bool *waited_out);
/* Records in the held lock which environment's entry was just stored (for kn_cache_explain_miss). */
void kn_cache_lock_note(int fd, const kn_cache_key *k);
void kn_cache_unlock(int fd);
/* Records a use of the entry (its access time := now). */
void kn_cache_touch(const char *entry_path);

typedef struct kn_cache_entry {
    char *path;
    char *name; /* file name */
    uint64_t size;
    struct timespec atime, mtime;
} kn_cache_entry;

/* The entries (*.kiln) of dir, least recently used first. */
kiln_status kn_cache_list(const char *dir, kn_cache_entry **out, int *n_out);
void kn_cache_list_free(kn_cache_entry *e, int n);
/* Deletes the least recently used entries until the total is at most limit, never `keep` (may be
 * NULL); also removes leftovers older than an hour (temporary files of crashed writers, locks of
 * entries that are gone). */
kiln_status kn_cache_prune(const char *dir, uint64_t limit, const char *keep, int *n_deleted, uint64_t *bytes_freed);
/* After storing an entry of `bytes`: adds it to the directory's size account and prunes (as
 * kn_cache_prune) when the total passes the limit. Cheap: no directory listing unless needed. */
void kn_cache_note_store(const char *dir, uint64_t bytes, uint64_t limit, const char *keep);
/* Looks for the entry of the same model and options (same id) stored last, if it was made for
 * another environment, and writes why it does not fit, e.g. "kiln version 0.1.0 != 0.0.9 in
 * file". Returns whether there was one. Reads the job's lock file, not the directory. */
bool kn_cache_explain_miss(const char *dir, const kn_cache_key *k, char *why, size_t cap);

#endif

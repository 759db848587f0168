/* Using the compiled cache when a session is made: compiled files run directly, explicit
 * load/save paths, and the automatic cache directory (see cache/cache.h). */
#include "cache/cache.h"

#include "backend/backend.h"
#include "cache/backend.h"
#include "cache/format.h"
#include "cache/store.h"
#include "onnx/loader.h"
#include "onnx/writer.h"
#include "util/log.h"
#include "util/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* One warning per cache directory per process: a test runner making thousands of sessions
 * should not print thousands of lines about one unwritable directory. */
static void warn_dir_once(const char *dir, const char *msg) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static char last[1024];
    pthread_mutex_lock(&mu);
    bool seen = !strcmp(last, dir);
    if (!seen) snprintf(last, sizeof last, "%s", dir);
    pthread_mutex_unlock(&mu);
    if (!seen) kn_log(KILN_LOG_WARNING, "%s; the session is compiled without the cache", msg);
}

/* Compiles from the .onnx (or bytes): load, resolve, infer, optimise, place. The .onnx is read
 * once (kn_onnx_file_read) and those bytes are what is compiled. With digest (char[33]), the
 * content digest of the bytes compiled (and of their external data) is written there, for a
 * caller to check against a cache key made earlier: a model file that changed in between must not
 * have its compiled result stored under the earlier version's key. */
static kiln_status compile_fresh(const char *path, const void *data, size_t size, const char *base_dir,
                                 const kiln_session_options *o, kiln_session **out, char *digest) {
    kn_model *m;
    kiln_status st;
    if (path) {
        kn_model_file f;
        KN_TRY(kn_onnx_file_read(path, &f));
        if (digest) kn_hash_hex(kn_cache_content_digest(f.data, f.size, f.dir), digest);
        st = kn_onnx_load_read(path, &f, &m);
    } else {
        if (digest) kn_hash_hex(kn_cache_content_digest(data, size, base_dir), digest);
        st = kn_onnx_load_memory(data, size, base_dir, &m);
    }
    if (st != KILN_OK) return st; /* the loader's message names the path already */
    st = kn_session_from_model(m, o, out);
    if (st != KILN_OK && path) return kn_error_prefix(st, "%s: ", path);
    return st;
}

/* Test hook (cache.h): called between a key's making and the compile that follows it. */
void (*kn_cache_test_after_key)(const char *path);

/* Whether the model compiled (its digest) is the one key k was made from. */
static bool compiled_what_was_keyed(const kn_cache_key *k, const char *digest) {
    const char *want = kn_cache_key_get(k, "model");
    return want && !strcmp(want, digest);
}

/* A session from an opened, validated compiled file (the model takes over the file's mapping). */
static kiln_status session_from_cfile(kn_cfile *f, const kiln_session_options *o, kiln_session **out) {
    *out = NULL;
    kn_model *m;
    KN_TRY(kn_cfile_model(f, &m));
    kiln_session *s;
    KN_TRY(kn_session_from_compiled(m, o, &s));
    kiln_status st = kn_cfile_apply_backends(f, s);
    /* the optimised graph, as a miss would have dumped it after optimising */
    if (st == KILN_OK && o && o->dump_path && *o->dump_path) st = kn_onnx_write_file(s->model, o->dump_path);
    if (st != KILN_OK) {
        kiln_session_destroy(s);
        return st;
    }
    *out = s;
    return KILN_OK;
}

/* ---- tuning results found by runs ----
 *
 * A device backend chooses its library algorithms on the first run with each input shape (cuDNN,
 * cuBLASLt: 50-150 ms of heuristics at start-up, or measurements with tuning=exhaustive). The
 * compiled file written when the session was made cannot hold them yet, so the session keeps the
 * files it was stored to or loaded from (a cache entry, a save path) and, when it ends having made
 * new choices, writes them again with the "cuda.tuning" section: the next process finds every
 * choice made. The write is atomic like any other; a failure is a warning. */

typedef struct persist_target {
    char *path;
    bool entry; /* a cache entry (written 0600), not a file the caller named */
    kn_cache_key key;
} persist_target;

typedef struct persist {
    persist_target t[2];
    int n;
    int written; /* the session's tuning results (made here) when the files were last written */
} persist;

static void persist_at_end(kiln_session *s) {
    persist *p = s->at_end_arg;
    s->at_end = NULL;
    s->at_end_arg = NULL;
    int made = kn_cache_tuning_made(s);
    for (int i = 0; i < p->n; i++) {
        if (made > p->written) {
            double t = kn_now_ms();
            kiln_status w = p->t[i].entry ? kn_cache_write_entry(p->t[i].path, s, &p->t[i].key)
                                          : kn_cache_write(p->t[i].path, s, &p->t[i].key);
            if (w == KILN_OK) {
                kn_log(KILN_LOG_INFO, "compiled file '%s' updated with %d tuning result%s of this session's runs (%.1f ms)",
                       p->t[i].path, made - p->written, made - p->written == 1 ? "" : "s", kn_now_ms() - t);
            } else {
                kn_log(KILN_LOG_WARNING, "the tuning results of this session could not be kept: %s", kn_last_error());
                kn_clear_error();
            }
        }
        free(p->t[i].path);
        kn_cache_key_free(&p->t[i].key);
    }
    free(p);
}

/* Remembers a compiled file of the session, to be written again at its end if its runs make new
 * tuning results. Only sessions with a backend that tunes need it. */
static void persist_add(kiln_session *s, const char *path, bool entry, const kn_cache_key *k) {
    if (kn_cache_tuning_made(s) < 0) return;
    persist *p = s->at_end_arg;
    if (!p) {
        p = calloc(1, sizeof *p);
        if (!p) return; /* the results are then chosen again next time */
        p->written = kn_cache_tuning_made(s);
        s->at_end = persist_at_end;
        s->at_end_arg = p;
    }
    if (p->n == 2) return;
    persist_target *t = &p->t[p->n];
    t->path = strdup(path);
    if (!t->path) return;
    t->entry = entry;
    if (kn_cache_key_copy(k, &t->key) != KILN_OK) {
        free(t->path);
        kn_clear_error();
        return;
    }
    p->n++;
}

static void add_info(kn_cache_key *k, const char *source, double compile_ms) {
    char *real = source ? realpath(source, NULL) : NULL;
    kn_cache_key_set(k, "info.source", real ? real : source ? source : "<memory>");
    free(real);
    char buf[64];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    kn_cache_key_set(k, "info.created", buf);
    if (compile_ms >= 0) {
        snprintf(buf, sizeof buf, "%.1f", compile_ms);
        kn_cache_key_set(k, "info.compile_ms", buf);
    }
    kn_clear_error();
}

static kiln_status key_for(const char *path, const void *data, size_t size, const char *base_dir,
                           const kiln_session_options *o, kn_cache_key *k) {
    return path ? kn_cache_key_for_file(path, o, k) : kn_cache_key_for_memory(data, size, base_dir, o, k);
}

static kiln_status save_to(const char *save_path, kiln_session *s, kn_cache_key *k, const char *source,
                           double compile_ms) {
    if (!kn_cache_key_get(k, "info.source")) add_info(k, source, compile_ms);
    kiln_status st = kn_cache_write(save_path, s, k);
    if (st == KILN_OK) kn_log(KILN_LOG_INFO, "compiled model saved to '%s'", save_path);
    if (st == KILN_OK) persist_add(s, save_path, false, k);
    return st;
}

/* ---- compiled files given directly ---- */

/* The providers of a compiled file's "options" field ("opt_level=3 providers=cuda{precision=fp16},cpu
 * disabled_passes="), parsed into requests (names and options; kn_session_options_clear frees them);
 * false where the field is missing or malformed. */
static bool file_providers(const kn_cfile *f, kiln_session_options *fo) {
    memset(fo, 0, sizeof *fo);
    const char *t = kn_cache_key_get(&f->fields, "options");
    const char *p = t ? strstr(t, "providers=") : NULL;
    if (!p) return false;
    p += 10;
    while (*p && *p != ' ') {
        if (fo->n_providers >= KN_MAX_PROVIDERS) return false;
        kn_provider_request *r = &fo->providers[fo->n_providers];
        size_t n = strcspn(p, "{, ");
        if (n == 0 || !(r->name = strndup(p, n))) return false;
        fo->n_providers++;
        p += n;
        if (*p == '{') {
            p++;
            while (*p && *p != '}') {
                size_t kl = strcspn(p, "=,}"), vl;
                if (p[kl] != '=' || r->n_options >= KN_MAX_PROVIDER_OPTIONS) return false;
                vl = strcspn(p + kl + 1, ",}");
                r->keys[r->n_options] = strndup(p, kl);
                r->values[r->n_options] = strndup(p + kl + 1, vl);
                if (!r->keys[r->n_options++] || !r->values[r->n_options - 1]) return false;
                p += kl + 1 + vl;
                if (*p == ',') p++;
            }
            if (*p != '}') return false;
            p++;
        }
        if (*p == ',') p++;
    }
    return true;
}

static const char *request_value(const kn_provider_request *r, const char *key) {
    for (int k = 0; k < r->n_options; k++)
        if (!strcmp(r->keys[k], key)) return r->values[k];
    return NULL;
}

/* The providers a compiled file runs with. A caller that named none gets the file's, so `kiln run
 * model.kiln` runs it where it was compiled for. A caller that named some keeps its list, and each
 * provider the file names takes the file's options the caller left unset (the graph, its
 * precision and the kernels' choices were made with them: a file compiled with cpu precision=bf16
 * opened with a plain "cpu", as the Python package's default list does, runs as bf16, not as a
 * bf16 graph with fp32 products); an option set to another value than the file's is refused. */
static kiln_status adopt_providers(const kn_cfile *f, kiln_session_options *o) {
    kiln_session_options fo;
    if (!file_providers(f, &fo)) {
        kn_session_options_clear(&fo);
        return KILN_OK; /* a file without the field: nothing to hold the caller to */
    }
    kiln_status st = KILN_OK;
    for (int i = 0; i < fo.n_providers && st == KILN_OK; i++) {
        const kn_provider_request *fr = &fo.providers[i];
        kn_provider_request *cr = NULL;
        for (int j = 0; j < o->n_providers; j++)
            if (!strcmp(o->providers[j].name, fr->name)) cr = &o->providers[j];
        if (!cr) continue;
        for (int k = 0; k < fr->n_options && st == KILN_OK; k++) {
            const char *mine = request_value(cr, fr->keys[k]);
            if (mine && strcmp(mine, fr->values[k]))
                st = kn_error(KILN_ERR_CACHE,
                              "compiled file '%s' was compiled with %s %s=%s, and the session asks for %s=%s: "
                              "leave the option out to run it as compiled, or compile it again from the model with it",
                              f->path, fr->name, fr->keys[k], fr->values[k], fr->keys[k], mine);
            else if (!mine && cr->n_options < KN_MAX_PROVIDER_OPTIONS) {
                cr->keys[cr->n_options] = strdup(fr->keys[k]);
                cr->values[cr->n_options] = strdup(fr->values[k]);
                if (!cr->keys[cr->n_options++] || !cr->values[cr->n_options - 1]) st = KN_OOM();
            }
        }
    }
    if (st == KILN_OK && !o->n_providers)
        for (int i = 0; i < fo.n_providers && st == KILN_OK; i++)
            st = kiln_session_options_append_provider(o, fo.providers[i].name, (const char *const *)fo.providers[i].keys,
                                                      (const char *const *)fo.providers[i].values,
                                                      (size_t)fo.providers[i].n_options);
    kn_session_options_clear(&fo);
    return st;
}

static kiln_status run_compiled(kn_cfile *f, const kiln_session_options *options, kiln_session **out) {
    kiln_session_options o;
    KN_TRY(kn_session_options_copy(options, &o));
    kn_cache_key env = {0};
    kiln_status st = adopt_providers(f, &o);
    if (st == KILN_OK) st = kn_cache_key_env(&o, &env);
    kn_cache_key_unset(&env, "build"); /* see cache/key.h: explicit files are not held to it */
    char why[768];
    if (st == KILN_OK && kn_cfile_compare_key(f, &env, true, why, sizeof why))
        st = kn_error(KILN_ERR_CACHE, "compiled file '%s' was made for another environment: %s (compile it again from "
                      "the model with `kiln compile`)", f->path, why);
    if (st == KILN_OK) st = session_from_cfile(f, &o, out);
    if (st == KILN_OK) {
        const char *src = kn_cache_key_get(&f->fields, "info.source");
        kn_log(KILN_LOG_INFO, "loaded compiled file '%s' (compiled from %s with %s)", f->path, src ? src : "?",
               kn_cache_key_get(&f->fields, "options") ? kn_cache_key_get(&f->fields, "options") : "?");
        if (o.save_path) {
            st = save_to(o.save_path, *out, &f->fields, NULL, -1);
            if (st != KILN_OK) {
                kiln_session_destroy(*out);
                *out = NULL;
            }
        }
    }
    kn_cache_key_free(&env);
    kn_session_options_clear(&o);
    return st;
}

/* ---- the automatic cache ---- */

typedef enum { ENTRY_HIT, ENTRY_ABSENT, ENTRY_BAD } entry_result;

static entry_result try_entry(const char *entry, const kn_cache_key *k, const kiln_session_options *o,
                              kiln_session **out, char *why, size_t cap) {
    *out = NULL;
    struct stat sb;
    if (lstat(entry, &sb) != 0 && errno == ENOENT) return ENTRY_ABSENT;
    kn_cfile *f;
    kiln_status st = kn_cfile_open_entry(entry, &f);
    if (st != KILN_OK) {
        snprintf(why, cap, "%s", kn_last_error());
        kn_clear_error();
        return ENTRY_BAD;
    }
    char w[768];
    if (kn_cfile_compare_key(f, k, false, w, sizeof w)) {
        snprintf(why, cap, "%s: %s", entry, w);
        kn_cfile_close(f);
        return ENTRY_BAD;
    }
    st = session_from_cfile(f, o, out);
    if (st != KILN_OK) {
        snprintf(why, cap, "%s", kn_last_error());
        kn_clear_error();
        kn_cfile_close(f);
        return ENTRY_BAD;
    }
    persist_add(*out, entry, true, &f->fields);
    kn_cfile_close(f);
    kn_cache_touch(entry);
    return ENTRY_HIT;
}

/* A session through the cache directory. *used (when the session was made) gets the key it was
 * stored or found under, so a save that follows writes what was keyed. */
static kiln_status cached_create(const char *path, const kiln_session_options *o, kiln_session **out,
                                 kn_cache_key *used) {
    double t0 = kn_now_ms();
    char *dir = kn_cache_dir(o);
    if (!dir) {
        warn_dir_once("", "no cache directory: set KILN_CACHE_DIR, XDG_CACHE_HOME or HOME");
        return compile_fresh(path, NULL, 0, NULL, o, out, NULL);
    }
    kn_cache_key k;
    if (kn_cache_key_for_file(path, o, &k) != KILN_OK) {
        /* the model cannot be read: compiling says why, in the loader's words */
        kn_clear_error();
        free(dir);
        return compile_fresh(path, NULL, 0, NULL, o, out, NULL);
    }
    double t_key = kn_now_ms() - t0;
    /* the directory first: created 0700 when missing, and used only when it is the user's own */
    kiln_status dst = kn_cache_dir_ensure(dir);
    if (dst != KILN_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", kn_last_error());
        kn_clear_error();
        kn_cache_key_free(&k);
        if (dst == KILN_ERR_CACHE && o->cache_strict) {
            kiln_status st = kn_error(KILN_ERR_CACHE, "cache directory not used (strict mode): %s", msg);
            free(dir);
            return st;
        }
        warn_dir_once(dir, msg);
        free(dir);
        return compile_fresh(path, NULL, 0, NULL, o, out, NULL);
    }
    char *entry = kn_cache_entry_path(dir, &k);
    char why[1536] = "";
    int lock_fd = -1;
    bool waited = false;
    kiln_status st = KILN_OK;
    if (!entry) {
        st = KN_OOM();
        goto done;
    }
    entry_result r = try_entry(entry, &k, o, out, why, sizeof why);
    if (r == ENTRY_HIT) {
        kn_log(KILN_LOG_INFO, "cache hit: '%s' -> '%s' (key %.1f ms, total %.1f ms)", path, entry, t_key, kn_now_ms() - t0);
        goto done;
    }
    if (r == ENTRY_BAD && o->cache_strict) {
        st = kn_error(KILN_ERR_CACHE, "cache entry for '%s' is unusable (strict mode): %s", path, why);
        goto done;
    }
    bool store = true;
    if (kn_cache_lock(dir, &k, &lock_fd, &waited) != KILN_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", kn_last_error());
        warn_dir_once(dir, msg);
        kn_clear_error();
        store = false;
    } else {
        /* another process may have stored it while this one waited for the lock */
        char why2[1536] = "";
        r = try_entry(entry, &k, o, out, why2, sizeof why2);
        if (r == ENTRY_HIT) {
            kn_log(KILN_LOG_INFO, "cache hit: '%s' -> '%s' (%s; total %.1f ms)", path, entry,
                   waited ? "compiled by another process while this one waited" : "stored by another process",
                   kn_now_ms() - t0);
            goto done;
        }
        if (r == ENTRY_BAD) {
            if (o->cache_strict) {
                st = kn_error(KILN_ERR_CACHE, "cache entry for '%s' is unusable (strict mode): %s", path, why2);
                goto done;
            }
            snprintf(why, sizeof why, "%s", why2);
        }
    }
    if (!why[0]) kn_cache_explain_miss(dir, &k, why, sizeof why);
    if (why[0]) kn_log(KILN_LOG_INFO, "cache rebuilt: '%s': %s; compiling", path, why);
    else kn_log(KILN_LOG_INFO, "cache miss: '%s': no compiled file '%s'; compiling", path, entry);
    if (kn_cache_test_after_key) kn_cache_test_after_key(path);
    double tc = kn_now_ms();
    char digest[33];
    st = compile_fresh(path, NULL, 0, NULL, o, out, digest);
    double compile_ms = kn_now_ms() - tc;
    if (st != KILN_OK || !store) goto done;
    if (!compiled_what_was_keyed(&k, digest)) {
        /* the file (or its external data) changed after it was hashed: the session runs what was
         * compiled, but that must not be found later under the key of what was hashed */
        kn_log(KILN_LOG_WARNING,
               "'%s' changed while the session was being made (the bytes compiled are not the bytes hashed for "
               "the cache key): the compiled model is not stored in the cache", path);
        goto done;
    }
    add_info(&k, path, compile_ms);
    double tw = kn_now_ms();
    if (kn_cache_write_entry(entry, *out, &k) != KILN_OK) {
        kn_log(KILN_LOG_WARNING, "the compiled model could not be stored in the cache: %s", kn_last_error());
        kn_clear_error();
        goto done;
    }
    kn_log(KILN_LOG_INFO, "cache stored: '%s' (compiled in %.1f ms, written in %.1f ms)", entry, compile_ms,
           kn_now_ms() - tw);
    persist_add(*out, entry, true, &k);
    kn_cache_lock_note(lock_fd, &k);
    kn_cache_unlock(lock_fd);
    lock_fd = -1;
    struct stat sb;
    kn_cache_note_store(dir, stat(entry, &sb) == 0 ? (uint64_t)sb.st_size : 0, kn_cache_limit(o), entry);
done:
    kn_cache_unlock(lock_fd);
    if (st == KILN_OK && used && kn_cache_key_copy(&k, used) != KILN_OK) kn_clear_error(); /* a save rekeys */
    kn_cache_key_free(&k);
    free(entry);
    free(dir);
    return st;
}

/* ---- the entry point ---- */

/* KILN_CACHE=0 (or off, no, false) turns the automatic cache off for a whole process, e.g. for a
 * test run over thousands of small models where storing would cost more than compiling. */
static bool cache_off_by_env(void) {
    const char *e = getenv("KILN_CACHE");
    return e && (!strcmp(e, "0") || !strcasecmp(e, "off") || !strcasecmp(e, "no") || !strcasecmp(e, "false"));
}

kiln_status kn_cache_session_create(const char *path, const void *data, size_t size, const char *base_dir,
                                    const kiln_session_options *options, kiln_session **out) {
    *out = NULL;
    kiln_session_options dflt;
    kn_session_options_defaults(&dflt);
    const kiln_session_options *o = options ? options : &dflt;
    kn_log_set_level(o->log_level);
    kn_runtime_prepare(o); /* the device's start beside the hashing, reading and compiling below */
    const char *load_path = o->load_path && *o->load_path ? o->load_path : NULL;
    const char *save_path = o->save_path && *o->save_path ? o->save_path : NULL;

    /* a compiled file given where a model was expected */
    if (path ? kn_cache_file_is_compiled(path) : kn_cache_is_compiled(data, size)) {
        kn_cfile *f;
        KN_TRY(path ? kn_cfile_open(path, &f) : kn_cfile_open_memory(data, size, "<memory>", true, &f));
        kiln_status st = run_compiled(f, o, out);
        kn_cfile_close(f);
        return st;
    }

    kiln_status st = KILN_OK;
    kn_cache_key k = {0};
    double compile_ms = -1;
    if (load_path) {
        kn_cfile *f = NULL;
        st = key_for(path, data, size, base_dir, o, &k);
        if (st == KILN_OK) st = kn_cfile_open(load_path, &f);
        char why[768];
        kn_cache_key_unset(&k, "build");
        if (st == KILN_OK && kn_cfile_compare_key(f, &k, false, why, sizeof why))
            st = kn_error(KILN_ERR_CACHE, "compiled file '%s' does not match this model, these options and this device: %s",
                          load_path, why);
        if (st == KILN_OK) {
            st = session_from_cfile(f, o, out);
            if (st != KILN_OK) kn_error_prefix(st, "compiled file '%s': ", load_path);
        }
        kn_cfile_close(f);
        kn_cache_key_free(&k); /* without its build field: a save below computes it afresh */
        if (st == KILN_OK) kn_log(KILN_LOG_INFO, "loaded compiled file '%s'", load_path);
    } else if (o->cache_enabled && path && !cache_off_by_env()) {
        st = cached_create(path, o, out, save_path ? &k : NULL);
    } else {
        /* a save keys the model before compiling it, and checks that what was compiled is what was
         * keyed (the file may change in between) */
        char digest[33];
        if (save_path) st = key_for(path, data, size, base_dir, o, &k);
        if (save_path && path && kn_cache_test_after_key) kn_cache_test_after_key(path);
        double t = kn_now_ms();
        if (st == KILN_OK) st = compile_fresh(path, data, size, base_dir, o, out, save_path ? digest : NULL);
        compile_ms = kn_now_ms() - t;
        if (st == KILN_OK && save_path && !compiled_what_was_keyed(&k, digest)) {
            st = kn_error(KILN_ERR_IO,
                          "'%s' changed while the session was being made (the bytes compiled are not the bytes hashed "
                          "for the compiled file's key): not saved to '%s'; make the session again",
                          path ? path : "<memory>", save_path);
            kiln_session_destroy(*out);
            *out = NULL;
        }
    }
    if (st == KILN_OK && save_path) {
        if (!k.n) st = key_for(path, data, size, base_dir, o, &k);
        if (st == KILN_OK) st = save_to(save_path, *out, &k, path, compile_ms);
        if (st != KILN_OK) {
            kiln_session_destroy(*out);
            *out = NULL;
        }
    }
    kn_cache_key_free(&k);
    return st;
}

/* ---- ahead of time ---- */

/* kiln compile for a device that tunes: one run on zero-filled inputs makes every algorithm
 * choice, so the file holds them and its first real run makes none. Only with static input
 * shapes (fixed in the model or with --dim); a model that cannot run on zeros (data-dependent
 * shapes, indices) is written without them and tunes at its first run. */
static void tuning_run(kiln_session *s) {
    size_t n = kiln_session_input_count(s), no = kiln_session_output_count(s);
    const char **names = calloc(n + 1, sizeof *names);
    kiln_tensor **in = calloc(n + 1, sizeof *in), **out = calloc(no + 1, sizeof *out);
    const char *skip = NULL;
    kiln_status st = names && in && out ? KILN_OK : KN_OOM();
    for (size_t i = 0; i < n && st == KILN_OK && !skip; i++) {
        kiln_value_info info;
        st = kiln_session_input_info(s, i, &info);
        if (st != KILN_OK) break;
        bool dense = info.dtype != KILN_DTYPE_STRING && kiln_dtype_size(info.dtype) > 0 && info.rank >= 0;
        for (int d = 0; dense && d < info.rank; d++)
            if (info.dims[d] < 0) dense = false;
        if (!dense) {
            skip = info.name;
            break;
        }
        names[i] = info.name;
        st = kiln_tensor_create(info.dtype, info.dims, info.rank, &in[i]);
    }
    if (st == KILN_OK && skip)
        kn_log(KILN_LOG_INFO, "no tuning run: input '%s' has no static shape (fix it with --dim); the algorithms are "
               "chosen at the first run", skip);
    else if (st == KILN_OK) {
        double t = kn_now_ms();
        st = kiln_session_run(s, names, in, n, NULL, no, out);
        if (st == KILN_OK)
            kn_log(KILN_LOG_INFO, "tuning run on zero inputs: %d algorithm choices in %.1f ms", kn_cache_tuning_made(s),
                   kn_now_ms() - t);
    }
    if (st != KILN_OK) {
        kn_log(KILN_LOG_INFO, "no tuning run: %s; the algorithms are chosen at the first run", kn_last_error());
        kn_clear_error();
    }
    for (size_t i = 0; in && i < n; i++) kiln_tensor_destroy(in[i]);
    for (size_t i = 0; out && i < no; i++) kiln_tensor_destroy(out[i]);
    free(names);
    free(in);
    free(out);
}

kiln_status kn_cache_compile_to(const char *path, const kiln_session_options *options, const char *out_path,
                                kn_cache_progress_fn progress, void *arg, kn_compile_stats *stats) {
    memset(stats, 0, sizeof *stats);
    kiln_session_options dflt;
    kn_session_options_defaults(&dflt);
    const kiln_session_options *o = options ? options : &dflt;
    kn_log_set_level(o->log_level);
    if (progress) progress(arg, "hashing the model");
    double t = kn_now_ms();
    KN_TRY(kn_cache_key_for_file(path, o, &stats->key));
    stats->hash_ms = kn_now_ms() - t;
    if (progress) progress(arg, "loading the model");
    t = kn_now_ms();
    kn_model *m;
    kn_model_file mf;
    kiln_status st = kn_onnx_file_read(path, &mf);
    if (st == KILN_OK) {
        /* what is compiled must be what was keyed: the file may have changed since it was hashed */
        char digest[33];
        kn_hash_hex(kn_cache_content_digest(mf.data, mf.size, mf.dir), digest);
        if (!compiled_what_was_keyed(&stats->key, digest)) {
            kn_onnx_file_release(&mf);
            return kn_error(KILN_ERR_IO, "'%s' changed while it was being compiled (the bytes read are not the bytes "
                                         "hashed for the compiled file's key); compile again", path);
        }
        st = kn_onnx_load_read(path, &mf, &m);
    }
    stats->load_ms = kn_now_ms() - t;
    if (st != KILN_OK) return kn_error_prefix(st, "%s: ", path);
    if (progress) progress(arg, "optimising and compiling");
    t = kn_now_ms();
    kiln_session *s;
    st = kn_session_from_model(m, o, &s);
    stats->compile_ms = kn_now_ms() - t;
    if (st != KILN_OK) return kn_error_prefix(st, "%s: ", path);
    if (kn_cache_tuning_made(s) >= 0) {
        if (progress) progress(arg, "tuning");
        tuning_run(s);
    }
    if (progress) progress(arg, "writing the compiled file");
    t = kn_now_ms();
    add_info(&stats->key, path, stats->compile_ms);
    st = kn_cache_write(out_path, s, &stats->key);
    stats->write_ms = kn_now_ms() - t;
    kiln_session_destroy(s);
    if (st == KILN_OK) {
        struct stat sb;
        if (stat(out_path, &sb) == 0) stats->bytes = (uint64_t)sb.st_size;
    }
    return st;
}

kiln_status kn_cache_verify_file(const char *path) {
    kn_cfile *f;
    KN_TRY(kn_cfile_open(path, &f));
    kiln_session_options o;
    kn_session_options_defaults(&o);
    kiln_status st = adopt_providers(f, &o);
    kiln_session *s = NULL;
    if (st == KILN_OK) st = session_from_cfile(f, &o, &s);
    kiln_session_destroy(s);
    kn_cfile_close(f);
    kn_session_options_clear(&o);
    return st;
}

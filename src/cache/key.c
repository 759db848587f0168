#include "cache/key.h"
#include "onnx/loader.h"

#include "util/file.h"

#include "backend/cpu/cpu.h"
#include "cache/format.h"
#include "ops/families.h"
#include "opt/opt.h"

#include <errno.h>
#include <link.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- fields ---- */

static char *escape(const char *s) {
    size_t n = strlen(s);
    char *o = malloc(4 * n + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\') {
            o[k++] = '\\';
            o[k++] = '\\';
        } else if (c < 0x20 || c == 0x7f) {
            k += (size_t)sprintf(o + k, "\\x%02x", c);
        } else {
            o[k++] = (char)c;
        }
    }
    o[k] = 0;
    return o;
}

kiln_status kn_cache_key_set(kn_cache_key *k, const char *name, const char *value) {
    if (strlen(name) >= KN_KEY_NAME_MAX) return KN_INTERNAL("key field name too long");
    char *v = escape(value ? value : "");
    if (!v) return KN_OOM();
    for (int i = 0; i < k->n; i++)
        if (!strcmp(k->f[i].name, name)) {
            free(k->f[i].value);
            k->f[i].value = v;
            return KILN_OK;
        }
    if (k->n >= KN_KEY_MAX_FIELDS) {
        free(v);
        return kn_error(KILN_ERR_CACHE, "more than %d cache key fields", KN_KEY_MAX_FIELDS);
    }
    snprintf(k->f[k->n].name, KN_KEY_NAME_MAX, "%s", name);
    k->f[k->n].value = v;
    k->n++;
    return KILN_OK;
}

const char *kn_cache_key_get(const kn_cache_key *k, const char *name) {
    for (int i = 0; i < k->n; i++)
        if (!strcmp(k->f[i].name, name)) return k->f[i].value;
    return NULL;
}

void kn_cache_key_free(kn_cache_key *k) {
    if (!k) return;
    for (int i = 0; i < k->n; i++) free(k->f[i].value);
    memset(k, 0, sizeof *k);
}

kiln_status kn_cache_key_copy(const kn_cache_key *src, kn_cache_key *dst) {
    *dst = *src;
    for (int i = 0; i < src->n; i++) {
        dst->f[i].value = strdup(src->f[i].value ? src->f[i].value : "");
        if (!dst->f[i].value) {
            dst->n = i;
            kn_cache_key_free(dst);
            return KN_OOM();
        }
    }
    return KILN_OK;
}

bool kn_cache_field_is_env(const char *name) {
    return !strcmp(name, "format") || !strcmp(name, "kiln") || !strcmp(name, "registry") || !strcmp(name, "build") ||
           !strncmp(name, "device.", 7);
}

static int cmp_field(const void *a, const void *b) {
    return strcmp(((const kn_key_field *)a)->name, ((const kn_key_field *)b)->name);
}

void kn_cache_key_finish(kn_cache_key *k) {
    /* digests over the fields sorted by name, so the order they were set in does not matter */
    kn_key_field sorted[KN_KEY_MAX_FIELDS];
    memcpy(sorted, k->f, sizeof(kn_key_field) * (size_t)k->n);
    qsort(sorted, (size_t)k->n, sizeof *sorted, cmp_field);
    kn_hasher id, env;
    kn_hasher_init(&id, 0x6964);
    kn_hasher_init(&env, 0x656e76);
    for (int i = 0; i < k->n; i++) {
        if (!strncmp(sorted[i].name, "info.", 5)) continue;
        kn_hasher *h = kn_cache_field_is_env(sorted[i].name) ? &env : &id;
        kn_hasher_str(h, sorted[i].name);
        kn_hasher_str(h, sorted[i].value);
    }
    k->id = kn_hasher_final(&id);
    kn_hash128 e = kn_hasher_final(&env);
    k->env = e.lo ^ e.hi;
    char hex[33];
    kn_hash_hex(k->id, hex);
    snprintf(k->name, sizeof k->name, "%s-%016llx", hex, (unsigned long long)k->env);
}

const char *kn_cache_field_label(const char *name, char *buf, size_t cap) {
    if (!strcmp(name, "format")) snprintf(buf, cap, "cache format version");
    else if (!strcmp(name, "kiln")) snprintf(buf, cap, "kiln version");
    else if (!strcmp(name, "registry")) snprintf(buf, cap, "kiln operator registry digest");
    else if (!strcmp(name, "build")) snprintf(buf, cap, "kiln build");
    else if (!strcmp(name, "model")) snprintf(buf, cap, "model content digest");
    else if (!strcmp(name, "options")) snprintf(buf, cap, "compile options");
    else if (!strcmp(name, "shapes")) snprintf(buf, cap, "input-shape profile");
    else if (!strncmp(name, "device.", 7)) snprintf(buf, cap, "device %s", name + 7);
    else snprintf(buf, cap, "%s", name);
    return buf;
}

/* ---- options ---- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct sbuf {
    char *d;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *s, const char *t) {
    size_t l = strlen(t);
    if (s->oom) return;
    if (s->n + l + 1 > s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 128;
        while (nc < s->n + l + 1) nc *= 2;
        char *d = realloc(s->d, nc);
        if (!d) {
            s->oom = true;
            return;
        }
        s->d = d;
        s->cap = nc;
    }
    memcpy(s->d + s->n, t, l + 1);
    s->n += l;
}

static char *sb_done(sbuf *s) {
    if (s->oom) {
        free(s->d);
        return NULL;
    }
    if (!s->d) return strdup("");
    return s->d;
}

/* Provider options that change how runs are issued, not what is compiled: left out of the key, so
 * sessions that differ only in them share one compiled file. */
static bool run_only_option(const char *key) {
    return !strcmp(key, "graphs"); /* CUDA graph capture of runs */
}

char *kn_cache_options_text(const kiln_session_options *o) {
    kiln_session_options dflt;
    if (!o) {
        kn_session_options_defaults(&dflt);
        o = &dflt;
    }
    sbuf s = {0};
    char tmp[64];
    snprintf(tmp, sizeof tmp, "opt_level=%d", o->opt_level);
    sb_add(&s, tmp);
    /* providers in order (order decides placement), each with its options sorted by key */
    sb_add(&s, " providers=");
    if (o->n_providers == 0) sb_add(&s, "cpu");
    for (int i = 0; i < o->n_providers; i++) {
        const kn_provider_request *p = &o->providers[i];
        if (i) sb_add(&s, ",");
        sb_add(&s, p->name);
        char *kv[KN_MAX_PROVIDER_OPTIONS];
        int n = 0;
        for (int k = 0; k < p->n_options; k++) {
            if (run_only_option(p->keys[k])) continue;
            size_t l = strlen(p->keys[k]) + strlen(p->values[k]) + 2;
            kv[n] = malloc(l);
            if (!kv[n]) {
                s.oom = true;
                break;
            }
            snprintf(kv[n], l, "%s=%s", p->keys[k], p->values[k]);
            n++;
        }
        if (!n) continue;
        qsort(kv, (size_t)n, sizeof *kv, cmp_str);
        sb_add(&s, "{");
        for (int k = 0; k < n; k++) {
            if (k) sb_add(&s, ",");
            sb_add(&s, kv[k]);
            free(kv[k]);
        }
        sb_add(&s, "}");
    }
    /* disabled passes as a sorted set */
    sb_add(&s, " disabled_passes=");
    if (o->n_disabled_passes) {
        char **d = malloc(sizeof(char *) * (size_t)o->n_disabled_passes);
        if (!d) {
            s.oom = true;
        } else {
            memcpy(d, o->disabled_passes, sizeof(char *) * (size_t)o->n_disabled_passes);
            qsort(d, (size_t)o->n_disabled_passes, sizeof *d, cmp_str);
            for (int i = 0; i < o->n_disabled_passes; i++) {
                if (i && !strcmp(d[i], d[i - 1])) continue;
                if (i) sb_add(&s, ",");
                sb_add(&s, d[i]);
            }
            free(d);
        }
    }
    /* the optimiser's environment switches, when any is set */
    char env[512];
    kn_opt_environment(env, sizeof env);
    if (env[0]) {
        sb_add(&s, " environment=");
        sb_add(&s, env);
    }
    return sb_done(&s);
}

static int cmp_dim(const void *a, const void *b) {
    return strcmp(((const kn_dim_override *)a)->name, ((const kn_dim_override *)b)->name);
}

char *kn_cache_shapes_text(const kiln_session_options *o) {
    sbuf s = {0};
    if (o && o->n_dims) {
        kn_dim_override *d = malloc(sizeof *d * (size_t)o->n_dims);
        if (!d) return NULL;
        memcpy(d, o->dims, sizeof *d * (size_t)o->n_dims);
        qsort(d, (size_t)o->n_dims, sizeof *d, cmp_dim);
        for (int i = 0; i < o->n_dims; i++) {
            char tmp[64];
            if (i) sb_add(&s, ",");
            sb_add(&s, d[i].name);
            snprintf(tmp, sizeof tmp, "=%lld", (long long)d[i].value);
            sb_add(&s, tmp);
        }
        free(d);
    }
    return sb_done(&s);
}

/* ---- build: the operator registry and CPU kernel tables ---- */

static void hash_schema(const kn_op_schema *s, void *arg) {
    kn_hasher *h = arg;
    kn_hasher_str(h, s->domain);
    kn_hasher_str(h, s->op_type);
    kn_hasher_u64(h, (uint64_t)s->since);
    kn_hasher_u64(h, (uint64_t)s->until);
    kn_hasher_u64(h, (uint64_t)(int64_t)s->min_inputs);
    kn_hasher_u64(h, (uint64_t)(int64_t)s->max_inputs);
    kn_hasher_u64(h, (uint64_t)(int64_t)s->min_outputs);
    kn_hasher_u64(h, (uint64_t)(int64_t)s->max_outputs);
    kn_hasher_u64(h, s->flags);
}

static char kn_registry_hex[17];
static pthread_once_t kn_registry_once = PTHREAD_ONCE_INIT;

static void registry_init(void) {
    kn_hasher h;
    kn_hasher_init(&h, 0x726567);
    kn_op_foreach(hash_schema, &h);
    size_t n_tables;
    const kn_cpu_kernel *const *tables = kn_cpu_tables(&n_tables);
    for (size_t f = 0; f < n_tables; f++) {
        kn_hasher_u64(&h, f);
        for (const kn_cpu_kernel *k = tables[f]; k->op_type; k++) {
            kn_hasher_str(&h, k->domain);
            kn_hasher_str(&h, k->op_type);
            kn_hasher_u64(&h, k->supports != NULL);
        }
    }
    kn_hash128 r = kn_hasher_final(&h);
    snprintf(kn_registry_hex, sizeof kn_registry_hex, "%016llx", (unsigned long long)(r.lo ^ r.hi));
}

/* ---- build: the code itself ---- */

/* Development builds keep the version number while their passes and kernels change, and a cache
 * entry compiled by an older build must not be served to a newer one. So the environment has a
 * "build" field: KILN_BUILD_ID when the build system defines it (a digest of the sources, shared
 * by every binary of one build), else a digest of the machine code of the binary or library this
 * code is linked into (read from the loaded executable segments, about a millisecond once per
 * process). Explicitly given compiled files are not held to it (see kn_cache_key_unset in
 * cache/use.c), so a file from `kiln compile` loads in an application of the same version. */
static char kn_build_hex[64];
static pthread_once_t kn_build_once = PTHREAD_ONCE_INIT;

typedef struct code_walk {
    uintptr_t target;
    kn_hasher h;
    bool found;
} code_walk;

static int hash_code_of(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    code_walk *w = arg;
    bool mine = false;
    for (int i = 0; i < info->dlpi_phnum && !mine; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
        mine = ph->p_type == PT_LOAD && w->target >= start && w->target < start + ph->p_memsz;
    }
    if (!mine) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
        kn_hasher_u64(&w->h, ph->p_filesz);
        kn_hasher_update(&w->h, (const void *)((uintptr_t)info->dlpi_addr + ph->p_vaddr), ph->p_filesz);
    }
    w->found = true;
    return 1;
}

static void build_init(void) {
#ifdef KILN_BUILD_ID
    snprintf(kn_build_hex, sizeof kn_build_hex, "%s", KILN_BUILD_ID);
#else
    code_walk w;
    memset(&w, 0, sizeof w);
    w.target = (uintptr_t)&build_init;
    kn_hasher_init(&w.h, 0x636f6465);
    dl_iterate_phdr(hash_code_of, &w);
    kn_hash128 r = kn_hasher_final(&w.h);
    if (w.found) snprintf(kn_build_hex, sizeof kn_build_hex, "code-%016llx", (unsigned long long)(r.lo ^ r.hi));
    else snprintf(kn_build_hex, sizeof kn_build_hex, "unknown");
#endif
}

void kn_cache_key_unset(kn_cache_key *k, const char *name) {
    for (int i = 0; i < k->n; i++)
        if (!strcmp(k->f[i].name, name)) {
            free(k->f[i].value);
            k->f[i] = k->f[k->n - 1];
            k->n--;
            return;
        }
}

/* ---- whole keys ---- */

kiln_status kn_cache_key_env(const kiln_session_options *o, kn_cache_key *k) {
    memset(k, 0, sizeof *k);
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%d", KN_CACHE_FORMAT_VERSION);
    kiln_status st = kn_cache_key_set(k, "format", tmp);
    if (st == KILN_OK) st = kn_cache_key_set(k, "kiln", kiln_version());
    pthread_once(&kn_registry_once, registry_init);
    if (st == KILN_OK) st = kn_cache_key_set(k, "registry", kn_registry_hex);
    pthread_once(&kn_build_once, build_init);
    if (st == KILN_OK) st = kn_cache_key_set(k, "build", kn_build_hex);
    if (st == KILN_OK) st = kn_cache_device_fields(o, k);
    if (st != KILN_OK) {
        kn_cache_key_free(k);
        return st;
    }
    kn_cache_key_finish(k);
    return KILN_OK;
}

static kiln_status job_fields(kn_hash128 content, const kiln_session_options *o, kn_cache_key *k) {
    char hex[33];
    kn_hash_hex(content, hex);
    KN_TRY(kn_cache_key_set(k, "model", hex));
    char *opts = kn_cache_options_text(o), *shapes = kn_cache_shapes_text(o);
    kiln_status st = opts && shapes ? KILN_OK : KN_OOM();
    if (st == KILN_OK) st = kn_cache_key_set(k, "options", opts);
    if (st == KILN_OK) st = kn_cache_key_set(k, "shapes", shapes);
    free(opts);
    free(shapes);
    return st;
}

/* The environment's fields on a thread of their own: the device fingerprint waits for the device
 * probe (the CUDA driver's initialisation, 100-200 ms), and the model's digest (a few ms per 20 MB)
 * is made meanwhile instead of after it. */
typedef struct env_job {
    const kiln_session_options *o;
    kn_cache_key k;
    kiln_status st;
    char msg[512];
} env_job;

static void *env_fields(void *arg) {
    env_job *j = arg;
    j->st = kn_cache_key_env(j->o, &j->k);
    if (j->st != KILN_OK) snprintf(j->msg, sizeof j->msg, "%s", kiln_last_error());
    return NULL;
}

kiln_status kn_cache_key_for_memory(const void *data, size_t size, const char *base_dir,
                                    const kiln_session_options *o, kn_cache_key *k) {
    env_job job = {.o = o};
    pthread_t t;
    bool threaded = pthread_create(&t, NULL, env_fields, &job) == 0;
    kn_hash128 digest = kn_cache_content_digest(data, size, base_dir);
    if (threaded) {
        pthread_join(t, NULL);
        if (job.st != KILN_OK) return kn_error(job.st, "%s", job.msg); /* the error was the thread's */
        *k = job.k;
    } else {
        KN_TRY(kn_cache_key_env(o, k));
    }
    kiln_status st = job_fields(digest, o, k);
    if (st != KILN_OK) {
        kn_cache_key_free(k);
        return st;
    }
    kn_cache_key_finish(k);
    return KILN_OK;
}

kiln_status kn_cache_key_for_file(const char *path, const kiln_session_options *o, kn_cache_key *k) {
    memset(k, 0, sizeof *k);
    /* read as the loader reads it (into owned memory, not mapped: a file truncated while it is
     * hashed is an error, not SIGBUS); external data resolves against the model's folder */
    kn_model_file f;
    KN_TRY(kn_onnx_file_read(path, &f));
    if (f.mapped) madvise(f.mem, f.mem_size, MADV_SEQUENTIAL);
    kiln_status st = kn_cache_key_for_memory(f.data, f.size, f.dir, o, k);
    kn_onnx_file_release(&f);
    return st;
}

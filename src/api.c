/* The public C API outside sessions: tensors, options, version, providers and devices. Every
 * function checks its arguments and turns them into statuses with a message. */
#include "kiln.h"

#include "backend/backend.h"
#include "backend/cpu/isa.h"
#include "exec/session.h"
#include "ir/tensor.h"
#include "util/status.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KN_STR_(x) #x
#define KN_STR(x) KN_STR_(x)

const char *kiln_version(void) {
    return KN_STR(KILN_VERSION_MAJOR) "." KN_STR(KILN_VERSION_MINOR) "." KN_STR(KILN_VERSION_PATCH);
}

/* ------------------------------------------------------------------ tensors */

kiln_status kiln_tensor_create(kiln_dtype dtype, const int64_t *dims, int rank, kiln_tensor **out) {
    if (!out) return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_create: tensor_out is NULL");
    *out = NULL;
    return kn_tensor_new(dtype, rank, dims, out);
}

kiln_status kiln_tensor_wrap(kiln_dtype dtype, const int64_t *dims, int rank, void *data, size_t bytes,
                             kiln_tensor **out) {
    if (!out) return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_wrap: tensor_out is NULL");
    *out = NULL;
    if (dtype == KILN_DTYPE_STRING)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_wrap: string tensors cannot wrap caller memory");
    if (!data && bytes)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_wrap: data is NULL");
    static char empty;
    return kn_tensor_new_view(dtype, rank, dims, data ? data : &empty, bytes, out);
}

_Static_assert((int)KILN_DEVICE_HOST == (int)KN_DEVICE_HOST && (int)KILN_DEVICE_CUDA == (int)KN_DEVICE_CUDA,
               "public and internal device numbers agree");

kiln_status kiln_tensor_wrap_device(kiln_dtype dtype, const int64_t *dims, int rank, void *data, size_t bytes,
                                    int device_id, kiln_tensor **out) {
    if (!out) return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_wrap_device: tensor_out is NULL");
    *out = NULL;
    if (dtype == KILN_DTYPE_STRING)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_wrap_device: string tensors cannot live in device memory");
    if (device_id < 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_wrap_device: device_id %d is negative", device_id);
    if (!data && bytes) return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_wrap_device: data is NULL");
    const kn_backend_ops *cuda = kn_backend_find("cuda");
    if (!cuda || !cuda->check_pointer)
        return kn_error(KILN_ERR_NO_DEVICE, "kiln_tensor_wrap_device: this build of kiln has no CUDA backend");
    const char *why = NULL;
    if (!cuda->available(&why))
        return kn_error(KILN_ERR_NO_DEVICE, "kiln_tensor_wrap_device: no CUDA device: %s", why ? why : "unavailable");
    /* the shape first: its message is the clearer one when both are wrong */
    kn_tensor *t = NULL;
    static char empty;
    KN_TRY(kn_tensor_wrap_device(KN_DEVICE_CUDA, device_id, data ? data : &empty, bytes, dtype, rank, dims, &t));
    if (data) {
        kiln_status st = cuda->check_pointer(data, bytes, device_id);
        if (st != KILN_OK) {
            kn_tensor_free(t);
            return kn_error_prefix(st, "kiln_tensor_wrap_device: ");
        }
    } else {
        t->data = NULL; /* an empty tensor: nothing is ever read */
    }
    *out = t;
    return KILN_OK;
}

kiln_device_type kiln_tensor_device(const kiln_tensor *t, int *device_id_out) {
    if (device_id_out) *device_id_out = t && t->device != KN_DEVICE_HOST ? t->device_id : 0;
    return t ? (kiln_device_type)t->device : KILN_DEVICE_HOST;
}

void kiln_tensor_destroy(kiln_tensor *t) { kn_tensor_free(t); }
kiln_dtype kiln_tensor_dtype(const kiln_tensor *t) { return t ? t->dtype : KILN_DTYPE_UNDEFINED; }
int kiln_tensor_rank(const kiln_tensor *t) { return t ? t->rank : -1; }
const int64_t *kiln_tensor_dims(const kiln_tensor *t) { return t ? t->dims : NULL; }
int64_t kiln_tensor_element_count(const kiln_tensor *t) { return t ? kn_tensor_count(t) : 0; }
void *kiln_tensor_data(kiln_tensor *t) { return t ? t->data : NULL; }
size_t kiln_tensor_bytes(const kiln_tensor *t) { return t ? t->nbytes : 0; }

/* ------------------------------------------------------------------ options */

kiln_status kiln_session_options_create(kiln_session_options **out) {
    if (!out) return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_session_options_create: options_out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out) return KN_OOM();
    kn_session_options_defaults(*out);
    return KILN_OK;
}

void kiln_session_options_destroy(kiln_session_options *o) {
    if (!o) return;
    kn_session_options_clear(o);
    free(o);
}

#define KN_CHECK_OPTS(o, fn)                                                                       \
    do {                                                                                           \
        if (!(o)) return kn_error(KILN_ERR_INVALID_ARGUMENT, fn ": options is NULL");             \
    } while (0)

/* Provider option keys each provider accepts; values are checked when the session is made. */
/* precision: fp32 or bf16 (sgemm_bf16.h); activations: fp32 or half (with bf16 on AMX, the block
 * outputs a residual reads kept in bf16 too: opt pass cpu_bf16_values) */
static const char *const kn_cpu_keys[] = {"precision", "activations", NULL};
static const char *const kn_cuda_keys[] = {"device_id", "precision", "strict", "workspace_mb", "tuning", "graphs",
                                           "activations", "conv_graph", NULL};

kiln_status kiln_session_options_append_provider(kiln_session_options *o, const char *name,
                                                 const char *const *keys, const char *const *values,
                                                 size_t n) {
    KN_CHECK_OPTS(o, "kiln_session_options_append_provider");
    if (!name) return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_session_options_append_provider: name is NULL");
    const char *const *allowed = NULL;
    if (!strcmp(name, "cpu")) allowed = kn_cpu_keys;
    else if (!strcmp(name, "cuda")) allowed = kn_cuda_keys;
    else return kn_error(KILN_ERR_NOT_FOUND, "unknown provider '%s' (kiln knows 'cpu' and 'cuda')", name);
    for (int i = 0; i < o->n_providers; i++)
        if (!strcmp(o->providers[i].name, name))
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "provider '%s' is already in the list", name);
    if (o->n_providers >= KN_MAX_PROVIDERS)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "at most %d providers", KN_MAX_PROVIDERS);
    if (n > KN_MAX_PROVIDER_OPTIONS)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "at most %d options per provider", KN_MAX_PROVIDER_OPTIONS);
    if (n && (!keys || !values))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "provider '%s': keys or values is NULL", name);
    for (size_t i = 0; i < n; i++) {
        if (!keys[i] || !values[i])
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "provider '%s': option %zu has a NULL key or value", name, i);
        int ok = 0;
        for (const char *const *k = allowed; *k; k++) ok |= !strcmp(*k, keys[i]);
        if (!ok) return kn_error(KILN_ERR_INVALID_ARGUMENT, "provider '%s' has no option '%s'", name, keys[i]);
    }
    kn_provider_request *p = &o->providers[o->n_providers];
    memset(p, 0, sizeof *p);
    p->name = strdup(name);
    if (!p->name) return KN_OOM();
    for (size_t i = 0; i < n; i++) {
        p->keys[i] = strdup(keys[i]);
        p->values[i] = strdup(values[i]);
        p->n_options = (int)i + 1;
        if (!p->keys[i] || !p->values[i]) return KN_OOM();
    }
    o->n_providers++;
    return KILN_OK;
}

kiln_status kiln_session_options_set_output_device(kiln_session_options *o, kiln_device_type device) {
    KN_CHECK_OPTS(o, "kiln_session_options_set_output_device");
    if (device != KILN_DEVICE_HOST && device != KILN_DEVICE_CUDA)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_session_options_set_output_device: %d is not KILN_DEVICE_HOST (0) or KILN_DEVICE_CUDA (1)",
                        (int)device);
    o->output_device = (int)device;
    return KILN_OK;
}

kiln_status kiln_session_options_set_opt_level(kiln_session_options *o, int level) {
    KN_CHECK_OPTS(o, "kiln_session_options_set_opt_level");
    if (level < 0 || level > 3)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "optimisation level %d is outside 0..3", level);
    o->opt_level = level;
    return KILN_OK;
}

kiln_status kiln_session_options_set_intra_op_threads(kiln_session_options *o, int threads) {
    KN_CHECK_OPTS(o, "kiln_session_options_set_intra_op_threads");
    if (threads < 0 || threads > 1024)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "intra-op threads %d is outside 0..1024", threads);
    o->intra_op_threads = threads;
    return KILN_OK;
}

kiln_status kiln_session_options_set_log_level(kiln_session_options *o, kiln_log_level level) {
    KN_CHECK_OPTS(o, "kiln_session_options_set_log_level");
    if ((int)level < KILN_LOG_ERROR || level > KILN_LOG_DEBUG)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "log level %d is outside 0..3", (int)level);
    o->log_level = level;
    return KILN_OK;
}

kiln_status kiln_session_options_disable_pass(kiln_session_options *o, const char *pass) {
    KN_CHECK_OPTS(o, "kiln_session_options_disable_pass");
    if (!pass || !*pass) return kn_error(KILN_ERR_INVALID_ARGUMENT, "pass name is NULL or empty");
    char **p = realloc(o->disabled_passes, sizeof(char *) * (size_t)(o->n_disabled_passes + 1));
    if (!p) return KN_OOM();
    o->disabled_passes = p;
    if (!(p[o->n_disabled_passes] = strdup(pass))) return KN_OOM();
    o->n_disabled_passes++;
    return KILN_OK;
}

static kiln_status set_path(char **slot, const char *path) {
    free(*slot);
    *slot = NULL;
    if (path && *path && !(*slot = strdup(path))) return KN_OOM();
    return KILN_OK;
}

kiln_status kiln_session_options_set_dump_path(kiln_session_options *o, const char *path) {
    KN_CHECK_OPTS(o, "kiln_session_options_set_dump_path");
    return set_path(&o->dump_path, path);
}

kiln_status kiln_session_options_set_cache(kiln_session_options *o, int enabled, const char *dir) {
    KN_CHECK_OPTS(o, "kiln_session_options_set_cache");
    o->cache_enabled = enabled != 0;
    return set_path(&o->cache_dir, dir);
}

kiln_status kiln_session_options_set_compiled_paths(kiln_session_options *o, const char *save_path,
                                                    const char *load_path) {
    KN_CHECK_OPTS(o, "kiln_session_options_set_compiled_paths");
    KN_TRY(set_path(&o->save_path, save_path));
    return set_path(&o->load_path, load_path);
}

kiln_status kiln_session_options_set_dim(kiln_session_options *o, const char *name, int64_t value) {
    KN_CHECK_OPTS(o, "kiln_session_options_set_dim");
    if (!name || !*name) return kn_error(KILN_ERR_INVALID_ARGUMENT, "dimension name is NULL or empty");
    if (value < 0) return kn_error(KILN_ERR_INVALID_ARGUMENT, "dimension '%s' = %lld is negative", name, (long long)value);
    for (int i = 0; i < o->n_dims; i++)
        if (!strcmp(o->dims[i].name, name)) {
            o->dims[i].value = value;
            return KILN_OK;
        }
    kn_dim_override *d = realloc(o->dims, sizeof *d * (size_t)(o->n_dims + 1));
    if (!d) return KN_OOM();
    o->dims = d;
    if (!(d[o->n_dims].name = strdup(name))) return KN_OOM();
    d[o->n_dims].value = value;
    o->n_dims++;
    return KILN_OK;
}

kiln_status kiln_session_options_set_memory_limit(kiln_session_options *o, uint64_t max_bytes) {
    KN_CHECK_OPTS(o, "kiln_session_options_set_memory_limit");
    o->memory_limit = max_bytes;
    return KILN_OK;
}

kiln_status kiln_session_options_set_max_concurrent_runs(kiln_session_options *o, int max_runs) {
    KN_CHECK_OPTS(o, "kiln_session_options_set_max_concurrent_runs");
    if (max_runs < 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_session_options_set_max_concurrent_runs: %d is negative",
                        max_runs);
    o->max_concurrent_runs = max_runs;
    return KILN_OK;
}

/* ------------------------------------------------------------------ run options */

kiln_status kiln_run_options_create(kiln_run_options **out) {
    if (!out) return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_run_options_create: options_out is NULL");
    *out = NULL;
    kiln_run_options *r = calloc(1, sizeof *r);
    if (!r) return KN_OOM();
    r->magic = KN_RUN_OPTIONS_MAGIC;
    atomic_init(&r->terminate, 0);
    *out = r;
    return KILN_OK;
}

void kiln_run_options_destroy(kiln_run_options *r) {
    if (!r) return;
    r->magic = 0;
    free(r);
}

#define KN_CHECK_RUN_OPTS(r, fn)                                                                        \
    do {                                                                                                \
        if (!(r)) return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: options is NULL", fn);                 \
        if ((r)->magic != KN_RUN_OPTIONS_MAGIC)                                                          \
            return kn_error(KILN_ERR_MISUSE, "%s: not a live kiln_run_options (destroyed, or another object)", fn); \
    } while (0)

kiln_status kiln_run_options_set_terminate(kiln_run_options *r, int terminate) {
    KN_CHECK_RUN_OPTS(r, "kiln_run_options_set_terminate");
    atomic_store(&r->terminate, terminate != 0);
    return KILN_OK;
}

kiln_status kiln_run_options_set_timeout_ms(kiln_run_options *r, int64_t timeout_ms) {
    KN_CHECK_RUN_OPTS(r, "kiln_run_options_set_timeout_ms");
    if (timeout_ms < 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_run_options_set_timeout_ms: %lld is negative (0 = no limit)",
                        (long long)timeout_ms);
    atomic_store(&r->timeout_ms, timeout_ms);
    return KILN_OK;
}

/* ------------------------------------------------------------------ providers and devices */

size_t kiln_provider_count(void) { return (size_t)kn_backend_count(); }
const char *kiln_provider_name(size_t i) {
    return i < kiln_provider_count() ? kn_backend_at((int)i)->name : NULL;
}

int kiln_provider_available(const char *name, const char **reason_out) {
    if (reason_out) *reason_out = NULL;
    const kn_backend_ops *b = kn_backend_find(name);
    if (!b) {
        if (reason_out)
            *reason_out = name && !strcmp(name, "cuda") ? "no CUDA device: this build of kiln has no CUDA backend"
                                                       : "unknown provider";
        return 0;
    }
    const char *why = NULL;
    if (b->available(&why)) return 1;
    static _Thread_local char msg[512];
    snprintf(msg, sizeof msg, "%s: %s", !strcmp(name, "cuda") ? "no CUDA device" : "unavailable",
             why ? why : "unknown reason");
    if (reason_out) *reason_out = msg;
    return 0;
}

static char kn_cpu_desc[1024];

size_t kiln_device_count(const char *provider) {
    const kn_backend_ops *b = kn_backend_find(provider);
    return b && b->device_count ? b->device_count() : 0;
}

const char *kiln_device_description(const char *provider, size_t index) {
    if (provider && strcmp(provider, "cpu")) {
        const kn_backend_ops *b = kn_backend_find(provider);
        return b && b->device_description && index < kiln_device_count(provider) ? b->device_description(index)
                                                                                  : NULL;
    }
    if (!provider || index != 0) return NULL;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char model[128] = "unknown cpu";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10)) {
                char *c = strchr(line, ':');
                if (c) {
                    c++;
                    while (*c == ' ') c++;
                    c[strcspn(c, "\n")] = 0;
                    snprintf(model, sizeof model, "%s", c);
                }
                break;
            }
        fclose(f);
    }
    snprintf(kn_cpu_desc, sizeof kn_cpu_desc, "cpu: %s, %ld cores, kernels: %s", model, cores, kn_cpu_isa_describe());
    return kn_cpu_desc;
}

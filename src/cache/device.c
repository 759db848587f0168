/* Device fingerprints for the cache key: what about the machine changes the compiled result.
 *
 * CPU: the processor model, the instruction sets this build of kiln was compiled to use and the
 * level its CPU kernels run at (backend/cpu/isa.h: chosen at run time in a portable build), plus
 * the architecture and byte order (compiled files store tensors in host order). A provider adds its own fields under device.<provider>.*; the CUDA
 * backend adds name, compute capability, driver, runtime, cuDNN and cuBLAS versions. */
#include "cache/key.h"

#include "backend/backend.h"
#include "backend/cpu/isa.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t kn_fake_mu = PTHREAD_MUTEX_INITIALIZER;
static char *kn_fake_device;

void kn_cache_set_fake_device(const char *spec) {
    pthread_mutex_lock(&kn_fake_mu);
    free(kn_fake_device);
    kn_fake_device = spec && *spec ? strdup(spec) : NULL;
    pthread_mutex_unlock(&kn_fake_mu);
}

static const char *build_isa(void) {
    return ""
#if defined(__x86_64__)
           "x86_64"
#elif defined(__aarch64__)
           "aarch64"
#else
           "other"
#endif
#if defined(__SSE4_2__)
           ",sse4.2"
#endif
#if defined(__AVX__)
           ",avx"
#endif
#if defined(__AVX2__)
           ",avx2"
#endif
#if defined(__FMA__)
           ",fma"
#endif
#if defined(__F16C__)
           ",f16c"
#endif
#if defined(__AVX512F__)
           ",avx512f"
#endif
#if defined(__AVX512BW__)
           ",avx512bw"
#endif
#if defined(__AVX512VL__)
           ",avx512vl"
#endif
#if defined(__AVX512DQ__)
           ",avx512dq"
#endif
#if defined(__AVX512VNNI__)
           ",avx512vnni"
#endif
#if defined(__AVX512BF16__)
           ",avx512bf16"
#endif
#if defined(__AVX512FP16__)
           ",avx512fp16"
#endif
#if defined(__ARM_NEON)
           ",neon"
#endif
#if defined(__ARM_FEATURE_SVE)
           ",sve"
#endif
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
           ",big-endian"
#endif
        ;
}

static char kn_cpu_model[256];
static pthread_once_t kn_cpu_once = PTHREAD_ONCE_INIT;

/* The first "model name" (x86) or "CPU part"/"Hardware" (Arm) line of /proc/cpuinfo: read once,
 * stopping at the first match (the whole file is long on many-core machines). */
static void cpu_model_init(void) {
    snprintf(kn_cpu_model, sizeof kn_cpu_model, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    static const char *const keys[] = {"model name", "Hardware", "CPU part"};
    while (fgets(line, sizeof line, f)) {
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            if (strncmp(line, keys[k], strlen(keys[k]))) continue;
            char *colon = strchr(line, ':');
            if (!colon) continue;
            char *v = colon + 1;
            while (*v == ' ' || *v == '\t') v++;
            size_t n = strcspn(v, "\r\n");
            while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
            snprintf(kn_cpu_model, sizeof kn_cpu_model, "%.*s", (int)n, v);
            fclose(f);
            return;
        }
    }
    fclose(f);
}

static kiln_status cpu_fields(kn_cache_key *k) {
    pthread_once(&kn_cpu_once, cpu_model_init);
    KN_TRY(kn_cache_key_set(k, "device.cpu.model", kn_cpu_model));
    /* the level the CPU kernels run at (chosen at run time in a portable build: packed weights'
     * layouts and the kernels chosen differ between levels) */
    char isa[256];
    snprintf(isa, sizeof isa, "%s,kernels=%s", build_isa(), kn_cpu_isa_name(kn_cpu_isa_active()));
    return kn_cache_key_set(k, "device.cpu.isa", isa);
}

static kiln_status provider_fields(const kn_provider_request *req, kn_cache_key *k) {
    char field[KN_KEY_NAME_MAX];
    const kn_backend_ops *b = kn_backend_find(req->name);
    kn_backend_config cfg;
    char print[512];
    if (!b || !b->fingerprint || !b->available || !b->available(NULL) || kn_backend_parse_config(req, &cfg) != KILN_OK ||
        cfg.device_id < 0 || !b->fingerprint((size_t)cfg.device_id, print, sizeof print)) {
        kn_clear_error(); /* a bad option is reported by the session, not here */
        snprintf(field, sizeof field, "device.%s.available", req->name);
        return kn_cache_key_set(k, field, "no");
    }
    char *save = NULL;
    for (char *item = strtok_r(print, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) continue;
        *eq = 0;
        snprintf(field, sizeof field, "device.%s.%s", req->name, item);
        KN_TRY(kn_cache_key_set(k, field, eq + 1));
    }
    return KILN_OK;
}

/* "name=value;name=value" over the fields (names other than "build" that do not start with
 * "device." get it added). */
static kiln_status apply_fake(kn_cache_key *k, const char *spec) {
    char *copy = strdup(spec);
    if (!copy) return KN_OOM();
    kiln_status st = KILN_OK;
    for (char *save = NULL, *item = strtok_r(copy, ";", &save); item && st == KILN_OK;
         item = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) continue;
        *eq = 0;
        char name[KN_KEY_NAME_MAX];
        if (strncmp(item, "device.", 7) && strcmp(item, "build")) snprintf(name, sizeof name, "device.%s", item);
        else snprintf(name, sizeof name, "%s", item);
        st = kn_cache_key_set(k, name, eq + 1);
    }
    free(copy);
    return st;
}

kiln_status kn_cache_device_fields(const kiln_session_options *o, kn_cache_key *k) {
    /* The CPU runs every node no other provider takes, so its fingerprint is always in. */
    KN_TRY(cpu_fields(k));
    /* Device providers the options name: device.<provider>.<field> from the backend's
     * fingerprint of the device the options select. A provider this build or machine cannot run
     * gets "available=no" (its nodes then run on a later provider: a different compiled result). */
    for (int i = 0; o && i < o->n_providers; i++) {
        const char *name = o->providers[i].name;
        if (!name || !strcmp(name, "cpu")) continue;
        KN_TRY(provider_fields(&o->providers[i], k));
    }
    const char *env = getenv("KILN_CACHE_FAKE_DEVICE");
    if (env && *env) KN_TRY(apply_fake(k, env));
    pthread_mutex_lock(&kn_fake_mu);
    kiln_status st = kn_fake_device ? apply_fake(k, kn_fake_device) : KILN_OK;
    pthread_mutex_unlock(&kn_fake_mu);
    return st;
}

/* The provider registry, provider options, the CPU backend behind the backend interface, and
 * the per-session runtime (one instance per provider). */
#include "backend/backend.h"
#include "exec/memplan.h"

#include "backend/cpu/const_cache.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/sgemm_bf16.h"
#include "util/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ the CPU backend */

static int cpu_available(const char **reason) {
    if (reason) *reason = NULL;
    return 1;
}
static size_t cpu_device_count(void) { return 1; }
static const char *cpu_device_description(size_t i) { return kiln_device_description("cpu", i); }

/* The state holds what kernels derive once per session from constants (packed weights), and the
 * precision: fp32, or bf16 where the CPU has AVX512_BF16 (refused here otherwise: sgemm_bf16.h). */
static kiln_status cpu_init(const kn_backend_config *cfg, void **state_out) {
    *state_out = NULL;
    const bool bf16 = cfg && cfg->precision == KN_PRECISION_BF16;
    KN_TRY(kn_cpu_isa_check()); /* KILN_CPU_ISA named a level this CPU or build lacks */
    if (cfg) KN_TRY(kn_cpu_precision_check(cfg->precision, bf16 && kn_bf16_cpu_usable()));
    KN_TRY(kn_cpu_state_create((kn_cpu_state **)state_out));
    kn_cpu_state_set_bf16(*state_out, bf16);
    if (bf16) kn_log(KILN_LOG_INFO, "provider 'cpu': matrix products in bf16 with fp32 accumulation (AVX512_BF16)");
    return KILN_OK;
}
static void cpu_destroy(void *state) { kn_cpu_state_destroy(state); }

static const void *cpu_select(void *state, const kn_node *n, const kn_type *const *in, int n_in, char *why,
                              size_t cap) {
    (void)state;
    return kn_cpu_find(n, in, n_in, why, cap);
}

static bool cpu_overwrites(const void *kernel) {
    return (((const kn_cpu_kernel *)kernel)->flags & KN_KERNEL_OVERWRITES) != 0;
}

static kn_params_fn cpu_kernel_params(const void *kernel, size_t *bytes) {
    const kn_cpu_kernel *k = kernel;
    *bytes = k->params_bytes;
    return k->prepare;
}

bool kn_cpu_node_wraps(void *state, const kn_node *n) { return kn_cpu_state_bf16(state) && kn_bgemm_node(n); }

static kiln_status cpu_run(void *state, const void *kernel, kn_kernel_ctx *c) {
    if (kn_cpu_node_wraps(state, c->node)) {
        /* precision=bf16: this node's GEMM calls run in bf16 */
        kn_bgemm_scope scope;
        kn_bgemm_enter(state, &scope);
        kiln_status st = ((const kn_cpu_kernel *)kernel)->run(c);
        kn_bgemm_leave(&scope);
        return st;
    }
    return ((const kn_cpu_kernel *)kernel)->run(c);
}

const kn_backend_ops kn_backend_cpu = {
    .name = "cpu",
    .device = KN_DEVICE_HOST,
    .available = cpu_available,
    .device_count = cpu_device_count,
    .device_description = cpu_device_description,
    .init = cpu_init,
    .destroy = cpu_destroy,
    .select = cpu_select,
    .overwrites = cpu_overwrites,
    .run = cpu_run,
    .kernel_params = cpu_kernel_params,
};

/* ------------------------------------------------------------------ registry */

static const kn_backend_ops *const kn_backends[] = {
    &kn_backend_cpu,
#ifdef KILN_HAVE_CUDA
    &kn_backend_cuda,
#endif
};

int kn_backend_count(void) { return (int)(sizeof kn_backends / sizeof kn_backends[0]); }
const kn_backend_ops *kn_backend_at(int i) { return i >= 0 && i < kn_backend_count() ? kn_backends[i] : NULL; }

const kn_backend_ops *kn_backend_find(const char *name) {
    for (int i = 0; name && i < kn_backend_count(); i++)
        if (!strcmp(kn_backends[i]->name, name)) return kn_backends[i];
    return NULL;
}

bool kn_backend_supports(const char *provider, const kn_node *n, const kn_type *const *in, int n_in, char *why,
                         size_t cap) {
    const kn_backend_ops *b = kn_backend_find(provider);
    if (!b) {
        snprintf(why, cap, "provider '%s' is not in this build", provider ? provider : "(null)");
        return false;
    }
    return b->select(NULL, n, in, n_in, why, cap) != NULL;
}

/* ------------------------------------------------------------------ options */

static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

kiln_status kn_backend_parse_config(const kn_provider_request *req, kn_backend_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->precision = KN_PRECISION_FP32;
    cfg->graphs = -1;
    /* measured algorithms by default: paid once per shape, kept in the compiled file; cuDNN's
     * heuristic picks ran efficientnet_b0 5x slower on an H200 */
    cfg->exhaustive = true;
    /* built in the background (cuda_conv_graph.c), so the first run does not wait for cuDNN's
     * compiler: YOLOv8s b1 fp16 1.01 -> 0.75 ms on an H200 */
    cfg->conv_graph = true;
    for (int i = 0; i < req->n_options; i++) {
        const char *k = req->keys[i], *v = req->values[i];
        int64_t x;
        if (!strcmp(k, "device_id")) {
            if (!parse_int(v, 0, 1023, &x)) goto bad;
            cfg->device_id = (int)x;
        } else if (!strcmp(k, "precision")) {
            if (!strcmp(v, "fp32")) cfg->precision = KN_PRECISION_FP32;
            else if (!strcmp(v, "tf32")) cfg->precision = KN_PRECISION_TF32;
            else if (!strcmp(v, "fp16")) cfg->precision = KN_PRECISION_FP16;
            else if (!strcmp(v, "bf16")) cfg->precision = KN_PRECISION_BF16;
            else
                return kn_error(KILN_ERR_INVALID_ARGUMENT,
                                "provider '%s': precision '%s' is not one of fp32, tf32, fp16, bf16", req->name, v);
        } else if (!strcmp(k, "strict")) {
            if (!strcmp(v, "1") || !strcmp(v, "true")) cfg->strict = true;
            else if (!strcmp(v, "0") || !strcmp(v, "false")) cfg->strict = false;
            else goto bad;
        } else if (!strcmp(k, "workspace_mb")) {
            if (!parse_int(v, 0, 1 << 20, &x)) goto bad;
            cfg->workspace_mb = x;
        } else if (!strcmp(k, "graphs")) {
            if (!strcmp(v, "1") || !strcmp(v, "true")) cfg->graphs = 1;
            else if (!strcmp(v, "0") || !strcmp(v, "false")) cfg->graphs = 0;
            else goto bad;
        } else if (!strcmp(k, "conv_graph")) {
            if (!strcmp(v, "1") || !strcmp(v, "true")) cfg->conv_graph = true;
            else if (!strcmp(v, "0") || !strcmp(v, "false")) cfg->conv_graph = false;
            else goto bad;
        } else if (!strcmp(k, "activations")) {
            if (!strcmp(v, "fp32")) cfg->half_activations = false, cfg->fp32_activations = true;
            else if (!strcmp(v, "half")) cfg->half_activations = true, cfg->fp32_activations = false;
            else
                return kn_error(KILN_ERR_INVALID_ARGUMENT, "provider '%s': activations '%s' is not one of fp32, half",
                                req->name, v);
        } else if (!strcmp(k, "tuning")) {
            if (!strcmp(v, "heuristic")) cfg->exhaustive = false;
            else if (!strcmp(v, "exhaustive")) cfg->exhaustive = true;
            else
                return kn_error(KILN_ERR_INVALID_ARGUMENT,
                                "provider '%s': tuning '%s' is not one of heuristic, exhaustive", req->name, v);
        } else {
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "provider '%s' has no option '%s'", req->name, k);
        }
        continue;
    bad:
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "provider '%s': option %s='%s' is not a valid value",
                        req->name, k, v);
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ runtime */

static const char *no_device_prefix(const char *name) {
    return !strcmp(name, "cuda") ? "no CUDA device" : "provider not usable";
}

void kn_runtime_prepare(const kiln_session_options *o) {
    for (int i = 0; i < o->n_providers; i++) {
        const kn_backend_ops *ops = kn_backend_find(o->providers[i].name);
        kn_backend_config cfg;
        if (!ops || !ops->prepare) continue;
        if (kn_backend_parse_config(&o->providers[i], &cfg) == KILN_OK) ops->prepare(cfg.device_id);
        kn_clear_error();
    }
}

kiln_status kn_runtime_create(const kiln_session_options *o, kn_runtime **out) {
    *out = NULL;
    kn_runtime *rt = calloc(1, sizeof *rt);
    if (!rt) return KN_OOM();
    if (pthread_mutex_init(&rt->const_mu, NULL) != 0) {
        free(rt);
        return KN_OOM();
    }
    rt->cpu = -1;
    kiln_status st = KILN_OK;
    for (int i = 0; i < o->n_providers && st == KILN_OK; i++) {
        const kn_provider_request *req = &o->providers[i];
        kn_backend_config cfg;
        st = kn_backend_parse_config(req, &cfg);
        if (st != KILN_OK) break;
        if (cfg.half_activations && cfg.precision != KN_PRECISION_FP16 && cfg.precision != KN_PRECISION_BF16)
            kn_log(KILN_LOG_WARNING, "provider '%s': activations=half has no effect without precision fp16 or bf16",
                   req->name);
        else if (cfg.half_activations && o->opt_level < 3)
            kn_log(KILN_LOG_WARNING, "provider '%s': activations=half takes effect at optimisation level 3 (this session: %d)",
                   req->name, o->opt_level);
        const kn_backend_ops *ops = kn_backend_find(req->name);
        const char *reason = NULL;
        if (!ops) reason = !strcmp(req->name, "cuda") ? "this build of kiln has no CUDA backend" : "unknown provider";
        else if (!ops->available(&reason) && !reason) reason = "unavailable";
        void *state = NULL;
        if (!reason) {
            st = ops->init(&cfg, &state);
            if (st != KILN_OK) {
                /* keep the message: it is the reason when no later provider can take over */
                static _Thread_local char msg[1024];
                snprintf(msg, sizeof msg, "%s", kiln_last_error());
                reason = msg;
                st = KILN_OK;
            }
        }
        if (reason) {
            if (i + 1 < o->n_providers) {
                kn_log(KILN_LOG_INFO, "provider '%s' is not used: %s", req->name, reason);
                continue;
            }
            st = kn_error(KILN_ERR_NO_DEVICE, "%s: %s%s", no_device_prefix(req->name), reason,
                          !strcmp(req->name, "cpu") ? "" : " (list 'cpu' after it to fall back)");
            break;
        }
        kn_backend *b = &rt->backends[rt->n_backends];
        b->ops = ops;
        b->state = state;
        b->cfg = cfg;
        b->listed = true;
        if (ops == &kn_backend_cpu) rt->cpu = rt->n_backends;
        rt->n_backends++;
    }
    if (st == KILN_OK && rt->cpu < 0) {
        /* always there for shape computations and control-flow bodies; listed only by default */
        kn_backend *b = &rt->backends[rt->n_backends];
        memset(b, 0, sizeof *b);
        b->ops = &kn_backend_cpu;
        b->listed = o->n_providers == 0;
        st = cpu_init(&b->cfg, &b->state);
        if (st == KILN_OK) rt->cpu = rt->n_backends++;
    }
    if (st != KILN_OK) {
        kn_runtime_destroy(rt);
        return st;
    }
    *out = rt;
    return KILN_OK;
}

void kn_runtime_destroy(kn_runtime *rt) {
    if (!rt) return;
    for (int v = 0; v < rt->n_const_dev; v++) kn_tensor_free(rt->const_dev[v]);
    free(rt->const_dev);
    for (int i = 0; i < rt->n_body_const; i++) kn_tensor_free(rt->body_const_dev[i]);
    free(rt->body_const_dev);
    free(rt->body_const_host);
    kn_memplan_free(rt->memplan);
    for (int i = 0; i < KN_MEMPLAN_SHAPED; i++) kn_memplan_free(rt->shaped[i]);
    free(rt->arena);
    for (int i = 0; i < rt->n_backends; i++)
        if (rt->backends[i].ops && rt->backends[i].ops->destroy) rt->backends[i].ops->destroy(rt->backends[i].state);
    pthread_mutex_destroy(&rt->const_mu);
    free(rt);
}

static kiln_status const_on_locked(kn_runtime *rt, int b, int v, const kn_tensor *host, kn_tensor **out) {
    const kn_backend *be = &rt->backends[b];
    if (!rt->main || v < 0 || v >= rt->main->n_values) return KN_INTERNAL("constant outside the main graph");
    if (rt->n_const_dev < rt->main->n_values) {
        kn_tensor **p = realloc(rt->const_dev, sizeof *p * (size_t)rt->main->n_values);
        if (!p) return KN_OOM();
        memset(p + rt->n_const_dev, 0, sizeof *p * (size_t)(rt->main->n_values - rt->n_const_dev));
        rt->const_dev = p;
        rt->n_const_dev = rt->main->n_values;
    }
    if (!rt->const_dev[v]) KN_TRY(be->ops->upload(be->state, host, true, &rt->const_dev[v]));
    *out = rt->const_dev[v];
    return KILN_OK;
}

kiln_status kn_runtime_const_on(kn_runtime *rt, int b, int v, const kn_tensor *host, kn_tensor **out) {
    *out = NULL;
    pthread_mutex_lock(&rt->const_mu);
    kiln_status st = const_on_locked(rt, b, v, host, out);
    pthread_mutex_unlock(&rt->const_mu);
    return st;
}

static kiln_status body_const_on_locked(kn_runtime *rt, int b, const kn_tensor *host, kn_tensor **out) {
    const kn_backend *be = &rt->backends[b];
    for (int i = 0; i < rt->n_body_const; i++)
        if (rt->body_const_host[i] == host && rt->body_const_dev[i]->device == be->ops->device) {
            *out = rt->body_const_dev[i];
            return KILN_OK;
        }
    if (rt->n_body_const == rt->cap_body_const) {
        int cap = rt->cap_body_const ? rt->cap_body_const * 2 : 16;
        const kn_tensor **h = realloc(rt->body_const_host, sizeof *h * (size_t)cap);
        if (!h) return KN_OOM();
        rt->body_const_host = h;
        kn_tensor **d = realloc(rt->body_const_dev, sizeof *d * (size_t)cap);
        if (!d) return KN_OOM();
        rt->body_const_dev = d;
        rt->cap_body_const = cap;
    }
    kn_tensor *t = NULL;
    KN_TRY(be->ops->upload(be->state, host, true, &t));
    rt->body_const_host[rt->n_body_const] = host;
    rt->body_const_dev[rt->n_body_const++] = t;
    *out = t;
    return KILN_OK;
}

kiln_status kn_runtime_body_const_on(kn_runtime *rt, int b, const kn_tensor *host, kn_tensor **out) {
    *out = NULL;
    pthread_mutex_lock(&rt->const_mu);
    kiln_status st = body_const_on_locked(rt, b, host, out);
    pthread_mutex_unlock(&rt->const_mu);
    return st;
}

/* CPU kernels of the random family. Draws come from MT19937 with numpy's conversions (rng.h), in
 * the order numpy's RandomState would make them, so a node with a 'seed' produces what the ONNX
 * reference implementation produces for that seed, and the same values on every run. Without a
 * seed each run draws a fresh stream. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The family's attributes, read once (their prepare hook) */
typedef struct random_prm {
    bool has_seed, normal;
    float seed;
    double mul, add;      /* scale and mean (Normal), or high - low and low (Uniform) */
    int64_t sample_size;  /* Multinomial */
    kiln_dtype dtype;     /* Multinomial's output */
} random_prm;

static kiln_status random_prepare(const kn_node *n, void *params) {
    random_prm *p = params;
    memset(p, 0, sizeof *p);
    const kn_attr *s = kn_node_attr(n, "seed");
    p->has_seed = s != NULL;
    p->seed = s ? (s->type == KN_ATTR_INT ? (float)s->i : s->f) : 0.0f;
    p->normal = strstr(n->op_type, "Normal") != NULL;
    if (p->normal) {
        p->mul = kn_attr_float(n, "scale", 1.0f);
        p->add = kn_attr_float(n, "mean", 0.0f);
    } else {
        double hi = kn_attr_float(n, "high", 1.0f), lo = kn_attr_float(n, "low", 0.0f);
        p->mul = hi - lo;
        p->add = lo;
    }
    p->sample_size = kn_attr_int(n, "sample_size", 1);
    p->dtype = (kiln_dtype)kn_attr_int(n, "dtype", KILN_DTYPE_INT32);
    return KILN_OK;
}

static kn_rng *rng_for(const random_prm *p) {
    kn_rng *r = malloc(sizeof *r);
    if (!r) return NULL;
    kn_rng_seed_attr(r, p->has_seed, p->seed);
    return r;
}

/* Writes low + (high - low) * u (or mean + scale * z) in the output's own precision, as numpy
 * scales the array after casting it. */
static void store_affine(kn_tensor *y, int64_t i, double v, double mul, double add) {
    switch (y->dtype) {
    case KILN_DTYPE_FLOAT: ((float *)y->data)[i] = (float)v * (float)mul + (float)add; break;
    case KILN_DTYPE_DOUBLE: ((double *)y->data)[i] = v * mul + add; break;
    default: kn_tensor_set_f64(y, i, (double)((float)v * (float)mul + (float)add)); break;
    }
}

static kiln_status run_random(kn_kernel_ctx *c) {
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    if (!kn_dtype_is_float(y->dtype))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "output element type %s", kiln_dtype_name(y->dtype));
    KN_CTX_PRM(c, random_prepare, random_prm, prm);
    bool normal = prm->normal;
    double mul = prm->mul, add = prm->add;
    kn_rng *r = rng_for(prm);
    if (!r) return KN_OOM();
    int64_t n = kn_tensor_count(y);
    for (int64_t i = 0; i < n; i++) store_affine(y, i, normal ? kn_rng_normal(r) : kn_rng_uniform(r), mul, add);
    free(r);
    return KILN_OK;
}

static kiln_status run_bernoulli(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    KN_CTX_PRM(c, random_prepare, random_prm, prm);
    kn_rng *r = rng_for(prm);
    if (!r) return KN_OOM();
    int64_t n = kn_tensor_count(x);
    kiln_status st = KILN_OK;
    for (int64_t i = 0; i < n; i++) {
        double p = kn_tensor_get_f64(x, i);
        if (!(p >= 0 && p <= 1)) {
            st = kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "probability %g at index %lld is outside [0, 1]", p,
                                 (long long)i);
            break;
        }
        kn_tensor_set_f64(y, i, kn_rng_bernoulli(r, p));
    }
    free(r);
    return st;
}

/* Multinomial: each row of input holds unnormalised log-probabilities; each sample is the first
 * class whose cumulative probability exceeds a uniform draw. */
static kiln_status run_multinomial(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    if (x->rank != 2) return kn_kernel_error(c, KILN_ERR_SHAPE, "input must be [batch_size, class_size]");
    KN_CTX_PRM(c, random_prepare, random_prm, prm);
    int64_t B = x->dims[0], K = x->dims[1], S = prm->sample_size;
    kiln_dtype dt = prm->dtype;
    int64_t od[2] = {B, S};
    kn_tensor *y;
    KN_TRY(kn_ctx_output(c, 0, dt, 2, od, &y));
    if (B * S == 0) return KILN_OK;
    if (K == 0) return kn_kernel_error(c, KILN_ERR_SHAPE, "class_size is 0: there is nothing to sample");
    double *cum = malloc((size_t)K * sizeof *cum);
    kn_rng *r = rng_for(prm);
    if (!cum || !r) {
        free(cum);
        free(r);
        return KN_OOM();
    }
    for (int64_t b = 0; b < B; b++) {
        double mx = -INFINITY;
        for (int64_t k = 0; k < K; k++) mx = fmax(mx, kn_tensor_get_f64(x, b * K + k));
        double acc = 0;
        for (int64_t k = 0; k < K; k++) {
            double v = kn_tensor_get_f64(x, b * K + k);
            acc += isfinite(mx) ? exp(v - mx) : 1.0;
            cum[k] = acc;
        }
        for (int64_t s = 0; s < S; s++) {
            double u = kn_rng_uniform(r) * acc;
            int64_t k = 0;
            while (k < K - 1 && cum[k] <= u) k++;
            kn_tensor_set_i64(y, b * S + s, k);
        }
    }
    free(cum);
    free(r);
    return KILN_OK;
}

const kn_cpu_kernel kn_cpu_random[] = {
    {"", "RandomUniform", run_random, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(random_prepare, random_prm)},
    {"", "RandomNormal", run_random, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(random_prepare, random_prm)},
    {"", "RandomUniformLike", run_random, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(random_prepare, random_prm)},
    {"", "RandomNormalLike", run_random, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(random_prepare, random_prm)},
    {"", "Bernoulli", run_bernoulli, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(random_prepare, random_prm)},
    {"", "Multinomial", run_multinomial, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(random_prepare, random_prm)},
    {0},
};

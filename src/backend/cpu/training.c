/* CPU kernels of the training family: Adagrad, Adam, Momentum (one step of the optimiser for
 * each parameter tensor). Arithmetic in double, rounded once to each output's type. */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <string.h>

#define TRAINING "ai.onnx.preview.training"

static double get(const kn_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_DOUBLE ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
}
static void put(kn_tensor *t, int64_t i, double v) {
    if (t->dtype == KILN_DTYPE_DOUBLE) ((double *)t->data)[i] = v;
    else ((float *)t->data)[i] = (float)v;
}

/* R and T, and the parameter count n for `groups` tensors per parameter. */
static kiln_status common(kn_kernel_ctx *c, int groups, double *r, int64_t *t, int *n) {
    int rest = c->n_inputs - 2;
    if (rest <= 0 || rest % groups) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "bad input count %d", c->n_inputs);
    *n = rest / groups;
    const kn_tensor *R = c->in[0], *T = c->in[1];
    if (kn_tensor_count(R) != 1 || kn_tensor_count(T) != 1)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "R and T must be scalars");
    *r = kn_tensor_get_f64(R, 0);
    *t = kn_tensor_get_i64(T, 0);
    for (int i = 0; i < *n; i++)
        for (int g = 1; g < groups; g++)
            if (kn_tensor_count(c->in[2 + g * *n + i]) != kn_tensor_count(c->in[2 + i]))
                return kn_kernel_error(c, KILN_ERR_SHAPE, "input %d does not have the shape of X%d", 2 + g * *n + i, i + 1);
    return KILN_OK;
}

static kiln_status run_adagrad(kn_kernel_ctx *c) {
    double r = 0;
    int64_t t = 0;
    int n = 0;
    KN_TRY(common(c, 3, &r, &t, &n));
    double decay = kn_attr_float(c->node, "decay_factor", 0.0f);
    double eps = kn_attr_float(c->node, "epsilon", 1e-6f);
    double norm = kn_attr_float(c->node, "norm_coefficient", 0.0f);
    double rate = r / (1.0 + (double)t * decay);
    for (int p = 0; p < n; p++) {
        const kn_tensor *X = c->in[2 + p], *G = c->in[2 + n + p], *H = c->in[2 + 2 * n + p];
        kn_tensor *Xo = c->out[p], *Ho = c->out[n + p];
        int64_t cnt = kn_tensor_count(X);
        for (int64_t i = 0; i < cnt; i++) {
            double x = get(X, i), g = norm * x + get(G, i);
            double h = get(H, i) + g * g;
            put(Ho, i, h);
            put(Xo, i, x - rate * g / (sqrt(h) + eps));
        }
    }
    return KILN_OK;
}

static kiln_status run_adam(kn_kernel_ctx *c) {
    double r = 0;
    int64_t t = 0;
    int n = 0;
    KN_TRY(common(c, 4, &r, &t, &n));
    double alpha = kn_attr_float(c->node, "alpha", 0.9f), beta = kn_attr_float(c->node, "beta", 0.999f);
    double eps = kn_attr_float(c->node, "epsilon", 1e-6f);
    double norm = kn_attr_float(c->node, "norm_coefficient", 0.0f);
    double post = kn_attr_float(c->node, "norm_coefficient_post", 0.0f);
    /* bias correction of the moments from the second step on */
    double rate = t > 0 ? r * sqrt(1.0 - pow(beta, (double)t)) / (1.0 - pow(alpha, (double)t)) : r;
    for (int p = 0; p < n; p++) {
        const kn_tensor *X = c->in[2 + p], *G = c->in[2 + n + p], *V = c->in[2 + 2 * n + p], *H = c->in[2 + 3 * n + p];
        kn_tensor *Xo = c->out[p], *Vo = c->out[n + p], *Ho = c->out[2 * n + p];
        int64_t cnt = kn_tensor_count(X);
        for (int64_t i = 0; i < cnt; i++) {
            double x = get(X, i), g = norm * x + get(G, i);
            double v = alpha * get(V, i) + (1.0 - alpha) * g;
            double h = beta * get(H, i) + (1.0 - beta) * g * g;
            double xn = x - rate * (v / (sqrt(h) + eps));
            put(Vo, i, v);
            put(Ho, i, h);
            put(Xo, i, (1.0 - post) * xn);
        }
    }
    return KILN_OK;
}

static kiln_status run_momentum(kn_kernel_ctx *c) {
    double r = 0;
    int64_t t = 0;
    int n = 0;
    KN_TRY(common(c, 3, &r, &t, &n));
    const char *mode = kn_attr_string(c->node, "mode", "standard");
    bool nesterov = !strcmp(mode, "nesterov");
    if (!nesterov && strcmp(mode, "standard"))
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "mode '%s' is neither standard nor nesterov", mode);
    double alpha = kn_attr_float(c->node, "alpha", 0.0f), beta = kn_attr_float(c->node, "beta", 0.0f);
    double norm = kn_attr_float(c->node, "norm_coefficient", 0.0f);
    double b = t > 0 ? beta : 1.0; /* the first step takes the whole gradient */
    for (int p = 0; p < n; p++) {
        const kn_tensor *X = c->in[2 + p], *G = c->in[2 + n + p], *V = c->in[2 + 2 * n + p];
        kn_tensor *Xo = c->out[p], *Vo = c->out[n + p];
        int64_t cnt = kn_tensor_count(X);
        for (int64_t i = 0; i < cnt; i++) {
            double x = get(X, i), g = norm * x + get(G, i);
            double v = alpha * get(V, i) + b * g;
            put(Vo, i, v);
            put(Xo, i, nesterov ? x - r * (g + alpha * v) : x - r * v);
        }
    }
    return KILN_OK;
}

const kn_cpu_kernel kn_cpu_training[] = {
    {TRAINING, "Adagrad", run_adagrad, NULL, KN_KERNEL_OVERWRITES},
    {TRAINING, "Adam", run_adam, NULL, KN_KERNEL_OVERWRITES},
    {TRAINING, "Momentum", run_momentum, NULL, KN_KERNEL_OVERWRITES},
    {0},
};

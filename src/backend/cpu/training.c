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

/* The optimisers' attributes, read once (their prepare hook), with each operator's defaults */
typedef struct train_prm {
    double decay, eps, norm, post, alpha, beta;
    int nesterov; /* Momentum's mode: 0 standard, 1 nesterov, -1 neither (the call says why) */
} train_prm;

static kiln_status train_prepare(const kn_node *n, void *params) {
    train_prm *p = params;
    const bool adam = !strcmp(n->op_type, "Adam");
    p->decay = kn_attr_float(n, "decay_factor", 0.0f);
    p->eps = kn_attr_float(n, "epsilon", 1e-6f);
    p->norm = kn_attr_float(n, "norm_coefficient", 0.0f);
    p->post = kn_attr_float(n, "norm_coefficient_post", 0.0f);
    p->alpha = kn_attr_float(n, "alpha", adam ? 0.9f : 0.0f);
    p->beta = kn_attr_float(n, "beta", adam ? 0.999f : 0.0f);
    const char *mode = kn_attr_string(n, "mode", "standard");
    p->nesterov = !strcmp(mode, "nesterov") ? 1 : !strcmp(mode, "standard") ? 0 : -1;
    return KILN_OK;
}

static kiln_status run_adagrad(kn_kernel_ctx *c) {
    double r = 0;
    int64_t t = 0;
    int n = 0;
    KN_TRY(common(c, 3, &r, &t, &n));
    KN_CTX_PRM(c, train_prepare, train_prm, prm);
    double decay = prm->decay;
    double eps = prm->eps;
    double norm = prm->norm;
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
    KN_CTX_PRM(c, train_prepare, train_prm, prm);
    double alpha = prm->alpha, beta = prm->beta;
    double eps = prm->eps;
    double norm = prm->norm;
    double post = prm->post;
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
    KN_CTX_PRM(c, train_prepare, train_prm, prm);
    bool nesterov = prm->nesterov == 1;
    if (prm->nesterov < 0)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "mode '%s' is neither standard nor nesterov",
                               kn_attr_string(c->node, "mode", "standard"));
    double alpha = prm->alpha, beta = prm->beta;
    double norm = prm->norm;
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
    {TRAINING, "Adagrad", run_adagrad, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(train_prepare, train_prm)},
    {TRAINING, "Adam", run_adam, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(train_prepare, train_prm)},
    {TRAINING, "Momentum", run_momentum, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(train_prepare, train_prm)},
    {0},
};

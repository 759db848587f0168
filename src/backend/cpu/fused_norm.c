/* kiln.LayerNormalization and kiln.RMSNormalization on the CPU: one task per block of rows; each
 * row (the normalised trailing dims) is read twice while it sits in L1 (statistics, then output),
 * where the decomposed graph makes seven full passes through memory. Sums use 16 float lanes
 * (vectorised) folded into double at the end of the row. */
#include "backend/cpu/fused_impl.h"
#include "backend/cpu/nn_internal.h"

#include <math.h>
#include <string.h>

typedef struct norm_job {
    const float *x, *scale, *bias;
    float *y;
    int64_t d;
    float eps;
    bool rms;
} norm_job;

#define LANES 16

static double row_sum(const float *x, int64_t n) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += x[i + l];
    double s = 0;
    for (int l = 0; l < LANES; l++) s += acc[l];
    for (; i < n; i++) s += x[i];
    return s;
}

static double row_sq_dev(const float *x, int64_t n, float mean) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            float d = x[i + l] - mean;
            acc[l] += d * d;
        }
    double s = 0;
    for (int l = 0; l < LANES; l++) s += acc[l];
    for (; i < n; i++) {
        float d = x[i] - mean;
        s += d * d;
    }
    return s;
}

static void norm_rows(void *arg, int64_t r0, int64_t r1) {
    const norm_job *j = arg;
    const int64_t d = j->d;
    const float *restrict scale = j->scale, *restrict bias = j->bias;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict x = j->x + r * d;
        float *restrict y = j->y + r * d;
        float mean = j->rms ? 0.0f : (float)(row_sum(x, d) / (double)d);
        float var = (float)(row_sq_dev(x, d, mean) / (double)d);
        float inv = 1.0f / sqrtf(var + j->eps);
        if (scale && bias)
            for (int64_t i = 0; i < d; i++) y[i] = (x[i] - mean) * inv * scale[i] + bias[i];
        else if (scale)
            for (int64_t i = 0; i < d; i++) y[i] = (x[i] - mean) * inv * scale[i];
        else if (bias)
            for (int64_t i = 0; i < d; i++) y[i] = (x[i] - mean) * inv + bias[i];
        else
            for (int64_t i = 0; i < d; i++) y[i] = (x[i] - mean) * inv;
    }
}

static kiln_status run_norm(kn_kernel_ctx *c, bool rms) {
    const kn_tensor *X = c->in[0];
    const kn_tensor *S = c->n_inputs > 1 ? c->in[1] : NULL, *B = !rms && c->n_inputs > 2 ? c->in[2] : NULL;
    kn_norm_rows_prm local;
    const kn_norm_rows_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_norm_rows_prepare, &local, (const void **)&prm));
    int64_t axis = prm->axis;
    if (axis < 0) axis += X->rank;
    if (axis < 0 || axis >= X->rank) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis out of range");
    int64_t d = 1, rows = 1;
    for (int i = 0; i < X->rank; i++) {
        if (i < axis) rows *= X->dims[i];
        else d *= X->dims[i];
    }
    if ((S && kn_tensor_count(S) != d) || (B && kn_tensor_count(B) != d))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "scale and bias must hold the %lld normalised elements", (long long)d);
    if (d == 0 || rows == 0) return KILN_OK;
    norm_job j = {X->data, S ? S->data : NULL, B ? B->data : NULL, c->out[0]->data, d,
                  prm->eps, rms};
    kn_parallel_for(c->pool, rows, 8192 / d + 1, norm_rows, &j);
    return KILN_OK;
}

kiln_status kn_cpu_fused_layernorm(kn_kernel_ctx *c) { return run_norm(c, false); }
kiln_status kn_cpu_fused_rmsnorm(kn_kernel_ctx *c) { return run_norm(c, true); }

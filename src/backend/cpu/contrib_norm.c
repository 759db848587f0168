/* com.microsoft SkipLayerNormalization and SkipSimplifiedLayerNormalization, and ONNX Runtime's
 * SimplifiedLayerNormalization (RMS normalisation), on the CPU.
 *
 * Rows of the normalised length run threaded; each row is summed in 16 float lanes (the loops
 * vectorise), float16/bfloat16/double rows are converted to float first. */
#include "backend/cpu/contrib_impl.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/elementwise_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kn_tensor *opt_in(const kn_kernel_ctx *c, int i) { return i < c->n_inputs ? c->in[i] : NULL; }
static kn_tensor *opt_out(const kn_kernel_ctx *c, int i) { return i < c->n_outputs ? c->out[i] : NULL; }

static bool float_like(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16 || t == KILN_DTYPE_DOUBLE;
}

#define LANES 16

static float lane_sum(const float *x, int64_t n) {
    float acc[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += x[j + l];
    float s = 0.0f;
    for (; j < n; j++) s += x[j];
    for (int l = 0; l < LANES; l++) s += acc[l];
    return s;
}

static float lane_sq_dev(const float *x, int64_t n, float mean) {
    float acc[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++) {
            float d = x[j + l] - mean;
            acc[l] += d * d;
        }
    float s = 0.0f;
    for (; j < n; j++) s += (x[j] - mean) * (x[j] - mean);
    for (int l = 0; l < LANES; l++) s += acc[l];
    return s;
}

/* Row r (length n) of t as float: a pointer into t, or converted into buf. */
static const float *row_in(const kn_tensor *t, int64_t r, int64_t n, float *buf) {
    if (t->dtype == KILN_DTYPE_FLOAT) return (const float *)t->data + r * n;
    kn_ew_cast_n(t->dtype, (const char *)t->data + (size_t)(r * n) * kiln_dtype_size(t->dtype), KILN_DTYPE_FLOAT, buf, n,
                 0);
    return buf;
}

static void row_out(kn_tensor *t, int64_t r, int64_t n, const float *src) {
    if (t->dtype == KILN_DTYPE_FLOAT) {
        float *d = (float *)t->data + r * n;
        if (d != src) memcpy(d, src, sizeof(float) * (size_t)n);
        return;
    }
    kn_ew_cast_n(KILN_DTYPE_FLOAT, src, t->dtype, (char *)t->data + (size_t)(r * n) * kiln_dtype_size(t->dtype), n, 0);
}

static void stat_out(kn_tensor *t, int64_t r, float v) {
    if (!t) return;
    if (t->dtype == KILN_DTYPE_FLOAT) ((float *)t->data)[r] = v;
    else kn_tensor_set_f64(t, r, v);
}

typedef struct norm_job {
    const kn_tensor *x, *skip, *gamma, *beta, *bias;
    kn_tensor *y, *mean, *inv, *sum;
    int64_t n, skip_rows;
    float eps;
    bool rms;
    int failed;
} norm_job;

static void norm_range(void *arg, int64_t r0, int64_t r1) {
    norm_job *j = arg;
    const int64_t n = j->n;
    float *buf = malloc(sizeof(float) * (size_t)(6 * n + 1));
    if (!buf) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *xb = buf, *sb = buf + n, *s = buf + 2 * n, *gb = buf + 3 * n, *bb = buf + 4 * n, *yb = buf + 5 * n;
    const float *gamma = row_in(j->gamma, 0, n, gb);
    const float *beta = j->beta ? row_in(j->beta, 0, n, bb) : NULL;
    float *biasb = malloc(sizeof(float) * (size_t)(n + 1));
    const float *bias = j->bias && biasb ? row_in(j->bias, 0, n, biasb) : NULL;
    if (j->bias && !bias) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        goto done;
    }
    for (int64_t r = r0; r < r1; r++) {
        const float *x = row_in(j->x, r, n, xb);
        if (j->skip) {
            const float *sk = row_in(j->skip, j->skip_rows ? r % j->skip_rows : r, n, sb);
            if (bias)
                for (int64_t i = 0; i < n; i++) s[i] = x[i] + sk[i] + bias[i];
            else
                for (int64_t i = 0; i < n; i++) s[i] = x[i] + sk[i];
        } else {
            memcpy(s, x, sizeof(float) * (size_t)n);
        }
        if (j->sum) row_out(j->sum, r, n, s);
        float mean = 0.0f, inv;
        if (j->rms) {
            float ms = 0.0f;
            {
                float acc[LANES] = {0};
                int64_t i = 0;
                for (; i + LANES <= n; i += LANES)
                    for (int l = 0; l < LANES; l++) acc[l] += s[i + l] * s[i + l];
                for (; i < n; i++) ms += s[i] * s[i];
                for (int l = 0; l < LANES; l++) ms += acc[l];
            }
            inv = 1.0f / sqrtf(ms / (float)n + j->eps);
        } else {
            mean = lane_sum(s, n) / (float)n;
            inv = 1.0f / sqrtf(lane_sq_dev(s, n, mean) / (float)n + j->eps);
        }
        float *y = j->y->dtype == KILN_DTYPE_FLOAT ? (float *)j->y->data + r * n : yb;
        if (beta)
            for (int64_t i = 0; i < n; i++) y[i] = (s[i] - mean) * inv * gamma[i] + beta[i];
        else
            for (int64_t i = 0; i < n; i++) y[i] = (s[i] - mean) * inv * gamma[i];
        row_out(j->y, r, n, y);
        stat_out(j->mean, r, mean);
        stat_out(j->inv, r, inv);
    }
done:
    free(biasb);
    free(buf);
}

static kiln_status run_norm(kn_kernel_ctx *c, norm_job *j, const char *what) {
    if (!float_like(j->x->dtype) || j->gamma->dtype != j->x->dtype || (j->skip && j->skip->dtype != j->x->dtype) ||
        (j->beta && j->beta->dtype != j->x->dtype) || (j->bias && j->bias->dtype != j->x->dtype))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "%s: all inputs must share one float type", what);
    const int64_t total = kn_tensor_count(j->x), n = j->n;
    if (n <= 0 || total % n) return kn_kernel_error(c, KILN_ERR_SHAPE, "%s: bad normalised size %lld", what, (long long)n);
    if (kn_tensor_count(j->gamma) != n || (j->beta && kn_tensor_count(j->beta) != n) ||
        (j->bias && kn_tensor_count(j->bias) != n))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "%s: gamma, beta and bias must have %lld elements", what, (long long)n);
    if (j->skip) {
        int64_t ns = kn_tensor_count(j->skip);
        if (ns == 0 || ns % n || total % ns)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "%s: skip does not broadcast to the input", what);
        j->skip_rows = ns / n;
    }
    if (total == 0) return KILN_OK;
    kn_parallel_for(c->pool, total / n, (8192 + n - 1) / n, norm_range, j);
    if (j->failed) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return KILN_OK;
}

static kiln_status skip_norm(kn_kernel_ctx *c, bool rms) {
    norm_job j = {0};
    j.x = c->in[0];
    j.skip = c->in[1];
    j.gamma = c->in[2];
    /* SkipLayerNormalization: input, skip, gamma, beta, bias; the simplified one has no beta */
    j.beta = rms ? NULL : opt_in(c, 3);
    j.bias = opt_in(c, rms ? 3 : 4);
    j.y = c->out[0];
    j.mean = opt_out(c, 1);
    j.inv = opt_out(c, 2);
    j.sum = opt_out(c, 3);
    j.n = j.x->rank > 0 ? j.x->dims[j.x->rank - 1] : 1;
    KN_CTX_PRM(c, kn_cpu_ms_prepare, kn_cpu_ms_prm, prm);
    j.eps = prm->eps;
    j.rms = rms;
    return run_norm(c, &j, rms ? "SkipSimplifiedLayerNormalization" : "SkipLayerNormalization");
}

kiln_status kn_cpu_ms_skip_layernorm(kn_kernel_ctx *c) { return skip_norm(c, false); }
kiln_status kn_cpu_ms_skip_simplified_layernorm(kn_kernel_ctx *c) { return skip_norm(c, true); }

kiln_status kn_cpu_ms_simplified_layernorm(kn_kernel_ctx *c) {
    norm_job j = {0};
    j.x = c->in[0];
    j.gamma = c->in[1];
    j.y = c->out[0];
    j.inv = opt_out(c, 1);
    KN_CTX_PRM(c, kn_cpu_ms_prepare, kn_cpu_ms_prm, prm);
    int64_t axis = prm->axis;
    int r = j.x->rank;
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= (r > 0 ? r : 1))
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "axis %lld is out of range for rank %d", (long long)prm->axis, r);
    j.n = 1;
    for (int k = (int)axis; k < r; k++) j.n *= j.x->dims[k];
    j.eps = prm->eps;
    j.rms = true;
    return run_norm(c, &j, "SimplifiedLayerNormalization");
}

/* ------------------------------------------------------------------ EmbedLayerNormalization */

/* BERT's embedding layer: word + position (+ segment) embeddings, then layer normalisation;
 * mask_index is the number of ones in each row of the mask (0 without a mask, as in ONNX
 * Runtime). */
kiln_status kn_cpu_ms_embed_layernorm(kn_kernel_ctx *c) {
    const kn_tensor *ids = c->in[0], *seg = opt_in(c, 1), *we = c->in[2], *pe = c->in[3], *se = opt_in(c, 4),
                    *gamma = c->in[5], *beta = c->in[6], *mask = opt_in(c, 7), *pos = opt_in(c, 8);
    kn_tensor *Y = c->out[0], *MI = opt_out(c, 1), *Sum = opt_out(c, 2);
    if (ids->rank != 2 || we->rank != 2 || pe->rank != 2 || (se && se->rank != 2))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "input_ids must be (B, S) and the embeddings 2-D");
    const int64_t B = ids->dims[0], S = ids->dims[1], H = we->dims[1];
    if (pe->dims[1] != H || (se && se->dims[1] != H) || kn_tensor_count(gamma) != H || kn_tensor_count(beta) != H)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "embeddings, gamma and beta must all have hidden size %lld", (long long)H);
    if ((seg && kn_tensor_count(seg) != B * S) || (mask && kn_tensor_count(mask) != B * S))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "segment_ids and mask must be (%lld, %lld)", (long long)B, (long long)S);
    if (pos && kn_tensor_count(pos) != B * S && kn_tensor_count(pos) != S)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "position_ids must be (%lld, %lld) or (1, %lld)", (long long)B,
                               (long long)S, (long long)S);
    if (!float_like(we->dtype) || pe->dtype != we->dtype || (se && se->dtype != we->dtype) || gamma->dtype != we->dtype ||
        beta->dtype != we->dtype || !kn_dtype_is_int(ids->dtype))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "embeddings, gamma and beta must share a float type, ids be integers");
    KN_CTX_PRM(c, kn_cpu_ms_prepare, kn_cpu_ms_prm, prm);
    const float eps = prm->eps;
    float *buf = malloc(sizeof(float) * (size_t)(7 * H + 1));
    if (!buf) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    float *x = buf, *t = buf + H, *y = buf + 2 * H, *gb = buf + 3 * H, *bb = buf + 4 * H, *t2 = buf + 5 * H,
          *t3 = buf + 6 * H;
    const float *g = row_in(gamma, 0, H, gb), *bt = row_in(beta, 0, H, bb);
    kiln_status st = KILN_OK;
    for (int64_t b = 0; b < B && st == KILN_OK; b++)
        for (int64_t s = 0; s < S; s++) {
            int64_t r = b * S + s;
            int64_t wid = kn_tensor_get_i64(ids, r);
            int64_t pid = pos ? kn_tensor_get_i64(pos, kn_tensor_count(pos) == S ? s : r) : s;
            int64_t sid = seg ? kn_tensor_get_i64(seg, r) : 0;
            if (wid < 0 || wid >= we->dims[0] || pid < 0 || pid >= pe->dims[0] || (se && (sid < 0 || sid >= se->dims[0]))) {
                st = kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "row (%lld, %lld): word id %lld, position %lld or "
                                     "segment %lld is outside its embedding table", (long long)b, (long long)s,
                                     (long long)wid, (long long)pid, (long long)sid);
                break;
            }
            const float *w = row_in(we, wid, H, t), *p = row_in(pe, pid, H, t2);
            for (int64_t i = 0; i < H; i++) x[i] = w[i] + p[i];
            if (se) {
                const float *sg = row_in(se, sid, H, t3);
                for (int64_t i = 0; i < H; i++) x[i] += sg[i];
            }
            if (Sum) row_out(Sum, r, H, x);
            float mean = lane_sum(x, H) / (float)H;
            float inv = 1.0f / sqrtf(lane_sq_dev(x, H, mean) / (float)H + eps);
            for (int64_t i = 0; i < H; i++) y[i] = (x[i] - mean) * inv * g[i] + bt[i];
            row_out(Y, r, H, y);
        }
    if (st == KILN_OK && MI) {
        for (int64_t b = 0; b < B; b++) {
            int64_t n = 0;
            if (mask) {
                for (int64_t s = 0; s < S; s++) n += kn_tensor_get_i64(mask, b * S + s) != 0;
            }
            kn_tensor_set_i64(MI, b, n);
        }
    }
    free(buf);
    return st;
}

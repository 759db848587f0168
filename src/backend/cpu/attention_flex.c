/* ai.onnx.preview FlexAttention (opset 1) on the CPU:
 *   scores = (Q*sqrt(scale)) (K*sqrt(scale))^T in the input type, cast to the softmax precision;
 *   scores = score_mod(scores); probs = softmax(scores); probs = prob_mod(probs); Y = probs V.
 * The modifier subgraphs see the whole [B, Hq, L, S] tensor, so this computes it in full (the
 * operator is a preview; its modifiers are arbitrary graphs). Arithmetic is in double with the
 * values rounded to the input type and the softmax precision where the specification casts. */
#include "backend/cpu/attention_impl.h"
#include "backend/cpu/cpu.h"
#include "exec/exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double round_to(kiln_dtype t, double x) {
    if (t == KILN_DTYPE_FLOAT) return (double)(float)x;
    if (t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16) return (double)kn_attn_round(t, (float)x);
    return x;
}

/* Runs a modifier subgraph on t (dtype ct, shape dims) and copies its result back into vals. */
static kiln_status run_mod(kn_kernel_ctx *c, const kn_graph *g, const char *name, kiln_dtype ct, const int64_t *dims,
                           double *vals, int64_t n) {
    kn_tensor *in = NULL, *out = NULL;
    KN_TRY(kn_tensor_new(ct, 4, dims, &in));
    for (int64_t i = 0; i < n; i++) kn_tensor_set_f64(in, i, vals[i]);
    kiln_status st = kn_exec_subgraph(c, g, &in, 1, &out, 1);
    kn_tensor_free(in);
    if (st != KILN_OK) return st;
    if (out->kind != KN_VALUE_TENSOR || out->rank != 4 || memcmp(out->dims, dims, sizeof(int64_t) * 4) ||
        !kn_dtype_is_float(out->dtype)) {
        char d[128];
        st = kn_kernel_error(c, KILN_ERR_SHAPE, "%s must return a float tensor of the shape it was given, got %s", name,
                             kn_tensor_describe(out, d, sizeof d));
        kn_tensor_free(out);
        return st;
    }
    for (int64_t i = 0; i < n; i++) vals[i] = round_to(ct, kn_tensor_get_f64(out, i));
    kn_tensor_free(out);
    return KILN_OK;
}

kiln_status kn_cpu_flex_attention(kn_kernel_ctx *c) {
    const kn_tensor *Q = c->in[0], *K = c->in[1], *V = c->in[2];
    kn_tensor *Y = c->out[0];
    const kiln_dtype t = Q->dtype;
    if (!kn_dtype_is_float(t) || K->dtype != t || V->dtype != t)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "Q, K and V must share a float type");
    if (Q->rank != 4 || K->rank != 4 || V->rank != 4) return kn_kernel_error(c, KILN_ERR_SHAPE, "Q, K and V must be 4-D");
    const int64_t B = Q->dims[0], Hq = Q->dims[1], L = Q->dims[2], E = Q->dims[3];
    const int64_t Hkv = K->dims[1], S = K->dims[2], Ev = V->dims[3];
    if (K->dims[0] != B || V->dims[0] != B || K->dims[3] != E || V->dims[1] != Hkv || V->dims[2] != S || Hkv <= 0 ||
        Hq % Hkv)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "Q, K and V do not fit together");
    kn_attn_attrs local;
    const kn_attn_attrs *at;
    KN_TRY(kn_attn_attrs_of(c, &local, &at));
    double scale = at->has_scale ? (double)at->scale_raw : 1.0 / sqrt((double)E);
    int64_t smp = at->softmax_precision;
    kiln_dtype ct = smp ? (kiln_dtype)smp : (t == KILN_DTYPE_DOUBLE ? KILN_DTYPE_DOUBLE : KILN_DTYPE_FLOAT);
    if (ct != KILN_DTYPE_FLOAT && ct != KILN_DTYPE_DOUBLE && ct != KILN_DTYPE_FLOAT16 && ct != KILN_DTYPE_BFLOAT16)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "softmax_precision %lld is not a float type", (long long)smp);
    const double ss = round_to(t, sqrt((double)(float)scale));
    const int64_t group = Hq / Hkv, n = B * Hq * L * S;
    const int64_t dims[4] = {B, Hq, L, S};
    double *sc = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    double *qs = malloc(sizeof(double) * (size_t)(E > 0 ? E : 1));
    if (!sc || !qs) {
        free(sc);
        free(qs);
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory for the %lld scores", (long long)n);
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            int64_t kh = h / group;
            for (int64_t l = 0; l < L; l++) {
                for (int64_t e = 0; e < E; e++)
                    qs[e] = round_to(t, kn_tensor_get_f64(Q, ((b * Hq + h) * L + l) * E + e) * ss);
                for (int64_t s = 0; s < S; s++) {
                    double acc = 0.0;
                    for (int64_t e = 0; e < E; e++)
                        acc += qs[e] * round_to(t, kn_tensor_get_f64(K, ((b * Hkv + kh) * S + s) * E + e) * ss);
                    sc[((b * Hq + h) * L + l) * S + s] = round_to(ct, round_to(t, acc));
                }
            }
        }
    kiln_status st = KILN_OK;
    const kn_graph *score_mod = at->score_mod, *prob_mod = at->prob_mod;
    if (score_mod && (st = run_mod(c, score_mod, "score_mod", ct, dims, sc, n)) != KILN_OK) goto done;
    for (int64_t r = 0; r < B * Hq * L; r++) {
        double *row = sc + r * S, mx = -INFINITY, sum = 0.0;
        for (int64_t s = 0; s < S; s++) mx = row[s] > mx ? row[s] : mx;
        for (int64_t s = 0; s < S; s++) {
            row[s] = exp(row[s] - mx);
            sum += row[s];
        }
        for (int64_t s = 0; s < S; s++) row[s] = round_to(ct, row[s] / sum);
    }
    if (prob_mod && (st = run_mod(c, prob_mod, "prob_mod", ct, dims, sc, n)) != KILN_OK) goto done;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            int64_t kh = h / group;
            for (int64_t l = 0; l < L; l++) {
                const double *p = sc + ((b * Hq + h) * L + l) * S;
                for (int64_t e = 0; e < Ev; e++) {
                    double acc = 0.0;
                    for (int64_t s = 0; s < S; s++)
                        acc += p[s] * round_to(ct, kn_tensor_get_f64(V, ((b * Hkv + kh) * S + s) * Ev + e));
                    kn_tensor_set_f64(Y, ((b * Hq + h) * L + l) * Ev + e, round_to(ct, acc));
                }
            }
        }
done:
    free(sc);
    free(qs);
    return st;
}

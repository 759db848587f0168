/* Folds an inference-mode BatchNormalization, or a per-channel affine step written out as a Mul or
 * an Add/Sub of a constant, into the layer before it. BN computes y = (x - mean) * f + bias per
 * channel (axis 1), f = scale / sqrt(var + epsilon); when x is a linear layer's output whose
 * channel is axis 1, the factor goes into the weights and the shift into the bias:
 *   Conv           W [M, C/g, k..]: row m scaled by f[m]
 *   ConvTranspose  W [C, M/g, k..]: element (c, j) scaled by f[(c / (C/g)) * (M/g) + j]
 *   Gemm           Y [M, N], channel N: column n of op(B) scaled by f[n]; C must be [N]-like
 *   MatMul         only for a 2-D result with 2-D weights B [K, N] (channel N is then axis 1;
 *                  for a rank > 2 result BN's channel is not the weights' N): becomes a Gemm.
 * Every parameter must be constant, the layer's output read only by the BN, and the BN's mean and
 * variance outputs unused.
 *
 * Exporters that write BatchNormalization out (PaddlePaddle's: Conv without bias, then Add of a
 * [1, M, 1, 1] constant), or a scale as a Mul, leave the same per-channel step as an elementwise
 * node: a Conv/ConvTranspose output read only by a Mul by, an Add of, or a Sub of a constant that
 * varies along axis 1 alone (or not at all) folds the same way (f = the factor, or shift = the
 * addend), so the convolution keeps its bias and the fusions after it see it. */
#include "opt/pass.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool float_const(const kn_tensor *t) {
    return t && (t->dtype == KILN_DTYPE_FLOAT || t->dtype == KILN_DTYPE_DOUBLE);
}

/* f and shift (per channel) from BN's parameters; false when they are not usable. */
static bool bn_factors(const kn_opt_ctx *c, int bn, int64_t channels, double **f_out, double **shift_out) {
    const kn_node *n = &c->g->nodes[bn];
    const kn_tensor *p[4];
    for (int k = 0; k < 4; k++) {
        p[k] = kn_opt_const(c, kn_opt_input(c, bn, k + 1));
        if (!float_const(p[k]) || kn_tensor_count(p[k]) != channels || p[k]->rank != 1) return false;
    }
    double eps = kn_attr_float(n, "epsilon", 1e-5f);
    double *f = malloc(sizeof(double) * (size_t)channels * 2);
    if (!f) return false;
    double *shift = f + channels;
    for (int64_t m = 0; m < channels; m++) {
        double scale = kn_tensor_get_f64(p[0], m), bias = kn_tensor_get_f64(p[1], m);
        double mean = kn_tensor_get_f64(p[2], m), var = kn_tensor_get_f64(p[3], m);
        f[m] = scale / sqrt(var + eps);
        shift[m] = bias - mean * f[m];
    }
    *f_out = f;
    *shift_out = shift;
    return true;
}

static bool bn_is_inference(const kn_opt_ctx *c, int bn) {
    const kn_node *n = &c->g->nodes[bn];
    if (n->opset >= 14 && kn_attr_int(n, "training_mode", 0) != 0) return false;
    if (n->opset < 7 && kn_attr_int(n, "is_test", 0) == 0) return false;
    if (n->opset < 9 && kn_attr_int(n, "spatial", 1) != 1) return false;
    for (int o = 1; o < n->n_outputs; o++) {
        int v = n->outputs[o];
        if (v >= 0 && (kn_opt_n_consumers(c, v) > 0 || kn_opt_pinned(c, v))) return false;
    }
    return n->n_inputs >= 5;
}

static kn_tensor *clone_const(const kn_tensor *t) {
    kn_tensor *out = NULL;
    if (kn_tensor_clone(t, &out) != KILN_OK) {
        kn_clear_error();
        return NULL;
    }
    return out;
}

/* A new [channels] bias of `dtype`: old bias (or 0) * f + shift. */
static kn_tensor *new_bias(const kn_tensor *old, kiln_dtype dtype, int64_t channels, const double *f,
                           const double *shift, double old_scale) {
    kn_tensor *b = NULL;
    int64_t dims[1] = {channels};
    if (kn_tensor_new(dtype, 1, dims, &b) != KILN_OK) {
        kn_clear_error();
        return NULL;
    }
    int64_t n_old = old ? kn_tensor_count(old) : 0;
    for (int64_t m = 0; m < channels; m++) {
        double v = old ? kn_tensor_get_f64(old, n_old == 1 ? 0 : m) * old_scale : 0.0;
        kn_tensor_set_f64(b, m, v * f[m] + shift[m]);
    }
    return b;
}

/* Per-channel factors of node `op` (a Mul, Add or Sub with the layer's output x as one input and
 * a float constant that varies along axis 1 alone, or not at all, as the other; Sub: x first) for
 * M channels of an output of rank `rank`; false when it is none. */
static bool affine_factors(const kn_opt_ctx *c, int op, int x, int64_t M, int rank, double **f_out,
                           double **shift_out) {
    const bool mul = kn_opt_is(c, op, "Mul"), sub = kn_opt_is(c, op, "Sub");
    if (!mul && !sub && !kn_opt_is(c, op, "Add")) return false;
    const int other = kn_opt_other_input(c, op, x);
    if (other < 0 || (sub && kn_opt_input(c, op, 0) != x)) return false;
    const kn_tensor *t = kn_opt_const(c, other);
    if (!float_const(t) || t->rank > rank) return false;
    const int64_t n = kn_tensor_count(t);
    if (n != 1) {
        /* aligned to the output's last axes: axis 1 of the output is axis t->rank - (rank - 1) */
        const int ax = t->rank - (rank - 1);
        for (int d = 0; d < t->rank; d++)
            if (t->dims[d] != (d == ax ? M : 1)) return false;
    }
    double *f = malloc(sizeof(double) * (size_t)M * 2);
    if (!f) return false;
    double *shift = f + M;
    for (int64_t m = 0; m < M; m++) {
        const double v = kn_tensor_get_f64(t, n == 1 ? 0 : m);
        f[m] = mul ? v : 1.0;
        shift[m] = mul ? 0.0 : sub ? -v : v;
    }
    *f_out = f;
    *shift_out = shift;
    return true;
}

/* Folds BN (or the per-channel step `after`) into Conv/ConvTranspose. */
static kiln_status fold_conv(kn_opt_ctx *c, int layer, int bn, bool transpose, bool *done) {
    kn_graph *g = c->g;
    *done = false;
    const kn_tensor *W = kn_opt_const(c, kn_opt_input(c, layer, 1));
    int bv = kn_opt_input(c, layer, 2);
    const kn_tensor *B = bv >= 0 ? kn_opt_const(c, bv) : NULL;
    if (!float_const(W) || W->rank < 3 || (bv >= 0 && !float_const(B))) return KILN_OK;
    int64_t group = kn_attr_int(&g->nodes[layer], "group", 1);
    if (group < 1) return KILN_OK;
    int64_t M = transpose ? W->dims[1] * group : W->dims[0];
    if (transpose && W->dims[0] % group) return KILN_OK;
    if (B && kn_tensor_count(B) != M) return KILN_OK;
    const int y0 = g->nodes[layer].outputs[0], rank = g->values[y0].type.rank;
    double *f, *shift;
    if (kn_opt_is(c, bn, "BatchNormalization") ? !bn_factors(c, bn, M, &f, &shift)
                                                : rank < 3 || !affine_factors(c, bn, y0, M, rank, &f, &shift))
        return KILN_OK;
    kn_tensor *W2 = clone_const(W);
    kn_tensor *B2 = new_bias(B, W->dtype, M, f, shift, 1.0);
    if (!W2 || !B2) {
        kn_tensor_free(W2);
        kn_tensor_free(B2);
        free(f);
        return KN_OOM();
    }
    int64_t per = kn_tensor_count(W) / (W->dims[0] ? W->dims[0] : 1); /* elements per W row */
    int64_t inner = per / (W->dims[1] ? W->dims[1] : 1);               /* kernel elements */
    int64_t Cg = transpose ? W->dims[0] / group : 0, Mg = transpose ? W->dims[1] : 0;
    for (int64_t r = 0; r < W->dims[0]; r++)
        for (int64_t e = 0; e < per; e++) {
            int64_t m = transpose ? (r / Cg) * Mg + e / inner : r;
            int64_t idx = r * per + e;
            kn_tensor_set_f64(W2, idx, kn_tensor_get_f64(W2, idx) * f[m]);
        }
    free(f);
    int wv = kn_opt_new_const(c, "bn_folded_weight", W2);
    int nb = kn_opt_new_const(c, "bn_folded_bias", B2);
    if (wv < 0 || nb < 0) return KN_OOM();
    kn_node *n = &g->nodes[layer];
    int y = n->outputs[0], z = g->nodes[bn].outputs[0];
    if (!kn_opt_forward(c, z, y)) return KILN_OK; /* the new constants go unused */
    n = &g->nodes[layer];
    n->inputs[1] = wv;
    if (n->n_inputs >= 3) {
        n->inputs[2] = nb;
    } else {
        int *in = realloc(n->inputs, sizeof(int) * 3);
        if (!in) return KN_OOM();
        in[2] = nb;
        n->inputs = in;
        n->n_inputs = 3;
    }
    kn_opt_kill(c, bn);
    *done = true;
    return KILN_OK;
}

/* Folds into Gemm (with op(B) = B or B^T), or a 2-D MatMul which becomes a Gemm. */
static kiln_status fold_gemm(kn_opt_ctx *c, int layer, int bn, bool matmul, bool *done) {
    kn_graph *g = c->g;
    *done = false;
    const kn_node *n = &g->nodes[layer];
    int y = n->outputs[0];
    if (g->values[y].type.rank != 2) return KILN_OK;
    const kn_tensor *Bw = kn_opt_const(c, kn_opt_input(c, layer, 1));
    if (!float_const(Bw) || Bw->rank != 2) return KILN_OK;
    bool transB = !matmul && kn_attr_int(n, "transB", 0);
    int64_t N = transB ? Bw->dims[0] : Bw->dims[1];
    double alpha = matmul ? 1.0 : kn_attr_float(n, "alpha", 1.0f), beta = matmul ? 0.0 : kn_attr_float(n, "beta", 1.0f);
    int cv = matmul ? -1 : kn_opt_input(c, layer, 2);
    const kn_tensor *C = cv >= 0 ? kn_opt_const(c, cv) : NULL;
    if (cv >= 0) {
        /* C must be one value per output column: [N], [1, N] or a scalar */
        if (!float_const(C)) return KILN_OK;
        int64_t cc = kn_tensor_count(C);
        bool per_col = cc == 1 || (cc == N && C->dims[C->rank - 1] == N);
        if (!per_col) return KILN_OK;
    }
    if (matmul && kn_model_opset(c->model, "") < 7) return KILN_OK;
    double *f, *shift;
    if (!bn_factors(c, bn, N, &f, &shift)) return KILN_OK;
    kn_tensor *B2 = clone_const(Bw);
    kn_tensor *C2 = new_bias(C, Bw->dtype, N, f, shift, beta);
    if (!B2 || !C2) {
        kn_tensor_free(B2);
        kn_tensor_free(C2);
        free(f);
        return KN_OOM();
    }
    int64_t rows = Bw->dims[0], cols = Bw->dims[1];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++) {
            int64_t col = transB ? r : k;
            kn_tensor_set_f64(B2, r * cols + k, kn_tensor_get_f64(B2, r * cols + k) * f[col]);
        }
    free(f);
    int bv = kn_opt_new_const(c, "bn_folded_weight", B2);
    int nc = kn_opt_new_const(c, "bn_folded_bias", C2);
    if (bv < 0 || nc < 0) return KN_OOM();
    int a = kn_opt_input(c, layer, 0);
    int z = g->nodes[bn].outputs[0];
    kn_opt_proto p;
    kn_proto_init(&p, "", "Gemm");
    kn_proto_in(&p, a);
    kn_proto_in(&p, bv);
    kn_proto_in(&p, nc);
    kn_proto_out(&p, z);
    kn_proto_float(&p, "alpha", (float)alpha);
    kn_proto_float(&p, "beta", 1.0f);
    if (!matmul) {
        kn_proto_copy_attr(&p, c, layer, "transA");
        kn_proto_copy_attr(&p, c, layer, "transB");
    }
    int node;
    KN_TRY(kn_opt_emit(c, &p, layer, &node));
    if (node < 0) return KILN_OK;
    kn_opt_kill(c, layer);
    kn_opt_kill(c, bn);
    *done = true;
    return KILN_OK;
}

/* A Conv/ConvTranspose whose output only a Mul, Add or Sub reads: that node's other input decides
 * (affine_factors). */
static kiln_status fold_affine(kn_opt_ctx *c, int i) {
    kn_graph *g = c->g;
    for (int k = 0; k < 2 && k < g->nodes[i].n_inputs; k++) {
        int x = kn_opt_input(c, i, k), layer = kn_opt_producer(c, x);
        if (layer < 0 || kn_opt_only_consumer(c, x) != i || g->nodes[layer].n_outputs != 1) continue;
        const bool conv = kn_opt_is(c, layer, "Conv"), convt = kn_opt_is(c, layer, "ConvTranspose");
        if (!conv && !convt) continue;
        bool done = false;
        KN_TRY(fold_conv(c, layer, i, convt, &done));
        if (done) {
            kn_opt_note(c, kn_opt_is(c, i, "Mul") ? "Conv+Mul (per channel)" : "Conv+Add (per channel)");
            return kn_opt_refresh(c);
        }
    }
    return KILN_OK;
}

kiln_status kn_pass_fold_batchnorm(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        if (kn_opt_is(c, i, "Mul") || kn_opt_is(c, i, "Add") || kn_opt_is(c, i, "Sub")) {
            KN_TRY(fold_affine(c, i));
            continue;
        }
        if (!kn_opt_is(c, i, "BatchNormalization") || !bn_is_inference(c, i)) continue;
        int x = kn_opt_input(c, i, 0);
        int layer = kn_opt_producer(c, x);
        if (layer < 0 || kn_opt_only_consumer(c, x) != i || g->nodes[layer].n_outputs != 1) continue;
        bool done = false;
        if (kn_opt_is(c, layer, "Conv")) {
            KN_TRY(fold_conv(c, layer, i, false, &done));
            if (done) kn_opt_note(c, "Conv+BatchNormalization");
        } else if (kn_opt_is(c, layer, "ConvTranspose")) {
            KN_TRY(fold_conv(c, layer, i, true, &done));
            if (done) kn_opt_note(c, "ConvTranspose+BatchNormalization");
        } else if (kn_opt_is(c, layer, "Gemm")) {
            KN_TRY(fold_gemm(c, layer, i, false, &done));
            if (done) kn_opt_note(c, "Gemm+BatchNormalization");
        } else if (kn_opt_is(c, layer, "MatMul")) {
            KN_TRY(fold_gemm(c, layer, i, true, &done));
            if (done) kn_opt_note(c, "MatMul+BatchNormalization");
        }
        if (done) KN_TRY(kn_opt_refresh(c));
    }
    return KILN_OK;
}

/* Level 3, the CPU provider with precision=bf16 on AMX: a value between two convolutions is kept
 * in bfloat16.
 *
 * Under precision=bf16 every convolution rounds its input to bf16 (round to nearest even) before
 * its products read it, and a Relu or Clip commutes with that rounding. So a FusedConv output
 * whose only readers are such convolutions (in a ResNet bottleneck: the first convolution's
 * output, read only by the second, and the second's, read only by the third) can be stored in
 * bf16 by its producer, after its bias and activation, with the same results, and half the bytes
 * written and read; the block outputs, which a residual Add reads in fp32, stay fp32. OpenVINO
 * keeps its activations in bf16 throughout.
 *
 * What it marks: a live NCHW FusedConv without a residual, whose activation is none, Relu or Clip,
 * with constant 4-D float weights of 16 or more output channels, whose float output is not pinned
 * and is read only as input X of NCHW FusedConvs of group 1 with constant 4-D float weights of 16
 * or more input and output channels (the shapes whose products run on AMX's tiles in bf16,
 * src/backend/cpu/conv.c); the producer gets y_type = [16] (its output becomes bfloat16 when
 * types are inferred again). The CPU kernels read and write such values as they are on AMX
 * (conv_amx.c, sgemm_bf16.c) and convert them on any other route, so the mark is never wrong, only
 * slower there. KILN_CPU_BF16_VALUES=0 turns the pass off.
 *
 * With the provider option activations=half the block outputs are kept in bf16 too: a FusedConv
 * with a residual may be marked, and a reader may read the value as its residual Z (not also as
 * X). That is not exact (the residual is added as the rounded value, where fp32 added the exact
 * one), as OpenVINO's bf16 does; hence an option, as on CUDA. */
#include "opt/pass.h"

#include "backend/cpu/sgemm_bf16.h"

#include <stdlib.h>
#include <string.h>

static bool nchw(const kn_node *n) {
    bool nhwc = true;
    return kn_fused_conv_layout(n, &nhwc) && !nhwc;
}

/* input 1 of node i: constant float weights [M, C, kh, kw] with M >= 16 and C * kh * kw >= 16 */
static bool conv_weights(const kn_opt_ctx *c, int i, int64_t *C) {
    const int w = kn_opt_input(c, i, 1);
    const kn_tensor *t = w >= 0 ? kn_opt_const(c, w) : NULL;
    if (!t || t->dtype != KILN_DTYPE_FLOAT || t->rank != 4 || t->dims[0] < 16) return false;
    *C = t->dims[1];
    return t->dims[1] * t->dims[2] * t->dims[3] >= 16;
}

static bool group_one(const kn_node *n) { return kn_attr_int(n, "group", 1) == 1; }

/* node r reads v as its X only, as a convolution whose products run in bf16 on AMX; with
 * residuals (activations=half), or as its residual Z only */
static bool bf16_reader(const kn_opt_ctx *c, int r, int v, bool residuals) {
    const kn_node *n = &c->g->nodes[r];
    int64_t C = 0;
    if (!kn_opt_is_in(c, r, "kiln", "FusedConv") || !nchw(n) || !group_one(n) || !conv_weights(c, r, &C) || C < 16 ||
        n->n_outputs < 1)
        return false;
    const bool as_x = kn_opt_input(c, r, 0) == v, as_z = residuals && kn_opt_input(c, r, 3) == v;
    if (as_x == as_z) return false; /* neither, or both */
    for (int k = 1; k < n->n_inputs; k++)
        if (n->inputs[k] == v && !(k == 3 && as_z)) return false;
    const kn_type *y = &c->g->values[n->outputs[0]].type;
    return y->rank == 4 && y->dims[2].value > 0 && y->dims[3].value > 0 && y->dims[2].value * y->dims[3].value >= 16;
}

static bool bf16_writer(const kn_opt_ctx *c, int i, bool residuals) {
    const kn_node *n = &c->g->nodes[i];
    int64_t C = 0;
    if (!kn_opt_is_in(c, i, "kiln", "FusedConv") || !nchw(n) || !group_one(n) || kn_node_attr(n, "y_type") ||
        n->n_outputs != 1 || kn_opt_n_inputs(c, i) > (residuals ? 4 : 3) || !conv_weights(c, i, &C))
        return false;
    kn_act_spec a;
    char why[128];
    if (!kn_act_from_node(n, &a, why, sizeof why) ||
        (a.act != KN_ACT_NONE && a.act != KN_ACT_RELU && a.act != KN_ACT_CLIP))
        return false;
    const int x = kn_opt_input(c, i, 0), v = n->outputs[0];
    if (x < 0 || v < 0) return false;
    const kiln_dtype xt = c->g->values[x].type.dtype;
    const kn_type *y = &c->g->values[v].type;
    return (xt == KILN_DTYPE_FLOAT || xt == KILN_DTYPE_BFLOAT16) && y->kind == KN_TYPE_TENSOR &&
           y->dtype == KILN_DTYPE_FLOAT && y->rank == 4 && !kn_opt_pinned(c, v);
}

kiln_status kn_pass_cpu_bf16_values(kn_opt_ctx *c) {
    kn_backend_config cfg;
    const char *provider = kn_opt_first_provider(c, &cfg);
    const char *e = getenv("KILN_CPU_BF16_VALUES");
    if (!provider || strcmp(provider, "cpu") || cfg.precision != KN_PRECISION_BF16 || (e && !strcmp(e, "0")))
        return KILN_OK;
    /* (where the products do not run on AMX's tiles, the readers would convert the values back) */
    if (!kn_bf16_cpu_usable() || !kn_bgemm_amx()) return KILN_OK;
    /* activations=half: the block outputs too (written with a residual, read as one), which is not
     * exact: a residual Add then reads a rounded value */
    const bool residuals = cfg.half_activations;
    kn_graph *g = c->g;
    bool changed = false;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!bf16_writer(c, i, residuals)) continue;
        const int v = g->nodes[i].outputs[0];
        bool ok = c->cons_start[v + 1] > c->cons_start[v];
        for (int r = c->cons_start[v]; r < c->cons_start[v + 1] && ok; r++) ok = bf16_reader(c, c->cons[r], v, residuals);
        if (!ok) continue;
        const int64_t t = KILN_DTYPE_BFLOAT16;
        KN_TRY(kn_opt_set_ints(c, i, "y_type", &t, 1));
        kn_opt_note(c, "convolution output kept in bfloat16");
        changed = true;
    }
    return changed ? kn_opt_refresh(c) : KILN_OK;
}

/* CPU kernels: RNN, GRU, LSTM (every direction, layout, sequence_lens, clip, peepholes,
 * input_forget, activation lists with alpha/beta).
 *
 * Per direction: the input projection of all timesteps, X[T*B, I] * W^T + biases, is one GEMM
 * (kn_sgemm). The recurrence then adds H_{t-1} * R^T each step: for a small batch as rows of
 * axpy over a pre-transposed R (contiguous and vectorised), for a large one through kn_sgemm.
 * The two directions of a bidirectional layer run in parallel. Everything computes in float
 * (float16/bfloat16/double inputs are converted). Gate orders are ONNX's: LSTM i,o,f,c;
 * GRU z,r,h. */
#include "backend/cpu/const_cache.h"
#include "backend/cpu/nn_internal.h"
#include "backend/cpu/vec_math.h"
#include "backend/cpu/sgemm.h"
#include "exec/exec.h"
#include "ops/fused.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ activations */

typedef enum {
    ACT_SIGMOID, ACT_TANH, ACT_RELU, ACT_AFFINE, ACT_LEAKYRELU, ACT_THRESHOLDEDRELU,
    ACT_SCALEDTANH, ACT_HARDSIGMOID, ACT_ELU, ACT_SOFTSIGN, ACT_SOFTPLUS
} act_kind;

typedef kn_rnn_act act; /* kind: an act_kind */

static const struct {
    const char *name;
    act_kind kind;
    int uses_alpha, uses_beta;
    float alpha, beta; /* defaults */
} act_table[] = {
    {"sigmoid", ACT_SIGMOID, 0, 0, 0, 0},
    {"tanh", ACT_TANH, 0, 0, 0, 0},
    {"relu", ACT_RELU, 0, 0, 0, 0},
    {"affine", ACT_AFFINE, 1, 1, 1.0f, 0.0f},
    {"leakyrelu", ACT_LEAKYRELU, 1, 0, 0.01f, 0},
    {"thresholdedrelu", ACT_THRESHOLDEDRELU, 1, 0, 1.0f, 0},
    {"scaledtanh", ACT_SCALEDTANH, 1, 1, 1.0f, 1.0f},
    {"hardsigmoid", ACT_HARDSIGMOID, 1, 1, 0.2f, 0.5f},
    {"elu", ACT_ELU, 1, 0, 1.0f, 0},
    {"softsign", ACT_SOFTSIGN, 0, 0, 0, 0},
    {"softplus", ACT_SOFTPLUS, 0, 0, 0, 0},
};

static int name_eq(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

/* v = act(v), in place over n elements */
static void act_apply(const act *a, float *v, int64_t n) {
    float al = a->alpha, be = a->beta;
    switch (a->kind) {
#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
    /* vec_math.h's 8-lane forms: the loops below stay scalar on this target (their selects are
     * kept as branches), which made the activations half of an LSTM's time */
    case ACT_SIGMOID: KN_V8_MAP(v, v, n, kn_v8_sigmoid); break;
    case ACT_TANH: KN_V8_MAP(v, v, n, kn_v8_tanh); break;
#else
    case ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++) v[i] = kn_nn_sigmoidf(v[i]);
        break;
    case ACT_TANH:
        for (int64_t i = 0; i < n; i++) v[i] = kn_nn_tanhf(v[i]);
        break;
#endif
    case ACT_RELU:
        for (int64_t i = 0; i < n; i++) v[i] = v[i] > 0 ? v[i] : 0;
        break;
    case ACT_AFFINE:
        for (int64_t i = 0; i < n; i++) v[i] = al * v[i] + be;
        break;
    case ACT_LEAKYRELU:
        for (int64_t i = 0; i < n; i++) v[i] = v[i] >= 0 ? v[i] : al * v[i];
        break;
    case ACT_THRESHOLDEDRELU:
        for (int64_t i = 0; i < n; i++) v[i] = v[i] > al ? v[i] : 0;
        break;
    case ACT_SCALEDTANH:
        for (int64_t i = 0; i < n; i++) v[i] = al * kn_nn_tanhf(be * v[i]);
        break;
    case ACT_HARDSIGMOID:
        for (int64_t i = 0; i < n; i++) {
            float t = al * v[i] + be;
            v[i] = t < 0 ? 0 : (t > 1 ? 1 : t);
        }
        break;
    case ACT_ELU:
        for (int64_t i = 0; i < n; i++) v[i] = v[i] >= 0 ? v[i] : al * (kn_nn_expf(v[i]) - 1.0f);
        break;
    case ACT_SOFTSIGN:
        for (int64_t i = 0; i < n; i++) v[i] = v[i] / (1.0f + fabsf(v[i]));
        break;
    case ACT_SOFTPLUS:
        for (int64_t i = 0; i < n; i++) v[i] = v[i] > 20.f ? v[i] : log1pf(kn_nn_expf(v[i]));
        break;
    }
}

/* Reads `activations`, `activation_alpha`, `activation_beta` of node n into acts[dir * per + k]. An
 * error names the node through c, or is only returned when c is NULL (the prepare hook). */
#define ACT_ERR(code, ...) (c ? kn_kernel_error(c, code, __VA_ARGS__) : (code))
static kiln_status read_acts(kn_kernel_ctx *c, const kn_node *n, int gates, int nd, act *acts) {
    int per = gates == 4 ? 3 : (gates == 3 ? 2 : 1);
    static const act_kind dflt[3][3] = {{ACT_TANH}, {ACT_SIGMOID, ACT_TANH}, {ACT_SIGMOID, ACT_TANH, ACT_TANH}};
    const act_kind *d = dflt[per - 1];
    const kn_attr *names = kn_node_attr(n, "activations");
    int na = names && names->type == KN_ATTR_STRINGS ? names->n : 0;
    if (na && na != per && na != per * nd)
        return ACT_ERR(KILN_ERR_INVALID_MODEL, "activations has %d entries; %s needs %d (%d per direction)", na,
                       n->op_type, per * nd, per);
    int nalpha = 0, nbeta = 0;
    const float *alphas = kn_attr_floats(n, "activation_alpha", &nalpha);
    const float *betas = kn_attr_floats(n, "activation_beta", &nbeta);
    int ia = 0, ib = 0;
    for (int i = 0; i < per * nd; i++) {
        act *a = &acts[i];
        if (na == 0) {
            a->kind = d[i % per];
            a->alpha = a->beta = 0;
            continue;
        }
        const char *nm = names->strings[i % na];
        size_t t = 0, nt = sizeof act_table / sizeof act_table[0];
        for (; t < nt; t++)
            if (name_eq(nm, act_table[t].name)) break;
        if (t == nt) return ACT_ERR(KILN_ERR_UNSUPPORTED, "activation '%s' is not supported", nm);
        a->kind = act_table[t].kind;
        a->alpha = act_table[t].alpha;
        a->beta = act_table[t].beta;
        /* values are consumed in order, by the functions that take them; a list of `per`
         * names serves both directions and so does its alpha/beta list */
        if (i == per && na == per) ia = ib = 0;
        if (act_table[t].uses_alpha && ia < nalpha) a->alpha = alphas[ia++];
        if (act_table[t].uses_beta && ib < nbeta) a->beta = betas[ib++];
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ one direction */

typedef struct rnn_dir {
    int gates;           /* 1, 3, 4 */
    int64_t T, B, I, H;
    int reverse;
    const float *xw;     /* [T, B, G*H]: X * W^T + folded biases */
    const float *rt;     /* [H, G*H]: R transposed (for the axpy path) */
    const float *r;      /* [G*H, H]: R as given (for the GEMM path) */
    const float *rbh;    /* GRU with linear_before_reset: R's h-gate bias [H], else NULL */
    const float *p;      /* LSTM peepholes [3H] (i, o, f) or NULL */
    const int64_t *lens; /* [B] or NULL */
    const float *h0, *c0; /* [B, H] or NULL */
    float *y;            /* Y for this direction: element (t, b, :) at y + (t*ystride_t + b*H) */
    int64_t ystride_t;   /* distance between timesteps in y (nd*B*H) */
    float *yh, *yc;      /* [B, H] final states (never NULL: scratch when not wanted) */
    const act *acts;
    float clip;
    int lbr, input_forget;
    int gemm;            /* use kn_sgemm for H * R^T */
    kn_threadpool *pool; /* for that GEMM (NULL when directions run in parallel) */
    const kn_rnn_qgemm *q; /* quantised weights (DynamicQuantizeLSTM): the product goes through q */
    int dir;               /* this direction's index (for q) */
    const float *qbias;    /* with q: Wb + Rb [4H], added after the products (and peepholes) */
    float *work;         /* scratch: see run_dir */
    kiln_status status;
} rnn_dir;

static void clip_range(float *v, int64_t n, float clip) {
    if (clip <= 0) return;
    for (int64_t i = 0; i < n; i++) v[i] = v[i] > clip ? clip : (v[i] < -clip ? -clip : v[i]);
}

/* o_b[0..nr) += h_b[0..4) . (m0, m1, m2, m3)[i] for NB batch rows b: the rows share each load of
 * the four R^T rows. Separate restrict pointers (not one base plus a stride) let GCC vectorise. */
static inline void rec4x1(const float *restrict m0, const float *restrict m1, const float *restrict m2,
                          const float *restrict m3, const float *h0, float *restrict o0, int64_t nr) {
    float a0 = h0[0], a1 = h0[1], a2 = h0[2], a3 = h0[3];
    for (int64_t i = 0; i < nr; i++) o0[i] += a0 * m0[i] + a1 * m1[i] + a2 * m2[i] + a3 * m3[i];
}
static inline void rec4x2(const float *restrict m0, const float *restrict m1, const float *restrict m2,
                          const float *restrict m3, const float *h0, const float *h1, float *restrict o0,
                          float *restrict o1, int64_t nr) {
    float a0 = h0[0], a1 = h0[1], a2 = h0[2], a3 = h0[3], b0 = h1[0], b1 = h1[1], b2 = h1[2], b3 = h1[3];
    for (int64_t i = 0; i < nr; i++) {
        float x0 = m0[i], x1 = m1[i], x2 = m2[i], x3 = m3[i];
        o0[i] += a0 * x0 + a1 * x1 + a2 * x2 + a3 * x3;
        o1[i] += b0 * x0 + b1 * x1 + b2 * x2 + b3 * x3;
    }
}
static inline void rec4x3(const float *restrict m0, const float *restrict m1, const float *restrict m2,
                          const float *restrict m3, const float *h0, const float *h1, const float *h2,
                          float *restrict o0, float *restrict o1, float *restrict o2, int64_t nr) {
    float a0 = h0[0], a1 = h0[1], a2 = h0[2], a3 = h0[3], b0 = h1[0], b1 = h1[1], b2 = h1[2], b3 = h1[3];
    float c0 = h2[0], c1 = h2[1], c2 = h2[2], c3 = h2[3];
    for (int64_t i = 0; i < nr; i++) {
        float x0 = m0[i], x1 = m1[i], x2 = m2[i], x3 = m3[i];
        o0[i] += a0 * x0 + a1 * x1 + a2 * x2 + a3 * x3;
        o1[i] += b0 * x0 + b1 * x1 + b2 * x2 + b3 * x3;
        o2[i] += c0 * x0 + c1 * x1 + c2 * x2 + c3 * x3;
    }
}
static inline void rec4x4(const float *restrict m0, const float *restrict m1, const float *restrict m2,
                          const float *restrict m3, const float *h0, const float *h1, const float *h2,
                          const float *h3, float *restrict o0, float *restrict o1, float *restrict o2,
                          float *restrict o3, int64_t nr) {
    float a0 = h0[0], a1 = h0[1], a2 = h0[2], a3 = h0[3], b0 = h1[0], b1 = h1[1], b2 = h1[2], b3 = h1[3];
    float c0 = h2[0], c1 = h2[1], c2 = h2[2], c3 = h2[3], d0 = h3[0], d1 = h3[1], d2 = h3[2], d3 = h3[3];
    for (int64_t i = 0; i < nr; i++) {
        float x0 = m0[i], x1 = m1[i], x2 = m2[i], x3 = m3[i];
        o0[i] += a0 * x0 + a1 * x1 + a2 * x2 + a3 * x3;
        o1[i] += b0 * x0 + b1 * x1 + b2 * x2 + b3 * x3;
        o2[i] += c0 * x0 + c1 * x1 + c2 * x2 + c3 * x3;
        o3[i] += d0 * x0 + d1 * x1 + d2 * x2 + d3 * x3;
    }
}

/* out[b, 0..nr) += h[b, :] * R[r0..r0+nr, :]^T (gate rows r0.. of R, each H long); out has row
 * stride ldo. */
static kiln_status add_recurrent(rnn_dir *d, const float *h, float *out, int64_t ldo, int64_t r0, int64_t nr) {
    int64_t B = d->B, H = d->H, GH = d->gates * H;
    if (d->q) return d->q->gemm(d->q, d->pool, 1, d->dir, h, B, H, out, ldo); /* LSTM only: r0 0, nr GH */
    if (d->gemm)
        return kn_sgemm(d->pool, false, true, B, nr, H, 1.0f, h, H, d->r + r0 * H, H, 1.0f, out, ldo);
    /* rt is [H, GH]: columns r0.. of each row. Rows of rt outside, groups of up to 4 batch rows
     * inside: each block of rt is read once per group while the gate rows stay in L1. */
    for (int64_t b0 = 0; b0 < B; b0 += 4) {
        int64_t nb = B - b0 < 4 ? B - b0 : 4;
        const float *hb = h + b0 * H;
        float *ob = out + b0 * ldo;
        int64_t j = 0;
        for (; j + 4 <= H; j += 4) {
            const float *m0 = d->rt + j * GH + r0, *m1 = m0 + GH, *m2 = m1 + GH, *m3 = m2 + GH;
            const float *h0 = hb + j, *h1 = h0 + H, *h2 = h1 + H, *h3 = h2 + H;
            float *o0 = ob, *o1 = o0 + ldo, *o2 = o1 + ldo, *o3 = o2 + ldo;
            switch (nb) {
            case 1: rec4x1(m0, m1, m2, m3, h0, o0, nr); break;
            case 2: rec4x2(m0, m1, m2, m3, h0, h1, o0, o1, nr); break;
            case 3: rec4x3(m0, m1, m2, m3, h0, h1, h2, o0, o1, o2, nr); break;
            default: rec4x4(m0, m1, m2, m3, h0, h1, h2, h3, o0, o1, o2, o3, nr); break;
            }
        }
        for (; j < H; j++) {
            const float *mj = d->rt + j * GH + r0;
            for (int64_t b = 0; b < nb; b++) {
                float *o = ob + b * ldo, hj = hb[b * H + j];
                for (int64_t i = 0; i < nr; i++) o[i] += hj * mj[i];
            }
        }
    }
    return KILN_OK;
}

/* dst[c, r] = src[r, c] for a rows x cols matrix, in 16 x 16 tiles (both sides cache-friendly) */
static void transpose(const float *src, float *dst, int64_t rows, int64_t cols) {
    for (int64_t r0 = 0; r0 < rows; r0 += 16)
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {
            int64_t r1 = r0 + 16 < rows ? r0 + 16 : rows, c1 = c0 + 16 < cols ? c0 + 16 : cols;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++) dst[c * rows + r] = src[r * cols + c];
        }
}

/* R^T per direction, [nd][H][GH], for the session's constant cache */
typedef struct rt_make {
    const float *r;
    int nd;
    int64_t GH, H;
} rt_make;

static void make_rt(const void *ctx, void *dst) {
    const rt_make *m = ctx;
    for (int d = 0; d < m->nd; d++) transpose(m->r + d * m->GH * m->H, (float *)dst + d * m->H * m->GH, m->GH, m->H);
}

/* act_apply, or with q the sigmoid/tanh it brings */
static void act_q(const rnn_dir *d, const act *a, float *v, int64_t n) {
    void (*fn)(float *, int64_t) = !d->q                      ? NULL
                                   : a->kind == ACT_SIGMOID ? d->q->sigmoid
                                   : a->kind == ACT_TANH    ? d->q->tanh
                                                            : NULL;
    if (!fn) {
        act_apply(a, v, n);
        return;
    }
    fn(v, n);
}

static void add_to(float *v, const float *b, int64_t n) {
    if (b)
        for (int64_t i = 0; i < n; i++) v[i] += b[i];
}

/* work: gates [B, GH], h [B, H], c [B, H], tmp [B, H] (GRU: r*h or h*Rh) */
static kiln_status run_dir(rnn_dir *d) {
    int64_t T = d->T, B = d->B, H = d->H, G = d->gates, GH = G * H;
    float *gates = d->work, *hs = gates + B * GH, *cs = hs + B * H, *tmp = cs + B * H;
    if (d->h0) memcpy(hs, d->h0, (size_t)(B * H) * sizeof(float));
    else memset(hs, 0, (size_t)(B * H) * sizeof(float));
    if (d->c0) memcpy(cs, d->c0, (size_t)(B * H) * sizeof(float));
    else memset(cs, 0, (size_t)(B * H) * sizeof(float));
    const act *f = &d->acts[0], *g = G > 1 ? &d->acts[1] : NULL, *hact = G == 4 ? &d->acts[2] : NULL;
    for (int64_t s = 0; s < T; s++) {
        int64_t t = d->reverse ? T - 1 - s : s;
        memcpy(gates, d->xw + t * B * GH, (size_t)(B * GH) * sizeof(float));
        if (G == 1) {
            KN_TRY(add_recurrent(d, hs, gates, GH, 0, GH));
        } else if (G == 4) {
            KN_TRY(add_recurrent(d, hs, gates, GH, 0, GH));
        } else if (d->lbr) {
            /* z, r as usual; h-gate recurrent part kept apart: r * (H Rh^T + Rbh) */
            KN_TRY(add_recurrent(d, hs, gates, GH, 0, 2 * H));
            for (int64_t b = 0; b < B; b++)
                for (int64_t i = 0; i < H; i++) tmp[b * H + i] = d->rbh ? d->rbh[i] : 0.0f;
            KN_TRY(add_recurrent(d, hs, tmp, H, 2 * H, H));
        } else {
            KN_TRY(add_recurrent(d, hs, gates, GH, 0, 2 * H));
        }
        for (int64_t b = 0; b < B; b++) {
            int active = !d->lens || t < d->lens[b];
            float *gb = gates + b * GH, *hb = hs + b * H, *cb = cs + b * H;
            if (G == 1) {
                clip_range(gb, H, d->clip);
                act_apply(f, gb, H);
                if (active) memcpy(hb, gb, (size_t)H * sizeof(float));
            } else if (G == 4) {
                float *gi = gb, *go = gb + H, *gf = gb + 2 * H, *gc = gb + 3 * H;
                if (d->p)
                    for (int64_t i = 0; i < H; i++) {
                        gi[i] += d->p[i] * cb[i];
                        gf[i] += d->p[2 * H + i] * cb[i];
                    }
                const float *qb = d->qbias;
                add_to(gi, qb, H);
                add_to(gf, qb ? qb + 2 * H : NULL, H);
                add_to(gc, qb ? qb + 3 * H : NULL, H);
                clip_range(gi, H, d->clip);
                act_q(d, f, gi, H);
                if (d->input_forget)
                    for (int64_t i = 0; i < H; i++) gf[i] = 1.0f - gi[i];
                else {
                    clip_range(gf, H, d->clip);
                    act_q(d, f, gf, H);
                }
                clip_range(gc, H, d->clip);
                act_q(d, g, gc, H);
                /* new cell state into gc (kept apart so an inactive row keeps its state) */
                for (int64_t i = 0; i < H; i++) gc[i] = gf[i] * cb[i] + gi[i] * gc[i];
                if (d->p)
                    for (int64_t i = 0; i < H; i++) go[i] += d->p[H + i] * gc[i];
                add_to(go, qb ? qb + H : NULL, H);
                clip_range(go, H, d->clip);
                act_q(d, f, go, H);
                memcpy(gf, gc, (size_t)H * sizeof(float));
                act_q(d, hact, gf, H); /* h(C) */
                if (active) {
                    memcpy(cb, gc, (size_t)H * sizeof(float));
                    for (int64_t i = 0; i < H; i++) hb[i] = go[i] * gf[i];
                }
            } else {
                float *gz = gb, *gr = gb + H, *gh = gb + 2 * H;
                clip_range(gz, 2 * H, d->clip);
                act_apply(f, gz, H);
                act_apply(f, gr, H);
                if (d->lbr) {
                    for (int64_t i = 0; i < H; i++) gh[i] += gr[i] * tmp[b * H + i];
                } else {
                    /* (r * H_{t-1}) Rh^T for this row */
                    float *rh = tmp + b * H;
                    for (int64_t i = 0; i < H; i++) rh[i] = gr[i] * hb[i];
                }
                if (!d->lbr) continue; /* finished after the batched product below */
                clip_range(gh, H, d->clip);
                act_apply(g, gh, H);
                if (active)
                    for (int64_t i = 0; i < H; i++) hb[i] = (1.0f - gz[i]) * gh[i] + gz[i] * hb[i];
            }
        }
        if (G == 3 && !d->lbr) {
            /* h-gate: gates[:, 2H:3H] += (r * H) Rh^T, then the update */
            KN_TRY(add_recurrent(d, tmp, gates + 2 * H, GH, 2 * H, H));
            for (int64_t b = 0; b < B; b++) {
                int active = !d->lens || t < d->lens[b];
                float *gb = gates + b * GH, *hb = hs + b * H;
                float *gz = gb, *gh = gb + 2 * H;
                clip_range(gh, H, d->clip);
                act_apply(g, gh, H);
                if (active)
                    for (int64_t i = 0; i < H; i++) hb[i] = (1.0f - gz[i]) * gh[i] + gz[i] * hb[i];
            }
        }
        if (d->y)
            for (int64_t b = 0; b < B; b++) {
                float *yo = d->y + t * d->ystride_t + b * H;
                if (!d->lens || t < d->lens[b]) memcpy(yo, hs + b * H, (size_t)H * sizeof(float));
                else memset(yo, 0, (size_t)H * sizeof(float));
            }
    }
    memcpy(d->yh, hs, (size_t)(B * H) * sizeof(float));
    if (d->yc) memcpy(d->yc, cs, (size_t)(B * H) * sizeof(float));
    return KILN_OK;
}

static void run_dirs(void *arg, int64_t b, int64_t e) {
    rnn_dir *dirs = arg;
    for (int64_t i = b; i < e; i++) dirs[i].status = run_dir(&dirs[i]);
}

/* ------------------------------------------------------------------ the kernel */

/* [a, b, n] <-> [b, a, n] */
static void swap01(const float *src, float *dst, int64_t a, int64_t b, int64_t n) {
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < b; j++) memcpy(dst + (j * a + i) * n, src + (i * b + j) * n, (size_t)n * sizeof(float));
}

static kiln_status rnn(kn_kernel_ctx *c, const kn_rnn_qgemm *q) {
    int G = q ? 4 : kn_nn_rnn_gates(c->node);
    KN_CTX_PRM(c, kn_cpu_rnn_prepare, kn_cpu_rnn_prm, prm);
    const kn_nn_rnn_attrs at = prm->at;
    const kn_tensor *X = c->in[0], *W = c->in[1], *R = c->in[2];
    const kn_tensor *Bt = c->n_inputs > 3 ? c->in[3] : NULL;
    const kn_tensor *L = c->n_inputs > 4 ? c->in[4] : NULL;
    const kn_tensor *H0 = c->n_inputs > 5 ? c->in[5] : NULL;
    const kn_tensor *C0 = G == 4 && c->n_inputs > 6 ? c->in[6] : NULL;
    const kn_tensor *P = G == 4 && c->n_inputs > 7 ? c->in[7] : NULL;
    kn_tensor *Y = c->n_outputs > 0 ? c->out[0] : NULL;
    kn_tensor *YH = c->n_outputs > 1 ? c->out[1] : NULL;
    kn_tensor *YC = G == 4 && c->n_outputs > 2 ? c->out[2] : NULL;
    if (X->rank != 3 || W->rank != 3 || R->rank != 3)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "X, W and R must be 3-D");
    int nd = at.num_directions;
    int64_t T = X->dims[at.layout ? 1 : 0], Bn = X->dims[at.layout ? 0 : 1], I = X->dims[2];
    int64_t H = R->dims[q ? 1 : 2], GH = G * H;
    if (at.hidden_size >= 0 && at.hidden_size != H)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "hidden_size %lld does not match R's last dim %lld",
                               (long long)at.hidden_size, (long long)H);
    if (q && (W->dims[0] != nd || W->dims[1] != I || W->dims[2] != GH || R->dims[0] != nd || R->dims[1] != H ||
              R->dims[2] != GH))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "W must be [%d, %lld, %lld] and R [%d, %lld, %lld]", nd, (long long)I,
                               (long long)GH, nd, (long long)H, (long long)GH);
    if (!q && (W->dims[0] != nd || W->dims[1] != GH || W->dims[2] != I || R->dims[0] != nd || R->dims[1] != GH))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "W must be [%d, %lld, %lld] and R [%d, %lld, %lld]", nd,
                               (long long)GH, (long long)I, nd, (long long)GH, (long long)H);
    if (Bt && kn_tensor_count(Bt) != nd * 2 * GH)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "B must be [%d, %lld]", nd, (long long)(2 * GH));
    if (H0 && kn_tensor_count(H0) != nd * Bn * H)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "initial_h must have %lld elements", (long long)(nd * Bn * H));
    if (C0 && kn_tensor_count(C0) != nd * Bn * H)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "initial_c must have %lld elements", (long long)(nd * Bn * H));
    if (P && kn_tensor_count(P) != nd * 3 * H)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "P must be [%d, %lld]", nd, (long long)(3 * H));
    if (L && kn_tensor_count(L) != Bn)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "sequence_lens must have batch_size = %lld elements", (long long)Bn);
    act acts[6];
    if (prm->acts_ok && prm->gates == G) memcpy(acts, prm->acts, sizeof prm->acts);
    else KN_TRY(read_acts(c, c->node, G, nd, acts));
    int per = G == 4 ? 3 : (G == 3 ? 2 : 1);
    if (T == 0 || Bn == 0) return KILN_OK; /* outputs stay zero */

    int64_t *lens = NULL;
    float *qbias = NULL;
    kiln_status st = KILN_OK;
    int big = Bn >= 16; /* recurrent product through the GEMM */
    float *wv = q ? NULL : kn_nn_f32_view(W), *rv = q ? NULL : kn_nn_f32_view(R);
    /* R^T of each direction for the small-batch product: made once per session when R is a
     * constant (it is re-read every step; transposing it every run cost as much as a layer's
     * input projection), else in the scratch below */
    const float *rt_kept = NULL;
    if (!big && rv) {
        rt_make make = {rv, nd, GH, H};
        kn_const_layout lay = {5, {nd, GH, H, 0}};
        rt_kept = kn_cpu_const_derived(c, 2, &lay, sizeof(float) * (size_t)(nd * H * GH), make_rt, &make);
    }
    /* one allocation for the float copies and scratch */
    int64_t n_x = T * Bn * I, n_xw = nd * T * Bn * GH, n_rt = rt_kept || q ? 0 : nd * H * GH, n_st = nd * Bn * H;
    int64_t n_work = nd * (Bn * GH + 3 * Bn * H);
    int64_t total = n_x + n_xw + n_rt + 4 * n_st + n_work + T * nd * Bn * H;
    /* from the session's buffer pool: a run reuses the last run's block (a fresh malloc of this
     * size went back to the system and page-faulted in again every run) */
    kn_tensor *scratch = NULL;
    float *mem = kn_tensor_new_pooled(c->exec ? c->exec->buffers : NULL, false, KILN_DTYPE_FLOAT, 1, &total, &scratch) ==
                         KILN_OK
                     ? scratch->data
                     : NULL;
    float *bv = Bt ? kn_nn_f32_view(Bt) : NULL, *pv = P ? kn_nn_f32_view(P) : NULL;
    float *h0v = H0 ? kn_nn_f32_view(H0) : NULL, *c0v = C0 ? kn_nn_f32_view(C0) : NULL;
    const float *xv0 = kn_nn_f32_view(X);
    if (!mem || (!q && (!wv || !rv)) || (Bt && !bv) || (P && !pv) || (H0 && !h0v) || (C0 && !c0v) || !xv0) {
        st = KN_OOM();
        goto done;
    }
    float *xs = mem, *xw = xs + n_x, *rt = xw + n_xw, *h0s = rt + n_rt, *c0s = h0s + n_st;
    float *yh = c0s + n_st, *yc = yh + n_st, *work = yc + n_st, *ys = work + n_work;
    if (q && !(qbias = malloc(sizeof(float) * (size_t)(nd * GH)))) {
        st = KN_OOM();
        goto done;
    }
    if (L) {
        lens = malloc((size_t)Bn * sizeof *lens);
        if (!lens) {
            st = KN_OOM();
            goto done;
        }
        for (int64_t b = 0; b < Bn; b++) {
            lens[b] = kn_tensor_get_i64(L, b);
            if (lens[b] < 0 || lens[b] > T) {
                st = kn_kernel_error(c, KILN_ERR_RUNTIME, "sequence_lens[%lld] = %lld is outside [0, %lld]",
                                     (long long)b, (long long)lens[b], (long long)T);
                goto done;
            }
        }
    }
    /* X, initial states to layout 0 */
    if (at.layout) swap01(xv0, xs, Bn, T, I);
    else memcpy(xs, xv0, (size_t)n_x * sizeof(float));
    if (h0v) {
        if (at.layout) swap01(h0v, h0s, Bn, nd, H);
        else memcpy(h0s, h0v, (size_t)n_st * sizeof(float));
    }
    if (c0v) {
        if (at.layout) swap01(c0v, c0s, Bn, nd, H);
        else memcpy(c0s, c0v, (size_t)n_st * sizeof(float));
    }
    rnn_dir dirs[2];
    for (int d = 0; d < nd; d++) {
        float *xwd = xw + d * T * Bn * GH;
        const float *bd = bv ? bv + d * 2 * GH : NULL;
        /* folded bias: Wb + Rb, except the GRU h gate with linear_before_reset keeps Rbh apart */
        float *qb = q ? qbias + d * GH : NULL; /* with q: the biases wait until after the products */
        for (int64_t j = 0; j < GH; j++) {
            float b = 0;
            if (bd) {
                b = bd[j];
                if (!(G == 3 && at.linear_before_reset && j >= 2 * H)) b += bd[GH + j];
            }
            if (qb) qb[j] = b, b = 0.0f;
            xwd[j] = b;
        }
        for (int64_t r = 1; r < T * Bn; r++) memcpy(xwd + r * GH, xwd, (size_t)GH * sizeof(float));
        if (q) st = q->gemm(q, c->pool, 0, d, xs, T * Bn, I, xwd, GH);
        else st = kn_sgemm(c->pool, false, true, T * Bn, GH, I, 1.0f, xs, I, wv + d * GH * I, I, 1.0f, xwd, GH);
        if (st != KILN_OK) goto done;
        const float *rd = q ? NULL : rv + d * GH * H;
        const float *rtd = q ? NULL : rt_kept ? rt_kept + d * H * GH : rt + d * H * GH;
        if (!q && !big && !rt_kept) transpose(rd, rt + d * H * GH, GH, H);
        rnn_dir *di = &dirs[d];
        memset(di, 0, sizeof *di);
        di->gates = G;
        di->T = T, di->B = Bn, di->I = I, di->H = H;
        di->reverse = nd == 2 ? d == 1 : at.reverse;
        di->xw = xwd;
        di->rt = rtd;
        di->r = rd;
        di->rbh = G == 3 && at.linear_before_reset && bd ? bd + GH + 2 * H : NULL;
        di->p = pv ? pv + d * 3 * H : NULL;
        di->lens = lens;
        di->h0 = h0v ? h0s + d * Bn * H : NULL;
        di->c0 = c0v ? c0s + d * Bn * H : NULL;
        di->y = Y ? ys + d * Bn * H : NULL;
        di->ystride_t = nd * Bn * H;
        di->yh = yh + d * Bn * H;
        di->yc = G == 4 ? yc + d * Bn * H : NULL;
        di->acts = acts + d * per;
        di->clip = at.clip;
        di->lbr = at.linear_before_reset;
        di->input_forget = at.input_forget;
        di->gemm = big;
        di->q = q;
        di->qbias = qb && bd ? qb : NULL;
        di->dir = d;
        di->work = work + d * (Bn * GH + 3 * Bn * H);
    }
    if (nd == 2 && kn_threadpool_size(c->pool) > 1) {
        kn_parallel_for(c->pool, 2, 1, run_dirs, dirs); /* GEMMs inside run single-threaded */
    } else {
        for (int d = 0; d < nd; d++) {
            dirs[d].pool = c->pool;
            dirs[d].status = run_dir(&dirs[d]);
        }
    }
    for (int d = 0; d < nd; d++)
        if (dirs[d].status != KILN_OK) {
            st = dirs[d].status;
            goto done;
        }
    /* outputs in the requested layout and type */
    if (Y) {
        float *yo = kn_nn_f32_out(Y);
        if (!yo) {
            st = KN_OOM();
            goto done;
        }
        if (!at.layout) memcpy(yo, ys, (size_t)(T * nd * Bn * H) * sizeof(float));
        else {
            /* ys is [T, nd, B, H]; layout 1 wants [B, T, nd, H] */
            for (int64_t t = 0; t < T; t++)
                for (int d = 0; d < nd; d++)
                    for (int64_t b = 0; b < Bn; b++)
                        memcpy(yo + ((b * T + t) * nd + d) * H, ys + ((t * nd + d) * Bn + b) * H,
                               (size_t)H * sizeof(float));
        }
        kn_nn_f32_commit(Y, yo);
    }
    kn_tensor *st_out[2] = {YH, YC};
    float *st_src[2] = {yh, yc};
    for (int k = 0; k < 2; k++) {
        kn_tensor *o = st_out[k];
        if (!o) continue;
        float *ov = kn_nn_f32_out(o);
        if (!ov) {
            st = KN_OOM();
            goto done;
        }
        if (at.layout) swap01(st_src[k], ov, nd, Bn, H);
        else memcpy(ov, st_src[k], (size_t)n_st * sizeof(float));
        kn_nn_f32_commit(o, ov);
    }
done:
    kn_tensor_free(scratch);
    free(lens);
    free(qbias);
    if (!q) {
        kn_nn_release(W, wv);
        kn_nn_release(R, rv);
    }
    if (Bt) kn_nn_release(Bt, bv);
    if (P) kn_nn_release(P, pv);
    if (H0) kn_nn_release(H0, h0v);
    if (C0) kn_nn_release(C0, c0v);
    kn_nn_release(X, xv0);
    return st;
}

kiln_status kn_cpu_rnn_prepare(const kn_node *n, void *params) {
    kn_cpu_rnn_prm *p = params;
    memset(p, 0, sizeof *p);
    KN_TRY(kn_nn_rnn_read_attrs(n, &p->at));
    p->gates = strstr(n->op_type, "LSTM") ? 4 : kn_nn_rnn_gates(n);
    p->acts_ok = p->at.num_directions >= 1 && p->at.num_directions <= 2 &&
                 read_acts(NULL, n, p->gates, p->at.num_directions, p->acts) == KILN_OK;
    return KILN_OK;
}

kiln_status kn_cpu_rnn(kn_kernel_ctx *c) { return rnn(c, NULL); }

kiln_status kn_cpu_rnn_quantised(kn_kernel_ctx *c, const kn_rnn_qgemm *q) { return rnn(c, q); }

/* ------------------------------------------------------------------ kiln.StackedLSTM */

/* The layers one after another, each as its ONNX LSTM (forward, default attributes); a layer's Y
 * [T, 1, B, H] is the next one's X [T, B, H]. The fusion pays on devices that overlap the layers;
 * here it is the unfused computation, so the two agree. */
_Static_assert(sizeof(kn_cpu_rnn_prm) <= KN_PARAMS_HANDED_MAX, "a layer's block is handed on the stack");

kiln_status kn_cpu_stacked_lstm_prepare(const kn_node *n, void *params) {
    (void)n;
    kn_node layer; /* every layer's node: an LSTM with no attributes (kn_stacked_lstm_layer) */
    memset(&layer, 0, sizeof layer);
    layer.op_type = "LSTM";
    layer.domain = "";
    layer.opset = 14;
    return kn_cpu_rnn_prepare(&layer, params);
}

kiln_status kn_cpu_stacked_lstm(kn_kernel_ctx *c) {
    int layers = kn_stacked_lstm_layers(c->n_inputs);
    const kn_tensor *x = c->in[0];
    if (x->rank != 3) return kn_kernel_error(c, KILN_ERR_SHAPE, "X must be [seq, batch, input]");
    KN_CTX_PRM(c, kn_cpu_stacked_lstm_prepare, kn_cpu_rnn_prm, prm);
    /* each layer's LSTM call gets this block as its own (made for its node) */
    kn_params_handed blk;
    kn_tensor *prev = NULL;
    kiln_status st = KILN_OK;
    for (int l = 0; l < layers && st == KILN_OK; l++) {
        bool last = l == layers - 1;
        kn_tensor xv;
        if (prev) { /* [T, 1, B, H] read as [T, B, H] */
            xv = *prev;
            xv.rank = 3;
            xv.dims[1] = prev->dims[2];
            xv.dims[2] = prev->dims[3];
        }
        kn_tensor *y = NULL;
        kn_stacked_layer layer;
        kn_stacked_lstm_layer(c, l, prev ? &xv : (kn_tensor *)x, last ? NULL : &y, &layer);
        layer.ctx.params = kn_params_hand(&blk, kn_cpu_rnn_prepare, &layer.node, prm, sizeof *prm);
        if (!last) {
            const kn_tensor *r = layer.in[2];
            int64_t dims[4] = {x->dims[0], 1, x->dims[1], r->rank == 3 ? r->dims[2] : 0};
            st = kn_tensor_new_pooled(c->exec ? c->exec->buffers : NULL, false, x->dtype, 4, dims, &y);
            if (st != KILN_OK) break;
        }
        st = kn_cpu_rnn(&layer.ctx);
        kn_tensor_free(prev);
        prev = y;
    }
    kn_tensor_free(prev);
    return st;
}

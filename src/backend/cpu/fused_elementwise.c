/* kiln.FusedElementwise on the CPU: the chain's program over blocks of output elements.
 *
 * Each block of up to BLOCK elements fills one register array per input (a pointer into the input
 * when it is read contiguously, a gathered copy when it is broadcast), then runs the steps one
 * after another, each a plain loop over the block that the compiler vectorises; the last step
 * writes the output directly. A block's registers stay in L1, so the chain reads each input and
 * writes the output once instead of once per operator. The per-operator formulas are the ones the
 * unfused kernels use (elementwise_impl.h), so fused and unfused results agree to rounding. */
#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/fused_impl.h"
#include "backend/cpu/vec_math.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 256

typedef enum { IN_CONTIGUOUS, IN_SCALAR, IN_STRIDED } in_mode;

typedef struct chain_job {
    const kn_chain_program *prog;
    int rank;
    int64_t dims[KILN_MAX_RANK];
    const float *in[KN_CHAIN_MAX_INPUTS];
    in_mode mode[KN_CHAIN_MAX_INPUTS];
    int64_t strides[KN_CHAIN_MAX_INPUTS][KILN_MAX_RANK]; /* element strides over the output dims */
    float *y;
} chain_job;

static inline float clip(float x, float lo, float hi) {
    float v = x < lo ? lo : x;
    return v > hi ? hi : v;
}

static inline float clamp01(float v) {
    v = v < 0.0f ? 0.0f : v;
    return v > 1.0f ? 1.0f : v;
}

/* Copies elements [s, s + m) of the output's index space from a broadcast input. After collapsing,
 * an input's innermost stride is 1 (it has that dim) or 0 (it repeats one element along it).
 * *splat is the element a block holding one repeated element was filled with (-1: not such a
 * block): a per-channel operand over large maps fills its register once per channel, not once per
 * block. */
static void gather(const chain_job *j, int i, int64_t s, int m, float *dst, int64_t *splat) {
    int r = j->rank;
    const int64_t *st = j->strides[i];
    int64_t idx[KILN_MAX_RANK], off = 0, rest = s;
    for (int d = r - 1; d >= 0; d--) {
        idx[d] = rest % j->dims[d];
        rest /= j->dims[d];
        off += idx[d] * st[d];
    }
    const float *src = j->in[i];
    int64_t inner = j->dims[r - 1], step = st[r - 1];
    if (step == 0 && inner - idx[r - 1] >= m) {
        if (*splat != off) {
            const float v = src[off];
            for (int t = 0; t < m; t++) dst[t] = v;
            *splat = off;
        }
        return;
    }
    *splat = -1;
    int done = 0;
    while (done < m) {
        int64_t run = inner - idx[r - 1];
        if (run > m - done) run = m - done;
        if (step == 0) {
            const float v = src[off];
            for (int64_t t = 0; t < run; t++) dst[done + t] = v;
        } else {
            memcpy(dst + done, src + off, sizeof(float) * (size_t)run);
        }
        done += (int)run;
        if (done == m) break;
        /* past the run: carry into the outer dims */
        off += run * step;
        idx[r - 1] += run;
        for (int d = r - 1; d > 0 && idx[d] == j->dims[d]; d--) {
            off -= idx[d] * st[d];
            idx[d] = 0;
            idx[d - 1]++;
            off += st[d - 1];
        }
    }
}

/* o[0..m) = op(a, b) (b unused for unary operators). square: a Pow whose exponent is the
 * constant 2, as x * x (the loop of the general Pow calls powf per element, or not, and stays
 * scalar: the squares of a spectrogram's real and imaginary parts took 1.8 ns an element). */
static void step(const kn_chain_step *s, int m, const float *restrict A, const float *restrict B, float *restrict o,
                 bool square) {
    const float p0 = s->p0, p1 = s->p1;
#define UN(EXPR)                                                                                   \
    for (int i = 0; i < m; i++) {                                                                  \
        const float x = A[i];                                                                      \
        o[i] = (EXPR);                                                                             \
    }                                                                                              \
    return
#define BI(EXPR)                                                                                   \
    for (int i = 0; i < m; i++) {                                                                  \
        const float x = A[i], y = B[i];                                                            \
        o[i] = (EXPR);                                                                             \
    }                                                                                              \
    return
    switch ((kn_chain_op)s->op) {
    case KN_CHAIN_ADD: BI(x + y);
    case KN_CHAIN_SUB: BI(x - y);
    case KN_CHAIN_MUL: BI(x * y);
    case KN_CHAIN_DIV: BI(x / y);
    case KN_CHAIN_POW:
        if (square) {
            UN(x * x);
        }
        BI(y == 2.0f ? x * x : powf(x, y));
    case KN_CHAIN_MAX: BI(x != x ? x : (x > y ? x : y));
    case KN_CHAIN_MIN: BI(x != x ? x : (x < y ? x : y));
    case KN_CHAIN_PRELU: BI(x < 0 ? y * x : x);
    case KN_CHAIN_ABS: UN(fabsf(x));
    case KN_CHAIN_NEG: UN(-x);
#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
    /* vec_math.h's 8-lane forms, as the unfused operators run on this target (the scalar loops
     * stay scalar here: their clamps are branches) */
    case KN_CHAIN_EXP: KN_V8_MAP(o, A, m, kn_v8_exp); return;
    case KN_CHAIN_ERF: KN_V8_MAP(o, A, m, kn_v8_erf); return;
    case KN_CHAIN_TANH: KN_V8_MAP(o, A, m, kn_v8_tanh); return;
    case KN_CHAIN_GELU: KN_V8_MAP(o, A, m, kn_v8_gelu_erf); return;
    case KN_CHAIN_GELU_TANH: KN_V8_MAP(o, A, m, kn_v8_gelu_tanh); return;
#else
    case KN_CHAIN_EXP: UN(kn_ew_expf(x));
#endif
    case KN_CHAIN_LOG: UN(kn_ew_logf(x));
    case KN_CHAIN_SQRT: kn_ew_sqrt_f32(m, o, A); return;
    case KN_CHAIN_RECIPROCAL: UN(1.0f / x);
    case KN_CHAIN_FLOOR: UN(floorf(x));
    case KN_CHAIN_CEIL: UN(ceilf(x));
#if !(!defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__))
    case KN_CHAIN_ERF: UN(kn_ew_erff(x));
    case KN_CHAIN_TANH: UN(kn_ew_tanhf(x));
#endif
    case KN_CHAIN_SIGMOID:
#if defined(__AVX512F__)
        for (int i = 0; i < m; i += 16) {
            const __mmask16 k = kn_v16_tail(m - i);
            _mm512_mask_storeu_ps(o + i, k, kn_v16_sigmoid(_mm512_maskz_loadu_ps(k, A + i)));
        }
        return;
#elif defined(__AVX2__) && defined(__FMA__)
        KN_V8_MAP(o, A, m, kn_v8_sigmoid);
        return;
#else
        UN(kn_ew_sigmoidf(x));
#endif
    case KN_CHAIN_RELU: UN(x < 0.0f ? 0.0f : x);
    case KN_CHAIN_LEAKY_RELU: UN(x < 0.0f ? p0 * x : x);
    case KN_CHAIN_ELU: UN(x < 0.0f ? p0 * kn_ew_expm1f(x) : x);
    case KN_CHAIN_SELU: UN(p1 * (x > 0.0f ? x : p0 * kn_ew_expm1f(x)));
    case KN_CHAIN_HARD_SIGMOID: UN(clamp01(p0 * x + p1));
    case KN_CHAIN_HARD_SWISH: UN(x * clamp01(x * (1.0f / 6.0f) + 0.5f));
    case KN_CHAIN_SOFTPLUS: UN((x > 0.0f ? x : 0.0f) + kn_ew_log1p_pos(kn_ew_expf_normal(-fabsf(x))));
    case KN_CHAIN_SOFTSIGN: UN(x / (1.0f + fabsf(x)));
    case KN_CHAIN_SIN: UN(sinf(x));
    case KN_CHAIN_COS: UN(cosf(x));
#if !(!defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__))
    case KN_CHAIN_GELU: UN(kn_ew_gelu_erff(x));
    case KN_CHAIN_GELU_TANH: UN(kn_ew_gelu_tanhf(x));
#endif
    case KN_CHAIN_CLIP: UN(clip(x, p0, p1));
    case KN_CHAIN_MISH: UN(kn_ew_mishf(x));
    case KN_CHAIN_BINARY_END_:
    case KN_CHAIN_OP_END_: break;
    }
#undef UN
#undef BI
    /* kn_chain_from_node admits only the operators above */
    memset(o, 0, sizeof(float) * (size_t)m);
}

static void chain_range(void *arg, int64_t b, int64_t e) {
    const chain_job *j = arg;
    const kn_chain_program *p = j->prog;
    int base = p->n_inputs, steps_at = p->n_inputs + p->n_consts;
    float regs[KN_CHAIN_MAX_REGS][BLOCK];
    const float *reg[KN_CHAIN_MAX_REGS];
    /* constants and scalar inputs: filled once */
    for (int k = 0; k < p->n_consts; k++) {
        for (int i = 0; i < BLOCK; i++) regs[base + k][i] = p->consts[k];
        reg[base + k] = regs[base + k];
    }
    for (int k = 0; k < p->n_inputs; k++)
        if (j->mode[k] == IN_SCALAR) {
            for (int i = 0; i < BLOCK; i++) regs[k][i] = j->in[k][0];
            reg[k] = regs[k];
        }
    int64_t splat[KN_CHAIN_MAX_INPUTS];
    for (int k = 0; k < p->n_inputs; k++) splat[k] = -1;
    /* Pow steps by the constant 2 */
    bool square[KN_CHAIN_MAX_STEPS];
    for (int t = 0; t < p->n_steps; t++) {
        const kn_chain_step *st = &p->steps[t];
        square[t] = st->op == KN_CHAIN_POW &&
                    ((st->b >= base && st->b < base + p->n_consts && p->consts[st->b - base] == 2.0f) ||
                     (st->b < base && j->mode[st->b] == IN_SCALAR && j->in[st->b][0] == 2.0f));
    }
    for (int64_t s = b; s < e; s += BLOCK) {
        int m = e - s < BLOCK ? (int)(e - s) : BLOCK;
        for (int k = 0; k < p->n_inputs; k++) {
            if (j->mode[k] == IN_CONTIGUOUS) reg[k] = j->in[k] + s;
            else if (j->mode[k] == IN_STRIDED) {
                gather(j, k, s, m, regs[k], &splat[k]);
                reg[k] = regs[k];
            }
        }
        for (int t = 0; t < p->n_steps; t++) {
            const kn_chain_step *st = &p->steps[t];
            float *o = t == p->n_steps - 1 ? j->y + s : regs[steps_at + t];
            step(st, m, reg[st->a], reg[kn_chain_op_binary(st->op) ? st->b : st->a], o, square[t]);
            reg[steps_at + t] = o;
        }
    }
}

kiln_status kn_chain_prepare(const kn_node *n, void *params) {
    kn_chain_prm *p = params;
    char why[160];
    p->ok = kn_chain_from_node(n, n->n_inputs, &p->prog, why, sizeof why);
    return KILN_OK;
}

kiln_status kn_cpu_fused_elementwise(kn_kernel_ctx *c) {
    /* the program as read at compile time, or now (another input count than the node's, an
     * invalid program: read again for the message) */
    const kn_chain_prm *prm = NULL;
    if (c->params && c->params->fn == kn_chain_prepare && c->params->node == c->node &&
        c->n_inputs == c->node->n_inputs)
        prm = (const kn_chain_prm *)c->params->data;
    chain_job *j = calloc(1, sizeof *j + (prm && prm->ok ? 0 : sizeof(kn_chain_program)));
    if (!j) return KN_OOM();
    if (prm && prm->ok) {
        j->prog = &prm->prog;
    } else {
        kn_chain_program *own = (kn_chain_program *)(j + 1);
        char why[160];
        if (!kn_chain_from_node(c->node, c->n_inputs, own, why, sizeof why)) {
            free(j);
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "%s", why);
        }
        j->prog = own;
    }
    int ranks[KN_CHAIN_MAX_INPUTS];
    const int64_t *dims[KN_CHAIN_MAX_INPUTS];
    for (int i = 0; i < c->n_inputs; i++) {
        if (!c->in[i] || c->in[i]->dtype != KILN_DTYPE_FLOAT) {
            free(j);
            return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "input %d is not float32", i);
        }
        ranks[i] = c->in[i]->rank;
        dims[i] = c->in[i]->dims;
    }
    kiln_status st = kn_ew_broadcast_shape(c->n_inputs, ranks, dims, &j->rank, j->dims);
    if (st != KILN_OK) {
        free(j);
        return kn_kernel_error(c, st, "the inputs do not broadcast");
    }
    kn_tensor *Y;
    st = kn_ctx_output(c, 0, KILN_DTYPE_FLOAT, j->rank, j->dims, &Y);
    if (st != KILN_OK) {
        free(j);
        return st;
    }
    int64_t total = kn_tensor_count(Y);
    /* strides over the output dims (right-aligned, 0 where broadcast), then collapsed */
    int64_t strides[KN_CHAIN_MAX_INPUTS][KILN_MAX_RANK], out_dims[KILN_MAX_RANK];
    int out_rank = j->rank;
    memcpy(out_dims, j->dims, sizeof(int64_t) * (size_t)out_rank);
    for (int i = 0; i < c->n_inputs; i++) {
        const kn_tensor *x = c->in[i];
        kn_broadcast_strides(x->dims, x->rank, out_rank, strides[i]);
        j->in[i] = x->data;
        int64_t count = kn_tensor_count(x);
        j->mode[i] = count == total ? IN_CONTIGUOUS : count == 1 ? IN_SCALAR : IN_STRIDED;
    }
    j->rank = kn_shape_collapse(c->n_inputs, out_rank, out_dims, strides, j->dims, j->strides);
    j->y = Y->data;
    if (total > 0) kn_parallel_for(c->pool, total, KN_EW_GRAIN, chain_range, j);
    free(j);
    return KILN_OK;
}

bool kn_cpu_fused_elementwise_supports(const kn_node *node, const kn_type *const *in, int n_in, char *why, size_t cap) {
    if (!kn_fused_supports_f32(node, in, n_in, why, cap)) return false;
    kn_chain_program prog;
    return kn_chain_from_node(node, n_in, &prog, why, cap);
}

/* CPU kernels: RNN, GRU, LSTM (every direction, layout, sequence_lens, clip, peepholes,
 * input_forget, activation lists with alpha/beta).
 *
 * Per direction: the input projection of all timesteps, X[T*B, I] * W^T + biases, is one GEMM
 * (kn_sgemm, on the pool). The recurrence then adds H_{t-1} * R^T each step: for a small batch
 * (under 16 rows) from R in panels of 16 hidden units (make_panels: sums kept in registers), for a
 * large one through kn_sgemm. The two directions of a bidirectional layer run in parallel; a
 * single direction whose step is large enough (KN_RNN_SPLIT_MACS) splits its hidden units among
 * the threads, the steps in lockstep (util/lockstep.h: one wait a step). kiln.StackedLSTM's layers
 * overlap on two or more threads (a wavefront of chunks of steps, kn_cpu_stacked_lstm). Everything
 * computes in float (float16/bfloat16/double inputs are converted). Gate orders are ONNX's: LSTM i,o,f,c;
 * GRU z,r,h. */
#include "backend/cpu/const_cache.h"
#include "backend/cpu/nn_internal.h"
#include "backend/cpu/vec_math.h"
#include "backend/cpu/sgemm.h"
#include "exec/exec.h"
#include "util/lockstep.h"
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
#if defined(__AVX512F__)
    /* vec_math.h's 16-lane forms (GCC kept the loops below at 8 lanes or scalar: the gates'
     * activations were a sixth of a small LSTM's time) */
    case ACT_SIGMOID: kn_v16_sigmoid_inplace(v, n); break;
    case ACT_TANH: {
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(v + i, kn_v16_tanh(_mm512_loadu_ps(v + i)));
        if (i < n) {
            const __mmask16 m = kn_v16_tail(n - i);
            _mm512_mask_storeu_ps(v + i, m, kn_v16_tanh(_mm512_maskz_loadu_ps(m, v + i)));
        }
        break;
    }
#elif defined(__AVX2__) && defined(__FMA__)
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
    const float *panels; /* R in blocks of 16 hidden units (make_panels), for the small-batch product */
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
    const float *x;        /* [T*B, I]: the input (layout 0), for the input projection */
    const float *w;        /* [G*H, I]: W of this direction */
    const float *w_packed; /* W^T packed for the GEMM once per session (W a constant), or NULL */
    float *xw_mut;         /* xw, written by the input projection */
    float *work;         /* scratch: dir_work floats (see there) */
    int parts;           /* threads sharing the steps: the hidden units in parts of part_units */
    int64_t part_units;
    kiln_status status;
} rnn_dir;

static void clip_range(float *v, int64_t n, float clip) {
    if (clip <= 0) return;
    for (int64_t i = 0; i < n; i++) v[i] = v[i] > clip ? clip : (v[i] < -clip ? -clip : v[i]);
}

/* ------------------------------------------------------------------ the recurrent product */

/* The small-batch product h_{t-1} R^T reads R in panels of 16 hidden units: panel u (units 16u ..
 * 16u + 15) is [H][G][16] floats, element (j, g, i) = R[g*H + 16u + i][j] (0 past H), contiguous.
 * A part of the hidden units (the units a thread takes) is a run of whole panels, read front to
 * back; each panel's G gate vectors of one row j are one 64-float line group. The kernel keeps the
 * sums of a panel (up to 4 batch rows x 4 gates) in registers over all of j and writes them once:
 * the earlier axpy over rows of R^T loaded and stored its output rows every 4 rows of j, and its
 * loops over a thread's 48 units of a gate cost more in overhead than in arithmetic. */
#define PANEL 16
static int64_t panel_count(int64_t H) { return (H + PANEL - 1) / PANEL; }

typedef struct panel_make {
    const float *r; /* [nd][G*H][H] */
    int nd, G;
    int64_t H;
} panel_make;

static void make_panels(const void *ctx, void *dst) {
    const panel_make *m = ctx;
    const int64_t H = m->H, G = m->G, np = panel_count(H);
    float *o = dst;
    for (int d = 0; d < m->nd; d++) {
        const float *r = m->r + d * G * H * H;
        for (int64_t u = 0; u < np; u++)
            for (int64_t j = 0; j < H; j++)
                for (int64_t g = 0; g < G; g++)
                    for (int64_t i = 0; i < PANEL; i++, o++) {
                        const int64_t unit = u * PANEL + i;
                        *o = unit < H ? r[(g * H + unit) * H + j] : 0.0f;
                    }
    }
}

/* The sums of one panel for NB batch rows and NG gates: out[g][b*ldo[g] + i] += h[b*H + j] *
 * panel(j, g0 + g, i) over j, for i < w. NB and NG are constants where it is inlined. */
#if defined(__AVX512F__)
#include <immintrin.h>
static inline __attribute__((always_inline)) void panel_sums(const float *restrict p, int64_t pstride, const float *h,
                                                             int64_t H, float *const *out, const int64_t *ldo, int w,
                                                             int NB, int NG) {
    const __mmask16 m = w >= PANEL ? (__mmask16)0xFFFF : (__mmask16)((1u << w) - 1);
    /* with fewer than 8 sums (one batch row) a second set over the odd rows j: each sum is a chain
     * of FMAs 4 cycles apart, and 8 chains keep both FMA units busy */
    const int SETS = NB * NG < 8 ? 2 : 1;
    __m512 acc[2][4][4];
    for (int b = 0; b < NB; b++)
        for (int g = 0; g < NG; g++) {
            acc[0][g][b] = _mm512_maskz_loadu_ps(m, out[g] + b * ldo[g]);
            if (SETS == 2) acc[SETS - 1][g][b] = _mm512_setzero_ps();
        }
    int64_t j = 0;
    for (; j + SETS <= H; j += SETS, p += SETS * pstride)
        for (int k = 0; k < SETS; k++) {
            __m512 r[4];
            for (int g = 0; g < NG; g++) r[g] = _mm512_load_ps(p + k * pstride + g * PANEL);
            for (int b = 0; b < NB; b++) {
                const __m512 hb = _mm512_set1_ps(h[b * H + j + k]);
                for (int g = 0; g < NG; g++) acc[k][g][b] = _mm512_fmadd_ps(hb, r[g], acc[k][g][b]);
            }
        }
    for (; j < H; j++, p += pstride)
        for (int b = 0; b < NB; b++) {
            const __m512 hb = _mm512_set1_ps(h[b * H + j]);
            for (int g = 0; g < NG; g++) acc[0][g][b] = _mm512_fmadd_ps(hb, _mm512_load_ps(p + g * PANEL), acc[0][g][b]);
        }
    for (int b = 0; b < NB; b++)
        for (int g = 0; g < NG; g++) {
            __m512 v = acc[0][g][b];
            if (SETS == 2) v = _mm512_add_ps(v, acc[SETS - 1][g][b]);
            _mm512_mask_storeu_ps(out[g] + b * ldo[g], m, v);
        }
}
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
/* AVX2: the panel as two halves of 8 units, each half's sums in registers (NB x NG vectors, and
 * with fewer than 8 of them a second set over the odd rows j, as above); the same order of sums
 * as the AVX-512 form lane by lane. (The GCC vector form below kept a 16-float vector's halves on
 * the stack, every step: 93% of an LSTM's run at 2.8 GFLOP/s on a Zen 3.) */
static inline __attribute__((always_inline)) void panel_sums(const float *restrict p, int64_t pstride, const float *h,
                                                             int64_t H, float *const *out, const int64_t *ldo, int w,
                                                             int NB, int NG) {
    const int SETS = NB * NG < 8 ? 2 : 1;
    for (int lo = 0; lo < PANEL && lo < w; lo += 8) {
        const int wh = w - lo < 8 ? w - lo : 8;
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(wh), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 acc[2][4][4];
        for (int b = 0; b < NB; b++)
            for (int g = 0; g < NG; g++) {
                acc[0][g][b] = _mm256_maskload_ps(out[g] + b * ldo[g] + lo, m);
                if (SETS == 2) acc[SETS - 1][g][b] = _mm256_setzero_ps();
            }
        const float *q = p + lo;
        int64_t j = 0;
        for (; j + SETS <= H; j += SETS, q += SETS * pstride)
            for (int k = 0; k < SETS; k++) {
                __m256 r[4];
                for (int g = 0; g < NG; g++) r[g] = _mm256_load_ps(q + k * pstride + g * PANEL);
                for (int b = 0; b < NB; b++) {
                    const __m256 hb = _mm256_broadcast_ss(h + b * H + j + k);
                    for (int g = 0; g < NG; g++) acc[k][g][b] = _mm256_fmadd_ps(hb, r[g], acc[k][g][b]);
                }
            }
        for (; j < H; j++, q += pstride)
            for (int b = 0; b < NB; b++) {
                const __m256 hb = _mm256_broadcast_ss(h + b * H + j);
                for (int g = 0; g < NG; g++)
                    acc[0][g][b] = _mm256_fmadd_ps(hb, _mm256_load_ps(q + g * PANEL), acc[0][g][b]);
            }
        for (int b = 0; b < NB; b++)
            for (int g = 0; g < NG; g++) {
                __m256 v = acc[0][g][b];
                if (SETS == 2) v = _mm256_add_ps(v, acc[SETS - 1][g][b]);
                _mm256_maskstore_ps(out[g] + b * ldo[g] + lo, m, v);
            }
    }
}
#else
/* Without AVX2: the same sums in GCC vector types (four SSE vectors) */
typedef float panel_vec __attribute__((vector_size(PANEL * sizeof(float))));
static inline __attribute__((always_inline)) void panel_sums(const float *restrict p, int64_t pstride, const float *h,
                                                             int64_t H, float *const *out, const int64_t *ldo, int w,
                                                             int NB, int NG) {
    panel_vec acc[4][4];
    for (int b = 0; b < NB; b++)
        for (int g = 0; g < NG; g++) {
            float v[PANEL] = {0};
            memcpy(v, out[g] + b * ldo[g], (size_t)w * sizeof(float));
            memcpy(&acc[b][g], v, sizeof v);
        }
    for (int64_t j = 0; j < H; j++, p += pstride) {
        panel_vec r[4];
        for (int g = 0; g < NG; g++) memcpy(&r[g], p + g * PANEL, sizeof r[g]);
        for (int b = 0; b < NB; b++) {
            const float hb = h[b * H + j];
            for (int g = 0; g < NG; g++) acc[b][g] += hb * r[g];
        }
    }
    for (int b = 0; b < NB; b++)
        for (int g = 0; g < NG; g++) {
            float v[PANEL];
            memcpy(v, &acc[b][g], sizeof v);
            memcpy(out[g] + b * ldo[g], v, (size_t)w * sizeof(float));
        }
}
#endif

#define PANEL_NG(NB)                                                                                          \
    switch (ng) {                                                                                             \
    case 1: panel_sums(p, pstride, h, H, out, ldo, w, NB, 1); break;                                          \
    case 2: panel_sums(p, pstride, h, H, out, ldo, w, NB, 2); break;                                          \
    case 3: panel_sums(p, pstride, h, H, out, ldo, w, NB, 3); break;                                          \
    default: panel_sums(p, pstride, h, H, out, ldo, w, NB, 4); break;                                         \
    }
static void panel_sums_any(const float *p, int64_t pstride, const float *h, int64_t H, float *const *out,
                           const int64_t *ldo, int w, int nb, int ng) {
    switch (nb) {
    case 1: PANEL_NG(1) break;
    case 2: PANEL_NG(2) break;
    case 3: PANEL_NG(3) break;
    default: PANEL_NG(4) break;
    }
}
#undef PANEL_NG

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

/* out[k][b*ldo[k] + (u - u0)] += h[b, :] . R[g*H + u, :] for the gates g = g0 + k in [g0, g1) and
 * the units u in [u0, u1) (u0 a multiple of PANEL). The quantised and the large-batch products
 * take whole gate rows (one part: u0 = 0, u1 = H), each run of gates whose outputs lie side by side
 * in one call. */
static kiln_status product(rnn_dir *d, const float *h, float *const *out, const int64_t *ldo, int g0, int g1, int64_t u0,
                           int64_t u1) {
    const int64_t H = d->H, B = d->B;
    if (d->q || d->gemm) {
        for (int g = g0; g < g1;) {
            int e = g + 1;
            while (e < g1 && out[e - g0] == out[g - g0] + (e - g) * H && ldo[e - g0] == ldo[g - g0]) e++;
            float *o = out[g - g0];
            if (d->q) KN_TRY(d->q->gemm(d->q, d->pool, 1, d->dir, h, B, H, o, ldo[g - g0])); /* LSTM: all 4H */
            else KN_TRY(kn_sgemm(d->pool, false, true, B, (e - g) * H, H, 1.0f, h, H, d->r + g * H * H, H, 1.0f, o,
                                 ldo[g - g0]));
            g = e;
        }
        return KILN_OK;
    }
    const int G = d->gates, ng = g1 - g0;
    const int64_t pstride = (int64_t)G * PANEL;
    for (int64_t u = u0; u < u1; u += PANEL) {
        const float *p = d->panels + (u / PANEL) * H * pstride + g0 * PANEL;
        const int w = (int)(u1 - u < PANEL ? u1 - u : PANEL);
        for (int64_t b0 = 0; b0 < B; b0 += 4) {
            float *o[4];
            for (int k = 0; k < ng; k++) o[k] = out[k] + b0 * ldo[k] + (u - u0);
            panel_sums_any(p, pstride, h + b0 * H, H, o, ldo, w, (int)(B - b0 < 4 ? B - b0 : 4), ng);
        }
    }
    return KILN_OK;
}

/* Floats rounded up to whole cache lines: the parts' scratch and the shared arrays' rows start on
 * a line of their own where H allows (a line written by two threads every step moved between the
 * cores every step) */
static int64_t lines(int64_t floats) { return (floats + 15) / 16 * 16; }

/* Scratch of one direction (d->work), each array on its own cache lines: h [2][B, H] (step s reads
 * h[s % 2] and writes h[(s + 1) % 2]: with the units split among threads, one part's new h must not
 * overwrite the h_{t-1} another part is still multiplying); c [B, H]; rh [B, H] (GRU without
 * linear_before_reset: r * h_{t-1}, read by every part); then per part, its gates [B, G, n] and
 * tmp [B, n] (GRU with linear_before_reset: h_{t-1} Rh^T + Rbh), n = part_units. */
static int64_t part_work(int64_t B, int G, int64_t n) { return lines(B * G * n) + lines(B * n); }
static int64_t dir_work(int64_t B, int G, int64_t H, int parts, int64_t part_units) {
    return 4 * lines(B * H) + parts * part_work(B, G, part_units);
}

/* Step `step` of direction d for the hidden units [u0, u1) of every batch row: the gates of these
 * units (their columns of X W^T + biases, plus h_{t-1} R^T), then their cell and hidden states.
 * A GRU without linear_before_reset takes two steps a time step: its h gate multiplies (r * h_{t-1})
 * by Rh, which needs r of every unit (the second step starts when every part's first is done). */
static void dir_step(void *arg, int64_t step, int part) {
    rnn_dir *d = arg;
    if (d->status != KILN_OK) return;
    const int64_t B = d->B, H = d->H, G = d->gates, GH = G * H;
    const int phases = G == 3 && !d->lbr ? 2 : 1;
    const int64_t s = step / phases, u0 = part * d->part_units, u1 = u0 + d->part_units < H ? u0 + d->part_units : H;
    const int phase = (int)(step % phases);
    if (u0 >= u1) return;
    const int64_t t = d->reverse ? d->T - 1 - s : s, n = u1 - u0, Gn = G * n;
    float *hprev = d->work + (s & 1) * lines(B * H), *hnext = d->work + ((s + 1) & 1) * lines(B * H);
    float *cs = d->work + 2 * lines(B * H), *rh = cs + lines(B * H);
    float *gates = rh + lines(B * H) + part * part_work(B, (int)G, d->part_units);
    float *tmp = gates + lines(B * Gn);
    const act *f = &d->acts[0], *g = G > 1 ? &d->acts[1] : NULL, *hact = G == 4 ? &d->acts[2] : NULL;
    kiln_status st = KILN_OK;
    if (phase == 0) {
        const float *xw = d->xw + t * B * GH;
        for (int64_t b = 0; b < B; b++)
            for (int64_t k = 0; k < G; k++)
                memcpy(gates + b * Gn + k * n, xw + b * GH + k * H + u0, (size_t)n * sizeof(float));
        /* the gates' products, a GRU's h gate with linear_before_reset into tmp: r * (h_{t-1} Rh^T + Rbh) */
        float *out[4] = {gates, gates + n, gates + 2 * n, gates + 3 * n};
        int64_t ldo[4] = {Gn, Gn, Gn, Gn};
        int ng = G == 3 && !d->lbr ? 2 : (int)G;
        if (G == 3 && d->lbr) {
            for (int64_t b = 0; b < B; b++)
                for (int64_t i = 0; i < n; i++) tmp[b * n + i] = d->rbh ? d->rbh[u0 + i] : 0.0f;
            out[2] = tmp, ldo[2] = n;
        }
        st = product(d, hprev, out, ldo, 0, ng, u0, u1);
    } else {
        /* the h gate: gates[:, 2n + u] += (r * h_{t-1}) Rh^T */
        float *out[1] = {gates + 2 * n};
        int64_t ldo[1] = {Gn};
        st = product(d, rh, out, ldo, 2, 3, u0, u1);
    }
    if (st != KILN_OK) {
        d->status = st;
        return;
    }
    for (int64_t b = 0; b < B; b++) {
        const int active = !d->lens || t < d->lens[b];
        float *gb = gates + b * Gn, *hp = hprev + b * H + u0, *hn = hnext + b * H + u0, *cb = cs + b * H + u0;
        if (G == 1) {
            clip_range(gb, n, d->clip);
            act_apply(f, gb, n);
            memcpy(hn, active ? gb : hp, (size_t)n * sizeof(float));
        } else if (G == 4) {
            float *gi = gb, *go = gb + n, *gf = gb + 2 * n, *gc = gb + 3 * n;
            if (d->p)
                for (int64_t i = 0; i < n; i++) {
                    gi[i] += d->p[u0 + i] * cb[i];
                    gf[i] += d->p[2 * H + u0 + i] * cb[i];
                }
            const float *qb = d->qbias ? d->qbias + u0 : NULL;
            add_to(gi, qb, n);
            add_to(gf, qb ? qb + 2 * H : NULL, n);
            add_to(gc, qb ? qb + 3 * H : NULL, n);
            clip_range(gi, n, d->clip);
            act_q(d, f, gi, n);
            if (d->input_forget)
                for (int64_t i = 0; i < n; i++) gf[i] = 1.0f - gi[i];
            else {
                clip_range(gf, n, d->clip);
                act_q(d, f, gf, n);
            }
            clip_range(gc, n, d->clip);
            act_q(d, g, gc, n);
            /* new cell state into gc (kept apart so an inactive row keeps its state) */
            for (int64_t i = 0; i < n; i++) gc[i] = gf[i] * cb[i] + gi[i] * gc[i];
            if (d->p)
                for (int64_t i = 0; i < n; i++) go[i] += d->p[H + u0 + i] * gc[i];
            add_to(go, qb ? qb + H : NULL, n);
            clip_range(go, n, d->clip);
            act_q(d, f, go, n);
            memcpy(gf, gc, (size_t)n * sizeof(float));
            act_q(d, hact, gf, n); /* h(C) */
            if (active) {
                memcpy(cb, gc, (size_t)n * sizeof(float));
                for (int64_t i = 0; i < n; i++) hn[i] = go[i] * gf[i];
            } else
                memcpy(hn, hp, (size_t)n * sizeof(float));
        } else {
            float *gz = gb, *gr = gb + n, *gh = gb + 2 * n;
            if (phase == 0) {
                clip_range(gz, n, d->clip);
                clip_range(gr, n, d->clip);
                act_apply(f, gz, n);
                act_apply(f, gr, n);
                if (d->lbr) {
                    const float *tb = tmp + b * n;
                    for (int64_t i = 0; i < n; i++) gh[i] += gr[i] * tb[i];
                } else {
                    float *rb = rh + b * H + u0;
                    for (int64_t i = 0; i < n; i++) rb[i] = gr[i] * hp[i]; /* for the second step */
                    continue;
                }
            }
            clip_range(gh, n, d->clip);
            act_apply(g, gh, n);
            if (active)
                for (int64_t i = 0; i < n; i++) hn[i] = (1.0f - gz[i]) * gh[i] + gz[i] * hp[i];
            else
                memcpy(hn, hp, (size_t)n * sizeof(float));
        }
        if (d->y) {
            float *yo = d->y + t * d->ystride_t + b * H + u0;
            if (active) memcpy(yo, hn, (size_t)n * sizeof(float));
            else memset(yo, 0, (size_t)n * sizeof(float));
        }
    }
}

/* A direction's states before its first step: h_0 into h[0], c_0 */
static void dir_begin(rnn_dir *d) {
    const int64_t B = d->B, H = d->H;
    float *h = d->work, *cs = h + 2 * lines(B * H);
    if (d->h0) memcpy(h, d->h0, (size_t)(B * H) * sizeof(float));
    else memset(h, 0, (size_t)(B * H) * sizeof(float));
    if (d->c0) memcpy(cs, d->c0, (size_t)(B * H) * sizeof(float));
    else memset(cs, 0, (size_t)(B * H) * sizeof(float));
    d->status = KILN_OK;
}

/* ... and its final states after the last */
static kiln_status dir_end(rnn_dir *d) {
    const int64_t B = d->B, H = d->H;
    float *h = d->work, *cs = h + 2 * lines(B * H);
    if (d->status != KILN_OK) return d->status;
    memcpy(d->yh, h + (d->T & 1) * lines(B * H), (size_t)(B * H) * sizeof(float));
    if (d->yc) memcpy(d->yc, cs, (size_t)(B * H) * sizeof(float));
    return KILN_OK;
}

/* One direction: its steps on `pool` in d->parts parts of the hidden units (1: all on the calling
 * thread). */
static kiln_status run_dir(rnn_dir *d, kn_threadpool *pool) {
    dir_begin(d);
    const int phases = d->gates == 3 && !d->lbr ? 2 : 1;
    kn_parallel_lockstep(d->parts > 1 ? pool : NULL, d->T * phases, d->parts, dir_step, d);
    return dir_end(d);
}

/* Multiply-adds of recurrent product between two waits (a time step's, or half of it for a GRU
 * without linear_before_reset) for each part the hidden units are split into: a wait costs about
 * 0.5 us at 2 threads on the 2-core box (the other core's h and its done count, over the caches),
 * about what a single thread spends on 50-100 K multiply-adds and their gates. Measured at 2
 * threads, B = 1, T = 50: split 0.63x of one thread at LSTM/GRU H = 256, even at LSTM H = 128 (65 K),
 * 1.2-1.4x at LSTM H = 64 and GRU H = 96 (bench/results/cpu-rnn-2threads-2026-12-06f-h81.md). */
#define KN_RNN_SPLIT_MACS 65536

/* The threads that share one direction's steps (*parts) and the hidden units of each (a multiple of
 * PANEL): only the small-batch product (a large batch's per-step GEMM is parallel itself; the
 * quantised product takes whole rows) */
static void plan_parts(int threads, int splittable, int64_t B, int G, int64_t H, int phases, int *parts_out,
                       int64_t *units_out) {
    int64_t parts = threads;
    const int64_t by_units = H / PANEL, by_work = B * G * H * H / phases / KN_RNN_SPLIT_MACS;
    if (parts > by_units) parts = by_units;
    if (parts > by_work) parts = by_work;
    if (!splittable || parts < 1) parts = 1;
    /* as even as whole panels allow */
    int64_t per = (H + parts - 1) / parts;
    per = (per + PANEL - 1) / PANEL * PANEL;
    *units_out = per;
    *parts_out = (int)((H + per - 1) / per);
}

/* xw += X W^T for the time steps [s0, s1) (every step: one GEMM; xw holds the biases) */
static kiln_status project_steps(rnn_dir *d, kn_threadpool *pool, int64_t s0, int64_t s1) {
    const int64_t M = (s1 - s0) * d->B, N = d->gates * d->H;
    if (d->q) return d->q->gemm(d->q, pool, 0, d->dir, d->x, M, d->I, d->xw_mut, N); /* (every step) */
    const float *a = d->x + s0 * d->B * d->I, *b = d->w, *bp = d->w_packed;
    float *c = d->xw_mut + s0 * d->B * N;
    kn_sgemm_batch p = {.count = 1, .M = M, .N = N, .K = d->I, .trans_b = true, .alpha = 1.0f, .beta = 1.0f,
                        .a = &a, .lda = d->I, .b = &b, .ldb = d->I, .c = &c, .ldc = N, .b_packed = bp ? &bp : NULL};
    return kn_sgemm_run(pool, &p);
}

static kiln_status project(rnn_dir *d, kn_threadpool *pool) { return project_steps(d, pool, 0, d->T); }

/* Both directions at once, one a thread: each its own input projection too (on one thread, with
 * no wait between the two GEMMs, and xw made in the cache of the core that reads it), except the
 * quantised one, made before (its product quantises X into scratch the two would share) */
static void run_dirs(void *arg, int64_t b, int64_t e) {
    rnn_dir *dirs = arg;
    for (int64_t i = b; i < e; i++) {
        dirs[i].status = dirs[i].q ? KILN_OK : project(&dirs[i], NULL);
        if (dirs[i].status == KILN_OK) dirs[i].status = run_dir(&dirs[i], NULL);
    }
}

/* W^T of each direction packed for the input projection's GEMM, for the session's constant cache */
typedef struct wpack_make {
    const float *w; /* [nd][N][K] */
    int nd;
    int64_t N, K, per; /* per: floats a direction's packed form takes */
} wpack_make;

static void make_wpack(const void *ctx, void *dst) {
    const wpack_make *m = ctx;
    for (int d = 0; d < m->nd; d++) kn_sgemm_pack_b_full(m->w + d * m->N * m->K, m->K, true, m->N, m->K, (float *)dst + d * m->per);
}

/* ------------------------------------------------------------------ the kernel */

/* [a, b, n] <-> [b, a, n] */
static void swap01(const float *src, float *dst, int64_t a, int64_t b, int64_t n) {
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < b; j++) memcpy(dst + (j * a + i) * n, src + (i * b + j) * n, (size_t)n * sizeof(float));
}

/* One call of the kernel between rnn_open and rnn_close: its tensors, their float views, the
 * scratch and the directions set up on it. */
typedef struct rnn_call {
    kn_kernel_ctx *c;
    const kn_rnn_qgemm *q;
    kn_nn_rnn_attrs at;
    int G, nd, empty, parallel_dirs;
    int64_t T, Bn, I, H, n_st;
    const kn_tensor *X, *W, *R, *Bt, *L, *H0, *C0, *P;
    kn_tensor *Y, *YH, *YC;
    act acts[6];
    int64_t *lens;
    float *qbias;
    kn_tensor *scratch;
    float *wv, *rv, *bv, *pv, *h0v, *c0v;
    const float *xv0;
    float *ys, *yh, *yc; /* Y [T, nd, B, H] and the final states, layout 0 */
    rnn_dir dirs[2];
} rnn_call;

/* Checks the call's shapes and sets up its directions (weights, biases folded into xw, initial
 * states, scratch), short of the products. x_in: X as floats [T*B, I] in layout 0, read in place
 * (a stacked layer's input, the previous layer's ys), or NULL for c's X. keep_y: Y's rows are
 * made (ys) also where c has no Y (a stacked layer's, for the next layer). Empty (T, B or H zero): r->empty, nothing held.
 * rnn_close releases what it took, also after an error. */
static kiln_status rnn_open(kn_kernel_ctx *c, const kn_rnn_qgemm *q, const float *x_in, int keep_y, rnn_call *r) {
    memset(r, 0, sizeof *r);
    r->c = c, r->q = q;
    int G = r->G = q ? 4 : kn_nn_rnn_gates(c->node);
    KN_CTX_PRM(c, kn_cpu_rnn_prepare, kn_cpu_rnn_prm, prm);
    const kn_nn_rnn_attrs at = r->at = prm->at;
    const kn_tensor *X = r->X = c->in[0], *W = r->W = c->in[1], *R = r->R = c->in[2];
    const kn_tensor *Bt = r->Bt = c->n_inputs > 3 ? c->in[3] : NULL;
    const kn_tensor *L = r->L = c->n_inputs > 4 ? c->in[4] : NULL;
    const kn_tensor *H0 = r->H0 = c->n_inputs > 5 ? c->in[5] : NULL;
    const kn_tensor *C0 = r->C0 = G == 4 && c->n_inputs > 6 ? c->in[6] : NULL;
    const kn_tensor *P = r->P = G == 4 && c->n_inputs > 7 ? c->in[7] : NULL;
    kn_tensor *Y = r->Y = c->n_outputs > 0 ? c->out[0] : NULL;
    r->YH = c->n_outputs > 1 ? c->out[1] : NULL;
    r->YC = G == 4 && c->n_outputs > 2 ? c->out[2] : NULL;
    if (X->rank != 3 || W->rank != 3 || R->rank != 3)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "X, W and R must be 3-D");
    int nd = r->nd = at.num_directions;
    int64_t T = X->dims[at.layout ? 1 : 0], Bn = X->dims[at.layout ? 0 : 1], I = X->dims[2];
    int64_t H = R->dims[q ? 1 : 2], GH = G * H;
    r->T = T, r->Bn = Bn, r->I = I, r->H = H;
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
    act *acts = r->acts;
    if (prm->acts_ok && prm->gates == G) memcpy(acts, prm->acts, sizeof prm->acts);
    else KN_TRY(read_acts(c, c->node, G, nd, acts));
    int per = G == 4 ? 3 : (G == 3 ? 2 : 1);
    if (T == 0 || Bn == 0 || H == 0) { /* outputs stay zero (or hold no element) */
        r->empty = 1;
        return KILN_OK;
    }

    int big = Bn >= 16; /* recurrent product through the GEMM */
    float *wv = r->wv = q ? NULL : kn_nn_f32_view(W), *rv = r->rv = q ? NULL : kn_nn_f32_view(R);
    /* R's panels of each direction for the small-batch product: made once per session when R is
     * a constant (it is re-read every step; transposing it every run cost as much as a layer's
     * input projection), else in the scratch below */
    const float *panels_kept = NULL;
    const int64_t n_panels = nd * panel_count(H) * H * G * PANEL;
    panel_make make = {rv, nd, G, H};
    if (!big && rv) {
        kn_const_layout lay = {80, {nd, G, H, PANEL}};
        panels_kept = kn_cpu_const_derived(c, 2, &lay, sizeof(float) * (size_t)n_panels, make_panels, &make);
    }
    /* W^T packed once per session for the input projection (packing it every run was 4-6% of a
     * small layer's time) */
    wpack_make wpack = {wv, nd, GH, I, lines((int64_t)kn_sgemm_packed_b_floats(GH, I))};
    const float *w_packed = NULL;
    if (wv) {
        kn_const_layout lay = {81, {nd, GH, I, 0}};
        w_packed = kn_cpu_const_derived(c, 1, &lay, sizeof(float) * (size_t)(nd * wpack.per), make_wpack, &wpack);
    }
    /* one allocation for the float copies and scratch */
    int64_t n_x = x_in ? 0 : T * Bn * I, n_xw = nd * T * Bn * GH, n_rt = panels_kept || q || big ? 0 : lines(n_panels);
    int64_t n_st = r->n_st = nd * Bn * H;
    /* the threads a direction's steps take: every one, or one a direction where both run at once */
    const int pool_threads = kn_threadpool_size(c->pool);
    const int parallel_dirs = r->parallel_dirs = nd == 2 && pool_threads > 1;
    int parts;
    int64_t part_units;
    plan_parts(parallel_dirs ? 1 : pool_threads, !q && !big, Bn, G, H,
               G == 3 && !at.linear_before_reset ? 2 : 1, &parts, &part_units);
    const int64_t dwork = dir_work(Bn, G, H, parts, part_units);
    int64_t n_work = nd * dwork;
    int64_t total = n_x + n_xw + n_rt + 4 * n_st + n_work + lines(T * nd * Bn * H);
    /* from the session's buffer pool: a run reuses the last run's block (a fresh malloc of this
     * size went back to the system and page-faulted in again every run) */
    float *mem = kn_tensor_new_pooled(c->exec ? c->exec->buffers : NULL, false, KILN_DTYPE_FLOAT, 1, &total,
                                      &r->scratch) == KILN_OK
                     ? r->scratch->data
                     : NULL;
    float *bv = r->bv = Bt ? kn_nn_f32_view(Bt) : NULL, *pv = r->pv = P ? kn_nn_f32_view(P) : NULL;
    float *h0v = r->h0v = H0 ? kn_nn_f32_view(H0) : NULL, *c0v = r->c0v = C0 ? kn_nn_f32_view(C0) : NULL;
    const float *xv0 = r->xv0 = x_in ? NULL : kn_nn_f32_view(X);
    if (!mem || (!q && (!wv || !rv)) || (Bt && !bv) || (P && !pv) || (H0 && !h0v) || (C0 && !c0v) || (!x_in && !xv0))
        return KN_OOM();
    /* the arrays threads share first, each on whole cache lines */
    float *work = mem, *rt = work + n_work, *ys = rt + n_rt, *xs = ys + lines(T * nd * Bn * H), *xw = xs + n_x;
    float *h0s = xw + n_xw, *c0s = h0s + n_st, *yh = c0s + n_st, *yc = yh + n_st;
    r->ys = ys, r->yh = yh, r->yc = yc;
    if (n_rt) make_panels(&make, rt); /* R not a constant: its panels for this run */
    if (q && !(r->qbias = malloc(sizeof(float) * (size_t)(nd * GH)))) return KN_OOM();
    if (L) {
        int64_t *lens = r->lens = malloc((size_t)Bn * sizeof *lens);
        if (!lens) return KN_OOM();
        for (int64_t b = 0; b < Bn; b++) {
            lens[b] = kn_tensor_get_i64(L, b);
            if (lens[b] < 0 || lens[b] > T)
                return kn_kernel_error(c, KILN_ERR_RUNTIME, "sequence_lens[%lld] = %lld is outside [0, %lld]",
                                       (long long)b, (long long)lens[b], (long long)T);
        }
    }
    /* X, initial states to layout 0 */
    if (!x_in) {
        if (at.layout) swap01(xv0, xs, Bn, T, I);
        else memcpy(xs, xv0, (size_t)n_x * sizeof(float));
    }
    if (h0v) {
        if (at.layout) swap01(h0v, h0s, Bn, nd, H);
        else memcpy(h0s, h0v, (size_t)n_st * sizeof(float));
    }
    if (c0v) {
        if (at.layout) swap01(c0v, c0s, Bn, nd, H);
        else memcpy(c0s, c0v, (size_t)n_st * sizeof(float));
    }
    for (int d = 0; d < nd; d++) {
        float *xwd = xw + d * T * Bn * GH;
        const float *bd = bv ? bv + d * 2 * GH : NULL;
        /* folded bias: Wb + Rb, except the GRU h gate with linear_before_reset keeps Rbh apart */
        float *qb = q ? r->qbias + d * GH : NULL; /* with q: the biases wait until after the products */
        for (int64_t j = 0; j < GH; j++) {
            float b = 0;
            if (bd) {
                b = bd[j];
                if (!(G == 3 && at.linear_before_reset && j >= 2 * H)) b += bd[GH + j];
            }
            if (qb) qb[j] = b, b = 0.0f;
            xwd[j] = b;
        }
        for (int64_t k = 1; k < T * Bn; k++) memcpy(xwd + k * GH, xwd, (size_t)GH * sizeof(float));
        const float *rd = q ? NULL : rv + d * GH * H;
        rnn_dir *di = &r->dirs[d];
        memset(di, 0, sizeof *di);
        di->x = x_in ? x_in : xs;
        di->w = q ? NULL : wv + d * GH * I;
        di->w_packed = w_packed ? w_packed + d * wpack.per : NULL;
        di->xw_mut = xwd;
        di->gates = G;
        di->T = T, di->B = Bn, di->I = I, di->H = H;
        di->reverse = nd == 2 ? d == 1 : at.reverse;
        di->xw = xwd;
        di->panels = q || big ? NULL : (panels_kept ? panels_kept : rt) + d * (n_panels / nd);
        di->r = rd;
        di->rbh = G == 3 && at.linear_before_reset && bd ? bd + GH + 2 * H : NULL;
        di->p = pv ? pv + d * 3 * H : NULL;
        di->lens = r->lens;
        di->h0 = h0v ? h0s + d * Bn * H : NULL;
        di->c0 = c0v ? c0s + d * Bn * H : NULL;
        di->y = Y || keep_y ? ys + d * Bn * H : NULL;
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
        di->work = work + d * dwork; /* first in mem: on whole cache lines */
        di->parts = parts;
        di->part_units = part_units;
    }
    return KILN_OK;
}

/* The products and steps of every direction */
static kiln_status rnn_run(rnn_call *r) {
    kn_kernel_ctx *c = r->c;
    rnn_dir *dirs = r->dirs;
    const int nd = r->nd;
    kiln_status st = KILN_OK;
    if (r->parallel_dirs) {
        for (int d = 0; d < nd && r->q && st == KILN_OK; d++) st = project(&dirs[d], c->pool); /* see below */
        if (st != KILN_OK) return st;
        kn_parallel_for(c->pool, 2, 1, run_dirs, dirs); /* GEMMs inside run single-threaded */
    } else {
        /* every projection before the first recurrence: the quantised product's second direction
         * reuses the first's quantised X, which the recurrent products overwrite */
        for (int d = 0; d < nd && st == KILN_OK; d++) st = project(&dirs[d], c->pool);
        if (st != KILN_OK) return st;
        for (int d = 0; d < nd; d++) {
            dirs[d].pool = c->pool;
            dirs[d].status = run_dir(&dirs[d], c->pool);
        }
    }
    for (int d = 0; d < nd; d++)
        if (dirs[d].status != KILN_OK) return dirs[d].status;
    return KILN_OK;
}

/* The outputs in the requested layout and type (when st is KILN_OK), then everything the call
 * held released; returns st or the outputs' error. */
static kiln_status rnn_close(rnn_call *r, kiln_status st) {
    const kn_nn_rnn_attrs at = r->at;
    const int64_t T = r->T, Bn = r->Bn, H = r->H, nd = r->nd;
    if (st == KILN_OK && !r->empty && r->Y) {
        float *yo = kn_nn_f32_out(r->Y);
        if (!yo) st = KN_OOM();
        else {
            if (!at.layout) memcpy(yo, r->ys, (size_t)(T * nd * Bn * H) * sizeof(float));
            else {
                /* ys is [T, nd, B, H]; layout 1 wants [B, T, nd, H] */
                for (int64_t t = 0; t < T; t++)
                    for (int64_t d = 0; d < nd; d++)
                        for (int64_t b = 0; b < Bn; b++)
                            memcpy(yo + ((b * T + t) * nd + d) * H, r->ys + ((t * nd + d) * Bn + b) * H,
                                   (size_t)H * sizeof(float));
            }
            kn_nn_f32_commit(r->Y, yo);
        }
    }
    kn_tensor *st_out[2] = {r->YH, r->YC};
    float *st_src[2] = {r->yh, r->yc};
    for (int k = 0; k < 2 && st == KILN_OK && !r->empty; k++) {
        kn_tensor *o = st_out[k];
        if (!o) continue;
        float *ov = kn_nn_f32_out(o);
        if (!ov) {
            st = KN_OOM();
            break;
        }
        if (at.layout) swap01(st_src[k], ov, nd, Bn, H);
        else memcpy(ov, st_src[k], (size_t)r->n_st * sizeof(float));
        kn_nn_f32_commit(o, ov);
    }
    kn_tensor_free(r->scratch);
    free(r->lens);
    free(r->qbias);
    if (r->wv) kn_nn_release(r->W, r->wv);
    if (r->rv) kn_nn_release(r->R, r->rv);
    if (r->bv) kn_nn_release(r->Bt, r->bv);
    if (r->pv) kn_nn_release(r->P, r->pv);
    if (r->h0v) kn_nn_release(r->H0, r->h0v);
    if (r->c0v) kn_nn_release(r->C0, r->c0v);
    if (r->xv0) kn_nn_release(r->X, r->xv0);
    memset(r, 0, sizeof *r);
    return st;
}

static kiln_status rnn(kn_kernel_ctx *c, const kn_rnn_qgemm *q) {
    rnn_call r;
    kiln_status st = rnn_open(c, q, NULL, 0, &r);
    if (st == KILN_OK && !r.empty) st = rnn_run(&r);
    return rnn_close(&r, st);
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

/* Each layer is its ONNX LSTM (forward, default attributes); a layer's Y [T, 1, B, H] is the next
 * one's X [T, B, H].
 *
 * At a small batch (the panel product, one thread a step unless a layer is large) the layers
 * overlap: layer l's step t needs only layer l - 1's output at t, so on two or more threads layer
 * l runs a chunk of steps while layer l - 1 runs the next (util/lockstep.h's wavefront: one
 * thread owns a layer's steps). Layer 0's input projection is one GEMM before the steps; a later
 * layer's is made a chunk at a time (STACK_CHUNK_ROWS rows of X W^T) as a stage of its own that
 * any thread takes (lstm_gru at 2 threads: 0.19 -> 0.14 ms). Every path makes the same chunks
 * with the same calls (each GEMM on its calling thread alone), so the outputs do not depend on
 * the thread count or on the path: bit for bit. Where a layer is large enough that its hidden
 * units split over every thread (plan_parts) in large parts, the layers run in turn instead, each
 * split (see the rule below). */
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

/* Rows (time steps x batch) of a later layer's input projection a chunk: whole row tiles of the
 * GEMM's micro-kernel (12 rows with AVX-512, 6 or 4 without), few enough steps that the next
 * layer starts soon. 12 against 8 rows (kiln bench p50, B 1, T 50, dev box): 2 layers of H 96 at
 * 1 thread 0.182 against 0.187 ms (one GEMM of all rows: 0.178-0.181), at 2 threads 0.141 against
 * 0.137; H 256 (in turn) at 2 threads 0.82 against 0.87 (one GEMM 0.82) */
#define STACK_CHUNK_ROWS 12

typedef struct stack_run {
    rnn_call *calls;
    int64_t chunk; /* time steps a chunk */
    int layer;     /* stack_projections' */
    kiln_status failed[KN_STACKED_LSTM_MAX_LAYERS]; /* a layer's chunked projection, overlapped */
} stack_run;

/* Stage s of the wavefront, chunk k: even s, the steps of layer s / 2; odd s, the input projection
 * of layer (s + 1) / 2 (a stage of its own that either thread takes: one thread a layer's steps
 * left a later layer's thread the projection too, 0.07 of lstm_gru's 0.19 ms) */
static void stack_chunk(void *arg, int s, int64_t k) {
    stack_run *sr = arg;
    rnn_dir *d = &sr->calls[(s + 1) / 2].dirs[0];
    const int64_t s0 = k * sr->chunk, s1 = s0 + sr->chunk < d->T ? s0 + sr->chunk : d->T;
    if (s & 1) { /* (its status apart: the layer's steps, another stage, may run meanwhile) */
        kiln_status st = project_steps(d, NULL, s0, s1);
        if (st != KILN_OK) sr->failed[(s + 1) / 2] = st;
        return;
    }
    for (int64_t t = s0; t < s1 && d->status == KILN_OK; t++) dir_step(d, t, 0);
}

/* Chunks [b, e) of layer sr->layer's input projection (the layers in turn) */
static void stack_projections(void *arg, int64_t b, int64_t e) {
    stack_run *sr = arg;
    rnn_dir *d = &sr->calls[sr->layer].dirs[0];
    for (int64_t k = b; k < e; k++) {
        const int64_t s0 = k * sr->chunk, s1 = s0 + sr->chunk < d->T ? s0 + sr->chunk : d->T;
        kiln_status st = project_steps(d, NULL, s0, s1);
        if (st != KILN_OK) __atomic_store_n(&d->status, st, __ATOMIC_RELAXED);
    }
}

/* The layers one after another, each its LSTM (a large batch: each step a GEMM on the pool) */
static kiln_status stacked_in_turn(kn_kernel_ctx *c, const kn_cpu_rnn_prm *prm, int layers) {
    const kn_tensor *x = c->in[0];
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

kiln_status kn_cpu_stacked_lstm(kn_kernel_ctx *c) {
    int layers = kn_stacked_lstm_layers(c->n_inputs);
    const kn_tensor *x = c->in[0];
    if (x->rank != 3) return kn_kernel_error(c, KILN_ERR_SHAPE, "X must be [seq, batch, input]");
    KN_CTX_PRM(c, kn_cpu_stacked_lstm_prepare, kn_cpu_rnn_prm, prm);
    const int64_t T = x->dims[0], B = x->dims[1];
    /* (a float16 or double stack rounds each layer's Y to its type, as the unfused layers do: in turn) */
    if (B >= 16 || T == 0 || B == 0 || layers < 1 || layers > KN_STACKED_LSTM_MAX_LAYERS || x->dtype != KILN_DTYPE_FLOAT)
        return stacked_in_turn(c, prm, layers);
    /* every layer set up, each reading the previous one's ys in place */
    kn_params_handed blk[KN_STACKED_LSTM_MAX_LAYERS];
    kn_stacked_layer lay[KN_STACKED_LSTM_MAX_LAYERS];
    rnn_call calls[KN_STACKED_LSTM_MAX_LAYERS];
    kn_tensor xin[KN_STACKED_LSTM_MAX_LAYERS];
    kn_tensor *no_y[KN_STACKED_LSTM_MAX_LAYERS];
    const int threads = kn_threadpool_size(c->pool);
    kiln_status st = KILN_OK;
    int opened = 0, overlap = threads > 1 && layers > 1, empty = 0;
    for (int l = 0; l < layers && st == KILN_OK; l++) {
        const bool last = l == layers - 1;
        if (l > 0) { /* shape of the previous layer's Y as [T, B, H] (its rows are read from ys) */
            xin[l] = *x;
            xin[l].dims[2] = calls[l - 1].H;
        }
        no_y[l] = NULL; /* a layer before the last makes no Y tensor (ys only) */
        kn_stacked_lstm_layer(c, l, l ? &xin[l] : (kn_tensor *)x, last ? NULL : &no_y[l], &lay[l]);
        lay[l].ctx.params = kn_params_hand(&blk[l], kn_cpu_rnn_prepare, &lay[l].node, prm, sizeof *prm);
        st = rnn_open(&lay[l].ctx, NULL, l ? calls[l - 1].ys : NULL, !last, &calls[l]);
        opened = l + 1;
        if (st == KILN_OK && calls[l].empty) empty = 1;
        /* a layer whose hidden units split over every thread, each part's product at least twice
         * the split's threshold a step: the layers in turn (at 2 threads, B 1, H 256, 131 K a part:
         * in turn 0.90 ms, overlapped 1.0-1.15; B 4, H 96, 74 K: in turn 0.52-0.59, overlapped
         * 0.41-0.43) */
        const rnn_dir *d = &calls[l].dirs[0];
        if (st == KILN_OK && !calls[l].empty && d->parts >= threads &&
            d->B * d->gates * d->part_units * d->H >= 2 * KN_RNN_SPLIT_MACS)
            overlap = 0;
        if (empty) break;
    }
    if (st == KILN_OK && empty) { /* a layer without hidden units: the plain path knows them */
        for (int l = 0; l < opened; l++) rnn_close(&calls[l], KILN_ERR_RUNTIME);
        return stacked_in_turn(c, prm, layers);
    }
    stack_run sr = {calls, STACK_CHUNK_ROWS / B > 1 ? STACK_CHUNK_ROWS / B : 1, 0, {KILN_OK}};
    const int64_t chunks = (T + sr.chunk - 1) / sr.chunk;
    if (st == KILN_OK) st = project(&calls[0].dirs[0], c->pool);
    if (st == KILN_OK && overlap) {
        for (int l = 0; l < layers; l++) {
            /* one thread a layer, all its units one part (its scratch holds them: whole panels a part) */
            calls[l].dirs[0].parts = 1;
            calls[l].dirs[0].part_units = calls[l].H;
            dir_begin(&calls[l].dirs[0]);
        }
        uint64_t projections = 0;
        for (int l = 1; l < layers; l++) projections |= (uint64_t)1 << (2 * l - 1);
        kn_parallel_wavefront(c->pool, 2 * layers - 1, chunks, projections, stack_chunk, &sr);
        for (int l = 0; l < layers && st == KILN_OK; l++) st = sr.failed[l] != KILN_OK ? sr.failed[l] : dir_end(&calls[l].dirs[0]);
    } else if (st == KILN_OK) {
        for (int l = 0; l < layers && st == KILN_OK; l++) {
            rnn_dir *d = &calls[l].dirs[0];
            if (l > 0) { /* the same chunks' projections as the wavefront's, the chunks over the threads */
                sr.layer = l;
                kn_parallel_for(c->pool, chunks, 1, stack_projections, &sr);
                st = d->status;
            }
            d->pool = c->pool;
            if (st == KILN_OK) st = run_dir(d, c->pool);
        }
    }
    for (int l = opened - 1; l >= 0; l--) {
        kiln_status s2 = rnn_close(&calls[l], st);
        if (st == KILN_OK) st = s2;
    }
    return st;
}

/* CPU kernels of kiln's fused operators. FusedConv, FusedGemm and FusedMatMul run the ai.onnx
 * kernel for the linear part into the output and then, in one pass over it while each row is in
 * L1, add the bias/residual and apply the activation in place: the unfused graph instead writes a
 * fresh tensor per Add and per activation and reads each back. */
#include "backend/cpu/conv_amx_blocked.h"
#include "backend/cpu/fused_impl.h"

#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/linalg_impl.h"
#include "backend/cpu/nn_internal.h"
#include "backend/cpu/vec_math.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ activations */

/* GELU for kiln.Gelu and the epilogues where the target has no AVX-512 (with it, vec_math.h's
 * vector forms, which the ai.onnx Gelu runs too), apart from the scalar ai.onnx kernel's
 * (kn_ew_gelu_erff, which squares x / sqrt2 with its rounding error carried, for the last ulps in
 * the far tail): using that one here made bert_mini and vit_tiny 20% slower on one CPU thread
 * (measured 2026-12-01), for differences far inside every tolerance. */

#if !defined(__AVX512F__) && !(defined(__AVX2__) && defined(__FMA__))
/* 0.5 x (1 + erf(x / sqrt2)); for x / sqrt2 <= -1 through erfc, where 1 + erf cancels */
static inline float gelu_erf(float x) {
    float z = x * 0.70710678118654752f, a = fabsf(z);
    float tail = kn_ew_erfc_big(a < 1.0f ? 1.0f : (a > 10.0f ? 10.0f : a)); /* erfc(|z|) */
    float near = kn_ew_erf_small(a < 1.0f ? z : 0.0f);
    float s = a < 1.0f ? 1.0f + near : (z > 0.0f ? 2.0f - tail : tail);
    return 0.5f * x * s;
}

/* 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3) */
static inline float gelu_tanh(float x) {
    float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return x / (1.0f + kn_ew_expf(-2.0f * u));
}
#endif

#if defined(__AVX512F__)
/* p[i] = F(x) for i < n, x the 16 floats at p + i, whole vectors then one masked: the compiler
 * vectorises the plain loops below at half width for this target. F keeps the scalar loops'
 * operations (no contraction) and their NaN behaviour: each max/min takes x-derived values as its
 * second operand, which vmaxps/vminps return when it is NaN, as `v < 0 ? 0 : v` does. */
#define ACT_V16(F)                                                                                 \
    do {                                                                                           \
        int64_t i = 0;                                                                             \
        for (; i + 16 <= n; i += 16) {                                                             \
            const __m512 x = _mm512_loadu_ps(p + i);                                               \
            _mm512_storeu_ps(p + i, F);                                                            \
        }                                                                                          \
        if (i < n) {                                                                               \
            const __mmask16 m = kn_v16_tail(n - i);                                                \
            const __m512 x = _mm512_maskz_loadu_ps(m, p + i);                                      \
            _mm512_mask_storeu_ps(p + i, m, F);                                                    \
        }                                                                                          \
    } while (0)
#define V_ZERO _mm512_setzero_ps()
#define V_ONE _mm512_set1_ps(1.0f)
#elif defined(__AVX2__) && defined(__FMA__)
/* the same at 8 lanes (vec_math.h's kn_v8_*); the compiler keeps the plain loops' clamps as
 * branches on this target, scalar */
#define FUSED_V8 1
#define ACT_V8(F)                                                                                  \
    do {                                                                                           \
        int64_t i = 0;                                                                             \
        for (; i + 8 <= n; i += 8) {                                                               \
            const __m256 x = _mm256_loadu_ps(p + i);                                               \
            _mm256_storeu_ps(p + i, F);                                                            \
        }                                                                                          \
        if (i < n) {                                                                               \
            const __m256 x = kn_v8_load_part(p + i, n - i);                                        \
            kn_v8_store_part(p + i, n - i, F);                                                     \
        }                                                                                          \
    } while (0)
#define V8_ZERO _mm256_setzero_ps()
#define V8_ONE _mm256_set1_ps(1.0f)
#endif

static inline __attribute__((always_inline)) void act_apply(float *p, int64_t n, const kn_act_spec *a) {
    const float p0 = a->p0, p1 = a->p1;
    switch (a->act) {
    case KN_ACT_NONE: break;
    case KN_ACT_RELU:
#if defined(__AVX512F__)
        ACT_V16(_mm512_max_ps(V_ZERO, x));
#elif defined(FUSED_V8)
        ACT_V8(_mm256_max_ps(V8_ZERO, x));
#else
        for (int64_t i = 0; i < n; i++) p[i] = p[i] < 0.0f ? 0.0f : p[i];
#endif
        break;
    case KN_ACT_LEAKY_RELU:
#if defined(__AVX512F__)
        if (a->bounded) { /* with its bounds in the same pass (openWakeWord's LeakyRelu then Max) */
            const __m512 al = _mm512_set1_ps(p0), lo = _mm512_set1_ps(a->lo), hi = _mm512_set1_ps(a->hi);
            ACT_V16(_mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_mask_mul_ps(x, _mm512_cmp_ps_mask(x, V_ZERO, _CMP_LT_OQ),
                                                                          x, al))));
            return;
        }
        ACT_V16(_mm512_mask_mul_ps(x, _mm512_cmp_ps_mask(x, V_ZERO, _CMP_LT_OQ), x, _mm512_set1_ps(p0)));
#elif defined(FUSED_V8)
        ACT_V8(_mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(p0)), _mm256_cmp_ps(x, V8_ZERO, _CMP_LT_OQ)));
#else
        for (int64_t i = 0; i < n; i++) p[i] = p[i] < 0.0f ? p0 * p[i] : p[i];
#endif
        break;
    case KN_ACT_CLIP:
        for (int64_t i = 0; i < n; i++) {
            float v = p[i] < p0 ? p0 : p[i];
            p[i] = v > p1 ? p1 : v;
        }
        break;
    case KN_ACT_SIGMOID:
#if defined(__AVX512F__)
        kn_v16_sigmoid_inplace(p, n);
#elif defined(FUSED_V8)
        kn_v8_sigmoid_inplace(p, n);
#else
        for (int64_t i = 0; i < n; i++) p[i] = kn_ew_sigmoidf(p[i]);
#endif
        break;
    case KN_ACT_TANH:
#if defined(FUSED_V8)
        ACT_V8(kn_v8_tanh(x));
#else
        for (int64_t i = 0; i < n; i++) p[i] = kn_ew_tanhf(p[i]);
#endif
        break;
    case KN_ACT_HARD_SIGMOID:
#if defined(__AVX512F__)
        ACT_V16(_mm512_min_ps(V_ONE, _mm512_max_ps(V_ZERO, _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(p0), x),
                                                                          _mm512_set1_ps(p1)))));
#elif defined(FUSED_V8)
        ACT_V8(_mm256_min_ps(V8_ONE, _mm256_max_ps(V8_ZERO, _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(p0), x),
                                                                          _mm256_set1_ps(p1)))));
#else
        for (int64_t i = 0; i < n; i++) {
            float v = p0 * p[i] + p1;
            v = v < 0.0f ? 0.0f : v;
            p[i] = v > 1.0f ? 1.0f : v;
        }
#endif
        break;
    case KN_ACT_HARD_SWISH:
#if defined(__AVX512F__)
        ACT_V16(_mm512_mul_ps(x, _mm512_min_ps(V_ONE, _mm512_max_ps(V_ZERO, _mm512_add_ps(_mm512_mul_ps(
                                                                                x, _mm512_set1_ps(1.0f / 6.0f)),
                                                                            _mm512_set1_ps(0.5f))))));
#elif defined(FUSED_V8)
        ACT_V8(_mm256_mul_ps(x, _mm256_min_ps(V8_ONE, _mm256_max_ps(V8_ZERO, _mm256_add_ps(_mm256_mul_ps(
                                                                              x, _mm256_set1_ps(1.0f / 6.0f)),
                                                                          _mm256_set1_ps(0.5f))))));
#else
        for (int64_t i = 0; i < n; i++) {
            float v = p[i] * (1.0f / 6.0f) + 0.5f;
            v = v < 0.0f ? 0.0f : v;
            p[i] = p[i] * (v > 1.0f ? 1.0f : v);
        }
#endif
        break;
    case KN_ACT_SILU:
#if defined(__AVX512F__)
        kn_v16_silu_inplace(p, n);
#elif defined(FUSED_V8)
        kn_v8_silu_inplace(p, n);
#else
        for (int64_t i = 0; i < n; i++) p[i] = p[i] * kn_ew_sigmoidf(p[i]);
#endif
        break;
    case KN_ACT_GELU:
#if defined(__AVX512F__)
        ACT_V16(kn_v16_gelu_erf(x)); /* the loop below, auto-vectorised: 3x the time (BERT-base's FFN) */
#elif defined(FUSED_V8)
        ACT_V8(kn_v8_gelu_erf(x));
#else
        for (int64_t i = 0; i < n; i++) p[i] = gelu_erf(p[i]);
#endif
        break;
    case KN_ACT_GELU_TANH:
#if defined(__AVX512F__)
        ACT_V16(kn_v16_gelu_tanh(x));
#elif defined(FUSED_V8)
        ACT_V8(kn_v8_gelu_tanh(x));
#else
        for (int64_t i = 0; i < n; i++) p[i] = gelu_tanh(p[i]);
#endif
        break;
    default: break;
    }
    if (a->bounded) { /* activation_bounds: min(max(y, lo), hi), NaN kept as the scalar form keeps it */
        const float lo = a->lo, hi = a->hi;
#if defined(__AVX512F__)
        ACT_V16(_mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), x)));
#elif defined(FUSED_V8)
        ACT_V8(_mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), x)));
#else
        for (int64_t i = 0; i < n; i++) {
            float v = p[i] < lo ? lo : p[i];
            p[i] = v > hi ? hi : v;
        }
#endif
    }
}

void kn_fused_act(float *p, int64_t n, const kn_act_spec *a) { act_apply(p, n, a); }

void kn_fused_act_rows(float *p, int64_t rows, int64_t cols, int64_t ld, const kn_act_spec *a) {
    if (ld == cols) {
        act_apply(p, rows * cols, a);
        return;
    }
    /* the rows are short (a GEMM strip): the per-row work is inlined, not a call */
    for (int64_t r = 0; r < rows; r++) act_apply(p + r * ld, cols, a);
}

bool kn_fused_supports_f32(const kn_node *node, const kn_type *const *in, int n_in, char *why, size_t cap) {
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) continue;
        if (in[i]->kind != KN_TYPE_TENSOR || in[i]->dtype != KILN_DTYPE_FLOAT) {
            snprintf(why, cap, "kiln's fused CPU kernels take float32 tensors; input %d is %s", i,
                     in[i]->dtype ? kiln_dtype_name(in[i]->dtype) : "of unknown type");
            return false;
        }
    }
    kn_act_spec a;
    if (kn_node_attr(node, "activation") && !kn_act_from_node(node, &a, why, cap)) return false;
    return true;
}

/* FusedConv: float32, and with layout NCHW also a bfloat16 X or Z (values kept in bf16 between
 * convolutions under precision=bf16: opt pass cpu_bf16_values; conv.c reads them as they are on
 * AMX, else converts them) */
static bool fused_conv_supports(const kn_node *node, const kn_type *const *in, int n_in, char *why, size_t cap) {
    bool nhwc = false;
    const bool x16 = n_in > 0 && in[0] && in[0]->kind == KN_TYPE_TENSOR && in[0]->dtype == KILN_DTYPE_BFLOAT16;
    const bool z16 = n_in > 3 && in[3] && in[3]->kind == KN_TYPE_TENSOR && in[3]->dtype == KILN_DTYPE_BFLOAT16;
    if ((x16 || z16) && n_in <= 8 && kn_fused_conv_layout(node, &nhwc) && !nhwc) {
        const kn_type *rest[8] = {NULL};
        for (int i = 0; i < n_in; i++) rest[i] = (i == 0 && x16) || (i == 3 && z16) ? NULL : in[i];
        return kn_fused_supports_f32(node, rest, n_in, why, cap);
    }
    return kn_fused_supports_f32(node, in, n_in, why, cap);
}

/* ------------------------------------------------------------------ epilogue */

typedef struct epi_job {
    float *y;
    const float *z;    /* residual, same shape as y, or NULL */
    const float *bias; /* per column (n_bias == cols), a scalar (n_bias == 1), or NULL */
    int64_t n_bias, cols;
    kn_act_spec act;
} epi_job;

static void epi_rows(void *arg, int64_t r0, int64_t r1) {
    const epi_job *j = arg;
    const int64_t cols = j->cols;
    for (int64_t r = r0; r < r1; r++) {
        float *p = j->y + r * cols;
        if (j->bias && j->n_bias == cols) {
            const float *b = j->bias;
            for (int64_t i = 0; i < cols; i++) p[i] += b[i];
        } else if (j->bias) {
            const float b = j->bias[0];
            for (int64_t i = 0; i < cols; i++) p[i] += b;
        }
        if (j->z) {
            const float *z = j->z + r * cols;
            for (int64_t i = 0; i < cols; i++) p[i] += z[i];
        }
        kn_fused_act(p, cols, &j->act);
    }
}

static void epilogue(kn_threadpool *pool, epi_job *j, int64_t total) {
    if (total <= 0 || j->cols <= 0) return;
    if (!j->z && !j->bias && j->act.act == KN_ACT_NONE && !j->act.bounded) return;
    /* rows too long for L1 are cut into pieces (without a per-column bias that would need offsets) */
    if (!j->bias && j->cols > 4096 && j->cols % 4096 == 0) j->cols = 4096;
    int64_t rows = total / j->cols;
    int64_t grain = 16384 / j->cols + 1;
    kn_parallel_for(pool, rows, grain, epi_rows, j);
}

/* The ai.onnx kernels the fused ones build on, looked up once. */
enum { BASE_GEMM, BASE_MATMUL, BASE_COUNT };
static const char *const base_ops[BASE_COUNT] = {"Gemm", "MatMul"};
static const kn_cpu_kernel *base_kernels[BASE_COUNT];
static pthread_once_t base_once = PTHREAD_ONCE_INIT;

static void find_bases(void) {
    for (int i = 0; i < BASE_COUNT; i++) {
        kn_node n;
        memset(&n, 0, sizeof n);
        n.op_type = base_ops[i];
        n.domain = "";
        n.opset = 13;
        char why[256];
        base_kernels[i] = kn_cpu_find(&n, NULL, 0, why, sizeof why);
    }
}

/* Runs the ai.onnx kernel `which` on the first n inputs of the fused node, into its output. */
static kn_node base_proxy(const kn_node *n, int which) {
    kn_node proxy = *n;
    proxy.op_type = base_ops[which];
    proxy.domain = "";
    proxy.opset = 13;
    return proxy;
}

/* The fused kernels' attributes (their prepare hook): the activation, FusedConv's layout, Gelu's
 * form, and FusedGemm's inner Gemm's block (its kernel's hook on the proxy node; base_ok false:
 * the Gemm reads its attributes itself). What does not parse is read again by the call, which
 * says why. */
#define FUSED_BASE_BYTES 64
typedef struct fused_prm {
    bool act_ok, layout_ok, nhwc, gelu_tanh, base_ok;
    kn_act_spec act;
    _Alignas(max_align_t) unsigned char base[FUSED_BASE_BYTES];
} fused_prm;

static kiln_status fused_prepare(const kn_node *n, void *params) {
    fused_prm *p = params;
    char why[128];
    p->act_ok = kn_act_from_node(n, &p->act, why, sizeof why);
    p->layout_ok = kn_fused_conv_layout(n, &p->nhwc);
    p->gelu_tanh = !strcmp(kn_attr_string(n, "approximate", "none"), "tanh");
    p->base_ok = false;
    if (!strcmp(n->op_type, "FusedGemm")) {
        pthread_once(&base_once, find_bases);
        const kn_cpu_kernel *k = base_kernels[BASE_GEMM];
        if (k && k->prepare && k->params_bytes <= sizeof p->base) {
            kn_node proxy = base_proxy(n, BASE_GEMM);
            p->base_ok = k->prepare(&proxy, p->base) == KILN_OK;
            if (!p->base_ok) kn_clear_error();
        }
    }
    return KILN_OK;
}

/* Runs the base kernel on a proxy node (the fused node as the ai.onnx op); p (or NULL) hands it
 * the block fused_prepare made for it. */
static kiln_status run_base(kn_kernel_ctx *c, int which, int n, const fused_prm *p) {
    pthread_once(&base_once, find_bases);
    const kn_cpu_kernel *k = base_kernels[which];
    const char *op = base_ops[which];
    kn_node proxy = base_proxy(c->node, which);
    if (!k) return kn_kernel_error(c, KILN_ERR_INTERNAL, "the CPU backend has no %s kernel", op);
    kn_kernel_ctx pc = *c;
    pc.node = &proxy;
    pc.n_inputs = n < c->n_inputs ? n : c->n_inputs;
    pc.params = NULL;
    kn_params_handed blk;
    if (p && p->base_ok && k->prepare && k->params_bytes <= FUSED_BASE_BYTES)
        pc.params = kn_params_hand(&blk, k->prepare, &proxy, p->base, k->params_bytes);
    return k->run(&pc);
}

static kiln_status read_params(kn_kernel_ctx *c, fused_prm *local, const fused_prm **out) {
    return kn_ctx_params(c, fused_prepare, local, (const void **)out);
}

static kiln_status read_act(kn_kernel_ctx *c, kn_act_spec *a) {
    fused_prm local;
    const fused_prm *p;
    KN_TRY(read_params(c, &local, &p));
    if (p->act_ok) {
        *a = p->act;
        return KILN_OK;
    }
    char why[128];
    if (!kn_act_from_node(c->node, a, why, sizeof why)) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "%s", why);
    return KILN_OK;
}

static kiln_status check_residual(kn_kernel_ctx *c, const kn_tensor *z, const kn_tensor *y) {
    if (!z) return KILN_OK;
    if ((z->dtype != KILN_DTYPE_FLOAT && z->dtype != KILN_DTYPE_BFLOAT16) || z->rank != y->rank ||
        (y->rank && memcmp(z->dims, y->dims, sizeof(int64_t) * (size_t)y->rank)))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "the residual input must have the output's shape and type");
    return KILN_OK;
}

/* FusedMatMul's residual: Y's shape, or Y's rows under other leading dims (a 2-D Y; the same bytes) */
static kiln_status check_rows_residual(kn_kernel_ctx *c, const kn_tensor *z, const kn_tensor *y) {
    if (!z || y->rank != 2 || z->rank == 2) return check_residual(c, z, y);
    if ((z->dtype != KILN_DTYPE_FLOAT && z->dtype != KILN_DTYPE_BFLOAT16) || z->rank < 1 ||
        z->dims[z->rank - 1] != y->dims[1] || kn_tensor_count(z) != kn_tensor_count(y))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "the residual input must hold the output's rows in its type");
    return KILN_OK;
}

/* ------------------------------------------------------------------ kernels */

/* FusedConv's residual and activation, applied by the convolution to each finished range of its
 * output while it is in cache (no second pass over memory). */
typedef struct conv_epi {
    const float *z;
    kn_act_spec act;
    const uint16_t *z16; /* Z in bf16 instead */
} conv_epi;

static void conv_epilogue(const void *ctx, float *y, int64_t offset, int64_t rows, int64_t cols, int64_t ld) {
    const conv_epi *e = ctx;
    float *p = y + offset;
    if (e->z) {
        const float *z = e->z + offset;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < cols; i++) p[r * ld + i] += z[r * ld + i];
    }
    if (e->z16) {
        const uint16_t *z = e->z16 + offset;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < cols; i++) p[r * ld + i] += kn_bf16_to_f32(z[r * ld + i]);
    }
    kn_fused_act_rows(p, rows, cols, ld, &e->act);
}

/* A copy of t with its dims permuted (kn_tensor_permuted), or NULL (out of memory). */
static kn_tensor *permuted(const kn_tensor *t, const int *perm) {
    kn_tensor *p = NULL;
    if (kn_tensor_permuted(t, perm, &p) != KILN_OK) {
        kn_clear_error();
        return NULL;
    }
    return p;
}

static kiln_status fused_conv_channels_first(kn_kernel_ctx *c, const kn_act_spec *a);
static kiln_status fused_conv_nchw(kn_kernel_ctx *c, const kn_act_spec *act, bool blocked);
static kiln_status fused_conv_unblocked(kn_kernel_ctx *c, const kn_act_spec *act, bool xb, bool zb, bool yb);

/* Layout NHWC on the CPU: the reference, channels moved first (X, Z and the weights), the
 * convolution as for NCHW, the output's channels moved last (the CPU's own convolution is channels-first; the optimiser forms
 * NHWC nodes for the CPU only when asked, KILN_LAYOUT=nhwc, to check the layout pass). */
static kiln_status fused_conv_channels_last(kn_kernel_ctx *c, const kn_act_spec *a) {
    const kn_tensor *X = c->in[0], *Z = c->n_inputs > 3 ? c->in[3] : NULL;
    kn_tensor *Y = c->out[0];
    if (X->rank < 3 || X->dtype != KILN_DTYPE_FLOAT || Y->rank != X->rank)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "layout NHWC needs float32 X and Y of one rank, 3 or more");
    int to_first[KILN_MAX_RANK], to_last[KILN_MAX_RANK];
    kn_nhwc_perms(X->rank, to_first, to_last);
    int64_t ydims[KILN_MAX_RANK];
    for (int d = 0; d < Y->rank; d++) ydims[d] = Y->dims[to_first[d]];
    const kn_tensor *W = c->in[1];
    if (W->rank != X->rank || W->dtype != KILN_DTYPE_FLOAT)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "layout NHWC needs float32 W of X's rank");
    kn_tensor *xf = permuted(X, to_first), *wf = permuted(W, to_first), *zf = Z ? permuted(Z, to_first) : NULL;
    kn_tensor *yf = NULL;
    kiln_status st = xf && wf && (!Z || zf) ? kn_tensor_new(KILN_DTYPE_FLOAT, Y->rank, ydims, &yf) : KN_OOM();
    if (st == KILN_OK) {
        kn_tensor *in[4] = {xf, wf, c->n_inputs > 2 ? c->in[2] : NULL, zf};
        kn_tensor *out[1] = {yf};
        kn_kernel_ctx fc = *c;
        fc.in = in;
        fc.out = out;
        st = fused_conv_channels_first(&fc, a);
    }
    kn_tensor *yl = NULL;
    if (st == KILN_OK) st = kn_tensor_permuted(yf, to_last, &yl);
    if (st == KILN_OK) memcpy(Y->data, yl->data, (size_t)kn_tensor_count(Y) * sizeof(float));
    kn_tensor_free(yl);
    kn_tensor_free(xf);
    kn_tensor_free(wf);
    kn_tensor_free(zf);
    kn_tensor_free(yf);
    return st;
}

static kiln_status run_fused_conv(kn_kernel_ctx *c) {
    kn_act_spec a;
    KN_TRY(read_act(c, &a));
    fused_prm local;
    const fused_prm *p;
    KN_TRY(read_params(c, &local, &p));
    bool nhwc = p->nhwc;
    if (!p->layout_ok) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "layout must be NCHW or NHWC");
    return nhwc ? fused_conv_channels_last(c, &a) : fused_conv_channels_first(c, &a);
}

static kiln_status fused_conv_channels_first(kn_kernel_ctx *c, const kn_act_spec *act) {
    return fused_conv_nchw(c, act, true);
}

/* the node's flag (ints [1], as the optimiser sets it) */
static bool blocked_attr(const kn_node *n, const char *name) {
    int k = 0;
    const int64_t *v = kn_attr_ints(n, name, &k);
    return v && k == 1 && v[0] == 1;
}

/* blocked: honour the node's x_blocked, z_blocked, y_blocked (false: the operands given are NCHW) */
static kiln_status fused_conv_nchw(kn_kernel_ctx *c, const kn_act_spec *act, bool blocked) {
    kn_act_spec a = *act;
    kn_tensor *Y = c->out[0];
    const kn_tensor *Z = c->n_inputs > 3 ? c->in[3] : NULL;
    KN_TRY(check_residual(c, Z, Y));
    kn_node proxy = *c->node;
    proxy.op_type = "Conv";
    proxy.domain = "";
    proxy.opset = 13;
    kn_kernel_ctx pc = *c;
    pc.node = &proxy;
    pc.n_inputs = c->n_inputs < 3 ? c->n_inputs : 3;
    const bool z16 = Z && Z->dtype == KILN_DTYPE_BFLOAT16;
    conv_epi e = {Z && !z16 ? Z->data : NULL, a, z16 ? Z->data : NULL};
    bool any = Z || a.act != KN_ACT_NONE || a.bounded;
    /* the residual and a Relu, Clip, LeakyRelu, HardSigmoid or HardSwish (and its bounds) as data
     * too, for the kernels that apply them as they store */
    kn_conv_tail tail = {Z && !z16 ? Z->data : NULL, -INFINITY, INFINITY, z16 ? Z->data : NULL};
    bool as_tail = a.act == KN_ACT_NONE || a.act == KN_ACT_RELU || a.act == KN_ACT_CLIP ||
                   a.act == KN_ACT_LEAKY_RELU || a.act == KN_ACT_HARD_SIGMOID || a.act == KN_ACT_HARD_SWISH;
    /* the piecewise-linear ones (and their bounds) for the GEMM's micro-kernel (the other kernels
     * call the epilogue) */
    tail.act = a.act == KN_ACT_LEAKY_RELU     ? KN_GEMM_ACT_LEAKY
               : a.act == KN_ACT_HARD_SIGMOID ? KN_GEMM_ACT_HARD_SIGMOID
               : a.act == KN_ACT_HARD_SWISH   ? KN_GEMM_ACT_HARD_SWISH
                                              : KN_GEMM_ACT_NONE;
    tail.p0 = a.p0, tail.p1 = a.p1;
    if (a.act == KN_ACT_RELU) tail.lo = 0.0f;
    if (a.act == KN_ACT_CLIP) tail.lo = a.p0, tail.hi = a.p1;
    if (a.bounded) kn_clamp_then(&tail.lo, &tail.hi, a.lo, a.hi);
    /* channel-blocked bf16 operands (opt pass cpu_bf16_values, conv_amx_blocked.h) */
    const bool xb = blocked_attr(c->node, "x_blocked"), zb = Z && blocked_attr(c->node, "z_blocked"),
               yb = blocked_attr(c->node, "y_blocked");
    if (blocked && (xb || zb || yb)) {
        bool done = false;
        if (!any || (as_tail && tail.act == KN_GEMM_ACT_NONE))
            KN_TRY(kn_cpu_conv_blocked(&pc, any ? &tail : NULL, xb, zb, yb, &done));
        if (done) return KILN_OK;
        return fused_conv_unblocked(c, act, xb, zb, yb);
    }
    return kn_cpu_conv_with_tail(&pc, any ? conv_epilogue : NULL, &e, any && as_tail ? &tail : NULL);
}

/* The blocked kernel declined: the blocked operands converted to bf16 NCHW around the plain route. */
static kiln_status fused_conv_unblocked(kn_kernel_ctx *c, const kn_act_spec *act, bool xb, bool zb, bool yb) {
    const kn_tensor *X = c->in[0], *Z = c->n_inputs > 3 ? c->in[3] : NULL;
    kn_tensor *Y = c->out[0];
    if ((xb && (X->dtype != KILN_DTYPE_BFLOAT16 || X->rank < 2 || X->dims[1] % KN_BLOCKED_CHANNELS)) ||
        (zb && (!Z || Z->dtype != KILN_DTYPE_BFLOAT16 || Z->rank < 2 || Z->dims[1] % KN_BLOCKED_CHANNELS)) ||
        (yb && (Y->dtype != KILN_DTYPE_BFLOAT16 || Y->rank < 2 || Y->dims[1] % KN_BLOCKED_CHANNELS)))
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "a blocked value must be bfloat16 with channels in blocks of %d",
                               KN_BLOCKED_CHANNELS);
    kn_tensor *xn = NULL, *zn = NULL, *yn = NULL;
    kiln_status st = KILN_OK;
    if (xb && (st = kn_tensor_new(KILN_DTYPE_BFLOAT16, X->rank, X->dims, &xn)) == KILN_OK)
        kn_bf16_from_blocked(X->data, xn->data, X->dims[0], X->dims[1], kn_tensor_count(X) / (X->dims[0] * X->dims[1]));
    if (st == KILN_OK && zb && (st = kn_tensor_new(KILN_DTYPE_BFLOAT16, Z->rank, Z->dims, &zn)) == KILN_OK)
        kn_bf16_from_blocked(Z->data, zn->data, Z->dims[0], Z->dims[1], kn_tensor_count(Z) / (Z->dims[0] * Z->dims[1]));
    if (st == KILN_OK && yb) st = kn_tensor_new(KILN_DTYPE_BFLOAT16, Y->rank, Y->dims, &yn);
    if (st == KILN_OK) {
        kn_tensor *in[4] = {NULL, NULL, NULL, NULL};
        for (int i = 0; i < c->n_inputs && i < 4; i++) in[i] = (kn_tensor *)c->in[i];
        if (xn) in[0] = xn;
        if (zn) in[3] = zn;
        kn_tensor *out[1] = {yn ? yn : Y};
        kn_kernel_ctx fc = *c;
        fc.in = in;
        fc.out = out;
        st = fused_conv_nchw(&fc, act, false);
    }
    if (st == KILN_OK && yn)
        kn_bf16_to_blocked(yn->data, Y->data, Y->dims[0], Y->dims[1], kn_tensor_count(Y) / (Y->dims[0] * Y->dims[1]));
    kn_tensor_free(xn);
    kn_tensor_free(zn);
    kn_tensor_free(yn);
    return st;
}

static kiln_status run_fused_gemm(kn_kernel_ctx *c) {
    kn_act_spec a;
    KN_TRY(read_act(c, &a));
    fused_prm local;
    const fused_prm *p;
    KN_TRY(read_params(c, &local, &p));
    KN_TRY(run_base(c, BASE_GEMM, 3, p));
    kn_tensor *Y = c->out[0];
    epi_job j = {Y->data, NULL, NULL, 0, Y->rank == 2 ? Y->dims[1] : kn_tensor_count(Y), a};
    epilogue(c->pool, &j, kn_tensor_count(Y));
    return KILN_OK;
}

static kiln_status run_fused_matmul(kn_kernel_ctx *c) {
    kn_act_spec a;
    KN_TRY(read_act(c, &a));
    kn_tensor *Y = c->out[0];
    const kn_tensor *bias = c->n_inputs > 2 ? c->in[2] : NULL, *Z = c->n_inputs > 3 ? c->in[3] : NULL;
    KN_TRY(check_rows_residual(c, Z, Y));
    int64_t cols = Y->rank >= 1 ? Y->dims[Y->rank - 1] : 1, nb = bias ? kn_tensor_count(bias) : 0;
    if (bias && (bias->dtype != KILN_DTYPE_FLOAT || (nb != 1 && nb != cols)))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "bias has %lld values for %lld output columns", (long long)nb,
                               (long long)cols);
    KN_TRY(run_base(c, BASE_MATMUL, 2, NULL));
    epi_job j = {Y->data, Z ? Z->data : NULL, bias ? bias->data : NULL, nb, cols, a};
    epilogue(c->pool, &j, kn_tensor_count(Y));
    return KILN_OK;
}

typedef struct gelu_job {
    const float *x;
    float *y;
    bool tanh_form;
} gelu_job;

static void gelu_range(void *arg, int64_t i0, int64_t i1) {
    const gelu_job *j = arg;
    const float *restrict x = j->x;
    float *restrict y = j->y;
#if defined(__AVX512F__)
    for (int64_t i = i0; i < i1; i += 16) {
        const __mmask16 m = kn_v16_tail(i1 - i);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        _mm512_mask_storeu_ps(y + i, m, j->tanh_form ? kn_v16_gelu_tanh(v) : kn_v16_gelu_erf(v));
    }
#elif defined(FUSED_V8)
    if (j->tanh_form) KN_V8_MAP(y + i0, x + i0, i1 - i0, kn_v8_gelu_tanh);
    else KN_V8_MAP(y + i0, x + i0, i1 - i0, kn_v8_gelu_erf);
#else
    if (j->tanh_form)
        for (int64_t i = i0; i < i1; i++) y[i] = gelu_tanh(x[i]);
    else
        for (int64_t i = i0; i < i1; i++) y[i] = gelu_erf(x[i]);
#endif
}

static kiln_status run_gelu(kn_kernel_ctx *c) {
    fused_prm local;
    const fused_prm *p;
    KN_TRY(read_params(c, &local, &p));
    gelu_job j = {c->in[0]->data, c->out[0]->data, p->gelu_tanh};
    kn_parallel_for(c->pool, kn_tensor_count(c->in[0]), KN_EW_GRAIN, gelu_range, &j);
    return KILN_OK;
}

const kn_cpu_kernel kn_cpu_fused[] = {
    {"kiln", "FusedConv", run_fused_conv, fused_conv_supports, KN_KERNEL_OVERWRITES, KN_PARAMS(fused_prepare, fused_prm)},
    /* the Gemm / MatMul kernel writes every element, the epilogue then rewrites them in place */
    {"kiln", "FusedGemm", run_fused_gemm, kn_fused_supports_f32, KN_KERNEL_OVERWRITES, KN_PARAMS(fused_prepare, fused_prm)},
    {"kiln", "FusedMatMul", run_fused_matmul, kn_fused_supports_f32, KN_KERNEL_OVERWRITES,
     KN_PARAMS(fused_prepare, fused_prm)},
    {"kiln", "Gelu", run_gelu, kn_fused_supports_f32, KN_KERNEL_OVERWRITES, KN_PARAMS(fused_prepare, fused_prm)},
    {"kiln", "LayerNormalization", kn_cpu_fused_layernorm, kn_fused_supports_f32, KN_KERNEL_OVERWRITES,
     KN_PARAMS(kn_norm_rows_prepare, kn_norm_rows_prm)},
    {"kiln", "RMSNormalization", kn_cpu_fused_rmsnorm, kn_fused_supports_f32, KN_KERNEL_OVERWRITES,
     KN_PARAMS(kn_norm_rows_prepare, kn_norm_rows_prm)},
    {"kiln", "Attention", kn_cpu_fused_attention, kn_cpu_fused_attention_supports, KN_KERNEL_OVERWRITES,
     KN_PARAMS(kn_cpu_fused_attention_prepare, kn_cpu_attn_prm)},
    {"kiln", "FusedElementwise", kn_cpu_fused_elementwise, kn_cpu_fused_elementwise_supports, KN_KERNEL_OVERWRITES,
     KN_PARAMS(kn_chain_prepare, kn_chain_prm)},
    {"kiln", "SqueezeExcite", kn_cpu_fused_squeeze_excite, kn_fused_supports_f32, KN_KERNEL_OVERWRITES,
     KN_PARAMS(kn_cpu_squeeze_excite_prepare, kn_cpu_se_prm)},
    {0},
};

/* CPU kernels of the linalg family: MatMul, Gemm, MatMulInteger, QLinearMatMul here; the
 * convolutions, pools and Einsum in conv.c, pool.c and einsum.c; the float GEMM in sgemm.c.
 *
 * float32 runs through kn_sgemm without copying operands; float16/bfloat16 are converted to
 * float32 around it (vectorised; a constant B once per session); the 8-bit products through
 * kn_qgemm_run (qgemm.h, exact); double and int32/int64 use plain loops (rare in models). */
#include "backend/cpu/const_cache.h"
#include "backend/cpu/conv_int_dw.h"
#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/linalg_impl.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/qgemm_amx.h"
#include "backend/cpu/sgemm.h"
#include "util/aligned.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ shared helpers */

const float *kn_linalg_f32_in(const kn_tensor *t, bool *owned) {
    *owned = false;
    if (t->dtype == KILN_DTYPE_FLOAT) return t->data;
    int64_t n = kn_tensor_count(t);
    float *f = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!f) return NULL;
    *owned = true;
    switch (t->dtype) {
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: kn_ew_half_to_f32(t->dtype, t->data, f, n); break;
    case KILN_DTYPE_DOUBLE:
        for (int64_t i = 0; i < n; i++) f[i] = (float)((const double *)t->data)[i];
        break;
    default:
        for (int64_t i = 0; i < n; i++) f[i] = (float)kn_tensor_get_f64(t, i);
        break;
    }
    return f;
}

void kn_linalg_f32_out(const float *src, kn_tensor *t, int64_t n) {
    switch (t->dtype) {
    case KILN_DTYPE_FLOAT:
        if (src != t->data) memcpy(t->data, src, sizeof(float) * (size_t)n);
        break;
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: kn_ew_f32_to_half(t->dtype, src, t->data, n); break;
    case KILN_DTYPE_DOUBLE:
        for (int64_t i = 0; i < n; i++) ((double *)t->data)[i] = src[i];
        break;
    default:
        for (int64_t i = 0; i < n; i++) kn_tensor_set_f64(t, i, src[i]);
        break;
    }
}

double kn_linalg_qparam(const kn_tensor *t, int64_t i) {
    if (!t) return 0;
    int64_t n = kn_tensor_count(t);
    if (n <= 0) return 0;
    return kn_tensor_get_f64(t, n == 1 ? 0 : i < n ? i : n - 1);
}

/* ------------------------------------------------------------------ batched matmul geometry */

/* numpy matmul: 1-D operands are promoted (and the unit dim dropped from the result); the batch
 * dims broadcast. Offsets are in elements. */
typedef struct mm_plan {
    int64_t M, N, K, batch;
    int nb;                                     /* output batch rank */
    int64_t ob[KILN_MAX_RANK];                  /* output batch dims */
    int64_t sa[KILN_MAX_RANK], sb[KILN_MAX_RANK]; /* per output batch dim: element stride (0: broadcast) */
    bool b_batched;                             /* B has batch dims of its own */
} mm_plan;

static kiln_status mm_plan_make(const kn_kernel_ctx *c, const kn_tensor *A, const kn_tensor *B, mm_plan *p) {
    memset(p, 0, sizeof *p);
    int ra = A->rank, rb = B->rank;
    if (ra < 1 || rb < 1) return kn_kernel_error(c, KILN_ERR_SHAPE, "MatMul does not take scalars");
    p->M = ra >= 2 ? A->dims[ra - 2] : 1;
    p->K = A->dims[ra - 1];
    p->N = rb >= 2 ? B->dims[rb - 1] : 1;
    int64_t kb = rb >= 2 ? B->dims[rb - 2] : B->dims[0];
    if (kb != p->K)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "the inner dimensions differ (A's last dim %lld, B's %lld)",
                               (long long)p->K, (long long)kb);
    int na = ra > 2 ? ra - 2 : 0, nbb = rb > 2 ? rb - 2 : 0;
    p->nb = na > nbb ? na : nbb;
    p->b_batched = nbb > 0;
    int64_t stra = p->M * p->K, strb = p->K * p->N;
    p->batch = 1;
    for (int d = p->nb - 1; d >= 0; d--) {
        int ia = d - (p->nb - na), ib = d - (p->nb - nbb);
        int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return kn_kernel_error(c, KILN_ERR_SHAPE, "batch dims do not broadcast (%lld vs %lld)", (long long)da,
                                   (long long)db);
        p->ob[d] = da > db ? da : db;
        if (da == 0 || db == 0) p->ob[d] = 0;
        p->sa[d] = da == 1 ? 0 : stra;
        p->sb[d] = db == 1 ? 0 : strb;
        stra *= da;
        strb *= db;
        p->batch *= p->ob[d];
    }
    return KILN_OK;
}

static void mm_offsets(const mm_plan *p, int64_t bi, int64_t *ao, int64_t *bo) {
    int64_t a = 0, b = 0;
    for (int d = p->nb - 1; d >= 0; d--) {
        int64_t i = bi % p->ob[d];
        bi /= p->ob[d];
        a += i * p->sa[d];
        b += i * p->sb[d];
    }
    *ao = a;
    *bo = b;
}

/* A constant float32 weight operand B (input `input` of the node, its own data) packed whole for
 * the GEMM, once per session. Packing B per call costs as much as a large part of the product
 * when the rows are few (gpt2_tiny's 64 tokens: 15% faster prepacked). It was kept to 64 rows
 * once: bert_mini (128 rows) and vit_tiny (197) were 5-9% slower reading the prepacked copy from
 * memory than packing it per call, which also brings each block into cache just before the
 * micro-kernel reads it. On the 2-core EPYC (Zen 5) the prepacked copy wins there now (1 thread,
 * kiln bench p50: BERT-base s128 117-122 -> 100 ms, ViT-B/16 175-177 -> 158-160 ms; MatMul 128x768x768 in the
 * sweep 1.18 -> 1.01 of ONNX Runtime). Above 1024 rows packing per call is amortised (4096 rows x
 * 256 x 256: the same time either way) and the packed copy would only cost memory. NULL (pack
 * per call) when B is not such a constant. */
#ifndef KN_PACKED_B_MAX_M
#define KN_PACKED_B_MAX_M 1024
#endif
typedef struct packed_b_ctx {
    const float *B;
    int64_t ldb, N, K;
    bool trans;
} packed_b_ctx;

static void make_packed_b(const void *ctx, void *dst) {
    const packed_b_ctx *p = ctx;
    kn_sgemm_pack_b_full(p->B, p->ldb, p->trans, p->N, p->K, dst);
}

static bool is_half(kiln_dtype t) { return t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16; }

/* make function of a constant float16/bfloat16 operand's float copy (const_cache.h) */
static void half_make(const void *ctx, void *dst) {
    const kn_tensor *t = ctx;
    kn_ew_half_to_f32(t->dtype, t->data, dst, kn_tensor_count(t));
}

/* The session's float copy of a constant float16/bfloat16 input (layout 6), or NULL. */
static const float *const_half_as_f32(const kn_kernel_ctx *c, int input) {
    const kn_tensor *T = c->in[input];
    const int64_t n = kn_tensor_count(T);
    const kn_const_layout lay = {6, {n, T->dtype, 0, 0}};
    return kn_cpu_const_derived(c, input, &lay, sizeof(float) * (size_t)(n + 1), half_make, T);
}

static const float *const_packed_b(const kn_kernel_ctx *c, int input, const float *B, int64_t ldb, bool trans,
                                   int64_t M, int64_t N, int64_t K) {
    /* few rows (a classifier's Gemm, a recurrent cell's step at batch 1-15): the GEMM would pack
     * B per call, as costly as the product (a GRU decoder at batch 2: 40% of its time in
     * pack_b_panel); packed once, B is one stream per panel. Only up to 64 MB of weights: the
     * packed copy doubles them */
    const bool few = M < 16 && (double)N * (double)K <= 16.0 * 1024 * 1024;
    if ((M < 16 && !few) || M > KN_PACKED_B_MAX_M || input >= c->n_inputs || !c->in[input]) return NULL;
    /* float B read in place, or a float16/bfloat16 constant's float copy (kept: layout 6): packed
     * from it once too (MatMul 128x768x768 f16, 1 thread: pack_b was 13% of the time) */
    const kn_tensor *T = c->in[input];
    int kind = 4;
    if (T->dtype != KILN_DTYPE_FLOAT || B != T->data) {
        if (!is_half(T->dtype) || B != const_half_as_f32(c, input)) return NULL;
        kind = 16;
    }
    packed_b_ctx pc = {B, ldb, N, K, trans};
    kn_const_layout lay = {kind, {N, K, trans, ldb}};
    return kn_cpu_const_derived(c, input, &lay, sizeof(float) * kn_sgemm_packed_b_floats(N, K), make_packed_b, &pc);
}

/* One product C = alpha * op(A) op(B) + beta * C, with B pre-packed when it is a constant. */
static kiln_status gemm_one(kn_kernel_ctx *c, int b_input, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                            float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                            float *C, int64_t ldc) {
    const float *bpk = const_packed_b(c, b_input, B, ldb, tb, M, N, K);
    if (!bpk) return kn_sgemm(c->pool, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    const float *a1[1] = {A}, *b1[1] = {B}, *p1[1] = {bpk};
    float *c1[1] = {C};
    kn_sgemm_batch g = {.count = 1, .M = M, .N = N, .K = K, .trans_a = ta, .trans_b = tb, .alpha = alpha,
                        .beta = beta, .a = a1, .lda = lda, .b = b1, .ldb = ldb, .c = c1, .ldc = ldc, .b_packed = p1};
    return kn_sgemm_run(c->pool, &g);
}

/* float32 MatMul through the GEMM; A/B/C may be converted copies. */
static kiln_status mm_float(kn_kernel_ctx *c, const mm_plan *p, const float *A, const float *B, float *C) {
    if (p->batch == 0 || p->M == 0 || p->N == 0) return KILN_OK;
    int64_t ldb = p->N;
    if (!p->b_batched) {
        /* B is one matrix: stack every batch of A into one tall GEMM (A is dense) */
        kiln_status s = gemm_one(c, 1, false, false, p->M * p->batch, p->N, p->K, 1.0f, A, p->K, B, ldb, 0.0f, C, p->N);
        return s ? kn_kernel_error(c, s, "out of memory in the GEMM") : KILN_OK;
    }
    const float **ap = malloc(sizeof(float *) * (size_t)p->batch * 2);
    float **cp = malloc(sizeof(float *) * (size_t)p->batch);
    if (!ap || !cp) {
        free(ap);
        free(cp);
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    const float **bp = ap + p->batch;
    for (int64_t i = 0; i < p->batch; i++) {
        int64_t ao, bo;
        mm_offsets(p, i, &ao, &bo);
        ap[i] = A + ao;
        bp[i] = B + bo;
        cp[i] = C + i * p->M * p->N;
    }
    kn_sgemm_batch g = {.count = p->batch, .M = p->M, .N = p->N, .K = p->K, .alpha = 1.0f, .beta = 0.0f,
                        .a = ap, .lda = p->K, .b = bp, .ldb = ldb, .c = cp, .ldc = p->N};
    kiln_status s = kn_sgemm_run(c->pool, &g);
    free(ap);
    free(cp);
    return s ? kn_kernel_error(c, s, "out of memory in the GEMM") : KILN_OK;
}

/* Plain loops for the rare types. Element (i,k) of op(A) is A[i*sai + k*sak], (k,j) of op(B) is
 * B[k*sbk + j*sbj]; C is dense M x N. C = alpha*AB + beta*C. ACC accumulates (wrapping for ints);
 * TOD converts an accumulator to double. */
#define DEF_SLOW_GEMM(NAME, T, ACC, TOD)                                                            \
    static void NAME(const void *A_, int64_t sai, int64_t sak, const void *B_, int64_t sbk, int64_t sbj, \
                     void *C_, int64_t M, int64_t N, int64_t K, double alpha, double beta) {        \
        const T *A = A_;                                                                           \
        const T *B = B_;                                                                           \
        T *C = C_;                                                                                 \
        for (int64_t i = 0; i < M; i++)                                                            \
            for (int64_t j = 0; j < N; j++) {                                                      \
                ACC s = 0;                                                                         \
                for (int64_t k = 0; k < K; k++) s += (ACC)A[i * sai + k * sak] * (ACC)B[k * sbk + j * sbj]; \
                T *y = &C[i * N + j];                                                              \
                if (alpha == 1.0 && beta == 0.0) *y = (T)s;                                        \
                else *y = (T)(alpha * TOD(s) + (beta == 0.0 ? 0.0 : beta * (double)*y));          \
            }                                                                                      \
    }

#define TOD_F(s) ((double)(s))
#define TOD_S(s) ((double)(int64_t)(s))
DEF_SLOW_GEMM(slow_gemm_f64, double, double, TOD_F)
DEF_SLOW_GEMM(slow_gemm_i32, int32_t, uint64_t, TOD_S)
DEF_SLOW_GEMM(slow_gemm_i64, int64_t, uint64_t, TOD_S)
DEF_SLOW_GEMM(slow_gemm_u32, uint32_t, uint64_t, TOD_F)
DEF_SLOW_GEMM(slow_gemm_u64, uint64_t, uint64_t, TOD_F)

typedef void (*slow_gemm_fn)(const void *, int64_t, int64_t, const void *, int64_t, int64_t, void *, int64_t,
                             int64_t, int64_t, double, double);

static slow_gemm_fn slow_gemm_for(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_DOUBLE: return slow_gemm_f64;
    case KILN_DTYPE_INT32: return slow_gemm_i32;
    case KILN_DTYPE_INT64: return slow_gemm_i64;
    case KILN_DTYPE_UINT32: return slow_gemm_u32;
    case KILN_DTYPE_UINT64: return slow_gemm_u64;
    default: return NULL;
    }
}

/* ------------------------------------------------------------------ MatMul */

static kiln_status run_matmul(kn_kernel_ctx *c) {
    const kn_tensor *A = c->in[0], *B = c->in[1];
    kn_tensor *Y = c->out[0];
    if (A->dtype != B->dtype)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "A is %s but B is %s", kiln_dtype_name(A->dtype),
                               kiln_dtype_name(B->dtype));
    mm_plan p;
    KN_TRY(mm_plan_make(c, A, B, &p));
    if (kn_tensor_count(Y) != p.batch * p.M * p.N)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "output has %lld elements, expected %lld",
                               (long long)kn_tensor_count(Y), (long long)(p.batch * p.M * p.N));
    if (A->dtype == KILN_DTYPE_FLOAT) return mm_float(c, &p, A->data, B->data, Y->data);
    if (is_half(A->dtype)) {
        /* float16/bfloat16 through the float GEMM: a constant B converted once per session, A and
         * the output with the vectorised conversions */
        const int64_t na = kn_tensor_count(A), nb = kn_tensor_count(B), ny = kn_tensor_count(Y);
        const float *fb = const_half_as_f32(c, 1);
        float *buf = malloc(sizeof(float) * (size_t)(na + (fb ? 0 : nb) + ny + 1));
        if (!buf) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        float *fa = buf, *fy = buf + na;
        kn_ew_half_to_f32(A->dtype, A->data, fa, na);
        if (!fb) {
            float *t = fy + ny;
            kn_ew_half_to_f32(B->dtype, B->data, t, nb);
            fb = t;
        }
        kiln_status s = mm_float(c, &p, fa, fb, fy);
        if (s == KILN_OK) kn_ew_f32_to_half(Y->dtype, fy, Y->data, ny);
        free(buf);
        return s;
    }
    slow_gemm_fn fn = slow_gemm_for(A->dtype);
    if (!fn) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s", kiln_dtype_name(A->dtype));
    size_t es = kiln_dtype_size(A->dtype);
    for (int64_t i = 0; i < p.batch; i++) {
        int64_t ao, bo;
        mm_offsets(&p, i, &ao, &bo);
        fn((const char *)A->data + ao * es, p.K, 1, (const char *)B->data + bo * es, p.N, 1,
           (char *)Y->data + i * p.M * p.N * es, p.M, p.N, p.K, 1.0, 0.0);
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ Gemm */

/* Y[M,N] = C broadcast (C of rank <= 2, unidirectional), element size es. */
static void fill_broadcast(const kn_tensor *C, void *Y, int64_t M, int64_t N, size_t es) {
    int64_t cm = C->rank == 2 ? C->dims[0] : 1;
    int64_t cn = C->rank >= 1 ? C->dims[C->rank - 1] : 1;
    for (int64_t i = 0; i < M; i++) {
        const char *crow = (const char *)C->data + (size_t)((cm == 1 ? 0 : i) * cn) * es;
        char *yrow = (char *)Y + (size_t)(i * N) * es;
        if (cn == N) memcpy(yrow, crow, (size_t)N * es);
        else
            for (int64_t j = 0; j < N; j++) memcpy(yrow + (size_t)j * es, crow, es);
    }
}


static kiln_status run_gemm(kn_kernel_ctx *c) {
    const kn_tensor *A = c->in[0], *B = c->in[1];
    const kn_tensor *C = c->n_inputs > 2 ? c->in[2] : NULL;
    kn_tensor *Y = c->out[0];
    KN_CTX_PRM(c, kn_gemm_attrs_prepare, kn_gemm_attrs, prm);
    const bool ta = prm->ta, tb = prm->tb;
    const float alpha = prm->alpha, beta = prm->beta;
    if (A->rank != 2 || B->rank != 2) return kn_kernel_error(c, KILN_ERR_SHAPE, "A and B must be 2-D");
    int64_t M = ta ? A->dims[1] : A->dims[0], K = ta ? A->dims[0] : A->dims[1];
    int64_t kb = tb ? B->dims[1] : B->dims[0], N = tb ? B->dims[0] : B->dims[1];
    if (K != kb)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "K=%lld after transA=%d but K=%lld after transB=%d", (long long)K,
                               (int)ta, (long long)kb, (int)tb);
    if (Y->rank != 2 || Y->dims[0] != M || Y->dims[1] != N)
        return kn_kernel_error(c, KILN_ERR_INTERNAL, "output shape does not match [M,N]");
    if (C && C->rank > 2) return kn_kernel_error(c, KILN_ERR_SHAPE, "C must be at most 2-D");
    if (C && C->dtype != A->dtype)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "C is %s but A is %s", kiln_dtype_name(C->dtype),
                               kiln_dtype_name(A->dtype));
    bool use_c = C && beta != 0.0f && kn_tensor_count(C) > 0;
    if (M == 0 || N == 0) return KILN_OK;

    if (A->dtype == KILN_DTYPE_FLOAT || is_half(A->dtype)) {
        bool oa = false, ob = false, oc = false;
        const float *fa = kn_linalg_f32_in(A, &oa), *fb = kn_linalg_f32_in(B, &ob);
        const float *fc = use_c ? kn_linalg_f32_in(C, &oc) : NULL;
        float *fy = A->dtype == KILN_DTYPE_FLOAT ? Y->data : malloc(sizeof(float) * (size_t)(M * N));
        kiln_status s = KILN_OK;
        if (!fa || !fb || (use_c && !fc) || !fy) s = kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        else {
            if (use_c) {
                kn_tensor cv = *C;
                cv.data = (void *)fc;
                fill_broadcast(&cv, fy, M, N, sizeof(float));
            }
            s = gemm_one(c, 1, ta, tb, M, N, K, alpha, fa, A->dims[1], fb, B->dims[1], use_c ? beta : 0.0f, fy, N);
            if (s) s = kn_kernel_error(c, s, "out of memory in the GEMM");
            else if (fy != Y->data) kn_linalg_f32_out(fy, Y, M * N);
        }
        if (oa) free((void *)fa);
        if (ob) free((void *)fb);
        if (oc) free((void *)fc);
        if (fy && fy != Y->data) free(fy);
        return s;
    }
    slow_gemm_fn fn = slow_gemm_for(A->dtype);
    if (!fn) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s", kiln_dtype_name(A->dtype));
    if (use_c) fill_broadcast(C, Y->data, M, N, kiln_dtype_size(A->dtype));
    int64_t lda = A->dims[1], ldb = B->dims[1];
    fn(A->data, ta ? 1 : lda, ta ? lda : 1, B->data, tb ? 1 : ldb, tb ? ldb : 1, Y->data, M, N, K, alpha,
       use_c ? beta : 0.0);
    return KILN_OK;
}

/* ------------------------------------------------------------------ integer matmuls */

/* Zero points as int32: one (*one) or n of them (into many) */
static void zero_points(const kn_tensor *zp, int64_t n, int32_t *one, int32_t *many) {
    const int64_t nz = zp ? kn_tensor_count(zp) : 0;
    *one = nz == 1 ? (int32_t)kn_tensor_get_i64(zp, 0) : 0;
    if (nz > 1) kn_q_int32_values(zp, n, many);
}

/* B (K x N, 8-bit) packed whole for the integer GEMM (its zero points apply as it runs) */
typedef struct qmm_b_ctx {
    const void *b;
    int64_t K, N;
} qmm_b_ctx;

static void make_qmm_b(const void *ctx, void *dst) {
    const qmm_b_ctx *q = ctx;
    kn_qgemm_pack_b8(q->b, q->N, 1, q->K, 0, q->N, dst);
}

/* B (K x N, 8-bit) in kn_qgemm8's u8 x s8 pair form (qgemm.h), or whether its pairs allow it */
typedef struct qmm_b8_ctx {
    const void *b;
    bool s8;
    int64_t K, N;
} qmm_b8_ctx;

static void make_qmm_b8(const void *ctx, void *dst) {
    const qmm_b8_ctx *q = ctx;
    kn_qgemv8_pack(q->b, q->s8, q->K, q->N, dst);
}

static void make_qmm_b8_fits(const void *ctx, void *dst) {
    const qmm_b8_ctx *q = ctx;
    *(int32_t *)dst = kn_qgemv8_fits(q->b, q->s8, q->K, q->N);
}

const void *kn_linalg_qgemm8_b(const kn_kernel_ctx *c, int input, const kn_tensor *B, int64_t K, int64_t N) {
    const bool s8 = B->dtype == KILN_DTYPE_INT8;
    qmm_b8_ctx bc = {B->data, s8, K, N};
    const kn_const_layout fits_lay = {63, {K, N, s8, 0}}, lay = {62, {K, N, s8, 0}};
    const int32_t *fits = kn_cpu_const_derived(c, input, &fits_lay, sizeof(int32_t), make_qmm_b8_fits, &bc);
    if (!fits || !*fits) return NULL;
    const void *w8 = kn_cpu_const_derived(c, input, &lay, kn_qgemv8_bytes(K, N), make_qmm_b8, &bc);
    return w8 && kn_qgemv8_usable(w8) ? w8 : NULL;
}

/* B (K x N, 8-bit, or N x K when tb) packed for the AMX-INT8 tiles (qgemm_amx.h) */
typedef struct qmm_amx_b_ctx {
    const void *b;
    bool s8, tb;
    int64_t K, N;
} qmm_amx_b_ctx;

static void make_qmm_amx_b(const void *ctx, void *dst) {
    const qmm_amx_b_ctx *q = ctx;
    kn_qgemm_amx_pack_b(q->b, q->s8, q->tb ? 1 : q->N, q->tb ? q->K : 1, q->K, q->N, dst);
}

const uint8_t *kn_linalg_qgemm_amx_b(const kn_kernel_ctx *c, int input, const kn_tensor *B, int64_t K, int64_t N,
                                     bool tb) {
    qmm_amx_b_ctx bc = {B->data, B->dtype == KILN_DTYPE_INT8, tb, K, N};
    const kn_const_layout lay = {67, {K, N, bc.s8, tb}};
    return kn_cpu_const_derived(c, input, &lay, kn_qgemm_amx_b_bytes(N, K), make_qmm_amx_b, &bc);
}

/* int_matmul on the AMX-INT8 tiles: A's rows as they are, B packed for the tiles (once per
 * session when constant), the zero points per tensor or per row / column */
static kiln_status int_matmul_amx(kn_kernel_ctx *c, const kn_tensor *A, const kn_tensor *B, int b_in,
                                  const kn_tensor *za, const kn_tensor *zb, int32_t *acc, const mm_plan *p, int64_t tall,
                                  int64_t rows) {
    const int64_t nza = za ? kn_tensor_count(za) : 0, nzb = zb ? kn_tensor_count(zb) : 0;
    int32_t *zr = malloc(sizeof(int32_t) * (size_t)(rows + p->N)), *zc = zr ? zr + rows : NULL, za1, zb1;
    if (!zr) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    zero_points(za, p->M, &za1, zr);
    for (int64_t i = p->M; nza > 1 && i < rows; i++) zr[i] = zr[i - p->M];
    zero_points(zb, p->N, &zb1, zc);
    const uint8_t *kept = p->b_batched ? NULL : kn_linalg_qgemm_amx_b(c, b_in, B, p->K, p->N, false);
    uint8_t *own = kept ? NULL : kn_aligned_alloc(64, kn_qgemm_amx_b_bytes(p->N, p->K));
    kiln_status st = kept || own ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    for (int64_t bi = 0; st == KILN_OK && bi < p->batch; bi += tall) {
        int64_t ao, bo;
        mm_offsets(p, bi, &ao, &bo);
        if (!kept)
            kn_qgemm_amx_pack_b((const int8_t *)B->data + bo, B->dtype == KILN_DTYPE_INT8, p->N, 1, p->K, p->N, own);
        kn_qgemm_amx_args g = {.M = rows, .N = p->N, .K = p->K, .a = (const int8_t *)A->data + ao, .lda = p->K,
                               .a_signed = A->dtype == KILN_DTYPE_INT8, .za_rows = nza > 1 ? zr : NULL, .za = za1,
                               .b = kept ? kept : own, .b_signed = B->dtype == KILN_DTYPE_INT8,
                               .zb_cols = nzb > 1 ? zc : NULL, .zb = zb1, .c = acc + bi * p->M * p->N, .ldc = p->N};
        st = kn_qgemm_amx_run(c->pool, &g);
    }
    free(zr);
    free(own);
    return st ? kn_kernel_error(c, st, "out of memory") : KILN_OK;
}

/* acc[b][i][j] = sum_k (A - za[i]) (B - zb[j]) with numpy batch broadcasting, into int32, exact
 * (qgemm.h). A, B and their zero points are inputs a_in, b_in, za_in, zb_in (a zero point past
 * the inputs: none). A constant B is packed once per session (its zero points apply as it runs);
 * with A uint8 and one zero point each, in kn_qgemm8's form where its pairs allow (the u8 x s8
 * product DynamicQuantizeLSTM uses: one or two rows a pass from A's own bytes, exact through its
 * residual pairs), else kn_qgemm's. */
static kiln_status int_matmul(kn_kernel_ctx *c, int a_in, int b_in, int za_in, int zb_in, int32_t *acc, mm_plan *p) {
    const kn_tensor *A = c->in[a_in], *B = c->in[b_in];
    const kn_tensor *za = za_in < c->n_inputs ? c->in[za_in] : NULL, *zb = zb_in < c->n_inputs ? c->in[zb_in] : NULL;
    KN_TRY(mm_plan_make(c, A, B, p));
    int64_t nza = za ? kn_tensor_count(za) : 0, nzb = zb ? kn_tensor_count(zb) : 0;
    if (nza > 1 && nza != p->M)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "a_zero_point has %lld values; expected 1 or M=%lld", (long long)nza,
                               (long long)p->M);
    if (nzb > 1 && nzb != p->N)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "b_zero_point has %lld values; expected 1 or N=%lld", (long long)nzb,
                               (long long)p->N);
    if (p->batch == 0 || p->M == 0 || p->N == 0) return KILN_OK;
    /* B one matrix: every batch of A (then dense) as one tall product */
    const int64_t tall = p->b_batched ? 1 : p->batch, rows = p->M * tall;
    const bool as8 = A->dtype == KILN_DTYPE_INT8, bs8 = B->dtype == KILN_DTYPE_INT8;
    if (kn_qgemm_amx_pays(rows, p->N, p->K)) return int_matmul_amx(c, A, B, b_in, za, zb, acc, p, tall, rows);
    if (!p->b_batched && !as8 && nza <= 1 && nzb <= 1) {
        const void *w8 = kn_linalg_qgemm8_b(c, b_in, B, p->K, p->N);
        if (w8) {
            const int32_t za1 = nza ? (int32_t)kn_tensor_get_i64(za, 0) : 0, zb1 = nzb ? (int32_t)kn_tensor_get_i64(zb, 0) : 0;
            kiln_status st = KILN_OK;
            for (int64_t bi = 0; st == KILN_OK && bi < p->batch; bi += tall) {
                int64_t ao, bo;
                mm_offsets(p, bi, &ao, &bo);
                st = kn_qgemm8_run(c->pool, w8, (const uint8_t *)A->data + ao, p->K, rows, za1, zb1, bs8,
                                   acc + bi * p->M * p->N, p->N, NULL);
            }
            return st ? kn_kernel_error(c, st, "out of memory") : KILN_OK;
        }
    }
    int32_t *zr = malloc(sizeof(int32_t) * (size_t)(rows + p->N)), *zc = zr ? zr + rows : NULL, za1, zb1;
    int32_t *pa = kn_aligned_alloc(64, sizeof(int32_t) * kn_qgemm_a_words(rows, p->K));
    if (!zr || !pa) {
        free(zr);
        free(pa);
        return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    zero_points(za, p->M, &za1, zr);
    for (int64_t i = p->M; nza > 1 && i < rows; i++) zr[i] = zr[i - p->M];
    zero_points(zb, p->N, &zb1, zc);
    const size_t b_bytes = kn_qgemm_b_bytes(p->N, p->K);
    qmm_b_ctx bc = {B->data, p->K, p->N};
    const uint8_t *kept = NULL;
    if (!p->b_batched) { /* the packed form depends on B alone */
        kn_const_layout lay = {60, {p->K, p->N, 0, 0}};
        kept = kn_cpu_const_derived(c, b_in, &lay, b_bytes, make_qmm_b, &bc);
    }
    uint8_t *pb = kept ? NULL : kn_aligned_alloc(64, b_bytes);
    kiln_status st = kept || pb ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    for (int64_t bi = 0; st == KILN_OK && bi < p->batch; bi += tall) {
        int64_t ao, bo;
        mm_offsets(p, bi, &ao, &bo);
        kn_qgemm_pack_a8((const int8_t *)A->data + ao, as8, p->K, 1, rows, p->K, nza > 1 ? zr : NULL, za1, pa);
        if (!kept) {
            bc.b = (const int8_t *)B->data + bo;
            make_qmm_b(&bc, pb);
        }
        kn_qgemm g = {.M = rows, .N = p->N, .K = p->K, .a = pa, .b = kept ? kept : pb, .b_signed = bs8,
                      .zb_cols = nzb > 1 ? zc : NULL, .zb = zb1, .c = acc + bi * p->M * p->N, .ldc = p->N};
        st = kn_qgemm_run(c->pool, &g);
    }
    free(zr);
    free(pa);
    free(pb);
    return st ? kn_kernel_error(c, st, "out of memory") : KILN_OK;
}

static kiln_status run_matmul_integer(kn_kernel_ctx *c) {
    mm_plan p;
    return int_matmul(c, 0, 1, 2, 3, c->out[0]->data, &p);
}

/* a_scale * b_scale / y_scale in the scales' own precision (numpy computes it that way) */
static double scale_ratio(const kn_tensor *sa, int64_t ia, const kn_tensor *sb, int64_t ib, const kn_tensor *sy) {
    double a = kn_linalg_qparam(sa, ia), b = kn_linalg_qparam(sb, ib), y = kn_linalg_qparam(sy, 0);
    if (sa->dtype == KILN_DTYPE_FLOAT16) {
        float ab = kn_f16_to_f32(kn_f32_to_f16((float)a * (float)b));
        return kn_f16_to_f32(kn_f32_to_f16(ab / (float)y));
    }
    if (sa->dtype == KILN_DTYPE_DOUBLE) return a * b / y;
    return (double)((float)((float)a * (float)b) / (float)y);
}

/* Rounds and saturates to the output type; NaN (a zero or NaN scale) gives the type's minimum,
 * as ONNX Runtime's requantisation does on x86 (and as QuantizeLinear here), never a cast of NaN. */
static double saturate_q(double v, kiln_dtype t) {
    double lo = t == KILN_DTYPE_INT8 ? -128 : 0, hi = t == KILN_DTYPE_INT8 ? 127 : 255;
    if (v != v) return lo;
    v = nearbyint(v);
    return v < lo ? lo : v > hi ? hi : v;
}

/* QLinearMatMul's requantisation by rows of N: the ratios a row needs worked out once (a_scale per
 * tensor or per row, b_scale per tensor or per column) and the row through kn_q_requant(_cols),
 * which computes acc * r + zy in double and rounds as saturate_q does. Each ratio is a float (or
 * float16) value when the scales are float or float16, so passing it as float is exact. */
typedef struct qmm_requant {
    const int32_t *acc;
    void *y;
    bool s8;
    int64_t M, N;
    const float *r_cols; /* N ratios (b_scale per column), or NULL */
    const kn_tensor *sa, *sb, *sy;
    double zy;
} qmm_requant;

static void qmm_requant_rows(void *arg, int64_t r0, int64_t r1) {
    const qmm_requant *q = arg;
    const bool per_row = kn_tensor_count(q->sa) > 1;
    for (int64_t r = r0; r < r1; r++) {
        const int32_t *a = q->acc + r * q->N;
        void *out = (uint8_t *)q->y + r * q->N;
        if (q->r_cols) kn_q_requant_cols(a, q->N, q->r_cols, q->zy, q->s8, out);
        else kn_q_requant(a, q->N, (float)scale_ratio(q->sa, per_row ? r % q->M : 0, q->sb, 0, q->sy), q->zy, q->s8, out);
    }
}

static kiln_status run_qlinear_matmul(kn_kernel_ctx *c) {
    const kn_tensor *sa = c->in[1], *sb = c->in[4], *sy = c->in[6], *zy = c->n_inputs > 7 ? c->in[7] : NULL;
    kn_tensor *Y = c->out[0];
    if (Y->dtype != KILN_DTYPE_INT8 && Y->dtype != KILN_DTYPE_UINT8)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "output type %s", kiln_dtype_name(Y->dtype));
    int64_t n = kn_tensor_count(Y);
    int32_t *acc = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!acc) return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    mm_plan p;
    kiln_status s = int_matmul(c, 0, 3, 2, 5, acc, &p);
    const int64_t nsa = kn_tensor_count(sa), nsb = kn_tensor_count(sb);
    const bool float_scales = sa->dtype != KILN_DTYPE_DOUBLE && sb->dtype != KILN_DTYPE_DOUBLE;
    if (s == KILN_OK && n > 0 && float_scales && (nsa == 1 || nsb == 1)) {
        float *r_cols = nsb > 1 ? malloc(sizeof(float) * (size_t)p.N) : NULL;
        if (nsb > 1 && !r_cols) {
            free(acc);
            return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
        for (int64_t j = 0; r_cols && j < p.N; j++) r_cols[j] = (float)scale_ratio(sa, 0, sb, j, sy);
        qmm_requant q = {acc, Y->data, Y->dtype == KILN_DTYPE_INT8, p.M, p.N, r_cols, sa, sb, sy,
                         kn_linalg_qparam(zy, 0)};
        kn_parallel_for(c->pool, n / p.N, (16384 + p.N - 1) / p.N, qmm_requant_rows, &q);
        free(r_cols);
        free(acc);
        return KILN_OK;
    }
    if (s == KILN_OK) { /* double scales, or per-row and per-column together */
        for (int64_t e = 0; e < n; e++) {
            int64_t j = e % p.N, i = (e / p.N) % p.M;
            double r = scale_ratio(sa, nsa > 1 ? i : 0, sb, nsb > 1 ? j : 0, sy);
            double v = saturate_q((double)acc[e] * r + kn_linalg_qparam(zy, 0), Y->dtype);
            if (Y->dtype == KILN_DTYPE_INT8) ((int8_t *)Y->data)[e] = (int8_t)v;
            else ((uint8_t *)Y->data)[e] = (uint8_t)v;
        }
    }
    free(acc);
    return s;
}

/* ------------------------------------------------------------------ table */

const kn_cpu_kernel kn_cpu_linalg[] = {
    /* MatMul and Gemm write each output element: the GEMM with beta 0 (zeros for K == 0, sgemm.c
     * scale_c), C broadcast first where Gemm adds it, the plain loops with beta 0 */
    {"", "MatMul", run_matmul, NULL, KN_KERNEL_OVERWRITES},
    {"", "MatMulInteger", run_matmul_integer, NULL, KN_KERNEL_OVERWRITES}, /* kn_qgemm_run writes each element */
    {"", "QLinearMatMul", run_qlinear_matmul, NULL, KN_KERNEL_OVERWRITES}, /* every row requantised, or every element */
    {"", "Gemm", run_gemm, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_gemm_attrs_prepare, kn_gemm_attrs)},
    {"", "Einsum", kn_cpu_einsum, NULL, 0, KN_PARAMS(kn_einsum_prepare, kn_einsum_prm)},
    {"", "Conv", kn_cpu_conv, NULL, KN_KERNEL_OVERWRITES}, /* every path writes each output element */
    {"", "ConvInteger", kn_cpu_conv_integer, NULL, KN_KERNEL_OVERWRITES}, /* the bias or 0, then the products */
    /* the fused epilogues (AMX, depthwise) or the requantisation after the sums write each output */
    {"", "QLinearConv", kn_cpu_qlinear_conv, NULL, KN_KERNEL_OVERWRITES},
    {"", "ConvTranspose", kn_cpu_conv_transpose, NULL},
    {"", "Col2Im", kn_cpu_col2im, NULL},
    {"", "DeformConv", kn_cpu_deform_conv, NULL, 0, KN_PARAMS(kn_cpu_deform_conv_prepare, kn_cpu_deform_prm)},
    /* the pools write each output element (and MaxPool's Indices): the general loop every window's,
     * empty ones included; the separable and 16-bit paths every plane's rows; NHWC copies all of Y.
     * Not zeroed first: at 16 threads the caller's serial memset of MaxPool's output (200-400 KB)
     * left every line of it in its own cache, modified, for the workers to pull over */
    {"", "MaxPool", kn_cpu_max_pool, NULL, KN_KERNEL_OVERWRITES},
    {"", "AveragePool", kn_cpu_average_pool, NULL, KN_KERNEL_OVERWRITES},
    {"kiln", "MaxPool", kn_cpu_max_pool_layout, NULL, KN_KERNEL_OVERWRITES},
    {"kiln", "AveragePool", kn_cpu_average_pool_layout, NULL, KN_KERNEL_OVERWRITES},
    {"", "LpPool", kn_cpu_lp_pool, NULL, KN_KERNEL_OVERWRITES},
    {"", "GlobalAveragePool", kn_cpu_global_average_pool, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_gpool_prepare, kn_cpu_gpool_prm)},
    {"", "GlobalMaxPool", kn_cpu_global_max_pool, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_gpool_prepare, kn_cpu_gpool_prm)},
    {"", "GlobalLpPool", kn_cpu_global_lp_pool, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_gpool_prepare, kn_cpu_gpool_prm)},
    {"", "MaxUnpool", kn_cpu_max_unpool, NULL},
    {0},
};

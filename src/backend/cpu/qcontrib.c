/* CPU kernels of the quantised com.microsoft matrix products: MatMulNBits, DynamicQuantizeMatMul,
 * MatMulIntegerToFloat and QGemm, as ONNX Runtime computes them (the family's table is at the
 * end; the QLinear elementwise/pool/concat/softmax kernels are in qcontrib_linear.c).
 *
 * Every product goes through kiln's packed float GEMM (sgemm.h). MatMulNBits dequantises its
 * block-wise weights to float once (kept per session when they are constants) and runs a float
 * GEMM, as ONNX Runtime's fp32 compute type does. The integer products run with the operands'
 * zero points subtracted, as floats holding small integers: with |a|, |b| <= 255 a sum of 256
 * products stays below 2^24, so the GEMM runs over slices of 256 along K and every partial sum is
 * exact; the int32 accumulator is then scaled (and requantised) as ONNX Runtime's output
 * processors do, in float32 with rounding half to even. */
#include "backend/cpu/const_cache.h"
#include "backend/cpu/contrib_impl.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/linalg_impl.h"
#include "backend/cpu/nn_internal.h"
#include "backend/cpu/qcontrib_impl.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/qgemm_amx.h"
#include "backend/cpu/sgemm.h"
#include "ops/attention.h"
#include "ops/qcontrib.h"
#include "util/aligned.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MS "com.microsoft"

const kn_tensor *kn_qc_opt(const kn_kernel_ctx *c, int i) { return i < c->n_inputs ? c->in[i] : NULL; }

int32_t kn_qc_q(const kn_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_INT8 ? ((const int8_t *)t->data)[i] : ((const uint8_t *)t->data)[i];
}

/* A scale as float (float or float16). */
float kn_qc_scale(const kn_tensor *t, int64_t i) {
    if (t->dtype == KILN_DTYPE_FLOAT16) return kn_f16_to_f32(((const uint16_t *)t->data)[i]);
    if (t->dtype == KILN_DTYPE_DOUBLE) return (float)((const double *)t->data)[i];
    return ((const float *)t->data)[i];
}

/* Per-tensor (one element) or per-column (n elements) parameter t: checks its size. */
static kiln_status per_col(kn_kernel_ctx *c, const kn_tensor *t, const char *name, int64_t n) {
    if (!t) return KILN_OK;
    int64_t k = kn_tensor_count(t);
    if (k != 1 && (k != n || t->rank != 1))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "%s has %lld elements; it must be a scalar or 1-D of N=%lld", name,
                               (long long)k, (long long)n);
    return KILN_OK;
}

static kiln_status one(kn_kernel_ctx *c, const kn_tensor *t, const char *name) {
    if (t && kn_tensor_count(t) != 1)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "%s has %lld elements; it must be a scalar or a 1-element tensor", name,
                               (long long)kn_tensor_count(t));
    return KILN_OK;
}

static kiln_status oom(kn_kernel_ctx *c) { return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory"); }

static bool is_q8_t(const kn_tensor *t) { return t->dtype == KILN_DTYPE_UINT8 || t->dtype == KILN_DTYPE_INT8; }

/* ------------------------------------------------------------------ integer GEMM (qgemm.h) */

/* B (K x N, or N x K when tb) packed for kn_qgemm (its zero points apply as the product runs) */
typedef struct qb_ctx {
    const kn_tensor *B;
    int64_t K, N;
    bool tb;
} qb_ctx;

static void make_qb(const void *ctx, void *dst) {
    const qb_ctx *p = ctx;
    kn_qgemm_pack_b8(p->B->data, p->tb ? 1 : p->N, p->tb ? p->K : 1, p->K, 0, p->N, dst);
}

/* acc (M x N) = (A - za) x op(B - zb): A, M x K 8-bit values (K x M when ta); B input bi and its
 * zero point input zi (-1: none); a constant B packed once per session. With A uint8 in rows, B
 * not transposed and one zero point (or N equal ones: symmetric per-channel weights), in
 * kn_qgemm8's exact u8 x s8 form where B's pairs allow it (A's own bytes, no int16 packing). */
static kiln_status qproduct(kn_kernel_ctx *c, const void *a, bool as8, bool ta, int32_t za, int64_t M, int64_t K, int bi,
                            int zi, int64_t N, bool tb, int32_t *acc) {
    const kn_tensor *B = c->in[bi], *zp = zi >= 0 ? kn_qc_opt(c, zi) : NULL;
    const int64_t nz = zp ? kn_tensor_count(zp) : 0;
    int32_t *zc = nz > 1 ? malloc(sizeof(int32_t) * (size_t)N) : NULL;
    if (zc) kn_q_int32_values(zp, N, zc);
    bool one_zb = !(nz > 1 && !zc);
    for (int64_t j = 1; zc && one_zb && j < N; j++) one_zb = zc[j] == zc[0];
    if (!ta && !(nz > 1 && !zc) && kn_qgemm_amx_pays(M, N, K)) { /* AMX-INT8's tiles (qgemm_amx.h) */
        const uint8_t *kept = kn_linalg_qgemm_amx_b(c, bi, B, K, N, tb);
        uint8_t *bown = kept ? NULL : kn_aligned_alloc(64, kn_qgemm_amx_b_bytes(N, K));
        kiln_status st = kept || bown ? KILN_OK : oom(c);
        if (bown) kn_qgemm_amx_pack_b(B->data, B->dtype == KILN_DTYPE_INT8, tb ? 1 : N, tb ? K : 1, K, N, bown);
        if (st == KILN_OK) {
            kn_qgemm_amx_args g = {.M = M, .N = N, .K = K, .a = a, .lda = K, .a_signed = as8, .za = za,
                                   .b = kept ? kept : bown, .b_signed = B->dtype == KILN_DTYPE_INT8, .zb_cols = zc,
                                   .zb = nz == 1 ? kn_qc_q(zp, 0) : 0, .c = acc, .ldc = N};
            if ((st = kn_qgemm_amx_run(c->pool, &g)) != KILN_OK) st = kn_kernel_error(c, st, "out of memory in the GEMM");
        }
        free(zc);
        free(bown);
        return st;
    }
    if (!as8 && !ta && !tb && one_zb) {
        const void *w8 = kn_linalg_qgemm8_b(c, bi, B, K, N);
        if (w8) {
            const int32_t zb = zc ? zc[0] : nz == 1 ? kn_qc_q(zp, 0) : 0;
            free(zc);
            kiln_status st = kn_qgemm8_run(c->pool, w8, a, K, M, za, zb, B->dtype == KILN_DTYPE_INT8, acc, N, NULL);
            return st ? kn_kernel_error(c, st, "out of memory in the GEMM") : KILN_OK;
        }
    }
    qb_ctx qc = {B, K, N, tb};
    const size_t bbytes = kn_qgemm_b_bytes(N, K);
    kn_const_layout lay = {41, {K, N, tb, 0}};
    const uint8_t *pb = kn_cpu_const_derived(c, bi, &lay, bbytes, make_qb, &qc);
    uint8_t *own = NULL;
    if (!pb && (own = kn_aligned_alloc(64, bbytes))) {
        make_qb(&qc, own);
        pb = own;
    }
    int32_t *pa = kn_aligned_alloc(64, sizeof(int32_t) * kn_qgemm_a_words(M, K));
    kiln_status st = KILN_OK;
    if (!pb || !pa || (nz > 1 && !zc)) {
        st = oom(c);
    } else {
        kn_qgemm_pack_a8(a, as8, ta ? 1 : K, ta ? M : 1, M, K, NULL, za, pa);
        kn_qgemm g = {.M = M, .N = N, .K = K, .a = pa, .b = pb, .b_signed = B->dtype == KILN_DTYPE_INT8, .zb_cols = zc,
                      .zb = nz == 1 ? kn_qc_q(zp, 0) : 0, .c = acc, .ldc = N};
        if ((st = kn_qgemm_run(c->pool, &g)) != KILN_OK) st = kn_kernel_error(c, st, "out of memory in the GEMM");
    }
    free(zc);
    free(own);
    free(pa);
    return st;
}

/* ------------------------------------------------------------------ MatMulNBits */

typedef struct nbits_ctx {
    const kn_tensor *B, *scales, *zp, *gidx;
    int64_t K, N, bits, bs, kb;
    bool unscaled; /* W = q - zero point, the scales applied later (accuracy_level 4) */
    int64_t n0, n1; /* the rows of W made (row n at (n - n0) * K) */
} nbits_ctx;

/* W (N x K floats) = (q - zero point) * scale, block by block (or by g_idx). With g_idx, ONNX
 * Runtime (1.32, CPU) reads float zero points but not packed uint8 ones: those weights are
 * dequantised with the default zero point 2^(bits-1), and so are they here (g_idx is deprecated in
 * its documentation; models from its own quantiser do not carry it). */
static void make_nbits(const void *ctx, void *dst) {
    const nbits_ctx *p = ctx;
    float *W = dst;
    const uint8_t *B = p->B->data;
    const int64_t blob = p->bs * p->bits / 8, mask = (1 << p->bits) - 1, zrow = (p->kb * p->bits + 7) / 8;
    const int32_t *g = p->gidx ? p->gidx->data : NULL;
    const bool zq = p->zp && p->zp->dtype == KILN_DTYPE_UINT8 && !g;
    const float zdef = (float)(1 << (p->bits - 1));
    for (int64_t n = p->n0; n < p->n1; n++) {
        for (int64_t k = 0; k < p->K; k++) {
            int64_t b = k / p->bs, j = k % p->bs, off = j * p->bits;
            int q = (B[(n * p->kb + b) * blob + off / 8] >> (off % 8)) & mask;
            int64_t gb = g ? g[k] : b;
            float z = zdef;
            if (p->zp && (zq || p->zp->dtype != KILN_DTYPE_UINT8)) {
                if (zq) {
                    int64_t zo = gb * p->bits;
                    z = (float)((((const uint8_t *)p->zp->data)[n * zrow + zo / 8] >> (zo % 8)) & mask);
                } else {
                    z = kn_qc_scale(p->zp, n * p->kb + gb);
                }
            }
            W[(n - p->n0) * p->K + k] = p->unscaled ? (float)q - z : ((float)q - z) * kn_qc_scale(p->scales, n * p->kb + gb);
        }
    }
}

/* A quantised per row and block to int8 as ONNX Runtime's int8 compute type does: aq (M x K)
 * holds the integers, sa (M x kb) the scales max|a| / 127. */
static void nbits_quantise_a(const float *A, int64_t M, int64_t K, int64_t bs, int64_t kb, float *aq, float *sa) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t b = 0; b < kb; b++) {
            int64_t k0 = b * bs, k1 = k0 + bs < K ? k0 + bs : K;
            float amax = 0.0f;
            for (int64_t k = k0; k < k1; k++) amax = fabsf(A[m * K + k]) > amax ? fabsf(A[m * K + k]) : amax;
            float inv = amax != 0.0f ? 127.0f / amax : 0.0f;
            sa[m * kb + b] = amax / 127.0f;
            for (int64_t k = k0; k < k1; k++) aq[m * K + k] = nearbyintf(A[m * K + k] * inv);
        }
}

/* The product for rows n0 .. n0+tn of W (W points at row n0; Y is M x N, written in columns n0..):
 * float32, or (aq set) sum over blocks b of dot(aq[m, b], W'[n, b]) * sa[m, b] * S[n, b], each
 * block's integer products through the float GEMM (|aq| <= 127, |w'| <= 255, blocks of at most
 * 256: sums below 2^24, exact). tmp: M x tn floats (int8 only). */
static kiln_status nbits_tile(kn_threadpool *pool, const float *A, const float *aq, const float *sa, const float *W,
                              const kn_tensor *S, int64_t M, int64_t N, int64_t K, int64_t bs, int64_t kb, int64_t n0,
                              int64_t tn, float *Y, float *tmp) {
    if (!aq) return kn_sgemm(pool, false, true, M, tn, K, 1.0f, A, K, W, K, 0.0f, Y + n0, N);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < tn; n++) Y[m * N + n0 + n] = 0.0f;
    for (int64_t b = 0; b < kb; b++) {
        int64_t k0 = b * bs, kc = K - k0 < bs ? K - k0 : bs;
        KN_TRY(kn_sgemm(pool, false, true, M, tn, kc, 1.0f, aq + k0, K, W + k0, K, 0.0f, tmp, tn));
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < tn; n++)
                Y[m * N + n0 + n] += tmp[m * tn + n] * (sa[m * kb + b] * kn_qc_scale(S, (n0 + n) * kb + b));
    }
    return KILN_OK;
}

/* Few rows of A (a decoder's token): the weights are read packed, block by block, never
 * dequantised into memory. Per (n, block): the block's codes unpacked to floats w, then for each
 * row m, dot(a, w) - zero point * sum(a), times the scale (and, int8, A's block scale); the dots
 * of integers are exact. */
typedef struct nbits_gemv {
    nbits_ctx pc;
    const float *A; /* float A, or the int8 codes aq */
    const float *sa, *asum; /* int8: A's block scales; sum of each (row, block) of A: M x kb */
    float *Y;
    int64_t M;
} nbits_gemv;

static void gemv_range(void *arg, int64_t n0, int64_t n1) {
    const nbits_gemv *g = arg;
    const nbits_ctx *p = &g->pc;
    const int64_t K = p->K, kb = p->kb, bs = p->bs, bits = p->bits, blob = bs * bits / 8, zrow = (kb * bits + 7) / 8;
    const uint8_t *B = p->B->data;
    const int mask = (1 << bits) - 1;
    float w[256];
    for (int64_t n = n0; n < n1; n++) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t b = 0; b < kb; b++) {
            const uint8_t *src = B + (n * kb + b) * blob;
            int64_t kc = K - b * bs < bs ? K - b * bs : bs;
            if (bits == 4)
                for (int64_t i = 0; i < bs / 2; i++) {
                    w[2 * i] = (float)(src[i] & 15);
                    w[2 * i + 1] = (float)(src[i] >> 4);
                }
            else if (bits == 8)
                for (int64_t i = 0; i < bs; i++) w[i] = (float)src[i];
            else
                for (int64_t i = 0; i < bs; i++) w[i] = (float)((src[i * bits / 8] >> ((i * bits) % 8)) & mask);
            float z = (float)(1 << (bits - 1));
            if (p->zp && p->zp->dtype == KILN_DTYPE_UINT8) {
                int64_t zo = b * bits;
                z = (float)((((const uint8_t *)p->zp->data)[n * zrow + zo / 8] >> (zo % 8)) & mask);
            } else if (p->zp) {
                z = kn_qc_scale(p->zp, n * kb + b);
            }
            float sc = kn_qc_scale(p->scales, n * kb + b);
            for (int64_t m = 0; m < g->M; m++) {
                const float *a = g->A + m * K + b * bs;
                float d[16] = {0};
                int64_t j = 0;
                for (; j + 16 <= kc; j += 16)
                    for (int l = 0; l < 16; l++) d[l] += a[j + l] * w[j + l];
                for (; j < kc; j++) d[0] += a[j] * w[j];
                float dot = 0.0f;
                for (int l = 0; l < 16; l++) dot += d[l];
                dot -= z * g->asum[m * kb + b];
                acc[m] += g->sa ? dot * (g->sa[m * kb + b] * sc) : dot * sc;
            }
        }
        for (int64_t m = 0; m < g->M; m++) g->Y[m * p->N + n] = acc[m];
    }
}

/* Weights not kept whole: tiles of rows dequantised per task and multiplied on the pool. */
typedef struct nbits_job {
    nbits_ctx pc;
    const float *A, *aq, *sa;
    float *Y;
    int64_t M, tn;
    int failed;
} nbits_job;

static void nbits_tiles(void *arg, int64_t t0, int64_t t1) {
    nbits_job *j = arg;
    const nbits_ctx *p = &j->pc;
    float *w = malloc(sizeof(float) * (size_t)(j->tn * p->K)), *tmp = j->aq ? malloc(sizeof(float) * (size_t)(j->M * j->tn)) : NULL;
    if (!w || (j->aq && !tmp)) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        t1 = t0;
    }
    for (int64_t t = t0; t < t1; t++) {
        nbits_ctx pc = *p;
        pc.n0 = t * j->tn;
        pc.n1 = pc.n0 + j->tn < p->N ? pc.n0 + j->tn : p->N;
        make_nbits(&pc, w);
        if (nbits_tile(NULL, j->A, j->aq, j->sa, w, p->scales, j->M, p->N, p->K, p->bs, p->kb, pc.n0, pc.n1 - pc.n0, j->Y,
                       tmp) != KILN_OK)
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
    }
    free(w);
    free(tmp);
}

static kiln_status run_matmul_nbits(kn_kernel_ctx *c) {
    const kn_tensor *A = c->in[0], *B = c->in[1], *S = c->in[2];
    const kn_tensor *zp = kn_qc_opt(c, 3), *gidx = kn_qc_opt(c, 4), *bias = kn_qc_opt(c, 5);
    kn_tensor *Y = c->out[0];
    kn_cpu_qc_prm local;
    const kn_cpu_qc_prm *prm;
    KN_QC_PRM(c, &local, &prm);
    kn_nbits_params np;
    KN_TRY(kn_matmul_nbits_check_with(c, prm->K, prm->N, prm->bits, prm->block_size, &np));
    const int64_t K = np.K, N = np.N, bits = np.bits, bs = np.bs, kb = np.kb, M = np.M;
    if (gidx) {
        const int32_t *g = gidx->data;
        for (int64_t k = 0; k < K; k++)
            if (g[k] < 0 || g[k] >= kb)
                return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "g_idx[%lld] = %d is outside [0, %lld)", (long long)k, g[k],
                                       (long long)kb);
    }
    if (M * N == 0) return KILN_OK;
    /* accuracy_level 4: ONNX Runtime's int8 compute type, which it uses for constant (prepacked)
     * weights without g_idx and with integer zero points: A quantised per row and block to int8
     * (scale max|a| / 127, round half to even), integer block dot products scaled by both blocks'
     * scales. Otherwise it dequantises, as here. */
    bool int8 = prm->accuracy_level == 4 && bs <= 256 && !gidx &&
                (!zp || zp->dtype == KILN_DTYPE_UINT8) &&
                kn_cpu_input_is_const(c, 1) && kn_cpu_input_is_const(c, 2) && (!zp || kn_cpu_input_is_const(c, 3));
    nbits_ctx pc = {B, S, zp, gidx, K, N, bits, bs, kb, int8, 0, N};
    /* constant weights are dequantised once per session when the float copy is small (it is 8
     * times the 4-bit weights: an LLM's would not fit); otherwise tile by tile on every run */
    size_t wbytes = sizeof(float) * (size_t)(N * K);
    const float *W = NULL;
    bool consts = (int8 || kn_cpu_input_is_const(c, 2)) && (!zp || kn_cpu_input_is_const(c, 3)) &&
                  (!gidx || kn_cpu_input_is_const(c, 4));
    if (consts && wbytes <= ((size_t)64 << 20)) {
        kn_const_layout lay = {int8 ? 44 : 40, {N, K, bs * 16 + bits, (int64_t)(intptr_t)(int8 ? zp : S)}};
        W = kn_cpu_const_derived(c, 1, &lay, wbytes, make_nbits, &pc);
    }
    bool aown = false, y32 = Y->dtype == KILN_DTYPE_FLOAT;
    const float *Af = kn_linalg_f32_in(A, &aown);
    float *Yf = y32 ? Y->data : malloc(sizeof(float) * (size_t)(M * N));
    float *aq = int8 ? malloc(sizeof(float) * (size_t)(M * K)) : NULL, *sa = int8 ? malloc(sizeof(float) * (size_t)(M * kb)) : NULL;
    float *tmp = int8 && W ? malloc(sizeof(float) * (size_t)(M * N)) : NULL;
    kiln_status st = KILN_OK;
    if (!Af || !Yf || (int8 && (!aq || !sa || (W && !tmp)))) st = oom(c);
    else {
        if (int8) nbits_quantise_a(Af, M, K, bs, kb, aq, sa);
        float *asum = NULL;
        /* (a float32 product with the weights kept dequantised is faster through the GEMM) */
        bool gemv = (!W || int8) && M <= 4 && !gidx && bs <= 256 && (!zp || zp->dtype == KILN_DTYPE_UINT8 || !int8);
        if (gemv && !(asum = malloc(sizeof(float) * (size_t)(M * kb)))) gemv = false;
        if (gemv) {
            const float *a = int8 ? aq : Af;
            for (int64_t m = 0; m < M; m++)
                for (int64_t b = 0; b < kb; b++) {
                    float t = 0.0f;
                    for (int64_t k = b * bs; k < K && k < (b + 1) * bs; k++) t += a[m * K + k];
                    asum[m * kb + b] = t;
                }
            nbits_gemv g = {pc, a, int8 ? sa : NULL, asum, Yf, M};
            kn_parallel_for(c->pool, N, 16, gemv_range, &g);
            free(asum);
        } else if (W) {
            st = nbits_tile(c->pool, Af, aq, sa, W, S, M, N, K, bs, kb, 0, N, Yf, tmp);
            if (st != KILN_OK) st = kn_kernel_error(c, st, "out of memory in the GEMM");
        } else {
            int64_t tn = ((int64_t)1 << 18) / K; /* about 1 MiB of floats per tile */
            tn = tn < 16 ? 16 : tn > 256 ? 256 : tn;
            nbits_job j = {pc, Af, aq, sa, Yf, M, tn, 0};
            kn_parallel_for(c->pool, (N + tn - 1) / tn, 1, nbits_tiles, &j);
            if (j.failed) st = oom(c);
        }
    }
    free(aq);
    free(sa);
    free(tmp);
    if (st == KILN_OK && bias) {
        bool bown = false;
        const float *bf = kn_linalg_f32_in(bias, &bown);
        if (!bf) st = oom(c);
        else
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) Yf[i * N + j] += bf[j];
        if (bown) free((void *)bf);
    }
    if (st == KILN_OK && !y32) kn_linalg_f32_out(Yf, Y, M * N);
    if (aown) free((void *)Af);
    if (!y32) free(Yf);
    return st;
}

/* ------------------------------------------------------------------ DynamicQuantizeMatMul, MatMulIntegerToFloat */

/* Y (M x N float) = float(acc) * mult[j] + bias[j], then into Y's type. */
static kiln_status float_out(kn_kernel_ctx *c, const int32_t *acc, const float *mult, int64_t nm, const kn_tensor *bias,
                             kn_tensor *Y, int64_t M, int64_t N) {
    bool y32 = Y->dtype == KILN_DTYPE_FLOAT, bown = false;
    float *Yf = y32 ? Y->data : malloc(sizeof(float) * (size_t)(M * N > 0 ? M * N : 1));
    const float *bf = bias ? kn_linalg_f32_in(bias, &bown) : NULL;
    if (!Yf || (bias && !bf)) {
        if (!y32) free(Yf);
        if (bown) free((void *)bf);
        return oom(c);
    }
    /* the cases apart, each loop plain enough to vectorise (one loop with the choices inside
     * was 30% of a QDQ transformer's time) */
    for (int64_t i = 0; i < M; i++) {
        const int32_t *a = acc + i * N;
        float *y = Yf + i * N;
        if (nm > 1 && bf)
            for (int64_t j = 0; j < N; j++) y[j] = (float)a[j] * mult[j] + bf[j];
        else if (nm > 1)
            for (int64_t j = 0; j < N; j++) y[j] = (float)a[j] * mult[j];
        else if (bf)
            for (int64_t j = 0; j < N; j++) y[j] = (float)a[j] * mult[0] + bf[j];
        else
            for (int64_t j = 0; j < N; j++) y[j] = (float)a[j] * mult[0];
    }
    if (!y32) {
        kn_linalg_f32_out(Yf, Y, M * N);
        free(Yf);
    }
    if (bown) free((void *)bf);
    return KILN_OK;
}

/* The shared body: A (M x K 8-bit values less za) times B (input 1) less its zero point (input
 * zi), scaled by mult (nm values) and biased. */
static kiln_status int_to_float(kn_kernel_ctx *c, const void *A, bool as8, int32_t za, int64_t M, int zi, const float *mult,
                                int64_t nm, const kn_tensor *bias) {
    const kn_tensor *B = c->in[1];
    int64_t K = B->dims[0], N = B->dims[1];
    int32_t *acc = malloc(sizeof(int32_t) * (size_t)(M * N > 0 ? M * N : 1));
    kiln_status st = !acc ? oom(c) : qproduct(c, A, as8, false, za, M, K, 1, zi, N, false, acc);
    if (st == KILN_OK) st = float_out(c, acc, mult, nm, bias, c->out[0], M, N);
    free(acc);
    return st;
}

static kiln_status check_b(kn_kernel_ctx *c, const kn_tensor *A, const kn_tensor *B) {
    if (B->rank != 2 || A->rank < 1 || A->dims[A->rank - 1] != B->dims[0])
        return kn_kernel_error(c, KILN_ERR_SHAPE, "A's last dimension must equal B's rows (B 2-D)");
    return KILN_OK;
}

/* ONNX Runtime's dynamic quantisation of x (n floats) to uint8: the range widened to include 0,
 * scale (max - min) / 255 (1 when the range is empty), zero point round-half-even(clamp(0 - min
 * / scale)), q = clamp(round-half-even(x / scale) + zero point). Writes q into out and the zero
 * point into *zp; returns the scale. */
static float dyn_quant(const float *x, int64_t n, uint8_t *out, int32_t *zp) {
    float mn, mx;
    kn_q8_range(x, n, &mn, &mx);
    float scale = mx == mn ? 1.0f : (mx - mn) / 255.0f;
    float z0 = 0.0f - mn / scale;
    float z = nearbyintf(z0 < 0.0f ? 0.0f : z0 > 255.0f ? 255.0f : z0);
    kn_q8_quantize_u8(x, n, scale, z, out);
    *zp = (int32_t)z;
    return scale;
}

static kiln_status run_dq_matmul(kn_kernel_ctx *c) {
    const kn_tensor *A = c->in[0], *B = c->in[1], *bs = c->in[2], *bz = kn_qc_opt(c, 3), *bias = kn_qc_opt(c, 4);
    KN_TRY(check_b(c, A, B));
    int64_t N = B->dims[1], K = B->dims[0], n = kn_tensor_count(A), M = K ? n / K : 0;
    KN_TRY(per_col(c, bs, "b_scale", N));
    KN_TRY(per_col(c, bz, "b_zero_point", N));
    if (bias && kn_tensor_count(bias) != N)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "bias has %lld elements; expected N=%lld", (long long)kn_tensor_count(bias),
                               (long long)N);
    if (M * N == 0) return KILN_OK;
    uint8_t *Aq = malloc((size_t)(M * K > 0 ? M * K : 1));
    int64_t nm = kn_tensor_count(bs);
    float *mult = malloc(sizeof(float) * (size_t)nm);
    if (!Aq || !mult) {
        free(Aq);
        free(mult);
        return oom(c);
    }
    int32_t za;
    float scale = dyn_quant(A->data, n, Aq, &za);
    for (int64_t j = 0; j < nm; j++) mult[j] = scale * kn_qc_scale(bs, j);
    kiln_status st = int_to_float(c, Aq, false, za, M, 3, mult, nm, bias);
    free(Aq);
    free(mult);
    return st;
}

static kiln_status run_matmul_int_to_float(kn_kernel_ctx *c) {
    const kn_tensor *A = c->in[0], *B = c->in[1], *as = c->in[2], *bs = c->in[3];
    const kn_tensor *az = kn_qc_opt(c, 4), *bz = kn_qc_opt(c, 5), *bias = kn_qc_opt(c, 6);
    KN_TRY(check_b(c, A, B));
    int64_t N = B->dims[1], K = B->dims[0], n = kn_tensor_count(A), M = K ? n / K : 0;
    KN_TRY(one(c, as, "a_scale"));
    KN_TRY(one(c, az, "a_zero_point"));
    KN_TRY(per_col(c, bs, "b_scale", N));
    KN_TRY(per_col(c, bz, "b_zero_point", N));
    if (az && az->dtype != A->dtype)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "A is %s but a_zero_point %s", kiln_dtype_name(A->dtype),
                               kiln_dtype_name(az->dtype));
    if (bz && bz->dtype != B->dtype)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "B is %s but b_zero_point %s", kiln_dtype_name(B->dtype),
                               kiln_dtype_name(bz->dtype));
    if (bias && kn_tensor_count(bias) != N)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "bias has %lld elements; expected N=%lld", (long long)kn_tensor_count(bias),
                               (long long)N);
    if (M * N == 0) return KILN_OK;
    int64_t nm = kn_tensor_count(bs);
    float *mult = malloc(sizeof(float) * (size_t)nm);
    if (!mult) return oom(c);
    float sa = kn_qc_scale(as, 0);
    for (int64_t j = 0; j < nm; j++) mult[j] = sa * kn_qc_scale(bs, j);
    kiln_status st = int_to_float(c, A->data, A->dtype == KILN_DTYPE_INT8, az ? kn_qc_q(az, 0) : 0, M, 5, mult, nm, bias);
    free(mult);
    return st;
}

/* ------------------------------------------------------------------ QGemm */

float kn_qc_requant(float v, int32_t zp, bool is_signed, int32_t *out) {
    float lo = (float)((is_signed ? -128 : 0) - zp), hi = (float)((is_signed ? 127 : 255) - zp);
    v = v > lo ? v : lo; /* NaN goes to the minimum */
    v = v < hi ? v : hi;
    *out = (int32_t)nearbyintf(v) + zp;
    return v;
}

static kiln_status run_qgemm(kn_kernel_ctx *c) {
    const kn_tensor *A = c->in[0], *as = c->in[1], *az = c->in[2], *B = c->in[3], *bs = c->in[4], *bz = c->in[5];
    const kn_tensor *C = kn_qc_opt(c, 6), *ys = kn_qc_opt(c, 7), *yz = kn_qc_opt(c, 8);
    kn_tensor *Y = c->out[0];
    kn_cpu_qc_prm local;
    const kn_cpu_qc_prm *prm;
    KN_QC_PRM(c, &local, &prm);
    bool ta = prm->trans_a, tb = prm->trans_b;
    float alpha = prm->alpha;
    if (A->rank != 2 || B->rank != 2) return kn_kernel_error(c, KILN_ERR_SHAPE, "A and B must be 2-D");
    int64_t M = A->dims[ta ? 1 : 0], K = A->dims[ta ? 0 : 1], N = B->dims[tb ? 0 : 1];
    if (B->dims[tb ? 1 : 0] != K)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "inner dimensions differ: %lld vs %lld", (long long)K,
                               (long long)B->dims[tb ? 1 : 0]);
    KN_TRY(one(c, as, "a_scale"));
    KN_TRY(one(c, az, "a_zero_point"));
    KN_TRY(per_col(c, bs, "b_scale", N));
    KN_TRY(per_col(c, bz, "b_zero_point", N));
    KN_TRY(one(c, ys, "y_scale"));
    KN_TRY(one(c, yz, "y_zero_point"));
    if (az->dtype != A->dtype || bz->dtype != B->dtype)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "the zero points' types (%s, %s) must be A's and B's (%s, %s)",
                               kiln_dtype_name(az->dtype), kiln_dtype_name(bz->dtype), kiln_dtype_name(A->dtype),
                               kiln_dtype_name(B->dtype));
    int64_t cm = 1, cn = 1;
    if (C) {
        /* (), (1,), (N,), (1, N), (M, 1), (M, N) */
        if (C->rank > 2) return kn_kernel_error(c, KILN_ERR_SHAPE, "C must have rank <= 2");
        cn = C->rank >= 1 ? C->dims[C->rank - 1] : 1;
        cm = C->rank == 2 ? C->dims[0] : 1;
        if ((cn != 1 && cn != N) || (cm != 1 && cm != M))
            return kn_kernel_error(c, KILN_ERR_SHAPE, "C does not broadcast to (M, N) = (%lld, %lld)", (long long)M, (long long)N);
    }
    if (M * N == 0) return KILN_OK;
    int32_t *acc = malloc(sizeof(int32_t) * (size_t)(M * N));
    int64_t nm = kn_tensor_count(bs);
    float *mult = malloc(sizeof(float) * (size_t)nm);
    kiln_status st = KILN_OK;
    if (!acc || !mult) st = oom(c);
    if (st == KILN_OK) st = qproduct(c, A->data, A->dtype == KILN_DTYPE_INT8, ta, kn_qc_q(az, 0), M, K, 3, 5, N, tb, acc);
    if (st == KILN_OK) {
        if (C) {
            const int32_t *cv = C->data;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) acc[i * N + j] += cv[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
        }
        float sa = kn_qc_scale(as, 0);
        for (int64_t j = 0; j < nm; j++) {
            mult[j] = alpha * sa * kn_qc_scale(bs, j);
            if (ys) mult[j] /= kn_qc_scale(ys, 0);
        }
        if (!yz) {
            st = float_out(c, acc, mult, nm, NULL, Y, M, N);
        } else {
            bool sg = yz->dtype == KILN_DTYPE_INT8;
            int32_t z = kn_qc_q(yz, 0);
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    int32_t q;
                    kn_qc_requant((float)acc[i * N + j] * mult[nm > 1 ? j : 0], z, sg, &q);
                    if (sg) ((int8_t *)Y->data)[i * N + j] = (int8_t)q;
                    else ((uint8_t *)Y->data)[i * N + j] = (uint8_t)q;
                }
        }
    }
    free(acc);
    free(mult);
    return st;
}

/* ------------------------------------------------------------------ QAttention */

/* The com.microsoft Attention kernel on the dequantised input and weight: (x - zx) * sx and
 * (w - zw[j]) * sw[j] (per tensor or per column), whose float product is ONNX Runtime's integer
 * product scaled by sx * sw[j] up to float rounding. */
static kiln_status run_qattention(kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0], *W = c->in[1], *sx = c->in[3], *sw = c->in[4];
    const kn_tensor *zx = kn_qc_opt(c, 6), *zw = kn_qc_opt(c, 7);
    if (X->rank != 3 || W->rank != 2 || X->dims[2] != W->dims[0])
        return kn_kernel_error(c, KILN_ERR_SHAPE, "input must be (B, S, D) and weight (D, 3 * hidden)");
    int64_t Din = W->dims[0], Wc = W->dims[1], nx = kn_tensor_count(X);
    KN_TRY(one(c, sx, "input_scale"));
    KN_TRY(one(c, zx, "input_zero_point"));
    KN_TRY(per_col(c, sw, "weight_scale", Wc));
    KN_TRY(per_col(c, zw, "weight_zero_point", Wc));
    if (c->in[2]->dtype != KILN_DTYPE_FLOAT)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "bias is %s; it must be float", kiln_dtype_name(c->in[2]->dtype));
    kn_tensor *xd = NULL, *wd = NULL;
    kiln_status st = kn_tensor_new(KILN_DTYPE_FLOAT, 3, X->dims, &xd);
    if (st == KILN_OK) st = kn_tensor_new(KILN_DTYPE_FLOAT, 2, W->dims, &wd);
    if (st != KILN_OK) {
        kn_tensor_free(xd);
        return kn_kernel_error(c, st, "out of memory");
    }
    float s = kn_qc_scale(sx, 0);
    int32_t z = zx ? kn_qc_q(zx, 0) : 0;
    float *xf = xd->data, *wf = wd->data;
    for (int64_t i = 0; i < nx; i++) xf[i] = (float)(kn_qc_q(X, i) - z) * s;
    int64_t ns = kn_tensor_count(sw), nz = zw ? kn_tensor_count(zw) : 0;
    for (int64_t k = 0; k < Din; k++)
        for (int64_t j = 0; j < Wc; j++) {
            int32_t zj = nz ? kn_qc_q(zw, nz == 1 ? 0 : j) : 0;
            wf[k * Wc + j] = (float)(kn_qc_q(W, k * Wc + j) - zj) * kn_qc_scale(sw, ns == 1 ? 0 : j);
        }
    kn_tensor *ins[5] = {xd, wd, c->in[2], (kn_tensor *)kn_qc_opt(c, 5), (kn_tensor *)kn_qc_opt(c, 8)};
    kn_kernel_ctx sub = *c;
    sub.in = ins;
    sub.n_inputs = 5;
    st = kn_cpu_ms_attention(&sub);
    kn_tensor_free(xd);
    kn_tensor_free(wd);
    return st;
}

/* ------------------------------------------------------------------ DynamicQuantizeLSTM */

/* kn_cpu_rnn's LSTM with the two products as ONNX Runtime's quantised LSTM computes them: the
 * input projection of all timesteps, then H_{t-1} each step, quantised dynamically to uint8
 * (per product, over all its rows) and multiplied with the weights less the direction's zero
 * point, scaled by the activation scale times the weight scale (per direction or per column).
 * ONNX Runtime quantises H_{t-1} in chunks of batch rows, one per intra-op thread, so its
 * outputs for a batch > 1 depend on its thread count; kiln quantises the whole batch at once, as
 * ONNX Runtime does with one thread and, for a batch of 1, with any number. */
typedef struct dqlstm {
    const uint8_t *w[2]; /* W, R packed for kn_qgemm: nd of wbytes each */
    size_t wbytes[2];
    int32_t zw[2][2];    /* [which][direction]: the weights' zero point (ONNX Runtime reads one per direction) */
    bool ws8[2];
    const float *wscale[2]; /* [nd][nscale] */
    int64_t nscale[2];      /* per direction: 1 or 4H */
    int64_t K[2], GH;
    /* per direction (they may run at once): A quantised and packed, the int32 product, sized for
     * the largest product (the input projection's T*B rows) */
    uint8_t *aq[2];
    int32_t *ap[2], *acc[2];
    int64_t cap_a, cap_c;
    /* the input projection's A (X, the same for both directions) as quantised and packed for
     * direction 0, reused by direction 1 */
    const float *x_for;
    int64_t x_m, x_k;
    float x_scale;
    int32_t x_za;
    /* [which]: W, R per direction in kn_qgemm8's form (constant weights whose pairs allow it; w
     * then unused), else NULL */
    const uint8_t *w8[2];
    size_t w8_bytes[2];
    /* [which]: otherwise the same packing in the sign form (kn_qgemv8_form 2: full-range
     * symmetric weights) when the weights are a constant, for products of one or two rows (a step
     * of a batch of 1 or 2: two rows ~0.8x kn_qgemm's time, one row about kn_qgemv_run's); NULL
     * when not */
    const uint8_t *w8s[2];
    /* [which]: W, R per direction packed for AMX-INT8's tiles (qgemm_amx.h; constant weights,
     * where the CPU has them), wa_bytes each, else NULL */
    const uint8_t *wa[2];
    size_t wa_bytes[2];
} dqlstm;

static kiln_status dqlstm_gemm(const kn_rnn_qgemm *q, kn_threadpool *pool, int which, int d, const float *A, int64_t M,
                               int64_t K, float *out, int64_t ldo) {
    dqlstm *x = (dqlstm *)q->ctx;
    int64_t N = x->GH;
    if (M * K > x->cap_a || M * N > x->cap_c) return kn_error(KILN_ERR_INTERNAL, "%s:%d: product larger than planned", __FILE__, __LINE__);
    int32_t *acc = x->acc[d];
    /* X, the input projection's A, is the same for both directions: direction 1 takes direction
     * 0's quantisation (in aq[0], packed in ap[0] for kn_qgemm) */
    const bool reuse = which == 0 && d == 1 && x->x_for == A && x->x_m == M && x->x_k == K;
    int32_t za;
    float s;
    if (reuse) {
        s = x->x_scale, za = x->x_za;
    } else {
        s = dyn_quant(A, M * K, x->aq[d], &za);
        if (which == 0 && d == 0) x->x_for = A, x->x_m = M, x->x_k = K, x->x_scale = s, x->x_za = za;
    }
    const uint8_t *aq = reuse ? x->aq[0] : x->aq[d];
    const int64_t ns = x->nscale[which];
    const float *sc = x->wscale[which] + d * ns;
    /* AMX-INT8 where it pays: the int32 product, then the loop at the end (kn_qgemm8_out's float
     * operations) */
    const bool amx = x->wa[which] && kn_qgemm_amx_pays(M, N, K);
    if (amx) {
        kn_qgemm_amx_args g = {.M = M, .N = N, .K = K, .a = aq, .lda = K, .za = za,
                               .b = x->wa[which] + (size_t)d * x->wa_bytes[which], .b_signed = x->ws8[which],
                               .zb = x->zw[which][d], .c = acc, .ldc = N};
        kiln_status st = kn_qgemm_amx_run(pool, &g);
        if (st != KILN_OK) return kn_error(st, "out of memory in the GEMM");
    } else if (x->w8[which]) { /* scaled into out by the product's epilogue */
        const kn_qgemm8_out fo = {out, ldo, s, sc, ns != 1};
        kiln_status st = kn_qgemm8_run(pool, x->w8[which] + (size_t)d * x->w8_bytes[which], aq, K, M, za,
                                       x->zw[which][d], x->ws8[which], NULL, 0, &fo);
        return st == KILN_OK ? KILN_OK : kn_error(st, "out of memory in the GEMM");
    }
    if (!amx && M <= 2 && x->w8s[which]) {
        /* one row on this thread, as the int16 one-row path it replaces; two on the pool, as kn_qgemm */
        const kn_qgemm8_out fo = {out, ldo, s, sc, ns != 1};
        const uint8_t *w8 = x->w8s[which] + (size_t)d * x->w8_bytes[which];
        kiln_status st = kn_qgemm8_run(M == 1 ? NULL : pool, w8, aq, K, M, za, x->zw[which][d], x->ws8[which], NULL, 0,
                                       &fo);
        return st == KILN_OK ? KILN_OK : kn_error(st, "out of memory in the GEMM");
    }
    if (amx) {
        /* acc made above */
    } else if (M == 1) {
        /* one row (a step of a batch of 1): h in int16 pairs less its zero point, on this thread */
        const uint8_t *wb = x->w[which] + (size_t)d * x->wbytes[which];
        int32_t *pr = x->ap[d], sum = 0;
        for (int64_t k = 0; k < K; k += 2) {
            const int32_t lo = (int32_t)aq[k] - za, hi = k + 1 < K ? (int32_t)aq[k + 1] - za : 0;
            pr[k / 2] = (int32_t)((uint32_t)(uint16_t)(int16_t)lo | (uint32_t)(uint16_t)(int16_t)hi << 16);
            sum += lo + hi;
        }
        kn_qgemv_run(pr, sum, wb, x->ws8[which], x->zw[which][d], N, K, acc);
    } else {
        if (!reuse) kn_qgemm_pack_a8(aq, false, K, 1, M, K, NULL, za, x->ap[d]);
        kn_qgemm g = {.M = M, .N = N, .K = K, .a = reuse ? x->ap[0] : x->ap[d],
                      .b = x->w[which] + (size_t)d * x->wbytes[which], .b_signed = x->ws8[which],
                      .zb = x->zw[which][d], .c = acc, .ldc = N};
        kiln_status st = kn_qgemm_run(pool, &g);
        if (st != KILN_OK) return kn_error(st, "out of memory in the GEMM");
    }
    /* the product and the add as two statements: two roundings, as kn_qgemm8_out's epilogue (clang
     * contracts one expression into a fused multiply-add, and the forms then differed in bits) */
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            const float p = (float)acc[i * N + j] * (s * sc[ns == 1 ? 0 : j]);
            out[i * ldo + j] += p;
        }
    return KILN_OK;
}

typedef struct r8_ctx {
    const kn_tensor *R; /* W or R */
    int64_t nd, K, N;
    size_t per;
} r8_ctx;

/* per direction d: W[d] or R[d] (K x N) in kn_qgemm8's form */
static void make_r8(const void *ctx, void *dst) {
    const r8_ctx *p = ctx;
    for (int64_t d = 0; d < p->nd; d++)
        kn_qgemv8_pack((const int8_t *)p->R->data + d * p->K * p->N, p->R->dtype == KILN_DTYPE_INT8, p->K, p->N,
                       (uint8_t *)dst + d * p->per);
}

typedef struct wprime_ctx {
    const kn_tensor *W;
    int64_t nd, K, N;
} wprime_ctx;

/* per direction d: W[d] (K x N) packed for kn_qgemm */
static void make_wprime(const void *ctx, void *dst) {
    const wprime_ctx *p = ctx;
    const size_t per = kn_qgemm_b_bytes(p->N, p->K);
    for (int64_t d = 0; d < p->nd; d++)
        kn_qgemm_pack_b8((const int8_t *)p->W->data + d * p->K * p->N, p->N, 1, p->K, 0, p->N, (uint8_t *)dst + d * per);
}

/* per direction d: W[d] or R[d] (K x N) packed for AMX-INT8's tiles */
static void make_wamx(const void *ctx, void *dst) {
    const r8_ctx *p = ctx;
    for (int64_t d = 0; d < p->nd; d++)
        kn_qgemm_amx_pack_b((const int8_t *)p->R->data + d * p->K * p->N, p->R->dtype == KILN_DTYPE_INT8, p->N, 1, p->K,
                            p->N, (uint8_t *)dst + d * p->per);
}

static kiln_status run_dq_lstm(kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0], *W = c->in[1], *R = c->in[2];
    if (W->rank != 3 || R->rank != 3 || X->rank != 3)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "X, W and R must be 3-D");
    int64_t nd = W->dims[0], H = R->dims[1], GH = 4 * H;
    if (X->dtype != KILN_DTYPE_FLOAT) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "X must be float");
    dqlstm q = {.GH = GH};
    const uint8_t *own[2] = {NULL, NULL};
    float *wsc[2] = {NULL, NULL};
    kiln_status st = KILN_OK;
    for (int w = 0; w < 2; w++) { /* both checked before anything is made */
        const kn_tensor *T = w ? R : W, *sc = c->in[8 + 2 * w], *zp = c->in[9 + 2 * w];
        const char *name = w ? "R" : "W";
        if (!is_q8_t(T) || zp->dtype != T->dtype)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "%s and its zero point must both be uint8 or both int8", name);
        for (int k = 0; k < 2; k++) {
            const kn_tensor *t = k ? zp : sc;
            if (!((t->rank == 1 && t->dims[0] == nd) || (t->rank == 2 && t->dims[0] == nd && t->dims[1] == GH)))
                return kn_kernel_error(c, KILN_ERR_SHAPE,
                                       "%s_%s must be [%lld] (per direction) or [%lld, %lld] (per channel)", name,
                                       k ? "zero_point" : "scale", (long long)nd, (long long)nd, (long long)GH);
        }
        if (zp->rank == 2)
            for (int64_t i = 0; i < kn_tensor_count(zp); i++)
                if (T->dtype == KILN_DTYPE_INT8 ? kn_qc_q(zp, i) != 0 : kn_qc_q(zp, i) != kn_qc_q(zp, 0))
                    return kn_kernel_error(c, KILN_ERR_INVALID_MODEL,
                                           T->dtype == KILN_DTYPE_INT8 ? "%s_zero_point must be zero (int8 weights)"
                                                                       : "%s_zero_point must be one value per channel",
                                           name);
    }
    for (int w = 0; w < 2 && st == KILN_OK; w++) {
        const kn_tensor *T = w ? R : W, *sc = c->in[8 + 2 * w], *zp = c->in[9 + 2 * w];
        const int64_t nz = zp->rank == 2 ? GH : 1;
        q.nscale[w] = sc->rank == 2 ? GH : 1;
        if (!(wsc[w] = malloc(sizeof(float) * (size_t)(nd * q.nscale[w])))) {
            st = oom(c);
            break;
        }
        for (int64_t i = 0; i < nd * q.nscale[w]; i++) wsc[w][i] = kn_qc_scale(sc, i);
        q.wscale[w] = wsc[w];
        q.K[w] = T->dims[1];
        q.wbytes[w] = kn_qgemm_b_bytes(GH, T->dims[1]);
        q.ws8[w] = T->dtype == KILN_DTYPE_INT8;
        for (int64_t d = 0; d < nd && d < 2; d++) q.zw[w][d] = kn_qc_q(zp, d * nz);
        if (kn_qgemm_amx()) { /* as well as a form below, for the products too small for the tiles */
            r8_ctx ac = {T, nd, T->dims[1], GH, kn_qgemm_amx_b_bytes(GH, T->dims[1])};
            kn_const_layout laya = {50 + w, {nd, T->dims[1], GH, 0}};
            q.wa[w] = kn_cpu_const_derived(c, 1 + w, &laya, ac.per * (size_t)nd, make_wamx, &ac);
            q.wa_bytes[w] = ac.per;
        }
        /* the u8 x s8 form (kn_qgemm8), kept with the session, when the weights are a constant
         * whose pairs allow it; else kn_qgemm's */
        r8_ctx rc = {T, nd, T->dims[1], GH, kn_qgemv8_bytes(T->dims[1], GH)};
        kn_const_layout lay8 = {46 + w, {nd, T->dims[1], GH, 0}};
        const uint8_t *w8p = kn_cpu_const_derived(c, 1 + w, &lay8, rc.per * (size_t)nd, make_r8, &rc);
        bool ok = w8p != NULL;
        for (int64_t d = 0; ok && d < nd; d++) ok = kn_qgemv8_usable(w8p + (size_t)d * rc.per);
        if (ok) {
            q.w8[w] = w8p, q.w8_bytes[w] = rc.per;
            continue;
        }
        bool sign = w8p != NULL;
        for (int64_t d = 0; sign && d < nd; d++) sign = kn_qgemv8_form(w8p + (size_t)d * rc.per) == 2;
        if (sign) q.w8s[w] = w8p, q.w8_bytes[w] = rc.per;
        wprime_ctx pc = {T, nd, T->dims[1], GH};
        const size_t bytes = q.wbytes[w] * (size_t)nd;
        kn_const_layout lay = {42 + w, {nd, T->dims[1], GH, 0}};
        const uint8_t *wp = kn_cpu_const_derived(c, 1 + w, &lay, bytes, make_wprime, &pc);
        if (!wp) {
            uint8_t *m = kn_aligned_alloc(64, bytes);
            if (!m) st = oom(c);
            else {
                make_wprime(&pc, m);
                wp = own[w] = m;
            }
        }
        q.w[w] = wp;
    }
    int64_t TB = X->dims[0] * X->dims[1], I = X->dims[2];
    /* the products' rows: T*B for the input projection, a batch (at most T*B) a step */
    q.cap_a = TB * (I > H ? I : H);
    q.cap_c = TB * GH;
    const size_t ap_words = kn_qgemm_a_words(TB, I > H ? I : H);
    for (int d = 0; d < nd && d < 2 && st == KILN_OK; d++) {
        q.aq[d] = malloc((size_t)(q.cap_a > 0 ? q.cap_a : 1));
        q.ap[d] = kn_aligned_alloc(64, sizeof(int32_t) * (ap_words > 0 ? ap_words : 1));
        q.acc[d] = malloc(sizeof(int32_t) * (size_t)(q.cap_c > 0 ? q.cap_c : 1));
        if (!q.aq[d] || !q.ap[d] || !q.acc[d]) st = oom(c);
    }
    if (st == KILN_OK && nd > 2) st = kn_kernel_error(c, KILN_ERR_SHAPE, "W has %lld directions; at most 2", (long long)nd);
    if (st == KILN_OK) {
        kn_rnn_qgemm g = {dqlstm_gemm, &q, kn_qc_mlas_logistic_n, kn_qc_mlas_tanh_n};
        st = kn_cpu_rnn_quantised(c, &g);
    }
    for (int d = 0; d < 2; d++) {
        free(q.aq[d]);
        free(q.ap[d]);
        free(q.acc[d]);
        free((void *)own[d]);
        free(wsc[d]);
    }
    return st;
}

/* ------------------------------------------------------------------ attributes */

kiln_status kn_cpu_qc_prepare(const kn_node *n, void *params) {
    kn_cpu_qc_prm *p = params;
    memset(p, 0, sizeof *p);
    p->K = kn_attr_int(n, "K", 0);
    p->N = kn_attr_int(n, "N", 0);
    p->bits = kn_attr_int(n, "bits", 4);
    p->block_size = kn_attr_int(n, "block_size", 0);
    p->accuracy_level = kn_attr_int(n, "accuracy_level", 0);
    p->trans_a = kn_attr_int(n, "transA", 0) != 0;
    p->trans_b = kn_attr_int(n, "transB", 0) != 0;
    p->alpha = kn_attr_float(n, "alpha", strcmp(n->op_type, "QGemm") ? 0.01f : 1.0f);
    p->opset = kn_attr_int(n, "opset", -1);
    p->axis = kn_attr_int(n, "axis", strcmp(n->op_type, "QLinearSoftmax") ? 0 : p->opset < 13 ? 1 : -1);
    p->channels_last = kn_attr_int(n, "channels_last", 0) != 0;
    p->count_include_pad = kn_attr_int(n, "count_include_pad", 0) != 0;
    return KILN_OK;
}

/* ------------------------------------------------------------------ table */

const kn_cpu_kernel kn_cpu_qcontrib[] = {
    {MS, "MatMulNBits", run_matmul_nbits, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_qc_prepare, kn_cpu_qc_prm)},
    {MS, "DynamicQuantizeMatMul", run_dq_matmul, NULL, 0},
    {MS, "MatMulIntegerToFloat", run_matmul_int_to_float, NULL, 0},
    {MS, "QGemm", run_qgemm, NULL, 0, KN_PARAMS(kn_cpu_qc_prepare, kn_cpu_qc_prm)},
    {MS, "QAttention", run_qattention, NULL, 0, KN_PARAMS(kn_attn_attrs_prepare, kn_attn_attrs)},
    {MS, "DynamicQuantizeLSTM", run_dq_lstm, NULL, 0, KN_PARAMS(kn_cpu_rnn_prepare, kn_cpu_rnn_prm)},
    {MS, "QLinearAdd", kn_cpu_qlinear_add, NULL, KN_KERNEL_OVERWRITES},
    {MS, "QLinearMul", kn_cpu_qlinear_mul, NULL, KN_KERNEL_OVERWRITES},
    {MS, "QLinearSigmoid", kn_cpu_qlinear_sigmoid, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_qc_prepare, kn_cpu_qc_prm)},
    {MS, "QLinearLeakyRelu", kn_cpu_qlinear_leaky_relu, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_qc_prepare, kn_cpu_qc_prm)},
    {MS, "QLinearConcat", kn_cpu_qlinear_concat, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_qc_prepare, kn_cpu_qc_prm)},
    {MS, "QLinearSoftmax", kn_cpu_qlinear_softmax, NULL, 0, KN_PARAMS(kn_cpu_qc_prepare, kn_cpu_qc_prm)},
    {MS, "QLinearAveragePool", kn_cpu_qlinear_average_pool, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_qc_prepare, kn_cpu_qc_prm)},
    {MS, "QLinearGlobalAveragePool", kn_cpu_qlinear_global_average_pool, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(kn_cpu_qc_prepare, kn_cpu_qc_prm)},
    {0},
};

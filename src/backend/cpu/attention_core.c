/* The CPU attention engine (see attention_impl.h).
 *
 * Work is split into tasks of (batch entry, query head, block of query rows). A task computes
 * the block's scores against a tile of keys with one GEMM into a scratch buffer that stays in L2,
 * applies softcap, masks and biases row by row, turns them into probabilities and multiplies them
 * by the tile of V with a second GEMM straight into the output. Short key ranges are one tile (a
 * plain two-GEMM attention with the softmax in between); long ones are cut into tiles combined
 * with an online softmax (running row maximum and sum, the output rescaled when the maximum
 * grows), so the scores of a long sequence never leave the cache. Key ranges that the causal,
 * window or length masks exclude for every row of a block are not computed at all.
 *
 * For float16/bfloat16 operands the scores and probabilities are rounded at each step where the
 * ONNX reference (which computes in that type) rounds, so results match it bit for bit in most
 * elements rather than differing by one unit in the last place of bfloat16 (0.4%). */
#include "backend/cpu/attention_impl.h"

#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/sgemm.h"

#include <math.h>
#include <stdlib.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <string.h>

#define BLOCK_ROWS 128      /* query rows per task (fewer when that leaves threads idle) */
#define KV_TILE 512         /* keys per tile in the online-softmax path */
#define SINGLE_TILE_MAX 1024 /* key ranges up to this long run as one tile */

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

void kn_attn_init(kn_attn *a) {
    memset(a, 0, sizeof *a);
    a->scale = 1.0f;
    a->mask_cols = -1;
    a->left_window = a->right_window = -1;
    a->masked = -INFINITY;
    a->round_to = KILN_DTYPE_FLOAT;
    a->softmax_to = KILN_DTYPE_UNDEFINED;
}

float kn_attn_round(kiln_dtype t, float x) {
    if (t == KILN_DTYPE_BFLOAT16) return kn_bf16_to_f32(kn_f32_to_bf16(x));
    if (t == KILN_DTYPE_FLOAT16) return kn_f16_to_f32(kn_f32_to_f16(x));
    return x;
}

static inline bool is_half(kiln_dtype t) { return t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16; }

bool kn_attn_bcast_strides(const int64_t *dims, int rank, int64_t batch, int64_t heads, int64_t sq,
                           int64_t cols, kn_attn_bcast *out) {
    if (rank > 4) return false;
    const int64_t target[4] = {batch, heads, sq, cols};
    int64_t full[4], st[4], acc = 1;
    for (int d = 3; d >= 0; d--) {
        int td = d - (4 - rank);
        full[d] = td >= 0 ? dims[td] : 1;
    }
    for (int d = 3; d >= 0; d--) {
        if (full[d] != 1 && full[d] != target[d]) return false;
        st[d] = full[d] == 1 ? 0 : acc;
        acc *= full[d];
    }
    out->sb = st[0];
    out->sh = st[1];
    out->si = st[2];
    out->sj = st[3];
    return true;
}

float *kn_attn_to_float(const kn_tensor *t) {
    int64_t n = kn_tensor_count(t);
    float *f = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!f) return NULL;
    if (n > 0) kn_ew_cast_n(t->dtype, t->data, KILN_DTYPE_FLOAT, f, n, 0);
    return f;
}

void kn_attn_from_float(const float *src, kn_tensor *dst, int64_t n) {
    if (n > 0) kn_ew_cast_n(KILN_DTYPE_FLOAT, src, dst->dtype, dst->data, n, 0);
}

/* ------------------------------------------------------------------ per-row pieces */

/* The keys query row i of batch entry b may see: [*lo, *hi) by the causal and window masks
 * (keys outside are excluded: -inf, as in ONNX Runtime too, whose causal mask uses the lowest
 * float), and [*plo, *phi) by the padding masks (key lengths, a mask shorter than the keys), whose
 * keys outside get `masked`. With masked = -inf both are one interval. */
static void row_range(const kn_attn *a, int64_t b, int64_t i, int64_t *lo, int64_t *hi, int64_t *plo, int64_t *phi) {
    int64_t l = 0, h = a->skv, pl = 0, ph = a->skv;
    if (a->kv_begin) pl = max64(pl, a->kv_begin[b]);
    if (a->kv_end) ph = min64(ph, a->kv_end[b]);
    if (a->mask_cols >= 0) ph = min64(ph, a->mask_cols);
    int64_t p = (a->offset ? a->offset[b] : 0) + i;
    if (a->causal) h = min64(h, p + 1);
    if (a->left_window >= 0) l = max64(l, p - a->left_window);
    if (a->right_window >= 0) h = min64(h, p + a->right_window + 1);
    if (a->masked == -INFINITY) {
        l = max64(l, pl);
        h = min64(h, ph);
        pl = l;
        ph = h;
    }
    if (h < l) h = l;
    if (ph < pl) ph = pl;
    *lo = l;
    *hi = h;
    *plo = pl;
    *phi = ph;
}

/* Whether row (b, h, i) has a key that no mask removes (for zero_masked_rows). */
static bool row_has_key(const kn_attn *a, int64_t b, int64_t h, int64_t i, int64_t lo, int64_t hi) {
    const uint8_t *kp = a->keep.p ? (const uint8_t *)a->keep.p + b * a->keep.sb + h * a->keep.sh + i * a->keep.si : NULL;
    const float *bp = a->bias.p ? (const float *)a->bias.p + b * a->bias.sb + h * a->bias.sh + i * a->bias.si : NULL;
    const float *b2 = a->bias2.p ? (const float *)a->bias2.p + b * a->bias2.sb + h * a->bias2.sh + i * a->bias2.si : NULL;
    for (int64_t j = lo; j < hi; j++) {
        if (kp && !kp[j * a->keep.sj]) continue;
        if (bp && bp[j * a->bias.sj] == -INFINITY) continue;
        if (b2 && b2[j * a->bias2.sj] == -INFINITY) continue;
        return true;
    }
    return false;
}

/* Softcap, in float or with the reference's rounding in type t. */
static void softcap_row(const kn_attn *a, kiln_dtype t, float *s, int64_t n) {
    const float c = a->softcap, inv = 1.0f / c;
    if (is_half(t)) {
        for (int64_t j = 0; j < n; j++) {
            float x = kn_attn_round(t, s[j] / c);
            x = kn_attn_round(t, tanhf(x));
            s[j] = kn_attn_round(t, x * c);
        }
        return;
    }
    for (int64_t j = 0; j < n; j++) s[j] = c * kn_ew_tanhf(s[j] * inv);
}

/* Masks and biases on the scores s[0..n) of row (b, h, i), keys j0..j0+n; lo/hi/plo/phi from
 * row_range. */
static void mask_row(const kn_attn *a, int64_t b, int64_t h, int64_t i, const int64_t *iv, int64_t j0, int64_t n,
                     float *s) {
    const float m = a->masked;
    const int64_t lo = iv[0], hi = iv[1];
    int64_t a0 = min64(max64(lo - j0, 0), n), a1 = min64(max64(hi - j0, a0), n);
    int64_t p0 = min64(max64(max64(iv[2], lo) - j0, a0), a1), p1 = min64(max64(min64(iv[3], hi) - j0, p0), a1);
    for (int64_t j = 0; j < a0; j++) s[j] += -INFINITY;
    for (int64_t j = a1; j < n; j++) s[j] += -INFINITY;
    for (int64_t j = a0; j < p0; j++) s[j] += m;
    for (int64_t j = p1; j < a1; j++) s[j] += m;
    /* masks and biases exist for keys below mask_cols only; keys past it are masked above */
    int64_t cols = a->mask_cols >= 0 ? min64(n, max64(a->mask_cols - j0, 0)) : n;
    if (a->keep.p) {
        const uint8_t *kp = (const uint8_t *)a->keep.p + b * a->keep.sb + h * a->keep.sh + i * a->keep.si + j0 * a->keep.sj;
        const int64_t sj = a->keep.sj;
        for (int64_t j = p0; j < p1; j++)
            if (!kp[j * sj]) s[j] += m;
    }
    const kn_attn_bcast *bs[2] = {&a->bias, &a->bias2};
    for (int t = 0; t < 2; t++) {
        if (!bs[t]->p) continue;
        const float *bp = (const float *)bs[t]->p + b * bs[t]->sb + h * bs[t]->sh + i * bs[t]->si + j0 * bs[t]->sj;
        const int64_t sj = bs[t]->sj;
        if (sj == 1)
            for (int64_t j = 0; j < cols; j++) s[j] += bp[j];
        else
            for (int64_t j = 0; j < cols; j++) s[j] += bp[j * sj];
    }
}

#if !defined(__AVX512F__)
static inline float exp_nonpos(float x) {
    /* exp of x <= 0 (a score minus the row maximum); -inf and deep underflow give 0 */
    float e = kn_ew_expf_normal(x);
    return x < -87.0f ? 0.0f : e;
}
#endif

/* Row maximum and sum: explicit vector reductions (the compiler keeps float reductions in
 * order, one element at a time). */
static float row_max(const float *s, int64_t n) {
    int64_t j = 0;
    float mx = -INFINITY;
#if defined(__AVX512F__)
    if (n >= 16) {
        __m512 m = _mm512_set1_ps(-INFINITY);
        for (; j + 16 <= n; j += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(s + j));
        mx = _mm512_reduce_max_ps(m);
    }
#elif defined(__AVX2__)
    if (n >= 8) {
        __m256 m = _mm256_set1_ps(-INFINITY);
        for (; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + j));
        float t[8];
        _mm256_storeu_ps(t, m);
        for (int x = 0; x < 8; x++) mx = t[x] > mx ? t[x] : mx;
    }
#endif
    for (; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    return mx;
}

#if !defined(__AVX512F__)
#if !defined(__AVX512F__)
static float row_sum(const float *s, int64_t n) {
    int64_t j = 0;
    float sum = 0.0f;
#if defined(__AVX512F__)
    if (n >= 16) {
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        for (; j + 32 <= n; j += 32) {
            a0 = _mm512_add_ps(a0, _mm512_loadu_ps(s + j));
            a1 = _mm512_add_ps(a1, _mm512_loadu_ps(s + j + 16));
        }
        for (; j + 16 <= n; j += 16) a0 = _mm512_add_ps(a0, _mm512_loadu_ps(s + j));
        sum = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    }
#elif defined(__AVX2__)
    if (n >= 8) {
        __m256 a0 = _mm256_setzero_ps();
        for (; j + 8 <= n; j += 8) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(s + j));
        float t[8];
        _mm256_storeu_ps(t, a0);
        for (int x = 0; x < 8; x++) sum += t[x];
    }
#endif
    for (; j < n; j++) sum += s[j];
    return sum;
}
#endif
#endif

/* s[j] = exp(s[j] - mx) for s[j] <= mx; returns the sum. With AVX-512: exp(x) = 2^(x log2 e)
 * = 2^k * 2^f with k = round(x log2 e), |f| <= 1/2, 2^f by its Taylor polynomial of degree 6
 * (relative error 1.2e-7, as accurate as the float rounding of x log2 e around it) and the scale
 * by 2^k with vscalefps, which also takes -inf (and anything below 2^-149) to 0. The sum is
 * accumulated in the same pass. NaN scores stay NaN. */
static float exp_row(float *s, int64_t n, float mx) {
#if defined(__AVX512F__)
    const __m512 vmx = _mm512_set1_ps(mx), l2e = _mm512_set1_ps(1.44269504088896341f), lo = _mm512_set1_ps(-150.0f);
    const __m512 c6 = _mm512_set1_ps(1.5403530393381610e-4f), c5 = _mm512_set1_ps(1.3333558146428443e-3f),
                 c4 = _mm512_set1_ps(9.6181291076284772e-3f), c3 = _mm512_set1_ps(5.5504108664821580e-2f),
                 c2 = _mm512_set1_ps(2.4022650695910071e-1f), c1 = _mm512_set1_ps(6.9314718055994531e-1f),
                 one = _mm512_set1_ps(1.0f);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1);
        __m512 x = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), vmx), l2e);
        x = _mm512_max_ps(lo, x); /* NaN passes through (max returns its second operand) */
        __m512 k = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 f = _mm512_sub_ps(x, k);
        __m512 p = _mm512_fmadd_ps(c6, f, c5);
        p = _mm512_fmadd_ps(p, f, c4);
        p = _mm512_fmadd_ps(p, f, c3);
        p = _mm512_fmadd_ps(p, f, c2);
        p = _mm512_fmadd_ps(p, f, c1);
        p = _mm512_fmadd_ps(p, f, one);
        __m512 e = _mm512_scalef_ps(p, k);
        _mm512_mask_storeu_ps(s + j, m, e);
        acc = _mm512_mask_add_ps(acc, m, acc, e);
    }
    return _mm512_reduce_add_ps(acc);
#else
    for (int64_t j = 0; j < n; j++) s[j] = exp_nonpos(s[j] - mx);
    return row_sum(s, n);
#endif
}

static void scale_row(float *s, int64_t n, float f) {
    for (int64_t j = 0; j < n; j++) s[j] *= f;
}

/* Softmax of one row in float (all -inf: zeros). */
static void softmax_f32(float *s, int64_t n) {
    float mx = row_max(s, n);
    if (mx == -INFINITY) {
        for (int64_t j = 0; j < n; j++) s[j] = s[j] != s[j] ? s[j] : 0.0f;
        return;
    }
    scale_row(s, n, 1.0f / exp_row(s, n, mx));
}

/* Softmax with an attention sink: the logit `sink` joins the denominator (its value is zero). */
static void softmax_sink(float *s, int64_t n, float sink) {
    float mx = row_max(s, n);
    if (sink > mx) mx = sink;
    float sum = exp_row(s, n, mx) + expf(sink - mx);
    scale_row(s, n, 1.0f / sum);
}

/* Softmax of one row the way the reference computes it in type t: every elementwise step
 * rounded to t, the sum accumulated as numpy does for that type (bfloat16 rounds each partial
 * sum, float16 accumulates in float). */
static void softmax_emulated(kiln_dtype t, float *s, int64_t n) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    float safe = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        float x = kn_attn_round(t, s[j] - safe);
        float e = x == -INFINITY ? 0.0f : kn_attn_round(t, expf(x));
        s[j] = e;
        sum = t == KILN_DTYPE_BFLOAT16 ? kn_attn_round(t, sum + e) : sum + e;
    }
    sum = kn_attn_round(t, sum);
    if (sum == 0.0f) sum = 1.0f;
    for (int64_t j = 0; j < n; j++) s[j] = kn_attn_round(t, s[j] / sum);
}

/* ------------------------------------------------------------------ tasks */

typedef struct attn_job {
    const kn_attn *a;
    int64_t rows;   /* query rows per block */
    int64_t blocks; /* blocks per (batch, head) */
    int64_t tile;   /* keys per tile; 0 = the whole range as one tile */
    bool emulate;   /* reference rounding (half types) */
    bool skip;      /* key ranges the causal/window masks exclude are skipped (no qk copy) */
    bool copy_kv;   /* copy strided K/V rows of a head densely before use (scratch.kc) */
    kiln_dtype sm_t;
    int failed;
} attn_job;

typedef struct scratch {
    float *s;       /* rows x lds scores */
    int64_t lds;
    float *m, *l, *corr;
    int64_t *iv; /* per row: lo, hi, plo, phi (row_range) */
    unsigned char *ok;
    float *kc, *vc;    /* dense copies of one (batch, kv head)'s K and V rows, or NULL */
    int64_t copied_bh; /* which b * kv_heads + kvh they hold; -1 none */
} scratch;

static inline float *qk_row(const kn_attn *a, int64_t b, int64_t h, int64_t i) {
    return a->qk + ((b * a->q_heads + h) * a->sq + i) * a->skv;
}

static int run_block(const attn_job *j, scratch *w, int64_t b, int64_t h, int64_t i0, int64_t rows) {
    const kn_attn *a = j->a;
    const int64_t kvh = h / (a->q_heads / a->kv_heads);
    const float *q = a->q.p + b * a->q.sb + h * a->q.sh + i0 * a->q.ss;
    const float *k = a->k.p + b * a->k.sb + kvh * a->k.sh;
    const float *v = a->v.p + b * a->v.sb + kvh * a->v.sh;
    int64_t ks = a->k.ss, vs = a->v.ss;
    if (w->kc) {
        /* K and V rows interleaved with other heads' (heads in the last dimension): a dense copy
         * of this head's, made once per thread and kept for its following blocks, keeps the
         * GEMMs' packing reads off a large power-of-two stride (cache set conflicts) */
        const int64_t bh = b * a->kv_heads + kvh;
        if (w->copied_bh != bh) {
            for (int64_t r = 0; r < a->skv; r++) {
                memcpy(w->kc + r * a->dk, k + r * ks, sizeof(float) * (size_t)a->dk);
                memcpy(w->vc + r * a->dv, v + r * vs, sizeof(float) * (size_t)a->dv);
            }
            w->copied_bh = bh;
        }
        k = w->kc;
        v = w->vc;
        ks = a->dk;
        vs = a->dv;
    }
    float *y = a->y + b * a->y_sb + h * a->y_sh + i0 * a->y_ss;
    const kiln_dtype rt = j->emulate ? a->round_to : KILN_DTYPE_FLOAT;

    /* the key range any row of the block may see */
    int64_t J0 = a->skv, J1 = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t *iv = w->iv + 4 * r;
        row_range(a, b, i0 + r, &iv[0], &iv[1], &iv[2], &iv[3]);
        if (iv[0] < iv[1]) {
            J0 = min64(J0, iv[0]);
            J1 = max64(J1, iv[1]);
        }
        w->ok[r] = !a->zero_masked_rows || row_has_key(a, b, h, i0 + r, max64(iv[0], iv[2]), min64(iv[1], iv[3]));
        /* the sink starts the running softmax as a key of its own (value zero) */
        w->m[r] = a->sink ? a->sink[h] : -INFINITY;
        w->l[r] = a->sink ? 1.0f : 0.0f;
    }
    if (!j->skip) {
        J0 = 0;
        J1 = a->skv;
    }
    if (J0 >= J1) {
        /* no key for any row: the masked-row result (zeros) */
        for (int64_t r = 0; r < rows; r++) memset(y + r * a->y_ss, 0, sizeof(float) * (size_t)a->dv);
        if (a->qk && a->qk_mode == 3)
            for (int64_t r = 0; r < rows; r++) memset(qk_row(a, b, h, i0 + r), 0, sizeof(float) * (size_t)a->skv);
        return 0;
    }
    const int64_t tile = j->tile ? j->tile : J1 - J0;
    const bool single = tile >= J1 - J0;
    const float alpha = j->emulate ? 1.0f : a->scale;
    for (int64_t jt = J0; jt < J1; jt += tile) {
        const int64_t n = min64(tile, J1 - jt);
        float *S = w->s;
        const int64_t lds = w->lds;
        if (kn_sgemm(NULL, false, true, rows, n, a->dk, alpha, q, a->q.ss, k + jt * ks, ks, 0.0f, S, lds))
            return 1;
        for (int64_t r = 0; r < rows; r++) {
            float *s = S + r * lds;
            const int64_t i = i0 + r;
            if (rt != KILN_DTYPE_FLOAT)
                for (int64_t x = 0; x < n; x++) s[x] = kn_attn_round(rt, s[x]);
            if (a->qk && a->qk_mode == 0) memcpy(qk_row(a, b, h, i) + jt, s, sizeof(float) * (size_t)n);
            if (a->softcap > 0.0f) softcap_row(a, rt, s, n);
            if (a->qk && a->qk_mode == 1) memcpy(qk_row(a, b, h, i) + jt, s, sizeof(float) * (size_t)n);
            mask_row(a, b, h, i, w->iv + 4 * r, jt, n, s);
            if (rt != KILN_DTYPE_FLOAT)
                for (int64_t x = 0; x < n; x++) s[x] = kn_attn_round(rt, s[x]);
            if (a->qk && a->qk_mode == 2) memcpy(qk_row(a, b, h, i) + jt, s, sizeof(float) * (size_t)n);
            if (single) {
                if (j->emulate) {
                    if (j->sm_t != rt)
                        for (int64_t x = 0; x < n; x++) s[x] = kn_attn_round(j->sm_t, s[x]);
                    softmax_emulated(j->sm_t, s, n);
                } else if (a->sink) {
                    softmax_sink(s, n, a->sink[h]);
                } else {
                    softmax_f32(s, n);
                }
                if (!w->ok[r]) memset(s, 0, sizeof(float) * (size_t)n);
                if (rt != KILN_DTYPE_FLOAT)
                    for (int64_t x = 0; x < n; x++) s[x] = kn_attn_round(rt, s[x]);
                if (a->qk && a->qk_mode == 3) memcpy(qk_row(a, b, h, i) + jt, s, sizeof(float) * (size_t)n);
                continue;
            }
            /* online softmax: probabilities against the running maximum */
            float mt = row_max(s, n);
            float mnew = mt > w->m[r] ? mt : w->m[r];
            if (mnew == -INFINITY) {
                memset(s, 0, sizeof(float) * (size_t)n);
                w->corr[r] = 1.0f;
                continue;
            }
            float sum = exp_row(s, n, mnew);
            float corr = w->m[r] == -INFINITY ? 0.0f : expf(w->m[r] - mnew);
            w->corr[r] = corr;
            w->l[r] = w->l[r] * corr + sum;
            w->m[r] = mnew;
        }
        if (!single && jt > J0)
            for (int64_t r = 0; r < rows; r++) {
                float c = w->corr[r];
                if (c == 1.0f) continue;
                float *yr = y + r * a->y_ss;
                for (int64_t x = 0; x < a->dv; x++) yr[x] *= c;
            }
        if (kn_sgemm(NULL, false, false, rows, a->dv, n, 1.0f, S, lds, v + jt * vs, vs, jt > J0 ? 1.0f : 0.0f,
                     y, a->y_ss))
            return 1;
    }
    if (!single)
        for (int64_t r = 0; r < rows; r++) {
            float f = w->ok[r] && w->l[r] > 0.0f ? 1.0f / w->l[r] : 0.0f;
            float *yr = y + r * a->y_ss;
            for (int64_t x = 0; x < a->dv; x++) yr[x] = f == 0.0f ? 0.0f : yr[x] * f;
        }
    return 0;
}

static void attn_range(void *arg, int64_t t0, int64_t t1) {
    attn_job *j = arg;
    const kn_attn *a = j->a;
    scratch w;
    w.lds = j->tile ? j->tile : a->skv;
    if (w.lds < 1) w.lds = 1;
    size_t R = (size_t)j->rows;
    w.s = malloc(sizeof(float) * R * (size_t)w.lds);
    w.m = malloc(sizeof(float) * R * 3);
    w.iv = malloc(sizeof(int64_t) * R * 4);
    w.ok = malloc(R);
    w.kc = w.vc = NULL;
    w.copied_bh = -1;
    if (j->copy_kv) {
        w.kc = malloc(sizeof(float) * (size_t)(a->skv * a->dk + 1));
        w.vc = malloc(sizeof(float) * (size_t)(a->skv * a->dv + 1));
        if (!w.kc || !w.vc) { /* optional: read in place instead */
            free(w.kc);
            free(w.vc);
            w.kc = w.vc = NULL;
        }
    }
    if (!w.s || !w.m || !w.iv || !w.ok) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        goto done;
    }
    w.l = w.m + R;
    w.corr = w.m + 2 * R;
    for (int64_t t = t0; t < t1; t++) {
        int64_t blk = t % j->blocks, bh = t / j->blocks;
        int64_t b = bh / a->q_heads, h = bh % a->q_heads;
        int64_t i0 = blk * j->rows;
        if (run_block(j, &w, b, h, i0, min64(j->rows, a->sq - i0))) {
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
            break;
        }
    }
done:
    free(w.s);
    free(w.m);
    free(w.iv);
    free(w.kc);
    free(w.vc);
    free(w.ok);
}

kiln_status kn_attn_run(kn_threadpool *pool, const kn_attn *a) {
    if (a->batch <= 0 || a->q_heads <= 0 || a->sq <= 0) return KILN_OK;
    if (a->kv_heads <= 0 || a->q_heads % a->kv_heads)
        return kn_error(KILN_ERR_SHAPE, "attention: %lld query heads are not a multiple of %lld key/value heads",
                        (long long)a->q_heads, (long long)a->kv_heads);
    attn_job j = {.a = a};
    j.sm_t = a->softmax_to != KILN_DTYPE_UNDEFINED ? a->softmax_to : a->round_to;
    j.emulate = is_half(a->round_to) || is_half(j.sm_t);
    if (a->sink && j.emulate) return kn_error(KILN_ERR_UNSUPPORTED, "attention: a sink with 16-bit rounding of the softmax");
    const bool whole = j.emulate || a->qk;
    j.skip = !a->qk;
    j.tile = whole || a->skv <= SINGLE_TILE_MAX ? 0 : KV_TILE;
    int64_t threads = kn_threadpool_size(pool);
    /* with causal/window masks smaller blocks skip more of the excluded keys */
    j.rows = a->causal || a->left_window >= 0 || a->right_window >= 0 ? BLOCK_ROWS / 2 : BLOCK_ROWS;
    while (j.rows > 8 && a->batch * a->q_heads * ((a->sq + j.rows - 1) / j.rows) < 4 * threads) j.rows /= 2;
    if (j.rows > a->sq) j.rows = a->sq;
    j.blocks = (a->sq + j.rows - 1) / j.rows;
    /* worth it when several blocks (or query heads of a group) read each head's K and V */
    j.copy_kv = (a->k.ss != a->dk || a->v.ss != a->dv) && j.blocks * (a->q_heads / a->kv_heads) >= 2 && a->sq >= 16;
    int64_t tasks = a->batch * a->q_heads * j.blocks;
    kn_parallel_for(pool, tasks, 1, attn_range, &j);
    if (j.failed) return kn_error(KILN_ERR_OUT_OF_MEMORY, "attention: out of memory for the score buffers");
    return KILN_OK;
}

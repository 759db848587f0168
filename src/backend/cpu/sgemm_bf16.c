/* bf16 GEMM for the CPU provider's precision=bf16 (see sgemm_bf16.h).
 *
 * Layout: vdpbf16ps multiplies pairs: lane i of the accumulator gains a[2i]*b[2i] + a[2i+1]*b[2i+1].
 * So both packed operands hold pairs of consecutive K (even K first, zero past K) as 32-bit
 * units. Packed A: panels of BMR rows, per pair of K the BMR rows' pairs (BMR units). Packed B:
 * panels of BNR columns, per pair of K the BNR columns' pairs (BNR units = 2 vectors). Whole
 * operands are packed slice by slice of BKC (as sgemm.c does): slice pc starts at element
 * pc * Mp (Mp: M rounded up to BMR) and holds the panels of all rows, panel ic at ic * kcp.
 *
 * The micro-kernel keeps a BMR x BNR block of C in 24 accumulators; per pair of K it loads the
 * two vectors of B and broadcasts each row's pair of A (a memory operand of vdpbf16ps).
 *
 * On CPUs with AMX (AMX-TILE, AMX-BF16) the tiles do the products instead: TDPBF16PS multiplies a
 * 16-row tile of A (16 rows x 16 pairs of K, each row's pairs contiguous) by a tile of B (16 pairs
 * of K x 16 columns' pairs: exactly 16 rows of a packed B panel, 128 bytes apart) into 16 x 16
 * fp32. So B keeps its layout, only with each slice's depth rounded up to a tile's (32, zeros
 * past K), and A's panels become 16 rows, row-major ([row][pair], zeros past K and M). That
 * kernel keeps a 32 x 32 block of C in four tiles. Which kernel (and so which packing) a process
 * runs is chosen once, with the CPU support (kn_bgemm_amx).
 *
 * A product call packs (rounds) op(A) and op(B) whole once, on the pool, unless they are constant
 * weights already packed for the session (kn_cpu_const_rederived: the bf16 form is made from the
 * fp32 operand the first time and kept), or B comes from a packing callback (a convolution's
 * implicit im2col: packed per block, in fp32 by the callback, then rounded). Tiles of C run on
 * the pool as in sgemm.c. */
#include "backend/cpu/sgemm_bf16.h"

#include "backend/backend.h"
#include "backend/cpu/const_cache.h"
#include "backend/cpu/isa.h"
#include "util/status.h"
#include "util/thread_buffer.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The kernel: x86-64 with a compiler that has the AVX512_BF16 intrinsics (compiled for that ISA
 * whatever the build's -march: only called once cpuid said yes). Elsewhere, or with
 * -DKN_NO_BF16_KERNEL, stubs: no CPU supports the option there. */
#if defined(__x86_64__) && defined(__GNUC__) && (defined(__clang__) || __GNUC__ >= 10) && !defined(KN_NO_BF16_KERNEL)
#define KN_BF16_X86 1
#include <cpuid.h>
#include <immintrin.h>
#include "backend/cpu/vec_math.h" /* kn_v16_transpose_regs (bf16_pairs.h), outside the target region */
/* AMX's intrinsics: GCC 11, clang 12 */
#if (defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11)
#define KN_AMX_X86 1
#endif
#endif

#define BMR 12
#define BNR 32
#ifndef BKC
#define BKC 256 /* depth of a slice (even): a B micro-panel is BKC * BNR * 2 bytes (16 KB) */
#endif
#define BMC (BMR * 24) /* rows per block of A: 288 takes ViT's 197 and 256 in one (a 5-row second block re-read all of B) */
#define BNC 1024       /* columns per block of B made by a packing callback */
#define CB_NC 256      /* columns per packing-callback call (its fp32 output is CB_NC * BKC floats) */
#define MIN_FLOPS_PER_THREAD 5e5
#define PACK_B_COLS 256 /* columns of B per pass over a unit's rows (pack_b_unit, B untransposed) */
#define C16_COLS 256 /* columns of C per block stored into a bf16 C (kn_bgemm_io) when B's panels go outer */
#define ROWS_MAX_M 4 /* products of fewer rows run as rows times B's panels (row_range) */
#define MIN_TILE_FLOPS 1.6e7
#define OVERSUB 4

_Static_assert(BKC % 2 == 0 && BNC % CB_NC == 0 && CB_NC % BNR == 0, "block sizes");

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t pad_to(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* The packing of the kernel this process runs (set with the CPU support, or by a test's
 * kn_bgemm_force_amx): vdpbf16ps's (depth in pairs, panels of BMR rows) or AMX's (depth in tiles
 * of 32, panels of AMR rows, C in blocks of AMX_MR rows). */
#define AMR 16
#define AMX_MR 32
static bool use_amx;
static int64_t kpad = 2; /* a slice's depth rounded up to this */
static int64_t amr = BMR; /* rows of a packed A panel */
static int64_t cmr = BMR; /* rows of C per micro-kernel call: where tiles of C start */

void kn_bgemm_tile(int *mr, int *nr, int *kc) {
    kn_bf16_cpu_supported();
    *mr = (int)cmr;
    *nr = BNR;
    *kc = BKC;
}

float kn_bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u; /* NaN: quiet, keep it a NaN */
    else u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* ---------------------------------------------------------------- CPU support and the option */

#if defined(KN_BF16_X86)
static bool detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false; /* OSXSAVE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0xE6u) != 0xE6u) return false; /* the OS saves SSE, AVX, opmask and ZMM state */
    if (__get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned max_sub = a;
    const bool f = b & (1u << 16), bw = b & (1u << 30), vl = b & (1u << 31);
    if (!f || !bw || !vl || max_sub < 1) return false;
    __cpuid_count(7, 1, a, b, c, d);
    return (a & (1u << 5)) != 0; /* AVX512_BF16 */
}
#else
static bool detect(void) { return false; }
#endif

/* the tiles only where the compiler has their intrinsics and Linux gave the tile state */
static bool amx_permitted(void) {
#if defined(KN_AMX_X86)
    return kn_cpu_amx_permitted();
#else
    return false;
#endif
}

static bool cpu_has, amx_has;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static void set_amx(bool on) {
    use_amx = on;
    kpad = on ? 32 : 2;
    amr = on ? AMR : BMR;
    cmr = on ? AMX_MR : BMR;
}
/* also needs the avx512 level in use (backend/cpu/isa.h): KILN_CPU_ISA=avx2 or baseline, or
 * KILN_CPU_MASK=avx512bf16, stands for a CPU without it; KILN_CPU_MASK=amxbf16 for one without AMX */
static void cpu_init_once(void) {
    cpu_has = detect() && kn_cpu_isa_active() >= KN_ISA_AVX512 && (kn_cpu_features() & KN_CPUF_AVX512BF16);
    amx_has = cpu_has && (kn_cpu_features() & KN_CPUF_AMXBF16) && amx_permitted();
    set_amx(amx_has);
}

bool kn_bgemm_amx(void) {
    pthread_once(&cpu_once, cpu_init_once);
    return use_amx;
}

bool kn_bgemm_force_amx(bool on) {
    pthread_once(&cpu_once, cpu_init_once);
    if (on && !amx_has) return false;
    set_amx(on);
    return true;
}

bool kn_bf16_cpu_supported(void) {
    pthread_once(&cpu_once, cpu_init_once);
    return cpu_has;
}

bool kn_bf16_cpu_usable(void) {
    const char *e = getenv("KILN_CPU_NO_BF16");
    return kn_bf16_cpu_supported() && !(e && *e && strcmp(e, "0"));
}

kiln_status kn_cpu_precision_check(int precision, bool has_bf16) {
    switch (precision) {
    case KN_PRECISION_FP32: return KILN_OK;
    case KN_PRECISION_BF16:
        if (has_bf16) return KILN_OK;
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "provider 'cpu': precision=bf16 needs a CPU with AVX512_BF16 (and AVX-512 enabled by the "
                        "OS); this one has none, so the bf16 products cannot run here: use precision=fp32 (the default)");
    case KN_PRECISION_TF32:
    case KN_PRECISION_FP16:
        return kn_error(KILN_ERR_UNSUPPORTED, "provider 'cpu': precision=%s is not a CPU precision (fp32 or bf16)",
                        precision == KN_PRECISION_TF32 ? "tf32" : "fp16");
    default: return kn_error(KILN_ERR_INVALID_ARGUMENT, "provider 'cpu': unknown precision %d", precision);
    }
}

bool kn_bgemm_node(const kn_node *n) {
    static const char *const onnx[] = {"MatMul", "Gemm", "Conv", "ConvTranspose", NULL};
    static const char *const ms[] = {"FusedMatMul", "FusedGemm", "FusedConv", NULL};
    /* kiln.Attention: its two products per block of query rows (fused_attention.c) */
    static const char *const kiln[] = {"FusedMatMul", "FusedGemm", "FusedConv", "Attention", NULL};
    if (!n || !n->op_type) return false;
    const char *const *list = !n->domain || !*n->domain          ? onnx
                              : !strcmp(n->domain, "kiln")          ? kiln
                              : !strcmp(n->domain, "com.microsoft") ? ms
                                                                    : NULL;
    for (int i = 0; list && list[i]; i++)
        if (!strcmp(n->op_type, list[i])) return true;
    return false;
}

/* ---------------------------------------------------------------- the thread's mark */

static _Thread_local void *tl_state;
static _Thread_local bool tl_on;

void kn_bgemm_enter(void *state, kn_bgemm_scope *save) {
    save->prev_state = tl_state;
    save->prev_on = tl_on;
    tl_state = state;
    tl_on = true;
}

void kn_bgemm_leave(const kn_bgemm_scope *save) {
    tl_state = save->prev_state;
    tl_on = save->prev_on;
}

bool kn_bgemm_active(void) { return tl_on; }
void *kn_bgemm_state(void) { return tl_on ? tl_state : NULL; }

bool kn_bgemm_takes(const kn_sgemm_batch *p) {
    if (!kn_bf16_cpu_supported() || p->count <= 0 || p->N < 8 || p->K < 8) return false;
    /* 1-3 rows times kept weights (a classifier at batch 1): the weights' bf16 form streams half
     * the bytes of their fp32 one (row_range) */
    if (p->M < ROWS_MAX_M) return p->M >= 1 && p->b_packed && !p->pack_b && p->N >= 16;
    /* rounding an operand costs about as much per element as a row (column) of products: with few
     * rows (columns) and the other operand not kept converted, fp32 is as fast */
    const bool a_kept = p->a_packed || p->at_packed, b_kept = (p->b_packed && !p->pack_b) || p->pack_b;
    if (p->M < 16 && !b_kept) return false;
    if (p->N < 16 && !a_kept) return false;
    return true;
}

#if defined(KN_BF16_X86)

/* the kernels' own target, whatever the file's -march (clang ignores GCC's target pragma) */
#if defined(__clang__) && defined(KN_AMX_X86)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16"))), apply_to = function)
#elif defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))), apply_to = function)
#else
#pragma GCC push_options
#if defined(KN_AMX_X86)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")
#endif
#endif

/* ---------------------------------------------------------------- conversion helpers */

#include "backend/cpu/bf16_pairs.h"

/* 16 pairs of a contiguous row segment x[0:n] (n <= 32; zero past n) */
static inline __m512i row_pairs(const float *x, int64_t n) {
    __m512 a = _mm512_maskz_loadu_ps(m16(n), x), b = _mm512_maskz_loadu_ps(m16(n - 16), x + 16);
    return (__m512i)_mm512_cvtne2ps_pbh(b, a); /* elements 0..15 from a, 16..31 from b: in order */
}

/* ---------------------------------------------------------------- packing */

/* Rows [i0, i0+mr) of op(A), depth [p0, p0+kc), as one panel: kq = ceil(kc/2) pairs of BMR units. */
static void pack_a_panel(const float *A, int64_t lda, bool trans, int64_t i0, int mr, int64_t p0, int64_t kc,
                         uint32_t *dst) {
    const int64_t kq = (kc + 1) / 2;
    const __mmask16 keep = (__mmask16)((1u << BMR) - 1);
    if (trans) {
        const __mmask16 lm = m16(mr);
        for (int64_t q = 0; q < kq; q++) {
            const float *r0 = A + (p0 + 2 * q) * lda + i0;
            __m512 lo = _mm512_maskz_loadu_ps(lm, r0);
            __m512 hi = 2 * q + 1 < kc ? _mm512_maskz_loadu_ps(lm, r0 + lda) : _mm512_setzero_ps();
            _mm512_mask_storeu_epi32(dst + q * BMR, keep, pairs_of(lo, hi));
        }
        return;
    }
    for (int64_t q0 = 0; q0 < kq; q0 += 16) {
        __m512i v[16], o[16];
        const int64_t left = kc - 2 * q0;
        for (int r = 0; r < 16; r++)
            v[r] = r < mr ? row_pairs(A + (i0 + r) * lda + p0 + 2 * q0, left) : _mm512_setzero_si512();
        tr16(v, o);
        const int n = (int)min64(16, kq - q0);
        for (int t = 0; t < n; t++) _mm512_mask_storeu_epi32(dst + (q0 + t) * BMR, keep, o[t]);
    }
}

/* The same for AMX: rows [i0, i0+mr) (mr <= AMR) as a panel of AMR rows of kqp units each (a row's
 * pairs in order; zero past kc and past mr). */
static void pack_a_panel_rows(const float *A, int64_t lda, bool trans, int64_t i0, int mr, int64_t p0, int64_t kc,
                              int64_t kqp, uint32_t *dst) {
    if (!trans) {
        /* row by row: whole 32-element runs unmasked, then the masked tail and AMX's zeros past kc;
         * rows past mr zero. Written over the 16-pair steps with a test per row and step, it spilled
         * and branched (perf: pack_a_panel_rows 19% of whisper's encoder in bf16, the activations
         * of every MatMul and the attention's score rows) */
        for (int r = 0; r < AMR; r++) {
            uint32_t *d = dst + r * kqp;
            int64_t q = 0;
            if (r < mr) {
                const float *x = A + (i0 + r) * lda + p0;
                for (; 2 * q + 32 <= kc; q += 16)
                    _mm512_storeu_si512(d + q, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 2 * q + 16),
                                                                           _mm512_loadu_ps(x + 2 * q)));
                for (; q < kqp && 2 * q < kc; q += 16) _mm512_storeu_si512(d + q, row_pairs(x + 2 * q, kc - 2 * q));
            }
            for (; q < kqp; q += 16) _mm512_storeu_si512(d + q, _mm512_setzero_si512());
        }
        return;
    }
    /* op(A)'s rows are A's columns: v[t] holds pair q0+t of the 16 rows, transposed */
    const __mmask16 lm = m16(mr);
    for (int64_t q0 = 0; q0 < kqp; q0 += 16) {
        __m512i v[16], o[16];
        const int64_t left = kc - 2 * q0;
        for (int t = 0; t < 16; t++) {
            const int64_t k = p0 + 2 * (q0 + t);
            const float *r0 = A + k * lda + i0;
            __m512 lo = 2 * t < left ? _mm512_maskz_loadu_ps(lm, r0) : _mm512_setzero_ps();
            __m512 hi = 2 * t + 1 < left ? _mm512_maskz_loadu_ps(lm, r0 + lda) : _mm512_setzero_ps();
            v[t] = pairs_of(lo, hi);
        }
        tr16(v, o);
        for (int r = 0; r < AMR; r++) _mm512_storeu_si512(dst + r * kqp + q0, o[r]);
    }
}

/* Columns [j0, j0+nr) of op(B) (nr <= BNR), depth [p0, p0+kc), as one panel of kq pairs of BNR units
 * (kq: kc rounded up to kpad, halved; zero past kc). */
static void pack_b_panel(const float *B, int64_t ldb, bool trans, int64_t j0, int nr, int64_t p0, int64_t kc,
                         uint32_t *dst) {
    const int64_t kq = pad_to(kc, kpad) / 2;
    if (!trans) {
        const __mmask16 m0 = m16(nr), m1 = m16(nr - 16);
        for (int64_t q = 0; q < kq; q++) {
            const float *r0 = B + (p0 + 2 * q) * ldb + j0;
            const bool one = 2 * q < kc, two = 2 * q + 1 < kc;
            __m512 l0 = one ? _mm512_maskz_loadu_ps(m0, r0) : _mm512_setzero_ps();
            __m512 l1 = one ? _mm512_maskz_loadu_ps(m1, r0 + 16) : _mm512_setzero_ps();
            __m512 h0 = two ? _mm512_maskz_loadu_ps(m0, r0 + ldb) : _mm512_setzero_ps();
            __m512 h1 = two ? _mm512_maskz_loadu_ps(m1, r0 + ldb + 16) : _mm512_setzero_ps();
            _mm512_storeu_si512(dst + q * BNR, pairs_of(l0, h0));
            _mm512_storeu_si512(dst + q * BNR + 16, pairs_of(l1, h1));
        }
        return;
    }
    /* column j of op(B) is row j of B: 16 columns at a time, transposed */
    for (int h = 0; h < BNR / 16; h++) {
        const int rows = (int)min64(16, nr - 16 * h);
        for (int64_t q0 = 0; q0 < kq; q0 += 16) {
            __m512i v[16], o[16];
            const int64_t left = kc - 2 * q0;
            for (int r = 0; r < 16; r++)
                v[r] = r < rows ? row_pairs(B + (j0 + 16 * h + r) * ldb + p0 + 2 * q0, left) : _mm512_setzero_si512();
            tr16(v, o);
            const int n = (int)min64(16, kq - q0);
            for (int t = 0; t < n; t++) _mm512_storeu_si512(dst + (q0 + t) * BNR + 16 * h, o[t]);
        }
    }
}

/* A packing callback's fp32 panels (kc x BNR floats each, k-major) rounded into bf16 panels. */
static void round_b_panels(const float *src, int64_t panels, int64_t kc, uint32_t *dst) {
    const int64_t kq = pad_to(kc, kpad) / 2;
    for (int64_t pnl = 0; pnl < panels; pnl++, src += kc * BNR, dst += kq * BNR) {
        for (int64_t q = 0; q < kq; q++) {
            const float *r0 = src + 2 * q * BNR;
            if (2 * q >= kc) { /* AMX's depth past K */
                _mm512_storeu_si512(dst + q * BNR, _mm512_setzero_si512());
                _mm512_storeu_si512(dst + q * BNR + 16, _mm512_setzero_si512());
                continue;
            }
            const bool two = 2 * q + 1 < kc;
            __m512 l0 = _mm512_loadu_ps(r0), l1 = _mm512_loadu_ps(r0 + 16);
            __m512 h0 = two ? _mm512_loadu_ps(r0 + BNR) : _mm512_setzero_ps();
            __m512 h1 = two ? _mm512_loadu_ps(r0 + BNR + 16) : _mm512_setzero_ps();
            _mm512_storeu_si512(dst + q * BNR, pairs_of(l0, h0));
            _mm512_storeu_si512(dst + q * BNR + 16, pairs_of(l1, h1));
        }
    }
}

/* Whole op(A) panel `ir` (rows ir..ir+BMR) over every slice, into the whole layout at dst. */
static void pack_a_whole_panel(const float *A, int64_t lda, bool trans, int64_t M, int64_t K, int64_t ir,
                               uint16_t *dst) {
    const int64_t Mp = pad_to(M, amr);
    for (int64_t pc = 0; pc < K; pc += BKC) {
        const int64_t kc = min64(BKC, K - pc), kcp = pad_to(kc, kpad);
        uint32_t *d = (uint32_t *)(dst + pc * Mp + ir * kcp);
        if (use_amx) pack_a_panel_rows(A, lda, trans, ir, (int)min64(AMR, M - ir), pc, kc, kcp / 2, d);
        else pack_a_panel(A, lda, trans, ir, (int)min64(BMR, M - ir), pc, kc, d);
    }
}

static void pack_b_whole_panel(const float *B, int64_t ldb, bool trans, int64_t N, int64_t K, int64_t jr,
                               uint16_t *dst) {
    const int64_t Np = pad_to(N, BNR);
    for (int64_t pc = 0; pc < K; pc += BKC) {
        const int64_t kc = min64(BKC, K - pc), kcp = pad_to(kc, kpad);
        pack_b_panel(B, ldb, trans, jr, (int)min64(BNR, N - jr), pc, kc, (uint32_t *)(dst + pc * Np + jr * kcp));
    }
}

/* Units of work packing op(B) (K x N) whole: NR-column panels when B is transposed (its rows are
 * columns of op(B), contiguous along K), else groups of 32 rows of B, read row after row (a 1x1
 * convolution's input planes are long rows: packing them panel by panel read them 128 bytes a row) */
static int64_t b_units(bool trans, int64_t N, int64_t K) { return trans ? (N + BNR - 1) / BNR : (K + 31) / 32; }

/* One BNR-column unit of rows k and k + 1 of B (offsets r0, r1; column j) as bf16 pairs into d:
 * from fp32 (b32, rounded) or bf16 (b16); the masks m0, m1 (row k) and h0, h1 (row k + 1) say which
 * of the unit's two 16-column halves are there (zero elsewhere). */
static inline void pack_pair_unit(const float *b32, const uint16_t *b16, int64_t r0, int64_t r1, int64_t j, __mmask16 m0,
                                  __mmask16 m1, __mmask16 h0, __mmask16 h1, uint32_t *d) {
    __m512i v0, v1;
    if ((m0 & m1 & h0 & h1) == 0xFFFF) {
        /* both rows whole: each row's 32 columns one load, the pairs by unpacking the two rows'
         * 16-bit elements (pairs of columns 8L..8L+3 in lane L of lo, 8L+4..8L+7 in hi) put back in
         * column order by one permute a vector (8 instructions for 32 pairs; widening each half,
         * shifting and or-ing took 14, and the bf16 packing was ~30% of a streamed 1x1's time) */
        /* (fp32 rows: each rounded to 32 bf16 by one vcvtne2ps2bf16, as vcvtneps2bf16 rounds) */
        const __m512i a = b32 ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(b32 + r0 + j + 16), _mm512_loadu_ps(b32 + r0 + j))
                              : _mm512_loadu_si512(b16 + r0 + j);
        const __m512i b = b32 ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(b32 + r1 + j + 16), _mm512_loadu_ps(b32 + r1 + j))
                              : _mm512_loadu_si512(b16 + r1 + j);
        const __m512i lo = _mm512_unpacklo_epi16(a, b), hi = _mm512_unpackhi_epi16(a, b);
        v0 = _mm512_permutex2var_epi64(lo, _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), hi);
        v1 = _mm512_permutex2var_epi64(lo, _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4), hi);
    } else if (b32) {
        v0 = pairs_of(_mm512_maskz_loadu_ps(m0, b32 + r0 + j), _mm512_maskz_loadu_ps(h0, b32 + r1 + j));
        v1 = pairs_of(_mm512_maskz_loadu_ps(m1, b32 + r0 + j + 16), _mm512_maskz_loadu_ps(h1, b32 + r1 + j + 16));
    } else {
        const __m512i l0 = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m0, b16 + r0 + j));
        const __m512i l1 = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m1, b16 + r0 + j + 16));
        const __m512i g0 = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(h0, b16 + r1 + j));
        const __m512i g1 = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(h1, b16 + r1 + j + 16));
        v0 = _mm512_or_si512(l0, _mm512_slli_epi32(g0, 16));
        v1 = _mm512_or_si512(l1, _mm512_slli_epi32(g1, 16));
    }
    _mm512_storeu_si512(d, v0);
    _mm512_storeu_si512(d + 16, v1);
}

/* Unit u of an untransposed op(B) (rows of ldb elements): B in fp32 (b32: pairs rounded) or
 * already in bf16 (b16, kn_bgemm_io's: a pair is the two rows' elements side by side); one of the
 * two is NULL. The last unit also writes AMX's zero pairs past K (up to the padded depth).
 * PACK_B_COLS columns at a time over the unit's rows: each panel's part is then one run of 16
 * pairs x 128 bytes; across all columns a row's writes went to every panel in turn, kq * 128
 * bytes apart (16 KB at K 256: one L1 set), 48% of a 256 -> 64 1x1 convolution's time */
static void pack_b_rows_unit(const float *b32, const uint16_t *b16, int64_t ldb, int64_t N, int64_t K, int64_t u,
                             uint16_t *dst) {
    const int64_t Np = pad_to(N, BNR);
    const int64_t k_end = u * 32 + 32 >= K ? pad_to(K, kpad) : u * 32 + 32;
    for (int64_t jb = 0; jb < N; jb += PACK_B_COLS)
        for (int64_t k = u * 32; k < k_end; k += 2) {
            const int64_t pc = k / BKC * BKC, kq = pad_to(min64(BKC, K - pc), kpad) / 2, ql = (k - pc) / 2;
            const int64_t je = min64(N, jb + PACK_B_COLS);
            uint32_t *d = (uint32_t *)(dst + pc * Np) + ql * BNR + jb * kq;
            const bool one = k < K, two = k + 1 < K;
            const int64_t r0 = one ? k * ldb : 0, r1 = two ? r0 + ldb : 0; /* rows k and k + 1 */
            for (int64_t jr = jb; jr < je; jr += BNR, d += kq * BNR) {
                const int64_t nr = min64(BNR, N - jr);
                const __mmask16 m0 = one ? m16(nr) : 0, m1 = one ? m16(nr - 16) : 0;
                const __mmask16 h0 = two ? m0 : 0, h1 = two ? m1 : 0;
                pack_pair_unit(b32, b16, r0, r1, jr, m0, m1, h0, h1, d);
            }
        }
}

static void pack_b_unit(const float *B, int64_t ldb, bool trans, int64_t N, int64_t K, int64_t u, uint16_t *dst) {
    if (trans) pack_b_whole_panel(B, ldb, true, N, K, u * BNR, dst);
    else pack_b_rows_unit(B, NULL, ldb, N, K, u, dst);
}

/* Rows [0, m) and columns [0, n) of S (row stride lds) clamped to [lo, hi] and rounded into d (row
 * stride ldd, bf16) */
static inline __m512 load_add(const float *add, const uint16_t *add16, int64_t at, __mmask16 k) {
    if (add) return _mm512_maskz_loadu_ps(k, add + at);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, add16 + at)), 16));
}

/* Rows [0, m) and columns [0, n) of S (row stride lds) plus add / add16 (row stride lda; ak: 0
 * none, 1 fp32, 2 bf16), clamped to [lo, hi] (ck: 0 not, 1 below only (hi +inf: a Relu), 2 both),
 * into C (row stride ldc): bf16 (c16, rounded) or fp32 (c32; may be S). Called with constant ak, ck
 * and c16-ness (one copy each): whole pairs of vectors unmasked, a bf16 pair one 64-byte store.
 * The per-vector masks and the clamp's min with +inf were half the instructions of a 1x1
 * convolution's epilogue, which bounded it (its 14 uops a vector at ~4 a cycle). Results are
 * those of the masked loop bit for bit (max and min kept in the same order; cvtne2ps rounds as cvtneps). */
static inline __attribute__((always_inline)) __m512 epi_vec(const int ak, const int ck, __m512 v, const float *add,
                                                            const uint16_t *add16, int64_t at, __m512 vlo, __m512 vhi) {
    if (ak == 1) v = _mm512_add_ps(v, _mm512_loadu_ps(add + at));
    if (ak == 2)
        v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32(
                                 _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(add16 + at))), 16)));
    if (ck >= 1) v = _mm512_max_ps(vlo, v);
    if (ck == 2) v = _mm512_min_ps(vhi, v);
    return v;
}

static inline __attribute__((always_inline)) void epi_rows_k(const int ak, const int ck, const bool half,
                                                              const float *S, int64_t lds, int64_t m, int64_t n,
                                                              const float *add, const uint16_t *add16, int64_t lda,
                                                              float lo, float hi, uint16_t *c16, float *c32,
                                                              int64_t ldc) {
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    for (int64_t r = 0; r < m; r++) {
        const float *sr = S + r * lds;
        int64_t j = 0;
        for (; j + 32 <= n; j += 32) {
            const __m512 v0 = epi_vec(ak, ck, _mm512_loadu_ps(sr + j), add, add16, r * lda + j, vlo, vhi);
            const __m512 v1 = epi_vec(ak, ck, _mm512_loadu_ps(sr + j + 16), add, add16, r * lda + j + 16, vlo, vhi);
            if (half) {
                _mm512_storeu_si512(c16 + r * ldc + j, (__m512i)_mm512_cvtne2ps_pbh(v1, v0));
            } else {
                _mm512_storeu_ps(c32 + r * ldc + j, v0);
                _mm512_storeu_ps(c32 + r * ldc + j + 16, v1);
            }
        }
        for (; j < n; j += 16) {
            const __mmask16 k = m16(n - j);
            __m512 v = _mm512_maskz_loadu_ps(k, sr + j);
            if (ak) v = _mm512_add_ps(v, load_add(add, add16, r * lda + j, k));
            if (ck >= 1) v = _mm512_max_ps(vlo, v);
            if (ck == 2) v = _mm512_min_ps(vhi, v);
            if (half) _mm256_mask_storeu_epi16(c16 + r * ldc + j, k, (__m256i)_mm512_cvtneps_pbh(v));
            else _mm512_mask_storeu_ps(c32 + r * ldc + j, k, v);
        }
    }
}

static void epi_rows(const float *S, int64_t lds, int64_t m, int64_t n, const float *add, const uint16_t *add16,
                     int64_t lda, bool clamp, float lo, float hi, uint16_t *c16, float *c32, int64_t ldc) {
    const int ak = add ? 1 : add16 ? 2 : 0;
    /* (lo -inf and hi +inf: max and min leave every value as it is, NaN and -0 included) */
    const int ck = !clamp || (lo == -INFINITY && hi == INFINITY) ? 0 : hi == INFINITY ? 1 : 2;
#define EPI(AK, CK)                                                                                                    \
    do {                                                                                                               \
        if (c16) epi_rows_k(AK, CK, true, S, lds, m, n, add, add16, lda, lo, hi, c16, NULL, ldc);                      \
        else epi_rows_k(AK, CK, false, S, lds, m, n, add, add16, lda, lo, hi, NULL, c32, ldc);                         \
        return;                                                                                                        \
    } while (0)
    switch (ak * 3 + ck) {
    case 0: EPI(0, 0);
    case 1: EPI(0, 1);
    case 2: EPI(0, 2);
    case 3: EPI(1, 0);
    case 4: EPI(1, 1);
    case 5: EPI(1, 2);
    case 6: EPI(2, 0);
    case 7: EPI(2, 1);
    default: EPI(2, 2);
    }
#undef EPI
}

static void store_c16(const float *S, int64_t lds, int64_t m, int64_t n, float lo, float hi, uint16_t *d,
                      int64_t ldd, const float *add, const uint16_t *add16, int64_t lda) {
    epi_rows(S, lds, m, n, add, add16, lda, true, lo, hi, d, NULL, ldd);
}

/* Rows [0, m) and columns [0, n) of fp32 C (row stride ldc) plus add (row stride lda; may be NULL),
 * clamped to [lo, hi] in place (kn_bgemm_io with C in fp32: a residual and a Relu or Clip) */
static void tail_c32(float *C, int64_t ldc, const float *add, const uint16_t *add16, int64_t lda, int64_t m, int64_t n,
                     float lo, float hi) {
    epi_rows(C, ldc, m, n, add, add16, lda, true, lo, hi, NULL, C, ldc);
}

/* ---------------------------------------------------------------- streamed B (kn_bgemm_io) */

/* Columns [j0, j0 + nb) of an untransposed op(B) (K rows of ldb; fp32 b32, or bf16 b16), packed as
 * a whole B of nbp columns (nbp >= nb, a multiple of BNR) would be (slices of BKC, panels of BNR
 * columns of kq pairs, zero past K up to AMX's depth and past nb), into dst: a task's block of B, packed just before its tiles read
 * it (run_stream) */
static void pack_b_block(const float *b32, const uint16_t *b16, int64_t ldb, int64_t N, int64_t K, int64_t j0,
                         int64_t nb, int64_t nbp, uint32_t *dst) {
    const int64_t kp = pad_to(K, kpad);
    for (int64_t k = 0; k < kp; k += 2) {
        const int64_t pc = k / BKC * BKC, kq = pad_to(min64(BKC, K - pc), kpad) / 2, ql = (k - pc) / 2;
        uint32_t *d = dst + pc / 2 * nbp + ql * BNR;
        const bool one = k < K, two = k + 1 < K;
        const int64_t r0 = one ? k * ldb : 0, r1 = two ? r0 + ldb : 0;
        for (int64_t jr = 0; jr < nb; jr += BNR, d += kq * BNR) {
            const int64_t nr = min64(BNR, min64(nb, N - j0) - jr), j = j0 + jr;
            const __mmask16 m0 = one && nr > 0 ? m16(nr) : 0, m1 = one && nr > 16 ? m16(nr - 16) : 0;
            const __mmask16 h0 = two ? m0 : 0, h1 = two ? m1 : 0;
            pack_pair_unit(b32, b16, r0, r1, j, m0, m1, h0, h1, d);
        }
    }
}

/* Rows [0, m) and columns [0, n) of the tiles' sums S (row stride lds; the bias in them) into C:
 * plus add / add16 (row stride lda; may be NULL), clamped to [lo, hi] where clamp, stored in bf16
 * (c16) or fp32 (c32), row stride ldc */
static void stream_store(const float *S, int64_t lds, int64_t m, int64_t n, const float *add, const uint16_t *add16,
                         int64_t lda, bool clamp, float lo, float hi, uint16_t *c16, float *c32, int64_t ldc) {
    epi_rows(S, lds, m, n, add, add16, lda, clamp, lo, hi, c16, c32, ldc);
}

static size_t a_whole_elems(int64_t M, int64_t K) { return (size_t)(pad_to(M, amr) * pad_to(K, kpad)); }
static size_t b_whole_elems(int64_t N, int64_t K) { return (size_t)(pad_to(N, BNR) * pad_to(K, kpad)); }

/* ---------------------------------------------------------------- micro-kernel */

/* One row of C from its accumulators (nv vectors; masks m0, m1 of the columns kept):
 * alpha * acc + beta * C + bias (beta == 0: C not read). */
static inline __attribute__((always_inline)) void store_c_row(float *cr, const int nv, __m512 acc0, __m512 acc1,
                                                              __mmask16 m0, __mmask16 m1, float alpha, float beta,
                                                              float bias) {
    const __m512 va = _mm512_set1_ps(alpha), br = _mm512_set1_ps(bias);
    if (beta == 0.0f) {
        _mm512_mask_storeu_ps(cr, m0, _mm512_fmadd_ps(va, acc0, br));
        if (nv > 1) _mm512_mask_storeu_ps(cr + 16, m1, _mm512_fmadd_ps(va, acc1, br));
        return;
    }
    const __m512 vb = _mm512_set1_ps(beta);
    _mm512_mask_storeu_ps(cr, m0, _mm512_fmadd_ps(va, acc0, _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, cr), br)));
    if (nv > 1)
        _mm512_mask_storeu_ps(cr + 16, m1,
                              _mm512_fmadd_ps(va, acc1, _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, cr + 16), br)));
}

/* C[0:mr, 0:n] = alpha * A_panel * B_panel + beta * C + rb (beta == 0: C not read); kq pairs. */
static inline __attribute__((always_inline)) void ukr(const int mr, const int nv, int64_t kq,
                                                      const uint32_t *restrict a, const int64_t as,
                                                      const uint32_t *restrict b,
                                                      float *restrict c, int64_t ldc, int n, float alpha,
                                                      float beta, const float *rb, const char *pf) {
    __m512 acc0[BMR], acc1[BMR];
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
        acc0[r] = _mm512_setzero_ps();
        acc1[r] = _mm512_setzero_ps();
    }
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
#pragma GCC unroll 2
    for (int64_t q = 0; q < kq; q++) {
        /* a line of what the next calls read first from memory (kept weights) */
        _mm_prefetch(pf + 64 * q, _MM_HINT_T1);
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);
        const __m512bh b1 = nv > 1 ? (__m512bh)_mm512_loadu_si512(b + 16) : (__m512bh)_mm512_setzero_si512();
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            const __m512bh ar = (__m512bh)_mm512_set1_epi32((int)a[r]);
            acc0[r] = _mm512_dpbf16_ps(acc0[r], ar, b0);
            if (nv > 1) acc1[r] = _mm512_dpbf16_ps(acc1[r], ar, b1);
        }
        a += as;
        b += BNR;
    }
    const __mmask16 m0 = m16(n), m1 = m16(n - 16);
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) store_c_row(c + r * ldc, nv, acc0[r], acc1[r], m0, m1, alpha, beta, rb ? rb[r] : 0.0f);
}

#define UKR_CASE(R)                                                                                \
    case R:                                                                                        \
        if (n > 16) ukr(R, 2, kq, a, as, b, c, ldc, n, alpha, beta, rb, pf);                       \
        else ukr(R, 1, kq, a, as, b, c, ldc, n, alpha, beta, rb, pf);                              \
        break;

/* a: BMR-row panel units, `as` units apart per pair of K (BMR packed; BNR when the rows are the
 * columns of a packed B panel, in the transposed products). pf: kq lines from there are prefetched
 * into L2 (any address: prefetches do not fault). */
static void ukr_any(int mr, int64_t kq, const uint32_t *a, int64_t as, const uint32_t *b, float *c, int64_t ldc,
                    int n, float alpha, float beta, const float *rb, const void *pf) {
    switch (mr) {
        UKR_CASE(12) UKR_CASE(11) UKR_CASE(10) UKR_CASE(9) UKR_CASE(8) UKR_CASE(7)
        UKR_CASE(6) UKR_CASE(5) UKR_CASE(4) UKR_CASE(3) UKR_CASE(2) UKR_CASE(1)
        default: break;
    }
}

/* GCC's tile intrinsics are asm statements that do not tell the compiler which memory they read
 * or write: a compiler barrier orders them with the plain loads and stores around them. */
#define AMX_FENCE() __asm__ volatile("" ::: "memory")

#if defined(KN_AMX_X86)
/* Every tile 16 rows of 64 bytes: C (0-3, fp32 16 x 16), A (4, 5), B (6, 7). The configuration is
 * the thread's (part of its saved state): set before a thread's run of tiles, released after. */
typedef struct __attribute__((aligned(64))) amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

static void amx_begin(void) {
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    AMX_FENCE();
    _tile_loadconfig(&cfg);
}
static void amx_end(void) { _tile_release(); }
void kn_amx_tiles_begin(void) { amx_begin(); }
void kn_amx_tiles_end(void) { amx_end(); }

/* C[0:mr, 0:n] (mr <= 32, n <= 32) = alpha * A * B + beta * C + rb over the slices of depth [k0,
 * k1) (beta == 0: C not read), in the four C tiles. A: packed whole (Aw, Mp rows a slice), from row
 * `row` (a panel's first). B: packed slices of Np columns, slice pc at (pc - bk0) * Np (a whole B:
 * bk0 = 0; a block made for one slice: bk0 = that slice, Np unused), from column `col`. Whole tiles
 * with alpha 1 go straight between C and the tiles (C or the bias loaded into them first); the
 * rest through a block on the stack. rbb: the bias rows rb broadcast, 16 floats a row, made
 * ahead by the caller (tile loads of just-stored data wait for the stores to drain: building it
 * here cost most of a 1x1 convolution's time). pf_parts > 0: the operand that comes from memory
 * (kept weights used by few rows or columns) is brought into L2 ahead, this call's part pf_part of
 * pf_parts of the next block (the same slices): the next B panel (pf_a false), or A's next 32 rows
 * (pf_a true); without that the tile loads waited on memory (perf: most samples on the
 * instruction after them). */
static inline __attribute__((always_inline)) void amx_tiles(const bool two_m, const bool two_n, int mr, int n,
                                                             const uint16_t *Aw, int64_t Mp, int64_t a_ld, int64_t row,
                                                             const uint16_t *Bw, int64_t Np, int64_t col, int64_t bk0,
                                                             int64_t k0, int64_t k1, int64_t K, float *c, int64_t ldc,
                                                             float alpha, float beta, const float *rb,
                                                             const float *rbb, bool pf_a, int pf_part,
                                                             int pf_parts) {
    const bool direct = alpha == 1.0f && mr == (two_m ? 2 * AMR : AMR) && n == (two_n ? 32 : 16) &&
                        (beta == 0.0f || (beta == 1.0f && !rb)) && (!rb || rbb);
    /* the tiles start from the bias rows wherever they are given (alpha 1): the sums are then the
     * same, bias first, for the whole tiles stored directly and the partial ones stored through the
     * stack, however a product's columns fall into tiles (run_stream's blocks, run_tile_amx's) */
    const bool pre = rb && rbb && alpha == 1.0f;
    const size_t cs = (size_t)ldc * 4, bs = BNR * 4;
    AMX_FENCE();
    if (direct && beta == 1.0f) {
        _tile_loadd(0, c, cs);
        if (two_n) _tile_loadd(1, c + 16, cs);
        if (two_m) _tile_loadd(2, c + AMR * ldc, cs);
        if (two_m && two_n) _tile_loadd(3, c + AMR * ldc + 16, cs);
    } else if (pre) {
        _tile_loadd(0, rbb, 64);
        if (two_n) _tile_loadd(1, rbb, 64);
        if (two_m) _tile_loadd(2, rbb + AMR * 16, 64);
        if (two_m && two_n) _tile_loadd(3, rbb + AMR * 16, 64);
    } else {
        _tile_zero(0);
        if (two_n) _tile_zero(1);
        if (two_m) _tile_zero(2);
        if (two_m && two_n) _tile_zero(3);
    }
    for (int64_t pc = k0; pc < k1; pc += BKC) {
        const int64_t kcp = pad_to(min64(BKC, K - pc), 32), kq = kcp / 2;
        /* A packed (panels of AMR rows, kq units a row) or, a_ld > 0, bf16 rows of a_ld elements */
        const uint32_t *a = (const uint32_t *)(a_ld ? Aw + row * a_ld + pc : Aw + pc * Mp + row * kcp);
        const uint32_t *b = (const uint32_t *)(Bw + (pc - bk0) * Np + col * kcp);
        const int64_t ars = a_ld ? a_ld / 2 : kq; /* units from one row of A to the next */
        const size_t as = (size_t)ars * 4;
        /* this call's lines of the next block's slice (kq * 32 units = 2 * kq lines), spread over its steps */
        const char *pf = pf_a ? (const char *)(a + AMX_MR * ars) : (const char *)(b + BNR * kq);
        int64_t pl = 0, pl_end = 0, pl_step = 0;
        if (pf_parts > 0) {
            pl = 2 * kq * pf_part / pf_parts;
            pl_end = 2 * kq * (pf_part + 1) / pf_parts;
            pl_step = (pl_end - pl + kq / 16 - 1) / (kq / 16);
        }
        for (int64_t q = 0; q < kq; q += 16) {
            for (int64_t i = 0; i < pl_step && pl < pl_end; i++, pl++) _mm_prefetch(pf + 64 * pl, _MM_HINT_T1);
            _tile_loadd(4, a + q, as);
            _tile_loadd(6, b + q * BNR, bs);
            if (two_n) _tile_loadd(7, b + q * BNR + 16, bs);
            _tile_dpbf16ps(0, 4, 6);
            if (two_n) _tile_dpbf16ps(1, 4, 7);
            if (two_m) {
                _tile_loadd(5, a + AMR * ars + q, as);
                _tile_dpbf16ps(2, 5, 6);
                if (two_n) _tile_dpbf16ps(3, 5, 7);
            }
        }
    }
    if (direct) {
        _tile_stored(0, c, cs);
        if (two_n) _tile_stored(1, c + 16, cs);
        if (two_m) _tile_stored(2, c + AMR * ldc, cs);
        if (two_m && two_n) _tile_stored(3, c + AMR * ldc + 16, cs);
        AMX_FENCE();
        return;
    }
    float t[2 * AMR * BNR] __attribute__((aligned(64)));
    _tile_stored(0, t, bs);
    if (two_n) _tile_stored(1, t + 16, bs);
    if (two_m) _tile_stored(2, t + AMR * BNR, bs);
    if (two_m && two_n) _tile_stored(3, t + AMR * BNR + 16, bs);
    AMX_FENCE();
    const __mmask16 m0 = m16(n), m1 = m16(n - 16);
    for (int r = 0; r < mr; r++)
        store_c_row(c + r * ldc, two_n ? 2 : 1, _mm512_load_ps(t + r * BNR),
                    two_n ? _mm512_load_ps(t + r * BNR + 16) : _mm512_setzero_ps(), m0, m1, alpha, beta,
                    rb && !pre ? rb[r] : 0.0f);
}

static void ukr_amx(int mr, int n, const uint16_t *Aw, int64_t Mp, int64_t a_ld, int64_t row, const uint16_t *Bw,
                    int64_t Np, int64_t col, int64_t bk0, int64_t k0, int64_t k1, int64_t K, float *c, int64_t ldc,
                    float alpha, float beta, const float *rb, const float *rbb, bool pf_a, int pf_part, int pf_parts) {
#define AMX_CALL(TM, TN)                                                                                               \
    amx_tiles(TM, TN, mr, n, Aw, Mp, a_ld, row, Bw, Np, col, bk0, k0, k1, K, c, ldc, alpha, beta, rb, rbb, pf_a,       \
              pf_part, pf_parts)
    if (mr > AMR) {
        if (n > 16) AMX_CALL(true, true);
        else AMX_CALL(true, false);
    } else {
        if (n > 16) AMX_CALL(false, true);
        else AMX_CALL(false, false);
    }
#undef AMX_CALL
}
#else
static void amx_begin(void) {}
static void amx_end(void) {}
void kn_amx_tiles_begin(void) {}
void kn_amx_tiles_end(void) {}
static void ukr_amx(int mr, int n, const uint16_t *Aw, int64_t Mp, int64_t a_ld, int64_t row, const uint16_t *Bw,
                    int64_t Np, int64_t col, int64_t bk0, int64_t k0, int64_t k1, int64_t K, float *c, int64_t ldc,
                    float alpha, float beta, const float *rb, const float *rbb, bool pf_a, int pf_part, int pf_parts) {
    (void)mr, (void)n, (void)Aw, (void)Mp, (void)a_ld, (void)row, (void)Bw, (void)Np, (void)col, (void)bk0, (void)k0, (void)k1;
    (void)K, (void)c, (void)ldc, (void)alpha, (void)beta, (void)rb, (void)rbb, (void)pf_a, (void)pf_part;
    (void)pf_parts;
}
#endif

/* C[i][j] = T[j][i] + bias[i] (+ beta * C[i][j]) for i < m, j < n (T: n rows, ldt a multiple of 16) */
static void store_transposed(const float *T, int64_t ldt, int64_t m, int64_t n, float *C, int64_t ldc,
                             const float *bias, float beta) {
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        const int cols = (int)min64(16, n - j0);
        const __mmask16 keep = m16(cols);
        for (int64_t i0 = 0; i0 < m; i0 += 16) {
            const int rows = (int)min64(16, m - i0);
            __m512i v[16], o[16];
            for (int r = 0; r < 16; r++)
                v[r] = r < cols ? _mm512_maskz_loadu_epi32(m16(rows), T + (j0 + r) * ldt + i0) : _mm512_setzero_si512();
            tr16(v, o);
            for (int q = 0; q < rows; q++) {
                float *cp = C + (i0 + q) * ldc + j0;
                __m512 x = _mm512_add_ps(_mm512_castsi512_ps(o[q]), _mm512_set1_ps(bias ? bias[i0 + q] : 0.0f));
                if (beta != 0.0f) x = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(keep, cp), x);
                _mm512_mask_storeu_ps(cp, keep, x);
            }
        }
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

/* ---------------------------------------------------------------- buffers */

/* which 0: a pool thread's block workspace; 1: the calling thread's whole-operand buffer; 2: a pool
 * thread's C^T of a transposed tile, or on AMX its bias rows; 3: a pool thread's fp32 part of a bf16 C */
static kn_thread_buffer buffers[4] = {KN_THREAD_BUFFER_INIT, KN_THREAD_BUFFER_INIT, KN_THREAD_BUFFER_INIT,
                                      KN_THREAD_BUFFER_INIT};
static void *thread_buffer(int which, size_t bytes) { return kn_thread_buffer_get(&buffers[which], bytes); }

#define WS_B_BYTES ((size_t)BKC * BNC * 2)
#define WS_F_BYTES ((size_t)BKC * CB_NC * 4)

/* ---------------------------------------------------------------- the batch */

typedef struct bjob {
    const kn_sgemm_batch *p;
    const uint16_t **aw; /* per product: whole packed op(A) */
    const uint16_t **bw; /* per product: whole packed op(B), NULL with a packing callback */
    uint16_t **a_own, **b_own; /* per product: where this call packs it (NULL: kept form) */
    int64_t tm, tn, units_m, units_n;
    int64_t pa, pb; /* units of packing work for A / B per product (pack_range) */
    bool swap;      /* C^T = op(B)^T op(A)^T (kn_bgemm_swaps): aw holds op(A) packed as B is */
    int64_t un;     /* columns of C per tile unit: BNR, or BMR for transposed tiles split by columns */
    const kn_bgemm_io *io; /* bf16 B and/or C (kn_bgemm_run_io), or NULL */
    int64_t a_ld;          /* > 0: aw holds op(A) as bf16 rows of a_ld elements (kn_bgemm_run_rows16) */
    int failed;
} bjob;

static void pack_range(void *arg, int64_t begin, int64_t end) {
    bjob *j = arg;
    const kn_sgemm_batch *p = j->p;
    const int64_t per = j->pa + j->pb;
    for (int64_t t = begin; t < end; t++) {
        const int64_t op = t / per, u = t % per;
        if (u < j->pa) {
            if (j->a_own[op] && j->swap) pack_b_unit(p->a[op], p->lda, !p->trans_a, p->M, p->K, u, j->a_own[op]);
            else if (j->a_own[op])
                pack_a_whole_panel(p->a[op], p->lda, p->trans_a, p->M, p->K, u * amr, j->a_own[op]);
        } else if (j->b_own[op] && j->io && j->io->b16) {
            pack_b_rows_unit(NULL, j->io->b16[op], p->ldb, p->N, p->K, u - j->pa, j->b_own[op]);
        } else if (j->b_own[op]) {
            pack_b_unit(p->b[op], p->ldb, p->trans_b, p->N, p->K, u - j->pa, j->b_own[op]);
        }
    }
}

/* bb[16 r + i] = bias[r] for r < rows (the tiles' bias rows, amx_tiles' rbb; plain C: this is
 * outside the file's AVX-512 region, which a build for the baseline level does not have) */
static void broadcast_rows(const float *bias, int64_t rows, float *bb) {
    for (int64_t r = 0; r < rows; r++)
        for (int i = 0; i < 16; i++) bb[16 * r + i] = bias[r];
    AMX_FENCE();
}

/* Rows [m0, m1) and columns [n0, n1) of C on AMX with B packed whole: each 32 x 32 block of C
 * stays in the tiles over the whole depth (no partial sums through memory between slices). Where
 * B was packed by this call (in cache: a convolution's input, 64 x 3136 is 400 KB) and this tile's
 * part of it fits in half of L2, 32 rows at a time across every column, so that C and the
 * epilogue's other operand (a residual) go by whole rows; else the rows in blocks of BMC over each
 * B panel in turn, B read once per block, each panel's calls bringing the next panel into L2. Kept
 * weights come from memory even where they are small: rows outer, the first 32 rows' tile loads
 * waited on them unprefetched (BERT-base s128's MatMuls at 2 threads, 96-column tiles: 0.90 of the
 * time panels outer; bert_mini and vit_tiny at 1 thread, 256-wide weights: 0.85).
 * bb: BMC * 16 floats for the bias rows. */
static void run_tile_amx(const bjob *j, int64_t op, int64_t m0, int64_t m1, int64_t n0, int64_t n1, float *bb,
                         float *S) {
    const kn_sgemm_batch *p = j->p;
    const uint16_t *Aw = j->aw[op], *Bw = j->bw[op];
    const float *bias = p->row_bias ? p->row_bias[op] : NULL;
    const int64_t Mp = pad_to(p->M, amr), Np = pad_to(p->N, BNR);
    const bool rows_outer =
        j->b_own[op] && (double)(n1 - n0) * (double)pad_to(p->K, kpad) * 2.0 <= 1024.0 * 1024.0;
    /* C in bf16 (kn_bgemm_io's c16): the tiles store fp32 into S, a strip of 32 rows by the tile's
     * columns (rows outer) or a block of rows by C16_COLS columns (panels outer); each goes into C
     * clamped and rounded once finished */
    uint16_t *c16 = j->io && j->io->c16 ? j->io->c16[op] : NULL;
    const int64_t lds = rows_outer ? pad_to(n1 - n0, 16) : C16_COLS;
    for (int64_t ic = m0; ic < m1; ic += BMC) {
        const int64_t mc = min64(BMC, m1 - ic);
        if (bias) broadcast_rows(bias + ic, mc, bb);
        if (rows_outer) {
            for (int64_t ir = 0; ir < mc; ir += AMX_MR) {
                const int mr = (int)min64(AMX_MR, mc - ir);
                const int64_t ldc = c16 ? lds : p->ldc;
                float *cr = c16 ? S : p->c[op] + (ic + ir) * ldc + n0;
                /* A (a convolution's weights) from memory: the calls on these rows bring the next rows' in */
                const int parts = ic + ir + AMX_MR < m1 ? (int)((n1 - n0 + BNR - 1) / BNR) : 0;
                for (int64_t jr = n0; jr < n1; jr += BNR)
                    ukr_amx(mr, (int)min64(BNR, n1 - jr), Aw, Mp, j->a_ld, ic + ir, Bw, Np, jr, 0, 0, p->K, p->K, cr + (jr - n0), ldc,
                            p->alpha, p->beta, bias ? bias + ic + ir : NULL, bias ? bb + 16 * ir : NULL, true,
                            (int)((jr - n0) / BNR), parts);
                const int64_t at = (ic + ir) * (j->io ? j->io->ld_add : 0) + n0; /* the residual's first */
                const float *add = j->io && j->io->add ? j->io->add[op] + at : NULL;
                const uint16_t *add16 = j->io && j->io->add16 ? j->io->add16[op] + at : NULL;
                if (c16)
                    store_c16(S, lds, mr, n1 - n0, j->io->lo, j->io->hi, c16 + (ic + ir) * p->ldc + n0, p->ldc, add,
                              add16, j->io->ld_add);
                else if (j->io && j->io->tail)
                    tail_c32(cr, ldc, add, add16, j->io->ld_add, mr, n1 - n0, j->io->lo, j->io->hi);
                else if (p->epilogue) p->epilogue(p->epilogue_ctx, op, ic + ir, n0, mr, n1 - n0, cr, ldc);
            }
            continue;
        }
        for (int64_t jr = n0; jr < n1; jr += BNR) {
            const int n = (int)min64(BNR, n1 - jr);
            const int64_t g0 = n0 + (jr - n0) / C16_COLS * C16_COLS, ldc = c16 ? lds : p->ldc;
            float *cp = c16 ? S + (jr - g0) : p->c[op] + ic * ldc + jr;
            const int parts = jr + BNR < n1 ? (int)((mc + AMX_MR - 1) / AMX_MR) : 0;
            for (int64_t ir = 0; ir < mc; ir += AMX_MR)
                ukr_amx((int)min64(AMX_MR, mc - ir), n, Aw, Mp, j->a_ld, ic + ir, Bw, Np, jr, 0, 0, p->K, p->K, cp + ir * ldc,
                        ldc, p->alpha, p->beta, bias ? bias + ic + ir : NULL, bias ? bb + 16 * ir : NULL, false,
                        (int)(ir / AMX_MR), parts);
            const bool last = jr + BNR >= n1 || jr + BNR - g0 >= C16_COLS;
            const int64_t at = ic * (j->io ? j->io->ld_add : 0) + (c16 ? g0 : jr);
            const float *add = j->io && j->io->add ? j->io->add[op] + at : NULL;
            const uint16_t *add16 = j->io && j->io->add16 ? j->io->add16[op] + at : NULL;
            if (c16 && last)
                store_c16(S, lds, mc, jr + n - g0, j->io->lo, j->io->hi, c16 + ic * p->ldc + g0, p->ldc, add, add16,
                          j->io->ld_add);
            else if (!c16 && j->io && j->io->tail) tail_c32(cp, ldc, add, add16, j->io->ld_add, mc, n, j->io->lo, j->io->hi);
            else if (!c16 && p->epilogue) p->epilogue(p->epilogue_ctx, op, ic, jr, mc, n, cp, ldc);
        }
    }
}

static void run_tile(const bjob *j, int64_t op, int64_t m0, int64_t m1, int64_t n0, int64_t n1, uint32_t *wsb,
                     float *wsf, float *bb, float *S) {
    const kn_sgemm_batch *p = j->p;
    if (use_amx && j->bw[op]) {
        run_tile_amx(j, op, m0, m1, n0, n1, bb, S);
        return;
    }
    const uint16_t *Aw = j->aw[op], *Bw = j->bw[op];
    const float *bias = p->row_bias ? p->row_bias[op] : NULL;
    float *C = p->c[op];
    const int64_t Mp = pad_to(p->M, amr), Np = pad_to(p->N, BNR);
    const int64_t ncb = Bw ? n1 - n0 : BNC;
    for (int64_t jc = n0; jc < n1; jc += ncb) {
        const int64_t nc = min64(ncb, n1 - jc);
        for (int64_t pc = 0; pc < p->K; pc += BKC) {
            const int64_t kc = min64(BKC, p->K - pc), kcp = pad_to(kc, kpad), kq = kcp / 2;
            const float beta = pc == 0 ? p->beta : 1.0f;
            const uint32_t *Bblk;
            if (Bw) {
                Bblk = (const uint32_t *)(Bw + pc * Np + jc * kcp);
            } else {
                for (int64_t cj = 0; cj < nc; cj += CB_NC) {
                    const int64_t cn = min64(CB_NC, nc - cj);
                    p->pack_b(p->pack_ctx, op, pc, kc, jc + cj, cn, wsf);
                    round_b_panels(wsf, (cn + BNR - 1) / BNR, kc, wsb + cj * kq);
                }
                Bblk = wsb;
            }
            for (int64_t ic = m0; ic < m1; ic += BMC) {
                const int64_t mc = min64(BMC, m1 - ic);
                const uint32_t *Ablk = (const uint32_t *)(Aw + pc * Mp + ic * kcp);
                if (use_amx && bias && pc == 0) broadcast_rows(bias + ic, mc, bb);
                for (int64_t jr = 0; jr < nc; jr += BNR) {
                    const int n = (int)min64(BNR, nc - jr);
                    const uint32_t *bp = Bblk + jr * kq;
                    float *cp = C + ic * p->ldc + jc + jr;
                    /* kept B comes from memory: the first two calls on a panel prefetch half each of
                     * the next one (kq * BNR units, 2 * kq lines) */
                    const char *nextb = Bw && jr + BNR < nc ? (const char *)(bp + BNR * kq) : NULL;
                    if (use_amx) /* B made for this slice by the callback (a whole B: run_tile_amx) */
                        for (int64_t ir = 0; ir < mc; ir += AMX_MR)
                            ukr_amx((int)min64(AMX_MR, mc - ir), n, Aw, Mp, 0, ic + ir, (const uint16_t *)Bblk, 0, jr, pc,
                                    pc, pc + kc, p->K, cp + ir * p->ldc, p->ldc, p->alpha, beta,
                                    bias && pc == 0 ? bias + ic + ir : NULL, bias && pc == 0 ? bb + 16 * ir : NULL,
                                    false, 0, 0);
                    else
                        for (int64_t ir = 0; ir < mc; ir += BMR)
                            ukr_any((int)min64(BMR, mc - ir), kq, Ablk + ir * kq, BMR, bp, cp + ir * p->ldc, p->ldc, n,
                                    p->alpha, beta, bias && pc == 0 ? bias + ic + ir : NULL,
                                    nextb && ir < 2 * BMR ? nextb + (ir / BMR) * 64 * kq : (const void *)bp);
                    if (p->epilogue && pc + kc == p->K)
                        p->epilogue(p->epilogue_ctx, op, ic, jc + jr, mc, n, cp, p->ldc);
                }
            }
        }
    }
}

/* Rows [m0, m1) (m0 a multiple of BNR) and columns [n0, n1) of C as C^T = op(B)^T op(A)^T: the
 * packed B block (panels of BNR columns) is the transposed product's A, read BMR of a panel's BNR
 * units per pair of K; op(A) packed as B (aw) its B. C^T gathers in T (a buffer of the thread),
 * then goes into C transposed, with the bias, beta and the epilogue. */
static void run_swapped_tile(const bjob *j, int64_t op, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                             uint32_t *wsb, float *wsf, float *T) {
    const kn_sgemm_batch *p = j->p;
    const uint16_t *ATw = j->aw[op], *Bw = j->bw[op];
    const int64_t Mp = pad_to(p->M, BNR), Np = pad_to(p->N, BNR), nn = n1 - n0, mt = m1 - m0;
    const int64_t ldt = pad_to(mt, 16);
    for (int64_t pc = 0; pc < p->K; pc += BKC) {
        const int64_t kc = min64(BKC, p->K - pc), kcp = pad_to(kc, kpad), kq = kcp / 2;
        const float beta = pc == 0 ? 0.0f : 1.0f;
        const uint32_t *Bblk;
        if (Bw) {
            Bblk = (const uint32_t *)(Bw + pc * Np + n0 * kcp);
        } else {
            for (int64_t cj = 0; cj < nn; cj += CB_NC) {
                const int64_t cn = min64(CB_NC, nn - cj);
                p->pack_b(p->pack_ctx, op, pc, kc, n0 + cj, cn, wsf);
                round_b_panels(wsf, (cn + BNR - 1) / BNR, kc, wsb + cj * kq);
            }
            Bblk = wsb;
        }
        const uint32_t *ATblk = (const uint32_t *)(ATw + pc * Mp + m0 * kcp);
        for (int64_t ir = 0; ir < mt; ir += BNR) {
            const int n = (int)min64(BNR, mt - ir);
            const uint32_t *bp = ATblk + ir * kq;
            for (int64_t pp = 0; pp < nn; pp += BNR)
                for (int64_t q = 0; q < BNR && pp + q < nn; q += BMR)
                    ukr_any((int)min64(BMR, min64(BNR - q, nn - pp - q)), kq, Bblk + pp * kq + q, BNR, bp,
                            T + (pp + q) * ldt + ir, ldt, n, p->alpha, beta, NULL,
                            pp == 0 && q < 2 * BMR && ir + BNR < mt ? (const char *)(bp + BNR * kq) + (q / BMR) * 64 * kq
                                                                    : (const void *)bp);
        }
    }
    float *cp = p->c[op] + m0 * p->ldc + n0;
    store_transposed(T, ldt, mt, nn, cp, p->ldc, p->row_bias ? p->row_bias[op] + m0 : NULL, p->beta);
    if (p->epilogue) p->epilogue(p->epilogue_ctx, op, m0, n0, mt, nn, cp, p->ldc);
}

static void tile_range(void *arg, int64_t begin, int64_t end) {
    bjob *j = arg;
    const kn_sgemm_batch *p = j->p;
    uint32_t *wsb = NULL;
    float *wsf = NULL;
    if (p->pack_b) {
        char *w = thread_buffer(0, WS_B_BYTES + WS_F_BYTES);
        if (!w) {
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
            return;
        }
        wsb = (uint32_t *)w;
        wsf = (float *)(w + WS_B_BYTES);
    }
    const int64_t per = j->tm * j->tn, um = j->swap ? BNR : cmr;
    float *T = NULL;
    if (j->swap) {
        const int64_t rows = min64(p->N, ((j->units_n + j->tn - 1) / j->tn) * j->un);
        const int64_t cols = pad_to(min64(p->M, ((j->units_m + j->tm - 1) / j->tm) * BNR), 16);
        if (!(T = thread_buffer(2, sizeof(float) * (size_t)(rows * cols)))) {
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
            return;
        }
    }
    float *bb = NULL; /* AMX: the bias rows of a block of BMC (buffer 2: AMX never runs transposed) */
    if (use_amx) {
        if (!(bb = thread_buffer(2, sizeof(float) * 16 * BMC))) {
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
            return;
        }
        amx_begin();
    }
    float *S = NULL; /* C's fp32 strip or block before it goes into bf16 C (kn_bgemm_io's c16) */
    if (j->io && j->io->c16) {
        const int64_t cols = pad_to(min64(p->N, ((j->units_n + j->tn - 1) / j->tn) * j->un), 16);
        const size_t floats = (size_t)(AMX_MR * cols > BMC * C16_COLS ? AMX_MR * cols : BMC * C16_COLS);
        if (!(S = thread_buffer(3, sizeof(float) * floats))) {
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
            if (use_amx) amx_end();
            return;
        }
    }
    for (int64_t t = begin; t < end; t++) {
        const int64_t op = t / per, r = t % per, im = r / j->tn, in = r % j->tn;
        const int64_t m0 = (im * j->units_m / j->tm) * um, m1 = min64(p->M, ((im + 1) * j->units_m / j->tm) * um);
        const int64_t n0 = (in * j->units_n / j->tn) * j->un, n1 = min64(p->N, ((in + 1) * j->units_n / j->tn) * j->un);
        if (m0 >= m1 || n0 >= n1) continue;
        if (j->swap) run_swapped_tile(j, op, m0, m1, n0, n1, wsb, wsf, T);
        else run_tile(j, op, m0, m1, n0, n1, wsb, wsf, bb, S);
    }
    if (use_amx) amx_end();
}

/* A 1x1 convolution's product on AMX (kn_bgemm_io, B the input planes, N large): tasks of nb
 * columns, each packing its own block of B (all of K) into a buffer of the thread just before its
 * tiles read it, then every 32 rows of C over it: the tiles' sums into a strip S of the thread
 * (32 x nb), which goes into C with the bias, the residual and the clamp (stream_store) while the
 * next strip's tiles run (two strips: the vector loads do not wait on the tile stores just
 * issued). Against packing B whole first and storing through C: B's packed form never leaves the
 * core's caches and C is written once; at 2 threads a thread's columns of one layer are those of
 * the next (the pool's shares), so it reads its own writes. */
typedef struct sjob {
    const kn_sgemm_batch *p;
    const kn_bgemm_io *io;
    const uint16_t *const *aw;
    const float *bb; /* per product M x 16: the bias rows broadcast (amx_tiles' rbb: the tiles start from the bias, as run_tile_amx's) */
    int64_t nb, blocks;
    int failed;
} sjob;

/* the residual's rows [r0, r0 + m) and columns [c0, c1) (bytes from each row's first at res) into L2 */
static inline void prefetch_rows(const char *res, int64_t ld, int64_t r0, int64_t m, int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < m; r++) {
        const char *row = res + (r0 + r) * ld;
        for (int64_t o = c0; o < c1; o += 64) _mm_prefetch(row + o, _MM_HINT_T1);
        _mm_prefetch(row + c1 - 1, _MM_HINT_T1); /* (rows not 64-byte aligned) */
    }
}

static void stream_range(void *arg, int64_t begin, int64_t end) {
    sjob *j = arg;
    const kn_sgemm_batch *p = j->p;
    const kn_bgemm_io *io = j->io;
    const int64_t nbp = pad_to(j->nb, BNR), kp = pad_to(p->K, kpad), Mp = pad_to(p->M, amr);
    const size_t bbytes = (size_t)(kp * nbp * 2), sfloats = (size_t)(AMX_MR * nbp);
    char *w = thread_buffer(0, bbytes + 2 * sfloats * sizeof(float) + 64);
    if (!w) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    uint32_t *blk = (uint32_t *)w;
    float *S[2] = {(float *)(w + bbytes), (float *)(w + bbytes) + sfloats};
    const bool clamp = (io->c16 != NULL) || io->tail;
    /* fp32 C with nothing to add or clamp: the tiles store into C directly (through a strip, a
     * 64 -> 256 1x1 at 56x56 wrote and read its 3.2 MB of C twice: 0.16 -> 0.27 ms) */
    const bool direct = !io->c16 && !clamp && !io->add && !io->add16;
    const int64_t asz = io->add16 ? 2 : io->add ? 4 : 0;
    /* Depth 64 without a residual (64 -> 256 and 64 -> 64 at 56x56), the strips go in chunks of 64
     * columns: a chunk's tiles into T[cur] (32 x 64, 8 KB: L1), then the previous chunk into C. The
     * epilogue is most of such a product, and its loads of a 32 x nb strip's sums (100 KB: L2)
     * waited (perf). 1 thread, node_ab: 64 -> 256 0.191 -> 0.142 ms, 64 -> 64 0.063 -> 0.049; deeper
     * products (256 -> 64: 0.308 -> 0.330) and those with a residual (64 -> 256 +res at 2 threads:
     * 0.42 -> 0.48 in chunks of 32) were slower. KILN_BGEMM_CW=N: chunks of N columns for every
     * streamed product (0: never). */
    static int64_t cw_env = -2;
    if (cw_env == -2) {
        const char *e = getenv("KILN_BGEMM_CW");
        cw_env = e ? atoi(e) : -1;
    }
    const int64_t cw_want = cw_env >= 0 ? cw_env : p->K <= 64 && !asz ? 64 : 0;
    amx_begin();
    if (cw_want > 0 && !direct) {
        const int64_t cw = min64(pad_to(j->nb, BNR), pad_to(cw_want, BNR));
        float *T[2] = {S[0], S[0] + AMX_MR * cw};
        int64_t pend = -1, pop = 0, pir = 0, pj = 0, pn = 0;
        int cur = 0;
        for (int64_t t = begin; t <= end; t++) {
            const int64_t op = t < end ? t / j->blocks : 0, j0 = t < end ? t % j->blocks * j->nb : 0;
            const int64_t nb = t < end ? min64(j->nb, p->N - j0) : 0;
            if (t < end)
                pack_b_block(io->b16 ? NULL : p->b[op], io->b16 ? io->b16[op] : NULL, p->ldb, p->N, p->K, j0, nb, nbp, blk);
            const float *bias = t < end && p->row_bias ? p->row_bias[op] : NULL;
            const int64_t op1 = t + 1 < end ? (t + 1) / j->blocks : -1, j1 = t + 1 < end ? (t + 1) % j->blocks * j->nb : 0;
            const int64_t n1 = t + 1 < end ? min64(j->nb, p->N - j1) : 0;
            for (int64_t ir = 0; ir < (t < end ? p->M : 1); ir += AMX_MR)
                for (int64_t jc = 0; jc < (t < end ? nb : 1); jc += cw) {
                    const int mr = (int)min64(AMX_MR, p->M - ir);
                    const int64_t wn = min64(cw, nb - jc);
                    if (t < end) {
                        for (int64_t jr = jc; jr < jc + wn; jr += BNR) {
                            if (asz) {
                                const bool last = ir + AMX_MR >= p->M;
                                const int64_t o = last ? op1 : op, c = last ? j1 : j0, cn = last ? n1 : nb;
                                const int64_t r0 = last ? 0 : ir + AMX_MR;
                                if (o >= 0 && jr < cn) {
                                    const char *res = asz == 2 ? (const char *)(io->add16[o] + c) : (const char *)(io->add[o] + c);
                                    prefetch_rows(res, io->ld_add * asz, r0, min64(AMX_MR, p->M - r0), jr * asz,
                                                  min64(cn, jr + BNR) * asz);
                                }
                            }
                            ukr_amx(mr, (int)min64(BNR, nb - jr), j->aw[op], Mp, 0, ir, (const uint16_t *)blk, nbp, jr, 0, 0,
                                    p->K, p->K, T[cur] + (jr - jc), cw, 1.0f, 0.0f, bias ? bias + ir : NULL,
                                    bias ? j->bb + (op * pad_to(p->M, AMX_MR) + ir) * 16 : NULL, false, 0, 0);
                        }
                    }
                    if (pend >= 0) {
                        const int64_t m = min64(AMX_MR, p->M - pir), at = pir * io->ld_add + pj;
                        stream_store(T[cur ^ 1], cw, m, pn, io->add ? io->add[pop] + at : NULL,
                                     io->add16 ? io->add16[pop] + at : NULL, io->ld_add, clamp, io->lo, io->hi,
                                     io->c16 ? io->c16[pop] + pir * p->ldc + pj : NULL,
                                     io->c16 ? NULL : p->c[pop] + pir * p->ldc + pj, p->ldc);
                    }
                    if (t < end) {
                        pend = t, pop = op, pir = ir, pj = j0 + jc, pn = wn;
                        cur ^= 1;
                    }
                }
        }
        amx_end();
        return;
    }
    for (int64_t t = begin; t < end; t++) {
        const int64_t op = t / j->blocks, j0 = t % j->blocks * j->nb, nb = min64(j->nb, p->N - j0);
        pack_b_block(io->b16 ? NULL : p->b[op], io->b16 ? io->b16[op] : NULL, p->ldb, p->N, p->K, j0, nb, nbp, blk);
        const float *bias = p->row_bias ? p->row_bias[op] : NULL;
        const char *res = asz == 2 ? (const char *)(io->add16[op] + j0) : asz == 4 ? (const char *)(io->add[op] + j0) : NULL;
        int64_t prev = -1;
        for (int64_t ir = 0;; ir += AMX_MR) { /* one pass past the last strip, which stores it */
            if (ir < p->M) {
                const int mr = (int)min64(AMX_MR, p->M - ir);
                float *st = direct ? p->c[op] + ir * p->ldc + j0 : S[(ir / AMX_MR) & 1];
                const int64_t lds = direct ? p->ldc : nbp;
                for (int64_t jr = 0; jr < nb; jr += BNR) {
                    /* this strip's residual (read after the next strip's tiles) into L2, a block's
                     * rows a tile call: its loads waited on memory (perf: 18% of the streamed
                     * products' time on the one after them). Tried, slower: the next task's B the
                     * same way (256 -> 64 at 56x56, 16 calls a task: 0.19 -> 0.28 ms), C's lines */
                    if (res)
                        for (int r = 0; r < mr; r++) {
                            const char *row = res + (ir + r) * io->ld_add * asz;
                            const int64_t o1 = min64(nb, jr + BNR) * asz;
                            for (int64_t o = jr * asz; o < o1; o += 64) _mm_prefetch(row + o, _MM_HINT_T1);
                            _mm_prefetch(row + o1 - 1, _MM_HINT_T1); /* (rows not 64-byte aligned) */
                        }
                    ukr_amx(mr, (int)min64(BNR, nb - jr), j->aw[op], Mp, 0, ir, (const uint16_t *)blk, nbp, jr, 0, 0,
                            p->K, p->K, st + jr, lds, 1.0f, 0.0f, bias ? bias + ir : NULL,
                            bias ? j->bb + (op * pad_to(p->M, AMX_MR) + ir) * 16 : NULL, false, 0, 0);
                }
            }
            if (prev >= 0 && !direct) { /* the previous strip into C */
                const int64_t m = min64(AMX_MR, p->M - prev), at = prev * io->ld_add + j0;
                stream_store(S[(prev / AMX_MR) & 1], nbp, m, nb,
                             io->add ? io->add[op] + at : NULL, io->add16 ? io->add16[op] + at : NULL, io->ld_add,
                             clamp, io->lo, io->hi, io->c16 ? io->c16[op] + prev * p->ldc + j0 : NULL,
                             io->c16 ? NULL : p->c[op] + prev * p->ldc + j0, p->ldc);
            }
            if (ir >= p->M) break;
            prev = ir;
        }
    }
    amx_end();
}

/* whether run_batch streams B (stream_range): AMX, a 1x1 convolution's io, B read as it is and large
 * (a plane of 28x28 and up: deeper layers' weights are larger than their input, and would be re-read
 * for each block of columns). With a residual only on several threads: at 1 thread it was slower
 * (64 -> 256 at 56x56 + residual, fp32 C: 0.86 -> 1.10 ms for the three layers; bf16 C 0.78 ->
 * 0.89), its rows of C and of the residual going by short runs of a block's columns where the
 * whole-B path's tail reads them by whole rows; at 2 threads it was faster (fp32 C 0.67 -> 0.61 ms,
 * 128 -> 512 at 28x28 0.61 -> 0.53; bf16 C 0.55 -> 0.50, 0.43 -> 0.41). KILN_BGEMM_STREAM=0: never. */
#define STREAM_MIN_N 512
/* At 1 thread a plane of 28x28 (N 784) went slower streamed: ResNet-50's 512 -> 128 and 512 -> 256
 * at 28x28, 0.437 -> 0.413 and 0.249 -> 0.214 ms through the whole-B path (node_ab, bf16h, 4 rounds,
 * KILN_BGEMM_STREAM=0 against the default), while 56x56 (N 3136) gained streamed (256 -> 64 0.443
 * against 0.513, 256 -> 128 0.271 against 0.355). */
#define STREAM_MIN_N_1T 1024
static bool streams(const kn_sgemm_batch *p, const kn_bgemm_io *io, int64_t threads) {
    static int off = -1;
    if (off < 0) {
        const char *e = getenv("KILN_BGEMM_STREAM");
        off = e && !strcmp(e, "0");
    }
    return !off && use_amx && io && (threads > 1 || (!io->add && !io->add16)) && !p->pack_b && !p->trans_b && !p->b_packed && !p->epilogue && !p->c_add &&
           !p->clamp && p->N >= (threads > 1 ? STREAM_MIN_N : STREAM_MIN_N_1T) && p->M >= ROWS_MAX_M && p->alpha == 1.0f && p->beta == 0.0f;
}

/* columns a task: its block of B about 128 KB (L2; the tiles read it once per 32 rows of C), at
 * most 1024 columns, the blocks a multiple of the threads (equal shares) */
static int64_t stream_cols(int64_t N, int64_t K, int64_t threads) {
    int64_t nb = pad_to(65536 / K, BNR);
    nb = nb < BNR ? BNR : nb > 1024 ? 1024 : nb;
    int64_t blocks = (N + nb - 1) / nb;
    if (threads > 1) blocks = pad_to(blocks, threads);
    return pad_to((N + blocks - 1) / blocks, BNR);
}

/* make functions of the kept bf16 forms (const_cache.h) */
typedef struct whole_ctx {
    const float *x;
    int64_t ld, rows, K; /* rows: M for A, N for B */
    bool trans;
} whole_ctx;

static void make_a_whole(const void *ctx, void *dst) {
    const whole_ctx *w = ctx;
    for (int64_t ir = 0; ir < w->rows; ir += amr) pack_a_whole_panel(w->x, w->ld, w->trans, w->rows, w->K, ir, dst);
}
static void make_b_whole(const void *ctx, void *dst) {
    const whole_ctx *w = ctx;
    for (int64_t jr = 0; jr < w->rows; jr += BNR) pack_b_whole_panel(w->x, w->ld, w->trans, w->rows, w->K, jr, dst);
}

size_t kn_bgemm_packed_a_elems(int64_t M, int64_t N, int64_t K) {
    return kn_bgemm_swaps(M, N, K) ? b_whole_elems(M, K) : a_whole_elems(M, K);
}
size_t kn_bgemm_packed_b_elems(int64_t N, int64_t K) { return b_whole_elems(N, K); }
void kn_bgemm_pack_a(const float *A, int64_t lda, bool trans_a, int64_t M, int64_t N, int64_t K, uint16_t *dst) {
    const bool swap = kn_bgemm_swaps(M, N, K);
    whole_ctx w = {A, lda, M, K, swap ? !trans_a : trans_a};
    if (swap) make_b_whole(&w, dst);
    else make_a_whole(&w, dst);
}
void kn_bgemm_pack_b(const float *B, int64_t ldb, bool trans_b, int64_t N, int64_t K, uint16_t *dst) {
    whole_ctx w = {B, ldb, N, K, trans_b};
    make_b_whole(&w, dst);
}

static kiln_status run_batch(kn_threadpool *pool, const kn_sgemm_batch *p, const uint16_t *const *a_bf16,
                             const uint16_t *const *b_bf16, const kn_bgemm_io *io, int64_t a_ld);

/* As kn_sgemm_swaps: N leaves the micro-kernel's 32 columns partly empty (7x7 = 49, 14x14 = 196
 * positions of a convolution) where M (output channels) fills them. */
bool kn_bgemm_swaps(int64_t M, int64_t N, int64_t K) {
    if (kn_bgemm_amx()) return false; /* AMX's tiles read A by rows: no transposed form */
    if (N > 512 || N < 2 || M < 2 * BNR || K < 1) return false;
    return (double)pad_to(N, BNR) / (double)N > 1.06 * (double)pad_to(M, BNR) / (double)M;
}

kiln_status kn_bgemm_run_prepacked(kn_threadpool *pool, const kn_sgemm_batch *p, const uint16_t *const *a_bf16,
                                   const uint16_t *const *b_bf16) {
    if (p->count <= 0 || p->M <= 0 || p->N <= 0) return KILN_OK;
    if (!kn_bf16_cpu_supported()) return KN_INTERNAL("the bf16 GEMM called on a CPU without AVX512_BF16");
    if (p->K <= 0) return kn_sgemm_run(pool, p);
    return run_batch(pool, p, a_bf16, b_bf16, NULL, 0);
}

bool kn_bgemm_io_takes(const kn_sgemm_batch *p, const kn_bgemm_io *io) {
    return kn_bgemm_amx() && p->count > 0 && p->M >= ROWS_MAX_M && p->N > 0 && p->K > 0 && !p->pack_b &&
           !p->trans_b && !p->c_add && !p->clamp && (!p->epilogue || (!io->c16 && !io->tail)) &&
           ((!io->add && !io->add16) || io->tail) && !(io->add && io->add16) && p->alpha == 1.0f && p->beta == 0.0f &&
           (!io->b16 || !p->b_packed) && !(io->lo > io->hi);
}

kiln_status kn_bgemm_run_io(kn_threadpool *pool, const kn_sgemm_batch *p, const kn_bgemm_io *io) {
    if (!kn_bgemm_io_takes(p, io)) return KN_INTERNAL("the bf16 GEMM given bf16 operands it does not take");
    return run_batch(pool, p, NULL, NULL, io, 0);
}

kiln_status kn_bgemm_run(kn_threadpool *pool, const kn_sgemm_batch *p) {
    return kn_bgemm_run_prepacked(pool, p, NULL, NULL);
}

kiln_status kn_bgemm_run_rows16(const kn_sgemm_batch *p, const uint16_t *a16, int64_t lda16, const uint16_t *b16) {
    if (!kn_bgemm_amx() || p->count != 1 || p->M < ROWS_MAX_M || p->N <= 0 || p->K <= 0 || p->pack_b || !a16 ||
        !b16 || lda16 < pad_to(p->K, 32) || lda16 % 2)
        return KN_INTERNAL("the bf16 GEMM given bf16 rows of A it does not take");
    return run_batch(NULL, p, &a16, &b16, NULL, lda16);
}

/* Fewer than ROWS_MAX_M rows (kn_bgemm_takes: B kept): op(A)'s rows as pairs, q-major (unit
 * (q * M + r) = row r's pair q, zero past K, slice pc's first pair at pc / 2), times B's packed
 * panels with vdpbf16ps (the micro-kernel of the non-AMX path: B's packing is the same), one task
 * per panel of BNR columns. A tile of AMX would be 1-3 of its 16 rows full. */
typedef struct row_job {
    const kn_sgemm_batch *p;
    const uint16_t *const *bw;
    const uint32_t *au; /* per product: pairs_per_op units */
    int64_t pairs_per_op, panels;
} row_job;

static void row_range(void *arg, int64_t begin, int64_t end) {
    const row_job *j = arg;
    const kn_sgemm_batch *p = j->p;
    const int64_t Np = pad_to(p->N, BNR);
    for (int64_t t = begin; t < end; t++) {
        const int64_t op = t / j->panels, jr = t % j->panels * BNR;
        const int n = (int)min64(BNR, p->N - jr);
        const uint32_t *au = j->au + op * j->pairs_per_op;
        float *c = p->c[op] + jr;
        const float *rb = p->row_bias ? p->row_bias[op] : NULL;
        for (int64_t pc = 0; pc < p->K; pc += BKC) {
            const int64_t kcp = pad_to(min64(BKC, p->K - pc), kpad), kq = kcp / 2;
            const uint32_t *b = (const uint32_t *)(j->bw[op] + pc * Np + jr * kcp);
            const char *pf = jr + BNR < p->N ? (const char *)(b + BNR * kq) : (const char *)b;
            ukr_any((int)p->M, kq, au + pc / 2 * p->M, p->M, b, c, p->ldc, n, p->alpha, pc == 0 ? p->beta : 1.0f,
                    pc == 0 ? rb : NULL, pf);
        }
        if (p->epilogue) p->epilogue(p->epilogue_ctx, op, 0, jr, p->M, n, c, p->ldc);
    }
}

/* bw: per product, B's kept form or NULL (then packed here, whole: outside a session) */
static kiln_status run_rows(kn_threadpool *pool, const kn_sgemm_batch *p, const uint16_t **bw) {
    const int64_t pairs = pad_to(p->K, BKC) > p->K ? (p->K / BKC * BKC + pad_to(p->K % BKC, kpad)) / 2 : p->K / 2;
    const int64_t per = pairs * p->M;
    const size_t be = b_whole_elems(p->N, p->K);
    size_t need = sizeof(uint32_t) * (size_t)(per * p->count);
    for (int64_t op = 0; op < p->count; op++)
        if (!bw[op]) need += 2 * be;
    uint32_t *au = thread_buffer(1, need);
    if (!au) return KN_OOM();
    uint16_t *own = (uint16_t *)(au + per * p->count);
    for (int64_t op = 0; op < p->count; op++)
        if (!bw[op]) {
            for (int64_t u = 0; u < b_units(p->trans_b, p->N, p->K); u++)
                pack_b_unit(p->b[op], p->ldb, p->trans_b, p->N, p->K, u, own);
            bw[op] = own;
            own += be;
        }
    for (int64_t op = 0; op < p->count; op++)
        for (int64_t q = 0; q < pairs; q++)
            for (int64_t r = 0; r < p->M; r++) {
                uint32_t v = 0;
                for (int h = 0; h < 2; h++) {
                    const int64_t k = 2 * q + h;
                    if (k < p->K) {
                        const float x = kn_bf16_round(p->trans_a ? p->a[op][k * p->lda + r] : p->a[op][r * p->lda + k]);
                        uint32_t u;
                        memcpy(&u, &x, 4);
                        v |= (u >> 16) << (16 * h);
                    }
                }
                au[op * per + q * p->M + r] = v;
            }
    row_job j = {p, bw, au, per, (p->N + BNR - 1) / BNR};
    const int64_t tasks = p->count * j.panels;
    if (kn_threadpool_size(pool) <= 1) row_range(&j, 0, tasks);
    else kn_parallel_for(pool, tasks, 1, row_range, &j);
    return KILN_OK;
}

static kiln_status run_batch(kn_threadpool *pool, const kn_sgemm_batch *p, const uint16_t *const *a_bf16,
                             const uint16_t *const *b_bf16, const kn_bgemm_io *io, int64_t a_ld) {
    const int64_t count = p->count;
    bjob j = {.p = p, .io = io, .a_ld = a_ld};
    j.swap = kn_bgemm_swaps(p->M, p->N, p->K);
    j.pa = j.swap ? b_units(!p->trans_a, p->M, p->K) : (p->M + amr - 1) / amr;
    j.pb = p->pack_b ? 0 : b_units(p->trans_b, p->N, p->K);
    void **ptrs = calloc((size_t)count * 4, sizeof(void *));
    if (!ptrs) return KN_OOM();
    j.aw = (const uint16_t **)ptrs;
    j.bw = (const uint16_t **)(ptrs + count);
    j.a_own = (uint16_t **)(ptrs + 2 * count);
    j.b_own = (uint16_t **)(ptrs + 3 * count);
    kn_cpu_state *state = tl_state;
    const size_t ae = j.swap ? b_whole_elems(p->M, p->K) : a_whole_elems(p->M, p->K), be = b_whole_elems(p->N, p->K);
    for (int64_t op = 0; op < count; op++) {
        if (a_bf16) j.aw[op] = a_bf16[op];
        if (b_bf16 && !p->pack_b) j.bw[op] = b_bf16[op];
    }
    /* kept forms of constant weights (the fp32 packed copies identify them) */
    for (int64_t op = 0; op < count && state && !a_bf16 && !b_bf16; op++) {
        const float *const *ak = p->a_packed ? p->a_packed : p->at_packed;
        if (ak && ak[op]) {
            whole_ctx w = {p->a[op], p->lda, p->M, p->K, j.swap ? !p->trans_a : p->trans_a};
            kn_const_layout lay = {(j.swap ? 3 : 1) + (use_amx ? 10 : 0), {p->M, p->K, p->lda, p->trans_a}};
            j.aw[op] = kn_cpu_const_rederived(state, ak[op], &lay, ae * 2, j.swap ? make_b_whole : make_a_whole, &w);
        }
        if (p->b_packed && !p->pack_b && p->b_packed[op]) {
            whole_ctx w = {p->b[op], p->ldb, p->N, p->K, p->trans_b};
            kn_const_layout lay = {use_amx ? 12 : 2, {p->N, p->K, p->ldb, p->trans_b}};
            j.bw[op] = kn_cpu_const_rederived(state, p->b_packed[op], &lay, be * 2, make_b_whole, &w);
        }
    }
    if (p->M < ROWS_MAX_M && !p->pack_b) {
        const kiln_status st = run_rows(pool, p, j.bw);
        free(ptrs);
        return st;
    }
    const bool stream = streams(p, io, kn_threadpool_size(pool));
    if (stream) j.pb = 0; /* B packed by the tasks, a block each */
    /* the rest rounded and packed for this call, on the pool */
    size_t need = 0;
    for (int64_t op = 0; op < count; op++) {
        if (!j.aw[op]) need += ae;
        if (!j.bw[op] && !p->pack_b && !stream) need += be;
    }
    if (need) {
        uint16_t *buf = thread_buffer(1, need * 2);
        if (!buf) {
            free(ptrs);
            return KN_OOM();
        }
        for (int64_t op = 0; op < count; op++) {
            if (!j.aw[op]) {
                j.aw[op] = j.a_own[op] = buf;
                buf += ae;
            }
            if (!j.bw[op] && !p->pack_b && !stream) {
                j.bw[op] = j.b_own[op] = buf;
                buf += be;
            }
        }
        /* units only of what is packed here: with B kept, its empty units took most chunks, and
         * the first chunk packed 7 of BERT-base's 8 A panels (the caller 3x the worker's share) */
        bool any_a = false, any_b = false;
        for (int64_t op = 0; op < count; op++) any_a |= j.a_own[op] != NULL, any_b |= j.b_own[op] != NULL;
        if (!any_a) j.pa = 0;
        if (!any_b) j.pb = 0;
        const int64_t units = count * (j.pa + j.pb);
        const double elems = (double)need;
        int64_t grain = elems / (double)units > 16384 ? 1 : (int64_t)(16384.0 * (double)units / elems) + 1;
        if (kn_threadpool_size(pool) <= 1 || elems < 65536) pack_range(&j, 0, units);
        else kn_parallel_for(pool, units, grain, pack_range, &j);
    }

    if (stream) {
        float *bb = NULL;
        if (p->row_bias) {
            /* (rows to a multiple of 32: a partial strip's tiles load 16 or 32 rows) */
            const int64_t rows = pad_to(p->M, AMX_MR);
            if (!(bb = thread_buffer(2, sizeof(float) * 16 * (size_t)(count * rows)))) {
                free(ptrs);
                return KN_OOM();
            }
            memset(bb, 0, sizeof(float) * 16 * (size_t)(count * rows));
            for (int64_t op = 0; op < count; op++) broadcast_rows(p->row_bias[op], p->M, bb + op * rows * 16);
        }
        sjob sj = {p, io, j.aw, bb, stream_cols(p->N, p->K, kn_threadpool_size(pool)), 0, 0};
        sj.blocks = (p->N + sj.nb - 1) / sj.nb;
        const int64_t tasks = count * sj.blocks;
        if (kn_threadpool_size(pool) <= 1) stream_range(&sj, 0, tasks);
        else kn_parallel_for(pool, tasks, 1, stream_range, &sj);
        free(ptrs);
        return sj.failed ? KN_OOM() : KILN_OK;
    }
    /* tiles, as sgemm.c chooses them (transposed: whole columns first, one tile per thread) */
    j.units_m = j.swap ? (p->M + BNR - 1) / BNR : (p->M + cmr - 1) / cmr;
    /* transposed with a packing callback: tiles split the columns (each tile runs the callback, a
     * convolution's im2col, for its own columns only; split by rows, every tile made all of it),
     * in units of the micro-kernel's rows (49 columns: 24 + 25) */
    j.un = j.swap && p->pack_b ? BMR : BNR;
    j.units_n = (p->N + j.un - 1) / j.un;
    const double flops = 2.0 * (double)p->M * (double)p->N * (double)p->K * (double)count;
    int64_t threads = kn_threadpool_size(pool);
    const int64_t by_work = (int64_t)(flops / MIN_FLOPS_PER_THREAD);
    if (threads > by_work) threads = by_work > 0 ? by_work : 1;
    j.tm = j.tn = 1;
    int64_t tiles_wanted = threads;
    /* on AMX with B kept (weights from memory, panels outer in run_tile_amx) one tile per thread: a
     * tile's first panel comes unprefetched, and 4 tiles a thread made that a third of BERT-base's
     * panels (0.95 of the time at 2 threads without, ViT-B/16 0.95) */
    bool kept_b = use_amx && !p->pack_b;
    for (int64_t op = 0; op < count && kept_b; op++) kept_b = !j.b_own[op];
    if (threads > 1 && !kept_b && flops / (double)(threads * OVERSUB) >= MIN_TILE_FLOPS) tiles_wanted = threads * OVERSUB;
    if (j.swap && count < threads) {
        if (p->pack_b) j.tn = min64((threads + count - 1) / count, j.units_n);
        else j.tm = min64((threads + count - 1) / count, j.units_m); /* op(B) packed once, shared */
    } else if (count < tiles_wanted) {
        const int64_t target = (tiles_wanted + count - 1) / count;
        int64_t best_tiles = 0;
        double best_cost = 0;
        for (int64_t tm = 1; tm <= target && tm <= j.units_m; tm++) {
            int64_t tn = target / tm;
            if (tn > j.units_n) tn = j.units_n;
            if (tn < 1) tn = 1;
            const int64_t tiles = tm * tn;
            /* a tile re-reads (with a callback: re-packs) B once per row of tiles */
            const double cost = (double)tn * (double)p->M + (double)tm * (double)p->N * (p->pack_b ? 4.0 : 1.0);
            if (tiles > best_tiles || (tiles == best_tiles && cost < best_cost)) {
                best_tiles = tiles;
                best_cost = cost;
                j.tm = tm;
                j.tn = tn;
            }
        }
    }
    const int64_t tasks = count * j.tm * j.tn;
    if (threads <= 1) tile_range(&j, 0, tasks);
    else kn_parallel_for(pool, tasks, 1, tile_range, &j);
    free(ptrs);
    return j.failed ? KN_OOM() : KILN_OK;
}

#else /* not x86 with a compiler that has the bf16 intrinsics */

kiln_status kn_bgemm_run_prepacked(kn_threadpool *pool, const kn_sgemm_batch *p, const uint16_t *const *a_bf16,
                                   const uint16_t *const *b_bf16) {
    (void)pool, (void)p, (void)a_bf16, (void)b_bf16;
    return kn_error(KILN_ERR_UNSUPPORTED, "this build of kiln has no bf16 GEMM (x86-64 with AVX512_BF16 only)");
}
kiln_status kn_bgemm_run(kn_threadpool *pool, const kn_sgemm_batch *p) { return kn_bgemm_run_prepacked(pool, p, NULL, NULL); }
kiln_status kn_bgemm_run_rows16(const kn_sgemm_batch *p, const uint16_t *a16, int64_t lda16, const uint16_t *b16) {
    (void)p, (void)a16, (void)lda16, (void)b16;
    return kn_error(KILN_ERR_UNSUPPORTED, "this build of kiln has no bf16 GEMM (x86-64 with AVX512_BF16 only)");
}
bool kn_bgemm_io_takes(const kn_sgemm_batch *p, const kn_bgemm_io *io) {
    (void)p, (void)io;
    return false;
}
kiln_status kn_bgemm_run_io(kn_threadpool *pool, const kn_sgemm_batch *p, const kn_bgemm_io *io) {
    (void)pool, (void)p, (void)io;
    return kn_error(KILN_ERR_UNSUPPORTED, "this build of kiln has no bf16 GEMM (x86-64 with AVX512_BF16 only)");
}
size_t kn_bgemm_packed_a_elems(int64_t M, int64_t N, int64_t K) {
    (void)N;
    return (size_t)(pad_to(M, BNR) * pad_to(K, 2));
}
size_t kn_bgemm_packed_b_elems(int64_t N, int64_t K) { return (size_t)(pad_to(N, BNR) * pad_to(K, 2)); }
void kn_bgemm_pack_a(const float *A, int64_t lda, bool trans_a, int64_t M, int64_t N, int64_t K, uint16_t *dst) {
    (void)A, (void)lda, (void)trans_a, (void)M, (void)N, (void)K, (void)dst;
}
bool kn_bgemm_swaps(int64_t M, int64_t N, int64_t K) {
    (void)M, (void)N, (void)K;
    return false;
}
bool kn_bgemm_amx(void) { return false; }
bool kn_bgemm_force_amx(bool on) { return !on; }
void kn_bgemm_pack_b(const float *B, int64_t ldb, bool trans_b, int64_t N, int64_t K, uint16_t *dst) {
    (void)B, (void)ldb, (void)trans_b, (void)N, (void)K, (void)dst;
}

#endif

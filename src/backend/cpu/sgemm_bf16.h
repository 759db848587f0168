/* bf16 matrix products for the CPU provider's `precision=bf16` option.
 *
 * What runs in bf16: the products of MatMul, Gemm, Conv/ConvTranspose, the fused linear ops and
 * kiln.Attention's two (kn_bgemm_node). Their operands are rounded to bf16 (round to nearest even) and multiplied
 * with AMX's TDPBF16PS tiles where the CPU has them, else AVX512_BF16's vdpbf16ps; both accumulate
 * pairs of products in fp32. alpha, beta, the bias, the epilogue and every other operator stay fp32. Constant weights are rounded and packed
 * once per session (kept in the CPU backend's state beside the fp32 packed copies), activations
 * once per product call.
 *
 * How it is wired, so that no kernel file needs to know: the CPU backend's run function marks the
 * calling thread while such a node runs (kn_bgemm_enter/leave; the compiled plan calls such nodes
 * through that run, not the kernel directly: kn_cpu_node_wraps in backend.h), and kn_sgemm_run
 * hands the products it is given on a marked thread to kn_bgemm_run when kn_bgemm_takes says the
 * shape is worth it (else they stay fp32: a row times a matrix, a matrix times a column, a few
 * rows). With vdpbf16ps, convolutions that do not use the GEMM (Winograd, the direct kernels) stay
 * fp32; with AMX every convolution but the depthwise ones uses it (conv.c).
 *
 * CPU support is checked at run time (cpuid and the OS's AVX-512 state), never assumed from the
 * build flags: a CPU without AVX512_BF16 refuses the option when the session is created
 * (kn_cpu_precision_check), so no bf16 instruction ever runs there. */
#ifndef KN_SGEMM_BF16_H
#define KN_SGEMM_BF16_H

#include "backend/cpu/sgemm.h"
#include "ir/graph.h"

#include <stdbool.h>
#include <stdint.h>

/* Whether this CPU and OS run AVX512F/BW/VL and AVX512_BF16 (cpuid, xgetbv; cached). */
bool kn_bf16_cpu_supported(void);
/* The same, unless the environment variable KILN_CPU_NO_BF16 is set (not "0"): sessions created
 * then refuse precision=bf16 as on a CPU without it (to try that path on any machine). */
bool kn_bf16_cpu_usable(void);

/* The CPU provider's decision on its precision option, made when the session is created:
 * KILN_OK for fp32, and for bf16 when has_bf16 (pass kn_bf16_cpu_usable(); tests force it);
 * otherwise KILN_ERR_UNSUPPORTED with a message saying why (bf16 without AVX512_BF16, or tf32 and
 * fp16, which the CPU provider does not have). `precision` is a kn_precision. */
kiln_status kn_cpu_precision_check(int precision, bool has_bf16);

/* Whether a node's matrix products run in bf16 under precision=bf16. */
bool kn_bgemm_node(const kn_node *n);

/* Marks the calling thread as running a bf16 node of the session whose CPU state is `state`
 * (where converted weights are kept); leave restores what enter found (nodes nest through
 * control flow). */
typedef struct kn_bgemm_scope {
    void *prev_state;
    bool prev_on;
} kn_bgemm_scope;
void kn_bgemm_enter(void *state, kn_bgemm_scope *save);
void kn_bgemm_leave(const kn_bgemm_scope *save);
/* Whether the calling thread is marked. */
bool kn_bgemm_active(void);
/* The state the calling thread is marked with, or NULL: a kernel whose products run on its pool's
 * threads (kiln.Attention) marks those with it (kn_bgemm_enter/leave around their work). */
void *kn_bgemm_state(void);

/* Whether kn_bgemm_run computes this batch in bf16 (else the caller runs it in fp32). */
bool kn_bgemm_takes(const kn_sgemm_batch *p);

/* The batch in bf16, with the contract of kn_sgemm_run (sgemm.h): the same operands, packing
 * callback, row bias, epilogue and prepacked weights (whose bf16 forms are made from a/b on
 * first use and kept while the CPU state of kn_bgemm_enter lives). Needs kn_bf16_cpu_supported. */
kiln_status kn_bgemm_run(kn_threadpool *pool, const kn_sgemm_batch *p);

/* The same with operands the caller packed whole in bf16 (kn_bgemm_pack_a/_b for this M, N, K;
 * either array may be NULL, and then that operand is packed for the call): benches, tests, callers
 * that keep their own converted weights. a/b must still describe the operands. */
kiln_status kn_bgemm_run_prepacked(kn_threadpool *pool, const kn_sgemm_batch *p, const uint16_t *const *a_bf16,
                                   const uint16_t *const *b_bf16);
/* One product (count 1, at least 4 rows, no packing callback) on AMX (kn_bgemm_amx) on the calling
 * thread, op(A) read as it is from bf16 rows (a16, row stride lda16 >= K rounded up to 32, even),
 * B packed by kn_bgemm_pack_b (b16): the tiles load A's rows straight from there. The caller makes
 * each row's elements [K, K rounded up to 32) zero (they meet B's zero padding: 0 x NaN is NaN) and
 * lets the tiles read M rounded up to 32 rows (rows past M give rows of C that are not stored).
 * kiln.Attention's softmax writes its probabilities so (kn_softmax_rows_f32_to_bf16). */
kiln_status kn_bgemm_run_rows16(const kn_sgemm_batch *p, const uint16_t *a16, int64_t lda16, const uint16_t *b16);

/* bf16 activations (precision=bf16 on AMX, where the graph keeps a value between two convolutions
 * in bfloat16): B read from bf16 rows instead of p->b (untransposed, row stride p->ldb; the pairs
 * need no rounding), and/or C written in bf16 (row stride p->ldc) instead of p->c, clamped to
 * [lo, hi] after the bias (a Relu or Clip: it commutes with the rounding) and rounded to nearest
 * even. Either pointer array may be NULL (that operand as in p). tail: each finished part of C gets
 * add or add16 (per product, row stride ld_add; both may be NULL: a residual) and then the clamp, as
 * kn_sgemm_batch's c_add and clamp (with C in bf16, before the rounding). */
typedef struct kn_bgemm_io {
    const uint16_t *const *b16;
    uint16_t *const *c16;
    float lo, hi;
    bool tail;
    const float *const *add;
    int64_t ld_add;
    const uint16_t *const *add16; /* the residual in bf16 instead of add (row stride ld_add), or NULL */
} kn_bgemm_io;
/* Whether kn_bgemm_run_io runs this batch: AMX, at least 4 rows, alpha 1, beta 0, B untransposed
 * and not from a packing callback, no c_add or clamp (io's instead), and an epilogue only with C in
 * fp32 and no tail; a residual only with the tail. */
bool kn_bgemm_io_takes(const kn_sgemm_batch *p, const kn_bgemm_io *io);
kiln_status kn_bgemm_run_io(kn_threadpool *pool, const kn_sgemm_batch *p, const kn_bgemm_io *io);

/* Elements (uint16) of op(A) (M x K) / op(B) (K x N) packed whole for an M x N x K product, and
 * the packing (op(A) packed as B is when the product runs transposed: kn_bgemm_swaps). */
size_t kn_bgemm_packed_a_elems(int64_t M, int64_t N, int64_t K);
size_t kn_bgemm_packed_b_elems(int64_t N, int64_t K);
void kn_bgemm_pack_a(const float *A, int64_t lda, bool trans_a, int64_t M, int64_t N, int64_t K, uint16_t *dst);
void kn_bgemm_pack_b(const float *B, int64_t ldb, bool trans_b, int64_t N, int64_t K, uint16_t *dst);

/* Whether the products run on AMX's tiles (AMX-TILE and AMX-BF16, the OS's permission given),
 * else on AVX512_BF16's vdpbf16ps. The two pack operands differently (kn_bgemm_pack_a/_b). */
bool kn_bgemm_amx(void);
/* The other AMX kernels (conv_amx.c): this thread's tiles configured as the GEMM's (all eight 16
 * rows of 64 bytes) before their use, released after. Only where kn_bgemm_amx(). */
void kn_amx_tiles_begin(void);
void kn_amx_tiles_end(void);
/* Tests: run the products on AMX (true; false where the CPU has none) or on vdpbf16ps (false).
 * Only while no product runs; forms packed before stay in the other packing. */
bool kn_bgemm_force_amx(bool on);

/* Whether kn_bgemm_run computes an M x N x K product (without a_bf16) as its transpose. */
bool kn_bgemm_swaps(int64_t M, int64_t N, int64_t K);

/* bf16 rounding of one float as the kernel does it (round to nearest even, NaN kept), for
 * references in tests. */
float kn_bf16_round(float x);

/* The micro-kernel's tile (rows x columns) and depth of a packed slice, for tests and benches. */
void kn_bgemm_tile(int *mr, int *nr, int *kc);

#endif

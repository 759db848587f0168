/* The CPU backend's functions that code outside it calls (isa.h): in a build with run-time
 * dispatch, isa.c defines each under its plain name and forwards the call to the chosen level's
 * copy (kn_sgemm -> kn_sgemm_avx512), through the level's table (isa_entry.c). A native build
 * has one level and no forwarding: the backend defines the plain names itself.
 *
 * The list is what the library (kn_cpu_find, kn_cpu_tables, kn_sgemm_run from sgemm_bf16.c),
 * the unit tests and the benchmark programs in bench/ call. Code outside src/backend/cpu that starts calling another of
 * the backend's functions adds it here (a portable build's link otherwise fails with "undefined
 * reference to `kn_...'"), with its return type, parameters and arguments:
 *
 *   F(return type, name, (parameters), (arguments))     V(name, (parameters), (arguments)) for void
 *
 * The definitions in isa.c are checked against the headers' declarations by the compiler. */
#ifndef KN_CPU_ISA_CALLS_H
#define KN_CPU_ISA_CALLS_H

#include "backend/cpu/attention_impl.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/image_impl.h"
#include "backend/cpu/linalg_impl.h"
#include "backend/cpu/nn_internal.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/sgemm.h"
#include "backend/cpu/signal_fft.h"

#define KN_ISA_CALLS(F, V)                                                                                          \
    F(const kn_cpu_kernel *, kn_cpu_find, (const kn_node *node, const kn_type *const *in, int n_in, char *why,      \
                                           size_t cap), (node, in, n_in, why, cap))                                 \
    F(const kn_cpu_kernel *const *, kn_cpu_tables, (size_t *count), (count))                                        \
    /* sgemm.c */                                                                                                   \
    F(kiln_status, kn_sgemm_run, (kn_threadpool *pool, const kn_sgemm_batch *p), (pool, p))                         \
    F(kiln_status, kn_sgemm, (kn_threadpool *pool, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,     \
                              float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,    \
                              float *C, int64_t ldc),                                                               \
      (pool, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))                                       \
    F(int, kn_sgemm_nr, (void), ())                                                                                 \
    F(const char *, kn_sgemm_isa, (void), ())                                                                       \
    F(bool, kn_sgemm_swaps, (int64_t M, int64_t N, int64_t K), (M, N, K))                                           \
    F(int64_t, kn_sgemm_tasks, (const kn_sgemm_batch *p, int threads, int64_t *tm, int64_t *tn, int64_t *kp),      \
      (p, threads, tm, tn, kp))                                                                                     \
    F(size_t, kn_sgemm_packed_a_floats, (int64_t M, int64_t K), (M, K))                                             \
    F(size_t, kn_sgemm_packed_b_floats, (int64_t N, int64_t K), (N, K))                                             \
    V(kn_sgemm_pack_a, (const float *A, int64_t lda, bool trans_a, int64_t M, int64_t K, float *dst),               \
      (A, lda, trans_a, M, K, dst))                                                                                 \
    V(kn_sgemm_pack_b_full, (const float *B, int64_t ldb, bool trans_b, int64_t N, int64_t K, float *dst),          \
      (B, ldb, trans_b, N, K, dst))                                                                                 \
    /* kernels the unit tests call directly */                                                                      \
    F(kiln_status, kn_cpu_conv, (kn_kernel_ctx *c), (c))                                                            \
    F(kiln_status, kn_cpu_conv_transpose, (kn_kernel_ctx *c), (c))                                                  \
    F(kiln_status, kn_cpu_max_pool, (kn_kernel_ctx *c), (c))                                                        \
    F(kiln_status, kn_cpu_average_pool, (kn_kernel_ctx *c), (c))                                                    \
    F(kiln_status, kn_cpu_global_average_pool, (kn_kernel_ctx *c), (c))                                             \
    F(kiln_status, kn_cpu_global_max_pool, (kn_kernel_ctx *c), (c))                                                 \
    F(kiln_status, kn_cpu_image_decode, (kn_kernel_ctx *c), (c))                                                    \
    F(kiln_status, kn_cpu_resize, (kn_kernel_ctx *c), (c))                                                          \
    F(kiln_status, kn_cpu_layernorm, (kn_kernel_ctx *c), (c))                                                       \
    F(kiln_status, kn_cpu_lpnorm, (kn_kernel_ctx *c), (c))                                                          \
    F(kiln_status, kn_cpu_reduce, (kn_kernel_ctx *c), (c))                                                          \
    F(kiln_status, kn_cpu_rnn, (kn_kernel_ctx *c), (c))                                                             \
    F(kiln_status, kn_cpu_softmax, (kn_kernel_ctx *c), (c))                                                         \
    F(kiln_status, kn_cpu_topk, (kn_kernel_ctx *c), (c))                                                            \
    F(float, kn_nn_row_maxf, (const float *p, int64_t n), (p, n))                                                   \
    V(kn_softmax_row_f32, (const float *x, float *y, int64_t n, bool take_log), (x, y, n, take_log))                \
    V(kn_softmax_rows_f32, (float *x, int64_t rows, int64_t n, int64_t ld), (x, rows, n, ld))                       \
    V(kn_softmax_rows_f32_to_bf16, (float *x, int64_t rows, int64_t n, int64_t ld, uint16_t *y16, int64_t ldy),     \
      (x, rows, n, ld, y16, ldy))                                                                                   \
    F(float, kn_nn_row_minf, (const float *p, int64_t n), (p, n))                                                   \
    F(kiln_status, kn_ew_cast_n, (kiln_dtype from, const void *src, kiln_dtype to, void *dst, int64_t n,            \
                                  int saturate), (from, src, to, dst, n, saturate))                                 \
    F(int, kn_ew_cast_supported, (kiln_dtype from, kiln_dtype to), (from, to))                                      \
    V(kn_attn_init, (kn_attn *a), (a))                                                                              \
    F(kiln_status, kn_attn_run, (kn_threadpool *pool, const kn_attn *a), (pool, a))                                 \
    F(bool, kn_attn_bcast_strides, (const int64_t *dims, int rank, int64_t batch, int64_t heads, int64_t sq,        \
                                    int64_t cols, kn_attn_bcast *out), (dims, rank, batch, heads, sq, cols, out))   \
    F(kiln_status, kn_fft_plan_new, (int64_t n, int inverse, kn_fft_plan **out), (n, inverse, out))                 \
    V(kn_fft_plan_free, (kn_fft_plan *p), (p))                                                                      \
    F(size_t, kn_fft_scratch_len, (const kn_fft_plan *p), (p))                                                      \
    V(kn_fft_exec, (const kn_fft_plan *p, const kn_cpx *in, kn_cpx *out, kn_cpx *scratch), (p, in, out, scratch))    \
    /* qgemm.c (test_cpu_qconv_few_positions.c) */                                                                 \
    F(size_t, kn_qgemm_a_words, (int64_t M, int64_t K), (M, K))                                                     \
    F(size_t, kn_qgemm_b_bytes, (int64_t N, int64_t K), (N, K))                                                     \
    V(kn_qgemm_pack_a8, (const void *a, bool is_s8, int64_t rs, int64_t cs, int64_t M, int64_t K,                   \
                         const int32_t *zp_rows, int32_t zp, int32_t *dst),                                         \
      (a, is_s8, rs, cs, M, K, zp_rows, zp, dst))                                                                   \
    V(kn_qgemm_pack_b8, (const void *b, int64_t rs, int64_t cs, int64_t K, int64_t n0, int64_t nc, uint8_t *dst),   \
      (b, rs, cs, K, n0, nc, dst))                                                                                  \
    F(kiln_status, kn_qgemm_run, (kn_threadpool *pool, const kn_qgemm *g), (pool, g))                               \
    F(size_t, kn_qgemv8_bytes, (int64_t K, int64_t N), (K, N))                                                      \
    V(kn_qgemv8_pack, (const void *b, bool b_s8, int64_t K, int64_t N, void *dst), (b, b_s8, K, N, dst))            \
    F(int, kn_qgemv8_form, (const void *packed), (packed))                                                          \
    F(kiln_status, kn_qgemm8_run, (kn_threadpool *pool, const void *packed, const uint8_t *a, int64_t lda,          \
                                   int64_t M, int32_t za, int32_t zb, bool b_s8, int32_t *c, int64_t ldc,           \
                                   const kn_qgemm8_out *fo),                                                        \
      (pool, packed, a, lda, M, za, zb, b_s8, c, ldc, fo))

/* One level's table of them (isa_entry.c defines kn_cpu_level_entry_<level>). */
typedef struct kn_cpu_level_entry {
    int level; /* kn_cpu_isa */
#define KN_ISA_FIELD_(ret, name, params, args) ret(*f_##name) params;
#define KN_ISA_VFIELD_(name, params, args) void(*f_##name) params;
    KN_ISA_CALLS(KN_ISA_FIELD_, KN_ISA_VFIELD_)
#undef KN_ISA_FIELD_
#undef KN_ISA_VFIELD_
} kn_cpu_level_entry;

#endif

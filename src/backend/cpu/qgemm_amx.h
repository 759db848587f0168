/* Exact 8-bit integer products on AMX-INT8 (Intel Sapphire Rapids and later): the same sums as
 * kn_qgemm_run (qgemm.h), C (int32) = (A - za) x (B - zb), where the CPU has AMX-INT8.
 *
 * TDPB[SU][SU]D multiplies a tile of A (16 rows x 64 bytes: 64 values of K per row) by a tile of
 * B (16 rows of 64 bytes: 16 groups of 4 K, each row 16 columns x 4 bytes) and adds the products
 * into 16 x 16 int32, without saturation; the variant follows the operands' signedness. The
 * tiles take raw 8-bit values, so the zero points come out afterwards, exactly in int32 (mod
 * 2^32, as the definition's int32 result):
 *   sum_k (a - za)(b - zb) = sum_k ab - zb * rowsum(a) - za * colsum(b) + K za zb.
 * A tile step takes 64 bytes of K (16 or 32 where K is no more: shallow 1x1 convolutions). A is
 * read in its rows as the caller has it (tiles load it with the row stride) where K is a multiple
 * of the step, else copied with K padded by zeros; B is in panels of 16 columns, K in groups of 4
 * (zero past K, up to a multiple of the step), with the columns' sums after the panels: packed
 * once by kn_qgemm_amx_pack_b for constant weights, or converted block by block from kn_qgemm's
 * pair panels (a convolution's im2col callback, kn_qgemm.pack_b).
 *
 * The code is compiled once, for its own target (like sgemm_bf16.c), and used only where the CPU
 * has AMX-INT8 and AVX512-VNNI (KILN_CPU_MASK=amxint8 hides it), Linux grants the tile state, and
 * the avx512 level is in use. */
#ifndef KN_CPU_QGEMM_AMX_H
#define KN_CPU_QGEMM_AMX_H

#include "backend/cpu/qgemm.h"

/* whether the products may use AMX-INT8 (CPU, OS, level, and not turned off by the force hook) */
bool kn_qgemm_amx(void);
/* Tests: off (false) makes every product take kn_qgemm's forms; on (true) gives back what the CPU
 * has (returns false when it has no AMX-INT8). Not while products run. */
bool kn_qgemm_amx_force(bool on);
/* whether an M x N x K product should run on the tiles (kn_qgemm_amx() and large enough) */
bool kn_qgemm_amx_pays(int64_t M, int64_t N, int64_t K);

/* bytes of B (K x N) packed for the tiles, its column sums included */
size_t kn_qgemm_amx_b_bytes(int64_t N, int64_t K);
/* Packs B, K x N 8-bit values with element (k, j) at b[k * rs + j * cs] (int8 when b_signed). */
void kn_qgemm_amx_pack_b(const void *b, bool b_signed, int64_t rs, int64_t cs, int64_t K, int64_t N, uint8_t *dst);

/* B as a convolution's im2col read straight from its (padded) planes into the tiles' panels, at
 * stride sw (1 or 2) along the output rows: column n = (oh, ow) (OW a row) and row k = (c, kh,
 * kw) (K = C KH KW) hold x[c * plane + (oh * sh + kh * dh) * WP + ow * sw + kw * dw]. A panel's
 * 16 columns are a few runs of bytes (one per output row it spans), each k's 16 bytes a masked
 * load per run, four k's interleaved byte by byte into a 64-byte row: no pair form in between. A
 * pointwise convolution is KH = KW = 1 and OW = the plane. */
typedef struct kn_qgemm_amx_planes {
    const uint8_t *x;
    int64_t plane, WP, OW, sh, KH, KW, dh, dw, sw;
} kn_qgemm_amx_planes;

typedef struct kn_qgemm_amx_args {
    int64_t M, N, K;
    const void *a; /* M x K 8-bit values, row i at a + i * lda */
    int64_t lda;
    bool a_signed;
    const int32_t *a_sums;  /* A's row sums (kn_qgemm_amx_row_sums: constant weights), or NULL */
    const int32_t *za_rows; /* A's zero point per row (M), or NULL: za for all */
    int32_t za;
    /* B: packed by kn_qgemm_amx_pack_b (all N), or read from planes, or else kn_qgemm's pair
     * panels, all of them in b_pairs or made block by block by pack_b (kn_qgemm's callback) */
    const uint8_t *b;
    const uint8_t *b_pairs;
    const kn_qgemm_amx_planes *planes; /* or B read from a convolution's planes */
    kn_qgemm_pack_b_fn pack_b;
    const void *pack_ctx;
    bool b_signed;
    const int32_t *zb_cols; /* B's zero point per column (N), or NULL: zb for all */
    int32_t zb;
    int32_t *c; /* M x N, row stride ldc */
    int64_t ldc;
    bool accumulate;
    void (*rows_done)(const void *ctx, int64_t m0, int64_t m1, int64_t n0, int64_t nc); /* as kn_qgemm's */
    const void *done_ctx;
    /* or else, where rq_y is set, C is not written: each sum plus rq_bias[i] (or none) goes
     * straight to y[i * rq_ldy + j] = saturate(round((double)v * rq_r[i] + rq_zy)) in int8 when
     * rq_s8 else uint8, through kn_q_requant's vector form (qrequant.h: float32, double near
     * ties), so the bytes are the same as that pass over C (QLinearConv) */
    uint8_t *rq_y;
    int64_t rq_ldy;
    const float *rq_r;
    const int32_t *rq_bias;
    double rq_zy;
    bool rq_s8;
} kn_qgemm_amx_args;

/* out[i] = sum_k a[i * lda + k] (int8 when a_signed), i < M: A's row sums as kn_qgemm_amx_run
 * uses them, for a caller that keeps them with constant weights. Only where kn_qgemm_amx(). */
void kn_qgemm_amx_row_sums(const void *a, int64_t lda, bool a_signed, int64_t M, int64_t K, int32_t *out);

/* Runs the product on the pool (NULL: the caller's thread). KILN_ERR_OUT_OF_MEMORY when a buffer
 * cannot be had; KILN_ERR_UNSUPPORTED when !kn_qgemm_amx(). */
kiln_status kn_qgemm_amx_run(kn_threadpool *pool, const kn_qgemm_amx_args *g);

#endif

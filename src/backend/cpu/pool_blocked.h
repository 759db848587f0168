/* MaxPool of a bf16 NCHW value into the channel-blocked layout (conv_amx_blocked.h), for the CPU
 * provider's precision=bf16: a ResNet stem's MaxPool, whose output only blocked convolutions read
 * (opt pass cpu_bf16_values marks it y_blocked), writes that layout itself, so its readers (the
 * first bottleneck's 1x1 and the downsample) read it in place instead of each transposing it. */
#ifndef KN_CPU_POOL_BLOCKED_H
#define KN_CPU_POOL_BLOCKED_H

#include "ops/linalg_util.h"
#include "util/threadpool.h"

#include <stdbool.h>
#include <stdint.h>

/* y (bf16, blocked [N][C/32][OH][OW][32]) = MaxPool of x (bf16 NCHW [N][C][H][W]) over the 2-D
 * window w (w->in: H, W; w->out: OH, OW). C a multiple of 32, every window holding an input position
 * in each dim (kn_max_pool_blocked_takes). Exact: the max of bf16 values is one of them. Any CPU
 * (AVX-512 where the CPU has AVX512_BF16, checked at run time). false: out of memory. */
bool kn_max_pool_blocked(kn_threadpool *pool, const kn_window *w, const uint16_t *x, uint16_t *y, int64_t N,
                         int64_t C);

/* Whether kn_max_pool_blocked takes the window: 2-D, sizes known and positive, every output row and
 * column with an input position in its window. */
bool kn_max_pool_blocked_takes(const kn_window *w);

/* Tests: the scalar code on any CPU while on. Only while no pool runs. */
void kn_max_pool_blocked_scalar(bool on);

#endif

// Recurrent operators LSTM, GRU and RNN. Two ways to run the steps:
// - k_rnn_seq: the whole recurrence in one launch. Each block owns one direction and a few batch
//   items, keeps R in shared memory and loops over the time steps itself, so a step costs a
//   block-wide product and a barrier instead of two kernel launches. Used when R fits in shared
//   memory and the blocks fit on the device at once (the common small-hidden-size models).
// - per step: the state projection in cuBLASLt, then a cell kernel (k_lstm, k_gru, k_rnn) applies
//   the gates. For large hidden sizes or batches, where one block per direction would be slower
//   than a device-wide product.
// - k_rnn_reg: as k_rnn_seq, with R in registers (hidden sizes up to 96): a step is one barrier
//   and a product with no weight reads, for the small models where a step's latency is the time.
// Either way the input projections of all steps are one cuBLASLt product before the steps.
// k_lstm_stack runs kiln.StackedLSTM's layers the first way, as a pipeline across blocks of one
// cooperative launch: each layer's recurrence and each upper layer's input projection in its own
// blocks, a step behind the stage before it.
#include "backend/cuda/cu_common.cuh"

#include <math.h>

using namespace kncu;

namespace {

__device__ __forceinline__ float sigm(float x) { return 1.f / (1.f + expf(-x)); }
__device__ __forceinline__ float clipf(float x, float c) { return c > 0.f ? fminf(fmaxf(x, -c), c) : x; }

// Time index of item b at step s, or -1 past its length. A length past T (reported before the
// launch, kn_cu_check_range) counts as T: no step reads outside the sequence.
__device__ __forceinline__ int64_t time_of(const int32_t *lens, int64_t b, int64_t s, int64_t T, bool reverse) {
    int64_t len = lens ? (int64_t)lens[b] : T;
    if (len > T) len = T;
    if (s >= len) return -1;
    return reverse ? len - 1 - s : s;
}

template <typename T>
__global__ void k_lstm(const T *gx, const T *gh, T *h, T *c, T *y, int64_t y_step, const T *peep, const int32_t *lens,
                       int64_t step, int64_t Tn, bool reverse, int64_t B, int64_t H, float clip, bool input_forget) {
    KNCU_LOOP(i, B * H) {
        int64_t b = i / H, j = i % H;
        int64_t t = time_of(lens, b, step, Tn, reverse);
        if (t < 0) continue;
        const T *x = gx + (t * B + b) * 4 * H;
        const T *r = gh + b * 4 * H;
        float cp = (float)ld(c[i]);
        float pi = peep ? (float)ld(peep[j]) : 0.f, po = peep ? (float)ld(peep[H + j]) : 0.f,
              pf = peep ? (float)ld(peep[2 * H + j]) : 0.f;
        float gi = sigm(clipf((float)ld(x[j]) + (float)ld(r[j]) + pi * cp, clip));
        float gf = input_forget ? 1.f - gi
                                : sigm(clipf((float)ld(x[2 * H + j]) + (float)ld(r[2 * H + j]) + pf * cp, clip));
        float gc = tanhf(clipf((float)ld(x[3 * H + j]) + (float)ld(r[3 * H + j]), clip));
        float cn = gf * cp + gi * gc;
        float go = sigm(clipf((float)ld(x[H + j]) + (float)ld(r[H + j]) + po * cn, clip));
        float hn = go * tanhf(cn);
        c[i] = st<T>(cn);
        h[i] = st<T>(hn);
        if (y) y[t * y_step + i] = st<T>(hn);
    }
}

template <typename T>
__global__ void k_gru(const T *gx, const T *gh, const T *ghh, int64_t ghh_stride, const T *rbh, T *h, T *y,
                      int64_t y_step, const int32_t *lens, int64_t step, int64_t Tn, bool reverse, int64_t B, int64_t H,
                      float clip, bool lbr) {
    KNCU_LOOP(i, B * H) {
        int64_t b = i / H, j = i % H;
        int64_t t = time_of(lens, b, step, Tn, reverse);
        if (t < 0) continue;
        const T *x = gx + (t * B + b) * 3 * H;
        const T *r = gh + b * 3 * H;
        float z = sigm(clipf((float)ld(x[j]) + (float)ld(r[j]), clip));
        float rr = sigm(clipf((float)ld(x[H + j]) + (float)ld(r[H + j]), clip));
        float hh = (float)ld(ghh[b * ghh_stride + j]) + (rbh ? (float)ld(rbh[j]) : 0.f);
        float pre = (float)ld(x[2 * H + j]) + (lbr ? rr * hh : hh);
        float cand = tanhf(clipf(pre, clip));
        float hn = (1.f - z) * cand + z * (float)ld(h[i]);
        h[i] = st<T>(hn);
        if (y) y[t * y_step + i] = st<T>(hn);
    }
}

template <typename T>
__global__ void k_gru_reset(const T *gx, const T *gh, const T *h, T *rh, const int32_t *lens, int64_t step, int64_t Tn,
                            bool reverse, int64_t B, int64_t H, float clip) {
    KNCU_LOOP(i, B * H) {
        int64_t b = i / H, j = i % H;
        int64_t t = time_of(lens, b, step, Tn, reverse);
        if (t < 0) {
            rh[i] = st<T>(0.f);
            continue;
        }
        const T *x = gx + (t * B + b) * 3 * H;
        const T *r = gh + b * 3 * H;
        float rr = sigm(clipf((float)ld(x[H + j]) + (float)ld(r[H + j]), clip));
        rh[i] = st<T>(rr * (float)ld(h[i]));
    }
}

template <typename T>
__global__ void k_rnn(const T *gx, const T *gh, T *h, T *y, int64_t y_step, const int32_t *lens, int64_t step,
                      int64_t Tn, bool reverse, int64_t B, int64_t H, float clip, int act) {
    KNCU_LOOP(i, B * H) {
        int64_t b = i / H, j = i % H;
        int64_t t = time_of(lens, b, step, Tn, reverse);
        if (t < 0) continue;
        float v = clipf((float)ld(gx[(t * B + b) * H + j]) + (float)ld(gh[b * H + j]), clip);
        float hn = act == 1 ? fmaxf(v, 0.f) : (act == 2 ? sigm(v) : tanhf(v));
        h[i] = st<T>(hn);
        if (y) y[t * y_step + i] = st<T>(hn);
    }
}


// ---- the whole recurrence in one launch

// Shared memory of a block: a weight matrix transposed, Ws[k * GH + col] = W[col][k] for k < K and 0
// up to KP (K rounded up to 4), so a warp reads consecutive words; then float vectors.
__host__ __device__ __forceinline__ int pad4(int64_t k) { return (int)((k + 3) / 4 * 4); }
__host__ __device__ __forceinline__ int64_t weights_bytes(int64_t GH, int64_t K, size_t es) {
    return ((int64_t)GH * pad4(K) * (int64_t)es + 15) / 16 * 16;
}

// Eight loads a thread in flight before their stores: one at a time, the prologue of a launch
// cost a global load's latency per element a thread copies (k_rnn_reg's showed it in ncu).
template <typename T> __device__ void load_transposed(T *Ws, const T *W, int GH, int K, int KP) {
    const int n = GH * KP, step = (int)blockDim.x;
    for (int i0 = threadIdx.x; i0 < n; i0 += 8 * step) {
        T v[8];
#pragma unroll
        for (int r = 0; r < 8; r++) {
            const int i = i0 + r * step, k = i / GH, col = i - k * GH;
            v[r] = i < n && k < K ? W[(int64_t)col * K + k] : st<T>(0.f);
        }
#pragma unroll
        for (int r = 0; r < 8; r++)
            if (i0 + r * step < n) Ws[i0 + r * step] = v[r];
    }
}

// out[b * out_stride + col] = sum_k W[col][k] v[b][k] for columns [c0, c1) and items b < nb; v is
// [ROWS][KP] floats (rows past nb zero), read four at a time.
template <int ROWS, typename T, typename O>
__device__ __forceinline__ void project(const T *Ws, int GH, const float *v, int KP, O *out, int64_t out_stride,
                                        int c0, int c1, int nb) {
    for (int col = c0 + threadIdx.x; col < c1; col += blockDim.x) {
        float a[ROWS];
#pragma unroll
        for (int b = 0; b < ROWS; b++) a[b] = 0.f;
        for (int k = 0; k < KP; k += 4) {
            float w0 = (float)ld(Ws[k * GH + col]), w1 = (float)ld(Ws[(k + 1) * GH + col]),
                  w2 = (float)ld(Ws[(k + 2) * GH + col]), w3 = (float)ld(Ws[(k + 3) * GH + col]);
#pragma unroll
            for (int b = 0; b < ROWS; b++) {
                float4 x = *(const float4 *)(v + b * KP + k);
                a[b] = fmaf(w0, x.x, fmaf(w1, x.y, fmaf(w2, x.z, fmaf(w3, x.w, a[b]))));
            }
        }
#pragma unroll
        for (int b = 0; b < ROWS; b++)
            if (b < nb) out[b * out_stride + col] = st<O>(a[b]);
    }
}

// Pipeline counters between blocks of one launch (every block resident at once): a producer
// publishes "steps done", a consumer waits until the step it needs is done.
__device__ __forceinline__ void wait_for(const int *counter, int64_t step) {
    if (counter) {
        if (threadIdx.x == 0)
            while (*(const volatile int *)counter <= step) __nanosleep(32);
        __threadfence();
        __syncthreads();
    }
}
__device__ __forceinline__ void publish(int *counter, int64_t step) {
    if (counter) {
        __threadfence(); // this thread's outputs of the step, before the counter
        __syncthreads();
        if (threadIdx.x == 0) *(volatile int *)counter = (int)(step + 1);
    }
}

template <typename G> __device__ __forceinline__ float load_gx(const G *p) {
    if constexpr (std::is_same<G, float>::value) return __ldcg(p); // written by another block of this launch
    else return (float)ld(*p);
}

// One direction of one recurrent layer for items b0 .. b0 + nb of the batch.
template <typename T, typename GX, typename YO> struct rec_args {
    int G, H;
    int64_t steps, B, b0;
    int nb;
    bool rev;
    const T *R, *bias, *peep, *h0, *c0;  // this direction's
    const GX *gx;                        // x of item bb at time t: gx + (t * B + bb) * gx_row + gx_off
    int64_t gx_row, gx_off;
    YO *y;                               // h of item bb at time t: y + t * y_t + y_off + bb * H
    int64_t y_t, y_off;
    T *yh, *yc;                          // this direction's [B, H]
    const int32_t *lens;
    float clip;
    bool input_forget, lbr;
    int act;
    const int *wait; // the input projection's counter (x of step s is there once it passes s)
    int *done;       // this layer's counter, for the next layer's input projection
};

template <int ROWS, typename T, typename GX, typename YO>
__device__ void recurrence(const rec_args<T, GX, YO> &a, unsigned char *smem) {
    const int G = a.G, H = a.H, GH = G * H, HP = pad4(H), nb = a.nb;
    const int64_t B = a.B, T_ = a.steps;
    T *Rs = (T *)smem;
    float *hs = (float *)(smem + weights_bytes(GH, H, sizeof(T)));
    float *cs = hs + ROWS * HP; // LSTM: the cell state; GRU without linear_before_reset: r * h
    float *gs = cs + ROWS * HP; // [ROWS][GH]: R h of the step
    load_transposed(Rs, a.R, GH, H, HP);
    for (int i = threadIdx.x; i < ROWS * HP; i += blockDim.x) {
        int b = i / HP, j = i - b * HP;
        bool live = b < nb && j < H;
        int64_t at = (a.b0 + b) * H + j;
        hs[i] = live && a.h0 ? (float)ld(a.h0[at]) : 0.f;
        cs[i] = live && G == 4 && a.c0 ? (float)ld(a.c0[at]) : 0.f;
    }
    __syncthreads();
    const bool reset_after = G == 3 && !a.lbr; // the h gate multiplies r * h by Rh
    const float clip = a.clip;
    for (int64_t s = 0; s < T_; s++) {
        wait_for(a.wait, s);
        // this thread's first element's inputs of the step, loaded before the product so that
        // their latency (L2, or another block's writes) passes while it runs
        float xr[4] = {0.f, 0.f, 0.f, 0.f};
        if ((int)threadIdx.x < nb * H) {
            int b = threadIdx.x / H, j = threadIdx.x - b * H;
            int64_t t = time_of(a.lens, a.b0 + b, s, T_, a.rev);
            if (t >= 0) {
                const GX *x = a.gx + (t * B + a.b0 + b) * a.gx_row + a.gx_off;
#pragma unroll
                for (int g = 0; g < 4; g++)
                    if (g < G) xr[g] = load_gx(x + g * H + j);
            }
        }
        // x of gate g for element i (the prefetched ones for this thread's first)
#define X_IN(i, x, g, j) ((i) == (int)threadIdx.x ? xr[g] : load_gx((x) + (g) * H + (j)))
        project<ROWS>(Rs, GH, hs, HP, gs, GH, 0, reset_after ? 2 * H : GH, nb);
        __syncthreads();
        if (reset_after) {
            for (int i = threadIdx.x; i < nb * H; i += blockDim.x) {
                int b = i / H, j = i - b * H;
                int64_t t = time_of(a.lens, a.b0 + b, s, T_, a.rev);
                if (t < 0) continue;
                const GX *x = a.gx + (t * B + a.b0 + b) * a.gx_row + a.gx_off;
                float br = a.bias ? (float)ld(a.bias[H + j]) + (float)ld(a.bias[GH + H + j]) : 0.f;
                float r = sigm(clipf(X_IN(i, x, 1, j) + gs[b * GH + H + j] + br, clip));
                cs[b * HP + j] = r * hs[b * HP + j];
            }
            __syncthreads();
            project<ROWS>(Rs, GH, cs, HP, gs, GH, 2 * H, GH, nb);
            __syncthreads();
        }
        for (int i = threadIdx.x; i < nb * H; i += blockDim.x) {
            int b = i / H, j = i - b * H;
            int64_t bb = a.b0 + b;
            int64_t t = time_of(a.lens, bb, s, T_, a.rev);
            if (t < 0) { // past this item's length: its state holds, its output is zero
                if (a.y) a.y[s * a.y_t + a.y_off + bb * H + j] = st<YO>(0.f);
                continue;
            }
            const GX *x = a.gx + (t * B + bb) * a.gx_row + a.gx_off;
            const float *r = gs + b * GH;
            const T *bias = a.bias;
            float hn;
            if (G == 4) {
                float pre[4];
#pragma unroll
                for (int g = 0; g < 4; g++)
                    pre[g] = X_IN(i, x, g, j) + r[g * H + j] +
                             (bias ? (float)ld(bias[g * H + j]) + (float)ld(bias[GH + g * H + j]) : 0.f);
                float cp = cs[b * HP + j];
                float pi = a.peep ? (float)ld(a.peep[j]) : 0.f, po = a.peep ? (float)ld(a.peep[H + j]) : 0.f,
                      pf = a.peep ? (float)ld(a.peep[2 * H + j]) : 0.f;
                float gi = sigm(clipf(pre[0] + pi * cp, clip));
                float gf = a.input_forget ? 1.f - gi : sigm(clipf(pre[2] + pf * cp, clip));
                float gc = tanhf(clipf(pre[3], clip));
                float cn = gf * cp + gi * gc;
                float go = sigm(clipf(pre[1] + po * cn, clip));
                hn = go * tanhf(cn);
                cs[b * HP + j] = cn;
            } else if (G == 3) {
                float bz = 0.f, brr = 0.f, bwh = 0.f, brh = 0.f;
                if (bias) {
                    bz = (float)ld(bias[j]) + (float)ld(bias[GH + j]);
                    brr = (float)ld(bias[H + j]) + (float)ld(bias[GH + H + j]);
                    bwh = (float)ld(bias[2 * H + j]);
                    brh = (float)ld(bias[GH + 2 * H + j]);
                }
                float z = sigm(clipf(X_IN(i, x, 0, j) + r[j] + bz, clip));
                float rr = sigm(clipf(X_IN(i, x, 1, j) + r[H + j] + brr, clip));
                float hh = r[2 * H + j] + brh;
                float pre = X_IN(i, x, 2, j) + bwh + (reset_after ? hh : rr * hh);
                float cand = tanhf(clipf(pre, clip));
                hn = (1.f - z) * cand + z * hs[b * HP + j];
            } else {
                float bsum = bias ? (float)ld(bias[j]) + (float)ld(bias[GH + j]) : 0.f;
                float v = clipf(X_IN(i, x, 0, j) + r[j] + bsum, clip);
                hn = a.act == 1 ? fmaxf(v, 0.f) : (a.act == 2 ? sigm(v) : tanhf(v));
            }
            hs[b * HP + j] = hn;
            if (a.y) a.y[t * a.y_t + a.y_off + bb * H + j] = st<YO>(hn);
        }
        if (a.done) publish(a.done, s);
        else __syncthreads();
#undef X_IN
    }
    for (int i = threadIdx.x; i < nb * H; i += blockDim.x) {
        int b = i / H, j = i - b * H;
        int64_t at = (a.b0 + b) * H + j;
        if (a.yh) a.yh[at] = st<T>(hs[b * HP + j]);
        if (a.yc) a.yc[at] = st<T>(cs[b * HP + j]);
    }
}

// Layer l's input projection for items b0 .. b0 + nb, step after step as layer l - 1 makes them:
// out[t][bb] = W in[t][bb] (in: [T, B, K] floats; out: [T, B, GH] floats).
template <int ROWS, typename T>
__device__ void input_projection(const T *W, int GH, int K, const float *in, float *out, int64_t T_, int64_t B,
                                 int64_t b0, int nb, const int *wait, int *done, unsigned char *smem) {
    const int KP = pad4(K);
    T *Ws = (T *)smem;
    float *v = (float *)(smem + weights_bytes(GH, K, sizeof(T)));
    load_transposed(Ws, W, GH, K, KP);
    for (int64_t t = 0; t < T_; t++) {
        wait_for(wait, t);
        for (int i = threadIdx.x; i < ROWS * KP; i += blockDim.x) {
            int b = i / KP, k = i - b * KP;
            v[i] = b < nb && k < K ? __ldcg(in + (t * B + b0 + b) * K + k) : 0.f;
        }
        __syncthreads();
        project<ROWS>(Ws, GH, v, KP, out + (t * B + b0) * GH, GH, 0, GH, nb);
        publish(done, t);
    }
}

template <typename T, int ROWS> __global__ void __launch_bounds__(1024) k_rnn_seq(kn_cu_rnn_seq p) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int64_t slices = (p.batch + ROWS - 1) / ROWS;
    const int d = (int)(blockIdx.x / slices);
    const int64_t GH = p.gates * p.hidden, H = p.hidden, B = p.batch;
    rec_args<T, T, T> a;
    a.G = p.gates;
    a.H = (int)H;
    a.steps = p.T;
    a.B = B;
    a.b0 = (int64_t)(blockIdx.x % slices) * ROWS;
    a.nb = (int)min((int64_t)ROWS, B - a.b0);
    a.rev = p.reverse || d == 1;
    a.R = (const T *)p.R + d * GH * H;
    a.bias = p.bias ? (const T *)p.bias + d * 2 * GH : nullptr;
    a.peep = p.peep ? (const T *)p.peep + d * 3 * H : nullptr;
    a.h0 = p.h0 ? (const T *)p.h0 + d * B * H : nullptr;
    a.c0 = p.c0 ? (const T *)p.c0 + d * B * H : nullptr;
    a.gx = (const T *)p.gx;
    a.gx_row = p.dirs * GH;
    a.gx_off = d * GH;
    a.y = (T *)p.y;
    a.y_t = p.dirs * B * H;
    a.y_off = d * B * H;
    a.yh = p.yh ? (T *)p.yh + d * B * H : nullptr;
    a.yc = p.yc ? (T *)p.yc + d * B * H : nullptr;
    a.lens = p.seq_lens;
    a.clip = p.clip;
    a.input_forget = p.input_forget;
    a.lbr = p.linear_before_reset;
    a.act = p.act;
    a.wait = nullptr;
    a.done = nullptr;
    recurrence<ROWS>(a, smem);
}

// Stacked LSTM layers as a pipeline: block (stage, slice); stage 2l runs layer l's recurrence,
// stage 2l - 1 layer l's input projection from layer l - 1's outputs, each a step behind the one
// before it, so the layers overlap instead of running one after another.
template <typename T, int ROWS> __global__ void __launch_bounds__(1024) k_lstm_stack(kn_cu_lstm_stack p) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int64_t slices = (p.batch + ROWS - 1) / ROWS, B = p.batch;
    const int stage = (int)(blockIdx.x / slices);
    const int64_t slice = blockIdx.x % slices, b0 = slice * ROWS;
    const int nb = (int)min((int64_t)ROWS, B - b0);
    int *counter = p.counters + stage * slices + slice;
    const int *before = stage > 0 ? p.counters + (stage - 1) * slices + slice : nullptr;
    const int L = p.layers;
    if (stage % 2 == 1) {
        int l = (stage + 1) / 2;
        input_projection<ROWS>((const T *)p.W[l], (int)(4 * p.hidden[l]), (int)p.hidden[l - 1], p.seq[l - 1],
                               p.gx[l], p.T, B, b0, nb, before, counter, smem);
        return;
    }
    int l = stage / 2;
    const int64_t H = p.hidden[l];
    bool last = l == L - 1;
    auto fill = [&](auto &a) {
        a.G = 4;
        a.H = (int)H;
        a.steps = p.T;
        a.B = B;
        a.b0 = b0;
        a.nb = nb;
        a.rev = false;
        a.R = (const T *)p.R[l];
        a.bias = (const T *)p.bias[l];
        a.peep = nullptr;
        a.h0 = (const T *)p.h0[l];
        a.c0 = (const T *)p.c0[l];
        a.gx_row = 4 * H;
        a.gx_off = 0;
        a.y_t = B * H;
        a.y_off = 0;
        a.yh = last ? (T *)p.yh : nullptr;
        a.yc = last ? (T *)p.yc : nullptr;
        a.lens = nullptr;
        a.clip = 0.f;
        a.input_forget = false;
        a.lbr = false;
        a.act = 0;
        a.wait = before;
        a.done = last ? nullptr : counter;
    };
    if (l == 0) {
        rec_args<T, T, float> a;
        fill(a);
        a.gx = (const T *)p.gx0;
        a.y = p.seq[0];
        recurrence<ROWS>(a, smem);
    } else if (!last) {
        rec_args<T, float, float> a;
        fill(a);
        a.gx = p.gx[l];
        a.y = p.seq[l];
        recurrence<ROWS>(a, smem);
    } else {
        rec_args<T, float, T> a;
        fill(a);
        a.gx = p.gx[l];
        a.y = (T *)p.y;
        recurrence<ROWS>(a, smem);
    }
}

// ---- small hidden sizes: R in registers
// Thread (j, q) holds row q * H + j of R (gate q's weights of hidden unit j) in registers; the four
// threads of unit j are adjacent lanes of one warp and hand each other their gates' pre-activations
// by shuffles; h goes through shared memory in two buffers (a step reads one and writes the other),
// so a step costs one barrier and no weight reads: its latency is the K-long product (in four
// chains), the gates and the barrier. Each block: one direction, ROWS batch items. LSTM, GRU with
// linear_before_reset and RNN (a GRU without it applies r before its product: k_rnn_seq).
template <typename T, int KMAX, int ROWS>
__global__ void __launch_bounds__(4 * KMAX, 1) k_rnn_reg(kn_cu_rnn_seq p) {
    __shared__ __align__(16) float hbuf[2][ROWS][KMAX];
    const int H = (int)p.hidden, G = p.gates;
    const int64_t B = p.batch, GH = (int64_t)G * H, T_ = p.T;
    const int64_t slices = (B + ROWS - 1) / ROWS;
    const int d = (int)(blockIdx.x / slices);
    const int64_t b0 = (int64_t)(blockIdx.x % slices) * ROWS;
    const int nb = (int)min((int64_t)ROWS, B - b0);
    const bool rev = p.reverse || d == 1;
    const int j = (int)(threadIdx.x >> 2), q = (int)(threadIdx.x & 3);
    const bool unit = j < H, gate = unit && q < G;
    const T *R = (const T *)p.R + (int64_t)d * GH * H;
    // R into registers through shared memory, 16 columns at a time: read thread by thread, a row's
    // values lie H apart and a warp's load touched 32 cache lines (ncu: the load queue throttled
    // a quarter of a 50-step launch); this way a warp load covers two 64-byte row pieces. A
    // thread's 16 loads of a piece are all issued before the first store (blockDim is 4 * KMAX):
    // one load at a time, a load's latency each, the prologue was 40% of a 50-step launch (ncu's
    // stall samples on its stores)
    __shared__ float stage[4 * KMAX][17];
    float w[KMAX];
#pragma unroll
    for (int kc = 0; kc < KMAX; kc += 16) {
        const int cc = (int)(threadIdx.x & 15), i0 = (int)(threadIdx.x >> 4);
        float v[16];
#pragma unroll
        for (int r = 0; r < 16; r++) {
            const int i = i0 + r * (KMAX / 4), ji = i >> 2, qi = i & 3;
            v[r] = ji < H && qi < G && kc + cc < H ? (float)ld(R[(qi * H + ji) * H + kc + cc]) : 0.f;
        }
#pragma unroll
        for (int r = 0; r < 16; r++) stage[i0 + r * (KMAX / 4)][cc] = v[r];
        __syncthreads();
#pragma unroll
        for (int cc = 0; cc < 16; cc++) w[kc + cc] = stage[threadIdx.x][cc];
        __syncthreads();
    }
    // this gate's bias (Wb + Rb); the GRU's h gate keeps Rbh apart, inside r * (Rh h + Rbh)
    const T *bias = p.bias ? (const T *)p.bias + (int64_t)d * 2 * GH : nullptr;
    const bool gru_h = G == 3 && q == 2;
    float bx = 0.f, bh = 0.f;
    if (gate && bias) {
        bx = (float)ld(bias[q * H + j]);
        bh = (float)ld(bias[GH + q * H + j]);
        if (!gru_h) bx += bh, bh = 0.f;
    }
    const T *peep = G == 4 && p.peep ? (const T *)p.peep + (int64_t)d * 3 * H : nullptr;
    const float pi = unit && peep ? (float)ld(peep[j]) : 0.f, po = unit && peep ? (float)ld(peep[H + j]) : 0.f,
                pf = unit && peep ? (float)ld(peep[2 * H + j]) : 0.f;
    const T *h0 = p.h0 ? (const T *)p.h0 + (int64_t)d * B * H : nullptr;
    const T *c0 = G == 4 && p.c0 ? (const T *)p.c0 + (int64_t)d * B * H : nullptr;
    float c[ROWS];
#pragma unroll
    for (int b = 0; b < ROWS; b++) c[b] = unit && b < nb && c0 ? (float)ld(c0[(b0 + b) * H + j]) : 0.f;
    for (int i = threadIdx.x; i < 2 * ROWS * KMAX; i += blockDim.x) {
        int buf = i / (ROWS * KMAX), b = (i / KMAX) % ROWS, k = i % KMAX;
        hbuf[buf][b][k] = buf == 0 && b < nb && k < H && h0 ? (float)ld(h0[(b0 + b) * H + k]) : 0.f;
    }
    // each item's length (T past it), read once; s < len[b]: a live step
    int64_t len[ROWS];
#pragma unroll
    for (int b = 0; b < ROWS; b++) {
        int64_t l = b < nb ? (p.seq_lens ? (int64_t)p.seq_lens[b0 + b] : T_) : 0;
        len[b] = l > T_ ? T_ : l;
    }
    // pointers to each item's x at its next time, moved a time step per step (time runs backwards
    // in a reverse direction): no 64-bit products on the way to the next step's load
    const int64_t gx_t = (int64_t)B * p.dirs * GH, y_t = (int64_t)p.dirs * B * H;
    const int64_t gx_off = (int64_t)d * GH + (int64_t)q * H + j, y_off = (int64_t)d * B * H;
    const T *gxp[ROWS];
    T *y = (T *)p.y;
#pragma unroll
    for (int b = 0; b < ROWS; b++) gxp[b] = (const T *)p.gx + ((rev ? len[b] - 1 : 0) * B + b0 + b) * p.dirs * GH + gx_off;
    const int64_t gx_step = rev ? -gx_t : gx_t;
    const float clip = p.clip;
    const unsigned full = 0xffffffffu;
    const int lane0 = (int)(threadIdx.x & 31) & ~3; // lane of this unit's gate 0
    // x of the next step, loaded a step ahead so its latency passes under the current step
    float xn[ROWS];
#pragma unroll
    for (int b = 0; b < ROWS; b++) xn[b] = gate && len[b] > 0 ? (float)ld(*gxp[b]) : 0.f;
    // the LSTM gate a lane activates before the hand-over (i, o, f sigmoid, c tanh) and the peephole
    // it adds (i's and f's use the old cell; o's the new one, so o waits when it has one)
    const float peep_old = q == 0 ? pi : q == 2 ? pf : 0.f;
    const bool o_after = G == 4 && peep != nullptr;
    __syncthreads();
    int cur = 0;
    for (int64_t s = 0; s < T_; s++) {
        float xc[ROWS];
#pragma unroll
        for (int b = 0; b < ROWS; b++) {
            xc[b] = xn[b];
            if (s + 1 < len[b]) gxp[b] += gx_step;
            xn[b] = gate && s + 1 < len[b] ? (float)ld(*gxp[b]) : 0.f;
        }
#pragma unroll
        for (int b = 0; b < ROWS; b++) {
            const float *h = hbuf[cur][b];
            // eight chains where registers allow (four with four items a block, which would spill):
            // the product's latency is an eighth of K
            constexpr int CH = ROWS >= 4 ? 4 : 8;
            float a[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int k = 0; k < KMAX; k += 4) {
                float4 v = *(const float4 *)(h + k);
                const int o = k & (CH - 4);
                a[o] = fmaf(w[k], v.x, a[o]);
                a[o + 1] = fmaf(w[k + 1], v.y, a[o + 1]);
                a[o + 2] = fmaf(w[k + 2], v.z, a[o + 2]);
                a[o + 3] = fmaf(w[k + 3], v.w, a[o + 3]);
            }
            float rec = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
            const float hold = unit ? h[j] : 0.f, cp = c[b];
            const bool live = s < len[b]; // past an item's length its state holds and its output is zero
            float hn, cn = cp;
            if (G == 4) { // i, o, f, c: each lane activates its own gate, then the four are shared
                float v = xc[b] + rec + bx;
                if (peep) v += peep_old * cp;
                v = clipf(v, clip);
                float act = q == 3 ? tanhf(v) : sigm(v);
                float gi = __shfl_sync(full, act, lane0), go = __shfl_sync(full, act, lane0 + 1),
                      gf = __shfl_sync(full, act, lane0 + 2), gc = __shfl_sync(full, act, lane0 + 3);
                if (p.input_forget) gf = 1.f - gi;
                cn = gf * cp + gi * gc;
                if (o_after) go = sigm(clipf(__shfl_sync(full, xc[b] + rec + bx, lane0 + 1) + po * cn, clip));
                hn = go * tanhf(cn);
            } else if (G == 3) { // z, r, h: z and r activated by their lanes; h's needs r
                float pre = xc[b] + bx + (q == 2 ? 0.f : rec);
                float act = q == 2 ? pre : sigm(clipf(pre, clip));
                float z = __shfl_sync(full, act, lane0), r = __shfl_sync(full, act, lane0 + 1),
                      gx2 = __shfl_sync(full, act, lane0 + 2), gh = __shfl_sync(full, rec + bh, lane0 + 2);
                float cand = tanhf(clipf(gx2 + r * gh, clip));
                hn = (1.f - z) * cand + z * hold;
            } else {
                float v = clipf(xc[b] + rec + bx, clip);
                hn = p.act == 1 ? fmaxf(v, 0.f) : (p.act == 2 ? sigm(v) : tanhf(v));
            }
            if (live) c[b] = cn;
            if (unit && q == 0) {
                hbuf[cur ^ 1][b][j] = live ? hn : hold;
                if (y && b < nb) {
                    const int64_t t = live ? (rev ? len[b] - 1 - s : s) : s;
                    y[t * y_t + y_off + (b0 + b) * H + j] = st<T>(live ? hn : 0.f);
                }
            }
        }
        __syncthreads();
        cur ^= 1;
    }
#pragma unroll
    for (int b = 0; b < ROWS; b++)
        if (unit && q == 0 && b < nb) {
            int64_t at = y_off + (b0 + b) * H + j;
            if (p.yh) ((T *)p.yh)[at] = st<T>(hbuf[cur][b][j]);
            if (p.yc) ((T *)p.yc)[at] = st<T>(c[b]);
        }
}

static int threads_for(int64_t cols, int64_t items) {
    int64_t want = cols > items ? cols : items;
    int t = (int)((want + 31) / 32 * 32);
    return t > 1024 ? 1024 : t;
}

template <typename K, typename P>
static cudaError_t launch(K kernel, const P &p, unsigned blocks, int threads, size_t smem, bool cooperative,
                          cudaStream_t s) {
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = cooperative ? attr : nullptr;
    cfg.numAttrs = cooperative ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, p);
}

template <typename T> static cudaError_t rnn_seq_typed(const kn_cu_rnn_seq *p, size_t smem, cudaStream_t s) {
    unsigned blocks = (unsigned)(p->dirs * ((p->batch + p->rows - 1) / p->rows));
    int threads = threads_for(p->gates * p->hidden, p->rows * p->hidden);
    switch (p->rows) {
    case 1: return launch(k_rnn_seq<T, 1>, *p, blocks, threads, smem, false, s);
    case 2: return launch(k_rnn_seq<T, 2>, *p, blocks, threads, smem, false, s);
    case 4: return launch(k_rnn_seq<T, 4>, *p, blocks, threads, smem, false, s);
    case 8: return launch(k_rnn_seq<T, 8>, *p, blocks, threads, smem, false, s);
    default: return cudaErrorInvalidValue;
    }
}

template <typename T> static cudaError_t lstm_stack_typed(const kn_cu_lstm_stack *p, size_t smem, cudaStream_t s) {
    unsigned blocks = (unsigned)((2 * p->layers - 1) * ((p->batch + p->rows - 1) / p->rows));
    int64_t cols = 0;
    for (int l = 0; l < p->layers; l++)
        if (4 * p->hidden[l] > cols) cols = 4 * p->hidden[l];
    int threads = threads_for(cols, p->rows * cols / 4);
    switch (p->rows) {
    case 1: return launch(k_lstm_stack<T, 1>, *p, blocks, threads, smem, true, s);
    case 2: return launch(k_lstm_stack<T, 2>, *p, blocks, threads, smem, true, s);
    case 4: return launch(k_lstm_stack<T, 4>, *p, blocks, threads, smem, true, s);
    case 8: return launch(k_lstm_stack<T, 8>, *p, blocks, threads, smem, true, s);
    default: return cudaErrorInvalidValue;
    }
}

static size_t elem_size(kiln_dtype dt) {
    return dt == KILN_DTYPE_FLOAT ? 4 : (dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16) ? 2 : 0;
}

static bool rows_ok(int rows) { return rows == 1 || rows == 2 || rows == 4 || rows == 8; }

// k_rnn_reg's width for a hidden size: the smallest of 32, 64, 96 that holds it, 0 past 96 (R of
// 4 * 128 * 128 floats would take every register of a multiprocessor)
static int reg_kmax(int64_t hidden) { return hidden < 1 ? 0 : hidden <= 32 ? 32 : hidden <= 64 ? 64 : hidden <= 96 ? 96 : 0; }

typedef void (*reg_kernel_t)(kn_cu_rnn_seq);
template <typename T, int KMAX> static reg_kernel_t reg_rows(int rows) {
    return rows == 1 ? k_rnn_reg<T, KMAX, 1> : rows == 2 ? k_rnn_reg<T, KMAX, 2> : rows == 4 ? k_rnn_reg<T, KMAX, 4> : nullptr;
}
template <typename T> static reg_kernel_t reg_width(int64_t hidden, int rows) {
    switch (reg_kmax(hidden)) {
    case 32: return reg_rows<T, 32>(rows);
    case 64: return reg_rows<T, 64>(rows);
    case 96: return reg_rows<T, 96>(rows);
    default: return nullptr;
    }
}
static reg_kernel_t reg_kernel(kiln_dtype dt, int64_t hidden, int rows) {
    switch (dt) {
    case KILN_DTYPE_FLOAT: return reg_width<float>(hidden, rows);
    case KILN_DTYPE_FLOAT16: return reg_width<f16>(hidden, rows);
    case KILN_DTYPE_BFLOAT16: return reg_width<bf16>(hidden, rows);
    default: return nullptr;
    }
}

} // namespace

extern "C" {

cudaError_t kn_cu_lstm_cell(kiln_dtype dt, const void *gx, const void *gh, void *h, void *c, void *y, int64_t y_step,
                            const void *peep, const int32_t *seq_lens, int64_t step, int64_t T, bool reverse,
                            int64_t batch, int64_t hidden, float clip, bool input_forget, cudaStream_t s) {
    int64_t n = batch * hidden;
    if (n == 0) return cudaSuccess;
    KNCU_DISPATCH_FLOAT(dt, (k_lstm<type_><<<grid_for(n, 128), 128, 0, s>>>(
                                (const type_ *)gx, (const type_ *)gh, (type_ *)h, (type_ *)c, (type_ *)y, y_step,
                                (const type_ *)peep, seq_lens, step, T, reverse, batch, hidden, clip, input_forget)));
    return cudaGetLastError();
}

cudaError_t kn_cu_gru_cell(kiln_dtype dt, const void *gx, const void *gh, const void *ghh, int64_t ghh_stride,
                           const void *rb_h, void *h, void *y, int64_t y_step, const int32_t *seq_lens, int64_t step,
                           int64_t T, bool reverse, int64_t batch, int64_t hidden, float clip,
                           bool linear_before_reset, cudaStream_t s) {
    int64_t n = batch * hidden;
    if (n == 0) return cudaSuccess;
    KNCU_DISPATCH_FLOAT(dt, (k_gru<type_><<<grid_for(n, 128), 128, 0, s>>>(
                                (const type_ *)gx, (const type_ *)gh, (const type_ *)ghh, ghh_stride,
                                (const type_ *)rb_h, (type_ *)h, (type_ *)y, y_step, seq_lens, step, T, reverse, batch,
                                hidden, clip, linear_before_reset)));
    return cudaGetLastError();
}

cudaError_t kn_cu_gru_reset(kiln_dtype dt, const void *gx, const void *gh, const void *h, void *rh,
                            const int32_t *seq_lens, int64_t step, int64_t T, bool reverse, int64_t batch,
                            int64_t hidden, float clip, cudaStream_t s) {
    int64_t n = batch * hidden;
    if (n == 0) return cudaSuccess;
    KNCU_DISPATCH_FLOAT(dt, (k_gru_reset<type_><<<grid_for(n, 128), 128, 0, s>>>(
                                (const type_ *)gx, (const type_ *)gh, (const type_ *)h, (type_ *)rh, seq_lens, step, T,
                                reverse, batch, hidden, clip)));
    return cudaGetLastError();
}

cudaError_t kn_cu_rnn_cell(kiln_dtype dt, const void *gx, const void *gh, void *h, void *y, int64_t y_step,
                           const int32_t *seq_lens, int64_t step, int64_t T, bool reverse, int64_t batch,
                           int64_t hidden, float clip, int act, cudaStream_t s) {
    int64_t n = batch * hidden;
    if (n == 0) return cudaSuccess;
    KNCU_DISPATCH_FLOAT(dt, (k_rnn<type_><<<grid_for(n, 128), 128, 0, s>>>((const type_ *)gx, (const type_ *)gh,
                                                                            (type_ *)h, (type_ *)y, y_step, seq_lens,
                                                                            step, T, reverse, batch, hidden, clip, act)));
    return cudaGetLastError();
}

bool kn_cu_rnn_reg_fits(kiln_dtype dt, int gates, bool linear_before_reset, int64_t hidden, int rows) {
    if (gates == 3 && !linear_before_reset) return false;
    reg_kernel_t k = reg_kernel(dt, hidden, rows);
    if (!k) return false;
    /* compiled without spilling to local memory, and launchable with a thread per gate row: asked
     * once per kernel */
    static int verdict[3][3][3]; /* type, KMAX, rows: 0 not asked, 1 fits, 2 not */
    int ti = dt == KILN_DTYPE_FLOAT ? 0 : dt == KILN_DTYPE_FLOAT16 ? 1 : 2, ki = reg_kmax(hidden) / 32 - 1,
        ri = rows == 1 ? 0 : rows == 2 ? 1 : 2;
    int *v = &verdict[ti][ki][ri];
    if (!*v) {
        cudaFuncAttributes a;
        bool ok = cudaFuncGetAttributes(&a, (const void *)k) == cudaSuccess && a.localSizeBytes == 0 &&
                  a.maxThreadsPerBlock >= 4 * reg_kmax(hidden);
        if (!ok) cudaGetLastError();
        *v = ok ? 1 : 2;
    }
    return *v == 1;
}

cudaError_t kn_cu_rnn_reg_run(kiln_dtype dt, const kn_cu_rnn_seq *p, cudaStream_t s) {
    if (p->batch == 0 || p->T == 0) return cudaSuccess;
    reg_kernel_t k = reg_kernel(dt, p->hidden, p->rows);
    if (!k) return cudaErrorInvalidValue;
    unsigned blocks = (unsigned)(p->dirs * ((p->batch + p->rows - 1) / p->rows));
    k<<<blocks, 4 * reg_kmax(p->hidden), 0, s>>>(*p);
    return cudaGetLastError();
}

size_t kn_cu_rnn_seq_smem(kiln_dtype dt, int gates, int64_t hidden, int rows) {
    size_t es = elem_size(dt);
    if (!es || !rows_ok(rows) || hidden < 1) return 0;
    int64_t GH = gates * hidden;
    return (size_t)weights_bytes(GH, hidden, es) + sizeof(float) * (size_t)(2 * rows * pad4(hidden) + rows * GH);
}

cudaError_t kn_cu_rnn_seq_run(kiln_dtype dt, const kn_cu_rnn_seq *p, size_t smem, cudaStream_t s) {
    if (p->batch == 0 || p->hidden == 0) return cudaSuccess;
    switch (dt) {
    case KILN_DTYPE_FLOAT: return rnn_seq_typed<float>(p, smem, s);
    case KILN_DTYPE_FLOAT16: return rnn_seq_typed<f16>(p, smem, s);
    case KILN_DTYPE_BFLOAT16: return rnn_seq_typed<bf16>(p, smem, s);
    default: return cudaErrorNotSupported;
    }
}

size_t kn_cu_lstm_stack_smem(kiln_dtype dt, int layers, const int64_t *hidden, int rows) {
    size_t es = elem_size(dt), most = 0;
    if (!es || !rows_ok(rows) || layers < 2 || layers > KN_CU_LSTM_STACK_MAX) return 0;
    for (int l = 0; l < layers; l++) {
        if (hidden[l] < 1) return 0;
        size_t rec = kn_cu_rnn_seq_smem(dt, 4, hidden[l], rows);
        size_t proj = l == 0 ? 0
                             : (size_t)weights_bytes(4 * hidden[l], hidden[l - 1], es) +
                                   sizeof(float) * (size_t)(rows * pad4(hidden[l - 1]));
        if (rec > most) most = rec;
        if (proj > most) most = proj;
    }
    return most;
}

bool kn_cu_lstm_stack_resident(kiln_dtype dt, int layers, const int64_t *hidden, int rows, int64_t batch,
                               size_t smem, int sm_count) {
    int64_t cols = 0;
    for (int l = 0; l < layers; l++)
        if (4 * hidden[l] > cols) cols = 4 * hidden[l];
    int threads = threads_for(cols, rows * cols / 4), per_sm = 0;
    int64_t blocks = (2 * layers - 1) * ((batch + rows - 1) / rows);
    const void *k = NULL;
#define KN_STACK_KERNEL(TY)                                                                        \
    k = rows == 1 ? (const void *)k_lstm_stack<TY, 1>                                              \
                  : rows == 2 ? (const void *)k_lstm_stack<TY, 2>                                  \
                              : rows == 4 ? (const void *)k_lstm_stack<TY, 4> : (const void *)k_lstm_stack<TY, 8>
    if (!rows_ok(rows)) return false;
    if (dt == KILN_DTYPE_FLOAT) KN_STACK_KERNEL(float);
    else if (dt == KILN_DTYPE_FLOAT16) KN_STACK_KERNEL(f16);
    else if (dt == KILN_DTYPE_BFLOAT16) KN_STACK_KERNEL(bf16);
    else return false;
#undef KN_STACK_KERNEL
    if (smem > 48 * 1024 && cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
        return false;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, threads, smem) != cudaSuccess) return false;
    return blocks <= (int64_t)per_sm * sm_count;
}

cudaError_t kn_cu_lstm_stack_run(kiln_dtype dt, const kn_cu_lstm_stack *p, size_t smem, cudaStream_t s) {
    if (p->batch == 0 || p->T == 0) return cudaSuccess;
    switch (dt) {
    case KILN_DTYPE_FLOAT: return lstm_stack_typed<float>(p, smem, s);
    case KILN_DTYPE_FLOAT16: return lstm_stack_typed<f16>(p, smem, s);
    case KILN_DTYPE_BFLOAT16: return lstm_stack_typed<bf16>(p, smem, s);
    default: return cudaErrorNotSupported;
    }
}

} // extern "C"

// Recurrent cells for LSTM, GRU and RNN: the matrix products run in cuBLASLt (input projections
// for all time steps at once, the state projection per step); these kernels apply the gates.
#include "backend/cuda/cu_common.cuh"

#include <math.h>

using namespace kncu;

namespace {

__device__ __forceinline__ float sigm(float x) { return 1.f / (1.f + expf(-x)); }
__device__ __forceinline__ float clipf(float x, float c) { return c > 0.f ? fminf(fmaxf(x, -c), c) : x; }

// Time index of item b at step s, or -1 past its length.
__device__ __forceinline__ int64_t time_of(const int32_t *lens, int64_t b, int64_t s, int64_t T, bool reverse) {
    int64_t len = lens ? (int64_t)lens[b] : T;
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

} // extern "C"

// kiln's own matrix product and convolution: the stand-ins that run a warm start's first runs while
// cuBLASLt and cuDNN start up on the warm-up threads (cuda_warmup.c). They need no library, no
// algorithm choice and no workspace, and load like every other kiln kernel; they are correct for
// every shape the library paths take, in every float type, with float accumulation (double for
// double), convolutions channels first or last. Not tuned: a shared-memory tile product and a direct
// convolution, fast enough for the few runs before the libraries are ready (a warm start's runs on
// them were 4-6x slower than on the tuned libraries, for the 0.2-0.3 s those take to start).
#include "backend/cuda/cu_common.cuh"

using namespace kncu;

namespace {

constexpr int TILE = 64;   // output tile: TILE x TILE per block
constexpr int TK = 16;     // depth of one step through K
constexpr int THREADS = 256; // 16 x 16, each thread 4 x 4 outputs

struct gemm_args {
    int64_t M, N, K, batch;
    int64_t lda, ldb, ldc, sa, sb, sc;
    bool ta, tb;
    float alpha, beta;
};

// C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b], row-major; op(A)[m][k] is A[k * lda + m] when
// ta, else A[m * lda + k]; likewise B. beta == 0 never reads C (it may hold anything).
template <typename T>
__global__ void __launch_bounds__(THREADS) k_gemm_standin(const T *__restrict__ A, const T *__restrict__ B, T *C,
                                                          gemm_args g) {
    typedef typename acc<T>::type Acc;
    __shared__ Acc As[TK][TILE + 1];
    __shared__ Acc Bs[TK][TILE + 1];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t m0 = (int64_t)blockIdx.y * TILE, n0 = (int64_t)blockIdx.x * TILE;
    for (int64_t b = blockIdx.z; b < g.batch; b += gridDim.z) {
        const T *a = A + b * g.sa;
        const T *bm = B + b * g.sb;
        T *c = C + b * g.sc;
        Acc sum[4][4];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) sum[i][j] = 0;
        for (int64_t k0 = 0; k0 < g.K; k0 += TK) {
            // each thread loads 4 elements of each tile, along the operand's contiguous dim
            for (int r = 0; r < 4; r++) {
                int l = tid + THREADS * r;
                int mi, ki;
                if (g.ta) mi = l % TILE, ki = l / TILE;
                else ki = l % TK, mi = l / TK;
                int64_t m = m0 + mi, k = k0 + ki;
                As[ki][mi] = m < g.M && k < g.K ? ld(g.ta ? a[k * g.lda + m] : a[m * g.lda + k]) : (Acc)0;
                int ni;
                if (g.tb) ki = l % TK, ni = l / TK;
                else ni = l % TILE, ki = l / TILE;
                int64_t n = n0 + ni;
                k = k0 + ki;
                Bs[ki][ni] = n < g.N && k < g.K ? ld(g.tb ? bm[n * g.ldb + k] : bm[k * g.ldb + n]) : (Acc)0;
            }
            __syncthreads();
            for (int kk = 0; kk < TK; kk++) {
                Acc av[4], bv[4];
                for (int i = 0; i < 4; i++) av[i] = As[kk][ty + 16 * i];
                for (int j = 0; j < 4; j++) bv[j] = Bs[kk][tx + 16 * j];
                for (int i = 0; i < 4; i++)
                    for (int j = 0; j < 4; j++) sum[i][j] += av[i] * bv[j];
            }
            __syncthreads();
        }
        const Acc alpha = (Acc)g.alpha, beta = (Acc)g.beta;
        for (int i = 0; i < 4; i++) {
            int64_t m = m0 + ty + 16 * i;
            if (m >= g.M) continue;
            for (int j = 0; j < 4; j++) {
                int64_t n = n0 + tx + 16 * j;
                if (n >= g.N) continue;
                T *p = c + m * g.ldc + n;
                Acc v = alpha * sum[i][j];
                if (g.beta != 0.0f) v += beta * ld(*p);
                *p = st<T>(v);
            }
        }
    }
}

// One output element per thread: y = sum over the group's input channels and the kernel window of
// x * w, zero outside the input (pads before: pad[]; the output size says where the pads after end).
// Spatial dims are right-aligned into three (leading ones of size 1). Channels first: x[n, ci, i...],
// w[co, ci, k...], y[n, co, o...]; channels last: x[n, i..., ci], w[co, k..., ci] (KRSC),
// y[n, o..., co]. The layouts differ only in strides and in which index varies fastest over threads.
template <typename T>
__global__ void k_conv_standin(const T *__restrict__ x, const T *__restrict__ w, T *__restrict__ y, kn_cu_conv_standin g,
                               int64_t total) {
    typedef typename acc<T>::type Acc;
    const int64_t cin_g = g.cin / g.group, cout_g = g.cout / g.group;
    const int64_t in_sp = g.in[0] * g.in[1] * g.in[2];
    const int64_t ksz = g.k[0] * g.k[1] * g.k[2];
    // strides of an input channel and an input position; of a weight's channel and window position
    const int64_t x_c = g.nhwc ? 1 : in_sp, x_p = g.nhwc ? g.cin : 1;
    const int64_t w_c = g.nhwc ? 1 : ksz, w_p = g.nhwc ? cin_g : 1;
    KNCU_LOOP(i, total) {
        int64_t r = i, co = 0;
        if (g.nhwc) { co = r % g.cout; r /= g.cout; }
        const int64_t o2 = r % g.out[2];
        r /= g.out[2];
        const int64_t o1 = r % g.out[1];
        r /= g.out[1];
        const int64_t o0 = r % g.out[0];
        r /= g.out[0];
        if (!g.nhwc) { co = r % g.cout; r /= g.cout; }
        const int64_t n = r;
        const T *xg = x + n * g.cin * in_sp + (co / cout_g) * cin_g * x_c;
        const T *wc = w + co * cin_g * ksz;
        Acc sum = 0;
        for (int64_t k0 = 0; k0 < g.k[0]; k0++) {
            const int64_t i0 = o0 * g.stride[0] - g.pad[0] + k0 * g.dil[0];
            if (i0 < 0 || i0 >= g.in[0]) continue;
            for (int64_t k1 = 0; k1 < g.k[1]; k1++) {
                const int64_t i1 = o1 * g.stride[1] - g.pad[1] + k1 * g.dil[1];
                if (i1 < 0 || i1 >= g.in[1]) continue;
                for (int64_t k2 = 0; k2 < g.k[2]; k2++) {
                    const int64_t i2 = o2 * g.stride[2] - g.pad[2] + k2 * g.dil[2];
                    if (i2 < 0 || i2 >= g.in[2]) continue;
                    const T *xp = xg + ((i0 * g.in[1] + i1) * g.in[2] + i2) * x_p;
                    const T *wp = wc + ((k0 * g.k[1] + k1) * g.k[2] + k2) * w_p;
                    for (int64_t ci = 0; ci < cin_g; ci++) sum += ld(xp[ci * x_c]) * ld(wp[ci * w_c]);
                }
            }
        }
        y[i] = st<T>(sum);
    }
}

template <typename T> cudaError_t gemm_launch(const void *A, const void *B, void *C, const gemm_args &g, cudaStream_t s) {
    dim3 grid((unsigned)((g.N + TILE - 1) / TILE), (unsigned)((g.M + TILE - 1) / TILE),
              (unsigned)(g.batch < 65535 ? g.batch : 65535));
    k_gemm_standin<T><<<grid, THREADS, 0, s>>>((const T *)A, (const T *)B, (T *)C, g);
    return cudaGetLastError();
}

template <typename T>
cudaError_t conv_launch(const void *x, const void *w, void *y, const kn_cu_conv_standin &g, cudaStream_t s) {
    int64_t total = g.n * g.cout * g.out[0] * g.out[1] * g.out[2];
    if (total == 0) return cudaSuccess;
    k_conv_standin<T><<<grid_for(total, 256), 256, 0, s>>>((const T *)x, (const T *)w, (T *)y, g, total);
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t kn_cu_gemm_standin(kiln_dtype dt, int64_t M, int64_t N, int64_t K, int64_t batch, bool ta,
                                          bool tb, const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb,
                                          int64_t sb, void *C, int64_t ldc, int64_t sc, float alpha, float beta,
                                          cudaStream_t s) {
    if (M <= 0 || N <= 0 || batch <= 0) return cudaSuccess;
    // grid.x and grid.y are tiles of N and M: y is limited to 65535 tiles of 64 rows
    if ((M + TILE - 1) / TILE > 65535 || (N + TILE - 1) / TILE > INT32_MAX) return cudaErrorInvalidValue;
    gemm_args g = {M, N, K, batch, lda, ldb, ldc, sa, sb, sc, ta, tb, alpha, beta};
    KNCU_DISPATCH_FLOAT(dt, return gemm_launch<type_>(A, B, C, g, s))
    return cudaErrorNotSupported;
}

extern "C" cudaError_t kn_cu_conv_standin_run(kiln_dtype dt, const void *x, const void *w, void *y,
                                              const kn_cu_conv_standin *g, cudaStream_t s) {
    if (g->group < 1 || g->cin % g->group || g->cout % g->group) return cudaErrorInvalidValue;
    KNCU_DISPATCH_FLOAT(dt, return conv_launch<type_>(x, w, y, *g, s))
    return cudaErrorNotSupported;
}

// A kernel of this file, whose first load loads the file's module (kn_cu_preload_modules).
extern "C" const void *kn_cu_module_standin(void) { return (const void *)k_gemm_standin<float>; }

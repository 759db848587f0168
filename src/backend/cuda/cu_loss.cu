// NegativeLogLikelihoodLoss (and SoftmaxCrossEntropyLoss after a log-softmax): per-element losses
// and weights; the C side reduces them.
#include "backend/cuda/cu_common.cuh"

using namespace kncu;

namespace {

template <typename T>
__global__ void k_nll(const T *x, const void *target, bool t64, const T *weight, T *loss, T *wout, int64_t C,
                      int64_t D, int64_t ignore, bool has_ignore, int64_t n, kn_cu_errp err) {
    typedef typename acc<T>::type A;
    KNCU_LOOP(i, n) {
        int64_t nn = i / D, d = i % D;
        int64_t t = t64 ? ((const int64_t *)target)[i] : (int64_t)((const int32_t *)target)[i];
        if ((has_ignore && t == ignore) || t < 0 || t >= C) {
            if (!(has_ignore && t == ignore)) report(err, KN_CU_ERR_CLASS, t, 0, C, i);
            loss[i] = st<T>((A)0);
            wout[i] = st<T>((A)0);
            continue;
        }
        A w = weight ? ld(weight[t]) : (A)1;
        loss[i] = st<T>(-ld(x[(nn * C + t) * D + d]) * w);
        wout[i] = st<T>(w);
    }
}

} // namespace

extern "C" cudaError_t kn_cu_nll(kiln_dtype dt, const void *x, const void *target, bool t64, const void *weight,
                                 void *loss, void *wout, int64_t N, int64_t C, int64_t D, int64_t ignore,
                                 bool has_ignore, kn_cu_errp err, cudaStream_t s) {
    int64_t n = N * D;
    if (n == 0) return cudaSuccess;
    KNCU_DISPATCH_FLOAT(dt, (k_nll<type_><<<grid_for(n, 256), 256, 0, s>>>((const type_ *)x, target, t64,
                                                                            (const type_ *)weight, (type_ *)loss,
                                                                            (type_ *)wout, C, D, ignore, has_ignore, n, err)));
    return cudaGetLastError();
}

// Data movement kernels: Gather family, Scatter family, Pad, Tile, Range, CumSum/CumProd, Trilu,
// OneHot, EyeLike. Type-agnostic work dispatches on the element size.
#include "backend/cuda/cu_common.cuh"

using namespace kncu;

namespace {

struct Dims {
    int rank;
    int64_t d[KN_CU_MAX_RANK];
};

static Dims make_dims(int rank, const int64_t *d) {
    Dims r;
    r.rank = rank;
    for (int i = 0; i < KN_CU_MAX_RANK; i++) r.d[i] = i < rank ? d[i] : 1;
    return r;
}

__device__ __forceinline__ int64_t load_index(const void *idx, bool idx64, int64_t i) {
    return idx64 ? ((const int64_t *)idx)[i] : (int64_t)((const int32_t *)idx)[i];
}

template <typename E>
__global__ void k_gather(const E *data, const void *idx, bool idx64, E *y, int64_t axis_len, int64_t n_idx,
                         int64_t inner, int64_t n, kn_cu_errp err) {
    KNCU_LOOP(i, n) {
        int64_t in = i % inner, rest = i / inner;
        int64_t j = rest % n_idx, o = rest / n_idx;
        int64_t k = load_index(idx, idx64, j);
        if (k < 0) k += axis_len;
        if (k < 0 || k >= axis_len) {
            report(err, KN_CU_ERR_GATHER, load_index(idx, idx64, j), -axis_len, axis_len, j);
            y[i] = E();
            continue;
        }
        y[i] = data[(o * axis_len + k) * inner + in];
    }
}

// The same with 32-bit index arithmetic, for gathers whose sizes fit (the common case).
template <typename E>
__global__ void k_gather32(const E *data, const void *idx, bool idx64, E *y, int32_t axis_len, int32_t n_idx,
                           int32_t inner, int32_t n, kn_cu_errp err) {
    for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        const int32_t in = i % inner, rest = i / inner;
        const int32_t j = rest % n_idx, o = rest / n_idx;
        int64_t k = load_index(idx, idx64, j);
        if (k < 0) k += axis_len;
        if (k < 0 || k >= axis_len) report(err, KN_CU_ERR_GATHER, load_index(idx, idx64, j), -axis_len, axis_len, j);
        y[i] = k < 0 || k >= axis_len ? E() : data[((int64_t)o * axis_len + k) * inner + in];
    }
}

template <typename E>
__global__ void k_gather_elements(const E *data, const void *idx, bool idx64, E *y, Dims dd, Dims id, int axis,
                                  int64_t n, kn_cu_errp err) {
    KNCU_LOOP(i, n) {
        int64_t rest = i, off = 0, stride = 1;
        for (int d = id.rank - 1; d >= 0; d--) {
            int64_t c = rest % id.d[d];
            rest /= id.d[d];
            if (d == axis) {
                c = load_index(idx, idx64, i);
                if (c < 0) c += dd.d[d];
                if (c < 0 || c >= dd.d[d]) {
                    report(err, KN_CU_ERR_AXIS, load_index(idx, idx64, i), -dd.d[d], dd.d[d], i);
                    c = 0;
                }
            }
            off += c * stride;
            stride *= dd.d[d];
        }
        y[i] = data[off];
    }
}

// Atomic read-modify-write through compare-and-swap on the element's bits.
template <typename T> __device__ T apply_red(int red, T old, T v) {
    typedef typename acc<T>::type A;
    A a = ld(old), b = ld(v);
    switch (red) {
    case 1: return st<T>(a + b);
    case 2: return st<T>(a * b);
    case 3: return st<T>(a > b ? a : b);
    case 4: return st<T>(a < b ? a : b);
    default: return v;
    }
}
template <typename T> __device__ void atomic_red(T *p, T v, int red) {
    if (red == 0) {
        *p = v;
        return;
    }
    if constexpr (sizeof(T) == 4) {
        unsigned int *u = (unsigned int *)p, old = *u, assumed;
        do {
            assumed = old;
            T cur = *(T *)&assumed;
            T nv = apply_red(red, cur, v);
            old = atomicCAS(u, assumed, *(unsigned int *)&nv);
        } while (assumed != old);
    } else if constexpr (sizeof(T) == 8) {
        unsigned long long *u = (unsigned long long *)p, old = *u, assumed;
        do {
            assumed = old;
            T cur = *(T *)&assumed;
            T nv = apply_red(red, cur, v);
            old = atomicCAS(u, assumed, *(unsigned long long *)&nv);
        } while (assumed != old);
    } else {
        *p = apply_red(red, *p, v); // 1- and 2-byte types: not atomic (duplicates race)
    }
}

template <typename T>
__global__ void k_scatter_elements(T *y, const void *idx, bool idx64, const T *upd, Dims yd, Dims id, int axis,
                                   int red, int64_t n, kn_cu_errp err) {
    KNCU_LOOP(i, n) {
        int64_t rest = i, off = 0, stride = 1;
        for (int d = id.rank - 1; d >= 0; d--) {
            int64_t c = rest % id.d[d];
            rest /= id.d[d];
            if (d == axis) {
                c = load_index(idx, idx64, i);
                if (c < 0) c += yd.d[d];
                if (c < 0 || c >= yd.d[d]) {
                    report(err, KN_CU_ERR_AXIS, load_index(idx, idx64, i), -yd.d[d], yd.d[d], i);
                    return;
                }
            }
            off += c * stride;
            stride *= yd.d[d];
        }
        atomic_red(&y[off], upd[i], red);
    }
}

template <typename E>
__global__ void k_gather_nd(const E *data, const int64_t *idx, E *y, int64_t n_per_batch, int k, Dims dd,
                            int batch_dims, int64_t slice, int64_t batch_stride, int64_t n, kn_cu_errp err) {
    KNCU_LOOP(i, n) {
        int64_t in = i % slice, pos = i / slice;
        int64_t b = pos / n_per_batch;
        const int64_t *ix = idx + pos * k;
        int64_t off = 0;
        for (int j = 0; j < k; j++) {
            int64_t dim = dd.d[batch_dims + j];
            int64_t c = ix[j];
            if (c < 0) c += dim;
            if (c < 0 || c >= dim) {
                report(err, KN_CU_ERR_GATHERND, ix[j], -dim, dim, pos * k + j);
                c = 0;
            }
            off = off * dim + c;
        }
        y[i] = data[b * batch_stride + off * slice + in];
    }
}

template <typename T>
__global__ void k_scatter_nd(T *y, const int64_t *idx, const T *upd, int k, Dims yd, int64_t slice, int red,
                             int64_t n, kn_cu_errp err) {
    KNCU_LOOP(i, n) {
        int64_t in = i % slice, pos = i / slice;
        const int64_t *ix = idx + pos * k;
        int64_t off = 0;
        for (int j = 0; j < k; j++) {
            int64_t dim = yd.d[j];
            int64_t c = ix[j];
            if (c < 0) c += dim;
            if (c < 0 || c >= dim) {
                report(err, KN_CU_ERR_SCATTERND, ix[j], -dim, dim, pos * k + j);
                return;
            }
            off = off * dim + c;
        }
        atomic_red(&y[off * slice + in], upd[i], red);
    }
}

__global__ void k_check_range(const void *v, bool v64, int64_t n, int64_t lo, int64_t hi, int code, kn_cu_errp err) {
    KNCU_LOOP(i, n) {
        int64_t x = load_index(v, v64, i);
        if (x < lo || x >= hi) report(err, code, x, lo, hi, i);
    }
}

// Pad's dims as few as they can be (pad_collapse), in index type I: 32-bit division where every
// index fits (a quarter of the 64-bit one's instructions).
template <typename I> struct PadDims {
    int rank;
    I x[KN_CU_MAX_RANK], y[KN_CU_MAX_RANK], b[KN_CU_MAX_RANK];
};

template <typename E, typename I>
__global__ void k_pad(const E *x, E *y, PadDims<I> pd, int mode, E value, I n) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)blockDim.x * gridDim.x) {
        I rest = i, off = 0, stride = 1;
        bool outside = false;
        for (int d = pd.rank - 1; d >= 0; d--) {
            I c = rest % pd.y[d] - pd.b[d];
            rest /= pd.y[d];
            I len = pd.x[d];
            if (c < 0 || c >= len) {
                if (mode == 0 || len == 0) {
                    outside = true;
                } else if (mode == 1) { // reflect (no edge repeat)
                    if (len == 1) c = 0;
                    else {
                        I period = 2 * (len - 1);
                        c = c % period;
                        if (c < 0) c += period;
                        if (c >= len) c = period - c;
                    }
                } else if (mode == 2) { // edge
                    c = c < 0 ? 0 : len - 1;
                } else { // wrap
                    c = c % len;
                    if (c < 0) c += len;
                }
            }
            off += c * stride;
            stride *= len;
        }
        y[i] = outside ? value : x[off];
    }
}

// Merges neighbouring dims, innermost first, where the element order allows: two unpadded dims
// always; with a constant value also an unpadded inner dim into a padded outer one (the padding
// then covers whole inner rows; reflect, edge and wrap index within a dim, so not for them).
// Returns the new rank; c* receive the dims, outermost first.
static int pad_collapse(int rank, const int64_t *xd, const int64_t *yd, const int64_t *pb, bool constant, int64_t *cx,
                        int64_t *cy, int64_t *cb) {
    int64_t rx[KN_CU_MAX_RANK], ry[KN_CU_MAX_RANK], rb[KN_CU_MAX_RANK]; // innermost first
    int r = 0;
    for (int d = rank - 1; d >= 0; d--) {
        bool unpadded = xd[d] == yd[d] && pb[d] == 0;
        bool inner_unpadded = r > 0 && rx[r - 1] == ry[r - 1] && rb[r - 1] == 0;
        if (inner_unpadded && (unpadded || constant)) {
            rx[r - 1] *= xd[d];
            rb[r - 1] = pb[d] * ry[r - 1];
            ry[r - 1] *= yd[d];
        } else {
            rx[r] = xd[d], ry[r] = yd[d], rb[r] = pb[d];
            r++;
        }
    }
    for (int i = 0; i < r; i++) cx[i] = rx[r - 1 - i], cy[i] = ry[r - 1 - i], cb[i] = rb[r - 1 - i];
    return r;
}

template <typename I> static PadDims<I> pad_dims(int rank, const int64_t *x, const int64_t *y, const int64_t *b) {
    PadDims<I> p;
    p.rank = rank;
    for (int i = 0; i < rank; i++) p.x[i] = (I)x[i], p.y[i] = (I)y[i], p.b[i] = (I)b[i];
    return p;
}

template <typename E> __global__ void k_tile(const E *x, E *y, Dims xd, Dims yd, int64_t n) {
    KNCU_LOOP(i, n) {
        int64_t rest = i, off = 0, stride = 1;
        for (int d = yd.rank - 1; d >= 0; d--) {
            int64_t c = (rest % yd.d[d]) % xd.d[d];
            rest /= yd.d[d];
            off += c * stride;
            stride *= xd.d[d];
        }
        y[i] = x[off];
    }
}

template <typename T> __global__ void k_range_f(T *y, double start, double delta, int64_t n) {
    KNCU_LOOP(i, n) y[i] = st<T>((typename acc<T>::type)(start + (double)i * delta));
}
template <typename T> __global__ void k_range_i(T *y, int64_t start, int64_t delta, int64_t n) {
    KNCU_LOOP(i, n) y[i] = (T)(start + i * delta);
}

template <typename T>
__global__ void k_cumulative(const T *x, T *y, int64_t outer, int64_t len, int64_t inner, bool exclusive,
                             bool reverse, bool product) {
    typedef typename acc<T>::type A;
    KNCU_LOOP(line, outer * inner) {
        int64_t o = line / inner, in = line % inner;
        const T *px = x + o * len * inner + in;
        T *py = y + o * len * inner + in;
        A run = product ? (A)1 : (A)0;
        for (int64_t j = 0; j < len; j++) {
            int64_t jj = reverse ? len - 1 - j : j;
            A v = ld(px[jj * inner]);
            if (exclusive) {
                py[jj * inner] = st<T>(run);
                run = product ? run * v : run + v;
            } else {
                run = product ? run * v : run + v;
                py[jj * inner] = st<T>(run);
            }
        }
    }
}

template <typename E>
__global__ void k_trilu(const E *x, E *y, int64_t rows, int64_t cols, int64_t k, bool upper, int64_t n) {
    KNCU_LOOP(i, n) {
        int64_t c = i % cols, r = (i / cols) % rows;
        bool keep = upper ? (c - r >= k) : (c - r <= k);
        y[i] = keep ? x[i] : E();
    }
}

template <typename I, typename E>
__global__ void k_onehot(const I *idx, E off, E on, E *y, int64_t depth, int64_t inner, int64_t n) {
    KNCU_LOOP(i, n) {
        int64_t in = i % inner, d = (i / inner) % depth, o = i / (inner * depth);
        double v = (double)idx[o * inner + in];
        int64_t k = (int64_t)v;
        if (k < 0) k += depth;
        y[i] = k == d ? on : off;
    }
}

template <typename E> __global__ void k_eyelike(E *y, E one, int64_t rows, int64_t cols, int64_t k, int64_t n) {
    KNCU_LOOP(i, n) {
        int64_t c = i % cols, r = i / cols;
        y[i] = c - r == k ? one : E();
    }
}

// data viewed as [d0, d1, inner]; the time axis and the batch axis are dims 0 and 1 (in some order)
template <typename E>
__global__ void k_reverse_sequence(const E *x, E *y, const int64_t *lens, int64_t d0, int64_t d1, int64_t inner,
                                   bool batch_first, int64_t n, kn_cu_errp err) {
    const int64_t T = batch_first ? d1 : d0;
    KNCU_LOOP(i, n) {
        int64_t in = i % inner, a1 = (i / inner) % d1, a0 = i / (inner * d1);
        int64_t b = batch_first ? a0 : a1, t = batch_first ? a1 : a0;
        int64_t len = lens[b];
        if (len < 0 || len > T) { // no reversal (and no read past the time axis)
            if (t == 0 && in == 0) report(err, KN_CU_ERR_SEQLEN, len, 0, T + 1, b);
            len = 0;
        }
        int64_t tt = t < len ? len - 1 - t : t;
        int64_t s0 = batch_first ? a0 : tt, s1 = batch_first ? tt : a1;
        y[i] = x[(s0 * d1 + s1) * inner + in];
    }
}

template <typename T>
__global__ void k_lrn(const T *x, T *y, int64_t C, int64_t inner, int64_t size, float alpha, float beta, float bias,
                      int64_t n) {
    typedef typename acc<T>::type A;
    KNCU_LOOP(i, n) {
        int64_t in = i % inner, c = (i / inner) % C, nn = i / (inner * C);
        int64_t lo = c - (size - 1) / 2, hi = c + size / 2;
        if (lo < 0) lo = 0;
        if (hi > C - 1) hi = C - 1;
        A sq = 0;
        for (int64_t k = lo; k <= hi; k++) {
            A v = ld(x[(nn * C + k) * inner + in]);
            sq += v * v;
        }
        A den = pow((A)bias + (A)alpha / (A)size * sq, (A)beta);
        y[i] = st<T>(ld(x[i]) / den);
    }
}

template <typename E> static E from_bits(uint64_t bits) {
    E e;
    memcpy(&e, &bits, sizeof e);
    return e;
}

// One element (a unit of 1-16 bytes) of the joined tensor per step: its piece found by a walk over
// the ascending offsets (at most KN_CU_MAX_PIECES), then read from or written to it.
template <typename E, typename I> __global__ void k_pieces(E *joined, I row, I n, kn_cu_pieces p, bool split) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)blockDim.x * gridDim.x) {
        const I r = i / row, c = i % row;
        int k = 0;
        while (k + 1 < p.n && c >= (I)p.off[k + 1]) k++;
        E *piece = (E *)p.ptr[k] + (int64_t)r * p.width[k] + (c - (I)p.off[k]);
        if (split) *piece = joined[i];
        else joined[i] = *piece;
    }
}

/* The columns of a 1-D convolution as a matrix: p[n][c][j][o] = x[n][c][o * stride + j * dil - pad],
 * zero outside x; o (the output position) fastest, so writes coalesce and stride-1 reads do too. */
template <typename E>
__global__ void k_im2col_1d(const E *x, E *p, int64_t L, int64_t k, int64_t OL, int64_t stride,
                            int64_t dil, int64_t pad, int64_t n) {
    KNCU_LOOP(i, n) {
        int64_t o = i % OL, r = i / OL, j = r % k, nc = r / k;
        int64_t at = o * stride + j * dil - pad;
        p[i] = at >= 0 && at < L ? x[nc * L + at] : E{};
    }
}

} // namespace

extern "C" {

cudaError_t kn_cu_pieces_copy(size_t esize, void *joined, int64_t outer, int64_t row, const kn_cu_pieces *p, bool split,
                              cudaStream_t s) {
    if (p->n > KN_CU_MAX_PIECES || p->n < 1) return cudaErrorNotSupported;
    if (outer == 0 || row == 0) return cudaSuccess;
    // in the widest unit (up to 16 bytes) that every row, piece and address is a whole number of:
    // a channels-last Concat's pieces are rows of a few dozen bytes
    kn_cu_pieces q = *p;
    size_t unit = esize;
    for (size_t w = 16; w > esize; w /= 2) {
        bool fits = (size_t)row * esize % w == 0 && (uintptr_t)joined % w == 0;
        for (int k = 0; fits && k < p->n; k++)
            fits = (size_t)p->width[k] * esize % w == 0 && (size_t)p->off[k] * esize % w == 0 && (uintptr_t)p->ptr[k] % w == 0;
        if (fits) {
            unit = w;
            break;
        }
    }
    const int64_t per = (int64_t)(unit / esize);
    for (int k = 0; k < q.n; k++) q.width[k] /= per, q.off[k] /= per;
    row /= per;
    const int64_t n = outer * row;
    if (n < INT32_MAX) {
        KNCU_DISPATCH_SIZE(unit, (k_pieces<type_, int32_t><<<grid_for(n, 256), 256, 0, s>>>((type_ *)joined, (int32_t)row,
                                                                                         (int32_t)n, q, split)));
    } else {
        KNCU_DISPATCH_SIZE(unit, (k_pieces<type_, int64_t><<<grid_for(n, 256), 256, 0, s>>>((type_ *)joined, row, n, q,
                                                                                         split)));
    }
    return cudaGetLastError();
}

cudaError_t kn_cu_gather(size_t esize, const void *data, const void *idx, bool idx64, void *y, int64_t outer,
                         int64_t axis_len, int64_t n_idx, int64_t inner, kn_cu_errp err, cudaStream_t s) {
    int64_t n = outer * n_idx * inner;
    if (n == 0) return cudaSuccess;
    /* whole rows of `inner` elements move: in 16-byte words where their size and alignment allow */
    for (size_t w = 16; w > esize; w /= 2)
        if ((size_t)inner * esize % w == 0 && (uintptr_t)data % w == 0 && (uintptr_t)y % w == 0) {
            inner = (int64_t)((size_t)inner * esize / w);
            esize = w;
            n = outer * n_idx * inner;
            break;
        }
    if (n < INT32_MAX && outer * axis_len * inner < INT32_MAX) {
        KNCU_DISPATCH_SIZE(esize, (k_gather32<type_><<<grid_for(n, 256), 256, 0, s>>>(
                                      (const type_ *)data, idx, idx64, (type_ *)y, (int32_t)axis_len, (int32_t)n_idx,
                                      (int32_t)inner, (int32_t)n, err)));
        return cudaGetLastError();
    }
    KNCU_DISPATCH_SIZE(esize, (k_gather<type_><<<grid_for(n, 256), 256, 0, s>>>((const type_ *)data, idx, idx64,
                                                                              (type_ *)y, axis_len, n_idx, inner, n,
                                                                              err)));
    return cudaGetLastError();
}

cudaError_t kn_cu_gather_elements(size_t esize, const void *data, const void *idx, bool idx64, void *y, int rank,
                                  const int64_t *data_dims, const int64_t *idx_dims, int axis, kn_cu_errp err,
                                  cudaStream_t s) {
    Dims dd = make_dims(rank, data_dims), id = make_dims(rank, idx_dims);
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= idx_dims[i];
    if (n == 0) return cudaSuccess;
    KNCU_DISPATCH_SIZE(esize, (k_gather_elements<type_><<<grid_for(n, 256), 256, 0, s>>>(
                                  (const type_ *)data, idx, idx64, (type_ *)y, dd, id, axis, n, err)));
    return cudaGetLastError();
}

cudaError_t kn_cu_scatter_elements(kiln_dtype dt, void *y, const void *idx, bool idx64, const void *upd, int rank,
                                   const int64_t *y_dims, const int64_t *idx_dims, int axis, int reduction,
                                   kn_cu_errp err, cudaStream_t s) {
    Dims yd = make_dims(rank, y_dims), id = make_dims(rank, idx_dims);
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= idx_dims[i];
    if (n == 0) return cudaSuccess;
    if (dt == KILN_DTYPE_BOOL) dt = KILN_DTYPE_UINT8;
    KNCU_DISPATCH_NUM(dt, (k_scatter_elements<type_><<<grid_for(n, 256), 256, 0, s>>>(
                              (type_ *)y, idx, idx64, (const type_ *)upd, yd, id, axis, reduction, n, err)));
    return cudaGetLastError();
}

cudaError_t kn_cu_gather_nd(size_t esize, const void *data, const void *idx, void *y, int64_t batch,
                            int64_t n_per_batch, int k, const int64_t *data_dims, int data_rank, int batch_dims,
                            int64_t slice, kn_cu_errp err, cudaStream_t s) {
    Dims dd = make_dims(data_rank, data_dims);
    int64_t batch_stride = 1;
    for (int i = batch_dims; i < data_rank; i++) batch_stride *= data_dims[i];
    int64_t n = batch * n_per_batch * slice;
    if (n == 0) return cudaSuccess;
    KNCU_DISPATCH_SIZE(esize, (k_gather_nd<type_><<<grid_for(n, 256), 256, 0, s>>>(
                                  (const type_ *)data, (const int64_t *)idx, (type_ *)y, n_per_batch, k, dd,
                                  batch_dims, slice, batch_stride, n, err)));
    return cudaGetLastError();
}

cudaError_t kn_cu_scatter_nd(kiln_dtype dt, void *y, const void *idx, const void *upd, int64_t n_upd, int k,
                             const int64_t *y_dims, int y_rank, int64_t slice, int reduction, kn_cu_errp err,
                             cudaStream_t s) {
    Dims yd = make_dims(y_rank, y_dims);
    int64_t n = n_upd * slice;
    if (n == 0) return cudaSuccess;
    if (dt == KILN_DTYPE_BOOL) dt = KILN_DTYPE_UINT8;
    KNCU_DISPATCH_NUM(dt, (k_scatter_nd<type_><<<grid_for(n, 256), 256, 0, s>>>(
                              (type_ *)y, (const int64_t *)idx, (const type_ *)upd, k, yd, slice, reduction, n, err)));
    return cudaGetLastError();
}

cudaError_t kn_cu_pad(size_t esize, const void *x, void *y, int rank, const int64_t *x_dims, const int64_t *y_dims,
                      const int64_t *pads_begin, int mode, const void *value, cudaStream_t s) {
    int64_t n = 1, nx = 1;
    for (int i = 0; i < rank; i++) n *= y_dims[i], nx *= x_dims[i];
    if (n == 0) return cudaSuccess;
    int64_t cx[KN_CU_MAX_RANK], cy[KN_CU_MAX_RANK], cb[KN_CU_MAX_RANK];
    int r = pad_collapse(rank, x_dims, y_dims, pads_begin, mode == 0, cx, cy, cb);
    /* below 2^30 elements: the grid-stride step (at most 2^29 threads, grid_for) cannot carry an
     * index past INT32_MAX */
    bool small = n < (1LL << 30) && nx < (1LL << 30);
    for (int i = 0; i < r; i++) small = small && cb[i] > INT32_MIN / 2 && cb[i] < INT32_MAX / 2;
    if (small) {
        PadDims<int32_t> pd = pad_dims<int32_t>(r, cx, cy, cb);
        KNCU_DISPATCH_SIZE(esize, (k_pad<type_, int32_t><<<grid_for(n, 256), 256, 0, s>>>(
                                      (const type_ *)x, (type_ *)y, pd, mode, *(const type_ *)value, (int32_t)n)));
    } else {
        PadDims<int64_t> pd = pad_dims<int64_t>(r, cx, cy, cb);
        KNCU_DISPATCH_SIZE(esize, (k_pad<type_, int64_t><<<grid_for(n, 256), 256, 0, s>>>(
                                      (const type_ *)x, (type_ *)y, pd, mode, *(const type_ *)value, n)));
    }
    return cudaGetLastError();
}

cudaError_t kn_cu_im2col_1d(size_t esize, const void *x, void *p, int64_t N, int64_t C, int64_t L, int64_t k,
                            int64_t OL, int64_t stride, int64_t dil, int64_t pad, cudaStream_t s) {
    int64_t n = N * C * k * OL;
    if (n == 0) return cudaSuccess;
    KNCU_DISPATCH_SIZE(esize, (k_im2col_1d<type_><<<grid_for(n, 256), 256, 0, s>>>((const type_ *)x, (type_ *)p, L, k,
                                                                                   OL, stride, dil, pad, n)));
    return cudaGetLastError();
}

cudaError_t kn_cu_tile(size_t esize, const void *x, void *y, int rank, const int64_t *x_dims, const int64_t *y_dims,
                       cudaStream_t s) {
    Dims xd = make_dims(rank, x_dims), yd = make_dims(rank, y_dims);
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= y_dims[i];
    if (n == 0) return cudaSuccess;
    KNCU_DISPATCH_SIZE(esize, (k_tile<type_><<<grid_for(n, 256), 256, 0, s>>>((const type_ *)x, (type_ *)y, xd, yd, n)));
    return cudaGetLastError();
}

cudaError_t kn_cu_range(kiln_dtype dt, double start, double delta, int64_t istart, int64_t idelta, void *y, int64_t n,
                        cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    unsigned g = grid_for(n, 256);
    switch (dt) {
    case KILN_DTYPE_FLOAT:
    case KILN_DTYPE_DOUBLE:
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16:
        KNCU_DISPATCH_FLOAT(dt, (k_range_f<type_><<<g, 256, 0, s>>>((type_ *)y, start, delta, n)));
        break;
    default:
        KNCU_DISPATCH_INT(dt, (k_range_i<type_><<<g, 256, 0, s>>>((type_ *)y, istart, idelta, n)));
    }
    return cudaGetLastError();
}

cudaError_t kn_cu_cumulative(kiln_dtype dt, const void *x, void *y, int64_t outer, int64_t len, int64_t inner,
                             bool exclusive, bool reverse, bool product, cudaStream_t s) {
    int64_t lines = outer * inner;
    if (lines == 0 || len == 0) return cudaSuccess;
    KNCU_DISPATCH_NUM(dt, (k_cumulative<type_><<<grid_for(lines, 128), 128, 0, s>>>(
                              (const type_ *)x, (type_ *)y, outer, len, inner, exclusive, reverse, product)));
    return cudaGetLastError();
}

cudaError_t kn_cu_trilu(size_t esize, const void *x, void *y, int64_t batch, int64_t rows, int64_t cols, int64_t k,
                        bool upper, cudaStream_t s) {
    int64_t n = batch * rows * cols;
    if (n == 0) return cudaSuccess;
    KNCU_DISPATCH_SIZE(esize, (k_trilu<type_><<<grid_for(n, 256), 256, 0, s>>>((const type_ *)x, (type_ *)y, rows,
                                                                                 cols, k, upper, n)));
    return cudaGetLastError();
}

cudaError_t kn_cu_onehot(kiln_dtype idx_dt, size_t esize, const void *idx, uint64_t off_bits, uint64_t on_bits,
                         void *y, int64_t outer, int64_t depth, int64_t inner, cudaStream_t s) {
    int64_t n = outer * depth * inner;
    if (n == 0) return cudaSuccess;
    if (esize > 8) return cudaErrorNotSupported;
    unsigned g = grid_for(n, 256);
#define KNCU_ONEHOT(I)                                                                             \
    KNCU_DISPATCH_SIZE(esize, (k_onehot<I, type_><<<g, 256, 0, s>>>((const I *)idx, from_bits<type_>(off_bits), \
                                                                    from_bits<type_>(on_bits), (type_ *)y,      \
                                                                    depth, inner, n)))
    switch (idx_dt) {
    case KILN_DTYPE_INT64: KNCU_ONEHOT(int64_t); break;
    case KILN_DTYPE_INT32: KNCU_ONEHOT(int32_t); break;
    case KILN_DTYPE_FLOAT: KNCU_ONEHOT(float); break;
    case KILN_DTYPE_DOUBLE: KNCU_ONEHOT(double); break;
    default: return cudaErrorNotSupported;
    }
#undef KNCU_ONEHOT
    return cudaGetLastError();
}

cudaError_t kn_cu_eyelike(size_t esize, uint64_t one_bits, void *y, int64_t rows, int64_t cols, int64_t k,
                          cudaStream_t s) {
    int64_t n = rows * cols;
    if (n == 0) return cudaSuccess;
    if (esize > 8) return cudaErrorNotSupported;
    KNCU_DISPATCH_SIZE(esize, (k_eyelike<type_><<<grid_for(n, 256), 256, 0, s>>>((type_ *)y, from_bits<type_>(one_bits),
                                                                                   rows, cols, k, n)));
    return cudaGetLastError();
}

cudaError_t kn_cu_check_range(const void *v, bool v64, int64_t n, int64_t lo, int64_t hi, int code, kn_cu_errp err,
                              cudaStream_t s) {
    if (n <= 0 || !err.rec) return cudaSuccess;
    k_check_range<<<grid_for(n, 256), 256, 0, s>>>(v, v64, n, lo, hi, code, err);
    return cudaGetLastError();
}

cudaError_t kn_cu_reverse_sequence(size_t esize, const void *x, void *y, const int64_t *lens, int64_t d0, int64_t d1,
                                   int64_t inner, bool batch_first, kn_cu_errp err, cudaStream_t s) {
    int64_t n = d0 * d1 * inner;
    if (n == 0) return cudaSuccess;
    KNCU_DISPATCH_SIZE(esize, (k_reverse_sequence<type_><<<grid_for(n, 256), 256, 0, s>>>(
                                  (const type_ *)x, (type_ *)y, lens, d0, d1, inner, batch_first, n, err)));
    return cudaGetLastError();
}

cudaError_t kn_cu_lrn(kiln_dtype dt, const void *x, void *y, int64_t N, int64_t C, int64_t inner, int64_t size,
                      float alpha, float beta, float bias, cudaStream_t s) {
    int64_t n = N * C * inner;
    if (n == 0) return cudaSuccess;
    KNCU_DISPATCH_FLOAT(dt, (k_lrn<type_><<<grid_for(n, 256), 256, 0, s>>>((const type_ *)x, (type_ *)y, C, inner, size,
                                                                            alpha, beta, bias, n)));
    return cudaGetLastError();
}

} // extern "C"

// A kernel of this file, whose first load loads the file's module (kn_cu_preload_modules).
extern "C" const void *kn_cu_module_data(void) { return (const void *)k_gather<uint32_t>; }

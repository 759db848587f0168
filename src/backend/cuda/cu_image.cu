// Image kernels: Resize/Upsample (nearest as one gather over all axes; linear and cubic as one
// separable pass per resized axis) and GridSample.
//
// The CPU kernels (src/backend/cpu/image_resize.c, image_sample.c) are the reference; each thread
// recomputes its source coordinate and taps in double exactly as they do, so no tap tables move
// between host and device. Where a product feeds a sum in a coordinate, __dmul_rn keeps the
// compiler from fusing it into an FMA: a fused rounding could move a nearest-mode tie.
#include "backend/cuda/cu_common.cuh"


using namespace kncu;

namespace {

// The kn_resize_coord / kn_resize_nearest numbering of src/ops/image.h.
enum { C_HALF_PIXEL, C_HALF_PIXEL_SYMMETRIC, C_PYTORCH_HALF_PIXEL, C_ALIGN_CORNERS, C_ASYMMETRIC,
       C_TF_HALF_PIXEL_FOR_NN, C_TF_CROP_AND_RESIZE };
enum { N_ROUND_PREFER_FLOOR, N_ROUND_PREFER_CEIL, N_FLOOR, N_CEIL, N_SIMPLE };
enum { M_NEAREST, M_LINEAR, M_CUBIC };

__device__ double source_coord(const kn_cu_resize &p, int a, int64_t y, bool *extrap) {
    double in = (double)p.in_dims[a], s = p.scale[a], ow = __dmul_rn(s, in), yd = (double)y;
    *extrap = false;
    switch (p.coord) {
    case C_ALIGN_CORNERS: return ow == 1 ? 0.0 : __dmul_rn(yd, in - 1) / (ow - 1);
    case C_ASYMMETRIC: return yd / s;
    case C_TF_HALF_PIXEL_FOR_NN: return (yd + 0.5) / s;
    case C_PYTORCH_HALF_PIXEL: return ow == 1 ? -0.5 : (yd + 0.5) / s - 0.5;
    case C_HALF_PIXEL_SYMMETRIC: {
        double adjustment = (double)p.out_dims[a] / ow, center = in / 2;
        return __dadd_rn(__dmul_rn(center, 1 - adjustment), (yd + 0.5) / s) - 0.5;
    }
    case C_TF_CROP_AND_RESIZE: {
        double r0 = p.roi_start[a], r1 = p.roi_end[a], x;
        if (ow == 1) x = __dmul_rn(r1 - r0, in - 1) / 2;
        else x = __dmul_rn(__dmul_rn(yd, r1 - r0), in - 1) / (ow - 1);
        x = __dadd_rn(x, __dmul_rn(r0, in - 1));
        *extrap = x < 0 || x > in - 1;
        return x;
    }
    case C_HALF_PIXEL:
    default: return (yd + 0.5) / s - 0.5;
    }
}

__device__ int64_t nearest_index(const kn_cu_resize &p, int a, double x) {
    double fl = floor(x), frac = x - fl;
    int64_t ifl = (int64_t)fl, idx;
    if (frac == 0) idx = ifl;
    else switch (p.nearest) {
        case N_ROUND_PREFER_FLOOR: idx = frac <= 0.5 ? ifl : ifl + 1; break;
        case N_ROUND_PREFER_CEIL: idx = frac < 0.5 ? ifl : ifl + 1; break;
        case N_FLOOR: idx = ifl; break;
        case N_CEIL: idx = ifl + 1; break;
        case N_SIMPLE:
        default: idx = p.scale[a] < 1 ? ifl + 1 : (int64_t)trunc(x); break;
        }
    int64_t last = p.in_dims[a] - 1;
    return idx < 0 ? 0 : idx > last ? last : idx;
}

template <typename E> __global__ void k_resize_nearest(kn_cu_resize p, const E *x, E *y, E ev, int64_t n) {
    KNCU_LOOP(i, n) {
        int64_t r = i, off = 0, stride = 1;
        bool ex = false;
        for (int a = p.rank - 1; a >= 0; a--) {
            int64_t o = r % p.out_dims[a];
            r /= p.out_dims[a];
            bool e;
            double xc = source_coord(p, a, o, &e);
            ex |= e;
            off += nearest_index(p, a, xc) * stride;
            stride *= p.in_dims[a];
        }
        y[i] = ex ? ev : x[off];
    }
}

__device__ double cubic_kernel(double x, double A) {
    x = fabs(x);
    if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0;
}

// Taps per output and the first tap's offset in the antialiased kernels (the CPU's tap_count).
__device__ int tap_count(const kn_cu_resize &p, double s, int *first) {
    *first = 0;
    double ss = s < 1 ? s : 1;
    if (p.mode == M_LINEAR) {
        if (!p.antialias) return 2;
        *first = (int)floor(-1 / ss) + 1;
    } else {
        if (!p.antialias) return 4;
        *first = (int)floor(-2 / ss) + 1;
    }
    return 2 - 2 * *first;
}

// Unnormalised antialiased kernel value of tap k.
__device__ double aa_value(const kn_cu_resize &p, double ss, int first, int k, double r) {
    double d = ((double)(first + k) - r) * ss;
    return p.mode == M_LINEAR ? fmin(fmax(1 - fabs(d), 0.0), 1.0) : cubic_kernel(d, p.cubic_a);
}

// Result stores: floats through the type's rounding, integers rounded half to even and saturated
// (NaN to 0), as the CPU's kn_cpu_image_store.
template <typename D, typename W> __device__ __forceinline__ D store_val(W v) {
    if constexpr (is_fp<D>::value) {
        return st<D>(v);
    } else {
        double r = rint((double)v);
        if (r != r) r = 0;
        const int bits = 8 * (int)sizeof(D);
        const D dmax = std::is_signed<D>::value ? (D)((((uint64_t)1) << (bits - 1)) - 1) : (D)~(D)0;
        const D dmin = std::is_signed<D>::value ? (D)(-(int64_t)dmax - 1) : (D)0;
        const double lo = (double)dmin, hi = (double)dmax;
        return r <= lo ? dmin : r >= hi ? dmax : (D)r;
    }
}

template <typename S, typename D, typename W>
__global__ void k_resize_pass(kn_cu_resize p, int a, const S *src, D *dst, int64_t inner, int64_t n) {
    const int64_t in = p.in_dims[a], out = p.out_dims[a], last = in - 1;
    const double s = p.scale[a];
    KNCU_LOOP(i, n) {
        int64_t k = i % inner, rest = i / inner, y = rest % out, o = rest / out;
        bool ex;
        double x = source_coord(p, a, y, &ex);
        if (ex) {
            dst[i] = store_val<D, W>((W)p.extrapolation);
            continue;
        }
        double fl = floor(x), frac = x - fl;
        int64_t ifl = (int64_t)fl;
        int first;
        int nt = tap_count(p, s, &first);
        double r = frac == 0 ? 1.0 : frac;
        int64_t start = frac == 0 ? ifl - nt / 2 : ifl - nt / 2 + 1;
        const S *base = src + o * in * inner + k;
        W acc = 0;
        if (!p.antialias) {
            double w[4];
            if (p.mode == M_LINEAR) {
                w[0] = 1 - r;
                w[1] = r;
            } else {
                double A = p.cubic_a;
                w[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
                w[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
                w[2] = ((A + 2) * (1 - r) - (A + 3)) * (1 - r) * (1 - r) + 1;
                w[3] = ((A * ((1 - r) + 1) - 5 * A) * ((1 - r) + 1) + 8 * A) * ((1 - r) + 1) - 4 * A;
            }
            if (p.exclude_outside) {
                double sum = 0;
                for (int t = 0; t < nt; t++) {
                    int64_t j = start + t;
                    if (j < 0 || j > last) w[t] = 0;
                    sum += w[t];
                }
                if (sum != 0)
                    for (int t = 0; t < nt; t++) w[t] /= sum;
            }
            for (int t = 0; t < nt; t++) {
                W wt = (W)w[t];
                if (wt == (W)0) continue;
                int64_t j = start + t;
                j = j < 0 ? 0 : j > last ? last : j;
                acc += wt * (W)ld(base[j * inner]);
            }
        } else {
            // weights normalised to sum 1, then (exclude_outside) renormalised over the taps
            // inside the input: the CPU's order of operations, recomputed per tap
            double ss = s < 1 ? s : 1, sum = 0, sum_in = 1;
            for (int t = 0; t < nt; t++) sum += aa_value(p, ss, first, t, r);
            if (p.exclude_outside) {
                sum_in = 0;
                for (int t = 0; t < nt; t++) {
                    int64_t j = start + t;
                    if (j >= 0 && j <= last) sum_in += aa_value(p, ss, first, t, r) / sum;
                }
                if (sum_in == 0) sum_in = 1;
            }
            for (int t = 0; t < nt; t++) {
                int64_t j = start + t;
                if (p.exclude_outside && (j < 0 || j > last)) continue;
                double wd = aa_value(p, ss, first, t, r) / sum;
                if (p.exclude_outside) wd /= sum_in;
                W wt = (W)wd;
                if (wt == (W)0) continue;
                j = j < 0 ? 0 : j > last ? last : j;
                acc += wt * (W)ld(base[j * inner]);
            }
        }
        dst[i] = store_val<D, W>(acc);
    }
}

template <typename S, typename D, typename W>
cudaError_t launch_pass(const kn_cu_resize &p, int axis, const void *src, void *dst, int64_t outer, int64_t inner,
                        cudaStream_t s) {
    int64_t n = outer * p.out_dims[axis] * inner;
    if (n == 0) return cudaSuccess;
    k_resize_pass<S, D, W><<<grid_for(n, 256), 256, 0, s>>>(p, axis, (const S *)src, (D *)dst, inner, n);
    return cudaGetLastError();
}

// Data types worked in float and in double.
#define KNCU_DISPATCH_NARROW(dt, CALL)                                                             \
    switch (dt) {                                                                                  \
        KNCU_CASE(KILN_DTYPE_FLOAT, float, CALL)                                                   \
        KNCU_CASE(KILN_DTYPE_FLOAT16, kncu::f16, CALL)                                             \
        KNCU_CASE(KILN_DTYPE_BFLOAT16, kncu::bf16, CALL)                                           \
    default: return cudaErrorNotSupported;                                                         \
    }
#define KNCU_DISPATCH_WIDE(dt, CALL)                                                               \
    switch (dt) {                                                                                  \
        KNCU_CASE(KILN_DTYPE_DOUBLE, double, CALL)                                                 \
        KNCU_INT_CASES(CALL)                                                                       \
    default: return cudaErrorNotSupported;                                                         \
    }

template <typename W>
cudaError_t pass_in(kiln_dtype src_dt, kiln_dtype dst_dt, kiln_dtype w_dt, const kn_cu_resize &p, int axis,
                    const void *src, void *dst, int64_t outer, int64_t inner, cudaStream_t s);

template <>
cudaError_t pass_in<float>(kiln_dtype src_dt, kiln_dtype dst_dt, kiln_dtype w_dt, const kn_cu_resize &p, int axis,
                           const void *src, void *dst, int64_t outer, int64_t inner, cudaStream_t s) {
    if (src_dt == dst_dt) {
        KNCU_DISPATCH_NARROW(src_dt, return (launch_pass<type_, type_, float>(p, axis, src, dst, outer, inner, s)));
    } else if (dst_dt == w_dt) {
        KNCU_DISPATCH_NARROW(src_dt, return (launch_pass<type_, float, float>(p, axis, src, dst, outer, inner, s)));
    } else if (src_dt == w_dt) {
        KNCU_DISPATCH_NARROW(dst_dt, return (launch_pass<float, type_, float>(p, axis, src, dst, outer, inner, s)));
    }
    return cudaErrorNotSupported;
}

template <>
cudaError_t pass_in<double>(kiln_dtype src_dt, kiln_dtype dst_dt, kiln_dtype w_dt, const kn_cu_resize &p, int axis,
                            const void *src, void *dst, int64_t outer, int64_t inner, cudaStream_t s) {
    if (src_dt == dst_dt) {
        KNCU_DISPATCH_WIDE(src_dt, return (launch_pass<type_, type_, double>(p, axis, src, dst, outer, inner, s)));
    } else if (dst_dt == w_dt) {
        KNCU_DISPATCH_WIDE(src_dt, return (launch_pass<type_, double, double>(p, axis, src, dst, outer, inner, s)));
    } else if (src_dt == w_dt) {
        KNCU_DISPATCH_WIDE(dst_dt, return (launch_pass<double, type_, double>(p, axis, src, dst, outer, inner, s)));
    }
    return cudaErrorNotSupported;
}

// ---------------------------------------------------------------- GridSample

enum { GS_NEAREST, GS_LINEAR, GS_CUBIC };
enum { PAD_ZEROS, PAD_BORDER, PAD_REFLECTION };

__device__ double gs_reflect(double x, double lo, double hi) {
    double rng = hi - lo;
    if (!(rng > 0)) return lo;
    if (x < lo) {
        double dx = lo - x;
        int64_t n = (int64_t)(dx / rng);
        double r = dx - __dmul_rn((double)n, rng);
        return n % 2 == 0 ? lo + r : hi - r;
    }
    if (x > hi) {
        double dx = x - hi;
        int64_t n = (int64_t)(dx / rng);
        double r = dx - __dmul_rn((double)n, rng);
        return n % 2 == 0 ? hi - r : lo + r;
    }
    return x;
}

__device__ void gs_cubic_coeffs(double t, double *w) {
    const double A = -0.75;
    t = fabs(t);
    w[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
    w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    w[2] = ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1;
    w[3] = ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A;
}

// Element index along one axis after padding, or -1 for a zero (padding_mode zeros).
__device__ int64_t gs_index(int pad, int64_t i, int64_t d, double lo, double hi) {
    if (i >= 0 && i < d) return i;
    if (pad == PAD_ZEROS) return -1;
    if (pad == PAD_BORDER) return i < 0 ? 0 : d - 1;
    int64_t j = (int64_t)gs_reflect((double)i, lo, hi);
    return j < 0 ? 0 : j >= d ? d - 1 : j;
}

// One thread per output element (n, c, point); accumulation in double as the CPU.
template <typename T, typename G>
__global__ void k_gridsample(kn_cu_gridsample p, const T *x, const G *grid, T *y, int64_t total) {
    KNCU_LOOP(i, total) {
        int64_t pnt = i % p.out_count, nc = i / p.out_count, n = nc / p.c;
        const int r = p.r;
        int64_t idx[3][4];
        double w[3][4];
        const int nt = p.mode == GS_NEAREST ? 1 : p.mode == GS_LINEAR ? 2 : 4;
        const int64_t goff = (n * p.out_count + pnt) * r;
        for (int a = 0; a < r; a++) {
            int64_t d = p.in_sp[a];
            double nv = (double)ld(grid[goff + (r - 1 - a)]); // the grid lists x (last axis) first
            double lo = p.align ? 0.0 : -0.5, hi = p.align ? (double)d - 1 : (double)d - 0.5;
            double xx = (float)(p.align ? (nv + 1) / 2.0 * (double)(d - 1)
                                        : (__dmul_rn(nv + 1, (double)d) - 1) / 2.0);
            if (p.mode == GS_NEAREST) xx = rint(xx);
            if ((xx < lo || xx > hi) && !(p.mode == GS_CUBIC && p.pad == PAD_BORDER)) {
                if (p.pad == PAD_BORDER) xx = xx < 0 ? 0 : xx > (double)(d - 1) ? (double)(d - 1) : xx;
                else if (p.pad == PAD_REFLECTION) xx = gs_reflect(xx, lo, hi);
            }
            if (p.mode == GS_NEAREST) {
                idx[a][0] = gs_index(p.pad, (int64_t)xx, d, lo, hi);
                w[a][0] = 1;
            } else if (p.mode == GS_LINEAR) {
                double x0 = floor(xx), t = xx - x0;
                idx[a][0] = gs_index(p.pad, (int64_t)x0, d, lo, hi);
                idx[a][1] = gs_index(p.pad, (int64_t)x0 + 1, d, lo, hi);
                w[a][0] = 1 - t;
                w[a][1] = t;
            } else {
                double x0 = floor(xx);
                gs_cubic_coeffs(xx - x0, w[a]);
                for (int k = 0; k < 4; k++) idx[a][k] = gs_index(p.pad, (int64_t)x0 - 1 + k, d, lo, hi);
            }
        }
        int combos = 1;
        for (int a = 0; a < r; a++) combos *= nt;
        const T *xb = x + nc * p.in_count;
        double acc = 0;
        for (int cmb = 0; cmb < combos; cmb++) {
            int rem = cmb;
            double wt = 1;
            int64_t off = 0, stride = 1;
            bool zero = false;
            for (int a = r - 1; a >= 0; a--) {
                int k = rem % nt;
                rem /= nt;
                if (idx[a][k] < 0) zero = true;
                off += idx[a][k] * stride;
                stride *= p.in_sp[a];
                wt *= w[a][k];
            }
            if (zero || wt == 0) continue;
            acc += wt * (double)ld(xb[off]);
        }
        y[i] = store_val<T, double>(acc);
    }
}

template <typename T>
cudaError_t gridsample_t(kiln_dtype g_dt, const kn_cu_gridsample &p, const void *x, const void *grid, void *y,
                         int64_t total, cudaStream_t s) {
    KNCU_DISPATCH_FLOAT(g_dt, (k_gridsample<T, type_><<<grid_for(total, 128), 128, 0, s>>>(
                                  p, (const T *)x, (const type_ *)grid, (T *)y, total)));
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t kn_cu_resize_nearest(size_t esize, const kn_cu_resize *p, const void *x, void *y,
                                            const void *extrap, cudaStream_t s) {
    int64_t n = 1;
    for (int a = 0; a < p->rank; a++) n *= p->out_dims[a];
    if (n == 0) return cudaSuccess;
    KNCU_DISPATCH_SIZE(esize, (k_resize_nearest<type_><<<grid_for(n, 256), 256, 0, s>>>(
                                  *p, (const type_ *)x, (type_ *)y, *(const type_ *)extrap, n)));
    return cudaGetLastError();
}

extern "C" cudaError_t kn_cu_resize_pass(kiln_dtype src_dt, kiln_dtype dst_dt, bool wide, const kn_cu_resize *p,
                                         int axis, const void *src, void *dst, int64_t outer, int64_t inner,
                                         cudaStream_t s) {
    if (axis < 0 || axis >= p->rank) return cudaErrorInvalidValue;
    if (wide) return pass_in<double>(src_dt, dst_dt, KILN_DTYPE_DOUBLE, *p, axis, src, dst, outer, inner, s);
    return pass_in<float>(src_dt, dst_dt, KILN_DTYPE_FLOAT, *p, axis, src, dst, outer, inner, s);
}

extern "C" cudaError_t kn_cu_gridsample_run(kiln_dtype x_dt, kiln_dtype g_dt, const kn_cu_gridsample *p,
                                            const void *x, const void *grid, void *y, cudaStream_t s) {
    if (p->r < 1 || p->r > 3) return cudaErrorNotSupported;
    int64_t total = p->n * p->c * p->out_count;
    if (total == 0) return cudaSuccess;
    KNCU_DISPATCH_NUM(x_dt, return gridsample_t<type_>(g_dt, *p, x, grid, y, total, s));
    return cudaErrorNotSupported;
}

/* GridSample, AffineGrid, RoiAlign and MaxRoiPool on the CPU. */
#include "backend/cpu/image_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The input's elements as float (float inputs as they are) or double (others, converted). */
typedef struct any_data {
    const float *f;
    const double *d;
    double *owned;
} any_data;

static kiln_status any_data_get(const kn_tensor *t, any_data *a) {
    memset(a, 0, sizeof *a);
    if (t->dtype == KILN_DTYPE_FLOAT) {
        a->f = t->data;
        return KILN_OK;
    }
    if (t->dtype == KILN_DTYPE_DOUBLE) {
        a->d = t->data;
        return KILN_OK;
    }
    int64_t n = kn_tensor_count(t);
    a->owned = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!a->owned) return KN_OOM();
    for (int64_t i = 0; i < n; i++) a->owned[i] = kn_tensor_get_f64(t, i);
    a->d = a->owned;
    return KILN_OK;
}

static inline double any_at(const any_data *a, int64_t i) { return a->f ? (double)a->f[i] : a->d[i]; }

/* ------------------------------------------------------------------ GridSample */

enum { GS_NEAREST, GS_LINEAR, GS_CUBIC };
enum { PAD_ZEROS, PAD_BORDER, PAD_REFLECTION };

/* Reflects x into [lo, hi] by folding at the borders (PyTorch's and the reference's rule). */
static double gs_reflect(double x, double lo, double hi) {
    double rng = hi - lo;
    if (!(rng > 0)) return lo;
    if (x < lo) {
        double dx = lo - x;
        int64_t n = (int64_t)(dx / rng);
        double r = dx - (double)n * rng;
        return n % 2 == 0 ? lo + r : hi - r;
    }
    if (x > hi) {
        double dx = x - hi;
        int64_t n = (int64_t)(dx / rng);
        double r = dx - (double)n * rng;
        return n % 2 == 0 ? hi - r : lo + r;
    }
    return x;
}

static void gs_cubic_coeffs(double t, double *w) {
    const double A = -0.75;
    t = fabs(t);
    w[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
    w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    w[2] = ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1;
    w[3] = ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A;
}

typedef struct gs_args {
    any_data x;
    any_data g;
    kn_tensor *y;
    int r;                     /* spatial dims */
    int64_t n, ch;             /* batch, channels */
    int64_t in_sp[KILN_MAX_RANK], in_stride[KILN_MAX_RANK], in_count; /* X's spatial dims */
    int64_t out_count;         /* output points per (n, c) */
    int mode, pad, align;
} gs_args;

/* Element index along one axis after padding, or -1 for a zero (padding_mode zeros). */
static int64_t gs_index(const gs_args *a, int64_t i, int64_t d, double lo, double hi) {
    if (i >= 0 && i < d) return i;
    if (a->pad == PAD_ZEROS) return -1;
    if (a->pad == PAD_BORDER) return i < 0 ? 0 : d - 1;
    int64_t j = (int64_t)gs_reflect((double)i, lo, hi);
    return j < 0 ? 0 : j >= d ? d - 1 : j;
}

static void gs_rows(void *arg, int64_t begin, int64_t end) {
    const gs_args *a = arg;
    int r = a->r;
    for (int64_t q = begin; q < end; q++) {
        int64_t n = q / a->out_count, pnt = q % a->out_count;
        /* per spatial axis: up to 4 taps (index, weight) */
        int64_t idx[KILN_MAX_RANK][4];
        double w[KILN_MAX_RANK][4];
        int nt = a->mode == GS_NEAREST ? 1 : a->mode == GS_LINEAR ? 2 : 4;
        const int64_t goff = q * r;
        for (int i = 0; i < r; i++) {
            int64_t d = a->in_sp[i];
            double nv = any_at(&a->g, goff + (r - 1 - i)); /* the grid lists x (last axis) first */
            double lo = a->align ? 0.0 : -0.5, hi = a->align ? (double)d - 1 : (double)d - 0.5;
            /* denormalised in float, as the reference */
            double x = (float)(a->align ? (nv + 1) / 2.0 * (double)(d - 1) : ((nv + 1) * (double)d - 1) / 2.0);
            if (a->mode == GS_NEAREST) x = nearbyint(x);
            /* out-of-range coordinates move inside first, except cubic with border padding, where
             * (as PyTorch and ONNX Runtime do) only the taps are clamped, so the weights still see
             * how far outside the point is */
            if ((x < lo || x > hi) && !(a->mode == GS_CUBIC && a->pad == PAD_BORDER)) {
                if (a->pad == PAD_BORDER) x = x < 0 ? 0 : x > (double)(d - 1) ? (double)(d - 1) : x;
                else if (a->pad == PAD_REFLECTION) x = gs_reflect(x, lo, hi);
            }
            if (a->mode == GS_NEAREST) {
                idx[i][0] = gs_index(a, (int64_t)x, d, lo, hi);
                w[i][0] = 1;
            } else if (a->mode == GS_LINEAR) {
                double x0 = floor(x), t = x - x0;
                idx[i][0] = gs_index(a, (int64_t)x0, d, lo, hi);
                idx[i][1] = gs_index(a, (int64_t)x0 + 1, d, lo, hi);
                w[i][0] = 1 - t;
                w[i][1] = t;
            } else {
                double x0 = floor(x);
                gs_cubic_coeffs(x - x0, w[i]);
                for (int k = 0; k < 4; k++) idx[i][k] = gs_index(a, (int64_t)x0 - 1 + k, d, lo, hi);
            }
        }
        /* the taps' combined offsets and weights */
        int combos = 1;
        for (int i = 0; i < r; i++) combos *= nt;
        for (int64_t ch = 0; ch < a->ch; ch++) {
            int64_t xbase = (n * a->ch + ch) * a->in_count;
            double acc = 0;
            for (int cmb = 0; cmb < combos; cmb++) {
                int rem = cmb;
                double wt = 1;
                int64_t off = 0;
                bool zero = false;
                for (int i = r - 1; i >= 0; i--) {
                    int k = rem % nt;
                    rem /= nt;
                    if (idx[i][k] < 0) zero = true;
                    off += idx[i][k] * a->in_stride[i];
                    wt *= w[i][k];
                }
                if (zero || wt == 0) continue;
                acc += wt * any_at(&a->x, xbase + off);
            }
            int64_t oi = (n * a->ch + ch) * a->out_count + pnt;
            if (a->y->dtype == KILN_DTYPE_FLOAT) ((float *)a->y->data)[oi] = (float)acc;
            else kn_cpu_image_store(a->y, oi, acc);
        }
    }
}

kiln_status kn_cpu_image_prepare(const kn_node *n, void *params) {
    kn_cpu_image_prm *p = params;
    memset(p, 0, sizeof *p);
    const bool roi = !strcmp(n->op_type, "RoiAlign");
    const char *mode = kn_attr_string(n, "mode", roi ? "avg" : n->opset >= 20 ? "linear" : "bilinear");
    p->gs_mode = !strcmp(mode, "nearest") ? GS_NEAREST : (!strcmp(mode, "cubic") || !strcmp(mode, "bicubic")) ? GS_CUBIC : GS_LINEAR;
    const char *pad = kn_attr_string(n, "padding_mode", "zeros");
    p->gs_pad = !strcmp(pad, "border") ? PAD_BORDER : !strcmp(pad, "reflection") ? PAD_REFLECTION : PAD_ZEROS;
    p->align = kn_attr_int(n, "align_corners", 0) != 0;
    p->oh = kn_attr_int(n, "output_height", 1);
    p->ow = kn_attr_int(n, "output_width", 1);
    p->scale = kn_attr_float(n, "spatial_scale", 1.0f);
    p->sampling = kn_attr_int(n, "sampling_ratio", 0);
    p->max_mode = !strcmp(mode, "max");
    p->half_pixel = n->opset >= 16 && !strcmp(kn_attr_string(n, "coordinate_transformation_mode", "half_pixel"), "half_pixel");
    p->pooled = kn_attr_ints(n, "pooled_shape", &p->n_pooled);
    p->center = kn_attr_int(n, "center_point_box", 0) != 0;
    const char *fmt = kn_attr_string(n, "pixel_format", "RGB");
    p->pixel_format = !strcmp(fmt, "RGB") ? 0 : !strcmp(fmt, "BGR") ? 1 : !strcmp(fmt, "Grayscale") ? 2 : -1;
    return KILN_OK;
}

kiln_status kn_cpu_gridsample(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *grid = c->in[1];
    int rank = x->rank, r = rank - 2;
    if (rank < 3 || grid->rank != rank || grid->dims[rank - 1] != r || grid->dims[0] != x->dims[0])
        return kn_kernel_error(c, KILN_ERR_SHAPE, "X must be [N, C, D1..Dr] and grid [N, H1..Hr, r] with the same N");
    if (r > 6) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "%d spatial dimensions (at most 6)", r);
    KN_CTX_PRM(c, kn_cpu_image_prepare, kn_cpu_image_prm, prm);
    gs_args a;
    memset(&a, 0, sizeof a);
    a.mode = prm->gs_mode;
    a.pad = prm->gs_pad;
    a.align = prm->align;
    int64_t od[KILN_MAX_RANK];
    od[0] = x->dims[0];
    od[1] = x->dims[1];
    for (int i = 0; i < r; i++) od[2 + i] = grid->dims[1 + i];
    kn_tensor *y;
    KN_TRY(kn_ctx_output(c, 0, x->dtype, rank, od, &y));
    a.y = y;
    a.r = r;
    a.n = x->dims[0];
    a.ch = x->dims[1];
    a.in_count = 1;
    for (int i = r - 1; i >= 0; i--) {
        a.in_sp[i] = x->dims[2 + i];
        a.in_stride[i] = a.in_count;
        a.in_count *= x->dims[2 + i];
    }
    a.out_count = 1;
    for (int i = 0; i < r; i++) a.out_count *= grid->dims[1 + i];
    if (kn_tensor_count(y) == 0) return KILN_OK;
    if (a.in_count == 0) return kn_kernel_error(c, KILN_ERR_SHAPE, "X has an empty spatial dimension");
    KN_TRY(any_data_get(x, &a.x));
    kiln_status st = any_data_get(grid, &a.g);
    if (st == KILN_OK) {
        int64_t work = a.ch * (a.mode == GS_CUBIC ? 16 : 4);
        kn_parallel_for(c->pool, a.n * a.out_count, work >= 2048 ? 1 : 2048 / (work ? work : 1) + 1, gs_rows, &a);
    }
    free(a.x.owned);
    free(a.g.owned);
    return st;
}

/* ------------------------------------------------------------------ AffineGrid */

kiln_status kn_cpu_affinegrid(kn_kernel_ctx *c) {
    const kn_tensor *theta = c->in[0], *size = c->in[1];
    int64_t ns = kn_tensor_count(size);
    if (ns != 4 && ns != 5)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "'size' must have 4 or 5 values, got %lld", (long long)ns);
    int sp = (int)ns - 2;
    int64_t sz[5];
    for (int i = 0; i < ns; i++) sz[i] = kn_tensor_get_i64(size, i);
    if (theta->rank != 3 || theta->dims[0] != sz[0] || theta->dims[1] != sp || theta->dims[2] != sp + 1)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "theta must be [%lld, %d, %d] for 'size' with %lld values",
                               (long long)sz[0], sp, sp + 1, (long long)ns);
    int64_t od[5];
    od[0] = sz[0];
    for (int i = 0; i < sp; i++) od[1 + i] = sz[2 + i];
    od[sp + 1] = sp;
    kn_tensor *y;
    KN_TRY(kn_ctx_output(c, 0, theta->dtype, sp + 2, od, &y));
    KN_CTX_PRM(c, kn_cpu_image_prepare, kn_cpu_image_prm, prm);
    bool align = prm->align;
    int64_t pts = 1;
    for (int i = 0; i < sp; i++) pts *= sz[2 + i];
    int64_t oi = 0;
    for (int64_t n = 0; n < sz[0]; n++) {
        double th[12];
        for (int k = 0; k < sp * (sp + 1); k++) th[k] = kn_tensor_get_f64(theta, n * sp * (sp + 1) + k);
        for (int64_t p = 0; p < pts; p++) {
            /* base coordinates, listed x (last axis) first, then a homogeneous 1 */
            double base[4];
            int64_t rem = p;
            for (int i = sp - 1; i >= 0; i--) {
                int64_t L = sz[2 + i], j = rem % L;
                rem /= L;
                double v;
                if (align) v = L > 1 ? -1.0 + (double)j * (2.0 / (double)(L - 1)) : -1.0;
                else v = -1.0 + (2.0 / (double)L) / 2 + (double)j * (2.0 / (double)L);
                base[sp - 1 - i] = v;
            }
            base[sp] = 1.0;
            for (int r = 0; r < sp; r++) {
                double acc = 0;
                for (int k = 0; k <= sp; k++) acc += th[r * (sp + 1) + k] * base[k];
                kn_tensor_set_f64(y, oi++, acc);
            }
        }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ RoiAlign */

typedef struct roi_args {
    any_data x, rois;
    const kn_tensor *bidx;
    kn_tensor *y;
    int64_t C, H, W, oh, ow;
    double scale;
    int64_t sampling;
    bool half_pixel, max_mode, f32;
    int bad;
} roi_args;

typedef struct roi_sample {
    int64_t p1, p2, p3, p4;
    double w1, w2, w3, w4;
} roi_sample;

/* RoiAlign's geometry runs in the input's precision (float for float inputs, as the reference
 * and ONNX Runtime compute it): a roi width of 4.00000006 instead of 4 changes the adaptive
 * sampling grid. R() rounds each intermediate to float when the input is float. */
#define R(v) (a->f32 ? (double)(float)(v) : (v))

static void roi_one(roi_args *a, int64_t n) {
    double off = a->half_pixel ? 0.5 : 0.0;
    double sw = R(R(any_at(&a->rois, n * 4 + 0) * a->scale) - off), sh = R(R(any_at(&a->rois, n * 4 + 1) * a->scale) - off);
    double ew = R(R(any_at(&a->rois, n * 4 + 2) * a->scale) - off), eh = R(R(any_at(&a->rois, n * 4 + 3) * a->scale) - off);
    double rw = R(ew - sw), rh = R(eh - sh);
    if (!a->half_pixel) {
        rw = fmax(rw, 1.0); /* malformed rois become 1x1 */
        rh = fmax(rh, 1.0);
    }
    double bh = R(rh / (double)a->oh), bw = R(rw / (double)a->ow);
    int64_t gh = a->sampling > 0 ? a->sampling : (int64_t)ceil(R(rh / (double)a->oh));
    int64_t gw = a->sampling > 0 ? a->sampling : (int64_t)ceil(R(rw / (double)a->ow));
    if (gh < 0) gh = 0;
    if (gw < 0) gw = 0;
    double count = (double)(gh * gw > 1 ? gh * gw : 1);
    int64_t b = kn_tensor_get_i64(a->bidx, n);
    int64_t H = a->H, W = a->W, nsmp = gh * gw;
    roi_sample *smp = malloc((size_t)(nsmp ? nsmp : 1) * sizeof *smp);
    if (!smp) {
        a->bad = 2;
        return;
    }
    for (int64_t ph = 0; ph < a->oh; ph++)
        for (int64_t pw = 0; pw < a->ow; pw++) {
            int64_t k = 0;
            for (int64_t iy = 0; iy < gh; iy++) {
                double yy = R(R(sh + R((double)ph * bh)) + R(R(((double)iy + 0.5) * bh) / (double)gh));
                for (int64_t ix = 0; ix < gw; ix++, k++) {
                    double xx = R(R(sw + R((double)pw * bw)) + R(R(((double)ix + 0.5) * bw) / (double)gw));
                    roi_sample *s = &smp[k];
                    memset(s, 0, sizeof *s);
                    double y = yy, x = xx;
                    if (y < -1.0 || y > (double)H || x < -1.0 || x > (double)W) continue;
                    if (y < 0) y = 0;
                    if (x < 0) x = 0;
                    int64_t yl = (int64_t)y, xl = (int64_t)x, yh, xh;
                    if (yl >= H - 1) {
                        yh = yl = H - 1;
                        y = (double)yl;
                    } else yh = yl + 1;
                    if (xl >= W - 1) {
                        xh = xl = W - 1;
                        x = (double)xl;
                    } else xh = xl + 1;
                    double ly = R(y - (double)yl), lx = R(x - (double)xl), hy = R(1 - ly), hx = R(1 - lx);
                    s->p1 = yl * W + xl;
                    s->p2 = yl * W + xh;
                    s->p3 = yh * W + xl;
                    s->p4 = yh * W + xh;
                    s->w1 = hy * hx;
                    s->w2 = hy * lx;
                    s->w3 = ly * hx;
                    s->w4 = ly * lx;
                }
            }
            for (int64_t ch = 0; ch < a->C; ch++) {
                int64_t xb = (b * a->C + ch) * H * W;
                double out = 0;
                for (int64_t j = 0; j < nsmp; j++) {
                    const roi_sample *s = &smp[j];
                    double v1 = s->w1 * any_at(&a->x, xb + s->p1), v2 = s->w2 * any_at(&a->x, xb + s->p2);
                    double v3 = s->w3 * any_at(&a->x, xb + s->p3), v4 = s->w4 * any_at(&a->x, xb + s->p4);
                    if (a->max_mode) {
                        double v = fmax(fmax(v1, v2), fmax(v3, v4));
                        out = j == 0 ? v : fmax(out, v);
                    } else out += v1 + v2 + v3 + v4;
                }
                if (!a->max_mode) out /= count;
                kn_cpu_image_store(a->y, ((n * a->C + ch) * a->oh + ph) * a->ow + pw, out);
            }
        }
    free(smp);
}
#undef R

static void roi_rows(void *arg, int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; n++) roi_one(arg, n);
}

kiln_status kn_cpu_roialign(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *rois = c->in[1], *bi = c->in[2];
    if (x->rank != 4 || rois->rank != 2 || rois->dims[1] != 4 || bi->rank != 1 || bi->dims[0] != rois->dims[0])
        return kn_kernel_error(c, KILN_ERR_SHAPE, "X must be [N, C, H, W], rois [R, 4] and batch_indices [R]");
    KN_CTX_PRM(c, kn_cpu_image_prepare, kn_cpu_image_prm, prm);
    roi_args a;
    memset(&a, 0, sizeof a);
    a.C = x->dims[1];
    a.H = x->dims[2];
    a.W = x->dims[3];
    a.oh = prm->oh;
    a.ow = prm->ow;
    a.scale = prm->scale;
    a.sampling = prm->sampling;
    a.max_mode = prm->max_mode;
    a.half_pixel = prm->half_pixel;
    a.bidx = bi;
    a.f32 = x->dtype != KILN_DTYPE_DOUBLE;
    int64_t R = rois->dims[0];
    for (int64_t n = 0; n < R; n++) {
        int64_t b = kn_tensor_get_i64(bi, n);
        if (b < 0 || b >= x->dims[0])
            return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "batch_indices[%lld] = %lld is outside [0, %lld)",
                                   (long long)n, (long long)b, (long long)x->dims[0]);
    }
    int64_t od[4] = {R, a.C, a.oh, a.ow};
    KN_TRY(kn_ctx_output(c, 0, x->dtype, 4, od, &a.y));
    if (kn_tensor_count(a.y) == 0) return KILN_OK;
    if (a.H == 0 || a.W == 0) return kn_kernel_error(c, KILN_ERR_SHAPE, "X has an empty spatial dimension");
    KN_TRY(any_data_get(x, &a.x));
    kiln_status st = any_data_get(rois, &a.rois);
    if (st == KILN_OK) {
        kn_parallel_for(c->pool, R, 1, roi_rows, &a);
        if (a.bad) st = KN_OOM();
    }
    free(a.x.owned);
    free(a.rois.owned);
    return st;
}

/* ------------------------------------------------------------------ MaxRoiPool */

kiln_status kn_cpu_maxroipool(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *rois = c->in[1];
    if (x->rank != 4 || rois->rank != 2 || rois->dims[1] != 5)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "X must be [N, C, H, W] and rois [R, 5]");
    KN_CTX_PRM(c, kn_cpu_image_prepare, kn_cpu_image_prm, prm);
    int np = prm->n_pooled;
    const int64_t *ps = prm->pooled;
    if (!ps || np != 2) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "attribute 'pooled_shape' must have 2 values");
    double ss = prm->scale;
    int64_t R = rois->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3], PH = ps[0], PW = ps[1];
    int64_t od[4] = {R, C, PH, PW};
    kn_tensor *y;
    KN_TRY(kn_ctx_output(c, 0, x->dtype, 4, od, &y));
    for (int64_t n = 0; n < R; n++) {
        int64_t b = (int64_t)kn_tensor_get_f64(rois, n * 5);
        if (b < 0 || b >= x->dims[0])
            return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "roi %lld has batch index %lld outside [0, %lld)",
                                   (long long)n, (long long)b, (long long)x->dims[0]);
        int64_t sw = (int64_t)round(kn_tensor_get_f64(rois, n * 5 + 1) * ss);
        int64_t sh = (int64_t)round(kn_tensor_get_f64(rois, n * 5 + 2) * ss);
        int64_t ew = (int64_t)round(kn_tensor_get_f64(rois, n * 5 + 3) * ss);
        int64_t eh = (int64_t)round(kn_tensor_get_f64(rois, n * 5 + 4) * ss);
        int64_t rh = eh - sh + 1 > 1 ? eh - sh + 1 : 1, rw = ew - sw + 1 > 1 ? ew - sw + 1 : 1;
        double bh = (double)rh / (double)PH, bw = (double)rw / (double)PW;
        for (int64_t ch = 0; ch < C; ch++) {
            int64_t xb = (b * C + ch) * H * W;
            for (int64_t ph = 0; ph < PH; ph++)
                for (int64_t pw = 0; pw < PW; pw++) {
                    int64_t hs = (int64_t)floor((double)ph * bh) + sh, he = (int64_t)ceil((double)(ph + 1) * bh) + sh;
                    int64_t ws = (int64_t)floor((double)pw * bw) + sw, we = (int64_t)ceil((double)(pw + 1) * bw) + sw;
                    hs = hs < 0 ? 0 : hs > H ? H : hs;
                    he = he < 0 ? 0 : he > H ? H : he;
                    ws = ws < 0 ? 0 : ws > W ? W : ws;
                    we = we < 0 ? 0 : we > W ? W : we;
                    double m = 0;
                    bool any = false;
                    for (int64_t h = hs; h < he; h++)
                        for (int64_t w = ws; w < we; w++) {
                            double v = kn_tensor_get_f64(x, xb + h * W + w);
                            if (!any || v > m) m = v;
                            any = true;
                        }
                    kn_tensor_set_f64(y, ((n * C + ch) * PH + ph) * PW + pw, any ? m : 0.0);
                }
        }
    }
    return KILN_OK;
}

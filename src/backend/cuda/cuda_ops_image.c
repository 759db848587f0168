/* CUDA kernels of the image family: Resize/Upsample and GridSample.
 *
 * Resize reads its roi/scales/sizes inputs on the host (marked in the table) and builds the same
 * plan as the CPU kernel (kn_resize_plan_make). Nearest mode is one gather over all axes; linear
 * and cubic modes run one separable pass per resized axis, in the CPU's axis order, through
 * device buffers in the work type (float for float, float16 and bfloat16; double otherwise). */
#include "backend/cuda/cuda_backend.h"

#include "backend/cpu/image_impl.h"
#include "ops/image.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ Resize */

static void plan_to_device(const kn_resize_plan *p, kn_cu_resize *d) {
    memset(d, 0, sizeof *d);
    d->mode = (int)p->mode;
    d->coord = (int)p->coord;
    d->nearest = (int)p->nearest;
    d->cubic_a = p->cubic_a;
    d->extrapolation = p->extrapolation;
    d->exclude_outside = p->exclude_outside;
    d->antialias = p->antialias;
    d->rank = p->rank;
    for (int a = 0; a < p->rank; a++) {
        d->in_dims[a] = p->in_dims[a];
        d->out_dims[a] = p->out_dims[a];
        d->scale[a] = p->scale[a];
        d->roi_start[a] = p->roi_start[a];
        d->roi_end[a] = p->roi_end[a];
    }
}

/* An axis the resize leaves as it is (the CPU's rule). */
static bool axis_is_identity(const kn_resize_plan *p, int a) {
    if (p->out_dims[a] != p->in_dims[a] || fabs(p->scale[a] - 1.0) > 1e-9) return false;
    if (p->coord == KN_COORD_TF_CROP_AND_RESIZE)
        return fabs(p->roi_start[a]) <= 1e-9 && fabs(p->roi_end[a] - 1.0) <= 1e-9;
    return true;
}

static int taps_of(const kn_resize_plan *p, double s) {
    double ss = s < 1 ? s : 1;
    if (p->mode == KN_RESIZE_LINEAR) return p->antialias ? 2 - 2 * ((int)floor(-1 / ss) + 1) : 2;
    return p->antialias ? 2 - 2 * ((int)floor(-2 / ss) + 1) : 4;
}

/* The axes to resize in the CPU kernel's order (the fewest elements touched; same cost model),
 * so both backends round in the same sequence. */
static int axis_order(const kn_resize_plan *p, int *order) {
    int rank = p->rank, n_ax = 0;
    for (int a = 0; a < rank; a++)
        if (!axis_is_identity(p, a)) order[n_ax++] = a;
    if (n_ax < 2 || n_ax > 4) return n_ax;
    int perm[4], best[4] = {0, 1, 2, 3};
    double best_cost = -1;
    for (int i = 0; i < n_ax; i++) perm[i] = i;
    for (;;) {
        double dims_d[KILN_MAX_RANK], cost = 0;
        for (int a = 0; a < rank; a++) dims_d[a] = (double)p->in_dims[a];
        for (int i = 0; i < n_ax; i++) {
            int a = order[perm[i]];
            dims_d[a] = (double)p->out_dims[a];
            double cnt = 1;
            for (int k = 0; k < rank; k++) cnt *= dims_d[k];
            cost += cnt * (double)taps_of(p, p->scale[a]) * (a == rank - 1 ? 3.0 : 1.0);
        }
        if (best_cost < 0 || cost < best_cost) {
            best_cost = cost;
            memcpy(best, perm, sizeof perm);
        }
        int i = n_ax - 2;
        while (i >= 0 && perm[i] > perm[i + 1]) i--;
        if (i < 0) break;
        int j = n_ax - 1;
        while (perm[j] < perm[i]) j--;
        int t = perm[i];
        perm[i] = perm[j], perm[j] = t;
        for (int l = i + 1, r = n_ax - 1; l < r; l++, r--) t = perm[l], perm[l] = perm[r], perm[r] = t;
    }
    int sorted[4];
    for (int i = 0; i < n_ax; i++) sorted[i] = order[best[i]];
    memcpy(order, sorted, sizeof(int) * (size_t)n_ax);
    return n_ax;
}

static kiln_status resize_interp(kn_cuda *cu, kn_kernel_ctx *c, const kn_resize_plan *p, const kn_tensor *x,
                                 kn_tensor *y) {
    bool wide = !(x->dtype == KILN_DTYPE_FLOAT || x->dtype == KILN_DTYPE_FLOAT16 || x->dtype == KILN_DTYPE_BFLOAT16);
    kiln_dtype wdt = wide ? KILN_DTYPE_DOUBLE : KILN_DTYPE_FLOAT;
    size_t es = kiln_dtype_size(wdt);
    kn_cu_resize d;
    plan_to_device(p, &d);
    int order[KILN_MAX_RANK];
    int n_ax = axis_order(p, order);
    if (n_ax == 0) /* no axis changes: the values as they are */
        return kn_cu_check(c, cudaMemcpyAsync(y->data, x->data, x->nbytes, cudaMemcpyDeviceToDevice, cu->stream),
                           "Resize copy");
    int64_t dims[KILN_MAX_RANK];
    for (int a = 0; a < p->rank; a++) dims[a] = p->in_dims[a];
    const void *cur = x->data;
    kiln_dtype cur_dt = x->dtype;
    void *held = NULL; /* scratch holding cur */
    size_t held_bytes = 0;
    kiln_status st = KILN_OK;
    for (int i = 0; i < n_ax && st == KILN_OK; i++) {
        int a = order[i];
        int64_t outer = 1, inner = 1;
        for (int k = 0; k < a; k++) outer *= dims[k];
        for (int k = a + 1; k < p->rank; k++) inner *= dims[k];
        int64_t cnt = outer * p->out_dims[a] * inner;
        bool final = i == n_ax - 1;
        void *dst = final ? y->data : NULL;
        size_t dst_bytes = 0;
        if (!final) {
            dst_bytes = (size_t)(cnt ? cnt : 1) * es;
            st = kn_cu_scratch(cu, dst_bytes, &dst);
            if (st != KILN_OK) break;
        }
        kiln_dtype dst_dt = final ? y->dtype : wdt;
        st = kn_cu_check(c, kn_cu_resize_pass(cur_dt, dst_dt, wide, &d, a, cur, dst, outer, inner, cu->stream),
                         "Resize pass");
        if (held) kn_cu_scratch_free(cu, held, held_bytes);
        held = final ? NULL : dst;
        held_bytes = dst_bytes;
        cur = dst;
        cur_dt = dst_dt;
        dims[a] = p->out_dims[a];
    }
    if (held) kn_cu_scratch_free(cu, held, held_bytes);
    return st;
}

static kiln_status run_resize(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_resize_attrs local;
    const kn_resize_attrs *at;
    KN_TRY(kn_ctx_params(c, kn_resize_prepare, &local, (const void **)&at));
    const kn_tensor *roi, *scales, *sizes;
    kn_resize_inputs_of(at->legacy, c->n_inputs, (const kn_tensor *const *)c->in, &roi, &scales, &sizes);
    kn_resize_plan p;
    char why[512];
    kiln_status st = kn_resize_plan_from(at, x->rank, x->dims, roi, scales, sizes, false, &p, why, sizeof why);
    if (st != KILN_OK) return kn_kernel_error(c, st, "%s", why);
    if (p.coord == KN_COORD_TF_CROP_AND_RESIZE && !roi)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "coordinate_transformation_mode tf_crop_and_resize needs 'roi'");
    if (p.rank == 0) return kn_kernel_error(c, KILN_ERR_SHAPE, "input is a scalar; Resize needs rank >= 1");
    kn_tensor *y;
    KN_TRY(kn_cu_output(cu, c, 0, x->dtype, x->rank, p.out_dims, &y));
    if (kn_tensor_count(y) == 0) return KILN_OK;
    if (kn_tensor_count(x) == 0)
        return kn_kernel_error(c, KILN_ERR_SHAPE, "cannot resize an empty input to a non-empty output");
    kn_cu_resize d;
    plan_to_device(&p, &d);
    if (p.mode == KN_RESIZE_NEAREST) {
        unsigned char ev[16] = {0};
        kn_tensor one = {0};
        one.kind = KN_VALUE_TENSOR;
        one.dtype = x->dtype;
        one.data = ev;
        one.nbytes = kiln_dtype_size(x->dtype);
        if (x->dtype != KILN_DTYPE_BOOL) kn_cpu_image_store(&one, 0, p.extrapolation);
        else ev[0] = p.extrapolation != 0;
        return kn_cu_check(c, kn_cu_resize_nearest(kiln_dtype_size(x->dtype), &d, x->data, y->data, ev, cu->stream),
                           "Resize (nearest)");
    }
    return resize_interp(cu, c, &p, x, y);
}

static bool resize_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    (void)n_in;
    const char *mode = kn_attr_string(n, "mode", "nearest");
    kiln_dtype t = in[0] ? in[0]->dtype : KILN_DTYPE_UNDEFINED;
    if (strcmp(mode, "nearest") != 0) {
        if (strcmp(mode, "linear") && strcmp(mode, "bilinear") && strcmp(mode, "cubic") && strcmp(mode, "bicubic")) {
            snprintf(why, cap, "mode '%s'", mode);
            return false;
        }
        if (!kn_dtype_is_float(t) && !kn_dtype_is_int(t)) {
            snprintf(why, cap, "%s interpolation of element type %s", mode, kiln_dtype_name(t));
            return false;
        }
    }
    return true;
}

/* ------------------------------------------------------------------ GridSample */

/* GridSample's attributes (its prepare hook) */
typedef struct gridsample_prm {
    int mode, pad;
    bool align;
} gridsample_prm;

static kiln_status gridsample_prepare(const kn_node *n, void *params) {
    gridsample_prm *p = params;
    const char *mode = kn_attr_string(n, "mode", n->opset >= 20 ? "linear" : "bilinear");
    p->mode = !strcmp(mode, "nearest") ? 0 : (!strcmp(mode, "cubic") || !strcmp(mode, "bicubic")) ? 2 : 1;
    const char *pad = kn_attr_string(n, "padding_mode", "zeros");
    p->pad = !strcmp(pad, "border") ? 1 : !strcmp(pad, "reflection") ? 2 : 0;
    p->align = kn_attr_int(n, "align_corners", 0) != 0;
    return KILN_OK;
}

static kiln_status run_gridsample(kn_cuda *cu, kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *grid = c->in[1];
    int rank = x->rank, r = rank - 2;
    if (rank < 3 || grid->rank != rank || grid->dims[rank - 1] != r || grid->dims[0] != x->dims[0])
        return kn_kernel_error(c, KILN_ERR_SHAPE, "X must be [N, C, D1..Dr] and grid [N, H1..Hr, r] with the same N");
    if (r > 3)
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "%d spatial dimensions (the CUDA kernel takes 1 to 3)", r);
    gridsample_prm local;
    const gridsample_prm *prm;
    KN_TRY(kn_ctx_params(c, gridsample_prepare, &local, (const void **)&prm));
    kn_cu_gridsample p;
    memset(&p, 0, sizeof p);
    p.mode = prm->mode;
    p.pad = prm->pad;
    p.align = prm->align;
    p.r = r;
    p.n = x->dims[0];
    p.c = x->dims[1];
    int64_t od[KILN_MAX_RANK];
    od[0] = x->dims[0];
    od[1] = x->dims[1];
    for (int i = 0; i < r; i++) od[2 + i] = grid->dims[1 + i];
    kn_tensor *y;
    KN_TRY(kn_cu_output(cu, c, 0, x->dtype, rank, od, &y));
    p.in_count = 1;
    for (int i = 0; i < r; i++) {
        p.in_sp[i] = x->dims[2 + i];
        p.in_count *= x->dims[2 + i];
    }
    p.out_count = 1;
    for (int i = 0; i < r; i++) p.out_count *= grid->dims[1 + i];
    if (kn_tensor_count(y) == 0) return KILN_OK;
    if (p.in_count == 0) return kn_kernel_error(c, KILN_ERR_SHAPE, "X has an empty spatial dimension");
    return kn_cu_check(c, kn_cu_gridsample_run(x->dtype, grid->dtype, &p, x->data, grid->data, y->data, cu->stream),
                       "GridSample");
}

static bool gridsample_supports(const kn_node *n, const kn_type *const *in, int n_in, char *why, size_t cap) {
    if (n_in < 2 || !in[1]) {
        snprintf(why, cap, "no grid input");
        return false;
    }
    if (!kn_dtype_is_float(in[1]->dtype)) {
        snprintf(why, cap, "grid of element type %s", kiln_dtype_name(in[1]->dtype));
        return false;
    }
    if (in[0] && in[0]->rank > 5) {
        snprintf(why, cap, "%d spatial dimensions (the CUDA kernel takes 1 to 3)", in[0]->rank - 2);
        return false;
    }
    const char *mode = kn_attr_string(n, "mode", n->opset >= 20 ? "linear" : "bilinear");
    if (strcmp(mode, "nearest") && strcmp(mode, "linear") && strcmp(mode, "bilinear") && strcmp(mode, "cubic") &&
        strcmp(mode, "bicubic")) {
        snprintf(why, cap, "mode '%s'", mode);
        return false;
    }
    const char *pad = kn_attr_string(n, "padding_mode", "zeros");
    if (strcmp(pad, "zeros") && strcmp(pad, "border") && strcmp(pad, "reflection")) {
        snprintf(why, cap, "padding_mode '%s'", pad);
        return false;
    }
    return true;
}

const kn_cuda_kernel kn_cuda_image[] = {
    /* roi, scales, sizes (Resize-10 and Upsample-9: scales) are read on the host */
    {"", "Resize", run_resize, resize_supports, KN_T_DENSE, 0xe, 0, KN_CU_PARAMS(kn_resize_prepare, kn_resize_attrs)},
    {"", "Upsample", run_resize, resize_supports, KN_T_DENSE, 0x2, 0, KN_CU_PARAMS(kn_resize_prepare, kn_resize_attrs)},
    {"", "GridSample", run_gridsample, gridsample_supports, KN_T_NUM, 0, 0, KN_CU_PARAMS(gridsample_prepare, gridsample_prm)},
    {NULL, NULL, NULL, NULL, 0, 0, 0},
};

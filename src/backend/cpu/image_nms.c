/* NonMaxSuppression on the CPU: per batch and class, boxes above the score threshold are taken
 * in order of decreasing score (ties: lower box index first) and kept unless their IoU with a
 * box already kept exceeds the threshold, up to max_output_boxes_per_class. The arithmetic is in
 * float, as the reference and ONNX Runtime compute it, so boundary IoUs decide alike. */
#include "backend/cpu/image_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct cand {
    float score;
    int64_t idx;
} cand;

static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Corners (min, max on each axis) of box i. */
static void box_corners(const float *bx, int center, float *y0, float *x0, float *y1, float *x1) {
    if (center) {
        float hw = bx[2] / 2, hh = bx[3] / 2;
        *x0 = bx[0] - hw;
        *x1 = bx[0] + hw;
        *y0 = bx[1] - hh;
        *y1 = bx[1] + hh;
    } else {
        *y0 = bx[0] < bx[2] ? bx[0] : bx[2];
        *y1 = bx[0] < bx[2] ? bx[2] : bx[0];
        *x0 = bx[1] < bx[3] ? bx[1] : bx[3];
        *x1 = bx[1] < bx[3] ? bx[3] : bx[1];
    }
}

static bool suppressed(const float *a, const float *b, int center, float thr) {
    float ay0, ax0, ay1, ax1, by0, bx0, by1, bx1;
    box_corners(a, center, &ay0, &ax0, &ay1, &ax1);
    box_corners(b, center, &by0, &bx0, &by1, &bx1);
    float ix0 = ax0 > bx0 ? ax0 : bx0, ix1 = ax1 < bx1 ? ax1 : bx1;
    if (ix1 <= ix0) return false;
    float iy0 = ay0 > by0 ? ay0 : by0, iy1 = ay1 < by1 ? ay1 : by1;
    if (iy1 <= iy0) return false;
    float inter = (ix1 - ix0) * (iy1 - iy0);
    if (inter <= 0) return false;
    float area_a = (ax1 - ax0) * (ay1 - ay0), area_b = (bx1 - bx0) * (by1 - by0);
    float uni = area_a + area_b - inter;
    if (area_a <= 0 || area_b <= 0 || uni <= 0) return false;
    return inter / uni > thr;
}

static kiln_status to_float(const kn_tensor *t, float **out) {
    int64_t n = kn_tensor_count(t);
    *out = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!*out) return KN_OOM();
    for (int64_t i = 0; i < n; i++) (*out)[i] = (float)kn_tensor_get_f64(t, i);
    return KILN_OK;
}

kiln_status kn_cpu_nms(kn_kernel_ctx *c) {
    const kn_tensor *boxes = c->in[0], *scores = c->in[1];
    const kn_tensor *tmax = c->n_inputs > 2 ? c->in[2] : NULL, *tiou = c->n_inputs > 3 ? c->in[3] : NULL;
    const kn_tensor *tsc = c->n_inputs > 4 ? c->in[4] : NULL;
    if (boxes->rank != 3 || boxes->dims[2] != 4 || scores->rank != 3 || scores->dims[0] != boxes->dims[0] ||
        scores->dims[2] != boxes->dims[1])
        return kn_kernel_error(c, KILN_ERR_SHAPE,
                               "boxes must be [B, n, 4] and scores [B, classes, n] with the same B and n");
    KN_CTX_PRM(c, kn_cpu_image_prepare, kn_cpu_image_prm, prm);
    int center = prm->center;
    int64_t max_out = tmax && kn_tensor_count(tmax) > 0 ? kn_tensor_get_i64(tmax, 0) : 0;
    if (max_out < 0) max_out = 0;
    float iou = tiou && kn_tensor_count(tiou) > 0 ? (float)kn_tensor_get_f64(tiou, 0) : 0.0f;
    bool has_st = tsc && kn_tensor_count(tsc) > 0;
    float sthr = has_st ? (float)kn_tensor_get_f64(tsc, 0) : 0.0f;
    if (iou < 0 || iou > 1)
        return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "iou_threshold %g is outside [0, 1]", (double)iou);
    int64_t B = boxes->dims[0], n = boxes->dims[1], C = scores->dims[1];
    float *bx = NULL, *sc = NULL;
    cand *cands = NULL;
    int64_t *kept = NULL, *sel = NULL, n_sel = 0, cap_sel = 0;
    kiln_status st = to_float(boxes, &bx);
    if (st == KILN_OK) st = to_float(scores, &sc);
    if (st == KILN_OK) {
        cands = malloc((size_t)(n ? n : 1) * sizeof *cands);
        kept = malloc((size_t)(n ? n : 1) * sizeof *kept);
        if (!cands || !kept) st = KN_OOM();
    }
    for (int64_t b = 0; b < B && st == KILN_OK && max_out > 0; b++)
        for (int64_t cl = 0; cl < C && st == KILN_OK; cl++) {
            const float *s = sc + (b * C + cl) * n;
            int64_t m = 0;
            for (int64_t i = 0; i < n; i++)
                if (!has_st || s[i] > sthr) cands[m++] = (cand){s[i], i};
            qsort(cands, (size_t)m, sizeof *cands, cand_cmp);
            int64_t nk = 0;
            for (int64_t k = 0; k < m && nk < max_out; k++) {
                const float *box = bx + (b * n + cands[k].idx) * 4;
                bool ok = true;
                for (int64_t j = 0; j < nk && ok; j++)
                    if (suppressed(box, bx + (b * n + kept[j]) * 4, center, iou)) ok = false;
                if (!ok) continue;
                kept[nk++] = cands[k].idx;
                if (n_sel == cap_sel) {
                    int64_t nc = cap_sel ? cap_sel * 2 : 64;
                    int64_t *ns = realloc(sel, (size_t)nc * 3 * sizeof *sel);
                    if (!ns) {
                        st = KN_OOM();
                        break;
                    }
                    sel = ns;
                    cap_sel = nc;
                }
                sel[n_sel * 3] = b;
                sel[n_sel * 3 + 1] = cl;
                sel[n_sel * 3 + 2] = cands[k].idx;
                n_sel++;
            }
        }
    if (st == KILN_OK) {
        int64_t od[2] = {n_sel, 3};
        kn_tensor *y;
        st = kn_ctx_output(c, 0, KILN_DTYPE_INT64, 2, od, &y);
        if (st == KILN_OK && n_sel) memcpy(y->data, sel, (size_t)n_sel * 3 * sizeof *sel);
    }
    free(bx);
    free(sc);
    free(cands);
    free(kept);
    free(sel);
    return st;
}

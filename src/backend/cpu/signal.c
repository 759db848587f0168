/* CPU kernels of the signal family: DFT and STFT over the FFT of signal_fft.c, the window
 * functions and MelWeightMatrix. Transforms run in double precision. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/signal_fft.h"
#include "ops/signal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline double elem(const kn_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_FLOAT ? (double)((const float *)t->data)[i] : kn_tensor_get_f64(t, i);
}

static inline void put(kn_tensor *t, int64_t i, double v) {
    if (t->dtype == KILN_DTYPE_FLOAT) ((float *)t->data)[i] = (float)v;
    else kn_tensor_set_f64(t, i, v);
}

static bool supports_float(const kn_node *node, const kn_type *const *in, int n_in, char *why, size_t cap) {
    if (n_in < 1 || !in[0] || !in[0]->dtype || kn_dtype_is_float(in[0]->dtype)) return true;
    snprintf(why, cap, "%s on the CPU does not support element type %s", node->op_type, kiln_dtype_name(in[0]->dtype));
    return false;
}

/* ------------------------------------------------------------------ DFT */

typedef struct dft_args {
    const kn_tensor *x;
    kn_tensor *y;
    const kn_fft_plan *plan;
    const kn_dft_params *p;
    int64_t inner, in_len, in_c;
    size_t scratch_len;
    int fail;
} dft_args;

static void dft_lines(void *arg, int64_t begin, int64_t end) {
    dft_args *a = arg;
    const kn_dft_params *p = a->p;
    int64_t n = p->n;
    kn_cpx *buf = malloc(((size_t)(2 * n) + a->scratch_len) * sizeof *buf);
    if (!buf) {
        a->fail = 1;
        return;
    }
    kn_cpx *in = buf, *out = buf + n, *scratch = buf + 2 * n;
    double scale = p->inverse ? 1.0 / (double)n : 1.0;
    for (int64_t line = begin; line < end; line++) {
        int64_t o = line / a->inner, i = line % a->inner;
        int64_t half = p->inverse && p->onesided ? n / 2 + 1 : n; /* entries read from the input */
        for (int64_t j = 0; j < half; j++) {
            if (j < a->in_len) {
                int64_t xi = ((o * a->in_len + j) * a->inner + i) * a->in_c;
                in[j].re = elem(a->x, xi);
                in[j].im = a->in_c == 2 ? elem(a->x, xi + 1) : 0.0;
            } else in[j] = (kn_cpx){0, 0};
        }
        for (int64_t j = half; j < n; j++) in[j] = (kn_cpx){in[n - j].re, -in[n - j].im}; /* Hermitian */
        kn_fft_exec(a->plan, in, out, scratch);
        for (int64_t k = 0; k < p->out_len; k++) {
            int64_t yi = ((o * p->out_len + k) * a->inner + i) * p->out_last;
            put(a->y, yi, out[k].re * scale);
            if (p->out_last == 2) put(a->y, yi + 1, out[k].im * scale);
        }
    }
    free(buf);
}

/* The family's attributes, read once (their prepare hook): DFT's, STFT's onesided, the windows'
 * periodic, the windows' and MelWeightMatrix's output_datatype */
typedef struct signal_prm {
    kn_dft_attrs dft;
    bool stft_onesided, periodic;
    kiln_dtype out_dtype;
} signal_prm;

static kiln_status signal_prepare(const kn_node *n, void *params) {
    signal_prm *p = params;
    kn_dft_attrs_read(n, &p->dft);
    p->stft_onesided = kn_attr_int(n, "onesided", 1) != 0;
    p->periodic = kn_attr_int(n, "periodic", 1) != 0;
    p->out_dtype = (kiln_dtype)kn_attr_int(n, "output_datatype", KILN_DTYPE_FLOAT);
    return KILN_OK;
}

static kiln_status run_dft(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    const kn_tensor *len = c->n_inputs > 1 ? c->in[1] : NULL;
    const kn_tensor *axis = c->node->opset >= 20 && c->n_inputs > 2 ? c->in[2] : NULL;
    if (len && kn_tensor_count(len) == 0) len = NULL;
    KN_CTX_PRM(c, signal_prepare, signal_prm, prm);
    kn_dft_params p;
    char why[512];
    kiln_status st = kn_dft_params_get_with(c->node, &prm->dft, x->rank, x->dims, len, false, axis, false, &p, why, sizeof why);
    if (st != KILN_OK) return kn_kernel_error(c, st, "%s", why);
    int64_t od[KILN_MAX_RANK];
    memcpy(od, x->dims, sizeof(int64_t) * (size_t)x->rank);
    od[p.axis] = p.out_len;
    od[x->rank - 1] = p.out_last;
    kn_tensor *y;
    KN_TRY(kn_ctx_output(c, 0, x->dtype, x->rank, od, &y));
    if (kn_tensor_count(y) == 0) return KILN_OK;
    dft_args a = {.x = x, .y = y, .p = &p, .in_len = x->dims[p.axis], .in_c = x->dims[x->rank - 1]};
    int64_t outer = 1;
    a.inner = 1;
    for (int k = 0; k < p.axis; k++) outer *= x->dims[k];
    for (int k = p.axis + 1; k < x->rank - 1; k++) a.inner *= x->dims[k];
    kn_fft_plan *plan;
    KN_TRY(kn_fft_plan_new(p.n, p.inverse, &plan));
    a.plan = plan;
    a.scratch_len = kn_fft_scratch_len(plan);
    kn_parallel_for(c->pool, outer * a.inner, p.n >= 256 ? 1 : 256 / p.n + 1, dft_lines, &a);
    kn_fft_plan_free(plan);
    return a.fail ? KN_OOM() : KILN_OK;
}

/* ------------------------------------------------------------------ STFT */

static kiln_status run_stft(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *step_t = c->in[1];
    const kn_tensor *win = c->n_inputs > 2 ? c->in[2] : NULL, *fl_t = c->n_inputs > 3 ? c->in[3] : NULL;
    if (x->rank != 3 || (x->dims[2] != 1 && x->dims[2] != 2))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "signal must be [batch, length, 1 or 2]");
    if (kn_tensor_count(step_t) != 1) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "frame_step must be a scalar");
    int64_t step = kn_tensor_get_i64(step_t, 0), B = x->dims[0], L = x->dims[1], C = x->dims[2];
    int64_t fl = fl_t && kn_tensor_count(fl_t) == 1 ? kn_tensor_get_i64(fl_t, 0) : win ? kn_tensor_count(win) : L;
    if (win && (win->rank != 1 || win->dims[0] != fl))
        return kn_kernel_error(c, KILN_ERR_SHAPE, "window must be 1-D with frame_length = %lld values", (long long)fl);
    if (step < 1 || fl < 1 || fl > L)
        return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT,
                               "frame_step %lld and frame_length %lld do not fit a signal of length %lld", (long long)step,
                               (long long)fl, (long long)L);
    KN_CTX_PRM(c, signal_prepare, signal_prm, prm);
    bool onesided = prm->stft_onesided;
    int64_t frames = 1 + (L - fl) / step, bins = onesided ? fl / 2 + 1 : fl;
    int64_t od[4] = {B, frames, bins, 2};
    kn_tensor *y;
    KN_TRY(kn_ctx_output(c, 0, x->dtype, 4, od, &y));
    kn_fft_plan *plan;
    KN_TRY(kn_fft_plan_new(fl, 0, &plan));
    kn_cpx *buf = malloc(((size_t)(2 * fl) + kn_fft_scratch_len(plan)) * sizeof *buf);
    /* the window as doubles, read once (not a kn_tensor_get_f64 call per element of every frame) */
    double *wd = malloc((size_t)fl * sizeof *wd);
    if (!buf || !wd) {
        free(buf);
        free(wd);
        kn_fft_plan_free(plan);
        return KN_OOM();
    }
    for (int64_t j = 0; j < fl; j++) wd[j] = win ? kn_tensor_get_f64(win, j) : 1.0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t f = 0; f < frames; f++) {
            for (int64_t j = 0; j < fl; j++) {
                int64_t xi = (b * L + f * step + j) * C;
                double w = wd[j];
                buf[j].re = elem(x, xi) * w;
                buf[j].im = C == 2 ? elem(x, xi + 1) * w : 0.0;
            }
            kn_fft_exec(plan, buf, buf + fl, buf + 2 * fl);
            for (int64_t k = 0; k < bins; k++) {
                int64_t yi = ((b * frames + f) * bins + k) * 2;
                put(y, yi, buf[fl + k].re);
                put(y, yi + 1, buf[fl + k].im);
            }
        }
    free(buf);
    free(wd);
    kn_fft_plan_free(plan);
    return KILN_OK;
}

/* ------------------------------------------------------------------ windows */

static kiln_status run_window(kn_kernel_ctx *c) {
    const kn_tensor *s = c->in[0];
    if (kn_tensor_count(s) != 1) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "size must be a scalar");
    int64_t n = kn_tensor_get_i64(s, 0);
    if (n < 0) return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "size %lld is negative", (long long)n);
    KN_CTX_PRM(c, signal_prepare, signal_prm, prm);
    kiln_dtype dt = prm->out_dtype;
    kn_tensor *y;
    KN_TRY(kn_ctx_output(c, 0, dt, 1, &n, &y));
    bool periodic = prm->periodic;
    double N = (double)(periodic ? n : n - 1);
    const char *op = c->node->op_type;
    for (int64_t i = 0; i < n; i++) {
        double v, t = 2.0 * M_PI * (double)i / N;
        if (N == 0) v = 1.0; /* a one-point symmetric window */
        else if (!strcmp(op, "HannWindow")) v = 0.5 - 0.5 * cos(t);
        else if (!strcmp(op, "HammingWindow")) v = 25.0 / 46.0 - (1.0 - 25.0 / 46.0) * cos(t);
        else v = 0.42 - 0.5 * cos(t) + 0.08 * cos(2 * t);
        kn_tensor_set_f64(y, i, v);
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ MelWeightMatrix */

static kiln_status run_mel(kn_kernel_ctx *c) {
    for (int i = 0; i < 5; i++)
        if (!c->in[i] || kn_tensor_count(c->in[i]) != 1)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "input %d must be a scalar", i);
    int64_t mel = kn_tensor_get_i64(c->in[0], 0), dft = kn_tensor_get_i64(c->in[1], 0);
    int64_t rate = kn_tensor_get_i64(c->in[2], 0);
    float lo = (float)kn_tensor_get_f64(c->in[3], 0), hi = (float)kn_tensor_get_f64(c->in[4], 0);
    if (mel < 1 || dft < 1 || rate < 1)
        return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "num_mel_bins, dft_length and sample_rate must be positive");
    if (!(lo >= 0 && lo <= hi && hi <= (double)rate / 2))
        return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT,
                               "edges [%g, %g] Hz must satisfy 0 <= lower <= upper <= sample_rate / 2 = %g", (double)lo,
                               (double)hi, (double)rate / 2);
    int64_t spec = dft / 2 + 1;
    KN_CTX_PRM(c, signal_prepare, signal_prm, prm);
    kiln_dtype dt = prm->out_dtype;
    int64_t od[2] = {spec, mel};
    kn_tensor *y;
    KN_TRY(kn_ctx_output(c, 0, dt, 2, od, &y));
    int64_t *bin = malloc((size_t)(mel + 2) * sizeof *bin);
    double *w = calloc((size_t)(spec * mel), sizeof *w);
    if (!bin || !w) {
        free(bin);
        free(w);
        return KN_OOM();
    }
    /* mel = 2595 log10(1 + hz / 700): the edges' logarithm in float as the reference takes it */
    double lmel = (double)(2595.0f * log1pf(lo / 700.0f)) / log(10.0);
    double hmel = (double)(2595.0f * log1pf(hi / 700.0f)) / log(10.0);
    double mstep = (hmel - lmel) / (double)(mel + 2);
    for (int64_t i = 0; i < mel + 2; i++) {
        double hz = 700.0 * expm1(((double)i * mstep + lmel) / 2595.0 * log(10.0));
        bin[i] = (int64_t)floor((double)(dft + 1) * hz / (double)rate);
        if (bin[i] < 0) bin[i] = 0;
        if (bin[i] > spec - 1) bin[i] = spec - 1;
    }
    for (int64_t i = 0; i < mel; i++) {
        int64_t l = bin[i], m = bin[i + 1], h = bin[i + 2];
        if (m == l) w[m * mel + i] = 1;
        else
            for (int64_t j = l; j <= m; j++) w[j * mel + i] = (double)(j - l) / (double)(m - l);
        if (h > m)
            for (int64_t j = m; j < h; j++) w[j * mel + i] = (double)(h - j) / (double)(h - m);
    }
    for (int64_t i = 0; i < spec * mel; i++) kn_tensor_set_f64(y, i, w[i]);
    free(bin);
    free(w);
    return KILN_OK;
}

const kn_cpu_kernel kn_cpu_signal[] = {
    {"", "DFT", run_dft, supports_float, KN_KERNEL_OVERWRITES, KN_PARAMS(signal_prepare, signal_prm)},
    {"", "STFT", run_stft, supports_float, KN_KERNEL_OVERWRITES, KN_PARAMS(signal_prepare, signal_prm)},
    {"", "HannWindow", run_window, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(signal_prepare, signal_prm)},
    {"", "HammingWindow", run_window, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(signal_prepare, signal_prm)},
    {"", "BlackmanWindow", run_window, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(signal_prepare, signal_prm)},
    {"", "MelWeightMatrix", run_mel, NULL, 0, KN_PARAMS(signal_prepare, signal_prm)},
    {0},
};

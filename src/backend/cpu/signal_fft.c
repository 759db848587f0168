/* The FFT (see signal_fft.h). */
#include "backend/cpu/signal_fft.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_FACTORS = 64, MAX_DIRECT_RADIX = 31 };

struct kn_fft_plan {
    int64_t n;
    int inverse;
    int n_factors;
    int factors[MAX_FACTORS];
    kn_cpx *tw; /* tw[k] = e^{-+2 pi i k / n} */
    /* Bluestein: a length-m (power of two) plan, the chirp, and the FFT of its conjugate */
    int64_t m;
    kn_fft_plan *sub;
    kn_cpx *chirp, *bfft;
};

/* e^{sign 2 pi i k / n} with k reduced first, so large n keeps full accuracy */
static kn_cpx unit(int64_t k, int64_t n, int sign) {
    k %= n;
    double a = 2.0 * M_PI * (double)k / (double)n;
    return (kn_cpx){cos(a), sign * sin(a)};
}

static inline kn_cpx cmul(kn_cpx a, kn_cpx b) { return (kn_cpx){a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }

void kn_fft_plan_free(kn_fft_plan *p) {
    if (!p) return;
    free(p->tw);
    free(p->chirp);
    free(p->bfft);
    kn_fft_plan_free(p->sub);
    free(p);
}

kiln_status kn_fft_plan_new(int64_t n, int inverse, kn_fft_plan **out) {
    *out = NULL;
    if (n < 1) return kn_error(KILN_ERR_INVALID_ARGUMENT, "FFT length %lld must be positive", (long long)n);
    kn_fft_plan *p = calloc(1, sizeof *p);
    if (!p) return KN_OOM();
    p->n = n;
    p->inverse = inverse;
    int sign = inverse ? 1 : -1;
    /* factors: 4s first (fewer passes), then the primes */
    int64_t r = n;
    bool big_prime = false;
    while (r % 4 == 0 && p->n_factors < MAX_FACTORS) p->factors[p->n_factors++] = 4, r /= 4;
    for (int64_t f = 2; r > 1 && p->n_factors < MAX_FACTORS;) {
        if (f * f > r) f = r; /* r is prime */
        if (r % f == 0) {
            if (f > MAX_DIRECT_RADIX) big_prime = true;
            p->factors[p->n_factors++] = (int)(f > MAX_DIRECT_RADIX ? 0 : f);
            r /= f;
        } else f++;
    }
    if (big_prime || r > 1) {
        /* Bluestein: X_k = w_k * sum_j (x_j w_j) conj(w_{k-j}), w_j = e^{sign pi i j^2 / n},
         * the sum a circular convolution of length m >= 2n - 1 */
        p->n_factors = 0;
        int64_t m = 1;
        while (m < 2 * n - 1) m *= 2;
        p->m = m;
        p->chirp = malloc((size_t)n * sizeof *p->chirp);
        p->bfft = malloc((size_t)m * sizeof *p->bfft);
        kn_cpx *b = calloc((size_t)m, sizeof *b);
        kiln_status st = p->chirp && p->bfft && b ? kn_fft_plan_new(m, 0, &p->sub) : KN_OOM();
        if (st != KILN_OK) {
            free(b);
            kn_fft_plan_free(p);
            return st;
        }
        for (int64_t j = 0; j < n; j++) {
            /* j^2 mod 2n keeps the angle exact for large j */
            int64_t q = (int64_t)(((uint64_t)j * (uint64_t)j) % (uint64_t)(2 * n));
            double a = M_PI * (double)q / (double)n;
            p->chirp[j] = (kn_cpx){cos(a), sign * sin(a)};
        }
        for (int64_t j = 0; j < n; j++) {
            kn_cpx cw = {p->chirp[j].re, -p->chirp[j].im};
            b[j] = cw;
            if (j) b[m - j] = cw;
        }
        kn_cpx *scratch = malloc(kn_fft_scratch_len(p->sub) * sizeof *scratch + 1);
        if (!scratch) {
            free(b);
            kn_fft_plan_free(p);
            return KN_OOM();
        }
        kn_fft_exec(p->sub, b, p->bfft, scratch);
        free(scratch);
        free(b);
        *out = p;
        return KILN_OK;
    }
    p->tw = malloc((size_t)n * sizeof *p->tw);
    if (!p->tw) {
        kn_fft_plan_free(p);
        return KN_OOM();
    }
    for (int64_t k = 0; k < n; k++) p->tw[k] = unit(k, n, sign);
    *out = p;
    return KILN_OK;
}

size_t kn_fft_scratch_len(const kn_fft_plan *p) {
    if (p->sub) return (size_t)(3 * p->m) + kn_fft_scratch_len(p->sub);
    return 1;
}

/* out[0..n) = DFT of in[0], in[s], ..., in[(n-1)s]; fstride = N / n indexes the twiddles. */
static void fft_rec(const kn_fft_plan *p, kn_cpx *out, const kn_cpx *in, int64_t s, int64_t n, int64_t fstride, int fi) {
    if (n == 1) {
        out[0] = in[0];
        return;
    }
    int radix = p->factors[fi];
    int64_t m = n / radix;
    if (m == 1) /* the last stage reads its inputs itself: no call per element */
        for (int r = 0; r < radix; r++) out[r] = in[r * s];
    else
        for (int r = 0; r < radix; r++) fft_rec(p, out + r * m, in + r * s, s * radix, m, fstride * radix, fi + 1);
    const kn_cpx *tw = p->tw;
    int64_t N = p->n;
    if (radix == 2) {
        for (int64_t k = 0; k < m; k++) {
            kn_cpx a = out[k], b = cmul(out[k + m], tw[k * fstride]);
            out[k] = (kn_cpx){a.re + b.re, a.im + b.im};
            out[k + m] = (kn_cpx){a.re - b.re, a.im - b.im};
        }
        return;
    }
    if (radix == 4) {
        /* the fourth root of unity is -i forward, +i inverse */
        double sg = p->inverse ? 1.0 : -1.0;
        for (int64_t k = 0; k < m; k++) {
            kn_cpx a0 = out[k], a1 = cmul(out[k + m], tw[k * fstride]);
            kn_cpx a2 = cmul(out[k + 2 * m], tw[2 * k * fstride]), a3 = cmul(out[k + 3 * m], tw[3 * k * fstride]);
            kn_cpx s02 = {a0.re + a2.re, a0.im + a2.im}, d02 = {a0.re - a2.re, a0.im - a2.im};
            kn_cpx s13 = {a1.re + a3.re, a1.im + a3.im}, d13 = {a1.re - a3.re, a1.im - a3.im};
            kn_cpx jd13 = {-sg * d13.im, sg * d13.re}; /* (sg i) * d13 */
            out[k] = (kn_cpx){s02.re + s13.re, s02.im + s13.im};
            out[k + m] = (kn_cpx){d02.re + jd13.re, d02.im + jd13.im};
            out[k + 2 * m] = (kn_cpx){s02.re - s13.re, s02.im - s13.im};
            out[k + 3 * m] = (kn_cpx){d02.re - jd13.re, d02.im - jd13.im};
        }
        return;
    }
    kn_cpx t[MAX_DIRECT_RADIX];
    for (int64_t k = 0; k < m; k++) {
        for (int r = 0; r < radix; r++) t[r] = cmul(out[k + r * m], tw[(r * k * fstride) % N]);
        for (int q = 0; q < radix; q++) {
            kn_cpx acc = t[0];
            for (int r = 1; r < radix; r++) {
                kn_cpx w = tw[((int64_t)((r * q) % radix) * m * fstride) % N];
                kn_cpx v = cmul(t[r], w);
                acc.re += v.re;
                acc.im += v.im;
            }
            out[k + q * m] = acc;
        }
    }
}

void kn_fft_exec(const kn_fft_plan *p, const kn_cpx *in, kn_cpx *out, kn_cpx *scratch) {
    if (!p->sub) {
        fft_rec(p, out, in, 1, p->n, 1, 0);
        return;
    }
    int64_t n = p->n, m = p->m;
    kn_cpx *a = scratch, *fa = scratch + m, *conv = scratch + 2 * m, *sub_scratch = scratch + 3 * m;
    for (int64_t j = 0; j < n; j++) a[j] = cmul(in[j], p->chirp[j]);
    for (int64_t j = n; j < m; j++) a[j] = (kn_cpx){0, 0};
    kn_fft_exec(p->sub, a, fa, sub_scratch);
    for (int64_t j = 0; j < m; j++) {
        kn_cpx v = cmul(fa[j], p->bfft[j]);
        fa[j] = (kn_cpx){v.re, -v.im}; /* conjugate: an inverse FFT through the forward plan */
    }
    kn_fft_exec(p->sub, fa, conv, sub_scratch);
    double inv_m = 1.0 / (double)m;
    for (int64_t k = 0; k < n; k++) {
        kn_cpx v = {conv[k].re * inv_m, -conv[k].im * inv_m};
        out[k] = cmul(v, p->chirp[k]);
    }
}

/* A complex FFT of any length, in double precision: mixed-radix Cooley-Tukey (decimation in time)
 * over the length's prime factors, and Bluestein's chirp-z algorithm (through a power-of-two FFT)
 * when a prime factor is large. kiln's own: FFTW is GPL, and the few other FFT libraries Debian
 * has would be a dependency for a few hundred lines. */
#ifndef KN_CPU_SIGNAL_FFT_H
#define KN_CPU_SIGNAL_FFT_H

#include "util/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kn_cpx {
    double re, im;
} kn_cpx;

typedef struct kn_fft_plan kn_fft_plan;

/* A plan for length n >= 1; inverse uses e^{+2 pi i jk/n} (no 1/n scaling). */
kiln_status kn_fft_plan_new(int64_t n, int inverse, kn_fft_plan **out);
void kn_fft_plan_free(kn_fft_plan *p);
/* Scratch (in kn_cpx elements) that kn_fft_exec needs. */
size_t kn_fft_scratch_len(const kn_fft_plan *p);
/* out = FFT(in), both of length n, not overlapping. The plan is read only, so threads may share
 * it, each with its own scratch. */
void kn_fft_exec(const kn_fft_plan *p, const kn_cpx *in, kn_cpx *out, kn_cpx *scratch);

#endif

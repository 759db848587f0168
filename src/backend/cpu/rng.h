/* The CPU kernels' random numbers: MT19937 and the conversions numpy's legacy RandomState uses
 * (53-bit doubles, the polar Gaussian, the inversion binomial), so that a seeded node draws the
 * stream numpy would draw for the same seed. ONNX does not require matching numpy; doing so makes
 * seeded models reproducible across kiln and the reference implementation. */
#ifndef KN_CPU_RNG_H
#define KN_CPU_RNG_H

#include <stdint.h>

typedef struct kn_rng {
    uint32_t mt[624];
    int i;
    int has_gauss; /* the polar method makes two normals at a time; numpy keeps the second */
    double gauss;
} kn_rng;

/* Seeds like numpy.random.RandomState(seed) for a 32-bit seed. */
void kn_rng_seed(kn_rng *r, uint32_t seed);
/* Seeds from the 'seed' attribute (a float in ONNX) when present, else from the clock and a
 * process-wide counter (so two unseeded nodes differ). */
void kn_rng_seed_attr(kn_rng *r, int has_seed, float seed);
uint32_t kn_rng_u32(kn_rng *r);
/* Uniform in [0, 1) with 53 random bits (numpy's random_sample). */
double kn_rng_uniform(kn_rng *r);
/* Standard normal (numpy's legacy gauss: polar Box-Muller). */
double kn_rng_normal(kn_rng *r);
/* One draw of Binomial(1, p) with numpy's legacy algorithm (inversion). */
int kn_rng_bernoulli(kn_rng *r, double p);

#endif

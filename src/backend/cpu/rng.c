/* MT19937 and numpy-compatible conversions (see rng.h). */
#include "backend/cpu/rng.h"

#include <math.h>
#include <stdatomic.h>
#include <time.h>

void kn_rng_seed(kn_rng *r, uint32_t s) {
    r->mt[0] = s;
    for (int i = 1; i < 624; i++) r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
    r->i = 624;
    r->has_gauss = 0;
    r->gauss = 0;
}

void kn_rng_seed_attr(kn_rng *r, int has_seed, float seed) {
    if (has_seed) {
        /* numpy: RandomState(int(seed)); negative or huge seeds wrap to 32 bits here */
        double d = (double)seed;
        int64_t s = isfinite(d) ? (int64_t)d : 0;
        kn_rng_seed(r, (uint32_t)s);
        return;
    }
    static atomic_uint counter;
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    uint32_t s = (uint32_t)ts.tv_nsec ^ (uint32_t)ts.tv_sec * 2654435761u;
    s ^= (atomic_fetch_add(&counter, 1u) + 1u) * 0x9e3779b9u;
    kn_rng_seed(r, s);
}

uint32_t kn_rng_u32(kn_rng *r) {
    if (r->i >= 624) {
        for (int k = 0; k < 624; k++) {
            uint32_t y = (r->mt[k] & 0x80000000u) | (r->mt[(k + 1) % 624] & 0x7fffffffu);
            r->mt[k] = r->mt[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        r->i = 0;
    }
    uint32_t y = r->mt[r->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

double kn_rng_uniform(kn_rng *r) {
    uint32_t a = kn_rng_u32(r) >> 5, b = kn_rng_u32(r) >> 6;
    return ((double)a * 67108864.0 + (double)b) * (1.0 / 9007199254740992.0);
}

double kn_rng_normal(kn_rng *r) {
    if (r->has_gauss) {
        r->has_gauss = 0;
        return r->gauss;
    }
    double x1, x2, s;
    do {
        x1 = 2.0 * kn_rng_uniform(r) - 1.0;
        x2 = 2.0 * kn_rng_uniform(r) - 1.0;
        s = x1 * x1 + x2 * x2;
    } while (s >= 1.0 || s == 0.0);
    double f = sqrt(-2.0 * log(s) / s);
    r->gauss = f * x1;
    r->has_gauss = 1;
    return f * x2;
}

/* numpy's inversion algorithm for Binomial(n, p), p <= 0.5, at n = 1 */
static int binomial1_inversion(kn_rng *r, double p) {
    double q = 1.0 - p, qn = exp(log(q)), np1 = p;
    double bound = fmin(1.0, np1 + 10.0 * sqrt(np1 * q + 1.0));
    int x = 0;
    double px = qn, u = kn_rng_uniform(r);
    while (u > px) {
        x++;
        if (x > bound) {
            x = 0;
            px = qn;
            u = kn_rng_uniform(r);
        } else {
            u -= px;
            px = ((1 - x + 1) * p * px) / (x * q);
        }
    }
    return x;
}

int kn_rng_bernoulli(kn_rng *r, double p) {
    if (!(p > 0)) return 0; /* p == 0 (and NaN) draws nothing, as numpy */
    if (p <= 0.5) return binomial1_inversion(r, p);
    return 1 - binomial1_inversion(r, 1.0 - (p > 1 ? 1 : p));
}

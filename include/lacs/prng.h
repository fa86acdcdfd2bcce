/* lacs: the counter-based PRNG of the generators (SPEC.md 6).
 *
 * SplitMix64 (Steele, Lea, Flood 2014): state += 0x9e3779b97f4a7c15, then a
 * fixed mix. Every draw uses integer operations and IEEE additions only, no
 * libm, so the numbers are bit-identical on any IEEE machine and compiler.
 */
#ifndef LACS_PRNG_H
#define LACS_PRNG_H

#include <stdint.h>

typedef struct {
    uint64_t state;
} lacs_rng;

lacs_rng lacs_rng_seed(uint64_t seed);
uint64_t lacs_rng_next(lacs_rng *r);
/* Uniform on [0, 1): the top 53 bits times 2^-53 (exact). */
double lacs_rng_uniform(lacs_rng *r);
/* Uniform on [lo, hi). */
double lacs_rng_range(lacs_rng *r, double lo, double hi);
/* Approximately standard normal: the sum of 12 uniforms minus 6 (Irwin-Hall;
 * mean 0, variance 1, support [-6, 6]). */
double lacs_rng_normal12(lacs_rng *r);

#endif

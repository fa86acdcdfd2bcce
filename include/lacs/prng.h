/* lacs: the counter-based PRNG of the generators (SPEC.md 6 and 10.3).
 *
 * SplitMix64 (Steele, Lea, Flood 2014): state += 0x9e3779b97f4a7c15, then a
 * fixed mix of the state (so draw i is a pure function of seed + i: counter
 * based). Every draw uses integer operations and IEEE additions and
 * multiplications only, no libm, so the numbers are bit-identical on any
 * IEEE machine that evaluates double in double (FLT_EVAL_METHOD 0, checked
 * when prng.c is compiled) without FMA contraction.
 */
#ifndef LACS_PRNG_H
#define LACS_PRNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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

/* FNV-1a, 64 bits, of a NUL-terminated string. */
uint64_t lacs_fnv1a64(const char *text);
/* The stream of the tensor `name` of a case with seed `seed`: a generator
 * seeded with the first SplitMix64 output of seed ^ fnv1a64(name), so every
 * tensor draws independently of the others and of their order. */
lacs_rng lacs_rng_stream(uint64_t seed, const char *name);
/* RetNet's decay of head h, log(1 - 2^-(5 + h)), by its power series (no libm). */
double lacs_retnet_log_decay(int64_t h);

#ifdef __cplusplus
}
#endif

#endif

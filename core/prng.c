/* SplitMix64 and the draws built on it (lacs/prng.h, SPEC.md 6 and 10.3). */
#include <float.h>

#include "lacs/prng.h"

/* The draws are bit-reproducible only if double arithmetic is evaluated in
 * double (not x87's 80 bits) and without contraction into FMAs (the Makefile
 * passes -ffp-contract=off). Refuse to build where the first does not hold. */
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "lacs's generators need FLT_EVAL_METHOD == 0 (e.g. x86-64 SSE2, AArch64) for bit-reproducible inputs"
#endif

lacs_rng lacs_rng_seed(uint64_t seed)
{
    lacs_rng r = {seed};
    return r;
}

uint64_t lacs_rng_next(lacs_rng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double lacs_rng_uniform(lacs_rng *r)
{
    return (double)(lacs_rng_next(r) >> 11) * 0x1.0p-53;
}

double lacs_rng_range(lacs_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * lacs_rng_uniform(r);
}

double lacs_rng_normal12(lacs_rng *r)
{
    double sum = 0;
    for (int i = 0; i < 12; i++)
        sum += lacs_rng_uniform(r);
    return sum - 6;
}

uint64_t lacs_fnv1a64(const char *text)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}

lacs_rng lacs_rng_stream(uint64_t seed, const char *name)
{
    lacs_rng mixer = lacs_rng_seed(seed ^ lacs_fnv1a64(name));
    return lacs_rng_seed(lacs_rng_next(&mixer));
}

/* log(1 - x) = -(x + x^2/2 + x^3/3 + ...) for x = 2^-(5 + h) <= 2^-5: each
 * term is at most 2^-5 of the one before, so 40 terms leave less than 2^-200
 * relative, and the sum, added from the smallest term up, uses only IEEE
 * operations (no libm, whose log1p need not be correctly rounded). */
double lacs_retnet_log_decay(int64_t h)
{
    double x = 1;
    for (int64_t i = 0; i < 5 + h; i++)
        x *= 0.5;
    double powers[40], sum = 0;
    powers[0] = x;
    for (int n = 1; n < 40; n++)
        powers[n] = powers[n - 1] * x;
    for (int n = 39; n >= 0; n--)
        sum += powers[n] / (n + 1);
    return -sum;
}

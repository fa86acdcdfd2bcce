/* SplitMix64 and the draws built on it (lacs/prng.h, SPEC.md 6). */
#include "lacs/prng.h"

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

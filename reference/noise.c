/* The rounding-noise model of the tolerance gauge (SPEC.md 11.2).
 *
 * A legitimate implementation keeps its recurrent state in binary32 and rounds
 * it at every token, in either tier (SPEC.md 11.1); the gauge
 * (tolerance/gauge.c) models that by running the reference with every state
 * element multiplied by (1 +- delta), delta binary32's share of the tier's u,
 * the sign drawn at random, after each update (lacs_internal_state_add_outer calls
 * lacs_internal_perturb_state). Off unless the gauge turns it on for its own
 * thread; never on when a golden is computed.
 */
#include "internal.h"

static _Thread_local int noise_on;
static _Thread_local lacs_rng noise_rng;
static _Thread_local double noise_delta, noise_delta_stored;

void lacs_internal_state_noise(int on, uint64_t seed, double delta, double delta_stored)
{
    noise_on = on;
    noise_rng = lacs_rng_seed(seed);
    noise_delta = delta;
    noise_delta_stored = delta_stored;
}

void lacs_internal_perturb_state(double *x, int64_t n)
{
    if (!noise_on)
        return;
    /* factor[bit], not a branch on a random bit (mispredicted half the time):
     * the same products, several times faster */
    const double factor[2] = {1 - noise_delta, 1 + noise_delta};
    lacs_rng rng = noise_rng;
    for (int64_t i = 0; i < n; i += 64) {
        uint64_t bits = lacs_rng_next(&rng);
        const int64_t end = n - i < 64 ? n : i + 64;
        for (int64_t j = i; j < end; j++, bits >>= 1)
            x[j] *= factor[bits & 1];
    }
    noise_rng = rng;
}

/* A value an implementation may store in the tier's own precision between two
 * stages (a bf16 output read back by a backward, SPEC.md 11.1): moved by
 * 1 +- the data's delta (the tier's u), not binary32's. */
void lacs_internal_perturb_stored(double *x, int64_t n)
{
    if (!noise_on)
        return;
    for (int64_t i = 0; i < n; i += 64) {
        uint64_t bits = lacs_rng_next(&noise_rng);
        for (int64_t j = i; j < n && j < i + 64; j++)
            x[j] *= (bits >> (j - i)) & 1 ? 1 + noise_delta_stored : 1 - noise_delta_stored;
    }
}

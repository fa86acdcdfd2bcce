/* The gauge's state noise (reference/noise.c, SPEC.md 11.2): the reference's
 * kernels perturb the state they carry while it is on, and the gauge
 * (tolerance/gauge.c) turns it on for its own thread. Internal to liblacs:
 * not installed.
 */
#ifndef LACS_REFERENCE_NOISE_H
#define LACS_REFERENCE_NOISE_H

#include <stdint.h>

/* While on (per thread), lacs_internal_perturb_state multiplies each element
 * by 1 +- delta (binary32's rounding, in the tier's units) and
 * lacs_internal_perturb_stored by 1 +- delta_stored (a value stored in the
 * tier's precision). */
void lacs_internal_state_noise(int on, uint64_t seed, double delta, double delta_stored);
void lacs_internal_perturb_state(double *x, int64_t n);
void lacs_internal_perturb_stored(double *x, int64_t n);

#endif

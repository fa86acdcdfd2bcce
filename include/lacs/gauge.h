/* lacs: the per-element gauge of the tolerance model (SPEC.md 11.2).
 *
 * For each golden y the generator stores a gauge g of the same shape (F32
 * tensor `gauge.<output>`): the size of the rounding error a legitimate
 * implementation of the tier makes in each element, in units of the tier's
 * unit roundoff. The checker (lacs/check.h) allows c u L (g + floor).
 */
#ifndef LACS_GAUGE_H
#define LACS_GAUGE_H

#include <stdint.h>

#include "lacs/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The constants of the tolerance model (SPEC.md 11.3 gives each its reason),
 * written into every vector's metadata by the generator; the checker reads
 * them from there. c_n: the gauge predicts a block's error up to a factor of
 * order one (the zoo's worst legitimate block: 0.22 of the bound). c_e = 4 c_n:
 * the largest of many errors over their RMS, and the 16-sample gauge's noise.
 * The floor, per tier: fp32 c_n / c_e (no element held tighter than its block's
 * RMS allowance: autograd's 1 - tanh^2 VJPs), bf16 1/8 (the 16-sample noise of
 * fla's bf16 intermediates, while half outputs still fail the tier's most
 * ill-conditioned outputs). */
/* The tolerance model generator 3 writes (spec 1.4, SPEC.md 11.3). Its
 * formula is generator 2's ("lacs-tolerance/1", spec 1.3); the element floor
 * is per tier. The checker still reads /1 vectors with /1's constants. */
#define LACS_TOLERANCE_MODEL "lacs-tolerance/2"

#define LACS_TOLERANCE_NORMWISE_FACTOR 6.0
#define LACS_TOLERANCE_ELEMENTWISE_FACTOR 24.0
#define LACS_TOLERANCE_FLOOR_FRACTION_FP32 0.25
#define LACS_TOLERANCE_FLOOR_FRACTION_BF16 0.125

/* Samples of the perturbation and its relative size (SPEC.md 11.2). */
#define LACS_GAUGE_SAMPLES 16
#define LACS_GAUGE_DELTA 0x1p-30
/* exp's error on a log decay, in units of u32: one ulp of a factor in [0.5, 1)
 * is up to 2 u32 relative (SPEC.md 11.2). */
#define LACS_GAUGE_EXP_ERROR 2.0
/* u32 / u_bf16: binary32's roundings (gate sums, exp, the state) in units of
 * the bf16 tier's u, 2^-24 / 2^-8. */
#define LACS_GAUGE_BINARY32_IN_BF16 0x1p-16

/* The gauge of every output of `op` on `inputs` with `params`: for each of
 * LACS_GAUGE_SAMPLES runs of the reference (double), every floating-point input
 * element but the log decays and the parameters scale, eps and cap are
 * multiplied by 1 +- delta (random signs from the stream of `seed`); the log
 * decays are moved by the errors of binary32 prefix sums and of exp (see
 * gauge.c); every element of a recurrent state is multiplied by 1 +- delta
 * after each token (reference/noise.c). The binary32 terms are scaled by
 * LACS_GAUGE_BINARY32_IN_BF16 unless `fp32` (the tier). Then, per element,
 * g = sqrt(mean_s ((y_s - y) / delta)^2 + y^2):
 * the spread of the perturbed results plus one rounding of the output itself;
 * 0 where y is not finite. `expected` are the goldens (F64, as computed);
 * gauges[i] receives lacs_tensor_count(&expected[i]) values. */
int lacs_gauge_compute(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params,
                       int n_params, const lacs_tensor *expected, int n_outputs, int fp32, uint64_t seed,
                       double **gauges);

/* The length factor L of output `output` of `op` (SPEC.md 11.3): in the fp32
 * tier sqrt(n), n the longest sum that makes one element (K for the recurrent
 * ops and the states, max(K, the longest sequence) for attention, dim for the
 * norms that reduce a row, rows for dweight and dbias, rows * dim for dalpha,
 * dC and dcap, 1 for an element-wise output); 1 in the bf16 tier, whose
 * error is that of storing values in bf16, not of summing in fp32. */
double lacs_gauge_length_factor(const char *op, const char *output, int fp32, int64_t K, int64_t longest_sequence,
                                int64_t rows, int64_t dim);

#ifdef __cplusplus
}
#endif

#endif

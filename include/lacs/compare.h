/* lacs: comparing an output with its golden, head by head (SPEC.md 5.1).
 *
 * A whole-tensor error lets one bad head or chunk hide in the average (fla's
 * single RMS ratio); lacs measures each (sequence, head) on its own and reports
 * the worst. The checker's tolerance model (lacs/check.h, SPEC.md 11) uses
 * the same blocks.
 */
#ifndef LACS_COMPARE_H
#define LACS_COMPARE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x and ref laid out [outer, T, heads, width] (o: [B, T, HV, V]; a state
 * [N, HV, K, V] is outer = N, T = 1, width = K * V). For each (outer, head),
 * or (sequence, head) when cu_seqlens (N + 1 offsets into T, outer = 1) is
 * given, the normwise relative error ||x - ref||_F / ||ref||_F over its T x width
 * block, or ||x - ref||_F where ||ref||_F = 0. Returns the largest; NaN if any
 * block holds a NaN, +inf if x is infinite where ref is finite. worst_block, if
 * not NULL, receives the index (outer or sequence) * heads + head of the worst. */
double lacs_normwise_error(const double *x, const double *ref, int64_t outer, int64_t T,
                           int64_t heads, int64_t width, const int64_t *cu_seqlens,
                           int64_t n_seqs, int64_t *worst_block);

#ifdef __cplusplus
}
#endif

#endif

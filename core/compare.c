/* Head-by-head normwise comparison (SPEC.md 5.1): the one implementation,
 * used by the tests and the self-check; the checker's blocks are the same
 * (lacs/check.h). */
#include <math.h>
#include <stddef.h>

#include "lacs/compare.h"

static double block_error(const double *x, const double *ref, int64_t t0, int64_t t1,
                          int64_t heads, int64_t width, int64_t head)
{
    double diff2 = 0, ref2 = 0;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t c = 0; c < width; c++) {
            int64_t i = (t * heads + head) * width + c;
            if (isnan(x[i]) || isnan(ref[i]))
                return NAN;
            if (isinf(x[i]) && isfinite(ref[i]))
                return INFINITY;
            double diff = x[i] - ref[i];
            diff2 += diff * diff;
            ref2 += ref[i] * ref[i];
        }
    return ref2 > 0 ? sqrt(diff2 / ref2) : sqrt(diff2);
}

double lacs_normwise_error(const double *x, const double *ref, int64_t outer, int64_t T,
                           int64_t heads, int64_t width, const int64_t *cu_seqlens,
                           int64_t n_seqs, int64_t *worst_block)
{
    const int64_t blocks = cu_seqlens ? n_seqs : outer;
    double worst = 0;
    int64_t worst_at = 0;
    for (int64_t n = 0; n < blocks; n++) {
        const int64_t base = cu_seqlens ? 0 : n * T * heads * width;
        const int64_t t0 = cu_seqlens ? cu_seqlens[n] : 0, t1 = cu_seqlens ? cu_seqlens[n + 1] : T;
        for (int64_t h = 0; h < heads; h++) {
            double err = block_error(x + base, ref + base, t0, t1, heads, width, h);
            if (isnan(err) || err > worst) {
                worst = err;
                worst_at = n * heads + h;
                if (isnan(err))
                    goto done;
            }
        }
    }
done:
    if (worst_block)
        *worst_block = worst_at;
    return worst;
}

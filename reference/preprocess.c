/* q/k preprocessing, kept outside the ops (SPEC.md section 3): L2
 * normalisation in both conventions seen in the field, and the sigmoid used
 * for beta. E2: an L2-normalised k with beta = sigmoid(.) puts the delta
 * rule's eigenvalues in (0, 1]. */
#include "internal.h"

/* sqrt_eps (fla's in-kernel form): y = x / sqrt(sum x^2 + eps).
 * max_eps (torch F.normalize, ggml): y = x / max(||x||, eps).
 * The two differ by O(eps / ||x||^2) for ordinary x, and completely near 0. */
int REF(l2norm)(const double *x, int64_t rows, int64_t dim, double eps,
                lacs_l2norm_convention convention, real *y)
{
    if (rows < 0 || dim < 1)
        return lacs_internal_error(LACS_ERR_SHAPE, "l2norm", "rows = %lld must be >= 0 and dim = %lld >= 1",
                                   (long long)rows, (long long)dim);
    if (!(eps >= 0))
        return lacs_internal_error(LACS_ERR_PARAM, "l2norm", "eps = %g must be >= 0", eps);
    if (convention != LACS_L2NORM_SQRT_EPS && convention != LACS_L2NORM_MAX_EPS)
        return lacs_internal_error(LACS_ERR_PARAM, "l2norm", "unknown convention %d", (int)convention);
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * dim;
        real sum_sq = 0;
        for (int64_t i = 0; i < dim; i++)
            sum_sq += (real)xr[i] * xr[i];
        real denom = convention == LACS_L2NORM_SQRT_EPS ? sqrt(sum_sq + eps) : fmax(sqrt(sum_sq), (real)eps);
        for (int64_t i = 0; i < dim; i++) /* 0 / 0 only when x = 0 and eps = 0: give 0 */
            y[r * dim + i] = denom > 0 ? xr[i] / denom : 0;
    }
    return LACS_OK;
}

/* sigmoid(x) = 1 / (1 + e^{-x}); for x < 0 the equal e^x / (1 + e^x) keeps
 * e^{-x} from overflowing, so both tails are exact to rounding. */
void REF(sigmoid)(const double *x, int64_t n, real *y)
{
    for (int64_t i = 0; i < n; i++) {
        real xi = x[i];
        if (xi >= 0) {
            y[i] = 1 / (1 + exp(-xi));
        } else {
            real e = exp(xi);
            y[i] = e / (1 + e);
        }
    }
}

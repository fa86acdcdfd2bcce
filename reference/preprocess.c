/* q/k preprocessing, kept outside the ops (SPEC.md section 3): L2
 * normalisation in both conventions seen in the field, and the sigmoid used
 * for beta. E2: an L2-normalised k with beta = sigmoid(.) puts the delta
 * rule's eigenvalues in (0, 1]. */
#include "internal.h"

/* sqrt_eps (fla's in-kernel form): y = x / sqrt(sum x^2 + eps).
 * max_eps (torch F.normalize, ggml): y = x / max(||x||, eps).
 * The two differ by O(eps / ||x||^2) for ordinary x, and completely near 0. */
int lacs_ref_l2norm(const double *x, int64_t rows, int64_t dim, double eps,
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
        /* A NaN in the row makes the whole row NaN (SPEC.md 3): fmax would
         * otherwise drop the NaN norm in favour of eps, and denom > 0 would
         * turn it into the 0 of the zero row. */
        if (isnan(sum_sq))
            denom = sum_sq;
        for (int64_t i = 0; i < dim; i++) /* 0 / 0 only when x = 0 and eps = 0: give 0 */
            y[r * dim + i] = isnan(denom) ? denom : denom > 0 ? xr[i] / denom : 0;
    }
    return LACS_OK;
}

/* The VJP of l2norm, dx = J^T dy with J symmetric, in the convention of the
 * forward pass (same checks, same unscaled sum of squares):
 *   sqrt_eps: with n2 = sum x^2 + eps, y = x / sqrt(n2) and
 *             dx = (dy - x (x.dy) / n2) / sqrt(n2); eps enters only through n2.
 *   max_eps:  ||x|| >= eps: y = x / ||x||, dx = (dy - y (y.dy)) / ||x||;
 *             ||x|| <  eps: y = x / eps is linear, dx = dy / eps.
 * At ||x|| = eps the function has a kink; max_eps takes the normalising side,
 * as torch's autograd does (clamp_min passes the gradient where norm >= eps).
 * Where the forward pass defines y = 0 by convention (x = 0 with eps = 0,
 * either convention), dx = 0. Each row reads all of x and dy before writing
 * dx, so in the double build dx may alias x or dy. */
int lacs_ref_l2norm_vjp(const double *x, const double *dy, int64_t rows, int64_t dim, double eps,
                        lacs_l2norm_convention convention, real *dx)
{
    if (rows < 0 || dim < 1)
        return lacs_internal_error(LACS_ERR_SHAPE, "l2norm_vjp",
                                   "rows = %lld must be >= 0 and dim = %lld >= 1", (long long)rows,
                                   (long long)dim);
    if (rows > 0 && (!x || !dy || !dx))
        return lacs_internal_error(LACS_ERR_INPUT, "l2norm_vjp", "x, dy and dx are required");
    if (!(eps >= 0))
        return lacs_internal_error(LACS_ERR_PARAM, "l2norm_vjp", "eps = %g must be >= 0", eps);
    if (convention != LACS_L2NORM_SQRT_EPS && convention != LACS_L2NORM_MAX_EPS)
        return lacs_internal_error(LACS_ERR_PARAM, "l2norm_vjp", "unknown convention %d", (int)convention);
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * dim, *dyr = dy + r * dim;
        real *dxr = dx + r * dim;
        real sum_sq = 0, x_dot_dy = 0;
        for (int64_t i = 0; i < dim; i++) {
            sum_sq += (real)xr[i] * xr[i];
            x_dot_dy += (real)xr[i] * dyr[i];
        }
        /* dx_i = (dy_i - x_i * along) / denom, or dy_i / denom when along = 0 */
        real along = 0, denom = 0;
        if (convention == LACS_L2NORM_SQRT_EPS) {
            real n2 = sum_sq + eps;
            if (n2 > 0) {
                along = x_dot_dy / n2;
                denom = sqrt(n2);
            }
        } else {
            real norm = sqrt(sum_sq);
            if (norm > 0 && norm >= eps) {
                along = x_dot_dy / sum_sq;
                denom = norm;
            } else if (eps > 0) {
                denom = eps;
            }
        }
        /* A NaN in x or dy makes the whole row NaN (SPEC.md 4.18), as in the forward pass. */
        if (isnan(sum_sq) || isnan(x_dot_dy))
            denom = along = NAN;
        for (int64_t i = 0; i < dim; i++)
            dxr[i] = isnan(denom) ? denom : denom > 0 ? (dyr[i] - xr[i] * along) / denom : 0;
    }
    return LACS_OK;
}

/* sigmoid(x) = 1 / (1 + e^{-x}); for x < 0 the equal e^x / (1 + e^x) keeps
 * e^{-x} from overflowing, so both tails are exact to rounding. */
void lacs_ref_sigmoid(const double *x, int64_t n, real *y)
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

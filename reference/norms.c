/* Normalisation and the element-wise ops proposed to replace it, with their
 * gradients (SPEC.md 4.14-4.18). Source: "Finding replacements for
 * Normalization through gradient approximation" (kexue.fm/archives/10831,
 * seed 004), labels N1-N6:
 *
 *   N2  RMSNorm y = x / ||x||_RMS;
 *   N3  its Jacobian (1/||x||_RMS)(I - y y^T / d);
 *   N4  keeping only N3's diagonal with ||x||_RMS = rho held constant gives
 *       dy/dx = (1/rho)(1 - y^2/d), solved by sqrt(d) tanh(x / (rho sqrt(d))):
 *       N1, DyT, weight (.) tanh(alpha x) + bias;
 *   N5  replacing rho by x/y instead gives dy/dx = (y/x)(1 - y^2/d), solved by
 *       sqrt(d) x / sqrt(x^2 + C): DyISRU;
 *   N6  softcap(x, cap) = cap tanh(x / cap), a smooth clip to [-cap, cap].
 *
 * Every op takes double inputs and writes `real`; rows are [rows, dim] with
 * weight and bias per column (NULL: no multiplication, no addition). The
 * formulas are rearranged only where the plain form overflows, underflows or
 * cancels; each such place says why. */
#include "internal.h"

static int check_rows(const char *op, int64_t rows, int64_t dim)
{
    if (rows < 0 || dim < 1)
        return lacs_internal_error(LACS_ERR_SHAPE, op, "rows = %lld must be >= 0 and dim = %lld >= 1",
                                   (long long)rows, (long long)dim);
    return LACS_OK;
}

/* Pointers are checked only when there is an element to read or write, so an
 * empty call may pass NULL everywhere. */
static int check_pointers(const char *op, int64_t n, int present, const char *names)
{
    if (n > 0 && !present)
        return lacs_internal_error(LACS_ERR_INPUT, op, "%s are required", names);
    return LACS_OK;
}

static int check_eps(const char *op, double eps)
{
    if (!(eps >= 0) || isinf(eps))
        return lacs_internal_error(LACS_ERR_PARAM, op, "eps = %g must be finite and >= 0", eps);
    return LACS_OK;
}

static int check_alpha(const char *op, double alpha)
{
    if (!isfinite(alpha))
        return lacs_internal_error(LACS_ERR_PARAM, op, "alpha = %g must be finite", alpha);
    return LACS_OK;
}

static int check_C(const char *op, double C)
{
    if (!(C >= 0) || isinf(C))
        return lacs_internal_error(LACS_ERR_PARAM, op, "C = %g must be finite and >= 0", C);
    return LACS_OK;
}

static int check_cap(const char *op, double cap)
{
    if (!(cap > 0) || isinf(cap))
        return lacs_internal_error(LACS_ERR_PARAM, op, "cap = %g must satisfy 0 < cap < inf", cap);
    return LACS_OK;
}

/* weight[c] v + bias[c], the learned affine step after DyT's and DyISRU's
 * element-wise function (N1, N5). An absent weight or bias is no operation,
 * not 1 or +0: an explicit +0 bias would turn -0 into +0 (SPEC.md 4.14). */
static real per_channel_affine(real v, const double *weight, const double *bias, int64_t c)
{
    if (weight)
        v *= weight[c];
    if (bias)
        v += bias[c];
    return v;
}

/* Sets the first n entries of a VJP sum output to 0 (NULL: not wanted). */
static void zero(real *a, int64_t n)
{
    if (a)
        for (int64_t i = 0; i < n; i++)
            a[i] = 0;
}

/* sech^2(u) = 1 - tanh^2(u), the derivative of tanh (N1, N4, N6), written
 * 4 e / (1 + e)^2 with e = exp(-2|u|). 1 - tanh^2 rounds to 0 as soon as
 * tanh(u) rounds to +-1 (|u| > 19 in double) while the true value,
 * about 4 e^{-2|u|}, stays representable up to |u| ~ 372; 1 / cosh^2 overflows
 * cosh^2 from |u| ~ 355. This form has no subtraction and no overflow, is a
 * few ulps from the true value over the whole range, and gives 1 at u = 0,
 * 0 at u = +-inf and NaN for NaN. */
static real sech2(real u)
{
    real e = exp(-2 * fabs(u));
    return 4 * e / ((1 + e) * (1 + e));
}

/* u sech^2(u) with its limit 0 at u = +-inf (inf * 0 would be NaN). When
 * sech^2 underflows to 0 for finite u the product has underflowed too. */
static real times_sech2(real u, real s2) { return s2 == 0 ? 0 : u * s2; }

/* ---- N2, N3: RMSNorm ---- */

/* rms = sqrt(mean(x^2) + eps) as s * r, s a power of two near the larger of
 * max|x_i| and sqrt(eps) (that maximum is in [s, 2s)), and
 * r = sqrt(mean((x/s)^2) + eps/s^2) in [1/sqrt(dim), sqrt(8)).
 * Scaling makes x^2 neither overflow (|x| > 1.3e154 in double) nor underflow
 * (|x| < 1.5e-154 loses digits, |x| < 1.5e-162 reads as zero): x/s is exact
 * (s is a power of two), and whatever underflows in the scaled sum is below
 * 2^-1022 relative to a sum >= 1/dim. The row's scale: s = 0 for a zero row
 * with eps = 0 (rms = 0); s = 1, r = NaN when the row has a NaN; s = 1,
 * r = inf when it has an infinity (then y = x / inf: 0 or NaN, as IEEE). */
typedef struct {
    real s, r;
} row_rms;

static row_rms rms_of(const double *x, int64_t dim, double eps)
{
    real amax = 0;
    int has_nan = 0;
    for (int64_t i = 0; i < dim; i++) {
        real a = fabs((real)x[i]);
        if (isnan(a))
            has_nan = 1;
        else if (a > amax)
            amax = a;
    }
    if (has_nan)
        return (row_rms){1, NAN};
    if (isinf(amax))
        return (row_rms){1, INFINITY};
    real big = fmax(amax, sqrt((real)eps));
    if (big == 0)
        return (row_rms){0, 0};
    real s = ldexp((real)1, ilogb(big));
    real sum_sq = 0;
    for (int64_t i = 0; i < dim; i++) {
        real xs = x[i] / s;
        sum_sq += xs * xs;
    }
    return (row_rms){s, sqrt(sum_sq / (real)dim + (eps / s) / s)};
}

/* x_i / rms without forming s * r, which could overflow where the quotient does not. */
static real over_rms(real v, row_rms m) { return v / m.s / m.r; }

/* N2. A zero row with eps = 0 normalises to +0 (then times weight), as H3's
 * rms_normalize: x/rms has no limit at x = 0 (each direction gives its own
 * unit vector), so the value is a convention, the one every eps > 0 gives at
 * x = 0. */
int lacs_ref_rmsnorm(const double *x, int64_t rows, int64_t dim, double eps, const double *weight, real *y)
{
    const char *op = "rmsnorm";
    int rc;
    if ((rc = check_rows(op, rows, dim)) || (rc = check_pointers(op, rows, x && y, "x and y")) ||
        (rc = check_eps(op, eps)))
        return rc;
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * dim;
        real *yr = y + r * dim;
        row_rms m = rms_of(xr, dim, eps); /* before any write: y may alias x */
        for (int64_t c = 0; c < dim; c++) {
            real v = m.s == 0 ? 0 : over_rms(xr[c], m);
            yr[c] = weight ? weight[c] * v : v;
        }
    }
    return LACS_OK;
}

/* N3: J = (I - y y^T / d) / rms with y = x / rms unweighted. The seed derives
 * it for eps = 0; with eps the same steps give the same form (d rms/dx_j =
 * x_j / (d rms) still holds), only y no longer has norm sqrt(d). A zero row
 * with eps = 0 gives J = 0, matching the convention y = 0 there (the function
 * has no derivative at that point). */
int lacs_ref_rmsnorm_jacobian(const double *x, int64_t dim, double eps, real *J)
{
    const char *op = "rmsnorm_jacobian";
    int rc;
    if (dim < 1)
        return lacs_internal_error(LACS_ERR_SHAPE, op, "dim = %lld must be >= 1", (long long)dim);
    if ((rc = check_pointers(op, 1, x && J, "x and J")) || (rc = check_eps(op, eps)))
        return rc;
    row_rms m = rms_of(x, dim, eps);
    for (int64_t i = 0; i < dim; i++) {
        real yi = m.s == 0 ? 0 : over_rms(x[i], m);
        for (int64_t j = 0; j < dim; j++) {
            real yj = m.s == 0 ? 0 : over_rms(x[j], m);
            J[i * dim + j] = m.s == 0 ? 0 : over_rms((i == j) - yi * yj / (real)dim, m);
        }
    }
    return LACS_OK;
}

/* dx = J^T g with g = weight (.) dy; J is symmetric, so dx = (g - y (y.g)/d) / rms,
 * O(dim) per row instead of forming J. dweight = sum over rows of dy (.) y.
 * Each row reads all of x and dy before writing dx, so in the double build dx
 * may alias x or dy. */
int lacs_ref_rmsnorm_vjp(const double *x, const double *dy, int64_t rows, int64_t dim, double eps,
                         const double *weight, real *dx, real *dweight)
{
    const char *op = "rmsnorm_vjp";
    int rc;
    if ((rc = check_rows(op, rows, dim)) || (rc = check_pointers(op, rows, x && dy && dx, "x, dy and dx")) ||
        (rc = check_eps(op, eps)))
        return rc;
    zero(dweight, dim);
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * dim, *dyr = dy + r * dim;
        real *dxr = dx + r * dim;
        row_rms m = rms_of(xr, dim, eps);
        if (m.s == 0) { /* zero row, eps = 0: y = 0 and J = 0 by convention (N3) */
            for (int64_t c = 0; c < dim; c++)
                dxr[c] = 0;
            continue;
        }
        real y_dot_g = 0;
        for (int64_t c = 0; c < dim; c++) {
            real yc = over_rms(xr[c], m), g = weight ? weight[c] * (real)dyr[c] : dyr[c];
            y_dot_g += yc * g;
            if (dweight)
                dweight[c] += dyr[c] * yc;
        }
        for (int64_t c = 0; c < dim; c++) {
            real yc = over_rms(xr[c], m), g = weight ? weight[c] * (real)dyr[c] : dyr[c];
            dxr[c] = over_rms(g - yc * y_dot_g / (real)dim, m);
        }
    }
    return LACS_OK;
}

/* ---- N1: DyT ---- */

/* N1, the solution of N4 with sqrt(d) absorbed into weight and 1/(rho sqrt(d))
 * into alpha. alpha x is one rounding; its overflow is harmless (tanh(+-inf)
 * = +-1), its underflow into the subnormals is not compensated (in the double
 * build only: the long double product of two doubles is exact). alpha = 0 and
 * x = +-inf give 0 * inf = NaN, as IEEE: the limit depends on how alpha and x
 * approach it. */
int lacs_ref_dyt(const double *x, int64_t rows, int64_t dim, double alpha, const double *weight,
                 const double *bias, real *y)
{
    const char *op = "dyt";
    int rc;
    if ((rc = check_rows(op, rows, dim)) || (rc = check_pointers(op, rows, x && y, "x and y")) ||
        (rc = check_alpha(op, alpha)))
        return rc;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < dim; c++) {
            y[r * dim + c] = per_channel_affine(tanh((real)alpha * x[r * dim + c]), weight, bias, c);
        }
    return LACS_OK;
}

/* d/dx = weight alpha sech^2(alpha x), d/dalpha = weight x sech^2(alpha x),
 * d/dweight = tanh(alpha x), d/dbias = 1. */
int lacs_ref_dyt_vjp(const double *x, const double *dy, int64_t rows, int64_t dim, double alpha,
                     const double *weight, real *dx, real *dalpha, real *dweight, real *dbias)
{
    const char *op = "dyt_vjp";
    int rc;
    if ((rc = check_rows(op, rows, dim)) || (rc = check_pointers(op, rows, x && dy && dx, "x, dy and dx")) ||
        (rc = check_alpha(op, alpha)))
        return rc;
    zero(dweight, dim);
    zero(dbias, dim);
    real sum_alpha = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < dim; c++) {
            const int64_t i = r * dim + c;
            real xi = x[i], g = dy[i], u = (real)alpha * xi, s2 = sech2(u);
            real gw = weight ? g * weight[c] : g;
            sum_alpha += gw * times_sech2(xi, s2);
            if (dweight)
                dweight[c] += g * tanh(u);
            if (dbias)
                dbias[c] += g;
            dx[i] = gw * (alpha * s2);
        }
    if (dalpha)
        *dalpha = sum_alpha;
    return LACS_OK;
}

/* ---- N5: DyISRU ---- */

/* f(x) = x / sqrt(x^2 + C) and its partial derivatives
 *   df/dx = C (x^2 + C)^{-3/2},   df/dC = -x/2 (x^2 + C)^{-3/2}.
 * x^2 overflows double for |x| > 1.3e154 and x^2 + C for C > DBL_MAX/2, so
 * both are written relative to the larger of |x| and sqrt(C):
 *   |x| >= sqrt(C): r = sqrt(C)/|x| <= 1, p = 1 + r^2,
 *       f = sign(x)/sqrt(p), df/dx = (r/|x|) r / p^{3/2}, df/dC = -sign(x) / (2 x^2 p^{3/2});
 *   |x| <  sqrt(C): q = x/sqrt(C), |q| < 1, p = 1 + q^2,
 *       f = x / (sqrt(C) sqrt(p)), df/dx = 1 / (sqrt(C) p^{3/2}), df/dC = -(q/2) / (C p^{3/2}).
 * p is in [1, 2], so nothing overflows unless the true value does. Limits:
 * x = +-inf gives f = +-1 (r = 0) and both derivatives 0; C = 0 and x != 0
 * gives f = +-1 exactly and df/dx = 0 (f is constant there); C = 0 and x = +-0
 * gives r = 0/0 = NaN, and NaN is right: along C = k x^2 the value is
 * sign(x)/sqrt(1 + k), so every value in (-1, 1) is a limit at (0, 0). NaN x
 * fails the comparison, takes the second branch and gives NaN. x = +-0 with
 * C > 0 gives f = +-0. */
typedef struct {
    real f, dfdx, dfdC;
} isru_value;

static isru_value isru(real x, real C, real sqrt_C)
{
    real a = fabs(x);
    if (a >= sqrt_C) {
        real r = sqrt_C / a, p = 1 + r * r, p32 = p * sqrt(p);
        return (isru_value){copysign(1 / sqrt(p), x), r / a * r / p32, -copysign((real)0.5 / a / a / p32, x)};
    }
    real q = x / sqrt_C, p = 1 + q * q, p32 = p * sqrt(p);
    return (isru_value){x / (sqrt_C * sqrt(p)), 1 / (sqrt_C * p32), -(q / 2) / (C * p32)};
}

/* N5: y = weight (.) x / sqrt(x^2 + C) + bias; the seed's solution of its ODE
 * is weight = sqrt(d), bias = 0. */
int lacs_ref_dyisru(const double *x, int64_t rows, int64_t dim, double C, const double *weight,
                    const double *bias, real *y)
{
    const char *op = "dyisru";
    int rc;
    if ((rc = check_rows(op, rows, dim)) || (rc = check_pointers(op, rows, x && y, "x and y")) ||
        (rc = check_C(op, C)))
        return rc;
    const real sqrt_C = sqrt((real)C);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < dim; c++) {
            y[r * dim + c] = per_channel_affine(isru(x[r * dim + c], C, sqrt_C).f, weight, bias, c);
        }
    return LACS_OK;
}

int lacs_ref_dyisru_vjp(const double *x, const double *dy, int64_t rows, int64_t dim, double C,
                        const double *weight, real *dx, real *dC, real *dweight, real *dbias)
{
    const char *op = "dyisru_vjp";
    int rc;
    if ((rc = check_rows(op, rows, dim)) || (rc = check_pointers(op, rows, x && dy && dx, "x, dy and dx")) ||
        (rc = check_C(op, C)))
        return rc;
    const real sqrt_C = sqrt((real)C);
    zero(dweight, dim);
    zero(dbias, dim);
    real sum_C = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < dim; c++) {
            const int64_t i = r * dim + c;
            real g = dy[i];
            isru_value v = isru(x[i], C, sqrt_C);
            real gw = weight ? g * weight[c] : g;
            sum_C += gw * v.dfdC;
            if (dweight)
                dweight[c] += g * v.f;
            if (dbias)
                dbias[c] += g;
            dx[i] = gw * v.dfdx;
        }
    if (dC)
        *dC = sum_C;
    return LACS_OK;
}

/* ---- N6: softcap ---- */

/* Below |u| = sqrt(eps) tanh(u) = u (1 - u^2/3) to rounding (the next term,
 * 2u^5/15, is under eps^2 relative). Writing y = x (1 - u^2/3) there instead of
 * cap tanh(x / cap) keeps x's own digits: x / cap rounds again when it is
 * subnormal, so a subnormal x would not come back as itself. */
static real softcap_one(real x, real cap)
{
    real u = x / cap;
    if (fabs(u) < sqrt(REAL_EPSILON))
        return x * (1 - u * u / 3);
    return cap * tanh(u);
}

/* N6: y = cap tanh(x / cap). x = +-inf gives +-cap, x = +-0 gives +-0. */
int lacs_ref_softcap(const double *x, int64_t n, double cap, real *y)
{
    const char *op = "softcap";
    int rc;
    if (n < 0)
        return lacs_internal_error(LACS_ERR_SHAPE, op, "n = %lld must be >= 0", (long long)n);
    if ((rc = check_pointers(op, n, x && y, "x and y")) || (rc = check_cap(op, cap)))
        return rc;
    for (int64_t i = 0; i < n; i++)
        y[i] = softcap_one(x[i], cap);
    return LACS_OK;
}

/* d/dcap [cap tanh(x/cap)] = tanh(u) - u sech^2(u), u = x / cap. For small u the
 * two terms agree to (2/3) u^3 and the difference cancels (u = 1e-6 keeps four
 * digits), so below |u| = 1 it is computed as (sinh(2u) - 2u) / (2 cosh^2 u),
 * with sinh(v) - v from its series v^3/3! + v^5/5! + ... (all terms of one
 * sign, |v| < 2: under 20 terms to eps). Above, the direct form loses at most
 * two bits, and u = +-inf gives the limit +-1. */
static real softcap_dcap_term(real u)
{
    if (fabs(u) < 1) {
        real v = 2 * u, v2 = v * v, term = v * v2 / 6, sum = 0;
        for (int k = 1; k < 40 && term != 0; k++) {
            sum += term;
            if (fabs(term) <= REAL_EPSILON / 4 * fabs(sum))
                break;
            term *= v2 / ((2 * k + 2) * (2 * k + 3));
        }
        real ch = cosh(u);
        return sum / (2 * ch * ch);
    }
    return tanh(u) - times_sech2(u, sech2(u));
}

int lacs_ref_softcap_vjp(const double *x, const double *dy, int64_t n, double cap, real *dx, real *dcap)
{
    const char *op = "softcap_vjp";
    int rc;
    if (n < 0)
        return lacs_internal_error(LACS_ERR_SHAPE, op, "n = %lld must be >= 0", (long long)n);
    if ((rc = check_pointers(op, n, x && dy && dx, "x, dy and dx")) || (rc = check_cap(op, cap)))
        return rc;
    real sum_cap = 0;
    for (int64_t i = 0; i < n; i++) {
        real u = x[i] / (real)cap, g = dy[i];
        sum_cap += g * softcap_dcap_term(u);
        dx[i] = g * sech2(u);
    }
    if (dcap)
        *dcap = sum_cap;
    return LACS_OK;
}

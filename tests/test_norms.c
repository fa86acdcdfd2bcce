/* The normalisation family (SPEC.md 4.14-4.18, labels N1-N6 of seed 004):
 *   norm_gradients    every VJP (rmsnorm, DyT, DyISRU, softcap, l2norm in both
 *                     conventions) equals central differences of the long double
 *                     forward pass; the N3 Jacobian equals central differences of
 *                     N2 and J^T dy equals the VJP;
 *   norm_forms        each forward op equals its plain formula;
 *   norm_odes         N4: sqrt(d) tanh(x / (rho sqrt(d))) solves
 *                     dy/dx = (1/rho)(1 - y^2/d); N5: DyISRU with weight sqrt(d)
 *                     solves dy/dx = (y/x)(1 - y^2/d) for every C >= 0 and d;
 *   norm_long_double  double vs long double for every op and VJP, also where the
 *                     plain formulas overflow, underflow or cancel;
 *   norm_ieee         the IEEE tables of 4.14-4.18, asserted exactly;
 *   norm_errors       bad shapes, parameters and pointers.
 * Each tolerance check is paired with a deliberately wrong variant, written
 * here, that the same check rejects. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

enum { MAXR = 4, MAXD = 8, MAXN = MAXR * MAXD };

/* Central differences in long double with a step h of 1e-6 times max(1, |x|):
 * truncation h^2 |f'''| / 6 ~ 1e-13 for the O(1) derivatives here, rounding
 * eps_ld |L| / h ~ 1e-19 * 10 / 1e-6 = 1e-12. Measured: <= 1.5e-12, and 5e-11
 * on l2norm's row of norm 3e-3 (there h is 1e-3 of x). 1e-8 leaves a margin
 * of 200 over that; every wrong gradient below misses by more than 1e-2, a
 * million times the bound (as 5.2's 1e-12 against 1e-6); measured >= 0.1. */
#define GRADIENT_BOUND 1e-8
#define GRADIENT_WRONG_BY 1e-2

/* The larger of two errors, NaN if either is (fmax would drop a NaN). */
static double worse(double a, double b) { return isnan(a) || a > b ? a : b; }

static double error_of(const double *x, const double *ref, int64_t n)
{
    return lacs_normwise_error(x, ref, 1, 1, 1, n, NULL, 0, NULL);
}

/* error_of after scaling both by the power of two that brings max |ref| near 1
 * (exact): the comparison squares its entries, which underflow below 1e-154. */
static double error_of_scaled(const double *x, const double *ref, int64_t n)
{
    double big = 0, xs[MAXN], rs[MAXN];
    for (int64_t i = 0; i < n; i++)
        big = fmax(big, fabs(ref[i]));
    const int e = big > 0 && isfinite(big) ? ilogb(big) : 0;
    for (int64_t i = 0; i < n; i++) {
        xs[i] = ldexp(x[i], -e);
        rs[i] = ldexp(ref[i], -e);
    }
    return error_of(xs, rs, n);
}

static void round_ld(const long double *a, double *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = (double)a[i];
}

/* ---- one problem of any op, and its gradients ---- */

typedef enum { OP_RMSNORM, OP_DYT, OP_DYISRU, OP_SOFTCAP, OP_L2_SQRT_EPS, OP_L2_MAX_EPS, OP_COUNT } norm_op;
static const char *const op_names[] = {
    "rmsnorm", "dyt", "dyisru", "softcap", "l2norm sqrt_eps", "l2norm max_eps",
};

typedef struct {
    norm_op op;
    int64_t rows, dim;
    double param; /* rmsnorm, l2norm: eps; dyt: alpha; dyisru: C; softcap: cap */
    double x[MAXN], dy[MAXN], weight[MAXD], bias[MAXD];
} norm_case;

/* The gradient of L = sum dy (.) y with respect to x, the scalar parameter
 * (alpha, C, cap), weight and bias, where the op has them. */
typedef struct {
    double dx[MAXN], dparam, dweight[MAXD], dbias[MAXD];
} grads;

static int has_param_grad(norm_op op) { return op == OP_DYT || op == OP_DYISRU || op == OP_SOFTCAP; }
static int has_weight(norm_op op) { return op == OP_RMSNORM || op == OP_DYT || op == OP_DYISRU; }
static int has_bias(norm_op op) { return op == OP_DYT || op == OP_DYISRU; }
static int64_t size_of(const norm_case *c) { return c->rows * c->dim; }

static norm_case make_case(norm_op op, uint64_t seed, double param, double x_scale)
{
    norm_case c = {.op = op, .rows = MAXR, .dim = MAXD, .param = param};
    lacs_rng rng = lacs_rng_seed(seed);
    for (int i = 0; i < MAXN; i++) {
        c.x[i] = x_scale * lacs_rng_normal12(&rng);
        c.dy[i] = lacs_rng_normal12(&rng);
    }
    for (int j = 0; j < MAXD; j++) {
        c.weight[j] = lacs_rng_range(&rng, 0.5, 1.5) * (j % 3 == 2 ? -1 : 1);
        c.bias[j] = lacs_rng_normal12(&rng);
    }
    return c;
}

/* The gradient tests' problems. l2norm's row 0 is shrunk below eps, so both
 * of max_eps's branches (and sqrt_eps's eps-dominated regime) are covered. */
static norm_case gradient_case(norm_op op, uint64_t seed)
{
    static const double params[OP_COUNT] = {1e-3, 0.7, 0.8, 2.5, 1e-2, 1e-2};
    norm_case c = make_case(op, seed, params[op], 1.5);
    if (op == OP_L2_SQRT_EPS || op == OP_L2_MAX_EPS) {
        double below = 0, above = INFINITY, n0 = 0;
        for (int j = 0; j < MAXD; j++)
            n0 += c.x[j] * c.x[j];
        for (int j = 0; j < MAXD; j++)
            c.x[j] *= 0.3 * c.param / sqrt(n0);
        for (int r = 0; r < MAXR; r++) {
            double n2 = 0;
            for (int j = 0; j < MAXD; j++)
                n2 += c.x[r * MAXD + j] * c.x[r * MAXD + j];
            if (r == 0)
                below = sqrt(n2);
            else
                above = fmin(above, sqrt(n2));
        }
        cr_assert(below < 0.5 * c.param && above > 2 * c.param, "the l2norm case must straddle eps");
    }
    return c;
}

static void forward_ld(const norm_case *c, long double *y)
{
    int rc = LACS_OK;
    switch (c->op) {
    case OP_RMSNORM:
        rc = lacs_ref_rmsnorm_ld(c->x, c->rows, c->dim, c->param, c->weight, y);
        break;
    case OP_DYT:
        rc = lacs_ref_dyt_ld(c->x, c->rows, c->dim, c->param, c->weight, c->bias, y);
        break;
    case OP_DYISRU:
        rc = lacs_ref_dyisru_ld(c->x, c->rows, c->dim, c->param, c->weight, c->bias, y);
        break;
    case OP_SOFTCAP:
        rc = lacs_ref_softcap_ld(c->x, size_of(c), c->param, y);
        break;
    case OP_L2_SQRT_EPS:
    case OP_L2_MAX_EPS:
        rc = lacs_ref_l2norm_ld(c->x, c->rows, c->dim, c->param,
                                c->op == OP_L2_SQRT_EPS ? LACS_L2NORM_SQRT_EPS : LACS_L2NORM_MAX_EPS, y);
        break;
    default:
        cr_assert_fail("unknown op");
    }
    cr_assert_eq(rc, LACS_OK, "%s", lacs_last_error());
}

static void forward_double(const norm_case *c, double *y)
{
    int rc = LACS_OK;
    switch (c->op) {
    case OP_RMSNORM:
        rc = lacs_ref_rmsnorm(c->x, c->rows, c->dim, c->param, c->weight, y);
        break;
    case OP_DYT:
        rc = lacs_ref_dyt(c->x, c->rows, c->dim, c->param, c->weight, c->bias, y);
        break;
    case OP_DYISRU:
        rc = lacs_ref_dyisru(c->x, c->rows, c->dim, c->param, c->weight, c->bias, y);
        break;
    case OP_SOFTCAP:
        rc = lacs_ref_softcap(c->x, size_of(c), c->param, y);
        break;
    case OP_L2_SQRT_EPS:
    case OP_L2_MAX_EPS:
        rc = lacs_ref_l2norm(c->x, c->rows, c->dim, c->param,
                             c->op == OP_L2_SQRT_EPS ? LACS_L2NORM_SQRT_EPS : LACS_L2NORM_MAX_EPS, y);
        break;
    default:
        cr_assert_fail("unknown op");
    }
    cr_assert_eq(rc, LACS_OK, "%s", lacs_last_error());
}

static long double loss_ld(const norm_case *c)
{
    long double y[MAXN], sum = 0;
    forward_ld(c, y);
    for (int64_t i = 0; i < size_of(c); i++)
        sum += c->dy[i] * y[i];
    return sum;
}

/* dL/d(*slot) by central differences of the long double forward pass. The
 * step is the actual difference of the two perturbed doubles, exact in long
 * double, so rounding the perturbed input costs nothing. */
static double central_difference(norm_case *c, double *slot)
{
    const double saved = *slot, h = 1e-6 * fmax(1, fabs(saved));
    const double up_at = saved + h, down_at = saved - h;
    *slot = up_at;
    const long double up = loss_ld(c);
    *slot = down_at;
    const long double down = loss_ld(c);
    *slot = saved;
    return (double)((up - down) / ((long double)up_at - down_at));
}

static grads numeric_grads(norm_case c)
{
    grads g = {0};
    for (int64_t i = 0; i < size_of(&c); i++)
        g.dx[i] = central_difference(&c, &c.x[i]);
    if (has_param_grad(c.op))
        g.dparam = central_difference(&c, &c.param);
    for (int64_t j = 0; j < c.dim; j++) {
        if (has_weight(c.op))
            g.dweight[j] = central_difference(&c, &c.weight[j]);
        if (has_bias(c.op))
            g.dbias[j] = central_difference(&c, &c.bias[j]);
    }
    return g;
}

static grads reference_grads(const norm_case *c)
{
    grads g = {0};
    int rc = LACS_OK;
    switch (c->op) {
    case OP_RMSNORM:
        rc = lacs_ref_rmsnorm_vjp(c->x, c->dy, c->rows, c->dim, c->param, c->weight, g.dx, g.dweight);
        break;
    case OP_DYT:
        rc = lacs_ref_dyt_vjp(c->x, c->dy, c->rows, c->dim, c->param, c->weight, g.dx, &g.dparam, g.dweight,
                              g.dbias);
        break;
    case OP_DYISRU:
        rc = lacs_ref_dyisru_vjp(c->x, c->dy, c->rows, c->dim, c->param, c->weight, g.dx, &g.dparam,
                                 g.dweight, g.dbias);
        break;
    case OP_SOFTCAP:
        rc = lacs_ref_softcap_vjp(c->x, c->dy, size_of(c), c->param, g.dx, &g.dparam);
        break;
    case OP_L2_SQRT_EPS:
    case OP_L2_MAX_EPS:
        rc = lacs_ref_l2norm_vjp(c->x, c->dy, c->rows, c->dim, c->param,
                                 c->op == OP_L2_SQRT_EPS ? LACS_L2NORM_SQRT_EPS : LACS_L2NORM_MAX_EPS, g.dx);
        break;
    default:
        cr_assert_fail("unknown op");
    }
    cr_assert_eq(rc, LACS_OK, "%s", lacs_last_error());
    return g;
}

/* The long double VJP, rounded to double. */
static grads reference_grads_ld(const norm_case *c)
{
    long double dx[MAXN] = {0}, dparam = 0, dweight[MAXD] = {0}, dbias[MAXD] = {0};
    int rc = LACS_OK;
    switch (c->op) {
    case OP_RMSNORM:
        rc = lacs_ref_rmsnorm_vjp_ld(c->x, c->dy, c->rows, c->dim, c->param, c->weight, dx, dweight);
        break;
    case OP_DYT:
        rc = lacs_ref_dyt_vjp_ld(c->x, c->dy, c->rows, c->dim, c->param, c->weight, dx, &dparam, dweight,
                                 dbias);
        break;
    case OP_DYISRU:
        rc = lacs_ref_dyisru_vjp_ld(c->x, c->dy, c->rows, c->dim, c->param, c->weight, dx, &dparam, dweight,
                                    dbias);
        break;
    case OP_SOFTCAP:
        rc = lacs_ref_softcap_vjp_ld(c->x, c->dy, size_of(c), c->param, dx, &dparam);
        break;
    case OP_L2_SQRT_EPS:
    case OP_L2_MAX_EPS:
        rc = lacs_ref_l2norm_vjp_ld(c->x, c->dy, c->rows, c->dim, c->param,
                                    c->op == OP_L2_SQRT_EPS ? LACS_L2NORM_SQRT_EPS : LACS_L2NORM_MAX_EPS, dx);
        break;
    default:
        cr_assert_fail("unknown op");
    }
    cr_assert_eq(rc, LACS_OK, "%s", lacs_last_error());
    grads g = {0};
    round_ld(dx, g.dx, MAXN);
    g.dparam = (double)dparam;
    round_ld(dweight, g.dweight, MAXD);
    round_ld(dbias, g.dbias, MAXD);
    return g;
}

typedef struct {
    double dx, dparam, dweight, dbias;
} grad_errors;

/* dx row by row (the worst row: one row's gradient cannot hide behind a larger
 * one's), each sum over its dim or single entry. */
static grad_errors compare_grads(const norm_case *c, const grads *a, const grads *ref)
{
    grad_errors e = {lacs_normwise_error(a->dx, ref->dx, 1, 1, c->rows, c->dim, NULL, 0, NULL), 0, 0, 0};
    if (has_param_grad(c->op))
        e.dparam = error_of(&a->dparam, &ref->dparam, 1);
    if (has_weight(c->op))
        e.dweight = error_of(a->dweight, ref->dweight, c->dim);
    if (has_bias(c->op))
        e.dbias = error_of(a->dbias, ref->dbias, c->dim);
    return e;
}

static double worst_of(grad_errors e) { return worse(worse(e.dx, e.dparam), worse(e.dweight, e.dbias)); }

/* ---- gradients written here from the plain formulas, right or with one bug ---- */

typedef enum {
    NO_BUG = 0,
    BUG_RMS_NO_PROJECTION,        /* dx = weight dy / rms: N3 without its y y^T / d term */
    BUG_RMS_DWEIGHT_OF_X,         /* dweight = sum dy x, not dy x / rms */
    BUG_DYT_NO_SECH2,             /* dx = dy weight alpha: tanh's derivative left out */
    BUG_DYT_DALPHA_WITHOUT_X,     /* dalpha = sum dy weight sech^2(alpha x), the chain rule's x missing */
    BUG_DYT_DWEIGHT_OF_ONE,       /* dweight = sum dy: the bias gradient */
    BUG_DYT_DBIAS_WEIGHTED,       /* dbias = sum dy weight */
    BUG_ISRU_DX_NO_QUOTIENT_RULE, /* dx = dy weight / sqrt(x^2 + C): the denominator held constant */
    BUG_ISRU_DC_WRONG_SIGN,       /* dC = +x/2 (x^2 + C)^{-3/2} */
    BUG_ISRU_DWEIGHT_OF_X,        /* dweight = sum dy x */
    BUG_ISRU_DBIAS_WEIGHTED,      /* dbias = sum dy weight */
    BUG_SOFTCAP_NO_SECH2,         /* dx = dy: softcap treated as the identity */
    BUG_SOFTCAP_DCAP_TANH_ONLY,   /* dcap = sum dy tanh(u), the -u sech^2(u) term dropped */
    BUG_L2_NO_PROJECTION,         /* sqrt_eps: dx = dy / sqrt(sum x^2 + eps) */
    BUG_L2_MAX_IGNORES_EPS        /* max_eps: the normalising gradient also below eps */
} grad_bug;

typedef enum { OUT_DX, OUT_DPARAM, OUT_DWEIGHT, OUT_DBIAS } grad_output;

static const struct {
    grad_bug bug;
    norm_op op;
    grad_output output;
    const char *what;
} wrong_gradients[] = {
    {BUG_RMS_NO_PROJECTION, OP_RMSNORM, OUT_DX, "rmsnorm dx without y y^T/d"},
    {BUG_RMS_DWEIGHT_OF_X, OP_RMSNORM, OUT_DWEIGHT, "rmsnorm dweight = sum dy x"},
    {BUG_DYT_NO_SECH2, OP_DYT, OUT_DX, "dyt dx without 1 - tanh^2"},
    {BUG_DYT_DALPHA_WITHOUT_X, OP_DYT, OUT_DPARAM, "dyt dalpha without x"},
    {BUG_DYT_DWEIGHT_OF_ONE, OP_DYT, OUT_DWEIGHT, "dyt dweight = sum dy"},
    {BUG_DYT_DBIAS_WEIGHTED, OP_DYT, OUT_DBIAS, "dyt dbias = sum dy weight"},
    {BUG_ISRU_DX_NO_QUOTIENT_RULE, OP_DYISRU, OUT_DX, "dyisru dx = 1/sqrt(x^2 + C)"},
    {BUG_ISRU_DC_WRONG_SIGN, OP_DYISRU, OUT_DPARAM, "dyisru dC with the wrong sign"},
    {BUG_ISRU_DWEIGHT_OF_X, OP_DYISRU, OUT_DWEIGHT, "dyisru dweight = sum dy x"},
    {BUG_ISRU_DBIAS_WEIGHTED, OP_DYISRU, OUT_DBIAS, "dyisru dbias = sum dy weight"},
    {BUG_SOFTCAP_NO_SECH2, OP_SOFTCAP, OUT_DX, "softcap dx without 1 - tanh^2"},
    {BUG_SOFTCAP_DCAP_TANH_ONLY, OP_SOFTCAP, OUT_DPARAM, "softcap dcap = sum dy tanh(u)"},
    {BUG_L2_NO_PROJECTION, OP_L2_SQRT_EPS, OUT_DX, "l2norm sqrt_eps dx without the projection"},
    {BUG_L2_MAX_IGNORES_EPS, OP_L2_MAX_EPS, OUT_DX, "l2norm max_eps dx normalising below eps"},
};

static grads plain_vjp(const norm_case *c, grad_bug bug)
{
    long double dx[MAXN] = {0}, dparam = 0, dweight[MAXD] = {0}, dbias[MAXD] = {0};
    const int64_t D = c->dim;
    const long double p = c->param;
    for (int64_t r = 0; r < c->rows; r++) {
        const double *x = c->x + r * D, *dy = c->dy + r * D;
        long double *out = dx + r * D, sum_sq = 0, dot = 0;
        for (int64_t j = 0; j < D; j++) {
            sum_sq += (long double)x[j] * x[j];
            dot += (long double)x[j] * dy[j];
        }
        for (int64_t j = 0; j < D; j++) {
            const long double xj = x[j], g = dy[j], w = has_weight(c->op) ? c->weight[j] : 1;
            switch (c->op) {
            case OP_RMSNORM: {
                long double rms = sqrtl(sum_sq / D + p), y = xj / rms, y_dot_g = 0;
                for (int64_t i = 0; i < D; i++)
                    y_dot_g += x[i] / rms * c->weight[i] * dy[i];
                out[j] = bug == BUG_RMS_NO_PROJECTION ? w * g / rms : (w * g - y * y_dot_g / D) / rms;
                dweight[j] += g * (bug == BUG_RMS_DWEIGHT_OF_X ? xj : y);
                break;
            }
            case OP_DYT: {
                long double t = tanhl(p * xj), s2 = 1 - t * t;
                out[j] = bug == BUG_DYT_NO_SECH2 ? g * w * p : g * w * p * s2;
                dparam += g * w * (bug == BUG_DYT_DALPHA_WITHOUT_X ? s2 : xj * s2);
                dweight[j] += g * (bug == BUG_DYT_DWEIGHT_OF_ONE ? 1 : t);
                dbias[j] += g * (bug == BUG_DYT_DBIAS_WEIGHTED ? w : 1);
                break;
            }
            case OP_DYISRU: {
                long double s = xj * xj + p, s32 = s * sqrtl(s);
                out[j] = g * w * (bug == BUG_ISRU_DX_NO_QUOTIENT_RULE ? 1 / sqrtl(s) : p / s32);
                dparam += g * w * (bug == BUG_ISRU_DC_WRONG_SIGN ? 1 : -1) * xj / 2 / s32;
                dweight[j] += g * (bug == BUG_ISRU_DWEIGHT_OF_X ? xj : xj / sqrtl(s));
                dbias[j] += g * (bug == BUG_ISRU_DBIAS_WEIGHTED ? w : 1);
                break;
            }
            case OP_SOFTCAP: {
                long double u = xj / p, t = tanhl(u), s2 = 1 - t * t;
                out[j] = bug == BUG_SOFTCAP_NO_SECH2 ? g : g * s2;
                dparam += g * (bug == BUG_SOFTCAP_DCAP_TANH_ONLY ? t : t - u * s2);
                break;
            }
            case OP_L2_SQRT_EPS: {
                long double n2 = sum_sq + p;
                out[j] = bug == BUG_L2_NO_PROJECTION ? g / sqrtl(n2) : (g - xj * dot / n2) / sqrtl(n2);
                break;
            }
            case OP_L2_MAX_EPS: {
                long double norm = sqrtl(sum_sq);
                out[j] = norm < p && bug != BUG_L2_MAX_IGNORES_EPS ? g / p : (g - xj * dot / sum_sq) / norm;
                break;
            }
            default:
                cr_assert_fail("unknown op");
            }
        }
    }
    grads out = {0};
    round_ld(dx, out.dx, MAXN);
    out.dparam = (double)dparam;
    round_ld(dweight, out.dweight, MAXD);
    round_ld(dbias, out.dbias, MAXD);
    return out;
}

/* ---- norm_gradients ---- */

Test(norm_gradients, every_vjp_equals_central_differences)
{
    for (int op = 0; op < OP_COUNT; op++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            norm_case c = gradient_case((norm_op)op, 100 * op + seed);
            grads numeric = numeric_grads(c), ref = reference_grads(&c);
            grad_errors e = compare_grads(&c, &ref, &numeric);
            cr_expect_leq(worst_of(e), GRADIENT_BOUND,
                          "%s (seed %llu): dx %.2e dparam %.2e dweight %.2e dbias %.2e", op_names[op],
                          (unsigned long long)seed, e.dx, e.dparam, e.dweight, e.dbias);
        }
}

/* The plain gradients written above pass the same check, so it is the check,
 * not the reference's arrangement of the formulas, that the bugs below fail. */
Test(norm_gradients, the_plain_gradients_pass_the_same_check)
{
    for (int op = 0; op < OP_COUNT; op++) {
        norm_case c = gradient_case((norm_op)op, 100 * op + 1);
        grads numeric = numeric_grads(c), plain = plain_vjp(&c, NO_BUG);
        double err = worst_of(compare_grads(&c, &plain, &numeric));
        cr_expect_leq(err, GRADIENT_BOUND, "%s: the plain VJP is off by %.2e", op_names[op], err);
    }
}

Test(norm_gradients, wrong_gradients_are_rejected)
{
    for (size_t i = 0; i < sizeof wrong_gradients / sizeof wrong_gradients[0]; i++) {
        norm_case c = gradient_case(wrong_gradients[i].op, 100 * wrong_gradients[i].op + 1);
        grads numeric = numeric_grads(c), wrong = plain_vjp(&c, wrong_gradients[i].bug);
        grad_errors e = compare_grads(&c, &wrong, &numeric);
        const double errs[] = {e.dx, e.dparam, e.dweight, e.dbias};
        double err = errs[wrong_gradients[i].output];
        cr_expect_gt(err, GRADIENT_WRONG_BY, "%s passed the gradient check (%.2e)", wrong_gradients[i].what,
                     err);
    }
}

/* N3 by central differences of N2 in long double: column j of J is dy/dx_j. */
static void jacobian_by_differences(const double *x, int64_t dim, double eps, double *J)
{
    double xs[MAXD];
    long double up[MAXD], down[MAXD];
    memcpy(xs, x, (size_t)dim * sizeof(double));
    for (int64_t j = 0; j < dim; j++) {
        const double h = 1e-6 * fmax(1, fabs(x[j])), up_at = x[j] + h, down_at = x[j] - h;
        xs[j] = up_at;
        cr_assert_eq(lacs_ref_rmsnorm_ld(xs, 1, dim, eps, NULL, up), LACS_OK);
        xs[j] = down_at;
        cr_assert_eq(lacs_ref_rmsnorm_ld(xs, 1, dim, eps, NULL, down), LACS_OK);
        xs[j] = x[j];
        for (int64_t i = 0; i < dim; i++)
            J[i * dim + j] = (double)((up[i] - down[i]) / ((long double)up_at - down_at));
    }
}

/* N3 without its y y^T / d term: I / rms, the Jacobian of x / rms with rms held constant. */
static void jacobian_without_projection(const double *x, int64_t dim, double eps, double *J)
{
    long double sum_sq = 0;
    for (int64_t i = 0; i < dim; i++)
        sum_sq += (long double)x[i] * x[i];
    const long double rms = sqrtl(sum_sq / dim + eps);
    for (int64_t i = 0; i < dim; i++)
        for (int64_t j = 0; j < dim; j++)
            J[i * dim + j] = (double)((i == j) / rms);
}

Test(norm_gradients, n3_jacobian_equals_central_differences_of_n2)
{
    const double epss[] = {0, 1e-3, 0.5};
    for (size_t e = 0; e < sizeof epss / sizeof epss[0]; e++) {
        norm_case c = make_case(OP_RMSNORM, 40 + e, epss[e], 1.3);
        double J[MAXD * MAXD], numeric[MAXD * MAXD], wrong[MAXD * MAXD];
        cr_assert_eq(lacs_ref_rmsnorm_jacobian(c.x, MAXD, epss[e], J), LACS_OK, "%s", lacs_last_error());
        jacobian_by_differences(c.x, MAXD, epss[e], numeric);
        jacobian_without_projection(c.x, MAXD, epss[e], wrong);
        double err = error_of(J, numeric, MAXD * MAXD), bad = error_of(wrong, numeric, MAXD * MAXD);
        cr_expect_leq(err, GRADIENT_BOUND, "eps = %g: J is off by %.2e", epss[e], err);
        cr_expect_gt(bad, GRADIENT_WRONG_BY, "eps = %g: I / rms passed as N3 (%.2e)", epss[e], bad);
    }
}

/* J^T (weight (.) dy), formed from a dense Jacobian, is the VJP. */
static void jacobian_transpose_times(const double *J, const double *weight, const double *dy, int64_t dim,
                                     double *dx)
{
    for (int64_t j = 0; j < dim; j++) {
        long double sum = 0;
        for (int64_t i = 0; i < dim; i++)
            sum += J[i * dim + j] * (weight ? weight[i] : 1) * dy[i];
        dx[j] = (double)sum;
    }
}

Test(norm_gradients, n3_jacobian_transposed_times_dy_is_the_vjp)
{
    for (int weighted = 0; weighted < 2; weighted++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            const double eps = seed == 1 ? 0 : 1e-2;
            norm_case c = make_case(OP_RMSNORM, 50 + seed, eps, 0.8);
            const double *w = weighted ? c.weight : NULL;
            double J[MAXD * MAXD], wrong[MAXD * MAXD], via_J[MAXD], via_wrong[MAXD], vjp[MAXD];
            cr_assert_eq(lacs_ref_rmsnorm_jacobian(c.x, MAXD, eps, J), LACS_OK);
            cr_assert_eq(lacs_ref_rmsnorm_vjp(c.x, c.dy, 1, MAXD, eps, w, vjp, NULL), LACS_OK);
            jacobian_without_projection(c.x, MAXD, eps, wrong);
            jacobian_transpose_times(J, w, c.dy, MAXD, via_J);
            jacobian_transpose_times(wrong, w, c.dy, MAXD, via_wrong);
            double err = error_of(vjp, via_J, MAXD), bad = error_of(via_wrong, vjp, MAXD);
            cr_expect_leq(err, FORMS_BOUND, "J^T dy vs the VJP: %.2e", err);
            cr_expect_gt(bad, WRONG_BY_AT_LEAST, "I/rms times dy matched the VJP (%.2e)", bad);
        }
}

/* ---- norm_forms: each forward op against its plain formula ---- */

typedef enum {
    FWD_OK = 0,
    FWD_DYT_ALPHA_AFTER_TANH,  /* weight alpha tanh(x) + bias */
    FWD_ISRU_C_OUTSIDE_ROOT,   /* weight x / (sqrt(x^2) + C) + bias */
    FWD_RMS_L2_NORM,           /* x / sqrt(sum x^2 + eps): the mean's 1/d missing */
    FWD_SOFTCAP_INNER_CAP_ONLY /* tanh(x / cap): the outer cap missing */
} forward_bug;

/* The seed's formulas as written, in long double, rounded to double. */
static void plain_forward(const norm_case *c, forward_bug bug, double *y)
{
    const int64_t D = c->dim;
    const long double p = c->param;
    for (int64_t r = 0; r < c->rows; r++) {
        long double sum_sq = 0;
        for (int64_t j = 0; j < D; j++)
            sum_sq += (long double)c->x[r * D + j] * c->x[r * D + j];
        for (int64_t j = 0; j < D; j++) {
            const long double x = c->x[r * D + j];
            long double v = 0;
            switch (c->op) {
            case OP_RMSNORM:
                v = c->weight[j] * x / sqrtl((bug == FWD_RMS_L2_NORM ? sum_sq : sum_sq / D) + p);
                break;
            case OP_DYT:
                v = c->weight[j] * (bug == FWD_DYT_ALPHA_AFTER_TANH ? p * tanhl(x) : tanhl(p * x)) +
                    c->bias[j];
                break;
            case OP_DYISRU:
                v = c->weight[j] * x /
                        (bug == FWD_ISRU_C_OUTSIDE_ROOT ? sqrtl(x * x) + p : sqrtl(x * x + p)) +
                    c->bias[j];
                break;
            case OP_SOFTCAP:
                v = bug == FWD_SOFTCAP_INNER_CAP_ONLY ? tanhl(x / p) : p * tanhl(x / p);
                break;
            default:
                cr_assert_fail("no plain forward for %s", op_names[c->op]);
            }
            y[r * D + j] = (double)v;
        }
    }
}

static double forward_vs_plain(const norm_case *c, forward_bug bug)
{
    double y[MAXN], plain[MAXN];
    forward_double(c, y);
    plain_forward(c, bug, plain);
    return bug == FWD_OK ? error_of(y, plain, size_of(c)) : error_of(plain, y, size_of(c));
}

Test(norm_forms, each_op_equals_its_plain_formula)
{
    const norm_op ops[] = {OP_RMSNORM, OP_DYT, OP_DYISRU, OP_SOFTCAP};
    const double params[] = {1e-3, 0.7, 0.8, 2.5};
    for (int i = 0; i < 4; i++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            norm_case c = make_case(ops[i], 60 + seed, params[i], 1.5);
            double err = forward_vs_plain(&c, FWD_OK);
            cr_expect_leq(err, LONG_DOUBLE_BOUND, "%s: %.2e from the plain formula", op_names[ops[i]], err);
        }
}

Test(norm_forms, wrong_forward_variants_are_rejected)
{
    const struct {
        norm_op op;
        double param;
        forward_bug bug;
        const char *what;
    } wrong[] = {
        {OP_DYT, 0.7, FWD_DYT_ALPHA_AFTER_TANH, "DyT with alpha after tanh"},
        {OP_DYISRU, 0.8, FWD_ISRU_C_OUTSIDE_ROOT, "DyISRU with C outside the root"},
        {OP_RMSNORM, 1e-3, FWD_RMS_L2_NORM, "RMSNorm as x / ||x||"},
        {OP_SOFTCAP, 2.5, FWD_SOFTCAP_INNER_CAP_ONLY, "softcap as tanh(x / cap)"},
    };
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        norm_case c = make_case(wrong[i].op, 61, wrong[i].param, 1.5);
        double err = forward_vs_plain(&c, wrong[i].bug);
        cr_expect_gt(err, WRONG_BY_AT_LEAST, "%s matched the reference (%.2e)", wrong[i].what, err);
    }
}

/* ---- norm_odes: N4 and N5 ---- */

enum { ODE_POINTS = 100 };

/* p = {alpha or C, weight, d, rho}: one scalar function of x. */
typedef long double (*scalar_fn)(double x, const double *p);

static long double n4_dyt(double x, const double *p)
{
    long double y;
    cr_assert_eq(lacs_ref_dyt_ld(&x, 1, 1, p[0], &p[1], NULL, &y), LACS_OK);
    return y;
}

static long double n5_dyisru(double x, const double *p)
{
    long double y;
    cr_assert_eq(lacs_ref_dyisru_ld(&x, 1, 1, p[0], &p[1], NULL, &y), LACS_OK);
    return y;
}

/* Wrong: C added outside the root, sqrt(d) x / (|x| + C). */
static long double n5_c_outside_root(double x, const double *p) { return p[1] * x / (fabsl(x) + p[0]); }

typedef enum { RHS_N4, RHS_N5 } ode_rhs;

/* dy/dx by central differences at ODE_POINTS points of [lo, hi] (never 0),
 * with a step of 1e-6 times the larger of |x| and the length over which the
 * function bends (sqrt(C) for N5: a fixed step would lose h^2 / C to
 * truncation at C = 1e-4), against the seed's right-hand side:
 *   N4: (1/rho)(1 - y^2/d);   N5: (y/x)(1 - y^2/d). */
static double ode_error(scalar_fn f, const double *p, ode_rhs rhs, double lo, double hi, double length)
{
    double lhs[ODE_POINTS], right[ODE_POINTS];
    const long double d = p[2], rho = p[3];
    for (int k = 0; k < ODE_POINTS; k++) {
        const double x = lo + (hi - lo) * (k + 0.5) / ODE_POINTS;
        const double h = 1e-6 * fmax(length, fabs(x)), up_at = x + h, down_at = x - h;
        lhs[k] = (double)((f(up_at, p) - f(down_at, p)) / ((long double)up_at - down_at));
        const long double y = f(x, p);
        right[k] = (double)(rhs == RHS_N4 ? (1 / rho) * (1 - y * y / d) : (y / x) * (1 - y * y / d));
    }
    return error_of(lhs, right, ODE_POINTS);
}

/* N4: keeping N3's diagonal with rms = rho constant, dy/dx = (1/rho)(1 - y^2/d)
 * is solved by y = sqrt(d) tanh(x / (rho sqrt(d))): DyT with weight sqrt(d),
 * alpha = 1/(rho sqrt(d)). Wrong: alpha = 1/rho (the sqrt(d) dropped inside). */
Test(norm_odes, n4_dyt_solves_the_diagonal_of_n3)
{
    const double dims[] = {4, 10, 64}, rhos[] = {0.5, 1, 3};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            const double d = dims[a], rho = rhos[b], span = 4 * rho * sqrt(d);
            const double right[] = {1 / (rho * sqrt(d)), sqrt(d), d, rho},
                         wrong[] = {1 / rho, sqrt(d), d, rho};
            double err = ode_error(n4_dyt, right, RHS_N4, -span, span, 1);
            double bad = ode_error(n4_dyt, wrong, RHS_N4, -span, span, 1);
            cr_expect_leq(err, GRADIENT_BOUND, "d = %g, rho = %g: N4 residual %.2e", d, rho, err);
            cr_expect_gt(bad, GRADIENT_WRONG_BY, "d = %g, rho = %g: alpha = 1/rho solved N4 (%.2e)", d, rho,
                         bad);
        }
}

/* N5: replacing rho by x/y, dy/dx = (y/x)(1 - y^2/d) is solved by
 * y = sqrt(d) x / sqrt(x^2 + C) for every C >= 0 and every d: (y/x)(1 - y^2/d)
 * = sqrt(d)/sqrt(x^2 + C) * C/(x^2 + C) = sqrt(d) C (x^2 + C)^{-3/2} = dy/dx,
 * no relation between C and d (the seed: "C is an arbitrary constant"). The
 * test checks the ODE by differences, the closed form of its right-hand side,
 * and the VJP with dy = 1, over C from 1e-4 to 1e3 and d in {4, 10, 64}. */
Test(norm_odes, n5_dyisru_solves_the_ode_for_every_C)
{
    const double dims[] = {4, 10, 64}, Cs[] = {1e-4, 0.25, 1, 7, 1e3};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 5; b++) {
            const double d = dims[a], C = Cs[b], span = 6 * sqrt(C) + 1;
            const double p[] = {C, sqrt(d), d, 0};
            double err = ode_error(n5_dyisru, p, RHS_N5, -span, span, sqrt(C));
            double bad = ode_error(n5_c_outside_root, p, RHS_N5, -span, span, sqrt(C));
            cr_expect_leq(err, GRADIENT_BOUND, "d = %g, C = %g: N5 residual %.2e", d, C, err);
            cr_expect_gt(bad, GRADIENT_WRONG_BY, "d = %g, C = %g: C outside the root solved N5 (%.2e)", d, C,
                         bad);
            double closed[ODE_POINTS], rhs[ODE_POINTS], vjp[ODE_POINTS], xs[ODE_POINTS], ones[ODE_POINTS];
            for (int k = 0; k < ODE_POINTS; k++) {
                xs[k] = -span + 2 * span * (k + 0.5) / ODE_POINTS;
                ones[k] = 1;
                const long double x = xs[k], y = n5_dyisru(xs[k], p), s = x * x + C;
                rhs[k] = (double)((y / x) * (1 - y * y / d));
                closed[k] = (double)(p[1] * C / (s * sqrtl(s)));
            }
            cr_assert_eq(lacs_ref_dyisru_vjp(xs, ones, ODE_POINTS, 1, C, &p[1], vjp, NULL, NULL, NULL),
                         LACS_OK);
            cr_expect_leq(error_of(rhs, closed, ODE_POINTS), LONG_DOUBLE_BOUND,
                          "d = %g, C = %g: (y/x)(1 - y^2/d) != sqrt(d) C (x^2 + C)^-3/2", d, C);
            cr_expect_leq(error_of(vjp, closed, ODE_POINTS), LONG_DOUBLE_BOUND,
                          "d = %g, C = %g: the VJP is not the ODE's slope", d, C);
        }
}

/* ---- norm_long_double ---- */

static double ld_forward_error(const norm_case *c)
{
    double y[MAXN], ref[MAXN];
    long double y_ld[MAXN];
    forward_double(c, y);
    forward_ld(c, y_ld);
    round_ld(y_ld, ref, size_of(c));
    return error_of(y, ref, size_of(c));
}

static double ld_jacobian_error(const double *x, double eps)
{
    double J[MAXD * MAXD], ref[MAXD * MAXD];
    long double J_ld[MAXD * MAXD];
    cr_assert_eq(lacs_ref_rmsnorm_jacobian(x, MAXD, eps, J), LACS_OK);
    cr_assert_eq(lacs_ref_rmsnorm_jacobian_ld(x, MAXD, eps, J_ld), LACS_OK);
    round_ld(J_ld, ref, MAXD * MAXD);
    return error_of(J, ref, MAXD * MAXD);
}

/* Every op and VJP on random rows at three scales: ordinary, large (tanh
 * saturates: alpha x up to ~100, x/cap up to ~70, x^2 >> C), and small
 * (softcap's dcap in its cancelling range, x^2 << C). Measured: forward
 * <= 1.8e-16, vectors <= 1.3e-15; the scalar sums (dalpha, dC, dcap) up to
 * 1.5e-14, where 32 terms of both signs cancel (dalpha at x ~ 1e-3). */
Test(norm_long_double, every_op_and_vjp_agrees_to_1e_13)
{
    static const double params[OP_COUNT] = {1e-3, 0.7, 0.8, 2.5, 1e-2, 1e-2};
    const double scales[] = {1, 30, 1e-3};
    for (int op = 0; op < OP_COUNT; op++)
        for (int s = 0; s < 3; s++)
            for (uint64_t seed = 1; seed <= 4; seed++) {
                norm_case c = make_case((norm_op)op, 1000 * op + 10 * s + seed, params[op], scales[s]);
                double fwd = ld_forward_error(&c);
                grads g = reference_grads(&c), g_ld = reference_grads_ld(&c);
                grad_errors e = compare_grads(&c, &g, &g_ld);
                cr_expect_leq(fwd, LONG_DOUBLE_BOUND, "%s x%g: forward %.2e", op_names[op], scales[s], fwd);
                cr_expect_leq(worst_of(e), LONG_DOUBLE_BOUND,
                              "%s x%g (seed %llu): dx %.2e dparam %.2e dweight %.2e dbias %.2e", op_names[op],
                              scales[s], (unsigned long long)seed, e.dx, e.dparam, e.dweight, e.dbias);
                if (op == OP_RMSNORM) {
                    double err = ld_jacobian_error(c.x, c.param);
                    cr_expect_leq(err, LONG_DOUBLE_BOUND, "rmsnorm_jacobian x%g: %.2e", scales[s], err);
                }
            }
}

/* The same comparison shows the double build able to fail: a 1e-11 relative
 * change to one output is caught. */
Test(norm_long_double, a_perturbed_result_is_caught)
{
    norm_case c = make_case(OP_DYISRU, 5, 0.8, 1);
    grads g = reference_grads(&c), g_ld = reference_grads_ld(&c);
    g.dx[3] *= 1 + 1e-11;
    cr_expect_gt(compare_grads(&c, &g, &g_ld).dx, LONG_DOUBLE_BOUND);
}

/* Where the plain double formula overflows, underflows or cancels, the
 * reference still agrees with long double, and the plain formula does not. */
Test(norm_long_double, the_rearranged_formulas_hold_where_the_plain_ones_fail)
{
    lacs_rng rng = lacs_rng_seed(77);
    enum { N = MAXN };
    double x[N], dy[N], a[N], b[N], ref[N], dparam;
    long double a_ld[N], dparam_ld;

    /* DyT: 1 - tanh^2(u) rounds to 0 for |u| > 19; sech^2 = 4e/(1+e)^2 does not. */
    const double alpha = 1.0;
    for (int i = 0; i < N; i++) {
        x[i] = (i % 2 ? -1 : 1) * lacs_rng_range(&rng, 20, 30);
        dy[i] = lacs_rng_normal12(&rng);
    }
    cr_assert_eq(lacs_ref_dyt_vjp(x, dy, 1, N, alpha, NULL, a, &dparam, NULL, NULL), LACS_OK);
    cr_assert_eq(lacs_ref_dyt_vjp_ld(x, dy, 1, N, alpha, NULL, a_ld, &dparam_ld, NULL, NULL), LACS_OK);
    round_ld(a_ld, ref, N);
    for (int i = 0; i < N; i++) {
        double t = tanh(alpha * x[i]);
        b[i] = dy[i] * alpha * (1 - t * t);
    }
    cr_expect_leq(error_of_scaled(a, ref, N), LONG_DOUBLE_BOUND, "dyt dx at |alpha x| in [20, 30]");
    cr_expect_leq(fabs(dparam - (double)dparam_ld) / fabs((double)dparam_ld), LONG_DOUBLE_BOUND,
                  "dyt dalpha");
    cr_expect_gt(error_of_scaled(b, ref, N), WRONG_BY_AT_LEAST,
                 "1 - tanh^2 in double was accurate at |u| > 20");

    /* softcap: tanh(u) - u sech^2(u) cancels to (2/3)u^3 at u ~ 1e-6. */
    const double cap = 1e6;
    for (int i = 0; i < N; i++)
        x[i] = lacs_rng_normal12(&rng);
    double dcap;
    long double dcap_ld;
    cr_assert_eq(lacs_ref_softcap_vjp(x, dy, N, cap, a, &dcap), LACS_OK);
    cr_assert_eq(lacs_ref_softcap_vjp_ld(x, dy, N, cap, a_ld, &dcap_ld), LACS_OK);
    double plain_dcap = 0;
    for (int i = 0; i < N; i++) {
        double u = x[i] / cap, t = tanh(u);
        plain_dcap += dy[i] * (t - u * (1 - t * t));
    }
    const double dcap_ref = (double)dcap_ld;
    cr_expect_leq(fabs(dcap - dcap_ref) / fabs(dcap_ref), LONG_DOUBLE_BOUND,
                  "softcap dcap at u ~ 1e-6: %.3e vs %.3e", dcap, dcap_ref);
    cr_expect_gt(fabs(plain_dcap - dcap_ref) / fabs(dcap_ref), WRONG_BY_AT_LEAST,
                 "tanh(u) - u(1 - tanh^2 u) in double was accurate at u ~ 1e-6");

    /* DyISRU: x^2 + C overflows for |x| ~ 1e155, C = 1e308. */
    const double C = 1e308;
    for (int i = 0; i < N; i++)
        x[i] = lacs_rng_normal12(&rng) * 1e155;
    cr_assert_eq(lacs_ref_dyisru(x, 1, N, C, NULL, NULL, a), LACS_OK);
    cr_assert_eq(lacs_ref_dyisru_ld(x, 1, N, C, NULL, NULL, a_ld), LACS_OK);
    round_ld(a_ld, ref, N);
    for (int i = 0; i < N; i++)
        b[i] = x[i] / sqrt(x[i] * x[i] + C);
    cr_expect_leq(error_of_scaled(a, ref, N), LONG_DOUBLE_BOUND, "dyisru at |x| ~ 1e155, C = 1e308");
    cr_expect_gt(error_of_scaled(b, ref, N), WRONG_BY_AT_LEAST,
                 "x / sqrt(x^2 + C) in double did not overflow");
    cr_assert_eq(lacs_ref_dyisru_vjp(x, dy, 1, N, C, NULL, a, NULL, NULL, NULL), LACS_OK);
    cr_assert_eq(lacs_ref_dyisru_vjp_ld(x, dy, 1, N, C, NULL, a_ld, NULL, NULL, NULL), LACS_OK);
    round_ld(a_ld, ref, N);
    cr_expect_leq(error_of_scaled(a, ref, N), LONG_DOUBLE_BOUND, "dyisru dx at |x| ~ 1e155, C = 1e308");

    /* RMSNorm: mean(x^2) overflows at 1e160 and underflows at 1e-160. */
    const double scales[] = {1e160, 1e-160};
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < N; i++)
            x[i] = lacs_rng_normal12(&rng) * scales[s];
        cr_assert_eq(lacs_ref_rmsnorm(x, MAXR, MAXD, 0, NULL, a), LACS_OK);
        cr_assert_eq(lacs_ref_rmsnorm_ld(x, MAXR, MAXD, 0, NULL, a_ld), LACS_OK);
        round_ld(a_ld, ref, N);
        for (int r = 0; r < MAXR; r++) {
            double ms = 0;
            for (int j = 0; j < MAXD; j++)
                ms += x[r * MAXD + j] * x[r * MAXD + j];
            for (int j = 0; j < MAXD; j++)
                b[r * MAXD + j] = x[r * MAXD + j] / sqrt(ms / MAXD);
        }
        cr_expect_leq(error_of_scaled(a, ref, N), LONG_DOUBLE_BOUND, "rmsnorm at scale %g", scales[s]);
        cr_expect(!(error_of_scaled(b, ref, N) <= WRONG_BY_AT_LEAST), "unscaled mean(x^2) worked at scale %g",
                  scales[s]);
        cr_assert_eq(lacs_ref_rmsnorm_vjp(x, dy, MAXR, MAXD, 0, NULL, a, NULL), LACS_OK);
        cr_assert_eq(lacs_ref_rmsnorm_vjp_ld(x, dy, MAXR, MAXD, 0, NULL, a_ld, NULL), LACS_OK);
        round_ld(a_ld, ref, N);
        cr_expect_leq(error_of_scaled(a, ref, N), LONG_DOUBLE_BOUND, "rmsnorm_vjp at scale %g", scales[s]);
    }
}

/* ---- norm_ieee: SPEC.md 4.14-4.18, each case exactly ---- */

/* x = 4.9e-324 * 2^k, k = 0..60: subnormal and just above. */
static double tiny(int k) { return ldexp(DBL_TRUE_MIN, k); }

Test(norm_ieee, dyt)
{
    const double w = 2, b = 0.25, pz = 0.0, nz = -0.0;
    double x[6] = {pz, nz, INFINITY, -INFINITY, NAN, 3}, y[6];
    long double y_ld[6];
    /* signed zeros pass through tanh and weight 1, no bias */
    cr_assert_eq(lacs_ref_dyt(x, 1, 2, 1, NULL, NULL, y), LACS_OK);
    cr_expect(y[0] == 0 && !signbit(y[0]) && y[1] == 0 && signbit(y[1]), "dyt(+-0) = +-0");
    cr_assert_eq(lacs_ref_dyt_ld(x, 1, 2, 1, NULL, NULL, y_ld), LACS_OK);
    cr_expect(y_ld[0] == 0 && !signbit(y_ld[0]) && y_ld[1] == 0 && signbit(y_ld[1]), "dyt_ld(+-0) = +-0");
    /* an explicit +0 bias is an IEEE addition: -0 + +0 = +0 */
    cr_assert_eq(lacs_ref_dyt(x + 1, 1, 1, 1, NULL, &pz, y), LACS_OK);
    cr_expect(y[0] == 0 && !signbit(y[0]), "dyt(-0) + (+0) = +0");
    /* infinities: +-weight + bias for alpha > 0, reversed for alpha < 0 */
    const double ws[6] = {w, w, w, w, w, w}, bs[6] = {b, b, b, b, b, b};
    cr_assert_eq(lacs_ref_dyt(x, 1, 6, 0.5, ws, bs, y), LACS_OK);
    cr_expect(y[2] == w + b && y[3] == -w + b, "dyt(+-inf) = +-weight + bias: %g %g", y[2], y[3]);
    cr_expect(isnan(y[4]), "dyt(NaN) = NaN");
    cr_assert_eq(lacs_ref_dyt(x, 1, 6, -0.5, ws, bs, y), LACS_OK);
    cr_expect(y[2] == -w + b && y[3] == w + b, "alpha < 0 mirrors");
    /* alpha = 0: tanh(0 x) = +-0, so a finite x gives exactly bias; 0 * inf = NaN */
    const double finite[5] = {3, -1e300, DBL_TRUE_MIN, -0.0, 1e-300};
    cr_assert_eq(lacs_ref_dyt(finite, 1, 5, 0, ws, bs, y), LACS_OK);
    for (int i = 0; i < 5; i++)
        cr_expect(y[i] == b, "alpha = 0: dyt(%g) = %g, not bias", finite[i], y[i]);
    cr_assert_eq(lacs_ref_dyt(x, 1, 4, 0, NULL, NULL, y), LACS_OK);
    cr_expect(isnan(y[2]) && isnan(y[3]), "alpha = 0 at x = +-inf is 0 * inf = NaN");
    cr_expect(y[0] == 0 && !signbit(y[0]) && y[1] == 0 && signbit(y[1]), "alpha = 0, no bias: +-0");
    /* subnormal inputs are not flushed: tanh(x) = x below 2^-27 */
    for (int k = 0; k <= 60; k++) {
        double t = tiny(k), out;
        long double out_ld;
        cr_assert_eq(lacs_ref_dyt(&t, 1, 1, 1, NULL, NULL, &out), LACS_OK);
        cr_assert_eq(lacs_ref_dyt_ld(&t, 1, 1, 1, NULL, NULL, &out_ld), LACS_OK);
        cr_expect(out == t && out_ld == t, "dyt(%a) = %a (ld %La)", t, out, out_ld);
    }
}

Test(norm_ieee, softcap)
{
    const double caps[] = {1, 2, 30, 1e300};
    const double x[5] = {0.0, -0.0, INFINITY, -INFINITY, NAN};
    double y[5];
    long double y_ld[5];
    for (int c = 0; c < 4; c++) {
        cr_assert_eq(lacs_ref_softcap(x, 5, caps[c], y), LACS_OK);
        cr_assert_eq(lacs_ref_softcap_ld(x, 5, caps[c], y_ld), LACS_OK);
        cr_expect(y[0] == 0 && !signbit(y[0]) && y[1] == 0 && signbit(y[1]), "softcap(+-0) = +-0");
        cr_expect(y_ld[0] == 0 && !signbit(y_ld[0]) && y_ld[1] == 0 && signbit(y_ld[1]), "softcap_ld(+-0)");
        cr_expect(y[2] == caps[c] && y[3] == -caps[c] && y_ld[2] == caps[c] && y_ld[3] == -caps[c],
                  "softcap(+-inf, %g) = %g, %g", caps[c], y[2], y[3]);
        cr_expect(isnan(y[4]) && isnan(y_ld[4]), "softcap(NaN) = NaN");
        for (int k = 0; k <= 60; k++) {
            double t = -tiny(k), out;
            long double out_ld;
            cr_assert_eq(lacs_ref_softcap(&t, 1, caps[c], &out), LACS_OK);
            cr_assert_eq(lacs_ref_softcap_ld(&t, 1, caps[c], &out_ld), LACS_OK);
            cr_expect(out == t && out_ld == t, "softcap(%a, %g) = %a", t, caps[c], out);
        }
    }
    /* a huge x over a tiny cap: x / cap overflows to inf, tanh gives exactly 1 */
    double big = 1e300, out;
    cr_assert_eq(lacs_ref_softcap(&big, 1, 1e-300, &out), LACS_OK);
    cr_expect_eq(out, 1e-300);
    /* VJP at +-inf: dx = 0, dcap = +-dy (the limit of tanh(u) - u sech^2(u)) */
    const double inf2[2] = {INFINITY, -INFINITY}, dy2[2] = {3, 5};
    double dx[2], dcap;
    cr_assert_eq(lacs_ref_softcap_vjp(inf2, dy2, 2, 2.5, dx, &dcap), LACS_OK);
    cr_expect(dx[0] == 0 && dx[1] == 0 && dcap == 3 - 5, "softcap_vjp at +-inf: dx %g %g, dcap %g", dx[0],
              dx[1], dcap);
}

Test(norm_ieee, dyisru)
{
    const double w = 2, b = 0.25;
    const double ws[4] = {w, w, w, w}, bs[4] = {b, b, b, b};
    const double x[4] = {0.0, -0.0, INFINITY, -INFINITY};
    double y[4];
    long double y_ld[4];
    cr_assert_eq(lacs_ref_dyisru(x, 1, 4, 0.8, NULL, NULL, y), LACS_OK);
    cr_assert_eq(lacs_ref_dyisru_ld(x, 1, 4, 0.8, NULL, NULL, y_ld), LACS_OK);
    cr_expect(y[0] == 0 && !signbit(y[0]) && y[1] == 0 && signbit(y[1]), "dyisru(+-0, C > 0) = +-0");
    cr_expect(y_ld[0] == 0 && !signbit(y_ld[0]) && y_ld[1] == 0 && signbit(y_ld[1]), "dyisru_ld(+-0)");
    cr_expect(y[2] == 1 && y[3] == -1 && y_ld[2] == 1 && y_ld[3] == -1, "dyisru(+-inf) = +-1");
    cr_assert_eq(lacs_ref_dyisru(x, 1, 4, 0.8, ws, bs, y), LACS_OK);
    cr_expect(y[2] == w + b && y[3] == -w + b, "dyisru(+-inf) = +-weight + bias");
    /* C = 0: x != 0 gives exactly +-1 (subnormal, ordinary, huge, infinite); x = +-0 is 0/0 */
    const double nonzero[6] = {DBL_TRUE_MIN, -3, 1e300, -DBL_MAX, 1e-300, -INFINITY};
    double y6[6];
    cr_assert_eq(lacs_ref_dyisru(nonzero, 1, 6, 0, NULL, NULL, y6), LACS_OK);
    for (int i = 0; i < 6; i++)
        cr_expect(y6[i] == (nonzero[i] > 0 ? 1 : -1), "C = 0: dyisru(%g) = %.17g", nonzero[i], y6[i]);
    cr_assert_eq(lacs_ref_dyisru(x, 1, 2, 0, NULL, NULL, y), LACS_OK);
    cr_expect(isnan(y[0]) && isnan(y[1]), "C = 0, x = +-0: 0/0 = NaN");
    double nan_x = NAN;
    cr_assert_eq(lacs_ref_dyisru(&nan_x, 1, 1, 0.8, NULL, NULL, y), LACS_OK);
    cr_expect(isnan(y[0]), "dyisru(NaN) = NaN");
    /* C = 1: a subnormal comes back as itself */
    for (int k = 0; k <= 60; k++) {
        double t = tiny(k), out;
        cr_assert_eq(lacs_ref_dyisru(&t, 1, 1, 1, NULL, NULL, &out), LACS_OK);
        cr_expect(out == t, "dyisru(%a, C = 1) = %a", t, out);
    }
    /* no overflow: |x| >> sqrt(C) gives +-1, C = DBL_MAX with x = 1 gives 1/sqrt(DBL_MAX) */
    const double huge[2] = {1e200, -1e300};
    cr_assert_eq(lacs_ref_dyisru(huge, 1, 2, 1, NULL, NULL, y), LACS_OK);
    cr_expect(y[0] == 1 && y[1] == -1, "dyisru(1e200, C = 1) = %.17g", y[0]);
    double one = 1;
    cr_assert_eq(lacs_ref_dyisru(&one, 1, 1, DBL_MAX, NULL, NULL, y), LACS_OK);
    cr_expect(fabs(y[0] * sqrt(DBL_MAX) - 1) <= 2 * DBL_EPSILON, "dyisru(1, C = DBL_MAX) = %g", y[0]);
    /* VJP: at +-inf dx = 0 and dC = 0; with C = 0, x != 0: dx = 0 exactly and
     * dC = -1/(2 x^2); with C = 0, x = 0: NaN */
    const double dy2[2] = {3, 5};
    double dx[2], dC, dweight[2], dbias[2];
    cr_assert_eq(lacs_ref_dyisru_vjp(x + 2, dy2, 1, 2, 0.8, ws, dx, &dC, dweight, dbias), LACS_OK);
    cr_expect(dx[0] == 0 && dx[1] == 0 && dC == 0, "dyisru_vjp at +-inf: dx %g %g dC %g", dx[0], dx[1], dC);
    cr_expect(dweight[0] == 3 && dweight[1] == -5 && dbias[0] == 3 && dbias[1] == 5,
              "dweight = dy f, dbias = dy");
    const double three = 3, unit = 1;
    cr_assert_eq(lacs_ref_dyisru_vjp(&three, &unit, 1, 1, 0, NULL, dx, &dC, NULL, NULL), LACS_OK);
    cr_expect(dx[0] == 0 && fabs(dC + 1.0 / 18) <= DBL_EPSILON / 18, "C = 0, x = 3: dx %g, dC %.17g", dx[0],
              dC);
    cr_assert_eq(lacs_ref_dyisru_vjp(x, &unit, 1, 1, 0, NULL, dx, &dC, NULL, NULL), LACS_OK);
    cr_expect(isnan(dx[0]) && isnan(dC), "C = 0, x = 0: NaN gradients");
}

Test(norm_ieee, dyt_vjp)
{
    const double x[2] = {INFINITY, -INFINITY}, dy[2] = {3, 5}, w[2] = {2, 2};
    double dx[2], dalpha, dweight[2], dbias[2];
    cr_assert_eq(lacs_ref_dyt_vjp(x, dy, 1, 2, 0.5, w, dx, &dalpha, dweight, dbias), LACS_OK);
    cr_expect(dx[0] == 0 && dx[1] == 0 && dalpha == 0, "dyt_vjp at +-inf: dx %g %g, dalpha %g (limit 0)",
              dx[0], dx[1], dalpha);
    cr_expect(dweight[0] == 3 && dweight[1] == -5 && dbias[0] == 3 && dbias[1] == 5,
              "dweight = dy tanh, dbias = dy");
    /* alpha = 0: dx = 0, dalpha = sum dy weight x, dweight = sum dy * (+-0) */
    const double xf[2] = {1.5, -2}, dyf[2] = {1, 1};
    cr_assert_eq(lacs_ref_dyt_vjp(xf, dyf, 1, 2, 0, w, dx, &dalpha, dweight, NULL), LACS_OK);
    cr_expect(dx[0] == 0 && dx[1] == 0 && dalpha == 2 * 1.5 + 2 * -2 && dweight[0] == 0,
              "dyt_vjp at alpha = 0");
    /* NaN in dy propagates to dx and every sum */
    const double dyn[2] = {NAN, 1};
    cr_assert_eq(lacs_ref_dyt_vjp(xf, dyn, 1, 2, 0.5, NULL, dx, &dalpha, dweight, dbias), LACS_OK);
    cr_expect(isnan(dx[0]) && !isnan(dx[1]) && isnan(dalpha) && isnan(dweight[0]) && isnan(dbias[0]),
              "NaN in dy propagates");
}

Test(norm_ieee, rmsnorm)
{
    enum { D = 4 };
    const double zero[D] = {0.0, -0.0, 0.0, -0.0}, dy[D] = {1, -2, 3, 4};
    double y[D], J[D * D], dx[D], dweight[D];
    /* zero row, eps = 0: y = +0, J = 0, dx = 0 (the convention of H3) */
    cr_assert_eq(lacs_ref_rmsnorm(zero, 1, D, 0, NULL, y), LACS_OK);
    cr_assert_eq(lacs_ref_rmsnorm_jacobian(zero, D, 0, J), LACS_OK);
    cr_assert_eq(lacs_ref_rmsnorm_vjp(zero, dy, 1, D, 0, NULL, dx, dweight), LACS_OK);
    for (int i = 0; i < D; i++)
        cr_expect(y[i] == 0 && !signbit(y[i]) && dx[i] == 0 && dweight[i] == 0, "rmsnorm(0), eps = 0");
    for (int i = 0; i < D * D; i++)
        cr_expect(J[i] == 0, "J(0) with eps = 0 must be 0");
    /* zero row, eps > 0: x / sqrt(eps) keeps the signs of zero */
    cr_assert_eq(lacs_ref_rmsnorm(zero, 1, D, 1e-6, NULL, y), LACS_OK);
    cr_expect(y[0] == 0 && !signbit(y[0]) && y[1] == 0 && signbit(y[1]), "rmsnorm(+-0, eps > 0) = +-0");
    /* scale invariance with eps = 0 is exact under powers of two, up to 2^+-1000 */
    lacs_rng rng = lacs_rng_seed(3);
    double x[D], xs[D], ys[D];
    for (int i = 0; i < D; i++)
        x[i] = lacs_rng_normal12(&rng);
    cr_assert_eq(lacs_ref_rmsnorm(x, 1, D, 0, NULL, y), LACS_OK);
    const int powers[] = {1000, -1000, 3};
    for (int p = 0; p < 3; p++) {
        for (int i = 0; i < D; i++)
            xs[i] = ldexp(x[i], powers[p]);
        cr_assert_eq(lacs_ref_rmsnorm(xs, 1, D, 0, NULL, ys), LACS_OK);
        cr_expect(memcmp(y, ys, sizeof y) == 0, "rmsnorm(2^%d x) != rmsnorm(x)", powers[p]);
    }
    /* a subnormal row is normalised, not flushed */
    const double sub[D] = {DBL_TRUE_MIN, -2 * DBL_TRUE_MIN, 0, 2 * DBL_TRUE_MIN};
    cr_assert_eq(lacs_ref_rmsnorm(sub, 1, D, 0, NULL, y), LACS_OK);
    const double rms = sqrt(9.0 / D); /* in units of DBL_TRUE_MIN */
    for (int i = 0; i < D; i++)
        cr_expect(fabs(y[i] - sub[i] / DBL_TRUE_MIN / rms) <= DBL_EPSILON, "subnormal row: y[%d] = %g", i,
                  y[i]);
    /* an infinity: rms = inf, finite entries give +-0, infinite ones NaN; a NaN: all NaN */
    const double with_inf[D] = {1, -INFINITY, -2, 0}, with_nan[D] = {1, NAN, 0, 0};
    cr_assert_eq(lacs_ref_rmsnorm(with_inf, 1, D, 0, NULL, y), LACS_OK);
    cr_expect(y[0] == 0 && isnan(y[1]) && y[2] == 0 && signbit(y[2]) && y[3] == 0, "rmsnorm with an inf");
    cr_assert_eq(lacs_ref_rmsnorm(with_nan, 1, D, 0, NULL, y), LACS_OK);
    for (int i = 0; i < D; i++)
        cr_expect(isnan(y[i]), "rmsnorm with a NaN: y[%d] = %g", i, y[i]);
}

Test(norm_ieee, l2norm_vjp)
{
    const double zero[2] = {0, 0}, dy[2] = {1, 0}, x34[2] = {3, 4}, tiny2[2] = {1e-9, -2e-9};
    double dx[2];
    for (int conv = 0; conv < 2; conv++) {
        cr_assert_eq(lacs_ref_l2norm_vjp(zero, dy, 1, 2, 0, (lacs_l2norm_convention)conv, dx), LACS_OK);
        cr_expect(dx[0] == 0 && dx[1] == 0, "l2norm_vjp(0) with eps = 0 is 0 (convention %d)", conv);
    }
    /* max_eps: at ||x|| = eps the normalising side (torch's clamp_min gradient) */
    cr_assert_eq(lacs_ref_l2norm_vjp(x34, dy, 1, 2, 5, LACS_L2NORM_MAX_EPS, dx), LACS_OK);
    cr_expect(fabs(dx[0] - 0.128) <= 1e-16 && fabs(dx[1] + 0.096) <= 1e-16, "||x|| = eps: %.17g %.17g", dx[0],
              dx[1]);
    cr_assert_eq(lacs_ref_l2norm_vjp(x34, dy, 1, 2, 5.5, LACS_L2NORM_MAX_EPS, dx), LACS_OK);
    cr_expect(dx[0] == 1 / 5.5 && dx[1] == 0, "||x|| < eps: dx = dy / eps");
    cr_assert_eq(lacs_ref_l2norm_vjp(tiny2, dy, 1, 2, 1e-6, LACS_L2NORM_MAX_EPS, dx), LACS_OK);
    cr_expect(dx[0] == 1 / 1e-6 && dx[1] == 0, "max_eps below eps: dx = dy / eps exactly");
    /* sqrt_eps with eps = 0 is max_eps with eps = 0 away from 0 */
    double other[2];
    cr_assert_eq(lacs_ref_l2norm_vjp(x34, dy, 1, 2, 0, LACS_L2NORM_SQRT_EPS, dx), LACS_OK);
    cr_assert_eq(lacs_ref_l2norm_vjp(x34, dy, 1, 2, 0, LACS_L2NORM_MAX_EPS, other), LACS_OK);
    cr_expect(fabs(dx[0] - other[0]) <= 1e-17 && fabs(dx[1] - other[1]) <= 1e-17,
              "eps = 0: the conventions agree");
}

/* SPEC.md 3: a NaN in a row makes the whole row NaN in both conventions, for
 * any eps (spec 1.1 gave zeros, or x / eps with max_eps: fmax drops the NaN). */
Test(norm_ieee, l2norm_nan_row)
{
    const double x[3] = {1, NAN, 2}, dy[3] = {1, 1, 1}, finite[3] = {1, 2, 2}, dy_nan[3] = {1, NAN, 0};
    double y[3], dx[3];
    for (int conv = 0; conv < 2; conv++)
        for (int e = 0; e < 2; e++) {
            double eps = e ? 1e-3 : 0;
            cr_assert_eq(lacs_ref_l2norm(x, 1, 3, eps, (lacs_l2norm_convention)conv, y), LACS_OK);
            cr_assert_eq(lacs_ref_l2norm_vjp(x, dy, 1, 3, eps, (lacs_l2norm_convention)conv, dx), LACS_OK);
            for (int i = 0; i < 3; i++)
                cr_expect(isnan(y[i]) && isnan(dx[i]), "convention %d, eps %g: y[%d] = %g, dx = %g", conv, eps,
                          i, y[i], dx[i]);
            cr_assert_eq(lacs_ref_l2norm_vjp(finite, dy_nan, 1, 3, eps, (lacs_l2norm_convention)conv, dx),
                         LACS_OK);
            for (int i = 0; i < 3; i++)
                cr_expect(isnan(dx[i]), "NaN in dy: dx[%d] = %g", i, dx[i]);
        }
}

/* In the double build y may alias x, and dx may alias x or dy; the VJP sums
 * overwrite their outputs. */
Test(norm_ieee, aliasing_and_overwritten_sums)
{
    norm_case c = make_case(OP_DYT, 9, 0.7, 1.5);
    for (int op = 0; op < OP_COUNT; op++) {
        c.op = (norm_op)op;
        c.param = op == OP_SOFTCAP ? 2.5 : op == OP_DYT ? 0.7 : op == OP_DYISRU ? 0.8 : 1e-3;
        double y[MAXN], in_place[MAXN];
        forward_double(&c, y);
        norm_case alias = c;
        switch (c.op) {
        case OP_RMSNORM:
            lacs_ref_rmsnorm(alias.x, c.rows, c.dim, c.param, c.weight, alias.x);
            break;
        case OP_DYT:
            lacs_ref_dyt(alias.x, c.rows, c.dim, c.param, c.weight, c.bias, alias.x);
            break;
        case OP_DYISRU:
            lacs_ref_dyisru(alias.x, c.rows, c.dim, c.param, c.weight, c.bias, alias.x);
            break;
        case OP_SOFTCAP:
            lacs_ref_softcap(alias.x, MAXN, c.param, alias.x);
            break;
        default:
            lacs_ref_l2norm(alias.x, c.rows, c.dim, c.param, (lacs_l2norm_convention)(op - OP_L2_SQRT_EPS),
                            alias.x);
        }
        memcpy(in_place, alias.x, sizeof in_place);
        cr_expect(memcmp(y, in_place, sizeof y) == 0, "%s in place differs", op_names[op]);

        grads g = reference_grads(&c);
        double on_dy[MAXN], on_x[MAXN], sums[MAXD], dparam = 1e30;
        memcpy(on_dy, c.dy, sizeof on_dy);
        memcpy(on_x, c.x, sizeof on_x);
        for (int j = 0; j < MAXD; j++)
            sums[j] = 1e30;
        switch (c.op) {
        case OP_RMSNORM:
            lacs_ref_rmsnorm_vjp(c.x, on_dy, c.rows, c.dim, c.param, c.weight, on_dy, sums);
            lacs_ref_rmsnorm_vjp(on_x, c.dy, c.rows, c.dim, c.param, c.weight, on_x, NULL);
            cr_expect(memcmp(sums, g.dweight, sizeof sums) == 0, "rmsnorm_vjp added to dweight");
            break;
        case OP_DYT:
            lacs_ref_dyt_vjp(c.x, on_dy, c.rows, c.dim, c.param, c.weight, on_dy, &dparam, NULL, sums);
            lacs_ref_dyt_vjp(on_x, c.dy, c.rows, c.dim, c.param, c.weight, on_x, NULL, NULL, NULL);
            cr_expect(memcmp(sums, g.dbias, sizeof sums) == 0 && dparam == g.dparam,
                      "dyt_vjp added to its sums");
            break;
        case OP_DYISRU:
            lacs_ref_dyisru_vjp(c.x, on_dy, c.rows, c.dim, c.param, c.weight, on_dy, &dparam, sums, NULL);
            lacs_ref_dyisru_vjp(on_x, c.dy, c.rows, c.dim, c.param, c.weight, on_x, NULL, NULL, NULL);
            cr_expect(memcmp(sums, g.dweight, sizeof sums) == 0 && dparam == g.dparam,
                      "dyisru_vjp added to its sums");
            break;
        case OP_SOFTCAP:
            lacs_ref_softcap_vjp(c.x, on_dy, MAXN, c.param, on_dy, &dparam);
            lacs_ref_softcap_vjp(on_x, c.dy, MAXN, c.param, on_x, NULL);
            cr_expect(dparam == g.dparam, "softcap_vjp added to dcap");
            break;
        default:
            lacs_ref_l2norm_vjp(c.x, on_dy, c.rows, c.dim, c.param,
                                (lacs_l2norm_convention)(op - OP_L2_SQRT_EPS), on_dy);
            lacs_ref_l2norm_vjp(on_x, c.dy, c.rows, c.dim, c.param,
                                (lacs_l2norm_convention)(op - OP_L2_SQRT_EPS), on_x);
        }
        cr_expect(memcmp(on_dy, g.dx, sizeof on_dy) == 0, "%s: dx on dy differs", op_names[op]);
        cr_expect(memcmp(on_x, g.dx, sizeof on_x) == 0, "%s: dx on x differs", op_names[op]);
    }
    /* rows = 0: nothing read, the sums are still written (zeros) */
    double dweight[2] = {7, 7}, dalpha = 7;
    cr_assert_eq(lacs_ref_dyt_vjp(NULL, NULL, 0, 2, 1, NULL, NULL, &dalpha, dweight, NULL), LACS_OK);
    cr_expect(dalpha == 0 && dweight[0] == 0 && dweight[1] == 0, "rows = 0 gives zero sums");
}

/* ---- norm_errors ---- */

static double buf[MAXN], out[MAXN];

static void expect_error(int rc, int code, const char *needle)
{
    cr_expect_eq(rc, code, "expected error %d, got %d (%s)", code, rc, lacs_last_error());
    cr_expect(strstr(lacs_last_error(), needle) != NULL, "message \"%s\" does not mention \"%s\"",
              lacs_last_error(), needle);
}

Test(norm_errors, shapes_parameters_and_pointers)
{
    expect_error(lacs_ref_rmsnorm(buf, -1, 4, 0, NULL, out), LACS_ERR_SHAPE, "rmsnorm: rows = -1");
    expect_error(lacs_ref_dyt(buf, 1, 0, 1, NULL, NULL, out), LACS_ERR_SHAPE, "dim = 0");
    expect_error(lacs_ref_rmsnorm_jacobian(buf, 0, 0, out), LACS_ERR_SHAPE, "rmsnorm_jacobian: dim = 0");
    expect_error(lacs_ref_softcap(buf, -2, 1, out), LACS_ERR_SHAPE, "softcap: n = -2");
    expect_error(lacs_ref_l2norm_vjp(buf, buf, 1, 0, 0, LACS_L2NORM_SQRT_EPS, out), LACS_ERR_SHAPE,
                 "l2norm_vjp: rows = 1 must be >= 0 and dim = 0");

    expect_error(lacs_ref_rmsnorm(buf, 1, 4, -1, NULL, out), LACS_ERR_PARAM, "rmsnorm: eps = -1");
    expect_error(lacs_ref_rmsnorm_vjp(buf, buf, 1, 4, INFINITY, NULL, out, NULL), LACS_ERR_PARAM,
                 "rmsnorm_vjp: eps = inf");
    expect_error(lacs_ref_rmsnorm_jacobian(buf, 4, NAN, out), LACS_ERR_PARAM, "rmsnorm_jacobian: eps = nan");
    expect_error(lacs_ref_dyt(buf, 1, 4, NAN, NULL, NULL, out), LACS_ERR_PARAM, "dyt: alpha = nan");
    expect_error(lacs_ref_dyt_vjp(buf, buf, 1, 4, -INFINITY, NULL, out, NULL, NULL, NULL), LACS_ERR_PARAM,
                 "dyt_vjp: alpha = -inf");
    expect_error(lacs_ref_dyisru(buf, 1, 4, -1, NULL, NULL, out), LACS_ERR_PARAM, "dyisru: C = -1");
    expect_error(lacs_ref_dyisru(buf, 1, 4, INFINITY, NULL, NULL, out), LACS_ERR_PARAM, "dyisru: C = inf");
    expect_error(lacs_ref_dyisru_vjp(buf, buf, 1, 4, NAN, NULL, out, NULL, NULL, NULL), LACS_ERR_PARAM,
                 "dyisru_vjp: C = nan");
    expect_error(lacs_ref_softcap(buf, 4, 0, out), LACS_ERR_PARAM, "softcap: cap = 0");
    expect_error(lacs_ref_softcap(buf, 4, -1, out), LACS_ERR_PARAM, "softcap: cap = -1");
    expect_error(lacs_ref_softcap(buf, 4, INFINITY, out), LACS_ERR_PARAM, "softcap: cap = inf");
    expect_error(lacs_ref_softcap_vjp(buf, buf, 4, NAN, out, NULL), LACS_ERR_PARAM, "softcap_vjp: cap = nan");
    expect_error(lacs_ref_l2norm_vjp(buf, buf, 1, 4, -1, LACS_L2NORM_MAX_EPS, out), LACS_ERR_PARAM,
                 "l2norm_vjp: eps = -1");
    expect_error(lacs_ref_l2norm_vjp(buf, buf, 1, 4, 0, (lacs_l2norm_convention)7, out), LACS_ERR_PARAM,
                 "l2norm_vjp: unknown convention 7");
    expect_error(lacs_ref_rmsnorm_ld(buf, 1, 4, -1, NULL, NULL), LACS_ERR_INPUT,
                 "rmsnorm: x and y are required");

    expect_error(lacs_ref_dyisru(NULL, 1, 4, 1, NULL, NULL, out), LACS_ERR_INPUT,
                 "dyisru: x and y are required");
    expect_error(lacs_ref_softcap_vjp(buf, NULL, 4, 1, out, NULL), LACS_ERR_INPUT,
                 "softcap_vjp: x, dy and dx are required");
    expect_error(lacs_ref_dyt_vjp(buf, buf, 1, 4, 1, NULL, NULL, NULL, NULL, NULL), LACS_ERR_INPUT,
                 "dyt_vjp: x, dy and dx are required");
    /* the shape is checked before the pointers, the pointers before the parameters */
    expect_error(lacs_ref_dyisru(NULL, -1, 4, -1, NULL, NULL, NULL), LACS_ERR_SHAPE, "rows = -1");
    expect_error(lacs_ref_dyisru(NULL, 1, 4, -1, NULL, NULL, NULL), LACS_ERR_INPUT, "x and y are required");
}

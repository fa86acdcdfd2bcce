/* The identities the forms rest on (SPEC.md 4.4, 4.7, 4.9):
 *   H5, H8  each recurrent step is one SGD step on its loss (gradient by
 *           central differences in long double); the seed's printed Comba loss fails;
 *   E2, E3  eigenvalues of I - eta k k^T; L2-normalised k with sigmoid eta in (0, 1],
 *           with 2 eta in (-1, 1];
 *   E3      the printed negative-eigenvalue form is delta_rule(2 eta, v / 2);
 *   E5, E7  EFLA's coefficient and its transition's eigenvalues e^{-beta ||k||^2};
 *   E6      the rank-1 matrix-function identity for exp, (e^x - 1)/x and a cubic;
 *   H6, H8, E5  one step of each op equals its paper form with explicit matrices.
 * Each is paired with a wrong variant that the same check rejects. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

/* ---- H5 / H8: one recurrent step is one SGD step ---- */

enum { TK = 6, TV = 5 };

typedef long double (*loss_fn)(const long double *h, const long double *k, const long double *v,
                               long double gamma, long double eta, lacs_ttt_loss_kind kind);

static long double stated_loss(const long double *h, const long double *k, const long double *v,
                               long double gamma, long double eta, lacs_ttt_loss_kind kind)
{
    return lacs_ref_ttt_loss_ld(kind, TK, TV, h, k, v, gamma, eta);
}

/* The seed prints Comba's regulariser as (1 - gamma)/eta ||S||_F^2. */
static long double printed_comba_loss(const long double *h, const long double *k, const long double *v,
                                      long double gamma, long double eta, lacs_ttt_loss_kind kind)
{
    (void)kind;
    long double frob = 0;
    for (int i = 0; i < TK * TV; i++)
        frob += h[i] * h[i];
    return lacs_ref_ttt_loss_ld(LACS_TTT_DELTA, TK, TV, h, k, v, gamma, eta) + (1 - gamma) / eta * frob;
}

/* h - lr * grad L, grad by central differences in long double. The losses are
 * quadratic in h, so the difference quotient is exact but for rounding:
 * about eps_ld * |L| / delta ~ 1e-15 with delta = 1e-4. */
static void sgd_step(loss_fn loss, lacs_ttt_loss_kind kind, const double *h, const double *k,
                     const double *v, double gamma, double eta, double lr, double *out)
{
    long double hl[TK * TV], kl[TK], vl[TV];
    for (int i = 0; i < TK * TV; i++)
        hl[i] = h[i];
    for (int i = 0; i < TK; i++)
        kl[i] = k[i];
    for (int i = 0; i < TV; i++)
        vl[i] = v[i];
    const long double delta = 1e-4L;
    for (int i = 0; i < TK * TV; i++) {
        long double saved = hl[i];
        hl[i] = saved + delta;
        long double up = loss(hl, kl, vl, gamma, eta, kind);
        hl[i] = saved - delta;
        long double down = loss(hl, kl, vl, gamma, eta, kind);
        hl[i] = saved;
        out[i] = (double)(saved - lr * (up - down) / (2 * delta));
    }
}

/* One step (T = 1, h0 = h) of the op matching `kind`, returning ht. */
static void recurrent_step(lacs_ttt_loss_kind kind, const double *h, const double *k, const double *v,
                           double gamma, double eta, double *ht)
{
    const lacs_dims d = {.B = 1, .T = 1, .H = 1, .HV = 1, .K = TK, .V = TV};
    double q[TK] = {0}, o[TV], log_gamma = log(gamma), beta = eta;
    lacs_inputs in = {.q = q, .k = k, .v = v, .h0 = h, .scale = 1};
    int rc = LACS_OK;
    switch (kind) {
    case LACS_TTT_LINEAR:
        rc = lacs_ref_linear_attn(&d, &in, o, ht);
        break;
    case LACS_TTT_RETENTION:
        in.g_gamma = &log_gamma;
        rc = lacs_ref_retention(&d, &in, o, ht);
        break;
    case LACS_TTT_DELTA:
        in.beta = &beta;
        rc = lacs_ref_delta_rule(&d, &in, o, ht);
        break;
    case LACS_TTT_COMBA:
        in.beta = &beta;
        in.g = &log_gamma;
        rc = lacs_ref_comba(&d, &in, o, ht);
        break;
    }
    cr_assert_eq(rc, LACS_OK, "%s", lacs_last_error());
}

static void random_ttt_case(uint64_t seed, double *h, double *k, double *v)
{
    lacs_rng rng = lacs_rng_seed(seed);
    for (int i = 0; i < TK * TV; i++)
        h[i] = lacs_rng_normal12(&rng);
    for (int i = 0; i < TK; i++)
        k[i] = lacs_rng_normal12(&rng) * 0.4;
    for (int i = 0; i < TV; i++)
        v[i] = lacs_rng_normal12(&rng);
}

static double ttt_error(loss_fn loss, lacs_ttt_loss_kind kind, uint64_t seed)
{
    double h[TK * TV], k[TK], v[TV], step[TK * TV], sgd[TK * TV];
    random_ttt_case(seed, h, k, v);
    const double gamma = 0.9, eta = 0.35;
    const double lr = (kind == LACS_TTT_DELTA || kind == LACS_TTT_COMBA) ? eta : 1;
    recurrent_step(kind, h, k, v, gamma, eta, step);
    sgd_step(loss, kind, h, k, v, gamma, eta, lr, sgd);
    return lacs_normwise_error(sgd, step, 1, 1, 1, TK * TV, NULL, 0, NULL);
}

Test(ttt, linear_attention_is_sgd_on_minus_v_dot_prediction)
{
    cr_expect_leq(ttt_error(stated_loss, LACS_TTT_LINEAR, 1), FORMS_BOUND);
}

Test(ttt, retention_is_sgd_with_l2_regulariser)
{
    cr_expect_leq(ttt_error(stated_loss, LACS_TTT_RETENTION, 2), FORMS_BOUND);
}

Test(ttt, delta_rule_is_sgd_on_the_square_loss_with_rate_beta)
{
    cr_expect_leq(ttt_error(stated_loss, LACS_TTT_DELTA, 3), FORMS_BOUND);
}

Test(ttt, comba_is_sgd_with_regulariser_over_two_eta)
{
    cr_expect_leq(ttt_error(stated_loss, LACS_TTT_COMBA, 4), FORMS_BOUND);
}

Test(ttt, the_seeds_printed_comba_loss_does_not_give_comba)
{
    double err = ttt_error(printed_comba_loss, LACS_TTT_COMBA, 4);
    cr_expect_gt(err, WRONG_BY_AT_LEAST, "(1 - gamma)/eta ||S||^2 matched Comba: %.3e", err);
}

Test(ttt, a_wrong_rate_is_rejected)
{
    /* the delta loss stepped at rate 1 instead of beta: not the delta rule */
    double h[TK * TV], k[TK], v[TV], step[TK * TV], sgd[TK * TV];
    random_ttt_case(9, h, k, v);
    recurrent_step(LACS_TTT_DELTA, h, k, v, 0.9, 0.35, step);
    sgd_step(stated_loss, LACS_TTT_DELTA, h, k, v, 0.9, 0.35, 1.0, sgd);
    cr_expect_gt(lacs_normwise_error(sgd, step, 1, 1, 1, TK * TV, NULL, 0, NULL), WRONG_BY_AT_LEAST);
}

/* ---- E2, E3, E7: eigenvalues of the transitions ---- */

enum { EK = 8 };
/* Jacobi's eigenvalues are accurate to a few n eps ||A|| (n = 8): 32 eps. */
#define EIG_TOL (32 * DBL_EPSILON)

static void transition(const double *k, double coef, double *M)
{
    for (int i = 0; i < EK; i++)
        for (int j = 0; j < EK; j++)
            M[i * EK + j] = (i == j) - coef * k[i] * k[j];
}

static double norm2(const double *k)
{
    double s = 0;
    for (int i = 0; i < EK; i++)
        s += k[i] * k[i];
    return s;
}

/* E2: I - eta k k^T has 1 - eta ||k||^2 once and 1 (EK - 1) times. */
static void expect_e2_spectrum(const double *k, double eta)
{
    double M[EK * EK], ev[EK];
    transition(k, eta, M);
    cr_assert_eq(lacs_ref_symmetric_eigenvalues(EK, M, ev), LACS_OK);
    double special = 1 - eta * norm2(k), tol = 1e-13 * fmax(1, eta * norm2(k));
    int lowest_is_special = special <= 1;
    double expect_min = lowest_is_special ? special : 1, expect_max = lowest_is_special ? 1 : special;
    cr_expect(fabs(ev[0] - expect_min) <= tol, "eta = %g, ||k||^2 = %g: lowest %.17g, expected %.17g",
              eta, norm2(k), ev[0], expect_min);
    cr_expect(fabs(ev[EK - 1] - expect_max) <= tol, "eta = %g: highest %.17g, expected %.17g", eta,
              ev[EK - 1], expect_max);
    for (int i = 1; i < EK - 1; i++)
        cr_expect(fabs(ev[i] - 1) <= tol, "eta = %g: eigenvalue %d is %.17g, expected 1", eta, i, ev[i]);
}

Test(eigen, e2_spectrum_on_random_and_edge_keys)
{
    lacs_rng rng = lacs_rng_seed(11);
    double k[EK];
    const double etas[] = {0, 0.3, 1, 1.7, 2};
    const double norms[] = {0, 1e-8, 1, 3, 1e3};
    for (size_t a = 0; a < sizeof norms / sizeof norms[0]; a++) {
        for (int i = 0; i < EK; i++)
            k[i] = lacs_rng_normal12(&rng);
        double scale = norms[a] / sqrt(norm2(k));
        for (int i = 0; i < EK; i++)
            k[i] *= scale;
        for (size_t e = 0; e < sizeof etas / sizeof etas[0]; e++)
            expect_e2_spectrum(k, etas[e] / fmax(1, norm2(k)));
    }
}

/* E2: with ||k|| = 1 and eta = sigmoid(x) every eigenvalue is in (0, 1];
 * E3: with 2 eta, in (-1, 1]. */
Test(eigen, e2_e3_normalised_key_and_sigmoid_rate_are_stable)
{
    lacs_rng rng = lacs_rng_seed(12);
    double raw[EK], k[EK], M[EK * EK], ev[EK];
    const double xs[] = {-30, -3, -1, 0, 1, 3, 20};
    for (int i = 0; i < EK; i++)
        raw[i] = lacs_rng_normal12(&rng);
    cr_assert_eq(lacs_ref_l2norm(raw, 1, EK, 0, LACS_L2NORM_MAX_EPS, k), LACS_OK);
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        double eta;
        lacs_ref_sigmoid(&xs[i], 1, &eta);
        transition(k, eta, M);
        lacs_ref_symmetric_eigenvalues(EK, M, ev);
        cr_expect(ev[0] > 0 && ev[EK - 1] <= 1 + EIG_TOL, "E2: x = %g: [%.17g, %.17g]", xs[i],
                  ev[0], ev[EK - 1]);
        transition(k, 2 * eta, M);
        lacs_ref_symmetric_eigenvalues(EK, M, ev);
        cr_expect(ev[0] > -1 && ev[EK - 1] <= 1 + EIG_TOL, "E3: x = %g: [%.17g, %.17g]", xs[i],
                  ev[0], ev[EK - 1]);
    }
    /* the check can fail: an unnormalised key (||k||^2 = 4) with eta = 0.9 leaves (-1, 1] */
    for (int i = 0; i < EK; i++)
        raw[i] = 2 * k[i];
    transition(raw, 0.9, M);
    lacs_ref_symmetric_eigenvalues(EK, M, ev);
    cr_expect(ev[0] < -1, "an unstable transition was not seen: lowest %.17g", ev[0]);
}

/* E7: I - c k k^T, c the EFLA coefficient, has eigenvalue e^{-beta ||k||^2}
 * along k and 1 elsewhere: in (0, 1] for every k (numerically [0, 1] within
 * rounding once e^{-beta ||k||^2} underflows). */
Test(eigen, e7_efla_transition_in_zero_one_for_every_key)
{
    lacs_rng rng = lacs_rng_seed(13);
    double k[EK], M[EK * EK], ev[EK];
    const double betas[] = {0, 0.5, 1, 2, 10};
    const double norms2[] = {0, 1e-300, 1e-12, 1e-4, 1, 100, 1e4};
    for (size_t a = 0; a < sizeof norms2 / sizeof norms2[0]; a++) {
        for (int i = 0; i < EK; i++)
            k[i] = lacs_rng_normal12(&rng);
        double s = sqrt(norms2[a] / norm2(k));
        for (int i = 0; i < EK; i++)
            k[i] *= s;
        for (size_t b = 0; b < sizeof betas / sizeof betas[0]; b++) {
            double c = lacs_ref_efla_coefficient(betas[b], norm2(k));
            transition(k, c, M);
            lacs_ref_symmetric_eigenvalues(EK, M, ev);
            double expected = exp(-betas[b] * norm2(k));
            cr_expect(fabs(ev[0] - expected) <= 1e-13, "beta %g ||k||^2 %g: lowest %.17g, e^{-beta l} %.17g",
                      betas[b], norm2(k), ev[0], expected);
            cr_expect(ev[0] >= -EIG_TOL && ev[EK - 1] <= 1 + EIG_TOL, "beta %g ||k||^2 %g: [%.17g, %.17g]",
                      betas[b], norm2(k), ev[0], ev[EK - 1]);
        }
    }
    /* the delta rule's eta in place of c leaves (0, 1] for a large key: E7 is EFLA's */
    for (int i = 0; i < EK; i++)
        k[i] = 1;
    transition(k, 1.0, M);
    lacs_ref_symmetric_eigenvalues(EK, M, ev);
    cr_expect(ev[0] < 0, "eta instead of c stayed in (0, 1]: %.17g", ev[0]);
}

/* ---- E5: the coefficient ---- */

Test(efla, coefficient_is_beta_at_zero_norm_and_accurate_everywhere)
{
    const double betas[] = {0, 0.25, 1, 2, 7.5};
    const double norms2[] = {0, 4.9e-324, 1e-310, 1e-200, 1e-20, 1e-10, 9.99e-8, 1.001e-7, 1e-3,
                             1, 30, 1e3, 1e300};
    for (size_t b = 0; b < sizeof betas / sizeof betas[0]; b++) {
        cr_expect_eq(lacs_ref_efla_coefficient(betas[b], 0), betas[b], "c(beta, 0) must be beta exactly");
        for (size_t n = 0; n < sizeof norms2 / sizeof norms2[0]; n++) {
            double c = lacs_ref_efla_coefficient(betas[b], norms2[n]);
            long double c_ld = lacs_ref_efla_coefficient_ld(betas[b], norms2[n]);
            double rel = c_ld == 0 ? fabs(c) : (double)fabsl((c - c_ld) / c_ld);
            cr_expect(rel <= 4 * DBL_EPSILON, "c(%g, %g) = %.17g, long double %.20Lg (rel %.2e)",
                      betas[b], norms2[n], c, c_ld, rel);
        }
    }
}

/* beta < 0 is outside the stable domain but still computed exactly: the series
 * is only for |beta ||k||^2| < 1e-7. */
Test(efla, coefficient_for_negative_beta)
{
    const double cases[][2] = {{-1, 10}, {-0.5, 1e-3}, {-2, 1e-9}, {-0.1, 0}};
    for (int i = 0; i < 4; i++) {
        double c = lacs_ref_efla_coefficient(cases[i][0], cases[i][1]);
        long double c_ld = lacs_ref_efla_coefficient_ld(cases[i][0], cases[i][1]);
        cr_expect(fabsl((c - c_ld) / c_ld) <= 4 * DBL_EPSILON, "c(%g, %g) = %.17g, long double %.20Lg",
                  cases[i][0], cases[i][1], c, c_ld);
    }
    cr_expect(fabs(lacs_ref_efla_coefficient(-1, 10) - -expm1(10.0) / 10) <= 1e-12 * 2202.5);
}

Test(efla, naive_and_epsilon_guarded_coefficients_are_rejected)
{
    const double beta = 0.5, l = 1e-10;
    long double exact = lacs_ref_efla_coefficient_ld(beta, l);
    double naive = (1 - exp(-beta * l)) / l;              /* 1 - exp(-x) without expm1 */
    double guarded = -expm1(-beta * l) / (l + 1e-6);      /* EFLA's public code: eps in the denominator */
    cr_expect_gt(fabsl((naive - exact) / exact), 1e-9, "1 - exp(-x) kept its digits at x = 5e-11?");
    cr_expect_gt(fabsl((guarded - exact) / exact), 0.9, "the 1e-6 guard did not change c at ||k||^2 = 1e-10?");
}

/* ---- E3: the printed negative-eigenvalue form ---- */

/* E3 as printed, in h: h_t = (I - 2 eta k k^T) h_{t-1} + eta k v^T, one head. */
static void e3_literal(int64_t T, const double *q, const double *k, const double *v, const double *eta,
                       double *o, double *h)
{
    double p[TV];
    for (int64_t t = 0; t < T; t++) {
        for (int c = 0; c < TV; c++) {
            p[c] = 0;
            for (int i = 0; i < TK; i++)
                p[c] += h[i * TV + c] * k[t * TK + i];
        }
        for (int i = 0; i < TK; i++)
            for (int c = 0; c < TV; c++)
                h[i * TV + c] += -2 * eta[t] * k[t * TK + i] * p[c] + eta[t] * k[t * TK + i] * v[t * TV + c];
        for (int c = 0; c < TV; c++) {
            o[t * TV + c] = 0;
            for (int i = 0; i < TK; i++)
                o[t * TV + c] += h[i * TV + c] * q[t * TK + i];
        }
    }
}

static double e3_error(double v_factor)
{
    enum { T = 40 };
    lacs_rng rng = lacs_rng_seed(21);
    double q[T * TK], k[T * TK], v[T * TV], v_mapped[T * TV], eta[T], beta[T];
    double o_lit[T * TV], h_lit[TK * TV] = {0}, o_ref[T * TV], h_ref[TK * TV];
    for (int i = 0; i < T * TK; i++) {
        q[i] = lacs_rng_normal12(&rng);
        k[i] = lacs_rng_normal12(&rng);
    }
    lacs_ref_l2norm(k, T, TK, 0, LACS_L2NORM_MAX_EPS, k);
    for (int i = 0; i < T * TV; i++) {
        v[i] = lacs_rng_normal12(&rng);
        v_mapped[i] = v_factor * v[i];
    }
    for (int t = 0; t < T; t++) {
        eta[t] = lacs_rng_uniform(&rng);
        beta[t] = 2 * eta[t];
    }
    e3_literal(T, q, k, v, eta, o_lit, h_lit);
    const lacs_dims d = {.B = 1, .T = T, .H = 1, .HV = 1, .K = TK, .V = TV};
    const lacs_inputs in = {.q = q, .k = k, .v = v_mapped, .beta = beta, .scale = 1};
    cr_assert_eq(lacs_ref_delta_rule(&d, &in, o_ref, h_ref), LACS_OK);
    double err_o = lacs_normwise_error(o_lit, o_ref, 1, T, 1, TV, NULL, 0, NULL);
    double err_h = lacs_normwise_error(h_lit, h_ref, 1, 1, 1, TK * TV, NULL, 0, NULL);
    return fmax(err_o, err_h);
}

Test(identities, e3_is_delta_rule_with_beta_2eta_and_half_v)
{
    cr_expect_leq(e3_error(0.5), FORMS_BOUND);
    cr_expect_gt(e3_error(1.0), WRONG_BY_AT_LEAST, "beta = 2 eta alone (v not halved) matched E3");
}

/* ---- E6: f(x y^T) = f(0) I + x [(f(s) - f(0))/s] y^T ---- */

static double exp_value(double x) { return exp(x); }
static double exp_dd(double s) { return s == 0 ? 1 : expm1(s) / s; }
static double psi_value(double x) { return x == 0 ? 1 : expm1(x) / x; }
static double psi_dd(double s) /* (psi(s) - 1)/s = (e^s - 1 - s)/s^2 */
{
    if (fabs(s) < 1e-3)
        return 0.5 + s / 6 + s * s / 24 + s * s * s / 120 + s * s * s * s / 720;
    return (expm1(s) - s) / (s * s);
}
static double cubic_value(double x) { return 1 + 2 * x - x * x / 2 + x * x * x / 3; }
static double cubic_dd(double s) { return 2 - s / 2 + s * s / 3; }
static double exp_wrong_dd(double s) { return s == 0 ? 1 : exp(s) / s; } /* f(s)/s: forgets f(0) */

enum { EN = 7 };

static void dense_function(const char *which, const double *X, double *F)
{
    if (strcmp(which, "cubic") == 0) {
        double X2[EN * EN] = {0}, X3[EN * EN] = {0};
        for (int i = 0; i < EN; i++)
            for (int j = 0; j < EN; j++)
                for (int l = 0; l < EN; l++)
                    X2[i * EN + j] += X[i * EN + l] * X[l * EN + j];
        for (int i = 0; i < EN; i++)
            for (int j = 0; j < EN; j++)
                for (int l = 0; l < EN; l++)
                    X3[i * EN + j] += X2[i * EN + l] * X[l * EN + j];
        for (int i = 0; i < EN * EN; i++)
            F[i] = (i % (EN + 1) == 0) + 2 * X[i] - X2[i] / 2 + X3[i] / 3;
    } else if (strcmp(which, "exp") == 0) {
        cr_assert_eq(lacs_ref_expm_psi(EN, X, F, NULL), LACS_OK);
    } else {
        cr_assert_eq(lacs_ref_expm_psi(EN, X, NULL, F), LACS_OK);
    }
}

static double e6_error(const lacs_analytic_fn *f, const char *dense, double overlap)
{
    lacs_rng rng = lacs_rng_seed(31);
    double x[EN], y[EN], X[EN * EN], F_dense[EN * EN], F_rank1[EN * EN];
    for (int i = 0; i < EN; i++) {
        x[i] = 0.5 * lacs_rng_normal12(&rng);
        y[i] = 0.5 * lacs_rng_normal12(&rng);
    }
    /* move y to make s = y.x equal `overlap` */
    double s = 0, xx = 0;
    for (int i = 0; i < EN; i++) {
        s += x[i] * y[i];
        xx += x[i] * x[i];
    }
    for (int i = 0; i < EN; i++)
        y[i] += (overlap - s) / xx * x[i];
    for (int i = 0; i < EN; i++)
        for (int j = 0; j < EN; j++)
            X[i * EN + j] = x[i] * y[j];
    dense_function(dense, X, F_dense);
    lacs_ref_rank1_function(f, EN, x, y, F_rank1);
    return lacs_normwise_error(F_rank1, F_dense, 1, 1, 1, EN * EN, NULL, 0, NULL);
}

Test(identities, e6_rank1_function_for_exp_psi_and_a_cubic)
{
    const lacs_analytic_fn fns[] = {
        {"exp", exp_value, exp_dd}, {"psi", psi_value, psi_dd}, {"cubic", cubic_value, cubic_dd}};
    const double overlaps[] = {-2.5, -0.3, 0, 0.7, 1.9};
    for (int f = 0; f < 3; f++)
        for (int o = 0; o < 5; o++) {
            double err = e6_error(&fns[f], fns[f].name, overlaps[o]);
            cr_expect_leq(err, 1e-13, "%s at y.x = %g: %.3e", fns[f].name, overlaps[o], err);
        }
}

Test(identities, e6_with_f_of_s_over_s_is_rejected)
{
    const lacs_analytic_fn wrong = {"exp", exp_value, exp_wrong_dd};
    cr_expect_gt(e6_error(&wrong, "exp", 0.7), WRONG_BY_AT_LEAST);
}

/* ---- one step equals the paper form with explicit matrices ---- */

/* h1 = P h0 + w k v^T with P the K x K transition, built explicitly. */
static void explicit_step(const double *P, const double *h0, double w, const double *k, const double *v,
                          double *h1)
{
    for (int i = 0; i < TK; i++)
        for (int c = 0; c < TV; c++) {
            double sum = w * k[i] * v[c];
            for (int l = 0; l < TK; l++)
                sum += P[i * TK + l] * h0[l * TV + c];
            h1[i * TV + c] = sum;
        }
}

Test(identities, one_step_equals_the_paper_forms)
{
    lacs_rng rng = lacs_rng_seed(41);
    double q[TK], k[TK], v[TV], h0[TK * TV], o[TV], ht[TK * TV], expect[TK * TV], P[TK * TK];
    for (int i = 0; i < TK; i++) {
        q[i] = lacs_rng_normal12(&rng);
        k[i] = 0.6 * lacs_rng_normal12(&rng);
    }
    for (int i = 0; i < TV; i++)
        v[i] = lacs_rng_normal12(&rng);
    for (int i = 0; i < TK * TV; i++)
        h0[i] = lacs_rng_normal12(&rng);
    double beta = 0.7, g = -0.2, alpha = exp(g), kk = 0;
    for (int i = 0; i < TK; i++)
        kk += k[i] * k[i];
    const lacs_dims d = {.B = 1, .T = 1, .H = 1, .HV = 1, .K = TK, .V = TV};
    lacs_inputs in = {.q = q, .k = k, .v = v, .beta = &beta, .h0 = h0, .scale = 1};

    /* H6/E1: S (I - beta k k^T) + beta v k^T */
    for (int i = 0; i < TK; i++)
        for (int j = 0; j < TK; j++)
            P[i * TK + j] = (i == j) - beta * k[i] * k[j];
    explicit_step(P, h0, beta, k, v, expect);
    cr_assert_eq(lacs_ref_delta_rule(&d, &in, o, ht), LACS_OK);
    cr_expect_leq(lacs_normwise_error(ht, expect, 1, 1, 1, TK * TV, NULL, 0, NULL), 1e-14, "H6");

    /* H8: S (alpha (I - beta k k^T)) + beta v k^T */
    for (int i = 0; i < TK * TK; i++)
        P[i] *= alpha;
    explicit_step(P, h0, beta, k, v, expect);
    in.g = &g;
    cr_assert_eq(lacs_ref_gated_delta_rule(&d, &in, o, ht), LACS_OK);
    cr_expect_leq(lacs_normwise_error(ht, expect, 1, 1, 1, TK * TV, NULL, 0, NULL), 1e-14, "H8");
    in.g = NULL;

    /* E5: S (I - c k k^T) + c v k^T, c = (1 - e^{-beta ||k||^2}) / ||k||^2 */
    double c = -expm1(-beta * kk) / kk;
    for (int i = 0; i < TK; i++)
        for (int j = 0; j < TK; j++)
            P[i * TK + j] = (i == j) - c * k[i] * k[j];
    explicit_step(P, h0, c, k, v, expect);
    cr_assert_eq(lacs_ref_efla(&d, &in, o, ht), LACS_OK);
    cr_expect_leq(lacs_normwise_error(ht, expect, 1, 1, 1, TK * TV, NULL, 0, NULL), 1e-14, "E5");

    /* the check can fail: EFLA is not the delta rule with beta itself */
    for (int i = 0; i < TK; i++)
        for (int j = 0; j < TK; j++)
            P[i * TK + j] = (i == j) - beta * k[i] * k[j];
    explicit_step(P, h0, beta, k, v, expect);
    cr_expect_gt(lacs_normwise_error(ht, expect, 1, 1, 1, TK * TV, NULL, 0, NULL), WRONG_BY_AT_LEAST,
                 "EFLA with eta instead of c");
}

/* EFLA, error-free linear attention: E4 (the ODE step), E5 (the closed form),
 * E6 (the rank-1 matrix-function identity behind it). SPEC.md 4.7.
 *
 * E4: over each token the state follows dS/dt = S A + B, A = -k k^T, B = v k^T,
 * for a time beta (the learning rate eta of E1). Its exact step (E4, eq. 5/7) is
 *   S_t = S_{t-1} e^{beta A} + beta B psi(beta A),   psi(X) = (e^X - I)/X,
 * and by E6 (eq. 8, 9) e^{beta A} = I - c k k^T, beta B psi(beta A) = c v k^T with
 *   c = (1 - e^{-beta ||k||^2}) / ||k||^2                            (E5, eq. 6).
 * k is not normalised: its norm is what sets c.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* phi(x) = (1 - e^{-x}) / x, with phi(0) = 1 exactly (x < 0 only for beta < 0,
 * outside the stable domain but still computed exactly).
 * 1 - e^{-x} is -expm1(-x): computing it as 1 - exp(-x) loses every digit
 * when x is tiny (the EFLA ||k|| -> 0 bug). Below 1e-7 the series
 * 1 - x/2 + x^2/6 (for |x| below 1e-7) is exact to its remainder |x|^3/24 < 5e-23, under long
 * double's epsilon, and needs no division by x, so x = 0 and subnormal x
 * give the limit exactly. */
static real phi(real x)
{
    if (fabs(x) < 1e-7L)
        return 1 - x / 2 + x * x / 6;
    return -expm1(-x) / x;
}

/* E5 written as c = beta * phi(beta ||k||^2), which is the same number
 * ((1 - e^{-beta l}) / l = beta (1 - e^{-beta l}) / (beta l)) and has the
 * limit c = beta at ||k|| = 0 with no epsilon added. beta = 0 gives c = 0. */
real lacs_ref_efla_coefficient(real beta, real knorm2)
{
    return beta * phi(beta * knorm2);
}

/* E5: h_t = (I - c_t k_t k_t^T) h_{t-1} + c_t k_t v_t^T: the delta rule with
 * beta replaced by c_t: u = c (v - h^T k); h += k u^T. */
static int efla_kernel(const sequence_head *s, real *h, real *o)
{
    const int64_t K = s->K, V = s->V;
    real *u = malloc((size_t)V * sizeof(real));
    if (!u)
        return LACS_ERR_MEMORY;
    for (int64_t t = 0; t < s->T; t++) {
        const real *k = s->k + t * K, *v = s->v + t * V;
        real knorm2 = 0;
        for (int64_t c = 0; c < K; c++)
            knorm2 += k[c] * k[c];
        lacs_internal_delta_correction(K, V, h, k, v, lacs_ref_efla_coefficient(s->beta[t], knorm2), u);
        lacs_internal_state_add_outer(K, V, h, 1, k, u);
        lacs_internal_state_readout(K, V, h, s->q + t * K, s->scale, o + t * V);
    }
    free(u);
    return LACS_OK;
}

/* E4 without E6: build X = beta A = -beta k k^T as a dense K x K matrix, take
 * e^X and psi(X) by power series (lacs_ref_expm_psi), and step
 *   h_t = e^X h_{t-1} + beta psi(X) k v^T
 * (the transpose of eq. 5; A, e^X and psi(X) are symmetric). */
static int efla_ode_kernel(const sequence_head *s, real *h, real *o)
{
    const int64_t K = s->K, V = s->V;
    real *X = malloc((size_t)(K * K) * sizeof(real));
    real *E = malloc((size_t)(K * K) * sizeof(real));
    real *P = malloc((size_t)(K * K) * sizeof(real));
    real *h_new = malloc((size_t)(K * V) * sizeof(real));
    real *pk = malloc((size_t)K * sizeof(real));
    int rc = (X && E && P && h_new && pk) ? LACS_OK : LACS_ERR_MEMORY;
    for (int64_t t = 0; t < s->T && rc == LACS_OK; t++) {
        const real *k = s->k + t * K, *v = s->v + t * V;
        const real beta = s->beta[t];
        for (int64_t i = 0; i < K; i++)
            for (int64_t j = 0; j < K; j++)
                X[i * K + j] = -beta * k[i] * k[j];
        rc = lacs_ref_expm_psi(K, X, E, P);
        if (rc)
            break;
        lacs_internal_matmul(K, K, V, E, h, h_new);
        lacs_internal_matmul(K, K, 1, P, k, pk);
        lacs_internal_state_add_outer(K, V, h_new, beta, pk, v);
        for (int64_t i = 0; i < K * V; i++)
            h[i] = h_new[i];
        lacs_internal_state_readout(K, V, h, s->q + t * K, s->scale, o + t * V);
    }
    free(X);
    free(E);
    free(P);
    free(h_new);
    free(pk);
    return rc;
}

int lacs_ref_efla(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    int rc = lacs_internal_validate("efla", d, in, LACS_READS_BETA, LACS_READS_H0);
    return rc ? rc : lacs_internal_run_per_head("efla", d, in, STATE_KV, efla_kernel, o, ht, NULL);
}

int lacs_ref_efla_ode(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    int rc = lacs_internal_validate("efla_ode", d, in, LACS_READS_BETA, LACS_READS_H0);
    return rc ? rc : lacs_internal_run_per_head("efla_ode", d, in, STATE_KV, efla_ode_kernel, o, ht, NULL);
}

/* E6, eq. 8: for f(z) = sum a_m z^m, (x y^T)^m = x (y^T x)^{m-1} y^T for m >= 1,
 * so f(x y^T) = a_0 I + x [sum_{m>=1} a_m s^{m-1}] y^T with s = y^T x, and the
 * bracket is (f(s) - f(0)) / s. */
void lacs_ref_rank1_function(const analytic_fn *f, int64_t n, const real *x, const real *y, real *out)
{
    real s = 0;
    for (int64_t i = 0; i < n; i++)
        s += y[i] * x[i];
    const real f0 = f->value(0), bracket = f->divided_difference(s);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            out[i * n + j] = (i == j ? f0 : 0) + x[i] * bracket * y[j];
}

/* ---- gradients (SPEC.md 4.19) ---- */

/* phi'(x) = d/dx (1 - e^{-x})/x = (e^{-x} - phi(x)) / x. Near 0 the
 * difference cancels (both terms near 1), so for |x| < 1/2 the series
 * phi'(x) = sum_{m>=1} m (-1)^m x^{m-1} / (m+1)!, 30 terms (remainder below
 * 30 0.5^29 / 31! ~ 7e-41), evaluated by Horner's rule; elsewhere the closed
 * form, whose two terms then differ by at least a fifth of their size. */
static real phi_derivative(real x)
{
    if (fabs(x) < 0.5L) {
        real factorial = 1;
        real coef[31];
        for (int m = 1; m <= 30; m++) {
            factorial *= m + 1; /* (m+1)! */
            coef[m] = (m % 2 ? -m : m) / factorial;
        }
        real r = coef[30];
        for (int m = 29; m >= 1; m--)
            r = r * x + coef[m];
        return r;
    }
    return (exp(-x) + expm1(-x) / x) / x;
}

/* c = beta phi(beta n) = (1 - e^{-beta n}) / n (E5): dc/dbeta = phi(x) +
 * x phi'(x) = d(1 - e^{-x})/dx = e^{-x} (x = beta n), exactly 1 at n = 0;
 * dc/dn = beta^2 phi'(x), -beta^2 / 2 at n = 0. */
void lacs_ref_efla_coefficient_derivatives(real beta, real knorm2, real *dc_dbeta, real *dc_dknorm2)
{
    const real x = beta * knorm2;
    *dc_dbeta = exp(-x);
    *dc_dknorm2 = beta * beta * phi_derivative(x);
}

/* EFLA: the delta rule's adjoint (delta_rule.c) with c_t for beta_t and the
 * chain rule through c(beta, ||k||^2). */
static int efla_vjp_kernel(const sequence_head *s, real *h, const real *dout, real *dh, head_grads *g)
{
    return lacs_internal_delta_family_vjp(s, 1, h, dout, dh, g);
}

int lacs_ref_efla_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct, const grads_out *gr)
{
    int rc = lacs_internal_validate("efla_vjp", d, in, LACS_READS_BETA, LACS_READS_H0);
    return rc ? rc : lacs_internal_run_per_head_vjp("efla_vjp", d, in, ct, STATE_KV, efla_vjp_kernel, gr);
}

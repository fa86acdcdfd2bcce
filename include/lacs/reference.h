/* lacs reference, in double: the specification in code (SPEC.md).
 *
 * Every function here is slow, scalar and computed in double. Each cites the
 * formula label it implements (H1..H15, E1..E7: ../shared/seeds/README.md).
 * The same source is compiled a second time in long double with the suffix
 * _ld (lacs/reference_ld.h), so the golden outputs' own error is known.
 *
 * Ops return LACS_OK or an error code (lacs/types.h) with lacs_last_error()
 * naming the problem. Outputs: o [B, T, HV, V] (always written), ht
 * [N, HV, K, V] (written when not NULL). Softmax attention has no state.
 */
#ifndef LACS_REFERENCE_H
#define LACS_REFERENCE_H

#include <stddef.h>
#include "lacs/types.h"

/* ---- linear attention and decays (H2, H3, H4, H9) ---- */

/* H2: h_t = h_{t-1} + k_t v_t^T. */
int lacs_ref_linear_attn(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);
/* H3: o_t = RMSNorm(scale h_t^T q_t) over V, RMSNorm(x) = x / sqrt(mean(x^2) + eps). */
int lacs_ref_linear_attn_postnorm(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);
/* H4 (RetNet): h_t = exp(g_gamma[hv]) h_{t-1} + k_t v_t^T. */
int lacs_ref_retention(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);
/* H4 (data-dependent scalar decay): h_t = exp(g_t) h_{t-1} + k_t v_t^T. */
int lacs_ref_simple_gla(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);
/* H4 (diagonal decay): h_t = diag(exp(gk_t)) h_{t-1} + k_t v_t^T. */
int lacs_ref_gla(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);
/* H9 matrix forms: O = scale ((Q K^T) (.) Gamma) V + the h0 term, Gamma = M
 * for linear_attn; Gamma_ij = exp(sum_{tau=j+1..i} g_tau) (per key channel for gla). */
int lacs_ref_linear_attn_matrix(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);
int lacs_ref_retention_matrix(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);
int lacs_ref_simple_gla_matrix(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);
int lacs_ref_gla_matrix(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);

/* ---- the delta rule (H6, H7, H9, E1, E3) ---- */

/* H6/E1: h_t = (I - beta_t k_t k_t^T) h_{t-1} + beta_t k_t v_t^T, beta in [0, 2]. */
int lacs_ref_delta_rule(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);
/* H7 UT form, beta absorbed as sqrt(beta) k, sqrt(beta) v, processed in chunks
 * of `chunk` tokens (0: the whole sequence is one chunk); the state is passed
 * from chunk to chunk. */
int lacs_ref_delta_rule_ut(const lacs_dims *d, const lacs_inputs *in, int64_t chunk, double *o, double *ht);
/* H9: O = scale ((Q K~^T) (.) M)(I + (K~ K~^T) (.) (M - I))^{-1} V~ + the h0 terms. */
int lacs_ref_delta_rule_matrix(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);

/* ---- Gated DeltaNet, KDA and Comba (H8, H9) ---- */

/* H8 first form: h_t = (I - beta_t k_t k_t^T) D_t h_{t-1} + beta_t k_t v_t^T with
 * D_t = exp(g_t) I (input g) or diag(exp(gk_t)) (input gk, KDA): exactly one. */
int lacs_ref_gated_delta_rule(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);
/* H9: ((Q K~^T) (.) Gamma)(I + (K~ K~^T) (.) (Gamma - I))^{-1} V~, per key channel for gk. */
int lacs_ref_gated_delta_rule_matrix(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);
/* H8 second form: h_t = exp(g_t) h_{t-1} + beta_t k_t (v_t - h_{t-1}^T k_t)^T.
 * The correction term reads the un-decayed state h_{t-1} (SPEC.md). */
int lacs_ref_comba(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);

/* ---- EFLA (E4, E5, E6) ---- */

/* E5: c = (1 - exp(-beta ||k||^2)) / ||k||^2, exact as ||k|| -> 0 (c -> beta). */
double lacs_ref_efla_coefficient(double beta, double knorm2);
/* E5: h_t = (I - c_t k_t k_t^T) h_{t-1} + c_t k_t v_t^T (k not normalised). */
int lacs_ref_efla(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);
/* E4: the same step as the exact solution of dh/dt = A h + k v^T, A = -k k^T,
 * over [0, beta]: h_t = e^{beta A} h_{t-1} + beta psi(beta A) k v^T with dense
 * e^X and psi(X) = (e^X - I)/X by power series with scaling and squaring. */
int lacs_ref_efla_ode(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);

/* ---- softmax attention (H1) ---- */

/* H1 component form: o_t = sum_{j<=t} exp(s_tj - m_t) v_j / sum_{j<=t} exp(s_tj - m_t),
 * s_tj = scale q_t.k_j, m_t = max_j s_tj. */
int lacs_ref_softmax_attn(const lacs_dims *d, const lacs_inputs *in, double *o);
/* H1 matrix form: numerator (exp(S - m) (.) M) V over denominator (exp(S - m) (.) M) 1. */
int lacs_ref_softmax_attn_matrix(const lacs_dims *d, const lacs_inputs *in, double *o);

/* ---- q/k preprocessing (outside the ops, SPEC.md section 3) ---- */

/* Each of `rows` rows of length `dim`; x and y may alias. */
int lacs_ref_l2norm(const double *x, int64_t rows, int64_t dim, double eps,
                    lacs_l2norm_convention convention, double *y);
/* 1 / (1 + exp(-x)) without overflow for either sign; x and y may alias. */
void lacs_ref_sigmoid(const double *x, int64_t n, double *y);

/* ---- the mathematics the forms rest on (E2, E4, E6, E7, H5, H8) ---- */

/* E6: f(x y^T) = f(0) I + x [(f(s) - f(0)) / s] y^T, s = y^T x. `divided_difference`
 * is (f(s) - f(0)) / s with its limit f'(0) at s = 0. out: n x n. */
typedef struct {
    const char *name;
    double (*value)(double x);
    double (*divided_difference)(double s);
} lacs_analytic_fn;
void lacs_ref_rank1_function(const lacs_analytic_fn *f, int64_t n, const double *x,
                             const double *y, double *out);
/* E4: e^X and psi(X) = sum_{m>=0} X^m / (m+1)! of a dense n x n matrix, by the
 * power series at X / 2^s and the doubling rules e^{2X} = (e^X)^2,
 * psi(2X) = psi(X)(e^X + I) / 2. Either output may be NULL. */
int lacs_ref_expm_psi(int64_t n, const double *X, double *expX, double *psiX);
/* Eigenvalues of a symmetric n x n matrix, ascending (cyclic Jacobi). */
int lacs_ref_symmetric_eigenvalues(int64_t n, const double *A, double *eigenvalues);

/* H5 and H8: the test-time-training losses of one step, in the state's own
 * convention (h is K x V, the prediction for key k is h^T k):
 *   linear attention  L = -v.(h^T k)
 *   retention         L = -v.(h^T k) + (1 - gamma)/2 ||h||_F^2
 *   delta rule        L = 1/2 ||h^T k - v||^2                 (SGD step beta)
 *   comba             L = 1/2 ||h^T k - v||^2 + (1 - gamma)/(2 eta) ||h||_F^2 (step eta)
 * One SGD step h - lr * dL/dh equals one step of the matching recurrence. */
double lacs_ref_ttt_loss(lacs_ttt_loss_kind kind, int64_t K, int64_t V, const double *h,
                         const double *k, const double *v, double gamma, double eta);

#endif

/* lacs reference, in double: the specification in code (SPEC.md).
 *
 * Every function here is slow, scalar and computed in double. Each cites the
 * formula label it implements (H1..H15, E1..E7, N1..N6: SPEC.md 1.4).
 * The same source is compiled a second time in long double with the suffix
 * _ld (lacs/reference_ld.h), so the golden outputs' own error is known.
 *
 * Ops return LACS_OK or an error code (lacs/types.h) with lacs_last_error()
 * naming the problem. Outputs: o [B, T, HV, V] (always written), ht
 * [N, HV, K, V] (written when not NULL). The attention forms have no state;
 * MesaNet has two; the norms take plain [rows, dim] arrays.
 */
#ifndef LACS_REFERENCE_H
#define LACS_REFERENCE_H

#include <stddef.h>
#include "lacs/types.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* ---- the attention forms built from the delta rule (H10, H11, H12) ----
 * Stateless like softmax attention: o only. Value head hv reads q/k (and w)
 * head hv / G; fla's GQA (more query than key heads) is the case H = HV with
 * k, v repeated. SPEC.md 4.8, 4.10-4.12. */

/* H10: o_i = sum_{j<=i} softmax_j(scale q_i.k_j + log Gamma_ij) v_j with
 * log Gamma_ij = sum_{tau=j+1..i} g_tau (FoX, input g [B, T, HV]) or
 * (i - j) g_gamma[hv] (ALiBi, input g_gamma [HV]): exactly one. The gate is
 * added after the scale, as in fla. */
int lacs_ref_fox(const lacs_dims *d, const lacs_inputs *in, double *o);
/* H10 matrix form: softmax(scale QK^T + (G 1^T - 1 G^T) + log M) V, G the
 * prefix sums of g (fla's forgetting attention). */
int lacs_ref_fox_matrix(const lacs_dims *d, const lacs_inputs *in, double *o);

/* H11: O = A (I + diag(beta) B)^{-1} V, A over j <= i, B over j < i (form:
 * lacs_deltaformer_form; beta optional, absent = 1; with the SOFTMAX and FLA
 * forms a row of B with no admissible j is 0). Recursion form:
 * u_i = v_i - beta_i sum_{j<i} B_ij u_j, o_i = sum_{j<=i} A_ij u_j. */
int lacs_ref_deltaformer(const lacs_dims *d, const lacs_inputs *in, lacs_deltaformer_form form,
                         double *o);
/* H11 matrix form: B and A built whole, (I + diag(beta) B) U = V solved by
 * forward substitution, O = A U. */
int lacs_ref_deltaformer_matrix(const lacs_dims *d, const lacs_inputs *in, lacs_deltaformer_form form,
                                double *o);
/* H11 Neumann series: O = A sum_{m=0}^{terms-1} (-diag(beta) B)^m V. B is
 * strictly lower triangular, so terms >= T is exact; fewer truncate. */
int lacs_ref_deltaformer_neumann(const lacs_dims *d, const lacs_inputs *in, lacs_deltaformer_form form,
                                 int64_t terms, double *o);

/* H12 (PaTH): logits l_ij = scale (q_i^T R_ij k_j + G_i - G_j) for j <= i,
 * R_ij = H_i H_{i-1} ... H_{j+1}, H_t = I - beta_t w_t w_t^T, G the prefix sums
 * of the optional log forget gate g [B, T, HV] (PaTH-FoX; added before the
 * scale, as in fla); o_i = sum_j softmax_j(l_ij) v_j. Inputs w [B, T, H, K]
 * and beta [B, T, HV] required, beta >= 0. This form applies H_{j+1}, ..., H_i
 * to k_j afresh for every (i, j). */
int lacs_ref_path_attn(const lacs_dims *d, const lacs_inputs *in, double *o);
/* H12 recursion: the K x K matrix R_ij = H_i R_{i-1,j}, R_jj = I, then q_i^T R_ij k_j. */
int lacs_ref_path_attn_recursive(const lacs_dims *d, const lacs_inputs *in, double *o);
/* H12 matrix form: A = (QK^T) (.) M - ((QW^T) (.) M) T ((WK^T) (.) (M - I)),
 * T = (I + (WW^T) (.) (M - I))^{-1} by forward substitution, w absorbing sqrt(beta). */
int lacs_ref_path_attn_matrix(const lacs_dims *d, const lacs_inputs *in, double *o);

/* ---- MesaNet (H15) ---- */

/* H15: H_t = exp(g_t) H_{t-1} + beta_t k_t k_t^T (K x K), h_t = exp(g_t) h_{t-1}
 * + beta_t k_t v_t^T (K x V), o_t = h_t^T (H_t + diag(lambda))^{-1} q_t solved
 * by Cholesky, no q scale (fla). g and beta optional (absent: 0 and 1),
 * lambda [HV, K] >= 0 required; h0 and h0_kk optional; ht [N, HV, K, V] and
 * ht_kk [N, HV, K, K] written when not NULL. LACS_ERR_PARAM when H_t + diag(lambda)
 * is not positive definite. */
int lacs_ref_mesa_net(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht, double *ht_kk);
/* H15 parallel form: H_t = Gamma_{t,-1} H_0 + sum_{j<=t} Gamma_tj beta_j k_j k_j^T
 * (likewise h_t) rebuilt from scratch at every t, then the same solve. */
int lacs_ref_mesa_net_parallel(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht,
                               double *ht_kk);

/* ---- gradients of the ops on sequences (SPEC.md 4.19) ----
 * The vector-Jacobian product of an op: with the cotangents `do` (and `dht`,
 * `dht_kk` for the stateful ops) of lacs_cotangents, the gradient of
 * L = sum do (.) o + sum dht (.) ht (+ sum dht_kk (.) ht_kk) with respect to
 * every floating-point input: d<input> has the input's shape. Log gates are
 * differentiated as logs (dg = dL/dg, not dL/d exp(g)); a q/k/w head read by
 * G value heads gets the sum over them; dg_gamma and dlambda are sums over
 * the sequences and tokens; scale is not differentiated. Inputs are validated
 * as the forward op's. A gradient pointer may be NULL (not computed); asking
 * for the gradient of an input that is not given is LACS_ERR_INPUT, except
 * dh0 (dh0_kk) of a stateful op, which is the gradient at the zero state.
 * Summed gradients are written, not added to. Each computes the forward
 * recurrence again, keeping every state, and runs its adjoint token by token
 * in reverse. */
typedef struct {
    double *dq, *dk, *dv;   /* [B, T, H, K], [B, T, H, K], [B, T, HV, V] */
    double *dbeta, *dg;     /* [B, T, HV] */
    double *dgk;            /* [B, T, HV, K] */
    double *dg_gamma;       /* [HV] */
    double *dh0;            /* [N, HV, K, V] */
    double *dw;             /* [B, T, H, K] (path_attn) */
    double *dlambda;        /* [HV, K]: reserved for MesaNet's VJP, not yet specified (4.19) */
    double *dh0_kk;         /* [N, HV, K, K]: likewise */
} lacs_ref_grads;

/* H2, H4: the adjoint of h_t = D_t h_{t-1} + k_t v_t^T, o_t = scale h_t^T q_t. */
int lacs_ref_linear_attn_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                             const lacs_ref_grads *gr);
int lacs_ref_retention_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                           const lacs_ref_grads *gr);
int lacs_ref_simple_gla_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                            const lacs_ref_grads *gr);
int lacs_ref_gla_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                     const lacs_ref_grads *gr);
/* H6, H8, E5: the adjoint of the delta rule's step u = c (v - h'^T k),
 * h = h' + k u^T (h' = D_t h_{t-1}; c = beta, or EFLA's c(beta, ||k||^2)), and of
 * Comba's (the correction read from h_{t-1}). */
int lacs_ref_delta_rule_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                            const lacs_ref_grads *gr);
int lacs_ref_gated_delta_rule_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                                  const lacs_ref_grads *gr);
int lacs_ref_comba_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                       const lacs_ref_grads *gr);
int lacs_ref_efla_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                      const lacs_ref_grads *gr);
/* E5's coefficient c = beta phi(beta n), n = ||k||^2, and its partial
 * derivatives dc/dbeta = exp(-beta n) and dc/dn = beta^2 phi'(beta n). */
void lacs_ref_efla_coefficient_derivatives(double beta, double knorm2, double *dc_dbeta, double *dc_dknorm2);
/* H1, H10: the softmax's adjoint, row by row; the gate's gradient dg_tau sums
 * dl_ij over the pairs j < tau <= i (for ALiBi dg_gamma sums those). */
int lacs_ref_softmax_attn_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                              const lacs_ref_grads *gr);
int lacs_ref_fox_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                     const lacs_ref_grads *gr);
/* H12: for each key j the logits q_i . x_i with x_j = k_j, x_i = H_i x_{i-1}
 * are a recurrence on a vector; its adjoint gives dq, dk, dw, dbeta. */
int lacs_ref_path_attn_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                           const lacs_ref_grads *gr);
/* H11: the adjoint of the recursion u_i = v_i - beta_i sum_{j<i} B_ij u_j,
 * o_i = sum_{j<=i} A_ij u_j, then of the rows of A and B. */
int lacs_ref_deltaformer_vjp(const lacs_dims *d, const lacs_inputs *in, lacs_deltaformer_form form,
                             const lacs_cotangents *ct, const lacs_ref_grads *gr);

/* ---- normalisation and its replacements (N1..N6), rows x [rows, dim] ----
 * Element-wise ops and row norms on double inputs; x and y may alias. Every
 * pointer named weight or bias may be NULL (ones, zeros). VJP outputs that are
 * scalars (dalpha, dC, dcap) are sums over every element; any VJP output but dx
 * may be NULL. SPEC.md 4.14-4.18 gives the IEEE semantics. */

/* N2: y = weight (.) x / sqrt(mean(x^2) + eps); with eps = 0 a zero row gives zeros. */
int lacs_ref_rmsnorm(const double *x, int64_t rows, int64_t dim, double eps, const double *weight,
                     double *y);
/* N3: the Jacobian of one unweighted row, J[i][j] = dy_i/dx_j = (delta_ij - y_i y_j / dim) / rms,
 * rms = sqrt(mean(x^2) + eps). J is dim x dim. */
int lacs_ref_rmsnorm_jacobian(const double *x, int64_t dim, double eps, double *J);
/* dx = J^T (weight (.) dy) row by row; dweight = sum over rows of dy (.) x / rms. */
int lacs_ref_rmsnorm_vjp(const double *x, const double *dy, int64_t rows, int64_t dim, double eps,
                         const double *weight, double *dx, double *dweight);
/* N1 (DyT): y = weight (.) tanh(alpha x) + bias, alpha a scalar. */
int lacs_ref_dyt(const double *x, int64_t rows, int64_t dim, double alpha, const double *weight,
                 const double *bias, double *y);
int lacs_ref_dyt_vjp(const double *x, const double *dy, int64_t rows, int64_t dim, double alpha,
                     const double *weight, double *dx, double *dalpha, double *dweight, double *dbias);
/* N5 (DyISRU): y = weight (.) x / sqrt(x^2 + C) + bias, C >= 0 a scalar; the
 * documents' form is weight = sqrt(dim). */
int lacs_ref_dyisru(const double *x, int64_t rows, int64_t dim, double C, const double *weight,
                    const double *bias, double *y);
int lacs_ref_dyisru_vjp(const double *x, const double *dy, int64_t rows, int64_t dim, double C,
                        const double *weight, double *dx, double *dC, double *dweight, double *dbias);
/* N6: y = cap tanh(x / cap), 0 < cap < inf. */
int lacs_ref_softcap(const double *x, int64_t n, double cap, double *y);
int lacs_ref_softcap_vjp(const double *x, const double *dy, int64_t n, double cap, double *dx,
                         double *dcap);
/* The VJP of lacs_ref_l2norm in either convention (SPEC.md 3). */
int lacs_ref_l2norm_vjp(const double *x, const double *dy, int64_t rows, int64_t dim, double eps,
                        lacs_l2norm_convention convention, double *dx);

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

#ifdef __cplusplus
}
#endif

#endif

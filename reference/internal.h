/* Private to reference/: the precision switch and the per-head driver.
 *
 * Every file of the reference that computes is compiled twice: once as is
 * (real = double, public names lacs_ref_*), once with -DLACS_REAL_LONG_DOUBLE
 * (real = long double, names lacs_ref_*_ld). <tgmath.h> makes exp, expm1,
 * sqrt, ... pick the function of the argument's type, so the code reads the
 * same in both. Each function is written under its double name
 * (int lacs_ref_delta_rule(...), so that grep finds it); the build gives it
 * its long-double name in the second build by compiling with
 * -include reference/rename_ld.h (and the zoo's binary32 build its _f32 name
 * by a rename_f32.h the Makefile derives from that header).
 */
#ifndef LACS_REFERENCE_INTERNAL_H
#define LACS_REFERENCE_INTERNAL_H

#include <stdint.h>
#include <tgmath.h>

#include "lacs/prng.h"
#include "lacs/types.h"

/* What is compiled once and shared with the layers above: the thread's last
 * error (core/error.h), the checks of a call (validate.h), the gauge's state
 * noise (noise.h). */
#include "../core/error.h"
#include "noise.h"
#include "validate.h"

#include <float.h>

#if defined(LACS_REAL_FLOAT)
/* binary32: only the zoo's float reference (tests/zoo/float_reference.c) is
 * built this way; its header is generated from lacs/reference_ld.h. */
#include "lacs/reference_f32.h"
typedef float real;
#define REAL_EPSILON FLT_EPSILON
typedef lacs_analytic_fn_f32 analytic_fn;
typedef lacs_ref_grads_f32 grads_out;
#elif defined(LACS_REAL_LONG_DOUBLE)
#include "lacs/reference_ld.h"
typedef long double real;
#define REAL_EPSILON LDBL_EPSILON
typedef lacs_analytic_fn_ld analytic_fn;
typedef lacs_ref_grads_ld grads_out;
#else
#include "lacs/reference.h"
typedef double real;
#define REAL_EPSILON DBL_EPSILON
typedef lacs_analytic_fn analytic_fn;
typedef lacs_ref_grads grads_out;
#endif

/* ---- compiled in both precisions ---- */

/* One (sequence, value head), gathered into contiguous arrays of `real`:
 * q, k, w [T][K], v [T][V], beta and g [T], gk [T][K], lambda [K]; NULL where
 * not given. */
typedef struct {
    int64_t T, K, V;
    real scale, eps, g_gamma;
    const real *q, *k, *v, *beta, *g, *gk, *w, *lambda;
} sequence_head;

/* What state an op carries from token to token, per (sequence, value head). */
enum {
    STATE_NONE = 0,   /* softmax attention and the attention forms */
    STATE_KV = 1,     /* h [K][V]: h0 in, ht out */
    STATE_KV_KK = 2   /* MesaNet: h [K][V] then H [K][K] in one buffer; h0, h0_kk in, ht, ht_kk out */
};

/* Computes o [T][V] and, for stateful ops, updates h [K][V] from the initial
 * to the final state. Returns LACS_OK or LACS_ERR_MEMORY; a kernel that fails
 * on its data (MesaNet's singular system) returns its code after recording
 * lacs_internal_error(code, NULL, "token %lld: ..."), and the driver adds the
 * op, sequence and value head. */
typedef int (*head_kernel)(const sequence_head *s, real *h, real *o);

/* For each sequence and each value head hv (reading q/k/w head hv / G, G = HV/H):
 * gathers the inputs, loads the initial state (or zeros), calls kernel, and
 * scatters o and the final state (ht, and ht_kk for STATE_KV_KK; either may be NULL). */
int lacs_internal_run_per_head(const char *op, const lacs_dims *d, const lacs_inputs *in,
                               int state, head_kernel kernel, real *o, real *ht, real *ht_kk);

/* ---- gradients (SPEC.md 4.19) ----
 * One (sequence, value head) of a VJP, its gradients in contiguous arrays of
 * `real`, zeroed by the driver before the kernel runs: dq, dk, dw [T][K],
 * dv [T][V], dbeta [T], dlog [T][K], dlambda [K]. dlog[t][c] is the gradient
 * of the log decay of state row c at token t (the attention forms use
 * dlog[t][0] for their one gate per token); the driver turns it into dg
 * (the sum over c), dgk (as is) or dg_gamma (the sum over t and c), as the
 * decay input says. */
typedef struct {
    real *dq, *dk, *dv, *dbeta, *dlog, *dw, *dlambda;
} head_grads;

/* The adjoint of one (sequence, value head): h holds the initial state on
 * entry (h0 or zeros; STATE_KV_KK: h then H) and may be overwritten; dout is
 * the cotangent of o [T][V]; dh holds the cotangent of the final state on
 * entry (dht or zeros; STATE_KV_KK: dht then dht_kk) and the cotangent of the
 * initial state on return. Returns as head_kernel does. */
typedef int (*head_vjp_kernel)(const sequence_head *s, real *h, const real *dout, real *dh, head_grads *g);

/* As run_per_head, for a VJP: gathers the inputs, the cotangents and the
 * initial state of each (sequence, value head), runs kernel, scatters the
 * gradients: dq, dk, dw summed over the G value heads of their q/k head,
 * dg_gamma and dlambda summed over sequences, the others written. Checks the
 * cotangents and the gradient pointers (SPEC.md 4.19) first. */
int lacs_internal_run_per_head_vjp(const char *op, const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                                   int state, head_vjp_kernel kernel, const grads_out *gr);

/* The delta rule's adjoint (delta_rule.c), shared by DeltaNet, Gated DeltaNet,
 * KDA and EFLA: coefficient c_t = beta_t, or EFLA's (efla = 1). */
int lacs_internal_delta_family_vjp(const sequence_head *s, int efla, real *h, const real *dout, real *dh, head_grads *g);
/* The readout's adjoint, o = scale h^T q: dq = scale h do, dh += scale q do^T. */
void lacs_internal_readout_adjoint(int64_t K, int64_t V, const real *h, const real *q, real scale, const real *dout,
                                   real *dq, real *dh);
/* The gauge's model of a rounded state, for a state carried by an adjoint
 * (reference/noise.c): off outside the gauge, and in every build but double. */
void lacs_internal_state_rounded(int64_t K, int64_t V, real *h);
/* The softmax's adjoint on one row of n weights p (sum 1): dl_j = p_j (dp_j - sum_m p_m dp_m),
 * computed about the largest weight so that a saturated row does not cancel (linalg.c). */
void lacs_internal_softmax_adjoint(int64_t n, const real *p, const real *dp, real *dl);
/* The gauge's model of a log gate's gradient taken as a chunked reverse cumulative sum in binary32 (linalg.c). */
void lacs_internal_gate_gradient_rounded(const sequence_head *s, const head_grads *g);
/* The gauge's model of weights rebuilt from a binary32 log-sum-exp lse (linalg.c). */
void lacs_internal_weights_from_rounded_lse(int64_t n, real lse, real *p);
/* A gate summed into the logits l_ij over j < tau <= i: dg_tau += factor sum_{j < tau} dl_j
 * for tau = 1 .. n-1 (dg strided by `stride`), one row of weights p and their adjoint dl. */
void lacs_internal_gate_row_adjoint(int64_t n, const real *p, const real *dl, real factor, real *dg, int64_t stride);

/* H9 for the delta-rule family (delta_rule.c), shared by DeltaNet, Gated
 * DeltaNet and KDA: Gamma comes from whichever decay input the op was given. */
int lacs_internal_delta_matrix_kernel(const sequence_head *s, real *h, real *o);

/* ---- dense helpers (linalg.c), row-major n x n unless said ---- */

void lacs_internal_matmul(int64_t n, int64_t m, int64_t p, const real *A, const real *B, real *C);
real lacs_internal_dot(int64_t n, const real *a, const real *b);
/* Row-wise causal softmax of T x T logits L, in place: row i over j <= i (j < i
 * when strict), every other entry 0; a row with no admissible j is all 0. */
void lacs_internal_causal_softmax(int64_t T, int strict, real *L);
/* Solves A x = b for symmetric positive definite A (n x n) by Cholesky, L
 * (n x n) being workspace. Returns -1, or the index of the first pivot that
 * is not positive (then x is not written). */
int64_t lacs_internal_cholesky_solve(int64_t n, const real *A, const real *b, real *L, real *x);
/* Solves (I + L) X = R for X [n][m], L strictly lower (its diagonal and upper
 * part are not read), by forward substitution. X may alias R. */
void lacs_internal_unit_lower_solve(int64_t n, int64_t m, const real *L, const real *R, real *X);
/* The state h [K][V] and one token: o = scale h^T x (the readout, and with
 * scale 1 the prediction h^T k); h += coef x y^T (a rank-1 write). */
void lacs_internal_state_readout(int64_t K, int64_t V, const real *h, const real *x, real scale, real *o);
void lacs_internal_state_add_outer(int64_t K, int64_t V, real *h, real coef, const real *x, const real *y);
/* H4: the natural-log decay of state row c at token tau: gk[tau][c], g[tau],
 * g_gamma, or 0 when the op has no decay. */
real lacs_internal_log_decay(const sequence_head *s, int64_t tau, int64_t c);
/* The delta rule's correction (H6): u = coef (v - h^T k), the step towards v
 * from the state's current prediction for k. The caller writes h += k u^T. */
void lacs_internal_delta_correction(int64_t K, int64_t V, const real *h, const real *k, const real *v, real coef,
                                    real *u);
/* Masked, decayed scores: S[i][j] = sum_c X[i][c] Y[j][c] Gamma^c_ij for j <= i
 * (j < i when strict), 0 above, where log Gamma^c_ij = sum_{tau=j+1..i} of the
 * head's log decay at tau for channel c (g_gamma, g, or gk[c]; none: 0, M).
 * h0_decay[i][c] = Gamma^c_{i,-1}, the decay of the initial state up to i.
 * H9's Gamma, computed by sums of logs in the order of the recurrence.
 * Returns LACS_OK or LACS_ERR_MEMORY. */
int lacs_internal_decayed_scores(const sequence_head *s, const real *X, const real *Y, int strict,
                          real *S, real *h0_decay);
/* The final state of a decayed sum (H9 at t = T - 1), given the write rows X
 * [T][K] and U [T][V]: h <- Gamma_{T-1,-1} h + sum_j Gamma_{T-1,j} x_j u_j^T,
 * channel by channel (h holds h0 on entry). */
void lacs_internal_decayed_final_state(const sequence_head *s, const real *X, const real *U, real *h);
/* RMS normalisation of one vector: x / sqrt(mean(x^2) + eps); a zero vector
 * with eps = 0 gives zeros (SPEC.md, H3). */
void lacs_internal_rms_normalize(int64_t n, real eps, real *x);

#endif

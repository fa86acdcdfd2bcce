/* PaTH attention (H12): softmax attention whose logits see k_j through the
 * delta rule's transitions, q_i^T R_ij k_j with R_ij = H_i H_{i-1} ... H_{j+1},
 * H_t = I - beta_t w_t w_t^T (R_jj = I). SPEC.md 4.12.
 *
 * fla (parallel_path_attention) takes w L2-normalised and beta = 2 sigmoid(.)
 * in (0, 2); the reference takes both as given, beta >= 0 (the matrix form
 * absorbs it as sqrt(beta) w). The optional log forget gate g (PaTH-FoX) is
 * added *before* the scale, as in fla:
 *   l_ij = scale (q_i^T R_ij k_j + G_i - G_j),  G_i - G_j = sum_{tau=j+1..i} g_tau,
 * then o_i = sum_{j<=i} softmax_j(l_ij) v_j. (FoX, H10, adds its gate after.)
 * Three forms of the same logits:
 *   path_attn            for each (i, j): x = k_j, then x = H_t x for
 *                        t = j+1, ..., i, so that x = H_i ... H_{j+1} k_j;
 *   path_attn_recursive  R_ij as a K x K matrix, R_ij = H_i R_{i-1,j};
 *   path_attn_matrix     A = (QK^T) (.) M - ((QW^T) (.) M) T ((WK^T) (.) (M - I)),
 *                        T = (I + (WW^T) (.) (M - I))^{-1}, W's rows sqrt(beta_t) w_t.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The shared last step: L [T][T] holds q_i^T R_ij k_j for j <= i (and for the
 * recursive and matrix forms anything above); adds the gate, scales, and
 * applies the causal softmax to V. The gate here uses prefix sums (fla's
 * g_cumsum); the explicit form passes gate_done = 1 having added its own. */
static void logits_to_output(const sequence_head *s, real *L, int gate_done, real *o)
{
    const int64_t T = s->T;
    real G_i = 0;
    for (int64_t i = 0; i < T; i++) {
        if (s->g && !gate_done)
            G_i += s->g[i];
        real G_j = 0;
        for (int64_t j = 0; j <= i; j++) {
            if (s->g && !gate_done)
                G_j += s->g[j];
            L[i * T + j] = s->scale * (L[i * T + j] + ((s->g && !gate_done) ? G_i - G_j : 0));
        }
    }
    lacs_internal_causal_softmax(T, 0, L);
    lacs_internal_matmul(T, T, s->V, L, s->v, o);
}

/* x -= beta_t w_t (w_t . x): one transition H_t applied to a vector. */
static void apply_transition(const sequence_head *s, int64_t t, real *x)
{
    const real *w = s->w + t * s->K;
    const real coef = s->beta[t] * lacs_internal_dot(s->K, w, x);
    for (int64_t c = 0; c < s->K; c++)
        x[c] -= coef * w[c];
}

/* The obviously correct form: every (i, j) on its own, gate summed over
 * tau = j+1..i directly. */
static int path_kernel(const sequence_head *s, real *h, real *o)
{
    (void)h;
    const int64_t T = s->T, K = s->K;
    real *L = malloc((size_t)(T * T + 1) * sizeof(real));
    real *x = malloc((size_t)K * sizeof(real));
    if (!L || !x) {
        free(L);
        free(x);
        return LACS_ERR_MEMORY;
    }
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j <= i; j++) {
            for (int64_t c = 0; c < K; c++)
                x[c] = s->k[j * K + c];
            real gate = 0;
            for (int64_t t = j + 1; t <= i; t++) {
                apply_transition(s, t, x);
                gate += s->g ? s->g[t] : 0;
            }
            L[i * T + j] = lacs_internal_dot(K, s->q + i * K, x) + gate;
        }
    logits_to_output(s, L, 1, o);
    free(L);
    free(x);
    return LACS_OK;
}

/* H12's recursion R_ij = H_i R_{i-1,j} on the whole K x K matrix:
 * R <- R - beta_i w_i (w_i^T R). */
static int path_recursive_kernel(const sequence_head *s, real *h, real *o)
{
    (void)h;
    const int64_t T = s->T, K = s->K;
    real *L = malloc((size_t)(T * T + 1) * sizeof(real));
    real *R = malloc((size_t)(K * K) * sizeof(real));
    real *wR = malloc((size_t)K * sizeof(real));
    real *Rk = malloc((size_t)K * sizeof(real));
    if (!L || !R || !wR || !Rk) {
        free(L);
        free(R);
        free(wR);
        free(Rk);
        return LACS_ERR_MEMORY;
    }
    for (int64_t j = 0; j < T; j++) {
        for (int64_t r = 0; r < K * K; r++)
            R[r] = (r % (K + 1) == 0) ? 1 : 0;
        for (int64_t i = j; i < T; i++) {
            if (i > j) {
                const real *w = s->w + i * K;
                for (int64_t c = 0; c < K; c++) {
                    wR[c] = 0;
                    for (int64_t r = 0; r < K; r++)
                        wR[c] += w[r] * R[r * K + c];
                }
                for (int64_t r = 0; r < K; r++)
                    for (int64_t c = 0; c < K; c++)
                        R[r * K + c] -= s->beta[i] * w[r] * wR[c];
            }
            lacs_internal_matmul(K, K, 1, R, s->k + j * K, Rk);
            L[i * T + j] = lacs_internal_dot(K, s->q + i * K, Rk);
        }
    }
    logits_to_output(s, L, 0, o);
    free(L);
    free(R);
    free(wR);
    free(Rk);
    return LACS_OK;
}

/* H12's matrix form. With W~ = diag(sqrt(beta)) W, X = T ((W~K^T) (.) (M - I))
 * solves (I + (W~W~^T) (.) (M - I)) X = (W~K^T) (.) (M - I) by forward
 * substitution, and A = (QK^T) (.) M - ((QW~^T) (.) M) X. */
static int path_matrix_kernel(const sequence_head *s, real *h, real *o)
{
    (void)h;
    const int64_t T = s->T, K = s->K;
    const size_t tt = (size_t)(T * T + 1);
    real *Wt = malloc((size_t)(T * K + 1) * sizeof(real));
    real *WW = calloc(tt, sizeof(real)), *WK = calloc(tt, sizeof(real));
    real *QW = malloc(tt * sizeof(real)), *X = malloc(tt * sizeof(real));
    real *L = malloc(tt * sizeof(real));
    int rc = LACS_OK;
    if (!Wt || !WW || !WK || !QW || !X || !L) {
        rc = LACS_ERR_MEMORY;
        goto done;
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < K; c++)
            Wt[t * K + c] = sqrt(s->beta[t]) * s->w[t * K + c];
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) {
            WW[i * T + j] = j < i ? lacs_internal_dot(K, Wt + i * K, Wt + j * K) : 0;
            WK[i * T + j] = j < i ? lacs_internal_dot(K, Wt + i * K, s->k + j * K) : 0;
            QW[i * T + j] = j <= i ? lacs_internal_dot(K, s->q + i * K, Wt + j * K) : 0;
        }
    lacs_internal_unit_lower_solve(T, T, WW, WK, X);
    lacs_internal_matmul(T, T, T, QW, X, L);
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j <= i; j++)
            L[i * T + j] = lacs_internal_dot(K, s->q + i * K, s->k + j * K) - L[i * T + j];
    logits_to_output(s, L, 0, o);
done:
    free(Wt);
    free(WW);
    free(WK);
    free(QW);
    free(X);
    free(L);
    return rc;
}

static int run(const char *op, const lacs_dims *d, const lacs_inputs *in, head_kernel kernel, real *o)
{
    int rc = lacs_internal_validate(op, d, in, LACS_READS_W | LACS_READS_BETA, LACS_READS_G);
    if (!rc)
        rc = lacs_internal_check_beta_nonnegative(op, d, in, "the matrix form absorbs beta as sqrt(beta) w");
    return rc ? rc : lacs_internal_run_per_head(op, d, in, STATE_NONE, kernel, o, NULL, NULL);
}

int lacs_ref_path_attn(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    return run("path_attn", d, in, path_kernel, o);
}

int lacs_ref_path_attn_recursive(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    return run("path_attn_recursive", d, in, path_recursive_kernel, o);
}

int lacs_ref_path_attn_matrix(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    return run("path_attn_matrix", d, in, path_matrix_kernel, o);
}

/* ---- gradients (SPEC.md 4.19) ---- */

/* The adjoint of H12. For each key j the logits of column j are the
 * readouts of a recurrence on one vector, x_j = k_j, x_i = H_i x_{i-1}
 * (i > j), a_ij = q_i . x_i: the explicit form's product H_i ... H_{j+1} k_j
 * built once per j. The forward computes every a_ij that way (gate summed
 * over tau = j+1..i as path_kernel does), the logits l_ij = scale (a_ij + gate),
 * the softmax and the output; then
 *   dp_ij = do_i . v_j,  dv_j += p_ij do_i,  dl_i = the softmax's adjoint
 *   da_ij = scale dl_ij,  dg_tau += scale sum_{j < tau} dl_ij (tau <= i)
 * and, per j, the recurrence's adjoint from i = T-1 down to j with dx = 0:
 *   a_ij = q_i . x_i             dx += da_ij q_i,  dq_i += da_ij x_i
 *   x_i = x_{i-1} - beta_i w_i (w_i . x_{i-1})     (i > j; c = w_i . x_{i-1}, e = w_i . dx)
 *                                dbeta_i -= e c,  dw_i -= beta_i (c dx + e x_{i-1}),
 *                                dx <- dx - beta_i e w_i  (H_i is symmetric)
 *   x_j = k_j                    dk_j += dx. */
static int path_vjp_kernel(const sequence_head *s, real *h, const real *dout, real *dh, head_grads *g)
{
    (void)h;
    (void)dh;
    const int64_t T = s->T, K = s->K, V = s->V;
    real *L = malloc((size_t)(T * T + 1) * sizeof(real)), *da = malloc((size_t)(T * T + 1) * sizeof(real));
    real *X = malloc((size_t)(T * K + 1) * sizeof(real)), *dx = malloc((size_t)K * sizeof(real));
    real *dp = malloc((size_t)(T + 1) * sizeof(real)), *dl = malloc((size_t)(T + 1) * sizeof(real));
    real *lse = malloc((size_t)(T + 1) * sizeof(real));
    int rc = L && da && X && dx && dp && dl && lse ? LACS_OK : LACS_ERR_MEMORY;
    for (int64_t j = 0; j < T && rc == LACS_OK; j++) { /* the logits, column by column */
        real *x = X + j * K, gate = 0;
        memcpy(x, s->k + j * K, (size_t)K * sizeof(real));
        for (int64_t i = j; i < T; i++) {
            if (i > j) {
                memcpy(X + i * K, X + (i - 1) * K, (size_t)K * sizeof(real));
                apply_transition(s, i, X + i * K);
                gate += s->g ? s->g[i] : 0;
            }
            L[i * T + j] = s->scale * (lacs_internal_dot(K, s->q + i * K, X + i * K) + gate);
        }
    }
    for (int64_t i = 0; i < T && rc == LACS_OK; i++) { /* each row's log-sum-exp, for the gauge's model */
        real m = -INFINITY, denom = 0;
        for (int64_t j = 0; j <= i; j++)
            m = fmax(m, L[i * T + j]);
        for (int64_t j = 0; j <= i; j++)
            denom += exp(L[i * T + j] - m);
        lse[i] = m + log(denom);
    }
    if (rc == LACS_OK)
        lacs_internal_causal_softmax(T, 0, L); /* L now holds the weights p_ij */
    for (int64_t i = 0; i < T && rc == LACS_OK; i++) {
        real *p = L + i * T;
        const real *doi = dout + i * V;
        lacs_internal_weights_from_rounded_lse(i + 1, lse[i], p);
        for (int64_t j = 0; j <= i; j++) {
            dp[j] = lacs_internal_dot(V, doi, s->v + j * V);
            for (int64_t c = 0; c < V; c++)
                g->dv[j * V + c] += p[j] * doi[c];
        }
        lacs_internal_softmax_adjoint(i + 1, p, dp, dl);
        for (int64_t j = 0; j <= i; j++)
            da[i * T + j] = s->scale * dl[j];
        lacs_internal_gate_row_adjoint(i + 1, p, dl, s->scale, g->dlog, K); /* the gate is inside the scale */
    }
    for (int64_t j = 0; j < T && rc == LACS_OK; j++) {
        memcpy(X + j * K, s->k + j * K, (size_t)K * sizeof(real));
        for (int64_t i = j + 1; i < T; i++) {
            memcpy(X + i * K, X + (i - 1) * K, (size_t)K * sizeof(real));
            apply_transition(s, i, X + i * K);
        }
        for (int64_t c = 0; c < K; c++)
            dx[c] = 0;
        for (int64_t i = T - 1; i >= j; i--) {
            const real a = da[i * T + j], *q = s->q + i * K;
            for (int64_t c = 0; c < K; c++) {
                dx[c] += a * q[c];
                g->dq[i * K + c] += a * X[i * K + c];
            }
            if (i == j)
                break;
            const real *w = s->w + i * K, *x_prev = X + (i - 1) * K, beta = s->beta[i];
            const real c_dot = lacs_internal_dot(K, w, x_prev), e_dot = lacs_internal_dot(K, w, dx);
            g->dbeta[i] -= e_dot * c_dot;
            for (int64_t c = 0; c < K; c++) {
                g->dw[i * K + c] -= beta * (c_dot * dx[c] + e_dot * x_prev[c]);
                dx[c] -= beta * e_dot * w[c];
            }
        }
        for (int64_t c = 0; c < K; c++)
            g->dk[j * K + c] += dx[c];
    }
    free(L);
    free(da);
    free(X);
    free(dx);
    free(dp);
    free(dl);
    free(lse);
    return rc;
}

int lacs_ref_path_attn_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct, const grads_out *gr)
{
    int rc = lacs_internal_validate("path_attn_vjp", d, in, LACS_READS_W | LACS_READS_BETA, LACS_READS_G);
    if (!rc)
        rc = lacs_internal_check_beta_nonnegative("path_attn_vjp", d, in,
                                                  "the matrix form absorbs beta as sqrt(beta) w");
    return rc ? rc : lacs_internal_run_per_head_vjp("path_attn_vjp", d, in, ct, STATE_NONE, path_vjp_kernel, gr);
}

/* The delta rule: H6/E1 (recurrent), H7 (UT form, chunked), H9 (matrix form).
 * State h is K x V (the papers' S^T); o_t = scale h_t^T q_t (SPEC.md 4.4).
 *
 * Paper form (E1): S_t = S_{t-1}(I - beta_t k_t k_t^T) + beta_t v_t k_t^T.
 * Here, transposed: h_t = (I - beta_t k_t k_t^T) h_{t-1} + beta_t k_t v_t^T.
 * beta in [0, 2] covers E3's negative eigenvalues (SPEC.md 4.4 for the mapping).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* H6: one SGD step on 1/2 ||h^T k - v||^2 with learning rate beta:
 * u = beta (v - h^T k); h += k u^T; then read out. */
static int delta_rule_kernel(const sequence_head *s, real *h, real *o)
{
    const int64_t K = s->K, V = s->V;
    real *u = malloc((size_t)V * sizeof(real));
    if (!u)
        return LACS_ERR_MEMORY;
    for (int64_t t = 0; t < s->T; t++) {
        const real *k = s->k + t * K;
        lacs_internal_delta_correction(K, V, h, k, s->v + t * V, s->beta[t], u);
        lacs_internal_state_add_outer(K, V, h, 1, k, u);
        lacs_internal_state_readout(K, V, h, s->q + t * K, s->scale, o + t * V);
    }
    free(u);
    return LACS_OK;
}

/* H7 with beta absorbed (k~ = sqrt(beta) k, v~ = sqrt(beta) v, as H6 says):
 * within a chunk of n tokens that starts from state h,
 *   u_t = v~_t - h^T k~_t - sum_{j<t} u_j (k~_j . k~_t),  i.e. (I + B) U = V~ - K~ h,
 *   B = (K~ K~^T) (.) (M - I) strictly lower, solved by forward substitution;
 *   o_t = scale (h^T q_t + sum_{j<=t} u_j (k~_j . q_t));  h <- h + K~^T U.
 * One chunk covering the sequence is H7 itself; smaller chunks are the
 * chunkwise (WY/UT) algorithm of optimized kernels. */
static int ut_chunk(const sequence_head *s, int64_t start, int64_t n, real *h, real *o)
{
    const int64_t K = s->K, V = s->V;
    real *kt = malloc((size_t)(n * K) * sizeof(real));
    real *U = malloc((size_t)(n * V) * sizeof(real));
    real *B = malloc((size_t)(n * n) * sizeof(real));
    if (!kt || !U || !B) {
        free(kt);
        free(U);
        free(B);
        return LACS_ERR_MEMORY;
    }
    for (int64_t t = 0; t < n; t++) {
        real root_beta = sqrt(s->beta[start + t]);
        for (int64_t c = 0; c < K; c++)
            kt[t * K + c] = root_beta * s->k[(start + t) * K + c];
        lacs_internal_state_readout(K, V, h, kt + t * K, 1, U + t * V); /* h^T k~_t */
        for (int64_t c = 0; c < V; c++)
            U[t * V + c] = root_beta * s->v[(start + t) * V + c] - U[t * V + c];
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < i; j++) {
            real dot = 0;
            for (int64_t c = 0; c < K; c++)
                dot += kt[i * K + c] * kt[j * K + c];
            B[i * n + j] = dot;
        }
    lacs_internal_unit_lower_solve(n, V, B, U, U);
    for (int64_t t = 0; t < n; t++) {
        const real *q = s->q + (start + t) * K;
        real *ot = o + (start + t) * V;
        lacs_internal_state_readout(K, V, h, q, 1, ot);
        for (int64_t j = 0; j <= t; j++) {
            real dot = 0;
            for (int64_t c = 0; c < K; c++)
                dot += q[c] * kt[j * K + c];
            for (int64_t c = 0; c < V; c++)
                ot[c] += dot * U[j * V + c];
        }
        for (int64_t c = 0; c < V; c++)
            ot[c] *= s->scale;
    }
    for (int64_t j = 0; j < n; j++)
        lacs_internal_state_add_outer(K, V, h, 1, kt + j * K, U + j * V);
    free(kt);
    free(U);
    free(B);
    return LACS_OK;
}

/* The chunk length for the UT kernel; set by lacs_ref_delta_rule_ut before the
 * driver runs (the reference is single-threaded by design). */
static _Thread_local int64_t ut_chunk_length;

static int ut_kernel(const sequence_head *s, real *h, real *o)
{
    int64_t chunk = ut_chunk_length > 0 ? ut_chunk_length : s->T;
    int rc = LACS_OK;
    for (int64_t start = 0; start < s->T && rc == LACS_OK; start += chunk)
        rc = ut_chunk(s, start, s->T - start < chunk ? s->T - start : chunk, h, o);
    return rc;
}

/* H9 for DeltaNet and Gated DeltaNet (and KDA), beta absorbed:
 *   (I + (K~ K~^T) (.) (Gamma - I)) U = V~ - [k~_i^T Gamma_{i,-1} h0]_i
 *   O = scale (((Q K~^T) (.) Gamma) U + [q_i^T Gamma_{i,-1} h0]_i)
 *   h_T = Gamma_{T-1,-1} h0 + sum_j Gamma_{T-1,j} k~_j u_j^T
 * Gamma = M without a decay input (delta_rule), per key channel with gk. */
int lacs_internal_delta_matrix_kernel(const sequence_head *s, real *h, real *o)
{
    const int64_t T = s->T, K = s->K, V = s->V;
    real *kt = calloc((size_t)(T * K + 1), sizeof(real));
    real *U = calloc((size_t)(T * V + 1), sizeof(real));
    real *A = malloc((size_t)(T * T + 1) * sizeof(real));
    real *B = malloc((size_t)(T * T + 1) * sizeof(real));
    real *h0_decay = malloc((size_t)(T * K + 1) * sizeof(real));
    int rc = (kt && U && A && B && h0_decay) ? LACS_OK : LACS_ERR_MEMORY;
    for (int64_t t = 0; t < T && rc == LACS_OK; t++) {
        real root_beta = sqrt(s->beta[t]);
        for (int64_t c = 0; c < K; c++)
            kt[t * K + c] = root_beta * s->k[t * K + c];
        for (int64_t c = 0; c < V; c++)
            U[t * V + c] = root_beta * s->v[t * V + c];
    }
    if (rc == LACS_OK)
        rc = lacs_internal_decayed_scores(s, s->q, kt, 0, A, h0_decay);
    if (rc == LACS_OK)
        rc = lacs_internal_decayed_scores(s, kt, kt, 1, B, NULL);
    for (int64_t i = 0; i < T && rc == LACS_OK; i++) /* right-hand side V~ - h0 term */
        for (int64_t c = 0; c < V; c++)
            for (int64_t r = 0; r < K; r++)
                U[i * V + c] -= kt[i * K + r] * h0_decay[i * K + r] * h[r * V + c];
    if (rc == LACS_OK)
        lacs_internal_unit_lower_solve(T, V, B, U, U);
    for (int64_t i = 0; i < T && rc == LACS_OK; i++)
        for (int64_t c = 0; c < V; c++) {
            real sum = 0;
            for (int64_t j = 0; j <= i; j++)
                sum += A[i * T + j] * U[j * V + c];
            for (int64_t r = 0; r < K; r++)
                sum += s->q[i * K + r] * h0_decay[i * K + r] * h[r * V + c];
            o[i * V + c] = s->scale * sum;
        }
    if (rc == LACS_OK)
        lacs_internal_decayed_final_state(s, kt, U, h);
    free(kt);
    free(U);
    free(A);
    free(B);
    free(h0_decay);
    return rc;
}

int lacs_ref_delta_rule(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    int rc = lacs_internal_validate("delta_rule", d, in, LACS_READS_BETA, LACS_READS_H0);
    return rc ? rc : lacs_internal_run_per_head("delta_rule", d, in, STATE_KV, delta_rule_kernel, o, ht, NULL);
}

int lacs_ref_delta_rule_ut(const lacs_dims *d, const lacs_inputs *in, int64_t chunk, real *o, real *ht)
{
    int rc = lacs_internal_validate("delta_rule_ut", d, in, LACS_READS_BETA, LACS_READS_H0);
    if (rc)
        return rc;
    if (chunk < 0)
        return lacs_internal_error(LACS_ERR_PARAM, "delta_rule_ut", "chunk = %lld must be >= 0",
                                   (long long)chunk);
    rc = lacs_internal_check_beta_nonnegative("delta_rule_ut", d, in, "this form absorbs beta as sqrt(beta)");
    if (rc)
        return rc;
    ut_chunk_length = chunk;
    return lacs_internal_run_per_head("delta_rule_ut", d, in, STATE_KV, ut_kernel, o, ht, NULL);
}

int lacs_ref_delta_rule_matrix(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    int rc = lacs_internal_validate("delta_rule_matrix", d, in, LACS_READS_BETA, LACS_READS_H0);
    if (!rc)
        rc = lacs_internal_check_beta_nonnegative("delta_rule_matrix", d, in, "this form absorbs beta as sqrt(beta)");
    return rc ? rc : lacs_internal_run_per_head("delta_rule_matrix", d, in, STATE_KV, lacs_internal_delta_matrix_kernel, o, ht, NULL);
}

/* ---- gradients (SPEC.md 4.19) ---- */

/* The step coefficient of token t: beta_t, or EFLA's c_t = beta_t phi(beta_t
 * ||k_t||^2) (E5), computed as the forward computes it, with its partial
 * derivatives with respect to beta_t and ||k_t||^2. */
static real step_coefficient(const sequence_head *s, int efla, int64_t t, real *dc_dbeta, real *dc_dknorm2)
{
    if (!efla) {
        *dc_dbeta = 1;
        *dc_dknorm2 = 0;
        return s->beta[t];
    }
    const real *k = s->k + t * s->K;
    real knorm2 = 0;
    for (int64_t c = 0; c < s->K; c++)
        knorm2 += k[c] * k[c];
    lacs_ref_efla_coefficient_derivatives(s->beta[t], knorm2, dc_dbeta, dc_dknorm2);
    return lacs_ref_efla_coefficient(s->beta[t], knorm2);
}

/* The adjoint of H6/H8 (and E5 with c for beta), token by token in reverse.
 * The forward runs again first (as gated_delta_kernel: delta_rule and EFLA
 * have no decay, exp(0) = 1 exactly), keeping the state before each token.
 * Then, with dh the cotangent of h_t (dht to start with), for token t:
 *   o_t = scale h_t^T q_t        dq_t = scale h_t do_t,  dh += scale q_t do_t^T
 *   h_t = h' + k u^T             du = dh^T k,            dk_t = dh u
 *   u = c e, e = v - p           dc = du . e,            dv_t = c du
 *   p = h'^T k                   dp = -c du:  dh' = dh + k dp^T,  dk_t += h' dp
 *   h' = D_t h_{t-1}             dlog[t][c] = sum_j dh'[c][j] h'[c][j],  dh <- D_t dh'
 *   c = beta                     dbeta_t = dc
 *   c = c(beta, ||k||^2) (E5)    dbeta_t = dc dc/dbeta,  dk_t += 2 k dc dc/d||k||^2
 * dbeta's term du . e holds both the write (du . v) and the erase (-du . p). */
int lacs_internal_delta_family_vjp(const sequence_head *s, int efla, real *h, const real *dout, real *dh, head_grads *g)
{
    const int64_t K = s->K, V = s->V, T = s->T;
    real *states = malloc((size_t)((T + 1) * K * V) * sizeof(real));
    real *decayed = malloc((size_t)(K * V) * sizeof(real));
    real *u = malloc((size_t)V * sizeof(real)), *p = malloc((size_t)V * sizeof(real));
    real *du = malloc((size_t)V * sizeof(real));
    int rc = states && decayed && u && p && du ? LACS_OK : LACS_ERR_MEMORY;
    for (int64_t t = 0; t < T && rc == LACS_OK; t++) { /* the forward */
        const real *k = s->k + t * K;
        real unused_a, unused_b;
        memcpy(states + t * K * V, h, (size_t)(K * V) * sizeof(real));
        for (int64_t c = 0; c < K; c++) {
            real factor = exp(lacs_internal_log_decay(s, t, c));
            for (int64_t j = 0; j < V; j++)
                h[c * V + j] *= factor;
        }
        lacs_internal_delta_correction(K, V, h, k, s->v + t * V, step_coefficient(s, efla, t, &unused_a, &unused_b), u);
        lacs_internal_state_add_outer(K, V, h, 1, k, u);
    }
    if (rc == LACS_OK)
        memcpy(states + T * K * V, h, (size_t)(K * V) * sizeof(real));
    for (int64_t t = T - 1; t >= 0 && rc == LACS_OK; t--) {
        const real *q = s->q + t * K, *k = s->k + t * K, *v = s->v + t * V, *prev = states + t * K * V;
        real *dk = g->dk + t * K;
        lacs_internal_readout_adjoint(K, V, states + (t + 1) * K * V, q, s->scale, dout + t * V, g->dq + t * K, dh);
        real dc_dbeta, dc_dknorm2;
        const real coef = step_coefficient(s, efla, t, &dc_dbeta, &dc_dknorm2);
        for (int64_t c = 0; c < K; c++) { /* h' and the forward's u, again */
            real factor = exp(lacs_internal_log_decay(s, t, c));
            for (int64_t j = 0; j < V; j++)
                decayed[c * V + j] = prev[c * V + j] * factor;
        }
        lacs_internal_state_readout(K, V, decayed, k, 1, p);
        real dcoef = 0;
        for (int64_t j = 0; j < V; j++) {
            const real e = v[j] - p[j];
            u[j] = coef * e;
            du[j] = 0;
            for (int64_t c = 0; c < K; c++)
                du[j] += dh[c * V + j] * k[c];
            dcoef += du[j] * e;
            g->dv[t * V + j] += coef * du[j];
        }
        for (int64_t c = 0; c < K; c++) {
            real factor = exp(lacs_internal_log_decay(s, t, c));
            for (int64_t j = 0; j < V; j++) {
                const real dp = -coef * du[j];
                dk[c] += dh[c * V + j] * u[j] + decayed[c * V + j] * dp;
                const real dh_decayed = dh[c * V + j] + k[c] * dp;
                g->dlog[t * K + c] += dh_decayed * decayed[c * V + j];
                dh[c * V + j] = factor * dh_decayed;
            }
        }
        g->dbeta[t] = dcoef * dc_dbeta;
        for (int64_t c = 0; efla && c < K; c++)
            dk[c] += 2 * k[c] * (dcoef * dc_dknorm2);
        lacs_internal_state_rounded(K, V, dh);
    }
    if (rc == LACS_OK)
        lacs_internal_gate_gradient_rounded(s, g);
    free(states);
    free(decayed);
    free(u);
    free(p);
    free(du);
    return rc;
}

static int delta_rule_vjp_kernel(const sequence_head *s, real *h, const real *dout, real *dh, head_grads *g)
{
    return lacs_internal_delta_family_vjp(s, 0, h, dout, dh, g);
}

int lacs_ref_delta_rule_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct, const grads_out *gr)
{
    int rc = lacs_internal_validate("delta_rule_vjp", d, in, LACS_READS_BETA, LACS_READS_H0);
    return rc ? rc : lacs_internal_run_per_head_vjp("delta_rule_vjp", d, in, ct, STATE_KV, delta_rule_vjp_kernel, gr);
}

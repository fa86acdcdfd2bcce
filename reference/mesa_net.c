/* MesaNet (H15): the delta rule's regression solved exactly at every token.
 * SPEC.md 4.13.
 *
 * DeltaNet takes one SGD step on 1/2 ||S k - v||^2 (H5); the loss is a linear
 * regression, and MesaNet uses its closed-form solution, S_t = G_t H_t^{-1}
 * with G_t = sum v_j k_j^T and H_t = sum k_j k_j^T, gated and regularised:
 *   H_t = exp(g_t) H_{t-1} + beta_t k_t k_t^T      (K x K)
 *   h_t = exp(g_t) h_{t-1} + beta_t k_t v_t^T      (K x V, h = G^T as elsewhere)
 *   o_t = h_t^T (H_t + diag(lambda))^{-1} q_t      (no q scale, as in fla)
 * fla solves the system by 30 steps of conjugate gradient; the reference solves
 * it exactly by Cholesky, so the golden output is the exact solution and a CG
 * kernel's own error is what the tolerance sees. With g = 0, beta = 1 and
 * lambda -> 0, o_t tends to S_t q_t for S_t the minimum-norm least-squares
 * solution of S k_j = v_j, j <= t (tests/test_attention.c).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Workspace of the K x K solve. */
typedef struct {
    real *Hreg, *L, *x;
} solve_work;

/* o_t = h^T (H + diag(lambda))^{-1} q_t, or LACS_ERR_PARAM naming the token. */
static int readout(const sequence_head *s, int64_t t, const real *h, const real *H, solve_work *w,
                   real *o)
{
    const int64_t K = s->K;
    for (int64_t i = 0; i < K * K; i++)
        w->Hreg[i] = H[i];
    for (int64_t c = 0; c < K; c++)
        w->Hreg[c * K + c] += s->lambda[c];
    int64_t pivot = lacs_internal_cholesky_solve(K, w->Hreg, s->q + t * K, w->L, w->x);
    if (pivot >= 0)
        return lacs_internal_error(LACS_ERR_PARAM, NULL,
                                   "token %lld: H_t + diag(lambda) is not positive definite to "
                                   "working precision (Cholesky pivot %lld); give lambda > 0",
                                   (long long)t, (long long)pivot);
    lacs_internal_state_readout(K, s->V, h, w->x, 1, o + t * s->V);
    return LACS_OK;
}

static int alloc_work(int64_t K, solve_work *w)
{
    w->Hreg = malloc((size_t)(K * K) * sizeof(real));
    w->L = malloc((size_t)(K * K) * sizeof(real));
    w->x = malloc((size_t)K * sizeof(real));
    return (w->Hreg && w->L && w->x) ? LACS_OK : LACS_ERR_MEMORY;
}

static void free_work(solve_work *w)
{
    free(w->Hreg);
    free(w->L);
    free(w->x);
}

/* Recurrent form. The driver's state buffer holds h [K][V] then H [K][K]. */
static int mesa_kernel(const sequence_head *s, real *state, real *o)
{
    const int64_t K = s->K, V = s->V;
    real *h = state, *H = state + K * V;
    solve_work w;
    int rc = alloc_work(K, &w);
    for (int64_t t = 0; t < s->T && rc == LACS_OK; t++) {
        const real *k = s->k + t * K;
        const real gamma = s->g ? exp(s->g[t]) : 1, beta = s->beta ? s->beta[t] : 1;
        for (int64_t i = 0; i < K * V; i++)
            h[i] *= gamma;
        for (int64_t i = 0; i < K * K; i++)
            H[i] *= gamma;
        lacs_internal_state_add_outer(K, V, h, beta, k, s->v + t * V);
        lacs_internal_state_add_outer(K, K, H, beta, k, k);
        rc = readout(s, t, h, H, &w, o);
    }
    free_work(&w);
    return rc;
}

/* Parallel form: for every t, H_t = Gamma_{t,-1} H_0 + sum_{j<=t} Gamma_tj
 * beta_j k_j k_j^T from scratch (likewise h_t), Gamma_tj = exp(sum_{tau=j+1..t} g_tau)
 * summed from t down, as H9 builds its decay. */
static int mesa_parallel_kernel(const sequence_head *s, real *state, real *o)
{
    const int64_t K = s->K, V = s->V;
    real *h0 = malloc((size_t)(K * V) * sizeof(real)), *H0 = malloc((size_t)(K * K) * sizeof(real));
    solve_work w;
    int rc = alloc_work(K, &w);
    if (!h0 || !H0)
        rc = LACS_ERR_MEMORY;
    for (int64_t i = 0; rc == LACS_OK && i < K * V; i++)
        h0[i] = state[i];
    for (int64_t i = 0; rc == LACS_OK && i < K * K; i++)
        H0[i] = state[K * V + i];
    real *h = state, *H = state + K * V;
    for (int64_t t = 0; t < s->T && rc == LACS_OK; t++) {
        for (int64_t i = 0; i < K * V; i++)
            h[i] = 0;
        for (int64_t i = 0; i < K * K; i++)
            H[i] = 0;
        real log_gamma = 0; /* sum_{tau=j+1..t} g_tau */
        for (int64_t j = t; j >= 0; j--) {
            const real coef = exp(log_gamma) * (s->beta ? s->beta[j] : 1);
            lacs_internal_state_add_outer(K, V, h, coef, s->k + j * K, s->v + j * V);
            lacs_internal_state_add_outer(K, K, H, coef, s->k + j * K, s->k + j * K);
            log_gamma += s->g ? s->g[j] : 0;
        }
        for (int64_t i = 0; i < K * V; i++)
            h[i] += exp(log_gamma) * h0[i];
        for (int64_t i = 0; i < K * K; i++)
            H[i] += exp(log_gamma) * H0[i];
        rc = readout(s, t, h, H, &w, o);
    }
    free_work(&w);
    free(h0);
    free(H0);
    return rc;
}

static int run(const char *op, const lacs_dims *d, const lacs_inputs *in, head_kernel kernel, real *o,
               real *ht, real *ht_kk)
{
    int rc = lacs_internal_validate(op, d, in, LACS_READS_LAMBDA,
                                    LACS_READS_G | LACS_READS_BETA | LACS_READS_H0 | LACS_READS_H0_KK);
    if (rc)
        return rc;
    for (int64_t i = 0; i < d->HV * d->K; i++)
        if (!(in->lambda[i] >= 0) || isinf(in->lambda[i]))
            return lacs_internal_error(LACS_ERR_PARAM, op,
                                       "lambda[%lld] = %g: the regulariser must be finite and >= 0",
                                       (long long)i, in->lambda[i]);
    if (in->beta && (rc = lacs_internal_check_beta_nonnegative(op, d, in, "H_t must stay positive "
                                                                       "semidefinite")))
        return rc;
    return lacs_internal_run_per_head(op, d, in, STATE_KV_KK, kernel, o, ht, ht_kk);
}

int lacs_ref_mesa_net(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht, real *ht_kk)
{
    return run("mesa_net", d, in, mesa_kernel, o, ht, ht_kk);
}

int lacs_ref_mesa_net_parallel(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht, real *ht_kk)
{
    return run("mesa_net_parallel", d, in, mesa_parallel_kernel, o, ht, ht_kk);
}


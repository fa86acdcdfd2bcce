/* Gated DeltaNet (H8 first form, scalar g), KDA (per-channel gk), their matrix
 * form (H9), and Comba (H8 second form). SPEC.md 4.5 and 4.6.
 *
 * Paper forms (S = h^T):
 *   GDN    S_t = S_{t-1} (alpha_t (I - beta_t k_t k_t^T)) + beta_t v_t k_t^T
 *   Comba  S_t = gamma_t S_{t-1} + eta_t (v_t - S_{t-1} k_t) k_t^T
 * with alpha = gamma = exp(g) and beta = eta the op's beta input. H8's mapping:
 * GDN(alpha, beta, v) = Comba(gamma = alpha, eta = alpha beta, v / alpha).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* H8, in fla's order: decay the state (h' = D_t h, D_t = exp(g_t) or
 * diag(exp(gk_t))), then the delta rule on the decayed state:
 * u = beta (v - h'^T k); h = h' + k u^T. For scalar g this is exactly
 * alpha (I - beta k k^T) h + beta k v^T; for gk the decay comes first. */
static int gated_delta_kernel(const sequence_head *s, real *h, real *o)
{
    const int64_t K = s->K, V = s->V;
    real *u = malloc((size_t)V * sizeof(real));
    if (!u)
        return LACS_ERR_MEMORY;
    for (int64_t t = 0; t < s->T; t++) {
        const real *k = s->k + t * K;
        for (int64_t c = 0; c < K; c++) {
            real factor = exp(lacs_internal_log_decay(s, t, c));
            for (int64_t j = 0; j < V; j++)
                h[c * V + j] *= factor;
        }
        lacs_internal_delta_correction(K, V, h, k, s->v + t * V, s->beta[t], u); /* reads the decayed state */
        lacs_internal_state_add_outer(K, V, h, 1, k, u);
        lacs_internal_state_readout(K, V, h, s->q + t * K, s->scale, o + t * V);
    }
    free(u);
    return LACS_OK;
}

/* H8 second form: the correction reads the un-decayed state h_{t-1}:
 * p = h_{t-1}^T k; h_t = exp(g_t) h_{t-1} + beta_t k (v - p)^T. */
static int comba_kernel(const sequence_head *s, real *h, real *o)
{
    const int64_t K = s->K, V = s->V;
    real *u = malloc((size_t)V * sizeof(real));
    if (!u)
        return LACS_ERR_MEMORY;
    for (int64_t t = 0; t < s->T; t++) {
        const real *k = s->k + t * K;
        lacs_internal_delta_correction(K, V, h, k, s->v + t * V, s->beta[t], u); /* before the decay */
        real gamma = exp(s->g[t]);
        for (int64_t i = 0; i < K * V; i++)
            h[i] *= gamma;
        lacs_internal_state_add_outer(K, V, h, 1, k, u);
        lacs_internal_state_readout(K, V, h, s->q + t * K, s->scale, o + t * V);
    }
    free(u);
    return LACS_OK;
}

/* Exactly one of g (scalar decay) and gk (per-channel, KDA) must be given. */
static int validate_gated(const char *op, const lacs_dims *d, const lacs_inputs *in)
{
    int rc = lacs_internal_validate(op, d, in, LACS_READS_BETA,
                                    LACS_READS_G | LACS_READS_GK | LACS_READS_H0);
    return rc ? rc
              : lacs_internal_check_exactly_one(op, in->g, "'g' (scalar decay)", in->gk,
                                                "'gk' (per-channel decay, KDA)");
}

int lacs_ref_gated_delta_rule(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    int rc = validate_gated("gated_delta_rule", d, in);
    return rc ? rc : lacs_internal_run_per_head("gated_delta_rule", d, in, STATE_KV, gated_delta_kernel, o, ht, NULL);
}

int lacs_ref_gated_delta_rule_matrix(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    const char *op = "gated_delta_rule_matrix";
    int rc = validate_gated(op, d, in);
    if (!rc)
        rc = lacs_internal_check_beta_nonnegative(op, d, in, "this form absorbs beta as sqrt(beta)");
    return rc ? rc : lacs_internal_run_per_head(op, d, in, STATE_KV, lacs_internal_delta_matrix_kernel, o, ht, NULL);
}

int lacs_ref_comba(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    int rc = lacs_internal_validate("comba", d, in, LACS_READS_BETA | LACS_READS_G, LACS_READS_H0);
    return rc ? rc : lacs_internal_run_per_head("comba", d, in, STATE_KV, comba_kernel, o, ht, NULL);
}

/* ---- gradients (SPEC.md 4.19) ---- */

/* Gated DeltaNet and KDA: the delta rule's adjoint (delta_rule.c) with the
 * decay of the state's rows, dlog giving dg (summed over rows) or dgk. */
static int gated_delta_vjp_kernel(const sequence_head *s, real *h, const real *dout, real *dh, head_grads *g)
{
    return lacs_internal_delta_family_vjp(s, 0, h, dout, dh, g);
}

/* The adjoint of Comba (H8 second form), token by token in reverse, after
 * running the forward again (states[t] = h_{t-1}). With dh the cotangent of h_t:
 *   o_t = scale h_t^T q_t            dq_t = scale h_t do_t,  dh += scale q_t do_t^T
 *   h_t = gamma h_{t-1} + k u^T      du = dh^T k,  dk_t = dh u,
 *                                    dlog[t][c] = sum_j dh[c][j] gamma h_{t-1}[c][j]
 *   u = beta e, e = v - p            dbeta_t = du . e,  dv_t = beta du
 *   p = h_{t-1}^T k (un-decayed)     dp = -beta du:  dk_t += h_{t-1} dp
 *                                    dh <- gamma dh + k dp^T, the cotangent of h_{t-1}. */
static int comba_vjp_kernel(const sequence_head *s, real *h, const real *dout, real *dh, head_grads *g)
{
    const int64_t K = s->K, V = s->V, T = s->T;
    real *states = malloc((size_t)((T + 1) * K * V) * sizeof(real));
    real *u = malloc((size_t)V * sizeof(real)), *p = malloc((size_t)V * sizeof(real));
    real *du = malloc((size_t)V * sizeof(real));
    int rc = states && u && p && du ? LACS_OK : LACS_ERR_MEMORY;
    for (int64_t t = 0; t < T && rc == LACS_OK; t++) { /* the forward, as comba_kernel */
        const real *k = s->k + t * K;
        memcpy(states + t * K * V, h, (size_t)(K * V) * sizeof(real));
        lacs_internal_delta_correction(K, V, h, k, s->v + t * V, s->beta[t], u);
        real gamma = exp(s->g[t]);
        for (int64_t i = 0; i < K * V; i++)
            h[i] *= gamma;
        lacs_internal_state_add_outer(K, V, h, 1, k, u);
    }
    if (rc == LACS_OK)
        memcpy(states + T * K * V, h, (size_t)(K * V) * sizeof(real));
    for (int64_t t = T - 1; t >= 0 && rc == LACS_OK; t--) {
        const real *q = s->q + t * K, *k = s->k + t * K, *v = s->v + t * V, *prev = states + t * K * V;
        const real beta = s->beta[t], gamma = exp(s->g[t]);
        real *dk = g->dk + t * K;
        lacs_internal_readout_adjoint(K, V, states + (t + 1) * K * V, q, s->scale, dout + t * V, g->dq + t * K, dh);
        lacs_internal_state_readout(K, V, prev, k, 1, p);
        real dbeta = 0;
        for (int64_t j = 0; j < V; j++) {
            const real e = v[j] - p[j];
            u[j] = beta * e;
            du[j] = 0;
            for (int64_t c = 0; c < K; c++)
                du[j] += dh[c * V + j] * k[c];
            dbeta += du[j] * e;
            g->dv[t * V + j] += beta * du[j];
        }
        for (int64_t c = 0; c < K; c++)
            for (int64_t j = 0; j < V; j++) {
                const real dp = -beta * du[j];
                dk[c] += dh[c * V + j] * u[j] + prev[c * V + j] * dp;
                g->dlog[t * K + c] += dh[c * V + j] * (prev[c * V + j] * gamma);
                dh[c * V + j] = gamma * dh[c * V + j] + k[c] * dp;
            }
        g->dbeta[t] = dbeta;
        lacs_internal_state_rounded(K, V, dh);
    }
    if (rc == LACS_OK)
        lacs_internal_gate_gradient_rounded(s, g);
    free(states);
    free(u);
    free(p);
    free(du);
    return rc;
}

int lacs_ref_gated_delta_rule_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                                  const grads_out *gr)
{
    int rc = validate_gated("gated_delta_rule_vjp", d, in);
    return rc ? rc
              : lacs_internal_run_per_head_vjp("gated_delta_rule_vjp", d, in, ct, STATE_KV, gated_delta_vjp_kernel, gr);
}

int lacs_ref_comba_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct, const grads_out *gr)
{
    int rc = lacs_internal_validate("comba_vjp", d, in, LACS_READS_BETA | LACS_READS_G, LACS_READS_H0);
    return rc ? rc : lacs_internal_run_per_head_vjp("comba_vjp", d, in, ct, STATE_KV, comba_vjp_kernel, gr);
}

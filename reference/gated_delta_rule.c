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
            real factor = exp(REFI(log_decay)(s, t, c));
            for (int64_t j = 0; j < V; j++)
                h[c * V + j] *= factor;
        }
        REFI(delta_correction)(K, V, h, k, s->v + t * V, s->beta[t], u); /* reads the decayed state */
        REFI(state_add_outer)(K, V, h, 1, k, u);
        REFI(state_readout)(K, V, h, s->q + t * K, s->scale, o + t * V);
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
        REFI(delta_correction)(K, V, h, k, s->v + t * V, s->beta[t], u); /* before the decay */
        real gamma = exp(s->g[t]);
        for (int64_t i = 0; i < K * V; i++)
            h[i] *= gamma;
        REFI(state_add_outer)(K, V, h, 1, k, u);
        REFI(state_readout)(K, V, h, s->q + t * K, s->scale, o + t * V);
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

int REF(gated_delta_rule)(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    int rc = validate_gated("gated_delta_rule", d, in);
    return rc ? rc : REFI(run_per_head)("gated_delta_rule", d, in, STATE_KV, gated_delta_kernel, o, ht, NULL);
}

int REF(gated_delta_rule_matrix)(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    const char *op = "gated_delta_rule_matrix";
    int rc = validate_gated(op, d, in);
    if (!rc)
        rc = lacs_internal_check_beta_nonnegative(op, d, in, "this form absorbs beta as sqrt(beta)");
    return rc ? rc : REFI(run_per_head)(op, d, in, STATE_KV, REFI(delta_matrix_kernel), o, ht, NULL);
}

int REF(comba)(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    int rc = lacs_internal_validate("comba", d, in, LACS_READS_BETA | LACS_READS_G, LACS_READS_H0);
    return rc ? rc : REFI(run_per_head)("comba", d, in, STATE_KV, comba_kernel, o, ht, NULL);
}

/* Causal softmax attention (H1) and its forget-gated form (H10: FoX, and
 * ALiBi as the constant-gate case). q, k [B, T, H, K], v and o [B, T, HV, V],
 * value head hv reads q/k head hv / G like the recurrent family. SPEC.md 4.8
 * and 4.10.
 *
 * Logits l_ij = scale q_i . k_j + log Gamma_ij for j <= i, where H10's
 * log Gamma_ij = sum_{tau=j+1..i} g_tau is the log of the gated linear
 * attention's decay (H9) carried into the exponent by the kernel trick
 * exp(QK^T + log Gamma). Softmax attention is the case g = 0. The gate is
 * added after the scale (fla's forgetting attention). exp overflows double
 * above 709, so both forms subtract the row maximum first.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Component form: for each i, walk j from i down to 0, accumulating
 * log Gamma_ij = sum_{tau=j+1..i} g_tau in the recurrence's order. */
static int softmax_kernel(const sequence_head *s, real *h, real *o)
{
    (void)h;
    const int64_t T = s->T, K = s->K, V = s->V;
    real *logit = malloc((size_t)(T + 1) * sizeof(real));
    if (!logit)
        return LACS_ERR_MEMORY;
    for (int64_t i = 0; i < T; i++) {
        real log_gamma = 0, m = -INFINITY;
        for (int64_t j = i; j >= 0; j--) {
            logit[j] = s->scale * lacs_internal_dot(K, s->q + i * K, s->k + j * K) + log_gamma;
            m = fmax(m, logit[j]);
            log_gamma += lacs_internal_log_decay(s, j, 0); /* now sum_{tau=j..i} */
        }
        real denom = 0;
        real *oi = o + i * V;
        for (int64_t c = 0; c < V; c++)
            oi[c] = 0;
        for (int64_t j = 0; j <= i; j++) {
            real p = exp(logit[j] - m);
            denom += p;
            for (int64_t c = 0; c < V; c++)
                oi[c] += p * s->v[j * V + c];
        }
        for (int64_t c = 0; c < V; c++)
            oi[c] /= denom;
    }
    free(logit);
    return LACS_OK;
}

/* Matrix form: L = scale QK^T + (G 1^T - 1 G^T) + log M with G_i the prefix
 * sum of the log gate (i g_gamma for ALiBi), P = causal softmax of L, O = P V. */
static int softmax_matrix_kernel(const sequence_head *s, real *h, real *o)
{
    (void)h;
    const int64_t T = s->T, K = s->K, V = s->V;
    real *L = malloc((size_t)(T * T + 1) * sizeof(real));
    real *G = malloc((size_t)(T + 1) * sizeof(real));
    if (!L || !G) {
        free(L);
        free(G);
        return LACS_ERR_MEMORY;
    }
    for (int64_t i = 0; i < T; i++) {
        if (s->g)
            G[i] = (i > 0 ? G[i - 1] : 0) + s->g[i];
        else
            G[i] = i * s->g_gamma; /* 0 for softmax attention */
    }
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j <= i; j++)
            L[i * T + j] = s->scale * lacs_internal_dot(K, s->q + i * K, s->k + j * K) + (G[i] - G[j]);
    lacs_internal_causal_softmax(T, 0, L);
    lacs_internal_matmul(T, T, V, L, s->v, o);
    free(L);
    free(G);
    return LACS_OK;
}

int lacs_ref_softmax_attn(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    int rc = lacs_internal_validate("softmax_attn", d, in, 0, 0);
    return rc ? rc : lacs_internal_run_per_head("softmax_attn", d, in, STATE_NONE, softmax_kernel, o, NULL, NULL);
}

int lacs_ref_softmax_attn_matrix(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    int rc = lacs_internal_validate("softmax_attn_matrix", d, in, 0, 0);
    return rc ? rc
              : lacs_internal_run_per_head("softmax_attn_matrix", d, in, STATE_NONE, softmax_matrix_kernel, o,
                                           NULL, NULL);
}

/* H10 reads exactly one gate: g [B, T, HV] (FoX) or g_gamma [HV] (ALiBi). */
static int validate_fox(const char *op, const lacs_dims *d, const lacs_inputs *in)
{
    int rc = lacs_internal_validate(op, d, in, 0, LACS_READS_G | LACS_READS_G_GAMMA);
    return rc ? rc
              : lacs_internal_check_exactly_one(op, in->g, "'g' (FoX's log forget gate)", in->g_gamma,
                                                "'g_gamma' (ALiBi's constant log decay)");
}

int lacs_ref_fox(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    int rc = validate_fox("fox", d, in);
    return rc ? rc : lacs_internal_run_per_head("fox", d, in, STATE_NONE, softmax_kernel, o, NULL, NULL);
}

int lacs_ref_fox_matrix(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    int rc = validate_fox("fox_matrix", d, in);
    return rc ? rc : lacs_internal_run_per_head("fox_matrix", d, in, STATE_NONE, softmax_matrix_kernel, o, NULL, NULL);
}

/* ---- gradients (SPEC.md 4.19) ---- */

/* The adjoint of H1/H10, one query row at a time (the rows are independent).
 * The forward's logits l_ij and weights p_ij = softmax_j(l_ij) again, then
 *   o_i = sum_j p_ij v_j           dp_ij = do_i . v_j,  dv_j += p_ij do_i
 *   p_i = softmax(l_i)             dl_ij = p_ij (dp_ij - sum_m p_im dp_im)
 *   l_ij = scale q_i . k_j + ...   dq_i += scale dl_ij k_j,  dk_j += scale dl_ij q_i
 *   ... + sum_{tau=j+1..i} g_tau   dg_tau += sum_{j < tau} dl_ij, for tau <= i
 * (ALiBi: the same per token, summed into dg_gamma by the driver). */
static int softmax_vjp_kernel(const sequence_head *s, real *h, const real *dout, real *dh, head_grads *g)
{
    (void)h;
    (void)dh;
    const int64_t T = s->T, K = s->K, V = s->V;
    real *logit = malloc((size_t)(T + 1) * sizeof(real)), *p = malloc((size_t)(T + 1) * sizeof(real));
    real *dp = malloc((size_t)(T + 1) * sizeof(real)), *dl = malloc((size_t)(T + 1) * sizeof(real));
    int rc = logit && p && dp && dl ? LACS_OK : LACS_ERR_MEMORY;
    for (int64_t i = 0; i < T && rc == LACS_OK; i++) {
        const real *qi = s->q + i * K, *doi = dout + i * V;
        real log_gamma = 0, m = -INFINITY;
        for (int64_t j = i; j >= 0; j--) { /* as softmax_kernel */
            logit[j] = s->scale * lacs_internal_dot(K, qi, s->k + j * K) + log_gamma;
            m = fmax(m, logit[j]);
            log_gamma += lacs_internal_log_decay(s, j, 0);
        }
        real denom = 0;
        for (int64_t j = 0; j <= i; j++)
            denom += (p[j] = exp(logit[j] - m));
        for (int64_t j = 0; j <= i; j++) {
            p[j] /= denom;
            dp[j] = lacs_internal_dot(V, doi, s->v + j * V);
        }
        lacs_internal_weights_from_rounded_lse(i + 1, m + log(denom), p);
        lacs_internal_softmax_adjoint(i + 1, p, dp, dl);
        for (int64_t j = 0; j <= i; j++) {
            for (int64_t c = 0; c < V; c++)
                g->dv[j * V + c] += p[j] * doi[c];
            for (int64_t c = 0; c < K; c++) {
                g->dq[i * K + c] += s->scale * dl[j] * s->k[j * K + c];
                g->dk[j * K + c] += s->scale * dl[j] * qi[c];
            }
        }
        lacs_internal_gate_row_adjoint(i + 1, p, dl, 1, g->dlog, K);
    }
    free(logit);
    free(p);
    free(dp);
    free(dl);
    return rc;
}

int lacs_ref_softmax_attn_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct, const grads_out *gr)
{
    int rc = lacs_internal_validate("softmax_attn_vjp", d, in, 0, 0);
    return rc ? rc
              : lacs_internal_run_per_head_vjp("softmax_attn_vjp", d, in, ct, STATE_NONE, softmax_vjp_kernel, gr);
}

int lacs_ref_fox_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct, const grads_out *gr)
{
    int rc = validate_fox("fox_vjp", d, in);
    return rc ? rc : lacs_internal_run_per_head_vjp("fox_vjp", d, in, ct, STATE_NONE, softmax_vjp_kernel, gr);
}

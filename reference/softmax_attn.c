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
            logit[j] = s->scale * REFI(dot)(K, s->q + i * K, s->k + j * K) + log_gamma;
            m = fmax(m, logit[j]);
            log_gamma += REFI(log_decay)(s, j, 0); /* now sum_{tau=j..i} */
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
            L[i * T + j] = s->scale * REFI(dot)(K, s->q + i * K, s->k + j * K) + (G[i] - G[j]);
    REFI(causal_softmax)(T, 0, L);
    REFI(matmul)(T, T, V, L, s->v, o);
    free(L);
    free(G);
    return LACS_OK;
}

int REF(softmax_attn)(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    int rc = lacs_internal_validate("softmax_attn", d, in, 0, 0);
    return rc ? rc : REFI(run_per_head)("softmax_attn", d, in, STATE_NONE, softmax_kernel, o, NULL, NULL);
}

int REF(softmax_attn_matrix)(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    int rc = lacs_internal_validate("softmax_attn_matrix", d, in, 0, 0);
    return rc ? rc
              : REFI(run_per_head)("softmax_attn_matrix", d, in, STATE_NONE, softmax_matrix_kernel, o,
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

int REF(fox)(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    int rc = validate_fox("fox", d, in);
    return rc ? rc : REFI(run_per_head)("fox", d, in, STATE_NONE, softmax_kernel, o, NULL, NULL);
}

int REF(fox_matrix)(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    int rc = validate_fox("fox_matrix", d, in);
    return rc ? rc : REFI(run_per_head)("fox_matrix", d, in, STATE_NONE, softmax_matrix_kernel, o, NULL, NULL);
}

/* Causal softmax attention, H1: the baseline attention kernels are compared
 * with. q, k [B, T, H, K], v and o [B, T, HV, V], value head hv reads q/k head
 * hv / G like the recurrent family (GQA). SPEC.md 4.8.
 *
 * Scores s_tj = scale q_t . k_j for j <= t. exp(s) overflows double for s > 709,
 * so both forms subtract the row maximum m_t first: the ratio is unchanged
 * and every exponent is <= 0.
 */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

static real dot(int64_t n, const real *a, const real *b)
{
    real sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

/* H1 component form: o_t = sum_{j<=t} e^{s_tj - m_t} v_j / sum_{j<=t} e^{s_tj - m_t}. */
static int softmax_kernel(const sequence_head *s, real *h, real *o)
{
    (void)h;
    const int64_t K = s->K, V = s->V;
    for (int64_t t = 0; t < s->T; t++) {
        real m = -INFINITY;
        for (int64_t j = 0; j <= t; j++)
            m = fmax(m, s->scale * dot(K, s->q + t * K, s->k + j * K));
        real denom = 0;
        real *ot = o + t * V;
        for (int64_t c = 0; c < V; c++)
            ot[c] = 0;
        for (int64_t j = 0; j <= t; j++) {
            real w = exp(s->scale * dot(K, s->q + t * K, s->k + j * K) - m);
            denom += w;
            for (int64_t c = 0; c < V; c++)
                ot[c] += w * s->v[j * V + c];
        }
        for (int64_t c = 0; c < V; c++)
            ot[c] /= denom;
    }
    return LACS_OK;
}

/* H1 matrix form: P = exp(S + log M - m 1^T) with e^{-inf} = 0 above the
 * diagonal, numerator N = P V, denominator D = P 1, O = N / D row by row. */
static int softmax_matrix_kernel(const sequence_head *s, real *h, real *o)
{
    (void)h;
    const int64_t T = s->T, K = s->K, V = s->V;
    real *P = calloc((size_t)(T * T + 1), sizeof(real));
    real *N = malloc((size_t)(T * V + 1) * sizeof(real));
    if (!P || !N) {
        free(P);
        free(N);
        return LACS_ERR_MEMORY;
    }
    for (int64_t i = 0; i < T; i++) { /* S + log M */
        for (int64_t j = 0; j < T; j++)
            P[i * T + j] = j <= i ? s->scale * dot(K, s->q + i * K, s->k + j * K) : -INFINITY;
        real m = -INFINITY;
        for (int64_t j = 0; j < T; j++)
            m = fmax(m, P[i * T + j]);
        for (int64_t j = 0; j < T; j++)
            P[i * T + j] = exp(P[i * T + j] - m);
    }
    REFI(matmul)(T, T, V, P, s->v, N);
    for (int64_t i = 0; i < T; i++) {
        real denom = 0;
        for (int64_t j = 0; j < T; j++)
            denom += P[i * T + j];
        for (int64_t c = 0; c < V; c++)
            o[i * V + c] = N[i * V + c] / denom;
    }
    free(P);
    free(N);
    return LACS_OK;
}

int REF(softmax_attn)(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    int rc = lacs_internal_validate("softmax_attn", d, in, 0, 0);
    return rc ? rc : REFI(run_per_head)("softmax_attn", d, in, 0, softmax_kernel, o, NULL);
}

int REF(softmax_attn_matrix)(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    int rc = lacs_internal_validate("softmax_attn_matrix", d, in, 0, 0);
    return rc ? rc : REFI(run_per_head)("softmax_attn_matrix", d, in, 0, softmax_matrix_kernel, o, NULL);
}

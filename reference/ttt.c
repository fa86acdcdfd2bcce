/* H5 and H8: the test-time-training view. Each recurrence of the family is one
 * SGD step h <- h - lr * dL/dh on a per-token loss; this file states the losses,
 * and tests/test_identities.c checks the step against a gradient taken by
 * central differences in long double. SPEC.md 4.9.
 *
 * In the state's own convention (h = S^T, K x V), the prediction for a key k is
 * p = h^T k and:
 *   H5 linear attention: L = -v . p                               lr = 1
 *   H5 RetNet:           L = -v . p + (1 - gamma)/2 ||h||_F^2      lr = 1
 *   H6 DeltaNet:         L = 1/2 ||p - v||^2                       lr = beta
 *   H8 Comba:            L = 1/2 ||p - v||^2 + (1 - gamma)/(2 eta) ||h||_F^2, lr = eta
 * The source document prints Comba's regulariser as (1 - gamma)/eta ||S||_F^2;
 * its gradient 2 (1 - gamma)/eta S would give the step (2 gamma - 1) S + ...,
 * not Comba's gamma S + ...: the factor 1/2 is needed (SPEC.md 4.9; the test
 * shows the printed form failing).
 */
#include "internal.h"

real lacs_ref_ttt_loss(lacs_ttt_loss_kind kind, int64_t K, int64_t V, const real *h, const real *k,
                       const real *v, real gamma, real eta)
{
    real fit = 0, inner = 0, frob = 0;
    for (int64_t c = 0; c < V; c++) {
        real p = 0;
        for (int64_t i = 0; i < K; i++)
            p += h[i * V + c] * k[i];
        fit += (p - v[c]) * (p - v[c]);
        inner += v[c] * p;
    }
    for (int64_t i = 0; i < K * V; i++)
        frob += h[i] * h[i];
    switch (kind) {
    case LACS_TTT_LINEAR:
        return -inner;
    case LACS_TTT_RETENTION:
        return -inner + (1 - gamma) / 2 * frob;
    case LACS_TTT_DELTA:
        return fit / 2;
    case LACS_TTT_COMBA:
        return fit / 2 + (1 - gamma) / (2 * eta) * frob;
    }
    return NAN;
}

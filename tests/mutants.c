/* Deliberately wrong implementations of the delta-rule family (support.h).
 * Written from scratch, in the papers' order of operations, with its own
 * indexing: nothing here calls the reference, so agreement with it (bugs = 0)
 * is evidence, and each bug shows what the comparison can catch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

int mutant_delta_family(const lacs_dims *d, const lacs_inputs *in, unsigned bugs, int comba,
                        double *o, double *ht)
{
    const int64_t K = d->K, V = d->V, G = d->HV / d->H;
    const int64_t n_seq = d->cu_seqlens ? d->N : d->B;
    double *h = malloc((size_t)(K * V) * sizeof(double));
    double *pred = malloc((size_t)V * sizeof(double));
    if (!h || !pred) {
        free(h);
        free(pred);
        return LACS_ERR_MEMORY;
    }
    for (int64_t n = 0; n < n_seq; n++) {
        const int64_t b = d->cu_seqlens ? 0 : n;
        const int64_t t0 = d->cu_seqlens ? d->cu_seqlens[n] : 0;
        const int64_t t1 = d->cu_seqlens ? d->cu_seqlens[n + 1] : d->T;
        for (int64_t hv = 0; hv < d->HV; hv++) {
            const int64_t hk = (bugs & BUG_GVA_TILED) ? hv % d->H : hv / G;
            for (int64_t i = 0; i < K * V; i++)
                h[i] = in->h0 ? in->h0[(n * d->HV + hv) * K * V + i] : 0;
            for (int64_t t = t0; t < t1; t++) {
                const int64_t row = (b * d->T + t) * d->HV + hv;
                const double *q = in->q + ((b * d->T + t) * d->H + hk) * K;
                const double *k = in->k + ((b * d->T + t) * d->H + hk) * K;
                const double *v = in->v + row * V;
                const double beta = in->beta[row];
                const double alpha = in->g ? exp(in->g[row]) : 1;
                double *ot = o + row * V;
                if (bugs & BUG_READOUT_BEFORE_UPDATE)
                    for (int64_t c = 0; c < V; c++) {
                        ot[c] = 0;
                        for (int64_t i = 0; i < K; i++)
                            ot[c] += in->scale * h[i * V + c] * q[i];
                    }
                /* the state that the correction reads */
                const double seen = (comba && !(bugs & BUG_COMBA_DECAYED_STATE)) ? 1 : alpha;
                for (int64_t c = 0; c < V; c++) {
                    pred[c] = 0;
                    for (int64_t i = 0; i < K; i++)
                        pred[c] += seen * h[i * V + c] * k[i];
                }
                const double erase = (bugs & BUG_BETA_ON_WRITE_ONLY) ? 1 : beta;
                const double write_decay = (bugs & BUG_DECAY_ON_WRITE) ? alpha : 1;
                /* h = alpha h - erase k pred^T + beta k v^T, pred read above */
                for (int64_t i = 0; i < K; i++)
                    for (int64_t c = 0; c < V; c++)
                        h[i * V + c] = alpha * h[i * V + c] - erase * k[i] * pred[c] +
                                       write_decay * beta * k[i] * v[c];
                if (!(bugs & BUG_READOUT_BEFORE_UPDATE))
                    for (int64_t c = 0; c < V; c++) {
                        ot[c] = 0;
                        for (int64_t i = 0; i < K; i++)
                            ot[c] += in->scale * h[i * V + c] * q[i];
                    }
            }
            if (ht)
                memcpy(ht + (n * d->HV + hv) * K * V, h, (size_t)(K * V) * sizeof(double));
        }
    }
    free(h);
    free(pred);
    return LACS_OK;
}

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

/* One (b, hv) of a [B, T, heads, width] tensor, row t. */
static const double *row_of(const double *x, const lacs_dims *d, int64_t b, int64_t t, int64_t heads,
                            int64_t head, int64_t width)
{
    return x + ((b * d->T + t) * heads + head) * width;
}

static double dot_n(int64_t n, const double *a, const double *b)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* Softmax of logit[0..n) applied to the value rows of head hv, into out [V]. */
static void softmax_rows(const lacs_dims *d, const lacs_inputs *in, int64_t b, int64_t hv, int64_t n,
                         const double *logit, double *out)
{
    double m = -INFINITY, denom = 0;
    for (int64_t j = 0; j < n; j++)
        m = fmax(m, logit[j]);
    for (int64_t c = 0; c < d->V; c++)
        out[c] = 0;
    for (int64_t j = 0; j < n; j++) {
        double p = exp(logit[j] - m);
        denom += p;
        const double *v = row_of(in->v, d, b, j, d->HV, hv, d->V);
        for (int64_t c = 0; c < d->V; c++)
            out[c] += p * v[c];
    }
    for (int64_t c = 0; c < d->V; c++)
        out[c] /= denom;
}

/* Fixed-length batches only (the identity tests use no varlen). */
int mutant_path_attn(const lacs_dims *d, const lacs_inputs *in, unsigned bugs, double *o)
{
    const int64_t K = d->K, G = d->HV / d->H;
    double *x = malloc((size_t)K * sizeof(double)), *logit = malloc((size_t)(d->T + 1) * sizeof(double));
    if (!x || !logit) {
        free(x);
        free(logit);
        return LACS_ERR_MEMORY;
    }
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t hv = 0; hv < d->HV; hv++) {
            const int64_t hk = hv / G;
            for (int64_t i = 0; i < d->T; i++) {
                for (int64_t j = 0; j <= i; j++) {
                    memcpy(x, row_of(in->k, d, b, j, d->H, hk, K), (size_t)K * sizeof(double));
                    const int64_t first = (bugs & BUG_PATH_FROM_J) ? j : j + 1;
                    double gate = 0;
                    for (int64_t step = 0; step <= i - first; step++) {
                        /* H_first is applied first, unless the product is reversed */
                        const int64_t t = (bugs & BUG_PATH_REVERSED) ? i - step : first + step;
                        const double *w = row_of(in->w, d, b, t, d->H, hk, K);
                        const double coef = in->beta[(b * d->T + t) * d->HV + hv] * dot_n(K, w, x);
                        for (int64_t c = 0; c < K; c++)
                            x[c] -= coef * w[c];
                    }
                    for (int64_t t = j + 1; in->g && t <= i; t++)
                        gate += in->g[(b * d->T + t) * d->HV + hv];
                    const double score = dot_n(K, row_of(in->q, d, b, i, d->H, hk, K), x);
                    logit[j] = (bugs & BUG_PATH_GATE_AFTER_SCALE) ? in->scale * score + gate
                                                                 : in->scale * (score + gate);
                }
                softmax_rows(d, in, b, hv, i + 1, logit, o + ((b * d->T + i) * d->HV + hv) * d->V);
            }
        }
    free(x);
    free(logit);
    return LACS_OK;
}

int mutant_deltaformer_fla(const lacs_dims *d, const lacs_inputs *in, unsigned bugs, double *o)
{
    const int64_t K = d->K, V = d->V, T = d->T, G = d->HV / d->H;
    double *u = malloc((size_t)(T * V + 1) * sizeof(double)), *p = malloc((size_t)(T + 1) * sizeof(double));
    if (!u || !p) {
        free(u);
        free(p);
        return LACS_ERR_MEMORY;
    }
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t hv = 0; hv < d->HV; hv++) {
            const int64_t hk = hv / G;
            for (int64_t i = 0; i < T; i++) { /* first stage, token by token */
                const int64_t n = (bugs & BUG_DELTAFORMER_DIAGONAL) ? i + 1 : i;
                const double *q = row_of(in->q, d, b, i, d->H, hk, K);
                double m = -INFINITY, denom = 0;
                for (int64_t j = 0; j < n; j++)
                    m = fmax(m, p[j] = in->scale * dot_n(K, q, row_of(in->k, d, b, j, d->H, hk, K)));
                for (int64_t j = 0; j < n; j++)
                    denom += (p[j] = exp(p[j] - m));
                const double beta = in->beta ? in->beta[(b * T + i) * d->HV + hv] : 1;
                const double *v = row_of(in->v, d, b, i, d->HV, hv, V);
                for (int64_t c = 0; c < V; c++) {
                    double sum = 0; /* with the diagonal bug, u_i's own slot is still 0 here */
                    for (int64_t j = 0; j < n; j++)
                        sum += p[j] / denom * (j < i ? u[j * V + c] : v[c]);
                    u[i * V + c] = v[c] - beta * sum;
                }
            }
            for (int64_t i = 0; i < T; i++) { /* second stage: causal softmax attention of q, k, u */
                const double *q = row_of(in->q, d, b, i, d->H, hk, K);
                double m = -INFINITY, denom = 0;
                for (int64_t j = 0; j <= i; j++)
                    m = fmax(m, p[j] = in->scale * dot_n(K, q, row_of(in->k, d, b, j, d->H, hk, K)));
                double *oi = o + ((b * T + i) * d->HV + hv) * V;
                for (int64_t c = 0; c < V; c++)
                    oi[c] = 0;
                for (int64_t j = 0; j <= i; j++) {
                    double w = exp(p[j] - m);
                    denom += w;
                    for (int64_t c = 0; c < V; c++)
                        oi[c] += w * u[j * V + c];
                }
                for (int64_t c = 0; c < V; c++)
                    oi[c] /= denom;
            }
        }
    free(u);
    free(p);
    return LACS_OK;
}

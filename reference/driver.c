/* The per-head driver: the one place that knows the tensor layout.
 *
 * It turns the batched, row-major tensors of SPEC.md section 2 into one
 * (sequence, value head) at a time, in contiguous arrays of `real`, so that each
 * op's kernel is a plain loop over t. Here, and only here, live:
 *   - the GVA mapping: value head hv reads q/k head hv / G, G = HV / H (fla);
 *   - varlen: sequence n spans tokens [cu_seqlens[n], cu_seqlens[n+1]) of batch 0;
 *   - the state: h0[n, hv] (or zeros) in, ht[n, hv] out, and MesaNet's second
 *     state h0_kk[n, hv] in, ht_kk[n, hv] out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int64_t qk_index(const lacs_dims *d, int64_t b, int64_t t, int64_t h)
{
    return ((b * d->T + t) * d->H + h) * d->K;
}

static int64_t v_index(const lacs_dims *d, int64_t b, int64_t t, int64_t hv)
{
    return ((b * d->T + t) * d->HV + hv) * d->V;
}

static int64_t gate_index(const lacs_dims *d, int64_t b, int64_t t, int64_t hv)
{
    return (b * d->T + t) * d->HV + hv;
}

static int64_t gk_index(const lacs_dims *d, int64_t b, int64_t t, int64_t hv)
{
    return gate_index(d, b, t, hv) * d->K;
}

typedef struct {
    real *q, *k, *v, *beta, *g, *gk, *w, *lambda, *o, *h;
} head_buffers;

static void free_buffers(head_buffers *buf)
{
    free(buf->w);
    free(buf->lambda);
    free(buf->q);
    free(buf->k);
    free(buf->v);
    free(buf->beta);
    free(buf->g);
    free(buf->gk);
    free(buf->o);
    free(buf->h);
}

/* Buffers for the longest sequence; +1 so that T = 0 still allocates. */
static int64_t state_size(const lacs_dims *d, int state)
{
    if (state == STATE_KV_KK)
        return d->K * d->V + d->K * d->K;
    return state == STATE_KV ? d->K * d->V : 0;
}

static int alloc_buffers(const lacs_dims *d, const lacs_inputs *in, int64_t max_len, int state,
                         head_buffers *buf)
{
    size_t tk = (size_t)(max_len * d->K + 1), tv = (size_t)(max_len * d->V + 1);
    size_t t1 = (size_t)(max_len + 1);
    memset(buf, 0, sizeof *buf);
    buf->q = malloc(tk * sizeof(real));
    buf->k = malloc(tk * sizeof(real));
    buf->v = malloc(tv * sizeof(real));
    buf->o = malloc(tv * sizeof(real));
    int ok = buf->q && buf->k && buf->v && buf->o;
    if (in->beta)
        ok = ok && (buf->beta = malloc(t1 * sizeof(real)));
    if (in->g)
        ok = ok && (buf->g = malloc(t1 * sizeof(real)));
    if (in->gk)
        ok = ok && (buf->gk = malloc(tk * sizeof(real)));
    if (in->w)
        ok = ok && (buf->w = malloc(tk * sizeof(real)));
    if (in->lambda)
        ok = ok && (buf->lambda = malloc((size_t)d->K * sizeof(real)));
    if (state != STATE_NONE)
        ok = ok && (buf->h = malloc((size_t)state_size(d, state) * sizeof(real)));
    if (!ok) {
        free_buffers(buf);
        return LACS_ERR_MEMORY;
    }
    return LACS_OK;
}

int REFI(run_per_head)(const char *op, const lacs_dims *d, const lacs_inputs *in, int state,
                       head_kernel kernel, real *o, real *ht, real *ht_kk)
{
    const int64_t n_seq = lacs_internal_sequence_count(d);
    const int64_t group = d->HV / d->H;
    const int64_t K = d->K, V = d->V;
    int64_t max_len = d->cu_seqlens ? 0 : d->T;
    for (int64_t n = 0; d->cu_seqlens && n < n_seq; n++)
        if (d->cu_seqlens[n + 1] - d->cu_seqlens[n] > max_len)
            max_len = d->cu_seqlens[n + 1] - d->cu_seqlens[n];

    head_buffers buf;
    if (alloc_buffers(d, in, max_len, state, &buf))
        return lacs_internal_error(LACS_ERR_MEMORY, op, "out of memory for T = %lld",
                                   (long long)max_len);

    int rc = LACS_OK;
    for (int64_t n = 0; n < n_seq && rc == LACS_OK; n++) {
        const int64_t b = d->cu_seqlens ? 0 : n;
        const int64_t bos = d->cu_seqlens ? d->cu_seqlens[n] : 0;
        const int64_t len = d->cu_seqlens ? d->cu_seqlens[n + 1] - bos : d->T;
        for (int64_t hv = 0; hv < d->HV && rc == LACS_OK; hv++) {
            const int64_t h = hv / group; /* GVA: grouped, not tiled */
            for (int64_t t = 0; t < len; t++) {
                for (int64_t c = 0; c < K; c++) {
                    buf.q[t * K + c] = in->q[qk_index(d, b, bos + t, h) + c];
                    buf.k[t * K + c] = in->k[qk_index(d, b, bos + t, h) + c];
                    if (in->gk)
                        buf.gk[t * K + c] = in->gk[gk_index(d, b, bos + t, hv) + c];
                    if (in->w)
                        buf.w[t * K + c] = in->w[qk_index(d, b, bos + t, h) + c];
                }
                for (int64_t c = 0; c < V; c++)
                    buf.v[t * V + c] = in->v[v_index(d, b, bos + t, hv) + c];
                if (in->beta)
                    buf.beta[t] = in->beta[gate_index(d, b, bos + t, hv)];
                if (in->g)
                    buf.g[t] = in->g[gate_index(d, b, bos + t, hv)];
            }
            for (int64_t c = 0; in->lambda && c < K; c++)
                buf.lambda[c] = in->lambda[hv * K + c];
            if (state != STATE_NONE) {
                const double *h0 = in->h0 ? in->h0 + (n * d->HV + hv) * K * V : NULL;
                for (int64_t i = 0; i < K * V; i++)
                    buf.h[i] = h0 ? h0[i] : 0;
            }
            if (state == STATE_KV_KK) {
                const double *h0_kk = in->h0_kk ? in->h0_kk + (n * d->HV + hv) * K * K : NULL;
                for (int64_t i = 0; i < K * K; i++)
                    buf.h[K * V + i] = h0_kk ? h0_kk[i] : 0;
            }
            const sequence_head s = {
                .T = len, .K = K, .V = V,
                .scale = in->scale, .eps = in->eps,
                .g_gamma = in->g_gamma ? in->g_gamma[hv] : 0,
                .q = buf.q, .k = buf.k, .v = buf.v,
                .beta = buf.beta, .g = buf.g, .gk = buf.gk,
                .w = buf.w, .lambda = buf.lambda,
            };
            rc = kernel(&s, buf.h, buf.o);
            if (rc != LACS_OK && rc != LACS_ERR_MEMORY) {
                /* A kernel that fails on its data records the token and the
                 * problem with op NULL ("lacs: ..."); add where it happened. */
                char what[400];
                snprintf(what, sizeof what, "%s", lacs_last_error() + strlen("lacs: "));
                lacs_internal_error(rc, op, "sequence %lld, value head %lld, %s", (long long)n,
                                    (long long)hv, what);
            }
            for (int64_t t = 0; t < len && rc == LACS_OK; t++)
                for (int64_t c = 0; c < V; c++)
                    o[v_index(d, b, bos + t, hv) + c] = buf.o[t * V + c];
            if (state != STATE_NONE && ht && rc == LACS_OK)
                memcpy(ht + (n * d->HV + hv) * K * V, buf.h, (size_t)(K * V) * sizeof(real));
            if (state == STATE_KV_KK && ht_kk && rc == LACS_OK)
                memcpy(ht_kk + (n * d->HV + hv) * K * K, buf.h + K * V, (size_t)(K * K) * sizeof(real));
        }
    }
    free_buffers(&buf);
    if (rc == LACS_ERR_MEMORY)
        return lacs_internal_error(rc, op, "out of memory in the kernel");
    return rc; /* any other code: the kernel has recorded its own error */
}

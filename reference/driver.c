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

/* Gathers the inputs of sequence n, value head hv into buf (q, k, w of q/k
 * head hv / G; v, beta, g, gk, lambda of hv) and returns the sequence's
 * length; *b and *bos receive its batch row and first token. */
static int64_t gather_head(const lacs_dims *d, const lacs_inputs *in, int64_t n, int64_t hv, head_buffers *buf,
                           int64_t *b_out, int64_t *bos_out)
{
    const int64_t K = d->K, V = d->V, group = d->HV / d->H;
    const int64_t b = d->cu_seqlens ? 0 : n;
    const int64_t bos = d->cu_seqlens ? d->cu_seqlens[n] : 0;
    const int64_t len = d->cu_seqlens ? d->cu_seqlens[n + 1] - bos : d->T;
    const int64_t h = hv / group; /* GVA: grouped, not tiled */
    for (int64_t t = 0; t < len; t++) {
        for (int64_t c = 0; c < K; c++) {
            buf->q[t * K + c] = in->q[qk_index(d, b, bos + t, h) + c];
            buf->k[t * K + c] = in->k[qk_index(d, b, bos + t, h) + c];
            if (in->gk)
                buf->gk[t * K + c] = in->gk[gk_index(d, b, bos + t, hv) + c];
            if (in->w)
                buf->w[t * K + c] = in->w[qk_index(d, b, bos + t, h) + c];
        }
        for (int64_t c = 0; c < V; c++)
            buf->v[t * V + c] = in->v[v_index(d, b, bos + t, hv) + c];
        if (in->beta)
            buf->beta[t] = in->beta[gate_index(d, b, bos + t, hv)];
        if (in->g)
            buf->g[t] = in->g[gate_index(d, b, bos + t, hv)];
    }
    for (int64_t c = 0; in->lambda && c < K; c++)
        buf->lambda[c] = in->lambda[hv * K + c];
    *b_out = b;
    *bos_out = bos;
    return len;
}

/* The initial states of (n, hv) into h: h0 then h0_kk (zeros where absent);
 * the same layout serves the cotangents dht, dht_kk into dh. */
static void load_state(const lacs_dims *d, int state, int64_t n, int64_t hv, const double *kv, const double *kk,
                       real *h)
{
    const int64_t K = d->K, V = d->V;
    const double *a = kv ? kv + (n * d->HV + hv) * K * V : NULL;
    for (int64_t i = 0; i < K * V; i++)
        h[i] = a ? a[i] : 0;
    if (state == STATE_KV_KK) {
        const double *b = kk ? kk + (n * d->HV + hv) * K * K : NULL;
        for (int64_t i = 0; i < K * K; i++)
            h[K * V + i] = b ? b[i] : 0;
    }
}

static int64_t longest_sequence(const lacs_dims *d)
{
    int64_t max_len = d->cu_seqlens ? 0 : d->T;
    for (int64_t n = 0; d->cu_seqlens && n < lacs_internal_sequence_count(d); n++)
        if (d->cu_seqlens[n + 1] - d->cu_seqlens[n] > max_len)
            max_len = d->cu_seqlens[n + 1] - d->cu_seqlens[n];
    return max_len;
}

/* A kernel that fails on its data records the token and the problem with op
 * NULL ("lacs: ..."); add where it happened. */
static void locate_error(const char *op, int rc, int64_t n, int64_t hv)
{
    char what[400];
    snprintf(what, sizeof what, "%s", lacs_last_error() + strlen("lacs: "));
    lacs_internal_error(rc, op, "sequence %lld, value head %lld, %s", (long long)n, (long long)hv, what);
}

int lacs_internal_run_per_head(const char *op, const lacs_dims *d, const lacs_inputs *in, int state,
                               head_kernel kernel, real *o, real *ht, real *ht_kk)
{
    const int64_t n_seq = lacs_internal_sequence_count(d);
    const int64_t K = d->K, V = d->V;
    const int64_t max_len = longest_sequence(d);

    head_buffers buf;
    if (alloc_buffers(d, in, max_len, state, &buf))
        return lacs_internal_error(LACS_ERR_MEMORY, op, "out of memory for T = %lld",
                                   (long long)max_len);

    int rc = LACS_OK;
    for (int64_t n = 0; n < n_seq && rc == LACS_OK; n++) {
        for (int64_t hv = 0; hv < d->HV && rc == LACS_OK; hv++) {
            int64_t b, bos;
            const int64_t len = gather_head(d, in, n, hv, &buf, &b, &bos);
            if (state != STATE_NONE)
                load_state(d, state, n, hv, in->h0, in->h0_kk, buf.h);
            const sequence_head s = {
                .T = len, .K = K, .V = V,
                .scale = in->scale, .eps = in->eps,
                .g_gamma = in->g_gamma ? in->g_gamma[hv] : 0,
                .q = buf.q, .k = buf.k, .v = buf.v,
                .beta = buf.beta, .g = buf.g, .gk = buf.gk,
                .w = buf.w, .lambda = buf.lambda,
            };
            rc = kernel(&s, buf.h, buf.o);
            if (rc != LACS_OK && rc != LACS_ERR_MEMORY)
                locate_error(op, rc, n, hv);
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

/* ---- the driver of the gradients (SPEC.md 4.19) ---- */

/* The cotangents and the gradients asked for must fit the op and its inputs. */
static int check_vjp_call(const char *op, const lacs_inputs *in, const lacs_cotangents *ct, int state,
                          const grads_out *gr)
{
    if (!ct || !gr)
        return lacs_internal_error(LACS_ERR_INPUT, op, "cotangents and gradients must not be NULL");
    if (!ct->dout)
        return lacs_internal_error(LACS_ERR_INPUT, op, "cotangent 'do' is required");
    if (state == STATE_NONE && ct->dht)
        return lacs_internal_error(LACS_ERR_INPUT, op, "cotangent 'dht' is given but %s has no state", op);
    if (state != STATE_KV_KK && ct->dht_kk)
        return lacs_internal_error(LACS_ERR_INPUT, op, "cotangent 'dht_kk' is given but %s has no key-key state",
                                   op);
    const struct {
        const char *grad, *input;
        const void *asked, *given;
    } pairs[] = {
        {"dbeta", "beta", gr->dbeta, in->beta},      {"dg", "g", gr->dg, in->g},
        {"dgk", "gk", gr->dgk, in->gk},              {"dg_gamma", "g_gamma", gr->dg_gamma, in->g_gamma},
        {"dw", "w", gr->dw, in->w},                  {"dlambda", "lambda", gr->dlambda, in->lambda},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (pairs[i].asked && !pairs[i].given)
            return lacs_internal_error(LACS_ERR_INPUT, op, "gradient '%s' is asked for but input '%s' is not given",
                                       pairs[i].grad, pairs[i].input);
    if (gr->dh0 && state == STATE_NONE)
        return lacs_internal_error(LACS_ERR_INPUT, op, "gradient 'dh0' is asked for but %s has no state", op);
    if (gr->dh0_kk && state != STATE_KV_KK)
        return lacs_internal_error(LACS_ERR_INPUT, op, "gradient 'dh0_kk' is asked for but %s has no key-key state",
                                   op);
    return LACS_OK;
}

typedef struct {
    real *dout, *dh, *dq, *dk, *dv, *dbeta, *dlog, *dw, *dlambda;
} vjp_buffers;

static void free_vjp_buffers(vjp_buffers *b)
{
    free(b->dout);
    free(b->dh);
    free(b->dq);
    free(b->dk);
    free(b->dv);
    free(b->dbeta);
    free(b->dlog);
    free(b->dw);
    free(b->dlambda);
}

static void zero(real *x, int64_t n)
{
    for (int64_t i = 0; x && i < n; i++)
        x[i] = 0;
}

int lacs_internal_run_per_head_vjp(const char *op, const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                                   int state, head_vjp_kernel kernel, const grads_out *gr)
{
    int rc = check_vjp_call(op, in, ct, state, gr);
    if (rc != LACS_OK)
        return rc;
    const int64_t n_seq = lacs_internal_sequence_count(d);
    const int64_t K = d->K, V = d->V, group = d->HV / d->H;
    const int64_t max_len = longest_sequence(d);
    const size_t tk = (size_t)(max_len * K + 1), tv = (size_t)(max_len * V + 1), t1 = (size_t)(max_len + 1);
    const size_t state_len = (size_t)(K * V + (state == STATE_KV_KK ? K * K : 0) + 1);

    head_buffers buf;
    vjp_buffers g = {
        .dout = malloc(tv * sizeof(real)), .dh = malloc(state_len * sizeof(real)),
        .dq = malloc(tk * sizeof(real)), .dk = malloc(tk * sizeof(real)), .dv = malloc(tv * sizeof(real)),
        .dbeta = malloc(t1 * sizeof(real)), .dlog = malloc(tk * sizeof(real)), .dw = malloc(tk * sizeof(real)),
        .dlambda = malloc((size_t)(K + 1) * sizeof(real)),
    };
    int have_buf = alloc_buffers(d, in, max_len, state == STATE_NONE ? STATE_KV : state, &buf) == LACS_OK;
    if (!have_buf || !g.dout || !g.dh || !g.dq || !g.dk || !g.dv || !g.dbeta || !g.dlog || !g.dw || !g.dlambda) {
        if (have_buf)
            free_buffers(&buf);
        free_vjp_buffers(&g);
        return lacs_internal_error(LACS_ERR_MEMORY, op, "out of memory for T = %lld", (long long)max_len);
    }
    /* the sums start from zero */
    zero(gr->dq, d->B * d->T * d->H * K);
    zero(gr->dk, d->B * d->T * d->H * K);
    zero(gr->dw, d->B * d->T * d->H * K);
    zero(gr->dg_gamma, d->HV);
    zero(gr->dlambda, d->HV * K);

    for (int64_t n = 0; n < n_seq && rc == LACS_OK; n++) {
        for (int64_t hv = 0; hv < d->HV && rc == LACS_OK; hv++) {
            int64_t b, bos;
            const int64_t len = gather_head(d, in, n, hv, &buf, &b, &bos);
            const int64_t h = hv / group;
            for (int64_t t = 0; t < len; t++)
                for (int64_t c = 0; c < V; c++)
                    g.dout[t * V + c] = ct->dout[v_index(d, b, bos + t, hv) + c];
            load_state(d, state, n, hv, in->h0, in->h0_kk, buf.h);
            load_state(d, state, n, hv, ct->dht, ct->dht_kk, g.dh);
            zero(g.dq, len * K);
            zero(g.dk, len * K);
            zero(g.dv, len * V);
            zero(g.dbeta, len);
            zero(g.dlog, len * K);
            zero(g.dw, len * K);
            zero(g.dlambda, K);
            const sequence_head s = {
                .T = len, .K = K, .V = V,
                .scale = in->scale, .eps = in->eps,
                .g_gamma = in->g_gamma ? in->g_gamma[hv] : 0,
                .q = buf.q, .k = buf.k, .v = buf.v,
                .beta = buf.beta, .g = buf.g, .gk = buf.gk,
                .w = buf.w, .lambda = buf.lambda,
            };
            head_grads hg = {g.dq, g.dk, g.dv, g.dbeta, g.dlog, g.dw, g.dlambda};
            rc = kernel(&s, buf.h, g.dout, g.dh, &hg);
            if (rc != LACS_OK && rc != LACS_ERR_MEMORY)
                locate_error(op, rc, n, hv);
            for (int64_t t = 0; t < len && rc == LACS_OK; t++) {
                const int64_t qk = qk_index(d, b, bos + t, h), gate = gate_index(d, b, bos + t, hv);
                real dg_t = 0;
                for (int64_t c = 0; c < K; c++) {
                    if (gr->dq)
                        gr->dq[qk + c] += g.dq[t * K + c]; /* the G value heads of q/k head h, summed */
                    if (gr->dk)
                        gr->dk[qk + c] += g.dk[t * K + c];
                    if (gr->dw)
                        gr->dw[qk + c] += g.dw[t * K + c];
                    if (gr->dgk)
                        gr->dgk[gate * K + c] = g.dlog[t * K + c];
                    dg_t += g.dlog[t * K + c];
                }
                for (int64_t c = 0; c < V && gr->dv; c++)
                    gr->dv[v_index(d, b, bos + t, hv) + c] = g.dv[t * V + c];
                if (gr->dbeta)
                    gr->dbeta[gate] = g.dbeta[t];
                if (gr->dg)
                    gr->dg[gate] = dg_t;
                if (gr->dg_gamma)
                    gr->dg_gamma[hv] += dg_t;
            }
            for (int64_t c = 0; c < K && gr->dlambda && rc == LACS_OK; c++)
                gr->dlambda[hv * K + c] += g.dlambda[c];
            if (gr->dh0 && rc == LACS_OK)
                memcpy(gr->dh0 + (n * d->HV + hv) * K * V, g.dh, (size_t)(K * V) * sizeof(real));
            if (gr->dh0_kk && rc == LACS_OK)
                memcpy(gr->dh0_kk + (n * d->HV + hv) * K * K, g.dh + K * V, (size_t)(K * K) * sizeof(real));
        }
    }
    free_buffers(&buf);
    free_vjp_buffers(&g);
    if (rc == LACS_ERR_MEMORY)
        return lacs_internal_error(rc, op, "out of memory in the kernel");
    return rc;
}

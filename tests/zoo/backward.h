/* What the backward members of the zoo share (tests/zoo/backward_f32.c,
 * backward_chunked.c): the plugin ABI's tensors of a VJP of an op on
 * sequences (SPEC.md 4.19) read into float arrays, the per-(sequence, value
 * head) driver that gathers them and scatters the gradients, bf16 rounding,
 * the multiply-add of the _fma builds, and the bug switch.
 *
 * Standalone like every zoo plugin (libc and libm only): a second reading of
 * SPEC.md 2 and 4.19. Layout: q, k, w [B, T, H, K]; v, do [B, T, HV, V];
 * beta, g [B, T, HV]; gk [B, T, HV, K]; g_gamma [HV]; h0, dht [N, HV, K, V].
 * Value head hv reads q/k/w head hv / G; its dq, dk, dw are added there.
 */
#ifndef LACS_ZOO_BACKWARD_H
#define LACS_ZOO_BACKWARD_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/plugin.h"

enum { BW_ERR_INPUT = 2, BW_ERR_MEMORY = 3 };

static inline float bw_madd(float a, float b, float c)
{
#if defined(ZOO_FMA) && ZOO_FMA
    return fmaf(a, b, c);
#else
    return a * b + c;
#endif
}

/* x rounded to bfloat16 (nearest, ties to even), widened back; NaN stays NaN. */
static inline float bw_bf16(float x)
{
    if (isnan(x))
        return x;
    uint32_t bits;
    memcpy(&bits, &x, 4);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    bits &= 0xffff0000u;
    memcpy(&x, &bits, 4);
    return x;
}

/* The bug named by LACS_ZOO_BUG (unset or "none": no bug). */
static inline int bw_bug(const char *name)
{
    const char *b = getenv("LACS_ZOO_BUG");
    return b && strcmp(b, name) == 0;
}

static inline const lacs_tensor *bw_find(const lacs_tensor *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (t[i].name && strcmp(t[i].name, name) == 0)
            return &t[i];
    return NULL;
}

static inline int64_t bw_count(const lacs_tensor *t)
{
    int64_t c = 1;
    for (int i = 0; i < t->ndim; i++)
        c *= t->shape[i];
    return c;
}

/* A float input as floats (F32, BF16 widened, F64 rounded), NULL if absent. */
static inline float *bw_floats(const lacs_tensor *t)
{
    if (!t)
        return NULL;
    const int64_t n = bw_count(t);
    float *x = malloc((size_t)(n + 1) * sizeof *x);
    for (int64_t i = 0; x && i < n; i++) {
        if (t->dtype == LACS_F32) {
            memcpy(&x[i], (const char *)t->data + 4 * i, 4);
        } else if (t->dtype == LACS_BF16) {
            uint16_t top;
            memcpy(&top, (const char *)t->data + 2 * i, 2);
            const uint32_t bits = (uint32_t)top << 16;
            memcpy(&x[i], &bits, 4);
        } else {
            double d;
            memcpy(&d, (const char *)t->data + 8 * i, 8);
            x[i] = (float)d;
        }
    }
    return x;
}

/* One VJP call's inputs as floats (NULL where absent), sizes and parameters. */
typedef struct {
    const char *op; /* without "_vjp" */
    int64_t B, T, H, HV, K, V, N;
    const int64_t *cu;
    float *q, *k, *v, *w, *beta, *g, *gk, *g_gamma, *h0, *dout, *dht;
    float scale;
    int form; /* DeltaFormer's */
    int bf16; /* the tier: q stored as BF16 */
} bw_problem;

static inline void bw_free(bw_problem *p)
{
    float *all[] = {p->q, p->k, p->v, p->w, p->beta, p->g, p->gk, p->g_gamma, p->h0, p->dout, p->dht};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

static inline double bw_param(const lacs_param *p, int n, const char *name, double fallback)
{
    for (int i = 0; i < n; i++)
        if (p[i].name && strcmp(p[i].name, name) == 0)
            return p[i].value;
    return fallback;
}

/* Reads the call; returns 0, LACS_UNSUPPORTED for an op not ending in _vjp,
 * or an error with a line on stderr. */
static inline int bw_load(const char *member, const char *op, const lacs_tensor *in, int n_in,
                          const lacs_param *params, int n_params, bw_problem *p)
{
    memset(p, 0, sizeof *p);
    static char forward[64];
    const size_t len = strlen(op);
    if (len < 5 || strcmp(op + len - 4, "_vjp") != 0 || len - 4 >= sizeof forward)
        return LACS_UNSUPPORTED;
    snprintf(forward, sizeof forward, "%.*s", (int)(len - 4), op);
    p->op = forward;
    const lacs_tensor *q = bw_find(in, n_in, "q"), *v = bw_find(in, n_in, "v"), *d = bw_find(in, n_in, "do");
    if (!q && !d)
        return LACS_UNSUPPORTED; /* not an op on sequences (a norm's VJP reads x, dy) */
    if (!q || !v || !d || !bw_find(in, n_in, "k") || q->ndim != 4 || v->ndim != 4) {
        fprintf(stderr, "%s: %s: q, k, v [B, T, ., .] and do are required\n", member, op);
        return BW_ERR_INPUT;
    }
    p->B = q->shape[0], p->T = q->shape[1], p->H = q->shape[2], p->K = q->shape[3];
    p->HV = v->shape[2], p->V = v->shape[3];
    p->N = p->B;
    const lacs_tensor *cu = bw_find(in, n_in, "cu_seqlens");
    if (cu) {
        p->cu = cu->data;
        p->N = cu->shape[0] - 1;
    }
    p->bf16 = q->dtype == LACS_BF16;
    p->q = bw_floats(q);
    p->k = bw_floats(bw_find(in, n_in, "k"));
    p->v = bw_floats(v);
    p->dout = bw_floats(d);
    p->w = bw_floats(bw_find(in, n_in, "w"));
    p->beta = bw_floats(bw_find(in, n_in, "beta"));
    p->g = bw_floats(bw_find(in, n_in, "g"));
    p->gk = bw_floats(bw_find(in, n_in, "gk"));
    p->g_gamma = bw_floats(bw_find(in, n_in, "g_gamma"));
    p->h0 = bw_floats(bw_find(in, n_in, "h0"));
    p->dht = bw_floats(bw_find(in, n_in, "dht"));
    p->scale = (float)bw_param(params, n_params, "scale", 1 / sqrt((double)p->K));
    p->form = (int)bw_param(params, n_params, "form", 1);
    if (!p->q || !p->k || !p->v || !p->dout) {
        bw_free(p);
        fprintf(stderr, "%s: %s: out of memory\n", member, op);
        return BW_ERR_MEMORY;
    }
    return 0;
}

/* One (sequence, value head): inputs gathered, gradients out. gate [T][K]:
 * the log decay of each state row (scalar g and g_gamma broadcast; zeros
 * without a decay), NULL for the attention forms without a gate. */
typedef struct {
    int64_t T, K, V;
    const float *q, *k, *v, *w, *beta, *gate, *dout;
    const float *h0, *dht; /* [K][V], zeros where absent */
    float scale;
    int form, bf16, scalar_gate; /* scalar_gate: one gate per token (g, g_gamma), read from gate[t][0] */
} bw_head;

typedef struct {
    float *dq, *dk, *dv, *dw, *dbeta, *dlog, *dh0; /* [T][K], [T][K], [T][V], [T][K], [T], [T][K], [K][V] */
} bw_grads;

typedef int (*bw_kernel)(const bw_head *s, bw_grads *g, void *context);

static inline float *bw_output(lacs_tensor *out, int n_out, const char *name)
{
    for (int i = 0; i < n_out; i++)
        if (out[i].name && strcmp(out[i].name, name) == 0 && out[i].dtype == LACS_F32)
            return out[i].data;
    return NULL;
}

/* Gathers each (sequence, value head), runs `kernel`, scatters: dq, dk, dw
 * summed over the value heads of a q/k head (overwritten, not summed, with
 * bug vjp_group_not_reduced); dv, dbeta, dg, dgk written; dg_gamma summed;
 * dh0 written. Sequences run last to first within a value head; with bug
 * varlen_backward_no_reset the cotangent a sequence ends with (its dh0) is
 * added to the dht of the sequence before it. */
static inline int bw_run(const char *member, const bw_problem *p, lacs_tensor *out, int n_out, bw_kernel kernel,
                         void *context)
{
    const int64_t K = p->K, V = p->V, T = p->T, G = p->HV / p->H;
    float *dq = bw_output(out, n_out, "dq"), *dk = bw_output(out, n_out, "dk"), *dv = bw_output(out, n_out, "dv");
    float *dw = bw_output(out, n_out, "dw"), *dbeta = bw_output(out, n_out, "dbeta");
    float *dg = bw_output(out, n_out, "dg"), *dgk = bw_output(out, n_out, "dgk");
    float *dgg = bw_output(out, n_out, "dg_gamma"), *dh0 = bw_output(out, n_out, "dh0");
    if (!dq || !dk || !dv) {
        fprintf(stderr, "%s: %s_vjp: outputs dq, dk, dv (F32) are required\n", member, p->op);
        return BW_ERR_INPUT;
    }
    memset(dq, 0, (size_t)(p->B * T * p->H * K) * sizeof(float));
    memset(dk, 0, (size_t)(p->B * T * p->H * K) * sizeof(float));
    if (dw)
        memset(dw, 0, (size_t)(p->B * T * p->H * K) * sizeof(float));
    if (dgg)
        memset(dgg, 0, (size_t)p->HV * sizeof(float));
    const size_t tk = (size_t)(T * K + 1), tv = (size_t)(T * V + 1), kv = (size_t)(K * V + 1);
    float *q = malloc(tk * 4), *k = malloc(tk * 4), *w = malloc(tk * 4), *v = malloc(tv * 4), *d = malloc(tv * 4);
    float *beta = malloc((size_t)(T + 1) * 4), *gate = malloc(tk * 4), *h0 = malloc(kv * 4), *dht = malloc(kv * 4);
    float *carry = calloc(kv, 4);
    bw_grads g = {malloc(tk * 4), malloc(tk * 4), malloc(tv * 4), malloc(tk * 4), malloc((size_t)(T + 1) * 4),
                  malloc(tk * 4), malloc(kv * 4)};
    int rc = q && k && w && v && d && beta && gate && h0 && dht && carry && g.dq && g.dk && g.dv && g.dw && g.dbeta &&
                     g.dlog && g.dh0
                 ? 0
                 : BW_ERR_MEMORY;
    const int has_gate = p->g || p->gk || p->g_gamma;
    for (int64_t hv = 0; hv < p->HV && rc == 0; hv++) {
        memset(carry, 0, kv * 4);
        for (int64_t n = p->N - 1; n >= 0 && rc == 0; n--) {
            const int64_t b = p->cu ? 0 : n, bos = p->cu ? p->cu[n] : 0;
            const int64_t len = p->cu ? p->cu[n + 1] - bos : T, hq = hv / G;
            for (int64_t t = 0; t < len; t++) {
                const int64_t row = b * T + bos + t;
                memcpy(q + t * K, p->q + (row * p->H + hq) * K, (size_t)K * 4);
                memcpy(k + t * K, p->k + (row * p->H + hq) * K, (size_t)K * 4);
                if (p->w)
                    memcpy(w + t * K, p->w + (row * p->H + hq) * K, (size_t)K * 4);
                memcpy(v + t * V, p->v + (row * p->HV + hv) * V, (size_t)V * 4);
                memcpy(d + t * V, p->dout + (row * p->HV + hv) * V, (size_t)V * 4);
                beta[t] = p->beta ? p->beta[row * p->HV + hv] : 1;
                for (int64_t c = 0; c < K; c++)
                    gate[t * K + c] = p->gk ? p->gk[(row * p->HV + hv) * K + c]
                                      : p->g ? p->g[row * p->HV + hv]
                                      : p->g_gamma ? p->g_gamma[hv] : 0;
            }
            for (int64_t i = 0; i < K * V; i++) {
                h0[i] = p->h0 ? p->h0[(n * p->HV + hv) * K * V + i] : 0;
                dht[i] = (p->dht ? p->dht[(n * p->HV + hv) * K * V + i] : 0) + carry[i];
            }
            memset(g.dq, 0, tk * 4);
            memset(g.dk, 0, tk * 4);
            memset(g.dw, 0, tk * 4);
            memset(g.dv, 0, tv * 4);
            memset(g.dbeta, 0, (size_t)(T + 1) * 4);
            memset(g.dlog, 0, tk * 4);
            memset(g.dh0, 0, kv * 4);
            const bw_head s = {.T = len, .K = K, .V = V, .q = q, .k = k, .v = v, .w = p->w ? w : NULL,
                               .beta = p->beta ? beta : NULL, .gate = has_gate ? gate : NULL, .dout = d, .h0 = h0,
                               .dht = dht, .scale = p->scale, .form = p->form, .bf16 = p->bf16,
                               .scalar_gate = p->g || p->g_gamma};
            rc = kernel(&s, &g, context);
            if (bw_bug("varlen_backward_no_reset") && p->cu)
                memcpy(carry, g.dh0, (size_t)(K * V) * 4); /* handed on to the sequence before */
            for (int64_t t = 0; t < len && rc == 0; t++) {
                const int64_t row = b * T + bos + t;
                float sum = 0;
                for (int64_t c = 0; c < K; c++) {
                    const int64_t at = (row * p->H + hq) * K + c;
                    if (bw_bug("vjp_group_not_reduced")) {
                        dq[at] = g.dq[t * K + c];
                        dk[at] = g.dk[t * K + c];
                    } else {
                        dq[at] += g.dq[t * K + c];
                        dk[at] += g.dk[t * K + c];
                    }
                    if (dw)
                        dw[at] += g.dw[t * K + c];
                    if (dgk)
                        dgk[(row * p->HV + hv) * K + c] = g.dlog[t * K + c];
                    sum += g.dlog[t * K + c];
                }
                memcpy(dv + (row * p->HV + hv) * V, g.dv + t * V, (size_t)V * 4);
                if (dbeta)
                    dbeta[row * p->HV + hv] = g.dbeta[t];
                if (dg)
                    dg[row * p->HV + hv] = sum;
                if (dgg)
                    dgg[hv] += sum;
            }
            if (dh0 && rc == 0)
                memcpy(dh0 + (n * p->HV + hv) * K * V, g.dh0, (size_t)(K * V) * 4);
        }
    }
    free(q), free(k), free(w), free(v), free(d), free(beta), free(gate), free(h0), free(dht), free(carry);
    free(g.dq), free(g.dk), free(g.dv), free(g.dw), free(g.dbeta), free(g.dlog), free(g.dh0);
    if (rc == BW_ERR_MEMORY)
        fprintf(stderr, "%s: out of memory\n", member);
    return rc;
}

#endif

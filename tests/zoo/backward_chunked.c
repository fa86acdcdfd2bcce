/* fla's chunked backward, for the zoo (SPEC.md 4.19, 11.6): the recurrent
 * family chunk by chunk (chunks of LACS_ZOO_CHUNK tokens, default 64), the
 * attention forms block by block (FlashAttention's backward), in binary32,
 * and in the bf16 tier with fla's bf16 intermediates. Built with -DZOO_FMA=1
 * as backward_chunked_fma.
 *
 * The recurrent family, per chunk of n tokens from the state S it starts with
 * (recomputed by a forward pass over the chunks, as fla's backward does),
 * G_t the chunk-local prefix sums of the log decay in binary32 (fla's
 * chunk_local_cumsum), E_t the decay the correction reads (G_t; Comba G_{t-1}):
 *   P_tj = sum_c q_tc k_jc e^{G_tc - G_jc} (j <= t),  L_tj = sum_c k_tc k_jc e^{E_tc - G_jc} (j < t)
 *   W = (I + diag(c) L)^{-1} diag(c) Kp,  U0 = (I + diag(c) L)^{-1} diag(c) V   (WY/UT: fla's w, u)
 *   U = U0 - W S  (fla's v_new),  S' = e^{G_n} S + Kn^T U
 * and the adjoint of those products given dO and the next chunk's dS':
 *   dU = scale P^T dO + Kn dS',  Y = (I + diag(c) L)^{-T} dU, then dq, dk, dv,
 *   dc and the gate's local terms dG_t, whose reverse cumulative sum within
 *   the chunk is dg (fla's chunk_local_cumsum(reverse=True));
 *   dS = scale Qp^T dO + e^{G_n} dS' - Kp^T diag(c) Y for the chunk before.
 * bf16 tier: the chunk states S and dS, W, U0 and U stored in bf16 between
 * the stages, and the gradients of the bf16 inputs stored in bf16.
 *
 * Attention (softmax_attn, fox): the forward's log-sum-exp per row, then per
 * block of keys and block of queries P = exp(l - lse), dS = P (dP - D) with
 * D_i = do_i . o_i, dv += P^T dO, dk += scale dS^T Q, dq += scale dS K; FoX's
 * dg the reverse cumulative sum of dS's row sums less its column sums. bf16
 * tier: P and dS in bf16 for the products, as FlashAttention 2. PaTH and
 * DeltaFormer: LACS_UNSUPPORTED (backward_f32 and the binary32 reference
 * cover them).
 *
 * Bugs (LACS_ZOO_BUG): gate_no_cumsum (dg is the local term dG_t),
 * chunk_boundary_dropped (the next chunk's dS' not applied to this chunk's
 * writes: dU and dk without their Kn dS' terms). */
#include "backward.h"

static const char member[] = "backward_chunked";

typedef struct {
    int64_t chunk;
} config;

static float round_if(int bf16, float x) { return bf16 ? bw_bf16(x) : x; }

/* ---- the recurrent family ---- */

enum { LINEAR = 0, DELTA = 1, COMBA = 2, EFLA = 3 };

static float efla_c(float beta, float n, float *dc_dbeta, float *dc_dn)
{
    const float x = beta * n;
    const float phi = fabsf(x) < 1e-4f ? 1 - x / 2 + x * x / 6 : -expm1f(-x) / x;
    float dphi = 0;
    if (fabsf(x) < 0.5f) {
        float f = 1;
        float coef[13];
        for (int m = 1; m <= 12; m++) {
            f *= (float)(m + 1);
            coef[m] = (m % 2 ? -(float)m : (float)m) / f;
        }
        for (int m = 12; m >= 1; m--)
            dphi = dphi * x + coef[m];
    } else {
        dphi = (expf(-x) + expm1f(-x) / x) / x;
    }
    *dc_dbeta = expf(-x);
    *dc_dn = beta * beta * dphi;
    return beta * phi;
}

typedef struct {
    int kind;
    int64_t chunk;
} recurrent_ctx;

/* The work of one chunk: n tokens from t0, the state S [K][V] it starts from. */
typedef struct {
    int64_t n, K, V;
    float *G, *E, *Lm, *W, *U0, *U, *Y, *c, *dcb, *dcn;
} chunk_work;

static void chunk_prepare(const bw_head *s, int kind, int64_t t0, const float *S, chunk_work *w)
{
    const int64_t n = w->n, K = w->K, V = w->V;
    const float *k = s->k + t0 * K, *v = s->v + t0 * V;
    for (int64_t t = 0; t < n; t++)
        for (int64_t c = 0; c < K; c++) {
            const float gate = s->gate ? s->gate[(t0 + t) * K + c] : 0;
            w->G[t * K + c] = (t ? w->G[(t - 1) * K + c] : 0) + gate;
            w->E[t * K + c] = kind == COMBA ? (t ? w->G[(t - 1) * K + c] : 0) : w->G[t * K + c];
        }
    for (int64_t t = 0; t < n; t++) {
        w->c[t] = kind == LINEAR ? 1 : s->beta[t0 + t];
        w->dcb[t] = 1, w->dcn[t] = 0;
        if (kind == EFLA) {
            float nn = 0;
            for (int64_t c = 0; c < K; c++)
                nn = bw_madd(k[t * K + c], k[t * K + c], nn);
            w->c[t] = efla_c(s->beta[t0 + t], nn, &w->dcb[t], &w->dcn[t]);
        }
    }
    if (kind == LINEAR) {
        for (int64_t i = 0; i < n * V; i++)
            w->U[i] = v[i];
        return;
    }
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < t; j++) {
            float sum = 0;
            for (int64_t c = 0; c < K; c++)
                sum = bw_madd(k[t * K + c] * k[j * K + c], expf(w->E[t * K + c] - w->G[j * K + c]), sum);
            w->Lm[t * n + j] = sum;
        }
    /* (I + diag(c) L) [W | U0] = diag(c) [Kp | V] by forward substitution */
    for (int64_t t = 0; t < n; t++) {
        for (int64_t c = 0; c < K; c++) {
            float x = w->c[t] * (k[t * K + c] * expf(w->E[t * K + c]));
            for (int64_t j = 0; j < t; j++)
                x = bw_madd(-w->c[t] * w->Lm[t * n + j], w->W[j * K + c], x);
            w->W[t * K + c] = x;
        }
        for (int64_t c = 0; c < V; c++) {
            float x = w->c[t] * v[t * V + c];
            for (int64_t j = 0; j < t; j++)
                x = bw_madd(-w->c[t] * w->Lm[t * n + j], w->U0[j * V + c], x);
            w->U0[t * V + c] = x;
        }
    }
    for (int64_t i = 0; i < n * K; i++)
        w->W[i] = round_if(s->bf16, w->W[i]);
    for (int64_t i = 0; i < n * V; i++)
        w->U0[i] = round_if(s->bf16, w->U0[i]);
    for (int64_t t = 0; t < n; t++) /* v_new = u - w S */
        for (int64_t c = 0; c < V; c++) {
            float x = w->U0[t * V + c];
            for (int64_t r = 0; r < K; r++)
                x = bw_madd(-w->W[t * K + r], S[r * V + c], x);
            w->U[t * V + c] = round_if(s->bf16, x);
        }
}

static int recurrent(const bw_head *s, bw_grads *g, void *context)
{
    const recurrent_ctx *ctx = context;
    const int kind = ctx->kind;
    const int64_t T = s->T, K = s->K, V = s->V, C = ctx->chunk;
    const int64_t n_chunks = (T + C - 1) / C;
    const int bug_boundary = bw_bug("chunk_boundary_dropped");
    float *states = malloc((size_t)((n_chunks + 1) * K * V + 1) * 4), *dS = malloc((size_t)(K * V) * 4);
    float *dSn = malloc((size_t)(K * V) * 4), *dG = malloc((size_t)(C * K + 1) * 4);
    float *dU = malloc((size_t)(C * V + 1) * 4), *dKp = malloc((size_t)(C * K + 1) * 4);
    chunk_work w = {.K = K, .V = V};
    w.G = malloc((size_t)(C * K + 1) * 4), w.E = malloc((size_t)(C * K + 1) * 4), w.Lm = calloc((size_t)(C * C + 1), 4);
    w.W = malloc((size_t)(C * K + 1) * 4), w.U0 = malloc((size_t)(C * V + 1) * 4), w.U = malloc((size_t)(C * V + 1) * 4);
    w.Y = malloc((size_t)(C * V + 1) * 4);
    w.c = malloc((size_t)(C + 1) * 4), w.dcb = malloc((size_t)(C + 1) * 4), w.dcn = malloc((size_t)(C + 1) * 4);
    int rc = states && dS && dSn && dG && dU && dKp && w.G && w.E && w.Lm && w.W && w.U0 && w.U && w.Y && w.c &&
                     w.dcb && w.dcn
                 ? 0
                 : BW_ERR_MEMORY;
    /* the forward: each chunk's first state, stored in bf16 in the bf16 tier */
    for (int64_t i = 0; rc == 0 && i < K * V; i++)
        states[i] = round_if(s->bf16, s->h0[i]);
    for (int64_t ci = 0; rc == 0 && ci < n_chunks; ci++) {
        const int64_t t0 = ci * C;
        w.n = T - t0 < C ? T - t0 : C;
        const float *S = states + ci * K * V;
        float *next = states + (ci + 1) * K * V;
        chunk_prepare(s, kind, t0, S, &w);
        const float *last = w.G + (w.n - 1) * K;
        for (int64_t r = 0; r < K; r++)
            for (int64_t c = 0; c < V; c++) {
                float x = expf(last[r]) * S[r * V + c];
                for (int64_t j = 0; j < w.n; j++)
                    x = bw_madd(expf(last[r] - w.G[j * K + r]) * s->k[(t0 + j) * K + r], w.U[j * V + c], x);
                next[r * V + c] = round_if(s->bf16, x);
            }
    }
    for (int64_t i = 0; rc == 0 && i < K * V; i++)
        dSn[i] = dS[i] = s->dht[i]; /* an empty sequence's dh0 is its dht */
    for (int64_t ci = n_chunks - 1; rc == 0 && ci >= 0; ci--) {
        const int64_t t0 = ci * C, n = T - t0 < C ? T - t0 : C;
        w.n = n;
        const float *S = states + ci * K * V;
        chunk_prepare(s, kind, t0, S, &w);
        const float *q = s->q + t0 * K, *k = s->k + t0 * K, *v = s->v + t0 * V, *d = s->dout + t0 * V;
        const float *G = w.G, *E = w.E, *Gn = w.G + (n - 1) * K;
        float *dq = g->dq + t0 * K, *dk = g->dk + t0 * K, *dv = g->dv + t0 * V;
        for (int64_t i = 0; i < n * K; i++)
            dG[i] = 0;
        /* dU = scale P^T dO + Kn dS';  dS = scale Qp^T dO + e^{G_n} dS' */
        for (int64_t j = 0; j < n; j++)
            for (int64_t c = 0; c < V; c++) {
                float x = 0;
                for (int64_t t = j; t < n; t++) {
                    float p = 0;
                    for (int64_t r = 0; r < K; r++)
                        p = bw_madd(q[t * K + r] * k[j * K + r], expf(G[t * K + r] - G[j * K + r]), p);
                    x = bw_madd(s->scale * p, d[t * V + c], x);
                }
                for (int64_t r = 0; r < K && !bug_boundary; r++)
                    x = bw_madd(expf(Gn[r] - G[j * K + r]) * k[j * K + r], dSn[r * V + c], x);
                dU[j * V + c] = x;
            }
        for (int64_t r = 0; r < K; r++)
            for (int64_t c = 0; c < V; c++) {
                float x = expf(Gn[r]) * dSn[r * V + c];
                for (int64_t t = 0; t < n; t++)
                    x = bw_madd(s->scale * expf(G[t * K + r]) * q[t * K + r], d[t * V + c], x);
                dS[r * V + c] = x;
            }
        /* the gate's boundary terms: e^{G_n} S and Kn */
        for (int64_t r = 0; r < K; r++) {
            float x = 0;
            for (int64_t c = 0; c < V; c++)
                x = bw_madd(dSn[r * V + c] * expf(Gn[r]), S[r * V + c], x);
            dG[(n - 1) * K + r] += x;
        }
        for (int64_t j = 0; j < n && !bug_boundary; j++)
            for (int64_t r = 0; r < K; r++) {
                float dkn = 0; /* (dS' u_j)_r */
                for (int64_t c = 0; c < V; c++)
                    dkn = bw_madd(dSn[r * V + c], w.U[j * V + c], dkn);
                const float kn = expf(Gn[r] - G[j * K + r]) * k[j * K + r];
                dk[j * K + r] = bw_madd(expf(Gn[r] - G[j * K + r]), dkn, dk[j * K + r]);
                dG[j * K + r] -= kn * dkn;
                dG[(n - 1) * K + r] += kn * dkn;
            }
        /* P's pairs: dP_tj = scale dO_t . U_j */
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j <= t; j++) {
                float du = 0;
                for (int64_t c = 0; c < V; c++)
                    du = bw_madd(d[t * V + c], w.U[j * V + c], du);
                const float dP = s->scale * du;
                for (int64_t r = 0; r < K; r++) {
                    const float gam = expf(G[t * K + r] - G[j * K + r]);
                    dq[t * K + r] = bw_madd(dP * gam, k[j * K + r], dq[t * K + r]);
                    dk[j * K + r] = bw_madd(dP * gam, q[t * K + r], dk[j * K + r]);
                    const float pair = dP * q[t * K + r] * k[j * K + r] * gam;
                    dG[t * K + r] += pair;
                    dG[j * K + r] -= pair;
                }
            }
        /* Qp: dq_t += e^{G_t} scale S dO_t */
        for (int64_t t = 0; t < n; t++)
            for (int64_t r = 0; r < K; r++) {
                float x = 0;
                for (int64_t c = 0; c < V; c++)
                    x = bw_madd(S[r * V + c], d[t * V + c], x);
                const float dqp = s->scale * x;
                dq[t * K + r] = bw_madd(expf(G[t * K + r]), dqp, dq[t * K + r]);
                dG[t * K + r] += expf(G[t * K + r]) * q[t * K + r] * dqp;
            }
        if (kind == LINEAR) {
            for (int64_t i = 0; i < n * V; i++)
                dv[i] = dU[i];
        } else {
            /* Y = (I + diag(c) L)^{-T} dU, by back substitution */
            for (int64_t t = n - 1; t >= 0; t--)
                for (int64_t c = 0; c < V; c++) {
                    float x = dU[t * V + c];
                    for (int64_t i = t + 1; i < n; i++)
                        x = bw_madd(-w.c[i] * w.Lm[i * n + t], w.Y[i * V + c], x);
                    w.Y[t * V + c] = x;
                }
            /* R = V - Kp S; dR = diag(c) Y; dc_t = Y_t . R_t - sum_{j<t} L_tj Y_t . U_j */
            for (int64_t t = 0; t < n; t++) {
                float dc = 0;
                for (int64_t c = 0; c < V; c++) {
                    float kps = 0;
                    for (int64_t r = 0; r < K; r++)
                        kps = bw_madd(expf(E[t * K + r]) * k[t * K + r], S[r * V + c], kps);
                    dc = bw_madd(w.Y[t * V + c], v[t * V + c] - kps, dc);
                    dv[t * V + c] = w.c[t] * w.Y[t * V + c];
                }
                for (int64_t j = 0; j < t; j++) {
                    float yu = 0;
                    for (int64_t c = 0; c < V; c++)
                        yu = bw_madd(w.Y[t * V + c], w.U[j * V + c], yu);
                    dc = bw_madd(-w.Lm[t * n + j], yu, dc);
                    const float dL = -w.c[t] * yu;
                    for (int64_t r = 0; r < K; r++) {
                        const float ge = expf(E[t * K + r] - G[j * K + r]);
                        dk[t * K + r] = bw_madd(dL * ge, k[j * K + r], dk[t * K + r]);
                        dk[j * K + r] = bw_madd(dL * ge, k[t * K + r], dk[j * K + r]);
                        const float pair = dL * k[t * K + r] * k[j * K + r] * ge;
                        dG[(kind == COMBA ? t - 1 : t) * K + r] += kind == COMBA && t == 0 ? 0 : pair;
                        dG[j * K + r] -= pair;
                    }
                }
                g->dbeta[t0 + t] = dc * w.dcb[t];
                if (kind == EFLA)
                    for (int64_t r = 0; r < K; r++)
                        dk[t * K + r] = bw_madd(2 * k[t * K + r], dc * w.dcn[t], dk[t * K + r]);
            }
            /* dKp = -dR S^T: dk += e^{E} dKp; the correction's state: dS -= Kp^T dR */
            for (int64_t t = 0; t < n; t++)
                for (int64_t r = 0; r < K; r++) {
                    float x = 0;
                    for (int64_t c = 0; c < V; c++)
                        x = bw_madd(-dv[t * V + c], S[r * V + c], x);
                    dKp[t * K + r] = x;
                    const float e = expf(E[t * K + r]);
                    dk[t * K + r] = bw_madd(e, x, dk[t * K + r]);
                    if (!(kind == COMBA && t == 0))
                        dG[(kind == COMBA ? t - 1 : t) * K + r] += e * k[t * K + r] * x;
                }
            for (int64_t r = 0; r < K; r++)
                for (int64_t c = 0; c < V; c++) {
                    float x = dS[r * V + c];
                    for (int64_t t = 0; t < n; t++)
                        x = bw_madd(-expf(E[t * K + r]) * k[t * K + r], dv[t * V + c], x);
                    dS[r * V + c] = x;
                }
        }
        /* the gate: the reverse cumulative sum of the local terms within the chunk */
        float *dlog = g->dlog + t0 * K;
        for (int64_t r = 0; r < K; r++) {
            float run = 0;
            for (int64_t t = n - 1; t >= 0; t--) {
                run += dG[t * K + r];
                dlog[t * K + r] = bw_bug("gate_no_cumsum") ? dG[t * K + r] : run;
            }
        }
        for (int64_t i = 0; i < K * V; i++)
            dSn[i] = round_if(s->bf16, dS[i]);
    }
    for (int64_t i = 0; rc == 0 && i < K * V; i++)
        g->dh0[i] = dS[i];
    if (rc == 0 && s->bf16) { /* the gradients of bf16 inputs, stored in bf16 */
        for (int64_t i = 0; i < T * K; i++)
            g->dq[i] = bw_bf16(g->dq[i]), g->dk[i] = bw_bf16(g->dk[i]);
        for (int64_t i = 0; i < T * V; i++)
            g->dv[i] = bw_bf16(g->dv[i]);
        for (int64_t i = 0; i < T; i++)
            g->dbeta[i] = bw_bf16(g->dbeta[i]);
    }
    free(states), free(dS), free(dSn), free(dG), free(dU), free(dKp);
    free(w.G), free(w.E), free(w.Lm), free(w.W), free(w.U0), free(w.U), free(w.Y), free(w.c), free(w.dcb),
        free(w.dcn);
    return rc;
}

/* ---- softmax attention and FoX: FlashAttention's backward, block by block ---- */

static float dot(int64_t n, const float *a, const float *b)
{
    float x = 0;
    for (int64_t i = 0; i < n; i++)
        x = bw_madd(a[i], b[i], x);
    return x;
}

static int flash(const bw_head *s, bw_grads *g, void *context)
{
    const int64_t T = s->T, K = s->K, V = s->V, blk = ((const config *)context)->chunk;
    float *G = malloc((size_t)(T + 1) * 4), *lse = malloc((size_t)(T + 1) * 4), *o = malloc((size_t)(T * V + 1) * 4);
    float *D = malloc((size_t)(T + 1) * 4), *dG = calloc((size_t)(T + 1), 4);
    if (!G || !lse || !o || !D || !dG) {
        free(G), free(lse), free(o), free(D), free(dG);
        return BW_ERR_MEMORY;
    }
    float run = 0;
    for (int64_t t = 0; t < T; t++)
        G[t] = run = s->gate ? run + s->gate[t * K] : 0;
    for (int64_t i = 0; i < T; i++) { /* the forward, key block by key block */
        float m = -INFINITY, den = 0;
        for (int64_t c = 0; c < V; c++)
            o[i * V + c] = 0;
        for (int64_t j0 = 0; j0 <= i; j0 += blk) {
            const int64_t j1 = j0 + blk - 1 < i ? j0 + blk - 1 : i;
            float bm = -INFINITY;
            for (int64_t j = j0; j <= j1; j++)
                bm = fmaxf(bm, s->scale * dot(K, s->q + i * K, s->k + j * K) + (G[i] - G[j]));
            const float m_new = fmaxf(m, bm), shrink = expf(m - m_new);
            den *= shrink;
            for (int64_t c = 0; c < V; c++)
                o[i * V + c] *= shrink;
            for (int64_t j = j0; j <= j1; j++) {
                const float p = round_if(s->bf16, expf(s->scale * dot(K, s->q + i * K, s->k + j * K) + (G[i] - G[j]) - m_new));
                den += p;
                for (int64_t c = 0; c < V; c++)
                    o[i * V + c] = bw_madd(p, s->v[j * V + c], o[i * V + c]);
            }
            m = m_new;
        }
        for (int64_t c = 0; c < V; c++)
            o[i * V + c] = round_if(s->bf16, o[i * V + c] / den);
        lse[i] = m + logf(den);
        D[i] = dot(V, s->dout + i * V, o + i * V);
    }
    for (int64_t j0 = 0; j0 < T; j0 += blk) /* key blocks, then query blocks */
        for (int64_t i0 = j0 - j0 % blk; i0 < T; i0 += blk)
            for (int64_t j = j0; j < j0 + blk && j < T; j++)
                for (int64_t i = i0 > j ? i0 : j; i < i0 + blk && i < T; i++) {
                    const float l = s->scale * dot(K, s->q + i * K, s->k + j * K) + (G[i] - G[j]);
                    const float p = round_if(s->bf16, expf(l - lse[i]));
                    const float ds = round_if(s->bf16, p * (dot(V, s->dout + i * V, s->v + j * V) - D[i]));
                    for (int64_t c = 0; c < V; c++)
                        g->dv[j * V + c] = bw_madd(p, s->dout[i * V + c], g->dv[j * V + c]);
                    for (int64_t c = 0; c < K; c++) {
                        g->dk[j * K + c] = bw_madd(s->scale * ds, s->q[i * K + c], g->dk[j * K + c]);
                        g->dq[i * K + c] = bw_madd(s->scale * ds, s->k[j * K + c], g->dq[i * K + c]);
                    }
                    dG[i] += ds;
                    dG[j] -= ds;
                }
    run = 0;
    for (int64_t t = T - 1; t >= 0; t--) {
        run += dG[t];
        if (s->gate)
            g->dlog[t * K] = bw_bug("gate_no_cumsum") ? dG[t] : run;
    }
    if (s->bf16) {
        for (int64_t i = 0; i < T * K; i++)
            g->dq[i] = bw_bf16(g->dq[i]), g->dk[i] = bw_bf16(g->dk[i]);
        for (int64_t i = 0; i < T * V; i++)
            g->dv[i] = bw_bf16(g->dv[i]);
    }
    free(G), free(lse), free(o), free(D), free(dG);
    return 0;
}

/* ---- the plugin ---- */

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    const char *bug = getenv("LACS_ZOO_BUG");
    if (bug && *bug && strcmp(bug, "none") != 0 && strcmp(bug, "gate_no_cumsum") != 0 &&
        strcmp(bug, "chunk_boundary_dropped") != 0) {
        fprintf(stderr, "%s: unknown LACS_ZOO_BUG '%s'\n", member, bug);
        return BW_ERR_INPUT;
    }
    const char *text = getenv("LACS_ZOO_CHUNK");
    const long chunk = text && *text ? strtol(text, NULL, 10) : 64;
    if (chunk < 1 || chunk > 4096) {
        fprintf(stderr, "%s: LACS_ZOO_CHUNK = '%s' must be 1 .. 4096\n", member, text);
        return BW_ERR_INPUT;
    }
    bw_problem p;
    int rc = bw_load(member, op, inputs, n_inputs, params, n_params, &p);
    if (rc)
        return rc;
    static const struct {
        const char *op;
        int kind;
    } recurrent_ops[] = {
        {"linear_attn", LINEAR}, {"retention", LINEAR}, {"simple_gla", LINEAR}, {"gla", LINEAR},
        {"delta_rule", DELTA},   {"gated_delta_rule", DELTA}, {"comba", COMBA}, {"efla", EFLA},
    };
    rc = LACS_UNSUPPORTED;
    for (size_t i = 0; i < sizeof recurrent_ops / sizeof recurrent_ops[0]; i++)
        if (strcmp(recurrent_ops[i].op, p.op) == 0) {
            recurrent_ctx ctx = {recurrent_ops[i].kind, chunk};
            rc = bw_run(member, &p, outputs, n_outputs, recurrent, &ctx);
        }
    if (strcmp(p.op, "softmax_attn") == 0 || strcmp(p.op, "fox") == 0) {
        config ctx = {chunk};
        rc = bw_run(member, &p, outputs, n_outputs, flash, &ctx);
    }
    bw_free(&p);
    return rc;
}

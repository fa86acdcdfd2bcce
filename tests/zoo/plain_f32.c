/* plain_f32: straightforward fp32 implementations of the sequence ops (SPEC.md
 * 4.1-4.8, 4.10-4.13) as a zoo plugin (ABI v1, include/lacs/plugin.h), and,
 * selected by LACS_ZOO_BUG, the bug zoo for those ops (tests/zoo/plain_bugs.h,
 * catalogue in tests/zoo/BUGS.md).
 *
 * Without a bug this is a LEGITIMATE member of the zoo: every sum in float,
 * products rounded separately (build/zoo/plain_f32.so) or fused by fmaf()
 * (build/zoo/plain_f32_fma.so, -DZOO_FMA=1). Its loop order is the other one
 * from the reference's, whose kernels (reference/) walk the state row by row,
 * key channel c outside and value channel j inside: plain_f32 walks it column
 * by column, j outside and c inside, for the update and for the readout alike.
 * A column of h is everything one value channel needs, so each recurrent step
 * is one pass per column: decay, prediction h^T k, write, readout. The
 * attention forms have no state; they are written the plain way (component
 * softmax with the row maximum, PaTH's transitions carried forward key by key,
 * DeltaFormer's two stages one after the other).
 *
 * Layout (SPEC.md 2): q, k, w [B, T, H, K]; v, o [B, T, HV, V]; beta, g
 * [B, T, HV]; gk [B, T, HV, K]; g_gamma [HV]; h0, ht [N, HV, K, V]; lambda
 * [HV, K]; h0_kk, ht_kk [N, HV, K, K]. Value head hv reads q/k head
 * hv / (HV / H). With cu_seqlens (B = 1) the row holds N packed sequences,
 * each from its own h0[n]. The driver at the end of this file gathers one
 * (sequence, value head) into contiguous fp32 arrays and runs the op's kernel
 * on it; the kernels know nothing of the layout.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/plugin.h"
#include "plain_bugs.h"
#include "plain_tensors.h"

typedef enum {
    OP_LINEAR_ATTN,
    OP_LINEAR_ATTN_POSTNORM,
    OP_RETENTION,
    OP_SIMPLE_GLA,
    OP_GLA,
    OP_DELTA_RULE,
    OP_GATED_DELTA_RULE,
    OP_COMBA,
    OP_EFLA,
    OP_SOFTMAX_ATTN,
    OP_FOX,
    OP_DELTAFORMER,
    OP_PATH_ATTN,
    OP_MESA_NET
} op_kind;

/* One (sequence, value head): what a kernel reads and writes. */
typedef struct {
    op_kind op;
    plain_bug bug;
    const char *op_name;
    int64_t sequence, value_head; /* for messages */
    int64_t T, K, V;
    float scale, eps;
    int form;                     /* deltaformer: 0 exp, 1 softmax, 2 fla (SPEC 4.11) */
    int64_t split;                /* snapshot the state after this many tokens; -1: none */
    const float *q, *k, *w;       /* [T][K]: the q/k head this value head reads */
    const float *v;               /* [T][V] */
    const float *beta, *g;        /* [T], or NULL */
    const float *gk;              /* [T][K], or NULL */
    const float *g_gamma;         /* this head's constant log decay, or NULL */
    const float *lambda;          /* [K] (mesa_net) */
    float *o;                     /* [T][V] */
    float *h;                     /* [K][V]: the initial state in, the final state out */
    float *h_kk;                  /* [K][K] (mesa_net), or NULL */
    float *h_split, *h_kk_split;  /* the states after `split` tokens, or NULL */
    float *decay;                 /* [K] scratch: the current token's decay factor per key channel */
} head;

/* ---------------------------------------------------------------------------
 * Helpers shared by the recurrent kernels.
 * ------------------------------------------------------------------------- */

static float dot(int64_t n, const float *x, const float *y)
{
    float sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum = mul_add(x[i], y[i], sum);
    return sum;
}

/* sum_c h[c][j] x[c]: column j of h^T x. */
static float column_dot(const head *s, int64_t j, const float *x)
{
    float sum = 0;
    for (int64_t c = 0; c < s->K; c++)
        sum = mul_add(s->h[c * s->V + j], x[c], sum);
    return sum;
}

/* o_t[j] = scale (h^T q_t)[j] (SPEC 2.3). */
static void read_column(head *s, int64_t t, int64_t j)
{
    s->o[t * s->V + j] = s->scale * column_dot(s, j, s->q + t * s->K);
}

/* Which rows of o are read once token t's update is done: o_t, since every op
 * reads out after its update (SPEC 2.3); none when the readout came before it
 * (readout_before_update); with causal_leak o_{t-1}, which then sees token t,
 * and at the last token o_t too. Returns the count written to rows[]. */
static int rows_read_after_update(const head *s, int64_t t, int64_t rows[2])
{
    if (s->bug == BUG_READOUT_BEFORE_UPDATE)
        return 0;
    if (s->bug != BUG_CAUSAL_LEAK) {
        rows[0] = t;
        return 1;
    }
    int n = 0;
    if (t > 0)
        rows[n++] = t - 1;
    if (t == s->T - 1)
        rows[n++] = t;
    return n;
}

/* The end of column j's update at token t: the readout of that column. */
static void finish_column(head *s, int64_t t, int64_t j)
{
    if (s->bug == BUG_BF16_STATE_EVERY_STEP) /* a bf16 state buffer, stored after every step */
        for (int64_t c = 0; c < s->K; c++)
            s->h[c * s->V + j] = round_to_bf16(s->h[c * s->V + j]);
    int64_t rows[2];
    const int n = rows_read_after_update(s, t, rows);
    for (int i = 0; i < n; i++)
        read_column(s, rows[i], j);
}

/* Before token t. A chunked kernel that does not hand its state on to the next
 * chunk (chunk_state_dropped) starts every 64-token chunk from zero. */
static void begin_token(head *s, int64_t t)
{
    if (s->bug == BUG_CHUNK_STATE_DROPPED && t > 0 && t % 64 == 0) {
        memset(s->h, 0, (size_t)(s->K * s->V) * sizeof *s->h);
        if (s->h_kk)
            memset(s->h_kk, 0, (size_t)(s->K * s->K) * sizeof *s->h_kk);
    }
}

/* After token t: the state-carry snapshot (expected.ht_split, SPEC 10.5). */
static void end_token(head *s, int64_t t)
{
    if (s->h_split && t + 1 == s->split)
        memcpy(s->h_split, s->h, (size_t)(s->K * s->V) * sizeof *s->h);
    if (s->h_kk_split && t + 1 == s->split)
        memcpy(s->h_kk_split, s->h_kk, (size_t)(s->K * s->K) * sizeof *s->h_kk);
}

/* Token t's decay factors alpha_c = exp(log decay) into s->decay (SPEC 2.4:
 * decays are natural logs; g_gamma, g or gk, whichever the op was given;
 * exactly 1 without a decay input). */
static void token_decays(head *s, int64_t t)
{
    const int has_decay = s->g_gamma || s->g || s->gk;
    for (int64_t c = 0; c < s->K; c++) {
        if (!has_decay) {
            s->decay[c] = 1;
            continue;
        }
        const float log_decay = s->gk ? s->gk[t * s->K + c] : s->g ? s->g[t] : *s->g_gamma;
        if (s->bug == BUG_LOG2_GATES)
            s->decay[c] = exp2f(log_decay);
        else if (s->bug == BUG_G_AS_FACTOR)
            s->decay[c] = log_decay;
        else
            s->decay[c] = plain_expf(log_decay);
        if (s->bug == BUG_H0_DECAY_SKIPPED && t == 0)
            s->decay[c] = 1;
    }
}

/* The decay factor of state element (c, j): row c's, since gk decays each key
 * channel, i.e. each row of h (SPEC 2.4). gk_on_value_dim takes the value
 * channel's instead (the wrap keeps K != V in bounds; with K = V it is exactly
 * h diag(alpha), the decay on the wrong side). */
static float element_decay(const head *s, int64_t c, int64_t j)
{
    if (s->bug == BUG_GK_ON_VALUE_DIM && s->gk)
        return s->decay[j % s->K];
    return s->decay[c];
}

static void decay_column(head *s, int64_t j)
{
    for (int64_t c = 0; c < s->K; c++)
        s->h[c * s->V + j] *= element_decay(s, c, j);
}

/* ---------------------------------------------------------------------------
 * linear_attn, retention, simple_gla, gla (H2, H4) and linear_attn_postnorm (H3)
 * ------------------------------------------------------------------------- */

/* h_t = D_t h_{t-1} + k_t v_t^T, decay first, then write, then read (H4);
 * D_t = I for linear_attn. */
static int linear_kernel(head *s)
{
    const int64_t K = s->K, V = s->V;
    for (int64_t t = 0; t < s->T; t++) {
        begin_token(s, t);
        token_decays(s, t);
        const float *k = s->k + t * K, *v = s->v + t * V;
        for (int64_t j = 0; j < V; j++) {
            if (s->bug == BUG_READOUT_BEFORE_UPDATE)
                read_column(s, t, j);
            for (int64_t c = 0; c < K; c++) {
                float *h = &s->h[c * V + j];
                const float decay = element_decay(s, c, j);
                if (s->bug == BUG_DECAY_AFTER_WRITE)
                    *h = decay * mul_add(k[c], v[j], *h);
                else
                    *h = mul_add(k[c], v[j], decay * *h);
            }
            finish_column(s, t, j);
        }
        end_token(s, t);
    }
    return 0;
}

/* RMSNorm over the V channels of one output row, no gain (H3):
 * x / sqrt(mean_j x_j^2 + eps); a zero row with eps = 0 stays zero. */
static void rms_normalize_row(const head *s, float *x)
{
    float sum_sq = 0;
    for (int64_t j = 0; j < s->V; j++)
        sum_sq = mul_add(x[j], x[j], sum_sq);
    const float mean_sq = s->bug == BUG_POSTNORM_L2_NOT_RMS ? sum_sq : sum_sq / (float)s->V;
    const float denom = s->bug == BUG_POSTNORM_EPS_OUTSIDE_SQRT ? sqrtf(mean_sq) + s->eps : sqrtf(mean_sq + s->eps);
    for (int64_t j = 0; j < s->V; j++)
        x[j] = denom > 0 ? x[j] / denom : 0;
}

/* H3: the state follows H2; each o_t is RMS-normalised. */
static int postnorm_kernel(head *s)
{
    int rc = linear_kernel(s);
    for (int64_t t = 0; t < s->T && rc == 0; t++)
        rms_normalize_row(s, s->o + t * s->V);
    return rc;
}

/* ---------------------------------------------------------------------------
 * delta_rule (H6), gated_delta_rule (H8, g or gk), comba (H8 second form),
 * efla (E5): one delta step per token, differing in where the decay acts and
 * in the step's coefficient.
 * ------------------------------------------------------------------------- */

typedef enum {
    NO_DECAY,          /* delta_rule, efla */
    DECAY_BEFORE_READ, /* gated_delta_rule: h' = D h, then the delta step on h' (SPEC 4.5, fla's order) */
    DECAY_WITH_WRITE,  /* comba: h_t = D h + k u^T, u read from the un-decayed h (SPEC 4.6) */
    DECAY_AFTER_WRITE  /* gdn_decay_on_write: D ((I - beta k k^T) h + beta k v^T) */
} decay_placement;

/* EFLA's coefficient c = beta phi(beta ||k||^2), phi(x) = -expm1(-x) / x
 * (E5, eq. 6; SPEC 4.7), in float. Below |x| = 2^-10 the series
 * 1 - x/2 + x^2/6 (remainder x^3/24 < 4e-11, far below float's 6e-8) gives
 * the limit c = beta at ||k|| = 0 without any epsilon. 1 - exp(-x) is never
 * formed: for tiny x it cancels to 0 (efla_no_expm1). */
static float efla_coefficient(const head *s, float beta, float knorm2)
{
    if (s->bug == BUG_EFLA_ETA_FOR_C)
        return beta;
    if (s->bug == BUG_EFLA_NO_EXPM1)
        return (1 - expf(-beta * knorm2)) / knorm2;
    if (s->bug == BUG_EFLA_EPSILON_GUARD)
        return -expm1f(-beta * knorm2) / (knorm2 + 1e-6f);
    const float x = beta * knorm2;
    const float phi = fabsf(x) < 0x1p-10f ? 1 - x / 2 + x * x / 6 : -expm1f(-x) / x;
    return beta * phi;
}

/* The key the step uses: k_t as given, since no op normalises k (SPEC 3,
 * 4.7); the normalising bugs use k_t / ||k_t|| (written to `normalized`). */
static const float *key_as_read(const head *s, int64_t t, float *normalized)
{
    const float *k = s->k + t * s->K;
    const int normalizes = (s->bug == BUG_DELTA_NORMALIZED_K && s->op != OP_EFLA) ||
                           (s->bug == BUG_EFLA_NORMALIZED_K && s->op == OP_EFLA);
    if (!normalizes)
        return k;
    const float norm = sqrtf(dot(s->K, k, k));
    for (int64_t c = 0; c < s->K; c++)
        normalized[c] = norm > 0 ? k[c] / norm : 0;
    return normalized;
}

/* The step's coefficient: beta_t (H6, H8), or EFLA's c_t (E5). */
static float step_coefficient(const head *s, int64_t t, const float *k)
{
    float beta = s->beta[t];
    if (s->bug == BUG_BETA_CLAMPED) /* as if beta were always a sigmoid */
        beta = fminf(fmaxf(beta, 0), 1);
    if (s->op == OP_EFLA)
        return efla_coefficient(s, beta, dot(s->K, k, k));
    return beta;
}

/* u = coef (v - h^T k) (H6: beta on both the erase and the write term). */
static float correction(const head *s, float coef, float v, float prediction)
{
    if (s->bug == BUG_DELTA_BETA_ERASE)
        return coef * v - prediction;
    if (s->bug == BUG_DELTA_BETA_WRITE)
        return v - coef * prediction;
    return coef * (v - prediction);
}

/* Per token and column j: the decay where the op puts it (decay_placement),
 * the prediction p = (h^T k)_j, u = coef (v_j - p), column j += k u. */
static int delta_kernel(head *s)
{
    const int64_t K = s->K, V = s->V;
    decay_placement placement = s->op == OP_GATED_DELTA_RULE ? DECAY_BEFORE_READ
                                : s->op == OP_COMBA          ? DECAY_WITH_WRITE
                                                             : NO_DECAY;
    if (s->bug == BUG_GDN_DECAY_ON_WRITE && placement == DECAY_BEFORE_READ)
        placement = DECAY_AFTER_WRITE;
    if (s->bug == BUG_COMBA_READS_DECAYED_STATE && placement == DECAY_WITH_WRITE)
        placement = DECAY_BEFORE_READ;
    float *normalized = malloc((size_t)K * sizeof *normalized);
    if (!normalized)
        return plain_error(s->op_name, "out of memory");
    for (int64_t t = 0; t < s->T; t++) {
        begin_token(s, t);
        token_decays(s, t);
        const float *k = key_as_read(s, t, normalized), *v = s->v + t * V;
        const float coef = step_coefficient(s, t, k);
        for (int64_t j = 0; j < V; j++) {
            if (s->bug == BUG_READOUT_BEFORE_UPDATE)
                read_column(s, t, j);
            if (placement == DECAY_BEFORE_READ)
                decay_column(s, j);
            const float u = correction(s, coef, v[j], column_dot(s, j, k));
            for (int64_t c = 0; c < K; c++) {
                float *h = &s->h[c * V + j];
                const float decay = placement == DECAY_WITH_WRITE ? element_decay(s, c, j) : 1;
                *h = mul_add(k[c], u, decay * *h);
            }
            if (placement == DECAY_AFTER_WRITE)
                decay_column(s, j);
            finish_column(s, t, j);
        }
        end_token(s, t);
    }
    free(normalized);
    return 0;
}

/* ---------------------------------------------------------------------------
 * mesa_net (H15)
 * ------------------------------------------------------------------------- */

/* o_t = h^T (H + diag(lambda))^{-1} q_t, no scale (SPEC 4.13), solved by
 * Cholesky in float. A pivot at or below K FLT_EPSILON max_c A_cc means the
 * system is singular to working precision: -1 with a message naming the
 * token. A, L are K x K scratch, x has K entries. */
static int mesa_read(head *s, int64_t t, float *A, float *L, float *x)
{
    const int64_t K = s->K;
    if (s->bug == BUG_MESA_LAMBDA_IN_PLACE) /* the regulariser lands in the carried state */
        for (int64_t c = 0; c < K; c++)
            s->h_kk[c * K + c] += s->lambda[c];
    for (int64_t i = 0; i < K * K; i++)
        A[i] = s->h_kk[i];
    if (s->bug != BUG_MESA_LAMBDA_IN_PLACE)
        for (int64_t c = 0; c < K; c++)
            A[c * K + c] += s->lambda[c];
    float largest = 0;
    for (int64_t c = 0; c < K; c++)
        largest = fmaxf(largest, fabsf(A[c * K + c]));
    for (int64_t j = 0; j < K; j++) { /* A = L L^T, column by column */
        float pivot = A[j * K + j];
        for (int64_t p = 0; p < j; p++)
            pivot = mul_add(-L[j * K + p], L[j * K + p], pivot);
        if (!(pivot > (float)K * FLT_EPSILON * largest))
            return plain_error(s->op_name,
                               "sequence %lld, value head %lld, token %lld: H_t + diag(lambda) is not positive "
                               "definite in float (Cholesky pivot %lld)",
                               (long long)s->sequence, (long long)s->value_head, (long long)t, (long long)j);
        L[j * K + j] = sqrtf(pivot);
        for (int64_t i = j + 1; i < K; i++) {
            float sum = A[i * K + j];
            for (int64_t p = 0; p < j; p++)
                sum = mul_add(-L[i * K + p], L[j * K + p], sum);
            L[i * K + j] = sum / L[j * K + j];
        }
    }
    const float *q = s->q + t * K;
    for (int64_t i = 0; i < K; i++) { /* L y = q */
        float sum = q[i];
        for (int64_t p = 0; p < i; p++)
            sum = mul_add(-L[i * K + p], x[p], sum);
        x[i] = sum / L[i * K + i];
    }
    for (int64_t i = K - 1; i >= 0; i--) { /* L^T x = y */
        float sum = x[i];
        for (int64_t p = i + 1; p < K; p++)
            sum = mul_add(-L[p * K + i], x[p], sum);
        x[i] = sum / L[i * K + i];
    }
    for (int64_t j = 0; j < s->V; j++)
        s->o[t * s->V + j] = column_dot(s, j, x);
    return 0;
}

/* H_t = exp(g_t) H_{t-1} + beta_t k_t k_t^T, h_t = exp(g_t) h_{t-1} + beta_t k_t v_t^T,
 * then the readout (H15); g absent: no decay, beta absent: 1. */
static int mesa_kernel(head *s)
{
    const int64_t K = s->K, V = s->V;
    float *A = malloc((size_t)(K * K) * sizeof *A), *L = malloc((size_t)(K * K) * sizeof *L);
    float *x = malloc((size_t)K * sizeof *x);
    int rc = (A && L && x) ? 0 : plain_error(s->op_name, "out of memory");
    for (int64_t t = 0; t < s->T && rc == 0; t++) {
        begin_token(s, t);
        if (s->bug == BUG_READOUT_BEFORE_UPDATE)
            rc = mesa_read(s, t, A, L, x);
        token_decays(s, t);
        const float gamma = s->decay[0], beta = s->beta ? s->beta[t] : 1;
        const float *k = s->k + t * K, *v = s->v + t * V;
        for (int64_t j = 0; j < V; j++)
            for (int64_t c = 0; c < K; c++)
                s->h[c * V + j] = mul_add(beta * k[c], v[j], gamma * s->h[c * V + j]);
        for (int64_t j = 0; j < K; j++)
            for (int64_t c = 0; c < K; c++)
                s->h_kk[c * K + j] = mul_add(beta * k[c], k[j], gamma * s->h_kk[c * K + j]);
        if (s->bug == BUG_BF16_STATE_EVERY_STEP) { /* both states in bf16 buffers, stored after every step */
            for (int64_t i = 0; i < K * V; i++)
                s->h[i] = round_to_bf16(s->h[i]);
            for (int64_t i = 0; i < K * K; i++)
                s->h_kk[i] = round_to_bf16(s->h_kk[i]);
        }
        int64_t rows[2];
        const int n = rows_read_after_update(s, t, rows);
        for (int i = 0; i < n && rc == 0; i++)
            rc = mesa_read(s, rows[i], A, L, x);
        end_token(s, t);
    }
    free(A);
    free(L);
    free(x);
    return rc;
}

/* ---------------------------------------------------------------------------
 * The attention forms: softmax_attn (H1), fox (H10), deltaformer (H11),
 * path_attn (H12). No state.
 * ------------------------------------------------------------------------- */

/* Softmax of w[0..n-1] in place: exp(l - max) / sum, the row maximum
 * subtracted so that no exponent is positive and nothing overflows (SPEC 4.8). */
static void softmax_in_place(const head *s, int64_t n, float *w)
{
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++)
        m = fmaxf(m, w[j]);
    if (s->bug == BUG_SOFTMAX_NO_MAX)
        m = 0;
    float denom = 0;
    for (int64_t j = 0; j < n; j++)
        denom += (w[j] = plain_expf(w[j] - m));
    for (int64_t j = 0; j < n; j++)
        w[j] /= denom;
}

/* out[0..V-1] = sum_{j<n} weights[j] rows[j][0..V-1]. */
static void weighted_rows(const head *s, int64_t n, const float *weights, const float *rows, float *out)
{
    for (int64_t c = 0; c < s->V; c++)
        out[c] = 0;
    for (int64_t j = 0; j < n; j++)
        for (int64_t c = 0; c < s->V; c++)
            out[c] = mul_add(weights[j], rows[j * s->V + c], out[c]);
}

/* The last key token row i attends to: i (causal), or i + 1 with causal_leak
 * (a mask shifted by one). */
static int64_t last_key(const head *s, int64_t i)
{
    return (s->bug == BUG_CAUSAL_LEAK && i + 1 < s->T) ? i + 1 : i;
}

/* FoX's log gate at token tau: g_tau, or ALiBi's g_gamma; 0 for softmax_attn. */
static float log_gate(const head *s, int64_t tau)
{
    return s->g ? s->g[tau] : s->g_gamma ? *s->g_gamma : 0;
}

/* l_ij = scale q_i . k_j + sum_{tau=j+1..i} g_tau (the gate after the scale,
 * H10), the gate summed from j = i downwards, then the causal softmax.
 * softmax_attn is the case without a gate. */
static int softmax_kernel(head *s)
{
    const int64_t T = s->T, K = s->K;
    float *logits = malloc((size_t)(T + 1) * sizeof *logits);
    if (!logits)
        return plain_error(s->op_name, "out of memory");
    for (int64_t i = 0; i < T; i++) {
        const float *q = s->q + i * K;
        float log_gamma = 0; /* sum_{tau=j+1..i} for the current j */
        for (int64_t j = i; j >= 0; j--) {
            if (s->bug == BUG_FOX_GATE_OFF_BY_ONE)
                log_gamma += log_gate(s, j);
            logits[j] = s->scale * dot(K, q, s->k + j * K) + log_gamma;
            if (s->bug != BUG_FOX_GATE_OFF_BY_ONE)
                log_gamma += log_gate(s, j);
        }
        const int64_t last = last_key(s, i);
        if (last > i) /* the leaked key, with the prefix-sum gate G_i - G_{i+1} */
            logits[last] = s->scale * dot(K, q, s->k + last * K) - log_gate(s, last);
        softmax_in_place(s, last + 1, logits);
        weighted_rows(s, last + 1, logits, s->v, s->o + i * s->V);
    }
    free(logits);
    return 0;
}

/* DeltaFormer's weights over keys 0..n-1 for the row vector x: exp(s x . k_j)
 * in the EXP form (H11 as written, nothing to normalise), their softmax
 * otherwise. */
static void deltaformer_weights(const head *s, const float *x, int64_t n, float *w)
{
    for (int64_t j = 0; j < n; j++)
        w[j] = s->scale * dot(s->K, x, s->k + j * s->K);
    if (s->form != 0) {
        softmax_in_place(s, n, w);
        return;
    }
    for (int64_t j = 0; j < n; j++)
        w[j] = plain_expf(w[j]);
}

/* H11 in two stages: u_i = v_i - beta_i sum_{j<i} B_ij u_j (B over j < i,
 * row i read by k_i, or by q_i in fla's form), then o_i = sum_{j<=i} A_ij u_j. */
static int deltaformer_kernel(head *s)
{
    const int64_t T = s->T, K = s->K, V = s->V;
    float *u = malloc((size_t)(T * V + 1) * sizeof *u), *w = malloc((size_t)(T + 1) * sizeof *w);
    if (!u || !w) {
        free(u);
        free(w);
        return plain_error(s->op_name, "out of memory");
    }
    for (int64_t i = 0; i < T; i++) {
        const int reads_q = s->form == 2 && s->bug != BUG_DELTAFORMER_FLA_READS_K;
        const float *x = reads_q ? s->q + i * K : s->k + i * K;
        /* the strictly causal stage: keys j < i; the diagonal bug includes j = i, whose u is still v_i */
        const int64_t n = s->bug == BUG_DELTAFORMER_DIAG_FIRST_STAGE ? i + 1 : i;
        deltaformer_weights(s, x, n, w);
        const float *v = s->v + i * V;
        const float beta_i = s->beta ? s->beta[i] : 1;
        for (int64_t c = 0; c < V; c++) {
            float sum = 0;
            for (int64_t j = 0; j < n; j++) {
                const float u_j = j < i ? u[j * V + c] : v[c];
                const float weight = s->bug == BUG_DELTAFORMER_WRONG_BETA_SIDE ? w[j] * (s->beta ? s->beta[j] : 1)
                                                                               : w[j];
                sum = mul_add(weight, u_j, sum);
            }
            const float row_beta = s->bug == BUG_DELTAFORMER_WRONG_BETA_SIDE ? 1 : beta_i;
            u[i * V + c] = mul_add(-row_beta, sum, v[c]);
        }
    }
    for (int64_t i = 0; i < T; i++) {
        const int64_t last = last_key(s, i);
        deltaformer_weights(s, s->q + i * K, last + 1, w);
        weighted_rows(s, last + 1, w, u, s->o + i * V);
    }
    free(u);
    free(w);
    return 0;
}

/* x <- H_t x = x - beta_t w_t (w_t . x): one PaTH transition (H12). */
static void apply_transition(const head *s, int64_t t, float *x)
{
    const float *w = s->w + t * s->K;
    float beta = s->beta[t];
    if (s->bug == BUG_BETA_CLAMPED)
        beta = fminf(fmaxf(beta, 0), 1);
    const float coef = beta * dot(s->K, w, x);
    for (int64_t c = 0; c < s->K; c++)
        x[c] = mul_add(-coef, w[c], x[c]);
}

/* path_reversed's score: q_i . H_{j+1} ... H_i k_j, H_i applied first. */
static float reversed_score(const head *s, int64_t i, int64_t j, float *x)
{
    memcpy(x, s->k + j * s->K, (size_t)s->K * sizeof *x);
    for (int64_t t = i; t > j; t--)
        apply_transition(s, t, x);
    return dot(s->K, s->q + i * s->K, x);
}

/* l_ij = scale (q_i . H_i ... H_{j+1} k_j + G_i - G_j) (H12; the gate before
 * the scale, SPEC 4.12), then the causal softmax. For each key j, x = k_j is
 * carried forward through H_{j+1}, H_{j+2}, ...: column j of the logits in
 * O(T K) per column. */
static int path_kernel(head *s)
{
    const int64_t T = s->T, K = s->K;
    float *L = malloc((size_t)(T * T + 1) * sizeof *L);
    float *x = malloc((size_t)K * sizeof *x), *scratch = malloc((size_t)K * sizeof *scratch);
    if (!L || !x || !scratch) {
        free(L);
        free(x);
        free(scratch);
        return plain_error(s->op_name, "out of memory");
    }
    for (int64_t j = 0; j < T; j++) {
        memcpy(x, s->k + j * K, (size_t)K * sizeof *x);
        if (s->bug == BUG_PATH_OFF_BY_ONE) /* the product starts at H_j */
            apply_transition(s, j, x);
        float gate = 0; /* sum_{tau=j+1..i} g_tau */
        for (int64_t i = j; i < T; i++) {
            if (i > j) {
                apply_transition(s, i, x);
                gate += s->g ? s->g[i] : 0;
            }
            const float score = s->bug == BUG_PATH_REVERSED ? reversed_score(s, i, j, scratch)
                                                           : dot(K, s->q + i * K, x);
            L[i * T + j] = s->bug == BUG_PATH_GATE_AFTER_SCALE ? mul_add(s->scale, score, gate)
                                                               : s->scale * (score + gate);
        }
    }
    for (int64_t i = 0; i < T; i++) {
        float *row = L + i * T;
        const int64_t last = last_key(s, i);
        if (last > i) /* the leaked key, with no transition between it and q_i */
            row[last] = s->scale * dot(K, s->q + i * K, s->k + last * K);
        softmax_in_place(s, last + 1, row);
        weighted_rows(s, last + 1, row, s->v, s->o + i * s->V);
    }
    free(L);
    free(x);
    free(scratch);
    return 0;
}

/* ---------------------------------------------------------------------------
 * The ops: inputs, state, kernel.
 * ------------------------------------------------------------------------- */

enum {
    READS_BETA = 1,
    READS_G = 2,
    READS_GK = 4,
    READS_G_GAMMA = 8,
    READS_H0 = 16,
    READS_W = 32,
    READS_LAMBDA = 64,
    READS_H0_KK = 128
};

enum { NO_STATE = 0, STATE_KV = 1, STATE_KV_KK = 2 };

typedef struct {
    const char *name;
    op_kind op;
    unsigned required, optional; /* READS_* (q, k, v always required) */
    int state;
    int reads_scale;
    int (*kernel)(head *);
} op_info;

static const op_info ops[] = {
    {"linear_attn", OP_LINEAR_ATTN, 0, READS_H0, STATE_KV, 1, linear_kernel},
    {"linear_attn_postnorm", OP_LINEAR_ATTN_POSTNORM, 0, READS_H0, STATE_KV, 1, postnorm_kernel},
    {"retention", OP_RETENTION, READS_G_GAMMA, READS_H0, STATE_KV, 1, linear_kernel},
    {"simple_gla", OP_SIMPLE_GLA, READS_G, READS_H0, STATE_KV, 1, linear_kernel},
    {"gla", OP_GLA, READS_GK, READS_H0, STATE_KV, 1, linear_kernel},
    {"delta_rule", OP_DELTA_RULE, READS_BETA, READS_H0, STATE_KV, 1, delta_kernel},
    /* exactly one of g, gk: checked in read_inputs */
    {"gated_delta_rule", OP_GATED_DELTA_RULE, READS_BETA, READS_G | READS_GK | READS_H0, STATE_KV, 1, delta_kernel},
    {"comba", OP_COMBA, READS_BETA | READS_G, READS_H0, STATE_KV, 1, delta_kernel},
    {"efla", OP_EFLA, READS_BETA, READS_H0, STATE_KV, 1, delta_kernel},
    {"softmax_attn", OP_SOFTMAX_ATTN, 0, 0, NO_STATE, 1, softmax_kernel},
    /* exactly one of g, g_gamma: checked in read_inputs */
    {"fox", OP_FOX, 0, READS_G | READS_G_GAMMA, NO_STATE, 1, softmax_kernel},
    {"deltaformer", OP_DELTAFORMER, 0, READS_BETA, NO_STATE, 1, deltaformer_kernel},
    {"path_attn", OP_PATH_ATTN, READS_W | READS_BETA, READS_G, NO_STATE, 1, path_kernel},
    {"mesa_net", OP_MESA_NET, READS_LAMBDA, READS_G | READS_BETA | READS_H0 | READS_H0_KK, STATE_KV_KK, 0,
     mesa_kernel},
};

/* One call: the op, its dims, every input as fp32, the parameters, the outputs. */
typedef struct {
    const op_info *info;
    plain_bug bug;
    int64_t B, T, H, HV, K, V, N;
    const int64_t *cu_seqlens; /* N + 1 offsets, or NULL */
    float *q, *k, *v, *w, *beta, *g, *gk, *g_gamma, *lambda, *h0, *h0_kk;
    float scale, eps;
    int form;
    int64_t split;
    float *o, *ht, *ht_kk, *ht_split, *ht_kk_split;
} problem;

static void free_problem(problem *p)
{
    float *owned[] = {p->q, p->k, p->v, p->w, p->beta, p->g, p->gk, p->g_gamma, p->lambda, p->h0, p->h0_kk};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        free(owned[i]);
}

static const char *const input_names[] = {"q",  "k",      "v",     "w",         "beta", "g", "gk", "g_gamma",
                                          "h0", "lambda", "h0_kk", "cu_seqlens"};

/* q and v give B, T, H, K, HV, V (SPEC 2.1); cu_seqlens, N (SPEC 2.5). */
static int read_dims(const char *op, const lacs_tensor *inputs, int n_inputs, problem *p)
{
    const lacs_tensor *q = find_tensor(inputs, n_inputs, "q"), *v = find_tensor(inputs, n_inputs, "v");
    if (!q || !v)
        return plain_error(op, "input '%s' is required", q ? "v" : "q");
    if (q->ndim != 4 || v->ndim != 4)
        return plain_error(op, "inputs 'q' and 'v' must have 4 dimensions ([B, T, H, K], [B, T, HV, V])");
    if (tensor_count(op, q) < 0 || tensor_count(op, v) < 0)
        return -1;
    p->B = q->shape[0];
    p->T = q->shape[1];
    p->H = q->shape[2];
    p->K = q->shape[3];
    p->HV = v->shape[2];
    p->V = v->shape[3];
    if (v->shape[0] != p->B || v->shape[1] != p->T)
        return plain_error(op, "inputs 'q' and 'v' disagree on B or T");
    if (p->H < 1 || p->HV < 1 || p->K < 1 || p->V < 1 || p->HV % p->H != 0)
        return plain_error(op, "H = %lld, HV = %lld, K = %lld, V = %lld: each must be >= 1 and HV a multiple of H",
                           (long long)p->H, (long long)p->HV, (long long)p->K, (long long)p->V);
    p->N = p->B;
    const lacs_tensor *cu = find_tensor(inputs, n_inputs, "cu_seqlens");
    if (!cu)
        return 0;
    const int64_t entries = tensor_count(op, cu);
    if (cu->dtype != LACS_I64 || cu->ndim != 1 || entries < 1)
        return plain_error(op, "input 'cu_seqlens' must be I64 with shape [N + 1]");
    const int64_t *offsets = cu->data;
    if (p->B != 1 || offsets[0] != 0 || offsets[entries - 1] != p->T)
        return plain_error(op, "cu_seqlens must start at 0 and end at T = %lld, with B = 1", (long long)p->T);
    for (int64_t n = 0; n + 1 < entries; n++)
        if (offsets[n + 1] < offsets[n])
            return plain_error(op, "cu_seqlens decreases at entry %lld", (long long)(n + 1));
    p->cu_seqlens = offsets;
    p->N = entries - 1;
    return 0;
}

/* Every input the op may read, in fp32, with its shape checked; a required
 * one missing or one the op does not read is an error (SPEC 2.6). */
static int read_inputs(const char *op, const lacs_tensor *inputs, int n_inputs, problem *p)
{
    const int64_t B = p->B, T = p->T, H = p->H, HV = p->HV, K = p->K, V = p->V, N = p->N;
    const int64_t qk[] = {B, T, H, K}, values[] = {B, T, HV, V}, gates[] = {B, T, HV}, gk[] = {B, T, HV, K};
    const int64_t heads[] = {HV}, state[] = {N, HV, K, V}, lambda[] = {HV, K}, state_kk[] = {N, HV, K, K};
    for (int i = 0; i < n_inputs; i++) {
        int known = 0;
        for (size_t n = 0; n < sizeof input_names / sizeof input_names[0] && inputs[i].name; n++)
            known = known || strcmp(inputs[i].name, input_names[n]) == 0;
        if (!known)
            return plain_error(op, "input '%s' is not an input of the sequence ops",
                               inputs[i].name ? inputs[i].name : "(null)");
    }
    if (read_float_input(op, inputs, n_inputs, "q", 4, qk, &p->q) ||
        read_float_input(op, inputs, n_inputs, "k", 4, qk, &p->k) ||
        read_float_input(op, inputs, n_inputs, "v", 4, values, &p->v) ||
        read_float_input(op, inputs, n_inputs, "w", 4, qk, &p->w) ||
        read_float_input(op, inputs, n_inputs, "beta", 3, gates, &p->beta) ||
        read_float_input(op, inputs, n_inputs, "g", 3, gates, &p->g) ||
        read_float_input(op, inputs, n_inputs, "gk", 4, gk, &p->gk) ||
        read_float_input(op, inputs, n_inputs, "g_gamma", 1, heads, &p->g_gamma) ||
        read_float_input(op, inputs, n_inputs, "h0", 4, state, &p->h0) ||
        read_float_input(op, inputs, n_inputs, "lambda", 2, lambda, &p->lambda) ||
        read_float_input(op, inputs, n_inputs, "h0_kk", 4, state_kk, &p->h0_kk))
        return -1;
    if (!p->k)
        return plain_error(op, "input 'k' is required");
    const struct {
        unsigned flag;
        const char *name;
        const float *data;
    } optional_inputs[] = {
        {READS_BETA, "beta", p->beta},
        {READS_G, "g", p->g},
        {READS_GK, "gk", p->gk},
        {READS_G_GAMMA, "g_gamma", p->g_gamma},
        {READS_H0, "h0", p->h0},
        {READS_W, "w", p->w},
        {READS_LAMBDA, "lambda", p->lambda},
        {READS_H0_KK, "h0_kk", p->h0_kk},
    };
    for (size_t i = 0; i < sizeof optional_inputs / sizeof optional_inputs[0]; i++) {
        const unsigned flag = optional_inputs[i].flag;
        if ((p->info->required & flag) && !optional_inputs[i].data)
            return plain_error(op, "input '%s' is required", optional_inputs[i].name);
        if (!((p->info->required | p->info->optional) & flag) && optional_inputs[i].data)
            return plain_error(op, "input '%s' is given but %s does not read it", optional_inputs[i].name, op);
    }
    if (p->info->op == OP_GATED_DELTA_RULE && !p->g == !p->gk)
        return plain_error(op, "exactly one of 'g' (scalar decay) and 'gk' (per-channel decay) must be given");
    if (p->info->op == OP_FOX && !p->g == !p->g_gamma)
        return plain_error(op, "exactly one of 'g' (FoX) and 'g_gamma' (ALiBi) must be given");
    return 0;
}

/* scale, eps, form, split (SPEC 10.1 'params'), and the bugs that misread scale. */
static int read_params(const char *op, const lacs_param *params, int n_params, problem *p)
{
    int found;
    const double scale = find_param(params, n_params, "scale", &found);
    if (p->info->reads_scale && !(found && isfinite(scale)))
        return plain_error(op, "parameter 'scale' must be given and finite (lacs has no default, SPEC 2.3)");
    p->scale = (float)scale;
    if (p->bug == BUG_SCALE_MISSING)
        p->scale = 1;
    if (p->bug == BUG_SCALE_HARDCODED) /* fla's default, K^-1/2 */
        p->scale = 1 / sqrtf((float)p->K);
    const double eps = find_param(params, n_params, "eps", &found);
    if (p->info->op == OP_LINEAR_ATTN_POSTNORM && found && !(eps >= 0))
        return plain_error(op, "parameter 'eps' = %g must be >= 0", eps);
    p->eps = found ? (float)eps : 0;
    const double form = find_param(params, n_params, "form", &found);
    if (p->info->op == OP_DELTAFORMER && found && !(form == 0 || form == 1 || form == 2))
        return plain_error(op, "parameter 'form' = %g is not 0 (exp), 1 (softmax) or 2 (fla)", form);
    p->form = found && (form == 0 || form == 2) ? (int)form : 1;
    const double split = find_param(params, n_params, "split", &found);
    if (found && !(split >= 0 && split <= (double)p->T && split == floor(split)))
        return plain_error(op, "parameter 'split' = %g must be a token count in [0, T = %lld]", split,
                           (long long)p->T);
    p->split = found ? (int64_t)split : -1;
    return 0;
}

static int read_outputs(const char *op, lacs_tensor *outputs, int n_outputs, problem *p)
{
    const int64_t o_shape[] = {p->B, p->T, p->HV, p->V};
    const int64_t state[] = {p->N, p->HV, p->K, p->V}, state_kk[] = {p->N, p->HV, p->K, p->K};
    static const char *const names[] = {"o", "ht", "ht_split", "ht_kk", "ht_kk_split"};
    const int allowed[] = {1, p->info->state != NO_STATE, p->info->state != NO_STATE,
                           p->info->state == STATE_KV_KK, p->info->state == STATE_KV_KK};
    for (int i = 0; i < n_outputs; i++) {
        int known = 0;
        for (int n = 0; n < 5 && outputs[i].name; n++)
            known = known || (allowed[n] && strcmp(outputs[i].name, names[n]) == 0);
        if (!known)
            return plain_error(op, "output '%s' is not an output of %s", outputs[i].name ? outputs[i].name : "(null)",
                               op);
    }
    if (find_float_output(op, outputs, n_outputs, "o", 4, o_shape, &p->o) ||
        find_float_output(op, outputs, n_outputs, "ht", 4, state, &p->ht) ||
        find_float_output(op, outputs, n_outputs, "ht_split", 4, state, &p->ht_split) ||
        find_float_output(op, outputs, n_outputs, "ht_kk", 4, state_kk, &p->ht_kk) ||
        find_float_output(op, outputs, n_outputs, "ht_kk_split", 4, state_kk, &p->ht_kk_split))
        return -1;
    if (!p->o)
        return plain_error(op, "output 'o' is required");
    if ((p->ht_split || p->ht_kk_split) && p->split < 0)
        return plain_error(op, "output 'ht_split' needs the parameter 'split'");
    return 0;
}

/* ---------------------------------------------------------------------------
 * The driver: one (sequence, value head) at a time.
 * ------------------------------------------------------------------------- */

/* Per-head contiguous arrays, sized for the longest sequence. */
typedef struct {
    float *q, *k, *w, *v, *beta, *g, *gk, *lambda, *o;
    float *h, *h_kk, *h_split, *h_kk_split, *decay;
    float *carry; /* varlen_no_reset: every head's states at the end of the previous sequence */
} head_buffers;

static void free_buffers(head_buffers *buf)
{
    float *owned[] = {buf->q, buf->k, buf->w, buf->v, buf->beta, buf->g, buf->gk, buf->lambda,
                      buf->o, buf->h, buf->h_kk, buf->h_split, buf->h_kk_split, buf->decay, buf->carry};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        free(owned[i]);
}

static int alloc_buffers(const problem *p, head_buffers *buf)
{
    /* no sequence is longer than the row; + 1 so that T = 0 still allocates */
    const size_t tk = (size_t)(p->T * p->K + 1), tv = (size_t)(p->T * p->V + 1), t1 = (size_t)(p->T + 1);
    const size_t kv = (size_t)(p->K * p->V), kk = (size_t)(p->K * p->K);
    memset(buf, 0, sizeof *buf);
    buf->q = malloc(tk * sizeof(float));
    buf->k = malloc(tk * sizeof(float));
    buf->w = malloc(tk * sizeof(float));
    buf->gk = malloc(tk * sizeof(float));
    buf->v = malloc(tv * sizeof(float));
    buf->o = malloc(tv * sizeof(float));
    buf->beta = malloc(t1 * sizeof(float));
    buf->g = malloc(t1 * sizeof(float));
    buf->lambda = malloc((size_t)p->K * sizeof(float));
    buf->decay = malloc((size_t)p->K * sizeof(float));
    buf->h = calloc(kv, sizeof(float));
    buf->h_kk = calloc(kk, sizeof(float));
    buf->h_split = calloc(kv, sizeof(float));
    buf->h_kk_split = calloc(kk, sizeof(float));
    buf->carry = calloc((size_t)p->HV * (kv + kk), sizeof(float));
    const int ok = buf->q && buf->k && buf->w && buf->gk && buf->v && buf->o && buf->beta && buf->g &&
                   buf->lambda && buf->decay && buf->h && buf->h_kk && buf->h_split && buf->h_kk_split && buf->carry;
    if (!ok)
        free_buffers(buf);
    return ok ? 0 : -1;
}

/* Where one sequence lies in the tensors: batch row b, tokens [bos, bos + len). */
typedef struct {
    int64_t index, b, bos, len;
    int packed; /* one of several sequences of a varlen row */
} sequence;

/* Tokens of `seq` for value head hv, into the contiguous buffers. GVA (SPEC
 * 2.2): consecutive value heads share a q/k head, hv / (HV / H); ggml tiles
 * instead (gva_tiled). */
static void gather_head(const problem *p, const sequence *seq, int64_t hv, head_buffers *buf)
{
    const int64_t K = p->K, V = p->V, T = p->T, H = p->H, HV = p->HV;
    const int64_t qk_head = p->bug == BUG_GVA_TILED ? hv % H : hv / (HV / H);
    for (int64_t t = 0; t < seq->len; t++) {
        const int64_t token = seq->b * T + seq->bos + t;
        const int64_t qk_row = (token * H + qk_head) * K, v_row = (token * HV + hv) * V, gate = token * HV + hv;
        memcpy(buf->q + t * K, p->q + qk_row, (size_t)K * sizeof(float));
        memcpy(buf->k + t * K, p->k + qk_row, (size_t)K * sizeof(float));
        if (p->w)
            memcpy(buf->w + t * K, p->w + qk_row, (size_t)K * sizeof(float));
        if (p->gk)
            memcpy(buf->gk + t * K, p->gk + gate * K, (size_t)K * sizeof(float));
        memcpy(buf->v + t * V, p->v + v_row, (size_t)V * sizeof(float));
        if (p->beta)
            buf->beta[t] = p->beta[gate];
        if (p->g)
            buf->g[t] = p->g[gate];
    }
    if (p->lambda)
        memcpy(buf->lambda, p->lambda + hv * K, (size_t)K * sizeof(float));
}

/* The initial states of (seq, hv): h0[n], h0_kk[n], or zeros (SPEC 2.3, 2.5). */
static void initial_states(const problem *p, const sequence *seq, int64_t hv, head_buffers *buf)
{
    const int64_t K = p->K, V = p->V, at = seq->index * p->HV + hv;
    const int use_h0 = p->h0 && p->bug != BUG_H0_IGNORED;
    const int use_h0_kk = p->h0_kk && p->bug != BUG_H0_IGNORED && p->bug != BUG_MESA_NO_H0_KK;
    for (int64_t i = 0; i < K * V; i++)
        buf->h[i] = use_h0 ? p->h0[at * K * V + i] : 0;
    for (int64_t i = 0; i < K * K; i++)
        buf->h_kk[i] = use_h0_kk ? p->h0_kk[at * K * K + i] : 0;
    if (p->bug == BUG_VARLEN_NO_RESET && seq->packed && seq->index > 0) { /* the previous sequence's state runs on */
        const float *carry = buf->carry + hv * (K * V + K * K);
        memcpy(buf->h, carry, (size_t)(K * V) * sizeof(float));
        memcpy(buf->h_kk, carry + K * V, (size_t)(K * K) * sizeof(float));
    }
    memcpy(buf->h_split, buf->h, (size_t)(K * V) * sizeof(float)); /* the snapshot for split = 0 */
    memcpy(buf->h_kk_split, buf->h_kk, (size_t)(K * K) * sizeof(float));
}

/* A K x cols state into the output layout [K][cols] (SPEC 2.1), or [cols][K]
 * with ht_transposed. */
static void store_state(plain_bug bug, int64_t K, int64_t cols, const float *state, float *out)
{
    for (int64_t c = 0; c < K; c++)
        for (int64_t j = 0; j < cols; j++)
            out[bug == BUG_HT_TRANSPOSED ? j * K + c : c * cols + j] = state[c * cols + j];
}

/* o of (seq, hv) into the output tensor, and the final states into ht, ht_kk (and their split snapshots). */
static void write_back(problem *p, const sequence *seq, int64_t hv, head_buffers *buf)
{
    const int64_t K = p->K, V = p->V, HV = p->HV;
    for (int64_t t = 0; t < seq->len; t++)
        memcpy(p->o + ((seq->b * p->T + seq->bos + t) * HV + hv) * V, buf->o + t * V, (size_t)V * sizeof(float));
    if (p->info->state == NO_STATE)
        return;
    float *carry = buf->carry + hv * (K * V + K * K);
    memcpy(carry, buf->h, (size_t)(K * V) * sizeof(float));
    memcpy(carry + K * V, buf->h_kk, (size_t)(K * K) * sizeof(float));
    const int64_t at = seq->index * HV + hv;
    if (p->ht)
        store_state(p->bug, K, V, buf->h, p->ht + at * K * V);
    if (p->ht_split)
        store_state(p->bug, K, V, buf->h_split, p->ht_split + at * K * V);
    if (p->ht_kk)
        store_state(p->bug, K, K, buf->h_kk, p->ht_kk + at * K * K);
    if (p->ht_kk_split)
        store_state(p->bug, K, K, buf->h_kk_split, p->ht_kk_split + at * K * K);
}

static int run_heads(problem *p)
{
    const op_info *info = p->info;
    /* varlen_no_reset on an attention op: the packed row attended as one sequence */
    const int packed = p->cu_seqlens && !(p->bug == BUG_VARLEN_NO_RESET && info->state == NO_STATE);
    const int64_t n_seq = packed ? p->N : p->B;
    head_buffers buf;
    if (alloc_buffers(p, &buf))
        return plain_error(info->name, "out of memory for T = %lld", (long long)p->T);
    int rc = 0;
    for (int64_t n = 0; n < n_seq && rc == 0; n++) {
        const sequence seq = {
            .index = n, .b = packed ? 0 : n, .bos = packed ? p->cu_seqlens[n] : 0,
            .len = packed ? p->cu_seqlens[n + 1] - p->cu_seqlens[n] : p->T, .packed = packed,
        };
        for (int64_t hv = 0; hv < p->HV && rc == 0; hv++) {
            gather_head(p, &seq, hv, &buf);
            initial_states(p, &seq, hv, &buf);
            head s = {
                .op = info->op, .bug = p->bug, .op_name = info->name, .sequence = n, .value_head = hv,
                .T = seq.len, .K = p->K, .V = p->V, .scale = p->scale, .eps = p->eps, .form = p->form,
                .split = p->split,
                .q = buf.q, .k = buf.k, .w = p->w ? buf.w : NULL, .v = buf.v,
                .beta = p->beta ? buf.beta : NULL, .g = p->g ? buf.g : NULL, .gk = p->gk ? buf.gk : NULL,
                .g_gamma = p->g_gamma ? p->g_gamma + hv : NULL, .lambda = p->lambda ? buf.lambda : NULL,
                .o = buf.o, .h = buf.h, .h_kk = info->state == STATE_KV_KK ? buf.h_kk : NULL,
                .h_split = buf.h_split, .h_kk_split = info->state == STATE_KV_KK ? buf.h_kk_split : NULL,
                .decay = buf.decay,
            };
            rc = info->kernel(&s);
            if (rc == 0)
                write_back(p, &seq, hv, &buf);
        }
    }
    free_buffers(&buf);
    return rc;
}

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    problem p;
    memset(&p, 0, sizeof p);
    for (size_t i = 0; op && i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(op, ops[i].name) == 0)
            p.info = &ops[i];
    if (!p.info)
        return LACS_UNSUPPORTED;
    if (plain_bug_from_environment(PLAIN_NAME, &p.bug) || plain_exp_mode() < 0)
        return 2;
    if (n_inputs < 0 || n_params < 0 || n_outputs < 0 || (n_inputs > 0 && !inputs) || (n_outputs > 0 && !outputs)) {
        plain_error(op, "bad argument counts or NULL arrays");
        return 2;
    }
    int rc = read_dims(op, inputs, n_inputs, &p);
    if (rc == 0)
        rc = read_inputs(op, inputs, n_inputs, &p);
    if (rc == 0)
        rc = read_params(op, params, n_params, &p);
    if (rc == 0)
        rc = read_outputs(op, outputs, n_outputs, &p);
    if (rc == 0)
        rc = run_heads(&p);
    free_problem(&p);
    return rc == 0 ? 0 : 2;
}

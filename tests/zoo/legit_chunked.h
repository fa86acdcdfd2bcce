/* The chunked algorithm of the recurrent ops, as fla's chunk kernels compute
 * them (SPEC.md 4.1-4.7; H7's UT transform, H9 per chunk), shared by the zoo
 * members `chunked` (fp32) and `fla_like_bf16` (the same with fla's bf16
 * intermediates).
 *
 * A sequence is cut into chunks of C tokens (16, 32 or 64; the last may be
 * shorter; a varlen sequence starts a new chunk). In a chunk of n tokens
 * starting from the state S [K][V], with G_i (per key channel c: G_ic) the sum
 * of the log decays of tokens 0..i of the chunk (fla's chunk_local_cumsum)
 * and b_i the step size (beta; EFLA's c; none for the linear family):
 *
 *   A_ij = b_i sum_c k_ic k_jc exp(Gq_ic - G_jc)   j < i   (chunk_scaled_dot_kkt)
 *   T    = (I + A)^{-1}                                    (solve_tril, forward substitution)
 *   W    = T [b_j k_j (.) exp(Gq_j)]_j,  U = T [b_j v_j]_j (recompute_w_u: the WY/UT form, H7)
 *   v_new = U - W S                                        (chunk_fwd_h)
 *   o_i  = scale ((q_i (.) exp(G_i))^T S + sum_{j<=i} (sum_c q_ic k_jc exp(G_ic - G_jc)) v_new_j)
 *   S   <- exp(G_last) (.) S + sum_j (k_j (.) exp(G_last - G_j)) v_new_j^T
 *
 * Gq = G for the delta rule and the gated delta rule (the correction reads the
 * decayed state, H8 first form), Gq_i = G_i - g_i for Comba (it reads the
 * un-decayed state, H8 second form; fla's chunk_comba uses that exclusive
 * cumsum). The linear family (linear_attn, its post-normalised form, retention,
 * simple_gla, gla; H2-H4) has no correction: v_new = v, and the same o and S
 * are its chunked (intra-chunk matrix + inter-chunk state) form. exp is only
 * taken of differences G_i - G_j with i >= j, and of G_i itself, all <= 0 for
 * decays g <= 0: no overflow however strong the decay. But G is an fp32 sum
 * (as fla's), so every exp(G_i - G_j) carries an absolute error of about
 * |G_i| u in its exponent even when G_i - G_j is small: with strong or mixed
 * decays over a chunk of 64 (|G| in the hundreds) that is this member's
 * largest error, and it grows with the chunk size.
 *
 * All arithmetic is float. With `bf16` set (fla_like_bf16), the values fla
 * keeps in bfloat16 are rounded to it where fla rounds them: see
 * chunk_config.bf16.
 */
#ifndef LACS_ZOO_LEGIT_CHUNKED_H
#define LACS_ZOO_LEGIT_CHUNKED_H

#include "legit_plugin.h"

typedef enum {
    STEP_NONE = 0,  /* the linear family: no correction */
    STEP_BETA = 1,  /* the delta rule family: b = beta */
    STEP_EFLA = 2   /* EFLA (E5): b = c(beta, ||k||^2) */
} step_kind;

typedef struct {
    step_kind step;
    int comba;     /* the correction reads the un-decayed state: Gq = exclusive cumsum */
    int postnorm;  /* linear_attn_postnorm: RMSNorm of each output row (H3) */
    int chunk;     /* C */
    /* fla in bf16 (chunk_gated_delta_rule, chunk_kda, chunk_comba,
     * chunk_simple_gla, chunk_gla with bf16 q, k, v): rounded to bf16 are
     *   - the operands fla casts before its tensor-core products: b k (.) exp(Gq)
     *     and b v (recompute_w_u), q (.) exp(G) for per-channel decays (the
     *     output kernel), the decayed v_new (scalar decay) or decayed k
     *     (per-channel) of the state update;
     *   - what fla stores between kernels: T (solve_tril's output, k's dtype),
     *     W and U, the per-chunk states S that the output kernel and v_new read,
     *     v_new, and the output o;
     *   - the intra-chunk attention matrix (q k^T masked and decayed) before it
     *     multiplies v_new.
     * The running state between chunks stays fp32, and so does ht. */
    int bf16;
    /* fla's exclusive cumsum of Comba, Gq_i = G_i - g_i (cumsum(g) - g, in
     * naive_chunk_comba and chunk_comba), instead of G_{i-1}: legitimate at
     * the required level, not exact (SPEC.md 11.7). G is then each prefix sum
     * correctly rounded, as torch.cumsum on the CPU returns it (a sequential
     * binary32 sum would give G_{i-1} back exactly most of the time).
     * LACS_ZOO_COMBA=minus_g. */
    int comba_minus_g;
    /* The bug gate_sums_bf16 (LACS_ZOO_BUG): the prefix sums G stored in
     * bfloat16, as a kernel that keeps chunk_local_cumsum's output in the
     * input dtype would (SPEC.md 11.1 keeps them in binary32). */
    int gate_sums_bf16;
} chunk_config;

/* The log decay of token t, key channel c: gk, g, g_gamma or none (H4). */
static inline float chunk_log_decay(const legit_head *s, int64_t t, int64_t c)
{
    if (s->gk)
        return s->gk[t * s->K + c];
    if (s->g)
        return s->g[t];
    return s->g_gamma;
}

/* EFLA's coefficient (E5) in float: c = beta phi(beta ||k||^2),
 * phi(x) = -expm1(-x) / x, its series 1 - x/2 + x^2/6 below 1e-7 so that
 * ||k|| = 0 gives c = beta exactly. */
static inline float chunk_efla_coefficient(float beta, const float *k, int64_t K)
{
    float knorm2 = 0;
    for (int64_t c = 0; c < K; c++)
        knorm2 = legit_madd(k[c], k[c], knorm2);
    const float x = beta * knorm2;
    const float phi = fabsf(x) < 1e-7f ? 1 - x / 2 + x * x / 6 : -expm1f(-x) / x;
    return beta * phi;
}

static inline float chunk_round(const chunk_config *cfg, float x)
{
    return cfg->bf16 ? legit_round_bf16(x) : x;
}

/* Workspace for one chunk of at most C tokens. */
typedef struct {
    float *G, *Gq;      /* [C][K]: cumulative log decays per channel (a scalar decay: the same in each) */
    float *b;           /* [C] step sizes */
    float *A;           /* [C][C]: A (strictly lower) */
    float *T;           /* [C][C] */
    float *kb, *vb;     /* [C][K], [C][V]: b k (.) exp(Gq), b v */
    float *W, *U;       /* [C][K], [C][V] */
    float *S;           /* [K][V]: the chunk's starting state as the kernels read it */
    float *v_new;       /* [C][V] */
    float *P;           /* [C][C]: the intra-chunk attention matrix */
    float *qg, *kd, *vd; /* [K], [C][K], [C][V]: decayed operands */
} chunk_workspace;

static inline void chunk_workspace_free(chunk_workspace *w)
{
    free(w->G);
    free(w->Gq);
    free(w->b);
    free(w->A);
    free(w->T);
    free(w->kb);
    free(w->vb);
    free(w->W);
    free(w->U);
    free(w->S);
    free(w->v_new);
    free(w->P);
    free(w->qg);
    free(w->kd);
    free(w->vd);
}

static inline int chunk_workspace_alloc(chunk_workspace *w, int64_t C, int64_t K, int64_t V)
{
    memset(w, 0, sizeof *w);
    w->G = malloc((size_t)(C * K) * sizeof(float));
    w->Gq = malloc((size_t)(C * K) * sizeof(float));
    w->b = malloc((size_t)C * sizeof(float));
    w->A = malloc((size_t)(C * C) * sizeof(float));
    w->T = malloc((size_t)(C * C) * sizeof(float));
    w->kb = malloc((size_t)(C * K) * sizeof(float));
    w->vb = malloc((size_t)(C * V) * sizeof(float));
    w->W = malloc((size_t)(C * K) * sizeof(float));
    w->U = malloc((size_t)(C * V) * sizeof(float));
    w->S = malloc((size_t)(K * V) * sizeof(float));
    w->v_new = malloc((size_t)(C * V) * sizeof(float));
    w->P = malloc((size_t)(C * C) * sizeof(float));
    w->qg = malloc((size_t)K * sizeof(float));
    w->kd = malloc((size_t)(C * K) * sizeof(float));
    w->vd = malloc((size_t)(C * V) * sizeof(float));
    if (w->G && w->Gq && w->b && w->A && w->T && w->kb && w->vb && w->W && w->U && w->S && w->v_new && w->P &&
        w->qg && w->kd && w->vd)
        return 0;
    chunk_workspace_free(w);
    return LEGIT_ERR_MEMORY;
}

/* sum_c x_c y_c exp(Gx_c - Gy_c): the decayed product of two rows (for a
 * scalar decay, one exp outside the sum). */
static inline float chunk_decayed_dot(int64_t K, int per_channel, const float *x, const float *Gx, const float *y,
                                      const float *Gy)
{
    float sum = 0;
    if (per_channel) {
        for (int64_t c = 0; c < K; c++)
            sum = legit_madd(x[c] * y[c], expf(Gx[c] - Gy[c]), sum);
        return sum;
    }
    for (int64_t c = 0; c < K; c++)
        sum = legit_madd(x[c], y[c], sum);
    return sum * expf(Gx[0] - Gy[0]);
}

/* One chunk of n tokens starting at token t0 of the head; h [K][V] is the
 * running (fp32) state, updated in place; o rows t0..t0+n-1 written. */
static inline void chunk_step(const chunk_config *cfg, const legit_head *s, int64_t t0, int64_t n, float *h, float *o,
                              chunk_workspace *w)
{
    const int64_t K = s->K, V = s->V;
    const int per_channel = s->gk != NULL;
    const float *q = s->q + t0 * K, *k = s->k + t0 * K, *v = s->v + t0 * V;

    /* cumulative log decays within the chunk (fp32, as chunk_local_cumsum; with comba_minus_g each
     * rounded from a double running sum, as torch.cumsum on the CPU gives it to naive_chunk_comba) */
    for (int64_t c = 0; c < K; c++) {
        double running = 0;
        for (int64_t i = 0; i < n; i++) {
            const float decay = chunk_log_decay(s, t0 + i, c);
            running += decay;
            w->G[i * K + c] = cfg->comba_minus_g ? (float)running : (i ? w->G[(i - 1) * K + c] : 0) + decay;
            if (cfg->gate_sums_bf16)
                w->G[i * K + c] = legit_round_bf16(w->G[i * K + c]);
            w->Gq[i * K + c] = !cfg->comba        ? w->G[i * K + c]
                               : cfg->comba_minus_g ? w->G[i * K + c] - decay
                                                    : (i ? w->G[(i - 1) * K + c] : 0);
        }
    }

    /* the chunk's starting state as the kernels read it (fla stores it per chunk) */
    for (int64_t i = 0; i < K * V; i++)
        w->S[i] = chunk_round(cfg, h[i]);

    if (cfg->step == STEP_NONE) {
        for (int64_t i = 0; i < n * V; i++)
            w->v_new[i] = v[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            w->b[i] = cfg->step == STEP_EFLA ? chunk_efla_coefficient(s->beta[t0 + i], k + i * K, K) : s->beta[t0 + i];
        /* A, strictly lower (chunk_scaled_dot_kkt), then T = (I + A)^{-1} by
         * forward substitution (solve_tril): T_ij = -sum_{m=j}^{i-1} A_im T_mj */
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < i; j++)
                w->A[i * n + j] =
                    w->b[i] * chunk_decayed_dot(K, per_channel, k + i * K, w->Gq + i * K, k + j * K, w->G + j * K);
        for (int64_t i = 0; i < n; i++) {
            for (int64_t j = 0; j < i; j++) {
                float sum = 0;
                for (int64_t m = j; m < i; m++)
                    sum = legit_madd(w->A[i * n + m], w->T[m * n + j], sum);
                w->T[i * n + j] = -sum;
            }
            w->T[i * n + i] = 1;
            for (int64_t j = i + 1; j < n; j++)
                w->T[i * n + j] = 0;
        }
        for (int64_t i = 0; i < n * n; i++)
            w->T[i] = chunk_round(cfg, w->T[i]);
        /* W = T (b k (.) exp(Gq)), U = T (b v) (recompute_w_u) */
        for (int64_t j = 0; j < n; j++) {
            for (int64_t c = 0; c < K; c++)
                w->kb[j * K + c] = chunk_round(cfg, w->b[j] * k[j * K + c] * expf(w->Gq[j * K + c]));
            for (int64_t c = 0; c < V; c++)
                w->vb[j * V + c] = chunk_round(cfg, w->b[j] * v[j * V + c]);
        }
        for (int64_t i = 0; i < n; i++) {
            for (int64_t c = 0; c < K; c++) {
                float sum = 0;
                for (int64_t j = 0; j <= i; j++)
                    sum = legit_madd(w->T[i * n + j], w->kb[j * K + c], sum);
                w->W[i * K + c] = chunk_round(cfg, sum);
            }
            for (int64_t c = 0; c < V; c++) {
                float sum = 0;
                for (int64_t j = 0; j <= i; j++)
                    sum = legit_madd(w->T[i * n + j], w->vb[j * V + c], sum);
                w->U[i * V + c] = chunk_round(cfg, sum);
            }
        }
        /* v_new = U - W S */
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < V; c++) {
                float ws = 0;
                for (int64_t r = 0; r < K; r++)
                    ws = legit_madd(w->W[i * K + r], w->S[r * V + c], ws);
                w->v_new[i * V + c] = chunk_round(cfg, w->U[i * V + c] - ws);
            }
    }

    /* o = scale ((q (.) exp(G)) S + P v_new), P the masked, decayed q k^T */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j <= i; j++)
            w->P[i * n + j] =
                chunk_round(cfg, chunk_decayed_dot(K, per_channel, q + i * K, w->G + i * K, k + j * K, w->G + j * K));
    for (int64_t i = 0; i < n; i++) {
        float *out = o + (t0 + i) * V;
        for (int64_t c = 0; c < K; c++)
            w->qg[c] = per_channel ? chunk_round(cfg, q[i * K + c] * expf(w->G[i * K + c])) : q[i * K + c];
        const float row_decay = per_channel ? 1 : expf(w->G[i * K]);
        for (int64_t c = 0; c < V; c++) {
            float inter = 0, intra = 0;
            for (int64_t r = 0; r < K; r++)
                inter = legit_madd(w->qg[r], w->S[r * V + c], inter);
            for (int64_t j = 0; j <= i; j++)
                intra = legit_madd(w->P[i * n + j], w->v_new[j * V + c], intra);
            out[c] = s->scale * legit_madd(inter, row_decay, intra);
        }
        if (cfg->postnorm) {
            /* the kernel's output (bf16 in fla_like_bf16), then RMSNorm in fp32 */
            for (int64_t c = 0; c < V; c++)
                out[c] = chunk_round(cfg, out[c]);
            legit_rms_normalize(V, s->eps, out);
        }
        for (int64_t c = 0; c < V; c++)
            out[c] = chunk_round(cfg, out[c]);
    }

    /* S <- exp(G_last) (.) S + sum_j (k_j (.) exp(G_last - G_j)) v_new_j^T, in fp32 */
    const float *G_last = w->G + (n - 1) * K;
    for (int64_t j = 0; j < n; j++) {
        for (int64_t c = 0; c < K; c++)
            w->kd[j * K + c] =
                per_channel ? chunk_round(cfg, k[j * K + c] * expf(G_last[c] - w->G[j * K + c])) : k[j * K + c];
        const float decay = per_channel ? 1 : expf(G_last[0] - w->G[j * K]);
        for (int64_t c = 0; c < V; c++)
            w->vd[j * V + c] = per_channel ? w->v_new[j * V + c] : chunk_round(cfg, w->v_new[j * V + c] * decay);
    }
    for (int64_t r = 0; r < K; r++) {
        const float state_decay = expf(G_last[r]);
        for (int64_t c = 0; c < V; c++) {
            float sum = h[r * V + c] * state_decay;
            for (int64_t j = 0; j < n; j++)
                sum = legit_madd(w->kd[j * K + r], w->vd[j * V + c], sum);
            h[r * V + c] = sum;
        }
    }
}

/* legit_kernel: one (sequence, value head), chunk after chunk. */
static inline int chunk_kernel(const legit_head *s, float *h, float *o, void *context)
{
    const chunk_config *cfg = context;
    chunk_workspace w;
    if (chunk_workspace_alloc(&w, cfg->chunk, s->K, s->V))
        return LEGIT_ERR_MEMORY;
    for (int64_t t0 = 0; t0 < s->T; t0 += cfg->chunk) {
        const int64_t n = s->T - t0 < cfg->chunk ? s->T - t0 : cfg->chunk;
        chunk_step(cfg, s, t0, n, h, o, &w);
    }
    chunk_workspace_free(&w);
    return 0;
}

/* The ops of the chunked members: the configuration and the inputs each
 * requires besides q, k, v (SPEC.md 4.1-4.7; gated_delta_rule takes g or gk). */
static const struct {
    const char *op;
    step_kind step;
    int comba, postnorm;
    const char *required;
} chunk_ops[] = {
    {"linear_attn", STEP_NONE, 0, 0, ""},
    {"linear_attn_postnorm", STEP_NONE, 0, 1, ""},
    {"retention", STEP_NONE, 0, 0, "g_gamma"},
    {"simple_gla", STEP_NONE, 0, 0, "g"},
    {"gla", STEP_NONE, 0, 0, "gk"},
    {"delta_rule", STEP_BETA, 0, 0, "beta"},
    {"gated_delta_rule", STEP_BETA, 0, 0, "beta"},
    {"comba", STEP_BETA, 1, 0, "beta g"},
    {"efla", STEP_EFLA, 0, 0, "beta"},
};

/* 0 with *cfg set, LACS_UNSUPPORTED for an op not in the table, or an error
 * if a required input is missing. */
static inline int chunk_config_for(const char *member, const char *op, const lacs_tensor *inputs, int n_inputs,
                                   chunk_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < sizeof chunk_ops / sizeof chunk_ops[0]; i++) {
        if (strcmp(op, chunk_ops[i].op) != 0)
            continue;
        cfg->step = chunk_ops[i].step;
        cfg->comba = chunk_ops[i].comba;
        cfg->postnorm = chunk_ops[i].postnorm;
        const char *missing = legit_missing_input(inputs, n_inputs, chunk_ops[i].required);
        const int gates = !!legit_find(inputs, n_inputs, "g") + !!legit_find(inputs, n_inputs, "gk");
        if (missing) {
            fprintf(stderr, "%s: %s: input '%s' is required\n", member, op, missing);
            return LEGIT_ERR_INPUT;
        }
        if (strcmp(op, "gated_delta_rule") == 0 && gates != 1) {
            fprintf(stderr, "%s: %s: exactly one of the inputs 'g' and 'gk' is required\n", member, op);
            return LEGIT_ERR_INPUT;
        }
        return 0;
    }
    return LACS_UNSUPPORTED;
}

/* A whole call of a chunked member: the inputs, the chunk size from
 * LACS_ZOO_CHUNK (16, 32 or 64; default 64), every (sequence, head). */
static inline int chunk_run(const char *member, int bf16, const char *op, const lacs_tensor *inputs, int n_inputs,
                            const lacs_param *params, int n_params, lacs_tensor *outputs, int n_outputs)
{
    chunk_config cfg;
    int rc = chunk_config_for(member, op, inputs, n_inputs, &cfg);
    if (rc)
        return rc;
    const long chunk = legit_env_long("LACS_ZOO_CHUNK", 64);
    if (chunk != 16 && chunk != 32 && chunk != 64) {
        fprintf(stderr, "%s: LACS_ZOO_CHUNK must be 16, 32 or 64\n", member);
        return LEGIT_ERR_INPUT;
    }
    cfg.chunk = (int)chunk;
    cfg.bf16 = bf16;
    const char *comba = getenv("LACS_ZOO_COMBA"), *bug = getenv("LACS_ZOO_BUG");
    if (comba && *comba && strcmp(comba, "minus_g") != 0 && strcmp(comba, "exclusive") != 0) {
        fprintf(stderr, "%s: LACS_ZOO_COMBA must be exclusive (the default) or minus_g\n", member);
        return LEGIT_ERR_INPUT;
    }
    if (bug && *bug && strcmp(bug, "none") != 0 && strcmp(bug, "gate_sums_bf16") != 0) {
        fprintf(stderr, "%s: LACS_ZOO_BUG=%s is not one of this member's bugs: gate_sums_bf16 (or none)\n", member,
                bug);
        return LEGIT_ERR_INPUT;
    }
    cfg.comba_minus_g = comba && strcmp(comba, "minus_g") == 0;
    cfg.gate_sums_bf16 = bug && strcmp(bug, "gate_sums_bf16") == 0;
    legit_problem p;
    rc = legit_problem_load(member, op, inputs, n_inputs, params, n_params, &p);
    if (rc)
        return rc;
    if (bf16 && !p.bf16_tier) {
        legit_problem_free(&p);
        return LACS_UNSUPPORTED; /* fla_like_bf16 is for bf16 inputs only */
    }
    float *o = legit_output(member, op, outputs, n_outputs, "o", 4, p.B, p.T, p.HV, p.V);
    float *ht = NULL;
    if (legit_find(outputs, n_outputs, "ht"))
        ht = legit_output(member, op, outputs, n_outputs, "ht", 4, p.n_seqs, p.HV, p.K, p.V);
    if (!o || (legit_find(outputs, n_outputs, "ht") && !ht))
        rc = LEGIT_ERR_INPUT;
    if (rc == 0)
        rc = legit_run_per_head(&p, 1, chunk_kernel, &cfg, o, ht);
    legit_problem_free(&p);
    return rc;
}

#endif

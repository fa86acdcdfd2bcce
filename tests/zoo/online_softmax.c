/* Zoo member `online_softmax` (legitimate): softmax_attn (H1) and fox (H10)
 * as FlashAttention computes them, in fp32.
 *
 * For each query i the keys j <= i are visited in blocks of LACS_ZOO_BLOCK
 * (default 64) tokens, never as a whole row: a running maximum m, a running
 * sum l and a running output acc; at each block the scores
 *   s_ij = scale q_i . k_j + bias_ij
 * raise m to m' = max(m, max_j s_ij), acc and l are rescaled by exp(m - m'),
 * and p_ij = exp(s_ij - m') is added to l and p_ij v_j to acc; o_i = acc / l.
 * (FlashAttention tiles queries too; each query's arithmetic is the same.)
 *
 * fox's bias is fla's parallel_forgetting_attn's: G_i - G_j with G the fp32
 * prefix sums of g over the sequence (chunk_global_cumsum), or for ALiBi
 * g_gamma (i - j). Being an fp32 sum, G_i carries an absolute error of about
 * |G_i| u into every logit of row i, even where G_i - G_j is small: under
 * strong or mixed gates that is this member's largest error. A gate g_t = -inf (a hard reset, SPEC.md 4.10) would make
 * G_i - G_j = -inf - (-inf) = NaN, so the prefix sums restart after each
 * -inf and a key before the last reset gets bias -inf (weight 0): the
 * component form's meaning, kept in prefix-sum arithmetic.
 *
 * With LACS_ZOO_P_BF16=1 (bf16 tier only; fp32-tier cases are then
 * LACS_UNSUPPORTED) it does what FlashAttention does on bf16 tensors: P is
 * rounded to bf16 before P V (the row sum l is taken from the fp32 P) and the
 * output is rounded to bf16. The _fma build does each multiply-add with one
 * rounding (fmaf). Every other op is LACS_UNSUPPORTED.
 *
 * Legitimate: the online softmax is exact in exact arithmetic (the rescaling
 * cancels), and in fp32 it only reorders and rescales the sums.
 */
#include "legit_plugin.h"

typedef struct {
    int64_t block;  /* keys per block */
    int p_bf16;     /* LACS_ZOO_P_BF16=1 */
    int fox;        /* fox (bias from g or g_gamma), else softmax_attn */
} online_config;

/* fox's bias for (query i, key j <= i): ALiBi's g_gamma (i - j), or G_i - G_j
 * within one reset segment and -inf across a reset. */
static float fox_bias(const legit_head *s, const float *G, const int64_t *segment, int64_t i, int64_t j)
{
    if (!s->g)
        return s->g_gamma * (float)(i - j);
    return segment[i] == segment[j] ? G[i] - G[j] : -INFINITY;
}

static int online_kernel(const legit_head *s, float *h, float *o, void *context)
{
    (void)h; /* no state */
    const online_config *cfg = context;
    const int64_t T = s->T, K = s->K, V = s->V;
    float *G = malloc((size_t)(T + 1) * sizeof *G), *scores = malloc((size_t)cfg->block * sizeof *scores);
    float *acc = malloc((size_t)V * sizeof *acc);
    int64_t *segment = malloc((size_t)(T + 1) * sizeof *segment);
    if (!G || !scores || !acc || !segment) {
        free(G);
        free(scores);
        free(acc);
        free(segment);
        return LEGIT_ERR_MEMORY;
    }
    /* fp32 prefix sums of g (fla's g_cumsum), restarting after each -inf */
    for (int64_t t = 0; s->g && t < T; t++) {
        const int reset = s->g[t] == -INFINITY;
        segment[t] = (t ? segment[t - 1] : 0) + reset;
        G[t] = reset ? 0 : (t ? G[t - 1] : 0) + s->g[t];
    }

    for (int64_t i = 0; i < T; i++) {
        const float *q = s->q + i * K;
        float m = -INFINITY, l = 0;
        for (int64_t c = 0; c < V; c++)
            acc[c] = 0;
        for (int64_t j0 = 0; j0 <= i; j0 += cfg->block) {
            const int64_t j1 = j0 + cfg->block <= i + 1 ? j0 + cfg->block : i + 1;
            float block_max = -INFINITY;
            for (int64_t j = j0; j < j1; j++) {
                float dot = 0;
                for (int64_t c = 0; c < K; c++)
                    dot = legit_madd(q[c], s->k[j * K + c], dot);
                float score = s->scale * dot;
                if (cfg->fox)
                    score += fox_bias(s, G, segment, i, j);
                scores[j - j0] = score;
                if (score > block_max)
                    block_max = score;
            }
            if (block_max == -INFINITY)
                continue; /* every key of the block behind a reset: weight 0 */
            const float m_new = block_max > m ? block_max : m;
            const float rescale = expf(m - m_new); /* exp(-inf) = 0 before the first block */
            l *= rescale;
            for (int64_t c = 0; c < V; c++)
                acc[c] *= rescale;
            for (int64_t j = j0; j < j1; j++) {
                const float p = expf(scores[j - j0] - m_new);
                l += p;
                const float p_used = cfg->p_bf16 ? legit_round_bf16(p) : p;
                for (int64_t c = 0; c < V; c++)
                    acc[c] = legit_madd(p_used, s->v[j * V + c], acc[c]);
            }
            m = m_new;
        }
        for (int64_t c = 0; c < V; c++) {
            const float out = acc[c] / l;
            o[i * V + c] = cfg->p_bf16 ? legit_round_bf16(out) : out;
        }
    }
    free(G);
    free(scores);
    free(acc);
    free(segment);
    return 0;
}

__attribute__((visibility("default"))) int lacs_plugin_run(const char *op, const lacs_tensor *inputs,
                                                            int n_inputs, const lacs_param *params,
                                                            int n_params, lacs_tensor *outputs,
                                                            int n_outputs)
{
    const char *member = "online_softmax";
    online_config cfg = {0};
    if (strcmp(op, "fox") == 0)
        cfg.fox = 1;
    else if (strcmp(op, "softmax_attn") != 0)
        return LACS_UNSUPPORTED;
    const long block = legit_env_long("LACS_ZOO_BLOCK", 64);
    const long p_bf16 = legit_env_long("LACS_ZOO_P_BF16", 0);
    if (block < 1 || p_bf16 < 0 || p_bf16 > 1) {
        fprintf(stderr, "%s: LACS_ZOO_BLOCK must be >= 1 and LACS_ZOO_P_BF16 0 or 1\n", member);
        return LEGIT_ERR_INPUT;
    }
    cfg.block = block;
    cfg.p_bf16 = (int)p_bf16;
    const int gates = !!legit_find(inputs, n_inputs, "g") + !!legit_find(inputs, n_inputs, "g_gamma");
    if (cfg.fox && gates != 1) {
        fprintf(stderr, "%s: fox: exactly one of the inputs 'g' and 'g_gamma' is required\n", member);
        return LEGIT_ERR_INPUT;
    }
    if (!cfg.fox && gates != 0) {
        fprintf(stderr, "%s: softmax_attn: no gate may be given\n", member);
        return LEGIT_ERR_INPUT;
    }

    legit_problem p;
    int rc = legit_problem_load(member, op, inputs, n_inputs, params, n_params, &p);
    if (rc)
        return rc;
    if (p.beta || p.gk || p.h0) {
        fprintf(stderr, "%s: %s reads no beta, gk or h0\n", member, op);
        rc = LEGIT_ERR_INPUT;
    } else if (cfg.p_bf16 && !p.bf16_tier) {
        rc = LACS_UNSUPPORTED; /* P in bf16 is FlashAttention on bf16 tensors */
    }
    float *o = rc ? NULL : legit_output(member, op, outputs, n_outputs, "o", 4, p.B, p.T, p.HV, p.V);
    if (rc == 0 && !o)
        rc = LEGIT_ERR_INPUT;
    if (rc == 0)
        rc = legit_run_per_head(&p, 0, online_kernel, &cfg, o, NULL);
    legit_problem_free(&p);
    return rc;
}

/* Zoo member `ggml_like` (legitimate): gated_delta_rule (g or gk) and
 * delta_rule the way ggml's CPU backend computes its gated_delta_net, one
 * token at a time in fp32 (ggml-org/ggml d99724f,
 * src/ggml-cpu/ops.cpp, ggml_compute_forward_gated_delta_net_one_chunk;
 * SPEC.md 7.2), written here from that reading, not copied:
 *
 *   S <- exp(g_t) S                        (per key row with gk: KDA)
 *   delta_j = (v_j - sum_i S_ij k_i) beta  (beta applied after the difference)
 *   S_ij += k_i delta_j
 *   o_j = (sum_i S_ij q_i) scale           (scale applied after the dot)
 *
 * with the state stored transposed (row j of the buffer is column j of S, as
 * ggml keeps it) and ggml's vector kernels on x86 with AVX2: a dot product
 * over blocks of 32 in four 8-lane accumulators with FMA, reduced pairwise,
 * the remainder added in float; y += x v and y *= v by FMA over blocks of 32,
 * the remainder plainly. expf is the libm's. ggml fixes scale = V^-1/2 and
 * needs K = V; this member takes lacs's scale and any K, V, so that it runs
 * every case of the two ops (the loop is ggml's, the parameters lacs's).
 * Other ops are LACS_UNSUPPORTED.
 *
 * Legitimate: this is llama.cpp's Qwen3-Next path on the CPU; the tier's
 * tolerance must accept it.
 */
#include "legit_plugin.h"

#define GGML_STEP 32 /* GGML_F32_STEP: 4 registers of 8 lanes (AVX2) */

/* ggml_vec_dot_f32: blocks of 32 into 4 x 8 FMA accumulators, reduced
 * pairwise (x0 + x2, x1 + x3, then the two, then the 8 lanes by halves),
 * then the remainder added one product at a time in float. */
static float ggml_dot(int64_t n, const float *x, const float *y)
{
    const int64_t np = n & ~(int64_t)(GGML_STEP - 1);
    float acc[4][8] = {{0}};
    for (int64_t i = 0; i < np; i += GGML_STEP)
        for (int r = 0; r < 4; r++)
            for (int l = 0; l < 8; l++)
                acc[r][l] = fmaf(x[i + r * 8 + l], y[i + r * 8 + l], acc[r][l]);
    float lanes[8];
    for (int l = 0; l < 8; l++)
        lanes[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    float quad[4];
    for (int l = 0; l < 4; l++)
        quad[l] = lanes[l] + lanes[l + 4];
    float sum = (quad[0] + quad[1]) + (quad[2] + quad[3]);
    for (int64_t i = np; i < n; i++)
        sum += x[i] * y[i];
    return sum;
}

/* ggml_vec_mad_f32: y += x v (FMA over blocks of 32, then plainly). */
static void ggml_mad(int64_t n, float *y, const float *x, float v)
{
    const int64_t np = n & ~(int64_t)(GGML_STEP - 1);
    for (int64_t i = 0; i < np; i++)
        y[i] = fmaf(x[i], v, y[i]);
    for (int64_t i = np; i < n; i++)
        y[i] += x[i] * v;
}

/* legit_kernel: one (sequence, value head). h [K][V] in and out (lacs's
 * layout); the loop works on M [V][K] = h^T, ggml's. */
static int ggml_kernel(const legit_head *s, float *h, float *o, void *context)
{
    (void)context;
    const int64_t K = s->K, V = s->V;
    float *M = malloc((size_t)(K * V) * sizeof *M), *delta = malloc((size_t)(K > V ? K : V) * sizeof *delta);
    if (!M || !delta) {
        free(M);
        free(delta);
        return LEGIT_ERR_MEMORY;
    }
    for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++)
            M[j * K + i] = h[i * V + j];
    for (int64_t t = 0; t < s->T; t++) {
        const float *q = s->q + t * K, *k = s->k + t * K, *v = s->v + t * V;
        if (s->gk) {
            for (int64_t i = 0; i < K; i++)
                delta[i] = expf(s->gk[t * K + i]);
            for (int64_t j = 0; j < V; j++)
                for (int64_t i = 0; i < K; i++)
                    M[j * K + i] *= delta[i];
        } else if (s->g) {
            const float decay = expf(s->g[t]);
            for (int64_t i = 0; i < K * V; i++)
                M[i] *= decay;
        }
        const float beta = s->beta[t];
        for (int64_t j = 0; j < V; j++)
            delta[j] = (v[j] - ggml_dot(K, M + j * K, k)) * beta;
        for (int64_t j = 0; j < V; j++)
            ggml_mad(K, M + j * K, k, delta[j]);
        for (int64_t j = 0; j < V; j++)
            o[t * V + j] = ggml_dot(K, M + j * K, q) * s->scale;
    }
    for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++)
            h[i * V + j] = M[j * K + i];
    free(M);
    free(delta);
    return 0;
}

__attribute__((visibility("default"))) int lacs_plugin_run(const char *op, const lacs_tensor *inputs,
                                                            int n_inputs, const lacs_param *params,
                                                            int n_params, lacs_tensor *outputs,
                                                            int n_outputs)
{
    const char *member = "ggml_like";
    if (strcmp(op, "gated_delta_rule") != 0 && strcmp(op, "delta_rule") != 0)
        return LACS_UNSUPPORTED;
    const char *missing = legit_missing_input(inputs, n_inputs, "beta");
    if (missing) {
        fprintf(stderr, "%s: %s: input '%s' is required\n", member, op, missing);
        return LEGIT_ERR_INPUT;
    }
    legit_problem p;
    int rc = legit_problem_load(member, op, inputs, n_inputs, params, n_params, &p);
    if (rc)
        return rc;
    float *o = legit_output(member, op, outputs, n_outputs, "o", 4, p.B, p.T, p.HV, p.V);
    float *ht = NULL;
    if (legit_find(outputs, n_outputs, "ht"))
        ht = legit_output(member, op, outputs, n_outputs, "ht", 4, p.n_seqs, p.HV, p.K, p.V);
    if (!o || (legit_find(outputs, n_outputs, "ht") && !ht))
        rc = LEGIT_ERR_INPUT;
    if (rc == 0)
        rc = legit_run_per_head(&p, 1, ggml_kernel, NULL, o, ht);
    legit_problem_free(&p);
    return rc;
}

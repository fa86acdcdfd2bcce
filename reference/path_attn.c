/* PaTH attention (H12): softmax attention whose logits see k_j through the
 * delta rule's transitions, q_i^T R_ij k_j with R_ij = H_i H_{i-1} ... H_{j+1},
 * H_t = I - beta_t w_t w_t^T (R_jj = I). SPEC.md 4.12.
 *
 * fla (parallel_path_attention) takes w L2-normalised and beta = 2 sigmoid(.)
 * in (0, 2); the reference takes both as given, beta >= 0 (the matrix form
 * absorbs it as sqrt(beta) w). The optional log forget gate g (PaTH-FoX) is
 * added *before* the scale, as in fla:
 *   l_ij = scale (q_i^T R_ij k_j + G_i - G_j),  G_i - G_j = sum_{tau=j+1..i} g_tau,
 * then o_i = sum_{j<=i} softmax_j(l_ij) v_j. (FoX, H10, adds its gate after.)
 * Three forms of the same logits:
 *   path_attn            for each (i, j): x = k_j, then x = H_t x for
 *                        t = j+1, ..., i, so that x = H_i ... H_{j+1} k_j;
 *   path_attn_recursive  R_ij as a K x K matrix, R_ij = H_i R_{i-1,j};
 *   path_attn_matrix     A = (QK^T) (.) M - ((QW^T) (.) M) T ((WK^T) (.) (M - I)),
 *                        T = (I + (WW^T) (.) (M - I))^{-1}, W's rows sqrt(beta_t) w_t.
 */
#include <stdlib.h>

#include "internal.h"

/* The shared last step: L [T][T] holds q_i^T R_ij k_j for j <= i (and for the
 * recursive and matrix forms anything above); adds the gate, scales, and
 * applies the causal softmax to V. The gate here uses prefix sums (fla's
 * g_cumsum); the explicit form passes gate_done = 1 having added its own. */
static void logits_to_output(const sequence_head *s, real *L, int gate_done, real *o)
{
    const int64_t T = s->T;
    real G_i = 0;
    for (int64_t i = 0; i < T; i++) {
        if (s->g && !gate_done)
            G_i += s->g[i];
        real G_j = 0;
        for (int64_t j = 0; j <= i; j++) {
            if (s->g && !gate_done)
                G_j += s->g[j];
            L[i * T + j] = s->scale * (L[i * T + j] + ((s->g && !gate_done) ? G_i - G_j : 0));
        }
    }
    REFI(causal_softmax)(T, 0, L);
    REFI(matmul)(T, T, s->V, L, s->v, o);
}

/* x -= beta_t w_t (w_t . x): one transition H_t applied to a vector. */
static void apply_transition(const sequence_head *s, int64_t t, real *x)
{
    const real *w = s->w + t * s->K;
    const real coef = s->beta[t] * REFI(dot)(s->K, w, x);
    for (int64_t c = 0; c < s->K; c++)
        x[c] -= coef * w[c];
}

/* The obviously correct form: every (i, j) on its own, gate summed over
 * tau = j+1..i directly. */
static int path_kernel(const sequence_head *s, real *h, real *o)
{
    (void)h;
    const int64_t T = s->T, K = s->K;
    real *L = malloc((size_t)(T * T + 1) * sizeof(real));
    real *x = malloc((size_t)K * sizeof(real));
    if (!L || !x) {
        free(L);
        free(x);
        return LACS_ERR_MEMORY;
    }
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j <= i; j++) {
            for (int64_t c = 0; c < K; c++)
                x[c] = s->k[j * K + c];
            real gate = 0;
            for (int64_t t = j + 1; t <= i; t++) {
                apply_transition(s, t, x);
                gate += s->g ? s->g[t] : 0;
            }
            L[i * T + j] = REFI(dot)(K, s->q + i * K, x) + gate;
        }
    logits_to_output(s, L, 1, o);
    free(L);
    free(x);
    return LACS_OK;
}

/* H12's recursion R_ij = H_i R_{i-1,j} on the whole K x K matrix:
 * R <- R - beta_i w_i (w_i^T R). */
static int path_recursive_kernel(const sequence_head *s, real *h, real *o)
{
    (void)h;
    const int64_t T = s->T, K = s->K;
    real *L = malloc((size_t)(T * T + 1) * sizeof(real));
    real *R = malloc((size_t)(K * K) * sizeof(real));
    real *wR = malloc((size_t)K * sizeof(real));
    real *Rk = malloc((size_t)K * sizeof(real));
    if (!L || !R || !wR || !Rk) {
        free(L);
        free(R);
        free(wR);
        free(Rk);
        return LACS_ERR_MEMORY;
    }
    for (int64_t j = 0; j < T; j++) {
        for (int64_t r = 0; r < K * K; r++)
            R[r] = (r % (K + 1) == 0) ? 1 : 0;
        for (int64_t i = j; i < T; i++) {
            if (i > j) {
                const real *w = s->w + i * K;
                for (int64_t c = 0; c < K; c++) {
                    wR[c] = 0;
                    for (int64_t r = 0; r < K; r++)
                        wR[c] += w[r] * R[r * K + c];
                }
                for (int64_t r = 0; r < K; r++)
                    for (int64_t c = 0; c < K; c++)
                        R[r * K + c] -= s->beta[i] * w[r] * wR[c];
            }
            REFI(matmul)(K, K, 1, R, s->k + j * K, Rk);
            L[i * T + j] = REFI(dot)(K, s->q + i * K, Rk);
        }
    }
    logits_to_output(s, L, 0, o);
    free(L);
    free(R);
    free(wR);
    free(Rk);
    return LACS_OK;
}

/* H12's matrix form. With W~ = diag(sqrt(beta)) W, X = T ((W~K^T) (.) (M - I))
 * solves (I + (W~W~^T) (.) (M - I)) X = (W~K^T) (.) (M - I) by forward
 * substitution, and A = (QK^T) (.) M - ((QW~^T) (.) M) X. */
static int path_matrix_kernel(const sequence_head *s, real *h, real *o)
{
    (void)h;
    const int64_t T = s->T, K = s->K;
    const size_t tt = (size_t)(T * T + 1);
    real *Wt = malloc((size_t)(T * K + 1) * sizeof(real));
    real *WW = calloc(tt, sizeof(real)), *WK = calloc(tt, sizeof(real));
    real *QW = malloc(tt * sizeof(real)), *X = malloc(tt * sizeof(real));
    real *L = malloc(tt * sizeof(real));
    int rc = LACS_OK;
    if (!Wt || !WW || !WK || !QW || !X || !L) {
        rc = LACS_ERR_MEMORY;
        goto done;
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < K; c++)
            Wt[t * K + c] = sqrt(s->beta[t]) * s->w[t * K + c];
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) {
            WW[i * T + j] = j < i ? REFI(dot)(K, Wt + i * K, Wt + j * K) : 0;
            WK[i * T + j] = j < i ? REFI(dot)(K, Wt + i * K, s->k + j * K) : 0;
            QW[i * T + j] = j <= i ? REFI(dot)(K, s->q + i * K, Wt + j * K) : 0;
        }
    REFI(unit_lower_solve)(T, T, WW, WK, X);
    REFI(matmul)(T, T, T, QW, X, L);
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j <= i; j++)
            L[i * T + j] = REFI(dot)(K, s->q + i * K, s->k + j * K) - L[i * T + j];
    logits_to_output(s, L, 0, o);
done:
    free(Wt);
    free(WW);
    free(WK);
    free(QW);
    free(X);
    free(L);
    return rc;
}

static int run(const char *op, const lacs_dims *d, const lacs_inputs *in, head_kernel kernel, real *o)
{
    int rc = lacs_internal_validate(op, d, in, LACS_READS_W | LACS_READS_BETA, LACS_READS_G);
    if (!rc)
        rc = lacs_internal_check_beta_nonnegative(op, d, in, "the matrix form absorbs beta as sqrt(beta) w");
    return rc ? rc : REFI(run_per_head)(op, d, in, STATE_NONE, kernel, o, NULL, NULL);
}

int REF(path_attn)(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    return run("path_attn", d, in, path_kernel, o);
}

int REF(path_attn_recursive)(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    return run("path_attn_recursive", d, in, path_recursive_kernel, o);
}

int REF(path_attn_matrix)(const lacs_dims *d, const lacs_inputs *in, real *o)
{
    return run("path_attn_matrix", d, in, path_matrix_kernel, o);
}

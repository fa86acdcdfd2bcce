/* Linear attention and its decays: H2, H3, H4 (recurrent forms) and H9
 * (matrix forms). State h is K x V; o_t = scale h_t^T q_t (SPEC.md 4.1-4.3).
 *
 * The recurrent forms are the primary definition: one loop over t, the state
 * decayed, written, then read. The matrix forms are a second, independent route
 * through the T x T score matrix and must agree with them (tests/test_forms.c).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* H2 and H4: h_t = D_t h_{t-1} + k_t v_t^T, o_t = scale h_t^T q_t, with
 * D_t = I (linear_attn: no decay input), exp(g_gamma) I, exp(g_t) I or
 * diag(exp(gk_t)). Which decay applies is which input the op was given. */
static int decayed_recurrent_kernel(const sequence_head *s, real *h, real *o)
{
    const int64_t K = s->K, V = s->V;
    for (int64_t t = 0; t < s->T; t++) {
        for (int64_t c = 0; c < K; c++) {
            real factor = exp(lacs_internal_log_decay(s, t, c)); /* exactly 1 without decay */
            for (int64_t j = 0; j < V; j++)
                h[c * V + j] *= factor;
        }
        lacs_internal_state_add_outer(K, V, h, 1, s->k + t * K, s->v + t * V);
        lacs_internal_state_readout(K, V, h, s->q + t * K, s->scale, o + t * V);
    }
    return LACS_OK;
}

/* H3: the same recurrence, each o_t RMS-normalised over its V channels. */
static int postnorm_kernel(const sequence_head *s, real *h, real *o)
{
    int rc = decayed_recurrent_kernel(s, h, o);
    for (int64_t t = 0; t < s->T && rc == LACS_OK; t++)
        lacs_internal_rms_normalize(s->V, s->eps, o + t * s->V);
    return rc;
}

/* H9: O = scale ((Q K^T) (.) Gamma) V, plus the initial state seen through its
 * decay: o_i += scale sum_c q_ic Gamma^c_{i,-1} h0[c, :]. The final state is
 * h_T = Gamma_{T-1,-1} h0 + sum_j Gamma_{T-1,j} k_j v_j^T, channel by channel. */
static int decayed_matrix_kernel(const sequence_head *s, real *h, real *o)
{
    const int64_t T = s->T, K = s->K, V = s->V;
    real *A = malloc((size_t)(T * T + 1) * sizeof(real));
    real *h0_decay = malloc((size_t)(T * K + 1) * sizeof(real));
    int rc = (A && h0_decay) ? LACS_OK : LACS_ERR_MEMORY;
    if (rc == LACS_OK)
        rc = lacs_internal_decayed_scores(s, s->q, s->k, 0, A, h0_decay);
    for (int64_t i = 0; i < T && rc == LACS_OK; i++)
        for (int64_t c = 0; c < V; c++) {
            real sum = 0;
            for (int64_t j = 0; j <= i; j++)
                sum += A[i * T + j] * s->v[j * V + c];
            for (int64_t r = 0; r < K; r++)
                sum += s->q[i * K + r] * h0_decay[i * K + r] * h[r * V + c];
            o[i * V + c] = s->scale * sum;
        }
    if (rc == LACS_OK)
        lacs_internal_decayed_final_state(s, s->k, s->v, h);
    free(A);
    free(h0_decay);
    return rc;
}

static int run(const char *op, const lacs_dims *d, const lacs_inputs *in, unsigned decay_input,
               head_kernel kernel, real *o, real *ht)
{
    int rc = lacs_internal_validate(op, d, in, decay_input, LACS_READS_H0);
    return rc ? rc : lacs_internal_run_per_head(op, d, in, STATE_KV, kernel, o, ht, NULL);
}

int lacs_ref_linear_attn(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    return run("linear_attn", d, in, STATE_NONE, decayed_recurrent_kernel, o, ht);
}

int lacs_ref_linear_attn_postnorm(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    if (in && !(in->eps >= 0))
        return lacs_internal_error(LACS_ERR_PARAM, "linear_attn_postnorm", "eps = %g must be >= 0", in->eps);
    return run("linear_attn_postnorm", d, in, STATE_NONE, postnorm_kernel, o, ht);
}

int lacs_ref_retention(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    return run("retention", d, in, LACS_READS_G_GAMMA, decayed_recurrent_kernel, o, ht);
}

int lacs_ref_simple_gla(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    return run("simple_gla", d, in, LACS_READS_G, decayed_recurrent_kernel, o, ht);
}

int lacs_ref_gla(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    return run("gla", d, in, LACS_READS_GK, decayed_recurrent_kernel, o, ht);
}

int lacs_ref_linear_attn_matrix(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    return run("linear_attn_matrix", d, in, STATE_NONE, decayed_matrix_kernel, o, ht);
}

int lacs_ref_retention_matrix(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    return run("retention_matrix", d, in, LACS_READS_G_GAMMA, decayed_matrix_kernel, o, ht);
}

int lacs_ref_simple_gla_matrix(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    return run("simple_gla_matrix", d, in, LACS_READS_G, decayed_matrix_kernel, o, ht);
}

int lacs_ref_gla_matrix(const lacs_dims *d, const lacs_inputs *in, real *o, real *ht)
{
    return run("gla_matrix", d, in, LACS_READS_GK, decayed_matrix_kernel, o, ht);
}

/* ---- gradients (SPEC.md 4.19) ---- */

/* The adjoint of H2/H4, token by token in reverse. The forward is run again
 * first, keeping the state before each token (states[t], K x V); then, with dh
 * the cotangent of h_t (dht to start with):
 *   o_t = scale h_t^T q_t      dq_t = scale h_t do_t,   dh += scale q_t do_t^T
 *   h_t = h' + k_t v_t^T       dk_t = dh v_t,           dv_t = dh^T k_t
 *   h'  = D_t h_{t-1}          dlog[t][c] = sum_j dh[c][j] h'[c][j]   (d exp(x)/dx = exp(x))
 *                              dh <- D_t dh, the cotangent of h_{t-1}. */
static int decayed_recurrent_vjp_kernel(const sequence_head *s, real *h, const real *dout, real *dh, head_grads *g)
{
    const int64_t K = s->K, V = s->V, T = s->T;
    real *states = malloc((size_t)((T + 1) * K * V) * sizeof(real));
    real *decayed = malloc((size_t)(K * V) * sizeof(real));
    if (!states || !decayed) {
        free(states);
        free(decayed);
        return LACS_ERR_MEMORY;
    }
    for (int64_t t = 0; t < T; t++) { /* the forward, as decayed_recurrent_kernel */
        memcpy(states + t * K * V, h, (size_t)(K * V) * sizeof(real));
        for (int64_t c = 0; c < K; c++) {
            real factor = exp(lacs_internal_log_decay(s, t, c));
            for (int64_t j = 0; j < V; j++)
                h[c * V + j] *= factor;
        }
        lacs_internal_state_add_outer(K, V, h, 1, s->k + t * K, s->v + t * V);
    }
    memcpy(states + T * K * V, h, (size_t)(K * V) * sizeof(real));
    for (int64_t t = T - 1; t >= 0; t--) {
        const real *q = s->q + t * K, *k = s->k + t * K, *v = s->v + t * V;
        lacs_internal_readout_adjoint(K, V, states + (t + 1) * K * V, q, s->scale, dout + t * V, g->dq + t * K, dh);
        for (int64_t c = 0; c < K; c++)
            for (int64_t j = 0; j < V; j++) {
                g->dk[t * K + c] += dh[c * V + j] * v[j];
                g->dv[t * V + j] += dh[c * V + j] * k[c];
            }
        const real *prev = states + t * K * V;
        for (int64_t c = 0; c < K; c++) {
            real factor = exp(lacs_internal_log_decay(s, t, c));
            for (int64_t j = 0; j < V; j++) {
                decayed[c * V + j] = prev[c * V + j] * factor; /* h', as the forward computed it */
                g->dlog[t * K + c] += dh[c * V + j] * decayed[c * V + j];
                dh[c * V + j] *= factor;
            }
        }
        lacs_internal_state_rounded(K, V, dh);
    }
    lacs_internal_gate_gradient_rounded(s, g);
    free(states);
    free(decayed);
    return LACS_OK;
}

static int run_vjp(const char *op, const lacs_dims *d, const lacs_inputs *in, unsigned decay_input,
                   const lacs_cotangents *ct, const grads_out *gr)
{
    int rc = lacs_internal_validate(op, d, in, decay_input, LACS_READS_H0);
    return rc ? rc : lacs_internal_run_per_head_vjp(op, d, in, ct, STATE_KV, decayed_recurrent_vjp_kernel, gr);
}

int lacs_ref_linear_attn_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct, const grads_out *gr)
{
    return run_vjp("linear_attn_vjp", d, in, STATE_NONE, ct, gr);
}

int lacs_ref_retention_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct, const grads_out *gr)
{
    return run_vjp("retention_vjp", d, in, LACS_READS_G_GAMMA, ct, gr);
}

int lacs_ref_simple_gla_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct, const grads_out *gr)
{
    return run_vjp("simple_gla_vjp", d, in, LACS_READS_G, ct, gr);
}

int lacs_ref_gla_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct, const grads_out *gr)
{
    return run_vjp("gla_vjp", d, in, LACS_READS_GK, ct, gr);
}

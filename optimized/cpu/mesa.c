/* builtin:cpu, MesaNet (H15; SPEC.md 4.13, 12.3): the recurrence token by
 * token, one task per (sequence, value head).
 *
 *   H_t = exp(g_t) H_{t-1} + beta_t k_t k_t^T      (K x K, fp32)
 *   h_t = exp(g_t) h_{t-1} + beta_t k_t v_t^T      (K x V, fp32)
 *   o_t = h_t^T (H_t + diag(lambda))^{-1} q_t      (no q scale, as in fla)
 *
 * The states are fp32, rounded at every token as SPEC.md 11.1 allows. The
 * K x K system is solved by Cholesky in double: it costs K^3 / 6 per token
 * against the state updates' K (K + V), and H_t + diag(lambda) can be
 * ill-conditioned (small lambda), where an fp32 factorisation would add an
 * error of u cond(H) on top of the state's own. A pivot <= 0 is the
 * reference's LACS_ERR_PARAM, naming the token.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

typedef struct {
    const lacs_cpu_call *call;
    int64_t B, T, H, HV, K, V, n_seqs;
    const lacs_tensor *q, *k, *v, *g, *beta, *lambda, *h0, *h0_kk;
    lacs_tensor *o, *ht, *ht_kk;
    atomic_int failed;        /* the first failing token's error is kept */
    int64_t failed_token, failed_pivot;
} mesa_op;

typedef struct {
    float *h, *Hkk, *q, *k, *v;
    double *L, *x;
} mesa_workspace;

/* x = (Hkk + diag(lambda))^{-1} q by Cholesky (L L^T) in double; returns -1, or
 * the pivot that is not positive. */
static int64_t cholesky_solve(int64_t K, const float *Hkk, const float *lambda, const float *q, double *L,
                              double *x)
{
    for (int64_t i = 0; i < K; i++) {
        for (int64_t j = 0; j <= i; j++) {
            double sum = (double)Hkk[i * K + j] + (i == j ? (double)lambda[i] : 0.0);
            for (int64_t p = 0; p < j; p++)
                sum -= L[i * K + p] * L[j * K + p];
            if (i == j) {
                if (!(sum > 0.0))
                    return i;
                L[i * K + i] = sqrt(sum);
            } else
                L[i * K + j] = sum / L[j * K + j];
        }
    }
    for (int64_t i = 0; i < K; i++) { /* L y = q */
        double sum = q[i];
        for (int64_t p = 0; p < i; p++)
            sum -= L[i * K + p] * x[p];
        x[i] = sum / L[i * K + i];
    }
    for (int64_t i = K - 1; i >= 0; i--) { /* L^T x = y */
        double sum = x[i];
        for (int64_t p = i + 1; p < K; p++)
            sum -= L[p * K + i] * x[p];
        x[i] = sum / L[i * K + i];
    }
    return -1;
}

typedef struct {
    mesa_op *m;
    mesa_workspace *workspaces;
    float *lambda; /* HV x K, fp32 */
} mesa_job;

static void run_sequence_head(void *context, int64_t item, int thread)
{
    mesa_job *job = context;
    mesa_op *m = job->m;
    mesa_workspace *w = &job->workspaces[thread];
    const int64_t K = m->K, V = m->V, seq = item / m->HV, hv = item % m->HV, h = hv / (m->HV / m->H);
    const float *lambda = job->lambda + hv * K;
    int64_t start;
    const int64_t length = lacs_cpu_sequences(m->call, m->T, seq, &start);
    if (m->h0)
        lacs_cpu_tensor_row(m->h0, (seq * m->HV + hv) * K * V, K * V, w->h);
    else
        memset(w->h, 0, (size_t)(K * V) * sizeof *w->h);
    if (m->h0_kk)
        lacs_cpu_tensor_row(m->h0_kk, (seq * m->HV + hv) * K * K, K * K, w->Hkk);
    else
        memset(w->Hkk, 0, (size_t)(K * K) * sizeof *w->Hkk);

    for (int64_t t = start; t < start + length; t++) {
        lacs_cpu_tensor_row(m->q, (t * m->H + h) * K, K, w->q);
        lacs_cpu_tensor_row(m->k, (t * m->H + h) * K, K, w->k);
        lacs_cpu_tensor_row(m->v, (t * m->HV + hv) * V, V, w->v);
        const float gamma = m->g ? expf(lacs_cpu_tensor_at(m->g, t * m->HV + hv)) : 1.0f;
        const float beta = m->beta ? lacs_cpu_tensor_at(m->beta, t * m->HV + hv) : 1.0f;
        for (int64_t c = 0; c < K; c++) {
            const float bk = beta * w->k[c];
            float *hrow = w->h + c * V, *Hrow = w->Hkk + c * K;
            for (int64_t j = 0; j < V; j++)
                hrow[j] = gamma * hrow[j] + bk * w->v[j];
            for (int64_t j = 0; j < K; j++)
                Hrow[j] = gamma * Hrow[j] + bk * w->k[j];
        }
        const int64_t pivot = cholesky_solve(K, w->Hkk, lambda, w->q, w->L, w->x);
        if (pivot >= 0) {
            int expected = 0;
            if (atomic_compare_exchange_strong(&m->failed, &expected, 1)) {
                m->failed_token = t - start;
                m->failed_pivot = pivot;
            }
            return;
        }
        float *o = (float *)m->o->data + (t * m->HV + hv) * V;
        for (int64_t j = 0; j < V; j++) {
            double sum = 0.0;
            for (int64_t c = 0; c < K; c++)
                sum += (double)w->h[c * V + j] * w->x[c];
            o[j] = (float)sum;
        }
    }
    if (m->ht)
        memcpy((float *)m->ht->data + (seq * m->HV + hv) * K * V, w->h, (size_t)(K * V) * sizeof *w->h);
    if (m->ht_kk)
        memcpy((float *)m->ht_kk->data + (seq * m->HV + hv) * K * K, w->Hkk, (size_t)(K * K) * sizeof *w->Hkk);
}

int lacs_cpu_mesa_net(const lacs_cpu_call *c)
{
    mesa_op m = {.call = c};
    m.q = lacs_cpu_input(c, "q");
    m.k = lacs_cpu_input(c, "k");
    m.v = lacs_cpu_input(c, "v");
    m.g = lacs_cpu_input(c, "g");
    m.beta = lacs_cpu_input(c, "beta");
    m.lambda = lacs_cpu_input(c, "lambda");
    m.h0 = lacs_cpu_input(c, "h0");
    m.h0_kk = lacs_cpu_input(c, "h0_kk");
    m.o = lacs_cpu_output(c, "o");
    m.ht = lacs_cpu_output(c, "ht");
    m.ht_kk = lacs_cpu_output(c, "ht_kk");
    m.B = m.q->shape[0];
    m.T = m.q->shape[1];
    m.H = m.q->shape[2];
    m.K = m.q->shape[3];
    m.HV = m.v->shape[2];
    m.V = m.v->shape[3];
    const lacs_tensor *cu = lacs_cpu_input(c, "cu_seqlens");
    m.n_seqs = cu ? cu->shape[0] - 1 : m.B;
    atomic_init(&m.failed, 0);

    /* The reference's domain (SPEC.md 4.13): lambda finite and >= 0, beta >= 0. */
    int oom = 0;
    float *lambda = lacs_cpu_input_f32(c, "lambda", &oom);
    if (!lambda)
        return lacs_cpu_error(LACS_ERR_MEMORY, c->op, "out of memory for lambda");
    for (int64_t i = 0; i < m.HV * m.K; i++)
        if (!(lambda[i] >= 0.0f) || isinf(lambda[i])) {
            const double bad = lambda[i];
            lacs_cpu_scratch_free(lambda);
            return lacs_cpu_error(LACS_ERR_PARAM, c->op, "lambda[%lld] = %g: the regulariser must be finite and >= 0",
                                  (long long)i, bad);
        }
    for (int64_t i = 0; m.beta && i < lacs_tensor_count(m.beta); i++)
        if (!(lacs_cpu_tensor_at(m.beta, i) >= 0.0f)) {
            lacs_cpu_scratch_free(lambda);
            return lacs_cpu_error(LACS_ERR_PARAM, c->op, "beta[%lld] = %g must be >= 0: H_t must stay positive "
                                  "semidefinite", (long long)i, (double)lacs_cpu_tensor_at(m.beta, i));
        }

    const int64_t items = m.n_seqs * m.HV;
    const int threads = items < c->threads ? (int)(items > 0 ? items : 1) : c->threads;
    mesa_workspace *workspaces = calloc((size_t)threads, sizeof *workspaces);
    int rc = workspaces ? LACS_OK : LACS_ERR_MEMORY;
    for (int t = 0; rc == LACS_OK && t < threads; t++) {
        mesa_workspace *w = &workspaces[t];
        w->h = malloc((size_t)(m.K * m.V + 1) * sizeof(float));
        w->Hkk = malloc((size_t)(m.K * m.K + 1) * sizeof(float));
        w->q = malloc((size_t)(m.K + 1) * sizeof(float));
        w->k = malloc((size_t)(m.K + 1) * sizeof(float));
        w->v = malloc((size_t)(m.V + 1) * sizeof(float));
        w->L = malloc((size_t)(m.K * m.K + 1) * sizeof(double));
        w->x = malloc((size_t)(m.K + 1) * sizeof(double));
        if (!w->h || !w->Hkk || !w->q || !w->k || !w->v || !w->L || !w->x)
            rc = LACS_ERR_MEMORY;
    }
    if (rc == LACS_OK) {
        mesa_job job = {.m = &m, .workspaces = workspaces, .lambda = lambda};
        lacs_cpu_parallel_for(threads, items, run_sequence_head, &job);
        if (atomic_load(&m.failed))
            rc = lacs_cpu_error(LACS_ERR_PARAM, c->op,
                                "token %lld: H_t + diag(lambda) is not positive definite to working precision "
                                "(Cholesky pivot %lld); give lambda > 0",
                                (long long)m.failed_token, (long long)m.failed_pivot);
    } else
        rc = lacs_cpu_error(LACS_ERR_MEMORY, c->op, "out of memory for the workspaces");
    for (int t = 0; workspaces && t < threads; t++) {
        free(workspaces[t].h);
        free(workspaces[t].Hkk);
        free(workspaces[t].q);
        free(workspaces[t].k);
        free(workspaces[t].v);
        free(workspaces[t].L);
        free(workspaces[t].x);
    }
    free(workspaces);
    lacs_cpu_scratch_free(lambda);
    return rc;
}

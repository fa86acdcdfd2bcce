/* builtin:cpu: the gradients of the attention forms (SPEC.md 4.19):
 * softmax_attn_vjp (H1), fox_vjp (H10: FoX's g or ALiBi's g_gamma),
 * deltaformer_vjp (H11) and path_attn_vjp (H12). README.md, section "The
 * attention forms' backward", says which algorithm each uses and its memory.
 *
 * Read top to bottom:
 *   - the gradients' buffers (fp32, per value head) and how they become the
 *     outputs (dq, dk summed over the value heads of their q/k head; the
 *     gates' gradients from the gradients of their prefix sums);
 *   - FlashAttention-2's backward (Dao, arXiv 2307.08691, Algorithm 2) for
 *     the causal softmax (and DeltaFormer's EXP form): the forward run again
 *     (attention.c, writing each row's log-sum-exp), D_i = do_i . o_i, then
 *     per (sequence, value head) key blocks outer, query blocks inner: the
 *     weights recomputed blockwise as exp(l_ij - lse_i) from one GEMM
 *     Q_a K_b^T, dP = dO_a V_b^T, dS = P (.) (dP - D), and dV_b += P^T dO_a,
 *     dK_b += dS^T Q_a, dQ_a += dS K_b: five GEMMs per pair of blocks, no
 *     T x T matrix anywhere;
 *   - the softmax's adjoint without cancellation (SPEC 4.19): a row's weight
 *     above 1/2, found while the weights are recomputed, has its dl_iJ
 *     replaced by minus the sum of the row's others afterwards (a correction
 *     of dq_i, dk_J and the gate, O(T d));
 *   - softmax_attn_vjp and fox_vjp;
 *   - deltaformer_vjp: the second stage by the backward above with values u,
 *     then the first stage's adjoint, strictly causal attention with output
 *     r_i = sum_{j<i} B_ij u_j, by query blocks from the last;
 *   - path_attn_vjp: the blocked forward (attention.c) for o and lse, then
 *     H12's adjoint key by key (the recurrence on one vector per key, SPEC
 *     4.19), O(T^2 K) per head.
 *
 * Everything is fp32 (the bf16 tier's inputs widened exactly on entry).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../reference/validate.h"
#include "attention_blocks.h"

/* ---- the gradients' buffers ---- */

/* fp32, zeroed: dq, dk, dw [tokens, HV, K] per value head (each (sequence,
 * value head) item writes only its own), dv [tokens, HV, V], dbeta [tokens,
 * HV], dbias [HV][tokens] the gradient of the gates' biases (the prefix
 * sums G_t times the gates' factor), each row's sum of dS and dominant
 * weight's token [HV][tokens] for the correction of the softmax's adjoint. */
typedef struct {
    float *dq, *dk, *dw, *dv, *dbeta, *dbias;
    float *row_sum;
    int64_t *row_dominant; /* the token of the row's weight above 1/2, or -1 */
} grad_buffers;

static void free_grads(grad_buffers *g)
{
    free(g->dq);
    free(g->dk);
    free(g->dw);
    free(g->dv);
    free(g->dbeta);
    free(g->dbias);
    free(g->row_sum);
    free(g->row_dominant);
}

static float *zeros(int64_t n, int *oom)
{
    float *x = calloc((size_t)(n > 0 ? n : 1), sizeof *x);
    if (!x)
        *oom = 1;
    return x;
}

/* The buffers an op needs (w, beta, a gate: when it has them). */
static int make_grads(const problem *p, int with_w, int with_beta, int with_gate, grad_buffers *g)
{
    memset(g, 0, sizeof *g);
    int oom = 0;
    const int64_t qk = p->tokens * p->HV * p->K, rows = p->HV * p->tokens;
    g->dq = zeros(qk, &oom);
    g->dk = zeros(qk, &oom);
    g->dv = zeros(p->tokens * p->HV * p->V, &oom);
    if (with_w)
        g->dw = zeros(qk, &oom);
    if (with_beta)
        g->dbeta = zeros(rows, &oom);
    if (with_gate)
        g->dbias = zeros(rows, &oom);
    g->row_sum = zeros(rows, &oom);
    g->row_dominant = calloc((size_t)(rows > 0 ? rows : 1), sizeof *g->row_dominant);
    if (oom || !g->row_dominant) {
        free_grads(g);
        return lacs_cpu_error(LACS_ERR_MEMORY, p->call->op, "out of memory for the gradients");
    }
    return LACS_OK;
}

/* out [tokens, H, K] = factor * sum over the group's value heads of x [tokens, HV, K]. */
static void write_per_qk_head(const problem *p, const float *x, float factor, lacs_tensor *out)
{
    if (!out)
        return;
    float *o = out->data;
    for (int64_t t = 0; t < p->tokens; t++)
        for (int64_t h = 0; h < p->H; h++) {
            float *row = o + (t * p->H + h) * p->K;
            for (int64_t c = 0; c < p->K; c++) {
                float sum = 0.0f;
                for (int64_t r = 0; r < p->group; r++)
                    sum += x[(t * p->HV + h * p->group + r) * p->K + c];
                row[c] = factor * sum;
            }
        }
}

static void write_as_is(const float *x, int64_t n, lacs_tensor *out)
{
    if (out && n > 0)
        memcpy(out->data, x, (size_t)n * sizeof(float));
}

/* The gates' gradients from dbias [HV][tokens], the gradient of the biases
 * factor * G_t, G_t = sum_{tau = r+1..t} g_tau since the segment's start r
 * (the sequence's start or a hard reset, attention_blocks.h): dg_tau =
 * factor * sum_{t >= tau in tau's segment} dbias_t for tau > r, and 0 at r
 * (no logit reads g_r: SPEC 4.19's sum over j < tau <= i is empty of visible
 * pairs there). ALiBi: dg_gamma[hv] is the sum of these over the tokens of
 * every sequence (the reference's driver). */
static void write_gate_grads(const problem *p, const gates *gate, const float *dbias, float factor,
                             lacs_tensor *dg, lacs_tensor *dg_gamma)
{
    float *out_g = dg ? dg->data : NULL, *out_gamma = dg_gamma ? dg_gamma->data : NULL;
    for (int64_t hv = 0; hv < p->HV; hv++) {
        const float *db = dbias + hv * p->tokens;
        const int64_t *first = gate->first_visible + hv * p->tokens;
        float gamma_sum = 0.0f;
        for (int64_t n = 0; n < p->n_seqs; n++) {
            int64_t start;
            const int64_t length = lacs_cpu_sequences(p->call, p->T, n, &start);
            float run = 0.0f;
            for (int64_t t = start + length - 1; t >= start; t--) {
                float value = 0.0f;
                if (first[t] == t)
                    run = 0.0f;
                else {
                    run += db[t];
                    value = factor * run;
                }
                if (out_g)
                    out_g[t * p->HV + hv] = value;
                gamma_sum += value;
            }
        }
        if (out_gamma)
            out_gamma[hv] = gamma_sum;
    }
}

/* D_i = do_i . o_i for every token and value head, [HV][tokens]: the row sum
 * sum_j p_ij dp_ij of the softmax's adjoint (FlashAttention-2). */
static void row_dots(const problem *p, const float *dout, const float *o, float *D)
{
    for (int64_t t = 0; t < p->tokens; t++)
        for (int64_t hv = 0; hv < p->HV; hv++) {
            const float *a = dout + (t * p->HV + hv) * p->V, *b = o + (t * p->HV + hv) * p->V;
            float sum = 0.0f;
            for (int64_t c = 0; c < p->V; c++)
                sum += a[c] * b[c];
            D[hv * p->tokens + t] = sum;
        }
}

/* Eight partial sums, so that the compiler vectorises the loop (it keeps a single sum's order otherwise). */
static float dot_f32(int64_t n, const float *a, const float *b)
{
    float part[8] = {0};
    int64_t c = 0;
    for (; c + 8 <= n; c += 8)
        for (int l = 0; l < 8; l++)
            part[l] += a[c + l] * b[c + l];
    float sum = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
    for (; c < n; c++)
        sum += a[c] * b[c];
    return sum;
}

/* ---- FlashAttention-2's backward ---- */

typedef struct {
    const problem *p;
    const float *values;  /* v, or DeltaFormer's u */
    const float *dout;    /* do [tokens, HV, V] */
    const float *D;       /* [HV][tokens]; 0 for the EXP form */
    const gates *gate;    /* or NULL */
    int normalised;       /* softmax; 0: DeltaFormer's EXP form (weights exp(l), lse = 0, D = 0) */
    grad_buffers *g;      /* dq, dk: sums of dS k, dS q (the scale applied on output); dv: P^T do; dbias */
    int64_t max_blocks;   /* blocks of the longest sequence */
    float *work;
    int64_t per_thread;
} flash_job;

/* A thread's workspace (floats), in this order: P and dP [BLOCK x BLOCK]; dK_b^T [K x BLOCK] and dV_b^T
 * [V x BLOCK]; the column sums [BLOCK]; the key block's operands packed once (K_b^T, V_b^T, K_b); and
 * for every query block of the sequence Q_a^T [K x BLOCK] and dO_a^T [V x BLOCK]. */
static int64_t flash_per_thread(const problem *p, int64_t max_blocks)
{
    const lacs_cpu_gemm *gemm = p->gemm;
    return 2 * BLOCK * BLOCK + BLOCK * (p->K + p->V) + BLOCK +
           (int64_t)(gemm->packed_b_size(p->K, BLOCK) + gemm->packed_b_size(BLOCK, p->K) +
                     gemm->packed_b_size(p->V, BLOCK)) + 16 +
           max_blocks * BLOCK * (p->K + p->V);
}

/* dest[c * BLOCK + r] = x[r * ld + c] for r < rows, c < width (0 for rows .. BLOCK - 1). */
static void transpose_rows(const float *x, int64_t ld, int64_t rows, int64_t width, float *dest)
{
    for (int64_t c = 0; c < width; c++) {
        float *out = dest + c * BLOCK;
        for (int64_t r = 0; r < rows; r++)
            out[r] = x[r * ld + c];
        for (int64_t r = rows; r < BLOCK; r++)
            out[r] = 0.0f;
    }
}

/* One (sequence, value head): key blocks b outer, query blocks a >= b
 * inner (dQ_a accumulated in place: only this item writes its rows). Five
 * GEMMs per pair, none reading an operand transposed (the frame would
 * gather it for each panel): S = Q_a (K_b^T) and dP = dO_a (V_b^T) with
 * K_b^T and V_b^T packed once per key block, dQ_a += dS K_b (K_b packed
 * once), and dK_b^T += Q_a^T dS, dV_b^T += dO_a^T P with Q_a^T and dO_a^T
 * transposed once per sequence; dK_b and dV_b transposed back once per key
 * block. */
static void flash_task(void *context, int64_t item, int thread)
{
    const flash_job *job = context;
    const problem *p = job->p;
    const lacs_cpu_gemm *gemm = p->gemm;
    const int64_t n = item / p->HV, hv = item % p->HV, h = hv / p->group, K = p->K, V = p->V;
    int64_t start;
    const int64_t length = lacs_cpu_sequences(p->call, p->T, n, &start);
    float *P = job->work + thread * job->per_thread, *dP = P + BLOCK * BLOCK, *dKbT = dP + BLOCK * BLOCK;
    float *dVbT = dKbT + BLOCK * K, *col_sum = dVbT + BLOCK * V;
    float *KbT_packed = col_sum + BLOCK, *Kb_packed = KbT_packed + gemm->packed_b_size(K, BLOCK);
    float *VbT_packed = Kb_packed + gemm->packed_b_size(BLOCK, K);
    float *QT = VbT_packed + gemm->packed_b_size(V, BLOCK) + 16, *dOT = QT + job->max_blocks * BLOCK * K;
    const float *bias = job->gate ? job->gate->bias + hv * p->tokens : NULL;
    const int64_t *first = job->gate ? job->gate->first_visible + hv * p->tokens : NULL;
    const float *lse = job->normalised ? p->lse + hv * p->tokens : NULL, *D = job->D + hv * p->tokens;
    float *row_sum = job->g->row_sum + hv * p->tokens;
    int64_t *row_dominant = job->g->row_dominant + hv * p->tokens;
    float *dbias = job->g->dbias ? job->g->dbias + hv * p->tokens : NULL;
    const int64_t ldq = p->H * K, ldv = p->HV * V, ldg = p->HV * K;
    for (int64_t a = 0; a * BLOCK < length; a++) {
        const int64_t i0 = start + a * BLOCK, rows = length - a * BLOCK < BLOCK ? length - a * BLOCK : BLOCK;
        transpose_rows(p->q + (i0 * p->H + h) * K, ldq, rows, K, QT + a * BLOCK * K);
        transpose_rows(job->dout + (i0 * p->HV + hv) * V, ldv, rows, V, dOT + a * BLOCK * V);
    }
    for (int64_t b = 0; b * BLOCK < length; b++) {
        const int64_t j0 = start + b * BLOCK, nk = length - b * BLOCK < BLOCK ? length - b * BLOCK : BLOCK;
        const float *Kb = p->k + (j0 * p->H + h) * K, *Vb = job->values + (j0 * p->HV + hv) * V;
        gemm->pack_b(K, nk, Kb, ldq, LACS_GEMM_B_TRANSPOSED, KbT_packed);
        gemm->pack_b(V, nk, Vb, ldv, LACS_GEMM_B_TRANSPOSED, VbT_packed);
        gemm->pack_b(nk, K, Kb, ldq, 0, Kb_packed);
        memset(dKbT, 0, (size_t)(BLOCK * K) * sizeof(float));
        memset(dVbT, 0, (size_t)(BLOCK * V) * sizeof(float));
        memset(col_sum, 0, BLOCK * sizeof(float));
        for (int64_t a = b; a * BLOCK < length; a++) {
            const int64_t i0 = start + a * BLOCK, rows = length - a * BLOCK < BLOCK ? length - a * BLOCK : BLOCK;
            if (first && first[i0] >= j0 + nk)
                break; /* a hard reset after the key block: no later query sees it (resets only move forward) */
            const float *Qa = p->q + (i0 * p->H + h) * K, *dOa = job->dout + (i0 * p->HV + hv) * V;
            gemm->sgemm_packed(rows, nk, K, Qa, ldq, KbT_packed, P, BLOCK, 0.0f, 0);
            gemm->sgemm_packed(rows, nk, V, dOa, ldv, VbT_packed, dP, BLOCK, 0.0f, 0);
            for (int64_t row = 0; row < rows; row++) {
                const int64_t i = i0 + row;
                int64_t lo = (first ? first[i] : start) - j0, hi = i - j0 + 1;
                lo = lo < 0 ? 0 : lo;
                hi = hi > nk ? nk : hi;
                float *s = P + row * BLOCK, *ds = dP + row * BLOCK;
                p->kernels.logits_row(nk, s, lo, hi, p->scale, bias ? bias[i] : 0.0f, bias ? bias + j0 : NULL);
                p->kernels.exp_row(nk, s, lse ? lse[i] : 0.0f, lse != NULL);
                float p_max;
                row_sum[i] += p->kernels.adjoint_row(nk, s, ds, D[i], col_sum, &p_max); /* p = 0 off [lo, hi) */
                for (int64_t j = 0; p_max > 0.5f && j < nk; j++)
                    if (s[j] > 0.5f)
                        row_dominant[i] = j0 + j; /* the weights sum to 1: at most one */
            }
            gemm->sgemm_general(V, nk, rows, dOT + a * BLOCK * V, BLOCK, P, BLOCK, dVbT, BLOCK, 1.0f, 0);
            gemm->sgemm_general(K, nk, rows, QT + a * BLOCK * K, BLOCK, dP, BLOCK, dKbT, BLOCK, 1.0f, 0);
            gemm->sgemm_packed(rows, K, nk, dP, BLOCK, Kb_packed, job->g->dq + (i0 * p->HV + hv) * K, ldg, 1.0f, 0);
        }
        for (int64_t j = 0; j < nk; j++) {
            float *dk = job->g->dk + ((j0 + j) * p->HV + hv) * K, *dv = job->g->dv + ((j0 + j) * p->HV + hv) * V;
            for (int64_t c = 0; c < K; c++)
                dk[c] += dKbT[c * BLOCK + j];
            for (int64_t c = 0; c < V; c++)
                dv[c] += dVbT[c * BLOCK + j];
            if (dbias)
                dbias[j0 + j] -= col_sum[j];
        }
    }
    /* the softmax's adjoint without cancellation (SPEC 4.19): where a weight p_iJ exceeds 1/2, dl_iJ :=
     * dl_iJ - sum_j dl_ij, minus the sum of the row's others (an identity, as the weights sum to 1); then
     * the row's dl sum to 0 (its gate term too). Elsewhere the row's own gate term, its sum. */
    for (int64_t i = start; i < start + length && dbias && (!job->normalised || row_dominant[i] < 0); i++)
        dbias[i] += row_sum[i];
    for (int64_t i = start; i < start + length && job->normalised; i++) {
        if (row_dominant[i] < 0)
            continue;
        const float delta = -row_sum[i];
        const int64_t J = row_dominant[i];
        float *dq = job->g->dq + (i * p->HV + hv) * K, *dk = job->g->dk + (J * p->HV + hv) * K;
        const float *q = p->q + (i * p->H + h) * K, *k = p->k + (J * p->H + h) * K;
        for (int64_t c = 0; c < K; c++) {
            dq[c] += delta * k[c];
            dk[c] += delta * q[c];
        }
        if (dbias)
            dbias[J] -= delta; /* and the row's own term, row_sum + delta, is 0 */
    }
}

/* The backward of causal attention over `values`, given p->lse and D. */
static int flash_backward(const problem *p, const float *values, const float *dout, const float *D, const gates *gate,
                          int normalised, grad_buffers *g)
{
    int64_t max_blocks = 1;
    for (int64_t n = 0; n < p->n_seqs; n++)
        max_blocks = p->block_base[n + 1] - p->block_base[n] > max_blocks ? p->block_base[n + 1] - p->block_base[n]
                                                                          : max_blocks;
    flash_job job = {p, values, dout, D, gate, normalised, g, max_blocks, NULL, flash_per_thread(p, max_blocks)};
    job.work = malloc((size_t)(job.per_thread * p->threads) * sizeof(float));
    if (!job.work)
        return lacs_cpu_error(LACS_ERR_MEMORY, p->call->op, "out of memory for the workspaces");
    for (int64_t i = 0; i < p->HV * p->tokens; i++) {
        g->row_dominant[i] = -1;
        g->row_sum[i] = 0.0f;
    }
    lacs_cpu_parallel_for(p->threads, p->n_seqs * p->HV, flash_task, &job);
    free(job.work);
    return LACS_OK;
}

/* ---- the calls' common parts ---- */

/* What every VJP of the family holds besides the problem: do as fp32, the
 * forward's o and lse, D, the gates and the gradients. */
typedef struct {
    problem p;
    const float *dout;
    float *dout_owned;
    float *o, *lse, *D;
    gates gate;
    grad_buffers g;
} vjp_state;

static void free_state(vjp_state *s)
{
    lacs_cpu_scratch_free(s->dout_owned);
    free(s->o);
    free(s->lse);
    free(s->D);
    lacs_cpu_attention_free_gates(&s->gate);
    free_grads(&s->g);
    lacs_cpu_attention_free(&s->p);
}

/* Loads the problem and do, and allocates o, lse and D (p->o, p->lse set). */
static int load_state(const lacs_cpu_call *c, unsigned required, unsigned optional, vjp_state *s)
{
    memset(s, 0, sizeof *s);
    int rc = lacs_cpu_attention_load(c, required, optional, &s->p);
    if (rc != LACS_OK)
        return rc;
    problem *p = &s->p;
    int oom = 0;
    s->dout = lacs_cpu_attention_input(c, "do", &s->dout_owned, &oom);
    if (!s->dout && !oom) {
        free_state(s);
        return lacs_cpu_error(LACS_ERR_INPUT, c->op, "input 'do' (the cotangent of o) is required");
    }
    s->o = malloc((size_t)(p->tokens * p->HV * p->V + 1) * sizeof(float));
    s->lse = malloc((size_t)(p->HV * p->tokens + 1) * sizeof(float));
    s->D = calloc((size_t)(p->HV * p->tokens + 1), sizeof(float));
    if (oom || !s->o || !s->lse || !s->D) {
        free_state(s);
        return lacs_cpu_error(LACS_ERR_MEMORY, c->op, "out of memory for the forward's output");
    }
    p->o = s->o;
    p->lse = s->lse;
    return LACS_OK;
}

/* ---- softmax_attn_vjp (H1) and fox_vjp (H10) ---- */

static int softmax_or_fox_vjp(const lacs_cpu_call *c, int fox)
{
    vjp_state s;
    int rc = load_state(c, 0, fox ? LACS_READS_G | LACS_READS_G_GAMMA : 0, &s);
    if (rc != LACS_OK)
        return rc;
    problem *p = &s.p;
    if (fox)
        rc = lacs_internal_check_exactly_one(c->op, p->g, "'g' (FoX's log forget gate)", p->g_gamma,
                                             "'g_gamma' (ALiBi's constant log decay)");
    if (rc == LACS_OK && fox)
        rc = lacs_cpu_attention_gates(p, 1.0f, &s.gate); /* H10: the gate after the scale */
    if (rc == LACS_OK)
        rc = make_grads(p, 0, 0, fox, &s.g);
    if (rc == LACS_OK)
        rc = lacs_cpu_attention_attend(p, p->v, fox ? &s.gate : NULL, 1, s.o);
    if (rc == LACS_OK) {
        row_dots(p, s.dout, s.o, s.D);
        rc = flash_backward(p, p->v, s.dout, s.D, fox ? &s.gate : NULL, 1, &s.g);
    }
    if (rc == LACS_OK) {
        write_per_qk_head(p, s.g.dq, p->scale, lacs_cpu_output(c, "dq"));
        write_per_qk_head(p, s.g.dk, p->scale, lacs_cpu_output(c, "dk"));
        write_as_is(s.g.dv, p->tokens * p->HV * p->V, lacs_cpu_output(c, "dv"));
        if (fox)
            write_gate_grads(p, &s.gate, s.g.dbias, 1.0f, lacs_cpu_output(c, "dg"), lacs_cpu_output(c, "dg_gamma"));
    }
    free_state(&s);
    return rc;
}

/* ---- deltaformer_vjp (H11) ---- */

/* The first stage, u_i = v_i - beta_i r_i with r_i = sum_{j<i} B_ij u_j, is
 * attention of x (k, or q in fla's form) over k with values u, strictly
 * causal, whose output r has the cotangent dr_i = -beta_i du_i (SPEC 4.19:
 * dB_ij = dr_i . u_j, du_j += B_ij dr_i, dbeta_i = -du_i . r_i). du_i is
 * complete once every later row is done, so the query blocks run from the
 * last to the first (one (sequence, value head) per item):
 *   - the block's own triangle, row by row from its last row: dr_i, then
 *     du_j += B_ij dr_i for the block's j < i (B_aa recomputed by one GEMM
 *     from the forward's lse_b);
 *   - then FlashAttention-2's products over the key blocks b <= a with dR_a:
 *     dB = dR_a U_b^T, dS = B (.) (dB - D^B_i) (D^B_i = dr_i . r_i; EXP:
 *     dS = B (.) dB), du_b += B^T dR_a for b < a (the diagonal's is the
 *     triangle), dX_a += dS K_b, dK_b += dS^T X_a.
 * Workspace: P and dB [BLOCK x BLOCK], dR [BLOCK x V], the column sums. */
typedef struct {
    const problem *p;
    const float *u, *lse_b, *r;
    int form;
    grad_buffers *g; /* dv holds du (the second stage's A^T do on entry) */
    float *work;
    int64_t per_thread;
} first_stage_vjp_job;

static void first_stage_vjp_task(void *context, int64_t item, int thread)
{
    const first_stage_vjp_job *job = context;
    const problem *p = job->p;
    const lacs_cpu_gemm *gemm = p->gemm;
    const int64_t n = item / p->HV, hv = item % p->HV, h = hv / p->group, K = p->K, V = p->V;
    int64_t start;
    const int64_t length = lacs_cpu_sequences(p->call, p->T, n, &start);
    float *P = job->work + thread * job->per_thread, *dB = P + BLOCK * BLOCK, *dR = dB + BLOCK * BLOCK;
    float *col_sum = dR + BLOCK * V;
    const int reads_q = job->form == LACS_DELTAFORMER_FLA, normalised = job->form != LACS_DELTAFORMER_EXP;
    const float *X = reads_q ? p->q : p->k, *lse = job->lse_b + hv * p->tokens;
    float *dX = reads_q ? job->g->dq : job->g->dk, *du = job->g->dv;
    const int64_t ldq = p->H * K, ldv = p->HV * V, ldg = p->HV * K;
    for (int64_t a = (length - 1) / BLOCK; length > 0 && a >= 0; a--) {
        const int64_t i0 = start + a * BLOCK, rows = length - a * BLOCK < BLOCK ? length - a * BLOCK : BLOCK;
        const float *Xa = X + (i0 * p->H + h) * K;
        /* B_aa, then the triangle */
        gemm->sgemm_general(rows, rows, K, Xa, ldq, p->k + (i0 * p->H + h) * K, ldq, P, BLOCK, 0.0f,
                            LACS_GEMM_B_TRANSPOSED);
        for (int64_t row = 0; row < rows; row++) {
            float *s = P + row * BLOCK;
            p->kernels.logits_row(rows, s, 0, row, p->scale, 0.0f, NULL); /* j < i */
            p->kernels.exp_row(rows, s, lse[i0 + row], 1);
        }
        for (int64_t row = rows - 1; row >= 0; row--) {
            const int64_t i = i0 + row;
            const float beta = p->beta ? p->beta[i * p->HV + hv] : 1.0f;
            const float *du_i = du + (i * p->HV + hv) * V;
            float *dr = dR + row * V;
            for (int64_t c = 0; c < V; c++)
                dr[c] = -beta * du_i[c];
            if (job->g->dbeta)
                job->g->dbeta[i * p->HV + hv] = -dot_f32(V, du_i, job->r + (i * p->HV + hv) * V);
            for (int64_t col = 0; col < row; col++) {
                const float weight = P[row * BLOCK + col];
                float *du_j = du + ((i0 + col) * p->HV + hv) * V;
                for (int64_t c = 0; c < V; c++)
                    du_j[c] += weight * dr[c];
            }
        }
        /* the key blocks b <= a */
        for (int64_t b = a; b >= 0; b--) {
            const int64_t j0 = start + b * BLOCK, nk = b == a ? rows : BLOCK;
            const float *Kb = p->k + (j0 * p->H + h) * K, *Ub = job->u + (j0 * p->HV + hv) * V;
            gemm->sgemm_general(rows, nk, K, Xa, ldq, Kb, ldq, P, BLOCK, 0.0f, LACS_GEMM_B_TRANSPOSED);
            gemm->sgemm_general(rows, nk, V, dR, V, Ub, ldv, dB, BLOCK, 0.0f, LACS_GEMM_B_TRANSPOSED);
            memset(col_sum, 0, BLOCK * sizeof(float));
            for (int64_t row = 0; row < rows; row++) {
                const int64_t i = i0 + row;
                float *s = P + row * BLOCK, p_max;
                p->kernels.logits_row(nk, s, 0, i - j0 < nk ? i - j0 : nk, p->scale, 0.0f, NULL);
                p->kernels.exp_row(nk, s, lse[i], 1);
                const float D = normalised ? dot_f32(V, dR + row * V, job->r + (i * p->HV + hv) * V) : 0.0f;
                p->kernels.adjoint_row(nk, s, dB + row * BLOCK, D, col_sum, &p_max);
            }
            if (b < a)
                gemm->sgemm_general(nk, V, rows, P, BLOCK, dR, V, du + (j0 * p->HV + hv) * V, ldv, 1.0f,
                                    LACS_GEMM_A_TRANSPOSED);
            gemm->sgemm_general(rows, K, nk, dB, BLOCK, Kb, ldq, dX + (i0 * p->HV + hv) * K, ldg, 1.0f, 0);
            gemm->sgemm_general(nk, K, rows, dB, BLOCK, Xa, ldq, job->g->dk + (j0 * p->HV + hv) * K, ldg, 1.0f,
                                LACS_GEMM_A_TRANSPOSED);
        }
    }
}

static int deltaformer_vjp(const lacs_cpu_call *c)
{
    vjp_state s;
    int rc = load_state(c, 0, LACS_READS_BETA, &s);
    if (rc != LACS_OK)
        return rc;
    problem *p = &s.p;
    const double form = lacs_cpu_param(c, "form", LACS_DELTAFORMER_SOFTMAX);
    if (form != LACS_DELTAFORMER_EXP && form != LACS_DELTAFORMER_SOFTMAX && form != LACS_DELTAFORMER_FLA)
        rc = lacs_cpu_error(LACS_ERR_PARAM, c->op, "unknown form %g (0 exp, 1 softmax, 2 fla)", form);
    const int normalised = form != LACS_DELTAFORMER_EXP;
    float *u = malloc((size_t)(p->tokens * p->HV * p->V + 1) * sizeof *u);
    float *r = malloc((size_t)(p->tokens * p->HV * p->V + 1) * sizeof *r);
    float *lse_b = malloc((size_t)(p->HV * p->tokens + 1) * sizeof *lse_b);
    if (rc == LACS_OK && (!u || !r || !lse_b))
        rc = lacs_cpu_error(LACS_ERR_MEMORY, c->op, "out of memory for u");
    if (rc == LACS_OK)
        rc = make_grads(p, 0, p->beta != NULL, 0, &s.g);
    if (rc == LACS_OK)
        rc = lacs_cpu_attention_deltaformer_forward(p, (int)form, u, lse_b, r);
    if (rc == LACS_OK) {
        if (normalised)
            row_dots(p, s.dout, s.o, s.D); /* EXP: D = 0 (its weights are exp(l), no normalisation) */
        rc = flash_backward(p, u, s.dout, s.D, NULL, normalised, &s.g);
    }
    if (rc == LACS_OK) {
        first_stage_vjp_job job = {p, u, lse_b, r, (int)form, &s.g, NULL, 2 * BLOCK * BLOCK + BLOCK * p->V + BLOCK};
        job.work = malloc((size_t)(job.per_thread * p->threads) * sizeof(float));
        if (!job.work)
            rc = lacs_cpu_error(LACS_ERR_MEMORY, c->op, "out of memory for the workspaces");
        else
            lacs_cpu_parallel_for(p->threads, p->n_seqs * p->HV, first_stage_vjp_task, &job);
        free(job.work);
    }
    if (rc == LACS_OK) {
        write_per_qk_head(p, s.g.dq, p->scale, lacs_cpu_output(c, "dq"));
        write_per_qk_head(p, s.g.dk, p->scale, lacs_cpu_output(c, "dk"));
        write_as_is(s.g.dv, p->tokens * p->HV * p->V, lacs_cpu_output(c, "dv"));
        if (s.g.dbeta)
            write_as_is(s.g.dbeta, p->tokens * p->HV, lacs_cpu_output(c, "dbeta"));
    }
    free(u);
    free(r);
    free(lse_b);
    free_state(&s);
    return rc;
}

/* ---- path_attn_vjp (H12) ---- */

/* One (sequence, value head), key by key (SPEC 4.19): for key j, x_j = k_j,
 * x_i = H_i x_{i-1} = x_{i-1} - beta_i w_i (w_i . x_{i-1}) for the rows i > j
 * that see j; the logits l_ij = scale q_i . x_i + bias_i - bias_j (bias =
 * scale G), the weights exp(l_ij - lse_i), dp_ij = do_i . v_j, dv_j +=
 * p_ij do_i, dl_ij = p_ij (dp_ij - D_i) and da_ij = scale dl_ij; then the
 * recurrence's adjoint from the last such row down to j with dx = 0:
 *   dx += da_ij q_i,  dq_i += da_ij x_i,  and for i > j (c = w_i . x_{i-1}, e = w_i . dx):
 *   dbeta_i -= e c,  dw_i -= beta_i (c dx + e x_{i-1}),  dx -= beta_i e w_i;
 * dk_j += dx. The rows' sums of dl and the columns' for the gate.
 * Workspace: X [length x K], da [length], dx [K]. */
typedef struct {
    const problem *p;
    const float *dout, *D;
    const gates *gate; /* or NULL */
    grad_buffers *g;
    float *work;
    int64_t per_thread;
} path_vjp_job;


static void path_vjp_task(void *context, int64_t item, int thread)
{
    const path_vjp_job *job = context;
    const problem *p = job->p;
    const int64_t n = item / p->HV, hv = item % p->HV, h = hv / p->group, K = p->K, V = p->V;
    int64_t start;
    const int64_t length = lacs_cpu_sequences(p->call, p->T, n, &start);
    float *X = job->work + thread * job->per_thread, *da = X + p->T * K, *dx = da + p->T;
    const float *bias = job->gate ? job->gate->bias + hv * p->tokens : NULL;
    const int64_t *first = job->gate ? job->gate->first_visible + hv * p->tokens : NULL;
    const float *lse = p->lse + hv * p->tokens, *D = job->D + hv * p->tokens;
    float *row_sum = job->g->row_sum + hv * p->tokens;
    float *dbias = job->g->dbias ? job->g->dbias + hv * p->tokens : NULL;
    for (int64_t j = start; j < start + length; j++) {
        /* the rows that see key j: j .. end - 1 (a hard reset after j hides it from the later ones) */
        int64_t end = j + 1;
        while (end < start + length && (!first || first[end] <= j))
            end++;
        const float *k_j = p->k + (j * p->H + h) * K, *v_j = p->v + (j * p->HV + hv) * V;
        float *dv_j = job->g->dv + (j * p->HV + hv) * V;
        float col_sum = 0.0f;
        memcpy(X, k_j, (size_t)K * sizeof(float));
        for (int64_t i = j; i < end; i++) {
            float *x = X + (i - j) * K;
            if (i > j) {
                const float *w = p->w + (i * p->H + h) * K, *prev = x - K;
                const float coef = p->beta[i * p->HV + hv] * dot_f32(K, w, prev);
                for (int64_t c = 0; c < K; c++)
                    x[c] = prev[c] - coef * w[c];
            }
            const float *q_i = p->q + (i * p->H + h) * K, *do_i = job->dout + (i * p->HV + hv) * V;
            const float logit = p->scale * dot_f32(K, q_i, x) + (bias ? bias[i] - bias[j] : 0.0f);
            const float weight = expf(logit - lse[i]);
            const float dl = weight * (dot_f32(V, do_i, v_j) - D[i]);
            for (int64_t c = 0; c < V; c++)
                dv_j[c] += weight * do_i[c];
            da[i - j] = p->scale * dl;
            row_sum[i] += dl;
            col_sum += dl;
        }
        if (dbias)
            dbias[j] -= col_sum;
        for (int64_t c = 0; c < K; c++)
            dx[c] = 0.0f;
        for (int64_t i = end - 1; i >= j; i--) {
            const float a = da[i - j], *q_i = p->q + (i * p->H + h) * K, *x = X + (i - j) * K;
            float *dq_i = job->g->dq + (i * p->HV + hv) * K;
            for (int64_t c = 0; c < K; c++) {
                dx[c] += a * q_i[c];
                dq_i[c] += a * x[c];
            }
            if (i == j)
                break;
            const float *w = p->w + (i * p->H + h) * K, *prev = x - K, beta = p->beta[i * p->HV + hv];
            const float c_dot = dot_f32(K, w, prev), e_dot = dot_f32(K, w, dx);
            float *dw_i = job->g->dw + (i * p->HV + hv) * K;
            job->g->dbeta[i * p->HV + hv] -= e_dot * c_dot;
            for (int64_t c = 0; c < K; c++) {
                dw_i[c] -= beta * (c_dot * dx[c] + e_dot * prev[c]);
                dx[c] -= beta * e_dot * w[c];
            }
        }
        float *dk_j = job->g->dk + (j * p->HV + hv) * K;
        for (int64_t c = 0; c < K; c++)
            dk_j[c] += dx[c];
    }
    /* FlashAttention's form of the softmax's adjoint, without flash_task's correction: l_iJ reads q_i
     * through x_i^(J) = H_i ... H_{J+1} k_J, which this pass no longer holds when row i is complete (README.md) */
    for (int64_t i = start; i < start + length && dbias; i++)
        dbias[i] += row_sum[i];
}

static int path_attn_vjp(const lacs_cpu_call *c)
{
    vjp_state s;
    int rc = load_state(c, LACS_READS_W | LACS_READS_BETA, LACS_READS_G, &s);
    if (rc != LACS_OK)
        return rc;
    problem *p = &s.p;
    rc = lacs_cpu_attention_path_check_beta(p);
    if (rc == LACS_OK && p->g)
        rc = lacs_cpu_attention_gates(p, p->scale, &s.gate); /* H12: the gate inside the scale */
    if (rc == LACS_OK)
        rc = make_grads(p, 1, 1, p->g != NULL, &s.g);
    if (rc == LACS_OK)
        rc = lacs_cpu_attention_path_forward(p);
    if (rc == LACS_OK) {
        row_dots(p, s.dout, s.o, s.D);
        path_vjp_job job = {p, s.dout, s.D, p->g ? &s.gate : NULL, &s.g, NULL, (p->T + 1) * p->K + p->T + 16};
        job.work = malloc((size_t)(job.per_thread * p->threads) * sizeof(float));
        if (!job.work)
            rc = lacs_cpu_error(LACS_ERR_MEMORY, c->op, "out of memory for the workspaces");
        else
            lacs_cpu_parallel_for(p->threads, p->n_seqs * p->HV, path_vjp_task, &job);
        free(job.work);
    }
    if (rc == LACS_OK) {
        write_per_qk_head(p, s.g.dq, 1.0f, lacs_cpu_output(c, "dq"));
        write_per_qk_head(p, s.g.dk, 1.0f, lacs_cpu_output(c, "dk"));
        write_per_qk_head(p, s.g.dw, 1.0f, lacs_cpu_output(c, "dw"));
        write_as_is(s.g.dv, p->tokens * p->HV * p->V, lacs_cpu_output(c, "dv"));
        write_as_is(s.g.dbeta, p->tokens * p->HV, lacs_cpu_output(c, "dbeta"));
        if (p->g)
            write_gate_grads(p, &s.gate, s.g.dbias, p->scale, lacs_cpu_output(c, "dg"), NULL);
    }
    free_state(&s);
    return rc;
}

/* ---- the family's gradients ---- */

int lacs_cpu_attention_vjp_implemented(const char *op)
{
    return op && (strcmp(op, "softmax_attn_vjp") == 0 || strcmp(op, "fox_vjp") == 0 ||
                  strcmp(op, "deltaformer_vjp") == 0 || strcmp(op, "path_attn_vjp") == 0);
}

int lacs_cpu_attention_vjp(const lacs_cpu_call *c)
{
    if (strcmp(c->op, "softmax_attn_vjp") == 0)
        return softmax_or_fox_vjp(c, 0);
    if (strcmp(c->op, "fox_vjp") == 0)
        return softmax_or_fox_vjp(c, 1);
    if (strcmp(c->op, "deltaformer_vjp") == 0)
        return deltaformer_vjp(c);
    if (strcmp(c->op, "path_attn_vjp") == 0)
        return path_attn_vjp(c);
    return LACS_UNSUPPORTED;
}

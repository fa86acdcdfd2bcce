/* builtin:cpu, the recurrent family (optimized/cpu/README.md section 2): linear_attn (H2),
 * linear_attn_postnorm (H3), retention, simple_gla, gla (H4), delta_rule
 * (H6), gated_delta_rule with g or gk (H8 first form), comba (H8 second form)
 * and efla (E5), by the chunkwise WY/UT algorithm (H7 per chunk, H9 within
 * it), with a recurrent step for decoding.
 *
 * A sequence is cut into chunks of C = 64 tokens (the last may be shorter). In
 * a chunk of n tokens entering with the state S [K x V], with G_i the sum of
 * the log decays of tokens 0..i of the chunk (per key channel c: G_ic; all 0
 * without decay) and b_i the step size (beta; EFLA's c_i; none for the linear
 * family):
 *
 *   A_ij  = b_i sum_c k_ic k_jc exp(Gr_ic - G_jc)     j < i, else 0
 *   T     = (I + A)^{-1}                              forward substitution
 *   W     = T [b_j exp(Gr_j) (.) k_j]_j               the WY/UT form (H7)
 *   U     = T [b_j v_j]_j
 *   V'    = U - W S                                   the corrected values
 *   o_i   = scale (S^T (exp(G_i) (.) q_i) + sum_{j<=i} (sum_c q_ic k_jc exp(G_ic - G_jc)) V'_j)
 *   S    <- exp(G_last) (.) S + sum_j (exp(G_last - G_j) (.) k_j) V'_j^T
 *
 * Gr = G where the correction reads the decayed state (delta rule, gated delta
 * rule: H8 first form); Gr_i = G_{i-1} (exclusive sum) for Comba, whose
 * correction reads the un-decayed state (H8 second form). The linear family
 * has no correction: V' = v. Why it is right: unrolling the recurrence over
 * the chunk gives u_i = b_i (v_i - Gr-decayed h_{i-1}^T k_i) with
 * h_{i-1} = exp(G_{i-1}) S + sum_{j<i} exp(G_{i-1} - G_j) k_j u_j^T, i.e.
 * (I + A) u = b v - b exp(Gr) K S, solved by T; the rest is H9 per chunk.
 *
 * exp is taken only of G_i - G_j (i >= j), G_i and G_last - G_j, all <= 0 for
 * decays g <= 0, so nothing overflows however strong the decay. G is an fp32
 * sum over at most 64 tokens, as SPEC.md 11.1 allows.
 *
 * Products. With scalar or no decay every product is a GEMM (the ISA's sgemm,
 * or bgemm in the bf16 tier: the operands are rounded to bf16 where they are
 * handed to a product, the intermediates fla stores in bf16 (T, W, U, V', the
 * per-chunk state it reads, the intra-chunk matrix), accumulation and the
 * state S stay fp32, SPEC.md 11.1). With a per-channel decay (gla, gated_delta_rule
 * with gk) the two n x n matrices are built directly, with an exp per term;
 * the other products are GEMMs.
 *
 * A sequence of one token (decoding from a state) takes the recurrent step
 * instead: the same recurrence, token by token, with no chunk workspace.
 *
 * Threads: one task per (sequence, value head); each thread owns a workspace
 * of O(C (K + V) + K V + C^2) floats, so memory does not grow with T.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* ---- the op ---- */

typedef enum { STEP_NONE = 0, STEP_BETA = 1, STEP_EFLA = 2 } step_kind;
typedef enum { GATE_NONE = 0, GATE_CONSTANT = 1, GATE_SCALAR = 2, GATE_CHANNEL = 3 } gate_kind;

typedef struct {
    const lacs_cpu_call *call;
    int64_t B, T, H, HV, K, V, n_seqs;
    step_kind step;
    gate_kind gate;
    int comba;                  /* the correction reads the un-decayed state */
    int postnorm;               /* H3: RMSNorm of each output row */
    double scale, eps;
    const lacs_tensor *q, *k, *v, *beta, *g, *h0;
    lacs_tensor *o, *ht;
} recurrent_op;

/* The log decay of token t (flattened), value head hv, key channel c. */
static inline float gate_at(const recurrent_op *r, int64_t t, int64_t hv, int64_t c)
{
    switch (r->gate) {
    case GATE_CONSTANT:
        return lacs_cpu_tensor_at(r->g, hv);
    case GATE_SCALAR:
        return lacs_cpu_tensor_at(r->g, t * r->HV + hv);
    case GATE_CHANNEL:
        return lacs_cpu_tensor_at(r->g, (t * r->HV + hv) * r->K + c);
    case GATE_NONE:
        break;
    }
    return 0.0f;
}

/* b_t: beta, or EFLA's c = (1 - exp(-beta |k|^2)) / |k|^2 (E5), beta in the limit |k| -> 0. */
static float step_size(const recurrent_op *r, int64_t t, int64_t hv, const float *k_row)
{
    if (r->step == STEP_NONE)
        return 1.0f;
    const float beta = lacs_cpu_tensor_at(r->beta, t * r->HV + hv);
    if (r->step == STEP_BETA)
        return beta;
    float knorm2 = 0.0f;
    for (int64_t c = 0; c < r->K; c++)
        knorm2 += k_row[c] * k_row[c];
    if (knorm2 == 0.0f)
        return beta;
    return -expm1f(-beta * knorm2) / knorm2; /* expm1: no cancellation when beta |k|^2 is small */
}

/* ---- the workspace of one thread ---- */

typedef struct {
    float *S;             /* K x V: the state */
    float *q, *k, *v;     /* n x K, n x K, n x V: the chunk's rows */
    float *kt;            /* K x n: k transposed (K K^T, Q K^T), then decayed to the chunk's end (the state update) */
    float *G, *Gr;        /* n x Kg (Kg = K per channel, else 1): inclusive sums, and the rows' sums Gr */
    float *b;             /* n: step sizes */
    float *A, *Tinv;      /* n x n: A, then the output's intra-chunk matrix; (I + A)^{-1} */
    float *rk, *w;        /* n x K: right-hand side b exp(Gr) k, then -W */
    float *u;             /* n x V: U, then V' */
    float *out;           /* n x V: the chunk's outputs */
    float *qg;            /* n x K: scale exp(G) (.) q */
    uint16_t *a16, *b16;  /* bf16 operands */
    uint16_t *t16;        /* an operand rounded, before packing */
    uint16_t *k16, *s16;  /* bf16 tier: K^T and S packed once per chunk (each is used twice) */
} workspace;

static void workspace_free(workspace *w)
{
    free(w->S);
    free(w->q);
    free(w->k);
    free(w->v);
    free(w->kt);
    free(w->G);
    free(w->Gr);
    free(w->b);
    free(w->A);
    free(w->Tinv);
    free(w->rk);
    free(w->w);
    free(w->u);
    free(w->out);
    free(w->qg);
    free(w->a16);
    free(w->b16);
    free(w->t16);
    free(w->k16);
    free(w->s16);
    memset(w, 0, sizeof *w);
}

static int workspace_alloc(workspace *w, int64_t K, int64_t V)
{
    const int64_t chunk_or_K = LACS_CPU_CHUNK > K ? LACS_CPU_CHUNK : K;
    const size_t C = LACS_CPU_CHUNK, side = (size_t)(chunk_or_K > V ? chunk_or_K : V) + 1; /* + 1: an odd packed k */
    memset(w, 0, sizeof *w);
    w->S = malloc((size_t)(K * V) * sizeof(float));
    w->q = malloc(C * (size_t)K * sizeof(float));
    w->k = malloc(C * (size_t)K * sizeof(float));
    w->v = malloc(C * (size_t)V * sizeof(float));
    w->kt = malloc((size_t)K * C * sizeof(float));
    w->G = malloc(C * (size_t)K * sizeof(float));
    w->Gr = malloc(C * (size_t)K * sizeof(float));
    w->b = malloc(C * sizeof(float));
    w->A = malloc(C * C * sizeof(float));
    w->Tinv = malloc(C * C * sizeof(float));
    w->rk = malloc(C * (size_t)K * sizeof(float));
    w->w = malloc(C * (size_t)K * sizeof(float));
    w->u = malloc(C * (size_t)V * sizeof(float));
    w->out = malloc(C * (size_t)V * sizeof(float));
    w->qg = malloc(C * (size_t)K * sizeof(float));
    w->a16 = malloc(side * side * sizeof(uint16_t));
    w->b16 = malloc(side * side * sizeof(uint16_t));
    w->t16 = malloc(side * side * sizeof(uint16_t));
    w->k16 = malloc(side * side * sizeof(uint16_t));
    w->s16 = malloc(side * side * sizeof(uint16_t));
    if (!w->S || !w->q || !w->k || !w->v || !w->kt || !w->G || !w->Gr || !w->b || !w->A || !w->Tinv || !w->rk ||
        !w->w || !w->u || !w->out || !w->qg || !w->a16 || !w->b16 || !w->t16 || !w->k16 || !w->s16) {
        workspace_free(w);
        return LACS_ERR_MEMORY;
    }
    return LACS_OK;
}

/* ---- products ---- */

/* bf16 tier: B [k x n] (ldb), or its transpose [n x k] when b_transposed,
 * rounded to bf16 and packed for bgemm into Bp (lacs_cpu_pack_bf16). */
static void pack_operand(const recurrent_op *r, workspace *w, int64_t k, int64_t n, const float *B, int64_t ldb,
                         int b_transposed, uint16_t *Bp)
{
    if (b_transposed) {
        lacs_cpu_round_bf16_rows(r->call->isa, n, k, B, ldb, w->t16);
        lacs_cpu_pack_bf16_transposed(k, n, w->t16, k, Bp);
    } else {
        lacs_cpu_round_bf16_rows(r->call->isa, k, n, B, ldb, w->t16);
        lacs_cpu_pack_bf16(k, n, w->t16, n, Bp);
    }
}

/* C[m x n] (+)= A[m x k] B[k x n] (leading dimensions lda, ldb, ldc). fp32
 * tier: the ISA's sgemm. bf16 tier: both operands rounded to bf16 here, where
 * the algorithm hands them to a product, and bgemm (fp32 accumulation);
 * `packed`, when not NULL, is B already packed (an operand used twice in a
 * chunk). */
static void product(const recurrent_op *r, workspace *w, int64_t m, int64_t n, int64_t k, const float *A,
                    int64_t lda, const float *B, int64_t ldb, const uint16_t *packed, float *C, int64_t ldc,
                    int accumulate)
{
    const lacs_cpu_gemm *gemm = r->call->gemm;
    if (!r->call->bf16) {
        gemm->sgemm(m, n, k, A, lda, B, ldb, C, ldc, accumulate);
        return;
    }
    if (!packed) {
        pack_operand(r, w, k, n, B, ldb, 0, w->b16);
        packed = w->b16;
    }
    lacs_cpu_round_bf16_rows(r->call->isa, m, k, A, lda, w->a16);
    gemm->bgemm(m, n, k, w->a16, k, packed, C, ldc, accumulate);
}

/* ---- one chunk ---- */

/* Loads the chunk's rows, gates and step sizes: tokens t0 .. t0 + n - 1
 * (flattened), value head hv, q/k head hv / (HV / H). */
static void load_chunk(const recurrent_op *r, workspace *w, int64_t t0, int64_t n, int64_t hv)
{
    const int64_t K = r->K, V = r->V, h = hv / (r->HV / r->H);
    const int64_t Kg = r->gate == GATE_CHANNEL ? K : 1;
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = t0 + i;
        lacs_cpu_tensor_row(r->q, (t * r->H + h) * K, K, w->q + i * K);
        lacs_cpu_tensor_row(r->k, (t * r->H + h) * K, K, w->k + i * K);
        lacs_cpu_tensor_row(r->v, (t * r->HV + hv) * V, V, w->v + i * V);
        w->b[i] = step_size(r, t, hv, w->k + i * K);
        /* G: inclusive fp32 sums from the chunk's start; Gr: the rows' (exclusive for Comba) */
        for (int64_t c = 0; c < Kg; c++) {
            const float before = i > 0 ? w->G[(i - 1) * Kg + c] : 0.0f;
            w->G[i * Kg + c] = before + gate_at(r, t, hv, c);
            w->Gr[i * Kg + c] = r->comba ? before : w->G[i * Kg + c];
        }
    }
}

/* T = (I + A)^{-1} for A strictly lower triangular (n x n), by forward
 * substitution row by row: T_i = e_i - sum_{j<i} A_ij T_j. T is unit lower
 * triangular; its row i has non-zeros in columns 0..i only. */
static void unit_lower_inverse(int64_t n, const float *A, float *T)
{
    memset(T, 0, (size_t)(n * n) * sizeof *T);
    for (int64_t i = 0; i < n; i++) {
        float *Ti = T + i * n;
        for (int64_t j = 0; j < i; j++) {
            const float a = A[i * n + j];
            if (a == 0.0f)
                continue;
            const float *Tj = T + j * n;
            for (int64_t c = 0; c <= j; c++)
                Ti[c] -= a * Tj[c];
        }
        Ti[i] = 1.0f;
    }
}

static void run_chunk(const recurrent_op *r, workspace *w, int64_t t0, int64_t n, int64_t hv)
{
    const int64_t K = r->K, V = r->V;
    const int channel = r->gate == GATE_CHANNEL;
    const int64_t Kg = channel ? K : 1;
    const float scale = (float)r->scale;
    load_chunk(r, w, t0, n, hv);
    const float *G = w->G, *Gr = w->Gr;
    /* K^T is the right operand of K K^T and Q K^T: transposed once (fp32
     * tier), or rounded and packed once (bf16 tier, with S, which W S and Q S share). */
    const uint16_t *k_packed = NULL, *s_packed = NULL;
    if (r->call->bf16) {
        pack_operand(r, w, K, n, w->k, K, 1, w->k16);
        pack_operand(r, w, K, V, w->S, V, 0, w->s16);
        k_packed = w->k16;
        s_packed = w->s16;
    } else
        for (int64_t c = 0; c < K; c++)
            for (int64_t j = 0; j < n; j++)
                w->kt[c * n + j] = w->k[j * K + c];

    /* V': v for the linear family, else U - W S. */
    float *vnew = r->step == STEP_NONE ? w->v : w->u;
    if (r->step != STEP_NONE) {
        /* A_ij = b_i sum_c k_ic k_jc exp(Gr_ic - G_jc), j < i. */
        if (!channel) {
            product(r, w, n, n, K, w->k, K, w->kt, n, k_packed, w->A, n, 0); /* K K^T */
            for (int64_t i = 0; i < n; i++) {
                for (int64_t j = 0; j < i; j++)
                    w->A[i * n + j] *= w->b[i] * expf(Gr[i] - G[j]);
                for (int64_t j = i; j < n; j++)
                    w->A[i * n + j] = 0.0f;
            }
        } else {
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < n; j++) {
                    float sum = 0.0f;
                    for (int64_t c = 0; j < i && c < K; c++)
                        sum += w->k[i * K + c] * w->k[j * K + c] * expf(Gr[i * K + c] - G[j * K + c]);
                    w->A[i * n + j] = j < i ? w->b[i] * sum : 0.0f;
                }
        }
        unit_lower_inverse(n, w->A, w->Tinv);
        /* -W = T [-b_j exp(Gr_j) k_j] and U = T [b_j v_j] */
        for (int64_t i = 0; i < n; i++) {
            const float row_decay = channel ? 0.0f : expf(Gr[i]); /* scalar decay: one exp per row */
            for (int64_t c = 0; c < K; c++)
                w->rk[i * K + c] = -w->b[i] * (channel ? expf(Gr[i * K + c]) : row_decay) * w->k[i * K + c];
            for (int64_t c = 0; c < V; c++)
                w->v[i * V + c] *= w->b[i];
        }
        product(r, w, n, K, n, w->Tinv, n, w->rk, K, NULL, w->w, K, 0);
        product(r, w, n, V, n, w->Tinv, n, w->v, V, NULL, w->u, V, 0);
        /* V' = U + (-W) S */
        product(r, w, n, V, K, w->w, K, w->S, V, s_packed, w->u, V, 1);
    }

    /* o_i = scale S^T (exp(G_i) (.) q_i) + sum_{j<=i} P_ij V'_j */
    for (int64_t i = 0; i < n; i++) {
        const float row_decay = channel ? 0.0f : expf(G[i]);
        for (int64_t c = 0; c < K; c++)
            w->qg[i * K + c] = scale * (channel ? expf(G[i * K + c]) : row_decay) * w->q[i * K + c];
    }
    product(r, w, n, V, K, w->qg, K, w->S, V, s_packed, w->out, V, 0);
    if (!channel) {
        product(r, w, n, n, K, w->q, K, w->kt, n, k_packed, w->A, n, 0); /* Q K^T */
        for (int64_t i = 0; i < n; i++) {
            for (int64_t j = 0; j <= i; j++)
                w->A[i * n + j] *= scale * expf(G[i] - G[j]);
            for (int64_t j = i + 1; j < n; j++)
                w->A[i * n + j] = 0.0f;
        }
    } else {
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                float sum = 0.0f;
                for (int64_t c = 0; j <= i && c < K; c++)
                    sum += w->q[i * K + c] * w->k[j * K + c] * expf(G[i * K + c] - G[j * K + c]);
                w->A[i * n + j] = j <= i ? scale * sum : 0.0f;
            }
    }
    product(r, w, n, V, n, w->A, n, vnew, V, NULL, w->out, V, 1);

    /* S <- exp(G_last) (.) S + sum_j (exp(G_last - G_j) (.) k_j) V'_j^T */
    const float *Glast = G + (n - 1) * Kg;
    if (!channel) /* scalar decay: exp(G_last - G_j) once per token, kept in b (no longer needed) */
        for (int64_t j = 0; j < n; j++)
            w->b[j] = expf(Glast[0] - G[j]);
    for (int64_t c = 0; c < K; c++) {
        const float decay = expf(Glast[channel ? c : 0]);
        for (int64_t j = 0; j < V; j++)
            w->S[c * V + j] *= decay;
        for (int64_t j = 0; j < n; j++)
            w->kt[c * n + j] = (channel ? expf(Glast[c] - G[j * K + c]) : w->b[j]) * w->k[j * K + c];
    }
    product(r, w, K, V, n, w->kt, n, vnew, V, NULL, w->S, V, 1);
}

/* ---- the recurrent step (decoding) ---- */

/* One token t from the state S, as the reference's recurrence (H2-H8, E5):
 * decay, correction, write, read. */
static void run_token(const recurrent_op *r, workspace *w, int64_t t, int64_t hv)
{
    const int64_t K = r->K, V = r->V, h = hv / (r->HV / r->H);
    float *S = w->S, *q = w->q, *k = w->k, *v = w->v, *u = w->u;
    lacs_cpu_tensor_row(r->q, (t * r->H + h) * K, K, q);
    lacs_cpu_tensor_row(r->k, (t * r->H + h) * K, K, k);
    lacs_cpu_tensor_row(r->v, (t * r->HV + hv) * V, V, v);
    const float b = step_size(r, t, hv, k);
    /* Comba reads the un-decayed state (H8 second form): the correction before the decay */
    if (r->step != STEP_NONE && r->comba) {
        for (int64_t j = 0; j < V; j++)
            u[j] = 0.0f;
        for (int64_t c = 0; c < K; c++)
            for (int64_t j = 0; j < V; j++)
                u[j] += S[c * V + j] * k[c];
    }
    for (int64_t c = 0; c < K; c++) {
        const float decay = expf(gate_at(r, t, hv, c));
        for (int64_t j = 0; j < V; j++)
            S[c * V + j] *= decay;
    }
    if (r->step != STEP_NONE && !r->comba) {
        for (int64_t j = 0; j < V; j++)
            u[j] = 0.0f;
        for (int64_t c = 0; c < K; c++)
            for (int64_t j = 0; j < V; j++)
                u[j] += S[c * V + j] * k[c];
    }
    for (int64_t j = 0; j < V; j++)
        u[j] = r->step == STEP_NONE ? v[j] : b * (v[j] - u[j]);
    for (int64_t c = 0; c < K; c++)
        for (int64_t j = 0; j < V; j++)
            S[c * V + j] += k[c] * u[j];
    float *out = w->out;
    for (int64_t j = 0; j < V; j++)
        out[j] = 0.0f;
    for (int64_t c = 0; c < K; c++)
        for (int64_t j = 0; j < V; j++)
            out[j] += S[c * V + j] * q[c];
    for (int64_t j = 0; j < V; j++)
        out[j] *= (float)r->scale;
}

/* ---- one (sequence, value head) ---- */

/* H3: o_t / sqrt(mean(o_t^2) + eps) over V; a zero row with eps = 0 stays 0. */
static void rms_normalize(float *row, int64_t V, double eps)
{
    double sum = 0.0;
    for (int64_t j = 0; j < V; j++)
        sum += (double)row[j] * row[j];
    const double denominator = sqrt(sum / (double)V + eps);
    if (denominator == 0.0)
        return;
    for (int64_t j = 0; j < V; j++)
        row[j] = (float)(row[j] / denominator);
}

static void store_outputs(const recurrent_op *r, const float *out, int64_t t0, int64_t n, int64_t hv)
{
    float *o = r->o->data;
    for (int64_t i = 0; i < n; i++) {
        float *row = o + ((t0 + i) * r->HV + hv) * r->V;
        memcpy(row, out + i * r->V, (size_t)r->V * sizeof *row);
        if (r->postnorm)
            rms_normalize(row, r->V, r->eps);
    }
}

typedef struct {
    const recurrent_op *r;
    workspace *workspaces;
} recurrent_job;

static void run_sequence_head(void *context, int64_t item, int thread)
{
    const recurrent_job *job = context;
    const recurrent_op *r = job->r;
    workspace *w = &job->workspaces[thread];
    const int64_t seq = item / r->HV, hv = item % r->HV, KV = r->K * r->V;
    int64_t start;
    const int64_t length = lacs_cpu_sequences(r->call, r->T, seq, &start);

    if (r->h0)
        lacs_cpu_tensor_row(r->h0, (seq * r->HV + hv) * KV, KV, w->S);
    else
        memset(w->S, 0, (size_t)KV * sizeof *w->S);

    if (length == 1) {
        run_token(r, w, start, hv);
        store_outputs(r, w->out, start, 1, hv);
    } else
        for (int64_t t0 = start; t0 < start + length; t0 += LACS_CPU_CHUNK) {
            const int64_t n = start + length - t0 < LACS_CPU_CHUNK ? start + length - t0 : LACS_CPU_CHUNK;
            run_chunk(r, w, t0, n, hv);
            store_outputs(r, w->out, t0, n, hv);
        }

    if (r->ht)
        memcpy((float *)r->ht->data + (seq * r->HV + hv) * KV, w->S, (size_t)KV * sizeof *w->S);
}

int lacs_cpu_recurrent(const lacs_cpu_call *c)
{
    recurrent_op r = {.call = c};
    const char *op = c->op;
    r.q = lacs_cpu_input(c, "q");
    r.k = lacs_cpu_input(c, "k");
    r.v = lacs_cpu_input(c, "v");
    r.beta = lacs_cpu_input(c, "beta");
    r.h0 = lacs_cpu_input(c, "h0");
    r.o = lacs_cpu_output(c, "o");
    r.ht = lacs_cpu_output(c, "ht");
    r.B = r.q->shape[0];
    r.T = r.q->shape[1];
    r.H = r.q->shape[2];
    r.K = r.q->shape[3];
    r.HV = r.v->shape[2];
    r.V = r.v->shape[3];
    const lacs_tensor *cu = lacs_cpu_input(c, "cu_seqlens");
    r.n_seqs = cu ? cu->shape[0] - 1 : r.B;
    r.scale = lacs_cpu_param(c, "scale", 1.0 / sqrt((double)r.K));
    r.eps = lacs_cpu_param(c, "eps", 0.0);

    if (strcmp(op, "linear_attn_postnorm") == 0)
        r.postnorm = 1;
    if (strcmp(op, "retention") == 0) {
        r.g = lacs_cpu_input(c, "g_gamma");
        r.gate = GATE_CONSTANT;
    } else if ((r.g = lacs_cpu_input(c, "gk")) != NULL)
        r.gate = GATE_CHANNEL;
    else if ((r.g = lacs_cpu_input(c, "g")) != NULL)
        r.gate = GATE_SCALAR;
    if (strcmp(op, "delta_rule") == 0 || strcmp(op, "gated_delta_rule") == 0 || strcmp(op, "comba") == 0)
        r.step = STEP_BETA;
    else if (strcmp(op, "efla") == 0)
        r.step = STEP_EFLA;
    r.comba = strcmp(op, "comba") == 0;
    if (r.postnorm && !(r.eps >= 0.0))
        return lacs_cpu_error(LACS_ERR_PARAM, op, "eps = %g must be >= 0", r.eps);
    if (!r.o)
        return lacs_cpu_error(LACS_ERR_INPUT, op, "output 'o' is required");

    if (r.B * r.T == 0 || r.HV == 0) {
        if (r.ht) { /* no token: the state is h0 (or zeros) */
            const int64_t n = lacs_tensor_count(r.ht);
            for (int64_t i = 0; i < n; i++)
                ((float *)r.ht->data)[i] = r.h0 ? lacs_cpu_tensor_at(r.h0, i) : 0.0f;
        }
        return LACS_OK;
    }

    const int threads = c->threads < r.n_seqs * r.HV ? c->threads : (int)(r.n_seqs * r.HV);
    workspace *workspaces = calloc((size_t)(threads > 0 ? threads : 1), sizeof *workspaces);
    if (!workspaces)
        return lacs_cpu_error(LACS_ERR_MEMORY, op, "out of memory for %d workspaces", threads);
    int rc = LACS_OK;
    for (int t = 0; t < threads && rc == LACS_OK; t++)
        rc = workspace_alloc(&workspaces[t], r.K, r.V);
    if (rc == LACS_OK) {
        recurrent_job job = {.r = &r, .workspaces = workspaces};
        lacs_cpu_parallel_for(threads, r.n_seqs * r.HV, run_sequence_head, &job);
    } else
        rc = lacs_cpu_error(LACS_ERR_MEMORY, op, "out of memory for the chunk workspaces (K = %lld, V = %lld)",
                            (long long)r.K, (long long)r.V);
    for (int t = 0; t < threads; t++)
        workspace_free(&workspaces[t]);
    free(workspaces);
    return rc;
}

/* The floating-point operations of run_chunk with scalar or no decay, for
 * one head over T tokens, counted as the dense products it performs: per
 * chunk of n tokens
 *   K K^T, Q K^T, W = T (.)        3 x 2 n^2 K
 *   U = T (b v), P V'              2 x 2 n^2 V
 *   W S, Q S, K^T V'               3 x 2 n K V
 *   T = (I + A)^{-1}               n^3 / 3
 * (the element-wise scaling by gates and steps, O(n^2 + n (K + V)), is not
 * counted). */
double lacs_cpu_chunk_flops(int64_t T, int64_t K, int64_t V)
{
    double flops = 0;
    for (int64_t t0 = 0; t0 < T; t0 += LACS_CPU_CHUNK) {
        const double n = (double)(T - t0 < LACS_CPU_CHUNK ? T - t0 : LACS_CPU_CHUNK);
        flops += 6 * n * K * V + 6 * n * n * K + 4 * n * n * V + n * n * n / 3;
    }
    return flops;
}

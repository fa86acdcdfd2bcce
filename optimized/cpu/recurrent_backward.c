/* builtin:cpu, the gradients of the recurrent family (SPEC.md 4.19; README.md
 * section 9): linear_attn_vjp, retention_vjp, simple_gla_vjp, gla_vjp
 * (H2, H4), delta_rule_vjp (H6), gated_delta_rule_vjp with g or gk (H8 first
 * form), comba_vjp (H8 second form) and efla_vjp (E5).
 *
 * The algorithm: the adjoint of each token (SPEC.md 4.19's table) walked
 * back from the last token, in binary32, over states recomputed chunk by
 * chunk from checkpoints, so that no buffer grows with T faster than its
 * square root:
 *   1. the forward from h0, keeping the state at the start of every segment
 *      of M = ceil(sqrt(#chunks)) chunks of C = BACKWARD_CHUNK tokens;
 *   2. segment by segment from the last: the forward again from the
 *      segment's state, keeping the state at the start of each of its chunks;
 *   3. chunk by chunk from the last: the forward again from the chunk's
 *      state, keeping the C + 1 states of its tokens and their corrections'
 *      errors e, then the adjoint of its tokens from the last, dh carried
 *      from chunk to chunk (dht on entry, dh0 at the end).
 * Per thread: 2 ceil(sqrt(#chunks)) + C + 2 states of K x V floats and
 * O(C (K + V)) rows. The forward runs three times, the adjoint once; the
 * kernels (the forward over a chunk and its adjoint, one sweep of the state
 * per token each) are recurrent_backward_kernels.h's,
 * built per instruction set. One task per (sequence, q/k head): a q/k head
 * read by G value heads gets their gradients summed in value-head order
 * (SPEC.md 4.19, GVA), each task writing only its own rows; retention's
 * dg_gamma is summed over sequences after the tasks, in sequence order.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/reference.h"
#include "recurrent.h"
#include "recurrent_backward.h"

#define BACKWARD_CHUNK LACS_CPU_BACKWARD_CHUNK

typedef struct {
    const lacs_cpu_call *call;
    int64_t B, T, H, HV, G, K, V, n_seqs, max_length;
    lacs_cpu_backward_update update;
    lacs_cpu_gate_kind gate;
    int efla;
    float scale;
    const lacs_tensor *q, *k, *v, *beta, *g, *h0, *dout, *dht;
    lacs_tensor *dq, *dk, *dv, *dbeta, *dg, *dh0; /* dg: dg, dgk or dg_gamma, as the gate */
    double *dg_gamma_parts;                       /* [n_seqs][HV]: retention's per-sequence sums */
    const lacs_cpu_backward_kernels *kernels;
} backward_op;

/* One thread's workspace. */
typedef struct {
    float *segments;   /* M x K V: the states at the segments' starts */
    float *chunks;     /* M x K V: the states at the chunks' starts of one segment */
    float *tokens;     /* (C + 1) x K V: the states of one chunk's tokens */
    float *dh;         /* K V */
    float *q, *k, *v, *dout, *decay, *e; /* a chunk's rows: C x K, C x K, C x V, C x V, C x K, C x V */
    float *coef, *dc_dbeta, *dc_dknorm2;  /* C */
    float *dq, *dk, *dv, *dlog, *dcoef;   /* a chunk's gradients: C x K, C x K, C x V, C x K, C */
    float *du, *u, *dp;                   /* V each */
    lacs_cpu_backward_token x[BACKWARD_CHUNK];
} backward_workspace;

static void workspace_free(backward_workspace *w)
{
    float *all[] = {w->segments, w->chunks, w->tokens, w->dh, w->q, w->k, w->v, w->dout, w->decay, w->e,
                    w->coef, w->dc_dbeta, w->dc_dknorm2, w->dq, w->dk, w->dv, w->dlog, w->dcoef, w->du, w->u, w->dp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    memset(w, 0, sizeof *w);
}

static int64_t chunks_of(int64_t length) { return (length + BACKWARD_CHUNK - 1) / BACKWARD_CHUNK; }

/* M = ceil(sqrt(#chunks)): the chunks of a segment, and a bound on the number of segments. */
static int64_t segment_chunks(int64_t length)
{
    const int64_t n = chunks_of(length);
    int64_t m = (int64_t)sqrt((double)n);
    while (m * m < n)
        m++;
    return m > 0 ? m : 1;
}

static float *floats(size_t n) { return malloc((n > 0 ? n : 1) * sizeof(float)); }

static int workspace_alloc(backward_workspace *w, const backward_op *r)
{
    const size_t C = BACKWARD_CHUNK, K = (size_t)r->K, V = (size_t)r->V, KV = K * V;
    const size_t M = (size_t)segment_chunks(r->max_length);
    memset(w, 0, sizeof *w);
    w->segments = floats(M * KV);
    w->chunks = floats(M * KV);
    w->tokens = floats((C + 1) * KV);
    w->dh = floats(KV);
    w->q = floats(C * K);
    w->k = floats(C * K);
    w->v = floats(C * V);
    w->dout = floats(C * V);
    w->decay = floats(C * K);
    w->e = floats(C * V);
    w->coef = floats(C);
    w->dc_dbeta = floats(C);
    w->dc_dknorm2 = floats(C);
    w->dq = floats(C * K);
    w->dk = floats(C * K);
    w->dv = floats(C * V);
    w->dlog = floats(C * K);
    w->dcoef = floats(C);
    w->du = floats(V);
    w->u = floats(V);
    w->dp = floats(V);
    if (!w->segments || !w->chunks || !w->tokens || !w->dh || !w->q || !w->k || !w->v || !w->dout || !w->decay ||
        !w->e || !w->coef || !w->dc_dbeta || !w->dc_dknorm2 || !w->dq || !w->dk || !w->dv || !w->dlog || !w->dcoef ||
        !w->du || !w->u || !w->dp) {
        workspace_free(w);
        return LACS_ERR_MEMORY;
    }
    return LACS_OK;
}

/* The rows of tokens t0 .. t0 + n - 1 (flattened axis) of value head hv into
 * the workspace: k, v, the decays exp(g), the steps c (and EFLA's dc/dbeta,
 * dc/d|k|^2); q and do too when `adjoint`. */
static void load_chunk(const backward_op *r, backward_workspace *w, int64_t t0, int64_t n, int64_t hv, int adjoint)
{
    const int64_t K = r->K, V = r->V, h = hv / r->G;
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = t0 + i;
        float *k = w->k + i * K;
        lacs_cpu_tensor_row(r->k, (t * r->H + h) * K, K, k);
        lacs_cpu_tensor_row(r->v, (t * r->HV + hv) * V, V, w->v + i * V);
        if (adjoint) {
            lacs_cpu_tensor_row(r->q, (t * r->H + h) * K, K, w->q + i * K);
            lacs_cpu_tensor_row(r->dout, (t * r->HV + hv) * V, V, w->dout + i * V);
        }
        float *decay = w->decay + i * K;
        switch (r->gate) {
        case GATE_CONSTANT:
        case GATE_SCALAR: {
            const float f = expf(lacs_cpu_tensor_at(r->g, r->gate == GATE_CONSTANT ? hv : t * r->HV + hv));
            for (int64_t c = 0; c < K; c++)
                decay[c] = f;
            break;
        }
        case GATE_CHANNEL:
            lacs_cpu_tensor_row(r->g, (t * r->HV + hv) * K, K, decay);
            for (int64_t c = 0; c < K; c++)
                decay[c] = expf(decay[c]);
            break;
        case GATE_NONE:
            break;
        }
        w->coef[i] = 1.0f;
        w->dc_dbeta[i] = 1.0f;
        w->dc_dknorm2[i] = 0.0f;
        if (r->update != BACKWARD_LINEAR) {
            const float beta = lacs_cpu_tensor_at(r->beta, t * r->HV + hv);
            w->coef[i] = beta;
            if (r->efla) { /* E5: c = (1 - exp(-beta |k|^2)) / |k|^2, beta at |k| = 0; its derivatives (SPEC.md 4.19) */
                double knorm2 = 0.0;
                for (int64_t c = 0; c < K; c++)
                    knorm2 += (double)k[c] * k[c];
                w->coef[i] = knorm2 == 0.0 ? beta : (float)(-expm1(-(double)beta * knorm2) / knorm2);
                double dc_dbeta, dc_dknorm2;
                lacs_ref_efla_coefficient_derivatives(beta, knorm2, &dc_dbeta, &dc_dknorm2);
                w->dc_dbeta[i] = (float)dc_dbeta;
                w->dc_dknorm2[i] = (float)dc_dknorm2;
            }
        }
        w->x[i] = (lacs_cpu_backward_token){.q = w->q + i * K,
                                            .k = k,
                                            .v = w->v + i * V,
                                            .dout = w->dout + i * V,
                                            .decay = r->gate != GATE_NONE ? decay : NULL,
                                            .coef = w->coef[i]};
    }
}

/* The state S advanced in place over tokens t0 .. t0 + n - 1 (n <= C). */
static void advance(const backward_op *r, backward_workspace *w, float *S, int64_t t0, int64_t n, int64_t hv)
{
    load_chunk(r, w, t0, n, hv, 0);
    r->kernels->forward(r->update, r->K, r->V, S, 0, n, w->x, w->e);
}

/* The adjoint of one chunk, tokens t0 .. t0 + n - 1, entering with w->tokens[0]
 * = its first state and w->dh = the cotangent of its last; `first_head`: the
 * first value head of the q/k head (dq and dk are written, else added to). */
static void chunk_adjoint(const backward_op *r, backward_workspace *w, int64_t t0, int64_t n, int64_t hv,
                          int first_head, double *dg_gamma)
{
    const int64_t K = r->K, V = r->V, KV = K * V, h = hv / r->G;
    load_chunk(r, w, t0, n, hv, 1);
    r->kernels->forward(r->update, K, V, w->tokens, KV, n, w->x, w->e);
    r->kernels->backward(r->update, K, V, r->scale, w->tokens, KV, n, w->e, w->x, w->dh, w->dq, w->dk, w->dv,
                         w->dlog, w->dcoef, w->du, w->u, w->dp);
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = t0 + i;
        const float dcoef = w->dcoef[i], *dqi = w->dq + i * K, *dlog = w->dlog + i * K;
        float *dki = w->dk + i * K;
        if (r->efla) /* c depends on |k|^2: dk += 2 k dc dc/d|k|^2 */
            for (int64_t c = 0; c < K; c++)
                dki[c] += 2.0f * w->x[i].k[c] * (dcoef * w->dc_dknorm2[i]);
        float *dq = r->dq ? (float *)r->dq->data + (t * r->H + h) * K : NULL;
        float *dk = r->dk ? (float *)r->dk->data + (t * r->H + h) * K : NULL;
        for (int64_t c = 0; c < K; c++) {
            if (dq)
                dq[c] = first_head ? dqi[c] : dq[c] + dqi[c];
            if (dk)
                dk[c] = first_head ? dki[c] : dk[c] + dki[c];
        }
        if (r->dv)
            memcpy((float *)r->dv->data + (t * r->HV + hv) * V, w->dv + i * V, (size_t)V * sizeof(float));
        if (r->dbeta)
            ((float *)r->dbeta->data)[t * r->HV + hv] = dcoef * w->dc_dbeta[i];
        if (r->gate == GATE_CHANNEL) {
            if (r->dg)
                memcpy((float *)r->dg->data + (t * r->HV + hv) * K, dlog, (size_t)K * sizeof(float));
        } else if (r->gate != GATE_NONE) {
            double sum = 0.0;
            for (int64_t c = 0; c < K; c++)
                sum += dlog[c];
            if (r->gate == GATE_SCALAR && r->dg)
                ((float *)r->dg->data)[t * r->HV + hv] = (float)sum;
            else
                *dg_gamma += sum;
        }
    }
}

/* ---- one (sequence, q/k head) ---- */

typedef struct {
    const backward_op *r;
    backward_workspace *workspaces;
} backward_job;

static void run_sequence_head(void *context, int64_t item, int thread)
{
    const backward_job *job = context;
    const backward_op *r = job->r;
    backward_workspace *w = &job->workspaces[thread];
    const int64_t seq = item / r->H, h = item % r->H, KV = r->K * r->V, C = BACKWARD_CHUNK;
    int64_t start;
    const int64_t length = lacs_cpu_sequences(r->call, r->T, seq, &start);
    const int64_t n_chunks = chunks_of(length), M = segment_chunks(length);
    const int64_t n_segments = (n_chunks + M - 1) / M;
    for (int64_t gi = 0; gi < r->G; gi++) {
        const int64_t hv = h * r->G + gi, state = (seq * r->HV + hv) * KV;
        double dg_gamma = 0.0;
        /* 1. the states at the segments' starts */
        if (r->h0)
            lacs_cpu_tensor_row(r->h0, state, KV, w->segments);
        else
            memset(w->segments, 0, (size_t)KV * sizeof(float));
        for (int64_t s = 1; s < n_segments; s++) {
            float *S = w->segments + s * KV;
            memcpy(S, S - KV, (size_t)KV * sizeof(float));
            for (int64_t ch = (s - 1) * M; ch < s * M; ch++)
                advance(r, w, S, start + ch * C, C, hv);
        }
        if (r->dht)
            lacs_cpu_tensor_row(r->dht, state, KV, w->dh);
        else
            memset(w->dh, 0, (size_t)KV * sizeof(float));
        for (int64_t s = n_segments - 1; s >= 0; s--) {
            const int64_t first = s * M, last = (s + 1) * M < n_chunks ? (s + 1) * M : n_chunks;
            /* 2. the states at the segment's chunks' starts */
            memcpy(w->chunks, w->segments + s * KV, (size_t)KV * sizeof(float));
            for (int64_t ch = first + 1; ch < last; ch++) {
                float *S = w->chunks + (ch - first) * KV;
                memcpy(S, S - KV, (size_t)KV * sizeof(float));
                advance(r, w, S, start + (ch - 1) * C, C, hv);
            }
            /* 3. each chunk's tokens, and their adjoint */
            for (int64_t ch = last - 1; ch >= first; ch--) {
                const int64_t t0 = start + ch * C, n = start + length - t0 < C ? start + length - t0 : C;
                memcpy(w->tokens, w->chunks + (ch - first) * KV, (size_t)KV * sizeof(float));
                chunk_adjoint(r, w, t0, n, hv, gi == 0, &dg_gamma);
            }
        }
        if (r->dh0)
            memcpy((float *)r->dh0->data + state, w->dh, (size_t)KV * sizeof(float));
        if (r->dg_gamma_parts)
            r->dg_gamma_parts[seq * r->HV + hv] = dg_gamma;
    }
}

static const lacs_cpu_backward_kernels *kernels_for(lacs_cpu_isa isa)
{
    switch (isa) {
    case LACS_ISA_AVX512:
        return &lacs_cpu_backward_kernels_avx512;
    case LACS_ISA_AVX2:
        return &lacs_cpu_backward_kernels_avx2;
    case LACS_ISA_SCALAR:
        break;
    }
    return &lacs_cpu_backward_kernels_scalar;
}

static const char *const implemented_ops[] = {"linear_attn_vjp", "retention_vjp", "simple_gla_vjp",
                                              "gla_vjp",         "delta_rule_vjp", "gated_delta_rule_vjp",
                                              "comba_vjp",       "efla_vjp"};

int lacs_cpu_recurrent_backward_implements(const char *op)
{
    for (size_t i = 0; i < sizeof implemented_ops / sizeof implemented_ops[0]; i++)
        if (strcmp(op, implemented_ops[i]) == 0)
            return 1;
    return 0;
}

int lacs_cpu_recurrent_backward(const lacs_cpu_call *c)
{
    backward_op r = {.call = c, .kernels = kernels_for(c->isa)};
    const char *op = c->op;
    r.q = lacs_cpu_input(c, "q");
    r.k = lacs_cpu_input(c, "k");
    r.v = lacs_cpu_input(c, "v");
    r.beta = lacs_cpu_input(c, "beta");
    r.h0 = lacs_cpu_input(c, "h0");
    r.dout = lacs_cpu_input(c, "do");
    r.dht = lacs_cpu_input(c, "dht");
    r.dq = lacs_cpu_output(c, "dq");
    r.dk = lacs_cpu_output(c, "dk");
    r.dv = lacs_cpu_output(c, "dv");
    r.dbeta = lacs_cpu_output(c, "dbeta");
    r.dh0 = lacs_cpu_output(c, "dh0");
    r.B = r.q->shape[0];
    r.T = r.q->shape[1];
    r.H = r.q->shape[2];
    r.K = r.q->shape[3];
    r.HV = r.v->shape[2];
    r.V = r.v->shape[3];
    r.G = r.H > 0 ? r.HV / r.H : 1;
    const lacs_tensor *cu = lacs_cpu_input(c, "cu_seqlens");
    r.n_seqs = cu ? cu->shape[0] - 1 : r.B;
    r.scale = (float)lacs_cpu_param(c, "scale", 1.0 / sqrt((double)r.K));

    const lacs_tensor *g = lacs_cpu_input(c, "g"), *gk = lacs_cpu_input(c, "gk");
    const lacs_tensor *g_gamma = lacs_cpu_input(c, "g_gamma");
    if (g && gk)
        return lacs_cpu_error(LACS_ERR_INPUT, op, "give exactly one of 'g' (scalar decay) and 'gk' (per-channel "
                                                  "decay, KDA), not both");
    if (strcmp(op, "gated_delta_rule_vjp") == 0 && !g && !gk)
        return lacs_cpu_error(LACS_ERR_INPUT, op, "give exactly one of 'g' (scalar decay) and 'gk' (per-channel "
                                                  "decay, KDA)");
    if (g_gamma) {
        r.g = g_gamma;
        r.gate = GATE_CONSTANT;
        r.dg = lacs_cpu_output(c, "dg_gamma");
    } else if (gk) {
        r.g = gk;
        r.gate = GATE_CHANNEL;
        r.dg = lacs_cpu_output(c, "dgk");
    } else if (g) {
        r.g = g;
        r.gate = GATE_SCALAR;
        r.dg = lacs_cpu_output(c, "dg");
    }
    if (strcmp(op, "comba_vjp") == 0)
        r.update = BACKWARD_COMBA;
    else if (strcmp(op, "delta_rule_vjp") == 0 || strcmp(op, "gated_delta_rule_vjp") == 0 ||
             strcmp(op, "efla_vjp") == 0)
        r.update = BACKWARD_DELTA;
    else
        r.update = BACKWARD_LINEAR;
    r.efla = strcmp(op, "efla_vjp") == 0;
    if (r.update != BACKWARD_LINEAR && !r.beta)
        return lacs_cpu_error(LACS_ERR_INPUT, op, "input 'beta' is required");

    for (int64_t s = 0; s < r.n_seqs; s++) {
        int64_t start;
        const int64_t length = lacs_cpu_sequences(c, r.T, s, &start);
        if (length > r.max_length)
            r.max_length = length;
    }
    const int64_t items = r.n_seqs * r.H;
    if (r.gate == GATE_CONSTANT && r.dg) {
        r.dg_gamma_parts = calloc((size_t)(r.n_seqs * r.HV > 0 ? r.n_seqs * r.HV : 1), sizeof(double));
        if (!r.dg_gamma_parts)
            return lacs_cpu_error(LACS_ERR_MEMORY, op, "out of memory for the per-sequence sums of dg_gamma");
    }
    int rc = LACS_OK;
    if (items > 0 && r.HV > 0) {
        const int threads = c->threads < items ? c->threads : (int)items;
        backward_workspace *workspaces = calloc((size_t)(threads > 0 ? threads : 1), sizeof *workspaces);
        if (!workspaces)
            rc = lacs_cpu_error(LACS_ERR_MEMORY, op, "out of memory for %d workspaces", threads);
        for (int t = 0; t < threads && rc == LACS_OK; t++)
            if (workspace_alloc(&workspaces[t], &r) != LACS_OK)
                rc = lacs_cpu_error(LACS_ERR_MEMORY, op,
                                    "out of memory for the backward's workspaces (K = %lld, V = %lld, longest "
                                    "sequence %lld tokens)",
                                    (long long)r.K, (long long)r.V, (long long)r.max_length);
        if (rc == LACS_OK) {
            backward_job job = {.r = &r, .workspaces = workspaces};
            lacs_cpu_parallel_for(threads, items, run_sequence_head, &job);
        }
        for (int t = 0; workspaces && t < threads; t++)
            workspace_free(&workspaces[t]);
        free(workspaces);
    }
    if (rc == LACS_OK && r.dg_gamma_parts)
        for (int64_t hv = 0; hv < r.HV; hv++) {
            double sum = 0.0;
            for (int64_t s = 0; s < r.n_seqs; s++)
                sum += r.dg_gamma_parts[s * r.HV + hv];
            ((float *)r.dg->data)[hv] = (float)sum;
        }
    free(r.dg_gamma_parts);
    return rc;
}

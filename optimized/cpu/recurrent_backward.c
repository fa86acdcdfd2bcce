/* builtin:cpu, the gradients of the recurrent family (SPEC.md 4.19; README.md
 * section 9): linear_attn_vjp, retention_vjp, simple_gla_vjp, gla_vjp
 * (H2, H4), delta_rule_vjp (H6), gated_delta_rule_vjp with g or gk (H8 first
 * form), comba_vjp (H8 second form) and efla_vjp (E5).
 *
 * The algorithm: the chunked backward (WY/UT, fla's chunk_gated_delta_rule_bwd),
 * chunk by chunk from the last, in binary32, the products on the instruction
 * set's GEMM and the rest on its vectors (the kernels, recurrent_backward_kernels.h,
 * built per instruction set: chunk_advance, chunk_adjoint). Each chunk's adjoint
 * needs the state it starts from: the states of a sequence's chunks are kept
 * within a budget (LACS_CPU_BACKWARD_STATE_BYTES per thread), and beyond it
 * recomputed from checkpoints, so that no buffer grows with T faster than its
 * square root:
 *   1. the forward from h0, keeping the state at the start of every segment
 *      of M chunks (as many as the budget holds, at least ceil(sqrt(#chunks)));
 *   2. segment by segment from the last: the forward again from the
 *      segment's state, keeping the state at the start of each of its chunks;
 *   3. chunk by chunk from the last: the chunk's adjoint from its state, dS
 *      carried from chunk to chunk (dht on entry, dh0 at the end).
 * A sequence that fits the budget is one segment: step 1 does nothing. This
 * file loads each chunk's rows (widened to fp32) and stores its gradients;
 * one task per (sequence, q/k head): a q/k head read by G value heads gets
 * their gradients summed in value-head order (SPEC.md 4.19, GVA), each task
 * writing only its own rows; retention's dg_gamma is summed over sequences
 * after the tasks, in sequence order.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/reference.h"
#include "recurrent.h"
#include "recurrent_backward.h"

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
    size_t state_bytes;                           /* the chunked backward's budget of chunk states per thread */
    const lacs_cpu_backward_kernels *kernels;
} backward_op;

static int64_t chunks_of(int64_t length, int64_t C) { return (length + C - 1) / C; }

/* The step c of token t, value head hv (beta; EFLA's coefficient of |k|^2, E5; 1 for the linear family) and
 * its derivatives dc/dbeta, dc/d|k|^2 (SPEC.md 4.19). */
static void step_coefficient(const backward_op *r, int64_t t, int64_t hv, const float *k, float *coef,
                             float *dc_dbeta, float *dc_dknorm2)
{
    *coef = 1.0f;
    *dc_dbeta = 1.0f;
    *dc_dknorm2 = 0.0f;
    if (r->update == BACKWARD_LINEAR)
        return;
    const float beta = lacs_cpu_tensor_at(r->beta, t * r->HV + hv);
    *coef = beta;
    if (r->efla) { /* E5: c = (1 - exp(-beta |k|^2)) / |k|^2, beta at |k| = 0; its derivatives (SPEC.md 4.19) */
        double knorm2 = 0.0;
        for (int64_t c = 0; c < r->K; c++)
            knorm2 += (double)k[c] * k[c];
        *coef = knorm2 == 0.0 ? beta : (float)(-expm1(-(double)beta * knorm2) / knorm2);
        double dbeta, dknorm2;
        lacs_ref_efla_coefficient_derivatives(beta, knorm2, &dbeta, &dknorm2);
        *dc_dbeta = (float)dbeta;
        *dc_dknorm2 = (float)dknorm2;
    }
}

/* The gradients of token t, value head hv, into the op's outputs: dq and dk written by the q/k head's first
 * value head (`first_head`) and added to by the others (GVA, in value-head order), dv, dbeta, and the gate's:
 * dgk's row (dlog, per channel), or for a scalar gate dlog_sum, dg's element or (retention) a term of
 * dg_gamma. */
static void store_token(const backward_op *r, int64_t t, int64_t hv, int first_head, const float *dqi,
                        const float *dki, const float *dvi, float dbeta, const float *dlog, double dlog_sum,
                        double *dg_gamma)
{
    const int64_t K = r->K, V = r->V, h = hv / r->G;
    float *dq = r->dq ? (float *)r->dq->data + (t * r->H + h) * K : NULL;
    float *dk = r->dk ? (float *)r->dk->data + (t * r->H + h) * K : NULL;
    for (int64_t c = 0; c < K; c++) {
        if (dq)
            dq[c] = first_head ? dqi[c] : dq[c] + dqi[c];
        if (dk)
            dk[c] = first_head ? dki[c] : dk[c] + dki[c];
    }
    if (r->dv)
        memcpy((float *)r->dv->data + (t * r->HV + hv) * V, dvi, (size_t)V * sizeof(float));
    if (r->dbeta)
        ((float *)r->dbeta->data)[t * r->HV + hv] = dbeta;
    if (r->gate == GATE_CHANNEL) {
        if (r->dg && dlog)
            memcpy((float *)r->dg->data + (t * r->HV + hv) * K, dlog, (size_t)K * sizeof(float));
    } else if (r->gate == GATE_SCALAR) {
        if (r->dg)
            ((float *)r->dg->data)[t * r->HV + hv] = (float)dlog_sum;
    } else if (r->gate == GATE_CONSTANT) {
        *dg_gamma += dlog_sum;
    }
}

/* ---- chunks and segments ---- */

#define BACKWARD_CHUNK LACS_CPU_BACKWARD_CHUNK

/* The chunks of a segment, for a sequence of `length` tokens: as many as `budget` bytes of states hold
 * (lacs_cpu_backward_state_bytes), so that a sequence that fits is walked with no checkpoint pass (its chunks'
 * states computed once, segment 0 its only one), and at least ceil(sqrt(#chunks)), so that nothing grows with
 * the length faster than its square root. */
static int64_t segment_chunks(int64_t length, int64_t K, int64_t V, size_t budget)
{
    const int64_t n = chunks_of(length, BACKWARD_CHUNK);
    int64_t at_least = (int64_t)sqrt((double)n);
    while (at_least * at_least < n)
        at_least++;
    const int64_t fit = (int64_t)(budget / ((size_t)(K * V > 0 ? K * V : 1) * sizeof(float)));
    const int64_t m = fit < n ? fit : n;
    return m > at_least ? m : at_least > 0 ? at_least : 1;
}

/* The segments of a sequence of `length` tokens (their starting states are the checkpoints). */
static int64_t segments_of(int64_t length, int64_t K, int64_t V, size_t budget)
{
    const int64_t M = segment_chunks(length, K, V, budget);
    return (chunks_of(length, BACKWARD_CHUNK) + M - 1) / M;
}

/* The buffers of lacs_cpu_chunk_workspace and their sizes (C = BACKWARD_CHUNK), each on a 64-byte boundary of
 * `memory` (when not NULL): the floats they take in all. */
static size_t chunk_workspace_walk(lacs_cpu_chunk_workspace *w, int64_t K_, int64_t V_, int channel, float *memory)
{
    const size_t C = BACKWARD_CHUNK, K = (size_t)K_, V = (size_t)V_, pairs = channel ? C * (C + 1) / 2 * K : 0;
    const struct {
        float **buffer;
        size_t floats;
    } cuts[] = {{&w->qk, 2 * C * K},   {&w->v, C * V},          {&w->dOdR, 2 * C * V},  {&w->G, C * K},
                {&w->E, C * K},        {&w->c, C},              {&w->dq, C * K},        {&w->dk, C * K},
                {&w->dc, C},           {&w->dg, C * K},         {&w->kT, K * C},        {&w->R, C * V},
                {&w->cR, C * V},       {&w->U, C * V},          {&w->dU, C * V},        {&w->Y, C * V},
                {&w->UT, V * C},       {&w->dOdRT, V * 2 * C},  {&w->nKp, C * K},       {&w->Kn, C * K},
                {&w->KnT, K * C},      {&w->QpKp, C * K},       {&w->QpKpT, K * 2 * C}, {&w->XT, K * 2 * C},
                {&w->X, 2 * C * K},    {&w->ZT, K * C},         {&w->Z, C * K},         {&w->QKK, 2 * C * C},
                {&w->D, C * C},        {&w->L, C * C},          {&w->Tinv, C * C},      {&w->TinvT, C * C},
                {&w->P, C * C},        {&w->PT, C * C},         {&w->Pd, C * C},        {&w->dP, C * C},
                {&w->YU, C * C},       {&w->A2, C * 2 * C},     {&w->eq, C},            {&w->ek, C},
                {&w->column, C},       {&w->eE, C * K},         {&w->eGs, C * K},       {&w->eGl, C * K},
                {&w->gl, K},           {&w->rows, C * K},       {&w->cols, C * K},      {&w->exps_P, pairs},
                {&w->exps_L, pairs}};
    size_t at = 0;
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        if (memory)
            *cuts[i].buffer = cuts[i].floats > 0 ? memory + at : NULL;
        at += (cuts[i].floats + 15) / 16 * 16;
    }
    return at;
}

size_t lacs_cpu_chunk_workspace_floats(int64_t K, int64_t V, int channel)
{
    lacs_cpu_chunk_workspace w;
    return chunk_workspace_walk(&w, K, V, channel, NULL);
}

void lacs_cpu_chunk_workspace_cut(lacs_cpu_chunk_workspace *w, int64_t K, int64_t V, int channel, float *memory)
{
    memset(w, 0, sizeof *w);
    chunk_workspace_walk(w, K, V, channel, memory);
}

/* One thread's workspace (the longest sequence's M and segments: both grow with the length). */
typedef struct {
    float *segments, *chunks; /* segments x K V: the states at the segments' starts; M x K V: one segment's chunks' */
    float *dS;                /* K V: the cotangent carried from chunk to chunk (dht in, dh0 out) */
    float *dcb, *dcn;         /* C each: dc/dbeta and dc/d|k|^2 (EFLA; 1 and 0 otherwise) */
    lacs_cpu_chunk_workspace chunk;
    float *all;               /* the one allocation the above are cut from (lacs_cpu_scratch_alloc: 64-byte aligned) */
} backward_workspace;

static void workspace_free(backward_workspace *w)
{
    lacs_cpu_scratch_free(w->all);
    memset(w, 0, sizeof *w);
}

static int workspace_alloc(backward_workspace *w, const backward_op *r)
{
    const size_t C = BACKWARD_CHUNK, KV = (size_t)(r->K * r->V);
    const size_t M = (size_t)segment_chunks(r->max_length, r->K, r->V, r->state_bytes);
    const size_t segments = (size_t)segments_of(r->max_length, r->K, r->V, r->state_bytes);
    const size_t states = (segments + M + 1) * KV, own = states + 2 * ((C + 15) / 16 * 16);
    memset(w, 0, sizeof *w);
    const int channel = r->gate == GATE_CHANNEL;
    /* kept between calls (section 1 of README.md: a fresh 8 MiB is 2048 page faults) */
    w->all = lacs_cpu_scratch_alloc((own + lacs_cpu_chunk_workspace_floats(r->K, r->V, channel)) * sizeof(float));
    if (!w->all)
        return LACS_ERR_MEMORY;
    w->segments = w->all;
    w->chunks = w->segments + segments * KV;
    w->dS = w->chunks + M * KV;
    w->dcb = w->all + states;
    w->dcn = w->dcb + (C + 15) / 16 * 16;
    lacs_cpu_chunk_workspace_cut(&w->chunk, r->K, r->V, channel, w->all + own);
    return LACS_OK;
}

/* A hint to fetch row `row` (of n elements) of a tensor into the caches: a head's rows are H K or HV V elements
 * apart, a stride the hardware prefetchers do not follow. */
static void prefetch_row(const lacs_tensor *t, int64_t row, int64_t n)
{
    const size_t size = t->dtype == LACS_BF16 ? 2 : 4;
    const char *first = (const char *)t->data + (size_t)(row * n) * size;
    for (size_t byte = 0; byte < (size_t)n * size; byte += LACS_CPU_CACHE_LINE)
        __builtin_prefetch(first + byte);
}

/* The rows of tokens t0 .. t0 + n - 1 of value head hv into the chunk's workspace: k (and q when `adjoint`),
 * v, do (`adjoint`); G the chunk's inclusive binary32 sums of the log decays (0 without a decay), E the decays
 * the correction reads (G; G_{t-1} for Comba, 0 for its first token); the steps c and EFLA's derivatives. The
 * rows of the chunk from token `next` on (-1: none), the next to be loaded, are prefetched meanwhile. */
static void load_chunk(const backward_op *r, backward_workspace *pw, int64_t t0, int64_t n, int64_t hv, int adjoint,
                         int64_t next)
{
    const int64_t K = r->K, V = r->V, h = hv / r->G;
    lacs_cpu_chunk_workspace *w = &pw->chunk;
    float *q = w->qk, *k = w->qk + n * K;
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = t0 + i;
        if (next >= 0 && next + i < r->T) { /* the next chunk's token i, fetched while this chunk is computed */
            prefetch_row(r->k, (next + i) * r->H + h, K);
            prefetch_row(r->v, (next + i) * r->HV + hv, V);
            if (adjoint) {
                prefetch_row(r->q, (next + i) * r->H + h, K);
                prefetch_row(r->dout, (next + i) * r->HV + hv, V);
            }
        }
        lacs_cpu_tensor_row(r->k, (t * r->H + h) * K, K, k + i * K);
        lacs_cpu_tensor_row(r->v, (t * r->HV + hv) * V, V, w->v + i * V);
        if (adjoint) {
            lacs_cpu_tensor_row(r->q, (t * r->H + h) * K, K, q + i * K);
            lacs_cpu_tensor_row(r->dout, (t * r->HV + hv) * V, V, w->dOdR + i * V);
        }
        if (r->gate == GATE_CHANNEL) { /* a row of K log decays: G and E row by row */
            float *G = w->G + i * K, *E = w->E + i * K;
            lacs_cpu_tensor_row(r->g, (t * r->HV + hv) * K, K, G);
            for (int64_t c = 0; c < K; c++) {
                const float before = i > 0 ? G[c - K] : 0.0f;
                G[c] += before;
                E[c] = r->update == BACKWARD_COMBA ? before : G[c];
            }
        } else {
            float g = 0.0f;
            if (r->gate == GATE_CONSTANT || r->gate == GATE_SCALAR)
                g = lacs_cpu_tensor_at(r->g, r->gate == GATE_CONSTANT ? hv : t * r->HV + hv);
            const float before = i > 0 ? w->G[i - 1] : 0.0f;
            w->G[i] = before + g;
            w->E[i] = r->update == BACKWARD_COMBA ? before : w->G[i];
        }
        step_coefficient(r, t, hv, k + i * K, &w->c[i], &pw->dcb[i], &pw->dcn[i]);
    }
}

/* The floating-point operations of the chunked backward (the delta family's: with the correction) for one
 * head over T tokens, counted as the dense products it performs, as lacs_cpu_chunk_flops counts the forward's
 * (a product of which only a lower triangle is wanted counted whole; one with a triangular left operand,
 * half): per chunk of n tokens,
 *   the adjoint    [Q; K] K^T 4 n^2 K, R 2 n K V, U n^2 V, Tinv n^3 / 3, do U^T 2 n^2 V, dU 2 n K V + 2 n^2 V,
 *                  dS' U^T 2 n K V, Y 2 n^2 V, Y U^T 2 n^2 V, S [do; dR]^T 4 n K V, dq n^2 K, dk 4 n^2 K,
 *                  dS 4 n K V:  14 n K V + 9 n^2 K + 9 n^2 V + n^3 / 3;
 *   an advance     K K^T 2 n^2 K, R 2 n K V, U n^2 V, Tinv n^3 / 3, S' 2 n K V (the checkpoint passes: the
 *                  chunks before the last segment, then each segment's chunks but its last);
 * the element-wise work (gates, steps, transposes, the dG terms), O(n^2 + n (K + V)), not counted. */
double lacs_cpu_backward_chunk_flops(int64_t T, int64_t K, int64_t V)
{
    size_t budget;
    if (lacs_cpu_backward_state_bytes(&budget) != LACS_OK)
        return NAN;
    const int64_t C = BACKWARD_CHUNK, n_chunks = chunks_of(T, C), M = segment_chunks(T, K, V, budget);
    const int64_t n_segments = segments_of(T, K, V, budget);
    const double advance = 4.0 * C * K * V + 2.0 * C * C * K + (double)C * C * V + (double)C * C * C / 3;
    double flops = (double)((n_segments - 1) * M + (n_chunks - n_segments)) * advance;
    for (int64_t t0 = 0; t0 < T; t0 += C) {
        const double n = (double)(T - t0 < C ? T - t0 : C);
        flops += 14 * n * K * V + 9 * n * n * K + 9 * n * n * V + n * n * n / 3;
    }
    return flops;
}

/* One (sequence, q/k head), each of its value heads in turn: checkpoints at the segments' starts, then
 * segment by segment from the last the states at its chunks' starts, then each chunk's adjoint from the last
 * (recurrent_backward_kernels.h), dS carried from chunk to chunk. */
static void run_sequence_head(const backward_op *r, backward_workspace *w, int64_t seq, int64_t h)
{
    const int64_t K = r->K, V = r->V, KV = K * V, C = BACKWARD_CHUNK;
    const int correct = r->update != BACKWARD_LINEAR;
    const lacs_cpu_chunk_settings settings = {.update = r->update, .decays = r->gate != GATE_NONE,
                                              .channel = r->gate == GATE_CHANNEL, .K = K, .V = V, .scale = r->scale,
                                              .gemm = r->call->gemm};
    int64_t start;
    const int64_t length = lacs_cpu_sequences(r->call, r->T, seq, &start);
    const int64_t n_chunks = chunks_of(length, C), M = segment_chunks(length, K, V, r->state_bytes);
    const int64_t n_segments = segments_of(length, K, V, r->state_bytes);
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
            for (int64_t ch = (s - 1) * M; ch < s * M; ch++) {
                load_chunk(r, w, start + ch * C, C, hv, 0, start + (ch + 1) * C);
                r->kernels->chunk_advance(&settings, &w->chunk, C, S);
            }
        }
        if (r->dht)
            lacs_cpu_tensor_row(r->dht, state, KV, w->dS);
        else
            memset(w->dS, 0, (size_t)KV * sizeof(float));
        for (int64_t s = n_segments - 1; s >= 0; s--) {
            const int64_t first = s * M, last = (s + 1) * M < n_chunks ? (s + 1) * M : n_chunks;
            /* 2. the states at the segment's chunks' starts */
            memcpy(w->chunks, w->segments + s * KV, (size_t)KV * sizeof(float));
            for (int64_t ch = first + 1; ch < last; ch++) {
                float *S = w->chunks + (ch - first) * KV;
                memcpy(S, S - KV, (size_t)KV * sizeof(float));
                load_chunk(r, w, start + (ch - 1) * C, C, hv, 0, start + ch * C);
                r->kernels->chunk_advance(&settings, &w->chunk, C, S);
            }
            /* 3. each chunk's adjoint, from the last, and its gradients */
            for (int64_t ch = last - 1; ch >= first; ch--) {
                const int64_t t0 = start + ch * C, n = start + length - t0 < C ? start + length - t0 : C;
                const lacs_cpu_chunk_workspace *cw = &w->chunk;
                load_chunk(r, w, t0, n, hv, 1, ch > first ? t0 - C : -1);
                r->kernels->chunk_adjoint(&settings, &w->chunk, n, w->chunks + (ch - first) * KV, w->dS);
                for (int64_t t = 0; t < n; t++) {
                    const float dcoef = correct ? cw->dc[t] : 0.0f, *k = cw->qk + (n + t) * K;
                    float *dk = cw->dk + t * K;
                    if (r->efla) /* c depends on |k|^2: dk += 2 k dc dc/d|k|^2 */
                        for (int64_t i = 0; i < K; i++)
                            dk[i] += 2.0f * k[i] * (dcoef * w->dcn[t]);
                    if (r->gate == GATE_CHANNEL)
                        store_token(r, t0 + t, hv, gi == 0, cw->dq + t * K, dk, cw->dv + t * V, dcoef * w->dcb[t],
                                    cw->dg + t * K, 0.0, &dg_gamma);
                    else
                        store_token(r, t0 + t, hv, gi == 0, cw->dq + t * K, dk, cw->dv + t * V, dcoef * w->dcb[t],
                                    NULL, cw->dg[t], &dg_gamma);
                }
            }
        }
        if (r->dh0)
            memcpy((float *)r->dh0->data + state, w->dS, (size_t)KV * sizeof(float));
        if (r->dg_gamma_parts)
            r->dg_gamma_parts[seq * r->HV + hv] = dg_gamma;
    }
}

/* ---- the tasks ---- */

typedef struct {
    const backward_op *r;
    backward_workspace *workspaces;
} backward_job;

static void run_task(void *context, int64_t item, int thread)
{
    const backward_job *job = context;
    run_sequence_head(job->r, &job->workspaces[thread], item / job->r->H, item % job->r->H);
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
    int rc = lacs_cpu_backward_state_bytes(&r.state_bytes);
    if (rc != LACS_OK)
        return rc;

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
    if (items > 0 && r.HV > 0) {
        const int threads = c->threads < items ? c->threads : (int)items;
        backward_job job = {.r = &r};
        job.workspaces = calloc((size_t)(threads > 0 ? threads : 1), sizeof *job.workspaces);
        if (!job.workspaces)
            rc = lacs_cpu_error(LACS_ERR_MEMORY, op, "out of memory for %d workspaces", threads);
        for (int t = 0; t < threads && rc == LACS_OK; t++)
            if (workspace_alloc(&job.workspaces[t], &r) != LACS_OK)
                rc = lacs_cpu_error(LACS_ERR_MEMORY, op,
                                    "out of memory for the backward's workspaces (K = %lld, V = %lld, longest "
                                    "sequence %lld tokens)",
                                    (long long)r.K, (long long)r.V, (long long)r.max_length);
        if (rc == LACS_OK)
            lacs_cpu_parallel_for(threads, items, run_task, &job);
        for (int t = 0; job.workspaces && t < threads; t++)
            workspace_free(&job.workspaces[t]);
        free(job.workspaces);
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

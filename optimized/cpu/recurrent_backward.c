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
    size_t state_bytes;                           /* the chunked backward's budget of chunk states per thread */
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

static int64_t chunks_of(int64_t length, int64_t C) { return (length + C - 1) / C; }

/* M = ceil(sqrt(#chunks)) (chunks of C tokens): the chunks of a segment, and a bound on the number of
 * segments. */
static int64_t segment_chunks(int64_t length, int64_t C)
{
    const int64_t n = chunks_of(length, C);
    int64_t m = (int64_t)sqrt((double)n);
    while (m * m < n)
        m++;
    return m > 0 ? m : 1;
}

static float *floats(size_t n) { return malloc((n > 0 ? n : 1) * sizeof(float)); }

static int workspace_alloc(backward_workspace *w, const backward_op *r)
{
    const size_t C = BACKWARD_CHUNK, K = (size_t)r->K, V = (size_t)r->V, KV = K * V;
    const size_t M = (size_t)segment_chunks(r->max_length, BACKWARD_CHUNK);
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
        step_coefficient(r, t, hv, k, &w->coef[i], &w->dc_dbeta[i], &w->dc_dknorm2[i]);
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

/* The adjoint of one chunk, tokens t0 .. t0 + n - 1, entering with w->tokens[0]
 * = its first state and w->dh = the cotangent of its last; `first_head`: the
 * first value head of the q/k head (dq and dk are written, else added to). */
static void chunk_adjoint(const backward_op *r, backward_workspace *w, int64_t t0, int64_t n, int64_t hv,
                          int first_head, double *dg_gamma)
{
    const int64_t K = r->K, V = r->V, KV = K * V;
    load_chunk(r, w, t0, n, hv, 1);
    r->kernels->forward(r->update, K, V, w->tokens, KV, n, w->x, w->e);
    r->kernels->backward(r->update, K, V, r->scale, w->tokens, KV, n, w->e, w->x, w->dh, w->dq, w->dk, w->dv,
                         w->dlog, w->dcoef, w->du, w->u, w->dp);
    for (int64_t i = 0; i < n; i++) {
        const float dcoef = w->dcoef[i], *dlog = w->dlog + i * K;
        float *dki = w->dk + i * K;
        if (r->efla) /* c depends on |k|^2: dk += 2 k dc dc/d|k|^2 */
            for (int64_t c = 0; c < K; c++)
                dki[c] += 2.0f * w->x[i].k[c] * (dcoef * w->dc_dknorm2[i]);
        double dlog_sum = 0.0;
        if (r->gate != GATE_CHANNEL && r->gate != GATE_NONE)
            for (int64_t c = 0; c < K; c++)
                dlog_sum += dlog[c];
        store_token(r, t0 + i, hv, first_head, w->dq + i * K, dki, w->dv + i * V, dcoef * w->dc_dbeta[i],
                    r->gate == GATE_CHANNEL ? dlog : NULL, dlog_sum, dg_gamma);
    }
}

/* ---- the chunked backward: scalar decays or none (the kernels: recurrent_backward_kernels.h) ---- */

#define PRODUCT_CHUNK LACS_CPU_BACKWARD_PRODUCT_CHUNK

/* The chunks of a segment of the chunked backward, for a sequence of `length` tokens: as many as `budget`
 * bytes of states hold (lacs_cpu_backward_state_bytes), so that a sequence that fits is walked with no
 * checkpoint pass (its chunks' states computed once, segment 0 its only one), and at least
 * ceil(sqrt(#chunks)), so that nothing grows with the length faster than its square root. */
static int64_t product_segment_chunks(int64_t length, int64_t K, int64_t V, size_t budget)
{
    const int64_t n = chunks_of(length, PRODUCT_CHUNK), at_least = segment_chunks(length, PRODUCT_CHUNK);
    const int64_t fit = (int64_t)(budget / ((size_t)(K * V > 0 ? K * V : 1) * sizeof(float)));
    const int64_t m = fit < n ? fit : n;
    return m > at_least ? m : at_least;
}

/* The segments of a sequence of `length` tokens (their starting states are the checkpoints). */
static int64_t product_segments(int64_t length, int64_t K, int64_t V, size_t budget)
{
    const int64_t M = product_segment_chunks(length, K, V, budget);
    return (chunks_of(length, PRODUCT_CHUNK) + M - 1) / M;
}

/* The buffers of lacs_cpu_chunk_workspace and their sizes (C = PRODUCT_CHUNK), each on a 64-byte boundary of
 * `memory` (when not NULL): the floats they take in all. */
static size_t chunk_workspace_walk(lacs_cpu_chunk_workspace *w, int64_t K_, int64_t V_, float *memory)
{
    const size_t C = PRODUCT_CHUNK, K = (size_t)K_, V = (size_t)V_;
    const struct {
        float **buffer;
        size_t floats;
    } cuts[] = {{&w->qk, 2 * C * K},   {&w->v, C * V},          {&w->dOdR, 2 * C * V},  {&w->G, C},
                {&w->E, C},            {&w->c, C},              {&w->dq, C * K},        {&w->dk, C * K},
                {&w->dc, C},           {&w->dg, C},             {&w->kT, K * C},        {&w->R, C * V},
                {&w->cR, C * V},       {&w->U, C * V},          {&w->dU, C * V},        {&w->Y, C * V},
                {&w->UT, V * C},       {&w->dOdRT, V * 2 * C},  {&w->nKp, C * K},       {&w->Kn, C * K},
                {&w->KnT, K * C},      {&w->QpKp, C * K},       {&w->QpKpT, K * 2 * C}, {&w->XT, K * 2 * C},
                {&w->X, 2 * C * K},    {&w->ZT, K * C},         {&w->Z, C * K},         {&w->QKK, 2 * C * C},
                {&w->D, C * C},        {&w->L, C * C},          {&w->Tinv, C * C},      {&w->TinvT, C * C},
                {&w->P, C * C},        {&w->PT, C * C},         {&w->Pd, C * C},        {&w->dP, C * C},
                {&w->YU, C * C},       {&w->A2, C * 2 * C},     {&w->eq, C},            {&w->ek, C},
                {&w->column, C}};
    size_t at = 0;
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        if (memory)
            *cuts[i].buffer = memory + at;
        at += (cuts[i].floats + 15) / 16 * 16;
    }
    return at;
}

size_t lacs_cpu_chunk_workspace_floats(int64_t K, int64_t V)
{
    lacs_cpu_chunk_workspace w;
    return chunk_workspace_walk(&w, K, V, NULL);
}

void lacs_cpu_chunk_workspace_cut(lacs_cpu_chunk_workspace *w, int64_t K, int64_t V, float *memory)
{
    memset(w, 0, sizeof *w);
    chunk_workspace_walk(w, K, V, memory);
}

/* One thread's workspace for the chunked backward (the longest sequence's M and segments: both grow with the
 * length). */
typedef struct {
    float *segments, *chunks; /* segments x K V: the states at the segments' starts; M x K V: one segment's chunks' */
    float *dS;                /* K V: the cotangent carried from chunk to chunk (dht in, dh0 out) */
    float *dcb, *dcn;         /* C each: dc/dbeta and dc/d|k|^2 (EFLA; 1 and 0 otherwise) */
    lacs_cpu_chunk_workspace chunk;
    float *all;               /* the one allocation the above are cut from */
} product_workspace;

static void product_workspace_free(product_workspace *w)
{
    free(w->all);
    memset(w, 0, sizeof *w);
}

static int product_workspace_alloc(product_workspace *w, const backward_op *r)
{
    const size_t C = PRODUCT_CHUNK, KV = (size_t)(r->K * r->V);
    const size_t M = (size_t)product_segment_chunks(r->max_length, r->K, r->V, r->state_bytes);
    const size_t segments = (size_t)product_segments(r->max_length, r->K, r->V, r->state_bytes);
    const size_t states = (segments + M + 1) * KV, own = states + 2 * ((C + 15) / 16 * 16);
    memset(w, 0, sizeof *w);
    if (posix_memalign((void **)&w->all, 64, (own + lacs_cpu_chunk_workspace_floats(r->K, r->V)) * sizeof(float))) {
        w->all = NULL;
        return LACS_ERR_MEMORY;
    }
    w->segments = w->all;
    w->chunks = w->segments + segments * KV;
    w->dS = w->chunks + M * KV;
    w->dcb = w->all + states;
    w->dcn = w->dcb + (C + 15) / 16 * 16;
    lacs_cpu_chunk_workspace_cut(&w->chunk, r->K, r->V, w->all + own);
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
static void product_load(const backward_op *r, product_workspace *pw, int64_t t0, int64_t n, int64_t hv, int adjoint,
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
        float g = 0.0f;
        if (r->gate == GATE_CONSTANT || r->gate == GATE_SCALAR)
            g = lacs_cpu_tensor_at(r->g, r->gate == GATE_CONSTANT ? hv : t * r->HV + hv);
        const float before = i > 0 ? w->G[i - 1] : 0.0f;
        w->G[i] = before + g;
        w->E[i] = r->update == BACKWARD_COMBA ? before : w->G[i];
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
    const int64_t C = PRODUCT_CHUNK, n_chunks = chunks_of(T, C), M = product_segment_chunks(T, K, V, budget);
    const int64_t n_segments = product_segments(T, K, V, budget);
    const double advance = 4.0 * C * K * V + 2.0 * C * C * K + (double)C * C * V + (double)C * C * C / 3;
    double flops = (double)((n_segments - 1) * M + (n_chunks - n_segments)) * advance;
    for (int64_t t0 = 0; t0 < T; t0 += C) {
        const double n = (double)(T - t0 < C ? T - t0 : C);
        flops += 14 * n * K * V + 9 * n * n * K + 9 * n * n * V + n * n * n / 3;
    }
    return flops;
}

/* One (sequence, q/k head) by chunks, as the token adjoint's run_sequence_head by tokens: checkpoints at the
 * segments' starts, then segment by segment from the last the states at its chunks' starts, then each chunk's
 * adjoint from the last (recurrent_backward_kernels.h), dS carried from chunk to chunk. */
static void run_sequence_head_chunked(const backward_op *r, product_workspace *w, int64_t seq, int64_t h)
{
    const int64_t K = r->K, V = r->V, KV = K * V, C = PRODUCT_CHUNK;
    const int correct = r->update != BACKWARD_LINEAR;
    const lacs_cpu_chunk_settings settings = {.update = r->update, .decays = r->gate != GATE_NONE, .K = K, .V = V,
                                              .scale = r->scale, .gemm = r->call->gemm};
    int64_t start;
    const int64_t length = lacs_cpu_sequences(r->call, r->T, seq, &start);
    const int64_t n_chunks = chunks_of(length, C), M = product_segment_chunks(length, K, V, r->state_bytes);
    const int64_t n_segments = product_segments(length, K, V, r->state_bytes);
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
                product_load(r, w, start + ch * C, C, hv, 0, start + (ch + 1) * C);
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
                product_load(r, w, start + (ch - 1) * C, C, hv, 0, start + ch * C);
                r->kernels->chunk_advance(&settings, &w->chunk, C, S);
            }
            /* 3. each chunk's adjoint, from the last, and its gradients */
            for (int64_t ch = last - 1; ch >= first; ch--) {
                const int64_t t0 = start + ch * C, n = start + length - t0 < C ? start + length - t0 : C;
                const lacs_cpu_chunk_workspace *cw = &w->chunk;
                product_load(r, w, t0, n, hv, 1, ch > first ? t0 - C : -1);
                r->kernels->chunk_adjoint(&settings, &w->chunk, n, w->chunks + (ch - first) * KV, w->dS);
                for (int64_t t = 0; t < n; t++) {
                    const float dcoef = correct ? cw->dc[t] : 0.0f, *k = cw->qk + (n + t) * K;
                    float *dk = cw->dk + t * K;
                    if (r->efla) /* c depends on |k|^2: dk += 2 k dc dc/d|k|^2 */
                        for (int64_t i = 0; i < K; i++)
                            dk[i] += 2.0f * k[i] * (dcoef * w->dcn[t]);
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

/* ---- one (sequence, q/k head) ---- */

typedef struct {
    const backward_op *r;
    backward_workspace *workspaces;       /* the token adjoint's (per-channel decay) */
    product_workspace *product_workspaces; /* the chunked backward's (no decay or a scalar one) */
} backward_job;

static void run_sequence_head(void *context, int64_t item, int thread)
{
    const backward_job *job = context;
    const backward_op *r = job->r;
    if (job->product_workspaces) {
        run_sequence_head_chunked(r, &job->product_workspaces[thread], item / r->H, item % r->H);
        return;
    }
    backward_workspace *w = &job->workspaces[thread];
    const int64_t seq = item / r->H, h = item % r->H, KV = r->K * r->V, C = BACKWARD_CHUNK;
    int64_t start;
    const int64_t length = lacs_cpu_sequences(r->call, r->T, seq, &start);
    const int64_t n_chunks = chunks_of(length, C), M = segment_chunks(length, C);
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
        /* the chunked backward where the decay is a scalar (or none); the token adjoint per channel */
        const int chunked = r.gate != GATE_CHANNEL;
        backward_job job = {.r = &r};
        if (chunked)
            job.product_workspaces = calloc((size_t)(threads > 0 ? threads : 1), sizeof *job.product_workspaces);
        else
            job.workspaces = calloc((size_t)(threads > 0 ? threads : 1), sizeof *job.workspaces);
        if (!job.workspaces && !job.product_workspaces)
            rc = lacs_cpu_error(LACS_ERR_MEMORY, op, "out of memory for %d workspaces", threads);
        for (int t = 0; t < threads && rc == LACS_OK; t++)
            if ((chunked ? product_workspace_alloc(&job.product_workspaces[t], &r)
                         : workspace_alloc(&job.workspaces[t], &r)) != LACS_OK)
                rc = lacs_cpu_error(LACS_ERR_MEMORY, op,
                                    "out of memory for the backward's workspaces (K = %lld, V = %lld, longest "
                                    "sequence %lld tokens)",
                                    (long long)r.K, (long long)r.V, (long long)r.max_length);
        if (rc == LACS_OK)
            lacs_cpu_parallel_for(threads, items, run_sequence_head, &job);
        for (int t = 0; t < threads; t++) {
            if (job.workspaces)
                workspace_free(&job.workspaces[t]);
            if (job.product_workspaces)
                product_workspace_free(&job.product_workspaces[t]);
        }
        free(job.workspaces);
        free(job.product_workspaces);
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

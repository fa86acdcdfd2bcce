/* builtin:cpu, the recurrent family (README.md section 2): linear_attn (H2),
 * linear_attn_postnorm (H3), retention, simple_gla, gla (H4), delta_rule
 * (H6), gated_delta_rule with g or gk (H8 first form), comba (H8 second form)
 * and efla (E5), by the chunkwise WY/UT algorithm (H7 per chunk, H9 within
 * it), with a recurrent step for sequences of one token (decoding).
 *
 * This file is the op: its parameters and inputs, the sequences, the
 * threads (one task per sequence and group of up to LACS_CPU_HEAD_GROUP
 * value heads) and their workspaces of
 * O(C (K + V) + C^2 + 8 K V) floats each, nothing that grows with T. The
 * arithmetic is the kernels' (recurrent_kernels.h, one algorithm built per
 * instruction set), which README.md section 2 writes out.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent.h"

/* ---- workspaces ---- */

void lacs_cpu_recurrent_workspace_free(lacs_cpu_recurrent_workspace *w)
{
    lacs_cpu_scratch_free(w->states); /* the large one, kept between calls (cpu.h) */
    float *floats[] = {w->Vp_packed, w->kq, w->v, w->G, w->Gr, w->b, w->D, w->A, w->P, w->Tinv,
                       w->KQd, w->R, w->U, w->Vp, w->Kl, w->KlT, w->KQK, w->KT_packed};
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        free(floats[i]);
    free(w->a16);
    free(w->k16);
    free(w->b16);
    free(w->kq16);
    free(w->kqd16);
    free(w->p16);
    memset(w, 0, sizeof *w);
}

int lacs_cpu_recurrent_workspace_alloc(lacs_cpu_recurrent_workspace *w, int64_t K, int64_t V,
                                       const lacs_cpu_gemm *gemm)
{
    const size_t C = LACS_CPU_CHUNK, k = (size_t)K, v = (size_t)V;
    const size_t k_even = (k + 1) / 2 * 2, c_even = (C + 1) / 2 * 2;
    memset(w, 0, sizeof *w);
    w->state_floats = (int64_t)gemm->packed_b_size(K, V);
    w->state16_elems = (int64_t)(k_even * v);
    w->states = lacs_cpu_scratch_alloc(LACS_CPU_HEAD_GROUP * ((size_t)w->state_floats * sizeof(float) +
                                                              (size_t)w->state16_elems * sizeof(uint16_t)));
    w->S = w->states;
    w->states16 = w->states ? (uint16_t *)(w->states + LACS_CPU_HEAD_GROUP * w->state_floats) : NULL;
    w->s16 = w->states16;
    w->Vp_packed = malloc(gemm->packed_b_size(LACS_CPU_CHUNK, V) * sizeof(float));
    w->kq = malloc(2 * C * k * sizeof(float));
    w->v = malloc(C * v * sizeof(float));
    w->G = malloc(C * k * sizeof(float));
    w->Gr = malloc(C * k * sizeof(float));
    w->b = malloc(C * sizeof(float));
    w->D = malloc((C * C > k ? C * C : k) * sizeof(float));
    w->A = malloc(C * C * sizeof(float));
    w->P = malloc(C * C * sizeof(float));
    w->Tinv = malloc(C * C * sizeof(float));
    w->KQd = malloc(2 * C * k * sizeof(float));
    w->R = malloc(2 * C * v * sizeof(float));
    w->U = malloc(gemm->packed_b_size(LACS_CPU_CHUNK, V) * sizeof(float)); /* packed, or C x V row-major */
    w->Vp = malloc(C * v * sizeof(float));
    w->Kl = malloc(C * k * sizeof(float));
    w->KlT = malloc(C * k * sizeof(float));
    w->KQK = malloc(2 * C * C * sizeof(float));
    w->KT_packed = malloc(gemm->packed_b_size(K, LACS_CPU_CHUNK) * sizeof(float));
    /* bf16 operands: a left operand (at most 2C x K, K x C or C x C), K^T [K x C], S [K x V] and a [C x V]
     * right operand, each packed with its k rounded up to even */
    w->a16 = malloc((2 * C * k > C * C ? 2 * C * k : C * C) * sizeof(uint16_t));
    w->k16 = malloc(k_even * C * sizeof(uint16_t));
    w->b16 = malloc(c_even * v * sizeof(uint16_t));
    w->kq16 = malloc(2 * C * k * sizeof(uint16_t));
    w->kqd16 = malloc(2 * C * k * sizeof(uint16_t));
    w->p16 = malloc(C * C * sizeof(uint16_t));
    if (!w->states || !w->Vp_packed || !w->kq || !w->v || !w->G || !w->Gr || !w->b || !w->D || !w->A || !w->P ||
        !w->Tinv || !w->KQd || !w->R || !w->U || !w->Vp || !w->Kl || !w->KlT || !w->KQK || !w->KT_packed ||
        !w->a16 || !w->k16 || !w->s16 || !w->b16 || !w->kq16 || !w->kqd16 || !w->p16) {
        lacs_cpu_recurrent_workspace_free(w);
        return LACS_ERR_MEMORY;
    }
    return LACS_OK;
}

/* ---- one (sequence, value head) ---- */

static int run_token(const lacs_cpu_recurrent_op *r, const lacs_cpu_recurrent_kernels *kernels, int64_t t,
                     int64_t hv, int64_t seq);

typedef struct {
    const lacs_cpu_recurrent_op *r;
    const lacs_cpu_recurrent_kernels *kernels;
    lacs_cpu_recurrent_workspace *workspaces; /* NULL for a decode step (every sequence one token) */
    int64_t group, groups; /* heads per task (the last of a sequence may have fewer), tasks per sequence */
    atomic_int out_of_memory; /* a step's scratch could not be allocated */
} recurrent_job;

/* A decode step's (sequence, value head): the recurrent step alone, no chunk workspace. */
static void run_decode_head(void *context, int64_t item, int thread)
{
    (void)thread;
    recurrent_job *job = context;
    const lacs_cpu_recurrent_op *r = job->r;
    const int64_t seq = item / r->HV, hv = item % r->HV;
    int64_t start;
    lacs_cpu_sequences(r->call, r->T, seq, &start);
    if (run_token(r, job->kernels, start, hv, seq) != 0)
        atomic_store(&job->out_of_memory, 1);
}

/* Scratch on the stack for the recurrent step up to this many floats (16 KiB: K = V = 512), so that a decode
 * step allocates nothing; larger heads take it from the heap, a cost small beside their K V work. */
#define TOKEN_STACK_FLOATS 4096

/* The recurrent step of token t (a sequence of one token): it reads h0 and writes ht itself. Returns 0, or -1
 * when its scratch could not be allocated (then nothing is written). */
static int run_token(const lacs_cpu_recurrent_op *r, const lacs_cpu_recurrent_kernels *kernels, int64_t t,
                     int64_t hv, int64_t seq)
{
    const int64_t floats = LACS_CPU_TOKEN_SCRATCH(r->K, r->V);
    float stack[TOKEN_STACK_FLOATS];
    float *scratch = floats <= TOKEN_STACK_FLOATS ? stack : malloc((size_t)floats * sizeof(float));
    if (!scratch)
        return -1;
    kernels->token(r, scratch, t, hv, seq);
    if (scratch != stack)
        free(scratch);
    return 0;
}

/* A head's state S from h0's K x V elements at `offset` (zeros without h0), packed (the GEMM table's layout, panels
 * of nr columns, 0 past V), a row at a time through w->v. */
static void state_from_h0(const lacs_cpu_recurrent_op *r, lacs_cpu_recurrent_workspace *w, float *S, int64_t offset)
{
    const int64_t K = r->K, V = r->V, nr = r->call->gemm->nr;
    if (!r->h0) {
        memset(S, 0, (size_t)w->state_floats * sizeof *S);
        return;
    }
    memset(S, 0, (size_t)w->state_floats * sizeof *S);
    for (int64_t c = 0; c < K; c++) {
        lacs_cpu_tensor_row(r->h0, offset + c * V, V, w->v);
        for (int64_t j0 = 0; j0 < V; j0 += nr)
            memcpy(S + j0 * K + c * nr, w->v + j0, (size_t)(V - j0 < nr ? V - j0 : nr) * sizeof *S);
    }
}

/* A head's state S into ht's K x V elements at ht_head (row-major). */
static void state_to_ht(const lacs_cpu_recurrent_op *r, const float *S, float *ht_head)
{
    const int64_t K = r->K, V = r->V, nr = r->call->gemm->nr;
    for (int64_t c = 0; c < K; c++)
        for (int64_t j0 = 0; j0 < V; j0 += nr)
            memcpy(ht_head + c * V + j0, S + j0 * K + c * nr, (size_t)(V - j0 < nr ? V - j0 : nr) * sizeof *S);
}

/* One task: value heads hv0 .. hv0 + heads - 1 of one sequence, chunk by
 * chunk and, within a chunk, head by head. A token's rows of consecutive
 * heads are adjacent in q, k, v and o (the layout [B, T, H, K]), so the
 * task reads and writes runs of heads x K elements where one head alone
 * would take K elements every H K (a stride the hardware prefetchers do not
 * follow): the rows of the next head are the next cache lines. Each head's
 * state and arithmetic are those of the head alone (results do not depend
 * on the grouping or the threads). */
static void run_sequence_heads(void *context, int64_t item, int thread)
{
    recurrent_job *job = context;
    const lacs_cpu_recurrent_op *r = job->r;
    lacs_cpu_recurrent_workspace *w = &job->workspaces[thread];
    const int64_t seq = item / job->groups, hv0 = item % job->groups * job->group, KV = r->K * r->V;
    const int64_t heads = r->HV - hv0 < job->group ? r->HV - hv0 : job->group;
    int64_t start;
    const int64_t length = lacs_cpu_sequences(r->call, r->T, seq, &start);
    if (length == 1) { /* a one-token sequence in a call with longer ones: the recurrent step per head */
        for (int64_t j = 0; j < heads; j++)
            if (run_token(r, job->kernels, start, hv0 + j, seq) != 0)
                atomic_store(&job->out_of_memory, 1);
        return;
    }
    for (int64_t j = 0; j < heads; j++)
        state_from_h0(r, w, w->states + j * w->state_floats, (seq * r->HV + hv0 + j) * KV);
    for (int64_t t0 = start; t0 < start + length; t0 += LACS_CPU_CHUNK) {
        const int64_t n = start + length - t0 < LACS_CPU_CHUNK ? start + length - t0 : LACS_CPU_CHUNK;
        const int64_t after = start + length - t0 - n;
        for (int64_t j = 0; j < heads; j++) {
            /* next: this chunk of the next head, or the next chunk of the first */
            const lacs_cpu_chunk_ahead ahead = j + 1 < heads
                ? (lacs_cpu_chunk_ahead){t0, n, hv0 + j + 1}
                : (lacs_cpu_chunk_ahead){t0 + n, after < LACS_CPU_CHUNK ? after : LACS_CPU_CHUNK, hv0};
            w->S = w->states + j * w->state_floats;
            w->s16 = w->states16 + j * w->state16_elems;
            w->s16_current = t0 != start;
            job->kernels->chunk(r, w, t0, n, hv0 + j, &ahead);
        }
    }
    if (r->ht)
        for (int64_t j = 0; j < heads; j++)
            state_to_ht(r, w->states + j * w->state_floats, (float *)r->ht->data + (seq * r->HV + hv0 + j) * KV);
}

static const lacs_cpu_recurrent_kernels *kernels_for(lacs_cpu_isa isa)
{
    switch (isa) {
    case LACS_ISA_AVX512:
        return &lacs_cpu_recurrent_kernels_avx512;
    case LACS_ISA_AVX2:
        return &lacs_cpu_recurrent_kernels_avx2;
    case LACS_ISA_SCALAR:
        break;
    }
    return &lacs_cpu_recurrent_kernels_scalar;
}

int lacs_cpu_recurrent(const lacs_cpu_call *c)
{
    lacs_cpu_recurrent_op r = {.call = c};
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
    /* bf16 operands in the products where builtin:cpu multiplies bf16 (AVX512-BF16, native: dispatch.c's
     * choose_bf16_products); elsewhere the bf16 tier widens its inputs and runs the fp32 algorithm
     * (recurrent_kernels.h) */
    r.bf16_products = c->bf16 && c->bf16_native_products;
    /* on AMD's cores an o larger than LACS_CPU_STREAM_BYTES is formed chunk by chunk in the workspace and
     * streamed out (recurrent_kernels.h): its lines are not read before they are written */
    r.stream_outputs = c->amd && (double)lacs_tensor_count(r.o) * sizeof(float) >= LACS_CPU_STREAM_BYTES;

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
    int decode = 1; /* every sequence one token: a decode step */
    for (int64_t seq = 0; seq < r.n_seqs && decode; seq++) {
        int64_t start;
        decode = lacs_cpu_sequences(c, r.T, seq, &start) == 1;
    }
    if (decode) {
        const int64_t items = r.n_seqs * r.HV; /* (sequence, value head) */
        const int threads = c->threads < items ? c->threads : (int)items;
        /* README.md section 2: no chunk workspace (the step reads h0 and writes ht directly, its scratch on
         * the stack), and each thread the same contiguous part of the (sequence, head) items, hence of the
         * state, from step to step: a step allocated 17 arrays per thread and handed the items out one by
         * one, which kept the second thread from paying */
        recurrent_job job = {.r = &r, .kernels = kernels_for(c->isa), .workspaces = NULL};
        atomic_init(&job.out_of_memory, 0);
        lacs_cpu_parallel_split(threads, items, run_decode_head, &job);
        if (atomic_load(&job.out_of_memory))
            return lacs_cpu_error(LACS_ERR_MEMORY, op, "out of memory for the step's scratch (K = %lld, V = %lld)",
                                  (long long)r.K, (long long)r.V);
        return LACS_OK;
    }
    /* heads per task: as many as leave a task per thread, at most LACS_CPU_HEAD_GROUP (their states stay
     * in the core's L2: 8 x 64 KiB at K = V = 128) */
    int64_t group = r.n_seqs * r.HV / (c->threads > 0 ? c->threads : 1);
    group = group < 1 ? 1 : group > LACS_CPU_HEAD_GROUP ? LACS_CPU_HEAD_GROUP : group;
    const int64_t groups = (r.HV + group - 1) / group, items = r.n_seqs * groups;
    const int threads = c->threads < items ? c->threads : (int)items;
    lacs_cpu_recurrent_workspace *workspaces = calloc((size_t)(threads > 0 ? threads : 1), sizeof *workspaces);
    if (!workspaces)
        return lacs_cpu_error(LACS_ERR_MEMORY, op, "out of memory for %d workspaces", threads);
    int rc = LACS_OK;
    for (int t = 0; t < threads && rc == LACS_OK; t++)
        rc = lacs_cpu_recurrent_workspace_alloc(&workspaces[t], r.K, r.V, c->gemm);
    if (rc == LACS_OK) {
        recurrent_job job = {.r = &r, .kernels = kernels_for(c->isa), .workspaces = workspaces, .group = group,
                             .groups = groups};
        atomic_init(&job.out_of_memory, 0);
        lacs_cpu_parallel_for(threads, items, run_sequence_heads, &job);
        if (atomic_load(&job.out_of_memory))
            rc = lacs_cpu_error(LACS_ERR_MEMORY, op, "out of memory for the step's scratch (K = %lld, V = %lld)",
                                (long long)r.K, (long long)r.V);
    } else
        rc = lacs_cpu_error(LACS_ERR_MEMORY, op, "out of memory for the chunk workspaces (K = %lld, V = %lld)",
                            (long long)r.K, (long long)r.V);
    for (int t = 0; t < threads; t++)
        lacs_cpu_recurrent_workspace_free(&workspaces[t]);
    free(workspaces);
    return rc;
}

/* The floating-point operations of the chunk algorithm (recurrent_kernels.h)
 * with scalar or no decay, for one head over T tokens, counted as the dense
 * products it performs: per chunk of n tokens
 *   K K^T, Q K^T                     2 x 2 n^2 K (the lower triangles, computed tile by tile: counted whole)
 *   [Kd; Qd] S, Kl^T V'              3 x 2 n K V
 *   (I + A)^{-1} U, P V'             2 x n^2 V (triangular: half of 2 n^2 V each)
 *   (I + A)^{-1}                     n^3 / 3
 * (the element-wise scaling by gates and steps, O(n^2 + n (K + V)), is not
 * counted). */
double lacs_cpu_chunk_flops(int64_t T, int64_t K, int64_t V)
{
    double flops = 0;
    for (int64_t t0 = 0; t0 < T; t0 += LACS_CPU_CHUNK) {
        const double n = (double)(T - t0 < LACS_CPU_CHUNK ? T - t0 : LACS_CPU_CHUNK);
        flops += 6 * n * K * V + 4 * n * n * K + 2 * n * n * V + n * n * n / 3;
    }
    return flops;
}

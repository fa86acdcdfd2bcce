/* builtin:cpu: the attention forms (SPEC.md 4.8, 4.10-4.12 and 12):
 * softmax_attn (H1), fox (H10: FoX and ALiBi), deltaformer (H11) and
 * path_attn (H12), blocked flash-style: O(T^2 d) time, O(T d) memory, no
 * T x T matrix anywhere.
 *
 * Read top to bottom:
 *   - the problem (sizes, checks, inputs as fp32, the row kernels of the ISA);
 *   - the blocks: every sequence cut into blocks of BLOCK tokens from its
 *     start; work items (sequence, block, head), the latest blocks first;
 *     keys stored once per block transposed ([K x BLOCK] tiles), so that a
 *     block of logits is one GEMM Q_blk K_blk^T (c->gemm->sgemm); the heads
 *     in passes, the tiles of one pass at a time;
 *   - the log gates of FoX, ALiBi and PaTH-FoX as fp32 prefix sums over the
 *     whole sequence (SPEC 11.1 permits it), with hard resets (g = -inf);
 *   - the online softmax step (H1 with a running maximum and sum, rescaled
 *     as the maximum grows), shared by every op;
 *   - softmax_attn and fox: query blocks x key blocks;
 *   - deltaformer: the first stage u_i = v_i - beta_i sum_{j<i} B_ij u_j
 *     block by block (earlier blocks by GEMMs, the block itself by forward
 *     substitution), then softmax attention with values u;
 *   - path_attn: per block, the UT transform of its Householder transitions
 *     and their product as a K x K matrix; per query block, the queries
 *     carried backwards through the key blocks (one GEMM per block) so that
 *     each block's logits are one GEMM, as in FlashAttention;
 *   - lacs_cpu_attention.
 *
 * Everything is fp32 (the bf16 tier's inputs are widened exactly to fp32 on
 * entry); the outputs are not rounded to bf16.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../reference/validate.h"
#include "attention_blocks.h"


/* ---- the problem ---- */


const float *lacs_cpu_attention_input(const lacs_cpu_call *c, const char *name, float **owned, int *oom)
{
    const lacs_tensor *t = lacs_cpu_input(c, name);
    if (!t)
        return NULL;
    if (t->dtype == LACS_F32)
        return t->data; /* read in place */
    *owned = lacs_cpu_input_f32(c, name, oom);
    return *owned;
}

void lacs_cpu_attention_free(problem *p)
{
    for (int i = 0; i < 7; i++)
        lacs_cpu_scratch_free(p->owned[i]);
    free(p->block_base);
}

/* The scalar row kernels (LACS_ISA=scalar): the definitions of attention_kernels.h as loops, exp from the libm. */
static float logits_row_scalar(int64_t n, float *x, int64_t lo, int64_t hi, float scale, float row_bias,
                               const float *col_bias)
{
    float max = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        if (j < lo || j >= hi) {
            x[j] = -INFINITY;
            continue;
        }
        x[j] = scale * x[j] + (row_bias - (col_bias ? col_bias[j] : 0.0f));
        max = x[j] > max ? x[j] : max;
    }
    return max;
}

static float exp_row_scalar(int64_t n, float *x, float max, int normalised)
{
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        const float weight = expf(x[j] - max);
        sum += (x[j] = normalised && weight < 0x1p-126f ? 0.0f : weight); /* attention_kernels.h: as the vector rows */
    }
    return sum;
}

static float adjoint_row_scalar(int64_t n, const float *p, float *dp, float D, float *col_sum, float *p_max)
{
    float sum = 0.0f, max = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        dp[j] = p[j] * (dp[j] - D);
        col_sum[j] += dp[j];
        sum += dp[j];
        max = p[j] > max ? p[j] : max;
    }
    *p_max = max;
    return sum;
}

static void transpose_scalar(int64_t rows, int64_t cols, const float *in, int64_t ldi, float *out, int64_t ldo)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            out[j * ldo + i] = in[i * ldi + j];
}

static void solve_rows_scalar(int64_t r0, int64_t r1, int64_t n, float *x, int64_t ld_x, const float *minus_l,
                              int64_t ld_l, const float *beta, int64_t beta_stride)
{
    for (int64_t t = r0; t < r1; t++) {
        float *x_t = x + t * ld_x;
        for (int64_t s = r0; s < t; s++) {
            const float minus_l_ts = minus_l[t * ld_l + s];
            const float *x_s = x + s * ld_x;
            for (int64_t c = 0; c < n; c++)
                x_t[c] += minus_l_ts * x_s[c];
        }
        const float beta_t = beta[t * beta_stride];
        for (int64_t c = 0; c < n; c++)
            x_t[c] *= beta_t;
    }
}

static row_kernels kernels_for(lacs_cpu_isa isa)
{
    switch (isa) {
    case LACS_ISA_AVX512:
        return (row_kernels){lacs_cpu_attention_logits_row_avx512, lacs_cpu_attention_exp_row_avx512,
                             lacs_cpu_attention_adjoint_row_avx512, lacs_cpu_attention_transpose_avx512,
                             lacs_cpu_attention_solve_rows_avx512};
    case LACS_ISA_AVX2:
        return (row_kernels){lacs_cpu_attention_logits_row_avx2, lacs_cpu_attention_exp_row_avx2,
                             lacs_cpu_attention_adjoint_row_avx2, lacs_cpu_attention_transpose_avx2,
                             lacs_cpu_attention_solve_rows_avx2};
    case LACS_ISA_SCALAR:
        break;
    }
    return (row_kernels){logits_row_scalar, exp_row_scalar, adjoint_row_scalar, transpose_scalar,
                         solve_rows_scalar};
}

/* Sizes, checks the dispatcher leaves to the family (H >= 1, HV % H, the
 * cu_seqlens table, a finite scale: lacs_internal_validate, the reference's
 * one implementation), inputs as fp32 and the block table. */
int lacs_cpu_attention_load(const lacs_cpu_call *c, unsigned required, unsigned optional, problem *p)
{
    memset(p, 0, sizeof *p);
    p->call = c;
    const lacs_tensor *q = lacs_cpu_input(c, "q"), *v = lacs_cpu_input(c, "v");
    const lacs_tensor *cu = lacs_cpu_input(c, "cu_seqlens");
    p->B = q->shape[0];
    p->T = q->shape[1];
    p->H = q->shape[2];
    p->K = q->shape[3];
    p->HV = v->shape[2];
    p->V = v->shape[3];
    const double scale = lacs_cpu_param(c, "scale", p->K > 0 ? 1.0 / sqrt((double)p->K) : 1.0);
    static const double present = 0; /* the validator only asks whether an input is given */
    const lacs_dims dims = {.B = p->B, .T = p->T, .H = p->H, .HV = p->HV, .K = p->K, .V = p->V,
                            .cu_seqlens = cu ? cu->data : NULL, .N = cu ? cu->shape[0] - 1 : 0};
    const lacs_inputs presence = {
        .q = &present, .k = &present, .v = &present,
        .beta = lacs_cpu_input(c, "beta") ? &present : NULL,
        .g = lacs_cpu_input(c, "g") ? &present : NULL,
        .g_gamma = lacs_cpu_input(c, "g_gamma") ? &present : NULL,
        .w = lacs_cpu_input(c, "w") ? &present : NULL,
        .scale = scale};
    int rc = lacs_internal_validate(c->op, &dims, &presence, required, optional);
    if (rc != LACS_OK)
        return rc;
    p->group = p->HV / p->H;
    p->tokens = p->B * p->T;
    p->n_seqs = cu ? dims.N : p->B;
    p->scale = (float)scale;
    p->kernels = kernels_for(c->isa);
    p->gemm = c->gemm;
    const lacs_tensor *o = lacs_cpu_output(c, "o");
    if (!o && c->info->family != LACS_FAMILY_VJP)
        return lacs_cpu_error(LACS_ERR_INPUT, c->op, "output 'o' is required");
    p->o = o ? o->data : NULL;

    int oom = 0;
    p->q = lacs_cpu_attention_input(c, "q", &p->owned[0], &oom);
    p->k = lacs_cpu_attention_input(c, "k", &p->owned[1], &oom);
    p->v = lacs_cpu_attention_input(c, "v", &p->owned[2], &oom);
    p->w = lacs_cpu_attention_input(c, "w", &p->owned[3], &oom);
    p->beta = lacs_cpu_attention_input(c, "beta", &p->owned[4], &oom);
    p->g = lacs_cpu_attention_input(c, "g", &p->owned[5], &oom);
    p->g_gamma = lacs_cpu_attention_input(c, "g_gamma", &p->owned[6], &oom);
    p->block_base = malloc((size_t)(p->n_seqs + 1) * sizeof *p->block_base);
    if (oom || !p->block_base) {
        lacs_cpu_attention_free(p);
        return lacs_cpu_error(LACS_ERR_MEMORY, c->op, "out of memory for the inputs as fp32");
    }
    p->block_base[0] = 0;
    for (int64_t n = 0; n < p->n_seqs; n++) {
        int64_t start;
        const int64_t length = lacs_cpu_sequences(c, p->T, n, &start);
        p->block_base[n + 1] = p->block_base[n] + (length + BLOCK - 1) / BLOCK;
    }
    p->n_blocks = p->block_base[p->n_seqs];
    /* the parallel loops run over (block, head) or (sequence, head): no more threads (and workspaces) than that */
    const int64_t items = (p->n_blocks > p->n_seqs ? p->n_blocks : p->n_seqs) * p->HV;
    p->threads = items < c->threads ? (int)(items > 1 ? items : 1) : c->threads;
    return LACS_OK;
}

/* ---- work items: (sequence, block, head) ---- */

typedef struct {
    int64_t start;  /* the sequence's first token on the flattened axis */
    int64_t length; /* its tokens */
    int64_t block;  /* the block's index within the sequence */
    int64_t index;  /* its index in the problem's block table */
    int64_t head;   /* value head, or q/k head for the key tiles */
} block_item;

static int64_t item_first(const block_item *it) { return it->start + it->block * BLOCK; }
static int64_t item_rows(const block_item *it)
{
    const int64_t left = it->length - it->block * BLOCK;
    return left < BLOCK ? left : BLOCK;
}

/* The later a query block, the more key blocks it reads: hand those out first
 * so that the threads finish together. */
static int later_block_first(const void *a, const void *b)
{
    const block_item *x = a, *y = b;
    if (x->block != y->block)
        return x->block < y->block ? 1 : -1;
    return x->index != y->index ? (x->index < y->index ? -1 : 1) : (x->head < y->head ? -1 : x->head > y->head);
}

/* The first member of every job run over blocks: the problem, the items and
 * the first head of the pass in progress. */
typedef struct {
    const problem *p;
    const block_item *items;
    int64_t first_head;
} block_job;

/* Heads per pass: the buffers of the blocks (key tiles, PaTH's transitions)
 * hold the heads of one pass, so that each call touches (and the kernel
 * zeroes, on first touch) the memory of a few heads, not of all; several
 * heads when one has too few blocks to keep the threads busy. */
static int64_t heads_per_pass(const problem *p, int64_t heads)
{
    const int64_t wanted = 4 * p->threads; /* items per pass */
    const int64_t n = p->n_blocks > 0 ? (wanted + p->n_blocks - 1) / p->n_blocks : heads;
    return n < 1 ? 1 : n > heads ? heads : n;
}

/* Runs task(job, item, thread) on threads for every block of every sequence
 * and each head first_head .. first_head + heads - 1, the latest blocks first. */
static int run_blocks(block_job *job, int64_t first_head, int64_t heads, lacs_cpu_task task)
{
    const problem *p = job->p;
    const int64_t count = p->n_blocks * heads;
    block_item *items = malloc((size_t)(count + 1) * sizeof *items);
    if (!items)
        return lacs_cpu_error(LACS_ERR_MEMORY, p->call->op, "out of memory for the work list");
    int64_t at = 0;
    for (int64_t n = 0; n < p->n_seqs; n++) {
        int64_t start;
        const int64_t length = lacs_cpu_sequences(p->call, p->T, n, &start);
        for (int64_t b = 0; b < p->block_base[n + 1] - p->block_base[n]; b++)
            for (int64_t h = first_head; h < first_head + heads; h++)
                items[at++] = (block_item){start, length, b, p->block_base[n] + b, h};
    }
    qsort(items, (size_t)count, sizeof *items, later_block_first);
    job->items = items;
    job->first_head = first_head;
    lacs_cpu_parallel_for(p->threads, count, task, job);
    job->items = NULL;
    free(items);
    return LACS_OK;
}

/* ---- key tiles: each block's K^T, [K x BLOCK], for one q/k head ---- */

/* tile[c * ld_tile + j] = x[(first + j), head, c] for the block's tokens, 0
 * past its end up to BLOCK (so that a partial block's GEMM reads zeros): the
 * instruction set's transpose (8 x 8 blocks by shuffles; element by element,
 * compiled for the baseline, it was 3 % of path_attn's time). */
static void transpose_block(const problem *p, const float *x, int64_t head, int64_t first, int64_t rows, float *tile,
                            int64_t ld_tile)
{
    p->kernels.transpose(rows, p->K, x + (first * p->H + head) * p->K, p->H * p->K, tile, ld_tile);
    for (int64_t c = 0; c < p->K; c++)
        memset(tile + c * ld_tile + rows, 0, (size_t)(BLOCK - rows) * sizeof(float));
}

/* The tiles of q/k heads first_head .. first_head + heads - 1 (one pass),
 * [heads][n_blocks][key_tile_size floats]: each block's K^T, packed once as the
 * right operand of the products S = X K_b^T (lacs_cpu_gemm's pack_b: the
 * block's own tokens; a product reads no more columns than those). */
typedef struct {
    block_job base;
    float *tiles;
} key_tiles_job;

static size_t key_tile_size(const problem *p) { return p->gemm->packed_b_size(p->K, BLOCK); }

static float *key_tile(const problem *p, float *tiles, int64_t head_in_pass, int64_t index)
{
    return tiles + (size_t)(head_in_pass * p->n_blocks + index) * key_tile_size(p);
}

static void key_tile_task(void *context, int64_t item, int thread)
{
    (void)thread;
    const key_tiles_job *job = context;
    const problem *p = job->base.p;
    const block_item *it = &job->base.items[item];
    p->gemm->pack_b(p->K, item_rows(it), p->k + (item_first(it) * p->H + it->head) * p->K, p->H * p->K,
                    LACS_GEMM_B_TRANSPOSED, key_tile(p, job->tiles, it->head - job->base.first_head, it->index));
}

static int make_key_tiles(const problem *p, int64_t first_head, int64_t heads, float *tiles)
{
    key_tiles_job job = {{p, NULL, 0}, tiles};
    return run_blocks(&job.base, first_head, heads, key_tile_task);
}

/* The values of value heads first_head .. first_head + heads - 1 (a pass),
 * [heads][n_blocks][value_tile_size floats]: each block's rows [tokens x V], packed
 * once as the right operand of N += P V_b. */
typedef struct {
    block_job base;
    const float *values; /* [tokens, HV, V] */
    float *tiles;
} value_tiles_job;

static size_t value_tile_size(const problem *p) { return p->gemm->packed_b_size(BLOCK, p->V); }

static float *value_tile(const problem *p, float *tiles, int64_t head_in_pass, int64_t index)
{
    return tiles + (size_t)(head_in_pass * p->n_blocks + index) * value_tile_size(p);
}

static void value_tile_task(void *context, int64_t item, int thread)
{
    (void)thread;
    const value_tiles_job *job = context;
    const problem *p = job->base.p;
    const block_item *it = &job->base.items[item];
    p->gemm->pack_b(item_rows(it), p->V, job->values + (item_first(it) * p->HV + it->head) * p->V, p->HV * p->V, 0,
                    value_tile(p, job->tiles, it->head - job->base.first_head, it->index));
}

static int make_value_tiles(const problem *p, const float *values, int64_t first_head, int64_t heads, float *tiles)
{
    value_tiles_job job = {{p, NULL, 0}, values, tiles};
    return run_blocks(&job.base, first_head, heads, value_tile_task);
}

/* ---- log gates (H10, PaTH-FoX) ---- */


int lacs_cpu_attention_gates(const problem *p, float factor, gates *out)
{
    out->bias = lacs_cpu_scratch_alloc((size_t)(p->HV * p->tokens + 1) * sizeof *out->bias);
    out->first_visible = lacs_cpu_scratch_alloc((size_t)(p->HV * p->tokens + 1) * sizeof *out->first_visible);
    if (!out->bias || !out->first_visible)
        return lacs_cpu_error(LACS_ERR_MEMORY, p->call->op, "out of memory for the gates");
    for (int64_t n = 0; n < p->n_seqs; n++) {
        int64_t start;
        const int64_t length = lacs_cpu_sequences(p->call, p->T, n, &start);
        for (int64_t hv = 0; hv < p->HV; hv++) {
            float *G = out->bias + hv * p->tokens;
            int64_t *first = out->first_visible + hv * p->tokens;
            int64_t reset = start;
            float sum = 0.0f;
            for (int64_t t = start; t < start + length; t++) {
                const float gate = p->g ? p->g[t * p->HV + hv] : p->g_gamma[hv];
                if (t == start || gate == -INFINITY) {
                    reset = t;
                    sum = 0.0f;
                } else if (p->g) {
                    sum += gate;
                } else {
                    sum = (float)(t - reset) * gate;
                }
                G[t] = factor * sum;
                first[t] = reset;
            }
        }
    }
    return LACS_OK;
}

void lacs_cpu_attention_free_gates(gates *g)
{
    lacs_cpu_scratch_free(g->bias);
    lacs_cpu_scratch_free(g->first_visible);
}

/* ---- the online softmax step (H1 blocked) ---- */

/* How the raw dot products of a block become logits, and how they are normalised. */
typedef struct {
    float scale;
    const float *bias;            /* G_t on the token axis of this head, or NULL */
    const int64_t *first_visible; /* on the token axis of this head, or NULL (the sequence's start) */
    int strict;                   /* keys j < i only (DeltaFormer's B), else j <= i */
    int normalised;               /* softmax; 0: plain exp, DeltaFormer's EXP form (no max subtracted) */
} logit_rule;

/* The running softmax of a block of query rows: max m_i, sum Z_i and the
 * unnormalised output N_i = sum_j exp(l_ij - m_i) v_j, [rows x V]. */
typedef struct {
    float *max, *sum, *out;
    int64_t V;
} running_softmax;

static void running_start(running_softmax *r, int64_t rows)
{
    for (int64_t i = 0; i < rows; i++) {
        r->max[i] = -INFINITY;
        r->sum[i] = 0.0f;
    }
    memset(r->out, 0, (size_t)(rows * r->V) * sizeof(float));
}

/* The first key a query sees (sequence start, or its last reset). */
static int64_t first_key(const logit_rule *rule, int64_t seq_start, int64_t i)
{
    return rule->first_visible ? rule->first_visible[i] : seq_start;
}

/* Turns S [rows x n] (raw dot products of queries i0 .. i0 + rows - 1 with keys
 * j0 .. j0 + n - 1, leading dimension lds) into p_ij = exp(l_ij - m_i) with m_i
 * the new running maximum, adds each row's sum to Z_i and rescales N_i by
 * exp(m_old - m_new): the step of the online softmax before N += P V. */
static void softmax_step(const problem *p, const logit_rule *rule, int64_t seq_start, int64_t i0, int64_t rows,
                         int64_t j0, int64_t n, float *S, int64_t lds, running_softmax *r)
{
    for (int64_t row = 0; row < rows; row++) {
        const int64_t i = i0 + row;
        int64_t lo = first_key(rule, seq_start, i) - j0, hi = i - j0 + (rule->strict ? 0 : 1);
        lo = lo < 0 ? 0 : lo;
        hi = hi > n ? n : hi;
        float *s = S + row * lds;
        const float block_max = p->kernels.logits_row(n, s, lo, hi, rule->scale,
                                                      rule->bias ? rule->bias[i] : 0.0f,
                                                      rule->bias ? rule->bias + j0 : NULL);
        if (!rule->normalised) {
            /* EXP: exp(l_ij) as it is (it may overflow, by definition: SPEC 4.11) */
            r->sum[row] += p->kernels.exp_row(n, s, 0.0f, 0);
            continue;
        }
        const float new_max = block_max > r->max[row] ? block_max : r->max[row];
        if (new_max == -INFINITY) {
            /* nothing visible yet (DeltaFormer's first row): no weights */
            memset(s, 0, (size_t)n * sizeof(float));
            continue;
        }
        /* exp(m_old - m_new): 0 on the first visible block (exp(-inf)), 1 while the maximum stays */
        const float rescale = new_max == r->max[row] ? 1.0f : expf(r->max[row] - new_max);
        r->max[row] = new_max;
        r->sum[row] = rescale * r->sum[row] + p->kernels.exp_row(n, s, new_max, 1);
        if (rescale != 1.0f) {
            float *out = r->out + row * r->V;
            for (int64_t c = 0; c < r->V; c++)
                out[c] *= rescale;
        }
    }
}

/* o_i = N_i / Z_i (or N_i for the EXP form) into the output rows i0 .. i0 + rows - 1 of value head hv, and
 * where asked (p->lse) each row's log-sum-exp m_i + log Z_i (0 for the EXP form: its weights are exp(l)). */
static void write_rows(const problem *p, const running_softmax *r, int normalised, int64_t i0, int64_t rows,
                       int64_t hv, float *dest)
{
    for (int64_t row = 0; row < rows && p->lse; row++)
        p->lse[hv * p->tokens + i0 + row] = normalised ? r->max[row] + logf(r->sum[row]) : 0.0f;
    for (int64_t row = 0; row < rows; row++) {
        float *o = dest + ((i0 + row) * p->HV + hv) * p->V;
        const float *out = r->out + row * p->V;
        const float denominator = normalised ? r->sum[row] : 1.0f;
        for (int64_t c = 0; c < p->V; c++)
            o[c] = out[c] / denominator;
    }
}

/* Per thread: a block of logits and a running softmax (and PaTH's extras). */
typedef struct {
    float *memory;
    int64_t per_thread; /* floats */
} workspaces;

static int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

static int make_workspaces(const problem *p, int64_t extra, workspaces *ws)
{
    ws->per_thread = round16(BLOCK * 2 * BLOCK) + round16(BLOCK * p->V) + 2 * round16(BLOCK) + round16(extra);
    ws->memory = lacs_cpu_scratch_alloc((size_t)(ws->per_thread * p->threads) * sizeof(float));
    if (!ws->memory)
        return lacs_cpu_error(LACS_ERR_MEMORY, p->call->op, "out of memory for the workspaces");
    return LACS_OK;
}

/* Thread `thread`'s logits block [BLOCK x 2 BLOCK], running softmax and extra floats. */
static float *workspace_of(const problem *p, const workspaces *ws, int thread, running_softmax *r, float **extra)
{
    float *base = ws->memory + thread * ws->per_thread;
    float *S = base;
    r->out = S + round16(BLOCK * 2 * BLOCK);
    r->max = r->out + round16(BLOCK * p->V);
    r->sum = r->max + round16(BLOCK);
    r->V = p->V;
    if (extra)
        *extra = r->sum + round16(BLOCK);
    return S;
}

/* ---- softmax_attn (H1) and fox (H10) ---- */

/* The attention of query blocks over the key tiles of a pass of q/k heads
 * (starting at q/k head first_head / group) with the value tiles of their
 * value heads (of v, or DeltaFormer's u) into `dest`. */
typedef struct {
    block_job base;
    float *key_tiles, *value_tiles;
    float *dest;
    const workspaces *ws;
    const gates *gate; /* or NULL */
    int normalised;
} attend_job;

/* Key blocks from the diagonal one down to the first: the diagonal block
 * first gives each row a maximum at once, and with hard resets the walk can
 * stop at the first block no query sees. */
static void attend_task(void *context, int64_t item_index, int thread)
{
    const attend_job *job = context;
    const problem *p = job->base.p;
    const block_item *it = &job->base.items[item_index];
    const int64_t hv = it->head, h = hv / p->group, i0 = item_first(it), rows = item_rows(it);
    running_softmax r;
    float *S = workspace_of(p, job->ws, thread, &r, NULL);
    const logit_rule rule = {p->scale, job->gate ? job->gate->bias + hv * p->tokens : NULL,
                             job->gate ? job->gate->first_visible + hv * p->tokens : NULL, 0, job->normalised};
    running_start(&r, rows);
    /* the earliest key any row sees: the first row's (resets only move forward) */
    const int64_t earliest = first_key(&rule, it->start, i0);
    const float *Q = p->q + (i0 * p->H + h) * p->K;
    for (int64_t b = it->block; b >= 0; b--) {
        const int64_t j0 = it->start + b * BLOCK;
        const int64_t n = b == it->block ? rows : BLOCK;
        if (j0 + n <= earliest)
            break;
        const int64_t index = it->index - (it->block - b);
        const float *tile = key_tile(p, job->key_tiles, h - job->base.first_head / p->group, index);
        /* the diagonal block: only its lower triangle of logits is visible (the others are masked by softmax_step,
         * which writes them whole), and its weights above the diagonal are 0, so both products skip that part */
        const int diagonal = b == it->block;
        p->gemm->sgemm_packed(rows, n, p->K, Q, p->H * p->K, tile, S, BLOCK, 0.0f, diagonal ? LACS_GEMM_C_LOWER : 0);
        softmax_step(p, &rule, it->start, i0, rows, j0, n, S, BLOCK, &r);
        p->gemm->sgemm_packed(rows, p->V, n, S, BLOCK, value_tile(p, job->value_tiles, hv - job->base.first_head, index),
                              r.out, p->V, 1.0f, diagonal ? LACS_GEMM_A_LOWER : 0);
    }
    write_rows(p, &r, job->normalised, i0, rows, hv, job->dest);
}

/* Causal attention (softmax, or DeltaFormer's EXP form) of q over k with
 * `values`, a pass of q/k heads at a time: their key tiles, then every query
 * block of their value heads. */
int lacs_cpu_attention_attend(const problem *p, const float *values, const gates *gate, int normalised, float *dest)
{
    workspaces ws = {NULL, 0};
    const int64_t pass = heads_per_pass(p, p->H);
    float *tiles = lacs_cpu_scratch_alloc(((size_t)(pass * p->n_blocks) * key_tile_size(p) + 1) * sizeof *tiles);
    float *value_tiles = lacs_cpu_scratch_alloc(((size_t)(pass * p->group * p->n_blocks) * value_tile_size(p) + 1) * sizeof *value_tiles);
    int rc = tiles && value_tiles ? make_workspaces(p, 0, &ws)
                                  : lacs_cpu_error(LACS_ERR_MEMORY, p->call->op, "out of memory for the tiles");
    for (int64_t h = 0; h < p->H && rc == LACS_OK; h += pass) {
        const int64_t heads = p->H - h < pass ? p->H - h : pass;
        attend_job job = {{p, NULL, 0}, tiles, value_tiles, dest, &ws, gate, normalised};
        rc = make_key_tiles(p, h, heads, tiles);
        if (rc == LACS_OK)
            rc = make_value_tiles(p, values, h * p->group, heads * p->group, value_tiles);
        if (rc == LACS_OK)
            rc = run_blocks(&job.base, h * p->group, heads * p->group, attend_task);
    }
    lacs_cpu_scratch_free(ws.memory);
    lacs_cpu_scratch_free(tiles);
    lacs_cpu_scratch_free(value_tiles);
    return rc;
}

static int softmax_or_fox(const lacs_cpu_call *c, int fox)
{
    problem p;
    int rc = lacs_cpu_attention_load(c, 0, fox ? LACS_READS_G | LACS_READS_G_GAMMA : 0, &p);
    if (rc != LACS_OK)
        return rc;
    if (fox && (rc = lacs_internal_check_exactly_one(c->op, p.g, "'g' (FoX's log forget gate)", p.g_gamma,
                                                      "'g_gamma' (ALiBi's constant log decay)")) != LACS_OK) {
        lacs_cpu_attention_free(&p);
        return rc;
    }
    gates gate = {NULL, NULL};
    if (fox)
        rc = lacs_cpu_attention_gates(&p, 1.0f, &gate); /* H10: the gate after the scale */
    if (rc == LACS_OK)
        rc = lacs_cpu_attention_attend(&p, p.v, fox ? &gate : NULL, 1, p.o);
    lacs_cpu_attention_free_gates(&gate);
    lacs_cpu_attention_free(&p);
    return rc;
}

/* ---- deltaformer (H11) ---- */

/* The first stage, u_i = v_i - beta_i sum_{j<i} B_ij u_j, for one (sequence,
 * value head), block after block (each needs every earlier u):
 *   - earlier blocks: S = X K_b^T by GEMM, the online softmax step (strict
 *     rule: all columns visible), N += P U_b by GEMM;
 *   - the block itself: S = X K_a^T, the same step restricted to j < i,
 *     which fixes each row's final max and sum; then forward substitution,
 *     u_i = v_i - beta_i / Z_i (N_i + sum_{a0 <= j < i} p_ij u_j), row by row.
 * X is k (forms EXP, SOFTMAX) or q (FLA, fla's deltaformer_attn). In the
 * softmax forms a row with no key (the sequence's first) has B's row 0, so
 * u = v. Items: (sequence, value head of the pass's q/k heads). */
typedef struct {
    const problem *p;
    float *key_tiles; /* the pass's */
    int64_t first_head, heads; /* the pass's q/k heads */
    const float *x; /* k or q */
    float *u;       /* [tokens, HV, V] */
    const workspaces *ws;
    int normalised;
    float *lse_b, *r; /* or NULL: each row's log-sum-exp of B ([HV][tokens]; 0 for EXP and for a row with no
                         key) and r_i = sum_{j<i} B_ij u_j ([tokens, HV, V]), for the backward */
} first_stage_job;

static void first_stage_task(void *context, int64_t item, int thread)
{
    const first_stage_job *job = context;
    const problem *p = job->p;
    const int64_t n_seq = item / (job->heads * p->group);
    const int64_t hv = job->first_head * p->group + item % (job->heads * p->group), h = hv / p->group;
    int64_t start;
    const int64_t length = lacs_cpu_sequences(p->call, p->T, n_seq, &start);
    running_softmax r;
    float *S = workspace_of(p, job->ws, thread, &r, NULL);
    const logit_rule rule = {p->scale, NULL, NULL, 1, job->normalised};
    const int64_t ldv = p->HV * p->V;
    for (int64_t a = 0; a * BLOCK < length; a++) {
        const int64_t i0 = start + a * BLOCK, rows = length - a * BLOCK < BLOCK ? length - a * BLOCK : BLOCK;
        const float *X = job->x + (i0 * p->H + h) * p->K;
        const float *own_tile = key_tile(p, job->key_tiles, h - job->first_head, p->block_base[n_seq] + a);
        running_start(&r, rows);
        for (int64_t b = a - 1; b >= 0; b--) {
            const int64_t j0 = start + b * BLOCK;
            const float *tile = key_tile(p, job->key_tiles, h - job->first_head, p->block_base[n_seq] + b);
            p->gemm->sgemm_packed(rows, BLOCK, p->K, X, p->H * p->K, tile, S, BLOCK, 0.0f, 0);
            softmax_step(p, &rule, start, i0, rows, j0, BLOCK, S, BLOCK, &r);
            p->gemm->sgemm(rows, p->V, BLOCK, S, BLOCK, job->u + (j0 * p->HV + hv) * p->V, ldv, r.out, p->V, 1);
        }
        p->gemm->sgemm_packed(rows, rows, p->K, X, p->H * p->K, own_tile, S, BLOCK, 0.0f, 0);
        softmax_step(p, &rule, start, i0, rows, i0, rows, S, BLOCK, &r);
        for (int64_t row = 0; row < rows; row++) {
            const int64_t i = i0 + row;
            float *acc = r.out + row * p->V; /* N_i, then N_i + sum_j p_ij u_j */
            for (int64_t col = 0; col < row; col++) {
                const float weight = S[row * BLOCK + col];
                const float *u_j = job->u + ((i0 + col) * p->HV + hv) * p->V;
                for (int64_t c = 0; c < p->V; c++)
                    acc[c] += weight * u_j[c];
            }
            const float beta = p->beta ? p->beta[i * p->HV + hv] : 1.0f;
            const float coef = !job->normalised ? beta : r.sum[row] > 0.0f ? beta / r.sum[row] : 0.0f;
            if (job->lse_b)
                job->lse_b[hv * p->tokens + i] =
                    job->normalised && r.sum[row] > 0.0f ? r.max[row] + logf(r.sum[row]) : 0.0f;
            for (int64_t c = 0; job->r && c < p->V; c++)
                job->r[(i * p->HV + hv) * p->V + c] =
                    !job->normalised ? acc[c] : r.sum[row] > 0.0f ? acc[c] / r.sum[row] : 0.0f;
            const float *v_i = p->v + (i * p->HV + hv) * p->V;
            float *u_i = job->u + (i * p->HV + hv) * p->V;
            for (int64_t c = 0; c < p->V; c++)
                u_i[c] = v_i[c] - coef * acc[c];
        }
    }
}

/* Both stages into u and p->o (and p->lse, the second stage's). */
int lacs_cpu_attention_deltaformer_forward(const problem *pp, int form, float *u, float *lse_b, float *r)
{
    const problem p = *pp;
    const lacs_cpu_call *c = p.call;
    int rc = LACS_OK;
    const int normalised = form != LACS_DELTAFORMER_EXP;
    const int64_t pass = heads_per_pass(&p, p.H);
    float *tiles = lacs_cpu_scratch_alloc(((size_t)(pass * p.n_blocks) * key_tile_size(&p) + 1) * sizeof *tiles);
    workspaces ws = {NULL, 0};
    if (!tiles)
        rc = lacs_cpu_error(LACS_ERR_MEMORY, c->op, "out of memory for the key tiles");
    if (rc == LACS_OK)
        rc = make_workspaces(&p, 0, &ws);
    /* the first stage, a pass of q/k heads at a time (their key tiles); the sequences and value heads in parallel */
    for (int64_t h = 0; h < p.H && rc == LACS_OK; h += pass) {
        const int64_t heads = p.H - h < pass ? p.H - h : pass;
        rc = make_key_tiles(&p, h, heads, tiles);
        first_stage_job job = {&p, tiles, h, heads, form == LACS_DELTAFORMER_FLA ? p.q : p.k, u, &ws, normalised,
                               lse_b, r};
        if (rc == LACS_OK)
            lacs_cpu_parallel_for(p.threads, p.n_seqs * heads * p.group, first_stage_task, &job);
    }
    /* the second stage: o_i = sum_{j<=i} A_ij u_j, A the causal softmax (or exp) of s q_i.k_j */
    if (rc == LACS_OK)
        rc = lacs_cpu_attention_attend(&p, u, NULL, normalised, p.o);
    lacs_cpu_scratch_free(ws.memory);
    lacs_cpu_scratch_free(tiles);
    return rc;
}

static int deltaformer(const lacs_cpu_call *c)
{
    problem p;
    int rc = lacs_cpu_attention_load(c, 0, LACS_READS_BETA, &p);
    if (rc != LACS_OK)
        return rc;
    const double form = lacs_cpu_param(c, "form", LACS_DELTAFORMER_SOFTMAX);
    if (form != LACS_DELTAFORMER_EXP && form != LACS_DELTAFORMER_SOFTMAX && form != LACS_DELTAFORMER_FLA) {
        lacs_cpu_attention_free(&p);
        return lacs_cpu_error(LACS_ERR_PARAM, c->op, "unknown form %g (0 exp, 1 softmax, 2 fla)", form);
    }
    float *u = lacs_cpu_scratch_alloc((size_t)(p.tokens * p.HV * p.V + 1) * sizeof *u);
    rc = u ? lacs_cpu_attention_deltaformer_forward(&p, (int)form, u, NULL, NULL)
           : lacs_cpu_error(LACS_ERR_MEMORY, c->op, "out of memory for u");
    lacs_cpu_scratch_free(u);
    lacs_cpu_attention_free(&p);
    return rc;
}

/* ---- path_attn (H12) ---- */

/* For a block of transitions t = 0 .. nb - 1 (local indices), H_t = I - beta_t
 * w_t w_t^T, with L the strictly lower part of W W^T:
 *   U  = (I + diag(beta) L)^{-1} diag(beta) W   (the UT transform): then
 *        H_0 H_1 ... H_m = I - sum_{t<=m} u_t w_t^T for every m;
 *   DC = (I + diag(beta) L)^{-1} diag(beta) ((W K^T) (.) [t > j]): then
 *        H_i ... H_{j+1} k_j = k_j - sum_{j<t<=i} DC_tj w_t for i >= j.
 * (The first by induction, H_0 ... H_m = (H_0 ... H_{m-1}) H_m; the second
 * from z^(i) = H_i z^(i-1), z^(j) = k_j: z^(i) = k_j - sum_{t<=i} beta_t w_t
 * c_tj with (I + L diag(beta)) C = (W K^T) (.) [t > j], and diag(beta)
 * (I + L diag(beta))^{-1} = (I + diag(beta) L)^{-1} diag(beta).)
 * Formed per block and value head by the block's task in its thread's
 * workspace, where they stay in cache (kept per block, 400 KiB a block at
 * K = 64, each write was a miss; README.md section 5), negated so that the
 * GEMMs accumulate:
 *   tile  [K x 3 BLOCK]: columns [0, BLOCK) K~^T, the keys carried to the
 *         block's end e, k~_j = H_e ... H_{j+1} k_j = k_j - sum_t DC_tj w_t;
 *         [BLOCK, 2 BLOCK) W^T; [2 BLOCK, 3 BLOCK) K^T;
 *   -U    [BLOCK x K], -DC [BLOCK x BLOCK] (packed: the right operands of the
 *         block's K~ and M and of its diagonal's products);
 *   M     [K x K] = I - W^T U, the whole block's product H_0 ... H_{nb-1}
 *         transposed, to carry a row vector over the block: y^T M = (H_0 ...
 *         H_{nb-1} y)^T. Explicit, it costs K^2 per query and block against
 *         the WY form's 2 BLOCK K (Y - (Y W^T) U): a quarter for K = 64,
 *         less whenever K < 2 BLOCK (head sizes up to 256).
 * Kept per block, for the later blocks (path_blocks): K~^T and M packed, the
 * values V_b packed, the folds' products, and the block's query rows' state
 * after their diagonal block. */
typedef struct {
    /* the block's query rows after their diagonal block (path_block_task): Y, and the running softmax's N, m and
     * Z (path_query_state) */
    float *query_states;
    /* the right operands of the earlier blocks' products, packed once: K~^T, M and V_b */
    float *tilde_packed, *transport_packed, *value_tiles;
    /* a fold's (LACS_CPU_PATH_FOLD blocks): each block's keys carried to the fold's top, P_b K~_b^T, and at the top
     * block the fold's whole product, packed */
    float *folded_packed, *fold_transport_packed;
} path_blocks;

/* Folds of blocks (job->fold of them, LACS_CPU_PATH_FOLD, cpu.h). A query block carries Y over each
 * block of its own fold (Y <- Y M_b), and over each earlier fold at once (Y <- Y M_top ... M_bottom),
 * reading that fold's keys carried to its top, P_b K~_b^T with P_b = M_top ... M_{b+1}, formed once per
 * block (path_fold_task): per query and key block, the K^2 flops of Y M_b become K^2 / fold, against
 * 2 BLOCK (K + V) for the logits and values: 20 % of PaTH's work at K = V = 64 (README.md section 5). */

/* Block `index` of the pass's value head `head_in_pass` (blocks of the heads of one pass, as the key tiles).
 * A block's query state: Y [BLOCK x K], then N [BLOCK x V], m and Z [BLOCK each] (running_softmax's). */
static int64_t path_query_state_floats(const problem *p)
{
    return round16(BLOCK * p->K) + round16(BLOCK * p->V) + 2 * round16(BLOCK);
}
static float *path_query_state(const problem *p, const path_blocks *pb, int64_t head_in_pass, int64_t index,
                               running_softmax *r)
{
    float *Y = pb->query_states + (size_t)(head_in_pass * p->n_blocks + index) * (size_t)path_query_state_floats(p);
    r->out = Y + round16(BLOCK * p->K);
    r->max = r->out + round16(BLOCK * p->V);
    r->sum = r->max + round16(BLOCK);
    r->V = p->V;
    return Y;
}
static float *path_tilde_packed(const problem *p, const path_blocks *pb, int64_t head_in_pass, int64_t index)
{
    return pb->tilde_packed + (size_t)(head_in_pass * p->n_blocks + index) * key_tile_size(p);
}
static float *path_transport_packed(const problem *p, const path_blocks *pb, int64_t head_in_pass, int64_t index)
{
    return pb->transport_packed + (size_t)(head_in_pass * p->n_blocks + index) * p->gemm->packed_b_size(p->K, p->K);
}
static float *path_folded_packed(const problem *p, const path_blocks *pb, int64_t head_in_pass, int64_t index)
{
    return pb->folded_packed + (size_t)(head_in_pass * p->n_blocks + index) * key_tile_size(p);
}
static float *path_fold_transport_packed(const problem *p, const path_blocks *pb, int64_t head_in_pass,
                                         int64_t index)
{
    return pb->fold_transport_packed +
           (size_t)(head_in_pass * p->n_blocks + index) * p->gemm->packed_b_size(p->K, p->K);
}

typedef struct {
    block_job base;
    const path_blocks *pb;
    const workspaces *ws;
    const gates *gate;   /* or NULL */
    float *fold_scratch; /* path_fold_task's P, the next P and a block's carried keys, per thread */
    int64_t fold_floats;
    int64_t fold; /* blocks per fold (1: none) */
} path_job;

/* Rows per panel of the blocked forward substitution: only the 8 x 8
 * triangles on the diagonal are row by row, the rest is GEMMs. */
#define SOLVE_PANEL 8

/* Rows lo .. hi - 1 of (I + diag(beta) L) X = diag(beta) RHS, the terms of the rows before lo already added
 * (X = -[U | DC] [nb x (K + BLOCK)], minus_l = -L; lo a multiple of SOLVE_PANEL), recursively: the upper part
 * solved, then the lower part's terms of it added by one GEMM, X[mid:hi] += (-L)[mid:hi, lo:mid] X[lo:mid]
 * over the columns where X[lo:mid] is not zero (W's K, and DC's j < mid: DC_sj = 0 for j >= s, as the
 * right-hand side, and the solve keeps it), then the lower part solved. Each row receives the terms of the
 * rows before it in increasing order, one FMA each, as from one GEMM per panel over all the rows before it
 * (which took m = 8 rows a product, 23 % of the block's task at 41 % of the FMA peak): the same bits; the
 * halves' products have 64, 32 and 16 rows. */
static void path_solve(const problem *p, int64_t lo, int64_t hi, float *X, int64_t ld_x, const float *minus_l,
                       int64_t ld_l, const float *beta)
{
    if (hi - lo <= SOLVE_PANEL) { /* the triangle, row by row (the instruction set's vectors along the columns) */
        p->kernels.solve_rows(lo, hi, ld_x, X, ld_x, minus_l, ld_l, beta, p->HV);
        return;
    }
    const int64_t half = (hi - lo) / (2 * SOLVE_PANEL) * SOLVE_PANEL, mid = lo + (half > 0 ? half : SOLVE_PANEL);
    path_solve(p, lo, mid, X, ld_x, minus_l, ld_l, beta);
    p->gemm->sgemm(hi - mid, p->K + mid, mid - lo, minus_l + mid * ld_l + lo, ld_l, X + lo * ld_x, ld_x,
                   X + mid * ld_x, ld_x, 1);
    path_solve(p, mid, hi, X, ld_x, minus_l, ld_l, beta);
}

/* H12: l_ij = scale (q_i^T R_ij k_j + G_i - G_j), the gate before the scale (bias = scale G) */
static logit_rule path_rule(const path_job *job, int64_t hv)
{
    const problem *p = job->base.p;
    return (logit_rule){p->scale, job->gate ? job->gate->bias + hv * p->tokens : NULL,
                        job->gate ? job->gate->first_visible + hv * p->tokens : NULL, 0, 1};
}

/* The floats of a block task's part of the extra workspace: -X, the tile [W^T | K^T], then W^T, K^T, -U and -DC
 * packed. */
static int64_t path_block_floats(const problem *p)
{
    return round16(BLOCK * (p->K + BLOCK)) + round16(p->K * 2 * BLOCK) + 2 * round16((int64_t)key_tile_size(p)) +
           round16((int64_t)p->gemm->packed_b_size(BLOCK, p->K)) +
           round16((int64_t)p->gemm->packed_b_size(BLOCK, BLOCK));
}

/* One block's tile, -U, -DC and M (value head it->head), then its query
 * rows' diagonal block (path_query_task's first step, the one that reads
 * W, -U and -DC: done here, where they are in cache, they need not be
 * kept). Workspace: S holds [W W^T | W K^T] ([nb x 2 BLOCK]), then the
 * diagonal's logits; extra holds -X = [-U | -DC] [nb x (K + BLOCK)], solved
 * for from the negated right-hand sides (negation is exact and every step's
 * rounding symmetric, so these are X's bits negated, with no pass to negate
 * them after), then the tile [W^T | K^T], and W^T, K^T, -U and -DC packed.
 * K~^T and M are formed in their packed layout (path_blocks) itself. */
static void path_block_task(void *context, int64_t item, int thread)
{
    const path_job *job = context;
    const problem *p = job->base.p;
    const block_item *it = &job->base.items[item];
    const int64_t hv = it->head, h = hv / p->group, t0 = item_first(it), nb = item_rows(it), K = p->K;
    running_softmax unused;
    float *X; /* -X: [-U | -DC] */
    float *gram = workspace_of(p, job->ws, thread, &unused, &X);
    float *tile = X + round16(BLOCK * (K + BLOCK)); /* [W^T | K^T], K x 2 BLOCK */
    float *w_packed = tile + round16(K * 2 * BLOCK), *k_packed = w_packed + round16((int64_t)key_tile_size(p));
    float *minus_u = k_packed + round16((int64_t)key_tile_size(p));
    float *minus_dc = minus_u + round16((int64_t)p->gemm->packed_b_size(BLOCK, K));
    const int64_t head_in_pass = hv - job->base.first_head;
    const int64_t ld_tile = 2 * BLOCK, ld_gram = 2 * BLOCK, ld_x = K + BLOCK, nr = p->gemm->nr;
    transpose_block(p, p->w, h, t0, nb, tile, ld_tile);
    transpose_block(p, p->k, h, t0, nb, tile + BLOCK, ld_tile);
    /* W^T and K^T packed once, for these two products and the diagonal's two */
    p->gemm->pack_b(K, BLOCK, tile, ld_tile, 0, w_packed);
    p->gemm->pack_b(K, BLOCK, tile + BLOCK, ld_tile, 0, k_packed);
    /* [W W^T | W K^T], two GEMMs; only their strictly lower parts are read (L, and W K^T's t > j), so the tiles
     * wholly above the diagonal are skipped (C_LOWER: left as they were) */
    const float *W = p->w + (t0 * p->H + h) * K;
    p->gemm->sgemm_packed(nb, nb, K, W, p->H * K, w_packed, gram, ld_gram, 0.0f, LACS_GEMM_C_LOWER);
    p->gemm->sgemm_packed(nb, nb, K, W, p->H * K, k_packed, gram + BLOCK, ld_gram, 0.0f, LACS_GEMM_C_LOWER);
    /* right-hand sides negated, -[W | (W K^T) (.) [t > j]] (0 past the block's end), and -L in place of W W^T's
     * lower part */
    for (int64_t t = 0; t < nb; t++) {
        float *x = X + t * ld_x;
        const float *w_t = p->w + ((t0 + t) * p->H + h) * K, *wk_t = gram + t * ld_gram + BLOCK;
        for (int64_t c = 0; c < K; c++)
            x[c] = -w_t[c];
        for (int64_t j = 0; j < t; j++)
            x[K + j] = -wk_t[j];
        memset(x + K + t, 0, (size_t)(BLOCK - t) * sizeof(float));
        for (int64_t s = 0; s < t; s++)
            gram[t * ld_gram + s] = -gram[t * ld_gram + s];
    }
    /* (I + diag(beta) L) X = diag(beta) RHS: x_t = beta_t (rhs_t - sum_{s<t} L_ts x_s) */
    path_solve(p, 0, nb, X, ld_x, gram, ld_gram, p->beta + t0 * p->HV + hv);
    /* -U and -DC packed once, for the products below and the diagonal's two (k = nb) */
    p->gemm->pack_b(nb, K, X, ld_x, 0, minus_u);
    p->gemm->pack_b(nb, nb, X + K, ld_x, 0, minus_dc);
    /* K~^T = K^T + W^T (-DC) and M = I + W^T (-U), the later query blocks' and the folds' right operands, each
     * formed in the packed layout itself, panel by panel (C = the panel, ldc = nr; its padding stays 0): no
     * row-major copy, no pack after. K~^T from K^T packed (whole: 0 past nb); a panel from its first column j0
     * on reads -DC from row j0 (DC_tj = 0 for j >= t: the rows above add nothing), the skip of
     * LACS_GEMM_B_LOWER, and the same bits */
    float *const tilde = path_tilde_packed(p, job->pb, head_in_pass, it->index);
    memcpy(tilde, k_packed, key_tile_size(p) * sizeof(float));
    for (int64_t j0 = 0; j0 < nb; j0 += nr)
        p->gemm->sgemm_packed(K, nb - j0 < nr ? nb - j0 : nr, nb - j0, tile + j0, ld_tile,
                              minus_dc + (j0 / nr) * nb * nr + j0 * nr, tilde + j0 * K, nr, 1.0f, 0);
    float *const transport = path_transport_packed(p, job->pb, head_in_pass, it->index);
    memset(transport, 0, p->gemm->packed_b_size(K, K) * sizeof(float));
    for (int64_t c = 0; c < K; c++)
        transport[(c / nr) * K * nr + c * nr + c % nr] = 1.0f;
    for (int64_t j0 = 0; j0 < K; j0 += nr)
        p->gemm->sgemm_packed(K, K - j0 < nr ? K - j0 : nr, nb, tile, ld_tile, minus_u + (j0 / nr) * nb * nr,
                              transport + j0 * K, nr, 1.0f, 0);

    /* the query rows' diagonal block, into their state (path_query_state): [Q W^T | Q K^T] (into S, free since
     * the solve), two GEMMs of which only the lower triangles are read (t <= i, j <= i; the logits above are
     * masked, softmax_step), then Q W^T masked to t <= i */
    const int64_t i0 = t0, rows = nb, ld_s = 2 * BLOCK;
    float *S = gram;
    running_softmax state, *r = &state;
    float *Y = path_query_state(p, job->pb, head_in_pass, it->index, r);
    const logit_rule rule = path_rule(job, hv);
    const float *Q = p->q + (i0 * p->H + h) * K;
    running_start(r, rows);
    p->gemm->sgemm_packed(rows, rows, K, Q, p->H * K, w_packed, S, ld_s, 0.0f, LACS_GEMM_C_LOWER);
    p->gemm->sgemm_packed(rows, rows, K, Q, p->H * K, k_packed, S + BLOCK, ld_s, 0.0f, LACS_GEMM_C_LOWER);
    for (int64_t row = 0; row < rows; row++) /* row < rows <= BLOCK */
        memset(S + row * ld_s + row + 1, 0, (size_t)(BLOCK - row - 1) * sizeof(float));
    for (int64_t row = 0; row < rows; row++)
        memcpy(Y + row * K, Q + row * p->H * K, (size_t)K * sizeof(float));
    /* (Q W^T) (.) [t <= i] is lower triangular (its upper part stored as 0): its products skip that part; and
     * times -DC (DC_tj = 0 for j >= t) it is lower triangular too, as the logits it corrects */
    p->gemm->sgemm_packed(rows, rows, rows, S, ld_s, minus_dc, S + BLOCK, ld_s, 1.0f,
                          LACS_GEMM_A_LOWER | LACS_GEMM_B_LOWER | LACS_GEMM_C_LOWER);
    p->gemm->sgemm_packed(rows, K, rows, S, ld_s, minus_u, Y, K, 1.0f, LACS_GEMM_A_LOWER);
    softmax_step(p, &rule, it->start, i0, rows, i0, rows, S + BLOCK, ld_s, r);
    /* the weights are 0 above the diagonal (j > i): lower triangular */
    p->gemm->sgemm_packed(rows, p->V, rows, S + BLOCK, ld_s,
                          value_tile(p, job->pb->value_tiles, head_in_pass, it->index), r->out, p->V, 1.0f,
                          LACS_GEMM_A_LOWER);
}

/* A fold's carried keys, at its top block's item (the others return): walking down from the
 * top, P = I, then for each block b the keys carried to the top, (P K~_b^T), packed, and P <- P M_b; at the
 * end P is the fold's whole product M_top ... M_bottom, packed at the top block. A sequence's last fold,
 * short, is never an earlier fold of a query block and is not formed. */
static void path_fold_task(void *context, int64_t item, int thread)
{
    const path_job *job = context;
    const problem *p = job->base.p;
    const block_item *it = &job->base.items[item];
    const int64_t fold = job->fold;
    if (fold == 1 || it->block % fold != fold - 1)
        return;
    const int64_t K = p->K, head_in_pass = it->head - job->base.first_head;
    float *P = job->fold_scratch + (size_t)thread * job->fold_floats, *next = P + K * K, *carried = next + K * K;
    for (int64_t r = 0; r < K; r++)
        for (int64_t c = 0; c < K; c++)
            P[r * K + c] = r == c ? 1.0f : 0.0f;
    for (int64_t b = it->block; b > it->block - fold; b--) {
        const int64_t index = it->index - (it->block - b);
        const float *tilde = path_tilde_packed(p, job->pb, head_in_pass, index);
        if (b == it->block) /* P = I */
            memcpy(path_folded_packed(p, job->pb, head_in_pass, index), tilde, key_tile_size(p) * sizeof(float));
        else {
            p->gemm->sgemm_packed(K, BLOCK, K, P, K, tilde, carried, BLOCK, 0.0f, 0);
            p->gemm->pack_b(K, BLOCK, carried, BLOCK, 0, path_folded_packed(p, job->pb, head_in_pass, index));
        }
        p->gemm->sgemm_packed(K, K, K, P, K, path_transport_packed(p, job->pb, head_in_pass, index), next, K, 0.0f, 0);
        float *swap = P;
        P = next;
        next = swap;
    }
    p->gemm->pack_b(K, K, P, K, 0, path_fold_transport_packed(p, job->pb, head_in_pass, it->index));
}

/* One query block (rows i0 .. i0 + rows - 1 of block a, value head hv),
 * over the earlier blocks. l_ij = x_i^(j) . k_j with x_i^(j) = H_{j+1} ...
 * H_i q_i (H_t symmetric), x_i^(j-1) = H_j x_i^(j). With Y the queries
 * carried to the end e of key block b, y_i = x_i^(e), the block's logits are
 * y_i . k~_j (one GEMM with the tile's K~^T), and carrying Y over the block,
 * y_i <- H_b0 ... H_e y_i, is Y <- Y M_b (one more). The diagonal block, by
 * path_block_task: l_ij = q_i.k_j - sum_{t<=i} (q_i.w_t) DC_tj (H12's matrix
 * form within the block), and Y starts as y_i = H_a0 ... H_i q_i = q_i -
 * sum_{t<=i} (q_i.w_t) u_t. Workspace: S [rows x 2 BLOCK] holds Y K~^T;
 * extra holds the next Y [rows x K]. */
static void path_query_task(void *context, int64_t item_index, int thread)
{
    const path_job *job = context;
    const problem *p = job->base.p;
    const block_item *it = &job->base.items[item_index];
    const int64_t hv = it->head, i0 = item_first(it), rows = item_rows(it), K = p->K;
    const int64_t ld_s = 2 * BLOCK, head_in_pass = hv - job->base.first_head;
    running_softmax unused, r;
    float *next_Y;
    float *S = workspace_of(p, job->ws, thread, &unused, &next_Y);
    /* the state after the diagonal block (path_block_task): Y and the running softmax */
    float *Y = path_query_state(p, job->pb, head_in_pass, it->index, &r);
    const logit_rule rule = path_rule(job, hv);

    /* the earlier blocks, walking back: those of the query block's own fold one by one, Y carried over each;
     * then the earlier folds, Y at a fold's top reading its blocks' keys carried there, and carried over the
     * whole fold at once */
    const int64_t earliest = first_key(&rule, it->start, i0);
    const int64_t fold = job->fold, own_bottom = fold > 1 ? it->block / fold * fold : 0; /* fold 1: none */
    for (int64_t b = it->block - 1; b >= 0; b--) {
        const int64_t j0 = it->start + b * BLOCK, index = it->index - (it->block - b);
        if (j0 + BLOCK <= earliest)
            break;
        const int folded = b < own_bottom;
        p->gemm->sgemm_packed(rows, BLOCK, K, Y, K,
                              folded ? path_folded_packed(p, job->pb, head_in_pass, index)
                                     : path_tilde_packed(p, job->pb, head_in_pass, index),
                              S, ld_s, 0.0f, 0);
        softmax_step(p, &rule, it->start, i0, rows, j0, BLOCK, S, ld_s, &r);
        p->gemm->sgemm_packed(rows, p->V, BLOCK, S, ld_s, value_tile(p, job->pb->value_tiles, head_in_pass, index),
                              r.out, p->V, 1.0f, 0);
        /* Y carried over block b (its own fold), or over the fold whose bottom b is (from its top's index) */
        const float *over = !folded ? path_transport_packed(p, job->pb, head_in_pass, index)
                            : b % fold == 0 ? path_fold_transport_packed(p, job->pb, head_in_pass, index + fold - 1)
                                : NULL;
        if (b > 0 && j0 > earliest && over) {
            p->gemm->sgemm_packed(rows, K, K, Y, K, over, next_Y, K, 0.0f, 0);
            float *carried = next_Y;
            next_Y = Y;
            Y = carried;
        }
    }
    write_rows(p, &r, 1, i0, rows, hv, p->o);
}

/* beta >= 0 (PaTH's forward and VJP). */
int lacs_cpu_attention_path_check_beta(const problem *p)
{
    for (int64_t i = 0; i < p->tokens * p->HV; i++)
        if (!(p->beta[i] >= 0.0f))
            return lacs_cpu_error(LACS_ERR_PARAM, p->call->op, "beta[%lld] = %g must be >= 0: as the reference's "
                                                               "matrix form, which absorbs beta as sqrt(beta) w",
                                  (long long)i, (double)p->beta[i]);
    return LACS_OK;
}

int lacs_cpu_attention_path_forward(const problem *pp)
{
    const problem p = *pp;
    const lacs_cpu_call *c = p.call;
    int rc = LACS_OK;
    gates gate = {NULL, NULL};
    /* a pass of value heads at a time (beta, hence the transitions, are per value head) */
    const int64_t pass = heads_per_pass(&p, p.HV), blocks = pass * p.n_blocks;
    const size_t key_tiles = (size_t)blocks * key_tile_size(&p);
    const size_t transports = (size_t)blocks * p.gemm->packed_b_size(p.K, p.K);
    path_blocks pb = {
        .query_states =
            lacs_cpu_scratch_alloc(((size_t)blocks * (size_t)path_query_state_floats(&p) + 1) * sizeof(float)),
        .tilde_packed = lacs_cpu_scratch_alloc((key_tiles + 1) * sizeof(float)),
        .transport_packed = lacs_cpu_scratch_alloc((transports + 1) * sizeof(float)),
        .value_tiles = lacs_cpu_scratch_alloc(((size_t)blocks * value_tile_size(&p) + 1) * sizeof(float)),
        .folded_packed = lacs_cpu_scratch_alloc((key_tiles + 1) * sizeof(float)),
        .fold_transport_packed = lacs_cpu_scratch_alloc((transports + 1) * sizeof(float)),
    };
    const int64_t fold_floats = 2 * p.K * p.K + p.K * BLOCK;
    int64_t fold = LACS_CPU_PATH_FOLD_DEFAULT;
    rc = lacs_cpu_path_fold(&fold);
    float *fold_scratch = lacs_cpu_scratch_alloc((size_t)(fold_floats * p.threads + 1) * sizeof(float));
    workspaces ws = {NULL, 0};
    if (!pb.query_states || !pb.tilde_packed || !pb.transport_packed ||
        !pb.value_tiles || !pb.folded_packed || !pb.fold_transport_packed || !fold_scratch)
        rc = lacs_cpu_error(LACS_ERR_MEMORY, c->op, "out of memory for the blocks' transitions");
    if (rc == LACS_OK && p.g)
        rc = lacs_cpu_attention_gates(&p, p.scale, &gate);
    /* extra: a block's -X, tile, M and packed operands (path_block_floats), or a query block's next Y [BLOCK x K] */
    const int64_t query_floats = round16(BLOCK * p.K);
    if (rc == LACS_OK)
        rc = make_workspaces(&p, path_block_floats(&p) > query_floats ? path_block_floats(&p) : query_floats, &ws);
    for (int64_t hv = 0; hv < p.HV && rc == LACS_OK; hv += pass) {
        const int64_t heads = p.HV - hv < pass ? p.HV - hv : pass;
        path_job job = {{&p, NULL, 0}, &pb, &ws, p.g ? &gate : NULL, fold_scratch, fold_floats, fold};
        rc = make_value_tiles(&p, p.v, hv, heads, pb.value_tiles);
        if (rc == LACS_OK)
            rc = run_blocks(&job.base, hv, heads, path_block_task);
        if (rc == LACS_OK)
            rc = run_blocks(&job.base, hv, heads, path_fold_task);
        if (rc == LACS_OK)
            rc = run_blocks(&job.base, hv, heads, path_query_task);
    }
    lacs_cpu_scratch_free(ws.memory);
    lacs_cpu_scratch_free(pb.query_states);
    lacs_cpu_scratch_free(pb.tilde_packed);
    lacs_cpu_scratch_free(pb.transport_packed);
    lacs_cpu_scratch_free(pb.value_tiles);
    lacs_cpu_scratch_free(pb.folded_packed);
    lacs_cpu_scratch_free(pb.fold_transport_packed);
    lacs_cpu_scratch_free(fold_scratch);
    lacs_cpu_attention_free_gates(&gate);
    return rc;
}

static int path_attn(const lacs_cpu_call *c)
{
    problem p;
    int rc = lacs_cpu_attention_load(c, LACS_READS_W | LACS_READS_BETA, LACS_READS_G, &p);
    if (rc != LACS_OK)
        return rc;
    if ((rc = lacs_cpu_attention_path_check_beta(&p)) == LACS_OK)
        rc = lacs_cpu_attention_path_forward(&p);
    lacs_cpu_attention_free(&p);
    return rc;
}

/* ---- the family ---- */

int lacs_cpu_attention(const lacs_cpu_call *c)
{
    if (strcmp(c->op, "softmax_attn") == 0)
        return softmax_or_fox(c, 0);
    if (strcmp(c->op, "fox") == 0)
        return softmax_or_fox(c, 1);
    if (strcmp(c->op, "deltaformer") == 0)
        return deltaformer(c);
    if (strcmp(c->op, "path_attn") == 0)
        return path_attn(c);
    return LACS_UNSUPPORTED;
}

/* ---- figures for the bench ---- */

/* The dense products of the blocked algorithms above for one head of one
 * sequence of T tokens: per query block, the logits and the weighted values
 * of every key block up to the diagonal (of the diagonal block its lower
 * triangle: the products skip the rest), and for PaTH its transitions'
 * work (path_block_task: the Gram products' lower triangles, the UT solve,
 * K~ and M; path_query_task: the diagonal block's Q W^T (its Q K^T is the
 * logits above) and its -DC and -U products, and Y carried over each block of
 * its own fold and each earlier fold; path_fold_task: the folds' carried
 * keys and products). The triangles are counted as half squares. */
double lacs_cpu_attention_flops(const char *op, int64_t T, int64_t K, int64_t V)
{
    const int path = strcmp(op, "path_attn") == 0;
    if (!path && strcmp(op, "softmax_attn") != 0 && strcmp(op, "fox") != 0)
        return NAN;
    int64_t fold = LACS_CPU_PATH_FOLD_DEFAULT;
    if (path && lacs_cpu_path_fold(&fold) != LACS_OK)
        return NAN;
    double flops = 0;
    for (int64_t a = 0; a * BLOCK < T; a++) {
        const double rows = (double)(T - a * BLOCK < BLOCK ? T - a * BLOCK : BLOCK);
        for (int64_t b = 0; b <= a; b++) {
            const double keys = b < a ? BLOCK : rows / 2; /* the diagonal block's lower triangle */
            flops += 2 * rows * keys * (double)(K + V);
            /* Y carried over each block of the query block's fold, over each earlier fold at once */
            if (path && b > 0 && b < a && (fold == 1 || b >= a / fold * fold || b % fold == 0))
                flops += 2 * rows * (double)K * (double)K;
        }
        if (path && fold > 1 && a % fold == fold - 1) /* path_fold_task: the carried keys and the P's */
            flops += (double)(fold - 1) * 2 * (double)K * (double)K * BLOCK + (double)fold * 2 * (double)K * K * K;
        if (path) {
            flops += 2 * rows * rows * (double)K                  /* [W W^T | W K^T], lower triangles */
                     + rows * rows * (double)K + rows * rows * rows / 3 /* the UT solve: W's columns, DC's */
                     + 2 * (double)K * rows * rows                /* K~ */
                     + 2 * (double)K * (double)K * rows           /* M */
                     + rows * rows * (double)K                    /* the diagonal Q W^T, lower triangle */
                     + rows * rows * rows / 3 + rows * rows * K;  /* its -DC (both triangular) and -U products */
        }
    }
    return flops;
}

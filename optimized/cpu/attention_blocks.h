/* builtin:cpu attention: what the forward (attention.c) and the backward
 * (attention_backward.c) of the attention forms share: the block size, the
 * problem (sizes, inputs as fp32, the row kernels and GEMMs of the ISA), the
 * log gates, and the forward passes the backward runs again. Private to
 * these two files.
 */
#ifndef LACS_CPU_ATTENTION_BLOCKS_H
#define LACS_CPU_ATTENTION_BLOCKS_H

#include <stdint.h>

#include "attention_kernels.h"
#include "cpu.h"

/* Tokens per block, for queries, keys and PaTH's transitions alike. 128
 * rather than 64: the per-row work of the softmax step and PaTH's transport
 * per block (K^2 per query) are spread over twice the keys, and a block of
 * logits (128 x 128 fp32, 64 KiB) and the tiles it reads still stay in L2;
 * measured at T = 4096, K = V = 64 (64: +15 % time, 256: no gain for softmax,
 * +20 % for PaTH). */
#define BLOCK 128

typedef struct {
    lacs_cpu_logits_row_fn logits_row;
    lacs_cpu_exp_row_fn exp_row;
    lacs_cpu_adjoint_row_fn adjoint_row;
    lacs_cpu_transpose_fn transpose;
    lacs_cpu_solve_rows_fn solve_rows;
} row_kernels;

typedef struct {
    const lacs_cpu_call *call;
    int64_t B, T, H, HV, K, V;
    int64_t group;    /* HV / H: value head hv reads q/k/w head hv / group (SPEC 2.2) */
    int64_t tokens;   /* B * T, the flattened token axis */
    int64_t n_seqs;   /* B, or N with cu_seqlens */
    int threads;      /* c->threads, at most the largest number of items of a parallel loop */
    float scale;
    /* inputs as fp32, in their own layouts (q, k, w [tokens, H, K]; v [tokens, HV, V]; beta, g [tokens, HV]) */
    const float *q, *k, *v, *w, *beta, *g, *g_gamma;
    float *owned[7];  /* the fp32 copies made for BF16 inputs */
    float *o;         /* [tokens, HV, V]: the output's (a VJP: the caller's buffer) */
    float *lse;       /* or NULL; else [HV][tokens]: each normalised row's log-sum-exp m + log Z, written
                         with o (the backward's recomputed weights exp(l - lse), FlashAttention-2) */
    /* blocks: sequence n has blocks block_base[n] .. block_base[n + 1] - 1 */
    int64_t *block_base;
    int64_t n_blocks;
    row_kernels kernels;
    const lacs_cpu_gemm *gemm;
} problem;

/* Sizes, checks the dispatcher leaves to the family, inputs as fp32 and the
 * block table. A forward op must be given its output 'o'; a VJP sets p->o. */
int lacs_cpu_attention_load(const lacs_cpu_call *c, unsigned required, unsigned optional, problem *p);
void lacs_cpu_attention_free(problem *p);
/* The input `name` as fp32: in place when F32, else a copy in *owned (give it back with lacs_cpu_scratch_free). NULL
 * when absent. */
const float *lacs_cpu_attention_input(const lacs_cpu_call *c, const char *name, float **owned, int *oom);

/* Per value head and token (layout [HV][tokens]):
 *   bias[t]          G_t, the prefix sum of the log gate since the sequence's
 *                    start or since the last hard reset (the token itself
 *                    included), times `factor` (1 for FoX, where the gate is
 *                    added after the scale; scale for PaTH, before it);
 *   first_visible[t] that reset's token (else the sequence's start): key j is
 *                    visible from query i iff first_visible[i] <= j <= i.
 * Then log Gamma_ij = sum_{tau=j+1..i} g_tau = G_i - G_j for every visible
 * pair, and g_tau = -inf (SPEC 4.10: a hard reset, every earlier key weighted
 * 0) never enters a difference, which -inf - (-inf) would make NaN. ALiBi's
 * constant slope gives G_t = (t - start) g_gamma as one product (the
 * reference's matrix form), g_gamma = -inf a reset at every token. g_0 never
 * enters a difference (tau >= j + 1), so G_start = 0. fp32 sums over the
 * whole sequence, as SPEC 11.1 permits for the attention forms. */
typedef struct {
    float *bias;
    int64_t *first_visible;
} gates;

int lacs_cpu_attention_gates(const problem *p, float factor, gates *out);
void lacs_cpu_attention_free_gates(gates *g);

/* The forward passes, on a loaded problem, into `dest` (and p->lse when set):
 * causal attention of q over k with `values` (softmax, or DeltaFormer's EXP
 * form when !normalised); DeltaFormer's two stages (u [tokens, HV, V] kept,
 * and where asked the first stage's row log-sum-exps lse_b [HV][tokens] and
 * r_i = sum_{j<i} B_ij u_j [tokens, HV, V]);
 * PaTH (p->o). */
int lacs_cpu_attention_attend(const problem *p, const float *values, const gates *gate, int normalised, float *dest);
int lacs_cpu_attention_deltaformer_forward(const problem *p, int form, float *u, float *lse_b, float *r);
int lacs_cpu_attention_path_forward(const problem *p);
/* PaTH's beta >= 0 (as the reference's matrix form, which absorbs beta as sqrt(beta) w). */
int lacs_cpu_attention_path_check_beta(const problem *p);

#endif

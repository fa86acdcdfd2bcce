/* builtin:cpu, the recurrent family (README.md section 2): what recurrent.c
 * (the op: parameters, sequences, threads, workspaces) shares with the
 * kernels of recurrent_kernels.h (the chunk algorithm and the recurrent step,
 * written once over a primitive layer and built per instruction set:
 * recurrent_avx512.c, recurrent_avx2.c, recurrent_scalar.c).
 */
#ifndef LACS_CPU_RECURRENT_H
#define LACS_CPU_RECURRENT_H

#include <stdint.h>

#include "cpu.h"

typedef enum { STEP_NONE = 0, STEP_BETA = 1, STEP_EFLA = 2 } lacs_cpu_step_kind;
typedef enum { GATE_NONE = 0, GATE_CONSTANT = 1, GATE_SCALAR = 2, GATE_CHANNEL = 3 } lacs_cpu_gate_kind;

typedef struct {
    const lacs_cpu_call *call;
    int64_t B, T, H, HV, K, V, n_seqs;
    lacs_cpu_step_kind step;   /* beta (delta rule, gated, Comba), EFLA's c_t, or none (linear family) */
    lacs_cpu_gate_kind gate;
    int comba;                 /* the correction reads the un-decayed state (H8 second form) */
    int postnorm;              /* H3: RMSNorm of each output row */
    int bf16_products;         /* the bf16 tier with bf16 operands in the products (AVX512-BF16) */
    int stream_outputs;        /* o formed in the workspace and written with non-temporal stores (recurrent.c) */
    double scale, eps;
    const lacs_tensor *q, *k, *v, *beta, *g, *h0;
    lacs_tensor *o, *ht;
} lacs_cpu_recurrent_op;

/* One thread's workspace: O(C (K + V) + C^2 + LACS_CPU_HEAD_GROUP K V) floats
 * (C = LACS_CPU_CHUNK), nothing that grows with T. */
typedef struct {
    float *S;                  /* K x V: the state of the head the chunk computes (one of `states`), packed: the
                                * GEMM table's layout, panels of nr columns */
    float *states;             /* LACS_CPU_HEAD_GROUP states of state_floats each: the states of a task's heads */
    int64_t state_floats;      /* the floats of one state: K V, or the GEMM table's packed_b_size(K, V) */
    float *Vp_packed;          /* C x V: V' packed (the GEMM table's pack_b) for its two products */
    float *kq;                 /* 2C x K: the chunk's rows of k (rows 0 .. n-1), then of q (n .. 2n-1) */
    float *v;                  /* C x V: the chunk's rows of v */
    float *G, *Gr;             /* C x Kg (Kg = K per channel, else 1): inclusive log-decay sums, the rows' Gr */
    float *b;                  /* C: step sizes */
    float *D;                  /* C x C: exp(G_i - G_j), j <= i (scalar decay) */
    float *A, *P, *Tinv;       /* C x C: the correction's strictly lower A, the outputs' P, (I + A)^-1 */
    float *KQd;                /* 2C x K: b exp(Gr) (.) k, then scale exp(G) (.) q */
    float *R;                  /* 2C x V: Kd S, then Qd S + P V' (the outputs) */
    float *U, *Vp;             /* b v - Kd S (packed: the GEMM table's layout; C x V for the bf16 products),
                                * then V' = (I + A)^-1 U (C x V, the bf16 products') */
    float *Kl, *KlT;           /* C x K: exp(G_last - G_j) (.) k_j; its transpose, K x C */
    float *KQK;                /* 2C x C: K K^T, then Q K^T */
    float *KT_packed;          /* k^T [K x C] packed (the GEMM table's pack_b) for K K^T and Q K^T */
    uint16_t *a16, *k16, *s16, *b16; /* bf16 operands: a left operand; K^T, S and a right operand packed (s16:
                                      * the chunk's head's, one of states16) */
    uint16_t *states16;        /* LACS_CPU_HEAD_GROUP of state16_elems each: the task's heads' S rounded and packed
                                * by the update that wrote S (the bf16 products), after `states` in its buffer */
    int64_t state16_elems;     /* K rounded up to even, times V */
    int s16_current;           /* s16 is S rounded (written by the head's last update); 0: a sequence's first chunk */
    uint16_t *kq16, *kqd16;    /* 2C x K bf16: the chunk's rows of k then q, and [Kd; Qd], rounded */
    uint16_t *p16;             /* C x C bf16: P rounded (scalar decay or none) */
} lacs_cpu_recurrent_workspace;

/* For the GEMM table `gemm` (whose layout the states take). */
int lacs_cpu_recurrent_workspace_alloc(lacs_cpu_recurrent_workspace *w, int64_t K, int64_t V,
                                       const lacs_cpu_gemm *gemm);
void lacs_cpu_recurrent_workspace_free(lacs_cpu_recurrent_workspace *w);

/* The floats of the recurrent step's scratch: k, q, e (.) q, e (.) k and e [K each]; v and the output [V each]. */
#define LACS_CPU_TOKEN_SCRATCH(K, V) (5 * (K) + 2 * (V))

/* Heads per task at most (recurrent.c): a task walks its sequence chunk by
 * chunk and, within a chunk, head by head, so that the rows it reads and
 * writes next lie next to those it just did (README.md section 2). */
#define LACS_CPU_HEAD_GROUP 8

/* The chunk a task computes after this one (fetched ahead): n tokens from t0
 * (flattened) of value head hv; n = 0: none. */
typedef struct {
    int64_t t0, n, hv;
} lacs_cpu_chunk_ahead;

/* The kernels of one instruction set. */
typedef struct {
    const char *isa;
    /* The chunk of n tokens t0 .. t0 + n - 1 (flattened axis) of value head
     * hv, from the state w->S, which it updates; writes the chunk's outputs.
     * `ahead`: the chunk computed next, whose rows it may fetch ahead
     * (n = 0: none, the task's last chunk, which fences the task's
     * non-temporal stores of o). */
    void (*chunk)(const lacs_cpu_recurrent_op *r, lacs_cpu_recurrent_workspace *w, int64_t t0, int64_t n,
                  int64_t hv, const lacs_cpu_chunk_ahead *ahead);
    /* The recurrent step for a sequence of one token t (value head hv,
     * sequence seq): reads the state from h0 (zeros without it), writes the
     * output and, when asked for, ht. `scratch`: LACS_CPU_TOKEN_SCRATCH(K, V)
     * floats (the token's rows and gates; the state itself is read from h0
     * and written to ht directly, no copy). */
    void (*token)(const lacs_cpu_recurrent_op *r, float *scratch, int64_t t, int64_t hv, int64_t seq);
} lacs_cpu_recurrent_kernels;

extern const lacs_cpu_recurrent_kernels lacs_cpu_recurrent_kernels_scalar;
extern const lacs_cpu_recurrent_kernels lacs_cpu_recurrent_kernels_avx2;
extern const lacs_cpu_recurrent_kernels lacs_cpu_recurrent_kernels_avx512;

#endif

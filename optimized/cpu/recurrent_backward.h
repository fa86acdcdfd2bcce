/* builtin:cpu, the gradients of the recurrent family (SPEC.md 4.19, README.md
 * section 9): what recurrent_backward.c (the op: parameters, sequences,
 * checkpoints, threads) shares with the kernels of
 * recurrent_backward_kernels.h (the forward over a chunk and its adjoint,
 * written once over a primitive layer and built per instruction set:
 * recurrent_backward_avx512.c, recurrent_backward_avx2.c,
 * recurrent_backward_scalar.c).
 */
#ifndef LACS_CPU_RECURRENT_BACKWARD_H
#define LACS_CPU_RECURRENT_BACKWARD_H

#include <stdint.h>

#include "cpu.h"

/* The update of one token (SPEC.md 4.19's table), with h' = D_t h_{t-1}:
 *   LINEAR  h_t = h' + k v^T                                  (linear_attn, retention, simple_gla, gla)
 *   DELTA   h_t = h' + k u^T, u = c (v - h'^T k)              (delta_rule, gated_delta_rule, efla)
 *   COMBA   h_t = h' + k u^T, u = c (v - h_{t-1}^T k)         (comba: the correction reads the un-decayed state) */
/* Tokens per chunk of the backward: C + 1 states of K x V floats (594 KiB at K = V = 128, C = 8) stay in a
 * 1 MiB L2 while the chunk's adjoint reads them. */
#define LACS_CPU_BACKWARD_CHUNK 8

typedef enum { BACKWARD_LINEAR = 0, BACKWARD_DELTA = 1, BACKWARD_COMBA = 2 } lacs_cpu_backward_update;

/* One token of one (sequence, value head), its rows widened to fp32. */
typedef struct {
    const float *q, *k, *v, *dout; /* [K], [K], [V], [V] */
    const float *decay;            /* [K]: exp(g) of each state row (every row the same for a scalar gate); NULL: none */
    float coef;                    /* c: beta, EFLA's coefficient (E5), 1 for LINEAR */
} lacs_cpu_backward_token;

/* The chunked backward (scalar decays or none; README.md section 9): the chunk's sizes and settings. */
#define LACS_CPU_BACKWARD_PRODUCT_CHUNK LACS_CPU_CHUNK /* tokens per chunk: the forward's chunk */
/* The chunk states a thread of the chunked backward keeps at most before it checkpoints (8 MiB: a sequence of
 * 4096 tokens at K = V = 128 walked once, recurrent_backward.c's product_segment_chunks); the environment's
 * LACS_CPU_BACKWARD_STATE_MIB (MiB, 0 to checkpoint every sequence, as make test-cpu runs the gradients once
 * more) in its place, read by lacs_cpu_backward_state_bytes (dispatch.c: an error names a bad value). */
#define LACS_CPU_BACKWARD_STATE_BYTES ((size_t)8 << 20)
int lacs_cpu_backward_state_bytes(size_t *bytes);

typedef struct {
    lacs_cpu_backward_update update;
    int decays;     /* 0: no decay (every e^{G} is 1) */
    int64_t K, V;
    float scale;
    const lacs_cpu_gemm *gemm; /* the products */
} lacs_cpu_chunk_settings;

/* One thread's workspace for a chunk of n <= C = LACS_CPU_BACKWARD_PRODUCT_CHUNK tokens: the first n rows of
 * each buffer (a stacked pair's second half n rows on), n columns of the transposed ones. The caller loads the
 * rows marked `in`; the kernels leave the chunk's gradients in those marked `out`. */
typedef struct {
    float *qk;                  /* in: 2C x K, q's rows (adjoint only), then k's */
    float *v;                   /* in: C x V */
    float *dOdR;                /* in: 2C x V, do's rows (adjoint only); then dR = c (.) Y's */
    float *G, *E, *c;           /* in: C each: G_t the inclusive binary32 sum of the chunk's log decays to t, E_t the
                                   decay the correction reads (G_t; Comba G_{t-1}, 0 for t = 0), the step c_t */
    float *dq, *dk;             /* out: C x K each (dk without EFLA's term through |k|^2) */
    float *dv;                  /* out: set to the chunk's C x V rows of dv, in one of the kernels' buffers */
    float *dc, *dg;             /* out: C each: the gradients of c_t and of the log decay g_t */
    float *kT, *R, *cR, *U, *dU, *Y, *UT, *dOdRT, *nKp, *Kn, *KnT, *QpKp, *QpKpT, *XT, *X, *ZT, *Z, *QKK, *D, *L,
        *Tinv, *TinvT, *P, *PT, *Pd, *dP, *YU, *A2, *eq, *ek, *column; /* the kernels' own */
} lacs_cpu_chunk_workspace;

/* Floats of workspace lacs_cpu_chunk_workspace needs at K, V, and its buffers cut from `memory` (64-byte
 * aligned, that many floats): recurrent_backward.c. */
size_t lacs_cpu_chunk_workspace_floats(int64_t K, int64_t V);
void lacs_cpu_chunk_workspace_cut(lacs_cpu_chunk_workspace *w, int64_t K, int64_t V, float *memory);

/* The kernels of one instruction set. States are K x V row-major fp32; x[i] is token i of a run of n. */
typedef struct {
    const char *isa;
    /* The forward over n tokens from states[0]: with stride > 0, states[i + 1] = states + (i + 1) stride
     * receives the state after token i; with stride 0, states[0] is advanced in place. e[i * V ..] (n x V)
     * receives v_i - p_i, the correction's error (DELTA, COMBA; workspace for LINEAR). One sweep down the
     * rows per token (and one before the first, for its p): each sweep writes h_i and accumulates the
     * next token's p. */
    void (*forward)(lacs_cpu_backward_update update, int64_t K, int64_t V, float *states, int64_t stride,
                    int64_t n, const lacs_cpu_backward_token *x, float *e);
    /* The adjoint of n tokens (SPEC.md 4.19's table), states[i] = h_{i-1} (i = 0 .. n, stride apart), e the
     * forward's errors; dh [K x V] is the cotangent of h_{n-1} on entry and of the state before token 0 on
     * return. Writes per token i: dq[i K ..], dk[i K ..], dv[i V ..], dlog[i K ..] (the gradient of the log
     * decay of each row; only with a decay) and dcoef[i] (the gradient of c; DELTA, COMBA). du, u, dp: V
     * floats of workspace each. One sweep down the rows per token (and one before the last, for its
     * readout): token i's update's adjoint fused with token i - 1's readout's. */
    void (*backward)(lacs_cpu_backward_update update, int64_t K, int64_t V, float scale, const float *states,
                     int64_t stride, int64_t n, const float *e, const lacs_cpu_backward_token *x, float *dh,
                     float *dq, float *dk, float *dv, float *dlog, float *dcoef, float *du, float *u, float *dp);
    /* The chunked backward's two kernels (README.md section 9), the chunk's rows loaded into w: advance
     * S [K x V] in place over the chunk, S' = e^{G_last} S + Kn^T U; and the chunk's adjoint from its first state
     * S, dS [K x V] the cotangent of its last on entry and of S on return, its gradients into w. */
    void (*chunk_advance)(const lacs_cpu_chunk_settings *s, lacs_cpu_chunk_workspace *w, int64_t n, float *S);
    void (*chunk_adjoint)(const lacs_cpu_chunk_settings *s, lacs_cpu_chunk_workspace *w, int64_t n, const float *S,
                          float *dS);
} lacs_cpu_backward_kernels;

extern const lacs_cpu_backward_kernels lacs_cpu_backward_kernels_scalar;
extern const lacs_cpu_backward_kernels lacs_cpu_backward_kernels_avx2;
extern const lacs_cpu_backward_kernels lacs_cpu_backward_kernels_avx512;

/* recurrent_backward.c: the VJP ops of the recurrent family (called by lacs_cpu_run after validation). */
int lacs_cpu_recurrent_backward(const lacs_cpu_call *c);
/* Whether builtin:cpu implements the VJP op `op` (dispatch.c's declaration). */
int lacs_cpu_recurrent_backward_implements(const char *op);

#endif

/* builtin:cpu, the gradients of the recurrent family (SPEC.md 4.19, README.md
 * section 9): what recurrent_backward.c (the op: parameters, sequences,
 * checkpoints, the chunks' rows and gradients, threads) shares with the
 * kernels of recurrent_backward_kernels.h (a chunk's advance and its
 * adjoint, written once over a primitive layer and built per instruction
 * set: recurrent_backward_avx512.c, recurrent_backward_avx2.c,
 * recurrent_backward_scalar.c).
 */
#ifndef LACS_CPU_RECURRENT_BACKWARD_H
#define LACS_CPU_RECURRENT_BACKWARD_H

#include <stdint.h>

#include "cpu.h"

typedef enum { BACKWARD_LINEAR = 0, BACKWARD_DELTA = 1, BACKWARD_COMBA = 2 } lacs_cpu_backward_update;

/* The update of one token (SPEC.md 4.19's table), with h' = D_t h_{t-1}:
 *   LINEAR  h_t = h' + k v^T                                  (linear_attn, retention, simple_gla, gla)
 *   DELTA   h_t = h' + k u^T, u = c (v - h'^T k)              (delta_rule, gated_delta_rule, efla)
 *   COMBA   h_t = h' + k u^T, u = c (v - h_{t-1}^T k)         (comba: the correction reads the un-decayed state)
 * by chunks (README.md section 9): the chunk's sizes and settings. */
#define LACS_CPU_BACKWARD_CHUNK LACS_CPU_CHUNK /* tokens per chunk: the forward's chunk */
/* The chunk states a thread of the chunked backward keeps at most before it checkpoints (8 MiB: a sequence of
 * 4096 tokens at K = V = 128 walked once, recurrent_backward.c's segment_chunks); the environment's
 * LACS_CPU_BACKWARD_STATE_MIB (MiB, 0 to checkpoint every sequence, as make test-cpu runs the gradients once
 * more) in its place, read by lacs_cpu_backward_state_bytes (dispatch.c: an error names a bad value). */
#define LACS_CPU_BACKWARD_STATE_BYTES ((size_t)8 << 20)
int lacs_cpu_backward_state_bytes(size_t *bytes);

typedef struct {
    lacs_cpu_backward_update update;
    int decays;     /* 0: no decay (every e^{G} is 1) */
    int channel;    /* 1: a decay per key channel (KDA's gk, GLA): G, E, dg are C x K */
    int64_t K, V;
    float scale;
    const lacs_cpu_gemm *gemm; /* the products */
} lacs_cpu_chunk_settings;

/* One thread's workspace for a chunk of n <= C = LACS_CPU_BACKWARD_CHUNK tokens: the first n rows of
 * each buffer (a stacked pair's second half n rows on), n columns of the transposed ones. The caller loads the
 * rows marked `in`; the kernels leave the chunk's gradients in those marked `out`. */
typedef struct {
    float *qk;                  /* in: 2C x K, q's rows (adjoint only), then k's */
    float *v;                   /* in: C x V */
    float *dOdR;                /* in: 2C x V, do's rows (adjoint only); then dR = c (.) Y's */
    float *G, *E, *c;           /* in: C (C x K per channel) each: G_t the inclusive binary32 sum of the chunk's log
                                   decays to t, E_t the decay the correction reads (G_t; Comba G_{t-1}, 0 for
                                   t = 0); C: the step c_t */
    float *dq, *dk;             /* out: C x K each (dk without EFLA's term through |k|^2) */
    float *dv;                  /* out: set to the chunk's C x V rows of dv, in one of the kernels' buffers */
    float *dc, *dg;             /* out: C, C (C x K per channel): the gradients of c_t and of the log decay g_t */
    float *kT, *R, *cR, *U, *dU, *Y, *UT, *dOdRT, *nKp, *Kn, *KnT, *QpKp, *QpKpT, *XT, *X, *ZT, *Z, *QKK, *D, *L,
        *Tinv, *TinvT, *P, *PT, *Pd, *dP, *YU, *A2, *eq, *ek, *column; /* the kernels' own */
    float *eE, *eGs, *eGl, *gl, *rows, *cols; /* the kernels' own, per channel: C x K each but gl (K) */
    float *exps_P, *exps_L; /* per channel: P's and L's terms' exps, C (C + 1) / 2 x K each (NULL otherwise) */
} lacs_cpu_chunk_workspace;

/* Floats of workspace lacs_cpu_chunk_workspace needs at K, V (`channel`: with per-channel decays), and its
 * buffers cut from `memory` (64-byte aligned, that many floats): recurrent_backward.c. */
size_t lacs_cpu_chunk_workspace_floats(int64_t K, int64_t V, int channel);
void lacs_cpu_chunk_workspace_cut(lacs_cpu_chunk_workspace *w, int64_t K, int64_t V, int channel, float *memory);

/* The kernels of one instruction set; states are K x V row-major fp32. */
typedef struct {
    const char *isa;
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

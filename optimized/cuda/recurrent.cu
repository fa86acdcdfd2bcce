/* builtin:cuda, the recurrent family (optimized/cuda/README.md section 2): linear_attn
 * (H2), linear_attn_postnorm (H3), retention, simple_gla, gla (H4),
 * delta_rule (H6), gated_delta_rule with g or gk (H8 first form, KDA), comba
 * (H8 second form) and efla (E5), by the chunkwise WY/UT algorithm (H7 per
 * chunk, H9 within it) on tensor cores, with a fused recurrent kernel for
 * decoding.
 *
 * A sequence is cut into chunks of C = 64 tokens (the last may be shorter).
 * In a chunk of n tokens entering with the state S [K x V], with G_i the fp32
 * sum of the log decays of tokens 0..i of the chunk (per key channel c:
 * G_ic; 0 without decay), Gr_i = G_i (Gr_i = G_{i-1}, 0 at i = 0, for Comba,
 * whose correction reads the un-decayed state) and b_i the step size (beta;
 * EFLA's c_i = -expm1(-beta |k_i|^2) / |k_i|^2; none for the linear family):
 *
 *   A_ij  = b_i sum_c k_ic k_jc exp(Gr_ic - G_jc)      j < i, else 0
 *   T     = (I + A)^{-1}                               blocked forward substitution
 *   -W    = T (-b exp(Gr) (.) K),  U = T (b (.) V)      the WY/UT form (H7)
 *   V'    = U + (-W) S                                 (V itself for the linear family)
 *   O     = scale (exp(G) (.) Q) S + P V',             P_ij = scale sum_c q_ic k_jc exp(G_ic - G_jc), j <= i
 *   S    <- exp(G_last) (.) S + (exp(G_last - G) (.) K)^T V'
 *
 * (optimized/cpu/recurrent.c is the same algorithm.) exp is taken only of
 * differences G_i - G_j (i >= j), Gr_i - G_j (j < i), G_i and G_last - G_i,
 * all <= 0 for gates <= 0: nothing overflows however strong the decay.
 *
 * The per-channel gate (gla, gated_delta_rule with gk). A and P are no longer
 * K K^T and Q K^T scaled entry by entry; they are built by sub-chunks of 16
 * rows. A block of rows bi >= 1 against the columns before it, j < 16 bi,
 * factors through the reference point r = 16 bi - 1 (the last row before
 * the block): exp(Gx_ic - G_jc) = exp(Gx_ic - G_rc) exp(G_rc - G_jc), both
 * factors <= 1 (i > r >= j), so it is one product on the tensor cores of the
 * decayed rows (x_i exp(Gx_i - G_r)) and the decayed keys (k_j exp(G_r -
 * G_j)), as fla's chunk_kda does with a sub-chunk's reference point. The four
 * diagonal 16 x 16 blocks are summed term by term in fp32 (there no
 * reference point keeps both factors <= 1).
 *
 * Three kernels, as fla's chunk_gated_delta_rule is built, so that only the
 * state's recurrence is sequential:
 *   1. prepare_kernel, one block per (chunk, value head), all in parallel:
 *      G, A, T, -W and U, and the keys decayed to the chunk's end, Kdec =
 *      exp(G_last - G) (.) K, into a device workspace;
 *   2. state_kernel, one block per (sequence, value head, slice of BV = 32
 *      or 16 value columns), walking the sequence's chunks in order with its
 *      K x BV slice of S in shared memory, in fp32: it stores the state each
 *      chunk starts from, forms V' = U + (-W) S and updates S. While one
 *      chunk's products run, the next chunk's -W, Kdec and U are already
 *      being loaded into registers (16 bytes per load), and written to shared
 *      memory once the products are done: the sequential walk waits on
 *      memory once, not at every chunk. At the end, ht;
 *   3. output_kernel, one block per (chunk, value head, slice of up to 64
 *      value columns), all in parallel: O = scale (exp(G) (.) Q) S + P V'.
 * Then, for linear_attn_postnorm, postnorm_kernel normalises each row of o
 * (H3), in double as builtin:cpu.
 *
 * T = (I + A)^{-1}: the four diagonal 16 x 16 blocks by forward substitution,
 * one thread per column, in registers; then block row by block row,
 * T_bi,bj = -D_bi sum_{bj <= k < bi} A_bi,k T_k,bj, two fp32 products each.
 *
 * Products: every one a lacs_block_gemm on shared memory. In the bf16 tier
 * the operands are rounded to bf16 where they are handed to a product (the
 * keys and queries as given, the decayed operands of A and P, b V, T, -W,
 * Kdec, S, V', P) and the tensor cores accumulate in fp32 (WMMA 16 x 16 x 16);
 * the state, U, T's solve, the outputs and every exp stay fp32 (SPEC.md 11.1):
 * the roundings builtin:cpu makes. In the fp32 tier everything is fp32 on the
 * CUDA cores. Shapes are padded with zeros (K to Kp, a multiple of 16; V to
 * Vp, of 32 or 64; rows n..C-1 of a short chunk are zero keys with b = 0):
 * padded rows and columns stay zero through every step.
 *
 * The workspace holds, per (chunk, value head): G [C x Kg] (Kg = Kp for gk,
 * else 1), -W [C x Kp], U [C x Vp] (fp32; v itself for the linear family),
 * Kdec [C x Kp], V' [C x Vp] and the chunk's starting state [Kp x Vp]:
 * O(T (K + V) + (T / C) K V) per head, as fla's.
 *
 * Decoding (decode_kernel). When every sequence is one token long, the
 * recurrence itself (H2-H8, E5 as the reference orders it: decay, correct,
 * write, read; Comba corrects before the decay), fused: a block holds 32
 * value columns, and each of its 8 warps 1/8 of the state's rows in
 * registers, read once from h0 and written once to ht; the column sums
 * (h^T k, h^T q) are added across the warps in shared memory in warp order.
 * The kernel is memory-bound, as decoding is.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

const int chunk_size = 64;    /* C */
const int sub_chunk = 16;     /* the per-channel gate's blocks of A and P */
const int block_threads = 256;
const int max_slice = 64;     /* value columns per block of the output kernel, at most */
const int max_padded_k = 256;
const int prefetch_slots = 20; /* 16-byte loads in flight per thread in the state kernel */
const int decode_groups = 8;  /* warps of the decode kernel, each 1/8 of the state's rows */

enum step_kind { STEP_NONE = 0, STEP_BETA = 1, STEP_EFLA = 2 };
enum gate_kind { GATE_NONE = 0, GATE_CONSTANT = 1, GATE_SCALAR = 2, GATE_CHANNEL = 3 };

/* A chunk: its first token (flattened over B x T, or the packed row with
 * cu_seqlens) and its length. */
struct chunk_entry {
    int64_t t0;
    int n;
};

/* What every kernel needs, passed by value. Token t of q/k head h: ((t H + h)
 * K + c); of value head hv: ((t HV + hv) V + j); beta and g: t HV + hv; gk:
 * (t HV + hv) K + c; g_gamma: hv; the state of sequence s: ((s HV + hv) K +
 * c) V + j. Workspace entry (chunk ci, value head hv): index ci HV + hv. */
struct recurrent_params {
    lacs_view q, k, v, beta, g, h0; /* g: the gate input, g, gk or g_gamma */
    float *o, *ht;                  /* ht: NULL when not asked for */
    const int64_t *cu_seqlens;      /* device; NULL: sequence s is tokens s T .. s T + T - 1 */
    int64_t T;
    int H, HV, K, V, Kp, Vp, Kg;    /* Kg: gate columns per row of G (Kp for gk, else 1) */
    int step, gate, comba;
    float scale;
    int state_bv, output_bv;        /* value columns per block of the state and output kernels */
    int state_buffers;              /* the state kernel's operand buffers (2: double-buffered) */
    /* the chunks and the workspace */
    const chunk_entry *chunks;
    const int *seq_first_chunk;     /* [n_seqs + 1]: sequence s has chunks first[s] .. first[s + 1] - 1 */
    float *G;                       /* [chunks x HV][C x Kg] */
    void *minus_W;                  /* [chunks x HV][C x Kp], operands */
    float *U;                       /* [chunks x HV][C x Vp] */
    void *Kdec;                     /* [chunks x HV][C x Kp], operands */
    void *V_new;                    /* [chunks x HV][C x Vp], operands */
    void *S_chunk;                  /* [chunks x HV][Kp x Vp], operands: the state each chunk starts from */
};

__host__ __device__ inline size_t round_128(size_t bytes) { return (bytes + 127) / 128 * 128; }

/* The log decay of token t (flattened), value head hv, key channel c. */
__device__ __forceinline__ float gate_value(const recurrent_params &p, int64_t t, int hv, int c)
{
    switch (p.gate) {
    case GATE_CONSTANT:
        return lacs_view_at(p.g, hv);
    case GATE_SCALAR:
        return lacs_view_at(p.g, t * p.HV + hv);
    case GATE_CHANNEL:
        return lacs_view_at(p.g, (t * p.HV + hv) * p.K + c);
    default:
        return 0.0f;
    }
}

/* b_t: beta, or EFLA's c = -expm1(-beta |k|^2) / |k|^2 (E5; beta in the limit
 * |k| -> 0; expm1: no cancellation when beta |k|^2 is small), from |k|^2. */
__device__ __forceinline__ float step_from(const recurrent_params &p, float beta, float knorm2)
{
    if (p.step == STEP_BETA)
        return beta;
    return knorm2 == 0.0f ? beta : -expm1f(-beta * knorm2) / knorm2;
}

/* ---- the per-channel gate's intra-chunk matrices ---- */

/* M[i][j] (fp32, ld C) for the blocks below the diagonal: i in sub-chunk
 * bi = 1..3, j < 16 bi, as the product of the decayed rows X_i exp(Gx_i -
 * G_r) and the decayed keys K_j exp(G_r - G_j), r = 16 bi - 1. Gx_i =
 * G_{i - shift} (shift 1: Comba's Gr, with G_{-1} = 0). L [16 x Kp] and R
 * [48 x Kp] are scratch. Every thread calls it, after a barrier; it ends with
 * one. */
template <typename Op>
__device__ void channel_below_diagonal(const Op *X, const Op *Kop, const float *G, int Kp, int shift, Op *L, Op *R,
                                       float *M)
{
    const int C = chunk_size, tid = (int)threadIdx.x, threads = (int)blockDim.x;
    for (int bi = 1; bi < C / sub_chunk; bi++) {
        const int r = sub_chunk * bi - 1, cols = sub_chunk * bi;
        for (int idx = tid; idx < sub_chunk * Kp; idx += threads) {
            const int i = cols + idx / Kp, c = idx % Kp;
            const float gx = i - shift >= 0 ? G[(i - shift) * Kp + c] : 0.0f;
            lacs_store_operand(&L[idx], lacs_operand_value(X[i * Kp + c]) * expf(gx - G[r * Kp + c]));
        }
        for (int idx = tid; idx < cols * Kp; idx += threads) {
            const int j = idx / Kp, c = idx % Kp;
            lacs_store_operand(&R[idx], lacs_operand_value(Kop[j * Kp + c]) * expf(G[r * Kp + c] - G[j * Kp + c]));
        }
        __syncthreads();
        lacs_block_gemm<false, true>(L, Kp, R, Kp, M + (size_t)cols * C, C, sub_chunk, cols, Kp, false);
        __syncthreads();
    }
}

/* The diagonal blocks' entries: sum_c x_ic k_jc exp(Gx_ic - G_jc) for i, j in
 * the same sub-chunk with j < i (strict) or j <= i, in fp32, in c order. */
template <typename Op>
__device__ void channel_diagonal(const Op *X, const Op *Kop, const float *G, int Kp, int shift, bool strict, float *M)
{
    const int C = chunk_size;
    for (int idx = (int)threadIdx.x; idx < C * sub_chunk; idx += (int)blockDim.x) {
        const int i = idx / sub_chunk, j = i / sub_chunk * sub_chunk + idx % sub_chunk;
        if (j > i || (strict && j == i))
            continue;
        float sum = 0.0f;
        for (int c = 0; c < Kp; c++) {
            const float gx = i - shift >= 0 ? G[(i - shift) * Kp + c] : 0.0f;
            sum += lacs_operand_value(X[i * Kp + c]) * lacs_operand_value(Kop[j * Kp + c]) * expf(gx - G[j * Kp + c]);
        }
        M[i * C + j] = sum;
    }
}

/* ---- T = (I + A)^{-1}, from nA = -A (strictly lower, fp32, ld C) ----
 * The diagonal blocks D_b = (I + A_bb)^{-1} by forward substitution, thread
 * (b, c) solving column c of block b in registers (16 rows; no barrier
 * inside); then block row bi = 1..3: X = nA[bi, 0:16bi] T[0:16bi, 0:16bi]
 * and T[bi, 0:16bi] = D_bi X, so that T_bi,bj = -D_bi sum_k A_bi,k T_k,bj.
 * X: scratch [16 x 48] fp32. Every thread calls it, after a barrier; it ends
 * with one. */
__device__ void unit_lower_inverse(const float *nA, float *T, float *X)
{
    const int C = chunk_size, tid = (int)threadIdx.x;
    for (int idx = tid; idx < C * C; idx += (int)blockDim.x)
        if ((idx % C) / sub_chunk > (idx / C) / sub_chunk)
            T[idx] = 0.0f; /* the blocks above the diagonal */
    if (tid < C) {
        const int base = tid / sub_chunk * sub_chunk, c = tid % sub_chunk;
        float t[sub_chunk];
        LACS_UNROLL
        for (int i = 0; i < sub_chunk; i++) {
            float s = i == c ? 1.0f : 0.0f;
            LACS_UNROLL
            for (int j = 0; j < i; j++)
                s = fmaf(nA[(base + i) * C + base + j], t[j], s); /* t_j = 0 for j < c */
            t[i] = s;
        }
        LACS_UNROLL
        for (int i = 0; i < sub_chunk; i++)
            T[(base + i) * C + base + c] = t[i];
    }
    __syncthreads();
    for (int bi = 1; bi < C / sub_chunk; bi++) {
        const int r0 = sub_chunk * bi;
        lacs_block_gemm<false, false>(nA + (size_t)r0 * C, C, T, C, X, 48, sub_chunk, r0, r0, false);
        __syncthreads();
        lacs_block_gemm<false, false>(T + (size_t)r0 * C + r0, C, X, 48, T + (size_t)r0 * C, C, sub_chunk, r0,
                                      sub_chunk, false);
        __syncthreads();
    }
}

/* ---- 1. prepare: G, A, T, -W, U and Kdec for one (chunk, value head) ---- */

/* Columns of -W and U formed at a time: 128 for the bf16 tier's scalar gates
 * (two blocks still fit an SM), else 64. */
__host__ __device__ inline int rhs_slice_for(size_t op_bytes, bool channel)
{
    return op_bytes == 2 && !channel ? 128 : 64;
}

struct prepare_layout {
    size_t Kop, G, b, row_exp, last_exp, nA, T, Top, L, R, X, rhs, result, total;
};

__host__ __device__ inline prepare_layout prepare_layout_for(int Kp, int Kg, size_t op_bytes, bool step, bool channel)
{
    const size_t C = chunk_size, rhs_slice = rhs_slice_for(op_bytes, channel);
    prepare_layout l = {};
    size_t at = 0;
    l.Kop = at, at += round_128(C * Kp * op_bytes);
    l.G = at, at += round_128(C * Kg * 4);
    l.b = at, at += round_128(C * 4);
    l.row_exp = at, at += round_128(C * 4);
    l.last_exp = at, at += round_128(C * 4);
    if (step) {
        l.nA = at, at += round_128(C * C * 4);
        l.T = at, at += round_128(C * C * 4);
        l.Top = at, at += round_128(C * C * op_bytes);
    }
    /* scratch, used in turn: A's decayed operands; T's solve; the slices of -W and U */
    const size_t scratch = at;
    size_t end = scratch;
    if (step && channel) {
        l.L = scratch;
        l.R = l.L + round_128(sub_chunk * Kp * op_bytes);
        end = l.R + round_128(3 * sub_chunk * Kp * op_bytes);
    }
    l.X = scratch;
    end = end > l.X + round_128(sub_chunk * 48 * 4) ? end : l.X + round_128(sub_chunk * 48 * 4);
    l.rhs = scratch;
    l.result = l.rhs + round_128(C * rhs_slice * op_bytes);
    const size_t slices_end = l.result + round_128(C * rhs_slice * 4);
    l.total = end > slices_end ? end : slices_end;
    return l;
}

template <typename Op>
__global__ void __launch_bounds__(block_threads) prepare_kernel(recurrent_params p)
{
    const int C = chunk_size, Kp = p.Kp, Vp = p.Vp, Kg = p.Kg, tid = (int)threadIdx.x, threads = (int)blockDim.x;
    const bool step = p.step != STEP_NONE, channel = p.gate == GATE_CHANNEL;
    const int64_t ci = blockIdx.x;
    const int hv = (int)blockIdx.y, h = hv / (p.HV / p.H);
    const chunk_entry chunk = p.chunks[ci];
    const int64_t t0 = chunk.t0, entry = ci * p.HV + hv;
    const int n = chunk.n;

    const prepare_layout l = prepare_layout_for(Kp, Kg, sizeof(Op), step, channel);
    const int rhs_slice = rhs_slice_for(sizeof(Op), channel);
    unsigned char *shared = lacs_shared_memory();
    Op *Kop = (Op *)(shared + l.Kop), *Top = (Op *)(shared + l.Top), *L = (Op *)(shared + l.L);
    Op *R = (Op *)(shared + l.R), *rhs = (Op *)(shared + l.rhs);
    float *G = (float *)(shared + l.G), *b = (float *)(shared + l.b), *nA = (float *)(shared + l.nA);
    float *T = (float *)(shared + l.T), *X = (float *)(shared + l.X), *result = (float *)(shared + l.result);
    float *row_exp = (float *)(shared + l.row_exp), *last_exp = (float *)(shared + l.last_exp);

    /* The keys; the gates, per row (and channel) */
    lacs_load_tile(Kop, Kp, C, p.k, (t0 * p.H + h) * p.K, (int64_t)p.H * p.K, n, p.K);
    for (int idx = tid; idx < C * Kg; idx += threads) {
        const int i = idx / Kg, c = idx % Kg;
        G[idx] = i < n && c < (channel ? p.K : 1) ? gate_value(p, t0 + i, hv, c) : 0.0f;
    }
    __syncthreads();
    /* G: the inclusive sums in token order (fp32, at most 64 terms: SPEC.md 11.1), a thread per
     * channel; the mutant restarts them at every sub-chunk. b: the step sizes (0 past n). */
    if (tid < Kg) { /* the column in registers: 64 loads in flight, then 64 dependent adds */
        float column[chunk_size];
        LACS_UNROLL
        for (int i = 0; i < chunk_size; i++)
            column[i] = G[i * Kg + tid];
        float sum = 0.0f;
        LACS_UNROLL
        for (int i = 0; i < chunk_size; i++) {
            if (LACS_MUTANT(LACS_MUTANT_GATE_PER_TOKEN) && channel && i % sub_chunk == 0)
                sum = 0.0f;
            sum += column[i];
            G[i * Kg + tid] = sum;
        }
    }
    if (step && tid >= threads - C) {
        const int i = tid - (threads - C);
        float knorm2 = 0.0f;
        if (p.step == STEP_EFLA)
            for (int c = 0; c < Kp; c++) {
                const float kc = lacs_operand_value(Kop[i * Kp + c]);
                knorm2 += kc * kc;
            }
        b[i] = i < n ? step_from(p, lacs_view_at(p.beta, (t0 + i) * p.HV + hv), knorm2) : 0.0f;
    }
    __syncthreads();
    lacs_copy_rows(p.G + entry * C * Kg, 0, G, 0, 1, (size_t)C * Kg * 4);
    const float *G_last = G + (n - 1) * Kg;
    const int shift = p.comba ? 1 : 0;
    /* scalar gates: exp(Gr_i) and exp(G_last - G_i) once per row */
    if (!channel && tid < C) {
        row_exp[tid] = tid - shift >= 0 ? expf(G[tid - shift]) : 1.0f;
        last_exp[tid] = expf(G_last[0] - G[tid]);
    }
    __syncthreads();

    /* Kdec = exp(G_last - G) (.) K: the keys decayed to the chunk's end, for the state kernel */
    {
        Op *Kdec = (Op *)p.Kdec + entry * C * Kp;
        for (int idx = tid; idx < C * Kp; idx += threads) {
            const int i = idx / Kp, c = idx % Kp, cg = channel ? c : 0;
            const float decay = channel ? expf(G_last[cg] - G[i * Kg + cg]) : last_exp[i];
            lacs_store_operand(&Kdec[idx], i < n ? decay * lacs_operand_value(Kop[idx]) : 0.0f);
        }
    }

    float *U = p.U + entry * C * Vp;
    if (!step) { /* the linear family: V' = v */
        for (int idx = tid; idx < C * Vp; idx += threads) {
            const int i = idx / Vp, j = idx % Vp;
            U[idx] = i < n && j < p.V ? lacs_view_at(p.v, ((t0 + i) * p.HV + hv) * p.V + j) : 0.0f;
        }
        return;
    }

    /* nA = -A: A_ij = b_i sum_c k_ic k_jc exp(Gr_ic - G_jc), j < i */
    if (!channel) {
        lacs_block_gemm<false, true>(Kop, Kp, Kop, Kp, nA, C, C, C, Kp, false);
        __syncthreads();
        for (int idx = tid; idx < C * C; idx += threads) {
            const int i = idx / C, j = idx % C;
            const float gr = i - shift >= 0 ? G[i - shift] : 0.0f;
            nA[idx] = j < i ? -(nA[idx] * b[i] * expf(gr - G[j])) : 0.0f;
        }
    } else {
        channel_below_diagonal(Kop, Kop, G, Kp, shift, L, R, nA);
        channel_diagonal(Kop, Kop, G, Kp, shift, true, nA);
        __syncthreads();
        for (int idx = tid; idx < C * C; idx += threads) {
            const int i = idx / C, j = idx % C;
            nA[idx] = j < i ? -(nA[idx] * b[i]) : 0.0f;
        }
    }
    __syncthreads();
    unit_lower_inverse(nA, T, X);
    for (int idx = tid; idx < C * C; idx += threads)
        lacs_store_operand(&Top[idx], T[idx]);
    __syncthreads();

    /* -W = T (-b exp(Gr) (.) K), rhs_slice key columns at a time, stored as operands */
    Op *minus_W = (Op *)p.minus_W + entry * C * Kp;
    for (int c0 = 0; c0 < Kp; c0 += rhs_slice) {
        const int width = Kp - c0 < rhs_slice ? Kp - c0 : rhs_slice;
        for (int idx = tid; idx < C * width; idx += threads) {
            const int i = idx / width, c = c0 + idx % width;
            const float gr_exp = !channel ? row_exp[i] : i - shift >= 0 ? expf(G[(i - shift) * Kg + c]) : 1.0f;
            lacs_store_operand(&rhs[idx], -b[i] * gr_exp * lacs_operand_value(Kop[i * Kp + c]));
        }
        __syncthreads();
        lacs_block_gemm<false, false>(Top, C, rhs, width, result, width, C, width, C, false);
        __syncthreads();
        for (int idx = tid; idx < C * width; idx += threads)
            lacs_store_operand(&minus_W[(idx / width) * Kp + c0 + idx % width], result[idx]);
        __syncthreads();
    }

    /* U = T (b (.) V), rhs_slice value columns at a time, kept in fp32 */
    for (int j0 = 0; j0 < Vp; j0 += rhs_slice) {
        const int width = Vp - j0 < rhs_slice ? Vp - j0 : rhs_slice;
        lacs_load_tile(rhs, width, C, p.v, ((t0 * p.HV + hv) * p.V + j0), (int64_t)p.HV * p.V, n,
                       p.V - j0 < width ? p.V - j0 : width);
        __syncthreads();
        for (int idx = tid; idx < C * width; idx += threads)
            lacs_store_operand(&rhs[idx], b[idx / width] * lacs_operand_value(rhs[idx]));
        __syncthreads();
        lacs_block_gemm<false, false>(Top, C, rhs, width, result, width, C, width, C, false);
        __syncthreads();
        lacs_copy_rows(U + j0, (size_t)Vp * 4, result, (size_t)width * 4, C, (size_t)width * 4);
        __syncthreads();
    }
}

/* ---- 2. state: the sequential walk over a sequence's chunks ---- */

/* A piece of the next chunk's operands to stage: rows x width 16-byte units
 * from the workspace (src_stride bytes apart) into shared memory (dst_stride);
 * width 0 when the piece is absent. */
struct stage_segment {
    const char *src;
    char *dst;
    int rows, width;
    int src_stride, dst_stride;
    int flat;        /* rows back to back at both ends: unit e is at src + 16 e, dst + 16 e */
    int width_log2;  /* otherwise the width is a power of two: rows and columns by shifts */
};

/* Every plan has the same four pieces in the same places (no index that is
 * not known at compile time: the plan stays in registers). */
struct stage_plan {
    stage_segment segment[4];
    int total;
};

__device__ __forceinline__ stage_segment stage_piece(const void *src, int src_stride, void *dst, int dst_stride,
                                                     int rows, int row_bytes)
{
    stage_segment s;
    s.src = (const char *)src;
    s.dst = (char *)dst;
    s.rows = rows;
    s.width = row_bytes / 16;
    s.src_stride = src_stride;
    s.dst_stride = dst_stride;
    s.flat = src_stride == row_bytes && dst_stride == row_bytes;
    s.width_log2 = 0;
    while ((2 << s.width_log2) <= s.width)
        s.width_log2++;
    return s;
}

/* The source and destination of the plan's 16-byte unit e; false past its end. */
__device__ __forceinline__ bool stage_unit(const stage_plan &plan, int e, const uint4 **src, uint4 **dst)
{
    LACS_UNROLL
    for (int s = 0; s < 4; s++) {
        const stage_segment &g = plan.segment[s];
        const int count = g.rows * g.width;
        if (e < count) { /* no division: a flat piece, or a width that is a power of two */
            const int r = g.flat ? 0 : e >> g.width_log2, c = g.flat ? e : e & (g.width - 1);
            *src = reinterpret_cast<const uint4 *>(g.src + (size_t)r * g.src_stride) + c;
            *dst = reinterpret_cast<uint4 *>(g.dst + (size_t)r * g.dst_stride) + c;
            LACS_ALIGNED16(*src);
            LACS_ALIGNED16(*dst);
            return true;
        }
        e -= count;
    }
    return false;
}

/* Loads this thread's first prefetch_slots units into registers (issued
 * together, waited for only when stored). */
__device__ __forceinline__ void stage_issue(const stage_plan &plan, uint4 *staged)
{
    LACS_UNROLL
    for (int k = 0; k < prefetch_slots; k++) {
        const uint4 *src;
        uint4 *dst;
        if (stage_unit(plan, (int)threadIdx.x + k * block_threads, &src, &dst))
            staged[k] = __ldg(src);
    }
}

/* Stores the staged units, and copies the units past the registers directly. */
__device__ __forceinline__ void stage_commit(const stage_plan &plan, const uint4 *staged)
{
    LACS_UNROLL
    for (int k = 0; k < prefetch_slots; k++) {
        const uint4 *src;
        uint4 *dst;
        if (stage_unit(plan, (int)threadIdx.x + k * block_threads, &src, &dst))
            *dst = staged[k];
    }
    for (int e = (int)threadIdx.x + prefetch_slots * block_threads; e < plan.total; e += block_threads) {
        const uint4 *src;
        uint4 *dst;
        if (stage_unit(plan, e, &src, &dst))
            *dst = __ldg(src);
    }
}

struct state_layout {
    size_t S32, Sop, Vop, Wop[2], Kop[2], U32[2], Glast[2], total;
};

/* buffers: 2 when the operands of two chunks fit (the next chunk's are
 * written while this chunk's are read), else 1. */
__host__ __device__ inline state_layout state_layout_for(int Kp, int BV, size_t op_bytes, int buffers)
{
    const size_t C = chunk_size;
    state_layout l;
    size_t at = 0;
    l.S32 = at, at += round_128((size_t)Kp * BV * 4);
    l.Sop = at, at += round_128((size_t)Kp * BV * op_bytes);
    l.Vop = at, at += round_128(C * BV * op_bytes);
    for (int b = 0; b < 2; b++) {
        if (b >= buffers) {
            l.Wop[b] = l.Wop[0], l.Kop[b] = l.Kop[0], l.U32[b] = l.U32[0], l.Glast[b] = l.Glast[0];
            continue;
        }
        l.Wop[b] = at, at += round_128(C * Kp * op_bytes);
        l.Kop[b] = at, at += round_128(C * Kp * op_bytes);
        l.U32[b] = at, at += round_128(C * BV * 4);
        l.Glast[b] = at, at += round_128((size_t)Kp * 4);
    }
    l.total = at;
    return l;
}

/* Chunk ci's operands for this block: -W (absent for the linear family),
 * Kdec, U's slice, and G's last row (gk only). */
template <typename Op>
__device__ __forceinline__ stage_plan state_plan_for(const recurrent_params &p, int64_t ci, int hv, int v0, Op *Wop,
                                                     Op *Kop, float *U32, float *Glast)
{
    const int C = chunk_size, Kp = p.Kp, Vp = p.Vp, BV = p.state_bv;
    const int64_t entry = ci * p.HV + hv;
    const int row_op = Kp * (int)sizeof(Op);
    stage_plan plan;
    plan.segment[0] = stage_piece((const Op *)p.minus_W + entry * C * Kp, row_op, Wop, row_op,
                                  p.step != STEP_NONE ? C : 0, row_op);
    plan.segment[1] = stage_piece((const Op *)p.Kdec + entry * C * Kp, row_op, Kop, row_op, C, row_op);
    plan.segment[2] = stage_piece(p.U + entry * C * Vp + v0, Vp * 4, U32, BV * 4, C, BV * 4);
    plan.segment[3] = stage_piece(p.G + (entry * C + p.chunks[ci].n - 1) * p.Kg, Kp * 4, Glast, Kp * 4,
                                  p.gate == GATE_CHANNEL ? 1 : 0, Kp * 4);
    plan.total = 0;
    LACS_UNROLL
    for (int s = 0; s < 4; s++)
        plan.total += plan.segment[s].rows * plan.segment[s].width;
    return plan;
}

/* The walk. Each warp owns output tiles of both products, and finishes its
 * own tiles (rounding them to operands, the decay) with __syncwarp only, so
 * that a chunk costs two block-wide barriers (three with one buffer):
 *   [V' = U + (-W) S, a warp per 16 x 16 tile, rounded to Vop and stored for
 *    the output kernel; the next chunk's operands written to the other
 *    buffer]  barrier
 *   [S <- exp(G_last) (.) S + Kdec^T V', a warp per tile: the decay on the
 *    warp's own tile, the product, the tile rounded to Sop]  barrier
 * and the next chunk's loads are in flight (registers) from the start of the
 * chunk to the write. */
template <typename Op>
__global__ void __launch_bounds__(block_threads) state_kernel(recurrent_params p)
{
    const int C = chunk_size, BV = p.state_bv, Kp = p.Kp, Vp = p.Vp, K = p.K, V = p.V;
    const int tid = (int)threadIdx.x, threads = (int)blockDim.x, lane = tid % 32;
    const int warp = tid / 32, warps = threads / 32;
    const int64_t seq = blockIdx.x / p.HV;
    const int hv = (int)(blockIdx.x % p.HV), v0 = (int)blockIdx.y * BV;
    const bool channel = p.gate == GATE_CHANNEL, step = p.step != STEP_NONE;
    const int buffers = p.state_buffers;

    const state_layout l = state_layout_for(Kp, BV, sizeof(Op), buffers);
    unsigned char *shared = lacs_shared_memory();
    float *S32 = (float *)(shared + l.S32);
    Op *Sop = (Op *)(shared + l.Sop), *Vop = (Op *)(shared + l.Vop);
    const int64_t state_base = (seq * p.HV + hv) * (int64_t)K * V;

    /* S: h0's slice, or zeros (columns past V and rows past K stay zero). */
    for (int idx = tid; idx < Kp * BV; idx += threads) {
        const int c = idx / BV, j = idx % BV;
        const float s = p.h0.data && c < K && v0 + j < V ? lacs_view_at(p.h0, state_base + (int64_t)c * V + v0 + j)
                                                         : 0.0f;
        S32[idx] = s;
        lacs_store_operand(&Sop[idx], s);
    }
    const int first = p.seq_first_chunk[seq], last = p.seq_first_chunk[seq + 1];
    uint4 staged[prefetch_slots];
    if (first < last) {
        const stage_plan plan = state_plan_for(p, first, hv, v0, (Op *)(shared + l.Wop[0]),
                                               (Op *)(shared + l.Kop[0]), (float *)(shared + l.U32[0]),
                                               (float *)(shared + l.Glast[0]));
        stage_issue(plan, staged);
        stage_commit(plan, staged);
    }
    __syncthreads();

    for (int ci = first; ci < last; ci++) {
        const int b = buffers == 2 ? (ci - first) & 1 : 0, nb = buffers == 2 ? b ^ 1 : 0;
        const Op *Wop = (const Op *)(shared + l.Wop[b]), *Kop = (const Op *)(shared + l.Kop[b]);
        float *U32 = (float *)(shared + l.U32[b]);
        const float *Glast = (const float *)(shared + l.Glast[b]);
        const int64_t entry = (int64_t)ci * p.HV + hv;
        const int n = p.chunks[ci].n;
        /* the state this chunk starts from, for the output kernel */
        lacs_copy_rows((Op *)p.S_chunk + entry * Kp * Vp + v0, (size_t)Vp * sizeof(Op), Sop, (size_t)BV * sizeof(Op),
                       Kp, (size_t)BV * sizeof(Op));
        /* the next chunk's operands, in flight while this chunk's products run */
        const bool more = ci + 1 < last;
        const stage_plan next = state_plan_for(p, more ? ci + 1 : ci, hv, v0, (Op *)(shared + l.Wop[nb]),
                                               (Op *)(shared + l.Kop[nb]), (float *)(shared + l.U32[nb]),
                                               (float *)(shared + l.Glast[nb]));
        if (more)
            stage_issue(next, staged);
        const float scalar_decay = channel ? 1.0f : expf(p.G[entry * C + n - 1]);

        /* V' = U + (-W) S, a warp per tile; rounded to Vop and stored for the output kernel */
        Op *V_new = (Op *)p.V_new + entry * C * Vp + v0;
        for (int tile = warp; tile < (C / 16) * (BV / 16); tile += warps) {
            const int i0 = tile / (BV / 16) * 16, j0 = tile % (BV / 16) * 16;
            if (step)
                lacs_warp_tile_gemm<false, false>(Wop + (size_t)i0 * Kp, Kp, Sop + j0, BV, U32 + i0 * BV + j0, BV, Kp);
            for (int e = lane; e < 256; e += 32) {
                const int i = i0 + e / 16, j = j0 + e % 16;
                lacs_store_operand(&Vop[i * BV + j], U32[i * BV + j]);
                V_new[(size_t)i * Vp + j] = Vop[i * BV + j];
            }
        }
        if (more && buffers == 2)
            stage_commit(next, staged);
        __syncthreads();

        /* S <- exp(G_last) (.) S + Kdec^T V', a warp per tile; rounded to Sop */
        for (int tile = warp; tile < (Kp / 16) * (BV / 16); tile += warps) {
            const int c0 = tile / (BV / 16) * 16, j0 = tile % (BV / 16) * 16;
            for (int e = lane; e < 256; e += 32) {
                const int c = c0 + e / 16, j = j0 + e % 16;
                S32[c * BV + j] *= channel ? expf(Glast[c]) : scalar_decay;
            }
            lacs_warp_tile_gemm<true, false>(Kop + c0, Kp, Vop + j0, BV, S32 + c0 * BV + j0, BV, C);
            for (int e = lane; e < 256; e += 32) {
                const int idx = (c0 + e / 16) * BV + j0 + e % 16;
                if (LACS_MUTANT(LACS_MUTANT_STATE_BF16)) /* the state kept in bf16 between chunks: rejected */
                    S32[idx] = lacs_bf16_to_float(lacs_float_to_bf16(S32[idx]));
                lacs_store_operand(&Sop[idx], S32[idx]);
            }
        }
        if (more && buffers == 1) {
            __syncthreads(); /* the one buffer's readers are done */
            stage_commit(next, staged);
        }
        __syncthreads();
    }

    if (p.ht)
        for (int idx = tid; idx < Kp * BV; idx += threads) {
            const int c = idx / BV, j = idx % BV;
            if (c < K && v0 + j < V)
                p.ht[state_base + (int64_t)c * V + v0 + j] = S32[idx];
        }
}

/* ---- 3. output: O for one (chunk, value head, slice of value columns) ---- */

struct output_layout {
    size_t Qop, Kop, G, row_scale, Sop, Vop, Pop, P32, O32, L, R, total;
};

__host__ __device__ inline output_layout output_layout_for(int Kp, int Kg, int BV, size_t op_bytes, bool channel)
{
    const size_t C = chunk_size;
    output_layout l = {};
    size_t at = 0;
    l.Qop = at, at += round_128(C * Kp * op_bytes);
    l.Kop = at, at += round_128(C * Kp * op_bytes);
    l.G = at, at += round_128(C * Kg * 4);
    l.row_scale = at, at += round_128(C * 4);
    l.Sop = at, at += round_128((size_t)Kp * BV * op_bytes);
    l.Vop = at, at += round_128(C * BV * op_bytes);
    l.Pop = at, at += round_128(C * C * op_bytes);
    l.P32 = at, at += round_128(C * C * 4);
    l.O32 = at, at += round_128(C * BV * 4);
    if (channel) {
        l.L = at, at += round_128(sub_chunk * Kp * op_bytes);
        l.R = at, at += round_128(3 * sub_chunk * Kp * op_bytes);
    }
    l.total = at;
    return l;
}

template <typename Op>
__global__ void __launch_bounds__(block_threads) output_kernel(recurrent_params p)
{
    const int C = chunk_size, Kp = p.Kp, Vp = p.Vp, V = p.V, Kg = p.Kg, BV = p.output_bv;
    const int tid = (int)threadIdx.x, threads = (int)blockDim.x;
    const bool channel = p.gate == GATE_CHANNEL;
    const int64_t ci = blockIdx.x;
    const int hv = (int)blockIdx.y, h = hv / (p.HV / p.H), v0 = (int)blockIdx.z * BV;
    const chunk_entry chunk = p.chunks[ci];
    const int64_t t0 = chunk.t0, entry = ci * p.HV + hv;
    const int n = chunk.n;

    const output_layout l = output_layout_for(Kp, Kg, BV, sizeof(Op), channel);
    unsigned char *shared = lacs_shared_memory();
    Op *Qop = (Op *)(shared + l.Qop), *Kop = (Op *)(shared + l.Kop), *Sop = (Op *)(shared + l.Sop);
    Op *Vop = (Op *)(shared + l.Vop), *Pop = (Op *)(shared + l.Pop), *L = (Op *)(shared + l.L);
    Op *R = (Op *)(shared + l.R);
    float *G = (float *)(shared + l.G), *P32 = (float *)(shared + l.P32), *O32 = (float *)(shared + l.O32);
    float *row_scale = (float *)(shared + l.row_scale);

    lacs_load_tile(Qop, Kp, C, p.q, (t0 * p.H + h) * p.K, (int64_t)p.H * p.K, n, p.K);
    lacs_load_tile(Kop, Kp, C, p.k, (t0 * p.H + h) * p.K, (int64_t)p.H * p.K, n, p.K);
    lacs_copy_rows(Sop, (size_t)BV * sizeof(Op), (const Op *)p.S_chunk + entry * Kp * Vp + v0,
                   (size_t)Vp * sizeof(Op), Kp, (size_t)BV * sizeof(Op));
    lacs_copy_rows(Vop, (size_t)BV * sizeof(Op), (const Op *)p.V_new + entry * C * Vp + v0,
                   (size_t)Vp * sizeof(Op), C, (size_t)BV * sizeof(Op));
    for (int idx = tid; idx < C * Kg; idx += threads)
        G[idx] = p.G[entry * C * Kg + idx];
    __syncthreads();

    if (!channel) {
        if (tid < C) /* scale exp(G_i), once per row */
            row_scale[tid] = p.scale * expf(G[tid]);
        /* O = Q S (scaled by rows below); P = Q K^T */
        lacs_block_gemm<false, false>(Qop, Kp, Sop, BV, O32, BV, C, BV, Kp, false);
        lacs_block_gemm<false, true>(Qop, Kp, Kop, Kp, P32, C, C, C, Kp, false);
        __syncthreads();
        /* P_ij = scale exp(G_i - G_j) q_i . k_j on and below the diagonal; O_i *= scale exp(G_i): the read
         * of the decayed state, scaled after the product, in fp32 */
        for (int idx = tid; idx < C * C; idx += threads) {
            const int i = idx / C, j = idx % C;
            lacs_store_operand(&Pop[idx], j <= i ? P32[idx] * p.scale * expf(G[i] - G[j]) : 0.0f);
        }
        for (int idx = tid; idx < C * BV; idx += threads)
            O32[idx] *= row_scale[idx / BV];
    } else {
        /* P_ij = scale sum_c q_ic k_jc exp(G_ic - G_jc), j <= i: below the diagonal blocks by products of
         * decayed operands, the diagonal blocks term by term */
        channel_below_diagonal(Qop, Kop, G, Kp, 0, L, R, P32);
        channel_diagonal(Qop, Kop, G, Kp, 0, false, P32);
        __syncthreads();
        for (int idx = tid; idx < C * C; idx += threads) {
            const int i = idx / C, j = idx % C;
            lacs_store_operand(&Pop[idx], j <= i ? P32[idx] * p.scale : 0.0f);
        }
        /* the read of the decayed state: (exp(G_i) (.) q_i)^T S, scaled after the product */
        for (int idx = tid; idx < C * Kp; idx += threads)
            lacs_store_operand(&Qop[idx], expf(G[idx]) * lacs_operand_value(Qop[idx]));
        __syncthreads();
        lacs_block_gemm<false, false>(Qop, Kp, Sop, BV, O32, BV, C, BV, Kp, false);
        __syncthreads();
        for (int idx = tid; idx < C * BV; idx += threads)
            O32[idx] *= p.scale;
    }
    __syncthreads();

    /* O += P V' */
    lacs_block_gemm<false, false>(Pop, C, Vop, BV, O32, BV, C, BV, C, true);
    __syncthreads();
    for (int idx = tid; idx < n * BV; idx += threads) {
        const int i = idx / BV, j = v0 + idx % BV;
        if (j < V)
            p.o[((t0 + i) * p.HV + hv) * V + j] = O32[idx];
    }
}

/* ---- linear_attn_postnorm: o_t / sqrt(mean(o_t^2) + eps) (H3) ---- */

/* One warp per row of V outputs: the sum of squares in double, warp order
 * fixed; a zero row with eps = 0 stays zero (builtin:cpu's rms_normalize). */
__global__ void __launch_bounds__(block_threads) postnorm_kernel(float *o, int64_t rows, int V, double eps)
{
    const int lane = (int)(threadIdx.x % 32);
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    double sum = 0.0;
    if (row < rows)
        for (int j = lane; j < V; j += 32)
            sum += (double)o[row * V + j] * o[row * V + j];
    for (int mask = 16; mask > 0; mask /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, mask);
    const double denominator = sqrt(sum / (double)V + eps);
    if (row < rows && denominator != 0.0)
        for (int j = lane; j < V; j += 32)
            o[row * V + j] = (float)(o[row * V + j] / denominator);
}

/* ---- the decode kernel ---- */

/* One token per sequence. Block (sequence x value head, 32 value columns):
 * lane j owns column v0 + j, warp w the state's rows c = w, w + 8, ..., held
 * in registers. Per the reference's order: the decay (Comba: after reading
 * h^T k), u = h^T k summed across the warps, the write b (v - u) (v for the
 * linear family), S += k u'^T, o = scale S^T q summed across the warps. The
 * column sums of the 8 warps meet in shared memory, added in warp order. */
__global__ void __launch_bounds__(block_threads) decode_kernel(recurrent_params p)
{
    const int max_rows = max_padded_k / decode_groups;
    float *partial_u = (float *)lacs_shared_memory(), *partial_o = partial_u + decode_groups * 32;
    const int64_t seq = blockIdx.x / p.HV;
    const int hv = (int)(blockIdx.x % p.HV), h = hv / (p.HV / p.H);
    const int lane = (int)(threadIdx.x % 32), group = (int)(threadIdx.x / 32);
    const int j = (int)blockIdx.y * 32 + lane, K = p.K, V = p.V;
    const bool column = j < V;
    const int64_t t = p.cu_seqlens ? p.cu_seqlens[seq] : seq * p.T;
    const int64_t state = (seq * p.HV + hv) * (int64_t)K * V + j, qk = (t * p.H + h) * K;

    float s[max_rows];
    LACS_UNROLL
    for (int r = 0; r < max_rows; r++) {
        const int c = group + decode_groups * r;
        s[r] = column && c < K && p.h0.data ? lacs_view_at(p.h0, state + (int64_t)c * V) : 0.0f;
    }
    float u = 0.0f;
    if (p.comba) { /* Comba: the correction reads the un-decayed state */
        LACS_UNROLL
        for (int r = 0; r < max_rows; r++) {
            const int c = group + decode_groups * r;
            if (c < K)
                u += s[r] * lacs_view_at(p.k, qk + c);
        }
    }
    const float scalar_decay = p.gate == GATE_NONE || p.gate == GATE_CHANNEL ? 1.0f : expf(gate_value(p, t, hv, 0));
    LACS_UNROLL
    for (int r = 0; r < max_rows; r++) {
        const int c = group + decode_groups * r;
        if (c < K)
            s[r] *= p.gate == GATE_CHANNEL ? expf(gate_value(p, t, hv, c)) : scalar_decay;
    }
    if (p.step != STEP_NONE && !p.comba) {
        LACS_UNROLL
        for (int r = 0; r < max_rows; r++) {
            const int c = group + decode_groups * r;
            if (c < K)
                u += s[r] * lacs_view_at(p.k, qk + c);
        }
    }
    partial_u[group * 32 + lane] = u;
    __syncthreads();
    float write = column ? lacs_view_at(p.v, (t * p.HV + hv) * V + j) : 0.0f;
    if (p.step != STEP_NONE) {
        float total = 0.0f, knorm2 = 0.0f;
        for (int g = 0; g < decode_groups; g++)
            total += partial_u[g * 32 + lane];
        if (p.step == STEP_EFLA)
            for (int c = 0; c < K; c++) {
                const float kc = lacs_view_at(p.k, qk + c);
                knorm2 += kc * kc;
            }
        write = step_from(p, lacs_view_at(p.beta, t * p.HV + hv), knorm2) * (write - total);
    }
    float out = 0.0f;
    LACS_UNROLL
    for (int r = 0; r < max_rows; r++) {
        const int c = group + decode_groups * r;
        if (c < K) {
            s[r] += lacs_view_at(p.k, qk + c) * write;
            out += s[r] * lacs_view_at(p.q, qk + c);
            if (p.ht && column)
                p.ht[state + (int64_t)c * V] = s[r];
        }
    }
    partial_o[group * 32 + lane] = out;
    __syncthreads();
    if (group == 0 && column) {
        float total = 0.0f;
        for (int g = 0; g < decode_groups; g++)
            total += partial_o[g * 32 + lane];
        p.o[(t * p.HV + hv) * V + j] = p.scale * total;
    }
}

/* ---- the family ---- */

static int round_16(int64_t x) { return (int)((x + 15) / 16 * 16); }

/* The shared memory each chunk kernel needs. */
struct chunk_shared {
    size_t prepare, state, output;
};

static chunk_shared chunk_shared_for(const recurrent_params &p, size_t op_bytes)
{
    chunk_shared s;
    const bool step = p.step != STEP_NONE, channel = p.gate == GATE_CHANNEL;
    s.prepare = prepare_layout_for(p.Kp, p.Kg, op_bytes, step, channel).total;
    s.state = state_layout_for(p.Kp, p.state_bv, op_bytes, p.state_buffers).total;
    s.output = output_layout_for(p.Kp, p.Kg, p.output_bv, op_bytes, channel).total;
    return s;
}

/* The three chunk kernels, in order, on the workspace's buffers. */
static int run_chunks(const lacs_cuda_call *c, const recurrent_params &p, int64_t n_seqs, int64_t n_chunks)
{
    const char *op = c->op;
    const chunk_shared shared = chunk_shared_for(p, c->bf16 ? 2 : 4);
    const dim3 threads(block_threads);
    cudaError_t e = cudaSuccess;
    if (n_chunks > 0) {
        const dim3 grid((unsigned)n_chunks, (unsigned)p.HV);
        e = c->bf16 ? lacs_launch(prepare_kernel<unsigned short>, grid, threads, shared.prepare, p)
                    : lacs_launch(prepare_kernel<float>, grid, threads, shared.prepare, p);
        if (e != cudaSuccess)
            return lacs_cuda_launch_failed(op, "prepare_kernel", e);
    }
    {
        const dim3 grid((unsigned)(n_seqs * p.HV), (unsigned)(p.Vp / p.state_bv));
        e = c->bf16 ? lacs_launch(state_kernel<unsigned short>, grid, threads, shared.state, p)
                    : lacs_launch(state_kernel<float>, grid, threads, shared.state, p);
        if (e != cudaSuccess)
            return lacs_cuda_launch_failed(op, "state_kernel", e);
    }
    if (n_chunks > 0) {
        const dim3 grid((unsigned)n_chunks, (unsigned)p.HV, (unsigned)(p.Vp / p.output_bv));
        e = c->bf16 ? lacs_launch(output_kernel<unsigned short>, grid, threads, shared.output, p)
                    : lacs_launch(output_kernel<float>, grid, threads, shared.output, p);
        if (e != cudaSuccess)
            return lacs_cuda_launch_failed(op, "output_kernel", e);
    }
    return LACS_OK;
}

/* The SMs of the device (the state kernel's slices are chosen to fill them). */
static int multiprocessors(void)
{
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms < 1)
        sms = 108;
    return sms;
}

static int run_postnorm(const lacs_cuda_call *c, const recurrent_params &p, int64_t rows)
{
    const double eps = lacs_cuda_param(c, "eps", 0.0);
    if (rows == 0)
        return LACS_OK;
    const int per_block = block_threads / 32;
    cudaError_t e = lacs_launch(postnorm_kernel, dim3((unsigned)((rows + per_block - 1) / per_block)),
                                dim3(block_threads), 0, p.o, rows, p.V, eps);
    return e == cudaSuccess ? LACS_OK : lacs_cuda_launch_failed(c->op, "postnorm_kernel", e);
}

int lacs_cuda_recurrent(const lacs_cuda_call *c)
{
    const char *op = c->op;
    recurrent_params p;
    memset(&p, 0, sizeof p);
    const lacs_cuda_tensor *gate = nullptr;
    int postnorm = 0;
    if (strcmp(op, "linear_attn") == 0) {
    } else if (strcmp(op, "linear_attn_postnorm") == 0) {
        postnorm = 1;
    } else if (strcmp(op, "retention") == 0) {
        gate = lacs_cuda_input(c, "g_gamma"), p.gate = GATE_CONSTANT;
    } else if (strcmp(op, "simple_gla") == 0) {
        gate = lacs_cuda_input(c, "g"), p.gate = GATE_SCALAR;
    } else if (strcmp(op, "gla") == 0) {
        gate = lacs_cuda_input(c, "gk"), p.gate = GATE_CHANNEL;
    } else if (strcmp(op, "delta_rule") == 0 || strcmp(op, "efla") == 0) {
        p.step = strcmp(op, "efla") == 0 ? STEP_EFLA : STEP_BETA;
    } else if (strcmp(op, "gated_delta_rule") == 0 || strcmp(op, "comba") == 0) {
        p.step = STEP_BETA;
        p.comba = strcmp(op, "comba") == 0;
        if ((gate = lacs_cuda_input(c, "gk")) != nullptr)
            p.gate = GATE_CHANNEL;
        else
            gate = lacs_cuda_input(c, "g"), p.gate = GATE_SCALAR;
    } else {
        return lacs_cuda_unsupported(op, "not an op of the recurrent family");
    }
    if (postnorm) {
        const double eps = lacs_cuda_param(c, "eps", 0.0);
        if (!(eps >= 0.0))
            return lacs_cuda_error(LACS_ERR_PARAM, op, "eps = %g must be >= 0", eps);
    }

    const lacs_cuda_tensor *q = lacs_cuda_input(c, "q"), *v = lacs_cuda_input(c, "v"),
                           *cu = lacs_cuda_input(c, "cu_seqlens");
    lacs_cuda_tensor *o = lacs_cuda_output(c, "o"), *ht = lacs_cuda_output(c, "ht");
    if (!o)
        return lacs_cuda_error(LACS_ERR_INPUT, op, "output 'o' is required");
    p.q = lacs_view_of(q);
    p.k = lacs_view_of(lacs_cuda_input(c, "k"));
    p.v = lacs_view_of(v);
    p.beta = lacs_view_of(lacs_cuda_input(c, "beta"));
    p.g = lacs_view_of(gate);
    p.h0 = lacs_view_of(lacs_cuda_input(c, "h0"));
    p.o = (float *)o->device;
    p.ht = ht ? (float *)ht->device : nullptr;
    p.cu_seqlens = cu ? (const int64_t *)cu->device : nullptr;
    p.T = q->shape[1];
    p.H = (int)q->shape[2];
    p.K = (int)q->shape[3];
    p.HV = (int)v->shape[2];
    p.V = (int)v->shape[3];
    p.scale = (float)lacs_cuda_param(c, "scale", 1.0 / sqrt((double)p.K));
    const int64_t n_seqs = cu ? cu->shape[0] - 1 : q->shape[0];
    const int64_t *offsets = cu ? (const int64_t *)cu->host : nullptr;
    if (n_seqs == 0 || p.HV == 0 || p.V == 0)
        return LACS_OK; /* nothing to compute: the outputs are empty */
    if (n_seqs * p.HV > 2147483647LL)
        return lacs_cuda_unsupported(op, "%lld sequence heads: more than one grid dimension holds",
                                     (long long)(n_seqs * p.HV));
    p.Kp = round_16(p.K > 0 ? p.K : 1);
    if (p.Kp > max_padded_k)
        return lacs_cuda_unsupported(op, "K = %d: the kernels hold K <= %d (the state's rows in registers and "
                                         "shared memory)", p.K, max_padded_k);
    const int64_t output_rows = q->shape[0] * q->shape[1] * p.HV;

    /* Decoding: every sequence one token long. */
    int all_single = 1;
    for (int64_t s = 0; s < n_seqs && all_single; s++)
        all_single = (offsets ? offsets[s + 1] - offsets[s] : p.T) == 1;
    if (all_single) {
        const dim3 grid((unsigned)(n_seqs * p.HV), (unsigned)((p.V + 31) / 32));
        cudaError_t e = lacs_launch(decode_kernel, grid, dim3(block_threads), 2 * decode_groups * 32 * sizeof(float),
                                    p);
        if (e != cudaSuccess)
            return lacs_cuda_launch_failed(op, "decode_kernel", e);
        return postnorm ? run_postnorm(c, p, output_rows) : LACS_OK;
    }

    /* V padded so that every value slice (32 or 16 columns in the state kernel; 64, 32 or 16 in the
     * output kernel) lies inside a row of the workspace */
    p.Kg = p.gate == GATE_CHANNEL ? p.Kp : 1;
    p.Vp = p.V > 32 ? (p.V + max_slice - 1) / max_slice * max_slice : 32;
    const size_t op_bytes = c->bf16 ? 2 : 4;
    const size_t most = (size_t)c->max_shared_bytes;
    /* the state kernel: 32 columns a block, 16 where that leaves SMs idle */
    p.state_bv = n_seqs * p.HV * (p.Vp / 32) < multiprocessors() ? 16 : 32;
    p.state_buffers = 2;
    p.output_bv = max_slice < p.Vp ? max_slice : p.Vp;
    while (p.output_bv > 16 && chunk_shared_for(p, op_bytes).output > most)
        p.output_bv /= 2;
    if (chunk_shared_for(p, op_bytes).state > most)
        p.state_buffers = 1;
    const chunk_shared shared = chunk_shared_for(p, op_bytes);
    if (shared.prepare > most || shared.state > most || shared.output > most)
        return lacs_cuda_unsupported(op, "K = %d, V = %d: the chunk kernels need %zu, %zu and %zu bytes of "
                                         "shared memory; this device allows %d", p.K, p.V, shared.prepare,
                                     shared.state, shared.output, c->max_shared_bytes);

    /* The chunk table, on the host, then on the device. */
    int64_t n_chunks = 0;
    for (int64_t s = 0; s < n_seqs; s++)
        n_chunks += ((offsets ? offsets[s + 1] - offsets[s] : p.T) + chunk_size - 1) / chunk_size;
    if (n_chunks > 2147483647LL / (p.HV > 0 ? p.HV : 1))
        return lacs_cuda_unsupported(op, "%lld chunks: more than one grid dimension holds", (long long)n_chunks);
    chunk_entry *chunks = (chunk_entry *)malloc((size_t)(n_chunks > 0 ? n_chunks : 1) * sizeof *chunks);
    int *first = (int *)malloc((size_t)(n_seqs + 1) * sizeof *first);
    if (!chunks || !first) {
        free(chunks);
        free(first);
        return lacs_cuda_error(LACS_ERR_MEMORY, op, "out of host memory for the chunk table (%lld chunks)",
                               (long long)n_chunks);
    }
    int64_t ci = 0;
    for (int64_t s = 0; s < n_seqs; s++) {
        const int64_t start = offsets ? offsets[s] : s * p.T, length = offsets ? offsets[s + 1] - offsets[s] : p.T;
        first[s] = (int)ci;
        for (int64_t t0 = start; t0 < start + length; t0 += chunk_size, ci++)
            chunks[ci] = chunk_entry{t0, (int)(start + length - t0 < chunk_size ? start + length - t0 : chunk_size)};
    }
    first[n_seqs] = (int)ci;

    /* The workspace, carved from the cached device buffer in parts aligned to 256 bytes. */
    const size_t entries = (size_t)n_chunks * p.HV, C = chunk_size;
    const bool step = p.step != STEP_NONE;
    size_t parts[8] = {(size_t)(n_chunks > 0 ? n_chunks : 1) * sizeof *chunks, (size_t)(n_seqs + 1) * sizeof *first,
                       entries * C * p.Kg * 4, step ? entries * C * p.Kp * op_bytes : 0, entries * C * p.Vp * 4,
                       entries * C * p.Kp * op_bytes, entries * C * p.Vp * op_bytes, entries * p.Kp * p.Vp * op_bytes};
    size_t at[8], total = 0;
    for (int i = 0; i < 8; i++)
        at[i] = total, total += (parts[i] + 255) / 256 * 256;
    char *base = (char *)lacs_cuda_workspace_acquire(total);
    if (!base) {
        free(chunks);
        free(first);
        return lacs_cuda_error(LACS_ERR_MEMORY, op, "out of device memory for the chunk workspace (%zu bytes: %lld "
                                                    "chunks x %d heads, K = %d, V = %d)", total, (long long)n_chunks,
                               p.HV, p.K, p.V);
    }
    chunk_entry *device_chunks = (chunk_entry *)(base + at[0]);
    int *device_first = (int *)(base + at[1]);
    p.G = (float *)(base + at[2]);
    p.minus_W = step ? base + at[3] : nullptr;
    p.U = (float *)(base + at[4]);
    p.Kdec = base + at[5];
    p.V_new = base + at[6];
    p.S_chunk = base + at[7];
    int rc = LACS_OK;
    if (cudaMemcpy(device_chunks, chunks, (size_t)n_chunks * sizeof *chunks, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(device_first, first, (size_t)(n_seqs + 1) * sizeof *first, cudaMemcpyHostToDevice) != cudaSuccess)
        rc = lacs_cuda_error(LACS_ERR_MEMORY, op, "cannot copy the chunk table to the device");
    if (rc == LACS_OK) {
        p.chunks = device_chunks;
        p.seq_first_chunk = device_first;
        rc = run_chunks(c, p, n_seqs, n_chunks);
        if (rc == LACS_OK && postnorm)
            rc = run_postnorm(c, p, output_rows);
    }
    lacs_cuda_workspace_release(); /* waits for the kernels */
    if (rc == LACS_OK && cudaGetLastError() != cudaSuccess)
        rc = lacs_cuda_error(LACS_ERR_INPUT, op, "a chunk kernel failed: %s", cudaGetErrorString(cudaGetLastError()));
    free(chunks);
    free(first);
    return rc;
}

/* builtin:cuda, the delta-rule family (optimized/cuda/README.md section 2): delta_rule (H6),
 * gated_delta_rule with a scalar gate g (H8, first form) and efla (E5), by
 * the chunkwise WY/UT algorithm (H7 per chunk, H9 within it) on tensor cores,
 * with a fused recurrent kernel for decoding.
 *
 * A sequence is cut into chunks of C = 64 tokens (the last may be shorter).
 * In a chunk of n tokens entering with the state S [K x V], with G_i the fp32
 * sum of the log decays of tokens 0..i of the chunk (0 without a gate) and b_i
 * the step size (beta; EFLA's c_i = -expm1(-beta |k_i|^2) / |k_i|^2):
 *
 *   A_ij  = b_i exp(G_i - G_j) k_i . k_j            j < i, else 0
 *   T     = (I + A)^{-1}                            forward substitution
 *   -W    = T (-b exp(G) (.) K),  U = T (b (.) V)   the WY/UT form (H7)
 *   V'    = U + (-W) S                              the corrected values
 *   O     = scale exp(G) (.) (Q S) + P V',          P_ij = scale exp(G_i - G_j) q_i . k_j, j <= i
 *   S    <- exp(G_last) S + (exp(G_last - G) (.) K)^T V'
 *
 * (recurrent.c of builtin:cpu is the same algorithm.) exp is taken only of
 * G_i - G_j (i >= j), G_i and G_last - G_i, all <= 0 for gates g <= 0: nothing
 * overflows however strong the decay.
 *
 * Three kernels, as fla's chunk_gated_delta_rule is built, so that only the
 * state's recurrence is sequential:
 *   1. prepare_kernel, one block per (chunk, value head), all in parallel:
 *      G, A, T, -W and U, into a device workspace;
 *   2. state_kernel, one block per (sequence, value head, slice of 32 value
 *      columns), walking the sequence's chunks in order: it keeps its K x 32
 *      slice of S in shared memory, in fp32, stores the state each chunk
 *      starts from, forms V' = U - W S and updates S; at the end, ht;
 *   3. output_kernel, one block per (chunk, value head, slice of value
 *      columns), all in parallel: O = scale exp(G) (.) (Q S_chunk) + P V'.
 * The workspace holds, per (chunk, value head): G [C], -W [C x Kp], U [C x Vp]
 * (fp32), V' [C x Vp] and S_chunk [Kp x Vp]: O(T (K + V) + (T / C) K V) per
 * head, as fla's.
 *
 * Products: every one a lacs_block_gemm on shared memory. In the bf16 tier
 * the operands are rounded to bf16 where they are handed to a product (the
 * scaled and decayed K, b V, T, -W, S, V', P; q, k and v are bf16 already) and
 * the tensor cores accumulate in fp32 (WMMA 16 x 16 x 16); the state, U, the
 * outputs and every exp stay fp32 (SPEC.md 11.1): the roundings builtin:cpu
 * makes. In the fp32 tier everything is fp32 on the CUDA cores. Shapes are
 * padded with zeros (K to Kp, a multiple of 16; V to Vp, of 32 or 64; rows n..C-1 of a
 * short chunk are zero keys with b = 0): padded rows and columns stay zero
 * through every step, so they change nothing.
 *
 * Decoding (decode_kernel). When every sequence is one token long, the
 * recurrence itself (H6/H8/E5 as the reference orders it: decay, correct,
 * write, read), fused: one thread per value column reads its column of h0
 * from global memory, and writes its column of ht and its output. The state is
 * read once and written once; the kernel is memory-bound, as decoding is.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

const int chunk_size = 64;  /* C */
const int block_threads = 256;
const int state_slice = 32; /* value columns per block of the state kernel */
const int max_slice = 64;   /* value columns per block of the output kernel, at most */
const int decode_threads = 128;
const int max_padded_k = 256;

enum step_kind { STEP_BETA = 1, STEP_EFLA = 2 };

/* A chunk: its first token (flattened over B x T, or the packed row with
 * cu_seqlens) and its length. */
struct chunk_entry {
    int64_t t0;
    int n;
};

/* What every kernel needs, passed by value. Token t of q/k head h: ((t H + h)
 * K + c); of value head hv: ((t HV + hv) V + j); beta and g: t HV + hv; the
 * state of sequence s: ((s HV + hv) K + c) V + j. Workspace entry (chunk ci,
 * value head hv): index ci HV + hv. */
struct recurrent_params {
    lacs_view q, k, v, beta, g, h0;
    float *o, *ht;                 /* ht: NULL when not asked for */
    const int64_t *cu_seqlens;     /* device; NULL: sequence s is tokens s T .. s T + T - 1 */
    int64_t T;
    int H, HV, K, V, Kp, Vp;
    int step;
    float scale;
    /* the chunks and the workspace */
    const chunk_entry *chunks;
    const int *seq_first_chunk;    /* [n_seqs + 1]: sequence s has chunks first[s] .. first[s + 1] - 1 */
    float *G;                      /* [chunks x HV][C] */
    void *minus_W;                 /* [chunks x HV][C x Kp], operands */
    float *U;                      /* [chunks x HV][C x Vp] */
    void *V_new;                   /* [chunks x HV][C x Vp], operands */
    void *S_chunk;                 /* [chunks x HV][Kp x Vp], operands: the state each chunk starts from */
};

__device__ __forceinline__ void sequence_tokens(const recurrent_params &p, int64_t seq, int64_t *start,
                                                int64_t *length)
{
    if (p.cu_seqlens) {
        *start = p.cu_seqlens[seq];
        *length = p.cu_seqlens[seq + 1] - p.cu_seqlens[seq];
    } else {
        *start = seq * p.T;
        *length = p.T;
    }
}

/* b_t: beta, or EFLA's c = -expm1(-beta |k|^2) / |k|^2 (E5; beta in the limit |k| -> 0;
 * expm1: no cancellation when beta |k|^2 is small). k_row: the index of k_t's first entry. */
__device__ __forceinline__ float step_size(const recurrent_params &p, int64_t t, int hv, int64_t k_row)
{
    const float beta = lacs_view_at(p.beta, t * p.HV + hv);
    if (p.step == STEP_BETA)
        return beta;
    float knorm2 = 0.0f;
    for (int c = 0; c < p.K; c++) {
        const float kc = lacs_view_at(p.k, k_row + c);
        knorm2 += kc * kc;
    }
    return knorm2 == 0.0f ? beta : -expm1f(-beta * knorm2) / knorm2;
}

__host__ __device__ inline size_t round_128(size_t bytes) { return (bytes + 127) / 128 * 128; }

/* Loads rows t0 .. t0 + n - 1 of q or k (head h) into X [C x Kp] as operands, zero-padded. */
template <typename Op>
__device__ void load_keys(const recurrent_params &p, lacs_view x, int64_t t0, int n, int h, Op *X)
{
    for (int idx = (int)threadIdx.x; idx < chunk_size * p.Kp; idx += (int)blockDim.x) {
        const int i = idx / p.Kp, c = idx % p.Kp;
        lacs_store_operand(&X[idx], i < n && c < p.K ? lacs_view_at(x, ((t0 + i) * p.H + h) * p.K + c) : 0.0f);
    }
}

/* ---- 1. prepare: G, A, T, -W, U for one (chunk, value head) ---- */

struct prepare_layout {
    size_t Kop, Top, A32, slice_op, slice32, b, total;
};

__host__ __device__ inline prepare_layout prepare_layout_for(int Kp, size_t op_bytes)
{
    const size_t C = chunk_size;
    prepare_layout l;
    size_t at = 0;
    l.Kop = at, at += round_128(C * Kp * op_bytes);
    l.Top = at, at += round_128(C * C * op_bytes);
    l.A32 = at, at += round_128(C * C * 4);
    l.slice_op = at, at += round_128(C * max_slice * op_bytes);
    l.slice32 = at, at += round_128(C * max_slice * 4);
    l.b = at, at += round_128(C * 4);
    l.total = at;
    return l;
}

template <typename Op>
__global__ void __launch_bounds__(block_threads) prepare_kernel(recurrent_params p)
{
    const int C = chunk_size, Kp = p.Kp, Vp = p.Vp, tid = (int)threadIdx.x, threads = (int)blockDim.x;
    const int64_t ci = blockIdx.x;
    const int hv = (int)blockIdx.y, h = hv / (p.HV / p.H);
    const chunk_entry chunk = p.chunks[ci];
    const int64_t t0 = chunk.t0, entry = ci * p.HV + hv;
    const int n = chunk.n;

    const prepare_layout l = prepare_layout_for(Kp, sizeof(Op));
    unsigned char *shared = lacs_shared_memory();
    Op *Kop = (Op *)(shared + l.Kop), *Top = (Op *)(shared + l.Top), *slice_op = (Op *)(shared + l.slice_op);
    float *A32 = (float *)(shared + l.A32), *slice32 = (float *)(shared + l.slice32), *b = (float *)(shared + l.b);
    float *G = p.G + entry * C;

    /* The keys; the step sizes; the gates (kept in slice32 until they are summed). */
    load_keys(p, p.k, t0, n, h, Kop);
    if (tid < C) {
        const int i = tid;
        b[i] = i < n ? step_size(p, t0 + i, hv, ((t0 + i) * p.H + h) * p.K) : 0.0f;
        slice32[i] = i < n && p.g.data ? lacs_view_at(p.g, (t0 + i) * p.HV + hv) : 0.0f;
    }
    __syncthreads();
    if (tid == 0) { /* G: the inclusive sums in token order (fp32, at most 64 terms: SPEC.md 11.1) */
        float sum = 0.0f;
        for (int i = 0; i < C; i++) {
            sum += slice32[i];
            G[i] = sum;
        }
    }
    __syncthreads(); /* G is global memory written by one thread: the barrier orders it for the block */

    /* A = K K^T, then b_i exp(G_i - G_j) below the diagonal */
    lacs_block_gemm<false, true>(Kop, Kp, Kop, Kp, A32, C, C, C, Kp, false);
    __syncthreads();
    for (int idx = tid; idx < C * C; idx += threads) {
        const int i = idx / C, j = idx % C;
        A32[idx] = j < i ? A32[idx] * b[i] * expf(G[i] - G[j]) : 0.0f;
    }
    __syncthreads();

    /* T = (I + A)^{-1}: column c is independent of the others, T_ic = -sum_{c <= j < i} A_ij T_jc
     * (T_cc = 1), so thread c solves it down the rows, in fp32, with no barrier. */
    if (tid < C) {
        const int c = tid;
        float column[chunk_size];
        for (int i = 0; i < C; i++) {
            float t = 0.0f;
            if (i == c)
                t = 1.0f;
            else if (i > c)
                for (int j = c; j < i; j++)
                    t -= A32[i * C + j] * column[j];
            column[i] = t;
            lacs_store_operand(&Top[i * C + c], t);
        }
    }
    __syncthreads();

    /* -W = T (-b exp(G) (.) K), 64 key columns at a time */
    Op *minus_W = (Op *)p.minus_W + entry * C * Kp;
    for (int c0 = 0; c0 < Kp; c0 += max_slice) {
        const int width = Kp - c0 < max_slice ? Kp - c0 : max_slice;
        for (int idx = tid; idx < C * width; idx += threads) {
            const int i = idx / width, c = idx % width;
            lacs_store_operand(&slice_op[idx], -b[i] * expf(G[i]) * lacs_operand_value(Kop[i * Kp + c0 + c]));
        }
        __syncthreads();
        lacs_block_gemm<false, false>(Top, C, slice_op, width, slice32, width, C, width, C, false);
        __syncthreads();
        for (int idx = tid; idx < C * width; idx += threads)
            lacs_store_operand(&minus_W[(idx / width) * Kp + c0 + idx % width], slice32[idx]);
        __syncthreads();
    }

    /* U = T (b (.) V), 64 value columns at a time, kept in fp32 */
    float *U = p.U + entry * C * Vp;
    for (int j0 = 0; j0 < Vp; j0 += max_slice) {
        const int width = Vp - j0 < max_slice ? Vp - j0 : max_slice;
        for (int idx = tid; idx < C * width; idx += threads) {
            const int i = idx / width, j = j0 + idx % width;
            const float v = i < n && j < p.V ? lacs_view_at(p.v, ((t0 + i) * p.HV + hv) * p.V + j) : 0.0f;
            lacs_store_operand(&slice_op[idx], b[i] * v);
        }
        __syncthreads();
        lacs_block_gemm<false, false>(Top, C, slice_op, width, slice32, width, C, width, C, false);
        __syncthreads();
        for (int idx = tid; idx < C * width; idx += threads)
            U[(idx / width) * Vp + j0 + idx % width] = slice32[idx];
        __syncthreads();
    }
}

/* ---- 2. state: the sequential walk over a sequence's chunks ---- */

struct state_layout {
    size_t S32, Sop, Wop, Kdec, U32, Vop, total;
};

__host__ __device__ inline state_layout state_layout_for(int Kp, size_t op_bytes)
{
    const size_t C = chunk_size, BV = state_slice;
    state_layout l;
    size_t at = 0;
    l.S32 = at, at += round_128(Kp * BV * 4);
    l.Sop = at, at += round_128(Kp * BV * op_bytes);
    l.Wop = at, at += round_128(C * Kp * op_bytes);
    l.Kdec = at, at += round_128(C * Kp * op_bytes);
    l.U32 = at, at += round_128(C * BV * 4);
    l.Vop = at, at += round_128(C * BV * op_bytes);
    l.total = at;
    return l;
}

template <typename Op>
__global__ void __launch_bounds__(block_threads) state_kernel(recurrent_params p)
{
    const int C = chunk_size, BV = state_slice, Kp = p.Kp, Vp = p.Vp, K = p.K, V = p.V;
    const int tid = (int)threadIdx.x, threads = (int)blockDim.x;
    const int64_t seq = blockIdx.x / p.HV;
    const int hv = (int)(blockIdx.x % p.HV), h = hv / (p.HV / p.H);
    const int v0 = (int)blockIdx.y * BV;

    const state_layout l = state_layout_for(Kp, sizeof(Op));
    unsigned char *shared = lacs_shared_memory();
    float *S32 = (float *)(shared + l.S32), *U32 = (float *)(shared + l.U32);
    Op *Sop = (Op *)(shared + l.Sop), *Wop = (Op *)(shared + l.Wop), *Kdec = (Op *)(shared + l.Kdec);
    Op *Vop = (Op *)(shared + l.Vop);
    const int64_t state_base = (seq * p.HV + hv) * (int64_t)K * V;

    /* S: h0's slice, or zeros (columns past V and rows past K stay zero). */
    for (int idx = tid; idx < Kp * BV; idx += threads) {
        const int c = idx / BV, j = idx % BV;
        const float s = p.h0.data && c < K && v0 + j < V ? lacs_view_at(p.h0, state_base + (int64_t)c * V + v0 + j)
                                                         : 0.0f;
        S32[idx] = s;
        lacs_store_operand(&Sop[idx], s);
    }
    __syncthreads();

    for (int ci = p.seq_first_chunk[seq]; ci < p.seq_first_chunk[seq + 1]; ci++) {
        const chunk_entry chunk = p.chunks[ci];
        const int64_t entry = (int64_t)ci * p.HV + hv;
        const int n = chunk.n;
        const float *G = p.G + entry * C;
        const float G_last = G[n - 1];

        /* The state this chunk starts from, for the output kernel; -W; U's slice; the decayed keys. */
        Op *S_chunk = (Op *)p.S_chunk + entry * Kp * Vp;
        for (int idx = tid; idx < Kp * BV; idx += threads)
            S_chunk[(idx / BV) * Vp + v0 + idx % BV] = Sop[idx];
        const Op *minus_W = (const Op *)p.minus_W + entry * C * Kp;
        for (int idx = tid; idx < C * Kp; idx += threads)
            Wop[idx] = minus_W[idx];
        const float *U = p.U + entry * C * Vp;
        for (int idx = tid; idx < C * BV; idx += threads)
            U32[idx] = U[(idx / BV) * Vp + v0 + idx % BV];
        for (int idx = tid; idx < C * Kp; idx += threads) {
            const int i = idx / Kp, c = idx % Kp;
            const float kc = i < n && c < K ? lacs_view_at(p.k, ((chunk.t0 + i) * p.H + h) * K + c) : 0.0f;
            lacs_store_operand(&Kdec[idx], i < n ? expf(G_last - G[i]) * kc : 0.0f);
        }
        __syncthreads();

        /* V' = U + (-W) S */
        lacs_block_gemm<false, false>(Wop, Kp, Sop, BV, U32, BV, C, BV, Kp, true);
        __syncthreads();

        /* V' as an operand, here and for the output kernel; S *= exp(G_last) */
        Op *V_new = (Op *)p.V_new + entry * C * Vp;
        for (int idx = tid; idx < C * BV; idx += threads) {
            lacs_store_operand(&Vop[idx], U32[idx]);
            V_new[(idx / BV) * Vp + v0 + idx % BV] = Vop[idx];
        }
        const float state_decay = expf(G_last);
        for (int idx = tid; idx < Kp * BV; idx += threads)
            S32[idx] *= state_decay;
        __syncthreads();

        /* S += (exp(G_last - G) (.) K)^T V' */
        lacs_block_gemm<true, false>(Kdec, Kp, Vop, BV, S32, BV, Kp, BV, C, true);
        __syncthreads();
        for (int idx = tid; idx < Kp * BV; idx += threads) {
#ifdef LACS_CUDA_MUTANT_STATE_BF16
            /* A deliberately wrong kernel, built only for the tests (make test-cuda): the state kept in
             * bf16 between chunks. The suite must reject it. */
            S32[idx] = lacs_bf16_to_float(lacs_float_to_bf16(S32[idx]));
#endif
            lacs_store_operand(&Sop[idx], S32[idx]);
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
    size_t Qop, Kop, Sop, Vop, Pop, A32, O32, total;
};

__host__ __device__ inline output_layout output_layout_for(int Kp, int BV, size_t op_bytes)
{
    const size_t C = chunk_size;
    output_layout l;
    size_t at = 0;
    l.Qop = at, at += round_128(C * Kp * op_bytes);
    l.Kop = at, at += round_128(C * Kp * op_bytes);
    l.Sop = at, at += round_128((size_t)Kp * BV * op_bytes);
    l.Vop = at, at += round_128(C * BV * op_bytes);
    l.Pop = at, at += round_128(C * C * op_bytes);
    l.A32 = at, at += round_128(C * C * 4);
    l.O32 = at, at += round_128(C * BV * 4);
    l.total = at;
    return l;
}

template <typename Op>
__global__ void __launch_bounds__(block_threads) output_kernel(recurrent_params p, int BV)
{
    const int C = chunk_size, Kp = p.Kp, Vp = p.Vp, V = p.V, tid = (int)threadIdx.x, threads = (int)blockDim.x;
    const int64_t ci = blockIdx.x;
    const int hv = (int)blockIdx.y, h = hv / (p.HV / p.H), v0 = (int)blockIdx.z * BV;
    const chunk_entry chunk = p.chunks[ci];
    const int64_t t0 = chunk.t0, entry = ci * p.HV + hv;
    const int n = chunk.n;
    const float *G = p.G + entry * C;

    const output_layout l = output_layout_for(Kp, BV, sizeof(Op));
    unsigned char *shared = lacs_shared_memory();
    Op *Qop = (Op *)(shared + l.Qop), *Kop = (Op *)(shared + l.Kop), *Sop = (Op *)(shared + l.Sop);
    Op *Vop = (Op *)(shared + l.Vop), *Pop = (Op *)(shared + l.Pop);
    float *A32 = (float *)(shared + l.A32), *O32 = (float *)(shared + l.O32);

    load_keys(p, p.q, t0, n, h, Qop);
    load_keys(p, p.k, t0, n, h, Kop);
    const Op *S_chunk = (const Op *)p.S_chunk + entry * Kp * Vp, *V_new = (const Op *)p.V_new + entry * C * Vp;
    for (int idx = tid; idx < Kp * BV; idx += threads)
        Sop[idx] = S_chunk[(idx / BV) * Vp + v0 + idx % BV];
    for (int idx = tid; idx < C * BV; idx += threads)
        Vop[idx] = V_new[(idx / BV) * Vp + v0 + idx % BV];
    __syncthreads();

    /* O = Q S (scaled by rows below); A = Q K^T */
    lacs_block_gemm<false, false>(Qop, Kp, Sop, BV, O32, BV, C, BV, Kp, false);
    lacs_block_gemm<false, true>(Qop, Kp, Kop, Kp, A32, C, C, C, Kp, false);
    __syncthreads();

    /* P = scale exp(G_i - G_j) q_i . k_j on and below the diagonal; O_i *= scale exp(G_i): the read of
     * the decayed state, scaled after the product, in fp32 */
    for (int idx = tid; idx < C * C; idx += threads) {
        const int i = idx / C, j = idx % C;
        lacs_store_operand(&Pop[idx], j <= i ? A32[idx] * p.scale * expf(G[i] - G[j]) : 0.0f);
    }
    for (int idx = tid; idx < C * BV; idx += threads)
        O32[idx] *= p.scale * expf(G[idx / BV]);
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

/* ---- the decode kernel ---- */

/* One token per sequence: thread j of block (sequence x value head, slice)
 * owns value column j. u_j = sum_c alpha S_cj k_c reads the decayed state;
 * u'_j = b (v_j - u_j); S'_cj = alpha S_cj + k_c u'_j; o_j = scale sum_c S'_cj q_c.
 * The column of h0 is read twice (the second time from cache). No barrier:
 * a thread past V returns at once. */
__global__ void __launch_bounds__(decode_threads) decode_kernel(recurrent_params p)
{
    const int64_t seq = blockIdx.x / p.HV;
    const int hv = (int)(blockIdx.x % p.HV), h = hv / (p.HV / p.H);
    const int j = (int)(blockIdx.y * blockDim.x + threadIdx.x), K = p.K, V = p.V;
    if (j >= V)
        return;
    int64_t t, length;
    sequence_tokens(p, seq, &t, &length);
    const int64_t state = (seq * p.HV + hv) * (int64_t)K * V + j, qk = (t * p.H + h) * K;
    const float alpha = p.g.data ? expf(lacs_view_at(p.g, t * p.HV + hv)) : 1.0f;
    const float b = step_size(p, t, hv, qk);

    float u = 0.0f;
    for (int c = 0; c < K && p.h0.data; c++)
        u += alpha * lacs_view_at(p.h0, state + (int64_t)c * V) * lacs_view_at(p.k, qk + c);
    const float write = b * (lacs_view_at(p.v, (t * p.HV + hv) * V + j) - u);
    float out = 0.0f;
    for (int c = 0; c < K; c++) {
        const float s0 = p.h0.data ? lacs_view_at(p.h0, state + (int64_t)c * V) : 0.0f;
        const float s = alpha * s0 + lacs_view_at(p.k, qk + c) * write;
        out += s * lacs_view_at(p.q, qk + c);
        if (p.ht)
            p.ht[state + (int64_t)c * V] = s;
    }
    p.o[(t * p.HV + hv) * V + j] = p.scale * out;
}

/* ---- the family ---- */

static int round_16(int64_t x) { return (int)((x + 15) / 16 * 16); }

/* The device memory of one call: the chunk table and the workspace, freed together. */
struct workspace {
    void *buffers[7];
    int n;
};

static void *workspace_alloc(workspace *w, size_t bytes)
{
    void *p = nullptr;
    if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess)
        return nullptr;
    w->buffers[w->n++] = p;
    return p;
}

static void workspace_free(workspace *w)
{
    for (int i = 0; i < w->n; i++)
        cudaFree(w->buffers[i]);
    w->n = 0;
}

/* The three chunk kernels, in order, on the workspace's buffers. */
static int run_chunks(const lacs_cuda_call *c, recurrent_params p, int64_t n_seqs, int64_t n_chunks, int output_bv)
{
    const char *op = c->op;
    const size_t op_bytes = c->bf16 ? 2 : 4;
    const int HV = p.HV;
    const size_t prepare_shared = prepare_layout_for(p.Kp, op_bytes).total;
    const size_t state_shared = state_layout_for(p.Kp, op_bytes).total;
    const size_t output_shared = output_layout_for(p.Kp, output_bv, op_bytes).total;
    const dim3 threads(block_threads);
    cudaError_t e = cudaSuccess;
    if (n_chunks > 0) {
        const dim3 grid((unsigned)n_chunks, (unsigned)HV);
        e = c->bf16 ? lacs_launch(prepare_kernel<unsigned short>, grid, threads, prepare_shared, p)
                    : lacs_launch(prepare_kernel<float>, grid, threads, prepare_shared, p);
        if (e != cudaSuccess)
            return lacs_cuda_launch_failed(op, "prepare_kernel", e);
    }
    {
        const dim3 grid((unsigned)(n_seqs * HV), (unsigned)((p.V + state_slice - 1) / state_slice));
        e = c->bf16 ? lacs_launch(state_kernel<unsigned short>, grid, threads, state_shared, p)
                    : lacs_launch(state_kernel<float>, grid, threads, state_shared, p);
        if (e != cudaSuccess)
            return lacs_cuda_launch_failed(op, "state_kernel", e);
    }
    if (n_chunks > 0) {
        const dim3 grid((unsigned)n_chunks, (unsigned)HV, (unsigned)((p.V + output_bv - 1) / output_bv));
        e = c->bf16 ? lacs_launch(output_kernel<unsigned short>, grid, threads, output_shared, p, output_bv)
                    : lacs_launch(output_kernel<float>, grid, threads, output_shared, p, output_bv);
        if (e != cudaSuccess)
            return lacs_cuda_launch_failed(op, "output_kernel", e);
    }
    return LACS_OK;
}

int lacs_cuda_recurrent(const lacs_cuda_call *c)
{
    const char *op = c->op;
    const int delta = strcmp(op, "delta_rule") == 0, gated = strcmp(op, "gated_delta_rule") == 0,
              efla = strcmp(op, "efla") == 0;
    if (!delta && !gated && !efla)
        return lacs_cuda_unsupported(op, "of the recurrent family builtin:cuda implements delta_rule, "
                                         "gated_delta_rule (scalar g) and efla");
    if (lacs_cuda_input(c, "gk"))
        return lacs_cuda_unsupported(op, "the per-channel decay gk (builtin:cuda implements the scalar gate g)");

    const lacs_cuda_tensor *q = lacs_cuda_input(c, "q"), *v = lacs_cuda_input(c, "v"),
                           *cu = lacs_cuda_input(c, "cu_seqlens");
    lacs_cuda_tensor *o = lacs_cuda_output(c, "o"), *ht = lacs_cuda_output(c, "ht");
    if (!o)
        return lacs_cuda_error(LACS_ERR_INPUT, op, "output 'o' is required");
    recurrent_params p;
    memset(&p, 0, sizeof p);
    p.q = lacs_view_of(q);
    p.k = lacs_view_of(lacs_cuda_input(c, "k"));
    p.v = lacs_view_of(v);
    p.beta = lacs_view_of(lacs_cuda_input(c, "beta"));
    p.g = lacs_view_of(lacs_cuda_input(c, "g"));
    p.h0 = lacs_view_of(lacs_cuda_input(c, "h0"));
    p.o = (float *)o->device;
    p.ht = ht ? (float *)ht->device : nullptr;
    p.cu_seqlens = cu ? (const int64_t *)cu->device : nullptr;
    p.T = q->shape[1];
    p.H = (int)q->shape[2];
    p.K = (int)q->shape[3];
    p.HV = (int)v->shape[2];
    p.V = (int)v->shape[3];
    p.step = efla ? STEP_EFLA : STEP_BETA;
    p.scale = (float)lacs_cuda_param(c, "scale", 1.0 / sqrt((double)p.K));
    const int64_t n_seqs = cu ? cu->shape[0] - 1 : q->shape[0];
    const int64_t *offsets = cu ? (const int64_t *)cu->host : nullptr;
    if (n_seqs == 0 || p.HV == 0 || p.V == 0)
        return LACS_OK; /* nothing to compute: the outputs are empty */
    if (n_seqs * p.HV > 2147483647LL)
        return lacs_cuda_unsupported(op, "%lld sequence heads: more than one grid dimension holds",
                                     (long long)(n_seqs * p.HV));

    /* Decoding: every sequence one token long. */
    int all_single = 1;
    for (int64_t s = 0; s < n_seqs && all_single; s++)
        all_single = (offsets ? offsets[s + 1] - offsets[s] : p.T) == 1;
    if (all_single) {
        const dim3 grid((unsigned)(n_seqs * p.HV), (unsigned)((p.V + decode_threads - 1) / decode_threads));
        cudaError_t e = lacs_launch(decode_kernel, grid, dim3(decode_threads), 0, p);
        return e == cudaSuccess ? LACS_OK : lacs_cuda_launch_failed(op, "decode_kernel", e);
    }

    p.Kp = round_16(p.K > 0 ? p.K : 1);
    /* V padded so that every value slice (32 columns in the state kernel; 64, 32 or 16 in the output
     * kernel) lies inside a row of the workspace */
    p.Vp = p.V > state_slice ? (p.V + max_slice - 1) / max_slice * max_slice : state_slice;
    if (p.Kp > max_padded_k)
        return lacs_cuda_unsupported(op, "K = %d: the chunk kernels hold K <= %d in shared memory", p.K,
                                     max_padded_k);
    const size_t op_bytes = c->bf16 ? 2 : 4;
    int output_bv = max_slice < p.Vp ? max_slice : p.Vp;
    while (output_bv > 16 && output_layout_for(p.Kp, output_bv, op_bytes).total > (size_t)c->max_shared_bytes)
        output_bv /= 2;
    const size_t most = (size_t)c->max_shared_bytes;
    if (prepare_layout_for(p.Kp, op_bytes).total > most || state_layout_for(p.Kp, op_bytes).total > most ||
        output_layout_for(p.Kp, output_bv, op_bytes).total > most)
        return lacs_cuda_unsupported(op, "K = %d: the chunk kernels do not fit this device's %d bytes of shared "
                                         "memory", p.K, c->max_shared_bytes);

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

    workspace w = {};
    const size_t entries = (size_t)n_chunks * p.HV, C = chunk_size;
    chunk_entry *device_chunks = (chunk_entry *)workspace_alloc(&w, (size_t)(n_chunks > 0 ? n_chunks : 1) *
                                                                        sizeof *chunks);
    int *device_first = (int *)workspace_alloc(&w, (size_t)(n_seqs + 1) * sizeof *first);
    p.G = (float *)workspace_alloc(&w, entries * C * 4);
    p.minus_W = workspace_alloc(&w, entries * C * p.Kp * op_bytes);
    p.U = (float *)workspace_alloc(&w, entries * C * p.Vp * 4);
    p.V_new = workspace_alloc(&w, entries * C * p.Vp * op_bytes);
    p.S_chunk = workspace_alloc(&w, entries * p.Kp * p.Vp * op_bytes);
    int rc = LACS_OK;
    if (w.n < 7)
        rc = lacs_cuda_error(LACS_ERR_MEMORY, op, "out of device memory for the chunk workspace (%lld chunks x %d "
                                                  "heads, K = %d, V = %d)", (long long)n_chunks, p.HV, p.K, p.V);
    else if (cudaMemcpy(device_chunks, chunks, (size_t)n_chunks * sizeof *chunks, cudaMemcpyHostToDevice) !=
                 cudaSuccess ||
             cudaMemcpy(device_first, first, (size_t)(n_seqs + 1) * sizeof *first, cudaMemcpyHostToDevice) !=
                 cudaSuccess)
        rc = lacs_cuda_error(LACS_ERR_MEMORY, op, "cannot copy the chunk table to the device");
    if (rc == LACS_OK) {
        p.chunks = device_chunks;
        p.seq_first_chunk = device_first;
        rc = run_chunks(c, p, n_seqs, n_chunks, output_bv);
        /* the workspace must outlive the kernels */
        if (rc == LACS_OK && cudaDeviceSynchronize() != cudaSuccess)
            rc = lacs_cuda_error(LACS_ERR_INPUT, op, "a chunk kernel failed: %s", cudaGetErrorString(cudaGetLastError()));
    }
    workspace_free(&w);
    free(chunks);
    free(first);
    return rc;
}

/* builtin:cuda: the attention family, path_attn (PaTH attention, H12;
 * SPEC.md 4.12; optimized/cuda/README.md section 4). softmax_attn, fox and
 * deltaformer are in flash.cu.
 *
 * The op. H_t = I - beta_t w_t w_t^T, R_ij = H_i H_{i-1} ... H_{j+1}
 * (R_jj = I), l_ij = scale (q_i^T R_ij k_j + G_i - G_j) for j <= i (the log
 * forget gate g of PaTH-FoX, optional, summed as G_i - G_j =
 * sum_{tau=j+1..i} g_tau, added *before* the scale), o_i = sum_j
 * softmax_j(l_ij) v_j. Value head hv reads q/k/w head hv / (HV / H) and its
 * own beta, g and v.
 *
 * The algorithm: builtin:cpu's blocked form (optimized/cpu/README.md section 5) as a
 * FlashAttention-style forward. Each sequence is cut into blocks of BT tokens
 * (64, or 32/16 when the head sizes need less shared memory); the same blocks
 * are query blocks, key blocks and blocks of transitions.
 *
 *   1. lacs_gate_scan_kernel (attention_common.cuh; PaTH-FoX only): per (sequence, value head), G_t, the
 *      fp32 prefix sum of g since the sequence's start or the last hard reset
 *      (g_t = -inf), and that reset's token first_visible[t] (key j is
 *      visible from query i iff first_visible[i] <= j <= i, so that
 *      -inf - (-inf) never occurs), by a segmented Hillis-Steele scan.
 *   2. path_transitions_kernel: per (block, value head), the UT transform of
 *      the block's transitions, with L the strictly lower part of W W^T:
 *        U  = (I + diag(beta) L)^{-1} diag(beta) W, so that
 *             H_0 H_1 ... H_m = I - sum_{t<=m} u_t w_t^T;
 *        DC = (I + diag(beta) L)^{-1} diag(beta) ((W K^T) (.) [t > j]), so
 *             that H_i ... H_{j+1} k_j = k_j - sum_{j<t<=i} DC_tj w_t;
 *      and from them the keys carried to the block's end e,
 *      K~ = K - DC^T W (k~_j = H_e ... H_{j+1} k_j), and the block's product
 *      as a K x K matrix less the identity, M - I = -W^T U (y^T M =
 *      (H_0 ... H_e y)^T). Stored negated (-U, -DC, M - I) so that every
 *      product accumulates.
 *   3. path_attend_kernel: per (query block a, value head), the online
 *      softmax over the key blocks b = a, a-1, ..., 0:
 *        diagonal  l = Q K_a^T - ((Q W_a^T) (.) [t <= i]) DC_a  (H12's matrix
 *                  form within the block), and the queries carried to the
 *                  block's start, Y = Q - ((Q W_a^T) (.) [t <= i]) U_a
 *                  (y_i = H_a0 ... H_i q_i);
 *        earlier   l = Y K~_b^T (q_i^T R_ij k_j = y_i . k~_j), then
 *                  Y <- Y + Y (M_b - I) for the block before;
 *      each block's logits through the running maximum m_i and sum Z_i
 *      (the accumulator N_i rescaled by exp(m_old - m_new) as m_i grows),
 *      N_i += P V_b, o_i = N_i / Z_i at the end. The diagonal block comes
 *      first, so every row has its maximum at once; with hard resets the
 *      walk stops at the first block no query of the block sees.
 *
 * Parallel decomposition. Grids are (blocks of every sequence, HV): one CTA
 * of 256 threads (8 warps) per (sequence, block, value head), the latest
 * query blocks (the longest walks) launched first. Every product is a
 * block-wide lacs_block_gemm on shared memory (bf16: WMMA on the tensor
 * cores, one warp per 16 x 16 output tile; fp32: the CUDA cores). The softmax
 * step is one warp per query row (lanes over the keys, shuffles for the row's
 * maximum and sum); the UT solve is one thread per column of [U | DC] (each
 * column's forward substitution is independent: no barrier inside it); the
 * scan is block-wide.
 *
 * Numerics. fp32 tier: fp32 throughout (every product an fmaf chain).
 * bf16 tier: every operand is rounded to bf16 where it is handed to a
 * product, with fp32 accumulation: the inputs (exact), -U, -DC, K~, M - I
 * (rounded once, in the workspace), (Q W^T) (.) [t <= i], the carried
 * queries Y (rounded copy for the products; Y itself stays fp32 and only its
 * correction Y (M - I) is computed from the rounded copy) and the
 * probabilities P (FlashAttention's P in bf16; Z_i sums the rounded P, so
 * that o_i is an exact convex combination of the rows of V with the weights
 * as rounded). The UT solve, the logits, the softmax statistics (m_i, Z_i),
 * the gates and N_i are fp32 in both tiers; exp is the device's expf. The
 * outputs are fp32, not rounded.
 *
 * Memory. Workspace per (block, value head): -U and K~ [BT x K], -DC
 * [BT x BT], M - I [K x K], in the operand type: O(T (K + K^2 / BT)) per head,
 * never a T x T matrix; gates 12 bytes per (token, value head). Traffic: the
 * transitions kernel reads w, k once per value head and writes the workspace
 * once; the attend kernel reads per (query block, earlier key block) K~_b,
 * M_b - I and V_b (L2-resident at the sizes of interest), and writes o once.
 * Work per query-key pair: 2 (K + V) + 2 K^2 / BT flops (the last carries the
 * queries; at K = BT it equals the logits' own 2 K).
 * Head sizes are padded with zeros to multiples of 16 (Kp, Vp). Shared
 * memory: BT is the largest of 64, 32, 16 that fits the device's limit, and
 * M - I is staged whole when it fits, else in panels of rows (the transitions
 * kernel forms it in panels of columns), so that K = V = 256 runs (bf16:
 * BT = 32; fp32: BT = 32, panels of 48 rows); K or V too large for even
 * BT = 16 is LACS_UNSUPPORTED, with the bytes it would need.
 */
#include <math.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "attention_common.cuh"

/* Threads per CTA, every kernel: 8 warps, enough WMMA tiles in flight for a
 * 64 x 64 block and 8 query rows per warp in the softmax step. */
#define PATH_THREADS 256

/* ---- shapes shared by the host and the kernels ---- */

/* One block of one sequence: its tokens start + block * bt .. (the block's
 * rows: min(bt, length - block * bt)) and its index in the workspace. */
struct path_block {
    int64_t start;  /* the sequence's first token on the flattened axis */
    int64_t length; /* the sequence's tokens */
    int64_t block;  /* the block within the sequence */
    int64_t index;  /* the block within every sequence's blocks (workspace index) */
};

/* Everything a kernel needs, by value. */
struct path_args {
    lacs_view q, k, v, w, beta, g;
    const int64_t *cu_seqlens; /* device, or NULL: B sequences of T tokens */
    const path_block *blocks;  /* device, [n_blocks], latest blocks first */
    int64_t n_blocks;
    int64_t T, tokens;         /* T, and B * T on the flattened axis */
    int H, HV, group, K, V;    /* group = HV / H */
    int bt, Kp, Vp;            /* the block, K and V padded to multiples of 16 */
    int m_rows;                /* rows of a block's M - I in shared memory at a time (Kp when it fits) */
    float scale;
    void *workspace;           /* per (value head, block): -U, K~, -DC, M - I in the operand type */
    float *gate_sum;           /* [HV][tokens]: G_t, or NULL without g */
    int64_t *first_visible;    /* [HV][tokens]: the last reset at or before t */
    float *o;                  /* [tokens, HV, V] */
};

/* Shared memory is carved in 128-byte aligned buffers (WMMA wants 32). */
__host__ __device__ inline size_t path_round(size_t bytes) { return (bytes + 127) / 128 * 128; }

/* The workspace of one (value head, block), in elements of the operand type,
 * each part a multiple of 16 x 16 elements (so 32-byte aligned). */
struct path_workspace_layout {
    size_t minus_u, key_carried, minus_dc, transport, per_block;
};

__host__ __device__ inline path_workspace_layout path_workspace_of(int bt, int Kp)
{
    path_workspace_layout l;
    l.minus_u = 0;
    l.key_carried = l.minus_u + (size_t)bt * Kp;
    l.minus_dc = l.key_carried + (size_t)bt * Kp;
    l.transport = l.minus_dc + (size_t)bt * bt;
    l.per_block = l.transport + (size_t)Kp * Kp;
    return l;
}

/* The transitions kernel's shared memory (byte offsets). The solve's
 * scratch (W W^T, W K^T, X) is reused for the fp32 results: K~ [bt x Kp],
 * then M - I a panel of min(bt, Kp) columns at a time ([Kp x bt] at most). */
struct path_transitions_layout {
    size_t w_op, k_op, minus_u, minus_dc, beta, gram_ww, gram_wk, x, result, bytes;
};

__host__ __device__ inline path_transitions_layout path_transitions_layout_of(int bt, int Kp, int op_bytes)
{
    path_transitions_layout l;
    size_t at = 0;
    l.w_op = at;
    at += path_round((size_t)bt * Kp * op_bytes);
    l.k_op = at;
    at += path_round((size_t)bt * Kp * op_bytes);
    l.minus_u = at;
    at += path_round((size_t)bt * Kp * op_bytes);
    l.minus_dc = at;
    at += path_round((size_t)bt * bt * op_bytes);
    l.beta = at;
    at += path_round((size_t)bt * sizeof(float));
    const size_t scratch = at;
    l.gram_ww = scratch;
    l.gram_wk = l.gram_ww + path_round((size_t)bt * bt * sizeof(float));
    l.x = l.gram_wk + path_round((size_t)bt * bt * sizeof(float));
    const size_t solve_end = l.x + path_round((size_t)bt * (Kp + bt) * sizeof(float));
    l.result = scratch;
    const size_t result_end = scratch + path_round((size_t)bt * Kp * sizeof(float));
    l.bytes = solve_end > result_end ? solve_end : result_end;
    return l;
}

/* The attend kernel's shared memory (byte offsets). The tiles of the key
 * blocks share one region, used three ways in turn:
 *   diagonal, first:  W_a, K_a                    [bt x Kp] each
 *   diagonal, second: -DC_a [bt x bt], -U_a [bt x Kp], V_a [bt x Vp]
 *   earlier blocks:   K~_b [bt x Kp], M_b - I [m_rows x Kp] (all of it when
 *                     it fits, else m_rows rows at a time), V_b [bt x Vp] */
struct path_attend_layout {
    size_t q_op, y, s, p_op, out, row_max, row_sum, gate_rows, gate_keys, first_rows, tiles, bytes;
    size_t tile_w, tile_k, tile_minus_dc, tile_minus_u, tile_diag_v, tile_key_carried, tile_transport, tile_v;
};

__host__ __device__ inline path_attend_layout path_attend_layout_of(int bt, int Kp, int Vp, int m_rows, int op_bytes)
{
    path_attend_layout l;
    size_t at = 0;
    const size_t rows_k_op = path_round((size_t)bt * Kp * op_bytes);
    l.q_op = at;
    at += rows_k_op;
    l.y = at;
    at += path_round((size_t)bt * Kp * sizeof(float));
    l.s = at;
    at += path_round((size_t)bt * bt * sizeof(float));
    l.p_op = at;
    at += path_round((size_t)bt * bt * op_bytes);
    l.out = at;
    at += path_round((size_t)bt * Vp * sizeof(float));
    l.row_max = at;
    at += path_round((size_t)bt * sizeof(float));
    l.row_sum = at;
    at += path_round((size_t)bt * sizeof(float));
    l.gate_rows = at;
    at += path_round((size_t)bt * sizeof(float));
    l.gate_keys = at;
    at += path_round((size_t)bt * sizeof(float));
    l.first_rows = at;
    at += path_round((size_t)bt * sizeof(int64_t));
    l.tiles = at;
    const size_t rows_v_op = path_round((size_t)bt * Vp * op_bytes);
    l.tile_w = at;
    l.tile_k = at + rows_k_op;
    const size_t diag_first = 2 * rows_k_op;
    l.tile_minus_dc = at;
    l.tile_minus_u = at + path_round((size_t)bt * bt * op_bytes);
    l.tile_diag_v = l.tile_minus_u + rows_k_op;
    const size_t diag_second = l.tile_diag_v + rows_v_op - at;
    l.tile_key_carried = at;
    l.tile_transport = at + rows_k_op;
    l.tile_v = l.tile_transport + path_round((size_t)m_rows * Kp * op_bytes);
    const size_t earlier = l.tile_v + rows_v_op - at;
    size_t tiles = diag_first > diag_second ? diag_first : diag_second;
    tiles = tiles > earlier ? tiles : earlier;
    l.bytes = at + tiles;
    return l;
}

/* ---- device helpers ---- */

/* The block's tokens: its first token and its rows (<= bt). */
__device__ __forceinline__ int64_t path_first_token(const path_block &b, int bt) { return b.start + b.block * bt; }
__device__ __forceinline__ int path_rows(const path_block &b, int bt)
{
    const int64_t left = b.length - b.block * bt;
    return left < bt ? (int)left : bt;
}

/* dst [padded_rows x ld] = rows of an input, zero past `rows` and `cols`:
 * dst[r][c] = src[base + r * row_stride + c]. Rounded to the operand type
 * (exact for a bf16 input in the bf16 tier). Consecutive threads read
 * consecutive elements of a row (coalesced). */
template <typename Op>
__device__ void path_load_rows(Op *dst, int ld, int padded_rows, lacs_view src, int64_t base, int64_t row_stride,
                               int rows, int cols)
{
    for (int e = (int)threadIdx.x; e < padded_rows * ld; e += (int)blockDim.x) {
        const int r = e / ld, c = e % ld;
        const float x = (r < rows && c < cols) ? lacs_view_at(src, base + r * row_stride + c) : 0.0f;
        lacs_store_operand(&dst[e], x);
    }
}

/* A workspace tile into shared memory as it is, 16 bytes at a time (every
 * tile is a multiple of 256 elements and 32-byte aligned at both ends). */
template <typename Op>
__device__ void path_copy_tile(Op *dst, const Op *src, size_t count)
{
    const uint4 *from = reinterpret_cast<const uint4 *>(src);
    uint4 *to = reinterpret_cast<uint4 *>(dst);
    const int n = (int)(count * sizeof(Op) / 16);
    LACS_ALIGNED16(from);
    LACS_ALIGNED16(to);
    for (int e = (int)threadIdx.x; e < n; e += (int)blockDim.x)
        to[e] = __ldg(&from[e]);
}

/* ---- 1. the gates (PaTH-FoX): lacs_gate_scan_kernel, attention_common.cuh ---- */

/* ---- 2. the transitions of a block (UT transform) ---- */

/* One CTA per (block, value head hv); q/k/w head h = hv / group. With nb the
 * block's rows (transitions t = 0 .. nb - 1, local):
 *   [W W^T | W K^T] (two products);
 *   X = [U | DC] solves x_t = beta_t (rhs_t - sum_{s<t} L_ts x_s) with
 *       rhs_t = [w_t | (W K^T)_tj for j < t, 0 else], L = W W^T's strictly
 *       lower part: one thread per column of X, row after row;
 *   K~ = K + (-DC)^T W and M - I = W^T (-U) (two products, fp32 results),
 *   stored with -U and -DC in the operand type. */
template <typename Op>
__global__ void __launch_bounds__(PATH_THREADS) path_transitions_kernel(path_args a)
{
    const int bt = a.bt, Kp = a.Kp, ld_x = Kp + bt;
    const path_transitions_layout l = path_transitions_layout_of(bt, Kp, (int)sizeof(Op));
    unsigned char *smem = lacs_shared_memory();
    Op *w_op = reinterpret_cast<Op *>(smem + l.w_op);
    Op *k_op = reinterpret_cast<Op *>(smem + l.k_op);
    Op *minus_u = reinterpret_cast<Op *>(smem + l.minus_u);
    Op *minus_dc = reinterpret_cast<Op *>(smem + l.minus_dc);
    float *beta = reinterpret_cast<float *>(smem + l.beta);
    float *gram_ww = reinterpret_cast<float *>(smem + l.gram_ww);
    float *gram_wk = reinterpret_cast<float *>(smem + l.gram_wk);
    float *x = reinterpret_cast<float *>(smem + l.x);
    float *result = reinterpret_cast<float *>(smem + l.result);

    const path_block blk = a.blocks[blockIdx.x];
    const int hv = (int)blockIdx.y, h = hv / a.group, nb = path_rows(blk, bt);
    const int64_t t0 = path_first_token(blk, bt);
    const path_workspace_layout wl = path_workspace_of(bt, Kp);
    Op *ws = reinterpret_cast<Op *>(a.workspace) + ((size_t)hv * a.n_blocks + blk.index) * wl.per_block;

    path_load_rows(w_op, Kp, bt, a.w, (t0 * a.H + h) * a.K, (int64_t)a.H * a.K, nb, a.K);
    path_load_rows(k_op, Kp, bt, a.k, (t0 * a.H + h) * a.K, (int64_t)a.H * a.K, nb, a.K);
    for (int t = (int)threadIdx.x; t < bt; t += (int)blockDim.x)
        beta[t] = t < nb ? lacs_view_at(a.beta, (t0 + t) * a.HV + hv) : 0.0f;
    __syncthreads();
    lacs_block_gemm<false, true>(w_op, Kp, w_op, Kp, gram_ww, bt, bt, bt, Kp, false);
    lacs_block_gemm<false, true>(w_op, Kp, k_op, Kp, gram_wk, bt, bt, bt, Kp, false);
    __syncthreads();
    /* the right-hand sides [W | (W K^T) (.) [t > j]]; zero rows past nb */
    for (int e = (int)threadIdx.x; e < bt * ld_x; e += (int)blockDim.x) {
        const int t = e / ld_x, c = e % ld_x;
        x[e] = c < Kp ? lacs_operand_value(w_op[t * Kp + c]) : (c - Kp < t ? gram_wk[t * bt + (c - Kp)] : 0.0f);
    }
    __syncthreads();
    /* (I + diag(beta) L) X = diag(beta) RHS by forward substitution: the
     * thread of column c reads only its own column of X (and L), so the rows
     * need no barrier between them. Rows past nb stay zero. */
    for (int c = (int)threadIdx.x; c < ld_x; c += (int)blockDim.x)
        for (int t = 0; t < nb; t++) {
            float acc = x[t * ld_x + c];
            for (int s = 0; s < t; s++)
                acc = fmaf(-gram_ww[t * bt + s], x[s * ld_x + c], acc);
            x[t * ld_x + c] = beta[t] * acc;
        }
    __syncthreads();
    /* -U and -DC, rounded once: the operands here and in the attend kernel */
    for (int e = (int)threadIdx.x; e < bt * Kp; e += (int)blockDim.x) {
        const int t = e / Kp, c = e % Kp;
        lacs_store_operand(&minus_u[e], -x[t * ld_x + c]);
        ws[wl.minus_u + e] = minus_u[e];
    }
    for (int e = (int)threadIdx.x; e < bt * bt; e += (int)blockDim.x) {
        const int t = e / bt, j = e % bt;
        lacs_store_operand(&minus_dc[e], -x[t * ld_x + Kp + j]);
        ws[wl.minus_dc + e] = minus_dc[e];
    }
    __syncthreads(); /* X is read: its memory becomes `result` */
    /* K~ = K + (-DC)^T W: k~_j = k_j - sum_t DC_tj w_t, the keys carried to the block's end */
    for (int e = (int)threadIdx.x; e < bt * Kp; e += (int)blockDim.x)
        result[e] = lacs_operand_value(k_op[e]);
    __syncthreads();
    lacs_block_gemm<true, false>(minus_dc, bt, w_op, Kp, result, Kp, bt, Kp, bt, true);
    __syncthreads();
    for (int e = (int)threadIdx.x; e < bt * Kp; e += (int)blockDim.x)
        lacs_store_operand(&ws[wl.key_carried + e], result[e]);
    __syncthreads();
    /* M - I = W^T (-U): (H_0 ... H_{nb-1})^T less the identity, a panel of
     * columns c0 .. c0 + cols - 1 at a time (the fp32 result stays [Kp x bt]) */
    const int panel = bt < Kp ? bt : Kp;
    for (int c0 = 0; c0 < Kp; c0 += panel) {
        const int cols = Kp - c0 < panel ? Kp - c0 : panel;
        lacs_block_gemm<true, false>(w_op, Kp, minus_u + c0, Kp, result, cols, Kp, cols, bt, false);
        __syncthreads();
        for (int e = (int)threadIdx.x; e < Kp * cols; e += (int)blockDim.x)
            lacs_store_operand(&ws[wl.transport + (size_t)(e / cols) * Kp + c0 + e % cols], result[e]);
        __syncthreads(); /* the panel is read before the next one overwrites it */
    }
}

/* ---- 3. the attention of a query block ---- */

/* The online softmax step for the block's logits s [bt x bt] against the
 * keys j0 .. j0 + n - 1: l_ij = scale (s_ij + G_i - G_j) where visible
 * (first_visible[i] <= j <= i, the row a real query), -inf elsewhere; the
 * running maximum m_i grows to m', Z_i <- e^{m - m'} Z_i + sum_j p_ij and the
 * accumulator row N_i <- e^{m - m'} N_i, with p_ij = e^{l_ij - m'} rounded
 * into p_op (the operand of N += P V; Z sums the rounded values). One warp
 * per row (a row always has the same warp: row_max, row_sum and N's row are
 * read and written by it alone within the step). */
template <typename Op>
__device__ void path_softmax_step(const path_args &a, float *s, Op *p_op, float *out, float *row_max, float *row_sum,
                                  const float *gate_rows, const float *gate_keys, const int64_t *first_rows,
                                  int64_t i0, int rows, int64_t seq_start, int64_t j0, int n)
{
    const int bt = a.bt, lane = (int)(threadIdx.x % 32), warp = (int)(threadIdx.x / 32);
    const int warps = (int)(blockDim.x / 32);
    const bool gated = a.gate_sum != nullptr;
    for (int row = warp; row < bt; row += warps) {
        const int64_t i = i0 + row, first = gated ? first_rows[row] : seq_start;
        const float gate_i = gated ? gate_rows[row] : 0.0f;
        float *s_row = s + (size_t)row * bt;
        float block_max = -INFINITY;
        for (int col = lane; col < bt; col += 32) {
            const int64_t j = j0 + col;
            const bool visible = row < rows && col < n && j >= first && j <= i;
            /* H12: the gate before the scale */
            const float logit = visible ? a.scale * (s_row[col] + (gated ? gate_i - gate_keys[col] : 0.0f)) : -INFINITY;
            s_row[col] = logit;
            block_max = fmaxf(block_max, logit);
        }
        block_max = lacs_warp_max(block_max);
        const float old_max = row_max[row], new_max = fmaxf(old_max, block_max);
        Op *p_row = p_op + (size_t)row * bt;
        if (new_max == -INFINITY) { /* nothing visible yet: no weights */
            for (int col = lane; col < bt; col += 32)
                lacs_store_operand(&p_row[col], 0.0f);
            continue;
        }
        float sum = 0.0f;
        for (int col = lane; col < bt; col += 32) {
            const float logit = s_row[col];
            lacs_store_operand(&p_row[col], logit == -INFINITY ? 0.0f : expf(logit - new_max));
            sum += lacs_operand_value(p_row[col]);
        }
        sum = lacs_warp_sum(sum);
        /* e^{m - m'}: 0 on the first visible block (e^{-inf}), 1 while the maximum stays */
        const float rescale = new_max == old_max ? 1.0f : expf(old_max - new_max);
        if (rescale != 1.0f) {
            float *out_row = out + (size_t)row * a.Vp;
            for (int c = lane; c < a.Vp; c += 32)
                out_row[c] *= rescale;
        }
        __syncwarp(); /* every lane has read row_max and row_sum before lane 0 writes them */
        if (lane == 0) {
            row_max[row] = new_max;
            row_sum[row] = rescale * row_sum[row] + sum;
        }
    }
}

/* The gate values of key block j0 .. j0 + n - 1 (0 past n). */
__device__ __forceinline__ void path_load_gate_keys(const path_args &a, float *gate_keys, int hv, int64_t j0, int n)
{
    if (!a.gate_sum)
        return;
    for (int col = (int)threadIdx.x; col < a.bt; col += (int)blockDim.x)
        gate_keys[col] = col < n ? a.gate_sum[(int64_t)hv * a.tokens + j0 + col] : 0.0f;
}

/* One CTA per (query block a, value head hv): see the header, step 3. */
template <typename Op>
__global__ void __launch_bounds__(PATH_THREADS) path_attend_kernel(path_args a)
{
    const int bt = a.bt, Kp = a.Kp, Vp = a.Vp;
    const path_attend_layout l = path_attend_layout_of(bt, Kp, Vp, a.m_rows, (int)sizeof(Op));
    unsigned char *smem = lacs_shared_memory();
    Op *q_op = reinterpret_cast<Op *>(smem + l.q_op); /* Q, then the carried queries Y rounded */
    float *y = reinterpret_cast<float *>(smem + l.y);  /* Y in fp32 */
    float *s = reinterpret_cast<float *>(smem + l.s);  /* a block of logits */
    Op *p_op = reinterpret_cast<Op *>(smem + l.p_op);  /* (Q W^T) (.) [t <= i], then P */
    float *out = reinterpret_cast<float *>(smem + l.out);
    float *row_max = reinterpret_cast<float *>(smem + l.row_max);
    float *row_sum = reinterpret_cast<float *>(smem + l.row_sum);
    float *gate_rows = reinterpret_cast<float *>(smem + l.gate_rows);
    float *gate_keys = reinterpret_cast<float *>(smem + l.gate_keys);
    int64_t *first_rows = reinterpret_cast<int64_t *>(smem + l.first_rows);
    Op *tile_w = reinterpret_cast<Op *>(smem + l.tile_w);
    Op *tile_k = reinterpret_cast<Op *>(smem + l.tile_k);
    Op *tile_minus_dc = reinterpret_cast<Op *>(smem + l.tile_minus_dc);
    Op *tile_minus_u = reinterpret_cast<Op *>(smem + l.tile_minus_u);
    Op *tile_diag_v = reinterpret_cast<Op *>(smem + l.tile_diag_v);
    Op *tile_key_carried = reinterpret_cast<Op *>(smem + l.tile_key_carried);
    Op *tile_transport = reinterpret_cast<Op *>(smem + l.tile_transport);
    Op *tile_v = reinterpret_cast<Op *>(smem + l.tile_v);

    const path_block blk = a.blocks[blockIdx.x];
    const int hv = (int)blockIdx.y, h = hv / a.group, rows = path_rows(blk, bt);
    const int64_t i0 = path_first_token(blk, bt), qk_stride = (int64_t)a.H * a.K, v_stride = (int64_t)a.HV * a.V;
    const path_workspace_layout wl = path_workspace_of(bt, Kp);
    const Op *ws_head = reinterpret_cast<const Op *>(a.workspace) + (size_t)hv * a.n_blocks * wl.per_block;
    const Op *ws_own = ws_head + (size_t)blk.index * wl.per_block;

    /* the diagonal block, first: Q, W_a, K_a; the running softmax starts */
    path_load_rows(q_op, Kp, bt, a.q, (i0 * a.H + h) * a.K, qk_stride, rows, a.K);
    path_load_rows(tile_w, Kp, bt, a.w, (i0 * a.H + h) * a.K, qk_stride, rows, a.K);
    path_load_rows(tile_k, Kp, bt, a.k, (i0 * a.H + h) * a.K, qk_stride, rows, a.K);
    for (int r = (int)threadIdx.x; r < bt; r += (int)blockDim.x) {
        row_max[r] = -INFINITY;
        row_sum[r] = 0.0f;
        if (a.gate_sum) {
            gate_rows[r] = r < rows ? a.gate_sum[(int64_t)hv * a.tokens + i0 + r] : 0.0f;
            first_rows[r] = r < rows ? a.first_visible[(int64_t)hv * a.tokens + i0 + r] : i0 + r;
        }
    }
    for (int e = (int)threadIdx.x; e < bt * Vp; e += (int)blockDim.x)
        out[e] = 0.0f;
    path_load_gate_keys(a, gate_keys, hv, i0, rows);
    __syncthreads();
    lacs_block_gemm<false, true>(q_op, Kp, tile_w, Kp, s, bt, bt, bt, Kp, false); /* Q W_a^T */
    __syncthreads();
    /* (Q W^T) (.) [t <= i] as an operand; Y starts as Q */
    for (int e = (int)threadIdx.x; e < bt * bt; e += (int)blockDim.x) {
        const int i = e / bt, t = e % bt;
        lacs_store_operand(&p_op[e], t <= i ? s[e] : 0.0f);
    }
    for (int e = (int)threadIdx.x; e < bt * Kp; e += (int)blockDim.x)
        y[e] = lacs_operand_value(q_op[e]);
    __syncthreads();
    lacs_block_gemm<false, true>(q_op, Kp, tile_k, Kp, s, bt, bt, bt, Kp, false); /* Q K_a^T */
    __syncthreads();
    /* the diagonal block, second: -DC_a, -U_a, V_a (W_a and K_a are read) */
    path_copy_tile(tile_minus_dc, ws_own + wl.minus_dc, (size_t)bt * bt);
    path_copy_tile(tile_minus_u, ws_own + wl.minus_u, (size_t)bt * Kp);
    path_load_rows(tile_diag_v, Vp, bt, a.v, i0 * v_stride + (int64_t)hv * a.V, v_stride, rows, a.V);
    __syncthreads();
    /* logits Q K^T - ((Q W^T) (.) [t <= i]) DC; Y = Q - ((Q W^T) (.) [t <= i]) U */
    lacs_block_gemm<false, false>(p_op, bt, tile_minus_dc, bt, s, bt, bt, bt, bt, true);
    lacs_block_gemm<false, false>(p_op, bt, tile_minus_u, Kp, y, Kp, bt, Kp, bt, true);
    __syncthreads();
    path_softmax_step(a, s, p_op, out, row_max, row_sum, gate_rows, gate_keys, first_rows, i0, rows, blk.start, i0,
                      rows);
    for (int e = (int)threadIdx.x; e < bt * Kp; e += (int)blockDim.x)
        lacs_store_operand(&q_op[e], y[e]);
    __syncthreads();
    lacs_block_gemm<false, false>(p_op, bt, tile_diag_v, Vp, out, Vp, bt, Vp, bt, true);
    __syncthreads();

    /* the earlier blocks, walking back; the earliest key any row sees is the
     * first row's (resets only move forward) */
    const int64_t earliest = a.gate_sum ? a.first_visible[(int64_t)hv * a.tokens + i0] : blk.start;
    for (int64_t b = blk.block - 1; b >= 0; b--) {
        const int64_t j0 = blk.start + b * bt;
        if (j0 + bt <= earliest)
            break;
        const bool carry = b > 0 && j0 > earliest; /* another block follows: Y is carried over this one */
        const Op *ws_b = ws_head + (size_t)(blk.index - (blk.block - b)) * wl.per_block;
        const int m_rows = Kp < a.m_rows ? Kp : a.m_rows; /* M_b - I's first panel */
        path_copy_tile(tile_key_carried, ws_b + wl.key_carried, (size_t)bt * Kp);
        if (carry)
            path_copy_tile(tile_transport, ws_b + wl.transport, (size_t)m_rows * Kp);
        path_load_rows(tile_v, Vp, bt, a.v, j0 * v_stride + (int64_t)hv * a.V, v_stride, bt, a.V);
        path_load_gate_keys(a, gate_keys, hv, j0, bt);
        __syncthreads();
        /* q_i^T R_ij k_j = y_i . k~_j; Y + Y (M_b - I), both from the rounded Y */
        lacs_block_gemm<false, true>(q_op, Kp, tile_key_carried, Kp, s, bt, bt, bt, Kp, false);
        if (carry)
            lacs_block_gemm<false, false>(q_op, Kp, tile_transport, Kp, y, Kp, bt, Kp, m_rows, true);
        __syncthreads();
        /* the further panels of M_b - I, when it does not fit at once: Y + Y[:, r0:r1] (M_b - I)[r0:r1, :] */
        for (int r0 = m_rows; carry && r0 < Kp; r0 += m_rows) {
            const int panel_rows = Kp - r0 < m_rows ? Kp - r0 : m_rows;
            path_copy_tile(tile_transport, ws_b + wl.transport + (size_t)r0 * Kp, (size_t)panel_rows * Kp);
            __syncthreads();
            lacs_block_gemm<false, false>(q_op + r0, Kp, tile_transport, Kp, y, Kp, bt, Kp, panel_rows, true);
            __syncthreads();
        }
        path_softmax_step(a, s, p_op, out, row_max, row_sum, gate_rows, gate_keys, first_rows, i0, rows, blk.start,
                          j0, bt);
        if (carry)
            for (int e = (int)threadIdx.x; e < bt * Kp; e += (int)blockDim.x)
                lacs_store_operand(&q_op[e], y[e]);
        __syncthreads();
        lacs_block_gemm<false, false>(p_op, bt, tile_v, Vp, out, Vp, bt, Vp, bt, true);
        __syncthreads();
    }

    /* o_i = N_i / Z_i */
    for (int e = (int)threadIdx.x; e < rows * a.V; e += (int)blockDim.x) {
        const int r = e / a.V, c = e % a.V;
        a.o[((i0 + r) * a.HV + hv) * a.V + c] = out[r * Vp + c] / row_sum[r];
    }
}

/* ---- the host side ---- */

static int round16(int64_t n) { return (int)((n + 15) / 16 * 16); }

/* beta >= 0 (NaN refused), on the host copy: the reference's matrix form
 * absorbs beta as sqrt(beta) w, and every form is checked alike (SPEC 4.12);
 * path_attn_vjp's too (attention_vjp.cu). */
int lacs_cuda_check_path_beta(const lacs_cuda_call *c, const lacs_cuda_tensor *beta)
{
    const int64_t n = lacs_cuda_count(beta);
    for (int64_t i = 0; i < n; i++) {
        float value;
        if (beta->dtype == LACS_BF16) {
            const uint32_t bits = (uint32_t)((const uint16_t *)beta->host)[i] << 16;
            memcpy(&value, &bits, sizeof value);
        } else {
            value = ((const float *)beta->host)[i];
        }
        if (!(value >= 0.0f))
            return lacs_cuda_error(LACS_ERR_PARAM, c->op,
                                   "beta[%lld] = %g must be >= 0: as the reference's matrix form, which absorbs beta "
                                   "as sqrt(beta) w",
                                   (long long)i, (double)value);
    }
    return LACS_OK;
}

/* The device memory of one call, carved from the workspace. */
struct path_memory {
    path_block *blocks;
    void *workspace;
    float *gate_sum;
    int64_t *first_visible;
};

template <typename Op>
static int run_path(const lacs_cuda_call *c, path_args a, const std::vector<path_block> &blocks, int64_t n_seqs)
{
    const char *op = c->op;
    const path_workspace_layout wl = path_workspace_of(a.bt, a.Kp);
    const size_t workspace_bytes = (size_t)a.HV * blocks.size() * wl.per_block * sizeof(Op);
    int rc = LACS_OK;
    cudaError_t e;
    const size_t bytes_of[4] = {blocks.size() * sizeof(path_block), workspace_bytes,
                                a.g.data ? (size_t)a.HV * a.tokens * sizeof(float) : 0,
                                a.g.data ? (size_t)a.HV * a.tokens * sizeof(int64_t) : 0};
    void *parts[4];
    size_t total = 0;
    if (!lacs_workspace_carve(bytes_of, parts, 4, &total))
        return lacs_cuda_error(LACS_ERR_MEMORY, op, "out of device memory for the blocks' transitions (%zu bytes)",
                               total);
    path_memory m = {(path_block *)parts[0], parts[1], (float *)parts[2], (int64_t *)parts[3]};
    if (cudaMemcpy(m.blocks, blocks.data(), blocks.size() * sizeof(path_block), cudaMemcpyHostToDevice) !=
        cudaSuccess)
        rc = lacs_cuda_error(LACS_ERR_MEMORY, op, "copying the block table to the device failed");
    a.blocks = m.blocks;
    a.n_blocks = (int64_t)blocks.size();
    a.workspace = m.workspace;
    a.gate_sum = m.gate_sum;
    a.first_visible = m.first_visible;
    const dim3 block_threads(PATH_THREADS);
    if (rc == LACS_OK && a.g.data) {
        const size_t bytes = path_round(PATH_THREADS * sizeof(float)) + PATH_THREADS * sizeof(int64_t);
        if ((e = lacs_launch(lacs_gate_scan_kernel<path_args>, dim3((unsigned)n_seqs, (unsigned)a.HV), block_threads, bytes, a)) !=
            cudaSuccess)
            rc = lacs_cuda_launch_failed(op, "path_gate_kernel", e);
    }
    if (rc == LACS_OK) {
        const size_t bytes = path_transitions_layout_of(a.bt, a.Kp, (int)sizeof(Op)).bytes;
        if ((e = lacs_launch(path_transitions_kernel<Op>, dim3((unsigned)blocks.size(), (unsigned)a.HV),
                             block_threads, bytes, a)) != cudaSuccess)
            rc = lacs_cuda_launch_failed(op, "path_transitions_kernel", e);
    }
    if (rc == LACS_OK) {
        const size_t bytes = path_attend_layout_of(a.bt, a.Kp, a.Vp, a.m_rows, (int)sizeof(Op)).bytes;
        if ((e = lacs_launch(path_attend_kernel<Op>, dim3((unsigned)blocks.size(), (unsigned)a.HV), block_threads,
                             bytes, a)) != cudaSuccess)
            rc = lacs_cuda_launch_failed(op, "path_attend_kernel", e);
    }
    lacs_cuda_workspace_release(); /* waits for the kernels */
    if ((e = cudaGetLastError()) != cudaSuccess && rc == LACS_OK)
        rc = lacs_cuda_error(LACS_ERR_INPUT, op, "path_attn's kernels failed: %s", cudaGetErrorString(e));
    return rc;
}

/* The largest block (64, 32, 16 tokens) whose kernels fit in the shared
 * memory a block may have, with as many rows of M - I at a time as fit (all
 * Kp when they do: one barrier round per key block for the carry); bt = 0 if
 * nothing fits. A larger block before more rows of M - I: the block sets the
 * size of every product, the panels only add barrier rounds to the carry. */
static void choose_blocks(int Kp, int Vp, int op_bytes, int max_shared_bytes, int *bt, int *m_rows)
{
    for (*bt = 64; *bt >= 16; *bt /= 2)
        if (path_transitions_layout_of(*bt, Kp, op_bytes).bytes <= (size_t)max_shared_bytes)
            for (*m_rows = Kp; *m_rows >= 16; *m_rows -= 16)
                if (path_attend_layout_of(*bt, Kp, Vp, *m_rows, op_bytes).bytes <= (size_t)max_shared_bytes)
                    return;
    *bt = 0;
    *m_rows = 0;
}

static int path_attn(const lacs_cuda_call *c)
{
    const lacs_cuda_tensor *q = lacs_cuda_input(c, "q"), *k = lacs_cuda_input(c, "k"), *v = lacs_cuda_input(c, "v");
    const lacs_cuda_tensor *w = lacs_cuda_input(c, "w"), *beta = lacs_cuda_input(c, "beta");
    const lacs_cuda_tensor *g = lacs_cuda_input(c, "g"), *cu = lacs_cuda_input(c, "cu_seqlens");
    lacs_cuda_tensor *o = lacs_cuda_output(c, "o");
    if (!q || !k || !v || !w || !beta)
        return lacs_cuda_error(LACS_ERR_INPUT, c->op, "q, k, v, w and beta are required");
    if (!o)
        return lacs_cuda_error(LACS_ERR_INPUT, c->op, "output 'o' is required");
    int rc = lacs_cuda_check_path_beta(c, beta);
    if (rc != LACS_OK)
        return rc;

    path_args a;
    memset(&a, 0, sizeof a);
    a.T = q->shape[1];
    a.tokens = q->shape[0] * q->shape[1];
    a.H = (int)q->shape[2];
    a.K = (int)q->shape[3];
    a.HV = (int)v->shape[2];
    a.V = (int)v->shape[3];
    a.group = a.HV / a.H;
    a.scale = (float)lacs_cuda_param(c, "scale", a.K > 0 ? 1.0 / sqrt((double)a.K) : 1.0);
    a.q = lacs_view_of(q);
    a.k = lacs_view_of(k);
    a.v = lacs_view_of(v);
    a.w = lacs_view_of(w);
    a.beta = lacs_view_of(beta);
    a.g = lacs_view_of(g);
    a.cu_seqlens = cu ? (const int64_t *)cu->device : nullptr;
    a.o = (float *)o->device;
    /* K = 0 leaves every logit to the gate: one zero column of padding keeps the products' shapes */
    a.Kp = round16(a.K > 0 ? a.K : 1);
    a.Vp = round16(a.V > 0 ? a.V : 1);
    if (a.tokens == 0 || a.HV == 0 || a.V == 0)
        return LACS_OK; /* nothing to compute: o is empty */

    const int op_bytes = c->bf16 ? (int)sizeof(unsigned short) : (int)sizeof(float);
    choose_blocks(a.Kp, a.Vp, op_bytes, c->max_shared_bytes, &a.bt, &a.m_rows);
    if (a.bt == 0) {
        const size_t attend = path_attend_layout_of(16, a.Kp, a.Vp, 16, op_bytes).bytes;
        const size_t transitions = path_transitions_layout_of(16, a.Kp, op_bytes).bytes;
        return lacs_cuda_unsupported(c->op,
                                     "K = %d and V = %d need %zu bytes of shared memory per block even with blocks "
                                     "of 16 tokens; the device allows %d",
                                     a.K, a.V, attend > transitions ? attend : transitions, c->max_shared_bytes);
    }

    /* the blocks of every sequence, the latest (longest walk) first so that the CTAs finish together */
    const int64_t n_seqs = cu ? cu->shape[0] - 1 : q->shape[0];
    std::vector<path_block> blocks;
    for (int64_t n = 0, index = 0; n < n_seqs; n++) {
        const int64_t start = cu ? ((const int64_t *)cu->host)[n] : n * a.T;
        const int64_t length = cu ? ((const int64_t *)cu->host)[n + 1] - start : a.T;
        for (int64_t b = 0; b * a.bt < length; b++)
            blocks.push_back(path_block{start, length, b, index++});
    }
    if (blocks.empty())
        return LACS_OK;
    std::stable_sort(blocks.begin(), blocks.end(),
                     [](const path_block &x, const path_block &y) { return x.block > y.block; });
    return c->bf16 ? run_path<unsigned short>(c, a, blocks, n_seqs) : run_path<float>(c, a, blocks, n_seqs);
}

int lacs_cuda_attention(const lacs_cuda_call *c)
{
    if (strcmp(c->op, "path_attn") == 0)
        return path_attn(c);
    return lacs_cuda_flash(c); /* flash.cu: softmax_attn, fox, deltaformer */
}

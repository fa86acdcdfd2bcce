/* builtin:cuda, the softmax attention forms (optimized/cuda/README.md section 4):
 * softmax_attn (H1), fox (H10: FoX's data-dependent gate g, or ALiBi's
 * constant g_gamma) and deltaformer (H11), FlashAttention-style: no T x T
 * matrix, an online softmax over blocks of keys.
 *
 * The attend kernel (flash_attend_kernel), one CTA of 256 threads per (query
 * block of BT tokens, value head), the latest query blocks (the longest
 * walks) first. For the key blocks b = a, a - 1, ... (the diagonal first, so
 * that every row has its maximum at once; with hard resets the walk stops at
 * the first block no query of the block sees):
 *   S = Q K_b^T                            (a block product)
 *   l_ij = scale S_ij + gate_ij            visible keys, -inf elsewhere
 *   m' = max(m, max_j l_ij);  P = exp(l - m');  Z <- e^{m - m'} Z + sum_j P;
 *   N <- e^{m - m'} N + P V_b              (a block product)
 * and o_i = N_i / Z_i. The gate is added after the scale (fla's
 * parallel_forgetting_attn): FoX's G_i - G_j with G the fp32 prefix sums of
 * g restarted at each hard reset (lacs_gate_scan_kernel; key j is visible
 * from query i iff first_visible[i] <= j <= i), ALiBi's (i - j) g_gamma (one
 * fp32 product). The softmax step is one warp per query row (lanes over the
 * keys, shuffles for the row's maximum and sum).
 *
 * DeltaFormer. O = A U with U = (I + diag(beta) B)^{-1} V, the first stage's
 * u_i = v_i - beta_i sum_{j<i} B_ij u_j, B_ij = softmax_{j<i}(scale x_i .
 * k_j) with x = k (forms EXP, SOFTMAX) or q (FLA); EXP takes exp(scale x_i .
 * k_j) as it is, with no maximum and no normalisation (it may overflow, by
 * definition: SPEC.md 4.11). The first stage (deltaformer_first_kernel) is
 * sequential in the tokens: one CTA per (sequence, value head) walks its
 * blocks in order; block a attends to every earlier block with the values
 * already computed (the online softmax above, N and Z), then takes its own
 * keys j < i, which fixes every row's maximum and sum, and solves
 * u_i = v_i - beta_i / Z_i (N_i + sum_{a0 <= j < i} p_ij u_j) row after row,
 * one thread per value column (each column's recursion is independent: no
 * barrier inside). U goes to an fp32 workspace [tokens, HV, Vp]; the second
 * stage is the attend kernel with values U (and no normalisation for EXP).
 * builtin:cpu's blocked algorithm (optimized/cpu/README.md section 5).
 *
 * Numerics. fp32 tier: fp32 throughout. bf16 tier: the operands of the
 * block products are rounded to bf16 (the inputs, exact; P, FlashAttention's
 * P in bf16, with Z summing the rounded P, so that o_i is a convex
 * combination of the values with the weights as rounded; U where it is
 * handed to a product, an intermediate between stages), accumulated in fp32;
 * the logits, the softmax statistics, the gates, N and the first stage's
 * in-block recursion (P in fp32 there) stay fp32. exp is the device's expf.
 *
 * Memory. Shared memory per CTA: Q, K_b, V_b, S, P and N for one block;
 * BT is 64, or 32 or 16 where the head sizes need less. Global: the gates
 * (12 bytes per token and value head, FoX only) and DeltaFormer's U.
 */
#include <math.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "attention_common.cuh"

#define FLASH_THREADS 256

enum flash_gate { FLASH_GATE_NONE = 0, FLASH_GATE_PREFIX = 1, FLASH_GATE_ALIBI = 2 };

/* One block of one sequence: its tokens start + block * bt .. */
struct flash_block {
    int64_t start;  /* the sequence's first token on the flattened axis */
    int64_t length; /* the sequence's tokens */
    int64_t block;  /* the block within the sequence */
};

struct flash_args {
    lacs_view q, k, v, g, beta; /* v: the values (v, or DeltaFormer's U, fp32, row length v_ld) */
    const int64_t *cu_seqlens;
    const flash_block *blocks;
    int64_t T, tokens;
    int H, HV, group, K, V, Kp, Vp, v_ld;
    int bt;
    float scale;
    int gate;                  /* flash_gate */
    const float *gate_sum;     /* FLASH_GATE_PREFIX: [HV][tokens] */
    const int64_t *first_visible;
    int normalised;            /* softmax; 0: DeltaFormer's EXP form */
    int first_stage_x_is_q;    /* DeltaFormer: the first stage's logits read q (FLA) */
    float *u;                  /* DeltaFormer: U [tokens, HV, Vp] */
    float *o;
};

__host__ __device__ inline size_t flash_round(size_t bytes) { return (bytes + 127) / 128 * 128; }

struct flash_layout {
    size_t q_op, k_op, v_op, s, p_op, out, row_max, row_sum, gate_rows, gate_keys, first_rows, u_block, bytes;
};

/* first_stage: DeltaFormer's first stage also keeps its block's U in fp32. */
__host__ __device__ inline flash_layout flash_layout_of(int bt, int Kp, int Vp, int op_bytes, bool first_stage)
{
    flash_layout l = {};
    size_t at = 0;
    l.q_op = at, at += flash_round((size_t)bt * Kp * op_bytes);
    l.k_op = at, at += flash_round((size_t)bt * Kp * op_bytes);
    l.v_op = at, at += flash_round((size_t)bt * Vp * op_bytes);
    l.s = at, at += flash_round((size_t)bt * bt * 4);
    l.p_op = at, at += flash_round((size_t)bt * bt * op_bytes);
    l.out = at, at += flash_round((size_t)bt * Vp * 4);
    l.row_max = at, at += flash_round((size_t)bt * 4);
    l.row_sum = at, at += flash_round((size_t)bt * 4);
    l.gate_rows = at, at += flash_round((size_t)bt * 4);
    l.gate_keys = at, at += flash_round((size_t)bt * 4);
    l.first_rows = at, at += flash_round((size_t)bt * 8);
    if (first_stage)
        l.u_block = at, at += flash_round((size_t)bt * Vp * 4);
    l.bytes = at;
    return l;
}

/* The shared memory of one CTA, carved. */
template <typename Op> struct flash_shared {
    Op *q_op, *k_op, *v_op, *p_op;
    float *s, *out, *row_max, *row_sum, *gate_rows, *gate_keys, *u_block;
    int64_t *first_rows;
};

template <typename Op>
__device__ flash_shared<Op> flash_carve(const flash_args &a, bool first_stage)
{
    const flash_layout l = flash_layout_of(a.bt, a.Kp, a.Vp, (int)sizeof(Op), first_stage);
    unsigned char *smem = lacs_shared_memory();
    flash_shared<Op> m;
    m.q_op = reinterpret_cast<Op *>(smem + l.q_op);
    m.k_op = reinterpret_cast<Op *>(smem + l.k_op);
    m.v_op = reinterpret_cast<Op *>(smem + l.v_op);
    m.p_op = reinterpret_cast<Op *>(smem + l.p_op);
    m.s = reinterpret_cast<float *>(smem + l.s);
    m.out = reinterpret_cast<float *>(smem + l.out);
    m.row_max = reinterpret_cast<float *>(smem + l.row_max);
    m.row_sum = reinterpret_cast<float *>(smem + l.row_sum);
    m.gate_rows = reinterpret_cast<float *>(smem + l.gate_rows);
    m.gate_keys = reinterpret_cast<float *>(smem + l.gate_keys);
    m.first_rows = reinterpret_cast<int64_t *>(smem + l.first_rows);
    m.u_block = first_stage ? reinterpret_cast<float *>(smem + l.u_block) : nullptr;
    return m;
}

/* The online softmax step for the block's dot products s [bt x bt] against
 * the keys j0 .. j0 + n - 1 (rows: the query rows i0 .. i0 + rows - 1):
 * l_ij = scale s_ij + gate_ij where visible (first_i <= j <= i, or j < i when
 * strict), -inf elsewhere; m_i grows to m', Z_i <- e^{m - m'} Z_i + sum_j
 * p_ij and N_i <- e^{m - m'} N_i, p_ij = e^{l_ij - m'} (EXP: e^{l_ij}, no
 * maximum). With round_p, p goes to p_op in the operand type and Z sums the
 * rounded values (the operand of N += P V); without, p stays fp32 in s and Z
 * sums it (DeltaFormer's in-block recursion). One warp per row: row_max,
 * row_sum and N's row are its own within the step. */
template <typename Op>
__device__ void flash_softmax_step(const flash_args &a, const flash_shared<Op> &m, int64_t i0, int rows,
                                   int64_t seq_start, int64_t j0, int n, bool strict, bool round_p)
{
    const int bt = a.bt, lane = (int)(threadIdx.x % 32), warp = (int)(threadIdx.x / 32);
    const int warps = (int)(blockDim.x / 32);
    for (int row = warp; row < bt; row += warps) {
        const int64_t i = i0 + row;
        const int64_t first = a.gate == FLASH_GATE_PREFIX ? m.first_rows[row] : seq_start;
        const float gate_i = m.gate_rows[row];
        float *s_row = m.s + (size_t)row * bt;
        Op *p_row = m.p_op + (size_t)row * bt;
        float block_max = -INFINITY;
        for (int col = lane; col < bt; col += 32) {
            const int64_t j = j0 + col;
            const bool visible = row < rows && col < n && j >= first && (strict ? j < i : j <= i);
            float logit = -INFINITY;
            if (visible) {
                logit = a.scale * s_row[col]; /* the gate after the scale (H10) */
                if (a.gate == FLASH_GATE_PREFIX)
                    logit += gate_i - m.gate_keys[col];
                else if (a.gate == FLASH_GATE_ALIBI && j != i)
                    logit += (float)(i - j) * gate_i;
            }
            s_row[col] = logit;
            block_max = fmaxf(block_max, logit);
        }
        float new_max = 0.0f, rescale = 1.0f;
        const float old_max = m.row_max[row];
        if (a.normalised) {
            block_max = lacs_warp_max(block_max);
            new_max = fmaxf(old_max, block_max);
            /* e^{m - m'}: 0 on the first visible block (e^{-inf}), 1 while the maximum stays */
            rescale = new_max == old_max ? 1.0f : expf(old_max - new_max);
        }
        if (a.normalised && new_max == -INFINITY) { /* nothing visible yet: no weights */
            for (int col = lane; col < bt; col += 32) {
                s_row[col] = 0.0f;
                if (round_p)
                    lacs_store_operand(&p_row[col], 0.0f);
            }
            continue;
        }
        float sum = 0.0f;
        for (int col = lane; col < bt; col += 32) {
            const float logit = s_row[col];
            float p = logit == -INFINITY ? 0.0f : expf(logit - new_max);
            if (round_p) {
                lacs_store_operand(&p_row[col], p);
                p = lacs_operand_value(p_row[col]);
            }
            s_row[col] = p;
            sum += p;
        }
        sum = lacs_warp_sum(sum);
        if (rescale != 1.0f && !LACS_MUTANT(LACS_MUTANT_NO_RESCALE)) {
            float *out_row = m.out + (size_t)row * a.Vp;
            for (int c = lane; c < a.Vp; c += 32)
                out_row[c] *= rescale;
        }
        __syncwarp(); /* every lane has read row_max and row_sum before lane 0 writes them */
        if (lane == 0) {
            m.row_max[row] = new_max;
            m.row_sum[row] = rescale * m.row_sum[row] + sum;
        }
    }
}

/* The running softmax of the block's rows starts; the rows' gates (FoX: G_i
 * and first_visible; ALiBi: g_gamma). */
template <typename Op>
__device__ void flash_start_rows(const flash_args &a, const flash_shared<Op> &m, int hv, int64_t i0, int rows)
{
    for (int r = (int)threadIdx.x; r < a.bt; r += (int)blockDim.x) {
        m.row_max[r] = a.normalised ? -INFINITY : 0.0f;
        m.row_sum[r] = 0.0f;
        m.gate_rows[r] = 0.0f;
        if (a.gate == FLASH_GATE_PREFIX) {
            m.gate_rows[r] = r < rows ? a.gate_sum[(int64_t)hv * a.tokens + i0 + r] : 0.0f;
            m.first_rows[r] = r < rows ? a.first_visible[(int64_t)hv * a.tokens + i0 + r] : i0 + r;
        } else if (a.gate == FLASH_GATE_ALIBI) {
            m.gate_rows[r] = lacs_view_at(a.g, hv);
        }
    }
    for (int e = (int)threadIdx.x; e < a.bt * a.Vp; e += (int)blockDim.x)
        m.out[e] = 0.0f;
}

/* Key block j0 .. j0 + n - 1: K_b (head h), the values (value head hv) and
 * the keys' gates. */
template <typename Op>
__device__ void flash_load_keys(const flash_args &a, const flash_shared<Op> &m, int h, int hv, int64_t j0, int n,
                                bool values)
{
    lacs_load_tile(m.k_op, a.Kp, a.bt, a.k, (j0 * a.H + h) * a.K, (int64_t)a.H * a.K, n, a.K);
    if (values)
        lacs_load_tile(m.v_op, a.Vp, a.bt, a.v, (j0 * a.HV + hv) * a.v_ld, (int64_t)a.HV * a.v_ld, n, a.V);
    if (a.gate == FLASH_GATE_PREFIX)
        for (int col = (int)threadIdx.x; col < a.bt; col += (int)blockDim.x)
            m.gate_keys[col] = col < n ? a.gate_sum[(int64_t)hv * a.tokens + j0 + col] : 0.0f;
}

/* One CTA per (query block, value head): o for the block's rows. */
template <typename Op>
__global__ void __launch_bounds__(FLASH_THREADS) flash_attend_kernel(flash_args a)
{
    const flash_shared<Op> m = flash_carve<Op>(a, false);
    const int bt = a.bt, Kp = a.Kp, Vp = a.Vp;
    const flash_block blk = a.blocks[blockIdx.x];
    const int hv = (int)blockIdx.y, h = hv / a.group;
    const int64_t i0 = blk.start + blk.block * bt;
    const int rows = blk.length - blk.block * bt < bt ? (int)(blk.length - blk.block * bt) : bt;

    lacs_load_tile(m.q_op, Kp, bt, a.q, (i0 * a.H + h) * a.K, (int64_t)a.H * a.K, rows, a.K);
    flash_start_rows(a, m, hv, i0, rows);
    /* the earliest key any row sees is the first row's (resets only move forward) */
    const int64_t earliest = a.gate == FLASH_GATE_PREFIX ? a.first_visible[(int64_t)hv * a.tokens + i0] : blk.start;
    for (int64_t b = blk.block; b >= 0; b--) {
        const int64_t j0 = blk.start + b * bt;
        if (j0 + bt <= earliest)
            break;
        const int n = blk.length - b * bt < bt ? (int)(blk.length - b * bt) : bt;
        __syncthreads(); /* the previous block's products have read K_b, V_b and P */
        flash_load_keys(a, m, h, hv, j0, n, true);
        __syncthreads();
        lacs_block_gemm<false, true>(m.q_op, Kp, m.k_op, Kp, m.s, bt, bt, bt, Kp, false); /* Q K_b^T */
        __syncthreads();
        flash_softmax_step(a, m, i0, rows, blk.start, j0, n, false, true);
        __syncthreads();
        lacs_block_gemm<false, false>(m.p_op, bt, m.v_op, Vp, m.out, Vp, bt, Vp, bt, true); /* N += P V_b */
    }
    __syncthreads();
    for (int e = (int)threadIdx.x; e < rows * a.V; e += (int)blockDim.x) {
        const int r = e / a.V, c = e % a.V;
        a.o[((i0 + r) * a.HV + hv) * a.V + c] = a.normalised ? m.out[r * Vp + c] / m.row_sum[r] : m.out[r * Vp + c];
    }
}

/* DeltaFormer's first stage: one CTA per (sequence, value head), its blocks in order. */
template <typename Op>
__global__ void __launch_bounds__(FLASH_THREADS) deltaformer_first_kernel(flash_args a)
{
    const flash_shared<Op> m = flash_carve<Op>(a, true);
    const int bt = a.bt, Kp = a.Kp, Vp = a.Vp, tid = (int)threadIdx.x, threads = (int)blockDim.x;
    const int64_t seq = blockIdx.x;
    const int hv = (int)blockIdx.y, h = hv / a.group;
    const int64_t start = a.cu_seqlens ? a.cu_seqlens[seq] : seq * a.T;
    const int64_t length = a.cu_seqlens ? a.cu_seqlens[seq + 1] - start : a.T;
    const lacs_view x = a.first_stage_x_is_q ? a.q : a.k;
    const lacs_view u_view = {a.u, 0};

    for (int64_t blk = 0; blk * bt < length; blk++) {
        const int64_t i0 = start + blk * bt;
        const int rows = length - blk * bt < bt ? (int)(length - blk * bt) : bt;
        __syncthreads(); /* the previous block is done with every buffer */
        lacs_load_tile(m.q_op, Kp, bt, x, (i0 * a.H + h) * a.K, (int64_t)a.H * a.K, rows, a.K);
        flash_start_rows(a, m, hv, i0, rows);
        /* the earlier blocks, with the values U already computed (global memory: written by this CTA
         * before a barrier) */
        for (int64_t b = blk - 1; b >= 0; b--) {
            const int64_t j0 = start + b * bt;
            __syncthreads();
            lacs_load_tile(m.k_op, Kp, bt, a.k, (j0 * a.H + h) * a.K, (int64_t)a.H * a.K, bt, a.K);
            /* U was written by this kernel: read by plain loads, never the read-only path */
            lacs_load_tile(m.v_op, Vp, bt, u_view, (j0 * a.HV + hv) * Vp, (int64_t)a.HV * Vp, bt, a.V, false);
            __syncthreads();
            lacs_block_gemm<false, true>(m.q_op, Kp, m.k_op, Kp, m.s, bt, bt, bt, Kp, false);
            __syncthreads();
            flash_softmax_step(a, m, i0, rows, start, j0, bt, true, true);
            __syncthreads();
            lacs_block_gemm<false, false>(m.p_op, bt, m.v_op, Vp, m.out, Vp, bt, Vp, bt, true);
        }
        /* the block itself: j < i, p in fp32 */
        __syncthreads();
        lacs_load_tile(m.k_op, Kp, bt, a.k, (i0 * a.H + h) * a.K, (int64_t)a.H * a.K, rows, a.K);
        __syncthreads();
        lacs_block_gemm<false, true>(m.q_op, Kp, m.k_op, Kp, m.s, bt, bt, bt, Kp, false);
        __syncthreads();
        flash_softmax_step(a, m, i0, rows, start, i0, rows, true, false);
        __syncthreads();
        /* u_i = v_i - beta_i / Z_i (N_i + sum_{a0 <= j < i} p_ij u_j), a thread per value column */
        for (int c = tid; c < Vp; c += threads)
            for (int r = 0; r < rows; r++) {
                const int64_t i = i0 + r;
                float acc = m.out[r * Vp + c];
                for (int j = 0; j < r; j++)
                    acc += m.s[r * bt + j] * m.u_block[j * Vp + c];
                const float beta = a.beta.data ? lacs_view_at(a.beta, i * a.HV + hv) : 1.0f;
                const float coef = !a.normalised ? beta : m.row_sum[r] > 0.0f ? beta / m.row_sum[r] : 0.0f;
                const float v = c < a.V ? lacs_view_at(a.v, (i * a.HV + hv) * a.V + c) : 0.0f;
                const float u = c < a.V ? v - coef * acc : 0.0f;
                m.u_block[r * Vp + c] = u;
                a.u[(i * a.HV + hv) * Vp + c] = u;
            }
    }
}

/* ---- the host side ---- */

static int round16(int64_t n) { return (int)((n + 15) / 16 * 16); }

/* The largest block (64, 32, 16 tokens) whose kernels fit; 0 if none. */
static int choose_block(int Kp, int Vp, int op_bytes, int max_shared_bytes, bool first_stage)
{
    for (int bt = 64; bt >= 16; bt /= 2)
        if (flash_layout_of(bt, Kp, Vp, op_bytes, first_stage).bytes <= (size_t)max_shared_bytes)
            return bt;
    return 0;
}

struct flash_memory {
    flash_block *blocks;
    float *gate_sum;
    int64_t *first_visible;
    float *u;
};

template <typename Op>
static int run_flash(const lacs_cuda_call *c, flash_args a, const std::vector<flash_block> &blocks, int64_t n_seqs,
                     bool deltaformer)
{
    const char *op = c->op;
    int rc = LACS_OK;
    cudaError_t e;
    const dim3 threads(FLASH_THREADS);
    const bool prefix = a.gate == FLASH_GATE_PREFIX;
    const size_t bytes_of[4] = {blocks.size() * sizeof(flash_block), prefix ? (size_t)a.HV * a.tokens * 4 : 0,
                                prefix ? (size_t)a.HV * a.tokens * 8 : 0,
                                deltaformer ? (size_t)a.tokens * a.HV * a.Vp * sizeof(float) : 0};
    void *parts[4];
    size_t total = 0;
    if (!lacs_workspace_carve(bytes_of, parts, 4, &total))
        return lacs_cuda_error(LACS_ERR_MEMORY, op, "out of device memory for the attention's workspace (%zu bytes)",
                               total);
    const flash_memory m = {(flash_block *)parts[0], (float *)parts[1], (int64_t *)parts[2], (float *)parts[3]};
    if (cudaMemcpy(m.blocks, blocks.data(), blocks.size() * sizeof(flash_block), cudaMemcpyHostToDevice) !=
        cudaSuccess)
        rc = lacs_cuda_error(LACS_ERR_MEMORY, op, "copying the block table to the device failed");
    a.blocks = m.blocks;
    a.gate_sum = m.gate_sum;
    a.first_visible = m.first_visible;
    a.u = m.u;
    if (rc == LACS_OK && a.gate == FLASH_GATE_PREFIX) {
        const lacs_gate_scan_args scan = {a.g, a.cu_seqlens, a.T, a.tokens, a.HV, m.gate_sum, m.first_visible};
        if ((e = lacs_gate_scan(scan, n_seqs)) != cudaSuccess)
            rc = lacs_cuda_launch_failed(op, "lacs_gate_scan_kernel", e);
    }
    if (rc == LACS_OK && deltaformer) {
        const size_t bytes = flash_layout_of(a.bt, a.Kp, a.Vp, (int)sizeof(Op), true).bytes;
        if ((e = lacs_launch(deltaformer_first_kernel<Op>, dim3((unsigned)n_seqs, (unsigned)a.HV), threads, bytes,
                             a)) != cudaSuccess)
            rc = lacs_cuda_launch_failed(op, "deltaformer_first_kernel", e);
        /* the second stage: the values are U */
        a.v = lacs_view{m.u, 0};
        a.v_ld = a.Vp;
    }
    if (rc == LACS_OK) {
        const size_t bytes = flash_layout_of(a.bt, a.Kp, a.Vp, (int)sizeof(Op), false).bytes;
        if ((e = lacs_launch(flash_attend_kernel<Op>, dim3((unsigned)blocks.size(), (unsigned)a.HV), threads, bytes,
                             a)) != cudaSuccess)
            rc = lacs_cuda_launch_failed(op, "flash_attend_kernel", e);
    }
    lacs_cuda_workspace_release(); /* waits for the kernels */
    if ((e = cudaGetLastError()) != cudaSuccess && rc == LACS_OK)
        rc = lacs_cuda_error(LACS_ERR_INPUT, op, "the attention kernels failed: %s", cudaGetErrorString(e));
    return rc;
}

int lacs_cuda_flash(const lacs_cuda_call *c)
{
    const char *op = c->op;
    const bool fox = strcmp(op, "fox") == 0, deltaformer = strcmp(op, "deltaformer") == 0;
    if (!fox && !deltaformer && strcmp(op, "softmax_attn") != 0)
        return lacs_cuda_unsupported(op, "not a softmax attention form");
    const lacs_cuda_tensor *q = lacs_cuda_input(c, "q"), *k = lacs_cuda_input(c, "k"), *v = lacs_cuda_input(c, "v");
    const lacs_cuda_tensor *g = lacs_cuda_input(c, "g"), *g_gamma = lacs_cuda_input(c, "g_gamma");
    const lacs_cuda_tensor *cu = lacs_cuda_input(c, "cu_seqlens");
    lacs_cuda_tensor *o = lacs_cuda_output(c, "o");
    if (!o)
        return lacs_cuda_error(LACS_ERR_INPUT, op, "output 'o' is required");

    flash_args a;
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
    a.v_ld = a.V;
    a.cu_seqlens = cu ? (const int64_t *)cu->device : nullptr;
    a.o = (float *)o->device;
    a.normalised = 1;
    if (fox && g) {
        a.gate = FLASH_GATE_PREFIX;
        a.g = lacs_view_of(g);
    } else if (fox && g_gamma) {
        a.gate = FLASH_GATE_ALIBI;
        a.g = lacs_view_of(g_gamma);
    }
    if (deltaformer) {
        const double form = lacs_cuda_param(c, "form", LACS_DELTAFORMER_SOFTMAX);
        if (form != LACS_DELTAFORMER_EXP && form != LACS_DELTAFORMER_SOFTMAX && form != LACS_DELTAFORMER_FLA)
            return lacs_cuda_error(LACS_ERR_PARAM, op, "unknown form %g (0 exp, 1 softmax, 2 fla)", form);
        a.normalised = form != LACS_DELTAFORMER_EXP;
        a.first_stage_x_is_q = form == LACS_DELTAFORMER_FLA;
        a.beta = lacs_view_of(lacs_cuda_input(c, "beta"));
    }
    a.Kp = round16(a.K > 0 ? a.K : 1);
    a.Vp = round16(a.V > 0 ? a.V : 1);
    if (a.tokens == 0 || a.HV == 0 || a.V == 0)
        return LACS_OK; /* nothing to compute: o is empty */

    const int op_bytes = c->bf16 ? 2 : 4;
    a.bt = choose_block(a.Kp, a.Vp, op_bytes, c->max_shared_bytes, deltaformer);
    if (a.bt == 0)
        return lacs_cuda_unsupported(op, "K = %d and V = %d need %zu bytes of shared memory per block even with "
                                         "blocks of 16 tokens; the device allows %d", a.K, a.V,
                                     flash_layout_of(16, a.Kp, a.Vp, op_bytes, deltaformer).bytes,
                                     c->max_shared_bytes);

    /* the blocks of every sequence, the latest (longest walk) first so that the CTAs finish together */
    const int64_t n_seqs = cu ? cu->shape[0] - 1 : q->shape[0];
    std::vector<flash_block> blocks;
    for (int64_t n = 0; n < n_seqs; n++) {
        const int64_t start = cu ? ((const int64_t *)cu->host)[n] : n * a.T;
        const int64_t length = cu ? ((const int64_t *)cu->host)[n + 1] - start : a.T;
        for (int64_t b = 0; b * a.bt < length; b++)
            blocks.push_back(flash_block{start, length, b});
    }
    if (blocks.empty())
        return LACS_OK;
    std::stable_sort(blocks.begin(), blocks.end(),
                     [](const flash_block &x, const flash_block &y) { return x.block > y.block; });
    return c->bf16 ? run_flash<unsigned short>(c, a, blocks, n_seqs, deltaformer)
                   : run_flash<float>(c, a, blocks, n_seqs, deltaformer);
}

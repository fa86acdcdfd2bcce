/* builtin:cuda, the gradients of the attention forms (SPEC.md 4.19;
 * optimized/cuda/README.md section 10): softmax_attn_vjp (H1), fox_vjp
 * (H10: FoX's g or ALiBi's g_gamma), deltaformer_vjp (H11) and
 * path_attn_vjp (H12).
 *
 * FlashAttention-2's backward (Dao, arXiv 2307.08691, Algorithm 2) in its
 * simplest deterministic form: no T x T matrix, the weights recomputed from
 * each row's statistics, every sum in a fixed order, no float atomics. For
 * one attention "pass" (a causal attention with query vectors x, keys k,
 * values u and the output's cotangent dy; softmax_attn and fox are one pass
 * with x = q, u = v, dy = do):
 *   l_ij = scale x_i . k_j + gate_ij      (j visible from i: lo_i <= j <= i,
 *                                          or j < i for a strictly causal pass)
 *   p_ij = exp(l_ij - m_i) / Z_i          (m_i the row's maximum, Z_i its sum)
 *   dp_ij = dy_i . u_j
 *   dl_ij = p_ij (dp_ij - D_i), D_i = sum_j p_ij dp_ij   (the softmax's adjoint)
 *   dx_i += scale sum_j dl_ij k_j,  dk_j += scale sum_i dl_ij x_i,
 *   du_j += sum_i p_ij dy_i,        dG_i += sum_j dl_ij, dG_j -= sum_i dl_ij.
 * The softmax's adjoint without cancellation (SPEC.md 4.19, the reference's
 * lacs_internal_softmax_adjoint): with J the row's largest weight (the first
 * of equal ones), S_i = sum_{j != J} p_ij (dp_ij - dp_iJ) = D_i - dp_iJ and
 *   dl_ij = p_ij ((dp_ij - dp_iJ) - S_i)  (j != J),   dl_iJ = -p_iJ S_i,
 * so that no term is a difference of two nearly equal sums, and the row's
 * dl sum to 0: its own gate term dG_i is 0 (as builtin:cpu's correction
 * about the dominant weight makes it). DeltaFormer's EXP form has
 * unnormalised weights p_ij = exp(l_ij) and dl_ij = p_ij dp_ij.
 *
 * Kernels (256 threads, one warp per row or column, lanes over the other
 * index, 32 at a time; a warp's 32 dl and p go through its own 64 floats of
 * shared memory between two __syncwarp):
 *   1. attn_vjp_rows_kernel, a warp per (query i, value head): m_i, J_i,
 *      Z_i, dp_iJ, S_i (three walks over the row's keys, warp sums by
 *      shuffles), stored for the columns; then dx_i, each lane its own key
 *      channels, summed over j in j order;
 *   2. attn_vjp_columns_kernel, a warp per (key j, value head): the same
 *      p_ij and dl_ij (the same device function, the same bits) for every
 *      query that sees j; dk_j, du_j and the column sum, summed over i in i
 *      order;
 *   3. attn_vjp_gate_kernel, a thread per value head: dG_t = -(column sum
 *      of t), and dg_tau = sum_{t >= tau} dG_t within tau's segment (0 at the
 *      segment's first token, whose g no logit reads); ALiBi's dg_gamma the
 *      sum of those over every token of the head, in token order;
 *   4. attn_vjp_key_kernel, a thread per (token, q/k head, channel): dq and
 *      dk summed over the head's value heads (GVA) in value head order.
 * Each (row or column, value head) is one warp's, so the partial sums are
 * written by one thread each: the same bits whatever the schedule.
 *
 * DeltaFormer (H11), O = A U, U = (I + diag(beta) B)^{-1} V: U by its first
 * stage again (deltaformer_vjp_values_kernel, a CTA per (sequence, value
 * head), row after row); a pass for A (x = q, values U) gives dq, dk and the
 * second stage's du; the first stage's adjoint from the last row
 * (deltaformer_vjp_first_stage_kernel, the reference's order: du_i is
 * complete once every later row is done) gives dv = du, dbeta and B's
 * output cotangent -beta_i du_i; a strictly causal pass for B (x = k, or q in
 * fla's form, values U) takes it back to the scores. Both stages sequential
 * in the tokens are O(T^2 (K + V)) per (sequence, head) on one CTA.
 *
 * PaTH (H12), l_ij = scale (q_i . H_i ... H_{j+1} k_j + G_i - G_j): the
 * reference's adjoint, key by key (SPEC.md 4.19). path_vjp_rows_kernel (a
 * warp per row) takes the row's statistics from the row's own recurrence
 * y = H_{j+1} ... H_i q_i; path_vjp_columns_kernel (a warp per (sequence,
 * value head), the keys one after another) runs each column's recurrence
 * x_i = H_i x_{i-1} forward (the chain kept in the workspace), dl from the
 * statistics, then its adjoint back: dq, dk, dw, dbeta, dv, the column sums.
 * O(T^2 K) per (sequence, head) on one warp.
 *
 * Tiers: everything is binary32 (bf16 inputs widened exactly, SPEC.md 11.1's
 * bf16 tier with fp32 accumulation); exp is the device's expf.
 *
 * K and V: each lane holds up to 8 channels of K (and of V) in registers, so
 * K, V <= 256; above, LACS_UNSUPPORTED.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "attention_common.cuh"

#define ATTN_VJP_THREADS 256
#define ATTN_VJP_WARPS (ATTN_VJP_THREADS / 32)
const int attn_vjp_max_channels = 8; /* per lane: K, V <= 256 */

enum attn_vjp_gate { ATTN_VJP_GATE_NONE = 0, ATTN_VJP_GATE_PREFIX = 1, ATTN_VJP_GATE_ALIBI = 2 };

/* Token t (flattened over B x T) of q/k head h: (t H + h) K + c; of value
 * head hv: (t HV + hv) V + c; the per-row tables: hv tokens + t. */
struct attn_vjp_params {
    lacs_view x, k;           /* the query vectors (q, or DeltaFormer's k) and the keys, [tokens, H, K] */
    lacs_view u, dy;          /* the values and the output's cotangent, [tokens, HV, V] */
    const int64_t *seq_start; /* [tokens]: the first token of t's sequence, -1 outside every sequence */
    const int64_t *seq_end;   /* [tokens]: one past the last */
    int64_t tokens;
    int H, HV, group, K, V;
    float scale;
    int gate;                     /* attn_vjp_gate */
    lacs_view g;                  /* FoX's g [tokens, HV] or ALiBi's g_gamma [HV] */
    const float *gate_sum;        /* PREFIX: [HV][tokens] (lacs_gate_scan_kernel) */
    const int64_t *first_visible; /* PREFIX: [HV][tokens] */
    int strict;                   /* the diagonal not visible (DeltaFormer's first stage) */
    int normalised;               /* softmax; 0: DeltaFormer's EXP form */
    float *row_max, *row_sum, *row_dp_dominant, *row_shifted; /* [HV][tokens]: m_i, Z_i, dp_iJ, S_i */
    int64_t *row_dominant;                                    /* [HV][tokens]: J_i */
    float *dx_part, *dk_part;     /* [tokens][HV][K], added to (unscaled sums times scale) */
    float *du;                    /* [tokens][HV][V], added to */
    float *col_sum;               /* [HV][tokens], added to */
    float *dg, *dg_gamma;         /* the outputs (the gate kernel); NULL: not asked for */
    float *dq, *dk;               /* the outputs (the key kernel) */
    const float *dq_part;         /* the key kernel's dq partials (dx_part of the passes that read q) */
    /* DeltaFormer's first stage (the sequential kernels, a CTA per (sequence, value head)) */
    const int64_t *cu_seqlens;    /* device; NULL: sequence n is tokens n T .. n T + T - 1 */
    int64_t T;
    lacs_view v, beta;            /* beta absent: 1 */
    float *values;                /* U [tokens][HV][V], fp32 */
    float *du_total;              /* the cotangent of U [tokens][HV][V]: the second stage's, then the first's */
    float *dy_first;              /* the first stage's output cotangent -beta_i du_i [tokens][HV][V] */
    float *weights;               /* [HV][tokens]: one row of B at a time, per (sequence, value head) */
    float *dv, *dbeta, *dw;       /* the outputs; NULL: not asked for */
    /* PaTH (H12) */
    lacs_view w;                  /* the transitions' vectors [tokens, H, K]; beta [tokens, HV] above */
    float gate_factor;            /* the gate's factor in the logits: 1 (FoX), scale (PaTH: inside the scale) */
    float *chain;                 /* [tokens][HV][K]: one column's x_i = H_i ... H_{j+1} k_j */
    float *da;                    /* [HV][tokens]: one column's scale dl_ij */
    float *dw_part;               /* [tokens][HV][K] */
};

/* The first key query i sees (with the gate's hard resets). */
__device__ __forceinline__ int64_t attn_vjp_first_key(const attn_vjp_params &p, int hv, int64_t i)
{
    return p.gate == ATTN_VJP_GATE_PREFIX ? p.first_visible[(int64_t)hv * p.tokens + i] : p.seq_start[i];
}

/* l_ij = scale x_i . k_j + gate_ij (the forward's order: the gate after the scale; flash.cu). */
__device__ __forceinline__ float attn_vjp_logit(const attn_vjp_params &p, int hv, int h, int64_t i, int64_t j)
{
    const int64_t xi = (i * p.H + h) * p.K, kj = (j * p.H + h) * p.K;
    float s = 0.0f;
    for (int c = 0; c < p.K; c++)
        s = fmaf(lacs_view_at(p.x, xi + c), lacs_view_at(p.k, kj + c), s);
    float l = p.scale * s;
    if (p.gate == ATTN_VJP_GATE_PREFIX)
        l += p.gate_sum[(int64_t)hv * p.tokens + i] - p.gate_sum[(int64_t)hv * p.tokens + j];
    else if (p.gate == ATTN_VJP_GATE_ALIBI)
        l += (float)(i - j) * lacs_view_at(p.g, hv);
    return l;
}

/* dp_ij = dy_i . u_j */
__device__ __forceinline__ float attn_vjp_dp(const attn_vjp_params &p, int hv, int64_t i, int64_t j)
{
    const int64_t yi = (i * p.HV + hv) * p.V, uj = (j * p.HV + hv) * p.V;
    float s = 0.0f;
    for (int c = 0; c < p.V; c++)
        s = fmaf(lacs_view_at(p.dy, yi + c), lacs_view_at(p.u, uj + c), s);
    return s;
}

/* p_ij and dl_ij from the logit, dp_ij and the row's statistics (row r = hv tokens + i). */
__device__ __forceinline__ void attn_vjp_adjoint(const attn_vjp_params &p, int64_t r, int64_t j, float l, float dp,
                                                 float *weight, float *dl)
{
    if (!p.normalised) { /* EXP: w = exp(l), dl = w dp */
        *weight = expf(l);
        *dl = *weight * dp;
        return;
    }
    const float w = expf(l - p.row_max[r]) / p.row_sum[r];
    *weight = w;
    if (LACS_MUTANT(LACS_MUTANT_ATTN_VJP_NO_ROW_SUM)) /* the wrong twin: dS = P (.) dP, without - D */
        *dl = j == p.row_dominant[r] ? 0.0f : w * (dp - p.row_dp_dominant[r]);
    else if (j == p.row_dominant[r])
        *dl = -w * p.row_shifted[r];
    else
        *dl = w * ((dp - p.row_dp_dominant[r]) - p.row_shifted[r]);
}

/* p_ij and dl_ij: the same bits in the row and the column kernels. */
__device__ __forceinline__ void attn_vjp_pair(const attn_vjp_params &p, int hv, int h, int64_t i, int64_t j,
                                              float *weight, float *dl)
{
    attn_vjp_adjoint(p, (int64_t)hv * p.tokens + i, j, attn_vjp_logit(p, hv, h, i, j), attn_vjp_dp(p, hv, i, j),
                     weight, dl);
}

/* A warp's item in the rows and columns kernels (a grid of (tokens / 8, HV) CTAs of 8 warps): its token
 * (a query row or a key), value head and 64 floats of shared memory; false, for the whole warp, past the
 * tokens or outside every sequence. */
struct attn_vjp_item {
    int lane, hv, h;
    int64_t t;
    float *scratch;
};

__device__ __forceinline__ bool attn_vjp_item_of(const attn_vjp_params &p, attn_vjp_item *it)
{
    const int warp = (int)threadIdx.x / 32;
    it->lane = (int)threadIdx.x % 32;
    it->hv = (int)blockIdx.y;
    it->h = it->hv / p.group;
    it->t = (int64_t)blockIdx.x * ATTN_VJP_WARPS + warp;
    it->scratch = reinterpret_cast<float *>(lacs_shared_memory()) + warp * 64;
    return it->t < p.tokens && p.seq_start[it->t] >= 0;
}

/* 1. A warp per (query row i, value head): the row's statistics, then dx_i. */
__global__ void __launch_bounds__(ATTN_VJP_THREADS) attn_vjp_rows_kernel(attn_vjp_params p)
{
    attn_vjp_item it;
    if (!attn_vjp_item_of(p, &it))
        return; /* the whole warp */
    const int lane = it.lane, hv = it.hv, h = it.h;
    const int64_t i = it.t, lo = attn_vjp_first_key(p, hv, i), hi = p.strict ? i - 1 : i;
    if (hi < lo)
        return; /* no visible key (a strictly causal pass's first row) */
    const int64_t rounds = (hi - lo + 1 + 31) / 32, r = (int64_t)hv * p.tokens + i;
    float *dl_of = it.scratch;

    if (p.normalised) {
        /* the maximum and its (first) key */
        float m = -INFINITY;
        double at = (double)(hi + 1);
        for (int64_t round = 0; round < rounds; round++) {
            const int64_t j = lo + round * 32 + lane;
            if (j <= hi) {
                const float l = attn_vjp_logit(p, hv, h, i, j);
                if (l > m)
                    m = l, at = (double)j;
            }
        }
        for (int mask = 16; mask > 0; mask >>= 1) {
            const float other = __shfl_xor_sync(0xffffffffu, m, mask);
            const double other_at = __shfl_xor_sync(0xffffffffu, at, mask);
            if (other > m || (other == m && other_at < at))
                m = other, at = other_at;
        }
        const int64_t J = (int64_t)at;
        float z = 0.0f;
        for (int64_t round = 0; round < rounds; round++) {
            const int64_t j = lo + round * 32 + lane;
            if (j <= hi)
                z += expf(attn_vjp_logit(p, hv, h, i, j) - m);
        }
        const float Z = lacs_warp_sum(z), dpJ = attn_vjp_dp(p, hv, i, J);
        /* S_i = sum_{j != J} p_ij (dp_ij - dp_iJ) */
        float s = 0.0f;
        for (int64_t round = 0; round < rounds; round++) {
            const int64_t j = lo + round * 32 + lane;
            if (j <= hi && j != J)
                s += expf(attn_vjp_logit(p, hv, h, i, j) - m) / Z * (attn_vjp_dp(p, hv, i, j) - dpJ);
        }
        const float S = lacs_warp_sum(s);
        if (lane == 0) {
            p.row_max[r] = m;
            p.row_sum[r] = Z;
            p.row_dominant[r] = J;
            p.row_dp_dominant[r] = dpJ;
            p.row_shifted[r] = S;
        }
        /* the pairs below read the statistics back: a lane reads what lane 0 wrote */
        __syncwarp();
    }

    float acc[attn_vjp_max_channels];
    for (int e = 0; e < attn_vjp_max_channels; e++)
        acc[e] = 0.0f;
    for (int64_t round = 0; round < rounds; round++) {
        const int64_t j0 = lo + round * 32, j = j0 + lane;
        float w = 0.0f, dl = 0.0f;
        if (j <= hi)
            attn_vjp_pair(p, hv, h, i, j, &w, &dl);
        dl_of[lane] = dl;
        __syncwarp();
        for (int jj = 0; jj < 32 && j0 + jj <= hi; jj++) {
            const float d = dl_of[jj];
            const int64_t kj = ((j0 + jj) * p.H + h) * p.K;
            for (int e = 0; e < attn_vjp_max_channels; e++) {
                const int c = lane + 32 * e;
                if (c < p.K)
                    acc[e] = fmaf(d, lacs_view_at(p.k, kj + c), acc[e]);
            }
        }
        __syncwarp(); /* every lane has read dl_of before the next round writes it */
    }
    for (int e = 0; e < attn_vjp_max_channels; e++) {
        const int c = lane + 32 * e;
        if (c < p.K)
            p.dx_part[(i * p.HV + hv) * p.K + c] += p.scale * acc[e];
    }
}

/* 2. A warp per (key j, value head): dk_j, du_j and the column sum of dl over the queries that see j. */
__global__ void __launch_bounds__(ATTN_VJP_THREADS) attn_vjp_columns_kernel(attn_vjp_params p)
{
    attn_vjp_item it;
    if (!attn_vjp_item_of(p, &it))
        return; /* the whole warp */
    const int64_t j = it.t, first = p.strict ? j + 1 : j, end = p.seq_end[j];
    const int lane = it.lane, hv = it.hv, h = it.h;
    float *dl_of = it.scratch, *w_of = dl_of + 32;
    float dk[attn_vjp_max_channels], du[attn_vjp_max_channels], column = 0.0f;
    for (int e = 0; e < attn_vjp_max_channels; e++)
        dk[e] = du[e] = 0.0f;
    for (int64_t i0 = first; i0 < end; i0 += 32) {
        const int64_t i = i0 + lane;
        float w = 0.0f, dl = 0.0f;
        if (i < end && attn_vjp_first_key(p, hv, i) <= j)
            attn_vjp_pair(p, hv, h, i, j, &w, &dl);
        dl_of[lane] = dl;
        w_of[lane] = w;
        __syncwarp();
        for (int ii = 0; ii < 32 && i0 + ii < end; ii++) {
            const float d = dl_of[ii], weight = w_of[ii];
            const int64_t xi = ((i0 + ii) * p.H + h) * p.K, yi = ((i0 + ii) * p.HV + hv) * p.V;
            column += d;
            for (int e = 0; e < attn_vjp_max_channels; e++) {
                const int c = lane + 32 * e;
                if (c < p.K)
                    dk[e] = fmaf(d, lacs_view_at(p.x, xi + c), dk[e]);
                if (c < p.V)
                    du[e] = fmaf(weight, lacs_view_at(p.dy, yi + c), du[e]);
            }
        }
        __syncwarp(); /* every lane has read the round's dl and p before the next round writes them */
    }
    for (int e = 0; e < attn_vjp_max_channels; e++) {
        const int c = lane + 32 * e;
        if (c < p.K)
            p.dk_part[(j * p.HV + hv) * p.K + c] += p.scale * dk[e];
        if (c < p.V)
            p.du[(j * p.HV + hv) * p.V + c] += du[e];
    }
    if (lane == 0)
        p.col_sum[(int64_t)hv * p.tokens + j] += column;
}

/* 3. A thread per value head: the gates' gradients from dG_t = -(column sum of t) (each row's own term is 0:
 * its dl sum to 0). dg_tau = sum of dG_t over t >= tau in tau's segment (the sequence, cut at each hard reset),
 * 0 at the segment's first token; ALiBi: dg_gamma = the sum of those over the head's tokens (the reference's
 * driver sums the per-token gradient of a constant gate), in the order of the sequences and tokens from the
 * last. */
__global__ void __launch_bounds__(32) attn_vjp_gate_kernel(attn_vjp_params p)
{
    const int hv = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (hv >= p.HV)
        return;
    float total = 0.0f, run = 0.0f;
    for (int64_t t = p.tokens - 1; t >= 0; t--) {
        const int64_t start = p.seq_start[t];
        if (start < 0)
            continue;
        if (t == p.seq_end[t] - 1)
            run = 0.0f; /* a sequence's last token: its run starts */
        float value = 0.0f;
        if (t == start || (p.gate == ATTN_VJP_GATE_PREFIX && p.first_visible[(int64_t)hv * p.tokens + t] == t)) {
            run = 0.0f;
        } else {
            if (LACS_MUTANT(LACS_MUTANT_ATTN_VJP_GATE_SIGN)) /* the wrong twin: the key's term with the query's sign */
                run += p.col_sum[(int64_t)hv * p.tokens + t];
            else
                run -= p.col_sum[(int64_t)hv * p.tokens + t];
            value = p.gate_factor * run;
        }
        if (p.dg)
            p.dg[t * p.HV + hv] = value;
        total += value;
    }
    if (p.dg_gamma)
        p.dg_gamma[hv] = total;
}

/* 4. A thread per (token, q/k head, channel): dq and dk (and PaTH's dw), summed over the head's value heads in
 * value head order. */
__global__ void __launch_bounds__(256) attn_vjp_key_kernel(attn_vjp_params p)
{
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= p.tokens * p.H * p.K)
        return;
    const int c = (int)(e % p.K), h = (int)(e / p.K % p.H);
    const int64_t t = e / p.K / p.H;
    float dq = 0.0f, dk = 0.0f, dw = 0.0f;
    for (int g = 0; g < p.group; g++) {
        const int64_t part = (t * p.HV + h * p.group + g) * p.K + c;
        dq += p.dq_part[part];
        dk += p.dk_part[part];
        if (p.dw_part)
            dw += p.dw_part[part];
    }
    if (p.dq)
        p.dq[e] = dq;
    if (p.dk)
        p.dk[e] = dk;
    if (p.dw)
        p.dw[e] = dw;
}

/* ---- DeltaFormer's first stage (H11): u_i = v_i - beta_i sum_{j<i} B_ij u_j, sequential in the tokens ----
 * A CTA per (sequence, value head) walks the rows; B's row i (x_i = k_i, or q_i in fla's form, against the
 * keys j < i; a causal softmax, or EXP's exp(l) as it is) is recomputed by deltaformer_vjp_weights_row, the
 * same code forward and backward. */

/* The block's sum (or maximum) of one value per thread, in thread order (thread 0 adds them): deterministic.
 * red has blockDim.x + 1 floats of shared memory. */
__device__ float deltaformer_vjp_block_reduce(float *red, float x, bool maximum)
{
    const int tid = (int)threadIdx.x, n = (int)blockDim.x;
    red[tid] = x;
    __syncthreads();
    if (tid == 0) {
        float r = red[0];
        for (int t = 1; t < n; t++)
            r = maximum ? fmaxf(r, red[t]) : r + red[t];
        red[n] = r;
    }
    __syncthreads();
    const float r = red[n];
    __syncthreads(); /* every thread has read the result before red is written again */
    return r;
}

/* weights[j - start] = B_ij for start <= j < i (each thread its own j, then a barrier). */
__device__ void deltaformer_vjp_weights_row(const attn_vjp_params &p, int hv, int h, int64_t start, int64_t i,
                                            float *weights, float *red)
{
    const int tid = (int)threadIdx.x, n = (int)blockDim.x;
    float m = -INFINITY;
    for (int64_t j = start + tid; j < i; j += n) {
        const float l = attn_vjp_logit(p, hv, h, i, j);
        weights[j - start] = l;
        m = fmaxf(m, l);
    }
    if (!p.normalised) { /* EXP: exp(l), no maximum, no normalisation (it may overflow, by definition) */
        for (int64_t j = start + tid; j < i; j += n)
            weights[j - start] = expf(weights[j - start]);
        __syncthreads();
        return;
    }
    m = deltaformer_vjp_block_reduce(red, m, true);
    float z = 0.0f;
    for (int64_t j = start + tid; j < i; j += n)
        z += (weights[j - start] = expf(weights[j - start] - m));
    const float Z = deltaformer_vjp_block_reduce(red, z, false);
    for (int64_t j = start + tid; j < i; j += n)
        weights[j - start] /= Z;
    __syncthreads();
}

__device__ __forceinline__ void attn_vjp_sequence(const attn_vjp_params &p, int64_t n, int64_t *start,
                                                         int64_t *end)
{
    *start = p.cu_seqlens ? p.cu_seqlens[n] : n * p.T;
    *end = p.cu_seqlens ? p.cu_seqlens[n + 1] : *start + p.T;
}

/* U, row after row (fp32: the bf16 tier's fp32 accumulation; the forward's U in bf16 is an intermediate). */
__global__ void __launch_bounds__(ATTN_VJP_THREADS) deltaformer_vjp_values_kernel(attn_vjp_params p)
{
    float *red = reinterpret_cast<float *>(lacs_shared_memory());
    const int hv = (int)blockIdx.y, h = hv / p.group, tid = (int)threadIdx.x;
    int64_t start, end;
    attn_vjp_sequence(p, blockIdx.x, &start, &end);
    float *weights = p.weights + (int64_t)hv * p.tokens + start;
    for (int64_t i = start; i < end; i++) {
        deltaformer_vjp_weights_row(p, hv, h, start, i, weights, red);
        const float beta = p.beta.data ? lacs_view_at(p.beta, i * p.HV + hv) : 1.0f;
        for (int c = tid; c < p.V; c += (int)blockDim.x) {
            float r = 0.0f;
            for (int64_t j = start; j < i; j++)
                r = fmaf(weights[j - start], p.values[(j * p.HV + hv) * p.V + c], r);
            p.values[(i * p.HV + hv) * p.V + c] = lacs_view_at(p.v, (i * p.HV + hv) * p.V + c) - beta * r;
        }
        __syncthreads(); /* u_i is written before the next row reads it, B_i read before it is overwritten */
    }
}

/* The first stage's adjoint, rows from the last (du_i is complete once every later row is done):
 *   dv_i = du_i,  dbeta_i = -du_i . r_i (r_i = sum_{j<i} B_ij u_j),  du_j -= beta_i B_ij du_i (j < i),
 * and B's row i has the output cotangent dy_i = -beta_i du_i (dB_ij = dy_i . u_j), for the strictly causal
 * attention pass that takes B back to its scores. */
__global__ void __launch_bounds__(ATTN_VJP_THREADS) deltaformer_vjp_first_stage_kernel(attn_vjp_params p)
{
    float *red = reinterpret_cast<float *>(lacs_shared_memory());
    const int hv = (int)blockIdx.y, h = hv / p.group, tid = (int)threadIdx.x, n = (int)blockDim.x;
    int64_t start, end;
    attn_vjp_sequence(p, blockIdx.x, &start, &end);
    float *weights = p.weights + (int64_t)hv * p.tokens + start;
    for (int64_t i = end - 1; i >= start; i--) {
        deltaformer_vjp_weights_row(p, hv, h, start, i, weights, red);
        const float beta = p.beta.data ? lacs_view_at(p.beta, i * p.HV + hv) : 1.0f;
        const int64_t row = (i * p.HV + hv) * p.V;
        float dbeta = 0.0f;
        for (int c = tid; c < p.V; c += n) {
            float r = 0.0f;
            for (int64_t j = start; j < i; j++)
                r = fmaf(weights[j - start], p.values[(j * p.HV + hv) * p.V + c], r);
            const float du = p.du_total[row + c];
            dbeta -= du * r;
            p.dy_first[row + c] = -beta * du;
            if (p.dv)
                p.dv[row + c] = du;
        }
        dbeta = deltaformer_vjp_block_reduce(red, dbeta, false);
        if (tid == 0 && p.dbeta)
            p.dbeta[i * p.HV + hv] = dbeta;
        for (int64_t e = tid; e < (i - start) * p.V; e += n) {
            const int64_t j = start + e / p.V;
            const int c = (int)(e % p.V);
            p.du_total[(j * p.HV + hv) * p.V + c] -= beta * weights[j - start] * p.du_total[row + c];
        }
        __syncthreads(); /* every du_j is updated before row i - 1 reads it, B_i read before it is overwritten */
    }
}

/* ---- PaTH (H12): l_ij = scale (q_i . H_i ... H_{j+1} k_j + G_i - G_j), H_t = I - beta_t w_t w_t^T ----
 * A warp holds a K-vector in registers, lane l channels l, l + 32, ... (8 at most); its dot products are
 * each lane's terms in channel order, then a warp sum by shuffles (the same in every lane). */

__device__ __forceinline__ float path_vjp_dot(const float *x, lacs_view y, int64_t base, int K, int lane)
{
    float s = 0.0f;
    for (int e = 0; e < attn_vjp_max_channels; e++)
        if (lane + 32 * e < K)
            s = fmaf(x[e], lacs_view_at(y, base + lane + 32 * e), s);
    return lacs_warp_sum(s);
}

/* x <- H_t x = x - beta_t w_t (w_t . x) (the reference's apply_transition) */
__device__ __forceinline__ void path_vjp_transition(const attn_vjp_params &p, int hv, int h, int64_t t, float *x,
                                                    int lane)
{
    const int64_t wt = (t * p.H + h) * p.K;
    const float coef = lacs_view_at(p.beta, t * p.HV + hv) * path_vjp_dot(x, p.w, wt, p.K, lane);
    for (int e = 0; e < attn_vjp_max_channels; e++)
        if (lane + 32 * e < p.K)
            x[e] -= coef * lacs_view_at(p.w, wt + lane + 32 * e);
}

/* The logit from a = q_i . R_ij k_j: the gate inside the scale (fla's PaTH-FoX). */
__device__ __forceinline__ float path_vjp_logit(const attn_vjp_params &p, int hv, int64_t i, int64_t j, float a)
{
    return p.scale * (p.gate == ATTN_VJP_GATE_PREFIX
                          ? a + (p.gate_sum[(int64_t)hv * p.tokens + i] - p.gate_sum[(int64_t)hv * p.tokens + j])
                          : a);
}

/* 1. A warp per (query row i, value head): the row's statistics (m_i, J_i, Z_i, dp_iJ, S_i, as
 * attn_vjp_rows_kernel's) from the row's own recurrence q_i . R_ij k_j = (H_{j+1} ... H_i q_i) . k_j, y = q_i
 * carried from j = i down (H is symmetric); three walks. */
__global__ void __launch_bounds__(ATTN_VJP_THREADS) path_vjp_rows_kernel(attn_vjp_params p)
{
    attn_vjp_item it;
    if (!attn_vjp_item_of(p, &it))
        return; /* the whole warp */
    const int lane = it.lane, hv = it.hv, h = it.h;
    const int64_t i = it.t;
    const int64_t lo = attn_vjp_first_key(p, hv, i), r = (int64_t)hv * p.tokens + i, qi = (i * p.H + h) * p.K;
    float y[attn_vjp_max_channels];
    float m = -INFINITY, Z = 0.0f, S = 0.0f, dpJ = 0.0f;
    int64_t J = i;
    for (int walk = 0; walk < 3; walk++) {
        for (int e = 0; e < attn_vjp_max_channels; e++)
            y[e] = lane + 32 * e < p.K ? lacs_view_at(p.x, qi + lane + 32 * e) : 0.0f;
        float sum = 0.0f;
        for (int64_t j = i; j >= lo; j--) {
            const float l = path_vjp_logit(p, hv, i, j, path_vjp_dot(y, p.k, (j * p.H + h) * p.K, p.K, lane));
            if (walk == 0 && l >= m) /* the first of equal maxima: the walk goes down */
                m = l, J = j;
            else if (walk == 1)
                sum += expf(l - m);
            else if (walk == 2 && j != J)
                sum += expf(l - m) / Z * (attn_vjp_dp(p, hv, i, j) - dpJ);
            if (j > lo)
                path_vjp_transition(p, hv, h, j, y, lane);
        }
        if (walk == 1)
            Z = sum, dpJ = attn_vjp_dp(p, hv, i, J);
        else if (walk == 2)
            S = sum;
    }
    if (lane == 0) {
        p.row_max[r] = m;
        p.row_sum[r] = Z;
        p.row_dominant[r] = J;
        p.row_dp_dominant[r] = dpJ;
        p.row_shifted[r] = S;
    }
}

/* 2. A warp (a CTA of 32 threads) per (sequence, value head), the keys one after another: the reference's
 * adjoint of each column's recurrence x_j = k_j, x_i = H_i x_{i-1}, a_ij = q_i . x_i. Forward over the queries
 * that see j: x_i (into the chain), l_ij, p_ij and dl_ij from the row's statistics, dv_j, the column sum, and
 * da_ij = scale dl_ij; then back from the last with dx = 0:
 *   dx += da_ij q_i,  dq_i += da_ij x_i;  for i > j, c = w_i . x_{i-1}, e = w_i . dx:
 *   dbeta_i -= e c,  dw_i -= beta_i (c dx + e x_{i-1}),  dx -= beta_i e w_i;  and dk_j += dx.
 * Every sum into dq_i, dw_i, dbeta_i is this warp's, in key order: deterministic. O(T^2 K) per (sequence, head)
 * on one warp: correct, not fast. */
__global__ void __launch_bounds__(32) path_vjp_columns_kernel(attn_vjp_params p)
{
    const int lane = (int)threadIdx.x, hv = (int)blockIdx.y, h = hv / p.group;
    int64_t start, end;
    attn_vjp_sequence(p, blockIdx.x, &start, &end);
    float *da = p.da + (int64_t)hv * p.tokens;
    for (int64_t j = start; j < end; j++) {
        int64_t last = j; /* the queries that see j: j .. last (hard resets only move forward) */
        while (last + 1 < end && attn_vjp_first_key(p, hv, last + 1) <= j)
            last++;
        float x[attn_vjp_max_channels], dv[attn_vjp_max_channels], column = 0.0f;
        for (int e = 0; e < attn_vjp_max_channels; e++) {
            x[e] = lane + 32 * e < p.K ? lacs_view_at(p.k, (j * p.H + h) * p.K + lane + 32 * e) : 0.0f;
            dv[e] = 0.0f;
        }
        for (int64_t i = j; i <= last; i++) {
            if (i > j)
                path_vjp_transition(p, hv, h, i, x, lane);
            const int64_t xi = (i * p.HV + hv) * p.K, yi = (i * p.HV + hv) * p.V;
            for (int e = 0; e < attn_vjp_max_channels; e++)
                if (lane + 32 * e < p.K)
                    p.chain[xi + lane + 32 * e] = x[e]; /* each lane reads back only its own channels */
            const float l = path_vjp_logit(p, hv, i, j, path_vjp_dot(x, p.x, (i * p.H + h) * p.K, p.K, lane));
            float weight, dl;
            attn_vjp_adjoint(p, (int64_t)hv * p.tokens + i, j, l, attn_vjp_dp(p, hv, i, j), &weight, &dl);
            column += dl;
            for (int e = 0; e < attn_vjp_max_channels; e++)
                if (lane + 32 * e < p.V)
                    dv[e] = fmaf(weight, lacs_view_at(p.dy, yi + lane + 32 * e), dv[e]);
            if (lane == 0)
                da[i] = p.scale * dl;
        }
        __syncwarp(); /* lane 0's da is written before every lane reads it */
        float dx[attn_vjp_max_channels];
        for (int e = 0; e < attn_vjp_max_channels; e++)
            dx[e] = 0.0f;
        for (int64_t i = last; i >= j; i--) {
            const float a = da[i];
            const int64_t qi = (i * p.H + h) * p.K, xi = (i * p.HV + hv) * p.K;
            for (int e = 0; e < attn_vjp_max_channels; e++) {
                const int c = lane + 32 * e;
                if (c < p.K) {
                    dx[e] = fmaf(a, lacs_view_at(p.x, qi + c), dx[e]);
                    p.dx_part[xi + c] = fmaf(a, p.chain[xi + c], p.dx_part[xi + c]);
                }
            }
            if (i == j)
                break;
            const int64_t prev = ((i - 1) * p.HV + hv) * p.K, wi = (i * p.H + h) * p.K;
            float x_prev[attn_vjp_max_channels];
            for (int e = 0; e < attn_vjp_max_channels; e++)
                x_prev[e] = lane + 32 * e < p.K ? p.chain[prev + lane + 32 * e] : 0.0f;
            const float c_dot = path_vjp_dot(x_prev, p.w, wi, p.K, lane), e_dot = path_vjp_dot(dx, p.w, wi, p.K, lane);
            const float beta = lacs_view_at(p.beta, i * p.HV + hv);
            if (lane == 0 && p.dbeta)
                p.dbeta[i * p.HV + hv] -= e_dot * c_dot;
            for (int e = 0; e < attn_vjp_max_channels; e++) {
                const int c = lane + 32 * e;
                if (c < p.K) {
                    const float w = lacs_view_at(p.w, wi + c);
                    p.dw_part[xi + c] -= beta * (c_dot * dx[e] + e_dot * x_prev[e]);
                    dx[e] -= beta * e_dot * w;
                }
            }
        }
        const int64_t kj = (j * p.HV + hv) * p.K, vj = (j * p.HV + hv) * p.V;
        for (int e = 0; e < attn_vjp_max_channels; e++) {
            const int c = lane + 32 * e;
            if (c < p.K)
                p.dk_part[kj + c] += dx[e];
            if (c < p.V && p.dv)
                p.dv[vj + c] = dv[e];
        }
        if (lane == 0)
            p.col_sum[(int64_t)hv * p.tokens + j] = column;
        __syncwarp(); /* every lane has read da before lane 0 writes the next column's */
    }
}

/* ---- the host side ---- */

static float *attn_vjp_output(const lacs_cuda_call *c, const char *name)
{
    lacs_cuda_tensor *t = lacs_cuda_output(c, name);
    return t ? (float *)t->device : nullptr;
}

/* One pass's kernels: the rows (statistics and dx), then the columns (dk, du, the column sums). */
static int attn_vjp_pass(const char *op, const attn_vjp_params &p)
{
    const dim3 grid((unsigned)((p.tokens + ATTN_VJP_WARPS - 1) / ATTN_VJP_WARPS), (unsigned)p.HV);
    const size_t shared = ATTN_VJP_WARPS * 64 * sizeof(float);
    cudaError_t e;
    if ((e = lacs_launch(attn_vjp_rows_kernel, grid, dim3(ATTN_VJP_THREADS), shared, p)) != cudaSuccess)
        return lacs_cuda_launch_failed(op, "attn_vjp_rows_kernel", e);
    if ((e = lacs_launch(attn_vjp_columns_kernel, grid, dim3(ATTN_VJP_THREADS), shared, p)) != cudaSuccess)
        return lacs_cuda_launch_failed(op, "attn_vjp_columns_kernel", e);
    return LACS_OK;
}

/* DeltaFormer (H11): U by the first stage; the second stage O = A U back by a pass with values U (dq, dk and
 * du); the first stage's adjoint (dv, dbeta and B's cotangent); B back to its scores by a strictly causal pass
 * with query vectors x (k, or q in fla's form), whose du (the first stage's own, already taken) is not read. */
static int deltaformer_vjp(const char *op, attn_vjp_params p, int64_t n_seqs, bool x_is_q)
{
    const dim3 grid((unsigned)n_seqs, (unsigned)p.HV), threads(ATTN_VJP_THREADS);
    const size_t shared = (ATTN_VJP_THREADS + 1) * sizeof(float);
    const lacs_view q = p.x, first_stage_x = x_is_q ? p.x : p.k;
    float *discard = p.du;
    cudaError_t e;
    p.x = first_stage_x;
    if ((e = lacs_launch(deltaformer_vjp_values_kernel, grid, threads, shared, p)) != cudaSuccess)
        return lacs_cuda_launch_failed(op, "deltaformer_vjp_values_kernel", e);
    p.x = q; /* the second stage: o_i = sum_{j <= i} A_ij u_j, A's rows from q */
    p.u = lacs_view{p.values, 0};
    p.du = p.du_total;
    int rc = attn_vjp_pass(op, p);
    if (rc != LACS_OK)
        return rc;
    p.x = first_stage_x;
    if ((e = lacs_launch(deltaformer_vjp_first_stage_kernel, grid, threads, shared, p)) != cudaSuccess)
        return lacs_cuda_launch_failed(op, "deltaformer_vjp_first_stage_kernel", e);
    /* B's rows back to their scores: keys j < i, cotangent -beta_i du_i; x_i's gradient into dq or dk */
    p.strict = 1;
    p.dy = lacs_view{p.dy_first, 0};
    p.du = discard;
    if (!x_is_q)
        p.dx_part = p.dk_part;
    return attn_vjp_pass(op, p);
}

/* PaTH: the rows' statistics, then the columns' adjoint. */
static int path_vjp(const char *op, const attn_vjp_params &p, int64_t n_seqs)
{
    cudaError_t e;
    const dim3 rows((unsigned)((p.tokens + ATTN_VJP_WARPS - 1) / ATTN_VJP_WARPS), (unsigned)p.HV);
    if ((e = lacs_launch(path_vjp_rows_kernel, rows, dim3(ATTN_VJP_THREADS), 0, p)) != cudaSuccess)
        return lacs_cuda_launch_failed(op, "path_vjp_rows_kernel", e);
    if ((e = lacs_launch(path_vjp_columns_kernel, dim3((unsigned)n_seqs, (unsigned)p.HV), dim3(32), 0, p)) !=
        cudaSuccess)
        return lacs_cuda_launch_failed(op, "path_vjp_columns_kernel", e);
    return LACS_OK;
}

int lacs_cuda_attention_vjp(const lacs_cuda_call *c)
{
    const char *op = c->op;
    const bool fox = strcmp(op, "fox_vjp") == 0, deltaformer = strcmp(op, "deltaformer_vjp") == 0;
    const bool path = strcmp(op, "path_attn_vjp") == 0;
    if (!fox && !deltaformer && !path && strcmp(op, "softmax_attn_vjp") != 0)
        return lacs_cuda_unsupported(op, "not a gradient of the attention forms builtin:cuda implements");
    const lacs_cuda_tensor *q = lacs_cuda_input(c, "q"), *k = lacs_cuda_input(c, "k"), *v = lacs_cuda_input(c, "v");
    const lacs_cuda_tensor *dout = lacs_cuda_input(c, "do"), *cu = lacs_cuda_input(c, "cu_seqlens");
    const lacs_cuda_tensor *g = lacs_cuda_input(c, "g"), *g_gamma = lacs_cuda_input(c, "g_gamma");
    if (!q || !k || !v || !dout)
        return lacs_cuda_error(LACS_ERR_INPUT, op, "inputs q, k, v and do are required");
    const lacs_cuda_tensor *beta = lacs_cuda_input(c, "beta");
    if (path && (!lacs_cuda_input(c, "w") || !beta))
        return lacs_cuda_error(LACS_ERR_INPUT, op, "inputs w and beta are required");
    if (path) {
        const int rc = lacs_cuda_check_path_beta(c, beta);
        if (rc != LACS_OK)
            return rc;
    }
    attn_vjp_params p;
    memset(&p, 0, sizeof p);
    const int64_t T = q->shape[1];
    p.tokens = q->shape[0] * T;
    p.H = (int)q->shape[2];
    p.K = (int)q->shape[3];
    p.HV = (int)v->shape[2];
    p.V = (int)v->shape[3];
    p.group = p.H > 0 ? p.HV / p.H : 1;
    p.scale = (float)lacs_cuda_param(c, "scale", p.K > 0 ? 1.0 / sqrt((double)p.K) : 1.0);
    p.x = lacs_view_of(q);
    p.k = lacs_view_of(k);
    p.u = lacs_view_of(v);
    p.dy = lacs_view_of(dout);
    p.normalised = 1;
    p.gate_factor = 1.0f;
    int first_stage_x_is_q = 0;
    if (path) { /* the gate inside the scale */
        p.w = lacs_view_of(lacs_cuda_input(c, "w"));
        p.beta = lacs_view_of(beta);
        p.cu_seqlens = cu ? (const int64_t *)cu->device : nullptr;
        p.T = T;
        p.gate_factor = p.scale;
        if (g)
            p.gate = ATTN_VJP_GATE_PREFIX, p.g = lacs_view_of(g);
    }
    if (deltaformer) {
        const double form = lacs_cuda_param(c, "form", LACS_DELTAFORMER_SOFTMAX);
        if (form != LACS_DELTAFORMER_EXP && form != LACS_DELTAFORMER_SOFTMAX && form != LACS_DELTAFORMER_FLA)
            return lacs_cuda_error(LACS_ERR_PARAM, op, "unknown form %g (0 exp, 1 softmax, 2 fla)", form);
        p.normalised = form != LACS_DELTAFORMER_EXP;
        first_stage_x_is_q = form == LACS_DELTAFORMER_FLA;
        p.v = lacs_view_of(v);
        p.beta = lacs_view_of(beta);
        p.cu_seqlens = cu ? (const int64_t *)cu->device : nullptr;
        p.T = T;
    }
    if (fox && g)
        p.gate = ATTN_VJP_GATE_PREFIX, p.g = lacs_view_of(g);
    else if (fox && g_gamma)
        p.gate = ATTN_VJP_GATE_ALIBI, p.g = lacs_view_of(g_gamma);
    p.dq = attn_vjp_output(c, "dq");
    p.dk = attn_vjp_output(c, "dk");
    p.dg = attn_vjp_output(c, "dg");
    p.dg_gamma = attn_vjp_output(c, "dg_gamma");
    float *dv = attn_vjp_output(c, "dv");
    p.dbeta = attn_vjp_output(c, "dbeta");
    p.dw = attn_vjp_output(c, "dw");
    if (p.tokens == 0 || p.HV == 0)
        return LACS_OK; /* nothing to compute: every gradient is empty or zero (the outputs start zeroed) */
    if (p.K > 32 * attn_vjp_max_channels || p.V > 32 * attn_vjp_max_channels)
        return lacs_cuda_unsupported(op, "K = %d, V = %d: the gradients' kernels hold K, V <= %d (a warp's lanes "
                                         "keep %d channels each in registers)", p.K, p.V,
                                     32 * attn_vjp_max_channels, attn_vjp_max_channels);
    if ((p.tokens + ATTN_VJP_WARPS - 1) / ATTN_VJP_WARPS > 2147483647LL || p.HV > 65535)
        return lacs_cuda_unsupported(op, "%lld tokens x %d value heads: more than the grid holds",
                                     (long long)p.tokens, p.HV);

    /* each token's sequence, [start, end), on the host */
    const int64_t n_seqs = cu ? cu->shape[0] - 1 : q->shape[0];
    std::vector<int64_t> bounds((size_t)(2 * p.tokens), -1);
    for (int64_t n = 0; n < n_seqs; n++) {
        const int64_t start = cu ? ((const int64_t *)cu->host)[n] : n * T;
        const int64_t end = cu ? ((const int64_t *)cu->host)[n + 1] : start + T;
        for (int64_t t = start; t < end; t++)
            bounds[(size_t)t] = start, bounds[(size_t)(p.tokens + t)] = end;
    }

    const size_t rows = (size_t)p.HV * (size_t)p.tokens, qk = rows * (size_t)p.K;
    const bool prefix = p.gate == ATTN_VJP_GATE_PREFIX;
    /* the sequences' table; the gates; the rows' statistics; the partials; dv's place when it is not asked for
     * (DeltaFormer: the second stage's du, which nothing reads); DeltaFormer's U, du, -beta du and B's rows;
     * PaTH's chain, da and dw's partials */
    const size_t vs = rows * (size_t)p.V * 4, df = deltaformer ? vs : 0;
    const size_t bytes[19] = {2 * (size_t)p.tokens * sizeof(int64_t), prefix ? rows * 4 : 0, prefix ? rows * 8 : 0,
                              rows * 4, rows * 4, rows * 4, rows * 4, rows * 8,
                              qk * 4, qk * 4, rows * 4, dv && !deltaformer ? 0 : vs, df, df, df,
                              deltaformer ? rows * 4 : 0, path ? qk * 4 : 0, path ? rows * 4 : 0,
                              path ? qk * 4 : 0};
    void *parts[19];
    size_t total = 0;
    if (!lacs_workspace_carve(bytes, parts, 19, &total))
        return lacs_cuda_error(LACS_ERR_MEMORY, op, "out of device memory for the gradients' workspace (%zu bytes)",
                               total);
    p.seq_start = (const int64_t *)parts[0];
    p.seq_end = p.seq_start + p.tokens;
    p.gate_sum = (const float *)parts[1];
    p.first_visible = (const int64_t *)parts[2];
    p.row_max = (float *)parts[3];
    p.row_sum = (float *)parts[4];
    p.row_dp_dominant = (float *)parts[5];
    p.row_shifted = (float *)parts[6];
    p.row_dominant = (int64_t *)parts[7];
    p.dx_part = (float *)parts[8];
    p.dk_part = (float *)parts[9];
    p.col_sum = (float *)parts[10];
    p.dq_part = p.dx_part;
    p.du = dv && !deltaformer ? dv : (float *)parts[11];
    p.values = (float *)parts[12];
    p.du_total = (float *)parts[13];
    p.dy_first = (float *)parts[14];
    p.weights = (float *)parts[15];
    p.chain = (float *)parts[16];
    p.da = (float *)parts[17];
    p.dw_part = (float *)parts[18];
    if (deltaformer || path)
        p.dv = dv;
    int rc = LACS_OK;
    cudaError_t e;
    if (cudaMemcpy(parts[0], bounds.data(), bytes[0], cudaMemcpyHostToDevice) != cudaSuccess)
        rc = lacs_cuda_error(LACS_ERR_MEMORY, op, "copying the sequences' table to the device failed");
    /* the partial sums are added to */
    if (rc == LACS_OK && (cudaMemset(parts[8], 0, bytes[8]) != cudaSuccess ||
                          cudaMemset(parts[9], 0, bytes[9]) != cudaSuccess ||
                          cudaMemset(parts[10], 0, bytes[10]) != cudaSuccess ||
                          (bytes[11] && cudaMemset(parts[11], 0, bytes[11]) != cudaSuccess) ||
                          (bytes[13] && cudaMemset(parts[13], 0, bytes[13]) != cudaSuccess) ||
                          (bytes[18] && cudaMemset(parts[18], 0, bytes[18]) != cudaSuccess)))
        rc = lacs_cuda_error(LACS_ERR_MEMORY, op, "cannot clear the gradients' partial sums");
    if (rc == LACS_OK && prefix) {
        const lacs_gate_scan_args scan = {p.g, cu ? (const int64_t *)cu->device : nullptr, T, p.tokens, p.HV,
                                          (float *)parts[1], (int64_t *)parts[2]};
        if ((e = lacs_gate_scan(scan, n_seqs)) != cudaSuccess)
            rc = lacs_cuda_launch_failed(op, "lacs_gate_scan_kernel", e);
    }
    if (rc == LACS_OK && !deltaformer && !path)
        rc = attn_vjp_pass(op, p);
    if (rc == LACS_OK && path)
        rc = path_vjp(op, p, n_seqs);
    if (rc == LACS_OK && deltaformer)
        rc = deltaformer_vjp(op, p, n_seqs, first_stage_x_is_q != 0);
    if (rc == LACS_OK && (p.dg || p.dg_gamma) &&
        (e = lacs_launch(attn_vjp_gate_kernel, dim3((unsigned)((p.HV + 31) / 32)), dim3(32), 0, p)) != cudaSuccess)
        rc = lacs_cuda_launch_failed(op, "attn_vjp_gate_kernel", e);
    const int64_t key_items = p.tokens * p.H * p.K;
    if (rc == LACS_OK && key_items > 0 &&
        (e = lacs_launch(attn_vjp_key_kernel, dim3((unsigned)((key_items + 255) / 256)), dim3(256), 0, p)) !=
            cudaSuccess)
        rc = lacs_cuda_launch_failed(op, "attn_vjp_key_kernel", e);
    lacs_cuda_workspace_release(); /* waits for the kernels */
    if (rc == LACS_OK && (e = cudaGetLastError()) != cudaSuccess)
        rc = lacs_cuda_error(LACS_ERR_INPUT, op, "a gradient kernel failed: %s", cudaGetErrorString(e));
    return rc;
}

/* builtin:cuda, the gradients of the recurrent family (SPEC.md 4.19;
 * optimized/cuda/README.md section 9): linear_attn_vjp, retention_vjp,
 * simple_gla_vjp, gla_vjp (H2, H4), delta_rule_vjp (H6), gated_delta_rule_vjp
 * (H8 first form) with the scalar gate g or the per-channel gate gk (KDA),
 * comba_vjp (H8 second form) and efla_vjp (E5).
 *
 * The adjoint of the recurrence, token by token, as SPEC.md 4.19's table
 * states it. For the delta rule and GDN (its row "delta rule, GDN, KDA (H6,
 * H8)"): with h' = D_t h_{t-1} (D_t = exp(g_t) I, diag(exp(gk_t)),
 * exp(g_gamma) I, or I), p = h'^T k_t, e = v_t - p, u = b_t e,
 * h_t = h' + k_t u^T, o_t = scale h_t^T q_t, and dh the cotangent of h_t
 * (dht to start with):
 *
 *   dq_t = scale h_t do_t              dh += scale q_t do_t^T       (the readout)
 *   du   = dh^T k_t                    dv_t = b_t du,  dp = -b_t du
 *   db_t = du . e                      (the write du . v_t and the erase -du . p)
 *   dk_t = dh u + h' dp                dh' = dh + k_t dp^T
 *   dlog_t[c] = sum_j dh'[c][j] h'[c][j]  (dgk_t = dlog_t, dg_t = sum_c dlog_t[c],
 *                                          dg_gamma = sum_t dg_t)
 *   dh  <- D_t dh'
 *
 * and at the end dh0 = dh. b_t = beta_t, dbeta_t = db_t; EFLA's
 * b_t = c(beta_t, n), n = |k_t|^2 (E5), gives dbeta_t = db_t dc/dbeta and
 * dk_t += 2 k_t db_t dc/dn. The linear family has no correction: u = v_t,
 * dp = 0, dv_t = du. Comba corrects the state before the decay
 * (p = h_{t-1}^T k_t, h_t = gamma_t h_{t-1} + k_t u^T): dk_t = dh u +
 * h_{t-1} dp, dlog_t[c] = sum_j dh[c][j] gamma_t h_{t-1}[c][j],
 * dh <- gamma_t dh + k_t dp^T. Everything is binary32 (the state, its
 * cotangent, every sum); bf16 inputs are widened exactly (SPEC.md 11.1's bf16
 * tier with fp32 accumulation and state).
 *
 * Kernels. A block is (sequence, value head, slice of up to 32 value
 * columns); its threads are the state's rows (one per key channel c, K <= 256,
 * rounded up to whole warps), each holding its row of the slice in registers,
 * so that the sums over value columns (dq, dk, dlog) are a thread's own,
 * in column order. The sums over rows (p and du, one per column) go through
 * shared memory: each thread writes its row's terms, and after a barrier one
 * thread per column adds them in row order. Two barriers a token.
 *   1. delta_vjp_forward_kernel walks the sequence forward and stores the
 *      state each chunk of C = 64 tokens starts from (its checkpoint) in the
 *      workspace;
 *   2. delta_vjp_backward_kernel walks the chunks from the last: it
 *      recomputes the chunk's states from its checkpoint (storing the state
 *      before each token in the block's scratch in the workspace, and e in
 *      shared memory), then walks the chunk's tokens back with dh in
 *      registers. A thread reads back only the scratch it wrote. The sums
 *      over value columns are the slice's partials: dq, dk and dlog per
 *      (slice, token, value head, row), db per (slice, token, value head);
 *      dv and dh0 are the slice's own;
 *   3. delta_vjp_gate_kernel (one thread per token and value head): dbeta
 *      and dlog summed over the slices in slice order, dgk = dlog, dg its sum
 *      in row order; delta_vjp_gamma_kernel (one thread per value head) the
 *      per-head dg_gamma, in token order;
 *   4. delta_vjp_key_kernel (one thread per token, q/k head and row): dq and
 *      dk summed over the head's value heads (GVA, value head order) and the
 *      slices, in that order.
 * No atomics: the results are the same bits whatever the schedule.
 *
 * The workspace: the checkpoints, (T / C) K V floats per (sequence, head);
 * the scratch, (C + 1) K V floats per (sequence, head); the partials,
 * 3 T K + T floats per (head, slice).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

const int vjp_chunk = 64;      /* C: the tokens between two checkpoints */
const int vjp_slice = 32;      /* value columns per block */
const int vjp_max_k = 256;     /* rows (threads) per block, at most (K <= 256, as the forward kernels) */
const int vjp_red_ld = 33;     /* the row terms' leading dimension in shared memory (no bank conflicts) */

enum vjp_gate_kind { VJP_GATE_NONE = 0, VJP_GATE_CONSTANT = 1, VJP_GATE_SCALAR = 2, VJP_GATE_CHANNEL = 3 };
enum vjp_step_kind { VJP_STEP_NONE = 0, VJP_STEP_BETA = 1, VJP_STEP_EFLA = 2 };

/* Token t (flattened over B x T, or the packed row with cu_seqlens) of q/k
 * head h: ((t H + h) K + c); of value head hv: ((t HV + hv) V + j); beta, g:
 * t HV + hv; gk: (t HV + hv) K + c; g_gamma: hv; the state of sequence s:
 * ((s HV + hv) K + c) V + j. */
struct delta_vjp_params {
    lacs_view q, k, v, beta, gate, h0, dout, dht; /* gate: g, gk or g_gamma */
    int gate_kind, step, comba;
    const int64_t *cu_seqlens;      /* device; NULL: sequence s is tokens s T .. s T + T - 1 */
    const int64_t *seq_first_chunk; /* device [n_seqs + 1]: the first checkpoint of each sequence */
    int64_t T, n_tokens;            /* n_tokens: B T */
    int H, HV, K, V, n_slices;
    float scale;
    float *checkpoints;             /* [chunk][HV][n_slices 32][K]: column-major rows, read by row threads */
    float *scratch;                 /* [seq HV n_slices][C + 1][32][K] */
    float *dq_part, *dk_part, *dlog_part; /* [n_slices][n_tokens][HV][K] */
    float *dbeta_part;                    /* [n_slices][n_tokens][HV] */
    float *dq, *dk, *dv, *dbeta, *dg, *dgk, *dg_gamma, *dh0; /* the outputs; NULL: not asked for */
};

__device__ __forceinline__ void vjp_sequence(const delta_vjp_params &p, int64_t seq, int64_t *start, int64_t *length)
{
    if (p.cu_seqlens) {
        *start = p.cu_seqlens[seq];
        *length = p.cu_seqlens[seq + 1] - *start;
    } else {
        *start = seq * p.T;
        *length = p.T;
    }
}

/* exp of token t's log decay for row c of value head hv (1 without a gate). */
__device__ __forceinline__ float vjp_decay(const delta_vjp_params &p, int64_t t, int hv, int c)
{
    switch (p.gate_kind) {
    case VJP_GATE_CONSTANT:
        return expf(lacs_view_at(p.gate, hv));
    case VJP_GATE_SCALAR:
        return expf(lacs_view_at(p.gate, t * p.HV + hv));
    case VJP_GATE_CHANNEL:
        return expf(lacs_view_at(p.gate, (t * p.HV + hv) * p.K + c));
    default:
        return 1.0f;
    }
}

/* The step size b_t: beta_t, EFLA's c = -expm1(-beta n) / n with n = |k_t|^2
 * summed in row order (beta at n = 0; recurrent.cu's step_from), or 1 for the
 * linear family (u = v). With derivatives, EFLA's dc/dbeta = exp(-x) and
 * dc/dn = beta^2 phi'(x), x = beta n, phi(x) = -expm1(-x) / x, in double as
 * the reference's lacs_ref_efla_coefficient_derivatives (phi' by its series
 * below |x| = 1/2, where (e^-x - phi) / x cancels); 1 and 0 otherwise. */
struct vjp_step {
    float b, db_dbeta, db_dn;
};

__device__ __forceinline__ vjp_step vjp_step_of(const delta_vjp_params &p, int64_t t, int hv, int h, bool derivatives)
{
    vjp_step st = {1.0f, 1.0f, 0.0f};
    if (p.step == VJP_STEP_NONE)
        return st;
    const float beta = lacs_view_at(p.beta, t * p.HV + hv);
    st.b = beta;
    if (p.step == VJP_STEP_BETA)
        return st;
    float n = 0.0f;
    for (int r = 0; r < p.K; r++) {
        const float kr = lacs_view_at(p.k, (t * p.H + h) * p.K + r);
        n += kr * kr;
    }
    st.b = n == 0.0f ? beta : -expm1f(-beta * n) / n;
    if (derivatives) {
        const double x = (double)beta * (double)n;
        double phi_derivative;
        if (fabs(x) < 0.5) { /* sum_{m>=1} m (-1)^m x^(m-1) / (m+1)!, 30 terms by Horner's rule */
            double coef[31], factorial = 1.0;
            for (int m = 1; m <= 30; m++) {
                factorial *= m + 1;
                coef[m] = (m % 2 ? -m : m) / factorial;
            }
            phi_derivative = coef[30];
            for (int m = 29; m >= 1; m--)
                phi_derivative = phi_derivative * x + coef[m];
        } else {
            phi_derivative = (exp(-x) + expm1(-x) / x) / x;
        }
        st.db_dbeta = (float)exp(-x);
        st.db_dn = (float)((double)beta * (double)beta * phi_derivative);
    }
    return st;
}

/* The shared memory of both walking kernels: the rows' terms [threads x 33],
 * u and du [32 each], e of the chunk's tokens [C x 32]. */
struct vjp_shared {
    float *terms, *u, *du, *e;
};

static size_t vjp_shared_bytes(int threads)
{
    return (size_t)(threads * vjp_red_ld + 2 * vjp_slice + vjp_chunk * vjp_slice) * sizeof(float);
}

__device__ __forceinline__ vjp_shared vjp_shared_carve(void)
{
    float *base = (float *)lacs_shared_memory();
    vjp_shared s;
    s.terms = base;
    s.u = base + blockDim.x * vjp_red_ld;
    s.du = s.u + vjp_slice;
    s.e = s.du + vjp_slice;
    return s;
}

/* One token forward for row c of the slice (columns j0 .. j0 + nb - 1), as the
 * reference orders it: decay, p = h'^T k summed over the rows, e = v - p,
 * u = b e, h += k u^T (Comba: p from the state before the decay, then
 * h = gamma h + k u^T; the linear family: e = u = v). e goes to e_row (NULL:
 * not kept). Every thread calls it; two barriers. */
__device__ __forceinline__ void vjp_forward_token(const delta_vjp_params &p, const vjp_shared &s, int64_t t, int hv,
                                                  int h, int c, int j0, int nb, float *state, float *e_row)
{
    const bool row = c < p.K;
    const float kc = row ? lacs_view_at(p.k, (t * p.H + h) * p.K + c) : 0.0f;
    const float decay = row ? vjp_decay(p, t, hv, c) : 1.0f;
    if (row)
        LACS_UNROLL
        for (int j = 0; j < vjp_slice; j++) if (j < nb) {
            if (!p.comba)
                state[j] *= decay;
            s.terms[c * vjp_red_ld + j] = state[j] * kc;
        }
    __syncthreads();
    if ((int)threadIdx.x < nb) {
        const int j = (int)threadIdx.x;
        float pj = 0.0f;
        for (int r = 0; r < p.K && p.step != VJP_STEP_NONE; r++)
            pj += s.terms[r * vjp_red_ld + j];
        const float e = lacs_view_at(p.v, (t * p.HV + hv) * p.V + j0 + j) - pj;
        if (e_row)
            e_row[j] = e;
        s.u[j] = vjp_step_of(p, t, hv, h, false).b * e;
    }
    __syncthreads();
    if (row)
        LACS_UNROLL
        for (int j = 0; j < vjp_slice; j++) if (j < nb)
            state[j] = p.comba ? decay * state[j] + kc * s.u[j] : state[j] + kc * s.u[j];
}

/* The state a thread starts from: h0's row c of the slice, or zero. */
__device__ __forceinline__ void vjp_load_state(lacs_view from, int64_t seq, int hv, int c, int j0, int nb,
                                               const delta_vjp_params &p, float *state)
{
    LACS_UNROLL
    for (int j = 0; j < vjp_slice; j++)
        state[j] = from.data && c < p.K && j < nb
                       ? lacs_view_at(from, ((seq * p.HV + hv) * p.K + c) * (int64_t)p.V + j0 + j)
                       : 0.0f;
}

/* 1. The forward walk: the checkpoint of every chunk. */
__global__ void __launch_bounds__(vjp_max_k) delta_vjp_forward_kernel(delta_vjp_params p)
{
    const vjp_shared s = vjp_shared_carve();
    const int64_t seq = blockIdx.x / p.HV;
    const int hv = (int)(blockIdx.x % p.HV), h = hv / (p.HV / p.H), slice = (int)blockIdx.y;
    const int j0 = slice * vjp_slice, nb = p.V - j0 < vjp_slice ? p.V - j0 : vjp_slice;
    const int c = (int)threadIdx.x;
    int64_t start, length;
    vjp_sequence(p, seq, &start, &length);
    const int64_t first = p.seq_first_chunk[seq], stride = (int64_t)p.n_slices * vjp_slice * p.K;
    float state[vjp_slice];
    vjp_load_state(p.h0, seq, hv, c, j0, nb, p, state);
    for (int64_t i = 0; i < length; i++) {
        if (i % vjp_chunk == 0 && c < p.K) {
            float *checkpoint = p.checkpoints + ((first + i / vjp_chunk) * p.HV + hv) * stride + (int64_t)j0 * p.K;
            LACS_UNROLL
            for (int j = 0; j < vjp_slice; j++) if (j < nb)
                checkpoint[j * p.K + c] = state[j];
        }
        vjp_forward_token(p, s, start + i, hv, h, c, j0, nb, state, nullptr);
    }
}

/* 2. The backward walk, chunk by chunk from the last. */
__global__ void __launch_bounds__(vjp_max_k) delta_vjp_backward_kernel(delta_vjp_params p)
{
    const vjp_shared s = vjp_shared_carve();
    const int64_t seq = blockIdx.x / p.HV;
    const int hv = (int)(blockIdx.x % p.HV), h = hv / (p.HV / p.H), slice = (int)blockIdx.y;
    const int j0 = slice * vjp_slice, nb = p.V - j0 < vjp_slice ? p.V - j0 : vjp_slice;
    const int c = (int)threadIdx.x;
    const bool row = c < p.K;
    int64_t start, length;
    vjp_sequence(p, seq, &start, &length);
    const int64_t first = p.seq_first_chunk[seq], stride = (int64_t)p.n_slices * vjp_slice * p.K;
    float *scratch = p.scratch + ((seq * p.HV + hv) * p.n_slices + slice) * (int64_t)(vjp_chunk + 1) * vjp_slice * p.K;
    float dh[vjp_slice], state[vjp_slice];
    vjp_load_state(p.dht, seq, hv, c, j0, nb, p, dh);
    for (int64_t chunk = (length + vjp_chunk - 1) / vjp_chunk - 1; chunk >= 0; chunk--) {
        const int64_t t0 = start + chunk * vjp_chunk;
        const int n = (int)(length - chunk * vjp_chunk < vjp_chunk ? length - chunk * vjp_chunk : vjp_chunk);
        /* the chunk's states again, from its checkpoint: the state before token i in scratch [i] */
        const float *checkpoint = p.checkpoints + ((first + chunk) * p.HV + hv) * stride + (int64_t)j0 * p.K;
        LACS_UNROLL
        for (int j = 0; j < vjp_slice; j++)
            state[j] = row && j < nb ? checkpoint[j * p.K + c] : 0.0f;
        for (int i = 0; i <= n; i++) {
            if (row)
                LACS_UNROLL
                for (int j = 0; j < vjp_slice; j++) if (j < nb)
                    scratch[((int64_t)i * vjp_slice + j) * p.K + c] = state[j];
            if (i < n)
                vjp_forward_token(p, s, t0 + i, hv, h, c, j0, nb, state, s.e + i * vjp_slice);
        }
        /* then back, token by token (SPEC.md 4.19's adjoint) */
        for (int i = n - 1; i >= 0; i--) {
            const int64_t t = t0 + i, qk = (t * p.H + h) * p.K + c, vt = (t * p.HV + hv) * p.V + j0;
            const float *after = scratch + (int64_t)(i + 1) * vjp_slice * p.K, *before = after - vjp_slice * p.K;
            const float qc = row ? lacs_view_at(p.q, qk) : 0.0f, kc = row ? lacs_view_at(p.k, qk) : 0.0f;
            float dq = 0.0f;
            if (row)
                LACS_UNROLL
                for (int j = 0; j < vjp_slice; j++) if (j < nb) { /* the readout: dq = scale h_t do, dh += scale q do^T */
                    const float d = lacs_view_at(p.dout, vt + j);
                    dq += after[j * p.K + c] * d;
                    dh[j] += p.scale * qc * d;
                    s.terms[c * vjp_red_ld + j] = dh[j] * kc;
                }
            __syncthreads();
            if ((int)threadIdx.x < nb) { /* du = dh^T k, summed over the rows in order */
                const int j = (int)threadIdx.x;
                float du = 0.0f;
                for (int r = 0; r < p.K; r++)
                    du += s.terms[r * vjp_red_ld + j];
                s.du[j] = du;
            }
            __syncthreads();
            const vjp_step st = vjp_step_of(p, t, hv, h, p.step == VJP_STEP_EFLA);
            const bool corrects = p.step != VJP_STEP_NONE;
            /* db = du . e over the slice's columns (the write and the erase): thread 0's partial of dbeta,
             * and, for EFLA, every row's (the same sum in the same order) for dk's term through n = |k|^2 */
            float db = 0.0f;
            if (corrects && (threadIdx.x == 0 || (row && p.step == VJP_STEP_EFLA)))
                for (int j = 0; j < nb; j++) {
                    const float e = LACS_MUTANT(LACS_MUTANT_VJP_NO_ERASE) ? lacs_view_at(p.v, vt + j)
                                                                          : s.e[i * vjp_slice + j];
                    db += s.du[j] * e;
                }
            if (row) {
                const float decay = vjp_decay(p, t, hv, c);
                float dk = 0.0f, dlog = 0.0f;
                LACS_UNROLL
                for (int j = 0; j < vjp_slice; j++) if (j < nb) {
                    const float du = s.du[j], dp = corrects ? -st.b * du : 0.0f, u = st.b * s.e[i * vjp_slice + j];
                    if (p.comba) { /* the correction read h_{t-1}, before the decay */
                        const float previous = before[j * p.K + c];
                        dk += dh[j] * u + previous * dp;
                        dlog += dh[j] * (LACS_MUTANT(LACS_MUTANT_VJP_DG_OF_FACTOR) ? previous : decay * previous);
                        dh[j] = decay * dh[j] + kc * dp;
                    } else {
                        const float decayed = before[j * p.K + c] * decay; /* h', as the forward computed it */
                        dk += dh[j] * u + decayed * dp;
                        const float dh_decayed = dh[j] + kc * dp;
                        dlog += dh_decayed * (LACS_MUTANT(LACS_MUTANT_VJP_DG_OF_FACTOR) ? before[j * p.K + c] : decayed);
                        dh[j] = decay * dh_decayed;
                    }
                }
                if (p.step == VJP_STEP_EFLA)
                    dk += 2.0f * kc * (db * st.db_dn);
                const int64_t part = ((int64_t)slice * p.n_tokens + t) * p.HV + hv;
                p.dq_part[part * p.K + c] = p.scale * dq;
                p.dk_part[part * p.K + c] = dk;
                p.dlog_part[part * p.K + c] = dlog;
            }
            if (threadIdx.x == 0)
                p.dbeta_part[((int64_t)slice * p.n_tokens + t) * p.HV + hv] = db * st.db_dbeta;
            if ((int)threadIdx.x < nb && p.dv)
                p.dv[vt + threadIdx.x] = st.b * s.du[threadIdx.x];
        }
    }
    if (p.dh0 && row)
        LACS_UNROLL
        for (int j = 0; j < vjp_slice; j++) if (j < nb)
            p.dh0[((seq * p.HV + hv) * p.K + c) * (int64_t)p.V + j0 + j] = dh[j];
}

/* 3. Per (token, value head): dbeta and the gate's gradient, summed over the slices. */
__global__ void __launch_bounds__(256) delta_vjp_gate_kernel(delta_vjp_params p)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n_tokens * p.HV)
        return;
    float dbeta = 0.0f;
    for (int slice = 0; slice < p.n_slices; slice++)
        dbeta += p.dbeta_part[(int64_t)slice * p.n_tokens * p.HV + i];
    if (p.dbeta)
        p.dbeta[i] = dbeta;
    float dg = 0.0f;
    for (int c = 0; c < p.K && (p.dg || p.dgk); c++) {
        float dlog = 0.0f;
        for (int slice = 0; slice < p.n_slices; slice++)
            dlog += p.dlog_part[((int64_t)slice * p.n_tokens * p.HV + i) * p.K + c];
        if (p.dgk)
            p.dgk[i * p.K + c] = dlog;
        dg += dlog;
    }
    if (p.dg)
        p.dg[i] = dg;
}

/* 3'. Per value head: dg_gamma, the sum of dg_t over every token of the head, in token order. */
__global__ void __launch_bounds__(256) delta_vjp_gamma_kernel(delta_vjp_params p)
{
    const int hv = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (hv >= p.HV)
        return;
    float total = 0.0f;
    for (int64_t t = 0; t < p.n_tokens; t++) {
        float dg = 0.0f;
        for (int c = 0; c < p.K; c++) {
            float dlog = 0.0f;
            for (int slice = 0; slice < p.n_slices; slice++)
                dlog += p.dlog_part[(((int64_t)slice * p.n_tokens + t) * p.HV + hv) * p.K + c];
            dg += dlog;
        }
        total += dg;
    }
    p.dg_gamma[hv] = total;
}

/* 4. Per (token, q/k head, row): dq and dk, summed over the value heads that read the head, then the slices. */
__global__ void __launch_bounds__(256) delta_vjp_key_kernel(delta_vjp_params p)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n_tokens * p.H * p.K)
        return;
    const int c = (int)(i % p.K), h = (int)(i / p.K % p.H), group = p.HV / p.H;
    const int64_t t = i / p.K / p.H;
    float dq = 0.0f, dk = 0.0f;
    for (int g = 0; g < group; g++)
        for (int slice = 0; slice < p.n_slices; slice++) {
            const int64_t part = (((int64_t)slice * p.n_tokens + t) * p.HV + h * group + g) * p.K + c;
            dq += p.dq_part[part];
            dk += p.dk_part[part];
        }
    if (p.dq)
        p.dq[i] = dq;
    if (p.dk)
        p.dk[i] = dk;
}

static float *vjp_output(const lacs_cuda_call *c, const char *name)
{
    lacs_cuda_tensor *t = lacs_cuda_output(c, name);
    return t ? (float *)t->device : nullptr;
}

int lacs_cuda_recurrent_vjp(const lacs_cuda_call *c)
{
    const char *op = c->op;
    delta_vjp_params p;
    memset(&p, 0, sizeof p);
    const lacs_cuda_tensor *gate = nullptr;
    if (strcmp(op, "linear_attn_vjp") == 0) {
    } else if (strcmp(op, "retention_vjp") == 0) {
        gate = lacs_cuda_input(c, "g_gamma"), p.gate_kind = VJP_GATE_CONSTANT;
    } else if (strcmp(op, "simple_gla_vjp") == 0) {
        gate = lacs_cuda_input(c, "g"), p.gate_kind = VJP_GATE_SCALAR;
    } else if (strcmp(op, "gla_vjp") == 0) {
        gate = lacs_cuda_input(c, "gk"), p.gate_kind = VJP_GATE_CHANNEL;
    } else if (strcmp(op, "delta_rule_vjp") == 0 || strcmp(op, "efla_vjp") == 0) {
        p.step = strcmp(op, "efla_vjp") == 0 ? VJP_STEP_EFLA : VJP_STEP_BETA;
    } else if (strcmp(op, "gated_delta_rule_vjp") == 0 || strcmp(op, "comba_vjp") == 0) {
        p.step = VJP_STEP_BETA;
        p.comba = strcmp(op, "comba_vjp") == 0;
        if ((gate = lacs_cuda_input(c, "gk")) != nullptr)
            p.gate_kind = VJP_GATE_CHANNEL;
        else if ((gate = lacs_cuda_input(c, "g")) != nullptr)
            p.gate_kind = VJP_GATE_SCALAR;
    } else {
        return lacs_cuda_unsupported(op, "builtin:cuda implements the gradients of the recurrent family only "
                                         "(SPEC.md 4.19)");
    }
    if (gate == nullptr)
        p.gate_kind = VJP_GATE_NONE;
    const lacs_cuda_tensor *q = lacs_cuda_input(c, "q"), *v = lacs_cuda_input(c, "v"),
                           *cu = lacs_cuda_input(c, "cu_seqlens");
    if (!q || !v || !lacs_cuda_input(c, "k") || !lacs_cuda_input(c, "do") ||
        (p.step != VJP_STEP_NONE && !lacs_cuda_input(c, "beta")))
        return lacs_cuda_error(LACS_ERR_INPUT, op, "inputs q, k, v, do (and beta for a step size) are required");
    if ((lacs_cuda_output(c, "dg") && p.gate_kind != VJP_GATE_SCALAR) ||
        (lacs_cuda_output(c, "dgk") && p.gate_kind != VJP_GATE_CHANNEL) ||
        (lacs_cuda_output(c, "dg_gamma") && p.gate_kind != VJP_GATE_CONSTANT) ||
        (lacs_cuda_output(c, "dbeta") && p.step == VJP_STEP_NONE))
        return lacs_cuda_error(LACS_ERR_INPUT, op, "a gradient is asked for whose input (%s) is not given",
                               p.step == VJP_STEP_NONE ? "beta or a gate" : "a gate");
    p.q = lacs_view_of(q);
    p.k = lacs_view_of(lacs_cuda_input(c, "k"));
    p.v = lacs_view_of(v);
    p.beta = lacs_view_of(lacs_cuda_input(c, "beta"));
    p.gate = lacs_view_of(gate);
    p.h0 = lacs_view_of(lacs_cuda_input(c, "h0"));
    p.dout = lacs_view_of(lacs_cuda_input(c, "do"));
    p.dht = lacs_view_of(lacs_cuda_input(c, "dht"));
    p.cu_seqlens = cu ? (const int64_t *)cu->device : nullptr;
    p.T = q->shape[1];
    p.n_tokens = q->shape[0] * q->shape[1];
    p.H = (int)q->shape[2];
    p.K = (int)q->shape[3];
    p.HV = (int)v->shape[2];
    p.V = (int)v->shape[3];
    p.scale = (float)lacs_cuda_param(c, "scale", 1.0 / sqrt((double)(p.K > 0 ? p.K : 1)));
    p.dq = vjp_output(c, "dq");
    p.dk = vjp_output(c, "dk");
    p.dv = vjp_output(c, "dv");
    p.dbeta = vjp_output(c, "dbeta");
    p.dg = vjp_output(c, "dg");
    p.dgk = vjp_output(c, "dgk");
    p.dg_gamma = vjp_output(c, "dg_gamma");
    p.dh0 = vjp_output(c, "dh0");
    const int64_t n_seqs = cu ? cu->shape[0] - 1 : q->shape[0];
    const int64_t *offsets = cu ? (const int64_t *)cu->host : nullptr;
    /* V = 0: no state, every gradient is zero (the outputs start zeroed); H = 0 has no value heads either */
    if (n_seqs == 0 || p.HV == 0 || p.V == 0)
        return LACS_OK;
    if (p.K > vjp_max_k)
        return lacs_cuda_unsupported(op, "K = %d: the gradients' kernels hold K <= %d (a thread per key channel, "
                                         "the rows' terms in shared memory)", p.K, vjp_max_k);
    if (n_seqs * p.HV > 2147483647LL)
        return lacs_cuda_unsupported(op, "%lld sequence heads: more than one grid dimension holds",
                                     (long long)(n_seqs * p.HV));
    p.n_slices = (p.V + vjp_slice - 1) / vjp_slice;
    const int threads = p.K > 32 ? (p.K + 31) / 32 * 32 : 32;
    const size_t shared = vjp_shared_bytes(threads);
    if (shared > (size_t)c->max_shared_bytes)
        return lacs_cuda_unsupported(op, "K = %d: the gradients' kernels need %zu bytes of shared memory; this "
                                         "device allows %d", p.K, shared, c->max_shared_bytes);

    /* The checkpoints' table: sequence s's first chunk. */
    int64_t *first = (int64_t *)malloc((size_t)(n_seqs + 1) * sizeof *first);
    if (!first)
        return lacs_cuda_error(LACS_ERR_MEMORY, op, "out of host memory for the chunk table (%lld sequences)",
                               (long long)n_seqs);
    int64_t n_chunks = 0;
    for (int64_t s = 0; s < n_seqs; s++) {
        first[s] = n_chunks;
        n_chunks += ((offsets ? offsets[s + 1] - offsets[s] : p.T) + vjp_chunk - 1) / vjp_chunk;
    }
    first[n_seqs] = n_chunks;

    const size_t K = (size_t)p.K, Vs = (size_t)p.n_slices * vjp_slice, HV = (size_t)p.HV;
    const size_t partials = (size_t)p.n_slices * (size_t)p.n_tokens * HV;
    const size_t bytes[7] = {(size_t)(n_seqs + 1) * sizeof(int64_t),
                             (size_t)n_chunks * HV * Vs * K * sizeof(float),
                             (size_t)n_seqs * HV * (size_t)p.n_slices * (vjp_chunk + 1) * vjp_slice * K * sizeof(float),
                             partials * K * sizeof(float), partials * K * sizeof(float), partials * K * sizeof(float),
                             partials * sizeof(float)};
    void *parts[7];
    size_t total = 0;
    if (!lacs_workspace_carve(bytes, parts, 7, &total)) {
        free(first);
        return lacs_cuda_error(LACS_ERR_MEMORY, op, "out of device memory for the gradients' workspace (%zu bytes: "
                                                    "%lld chunks x %d heads, K = %d, V = %d)", total,
                               (long long)n_chunks, p.HV, p.K, p.V);
    }
    p.seq_first_chunk = (const int64_t *)parts[0];
    p.checkpoints = (float *)parts[1];
    p.scratch = (float *)parts[2];
    p.dq_part = (float *)parts[3];
    p.dk_part = (float *)parts[4];
    p.dlog_part = (float *)parts[5];
    p.dbeta_part = (float *)parts[6];
    int rc = LACS_OK;
    if (cudaMemcpy(parts[0], first, bytes[0], cudaMemcpyHostToDevice) != cudaSuccess)
        rc = lacs_cuda_error(LACS_ERR_MEMORY, op, "cannot copy the chunk table to the device");
    /* tokens outside every sequence (cu_seqlens not covering the rows) have zero partials */
    if (rc == LACS_OK && partials > 0 &&
        (cudaMemset(p.dq_part, 0, bytes[3]) != cudaSuccess || cudaMemset(p.dk_part, 0, bytes[4]) != cudaSuccess ||
         cudaMemset(p.dlog_part, 0, bytes[5]) != cudaSuccess || cudaMemset(p.dbeta_part, 0, bytes[6]) != cudaSuccess))
        rc = lacs_cuda_error(LACS_ERR_MEMORY, op, "cannot clear the gradients' partial sums");
    cudaError_t e = cudaSuccess;
    const dim3 walk_grid((unsigned)(n_seqs * p.HV), (unsigned)p.n_slices);
    if (rc == LACS_OK && n_chunks > 0 &&
        (e = lacs_launch(delta_vjp_forward_kernel, walk_grid, dim3(threads), shared, p)) != cudaSuccess)
        rc = lacs_cuda_launch_failed(op, "delta_vjp_forward_kernel", e);
    if (rc == LACS_OK && (e = lacs_launch(delta_vjp_backward_kernel, walk_grid, dim3(threads), shared, p)) != cudaSuccess)
        rc = lacs_cuda_launch_failed(op, "delta_vjp_backward_kernel", e);
    const int64_t gate_items = p.n_tokens * p.HV, key_items = p.n_tokens * p.H * p.K;
    if (rc == LACS_OK && p.dg_gamma &&
        (e = lacs_launch(delta_vjp_gamma_kernel, dim3((unsigned)((p.HV + 255) / 256)), dim3(256), 0, p)) != cudaSuccess)
        rc = lacs_cuda_launch_failed(op, "delta_vjp_gamma_kernel", e);
    if (rc == LACS_OK && gate_items > 0 &&
        (e = lacs_launch(delta_vjp_gate_kernel, dim3((unsigned)((gate_items + 255) / 256)), dim3(256), 0, p)) !=
            cudaSuccess)
        rc = lacs_cuda_launch_failed(op, "delta_vjp_gate_kernel", e);
    if (rc == LACS_OK && key_items > 0 &&
        (e = lacs_launch(delta_vjp_key_kernel, dim3((unsigned)((key_items + 255) / 256)), dim3(256), 0, p)) !=
            cudaSuccess)
        rc = lacs_cuda_launch_failed(op, "delta_vjp_key_kernel", e);
    lacs_cuda_workspace_release(); /* waits for the kernels */
    if (rc == LACS_OK && cudaGetLastError() != cudaSuccess)
        rc = lacs_cuda_error(LACS_ERR_INPUT, op, "a gradient kernel failed: %s", cudaGetErrorString(cudaGetLastError()));
    free(first);
    return rc;
}

/* builtin:cpu, the recurrent family's backward kernels (README.md section 9):
 * the forward over a run of tokens and its adjoint (SPEC.md 4.19's table),
 * written once over a primitive layer (simd_avx512.h, simd_avx2.h or
 * simd_scalar.h, which the including file, recurrent_backward_<isa>.c,
 * includes first), building that instruction set's table
 * RECURRENT_BACKWARD_KERNELS (recurrent_backward.h). Vectors run along the V
 * columns of a state row, binary32 throughout; each kernel sweeps the K rows
 * once per token, fusing the two halves of consecutive tokens' work (below).
 *
 * Forward (h' = D h_{t-1}; c the step, u the write):
 *   LINEAR   h_t = h' + k v^T
 *   DELTA    e = v - h'^T k,        u = c e,  h_t = h' + k u^T     (H6, H8 first form, E5)
 *   COMBA    e = v - h_{t-1}^T k,   u = c e,  h_t = h' + k u^T     (H8 second form)
 * Adjoint (dh the cotangent of h_t):
 *   sweep 1, row by row:  dq = scale h_t do;  dh += scale q do^T;  du = dh^T k
 *   then:                 dc = du . e;  dv = c du (du for LINEAR);  dp = -c du
 *   sweep 2, row by row:  dk = dh u + hr dp   (hr the state the correction read: h', or h_{t-1} for COMBA)
 *     LINEAR, DELTA:      dh' = dh + k dp^T;  dlog = dh' . h';  dh <- D dh'
 *     COMBA:              dlog = D (dh . h_{t-1});  dh <- D dh + k dp^T
 */
#include <math.h>
#include <string.h>

#include "recurrent_backward.h"

/* The forward over n tokens (recurrent_backward.h): token i's sweep writes h_i row by row and accumulates
 * p_{i+1} = hr_i^T k_{i+1} from the row it just wrote (hr = D_{i+1} h_i, or h_i for COMBA), so that e_{i+1}
 * is ready for the next sweep; one sweep before the first token forms p_0. */
static void forward(lacs_cpu_backward_update update, int64_t K, int64_t V, float *states, int64_t stride, int64_t n,
                    const lacs_cpu_backward_token *x, float *e)
{
    if (n <= 0)
        return;
    const float *cur = states;
    if (update != BACKWARD_LINEAR) { /* p_0 = hr^T k_0, accumulated in e_0 */
        for (int64_t j = 0; j < V; j += SIMD_LANES)
            v_store_first(e + j, v_zero(), V - j);
        for (int64_t c = 0; c < K; c++) {
            const vfloat f = v_set1(x[0].decay && update == BACKWARD_DELTA ? x[0].decay[c] : 1.0f);
            const vfloat kc = v_set1(x[0].k[c]);
            for (int64_t j = 0; j < V; j += SIMD_LANES)
                v_store_first(e + j, v_fma(kc, v_mul(f, v_load_first(cur + c * V + j, V - j)), v_load_first(e + j, V - j)),
                              V - j);
        }
    }
    for (int64_t i = 0; i < n; i++) {
        const lacs_cpu_backward_token *t = &x[i], *next_token = i + 1 < n ? &x[i + 1] : NULL;
        float *next = stride > 0 ? states + (i + 1) * stride : states;
        float *ei = e + i * V, *en = next_token ? e + (i + 1) * V : NULL;
        const int correction = update != BACKWARD_LINEAR;
        if (correction) {
            for (int64_t j = 0; j < V; j += SIMD_LANES)
                v_store_first(ei + j, v_sub(v_load_first(t->v + j, V - j), v_load_first(ei + j, V - j)), V - j);
            if (en)
                for (int64_t j = 0; j < V; j += SIMD_LANES)
                    v_store_first(en + j, v_zero(), V - j);
        }
        const vfloat coef = v_set1(t->coef);
        const float *write = correction ? ei : t->v; /* u = c e, or v */
        for (int64_t c = 0; c < K; c++) {
            const vfloat f = v_set1(t->decay ? t->decay[c] : 1.0f), kc = v_set1(t->k[c]);
            const float *in = cur + c * V;
            float *out = next + c * V;
            if (correction && en) {
                const vfloat fn = v_set1(next_token->decay && update == BACKWARD_DELTA ? next_token->decay[c] : 1.0f);
                const vfloat kn = v_set1(next_token->k[c]);
                for (int64_t j = 0; j < V; j += SIMD_LANES) {
                    const vfloat u = v_mul(coef, v_load_first(write + j, V - j));
                    const vfloat h = v_fma(kc, u, v_mul(f, v_load_first(in + j, V - j)));
                    v_store_first(out + j, h, V - j);
                    v_store_first(en + j, v_fma(kn, v_mul(fn, h), v_load_first(en + j, V - j)), V - j);
                }
            } else if (correction) {
                for (int64_t j = 0; j < V; j += SIMD_LANES) {
                    const vfloat u = v_mul(coef, v_load_first(write + j, V - j));
                    v_store_first(out + j, v_fma(kc, u, v_mul(f, v_load_first(in + j, V - j))), V - j);
                }
            } else {
                for (int64_t j = 0; j < V; j += SIMD_LANES)
                    v_store_first(out + j, v_fma(kc, v_load_first(write + j, V - j), v_mul(f, v_load_first(in + j, V - j))),
                                  V - j);
            }
        }
        cur = next;
    }
}

/* The adjoint of n tokens (recurrent_backward.h): a sweep for the last token's readout (sweep 1 above), then
 * for each token i from the last, its sweep 2 fused with token i - 1's sweep 1: both read h_{i-1} (the state
 * token i's update started from is the state token i - 1 read out), and dh's row, once carried to h_{i-1},
 * takes token i - 1's readout term and adds to its du at once. */
static void backward(lacs_cpu_backward_update update, int64_t K, int64_t V, float scale, const float *states,
                     int64_t stride, int64_t n, const float *e, const lacs_cpu_backward_token *x, float *dh, float *dq,
                     float *dk, float *dv, float *dlog, float *dcoef, float *du, float *u, float *dp)
{
    if (n <= 0)
        return;
    /* the readout's adjoint of the last token: dq = scale h do, dh += scale q do^T, and du = dh^T k */
    {
        const lacs_cpu_backward_token *t = &x[n - 1];
        const float *cur = states + n * stride;
        for (int64_t j = 0; j < V; j += SIMD_LANES)
            v_store_first(du + j, v_zero(), V - j);
        for (int64_t c = 0; c < K; c++) {
            const vfloat sq = v_set1(scale * t->q[c]), kc = v_set1(t->k[c]);
            float *d = dh + c * V;
            vfloat acc = v_zero();
            for (int64_t j = 0; j < V; j += SIMD_LANES) {
                const vfloat o = v_load_first(t->dout + j, V - j);
                acc = v_fma(v_load_first(cur + c * V + j, V - j), o, acc);
                const vfloat dhv = v_fma(sq, o, v_load_first(d + j, V - j));
                v_store_first(d + j, dhv, V - j);
                v_store_first(du + j, v_fma(kc, dhv, v_load_first(du + j, V - j)), V - j);
            }
            dq[(n - 1) * K + c] = scale * v_reduce_add(acc);
        }
    }
    for (int64_t i = n - 1; i >= 0; i--) {
        const lacs_cpu_backward_token *t = &x[i], *before = i > 0 ? &x[i - 1] : NULL;
        const float *prev = states + i * stride, *ei = e + i * V;
        /* the write's adjoint: dv, dc, u (the forward's write), dp = -c du; then du is token i - 1's */
        const float *w = t->v;
        if (update == BACKWARD_LINEAR) {
            memcpy(dv + i * V, du, (size_t)V * sizeof *dv);
        } else {
            const vfloat coef = v_set1(t->coef);
            vfloat acc = v_zero();
            for (int64_t j = 0; j < V; j += SIMD_LANES) {
                const vfloat duv = v_load_first(du + j, V - j), ev = v_load_first(ei + j, V - j);
                acc = v_fma(duv, ev, acc);
                const vfloat dvv = v_mul(coef, duv);
                v_store_first(dv + i * V + j, dvv, V - j);
                v_store_first(dp + j, v_sub(v_zero(), dvv), V - j);
                v_store_first(u + j, v_mul(coef, ev), V - j);
            }
            dcoef[i] = v_reduce_add(acc);
            w = u;
        }
        for (int64_t j = 0; j < V; j += SIMD_LANES)
            v_store_first(du + j, v_zero(), V - j);
        /* one sweep: token i's dk, decay gradient and dh carried to h_{i-1}; then token i - 1's readout */
        const float sq_scale = before ? scale : 0.0f;
        const float *dout_before = before ? before->dout : NULL;
        for (int64_t c = 0; c < K; c++) {
            const float fc = t->decay ? t->decay[c] : 1.0f;
            const vfloat f = v_set1(fc), kc = v_set1(t->k[c]);
            const vfloat sq = v_set1(before ? sq_scale * before->q[c] : 0.0f), kb = v_set1(before ? before->k[c] : 0.0f);
            const float *hp = prev + c * V;
            float *d = dh + c * V;
            vfloat acc_dk = v_zero(), acc_dlog = v_zero(), acc_dq = v_zero();
            for (int64_t j = 0; j < V; j += SIMD_LANES) {
                const vfloat dhv = v_load_first(d + j, V - j), h = v_load_first(hp + j, V - j);
                acc_dk = v_fma(dhv, v_load_first(w + j, V - j), acc_dk);
                vfloat carried;
                if (update == BACKWARD_LINEAR) {
                    if (t->decay) {
                        acc_dlog = v_fma(dhv, v_mul(f, h), acc_dlog);
                        carried = v_mul(f, dhv);
                    } else
                        carried = dhv;
                } else if (update == BACKWARD_DELTA) {
                    const vfloat dpv = v_load_first(dp + j, V - j);
                    const vfloat decayed = t->decay ? v_mul(f, h) : h;
                    acc_dk = v_fma(decayed, dpv, acc_dk);
                    const vfloat dh_decayed = v_fma(kc, dpv, dhv);
                    if (t->decay) {
                        acc_dlog = v_fma(dh_decayed, decayed, acc_dlog);
                        carried = v_mul(f, dh_decayed);
                    } else
                        carried = dh_decayed;
                } else { /* COMBA */
                    const vfloat dpv = v_load_first(dp + j, V - j);
                    acc_dk = v_fma(h, dpv, acc_dk);
                    acc_dlog = v_fma(dhv, h, acc_dlog);
                    carried = v_fma(kc, dpv, t->decay ? v_mul(f, dhv) : dhv);
                }
                if (before) { /* token i - 1's readout, o = scale h_{i-1}^T q: h is h_{i-1} */
                    const vfloat o = v_load_first(dout_before + j, V - j);
                    acc_dq = v_fma(h, o, acc_dq);
                    carried = v_fma(sq, o, carried);
                    v_store_first(du + j, v_fma(kb, carried, v_load_first(du + j, V - j)), V - j);
                }
                v_store_first(d + j, carried, V - j);
            }
            dk[i * K + c] = v_reduce_add(acc_dk);
            if (t->decay)
                dlog[i * K + c] = update == BACKWARD_COMBA ? fc * v_reduce_add(acc_dlog) : v_reduce_add(acc_dlog);
            if (before)
                dq[(i - 1) * K + c] = scale * v_reduce_add(acc_dq);
        }
    }
}

/* ---- the chunked backward (README.md section 9): scalar decays or none, the products on the GEMM table ---- */

/* out [cols x rows] (ldo) = in [rows x cols] (ldi) transposed: 8 x 8 blocks by simd_transpose_8x8, the edges
 * element by element. */
static void chunk_transpose(int64_t rows, int64_t cols, const float *in, int64_t ldi, float *out, int64_t ldo)
{
    const int64_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
    for (int64_t i = 0; i < rows8; i += 8)
        for (int64_t j = 0; j < cols8; j += 8)
            simd_transpose_8x8(in + i * ldi + j, ldi, out + j * ldo + i, ldo);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = i < rows8 ? cols8 : 0; j < cols; j++)
            out[j * ldo + i] = in[i * ldi + j];
}

/* y = a x over n. */
static inline void chunk_scale(int64_t n, float a, const float *x, float *y)
{
    const vfloat av = v_set1(a);
    for (int64_t i = 0; i < n; i += SIMD_LANES)
        v_store_first(y + i, v_mul(av, v_load_first(x + i, n - i)), n - i);
}

/* sum_i a_i b_i over n: two vector accumulators, then their lanes. */
static inline float chunk_dot(int64_t n, const float *a, const float *b)
{
    vfloat s0 = v_zero(), s1 = v_zero();
    int64_t i = 0;
    for (; i + 2 * SIMD_LANES <= n; i += 2 * SIMD_LANES) {
        s0 = v_fma(v_load(a + i), v_load(b + i), s0);
        s1 = v_fma(v_load(a + i + SIMD_LANES), v_load(b + i + SIMD_LANES), s1);
    }
    for (; i < n; i += SIMD_LANES)
        s0 = v_fma(v_load_first(a + i, n - i), v_load_first(b + i, n - i), s0);
    return v_reduce_add(v_add(s0, s1));
}

/* out_i = e^{in_i} over n. */
static inline void chunk_exp(int64_t n, const float *in, float *out)
{
    for (int64_t i = 0; i < n; i += SIMD_LANES)
        v_store_first(out + i, v_exp(v_load_first(in + i, n - i)), n - i);
}

/* The row of D that E_t is (E_t = G_{e(t)}): t, or t - 1 for Comba (-1 for t = 0: no decay of this chunk). */
static inline int64_t chunk_e_index(const lacs_cpu_chunk_settings *s, int64_t t)
{
    return s->update == BACKWARD_COMBA ? t - 1 : t;
}

/* D_tj = e^{G_t - G_j} (j <= t; 0 above): the decay from token j to token t, 1 without decays. */
static void chunk_decays(const lacs_cpu_chunk_settings *s, lacs_cpu_chunk_workspace *w, int64_t n)
{
    for (int64_t t = 0; t < n; t++) {
        const vfloat gt = v_set1(w->G[t]);
        for (int64_t j = 0; j < n; j += SIMD_LANES) {
            const vfloat d = s->decays ? v_exp(v_sub(gt, v_load_first(w->G + j, n - j))) : v_set1(1.0f);
            v_store_first(w->D + t * n + j, v_zero_unless(vm_first(t + 1 - j), d), n - j);
        }
    }
}

/* The forward's pieces of the chunk from the state S (SPEC.md 4.19):
 *   [Q; K] K^T (adjoint) or K K^T;  L_tj = e^{E_t - G_j} k_t . k_j (j < t);  Tinv = (I + diag(c) L)^{-1};
 *   R = V - Kp S, Kp_t = e^{E_t} k_t;  U = Tinv diag(c) R  (V itself for the linear family). */
static void chunk_forward(const lacs_cpu_chunk_settings *s, lacs_cpu_chunk_workspace *w, int64_t n, const float *S,
                          int adjoint)
{
    const lacs_cpu_gemm *gemm = s->gemm;
    const int64_t K = s->K, V = s->V;
    const float *k = w->qk + n * K;
    float *QK = w->QKK, *KK = w->QKK + n * n;
    chunk_decays(s, w, n);
    chunk_transpose(n, K, k, K, w->kT, n);
    if (s->update == BACKWARD_LINEAR) {
        if (adjoint)
            gemm->sgemm_general(n, n, K, w->qk, K, w->kT, n, QK, n, 0.0f, LACS_GEMM_C_LOWER);
        memcpy(w->U, w->v, (size_t)(n * V) * sizeof(float));
        return;
    }
    if (adjoint) /* QK and KK in one product of 2n rows */
        gemm->sgemm_general(2 * n, n, K, w->qk, K, w->kT, n, QK, n, 0.0f, LACS_GEMM_C_LOWER);
    else
        gemm->sgemm_general(n, n, K, k, K, w->kT, n, KK, n, 0.0f, LACS_GEMM_C_LOWER);
    for (int64_t t = 0; t < n; t++) {
        const float *d = w->D + (t > 0 ? chunk_e_index(s, t) : 0) * n; /* row 0 of L is empty */
        for (int64_t j = 0; j < n; j += SIMD_LANES)
            v_store_first(w->L + t * n + j,
                          v_zero_unless(vm_first(t - j), v_mul(v_load_first(d + j, n - j), v_load_first(KK + t * n + j, n - j))),
                          n - j);
    }
    /* Tinv by forward substitution, row by row: T_t = e_t - c_t sum_{j<t} L_tj T_j (T_j is 0 past column j), each
     * vector of T_t summed in a register */
    for (int64_t t = 0; t < n; t++) {
        for (int64_t col = 0; col < n; col += SIMD_LANES) {
            vfloat acc = v_zero();
            for (int64_t j = col; j < t; j++)
                acc = v_fma(v_set1(-w->c[t] * w->L[t * n + j]), v_load_first(w->Tinv + j * n + col, n - col), acc);
            v_store_first(w->Tinv + t * n + col, acc, n - col);
        }
        w->Tinv[t * n + t] = 1.0f;
    }
    chunk_exp(n, w->E, w->ek);
    for (int64_t t = 0; t < n; t++)
        chunk_scale(K, -w->ek[t], k + t * K, w->nKp + t * K);
    memcpy(w->R, w->v, (size_t)(n * V) * sizeof(float));
    gemm->sgemm_general(n, V, K, w->nKp, K, S, V, w->R, V, 1.0f, 0);
    for (int64_t t = 0; t < n; t++)
        chunk_scale(V, w->c[t], w->R + t * V, w->cR + t * V);
    gemm->sgemm_general(n, V, n, w->Tinv, n, w->cR, V, w->U, V, 0.0f, LACS_GEMM_A_LOWER);
}

/* KnT [K x n] and (`rows`) Kn [n x K]: column and row j = e^{G_last - G_j} k_j = D_{last, j} k_j. */
static void chunk_kn(const lacs_cpu_chunk_settings *s, lacs_cpu_chunk_workspace *w, int64_t n, int rows)
{
    const int64_t K = s->K;
    const float *k = w->qk + n * K, *d = w->D + (n - 1) * n;
    for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < n; j += SIMD_LANES)
            v_store_first(w->KnT + i * n + j, v_mul(v_load_first(d + j, n - j), v_load_first(w->kT + i * n + j, n - j)),
                          n - j);
    if (rows)
        for (int64_t j = 0; j < n; j++)
            chunk_scale(K, d[j], k + j * K, w->Kn + j * K);
}

static void chunk_advance(const lacs_cpu_chunk_settings *s, lacs_cpu_chunk_workspace *w, int64_t n, float *S)
{
    chunk_forward(s, w, n, S, 0);
    chunk_kn(s, w, n, 0);
    s->gemm->sgemm_general(s->K, s->V, n, w->KnT, n, w->U, s->V, S, s->V, s->decays ? expf(w->G[n - 1]) : 1.0f, 0);
}

/* sum over the state of dS'_rc S_rc: each row's sum in vectors, the rows' in binary64. */
static double chunk_state_dot(int64_t K, int64_t V, const float *a, const float *b)
{
    double sum = 0.0;
    for (int64_t r = 0; r < K; r++)
        sum += chunk_dot(V, a + r * V, b + r * V);
    return sum;
}

/* The adjoint of the chunk (README.md section 9), from its first state S, dS = dS' the cotangent of its last
 * state on entry and of S on return. With P_tj = scale e^{G_t - G_j} q_t . k_j (j <= t):
 *   dP = do U^T,  dU = P^T do + Kn dS',  Y = Tinv^T dU,  dR = c (.) Y = dv,
 *   dc_t = Y_t . R_t - sum_{j<t} L_tj (Y U^T)_tj,
 *   dq = scale e^{G} (.) (do S^T) + (scale Gamma (.) dP) K,
 *   dk = (scale Gamma (.) dP)^T Q + (M + M^T) K - e^{E} (.) (dR S^T) + e^{G_last - G} (.) (U dS'^T),
 *        M_tj = -c_t (Y U^T)_tj e^{E_t - G_j} (j < t),
 *   dS = e^{G_last} dS' + [scale Qp; -Kp]^T [do; dR],
 * and dG_t, the gradient of G_t, whose reverse cumulative sum in the chunk is dg_t. The products whose right
 * operand is a transpose (U^T, S^T, dS'^T) take it from an explicit transpose of the smaller side (the frame's
 * packing of a transposed operand goes element by element). */
static void chunk_adjoint(const lacs_cpu_chunk_settings *s, lacs_cpu_chunk_workspace *w, int64_t n, const float *S,
                          float *dS)
{
    const lacs_cpu_gemm *gemm = s->gemm;
    const int64_t K = s->K, V = s->V;
    const int correct = s->update != BACKWARD_LINEAR;
    const int64_t stacked = correct ? 2 * n : n; /* [do; dR], or do alone */
    const float scale = s->scale;
    chunk_forward(s, w, n, S, 1);
    chunk_kn(s, w, n, 1);
    const float decay_last = s->decays ? expf(w->G[n - 1]) : 1.0f;
    const float *q = w->qk, *k = w->qk + n * K, *dO = w->dOdR, *D = w->D, *d_last = w->D + (n - 1) * n;
    float *dR = w->dOdR + n * V, *QK = w->QKK, *dG = w->dg, *column = w->column;
    chunk_exp(n, w->G, w->eq);
    for (int64_t t = 0; t < n; t++) {
        dG[t] = 0.0f;
        w->eq[t] *= scale;
    }
    chunk_transpose(n, V, w->U, V, w->UT, n);

    /* dP = do U^T; P and Pd = scale Gamma (.) dP; P's pairs' terms of dG (row sums in, column sums out) */
    gemm->sgemm_general(n, n, V, dO, V, w->UT, n, w->dP, n, 0.0f, LACS_GEMM_C_LOWER);
    for (int64_t j = 0; j < n; j++)
        column[j] = 0.0f;
    const vfloat sv = v_set1(scale);
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < n; j += SIMD_LANES) {
            const vmask lower = vm_first(t + 1 - j), strict = vm_first(t - j);
            const vfloat d = v_mul(sv, v_load_first(D + t * n + j, n - j)), dp = v_load_first(w->dP + t * n + j, n - j);
            const vfloat p = v_zero_unless(lower, v_mul(d, v_load_first(QK + t * n + j, n - j)));
            v_store_first(w->P + t * n + j, p, n - j);
            v_store_first(w->Pd + t * n + j, v_zero_unless(lower, v_mul(d, dp)), n - j);
            const vfloat pair = v_zero_unless(strict, v_mul(dp, p));
            dG[t] += v_reduce_add(pair);
            v_store_first(column + j, v_sub(v_load_first(column + j, n - j), pair), n - j);
        }
    chunk_transpose(n, n, w->P, n, w->PT, n);
    /* dU = Kn dS' + P^T do */
    gemm->sgemm_general(n, V, K, w->Kn, K, dS, V, w->dU, V, 0.0f, 0);
    gemm->sgemm_general(n, V, n, w->PT, n, dO, V, w->dU, V, 1.0f, 0);
    /* Z = (dS' U^T)^T: dk's term through Kn, and Kn's and e^{G_last} S's terms of dG */
    gemm->sgemm_general(K, n, V, dS, V, w->UT, n, w->ZT, n, 0.0f, 0);
    chunk_transpose(K, n, w->ZT, n, w->Z, K);
    dG[n - 1] += decay_last * (float)chunk_state_dot(K, V, dS, S);
    for (int64_t j = 0; j < n; j++) {
        const float pair = chunk_dot(K, w->Kn + j * K, w->Z + j * K); /* Kn_j . (U dS'^T)_j */
        column[j] -= pair;
        dG[n - 1] += pair;
        chunk_scale(K, d_last[j], w->Z + j * K, w->dk + j * K);
    }

    /* A2 = [Pd^T | M + M^T]; the correction: Y, dR = dv, dc, M with L's terms of dG */
    chunk_transpose(n, n, w->Pd, n, w->A2, 2 * n);
    for (int64_t j = 0; j < n; j++)
        memset(w->A2 + j * 2 * n + n, 0, (size_t)n * sizeof(float));
    w->dv = w->dU; /* the linear family's dv */
    if (correct) {
        chunk_transpose(n, n, w->Tinv, n, w->TinvT, n);
        gemm->sgemm_general(n, V, n, w->TinvT, n, w->dU, V, w->Y, V, 0.0f, 0);
        for (int64_t t = 0; t < n; t++)
            chunk_scale(V, w->c[t], w->Y + t * V, dR + t * V);
        w->dv = dR;
        gemm->sgemm_general(n, n, V, w->Y, V, w->UT, n, w->YU, n, 0.0f, LACS_GEMM_C_LOWER);
        float *M = w->dP, *MT = w->TinvT; /* free by now */
        for (int64_t t = 0; t < n; t++) {
            const float *d = D + (t > 0 ? chunk_e_index(s, t) : 0) * n; /* e^{E_t - G_j} */
            const vfloat neg_c = v_set1(-w->c[t]);
            vfloat dc_sum = v_zero(), row_sum = v_zero();
            for (int64_t j = 0; j < n; j += SIMD_LANES) {
                const vmask strict = vm_first(t - j);
                const vfloat yu = v_zero_unless(strict, v_load_first(w->YU + t * n + j, n - j));
                const vfloat l = v_load_first(w->L + t * n + j, n - j); /* 0 from j = t on */
                dc_sum = v_fma(l, yu, dc_sum);
                const vfloat dL = v_mul(neg_c, yu);
                v_store_first(M + t * n + j, v_mul(dL, v_load_first(d + j, n - j)), n - j);
                const vfloat pl = v_mul(dL, l);
                row_sum = v_add(row_sum, pl);
                v_store_first(column + j, v_sub(v_load_first(column + j, n - j), pl), n - j);
            }
            w->dc[t] = chunk_dot(V, w->Y + t * V, w->R + t * V) - v_reduce_add(dc_sum);
            if (t > 0) /* j < t: e(t) >= 0 */
                dG[chunk_e_index(s, t)] += v_reduce_add(row_sum);
        }
        chunk_transpose(n, n, M, n, MT, n);
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < n; j += SIMD_LANES)
                v_store_first(w->A2 + t * 2 * n + n + j,
                              v_add(v_load_first(M + t * n + j, n - j), v_load_first(MT + t * n + j, n - j)), n - j);
    }

    /* X = (S [do; dR]^T)^T: dq's and Kp's terms */
    chunk_transpose(stacked, V, w->dOdR, V, w->dOdRT, stacked);
    gemm->sgemm_general(K, stacked, V, S, V, w->dOdRT, stacked, w->XT, stacked, 0.0f, 0);
    chunk_transpose(K, stacked, w->XT, stacked, w->X, K);
    for (int64_t j = 0; j < n; j++)
        dG[j] += column[j];
    for (int64_t t = 0; t < n; t++) {
        chunk_scale(K, w->eq[t], w->X + t * K, w->dq + t * K);
        dG[t] += chunk_dot(K, q + t * K, w->dq + t * K);
        if (correct) { /* e^{E_t} dKp_t, dKp = -dR S^T, in place of X's row */
            float *dkp = w->X + (n + t) * K;
            chunk_scale(K, -w->ek[t], dkp, dkp);
            for (int64_t i = 0; i < K; i += SIMD_LANES)
                v_store_first(w->dk + t * K + i, v_add(v_load_first(w->dk + t * K + i, K - i), v_load_first(dkp + i, K - i)),
                              K - i);
            if (t > 0 || s->update != BACKWARD_COMBA)
                dG[chunk_e_index(s, t)] += chunk_dot(K, k + t * K, dkp);
        }
    }
    /* dq += Pd K; dk += [Pd^T | M + M^T] [q; k] */
    gemm->sgemm_general(n, K, n, w->Pd, n, k, K, w->dq, K, 1.0f, LACS_GEMM_A_LOWER);
    gemm->sgemm_general(n, K, 2 * n, w->A2, 2 * n, w->qk, K, w->dk, K, 1.0f, 0);

    /* dS = e^{G_last} dS' + [scale Qp; -Kp]^T [do; dR] */
    for (int64_t t = 0; t < n; t++)
        chunk_scale(K, w->eq[t], q + t * K, w->QpKp + t * K);
    chunk_transpose(n, K, w->QpKp, K, w->QpKpT, stacked);
    if (correct)
        chunk_transpose(n, K, w->nKp, K, w->QpKpT + n, stacked);
    gemm->sgemm_general(K, V, stacked, w->QpKpT, stacked, w->dOdR, V, dS, V, decay_last, 0);

    /* the gate: dg_t = sum_{s >= t} dG_s within the chunk */
    float run = 0.0f;
    for (int64_t t = n - 1; t >= 0; t--) {
        run += dG[t];
        dG[t] = run;
    }
}

const lacs_cpu_backward_kernels RECURRENT_BACKWARD_KERNELS = {
    .isa = SIMD_ISA,
    .forward = forward,
    .backward = backward,
    .chunk_advance = chunk_advance,
    .chunk_adjoint = chunk_adjoint,
};

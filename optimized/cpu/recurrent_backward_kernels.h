/* builtin:cpu, the recurrent family's backward kernels (README.md section 9):
 * a chunk's advance and its adjoint (the chunked backward, WY/UT, SPEC.md
 * 4.19), written once over a primitive layer (simd_avx512.h, simd_avx2.h or
 * simd_scalar.h, which the including file, recurrent_backward_<isa>.c,
 * includes first, with simd_math.h), building that instruction set's table
 * RECURRENT_BACKWARD_KERNELS (recurrent_backward.h). The products are the
 * set's GEMM (through the settings' table), the element-wise work runs on
 * its vectors, binary32 throughout.
 */
#include <math.h>
#include <string.h>

#include "recurrent_backward.h"
#include "recurrent_channel.h" /* channel_matrix */

/* ---- helpers ---- */

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

/* The adjoint of channel_matrix (recurrent_channel.h; no factor, scale 1) for dM = W: rows_t += sum_j W_tj e^{A_t - G_j} (.) y_j (the
 * gradient of x_t) and cols_j += sum_t W_tj e^{A_t - G_j} (.) x_t (of y_j), over the same pairs, their exps
 * those channel_matrix kept: each sum in a register, a vector of channels at a time. */
static void chunk_channel_adjoint(int64_t n, int64_t K, const float *W, const float *x, const float *y,
                                  const float *exps, int strict, float *rows, float *cols)
{
    const int64_t diagonal = strict ? 0 : 1; /* pair (t, j), j < t + diagonal, at index t (t - 1 + 2 diagonal) / 2 + j */
    for (int64_t t = 0; t < n; t++) {
        const float *e_t = exps + (t * (t - 1 + 2 * diagonal) / 2) * K;
        for (int64_t c = 0; c < K; c += SIMD_LANES) {
            vfloat acc = v_zero();
            for (int64_t j = 0; j < t + diagonal; j++)
                acc = v_fma(v_mul(v_set1(W[t * n + j]), v_load_first(e_t + j * K + c, K - c)),
                            v_load_first(y + j * K + c, K - c), acc);
            v_store_first(rows + t * K + c, v_add(v_load_first(rows + t * K + c, K - c), acc), K - c);
        }
    }
    for (int64_t j = 0; j < n; j++)
        for (int64_t c = 0; c < K; c += SIMD_LANES) {
            vfloat acc = v_zero();
            for (int64_t t = j + 1 - diagonal; t < n; t++)
                acc = v_fma(v_mul(v_set1(W[t * n + j]), v_load_first(exps + (t * (t - 1 + 2 * diagonal) / 2 + j) * K + c, K - c)),
                            v_load_first(x + t * K + c, K - c), acc);
            v_store_first(cols + j * K + c, v_add(v_load_first(cols + j * K + c, K - c), acc), K - c);
        }
}

/* x (.) y over n into out (out may be x or y). */
static inline void chunk_multiply(int64_t n, const float *x, const float *y, float *out)
{
    for (int64_t i = 0; i < n; i += SIMD_LANES)
        v_store_first(out + i, v_mul(v_load_first(x + i, n - i), v_load_first(y + i, n - i)), n - i);
}

/* acc += x over n. */
static inline void chunk_add(int64_t n, const float *x, float *acc)
{
    for (int64_t i = 0; i < n; i += SIMD_LANES)
        v_store_first(acc + i, v_add(v_load_first(acc + i, n - i), v_load_first(x + i, n - i)), n - i);
}

/* acc += sign x (.) y over n. */
static inline void chunk_add_product(int64_t n, float sign, const float *x, const float *y, float *acc)
{
    const vfloat sv = v_set1(sign);
    for (int64_t i = 0; i < n; i += SIMD_LANES)
        v_store_first(acc + i,
                      v_fma(v_mul(sv, v_load_first(x + i, n - i)), v_load_first(y + i, n - i), v_load_first(acc + i, n - i)),
                      n - i);
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
    simd_transpose(n, K, k, K, w->kT, n);
    if (s->channel)
        chunk_exp(n * K, w->E, w->eE); /* e^{E_t} per channel: Kp's factors */
    else
        chunk_decays(s, w, n);
    if (s->update == BACKWARD_LINEAR) {
        if (adjoint && !s->channel)
            gemm->sgemm_general(n, n, K, w->qk, K, w->kT, n, QK, n, 0.0f, LACS_GEMM_C_LOWER);
        memcpy(w->U, w->v, (size_t)(n * V) * sizeof(float));
        return;
    }
    if (s->channel) { /* L term by term (the adjoint's P too, in chunk_adjoint) */
        channel_matrix(n, K, k, k, w->E, w->G, NULL, 1.0f, 1, w->L, adjoint ? w->exps_L : NULL);
    } else {
        if (adjoint) /* QK and KK in one product of 2n rows */
            gemm->sgemm_general(2 * n, n, K, w->qk, K, w->kT, n, QK, n, 0.0f, LACS_GEMM_C_LOWER);
        else
            gemm->sgemm_general(n, n, K, k, K, w->kT, n, KK, n, 0.0f, LACS_GEMM_C_LOWER);
        for (int64_t t = 0; t < n; t++) {
            const float *d = w->D + (t > 0 ? chunk_e_index(s, t) : 0) * n; /* row 0 of L is empty */
            for (int64_t j = 0; j < n; j += SIMD_LANES)
                v_store_first(w->L + t * n + j,
                              v_zero_unless(vm_first(t - j),
                                            v_mul(v_load_first(d + j, n - j), v_load_first(KK + t * n + j, n - j))),
                              n - j);
        }
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
    if (s->channel)
        for (int64_t t = 0; t < n; t++) {
            chunk_multiply(K, w->eE + t * K, k + t * K, w->nKp + t * K);
            chunk_scale(K, -1.0f, w->nKp + t * K, w->nKp + t * K);
        }
    else {
        chunk_exp(n, w->E, w->ek);
        for (int64_t t = 0; t < n; t++)
            chunk_scale(K, -w->ek[t], k + t * K, w->nKp + t * K);
    }
    memcpy(w->R, w->v, (size_t)(n * V) * sizeof(float));
    gemm->sgemm_general(n, V, K, w->nKp, K, S, V, w->R, V, 1.0f, 0);
    for (int64_t t = 0; t < n; t++)
        chunk_scale(V, w->c[t], w->R + t * V, w->cR + t * V);
    gemm->sgemm_general(n, V, n, w->Tinv, n, w->cR, V, w->U, V, 0.0f, LACS_GEMM_A_LOWER);
}

/* KnT [K x n] and (`rows`) Kn [n x K]: column and row j = e^{G_last - G_j} k_j = D_{last, j} k_j; per channel
 * also eGl_j = e^{G_last - G_j} and gl = e^{G_last}. */
static void chunk_kn(const lacs_cpu_chunk_settings *s, lacs_cpu_chunk_workspace *w, int64_t n, int rows)
{
    const int64_t K = s->K;
    const float *k = w->qk + n * K, *d = w->D + (n - 1) * n, *last = w->G + (n - 1) * K;
    if (s->channel) {
        for (int64_t j = 0; j < n; j++) {
            for (int64_t c = 0; c < K; c += SIMD_LANES)
                v_store_first(w->eGl + j * K + c,
                              v_exp(v_sub(v_load_first(last + c, K - c), v_load_first(w->G + j * K + c, K - c))), K - c);
            chunk_multiply(K, w->eGl + j * K, k + j * K, w->Kn + j * K);
        }
        chunk_exp(K, last, w->gl);
        simd_transpose(n, K, w->Kn, K, w->KnT, n);
        return;
    }
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
    if (s->channel) /* S's rows decayed each by its channel's e^{G_last}, then the product adds to them */
        for (int64_t c = 0; c < s->K; c++)
            chunk_scale(s->V, w->gl[c], S + c * s->V, S + c * s->V);
    s->gemm->sgemm_general(s->K, s->V, n, w->KnT, n, w->U, s->V, S, s->V,
                           s->channel ? 1.0f : s->decays ? expf(w->G[n - 1]) : 1.0f, 0);
}

/* The correction's products in the adjoint: Y = Tinv^T dU, dR = c (.) Y (into dOdR's second half: the chunk's
 * dv) and Y U^T (its lower triangle). */
static void chunk_correction_products(const lacs_cpu_chunk_settings *s, lacs_cpu_chunk_workspace *w, int64_t n)
{
    const int64_t V = s->V;
    float *dR = w->dOdR + n * V;
    simd_transpose(n, n, w->Tinv, n, w->TinvT, n);
    s->gemm->sgemm_general(n, V, n, w->TinvT, n, w->dU, V, w->Y, V, 0.0f, 0);
    for (int64_t t = 0; t < n; t++)
        chunk_scale(V, w->c[t], w->Y + t * V, dR + t * V);
    w->dv = dR;
    s->gemm->sgemm_general(n, n, V, w->Y, V, w->UT, n, w->YU, n, 0.0f, LACS_GEMM_C_LOWER);
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
static void chunk_adjoint_channel(const lacs_cpu_chunk_settings *s, lacs_cpu_chunk_workspace *w, int64_t n,
                                  const float *S, float *dS);

static void chunk_adjoint(const lacs_cpu_chunk_settings *s, lacs_cpu_chunk_workspace *w, int64_t n, const float *S,
                          float *dS)
{
    if (s->channel) {
        chunk_adjoint_channel(s, w, n, S, dS);
        return;
    }
    const lacs_cpu_gemm *gemm = s->gemm;
    const int64_t K = s->K, V = s->V;
    const int correct = s->update != BACKWARD_LINEAR;
    const int64_t stacked = correct ? 2 * n : n; /* [do; dR], or do alone */
    const float scale = s->scale;
    chunk_forward(s, w, n, S, 1);
    chunk_kn(s, w, n, 1);
    const float decay_last = s->decays ? expf(w->G[n - 1]) : 1.0f;
    const float *q = w->qk, *k = w->qk + n * K, *dO = w->dOdR, *D = w->D, *d_last = w->D + (n - 1) * n;
    float *QK = w->QKK, *dG = w->dg, *column = w->column;
    chunk_exp(n, w->G, w->eq);
    for (int64_t t = 0; t < n; t++) {
        dG[t] = 0.0f;
        w->eq[t] *= scale;
    }
    simd_transpose(n, V, w->U, V, w->UT, n);

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
    simd_transpose(n, n, w->P, n, w->PT, n);
    /* dU = Kn dS' + P^T do */
    gemm->sgemm_general(n, V, K, w->Kn, K, dS, V, w->dU, V, 0.0f, 0);
    gemm->sgemm_general(n, V, n, w->PT, n, dO, V, w->dU, V, 1.0f, 0);
    /* Z = (dS' U^T)^T: dk's term through Kn, and Kn's and e^{G_last} S's terms of dG */
    gemm->sgemm_general(K, n, V, dS, V, w->UT, n, w->ZT, n, 0.0f, 0);
    simd_transpose(K, n, w->ZT, n, w->Z, K);
    dG[n - 1] += decay_last * (float)chunk_state_dot(K, V, dS, S);
    for (int64_t j = 0; j < n; j++) {
        const float pair = chunk_dot(K, w->Kn + j * K, w->Z + j * K); /* Kn_j . (U dS'^T)_j */
        column[j] -= pair;
        dG[n - 1] += pair;
        chunk_scale(K, d_last[j], w->Z + j * K, w->dk + j * K);
    }

    /* A2 = [Pd^T | M + M^T]; the correction: Y, dR = dv, dc, M with L's terms of dG */
    simd_transpose(n, n, w->Pd, n, w->A2, 2 * n);
    for (int64_t j = 0; j < n; j++)
        memset(w->A2 + j * 2 * n + n, 0, (size_t)n * sizeof(float));
    w->dv = w->dU; /* the linear family's dv */
    if (correct) {
        chunk_correction_products(s, w, n);
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
        simd_transpose(n, n, M, n, MT, n);
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < n; j += SIMD_LANES)
                v_store_first(w->A2 + t * 2 * n + n + j,
                              v_add(v_load_first(M + t * n + j, n - j), v_load_first(MT + t * n + j, n - j)), n - j);
    }

    /* X = (S [do; dR]^T)^T: dq's and Kp's terms */
    simd_transpose(stacked, V, w->dOdR, V, w->dOdRT, stacked);
    gemm->sgemm_general(K, stacked, V, S, V, w->dOdRT, stacked, w->XT, stacked, 0.0f, 0);
    simd_transpose(K, stacked, w->XT, stacked, w->X, K);
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
    simd_transpose(n, K, w->QpKp, K, w->QpKpT, stacked);
    if (correct)
        simd_transpose(n, K, w->nKp, K, w->QpKpT + n, stacked);
    gemm->sgemm_general(K, V, stacked, w->QpKpT, stacked, w->dOdR, V, dS, V, decay_last, 0);

    /* the gate: dg_t = sum_{s >= t} dG_s within the chunk */
    float run = 0.0f;
    for (int64_t t = n - 1; t >= 0; t--) {
        run += dG[t];
        dG[t] = run;
    }
}

/* chunk_adjoint with a decay per key channel (KDA's gk, GLA): the same products where the decays factor out of
 * them (dP = do U^T, dU, Y, Y U^T, S [do; dR]^T, dS' U^T, dS), the n x n matrices P and L and their adjoints
 * term by term (channel_matrix, chunk_channel_adjoint: an exp per term), every factor e^{...} a vector
 * along the channels, and dG [n x K], the gradient of each channel's G_t. */
static void chunk_adjoint_channel(const lacs_cpu_chunk_settings *s, lacs_cpu_chunk_workspace *w, int64_t n,
                                  const float *S, float *dS)
{
    const lacs_cpu_gemm *gemm = s->gemm;
    const int64_t K = s->K, V = s->V;
    const int correct = s->update != BACKWARD_LINEAR;
    const int64_t stacked = correct ? 2 * n : n;
    const float scale = s->scale;
    chunk_forward(s, w, n, S, 1);
    chunk_kn(s, w, n, 1);
    const float *q = w->qk, *k = w->qk + n * K, *dO = w->dOdR;
    float *dG = w->dg;
    chunk_exp(n * K, w->G, w->eGs);
    chunk_scale(n * K, scale, w->eGs, w->eGs); /* scale e^{G_t} */
    memset(dG, 0, (size_t)(n * K) * sizeof(float));
    simd_transpose(n, V, w->U, V, w->UT, n);

    /* P term by term; dP = do U^T; dU = Kn dS' + P^T do */
    channel_matrix(n, K, q, k, w->G, w->G, NULL, scale, 0, w->P, w->exps_P);
    gemm->sgemm_general(n, n, V, dO, V, w->UT, n, w->dP, n, 0.0f, LACS_GEMM_C_LOWER);
    simd_transpose(n, n, w->P, n, w->PT, n);
    gemm->sgemm_general(n, V, K, w->Kn, K, dS, V, w->dU, V, 0.0f, 0);
    gemm->sgemm_general(n, V, n, w->PT, n, dO, V, w->dU, V, 1.0f, 0);
    /* Z = (dS' U^T)^T: dk's term through Kn; Kn's and e^{G_last} S's terms of dG */
    gemm->sgemm_general(K, n, V, dS, V, w->UT, n, w->ZT, n, 0.0f, 0);
    simd_transpose(K, n, w->ZT, n, w->Z, K);
    float *dG_last = dG + (n - 1) * K;
    for (int64_t c = 0; c < K; c++)
        dG_last[c] += w->gl[c] * chunk_dot(V, dS + c * V, S + c * V);
    for (int64_t j = 0; j < n; j++) {
        chunk_multiply(K, w->eGl + j * K, w->Z + j * K, w->dk + j * K);
        chunk_add_product(K, -1.0f, k + j * K, w->dk + j * K, dG + j * K); /* Kn_j (.) dKn_j */
        chunk_add_product(K, 1.0f, k + j * K, w->dk + j * K, dG_last);
    }
    /* P's adjoint: dq_t += sum_j scale dP_tj e^{G_t - G_j} (.) k_j, dk_j += ... q_t (rows, cols) */
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < n; j++)
            w->Pd[t * n + j] = j <= t ? scale * w->dP[t * n + j] : 0.0f;
    memset(w->rows, 0, (size_t)(n * K) * sizeof(float));
    memset(w->cols, 0, (size_t)(n * K) * sizeof(float));
    chunk_channel_adjoint(n, K, w->Pd, q, k, w->exps_P, 0, w->rows, w->cols);
    memcpy(w->dq, w->rows, (size_t)(n * K) * sizeof(float));
    for (int64_t t = 0; t < n; t++) {
        chunk_add_product(K, 1.0f, q + t * K, w->rows + t * K, dG + t * K);
        chunk_add_product(K, -1.0f, k + t * K, w->cols + t * K, dG + t * K);
        chunk_add(K, w->cols + t * K, w->dk + t * K);
    }

    /* the correction: Y, dR = dv, dc; L's adjoint term by term */
    w->dv = w->dU;
    if (correct) {
        chunk_correction_products(s, w, n);
        float *dL = w->Pd; /* free by now */
        for (int64_t t = 0; t < n; t++) {
            float dc = chunk_dot(V, w->Y + t * V, w->R + t * V);
            for (int64_t j = 0; j < n; j++) {
                const float yu = j < t ? w->YU[t * n + j] : 0.0f;
                dc -= w->L[t * n + j] * yu;
                dL[t * n + j] = -w->c[t] * yu;
            }
            w->dc[t] = dc;
        }
        memset(w->rows, 0, (size_t)(n * K) * sizeof(float));
        memset(w->cols, 0, (size_t)(n * K) * sizeof(float));
        chunk_channel_adjoint(n, K, dL, k, k, w->exps_L, 1, w->rows, w->cols);
        for (int64_t t = 0; t < n; t++) {
            chunk_add(K, w->rows + t * K, w->dk + t * K);
            chunk_add(K, w->cols + t * K, w->dk + t * K);
            if (t > 0) /* j < t: e(t) >= 0 */
                chunk_add_product(K, 1.0f, k + t * K, w->rows + t * K, dG + chunk_e_index(s, t) * K);
            chunk_add_product(K, -1.0f, k + t * K, w->cols + t * K, dG + t * K);
        }
    }

    /* X = (S [do; dR]^T)^T: dq's and Kp's terms */
    simd_transpose(stacked, V, w->dOdR, V, w->dOdRT, stacked);
    gemm->sgemm_general(K, stacked, V, S, V, w->dOdRT, stacked, w->XT, stacked, 0.0f, 0);
    simd_transpose(K, stacked, w->XT, stacked, w->X, K);
    for (int64_t t = 0; t < n; t++) {
        float *x = w->X + t * K;
        chunk_multiply(K, w->eGs + t * K, x, x); /* scale e^{G_t} (.) (do S^T)_t: dq's term */
        chunk_add(K, x, w->dq + t * K);
        chunk_add_product(K, 1.0f, q + t * K, x, dG + t * K);
        if (correct) {
            float *dkp = w->X + (n + t) * K; /* e^{E_t} (.) dKp_t, dKp = -dR S^T */
            chunk_multiply(K, w->eE + t * K, dkp, dkp);
            chunk_scale(K, -1.0f, dkp, dkp);
            chunk_add(K, dkp, w->dk + t * K);
            if (t > 0 || s->update != BACKWARD_COMBA) /* Comba's E_0 = 0: no decay of this chunk */
                chunk_add_product(K, 1.0f, k + t * K, dkp, dG + chunk_e_index(s, t) * K);
        }
    }

    /* dS = e^{G_last} (.) dS' (row by row) + [scale Qp; -Kp]^T [do; dR] */
    for (int64_t t = 0; t < n; t++)
        chunk_multiply(K, w->eGs + t * K, q + t * K, w->QpKp + t * K);
    simd_transpose(n, K, w->QpKp, K, w->QpKpT, stacked);
    if (correct)
        simd_transpose(n, K, w->nKp, K, w->QpKpT + n, stacked);
    for (int64_t c = 0; c < K; c++)
        chunk_scale(V, w->gl[c], dS + c * V, dS + c * V);
    gemm->sgemm_general(K, V, stacked, w->QpKpT, stacked, w->dOdR, V, dS, V, 1.0f, 0);

    /* the gate: dg_t = sum_{s >= t} dG_s within the chunk, channel by channel */
    for (int64_t t = n - 2; t >= 0; t--)
        for (int64_t c = 0; c < K; c += SIMD_LANES)
            v_store_first(dG + t * K + c, v_add(v_load_first(dG + t * K + c, K - c), v_load_first(dG + (t + 1) * K + c, K - c)),
                          K - c);
}

const lacs_cpu_backward_kernels RECURRENT_BACKWARD_KERNELS = {
    .isa = SIMD_ISA,
    .chunk_advance = chunk_advance,
    .chunk_adjoint = chunk_adjoint,
};

/* Small dense linear algebra for the reference's secondary forms and checks.
 * Plain loops, row-major, written for clarity; sizes are a few hundred at most. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* C [n][p] = A [n][m] B [m][p]; C must not alias A or B. Each C_ij is
 * 0 + A_i0 B_0j + A_i1 B_1j + ..., summed in that order; the loops run over
 * l before j so that B is read by rows (the same sums, much faster at T = 1024). */
void lacs_internal_matmul(int64_t n, int64_t m, int64_t p, const real *A, const real *B, real *C)
{
    for (int64_t i = 0; i < n; i++) {
        real *row = C + i * p;
        for (int64_t j = 0; j < p; j++)
            row[j] = 0;
        for (int64_t l = 0; l < m; l++)
            for (int64_t j = 0; j < p; j++)
                row[j] += A[i * m + l] * B[l * p + j];
    }
}

/* (I + L) X = R with L strictly lower: row i of X is R_i - sum_{j<i} L_ij X_j,
 * the rows above being final already. This is H7's u_t recurrence. X may be
 * R (in place). Each element subtracts its terms in the order j = 0, 1, ...;
 * the loops run over j before c so that X is read by rows. */
void lacs_internal_unit_lower_solve(int64_t n, int64_t m, const real *L, const real *R, real *X)
{
    for (int64_t i = 0; i < n; i++) {
        real *row = X + i * m;
        for (int64_t c = 0; c < m; c++)
            row[c] = R[i * m + c];
        for (int64_t j = 0; j < i; j++)
            for (int64_t c = 0; c < m; c++)
                row[c] -= L[i * n + j] * X[j * m + c];
    }
}

real lacs_internal_dot(int64_t n, const real *a, const real *b)
{
    real sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

/* exp(x) overflows double for x > 709, so each row subtracts its maximum
 * first: the ratios are unchanged and every exponent is <= 0. */
void lacs_internal_causal_softmax(int64_t T, int strict, real *L)
{
    for (int64_t i = 0; i < T; i++) {
        real *row = L + i * T;
        const int64_t last = strict ? i - 1 : i; /* admissible j: 0..last */
        real m = -INFINITY, denom = 0;
        for (int64_t j = 0; j <= last; j++)
            m = fmax(m, row[j]);
        for (int64_t j = 0; j <= last; j++)
            denom += (row[j] = exp(row[j] - m));
        for (int64_t j = 0; j < T; j++)
            row[j] = j <= last ? row[j] / denom : 0;
    }
}

int64_t lacs_internal_cholesky_solve(int64_t n, const real *A, const real *b, real *L, real *x)
{
    real largest = 0;
    for (int64_t i = 0; i < n; i++)
        largest = fmax(largest, fabs(A[i * n + i]));
    /* A = L L^T, column by column; a pivot at or below n eps max|A_ii| means A
     * is singular or indefinite to working precision. */
    for (int64_t j = 0; j < n; j++) {
        real pivot = A[j * n + j];
        for (int64_t p = 0; p < j; p++)
            pivot -= L[j * n + p] * L[j * n + p];
        if (!(pivot > n * REAL_EPSILON * largest))
            return j;
        L[j * n + j] = sqrt(pivot);
        for (int64_t i = j + 1; i < n; i++) {
            real sum = A[i * n + j];
            for (int64_t p = 0; p < j; p++)
                sum -= L[i * n + p] * L[j * n + p];
            L[i * n + j] = sum / L[j * n + j];
        }
    }
    for (int64_t i = 0; i < n; i++) { /* L y = b */
        real sum = b[i];
        for (int64_t p = 0; p < i; p++)
            sum -= L[i * n + p] * x[p];
        x[i] = sum / L[i * n + i];
    }
    for (int64_t i = n - 1; i >= 0; i--) { /* L^T x = y */
        real sum = x[i];
        for (int64_t p = i + 1; p < n; p++)
            sum -= L[p * n + i] * x[p];
        x[i] = sum / L[i * n + i];
    }
    return -1;
}

/* o = scale h^T x: each o_c is scale * (0 + h_0c x_0 + h_1c x_1 + ...), summed
 * in that order; four columns at a time, so that h is read along its rows
 * (the same sums, in registers). o must not alias h or x. */
void lacs_internal_state_readout(int64_t K, int64_t V, const real *h, const real *x, real scale, real *o)
{
    int64_t c = 0;
    for (; c + 4 <= V; c += 4) {
        real s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int64_t i = 0; i < K; i++) {
            const real *row = h + i * V + c;
            s0 += row[0] * x[i];
            s1 += row[1] * x[i];
            s2 += row[2] * x[i];
            s3 += row[3] * x[i];
        }
        o[c] = scale * s0;
        o[c + 1] = scale * s1;
        o[c + 2] = scale * s2;
        o[c + 3] = scale * s3;
    }
    for (; c < V; c++) {
        real sum = 0;
        for (int64_t i = 0; i < K; i++)
            sum += h[i * V + c] * x[i];
        o[c] = scale * sum;
    }
}

void lacs_internal_state_add_outer(int64_t K, int64_t V, real *h, real coef, const real *x, const real *y)
{
    for (int64_t i = 0; i < K; i++)
        for (int64_t c = 0; c < V; c++)
            h[i * V + c] += coef * x[i] * y[c];
#if !defined(LACS_REAL_LONG_DOUBLE) && !defined(LACS_REAL_FLOAT)
    lacs_internal_perturb_state(h, K * V); /* the gauge's model of a rounded state; off otherwise */
#endif
}

void lacs_internal_state_rounded(int64_t K, int64_t V, real *h)
{
#if !defined(LACS_REAL_LONG_DOUBLE) && !defined(LACS_REAL_FLOAT)
    lacs_internal_perturb_state(h, K * V); /* the gauge's model of a rounded state; off otherwise */
#else
    (void)K;
    (void)V;
    (void)h;
#endif
}

/* o = scale h^T q, i.e. o_j = scale sum_c h[c][j] q[c]: do_j reaches q[c]
 * through scale h[c][j] and h[c][j] through scale q[c]. */
void lacs_internal_readout_adjoint(int64_t K, int64_t V, const real *h, const real *q, real scale, const real *dout,
                                   real *dq, real *dh)
{
    for (int64_t c = 0; c < K; c++) {
        real sum = 0;
        for (int64_t j = 0; j < V; j++)
            sum += h[c * V + j] * dout[j];
        dq[c] += scale * sum;
        for (int64_t j = 0; j < V; j++)
            dh[c * V + j] += scale * q[c] * dout[j];
    }
}

/* p = softmax(l): dp_j/dl_m = p_j (delta_jm - p_m), so
 * dl_m = sum_j dp_j p_j (delta_jm - p_m) = p_m (dp_m - D), D = sum_j p_j dp_j.
 * Where one weight p_J is near 1 (large logits, strong gates) dp_J - D
 * cancels: it is exactly sum_{m != J} p_m (dp_J - dp_m), tiny next to dp_J,
 * and the plain difference keeps little but D's rounding error.
 * Since the weights sum to 1, dp_m - D = (dp_m - dp_J) - S with
 * S = sum_{m != J} p_m (dp_m - dp_J), J the largest weight: no term of S is
 * large, and dl_J = -p_J S. In the gauge (SPEC.md 11.2) D is perturbed as an
 * implementation's rounding of it would move it: dl_m -= p_m (D' - D), with
 * D' - D of size u sum_m p_m |dp_m| at the tier's u (D is formed from the
 * stored output). */
void lacs_internal_softmax_adjoint(int64_t n, const real *p, const real *dp, real *dl)
{
    int64_t J = 0;
    for (int64_t j = 1; j < n; j++)
        if (p[j] > p[J])
            J = j;
    real S = 0;
    for (int64_t m = 0; m < n; m++)
        if (m != J)
            S += p[m] * (dp[m] - dp[J]);
    for (int64_t m = 0; m < n; m++)
        dl[m] = m == J ? -p[J] * S : p[m] * ((dp[m] - dp[J]) - S);
#if !defined(LACS_REAL_LONG_DOUBLE) && !defined(LACS_REAL_FLOAT)
    /* FlashAttention's D = do . o, from the output as it was stored (bf16 in
     * the bf16 tier): off by up to u sum_m p_m |dp_m|, however small D is. */
    double size = 0;
    for (int64_t m = 0; m < n; m++)
        size += fabs(p[m] * dp[m]);
    double moved = size;
    lacs_internal_perturb_stored(&moved, 1); /* the gauge's model of D rounded; off otherwise */
    for (int64_t m = 0; moved != size && m < n; m++)
        dl[m] -= p[m] * (moved - size);
#endif
}

/* FlashAttention's backward rebuilds a row's weights as exp(l_j - lse) from a
 * binary32 log-sum-exp: off by a factor exp(lse - lse') = 1 -+ u |lse| that the
 * row's normalisation no longer removes. The gauge (SPEC.md 11.2) models it:
 * under its noise the weights are scaled by 1 -+ delta |lse|; otherwise (and
 * in every build but double) nothing happens. */
void lacs_internal_weights_from_rounded_lse(int64_t n, real lse, real *p)
{
#if !defined(LACS_REAL_LONG_DOUBLE) && !defined(LACS_REAL_FLOAT)
    const double size = fabs(lse);
    double moved = size;
    lacs_internal_perturb_state(&moved, 1);
    for (int64_t j = 0; moved != size && j < n; j++)
        p[j] *= 1 + (moved - size);
#else
    (void)n;
    (void)lse;
    (void)p;
#endif
}

/* A chunked backward (fla's) takes a log gate's gradient as the reverse
 * cumulative sum, within each chunk of 64 tokens, of local terms of size
 * m_t[c] = |q_t[c] dq_t[c]| + |k_t[c] dk_t[c]| (for GLA exactly
 * q (.) dq - k (.) dk): in binary32 each term carries a rounding error,
 * which cancels nothing where the decays are strong and the true gradient is
 * tiny. The gauge (SPEC.md 11.2) models it: under its noise, dlog[s][c]
 * moves by sum_{t >= s, same chunk} +-delta m_t[c]; otherwise, and in every
 * build but double, nothing happens. */
void lacs_internal_gate_gradient_rounded(const sequence_head *s, const head_grads *g)
{
#if !defined(LACS_REAL_LONG_DOUBLE) && !defined(LACS_REAL_FLOAT)
    const int64_t K = s->K;
    double run[512];
    if (K > 512)
        return;
    for (int64_t t = s->T - 1; t >= 0; t--) {
        if ((t + 1) % 64 == 0 || t == s->T - 1)
            for (int64_t c = 0; c < K; c++)
                run[c] = 0;
        for (int64_t c = 0; c < K; c++) {
            const double m = fabs(s->q[t * K + c] * g->dq[t * K + c]) + fabs(s->k[t * K + c] * g->dk[t * K + c]);
            double moved = m;
            lacs_internal_perturb_state(&moved, 1);
            run[c] += moved - m;
            g->dlog[t * K + c] += run[c];
        }
    }
#else
    (void)s;
    (void)g;
#endif
}

/* dg_tau += factor sum_{j < tau} dl_j, tau = 1 .. n-1, for one row of
 * weights p with adjoint dl (a gate g_tau summed into l_ij for j < tau <= i).
 * The dl_j sum to 0 (the weights sum to 1), so the sum is also
 * -sum_{j >= tau} dl_j: the side without the largest weight p_J is summed,
 * since dl_J is minus the sum of all the others and would cancel. */
void lacs_internal_gate_row_adjoint(int64_t n, const real *p, const real *dl, real factor, real *dg, int64_t stride)
{
    int64_t J = 0;
    for (int64_t j = 1; j < n; j++)
        if (p[j] > p[J])
            J = j;
    real below = 0;
    for (int64_t tau = 1; tau <= J && tau < n; tau++) {
        below += dl[tau - 1];
        dg[tau * stride] += factor * below;
    }
    real above = 0;
    for (int64_t tau = n - 1; tau > J; tau--) {
        above += dl[tau];
        dg[tau * stride] -= factor * above;
    }
}

void lacs_internal_delta_correction(int64_t K, int64_t V, const real *h, const real *k, const real *v, real coef,
                                    real *u)
{
    lacs_internal_state_readout(K, V, h, k, 1, u); /* the prediction h^T k */
    for (int64_t c = 0; c < V; c++)
        u[c] = coef * (v[c] - u[c]);
}

real lacs_internal_log_decay(const sequence_head *s, int64_t tau, int64_t c)
{
    if (s->gk)
        return s->gk[tau * s->K + c];
    if (s->g)
        return s->g[tau];
    return s->g_gamma;
}

int lacs_internal_decayed_scores(const sequence_head *s, const real *X, const real *Y, int strict,
                          real *S, real *h0_decay)
{
    const int64_t T = s->T, K = s->K;
    real *log_gamma = malloc((size_t)(K + 1) * sizeof(real));
    if (!log_gamma)
        return LACS_ERR_MEMORY;
    for (int64_t i = 0; i < T; i++) {
        for (int64_t c = 0; c < K; c++)
            log_gamma[c] = 0;
        for (int64_t j = i; j >= 0; j--) { /* log_gamma = sum_{tau=j+1..i} */
            real sum = 0;
            for (int64_t c = 0; c < K; c++)
                sum += X[i * K + c] * Y[j * K + c] * exp(log_gamma[c]);
            S[i * T + j] = (strict && j == i) ? 0 : sum;
            for (int64_t c = 0; c < K; c++)
                log_gamma[c] += lacs_internal_log_decay(s, j, c);
        }
        for (int64_t j = i + 1; j < T; j++)
            S[i * T + j] = 0;
        for (int64_t c = 0; c < K; c++) /* now sum_{tau=0..i} */
            if (h0_decay)
                h0_decay[i * K + c] = exp(log_gamma[c]);
    }
    free(log_gamma);
    return LACS_OK;
}

void lacs_internal_decayed_final_state(const sequence_head *s, const real *X, const real *U, real *h)
{
    const int64_t K = s->K, V = s->V;
    for (int64_t r = 0; r < K; r++) {
        real log_total = 0; /* sum_{tau=0..T-1}: the initial state's decay */
        for (int64_t j = s->T - 1; j >= 0; j--)
            log_total += lacs_internal_log_decay(s, j, r);
        for (int64_t c = 0; c < V; c++)
            h[r * V + c] *= exp(log_total);
        real log_gamma = 0; /* sum_{tau=j+1..T-1} for the current j */
        for (int64_t j = s->T - 1; j >= 0; j--) {
            real w = exp(log_gamma) * X[j * K + r];
            for (int64_t c = 0; c < V; c++)
                h[r * V + c] += w * U[j * V + c];
            log_gamma += lacs_internal_log_decay(s, j, r);
        }
    }
}

void lacs_internal_rms_normalize(int64_t n, real eps, real *x)
{
    real sum_sq = 0;
    for (int64_t i = 0; i < n; i++)
        sum_sq += x[i] * x[i];
    real denom = sqrt(sum_sq / n + eps);
    for (int64_t i = 0; i < n; i++)
        x[i] = denom > 0 ? x[i] / denom : 0;
}

static real norm1(int64_t n, const real *X)
{
    real best = 0;
    for (int64_t j = 0; j < n; j++) {
        real col = 0;
        for (int64_t i = 0; i < n; i++)
            col += fabs(X[i * n + j]);
        if (col > best)
            best = col;
    }
    return best;
}

/* E4: e^X and psi(X) = (e^X - I)/X as power series, never dividing by X.
 * With Y = X / 2^s and ||Y||_1 <= 1/2, 30 terms of each series leave a
 * remainder below 0.5^30 / 30! ~ 4e-42, far under long double's epsilon.
 * Then s doublings: psi(2Y) = psi(Y)(e^Y + I)/2 (from e^{2Y} - I =
 * (e^Y - I)(e^Y + I)), e^{2Y} = (e^Y)^2. */
int lacs_ref_expm_psi(int64_t n, const real *X, real *expX, real *psiX)
{
    size_t bytes = (size_t)(n * n) * sizeof(real);
    real *Y = malloc(bytes), *term = malloc(bytes), *next = malloc(bytes);
    real *E = malloc(bytes), *P = malloc(bytes), *tmp = malloc(bytes);
    int rc = LACS_OK;
    if (!Y || !term || !next || !E || !P || !tmp) {
        rc = LACS_ERR_MEMORY;
        goto done;
    }
    int s = 0;
    real scale = 1;
    for (real nrm = norm1(n, X); nrm * scale > 0.5L && s < 1000; s++)
        scale /= 2;
    for (int64_t i = 0; i < n * n; i++)
        Y[i] = X[i] * scale;

    /* term_m = Y^m / m!; e^Y = sum term_m; psi(Y) = sum term_m / (m + 1). */
    for (int64_t i = 0; i < n * n; i++) {
        term[i] = (i % (n + 1) == 0) ? 1 : 0;
        E[i] = term[i];
        P[i] = term[i];
    }
    for (int m = 1; m <= 30; m++) {
        lacs_internal_matmul(n, n, n, term, Y, next);
        for (int64_t i = 0; i < n * n; i++) {
            term[i] = next[i] / m;
            E[i] += term[i];
            P[i] += term[i] / (m + 1);
        }
    }
    for (int step = 0; step < s; step++) {
        memcpy(tmp, E, bytes);
        for (int64_t i = 0; i < n; i++)
            tmp[i * n + i] += 1;
        lacs_internal_matmul(n, n, n, P, tmp, next);
        for (int64_t i = 0; i < n * n; i++)
            P[i] = next[i] / 2;
        lacs_internal_matmul(n, n, n, E, E, next);
        memcpy(E, next, bytes);
    }
    if (expX)
        memcpy(expX, E, bytes);
    if (psiX)
        memcpy(psiX, P, bytes);
done:
    free(Y);
    free(term);
    free(next);
    free(E);
    free(P);
    free(tmp);
    return rc;
}

/* Cyclic Jacobi: rotate away each off-diagonal entry in turn. An entry below
 * epsilon/1000 of its diagonal pair is dropped (its effect on the eigenvalues
 * is below rounding); the sweeps stop when a sweep finds nothing to rotate. */
int lacs_ref_symmetric_eigenvalues(int64_t n, const real *A, real *eigenvalues)
{
    real *M = malloc((size_t)(n * n + 1) * sizeof(real));
    if (!M)
        return LACS_ERR_MEMORY;
    memcpy(M, A, (size_t)(n * n) * sizeof(real));
    int rotated = 1;
    for (int sweep = 0; sweep < 100 && rotated; sweep++) {
        rotated = 0;
        for (int64_t p = 0; p < n; p++)
            for (int64_t r = p + 1; r < n; r++) {
                real apr = M[p * n + r];
                if (fabs(apr) <= REAL_EPSILON / 1000 * (fabs(M[p * n + p]) + fabs(M[r * n + r]))) {
                    M[p * n + r] = M[r * n + p] = 0;
                    continue;
                }
                rotated = 1;
                real theta = (M[r * n + r] - M[p * n + p]) / (2 * apr);
                real t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
                real c = 1 / sqrt(t * t + 1), sn = t * c;
                for (int64_t k = 0; k < n; k++) { /* columns p, r */
                    real mkp = M[k * n + p], mkr = M[k * n + r];
                    M[k * n + p] = c * mkp - sn * mkr;
                    M[k * n + r] = sn * mkp + c * mkr;
                }
                for (int64_t k = 0; k < n; k++) { /* rows p, r */
                    real mpk = M[p * n + k], mrk = M[r * n + k];
                    M[p * n + k] = c * mpk - sn * mrk;
                    M[r * n + k] = sn * mpk + c * mrk;
                }
            }
    }
    for (int64_t i = 0; i < n; i++)
        eigenvalues[i] = M[i * n + i];
    free(M);
    for (int64_t i = 1; i < n; i++) /* insertion sort, ascending */
        for (int64_t j = i; j > 0 && eigenvalues[j] < eigenvalues[j - 1]; j--) {
            real t = eigenvalues[j];
            eigenvalues[j] = eigenvalues[j - 1];
            eigenvalues[j - 1] = t;
        }
    return LACS_OK;
}

/* DeltaFormer (H11): the delta rule's attention matrix with the kernel trick,
 * O = A (I + diag(beta) B)^{-1} V, A over j <= i and B over j < i. SPEC.md 4.11.
 *
 * H11 writes A = exp(QK^T + log M), B = exp(KK^T + log(M - I)): DeltaNet's
 * H9 form with phi(Q) phi(K)^T = exp(QK^T). Three forms (lacs_deltaformer_form):
 *   EXP      A_ij = exp(s q_i.k_j), B_ij = exp(s k_i.k_j): H11 as written (s = 1
 *            is the documents' form; nothing bounds it, so large scores overflow);
 *   SOFTMAX  each exp replaced by a causal softmax: A's row i over j <= i, B's
 *            over j < i (row 0 of B has no admissible j and is 0);
 *   FLA      fla's deltaformer_attn: as SOFTMAX but B_ij = softmax_{j<i}(s q_i.k_j),
 *            q and not k in the first stage.
 * beta (optional, absent = 1) scales row i of B, as fla's beta does:
 * u_i = v_i - beta_i sum_{j<i} B_ij u_j, then o_i = sum_{j<=i} A_ij u_j.
 *
 * Since B is strictly lower triangular, (I + B)^{-1} = I - B + B^2 - ... ends
 * after T terms: H11's Neumann series is exact with T terms.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The form and the series length of the call in progress: the per-head
 * kernels have the driver's fixed signature, as delta_rule_ut's chunk does. */
static _Thread_local lacs_deltaformer_form form;
static _Thread_local int64_t neumann_terms;

/* Row i of A (first_stage = 0) or of B (first_stage = 1), unnormalised score
 * or softmax weight as the form says, in row[0..i] (row[i] = 0 for B). */
static _Thread_local real weights_row_lse; /* the last row's log-sum-exp (the softmax forms), for the gauge's model */

static void weights_row(const sequence_head *s, int first_stage, int64_t i, real *row)
{
    const int64_t K = s->K;
    const int64_t last = first_stage ? i - 1 : i;
    /* B reads k_i, except in fla's form, which reads q_i */
    const real *x = (first_stage && form != LACS_DELTAFORMER_FLA) ? s->k + i * K : s->q + i * K;
    real m = -INFINITY;
    for (int64_t j = 0; j <= last; j++) {
        row[j] = s->scale * lacs_internal_dot(K, x, s->k + j * K);
        m = fmax(m, row[j]);
    }
    if (form == LACS_DELTAFORMER_EXP)
        m = 0; /* H11 as written: no normalisation, so nothing to subtract */
    real denom = 0;
    for (int64_t j = 0; j <= last; j++)
        denom += (row[j] = exp(row[j] - m));
    for (int64_t j = 0; j <= last && form != LACS_DELTAFORMER_EXP; j++)
        row[j] /= denom;
    weights_row_lse = m + log(denom);
    for (int64_t j = last + 1; j <= i; j++)
        row[j] = 0;
}

/* Recursion form: u_i from the u_j already computed, then o_i, token by token. */
static int deltaformer_kernel(const sequence_head *s, real *h, real *o)
{
    (void)h;
    const int64_t T = s->T, V = s->V;
    real *u = malloc((size_t)(T * V + 1) * sizeof(real));
    real *row = malloc((size_t)(T + 1) * sizeof(real));
    if (!u || !row) {
        free(u);
        free(row);
        return LACS_ERR_MEMORY;
    }
    for (int64_t i = 0; i < T; i++) {
        weights_row(s, 1, i, row);
        const real beta = s->beta ? s->beta[i] : 1;
        for (int64_t c = 0; c < V; c++) {
            real sum = 0;
            for (int64_t j = 0; j < i; j++)
                sum += row[j] * u[j * V + c];
            u[i * V + c] = s->v[i * V + c] - beta * sum;
        }
        weights_row(s, 0, i, row);
        for (int64_t c = 0; c < V; c++) {
            real sum = 0;
            for (int64_t j = 0; j <= i; j++)
                sum += row[j] * u[j * V + c];
            o[i * V + c] = sum;
        }
    }
    free(u);
    free(row);
    return LACS_OK;
}

/* A and diag(beta) B as whole T x T matrices (zeros above the diagonal). The
 * softmax forms go through the shared causal_softmax, not weights_row. */
static void build_matrices(const sequence_head *s, real *A, real *B)
{
    const int64_t T = s->T, K = s->K;
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) {
            const real *x = form == LACS_DELTAFORMER_FLA ? s->q + i * K : s->k + i * K;
            A[i * T + j] = j <= i ? s->scale * lacs_internal_dot(K, s->q + i * K, s->k + j * K) : 0;
            B[i * T + j] = j < i ? s->scale * lacs_internal_dot(K, x, s->k + j * K) : 0;
        }
    if (form == LACS_DELTAFORMER_EXP) {
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < T; j++) {
                A[i * T + j] = j <= i ? exp(A[i * T + j]) : 0;
                B[i * T + j] = j < i ? exp(B[i * T + j]) : 0;
            }
    } else {
        lacs_internal_causal_softmax(T, 0, A);
        lacs_internal_causal_softmax(T, 1, B);
    }
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < i; j++)
            B[i * T + j] *= s->beta ? s->beta[i] : 1;
}

/* Matrix form: (I + diag(beta) B) U = V by forward substitution, O = A U.
 * Neumann form (neumann_terms > 0): U = sum_{m<terms} (-diag(beta) B)^m V. */
static int deltaformer_matrix_kernel(const sequence_head *s, real *h, real *o)
{
    (void)h;
    const int64_t T = s->T, V = s->V;
    real *A = malloc((size_t)(T * T + 1) * sizeof(real));
    real *B = malloc((size_t)(T * T + 1) * sizeof(real));
    real *U = malloc((size_t)(T * V + 1) * sizeof(real));
    real *term = malloc((size_t)(T * V + 1) * sizeof(real));
    real *next = malloc((size_t)(T * V + 1) * sizeof(real));
    int rc = LACS_OK;
    if (!A || !B || !U || !term || !next) {
        rc = LACS_ERR_MEMORY;
        goto done;
    }
    build_matrices(s, A, B);
    if (neumann_terms == 0) {
        lacs_internal_unit_lower_solve(T, V, B, s->v, U);
    } else {
        for (int64_t i = 0; i < T * V; i++)
            U[i] = term[i] = s->v[i];
        for (int64_t m = 1; m < neumann_terms; m++) {
            lacs_internal_matmul(T, T, V, B, term, next);
            for (int64_t i = 0; i < T * V; i++)
                U[i] += (term[i] = -next[i]);
        }
    }
    lacs_internal_matmul(T, T, V, A, U, o);
done:
    free(A);
    free(B);
    free(U);
    free(term);
    free(next);
    return rc;
}

static int run(const char *op, const lacs_dims *d, const lacs_inputs *in, lacs_deltaformer_form f,
               int64_t terms, head_kernel kernel, real *o)
{
    int rc = lacs_internal_validate(op, d, in, 0, LACS_READS_BETA);
    if (rc)
        return rc;
    if (f != LACS_DELTAFORMER_EXP && f != LACS_DELTAFORMER_SOFTMAX && f != LACS_DELTAFORMER_FLA)
        return lacs_internal_error(LACS_ERR_PARAM, op, "unknown form %d (0 exp, 1 softmax, 2 fla)", (int)f);
    form = f;
    neumann_terms = terms;
    return lacs_internal_run_per_head(op, d, in, STATE_NONE, kernel, o, NULL, NULL);
}

int lacs_ref_deltaformer(const lacs_dims *d, const lacs_inputs *in, lacs_deltaformer_form f, real *o)
{
    return run("deltaformer", d, in, f, 0, deltaformer_kernel, o);
}

int lacs_ref_deltaformer_matrix(const lacs_dims *d, const lacs_inputs *in, lacs_deltaformer_form f, real *o)
{
    return run("deltaformer_matrix", d, in, f, 0, deltaformer_matrix_kernel, o);
}

int lacs_ref_deltaformer_neumann(const lacs_dims *d, const lacs_inputs *in, lacs_deltaformer_form f,
                                 int64_t terms, real *o)
{
    if (terms < 1)
        return lacs_internal_error(LACS_ERR_PARAM, "deltaformer_neumann",
                                   "terms = %lld must be >= 1 (T terms are exact)", (long long)terms);
    return run("deltaformer_neumann", d, in, f, terms, deltaformer_matrix_kernel, o);
}

/* ---- gradients (SPEC.md 4.19) ---- */

/* The adjoint of one row of weights with respect to its scores s_j =
 * scale x . k_j (j <= last): EXP's weights are exp(s_j) (ds_j = dw_j w_j),
 * the softmax forms' the softmax's adjoint. Adds scale ds_j k_j to dx and
 * scale ds_j x to dk_j. */
static void weights_row_adjoint(const sequence_head *s, int64_t last, const real *x, const real *row,
                                const real *drow, real *ds, real *dx, real *dk)
{
    const int64_t K = s->K;
    if (last < 0)
        return;
    if (form == LACS_DELTAFORMER_EXP)
        for (int64_t j = 0; j <= last; j++)
            ds[j] = drow[j] * row[j];
    else
        lacs_internal_softmax_adjoint(last + 1, row, drow, ds);
    for (int64_t j = 0; j <= last; j++)
        for (int64_t c = 0; c < K; c++) {
            dx[c] += s->scale * ds[j] * s->k[j * K + c];
            dk[j * K + c] += s->scale * ds[j] * x[c];
        }
}

/* The adjoint of H11's recursion. The forward again (deltaformer_kernel's
 * rows A_i, B_i and u_i), then
 *   o_i = sum_{j<=i} A_ij u_j                 dA_ij = do_i . u_j,  du_j += A_ij do_i
 * and, for i from T-1 down (du_i is complete once every later row is done):
 *   u_i = v_i - beta_i sum_{j<i} B_ij u_j      dv_i = du_i,  dbeta_i = -du_i . sum_j B_ij u_j,
 *                                            dB_ij = -beta_i du_i . u_j,  du_j -= beta_i B_ij du_i
 * then each row's weights back to its scores (weights_row_adjoint): A's row
 * i reads q_i, B's reads k_i (q_i in fla's form). */
static int deltaformer_vjp_kernel(const sequence_head *s, real *h, const real *dout, real *dh, head_grads *g)
{
    (void)h;
    (void)dh;
    const int64_t T = s->T, K = s->K, V = s->V;
    real *A = malloc((size_t)(T * T + 1) * sizeof(real)), *B = malloc((size_t)(T * T + 1) * sizeof(real));
    real *u = malloc((size_t)(T * V + 1) * sizeof(real)), *du = calloc((size_t)(T * V + 1), sizeof(real));
    real *drow = malloc((size_t)(T + 1) * sizeof(real)), *ds = malloc((size_t)(T + 1) * sizeof(real));
    int rc = A && B && u && du && drow && ds ? LACS_OK : LACS_ERR_MEMORY;
    for (int64_t i = 0; i < T && rc == LACS_OK; i++) { /* as deltaformer_kernel */
        weights_row(s, 1, i, B + i * T);
        if (form != LACS_DELTAFORMER_EXP && i > 0)
            lacs_internal_weights_from_rounded_lse(i, weights_row_lse, B + i * T);
        const real beta = s->beta ? s->beta[i] : 1;
        for (int64_t c = 0; c < V; c++) {
            real sum = 0;
            for (int64_t j = 0; j < i; j++)
                sum += B[i * T + j] * u[j * V + c];
            u[i * V + c] = s->v[i * V + c] - beta * sum;
        }
        weights_row(s, 0, i, A + i * T);
        if (form != LACS_DELTAFORMER_EXP)
            lacs_internal_weights_from_rounded_lse(i + 1, weights_row_lse, A + i * T);
    }
    for (int64_t i = 0; i < T && rc == LACS_OK; i++) {
        const real *doi = dout + i * V;
        for (int64_t j = 0; j <= i; j++) {
            drow[j] = lacs_internal_dot(V, doi, u + j * V);
            for (int64_t c = 0; c < V; c++)
                du[j * V + c] += A[i * T + j] * doi[c];
        }
        weights_row_adjoint(s, i, s->q + i * K, A + i * T, drow, ds, g->dq + i * K, g->dk);
    }
    for (int64_t i = T - 1; i >= 0 && rc == LACS_OK; i--) {
        const real beta = s->beta ? s->beta[i] : 1, *dui = du + i * V;
        real dbeta = 0;
        for (int64_t c = 0; c < V; c++) {
            real sum = 0;
            for (int64_t j = 0; j < i; j++)
                sum += B[i * T + j] * u[j * V + c];
            g->dv[i * V + c] += dui[c];
            dbeta -= dui[c] * sum;
        }
        g->dbeta[i] = dbeta;
        for (int64_t j = 0; j < i; j++) {
            drow[j] = -beta * lacs_internal_dot(V, dui, u + j * V);
            for (int64_t c = 0; c < V; c++)
                du[j * V + c] -= beta * B[i * T + j] * dui[c];
        }
        /* B's row i reads k_i, or q_i in fla's form */
        const int reads_q = form == LACS_DELTAFORMER_FLA;
        weights_row_adjoint(s, i - 1, (reads_q ? s->q : s->k) + i * K, B + i * T, drow, ds,
                            (reads_q ? g->dq : g->dk) + i * K, g->dk);
    }
    free(A);
    free(B);
    free(u);
    free(du);
    free(drow);
    free(ds);
    return rc;
}

int lacs_ref_deltaformer_vjp(const lacs_dims *d, const lacs_inputs *in, lacs_deltaformer_form f, const lacs_cotangents *ct,
                             const grads_out *gr)
{
    int rc = lacs_internal_validate("deltaformer_vjp", d, in, 0, LACS_READS_BETA);
    if (rc)
        return rc;
    if (f != LACS_DELTAFORMER_EXP && f != LACS_DELTAFORMER_SOFTMAX && f != LACS_DELTAFORMER_FLA)
        return lacs_internal_error(LACS_ERR_PARAM, "deltaformer_vjp", "unknown form %d (0 exp, 1 softmax, 2 fla)",
                                   (int)f);
    form = f;
    return lacs_internal_run_per_head_vjp("deltaformer_vjp", d, in, ct, STATE_NONE, deltaformer_vjp_kernel, gr);
}

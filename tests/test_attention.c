/* The identities of the attention forms built from the delta rule (H10..H15),
 * each shown able to fail: a wrong variant (tests/mutants.c) must break the
 * same check that the reference passes. The forms themselves (component vs
 * matrix, recursion, Neumann, parallel MesaNet) are in the catalog and
 * checked by tests/test_forms.c and tests/test_long_double.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

static double *zeros(int64_t n) { return calloc((size_t)(n + 1), sizeof(double)); }

static double normwise(const lacs_dims *d, const double *x, const double *ref)
{
    return lacs_normwise_error(x, ref, d->B, d->T, d->HV, d->V, NULL, 0, NULL);
}

static int64_t o_size(const lacs_dims *d) { return d->B * d->T * d->HV * d->V; }

/* ---- PaTH (H12, H13, H14) ---- */

static int path_reference(const lacs_dims *d, const lacs_inputs *in, unsigned bugs, double *o)
{
    (void)bugs;
    return lacs_ref_path_attn(d, in, o);
}

typedef int (*path_impl)(const lacs_dims *d, const lacs_inputs *in, unsigned bugs, double *o);

/* H13: with W = K and beta = 1, PaTH's logits are DeltaNet's attention
 * matrix ((QK^T) (.) M)(I + (KK^T) (.) (M - I))^{-1}. Its rows are DeltaNet's
 * output for the values V = I (row j of V is e_j), so the identity reads:
 * path_attn(q, k, v, w = k) = softmax over j <= i of delta_rule(q, k, I)_ij,
 * applied to v. scale = 1 on both sides; H = HV = 2. */
static double h13_error(path_impl path, unsigned bugs, uint64_t seed)
{
    const int64_t T = 40;
    lacs_dims d = {.B = 2, .T = T, .H = 2, .HV = 2, .K = 12, .V = 10};
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d, LACS_PROBLEM_STATELESS | LACS_PROBLEM_UNIT_K, seed), LACS_OK);
    double *ones = malloc((size_t)(d.B * T * d.HV) * sizeof(double));
    for (int64_t i = 0; i < d.B * T * d.HV; i++)
        ones[i] = 1;
    lacs_inputs in = p.in;
    in.scale = 1;
    in.w = in.k;
    in.beta = ones;

    lacs_dims dn = d; /* DeltaNet with V = T and v_j = e_j */
    dn.V = T;
    double *eye = zeros(d.B * T * d.HV * T), *attn = zeros(d.B * T * d.HV * T);
    for (int64_t b = 0; b < d.B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t hv = 0; hv < d.HV; hv++)
                eye[((b * T + t) * d.HV + hv) * T + t] = 1;
    lacs_inputs dn_in = {.q = in.q, .k = in.k, .v = eye, .beta = ones, .scale = 1};
    cr_assert_eq(lacs_ref_delta_rule(&dn, &dn_in, attn, NULL), LACS_OK, "%s", lacs_last_error());

    double *expected = zeros(o_size(&d)), *got = zeros(o_size(&d));
    for (int64_t b = 0; b < d.B; b++)
        for (int64_t hv = 0; hv < d.HV; hv++)
            for (int64_t i = 0; i < T; i++) {
                const double *row = attn + ((b * T + i) * d.HV + hv) * T;
                double m = -INFINITY, denom = 0;
                for (int64_t j = 0; j <= i; j++)
                    m = fmax(m, row[j]);
                double *out = expected + ((b * T + i) * d.HV + hv) * d.V;
                for (int64_t j = 0; j <= i; j++) {
                    double e = exp(row[j] - m);
                    denom += e;
                    for (int64_t c = 0; c < d.V; c++)
                        out[c] += e * in.v[((b * T + j) * d.HV + hv) * d.V + c];
                }
                for (int64_t c = 0; c < d.V; c++)
                    out[c] /= denom;
            }
    cr_assert_eq(path(&d, &in, bugs, got), LACS_OK, "%s", lacs_last_error());
    double err = normwise(&d, got, expected);
    free(ones);
    free(eye);
    free(attn);
    free(expected);
    free(got);
    lacs_problem_free(&p);
    return err;
}

Test(path_attn, h13_w_equal_k_gives_the_deltanet_attention_matrix)
{
    double err = h13_error(path_reference, 0, 11);
    cr_expect(err <= FORMS_BOUND, "H13: %.3e", err);
    err = h13_error(mutant_path_attn, BUG_NONE, 11);
    cr_expect(err <= FORMS_BOUND, "the from-scratch PaTH without a bug: %.3e", err);
}

Test(path_attn, h13_rejects_the_product_reversed_or_starting_at_j)
{
    double err = h13_error(mutant_path_attn, BUG_PATH_REVERSED, 11);
    cr_expect(err >= WRONG_BY_AT_LEAST, "H13 accepted the reversed product: %.3e", err);
    err = h13_error(mutant_path_attn, BUG_PATH_FROM_J, 11);
    cr_expect(err >= WRONG_BY_AT_LEAST, "H13 accepted the product starting at t = j: %.3e", err);
}

/* R_i = H_i ... H_1 for unit w and beta = 2 (H_t = I - 2 w w^T, a reflection). */
static void reflections_product(int64_t K, const double *w, int64_t from, int64_t to, double *R)
{
    for (int64_t r = 0; r < K * K; r++)
        R[r] = (r % (K + 1) == 0) ? 1 : 0;
    for (int64_t t = from; t <= to; t++) { /* R <- H_t R */
        const double *wt = w + t * K;
        for (int64_t c = 0; c < K; c++) {
            double wr = 0;
            for (int64_t r = 0; r < K; r++)
                wr += wt[r] * R[r * K + c];
            for (int64_t r = 0; r < K; r++)
                R[r * K + c] -= 2 * wt[r] * wr;
        }
    }
}

/* H14's first half: with ||w|| = sqrt 2 (here unit w, beta = 2) each H_t is
 * orthogonal and symmetric, so R_ij = H_i ... H_{j+1} = R_i R_j^T. */
Test(path_attn, h14_relative_product_is_a_product_of_absolute_ones)
{
    const int64_t K = 6, T = 12;
    lacs_rng rng = lacs_rng_seed(14);
    double w[12 * 6], Rij[36], Ri[36], Rj[36];
    for (int64_t i = 0; i < T * K; i++)
        w[i] = lacs_rng_normal12(&rng);
    lacs_ref_l2norm(w, T, K, 0, LACS_L2NORM_MAX_EPS, w);
    double worst = 0, worst_wrong = INFINITY;
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < i; j++) {
            reflections_product(K, w, j + 1, i, Rij);
            reflections_product(K, w, 0, i, Ri);
            reflections_product(K, w, 0, j, Rj);
            double diff = 0, diff_wrong = 0;
            for (int64_t r = 0; r < K; r++)
                for (int64_t c = 0; c < K; c++) {
                    double s = 0, s_wrong = 0; /* R_i R_j^T, and the wrong R_i^T R_j */
                    for (int64_t l = 0; l < K; l++) {
                        s += Ri[r * K + l] * Rj[c * K + l];
                        s_wrong += Ri[l * K + r] * Rj[l * K + c];
                    }
                    diff = fmax(diff, fabs(s - Rij[r * K + c]));
                    diff_wrong = fmax(diff_wrong, fabs(s_wrong - Rij[r * K + c]));
                }
            worst = fmax(worst, diff);
            if (i - j > 1)
                worst_wrong = fmin(worst_wrong, diff_wrong);
        }
    cr_expect(worst <= 1e-14, "R_ij = R_i R_j^T fails by %.3e", worst);
    cr_expect(worst_wrong >= WRONG_BY_AT_LEAST, "R_i^T R_j passed too: %.3e", worst_wrong);
}

/* H14's second half: PaTH = SoftmaxAttention(Q - DeltaNet(Q, W, W),
 * K - DeltaNet(K, W, W), V) for ||w|| = sqrt 2. DeltaNet here is delta_rule
 * with keys and values w (unit), beta = 2, scale = 1: its state S_i satisfies
 * I - S_i = H_1 ... H_i = R_i^T, so x - DeltaNet(x)_i = R_i^T x_i. */
static double h14_error(path_impl path, unsigned bugs, uint64_t seed)
{
    lacs_dims d = {.B = 2, .T = 50, .H = 2, .HV = 2, .K = 12, .V = 10};
    const int64_t n_qk = d.B * d.T * d.H * d.K, n_gate = d.B * d.T * d.HV;
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d, LACS_PROBLEM_STATELESS | LACS_PROBLEM_W, seed), LACS_OK);
    double *two = malloc((size_t)n_gate * sizeof(double));
    for (int64_t i = 0; i < n_gate; i++)
        two[i] = 2;
    lacs_inputs in = p.in;
    in.beta = two;

    lacs_dims dn = d; /* keys and values are both w: V = K */
    dn.V = d.K;
    double *dq = zeros(n_qk), *dk = zeros(n_qk), *q_tilde = zeros(n_qk), *k_tilde = zeros(n_qk);
    lacs_inputs on_q = {.q = in.q, .k = in.w, .v = in.w, .beta = two, .scale = 1};
    lacs_inputs on_k = {.q = in.k, .k = in.w, .v = in.w, .beta = two, .scale = 1};
    cr_assert_eq(lacs_ref_delta_rule(&dn, &on_q, dq, NULL), LACS_OK, "%s", lacs_last_error());
    cr_assert_eq(lacs_ref_delta_rule(&dn, &on_k, dk, NULL), LACS_OK, "%s", lacs_last_error());
    for (int64_t i = 0; i < n_qk; i++) {
        q_tilde[i] = in.q[i] - dq[i];
        k_tilde[i] = in.k[i] - dk[i];
    }
    double *expected = zeros(o_size(&d)), *got = zeros(o_size(&d));
    lacs_inputs softmax_in = {.q = q_tilde, .k = k_tilde, .v = in.v, .scale = in.scale};
    cr_assert_eq(lacs_ref_softmax_attn(&d, &softmax_in, expected), LACS_OK, "%s", lacs_last_error());
    cr_assert_eq(path(&d, &in, bugs, got), LACS_OK, "%s", lacs_last_error());
    double err = normwise(&d, got, expected);
    free(two);
    free(dq);
    free(dk);
    free(q_tilde);
    free(k_tilde);
    free(expected);
    free(got);
    lacs_problem_free(&p);
    return err;
}

Test(path_attn, h14_is_softmax_attention_of_deltanet_encoded_q_and_k)
{
    double err = h14_error(path_reference, 0, 21);
    cr_expect(err <= FORMS_BOUND, "H14: %.3e", err);
    err = h14_error(mutant_path_attn, BUG_NONE, 21);
    cr_expect(err <= FORMS_BOUND, "the from-scratch PaTH without a bug: %.3e", err);
}

Test(path_attn, h14_rejects_the_product_reversed_or_starting_at_j)
{
    double err = h14_error(mutant_path_attn, BUG_PATH_REVERSED, 21);
    cr_expect(err >= WRONG_BY_AT_LEAST, "H14 accepted the reversed product: %.3e", err);
    err = h14_error(mutant_path_attn, BUG_PATH_FROM_J, 21);
    cr_expect(err >= WRONG_BY_AT_LEAST, "H14 accepted the product starting at t = j: %.3e", err);
}

/* fla adds PaTH's gate before the scale: the from-scratch form agrees, and
 * FoX's placement (after the scale) is told apart (scale = K^-1/2 != 1). */
Test(path_attn, gate_is_added_before_the_scale)
{
    lacs_dims d = test_dims(48);
    d.HV = d.H; /* mutant_path_attn reads beta per value head like the reference */
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d,
                                   LACS_PROBLEM_STATELESS | LACS_PROBLEM_W | LACS_PROBLEM_BETA |
                                       LACS_PROBLEM_BETA_TO_2 | LACS_PROBLEM_G,
                                   31),
                 LACS_OK);
    double *ref = zeros(o_size(&d)), *ok = zeros(o_size(&d)), *wrong = zeros(o_size(&d));
    cr_assert_eq(lacs_ref_path_attn(&d, &p.in, ref), LACS_OK, "%s", lacs_last_error());
    cr_assert_eq(mutant_path_attn(&d, &p.in, BUG_NONE, ok), LACS_OK);
    cr_assert_eq(mutant_path_attn(&d, &p.in, BUG_PATH_GATE_AFTER_SCALE, wrong), LACS_OK);
    double err_ok = normwise(&d, ok, ref), err_wrong = normwise(&d, wrong, ref);
    cr_expect(err_ok <= FORMS_BOUND, "from-scratch PaTH-FoX: %.3e", err_ok);
    cr_expect(err_wrong >= WRONG_BY_AT_LEAST, "the gate after the scale passed: %.3e", err_wrong);
    free(ref);
    free(ok);
    free(wrong);
    lacs_problem_free(&p);
}

/* ---- FoX (H10) ---- */

/* FoX's gate is added after the scale: a FoX with the gate inside the scale
 * (PaTH's placement) is the same as the reference on scale 1 only. */
Test(fox, gate_is_added_after_the_scale)
{
    lacs_dims d = test_dims(48);
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d, LACS_PROBLEM_STATELESS | LACS_PROBLEM_G, 41), LACS_OK);
    double *ref = zeros(o_size(&d)), *wrong = zeros(o_size(&d));
    cr_assert_eq(lacs_ref_fox(&d, &p.in, ref), LACS_OK, "%s", lacs_last_error());
    /* the gate inside the scale is fox with g / scale */
    double *g = malloc((size_t)(d.B * d.T * d.HV) * sizeof(double));
    for (int64_t i = 0; i < d.B * d.T * d.HV; i++)
        g[i] = p.in.g[i] * p.in.scale;
    lacs_inputs inside = p.in;
    inside.g = g;
    cr_assert_eq(lacs_ref_fox(&d, &inside, wrong), LACS_OK);
    double err = normwise(&d, wrong, ref);
    cr_expect(err >= WRONG_BY_AT_LEAST, "FoX with the gate scaled passed: %.3e", err);
    free(ref);
    free(wrong);
    free(g);
    lacs_problem_free(&p);
}

/* A gate of -inf (a hard reset, fla #20) cuts the past off: FoX then attends
 * to the tokens after the reset only, as softmax attention on that suffix. */
Test(fox, gate_minus_infinity_is_a_hard_reset)
{
    lacs_dims d = {.B = 1, .T = 20, .H = 1, .HV = 1, .K = 8, .V = 6};
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d, LACS_PROBLEM_STATELESS, 51), LACS_OK);
    double g[20] = {0};
    g[12] = -INFINITY;
    lacs_inputs in = p.in;
    in.g = g;
    double o[20 * 6], suffix[8 * 6];
    cr_assert_eq(lacs_ref_fox(&d, &in, o), LACS_OK);
    lacs_dims ds = d;
    ds.T = 8;
    lacs_inputs sin = {.q = p.in.q + 12 * 8, .k = p.in.k + 12 * 8, .v = p.in.v + 12 * 6, .scale = p.in.scale};
    cr_assert_eq(lacs_ref_softmax_attn(&ds, &sin, suffix), LACS_OK);
    for (int64_t i = 0; i < 8 * 6; i++)
        cr_expect(fabs(o[12 * 6 + i] - suffix[i]) <= 1e-15 * (1 + fabs(suffix[i])), "token %lld", (long long)(12 + i / 6));
    lacs_problem_free(&p);
}

/* ---- DeltaFormer (H11) ---- */

static double deltaformer_error(unsigned bugs, uint64_t seed)
{
    lacs_dims d = test_dims(64);
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d, LACS_PROBLEM_STATELESS | LACS_PROBLEM_BETA, seed), LACS_OK);
    double *ref = zeros(o_size(&d)), *got = zeros(o_size(&d));
    cr_assert_eq(lacs_ref_deltaformer(&d, &p.in, LACS_DELTAFORMER_FLA, ref), LACS_OK, "%s", lacs_last_error());
    cr_assert_eq(mutant_deltaformer_fla(&d, &p.in, bugs, got), LACS_OK);
    double err = normwise(&d, got, ref);
    free(ref);
    free(got);
    lacs_problem_free(&p);
    return err;
}

Test(deltaformer, fla_form_matches_a_from_scratch_two_stage_implementation)
{
    double err = deltaformer_error(BUG_NONE, 61);
    cr_expect(err <= FORMS_BOUND, "%.3e", err);
}

Test(deltaformer, rejects_the_first_stage_including_the_diagonal)
{
    double err = deltaformer_error(BUG_DELTAFORMER_DIAGONAL, 61);
    cr_expect(err >= WRONG_BY_AT_LEAST, "the diagonal in the first stage passed: %.3e", err);
}

/* H11's Neumann series where it converges: with the softmax forms each row of
 * diag(beta) B sums to beta_i <= 1/2, so ||(diag(beta) B)^m||_inf <= 2^-m and
 * 50 terms are within 2^-50 of the exact inverse at T = 200, far short of
 * T terms; 5 terms are not. */
Test(deltaformer, neumann_series_converges_geometrically)
{
    lacs_dims d = test_dims(200);
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d, LACS_PROBLEM_STATELESS | LACS_PROBLEM_BETA, 71), LACS_OK);
    double *beta = (double *)p.in.beta;
    for (int64_t i = 0; i < d.B * d.T * d.HV; i++)
        beta[i] *= 0.5;
    const lacs_deltaformer_form forms[] = {LACS_DELTAFORMER_SOFTMAX, LACS_DELTAFORMER_FLA};
    double *exact = zeros(o_size(&d)), *series = zeros(o_size(&d));
    for (int f = 0; f < 2; f++) {
        cr_assert_eq(lacs_ref_deltaformer_matrix(&d, &p.in, forms[f], exact), LACS_OK);
        cr_assert_eq(lacs_ref_deltaformer_neumann(&d, &p.in, forms[f], 50, series), LACS_OK);
        double err = normwise(&d, series, exact);
        cr_expect(err <= FORMS_BOUND, "form %d, 50 terms: %.3e", f, err);
        cr_assert_eq(lacs_ref_deltaformer_neumann(&d, &p.in, forms[f], 5, series), LACS_OK);
        err = normwise(&d, series, exact);
        cr_expect(err >= WRONG_BY_AT_LEAST, "form %d, 5 terms passed: %.3e", f, err);
    }
    free(exact);
    free(series);
    lacs_problem_free(&p);
}

/* The three forms are three different operators (fla's reads q in the first
 * stage; the documents' reads k; exp is unnormalised): none may stand in for
 * another. */
Test(deltaformer, the_three_forms_differ)
{
    lacs_dims d = test_dims(32);
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d, LACS_PROBLEM_STATELESS | LACS_PROBLEM_BETA, 81), LACS_OK);
    double *o[3];
    for (int f = 0; f < 3; f++) {
        o[f] = zeros(o_size(&d));
        cr_assert_eq(lacs_ref_deltaformer(&d, &p.in, (lacs_deltaformer_form)f, o[f]), LACS_OK);
    }
    cr_expect(normwise(&d, o[0], o[1]) >= WRONG_BY_AT_LEAST);
    cr_expect(normwise(&d, o[2], o[1]) >= WRONG_BY_AT_LEAST);
    for (int f = 0; f < 3; f++)
        free(o[f]);
    lacs_problem_free(&p);
}

/* ---- MesaNet (H15) ---- */

/* Least squares min_S sum_j ||S k_j - v_j||^2 over the rows k [n][K], v [n][V]
 * (n >= K, full column rank) by modified Gram-Schmidt QR, then o = S q =
 * X^T q with X = R^{-1} Q^T V. Independent of the normal equations that
 * MesaNet solves by Cholesky. */
static void least_squares_readout(int64_t n, int64_t K, int64_t V, const double *k, const double *v,
                                  const double *q, double *o)
{
    double *Q = malloc((size_t)(n * K) * sizeof(double)), *R = calloc((size_t)(K * K), sizeof(double));
    double *X = malloc((size_t)(K * V) * sizeof(double));
    memcpy(Q, k, (size_t)(n * K) * sizeof(double));
    for (int64_t c = 0; c < K; c++) {
        double nrm = 0;
        for (int64_t r = 0; r < n; r++)
            nrm += Q[r * K + c] * Q[r * K + c];
        R[c * K + c] = sqrt(nrm);
        for (int64_t r = 0; r < n; r++)
            Q[r * K + c] /= R[c * K + c];
        for (int64_t c2 = c + 1; c2 < K; c2++) {
            double proj = 0;
            for (int64_t r = 0; r < n; r++)
                proj += Q[r * K + c] * Q[r * K + c2];
            R[c * K + c2] = proj;
            for (int64_t r = 0; r < n; r++)
                Q[r * K + c2] -= proj * Q[r * K + c];
        }
    }
    for (int64_t j = 0; j < V; j++)
        for (int64_t c = K - 1; c >= 0; c--) { /* R X = Q^T V */
            double s = 0;
            for (int64_t r = 0; r < n; r++)
                s += Q[r * K + c] * v[r * V + j];
            for (int64_t c2 = c + 1; c2 < K; c2++)
                s -= R[c * K + c2] * X[c2 * V + j];
            X[c * V + j] = s / R[c * K + c];
        }
    for (int64_t j = 0; j < V; j++) {
        o[j] = 0;
        for (int64_t c = 0; c < K; c++)
            o[j] += X[c * V + j] * q[c];
    }
    free(Q);
    free(R);
    free(X);
}

/* Ungated, beta = 1: H_t = sum k k^T and h_t = sum k v^T over K prior tokens
 * (given as h0_kk and h0, which makes H_t invertible from the first token) and
 * the tokens up to t. With lambda = 0, o_t is the least-squares readout; as
 * lambda -> 0 it tends to it. read_before_update: the wrong variant that reads
 * H_{t-1}, h_{t-1} (the least squares over the tokens before t). */
static double mesa_least_squares_error(double lambda_value, int read_before_update)
{
    const int64_t K = 6, V = 5, T = 30, P = K;
    lacs_dims d = {.B = 1, .T = T, .H = 1, .HV = 1, .K = K, .V = V};
    lacs_rng rng = lacs_rng_seed(91);
    double k[(30 + 6) * 6], v[(30 + 6) * 5], q[30 * 6];
    for (int64_t i = 0; i < (T + P) * K; i++)
        k[i] = lacs_rng_normal12(&rng);
    for (int64_t i = 0; i < (T + P) * V; i++)
        v[i] = lacs_rng_normal12(&rng);
    for (int64_t i = 0; i < T * K; i++)
        q[i] = lacs_rng_normal12(&rng);
    double h0[6 * 5] = {0}, h0_kk[6 * 6] = {0}, lambda[6];
    for (int64_t j = 0; j < P; j++) /* the prior tokens are rows 0..P-1 */
        for (int64_t a = 0; a < K; a++) {
            for (int64_t b = 0; b < K; b++)
                h0_kk[a * K + b] += k[j * K + a] * k[j * K + b];
            for (int64_t c = 0; c < V; c++)
                h0[a * V + c] += k[j * K + a] * v[j * V + c];
        }
    for (int64_t c = 0; c < K; c++)
        lambda[c] = lambda_value;
    lacs_inputs in = {.q = q, .k = k + P * K, .v = v + P * V, .lambda = lambda, .h0 = h0, .h0_kk = h0_kk};
    double o[30 * 5], expected[5];
    cr_assert_eq(lacs_ref_mesa_net(&d, &in, o, NULL, NULL), LACS_OK, "%s", lacs_last_error());
    double worst = 0;
    for (int64_t t = 0; t < T; t++) {
        const int64_t rows = P + t + (read_before_update ? 0 : 1);
        least_squares_readout(rows, K, V, k, v, q + t * K, expected);
        double diff = 0, size = 0;
        for (int64_t c = 0; c < V; c++) {
            diff += (o[t * V + c] - expected[c]) * (o[t * V + c] - expected[c]);
            size += expected[c] * expected[c];
        }
        worst = fmax(worst, sqrt(diff / size));
    }
    return worst;
}

/* The normal equations that Cholesky solves lose cond(K)^2 eps against QR's
 * cond(K) eps; these rows are well conditioned (measured 1.2e-15), so the
 * forms bound holds. */
Test(mesa_net, ungated_lambda_zero_is_the_least_squares_solution)
{
    double err = mesa_least_squares_error(0, 0);
    cr_expect(err <= FORMS_BOUND, "lambda = 0: %.3e", err);
    err = mesa_least_squares_error(0, 1);
    cr_expect(err >= WRONG_BY_AT_LEAST, "reading the state before the update passed: %.3e", err);
}

/* The limit lambda -> 0: the gap shrinks in proportion to lambda (measured
 * 2.2e-6 at 1e-6 and 2.2e-8 at 1e-8). */
Test(mesa_net, lambda_to_zero_tends_to_least_squares)
{
    double e6 = mesa_least_squares_error(1e-6, 0), e8 = mesa_least_squares_error(1e-8, 0);
    cr_expect(e6 <= 1e-4 && e8 <= 1e-6, "lambda 1e-6: %.3e, 1e-8: %.3e", e6, e8);
    cr_expect(e8 < e6 / 10, "no convergence: %.3e then %.3e", e6, e8);
    cr_expect(mesa_least_squares_error(1, 0) >= WRONG_BY_AT_LEAST, "lambda = 1 is not the limit");
}

/* Both forms give the same key-key state too (the catalog compares o and ht). */
Test(mesa_net, forms_agree_on_the_key_key_state)
{
    lacs_dims d = test_dims(65);
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d,
                                   LACS_PROBLEM_LAMBDA | LACS_PROBLEM_BETA | LACS_PROBLEM_G |
                                       LACS_PROBLEM_H0 | LACS_PROBLEM_H0_KK,
                                   101),
                 LACS_OK);
    const int64_t n_kk = d.B * d.HV * d.K * d.K;
    double *o = zeros(o_size(&d)), *kk1 = zeros(n_kk), *kk2 = zeros(n_kk);
    cr_assert_eq(lacs_ref_mesa_net(&d, &p.in, o, NULL, kk1), LACS_OK, "%s", lacs_last_error());
    cr_assert_eq(lacs_ref_mesa_net_parallel(&d, &p.in, o, NULL, kk2), LACS_OK, "%s", lacs_last_error());
    double err = lacs_normwise_error(kk2, kk1, d.B, 1, d.HV, d.K * d.K, NULL, 0, NULL);
    cr_expect(err <= FORMS_BOUND, "ht_kk: %.3e", err);
    free(o);
    free(kk1);
    free(kk2);
    lacs_problem_free(&p);
}

/* lambda = 0 with fewer tokens than K: H_t is singular, and the error names
 * the sequence, the head and the token instead of returning garbage. */
Test(mesa_net, singular_system_is_an_error_naming_the_token)
{
    lacs_dims d = {.B = 1, .T = 3, .H = 1, .HV = 1, .K = 4, .V = 2};
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d, LACS_PROBLEM_H0, 111), LACS_OK);
    double lambda[4] = {0, 0, 0, 0}, o[6];
    lacs_inputs in = p.in;
    in.h0 = NULL;
    in.lambda = lambda;
    cr_expect_eq(lacs_ref_mesa_net(&d, &in, o, NULL, NULL), LACS_ERR_PARAM);
    cr_expect(strstr(lacs_last_error(), "mesa_net: sequence 0, value head 0, token 0") != NULL, "%s",
              lacs_last_error());
    lacs_problem_free(&p);
}

/* ---- inputs each op reads ---- */

Test(attention_validation, missing_or_extra_inputs_are_named)
{
    lacs_dims d = test_dims(8);
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d, LACS_PROBLEM_STATELESS | LACS_PROBLEM_BETA | LACS_PROBLEM_G |
                                            LACS_PROBLEM_G_GAMMA | LACS_PROBLEM_W | LACS_PROBLEM_LAMBDA,
                                   121),
                 LACS_OK);
    double *o = zeros(o_size(&d));
    lacs_inputs in = p.in;
    cr_expect_eq(lacs_ref_fox(&d, &in, o), LACS_ERR_INPUT); /* g and g_gamma, and beta, w, lambda */
    lacs_inputs fox_in = {.q = in.q, .k = in.k, .v = in.v, .scale = in.scale};
    cr_expect_eq(lacs_ref_fox(&d, &fox_in, o), LACS_ERR_INPUT);
    cr_expect(strstr(lacs_last_error(), "exactly one of 'g'") != NULL, "%s", lacs_last_error());
    fox_in.g = in.g;
    fox_in.g_gamma = in.g_gamma;
    cr_expect_eq(lacs_ref_fox(&d, &fox_in, o), LACS_ERR_INPUT);
    cr_expect(strstr(lacs_last_error(), "got both") != NULL, "%s", lacs_last_error());

    lacs_inputs path_in = {.q = in.q, .k = in.k, .v = in.v, .beta = in.beta, .scale = in.scale};
    cr_expect_eq(lacs_ref_path_attn(&d, &path_in, o), LACS_ERR_INPUT);
    cr_expect(strstr(lacs_last_error(), "path_attn: input 'w' is required") != NULL, "%s", lacs_last_error());
    path_in.w = in.w;
    path_in.g_gamma = in.g_gamma;
    cr_expect_eq(lacs_ref_path_attn_matrix(&d, &path_in, o), LACS_ERR_INPUT);
    cr_expect(strstr(lacs_last_error(), "'g_gamma' is given but path_attn_matrix does not read it") != NULL,
              "%s", lacs_last_error());

    lacs_inputs df_in = {.q = in.q, .k = in.k, .v = in.v, .scale = in.scale, .w = in.w};
    cr_expect_eq(lacs_ref_deltaformer(&d, &df_in, LACS_DELTAFORMER_FLA, o), LACS_ERR_INPUT);
    df_in.w = NULL;
    cr_expect_eq(lacs_ref_deltaformer(&d, &df_in, (lacs_deltaformer_form)7, o), LACS_ERR_PARAM);
    cr_expect_eq(lacs_ref_deltaformer_neumann(&d, &df_in, LACS_DELTAFORMER_FLA, 0, o), LACS_ERR_PARAM);

    lacs_inputs mesa_in = {.q = in.q, .k = in.k, .v = in.v};
    cr_expect_eq(lacs_ref_mesa_net(&d, &mesa_in, o, NULL, NULL), LACS_ERR_INPUT);
    cr_expect(strstr(lacs_last_error(), "'lambda' is required") != NULL, "%s", lacs_last_error());
    free(o);
    lacs_problem_free(&p);
}

Test(attention_validation, out_of_domain_parameters_are_named)
{
    lacs_dims d = test_dims(8);
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d, LACS_PROBLEM_STATELESS | LACS_PROBLEM_BETA | LACS_PROBLEM_W |
                                            LACS_PROBLEM_LAMBDA,
                                   131),
                 LACS_OK);
    double *o = zeros(o_size(&d));
    double *beta = (double *)p.in.beta, *lambda = (double *)p.in.lambda;
    beta[5] = -0.25;
    lacs_inputs path_in = {.q = p.in.q, .k = p.in.k, .v = p.in.v, .w = p.in.w, .beta = beta, .scale = 1};
    cr_expect_eq(lacs_ref_path_attn(&d, &path_in, o), LACS_ERR_PARAM);
    cr_expect(strstr(lacs_last_error(), "beta[5] = -0.25") != NULL, "%s", lacs_last_error());
    beta[5] = 0.25;
    lambda[3] = -1;
    lacs_inputs mesa_in = {.q = p.in.q, .k = p.in.k, .v = p.in.v, .lambda = lambda};
    cr_expect_eq(lacs_ref_mesa_net(&d, &mesa_in, o, NULL, NULL), LACS_ERR_PARAM);
    cr_expect(strstr(lacs_last_error(), "lambda[3] = -1") != NULL, "%s", lacs_last_error());
    free(o);
    lacs_problem_free(&p);
}

/* fla #285 for MesaNet: a sequence run whole equals its two parts with both
 * final states (ht, ht_kk) carried as the second part's h0, h0_kk; dropping
 * either is seen. */
Test(mesa_net, state_carry_of_both_states)
{
    const int64_t T = 70, split = 33;
    lacs_dims whole = test_dims(T);
    whole.B = 1;
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &whole,
                                   LACS_PROBLEM_LAMBDA | LACS_PROBLEM_BETA | LACS_PROBLEM_G |
                                       LACS_PROBLEM_H0 | LACS_PROBLEM_H0_KK,
                                   141),
                 LACS_OK);
    const int64_t row = whole.HV * whole.V, nh = whole.HV * whole.K * whole.V, nkk = whole.HV * whole.K * whole.K;
    double *o = zeros(T * row), *o2 = zeros(T * row), *ht = zeros(nh), *ht_kk = zeros(nkk);
    double *mid = zeros(nh), *mid_kk = zeros(nkk), *ht2 = zeros(nh), *ht2_kk = zeros(nkk);
    cr_assert_eq(lacs_ref_mesa_net(&whole, &p.in, o, ht, ht_kk), LACS_OK, "%s", lacs_last_error());
    lacs_dims first = whole, second = whole;
    first.T = split;
    second.T = T - split;
    cr_assert_eq(lacs_ref_mesa_net(&first, &p.in, o2, mid, mid_kk), LACS_OK);
    lacs_inputs b = p.in;
    b.q += split * whole.H * whole.K;
    b.k += split * whole.H * whole.K;
    b.v += split * row;
    b.beta += split * whole.HV;
    b.g += split * whole.HV;
    b.h0 = mid;
    b.h0_kk = mid_kk;
    cr_assert_eq(lacs_ref_mesa_net(&second, &b, o2 + split * row, ht2, ht2_kk), LACS_OK);
    double err = fmax(lacs_normwise_error(o2, o, 1, T, whole.HV, whole.V, NULL, 0, NULL),
                      fmax(lacs_normwise_error(ht2, ht, 1, 1, whole.HV, whole.K * whole.V, NULL, 0, NULL),
                           lacs_normwise_error(ht2_kk, ht_kk, 1, 1, whole.HV, whole.K * whole.K, NULL, 0, NULL)));
    cr_expect_leq(err, FORMS_BOUND, "whole vs two parts: %.3e", err);
    b.h0_kk = NULL; /* the key-key state dropped */
    cr_assert_eq(lacs_ref_mesa_net(&second, &b, o2 + split * row, ht2, ht2_kk), LACS_OK);
    cr_expect_gt(lacs_normwise_error(o2, o, 1, T, whole.HV, whole.V, NULL, 0, NULL), WRONG_BY_AT_LEAST,
                 "a dropped h0_kk went unnoticed");
    free(o);
    free(o2);
    free(ht);
    free(ht_kk);
    free(mid);
    free(mid_kk);
    free(ht2);
    free(ht2_kk);
    lacs_problem_free(&p);
}

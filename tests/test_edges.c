/* Edge cases give what SPEC.md section 8 says: T = 0, empty varlen sequences,
 * state carry, beta = 0, g = -inf, ||k|| = 0, scale = 0, l2norm of zero,
 * sigmoid's tails, softmax logits that would overflow without the max. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

static double *zeros(int64_t n) { return calloc((size_t)(n + 1), sizeof(double)); }

static int is_stateful(const lacs_form_pair *fp) { return !(fp->inputs & LACS_PROBLEM_STATELESS); }

/* T = 0: no output rows, and every form returns ht = h0 bit for bit. */
Test(edges, empty_sequence_returns_h0)
{
    size_t count;
    const lacs_form_pair *pairs = lacs_form_pairs(&count);
    lacs_dims d = test_dims(0);
    for (size_t i = 0; i < count; i++) {
        if (!is_stateful(&pairs[i]))
            continue;
        lacs_problem p;
        cr_assert_eq(lacs_problem_make(&p, &d, pairs[i].inputs, 1), LACS_OK);
        const int64_t n = lacs_problem_state_size(&p);
        double o[1], *h1 = zeros(n), *h2 = zeros(n);
        cr_assert_eq(pairs[i].primary(&d, &p.in, o, h1), LACS_OK, "%s", lacs_last_error());
        cr_assert_eq(pairs[i].other(&d, &p.in, o, h2), LACS_OK, "%s", lacs_last_error());
        cr_expect(memcmp(h1, p.in.h0, (size_t)n * sizeof(double)) == 0, "%s: ht != h0 at T = 0", pairs[i].op);
        cr_expect(memcmp(h2, p.in.h0, (size_t)n * sizeof(double)) == 0, "%s (%s): ht != h0 at T = 0",
                  pairs[i].op, pairs[i].secondary);
        free(h1);
        free(h2);
        lacs_problem_free(&p);
    }
}

/* Varlen: an empty sequence keeps its h0; each sequence equals the same tokens
 * run alone with its own h0 (no state leaks between sequences). */
Test(edges, varlen_sequences_are_independent)
{
    static const int64_t cu[] = {0, 5, 5, 9, 10};
    size_t count;
    const lacs_form_pair *pairs = lacs_form_pairs(&count);
    lacs_dims d = test_dims(10);
    d.B = 1;
    d.cu_seqlens = cu;
    d.N = 4;
    for (size_t i = 0; i < count; i++) {
        const lacs_form_pair *fp = &pairs[i];
        lacs_problem p;
        cr_assert_eq(lacs_problem_make(&p, &d, fp->inputs, 2), LACS_OK);
        const int64_t nh = lacs_problem_state_size(&p), per_seq = d.HV * d.K * d.V;
        double *o = zeros(lacs_problem_o_size(&p)), *ht = zeros(nh);
        cr_assert_eq(fp->primary(&d, &p.in, o, is_stateful(fp) ? ht : NULL), LACS_OK, "%s", lacs_last_error());
        if (is_stateful(fp))
            cr_expect(memcmp(ht + per_seq, p.in.h0 + per_seq, (size_t)per_seq * sizeof(double)) == 0,
                      "%s: the empty sequence's ht is not its h0", fp->op);
        /* sequence 2 (tokens 5..8) alone: slice every input at those tokens */
        lacs_problem alone = p;
        lacs_dims d1 = d;
        d1.cu_seqlens = NULL;
        d1.T = 4;
        const int64_t t0 = 5;
        alone.dims = d1;
        alone.in.q = p.in.q + t0 * d.H * d.K;
        alone.in.k = p.in.k + t0 * d.H * d.K;
        alone.in.v = p.in.v + t0 * d.HV * d.V;
        alone.in.beta = p.in.beta ? p.in.beta + t0 * d.HV : NULL;
        alone.in.g = p.in.g ? p.in.g + t0 * d.HV : NULL;
        alone.in.gk = p.in.gk ? p.in.gk + t0 * d.HV * d.K : NULL;
        alone.in.w = p.in.w ? p.in.w + t0 * d.H * d.K : NULL;
        alone.in.h0 = p.in.h0 ? p.in.h0 + 2 * per_seq : NULL;
        alone.in.h0_kk = p.in.h0_kk ? p.in.h0_kk + 2 * d.HV * d.K * d.K : NULL;
        double *o1 = zeros(4 * d.HV * d.V), *h1 = zeros(per_seq);
        cr_assert_eq(fp->primary(&d1, &alone.in, o1, is_stateful(fp) ? h1 : NULL), LACS_OK);
        cr_expect_eq(lacs_normwise_error(o1, o + t0 * d.HV * d.V, 1, 4, d.HV, d.V, NULL, 0, NULL), 0,
                     "%s: sequence 2 differs from the same tokens run alone", fp->op);
        if (is_stateful(fp))
            cr_expect(memcmp(h1, ht + 2 * per_seq, (size_t)per_seq * sizeof(double)) == 0,
                      "%s: sequence 2's ht differs from the same tokens run alone", fp->op);
        free(o);
        free(ht);
        free(o1);
        free(h1);
        lacs_problem_free(&p);
    }
}

/* fla #285: a sequence run whole equals its two halves with the first half's
 * final state passed as the second's h0. */
Test(edges, state_carry_between_two_parts)
{
    size_t count;
    const lacs_form_pair *pairs = lacs_form_pairs(&count);
    const int64_t T = 70, split = 33;
    lacs_dims whole = test_dims(T);
    whole.B = 1;
    for (size_t i = 0; i < count; i++) {
        const lacs_form_pair *fp = &pairs[i];
        if (!is_stateful(fp) || (fp->inputs & LACS_PROBLEM_H0_KK))
            continue; /* MesaNet carries two states: tests/test_attention.c */
        lacs_problem p;
        cr_assert_eq(lacs_problem_make(&p, &whole, fp->inputs, 3), LACS_OK);
        const int64_t nh = lacs_problem_state_size(&p), row = whole.HV * whole.V;
        double *o = zeros(T * row), *ht = zeros(nh), *o2 = zeros(T * row), *mid = zeros(nh), *ht2 = zeros(nh);
        cr_assert_eq(fp->primary(&whole, &p.in, o, ht), LACS_OK);
        lacs_dims first = whole, second = whole;
        first.T = split;
        second.T = T - split;
        lacs_inputs a = p.in, b = p.in;
        cr_assert_eq(fp->primary(&first, &a, o2, mid), LACS_OK);
        b.q += split * whole.H * whole.K;
        b.k += split * whole.H * whole.K;
        b.v += split * row;
        b.beta = b.beta ? b.beta + split * whole.HV : NULL;
        b.g = b.g ? b.g + split * whole.HV : NULL;
        b.gk = b.gk ? b.gk + split * whole.HV * whole.K : NULL;
        b.h0 = mid;
        cr_assert_eq(fp->primary(&second, &b, o2 + split * row, ht2), LACS_OK);
        double err = fmax(lacs_normwise_error(o2, o, 1, T, whole.HV, whole.V, NULL, 0, NULL),
                          lacs_normwise_error(ht2, ht, 1, 1, whole.HV, whole.K * whole.V, NULL, 0, NULL));
        cr_expect_leq(err, FORMS_BOUND, "%s: whole vs two parts with carried state: %.3e", fp->op, err);
        /* the check can fail: dropping the carried state is seen */
        b.h0 = NULL;
        cr_assert_eq(fp->primary(&second, &b, o2 + split * row, ht2), LACS_OK);
        cr_expect_gt(lacs_normwise_error(o2, o, 1, T, whole.HV, whole.V, NULL, 0, NULL), WRONG_BY_AT_LEAST,
                     "%s: a dropped state went unnoticed", fp->op);
        free(o);
        free(ht);
        free(o2);
        free(mid);
        free(ht2);
        lacs_problem_free(&p);
    }
}

/* One head, one token, for the step-by-step edge cases below. */
enum { K1 = 4, V1 = 3 };
static const lacs_dims one = {.B = 1, .T = 1, .H = 1, .HV = 1, .K = K1, .V = V1};
static double q1[K1] = {0.3, -1.2, 0.5, 2.0}, k1[K1] = {0.5, 0.5, -0.5, 0.5}, v1[V1] = {1.5, -0.25, 2.0};
static double h01[K1 * V1] = {1, 2, 3, -1, 0.5, 0.25, 2, -2, 1, 0, 1, -3};

static void step(int (*op)(const lacs_dims *, const lacs_inputs *, double *, double *), const lacs_inputs *in,
                 double *o, double *ht)
{
    cr_assert_eq(op(&one, in, o, ht), LACS_OK, "%s", lacs_last_error());
}

Test(edges, beta_zero_leaves_the_state_or_only_decays_it)
{
    double beta = 0, g = -0.7, o[V1], ht[K1 * V1];
    lacs_inputs in = {.q = q1, .k = k1, .v = v1, .beta = &beta, .h0 = h01, .scale = 1};
    step(lacs_ref_delta_rule, &in, o, ht);
    cr_expect(memcmp(ht, h01, sizeof ht) == 0, "delta_rule with beta = 0 changed the state");
    step(lacs_ref_efla, &in, o, ht);
    cr_expect(memcmp(ht, h01, sizeof ht) == 0, "efla with beta = 0 changed the state");
    in.g = &g;
    step(lacs_ref_gated_delta_rule, &in, o, ht);
    for (int i = 0; i < K1 * V1; i++)
        cr_expect_eq(ht[i], exp(g) * h01[i], "gated_delta_rule with beta = 0 must only decay");
    step(lacs_ref_comba, &in, o, ht);
    for (int i = 0; i < K1 * V1; i++)
        cr_expect_eq(ht[i], exp(g) * h01[i], "comba with beta = 0 must only decay");
}

Test(edges, g_minus_infinity_forgets_everything)
{
    double beta = 0.6, g = -INFINITY, o[V1], ht[K1 * V1], pred[V1];
    lacs_inputs in = {.q = q1, .k = k1, .v = v1, .g = &g, .h0 = h01, .scale = 1};
    step(lacs_ref_simple_gla, &in, o, ht);
    for (int i = 0; i < K1; i++)
        for (int c = 0; c < V1; c++)
            cr_expect_eq(ht[i * V1 + c], k1[i] * v1[c], "simple_gla: h = k v^T");
    in.beta = &beta;
    step(lacs_ref_gated_delta_rule, &in, o, ht);
    for (int i = 0; i < K1; i++)
        for (int c = 0; c < V1; c++)
            cr_expect_eq(ht[i * V1 + c], k1[i] * (beta * v1[c]), "gated_delta_rule: h = beta k v^T");
    step(lacs_ref_comba, &in, o, ht);
    for (int c = 0; c < V1; c++) {
        pred[c] = 0;
        for (int i = 0; i < K1; i++)
            pred[c] += h01[i * V1 + c] * k1[i];
    }
    for (int i = 0; i < K1; i++)
        for (int c = 0; c < V1; c++)
            cr_expect(fabs(ht[i * V1 + c] - k1[i] * beta * (v1[c] - pred[c])) <= 1e-15,
                      "comba: h = beta k (v - h_{t-1}^T k)^T: the correction reads the old state");
    /* the matrix forms agree with -inf gates inside a longer sequence */
    lacs_dims d = test_dims(40);
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d, LACS_PROBLEM_BETA | LACS_PROBLEM_G | LACS_PROBLEM_UNIT_K | LACS_PROBLEM_H0, 4),
                 LACS_OK);
    double *gates = (double *)p.in.g;
    for (int64_t i = 0; i < d.B * d.T * d.HV; i += 7)
        gates[i] = -INFINITY;
    cr_expect_leq(lacs_forms_error(lacs_ref_gated_delta_rule, lacs_ref_gated_delta_rule_matrix, &p, 1), FORMS_BOUND);
    p.in.beta = NULL; /* simple_gla does not read beta (giving it is an error) */
    cr_expect_leq(lacs_forms_error(lacs_ref_simple_gla, lacs_ref_simple_gla_matrix, &p, 1), FORMS_BOUND,
                  "%s", lacs_last_error());
    lacs_problem_free(&p);
}

Test(edges, zero_key_leaves_the_state_and_reads_it_out)
{
    double beta = 0.8, kz[K1] = {0}, o[V1], ht[K1 * V1];
    lacs_inputs in = {.q = q1, .k = kz, .v = v1, .beta = &beta, .h0 = h01, .scale = 0.5};
    int (*ops[])(const lacs_dims *, const lacs_inputs *, double *, double *) = {lacs_ref_delta_rule, lacs_ref_efla,
                                                                              lacs_ref_efla_ode};
    for (int j = 0; j < 3; j++) {
        step(ops[j], &in, o, ht);
        cr_expect(memcmp(ht, h01, sizeof ht) == 0, "op %d: ||k|| = 0 changed the state", j);
        for (int c = 0; c < V1; c++) {
            double expect = 0;
            for (int i = 0; i < K1; i++)
                expect += h01[i * V1 + c] * q1[i];
            cr_expect(fabs(o[c] - 0.5 * expect) <= 1e-15, "op %d: o != scale h^T q", j);
        }
    }
    cr_expect_eq(lacs_ref_efla_coefficient(beta, 0), beta);
}

Test(edges, scale_zero_gives_zero_output_and_the_same_state)
{
    double beta = 0.8, o[V1], ht[K1 * V1], ht_ref[K1 * V1];
    lacs_inputs in = {.q = q1, .k = k1, .v = v1, .beta = &beta, .h0 = h01, .scale = 0};
    step(lacs_ref_delta_rule, &in, o, ht);
    for (int c = 0; c < V1; c++)
        cr_expect_eq(o[c], 0);
    in.scale = 1;
    step(lacs_ref_delta_rule, &in, o, ht_ref);
    cr_expect(memcmp(ht, ht_ref, sizeof ht) == 0, "the scale touched the state");
}

Test(edges, l2norm_conventions_and_zero_vectors)
{
    const double x[4] = {3, 0, 4, 0}, zero[4] = {0}, tiny[4] = {1e-9, 0, 0, 0};
    double y[4];
    cr_assert_eq(lacs_ref_l2norm(x, 1, 4, 0, LACS_L2NORM_SQRT_EPS, y), LACS_OK);
    cr_expect(y[0] == 0.6 && y[2] == 0.8, "x / ||x|| with eps = 0");
    lacs_ref_l2norm(x, 1, 4, 1e-6, LACS_L2NORM_SQRT_EPS, y);
    cr_expect(fabs(y[0] - 3 / sqrt(25 + 1e-6)) <= 1e-16, "fla: x / sqrt(sum x^2 + eps)");
    lacs_ref_l2norm(x, 1, 4, 1e-6, LACS_L2NORM_MAX_EPS, y);
    cr_expect_eq(y[0], 0.6, "torch/ggml: x / max(||x||, eps) ignores eps when ||x|| > eps");
    lacs_ref_l2norm(tiny, 1, 4, 1e-6, LACS_L2NORM_MAX_EPS, y);
    cr_expect(fabs(y[0] - 1e-3) <= 1e-18, "max_eps below eps: x / eps");
    lacs_ref_l2norm(tiny, 1, 4, 1e-6, LACS_L2NORM_SQRT_EPS, y);
    cr_expect(fabs(y[0] - 1e-9 / sqrt(1e-18 + 1e-6)) <= 1e-21, "sqrt_eps below eps");
    for (int conv = 0; conv < 2; conv++) {
        cr_assert_eq(lacs_ref_l2norm(zero, 1, 4, 0, (lacs_l2norm_convention)conv, y), LACS_OK);
        for (int i = 0; i < 4; i++)
            cr_expect(y[i] == 0 && !signbit(y[i]) == !signbit(zero[i]), "l2norm(0) with eps = 0 must be 0");
    }
}

Test(edges, sigmoid_tails_do_not_overflow)
{
    const double x[] = {-800, -40, 0, 40, 800};
    double y[5];
    lacs_ref_sigmoid(x, 5, y);
    cr_expect_eq(y[0], 0);
    cr_expect(y[1] > 0 && fabs(y[1] - exp(-40)) <= 1e-30, "sigmoid(-40) = e^-40 / (1 + e^-40)");
    cr_expect_eq(y[2], 0.5);
    cr_expect_eq(y[3], 1);
    cr_expect_eq(y[4], 1);
}

/* Logits of order 1e4 overflow exp() without the max subtraction. Every
 * normalised attention form of the catalog, with scale = 1000 (DeltaFormer's
 * exp form is unnormalised by definition and overflows: SPEC.md 4.11). */
Test(edges, softmax_with_huge_logits_is_finite_and_certified)
{
    lacs_dims d = test_dims(65);
    size_t count;
    const lacs_form_pair *pairs = lacs_form_pairs(&count);
    for (size_t i = 0; i < count; i++) {
        if (!(pairs[i].inputs & LACS_PROBLEM_STATELESS) || strcmp(pairs[i].op, "deltaformer (exp)") == 0)
            continue;
        lacs_problem p;
        cr_assert_eq(lacs_problem_make(&p, &d, pairs[i].inputs, 5), LACS_OK);
        p.in.scale = 1000;
        double *o = zeros(lacs_problem_o_size(&p));
        cr_assert_eq(pairs[i].primary(&p.dims, &p.in, o, NULL), LACS_OK);
        for (int64_t j = 0; j < lacs_problem_o_size(&p); j++)
            cr_assert(isfinite(o[j]), "%s: o[%lld] = %g", pairs[i].op, (long long)j, o[j]);
        cr_expect_leq(lacs_forms_error(pairs[i].primary, pairs[i].other, &p, 0), FORMS_BOUND, "%s vs %s",
                      pairs[i].op, pairs[i].secondary);
        cr_expect_leq(lacs_forms_error_ld(pairs[i].primary, pairs[i].primary_ld, &p, 0), LONG_DOUBLE_BOUND,
                      "%s", pairs[i].op);
        free(o);
        lacs_problem_free(&p);
    }
    /* the check can fail: without the max, exp overflows to inf / inf = NaN */
    double s = 1000 * 12.0, naive = exp(s) / (exp(s) + exp(s - 1));
    cr_expect(isnan(naive), "exp(1.2e4) did not overflow?");
}

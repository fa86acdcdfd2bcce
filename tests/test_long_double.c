/* The double reference against the same source compiled in long double
 * (SPEC.md 5.2): <= 1e-13 normwise per (batch, head), so the golden outputs'
 * own error is known. Each primary op of the catalog, at T = 200 and 1000. */
#include <criterion/criterion.h>
#include <math.h>

#include "support.h"

static void check_all_ops(int64_t T, uint64_t seed)
{
    size_t count;
    const lacs_form_pair *pairs = lacs_form_pairs(&count);
    lacs_dims d = test_dims(T);
    for (size_t i = 0; i < count; i++) {
        const lacs_form_pair *fp = &pairs[i];
        if (i > 0 && pairs[i - 1].primary == fp->primary && pairs[i - 1].inputs == fp->inputs)
            continue; /* same op and inputs as the row before */
        if (fp->max_T && T > fp->max_T)
            continue; /* an O(T^3) form: checked at T = 200 */
        lacs_problem p;
        cr_assert_eq(lacs_problem_make(&p, &d, fp->inputs, seed + i), LACS_OK);
        double err = lacs_forms_error_ld(fp->primary, fp->primary_ld, &p,
                                         !(fp->inputs & LACS_PROBLEM_STATELESS));
        lacs_problem_free(&p);
        cr_expect(err <= LONG_DOUBLE_BOUND, "%s at T = %lld: double vs long double %.3e > %.0e",
                  fp->op, (long long)T, err, LONG_DOUBLE_BOUND);
    }
}

Test(long_double, agrees_at_T_200) { check_all_ops(200, 10); }
Test(long_double, agrees_at_T_1000) { check_all_ops(1000, 20); }

/* The check can fail: a double computation that lost precision (here the
 * output perturbed by 1e-11 relative) is caught against the long double. */
static int delta_rule_perturbed(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht)
{
    int rc = lacs_ref_delta_rule_ld(d, in, o, ht);
    for (int64_t i = 0; i < d->B * d->T * d->HV * d->V; i++)
        o[i] *= 1 + 1e-11L;
    return rc;
}

Test(long_double, rejects_a_result_off_by_1e_11)
{
    lacs_dims d = test_dims(64);
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d, LACS_PROBLEM_BETA | LACS_PROBLEM_UNIT_K | LACS_PROBLEM_H0, 5), LACS_OK);
    double err = lacs_forms_error_ld(lacs_ref_delta_rule, delta_rule_perturbed, &p, 1);
    lacs_problem_free(&p);
    cr_expect(err > LONG_DOUBLE_BOUND, "a 1e-11 perturbation went unnoticed: %.3e", err);
}

/* Each identity test can fail (SPEC.md 9): the form comparison of
 * tests/test_forms.c, run with the primary form replaced by a deliberately
 * wrong variant (tests/mutants.c), rejects it. The same variant without its bug
 * passes, so what fails is the bug, not the harness. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "support.h"

static unsigned current_bugs;
static int current_comba;

static int mutant(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    return mutant_delta_family(d, in, current_bugs, current_comba, o, ht);
}

/* The catalog pair whose primary op is `op` and whose other form mentions `other`. */
static const lacs_form_pair *find_pair(const char *op, const char *other)
{
    size_t count;
    const lacs_form_pair *pairs = lacs_form_pairs(&count);
    for (size_t i = 0; i < count; i++)
        if (strcmp(pairs[i].op, op) == 0 && strstr(pairs[i].secondary, other))
            return &pairs[i];
    cr_assert_fail("no catalog pair %s vs *%s*", op, other);
    return NULL;
}

/* The identity `fp` evaluated with the mutant in place of its primary form. */
static double mutant_error(const lacs_form_pair *fp, unsigned bugs, int comba, int64_t T)
{
    current_bugs = bugs;
    current_comba = comba;
    lacs_dims d = test_dims(T);
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d, fp->inputs, 4242), LACS_OK);
    double err = lacs_forms_error(mutant, fp->other, &p, 1);
    lacs_problem_free(&p);
    return err;
}

Test(mutants, without_a_bug_they_pass)
{
    const lacs_form_pair *delta = find_pair("delta_rule", "matrix form");
    const lacs_form_pair *gated = find_pair("gated_delta_rule", "matrix form");
    const lacs_form_pair *comba = find_pair("comba", "gated_delta_rule");
    cr_expect_leq(mutant_error(delta, BUG_NONE, 0, 65), FORMS_BOUND);
    cr_expect_leq(mutant_error(gated, BUG_NONE, 0, 65), FORMS_BOUND);
    cr_expect_leq(mutant_error(comba, BUG_NONE, 1, 65), FORMS_BOUND);
}

static void expect_rejected(const char *op, const char *other, unsigned bug, int comba,
                            const char *what)
{
    const lacs_form_pair *fp = find_pair(op, other);
    for (int64_t T = 1; T <= 65; T += 64) {
        double err = mutant_error(fp, bug, comba, T);
        cr_expect(err > WRONG_BY_AT_LEAST, "%s passed %s vs %s at T = %lld (error %.3e)", what, op,
                  other, (long long)T, err);
    }
}

Test(mutants, beta_on_the_write_term_only_is_rejected)
{
    expect_rejected("delta_rule", "matrix form", BUG_BETA_ON_WRITE_ONLY, 0, "beta on the write term only");
    expect_rejected("gated_delta_rule", "matrix form", BUG_BETA_ON_WRITE_ONLY, 0, "beta on the write term only");
}

Test(mutants, decay_applied_to_the_write_term_is_rejected)
{
    expect_rejected("gated_delta_rule", "matrix form", BUG_DECAY_ON_WRITE, 0, "decay on the write term");
}

Test(mutants, gva_mapping_tiled_is_rejected)
{
    expect_rejected("delta_rule", "matrix form", BUG_GVA_TILED, 0, "GVA mapping i % H");
    expect_rejected("gated_delta_rule", "matrix form", BUG_GVA_TILED, 0, "GVA mapping i % H");
}

Test(mutants, readout_before_the_update_is_rejected)
{
    expect_rejected("delta_rule", "matrix form", BUG_READOUT_BEFORE_UPDATE, 0, "readout before update");
    expect_rejected("gated_delta_rule", "matrix form", BUG_READOUT_BEFORE_UPDATE, 0, "readout before update");
}

/* fla's naive_recurrent_comba reads the decayed state; H8's mapping rejects it. */
Test(mutants, comba_reading_the_decayed_state_fails_the_h8_mapping)
{
    expect_rejected("comba", "gated_delta_rule", BUG_COMBA_DECAYED_STATE, 1, "Comba on the decayed state");
}

/* The bug flags are what the comparison sees: the GVA bug is invisible with
 * one head group (H = 1), which is why the form tests use HV = 2H, H = 2. */
Test(mutants, gva_bug_needs_more_than_one_key_head)
{
    const lacs_form_pair *fp = find_pair("delta_rule", "matrix form");
    current_bugs = BUG_GVA_TILED;
    current_comba = 0;
    lacs_dims d = {.B = 1, .T = 20, .H = 1, .HV = 2, .K = 12, .V = 10};
    lacs_problem p;
    cr_assert_eq(lacs_problem_make(&p, &d, fp->inputs, 7), LACS_OK);
    double err = lacs_forms_error(mutant, fp->other, &p, 1);
    lacs_problem_free(&p);
    cr_expect_leq(err, FORMS_BOUND, "with H = 1 both mappings read head 0");
}

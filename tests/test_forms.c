/* Every pair of equivalent forms in the catalog (lacs_form_pairs: H1, H2 = H9,
 * H3, H4 = H9, H6 = H7 = H9, H8 = H9, H8's GDN <-> Comba mapping, E5 = E4,
 * E5 = E1, fla #104) agrees to 1e-12 normwise per (batch, head), at T in
 * {1, 2, 63, 64, 65, 200}, K != V, HV = 2H, with h0; and on a varlen batch
 * with empty and length-1 sequences. tests/test_mutants.c shows the same
 * comparison rejecting wrong variants. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>

#include "support.h"

static void check_all_pairs(const lacs_dims *dims, uint64_t seed)
{
    size_t count;
    const lacs_form_pair *pairs = lacs_form_pairs(&count);
    cr_assert_geq(count, 18, "the catalog lost pairs");
    for (size_t i = 0; i < count; i++) {
        const lacs_form_pair *fp = &pairs[i];
        if (fp->max_T && dims->T > fp->max_T)
            continue;
        lacs_problem p;
        cr_assert_eq(lacs_problem_make(&p, dims, fp->inputs, seed + i), LACS_OK);
        double err = lacs_forms_error(fp->primary, fp->other, &p,
                                      !(fp->inputs & LACS_PROBLEM_STATELESS));
        lacs_problem_free(&p);
        cr_expect(err <= FORMS_BOUND, "%s vs %s (%s) at T = %lld%s: normwise error %.3e > %.0e (%s)",
                  fp->op, fp->secondary, fp->labels, (long long)dims->T,
                  dims->cu_seqlens ? " varlen" : "", err, FORMS_BOUND,
                  isnan(err) ? lacs_last_error() : "forms disagree");
    }
}

Test(forms, agree_at_T_1) { lacs_dims d = test_dims(1); check_all_pairs(&d, 100); }
Test(forms, agree_at_T_2) { lacs_dims d = test_dims(2); check_all_pairs(&d, 200); }
Test(forms, agree_at_T_63) { lacs_dims d = test_dims(63); check_all_pairs(&d, 300); }
Test(forms, agree_at_T_64) { lacs_dims d = test_dims(64); check_all_pairs(&d, 400); }
Test(forms, agree_at_T_65) { lacs_dims d = test_dims(65); check_all_pairs(&d, 500); }
Test(forms, agree_at_T_200) { lacs_dims d = test_dims(200); check_all_pairs(&d, 600); }

/* Varlen: B = 1, sequences of length 0, 1, 63, 0, 65 and 71 packed into T = 200. */
Test(forms, agree_varlen_with_empty_and_length_one_sequences)
{
    static const int64_t cu[] = {0, 0, 1, 64, 64, 129, 200};
    lacs_dims d = test_dims(200);
    d.B = 1;
    d.cu_seqlens = cu;
    d.N = 6;
    check_all_pairs(&d, 700);
}

/* G = 4 (HV = 4H) and K > V, to vary the GVA group and the state's shape. */
Test(forms, agree_with_group_of_four)
{
    lacs_dims d = {.B = 1, .T = 70, .H = 1, .HV = 4, .K = 8, .V = 16};
    check_all_pairs(&d, 800);
}

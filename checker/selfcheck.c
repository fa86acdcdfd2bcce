/* lacs-selfcheck: the reference checks itself (the main job until the checker
 * exists). For every pair of equivalent forms in the catalog (lacs/forms.h) it
 * runs both on one random problem and prints their normwise error per
 * (batch, head), worst of o and the final state, against the bound 1e-12; then
 * the primary form against itself compiled in long double, against 1e-13.
 * Exit status 0 only if every line passes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "lacs/forms.h"

#define FORMS_BOUND 1e-12
#define LONG_DOUBLE_BOUND 1e-13

int main(int argc, char **argv)
{
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "usage: lacs-selfcheck\n"
                        "  checks every pair of equivalent forms of the lacs reference, and the\n"
                        "  double reference against its long double build, on one random problem\n");
        return 2;
    }
    const lacs_dims dims = {.B = 2, .T = 65, .H = 2, .HV = 4, .K = 12, .V = 10};
    size_t count;
    const lacs_form_pair *pairs = lacs_form_pairs(&count);
    int failed = 0, passed = 0;
    printf("lacs spec %s reference self-check: B=%lld T=%lld H=%lld HV=%lld K=%lld V=%lld\n",
           LACS_SPEC_VERSION, (long long)dims.B, (long long)dims.T, (long long)dims.H,
           (long long)dims.HV, (long long)dims.K, (long long)dims.V);
    printf("%-28s %-60s %-20s %10s %10s  %s\n", "op", "other form", "labels", "forms", "vs ld", "result");
    for (size_t i = 0; i < count; i++) {
        const lacs_form_pair *fp = &pairs[i];
        const int stateful = !(fp->inputs & LACS_PROBLEM_STATELESS);
        lacs_problem p;
        if (lacs_problem_make(&p, &dims, fp->inputs, 1000 + i) != LACS_OK) {
            fprintf(stderr, "lacs-selfcheck: out of memory\n");
            return 1;
        }
        double err = lacs_forms_error(fp->primary, fp->other, &p, stateful);
        double err_ld = lacs_forms_error_ld(fp->primary, fp->primary_ld, &p, stateful);
        lacs_problem_free(&p);
        int ok = err <= FORMS_BOUND && err_ld <= LONG_DOUBLE_BOUND;
        printf("%-28s %-60s %-20s %10.2e %10.2e  %s\n", fp->op, fp->secondary, fp->labels, err, err_ld,
               ok ? "PASS" : "FAIL");
        if (isnan(err) || isnan(err_ld))
            printf("    error: %s\n", lacs_last_error());
        ok ? passed++ : failed++;
    }
    printf("bounds: forms <= %.0e, double vs long double <= %.0e (normwise, per (batch, head))\n",
           FORMS_BOUND, LONG_DOUBLE_BOUND);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/* lacs: the catalog of equivalent forms of the reference, and random problems
 * to compare them on. One table, used by the self-check (lacs-selfcheck) and by
 * the test suite (tests/test_forms.c, tests/test_long_double.c).
 */
#ifndef LACS_FORMS_H
#define LACS_FORMS_H

#include <stddef.h>
#include <stdint.h>

#include "lacs/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*lacs_op_fn)(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht);
typedef int (*lacs_op_fn_ld)(const lacs_dims *d, const lacs_inputs *in, long double *o,
                             long double *ht);

/* Which inputs a problem carries, and how they are drawn (lacs_problem_make). */
enum {
    LACS_PROBLEM_BETA = 1u << 0,       /* beta uniform in [0, 1) */
    LACS_PROBLEM_G = 1u << 1,          /* g uniform in [-0.5, 0] */
    LACS_PROBLEM_GK = 1u << 2,         /* gk uniform in [-0.5, 0] */
    LACS_PROBLEM_G_GAMMA = 1u << 3,    /* g_gamma = log(1 - 2^(-5 - hv)), RetNet's */
    LACS_PROBLEM_H0 = 1u << 4,         /* h0 normal, times 0.5 */
    LACS_PROBLEM_UNIT_K = 1u << 5,     /* k L2-normalised per token (delta family) */
    LACS_PROBLEM_STATELESS = 1u << 6,  /* the attention forms: no h0, no ht */
    LACS_PROBLEM_W = 1u << 7,          /* PaTH's w, L2-normalised per token */
    LACS_PROBLEM_BETA_TO_2 = 1u << 8,  /* beta uniform in [0, 2) instead (PaTH's range) */
    LACS_PROBLEM_LAMBDA = 1u << 9,     /* MesaNet's lambda uniform in [0.25, 1.25) */
    LACS_PROBLEM_H0_KK = 1u << 10      /* MesaNet's h0_kk = A A^T / (2K), A normal: PSD */
};

/* An op in its primary form, one other form it must equal (H-labels in
 * `labels`), and the primary form compiled in long double. */
typedef struct {
    const char *op;        /* the primary op's name, e.g. "delta_rule" */
    const char *secondary; /* the other form, e.g. "UT form, chunk 16" */
    const char *labels;    /* formula labels, e.g. "H6 = H7" */
    unsigned inputs;       /* LACS_PROBLEM_* */
    lacs_op_fn primary;
    lacs_op_fn other;
    lacs_op_fn_ld primary_ld;
    int64_t max_T;         /* 0, or the longest T worth the cost (O(T^3) forms) */
} lacs_form_pair;

const lacs_form_pair *lacs_form_pairs(size_t *count);

/* A random problem that owns its arrays: q, k [B, T, H, K], v [B, T, HV, V] and
 * whichever of beta, g, gk, g_gamma, h0, w, lambda, h0_kk `inputs` asks for;
 * scale = K^-1/2. */
typedef struct {
    lacs_dims dims;
    lacs_inputs in;
    double *owned[11];
} lacs_problem;

int lacs_problem_make(lacs_problem *p, const lacs_dims *dims, unsigned inputs, uint64_t seed);
void lacs_problem_free(lacs_problem *p);
/* Element counts of o [B, T, HV, V] and of the state [N, HV, K, V]. */
int64_t lacs_problem_o_size(const lacs_problem *p);
int64_t lacs_problem_state_size(const lacs_problem *p);

/* Runs two ops on p and returns the worst normwise error (lacs/compare.h) of
 * the second against the first over o and, if stateful, the final state.
 * Returns NaN (with lacs_last_error() set) if either op fails. */
double lacs_forms_error(lacs_op_fn first, lacs_op_fn second, const lacs_problem *p, int stateful);
/* The same for the long double form against the double one: how far the
 * double reference is from its long double self. */
double lacs_forms_error_ld(lacs_op_fn op, lacs_op_fn_ld op_ld, const lacs_problem *p, int stateful);

#ifdef __cplusplus
}
#endif

#endif

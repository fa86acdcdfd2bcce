/* builtin:cpu's exp (optimized/cpu/simd_math.h) where its results leave the
 * normal range, through the attention forms' exp row (attention_rows.h,
 * attention_kernels.h), for every vector instruction set this CPU has (the
 * others are skipped with a message):
 *   cpu_exp/subnormal_results_are_placed_exactly
 *       every fp32 x in [-104.5, -86] (2.4 million inputs, where exp(x)
 *       crosses 2^-126 and then the smallest subnormal): each result within
 *       0.76 units of 2^-149 of exp(x) in long double (0.7503 measured), 0
 *       from x = -103.98 (exp(x) below half the smallest subnormal) down, and
 *       exactly the nearest multiple of 2^-149 wherever exp(x) is not within
 *       its polynomial's error (2^-21 relative) of a midpoint (1.85 million
 *       inputs): v_exp places these results with integer arithmetic, not by
 *       a multiplication that underflows (which takes a microcode assist on
 *       Intel cores), and must round them as that multiplication would;
 *   cpu_exp/truncated_subnormals_are_rejected
 *       the same check on the results with their subnormals rounded toward
 *       zero instead fails (on about half the inputs);
 *   cpu_exp/normalised_weights_within_their_bound
 *       a softmax's row (normalised, max 0) computes its weights by
 *       v_exp_base2 (base-2 reduction, x log2 e rounded once): every 61st
 *       fp32 x in [-87.3, 0] (18 million) within 2 units of (|x| + 1) 2^-24
 *       of exp(x) in long double (1.194 measured, avx512 and avx2);
 *   cpu_exp/weights_off_by_2_21_are_rejected
 *       the same check on those weights made 2^-21 too large fails (8.6);
 *   cpu_exp/normalised_rows_drop_weights_below_2_126
 *       a softmax's row (normalised) writes weights below 2^-126 as 0, the
 *       others within that bound, and keeps NaN; the EXP form (not
 *       normalised, v_exp) keeps every weight, subnormals included; each
 *       row's returned sum is the sum of what it wrote.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../optimized/cpu/attention_kernels.h"
#include "../optimized/cpu/cpu.h"

typedef struct {
    const char *isa;
    lacs_cpu_exp_row_fn exp_row;
} exp_kernel;

static const exp_kernel kernels[] = {{"avx2", lacs_cpu_attention_exp_row_avx2},
                                     {"avx512", lacs_cpu_attention_exp_row_avx512}};
enum { N_KERNELS = sizeof kernels / sizeof kernels[0] };

#define SUBNORMAL_BOUND_UNITS 0.76

static int runnable(const exp_kernel *kernel)
{
    if (lacs_cpu_isa_supported(kernel->isa))
        return 1;
    cr_log_info("cpu_exp: skipping %s: this CPU lacks its instructions (lacs_cpu_isa_supported)", kernel->isa);
    return 0;
}

static float from_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Every fp32 x in [lo, hi] (both negative), in order of magnitude; *count set. */
static float *negative_range(float lo, float hi, int64_t *count)
{
    uint32_t first, last;
    memcpy(&first, &hi, sizeof first);
    memcpy(&last, &lo, sizeof last);
    *count = (int64_t)last - first + 1;
    float *x = malloc((size_t)*count * sizeof *x);
    cr_assert_not_null(x);
    for (int64_t i = 0; i < *count; i++)
        x[i] = from_bits(first + (uint32_t)i);
    return x;
}

typedef struct {
    double max_units;         /* the largest error below 2^-126, in units of 2^-149 */
    int64_t placed, misplaced; /* results checked for exact placement; those not the nearest multiple */
    int64_t nonzero_below;    /* results not 0 where exp(x) < 2^-150 */
} subnormal_report;

static subnormal_report check_subnormals(int64_t n, const float *x, const float *y)
{
    subnormal_report r = {0.0, 0, 0, 0};
    for (int64_t i = 0; i < n; i++) {
        const long double exact = expl((long double)x[i]);
        if (exact >= 0x1p-126L)
            continue;
        if (exact < 0x1p-150L && y[i] != 0.0f)
            r.nonzero_below++;
        const long double units = exact / 0x1p-149L;
        const double error = fabs((double)((long double)y[i] / 0x1p-149L - units));
        r.max_units = error > r.max_units ? error : r.max_units;
        /* away from a midpoint by more than the polynomial's error (2^-21 of the result, 2^-22 measured):
         * the nearest multiple of 2^-149 is the only right answer */
        if (fabsl(units - floorl(units) - 0.5L) > units * 0x1p-21L) {
            r.placed++;
            if ((long double)y[i] != nearbyintl(units) * 0x1p-149L)
                r.misplaced++;
        }
    }
    return r;
}

typedef void (*exp_twin)(int64_t n, const float *x, float *y);
typedef void (*exp_check)(const exp_kernel *kernel, int64_t n, const float *x, const float *y);

/* x [n] through each runnable kernel's exp row (max 0; a softmax's, normalised, or the EXP form's), its
 * results then made by `twin` (NULL: as they are) and checked by `check`. */
static void through_each_kernel(int64_t n, const float *x, int normalised, exp_twin twin, exp_check check)
{
    float *y = malloc((size_t)n * sizeof *y);
    cr_assert_not_null(y);
    for (int k = 0; k < N_KERNELS; k++) {
        if (!runnable(&kernels[k]))
            continue;
        memcpy(y, x, (size_t)n * sizeof *y);
        kernels[k].exp_row(n, y, 0.0f, normalised);
        if (twin)
            twin(n, x, y);
        check(&kernels[k], n, x, y);
    }
    free(y);
}

/* Every fp32 x in [-104.5, -86] through each runnable kernel's EXP-form row. */
static void for_each_kernel(exp_twin twin, exp_check check)
{
    int64_t n;
    float *x = negative_range(-104.5f, -86.0f, &n);
    through_each_kernel(n, x, 0, twin, check);
    free(x);
}

static void expect_placed_exactly(const exp_kernel *kernel, int64_t n, const float *x, const float *y)
{
    const subnormal_report r = check_subnormals(n, x, y);
    cr_log_info("cpu_exp %s: %lld inputs, largest subnormal error %.4f units of 2^-149, %lld placed exactly of "
                "%lld checked",
                kernel->isa, (long long)n, r.max_units, (long long)(r.placed - r.misplaced), (long long)r.placed);
    cr_expect_leq(r.max_units, SUBNORMAL_BOUND_UNITS, "%s: a subnormal exp off by %.4f units of 2^-149",
                  kernel->isa, r.max_units);
    cr_expect_gt(r.placed, n / 2, "%s: only %lld results checked for placement", kernel->isa, (long long)r.placed);
    cr_expect_eq(r.misplaced, 0, "%s: %lld subnormal results not the nearest multiple of 2^-149", kernel->isa,
                 (long long)r.misplaced);
    cr_expect_eq(r.nonzero_below, 0, "%s: %lld results not 0 below half the smallest subnormal", kernel->isa,
                 (long long)r.nonzero_below);
}

Test(cpu_exp, subnormal_results_are_placed_exactly) { for_each_kernel(NULL, expect_placed_exactly); }

/* The wrong twin: subnormal results rounded toward zero (a truncating conversion of e_r 2^(n + 149)). */
static void truncate_subnormals(int64_t n, const float *x, float *y)
{
    for (int64_t i = 0; i < n; i++) {
        const long double exact = expl((long double)x[i]);
        if (exact < 0x1p-126L)
            y[i] = (float)(floorl(exact / 0x1p-149L) * 0x1p-149L);
    }
}

static void expect_misplaced(const exp_kernel *kernel, int64_t n, const float *x, const float *y)
{
    const subnormal_report r = check_subnormals(n, x, y);
    cr_log_info("cpu_exp %s: truncated: %lld of %lld misplaced", kernel->isa, (long long)r.misplaced,
                (long long)r.placed);
    cr_expect_gt(r.misplaced, r.placed / 4, "%s: truncation went unnoticed (%lld of %lld misplaced)", kernel->isa,
                 (long long)r.misplaced, (long long)r.placed);
}

Test(cpu_exp, truncated_subnormals_are_rejected) { for_each_kernel(truncate_subnormals, expect_misplaced); }

/* A softmax row's weight w = exp(x), x <= 0, from v_exp_base2 (simd_math.h): its error relative to exp(x), in
 * units of (|x| + 1) 2^-24 (t = x log2 e rounded once costs |x| 2^-24 and log2 e's own rounding half that; the
 * polynomial and its last step about 1.3 units of 2^-24). */
#define NORMALISED_BOUND 2.0

static double normalised_error(float x, float w)
{
    const long double exact = expl((long double)x);
    return (double)(fabsl((long double)w - exact) / exact / ((fabsl((long double)x) + 1.0L) * 0x1p-24L));
}

/* The largest normalised_error the checks below have seen. */
static double normalised_worst;

static void note_normalised_error(const exp_kernel *kernel, int64_t n, const float *x, const float *y)
{
    double kernel_worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double e = normalised_error(x[i], y[i]);
        kernel_worst = e > kernel_worst ? e : kernel_worst;
    }
    cr_log_info("cpu_exp %s: %lld normalised weights, largest error %.3f units of (|x| + 1) 2^-24", kernel->isa,
                (long long)n, kernel_worst);
    normalised_worst = kernel_worst > normalised_worst ? kernel_worst : normalised_worst;
}

/* Every 61st fp32 x in [-87.3, 0] (18 million, the normal weights) through each runnable kernel's normalised
 * row, the results then made by `twin` (NULL: as they are); returns the largest normalised_error of the
 * kernels. */
static double largest_normalised_error(exp_twin twin)
{
    const float lo = -87.3f;
    uint32_t last;
    memcpy(&last, &lo, sizeof last);
    const int64_t n = ((int64_t)last - 0x80000000u) / 61 + 1;
    float *x = malloc((size_t)n * sizeof *x);
    cr_assert_not_null(x);
    for (int64_t i = 0; i < n; i++)
        x[i] = from_bits(0x80000000u + (uint32_t)(i * 61));
    normalised_worst = 0.0;
    through_each_kernel(n, x, 1, twin, note_normalised_error);
    free(x);
    return normalised_worst;
}

Test(cpu_exp, normalised_weights_within_their_bound)
{
    const double worst = largest_normalised_error(NULL);
    cr_expect_leq(worst, NORMALISED_BOUND, "a softmax weight off by %.3f units of (|x| + 1) 2^-24", worst);
}

/* The wrong twin: every weight 2^-21 too large (eight units of 2^-24 where x is near 0). */
static void weights_too_large(int64_t n, const float *x, float *y)
{
    (void)x;
    for (int64_t i = 0; i < n; i++)
        y[i] *= 1.0f + 0x1p-21f;
}

Test(cpu_exp, weights_off_by_2_21_are_rejected)
{
    const double worst = largest_normalised_error(weights_too_large);
    cr_expect_gt(worst, NORMALISED_BOUND, "weights 2^-21 too large read %.3f units, within the bound", worst);
}

Test(cpu_exp, normalised_rows_drop_weights_below_2_126)
{
    /* logits around the threshold: exp(-87.3365) = 2^-126 */
    enum { N = 37 };
    float logits[N];
    for (int j = 0; j < N; j++)
        logits[j] = -80.0f - 0.5f * (float)j; /* -80 .. -98: both sides of the threshold */
    logits[5] = NAN;
    logits[6] = -INFINITY;
    logits[7] = 0.0f;
    for (int k = 0; k < N_KERNELS; k++) {
        if (!runnable(&kernels[k]))
            continue;
        float kept[N], dropped[N];
        memcpy(kept, logits, sizeof kept);
        memcpy(dropped, logits, sizeof dropped);
        const float sum_kept = kernels[k].exp_row(N, kept, 0.0f, 0);
        const float sum_dropped = kernels[k].exp_row(N, dropped, 0.0f, 1);
        int subnormals = 0;
        for (int j = 0; j < N; j++) {
            if (j == 5) {
                cr_expect(isnan(kept[j]) && isnan(dropped[j]), "%s: NaN not kept", kernels[k].isa);
                continue;
            }
            if (kept[j] > 0.0f && kept[j] < 0x1p-126f)
                subnormals++;
            /* the normalised row's weights come from v_exp_base2 (bits of their own): 0 below 2^-126, else
             * within NORMALISED_BOUND of exp */
            const long double exact = expl((long double)logits[j]);
            if (dropped[j] == 0.0f)
                cr_expect(exact < 0x1p-126L * (1.0L + 0x1p-16L), "%s: logit %g: dropped, exp %La", kernels[k].isa,
                          (double)logits[j], exact);
            else
                cr_expect(dropped[j] >= 0x1p-126f && normalised_error(logits[j], dropped[j]) <= NORMALISED_BOUND,
                          "%s: logit %g: normalised %a, exp %La", kernels[k].isa, (double)logits[j],
                          (double)dropped[j], exact);
        }
        cr_expect_geq(subnormals, 10, "%s: the EXP form kept only %d subnormal weights", kernels[k].isa,
                      subnormals);
        cr_expect(isnan(sum_kept) && isnan(sum_dropped), "%s: a NaN weight left the sums finite", kernels[k].isa);
        /* without the NaN: each sum is the sum of what its row wrote */
        float row_kept[N], row_dropped[N];
        for (int j = 0; j < N; j++)
            row_kept[j] = row_dropped[j] = j == 5 ? -90.0f : logits[j];
        const float s_kept = kernels[k].exp_row(N, row_kept, 0.0f, 0);
        const float s_dropped = kernels[k].exp_row(N, row_dropped, 0.0f, 1);
        double t_kept = 0.0, t_dropped = 0.0;
        for (int j = 0; j < N; j++) {
            t_kept += row_kept[j];
            t_dropped += row_dropped[j];
        }
        cr_expect_float_eq(s_kept, (float)t_kept, 1e-6f, "%s", kernels[k].isa);
        cr_expect_float_eq(s_dropped, (float)t_dropped, 1e-6f, "%s", kernels[k].isa);
    }
}

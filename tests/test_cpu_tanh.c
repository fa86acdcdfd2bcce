/* builtin:cpu's norm family (optimized/cpu/norms*.c, optimized/cpu/README.md): its tanh
 * and sech^2, the functions under DyT, softcap and their VJPs, and the ops'
 * edge cases and determinism, for every instruction set this CPU has (the
 * others are skipped with a message):
 *   cpu_tanh/within_bound       the error in ulp against tanh in double on
 *                               every bf16 value, every 256th fp32 bit
 *                               pattern (2^24 inputs, both signs, NaN and
 *                               infinities among them) and every fp32 value
 *                               of the delicate ranges, both signs:
 *                               [2^-13, 2^-11) where tanh(x) stops being x
 *                               (the vector kernels leave x for the exp form
 *                               at 2^-12), [0.5, 1) (the scalar kernels'
 *                               split at 0.625; the vector kernels' worst
 *                               cancellation, n = 1), [8, 10) where tanh
 *                               rounds to 1 (from 9.01);
 *   cpu_tanh/exact_values       +-0 (sign kept), +-inf to +-1, NaN to NaN,
 *                               and tanh(x) = x bit for bit for |x| < 2^-12
 *                               (subnormals included);
 *   cpu_tanh/worse_tanh_is_rejected  1 - 2/(exp(2x) + 1) in fp32, which loses
 *                               relative accuracy near 0, fails the same check;
 *   cpu_tanh/sech2_within_bound and sech2_as_one_minus_tanh2_is_rejected:
 *                               sech^2 = 4e/(1 + e)^2 against double on every
 *                               bf16 value and every 256th fp32 pattern;
 *                               1 - tanh^2 (0 once tanh rounds to 1) fails;
 *   cpu_tanh/softcap_within_bound and softcap_coarser_is_rejected:
 *                               softcap and its dx where the vector kernels
 *                               take their polynomials (|x / cap| < 1),
 *                               against double (below);
 *   cpu_norms_ieee              every op at the IEEE specials against
 *                               builtin:reference (below);
 *   cpu_norms_threads           every output bit for bit the same for 1, 2
 *                               and 5 threads (below);
 *   cpu_norms_stream            outputs written with non-temporal stores
 *                               (16 MiB and more) the same as written
 *                               with ordinary ones (below).
 * The bounds are the ones stated in the kernels' files, the largest errors
 * over all 2^32 fp32 inputs (LACS_TANH_EXHAUSTIVE=1 below, or any scan):
 * tanh 2.61 ulp for the vector kernels (2.6059 measured), 0.52 for the
 * scalar one (0.5145: double arithmetic rounded once); sech^2 1.01 ulp for
 * the vector kernels (1.0095), 0.51 for the scalar one (0.5: libm's exp), in units
 * of 2^-149 where the result is subnormal. Set LACS_TANH_EXHAUSTIVE=1 to
 * check tanh on all 2^32 inputs as well (a few minutes).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../optimized/cpu/cpu.h"
#include "../optimized/cpu/norms.h"
#include "support.h"

#define TANH_BOUND_VECTOR 2.61
#define TANH_BOUND_SCALAR 0.52
#define SECH2_BOUND_VECTOR 1.01
#define SECH2_BOUND_SCALAR 0.51

typedef void (*float_function)(const float *x, float *y, int64_t n);

/* ---- the instruction sets ---- */

static const lacs_cpu_norm_kernels *const tables[] = {&lacs_cpu_norm_kernels_scalar, &lacs_cpu_norm_kernels_avx2,
                                                      &lacs_cpu_norm_kernels_avx512};
enum { N_TABLES = sizeof tables / sizeof tables[0] };

/* Whether this CPU runs `table`'s kernels; says why not when it does not. */
static int runnable(const lacs_cpu_norm_kernels *table)
{
    if (lacs_cpu_isa_supported(table->isa))
        return 1;
    cr_log_info("cpu_tanh: skipping %s: this CPU lacks its instructions (lacs_cpu_isa_supported)", table->isa);
    return 0;
}

static double tanh_bound(const lacs_cpu_norm_kernels *table)
{
    return table == &lacs_cpu_norm_kernels_scalar ? TANH_BOUND_SCALAR : TANH_BOUND_VECTOR;
}

static double sech2_bound(const lacs_cpu_norm_kernels *table)
{
    return table == &lacs_cpu_norm_kernels_scalar ? SECH2_BOUND_SCALAR : SECH2_BOUND_VECTOR;
}

/* ---- the error in ulp ---- */

static float from_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint32_t to_bits(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

/* The spacing of fp32 values at the exact result y: 2^(e - 23) for y in
 * [2^e, 2^(e+1)), 2^-149 in the subnormals (and at 0). */
static double ulp_at(double y)
{
    y = fabs(y);
    if (y < 0x1p-126)
        return 0x1p-149;
    int e;
    frexp(y, &e); /* y in [2^(e-1), 2^e) */
    return ldexp(1.0, e - 24);
}

/* |got - exact| in ulps of exact; a NaN where the other is not, or a
 * different infinity, is infinitely wrong. */
static double ulp_error(float got, double exact)
{
    if (isnan(exact) || isnan(got))
        return isnan(exact) && isnan(got) ? 0 : INFINITY;
    if (isinf(exact) || isinf(got))
        return (double)got == exact ? 0 : INFINITY;
    return fabs((double)got - exact) / ulp_at(exact);
}

static double exact_tanh(double x) { return tanh(x); }

/* sech^2 in double: 4e / (1 + e)^2, e = exp(-2|x|), is within a few double
 * ulps of the true value everywhere (SPEC.md 4.18), far below fp32's. */
static double exact_sech2(double x)
{
    const double e = exp(-2 * fabs(x));
    return 4 * e / ((1 + e) * (1 + e));
}

typedef struct {
    double worst;  /* the largest error in ulp */
    float worst_x; /* where */
} sweep_result;

enum { CHUNK = 4096, MAX_FUNCTIONS = N_TABLES + 1 };

/* Every function of `functions` on the inputs in[0 .. n), against exact():
 * the worst error of each into results. */
static void check_chunk(const float_function *functions, int n_functions, double (*exact)(double), const float *in,
                        int64_t n, sweep_result *results)
{
    double expected[CHUNK];
    float got[CHUNK];
    for (int64_t i = 0; i < n; i++)
        expected[i] = exact((double)in[i]);
    for (int f = 0; f < n_functions; f++) {
        functions[f](in, got, n);
        for (int64_t i = 0; i < n; i++) {
            const double error = ulp_error(got[i], expected[i]);
            if (!(error <= results[f].worst)) {
                results[f].worst = error;
                results[f].worst_x = in[i];
            }
        }
    }
}

/* The bit patterns first, first + stride, ... (count of them), and their
 * negatives when both_signs is set. */
static void sweep_bits(const float_function *functions, int n_functions, double (*exact)(double), uint32_t first,
                       uint64_t count, uint32_t stride, int both_signs, sweep_result *results)
{
    float in[CHUNK];
    int64_t n = 0;
    for (int sign = 0; sign <= both_signs; sign++)
        for (uint64_t k = 0; k < count; k++) {
            const uint32_t bits = (uint32_t)(first + k * stride) ^ (sign ? 0x80000000u : 0u);
            in[n++] = from_bits(bits);
            if (n == CHUNK) {
                check_chunk(functions, n_functions, exact, in, n, results);
                n = 0;
            }
        }
    if (n > 0)
        check_chunk(functions, n_functions, exact, in, n, results);
}

/* Every bf16 value (the upper 16 bits of an fp32). */
static void sweep_bf16(const float_function *functions, int n_functions, double (*exact)(double), sweep_result *results)
{
    sweep_bits(functions, n_functions, exact, 0, 65536, 65536, 0, results);
}

/* The inputs of cpu_tanh/within_bound (the file's comment). */
static void sweep_tanh_inputs(const float_function *functions, int n_functions, sweep_result *results)
{
    sweep_bf16(functions, n_functions, exact_tanh, results);
    sweep_bits(functions, n_functions, exact_tanh, 0, 1u << 24, 256, 0, results);
    /* [2^-13, 2^-11), [0.5, 1), [8, 10): every value, both signs */
    sweep_bits(functions, n_functions, exact_tanh, 0x39000000u, 0x3A000000u - 0x39000000u, 1, 1, results);
    sweep_bits(functions, n_functions, exact_tanh, 0x3F000000u, 0x3F800000u - 0x3F000000u, 1, 1, results);
    sweep_bits(functions, n_functions, exact_tanh, 0x41000000u, 0x41200000u - 0x41000000u, 1, 1, results);
}

/* The tables this CPU runs, their tanh (or sech^2) as functions. */
static int runnable_functions(int sech2, float_function *functions, const lacs_cpu_norm_kernels **which)
{
    int n = 0;
    for (int t = 0; t < N_TABLES; t++)
        if (runnable(tables[t])) {
            which[n] = tables[t];
            functions[n++] = sech2 ? tables[t]->sech2 : tables[t]->tanh;
        }
    return n;
}

/* ---- a deliberately worse tanh ---- */

/* 1 - 2/(exp(2x) + 1) in fp32: right to an ulp of 1 everywhere, so its
 * relative error near 0 is about 2^-24 / |tanh x|: thousands of ulps at
 * x = 2^-12. */
static void worse_tanh(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = 1.0f - 2.0f / (expf(2.0f * x[i]) + 1.0f);
}

/* 1 - tanh^2 from the best tanh this CPU runs: 0 as soon as tanh rounds to
 * 1 (|x| > 9.01) while sech^2 stays representable up to |x| ~ 52. */
static void sech2_as_one_minus_tanh2(const float *x, float *y, int64_t n)
{
    const lacs_cpu_norm_kernels *best = &lacs_cpu_norm_kernels_scalar;
    for (int t = 0; t < N_TABLES; t++)
        if (lacs_cpu_isa_supported(tables[t]->isa))
            best = tables[t];
    best->tanh(x, y, n);
    for (int64_t i = 0; i < n; i++)
        y[i] = 1.0f - y[i] * y[i];
}

/* ---- the tests ---- */

Test(cpu_tanh, within_bound, .timeout = 120)
{
    float_function functions[MAX_FUNCTIONS];
    const lacs_cpu_norm_kernels *which[MAX_FUNCTIONS];
    const int n = runnable_functions(0, functions, which);
    sweep_result results[MAX_FUNCTIONS] = {{0}};
    sweep_tanh_inputs(functions, n, results);
    const char *exhaustive = getenv("LACS_TANH_EXHAUSTIVE");
    if (exhaustive && strcmp(exhaustive, "1") == 0)
        sweep_bits(functions, n, exact_tanh, 0, 1ull << 32, 1, 0, results);
    for (int f = 0; f < n; f++) {
        cr_log_info("cpu_tanh: %s tanh: worst error %.4f ulp at x = %a (bound %.2f)%s", which[f]->isa, results[f].worst,
                    (double)results[f].worst_x, tanh_bound(which[f]),
                    exhaustive && strcmp(exhaustive, "1") == 0 ? ", all 2^32 inputs" : "");
        cr_expect(results[f].worst <= tanh_bound(which[f]), "%s tanh: %.4f ulp at x = %a exceeds %.2f", which[f]->isa,
                  results[f].worst, (double)results[f].worst_x, tanh_bound(which[f]));
    }
}

Test(cpu_tanh, exact_values)
{
    const float specials[] = {
        0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, from_bits(0x7f800001u), from_bits(0xffc00123u)};
    enum { N_SPECIALS = sizeof specials / sizeof specials[0] };
    for (int t = 0; t < N_TABLES; t++) {
        if (!runnable(tables[t]))
            continue;
        float y[N_SPECIALS];
        tables[t]->tanh(specials, y, N_SPECIALS);
        cr_expect(to_bits(y[0]) == to_bits(0.0f), "%s: tanh(+0) = %a", tables[t]->isa, (double)y[0]);
        cr_expect(to_bits(y[1]) == to_bits(-0.0f), "%s: tanh(-0) = %a", tables[t]->isa, (double)y[1]);
        cr_expect(y[2] == 1.0f && y[3] == -1.0f, "%s: tanh(+-inf) = %a, %a", tables[t]->isa, (double)y[2],
                  (double)y[3]);
        for (int i = 4; i < N_SPECIALS; i++)
            cr_expect(isnan(y[i]), "%s: tanh(NaN %08x) = %a", tables[t]->isa, to_bits(specials[i]), (double)y[i]);
        /* tanh(x) = x for |x| < 2^-12: every subnormal and every 256th
         * normal bit pattern below 2^-12, both signs */
        int64_t mismatches = 0;
        float first_bad = 0;
        float in[CHUNK], out[CHUNK];
        for (int sign = 0; sign <= 1; sign++) {
            uint32_t bits = 1;
            while (bits < 0x39800000u) {
                int64_t n = 0;
                for (; bits < 0x39800000u && n < CHUNK; bits += bits < 0x00800000u ? 1 : 256)
                    in[n++] = from_bits(bits ^ (sign ? 0x80000000u : 0u));
                tables[t]->tanh(in, out, n);
                for (int64_t i = 0; i < n; i++)
                    if (to_bits(out[i]) != to_bits(in[i]) && mismatches++ == 0)
                        first_bad = in[i];
            }
        }
        cr_expect(mismatches == 0, "%s: tanh(x) != x for %lld tiny x, first %a", tables[t]->isa, (long long)mismatches,
                  (double)first_bad);
    }
}

Test(cpu_tanh, worse_tanh_is_rejected, .timeout = 120)
{
    const float_function functions[1] = {worse_tanh};
    sweep_result result[1] = {{0}};
    sweep_tanh_inputs(functions, 1, result);
    cr_log_info("cpu_tanh: 1 - 2/(exp(2x) + 1): worst error %.4g ulp at x = %a", result[0].worst,
                (double)result[0].worst_x);
    cr_expect(result[0].worst > TANH_BOUND_VECTOR, "the worse tanh passes: %.4g ulp", result[0].worst);
}

Test(cpu_tanh, sech2_within_bound, .timeout = 60)
{
    float_function functions[MAX_FUNCTIONS];
    const lacs_cpu_norm_kernels *which[MAX_FUNCTIONS];
    const int n = runnable_functions(1, functions, which);
    sweep_result results[MAX_FUNCTIONS] = {{0}};
    sweep_bf16(functions, n, exact_sech2, results);
    sweep_bits(functions, n, exact_sech2, 0, 1u << 24, 256, 0, results);
    for (int f = 0; f < n; f++) {
        cr_log_info("cpu_tanh: %s sech^2: worst error %.4f ulp at x = %a (bound %.2f)", which[f]->isa, results[f].worst,
                    (double)results[f].worst_x, sech2_bound(which[f]));
        cr_expect(results[f].worst <= sech2_bound(which[f]), "%s sech^2: %.4f ulp at x = %a exceeds %.2f",
                  which[f]->isa, results[f].worst, (double)results[f].worst_x, sech2_bound(which[f]));
    }
}

Test(cpu_tanh, sech2_as_one_minus_tanh2_is_rejected)
{
    const float_function functions[1] = {sech2_as_one_minus_tanh2};
    sweep_result result[1] = {{0}};
    sweep_bf16(functions, 1, exact_sech2, result);
    cr_log_info("cpu_tanh: 1 - tanh^2: worst error %.4g ulp at x = %a", result[0].worst, (double)result[0].worst_x);
    cr_expect(result[0].worst > SECH2_BOUND_VECTOR, "1 - tanh^2 passes: %.4g ulp", result[0].worst);
}

/* ---- cpu_tanh/softcap_within_bound: softcap over its common range ----
 *
 * The vector kernels take whole vectors wholly below |x / cap| = 1 by the
 * binary32 polynomials of norms.h (norms_vector.h, softcap_below_one and
 * sech2_below_one): cap tanh(x / cap), and dx = dy sech^2(x / cap) with
 * dy = 1, against double, on every 64th fp32 bit pattern of |x| < cap, both
 * signs, for cap = 30 and 1, under every instruction set (the sweep runs in
 * order, so a vector's lanes are neighbours; the last vectors below the cap
 * may take the general path). The bounds are the largest errors measured
 * over every such x for six caps (optimized/cpu/README.md 8.2.6): the
 * forward 1.34 ulp, dx 4.39 (sech^2 is 3.85 ulp from the rounded u; the
 * rounding of u itself adds the rest). Two coarser kernels fail them
 * (softcap_coarser_is_rejected). */
#define SOFTCAP_BOUND 1.35
#define SOFTCAP_DX_BOUND 4.4

typedef void (*softcap_function)(const lacs_cpu_norm_kernels *k, int vjp, const float *x, float *out, int64_t n,
                                 double cap);

/* softcap (vjp = 0) or its dx with dy = 1 (vjp = 1) by a table's kernel. */
static void softcap_by_table(const lacs_cpu_norm_kernels *k, int vjp, const float *x, float *out, int64_t n, double cap)
{
    float ones[CHUNK];
    for (int64_t i = 0; i < n; i++)
        ones[i] = 1.0f;
    lacs_cpu_norm_block b = {.x = x, .dy = vjp ? ones : NULL, .rows = 1, .dim = n, .param = cap, .out = out};
    if (vjp)
        k->softcap_vjp(&b);
    else
        k->softcap(&b);
}

/* Two plausible binary32 kernels a little too coarse: the forward one degree
 * lower, refitted the same way (relative error of the fit 5.5e-8, 2^-24.1),
 * and dx with u formed as x times the rounded 1/cap (one more rounding where
 * sech^2 is sensitive to it) instead of x / cap. */
static void softcap_coarser(const lacs_cpu_norm_kernels *k, int vjp, const float *x, float *out, int64_t n, double cap)
{
    static const float p5[6] = {-0.3333298677943427f,   0.13326408874428114f,    -0.053498707589084378f,
                                0.020359759264290032f, -0.0062593392001936837f, 0.0010582645928321269f};
    (void)k;
    const float c = (float)cap, inverse = 1.0f / c;
    for (int64_t i = 0; i < n; i++) {
        if (vjp) {
            const float u = x[i] * inverse, z = u * u;
            float q = (float)lacs_sech2_below_one_poly[7];
            for (int j = 6; j >= 0; j--)
                q = fmaf(q, z, (float)lacs_sech2_below_one_poly[j]);
            out[i] = fmaf(-z, q, 1.0f);
        } else {
            const float u = x[i] / c, z = u * u;
            float p = p5[5];
            for (int j = 4; j >= 0; j--)
                p = fmaf(p, z, p5[j]);
            out[i] = fmaf(x[i] * z, p, x[i]);
        }
    }
}

/* The worst error of f over the sweep above, for one cap. */
static sweep_result softcap_sweep(softcap_function f, const lacs_cpu_norm_kernels *k, int vjp, double cap)
{
    sweep_result result = {0, 0};
    float in[CHUNK], got[CHUNK];
    const float c = (float)cap;
    for (int sign = 0; sign <= 1; sign++) {
        uint32_t bits = 0;
        while (from_bits(bits) < c) {
            int64_t n = 0;
            for (; n < CHUNK && from_bits(bits) < c; bits += 64)
                in[n++] = sign ? -from_bits(bits) : from_bits(bits);
            f(k, vjp, in, got, n, cap);
            for (int64_t i = 0; i < n; i++) {
                const double u = (double)in[i] / (double)c;
                const double exact = vjp ? exact_sech2(u) : (double)c * tanh(u);
                const double error = ulp_error(got[i], exact);
                if (!(error <= result.worst)) {
                    result.worst = error;
                    result.worst_x = in[i];
                }
            }
        }
    }
    return result;
}

Test(cpu_tanh, softcap_within_bound, .timeout = 120)
{
    static const double caps[] = {30, 1};
    for (int t = 0; t < N_TABLES; t++) {
        if (!runnable(tables[t]))
            continue;
        for (int vjp = 0; vjp <= 1; vjp++)
            for (int c = 0; c < 2; c++) {
                const sweep_result r = softcap_sweep(softcap_by_table, tables[t], vjp, caps[c]);
                const double bound = vjp ? SOFTCAP_DX_BOUND : SOFTCAP_BOUND;
                cr_log_info("cpu_tanh: %s softcap%s, cap %g: worst error %.4f ulp at x = %a (bound %.2f)",
                            tables[t]->isa, vjp ? "_vjp dx" : "", caps[c], r.worst, (double)r.worst_x, bound);
                cr_expect(r.worst <= bound, "%s softcap%s, cap %g: %.4f ulp at x = %a exceeds %.2f", tables[t]->isa,
                          vjp ? "_vjp dx" : "", caps[c], r.worst, (double)r.worst_x, bound);
            }
    }
}

Test(cpu_tanh, softcap_coarser_is_rejected, .timeout = 60)
{
    for (int vjp = 0; vjp <= 1; vjp++) {
        const sweep_result r = softcap_sweep(softcap_coarser, NULL, vjp, 30);
        cr_log_info("cpu_tanh: a coarser softcap%s: worst error %.4g ulp at x = %a",
                    vjp ? "_vjp dx" : "", r.worst, (double)r.worst_x);
        cr_expect(r.worst > (vjp ? SOFTCAP_DX_BOUND : SOFTCAP_BOUND), "the coarser softcap%s passes: %.4g ulp",
                  vjp ? "_vjp dx" : "", r.worst);
    }
}

/* ---- cpu_norms_ieee: the ops' IEEE semantics against the reference ----
 *
 * Every norm op of builtin:cpu on rows that each hold one special value
 * (+-0, subnormals, the smallest normal, tiny, ordinary, saturating, huge,
 * +-inf, NaN; plus a zero row, a subnormal row and a row near overflow),
 * with and without weight and bias, at the edges of each parameter (alpha 0
 * and negative, C 0 and huge, cap tiny and beyond fp32, eps 0 and +inf; an
 * infinite dy where sech^2 underflows fp32 but not double: alpha = 100,
 * cap = 0.01 on x = 2),
 * in both tiers, under every instruction set this CPU has, against
 * builtin:reference: NaN where the reference is NaN, the same infinity, the
 * same signed zero (SPEC.md 4.14-4.18's tables), and finite values to a
 * relative 1e-5 (the tolerance model of SPEC.md 11 is checked by the
 * vectors; this checks the cases they do not reach). */

static const float ieee_values[] = {0.0f,  -0.0f, 0x1p-149f, -0x1p-149f, 0x1p-130f, -0x1.8p-127f, 0x1p-126f, 1e-30f,
                                    1e-7f, 2e-4f, 0.3f,      -0.7f,      1.0f,      -2.5f,        9.5f,      -20.0f,
                                    60.0f, 1e20f, -1e30f,    3.4e38f,    -3.4e38f,  INFINITY,     -INFINITY, NAN};
enum {
    N_IEEE_VALUES = sizeof ieee_values / sizeof ieee_values[0],
    IEEE_DIM = 3,
    IEEE_ROWS = N_IEEE_VALUES + 3,
    IEEE_N = IEEE_ROWS * IEEE_DIM
};

/* x: row i < N_IEEE_VALUES holds ieee_values[i] in column i % 3 beside
 * ordinary values; then a zero row (signed zeros), a subnormal row, a row
 * near overflow. dy: ordinary, but NaN in row 10 and -inf in row 12. */
static void ieee_inputs(float *x, float *dy)
{
    const float ordinary[IEEE_DIM] = {0.5f, -1.25f, 2.0f}, gradient[IEEE_DIM] = {0.75f, -1.5f, 2.0f};
    for (int r = 0; r < IEEE_ROWS; r++)
        for (int c = 0; c < IEEE_DIM; c++) {
            x[r * IEEE_DIM + c] = r < N_IEEE_VALUES && c == r % IEEE_DIM ? ieee_values[r] : ordinary[c];
            dy[r * IEEE_DIM + c] = gradient[c] * (float)(1 + r % 5);
        }
    const float zero_row[IEEE_DIM] = {0.0f, -0.0f, 0.0f}, subnormal_row[IEEE_DIM] = {0x1p-149f, -0x1p-148f, 0.0f},
                huge_row[IEEE_DIM] = {3e38f, -3e38f, 1e38f};
    memcpy(x + N_IEEE_VALUES * IEEE_DIM, zero_row, sizeof zero_row);
    memcpy(x + (N_IEEE_VALUES + 1) * IEEE_DIM, subnormal_row, sizeof subnormal_row);
    memcpy(x + (N_IEEE_VALUES + 2) * IEEE_DIM, huge_row, sizeof huge_row);
    dy[10 * IEEE_DIM + 1] = NAN;
    dy[12 * IEEE_DIM + 2] = -INFINITY;
}

/* Whether got may stand for the reference's value want: the same NaN,
 * infinity or (with zero_sign) signed zero; else within 1e-5 relative, or
 * 1e-6 of the largest finite |value| of its block (`scale`: the row of a
 * [rows, dim] output, the whole of a sum), which is all an element that
 * cancels (dx of the dominant entry of a row) can be held to. The sign of a
 * zero is a property of the element-wise outputs (SPEC.md 4.15-4.17's
 * tables); a zero that a sum or a projection cancels to has the sign of the
 * rounding errors, which zero_sign leaves out. */
static int ieee_agrees(float got, float want, double scale, int zero_sign)
{
    if (isnan(want) || isnan(got))
        return isnan(want) && isnan(got);
    if (isinf(want) || isinf(got))
        return to_bits(got) == to_bits(want);
    if (want == 0 && got == 0)
        return !zero_sign || to_bits(got) == to_bits(want);
    return fabs((double)got - (double)want) <= 1e-5 * fabs((double)want) + 1e-6 * scale + 0x1p-146;
}

/* The largest finite |want[i]| over the block of element i. */
static double block_scale(const float *want, int64_t count, int ndim, int64_t i)
{
    const int64_t first = ndim == 2 ? i / IEEE_DIM * IEEE_DIM : 0, n = ndim == 2 ? IEEE_DIM : count;
    double scale = 0;
    for (int64_t k = first; k < first + n; k++)
        if (isfinite(want[k]))
            scale = fmax(scale, fabs((double)want[k]));
    return scale;
}

typedef struct {
    const char *op;
    const char *scalar_name; /* alpha or C (an input), else NULL */
    const char *param_name;  /* eps or cap (a parameter), else NULL */
    double values[6];
    int n_values;
    int has_dy, has_bias;
} ieee_op;

static const ieee_op ieee_ops[] = {
    {"rmsnorm", NULL, "eps", {0, 1e-6}, 2, 0, 0},
    {"rmsnorm_vjp", NULL, "eps", {0, 1e-6}, 2, 1, 0},
    {"dyt", "alpha", NULL, {1, -0.5, 0, 3e4, 1e-3, 100}, 6, 0, 1},
    {"dyt_vjp", "alpha", NULL, {1, -0.5, 0, 3e4, 1e-3, 100}, 6, 1, 0},
    {"dyisru", "C", NULL, {0, 1, 1e-30, 1e30}, 4, 0, 1},
    {"dyisru_vjp", "C", NULL, {0, 1, 1e-30, 1e30}, 4, 1, 0},
    {"softcap", NULL, "cap", {1, 30, 1e-30, 1e30, 1e300, 0.01}, 6, 0, 0},
    {"softcap_vjp", NULL, "cap", {1, 30, 1e-30, 1e30, 1e300, 0.01}, 6, 1, 0},
    {"l2norm", NULL, "eps", {0, 1e-12, INFINITY}, 3, 0, 0},
    {"l2norm_vjp", NULL, "eps", {0, 1e-12, INFINITY}, 3, 1, 0},
};
enum { N_IEEE_OPS = sizeof ieee_ops / sizeof ieee_ops[0] };

/* One run of builtin:cpu under `isa` and of the reference on the same
 * inputs; returns the number of disagreeing elements (the first logged). */
static int ieee_compare(const ieee_op *o, const char *isa, int bf16, double value, int weighted, int convention)
{
    float x[IEEE_N], dy[IEEE_N];
    ieee_inputs(x, dy);
    const float weight[IEEE_DIM] = {1.5f, -0.5f, 2.0f}, bias[IEEE_DIM] = {0.0f, -0.25f, 1.0f};
    const float scalar = (float)value;
    uint16_t x16[IEEE_N], dy16[IEEE_N], weight16[IEEE_DIM], bias16[IEEE_DIM], scalar16;
    for (int i = 0; i < IEEE_N; i++) {
        x16[i] = lacs_cpu_f32_to_bf16(x[i]);
        dy16[i] = lacs_cpu_f32_to_bf16(dy[i]);
    }
    for (int i = 0; i < IEEE_DIM; i++) {
        weight16[i] = lacs_cpu_f32_to_bf16(weight[i]);
        bias16[i] = lacs_cpu_f32_to_bf16(bias[i]);
    }
    scalar16 = lacs_cpu_f32_to_bf16(scalar);
    const lacs_dtype dtype = bf16 ? LACS_BF16 : LACS_F32;
    const int64_t shape[2] = {IEEE_ROWS, IEEE_DIM}, columns[1] = {IEEE_DIM}, one[1] = {1};
    lacs_tensor in[5];
    int n_in = 0;
    in[n_in++] = (lacs_tensor){"x", dtype, 2, shape, bf16 ? (void *)x16 : (void *)x};
    if (o->has_dy)
        in[n_in++] = (lacs_tensor){"dy", dtype, 2, shape, bf16 ? (void *)dy16 : (void *)dy};
    if (o->scalar_name)
        in[n_in++] = (lacs_tensor){o->scalar_name, dtype, 1, one, bf16 ? (void *)&scalar16 : (void *)&scalar};
    const int takes_weight = strncmp(o->op, "softcap", 7) != 0 && strncmp(o->op, "l2norm", 6) != 0;
    if (weighted && takes_weight)
        in[n_in++] = (lacs_tensor){"weight", dtype, 1, columns, bf16 ? (void *)weight16 : (void *)weight};
    if (weighted && o->has_bias)
        in[n_in++] = (lacs_tensor){"bias", dtype, 1, columns, bf16 ? (void *)bias16 : (void *)bias};
    lacs_param params[2];
    int n_params = 0;
    if (o->param_name)
        params[n_params++] = (lacs_param){o->param_name, value};
    if (!strncmp(o->op, "l2norm", 6))
        params[n_params++] = (lacs_param){"convention", convention};

    lacs_output_shape shapes[LACS_OPS_MAX_OUTPUTS];
    int n_out = 0;
    cr_assert_eq(lacs_reference_output_shapes(o->op, in, n_in, shapes, &n_out), LACS_OK);
    float got[LACS_OPS_MAX_OUTPUTS][IEEE_N], want[LACS_OPS_MAX_OUTPUTS][IEEE_N];
    lacs_tensor out_got[LACS_OPS_MAX_OUTPUTS], out_want[LACS_OPS_MAX_OUTPUTS];
    for (int s = 0; s < n_out; s++) {
        memset(got[s], 0x55, sizeof got[s]);
        out_got[s] = (lacs_tensor){shapes[s].name, LACS_F32, shapes[s].ndim, shapes[s].shape, got[s]};
        out_want[s] = (lacs_tensor){shapes[s].name, LACS_F32, shapes[s].ndim, shapes[s].shape, want[s]};
    }
    const int rc_want = lacs_reference_run(o->op, in, n_in, params, n_params, out_want, n_out, 0);
    setenv("LACS_ISA", isa, 1);
    const int rc_got = lacs_cpu_run(o->op, in, n_in, params, n_params, out_got, n_out);
    unsetenv("LACS_ISA");
    cr_expect_eq(rc_got, rc_want, "%s (%s, %s, %s = %g): returned %d, the reference %d", o->op, isa,
                 bf16 ? "bf16" : "fp32", o->scalar_name ? o->scalar_name : o->param_name, value, rc_got, rc_want);
    if (rc_want != LACS_OK)
        return rc_got != rc_want;
    int mismatches = 0;
    for (int s = 0; s < n_out; s++) {
        int64_t count = 1;
        for (int d = 0; d < shapes[s].ndim; d++)
            count *= shapes[s].shape[d];
        const int row_vjp = !strcmp(o->op, "rmsnorm_vjp") || !strcmp(o->op, "l2norm_vjp");
        const int zero_sign = shapes[s].ndim == 2 && !row_vjp;
        for (int64_t i = 0; i < count; i++)
            if (!ieee_agrees(got[s][i], want[s][i], block_scale(want[s], count, shapes[s].ndim, i), zero_sign) &&
                mismatches++ == 0)
                cr_log_error(
                    "%s %s (%s, %s = %g, weight %d, convention %d): %s[%lld] = %a, reference %a (x row %a %a %a)",
                    o->op, isa, bf16 ? "bf16" : "fp32", o->scalar_name ? o->scalar_name : o->param_name, value,
                    weighted, convention, shapes[s].name, (long long)i, (double)got[s][i], (double)want[s][i],
                    (double)x[(i / IEEE_DIM % IEEE_ROWS) * IEEE_DIM],
                    (double)x[(i / IEEE_DIM % IEEE_ROWS) * IEEE_DIM + 1],
                    (double)x[(i / IEEE_DIM % IEEE_ROWS) * IEEE_DIM + 2]);
    }
    return mismatches;
}

Test(cpu_norms_ieee, every_op_matches_the_reference_at_the_specials)
{
    int runs = 0, failed = 0;
    for (int t = 0; t < N_TABLES; t++) {
        if (!runnable(tables[t]))
            continue;
        for (int o = 0; o < N_IEEE_OPS; o++)
            for (int v = 0; v < ieee_ops[o].n_values; v++)
                for (int bf16 = 0; bf16 <= 1; bf16++)
                    for (int weighted = 0; weighted <= 1; weighted++)
                        for (int convention = 0; convention <= (strncmp(ieee_ops[o].op, "l2norm", 6) ? 0 : 1);
                             convention++) {
                            failed += ieee_compare(&ieee_ops[o], tables[t]->isa, bf16, ieee_ops[o].values[v], weighted,
                                                   convention) != 0;
                            runs++;
                        }
    }
    cr_log_info("cpu_norms_ieee: %d runs, %d with a disagreement", runs, failed);
    cr_expect_eq(failed, 0);
}

/* ---- cpu_norms_threads: the same bits for every LACS_THREADS ----
 *
 * norms.c splits the rows into blocks that depend on (rows, dim) only and
 * adds the blocks' sums in block order, so every output, the sums dweight,
 * dbias, dalpha, dC, dcap included, must be bit for bit the same whatever
 * the number of threads. 700 x 97 (odd width, 5 blocks), every op, both
 * tiers, every instruction set, threads 1, 2 and 5. */

enum { THREAD_ROWS = 700, THREAD_DIM = 97, THREAD_N = THREAD_ROWS * THREAD_DIM };

/* A deterministic value in [-2, 2) for element i of stream k. */
static float pattern(uint64_t i, uint64_t k)
{
    return (float)(2.0 * test_pattern(i, k));
}

/* Runs `op` under `isa` with LACS_THREADS = threads; the outputs into out
 * (each output's values one after the other). */
static void run_with_threads(const char *op, const char *isa, int bf16, int threads, float *out)
{
    static float x[THREAD_N], dy[THREAD_N], weight[THREAD_DIM], bias[THREAD_DIM];
    static uint16_t x16[THREAD_N], dy16[THREAD_N], weight16[THREAD_DIM], bias16[THREAD_DIM];
    for (int i = 0; i < THREAD_N; i++) {
        x[i] = pattern((uint64_t)i, 1) * 3.0f;
        dy[i] = pattern((uint64_t)i, 2);
        x16[i] = lacs_cpu_f32_to_bf16(x[i]);
        dy16[i] = lacs_cpu_f32_to_bf16(dy[i]);
    }
    for (int i = 0; i < THREAD_DIM; i++) {
        weight[i] = 1.0f + pattern((uint64_t)i, 3) / 4;
        bias[i] = pattern((uint64_t)i, 4) / 8;
        weight16[i] = lacs_cpu_f32_to_bf16(weight[i]);
        bias16[i] = lacs_cpu_f32_to_bf16(bias[i]);
    }
    const float alpha = 0.8f, C = 0.5f;
    const uint16_t alpha16 = lacs_cpu_f32_to_bf16(alpha), C16 = lacs_cpu_f32_to_bf16(C);
    const lacs_dtype dtype = bf16 ? LACS_BF16 : LACS_F32;
    const int64_t shape[2] = {THREAD_ROWS, THREAD_DIM}, columns[1] = {THREAD_DIM}, one[1] = {1};
    const int vjp = strstr(op, "_vjp") != NULL;
    const int affine = !strncmp(op, "dyt", 3) || !strncmp(op, "dyisru", 6),
              weighted = affine || !strncmp(op, "rmsnorm", 7);
    lacs_tensor in[5];
    int n_in = 0;
    in[n_in++] = (lacs_tensor){"x", dtype, 2, shape, bf16 ? (void *)x16 : (void *)x};
    if (vjp)
        in[n_in++] = (lacs_tensor){"dy", dtype, 2, shape, bf16 ? (void *)dy16 : (void *)dy};
    if (!strncmp(op, "dyt", 3))
        in[n_in++] = (lacs_tensor){"alpha", dtype, 1, one, bf16 ? (void *)&alpha16 : (void *)&alpha};
    if (!strncmp(op, "dyisru", 6))
        in[n_in++] = (lacs_tensor){"C", dtype, 1, one, bf16 ? (void *)&C16 : (void *)&C};
    if (weighted)
        in[n_in++] = (lacs_tensor){"weight", dtype, 1, columns, bf16 ? (void *)weight16 : (void *)weight};
    if (affine && !vjp)
        in[n_in++] = (lacs_tensor){"bias", dtype, 1, columns, bf16 ? (void *)bias16 : (void *)bias};
    const lacs_param params[1] = {
        {!strncmp(op, "softcap", 7) ? "cap" : "eps", !strncmp(op, "softcap", 7) ? 2.5 : 1e-6}};
    const int n_params = !strncmp(op, "softcap", 7) || !strncmp(op, "rmsnorm", 7) || !strncmp(op, "l2norm", 6);
    lacs_output_shape shapes[LACS_OPS_MAX_OUTPUTS];
    int n_out = 0;
    cr_assert_eq(lacs_reference_output_shapes(op, in, n_in, shapes, &n_out), LACS_OK);
    lacs_tensor outputs[LACS_OPS_MAX_OUTPUTS];
    float *cursor = out;
    for (int s = 0; s < n_out; s++) {
        int64_t count = 1;
        for (int d = 0; d < shapes[s].ndim; d++)
            count *= shapes[s].shape[d];
        outputs[s] = (lacs_tensor){shapes[s].name, LACS_F32, shapes[s].ndim, shapes[s].shape, cursor};
        cursor += count;
    }
    char threads_text[16];
    snprintf(threads_text, sizeof threads_text, "%d", threads);
    setenv("LACS_ISA", isa, 1);
    setenv("LACS_THREADS", threads_text, 1);
    const int rc = lacs_cpu_run(op, in, n_in, params, n_params, outputs, n_out);
    unsetenv("LACS_ISA");
    unsetenv("LACS_THREADS");
    cr_assert_eq(rc, LACS_OK, "%s under %s: %s", op, isa, lacs_last_error());
}

Test(cpu_norms_threads, every_output_is_the_same_for_every_thread_count)
{
    static const char *const ops[] = {"rmsnorm",    "rmsnorm_vjp", "dyt",         "dyt_vjp", "dyisru",
                                      "dyisru_vjp", "softcap",     "softcap_vjp", "l2norm",  "l2norm_vjp"};
    enum { CAPACITY = 2 * THREAD_N + 2 * THREAD_DIM + 1 };
    static float first[CAPACITY], other[CAPACITY];
    int compared = 0;
    for (int t = 0; t < N_TABLES; t++) {
        if (!runnable(tables[t]))
            continue;
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
            for (int bf16 = 0; bf16 <= 1; bf16++) {
                memset(first, 0, sizeof first);
                run_with_threads(ops[o], tables[t]->isa, bf16, 1, first);
                for (int threads = 2; threads <= 5; threads += 3) {
                    memset(other, 0, sizeof other);
                    run_with_threads(ops[o], tables[t]->isa, bf16, threads, other);
                    cr_expect(memcmp(first, other, sizeof first) == 0, "%s under %s (%s): %d threads differ from 1",
                              ops[o], tables[t]->isa, bf16 ? "bf16" : "fp32", threads);
                    compared++;
                }
            }
    }
    cr_log_info("cpu_norms_threads: %d comparisons", compared);
}

/* ---- cpu_norms_isa: the binary32 projection, the same bits everywhere ----
 *
 * rmsnorm_vjp's and l2norm_vjp's projection (norms.h's project) is binary32
 * with its FMAs written out, and dweight's sums binary32 within a block; the
 * forward ops' scale_binary32 too: every instruction set must give the same
 * y, dx and dweight bit for bit (700 x 97, both tiers; the scalar kernels
 * against each vector set). */
Test(cpu_norms_isa, the_binary32_forms_are_the_same_on_every_instruction_set)
{
    static const char *const ops[] = {"rmsnorm", "l2norm", "rmsnorm_vjp", "l2norm_vjp"};
    enum { CAPACITY = 2 * THREAD_N + 2 * THREAD_DIM + 1 };
    static float scalar[CAPACITY], other[CAPACITY];
    int compared = 0;
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            memset(scalar, 0, sizeof scalar);
            run_with_threads(ops[o], "scalar", bf16, 1, scalar);
            for (int t = 0; t < N_TABLES; t++) {
                if (!runnable(tables[t]) || !strcmp(tables[t]->isa, "scalar"))
                    continue;
                memset(other, 0, sizeof other);
                run_with_threads(ops[o], tables[t]->isa, bf16, 1, other);
                cr_expect(memcmp(scalar, other, sizeof scalar) == 0, "%s (%s): %s differs from scalar", ops[o],
                          bf16 ? "bf16" : "fp32", tables[t]->isa);
                compared++;
            }
        }
    cr_log_info("cpu_norms_isa: %d comparisons", compared);
    if (compared == 0)
        cr_skip_test("no vector instruction set to compare with on this machine");
}

/* ---- cpu_norms_stream: the non-temporal stores change no result ----
 *
 * An output of LACS_CPU_STREAM_BYTES or more is written with non-temporal
 * stores (forward ops and VJPs: through an aligned head, whole aligned
 * vectors, a tail; the VJPs of DyISRU and softcap in fp32 through a strip
 * buffer; DyT's VJP and the bf16 tier's VJPs on AMD's cores only, DyT's and
 * DyISRU's (norms.c says why: elsewhere their comparisons hold trivially,
 * and cpu_norms_dyt_table streams DyT's VJP through its kernel all the
 * same)). 1030 rows of 4099 (odd: every row
 * starts at another alignment),
 * 16.9 MB of fp32 output, every op, both tiers, every instruction set: y or
 * dx bit for bit the same as from calls on 103 rows at a time (1.7 MB: the
 * ordinary stores), whose values depend on nothing else (the inputs are
 * tame: every vector takes the same path); the sums (dweight, dbias, dalpha,
 * dC, dcap; summed in other blocks) within 1e-5 relative. */

enum { STREAM_ROWS = 1030, STREAM_DIM = 4099, STREAM_CHUNK_ROWS = 103 };

typedef struct {
    const float *x, *dy, *weight, *bias;
    const uint16_t *x16, *dy16, *weight16, *bias16;
} stream_inputs;

/* `op` under `isa` on `rows` rows from row `first`: the main output (y or dx)
 * into main, the other outputs (sums) into sums; returns how many sums. */
static int run_rows_of(const char *op, const char *isa, int bf16, const stream_inputs *s, int64_t first, int64_t rows,
                       float *main, float *sums)
{
    const float alpha = 0.8f, C = 0.5f;
    const uint16_t alpha16 = lacs_cpu_f32_to_bf16(alpha), C16 = lacs_cpu_f32_to_bf16(C);
    const lacs_dtype dtype = bf16 ? LACS_BF16 : LACS_F32;
    const int64_t shape[2] = {rows, STREAM_DIM}, columns[1] = {STREAM_DIM}, one[1] = {1};
    const int64_t offset = first * STREAM_DIM;
    const int vjp = strstr(op, "_vjp") != NULL;
    const int affine = !strncmp(op, "dyt", 3) || !strncmp(op, "dyisru", 6),
              weighted = affine || !strncmp(op, "rmsnorm", 7);
    lacs_tensor in[5];
    int n_in = 0;
    in[n_in++] = (lacs_tensor){"x", dtype, 2, shape, bf16 ? (void *)(s->x16 + offset) : (void *)(s->x + offset)};
    if (vjp)
        in[n_in++] =
            (lacs_tensor){"dy", dtype, 2, shape, bf16 ? (void *)(s->dy16 + offset) : (void *)(s->dy + offset)};
    if (!strncmp(op, "dyt", 3))
        in[n_in++] = (lacs_tensor){"alpha", dtype, 1, one, bf16 ? (void *)&alpha16 : (void *)&alpha};
    if (!strncmp(op, "dyisru", 6))
        in[n_in++] = (lacs_tensor){"C", dtype, 1, one, bf16 ? (void *)&C16 : (void *)&C};
    if (weighted)
        in[n_in++] = (lacs_tensor){"weight", dtype, 1, columns, bf16 ? (void *)s->weight16 : (void *)s->weight};
    if (affine && !vjp)
        in[n_in++] = (lacs_tensor){"bias", dtype, 1, columns, bf16 ? (void *)s->bias16 : (void *)s->bias};
    const lacs_param params[1] = {
        {!strncmp(op, "softcap", 7) ? "cap" : "eps", !strncmp(op, "softcap", 7) ? 2.5 : 1e-6}};
    const int n_params = !strncmp(op, "softcap", 7) || !strncmp(op, "rmsnorm", 7) || !strncmp(op, "l2norm", 6);
    lacs_output_shape shapes[LACS_OPS_MAX_OUTPUTS];
    int n_out = 0;
    cr_assert_eq(lacs_reference_output_shapes(op, in, n_in, shapes, &n_out), LACS_OK);
    lacs_tensor outputs[LACS_OPS_MAX_OUTPUTS];
    float *cursor = sums;
    for (int o = 0; o < n_out; o++) {
        int64_t count = 1;
        for (int d = 0; d < shapes[o].ndim; d++)
            count *= shapes[o].shape[d];
        outputs[o] = (lacs_tensor){shapes[o].name, LACS_F32, shapes[o].ndim, shapes[o].shape, o == 0 ? main : cursor};
        if (o > 0)
            cursor += count;
    }
    setenv("LACS_ISA", isa, 1);
    const int rc = lacs_cpu_run(op, in, n_in, params, n_params, outputs, n_out);
    unsetenv("LACS_ISA");
    cr_assert_eq(rc, LACS_OK, "%s under %s: %s", op, isa, lacs_last_error());
    return (int)(cursor - sums);
}

Test(cpu_norms_stream, non_temporal_stores_change_no_result, .timeout = 300)
{
    cr_assert_geq((double)STREAM_ROWS * STREAM_DIM * sizeof(float), (double)LACS_CPU_STREAM_BYTES);
    cr_assert_lt((double)STREAM_CHUNK_ROWS * STREAM_DIM * sizeof(float), (double)LACS_CPU_STREAM_BYTES);
    static const char *const ops[] = {"rmsnorm",    "rmsnorm_vjp", "dyt",         "dyt_vjp", "dyisru",
                                      "dyisru_vjp", "softcap",     "softcap_vjp", "l2norm",  "l2norm_vjp"};
    const int64_t n = (int64_t)STREAM_ROWS * STREAM_DIM;
    float *x = malloc((size_t)n * sizeof *x), *dy = malloc((size_t)n * sizeof *dy);
    uint16_t *x16 = malloc((size_t)n * sizeof *x16), *dy16 = malloc((size_t)n * sizeof *dy16);
    float *whole = malloc((size_t)n * sizeof *whole), *parts = malloc((size_t)n * sizeof *parts);
    static float weight[STREAM_DIM], bias[STREAM_DIM];
    static uint16_t weight16[STREAM_DIM], bias16[STREAM_DIM];
    static float whole_sums[2 * STREAM_DIM + 1], part_sums[2 * STREAM_DIM + 1], total_sums[2 * STREAM_DIM + 1];
    cr_assert(x && dy && x16 && dy16 && whole && parts);
    for (int64_t i = 0; i < n; i++) {
        x[i] = pattern((uint64_t)i, 5) * 3.0f;
        dy[i] = pattern((uint64_t)i, 6);
        x16[i] = lacs_cpu_f32_to_bf16(x[i]);
        dy16[i] = lacs_cpu_f32_to_bf16(dy[i]);
    }
    for (int i = 0; i < STREAM_DIM; i++) {
        weight[i] = 1.0f + pattern((uint64_t)i, 7) / 4;
        bias[i] = pattern((uint64_t)i, 8) / 8;
        weight16[i] = lacs_cpu_f32_to_bf16(weight[i]);
        bias16[i] = lacs_cpu_f32_to_bf16(bias[i]);
    }
    const stream_inputs s = {x, dy, weight, bias, x16, dy16, weight16, bias16};
    int compared = 0;
    for (int t = 0; t < N_TABLES; t++) {
        if (!runnable(tables[t]))
            continue;
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
            for (int bf16 = 0; bf16 <= 1; bf16++) {
                const int n_sums = run_rows_of(ops[o], tables[t]->isa, bf16, &s, 0, STREAM_ROWS, whole, whole_sums);
                memset(total_sums, 0, sizeof total_sums);
                for (int64_t first = 0; first < STREAM_ROWS; first += STREAM_CHUNK_ROWS) {
                    run_rows_of(ops[o], tables[t]->isa, bf16, &s, first, STREAM_CHUNK_ROWS,
                                parts + first * STREAM_DIM, part_sums);
                    for (int k = 0; k < n_sums; k++)
                        total_sums[k] += part_sums[k];
                }
                cr_expect(memcmp(whole, parts, (size_t)n * sizeof *whole) == 0,
                          "%s under %s (%s): the streamed output differs from the ordinary one", ops[o],
                          tables[t]->isa, bf16 ? "bf16" : "fp32");
                for (int k = 0; k < n_sums; k++)
                    cr_expect(fabsf(whole_sums[k] - total_sums[k]) <= 1e-5f * (fabsf(total_sums[k]) + 1.0f),
                              "%s under %s (%s): sum %d is %.9g, %.9g from the parts", ops[o], tables[t]->isa,
                              bf16 ? "bf16" : "fp32", k, whole_sums[k], total_sums[k]);
                compared++;
            }
    }
    cr_log_info("cpu_norms_stream: %d comparisons", compared);
    free(x);
    free(dy);
    free(x16);
    free(dy16);
    free(whole);
    free(parts);
}

/* ---- cpu_norms_dyt_table: DyT and its VJP by table, the bits of the arithmetic ----
 *
 * Where a kernel set has dyt_table (norms.h: avx2, avx512) or dyt_vjp_table
 * (avx2), its dyt and dyt_vjp in the bf16 tier with the tables must give
 * the bits they give without: y; dx, the dweight and dbias column sums and the dalpha
 * sum. x holds every bf16
 * pattern twice: the 2^16 in order (vectors of neighbours: the tiny lanes,
 * the boundary at |alpha x| = 9.5, the infinities and NaNs among them),
 * then each alone among ones, one every TABLE_SPREAD elements (its entry
 * read by the common loop wherever the arithmetic would take it there); dy
 * tame and random. Seven alphas, both signs, 2^-30 to 3e4; dx written with
 * ordinary stores and through the strip buffer with non-temporal ones (the
 * kernels' stream, which norms.c sets for this op on AMD's cores only,
 * tested everywhere), at three alignments (a cache line, 16 and 4 bytes past one), for a
 * dim that is a multiple of a line's floats and one that is not (the
 * forward: ordinary stores, and non-temporal ones at the three
 * alignments). A table with one entry an ulp off (sech^2 of x = 1, tanh
 * of x = -1 in the VJP's, tanh of x = 1 in dyt's) fails the same comparison. */
enum { TABLE_DIM = 4096, TABLE_SPREAD = 8, TABLE_ELEMENTS = 65536 * (1 + TABLE_SPREAD) };

typedef struct {
    float *dx;
    double sum_weight[TABLE_DIM + 3], sum_bias[TABLE_DIM + 3], sum_param;
} dyt_table_result;

static void dyt_vjp_by_kernel(const lacs_cpu_norm_kernels *k, const uint16_t *x, const uint16_t *dy, int64_t dim,
                              double alpha, const float *weight, const float *table, int stream,
                              dyt_table_result *r)
{
    memset(r->sum_weight, 0, sizeof r->sum_weight);
    memset(r->sum_bias, 0, sizeof r->sum_bias);
    lacs_cpu_norm_block b = {.x = x,
                             .dy = dy,
                             .bf16 = 1,
                             .rows = TABLE_ELEMENTS / dim,
                             .dim = dim,
                             .param = alpha,
                             .weight = weight,
                             .out = r->dx,
                             .sum_weight = r->sum_weight,
                             .sum_bias = r->sum_bias,
                             .stream = stream,
                             .dyt_table = table};
    k->dyt_vjp(&b);
    r->sum_param = b.sum_param;
}

/* dyt's y by k's kernel (bias 0.25 - c / dim), with its table or without (table NULL). */
static void dyt_by_kernel(const lacs_cpu_norm_kernels *k, const uint16_t *x, int64_t dim, double alpha,
                          const float *weight, const float *table, int stream, float *y)
{
    static float bias[TABLE_DIM + 3];
    for (int64_t c = 0; c < dim; c++)
        bias[c] = 0.25f - (float)c / (float)dim;
    lacs_cpu_norm_block b = {.x = x,
                             .bf16 = 1,
                             .rows = TABLE_ELEMENTS / dim,
                             .dim = dim,
                             .param = alpha,
                             .weight = weight,
                             .bias = bias,
                             .out = y,
                             .stream = stream,
                             .dyt_table = table};
    k->dyt(&b);
}

static int dyt_table_results_equal(const dyt_table_result *a, const dyt_table_result *b, int64_t dim)
{
    const int64_t n = TABLE_ELEMENTS / dim * dim;
    return memcmp(a->dx, b->dx, (size_t)n * sizeof(float)) == 0 &&
           memcmp(a->sum_weight, b->sum_weight, (size_t)dim * sizeof(double)) == 0 &&
           memcmp(a->sum_bias, b->sum_bias, (size_t)dim * sizeof(double)) == 0 &&
           memcmp(&a->sum_param, &b->sum_param, sizeof(double)) == 0;
}

Test(cpu_norms_dyt_table, the_tables_give_the_arithmetic_bits, .timeout = 120)
{
    static const double alphas[] = {0.5, -0.5, 1.0, 1e-3, 3e4, 0x1p-30, -7.25};
    static const int64_t dims[] = {TABLE_DIM, TABLE_DIM + 3};
    static const size_t offsets[] = {0, 16, 4}; /* bytes past a cache line */
    static uint16_t x[TABLE_ELEMENTS], dy[TABLE_ELEMENTS];
    static float weight[TABLE_DIM + 3];
    for (int32_t m = 0; m < 65536; m++) {
        x[m] = (uint16_t)m;
        for (int j = 0; j < TABLE_SPREAD; j++)
            x[65536 + m * TABLE_SPREAD + j] = j == 0 ? (uint16_t)m : lacs_cpu_f32_to_bf16(1.0f);
    }
    uint64_t state = 0x2545f4914f6cdd1dull;
    for (int64_t i = 0; i < TABLE_ELEMENTS; i++) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        dy[i] = lacs_cpu_f32_to_bf16((float)((double)(state >> 11) * 0x1p-52 - 1.0));
    }
    for (int64_t c = 0; c < TABLE_DIM + 3; c++)
        weight[c] = 0.5f + (float)c / (TABLE_DIM + 3);
    float *table = malloc(LACS_CPU_DYT_VJP_TABLE_FLOATS * sizeof *table); /* the larger of the two */
    char *base = aligned_alloc(64, (TABLE_ELEMENTS + 32) * sizeof(float) * 2);
    cr_assert(table && base, "out of memory");
    dyt_table_result computed = {.dx = (float *)(base + (TABLE_ELEMENTS + 32) * sizeof(float))}, looked_up;
    int compared = 0;
    for (int t = 0; t < N_TABLES; t++) {
        if (!runnable(tables[t]))
            continue;
        const lacs_cpu_norm_kernels *k = tables[t];
        if (!k->dyt_vjp_table && !k->dyt_table) {
            cr_log_info("cpu_norms_dyt_table: %s computes each element (no table)", k->isa);
            continue;
        }
        for (size_t a = 0; a < sizeof alphas / sizeof alphas[0]; a++) {
            if (k->dyt_table)
                k->dyt_table(alphas[a], table);
            for (size_t d = 0; d < (k->dyt_table ? sizeof dims / sizeof dims[0] : 0); d++) {
                const int64_t n = TABLE_ELEMENTS / dims[d] * dims[d];
                dyt_by_kernel(k, x, dims[d], alphas[a], weight, NULL, 0, computed.dx);
                for (int stream = 0; stream <= 1; stream++)
                    for (size_t o = 0; o < (stream ? sizeof offsets / sizeof offsets[0] : 1); o++) {
                        float *y = (float *)(base + offsets[o]);
                        dyt_by_kernel(k, x, dims[d], alphas[a], weight, table, stream, y);
                        cr_expect(memcmp(computed.dx, y, (size_t)n * sizeof *y) == 0,
                                  "%s dyt, alpha %g, dim %lld, %s stores %zu bytes past a line: the table's y "
                                  "differs from the arithmetic's",
                                  k->isa, alphas[a], (long long)dims[d], stream ? "non-temporal" : "ordinary",
                                  offsets[o]);
                        compared++;
                    }
            }
            if (k->dyt_vjp_table)
                k->dyt_vjp_table(alphas[a], table);
            for (size_t d = 0; d < (k->dyt_vjp_table ? sizeof dims / sizeof dims[0] : 0); d++) {
                dyt_vjp_by_kernel(k, x, dy, dims[d], alphas[a], weight, NULL, 0, &computed);
                for (int stream = 0; stream <= 1; stream++)
                    for (size_t o = 0; o < (stream ? sizeof offsets / sizeof offsets[0] : 1); o++) {
                        looked_up.dx = (float *)(base + offsets[o]);
                        dyt_vjp_by_kernel(k, x, dy, dims[d], alphas[a], weight, table, stream, &looked_up);
                        cr_expect(dyt_table_results_equal(&computed, &looked_up, dims[d]),
                                  "%s, alpha %g, dim %lld, %s stores %zu bytes past a line: the table's results "
                                  "differ from the arithmetic's",
                                  k->isa, alphas[a], (long long)dims[d], stream ? "non-temporal" : "ordinary",
                                  offsets[o]);
                        compared++;
                    }
            }
        }
        const uint16_t one = lacs_cpu_f32_to_bf16(1.0f);
        uint32_t bits;
        /* the wrong tables: sech^2 of x = 1, then tanh of x = -1 (the table's other half, norms.h), one ulp up */
        for (int wrong = 0; wrong < (k->dyt_vjp_table ? 2 : 0); wrong++) {
            k->dyt_vjp_table(0.5, table);
            const size_t entry = wrong == 0 ? 2 * (size_t)one + 1 : 2 * (size_t)(one | 0x8000); /* sech^2 beside tanh */
            memcpy(&bits, &table[entry], sizeof bits);
            bits++;
            memcpy(&table[entry], &bits, sizeof bits);
            dyt_vjp_by_kernel(k, x, dy, TABLE_DIM, 0.5, weight, NULL, 0, &computed);
            looked_up.dx = (float *)base;
            dyt_vjp_by_kernel(k, x, dy, TABLE_DIM, 0.5, weight, table, 1, &looked_up);
            cr_expect(!dyt_table_results_equal(&computed, &looked_up, TABLE_DIM),
                      "%s: a table one ulp off at x = %s gives the arithmetic's bits", k->isa, wrong ? "-1" : "1");
        }
        if (k->dyt_table) { /* and dyt's: tanh of x = 1 one ulp up */
            k->dyt_table(0.5, table);
            memcpy(&bits, &table[one], sizeof bits);
            bits++;
            memcpy(&table[one], &bits, sizeof bits);
            dyt_by_kernel(k, x, TABLE_DIM, 0.5, weight, NULL, 0, computed.dx);
            dyt_by_kernel(k, x, TABLE_DIM, 0.5, weight, table, 0, (float *)base);
            cr_expect(memcmp(computed.dx, base, (size_t)TABLE_ELEMENTS * sizeof(float)) != 0,
                      "%s: a dyt table one ulp off at x = 1 gives the arithmetic's bits", k->isa);
        }
    }
    cr_log_info("cpu_norms_dyt_table: %d comparisons", compared);
    free(table);
    free(base);
    if (compared == 0)
        cr_skip_test("no kernel set with DyT's table runs on this machine");
}

/* builtin:cpu, the norm family without vector instructions (LACS_ISA=scalar,
 * CPUs without AVX2, and softcap with a cap outside [2^-100, 2^100]: norms.c).
 *
 * Every value is computed in double from the fp32 (or bf16, widened) inputs
 * and rounded once to fp32 at the end: tanh and exp use the shared
 * approximations of norms.h (relative error <= 2^-30.9 and 2^-34.2), so each
 * fp32 result of tanh is within 0.5 + 2^-6.9 ulp (tested: <= 0.51 ulp,
 * tests/test_cpu_tanh.c); DyISRU, rmsnorm and l2norm follow the reference's
 * formulas (reference/norms.c, reference/preprocess.c) in the same double
 * arithmetic. Where those formulas are rearranged (overflow, cancellation)
 * the reasons are the reference's: SPEC.md 4.14-4.18.
 */
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "norms.h"

static inline double load_value(const void *p, int bf16, int64_t i)
{
    return bf16 ? (double)lacs_cpu_bf16_to_f32(((const uint16_t *)p)[i]) : (double)((const float *)p)[i];
}

/* ---- exp, tanh, sech^2 in double ---- */

/* exp(v) for v in [-120, 0]: 2^n exp(r) (norms.h). n is rounded with the
 * 1.5 * 2^52 trick (round to nearest in the current mode, exact for
 * |x| < 2^51) instead of rint, which the x86-64 baseline does not inline;
 * 2^n >= 2^-174 is a normal double, built from its bits. */
static double exp_nonpositive(double v)
{
    const double round_shift = 0x1.8p52;
    const double n = (v * LACS_LOG2E + round_shift) - round_shift;
    const double r = (v - n * LACS_LN2_HI) - n * LACS_LN2_LO;
    double q = lacs_exp_poly[4];
    for (int i = 3; i >= 0; i--)
        q = q * r + lacs_exp_poly[i];
    const double mantissa = 1 + (r + r * r * q);
    const uint64_t bits = (uint64_t)((int64_t)n + 1023) << 52;
    double power;
    memcpy(&power, &bits, sizeof power);
    return mantissa * power;
}

/* tanh(u): the odd polynomial below LACS_TANH_SPLIT (tanh(a) = a for tiny
 * and subnormal a; -0 stays -0), 1 - 2e/(1 + e) with e = exp(-2|u|) above
 * (no cancellation: 2e/(1 + e) < 0.45 there). |u| is capped at 60, where
 * tanh is 1 in any precision; NaN stays NaN. */
static double tanh_double(double u)
{
    if (isnan(u))
        return u;
    const double a = fabs(u);
    double y;
    if (a < LACS_TANH_SPLIT) {
        const double t = a * a;
        double p = lacs_tanh_poly[5];
        for (int i = 4; i >= 0; i--)
            p = p * t + lacs_tanh_poly[i];
        y = a + a * (t * p);
    } else {
        const double e = exp_nonpositive(-2 * (a < 60 ? a : 60));
        y = 1 - 2 * e / (1 + e);
    }
    return copysign(y, u);
}

/* sech^2(u) = 4e / (1 + e)^2, e = exp(-2|u|) (SPEC.md 4.18: not 1 - tanh^2,
 * which is 0 once tanh rounds to 1), with libm's exp: the reference's
 * formula in the same arithmetic, so that sech^2 is 0 exactly where the
 * reference's is (|u| > 372.57, where exp underflows in double), and an
 * infinite dy times it is +-inf or NaN as there. */
static double sech2_double(double u)
{
    const double e = exp(-2 * fabs(u));
    return 4 * e / ((1 + e) * (1 + e));
}
static void tanh_scalar(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)tanh_double(x[i]);
}

static void sech2_scalar(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)sech2_double(x[i]);
}

/* ---- N1: DyT ---- */

/* alpha x is exact in double (a product of two fp32 values). */
static void dyt_scalar(lacs_cpu_norm_block *b)
{
    for (int64_t r = 0; r < b->rows; r++)
        for (int64_t c = 0; c < b->dim; c++) {
            const int64_t i = r * b->dim + c;
            const double t = tanh_double(b->param * load_value(b->x, b->bf16, i));
            b->out[i] = (float)((double)b->weight[c] * t + (double)b->bias[c]);
        }
}

/* dalpha's term x sech^2 is 0 where sech^2 is 0: its limit at x = +-inf,
 * where IEEE would give inf * 0 = NaN (SPEC.md 4.18). */
static void dyt_vjp_scalar(lacs_cpu_norm_block *b)
{
    const double alpha = b->param;
    double sum_alpha = 0;
    for (int64_t r = 0; r < b->rows; r++)
        for (int64_t c = 0; c < b->dim; c++) {
            const int64_t i = r * b->dim + c;
            const double x = load_value(b->x, b->bf16, i), g = load_value(b->dy, b->bf16, i);
            const double u = alpha * x, s2 = sech2_double(u);
            const double gw = g * b->weight[c];
            sum_alpha += gw * (s2 == 0 ? 0 : x * s2);
            if (b->sum_weight)
                b->sum_weight[c] += g * tanh_double(u);
            if (b->sum_bias)
                b->sum_bias[c] += g;
            b->out[i] = (float)(gw * (alpha * s2));
        }
    b->sum_param = sum_alpha;
}

/* ---- N5: DyISRU ---- */

/* f = x / sqrt(x^2 + C) and its derivatives relative to the larger of |x|
 * and sqrt(C), so that nothing overflows unless the result does: the
 * reference's two branches (reference/norms.c, isru), in the same order of
 * operations. NaN x takes the second branch and gives NaN. */
typedef struct {
    double f, dfdx, dfdC;
} isru_value;

static isru_value isru(double x, double C, double sqrt_C)
{
    const double a = fabs(x);
    if (a >= sqrt_C) {
        const double r = sqrt_C / a, p = 1 + r * r, p32 = p * sqrt(p);
        return (isru_value){copysign(1 / sqrt(p), x), r / a * r / p32, -copysign(0.5 / a / a / p32, x)};
    }
    const double q = x / sqrt_C, p = 1 + q * q, p32 = p * sqrt(p);
    return (isru_value){x / (sqrt_C * sqrt(p)), 1 / (sqrt_C * p32), -(q / 2) / (C * p32)};
}

static void dyisru_scalar(lacs_cpu_norm_block *b)
{
    const double C = b->param, sqrt_C = sqrt(C);
    for (int64_t r = 0; r < b->rows; r++)
        for (int64_t c = 0; c < b->dim; c++) {
            const int64_t i = r * b->dim + c;
            const double f = isru(load_value(b->x, b->bf16, i), C, sqrt_C).f;
            b->out[i] = (float)((double)b->weight[c] * f + (double)b->bias[c]);
        }
}

static void dyisru_vjp_scalar(lacs_cpu_norm_block *b)
{
    const double C = b->param, sqrt_C = sqrt(C);
    double sum_C = 0;
    for (int64_t r = 0; r < b->rows; r++)
        for (int64_t c = 0; c < b->dim; c++) {
            const int64_t i = r * b->dim + c;
            const double g = load_value(b->dy, b->bf16, i);
            const isru_value v = isru(load_value(b->x, b->bf16, i), C, sqrt_C);
            const double gw = g * b->weight[c];
            sum_C += gw * v.dfdC;
            if (b->sum_weight)
                b->sum_weight[c] += g * v.f;
            if (b->sum_bias)
                b->sum_bias[c] += g;
            b->out[i] = (float)(gw * v.dfdx);
        }
    b->sum_param = sum_C;
}

/* ---- N6: softcap ---- */

/* Below |u| = sqrt(eps_double), x (1 - u^2/3) keeps x's own digits (x / cap
 * rounds again when it is subnormal): a subnormal x comes back as itself. */
static void softcap_scalar(lacs_cpu_norm_block *b)
{
    const double cap = b->param;
    const int64_t n = b->rows * b->dim;
    for (int64_t i = 0; i < n; i++) {
        const double x = load_value(b->x, b->bf16, i), u = x / cap;
        b->out[i] = (float)(fabs(u) < 0x1p-26 ? x * (1 - u * u / 3) : cap * tanh_double(u));
    }
}

/* h(u) = tanh(u) - u sech^2(u): u^3 R(u^2) below |u| = 1, where the
 * difference cancels; the direct form above, with u sech^2(u) = 0 where
 * sech^2 is 0 (the limit h(+-inf) = +-1). */
static double softcap_dcap_term(double u)
{
    if (fabs(u) < 1) {
        const double t = u * u;
        double p = lacs_softcap_dcap_poly[8];
        for (int i = 7; i >= 0; i--)
            p = p * t + lacs_softcap_dcap_poly[i];
        return u * t * p;
    }
    const double s2 = sech2_double(u);
    return tanh_double(u) - (s2 == 0 ? 0 : u * s2);
}

static void softcap_vjp_scalar(lacs_cpu_norm_block *b)
{
    const double cap = b->param;
    const int64_t n = b->rows * b->dim;
    double sum_cap = 0;
    for (int64_t i = 0; i < n; i++) {
        const double u = load_value(b->x, b->bf16, i) / cap, g = load_value(b->dy, b->bf16, i);
        sum_cap += g * softcap_dcap_term(u);
        b->out[i] = (float)(g * sech2_double(u));
    }
    b->sum_param = sum_cap;
}

/* ---- rows of rmsnorm and l2norm ---- */

/* Squares of fp32 values are exact in double and cannot overflow or
 * underflow there, which is why these sums need none of the reference's
 * power-of-two scaling. */
static double sum_of_squares_scalar(const void *x, int bf16, int64_t n)
{
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        const double v = load_value(x, bf16, i);
        sum += v * v;
    }
    return sum;
}

static double weighted_dot_scalar(const void *x, const void *dy, int bf16, const float *weight, int64_t n)
{
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += load_value(x, bf16, i) * (double)weight[i] * load_value(dy, bf16, i);
    return sum;
}

static void squares_and_weighted_dot_scalar(const void *x, const void *dy, int bf16, const float *weight, int64_t n,
                                            int exact_products, double *sum_of_squares, double *weighted_dot,
                                            float *max_abs_dy)
{
    (void)exact_products; /* the products in double are the same values (norms.h) */
    *sum_of_squares = sum_of_squares_scalar(x, bf16, n);
    *weighted_dot = weighted_dot_scalar(x, dy, bf16, weight, n);
    float largest = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float g = fabsf((float)load_value(dy, bf16, i));
        largest = g > largest ? g : largest; /* a NaN is passed over, as vmaxps does */
    }
    *max_abs_dy = largest;
}

static void scale_scalar(const void *x, int bf16, int64_t n, double inv, const float *weight, float *y, int stream)
{
    (void)stream; /* ordinary stores */
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)((double)weight[i] * (load_value(x, bf16, i) * inv));
}

static void scale_binary32_scalar(const void *x, int bf16, int64_t n, double inv, const float *weight, float *y,
                                  int stream)
{
    (void)stream;
    const float inv_f = (float)inv;
    for (int64_t i = 0; i < n; i++)
        y[i] = weight[i] * ((float)load_value(x, bf16, i) * inv_f);
}

static void project_scalar(const void *x, const void *dy, int bf16, int64_t n, const float *weight, double along,
                           double inv, float *dx, float *sum_dy_y, int stream)
{
    (void)stream;
    const float along_f = (float)along, inv_f = (float)inv;
    for (int64_t i = 0; i < n; i++) {
        const float xi = (float)load_value(x, bf16, i), g = (float)load_value(dy, bf16, i);
        if (sum_dy_y)
            sum_dy_y[i] = fmaf(g, xi * inv_f, sum_dy_y[i]);
        dx[i] = fmaf(-xi, along_f, weight[i] * g) * inv_f;
    }
}

static void project_double_scalar(const void *x, const void *dy, int bf16, int64_t n, const float *weight,
                                  double along, double inv, float *dx, float *sum_dy_y, int stream)
{
    (void)stream;
    for (int64_t i = 0; i < n; i++) {
        const double xi = load_value(x, bf16, i), g = load_value(dy, bf16, i);
        if (sum_dy_y)
            sum_dy_y[i] = (float)(sum_dy_y[i] + g * (xi * inv));
        dx[i] = (float)(((double)weight[i] * g - xi * along) * inv);
    }
}

const lacs_cpu_norm_kernels lacs_cpu_norm_kernels_scalar = {
    .isa = "scalar",
    .tanh = tanh_scalar,
    .sech2 = sech2_scalar,
    .dyt = dyt_scalar,
    .dyt_vjp = dyt_vjp_scalar,
    .dyisru = dyisru_scalar,
    .dyisru_vjp = dyisru_vjp_scalar,
    .softcap = softcap_scalar,
    .softcap_vjp = softcap_vjp_scalar,
    .sum_of_squares = sum_of_squares_scalar,
    .squares_and_weighted_dot = squares_and_weighted_dot_scalar,
    .scale = scale_scalar,
    .scale_binary32 = scale_binary32_scalar,
    .project = project_scalar,
    .project_double = project_double_scalar,
};

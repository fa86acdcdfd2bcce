/* The norm zoo: a float (binary32) implementation of the element-wise and
 * norm ops of SPEC.md 3 and 4.14-4.18 (rmsnorm, dyt, dyisru, softcap, l2norm
 * and their VJPs) as an ABI v1 plugin (include/lacs/plugin.h), with the
 * legitimate variants a real kernel may be and the bugs a real kernel has had.
 * tests/zoo/BUGS-norms.md lists every member and what catches each bug.
 *
 * Members, chosen by environment variables (the checker's child processes
 * inherit them):
 *   (nothing set)            float arithmetic and libm's float functions
 *                            (tanhf, expf, sqrtf); LEGITIMATE.
 *   LACS_ZOO_TANH=approx     tanh by Eigen's rational minimax (norms_float.h),
 *                            as in Eigen, XLA and onnxruntime; LEGITIMATE.
 *   LACS_ZOO_OUT_BF16=1      every output rounded to bf16 (nearest, ties to
 *                            even) as a bf16 kernel stores it; LEGITIMATE for
 *                            the bf16 tier only.
 *   build/zoo/norms_f32_fma.so (-DZOO_FMA=1): the sums and dot products with
 *                            fmaf; LEGITIMATE, and combines with the above.
 *   LACS_ZOO_BUG=<name>      one bug of bug_names below (unset or "none": no bug).
 *
 * The float code follows the reference's rearrangements where the plain float
 * formula overflows or underflows on the IEEE-specials and all-bf16 vectors
 * (rmsnorm's power-of-two scaling, DyISRU's two branches, softcap's series
 * below sqrt(eps)): those plain formulas are kept as bugs
 * (rmsnorm_unscaled_sum_of_squares, dyisru_unscaled_square), since the
 * vectors' IEEE semantics are normative (SPEC.md 4.14-4.18). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/plugin.h"
#include "lacs/types.h"
#include "norms_float.h"
#include "norms_io.h"

/* ---- the members ---- */

typedef enum {
    BUG_NONE,
    /* forward ops (each changes its forward op only; the VJPs read the correct forward values) */
    BUG_RMSNORM_EPS_OUTSIDE_SQRT,          /* x / (sqrt(mean x^2) + eps) */
    BUG_RMSNORM_MEAN_NOT_RMS,              /* x / (mean |x| + eps) */
    BUG_RMSNORM_L2_NOT_RMS,                /* x / sqrt(sum x^2 + eps): the 1/d of the mean forgotten */
    BUG_RMSNORM_UNSCALED_SUM_OF_SQUARES,   /* sum x^2 in float as it comes: overflows, underflows */
    BUG_DYT_ALPHA_OUTSIDE_TANH,            /* alpha tanh(x), not tanh(alpha x) (N1) */
    BUG_TANH_OVERFLOW_NAN,                 /* tanh = (e^x - e^-x)/(e^x + e^-x): NaN for |x| > 88.7 (every tanh) */
    BUG_DYISRU_C_OUTSIDE_ROOT,             /* x / (sqrt(x^2) + C), not x / sqrt(x^2 + C) (N5) */
    BUG_DYISRU_UNSCALED_SQUARE,            /* x rsqrt(x^2 + C) in float: 0 for |x| > 1.8e19, NaN at +-inf */
    BUG_SOFTCAP_NO_OUTER_CAP,              /* tanh(x / cap), the outer cap forgotten (N6) */
    BUG_L2NORM_CONVENTION_SWAPPED,         /* the other eps convention (SPEC.md 3) */
    /* VJPs (SPEC.md 4.18) */
    BUG_RMSNORM_VJP_NO_PROJECTION,         /* dx = weight dy / rms: the -y (y . g)/d term missing */
    BUG_RMSNORM_VJP_PROJECTION_UNWEIGHTED, /* the projection reads y . dy, not y . (weight dy) */
    BUG_RMSNORM_VJP_DWEIGHT_UNNORMALISED,  /* dweight = sum dy x, not sum dy y */
    BUG_DYT_VJP_DALPHA_NO_X,               /* dalpha = sum dy weight sech^2, the factor x missing */
    BUG_DYT_VJP_DX_NO_ALPHA,               /* dx = dy weight sech^2, the chain rule's alpha missing */
    BUG_DYT_VJP_DBIAS_WEIGHTED,            /* dbias = sum dy weight */
    BUG_DYISRU_VJP_DC_SIGN,                /* dC with the wrong sign */
    BUG_DYISRU_VJP_DX_RSQRT,               /* dx = dy weight / sqrt(x^2 + C) */
    BUG_SOFTCAP_VJP_DCAP_SIGN,             /* dcap with the wrong sign */
    BUG_SOFTCAP_VJP_DCAP_TANH_ONLY,        /* dcap = sum dy tanh(u), the -u sech^2(u) term missing */
    BUG_L2NORM_VJP_NO_PROJECTION,          /* dx = dy / ||x||: the projection onto x missing */
    BUG_SECH2_ONE_MINUS_TANH2,             /* sech^2 = 1 - tanh^2 (torch's tanh_backward): dyt_vjp, softcap_vjp */
    BUG_COUNT
} bug_kind;

/* Indexed by bug_kind; the names LACS_ZOO_BUG takes. */
static const char *const bug_names[BUG_COUNT] = {
    "none",
    "rmsnorm_eps_outside_sqrt",
    "rmsnorm_mean_not_rms",
    "rmsnorm_l2_not_rms",
    "rmsnorm_unscaled_sum_of_squares",
    "dyt_alpha_outside_tanh",
    "tanh_overflow_nan",
    "dyisru_c_outside_root",
    "dyisru_unscaled_square",
    "softcap_no_outer_cap",
    "l2norm_convention_swapped",
    "rmsnorm_vjp_no_projection",
    "rmsnorm_vjp_projection_unweighted",
    "rmsnorm_vjp_dweight_unnormalised",
    "dyt_vjp_dalpha_no_x",
    "dyt_vjp_dx_no_alpha",
    "dyt_vjp_dbias_weighted",
    "dyisru_vjp_dC_sign",
    "dyisru_vjp_dx_rsqrt",
    "softcap_vjp_dcap_sign",
    "softcap_vjp_dcap_tanh_only",
    "l2norm_vjp_no_projection",
    "sech2_one_minus_tanh2",
};

typedef enum { TANH_LIBM, TANH_RATIONAL } tanh_kind;

typedef struct {
    bug_kind bug;
    tanh_kind tanh;
    int outputs_bf16;
} member;

/* Reads the member from the environment. An unknown value is an error, not
 * the correct implementation: a misspelt bug name must not pass silently. */
static int read_member(const char *op, member *m)
{
    const char *bug = getenv("LACS_ZOO_BUG"), *tanh_name = getenv("LACS_ZOO_TANH");
    const char *bf16 = getenv("LACS_ZOO_OUT_BF16");
    *m = (member){BUG_NONE, TANH_LIBM, 0};
    if (bug && *bug) {
        int found = 0;
        for (int b = 0; b < BUG_COUNT; b++)
            if (strcmp(bug, bug_names[b]) == 0) {
                m->bug = (bug_kind)b;
                found = 1;
            }
        if (!found) {
            fprintf(stderr, "norms_f32: %s: LACS_ZOO_BUG = '%s' is not one of this plugin's bugs:", op, bug);
            for (int b = 0; b < BUG_COUNT; b++)
                fprintf(stderr, " %s", bug_names[b]);
            fputc('\n', stderr);
            return LACS_ERR_PARAM;
        }
    }
    if (tanh_name && *tanh_name && strcmp(tanh_name, "libm") != 0) {
        if (strcmp(tanh_name, "approx") != 0)
            return report(LACS_ERR_PARAM, op, "LACS_ZOO_TANH = '%s': expected 'libm' or 'approx'", tanh_name);
        m->tanh = TANH_RATIONAL;
    }
    if (bf16 && *bf16 && strcmp(bf16, "0") != 0) {
        if (strcmp(bf16, "1") != 0)
            return report(LACS_ERR_PARAM, op, "LACS_ZOO_OUT_BF16 = '%s': expected 0 or 1", bf16);
        m->outputs_bf16 = 1;
    }
    return LACS_OK;
}

static float member_tanh(const member *m, float u)
{
    if (m->bug == BUG_TANH_OVERFLOW_NAN)
        return tanh_from_exponentials(u);
    return m->tanh == TANH_RATIONAL ? tanh_rational(u) : tanhf(u);
}

/* sech^2(u), given t = tanh(u) as this member computes it. The bug is
 * torch's tanh_backward formula: 1 - t^2 cancels where t is near +-1 (an
 * absolute error of about 2^-24, relative 2^-24 / sech^2(u)) and is 0 once t
 * rounds to +-1, where the true value 4 e^{-2|u|} is still a normal float. */
static float member_sech2(const member *m, float u, float t)
{
    return m->bug == BUG_SECH2_ONE_MINUS_TANH2 ? sech2_from_tanh(t) : sech2_from_exp(u);
}

/* ---- one call, its inputs loaded as float ---- */

typedef struct {
    int64_t rows, dim;                  /* x is [rows, dim]: dim its last dimension */
    const float *x, *dy, *weight, *bias; /* weight, bias: NULL when not given */
    float scalar;                       /* dyt's alpha, dyisru's C */
    float eps, cap;
    int convention;                     /* 0: x / sqrt(sum x^2 + eps), 1: x / max(||x||, eps) */
    /* the outputs asked for (NULL: not asked) */
    float *y, *dx, *dweight, *dbias, *dscalar;
} norm_call;

/* ---- N2, N3: RMSNorm (SPEC.md 4.14) ---- */

/* rms = sqrt(mean(x^2) + eps) as s * r with s the power of two at or below
 * max(max|x|, sqrt(eps)), so that (x/s)^2 neither overflows (|x| > 1.8e19 in
 * float) nor underflows (|x| < 1e-19 loses digits, < 2.6e-23 reads as 0):
 * the reference's scaling (SPEC.md 4.14) in float. x/s is exact. A zero row
 * with eps = 0 has s = 0 (y = 0 by convention); a NaN gives r = NaN (the row
 * is NaN), an infinity r = inf (finite entries 0, infinite ones NaN). */
typedef struct {
    float s, r;
} row_rms;

/* `bug` is the member's bug for rmsnorm itself and BUG_NONE for its VJP: the
 * forward bugs below are rmsnorm's own. */
static row_rms rms_of_row(bug_kind bug, const float *x, int64_t dim, float eps)
{
    float amax = 0;
    int has_nan = 0;
    for (int64_t c = 0; c < dim; c++) {
        float a = fabsf(x[c]);
        if (isnan(a))
            has_nan = 1;
        else if (a > amax)
            amax = a;
    }
    if (has_nan)
        return (row_rms){1, NAN};
    if (isinf(amax))
        return (row_rms){1, INFINITY};
    float s = 1; /* the bug: no scaling, x^2 in float as it comes */
    if (bug != BUG_RMSNORM_UNSCALED_SUM_OF_SQUARES) {
        float big = fmaxf(amax, sqrtf(eps));
        if (big == 0)
            return (row_rms){0, 0};
        s = ldexpf(1, ilogbf(big));
    }
    float sum_sq = 0, sum_abs = 0; /* sum_abs: for the bug rmsnorm_mean_not_rms */
    for (int64_t c = 0; c < dim; c++) {
        float xs = x[c] / s;
        sum_sq = multiply_add(xs, xs, sum_sq);
        sum_abs += fabsf(xs);
    }
    const float d = (float)dim, eps_s = eps / s / s;
    switch (bug) {
    case BUG_RMSNORM_EPS_OUTSIDE_SQRT: /* x / (rms + eps), as "x / (std + eps)" layer norms */
        return (row_rms){s, sqrtf(sum_sq / d) + eps / s};
    case BUG_RMSNORM_MEAN_NOT_RMS: /* divides by mean |x| */
        return (row_rms){s, sum_abs / d + eps / s};
    case BUG_RMSNORM_L2_NOT_RMS: /* divides by ||x||: the mean's 1/d forgotten */
        return (row_rms){s, sqrtf(sum_sq + eps_s)};
    default:
        return (row_rms){s, sqrtf(sum_sq / d + eps_s)};
    }
}

/* N2: y = weight (.) x / rms. */
static void run_rmsnorm(const member *m, const norm_call *c)
{
    for (int64_t r = 0; r < c->rows; r++) {
        const float *x = c->x + r * c->dim;
        float *y = c->y + r * c->dim;
        row_rms rms = rms_of_row(m->bug, x, c->dim, c->eps);
        float inv_r = 1 / rms.r;
        for (int64_t j = 0; j < c->dim; j++) {
            float v = rms.s == 0 ? 0 : x[j] / rms.s * inv_r;
            y[j] = c->weight ? c->weight[j] * v : v;
        }
    }
}

/* dx = J^T g with J of N3 and g = weight (.) dy: (g - y (y . g)/d) / rms;
 * dweight = sum over rows of dy (.) y. A zero row with eps = 0: dx = 0 and no
 * dweight term (SPEC.md 4.14's convention). */
static void run_rmsnorm_vjp(const member *m, const norm_call *c)
{
    if (c->dweight)
        memset(c->dweight, 0, (size_t)c->dim * sizeof *c->dweight);
    for (int64_t r = 0; r < c->rows; r++) {
        const float *x = c->x + r * c->dim, *dy = c->dy + r * c->dim;
        float *dx = c->dx + r * c->dim;
        row_rms rms = rms_of_row(BUG_NONE, x, c->dim, c->eps);
        if (rms.s == 0) {
            for (int64_t j = 0; j < c->dim; j++)
                dx[j] = 0;
            continue;
        }
        float inv_r = 1 / rms.r, y_dot_g = 0;
        for (int64_t j = 0; j < c->dim; j++) {
            float yj = x[j] / rms.s * inv_r, g = c->weight ? c->weight[j] * dy[j] : dy[j];
            /* the bug: the projection reads dy, forgetting that J^T acts on weight (.) dy */
            y_dot_g = multiply_add(yj, m->bug == BUG_RMSNORM_VJP_PROJECTION_UNWEIGHTED ? dy[j] : g, y_dot_g);
            if (c->dweight) /* the bug: the weight's gradient takes x, not the normalised y */
                c->dweight[j] = multiply_add(dy[j], m->bug == BUG_RMSNORM_VJP_DWEIGHT_UNNORMALISED ? x[j] : yj,
                                             c->dweight[j]);
        }
        float along = m->bug == BUG_RMSNORM_VJP_NO_PROJECTION ? 0 : y_dot_g / (float)c->dim;
        for (int64_t j = 0; j < c->dim; j++) {
            float yj = x[j] / rms.s * inv_r, g = c->weight ? c->weight[j] * dy[j] : dy[j];
            dx[j] = multiply_add(-yj, along, g) * inv_r / rms.s;
        }
    }
}

/* ---- N1: DyT (SPEC.md 4.15) ---- */

/* weight[j] v + bias[j]; an absent weight or bias is no operation (SPEC.md 4.14). */
static float per_channel_affine(float v, const float *weight, const float *bias, int64_t j)
{
    if (weight && bias)
        return multiply_add(weight[j], v, bias[j]);
    if (weight)
        return weight[j] * v;
    return bias ? v + bias[j] : v;
}

/* N1: y = weight (.) tanh(alpha x) + bias. */
static void run_dyt(const member *m, const norm_call *c)
{
    const float alpha = c->scalar;
    for (int64_t i = 0; i < c->rows * c->dim; i++) {
        float t = m->bug == BUG_DYT_ALPHA_OUTSIDE_TANH ? alpha * member_tanh(m, c->x[i])
                                                       : member_tanh(m, alpha * c->x[i]);
        c->y[i] = per_channel_affine(t, c->weight, c->bias, i % c->dim);
    }
}

/* dx = dy weight alpha sech^2(alpha x); dalpha = sum dy weight x sech^2(alpha x)
 * (0 where sech^2 is 0: the limit at x = +-inf); dweight = sum_rows dy tanh(alpha x);
 * dbias = sum_rows dy (SPEC.md 4.18). */
static void run_dyt_vjp(const member *m, const norm_call *c)
{
    const float alpha = c->scalar;
    if (c->dweight)
        memset(c->dweight, 0, (size_t)c->dim * sizeof *c->dweight);
    if (c->dbias)
        memset(c->dbias, 0, (size_t)c->dim * sizeof *c->dbias);
    float sum_alpha = 0;
    for (int64_t i = 0; i < c->rows * c->dim; i++) {
        const int64_t j = i % c->dim;
        float x = c->x[i], g = c->dy[i], u = alpha * x;
        float t = member_tanh(m, u), s2 = member_sech2(m, u, t);
        float gw = c->weight ? g * c->weight[j] : g;
        /* the bug dx_no_alpha drops the chain rule's inner factor */
        c->dx[i] = gw * ((m->bug == BUG_DYT_VJP_DX_NO_ALPHA ? 1 : alpha) * s2);
        sum_alpha = multiply_add(gw, m->bug == BUG_DYT_VJP_DALPHA_NO_X ? s2 : times_sech2(x, s2), sum_alpha);
        if (c->dweight)
            c->dweight[j] = multiply_add(g, t, c->dweight[j]);
        if (c->dbias) /* the bug: the bias's gradient weighted, as if bias were inside the weight */
            c->dbias[j] += m->bug == BUG_DYT_VJP_DBIAS_WEIGHTED ? gw : g;
    }
    if (c->dscalar)
        *c->dscalar = sum_alpha;
}

/* ---- N5: DyISRU (SPEC.md 4.16) ---- */

/* f(x) = x / sqrt(x^2 + C) and its partial derivatives
 * df/dx = C (x^2 + C)^{-3/2}, df/dC = -x/2 (x^2 + C)^{-3/2}, relative to the
 * larger of |x| and sqrt(C) as the reference does (SPEC.md 4.16): in float
 * x^2 overflows from |x| = 1.8e19, and x = +-inf must give +-1.
 *   |x| >= sqrt(C): r = sqrt(C)/|x|, p = 1 + r^2, f = sign(x)/sqrt(p);
 *   |x| <  sqrt(C): q = x/sqrt(C),   p = 1 + q^2, f = x/(sqrt(C) sqrt(p)). */
typedef struct {
    float f, dfdx, dfdC;
} isru_value;

static isru_value isru(float x, float C, float sqrt_C)
{
    float a = fabsf(x);
    if (a >= sqrt_C) {
        float r = sqrt_C / a, p = multiply_add(r, r, 1), p32 = p * sqrtf(p);
        return (isru_value){copysignf(1 / sqrtf(p), x), r / a * r / p32, -copysignf(0.5f / a / a / p32, x)};
    }
    float q = x / sqrt_C, p = multiply_add(q, q, 1), p32 = p * sqrtf(p);
    return (isru_value){x / (sqrt_C * sqrtf(p)), 1 / (sqrt_C * p32), -(q / 2) / (C * p32)};
}

/* N5: y = weight (.) x / sqrt(x^2 + C) + bias. */
static void run_dyisru(const member *m, const norm_call *c)
{
    const float C = c->scalar, sqrt_C = sqrtf(C);
    for (int64_t i = 0; i < c->rows * c->dim; i++) {
        float x = c->x[i], f;
        if (m->bug == BUG_DYISRU_C_OUTSIDE_ROOT) /* x / (sqrt(x^2) + C) */
            f = x / (fabsf(x) + C);
        else if (m->bug == BUG_DYISRU_UNSCALED_SQUARE) /* x rsqrt(x^2 + C): 0 for |x| > 1.8e19, NaN at +-inf */
            f = x * (1 / sqrtf(multiply_add(x, x, C)));
        else
            f = isru(x, C, sqrt_C).f;
        c->y[i] = per_channel_affine(f, c->weight, c->bias, i % c->dim);
    }
}

/* dx = dy weight df/dx; dC = sum dy weight df/dC; dweight = sum_rows dy f;
 * dbias = sum_rows dy (SPEC.md 4.18). */
static void run_dyisru_vjp(const member *m, const norm_call *c)
{
    const float C = c->scalar, sqrt_C = sqrtf(C);
    if (c->dweight)
        memset(c->dweight, 0, (size_t)c->dim * sizeof *c->dweight);
    if (c->dbias)
        memset(c->dbias, 0, (size_t)c->dim * sizeof *c->dbias);
    float sum_C = 0;
    for (int64_t i = 0; i < c->rows * c->dim; i++) {
        const int64_t j = i % c->dim;
        float x = c->x[i], g = c->dy[i];
        isru_value v = isru(x, C, sqrt_C);
        float gw = c->weight ? g * c->weight[j] : g;
        if (m->bug == BUG_DYISRU_VJP_DX_RSQRT) /* df/dx taken as 1/sqrt(x^2 + C), f's own factor */
            v.dfdx = fabsf(x) >= sqrt_C ? 1 / (fabsf(x) * sqrtf(multiply_add(sqrt_C / x, sqrt_C / x, 1)))
                                        : 1 / (sqrt_C * sqrtf(multiply_add(x / sqrt_C, x / sqrt_C, 1)));
        c->dx[i] = gw * v.dfdx;
        sum_C = multiply_add(m->bug == BUG_DYISRU_VJP_DC_SIGN ? -gw : gw, v.dfdC, sum_C);
        if (c->dweight)
            c->dweight[j] = multiply_add(g, v.f, c->dweight[j]);
        if (c->dbias)
            c->dbias[j] += g;
    }
    if (c->dscalar)
        *c->dscalar = sum_C;
}

/* ---- N6: softcap (SPEC.md 4.17) ---- */

/* y = cap tanh(x / cap). Below |u| = sqrt(FLT_EPSILON), y = x (1 - u^2/3)
 * (tanh's series to rounding there) keeps x's digits: x / cap rounds again
 * when it is subnormal. */
static float softcap_one(const member *m, float x, float cap)
{
    float u = x / cap;
    if (m->bug == BUG_SOFTCAP_NO_OUTER_CAP)
        return member_tanh(m, u);
    if (fabsf(u) < sqrtf(FLT_EPSILON))
        return x * (1 - u * u / 3);
    return cap * member_tanh(m, u);
}

static void run_softcap(const member *m, const norm_call *c)
{
    for (int64_t i = 0; i < c->rows * c->dim; i++)
        c->y[i] = softcap_one(m, c->x[i], c->cap);
}

/* dx = dy sech^2(u); dcap = sum dy (tanh(u) - u sech^2(u)), u = x / cap,
 * written as the plain difference: it cancels to (2/3) u^3 for small u, an
 * absolute error of about ulp(u) per term, which is what a float kernel
 * has (SPEC.md 4.18's series is the double reference's refinement). */
static void run_softcap_vjp(const member *m, const norm_call *c)
{
    float sum_cap = 0;
    for (int64_t i = 0; i < c->rows * c->dim; i++) {
        float u = c->x[i] / c->cap, g = c->dy[i];
        float t = member_tanh(m, u), s2 = member_sech2(m, u, t);
        c->dx[i] = g * s2;
        /* the bugs: the product rule's second term forgotten; the sign of the sum flipped */
        float term = m->bug == BUG_SOFTCAP_VJP_DCAP_TANH_ONLY ? t : t - times_sech2(u, s2);
        sum_cap = multiply_add(m->bug == BUG_SOFTCAP_VJP_DCAP_SIGN ? -g : g, term, sum_cap);
    }
    if (c->dscalar)
        *c->dscalar = sum_cap;
}

/* ---- L2 normalisation (SPEC.md 3) ---- */

/* y = x / sqrt(sum x^2 + eps) (convention 0, fla) or x / max(||x||, eps)
 * (convention 1, torch F.normalize); a NaN makes the row NaN; a zero row with
 * eps = 0 gives 0. Unscaled, as the reference. */
static void run_l2norm(const member *m, const norm_call *c)
{
    const int convention = m->bug == BUG_L2NORM_CONVENTION_SWAPPED ? 1 - c->convention : c->convention;
    for (int64_t r = 0; r < c->rows; r++) {
        const float *x = c->x + r * c->dim;
        float *y = c->y + r * c->dim;
        float sum_sq = 0;
        for (int64_t j = 0; j < c->dim; j++)
            sum_sq = multiply_add(x[j], x[j], sum_sq);
        float denom = convention == 0 ? sqrtf(sum_sq + c->eps) : fmaxf(sqrtf(sum_sq), c->eps);
        if (isnan(sum_sq)) /* fmaxf would drop the NaN norm in favour of eps */
            denom = sum_sq;
        float inv = 1 / denom;
        for (int64_t j = 0; j < c->dim; j++)
            y[j] = isnan(denom) ? denom : denom > 0 ? x[j] * inv : 0;
    }
}

/* sqrt_eps: n2 = sum x^2 + eps, dx = (dy - x (x.dy)/n2) / sqrt(n2);
 * max_eps: ||x|| >= eps: dx = (dy - x (x.dy)/||x||^2) / ||x||, else dy / eps;
 * dx = 0 where the forward pass gives y = 0 by convention (SPEC.md 3). */
static void run_l2norm_vjp(const member *m, const norm_call *c)
{
    for (int64_t r = 0; r < c->rows; r++) {
        const float *x = c->x + r * c->dim, *dy = c->dy + r * c->dim;
        float *dx = c->dx + r * c->dim;
        float sum_sq = 0, x_dot_dy = 0;
        for (int64_t j = 0; j < c->dim; j++) {
            sum_sq = multiply_add(x[j], x[j], sum_sq);
            x_dot_dy = multiply_add(x[j], dy[j], x_dot_dy);
        }
        float along = 0, denom = 0; /* dx_j = (dy_j - x_j along) / denom */
        if (c->convention == 0) {
            float n2 = sum_sq + c->eps;
            if (n2 > 0) {
                along = x_dot_dy / n2;
                denom = sqrtf(n2);
            }
        } else {
            float norm = sqrtf(sum_sq);
            if (norm > 0 && norm >= c->eps) {
                along = x_dot_dy / sum_sq;
                denom = norm;
            } else if (c->eps > 0) {
                denom = c->eps;
            }
        }
        if (m->bug == BUG_L2NORM_VJP_NO_PROJECTION) /* dy / ||x||: the projection onto x forgotten */
            along = 0;
        if (isnan(sum_sq) || isnan(x_dot_dy))
            denom = along = NAN;
        float inv = 1 / denom;
        for (int64_t j = 0; j < c->dim; j++)
            dx[j] = isnan(denom) ? denom : denom > 0 ? multiply_add(-x[j], along, dy[j]) * inv : 0;
    }
}

/* ---- the op table and the ABI entry ---- */

typedef struct {
    const char *name;
    const char *required, *optional; /* input names, space-separated */
    const char *scalar;              /* the scalar input (alpha, C), or NULL */
    const char *params;              /* parameters read (each must be given) */
    const char *outputs;             /* outputs it may be asked for */
    void (*run)(const member *, const norm_call *);
} op_entry;

/* As reference/ops.c names them. */
static const op_entry ops[] = {
    {"rmsnorm", "x", "weight", NULL, "eps", "y", run_rmsnorm},
    {"rmsnorm_vjp", "x dy", "weight", NULL, "eps", "dx dweight", run_rmsnorm_vjp},
    {"dyt", "x", "weight bias", "alpha", "", "y", run_dyt},
    {"dyt_vjp", "x dy", "weight", "alpha", "", "dx dalpha dweight dbias", run_dyt_vjp},
    {"dyisru", "x", "weight bias", "C", "", "y", run_dyisru},
    {"dyisru_vjp", "x dy", "weight", "C", "", "dx dC dweight dbias", run_dyisru_vjp},
    {"softcap", "x", "", NULL, "cap", "y", run_softcap},
    {"softcap_vjp", "x dy", "", NULL, "cap", "dx dcap", run_softcap_vjp},
    {"l2norm", "x", "", NULL, "eps convention", "y", run_l2norm},
    {"l2norm_vjp", "x dy", "", NULL, "eps convention", "dx", run_l2norm_vjp},
};

/* The float copies of one call's inputs, freed together. */
typedef struct {
    float *x, *dy, *weight, *bias, *scalar;
} loaded_inputs;

static void free_inputs(loaded_inputs *in)
{
    free(in->x);
    free(in->dy);
    free(in->weight);
    free(in->bias);
    free(in->scalar);
}

/* Loads input `name` into *values (NULL if absent and not required) and checks
 * its element count (-1: any; then *count receives it). */
static int load_input(const char *op, const lacs_tensor *inputs, int n_inputs, const char *name, int required,
                      int64_t expected, float **values, int64_t *count)
{
    const lacs_tensor *t = find_tensor(inputs, n_inputs, name);
    if (!t)
        return required ? report(LACS_ERR_INPUT, op, "input '%s' is required", name) : LACS_OK;
    int64_t n;
    int rc = load_as_float(op, t, values, &n);
    if (rc)
        return rc;
    if (expected >= 0 && n != expected)
        return report(LACS_ERR_SHAPE, op, "input '%s' has %lld elements; expected %lld", name, (long long)n,
                      (long long)expected);
    if (count)
        *count = n;
    return LACS_OK;
}

/* Loads and checks every input and parameter of `e` into c. */
static int prepare_inputs(const op_entry *e, const lacs_tensor *inputs, int n_inputs, const lacs_param *params,
                          int n_params, norm_call *c, loaded_inputs *in)
{
    const char *op = e->name;
    int rc;
    for (int i = 0; i < n_inputs; i++) {
        const char *name = inputs[i].name ? inputs[i].name : "(unnamed)";
        if (!list_has_word(e->required, name) && !list_has_word(e->optional, name) &&
            !(e->scalar && strcmp(e->scalar, name) == 0))
            return report(LACS_ERR_INPUT, op, "input '%s' is not read by this op", name);
    }
    const lacs_tensor *x = find_tensor(inputs, n_inputs, "x");
    if (!x)
        return report(LACS_ERR_INPUT, op, "input 'x' is required");
    /* x is [rows, dim] (softcap's may be flat): dim is the last dimension */
    int64_t n_x;
    if ((rc = load_input(op, inputs, n_inputs, "x", 1, -1, &in->x, &n_x)))
        return rc;
    c->dim = x->ndim >= 1 ? x->shape[x->ndim - 1] : 1;
    if (c->dim < 1 && n_x > 0)
        return report(LACS_ERR_SHAPE, op, "input 'x' has a last dimension of %lld", (long long)c->dim);
    c->rows = c->dim > 0 ? n_x / c->dim : 0;
    c->x = in->x;
    if (list_has_word(e->required, "dy")) {
        if ((rc = load_input(op, inputs, n_inputs, "dy", 1, n_x, &in->dy, NULL)))
            return rc;
        c->dy = in->dy;
    }
    if ((rc = load_input(op, inputs, n_inputs, "weight", 0, c->dim, &in->weight, NULL)) ||
        (rc = load_input(op, inputs, n_inputs, "bias", 0, c->dim, &in->bias, NULL)))
        return rc;
    c->weight = in->weight;
    c->bias = in->bias;
    if (e->scalar) { /* stored as a one-element tensor; a parameter of that name is accepted too */
        double value;
        if (find_tensor(inputs, n_inputs, e->scalar)) {
            if ((rc = load_input(op, inputs, n_inputs, e->scalar, 1, 1, &in->scalar, NULL)))
                return rc;
            c->scalar = in->scalar[0];
        } else if (find_param(params, n_params, e->scalar, &value)) {
            c->scalar = (float)value;
        } else {
            return report(LACS_ERR_INPUT, op, "input '%s' is required", e->scalar);
        }
        if (!isfinite(c->scalar) || (strcmp(e->scalar, "C") == 0 && !(c->scalar >= 0)))
            return report(LACS_ERR_PARAM, op, "%s = %g must be finite%s", e->scalar, (double)c->scalar,
                          strcmp(e->scalar, "C") == 0 ? " and >= 0" : "");
    }
    double eps = 0, cap = 1, convention = 0;
    if (list_has_word(e->params, "eps") && !find_param(params, n_params, "eps", &eps))
        return report(LACS_ERR_PARAM, op, "parameter 'eps' is required");
    if (list_has_word(e->params, "cap") && !find_param(params, n_params, "cap", &cap))
        return report(LACS_ERR_PARAM, op, "parameter 'cap' is required");
    if (list_has_word(e->params, "convention") && !find_param(params, n_params, "convention", &convention))
        return report(LACS_ERR_PARAM, op, "parameter 'convention' is required");
    /* SPEC.md 3 and 4.14: l2norm admits eps = +inf (y = 0), rmsnorm does not */
    const int is_l2norm = strncmp(op, "l2norm", 6) == 0;
    if (!(eps >= 0) || (isinf(eps) && !is_l2norm))
        return report(LACS_ERR_PARAM, op, "eps = %g must be %s", eps, is_l2norm ? ">= 0" : "finite and >= 0");
    if (!(cap > 0) || isinf(cap))
        return report(LACS_ERR_PARAM, op, "cap = %g must satisfy 0 < cap < inf", cap);
    if (convention != 0 && convention != 1)
        return report(LACS_ERR_PARAM, op, "convention = %g must be 0 (sqrt_eps) or 1 (max_eps)", convention);
    c->eps = (float)eps;
    c->cap = (float)cap;
    c->convention = (int)convention;
    return LACS_OK;
}

/* Points c's outputs at the F32 tensors asked for, checking their sizes. */
static int prepare_outputs(const op_entry *e, lacs_tensor *outputs, int n_outputs, norm_call *c)
{
    const char *op = e->name;
    for (int i = 0; i < n_outputs; i++) {
        const char *name = outputs[i].name ? outputs[i].name : "(unnamed)";
        if (!list_has_word(e->outputs, name))
            return report(LACS_ERR_INPUT, op, "output '%s' is not one this op writes (%s)", name, e->outputs);
        int64_t n = element_count(&outputs[i]);
        int64_t expected = strcmp(name, "y") == 0 || strcmp(name, "dx") == 0          ? c->rows * c->dim
                           : strcmp(name, "dweight") == 0 || strcmp(name, "dbias") == 0 ? c->dim
                                                                                          : 1;
        if (outputs[i].dtype != LACS_F32)
            return report(LACS_ERR_INPUT, op, "output '%s' has dtype code %d; expected F32 (0)", name,
                          (int)outputs[i].dtype);
        if (n != expected)
            return report(LACS_ERR_SHAPE, op, "output '%s' has %lld elements; expected %lld", name, (long long)n,
                          (long long)expected);
        if (n > 0 && !outputs[i].data)
            return report(LACS_ERR_INPUT, op, "output '%s' has no data", name);
        float *data = outputs[i].data;
        if (strcmp(name, "y") == 0)
            c->y = data;
        else if (strcmp(name, "dx") == 0)
            c->dx = data;
        else if (strcmp(name, "dweight") == 0)
            c->dweight = data;
        else if (strcmp(name, "dbias") == 0)
            c->dbias = data;
        else
            c->dscalar = data;
    }
    /* y, or a VJP's dx, is always written (SPEC.md "Common": any VJP output but dx may be absent) */
    const int forward = strcmp(e->outputs, "y") == 0;
    if (forward ? !c->y : !c->dx)
        return report(LACS_ERR_INPUT, op, "output '%s' is required", forward ? "y" : "dx");
    return LACS_OK;
}

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params,
                    int n_params, lacs_tensor *outputs, int n_outputs)
{
    if (!op)
        return report(LACS_ERR_INPUT, "(null)", "no op name");
    const op_entry *e = NULL;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(ops[i].name, op) == 0)
            e = &ops[i];
    if (!e)
        return LACS_UNSUPPORTED;
    if (n_inputs < 0 || n_params < 0 || n_outputs < 0 || (n_inputs > 0 && !inputs) ||
        (n_params > 0 && !params) || (n_outputs > 0 && !outputs))
        return report(LACS_ERR_INPUT, op, "inconsistent tensor or parameter arrays");
    member m;
    int rc = read_member(op, &m);
    if (rc)
        return rc;
    norm_call c = {0};
    loaded_inputs in = {0};
    if (!(rc = prepare_inputs(e, inputs, n_inputs, params, n_params, &c, &in)) &&
        !(rc = prepare_outputs(e, outputs, n_outputs, &c))) {
        e->run(&m, &c);
        if (m.outputs_bf16)
            for (int i = 0; i < n_outputs; i++) {
                float *data = outputs[i].data;
                const int64_t n = element_count(&outputs[i]);
                for (int64_t k = 0; k < n; k++)
                    data[k] = round_to_bf16(data[k]);
            }
    }
    free_inputs(&in);
    return rc;
}

/* builtin:cpu, the norm family's kernels (README.md): one table of
 * function pointers per instruction set. norms.c validates a call, splits it
 * into blocks of rows, runs the blocks on threads and reduces the per-block
 * sums; the kernels here do the arithmetic of one block or one row.
 *
 *   norms_scalar.c    every kernel in double arithmetic (CPUs without AVX2,
 *                     LACS_ISA=scalar, and softcap with a cap outside the
 *                     range the binary32 kernels are written for);
 *   norms_vector.h    the binary32 vector kernels, written once over a
 *                     primitive layer, and built twice: norms_avx2.c (over
 *                     simd_avx2.h, 8 lanes) and norms_avx512.c (over
 *                     simd_avx512.h, 16 lanes).
 *
 * The element-wise functions (tanh, sech^2, DyT, DyISRU, softcap) are
 * computed in binary32 by the vector kernels, with the error bounds stated in
 * norms_vector.h; the VJPs' products, every sum (dalpha, dC, dcap, dweight,
 * dbias) and every row reduction of rmsnorm and l2norm are formed in double.
 */
#ifndef LACS_CPU_NORMS_H
#define LACS_CPU_NORMS_H

#include <stdint.h>

/* One block of whole rows of an element-wise op (DyT, DyISRU, softcap and
 * their VJPs). Inputs x and dy are [rows, dim] at the block's first row,
 * fp32, or bf16 raw bits when `bf16` is set (widened exactly). weight and bias
 * are [dim] fp32; norms.c passes 1 and -0 where the op has none: w * v = v and
 * v + (-0) = v for every v, signed zeros and NaN included, where +0 would turn
 * -0 into +0 (SPEC.md 4.14, "Common"). */
typedef struct {
    const void *x, *dy;
    int bf16;
    int64_t rows, dim;
    double param;        /* alpha (DyT), C (DyISRU) or cap (softcap) */
    const float *weight; /* [dim]; not read by softcap */
    const float *bias;   /* [dim]; read by the forward DyT and DyISRU only */
    float *out;          /* y or dx, [rows, dim] */
    double *sum_weight;  /* [dim] or NULL: += sum over the block's rows of dy * f(x) (dweight) */
    double *sum_bias;    /* [dim] or NULL: += sum over the block's rows of dy (dbias) */
    double sum_param;    /* VJPs: set to the block's sum of dalpha, dC or dcap terms */
    int stream;          /* out may be written with non-temporal stores (norms.c sets it when out is
                            larger than the caches; the kernel ends with a store fence) */
    const float *dyt_table; /* DyT and its VJP in the bf16 tier: the kernels' dyt_table or dyt_vjp_table for
                               this call's alpha, or NULL (the kernels compute each element) */
} lacs_cpu_norm_block;

/* DyT and its VJP in the bf16 tier by table (optimized/cpu/README.md section
 * 6): a bf16 x is one of 2^16 values, so tanh(alpha x) (and for the VJP
 * sech^2(alpha x)) are computed once per call for every magnitude |x|
 * (LACS_CPU_DYT_TABLE_MAGNITUDES bf16 bit patterns, sign bit clear), by the
 * same arithmetic as each element would be, and looked up: the same bits, a
 * load per lane instead of an exp and a division per element. Built where the call has at least
 * LACS_CPU_DYT_TABLE_ELEMENTS elements (building it costs about as much as
 * 2^14 elements: 11-19 us for alpha from 1e-3 to 3e4 under avx2), under the
 * instruction sets whose kernels provide them (dyt_table: avx2 and avx512;
 * dyt_vjp_table: avx2; where the lookups cost less than the arithmetic). The VJP's table
 * covers every bit pattern, both signs (LACS_CPU_DYT_VJP_TABLE_FLOATS: tanh and sech^2 of each side by
 * side), so that a lane's pair is loaded from its pattern as it stands: no mask of the sign, no sign
 * given to tanh afterwards (4 instructions of a vector's some 50 under avx2). */
#define LACS_CPU_DYT_TABLE_MAGNITUDES 32768
#define LACS_CPU_DYT_VJP_TABLE_FLOATS (2 * 2 * LACS_CPU_DYT_TABLE_MAGNITUDES)
#define LACS_CPU_DYT_TABLE_OTHER 4.0f
#define LACS_CPU_DYT_TABLE_ELEMENTS (1 << 17)

typedef struct {
    const char *isa;
    /* y[i] = tanh(x[i]) and y[i] = sech^2(x[i]) = 4e / (1 + e)^2, e = exp(-2|x|),
     * n fp32 values: the building blocks of DyT and softcap, exposed for
     * tests/test_cpu_tanh.c. */
    void (*tanh)(const float *x, float *y, int64_t n);
    void (*sech2)(const float *x, float *y, int64_t n);

    /* N1: out = weight * tanh(alpha x) + bias. */
    void (*dyt)(lacs_cpu_norm_block *b);
    /* NULL, or fills table[LACS_CPU_DYT_TABLE_MAGNITUDES] for dyt's bf16
     * tier: table[m] = tanh(alpha x) for x the bf16 of bits m (x >= +0), as
     * dyt forms it, where |alpha x| >= 2^-12 and x is not a NaN, and
     * LACS_CPU_DYT_TABLE_OTHER (no tanh's value) where not. */
    void (*dyt_table)(double alpha, float *table);
    /* N1's VJP: out = dx = dy weight alpha sech^2(alpha x); sum_param = dalpha
     * terms dy weight x sech^2(alpha x) (0 where sech^2 is 0); sum_weight +=
     * dy tanh(alpha x); sum_bias += dy. */
    void (*dyt_vjp)(lacs_cpu_norm_block *b);
    /* NULL, or fills table[LACS_CPU_DYT_VJP_TABLE_FLOATS] for dyt_vjp's
     * bf16 tier: table[2 m] = tanh(alpha x) and table[2 m + 1] = sech^2(alpha
     * x), side by side, for x the bf16 of bits m (every m < 2^16, both signs), as the fast
     * path forms them, where that path takes x (tame, |alpha x| <= 9.5), and 0
     * in both where it does not (sech^2 is positive where it does). */
    void (*dyt_vjp_table)(double alpha, float *table);
    /* N5: out = weight * x / sqrt(x^2 + C) + bias (C = param). */
    void (*dyisru)(lacs_cpu_norm_block *b);
    /* N5's VJP: dx = dy weight df/dx, dC terms dy weight df/dC,
     * sum_weight += dy f, sum_bias += dy. */
    void (*dyisru_vjp)(lacs_cpu_norm_block *b);
    /* N6 on rows * dim elements (weight and bias unused): out = cap tanh(x / cap). */
    void (*softcap)(lacs_cpu_norm_block *b);
    /* N6's VJP: dx = dy sech^2(x / cap); dcap terms dy (tanh(u) - u sech^2(u)). */
    void (*softcap_vjp)(lacs_cpu_norm_block *b);

    /* Row reductions and row updates of rmsnorm, l2norm and their VJPs, in
     * double: x, dy fp32 or bf16 (bf16 set), n elements, weight [n] fp32. */
    double (*sum_of_squares)(const void *x, int bf16, int64_t n);
    /* sum_of_squares and sum_i x_i weight_i dy_i in one pass over the row: a VJP's first pass reads x and dy
     * from memory together (rmsnorm_vjp and l2norm_vjp: two passes over a row, not three); and max_i |dy_i|.
     * exact_products (bf16 rows, every weight of at most 8 significant bits): x_i^2 and x_i weight_i dy_i
     * formed in binary32, where they are exact (16 and 24 bits) unless they underflow, then summed in double
     * as before: the same sums, without converting three operands to double (norms.c checks the range and
     * takes the double form where a product could have underflowed). */
    void (*squares_and_weighted_dot)(const void *x, const void *dy, int bf16, const float *weight, int64_t n,
                                     int exact_products, double *sum_of_squares, double *weighted_dot,
                                     float *max_abs_dy);
    /* y_i = weight_i (x_i inv), rounded once to fp32; stream: y may be written
     * with non-temporal stores (fenced before the call returns). */
    void (*scale)(const void *x, int bf16, int64_t n, double inv, const float *weight, float *y, int stream);
    /* The same in binary32, as fp32 implementations compute it: inv rounded
     * to fp32, y_i = fl(weight_i fl(x_i inv)); every instruction set the same
     * bits. In double, the conversions to and from it on 4-lane halves bound
     * rmsnorm's bf16 rows under avx2 (README.md section 6). For rows whose
     * inv and weights stay within 2^-100 .. 2^100 (norms.c). */
    void (*scale_binary32)(const void *x, int bf16, int64_t n, double inv, const float *weight, float *y, int stream);
    /* dx_i = (weight_i dy_i - x_i along) inv in binary32, as fp32
     * implementations compute it (fla's, PyTorch's): along and inv rounded to
     * fp32, then fl(fl(fl(weight_i dy_i) - x_i along) inv) with the
     * subtraction fused (FMA); when sum_dy_y is not NULL, sum_dy_y[i] =
     * fl(sum_dy_y[i] + dy_i fl(x_i inv)) (FMA), rmsnorm's dweight, summed in
     * binary32 over a block's rows (the blocks then in double, norms.c). Every
     * instruction set the same bits. In double (the conversions to and from
     * binary32 on port 5) it took twice the time under avx2 (README.md
     * section 6). stream as for scale. */
    void (*project)(const void *x, const void *dy, int bf16, int64_t n, const float *weight, double along, double inv,
                    float *dx, float *sum_dy_y, int stream);
    /* The same in double, each dx_i rounded once to fp32 (each sum_dy_y[i]
     * once per term): for the rows whose scale would leave binary32's normal
     * range in the binary32 form (norms.c says which). */
    void (*project_double)(const void *x, const void *dy, int bf16, int64_t n, const float *weight, double along,
                           double inv, float *dx, float *sum_dy_y, int stream);
} lacs_cpu_norm_kernels;

/* ---- the approximations the instruction sets share ----
 * Fitted for the relative error of the function (not of the polynomial) by
 * weighted least squares on 200 Chebyshev nodes, reweighted to minimax
 * (Lawson's iteration), in mpmath at 50 digits; the errors below are the
 * fits' in exact arithmetic. */

/* tanh(a) = a + a t P(t), t = a^2, for 0 <= a < LACS_TANH_SPLIT (the scalar
 * kernels, in double): relative error of the fit 5.1e-10 (2^-30.9) on
 * [0, 0.625). The odd form gives tanh(a) = a exactly where a t is below
 * half an ulp of a, so subnormal and tiny arguments come back as
 * themselves, -0 as -0. */
#define LACS_TANH_SPLIT 0.625
static const double lacs_tanh_poly[6] = {-0.333333306712076,   0.13333201322789188,    -0.053946218262827259,
                                         0.021697930078653842, -0.0081709768377938172, 0.0021374219740641252};

/* exp(r) = 1 + r + r^2 Q(r) for |r| <= ln(2)/2: relative error of the fit
 * 3.1e-9 (2^-28.3). exp(v) = 2^n exp(r) with n = round(v / ln 2) and
 * r = v - n ln 2, ln 2 split so that n * LACS_LN2_HI is exact for |n| < 2^12
 * (LACS_LN2_HI has 12 significant bits). */
static const double lacs_exp_poly[5] = {0.49999993451472626, 0.16666520687563107, 0.041668387408547037,
                                        0.0083687100353082497, 0.0013814611001063168};
#define LACS_LOG2E 1.4426950408889634
#define LACS_LN2_HI 0.693115234375
#define LACS_LN2_LO 3.1946184945309417e-05

/* softcap's d/dcap term h(u) = tanh(u) - u sech^2(u) = u^3 R(u^2) for |u| < 1,
 * where the difference cancels (h ~ (2/3) u^3): relative error of the fit
 * 4.4e-9 (2^-27.8). */
static const double lacs_softcap_dcap_poly[9] = {0.66666666370614728,  -0.53333286823901608,   0.32379726672117014,
                                                 -0.17482926465348735, 0.087962991474683266,   -0.041060188018364164,
                                                 0.016536640590649055, -0.0048472002524735348, 0.00072577452933311272};

/* The vector kernels' binary32 forms for softcap below |u| = 1, where its
 * argument mostly lies (a cap sits above the values it tames), in z = u^2,
 * fitted for the relative error of the function by weighted least squares
 * on 3000 Chebyshev nodes of [0, 1] reweighted to minimax (Lawson's
 * iteration), in double:
 *   tanh(u) = u + u z P(z): relative error of the fit 4.6e-9 (2^-27.7);
 *   sech^2(u) = 1 - z S(z): relative error of the fit 8.2e-9 (2^-26.9).
 * Their error in binary32 (Horner's rule, FMA) is stated where they are
 * used (norms_vector.h). */
static const double lacs_tanh_below_one_poly[7] = {-0.33333295431813093,    0.13332344571476018,
                                                   -0.053879802622159322,   0.021486657324387849,
                                                   -0.0079461060813504278,  0.0023013643498729711,
                                                   -0.00035845193452638952};
static const double lacs_sech2_below_one_poly[8] = {0.99999920501470385,  -0.66664161330918037,  0.37750206356699006,
                                                    -0.1953233971478559,  0.092828412945596434,  -0.037833870232316158,
                                                    0.011176832017052468, -0.0016819779090140596};

extern const lacs_cpu_norm_kernels lacs_cpu_norm_kernels_scalar;
extern const lacs_cpu_norm_kernels lacs_cpu_norm_kernels_avx2;
extern const lacs_cpu_norm_kernels lacs_cpu_norm_kernels_avx512;

#endif

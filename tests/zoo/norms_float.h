/* The float arithmetic of the norm zoo (tests/zoo/norms_f32.c): multiply-adds,
 * bf16 rounding, and the tanh and sech^2 a float kernel may use (SPEC.md
 * 4.15-4.18, N1, N4, N6).
 *
 * Everything here is binary32. The build uses -ffp-contract=off, so a * b + c
 * is two roundings unless ZOO_FMA is 1, where the sums use fmaf explicitly
 * (the Makefile's build/zoo/NAME_fma.so), as a kernel compiled for a machine
 * with fused multiply-add would. */
#ifndef ZOO_NORMS_FLOAT_H
#define ZOO_NORMS_FLOAT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifndef ZOO_FMA
#define ZOO_FMA 0
#endif

/* a * b + c: one rounding in the FMA build, two otherwise. */
static inline float multiply_add(float a, float b, float c)
{
#if ZOO_FMA
    return fmaf(a, b, c);
#else
    return a * b + c;
#endif
}

/* ---- bf16: the upper 16 bits of a binary32 ---- */

static inline float bf16_bits_to_float(uint16_t bits)
{
    uint32_t wide = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &wide, sizeof f);
    return f;
}

/* Rounds to the nearest bf16, ties to even, as a bf16 kernel stores its
 * outputs. A NaN is kept a quiet NaN with its sign, not rounded: a NaN whose
 * payload lies in the low 16 bits would round to an infinity, and one with
 * all payload bits set would carry into the sign bit. Infinities are exact; a
 * finite value at or above 3.3961e38 (halfway past the largest bf16) rounds to
 * infinity, as in IEEE. */
static inline float round_to_bf16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if (isnan(f))
        bits = (bits & 0xFFFF0000u) | 0x00400000u;
    else
        bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* ---- tanh ---- */

/* Eigen's generic_fast_tanh_float (also XLA's EmitFastTanh and onnxruntime's
 * MLAS tanh kernel): an odd rational minimax p(x)/q(x) of degrees 13 and 6,
 * the argument clamped to [-c, c] with c the first float where the quotient
 * reaches 1 (Eigen's two constants: 7.9053 evaluated without FMA, 7.9988 with
 * it, as measured for this code). Below |x| = 0.0004 it returns x itself
 * (tanh(x) = x to within x^3/3, under 2^-24 relative there), which also keeps
 * subnormal inputs that 0.0049 x would flush. The clamp is written with
 * comparisons so a NaN passes through (fminf/fmaxf would replace it by the
 * clamp). Its measured error is stated in tests/zoo/BUGS-norms.md. */
static inline float tanh_rational(float x)
{
    const float clamp = ZOO_FMA ? 7.99881172180175781f : 7.90531110763549805f;
    if (fabsf(x) < 0.0004f)
        return x;
    float xc = x > clamp ? clamp : x < -clamp ? -clamp : x;
    float x2 = xc * xc;
    float p = multiply_add(x2, -2.76076847742355e-16f, 2.00018790482477e-13f);
    p = multiply_add(x2, p, -8.60467152213735e-11f);
    p = multiply_add(x2, p, 5.12229709037114e-08f);
    p = multiply_add(x2, p, 1.48572235717979e-05f);
    p = multiply_add(x2, p, 6.37261928875436e-04f);
    p = multiply_add(x2, p, 4.89352455891786e-03f);
    p = xc * p;
    float q = multiply_add(x2, 1.19825839466702e-06f, 1.18534705686654e-04f);
    q = multiply_add(x2, q, 2.26843463243900e-03f);
    q = multiply_add(x2, q, 4.89352518554385e-03f);
    return p / q;
}

/* tanh from its definition, (e^x - e^-x) / (e^x + e^-x): both exponentials
 * overflow for |x| > 88.7 and the quotient is inf / inf = NaN. A real bug
 * (the bug tanh_overflow_nan); it also cancels to 0 for tiny |x|. */
static inline float tanh_from_exponentials(float x)
{
    float ep = expf(x), em = expf(-x);
    return (ep - em) / (ep + em);
}

/* ---- sech^2 = 1 - tanh^2, the derivative of tanh ---- */

/* 4 e / (1 + e)^2 with e = exp(-2|u|) (SPEC.md 4.18): no subtraction, no
 * overflow; 1 at 0, 0 at +-inf, NaN for NaN. 1 - tanh^2 instead rounds to 0
 * as soon as tanhf(u) rounds to +-1 (|u| > 9.01 in float) while the true
 * value, about 4 e^{-2|u|}, stays a normal float up to |u| ~ 44. */
static inline float sech2_from_exp(float u)
{
    float e = expf(-2 * fabsf(u)), one_plus_e = 1 + e;
    return 4 * e / (one_plus_e * one_plus_e);
}

/* 1 - t^2 from an already computed t = tanh(u), as torch's tanh_backward does
 * (grad * (1 - y * y)). One fused rounding in the FMA build. */
static inline float sech2_from_tanh(float t) { return multiply_add(-t, t, 1); }

/* u sech^2(u) with its limit 0 at u = +-inf (inf * 0 would be NaN), as the
 * reference does (SPEC.md 4.18): where sech^2 is 0 the product has
 * underflowed too. */
static inline float times_sech2(float u, float s2) { return s2 == 0 ? 0 : u * s2; }

#endif

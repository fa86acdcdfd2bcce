/* builtin:cpu: exp over the primitive layers (simd_avx512.h, simd_avx2.h,
 * simd_scalar.h; include one first), for the recurrent family's decays and
 * the attention forms' softmax: one algorithm for every instruction set.
 *
 * v_exp is Cephes' expf (the polynomial of cephes/single/expf.c,
 * netlib.org/cephes, about 1 ulp on the reduced range |r| <= ln2 / 2): x is
 * clamped to [-110, 89] (exp(-103.3) is half the smallest subnormal,
 * exp(88.73) the largest float: 0 below, +inf above), n = round(x / ln 2),
 * r = x - n ln 2 with ln 2 in two parts (the first of 9 significant bits, so
 * n C1 is exact), exp(x) = 2^n (1 + r + r^2 P(r)), the power applied by
 * v_scale_pow2, which rounds once into the subnormals as the libm does.
 * Within a few ulp everywhere (SPEC.md 11.1 permits it); NaN gives NaN (the
 * clamps keep their NaN operand: the constant comes first).
 */
#ifndef LACS_CPU_SIMD_MATH_H
#define LACS_CPU_SIMD_MATH_H

static inline vfloat v_exp(vfloat x)
{
    x = v_max(v_set1(-110.0f), x);
    x = v_min(v_set1(89.0f), x);
    const vfloat n = v_round(v_mul(x, v_set1(1.44269504088896341f)));
    vfloat r = v_fnma(n, v_set1(0.693359375f), x);
    r = v_fnma(n, v_set1(-2.12194440e-4f), r);
    vfloat p = v_set1(1.9875691500e-4f);
    p = v_fma(p, r, v_set1(1.3981999507e-3f));
    p = v_fma(p, r, v_set1(8.3334519073e-3f));
    p = v_fma(p, r, v_set1(4.1665795894e-2f));
    p = v_fma(p, r, v_set1(1.6666665459e-1f));
    p = v_fma(p, r, v_set1(5.0000001201e-1f));
    const vfloat er = v_add(v_fma(v_mul(r, r), p, r), v_set1(1.0f));
    return v_scale_pow2(er, n);
}

#endif

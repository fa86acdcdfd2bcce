/* builtin:cpu: exp, a transpose and a streamed copy over the primitive layers
 * (simd_avx512.h, simd_avx2.h, simd_scalar.h; include one first), for the
 * recurrent family's decays, its chunks' transposes and outputs, the
 * attention forms' softmax and the norms' outputs: one algorithm for every
 * instruction set.
 *
 * v_exp is Cephes' expf (v_exp_base2, below, its base-2 twin for a softmax's
 * weights; the polynomial of cephes/single/expf.c,
 * netlib.org/cephes, about 1 ulp on the reduced range |r| <= ln2 / 2): x is
 * clamped to [-110, 89] (exp(-103.97) is half the smallest subnormal,
 * exp(88.73) the largest float: 0 below, +inf above), n = round(x / ln 2),
 * r = x - n ln 2 with ln 2 in two parts (the first of 9 significant bits, so
 * n C1 is exact), exp(x) = 2^n e_r, e_r = 1 + r + r^2 P(r) in [0.7, 1.42].
 * Within a few ulp everywhere (SPEC.md 11.1 permits it); NaN gives NaN (the
 * clamps keep their NaN operand: the constant comes first).
 *
 * The power is applied without a floating-point underflow. Where n >= -125,
 * e_r 2^n is normal (v_scale_pow2; where every lane's n is also <= 127,
 * v_scale_pow2_normal, the same bits in a third of avx2's instructions:
 * checked on all 2^32 inputs under avx512 and avx2). Below, the result is under 2^-125, where
 * the floats are the multiples m 2^-149 (subnormal, or the first binade of
 * normals) and the float of m 2^-149 has the bit pattern m itself: m is e_r
 * 2^(n + 149) (exact: a normal number scaled by a power of two, under 2^24)
 * rounded to the nearest integer, ties to even, which is the one rounding
 * into the subnormals that a multiplication by 2^n would make, bit for bit,
 * and 0 from x = -103.98 down. Why: a multiplication whose result is
 * subnormal or underflows to 0 takes a microcode assist on Intel cores
 * (about a hundred cycles, for the whole vector), and exp's callers meet
 * such results by the million: FoX's logits of tokens far apart, exp(-inf)
 * of masked logits. On the Sapphire Rapids class Xeon of README.md section
 * 8.2.1 builtin:cpu's fox (T = 4096) took 258 ms with them and 49 ms with
 * the processor told to flush them (MXCSR FTZ and DAZ, a measurement only:
 * flushing would change the results).
 */
#ifndef LACS_CPU_SIMD_MATH_H
#define LACS_CPU_SIMD_MATH_H

/* e_r and n of exp(x) = 2^n e_r (the comment above), for x in [-110, 89]
 * (v_exp clamps first; a caller may pass any x and use the result only
 * where n turns out in [-125, 127], which x outside that range never gives:
 * there the clamps change nothing). */
/* c[0] r^5 + c[1] r^4 + ... + c[5] by Horner's rule, one FMA a step (the order the polynomials below were
 * measured in). */
static inline __attribute__((always_inline)) vfloat v_polynomial5(vfloat r, const float c[6])
{
    vfloat p = v_set1(c[0]);
    for (int i = 1; i < 6; i++)
        p = v_fma(p, r, v_set1(c[i]));
    return p;
}

static inline vfloat v_exp_reduced(vfloat x, vfloat *n_out)
{
    static const float expf_P[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                    4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
    const vfloat n = v_round_small(v_mul(x, v_set1(1.44269504088896341f))); /* |x log2 e| <= 159 */
    *n_out = n;
    vfloat r = v_fnma(n, v_set1(0.693359375f), x);
    r = v_fnma(n, v_set1(-2.12194440e-4f), r);
    return v_add(v_fma(v_mul(r, r), v_polynomial5(r, expf_P), r), v_set1(1.0f));
}

/* The same for the softmax rows' weights (attention_rows.h), reduced in base 2: t = x log2 e rounded once,
 * n = round(t), r = t - n (exact, |r| <= 1/2), e_r = 2^r = 1 + r P(r) by the polynomial of Cephes' exp2f
 * (cephes/single/exp2f.c, netlib.org/cephes; 1.3 ulp at most on the reduced range, measured). No two-part
 * reduction and one polynomial step fewer than v_exp_reduced: a softmax row's two kernels 10 % faster (README.md
 * section 5).
 * The price is t's rounding, a relative error of |x| 2^-24 in the result, as large as the one the row's
 * subtraction x = l - m already makes (FlashAttention's exp2, log2 e folded into the logits' scale, pays the
 * same); a softmax's weights that matter have |x| of a few units. Not for the EXP form, whose largest weights
 * have the largest x. */
static inline vfloat v_exp_base2_reduced(vfloat x, vfloat *n_out)
{
    static const float exp2f_P[6] = {1.535336188319500e-4f, 1.339887440266574e-3f, 9.618437357674640e-3f,
                                     5.550332471162809e-2f, 2.402264791363012e-1f, 6.931472028550421e-1f};
    const vfloat t = v_mul(x, v_set1(1.44269504088896341f));
    const vfloat n = v_round_small(t); /* |t| <= 159 after the clamps */
    *n_out = n;
    const vfloat r = v_sub(t, n);
    return v_fma(v_polynomial5(r, exp2f_P), r, v_set1(1.0f));
}

/* e_r 2^n for e_r in [0.7, 1.42] and n integral (or NaN), as the comment at the top says: the common case,
 * every lane's result normal (n in [-125, 127]), the power applied exactly by one product under avx2
 * (v_scale_pow2_normal; the same bits as v_scale_pow2's); below, the multiples of 2^-149 by integers. */
static inline vfloat v_exp_apply_power(vfloat er, vfloat n)
{
    if (vm_all(vm_and(vm_ge(n, v_set1(-125.0f)), vm_le(n, v_set1(127.0f)))))
        return v_scale_pow2_normal(er, n);
    const vfloat normal = v_scale_pow2(er, v_max(v_set1(-125.0f), n)); /* a NaN n is kept */
    const vfloat m = v_round(v_mul(er, v_pow2(v_min(v_set1(23.0f), v_add(n, v_set1(149.0f))))));
    return v_select(vm_lt(n, v_set1(-125.0f)), normal, v_from_bits(m));
}

/* x clamped to [-110, 89], where exp's reductions are meant (the comment at the top). */
static inline vfloat v_exp_clamp(vfloat x) { return v_min(v_set1(89.0f), v_max(v_set1(-110.0f), x)); }

static inline vfloat v_exp(vfloat x)
{
    vfloat n;
    const vfloat er = v_exp_reduced(v_exp_clamp(x), &n);
    return v_exp_apply_power(er, n);
}

/* exp(x) by v_exp_base2_reduced: the softmax rows' weights. */
static inline vfloat v_exp_base2(vfloat x)
{
    vfloat n;
    const vfloat er = v_exp_base2_reduced(v_exp_clamp(x), &n);
    return v_exp_apply_power(er, n);
}

/* out [cols x rows] (leading dimension ldo) = in [rows x cols] (ldi) transposed: 8 x 8 blocks by
 * simd_transpose_8x8, the edges element by element. */
static inline void simd_transpose(int64_t rows, int64_t cols, const float *in, int64_t ldi, float *out, int64_t ldo)
{
    const int64_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
    for (int64_t i = 0; i < rows8; i += 8)
        for (int64_t j = 0; j < cols8; j += 8)
            simd_transpose_8x8(in + i * ldi + j, ldi, out + j * ldo + i, ldo);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = i < rows8 ? cols8 : 0; j < cols; j++)
            out[j * ldo + i] = in[i * ldi + j];
}

/* dst[0..n) = src[0..n) with non-temporal stores where dst is aligned to a
 * whole vector (a head of ordinary stores up to the first boundary, the
 * tail after the last): an output larger than the caches is written without
 * reading each of its lines first (a quarter less traffic for a VJP, a third
 * for rmsnorm; the recurrent family's outputs on AMD's cores). The caller ends
 * its block with simd_store_fence(). */
static inline void stream_out(float *dst, const float *src, int64_t n)
{
    const int64_t past = (int64_t)(((uintptr_t)dst % (SIMD_LANES * sizeof(float))) / sizeof(float));
    int64_t i = past ? (SIMD_LANES - past < n ? SIMD_LANES - past : n) : 0;
    if (i > 0)
        v_store_first(dst, v_load_first(src, i), i);
    for (; i + SIMD_LANES <= n; i += SIMD_LANES)
        v_stream(dst + i, v_load_first(src + i, SIMD_LANES));
    if (i < n)
        v_store_first(dst + i, v_load_first(src + i, n - i), n - i);
}

#endif

/* builtin:cpu, the norm family's vector kernels (README.md section 6): one
 * algorithm, written once over a primitive layer (simd_avx512.h or
 * simd_avx2.h, which the including file, norms_avx512.c or norms_avx2.c,
 * includes first), building that instruction set's table
 * NORM_KERNELS (norms.h).
 *
 * The element-wise functions, in binary32 (bounds measured over all 2^32
 * fp32 inputs; tests/test_cpu_tanh.c asserts them on 2^26 of them, under
 * every instruction set):
 *   tanh    E / (E + 2), E = expm1(2|u|) from one range-reduced exp and one
 *           FMA, one division; u itself below |u| = 2^-12. At most
 *           2.61 ulp, exact at +-0 (sign kept), +-inf (+-1), NaN, and for
 *           |u| < 2^-12 and |u| >= 9.5. A fifth of the work of a correctly
 *           rounded form: DyT must run at the speed of memory (README.md).
 *   sech^2  4e / (1 + e)^2, e = exp(-2|u|) (SPEC.md 4.18), every rounding
 *           but the last recovered: at most 1.01 ulp; returned as a mantissa
 *           and a power of two, so that the VJPs' products are rounded once
 *           even where sech^2 is below fp32's range.
 *   DyISRU  x / sqrt(x^2 + C) as (w / sqrt(fma(x, x, C))) x + bias where
 *           nothing can overflow, else the reference's two branches
 *           (relative to the larger of |x| and sqrt(C)) as blends.
 * The VJPs form their products and sums in double (a product of two fp32
 * values is exact there): dx is rounded once, dweight, dbias, dalpha, dC,
 * dcap are summed in double.
 *
 * The layers differ in two places only, both within these bounds: 2^n
 * (v_scale_pow2: one rounding either way) and the reciprocal in sech^2's
 * correction (2^-14 or better).
 */
#include <math.h>
#include <string.h>

#include "norms.h"
#include "simd_math.h" /* stream_out */

/* ---- lanes ---- */

/* sum[i] += a[i] * b[i] in double for the lanes of m (a per-column partial
 * sum: dweight, dbias). */
static inline void add_products_to_columns(double *sum, vfloat a, vfloat b, vmask m)
{
    for (int high = 0; high <= 1; high++) {
        double *s = sum + high * (SIMD_LANES / 2);
        const vdouble total = vd_fma(vd_half(a, high), vd_half(b, high), vd_load_where(s, m, high));
        vd_store_where(s, total, m, high);
    }
}

/* acc += a * b * c in double for the lanes of m (a scalar gradient's terms:
 * masked so that a tail lane's 0 * NaN cannot reach the sum). */
static inline vdouble add_triple_products(vdouble acc, vfloat a, vfloat b, vfloat c, vmask m)
{
    for (int high = 0; high <= 1; high++)
        acc = vd_add_where(acc, m, high, vd_mul(vd_mul(vd_half(a, high), vd_half(b, high)), vd_half(c, high)));
    return acc;
}

/* The same with every lane present: no mask to form and apply. */
static inline vdouble add_triple_products_all(vdouble acc, vfloat a, vfloat b, vfloat c)
{
    for (int high = 0; high <= 1; high++)
        acc = vd_add(acc, vd_mul(vd_mul(vd_half(a, high), vd_half(b, high)), vd_half(c, high)));
    return acc;
}

/* Software prefetch of the line PREFETCH_BYTES past byte offset_bytes of p.
 * A vector of these kernels is long (some 40 instructions), so the
 * out-of-order window spans too few iterations to keep enough cache misses
 * in flight by itself: DyT over 64 MiB ran at 0.38 ns per element and
 * thread without, 0.24 with, the same as in cache. The address may lie past
 * the end of the array: a prefetch never faults. */
#define PREFETCH_BYTES 4096
static inline __attribute__((always_inline)) void prefetch_ahead(const void *p, int64_t offset_bytes)
{
    simd_prefetch((const void *)((uintptr_t)p + (uintptr_t)(offset_bytes + PREFETCH_BYTES)));
}

/* Software prefetch of p[i] (the address may lie past the end of the array: a prefetch never faults). */
static inline __attribute__((always_inline)) void prefetch_float(const float *p, int64_t i)
{
    simd_prefetch((const void *)((uintptr_t)p + (uintptr_t)i * sizeof(float)));
}

/* ---- exp, tanh, sech^2 ---- */

/* exp(v) = 2^n (1 + p), p = exp(r) - 1 = r + r^2 Q(r) in [-0.30, 0.42]
 * (norms.h), for v in [-745.2, 19] (|n| <= 1075: n LN2_HI is exact): returns
 * p and sets n. Callers form 1 + p (and, where they need it, its rounding
 * error (1 - (1 + p)) + p, exact by Fast2Sum) and scale by 2^n with
 * v_scale_pow2, which rounds once into the subnormals (and to 0 below
 * them). NaN v gives NaN. */
static inline vfloat exp_reduced_pow2(vfloat v, vfloat *n, vfloat *power);
static inline vfloat exp_reduced(vfloat v, vfloat *n)
{
    vfloat unused; /* the compiler drops its instructions */
    return exp_reduced_pow2(v, n, &unused);
}

/* p of exp(v) for n = round(v log2 e) given. */
static inline vfloat exp_reduced_at(vfloat v, vfloat n)
{
    vfloat r = v_fnma(n, v_set1((float)LACS_LN2_HI), v);
    r = v_fnma(n, v_set1((float)LACS_LN2_LO), r);
    vfloat q = v_set1((float)lacs_exp_poly[4]);
    for (int i = 3; i >= 0; i--)
        q = v_fma(q, r, v_set1((float)lacs_exp_poly[i]));
    return v_fma(v_mul(r, r), q, r);
}

/* The same, and 2^n in *power for n in [-126, 127] (v_round_small_pow2). */
static inline vfloat exp_reduced_pow2(vfloat v, vfloat *n, vfloat *power)
{
    *n = v_round_small_pow2(v_mul(v, v_set1((float)LACS_LOG2E)), power); /* |v log2 e| <= 1076 */
    return exp_reduced_at(v, *n);
}

/* exp_reduced_pow2 of v = 2a (tanh's and sech^2's argument), with v log2 e formed as a (2 log2 e): the same
 * product (a doubling is exact, and so is 2 log2 e's), formed beside v = a + a rather than after it, one
 * operation's latency off the chain that bounds the VJPs' loops (README.md section 6). */
static inline vfloat exp_twice_reduced_pow2(vfloat a, vfloat *n, vfloat *power)
{
    *n = v_round_small_pow2(v_mul(a, v_set1(2.0f * (float)LACS_LOG2E)), power);
    return exp_reduced_at(v_add(a, a), *n);
}

/* tanh(u) = E / (E + 2), E = expm1(2|u|) = 2^n (1 + p) - 1 =
 * (2^n - 1) + 2^n p with one FMA (2^n - 1 is exact for 0 <= n <= 24, and for
 * n = 0, |u| < 0.17, E = p itself: no cancellation near 0). |u| is capped at
 * 9.5, where tanh rounds to 1 (from 9.01; min returns a when it is NaN, so
 * NaN stays NaN). The sign is copied from u. For |u| >= 2^-12: below, E's
 * own rounding (2a + 2a^2 rounds up where tanh(a) = a - a^3/3 does not) can
 * put the result an ulp off, and the callers return u itself there
 * (tanh_lanes, DyT, softcap). Error: E's rounding (and p's, up to twice
 * relative to E where 2^n - 1 and 2^n p nearly cancel, n = 1), E + 2's and
 * the quotient's; the largest over all fp32 inputs is 2.61 ulp, at
 * |u| = 0x1.ff4f96p-5 (n = 0, just below a power of two of the result);
 * RMS 0.3 to 0.6 ulp by binade. */
static inline vfloat tanh_core(vfloat u)
{
    const vfloat a = v_abs(u);
    const vfloat capped = v_min(v_set1(9.5f), a);
    vfloat n, power; /* n in [0, 28] (NaN only with a NaN p) */
    const vfloat p = exp_twice_reduced_pow2(capped, &n, &power);
    const vfloat E = v_fma(power, p, v_sub(power, v_set1(1.0f)));
    return v_or_sign(v_div(E, v_add(E, v_set1(2.0f))), u); /* the quotient is >= +0 (or u's NaN) */
}

/* tanh(u) for every u: u itself below |u| = 2^-12, where tanh(u) = u to
 * fp32 rounding (subnormals and -0 included). */
static inline vfloat tanh_lanes(vfloat u)
{
    return v_select(vm_lt(v_abs(u), v_set1(0x1p-12f)), tanh_core(u), u);
}

/* sech^2(u) = 4e / (1 + e)^2 (SPEC.md 4.18), e = exp(-2|u|) = 2^n (1 + p),
 * returned as sech^2 = s 2^n with s = 4 (1 + p) / (1 + e)^2 in [0.35, 5.7]:
 * the callers multiply s by their other factors in double and scale last,
 * so that a product that is representable comes out with one rounding even
 * where sech^2 itself is below fp32's range (|u| > 52.4), and an infinite
 * factor gives +-inf wherever the reference's double sech^2 is positive.
 * That is up to |u| = 372.566589, where exp(-2|u|) underflows in double:
 * from there on s = 0, as the reference's sech^2 is (then inf * 0 = NaN, as
 * there). Every rounding before the last is recovered to first order, with
 * 1 + p = m + m_err (Fast2Sum, 1 >= |p|) and e = e_hi + e_lo:
 *   d = 1 + e_hi, d_err = ((1 - d) + e_hi) + e_lo (Fast2Sum, 1 >= e_hi);
 *   (1 + e)^2 = dd + dd_lo, dd = d^2, dd_lo = fma(d, d, -dd) + 2 d d_err;
 *   q = 4m / dd to 2^-14 (v_reciprocal), its remainder 4m - q dd by one
 *   FMA, s = q + (remainder + 4 m_err - q dd_lo) / dd.
 * What remains is exp's approximation (2^-28), the rounding of p, the
 * reciprocal's error on the correction (2^-28) and the last rounding:
 * sech^2 within 1 ulp (tests/test_cpu_tanh.c). NaN gives NaN. */
#define SECH2_POSITIVE_IN_DOUBLE 0x1.74910cp+8f
static inline vfloat sech2_scaled(vfloat p, vfloat n, vfloat a)
{
    const vfloat one = v_set1(1.0f), four = v_set1(4.0f);
    const vfloat m = v_add(one, p);
    const vfloat m_err = v_add(v_sub(one, m), p);
    const vfloat e = v_scale_pow2(m, n), e_lo = v_scale_pow2(m_err, n);
    const vfloat d = v_add(one, e);
    const vfloat d_err = v_add(v_add(v_sub(one, d), e), e_lo);
    const vfloat dd = v_mul(d, d);
    const vfloat dd_lo = v_fma(v_add(d, d), d_err, v_fms(d, d, dd));
    const vfloat reciprocal = v_reciprocal(dd);
    const vfloat four_m = v_mul(four, m);
    const vfloat q = v_mul(four_m, reciprocal);
    const vfloat remainder = v_fnma(q, dd_lo, v_fma(four, m_err, v_fnma(q, dd, four_m)));
    const vfloat scaled = v_fma(remainder, reciprocal, q);
    return v_select(vm_gt(a, v_set1(SECH2_POSITIVE_IN_DOUBLE)), scaled, v_zero());
}

/* sech^2(u) = *scaled 2^*exponent (sech2_scaled). |u| is capped at
 * 372.566589, where sech^2 becomes 0 (min returns a when it is NaN). */
static inline void sech2_of(vfloat u, vfloat *scaled, vfloat *exponent)
{
    const vfloat a = v_abs(u);
    const vfloat capped = v_min(v_set1(SECH2_POSITIVE_IN_DOUBLE), a);
    const vfloat p = exp_reduced(v_mul(capped, v_set1(-2.0f)), exponent);
    *scaled = sech2_scaled(p, *exponent, a);
}

/* a b c s 2^n for the low (high = 0) or high half of the lanes, in double:
 * a b and c s are exact there, their product one rounding, the scaling
 * exact; no intermediate overflow or underflow. */
static inline vdouble scaled_product_half(vfloat a, vfloat b, vfloat c, vfloat s, vfloat n, int high)
{
    const vdouble ab = vd_mul(vd_half(a, high), vd_half(b, high));
    const vdouble cs = vd_mul(vd_half(c, high), vd_half(s, high));
    return vd_scale_pow2(vd_mul(ab, cs), n, high);
}

/* a b c s 2^n rounded once to fp32. */
static inline vfloat scaled_product(vfloat a, vfloat b, vfloat c, vfloat s, vfloat n)
{
    return v_from_halves(scaled_product_half(a, b, c, s, n, 0), scaled_product_half(a, b, c, s, n, 1));
}

/* acc += a b c s 2^n in double, for the lanes of m. */
static inline vdouble add_scaled_products(vdouble acc, vfloat a, vfloat b, vfloat c, vfloat s, vfloat n, vmask m)
{
    acc = vd_add_where(acc, m, 0, scaled_product_half(a, b, c, s, n, 0));
    return vd_add_where(acc, m, 1, scaled_product_half(a, b, c, s, n, 1));
}

/* ---- the VJPs' fast path ----
 * Where every lane of a vector is tame (x and dy of magnitude at most 2^40,
 * not NaN; |u| <= 9.5, so that sech^2(u) >= 2^-27; the weights and the
 * parameter checked once), no product of the VJPs overflows and none
 * underflows but by the size of its own factors: they are formed in
 * binary32 (an ordinary fp32 algorithm, a few ulp; SPEC.md 11.1), the sums
 * in double as everywhere. A vector with any other lane (an infinity, a NaN,
 * an extreme value) takes the exact path above, which rounds each output
 * once from double: the special values come out as the reference's. Several
 * times less work, for the data the ops meet. */

/* The lanes where |v| <= 2^40 (not NaN, not inf). */
static inline vmask tame(vfloat v) { return vm_le(v_abs(v), v_set1(0x1p40f)); }

/* The lanes where v is 0 or 2^-40 <= |v| <= 2^40: a factor (a weight, a
 * parameter) whose products with tame values stay normal. */
static inline vmask tame_factor(vfloat v)
{
    const vfloat a = v_abs(v);
    return vm_or(vm_and(vm_ge(a, v_set1(0x1p-40f)), vm_le(a, v_set1(0x1p40f))), vm_le(a, v_zero()));
}

/* tanh(u) and sech^2(u) for |u| <= 9.5 from one exp and one reciprocal:
 * E = expm1(2|u|) = (2^n - 1) + 2^n p with one FMA (tanh_core's; E = p
 * itself for n = 0: no cancellation near 0), r = 1 / (E + 2) (correctly
 * rounded, v_reciprocal_fine), tanh(|u|) = E r and
 * sech^2 = 4 (1 + E) r^2 (= 1 - tanh^2 without its cancellation; E + 2 <=
 * 2e8, so nothing overflows); u itself below |u| = 2^-12, where sech^2 = 1
 * to fp32 rounding. About 3 ulp each. */
static inline void tanh_sech2_tame(vfloat u, vfloat *t, vfloat *s2)
{
    const vfloat one = v_set1(1.0f), two = v_set1(2.0f);
    const vfloat a = v_abs(u);
    vfloat n, power;
    const vfloat p = exp_twice_reduced_pow2(a, &n, &power);
    const vfloat E = v_fma(power, p, v_sub(power, one));
    const vfloat r = v_reciprocal_fine(v_add(E, two));
    const vmask tiny = vm_lt(a, v_set1(0x1p-12f));
    *t = v_select(tiny, v_copysign(v_mul(E, r), u), u);
    *s2 = v_select(tiny, v_mul(v_mul(v_set1(4.0f), v_add(one, E)), v_mul(r, r)), one);
}

/* acc += v in double for the lanes of m (v a product formed in fp32). */
static inline vdouble add_to_sum(vdouble acc, vfloat v, vmask m)
{
    acc = vd_add_where(acc, m, 0, vd_half(v, 0));
    return vd_add_where(acc, m, 1, vd_half(v, 1));
}

static void norms_tanh(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i += SIMD_LANES)
        v_store_first(y + i, tanh_lanes(v_load_first(x + i, n - i)), n - i);
}

static void norms_sech2(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i += SIMD_LANES) {
        vfloat s2, exponent;
        sech2_of(v_load_first(x + i, n - i), &s2, &exponent);
        v_store_first(y + i, v_scale_pow2(s2, exponent), n - i);
    }
}

/* ---- N1: DyT ---- */

/* y = w tanh(alpha x) + bias, one FMA (w t + bias rounded once). Below
 * |alpha x| = 2^-12, where tanh(u) = u to fp32 rounding, y = (w alpha) x +
 * bias instead: alpha x may underflow in fp32 (x subnormal, small alpha)
 * where the reference's double product does not, and the FMA keeps the
 * product's digits and its sign (a tiny negative w alpha x plus a +0 bias is
 * -0, as in the reference, where w (-0) + 0 would be +0). */
static inline vfloat dyt_lanes(vfloat x, vfloat w, vfloat bias, vfloat alpha)
{
    const vfloat u = v_mul(alpha, x);
    const vfloat y = v_fma(w, tanh_core(u), bias);
    const vmask small = vm_lt(v_abs(u), v_set1(0x1p-12f));
    /* the common vector, no lane that small: y itself, as the select would give it, without the other form's
     * product and FMA (DyT 7-11 % faster under avx2, 9-10 % under avx512; the same test in softcap_lanes measured
     * 7 % slower under avx512 and stays out) */
    if (vm_none(small))
        return y;
    return v_select(small, y, v_fma(v_mul(w, alpha), x, bias));
}

/* table[m] = tanh_core(alpha x) for x the bf16 of bits m, where dyt_lanes takes tanh's form (|alpha x| >=
 * 2^-12) and x is not a NaN (whose bits the arithmetic carries); LACS_CPU_DYT_TABLE_OTHER elsewhere (norms.h).
 * The vectors wholly below 2^-12 are not computed (their exp's tiny products take microcode assists), nor
 * those wholly at or above 9.5 (NaNs aside), where tanh_core(u) is tanh_core(+-9.5): its cap. For x < 0,
 * tanh_core(alpha x) is -tanh_core(alpha |x|) (tanh_core is odd). */
static inline void dyt_table_fill(double alpha_double, float *table)
{
    const vfloat alpha = v_set1((float)alpha_double), other = v_set1(LACS_CPU_DYT_TABLE_OTHER);
    const vfloat at_cap = tanh_core(v_set1(9.5f)); /* every lane tanh_core(9.5) */
    enum { BATCH = 512 };
    uint16_t bits[BATCH]; /* written before they are loaded (dyt_vjp_table_fill) */
    for (int32_t m = 0; m < LACS_CPU_DYT_TABLE_MAGNITUDES; m += SIMD_LANES) {
        if (m % BATCH == 0)
            for (int j = 0; j < BATCH; j++)
                bits[j] = (uint16_t)(m + j);
        const vfloat x = v_load_bf16(bits + m % BATCH);
        const vfloat u = v_mul(alpha, x), a = v_abs(u);
        const vmask tanh_form = vm_ge(a, v_set1(0x1p-12f)); /* false for NaN */
        vfloat t = other;
        if (vm_all(vm_ge(a, v_set1(9.5f))))
            t = v_or_sign(at_cap, u);
        else if (!vm_none(tanh_form))
            t = tanh_core(u);
        v_store_first(table + m, v_select(tanh_form, other, t), SIMD_LANES);
    }
}

/* ---- N5: DyISRU ---- */

/* The parts of x / sqrt(x^2 + C) relative to the larger of |x| and s =
 * sqrt(C) (reference/norms.c, isru): with ge = (|x| >= s), t = the smaller
 * over the larger (r or |q|), p = 1 + t^2 in [1, 2], sp = sqrt(p):
 *   ge:  f = sign(x) / sp               lt:  f = x / (s sp)
 * NaN x fails |x| >= s and gives NaN; x = +-inf gives t = 0, f = +-1;
 * x = 0 with C = 0 gives t = 0/0, NaN, as the reference. */
typedef struct {
    vmask ge;
    vfloat a, t, p, sp;
} isru_parts;

static inline isru_parts isru_split(vfloat x, vfloat s)
{
    isru_parts v;
    v.a = v_abs(x);
    v.ge = vm_ge(v.a, s);
    const vfloat larger = v_select(v.ge, s, v.a), smaller = v_select(v.ge, v.a, s);
    v.t = v_div(smaller, larger);
    v.p = v_fma(v.t, v.t, v_set1(1.0f));
    v.sp = v_sqrt(v.p);
    return v;
}

static inline vfloat isru_value(const isru_parts *v, vfloat x, vfloat s)
{
    const vfloat numerator = v_select(v->ge, x, v_copysign(v_set1(1.0f), x));
    const vfloat denominator = v_select(v->ge, v_mul(s, v->sp), v->sp);
    return v_div(numerator, denominator);
}

/* y = w f(x) + bias as (w / denominator) numerator + bias, one FMA, with
 * f = numerator / denominator (isru_value): in the second branch the
 * numerator is x itself, so that where x / (s sp) underflows (x subnormal,
 * C large) the FMA still sees the exact x: the digits and the sign of a tiny
 * w f are kept (a tiny negative w f plus a +0 bias is -0, as in the
 * reference). The same number of roundings as w (x / d) + bias. */
static inline vfloat dyisru_lanes(vfloat x, vfloat w, vfloat bias, vfloat s)
{
    const isru_parts v = isru_split(x, s);
    const vfloat numerator = v_select(v.ge, x, v_copysign(v_set1(1.0f), x));
    const vfloat denominator = v_select(v.ge, v_mul(s, v.sp), v.sp);
    return v_fma(v_div(w, denominator), numerator, bias);
}

/* The same where nothing can overflow or underflow: C in [2^-100, 2^100]
 * (checked once per call: dyisru_fast_C) and |x| <= 2^60 in all lanes
 * (checked per vector by the caller): then x^2 + C is a normal fp32 value
 * and y = (w / sqrt(fma(x, x, C))) x + bias, four roundings, a third of the
 * work of the branches. */
static inline vfloat dyisru_lanes_fast(vfloat x, vfloat w, vfloat bias, vfloat C)
{
    return v_fma(v_div(w, v_sqrt(v_fma(x, x, C))), x, bias);
}

static inline int dyisru_fast_C(double C) { return C >= 0x1p-100 && C <= 0x1p100; }

/* DyISRU's gradients in double, for the low (high = 0) or high half of the
 * lanes: the reference's two branches (reference/norms.c, isru) in its
 * arithmetic, so that dx is rounded once from a double value (the fp32 chain
 * of t, p, sqrt(p) and p^{3/2} cost up to 3.5 ulp):
 *   ge = |x| >= s:  t = s/|x|,  df/dx = t^2 / (|x| p32),  -df/dC = sign(x) 0.5 / (|x|^2 p32)
 *   lt:             t = |x|/s,  df/dx = 1 / (s p32),      -df/dC = 0.5 x / (s C p32)
 * p = 1 + t^2, p32 = p sqrt(p); no overflow or underflow in double (|x|^2
 * would underflow fp32 below 1e-19). C = 0, x != 0: df/dx = 0 exactly,
 * df/dC = -sign(x)/(2x^2); x = +-inf: both 0; x = C = 0: NaN. Writes
 * dx = dy w df/dx and dy w (-df/dC). s and C are the fp32 values, widened. */
static inline void isru_gradients_half(vfloat g, vfloat w, vfloat x, double s, double C, int high, vdouble *dx,
                                       vdouble *minus_dC_term)
{
    const vdouble xd = vd_half(x, high);
    const vdouble gw = vd_mul(vd_half(g, high), vd_half(w, high));
    const vdouble sd = vd_set1(s), one = vd_set1(1.0), half = vd_set1(0.5);
    const vdouble a = vd_abs(xd);
    const vdmask ge = vd_ge(a, sd);
    const vdouble larger = vd_select(ge, sd, a), smaller = vd_select(ge, a, sd);
    const vdouble t = vd_div(smaller, larger);
    const vdouble p = vd_fma(t, t, one);
    const vdouble p32 = vd_mul(p, vd_sqrt(p));
    const vdouble dfdx_numerator = vd_select(ge, one, vd_mul(t, t));
    *dx = vd_div(vd_mul(gw, dfdx_numerator), vd_mul(larger, p32));
    const vdouble dC_numerator = vd_select(ge, vd_mul(half, xd), vd_or_sign(half, xd));
    const vdouble dC_denominator = vd_mul(vd_select(ge, vd_set1(s * C), vd_mul(a, a)), p32);
    *minus_dC_term = vd_div(vd_mul(gw, dC_numerator), dC_denominator);
}

/* ---- the VJPs of DyT and DyISRU: one walk, the columns' sums in strips ----
 *
 * Each element gives dx (written), a term of the scalar parameter's gradient
 * (dalpha or dC) and, for the weight and the bias, dy f(x) and dy summed down
 * the columns. On the fast path those sums are kept in fp32 for a while: the
 * parameter's terms per lane over a row of a strip of VJP_STRIP columns, the
 * column sums over VJP_FLUSH_ROWS rows of the strip (8 KiB: they stay in L1);
 * then each is added into the block's double sums. An order of summation
 * (SPEC.md 11.1) that changes a sum by at most a few hundred units in the
 * last place of its terms' magnitudes, where summing straight into doubles
 * cost more than the element's arithmetic. A vector that is not tame
 * (fast-path comment above) adds its exact terms into the doubles directly.
 * The loops are written once with the op and the input type as parameters
 * and called with constants, so that each gets its own loop. */
#define VJP_STRIP 1024
#define VJP_FLUSH_ROWS 8

typedef enum { VJP_DYT, VJP_DYISRU } vjp_op;

/* What one vector of a VJP gives besides dx: f(x) (dweight's factor) and,
 * on the fast path, its parameter term in fp32 (else it was added to sum). */
typedef struct {
    vfloat f, term;
    vdouble sum;
    int fast;
} vjp_lanes;

/* One vector of DyT's VJP, f = tanh(alpha x): dx = dy w alpha sech^2 and the
 * dalpha term dy w x sech^2 (x sech^2 = 0 where sech^2 = 0: the limit at
 * x = +-inf, SPEC.md 4.18; dy w 0 is still NaN for a NaN or infinite dy w,
 * as in the reference). Exact path: formed in double and rounded once
 * (scaled_product). */
static inline __attribute__((always_inline)) vjp_lanes dyt_vjp_lanes(vfloat x, vfloat g, vfloat w, vfloat alpha,
                                                                     int w_alpha_tame, vmask m, float *dx,
                                                                     int64_t count, vdouble sum)
{
    vjp_lanes out = {.sum = sum};
    const vfloat u = v_mul(alpha, x);
    out.fast = w_alpha_tame && vm_all(vm_and(vm_and(tame(x), tame(g)), vm_le(v_abs(u), v_set1(9.5f))));
    if (out.fast) {
        vfloat s2;
        tanh_sech2_tame(u, &out.f, &s2);
        const vfloat gw = v_mul(g, w);
        out.term = v_mul(v_mul(gw, x), s2);
        v_store_first(dx, v_mul(v_mul(gw, alpha), s2), count);
        return out;
    }
    vfloat s2, exponent;
    sech2_of(u, &s2, &exponent);
    out.sum = add_scaled_products(sum, g, w, v_zero_unless(vm_ne(s2, v_zero()), x), s2, exponent, m);
    v_store_first(dx, scaled_product(g, w, alpha, s2, exponent), count);
    out.f = tanh_lanes(u);
    out.term = v_zero();
    return out;
}

/* One vector of DyISRU's VJP, f = x / sqrt(x^2 + C): dx = dy w df/dx and the
 * term dy w (-df/dC) (the parameter's sum is of -df/dC terms). Fast path,
 * where x and dy are tame, C in [2^-30, 2^30] and |x| <= 2^20:
 * r = 1 / sqrt(x^2 + C), df/dx = C r^3, -df/dC = x r^3 / 2, f = x r, all
 * normal in fp32. Exact path: the reference's two branches in double
 * (isru_gradients_half). */
static inline __attribute__((always_inline)) vjp_lanes dyisru_vjp_lanes(vfloat x, vfloat g, vfloat w, vfloat C,
                                                                        vfloat s, double s_d, double C_d, int C_tame,
                                                                        vmask m, float *dx, int64_t count, vdouble sum)
{
    vjp_lanes out = {.sum = sum};
    out.fast = C_tame && vm_all(vm_and(vm_and(tame(x), tame(g)), vm_le(v_abs(x), v_set1(0x1p20f))));
    if (out.fast) {
        const vfloat r = v_div(v_set1(1.0f), v_sqrt(v_fma(x, x, C)));
        const vfloat r3 = v_mul(v_mul(r, r), r), gw = v_mul(g, w);
        v_store_first(dx, v_mul(gw, v_mul(C, r3)), count);
        out.term = v_mul(gw, v_mul(v_mul(v_set1(0.5f), x), r3));
        out.f = v_mul(x, r);
        return out;
    }
    vdouble dx_lo, dx_hi, dC_lo, dC_hi;
    isru_gradients_half(g, w, x, s_d, C_d, 0, &dx_lo, &dC_lo);
    isru_gradients_half(g, w, x, s_d, C_d, 1, &dx_hi, &dC_hi);
    out.sum = vd_add_where(vd_add_where(sum, m, 0, dC_lo), m, 1, dC_hi);
    v_store_first(dx, v_from_halves(dx_lo, dx_hi), count);
    const isru_parts v = isru_split(x, s);
    out.f = isru_value(&v, x, s);
    out.term = v_zero();
    return out;
}

/* Whether every weight times `factor` is tame (DyT's w alpha; factor 1: w). */
static int weights_tame(const float *weight, int64_t dim, float factor)
{
    for (int64_t c = 0; c < dim; c += SIMD_LANES)
        if (!vm_all(tame_factor(v_mul(v_load_first(weight + c, dim - c), v_set1(factor)))))
            return 0;
    return 1;
}

/* The front of DyT's common vector at column c (its loads, its test, the exp and the reciprocal: the long
 * chain), into *x, *g, *u, *E, *r; whether it is common (if not, its values are not used: nothing was stored). */
static inline __attribute__((always_inline)) int dyt_common_front(const void *xs, const void *dys, int bf16,
                                                                  int64_t row, int64_t dim, int64_t c,
                                                                  const float *dx_ahead, vfloat alpha, vfloat *x,
                                                                  vfloat *g, vfloat *u, vfloat *E, vfloat *r)
{
    const int64_t size = bf16 ? 2 : 4;
    /* the next row's vector (the strip walks the rows), and its dx's line (vjp_rows) */
    simd_prefetch((const char *)xs + (row + dim + c) * size);
    simd_prefetch((const char *)dys + (row + dim + c) * size);
    prefetch_float(dx_ahead, c);
    *x = v_load_any(xs, bf16, row + c, SIMD_LANES);
    *g = v_load_any(dys, bf16, row + c, SIMD_LANES);
    *u = v_mul(alpha, *x);
    const vfloat a = v_abs(*u);
    const int common = vm_all(vm_and(vm_le(v_abs(*g), v_set1(0x1p40f)),
                                     vm_and(vm_le(a, v_set1(9.5f)), vm_ge(a, v_set1(0x1p-12f)))));
    vfloat n, power;
    const vfloat p = exp_twice_reduced_pow2(a, &n, &power);
    *E = v_fma(power, p, v_sub(power, v_set1(1.0f)));
    *r = v_reciprocal_fine(v_add(*E, v_set1(2.0f)));
    return common;
}

/* The back of DyT's common vector at column c: dx, the dalpha term into *part, the strip's column sums. */
static inline __attribute__((always_inline)) void dyt_common_back(int64_t c, vfloat x, vfloat g, vfloat u, vfloat E,
                                                                  vfloat r, const float *weight, vfloat alpha,
                                                                  float *dx_row, float *pw, float *pb, vfloat *part)
{
    const vfloat s2 = v_mul(v_fma(E, v_set1(4.0f), v_set1(4.0f)), v_mul(r, r)); /* 4 (1 + E) r^2 */
    const vfloat gw = v_mul(g, v_load_first(weight + c, SIMD_LANES));
    v_store_first(dx_row + c, v_mul(v_mul(gw, alpha), s2), SIMD_LANES);
    *part = v_fma(v_mul(gw, x), s2, *part);
    const vfloat f = v_or_sign(v_mul(E, r), u); /* dweight's factor */
    v_store_first(pw + c, v_fma(g, f, v_load_first(pw + c, SIMD_LANES)), SIMD_LANES);
    v_store_first(pb + c, v_add(g, v_load_first(pb + c, SIMD_LANES)), SIMD_LANES);
}

/* The VJPs of DyT and DyISRU over the common vectors of one row of a strip,
 * from column c while they last; returns the column of the first vector
 * that is not common (end if none). No masks, no selects, the parameter's
 * term added by one FMA, the same dx, dweight and dbias bits as the fast
 * path's (dyt_vjp_lanes, dyisru_vjp_lanes). Nearly every vector of ordinary
 * data is common, and this loop runs a quarter fewer instructions than the
 * general one (optimized/cpu/README.md section 6). DyT's is
 * software-pipelined: the front of the next vector beside the back of this
 * one, so that the back's instructions do not wait in the scheduler for the
 * front's long chain (in L2, one thread: avx2 5 %, avx512 3 % faster;
 * README.md section 6); a front that is not common is thrown away.
 *   DyT: dy of magnitude at most 2^40 (not NaN) and every |u| = |alpha x| in
 *   [2^-12, 9.5], with the weights times alpha tame and |alpha| >= 2^-30
 *   (checked once per call: then |u| <= 9.5 holds x to |x| <= 2^34, and a
 *   NaN or infinite x fails it): tanh_sech2_tame's arithmetic without its
 *   selects for the lanes below 2^-12 (here none; such a lane comes once in
 *   some 2^11 for unit x).
 *   DyISRU: |x| <= 2^20 and |dy| <= 2^40 (neither NaN), with the weights and
 *   C tame (checked once per call). */
static inline __attribute__((always_inline)) int64_t vjp_common_run(vjp_op op, const void *xs, const void *dys,
                                                                     int bf16, int64_t row, int64_t dim, int64_t c,
                                                                     int64_t end, const float *weight,
                                                                     vfloat parameter, float *dx_row,
                                                                     const float *dx_ahead, float *pw, float *pb,
                                                                     vfloat *part_param)
{
    const int64_t size = bf16 ? 2 : 4;
    vfloat part = *part_param;
    if (op == VJP_DYT) { /* software-pipelined: the next vector's front beside this one's back */
        vfloat x, g, u, E, r;
        if (c < end && dyt_common_front(xs, dys, bf16, row, dim, c, dx_ahead, parameter, &x, &g, &u, &E, &r))
            for (;;) {
                if (c + SIMD_LANES >= end) { /* the row's last vector */
                    dyt_common_back(c, x, g, u, E, r, weight, parameter, dx_row, pw, pb, &part);
                    c += SIMD_LANES;
                    break;
                }
                vfloat x1, g1, u1, E1, r1;
                const int next_common =
                    dyt_common_front(xs, dys, bf16, row, dim, c + SIMD_LANES, dx_ahead, parameter, &x1, &g1, &u1,
                                     &E1, &r1);
                dyt_common_back(c, x, g, u, E, r, weight, parameter, dx_row, pw, pb, &part);
                c += SIMD_LANES;
                if (!next_common)
                    break;
                x = x1;
                g = g1;
                u = u1;
                E = E1;
                r = r1;
            }
        *part_param = part;
        return c;
    }
    for (; c < end; c += SIMD_LANES) {
        /* the next row's vector (the strip walks the rows), and its dx's line (vjp_rows) */
        simd_prefetch((const char *)xs + (row + dim + c) * size);
        simd_prefetch((const char *)dys + (row + dim + c) * size);
        prefetch_float(dx_ahead, c);
        const vfloat x = v_load_any(xs, bf16, row + c, SIMD_LANES), g = v_load_any(dys, bf16, row + c, SIMD_LANES);
        if (!vm_all(vm_and(vm_le(v_abs(g), v_set1(0x1p40f)), vm_le(v_abs(x), v_set1(0x1p20f)))))
            break;
        const vfloat r = v_div(v_set1(1.0f), v_sqrt(v_fma(x, x, parameter)));
        const vfloat r3 = v_mul(v_mul(r, r), r), gw = v_mul(g, v_load_first(weight + c, SIMD_LANES));
        v_store_first(dx_row + c, v_mul(gw, v_mul(parameter, r3)), SIMD_LANES);
        part = v_fma(gw, v_mul(v_mul(v_set1(0.5f), x), r3), part);
        v_store_first(pw + c, v_fma(g, v_mul(x, r), v_load_first(pw + c, SIMD_LANES)), SIMD_LANES);
        v_store_first(pb + c, v_add(g, v_load_first(pb + c, SIMD_LANES)), SIMD_LANES);
    }
    *part_param = part;
    return c;
}

/* ---- DyT's VJP in the bf16 tier: by table (norms.h) ---- */

/* table[2 m], table[2 m + 1]: t and sech^2 of
 * tanh_sech2_tame(alpha x) for x the bf16 of bits m (every m < 2^16), where the common loop
 * takes x (vjp_common_run: x tame, |alpha x| in [2^-12, 9.5]); 0 and 0
 * where it does not. The magnitudes first (m < 2^15): |alpha x| grows with m (x finite; then the
 * infinities, the NaNs), so from the first vector with no lane at or below
 * 9.5 on, none is: the rest is zeroed. The vectors wholly below 2^-12 are
 * not computed (their exp's products, r^2 below 2^-126 from |x| < 2^-63 on,
 * took a microcode assist each: the fill took 54 us, now 13 for alpha =
 * 0.5). Then x < 0 (m + 2^15, the sign bit set): t is -t(|x|) (alpha x is -(alpha |x|) exactly, and
 * tanh_sech2_tame odd in it), sech^2 is sech^2(|x|), 0 and 0 stay 0 (-0 and 0). */
static inline void dyt_vjp_table_fill(double alpha_double, float *table)
{
    const vfloat alpha = v_set1((float)alpha_double);
    enum { BATCH = 512 };
    uint16_t bits[BATCH]; /* the batch's bit patterns, written before they are loaded (not eight stores
                             then a vector load that waits for them) */
    int32_t m = 0;
    for (; m < LACS_CPU_DYT_TABLE_MAGNITUDES; m += SIMD_LANES) {
        if (m % BATCH == 0)
            for (int j = 0; j < BATCH; j++)
                bits[j] = (uint16_t)(m + j);
        const vfloat x = v_load_bf16(bits + m % BATCH);
        const vfloat u = v_abs(v_mul(alpha, x));
        const vmask within = vm_and(tame(x), vm_le(u, v_set1(9.5f)));
        if (vm_none(within))
            break;
        const vmask taken = vm_and(within, vm_ge(u, v_set1(0x1p-12f)));
        vfloat t = v_zero(), s2 = v_zero();
        if (!vm_none(taken))
            tanh_sech2_tame(v_mul(alpha, x), &t, &s2);
        v_store_pair(table + 2 * m, v_select(taken, v_zero(), t), v_select(taken, v_zero(), s2));
    }
    memset(table + 2 * m, 0, (size_t)(LACS_CPU_DYT_TABLE_MAGNITUDES - m) * 2 * sizeof(float));
    float *const negative = table + 2 * LACS_CPU_DYT_TABLE_MAGNITUDES;
    for (int32_t j = 0; j < m; j++) {
        negative[2 * j] = -table[2 * j];
        negative[2 * j + 1] = table[2 * j + 1];
    }
    memset(negative + 2 * m, 0, (size_t)(LACS_CPU_DYT_TABLE_MAGNITUDES - m) * 2 * sizeof(float));
}

#ifdef NORMS_DYT_VJP_TABLE
/* vjp_common_run for DyT in the bf16 tier with the table: t and sech^2 looked up by x's bits, side by side
 * (one 64-bit load per lane: two lookups of t and of sech^2, each a load per lane, were the loop's
 * bound on the EPYC of optimized/cpu/README.md section 8.2.13, 20 % slower in L2), where every lane's
 * sech^2 is in the table (> 0) and dy is tame: the same vectors as vjp_common_run takes, and the same
 * bits. */
static inline __attribute__((always_inline)) int64_t dyt_table_run(const uint16_t *xs, const uint16_t *dys,
                                                                   int64_t row, int64_t dim, int64_t c, int64_t end,
                                                                   const float *table, const float *weight,
                                                                   vfloat alpha, float *dx_row, const float *dx_ahead,
                                                                   float *pw, float *pb, vfloat *part_param)
{
    vfloat part = *part_param;
    for (; c < end; c += SIMD_LANES) {
        /* the next row's vector (the strip walks the rows), and its dx's line (vjp_rows), on every vector:
         * once per line (every 32 and 16 columns), 5 % less time in L2, 6-10 % more from memory */
        simd_prefetch(xs + row + dim + c);
        simd_prefetch(dys + row + dim + c);
        prefetch_float(dx_ahead, c);
        vfloat t, s2;
        v_table_bf16_pair(table, xs + row + c, &t, &s2);
        const vfloat g = v_load_bf16(dys + row + c);
        if (!vm_all(vm_and(vm_lt(v_zero(), s2), vm_le(v_abs(g), v_set1(0x1p40f)))))
            break;
        const vfloat x = v_load_bf16(xs + row + c);
        const vfloat gw = v_mul(g, v_load_first(weight + c, SIMD_LANES));
        v_store_first(dx_row + c, v_mul(v_mul(gw, alpha), s2), SIMD_LANES);
        part = v_fma(v_mul(gw, x), s2, part);
        v_store_first(pw + c, v_fma(g, t, v_load_first(pw + c, SIMD_LANES)), SIMD_LANES);
        v_store_first(pb + c, v_add(g, v_load_first(pb + c, SIMD_LANES)), SIMD_LANES);
    }
    *part_param = part;
    return c;
}
#endif

/* What a VJP's walk reads, in locals (forward_walk's reason, below). */
typedef struct {
    const void *xs, *dys;
    const float *weight;
    double *sum_weight, *sum_bias;
    float *part_weight, *part_bias; /* the strip's column sums in fp32, indexed from the strip's first column */
    vfloat parameter, s;
    float param, root;
    int w_tame;
} vjp_walk;

/* One vector of a VJP's row: columns [c, c + count) of row `row`, dx to dx
 * (column c's), the fast path's parameter terms into *part_param, the exact
 * path's into *sum_param. full: count is SIMD_LANES (a constant: no masks). */
static inline __attribute__((always_inline)) void vjp_vector(const vjp_walk *k, vjp_op op, int bf16, int full,
                                                            int64_t row, int64_t c, int64_t c0, int64_t count,
                                                            float *dx, vfloat *part_param, vdouble *sum_param)
{
    const vfloat x = v_load_any(k->xs, bf16, row + c, full ? SIMD_LANES : count),
                 g = v_load_any(k->dys, bf16, row + c, full ? SIMD_LANES : count);
    const vfloat w = v_load_first(k->weight + c, full ? SIMD_LANES : count);
    float *pw = k->sum_weight ? k->part_weight + (c - c0) : NULL, *pb = k->sum_bias ? k->part_bias + (c - c0) : NULL;
    const vmask m = vm_first(full ? SIMD_LANES : count);
    const vjp_lanes v = op == VJP_DYT ? dyt_vjp_lanes(x, g, w, k->parameter, k->w_tame, m, dx, count, *sum_param)
                                      : dyisru_vjp_lanes(x, g, w, k->parameter, k->s, k->root, k->param, k->w_tame, m,
                                                         dx, count, *sum_param);
    *sum_param = v.sum;
    if (v.fast) {
        *part_param = v_add(*part_param, full ? v.term : v_zero_unless(m, v.term));
        if (pw)
            v_store_first(pw, v_fma(g, v.f, v_load_first(pw, count)), count);
        if (pb)
            v_store_first(pb, v_add(g, v_load_first(pb, count)), count);
    } else {
        if (k->sum_weight)
            add_products_to_columns(k->sum_weight + c, g, v.f, m);
        if (k->sum_bias)
            add_products_to_columns(k->sum_bias + c, g, v_set1(1.0f), m);
    }
}

static inline __attribute__((always_inline)) void vjp_rows(lacs_cpu_norm_block *b, vjp_op op, int bf16)
{
    const int64_t rows = b->rows, dim = b->dim, size = bf16 ? 2 : 4;
    /* the strip's column sums, 6 KiB apart: 4 KiB apart (two arrays side by side), each load of a bias
     * sum waited for the store of the weight sum before it, whose address it shares in the lowest 12
     * bits (4K aliasing; DyT's VJP bf16 avx2 4096 x 4096, one thread, 3 % slower) */
    float parts[2 * VJP_STRIP + 512] __attribute__((aligned(64)));
    float *const part_weight = parts, *const part_bias = parts + VJP_STRIP + 512;
    vjp_walk k = {.xs = b->x,
                  .dys = b->dy,
                  .weight = b->weight,
                  .sum_weight = b->sum_weight,
                  .sum_bias = b->sum_bias,
                  .part_weight = part_weight,
                  .part_bias = part_bias,
                  .param = (float)b->param,
                  .root = (float)sqrt(b->param)};
    k.parameter = v_set1(k.param);
    k.s = v_set1(k.root);
    k.w_tame = op == VJP_DYT ? weights_tame(b->weight, dim, k.param)
                             : weights_tame(b->weight, dim, 1.0f) && k.param >= 0x1p-30f && k.param <= 0x1p30f;
    /* vjp_common_run's conditions on the call */
    const int common = k.w_tame && (op != VJP_DYT || fabsf(k.param) >= 0x1p-30f);
    float *const out = b->out;
    /* with b->stream, a row's dx over the strip goes here (in L1), then out with stream_out */
    float dx_strip[VJP_STRIP] __attribute__((aligned(64)));
    const int stream = b->stream;
#ifdef NORMS_DYT_VJP_TABLE
    /* DyT's bf16 table (dyt_table_run) */
    const float *const table = op == VJP_DYT && bf16 && common ? b->dyt_table : NULL;
#endif
    vdouble sum_param = vd_zero();
    for (int64_t c0 = 0; c0 < dim; c0 += VJP_STRIP) {
        const int64_t width = dim - c0 < VJP_STRIP ? dim - c0 : VJP_STRIP;
        /* the strip's column sums, indexed by the column (formed whether or not they are asked for: no test) */
        float *const pw_strip = part_weight - c0, *const pb_strip = part_bias - c0;
        const int64_t full_end = c0 + width - width % SIMD_LANES;
        for (int64_t r0 = 0; r0 < rows; r0 += VJP_FLUSH_ROWS) {
            const int64_t r1 = r0 + VJP_FLUSH_ROWS < rows ? r0 + VJP_FLUSH_ROWS : rows;
            memset(part_weight, 0, (size_t)width * sizeof(float));
            memset(part_bias, 0, (size_t)width * sizeof(float));
            for (int64_t r = r0; r < r1; r++) {
                const int64_t row = r * dim;
                float *const dx_row = stream ? dx_strip - c0 : out + row; /* dx_row + c: column c's dx */
                /* The common loops prefetch the next row's dx (dx_ahead + c) for the read for ownership of its
                 * line, where dx is stored without streaming (norms.c says where): a line every 16 floats
                 * (optimized/cpu/README.md section 6). Streamed, the strip buffer (in L1). */
                const float *const dx_ahead = stream ? dx_row : out + row + dim;
                vfloat part_param = v_zero(); /* the fast path's terms of this row of the strip, per lane */
                int64_t c = c0;
                while (c < full_end) {
#ifdef NORMS_DYT_VJP_TABLE
                    if (table)
                        c = dyt_table_run((const uint16_t *)k.xs, (const uint16_t *)k.dys, row, dim, c, full_end,
                                          table, k.weight, k.parameter, dx_row, dx_ahead, pw_strip, pb_strip,
                                          &part_param);
                    else
#endif
                    if (common)
                        c = vjp_common_run(op, k.xs, k.dys, bf16, row, dim, c, full_end, k.weight, k.parameter,
                                           dx_row, dx_ahead, pw_strip, pb_strip, &part_param);
                    if (c == full_end)
                        break;
                    simd_prefetch((const char *)k.xs + (row + dim + c) * size);
                    simd_prefetch((const char *)k.dys + (row + dim + c) * size);
                    vjp_vector(&k, op, bf16, 1, row, c, c0, SIMD_LANES, dx_row + c, &part_param, &sum_param);
                    c += SIMD_LANES;
                }
                if (c < c0 + width)
                    vjp_vector(&k, op, bf16, 0, row, c, c0, c0 + width - c, dx_row + c, &part_param, &sum_param);
                sum_param = add_to_sum(sum_param, part_param, vm_first(SIMD_LANES));
                if (stream)
                    stream_out(out + row + c0, dx_strip, width);
            }
            for (int64_t c = 0; c < width; c++) {
                if (k.sum_weight)
                    k.sum_weight[c0 + c] += part_weight[c];
                if (k.sum_bias)
                    k.sum_bias[c0 + c] += part_bias[c];
            }
        }
    }
    b->sum_param = op == VJP_DYT ? vd_reduce_add(sum_param) : -vd_reduce_add(sum_param);
    if (stream)
        simd_store_fence();
}

#ifdef NORMS_DYT_VJP_TABLE
static void norms_dyt_vjp_table(double alpha, float *table) { dyt_vjp_table_fill(alpha, table); }
#endif
#ifdef NORMS_DYT_TABLE
static void norms_dyt_table(double alpha, float *table) { dyt_table_fill(alpha, table); }
#endif

static void norms_dyt_vjp(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        vjp_rows(b, VJP_DYT, 1);
    else
        vjp_rows(b, VJP_DYT, 0);
}

static void norms_dyisru_vjp(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        vjp_rows(b, VJP_DYISRU, 1);
    else
        vjp_rows(b, VJP_DYISRU, 0);
}

/* ---- N6: softcap ---- */

/* cap tanh(x / cap), and x (1 - u^2/3) below |u| = 2^-12, where that is
 * tanh to fp32 rounding and keeps x's own digits (x / cap rounds again when
 * it is subnormal): a subnormal x comes back as itself, -0 as -0. norms.c
 * calls this only for cap in [2^-100, 2^100], so that cap is a normal fp32
 * value and x / cap either is finite or overflows to the limit +-cap. */
static inline vfloat softcap_lanes(vfloat x, vfloat cap)
{
    const vfloat u = v_div(x, cap);
    const vfloat near_zero = v_mul(x, v_fnma(v_mul(u, u), v_set1(1.0f / 3.0f), v_set1(1.0f)));
    return v_select(vm_lt(v_abs(u), v_set1(0x1p-12f)), v_mul(cap, tanh_core(u)), near_zero);
}

/* h(u) = u^3 R(u^2) for |u| < 1 (lacs_softcap_dcap_poly). */
static inline vfloat softcap_dcap_series(vfloat u, vfloat u2)
{
    vfloat series = v_set1((float)lacs_softcap_dcap_poly[8]);
    for (int k = 7; k >= 0; k--)
        series = v_fma(series, u2, v_set1((float)lacs_softcap_dcap_poly[k]));
    return v_mul(v_mul(u, u2), series);
}

/* tanh(u) and sech^2(u) for |u| < 1 in binary32 (norms.h's fits, Horner's
 * rule), softcap's common range: no exp, no division.
 *   cap tanh(x / cap) = x + (x z) P(z), z = u^2 (tanh(u) / u = 1 + z P(z),
 *   so that x itself carries the digits: no product by cap, and a tiny or
 *   subnormal x comes back as itself); the sign of x or'ed in, so that -0
 *   gives -0 (the FMA's +0 + -0 is +0). u may be x times the rounded 1/cap:
 *   z only scales the correction, a quarter of the result at most. Largest
 *   error over every fp32 x with |x (1/cap)| < 1, cap in {1, 30, 50, 0.3,
 *   1e-30, 1e30}: 1.34 ulp (tests/test_cpu_tanh.c: softcap_within_bound).
 *   sech^2(u) = 1 - z S(z): at most 3.85 ulp of sech^2(u) over every fp32
 *   u in [2^-12, 1), and 4.39 ulp of sech^2(x / cap) (u = x / cap rounded
 *   once) over every x with |x / cap| < 1 for the same six caps
 *   (softcap_within_bound samples both with their bounds). */
static inline vfloat softcap_below_one(vfloat x, vfloat u)
{
    const vfloat z = v_mul(u, u);
    vfloat p = v_set1((float)lacs_tanh_below_one_poly[6]);
    for (int k = 5; k >= 0; k--)
        p = v_fma(p, z, v_set1((float)lacs_tanh_below_one_poly[k]));
    return v_or_sign(v_fma(v_mul(x, z), p, x), x);
}

static inline vfloat sech2_below_one(vfloat z)
{
    vfloat s = v_set1((float)lacs_sech2_below_one_poly[7]);
    for (int k = 6; k >= 0; k--)
        s = v_fma(s, z, v_set1((float)lacs_sech2_below_one_poly[k]));
    return v_fnma(z, s, v_set1(1.0f));
}

/* One vector of softcap's VJP, elements [i, i + count) (count may pass
 * SIMD_LANES: then the whole vector): dx to dx, the fast path's dcap terms
 * into *part, the exact path's into *sum_cap. */
static inline __attribute__((always_inline)) void softcap_vjp_vector(const lacs_cpu_norm_block *b, int bf16,
                                                                    vfloat cap, int cap_tame, int64_t i,
                                                                    int64_t count, float *dx, vfloat *part,
                                                                    vdouble *sum_cap)
{
    const vfloat one = v_set1(1.0f);
    const vmask m = vm_first(count);
    const vfloat x = v_load_any(b->x, bf16, i, count), g = v_load_any(b->dy, bf16, i, count);
    const vfloat u = v_div(x, cap);
    const vfloat series = softcap_dcap_series(u, v_mul(u, u));
    const vmask below_one = vm_lt(v_abs(u), one);
    if (cap_tame && vm_all(vm_and(vm_and(tame(x), tame(g)), vm_le(v_abs(u), v_set1(9.5f))))) {
        vfloat t, s2;
        tanh_sech2_tame(u, &t, &s2);
        *part = v_add(*part, v_zero_unless(m, v_mul(g, v_select(below_one, v_fnma(u, s2, t), series))));
        /* dx below |u| = 1 as softcap_vjp_common_run forms it: a lane's dx does not depend on its neighbours */
        v_store_first(dx, v_mul(g, v_select(below_one, s2, sech2_below_one(v_mul(u, u)))), count);
    } else {
        vfloat s2, exponent;
        sech2_of(u, &s2, &exponent);
        const vfloat t = tanh_lanes(u);
        const vfloat u_s2 = v_scale_pow2(v_zero_unless(vm_ne(s2, v_zero()), v_mul(u, s2)), exponent);
        const vfloat h = v_select(below_one, v_sub(t, u_s2), series);
        *sum_cap = add_triple_products(*sum_cap, g, h, one, m);
        v_store_first(dx, scaled_product(g, one, one, s2, exponent), count);
    }
}

/* softcap's VJP over the common vectors from element i while they last
 * (vjp_common_run's scheme); returns where it stopped (end if at the
 * end). Common: |dy| <= 2^40 (not NaN) and every |u| < 1, with cap in
 * [2^-40, 2^30] (checked once: |u| < 1 then holds |x| below 2^30, and a NaN
 * or infinite x fails it): dx = dy sech2_below_one(u), the dcap term the
 * series alone (no tanh), added by one FMA. Data well inside the cap, which
 * a softcap mostly meets, is all of this kind: no exp, no reciprocal, 1.4
 * to 1.5 times the general fast path's speed. */
static inline __attribute__((always_inline)) int64_t softcap_vjp_common_run(const void *xs, const void *dys,
                                                                             int bf16, int64_t i, int64_t end,
                                                                             vfloat cap, float *dx,
                                                                             const float *dx_ahead, vfloat *part)
{
    vfloat sum = *part;
    for (; i < end; i += SIMD_LANES) {
        prefetch_ahead(xs, i * (bf16 ? 2 : 4));
        prefetch_ahead(dys, i * (bf16 ? 2 : 4));
        if (dx_ahead) /* dx's line for its read for ownership, where dx is not streamed (norms.c) */
            prefetch_ahead(dx_ahead, i * 4);
        const vfloat x = v_load_any(xs, bf16, i, SIMD_LANES), g = v_load_any(dys, bf16, i, SIMD_LANES);
        const vfloat u = v_div(x, cap);
        if (!vm_all(vm_and(vm_le(v_abs(g), v_set1(0x1p40f)), vm_lt(v_abs(u), v_set1(1.0f)))))
            break;
        const vfloat z = v_mul(u, u);
        v_store_first(dx + i, v_mul(g, sech2_below_one(z)), SIMD_LANES);
        sum = v_fma(g, softcap_dcap_series(u, z), sum);
    }
    *part = sum;
    return i;
}

/* dx = dy sech^2(u); dcap's term dy h(u), h(u) = tanh(u) - u sech^2(u): the
 * series u^3 R(u^2) below |u| = 1 (norms.h), where the difference cancels,
 * the direct form above with u sech^2 = 0 where sech^2 = 0 (h(+-inf) = +-1).
 * Fast path (the VJPs' above), where x and dy are tame and |u| <= 9.5 (cap
 * in [2^-40, 2^40]): sech^2 and tanh from tanh_sech2_tame, dx = dy sech^2 in
 * fp32, the terms summed in fp32 per lane over VJP_STRIP elements, then in
 * double; the common vectors by softcap_vjp_common_run. Exact path: dx
 * rounded once from double, each term added in double. */
static inline __attribute__((always_inline)) void softcap_vjp_elements(lacs_cpu_norm_block *b, int bf16)
{
    const float cap_f32 = (float)b->param;
    const vfloat cap = v_set1(cap_f32);
    const int cap_tame = cap_f32 >= 0x1p-40f && cap_f32 <= 0x1p40f;
    const int common = cap_f32 >= 0x1p-40f && cap_f32 <= 0x1p30f;
    const int64_t n = b->rows * b->dim;
    const int stream = b->stream;
    float dx_strip[VJP_STRIP] __attribute__((aligned(64))); /* with b->stream: dx by strips, then stream_out */
    vdouble sum_cap = vd_zero();
    for (int64_t start = 0; start < n; start += VJP_STRIP) {
        const int64_t end = n - start < VJP_STRIP ? n : start + VJP_STRIP;
        const int64_t full_end = start + (end - start) / SIMD_LANES * SIMD_LANES;
        float *const dx = stream ? dx_strip - start : b->out; /* dx + i: element i's */
        vfloat part = v_zero();                                /* the fast path's terms of the strip, per lane */
        int64_t i = start;
        while (i < end) {
            if (common && i < full_end)
                i = softcap_vjp_common_run(b->x, b->dy, bf16, i, full_end, cap, dx, stream ? NULL : b->out, &part);
            if (i >= end)
                break;
            prefetch_ahead(b->x, i * (bf16 ? 2 : 4));
            prefetch_ahead(b->dy, i * (bf16 ? 2 : 4));
            softcap_vjp_vector(b, bf16, cap, cap_tame, i, end - i, dx + i, &part, &sum_cap);
            i += SIMD_LANES;
        }
        sum_cap = add_to_sum(sum_cap, part, vm_first(SIMD_LANES));
        if (stream)
            stream_out(b->out + start, dx_strip, end - start);
    }
    b->sum_param = vd_reduce_add(sum_cap);
    if (stream)
        simd_store_fence();
}

static void norms_softcap_vjp(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        softcap_vjp_elements(b, 1);
    else
        softcap_vjp_elements(b, 0);
}

/* ---- the forward element-wise ops: one walk over the rows ---- */

typedef enum { FORWARD_DYT, FORWARD_DYISRU, FORWARD_SOFTCAP } forward_op;

/* What a forward walk reads, copied out of the block so that the compiler
 * keeps it in registers (a store through a vector pointer may alias
 * anything, *b included, so fields of *b would be reloaded after every
 * store). */
typedef struct {
    const void *x;
    const float *weight, *bias;
    const float *table; /* DyT's bf16 table (dyt_table_fill) or NULL */
    vfloat parameter, C, inverse_cap;
    int fast;
} forward_operands;

/* out for the `count` lanes of x at element e, column c (op and bf16 are
 * constants where this is inlined, so each caller gets its own loop). */
static inline __attribute__((always_inline)) vfloat forward_lanes(const forward_operands *o, forward_op op, int bf16,
                                                                  int64_t e, int64_t c, int64_t count)
{
    const vfloat x = v_load_any(o->x, bf16, e, count);
    prefetch_ahead(o->x, e * (bf16 ? 2 : 4));
    if (op == FORWARD_SOFTCAP) {
        /* the lanes below |u| = 1 by the polynomial, the others by tanh: each lane's value a function of its x
         * alone (not of its neighbours, nor of where a vector starts), the work of one form where a vector is
         * all of one kind (absent tail lanes are 0, below) */
        const vfloat u = v_mul(x, o->inverse_cap);
        const vmask below = vm_lt(v_abs(u), v_set1(1.0f));
        if (vm_all(below))
            return softcap_below_one(x, u);
        const vfloat y = softcap_lanes(x, o->parameter);
        return vm_none(below) ? y : v_select(below, y, softcap_below_one(x, u));
    }
    const vfloat w = v_load_first(o->weight + c, count), bias = v_load_first(o->bias + c, count);
#ifdef NORMS_DYT_TABLE /* only where the kernels have the table: the test alone cost avx512's DyT 5 % */
    if (op == FORWARD_DYT && bf16 && o->table && count >= SIMD_LANES) {
        /* tanh looked up by |x|'s bits, its sign x's: dyt_lanes' y where every lane takes tanh's form */
        const vfloat t = v_table_bf16_magnitude(o->table, (const uint16_t *)o->x + e);
        if (vm_none(vm_lt(v_set1(2.0f), v_abs(t))))
            return v_fma(w, v_xor_sign(t, x), bias);
    }
#endif
    if (op == FORWARD_DYT)
        return dyt_lanes(x, w, bias, o->parameter);
    if (o->fast && vm_all(vm_le(v_abs(x), v_set1(0x1p60f))))
        return dyisru_lanes_fast(x, w, bias, o->C);
    return dyisru_lanes(x, w, bias, o->parameter);
}

/* Each row (softcap: the whole block as one row) in vectors of SIMD_LANES.
 * With b->stream, the row's vectors that fill whole aligned vectors of out
 * are written with non-temporal stores (no read of the line before the
 * write: a third less memory traffic), after a partial head that reaches
 * the first boundary; the rest with ordinary stores. */
static inline __attribute__((always_inline)) void forward_rows(lacs_cpu_norm_block *b, forward_op op, int bf16)
{
    const forward_operands o = {
        .x = b->x,
        .weight = b->weight,
        .bias = b->bias,
        .parameter = v_set1(op == FORWARD_DYISRU ? (float)sqrt(b->param) : (float)b->param),
        .C = v_set1((float)b->param),
        .inverse_cap = v_set1(1.0f / (float)b->param),
        .fast = op == FORWARD_DYISRU && dyisru_fast_C(b->param),
        .table = op == FORWARD_DYT && bf16 ? b->dyt_table : NULL,
    };
    const int64_t rows = op == FORWARD_SOFTCAP ? 1 : b->rows, dim = op == FORWARD_SOFTCAP ? b->rows * b->dim : b->dim;
    float *const out_base = b->out;
    const int stream = b->stream;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t row = r * dim;
        float *out = out_base + row;
        int64_t c = 0;
        if (stream) {
            const int64_t past_boundary =
                (int64_t)(((uintptr_t)out % (SIMD_LANES * sizeof(float))) / sizeof(float));
            const int64_t head = past_boundary ? (SIMD_LANES - past_boundary < dim ? SIMD_LANES - past_boundary : dim) : 0;
            if (head > 0) {
                v_store_first(out, forward_lanes(&o, op, bf16, row, 0, head), head);
                c = head;
            }
            for (; c + SIMD_LANES <= dim; c += SIMD_LANES)
                v_stream(out + c, forward_lanes(&o, op, bf16, row + c, c, SIMD_LANES));
        }
        for (; c < dim; c += SIMD_LANES)
            v_store_first(out + c, forward_lanes(&o, op, bf16, row + c, c, dim - c), dim - c);
    }
    if (stream)
        _mm_sfence();
}

static void norms_dyt(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        forward_rows(b, FORWARD_DYT, 1);
    else
        forward_rows(b, FORWARD_DYT, 0);
}

static void norms_dyisru(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        forward_rows(b, FORWARD_DYISRU, 1);
    else
        forward_rows(b, FORWARD_DYISRU, 0);
}

static void norms_softcap(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        forward_rows(b, FORWARD_SOFTCAP, 1);
    else
        forward_rows(b, FORWARD_SOFTCAP, 0);
}

/* ---- rows of rmsnorm and l2norm, in double ---- */

/* fp32 squares and products of two fp32 values are exact in double and
 * neither overflow nor underflow there: no scaling is needed (SPEC.md 4.14
 * scales because the reference squares doubles). */
static double norms_sum_of_squares(const void *x, int bf16, int64_t n)
{
    vdouble lo = vd_zero(), hi = vd_zero();
    for (int64_t i = 0; i < n; i += SIMD_LANES) {
        /* the row's first pass, from memory: fetched ahead (into the next row at the end of this one), as the
         * hardware prefetcher starts over at each 4 KiB page of a row */
        prefetch_ahead(x, i * (bf16 ? 2 : 4));
        const vfloat v = v_load_any(x, bf16, i, n - i);
        const vdouble v_lo = vd_half(v, 0), v_hi = vd_half(v, 1);
        lo = vd_fma(v_lo, v_lo, lo);
        hi = vd_fma(v_hi, v_hi, hi);
    }
    return vd_reduce_add(vd_add(lo, hi));
}

/* sum_i x_i^2 and sum_i x_i weight_i dy_i in one pass: the squares' accumulators as norms_sum_of_squares's (the
 * same bits), the triple products summed in double per lane, in order. */
static void norms_squares_and_weighted_dot(const void *x, const void *dy, int bf16, const float *weight, int64_t n,
                                           int exact_products, double *sum_of_squares, double *weighted_dot,
                                           float *max_abs_dy)
{
    vdouble lo = vd_zero(), hi = vd_zero(), sum = vd_zero();
    vfloat largest = v_zero();
    if (exact_products) { /* norms.h: the products in binary32, exact; the masked tail's products are 0 */
        for (int64_t i = 0; i < n; i += SIMD_LANES) {
            const int64_t count = n - i;
            prefetch_ahead(x, i * 2);
            prefetch_ahead(dy, i * 2);
            const vfloat v = v_load_any(x, 1, i, count), g = v_load_any(dy, 1, i, count);
            largest = v_max(v_abs(g), largest);
            const vfloat square = v_mul(v, v), triple = v_mul(v_mul(v, v_load_first(weight + i, count)), g);
            lo = vd_add(lo, vd_half(square, 0));
            hi = vd_add(hi, vd_half(square, 1));
            sum = vd_add(vd_add(sum, vd_half(triple, 0)), vd_half(triple, 1));
        }
        *sum_of_squares = vd_reduce_add(vd_add(lo, hi));
        *weighted_dot = vd_reduce_add(sum);
        *max_abs_dy = v_reduce_max(largest);
        return;
    }
    for (int64_t i = 0; i < n; i += SIMD_LANES) {
        const int64_t count = n - i;
        prefetch_ahead(x, i * (bf16 ? 2 : 4));
        prefetch_ahead(dy, i * (bf16 ? 2 : 4));
        const vfloat v = v_load_any(x, bf16, i, count);
        const vdouble v_lo = vd_half(v, 0), v_hi = vd_half(v, 1);
        lo = vd_fma(v_lo, v_lo, lo);
        hi = vd_fma(v_hi, v_hi, hi);
        const vfloat g = v_load_any(dy, bf16, i, count); /* 0 past the row */
        largest = v_max(v_abs(g), largest);
        if (count >= SIMD_LANES) /* the same sums, without the mask of a row's last vector */
            sum = add_triple_products_all(sum, v, v_load_first(weight + i, count), g);
        else
            sum = add_triple_products(sum, v, v_load_first(weight + i, count), g, vm_first(count));
    }
    *sum_of_squares = vd_reduce_add(vd_add(lo, hi));
    *weighted_dot = vd_reduce_add(sum);
    *max_abs_dy = v_reduce_max(largest);
}

/* A row of n outputs written with non-temporal stores (v_stream wants whole
 * aligned vectors): [0, head) ordinary stores up to the first aligned vector,
 * [head, body) whole aligned vectors, [body, n) the tail. */
static inline void stream_split(const float *y, int64_t n, int64_t *head, int64_t *body)
{
    const int64_t past = (int64_t)(((uintptr_t)y % (SIMD_LANES * sizeof(float))) / sizeof(float));
    *head = past ? (SIMD_LANES - past < n ? SIMD_LANES - past : n) : 0;
    *body = *head + (n - *head) / SIMD_LANES * SIMD_LANES;
}

/* y_i = weight_i (x_i inv) for i in [from, to) (whole vectors but the last): in double, rounded once, or in
 * binary32 (norms.h's scale_binary32; a constant where this is inlined). */
static inline __attribute__((always_inline)) void scale_part(const void *x, int bf16, int64_t from, int64_t to,
                                                             double inv, const float *weight, float *y, int stream,
                                                             int binary32)
{
    const vdouble inv_v = vd_set1(inv);
    const vfloat inv_f = v_set1((float)inv);
    for (int64_t i = from; i < to; i += SIMD_LANES) {
        const int64_t count = to - i;
        const vfloat v = v_load_any(x, bf16, i, count), w = v_load_first(weight + i, count);
        vfloat out;
        if (binary32)
            out = v_mul(w, v_mul(v, inv_f));
        else
            out = v_from_halves(vd_mul(vd_half(w, 0), vd_mul(vd_half(v, 0), inv_v)),
                                vd_mul(vd_half(w, 1), vd_mul(vd_half(v, 1), inv_v)));
        if (stream && count >= SIMD_LANES)
            v_stream(y + i, out);
        else
            v_store_first(y + i, out, count);
    }
}

/* Each element is computed alone (no sum across lanes), so the head that
 * aligns y for non-temporal stores changes no result. */
static inline __attribute__((always_inline)) void scale_row(const void *x, int bf16, int64_t n, double inv,
                                                            const float *weight, float *y, int stream, int binary32)
{
    if (!stream) {
        scale_part(x, bf16, 0, n, inv, weight, y, 0, binary32);
        return;
    }
    int64_t head, body;
    stream_split(y, n, &head, &body);
    scale_part(x, bf16, 0, head, inv, weight, y, 0, binary32);
    scale_part(x, bf16, head, body, inv, weight, y, 1, binary32);
    scale_part(x, bf16, body, n, inv, weight, y, 0, binary32);
    simd_store_fence();
}

static void norms_scale(const void *x, int bf16, int64_t n, double inv, const float *weight, float *y, int stream)
{
    scale_row(x, bf16, n, inv, weight, y, stream, 0);
}

static void norms_scale_binary32(const void *x, int bf16, int64_t n, double inv, const float *weight, float *y,
                                 int stream)
{
    scale_row(x, bf16, n, inv, weight, y, stream, 1);
}

/* dx_i for i in [from, to) (whole vectors but the last), and sum_dy_y's terms (norms.h): in binary32
 * (project), or in double, each dx_i rounded once and each column sum once per term (project_double;
 * binary32 a constant where this is inlined). */
static inline __attribute__((always_inline)) void project_part(const void *x, const void *dy, int bf16, int64_t from,
                                                               int64_t to, const float *weight, double along,
                                                               double inv, float *dx, float *sum_dy_y, int stream,
                                                               int binary32)
{
    const vfloat along_f = v_set1((float)along), inv_f = v_set1((float)inv);
    const vdouble along_v = vd_set1(along), inv_v = vd_set1(inv);
    for (int64_t i = from; i < to; i += SIMD_LANES) {
        const int64_t count = to - i;
        const vfloat xv = v_load_any(x, bf16, i, count), g = v_load_any(dy, bf16, i, count);
        const vfloat w = v_load_first(weight + i, count);
        vfloat dxv, sum = v_zero();
        if (binary32) {
            dxv = v_mul(v_fnma(xv, along_f, v_mul(w, g)), inv_f);
            if (sum_dy_y)
                sum = v_fma(g, v_mul(xv, inv_f), v_load_first(sum_dy_y + i, count));
        } else {
            vdouble dx_half[2], sum_half[2];
            for (int high = 0; high <= 1; high++) {
                const vdouble x_h = vd_half(xv, high), g_h = vd_half(g, high);
                dx_half[high] = vd_mul(vd_fnma(x_h, along_v, vd_mul(vd_half(w, high), g_h)), inv_v);
                if (sum_dy_y)
                    sum_half[high] =
                        vd_fma(g_h, vd_mul(x_h, inv_v), vd_half(v_load_first(sum_dy_y + i, count), high));
            }
            dxv = v_from_halves(dx_half[0], dx_half[1]);
            if (sum_dy_y)
                sum = v_from_halves(sum_half[0], sum_half[1]);
        }
        if (sum_dy_y)
            v_store_first(sum_dy_y + i, sum, count);
        if (stream && count >= SIMD_LANES)
            v_stream(dx + i, dxv);
        else
            v_store_first(dx + i, dxv, count);
    }
}

/* Each element alone, as norms_scale; sum_dy_y's terms are per column. */
static inline __attribute__((always_inline)) void project_row(const void *x, const void *dy, int bf16, int64_t n,
                                                              const float *weight, double along, double inv,
                                                              float *dx, float *sum_dy_y, int stream, int binary32)
{
    if (!stream) {
        project_part(x, dy, bf16, 0, n, weight, along, inv, dx, sum_dy_y, 0, binary32);
        return;
    }
    int64_t head, body;
    stream_split(dx, n, &head, &body);
    project_part(x, dy, bf16, 0, head, weight, along, inv, dx, sum_dy_y, 0, binary32);
    project_part(x, dy, bf16, head, body, weight, along, inv, dx, sum_dy_y, 1, binary32);
    project_part(x, dy, bf16, body, n, weight, along, inv, dx, sum_dy_y, 0, binary32);
    simd_store_fence();
}

static void norms_project(const void *x, const void *dy, int bf16, int64_t n, const float *weight, double along,
                          double inv, float *dx, float *sum_dy_y, int stream)
{
    project_row(x, dy, bf16, n, weight, along, inv, dx, sum_dy_y, stream, 1);
}

static void norms_project_double(const void *x, const void *dy, int bf16, int64_t n, const float *weight,
                                 double along, double inv, float *dx, float *sum_dy_y, int stream)
{
    project_row(x, dy, bf16, n, weight, along, inv, dx, sum_dy_y, stream, 0);
}

const lacs_cpu_norm_kernels NORM_KERNELS = {
    .isa = SIMD_ISA,
    .tanh = norms_tanh,
    .sech2 = norms_sech2,
    .dyt = norms_dyt,
    .dyt_vjp = norms_dyt_vjp,
#ifdef NORMS_DYT_TABLE
    .dyt_table = norms_dyt_table,
#endif
#ifdef NORMS_DYT_VJP_TABLE
    .dyt_vjp_table = norms_dyt_vjp_table,
#endif
    .dyisru = norms_dyisru,
    .dyisru_vjp = norms_dyisru_vjp,
    .softcap = norms_softcap,
    .softcap_vjp = norms_softcap_vjp,
    .sum_of_squares = norms_sum_of_squares,
    .squares_and_weighted_dot = norms_squares_and_weighted_dot,
    .scale = norms_scale,
    .scale_binary32 = norms_scale_binary32,
    .project = norms_project,
    .project_double = norms_project_double,
};

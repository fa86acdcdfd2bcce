/* builtin:cpu, the norm family with AVX-512 (F, BW, VL, DQ) and FMA: 16 fp32
 * lanes, tails by masks. Called only when dispatch.c chose LACS_ISA_AVX512.
 *
 * The element-wise functions, in binary32 (bounds measured over all 2^32
 * fp32 inputs; tests/test_cpu_tanh.c asserts them on 2^26 of them):
 *   tanh    E / (E + 2), E = expm1(2|u|) from one range-reduced exp and one
 *           FMA, one division; u itself below |u| = 2^-12. At most
 *           2.61 ulp, exact at +-0 (sign kept),
 *           +-inf (+-1), NaN, and for |u| < 2^-12 and |u| >= 9.5. A fifth of
 *           the work of a correctly rounded form: DyT must run at the speed
 *           of memory (README.md).
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
 */
#include <immintrin.h>
#include <math.h>

#include "cpu.h"
#include "norms.h"

/* ---- lanes ---- */

/* The first `count` lanes of 16 (all for count >= 16). */
static inline __mmask16 lanes16(int64_t count)
{
    return count >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << count) - 1u);
}

/* 16 values from p + i, fp32 or bf16 (widened exactly: bf16 is the upper
 * half of an fp32); lanes outside `m` read as +0 and touch no memory. */
static inline __m512 load16(const void *p, int bf16, int64_t i, __mmask16 m)
{
    if (bf16) {
        const __m256i half = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
    }
    return _mm512_maskz_loadu_ps(m, (const float *)p + i);
}

static inline __m512d low_half_as_double(__m512 v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
static inline __m512d high_half_as_double(__m512 v) { return _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)); }

/* sum[i] += a[i] * b[i] in double for the lanes of m (a per-column partial
 * sum: dweight, dbias). */
static inline void add_products_to_columns(double *sum, __m512 a, __m512 b, __mmask16 m)
{
    const __mmask8 lo = (__mmask8)(m & 0xff), hi = (__mmask8)(m >> 8);
    __m512d s_lo = _mm512_maskz_loadu_pd(lo, sum), s_hi = _mm512_maskz_loadu_pd(hi, sum + 8);
    s_lo = _mm512_fmadd_pd(low_half_as_double(a), low_half_as_double(b), s_lo);
    s_hi = _mm512_fmadd_pd(high_half_as_double(a), high_half_as_double(b), s_hi);
    _mm512_mask_storeu_pd(sum, lo, s_lo);
    _mm512_mask_storeu_pd(sum + 8, hi, s_hi);
}

/* acc += a * b * c in double for the lanes of m (a scalar gradient's terms:
 * masked so that a tail lane's 0 * NaN cannot reach the sum). */
static inline __m512d add_triple_products(__m512d acc, __m512 a, __m512 b, __m512 c, __mmask16 m)
{
    const __mmask8 lo = (__mmask8)(m & 0xff), hi = (__mmask8)(m >> 8);
    const __m512d p_lo =
        _mm512_mul_pd(_mm512_mul_pd(low_half_as_double(a), low_half_as_double(b)), low_half_as_double(c));
    const __m512d p_hi =
        _mm512_mul_pd(_mm512_mul_pd(high_half_as_double(a), high_half_as_double(b)), high_half_as_double(c));
    acc = _mm512_mask_add_pd(acc, lo, acc, p_lo);
    return _mm512_mask_add_pd(acc, hi, acc, p_hi);
}

static inline __m512 copy_sign(__m512 magnitude, __m512 sign_from)
{
    const __m512i sign_bit = _mm512_set1_epi32((int)0x80000000u);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_andnot_si512(sign_bit, _mm512_castps_si512(magnitude)),
                                               _mm512_and_si512(sign_bit, _mm512_castps_si512(sign_from))));
}

/* Software prefetch of the line PREFETCH_BYTES past byte offset_bytes of p.
 * A vector of these kernels is long (some 40 instructions), so the
 * out-of-order window spans too few iterations to keep enough cache misses
 * in flight by itself: DyT over 64 MiB ran at 0.38 ns per element and
 * thread without, 0.24 with, the same as in cache. The address may lie past
 * the end of the array: a prefetch never faults. always_inline: GCC 12 finds
 * a function whose only statement is a prefetch free of side effects and
 * deletes its calls before it would inline them. */
#define PREFETCH_BYTES 4096
static inline __attribute__((always_inline)) void prefetch_ahead(const void *p, int64_t offset_bytes)
{
    _mm_prefetch((const char *)((uintptr_t)p + (uintptr_t)(offset_bytes + PREFETCH_BYTES)), _MM_HINT_T0);
}

/* ---- exp, tanh, sech^2 ---- */

/* exp(v) = 2^n (1 + p), p = exp(r) - 1 = r + r^2 Q(r) in [-0.30, 0.42]
 * (norms.h), for v in [-745.2, 19] (|n| <= 1075: n LN2_HI is exact): returns
 * p and sets n. Callers form 1 + p (and, where they need it, its rounding
 * error (1 - (1 + p)) + p, exact by Fast2Sum) and scale by 2^n with
 * _mm512_scalef_ps, which rounds once into the subnormals (and to 0 below
 * them). NaN v gives NaN. */
static inline __m512 exp_reduced(__m512 v, __m512 *n)
{
    *n = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps((float)LACS_LOG2E)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(*n, _mm512_set1_ps((float)LACS_LN2_HI), v);
    r = _mm512_fnmadd_ps(*n, _mm512_set1_ps((float)LACS_LN2_LO), r);
    __m512 q = _mm512_set1_ps((float)lacs_exp_poly[4]);
    for (int i = 3; i >= 0; i--)
        q = _mm512_fmadd_ps(q, r, _mm512_set1_ps((float)lacs_exp_poly[i]));
    return _mm512_fmadd_ps(_mm512_mul_ps(r, r), q, r);
}

/* tanh(u) = E / (E + 2), E = expm1(2|u|) = 2^n (1 + p) - 1 =
 * (2^n - 1) + 2^n p with one FMA (2^n - 1 is exact for 0 <= n <= 24, and for
 * n = 0, |u| < 0.17, E = p itself: no cancellation near 0). |u| is capped at
 * 9.5, where tanh rounds to 1 (from 9.01; min returns a when it is NaN, so
 * NaN stays NaN). The sign is copied from u. For |u| >= 2^-12: below, E's
 * own rounding (2a + 2a^2 rounds up where tanh(a) = a - a^3/3 does not) can
 * put the result an ulp off, and the callers return u itself there
 * (tanh16, DyT, softcap). Error: E's rounding (and p's, up to twice
 * relative to E where 2^n - 1 and 2^n p nearly cancel, n = 1), E + 2's and
 * the quotient's; the largest over all fp32 inputs is 2.61 ulp, at
 * |u| = 0x1.ff4f96p-5 (n = 0, just below a power of two of the result);
 * RMS 0.3 to 0.6 ulp by binade. */
static inline __m512 tanh_core16(__m512 u)
{
    const __m512 a = _mm512_abs_ps(u);
    const __m512 capped = _mm512_min_ps(_mm512_set1_ps(9.5f), a);
    __m512 n;
    const __m512 p = exp_reduced(_mm512_add_ps(capped, capped), &n);
    const __m512 power = _mm512_scalef_ps(_mm512_set1_ps(1.0f), n);
    const __m512 E = _mm512_fmadd_ps(power, p, _mm512_sub_ps(power, _mm512_set1_ps(1.0f)));
    return copy_sign(_mm512_div_ps(E, _mm512_add_ps(E, _mm512_set1_ps(2.0f))), u);
}

/* tanh(u) for every u: u itself below |u| = 2^-12, where tanh(u) = u to
 * fp32 rounding (subnormals and -0 included). */
static inline __m512 tanh16(__m512 u)
{
    const __mmask16 tiny = _mm512_cmp_ps_mask(_mm512_abs_ps(u), _mm512_set1_ps(0x1p-12f), _CMP_LT_OQ);
    return _mm512_mask_mov_ps(tanh_core16(u), tiny, u);
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
 *   q = 4m / dd to 2^-14 (approximate reciprocal), its remainder
 *   4m - q dd by one FMA, s = q + (remainder + 4 m_err - q dd_lo) / dd.
 * What remains is exp's approximation (2^-28), the rounding of p, the
 * reciprocal's error on the correction (2^-28) and the last rounding:
 * sech^2 within 1 ulp (tests/test_cpu_tanh.c). NaN gives NaN. */
#define SECH2_POSITIVE_IN_DOUBLE 0x1.74910cp+8f
static inline __m512 sech2_scaled(__m512 p, __m512 n, __m512 a)
{
    const __m512 one = _mm512_set1_ps(1.0f), four = _mm512_set1_ps(4.0f);
    const __m512 m = _mm512_add_ps(one, p);
    const __m512 m_err = _mm512_add_ps(_mm512_sub_ps(one, m), p);
    const __m512 e = _mm512_scalef_ps(m, n), e_lo = _mm512_scalef_ps(m_err, n);
    const __m512 d = _mm512_add_ps(one, e);
    const __m512 d_err = _mm512_add_ps(_mm512_add_ps(_mm512_sub_ps(one, d), e), e_lo);
    const __m512 dd = _mm512_mul_ps(d, d);
    const __m512 dd_lo = _mm512_fmadd_ps(_mm512_add_ps(d, d), d_err, _mm512_fmsub_ps(d, d, dd));
    const __m512 reciprocal = _mm512_rcp14_ps(dd);
    const __m512 four_m = _mm512_mul_ps(four, m);
    const __m512 q = _mm512_mul_ps(four_m, reciprocal);
    const __m512 remainder = _mm512_fnmadd_ps(q, dd_lo, _mm512_fmadd_ps(four, m_err, _mm512_fnmadd_ps(q, dd, four_m)));
    const __m512 scaled = _mm512_fmadd_ps(remainder, reciprocal, q);
    const __mmask16 zero_in_double = _mm512_cmp_ps_mask(a, _mm512_set1_ps(SECH2_POSITIVE_IN_DOUBLE), _CMP_GT_OQ);
    return _mm512_mask_mov_ps(scaled, zero_in_double, _mm512_setzero_ps());
}

/* sech^2(u) = *scaled 2^*exponent (sech2_scaled). |u| is capped at
 * 372.566589, where sech^2 becomes 0 (min returns a when it is NaN). */
static inline void sech2_of(__m512 u, __m512 *scaled, __m512 *exponent)
{
    const __m512 a = _mm512_abs_ps(u);
    const __m512 capped = _mm512_min_ps(_mm512_set1_ps(SECH2_POSITIVE_IN_DOUBLE), a);
    const __m512 p = exp_reduced(_mm512_mul_ps(capped, _mm512_set1_ps(-2.0f)), exponent);
    *scaled = sech2_scaled(p, *exponent, a);
}

/* a b c s 2^n for the low (high = 0) or high 8 lanes, in double: a b and
 * c s are exact there, their product one rounding, the scaling exact; no
 * intermediate overflow or underflow. */
static inline __m512d scaled_product_half(__m512 a, __m512 b, __m512 c, __m512 s, __m512 n, int high)
{
    const __m512d ab = high ? _mm512_mul_pd(high_half_as_double(a), high_half_as_double(b))
                            : _mm512_mul_pd(low_half_as_double(a), low_half_as_double(b));
    const __m512d cs = high ? _mm512_mul_pd(high_half_as_double(c), high_half_as_double(s))
                            : _mm512_mul_pd(low_half_as_double(c), low_half_as_double(s));
    return _mm512_scalef_pd(_mm512_mul_pd(ab, cs), high ? high_half_as_double(n) : low_half_as_double(n));
}

/* a b c s 2^n rounded once to fp32. */
static inline __m512 scaled_product(__m512 a, __m512 b, __m512 c, __m512 s, __m512 n)
{
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(scaled_product_half(a, b, c, s, n, 0))),
                              _mm512_cvtpd_ps(scaled_product_half(a, b, c, s, n, 1)), 1);
}

/* acc += a b c s 2^n in double, for the lanes of m. */
static inline __m512d add_scaled_products(__m512d acc, __m512 a, __m512 b, __m512 c, __m512 s, __m512 n, __mmask16 m)
{
    acc = _mm512_mask_add_pd(acc, (__mmask8)(m & 0xff), acc, scaled_product_half(a, b, c, s, n, 0));
    return _mm512_mask_add_pd(acc, (__mmask8)(m >> 8), acc, scaled_product_half(a, b, c, s, n, 1));
}

static void tanh_avx512(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes16(n - i);
        _mm512_mask_storeu_ps(y + i, m, tanh16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

static void sech2_avx512(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes16(n - i);
        __m512 s2, exponent;
        sech2_of(_mm512_maskz_loadu_ps(m, x + i), &s2, &exponent);
        _mm512_mask_storeu_ps(y + i, m, _mm512_scalef_ps(s2, exponent));
    }
}

/* ---- N1: DyT ---- */

/* y = w tanh(alpha x) + bias, one FMA (w t + bias rounded once). Below
 * |alpha x| = 2^-12, where tanh(u) = u to fp32 rounding, y = (w alpha) x +
 * bias instead: alpha x may underflow in fp32 (x subnormal, small alpha)
 * where the reference's double product does not, and the FMA keeps the
 * product's digits and its sign (a tiny negative w alpha x plus a +0 bias is
 * -0, as in the reference, where w (-0) + 0 would be +0). */
static inline __m512 dyt_lanes(__m512 x, __m512 w, __m512 bias, __m512 alpha)
{
    const __m512 u = _mm512_mul_ps(alpha, x);
    const __mmask16 tiny = _mm512_cmp_ps_mask(_mm512_abs_ps(u), _mm512_set1_ps(0x1p-12f), _CMP_LT_OQ);
    const __m512 y = _mm512_fmadd_ps(w, tanh_core16(u), bias);
    return _mm512_mask_blend_ps(tiny, y, _mm512_fmadd_ps(_mm512_mul_ps(w, alpha), x, bias));
}

/* The VJPs' row loops are written once with the input type as a parameter
 * and called with a constant, so that the compiler makes one loop per type.
 * DyT's: dx = dy w alpha sech^2 formed in double and rounded once
 * (scaled_product); dalpha's term dy w (x sech^2) with x sech^2 = 0 where
 * sech^2 = 0 (the limit at x = +-inf, SPEC.md 4.18; dy w 0 is still NaN for
 * a NaN or infinite dy w, as in the reference). */
static inline __attribute__((always_inline)) void dyt_vjp_rows(lacs_cpu_norm_block *b, int bf16)
{
    const __m512 alpha = _mm512_set1_ps((float)b->param);
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512d sum_alpha = _mm512_setzero_pd();
    for (int64_t r = 0; r < b->rows; r++) {
        const int64_t row = r * b->dim;
        for (int64_t c = 0; c < b->dim; c += 16) {
            const __mmask16 m = lanes16(b->dim - c);
            const __m512 x = load16(b->x, bf16, row + c, m), g = load16(b->dy, bf16, row + c, m);
            prefetch_ahead(b->x, (row + c) * (bf16 ? 2 : 4));
            prefetch_ahead(b->dy, (row + c) * (bf16 ? 2 : 4));
            prefetch_ahead(b->out, (row + c) * 4);
            const __m512 w = _mm512_maskz_loadu_ps(m, b->weight + c);
            const __m512 u = _mm512_mul_ps(alpha, x);
            __m512 s2, exponent;
            sech2_of(u, &s2, &exponent);
            /* dalpha's term dy w (x sech^2), x sech^2 = 0 where sech^2 = 0 */
            const __mmask16 s2_nonzero = _mm512_cmp_ps_mask(s2, _mm512_setzero_ps(), _CMP_NEQ_UQ);
            sum_alpha = add_scaled_products(sum_alpha, g, w, _mm512_maskz_mov_ps(s2_nonzero, x), s2, exponent, m);
            if (b->sum_weight)
                add_products_to_columns(b->sum_weight + c, g, tanh16(u), m);
            if (b->sum_bias)
                add_products_to_columns(b->sum_bias + c, g, one, m);
            const __m512 dx = scaled_product(g, w, alpha, s2, exponent);
            _mm512_mask_storeu_ps(b->out + row + c, m, dx);
        }
    }
    b->sum_param = _mm512_reduce_add_pd(sum_alpha);
}

static void dyt_vjp_avx512(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        dyt_vjp_rows(b, 1);
    else
        dyt_vjp_rows(b, 0);
}

/* ---- N5: DyISRU ---- */

/* The parts of x / sqrt(x^2 + C) relative to the larger of |x| and s =
 * sqrt(C) (reference/norms.c, isru): with ge = (|x| >= s), t = the smaller
 * over the larger (r or |q|), p = 1 + t^2 in [1, 2], sp = sqrt(p):
 *   ge:  f = sign(x) / sp               lt:  f = x / (s sp)
 * NaN x fails |x| >= s and gives NaN; x = +-inf gives t = 0, f = +-1;
 * x = 0 with C = 0 gives t = 0/0, NaN, as the reference. */
typedef struct {
    __mmask16 ge;
    __m512 a, t, p, sp;
} isru_parts;

static inline isru_parts isru_split(__m512 x, __m512 s)
{
    isru_parts v;
    v.a = _mm512_abs_ps(x);
    v.ge = _mm512_cmp_ps_mask(v.a, s, _CMP_GE_OQ);
    const __m512 larger = _mm512_mask_blend_ps(v.ge, s, v.a), smaller = _mm512_mask_blend_ps(v.ge, v.a, s);
    v.t = _mm512_div_ps(smaller, larger);
    v.p = _mm512_fmadd_ps(v.t, v.t, _mm512_set1_ps(1.0f));
    v.sp = _mm512_sqrt_ps(v.p);
    return v;
}

static inline __m512 isru_value(const isru_parts *v, __m512 x, __m512 s)
{
    const __m512 numerator = _mm512_mask_blend_ps(v->ge, x, copy_sign(_mm512_set1_ps(1.0f), x));
    const __m512 denominator = _mm512_mask_blend_ps(v->ge, _mm512_mul_ps(s, v->sp), v->sp);
    return _mm512_div_ps(numerator, denominator);
}

/* y = w f(x) + bias as (w / denominator) numerator + bias, one FMA, with
 * f = numerator / denominator (isru_value): in the second branch the
 * numerator is x itself, so that where x / (s sp) underflows (x subnormal,
 * C large) the FMA still sees the exact x: the digits and the sign of a tiny
 * w f are kept (a tiny negative w f plus a +0 bias is -0, as in the
 * reference). The same number of roundings as w (x / d) + bias. */
static inline __m512 dyisru_lanes(__m512 x, __m512 w, __m512 bias, __m512 s)
{
    const isru_parts v = isru_split(x, s);
    const __m512 numerator = _mm512_mask_blend_ps(v.ge, x, copy_sign(_mm512_set1_ps(1.0f), x));
    const __m512 denominator = _mm512_mask_blend_ps(v.ge, _mm512_mul_ps(s, v.sp), v.sp);
    return _mm512_fmadd_ps(_mm512_div_ps(w, denominator), numerator, bias);
}

/* The same where nothing can overflow or underflow: C in [2^-100, 2^100]
 * (checked once per call: dyisru_fast_C) and |x| <= 2^60 in all 16 lanes
 * (checked per vector by the caller): then x^2 + C is a normal fp32 value
 * and y = (w / sqrt(fma(x, x, C))) x + bias, four roundings, a third of the
 * work of the branches. */
static inline __m512 dyisru_lanes_fast(__m512 x, __m512 w, __m512 bias, __m512 C)
{
    return _mm512_fmadd_ps(_mm512_div_ps(w, _mm512_sqrt_ps(_mm512_fmadd_ps(x, x, C))), x, bias);
}

static inline int dyisru_fast_C(double C) { return C >= 0x1p-100 && C <= 0x1p100; }

/* DyISRU's gradients in double, for the low (high = 0) or high 8 lanes:
 * the reference's two branches (reference/norms.c, isru) in its arithmetic,
 * so that dx is rounded once from a double value (the fp32 chain of t, p,
 * sqrt(p) and p^{3/2} cost up to 3.5 ulp):
 *   ge = |x| >= s:  t = s/|x|,  df/dx = t^2 / (|x| p32),  -df/dC = sign(x) 0.5 / (|x|^2 p32)
 *   lt:             t = |x|/s,  df/dx = 1 / (s p32),      -df/dC = 0.5 x / (s C p32)
 * p = 1 + t^2, p32 = p sqrt(p); no overflow or underflow in double (|x|^2
 * would underflow fp32 below 1e-19). C = 0, x != 0: df/dx = 0 exactly,
 * df/dC = -sign(x)/(2x^2); x = +-inf: both 0; x = C = 0: NaN. Writes
 * dx = dy w df/dx and dy w (-df/dC). */
static inline void isru_gradients_half(__m512 g, __m512 w, __m512 x, __m512 s, __m512 C, int high, __m512d *dx,
                                       __m512d *minus_dC_term)
{
    const __m512d xd = high ? high_half_as_double(x) : low_half_as_double(x);
    const __m512d gw = high ? _mm512_mul_pd(high_half_as_double(g), high_half_as_double(w))
                            : _mm512_mul_pd(low_half_as_double(g), low_half_as_double(w));
    const __m512d sd = high ? high_half_as_double(s) : low_half_as_double(s);
    const __m512d Cd = high ? high_half_as_double(C) : low_half_as_double(C);
    const __m512d one = _mm512_set1_pd(1.0), half = _mm512_set1_pd(0.5);
    const __m512d a = _mm512_abs_pd(xd);
    const __mmask8 ge = _mm512_cmp_pd_mask(a, sd, _CMP_GE_OQ);
    const __m512d larger = _mm512_mask_blend_pd(ge, sd, a), smaller = _mm512_mask_blend_pd(ge, a, sd);
    const __m512d t = _mm512_div_pd(smaller, larger);
    const __m512d p = _mm512_fmadd_pd(t, t, one);
    const __m512d p32 = _mm512_mul_pd(p, _mm512_sqrt_pd(p));
    const __m512d dfdx_numerator = _mm512_mask_blend_pd(ge, one, _mm512_mul_pd(t, t));
    *dx = _mm512_div_pd(_mm512_mul_pd(gw, dfdx_numerator), _mm512_mul_pd(larger, p32));
    const __m512d sign_x = _mm512_castsi512_pd(_mm512_or_si512(
        _mm512_castpd_si512(half),
        _mm512_and_si512(_mm512_castpd_si512(xd), _mm512_set1_epi64((long long)0x8000000000000000ull))));
    const __m512d dC_numerator = _mm512_mask_blend_pd(ge, _mm512_mul_pd(half, xd), sign_x);
    const __m512d dC_denominator =
        _mm512_mul_pd(_mm512_mask_blend_pd(ge, _mm512_mul_pd(sd, Cd), _mm512_mul_pd(a, a)), p32);
    *minus_dC_term = _mm512_div_pd(_mm512_mul_pd(gw, dC_numerator), dC_denominator);
}

static inline __attribute__((always_inline)) void dyisru_vjp_rows(lacs_cpu_norm_block *b, int bf16)
{
    const __m512 s = _mm512_set1_ps((float)sqrt(b->param)), C = _mm512_set1_ps((float)b->param);
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512d minus_sum_C = _mm512_setzero_pd();
    for (int64_t r = 0; r < b->rows; r++) {
        const int64_t row = r * b->dim;
        for (int64_t c = 0; c < b->dim; c += 16) {
            const __mmask16 m = lanes16(b->dim - c);
            const __m512 x = load16(b->x, bf16, row + c, m), g = load16(b->dy, bf16, row + c, m);
            prefetch_ahead(b->x, (row + c) * (bf16 ? 2 : 4));
            prefetch_ahead(b->dy, (row + c) * (bf16 ? 2 : 4));
            prefetch_ahead(b->out, (row + c) * 4);
            const __m512 w = _mm512_maskz_loadu_ps(m, b->weight + c);
            __m512d dx_lo, dx_hi, dC_lo, dC_hi;
            isru_gradients_half(g, w, x, s, C, 0, &dx_lo, &dC_lo);
            isru_gradients_half(g, w, x, s, C, 1, &dx_hi, &dC_hi);
            minus_sum_C = _mm512_mask_add_pd(minus_sum_C, (__mmask8)(m & 0xff), minus_sum_C, dC_lo);
            minus_sum_C = _mm512_mask_add_pd(minus_sum_C, (__mmask8)(m >> 8), minus_sum_C, dC_hi);
            if (b->sum_weight) {
                const isru_parts v = isru_split(x, s);
                add_products_to_columns(b->sum_weight + c, g, isru_value(&v, x, s), m);
            }
            if (b->sum_bias)
                add_products_to_columns(b->sum_bias + c, g, one, m);
            const __m512 dx =
                _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(dx_lo)), _mm512_cvtpd_ps(dx_hi), 1);
            _mm512_mask_storeu_ps(b->out + row + c, m, dx);
        }
    }
    b->sum_param = -_mm512_reduce_add_pd(minus_sum_C);
}

static void dyisru_vjp_avx512(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        dyisru_vjp_rows(b, 1);
    else
        dyisru_vjp_rows(b, 0);
}

/* ---- N6: softcap ---- */

/* cap tanh(x / cap), and x (1 - u^2/3) below |u| = 2^-12, where that is
 * tanh to fp32 rounding and keeps x's own digits (x / cap rounds again when
 * it is subnormal): a subnormal x comes back as itself, -0 as -0. norms.c
 * calls this only for cap in [2^-100, 2^100], so that cap is a normal fp32
 * value and x / cap either is finite or overflows to the limit +-cap. */
static inline __m512 softcap_lanes(__m512 x, __m512 cap)
{
    const __m512 u = _mm512_div_ps(x, cap);
    const __mmask16 tiny = _mm512_cmp_ps_mask(_mm512_abs_ps(u), _mm512_set1_ps(0x1p-12f), _CMP_LT_OQ);
    const __m512 near_zero =
        _mm512_mul_ps(x, _mm512_fnmadd_ps(_mm512_mul_ps(u, u), _mm512_set1_ps(1.0f / 3.0f), _mm512_set1_ps(1.0f)));
    return _mm512_mask_blend_ps(tiny, _mm512_mul_ps(cap, tanh_core16(u)), near_zero);
}

/* dx = dy sech^2(u); dcap's term dy h(u), h(u) = tanh(u) - u sech^2(u): the
 * series u^3 R(u^2) below |u| = 1 (norms.h), where the difference cancels,
 * the direct form above with u sech^2 = 0 where sech^2 = 0 (h(+-inf) = +-1). */
static inline __attribute__((always_inline)) void softcap_vjp_elements(lacs_cpu_norm_block *b, int bf16)
{
    const __m512 cap = _mm512_set1_ps((float)b->param);
    const __m512 one = _mm512_set1_ps(1.0f);
    const int64_t n = b->rows * b->dim;
    __m512d sum_cap = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes16(n - i);
        const __m512 x = load16(b->x, bf16, i, m), g = load16(b->dy, bf16, i, m);
        prefetch_ahead(b->x, i * (bf16 ? 2 : 4));
        prefetch_ahead(b->dy, i * (bf16 ? 2 : 4));
        prefetch_ahead(b->out, i * 4);
        const __m512 u = _mm512_div_ps(x, cap);
        __m512 s2, exponent;
        sech2_of(u, &s2, &exponent);
        const __m512 t = tanh16(u);
        const __m512 u2 = _mm512_mul_ps(u, u);
        __m512 series = _mm512_set1_ps((float)lacs_softcap_dcap_poly[8]);
        for (int k = 7; k >= 0; k--)
            series = _mm512_fmadd_ps(series, u2, _mm512_set1_ps((float)lacs_softcap_dcap_poly[k]));
        series = _mm512_mul_ps(_mm512_mul_ps(u, u2), series);
        const __mmask16 s2_nonzero = _mm512_cmp_ps_mask(s2, _mm512_setzero_ps(), _CMP_NEQ_UQ);
        const __m512 u_s2 = _mm512_scalef_ps(_mm512_maskz_mul_ps(s2_nonzero, u, s2), exponent);
        const __mmask16 below_one = _mm512_cmp_ps_mask(_mm512_abs_ps(u), one, _CMP_LT_OQ);
        const __m512 h = _mm512_mask_blend_ps(below_one, _mm512_sub_ps(t, u_s2), series);
        sum_cap = add_triple_products(sum_cap, g, h, one, m);
        _mm512_mask_storeu_ps(b->out + i, m, scaled_product(g, one, one, s2, exponent));
    }
    b->sum_param = _mm512_reduce_add_pd(sum_cap);
}

static void softcap_vjp_avx512(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        softcap_vjp_elements(b, 1);
    else
        softcap_vjp_elements(b, 0);
}

/* ---- the forward element-wise ops: one walk over the rows ---- */

typedef enum { FORWARD_DYT, FORWARD_DYISRU, FORWARD_SOFTCAP } forward_op;

/* What a forward walk reads, copied out of the block so that the compiler
 * keeps it in registers (a store through __m512 may alias anything,
 * *b included, so fields of *b would be reloaded after every store). */
typedef struct {
    const void *x;
    const float *weight, *bias;
    __m512 parameter, C;
    int fast;
} forward_operands;

/* out[e] for the lanes m of x at element e, column c (op and bf16 are
 * constants where this is inlined, so each caller gets its own loop). */
static inline __attribute__((always_inline)) __m512 forward_lanes(const forward_operands *o, forward_op op, int bf16,
                                                                  int64_t e, int64_t c, __mmask16 m)
{
    const __m512 x = load16(o->x, bf16, e, m);
    prefetch_ahead(o->x, e * (bf16 ? 2 : 4));
    if (op == FORWARD_SOFTCAP)
        return softcap_lanes(x, o->parameter);
    const __m512 w = _mm512_maskz_loadu_ps(m, o->weight + c), bias = _mm512_maskz_loadu_ps(m, o->bias + c);
    if (op == FORWARD_DYT)
        return dyt_lanes(x, w, bias, o->parameter);
    if (o->fast && _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(0x1p60f), _CMP_LE_OQ) == 0xffff)
        return dyisru_lanes_fast(x, w, bias, o->C);
    return dyisru_lanes(x, w, bias, o->parameter);
}

/* Each row (softcap: the whole block as one row) in vectors of 16. With
 * b->stream, the row's vectors that fill whole 64-byte lines of out are
 * written with non-temporal stores (no read of the line before the write:
 * a third less memory traffic), after a masked head that reaches the first
 * line boundary; the rest with masked ordinary stores. */
static inline __attribute__((always_inline)) void forward_rows(lacs_cpu_norm_block *b, forward_op op, int bf16)
{
    const forward_operands o = {
        .x = b->x,
        .weight = b->weight,
        .bias = b->bias,
        .parameter = _mm512_set1_ps(op == FORWARD_DYISRU ? (float)sqrt(b->param) : (float)b->param),
        .C = _mm512_set1_ps((float)b->param),
        .fast = op == FORWARD_DYISRU && dyisru_fast_C(b->param),
    };
    const int64_t rows = op == FORWARD_SOFTCAP ? 1 : b->rows, dim = op == FORWARD_SOFTCAP ? b->rows * b->dim : b->dim;
    float *const out_base = b->out;
    const int stream = b->stream;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t row = r * dim;
        float *out = out_base + row;
        int64_t c = 0;
        if (stream) {
            const int64_t past_line = (int64_t)(((uintptr_t)out & 63) / sizeof(float));
            const int64_t head = past_line ? (16 - past_line < dim ? 16 - past_line : dim) : 0;
            if (head > 0) {
                const __mmask16 m = lanes16(head);
                _mm512_mask_storeu_ps(out, m, forward_lanes(&o, op, bf16, row, 0, m));
                c = head;
            }
            for (; c + 16 <= dim; c += 16)
                _mm512_stream_ps(out + c, forward_lanes(&o, op, bf16, row + c, c, 0xffff));
        }
        for (; c < dim; c += 16) {
            const __mmask16 m = lanes16(dim - c);
            _mm512_mask_storeu_ps(out + c, m, forward_lanes(&o, op, bf16, row + c, c, m));
        }
    }
    if (stream)
        _mm_sfence();
}

static void dyt_avx512(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        forward_rows(b, FORWARD_DYT, 1);
    else
        forward_rows(b, FORWARD_DYT, 0);
}

static void dyisru_avx512(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        forward_rows(b, FORWARD_DYISRU, 1);
    else
        forward_rows(b, FORWARD_DYISRU, 0);
}

static void softcap_avx512(lacs_cpu_norm_block *b)
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
static double sum_of_squares_avx512(const void *x, int bf16, int64_t n)
{
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        const __m512 v = load16(x, bf16, i, lanes16(n - i));
        const __m512d v_lo = low_half_as_double(v), v_hi = high_half_as_double(v);
        lo = _mm512_fmadd_pd(v_lo, v_lo, lo);
        hi = _mm512_fmadd_pd(v_hi, v_hi, hi);
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}

static double weighted_dot_avx512(const void *x, const void *dy, int bf16, const float *weight, int64_t n)
{
    __m512d sum = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes16(n - i);
        sum = add_triple_products(sum, load16(x, bf16, i, m), _mm512_maskz_loadu_ps(m, weight + i),
                                  load16(dy, bf16, i, m), m);
    }
    return _mm512_reduce_add_pd(sum);
}

static void scale_avx512(const void *x, int bf16, int64_t n, double inv, const float *weight, float *y)
{
    const __m512d inv_v = _mm512_set1_pd(inv);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes16(n - i);
        const __m512 v = load16(x, bf16, i, m), w = _mm512_maskz_loadu_ps(m, weight + i);
        const __m512d y_lo = _mm512_mul_pd(low_half_as_double(w), _mm512_mul_pd(low_half_as_double(v), inv_v));
        const __m512d y_hi = _mm512_mul_pd(high_half_as_double(w), _mm512_mul_pd(high_half_as_double(v), inv_v));
        const __m512 out = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(y_lo)), _mm512_cvtpd_ps(y_hi), 1);
        _mm512_mask_storeu_ps(y + i, m, out);
    }
}

static void project_avx512(const void *x, const void *dy, int bf16, int64_t n, const float *weight, double along,
                           double inv, float *dx, double *sum_dy_y)
{
    const __m512d along_v = _mm512_set1_pd(along), inv_v = _mm512_set1_pd(inv);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes16(n - i);
        const __mmask8 m_lo = (__mmask8)(m & 0xff), m_hi = (__mmask8)(m >> 8);
        const __m512 xv = load16(x, bf16, i, m), g = load16(dy, bf16, i, m);
        const __m512 w = _mm512_maskz_loadu_ps(m, weight + i);
        const __m512d x_lo = low_half_as_double(xv), x_hi = high_half_as_double(xv);
        const __m512d g_lo = low_half_as_double(g), g_hi = high_half_as_double(g);
        const __m512d wg_lo = _mm512_mul_pd(low_half_as_double(w), g_lo);
        const __m512d wg_hi = _mm512_mul_pd(high_half_as_double(w), g_hi);
        const __m512d dx_lo = _mm512_mul_pd(_mm512_fnmadd_pd(x_lo, along_v, wg_lo), inv_v);
        const __m512d dx_hi = _mm512_mul_pd(_mm512_fnmadd_pd(x_hi, along_v, wg_hi), inv_v);
        if (sum_dy_y) {
            __m512d s_lo = _mm512_maskz_loadu_pd(m_lo, sum_dy_y + i),
                    s_hi = _mm512_maskz_loadu_pd(m_hi, sum_dy_y + i + 8);
            s_lo = _mm512_fmadd_pd(g_lo, _mm512_mul_pd(x_lo, inv_v), s_lo);
            s_hi = _mm512_fmadd_pd(g_hi, _mm512_mul_pd(x_hi, inv_v), s_hi);
            _mm512_mask_storeu_pd(sum_dy_y + i, m_lo, s_lo);
            _mm512_mask_storeu_pd(sum_dy_y + i + 8, m_hi, s_hi);
        }
        const __m512 out =
            _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(dx_lo)), _mm512_cvtpd_ps(dx_hi), 1);
        _mm512_mask_storeu_ps(dx + i, m, out);
    }
}

const lacs_cpu_norm_kernels lacs_cpu_norm_kernels_avx512 = {
    .isa = "avx512",
    .tanh = tanh_avx512,
    .sech2 = sech2_avx512,
    .dyt = dyt_avx512,
    .dyt_vjp = dyt_vjp_avx512,
    .dyisru = dyisru_avx512,
    .dyisru_vjp = dyisru_vjp_avx512,
    .softcap = softcap_avx512,
    .softcap_vjp = softcap_vjp_avx512,
    .sum_of_squares = sum_of_squares_avx512,
    .weighted_dot = weighted_dot_avx512,
    .scale = scale_avx512,
    .project = project_avx512,
};

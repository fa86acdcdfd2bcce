/* builtin:cpu, the norm family with AVX2 and FMA: 8 fp32 lanes; fp32 tails
 * by masked loads and stores (_mm256_maskload_ps), bf16 tails through a
 * zero-filled buffer (AVX2 has no 16-bit masked load). Called only when
 * dispatch.c chose LACS_ISA_AVX2.
 *
 * The algorithms, and so the error bounds, are those of norms_avx512.c
 * (tanh at most 2.61 ulp, sech^2 1.01 ulp, over all fp32 inputs),
 * with two substitutions: 2^n is applied as two exact multiplications by
 * normal powers of two (the second rounds once into the subnormals, as
 * _mm512_scalef_ps does), and the approximate reciprocal in sech^2's
 * correction is _mm256_rcp_ps refined by one Newton step.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "norms.h"

/* ---- lanes ---- */

/* All ones in the first `count` 32-bit lanes of 8. */
static inline __m256i lanes8(int64_t count)
{
    const int32_t n = count >= 8 ? 8 : (int32_t)count;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 8 values from p + i, fp32 or bf16 (widened exactly); lanes at or past
 * `count` read as +0 and touch no memory. */
static inline __m256 load8(const void *p, int bf16, int64_t i, int64_t count)
{
    if (bf16) {
        __m128i half;
        if (count >= 8) {
            half = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
        } else {
            uint16_t buffer[8] = {0};
            memcpy(buffer, (const uint16_t *)p + i, (size_t)count * sizeof(uint16_t));
            half = _mm_loadu_si128((const __m128i *)buffer);
        }
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
    }
    if (count >= 8)
        return _mm256_loadu_ps((const float *)p + i);
    return _mm256_maskload_ps((const float *)p + i, lanes8(count));
}

static inline __m256 load8_f32(const float *p, int64_t count) { return load8(p, 0, 0, count); }

static inline void store8(float *p, __m256 v, int64_t count)
{
    if (count >= 8)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, lanes8(count), v);
}

static inline __m256d low_half_as_double(__m256 v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
static inline __m256d high_half_as_double(__m256 v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }

/* The 64-bit lane masks of the low and high four of eight 32-bit lanes. */
static inline __m256i low_mask64(__m256i m) { return _mm256_cvtepi32_epi64(_mm256_castsi256_si128(m)); }
static inline __m256i high_mask64(__m256i m) { return _mm256_cvtepi32_epi64(_mm256_extracti128_si256(m, 1)); }

/* sum[i] += a[i] * b[i] in double for the first `count` lanes (a
 * per-column partial sum: dweight, dbias). */
static inline void add_products_to_columns(double *sum, __m256 a, __m256 b, int64_t count)
{
    const __m256i m = lanes8(count), lo = low_mask64(m), hi = high_mask64(m);
    __m256d s_lo = _mm256_maskload_pd(sum, lo), s_hi = _mm256_maskload_pd(sum + 4, hi);
    s_lo = _mm256_fmadd_pd(low_half_as_double(a), low_half_as_double(b), s_lo);
    s_hi = _mm256_fmadd_pd(high_half_as_double(a), high_half_as_double(b), s_hi);
    _mm256_maskstore_pd(sum, lo, s_lo);
    _mm256_maskstore_pd(sum + 4, hi, s_hi);
}

/* acc (4 doubles) += a * b * c in double for the first `count` lanes (masked
 * so that a tail lane's 0 * NaN cannot reach the sum). */
static inline __m256d add_triple_products(__m256d acc, __m256 a, __m256 b, __m256 c, int64_t count)
{
    const __m256i m = lanes8(count);
    const __m256d p_lo =
        _mm256_mul_pd(_mm256_mul_pd(low_half_as_double(a), low_half_as_double(b)), low_half_as_double(c));
    const __m256d p_hi =
        _mm256_mul_pd(_mm256_mul_pd(high_half_as_double(a), high_half_as_double(b)), high_half_as_double(c));
    acc = _mm256_add_pd(acc, _mm256_and_pd(p_lo, _mm256_castsi256_pd(low_mask64(m))));
    return _mm256_add_pd(acc, _mm256_and_pd(p_hi, _mm256_castsi256_pd(high_mask64(m))));
}

/* The sum of the 4 lanes, in lane order. */
static inline double reduce_add(__m256d v)
{
    double lanes[4];
    _mm256_storeu_pd(lanes, v);
    return ((lanes[0] + lanes[1]) + lanes[2]) + lanes[3];
}

static inline __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

static inline __m256 copy_sign(__m256 magnitude, __m256 sign_from)
{
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(sign_bit, magnitude), _mm256_and_ps(sign_bit, sign_from));
}

/* blend(mask, if_clear, if_set) */
static inline __m256 select8(__m256 mask, __m256 if_clear, __m256 if_set)
{
    return _mm256_blendv_ps(if_clear, if_set, mask);
}

/* Software prefetch of the line PREFETCH_BYTES past byte offset_bytes of p
 * (norms_avx512.c, prefetch_ahead: the out-of-order window alone keeps too
 * few cache misses in flight for kernels this long; always_inline, or GCC
 * deletes the calls). */
#define PREFETCH_BYTES 4096
static inline __attribute__((always_inline)) void prefetch_ahead(const void *p, int64_t offset_bytes)
{
    _mm_prefetch((const char *)((uintptr_t)p + (uintptr_t)(offset_bytes + PREFETCH_BYTES)), _MM_HINT_T0);
}

/* ---- exp, tanh, sech^2 ---- */

/* p 2^n for integral n <= 2, as (p 2^h) 2^(n - h), h = floor(n/2): both
 * powers are normal, the first product is exact and the second rounds once
 * (into the subnormals where the result is one). n below -252 is raised to
 * -252, where any p <= 4 gives 0 as well. */
static inline __m256 scale_by_power_of_two(__m256 p, __m256 n)
{
    const __m256i ni = _mm256_max_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(-252));
    const __m256i h = _mm256_srai_epi32(ni, 1), rest = _mm256_sub_epi32(ni, h);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 first = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
    const __m256 second = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, first), second);
}

/* v 2^n in double for integral n in [-2044, 2] (4 lanes of n as int32), in
 * two exact or once-rounding steps by normal powers of two, as above. */
static inline __m256d scale_double_by_power_of_two(__m256d v, __m128i n)
{
    const __m128i clamped = _mm_max_epi32(n, _mm_set1_epi32(-2044));
    const __m128i h = _mm_srai_epi32(clamped, 1), rest = _mm_sub_epi32(clamped, h);
    const __m256i bias = _mm256_set1_epi64x(1023);
    const __m256d first = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(h), bias), 52));
    const __m256d second =
        _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(rest), bias), 52));
    return _mm256_mul_pd(_mm256_mul_pd(v, first), second);
}

/* exp(v) = 2^n (1 + p), p = exp(r) - 1 = r + r^2 Q(r) (norms.h): returns p
 * and sets n (norms_avx512.c, exp_reduced). */
static inline __m256 exp_reduced(__m256 v, __m256 *n)
{
    *n = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps((float)LACS_LOG2E)),
                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(*n, _mm256_set1_ps((float)LACS_LN2_HI), v);
    r = _mm256_fnmadd_ps(*n, _mm256_set1_ps((float)LACS_LN2_LO), r);
    __m256 q = _mm256_set1_ps((float)lacs_exp_poly[4]);
    for (int i = 3; i >= 0; i--)
        q = _mm256_fmadd_ps(q, r, _mm256_set1_ps((float)lacs_exp_poly[i]));
    return _mm256_fmadd_ps(_mm256_mul_ps(r, r), q, r);
}

/* A reciprocal to 2^-22: _mm256_rcp_ps (1.5 * 2^-12) and one Newton step. */
static inline __m256 reciprocal8(__m256 d)
{
    const __m256 estimate = _mm256_rcp_ps(d);
    return _mm256_fmadd_ps(estimate, _mm256_fnmadd_ps(d, estimate, _mm256_set1_ps(1.0f)), estimate);
}

/* tanh(u) = E / (E + 2), E = expm1(2|u|) = (2^n - 1) + 2^n p with one FMA,
 * |u| capped at 9.5, for |u| >= 2^-12 (norms_avx512.c, tanh_core16). */
static inline __m256 tanh_core8(__m256 u)
{
    const __m256 a = abs8(u);
    const __m256 capped = _mm256_min_ps(_mm256_set1_ps(9.5f), a);
    __m256 n;
    const __m256 p = exp_reduced(_mm256_add_ps(capped, capped), &n);
    /* 2^n for n in [0, 28] (|u| <= 9.5): a normal power of two, built from its bits */
    const __m256 power =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
    const __m256 E = _mm256_fmadd_ps(power, p, _mm256_sub_ps(power, _mm256_set1_ps(1.0f)));
    return copy_sign(_mm256_div_ps(E, _mm256_add_ps(E, _mm256_set1_ps(2.0f))), u);
}

/* tanh(u) for every u: u itself below |u| = 2^-12. */
static inline __m256 tanh8(__m256 u)
{
    const __m256 tiny = _mm256_cmp_ps(abs8(u), _mm256_set1_ps(0x1p-12f), _CMP_LT_OQ);
    return select8(tiny, tanh_core8(u), u);
}

/* sech^2(u) = s 2^n with s = 4 (1 + p) / (1 + e)^2, every rounding before
 * the last recovered, s = 0 from |u| = 372.566589 on, where the reference's
 * double sech^2 is 0 (norms_avx512.c, sech2_scaled). */
#define SECH2_POSITIVE_IN_DOUBLE 0x1.74910cp+8f
static inline __m256 sech2_scaled(__m256 p, __m256 n, __m256 a)
{
    const __m256 one = _mm256_set1_ps(1.0f), four = _mm256_set1_ps(4.0f);
    const __m256 m = _mm256_add_ps(one, p);
    const __m256 m_err = _mm256_add_ps(_mm256_sub_ps(one, m), p);
    const __m256 e = scale_by_power_of_two(m, n), e_lo = scale_by_power_of_two(m_err, n);
    const __m256 d = _mm256_add_ps(one, e);
    const __m256 d_err = _mm256_add_ps(_mm256_add_ps(_mm256_sub_ps(one, d), e), e_lo);
    const __m256 dd = _mm256_mul_ps(d, d);
    const __m256 dd_lo = _mm256_fmadd_ps(_mm256_add_ps(d, d), d_err, _mm256_fmsub_ps(d, d, dd));
    const __m256 reciprocal = reciprocal8(dd);
    const __m256 four_m = _mm256_mul_ps(four, m);
    const __m256 q = _mm256_mul_ps(four_m, reciprocal);
    const __m256 remainder = _mm256_fnmadd_ps(q, dd_lo, _mm256_fmadd_ps(four, m_err, _mm256_fnmadd_ps(q, dd, four_m)));
    const __m256 scaled = _mm256_fmadd_ps(remainder, reciprocal, q);
    const __m256 zero_in_double = _mm256_cmp_ps(a, _mm256_set1_ps(SECH2_POSITIVE_IN_DOUBLE), _CMP_GT_OQ);
    return _mm256_andnot_ps(zero_in_double, scaled);
}

/* sech^2(u) = *scaled 2^*exponent, |u| capped at 372.566589 (norms_avx512.c,
 * sech2_of). */
static inline void sech2_of(__m256 u, __m256 *scaled, __m256 *exponent)
{
    const __m256 a = abs8(u);
    const __m256 capped = _mm256_min_ps(_mm256_set1_ps(SECH2_POSITIVE_IN_DOUBLE), a);
    const __m256 p = exp_reduced(_mm256_mul_ps(capped, _mm256_set1_ps(-2.0f)), exponent);
    *scaled = sech2_scaled(p, *exponent, a);
}

/* a b c s 2^n for the low (high = 0) or high 4 lanes, in double (products
 * of two fp32 values exact, their product one rounding, the scaling exact;
 * no intermediate overflow or underflow). NaN n (NaN u) converts to the
 * most negative integer: s is NaN there, and so is the result. */
static inline __m256d scaled_product_half(__m256 a, __m256 b, __m256 c, __m256 s, __m256 n, int high)
{
    const __m256d ab = high ? _mm256_mul_pd(high_half_as_double(a), high_half_as_double(b))
                            : _mm256_mul_pd(low_half_as_double(a), low_half_as_double(b));
    const __m256d cs = high ? _mm256_mul_pd(high_half_as_double(c), high_half_as_double(s))
                            : _mm256_mul_pd(low_half_as_double(c), low_half_as_double(s));
    const __m256i ni = _mm256_cvtps_epi32(n);
    return scale_double_by_power_of_two(_mm256_mul_pd(ab, cs),
                                        high ? _mm256_extracti128_si256(ni, 1) : _mm256_castsi256_si128(ni));
}

/* Two vectors of 4 doubles rounded to one of 8 fp32. */
static inline __m256 round_to_float(__m256d lo, __m256d hi)
{
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
}

/* a b c s 2^n rounded once to fp32. */
static inline __m256 scaled_product(__m256 a, __m256 b, __m256 c, __m256 s, __m256 n)
{
    return round_to_float(scaled_product_half(a, b, c, s, n, 0), scaled_product_half(a, b, c, s, n, 1));
}

/* acc += a b c s 2^n in double, for the first `count` lanes. */
static inline __m256d add_scaled_products(__m256d acc, __m256 a, __m256 b, __m256 c, __m256 s, __m256 n, int64_t count)
{
    const __m256i m = lanes8(count);
    acc = _mm256_add_pd(acc, _mm256_and_pd(scaled_product_half(a, b, c, s, n, 0), _mm256_castsi256_pd(low_mask64(m))));
    return _mm256_add_pd(acc,
                         _mm256_and_pd(scaled_product_half(a, b, c, s, n, 1), _mm256_castsi256_pd(high_mask64(m))));
}

static void tanh_avx2(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i += 8)
        store8(y + i, tanh8(load8_f32(x + i, n - i)), n - i);
}

static void sech2_avx2(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i += 8) {
        __m256 s2, exponent;
        sech2_of(load8_f32(x + i, n - i), &s2, &exponent);
        store8(y + i, scale_by_power_of_two(s2, exponent), n - i);
    }
}

/* ---- N1: DyT ---- */

/* y = w tanh(alpha x) + bias, and (w alpha) x + bias below |alpha x| =
 * 2^-12, where alpha x may underflow in fp32 but not in the reference's
 * double (norms_avx512.c, dyt_lanes). */
static inline __m256 dyt_lanes(__m256 x, __m256 w, __m256 bias, __m256 alpha)
{
    const __m256 u = _mm256_mul_ps(alpha, x);
    const __m256 tiny = _mm256_cmp_ps(abs8(u), _mm256_set1_ps(0x1p-12f), _CMP_LT_OQ);
    const __m256 y = _mm256_fmadd_ps(w, tanh_core8(u), bias);
    return select8(tiny, y, _mm256_fmadd_ps(_mm256_mul_ps(w, alpha), x, bias));
}

/* The VJPs' row loops are written once with the input type as a parameter
 * and called with a constant, so that the compiler makes one loop per type.
 * DyT's: dx = dy w alpha sech^2 formed in double and rounded once; dalpha's
 * term dy w x sech^2 with x sech^2 = 0 where sech^2 = 0 (norms_avx512.c). */
static inline __attribute__((always_inline)) void dyt_vjp_rows(lacs_cpu_norm_block *b, int bf16)
{
    const __m256 alpha = _mm256_set1_ps((float)b->param);
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256d sum_alpha = _mm256_setzero_pd();
    for (int64_t r = 0; r < b->rows; r++) {
        const int64_t row = r * b->dim;
        for (int64_t c = 0; c < b->dim; c += 8) {
            const int64_t count = b->dim - c;
            const __m256 x = load8(b->x, bf16, row + c, count), g = load8(b->dy, bf16, row + c, count);
            prefetch_ahead(b->x, (row + c) * (bf16 ? 2 : 4));
            prefetch_ahead(b->dy, (row + c) * (bf16 ? 2 : 4));
            prefetch_ahead(b->out, (row + c) * 4);
            const __m256 w = load8_f32(b->weight + c, count);
            const __m256 u = _mm256_mul_ps(alpha, x);
            __m256 s2, exponent;
            sech2_of(u, &s2, &exponent);
            const __m256 s2_nonzero = _mm256_cmp_ps(s2, _mm256_setzero_ps(), _CMP_NEQ_UQ);
            sum_alpha = add_scaled_products(sum_alpha, g, w, _mm256_and_ps(x, s2_nonzero), s2, exponent, count);
            if (b->sum_weight)
                add_products_to_columns(b->sum_weight + c, g, tanh8(u), count);
            if (b->sum_bias)
                add_products_to_columns(b->sum_bias + c, g, one, count);
            const __m256 dx = scaled_product(g, w, alpha, s2, exponent);
            store8(b->out + row + c, dx, count);
        }
    }
    b->sum_param = reduce_add(sum_alpha);
}

static void dyt_vjp_avx2(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        dyt_vjp_rows(b, 1);
    else
        dyt_vjp_rows(b, 0);
}

/* ---- N5: DyISRU ---- */

/* The reference's two branches relative to the larger of |x| and s = sqrt(C)
 * (norms_avx512.c, isru_split): ge = (|x| >= s), t = smaller / larger,
 * p = 1 + t^2, sp = sqrt(p); f = sign(x) / sp or x / (s sp). */
typedef struct {
    __m256 ge, a, t, p, sp;
} isru_parts;

static inline isru_parts isru_split(__m256 x, __m256 s)
{
    isru_parts v;
    v.a = abs8(x);
    v.ge = _mm256_cmp_ps(v.a, s, _CMP_GE_OQ);
    const __m256 larger = select8(v.ge, s, v.a), smaller = select8(v.ge, v.a, s);
    v.t = _mm256_div_ps(smaller, larger);
    v.p = _mm256_fmadd_ps(v.t, v.t, _mm256_set1_ps(1.0f));
    v.sp = _mm256_sqrt_ps(v.p);
    return v;
}

static inline __m256 isru_value(const isru_parts *v, __m256 x, __m256 s)
{
    const __m256 numerator = select8(v->ge, x, copy_sign(_mm256_set1_ps(1.0f), x));
    const __m256 denominator = select8(v->ge, _mm256_mul_ps(s, v->sp), v->sp);
    return _mm256_div_ps(numerator, denominator);
}

/* y = (w / denominator) numerator + bias, one FMA that sees x itself
 * (norms_avx512.c, dyisru_lanes). */
static inline __m256 dyisru_lanes(__m256 x, __m256 w, __m256 bias, __m256 s)
{
    const isru_parts v = isru_split(x, s);
    const __m256 numerator = select8(v.ge, x, copy_sign(_mm256_set1_ps(1.0f), x));
    const __m256 denominator = select8(v.ge, _mm256_mul_ps(s, v.sp), v.sp);
    return _mm256_fmadd_ps(_mm256_div_ps(w, denominator), numerator, bias);
}

/* The same where nothing can overflow or underflow (norms_avx512.c,
 * dyisru_lanes_fast): C in [2^-100, 2^100] and |x| <= 2^60 in all lanes. */
static inline __m256 dyisru_lanes_fast(__m256 x, __m256 w, __m256 bias, __m256 C)
{
    return _mm256_fmadd_ps(_mm256_div_ps(w, _mm256_sqrt_ps(_mm256_fmadd_ps(x, x, C))), x, bias);
}

static inline int dyisru_fast_C(double C) { return C >= 0x1p-100 && C <= 0x1p100; }

/* DyISRU's gradients in double for the low (high = 0) or high 4 lanes: the
 * reference's two branches in its arithmetic (norms_avx512.c,
 * isru_gradients_half); writes dx = dy w df/dx and dy w (-df/dC). */
static inline void isru_gradients_half(__m256 g, __m256 w, __m256 x, double s, double C, int high, __m256d *dx,
                                       __m256d *minus_dC_term)
{
    const __m256d xd = high ? high_half_as_double(x) : low_half_as_double(x);
    const __m256d gw = high ? _mm256_mul_pd(high_half_as_double(g), high_half_as_double(w))
                            : _mm256_mul_pd(low_half_as_double(g), low_half_as_double(w));
    const __m256d sd = _mm256_set1_pd(s), one = _mm256_set1_pd(1.0), half = _mm256_set1_pd(0.5);
    const __m256d sign_bit = _mm256_set1_pd(-0.0);
    const __m256d a = _mm256_andnot_pd(sign_bit, xd);
    const __m256d ge = _mm256_cmp_pd(a, sd, _CMP_GE_OQ);
    const __m256d larger = _mm256_blendv_pd(sd, a, ge), smaller = _mm256_blendv_pd(a, sd, ge);
    const __m256d t = _mm256_div_pd(smaller, larger);
    const __m256d p = _mm256_fmadd_pd(t, t, one);
    const __m256d p32 = _mm256_mul_pd(p, _mm256_sqrt_pd(p));
    const __m256d dfdx_numerator = _mm256_blendv_pd(one, _mm256_mul_pd(t, t), ge);
    *dx = _mm256_div_pd(_mm256_mul_pd(gw, dfdx_numerator), _mm256_mul_pd(larger, p32));
    const __m256d sign_x = _mm256_or_pd(half, _mm256_and_pd(sign_bit, xd));
    const __m256d dC_numerator = _mm256_blendv_pd(_mm256_mul_pd(half, xd), sign_x, ge);
    const __m256d dC_denominator = _mm256_mul_pd(_mm256_blendv_pd(_mm256_set1_pd(s * C), _mm256_mul_pd(a, a), ge), p32);
    *minus_dC_term = _mm256_div_pd(_mm256_mul_pd(gw, dC_numerator), dC_denominator);
}

static inline __attribute__((always_inline)) void dyisru_vjp_rows(lacs_cpu_norm_block *b, int bf16)
{
    const float s_f32 = (float)sqrt(b->param), C_f32 = (float)b->param;
    const __m256 s = _mm256_set1_ps(s_f32);
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256d minus_sum_C = _mm256_setzero_pd();
    for (int64_t r = 0; r < b->rows; r++) {
        const int64_t row = r * b->dim;
        for (int64_t c = 0; c < b->dim; c += 8) {
            const int64_t count = b->dim - c;
            const __m256 x = load8(b->x, bf16, row + c, count), g = load8(b->dy, bf16, row + c, count);
            prefetch_ahead(b->x, (row + c) * (bf16 ? 2 : 4));
            prefetch_ahead(b->dy, (row + c) * (bf16 ? 2 : 4));
            prefetch_ahead(b->out, (row + c) * 4);
            const __m256 w = load8_f32(b->weight + c, count);
            __m256d dx_lo, dx_hi, dC_lo, dC_hi;
            isru_gradients_half(g, w, x, s_f32, C_f32, 0, &dx_lo, &dC_lo);
            isru_gradients_half(g, w, x, s_f32, C_f32, 1, &dx_hi, &dC_hi);
            const __m256i m = lanes8(count);
            minus_sum_C = _mm256_add_pd(minus_sum_C, _mm256_and_pd(dC_lo, _mm256_castsi256_pd(low_mask64(m))));
            minus_sum_C = _mm256_add_pd(minus_sum_C, _mm256_and_pd(dC_hi, _mm256_castsi256_pd(high_mask64(m))));
            if (b->sum_weight) {
                const isru_parts v = isru_split(x, s);
                add_products_to_columns(b->sum_weight + c, g, isru_value(&v, x, s), count);
            }
            if (b->sum_bias)
                add_products_to_columns(b->sum_bias + c, g, one, count);
            store8(b->out + row + c, round_to_float(dx_lo, dx_hi), count);
        }
    }
    b->sum_param = -reduce_add(minus_sum_C);
}

static void dyisru_vjp_avx2(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        dyisru_vjp_rows(b, 1);
    else
        dyisru_vjp_rows(b, 0);
}

/* ---- N6: softcap ---- */

/* cap tanh(x / cap), and x (1 - u^2/3) below |u| = 2^-12 (norms_avx512.c,
 * softcap_lanes); cap in [2^-100, 2^100] (norms.c). */
static inline __m256 softcap_lanes(__m256 x, __m256 cap)
{
    const __m256 u = _mm256_div_ps(x, cap);
    const __m256 tiny = _mm256_cmp_ps(abs8(u), _mm256_set1_ps(0x1p-12f), _CMP_LT_OQ);
    const __m256 near_zero =
        _mm256_mul_ps(x, _mm256_fnmadd_ps(_mm256_mul_ps(u, u), _mm256_set1_ps(1.0f / 3.0f), _mm256_set1_ps(1.0f)));
    return select8(tiny, _mm256_mul_ps(cap, tanh_core8(u)), near_zero);
}

/* dx = dy sech^2(u); dcap's term dy h(u): u^3 R(u^2) below |u| = 1, the
 * direct tanh(u) - u sech^2(u) above, u sech^2 = 0 where sech^2 = 0. */
static inline __attribute__((always_inline)) void softcap_vjp_elements(lacs_cpu_norm_block *b, int bf16)
{
    const __m256 cap = _mm256_set1_ps((float)b->param);
    const __m256 one = _mm256_set1_ps(1.0f);
    const int64_t n = b->rows * b->dim;
    __m256d sum_cap = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 x = load8(b->x, bf16, i, n - i), g = load8(b->dy, bf16, i, n - i);
        prefetch_ahead(b->x, i * (bf16 ? 2 : 4));
        prefetch_ahead(b->dy, i * (bf16 ? 2 : 4));
        prefetch_ahead(b->out, i * 4);
        const __m256 u = _mm256_div_ps(x, cap);
        __m256 s2, exponent;
        sech2_of(u, &s2, &exponent);
        const __m256 t = tanh8(u);
        const __m256 u2 = _mm256_mul_ps(u, u);
        __m256 series = _mm256_set1_ps((float)lacs_softcap_dcap_poly[8]);
        for (int k = 7; k >= 0; k--)
            series = _mm256_fmadd_ps(series, u2, _mm256_set1_ps((float)lacs_softcap_dcap_poly[k]));
        series = _mm256_mul_ps(_mm256_mul_ps(u, u2), series);
        const __m256 s2_nonzero = _mm256_cmp_ps(s2, _mm256_setzero_ps(), _CMP_NEQ_UQ);
        const __m256 u_s2 = scale_by_power_of_two(_mm256_and_ps(_mm256_mul_ps(u, s2), s2_nonzero), exponent);
        const __m256 below_one = _mm256_cmp_ps(abs8(u), one, _CMP_LT_OQ);
        sum_cap = add_triple_products(sum_cap, g, select8(below_one, _mm256_sub_ps(t, u_s2), series), one, n - i);
        store8(b->out + i, scaled_product(g, one, one, s2, exponent), n - i);
    }
    b->sum_param = reduce_add(sum_cap);
}

static void softcap_vjp_avx2(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        softcap_vjp_elements(b, 1);
    else
        softcap_vjp_elements(b, 0);
}

/* ---- the forward element-wise ops: one walk over the rows ---- */

typedef enum { FORWARD_DYT, FORWARD_DYISRU, FORWARD_SOFTCAP } forward_op;

/* What a forward walk reads, copied out of the block so that the compiler
 * keeps it in registers (norms_avx512.c, forward_operands). */
typedef struct {
    const void *x;
    const float *weight, *bias;
    __m256 parameter, C;
    int fast;
} forward_operands;

/* out for the `count` lanes of x at element e, column c (op and bf16 are
 * constants where this is inlined). */
static inline __attribute__((always_inline)) __m256 forward_lanes(const forward_operands *o, forward_op op, int bf16,
                                                                  int64_t e, int64_t c, int64_t count)
{
    const __m256 x = load8(o->x, bf16, e, count);
    prefetch_ahead(o->x, e * (bf16 ? 2 : 4));
    if (op == FORWARD_SOFTCAP)
        return softcap_lanes(x, o->parameter);
    const __m256 w = load8_f32(o->weight + c, count), bias = load8_f32(o->bias + c, count);
    if (op == FORWARD_DYT)
        return dyt_lanes(x, w, bias, o->parameter);
    if (o->fast && _mm256_movemask_ps(_mm256_cmp_ps(abs8(x), _mm256_set1_ps(0x1p60f), _CMP_LE_OQ)) == 0xff)
        return dyisru_lanes_fast(x, w, bias, o->C);
    return dyisru_lanes(x, w, bias, o->parameter);
}

/* Each row (softcap: the block as one row) in vectors of 8; with b->stream
 * the vectors that fill whole 32-byte halves of lines go out with
 * non-temporal stores after a masked head (norms_avx512.c, forward_rows). */
static inline __attribute__((always_inline)) void forward_rows(lacs_cpu_norm_block *b, forward_op op, int bf16)
{
    const forward_operands o = {
        .x = b->x,
        .weight = b->weight,
        .bias = b->bias,
        .parameter = _mm256_set1_ps(op == FORWARD_DYISRU ? (float)sqrt(b->param) : (float)b->param),
        .C = _mm256_set1_ps((float)b->param),
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
            const int64_t past_boundary = (int64_t)(((uintptr_t)out & 31) / sizeof(float));
            const int64_t head = past_boundary ? (8 - past_boundary < dim ? 8 - past_boundary : dim) : 0;
            if (head > 0) {
                store8(out, forward_lanes(&o, op, bf16, row, 0, head), head);
                c = head;
            }
            for (; c + 8 <= dim; c += 8)
                _mm256_stream_ps(out + c, forward_lanes(&o, op, bf16, row + c, c, 8));
        }
        for (; c < dim; c += 8)
            store8(out + c, forward_lanes(&o, op, bf16, row + c, c, dim - c), dim - c);
    }
    if (stream)
        _mm_sfence();
}

static void dyt_avx2(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        forward_rows(b, FORWARD_DYT, 1);
    else
        forward_rows(b, FORWARD_DYT, 0);
}

static void dyisru_avx2(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        forward_rows(b, FORWARD_DYISRU, 1);
    else
        forward_rows(b, FORWARD_DYISRU, 0);
}

static void softcap_avx2(lacs_cpu_norm_block *b)
{
    if (b->bf16)
        forward_rows(b, FORWARD_SOFTCAP, 1);
    else
        forward_rows(b, FORWARD_SOFTCAP, 0);
}

/* ---- rows of rmsnorm and l2norm, in double ---- */

/* fp32 squares and products of two fp32 values are exact in double and
 * neither overflow nor underflow there (norms_avx512.c). */
static double sum_of_squares_avx2(const void *x, int bf16, int64_t n)
{
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 v = load8(x, bf16, i, n - i);
        const __m256d v_lo = low_half_as_double(v), v_hi = high_half_as_double(v);
        lo = _mm256_fmadd_pd(v_lo, v_lo, lo);
        hi = _mm256_fmadd_pd(v_hi, v_hi, hi);
    }
    return reduce_add(_mm256_add_pd(lo, hi));
}

static double weighted_dot_avx2(const void *x, const void *dy, int bf16, const float *weight, int64_t n)
{
    __m256d sum = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; i += 8)
        sum = add_triple_products(sum, load8(x, bf16, i, n - i), load8_f32(weight + i, n - i),
                                  load8(dy, bf16, i, n - i), n - i);
    return reduce_add(sum);
}

static void scale_avx2(const void *x, int bf16, int64_t n, double inv, const float *weight, float *y)
{
    const __m256d inv_v = _mm256_set1_pd(inv);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 v = load8(x, bf16, i, n - i), w = load8_f32(weight + i, n - i);
        const __m256d y_lo = _mm256_mul_pd(low_half_as_double(w), _mm256_mul_pd(low_half_as_double(v), inv_v));
        const __m256d y_hi = _mm256_mul_pd(high_half_as_double(w), _mm256_mul_pd(high_half_as_double(v), inv_v));
        store8(y + i, round_to_float(y_lo, y_hi), n - i);
    }
}

static void project_avx2(const void *x, const void *dy, int bf16, int64_t n, const float *weight, double along,
                         double inv, float *dx, double *sum_dy_y)
{
    const __m256d along_v = _mm256_set1_pd(along), inv_v = _mm256_set1_pd(inv);
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t count = n - i;
        const __m256 xv = load8(x, bf16, i, count), g = load8(dy, bf16, i, count);
        const __m256 w = load8_f32(weight + i, count);
        const __m256d x_lo = low_half_as_double(xv), x_hi = high_half_as_double(xv);
        const __m256d g_lo = low_half_as_double(g), g_hi = high_half_as_double(g);
        const __m256d wg_lo = _mm256_mul_pd(low_half_as_double(w), g_lo);
        const __m256d wg_hi = _mm256_mul_pd(high_half_as_double(w), g_hi);
        const __m256d dx_lo = _mm256_mul_pd(_mm256_fnmadd_pd(x_lo, along_v, wg_lo), inv_v);
        const __m256d dx_hi = _mm256_mul_pd(_mm256_fnmadd_pd(x_hi, along_v, wg_hi), inv_v);
        if (sum_dy_y) {
            const __m256i m = lanes8(count), m_lo = low_mask64(m), m_hi = high_mask64(m);
            __m256d s_lo = _mm256_maskload_pd(sum_dy_y + i, m_lo), s_hi = _mm256_maskload_pd(sum_dy_y + i + 4, m_hi);
            s_lo = _mm256_fmadd_pd(g_lo, _mm256_mul_pd(x_lo, inv_v), s_lo);
            s_hi = _mm256_fmadd_pd(g_hi, _mm256_mul_pd(x_hi, inv_v), s_hi);
            _mm256_maskstore_pd(sum_dy_y + i, m_lo, s_lo);
            _mm256_maskstore_pd(sum_dy_y + i + 4, m_hi, s_hi);
        }
        store8(dx + i, round_to_float(dx_lo, dx_hi), count);
    }
}

const lacs_cpu_norm_kernels lacs_cpu_norm_kernels_avx2 = {
    .isa = "avx2",
    .tanh = tanh_avx2,
    .sech2 = sech2_avx2,
    .dyt = dyt_avx2,
    .dyt_vjp = dyt_vjp_avx2,
    .dyisru = dyisru_avx2,
    .dyisru_vjp = dyisru_vjp_avx2,
    .softcap = softcap_avx2,
    .softcap_vjp = softcap_vjp_avx2,
    .sum_of_squares = sum_of_squares_avx2,
    .weighted_dot = weighted_dot_avx2,
    .scale = scale_avx2,
    .project = project_avx2,
};

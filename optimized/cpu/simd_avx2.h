/* builtin:cpu: the vector primitives of AVX2 with FMA, 8 fp32 lanes: the
 * same names and semantics as simd_avx512.h (which lists them), for the
 * files named *_avx2.c (compiled for AVX2, called only where dispatch.c
 * chose LACS_ISA_AVX2). What AVX2 lacks is built here:
 *   - masks are vectors (all ones in a lane that is set);
 *   - fp32 tails by vmaskmovps; bf16 tails by a masked load of their whole
 *     pairs (32-bit words) and an odd last element blended in (AVX2 has no
 *     16-bit masked load);
 *   - v_scale_pow2 (vscalefps) as two exact or once-rounding multiplications
 *     by normal powers of two, 2^h 2^(n-h) with h = floor(n / 2), so that a
 *     result below the normal range is rounded once into the subnormals, as
 *     vscalefps does; n below -252 is raised to -252, which changes nothing
 *     for |p| <= 2^100 (the result is 0 either way);
 *   - v_reciprocal (vrcp14ps) as vrcpps (1.5 2^-12) refined by one Newton
 *     step (2^-22).
 */
#ifndef LACS_CPU_SIMD_AVX2_H
#define LACS_CPU_SIMD_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define SIMD_ISA "avx2"
#define SIMD_LANES 8

typedef __m256 vfloat;
typedef __m256d vdouble;
typedef __m256 vmask;
typedef __m256d vdmask;

/* ---- masks ---- */

static inline vmask vm_first(int64_t count)
{
    const int32_t n = count >= 8 ? 8 : count <= 0 ? 0 : (int32_t)count;
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}
static inline int vm_all(vmask m) { return _mm256_movemask_ps(m) == 0xff; }
static inline int vm_none(vmask m) { return _mm256_movemask_ps(m) == 0; }
static inline vmask vm_and(vmask a, vmask b) { return _mm256_and_ps(a, b); }
static inline vmask vm_or(vmask a, vmask b) { return _mm256_or_ps(a, b); }

/* ---- memory ---- */

static inline vfloat v_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void v_store(float *p, vfloat v) { _mm256_storeu_ps(p, v); }
static inline vfloat v_load_first(const float *p, int64_t count)
{
    return count >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, _mm256_castps_si256(vm_first(count)));
}
static inline void v_store_first(float *p, vfloat v, int64_t count)
{
    if (count >= 8)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, _mm256_castps_si256(vm_first(count)), v);
}
static inline void v_stream(float *p, vfloat v) { _mm256_stream_ps(p, v); }
static inline vfloat v_widen_bf16(__m128i half)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}
/* Eight bf16 widened by one byte shuffle: the 16 bytes broadcast to both halves (a load, no shuffle unit), then
 * each half's four values moved to the upper half of its words and the lower half zeroed. The same bits as
 * v_widen_bf16 with one instruction fewer on the vector ports (its shift competes with the FMAs): dyt, softcap
 * and rmsnorm_vjp in the bf16 tier 4-8 % faster under avx2 (optimized/cpu/README.md section 8.2.5). */
static inline vfloat v_load_bf16(const uint16_t *p)
{
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    const __m256i to_upper = _mm256_setr_epi8(-128, -128, 0, 1, -128, -128, 2, 3, -128, -128, 4, 5, -128, -128, 6, 7,
                                              -128, -128, 8, 9, -128, -128, 10, 11, -128, -128, 12, 13, -128, -128, 14, 15);
    return _mm256_castsi256_ps(_mm256_shuffle_epi8(both, to_upper));
}
/* The first count (< 8) elements' whole pairs by a masked load of 32-bit words, an odd last element blended
 * in; nothing past p[count - 1] is read. Through a buffer filled by memcpy, each such load waited for the
 * buffer's stores to be forwarded (a decode step of a bf16 state, whose rows end in partial vectors, ran at
 * half the fp32 step's speed). */
static inline vfloat v_load_bf16_first(const uint16_t *p, int64_t count)
{
    const int n = (int)(count < 8 ? (count > 0 ? count : 0) : 8);
    __m128i v = _mm_maskload_epi32((const int *)p, _mm_cmpgt_epi32(_mm_set1_epi32(n / 2), _mm_setr_epi32(0, 1, 2, 3)));
    if (n & 1)
        v = _mm_blendv_epi8(v, _mm_set1_epi16((short)p[n - 1]),
                            _mm_cmpeq_epi16(_mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7), _mm_set1_epi16((short)(n - 1))));
    return v_widen_bf16(v);
}
/* The tables' lookups by a load per lane, the index read from p as a scalar (no gather: on the EPYC of
 * optimized/cpu/README.md section 8.2.13 a gather took longer than its eight loads and their inserts; DyT bf16
 * 4096 x 4096 on two threads 8.70 -> 7.15 ms, its VJP 10.06 -> 8.67, section 6). */
static inline const float *table_entry_bf16_magnitude(const float *table, const uint16_t *p, int lane, int floats)
{
    return table + floats * (p[lane] & 0x7fff);
}
static inline __m128 table_four_bf16_magnitude(const float *table, const uint16_t *p)
{
    __m128 v = _mm_load_ss(table_entry_bf16_magnitude(table, p, 0, 1));
    v = _mm_insert_ps(v, _mm_load_ss(table_entry_bf16_magnitude(table, p, 1, 1)), 0x10);
    v = _mm_insert_ps(v, _mm_load_ss(table_entry_bf16_magnitude(table, p, 2, 1)), 0x20);
    return _mm_insert_ps(v, _mm_load_ss(table_entry_bf16_magnitude(table, p, 3, 1)), 0x30);
}
/* the pairs (first, second) of entries a and b: 128 bits, read as 64-bit units (types that may alias the
 * floats) */
static inline __m128 table_two_pairs(const float *table, size_t a, size_t b)
{
    const __m128 first = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i_u *)(table + 2 * a)));
    return _mm_loadh_pi(first, (const __m64 *)(table + 2 * b));
}
static inline vfloat v_table_bf16_magnitude(const float *table, const uint16_t *p)
{
    return _mm256_insertf128_ps(_mm256_castps128_ps256(table_four_bf16_magnitude(table, p)),
                                table_four_bf16_magnitude(table, p + 4), 1);
}
static inline void v_table_bf16_pair(const float *table, const uint16_t *p, vfloat *first, vfloat *second)
{
    /* the eight patterns by two 64-bit loads, split by shifts on the integer units (two loads, not eight) */
    uint64_t low_patterns, high_patterns;
    memcpy(&low_patterns, p, sizeof low_patterns);
    memcpy(&high_patterns, p + 4, sizeof high_patterns);
    const size_t m0 = (uint16_t)low_patterns, m1 = (uint16_t)(low_patterns >> 16),
                 m2 = (uint16_t)(low_patterns >> 32), m3 = (size_t)(low_patterns >> 48);
    const size_t m4 = (uint16_t)high_patterns, m5 = (uint16_t)(high_patterns >> 16),
                 m6 = (uint16_t)(high_patterns >> 32), m7 = (size_t)(high_patterns >> 48);
    /* the pairs of lanes 0 1 | 4 5 and 2 3 | 6 7: the even floats of the two, then the odd ones, are in lane
     * order (one shuffle each, no permutation across the halves) */
    const __m256 low = _mm256_insertf128_ps(_mm256_castps128_ps256(table_two_pairs(table, m0, m1)),
                                            table_two_pairs(table, m4, m5), 1);
    const __m256 high = _mm256_insertf128_ps(_mm256_castps128_ps256(table_two_pairs(table, m2, m3)),
                                             table_two_pairs(table, m6, m7), 1);
    *first = _mm256_shuffle_ps(low, high, 0x88);
    *second = _mm256_shuffle_ps(low, high, 0xdd);
}
static inline void v_store_pair(float *p, vfloat a, vfloat b)
{
    const __m256 low = _mm256_unpacklo_ps(a, b), high = _mm256_unpackhi_ps(a, b); /* 0 1 | 4 5, 2 3 | 6 7 */
    _mm256_storeu_ps(p, _mm256_permute2f128_ps(low, high, 0x20));
    _mm256_storeu_ps(p + 8, _mm256_permute2f128_ps(low, high, 0x31));
}
static inline vfloat v_load_any(const void *p, int bf16, int64_t i, int64_t count)
{
    if (bf16)
        return count >= 8 ? v_load_bf16((const uint16_t *)p + i) : v_load_bf16_first((const uint16_t *)p + i, count);
    return v_load_first((const float *)p + i, count);
}

/* ---- arithmetic ---- */

static inline vfloat v_lane_index(void) { return _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7); }
static inline vfloat v_set1(float x) { return _mm256_set1_ps(x); }
static inline vfloat v_zero(void) { return _mm256_setzero_ps(); }
static inline vfloat v_add(vfloat a, vfloat b) { return _mm256_add_ps(a, b); }
static inline vfloat v_sub(vfloat a, vfloat b) { return _mm256_sub_ps(a, b); }
static inline vfloat v_mul(vfloat a, vfloat b) { return _mm256_mul_ps(a, b); }
static inline vfloat v_div(vfloat a, vfloat b) { return _mm256_div_ps(a, b); }
static inline vfloat v_sqrt(vfloat a) { return _mm256_sqrt_ps(a); }
static inline vfloat v_abs(vfloat a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline vfloat v_fma(vfloat a, vfloat b, vfloat c) { return _mm256_fmadd_ps(a, b, c); }
static inline vfloat v_fnma(vfloat a, vfloat b, vfloat c) { return _mm256_fnmadd_ps(a, b, c); }
static inline vfloat v_fms(vfloat a, vfloat b, vfloat c) { return _mm256_fmsub_ps(a, b, c); }
static inline vfloat v_min(vfloat a, vfloat b) { return _mm256_min_ps(a, b); }
static inline vfloat v_max(vfloat a, vfloat b) { return _mm256_max_ps(a, b); }
static inline vfloat v_round(vfloat v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* |v| < 2^22: v + 1.5 2^23 has a unit in its last place of 1, so the sum rounds v to the nearest integer, ties to
 * even (1.5 2^23 is even), and the difference is exact. Two additions, which the cores run on other ports than
 * vroundps's two micro-ops and the FMAs: the norms' exp 5-8 % faster under avx2 (optimized/cpu/README.md 8.2.5).
 * A zero result may come out +0 where vroundps gives -0. */
static inline vfloat v_round_small(vfloat v)
{
    const __m256 shift = _mm256_set1_ps(0x1.8p23f);
    return _mm256_sub_ps(_mm256_add_ps(v, shift), shift);
}
/* v_round_small(v), and in *power 2^that (in [-126, 127]) from the bits of the same sum v + 1.5 2^23 (v_pow2's:
 * the rounded value plus 1.5 2^23 is that sum exactly): the same bits as v_pow2(v_round_small(v)), one addition
 * fewer. */
static inline vfloat v_round_small_pow2(vfloat v, vfloat *power)
{
    const __m256 shift = _mm256_set1_ps(0x1.8p23f);
    const __m256 sum = _mm256_add_ps(v, shift);
    *power = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_castps_si256(sum), _mm256_set1_epi32(127)), 23));
    return _mm256_sub_ps(sum, shift);
}
static inline vfloat v_from_bits(vfloat m) { return _mm256_castsi256_ps(_mm256_cvtps_epi32(m)); }
/* magnitude's bits with sign's sign bit or'ed in: copysign for a magnitude of sign +, one instruction fewer */
static inline vfloat v_or_sign(vfloat magnitude, vfloat sign)
{
    return _mm256_or_ps(magnitude, _mm256_and_ps(_mm256_set1_ps(-0.0f), sign));
}
static inline vfloat v_xor_sign(vfloat v, vfloat sign)
{
    return _mm256_xor_ps(v, _mm256_and_ps(_mm256_set1_ps(-0.0f), sign));
}
static inline vfloat v_copysign(vfloat magnitude, vfloat sign)
{
    const vfloat sign_bit = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(sign_bit, magnitude), _mm256_and_ps(sign_bit, sign));
}

static inline vmask vm_lt(vfloat a, vfloat b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline vmask vm_le(vfloat a, vfloat b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
static inline vmask vm_gt(vfloat a, vfloat b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline vmask vm_ge(vfloat a, vfloat b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
static inline vmask vm_ne(vfloat a, vfloat b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }
static inline vfloat v_select(vmask m, vfloat a, vfloat b) { return _mm256_blendv_ps(a, b, m); }
static inline vfloat v_zero_unless(vmask m, vfloat v) { return _mm256_and_ps(m, v); }

/* p 2^n as (p 2^h) 2^(n - h), h = floor(n / 2): both powers normal (n in
 * [-252, 254]), the first product exact, the second rounded once. NaN n
 * converts to the most negative integer, raised to -252: the result is then
 * p 2^-252, NaN where p is (the callers' NaN comes with a NaN p). */
static inline vfloat v_scale_pow2(vfloat p, vfloat n)
{
    const __m256i ni = _mm256_max_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(-252));
    const __m256i h = _mm256_srai_epi32(ni, 1), rest = _mm256_sub_epi32(ni, h);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 first = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
    const __m256 second = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, first), second);
}
/* 2^n built in the exponent field (n integral, in the normal range): n + 1.5 2^23 holds n in its low bits
 * (exactly: |n| < 2^22), whose exponent field, past the shift, is (n + 127) mod 2^9. An addition instead of a
 * conversion (vcvtps2dq), off the ports the FMAs use (v_round_small says why). */
static inline vfloat v_pow2(vfloat n)
{
    const __m256i shifted = _mm256_castps_si256(_mm256_add_ps(n, _mm256_set1_ps(0x1.8p23f)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(shifted, _mm256_set1_epi32(127)), 23));
}
/* p 2^n where the result is normal, n integral in [-126, 127]: one product by 2^n, exact (a third of
 * v_scale_pow2's instructions: v_exp's common case). */
static inline vfloat v_scale_pow2_normal(vfloat p, vfloat n) { return _mm256_mul_ps(p, v_pow2(n)); }
static inline vfloat v_reciprocal(vfloat d)
{
    const __m256 estimate = _mm256_rcp_ps(d);
    return _mm256_fmadd_ps(estimate, _mm256_fnmadd_ps(d, estimate, _mm256_set1_ps(1.0f)), estimate);
}
/* 1 / d correctly rounded (a division: one instruction, where vrcpps and a Newton step are three; the VJPs of
 * DyT ran 3 % faster with it, optimized/cpu/README.md section 6) */
static inline vfloat v_reciprocal_fine(vfloat d) { return _mm256_div_ps(_mm256_set1_ps(1.0f), d); }
static inline float v_reduce_add(vfloat v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
static inline float v_reduce_max(vfloat v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

/* ---- doubles ---- */

static inline vdouble vd_half(vfloat v, int high)
{
    return high ? _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)) : _mm256_cvtps_pd(_mm256_castps256_ps128(v));
}
static inline vfloat v_from_halves(vdouble lo, vdouble hi)
{
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
}
static inline vdouble vd_set1(double x) { return _mm256_set1_pd(x); }
static inline vdouble vd_zero(void) { return _mm256_setzero_pd(); }
static inline vdouble vd_add(vdouble a, vdouble b) { return _mm256_add_pd(a, b); }
static inline vdouble vd_sub(vdouble a, vdouble b) { return _mm256_sub_pd(a, b); }
static inline vdouble vd_mul(vdouble a, vdouble b) { return _mm256_mul_pd(a, b); }
static inline vdouble vd_div(vdouble a, vdouble b) { return _mm256_div_pd(a, b); }
static inline vdouble vd_sqrt(vdouble a) { return _mm256_sqrt_pd(a); }
static inline vdouble vd_abs(vdouble a) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), a); }
static inline vdouble vd_fma(vdouble a, vdouble b, vdouble c) { return _mm256_fmadd_pd(a, b, c); }
static inline vdouble vd_fnma(vdouble a, vdouble b, vdouble c) { return _mm256_fnmadd_pd(a, b, c); }
static inline vdmask vd_ge(vdouble a, vdouble b) { return _mm256_cmp_pd(a, b, _CMP_GE_OQ); }
static inline vdouble vd_select(vdmask m, vdouble a, vdouble b) { return _mm256_blendv_pd(a, b, m); }
static inline vdouble vd_or_sign(vdouble magnitude, vdouble sign)
{
    return _mm256_or_pd(magnitude, _mm256_and_pd(sign, _mm256_set1_pd(-0.0)));
}
/* v 2^n in two steps by normal powers of two (as v_scale_pow2), n in [-2044, 2]
 * after clamping (NaN n: -2044, with a NaN v). */
static inline vdouble vd_scale_pow2(vdouble v, vfloat n, int high)
{
    const __m256i n_all = _mm256_cvtps_epi32(n);
    const __m128i n_half = high ? _mm256_extracti128_si256(n_all, 1) : _mm256_castsi256_si128(n_all);
    const __m128i clamped = _mm_max_epi32(n_half, _mm_set1_epi32(-2044));
    const __m128i h = _mm_srai_epi32(clamped, 1), rest = _mm_sub_epi32(clamped, h);
    const __m256i bias = _mm256_set1_epi64x(1023);
    const __m256d first = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(h), bias), 52));
    const __m256d second =
        _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(rest), bias), 52));
    return _mm256_mul_pd(_mm256_mul_pd(v, first), second);
}
/* The 64-bit lanes of the low or high four of m's eight 32-bit lanes. */
static inline __m256i vd_mask_half(vmask m, int high)
{
    const __m256i mi = _mm256_castps_si256(m);
    return high ? _mm256_cvtepi32_epi64(_mm256_extracti128_si256(mi, 1)) : _mm256_cvtepi32_epi64(_mm256_castsi256_si128(mi));
}
/* acc + v where set: v masked to +0 elsewhere (a 0 * NaN outside the mask must not reach acc). */
static inline vdouble vd_add_where(vdouble acc, vmask m, int high, vdouble v)
{
    return _mm256_add_pd(acc, _mm256_and_pd(v, _mm256_castsi256_pd(vd_mask_half(m, high))));
}
static inline vdouble vd_load(const double *p) { return _mm256_loadu_pd(p); }
static inline void vd_store(double *p, vdouble v) { _mm256_storeu_pd(p, v); }
static inline vdouble vd_load_where(const double *p, vmask m, int high)
{
    return _mm256_maskload_pd(p, vd_mask_half(m, high));
}
static inline void vd_store_where(double *p, vdouble v, vmask m, int high)
{
    _mm256_maskstore_pd(p, vd_mask_half(m, high), v);
}
/* The sum of the four lanes, in lane order. */
static inline double vd_reduce_add(vdouble v)
{
    double lanes[4];
    _mm256_storeu_pd(lanes, v);
    return ((lanes[0] + lanes[1]) + lanes[2]) + lanes[3];
}

/* Orders the non-temporal stores (v_stream) before what follows. */
static inline void simd_store_fence(void) { _mm_sfence(); }


#include "simd_avx_transpose.h" /* simd_transpose_8x8 */
static inline __attribute__((always_inline)) void simd_prefetch(const void *p)
{
    _mm_prefetch((const char *)p, _MM_HINT_T0);
}

#endif

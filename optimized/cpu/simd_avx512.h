/* builtin:cpu: the vector primitives of AVX-512 (F, BW, VL, DQ) with FMA,
 * 16 fp32 lanes. One of the two primitive layers (simd_avx2.h is the other)
 * under which builtin:cpu's vector algorithms are written once: a file
 * named *_avx512.c includes this header, then the algorithm (norms_vector.h,
 * simd_math.h, ...), and is compiled for AVX-512 (Makefile); dispatch.c
 * calls it only where it chose LACS_ISA_AVX512.
 *
 * What every primitive layer defines (the same names, the same semantics):
 *   SIMD_ISA, SIMD_LANES          "avx512", 16
 *   vfloat                        SIMD_LANES fp32 lanes
 *   vdouble                       SIMD_LANES / 2 doubles: the low or the high half of a vfloat, widened
 *   vmask                         a set of lanes
 *   vm_first(count)               lanes 0 .. count - 1 (all for count >= SIMD_LANES, none for <= 0)
 *   vm_all(m), vm_none(m), vm_and(a, b), vm_or(a, b)   every lane set; no lane set; intersection; union
 *   v_load(p), v_store(p, v)      SIMD_LANES floats, unaligned
 *   v_load_first(p, count)        lanes past count read as +0 and touch no memory
 *   v_store_first(p, v, count)    lanes past count not written
 *   v_stream(p, v)                a non-temporal store (p aligned to SIMD_LANES floats)
 *   v_load_bf16(p), v_load_bf16_first(p, count)   bf16 widened exactly (a bf16 is the upper half of a binary32)
 *   v_load_any(p, bf16, i, count) element i on of an fp32 or bf16 array, count lanes present
 *   v_table_bf16_magnitude(table, p)   table[p[j] & 0x7fff] for the SIMD_LANES bf16 at p: a function of
 *                                 |x| looked up (a load per lane)
 *   v_table_bf16_pair(table, p, &first, &second)   first = table[2 m], second = table[2 m + 1]
 *                                 for m = p[j], the whole bit pattern: two functions of x kept side by
 *                                 side, looked up by one 64-bit load per lane (half the loads of two lookups)
 *   v_store_pair(p, a, b)         p[2 j] = a[j], p[2 j + 1] = b[j] (2 SIMD_LANES floats, unaligned)
 *   v_lane_index()                0, 1, .., SIMD_LANES - 1
 *   v_set1, v_zero, v_add, v_sub, v_mul, v_div, v_sqrt, v_abs
 *   v_fma(a, b, c) = a b + c, v_fnma(a, b, c) = c - a b, v_fms(a, b, c) = a b - c (one rounding each)
 *   v_min(a, b), v_max(a, b)      b when either is NaN (the x86 rule): put the constant first to keep a NaN
 *   v_round(v)                    to the nearest integer, ties to even
 *   v_round_small(v)              the same for |v| < 2^22 (a zero may come out +0 where v_round gives -0)
 *   v_from_bits(m)                the float whose bit pattern is the integer m (m integral, 0 <= m < 2^31)
 *   v_copysign(magnitude, sign)
 *   v_or_sign(magnitude, sign)    magnitude with the sign bit of sign or'ed in: copysign where magnitude >= +0
 *   v_xor_sign(v, sign)           v with its sign flipped in the lanes where sign's sign bit is set
 *   vm_lt, vm_le, vm_gt, vm_ge    ordered comparisons (false for NaN); vm_ne: unordered (true for NaN)
 *   v_select(m, a, b)             b in the lanes of m, a elsewhere
 *   v_zero_unless(m, v)           v in the lanes of m, +0 elsewhere
 *   v_scale_pow2(p, n)            p 2^n rounded once (into the subnormals, or to 0, where the result is
 *                                 below fp32's normal range), n integral and <= 254
 *   v_pow2(n)                     2^n exactly, n integral in [-126, 127]
 *   v_round_small_pow2(v, &power) v_round_small(v), and power = v_pow2 of it (avx2: from the same sum)
 *   v_scale_pow2_normal(p, n)     p 2^n where it is normal (n integral): exact, as v_scale_pow2 gives it
 *   v_reciprocal(d)               1 / d to a relative error below 2^-14
 *   v_reciprocal_fine(d)          1 / d correctly rounded
 *   v_reduce_add(v), v_reduce_max(v)
 *   vd_half(v, high)              the low (high = 0) or high half of v as doubles (exact)
 *   v_from_halves(lo, hi)         two vdouble rounded to one vfloat
 *   vd_set1, vd_zero, vd_add, vd_sub, vd_mul, vd_div, vd_sqrt, vd_abs, vd_fma, vd_fnma
 *   vd_select(m, a, b)            per double lane; vdmask from vd_ge(a, b)
 *   vd_or_sign(magnitude, sign)   |magnitude| with sign's sign bit or'ed in
 *   vd_scale_pow2(v, n, high)     v 2^n, n the integral fp32 lanes of half `high` of n (|n| <= 2044)
 *   vd_add_where(acc, m, high, v) acc + v in the lanes of half `high` of m, acc elsewhere
 *   vd_load(p), vd_store(p, v)    SIMD_LANES / 2 doubles (a whole vdouble)
 *   vd_load_where(p, m, high), vd_store_where(p, v, m, high)   doubles in the lanes of that half of m
 *                                 (masked moves: where every lane is present, vd_load and vd_store cost less)
 *   vd_reduce_add(v)
 *   simd_transpose_8x8(in, ldi, out, ldo)   out[j][i] = in[i][j] for i, j < 8 (leading dimensions in floats)
 *   simd_prefetch(p)              a hint, never a fault
 *   simd_store_fence()            orders the non-temporal stores before what follows
 * and, where the set multiplies bf16 (SIMD_BF16_PRODUCTS, this one only):
 *   v_store_bf16_first(p, v, count)        v rounded to bf16 (nearest even), the first count lanes
 *   v_store_bf16_pairs(p, even, odd, count) the pairs (bf16(even[j]), bf16(odd[j])) of lanes j < count,
 *                                          interleaved: the packed layout of bgemm (lacs_cpu_pack_bf16)
 * (vcvtneps2bf16, like vdpbf16ps, reads fp32 subnormals as zero: an absolute
 * error below 2^-126 per operand, far below the bf16 tier's rounding of
 * anything that is not itself negligible).
 */
#ifndef LACS_CPU_SIMD_AVX512_H
#define LACS_CPU_SIMD_AVX512_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define SIMD_ISA "avx512"
#define SIMD_LANES 16

typedef __m512 vfloat;
typedef __m512d vdouble;
typedef __mmask16 vmask;
typedef __mmask8 vdmask;

/* ---- masks ---- */

static inline vmask vm_first(int64_t count)
{
    return count >= 16 ? (vmask)0xffff : count <= 0 ? (vmask)0 : (vmask)((1u << count) - 1u);
}
static inline int vm_all(vmask m) { return m == (vmask)0xffff; }
static inline int vm_none(vmask m) { return m == 0; }
static inline vmask vm_and(vmask a, vmask b) { return (vmask)(a & b); }
static inline vmask vm_or(vmask a, vmask b) { return (vmask)(a | b); }

/* ---- memory ---- */

static inline vfloat v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void v_store(float *p, vfloat v) { _mm512_storeu_ps(p, v); }
static inline vfloat v_load_first(const float *p, int64_t count)
{
    return count >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(vm_first(count), p);
}
static inline void v_store_first(float *p, vfloat v, int64_t count)
{
    if (count >= 16)
        _mm512_storeu_ps(p, v);
    else
        _mm512_mask_storeu_ps(p, vm_first(count), v);
}
static inline void v_stream(float *p, vfloat v) { _mm512_stream_ps(p, v); }
static inline vfloat v_widen_bf16(__m256i half)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}
static inline vfloat v_load_bf16(const uint16_t *p) { return v_widen_bf16(_mm256_loadu_si256((const __m256i *)p)); }
static inline vfloat v_load_bf16_first(const uint16_t *p, int64_t count)
{
    return v_widen_bf16(_mm256_maskz_loadu_epi16(vm_first(count), p));
}
/* The forward's lookup by a load per lane, the index read from p as a scalar (no gather: on the EPYC of
 * optimized/cpu/README.md section 8.2.13 a gather of sixteen took longer than its loads and their inserts, DyT
 * bf16 4096 x 4096 on two threads 6.77 -> 5.36 ms; the VJP's pairs too, below). */
static inline __m128 table_four_bf16_magnitude(const float *table, const uint16_t *p)
{
    __m128 v = _mm_load_ss(table + (p[0] & 0x7fff));
    v = _mm_insert_ps(v, _mm_load_ss(table + (p[1] & 0x7fff)), 0x10);
    v = _mm_insert_ps(v, _mm_load_ss(table + (p[2] & 0x7fff)), 0x20);
    return _mm_insert_ps(v, _mm_load_ss(table + (p[3] & 0x7fff)), 0x30);
}
static inline vfloat v_table_bf16_magnitude(const float *table, const uint16_t *p)
{
    const __m256 low = _mm256_insertf128_ps(_mm256_castps128_ps256(table_four_bf16_magnitude(table, p)),
                                            table_four_bf16_magnitude(table, p + 4), 1);
    const __m256 high = _mm256_insertf128_ps(_mm256_castps128_ps256(table_four_bf16_magnitude(table, p + 8)),
                                             table_four_bf16_magnitude(table, p + 12), 1);
    return _mm512_insertf32x8(_mm512_castps256_ps512(low), high, 1);
}
/* the pairs (first, second) of entries a and b: 128 bits, read as 64-bit units (types that may alias the
 * floats) */
static inline __m128 table_two_pairs(const float *table, size_t a, size_t b)
{
    const __m128 first = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i_u *)(table + 2 * a)));
    return _mm_loadh_pi(first, (const __m64 *)(table + 2 * b));
}
/* Lanes 4 i .. 4 i + 3's pairs, (first, second) each, in lane order: 256 bits. */
static inline __m256 table_four_pairs(const float *table, uint64_t patterns)
{
    return _mm256_insertf128_ps(
        _mm256_castps128_ps256(table_two_pairs(table, (uint16_t)patterns, (uint16_t)(patterns >> 16))),
        table_two_pairs(table, (uint16_t)(patterns >> 32), (size_t)(patterns >> 48)), 1);
}
/* The sixteen patterns by four 64-bit loads, split by shifts on the integer units, and a 64-bit load per lane
 * (no gather: on the EPYC of optimized/cpu/README.md section 8.2.13 a gather of sixteen took longer than its
 * loads and their inserts); then the even floats and the odd ones. */
static inline void v_table_bf16_pair(const float *table, const uint16_t *p, vfloat *first, vfloat *second)
{
    uint64_t patterns[4];
    memcpy(patterns, p, sizeof patterns);
    const __m512 low = _mm512_insertf32x8(_mm512_castps256_ps512(table_four_pairs(table, patterns[0])),
                                          table_four_pairs(table, patterns[1]), 1);
    const __m512 high = _mm512_insertf32x8(_mm512_castps256_ps512(table_four_pairs(table, patterns[2])),
                                           table_four_pairs(table, patterns[3]), 1);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    *first = _mm512_permutex2var_ps(low, even, high);
    *second = _mm512_permutex2var_ps(low, _mm512_add_epi32(even, _mm512_set1_epi32(1)), high);
}
static inline void v_store_pair(float *p, vfloat a, vfloat b)
{
    const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    _mm512_storeu_ps(p, _mm512_permutex2var_ps(a, low, b));
    _mm512_storeu_ps(p + 16, _mm512_permutex2var_ps(a, _mm512_add_epi32(low, _mm512_set1_epi32(8)), b));
}
static inline vfloat v_load_any(const void *p, int bf16, int64_t i, int64_t count)
{
    if (bf16)
        return count >= 16 ? v_load_bf16((const uint16_t *)p + i) : v_load_bf16_first((const uint16_t *)p + i, count);
    return v_load_first((const float *)p + i, count);
}

/* ---- arithmetic ---- */

static inline vfloat v_lane_index(void)
{
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
static inline vfloat v_set1(float x) { return _mm512_set1_ps(x); }
static inline vfloat v_zero(void) { return _mm512_setzero_ps(); }
static inline vfloat v_add(vfloat a, vfloat b) { return _mm512_add_ps(a, b); }
static inline vfloat v_sub(vfloat a, vfloat b) { return _mm512_sub_ps(a, b); }
static inline vfloat v_mul(vfloat a, vfloat b) { return _mm512_mul_ps(a, b); }
static inline vfloat v_div(vfloat a, vfloat b) { return _mm512_div_ps(a, b); }
static inline vfloat v_sqrt(vfloat a) { return _mm512_sqrt_ps(a); }
static inline vfloat v_abs(vfloat a) { return _mm512_abs_ps(a); }
static inline vfloat v_fma(vfloat a, vfloat b, vfloat c) { return _mm512_fmadd_ps(a, b, c); }
static inline vfloat v_fnma(vfloat a, vfloat b, vfloat c) { return _mm512_fnmadd_ps(a, b, c); }
static inline vfloat v_fms(vfloat a, vfloat b, vfloat c) { return _mm512_fmsub_ps(a, b, c); }
static inline vfloat v_min(vfloat a, vfloat b) { return _mm512_min_ps(a, b); }
static inline vfloat v_max(vfloat a, vfloat b) { return _mm512_max_ps(a, b); }
static inline vfloat v_round(vfloat v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* vrndscaleps is a single micro-op here: the avx2 layer's two additions measured no faster */
static inline vfloat v_round_small(vfloat v) { return v_round(v); }
static inline vfloat v_from_bits(vfloat m) { return _mm512_castsi512_ps(_mm512_cvtps_epi32(m)); }
static inline vfloat v_or_sign(vfloat magnitude, vfloat sign)
{
    return _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(magnitude), _mm512_and_si512(_mm512_set1_epi32((int)0x80000000u), _mm512_castps_si512(sign))));
}
static inline vfloat v_xor_sign(vfloat v, vfloat sign)
{
    return _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(v), _mm512_and_si512(_mm512_set1_epi32((int)0x80000000u), _mm512_castps_si512(sign))));
}
static inline vfloat v_copysign(vfloat magnitude, vfloat sign)
{
    const __m512i sign_bit = _mm512_set1_epi32((int)0x80000000u);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_andnot_si512(sign_bit, _mm512_castps_si512(magnitude)),
                                               _mm512_and_si512(sign_bit, _mm512_castps_si512(sign))));
}

static inline vmask vm_lt(vfloat a, vfloat b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline vmask vm_le(vfloat a, vfloat b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
static inline vmask vm_gt(vfloat a, vfloat b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
static inline vmask vm_ge(vfloat a, vfloat b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
static inline vmask vm_ne(vfloat a, vfloat b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }
static inline vfloat v_select(vmask m, vfloat a, vfloat b) { return _mm512_mask_blend_ps(m, a, b); }
static inline vfloat v_zero_unless(vmask m, vfloat v) { return _mm512_maskz_mov_ps(m, v); }

/* vscalefps: one rounding, gradual underflow, any n. */
static inline vfloat v_scale_pow2(vfloat p, vfloat n) { return _mm512_scalef_ps(p, n); }
static inline vfloat v_pow2(vfloat n) { return _mm512_scalef_ps(_mm512_set1_ps(1.0f), n); }
static inline vfloat v_round_small_pow2(vfloat v, vfloat *power)
{
    const vfloat n = v_round_small(v);
    *power = v_pow2(n);
    return n;
}
static inline vfloat v_scale_pow2_normal(vfloat p, vfloat n) { return _mm512_scalef_ps(p, n); }
/* vrcp14ps: relative error below 2^-14. */
static inline vfloat v_reciprocal(vfloat d) { return _mm512_rcp14_ps(d); }
/* 1 / d correctly rounded (a division: one instruction, where vrcp14ps and a Newton step are three; the VJPs of
 * DyT ran 3 % faster with it, optimized/cpu/README.md section 6) */
static inline vfloat v_reciprocal_fine(vfloat d)
{
    return _mm512_div_ps(_mm512_set1_ps(1.0f), d);
}
static inline float v_reduce_add(vfloat v) { return _mm512_reduce_add_ps(v); }
static inline float v_reduce_max(vfloat v) { return _mm512_reduce_max_ps(v); }

/* ---- doubles ---- */

static inline vdouble vd_half(vfloat v, int high)
{
    return high ? _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)) : _mm512_cvtps_pd(_mm512_castps512_ps256(v));
}
static inline vfloat v_from_halves(vdouble lo, vdouble hi)
{
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
}
static inline vdouble vd_set1(double x) { return _mm512_set1_pd(x); }
static inline vdouble vd_zero(void) { return _mm512_setzero_pd(); }
static inline vdouble vd_add(vdouble a, vdouble b) { return _mm512_add_pd(a, b); }
static inline vdouble vd_sub(vdouble a, vdouble b) { return _mm512_sub_pd(a, b); }
static inline vdouble vd_mul(vdouble a, vdouble b) { return _mm512_mul_pd(a, b); }
static inline vdouble vd_div(vdouble a, vdouble b) { return _mm512_div_pd(a, b); }
static inline vdouble vd_sqrt(vdouble a) { return _mm512_sqrt_pd(a); }
static inline vdouble vd_abs(vdouble a) { return _mm512_abs_pd(a); }
static inline vdouble vd_fma(vdouble a, vdouble b, vdouble c) { return _mm512_fmadd_pd(a, b, c); }
static inline vdouble vd_fnma(vdouble a, vdouble b, vdouble c) { return _mm512_fnmadd_pd(a, b, c); }
static inline vdmask vd_ge(vdouble a, vdouble b) { return _mm512_cmp_pd_mask(a, b, _CMP_GE_OQ); }
static inline vdouble vd_select(vdmask m, vdouble a, vdouble b) { return _mm512_mask_blend_pd(m, a, b); }
static inline vdouble vd_or_sign(vdouble magnitude, vdouble sign)
{
    return _mm512_castsi512_pd(
        _mm512_or_si512(_mm512_castpd_si512(magnitude),
                        _mm512_and_si512(_mm512_castpd_si512(sign), _mm512_set1_epi64((long long)0x8000000000000000ull))));
}
static inline vdouble vd_scale_pow2(vdouble v, vfloat n, int high) { return _mm512_scalef_pd(v, vd_half(n, high)); }
static inline vdmask vd_mask_half(vmask m, int high) { return (vdmask)(high ? m >> 8 : m & 0xff); }
static inline vdouble vd_add_where(vdouble acc, vmask m, int high, vdouble v)
{
    return _mm512_mask_add_pd(acc, vd_mask_half(m, high), acc, v);
}
static inline vdouble vd_load(const double *p) { return _mm512_loadu_pd(p); }
static inline void vd_store(double *p, vdouble v) { _mm512_storeu_pd(p, v); }
static inline vdouble vd_load_where(const double *p, vmask m, int high)
{
    return _mm512_maskz_loadu_pd(vd_mask_half(m, high), p);
}
static inline void vd_store_where(double *p, vdouble v, vmask m, int high)
{
    _mm512_mask_storeu_pd(p, vd_mask_half(m, high), v);
}
static inline double vd_reduce_add(vdouble v) { return _mm512_reduce_add_pd(v); }

/* ---- bf16 ---- */

#define SIMD_BF16_PRODUCTS 1

static inline void v_store_bf16_first(uint16_t *p, vfloat v, int64_t count)
{
    const __m256i rounded = (__m256i)_mm512_cvtneps_pbh(v);
    if (count >= 16)
        _mm256_storeu_si256((__m256i *)p, rounded);
    else
        _mm256_mask_storeu_epi16(p, vm_first(count), rounded);
}

static inline void v_store_bf16_pairs(uint16_t *p, vfloat even, vfloat odd, int64_t count)
{
    /* words 0..15 the even row's, 16..31 the odd row's, then interleaved */
    const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(odd, even);
    const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                           21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i pairs = _mm512_permutexvar_epi16(order, both);
    if (count >= 16)
        _mm512_storeu_si512(p, pairs);
    else
        _mm512_mask_storeu_epi32(p, vm_first(count), pairs);
}

/* always_inline: GCC 12 finds a function whose only statement is a prefetch
 * free of side effects and deletes its calls before it would inline them. */
/* Orders the non-temporal stores (v_stream) before what follows. */
static inline void simd_store_fence(void) { _mm_sfence(); }


#include "simd_avx_transpose.h" /* simd_transpose_8x8 */
static inline __attribute__((always_inline)) void simd_prefetch(const void *p)
{
    _mm_prefetch((const char *)p, _MM_HINT_T0);
}

#endif

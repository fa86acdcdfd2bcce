/* builtin:cpu attention, AVX-512: the row kernels of the blocked online
 * softmax (attention_kernels.h), 16 fp32 lanes, tails by lane masks.
 *
 * exp is Cephes' expf (the polynomial of cephes/single/expf.c, about 1 ulp on
 * the reduced range) with the power of two applied by vscalefps, which gives
 * subnormal results and overflow to +inf exactly as the libm does: H1's
 * exp(s_ij - m_i) is within a few ulp, as SPEC 11.1 permits.
 */
#include <immintrin.h>
#include <math.h>

#include "attention_kernels.h"

/* exp(x) on 16 lanes: x = n ln2 + r, |r| <= ln2 / 2, exp(x) = 2^n exp(r). */
static __m512 exp16(__m512 x)
{
    /* Below -110 the result is 0 and above 89 +inf (exp(-103.3) is half the
     * smallest subnormal, exp(88.73) the largest float); clamping first keeps
     * n finite. The constant is the first operand so that a NaN x passes
     * through (vmaxps returns its second operand when either is NaN). */
    x = _mm512_max_ps(_mm512_set1_ps(-110.0f), x);
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* ln2 in two parts (Cephes' C1 has 9 significant bits: n C1 is exact) */
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    /* exp(r) = 1 + r + r^2 p(r) */
    const __m512 er = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(r, r), p, r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(er, n);
}

/* The lanes of columns j .. j + 15 that exist (j + lane < n). */
static __mmask16 tail_mask(int64_t n, int64_t j)
{
    return n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1u);
}

float lacs_cpu_attention_logits_row_avx512(int64_t n, float *x, int64_t lo, int64_t hi, float scale,
                                            float row_bias, const float *col_bias)
{
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i first = _mm512_set1_epi32((int)lo), end = _mm512_set1_epi32((int)hi);
    const __m512 minus_inf = _mm512_set1_ps(-INFINITY);
    const __m512 scale_v = _mm512_set1_ps(scale), row_bias_v = _mm512_set1_ps(row_bias);
    __m512 max_v = minus_inf;
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 exists = tail_mask(n, j);
        const __m512i column = _mm512_add_epi32(_mm512_set1_epi32((int)j), lane);
        const __mmask16 visible =
            exists & _mm512_cmpge_epi32_mask(column, first) & _mm512_cmplt_epi32_mask(column, end);
        __m512 logit;
        if (exists == 0xffff) {
            /* whole vectors by plain loads and stores: a masked store followed by a load of the same
             * address (exp_row's) is not forwarded, and stalls */
            const __m512 bias = col_bias ? _mm512_sub_ps(row_bias_v, _mm512_loadu_ps(col_bias + j)) : row_bias_v;
            logit = _mm512_mask_blend_ps(visible, minus_inf, _mm512_fmadd_ps(scale_v, _mm512_loadu_ps(x + j), bias));
            _mm512_storeu_ps(x + j, logit);
        } else {
            const __m512 bias =
                col_bias ? _mm512_sub_ps(row_bias_v, _mm512_maskz_loadu_ps(exists, col_bias + j)) : row_bias_v;
            const __m512 dot = _mm512_maskz_loadu_ps(exists, x + j);
            logit = _mm512_mask_blend_ps(visible, minus_inf, _mm512_fmadd_ps(scale_v, dot, bias));
            _mm512_mask_storeu_ps(x + j, exists, logit);
        }
        max_v = _mm512_mask_max_ps(max_v, visible, max_v, logit);
    }
    return _mm512_reduce_max_ps(max_v);
}

float lacs_cpu_attention_exp_row_avx512(int64_t n, float *x, float max)
{
    const __m512 max_v = _mm512_set1_ps(max);
    __m512 sum_v = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m512 p = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), max_v));
        _mm512_storeu_ps(x + j, p);
        sum_v = _mm512_add_ps(sum_v, p);
    }
    if (j < n) {
        const __mmask16 exists = tail_mask(n, j);
        const __m512 p = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(exists, x + j), max_v));
        _mm512_mask_storeu_ps(x + j, exists, p);
        sum_v = _mm512_mask_add_ps(sum_v, exists, sum_v, p);
    }
    return _mm512_reduce_add_ps(sum_v);
}

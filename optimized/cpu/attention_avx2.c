/* builtin:cpu attention, AVX2 + FMA: the row kernels of the blocked online
 * softmax (attention_kernels.h), 8 fp32 lanes; a tail of fewer than 8
 * columns goes through a padded copy, so that every column sees the same
 * arithmetic.
 *
 * exp is Cephes' expf (the polynomial of cephes/single/expf.c, about 1 ulp on
 * the reduced range). AVX2 has no vscalefps: 2^n is built in the exponent
 * field, as two factors 2^(n/2) 2^(n - n/2) so that subnormal results (n down
 * to -149) and overflow to +inf come out as the libm's.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "attention_kernels.h"

/* exp(x) on 8 lanes: x = n ln2 + r, |r| <= ln2 / 2, exp(x) = 2^n exp(r). */
static __m256 exp8(__m256 x)
{
    /* Clamped to [-110, 89] (0 below, +inf above, see attention_avx512.c);
     * the constant first so that a NaN x passes through. */
    x = _mm256_max_ps(_mm256_set1_ps(-110.0f), x);
    x = _mm256_min_ps(_mm256_set1_ps(89.0f), x);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    const __m256 er = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(r, r), p, r), _mm256_set1_ps(1.0f));
    /* n in [-159, 129]: halves in [-80, 65], each a normal power of two */
    const __m256i n_int = _mm256_cvtps_epi32(n);
    const __m256i half = _mm256_srai_epi32(n_int, 1);
    const __m256i rest = _mm256_sub_epi32(n_int, half);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 first = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
    const __m256 second = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(er, first), second);
}

static float reduce_max8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

static float reduce_add8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* Eight columns j .. j + 7 (all existing): logits, -inf where not visible. */
static __m256 logits8(const float *dot, const float *col_bias, int64_t j, int64_t lo, int64_t hi, __m256 scale,
                      __m256 row_bias)
{
    const __m256i column = _mm256_add_epi32(_mm256_set1_epi32((int)j), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    /* visible: lo <= column < hi, i.e. column > lo - 1 and hi > column */
    const __m256i visible = _mm256_and_si256(_mm256_cmpgt_epi32(column, _mm256_set1_epi32((int)lo - 1)),
                                             _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), column));
    __m256 bias = row_bias;
    if (col_bias)
        bias = _mm256_sub_ps(row_bias, _mm256_loadu_ps(col_bias));
    const __m256 logit = _mm256_fmadd_ps(scale, _mm256_loadu_ps(dot), bias);
    return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), logit, _mm256_castsi256_ps(visible));
}

float lacs_cpu_attention_logits_row_avx2(int64_t n, float *x, int64_t lo, int64_t hi, float scale, float row_bias,
                                          const float *col_bias)
{
    const __m256 scale_v = _mm256_set1_ps(scale), row_bias_v = _mm256_set1_ps(row_bias);
    __m256 max_v = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 logit = logits8(x + j, col_bias ? col_bias + j : NULL, j, lo, hi, scale_v, row_bias_v);
        _mm256_storeu_ps(x + j, logit);
        max_v = _mm256_max_ps(max_v, logit);
    }
    if (j < n) {
        /* the tail, padded with masked columns (outside [lo, hi) since >= n >= hi) */
        float dot[8] = {0}, bias[8] = {0};
        memcpy(dot, x + j, (size_t)(n - j) * sizeof(float));
        if (col_bias)
            memcpy(bias, col_bias + j, (size_t)(n - j) * sizeof(float));
        const __m256 logit = logits8(dot, col_bias ? bias : NULL, j, lo, hi, scale_v, row_bias_v);
        _mm256_storeu_ps(dot, logit);
        memcpy(x + j, dot, (size_t)(n - j) * sizeof(float));
        max_v = _mm256_max_ps(max_v, logit);
    }
    return reduce_max8(max_v);
}

float lacs_cpu_attention_exp_row_avx2(int64_t n, float *x, float max)
{
    const __m256 max_v = _mm256_set1_ps(max);
    __m256 sum_v = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 p = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), max_v));
        _mm256_storeu_ps(x + j, p);
        sum_v = _mm256_add_ps(sum_v, p);
    }
    if (j < n) {
        /* padding -inf gives exp = 0: it adds nothing to the sum */
        float tail[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
        memcpy(tail, x + j, (size_t)(n - j) * sizeof(float));
        const __m256 p = exp8(_mm256_sub_ps(_mm256_loadu_ps(tail), max_v));
        _mm256_storeu_ps(tail, p);
        memcpy(x + j, tail, (size_t)(n - j) * sizeof(float));
        sum_v = _mm256_add_ps(sum_v, p);
    }
    return reduce_add8(sum_v);
}

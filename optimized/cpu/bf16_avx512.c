/* builtin:cpu: fp32 -> bf16 rounding of whole rows with AVX512-BF16
 * (vcvtneps2bf16: round to nearest even, 16 values per instruction), for the
 * operands the bf16 tier hands to bgemm. Called only where dispatch.c chose
 * LACS_ISA_AVX512. Like vdpbf16ps, the instruction treats fp32 subnormals as
 * zero: an absolute error below 2^-126 per operand, far below the bf16 tier's
 * rounding of anything that is not itself negligible. */
#include <immintrin.h>

#include "cpu.h"

void lacs_cpu_round_bf16_rows_avx512(int64_t m, int64_t k, const float *x, int64_t ldx, uint16_t *out)
{
    for (int64_t i = 0; i < m; i++) {
        const float *row = x + i * ldx;
        uint16_t *dst = out + i * k;
        int64_t p = 0;
        for (; p + 16 <= k; p += 16) {
            const __m256bh rounded = _mm512_cvtneps_pbh(_mm512_loadu_ps(row + p));
            _mm256_storeu_si256((__m256i *)(dst + p), (__m256i)rounded);
        }
        if (p < k) {
            const __mmask16 tail = (__mmask16)((1u << (k - p)) - 1u);
            const __m256bh rounded = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(tail, row + p));
            _mm256_mask_storeu_epi16(dst + p, tail, (__m256i)rounded);
        }
    }
}

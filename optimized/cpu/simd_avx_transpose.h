/* builtin:cpu: simd_transpose_8x8 (the primitive layers' list, simd_avx512.h)
 * for the two x86 layers, simd_avx2.h and simd_avx512.h, which both have AVX's
 * 256-bit shuffles: included by each after its own primitives. */
#ifndef LACS_CPU_SIMD_AVX_TRANSPOSE_H
#define LACS_CPU_SIMD_AVX_TRANSPOSE_H

#include <immintrin.h>
#include <stdint.h>

/* An 8 x 8 block transposed with 256-bit shuffles (AVX): rows interleaved in pairs, then in fours, then the
 * 128-bit halves exchanged. */
static inline void simd_transpose_8x8(const float *in, int64_t ldi, float *out, int64_t ldo)
{
    __m256 r[8], t[8], s[8];
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_ps(in + i * ldi);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        s[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(out + i * ldo, _mm256_permute2f128_ps(s[i], s[i + 4], 0x20));
        _mm256_storeu_ps(out + (i + 4) * ldo, _mm256_permute2f128_ps(s[i], s[i + 4], 0x31));
    }
}

#endif

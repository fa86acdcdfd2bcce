/* builtin:cpu GEMM kernels without vector instructions (LACS_ISA=scalar, and
 * CPUs without AVX2): plain loops in the order i, p, j, so that the innermost
 * loop runs along rows of B and C. fp32 products and sums, as the other
 * instruction sets; bf16 operands are widened exactly to fp32. */
#include "cpu.h"

static void sgemm_scalar(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B, int64_t ldb,
                         float *C, int64_t ldc, int accumulate)
{
    for (int64_t i = 0; i < m; i++) {
        float *c = C + i * ldc;
        if (!accumulate)
            for (int64_t j = 0; j < n; j++)
                c[j] = 0.0f;
        for (int64_t p = 0; p < k; p++) {
            const float a = A[i * lda + p];
            const float *b = B + p * ldb;
            for (int64_t j = 0; j < n; j++)
                c[j] += a * b[j];
        }
    }
}

static void bgemm_scalar(int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda, const uint16_t *Bp,
                         float *C, int64_t ldc, int accumulate)
{
    for (int64_t i = 0; i < m; i++) {
        float *c = C + i * ldc;
        if (!accumulate)
            for (int64_t j = 0; j < n; j++)
                c[j] = 0.0f;
        for (int64_t p = 0; p < k; p += 2) {
            const float a0 = lacs_cpu_bf16_to_f32(A[i * lda + p]);
            const float a1 = p + 1 < k ? lacs_cpu_bf16_to_f32(A[i * lda + p + 1]) : 0.0f;
            const uint16_t *b = Bp + (p / 2) * 2 * n;
            for (int64_t j = 0; j < n; j++)
                c[j] += a0 * lacs_cpu_bf16_to_f32(b[2 * j]) + a1 * lacs_cpu_bf16_to_f32(b[2 * j + 1]);
        }
    }
}

const lacs_cpu_gemm lacs_cpu_gemm_scalar = {"scalar", sgemm_scalar, bgemm_scalar};

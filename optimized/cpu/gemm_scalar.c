/* builtin:cpu GEMM microkernel without vector instructions (LACS_ISA=scalar,
 * and CPUs without AVX2); the blocking, packing and edges are the frame's
 * (gemm_frame.h, included at the end). Plain C for the x86-64 baseline: a
 * tile of 4 rows x 16 columns, computed row by row, one fp32 multiply and
 * add per product (two roundings: gamma_k's bound still holds with 2k
 * roundings, tests/test_cpu_gemm.c's factor 2), summed over p in increasing
 * order. bf16 operands are widened exactly to fp32 by the frame. */
#include <stdint.h>

#include "cpu.h"

#define GEMM_TABLE lacs_cpu_gemm_scalar
#define GEMM_ISA "scalar"
#define GEMM_MR 4
#define GEMM_NR 16
#define GEMM_KC 128
#define GEMM_BF16_NATIVE 0

static inline __attribute__((always_inline)) void gemm_micro_f32(int rows, int64_t k, const float *A, int64_t lda,
                                                                  const float *B, int64_t ldb, float *C, int64_t ldc,
                                                                  float beta)
{
    /* row by row: the row's GEMM_NR sums stay in registers (four SSE vectors, four independent chains) */
    for (int r = 0; r < rows; r++) {
        float acc[GEMM_NR];
        for (int j = 0; j < GEMM_NR; j++)
            acc[j] = beta == 0.0f ? 0.0f : beta * C[r * ldc + j];
        for (int64_t p = 0; p < k; p++) {
            const float a = A[r * lda + p];
            for (int j = 0; j < GEMM_NR; j++)
                acc[j] += a * B[p * ldb + j];
        }
        for (int j = 0; j < GEMM_NR; j++)
            C[r * ldc + j] = acc[j];
    }
}

#include "gemm_frame.h"

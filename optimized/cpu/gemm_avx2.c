/* builtin:cpu GEMM microkernel for AVX2 with FMA (LACS_ISA=avx2, and CPUs
 * without AVX-512); the blocking, packing and edges are the frame's
 * (gemm_frame.h, included at the end). OpenBLAS is not called here even where
 * it might be as fast: it picks its own instruction set from the CPU, so
 * LACS_ISA=avx2 would not run AVX2 code on an AVX-512 machine.
 *
 * sgemm: a tile of 6 rows x 16 columns of C in 12 ymm accumulators (6 x 2
 * vectors of 8 lanes); per p it loads two vectors of B's row p and
 * broadcasts A[i][p] for its 6 rows: 12 accumulators + 2 of B + 1 broadcast
 * = 15 of the 16 ymm registers, and 12 independent FMAs cover the FMA
 * latency times the two FMA pipes. One FMA (one rounding) per product,
 * summed over p in increasing order: |C - AB| <= gamma_k |A||B| elementwise.
 *
 * bgemm: AVX2 has no bf16 dot product; the frame widens the operands to fp32
 * (a bf16 is the upper half of a binary32: exact) and runs the same tile:
 * fp32 products (exact, 8 x 8 significant bits) and sums, the same bound,
 * and no flush of denormals (unlike AVX-512's vdpbf16ps).
 */
#include <immintrin.h>
#include <stdint.h>

#include "cpu.h"

#define GEMM_TABLE lacs_cpu_gemm_avx2
#define GEMM_ISA "avx2"
#define GEMM_MR 6
#define GEMM_NR 16
/* k per block: the B panel is 128 x 16 floats (8 KiB) */
#define GEMM_KC 128
#define GEMM_BF16_NATIVE 0

static inline __attribute__((always_inline)) void gemm_micro_f32(int rows, int64_t k, const float *A, int64_t lda,
                                                                  const float *B, int64_t ldb, float *C, int64_t ldc,
                                                                  float beta)
{
    __m256 acc[GEMM_MR][2];
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < 2; v++)
            acc[r][v] = beta == 0.0f ? _mm256_setzero_ps() : beta == 1.0f ? _mm256_loadu_ps(C + r * ldc + 8 * v) : _mm256_mul_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(C + r * ldc + 8 * v));
    int64_t p = 0;
    do { /* k >= 1: a loop that is always entered keeps the accumulators in registers (GCC 12) */
        const __m256 b0 = _mm256_loadu_ps(B + p * ldb), b1 = _mm256_loadu_ps(B + p * ldb + 8);
        for (int r = 0; r < rows; r++) {
            const __m256 a = _mm256_broadcast_ss(A + r * lda + p);
            acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
        }
    } while (++p < k);
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < 2; v++)
            _mm256_storeu_ps(C + r * ldc + 8 * v, acc[r][v]);
}

#include "gemm_frame.h"

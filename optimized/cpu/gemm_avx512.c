/* builtin:cpu GEMM microkernels for AVX-512 (F, BW, VL, DQ, BF16 and FMA); the
 * blocking, packing and edges are the frame's (gemm_frame.h, included at the
 * end). Called only where dispatch.c chose LACS_ISA_AVX512.
 *
 * DECISION: every product of builtin:cpu runs on these kernels, not on
 * OpenBLAS's cblas_sgemm: at the chunk algorithm's shapes they run at the
 * core's FMA peak, faster than the OpenBLAS that lacs links, and OpenBLAS
 * chooses its instruction set itself, which would defeat LACS_ISA. The
 * figures (`build/lacs-bench-gemm`, bench/bench_gemm.c) are in README.md
 * section 4.
 *
 * sgemm: a tile of 8 rows x 32 columns of C held in 16 zmm accumulators (8 x 2
 * vectors of 16 lanes). Per p it loads two vectors of B's row p and
 * broadcasts A[i][p] for its 8 rows: 10 loads for 16 FMAs, and 16
 * independent accumulators cover the FMA latency times the FMA pipes. One FMA
 * (one rounding) per product, summed over p in increasing order.
 *
 * bgemm: the same tile over pairs of k (the layout of vdpbf16ps: B's pairs of
 * rows interleaved, lacs_cpu_pack_bf16): per pair it broadcasts the 32-bit
 * pair (A[i][p], A[i][p+1]) and issues one vdpbf16ps per 16 columns,
 * acc += A[i][p] B[p][j] + A[i][p+1] B[p+1][j]. The products of two bf16 are
 * exact in fp32 (8 x 8 significant bits), so each pair costs two roundings
 * of a sum: the same gamma_k bound as sgemm. The frame hands it whole pairs
 * only (the last pair of an odd k is packed as (A[i][k-1], 0)).
 *
 * Denormals: vdpbf16ps does not consult MXCSR: "output denormals are always
 * flushed to zero and input denormals are always treated as zero" (Intel SDM,
 * VDPBF16PS; each of its two FMAs per lane is "daz in, ftz out", round to
 * nearest even). So where a partial sum falls below 2^-126 in magnitude it
 * becomes 0, an absolute error below 2^-126 per FMA (k + 1 of them at most,
 * one more for a denormal C accumulated into), and a denormal input
 * (|A[i][p]| or |B[p][j]| < 2^-126) drops its product, an error below
 * 2^-126 times the other factor. In all, per element:
 *     |C - AB| <= gamma_k |A||B| + 2^-126 (k + 2 + sum_p (|A[i][p]| + |B[p][j]|)).
 * For the bf16 tier this is invisible: its unit roundoff is 2^-8, so an
 * output whose absolute error of 2^-126 matters is itself near 2^-118, far
 * below anything its data (random normals, gates, norms) produce; fp32 C is
 * untouched (sgemm uses ordinary FMAs, gradual underflow).
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"

#define GEMM_TABLE lacs_cpu_gemm_avx512
#define GEMM_ISA "avx512"
#define GEMM_MR 8
#define GEMM_NR 32
/* k per block: the B panel is 256 x 32 floats (32 KiB), or 256 pairs x 32 columns of bf16 */
#define GEMM_KC 256
#define GEMM_BF16_NATIVE 1

static inline __attribute__((always_inline)) void gemm_micro_f32(int rows, int64_t k, const float *A, int64_t lda,
                                                                  const float *B, int64_t ldb, float *C, int64_t ldc,
                                                                  float beta)
{
    __m512 acc[GEMM_MR][2];
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < 2; v++)
            acc[r][v] = beta == 0.0f ? _mm512_setzero_ps() : beta == 1.0f ? _mm512_loadu_ps(C + r * ldc + 16 * v) : _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(C + r * ldc + 16 * v));
    int64_t p = 0;
    do { /* k >= 1: a loop that is always entered keeps the accumulators in registers (GCC 12) */
        const __m512 b0 = _mm512_loadu_ps(B + p * ldb), b1 = _mm512_loadu_ps(B + p * ldb + 16);
        for (int r = 0; r < rows; r++) {
            const __m512 a = _mm512_set1_ps(A[r * lda + p]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    } while (++p < k);
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < 2; v++)
            _mm512_storeu_ps(C + r * ldc + 16 * v, acc[r][v]);
}

/* The bf16 tile over `vectors` (1 or 2, a constant where inlined) vectors of 16 columns. */
static inline __attribute__((always_inline)) void gemm_micro_bf16_vectors(int rows, int vectors, int64_t pairs,
                                                                           const uint16_t *A, int64_t lda,
                                                                           int64_t a_pair, const uint16_t *B,
                                                                           int64_t ldb, float *C, int64_t ldc,
                                                                           float beta)
{
    __m512 acc[GEMM_MR][2];
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < vectors; v++)
            acc[r][v] = beta == 0.0f ? _mm512_setzero_ps() : beta == 1.0f ? _mm512_loadu_ps(C + r * ldc + 16 * v) : _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(C + r * ldc + 16 * v));
    int64_t q = 0;
    do { /* pairs >= 1 */
        __m512bh b[2];
        for (int v = 0; v < vectors; v++)
            b[v] = (__m512bh)_mm512_loadu_si512(B + q * ldb + 32 * v);
        for (int r = 0; r < rows; r++) {
            uint32_t pair;
            memcpy(&pair, A + r * lda + q * a_pair, sizeof pair);
            const __m512bh a = (__m512bh)_mm512_set1_epi32((int)pair);
            for (int v = 0; v < vectors; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, b[v]);
        }
    } while (++q < pairs);
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < vectors; v++)
            _mm512_storeu_ps(C + r * ldc + 16 * v, acc[r][v]);
}

static inline __attribute__((always_inline)) void gemm_micro_bf16(int rows, int64_t pairs, const uint16_t *A,
                                                                   int64_t lda, int64_t a_pair, const uint16_t *B,
                                                                   int64_t ldb, float *C, int64_t ldc, float beta)
{
    gemm_micro_bf16_vectors(rows, 2, pairs, A, lda, a_pair, B, ldb, C, ldc, beta);
}

/* The left half of the tile (GEMM_BF16_HALF): columns 0 .. 15. */
#define GEMM_BF16_HALF 1
static inline __attribute__((always_inline)) void gemm_micro_bf16_half(int rows, int64_t pairs, const uint16_t *A,
                                                                        int64_t lda, int64_t a_pair, const uint16_t *B,
                                                                        int64_t ldb, float *C, int64_t ldc, float beta)
{
    gemm_micro_bf16_vectors(rows, 1, pairs, A, lda, a_pair, B, ldb, C, ldc, beta);
}

#include "gemm_frame.h"

/* builtin:cpu GEMM kernels for AVX2 with FMA (LACS_ISA=avx2, and CPUs
 * without AVX-512): the same products as gemm_avx512.c with 256-bit vectors.
 * OpenBLAS is not called here even where it might be as fast: it picks its
 * own instruction set from the CPU, so LACS_ISA=avx2 would not run AVX2 code
 * on an AVX-512 machine (see the measurements in gemm_avx512.c).
 *
 * sgemm: C[m x n] (+)= A[m x k] B[k x n] in fp32, one FMA (one rounding) per
 * product, summed over p in increasing order within each element: the
 * classical |C - AB| <= gamma_k |A||B| (k u / (1 - k u), u = 2^-24)
 * elementwise.
 *
 * Blocking: a tile is 6 rows x 16 columns of C in 12 ymm accumulators (6 x 2
 * vectors of 8 lanes); per p it loads two vectors of B's row p and broadcasts
 * A[i][p] for its 6 rows: 12 accumulators + 2 of B + 1 broadcast = 15 of the
 * 16 ymm registers, and 12 independent FMAs cover the FMA latency times the
 * two FMA pipes. The columns are walked in panels of 16 that are first copied
 * into a contiguous buffer, zero-padded past column n: the inner loop then
 * loads B without masks (vmaskmovps in the inner loop measured 15-20%
 * slower), and the panel does not fight for the few L1 sets that B's rows,
 * 256 or 512 bytes apart, map to. With a single tile of rows (m <= 6, e.g.
 * decoding's m = 1) nothing reuses the copy, so full panels are read in
 * place. Only the loads and stores of C are masked (vmaskmovps), once per
 * tile. The last tile's rows (m % 6) use the same tile with fewer rows; the
 * tile is always inlined with constant rows and vectors so that its
 * accumulators stay in registers. k is walked in blocks of K_BLOCK so that
 * the buffers fit on the stack; C carries the partial sums.
 *
 * bgemm: bf16 A and B packed in pairs of k (dispatch.c). AVX2 has no bf16
 * dot product, so the operands are widened to fp32 (a bf16 is the upper half
 * of a binary32: a shift left by 16, exact) into the same buffers, and the
 * sgemm tile runs on them: fp32 products (exact, 8 x 8 significant bits) and
 * sums, the same gamma_k bound, and no flush of denormals (unlike AVX-512's
 * vdpbf16ps). A is widened in blocks of ROW_BLOCK rows x K_BLOCK, once per
 * block; B's panel once per (row block, panel). For odd k the packed B's last
 * pair holds 0 for p = k and A is read only up to column k - 1.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"

enum {
    LANES = 8,          /* fp32 lanes of a ymm */
    TILE_ROWS = 6,      /* rows of C per tile */
    TILE_VECTORS = 2,   /* ymm vectors of C per tile row */
    PANEL_COLUMNS = 16, /* TILE_VECTORS * LANES */
    K_BLOCK = 128,      /* k per block: the B panel is 128 x 16 floats (8 KiB) */
    ROW_BLOCK = 72      /* rows of A widened at once by bgemm: 72 x 128 floats (36 KiB), 12 tiles */
};

/* The lanes of a vector of 8 columns starting at column `first` that lie below `n`: all ones where the lane
 * is inside (vmaskmovps reads the sign bit). */
static __m256i column_mask(int64_t first, int64_t n)
{
    const int64_t count = n - first;
    const int inside = (int)(count < 0 ? 0 : count > LANES ? LANES : count);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(inside), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static void zero_or_keep(int64_t m, int64_t n, float *C, int64_t ldc, int accumulate)
{
    if (accumulate)
        return;
    for (int64_t i = 0; i < m; i++)
        memset(C + i * ldc, 0, (size_t)n * sizeof *C);
}

/* ---- the tile, on a packed panel ---- */

/* C[rows x vectors*8] (+)= A[rows x k] panel[k x 16] (row p of the panel at panel + p * ldp, 16 floats that
 * may all be read: zero past column n); C's columns masked by mask[v]. `load_c`: start from C, else from 0.
 * Always inlined with constant rows and vectors. */
static inline __attribute__((always_inline)) void tile(int rows, int vectors, int64_t k, const float *A,
                                                        int64_t lda, const float *panel, int64_t ldp, float *C,
                                                        int64_t ldc, const __m256i mask[TILE_VECTORS], int load_c)
{
    __m256 acc[TILE_ROWS][TILE_VECTORS];
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < vectors; v++)
            acc[r][v] = load_c ? _mm256_maskload_ps(C + r * ldc + v * LANES, mask[v]) : _mm256_setzero_ps();
    for (int64_t p = 0; p < k; p++) {
        __m256 b[TILE_VECTORS];
        for (int v = 0; v < vectors; v++)
            b[v] = _mm256_loadu_ps(panel + p * ldp + v * LANES);
        for (int r = 0; r < rows; r++) {
            const __m256 a = _mm256_broadcast_ss(A + r * lda + p);
            for (int v = 0; v < vectors; v++)
                acc[r][v] = _mm256_fmadd_ps(a, b[v], acc[r][v]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < vectors; v++)
            _mm256_maskstore_ps(C + r * ldc + v * LANES, mask[v], acc[r][v]);
}

/* The tile of `rows` (1..6) rows and `vectors` (1..2) vectors, each a constant in its call. */
static void tile_any(int rows, int vectors, int64_t k, const float *A, int64_t lda, const float *panel, int64_t ldp,
                     float *C, int64_t ldc, const __m256i mask[TILE_VECTORS], int load_c)
{
    if (vectors == 2) {
        switch (rows) {
        case 6: tile(6, 2, k, A, lda, panel, ldp, C, ldc, mask, load_c); return;
        case 5: tile(5, 2, k, A, lda, panel, ldp, C, ldc, mask, load_c); return;
        case 4: tile(4, 2, k, A, lda, panel, ldp, C, ldc, mask, load_c); return;
        case 3: tile(3, 2, k, A, lda, panel, ldp, C, ldc, mask, load_c); return;
        case 2: tile(2, 2, k, A, lda, panel, ldp, C, ldc, mask, load_c); return;
        default: tile(1, 2, k, A, lda, panel, ldp, C, ldc, mask, load_c); return;
        }
    }
    switch (rows) {
    case 6: tile(6, 1, k, A, lda, panel, ldp, C, ldc, mask, load_c); return;
    case 5: tile(5, 1, k, A, lda, panel, ldp, C, ldc, mask, load_c); return;
    case 4: tile(4, 1, k, A, lda, panel, ldp, C, ldc, mask, load_c); return;
    case 3: tile(3, 1, k, A, lda, panel, ldp, C, ldc, mask, load_c); return;
    case 2: tile(2, 1, k, A, lda, panel, ldp, C, ldc, mask, load_c); return;
    default: tile(1, 1, k, A, lda, panel, ldp, C, ldc, mask, load_c); return;
    }
}

/* The tiles of rows 0 .. m-1 against one panel. */
static void panel_times_rows(int64_t m, int vectors, int64_t kb, const float *A, int64_t lda, const float *panel,
                             int64_t ldp, float *C, int64_t ldc, const __m256i mask[TILE_VECTORS], int load_c)
{
    for (int64_t i0 = 0; i0 < m; i0 += TILE_ROWS) {
        const int rows = (int)(m - i0 < TILE_ROWS ? m - i0 : TILE_ROWS);
        tile_any(rows, vectors, kb, A + i0 * lda, lda, panel, ldp, C + i0 * ldc, ldc, mask, load_c);
    }
}

/* ---- sgemm ---- */

static void sgemm_avx2(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float *C, int64_t ldc, int accumulate)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        zero_or_keep(m, n, C, ldc, accumulate);
        return;
    }
    float panel[K_BLOCK * PANEL_COLUMNS];
    for (int64_t p0 = 0; p0 < k; p0 += K_BLOCK) {
        const int64_t kb = k - p0 < K_BLOCK ? k - p0 : K_BLOCK;
        const int load_c = accumulate || p0 > 0;
        for (int64_t j0 = 0; j0 < n; j0 += PANEL_COLUMNS) {
            const __m256i mask[TILE_VECTORS] = {column_mask(j0, n), column_mask(j0 + LANES, n)};
            const int vectors = n - j0 > LANES ? 2 : 1;
            if (m <= TILE_ROWS && n - j0 >= PANEL_COLUMNS) {
                /* one tile of rows: B read in place (a copy would cost as much as the product) */
                panel_times_rows(m, vectors, kb, A + p0, lda, B + p0 * ldb + j0, ldb, C + j0, ldc, mask, load_c);
                continue;
            }
            /* the panel B[p0 .. p0+kb-1][j0 .. j0+15], zero past column n */
            for (int64_t p = 0; p < kb; p++)
                for (int v = 0; v < TILE_VECTORS; v++)
                    _mm256_storeu_ps(panel + p * PANEL_COLUMNS + v * LANES,
                                     _mm256_maskload_ps(B + (p0 + p) * ldb + j0 + v * LANES, mask[v]));
            panel_times_rows(m, vectors, kb, A + p0, lda, panel, PANEL_COLUMNS, C + j0, ldc, mask, load_c);
        }
    }
}

/* ---- bgemm ---- */

/* 8 bf16 (128 bits) to 8 fp32: zero-extend each to 32 bits and move it to the upper half (exact). */
static inline __m256 widen8(__m128i bf16)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16), 16));
}

/* A[i][p0 .. p0+kb-1] for rows i < rows, widened to fp32 into out (kb floats a row). */
static void widen_rows(int64_t rows, int64_t kb, const uint16_t *A, int64_t lda, float *out)
{
    for (int64_t i = 0; i < rows; i++) {
        const uint16_t *row = A + i * lda;
        float *dst = out + i * kb;
        int64_t p = 0;
        for (; p + LANES <= kb; p += LANES)
            _mm256_storeu_ps(dst + p, widen8(_mm_loadu_si128((const __m128i *)(row + p))));
        for (; p < kb; p++)
            dst[p] = lacs_cpu_bf16_to_f32(row[p]);
    }
}

/* The panel of pairs q0 .. q0+pairs-1 and columns j0 .. j0+15 of the packed B, widened to fp32 rows of 16
 * (row 2q the even k, 2q+1 the odd k of pair q), zero past column n. Rows: 2 * pairs. */
static void widen_panel(int64_t pairs, int64_t n, int64_t j0, const uint16_t *Bp, float *panel)
{
    const __m256i odd_half = _mm256_set1_epi32((int)0xffff0000u);
    for (int64_t q = 0; q < pairs; q++) {
        const uint16_t *pair_row = Bp + q * 2 * n;
        for (int v = 0; v < TILE_VECTORS; v++) {
            /* 8 columns = 8 32-bit lanes (B[2q][j] low, B[2q+1][j] high) */
            const __m256i mask = column_mask(j0 + v * LANES, n);
            const __m256i lanes = _mm256_maskload_epi32((const int *)(pair_row + 2 * (j0 + v * LANES)), mask);
            _mm256_storeu_ps(panel + 2 * q * PANEL_COLUMNS + v * LANES,
                             _mm256_castsi256_ps(_mm256_slli_epi32(lanes, 16)));
            _mm256_storeu_ps(panel + (2 * q + 1) * PANEL_COLUMNS + v * LANES,
                             _mm256_castsi256_ps(_mm256_and_si256(lanes, odd_half)));
        }
    }
}

static void bgemm_avx2(int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda, const uint16_t *Bp,
                       float *C, int64_t ldc, int accumulate)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        zero_or_keep(m, n, C, ldc, accumulate);
        return;
    }
    float a_block[ROW_BLOCK * K_BLOCK];
    float panel[K_BLOCK * PANEL_COLUMNS];
    /* K_BLOCK is even, so each k block starts on a pair */
    for (int64_t p0 = 0; p0 < k; p0 += K_BLOCK) {
        const int64_t kb = k - p0 < K_BLOCK ? k - p0 : K_BLOCK;
        const int64_t pairs = (kb + 1) / 2;
        const int load_c = accumulate || p0 > 0;
        for (int64_t i0 = 0; i0 < m; i0 += ROW_BLOCK) {
            const int64_t rows = m - i0 < ROW_BLOCK ? m - i0 : ROW_BLOCK;
            widen_rows(rows, kb, A + i0 * lda + p0, lda, a_block);
            for (int64_t j0 = 0; j0 < n; j0 += PANEL_COLUMNS) {
                const __m256i mask[TILE_VECTORS] = {column_mask(j0, n), column_mask(j0 + LANES, n)};
                const int vectors = n - j0 > LANES ? 2 : 1;
                widen_panel(pairs, n, j0, Bp + (p0 / 2) * 2 * n, panel);
                /* kb rows of the panel: an odd k's extra row (p = k, zeros) is left out */
                panel_times_rows(rows, vectors, kb, a_block, kb, panel, PANEL_COLUMNS, C + i0 * ldc + j0, ldc, mask,
                                 load_c);
            }
        }
    }
}

const lacs_cpu_gemm lacs_cpu_gemm_avx2 = {"avx2", sgemm_avx2, bgemm_avx2};

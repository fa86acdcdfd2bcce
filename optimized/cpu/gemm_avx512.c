/* builtin:cpu GEMM kernels for AVX-512 (F, BW, VL, DQ, BF16 and FMA): the
 * products between chunks of the recurrent family (H9's matrix form, the
 * WY/UT representation) and the blocks of the attention forms (README.md).
 *
 * DECISION: sgemm is the microkernel below, not OpenBLAS's cblas_sgemm: at
 * the chunk algorithm's shapes it is twice as fast as the OpenBLAS that lacs
 * links. Single thread, GFLOP/s, best of 3 runs of `build/lacs-bench-gemm`
 * (bench/bench_gemm.c; B row-major as given, any packing inside the call
 * timed; bgemm's B packed once beforehand, "+pack" packs it in every call),
 * AMD EPYC (Zen 5, AVX-512 with BF16), 2 cores, OpenBLAS 0.3.21:
 *
 *     (m, n, k)        ours avx512   ours avx2   OpenBLAS   OpenBLAS as SkylakeX
 *                      sgemm bgemm   sgemm bgemm  sgemm      sgemm
 *     (64, 64, 128)    235   462     122   117    111        248
 *     (64, 128, 64)    233   444     121   120    110        240
 *     (64, 128, 128)   233   460     119   120    109        186
 *     (128, 128, 64)   241   464     122   120    115        203
 *     (1, 128, 128)     57   110      32    24     12         51
 *
 * OpenBLAS at 2048^3 on its default 2 threads: 225 GFLOP/s (the machine's
 * anchor); 434 with OPENBLAS_CORETYPE=SkylakeX. This OpenBLAS does not know
 * Zen 5 and runs its Haswell (AVX2) kernels; forced to its AVX-512 kernels it
 * is about as fast as ours (5% faster at (64, 64, 128), 15-20% slower at the
 * larger shapes), but lacs cannot rely on an environment variable, and
 * OpenBLAS would choose its instruction set itself, defeating LACS_ISA. Ours
 * run at the core's FMA peak (2 x 16 fp32 FMAs per cycle; other tile shapes,
 * 4 x 64, 6 x 64, 12 x 32, 8 x 48, measured the same within noise), and bgemm
 * at twice that (vdpbf16ps: two products per lane).
 *
 * sgemm: C[m x n] (+)= A[m x k] B[k x n] in fp32, one FMA (one rounding) per
 * product, summed over p in increasing order within each element; so the
 * error is the classical |C - AB| <= gamma_k |A||B| (k u / (1 - k u), u =
 * 2^-24) elementwise, whatever the blocking.
 *
 * Blocking: a tile is 8 rows x 32 columns of C held in 16 zmm accumulators
 * (8 x 2 vectors of 16 lanes). Per p, the tile loads two vectors of B's row p
 * and broadcasts A[i][p] for its 8 rows: 10 loads for 16 FMAs, and 16
 * independent accumulators cover the FMA latency (4 cycles) times the two FMA
 * pipes. The columns are walked in panels of 32; when the panel is reused by
 * more than one tile of rows (m > 8), it is first copied into a contiguous
 * buffer: B's rows are typically 128 or 64 floats apart (512 or 256 bytes),
 * so a 32-column panel read in place crowds a few L1 sets (the copy costs
 * k x 32 loads and stores per panel against 2 m k 32 flops). Measured at the
 * chunk shapes: bgemm runs at 160 GFLOP/s without the copy, 450 with it;
 * sgemm runs at its peak either way (within noise) and copies too: one code
 * path, at no measurable cost. k is walked in blocks of 256 so that the copy
 * fits on the stack; C carries the partial sums between blocks (fp32, as the
 * accumulators).
 *
 * Tails: the last panel's columns (n % 32) are masked (loads of B and of C
 * and stores of C: nothing is read or written past column n); the last tile's
 * rows (m % 8) use the same tile with fewer rows. The tile function is
 * always inlined with constant row and vector counts, so each shape compiles
 * to straight-line code with its accumulators in registers.
 *
 * bgemm: bf16 A (row-major) and B packed in pairs of consecutive k (dispatch.c,
 * lacs_cpu_pack_bf16: the layout of vdpbf16ps), fp32 accumulation. A tile is
 * again 8 rows x 32 columns, and the panel (pairs x 32 columns) is copied as
 * sgemm's; per pair of k it broadcasts the 32-bit pair
 * (A[i][p], A[i][p+1]) and issues one vdpbf16ps per 16 columns:
 * acc += A[i][p] B[p][j] + A[i][p+1] B[p+1][j]. The products of two bf16 are
 * exact in fp32 (8 x 8 significant bits), so each pair costs two roundings of
 * a sum: the same gamma_k bound as sgemm. For odd k the last pair is
 * (A[i][k-1], 0): the row has only k elements, so it is built from one
 * element, never read past the row (the packed B holds 0 there too).
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

enum {
    LANES = 16,        /* fp32 lanes of a zmm */
    TILE_ROWS = 8,     /* rows of C per tile */
    TILE_VECTORS = 2,  /* zmm vectors of C per tile row */
    PANEL_COLUMNS = 32 /* TILE_VECTORS * LANES */
};
/* k per block of sgemm: the packed panel is K_BLOCK x 32 floats (32 KiB). */
enum { K_BLOCK = 256 };
/* pairs of k per block of bgemm: the packed panel is PAIR_BLOCK x 64 bf16 (32 KiB). */
enum { PAIR_BLOCK = 256 };

/* The lanes of a vector of 16 columns starting at column `first` that lie below `n`. */
static __mmask16 column_mask(int64_t first, int64_t n)
{
    const int64_t count = n - first;
    if (count >= LANES)
        return (__mmask16)0xffff;
    if (count <= 0)
        return 0;
    return (__mmask16)((1u << count) - 1u);
}

static void zero_or_keep(int64_t m, int64_t n, float *C, int64_t ldc, int accumulate)
{
    if (accumulate)
        return;
    for (int64_t i = 0; i < m; i++)
        memset(C + i * ldc, 0, (size_t)n * sizeof *C);
}

/* ---- sgemm ---- */

/* C[rows x vectors*16] (+)= A[rows x k] B[k x vectors*16], B's row p at
 * B + p * ldb, columns masked by mask[v]. `load_c`: start from C (accumulate),
 * else from 0. Always inlined with constant rows and vectors. */
static inline __attribute__((always_inline)) void sgemm_tile(int rows, int vectors, int64_t k, const float *A,
                                                              int64_t lda, const float *B, int64_t ldb, float *C,
                                                              int64_t ldc, const __mmask16 mask[TILE_VECTORS],
                                                              int load_c)
{
    __m512 acc[TILE_ROWS][TILE_VECTORS];
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < vectors; v++)
            acc[r][v] = load_c ? _mm512_maskz_loadu_ps(mask[v], C + r * ldc + v * LANES) : _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p++) {
        __m512 b[TILE_VECTORS];
        for (int v = 0; v < vectors; v++)
            b[v] = _mm512_maskz_loadu_ps(mask[v], B + p * ldb + v * LANES);
        for (int r = 0; r < rows; r++) {
            const __m512 a = _mm512_set1_ps(A[r * lda + p]);
            for (int v = 0; v < vectors; v++)
                acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < vectors; v++)
            _mm512_mask_storeu_ps(C + r * ldc + v * LANES, mask[v], acc[r][v]);
}

/* The tile of `rows` (1..8) rows and `vectors` (1..2) vectors, each a constant in its call. */
static void sgemm_tile_any(int rows, int vectors, int64_t k, const float *A, int64_t lda, const float *B,
                           int64_t ldb, float *C, int64_t ldc, const __mmask16 mask[TILE_VECTORS], int load_c)
{
    if (vectors == 2) {
        switch (rows) {
        case 8: sgemm_tile(8, 2, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
        case 7: sgemm_tile(7, 2, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
        case 6: sgemm_tile(6, 2, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
        case 5: sgemm_tile(5, 2, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
        case 4: sgemm_tile(4, 2, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
        case 3: sgemm_tile(3, 2, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
        case 2: sgemm_tile(2, 2, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
        default: sgemm_tile(1, 2, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
        }
    }
    switch (rows) {
    case 8: sgemm_tile(8, 1, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
    case 7: sgemm_tile(7, 1, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
    case 6: sgemm_tile(6, 1, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
    case 5: sgemm_tile(5, 1, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
    case 4: sgemm_tile(4, 1, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
    case 3: sgemm_tile(3, 1, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
    case 2: sgemm_tile(2, 1, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
    default: sgemm_tile(1, 1, k, A, lda, B, ldb, C, ldc, mask, load_c); return;
    }
}

static void sgemm_avx512(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B, int64_t ldb,
                         float *C, int64_t ldc, int accumulate)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        zero_or_keep(m, n, C, ldc, accumulate);
        return;
    }
    /* The panel is reused by every tile of rows: worth a contiguous copy when there are several. */
    const int pack = m > TILE_ROWS;
    float panel[K_BLOCK * PANEL_COLUMNS];
    for (int64_t p0 = 0; p0 < k; p0 += K_BLOCK) {
        const int64_t kb = k - p0 < K_BLOCK ? k - p0 : K_BLOCK;
        const int load_c = accumulate || p0 > 0;
        for (int64_t j0 = 0; j0 < n; j0 += PANEL_COLUMNS) {
            const __mmask16 mask[TILE_VECTORS] = {column_mask(j0, n), column_mask(j0 + LANES, n)};
            const int vectors = mask[1] ? 2 : 1;
            const float *b = B + p0 * ldb + j0;
            int64_t b_ld = ldb;
            if (pack) {
                for (int64_t p = 0; p < kb; p++)
                    for (int v = 0; v < vectors; v++)
                        _mm512_storeu_ps(panel + p * PANEL_COLUMNS + v * LANES,
                                         _mm512_maskz_loadu_ps(mask[v], b + p * ldb + v * LANES));
                b = panel;
                b_ld = PANEL_COLUMNS;
            }
            for (int64_t i0 = 0; i0 < m; i0 += TILE_ROWS) {
                const int rows = (int)(m - i0 < TILE_ROWS ? m - i0 : TILE_ROWS);
                sgemm_tile_any(rows, vectors, kb, A + i0 * lda + p0, lda, b, b_ld, C + i0 * ldc + j0, ldc, mask,
                               load_c);
            }
        }
    }
}

/* ---- bgemm ---- */

/* The 32-bit pair (A[p], A[p+1]) of a bf16 row, low half first (the packed
 * layout's order); (A[p], 0) when p + 1 == k: the row ends at k. */
static inline uint32_t bf16_pair(const uint16_t *row, int64_t p, int64_t k)
{
    if (p + 1 < k) {
        uint32_t pair;
        memcpy(&pair, row + p, sizeof pair);
        return pair;
    }
    return row[p];
}

/* C[rows x vectors*16] (+)= A[rows x 2 pairs] B, over `pairs` pairs of k
 * starting at pair `pair0` (k counts A's real columns: the last pair of an
 * odd k is (A[i][k-1], 0)); Bp's pair q at Bp + q * ldbp (uint16 elements).
 * Always inlined with constant rows and vectors. */
static inline __attribute__((always_inline)) void bgemm_tile(int rows, int vectors, int64_t pair0, int64_t pairs,
                                                              int64_t k, const uint16_t *A, int64_t lda,
                                                              const uint16_t *Bp, int64_t ldbp, float *C,
                                                              int64_t ldc, const __mmask16 mask[TILE_VECTORS],
                                                              int load_c)
{
    __m512 acc[TILE_ROWS][TILE_VECTORS];
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < vectors; v++)
            acc[r][v] = load_c ? _mm512_maskz_loadu_ps(mask[v], C + r * ldc + v * LANES) : _mm512_setzero_ps();
    /* every pair but a final half pair: read 32 bits of each A row directly */
    const int64_t full_pairs = (k / 2 - pair0) < pairs ? (k / 2 - pair0) : pairs;
    for (int64_t q = 0; q < full_pairs; q++) {
        __m512bh b[TILE_VECTORS];
        for (int v = 0; v < vectors; v++)
            b[v] = (__m512bh)_mm512_maskz_loadu_epi32(mask[v], Bp + q * ldbp + 2 * v * LANES);
        for (int r = 0; r < rows; r++) {
            uint32_t pair;
            memcpy(&pair, A + r * lda + 2 * (pair0 + q), sizeof pair);
            const __m512bh a = (__m512bh)_mm512_set1_epi32((int)pair);
            for (int v = 0; v < vectors; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, b[v]);
        }
    }
    /* the half pair of an odd k, when this block holds it */
    if (full_pairs < pairs) {
        const int64_t q = full_pairs;
        __m512bh b[TILE_VECTORS];
        for (int v = 0; v < vectors; v++)
            b[v] = (__m512bh)_mm512_maskz_loadu_epi32(mask[v], Bp + q * ldbp + 2 * v * LANES);
        for (int r = 0; r < rows; r++) {
            const __m512bh a = (__m512bh)_mm512_set1_epi32((int)bf16_pair(A + r * lda, 2 * (pair0 + q), k));
            for (int v = 0; v < vectors; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, b[v]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < vectors; v++)
            _mm512_mask_storeu_ps(C + r * ldc + v * LANES, mask[v], acc[r][v]);
}

static void bgemm_tile_any(int rows, int vectors, int64_t pair0, int64_t pairs, int64_t k, const uint16_t *A,
                           int64_t lda, const uint16_t *Bp, int64_t ldbp, float *C, int64_t ldc,
                           const __mmask16 mask[TILE_VECTORS], int load_c)
{
    if (vectors == 2) {
        switch (rows) {
        case 8: bgemm_tile(8, 2, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
        case 7: bgemm_tile(7, 2, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
        case 6: bgemm_tile(6, 2, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
        case 5: bgemm_tile(5, 2, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
        case 4: bgemm_tile(4, 2, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
        case 3: bgemm_tile(3, 2, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
        case 2: bgemm_tile(2, 2, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
        default: bgemm_tile(1, 2, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
        }
    }
    switch (rows) {
    case 8: bgemm_tile(8, 1, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
    case 7: bgemm_tile(7, 1, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
    case 6: bgemm_tile(6, 1, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
    case 5: bgemm_tile(5, 1, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
    case 4: bgemm_tile(4, 1, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
    case 3: bgemm_tile(3, 1, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
    case 2: bgemm_tile(2, 1, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
    default: bgemm_tile(1, 1, pair0, pairs, k, A, lda, Bp, ldbp, C, ldc, mask, load_c); return;
    }
}

static void bgemm_avx512(int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda, const uint16_t *Bp,
                         float *C, int64_t ldc, int accumulate)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        zero_or_keep(m, n, C, ldc, accumulate);
        return;
    }
    const int64_t all_pairs = (k + 1) / 2;
    const int64_t ldbp = 2 * n; /* uint16 elements from one pair of B's rows to the next */
    /* As sgemm: a contiguous copy of the panel when several tiles of rows reuse it. */
    const int pack = m > TILE_ROWS;
    uint16_t panel[PAIR_BLOCK * 2 * PANEL_COLUMNS];
    for (int64_t q0 = 0; q0 < all_pairs; q0 += PAIR_BLOCK) {
        const int64_t pairs = all_pairs - q0 < PAIR_BLOCK ? all_pairs - q0 : PAIR_BLOCK;
        const int load_c = accumulate || q0 > 0;
        for (int64_t j0 = 0; j0 < n; j0 += PANEL_COLUMNS) {
            const __mmask16 mask[TILE_VECTORS] = {column_mask(j0, n), column_mask(j0 + LANES, n)};
            const int vectors = mask[1] ? 2 : 1;
            const uint16_t *b = Bp + q0 * ldbp + 2 * j0;
            int64_t b_ld = ldbp;
            if (pack) {
                for (int64_t q = 0; q < pairs; q++)
                    for (int v = 0; v < vectors; v++)
                        _mm512_storeu_si512(panel + q * 2 * PANEL_COLUMNS + 2 * v * LANES,
                                            _mm512_maskz_loadu_epi32(mask[v], b + q * ldbp + 2 * v * LANES));
                b = panel;
                b_ld = 2 * PANEL_COLUMNS;
            }
            for (int64_t i0 = 0; i0 < m; i0 += TILE_ROWS) {
                const int rows = (int)(m - i0 < TILE_ROWS ? m - i0 : TILE_ROWS);
                bgemm_tile_any(rows, vectors, q0, pairs, k, A + i0 * lda, lda, b, b_ld, C + i0 * ldc + j0, ldc,
                               mask, load_c);
            }
        }
    }
}

const lacs_cpu_gemm lacs_cpu_gemm_avx512 = {"avx512", sgemm_avx512, bgemm_avx512};

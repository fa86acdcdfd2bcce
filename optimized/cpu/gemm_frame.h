/* builtin:cpu GEMM: the frame (README.md section 4). The blocking, the packing
 * and the edges of every product, written once over one instruction set's
 * microkernel, as BLIS does: each gemm_<isa>.c defines its register tile and
 * microkernels, then includes this file, which builds that set's table
 * (lacs_cpu_gemm, cpu.h). Compiled with the set's flags, so that the packing
 * loops are vectorised for it, and the microkernel inlined.
 *
 * What the including file defines:
 *   GEMM_TABLE         the table's name (lacs_cpu_gemm_avx512, ...)
 *   GEMM_ISA           its instruction set's name ("avx512", ...)
 *   GEMM_MR, GEMM_NR   the register tile: rows and columns of C
 *   GEMM_KC            k per block (even): the B panel is GEMM_KC x GEMM_NR
 *   GEMM_BF16_NATIVE   1 when the set multiplies bf16 pairs itself (then
 *                      GEMM_KC counts pairs of k in bgemm), 0 when bgemm
 *                      widens its operands to fp32 (exactly) and runs the
 *                      fp32 microkernel
 *   gemm_micro_f32(rows, k, A, lda, B, ldb, C, ldc, beta)
 *       C[rows x NR] = A[rows x k] B[k x NR] + beta C, 1 <= rows <= MR,
 *       k >= 1, all NR columns present; A row-major (lda), B row-major
 *       (ldb); beta = 0 reads nothing of C (a NaN there does not propagate),
 *       else the sum starts from beta C (one rounding; exact for beta = 1).
 *       Each element a sum over p in increasing order, one FMA per product.
 *       Always inlined: the frame calls it with each row count as a
 *       constant (frame_micro_*), so that its accumulators stay in
 *       registers.
 *   gemm_micro_bf16(rows, pairs, A, lda, a_pair, B, ldb, C, ldc, beta)   (GEMM_BF16_NATIVE)
 *       the same over `pairs` pairs of k: A bf16, the pair q of row r at
 *       A + r lda + q a_pair (row-major: a_pair = 2; A packed as a B, for
 *       bgemm's A_TRANSPOSED: lda = 2), B pairs of rows interleaved (the
 *       layout of lacs_cpu_pack_bf16, ldb uint16 from one pair to the next).
 *   gemm_micro_bf16_half(...)   (GEMM_BF16_HALF, optional)
 *       the same for the tile's first GEMM_NR / 2 columns only.
 *
 * The frame (the loops of BLIS's gemm, without its outer cache blocks: the
 * products here have m, n <= a few hundred):
 *   for each block of k (GEMM_KC): for each panel of GEMM_NR columns of C:
 *     the panel of op(B) is packed into a contiguous, zero-padded buffer
 *     (unless a single tile of rows reads it, in place, where it is whole);
 *     for each tile of GEMM_MR rows (the last one cut to the rows left, by
 *     the microkernel instantiated for that count): the microkernel, on A
 *     in place, or on a packed tile where A is transposed, widened or short
 *     of k; on C in place, or on a buffer where the panel is cut by n
 *     (nothing is read or written past C's m x n).
 * C carries the partial sums from one block of k to the next (fp32, as the
 * accumulators), so the order of the sum is the same whatever the blocking:
 * |C - AB| <= gamma_k |A||B| elementwise (gamma_k = k u / (1 - k u)).
 *
 * A right operand used by several products may be packed once (pack_b) and
 * handed to sgemm_packed, which then packs nothing (BLIS's packed B reuse).
 *
 * Options (flags, cpu.h): op(A) = A^T or op(B) = B^T read transposed by the
 * packing (bgemm's A^T: given packed as a B, read in place by the
 * microkernel's pair stride); LACS_GEMM_A_LOWER (op(A) is lower triangular: the products of its
 * zero upper part are skipped, tile by tile), LACS_GEMM_B_LOWER (sgemm: op(B)
 * is lower triangular, so a panel from column j0 on needs its rows from j0
 * on only: the k of each of its tiles starts there) and LACS_GEMM_C_LOWER
 * (only the lower triangle of C is wanted: tiles wholly above the diagonal
 * are skipped, and left as they were). A skipped product is an exact zero,
 * which added to a sum changes nothing (but for the sign of a zero sum).
 */
#include <string.h>

#if (GEMM_KC % 2) != 0
#error "GEMM_KC must be even"
#endif

static inline int64_t frame_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- packing ---- */

/* The panel of op(B) at rows p0 .. p0 + kb - 1 and columns j0 .. j0 + cols - 1
 * into panel[kb][GEMM_NR], zero past column cols. */
static void frame_pack_b_f32(const float *B, int64_t ldb, int transposed, int64_t p0, int64_t kb, int64_t j0,
                             int64_t cols, float *panel)
{
    if (!transposed) {
        for (int64_t p = 0; p < kb; p++) {
            const float *row = B + (p0 + p) * ldb + j0;
            float *out = panel + p * GEMM_NR;
            if (cols == GEMM_NR) { /* a whole panel: a copy of constant size, inlined as vector moves */
                memcpy(out, row, GEMM_NR * sizeof *out);
                continue;
            }
            for (int64_t j = 0; j < cols; j++)
                out[j] = row[j];
            for (int64_t j = cols; j < GEMM_NR; j++)
                out[j] = 0.0f;
        }
        return;
    }
    /* B given as Bt [n x k]: op(B)[p][j] = Bt[j][p]; each row of Bt read along */
    for (int64_t j = 0; j < cols; j++) {
        const float *column = B + (j0 + j) * ldb + p0;
        for (int64_t p = 0; p < kb; p++)
            panel[p * GEMM_NR + j] = column[p];
    }
    for (int64_t p = 0; p < kb && cols < GEMM_NR; p++)
        for (int64_t j = cols; j < GEMM_NR; j++)
            panel[p * GEMM_NR + j] = 0.0f;
}

/* The tile of op(A) at rows i0 .. i0 + rows - 1 and columns p0 .. p0 + kb - 1
 * into tile[rows][kb]. */
static void frame_pack_a_f32(const float *A, int64_t lda, int transposed, int64_t i0, int64_t rows, int64_t p0,
                             int64_t kb, float *tile)
{
    if (!transposed)
        for (int64_t r = 0; r < rows; r++)
            memcpy(tile + r * kb, A + (i0 + r) * lda + p0, (size_t)kb * sizeof *tile);
    else
        for (int64_t p = 0; p < kb; p++) {
            const float *row = A + (p0 + p) * lda + i0; /* A given as At [k x m] */
            for (int64_t r = 0; r < rows; r++)
                tile[r * kb + p] = row[r];
        }
}

/* ---- the edges ---- */

/* A panel cut by n: its tiles are computed on buffer[rows][GEMM_NR], which
 * holds C's present elements (0 elsewhere, and everywhere for beta = 0)
 * and goes back to them after. */
static void frame_edge_load(const float *C, int64_t ldc, int64_t rows, int64_t cols, float beta, float *buffer)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < GEMM_NR; j++)
            buffer[r * GEMM_NR + j] = beta != 0.0f && j < cols ? C[r * ldc + j] : 0.0f;
}

static void frame_edge_store(const float *buffer, int64_t rows, int64_t cols, float *C, int64_t ldc)
{
    for (int64_t r = 0; r < rows; r++)
        memcpy(C + r * ldc, buffer + r * GEMM_NR, (size_t)cols * sizeof *C);
}

/* The microkernel with `rows` (1 .. GEMM_MR) as a constant at each call. */
#define FRAME_ROWS_SWITCH(micro, rows, ...)                                                                         \
    switch (rows) {                                                                                                 \
    FRAME_ROWS_CASES(micro, __VA_ARGS__)                                                                            \
    default:                                                                                                        \
        micro(GEMM_MR, __VA_ARGS__);                                                                                \
        break;                                                                                                      \
    }
#if GEMM_MR == 8
#define FRAME_ROWS_CASES(micro, ...)                                                                                \
    case 1: micro(1, __VA_ARGS__); break;                                                                           \
    case 2: micro(2, __VA_ARGS__); break;                                                                           \
    case 3: micro(3, __VA_ARGS__); break;                                                                           \
    case 4: micro(4, __VA_ARGS__); break;                                                                           \
    case 5: micro(5, __VA_ARGS__); break;                                                                           \
    case 6: micro(6, __VA_ARGS__); break;                                                                           \
    case 7: micro(7, __VA_ARGS__); break;
#elif GEMM_MR == 6
#define FRAME_ROWS_CASES(micro, ...)                                                                                \
    case 1: micro(1, __VA_ARGS__); break;                                                                           \
    case 2: micro(2, __VA_ARGS__); break;                                                                           \
    case 3: micro(3, __VA_ARGS__); break;                                                                           \
    case 4: micro(4, __VA_ARGS__); break;                                                                           \
    case 5: micro(5, __VA_ARGS__); break;
#elif GEMM_MR == 4
#define FRAME_ROWS_CASES(micro, ...)                                                                                \
    case 1: micro(1, __VA_ARGS__); break;                                                                           \
    case 2: micro(2, __VA_ARGS__); break;                                                                           \
    case 3: micro(3, __VA_ARGS__); break;
#else
#error "GEMM_MR must be 4, 6 or 8"
#endif

static void frame_micro_f32(int64_t rows, int64_t k, const float *A, int64_t lda, const float *B, int64_t ldb,
                            float *C, int64_t ldc, float beta)
{
    FRAME_ROWS_SWITCH(gemm_micro_f32, rows, k, A, lda, B, ldb, C, ldc, beta)
}

/* One tile: on C in place, or, when the panel is cut by n, on a buffer. */
static void frame_tile_f32(int64_t rows, int64_t cols, int64_t k, const float *A, int64_t lda, const float *B,
                           int64_t ldb, float *C, int64_t ldc, float beta)
{
    if (cols == GEMM_NR) {
        frame_micro_f32(rows, k, A, lda, B, ldb, C, ldc, beta);
        return;
    }
    float buffer[GEMM_MR * GEMM_NR];
    frame_edge_load(C, ldc, rows, cols, beta, buffer);
    frame_micro_f32(rows, k, A, lda, B, ldb, buffer, GEMM_NR, beta);
    frame_edge_store(buffer, rows, cols, C, ldc);
}

/* ---- C = beta C on its own (k = 0, or a tile no block of k reaches) ---- */

static void frame_scale_c(int64_t rows, int64_t cols, float *C, int64_t ldc, float beta)
{
    if (beta == 1.0f)
        return;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++)
            C[r * ldc + j] = beta == 0.0f ? 0.0f : beta * C[r * ldc + j];
}

/* The first row tile of a panel that holds part of C's lower triangle: tiles
 * whose last row is above the panel's first column are skipped. */
static int64_t frame_first_tile(unsigned flags, int64_t j0)
{
    return (flags & LACS_GEMM_C_LOWER) ? j0 / GEMM_MR * GEMM_MR : 0;
}

/* The rows of the tile from row i0 of m: GEMM_MR, but for the last two, which share the rows left
 * (more than GEMM_MR, fewer than 2 GEMM_MR) evenly: a tile of few rows has few accumulators, each waiting on
 * the FMA's latency (avx2's 32 rows: 6, 6, 6, 6, 4, 4, where the last tile of 2 took as long as one of 4). */
static inline int64_t frame_tile_rows(int64_t i0, int64_t m)
{
    const int64_t left = m - i0;
    return left > GEMM_MR && left < 2 * GEMM_MR ? (left + 1) / 2 : frame_min(GEMM_MR, left);
}

/* C = beta C over the tiles the product writes. */
static void frame_scale_all(int64_t m, int64_t n, float *C, int64_t ldc, float beta, unsigned flags)
{
    for (int64_t j0 = 0; j0 < n; j0 += GEMM_NR)
        for (int64_t i0 = frame_first_tile(flags, j0); i0 < m; i0 += GEMM_MR)
            frame_scale_c(frame_min(GEMM_MR, m - i0), frame_min(GEMM_NR, n - j0), C + i0 * ldc + j0, ldc, beta);
}

/* The k a tile of rows i0 .. i0 + rows - 1 needs from the block p0 .. p0 + kb - 1
 * when op(A) is lower triangular: columns p <= i0 + rows - 1. */
static int64_t frame_tile_k(unsigned flags, int64_t i0, int64_t rows, int64_t p0, int64_t kb)
{
    if (!(flags & LACS_GEMM_A_LOWER))
        return kb;
    const int64_t needed = i0 + rows - p0;
    return needed <= 0 ? 0 : frame_min(needed, kb);
}

/* ---- sgemm ---- */

/* op(B) packed once for several products (B_packed): the panels of
 * frame_pack_b_f32 for all of k, one after the other:
 * B_packed[(j0 / GEMM_NR) k GEMM_NR + p GEMM_NR + j] = op(B)[p][j0 + j], 0 past n. */
static size_t frame_packed_b_size(int64_t k, int64_t n)
{
    return (size_t)((n + GEMM_NR - 1) / GEMM_NR * GEMM_NR) * (size_t)(k > 0 ? k : 0);
}

static void frame_pack_b(int64_t k, int64_t n, const float *B, int64_t ldb, unsigned flags, float *B_packed)
{
    for (int64_t j0 = 0; j0 < n; j0 += GEMM_NR)
        frame_pack_b_f32(B, ldb, (flags & LACS_GEMM_B_TRANSPOSED) != 0, 0, k, j0, frame_min(GEMM_NR, n - j0),
                         B_packed + (j0 / GEMM_NR) * k * GEMM_NR);
}

/* The product, on B as given or on B packed by frame_pack_b (B_packed). */
static void frame_sgemm_on(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B, int64_t ldb,
                           const float *B_packed, float *C, int64_t ldc, float beta, unsigned flags)
{
    if (m <= 0 || n <= 0)
        return;
    const int a_transposed = (flags & LACS_GEMM_A_TRANSPOSED) != 0, b_transposed = (flags & LACS_GEMM_B_TRANSPOSED) != 0;
    if (k <= 0) {
        frame_scale_all(m, n, C, ldc, beta, flags);
        return;
    }
    float panel[GEMM_KC * GEMM_NR];
    float a_tile[GEMM_MR * GEMM_KC];
    for (int64_t p0 = 0; p0 < k; p0 += GEMM_KC) {
        const int64_t kb = frame_min(GEMM_KC, k - p0);
        const float block_beta = p0 > 0 ? 1.0f : beta; /* later blocks add to the partial sums */
        for (int64_t j0 = 0; j0 < n; j0 += GEMM_NR) {
            const int64_t cols = frame_min(GEMM_NR, n - j0);
            const int64_t first_tile = frame_first_tile(flags, j0);
            /* op(B) lower triangular: this panel's rows before j0 are zero (B_LOWER), the block's k from b0 on */
            const int64_t b0 = (flags & LACS_GEMM_B_LOWER) && j0 > p0 ? frame_min(j0, p0 + kb) : p0;
            if (b0 == p0 + kb) { /* the panel's rows of this block are all zero: only beta acts */
                for (int64_t i0 = first_tile; i0 < m && p0 == 0; i0 += GEMM_MR)
                    frame_scale_c(frame_min(GEMM_MR, m - i0), cols, C + i0 * ldc + j0, ldc, beta);
                continue;
            }
            /* a single tile of rows reads B in place: the copy would cost as much as the product */
            const int in_place = !B_packed && !b_transposed && cols == GEMM_NR && m - first_tile <= GEMM_MR;
            const float *b = B_packed ? B_packed + (j0 / GEMM_NR) * k * GEMM_NR + b0 * GEMM_NR : B + b0 * ldb + j0;
            int64_t b_ld = B_packed ? GEMM_NR : ldb;
            if (!in_place && !B_packed) {
                frame_pack_b_f32(B, ldb, b_transposed, b0, p0 + kb - b0, j0, cols, panel);
                b = panel;
                b_ld = GEMM_NR;
            }
            for (int64_t i0 = first_tile, rows; i0 < m; i0 += rows) {
                rows = frame_tile_rows(i0, m);
                /* columns b0 .. p0 + tile_end - 1 of op(A): A_LOWER ends them, B_LOWER starts them */
                const int64_t tile_end = frame_tile_k(flags, i0, rows, p0, kb), tile_k = p0 + tile_end - b0;
                float *c = C + i0 * ldc + j0;
                if (tile_k <= 0) { /* op(A) or op(B) is zero here: only beta acts */
                    if (p0 == 0)
                        frame_scale_c(rows, cols, c, ldc, beta);
                    continue;
                }
                const float *a = A + i0 * lda + b0;
                int64_t a_ld = lda;
                if (a_transposed) {
                    frame_pack_a_f32(A, lda, 1, i0, rows, b0, tile_k, a_tile);
                    a = a_tile;
                    a_ld = tile_k;
                }
                if (rows == GEMM_MR && cols == GEMM_NR) /* a whole tile, the common one: inlined, no call */
                    gemm_micro_f32(GEMM_MR, tile_k, a, a_ld, b, b_ld, c, ldc, block_beta);
                else
                    frame_tile_f32(rows, cols, tile_k, a, a_ld, b, b_ld, c, ldc, block_beta);
            }
        }
    }
}

static void frame_sgemm(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B, int64_t ldb,
                        float *C, int64_t ldc, float beta, unsigned flags)
{
    frame_sgemm_on(m, n, k, A, lda, B, ldb, NULL, C, ldc, beta, flags);
}

static void frame_sgemm_packed(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B_packed,
                               float *C, int64_t ldc, float beta, unsigned flags)
{
    frame_sgemm_on(m, n, k, A, lda, NULL, 0, B_packed, C, ldc, beta, flags & ~(unsigned)LACS_GEMM_B_TRANSPOSED);
}

/* ---- bgemm ---- */

#if GEMM_BF16_NATIVE

static void frame_micro_bf16(int64_t rows, int64_t pairs, const uint16_t *A, int64_t lda, int64_t a_pair,
                             const uint16_t *B, int64_t ldb, float *C, int64_t ldc, float beta)
{
    FRAME_ROWS_SWITCH(gemm_micro_bf16, rows, pairs, A, lda, a_pair, B, ldb, C, ldc, beta)
}

/* Pairs q0 .. q0 + pairs - 1 of the packed B, columns j0 .. j0 + cols - 1, into
 * panel[pairs][2 GEMM_NR], zero past column cols. */
static void frame_pack_b_bf16(const uint16_t *Bp, int64_t n, int64_t q0, int64_t pairs, int64_t j0, int64_t cols,
                              uint16_t *panel)
{
    for (int64_t q = 0; q < pairs; q++) {
        const uint16_t *row = Bp + (q0 + q) * 2 * n + 2 * j0;
        uint16_t *out = panel + q * 2 * GEMM_NR;
        if (cols == GEMM_NR) {
            memcpy(out, row, 2 * GEMM_NR * sizeof *out);
            continue;
        }
        memcpy(out, row, (size_t)(2 * cols) * sizeof *out);
        memset(out + 2 * cols, 0, (size_t)(2 * (GEMM_NR - cols)) * sizeof *out);
    }
}

/* A's rows i0 .. i0 + rows - 1, elements p0 .. p0 + 2 pairs - 1, into
 * tile[rows][2 pairs], 0 past k: the last pair of an odd k is
 * (A[i][k-1], 0), and nothing is read past the row. */
static void frame_pack_a_bf16(const uint16_t *A, int64_t lda, int64_t k, int64_t i0, int64_t rows, int64_t p0,
                              int64_t pairs, uint16_t *tile)
{
    const int64_t width = 2 * pairs, present = frame_min(width, k - p0);
    for (int64_t r = 0; r < rows; r++) {
        uint16_t *out = tile + r * width;
        memcpy(out, A + (i0 + r) * lda + p0, (size_t)present * sizeof *out);
        memset(out + present, 0, (size_t)(width - present) * sizeof *out);
    }
}

/* A tile of fewer than GEMM_NR columns, through a buffer. */
static void frame_edge_tile_bf16(int64_t rows, int64_t cols, int64_t pairs, const uint16_t *A, int64_t lda,
                                 int64_t a_pair, const uint16_t *B, int64_t ldb, float *C, int64_t ldc, float beta)
{
    float buffer[GEMM_MR * GEMM_NR];
    frame_edge_load(C, ldc, rows, cols, beta, buffer);
    frame_micro_bf16(rows, pairs, A, lda, a_pair, B, ldb, buffer, GEMM_NR, beta);
    frame_edge_store(buffer, rows, cols, C, ldc);
}

/* Inlined into the loop of tiles: as a call of its own (GCC 12 did not inline it), its entry and exit, which
 * set up the edge's buffer, cost a tile of the bf16 tier's k = 32 products (the chunk's) a third of its
 * multiply-adds' time (2 % of the bf16 tier's time under avx512 on the EPYC of README.md section 8.2.13). */
#if GEMM_BF16_HALF
static void frame_micro_bf16_half(int64_t rows, int64_t pairs, const uint16_t *A, int64_t lda, int64_t a_pair,
                                  const uint16_t *B, int64_t ldb, float *C, int64_t ldc, float beta)
{
    FRAME_ROWS_SWITCH(gemm_micro_bf16_half, rows, pairs, A, lda, a_pair, B, ldb, C, ldc, beta)
}
#endif

static inline __attribute__((always_inline)) void frame_tile_bf16(int64_t rows, int64_t cols, int64_t pairs,
                                                                  const uint16_t *A, int64_t lda, int64_t a_pair,
                                                                  const uint16_t *B, int64_t ldb, float *C,
                                                                  int64_t ldc, float beta, int half)
{
#if GEMM_BF16_HALF
    if (half) {
        frame_micro_bf16_half(rows, pairs, A, lda, a_pair, B, ldb, C, ldc, beta);
        return;
    }
#else
    (void)half;
#endif
    if (cols == GEMM_NR)
        frame_micro_bf16(rows, pairs, A, lda, a_pair, B, ldb, C, ldc, beta);
    else
        frame_edge_tile_bf16(rows, cols, pairs, A, lda, a_pair, B, ldb, C, ldc, beta);
}

static void frame_bgemm(int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda, const uint16_t *Bp,
                        float *C, int64_t ldc, float beta, unsigned flags)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        frame_scale_all(m, n, C, ldc, beta, flags);
        return;
    }
    const int64_t all_pairs = (k + 1) / 2;
    const int transposed = (flags & LACS_GEMM_A_TRANSPOSED) != 0;
    uint16_t panel[GEMM_KC * 2 * GEMM_NR];
    uint16_t a_tile[GEMM_MR * 2 * GEMM_KC];
    for (int64_t q0 = 0; q0 < all_pairs; q0 += GEMM_KC) {
        const int64_t pairs = frame_min(GEMM_KC, all_pairs - q0), p0 = 2 * q0;
        const float block_beta = q0 > 0 ? 1.0f : beta;
        for (int64_t j0 = 0; j0 < n; j0 += GEMM_NR) {
            const int64_t cols = frame_min(GEMM_NR, n - j0);
            const int64_t first_tile = frame_first_tile(flags, j0);
            /* B read where it is: by one tile row, or when B is one panel wide (n = GEMM_NR), whose packed
             * rows are the panel's own (2 GEMM_NR apart: recurrent_kernels.h's round_pack_panels) */
            const int in_place = cols == GEMM_NR && (n == GEMM_NR || m - first_tile <= GEMM_MR);
            const uint16_t *b = Bp + q0 * 2 * n + 2 * j0;
            int64_t b_ld = 2 * n;
            if (!in_place) {
                frame_pack_b_bf16(Bp, n, q0, pairs, j0, cols, panel);
                b = panel;
                b_ld = 2 * GEMM_NR;
            }
            for (int64_t i0 = first_tile; i0 < m; i0 += GEMM_MR) {
                const int64_t rows = frame_min(GEMM_MR, m - i0);
                const int64_t tile_pairs = (frame_tile_k(flags, i0, rows, p0, 2 * pairs) + 1) / 2;
                float *c = C + i0 * ldc + j0;
                if (tile_pairs == 0) {
                    if (q0 == 0)
                        frame_scale_c(rows, cols, c, ldc, beta);
                    continue;
                }
                /* A's pair q of row i: A + i lda + 2 q, or packed (A_TRANSPOSED) A + q lda + 2 i, whose half
                 * pair of an odd k is stored as (A[i][k-1], 0) */
                const uint16_t *a = transposed ? A + q0 * lda + 2 * i0 : A + i0 * lda + p0;
                int64_t a_ld = transposed ? 2 : lda, a_pair = transposed ? lda : 2;
                if (!transposed && p0 + 2 * tile_pairs > k) { /* the half pair (A[i][k-1], 0): not past the row */
                    frame_pack_a_bf16(A, lda, k, i0, rows, p0, tile_pairs, a_tile);
                    a = a_tile;
                    a_ld = 2 * tile_pairs;
                }
                /* C_LOWER: a tile whose right half lies above the diagonal takes its left half only */
                const int half = (flags & LACS_GEMM_C_LOWER) && cols == GEMM_NR && i0 + rows <= j0 + GEMM_NR / 2;
                frame_tile_bf16(rows, cols, tile_pairs, a, a_ld, a_pair, b, b_ld, c, ldc, block_beta, half);
            }
        }
    }
}

#else /* bgemm by widening: bf16 is the upper half of a binary32, so widening is exact */

/* Rows of A widened at once (72 or a little more): a block of whole tiles, widened once for all the
 * panels, GEMM_KC floats a row on the stack. */
#define FRAME_WIDEN_ROWS (GEMM_MR * ((72 + GEMM_MR - 1) / GEMM_MR))

static inline float frame_widen(uint16_t b)
{
    union { uint32_t u; float f; } v = {.u = (uint32_t)b << 16};
    return v.f;
}

/* Elements p0 .. p0 + kb - 1 (p0 even) of the packed B's columns j0 .. j0 + cols - 1,
 * widened into panel[kb][GEMM_NR], zero past column cols. */
static void frame_widen_b(const uint16_t *Bp, int64_t n, int64_t p0, int64_t kb, int64_t j0, int64_t cols,
                          float *panel)
{
    for (int64_t p = 0; p < kb; p++) {
        const uint16_t *pair_row = Bp + ((p0 + p) / 2) * 2 * n + 2 * j0 + (p0 + p) % 2;
        float *out = panel + p * GEMM_NR;
        for (int64_t j = 0; j < cols; j++)
            out[j] = frame_widen(pair_row[2 * j]);
        for (int64_t j = cols; j < GEMM_NR; j++)
            out[j] = 0.0f;
    }
}

/* op(A)'s rows i0 .. i0 + rows - 1, elements p0 .. p0 + kb - 1 (p0 even), widened into block[rows][kb]: A
 * row-major, or (transposed) packed as lacs_cpu_pack_bf16 packs a B (element p of row i at
 * A + (p / 2) lda + 2 i + p % 2). */
static void frame_widen_a(const uint16_t *A, int64_t lda, int transposed, int64_t i0, int64_t rows, int64_t p0,
                          int64_t kb, float *block)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t p = 0; p < kb; p++)
            block[r * kb + p] = frame_widen(transposed ? A[((p0 + p) / 2) * lda + 2 * (i0 + r) + (p0 + p) % 2]
                                                       : A[(i0 + r) * lda + p0 + p]);
}

static void frame_bgemm(int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda, const uint16_t *Bp,
                        float *C, int64_t ldc, float beta, unsigned flags)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        frame_scale_all(m, n, C, ldc, beta, flags);
        return;
    }
    float panel[GEMM_KC * GEMM_NR];
    float a_block[FRAME_WIDEN_ROWS * GEMM_KC];
    for (int64_t p0 = 0; p0 < k; p0 += GEMM_KC) {
        const int64_t kb = frame_min(GEMM_KC, k - p0);
        const float block_beta = p0 > 0 ? 1.0f : beta;
        for (int64_t ib = 0; ib < m; ib += FRAME_WIDEN_ROWS) {
            const int64_t block_rows = frame_min(FRAME_WIDEN_ROWS, m - ib);
            frame_widen_a(A, lda, (flags & LACS_GEMM_A_TRANSPOSED) != 0, ib, block_rows, p0, kb, a_block);
            for (int64_t j0 = 0; j0 < n; j0 += GEMM_NR) {
                const int64_t cols = frame_min(GEMM_NR, n - j0);
                frame_widen_b(Bp, n, p0, kb, j0, cols, panel);
                const int64_t first = frame_first_tile(flags, j0);
                for (int64_t i0 = ib > first ? ib : first; i0 < ib + block_rows; i0 += GEMM_MR) {
                    const int64_t rows = frame_min(GEMM_MR, ib + block_rows - i0);
                    const int64_t tile_k = frame_tile_k(flags, i0, rows, p0, kb);
                    float *c = C + i0 * ldc + j0;
                    if (tile_k == 0) {
                        if (p0 == 0)
                            frame_scale_c(rows, cols, c, ldc, beta);
                        continue;
                    }
                    frame_tile_f32(rows, cols, tile_k, a_block + (i0 - ib) * kb, kb, panel, GEMM_NR, c, ldc,
                                   block_beta);
                }
            }
        }
    }
}

#endif

/* ---- the table ---- */

static void frame_sgemm_simple(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B,
                               int64_t ldb, float *C, int64_t ldc, int accumulate)
{
    frame_sgemm(m, n, k, A, lda, B, ldb, C, ldc, accumulate ? 1.0f : 0.0f, 0);
}

static void frame_bgemm_simple(int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda, const uint16_t *Bp,
                               float *C, int64_t ldc, int accumulate)
{
    frame_bgemm(m, n, k, A, lda, Bp, C, ldc, accumulate ? 1.0f : 0.0f, 0);
}

const lacs_cpu_gemm GEMM_TABLE = {
    .isa = GEMM_ISA,
    .sgemm = frame_sgemm_simple,
    .bgemm = frame_bgemm_simple,
    .sgemm_general = frame_sgemm,
    .packed_b_size = frame_packed_b_size,
    .pack_b = frame_pack_b,
    .nr = GEMM_NR,
    .sgemm_packed = frame_sgemm_packed,
    .bgemm_general = frame_bgemm,
};

/* builtin:cpu's GEMM (optimized/cpu/gemm_frame.h over gemm_*.c, optimized/cpu/README.md), for every
 * instruction set this CPU has (the others are skipped with a message):
 *   sgemm_*, bgemm_*  C (+)= A B against the exact product (double) on the
 *                     chunk algorithm's shapes, small and odd ones, k = 1,
 *                     k past the kernels' k blocks, leading dimensions wider
 *                     than the matrices, accumulate on and off;
 *   empty_*           m = 0 or n = 0 leave C alone; k = 0 zeroes it or keeps it;
 *   bgemm_denormals   vdpbf16ps's flush to zero stays within the underflow term;
 *   general_forms     the frame's options (gemm_frame.h): A or B transposed, a
 *                     beta other than 0 and 1, A lower triangular (its upper
 *                     part skipped), only C's lower triangle wanted (the rest
 *                     may be left, but nothing past m x n written);
 *   packed_b          a right operand packed once (pack_b) and read by
 *                     sgemm_packed gives the general form's C bit for bit;
 *   wrong_kernels     deliberately wrong kernels that the same bound rejects.
 *
 * The bound, per element: with M_ij = |C0_ij| + sum_p |A_ip| |B_pj| (C0 the C
 * accumulated into, 0 without accumulate),
 *     |C_ij - C_exact_ij| <= c k u M_ij + underflow,   c = 2, u = 2^-24,
 * the classical gamma_k bound of a dot product in binary32 (each product
 * rounded once by an FMA or exact, k - 1 sums, one more for C0: at most k + 1
 * roundings, and k + 1 <= 2 k for k >= 1; k = 0 must be exact). The
 * underflow term is k 2^-149 for sgemm (gradual underflow: half an ulp of the
 * smallest subnormal per operation) and 2^-126 (k + 2 + sum_p (|A_ip| + |B_pj|))
 * for bgemm (AVX-512's vdpbf16ps flushes denormal inputs and results to zero,
 * see gemm_avx512.c); both are negligible for the data below except in the
 * denormal test. Padding (leading dimensions past the matrices) is NaN in A
 * and B, so that a kernel reading past a row gets NaN, and a sentinel in C,
 * which must survive. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../optimized/cpu/cpu.h"

#define BOUND_FACTOR 2.0
#define UNIT_ROUNDOFF 0x1p-24
#define C_SENTINEL 12345.0f

typedef struct {
    int64_t m, n, k;
} shape;

/* The chunk algorithm's products (chunk 64, K = V = 128), small and odd
 * shapes, k = 1, k past the k blocks (256 for avx512 sgemm, 2 x 256 for its
 * bgemm, 128 for avx2), rows and columns one past the tiles (8 x 32, 6 x 16). */
static const shape shapes[] = {
    {64, 64, 128}, {64, 128, 64}, {64, 128, 128}, {128, 128, 64}, {64, 16, 16}, {16, 32, 16}, {1, 128, 128},
    {3, 5, 7},     {1, 1, 1},     {9, 33, 1},     {17, 47, 31},   {7, 15, 2},   {6, 16, 3},   {8, 32, 129},
    {13, 17, 300}, {65, 129, 257}, {2, 1, 513},   {33, 31, 600},  {25, 48, 11}, {12, 8, 5},
};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

/* Padding added to each leading dimension, so that rows are not contiguous. */
enum { PAD_A = 3, PAD_B = 5, PAD_C = 7 };

typedef void (*sgemm_fn)(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B,
                         int64_t ldb, float *C, int64_t ldc, int accumulate);
typedef void (*bgemm_fn)(int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda, const uint16_t *Bp,
                         float *C, int64_t ldc, int accumulate);

/* ---- data ---- */

static uint64_t next_random(uint64_t *state)
{
    /* SplitMix64 */
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1), times 2^e for e in -4 .. 3: magnitudes that differ, so that sums round. */
static float random_value(uint64_t *state)
{
    const uint64_t r = next_random(state);
    const double unit = (double)(r >> 11) * 0x1p-53 * 2.0 - 1.0;
    return (float)ldexp(unit, (int)(r & 7) - 4);
}

/* A rows x cols matrix with leading dimension ld: random inside, `pad` in columns cols .. ld-1. */
static float *random_matrix(int64_t rows, int64_t cols, int64_t ld, float pad, uint64_t *state)
{
    float *x = malloc((size_t)(rows * ld + 1) * sizeof *x);
    cr_assert(x != NULL);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < ld; j++)
            x[i * ld + j] = j < cols ? random_value(state) : pad;
    return x;
}

static uint16_t *to_bf16(const float *x, int64_t count)
{
    uint16_t *b = malloc((size_t)(count + 1) * sizeof *b);
    cr_assert(b != NULL);
    for (int64_t i = 0; i < count; i++)
        b[i] = lacs_cpu_f32_to_bf16(x[i]);
    return b;
}

static float *copy_of(const float *x, int64_t count)
{
    float *y = malloc((size_t)(count + 1) * sizeof *y);
    cr_assert(y != NULL);
    memcpy(y, x, (size_t)count * sizeof *y);
    return y;
}

/* ---- the check ---- */

typedef struct {
    int64_t m, n, k, lda, ldb, ldc;
    const float *A, *B; /* the operands as fp32 (for bgemm: the bf16 values, widened) */
    const float *C0;    /* C before the call */
    int accumulate;
    int bf16; /* the underflow term of bgemm */
} product;

/* The worst of |C - C_exact| / bound over the elements (0/0 = 0, e/0 = inf,
 * NaN = inf), and inf if a padding element of C changed. */
static double worst_ratio(const product *p, const float *C)
{
    double worst = 0;
    for (int64_t i = 0; i < p->m; i++) {
        for (int64_t j = 0; j < p->n; j++) {
            const double c0 = p->accumulate ? p->C0[i * p->ldc + j] : 0.0;
            double exact = c0, magnitude = fabs(c0), inputs = 0;
            for (int64_t q = 0; q < p->k; q++) {
                const double a = p->A[i * p->lda + q], b = p->B[q * p->ldb + j];
                exact += a * b; /* products exact in double; the sum within k 2^-53 M, 2^-29 of the bound */
                magnitude += fabs(a * b);
                inputs += fabs(a) + fabs(b);
            }
            const double underflow =
                p->bf16 ? 0x1p-126 * ((double)p->k + 2 + inputs) : 0x1p-149 * (double)p->k;
            const double bound = BOUND_FACTOR * (double)p->k * UNIT_ROUNDOFF * magnitude + underflow;
            const double error = fabs((double)C[i * p->ldc + j] - exact);
            const double ratio = isnan(error) ? INFINITY : error == 0 ? 0 : bound == 0 ? INFINITY : error / bound;
            if (ratio > worst)
                worst = ratio;
        }
        for (int64_t j = p->n; j < p->ldc; j++)
            if (C[i * p->ldc + j] != C_SENTINEL)
                return INFINITY;
    }
    return worst;
}

/* One product of `s` with fresh random operands: sgemm (bgemm NULL) or bgemm
 * (sgemm NULL; B packed by lacs_cpu_pack_bf16). Returns the worst ratio. */
static double run_product(const shape *s, int accumulate, uint64_t seed, sgemm_fn sgemm, bgemm_fn bgemm)
{
    uint64_t state = seed;
    const int64_t lda = s->k + PAD_A, ldb = s->n + PAD_B, ldc = s->n + PAD_C;
    float *A = random_matrix(s->m, s->k, lda, NAN, &state);
    float *B = random_matrix(s->k, s->n, ldb, NAN, &state);
    float *C0 = random_matrix(s->m, s->n, ldc, C_SENTINEL, &state);
    float *C = copy_of(C0, s->m * ldc);
    product p = {.m = s->m, .n = s->n, .k = s->k, .lda = lda, .ldb = ldb, .ldc = ldc, .A = A, .B = B, .C0 = C0,
                 .accumulate = accumulate, .bf16 = bgemm != NULL};
    if (sgemm)
        sgemm(s->m, s->n, s->k, A, lda, B, ldb, C, ldc, accumulate);
    else {
        /* the operands become bf16 values; the exact product is taken of those */
        uint16_t *A16 = to_bf16(A, s->m * lda), *B16 = to_bf16(B, s->k * ldb);
        uint16_t *Bp = malloc((lacs_cpu_packed_bf16_size(s->k, s->n) + 1) * sizeof *Bp);
        cr_assert(Bp != NULL);
        lacs_cpu_pack_bf16(s->k, s->n, B16, ldb, Bp);
        for (int64_t i = 0; i < s->m * lda; i++)
            A[i] = lacs_cpu_bf16_to_f32(A16[i]);
        for (int64_t i = 0; i < s->k * ldb; i++)
            B[i] = lacs_cpu_bf16_to_f32(B16[i]);
        bgemm(s->m, s->n, s->k, A16, lda, Bp, C, ldc, accumulate);
        free(A16);
        free(B16);
        free(Bp);
    }
    const double ratio = worst_ratio(&p, C);
    free(A);
    free(B);
    free(C0);
    free(C);
    return ratio;
}

/* ---- the instruction sets ---- */

static const lacs_cpu_gemm *const tables[] = {&lacs_cpu_gemm_scalar, &lacs_cpu_gemm_avx2, &lacs_cpu_gemm_avx512};
enum { N_TABLES = sizeof tables / sizeof tables[0] };

/* Whether this CPU runs `table`'s kernels; says why not when it does not. */
static int runnable(const lacs_cpu_gemm *table)
{
    if (lacs_cpu_isa_supported(table->isa))
        return 1;
    cr_log_info("cpu_gemm: skipping %s: this CPU lacks its instructions (lacs_cpu_isa_supported)", table->isa);
    return 0;
}

/* ---- the kernels within the bound ---- */

Test(cpu_gemm, sgemm_within_bound_on_every_shape)
{
    for (int t = 0; t < N_TABLES; t++) {
        if (!runnable(tables[t]))
            continue;
        double worst = 0;
        for (int s = 0; s < N_SHAPES; s++)
            for (int accumulate = 0; accumulate <= 1; accumulate++) {
                const double ratio = run_product(&shapes[s], accumulate, 1000 + 10 * (uint64_t)s + (uint64_t)accumulate,
                                                 tables[t]->sgemm, NULL);
                cr_expect(ratio <= 1, "%s sgemm (%lld, %lld, %lld) accumulate %d: error / bound = %g", tables[t]->isa,
                          (long long)shapes[s].m, (long long)shapes[s].n, (long long)shapes[s].k, accumulate, ratio);
                worst = fmax(worst, ratio);
            }
        cr_log_info("cpu_gemm: %s sgemm: worst error / bound %.3g", tables[t]->isa, worst);
    }
}

Test(cpu_gemm, bgemm_within_bound_on_every_shape)
{
    for (int t = 0; t < N_TABLES; t++) {
        if (!runnable(tables[t]))
            continue;
        double worst = 0;
        for (int s = 0; s < N_SHAPES; s++)
            for (int accumulate = 0; accumulate <= 1; accumulate++) {
                const double ratio = run_product(&shapes[s], accumulate, 2000 + 10 * (uint64_t)s + (uint64_t)accumulate,
                                                 NULL, tables[t]->bgemm);
                cr_expect(ratio <= 1, "%s bgemm (%lld, %lld, %lld) accumulate %d: error / bound = %g", tables[t]->isa,
                          (long long)shapes[s].m, (long long)shapes[s].n, (long long)shapes[s].k, accumulate, ratio);
                worst = fmax(worst, ratio);
            }
        cr_log_info("cpu_gemm: %s bgemm: worst error / bound %.3g", tables[t]->isa, worst);
    }
}

/* m = 0 or n = 0: nothing is written. k = 0: C = 0, or C unchanged when accumulating. */
Test(cpu_gemm, empty_shapes_zero_or_keep_c)
{
    enum { LD = 8 };
    const float A[LD * LD] = {1}, B[LD * LD] = {1};
    const uint16_t A16[LD * LD] = {0x3f80}, Bp[LD * LD] = {0x3f80};
    const shape empty[] = {{0, 5, 5}, {5, 0, 5}, {0, 0, 0}, {5, 5, 0}, {1, 7, 0}};
    for (int t = 0; t < N_TABLES; t++) {
        if (!runnable(tables[t]))
            continue;
        for (size_t e = 0; e < sizeof empty / sizeof empty[0]; e++)
            for (int accumulate = 0; accumulate <= 1; accumulate++)
                for (int bf16 = 0; bf16 <= 1; bf16++) {
                    const shape *s = &empty[e];
                    float C[LD * LD];
                    for (int i = 0; i < LD * LD; i++)
                        C[i] = C_SENTINEL;
                    if (bf16)
                        tables[t]->bgemm(s->m, s->n, s->k, A16, LD, Bp, C, LD, accumulate);
                    else
                        tables[t]->sgemm(s->m, s->n, s->k, A, LD, B, LD, C, LD, accumulate);
                    for (int64_t i = 0; i < LD; i++)
                        for (int64_t j = 0; j < LD; j++) {
                            const int zeroed = !accumulate && i < s->m && j < s->n;
                            cr_expect(C[i * LD + j] == (zeroed ? 0.0f : C_SENTINEL),
                                      "%s %s (%lld, %lld, %lld) accumulate %d: C[%lld][%lld] = %g", tables[t]->isa,
                                      bf16 ? "bgemm" : "sgemm", (long long)s->m, (long long)s->n, (long long)s->k,
                                      accumulate, (long long)i, (long long)j, C[i * LD + j]);
                        }
                }
    }
}

/* Denormal bf16 inputs (2^-130 and below) and sums that cancel into the
 * denormal range: AVX-512's vdpbf16ps flushes them, within the underflow term
 * 2^-126 (k + 2 + sum_p (|A_ip| + |B_pj|)); the other kernels round there as
 * anywhere (gradual underflow). */
Test(cpu_gemm, bgemm_denormals_within_underflow_term)
{
    enum { M = 9, N = 33, K = 7 };
    float A[M * K], B[K * N], C0[M * N], C[M * N];
    uint16_t A16[M * K], B16[K * N], Bp[((K + 1) / 2) * 2 * N];
    uint64_t state = 77;
    for (int i = 0; i < M * K; i++) /* half the entries denormal, the others around 2^-120 */
        A16[i] = lacs_cpu_f32_to_bf16(ldexpf(random_value(&state), i % 2 ? -127 : -117));
    for (int i = 0; i < K * N; i++)
        B16[i] = lacs_cpu_f32_to_bf16(random_value(&state));
    for (int i = 0; i < M * K; i++)
        A[i] = lacs_cpu_bf16_to_f32(A16[i]);
    for (int i = 0; i < K * N; i++)
        B[i] = lacs_cpu_bf16_to_f32(B16[i]);
    lacs_cpu_pack_bf16(K, N, B16, N, Bp);
    for (int i = 0; i < M * N; i++) /* a C accumulated into, partly denormal */
        C0[i] = ldexpf(random_value(&state), i % 2 ? -128 : -118);
    for (int t = 0; t < N_TABLES; t++) {
        if (!runnable(tables[t]))
            continue;
        for (int accumulate = 0; accumulate <= 1; accumulate++) {
            product p = {.m = M, .n = N, .k = K, .lda = K, .ldb = N, .ldc = N, .A = A, .B = B, .C0 = C0,
                         .accumulate = accumulate, .bf16 = 1};
            memcpy(C, C0, sizeof C);
            tables[t]->bgemm(M, N, K, A16, K, Bp, C, N, accumulate);
            const double ratio = worst_ratio(&p, C);
            cr_expect(ratio <= 1, "%s bgemm with denormals, accumulate %d: error / bound = %g", tables[t]->isa,
                      accumulate, ratio);
            cr_log_info("cpu_gemm: %s bgemm with denormals, accumulate %d: worst error / bound %.3g",
                        tables[t]->isa, accumulate, ratio);
        }
    }
}

/* ---- the general forms ---- */

typedef void (*sgemm_general_fn)(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B,
                                 int64_t ldb, float *C, int64_t ldc, float beta, unsigned flags);
typedef void (*bgemm_general_fn)(int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda,
                                 const uint16_t *Bp, float *C, int64_t ldc, float beta, unsigned flags);

/* One general product: op(A), op(B) drawn as [m x k] and [k x n] (A's upper
 * part zero for A_LOWER, B's for B_LOWER), stored transposed where the flags say, C0 random;
 * C = op(A) op(B) + beta C0 checked against the exact value within the bound
 * (beta C0 is one more rounding, in the bound's k + 1), on the lower
 * triangle only for C_LOWER; C's padding must keep its sentinel. sgemm
 * (bgemm NULL) or bgemm (the LOWER flags and A_TRANSPOSED: A^T packed as a B
 * is). Returns the worst ratio. */
static double run_general(const shape *s, float beta, unsigned flags, uint64_t seed, sgemm_general_fn sgemm,
                          bgemm_general_fn bgemm)
{
    uint64_t state = seed;
    const int64_t m = s->m, n = s->n, k = s->k;
    const int64_t lda = k + PAD_A, ldb = n + PAD_B, ldc = n + PAD_C;
    float *A = random_matrix(m, k, lda, NAN, &state), *B = random_matrix(k, n, ldb, NAN, &state);
    float *C0 = random_matrix(m, n, ldc, C_SENTINEL, &state);
    float *C = copy_of(C0, m * ldc);
    if (flags & LACS_GEMM_A_LOWER)
        for (int64_t i = 0; i < m; i++)
            for (int64_t p = i + 1; p < k; p++)
                A[i * lda + p] = 0.0f;
    if (flags & LACS_GEMM_B_LOWER) /* op(B)[p][j] = 0 for p < j; its diagonal not zero, whose skipping would show */
        for (int64_t p = 0; p < k; p++)
            for (int64_t j = p + 1; j < n; j++)
                B[p * ldb + j] = 0.0f;
    if (bgemm) { /* the operands become bf16 values */
        uint16_t *A16 = to_bf16(A, m * lda), *B16 = to_bf16(B, k * ldb);
        uint16_t *Bp = malloc((lacs_cpu_packed_bf16_size(k, n) + 1) * sizeof *Bp);
        cr_assert(Bp != NULL);
        lacs_cpu_pack_bf16(k, n, B16, ldb, Bp);
        for (int64_t i = 0; i < m * lda; i++)
            A[i] = lacs_cpu_bf16_to_f32(A16[i]);
        for (int64_t i = 0; i < k * ldb; i++)
            B[i] = lacs_cpu_bf16_to_f32(B16[i]);
        if (flags & LACS_GEMM_A_TRANSPOSED) { /* A^T [k x m] packed as a B is: lda 2 m */
            uint16_t *At16 = malloc((size_t)(k * m) * sizeof *At16);
            /* room for m rows of lda = 2 m too: a wrong kernel reading it as row-major stays inside */
            const size_t packed = lacs_cpu_packed_bf16_size(k, m) + 1, as_rows = (size_t)(2 * m * m + k);
            uint16_t *Ap = calloc(packed > as_rows ? packed : as_rows, sizeof *Ap);
            cr_assert(At16 != NULL && Ap != NULL);
            for (int64_t i = 0; i < m; i++)
                for (int64_t p = 0; p < k; p++)
                    At16[p * m + i] = A16[i * lda + p];
            lacs_cpu_pack_bf16(k, m, At16, m, Ap);
            bgemm(m, n, k, Ap, 2 * m, Bp, C, ldc, beta, flags);
            free(At16);
            free(Ap);
        } else
            bgemm(m, n, k, A16, lda, Bp, C, ldc, beta, flags);
        free(A16);
        free(B16);
        free(Bp);
    } else {
        /* the stored operands: transposed copies (NaN-padded) where the flags ask */
        const int64_t ldat = m + PAD_A, ldbt = k + PAD_B;
        float *At = random_matrix(k, m, ldat, NAN, &state), *Bt = random_matrix(n, k, ldbt, NAN, &state);
        for (int64_t i = 0; i < m; i++)
            for (int64_t p = 0; p < k; p++)
                At[p * ldat + i] = A[i * lda + p];
        for (int64_t p = 0; p < k; p++)
            for (int64_t j = 0; j < n; j++)
                Bt[j * ldbt + p] = B[p * ldb + j];
        const int a_t = (flags & LACS_GEMM_A_TRANSPOSED) != 0, b_t = (flags & LACS_GEMM_B_TRANSPOSED) != 0;
        sgemm(m, n, k, a_t ? At : A, a_t ? ldat : lda, b_t ? Bt : B, b_t ? ldbt : ldb, C, ldc, beta, flags);
        free(At);
        free(Bt);
    }
    double worst = 0;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            if ((flags & LACS_GEMM_C_LOWER) && j > i)
                continue;
            const double c0 = beta == 0.0f ? 0.0 : (double)beta * C0[i * ldc + j];
            double exact = c0, magnitude = fabs(c0), inputs = 0;
            for (int64_t p = 0; p < k; p++) {
                exact += (double)A[i * lda + p] * B[p * ldb + j];
                magnitude += fabs((double)A[i * lda + p] * B[p * ldb + j]);
                inputs += fabs((double)A[i * lda + p]) + fabs((double)B[p * ldb + j]);
            }
            const double bound = BOUND_FACTOR * (double)(k + 1) * UNIT_ROUNDOFF * magnitude +
                                 (bgemm ? 0x1p-126 * ((double)k + 2 + inputs) : 0x1p-149 * (double)(k + 1));
            const double error = fabs((double)C[i * ldc + j] - exact);
            const double ratio = isnan(error) ? INFINITY : error == 0 ? 0 : bound == 0 ? INFINITY : error / bound;
            worst = fmax(worst, ratio);
        }
        for (int64_t j = n; j < ldc; j++)
            if (C[i * ldc + j] != C_SENTINEL)
                worst = INFINITY;
    }
    free(A);
    free(B);
    free(C0);
    free(C);
    return worst;
}

Test(cpu_gemm, general_forms_within_bound)
{
    static const float betas[] = {0.0f, 1.0f, 0.75f, -2.0f};
    static const unsigned sgemm_flags[] = {0,
                                           LACS_GEMM_A_TRANSPOSED,
                                           LACS_GEMM_B_TRANSPOSED,
                                           LACS_GEMM_A_TRANSPOSED | LACS_GEMM_B_TRANSPOSED,
                                           LACS_GEMM_A_LOWER,
                                           LACS_GEMM_C_LOWER,
                                           LACS_GEMM_A_LOWER | LACS_GEMM_B_TRANSPOSED,
                                           LACS_GEMM_C_LOWER | LACS_GEMM_A_TRANSPOSED | LACS_GEMM_B_TRANSPOSED,
                                           LACS_GEMM_B_LOWER,
                                           LACS_GEMM_B_LOWER | LACS_GEMM_B_TRANSPOSED,
                                           LACS_GEMM_B_LOWER | LACS_GEMM_A_LOWER | LACS_GEMM_C_LOWER,
                                           LACS_GEMM_B_LOWER | LACS_GEMM_A_TRANSPOSED};
    static const unsigned bgemm_flags[] = {0, LACS_GEMM_A_LOWER, LACS_GEMM_C_LOWER, LACS_GEMM_A_TRANSPOSED,
                                           LACS_GEMM_A_TRANSPOSED | LACS_GEMM_C_LOWER};
    /* square and non-square shapes, tiles cut by m and n, k past the blocks (and, for B_LOWER, panels whose
     * first block of k is all zero: n past it) */
    static const shape general_shapes[] = {{64, 64, 64}, {32, 128, 32}, {128, 128, 32}, {65, 47, 65},
                                           {17, 33, 300}, {9, 9, 9},     {1, 40, 1},     {70, 70, 600},
                                           {20, 300, 600}};
    for (int t = 0; t < N_TABLES; t++) {
        if (!runnable(tables[t]))
            continue;
        double worst = 0;
        uint64_t seed = 3000;
        for (size_t s = 0; s < sizeof general_shapes / sizeof general_shapes[0]; s++)
            for (size_t b = 0; b < sizeof betas / sizeof betas[0]; b++) {
                for (size_t f = 0; f < sizeof sgemm_flags / sizeof sgemm_flags[0]; f++) {
                    const double ratio = run_general(&general_shapes[s], betas[b], sgemm_flags[f], seed++,
                                                     tables[t]->sgemm_general, NULL);
                    cr_expect(ratio <= 1, "%s sgemm_general (%lld, %lld, %lld) beta %g flags %u: error / bound = %g",
                              tables[t]->isa, (long long)general_shapes[s].m, (long long)general_shapes[s].n,
                              (long long)general_shapes[s].k, (double)betas[b], sgemm_flags[f], ratio);
                    worst = fmax(worst, ratio);
                }
                for (size_t f = 0; f < sizeof bgemm_flags / sizeof bgemm_flags[0]; f++) {
                    const double ratio = run_general(&general_shapes[s], betas[b], bgemm_flags[f], seed++, NULL,
                                                     tables[t]->bgemm_general);
                    cr_expect(ratio <= 1, "%s bgemm_general (%lld, %lld, %lld) beta %g flags %u: error / bound = %g",
                              tables[t]->isa, (long long)general_shapes[s].m, (long long)general_shapes[s].n,
                              (long long)general_shapes[s].k, (double)betas[b], bgemm_flags[f], ratio);
                    worst = fmax(worst, ratio);
                }
            }
        cr_log_info("cpu_gemm: %s general forms: worst error / bound %.3g", tables[t]->isa, worst);
    }
}

/* B packed once and read by sgemm_packed: the same C as sgemm_general, bit for bit (the same panels, the same order of
 * every sum), for B as given and transposed, with the other options. */
Test(cpu_gemm, packed_b_gives_the_general_forms_result)
{
    static const shape packed_shapes[] = {{64, 128, 128}, {128, 128, 32}, {65, 47, 300}, {7, 33, 9}, {128, 64, 64}};
    static const unsigned flags[] = {0, LACS_GEMM_B_TRANSPOSED, LACS_GEMM_A_LOWER, LACS_GEMM_C_LOWER,
                                     LACS_GEMM_A_TRANSPOSED | LACS_GEMM_B_TRANSPOSED, LACS_GEMM_B_LOWER,
                                     LACS_GEMM_B_LOWER | LACS_GEMM_A_LOWER};
    for (int t = 0; t < N_TABLES; t++) {
        if (!runnable(tables[t]))
            continue;
        for (size_t si = 0; si < sizeof packed_shapes / sizeof packed_shapes[0]; si++)
            for (size_t f = 0; f < sizeof flags / sizeof flags[0]; f++) {
                const shape *sh = &packed_shapes[si];
                uint64_t state = 4000 + si * 10 + f;
                const int a_t = (flags[f] & LACS_GEMM_A_TRANSPOSED) != 0, b_t = (flags[f] & LACS_GEMM_B_TRANSPOSED) != 0;
                const int64_t lda = (a_t ? sh->m : sh->k) + PAD_A, ldb = (b_t ? sh->k : sh->n) + PAD_B,
                              ldc = sh->n + PAD_C;
                float *A = random_matrix(a_t ? sh->k : sh->m, a_t ? sh->m : sh->k, lda, NAN, &state);
                float *B = random_matrix(b_t ? sh->n : sh->k, b_t ? sh->k : sh->n, ldb, NAN, &state);
                if (flags[f] & LACS_GEMM_A_LOWER)
                    for (int64_t i = 0; i < sh->m; i++)
                        for (int64_t p = i + 1; p < sh->k; p++)
                            A[i * lda + p] = 0.0f;
                if (flags[f] & LACS_GEMM_B_LOWER) /* B as given here (B_TRANSPOSED not among these flags) */
                    for (int64_t p = 0; p < sh->k; p++)
                        for (int64_t j = p + 1; j < sh->n; j++)
                            B[p * ldb + j] = 0.0f;
                float *C1 = random_matrix(sh->m, sh->n, ldc, C_SENTINEL, &state);
                float *C2 = copy_of(C1, sh->m * ldc);
                float *Bp = malloc((tables[t]->packed_b_size(sh->k, sh->n) + 1) * sizeof *Bp);
                cr_assert(Bp != NULL);
                tables[t]->sgemm_general(sh->m, sh->n, sh->k, A, lda, B, ldb, C1, ldc, 0.5f, flags[f]);
                tables[t]->pack_b(sh->k, sh->n, B, ldb, flags[f], Bp);
                tables[t]->sgemm_packed(sh->m, sh->n, sh->k, A, lda, Bp, C2, ldc, 0.5f, flags[f]);
                cr_expect(memcmp(C1, C2, (size_t)(sh->m * ldc) * sizeof *C1) == 0,
                          "%s sgemm_packed (%lld, %lld, %lld) flags %u differs from sgemm_general", tables[t]->isa,
                          (long long)sh->m, (long long)sh->n, (long long)sh->k, flags[f]);
                free(A);
                free(B);
                free(C1);
                free(C2);
                free(Bp);
            }
    }
}

/* The general form taking beta as 1 whatever it is: rejected. */
static void sgemm_general_ignores_beta(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B,
                                       int64_t ldb, float *C, int64_t ldc, float beta, unsigned flags)
{
    (void)beta;
    lacs_cpu_gemm_scalar.sgemm_general(m, n, k, A, lda, B, ldb, C, ldc, 1.0f, flags);
}

/* The general form reading a transposed A as if it were not: rejected. */
static void sgemm_general_ignores_transpose(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda,
                                            const float *B, int64_t ldb, float *C, int64_t ldc, float beta,
                                            unsigned flags)
{
    lacs_cpu_gemm_scalar.sgemm_general(m, n, k, A, lda, B, ldb, C, ldc, beta, flags & ~LACS_GEMM_A_TRANSPOSED);
}

/* bgemm reading a packed A^T as if it were A row-major. */
static void bgemm_general_ignores_transpose(int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda,
                                            const uint16_t *Bp, float *C, int64_t ldc, float beta, unsigned flags)
{
    lacs_cpu_gemm_scalar.bgemm_general(m, n, k, A, lda, Bp, C, ldc, beta, flags & ~LACS_GEMM_A_TRANSPOSED);
}

Test(cpu_gemm, wrong_general_forms_are_rejected)
{
    const shape square = {32, 32, 32};
    cr_assert(run_general(&square, 0.75f, LACS_GEMM_A_TRANSPOSED, 9, lacs_cpu_gemm_scalar.sgemm_general, NULL) <= 1);
    const double ignores_beta = run_general(&square, 0.75f, 0, 9, sgemm_general_ignores_beta, NULL);
    const double ignores_transpose =
        run_general(&square, 0.75f, LACS_GEMM_A_TRANSPOSED, 9, sgemm_general_ignores_transpose, NULL);
    cr_expect(ignores_beta > 1, "a general sgemm that ignores beta passes: error / bound = %g", ignores_beta);
    cr_expect(ignores_transpose > 1, "a general sgemm that ignores A^T passes: error / bound = %g", ignores_transpose);
    cr_assert(run_general(&square, 0.75f, LACS_GEMM_A_TRANSPOSED, 9, NULL, lacs_cpu_gemm_scalar.bgemm_general) <= 1);
    const double bgemm_ignores_transpose =
        run_general(&square, 0.75f, LACS_GEMM_A_TRANSPOSED, 9, NULL, bgemm_general_ignores_transpose);
    cr_expect(bgemm_ignores_transpose > 1, "a general bgemm that ignores A^T passes: error / bound = %g",
              bgemm_ignores_transpose);
}

/* ---- wrong kernels, which the same bound must reject ---- */

/* The scalar loop, stopping one short of k (a tail lost). */
static void sgemm_skips_last_k(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B,
                               int64_t ldb, float *C, int64_t ldc, int accumulate)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float sum = accumulate ? C[i * ldc + j] : 0.0f;
            for (int64_t p = 0; p + 1 < k; p++)
                sum += A[i * lda + p] * B[p * ldb + j];
            C[i * ldc + j] = sum;
        }
}

/* B read transposed (B[j][p]); only for k == n. */
static void sgemm_transposes_b(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B,
                               int64_t ldb, float *C, int64_t ldc, int accumulate)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float sum = accumulate ? C[i * ldc + j] : 0.0f;
            for (int64_t p = 0; p < k; p++)
                sum += A[i * lda + p] * B[j * ldb + p];
            C[i * ldc + j] = sum;
        }
}

/* Overwrites C when asked to accumulate. */
static void sgemm_ignores_accumulate(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B,
                                     int64_t ldb, float *C, int64_t ldc, int accumulate)
{
    (void)accumulate;
    lacs_cpu_gemm_scalar.sgemm(m, n, k, A, lda, B, ldb, C, ldc, 0);
}

/* Writes a whole vector of 8 columns past n (an unmasked store of the tail). */
static void sgemm_stores_past_n(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B,
                                int64_t ldb, float *C, int64_t ldc, int accumulate)
{
    lacs_cpu_gemm_scalar.sgemm(m, n, k, A, lda, B, ldb, C, ldc, accumulate);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = n; j < ldc && j < (n + 7) / 8 * 8; j++)
            C[i * ldc + j] = 0;
}

/* Reads the pair (A[i][k-1], A[i][k]) for an odd k: past the row. */
static void bgemm_reads_past_row(int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda, const uint16_t *Bp,
                                 float *C, int64_t ldc, int accumulate)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float sum = accumulate ? C[i * ldc + j] : 0.0f;
            for (int64_t p = 0; p < k; p += 2) {
                const uint16_t *b = Bp + (p / 2) * 2 * n + 2 * j;
                sum += lacs_cpu_bf16_to_f32(A[i * lda + p]) * lacs_cpu_bf16_to_f32(b[0]) +
                       lacs_cpu_bf16_to_f32(A[i * lda + p + 1]) * lacs_cpu_bf16_to_f32(b[1]);
            }
            C[i * ldc + j] = sum;
        }
}

/* The sum carried in bf16 (rounded after every pair): outside the bf16 tier (SPEC.md 11.1). */
static void bgemm_accumulates_in_bf16(int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda,
                                      const uint16_t *Bp, float *C, int64_t ldc, int accumulate)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float sum = accumulate ? C[i * ldc + j] : 0.0f;
            for (int64_t p = 0; p < k; p += 2) {
                const uint16_t *b = Bp + (p / 2) * 2 * n + 2 * j;
                const float a1 = p + 1 < k ? lacs_cpu_bf16_to_f32(A[i * lda + p + 1]) : 0.0f;
                sum = lacs_cpu_round_bf16(sum + lacs_cpu_bf16_to_f32(A[i * lda + p]) * lacs_cpu_bf16_to_f32(b[0]) +
                                          a1 * lacs_cpu_bf16_to_f32(b[1]));
            }
            C[i * ldc + j] = sum;
        }
}

Test(cpu_gemm, wrong_kernels_are_rejected)
{
    /* first, the bound accepts the right scalar kernel on the shapes used below */
    const shape square = {16, 32, 32}, odd = {17, 47, 31}, chunk = {64, 128, 64};
    cr_assert(run_product(&square, 1, 5, lacs_cpu_gemm_scalar.sgemm, NULL) <= 1);
    cr_assert(run_product(&odd, 1, 5, NULL, lacs_cpu_gemm_scalar.bgemm) <= 1);

    const struct {
        const char *name;
        sgemm_fn fn;
        const shape *s;
        int accumulate;
    } wrong_s[] = {
        {"skips the last k", sgemm_skips_last_k, &chunk, 0},
        {"skips the last k (k = 1)", sgemm_skips_last_k, &shapes[9], 1},
        {"transposes B", sgemm_transposes_b, &square, 0},
        {"ignores accumulate", sgemm_ignores_accumulate, &chunk, 1},
        {"stores past n", sgemm_stores_past_n, &odd, 0},
    };
    for (size_t w = 0; w < sizeof wrong_s / sizeof wrong_s[0]; w++) {
        const double ratio = run_product(wrong_s[w].s, wrong_s[w].accumulate, 5, wrong_s[w].fn, NULL);
        cr_expect(ratio > 1, "a wrong sgemm (%s) passes the bound: error / bound = %g", wrong_s[w].name, ratio);
        cr_log_info("cpu_gemm: wrong sgemm (%s): error / bound %.3g", wrong_s[w].name, ratio);
    }
    const struct {
        const char *name;
        bgemm_fn fn;
        const shape *s;
    } wrong_b[] = {
        {"reads past the row", bgemm_reads_past_row, &odd},
        {"accumulates in bf16", bgemm_accumulates_in_bf16, &chunk},
    };
    for (size_t w = 0; w < sizeof wrong_b / sizeof wrong_b[0]; w++) {
        const double ratio = run_product(wrong_b[w].s, 0, 5, NULL, wrong_b[w].fn);
        cr_expect(ratio > 1, "a wrong bgemm (%s) passes the bound: error / bound = %g", wrong_b[w].name, ratio);
        cr_log_info("cpu_gemm: wrong bgemm (%s): error / bound %.3g", wrong_b[w].name, ratio);
    }
}

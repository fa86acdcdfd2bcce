/* builtin:cpu attention (attention.c): the two row kernels of the blocked
 * online softmax, one version per instruction set (attention.c holds the
 * scalar one; attention_rows.h the vector ones, written once and built by
 * attention_avx2.c and attention_avx512.c; call a vector one only when
 * dispatch chose its instruction set).
 *
 * A block of logits is a [rows x n] array of raw dot products q_i . k_j for
 * the n keys j0 .. j0 + n - 1 of a key block. Each row goes through
 *   1. logits_row: l_ij = scale x_ij + (row_bias - col_bias[j]) on the visible
 *      columns lo <= j < hi, -inf on the others (so that exp gives 0);
 *      returns the row's largest logit (H1's m_i, the max subtracted);
 *   2. exp_row: p_ij = exp(l_ij - m) with m the running maximum; returns
 *      sum_j p_ij (the softmax's denominator for this block). In a
 *      normalised row a weight below 2^-126 is written as 0 (below).
 * The backward (attention_backward.c) recomputes a row's weights by the same
 * two with m = the row's log-sum-exp, then
 *   3. adjoint_row: ds_ij = p_ij (dp_ij - D_i), the softmax's adjoint in
 *      FlashAttention-2's form, with the column sums of ds and the row's
 *      largest weight.
 */
#ifndef LACS_CPU_ATTENTION_KERNELS_H
#define LACS_CPU_ATTENTION_KERNELS_H

#include <stdint.h>

/* x[j] = scale * x[j] + (row_bias - col_bias[j]) for lo <= j < hi, -inf for
 * the other j < n; col_bias NULL reads as zeros. 0 <= lo, hi <= n. Returns the
 * largest x[j], -inf when lo >= hi. */
typedef float (*lacs_cpu_logits_row_fn)(int64_t n, float *x, int64_t lo, int64_t hi, float scale, float row_bias,
                                         const float *col_bias);
/* x[j] = exp(x[j] - max) for j < n (exp(-inf) = 0; max finite); returns the
 * sum of the new x[j]. exp is accurate to a few ulp, subnormal results included,
 * but where `normalised` (a softmax's row: max is the row's running maximum,
 * so that the row's denominator is at least 1, or its log-sum-exp, so that its
 * weights sum to 1) a weight below 2^-126 is written as 0 (a NaN is kept).
 * Why: a subnormal weight entering a product (the weighted values, the
 * adjoint) is a denormal operand, which costs a microcode assist per vector
 * on Intel cores: builtin:cpu's fox at T = 4096 took 242 ms with them, 43 ms
 * without, on the Xeon of README.md section 8.2.1. The term dropped is below
 * 2^-126 |v_j| against a denominator of at least 1: under 2^-100 of the
 * output's rounding (2^-24 of the row's largest weighted value) for any T
 * below 2^26. The EXP form (DeltaFormer's, no maximum subtracted) has no
 * such bound and keeps every weight (normalised = 0). */
typedef float (*lacs_cpu_exp_row_fn)(int64_t n, float *x, float max, int normalised);

/* dp[j] = p[j] (dp[j] - D) and col_sum[j] += dp[j] for j < n; *p_max = the largest p[j] (0 when n = 0);
 * returns the sum of the new dp[j]. */
typedef float (*lacs_cpu_adjoint_row_fn)(int64_t n, const float *p, float *dp, float D, float *col_sum,
                                         float *p_max);

/* out [cols x rows] (leading dimension ldo) = in [rows x cols] (ldi) transposed (simd_math.h's simd_transpose:
 * 8 x 8 blocks by shuffles): PaTH's tiles of W^T and K^T. */
typedef void (*lacs_cpu_transpose_fn)(int64_t rows, int64_t cols, const float *in, int64_t ldi, float *out,
                                      int64_t ldo);

/* Rows r0 .. r1 - 1 of PaTH's UT solve (attention.c, path_block_task), the terms of the rows before r0 already
 * added: for t = r0 .. r1 - 1 in turn, x_t <- beta_t (x_t + sum_{s = r0}^{t - 1} minus_l[t][s] x_s) over the
 * columns 0 .. n - 1 of x [rows x ld_x] (minus_l [rows x ld_l]; beta_t = beta[t * beta_stride]), each term a
 * product then a sum, s increasing: the scalar loop's arithmetic, the same bits on every instruction set. */
typedef void (*lacs_cpu_solve_rows_fn)(int64_t r0, int64_t r1, int64_t n, float *x, int64_t ld_x,
                                       const float *minus_l, int64_t ld_l, const float *beta, int64_t beta_stride);

float lacs_cpu_attention_logits_row_avx2(int64_t n, float *x, int64_t lo, int64_t hi, float scale, float row_bias,
                                          const float *col_bias);
float lacs_cpu_attention_exp_row_avx2(int64_t n, float *x, float max, int normalised);
float lacs_cpu_attention_adjoint_row_avx2(int64_t n, const float *p, float *dp, float D, float *col_sum, float *p_max);
void lacs_cpu_attention_transpose_avx2(int64_t rows, int64_t cols, const float *in, int64_t ldi, float *out,
                                       int64_t ldo);
void lacs_cpu_attention_solve_rows_avx2(int64_t r0, int64_t r1, int64_t n, float *x, int64_t ld_x,
                                        const float *minus_l, int64_t ld_l, const float *beta, int64_t beta_stride);

float lacs_cpu_attention_logits_row_avx512(int64_t n, float *x, int64_t lo, int64_t hi, float scale,
                                            float row_bias, const float *col_bias);
float lacs_cpu_attention_exp_row_avx512(int64_t n, float *x, float max, int normalised);
float lacs_cpu_attention_adjoint_row_avx512(int64_t n, const float *p, float *dp, float D, float *col_sum,
                                            float *p_max);
void lacs_cpu_attention_transpose_avx512(int64_t rows, int64_t cols, const float *in, int64_t ldi, float *out,
                                         int64_t ldo);
void lacs_cpu_attention_solve_rows_avx512(int64_t r0, int64_t r1, int64_t n, float *x, int64_t ld_x,
                                          const float *minus_l, int64_t ld_l, const float *beta, int64_t beta_stride);

#endif
